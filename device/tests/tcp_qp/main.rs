//! TCP queue pairs driven by fake guests: connect/accept, stream and message framing,
//! flow control by posted receive space, close, destroy, over the device's own loopback
//! and between two devices joined by a cable (optionally impaired).

use qpip_testkit as support;

// The remote end of a cable played frame by frame, in a small script format.
#[path = "../tcp_script/mod.rs"]
mod script;

mod conformance;
mod orphan;

use std::time::{Duration, Instant};

use qpip_device::engine::tcp::TcpLimits;
use qpip_device::net::tcp::Config;
use sha2::{Digest, Sha256};
use support::relay::{PtbPlan, Relay};
use support::*;

const A_ADDR: &str = "fd51:5050::3:1";
const B_ADDR: &str = "fd51:5050::3:2";

fn device(mac: [u8; 6], addr: &str, cable: &std::path::Path, impair: Option<&str>) -> FakeGuest {
    device_with(mac, addr, cable, impair, TcpLimits::default())
}

fn device_with(
    mac: [u8; 6],
    addr: &str,
    cable: &std::path::Path,
    impair: Option<&str>,
    tcp_limits: TcpLimits,
) -> FakeGuest {
    cabled_device(mac, addr, cable, impair, tcp_limits)
}

struct Cable {
    dir: std::path::PathBuf,
}

