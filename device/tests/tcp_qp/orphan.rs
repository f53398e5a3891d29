//! Destroying a TCP QP after a graceful close, through fake guests on two devices joined
//! by a relay: the connection finishes its close without the QP (an orphan: its FIN
//! retransmitted, TIME-WAIT, a reset for new data), so the peer sees every byte and a
//! clean end of stream — never a reset — even when the FIN was lost at the moment of the
//! destroy. Without a close, with data not yet acknowledged, or beyond the device's bound
//! on orphans, a destroy still resets the peer. QUERY_STATS counts each orphan
//! (`STAT_TCP_ORPHANS`) and each one refused at the bound or reset for new data
//! (`STAT_TCP_ORPHAN_ABORTS`).

use std::time::{Duration, Instant};

use qpip_device::engine::tcp::TcpLimits;

use super::*;

const A_ADDR: &str = "fd51:5050::5:1";
const B_ADDR: &str = "fd51:5050::5:2";
/// A short TIME-WAIT for A (2 × this), so that a test sees an orphan's end.
const MSL: Duration = Duration::from_millis(250);

/// Devices A and B whose cables end at a relay; A runs with `a_limits` and [`MSL`].
fn relayed(name: &str, n: u8, a_limits: TcpLimits) -> (ScratchDir, Relay, FakeGuest, FakeGuest) {
    let macs = [[0x02, 0, 0, 0x0b, n, 0xa1], [0x02, 0, 0, 0x0b, n, 0xb2]];
    let a_limits = TcpLimits {
        msl: MSL,
        ..a_limits
    };
    relayed_devices(&format!("orphan-{name}"), macs, [A_ADDR, B_ADDR], a_limits)
}

/// A QP of A (bound to `a_port` if given) connected to a QP of B accepted on listener `l`
/// (B's `port`). Returns (B's end, A's end, A's port as B saw it).
fn pair(
    a: &mut FakeGuest,
    actx: u32,
    b: &mut FakeGuest,
    bctx: u32,
    l: u32,
    port: u16,
    a_port: Option<u16>,
) -> (TcpEnd, TcpEnd, u16) {
    let s = b.tcp_endpoint_in(bctx, FRAMING_STREAM, 8, 1 << 16);
    let c = a.tcp_endpoint_in(actx, FRAMING_STREAM, 8, 1 << 19);
    if let Some(p) = a_port {
        assert_eq!(a.bind(actx, c.qp.id, UNSPECIFIED, p), Ok(p));
    }
    let acc = b.submit_accept(bctx, l, s.qp.id);
    let con = a.submit_connect(actx, c.qp.id, ip(B_ADDR), port);
    let [connected, accepted] = both_completed(a, con, b, acc);
    assert_admin_ok(&connected, "connect");
    assert_admin_ok(&accepted, "accept");
    (s, c, accepted.result2 as u16)
}

/// CLOSE, waited for: our FIN is acknowledged (FIN-WAIT-2, the peer in CLOSE-WAIT).
fn close(g: &mut FakeGuest, ctx: u32, e: &TcpEnd) {
    let cl = g.submit_close(ctx, e.qp.id);
    g.admin_wait_ok(cl, "close");
}

/// The next asynchronous event: (object, kind, reason).
fn next_event(g: &mut FakeGuest) -> (u32, u16, u8) {
    let id = g.submit_async_event();
    let (_, object, kind, reason, lost) = async_event(&g.admin_wait_done(id));
    assert!(!lost);
    (object, kind, reason)
}

/// Skips end-of-stream events and returns the first error event.
fn next_error(g: &mut FakeGuest) -> (u32, u16, u8) {
    loop {
        let e = next_event(g);
        if e.1 != ASYNC_EVENT_PEER_CLOSED {
            return e;
        }
    }
}

