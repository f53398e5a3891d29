//! REG_MR and DEREG_MR: every argument checked, and the limits in pages and in regions.

use super::check_destroy;
use crate::support::*;

fn mr_args(b: &Buf, list: u64, access: u32) -> RegMrArgs {
    let mut a = RegMrArgs::new_zeroed();
    a.page_list = list;
    a.iova = b.iova;
    a.length = b.len;
    a.npages = b.pages.len() as u32;
    a.first_page_offset = b.offset;
    a.access = access;
    a
}

#[test]
fn memory_registration_checks_its_arguments() {
    let mut g = FakeGuest::new();
    let ctx = g.create_ctx().unwrap();
    let other = g.create_ctx().unwrap();
    let buf = g.alloc_buf(3 * PAGE + 100, 300);
    let mr = g.reg_mr(ctx, &buf, MR_ACCESS_LOCAL_WRITE).unwrap();
    assert_eq!(mr.rkey, 0, "no rkey without a remote right");
    let remote = g
        .reg_mr(ctx, &buf, MR_ACCESS_REMOTE_READ | MR_ACCESS_REMOTE_WRITE)
        .unwrap();
    assert_ne!(remote.rkey, 0, "a remote right comes with an rkey");
    assert_ne!(remote.lkey, mr.lkey);
    let list = g.page_list(&buf.pages);

    // Good arguments with one thing wrong.
    type Spoil = fn(&mut RegMrArgs);
    let spoilt: [(&str, Spoil); 5] = [
        ("zero-length MR", |a| a.length = 0),
        ("too few pages for the length", |a| a.npages -= 1),
        ("too many pages for the length", |a| a.npages += 1),
        ("first_page_offset != iova % 4096", |a| {
            a.first_page_offset = 0
        }),
        ("first_page_offset 4096", |a| {
            a.first_page_offset = 4096;
            a.iova += 4096 - 300;
        }),
    ];
    for (what, spoil) in spoilt {
        let mut a = mr_args(&buf, list, 0);
        spoil(&mut a);
        assert_admin_err(g.reg_mr_args(ctx, &a), ADMIN_STATUS_BAD_PARAM, what);
    }

    let mut pages = buf.pages.clone();
    pages[2] += 8;
    let misaligned = g.page_list(&pages);
    assert_admin_err(
        g.reg_mr_args(ctx, &mr_args(&buf, misaligned, 0)),
        ADMIN_STATUS_BAD_ADDRESS,
        "misaligned page",
    );
    assert_admin_err(
        g.reg_mr_args(ctx, &mr_args(&buf, list + 4, 0)),
        ADMIN_STATUS_BAD_ADDRESS,
        "misaligned page list",
    );
    assert_admin_err(
        g.reg_mr_args(DOORBELL_PAGES - 2, &mr_args(&buf, list, 0)),
        ADMIN_STATUS_BAD_HANDLE,
        "MR in a context that does not exist",
    );

    check_destroy(&mut g, FakeGuest::dereg_mr, "MR", (ctx, other), mr.lkey);
}

#[test]
fn memory_regions_are_limited_in_pages_and_number() {
    let mut g = FakeGuest::new();
    let ctx = g.create_ctx().unwrap();
    // A region of MAX_MR_PAGES pages, all the same physical page (the device must not care).
    let page = g.alloc_pages(1);
    let n = MAX_MR_PAGES as usize + 1;
    let list = g.alloc_pages((n * 8).div_ceil(PAGE as usize));
    g.mem_write(list, vec![page; n].as_bytes());
    let mut a = RegMrArgs::new_zeroed();
    a.page_list = list;
    a.iova = 0x10_0000_0000;
    a.length = MAX_MR_PAGES as u64 * PAGE;
    a.npages = MAX_MR_PAGES;
    let big = g.reg_mr_args(ctx, &a).expect("an MR of MAX_MR_PAGES pages");
    g.dereg_mr(ctx, big.lkey).unwrap();
    a.length += 1;
    a.npages += 1;
    assert_admin_err(
        g.reg_mr_args(ctx, &a),
        ADMIN_STATUS_BAD_PARAM,
        "MR of MAX_MR_PAGES + 1 pages",
    );

    // MAX_MRS on the device, across contexts.
    let other = g.create_ctx().unwrap();
    let one = g.page_list(&[page]);
    let mut a = RegMrArgs::new_zeroed();
    a.page_list = one;
    a.iova = 0x20_0000_0000;
    a.length = PAGE;
    a.npages = 1;
    let mut last = None;
    for i in 0..MAX_MRS {
        let c = if i % 2 == 0 { ctx } else { other };
        last = Some(
            g.reg_mr_args(c, &a)
                .unwrap_or_else(|s| panic!("MR #{i}: {}", admin_status_name(s))),
        );
    }
    assert_admin_err(
        g.reg_mr_args(ctx, &a),
        ADMIN_STATUS_NO_RESOURCES,
        "MR beyond MAX_MRS",
    );
    g.dereg_mr(other, last.unwrap().lkey).unwrap();
    g.reg_mr_args(ctx, &a).expect("room after a deregistration");
}
