//! Doorbells a guest should not ring: slots without objects do nothing, and a producer index
//! beyond the ring errors its QP, flushes its work and sends nothing from its ring.

use crate::support::*;
use crate::world::World;

#[test]
fn doorbells_for_slots_without_objects_do_nothing() {
    let mut w = World::new();
    let ctx = w.tx.ctx;
    let g = &mut w.g;
    // Empty QP and CQ slots of a live context, and slots of a page no context owns.
    g.ring(ctx, qp_sq_tail(DB_QP_SLOTS - 1), 5);
    g.ring(ctx, qp_rq_tail(200), 0xffff_ffff);
    g.ring(ctx, cq_head(DB_CQ_SLOTS - 1), 77);
    g.ring(ctx, cq_arm_seq(100), 1);
    g.ring(DOORBELL_PAGES - 1, qp_sq_tail(0), 3);
    g.ring(DOORBELL_PAGES - 1, cq_arm_seq(0), 1);
    // And the reserved words between the header and the first QP slot.
    g.ring(ctx, 8, 0xdead_beef);
    g.ring(ctx, 0x3c, 0xdead_beef);
    w.assert_canaries("stray doorbells");
    w.assert_healthy("stray doorbells");
}

#[test]
fn a_producer_index_beyond_the_ring_errors_the_qp_and_flushes_its_work() {
    let mut w = World::new();
    let bad_before = w.g.stat(STAT_BAD_DOORBELLS);
    // Three receives; one datagram proves the device has seen all three (one doorbell).
    let r: Vec<WqeBytes> = (0..3u64)
        .map(|i| recv_wqe(30 + i, &[w.rx.buf.sge(i * 1024, 1024, w.rx.mr.lkey)]))
        .collect();
    w.g.post_recv(&mut w.rx.qp, &r);
    let c = w.send(inline_wqe(1, LOOPBACK, w.rx.port, b"one"));
    assert_cqe(&c, CQE_STATUS_SUCCESS, 0, "send");
    w.received(30, 3);

    // The receive producer index jumps more than the depth (16) past what was consumed (1).
    let rq_depth = w.rx.qp.rq_depth;
    let wild = w.rx.qp.rq_tail + rq_depth + 1;
    w.g.ring(w.rx.ctx, qp_rq_tail(w.rx.qp.slot), wild);
    for want in [31u64, 32] {
        let c = w.g.wait_cqe(&mut w.rx.rcq);
        assert_eq!(
            (c.wr_id, c.opcode, c.qp),
            (want, CQE_OP_RECV, w.rx.qp.id),
            "{c:?}"
        );
        assert_cqe(
            &c,
            CQE_STATUS_FLUSHED,
            0,
            "outstanding receive of the errored QP",
        );
    }
    assert!(
        w.g.stat(STAT_BAD_DOORBELLS) > bad_before,
        "STAT_BAD_DOORBELLS counts it"
    );
    // In the error state: a send on it is flushed, and datagrams to it are not placed.
    let mut qp = w.rx.qp.clone();
    w.g.post_send(
        &mut qp,
        &[inline_wqe(
            40,
            LOOPBACK,
            w.ok_rx.port,
            b"from an errored QP",
        )],
    );
    let c = w.g.wait_cqe(&mut w.rx.scq);
    assert_eq!(c.wr_id, 40);
    assert_cqe(&c, CQE_STATUS_FLUSHED, 0, "send on an errored QP");
    let c = w.send(inline_wqe(2, LOOPBACK, w.rx.port, b"two"));
    assert_cqe(&c, CQE_STATUS_SUCCESS, 0, "send to the errored QP");
    std::thread::sleep(std::time::Duration::from_millis(20));
    let c = w.g.poll_cq(&mut w.rx.rcq);
    assert!(
        c.is_none() || c.unwrap().status == CQE_STATUS_FLUSHED,
        "errored QP received: {c:?}"
    );
    w.assert_canaries("a wild receive index");

    // A wild send index on the healthy pair's sender: nothing in its ring is executed.
    let tx_before = w.g.stat(STAT_UDP_TX);
    let s = w.ok_tx.qp.clone();
    // Plant a valid-looking send in every slot; none may go out.
    let mut planted = s.clone();
    let plant: Vec<WqeBytes> = (0..s.sq_depth)
        .map(|i| inline_wqe(500 + i as u64, LOOPBACK, w.ok_rx.port, b"x"))
        .collect();
    w.g.write_sq(&mut planted, &plant);
    w.g.ring(
        s.ctx,
        qp_sq_tail(s.slot),
        s.sq_tail.wrapping_add(s.sq_depth + 1),
    );
    let deadline = std::time::Instant::now() + TIMEOUT;
    while w.g.stat(STAT_BAD_DOORBELLS) < bad_before + 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "a wild send index was not noticed"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(w.g.stat(STAT_UDP_TX), tx_before, "an errored QP sent");
    // Others carry on: A's sender to C's receiver.
    w.g.post_recv(
        &mut w.ok_rx.qp,
        &[recv_wqe(1, &[w.ok_rx.buf.sge(0, 64, w.ok_rx.mr.lkey)])],
    );
    let c = w.send(inline_wqe(3, LOOPBACK, w.ok_rx.port, b"across"));
    assert_cqe(&c, CQE_STATUS_SUCCESS, 0, "send after the wild indices");
    let c = w.g.wait_cqe(&mut w.ok_rx.rcq);
    assert_eq!((c.wr_id, c.status, c.byte_len), (1, CQE_STATUS_SUCCESS, 6));
}
