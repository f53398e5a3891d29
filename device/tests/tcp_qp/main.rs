//! TCP queue pairs of whole devices (the real engine behind vfio-user) driven by fake
//! guests: connect/accept, stream and message framing, flow control by posted receive
//! space, close, destroy and orphans, asynchronous events, over the device's own loopback,
//! between two devices joined by a cable (impaired, or with a relay between them), and
//! against a remote TCP played frame by frame by the test (the conformance scripts).
//! Here: what the modules share to set up devices and connections between them.

use qpip_testkit as support;

// The remote end of a cable played frame by frame, in a small script format.
#[path = "../support/tcp_script/mod.rs"]
mod script;

mod conformance;
mod connections;
mod deregistered;
mod events;
mod ipv4;
mod memory_pressure;
mod messages;
mod orphan;
mod receives;
mod relayed;

use std::time::{Duration, Instant};

use qpip_device::engine::tcp::TcpLimits;
use sha2::{Digest, Sha256};
use support::relay::Relay;
use support::*;

const A_ADDR: &str = "fd51:5050::3:1";
const B_ADDR: &str = "fd51:5050::3:2";
/// The two devices of [`cabled_pair`] over IPv6.
const IPV6_PAIR: [&str; 2] = [A_ADDR, B_ADDR];

/// How long a test waits to be sure an event does not come.
const QUIET: Duration = Duration::from_millis(300);

fn sha(b: &[u8]) -> [u8; 32] {
    Sha256::digest(b).into()
}

/// Waits for two asynchronous commands, one on each device (either may need the other's
/// turn): their completions, `a`'s first.
fn both_completed(a: &mut FakeGuest, ida: u32, b: &mut FakeGuest, idb: u32) -> [AdminCqe; 2] {
    let (ca, cb) = a.admin_wait_both(ida, b, idb);
    [ca, cb]
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
    let [a, c] = both_completed(sg, acc, cg, con);
    assert_admin_ok(&a, "accept");
    assert_admin_ok(&c, "connect");
    assert_eq!(peer_addr(&c), addr, "connect reports the peer");
    assert_eq!(c.result2, port as u32);
    assert_ne!(a.result2, 0, "accept reports the peer's port");
    (server, client)
}

/// Two devices at `a_addr` and `b_addr` (IPv6, or IPv4 on a /24) joined by a cable
/// (impaired with `impair`), a context on each, and a TCP connection between a QP of each
/// on `port` (which also tells the devices' MACs apart): returns (the cable's folder,
/// device a, device b, the end `s` on a — accepted on `a_addr`:`port` —, the end `c` on
/// b, which connected). Bind the folder first so that it goes last: it holds the sockets.
fn cabled_pair(
    [a_addr, b_addr]: [&str; 2],
    port: u16,
    impair: Option<&str>,
    framing: u8,
    depth: u32,
    buf_len: u64,
) -> (ScratchDir, FakeGuest, FakeGuest, TcpEnd, TcpEnd) {
    let dir = ScratchDir::new(&format!("tcpqp-port{port}"));
    let cable = dir.join("cable");
    let tag = port as u8;
    let limits = TcpLimits::default();
    let mut a = cabled_device([0x02, 0, 0, 0, tag, 0xa1], a_addr, &cable, impair, limits);
    let mut b = cabled_device([0x02, 0, 0, 0, tag, 0xb2], b_addr, &cable, impair, limits);
    let (ca, cb) = (a.create_ctx().unwrap(), b.create_ctx().unwrap());
    let (s, c) = connect_pair(
        &mut a,
        ca,
        &mut b,
        cb,
        ip(a_addr),
        port,
        framing,
        depth,
        buf_len,
    );
    (dir, a, b, s, c)
}

/// Devices A (at `a_addr`, with `a_limits`) and B (at `b_addr`) whose cables end at a
/// relay, started first so that it takes one end of each; the folder holds the cables.
fn relayed_devices(
    name: &str,
    macs: [[u8; 6]; 2],
    [a_addr, b_addr]: [&str; 2],
    a_limits: TcpLimits,
) -> (ScratchDir, Relay, FakeGuest, FakeGuest) {
    let dir = ScratchDir::new(name);
    let (pa, pb) = (dir.join("a"), dir.join("b"));
    let relay = Relay::new(&pa, &pb);
    let a = cabled_device(macs[0], a_addr, &pa, None, a_limits);
    let b = cabled_device(macs[1], b_addr, &pb, None, TcpLimits::default());
    (dir, relay, a, b)
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

/// Two devices at `addrs` joined by a cable impaired with `impair`, and [`bulk`] between
/// their QPs connected on `port` (stream framing).
fn bulk_across_cable(
    addrs: [&str; 2],
    port: u16,
    impair: Option<&str>,
    n: usize,
    seed: u64,
    limit: Duration,
) {
    let (_cable, mut a, mut b, mut sa, mut cb_end) = cabled_pair(
        addrs,
        port,
        impair,
        FRAMING_STREAM,
        16,
        Flow::buf_len(n, 16),
    );
    bulk(&mut a, &mut sa, &mut b, &mut cb_end, n, seed, limit);
}

/// `n` random bytes each way between the ends `ea` and `eb`, verified.
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

/// A receive WQE of `len` bytes at `off` in the endpoint's buffer.
fn recv_at(e: &TcpEnd, wr_id: u64, off: u64, len: u32) -> WqeBytes {
    recv_wqe(wr_id, &[e.buf.sge(off, len, e.mr.lkey)])
}

/// Posts `n` receive WRs of 64 KiB each on `e` (wr_id 100 + i, at i × 64 KiB of its
/// buffer) and waits for the `n` messages to complete them, in order.
fn receive_messages(g: &mut FakeGuest, e: &mut TcpEnd, n: usize) -> Vec<Cqe> {
    let rwqes: Vec<_> = (0..n)
        .map(|i| recv_at(e, 100 + i as u64, i as u64 * 65_536, 65_536))
        .collect();
    g.post_recv(&mut e.qp, &rwqes);
    (0..n)
        .map(|i| {
            g.try_wait_cqe(&mut e.rcq, Duration::from_secs(10))
                .unwrap_or_else(|| panic!("message {i} did not arrive"))
        })
        .collect()
}

/// Posts one receive of `len` bytes at `off` in the endpoint's buffer.
fn post_recv_at(g: &mut FakeGuest, e: &mut TcpEnd, wr_id: u64, off: u64, len: u32) {
    let w = recv_at(e, wr_id, off, len);
    g.post_recv(&mut e.qp, &[w]);
}
