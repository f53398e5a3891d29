//! A silent peer and a narrower path: two devices with a relay between them, which drops
//! everything (the connection times out) or answers for a router with a packet too big
//! (the connection's segments shrink to fit).

use std::time::Duration;

use qpip_device::net::tcp::Config;
use support::relay::PtbPlan;

use super::*;

/// The MACs of devices A and B in a test told apart by `tag`.
fn macs(tag: u8) -> [[u8; 6]; 2] {
    [[0x02, 0, 0, 0, tag, 0xa1], [0x02, 0, 0, 0, tag, 0xb2]]
}

/// Devices A and B (at `A_ADDR` and `B_ADDR`, with the [`macs`] of `tag`) with a relay
/// between them, A with `a_limits`.
fn relayed(name: &str, tag: u8, a_limits: TcpLimits) -> (ScratchDir, Relay, FakeGuest, FakeGuest) {
    relayed_devices(
        &format!("tcpqp-{name}"),
        macs(tag),
        [A_ADDR, B_ADDR],
        a_limits,
    )
}

/// RFC 9293 §3.8.3: a connection whose peer stops answering gives up after R2
/// retransmissions (`--tcp-retries`): the QP fails with ASYNC_EVENT_QP_ERROR, reason
/// TIMEOUT, its work requests are flushed, and STAT_TCP_TIMEOUTS counts it.
#[test]
fn a_peer_that_vanishes_times_the_connection_out() {
    const RETRIES: u32 = 3;
    let limits = TcpLimits {
        max_retries: RETRIES,
        ..TcpLimits::default()
    };
    let (_dir, relay, mut a, mut b) = relayed("vanish", 8, limits);
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
    post_recv_at(&mut a, &mut c, 7, 0, 4096);
    let w = send_wqe_tcp(&c, 2, 8192);
    a.post_send(&mut c.qp, &[w]);
    // About 0.2 * (2^(R+1) - 1) s; generous for a loaded machine.
    assert_timed_out(&mut a, req, (actx, c.qp.id), Duration::from_secs(120));
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

/// The asynchronous event `req` of `g` comes within `within` and says that QP `qp` of
/// context `ctx` failed because its connection timed out.
fn assert_timed_out(g: &mut FakeGuest, req: u32, (ctx, qp): (u32, u32), within: Duration) {
    let e = g.admin_wait(req, within).expect("the connection timed out");
    assert_eq!(
        async_event(&e),
        (ctx, qp, ASYNC_EVENT_QP_ERROR, ASYNC_REASON_TIMEOUT, false)
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
    let (_dir, relay, mut a, mut b) = relayed("pmtu", 9, TcpLimits::default());
    let [a_mac, b_mac] = macs(9);
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

/// SET_QP_OPT KEEPALIVE, set on the accepting QP before its ACCEPT and on the connecting
/// QP once connected: while the peer answers, probes keep an idle connection up; once the
/// peer vanishes, the unanswered probes time the connection out (QP error, reason TIMEOUT,
/// the posted receive flushed) with nothing to send, on both ends.
#[test]
fn keepalive_finds_a_vanished_peer_of_an_idle_connection() {
    let (_dir, relay, mut a, mut b) = relayed("keepalive", 9, TcpLimits::default());
    let (actx, bctx) = (a.create_ctx().unwrap(), b.create_ctx().unwrap());
    let (areq, breq) = (a.submit_async_event(), b.submit_async_event());
    let mut s = b.tcp_endpoint_in(bctx, FRAMING_STREAM, 4, 1 << 16);
    let mut c = a.tcp_endpoint_in(actx, FRAMING_STREAM, 4, 1 << 16);
    let keepalive = |probes| SetQpOptArgs {
        option: QP_OPT_KEEPALIVE,
        keepalive_idle: 1,
        keepalive_interval: 1,
        keepalive_probes: probes,
        ..FromZeros::new_zeroed()
    };
    b.admin_result(cmd(ADMIN_OP_SET_QP_OPT, bctx, s.qp.id, &keepalive(2)))
        .expect("keepalive on the accepting QP");
    let l = b.listen(bctx, UNSPECIFIED, 6300, 8).expect("listen");
    let acc = b.submit_accept(bctx, l, s.qp.id);
    let con = a.submit_connect(actx, c.qp.id, ip(B_ADDR), 6300);
    let [ca, cb] = both_completed(&mut a, con, &mut b, acc);
    assert_admin_ok(&ca, "connect");
    assert_admin_ok(&cb, "accept");
    a.admin_result(cmd(ADMIN_OP_SET_QP_OPT, actx, c.qp.id, &keepalive(3)))
        .expect("keepalive on the connected QP");
    post_recv_at(&mut b, &mut s, 7, 0, 4096);

    // Idle for several keepalive periods: each peer answers the other's probes.
    assert!(
        b.admin_wait(breq, Duration::from_millis(3500)).is_none(),
        "a live peer keeps the connection up"
    );
    a.post_send(&mut c.qp, &[tcp_inline_wqe(1, 0, b"still here")]);
    assert_cqe(
        &a.wait_cqe(&mut c.scq),
        CQE_STATUS_SUCCESS,
        0,
        "send after idling",
    );
    let r = b.wait_cqe(&mut s.rcq);
    assert_cqe(&r, CQE_STATUS_SUCCESS, 10, "receive after idling");
    post_recv_at(&mut b, &mut s, 8, 0, 4096);
    post_recv_at(&mut a, &mut c, 9, 0, 4096);
    assert_eq!(a.stat(STAT_TCP_TIMEOUTS) + b.stat(STAT_TCP_TIMEOUTS), 0);

    // The peer vanishes with nothing in flight: idle 1 s, then the probes 1 s apart.
    let dropped = relay.dropped();
    relay.set_drop_all(true);
    for (g, ctx, req, e, wr_id) in [
        (&mut b, bctx, breq, &mut s, 8),
        (&mut a, actx, areq, &mut c, 9),
    ] {
        assert_timed_out(g, req, (ctx, e.qp.id), Duration::from_secs(60));
        let r = g.wait_cqe(&mut e.rcq);
        assert_cqe(&r, CQE_STATUS_FLUSHED, 0, "the posted receive");
        assert_eq!(r.wr_id, wr_id);
        assert_eq!(g.stat(STAT_TCP_TIMEOUTS), 1, "STAT_TCP_TIMEOUTS counts it");
    }
    assert!(relay.dropped() > dropped, "the probes were sent");
}
