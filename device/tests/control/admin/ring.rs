//! The admin queue itself: phases through many wrap-arounds, a full completion ring never
//! overwritten, the interrupt on vector 0, disable and re-enable, and set-ups it refuses.

use std::time::Duration;

use crate::support::*;

#[test]
fn the_admin_ring_wraps_around_many_times() {
    let mut g = FakeGuest::new();
    for depth in [2u32, 4] {
        g.disable_admin();
        g.setup_admin(depth);
        // One at a time, through many passes (phases flip each pass).
        for i in 0..(depth * 7 + 1) {
            let ctx = g
                .create_ctx()
                .unwrap_or_else(|s| panic!("depth {depth} command {i}: {}", admin_status_name(s)));
            g.destroy_ctx(ctx).unwrap();
        }
        // Full batches: `depth` commands in flight at once.
        let pages: Vec<u64> = (0..depth).map(|_| g.alloc_pages(1)).collect();
        for _ in 0..10 {
            let ids: Vec<u32> = pages
                .iter()
                .map(|&p| {
                    let mut a = CreateCtxArgs::new_zeroed();
                    a.doorbell_page = p;
                    g.admin_submit(cmd(ADMIN_OP_CREATE_CTX, 0, 0, &a))
                })
                .collect();
            let mut ctxs = Vec::new();
            for id in ids {
                let c = g.admin_next(TIMEOUT).expect("batched completion");
                assert_eq!(c.cmd_id, id, "in-order completions of in-order commands");
                assert_eq!(c.status, ADMIN_STATUS_OK);
                ctxs.push(c.result0 as u32);
            }
            for ctx in ctxs {
                g.destroy_ctx(ctx).unwrap();
            }
        }
    }
}

#[test]
fn a_full_admin_completion_ring_is_never_overwritten() {
    let mut g = FakeGuest::new();
    g.disable_admin();
    let depth = 4u32;
    let sq = g.alloc_pages(1);
    let cq = g.alloc_pages(1);
    assert_ne!(g.program_admin(sq, cq, depth) & STATUS_ADMIN_ENABLED, 0);
    let cqe_size = std::mem::size_of::<AdminCqe>() as u64;
    let first: Vec<u32> = (0..depth)
        .map(|_| {
            let mut a = CreateCtxArgs::new_zeroed();
            a.doorbell_page = g.alloc_pages(1);
            g.admin_submit(cmd(ADMIN_OP_CREATE_CTX, 0, 0, &a))
        })
        .collect();
    // Wait until all four completions are in the ring, without releasing any.
    let deadline = std::time::Instant::now() + TIMEOUT;
    while (0..depth as u64).any(|i| g.read_obj::<AdminCqe>(cq + i * cqe_size).phase & 1 != 1) {
        assert!(
            std::time::Instant::now() < deadline,
            "the first {depth} completions never arrived"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    // The submission ring has room (the device took all four); the completion ring has none.
    let more: Vec<u32> = (0..2)
        .map(|_| g.admin_submit(cmd0(ADMIN_OP_QUERY_DEVICE, 0, 0)))
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    for (i, id) in first.iter().enumerate() {
        let c: AdminCqe = g.read_obj(cq + i as u64 * cqe_size);
        assert_eq!(
            (c.cmd_id, c.phase & 1),
            (*id, 1),
            "slot {i} overwritten while unconsumed"
        );
    }
    // Consuming makes room; the two waiting commands complete then (QUERY_DEVICE with a
    // zero buffer fails, which is fine: it completes).
    for id in first.iter().chain(&more) {
        let c = g.admin_next(TIMEOUT).expect("completion after making room");
        assert_eq!(c.cmd_id, *id);
    }
}

#[test]
fn admin_completions_raise_vector_0() {
    let mut g = FakeGuest::new();
    g.query_device();
    for v in 0..MSIX_VECTORS as u32 {
        g.irq_take(v);
    }
    g.create_ctx().unwrap();
    assert!(
        g.irq_wait(0, TIMEOUT) >= 1,
        "no interrupt on vector 0 for an admin completion"
    );
    for v in 1..MSIX_VECTORS as u32 {
        assert_eq!(g.irq_take(v), 0, "vector {v} raised by an admin completion");
    }
}

#[test]
fn the_admin_queue_can_be_disabled_and_re_enabled() {
    let mut g = FakeGuest::new();
    g.disable_admin();
    let sq = g.alloc_pages(1);
    let cq = g.alloc_pages(1);
    assert_ne!(g.program_admin(sq, cq, 8) & STATUS_ADMIN_ENABLED, 0);
    let ctx = g.create_ctx().unwrap();
    g.disable_admin();
    assert_eq!(
        g.reg_read(REG_STATUS) & STATUS_ADMIN_ENABLED,
        0,
        "disabled by depth 0"
    );
    // A command written and rung while disabled is not taken.
    let mut c = cmd0(ADMIN_OP_CREATE_CTX, 0, 0);
    c.cmd_id = 77;
    g.write_obj(sq + 64, &c);
    g.reg_write(REG_ADMIN_SQ_TAIL, 2);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        g.read_obj::<AdminCqe>(cq + 32).phase,
        0,
        "a disabled admin queue completed a command"
    );

    g.setup_admin(8);
    assert_ne!(g.reg_read(REG_STATUS) & STATUS_ADMIN_ENABLED, 0);
    // Indices start at 0 again, and objects survive the admin queue's disable.
    for _ in 0..20 {
        g.query_device();
    }
    g.destroy_ctx(ctx)
        .expect("the context outlives an admin queue disable");
}

#[test]
fn bad_admin_setups_set_admin_error() {
    let mut g = FakeGuest::bare();
    g.enable();
    let sq = g.alloc_pages(64);
    let cq = g.alloc_pages(32);
    let end = RAM_BASE + RAM_SIZE;
    for (what, s, c, depth) in [
        ("depth 1", sq, cq, 1u32),
        ("depth 3", sq, cq, 3),
        ("depth 48", sq, cq, 48),
        ("depth beyond ADMIN_MAX_DEPTH", sq, cq, ADMIN_MAX_DEPTH * 2),
        ("SQ outside RAM", 0x1000, cq, 4),
        ("CQ outside RAM", sq, end, 4),
        ("SQ running past the end of RAM", end - 128, cq, 4),
        ("CQ running past the end of RAM", sq, end - 64, 4),
        ("misaligned SQ", sq + 32, cq, 4),
        ("misaligned CQ", sq, cq + 16, 4),
    ] {
        let status = g.program_admin(s, c, depth);
        assert_ne!(
            status & STATUS_ADMIN_ERROR,
            0,
            "{what}: STATUS_ADMIN_ERROR not set ({status:#x})"
        );
        assert_eq!(
            status & STATUS_ADMIN_ENABLED,
            0,
            "{what}: admin queue enabled anyway"
        );
    }
    // A good set-up clears the error, and the deepest queue is allowed.
    let status = g.program_admin(sq, cq, ADMIN_MAX_DEPTH);
    assert_eq!(
        status & (STATUS_ADMIN_ERROR | STATUS_ADMIN_ENABLED),
        STATUS_ADMIN_ENABLED,
        "REG_STATUS {status:#x}"
    );
    g.create_ctx()
        .expect("admin queue works after a refused set-up");
}