/// Waits until `f` holds.
fn until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + TIMEOUT;
    while !f() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Resets A has sent (exact as of the last admin completion: a destroy's reset is counted
/// when its completion is written; segments of the peer in flight to a connection that
/// is gone are answered with more).
fn rsts(g: &mut FakeGuest) -> u64 {
    g.stat(STAT_TCP_RSTS_OUT)
}

/// (`STAT_TCP_ORPHANS`, `STAT_TCP_ORPHAN_ABORTS`) as QUERY_STATS reads them: an orphan is
/// counted when its QP's destroy completes, an orphan's reset before the reset is sent.
fn orphan_stats(g: &mut FakeGuest) -> (u64, u64) {
    let s = g.query_stats();
    (
        s.counters[STAT_TCP_ORPHANS as usize],
        s.counters[STAT_TCP_ORPHAN_ABORTS as usize],
    )
}

#[test]
fn a_qp_destroyed_while_its_fin_is_lost_still_ends_the_stream_cleanly() {
    let (_dir, relay, mut a, mut b) = relayed("fin", 1, TcpLimits::default());
    let (actx, bctx) = (a.create_ctx().unwrap(), b.create_ctx().unwrap());
    let l = b.listen(bctx, UNSPECIFIED, 7100, 8).unwrap();
    let (mut s, mut c, _) = pair(&mut a, actx, &mut b, bctx, l, 7100, Some(40100));
    let wrs: Vec<_> = (0..4).map(|i| recv_at(&s, i, i * 8192, 8192)).collect();
    b.post_recv(&mut s.qp, &wrs);
    // A sends; every byte is acknowledged.
    let data = Rng::new(7).bytes(5000);
    a.buf_write(&c.buf, 0, &data);
    a.post_send(
        &mut c.qp,
        &[tcp_send_wqe(1, 0, &[c.buf.sge(0, 5000, c.mr.lkey)])],
    );
    assert_cqe(&a.wait_cqe(&mut c.scq), CQE_STATUS_SUCCESS, 0, "the send");
    // A closes and is destroyed at once, while every FIN it sends is lost.
    relay.set_drop_fins_from_a(true);
    let cl = a.submit_close(actx, c.qp.id);
    a.destroy_qp(actx, c.qp.id).unwrap();
    assert_eq!(
        a.admin_wait_done(cl).status,
        ADMIN_STATUS_CANCELLED,
        "the CLOSE goes with its QP (its FIN was not acknowledged)"
    );
    assert_eq!(rsts(&mut a), 0, "the destroy sent no reset");
    assert_eq!(orphan_stats(&mut a), (1, 0), "one orphan, not aborted");
    until("A sent its FIN", || relay.fins_dropped() >= 1);
    relay.set_drop_fins_from_a(false);
    // B reads every byte, then the end of the stream: the orphan sent its FIN again.
    let mut got = Vec::new();
    loop {
        let r = b.wait_cqe(&mut s.rcq);
        assert_cqe(&r, CQE_STATUS_SUCCESS, 0, "a receive at B");
        if r.byte_len == 0 {
            break;
        }
        got.extend(b.buf_read(&s.buf, r.wr_id * 8192, r.byte_len as usize));
    }
    assert_eq!(got, data, "every byte arrived");
    assert_eq!(
        next_event(&mut b),
        (s.qp.id, ASYNC_EVENT_PEER_CLOSED, 0),
        "a clean end of stream, no reset"
    );
    assert!(a.stat(STAT_TCP_RETRANS_SEGS) >= 1, "the FIN went again");
    // B closes too: the orphan acknowledges its FIN (and goes into TIME-WAIT).
    close(&mut b, bctx, &s);
    assert_eq!(rsts(&mut a), 0);
    assert_eq!(b.stat(STAT_TCP_ESTAB_RESETS), 0);
    // TIME-WAIT ends and the orphan with it: its 4-tuple can be used again.
    let s2 = b.tcp_endpoint_in(bctx, FRAMING_STREAM, 8, 1 << 16);
    let acc = b.submit_accept(bctx, l, s2.qp.id);
    let c2 = a.tcp_endpoint_in(actx, FRAMING_STREAM, 8, 1 << 16);
    assert_eq!(a.bind(actx, c2.qp.id, UNSPECIFIED, 40100), Ok(40100));
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let con = a.submit_connect(actx, c2.qp.id, ip(B_ADDR), 7100);
        match a.admin_wait_done(con).status {
            ADMIN_STATUS_OK => break,
            ADMIN_STATUS_ADDR_IN_USE => {
                assert!(Instant::now() < deadline, "the orphan never went away");
                std::thread::sleep(Duration::from_millis(20));
            }
            st => panic!("connect: {}", admin_status_name(st)),
        }
    }
    assert_eq!(b.admin_wait_done(acc).result2, 40100, "the same port again");
    assert_eq!(rsts(&mut a), 0);
    assert_eq!(orphan_stats(&mut a), (1, 0), "it ended without an abort");
    assert_eq!(orphan_stats(&mut b), (0, 0), "B destroyed nothing");
}

