//! One function's burst of admin commands cannot hold the engine's pass: a pass executes at
//! most `ADMIN_BUDGET` of them and reads at most `PAGE_LIST_BUDGET` page-list entries, and
//! the rest go on in the next passes (after the other functions on the same engine thread
//! had their turn).

use qpip_abi::admin::*;
use qpip_device::engine::admin::{ADMIN_BUDGET, PAGE_LIST_BUDGET};
use qpip_device::engine::{Control, EngineConfig};
use qpip_testkit::{cmd, cmd0, create_ctx_cmd, mr_body, query_cmd, AdminRing, Ram, SyncEngine};

#[test]
fn a_pass_executes_at_most_the_admin_budget() {
    let ram = Ram::new(c"admin-budget", 0x1_0000_0000, 16 << 20);
    let mut e = SyncEngine::new(ram, EngineConfig::default());
    let (sq, cq, query) = (
        e.ram.alloc_pages(16),
        e.ram.alloc_pages(8),
        e.ram.alloc_pages(1),
    );
    let mut admin = AdminRing::new(sq, cq, 256);
    e.enable_admin(&admin);
    const BURST: u32 = 200;
    for i in 0..BURST {
        let mut c = query_cmd(ADMIN_OP_QUERY_DEVICE, query, 4096);
        c.cmd_id = i + 1;
        let at = admin.push();
        e.ram.write_obj(at, &c);
    }
    e.control(Control::AdminSqTail(admin.tail));
    let mut passes = Vec::new();
    let mut done = 0;
    while done < BURST {
        assert!(e.engine.poll_once(), "commands wait, so the pass has work");
        let mut n = 0;
        while let Some(c) = admin.take(&e.ram) {
            assert_eq!(c.status, ADMIN_STATUS_OK);
            n += 1;
        }
        e.control(Control::AdminCqHead(admin.head));
        passes.push(n);
        done += n;
    }
    assert!(
        passes.iter().all(|&n| n <= ADMIN_BUDGET),
        "commands per pass: {passes:?}"
    );
    assert_eq!(
        passes.len(),
        BURST.div_ceil(ADMIN_BUDGET) as usize,
        "{passes:?}"
    );
}

/// Submits `c` as command `id` and works the engine until it completes.
fn run(e: &mut SyncEngine, admin: &mut AdminRing, id: u32, mut c: AdminCmd) -> AdminCqe {
    c.cmd_id = id;
    submit(e, admin, c);
    loop {
        e.engine.poll_once();
        if let Some(done) = take(e, admin) {
            assert_eq!(done.cmd_id, id);
            return done;
        }
    }
}

fn submit(e: &mut SyncEngine, admin: &mut AdminRing, c: AdminCmd) {
    let at = admin.push();
    e.ram.write_obj(at, &c);
    e.control(Control::AdminSqTail(admin.tail));
}

fn take(e: &mut SyncEngine, admin: &mut AdminRing) -> Option<AdminCqe> {
    let c = admin.take(&e.ram)?;
    e.control(Control::AdminCqHead(admin.head));
    Some(c)
}

/// An engine with its admin queue and one context: (engine, admin ring, context).
fn with_context(name: &std::ffi::CStr) -> (SyncEngine, AdminRing, u32) {
    let ram = Ram::new(name, 0x1_0000_0000, 16 << 20);
    let mut e = SyncEngine::new(ram, EngineConfig::default());
    let (sq, cq, doorbells) = (
        e.ram.alloc_pages(16),
        e.ram.alloc_pages(8),
        e.ram.alloc_pages(1),
    );
    let mut admin = AdminRing::new(sq, cq, 256);
    e.enable_admin(&admin);
    let c = run(&mut e, &mut admin, 1, create_ctx_cmd(doorbells));
    assert_eq!(c.status, ADMIN_STATUS_OK);
    (e, admin, c.result0 as u32)
}

/// REG_MR of `MAX_MR_PAGES` pages (all one page) listed at `list`.
fn reg_mr_cmd(ctx: u32, list: u64) -> AdminCmd {
    let len = MAX_MR_PAGES as u64 * 4096;
    let body = mr_body(list, MAX_MR_PAGES, 0, 1 << 40, len, MR_ACCESS_LOCAL_WRITE);
    cmd(ADMIN_OP_REG_MR, ctx, 0, &body)
}

/// A region's page list of `MAX_MR_PAGES` entries is read `PAGE_LIST_BUDGET` entries a
/// pass, so a guest's registration holds no pass for long; the commands behind it wait for
/// it and complete after it, in order.
#[test]
fn a_long_page_list_is_read_over_several_passes() {
    let (mut e, mut admin, ctx) = with_context(c"page-list-passes");
    let page = e.ram.alloc_pages(1);
    let list = e.ram.page_list(&vec![page; MAX_MR_PAGES as usize]);
    let query = e.ram.alloc_pages(1);
    let mut reg = reg_mr_cmd(ctx, list);
    reg.cmd_id = 2;
    let mut q = query_cmd(ADMIN_OP_QUERY_DEVICE, query, 4096);
    q.cmd_id = 3;
    submit(&mut e, &mut admin, reg);
    submit(&mut e, &mut admin, q);
    let (mut order, mut lkey) = (Vec::new(), 0);
    let mut passes = 0;
    while order.len() < 2 {
        assert!(e.engine.poll_once(), "a registration under way is work");
        passes += 1;
        while let Some(c) = take(&mut e, &mut admin) {
            assert_eq!(c.status, ADMIN_STATUS_OK, "{c:?}");
            if c.cmd_id == 2 {
                lkey = c.result0 as u32;
            }
            order.push((c.cmd_id, passes));
        }
    }
    let expected = MAX_MR_PAGES.div_ceil(PAGE_LIST_BUDGET);
    assert_eq!(order, [(2, expected), (3, expected)], "(command, pass)");
    let c = run(&mut e, &mut admin, 4, cmd0(ADMIN_OP_DEREG_MR, ctx, lkey));
    assert_eq!(c.status, ADMIN_STATUS_OK, "the region was registered");
}

/// An entry naming memory outside guest RAM near the end of a long list fails the
/// registration with BAD_ADDRESS when the reading reaches it, and nothing is registered.
#[test]
fn a_bad_entry_late_in_a_long_list_fails_the_registration() {
    let (mut e, mut admin, ctx) = with_context(c"page-list-bad-entry");
    let page = e.ram.alloc_pages(1);
    let mut pages = vec![page; MAX_MR_PAGES as usize];
    pages[MAX_MR_PAGES as usize - 3] = e.ram.end() + 4096;
    let list = e.ram.page_list(&pages);
    let c = run(&mut e, &mut admin, 2, reg_mr_cmd(ctx, list));
    assert_eq!(c.status, ADMIN_STATUS_BAD_ADDRESS);
    // Nothing half-registered: the function's whole page allowance is still there.
    let good = e.ram.page_list(&vec![page; MAX_MR_PAGES as usize]);
    let allowance = qpip_device::engine::DEFAULT_REGION_PAGES / MAX_MR_PAGES as u64;
    for i in 0..allowance as u32 {
        let c = run(&mut e, &mut admin, 10 + i, reg_mr_cmd(ctx, good));
        assert_eq!(c.status, ADMIN_STATUS_OK, "region {i}");
    }
}
