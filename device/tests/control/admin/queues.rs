//! CREATE_CQ, CREATE_QP and their DESTROY: every parameter checked, and as many of each as
//! a context's doorbell page has slots for.

use super::check_destroy;
use crate::support::*;

fn cq_args(g: &mut FakeGuest, depth: u32, npages: u32, vector: u32) -> CreateCqArgs {
    let pages = g.alloc_scattered(npages.max(1) as usize);
    let mut a = CreateCqArgs::new_zeroed();
    a.page_list = g.page_list(&pages);
    a.npages = npages;
    a.depth = depth;
    a.vector = vector;
    a
}

#[test]
fn cq_creation_checks_its_parameters() {
    let mut g = FakeGuest::new();
    let ctx = g.create_ctx().unwrap();
    let other = g.create_ctx().unwrap();

    let a = g.create_cq_on(ctx, 2, 1).unwrap();
    let b = g.create_cq_on(ctx, MAX_QUEUE_DEPTH, 15).unwrap();
    assert_ne!(a.id, b.id);
    assert_ne!(a.slot, b.slot, "each CQ has its own doorbell slot");

    for depth in [0u32, 1, 3, 6, 100, MAX_QUEUE_DEPTH * 2] {
        let npages = (depth as u64 * CQE_SIZE as u64).div_ceil(PAGE).max(1) as u32;
        let args = cq_args(&mut g, depth, npages, 1);
        assert_admin_err(
            g.create_cq_args(ctx, &args),
            ADMIN_STATUS_BAD_PARAM,
            &format!("CQ depth {depth}"),
        );
    }
    for vector in [0u32, MSIX_VECTORS as u32, u32::MAX] {
        let args = cq_args(&mut g, 64, 1, vector);
        assert_admin_err(
            g.create_cq_args(ctx, &args),
            ADMIN_STATUS_BAD_PARAM,
            &format!("CQ vector {vector}"),
        );
    }
    // 128 entries of 64 bytes are exactly two pages.
    for npages in [1u32, 3] {
        let args = cq_args(&mut g, 128, npages, 1);
        assert_admin_err(
            g.create_cq_args(ctx, &args),
            ADMIN_STATUS_BAD_PARAM,
            &format!("128-entry CQ with {npages} pages"),
        );
    }
    let args = cq_args(&mut g, 64, 1, 1);
    assert_admin_err(
        g.create_cq_args(DOORBELL_PAGES - 1, &args),
        ADMIN_STATUS_BAD_HANDLE,
        "CQ in a context that does not exist",
    );

    check_destroy(&mut g, FakeGuest::destroy_cq, "CQ", (ctx, other), a.id);
}

#[test]
fn cqs_per_context_are_limited_by_the_doorbell_slots() {
    let mut g = FakeGuest::new();
    let ctx = g.create_ctx().unwrap();
    // One ring page for all: the device does not care that the rings alias.
    let ring = g.alloc_pages(1);
    let list = g.page_list(&[ring]);
    let mut a = CreateCqArgs::new_zeroed();
    a.page_list = list;
    a.npages = 1;
    a.depth = 2;
    a.vector = 1;
    let mut slots = std::collections::HashSet::new();
    for i in 0..DB_CQ_SLOTS {
        let (_, slot) = g
            .create_cq_args(ctx, &a)
            .unwrap_or_else(|s| panic!("CQ #{i}: {}", admin_status_name(s)));
        assert!(
            slot < DB_CQ_SLOTS && slots.insert(slot),
            "CQ slot {slot} invalid or reused"
        );
    }
    assert_admin_err(
        g.create_cq_args(ctx, &a),
        ADMIN_STATUS_NO_RESOURCES,
        "CQ beyond the slots",
    );
    let other = g.create_ctx().unwrap();
    g.create_cq_args(other, &a)
        .expect("the limit is per context");
}