#[test]
fn destroying_a_qp_that_was_not_closed_resets_the_peer() {
    let (_dir, _relay, mut a, mut b) = relayed("noclose", 2, TcpLimits::default());
    let (actx, bctx) = (a.create_ctx().unwrap(), b.create_ctx().unwrap());
    let l = b.listen(bctx, UNSPECIFIED, 7200, 8).unwrap();
    let (mut s, c, _) = pair(&mut a, actx, &mut b, bctx, l, 7200, None);
    post_recv_at(&mut b, &mut s, 1, 0, 4096);
    a.destroy_qp(actx, c.qp.id).unwrap();
    assert!(rsts(&mut a) >= 1, "the destroy's reset");
    assert_cqe(
        &b.wait_cqe(&mut s.rcq),
        CQE_STATUS_FLUSHED,
        0,
        "the receive after the reset",
    );
    assert_eq!(
        next_error(&mut b),
        (s.qp.id, ASYNC_EVENT_QP_ERROR, ASYNC_REASON_PEER_RESET)
    );
    // Not either when the peer closed first and A only received its FIN (CLOSE-WAIT).
    let (s2, c2, _) = pair(&mut a, actx, &mut b, bctx, l, 7200, None);
    close(&mut b, bctx, &s2);
    let before = rsts(&mut a);
    a.destroy_qp(actx, c2.qp.id).unwrap();
    assert!(rsts(&mut a) > before, "the destroy's reset");
    assert_eq!(
        next_error(&mut b),
        (s2.qp.id, ASYNC_EVENT_QP_ERROR, ASYNC_REASON_PEER_RESET)
    );
    assert_eq!(
        orphan_stats(&mut a),
        (0, 0),
        "not closed: never to be orphaned, so no orphan abort either"
    );
}

#[test]
fn destroying_a_closed_qp_with_data_unacknowledged_resets_the_peer() {
    let (_dir, _relay, mut a, mut b) = relayed("unacked", 3, TcpLimits::default());
    let (actx, bctx) = (a.create_ctx().unwrap(), b.create_ctx().unwrap());
    let l = b.listen(bctx, UNSPECIFIED, 7300, 8).unwrap();
    let (s, mut c, _) = pair(&mut a, actx, &mut b, bctx, l, 7300, None);
    // B posts no receive: its window (the staging allowance) takes a part of this only,
    // so the rest can never be acknowledged before the destroy.
    a.post_send(
        &mut c.qp,
        &[tcp_send_wqe(1, 0, &[c.buf.sge(0, 300_000, c.mr.lkey)])],
    );
    let cl = a.submit_close(actx, c.qp.id);
    a.destroy_qp(actx, c.qp.id).unwrap();
    assert_eq!(a.admin_wait_done(cl).status, ADMIN_STATUS_CANCELLED);
    assert!(rsts(&mut a) >= 1, "the data would be lost: a reset says so");
    assert_eq!(orphan_stats(&mut a), (0, 0), "no orphan, no orphan abort");
    assert_eq!(
        next_error(&mut b),
        (s.qp.id, ASYNC_EVENT_QP_ERROR, ASYNC_REASON_PEER_RESET)
    );
}

