//! Fairness and bounds: one function floods or abuses the adapter while another
//! ping-pongs UDP on the same engine thread.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use qpip_testkit::*;

use crate::fixture::*;
use crate::live;

/// Round-trip times of `n` 64-byte UDP ping-pongs from `u` (on `g`) to the echo at
/// `dst`:`port`, sorted.
fn ping_pong(g: &mut FakeGuest, u: &mut Udp, dst: &str, port: u16, n: usize) -> Vec<Duration> {
    let mut rtts = Vec::with_capacity(n);
    for i in 0..n {
        g.post_recv(
            &mut u.qp,
            &[recv_wqe(i as u64, &[u.buf.sge(0, 4096, u.mr.lkey)])],
        );
        let t = Instant::now();
        g.post_send(
            &mut u.qp,
            &[inline_wqe(i as u64, ip(dst), port, &[i as u8; 64])],
        );
        let c = g
            .try_wait_cqe(&mut u.rcq, Duration::from_secs(10))
            .expect("the echo");
        rtts.push(t.elapsed());
        assert_cqe(&c, CQE_STATUS_SUCCESS, 0, "echo");
        assert_eq!(g.buf_read(&u.buf, 0, 64), [i as u8; 64]);
        assert_cqe(&g.wait_cqe(&mut u.scq), CQE_STATUS_SUCCESS, 0, "ping");
    }
    rtts.sort();
    rtts
}

#[test]
#[ignore = "a stress case: ./qpip stress"]
fn one_function_flooding_while_another_ping_pongs() {
    const ROUNDS: usize = 2000;
    let ad = adapter(3, 1, None);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let flooding = std::sync::atomic::AtomicBool::new(false);
    // Each guest lives on the thread that drives it (a fake guest's mappings stay there).
    let ready = std::sync::Barrier::new(3);
    let (idle, busy, (sent, during)) = std::thread::scope(|s| {
        let echoer = s.spawn(|| {
            let mut e = ad.guest(2);
            let ce = e.create_ctx().unwrap();
            let mut echo = e.udp_endpoint_in(ce, UNSPECIFIED, 7002, 4, 8, 4096);
            // A port that takes the flood and posts no receive: every datagram crosses the
            // switch and is dropped by this function's engine, counted.
            let _sink = e.udp_endpoint_in(ce, UNSPECIFIED, 7003, 4, 8, 64);
            ready.wait();
            echo_until(&mut e, &mut echo, &stop);
        });
        let flooder = s.spawn(|| {
            let mut f = ad.guest(0);
            let cf = f.create_ctx().unwrap();
            let mut flood = f.udp_endpoint_in(cf, UNSPECIFIED, 7000, 64, 128, 4096);
            ready.wait();
            let mut sent = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if !flooding.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                let w: Vec<_> = (0..32)
                    .map(|i| inline_wqe(i, ip(ADDRS[2]), 7003, &[0xf1; 64]))
                    .collect();
                f.post_send(&mut flood.qp, &w);
                for _ in 0..32 {
                    f.wait_cqe(&mut flood.scq);
                }
                sent += 32;
            }
            sent
        });
        let _stop = StopOnExit(&stop);
        let (mut p, mut pinger) = pinger(&ad);
        ready.wait();
        let idle = ping_pong(&mut p, &mut pinger, ADDRS[2], 7002, ROUNDS);
        flooding.store(true, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(100));
        let t = Instant::now();
        let busy = ping_pong(&mut p, &mut pinger, ADDRS[2], 7002, ROUNDS);
        let during = t.elapsed();
        stop.store(true, Ordering::Relaxed);
        echoer.join().expect("echo");
        let sent = flooder.join().expect("flood");
        (idle, busy, (sent, during))
    });
    let q = |v: &[Duration], p: usize| v[v.len() * p / 100].as_secs_f64() * 1e6;
    println!(
        "stress: one function flooding ({:.0} datagrams a second, 64 bytes, to a port of a \
         third function that drops them) while another ping-pongs with that third: UDP RTT \
         p50 {:.0} us idle, {:.0} us during ({:.1}x), p99 {:.0} / {:.0} us; one engine thread, \
         guests in this process",
        sent as f64 / during.as_secs_f64(),
        q(&idle, 50),
        q(&busy, 50),
        q(&busy, 50) / q(&idle, 50),
        q(&idle, 99),
        q(&busy, 99),
    );
    assert!(sent > 0, "the flood ran");
}

