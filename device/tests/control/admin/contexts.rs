//! CREATE_CTX and DESTROY_CTX: the doorbell page a context takes, the most contexts, and
//! everything a context's destruction takes with it.

use super::{pending_result, tcp_qp};
use crate::support::*;

/// CREATE_CTX takes only a page of guest RAM, page aligned, that no live context uses: a
/// page shared by two contexts would let one process ring the other's queues.
#[test]
fn a_doorbell_page_must_be_an_aligned_unshared_page_of_guest_ram() {
    let mut g = FakeGuest::new();
    let page = g.alloc_pages(1);
    for (bad, why) in [
        (page + 8, "an unaligned page"),
        (page + 0x800, "half a page"),
        (RAM_BASE - PAGE, "a page below RAM"),
        (RAM_BASE + RAM_SIZE, "a page past RAM"),
        (u64::MAX - PAGE + 1, "the last page of the address space"),
        (0, "address 0"),
    ] {
        assert_admin_err(g.create_ctx_at(bad), ADMIN_STATUS_BAD_ADDRESS, why);
    }
    let ctx = g.create_ctx_at(page).expect("a good page");
    assert_admin_err(
        g.create_ctx_at(page),
        ADMIN_STATUS_BAD_ADDRESS,
        "the page of a live context",
    );
    g.destroy_ctx(ctx).unwrap();
    let again = g.create_ctx_at(page).expect("a page whose context is gone");
    g.destroy_ctx(again).unwrap();
}

#[test]
fn sixty_four_contexts_with_zeroed_doorbell_pages() {
    let mut g = FakeGuest::new();
    let mut ids = Vec::new();
    for i in 0..DOORBELL_PAGES {
        // Each page handed over dirty: creation must zero it.
        let page = g.alloc_pages(1);
        g.mem_fill(page, DOORBELL_PAGE_SIZE as usize, 0xa5);
        let ctx = g
            .create_ctx_at(page)
            .unwrap_or_else(|s| panic!("context #{i}: {}", admin_status_name(s)));
        assert!(
            ctx < DOORBELL_PAGES,
            "context id {ctx} beyond the most contexts"
        );
        assert!(!ids.contains(&ctx), "context id {ctx} given twice");
        for off in (0..DOORBELL_PAGE_SIZE)
            .step_by(4)
            .filter(|&o| o != DB_ENGINE_SLEEPING)
        {
            let v = g.db(ctx, off).load(std::sync::atomic::Ordering::Relaxed);
            assert_eq!(
                v, 0,
                "doorbell page {ctx} offset {off:#x} not zeroed at creation"
            );
        }
        ids.push(ctx);
    }
    assert_admin_err(g.create_ctx(), ADMIN_STATUS_NO_RESOURCES, "65th context");
    g.destroy_ctx(ids[17]).unwrap();
    assert_eq!(
        g.create_ctx(),
        Ok(ids[17]),
        "the freed page is the only free one"
    );
    assert_admin_err(
        g.destroy_ctx(DOORBELL_PAGES),
        ADMIN_STATUS_BAD_HANDLE,
        "DESTROY_CTX 64",
    );
    assert_admin_err(
        g.destroy_ctx(u32::MAX),
        ADMIN_STATUS_BAD_HANDLE,
        "DESTROY_CTX u32::MAX",
    );
    g.destroy_ctx(ids[3]).unwrap();
    assert_admin_err(
        g.destroy_ctx(ids[3]),
        ADMIN_STATUS_BAD_HANDLE,
        "DESTROY_CTX twice",
    );
}

#[test]
fn destroying_a_context_destroys_its_objects_and_frees_its_ports() {
    let mut g = FakeGuest::new();
    let ctx = g.create_ctx().unwrap();
    let cq = g.create_cq(ctx, 8).unwrap();
    let qp = g.create_qp(ctx, cq.id, cq.id, 8, 8).unwrap();
    g.bind(ctx, qp.id, UNSPECIFIED, 4000).unwrap();
    let tcp = tcp_qp(&mut g, &cq, 8);
    let listener = g.listen(ctx, UNSPECIFIED, 5000, 4).unwrap();
    let buf = g.alloc_buf(4096, 0);
    let mr = g.reg_mr(ctx, &buf, MR_ACCESS_LOCAL_WRITE).unwrap();
    let accept = g.submit_accept(ctx, listener, tcp);

    g.destroy_ctx(ctx).unwrap();
    assert_admin_err(
        pending_result(&mut g, accept),
        ADMIN_STATUS_CANCELLED,
        "pending ACCEPT of a destroyed context",
    );

    // The objects are gone with it.
    for (gone, what) in [
        (g.destroy_qp(ctx, qp.id), "QP of a destroyed context"),
        (g.dereg_mr(ctx, mr.lkey), "MR of a destroyed context"),
    ] {
        assert_admin_err(gone, ADMIN_STATUS_BAD_HANDLE, what);
    }
    // Its port and listening port are free for others.
    let other = g.create_ctx().unwrap();
    let cq2 = g.create_cq(other, 8).unwrap();
    let qp2 = g.create_qp(other, cq2.id, cq2.id, 8, 8).unwrap();
    assert_eq!(
        g.bind(other, qp2.id, UNSPECIFIED, 4000),
        Ok(4000),
        "UDP port released"
    );
    g.listen(other, UNSPECIFIED, 5000, 4)
        .expect("listening port released");
}
