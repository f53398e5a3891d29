//! Malformed work requests in either ring complete with an error, and the QP carries on.

use crate::support::*;
use crate::world::World;

#[test]
fn malformed_wqes_complete_with_errors_and_the_qp_carries_on() {
    let mut w = World::new();
    let base = |op: u8, wr_id: u64| {
        let mut h = wqe_hdr(op, wr_id);
        h.dest_addr = LOOPBACK;
        h
    };
    let port = w.rx.port;
    let sge = w.tx.buf.sge(0, 8, w.tx.mr.lkey);
    let mut cases: Vec<(&str, Wqe, u8)> = Vec::new();
    cases.push(("opcode 0", base(0, 1), CQE_STATUS_BAD_OPCODE));
    cases.push(("opcode 0x7e", base(0x7e, 2), CQE_STATUS_BAD_OPCODE));
    cases.push((
        "a receive in the send ring",
        base(WQE_OP_RECV, 3),
        CQE_STATUS_BAD_OPCODE,
    ));
    let mut h = base(WQE_OP_SEND, 4);
    h.num_sge = MAX_SGE as u8 + 1;
    cases.push(("6 SGEs", h, CQE_STATUS_BAD_WQE));
    let mut h = base(WQE_OP_SEND, 5);
    h.num_sge = 0xff;
    cases.push(("255 SGEs", h, CQE_STATUS_BAD_WQE));
    let mut h = base(WQE_OP_SEND, 6);
    h.flags = WQE_FLAG_INLINE;
    h.inline_len = MAX_INLINE + 1;
    cases.push(("81 bytes inline", h, CQE_STATUS_BAD_WQE));
    let mut h = base(WQE_OP_SEND, 7);
    h.flags = WQE_FLAG_INLINE;
    h.inline_len = u32::MAX;
    cases.push(("u32::MAX bytes inline", h, CQE_STATUS_BAD_WQE));
    let mut h = base(WQE_OP_SEND, 8);
    h.flags = 0x80;
    h.num_sge = 1;
    cases.push(("an unknown flag", h, CQE_STATUS_BAD_WQE));
    let mut h = base(WQE_OP_SEND, 9);
    h.reserved1 = 1;
    h.num_sge = 1;
    cases.push(("a reserved field set", h, CQE_STATUS_BAD_WQE));
    let mut h = base(WQE_OP_SEND, 10);
    h.flags = WQE_FLAG_INLINE;
    h.num_sge = 1;
    h.inline_len = 4;
    cases.push(("inline with SGEs", h, CQE_STATUS_BAD_WQE));
    for (what, mut h, status) in cases {
        h.dest_port = port;
        let what = format!("send WQE with {what}");
        let c = w.refused_send(wqe_bytes(&h, &[sge; 5]), (status, 0), &what);
        assert_eq!(c.opcode, CQE_OP_SEND, "{what}: a send-ring completion");
    }
    w.assert_canaries("malformed sends");

    // The receive ring.
    let rsge = w.rx.buf.sge(0, 4096, w.rx.mr.lkey);
    let mut rcases: Vec<(&str, Wqe, u8)> = Vec::new();
    rcases.push((
        "a send in the receive ring",
        wqe_hdr(WQE_OP_SEND, 20),
        CQE_STATUS_BAD_OPCODE,
    ));
    rcases.push(("opcode 0x55", wqe_hdr(0x55, 21), CQE_STATUS_BAD_OPCODE));
    let mut h = wqe_hdr(WQE_OP_RECV, 22);
    h.num_sge = 6;
    rcases.push(("6 SGEs", h, CQE_STATUS_BAD_WQE));
    let mut h = wqe_hdr(WQE_OP_RECV, 23);
    h.num_sge = 1;
    h.flags = WQE_FLAG_INLINE;
    rcases.push(("the inline flag", h, CQE_STATUS_BAD_WQE));
    for (what, mut h, status) in rcases {
        if h.num_sge == 0 {
            h.num_sge = 1;
        }
        let what = format!("receive WQE with {what}");
        w.refused_receive(wqe_bytes(&h, &[rsge; 5]), 32, (status, 0), &what);
    }
    w.assert_healthy("malformed WQEs");
}