/// Function 1's guest and its UDP endpoint (port 7001), which ping-pongs with an echo on
/// function 2's port 7002 while function 0 misbehaves.
fn pinger(ad: &Adapter) -> (FakeGuest, Udp) {
    let mut p = ad.guest(1);
    let cp = p.create_ctx().unwrap();
    let pinger = p.udp_endpoint_in(cp, UNSPECIFIED, 7001, 4, 8, 4096);
    (p, pinger)
}

/// Sets `stop` when dropped: a case whose measuring thread panics (an echo that never came)
/// stops its other threads, so that the scope ends and the test fails instead of waiting
/// for them forever.
struct StopOnExit<'a>(&'a std::sync::atomic::AtomicBool);

impl Drop for StopOnExit<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Sends every datagram `echo` receives back to its sender, until `stop`.
fn echo_until(e: &mut FakeGuest, echo: &mut Udp, stop: &std::sync::atomic::AtomicBool) {
    let post = |e: &mut FakeGuest, echo: &mut Udp| {
        let whole = echo.buf.sge(0, 4096, echo.mr.lkey);
        e.post_recv(&mut echo.qp, &[recv_wqe(0, &[whole])]);
    };
    post(e, echo);
    while !stop.load(Ordering::Relaxed) {
        if let Some(c) = e.try_wait_cqe(&mut echo.rcq, Duration::from_millis(100)) {
            post(e, echo);
            echo_back(e, echo, &c);
        }
    }
}

fn echo_back(e: &mut FakeGuest, echo: &mut Udp, c: &Cqe) {
    assert_cqe(c, CQE_STATUS_SUCCESS, 0, "ping");
    let data = e.buf_read(&echo.buf, 0, c.byte_len as usize);
    let src = c.src_addr;
    e.post_send(&mut echo.qp, &[inline_wqe(1, src, c.src_port, &data)]);
    assert_cqe(&e.wait_cqe(&mut echo.scq), CQE_STATUS_SUCCESS, 0, "echo");
}

/// What a hostile function does to its adapter, over and over until told to stop.
type Abuse = fn(&mut FakeGuest, &std::sync::atomic::AtomicBool);

