//! Work outstanding when its QP or context goes: a destroyed QP flushes its work requests,
//! a destroyed context drops them without a completion.

use std::time::Duration;

use crate::bound_qp;
use crate::support::*;

#[test]
fn destroying_a_qp_flushes_its_outstanding_work_requests() {
    let mut g = FakeGuest::new();
    let ctx = g.create_ctx().unwrap();
    let mut cq = g.create_cq(ctx, 32).unwrap();
    let mut qp = bound_qp(&mut g, &cq, 8, 8);
    let buf = g.alloc_buf(4096, 0);
    let mr = g.reg_mr(ctx, &buf, MR_ACCESS_LOCAL_WRITE).unwrap();
    let recvs: Vec<WqeBytes> = (0..5u64)
        .map(|i| recv_wqe(10 + i, &[buf.sge(i * 64, 64, mr.lkey)]))
        .collect();
    g.post_recv(&mut qp, &recvs);
    g.buf_fill(&buf, 0x3c);
    g.destroy_qp(ctx, qp.id).unwrap();
    for i in 0..5u64 {
        let c = g.wait_cqe(&mut cq);
        assert_eq!(
            (c.wr_id, c.opcode, c.qp),
            (10 + i, CQE_OP_RECV, qp.id),
            "{c:?}"
        );
        assert_cqe(&c, CQE_STATUS_FLUSHED, 0, "receive of a destroyed QP");
    }
    assert!(
        g.try_wait_cqe(&mut cq, Duration::from_millis(20)).is_none(),
        "one CQE per WR"
    );
    assert!(
        g.buf_read(&buf, 0, 4096).iter().all(|&x| x == 0x3c),
        "a flushed receive wrote its buffer"
    );
    g.destroy_cq(ctx, cq.id)
        .expect("the CQ is free once its QP is gone");
}

#[test]
fn destroying_a_context_drops_its_work_requests_without_completions() {
    let mut g = FakeGuest::new();
    let ctx = g.create_ctx().unwrap();
    let mut ep = g.udp_endpoint_in(ctx, UNSPECIFIED, 0, 8, 16, 4096);
    let recvs: Vec<WqeBytes> = (0..5u64)
        .map(|i| recv_wqe(i, &[ep.buf.sge(i * 64, 64, ep.mr.lkey)]))
        .collect();
    g.post_recv(&mut ep.qp, &recvs);
    // Let the device see them (a datagram to itself takes the first).
    g.post_send(&mut ep.qp, &[inline_wqe(0, LOOPBACK, ep.port, b"me")]);
    assert_cqe(&g.wait_cqe(&mut ep.scq), CQE_STATUS_SUCCESS, 0, "send");
    assert_eq!(g.wait_cqe(&mut ep.rcq).wr_id, 0);
    let ring = g.cq_ring_bytes(&ep.rcq);
    g.destroy_ctx(ctx).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    assert!(
        g.cq_ring_bytes(&ep.rcq) == ring,
        "CQEs written for a destroyed context (its rings go away with it)"
    );
}
