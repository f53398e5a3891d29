//! Stress cases of one adapter (`./qpip stress`): long or large runs, bounded in time and
//! stopping by themselves, each printing one result line (`stress: ...`; docs/testing.md).
//! They are `#[ignore]`d so that `./qpip test` does not run them; `./qpip stress` runs them
//! in a release build, one at a time.
//!
//! The process counts its live heap bytes (a counting allocator around the system's), so
//! the device's memory per connection is measured, not estimated: the adapter runs in this
//! process, and the test's own bookkeeping per QP is a few small vectors (said beside the
//! figure).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use std::io::{Read, Write};
use std::net::TcpStream;

use fixture::*;
use qpip_device::backend::{open_link, NetSpec};
use qpip_testkit::*;

#[path = "../adapter/fixture.rs"]
mod fixture;
#[path = "../netns/mod.rs"]
mod netns;

/// The system allocator, counting the bytes live.
struct Counting;

static LIVE: AtomicI64 = AtomicI64::new(0);

// SAFETY: every call is passed to the system allocator unchanged; only a counter is kept
// beside it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as i64, Ordering::Relaxed);
        // SAFETY: the caller's layout, as GlobalAlloc::alloc requires.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as i64, Ordering::Relaxed);
        // SAFETY: `p` came from System with layout `l`.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as i64, Ordering::Relaxed);
        // SAFETY: as alloc.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as i64 - l.size() as i64, Ordering::Relaxed);
        // SAFETY: `p` came from System with layout `l`; `new` as the caller gives it.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// QPs per context: the doorbell page's slots.
const PER_CTX: usize = DB_QP_SLOTS as usize;
/// Bytes of each message.
const MSG: usize = 64;

/// One side's QPs: per context its CQs, its buffer and its QPs.
struct Side {
    ctxs: Vec<SideCtx>,
}

struct SideCtx {
    ctx: u32,
    scq: Cq,
    rcq: Cq,
    buf: Buf,
    mr: Mr,
    qps: Vec<Qp>,
    listener: Option<u32>,
}

impl Side {
    /// `n` TCP QPs (message framing, queues of 2) in contexts of [`PER_CTX`].
    fn new(g: &mut FakeGuest, n: usize) -> Side {
        let mut ctxs = Vec::new();
        let mut left = n;
        while left > 0 {
            let k = left.min(PER_CTX);
            let ctx = g.create_ctx().expect("a context");
            let depth = (2 * k as u32).next_power_of_two();
            let scq = g.create_cq(ctx, depth).expect("send CQ");
            let rcq = g.create_cq(ctx, depth).expect("receive CQ");
            let buf = g.alloc_buf((2 * k * MSG) as u64, 0);
            let mr = g.reg_mr(ctx, &buf, MR_ACCESS_LOCAL_WRITE).expect("MR");
            let qps = (0..k)
                .map(|_| {
                    g.create_qp_typed(ctx, scq.id, rcq.id, 2, 2, QP_TYPE_TCP, FRAMING_MESSAGE)
                        .expect("a TCP QP")
                })
                .collect();
            ctxs.push(SideCtx {
                ctx,
                scq,
                rcq,
                buf,
                mr,
                qps,
                listener: None,
            });
            left -= k;
        }
        Side { ctxs }
    }

    fn qps(&self) -> usize {
        self.ctxs.iter().map(|c| c.qps.len()).sum()
    }
}

