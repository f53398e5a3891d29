//! Asynchronous events (ASYNC_EVENT): a peer's reset and a graceful close reported to
//! the QP's owner once, events waiting for a request and dying with their context, the
//! requests bounded and forgotten at a reset; and the TCP counters of QUERY_STATS.

use std::time::Instant;

use super::*;

#[test]
fn a_peer_reset_raises_qp_error_for_the_survivor_only() {
    let mut g = FakeGuest::new();
    let (sctx, cctx) = (g.create_ctx().unwrap(), g.create_ctx().unwrap());
    let reqs = [g.submit_async_event(), g.submit_async_event()];
    let (mut s, c) = g.loopback_pair(sctx, cctx, 6100, FRAMING_STREAM);
    post_recv_at(&mut g, &mut s, 1, 0, 4096);
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
    post_recv_at(&mut g, &mut s, 1, 0, 4096);
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
    post_recv_at(&mut g, &mut s, 2, 0, 4096);
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
