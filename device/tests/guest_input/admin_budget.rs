//! One function's burst of admin commands cannot hold the engine's pass: a pass executes at
//! most `ADMIN_BUDGET` of them, and the rest go on in the next passes (after the other
//! functions on the same engine thread had their turn).

use qpip_abi::admin::*;
use qpip_device::engine::admin::ADMIN_BUDGET;
use qpip_device::engine::{Control, EngineConfig};
use qpip_testkit::{query_cmd, AdminRing, Ram, SyncEngine};

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
