//! A producer that never polls its CQs cannot make the device hold more than its rings:
//! a WR keeps its ring slot until its completion is written, so a TCP or iWARP QP whose
//! completions wait for room gives up no more than a ring's depth of WRs, however far the
//! producer moves its tails.

use std::time::Duration;

use crate::support::*;

const DEPTH: u32 = 8;
const ROUNDS: u32 = 50;

/// Keeps a QP's send ring full for `ROUNDS` rounds without ever polling its send CQ
/// (depth 2), while the peer acknowledges everything; returns the send WRs the device
/// took.
fn sends_taken_from_a_producer_that_never_polls(framing: u8, port: u16) -> u64 {
    let mut g = FakeGuest::new();
    let (sctx, cctx) = (g.create_ctx().unwrap(), g.create_ctx().unwrap());
    let mut s = g.endpoint_in(sctx, (QP_TYPE_TCP, framing), DEPTH, 2 * DEPTH, 1 << 16);
    let mut c = g.endpoint_in(cctx, (QP_TYPE_TCP, framing), DEPTH, 2, 1 << 16);
    let l = g.listen(sctx, UNSPECIFIED, port, 4).expect("listen");
    let (acc, con) = if framing == FRAMING_IWARP {
        (
            g.submit_accept_iwarp(sctx, l, s.qp.id, &Mpa::plain()),
            g.submit_connect_iwarp(cctx, c.qp.id, LOOPBACK, port, &Mpa::plain()),
        )
    } else {
        (
            g.submit_accept(sctx, l, s.qp.id),
            g.submit_connect(cctx, c.qp.id, LOOPBACK, port),
        )
    };
    g.admin_wait_ok(con, "connect");
    g.admin_wait_ok(acc, "accept");
    let before = g.stat(STAT_SEND_WQES);
    let mut wr_id = 0;
    for _ in 0..ROUNDS {
        // A ring's worth of one-byte sends, the tail moved past everything the device
        // took (a producer that treats a taken WR as done).
        let sends: Vec<WqeBytes> = (0..DEPTH)
            .map(|_| {
                wr_id += 1;
                let sge = c.buf.sge(0, 1, c.mr.lkey);
                tcp_send_wqe(wr_id, 0, &[sge])
            })
            .collect();
        g.post_send(&mut c.qp, &sends);
        // The peer takes what arrives (stream bytes, messages or Sends alike).
        let recvs: Vec<WqeBytes> = (0..DEPTH)
            .map(|i| recv_wqe(i as u64, &[s.buf.sge(0, 4096, s.mr.lkey)]))
            .collect();
        g.post_recv(&mut s.qp, &recvs);
        while g
            .try_wait_cqe(&mut s.rcq, Duration::from_millis(20))
            .is_some()
        {}
    }
    g.stat(STAT_SEND_WQES) - before
}

#[test]
fn a_tcp_qp_that_never_polls_its_send_cq_holds_at_most_its_ring() {
    for (framing, port) in [(FRAMING_STREAM, 6500), (FRAMING_MESSAGE, 6501)] {
        let taken = sends_taken_from_a_producer_that_never_polls(framing, port);
        assert!(
            taken <= (DEPTH + 2) as u64,
            "framing {framing}: the device took {taken} sends of a producer that never \
             polled a CQ of 2 (at most the ring's {DEPTH} waiting and 2 written)"
        );
    }
}

#[test]
fn an_iwarp_qp_that_never_polls_its_send_cq_holds_at_most_its_ring() {
    let taken = sends_taken_from_a_producer_that_never_polls(FRAMING_IWARP, 6502);
    assert!(
        taken <= (DEPTH + 2) as u64,
        "the device took {taken} sends of a producer that never polled a CQ of 2"
    );
}