#[test]
fn data_for_an_orphan_in_fin_wait_2_is_answered_with_a_reset() {
    let (_dir, _relay, mut a, mut b) = relayed("data", 4, TcpLimits::default());
    let (actx, bctx) = (a.create_ctx().unwrap(), b.create_ctx().unwrap());
    let l = b.listen(bctx, UNSPECIFIED, 7400, 8).unwrap();
    let (mut s, c, _) = pair(&mut a, actx, &mut b, bctx, l, 7400, None);
    close(&mut a, actx, &c);
    a.destroy_qp(actx, c.qp.id).unwrap();
    assert_eq!(
        rsts(&mut a),
        0,
        "closed and acknowledged: no reset at the destroy"
    );
    assert_eq!(orphan_stats(&mut a), (1, 0), "an orphan");
    // B, half-closed, still sends: nobody at A will read it.
    b.post_send(&mut s.qp, &[tcp_inline_wqe(1, 0, b"anyone there?")]);
    assert_eq!(
        next_error(&mut b),
        (s.qp.id, ASYNC_EVENT_QP_ERROR, ASYNC_REASON_PEER_RESET)
    );
    assert_cqe(
        &b.wait_cqe(&mut s.scq),
        CQE_STATUS_FLUSHED,
        0,
        "the send the orphan refused",
    );
    assert!(rsts(&mut a) >= 1, "the orphan's reset");
    assert_eq!(
        orphan_stats(&mut a),
        (1, 1),
        "the orphan reset for new data is an orphan abort"
    );
}

#[test]
fn beyond_the_bound_on_orphans_a_destroy_resets() {
    let limits = TcpLimits {
        max_orphans: 1,
        ..TcpLimits::default()
    };
    let (_dir, _relay, mut a, mut b) = relayed("cap", 5, limits);
    let (actx, bctx) = (a.create_ctx().unwrap(), b.create_ctx().unwrap());
    let l = b.listen(bctx, UNSPECIFIED, 7500, 8).unwrap();
    let (s1, c1, _) = pair(&mut a, actx, &mut b, bctx, l, 7500, None);
    let (s2, c2, _) = pair(&mut a, actx, &mut b, bctx, l, 7500, None);
    close(&mut a, actx, &c1);
    close(&mut a, actx, &c2);
    a.destroy_qp(actx, c1.qp.id).unwrap();
    assert_eq!(rsts(&mut a), 0, "the first is orphaned");
    assert_eq!(orphan_stats(&mut a), (1, 0));
    a.destroy_qp(actx, c2.qp.id).unwrap();
    assert!(rsts(&mut a) >= 1, "the second is one too many: reset");
    assert_eq!(
        orphan_stats(&mut a),
        (1, 1),
        "the one refused at the bound is an orphan abort"
    );
    assert_eq!(
        next_error(&mut b),
        (s2.qp.id, ASYNC_EVENT_QP_ERROR, ASYNC_REASON_PEER_RESET)
    );
    // The orphan is alive: it acknowledges the FIN of B's first QP.
    close(&mut b, bctx, &s1);
    assert_eq!(orphan_stats(&mut a), (1, 1));
}

#[test]
fn a_process_that_exits_after_closing_leaves_its_connections_to_finish() {
    let (_dir, _relay, mut a, mut b) = relayed("ctx", 6, TcpLimits::default());
    let (actx, bctx) = (a.create_ctx().unwrap(), b.create_ctx().unwrap());
    let l = b.listen(bctx, UNSPECIFIED, 7600, 8).unwrap();
    let (s, c, _) = pair(&mut a, actx, &mut b, bctx, l, 7600, None);
    close(&mut a, actx, &c);
    // The process exits: its context goes, and with it QP, CQs and memory.
    a.destroy_ctx(actx).unwrap();
    assert_eq!(rsts(&mut a), 0);
    assert_eq!(
        orphan_stats(&mut a),
        (1, 0),
        "the context's QP left an orphan"
    );
    assert_eq!(next_event(&mut b), (s.qp.id, ASYNC_EVENT_PEER_CLOSED, 0));
    close(&mut b, bctx, &s);
    assert_eq!(rsts(&mut a), 0);
    assert_eq!(b.stat(STAT_TCP_ESTAB_RESETS), 0);
}