/// One round: every QP of both sides posts a receive, then sends one message naming
/// itself and the round; every message arrives once, intact, at its peer.
fn round(a: &mut FakeGuest, sa: &mut Side, b: &mut FakeGuest, sb: &mut Side, r: u32) {
    for (g, s) in [(&mut *a, &mut *sa), (&mut *b, &mut *sb)] {
        for c in &mut s.ctxs {
            for (i, qp) in c.qps.iter_mut().enumerate() {
                let at = ((2 * i + 1) * MSG) as u64;
                g.post_recv(
                    qp,
                    &[recv_wqe(i as u64, &[c.buf.sge(at, MSG as u32, c.mr.lkey)])],
                );
            }
        }
    }
    for (side, (g, s)) in [(&mut *a, &mut *sa), (&mut *b, &mut *sb)]
        .into_iter()
        .enumerate()
    {
        for (k, c) in s.ctxs.iter_mut().enumerate() {
            for (i, qp) in c.qps.iter_mut().enumerate() {
                let msg = message(side, k, i, r);
                let at = (2 * i * MSG) as u64;
                g.buf_write(&c.buf, at, &msg);
                g.post_send(
                    qp,
                    &[tcp_send_wqe(
                        i as u64,
                        r,
                        &[c.buf.sge(at, MSG as u32, c.mr.lkey)],
                    )],
                );
            }
        }
    }
    for (side, (g, s)) in [(&mut *a, &mut *sa), (&mut *b, &mut *sb)]
        .into_iter()
        .enumerate()
    {
        for (k, c) in s.ctxs.iter_mut().enumerate() {
            let n = c.qps.len();
            let (mut sent, mut got) = (0, 0);
            let deadline = Instant::now() + Duration::from_secs(60);
            while sent < n || got < n {
                assert!(
                    Instant::now() < deadline,
                    "round {r}: context {k}: {sent}/{n} sent, {got}/{n} received"
                );
                let mut any = false;
                while let Some(cqe) = g.poll_cq(&mut c.scq) {
                    assert_cqe(&cqe, CQE_STATUS_SUCCESS, 0, "send");
                    sent += 1;
                    any = true;
                }
                while let Some(cqe) = g.poll_cq(&mut c.rcq) {
                    assert_cqe(&cqe, CQE_STATUS_SUCCESS, 0, "receive");
                    let i = cqe.wr_id as usize;
                    assert_eq!((cqe.byte_len as usize, cqe.imm_data), (MSG, r));
                    let at = ((2 * i + 1) * MSG) as u64;
                    // The peer's QP i of context k sent it: connections pair them so.
                    assert_eq!(g.buf_read(&c.buf, at, MSG), message(1 - side, k, i, r));
                    got += 1;
                    any = true;
                }
                if !any {
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
        }
    }
}

/// The message QP `i` of context `k` of side `side` sends in round `r`.
fn message(side: usize, k: usize, i: usize, r: u32) -> Vec<u8> {
    let mut m = format!("side {side} ctx {k} qp {i} round {r} ").into_bytes();
    m.resize(MSG, b'.');
    m
}

fn live() -> i64 {
    LIVE.load(Ordering::Relaxed)
}

#[test]
#[ignore = "a stress case: ./qpip stress"]
fn ten_thousand_tcp_qps_on_one_adapter() {
    const PAIRS: usize = 5_000;
    let start = Instant::now();
    let ad = adapter(2, 1, None);
    // Rings of 10,000 QPs (scattered pages, page lists) need more than the usual RAM.
    let ram = 512 << 20;
    let (mut a, mut b) = (ad.guest_with_ram(0, ram), ad.guest_with_ram(1, ram));
    let before = live();
    let mut sa = Side::new(&mut a, PAIRS);
    let mut sb = Side::new(&mut b, PAIRS);
    // Every QP of b accepts on its context's listener; every QP of a connects to the QP of
    // the same place in b (context k, QP i), one at a time, so the pairs are known.
    for (k, c) in sb.ctxs.iter_mut().enumerate() {
        c.listener = Some(
            b.listen(c.ctx, UNSPECIFIED, 9000 + k as u16, 1)
                .expect("a listener"),
        );
    }
    for k in 0..sa.ctxs.len() {
        for i in 0..sa.ctxs[k].qps.len() {
            let (cb, cq) = (&sb.ctxs[k], &sa.ctxs[k]);
            let acc = b.submit_accept(cb.ctx, cb.listener.unwrap(), cb.qps[i].id);
            let con = a.submit_connect(cq.ctx, cq.qps[i].id, ip(ADDRS[1]), 9000 + k as u16);
            a.admin_wait_ok(con, "connect");
            b.admin_wait_ok(acc, "accept");
        }
    }
    let established = start.elapsed();
    let t = Instant::now();
    const ROUNDS: u32 = 3;
    for r in 1..=ROUNDS {
        round(&mut a, &mut sa, &mut b, &mut sb, r);
    }
    let moving = t.elapsed();
    // Idle: what the device holds per QP with its connection (both ends are this adapter's).
    std::thread::sleep(Duration::from_millis(200));
    let qps = sa.qps() + sb.qps();
    // Less this test's own record of each QP (its struct in a vector, and its two ring
    // page lists of one page each), counted by the same allocator.
    let own = (std::mem::size_of::<Qp>() + 2 * std::mem::size_of::<u64>()) as i64;
    let per_qp = (live() - before) / qps as i64 - own;
    let sa_stats = a.query_stats().counters;
    let sb_stats = b.query_stats().counters;
    println!(
        "stress: {qps} TCP QPs ({PAIRS} connections) on one adapter of 2 functions: connected in {:.1} s, \
         {ROUNDS} rounds of a {MSG}-byte message each way on every connection in {:.1} s, every byte checked; \
         device heap per QP with its connection {per_qp} bytes (rings in guest RAM apart); \
         segments in {} / {}",
        established.as_secs_f64(),
        moving.as_secs_f64(),
        sa_stats[STAT_TCP_SEGS_IN as usize],
        sb_stats[STAT_TCP_SEGS_IN as usize],
    );
    assert!(per_qp > 0, "the count saw the QPs");
}

/// Bytes each echo QP receives into at once (its slot of its context's buffer).
const SLOT: u64 = 4096;

/// A guest's TCP echo server for the lab host's sockets: stream QPs in contexts of
/// [`PER_CTX`], a listener each (context k's on port `port + k`); each QP receives into its
/// slot, sends the bytes back from there, and takes its next receive once the echo is sent.
struct EchoServer {
    ctxs: Vec<EchoCtx>,
}

struct EchoCtx {
    ctx: u32,
    scq: Cq,
    rcq: Cq,
    buf: Buf,
    mr: Mr,
    listener: u32,
    port: u16,
    /// QP i receives into slot i of `buf`.
    qps: Vec<Qp>,
}

/// What one [`EchoServer::pump`] did.
struct Pumped {
    any: bool,
    echoed: u64,
    closed: usize,
}

impl EchoServer {
    fn new(g: &mut FakeGuest, n: usize, port: u16, backlog: u32) -> EchoServer {
        let ctxs = (0..n.div_ceil(PER_CTX))
            .map(|k| {
                let n = (n - k * PER_CTX).min(PER_CTX);
                let ctx = g.create_ctx().unwrap();
                let depth = (2 * n as u32).next_power_of_two();
                let (scq, rcq) = (
                    g.create_cq(ctx, depth).unwrap(),
                    g.create_cq(ctx, depth).unwrap(),
                );
                let buf = g.alloc_buf(n as u64 * SLOT, 0);
                let mr = g.reg_mr(ctx, &buf, MR_ACCESS_LOCAL_WRITE).unwrap();
                let port = port + k as u16;
                let listener = g.listen(ctx, UNSPECIFIED, port, backlog).unwrap();
                let qps = (0..n)
                    .map(|_| {
                        g.create_qp_typed(ctx, scq.id, rcq.id, 2, 2, QP_TYPE_TCP, FRAMING_STREAM)
                            .unwrap()
                    })
                    .collect();
                EchoCtx {
                    ctx,
                    scq,
                    rcq,
                    buf,
                    mr,
                    listener,
                    port,
                    qps,
                }
            })
            .collect();
        EchoServer { ctxs }
    }

    /// The lab host (namespace `ns`) connects to every QP, in batches: the QPs of a batch
    /// accept, the host connects as many, the accepts complete (the admin queue holds a
    /// batch's commands at once), and each QP takes its first receive.
    fn connect_all(&mut self, g: &mut FakeGuest, ns: &netns::Netns) -> Vec<TcpStream> {
        let mut streams = Vec::new();
        for c in &mut self.ctxs {
            for (b, batch) in c.qps.chunks_mut(32).enumerate() {
                let cmds: Vec<u32> = batch
                    .iter()
                    .map(|qp| g.submit_accept(c.ctx, c.listener, qp.id))
                    .collect();
                ns.within(|| {
                    for _ in 0..batch.len() {
                        let s = TcpStream::connect(format!("[{}]:{}", ADDRS[0], c.port))
                            .expect("connect to the QP server");
                        streams.push(s);
                    }
                });
                for cmd in cmds {
                    g.admin_wait_ok(cmd, "accept");
                }
                for (j, qp) in batch.iter_mut().enumerate() {
                    let slot = (b * 32 + j) as u64 * SLOT;
                    g.post_recv(
                        qp,
                        &[recv_wqe(0, &[c.buf.sge(slot, SLOT as u32, c.mr.lkey)])],
                    );
                }
            }
        }
        streams
    }

    /// One pass: echoes what arrived and gives each QP whose echo was sent its next
    /// receive. A client's end of its stream (a 0-byte receive) is counted in `closed`;
    /// one before `until`, when the clients stop, fails the test.
    fn pump(&mut self, g: &mut FakeGuest, until: Instant) -> Pumped {
        let mut p = Pumped {
            any: false,
            echoed: 0,
            closed: 0,
        };
        for c in &mut self.ctxs {
            let slot = |qps: &[Qp], id: u32| {
                let i = qps
                    .iter()
                    .position(|q| q.id == id)
                    .expect("a QP of this context");
                (i, i as u64 * SLOT)
            };
            while let Some(cqe) = g.poll_cq(&mut c.rcq) {
                assert_cqe(&cqe, CQE_STATUS_SUCCESS, 0, "receive");
                p.any = true;
                if cqe.byte_len == 0 {
                    assert!(Instant::now() >= until, "a client closed early");
                    p.closed += 1;
                    continue;
                }
                let (i, at) = slot(&c.qps, cqe.qp);
                let sge = c.buf.sge(at, cqe.byte_len, c.mr.lkey);
                g.post_send(&mut c.qps[i], &[tcp_send_wqe(0, 0, &[sge])]);
                p.echoed += cqe.byte_len as u64;
            }
            while let Some(cqe) = g.poll_cq(&mut c.scq) {
                assert_cqe(&cqe, CQE_STATUS_SUCCESS, 0, "echo");
                p.any = true;
                let (i, at) = slot(&c.qps, cqe.qp);
                let sge = c.buf.sge(at, SLOT as u32, c.mr.lkey);
                g.post_recv(&mut c.qps[i], &[recv_wqe(0, &[sge])]);
            }
        }
        p
    }
}

/// The lab host's side: `streams`, each writing chunks of its own pattern and reading them
/// back, until `until`; returns the bytes each verified.
fn linux_clients(streams: Vec<TcpStream>, until: Instant) -> Vec<std::thread::JoinHandle<u64>> {
    streams
        .into_iter()
        .enumerate()
        .map(|(j, mut s)| {
            std::thread::spawn(move || {
                let mut rng = Rng::new(j as u64 + 1);
                let mut verified = 0u64;
                s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                while Instant::now() < until {
                    let len = 1 + rng.below(2048) as usize;
                    let chunk = rng.bytes(len);
                    s.write_all(&chunk).expect("write to the QP server");
                    let mut back = vec![0; chunk.len()];
                    s.read_exact(&mut back).expect("the echo");
                    assert!(back == chunk, "stream {j}: the echo differs");
                    verified += chunk.len() as u64;
                    std::thread::sleep(Duration::from_millis(rng.below(200)));
                }
                verified
            })
        })
        .collect()
}

#[test]
#[ignore = "a stress case: ./qpip stress"]
fn a_thousand_linux_connections_held_on_one_guest() {
    const CONNS: usize = 1_000;
    let hold = Duration::from_secs(
        std::env::var("QPIP_STRESS_HOLD_S")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(60),
    );
    if !netns::root_and_tools("a thousand Linux connections") {
        return;
    }
    raise_fd_limit();
    let ns = netns::Netns::new("qpipstress");
    ns.add_tap("qstr0", "fd51:5050::1");
    let up = ns
        .within(|| open_link(&NetSpec::Tap("qstr0".into()), None, None))
        .expect("the TAP");
    let ad = adapter_on(2, 1, Some(up));
    let mut g = ad.guest_with_ram(0, 256 << 20);
    let mut server = EchoServer::new(&mut g, CONNS, 9100, 1024);
    let start = Instant::now();
    let streams = server.connect_all(&mut g, &ns);
    let connected = start.elapsed();
    let until = Instant::now() + hold;
    let clients = linux_clients(streams, until);
    // The server echoes until the clients are done, then a little longer for the last.
    let (mut echoed, mut closed, mut idle_since) = (0u64, 0usize, None::<Instant>);
    loop {
        let p = server.pump(&mut g, until);
        (echoed, closed) = (echoed + p.echoed, closed + p.closed);
        assert!(
            Instant::now() < until + Duration::from_secs(60),
            "{closed} of {CONNS} connections closed a minute after the clients stopped"
        );
        if p.any {
            idle_since = None;
            continue;
        }
        if closed == CONNS {
            let since = *idle_since.get_or_insert_with(Instant::now);
            if since.elapsed() > Duration::from_secs(2) {
                break;
            }
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    let verified: u64 = clients
        .into_iter()
        .map(|h| h.join().expect("a client"))
        .sum();
    let s = g.query_stats().counters;
    println!(
        "stress: {CONNS} connections from Linux sockets to one guest's QP server through the \
         adapter's uplink (a TAP): connected in {:.1} s, held {} s with traffic both ways \
         (an echo), none lost, {verified} bytes verified by the clients ({echoed} echoed); \
         TCP retransmissions {}",
        connected.as_secs_f64(),
        hold.as_secs(),
        s[STAT_TCP_RETRANS_SEGS as usize],
    );
    assert_eq!(verified, echoed, "every byte echoed came back verified");
    assert!(verified > 0);
}

/// Many sockets and a fake guest's descriptors: lift the soft limit to the hard one.
fn raise_fd_limit() {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid struct.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut l), 0);
        l.rlim_cur = l.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &l);
    }
}