impl Cable {
    fn new(name: &str) -> Cable {
        let dir = std::env::temp_dir().join(format!("qpip-tcpqp-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Cable { dir }
    }
    fn path(&self) -> std::path::PathBuf {
        self.dir.join("cable")
    }
}

impl Drop for Cable {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn sha(b: &[u8]) -> [u8; 32] {
    Sha256::digest(b).into()
}

/// Listens on `port` in `sctx`, accepts on a new QP there, connects a new QP of `cctx` to
/// `addr`. Returns (server end, client end).
#[allow(clippy::too_many_arguments)]
fn connect_pair(
    sg: &mut FakeGuest,
    sctx: u32,
    cg: &mut FakeGuest,
    cctx: u32,
    addr: [u8; 16],
    port: u16,
    framing: u8,
    depth: u32,
    buf_len: u64,
) -> (TcpEnd, TcpEnd) {
    let server = sg.tcp_endpoint_in(sctx, framing, depth, buf_len);
    let client = cg.tcp_endpoint_in(cctx, framing, depth, buf_len);
    let l = sg.listen(sctx, UNSPECIFIED, port, 8).expect("listen");
    let acc = sg.submit_accept(sctx, l, server.qp.id);
    let con = cg.submit_connect(cctx, client.qp.id, addr, port);
    // Either guest's engine may need the other's turn: wait for both completions.
    let deadline = Instant::now() + TIMEOUT;
    let (mut a, mut c) = (None, None);
    while a.is_none() || c.is_none() {
        assert!(Instant::now() < deadline, "connect/accept did not complete");
        if a.is_none() {
            a = sg.admin_wait(acc, Duration::from_millis(5));
        }
        if c.is_none() {
            c = cg.admin_wait(con, Duration::from_millis(5));
        }
    }
    let (a, c) = (a.unwrap(), c.unwrap());
    assert_eq!(
        a.status,
        ADMIN_STATUS_OK,
        "accept: {}",
        admin_status_name(a.status)
    );
    assert_eq!(
        c.status,
        ADMIN_STATUS_OK,
        "connect: {}",
        admin_status_name(c.status)
    );
    assert_eq!(peer_addr(&c), addr, "connect reports the peer");
    assert_eq!(c.result2, port as u32);
    assert_ne!(a.result2, 0, "accept reports the peer's port");
    (server, client)
}

/// Two devices joined by a cable (impaired with `impair`), a context on each, and a TCP
/// connection between a QP of each on `port` (which also names the cable): returns (the
/// cable, device a, device b, the end `s` on a — accepted on A_ADDR:`port` —, the end `c`
/// on b, which connected). Bind the cable first so that it goes last: its folder holds the
/// sockets.
fn cabled_pair(
    port: u16,
    impair: Option<&str>,
    framing: u8,
    depth: u32,
    buf_len: u64,
) -> (Cable, FakeGuest, FakeGuest, TcpEnd, TcpEnd) {
    let cable = Cable::new(&format!("port{port}"));
    let tag = port as u8;
    let mut a = device([0x02, 0, 0, 0, tag, 0xa1], A_ADDR, &cable.path(), impair);
    let mut b = device([0x02, 0, 0, 0, tag, 0xb2], B_ADDR, &cable.path(), impair);
    let (ca, cb) = (a.create_ctx().unwrap(), b.create_ctx().unwrap());
    let (s, c) = connect_pair(
        &mut a,
        ca,
        &mut b,
        cb,
        ip(A_ADDR),
        port,
        framing,
        depth,
        buf_len,
    );
    (cable, a, b, s, c)
}

/// Runs two flows until each has sent everything and received `expect` bytes.
fn run_pair(
    ga: &mut FakeGuest,
    ea: &mut TcpEnd,
    fa: &mut Flow,
    gb: &mut FakeGuest,
    eb: &mut TcpEnd,
    fb: &mut Flow,
    limit: Duration,
) {
    let deadline = Instant::now() + limit;
    loop {
        let a = fa.pump(ga, ea);
        let b = fb.pump(gb, eb);
        if fa.sent == fa.out.len()
            && fb.sent == fb.out.len()
            && fa.got.len() >= fb.out.len()
            && fb.got.len() >= fa.out.len()
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "transfer stalled: a sent {}/{} got {}/{}, b sent {}/{} got {}/{}",
            fa.sent,
            fa.out.len(),
            fa.got.len(),
            fb.out.len(),
            fb.sent,
            fb.out.len(),
            fb.got.len(),
            fa.out.len()
        );
        if !a && !b {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    assert_eq!(sha(&fb.got), sha(&fa.out), "a -> b intact");
    assert_eq!(sha(&fa.got), sha(&fb.out), "b -> a intact");
}

fn bulk(
    ga: &mut FakeGuest,
    ea: &mut TcpEnd,
    gb: &mut FakeGuest,
    eb: &mut TcpEnd,
    n: usize,
    seed: u64,
    limit: Duration,
) {
    let mut rng = Rng::new(seed);
    let mut fa = Flow::new(ga, ea, rng.bytes(n), seed + 1);
    let mut fb = Flow::new(gb, eb, rng.bytes(n), seed + 2);
    run_pair(ga, ea, &mut fa, gb, eb, &mut fb, limit);
}

#[test]
fn loopback_tcp_between_two_qps_of_one_device() {
    let mut g = FakeGuest::new();
    let sctx = g.create_ctx().unwrap();
    let cctx = g.create_ctx().unwrap();
    let n = 1 << 20;
    let len = Flow::buf_len(n, 16);
    // Both ends live in one guest: connect_pair needs two handles, so do it by hand.
    let mut server = g.tcp_endpoint_in(sctx, FRAMING_STREAM, 16, len);
    let mut client = g.tcp_endpoint_in(cctx, FRAMING_STREAM, 16, len);
    let l = g.listen(sctx, UNSPECIFIED, 5000, 4).unwrap();
    let acc = g.submit_accept(sctx, l, server.qp.id);
    let con = g.submit_connect(cctx, client.qp.id, LOOPBACK, 5000);
    let c = g.admin_wait_done(con);
    assert_eq!(
        c.status,
        ADMIN_STATUS_OK,
        "connect: {}",
        admin_status_name(c.status)
    );
    assert_eq!((peer_addr(&c), c.result2), (LOOPBACK, 5000));
    let a = g.admin_wait_done(acc);
    assert_eq!(
        a.status,
        ADMIN_STATUS_OK,
        "accept: {}",
        admin_status_name(a.status)
    );
    assert_eq!(peer_addr(&a), LOOPBACK);
    assert!(
        a.result2 >= 49152,
        "the client's ephemeral port: {}",
        a.result2
    );

    let mut rng = Rng::new(7);
    let mut fs = Flow::new(&mut g, &server, rng.bytes(n), 11);
    let mut fc = Flow::new(&mut g, &client, rng.bytes(n), 12);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !(fs.sent == n && fc.sent == n && fs.got.len() == n && fc.got.len() == n) {
        let a = fs.pump(&mut g, &mut server);
        let b = fc.pump(&mut g, &mut client);
        assert!(
            Instant::now() < deadline,
            "loopback transfer stalled: {} {} {} {}",
            fs.sent,
            fc.sent,
            fs.got.len(),
            fc.got.len()
        );
        if !a && !b {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    assert_eq!(sha(&fs.got), sha(&fc.out));
    assert_eq!(sha(&fc.got), sha(&fs.out));

    // Close from the client: its CLOSE completes when the FIN is acknowledged, and the
    // server's next receive completes with 0 bytes (end of stream).
    let cl = g.submit_close(cctx, client.qp.id);
    let c = g.admin_wait_done(cl);
    assert_eq!(
        c.status,
        ADMIN_STATUS_OK,
        "close: {}",
        admin_status_name(c.status)
    );
    let deadline = Instant::now() + TIMEOUT;
    while !fs.eof {
        fs.pump(&mut g, &mut server);
        assert!(Instant::now() < deadline, "no end of stream at the server");
    }
    let cl = g.submit_close(sctx, server.qp.id);
    assert_eq!(g.admin_wait_done(cl).status, ADMIN_STATUS_OK);
    let deadline = Instant::now() + TIMEOUT;
    while !fc.eof {
        fc.pump(&mut g, &mut client);
        assert!(Instant::now() < deadline, "no end of stream at the client");
    }
}

#[test]
fn connect_to_a_port_nobody_listens_on_is_refused() {
    let mut g = FakeGuest::new();
    let ctx = g.create_ctx().unwrap();
    let e = g.tcp_endpoint_in(ctx, FRAMING_STREAM, 4, 4096);
    let con = g.submit_connect(ctx, e.qp.id, LOOPBACK, 5999);
    let c = g.admin_wait_done(con);
    assert_eq!(
        c.status,
        ADMIN_STATUS_REFUSED,
        "{}",
        admin_status_name(c.status)
    );
}

#[test]
fn stream_of_one_mib_both_ways_across_a_cable() {
    let n = 1 << 20;
    let (_cable, mut a, mut b, mut sa, mut cb_end) =
        cabled_pair(6000, None, FRAMING_STREAM, 16, Flow::buf_len(n, 16));
    bulk(
        &mut a,
        &mut sa,
        &mut b,
        &mut cb_end,
        n,
        100,
        Duration::from_secs(60),
    );
}

#[test]
fn impaired_cable_still_delivers_intact() {
    let imp = "loss=3,reorder=10,dup=2,corrupt=1,seed=42";
    let n = 256 << 10;
    let (_cable, mut a, mut b, mut sa, mut cb_end) =
        cabled_pair(6001, Some(imp), FRAMING_STREAM, 16, Flow::buf_len(n, 16));
    bulk(
        &mut a,
        &mut sa,
        &mut b,
        &mut cb_end,
        n,
        200,
        Duration::from_secs(90),
    );
}

#[test]
fn message_framing_keeps_boundaries_and_immediate_data() {
    let (_cable, mut a, mut b, mut s, mut c) =
        cabled_pair(6002, None, FRAMING_MESSAGE, 16, 1 << 20);
    // Messages from the client (b) to the server (a): assorted sizes, one too big for
    // its 64 KiB receive WR, and an empty one.
    let sizes = [1usize, 0, 7, 1440, 1441, 3000, 65_536, 100_000, 5, 50_000];
    let mut rng = Rng::new(9);
    let data: Vec<Vec<u8>> = sizes.iter().map(|&n| rng.bytes(n)).collect();
    let mut at = 0u64;
    let mut wqes = Vec::new();
    for (i, d) in data.iter().enumerate() {
        if d.len() <= 80 && i % 2 == 0 {
            wqes.push(tcp_inline_wqe(i as u64, 0x1000 + i as u32, d));
        } else {
            b.buf_write(&c.buf, at, d);
            let half = d.len() as u32 / 2;
            wqes.push(tcp_send_wqe(
                i as u64,
                0x1000 + i as u32,
                &[
                    c.buf.sge(at, half, c.mr.lkey),
                    c.buf
                        .sge(at + half as u64, d.len() as u32 - half, c.mr.lkey),
                ],
            ));
        }
        at += d.len() as u64 + 64;
    }
    b.post_send(&mut c.qp, &wqes);
    let rwqes: Vec<_> = (0..sizes.len())
        .map(|i| {
            recv_wqe(
                100 + i as u64,
                &[s.buf.sge(i as u64 * 65_536, 65_536, s.mr.lkey)],
            )
        })
        .collect();
    a.post_recv(&mut s.qp, &rwqes);
    for (i, d) in data.iter().enumerate() {
        let r = a
            .try_wait_cqe(&mut s.rcq, Duration::from_secs(10))
            .unwrap_or_else(|| panic!("message {i} did not arrive"));
        assert_eq!(r.wr_id, 100 + i as u64);
        assert_eq!(r.imm_data, 0x1000 + i as u32, "imm_data of message {i}");
        assert_eq!(r.byte_len, d.len() as u32, "length of message {i}");
        if d.len() > 65_536 {
            assert_cqe(
                &r,
                CQE_STATUS_LOCAL_LENGTH,
                0,
                "a message larger than its WR",
            );
        } else {
            assert_cqe(&r, CQE_STATUS_SUCCESS, 0, "message");
            assert_eq!(
                &a.buf_read(&s.buf, i as u64 * 65_536, d.len()),
                d,
                "message {i} intact"
            );
        }
    }
    for (i, d) in data.iter().enumerate() {
        let sc = b.wait_cqe(&mut c.scq);
        assert_cqe(&sc, CQE_STATUS_SUCCESS, 0, "send");
        assert_eq!((sc.wr_id, sc.byte_len), (i as u64, d.len() as u32));
    }
}

#[test]
fn sends_complete_only_when_the_peer_has_room_and_acknowledged() {
    let n = 1 << 20;
    let (_cable, mut a, mut b, mut s, mut c) =
        cabled_pair(6003, None, FRAMING_STREAM, 16, Flow::buf_len(n, 16));
    let mut rng = Rng::new(3);
    let mut fs = Flow::new(&mut a, &s, Vec::new(), 1);
    let mut fc = Flow::new(&mut b, &c, rng.bytes(n), 2);
    fs.post_recvs = false;
    // The server posts nothing: only the staging allowance (64 KiB) can be acknowledged.
    let until = Instant::now() + Duration::from_millis(500);
    while Instant::now() < until {
        fs.pump(&mut a, &mut s);
        fc.pump(&mut b, &mut c);
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        fc.sent <= 128 * 1024,
        "{} bytes completed with no receive space posted",
        fc.sent
    );
    assert!(fc.sent < n);
    fs.post_recvs = true;
    run_pair(
        &mut a,
        &mut s,
        &mut fs,
        &mut b,
        &mut c,
        &mut fc,
        Duration::from_secs(60),
    );
}

#[test]
fn destroying_a_qp_resets_the_peer() {
    let (_cable, mut a, mut b, mut s, c) = cabled_pair(6004, None, FRAMING_STREAM, 8, 1 << 16);
    a.post_recv(&mut s.qp, &[recv_wqe(1, &[s.buf.sge(0, 4096, s.mr.lkey)])]);
    // The receive stays outstanding until the peer's reset flushes it.
    b.destroy_qp(c.ctx, c.qp.id).unwrap();
    let r = a
        .try_wait_cqe(&mut s.rcq, Duration::from_secs(10))
        .expect("the receive is flushed by the reset");
    assert_cqe(&r, CQE_STATUS_FLUSHED, 0, "receive after the peer's reset");
    // The QP is in the error state: new sends are flushed too.
    a.post_send(&mut s.qp, &[tcp_inline_wqe(2, 0, b"late")]);
    assert_cqe(
        &a.wait_cqe(&mut s.scq),
        CQE_STATUS_FLUSHED,
        0,
        "send after reset",
    );
    // CLOSE on it is refused.
    let cl = a.submit_close(s.ctx, s.qp.id);
    assert_eq!(a.admin_wait_done(cl).status, ADMIN_STATUS_BAD_STATE);
}

// ---- asynchronous events ------------------------------------------------------------------

/// How long a test waits to be sure an event does not come.
const QUIET: Duration = Duration::from_millis(300);

#[test]
fn a_peer_reset_raises_qp_error_for_the_survivor_only() {
    let mut g = FakeGuest::new();
    let (sctx, cctx) = (g.create_ctx().unwrap(), g.create_ctx().unwrap());
    let reqs = [g.submit_async_event(), g.submit_async_event()];
    let (mut s, c) = g.loopback_pair(sctx, cctx, 6100, FRAMING_STREAM);
    g.post_recv(&mut s.qp, &[recv_wqe(1, &[s.buf.sge(0, 4096, s.mr.lkey)])]);
    // The owner destroying its QP is no event for the owner; the peer's QP is reset.
    g.destroy_qp(cctx, c.qp.id).unwrap();
    let r = g.wait_cqe(&mut s.rcq);
    assert_cqe(&r, CQE_STATUS_FLUSHED, 0, "receive after the peer's reset");
    let e = g
        .admin_wait(reqs[0], TIMEOUT)
        .expect("an event for the survivor");
    assert_eq!(
        async_event(&e),
        (
            sctx,
            s.qp.id,
            ASYNC_EVENT_QP_ERROR,
            ASYNC_REASON_PEER_RESET,
            false
        )
    );
    assert!(
        g.admin_wait(reqs[1], QUIET).is_none(),
        "one event only: the destroyed QP's side raises none"
    );
    assert_eq!(g.stat(STAT_ASYNC_EVENTS), 1);
    assert_eq!(g.stat(STAT_ASYNC_EVENTS_LOST), 0);
    // The TCP counters of QUERY_STATS: one connection each way, reset once (the abort's
    // RST; a segment of the survivor that met no connection any more is answered by one
    // more).
    let st = g.query_stats().counters;
    let tcp = |i: u32| st[i as usize];
    assert_eq!(tcp(STAT_TCP_ACTIVE_OPENS), 1);
    assert_eq!(tcp(STAT_TCP_PASSIVE_OPENS), 1);
    assert_eq!(tcp(STAT_TCP_ESTAB_RESETS), 1);
    assert!((1..=2).contains(&tcp(STAT_TCP_RSTS_OUT)), "{st:?}");
    assert_eq!(tcp(STAT_TCP_ATTEMPT_FAILS), 0);
    assert!(
        tcp(STAT_TCP_SEGS_OUT) >= 4,
        "SYN, SYN-ACK, ACK, RST: {st:?}"
    );
    // Over loopback every segment sent is received (one may still be on its way).
    assert!(tcp(STAT_TCP_SEGS_IN) >= 4 && tcp(STAT_TCP_SEGS_IN) <= tcp(STAT_TCP_SEGS_OUT));
    // A QP already in the error state raises nothing more when destroyed.
    g.destroy_qp(sctx, s.qp.id).unwrap();
    assert!(g.admin_wait(reqs[1], QUIET).is_none());
}

#[test]
fn a_graceful_close_raises_peer_closed_once_every_byte_is_placed() {
    let mut g = FakeGuest::new();
    let (sctx, cctx) = (g.create_ctx().unwrap(), g.create_ctx().unwrap());
    let req = g.submit_async_event();
    let (mut s, mut c) = g.loopback_pair(sctx, cctx, 6101, FRAMING_STREAM);
    g.post_send(&mut c.qp, &[tcp_inline_wqe(1, 0, b"last words")]);
    assert_cqe(&g.wait_cqe(&mut c.scq), CQE_STATUS_SUCCESS, 0, "send");
    let cl = g.submit_close(cctx, c.qp.id);
    assert_eq!(g.admin_wait_done(cl).status, ADMIN_STATUS_OK);
    // The FIN is in, but the bytes before it wait for a receive WR: not closed yet.
    assert!(
        g.admin_wait(req, QUIET).is_none(),
        "PEER_CLOSED before the bytes before the FIN were placed"
    );
    g.post_recv(&mut s.qp, &[recv_wqe(1, &[s.buf.sge(0, 4096, s.mr.lkey)])]);
    let r = g.wait_cqe(&mut s.rcq);
    assert_cqe(&r, CQE_STATUS_SUCCESS, 0, "the bytes before the FIN");
    assert_eq!(g.buf_read(&s.buf, 0, r.byte_len as usize), b"last words");
    let e = g.admin_wait(req, TIMEOUT).expect("PEER_CLOSED");
    assert_eq!(
        async_event(&e),
        (sctx, s.qp.id, ASYNC_EVENT_PEER_CLOSED, 0, false)
    );
    // Once only; and the closing side, whose peer has not closed, hears nothing.
    let req = g.submit_async_event();
    g.post_recv(&mut s.qp, &[recv_wqe(2, &[s.buf.sge(0, 4096, s.mr.lkey)])]);
    assert_eq!(g.wait_cqe(&mut s.rcq).byte_len, 0, "end of stream");
    assert!(g.admin_wait(req, QUIET).is_none());
    // The other direction closes too: now the client hears of it.
    let cl = g.submit_close(sctx, s.qp.id);
    assert_eq!(g.admin_wait_done(cl).status, ADMIN_STATUS_OK);
    let e = g
        .admin_wait(req, TIMEOUT)
        .expect("PEER_CLOSED at the client");
    assert_eq!(
        async_event(&e),
        (cctx, c.qp.id, ASYNC_EVENT_PEER_CLOSED, 0, false)
    );
}

#[test]
fn events_wait_for_a_request_and_die_with_their_context() {
    let mut g = FakeGuest::new();
    let (a, b) = (g.create_ctx().unwrap(), g.create_ctx().unwrap());
    let (x, y) = (g.create_ctx().unwrap(), g.create_ctx().unwrap());
    // Two resets with no request pending: the events wait in the device.
    let (sa, cb) = g.loopback_pair(a, b, 6102, FRAMING_MESSAGE);
    let (sx, cy) = g.loopback_pair(x, y, 6103, FRAMING_MESSAGE);
    g.destroy_qp(b, cb.qp.id).unwrap();
    g.destroy_qp(y, cy.qp.id).unwrap();
    // Wait until both survivors are in the error state (their sends are flushed).
    for (ctx, mut e) in [(a, sa), (x, sx)] {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            g.post_send(&mut e.qp, &[tcp_inline_wqe(9, 0, b"?")]);
            if g.wait_cqe(&mut e.scq).status == CQE_STATUS_FLUSHED {
                break;
            }
            assert!(Instant::now() < deadline, "ctx {ctx}: no reset");
        }
    }
    // Context a goes away: its event with it. Context x's is delivered.
    g.destroy_ctx(a).unwrap();
    let e = g.admin(cmd0(ADMIN_OP_ASYNC_EVENT, 0, 0));
    assert_eq!(async_event(&e).0, x);
    let req = g.submit_async_event();
    assert!(
        g.admin_wait(req, QUIET).is_none(),
        "a's event was discarded"
    );
}

#[test]
fn async_event_requests_are_bounded_checked_and_forgotten_at_reset() {
    let mut g = FakeGuest::new();
    for (what, ctx, handle, body) in [("ctx", 1, 0, 0), ("handle", 0, 1, 0), ("body", 0, 0, 1)] {
        let mut c = cmd0(ADMIN_OP_ASYNC_EVENT, ctx, handle);
        c.body[0] = body;
        assert_admin_err(
            g.admin_result(c),
            ADMIN_STATUS_BAD_OPCODE,
            &format!("ASYNC_EVENT with a {what}"),
        );
    }
    let reqs: Vec<u32> = (0..MAX_ASYNC_REQUESTS)
        .map(|_| g.submit_async_event())
        .collect();
    assert_admin_err(
        g.admin_result(cmd0(ADMIN_OP_ASYNC_EVENT, 0, 0)),
        ADMIN_STATUS_NO_RESOURCES,
        "one request beyond MAX_ASYNC_REQUESTS",
    );
    // The pending requests do not hold up other commands.
    g.create_ctx().unwrap();
    // A reset forgets them without completions (the admin queue is gone).
    g.reset();
    g.enable();
    g.setup_admin(ADMIN_DEPTH);
    for _ in 0..MAX_ASYNC_REQUESTS {
        g.submit_async_event();
    }
    assert!(
        g.admin_next(QUIET).is_none(),
        "requests after a reset are pending again"
    );
    let _ = reqs;
}

// ---- a silent peer, a narrower path: two devices with a relay between them ----------------

/// Two devices whose cables end at a relay (started first, so it takes one end of each).
fn relayed(
    name: &str,
    a_mac: [u8; 6],
    b_mac: [u8; 6],
    a_limits: TcpLimits,
) -> (Cable, Relay, FakeGuest, FakeGuest) {
    let cable = Cable::new(name);
    let (pa, pb) = (cable.dir.join("a"), cable.dir.join("b"));
    let relay = Relay::new(&pa, &pb);
    let a = device_with(a_mac, A_ADDR, &pa, None, a_limits);
    let b = device(b_mac, B_ADDR, &pb, None);
    (cable, relay, a, b)
}

/// RFC 9293 §3.8.3: a connection whose peer stops answering gives up after R2
/// retransmissions (`--tcp-retries`): the QP fails with ASYNC_EVENT_QP_ERROR, reason
/// TIMEOUT, its work requests are flushed, and STAT_TCP_TIMEOUTS counts it.
#[test]
fn a_peer_that_vanishes_times_the_connection_out() {
    const RETRIES: u32 = 3;
    let (a_mac, b_mac) = ([0x02, 0, 0, 0, 8, 0xa1], [0x02, 0, 0, 0, 8, 0xb2]);
    let (_cable, relay, mut a, mut b) = relayed(
        "vanish",
        a_mac,
        b_mac,
        TcpLimits {
            max_retries: RETRIES,
            ..TcpLimits::default()
        },
    );
    let (actx, bctx) = (a.create_ctx().unwrap(), b.create_ctx().unwrap());
    let req = a.submit_async_event();
    let (_s, mut c) = connect_pair(
        &mut b,
        bctx,
        &mut a,
        actx,
        ip(B_ADDR),
        6200,
        FRAMING_STREAM,
        4,
        1 << 16,
    );
    // The connection works: one message goes through and is acknowledged.
    a.post_send(&mut c.qp, &[tcp_inline_wqe(1, 0, b"hello")]);
    assert_cqe(&a.wait_cqe(&mut c.scq), CQE_STATUS_SUCCESS, 0, "first send");
    let rto_before = a.stat(STAT_TCP_RTO_TIMEOUTS);
    assert_eq!(a.stat(STAT_TCP_TIMEOUTS), 0);

    // The peer vanishes: from now on nothing gets through, either way.
    relay.set_drop_all(true);
    a.post_recv(&mut c.qp, &[recv_wqe(7, &[c.buf.sge(0, 4096, c.mr.lkey)])]);
    let w = send_wqe_tcp(&c, 2, 8192);
    a.post_send(&mut c.qp, &[w]);
    // About 0.2 * (2^(R+1) - 1) s; generous for a loaded machine.
    let e = a
        .admin_wait(req, Duration::from_secs(120))
        .expect("the connection timed out");
    assert_eq!(
        async_event(&e),
        (
            actx,
            c.qp.id,
            ASYNC_EVENT_QP_ERROR,
            ASYNC_REASON_TIMEOUT,
            false
        )
    );
    let s = a.wait_cqe(&mut c.scq);
    assert_cqe(&s, CQE_STATUS_FLUSHED, 0, "the unacknowledged send");
    assert_eq!(s.wr_id, 2);
    let r = a.wait_cqe(&mut c.rcq);
    assert_cqe(&r, CQE_STATUS_FLUSHED, 0, "the posted receive");
    assert_eq!(r.wr_id, 7);
    assert_eq!(a.stat(STAT_TCP_TIMEOUTS), 1, "STAT_TCP_TIMEOUTS counts it");
    assert_eq!(
        a.stat(STAT_TCP_RTO_TIMEOUTS) - rto_before,
        RETRIES as u64,
        "it retransmitted --tcp-retries times, then gave up"
    );
    assert!(relay.dropped() > 0);
    // The QP is in the error state: a new send is flushed at once.
    a.post_send(&mut c.qp, &[tcp_inline_wqe(3, 0, b"late")]);
    assert_cqe(
        &a.wait_cqe(&mut c.scq),
        CQE_STATUS_FLUSHED,
        0,
        "send after the timeout",
    );
}

/// A send WQE of `len` bytes from the start of the endpoint's buffer.
fn send_wqe_tcp(e: &TcpEnd, wr_id: u64, len: u32) -> WqeBytes {
    tcp_send_wqe(wr_id, 0, &[e.buf.sge(0, len, e.mr.lkey)])
}

/// RFC 8201 and RFC 9293 §3.7.3 through the engine: an ICMPv6 packet too big from a router
/// on the path, arriving at a device in the middle of a bulk transfer, lowers the MSS of
/// the live connection — every packet the device sends afterwards fits the new MTU, and
/// full-sized segments of the new MSS go unfragmented — and the transfer completes intact.
#[test]
fn a_packet_too_big_narrows_a_live_connection() {
    const PATH_MTU: usize = 1280;
    let (a_mac, b_mac) = ([0x02, 0, 0, 0, 9, 0xa1], [0x02, 0, 0, 0, 9, 0xb2]);
    let (_cable, relay, mut a, mut b) = relayed("pmtu", a_mac, b_mac, TcpLimits::default());
    let (actx, bctx) = (a.create_ctx().unwrap(), b.create_ctx().unwrap());
    let n = 3 << 20;
    let depth = 8;
    let (mut s, mut c) = connect_pair(
        &mut b,
        bctx,
        &mut a,
        actx,
        ip(B_ADDR),
        6201,
        FRAMING_STREAM,
        depth,
        Flow::buf_len(n, depth),
    );
    relay.plan_packet_too_big(PtbPlan {
        after: 300,
        mtu: PATH_MTU as u32,
        router: "fd51:5050::3:fe".parse().unwrap(),
        a_mac,
        a_addr: A_ADDR.parse().unwrap(),
        b_mac,
        b_addr: B_ADDR.parse().unwrap(),
    });
    let mut rng = Rng::new(81);
    let mut fa = Flow::new(&mut a, &c, rng.bytes(n), 82);
    let mut fb = Flow::new(&mut b, &s, Vec::new(), 83);
    run_pair(
        &mut a,
        &mut c,
        &mut fa,
        &mut b,
        &mut s,
        &mut fb,
        Duration::from_secs(120),
    );
    let sent = relay.sent_by_a();
    let (before, after): (Vec<_>, Vec<_>) = sent.iter().partition(|p| p.after_marks == 0);
    assert!(
        !after.is_empty(),
        "the device answered the relay's echo request after the packet too big"
    );
    let full = Config::mss_for_mtu(1500) as usize;
    assert!(
        before.iter().any(|p| p.ip_len > PATH_MTU),
        "before the packet too big, segments used the link MTU"
    );
    let too_big: Vec<_> = after.iter().filter(|p| p.ip_len > PATH_MTU).collect();
    assert!(
        too_big.is_empty(),
        "{} packets larger than the path MTU after it: {:?}",
        too_big.len(),
        too_big.first()
    );
    let data: Vec<_> = after
        .iter()
        .filter(|p| p.tcp_payload.is_some_and(|l| l > 0))
        .collect();
    let largest = data.iter().map(|p| p.ip_len).max().unwrap_or(0);
    assert!(
        data.len() >= 100,
        "only {} unfragmented data segments after the packet too big ({} fragments)",
        data.len(),
        after.iter().filter(|p| p.fragment).count()
    );
    assert!(
        largest > PATH_MTU - 100 && data.iter().all(|p| p.tcp_payload.unwrap() < full),
        "segments of the new MSS fill the new MTU (largest packet {largest})"
    );
    let frags = after.iter().filter(|p| p.fragment).count();
    println!(
        "{} packets before the packet too big, {} after: {} data segments, {frags} fragments, largest {largest}",
        before.len(),
        after.len(),
        data.len()
    );
}

// ---- receives posted before the connection exists -----------------------------------------

/// Receive WRs posted on an idle QP (before ACCEPT or CONNECT, or while either is pending)
/// become the connection's receive space: they are kept, not flushed, and the peer's data
/// completes them in order.
#[test]
fn receives_posted_before_accept_or_connect_are_kept_and_filled() {
    // The ACCEPT waits for the connection, or the device has accepted it before the ACCEPT
    // comes (then the client's CONNECT completes first).
    for (framing, accept_first) in [
        (FRAMING_STREAM, true),
        (FRAMING_MESSAGE, true),
        (FRAMING_STREAM, false),
        (FRAMING_MESSAGE, false),
    ] {
        let mut g = FakeGuest::new();
        let (sctx, cctx) = (g.create_ctx().unwrap(), g.create_ctx().unwrap());
        let port = 6300 + 2 * framing as u16 + accept_first as u16;
        let mut s = g.tcp_endpoint_in(sctx, framing, 8, 1 << 16);
        let mut c = g.tcp_endpoint_in(cctx, framing, 8, 1 << 16);
        // Each QP: one receive while idle, one while its ACCEPT or CONNECT is pending.
        g.post_recv(&mut s.qp, &[recv_wqe(1, &[s.buf.sge(0, 4096, s.mr.lkey)])]);
        g.post_recv(&mut c.qp, &[recv_wqe(3, &[c.buf.sge(0, 4096, c.mr.lkey)])]);
        let l = g.listen(sctx, UNSPECIFIED, port, 4).expect("listen");
        let accept = |g: &mut FakeGuest, s: &mut TcpEnd| {
            let acc = g.submit_accept(sctx, l, s.qp.id);
            g.post_recv(
                &mut s.qp,
                &[recv_wqe(2, &[s.buf.sge(4096, 4096, s.mr.lkey)])],
            );
            acc
        };
        let acc = accept_first.then(|| accept(&mut g, &mut s));
        let con = g.submit_connect(cctx, c.qp.id, LOOPBACK, port);
        g.post_recv(
            &mut c.qp,
            &[recv_wqe(4, &[c.buf.sge(4096, 4096, c.mr.lkey)])],
        );
        let r = g.admin_wait_done(con);
        assert_eq!(
            r.status,
            ADMIN_STATUS_OK,
            "connect: {}",
            admin_status_name(r.status)
        );
        let acc = acc.unwrap_or_else(|| accept(&mut g, &mut s));
        let r = g.admin_wait_done(acc);
        assert_eq!(
            r.status,
            ADMIN_STATUS_OK,
            "accept: {}",
            admin_status_name(r.status)
        );
        let how = format!("framing {framing}, accept first {accept_first}");
        send_into_posted(
            &mut g,
            &mut c,
            &mut s,
            &format!("client -> server, {how}"),
            [b"first", b"second!"],
        );
        send_into_posted(
            &mut g,
            &mut s,
            &mut c,
            &format!("server -> client, {how}"),
            [b"third", b"fourth!"],
        );
    }
}

/// Sends two messages from `from`; the two receives `to` posted (4 KiB each, at offsets 0
/// and 4096) complete with them in order.
fn send_into_posted(
    g: &mut FakeGuest,
    from: &mut TcpEnd,
    to: &mut TcpEnd,
    what: &str,
    words: [&[u8]; 2],
) {
    for (i, w) in words.iter().enumerate() {
        g.post_send(&mut from.qp, &[tcp_inline_wqe(10 + i as u64, 0, w)]);
        assert_cqe(&g.wait_cqe(&mut from.scq), CQE_STATUS_SUCCESS, 0, "send");
        let r = g
            .try_wait_cqe(&mut to.rcq, TIMEOUT)
            .unwrap_or_else(|| panic!("{what}: receive {i} did not complete"));
        assert_cqe(&r, CQE_STATUS_SUCCESS, 0, &format!("{what}: receive {i}"));
        assert_eq!(r.byte_len as usize, w.len(), "{what}: receive {i}");
        assert_eq!(g.buf_read(&to.buf, 4096 * i as u64, w.len()), *w, "{what}");
    }
}
// ---- message framing: receive buffers just larger than the message -----------------------

/// Every message completes its receive WR whatever the WR's size: exactly the message,
/// a few bytes more (the message's header takes no room in the WR, so the stream carries
/// more bytes than the WR holds), a page, or less (LOCAL_LENGTH). One message at a time,
/// then many back to back into WRs one byte larger than each.
#[test]
fn messages_complete_receive_wrs_of_any_size() {
    let mut g = FakeGuest::new();
    let (sctx, cctx) = (g.create_ctx().unwrap(), g.create_ctx().unwrap());
    let (mut s, mut c) = g.loopback_pair(sctx, cctx, 6320, FRAMING_MESSAGE);
    let sizes = [
        0usize, 1, 7, 8, 9, 100, 1000, 1001, 1400, 1431, 1432, 1440, 1500, 2000, 2880, 3000, 4088,
        4095, 4096, 4097, 10_000, 30_000, 60_000,
    ];
    let mut rng = Rng::new(31);
    let mut wr = 0u64;
    for &size in &sizes {
        let data = rng.bytes(size);
        g.buf_write(&c.buf, 0, &data);
        for buf in [size, size + 1, size + 7, size + 8, size + 9, 4096] {
            let buf = buf.min(1 << 16);
            wr += 1;
            g.post_recv(
                &mut s.qp,
                &[recv_wqe(wr, &[s.buf.sge(0, buf as u32, s.mr.lkey)])],
            );
            g.post_send(
                &mut c.qp,
                &[tcp_send_wqe(
                    wr,
                    wr as u32,
                    &[c.buf.sge(0, size as u32, c.mr.lkey)],
                )],
            );
            let what = format!("{size} B message into a {buf} B receive");
            let sc = g.wait_cqe(&mut c.scq);
            assert_cqe(&sc, CQE_STATUS_SUCCESS, 0, &format!("send of a {what}"));
            let r = g
                .try_wait_cqe(&mut s.rcq, TIMEOUT)
                .unwrap_or_else(|| panic!("{what}: the receive did not complete"));
            assert_eq!((r.wr_id, r.imm_data), (wr, wr as u32), "{what}");
            assert_eq!(r.byte_len as usize, size, "{what}");
            if size <= buf {
                assert_cqe(&r, CQE_STATUS_SUCCESS, 0, &what);
                assert_eq!(g.buf_read(&s.buf, 0, size), data, "{what}: intact");
            } else {
                assert_cqe(&r, CQE_STATUS_LOCAL_LENGTH, 0, &what);
            }
        }
    }
    // Back to back: a queue of WRs, each one byte larger than its message.
    let burst = [100usize, 1000, 1, 0, 1431, 3000, 7, 2000]; // the rings hold 8
    let mut off = 0u64;
    let mut recvs = Vec::new();
    let mut sends = Vec::new();
    let mut datas = Vec::new();
    for (i, &size) in burst.iter().enumerate() {
        let data = rng.bytes(size);
        g.buf_write(&c.buf, off, &data);
        recvs.push(recv_wqe(
            500 + i as u64,
            &[s.buf.sge(off, size as u32 + 1, s.mr.lkey)],
        ));
        sends.push(tcp_send_wqe(
            500 + i as u64,
            i as u32,
            &[c.buf.sge(off, size as u32, c.mr.lkey)],
        ));
        datas.push((off, data));
        off += size as u64 + 1;
    }
    g.post_recv(&mut s.qp, &recvs);
    g.post_send(&mut c.qp, &sends);
    for (i, (off, data)) in datas.iter().enumerate() {
        let what = format!("burst message {i} ({} B)", data.len());
        let r = g
            .try_wait_cqe(&mut s.rcq, TIMEOUT)
            .unwrap_or_else(|| panic!("{what}: the receive did not complete"));
        assert_cqe(&r, CQE_STATUS_SUCCESS, 0, &what);
        assert_eq!(
            (r.wr_id, r.byte_len as usize),
            (500 + i as u64, data.len()),
            "{what}"
        );
        assert_eq!(
            &g.buf_read(&s.buf, *off, data.len()),
            data,
            "{what}: intact"
        );
    }
    for i in 0..burst.len() {
        let sc = g.wait_cqe(&mut c.scq);
        assert_cqe(&sc, CQE_STATUS_SUCCESS, 0, "burst send");
        assert_eq!(sc.wr_id, 500 + i as u64);
    }
}

// ---- the same port again after a graceful close --------------------------------------------

/// Both ends close gracefully and are destroyed (the side that closed first is left in
/// TIME-WAIT without its QP), then a new listener on the same port takes a new connection
/// over the loopback at once — whichever side closed first, so whichever end's 4-tuple
/// lingers: the new SYN meets that TIME-WAIT and must be taken as a new incarnation.
/// (Like `qpip-cat -l PORT` run twice in a row.)
#[test]
fn a_port_is_usable_again_at_once_after_a_graceful_close_and_destroy() {
    // Four rounds each: a new incarnation is told from the old by its timestamps (RFC
    // 6191), and a clock that restarted per connection passed by luck half the time.
    for (i, server_first) in [true, false].repeat(4).into_iter().enumerate() {
        let mut g = FakeGuest::new();
        let (sctx, cctx) = (g.create_ctx().unwrap(), g.create_ctx().unwrap());
        let port = 6130 + i as u16;
        // Which round a failed connection below belongs to.
        eprintln!("round {i}: server closed first {server_first}");
        let connect =
            |g: &mut FakeGuest| g.loopback_pair_listening(sctx, cctx, port, FRAMING_STREAM);
        let (l, mut s, mut c) = connect(&mut g);
        // The first connection lives a while, so its last timestamps are well past its
        // first.
        std::thread::sleep(Duration::from_millis(30));
        g.post_recv(&mut s.qp, &[recv_wqe(1, &[s.buf.sge(0, 4096, s.mr.lkey)])]);
        g.post_recv(&mut c.qp, &[recv_wqe(1, &[c.buf.sge(0, 4096, c.mr.lkey)])]);
        let order = if server_first {
            [(sctx, s.qp.id), (cctx, c.qp.id)]
        } else {
            [(cctx, c.qp.id), (sctx, s.qp.id)]
        };
        for (ctx, qp) in order {
            let cl = g.submit_close(ctx, qp);
            assert_eq!(g.admin_wait_done(cl).status, ADMIN_STATUS_OK, "close");
        }
        // Both saw the other's end of stream.
        assert_eq!(g.wait_cqe(&mut s.rcq).byte_len, 0);
        assert_eq!(g.wait_cqe(&mut c.rcq).byte_len, 0);
        g.destroy_qp(sctx, s.qp.id).unwrap();
        g.destroy_qp(cctx, c.qp.id).unwrap();
        g.destroy_listener(sctx, l).unwrap();
        // The same port again at once, meeting the lingering TIME-WAIT.
        connect(&mut g);
    }
}

/// A receive WR whose guest memory the VMM unmaps after it was posted: the bytes cannot be
/// placed, and the WR completes in error — never as a success with its data missing.
#[test]
fn a_receive_whose_memory_went_away_completes_in_error() {
    use std::os::fd::{AsRawFd, FromRawFd};
    let mut g = FakeGuest::new();
    let (sctx, cctx) = (g.create_ctx().unwrap(), g.create_ctx().unwrap());
    let (mut s, mut c) = g.loopback_pair(sctx, cctx, 6111, FRAMING_MESSAGE);

    // A second stretch of guest RAM, as a hot-plugged DIMM would be, holding the buffer.
    const EXTRA: u64 = 0x40_0000_0000;
    const EXTRA_SIZE: u64 = 1 << 20;
    // SAFETY: memfd creation; the fd is owned by the File from here on.
    let file = unsafe {
        std::fs::File::from_raw_fd(libc::memfd_create(c"extra-ram".as_ptr(), libc::MFD_CLOEXEC))
    };
    file.set_len(EXTRA_SIZE).unwrap();
    g.client
        .dma_map(0, EXTRA, EXTRA_SIZE, file.as_raw_fd())
        .unwrap();
    let buf = Buf {
        pages: vec![EXTRA, EXTRA + PAGE],
        offset: 0,
        len: 2 * PAGE,
        iova: 0x6000_0000_0000,
    };
    let mr = g.reg_mr(sctx, &buf, MR_ACCESS_LOCAL_WRITE).unwrap();
    g.post_recv(
        &mut s.qp,
        &[recv_wqe(7, &[buf.sge(0, 2 * PAGE as u32, mr.lkey)])],
    );
    // The device takes the WR (its send of a first message proves the engine ran past the
    // doorbell), then the memory goes.
    g.post_send(&mut c.qp, &[tcp_inline_wqe(1, 0, b"first")]);
    assert_eq!(g.wait_cqe(&mut c.scq).status, CQE_STATUS_SUCCESS);
    let got = g.wait_cqe(&mut s.rcq);
    assert_eq!((got.wr_id, got.status), (7, CQE_STATUS_SUCCESS), "{got:?}");
    g.post_recv(
        &mut s.qp,
        &[recv_wqe(8, &[buf.sge(0, 2 * PAGE as u32, mr.lkey)])],
    );
    // A message to make sure the device took WR 8 before the unmap.
    g.post_send(&mut c.qp, &[tcp_inline_wqe(2, 0, b"")]);
    assert_eq!(g.wait_cqe(&mut c.scq).status, CQE_STATUS_SUCCESS);
    let empty = g.wait_cqe(&mut s.rcq);
    assert_eq!((empty.wr_id, empty.byte_len), (8, 0), "{empty:?}");
    g.post_recv(
        &mut s.qp,
        &[recv_wqe(9, &[buf.sge(0, 2 * PAGE as u32, mr.lkey)])],
    );
    std::thread::sleep(Duration::from_millis(50));
    g.client.dma_unmap(EXTRA, EXTRA_SIZE).unwrap();
    g.post_send(
        &mut c.qp,
        &[tcp_inline_wqe(3, 0, b"lost in unmapped memory")],
    );
    assert_eq!(g.wait_cqe(&mut c.scq).status, CQE_STATUS_SUCCESS);
    let lost = g.wait_cqe(&mut s.rcq);
    assert_eq!(lost.wr_id, 9);
    assert_eq!(
        (lost.status, lost.detail),
        (CQE_STATUS_LOCAL_PROTECTION, CQE_DETAIL_OUT_OF_BOUNDS),
        "a placement that failed must not complete as a success: {lost:?}"
    );
}

/// Many small messages into few large receive WRs (message framing), taken by an
/// application that reposts only now and then: each message takes a whole WR, so the
/// posted space in bytes is far more than the receiver can place, and the sender runs
/// ahead. The window offered must still be one the receiver keeps: over a lossless cable
/// every segment goes once (no retransmission, which a segment dropped inside the window
/// would cause) and every message arrives intact and in order.
#[test]
fn small_messages_into_large_receives_lose_nothing() {
    const MSG: usize = 1024;
    const MSGS: usize = 1000;
    const WRS: u64 = 8;
    const WR_LEN: u32 = 64 * 1024;
    const IN_FLIGHT: usize = 64;
    let (_cable, mut a, mut b, mut s, mut c) = cabled_pair(
        6011,
        None,
        FRAMING_MESSAGE,
        64,
        WRS * WR_LEN as u64 + (IN_FLIGHT * MSG) as u64,
    );
    let mut rng = Rng::new(31);
    let data = rng.bytes(MSG * MSGS);
    let rwqe = |i: u64| recv_wqe(i, &[s.buf.sge(i * WR_LEN as u64, WR_LEN, s.mr.lkey)]);
    let posted: Vec<_> = (0..WRS).map(rwqe).collect();
    a.post_recv(&mut s.qp, &posted);
    // The sender's slots sit after the receiver's area in its own buffer.
    let base = WRS * WR_LEN as u64;
    let (mut sent, mut done, mut got) = (0usize, 0usize, 0usize);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut next_look = Instant::now();
    while got < MSGS {
        assert!(
            Instant::now() < deadline,
            "stalled: {sent} sent, {done} send completions, {got} of {MSGS} received"
        );
        let mut busy = false;
        while sent < MSGS && sent - done < IN_FLIGHT {
            let at = base + ((sent % IN_FLIGHT) * MSG) as u64;
            b.buf_write(&c.buf, at, &data[sent * MSG..(sent + 1) * MSG]);
            let w = tcp_send_wqe(sent as u64, 0, &[c.buf.sge(at, MSG as u32, c.mr.lkey)]);
            b.post_send(&mut c.qp, &[w]);
            sent += 1;
            busy = true;
        }
        while let Some(sc) = b.poll_cq(&mut c.scq) {
            assert_cqe(&sc, CQE_STATUS_SUCCESS, 0, "send");
            done += 1;
            busy = true;
        }
        // The receiving application looks every 20 ms.
        while Instant::now() >= next_look {
            let Some(r) = a.poll_cq(&mut s.rcq) else {
                next_look = Instant::now() + Duration::from_millis(20);
                break;
            };
            assert_cqe(&r, CQE_STATUS_SUCCESS, 0, "receive");
            assert_eq!(r.byte_len as usize, MSG, "length of message {got}");
            let slot = r.wr_id;
            assert_eq!(
                a.buf_read(&s.buf, slot * WR_LEN as u64, MSG),
                &data[got * MSG..(got + 1) * MSG],
                "message {got} intact and in order"
            );
            got += 1;
            a.post_recv(&mut s.qp, &[rwqe(slot)]);
            busy = true;
        }
        if !busy {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    assert_eq!(
        b.stat(STAT_TCP_RETRANS_SEGS),
        0,
        "a segment was sent twice over a lossless cable: the receiver dropped data inside \
         the window it offered"
    );
    assert_eq!(
        a.stat(STAT_TCP_OOO_SEGS),
        0,
        "out-of-order segments at the receiver"
    );
}