#[test]
fn an_orphans_port_is_not_handed_out_as_an_ephemeral_port() {
    let (_dir, _relay, mut a, mut b) = relayed("port", 7, TcpLimits::default());
    let (actx, bctx) = (a.create_ctx().unwrap(), b.create_ctx().unwrap());
    let l = b.listen(bctx, UNSPECIFIED, 7700, 8).unwrap();
    let (_s, c, port) = pair(&mut a, actx, &mut b, bctx, l, 7700, None);
    assert_eq!(port, 49152, "the lowest ephemeral port");
    close(&mut a, actx, &c);
    a.destroy_qp(actx, c.qp.id).unwrap();
    // The orphan keeps the port: the next connection to the same peer gets another (the
    // same port would make the same 4-tuple: ADDR_IN_USE), and works.
    let (_s2, _c2, next) = pair(&mut a, actx, &mut b, bctx, l, 7700, None);
    assert_ne!(next, port);
    assert_eq!(rsts(&mut a), 0);
    assert_eq!(orphan_stats(&mut a), (1, 0));
}

/// BIND for a connect from a port the driver chose (its peer named): refused while the
/// device holds a connection from that port to that peer which a CONNECT could not take
/// over (here an orphan in FIN-WAIT-2: not even TIME-WAIT), so the driver chooses another
/// port; the same port toward another peer port, or without a peer named (a port the
/// program bound: its connect fails as on Linux), binds.
#[test]
fn a_bind_for_a_peer_refuses_a_port_whose_connection_to_it_is_still_held() {
    let (_dir, _relay, mut a, mut b) = relayed("bindfor", 8, TcpLimits::default());
    let (actx, bctx) = (a.create_ctx().unwrap(), b.create_ctx().unwrap());
    let l = b.listen(bctx, UNSPECIFIED, 7800, 8).unwrap();
    let (_s, c, port) = pair(&mut a, actx, &mut b, bctx, l, 7800, Some(40800));
    assert_eq!(port, 40800);
    // A closes (B does not: A's end waits in FIN-WAIT-2) and its QP goes: an orphan.
    close(&mut a, actx, &c);
    a.destroy_qp(actx, c.qp.id).unwrap();
    assert_eq!(orphan_stats(&mut a), (1, 0));
    let q = a.tcp_endpoint_in(actx, FRAMING_STREAM, 8, 1 << 16);
    // A peer address without its port, or one that is not unicast: malformed.
    assert_eq!(
        a.bind_for(actx, q.qp.id, 40800, ip(B_ADDR), 0),
        Err(ADMIN_STATUS_BAD_PARAM)
    );
    assert_eq!(
        a.bind_for(actx, q.qp.id, 40800, ip("ff02::1"), 7800),
        Err(ADMIN_STATUS_BAD_PARAM)
    );
    assert_eq!(
        a.bind_for(actx, q.qp.id, 40800, ip(B_ADDR), 7800),
        Err(ADMIN_STATUS_ADDR_IN_USE),
        "the four-tuple is the orphan's"
    );
    assert_eq!(
        a.bind_for(actx, q.qp.id, 40801, ip(B_ADDR), 7800),
        Ok(40801),
        "another port is free"
    );
    let q2 = a.tcp_endpoint_in(actx, FRAMING_STREAM, 8, 1 << 16);
    assert_eq!(
        a.bind_for(actx, q2.qp.id, 40800, ip(B_ADDR), 7801),
        Ok(40800),
        "another peer port"
    );
    let q3 = a.tcp_endpoint_in(actx, FRAMING_STREAM, 8, 1 << 16);
    a.destroy_qp(actx, q2.qp.id).unwrap();
    assert_eq!(
        a.bind(actx, q3.qp.id, UNSPECIFIED, 40800),
        Ok(40800),
        "no peer named"
    );
    let con = a.submit_connect(actx, q3.qp.id, ip(B_ADDR), 7800);
    assert_eq!(
        a.admin_wait_done(con).status,
        ADMIN_STATUS_ADDR_IN_USE,
        "its connect meets the orphan"
    );
}