/// Sends SYNs to `dst`:`port` (at MAC `dst_mac`) out of interface `ifname` of the calling
/// thread's namespace (a packet socket: whole Ethernet frames), each from a random address
/// of the on-link prefix that nobody has and a random port — a flood whose SYN-ACKs no one
/// will answer — at about `rate` a second until `until`. Returns how many.
fn syn_flood(
    ifname: &str,
    dst_mac: [u8; 6],
    dst: std::net::Ipv6Addr,
    port: u16,
    rate: u64,
    until: Instant,
) -> u64 {
    use qpip_device::net::tcp::wire::{self as tcpw, flags, Header};
    use qpip_device::net::wire;
    let proto = (libc::ETH_P_ALL as u16).to_be() as libc::c_int;
    // SAFETY: socket(2) with constant arguments; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, proto) };
    assert!(
        fd >= 0,
        "packet socket: {}",
        std::io::Error::last_os_error()
    );
    let name = std::ffi::CString::new(ifname).unwrap();
    // SAFETY: a valid C string.
    let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
    assert!(ifindex > 0, "no interface {ifname}");
    // SAFETY: all-zero is a valid sockaddr_ll.
    let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sa.sll_family = libc::AF_PACKET as u16;
    sa.sll_ifindex = ifindex as i32;
    sa.sll_halen = 6;
    sa.sll_addr[..6].copy_from_slice(&dst_mac);
    let mut rng = Rng::new(0x5717);
    let (mut sent, start) = (0u64, Instant::now());
    while Instant::now() < until {
        let r = rng.next_u64();
        let mut src = dst.segments();
        src[4] = 0xdead;
        src[5] = (r >> 16) as u16;
        src[6] = (r >> 32) as u16;
        src[7] = (r >> 48) as u16;
        let src = std::net::Ipv6Addr::from(src);
        let h = Header {
            src_port: 1024 + (r as u16 % 60000),
            dst_port: port,
            seq: (r >> 20) as u32,
            flags: flags::SYN,
            window: 65535,
            ..Header::default()
        };
        let seg = tcpw::build(&src, &dst, &h, &[]);
        let mut frame = wire::ipv6_packet(&src, &dst, 6, 64, &seg);
        let src_mac = [
            0x02,
            0xee,
            (r >> 8) as u8,
            (r >> 16) as u8,
            (r >> 24) as u8,
            r as u8,
        ];
        wire::write_ethernet(&mut frame, &dst_mac, &src_mac);
        // SAFETY: a valid buffer and address of the sizes given.
        let n = unsafe {
            libc::sendto(
                fd,
                frame.as_ptr().cast(),
                frame.len(),
                0,
                (&sa as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if n == frame.len() as isize {
            sent += 1;
        }
        // Paced: no more than `rate` a second on average.
        let due = start + Duration::from_micros(sent * 1_000_000 / rate);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    // SAFETY: our descriptor.
    unsafe { libc::close(fd) };
    sent
}

#[test]
#[ignore = "a stress case: ./qpip stress"]
fn a_syn_flood_while_connections_move_data() {
    const CONNS: usize = 16;
    const PORT: u16 = 9200;
    const RATE: u64 = 40_000;
    let phase = Duration::from_secs(10);
    if !netns::root_and_tools("a SYN flood") {
        return;
    }
    raise_fd_limit();
    let ns = netns::Netns::new("qpipflood");
    ns.add_tap("qfl0", "fd51:5050::1");
    let up = ns
        .within(|| open_link(&NetSpec::Tap("qfl0".into()), None, None))
        .expect("the TAP");
    let ad = adapter_on(2, 1, Some(up));
    let mut g = ad.guest(0);
    let mut server = EchoServer::new(&mut g, CONNS, PORT, 64);
    let streams = server.connect_all(&mut g, &ns);
    // Three phases of `phase`: before, during and after the flood. The clients count what
    // they verify per phase; the device echoes throughout.
    let t0 = Instant::now() + Duration::from_millis(100);
    let marks = [t0 + phase, t0 + 2 * phase, t0 + 3 * phase];
    let clients: Vec<_> = streams
        .into_iter()
        .enumerate()
        .map(|(j, mut s)| {
            std::thread::spawn(move || {
                let mut rng = Rng::new(j as u64 + 7);
                let mut per_phase = [0u64; 3];
                s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                loop {
                    let now = Instant::now();
                    let Some(p) = marks.iter().position(|&m| now < m) else {
                        break;
                    };
                    let len = 1 + rng.below(4096) as usize;
                    let chunk = rng.bytes(len);
                    s.write_all(&chunk).expect("write");
                    let mut back = vec![0; len];
                    s.read_exact(&mut back).expect("the echo");
                    assert!(back == chunk, "stream {j}: the echo differs");
                    per_phase[p] += len as u64;
                }
                per_phase
            })
        })
        .collect();
    let flood = {
        let (start, end) = (marks[0], marks[1]);
        let nsr = &ns;
        std::thread::scope(|s| {
            let flooder = s.spawn(move || {
                nsr.within(|| {
                    if let Some(w) = start.checked_duration_since(Instant::now()) {
                        std::thread::sleep(w);
                    }
                    syn_flood("qfl0", mac(0), ADDRS[0].parse().unwrap(), PORT, RATE, end)
                })
            });
            let mut heap_peak = live();
            let heap_before = live();
            while Instant::now() < marks[2] + Duration::from_secs(1) {
                let p = server.pump(&mut g, marks[2]);
                heap_peak = heap_peak.max(live());
                if !p.any {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
            (flooder.join().expect("flooder"), heap_before, heap_peak)
        })
    };
    let (syns, heap_before, heap_peak) = flood;
    let per_phase: Vec<[u64; 3]> = clients
        .into_iter()
        .map(|h| h.join().expect("a client"))
        .collect();
    let total = |p: usize| per_phase.iter().map(|c| c[p]).sum::<u64>();
    let (before, during, after) = (total(0), total(1), total(2));
    // Afterwards a new connection is accepted (a QP of the listener's context, with a
    // buffer of its own).
    let c = &mut server.ctxs[0];
    let mut fresh = g
        .create_qp_typed(c.ctx, c.scq.id, c.rcq.id, 2, 2, QP_TYPE_TCP, FRAMING_STREAM)
        .unwrap();
    let buf = g.alloc_buf(SLOT, 0);
    let mr = g.reg_mr(c.ctx, &buf, MR_ACCESS_LOCAL_WRITE).unwrap();
    let acc = g.submit_accept(c.ctx, c.listener, fresh.id);
    let mut s = ns.within(|| {
        TcpStream::connect(format!("[{}]:{PORT}", ADDRS[0])).expect("a connection after the flood")
    });
    g.admin_wait_ok(acc, "accept after the flood");
    g.post_recv(
        &mut fresh,
        &[recv_wqe(0, &[buf.sge(0, SLOT as u32, mr.lkey)])],
    );
    s.write_all(b"after").unwrap();
    let c = g.wait_cqe(&mut server.ctxs[0].rcq);
    assert_eq!((c.qp, c.byte_len), (fresh.id, 5));
    let stats = g.query_stats().counters;
    let cookies = stats[STAT_TCP_SYN_COOKIES as usize];
    println!(
        "stress: a SYN flood of {syns} SYNs in {} s ({} a second, each from a random address \
         nobody has on the link and a random port) at a guest's \
         listener while {CONNS} connections echo: none lost, every byte verified; their \
         throughput {:.1} MB/s before, {:.1} during ({:.0} %), {:.1} after; SYN cookies sent \
         {cookies}; device heap grew by at most {} KiB; a new connection afterwards accepted",
        phase.as_secs(),
        syns / phase.as_secs(),
        before as f64 / phase.as_secs_f64() / 1e6,
        during as f64 / phase.as_secs_f64() / 1e6,
        100.0 * during as f64 / before.max(1) as f64,
        after as f64 / phase.as_secs_f64() / 1e6,
        (heap_peak - heap_before) / 1024,
    );
    assert!(cookies > 0, "SYN cookies engaged");
    assert!(
        during > 0 && after > 0,
        "the connections moved data throughout"
    );
}

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
        let mut p = ad.guest(1);
        let cp = p.create_ctx().unwrap();
        let mut pinger = p.udp_endpoint_in(cp, UNSPECIFIED, 7001, 4, 8, 4096);
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
    let ad = fixture::adapter_idle(3, 1, None, idle);
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
        let mut p = ad.guest(1);
        let cp = p.create_ctx().unwrap();
        let mut pinger = p.udp_endpoint_in(cp, UNSPECIFIED, 7001, 4, 8, 4096);
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
