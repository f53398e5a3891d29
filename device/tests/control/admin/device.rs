//! Commands about the device as a whole — QUERY_DEVICE and QUERY_STATS, their buffers — and
//! what any command is refused for: an unknown opcode, a reserved field set.

use super::check_result_buffer;
use crate::support::*;

#[test]
fn query_device_reports_the_datasheet_limits() {
    let mut g = FakeGuest::new();
    let version = g.reg_read(REG_VERSION);
    let info = g.query_device();
    assert_eq!(info.version, version);
    assert_eq!(info.max_contexts, DOORBELL_PAGES);
    assert_eq!(info.max_qps_per_context, DB_QP_SLOTS);
    assert_eq!(info.max_cqs_per_context, DB_CQ_SLOTS);
    assert_eq!(info.max_mrs, MAX_MRS);
    assert_eq!(info.max_mr_pages, MAX_MR_PAGES);
    assert_eq!(info.max_queue_depth, MAX_QUEUE_DEPTH);
    assert_eq!(info.max_sge, MAX_SGE);
    assert_eq!(info.max_inline, MAX_INLINE);
    assert_eq!(info.max_udp_payload, 65527);
    assert_eq!(info.max_listeners, MAX_LISTENERS);
    assert_eq!(info.mtu, 1500, "default MTU");
    assert_eq!(info.mac[0] & 1, 0, "the MAC is unicast: {:02x?}", info.mac);
    assert_ne!(info.mac, [0; 6], "the device has a MAC");
    assert_eq!(info.reserved0, [0; 2]);
    assert_eq!(info.reserved1, [0; 72]);
}

#[test]
fn query_buffers_must_be_in_ram_aligned_within_a_page_and_big_enough() {
    let mut g = FakeGuest::new();
    let info_len = std::mem::size_of::<DeviceInfo>() as u32;
    let stats_len = std::mem::size_of::<Stats>() as u32;
    check_result_buffer(
        &mut g,
        "QUERY_DEVICE",
        (info_len, 1),
        FakeGuest::query_device_at,
    );
    // QUERY_STATS writes what fits: only a buffer shorter than one counter is too small.
    check_result_buffer(
        &mut g,
        "QUERY_STATS",
        (stats_len, stats_len - 7),
        FakeGuest::query_stats_at,
    );
}

#[test]
fn unknown_opcodes_and_non_zero_reserved_fields_are_refused() {
    let mut g = FakeGuest::new();
    let errors_before = g.stat(STAT_ADMIN_ERRORS);
    let mut refused = 0;
    for op in [0x00u16, 0x08, 0x0f, 0x28, 0x7f, 0x100, 0xffff] {
        let c = g.admin(cmd0(op, 0, 0));
        assert_eq!(c.status, ADMIN_STATUS_BAD_OPCODE, "opcode {op:#x}: {c:?}");
        refused += 1;
    }
    // Reserved header flags.
    let mut c = cmd0(ADMIN_OP_CREATE_CTX, 0, 0);
    c.flags = 1;
    assert_admin_err(
        g.admin_result(c),
        ADMIN_STATUS_BAD_OPCODE,
        "CREATE_CTX with flags set",
    );
    // A reserved byte of CREATE_CTX's arguments.
    let mut a = CreateCtxArgs::new_zeroed();
    a.doorbell_page = g.alloc_pages(1);
    a.reserved[35] = 1;
    assert_admin_err(
        g.admin_result(cmd(ADMIN_OP_CREATE_CTX, 0, 0, &a)),
        ADMIN_STATUS_BAD_OPCODE,
        "CREATE_CTX with a reserved byte set",
    );
    // A body on a command that takes none.
    let mut c = cmd0(ADMIN_OP_ASYNC_EVENT, 0, 0);
    c.body[47] = 1;
    assert_admin_err(
        g.admin_result(c),
        ADMIN_STATUS_BAD_OPCODE,
        "ASYNC_EVENT with a body",
    );
    // Reserved bytes of an argument structure.
    let buf = g.alloc_pages(1);
    let mut q = QueryArgs::new_zeroed();
    q.buf = buf;
    q.len = 4096;
    q.reserved[35] = 0x80;
    assert_admin_err(
        g.admin_result(cmd(ADMIN_OP_QUERY_DEVICE, 0, 0, &q)),
        ADMIN_STATUS_BAD_OPCODE,
        "QUERY_DEVICE with a reserved byte set",
    );
    let ctx = g.create_ctx().unwrap();
    let pages = g.alloc_scattered(1);
    let mut a = CreateCqArgs::new_zeroed();
    a.page_list = g.page_list(&pages);
    a.npages = 1;
    a.depth = 2;
    a.vector = 1;
    a.reserved[0] = 1;
    assert_admin_err(
        g.create_cq_args(ctx, &a),
        ADMIN_STATUS_BAD_OPCODE,
        "CREATE_CQ with a reserved byte set",
    );
    refused += 5;
    assert_eq!(
        g.stat(STAT_ADMIN_ERRORS) - errors_before,
        refused,
        "STAT_ADMIN_ERRORS counts each refusal"
    );
}

#[test]
fn stats_count_admin_commands_and_errors() {
    let mut g = FakeGuest::new();
    let s0 = g.query_stats();
    g.create_ctx().unwrap();
    g.create_ctx().unwrap();
    g.query_device();
    let _ = g.admin(cmd0(0x7f, 0, 0));
    let s1 = g.query_stats();
    let d = |i: u32| s1.counters[i as usize] - s0.counters[i as usize];
    // The first query itself may or may not count in its own snapshot.
    assert!(
        (4..=5).contains(&d(STAT_ADMIN_COMMANDS)),
        "STAT_ADMIN_COMMANDS moved by {}",
        d(STAT_ADMIN_COMMANDS)
    );
    assert_eq!(d(STAT_ADMIN_ERRORS), 1, "one refused command");
    for i in (STAT_UDP_RX_NO_PORT + 1)..STATS_COUNT {
        assert_eq!(s1.counters[i as usize], 0, "unassigned counter {i} is zero");
    }
}