#[test]
fn qp_creation_checks_its_parameters_and_cqs() {
    let mut g = FakeGuest::new();
    let ctx = g.create_ctx().unwrap();
    let other = g.create_ctx().unwrap();
    let cq = g.create_cq(ctx, 16).unwrap();
    let cq_b = g.create_cq(ctx, 16).unwrap();
    let foreign = g.create_cq(other, 16).unwrap();

    let shared = g
        .create_qp(ctx, cq.id, cq.id, 8, 8)
        .expect("one CQ for both queues");
    let split = g
        .create_qp(ctx, cq.id, cq_b.id, 16, 4)
        .expect("separate CQs");
    assert_ne!(shared.id, split.id);
    assert_ne!(shared.slot, split.slot, "each QP has its own doorbell slot");
    g.create_qp_typed(ctx, (cq.id, cq.id), (8, 8), QP_TYPE_TCP, FRAMING_MESSAGE)
        .unwrap();
    g.create_qp_typed(ctx, (cq.id, cq.id), (8, 8), QP_TYPE_TCP, FRAMING_STREAM)
        .unwrap();
    g.create_qp(ctx, cq.id, cq.id, MAX_QUEUE_DEPTH, 2)
        .expect("deepest SQ");

    let bad = |g: &mut FakeGuest, a: CreateQpArgs, want: u16, what: &str| {
        assert_admin_err(g.create_qp_args(ctx, &a), want, what);
    };
    for t in [0u8, 3, 0xff] {
        let (a, ..) = g.qp_args((cq.id, cq.id), (8, 8), t, 0);
        bad(&mut g, a, ADMIN_STATUS_BAD_PARAM, &format!("QP type {t}"));
    }
    for f in [0u8, 4] {
        let (a, ..) = g.qp_args((cq.id, cq.id), (8, 8), QP_TYPE_TCP, f);
        bad(
            &mut g,
            a,
            ADMIN_STATUS_BAD_PARAM,
            &format!("TCP framing {f}"),
        );
    }
    for (sq, rq) in [
        (0u32, 8u32),
        (8, 0),
        (1, 8),
        (8, 1),
        (12, 8),
        (8, 12),
        (MAX_QUEUE_DEPTH * 2, 8),
    ] {
        let (mut a, ..) = g.qp_args((cq.id, cq.id), (8, 8), QP_TYPE_UDP, 0);
        a.sq_depth = sq;
        a.rq_depth = rq;
        // Keep the page counts consistent with the depths so only the depth is wrong.
        a.sq_npages = (sq as u64 * 128).div_ceil(PAGE).max(1) as u16;
        a.rq_npages = (rq as u64 * 128).div_ceil(PAGE).max(1) as u16;
        bad(
            &mut g,
            a,
            ADMIN_STATUS_BAD_PARAM,
            &format!("depths sq {sq} rq {rq}"),
        );
    }
    // 64 WQEs of 128 bytes are two pages.
    let (mut a, ..) = g.qp_args((cq.id, cq.id), (64, 64), QP_TYPE_UDP, 0);
    a.sq_npages = 1;
    bad(&mut g, a, ADMIN_STATUS_BAD_PARAM, "SQ page count short");
    let (mut a, ..) = g.qp_args((cq.id, cq.id), (64, 64), QP_TYPE_UDP, 0);
    a.rq_npages = 3;
    bad(&mut g, a, ADMIN_STATUS_BAD_PARAM, "RQ page count long");

    for (s, r, what) in [
        (0xdead, cq.id, "unknown send CQ"),
        (cq.id, 0xdead, "unknown recv CQ"),
        (foreign.id, cq.id, "send CQ of another context"),
        (cq.id, foreign.id, "recv CQ of another context"),
    ] {
        let (a, ..) = g.qp_args((s, r), (8, 8), QP_TYPE_UDP, 0);
        bad(&mut g, a, ADMIN_STATUS_BAD_HANDLE, what);
    }

    // A CQ in use cannot go; once its QPs are gone it can.
    assert_admin_err(
        g.destroy_cq(ctx, cq_b.id),
        ADMIN_STATUS_BUSY,
        "destroy a CQ a QP uses",
    );
    check_destroy(&mut g, FakeGuest::destroy_qp, "QP", (ctx, other), split.id);
    g.destroy_cq(ctx, cq_b.id)
        .expect("CQ free after its QP is destroyed");
}

#[test]
fn qps_per_context_are_limited_by_the_doorbell_slots() {
    let mut g = FakeGuest::new();
    let ctx = g.create_ctx().unwrap();
    let cq = g.create_cq(ctx, 2).unwrap();
    let ring = g.alloc_pages(1);
    let list = g.page_list(&[ring]);
    let mut a = CreateQpArgs::new_zeroed();
    a.sq_page_list = list;
    a.rq_page_list = list;
    a.send_cq = cq.id;
    a.recv_cq = cq.id;
    a.sq_depth = 2;
    a.rq_depth = 2;
    a.sq_npages = 1;
    a.rq_npages = 1;
    a.qp_type = QP_TYPE_UDP;
    let mut slots = std::collections::HashSet::new();
    for i in 0..DB_QP_SLOTS {
        let (_, slot) = g
            .create_qp_args(ctx, &a)
            .unwrap_or_else(|s| panic!("QP #{i}: {}", admin_status_name(s)));
        assert!(
            slot < DB_QP_SLOTS && slots.insert(slot),
            "QP slot {slot} invalid or reused"
        );
    }
    assert_admin_err(
        g.create_qp_args(ctx, &a),
        ADMIN_STATUS_NO_RESOURCES,
        "QP beyond the slots",
    );
}
