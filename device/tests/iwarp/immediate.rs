//! RFC 7306 Immediate Data between qpip devices: agreed only when both ends offer it (the
//! capability block travels in the private data and never reaches the applications), an
//! RDMA Write with immediate data then completes a receive on the peer carrying it, and
//! without the agreement such a Write is refused.

use crate::support::*;
use crate::*;

fn offer(pd: &[u8]) -> Mpa {
    Mpa {
        private_data: pd.to_vec(),
        flags: IWARP_CONN_IMMEDIATE,
        ..Mpa::plain()
    }
}

#[test]
fn a_write_with_immediate_data_completes_a_receive_on_the_peer() {
    let (mut g, s, c) = guest();
    let (mut se, mut ce, con, acc) =
        g.iwarp_pair((s, c), 7220, &offer(b"server pd"), &offer(b"client pd"));
    assert_eq!((con.status, acc.status), (ADMIN_STATUS_OK, ADMIN_STATUS_OK));
    let (ci, si) = (
        g.query_conn(c, ce.qp.id).unwrap(),
        g.query_conn(s, se.qp.id).unwrap(),
    );
    for i in [&ci, &si] {
        assert_eq!(i.flags & CONN_INFO_IMMEDIATE, CONN_INFO_IMMEDIATE, "{i:?}");
    }
    // The applications see their peer's private data, not the devices' block.
    assert_eq!(&ci.private_data[..ci.pd_len as usize], b"server pd");
    assert_eq!(&si.private_data[..si.pd_len as usize], b"client pd");

    let (target, tmr) = region(&mut g, s, 4096, MR_ACCESS_REMOTE_WRITE, 0);
    let data = pattern(3000, 9);
    g.buf_write(&ce.buf, 0, &data);
    let rsge = se.buf.sge(0, 64, se.mr.lkey);
    g.post_recv(&mut se.qp, &[recv_wqe(77, &[rsge])]);
    let sge = ce.buf.sge(0, 3000, ce.mr.lkey);
    g.post_send(
        &mut ce.qp,
        &[rdma_write_imm_wqe(
            1,
            target.iova,
            tmr.rkey,
            &[sge],
            0xdead_beef,
        )],
    );
    ok(&g.wait_cqe(&mut ce.scq), CQE_OP_RDMA_WRITE, 3000, "write");
    let r = g.wait_cqe(&mut se.rcq);
    assert_eq!(
        (r.wr_id, r.opcode, r.status, r.byte_len, r.imm_data),
        (77, CQE_OP_RECV_IMM, CQE_STATUS_SUCCESS, 0, 0xdead_beef),
        "{r:?}"
    );
    assert!(
        g.buf_read(&target, 0, 3000) == data,
        "the Write's bytes are there first"
    );
}

#[test]
fn without_both_offers_there_is_no_immediate_data() {
    let (mut g, s, c) = guest();
    // Only the initiator offers: the responder's device still takes the block out of the
    // private data, and does not answer it.
    let (se, mut ce, con, acc) = g.iwarp_pair((s, c), 7221, &Mpa::plain(), &offer(b"client pd"));
    assert_eq!((con.status, acc.status), (ADMIN_STATUS_OK, ADMIN_STATUS_OK));
    let (ci, si) = (
        g.query_conn(c, ce.qp.id).unwrap(),
        g.query_conn(s, se.qp.id).unwrap(),
    );
    assert_eq!((ci.flags | si.flags) & CONN_INFO_IMMEDIATE, 0);
    assert_eq!(&si.private_data[..si.pd_len as usize], b"client pd");
    let (target, tmr) = region(&mut g, s, 4096, MR_ACCESS_REMOTE_WRITE, 0);
    let sge = ce.buf.sge(0, 10, ce.mr.lkey);
    g.post_send(
        &mut ce.qp,
        &[rdma_write_imm_wqe(1, target.iova, tmr.rkey, &[sge], 5)],
    );
    let c1 = g.wait_cqe(&mut ce.scq);
    assert_eq!((c1.wr_id, c1.status), (1, CQE_STATUS_BAD_WQE), "{c1:?}");
    // The connection goes on: a plain Write works.
    g.post_send(
        &mut ce.qp,
        &[rdma_wqe(
            WQE_OP_RDMA_WRITE,
            2,
            target.iova,
            tmr.rkey,
            &[sge],
        )],
    );
    ok(
        &g.wait_cqe(&mut ce.scq),
        CQE_OP_RDMA_WRITE,
        10,
        "plain write",
    );
    // Immediate data without the flag is malformed.
    let mut h = wqe_hdr(WQE_OP_RDMA_WRITE, 3);
    h.num_sge = 1;
    h.set_remote(target.iova, tmr.rkey);
    h.imm_data = 9;
    g.post_send(&mut ce.qp, &[wqe_bytes(&h, &[sge])]);
    assert_eq!(g.wait_cqe(&mut ce.scq).status, CQE_STATUS_BAD_WQE);
}
