//! One adapter, many functions: one qpipd (in this process) serves several PCI functions,
//! each on its own vfio-user socket with its own fake guest, their engines on shared engine
//! threads, joined by the embedded switch (`backend::switch`) and, through its uplink (a
//! cable here), to a device outside the adapter. Checked: functions talk to each other and
//! to the outside, stay apart (each its own objects, keys and counters), and a function
//! whose client goes away starts afresh for the next one while the others keep working.

use std::time::{Duration, Instant};

use fixture::*;
use qpip_testkit as support;
use support::*;

#[path = "../support/adapter_fixture.rs"]
mod fixture;

/// A UDP endpoint of a guest, with the guest and the address its device has.
type Side<'a> = (&'a mut FakeGuest, &'a mut Udp, &'a str);

/// Pumps two flows (each end sending `n` bytes to the other) until both have sent and
/// received everything; panics if they stall for two minutes.
fn pump_both(
    (b, eb, fb): (&mut FakeGuest, &mut TcpEnd, &mut Flow),
    (c, ec, fc): (&mut FakeGuest, &mut TcpEnd, &mut Flow),
    n: usize,
) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !(fb.sent == n && fc.sent == n && fb.got.len() == n && fc.got.len() == n) {
        assert!(
            Instant::now() < deadline,
            "stalled: b sent {} got {}, c sent {} got {}",
            fb.sent,
            fb.got.len(),
            fc.sent,
            fc.got.len()
        );
        if !(fb.pump(b, eb) | fc.pump(c, ec)) {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

/// Sends `payload` from `from`'s endpoint to `to`'s and checks it arrives whole, from the
/// right source.
fn datagram((a, ua, src): Side<'_>, (b, ub, dst): Side<'_>, payload: &[u8]) {
    b.post_recv(
        &mut ub.qp,
        &[recv_wqe(7, &[ub.buf.sge(0, ub.buf.len as u32, ub.mr.lkey)])],
    );
    a.buf_write(&ua.buf, 0, payload);
    a.post_send(
        &mut ua.qp,
        &[send_wqe(
            8,
            ip(dst),
            ub.port,
            &[ua.buf.sge(0, payload.len() as u32, ua.mr.lkey)],
        )],
    );
    assert_cqe(&a.wait_cqe(&mut ua.scq), CQE_STATUS_SUCCESS, 0, "send");
    let rc = b
        .try_wait_cqe(&mut ub.rcq, Duration::from_secs(10))
        .unwrap_or_else(|| panic!("{} bytes to {dst} did not arrive", payload.len()));
    assert_cqe(&rc, CQE_STATUS_SUCCESS, 0, "receive");
    assert_eq!(
        (rc.byte_len as usize, rc.src_port),
        (payload.len(), ua.port)
    );
    assert_eq!(rc.src_addr, ip(src), "source address");
    assert_eq!(b.buf_read(&ub.buf, 0, payload.len()), payload);
}

/// `there` from `a` to `b`, then `back` from `b` to `a`, each checked as [`datagram`] does.
fn both_ways((a, ua, sa): Side<'_>, (b, ub, sb): Side<'_>, there: &[u8], back: &[u8]) {
    datagram((&mut *a, &mut *ua, sa), (&mut *b, &mut *ub, sb), there);
    datagram((b, ub, sb), (a, ua, sa), back);
}

fn endpoint(g: &mut FakeGuest, port: u16) -> Udp {
    let ctx = g.create_ctx().unwrap();
    g.udp_endpoint_in(ctx, UNSPECIFIED, port, 16, 32, 64 * 1024)
}

#[test]
fn functions_of_one_adapter_talk_through_its_switch() {
    let ad = adapter(2, 1, None);
    let (mut a, mut b) = (ad.guest(0), ad.guest(1));
    let (mut ua, mut ub) = (endpoint(&mut a, 7001), endpoint(&mut b, 7002));
    for n in [1usize, 1400, 9000, 65_527] {
        let payload: Vec<u8> = (0..n).map(|i| (i * 13 + n) as u8).collect();
        both_ways(
            (&mut a, &mut ua, ADDRS[0]),
            (&mut b, &mut ub, ADDRS[1]),
            &payload,
            &payload,
        );
    }
    // Between functions frames stay in the switch; each port saw its function's frames.
    let (p0, p1) = (
        ad.switch.port_stats(0).unwrap(),
        ad.switch.port_stats(1).unwrap(),
    );
    assert!(p0.frames_in > 0 && p0.frames_out > 0, "{p0:?}");
    assert!(p1.frames_in > 0 && p1.frames_out > 0, "{p1:?}");
    // Each function counts its own traffic only: 4 datagrams sent each.
    for g in [&mut a, &mut b] {
        let s = g.query_stats().counters;
        assert_eq!(s[STAT_UDP_TX as usize], 4, "{s:?}");
    }
}

#[test]
fn functions_reach_the_world_through_the_uplink() {
    let dir = ScratchDir::new("adapter-uplink");
    let cable = dir.path().join("cable");
    // The outside device opens its end of the cable first.
    let mut outside = cabled_device(
        [0x02, 0, 0, 0, 0, 0xee],
        ADDRS[2],
        &cable,
        None,
        Default::default(),
    );
    let ad = adapter(2, 2, Some(&cable));
    let mut a = ad.guest(0);
    let mut b = ad.guest(1);
    let mut ua = endpoint(&mut a, 7001);
    let mut ub = endpoint(&mut b, 7002);
    let mut uo = endpoint(&mut outside, 7003);
    for side in [(&mut a, &mut ua, ADDRS[0]), (&mut b, &mut ub, ADDRS[1])] {
        both_ways(side, (&mut outside, &mut uo, ADDRS[2]), b"out", b"in");
    }
    let up = ad.switch.uplink_stats().expect("an uplink");
    assert!(up.frames_in > 0 && up.frames_out > 0, "{up:?}");
}

#[test]
fn a_function_whose_client_goes_starts_afresh_while_the_others_keep_working() {
    let ad = adapter(2, 1, None);
    let mut b = ad.guest(1);
    let mut ub = endpoint(&mut b, 7002);
    for round in 0..3u8 {
        let mut a = ad.guest(0);
        let stats = a.query_stats().counters;
        assert_eq!(
            stats[STAT_UDP_TX as usize], 0,
            "round {round}: a fresh function"
        );
        let mut ua = endpoint(&mut a, 7001);
        both_ways(
            (&mut a, &mut ua, ADDRS[0]),
            (&mut b, &mut ub, ADDRS[1]),
            &[round; 100],
            &[round; 200],
        );
        // The guest goes (its QEMU exits): the function drops everything of it.
        drop(a);
    }
    // Function 1 served on through all of it, with its one context and QP.
    assert_eq!(b.query_stats().counters[STAT_UDP_TX as usize], 3);
}

/// A TCP stream connection from function 1's guest `b` to function 2's `c` (port 7300),
/// queues of 16 and buffers for `n` bytes a way: its two ends.
fn stream_from_1_to_2(b: &mut FakeGuest, c: &mut FakeGuest, n: usize) -> (TcpEnd, TcpEnd) {
    let (cb, cc) = (b.create_ctx().unwrap(), c.create_ctx().unwrap());
    let eb = b.tcp_endpoint_in(cb, FRAMING_STREAM, 16, Flow::buf_len(n, 16));
    let ec = c.tcp_endpoint_in(cc, FRAMING_STREAM, 16, Flow::buf_len(n, 16));
    let l = c.listen(cc, UNSPECIFIED, 7300, 4).unwrap();
    let acc = c.submit_accept(cc, l, ec.qp.id);
    let con = b.submit_connect(cb, eb.qp.id, ip(ADDRS[2]), 7300);
    c.admin_wait_ok(acc, "accept");
    b.admin_wait_ok(con, "connect");
    (eb, ec)
}

#[test]
fn a_tcp_stream_between_two_functions_keeps_every_byte_while_a_third_comes_and_goes() {
    const N: usize = 1 << 20;
    let ad = adapter(3, 1, None);
    let (mut b, mut c) = (ad.guest(1), ad.guest(2));
    let (mut eb, mut ec) = stream_from_1_to_2(&mut b, &mut c, N);
    let mut rng = Rng::new(14);
    let mut fb = Flow::new(&mut b, &eb, rng.bytes(N), 1);
    let mut fc = Flow::new(&mut c, &ec, rng.bytes(N), 2);
    std::thread::scope(|s| {
        // Meanwhile function 0's guest comes, works a little, and goes, again and again.
        let comings = s.spawn(|| {
            for round in 0..5 {
                let mut a = ad.guest(0);
                assert_eq!(a.query_stats().counters[STAT_UDP_TX as usize], 0);
                let mut ua = endpoint(&mut a, 7001);
                a.post_send(&mut ua.qp, &[inline_wqe(round, ip(ADDRS[0]), 9, b"x")]);
                assert_cqe(&a.wait_cqe(&mut ua.scq), CQE_STATUS_SUCCESS, 0, "send");
            }
        });
        pump_both((&mut b, &mut eb, &mut fb), (&mut c, &mut ec, &mut fc), N);
        comings.join().expect("function 0's guests");
    });
    assert!(fb.got == fc.out, "c -> b intact");
    assert!(fc.got == fb.out, "b -> c intact");
}

/// qpipd itself (the binary) as an adapter of two functions, the first captured: one
/// capture file holds the frames of both guests it served, one after the other.
#[test]
fn a_functions_capture_holds_every_guest_it_served() {
    let dir = ScratchDir::new("adapter-pcap");
    let (sa, sb, cap) = (dir.join("a.sock"), dir.join("b.sock"), dir.join("a.pcap"));
    let mut qpipd = std::process::Command::new(env!("CARGO_BIN_EXE_qpipd"))
        .arg("--function")
        .arg(format!(
            "socket={},ip={}/64,pcap={}",
            sa.display(),
            ADDRS[0],
            cap.display()
        ))
        .arg("--function")
        .arg(format!("socket={},ip={}/64", sb.display(), ADDRS[1]))
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let attach = |socket: &std::path::Path| {
        let deadline = Instant::now() + Duration::from_secs(10);
        let client = loop {
            if let Ok(c) = vfio_user::Client::new(socket) {
                break c;
            }
            assert!(Instant::now() < deadline, "qpipd is not listening");
            std::thread::sleep(Duration::from_millis(5));
        };
        let mut g = FakeGuest::attach(client);
        g.enable();
        g.setup_admin(ADMIN_DEPTH);
        g
    };
    let mut b = attach(&sb);
    let mut ub = endpoint(&mut b, 7002);
    for guest in [b"first guest ", b"second guest"] {
        let mut a = attach(&sa);
        let mut ua = endpoint(&mut a, 7001);
        datagram(
            (&mut a, &mut ua, ADDRS[0]),
            (&mut b, &mut ub, ADDRS[1]),
            guest,
        );
        drop(a);
    }
    // SAFETY: kill(2) on our child, not yet reaped.
    unsafe { libc::kill(qpipd.id() as i32, libc::SIGTERM) };
    assert_eq!(qpipd.wait().unwrap().code(), Some(143));
    let mut r = pcap_file::pcap::PcapReader::new(std::fs::File::open(&cap).unwrap()).unwrap();
    let mut frames = Vec::new();
    while let Some(p) = r.next_packet() {
        frames.push(p.expect("a well-formed capture").data.into_owned());
    }
    let has = |needle: &[u8]| {
        frames
            .iter()
            .any(|f| f.windows(needle.len()).any(|w| w == needle))
    };
    assert!(
        has(b"first guest ") && has(b"second guest"),
        "{} frames: {:?}",
        frames.len(),
        frames.iter().map(|f| f.len()).collect::<Vec<_>>()
    );
}

/// Functions of one adapter cannot reach each other's objects: every handle of one
/// function's guest (context, CQ, QP, memory key, listener) is unknown to the other's
/// device, a WR naming the other's memory key fails without touching memory, and each
/// function's counters are its own.
#[test]
fn one_functions_handles_mean_nothing_to_another() {
    let ad = adapter(2, 1, None);
    let (mut a, mut b) = (ad.guest(0), ad.guest(1));
    let cb = b.create_ctx().unwrap();
    let ub = b.udp_endpoint_in(cb, UNSPECIFIED, 7002, 4, 8, 4096);
    let lb = b.listen(cb, UNSPECIFIED, 7100, 4).unwrap();
    let ca = a.create_ctx().unwrap();
    let mut ua = endpoint(&mut a, 7001);
    // b's objects, named to a's device (in a's context, and in b's context number).
    let unknown = |r, what| assert_admin_err(r, ADMIN_STATUS_BAD_HANDLE, what);
    for ctx in [ca, cb] {
        unknown(a.destroy_qp(ctx, ub.qp.id), "b's QP");
        unknown(a.destroy_cq(ctx, ub.scq.id), "b's CQ");
        unknown(a.dereg_mr(ctx, ub.mr.lkey), "b's key");
        unknown(a.destroy_listener(ctx, lb), "b's listener");
    }
    // A send gathering from b's memory key: a protection error, and b's buffer untouched.
    b.buf_write(&ub.buf, 0, &[0x5a; 64]);
    a.post_send(
        &mut ua.qp,
        &[send_wqe(
            9,
            ip(ADDRS[1]),
            7002,
            &[ub.buf.sge(0, 64, ub.mr.lkey)],
        )],
    );
    let c = a.wait_cqe(&mut ua.scq);
    assert_eq!(c.status, CQE_STATUS_LOCAL_PROTECTION, "{c:?}");
    assert_eq!(b.buf_read(&ub.buf, 0, 64), [0x5a; 64]);
    // b's objects all still work, and neither counted the other's commands.
    b.destroy_listener(cb, lb).unwrap();
    let (sa, sb) = (a.query_stats().counters, b.query_stats().counters);
    assert_eq!(sa[STAT_PROTECTION_ERRORS as usize], 1);
    assert_eq!(sb[STAT_PROTECTION_ERRORS as usize], 0);
}

/// A burst of fragmented datagrams from one function to another on the same engine
/// thread, every one with a receive posted for it: each arrives, and the receiver's switch
/// port drops nothing. A sender's pass is bounded in frames, not only in WQEs: bounded in
/// WQEs (32 datagrams of 6 fragments) it put three times what the receiver takes per pass
/// into the port, whose queue then overflowed.
#[test]
fn a_burst_of_fragmented_datagrams_between_functions_loses_nothing_in_the_switch() {
    const N: u32 = 256;
    const SIZE: usize = 8192;
    let ad = adapter(2, 1, None);
    let (mut a, mut b) = (ad.guest(0), ad.guest(1));
    let mut ua = {
        let ctx = a.create_ctx().unwrap();
        a.udp_endpoint_in(ctx, UNSPECIFIED, 7101, N, 2 * N, N as u64 * SIZE as u64)
    };
    let mut ub = {
        let ctx = b.create_ctx().unwrap();
        b.udp_endpoint_in(ctx, UNSPECIFIED, 7102, N, 2 * N, N as u64 * SIZE as u64)
    };
    // Each learns the other's MAC first: datagrams waiting for a neighbour are held only
    // a few at a time.
    datagram(
        (&mut a, &mut ua, ADDRS[0]),
        (&mut b, &mut ub, ADDRS[1]),
        b"hello",
    );
    datagram(
        (&mut b, &mut ub, ADDRS[1]),
        (&mut a, &mut ua, ADDRS[0]),
        b"hello",
    );
    let recvs: Vec<_> = (0..N)
        .map(|i| {
            let off = i as u64 * SIZE as u64;
            recv_wqe(i as u64, &[ub.buf.sge(off, SIZE as u32, ub.mr.lkey)])
        })
        .collect();
    b.post_recv(&mut ub.qp, &recvs);
    let sends: Vec<_> = (0..N)
        .map(|i| {
            let off = i as u64 * SIZE as u64;
            a.buf_write(&ua.buf, off, &vec![i as u8; SIZE]);
            let sge = ua.buf.sge(off, SIZE as u32, ua.mr.lkey);
            send_wqe(i as u64, ip(ADDRS[1]), ub.port, &[sge])
        })
        .collect();
    // All at once, one doorbell: the engine finds the whole burst on its first pass.
    a.post_send(&mut ua.qp, &sends);
    for _ in 0..N {
        assert_cqe(&a.wait_cqe(&mut ua.scq), CQE_STATUS_SUCCESS, 0, "send");
    }
    let mut got = 0;
    while let Some(c) = b.try_wait_cqe(&mut ub.rcq, Duration::from_secs(5)) {
        assert_cqe(&c, CQE_STATUS_SUCCESS, 0, "receive");
        assert_eq!(c.byte_len as usize, SIZE);
        let off = c.wr_id * SIZE as u64;
        let data = b.buf_read(&ub.buf, off, SIZE);
        assert!(
            data.iter().all(|&x| x == c.wr_id as u8),
            "receive {} holds datagram {} (the ones between were lost)",
            c.wr_id,
            data[0]
        );
        got += 1;
        if got == N {
            break;
        }
    }
    let port = ad.switch.port_stats(1).unwrap();
    assert_eq!(
        (got, port.queue_full),
        (N, 0),
        "received, dropped: {port:?}"
    );
}

/// Each thread of a process, by name, with its state (`R` running, `S` sleeping, ...) and
/// scheduling policy (`SCHED_OTHER` 0, `SCHED_BATCH` 3, `SCHED_IDLE` 5, ...), from /proc.
fn threads(pid: u32) -> Vec<(String, char, i32)> {
    let mut out = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let t = t.unwrap().path();
        let (Ok(comm), Ok(stat)) = (
            std::fs::read_to_string(t.join("comm")),
            std::fs::read_to_string(t.join("stat")),
        ) else {
            continue; // the thread ended meanwhile
        };
        // Fields after the name (which may hold spaces) start at field 3, the state;
        // the policy is field 41.
        let after: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
        let state = after[0].chars().next().unwrap();
        let policy = after[41 - 3].parse().unwrap();
        out.push((comm.trim().to_string(), state, policy));
    }
    out.sort();
    out
}

/// The scheduling policy of each thread of a process, by thread name.
fn thread_policies(pid: u32) -> Vec<(String, i32)> {
    threads(pid).into_iter().map(|(n, _, p)| (n, p)).collect()
}

/// A real `qpipd` (the binary) serving two functions, `ADDRS[0]` and `ADDRS[1]`, their
/// sockets in `dir`, started with `args`; and a guest attached to each.
fn qpipd_with_two_guests(
    dir: &ScratchDir,
    args: &[&str],
) -> (std::process::Child, FakeGuest, FakeGuest) {
    let (sa, sb) = (dir.join("a.sock"), dir.join("b.sock"));
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_qpipd"));
    for (s, ip) in [(&sa, ADDRS[0]), (&sb, ADDRS[1])] {
        cmd.arg("--function")
            .arg(format!("socket={},ip={ip}/64", s.display()));
    }
    cmd.args(args);
    let qpipd = cmd.stderr(std::process::Stdio::null()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !(sa.exists() && sb.exists()) {
        assert!(Instant::now() < deadline, "qpipd is not listening");
        std::thread::sleep(Duration::from_millis(5));
    }
    let attach = |socket: &std::path::Path| {
        let mut g = FakeGuest::attach(vfio_user::Client::new(socket).unwrap());
        g.enable();
        g.setup_admin(ADMIN_DEPTH);
        g
    };
    let (a, b) = (attach(&sa), attach(&sb));
    (qpipd, a, b)
}

/// Stops a `qpipd` of [`qpipd_with_two_guests`] (after its guests): SIGTERM, exit status 143.
fn stop_qpipd(mut qpipd: std::process::Child) {
    // SAFETY: kill(2) on our child, not yet reaped.
    unsafe { libc::kill(qpipd.id() as i32, libc::SIGTERM) };
    assert_eq!(qpipd.wait().unwrap().code(), Some(143));
}

/// `--control-sched batch` makes the control threads (which QEMU's kicks wake) batch
/// threads and leaves the engine's alone; by default every thread time-shares as usual.
/// Either way the functions serve.
#[test]
fn control_threads_run_batch_when_told_and_the_functions_still_serve() {
    for batch in [false, true] {
        let dir = ScratchDir::new("adapter-sched");
        let args: &[&str] = if batch {
            &["--control-sched=batch"]
        } else {
            &[]
        };
        let (qpipd, mut a, mut b) = qpipd_with_two_guests(&dir, args);
        let (mut ua, mut ub) = (endpoint(&mut a, 7001), endpoint(&mut b, 7002));
        datagram(
            (&mut a, &mut ua, ADDRS[0]),
            (&mut b, &mut ub, ADDRS[1]),
            b"while scheduled",
        );
        let policies = thread_policies(qpipd.id());
        let of = |prefix: &str| -> Vec<i32> {
            policies
                .iter()
                .filter(|(n, _)| n.starts_with(prefix))
                .map(|&(_, p)| p)
                .collect()
        };
        let want = if batch {
            libc::SCHED_BATCH
        } else {
            libc::SCHED_OTHER
        };
        assert_eq!(of("qpip-ctl-"), [want, want], "batch {batch}: {policies:?}");
        // The engine's own policy, or SCHED_IDLE while it polls idle (the next test).
        assert!(
            !of("qpip-engine").is_empty()
                && of("qpip-engine")
                    .iter()
                    .all(|&p| p == libc::SCHED_OTHER || p == libc::SCHED_IDLE),
            "batch {batch}: {policies:?}"
        );
        drop((a, b));
        stop_qpipd(qpipd);
    }
}

/// Runnable threads host-wide (`/proc/loadavg`'s fourth field, before the slash).
fn runnable_threads() -> Option<usize> {
    let l = std::fs::read_to_string("/proc/loadavg").ok()?;
    l.split_whitespace().nth(3)?.split('/').next()?.parse().ok()
}

/// The policy of qpipd's engine thread now.
fn engine_policy(pid: u32) -> i32 {
    engine_thread(pid).1
}

/// The state and policy of qpipd's one engine thread now.
fn engine_thread(pid: u32) -> (char, i32) {
    let found: Vec<(char, i32)> = threads(pid)
        .into_iter()
        .filter(|(n, _, _)| n.starts_with("qpip-engine"))
        .map(|(_, s, p)| (s, p))
        .collect();
    assert_eq!(found.len(), 1, "one engine thread: {found:?}");
    found[0]
}

/// By default the engine polls idle as a `SCHED_IDLE` thread (once it has polled a moment
/// at its own priority) and goes back to its own policy to sleep; with
/// `--idle-poll-sched normal` it never leaves its own. Either way a kick wakes it and the
/// functions serve. (Lowering needs the right to come back, as root has: without it the
/// engine polls at its own priority, and so this test expects.)
#[test]
fn the_engine_polls_idle_as_sched_idle_and_sleeps_at_its_own_policy() {
    // SAFETY: no arguments.
    let root = unsafe { libc::geteuid() } == 0;
    for normal in [false, true] {
        let dir = ScratchDir::new("adapter-idle-sched");
        // A budget long enough to look at the engine while it polls after a datagram.
        let mut args = vec!["--idle-poll-us=2000000"];
        if normal {
            args.push("--idle-poll-sched=normal");
        }
        let (qpipd, mut a, mut b) = qpipd_with_two_guests(&dir, &args);
        let pid = qpipd.id();
        let (mut ua, mut ub) = (endpoint(&mut a, 7001), endpoint(&mut b, 7002));
        // After each datagram the engine polls (for up to two seconds): looked at for a
        // moment each time. It lowers itself only when a CPU is free of other work, so
        // the lowering is checked only if this host gave it the chance: windows in which
        // every look at /proc/loadavg found no more runnable threads than CPUs (this
        // thread, reading, is one; the engine another). A host busy with other work
        // throughout leaves the lowering unchecked, and says so.
        let lowered = !normal && root;
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut seen = Vec::new();
        let mut quiet_windows = 0;
        for _ in 0..if lowered { 200 } else { 3 } {
            datagram(
                (&mut a, &mut ua, ADDRS[0]),
                (&mut b, &mut ub, ADDRS[1]),
                b"then poll",
            );
            let until = Instant::now() + Duration::from_millis(150);
            let mut quiet = true;
            while Instant::now() < until {
                let p = engine_policy(pid);
                if !seen.contains(&p) {
                    seen.push(p);
                }
                quiet &= runnable_threads().is_some_and(|r| r <= cpus);
                std::thread::sleep(Duration::from_millis(2));
            }
            quiet_windows += usize::from(quiet);
            if lowered && (seen.contains(&libc::SCHED_IDLE) || quiet_windows >= 5) {
                break;
            }
        }
        let want = if lowered && quiet_windows == 0 && !seen.contains(&libc::SCHED_IDLE) {
            eprintln!(
                "this host never had a CPU free of other work while the engine polled: \
                 its lowering to SCHED_IDLE is not checked"
            );
            libc::SCHED_OTHER
        } else if lowered {
            libc::SCHED_IDLE
        } else {
            libc::SCHED_OTHER
        };
        assert!(
            seen.contains(&want)
                && seen
                    .iter()
                    .all(|&p| p == libc::SCHED_OTHER || (lowered && p == libc::SCHED_IDLE)),
            "normal {normal}, root {root}: policies seen while it polled: {seen:?} \
             (SCHED_OTHER {}, SCHED_IDLE {}; windows with a CPU free: {quiet_windows})",
            libc::SCHED_OTHER,
            libc::SCHED_IDLE
        );
        // Once the budget is spent the engine sleeps, back at its own policy (a thread
        // that slept lowered would wait behind every runnable thread once woken).
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut last = engine_thread(pid);
        while last != ('S', libc::SCHED_OTHER) {
            assert!(
                Instant::now() < deadline,
                "the engine does not sleep at its own policy: state, policy {last:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
            last = engine_thread(pid);
        }
        // Woken (or still polling), it serves.
        datagram(
            (&mut b, &mut ub, ADDRS[1]),
            (&mut a, &mut ua, ADDRS[0]),
            b"after",
        );
        drop((a, b));
        stop_qpipd(qpipd);
    }
}

/// A guest cannot take another function's MAC or address on the same adapter: SET_MAC
/// and ADD_ADDR fail with ADDR_IN_USE, for the other's configured identity too while it
/// has moved away from it. Its own changes are claimed with the switch, so its traffic
/// goes on (nothing it sends is dropped as spoofed), after a reset as well.
#[test]
fn a_guest_cannot_take_another_functions_mac_or_address() {
    let ad = adapter(2, 1, None);
    let (mut a, mut b) = (ad.guest(0), ad.guest(1));
    let ll0 = link_local(mac(0));
    assert_eq!(b.set_mac(mac(0)), Err(ADMIN_STATUS_ADDR_IN_USE));
    assert_eq!(b.add_addr(ip(ADDRS[0]), 64), Err(ADMIN_STATUS_ADDR_IN_USE));
    assert_eq!(b.add_addr(ll0, 64), Err(ADMIN_STATUS_ADDR_IN_USE));
    assert_eq!(
        b.query_device().mac,
        mac(1),
        "a refused SET_MAC changes nothing"
    );
    // Its own new MAC and address are its.
    let fresh_mac = [0x02, 0x51, 0x50, 0, 0x0b, 0x99];
    let fresh = "fd51:5050::1:99";
    b.set_mac(fresh_mac).unwrap();
    b.add_addr(ip(fresh), 64).unwrap();
    // Its configured MAC stays reserved for it while it uses another.
    assert_eq!(a.set_mac(mac(1)), Err(ADMIN_STATUS_ADDR_IN_USE));
    assert_eq!(a.add_addr(ip(fresh), 64), Err(ADMIN_STATUS_ADDR_IN_USE));
    let (mut ua, mut ub) = (endpoint(&mut a, 7001), endpoint(&mut b, 7002));
    both_ways(
        (&mut a, &mut ua, ADDRS[0]),
        (&mut b, &mut ub, fresh),
        b"to the new address",
        b"from it",
    );
    b.del_addr(ip(fresh)).unwrap();
    both_ways(
        (&mut a, &mut ua, ADDRS[0]),
        (&mut b, &mut ub, ADDRS[1]),
        b"to the configured address",
        b"from it",
    );
    // A reset gives it its configured identity back, and it works. (It speaks first:
    // its neighbour solicitation tells the other its MAC is back to the configured one.)
    b.reset();
    b.enable();
    b.setup_admin(ADMIN_DEPTH);
    assert_eq!(b.query_device().mac, mac(1));
    let mut ub = endpoint(&mut b, 7002);
    both_ways(
        (&mut b, &mut ub, ADDRS[1]),
        (&mut a, &mut ua, ADDRS[0]),
        b"after the reset",
        b"back",
    );
    for i in 0..2 {
        let s = ad.switch.port_stats(i).unwrap();
        assert_eq!(s.spoofed, 0, "function {i}'s own frames: {s:?}");
    }
}

/// Waits until function `g`'s REG_STATUS has `bit` set (`set`) or clear; returns it.
fn status_becomes(g: &mut FakeGuest, bit: u32, set: bool, what: &str) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = g.reg_read(REG_STATUS);
        if (s & bit != 0) == set {
            return s;
        }
        assert!(Instant::now() < deadline, "{what}: REG_STATUS {s:#x}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Function 0's engine panics (the test hook of the in-process API) on the engine thread
/// it shares with functions 1 and 2. Function 0 fails alone: its driver reads
/// STATUS_FAILED, its register accesses and admin doorbells are answered at once (no
/// completion comes: the failed function does nothing for its guest), and a reset gives
/// it a fresh engine that serves again. Functions 1 and 2 meanwhile keep a TCP connection
/// made before the fault carrying every byte, UDP between them, and their admin queues.
#[test]
fn a_panic_in_one_functions_engine_fails_that_function_only() {
    const N: usize = 256 * 1024;
    let ad = adapter(3, 1, None);
    let (mut a, mut b, mut c) = (ad.guest(0), ad.guest(1), ad.guest(2));
    let (mut ua, mut ub, mut uc) = (
        endpoint(&mut a, 7001),
        endpoint(&mut b, 7002),
        endpoint(&mut c, 7003),
    );
    both_ways(
        (&mut a, &mut ua, ADDRS[0]),
        (&mut b, &mut ub, ADDRS[1]),
        b"before",
        b"the fault",
    );
    // A TCP connection between functions 1 and 2, made before the fault.
    let (mut eb, mut ec) = stream_from_1_to_2(&mut b, &mut c, N);

    ad.faults[0].panic_next_turn();
    a.kick(); // the thread may be asleep
    let s = status_becomes(
        &mut a,
        STATUS_FAILED,
        true,
        "function 0 reports its failure",
    );
    assert_ne!(s & STATUS_READY, 0, "still enabled: {s:#x}");
    for g in [&mut b, &mut c] {
        let s = g.reg_read(REG_STATUS);
        assert_eq!(
            s & STATUS_FAILED,
            0,
            "another function is not failed: {s:#x}"
        );
    }

    // The failed function's admin doorbell is taken at once and gets no completion; its
    // registers answer; it sends nothing (function 1 receives nothing from it).
    let started = Instant::now();
    let page = a.alloc_pages(1);
    let id = a.admin_submit(query_cmd(ADMIN_OP_QUERY_STATS, page, 4096));
    assert!(
        a.admin_next(Duration::from_millis(300)).is_none(),
        "command {id} answered"
    );
    let whole = ub.buf.sge(0, ub.buf.len as u32, ub.mr.lkey);
    b.post_recv(&mut ub.qp, &[recv_wqe(99, &[whole])]);
    a.post_send(
        &mut ua.qp,
        &[inline_wqe(1, ip(ADDRS[1]), 7002, b"from a failed function")],
    );
    a.kick();
    assert_eq!(a.reg_read(REG_IDENT), IDENT_MAGIC);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(
        b.try_wait_cqe(&mut ub.rcq, Duration::from_millis(300))
            .is_none(),
        "the failed function sent a datagram"
    );

    // Functions 1 and 2 serve on: every byte of the stream both ways, datagrams, admin.
    let mut rng = Rng::new(15);
    let mut fb = Flow::new(&mut b, &eb, rng.bytes(N), 1);
    let mut fc = Flow::new(&mut c, &ec, rng.bytes(N), 2);
    pump_both((&mut b, &mut eb, &mut fb), (&mut c, &mut ec, &mut fc), N);
    assert!(fb.got == fc.out && fc.got == fb.out, "the stream is intact");
    both_ways(
        (&mut b, &mut ub, ADDRS[1]),
        (&mut c, &mut uc, ADDRS[2]),
        b"after",
        b"the fault",
    );
    b.create_ctx().unwrap();
    assert_eq!(c.query_stats().counters[STAT_UDP_TX as usize], 1);

    // Its driver resets it: a fresh engine, no objects, its link back.
    a.reset();
    let s = a.reg_read(REG_STATUS);
    assert_eq!(s & STATUS_FAILED, 0, "reset clears the failure: {s:#x}");
    a.enable();
    a.setup_admin(ADMIN_DEPTH);
    assert_eq!(
        a.query_stats().counters[STAT_UDP_TX as usize],
        0,
        "a fresh engine"
    );
    let mut ua = endpoint(&mut a, 7001);
    both_ways(
        (&mut a, &mut ua, ADDRS[0]),
        (&mut b, &mut ub, ADDRS[1]),
        b"after",
        b"its reset",
    );
}

/// The functions' link follows the switch's uplink, as SR-IOV VFs in "auto" link mode:
/// STATUS_LINK_UP is set while the uplink is up, and when the uplink goes down and up
/// again each function's driver reads the change in REG_STATUS and gets an
/// ASYNC_EVENT_LINK (context 0, the new state as its object) for each change. Frames a
/// function sends meanwhile are dropped.
#[test]
fn the_functions_link_follows_the_uplink() {
    let (near, mut far) = qpip_device::backend::memory::pair().unwrap();
    let plug = near.plug();
    let ad = adapter_on(2, 1, Some(Box::new(near)));
    let (mut a, mut b) = (ad.guest(0), ad.guest(1));
    for g in [&mut a, &mut b] {
        status_becomes(g, STATUS_LINK_UP, true, "up at start");
    }
    let drain = |far: &mut qpip_device::backend::memory::MemoryLink| {
        let mut buf = vec![0u8; 70000];
        let mut n = 0;
        while qpip_device::backend::Backend::recv(far, &mut buf)
            .unwrap()
            .is_some()
        {
            n += 1;
        }
        n
    };

    let reqs = [a.submit_async_event(), b.submit_async_event()];
    plug.set_up(false);
    for (g, req) in [(&mut a, reqs[0]), (&mut b, reqs[1])] {
        status_becomes(g, STATUS_LINK_UP, false, "down with the uplink");
        let e = g.admin_wait(req, Duration::from_secs(10)).expect("LINK");
        assert_eq!(async_event(&e), (0, 0, ASYNC_EVENT_LINK, 0, false));
        // Still ready: the link is not the function's state.
        assert_ne!(g.reg_read(REG_STATUS) & STATUS_READY, 0);
    }
    drain(&mut far);
    // What A sends for an address added (duplicate address detection) goes nowhere.
    let addr: std::net::Ipv6Addr = "fd00:77::1".parse().unwrap();
    a.add_addr(addr.octets(), 64).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        drain(&mut far),
        0,
        "nothing reaches the uplink while it is down"
    );

    let reqs = [a.submit_async_event(), b.submit_async_event()];
    plug.set_up(true);
    for (g, req) in [(&mut a, reqs[0]), (&mut b, reqs[1])] {
        status_becomes(g, STATUS_LINK_UP, true, "up with the uplink");
        let e = g.admin_wait(req, Duration::from_secs(10)).expect("LINK");
        assert_eq!(async_event(&e), (0, 1, ASYNC_EVENT_LINK, 0, false));
    }
}