/// Function 0 runs `abuse` while function 1 ping-pongs UDP with function 2 on the same
/// engine thread; prints the other function's round trips idle and during, and the
/// adapter's live heap before and at its peak during (this process's counting allocator;
/// the guests' own bookkeeping is small). Asserts only the heap bound: round trips are
/// this host's to judge.
fn under_abuse(what: &str, abuse: Abuse, heap_bound: i64) {
    const ROUNDS: usize = 1000;
    // The fake guests here spin where a vCPU would halt: three busy threads on this host's
    // two CPUs. An engine that polls idle at SCHED_IDLE (the default) then waits for a CPU
    // nobody leaves it; the setting for an engine among busy threads is `normal`.
    let idle = qpip_device::engine::idle::IdleConfig {
        max_poll: Duration::from_micros(200),
        poll_sched: qpip_device::engine::idle::IdlePollSched::Normal,
        nap: false,
    };
    let ad = adapter_idle(3, 1, None, idle);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let abusing = std::sync::atomic::AtomicBool::new(false);
    let peak = AtomicI64::new(0);
    let ready = std::sync::Barrier::new(4);
    let (idle, busy, before) = std::thread::scope(|s| {
        let echoer = s.spawn(|| {
            let mut e = ad.guest(2);
            let ce = e.create_ctx().unwrap();
            let mut echo = e.udp_endpoint_in(ce, UNSPECIFIED, 7002, 4, 8, 4096);
            ready.wait();
            echo_until(&mut e, &mut echo, &stop);
        });
        let abuser = s.spawn(|| {
            let mut f = ad.guest(0);
            ready.wait();
            while !abusing.load(Ordering::Relaxed) && !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(1));
            }
            abuse(&mut f, &stop);
        });
        let sampler = s.spawn(|| {
            ready.wait();
            while !stop.load(Ordering::Relaxed) {
                peak.fetch_max(live(), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        let _stop = StopOnExit(&stop);
        let (mut p, mut pinger) = pinger(&ad);
        ready.wait();
        let idle = ping_pong(&mut p, &mut pinger, ADDRS[2], 7002, ROUNDS);
        let before = live();
        abusing.store(true, Ordering::Relaxed);
        // The abuse's own start (connections, registrations) before the measured rounds.
        std::thread::sleep(Duration::from_millis(500));
        let busy = ping_pong(&mut p, &mut pinger, ADDRS[2], 7002, ROUNDS);
        // A while longer for the abuse to reach its bounds.
        std::thread::sleep(Duration::from_millis(1500));
        stop.store(true, Ordering::Relaxed);
        echoer.join().expect("echo");
        abuser.join().expect("abuse");
        sampler.join().expect("sampler");
        (idle, busy, before)
    });
    let q = |v: &[Duration], p: usize| v[v.len() * p / 100].as_secs_f64() * 1e6;
    let grew = peak.load(Ordering::Relaxed) - before;
    println!(
        "stress: under abuse ({what}): the adapter's heap grew {} KiB at most (bound {} KiB); \
         another function's UDP RTT p50 {:.0} us idle, {:.0} us during ({:.2}x), p99 {:.0} / \
         {:.0} us; one engine thread, guests in this process",
        grew / 1024,
        heap_bound / 1024,
        q(&idle, 50),
        q(&busy, 50),
        q(&busy, 50) / q(&idle, 50),
        q(&idle, 99),
        q(&busy, 99),
    );
    assert!(
        grew <= heap_bound,
        "{what}: the heap grew {grew} bytes, beyond {heap_bound}"
    );
}

/// Bursts of admin commands, each as many as the admin queue holds.
fn admin_bursts(g: &mut FakeGuest, stop: &std::sync::atomic::AtomicBool) {
    let page = g.alloc_pages(1);
    while !stop.load(Ordering::Relaxed) {
        let ids: Vec<u32> = (0..ADMIN_DEPTH - 1)
            .map(|_| g.admin_submit(query_cmd(ADMIN_OP_QUERY_DEVICE, page, 4096)))
            .collect();
        for id in ids {
            g.admin_wait_done(id);
        }
    }
}

/// TCP sends on a loopback pair whose send CQ (depth 2) is never polled, the send ring
/// kept full, the peer receiving everything.
fn unpolled_send_cq(g: &mut FakeGuest, stop: &std::sync::atomic::AtomicBool) {
    const DEPTH: u32 = 64;
    let (sctx, cctx) = (g.create_ctx().unwrap(), g.create_ctx().unwrap());
    let mut s = g.endpoint_in(
        sctx,
        (QP_TYPE_TCP, FRAMING_STREAM),
        DEPTH,
        2 * DEPTH,
        1 << 16,
    );
    let mut c = g.endpoint_in(cctx, (QP_TYPE_TCP, FRAMING_STREAM), DEPTH, 2, 1 << 16);
    let l = g.listen(sctx, UNSPECIFIED, 7100, 4).expect("listen");
    let acc = g.submit_accept(sctx, l, s.qp.id);
    let con = g.submit_connect(cctx, c.qp.id, LOOPBACK, 7100);
    g.admin_wait_done(con);
    g.admin_wait_done(acc);
    while !stop.load(Ordering::Relaxed) {
        let sends: Vec<WqeBytes> = (0..DEPTH)
            .map(|i| tcp_send_wqe(i as u64, 0, &[c.buf.sge(0, 1024, c.mr.lkey)]))
            .collect();
        g.post_send(&mut c.qp, &sends);
        let recvs: Vec<WqeBytes> = (0..DEPTH)
            .map(|i| recv_wqe(i as u64, &[s.buf.sge(0, 1 << 16, s.mr.lkey)]))
            .collect();
        g.post_recv(&mut s.qp, &recvs);
        while g
            .try_wait_cqe(&mut s.rcq, Duration::from_millis(5))
            .is_some()
        {}
        // A guest's vCPU halts between its posts; a fake guest that spun here would be
        // one more runnable thread beside the pinger, the echo and the engine on this
        // host's two CPUs, and would measure the host's scheduler, not the device.
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Regions of MAX_MR_PAGES pages, all naming one guest page, registered until the device
/// refuses, then deregistered and registered again.
fn page_list_hoarding(g: &mut FakeGuest, stop: &std::sync::atomic::AtomicBool) {
    let ctx = g.create_ctx().unwrap();
    let page = g.alloc_pages(1);
    let list = g.page_list(&vec![page; MAX_MR_PAGES as usize]);
    let len = MAX_MR_PAGES as u64 * PAGE;
    let mut keys = Vec::new();
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        let a = mr_body(list, MAX_MR_PAGES, 0, i << 40, len, MR_ACCESS_LOCAL_WRITE);
        match g.reg_mr_args(ctx, &a) {
            Ok(mr) => keys.push(mr.lkey),
            Err(_) => {
                for k in keys.drain(..) {
                    g.dereg_mr(ctx, k).unwrap();
                }
            }
        }
    }
}

/// Loopback TCP connections whose receivers never post a receive, each sent 256 KiB: what
/// the device holds is staging, bounded per connection and by the function's pool.
fn unread_connections(g: &mut FakeGuest, stop: &std::sync::atomic::AtomicBool) {
    const CONNS: u16 = 64;
    let (sctx, cctx) = (g.create_ctx().unwrap(), g.create_ctx().unwrap());
    let mut ends = Vec::new();
    for i in 0..CONNS {
        let (s, mut c) = g.loopback_pair(sctx, cctx, 7200 + i, FRAMING_STREAM);
        let sge = c.buf.sge(0, 1 << 16, c.mr.lkey);
        g.post_send(
            &mut c.qp,
            &[
                tcp_send_wqe(1, 0, &[sge]),
                tcp_send_wqe(2, 0, &[sge]),
                tcp_send_wqe(3, 0, &[sge]),
                tcp_send_wqe(4, 0, &[sge]),
            ],
        );
        ends.push((s, c));
    }
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
#[ignore = "a stress case: ./qpip stress"]
fn abuse_admin_bursts_while_another_function_ping_pongs() {
    under_abuse("bursts of admin commands", admin_bursts, 1 << 20);
}

#[test]
#[ignore = "a stress case: ./qpip stress"]
fn abuse_an_unpolled_send_cq_while_another_function_ping_pongs() {
    under_abuse("TCP sends never polled", unpolled_send_cq, 4 << 20);
}

#[test]
#[ignore = "a stress case: ./qpip stress"]
fn abuse_page_lists_while_another_function_ping_pongs() {
    // The function's budget: DEFAULT_REGION_PAGES pages of 8 bytes, and the map's own.
    let bound = (qpip_device::engine::DEFAULT_REGION_PAGES * 8) as i64 + (2 << 20);
    under_abuse("regions of repeated pages", page_list_hoarding, bound);
}

#[test]
#[ignore = "a stress case: ./qpip stress"]
fn abuse_unread_connections_while_another_function_ping_pongs() {
    // 64 connections' staging (64 KiB each, up to 8 times that) and their state.
    under_abuse(
        "64 TCP connections never read",
        unread_connections,
        64 * ((8 * 64) << 10) + (8 << 20),
    );
}
