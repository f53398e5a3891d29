//! Kernel contexts: who may hold a raw QP, and what `PHYS_LKEY` may name.

use super::*;

// ---- kernel contexts ---------------------------------------------------------------------

#[test]
fn only_a_kernel_context_holds_a_raw_qp_and_only_one() {
    let mut r = rig();
    assert_admin_err(
        r.g.create_ctx_flags(1 << 1),
        ADMIN_STATUS_BAD_PARAM,
        "unknown flag",
    );
    let user = r.g.create_ctx();
    let cq = r.g.create_cq(user, 16);
    assert_admin_err(
        r.g.try_create_qp(user, (cq.id, cq.id), 16, (QP_TYPE_RAW_ETH, 0)),
        ADMIN_STATUS_BAD_PARAM,
        "raw QP in a user context",
    );
    let kctx = r.g.create_ctx_flags(CTX_FLAG_KERNEL).unwrap();
    let kcq = r.g.create_cq(kctx, 16);
    assert_admin_err(
        r.g.try_create_qp(kctx, (kcq.id, kcq.id), 16, (QP_TYPE_RAW_ETH, 2)),
        ADMIN_STATUS_BAD_PARAM,
        "raw QP with an unknown receive mode",
    );
    let first =
        r.g.try_create_qp(kctx, (kcq.id, kcq.id), 16, (QP_TYPE_RAW_ETH, 0))
            .unwrap();
    assert_admin_err(
        r.g.try_create_qp(kctx, (kcq.id, kcq.id), 16, (QP_TYPE_RAW_ETH, 0)),
        ADMIN_STATUS_BUSY,
        "a second raw QP",
    );
    // Gone, another may take its place.
    r.g.admin(cmd0(ADMIN_OP_DESTROY_QP, kctx, first.id));
    r.g.try_create_qp(kctx, (kcq.id, kcq.id), 16, (QP_TYPE_RAW_ETH, 0))
        .unwrap();
}

#[test]
fn phys_lkey_is_an_unknown_key_outside_a_kernel_context() {
    let mut r = rig();
    let ctx = r.g.create_ctx();
    let scq = r.g.create_cq(ctx, 16);
    let mut scq2 = scq.clone();
    let mut qp = r.g.create_qp(ctx, (scq.id, scq.id), 16, (QP_TYPE_UDP, 0));
    r.g.admin(bind_cmd(ctx, qp.id, UNSPECIFIED, 0));
    let (buf, _) = r.g.reg_buf(ctx, 4096, MR_ACCESS_LOCAL_WRITE);
    let sge = Sge {
        addr: buf.gpa(0),
        length: 64,
        lkey: PHYS_LKEY,
    };
    let w = send_wqe(1, peer_v6().octets(), 9, &[sge]);
    r.g.post_wqes(&mut qp, true, &[w]);
    let c = r.cqes(&mut scq2);
    assert_eq!(c.len(), 1);
    assert_cqe(
        &c[0],
        CQE_STATUS_LOCAL_PROTECTION,
        CQE_DETAIL_BAD_LKEY,
        "lkey 0 in a user context",
    );
}

#[test]
fn a_physical_sge_outside_guest_ram_is_a_protection_error() {
    let mut r = rig();
    let mut q = r.raw_qp();
    let frame = eth(PEER_MAC, MAC, 0x88b5, &[0u8; 50]);
    let before = r.drain().len();
    assert_eq!(before, 0);
    for (addr, len) in [
        (RAM_BASE - 16, 64u32),           // starts below RAM
        (RAM_BASE + (64 << 20) - 32, 64), // runs past its end
        (u64::MAX - 8, 64),               // wraps
    ] {
        let mut h = wqe_hdr(WQE_OP_SEND, 7);
        h.num_sge = 1;
        let sge = Sge {
            addr,
            length: len,
            lkey: PHYS_LKEY,
        };
        r.g.post_wqes(&mut q.qp, true, &[wqe_bytes(&h, &[sge])]);
        let c = r.cqes(&mut q.scq);
        assert_eq!(c.len(), 1);
        assert_cqe(
            &c[0],
            CQE_STATUS_LOCAL_PROTECTION,
            CQE_DETAIL_OUT_OF_BOUNDS,
            "outside RAM",
        );
    }
    // A frame spanning pages inside RAM goes.
    let c = r.send(&mut q, 3, &frame, 0, RawTxOffload::default());
    assert_cqe(&c, CQE_STATUS_SUCCESS, CQE_DETAIL_NONE, "inside RAM");
    assert_eq!(r.drain(), vec![frame]);
}
