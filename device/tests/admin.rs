//! The admin queue, end to end over vfio-user: every command's success path and its errors,
//! the ring mechanics (phases, wrap-around, a full completion ring, disable/re-enable, bad
//! set-ups) and the admin interrupt.

use qpip_testkit as support;

use std::time::Duration;

use support::*;

const TCP_MSG: u8 = FRAMING_MESSAGE;

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
    let page = g.alloc_pages(2);
    g.mem_fill(page, 2 * PAGE as usize, 0xee);

    for (what, buf) in [
        ("beyond the end of RAM", RAM_BASE + RAM_SIZE),
        ("straddling the end of RAM", RAM_BASE + RAM_SIZE - 64),
        ("below RAM", 0x1000),
        ("crossing a page boundary", page + PAGE - 64),
        ("misaligned", page + 4),
        ("at the top of the address space", u64::MAX - 7),
    ] {
        assert_admin_err(
            g.query_device_at(buf, info_len),
            ADMIN_STATUS_BAD_ADDRESS,
            &format!("QUERY_DEVICE into a buffer {what}"),
        );
        assert_admin_err(
            g.query_stats_at(buf, stats_len),
            ADMIN_STATUS_BAD_ADDRESS,
            &format!("QUERY_STATS into a buffer {what}"),
        );
    }
    assert_admin_err(
        g.query_device_at(page, info_len - 1),
        ADMIN_STATUS_BAD_PARAM,
        "QUERY_DEVICE into a buffer one byte short",
    );
    assert_admin_err(
        g.query_stats_at(page, stats_len - 8),
        ADMIN_STATUS_BAD_PARAM,
        "QUERY_STATS into a buffer one counter short",
    );
    assert!(
        g.mem_read(page, 2 * PAGE as usize)
            .iter()
            .all(|&b| b == 0xee),
        "a refused query wrote guest memory"
    );
    // A buffer bigger than needed is fine, and only the structure is written.
    g.query_device_at(page, 2048).unwrap();
    assert!(g
        .mem_read(page + info_len as u64, 2048 - info_len as usize)
        .iter()
        .all(|&b| b == 0xee));
}

#[test]
fn unknown_opcodes_and_non_zero_reserved_fields_are_refused() {
    let mut g = FakeGuest::new();
    let errors_before = g.stat(STAT_ADMIN_ERRORS);
    let mut refused = 0;
    for op in [0x00u16, 0x08, 0x0f, 0x1e, 0x7f, 0x100, 0xffff] {
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
    a.reserved[39] = 1;
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
fn set_mac_changes_the_mac_and_refuses_group_addresses() {
    let mut g = FakeGuest::new();
    let mac = [0x02, 0x11, 0x22, 0x33, 0x44, 0x55];
    g.set_mac(mac).unwrap();
    assert_eq!(g.query_device().mac, mac);
    assert_admin_err(
        g.set_mac([0x03, 0, 0, 0, 0, 1]),
        ADMIN_STATUS_BAD_PARAM,
        "SET_MAC multicast",
    );
    assert_admin_err(
        g.set_mac([0xff; 6]),
        ADMIN_STATUS_BAD_PARAM,
        "SET_MAC broadcast",
    );
    assert_eq!(
        g.query_device().mac,
        mac,
        "a refused SET_MAC changes nothing"
    );
}

#[test]
fn addresses_are_added_and_deleted_within_the_limit() {
    let mut g = FakeGuest::new();
    assert_admin_err(
        g.add_addr(ip("ff02::1"), 64),
        ADMIN_STATUS_BAD_PARAM,
        "ADD_ADDR multicast",
    );
    assert_admin_err(
        g.add_addr(UNSPECIFIED, 64),
        ADMIN_STATUS_BAD_PARAM,
        "ADD_ADDR ::",
    );
    assert_admin_err(
        g.add_addr(ip("2001:db8::1"), 0),
        ADMIN_STATUS_BAD_PARAM,
        "ADD_ADDR /0",
    );
    assert_admin_err(
        g.add_addr(ip("2001:db8::1"), 129),
        ADMIN_STATUS_BAD_PARAM,
        "ADD_ADDR /129",
    );
    for i in 0..MAX_ADDRS {
        g.add_addr(ip(&format!("2001:db8::{:x}", i + 1)), 64)
            .unwrap_or_else(|s| panic!("ADD_ADDR #{i}: {}", admin_status_name(s)));
    }
    assert_admin_err(
        g.add_addr(ip("2001:db8::ff"), 64),
        ADMIN_STATUS_NO_RESOURCES,
        "ADD_ADDR beyond MAX_ADDRS",
    );
    g.del_addr(ip("2001:db8::3")).unwrap();
    assert!(
        g.del_addr(ip("2001:db8::3")).is_err(),
        "deleting an absent address fails"
    );
    g.add_addr(ip("2001:db8::ff"), 128)
        .expect("room again after DEL_ADDR");
}

#[test]
fn list_addrs_reports_the_link_local_address_first_then_the_configured_ones() {
    use qpip_device::core::CoreConfig;
    use qpip_device::engine::EngineConfig;
    use qpip_device::vfio::ServeOptions;
    let mac = [0x02, 0x51, 0x50, 0x00, 0x0a, 0x0b];
    let mut g = FakeGuest::with_options(ServeOptions {
        core: CoreConfig {
            engine: EngineConfig {
                mac,
                addrs: vec![
                    ("fd51:5050::1:1".parse().unwrap(), 64),
                    ("2001:db8::7".parse().unwrap(), 128),
                ],
                ..EngineConfig::default()
            },
            ..CoreConfig::default()
        },
    });
    // What qpipd was started with (--mac, --ip) shows.
    assert_eq!(
        g.list_addrs(),
        vec![
            (link_local(mac), 64, ADDR_FLAG_LINK_LOCAL),
            (ip("fd51:5050::1:1"), 64, 0),
            (ip("2001:db8::7"), 128, 0),
        ]
    );
    // Changes through the admin queue show in their order; a new MAC is a new link-local.
    g.del_addr(ip("fd51:5050::1:1")).unwrap();
    g.add_addr(ip("2001:db8::8"), 48).unwrap();
    let mac2 = [0x02, 0, 0, 0, 0, 0x42];
    g.set_mac(mac2).unwrap();
    assert_eq!(
        g.list_addrs(),
        vec![
            (link_local(mac2), 64, ADDR_FLAG_LINK_LOCAL),
            (ip("2001:db8::7"), 128, 0),
            (ip("2001:db8::8"), 48, 0),
        ]
    );
    // A full list: every entry used.
    for i in 0..MAX_ADDRS - 2 {
        g.add_addr(ip(&format!("2001:db8:1::{:x}", i + 1)), 64)
            .unwrap();
    }
    let all = g.list_addrs();
    assert_eq!(all.len(), MAX_ADDRS as usize + 1);
    assert_eq!(
        all[MAX_ADDRS as usize].0,
        ip(&format!("2001:db8:1::{:x}", MAX_ADDRS - 2))
    );
    // A reset gives back the identity qpipd was started with.
    g.reset();
    g.enable();
    g.setup_admin(ADMIN_DEPTH);
    assert_eq!(g.list_addrs().len(), 3);
}

#[test]
fn list_addrs_buffers_must_be_in_ram_aligned_within_a_page_and_big_enough() {
    let mut g = FakeGuest::new();
    let len = std::mem::size_of::<AddrList>() as u32;
    assert_eq!(len, 224);
    let page = g.alloc_pages(2);
    g.mem_fill(page, 2 * PAGE as usize, 0xee);
    for (what, buf) in [
        ("beyond the end of RAM", RAM_BASE + RAM_SIZE),
        ("below RAM", 0x1000),
        ("crossing a page boundary", page + PAGE - 64),
        ("misaligned", page + 4),
        ("at the top of the address space", u64::MAX - 7),
    ] {
        assert_admin_err(
            g.list_addrs_at(buf, len),
            ADMIN_STATUS_BAD_ADDRESS,
            &format!("LIST_ADDRS into a buffer {what}"),
        );
    }
    assert_admin_err(
        g.list_addrs_at(page, len - 1),
        ADMIN_STATUS_BAD_PARAM,
        "LIST_ADDRS into a buffer one byte short",
    );
    assert!(
        g.mem_read(page, 2 * PAGE as usize)
            .iter()
            .all(|&b| b == 0xee),
        "a refused LIST_ADDRS wrote guest memory"
    );
    // Without --ip: the link-local address alone, and only the structure is written.
    assert_eq!(g.list_addrs_at(page, 4096), Ok(1));
    assert!(g
        .mem_read(page + len as u64, 4096 - len as usize)
        .iter()
        .all(|&b| b == 0xee));
    let l: AddrList = g.read_obj(page);
    assert_eq!(l.entries[0].flags, ADDR_FLAG_LINK_LOCAL);
    assert_eq!(l.entries[0].addr, g.link_local());
}

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
        (u64::MAX & !(PAGE - 1), "the last page of the address space"),
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
    let tcp = g
        .create_qp_typed(ctx, cq.id, cq.id, 8, 8, QP_TYPE_TCP, TCP_MSG)
        .unwrap();
    let listener = g.listen(ctx, UNSPECIFIED, 5000, 4).unwrap();
    let buf = g.alloc_buf(4096, 0);
    let mr = g.reg_mr(ctx, &buf, MR_ACCESS_LOCAL_WRITE).unwrap();
    let accept = g.submit_accept(ctx, listener, tcp.id);

    g.destroy_ctx(ctx).unwrap();
    let c = g.admin_wait_done(accept);
    assert_eq!(
        c.status, ADMIN_STATUS_CANCELLED,
        "pending ACCEPT of a destroyed context: {c:?}"
    );

    // The objects are gone with it.
    assert_admin_err(
        g.destroy_qp(ctx, qp.id),
        ADMIN_STATUS_BAD_HANDLE,
        "QP of a destroyed context",
    );
    assert_admin_err(
        g.dereg_mr(ctx, mr.lkey),
        ADMIN_STATUS_BAD_HANDLE,
        "MR of a destroyed context",
    );
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

    // Destroy: unknown, another context's, twice.
    assert_admin_err(
        g.destroy_cq(ctx, 0xdead),
        ADMIN_STATUS_BAD_HANDLE,
        "destroy unknown CQ",
    );
    assert_admin_err(
        g.destroy_cq(other, a.id),
        ADMIN_STATUS_BAD_HANDLE,
        "destroy another context's CQ",
    );
    g.destroy_cq(ctx, a.id)
        .expect("the owner can still destroy it");
    assert_admin_err(
        g.destroy_cq(ctx, a.id),
        ADMIN_STATUS_BAD_HANDLE,
        "destroy CQ twice",
    );
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
    g.create_qp_typed(ctx, cq.id, cq.id, 8, 8, QP_TYPE_TCP, FRAMING_MESSAGE)
        .unwrap();
    g.create_qp_typed(ctx, cq.id, cq.id, 8, 8, QP_TYPE_TCP, FRAMING_STREAM)
        .unwrap();
    g.create_qp(ctx, cq.id, cq.id, MAX_QUEUE_DEPTH, 2)
        .expect("deepest SQ");

    let bad = |g: &mut FakeGuest, a: CreateQpArgs, want: u16, what: &str| {
        assert_admin_err(g.create_qp_args(ctx, &a), want, what);
    };
    for t in [0u8, 3, 0xff] {
        let (a, ..) = g.qp_args(cq.id, cq.id, 8, 8, t, 0);
        bad(&mut g, a, ADMIN_STATUS_BAD_PARAM, &format!("QP type {t}"));
    }
    for f in [0u8, 3] {
        let (a, ..) = g.qp_args(cq.id, cq.id, 8, 8, QP_TYPE_TCP, f);
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
        let (mut a, ..) = g.qp_args(cq.id, cq.id, 8, 8, QP_TYPE_UDP, 0);
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
    let (mut a, ..) = g.qp_args(cq.id, cq.id, 64, 64, QP_TYPE_UDP, 0);
    a.sq_npages = 1;
    bad(&mut g, a, ADMIN_STATUS_BAD_PARAM, "SQ page count short");
    let (mut a, ..) = g.qp_args(cq.id, cq.id, 64, 64, QP_TYPE_UDP, 0);
    a.rq_npages = 3;
    bad(&mut g, a, ADMIN_STATUS_BAD_PARAM, "RQ page count long");

    for (s, r, what) in [
        (0xdead, cq.id, "unknown send CQ"),
        (cq.id, 0xdead, "unknown recv CQ"),
        (foreign.id, cq.id, "send CQ of another context"),
        (cq.id, foreign.id, "recv CQ of another context"),
    ] {
        let (a, ..) = g.qp_args(s, r, 8, 8, QP_TYPE_UDP, 0);
        bad(&mut g, a, ADMIN_STATUS_BAD_HANDLE, what);
    }

    // A CQ in use cannot go; once its QPs are gone it can.
    assert_admin_err(
        g.destroy_cq(ctx, cq_b.id),
        ADMIN_STATUS_BUSY,
        "destroy a CQ a QP uses",
    );
    assert_admin_err(
        g.destroy_qp(other, split.id),
        ADMIN_STATUS_BAD_HANDLE,
        "destroy another context's QP",
    );
    assert_admin_err(
        g.destroy_qp(ctx, 0xdead),
        ADMIN_STATUS_BAD_HANDLE,
        "destroy unknown QP",
    );
    g.destroy_qp(ctx, split.id).unwrap();
    assert_admin_err(
        g.destroy_qp(ctx, split.id),
        ADMIN_STATUS_BAD_HANDLE,
        "destroy QP twice",
    );
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

    let mut a = mr_args(&buf, list, 0);
    a.length = 0;
    assert_admin_err(
        g.reg_mr_args(ctx, &a),
        ADMIN_STATUS_BAD_PARAM,
        "zero-length MR",
    );
    let mut a = mr_args(&buf, list, 0);
    a.npages -= 1;
    assert_admin_err(
        g.reg_mr_args(ctx, &a),
        ADMIN_STATUS_BAD_PARAM,
        "too few pages for the length",
    );
    let mut a = mr_args(&buf, list, 0);
    a.npages += 1;
    assert_admin_err(
        g.reg_mr_args(ctx, &a),
        ADMIN_STATUS_BAD_PARAM,
        "too many pages for the length",
    );
    let mut a = mr_args(&buf, list, 0);
    a.first_page_offset = 0;
    assert_admin_err(
        g.reg_mr_args(ctx, &a),
        ADMIN_STATUS_BAD_PARAM,
        "first_page_offset != iova % 4096",
    );
    let mut a = mr_args(&buf, list, 0);
    a.first_page_offset = 4096;
    a.iova += 4096 - 300;
    assert_admin_err(
        g.reg_mr_args(ctx, &a),
        ADMIN_STATUS_BAD_PARAM,
        "first_page_offset 4096",
    );

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

    assert_admin_err(
        g.dereg_mr(ctx, 0xdead),
        ADMIN_STATUS_BAD_HANDLE,
        "dereg unknown lkey",
    );
    assert_admin_err(
        g.dereg_mr(other, mr.lkey),
        ADMIN_STATUS_BAD_HANDLE,
        "dereg another context's MR",
    );
    g.dereg_mr(ctx, mr.lkey).unwrap();
    assert_admin_err(
        g.dereg_mr(ctx, mr.lkey),
        ADMIN_STATUS_BAD_HANDLE,
        "dereg twice",
    );
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

#[test]
fn bind_gives_ports_and_refuses_conflicts() {
    let mut g = FakeGuest::new();
    let ctx = g.create_ctx().unwrap();
    let other = g.create_ctx().unwrap();
    let cq = g.create_cq(ctx, 16).unwrap();
    let ocq = g.create_cq(other, 16).unwrap();
    let mut qps = Vec::new();
    for _ in 0..5 {
        qps.push(g.create_qp(ctx, cq.id, cq.id, 4, 4).unwrap().id);
    }
    let oqp = g.create_qp(other, ocq.id, ocq.id, 4, 4).unwrap().id;

    assert_eq!(g.bind(ctx, qps[0], UNSPECIFIED, 7000), Ok(7000));
    assert_admin_err(
        g.bind(ctx, qps[1], UNSPECIFIED, 7000),
        ADMIN_STATUS_ADDR_IN_USE,
        "same port twice",
    );
    assert_admin_err(
        g.bind(other, oqp, LOOPBACK, 7000),
        ADMIN_STATUS_ADDR_IN_USE,
        "same port, specific address, another context",
    );
    assert_admin_err(
        g.bind(ctx, qps[0], UNSPECIFIED, 7001),
        ADMIN_STATUS_BAD_STATE,
        "bind a QP twice",
    );
    let e1 = g.bind(ctx, qps[2], UNSPECIFIED, 0).unwrap();
    let e2 = g.bind(ctx, qps[3], LOOPBACK, 0).unwrap();
    assert!(e1 != 0 && e2 != 0 && e1 != e2, "ephemeral ports {e1} {e2}");
    assert_admin_err(
        g.bind(ctx, 0xdead, UNSPECIFIED, 7002),
        ADMIN_STATUS_BAD_HANDLE,
        "bind unknown QP",
    );
    assert_admin_err(
        g.bind(ctx, oqp, UNSPECIFIED, 7002),
        ADMIN_STATUS_BAD_HANDLE,
        "bind another context's QP",
    );
    // Destroying the QP frees its port.
    g.destroy_qp(ctx, qps[0]).unwrap();
    assert_eq!(
        g.bind(ctx, qps[4], UNSPECIFIED, 7000),
        Ok(7000),
        "port free after DESTROY_QP"
    );
}

#[test]
fn listeners_bind_ports_within_the_limit() {
    let mut g = FakeGuest::new();
    let ctx = g.create_ctx().unwrap();
    let other = g.create_ctx().unwrap();
    let l = g.listen(ctx, UNSPECIFIED, 8000, 8).unwrap();
    assert_ne!(l, 0);
    assert_admin_err(
        g.listen(ctx, UNSPECIFIED, 0, 8),
        ADMIN_STATUS_BAD_PARAM,
        "listen on port 0",
    );
    assert_admin_err(
        g.listen(other, UNSPECIFIED, 8000, 8),
        ADMIN_STATUS_ADDR_IN_USE,
        "listen twice on a port",
    );
    assert_admin_err(
        g.destroy_listener(other, l),
        ADMIN_STATUS_BAD_HANDLE,
        "destroy another context's listener",
    );
    assert_admin_err(
        g.destroy_listener(ctx, 0xdead),
        ADMIN_STATUS_BAD_HANDLE,
        "destroy unknown listener",
    );
    g.destroy_listener(ctx, l).unwrap();
    assert_admin_err(
        g.destroy_listener(ctx, l),
        ADMIN_STATUS_BAD_HANDLE,
        "destroy listener twice",
    );
    g.listen(other, UNSPECIFIED, 8000, 8)
        .expect("port free after DESTROY_LISTENER");
    for i in 1..MAX_LISTENERS {
        g.listen(ctx, UNSPECIFIED, 8000 + i as u16, 1)
            .unwrap_or_else(|s| panic!("listener #{i}: {}", admin_status_name(s)));
    }
    assert_admin_err(
        g.listen(ctx, UNSPECIFIED, 9999, 1),
        ADMIN_STATUS_NO_RESOURCES,
        "listener beyond MAX_LISTENERS",
    );
}

#[test]
fn connection_commands_refuse_wrong_objects_and_states() {
    let mut g = FakeGuest::new();
    let ctx = g.create_ctx().unwrap();
    let other = g.create_ctx().unwrap();
    let cq = g.create_cq(ctx, 16).unwrap();
    let ocq = g.create_cq(other, 16).unwrap();
    let udp = g.create_qp(ctx, cq.id, cq.id, 4, 4).unwrap().id;
    let tcp = g
        .create_qp_typed(ctx, cq.id, cq.id, 4, 4, QP_TYPE_TCP, TCP_MSG)
        .unwrap()
        .id;
    let otcp = g
        .create_qp_typed(other, ocq.id, ocq.id, 4, 4, QP_TYPE_TCP, TCP_MSG)
        .unwrap()
        .id;
    let l = g.listen(ctx, UNSPECIFIED, 8100, 4).unwrap();
    let ol = g.listen(other, UNSPECIFIED, 8101, 4).unwrap();

    let id = g.submit_connect(ctx, udp, LOOPBACK, 8100);
    assert_eq!(
        g.admin_wait_done(id).status,
        ADMIN_STATUS_BAD_STATE,
        "CONNECT on a UDP QP"
    );
    let id = g.submit_accept(ctx, l, udp);
    assert_eq!(
        g.admin_wait_done(id).status,
        ADMIN_STATUS_BAD_STATE,
        "ACCEPT with a UDP QP"
    );
    assert_admin_err(
        g.admin_result(cmd0(ADMIN_OP_CLOSE, ctx, udp)),
        ADMIN_STATUS_BAD_STATE,
        "CLOSE on a UDP QP",
    );
    assert_admin_err(
        g.admin_result(cmd0(ADMIN_OP_CLOSE, ctx, tcp)),
        ADMIN_STATUS_BAD_STATE,
        "CLOSE on an unconnected TCP QP",
    );
    let id = g.submit_accept(ctx, ol, tcp);
    assert_eq!(
        g.admin_wait_done(id).status,
        ADMIN_STATUS_BAD_HANDLE,
        "ACCEPT on another context's listener"
    );
    let id = g.submit_accept(ctx, l, otcp);
    assert_eq!(
        g.admin_wait_done(id).status,
        ADMIN_STATUS_BAD_HANDLE,
        "ACCEPT with another context's QP"
    );
    let id = g.submit_accept(ctx, l, 0xdead);
    assert_eq!(
        g.admin_wait_done(id).status,
        ADMIN_STATUS_BAD_HANDLE,
        "ACCEPT with an unknown QP"
    );
    let id = g.submit_connect(ctx, otcp, LOOPBACK, 8100);
    assert_eq!(
        g.admin_wait_done(id).status,
        ADMIN_STATUS_BAD_HANDLE,
        "CONNECT another context's QP"
    );
    // A listener does not bind a UDP port, and vice versa: different protocols.
    g.bind(ctx, udp, UNSPECIFIED, 8100)
        .expect("UDP port equal to a TCP listening port");
}

#[test]
fn pending_accepts_are_cancelled_when_the_listener_or_qp_goes() {
    let mut g = FakeGuest::new();
    let ctx = g.create_ctx().unwrap();
    let cq = g.create_cq(ctx, 16).unwrap();
    let a = g
        .create_qp_typed(ctx, cq.id, cq.id, 4, 4, QP_TYPE_TCP, TCP_MSG)
        .unwrap()
        .id;
    let b = g
        .create_qp_typed(ctx, cq.id, cq.id, 4, 4, QP_TYPE_TCP, TCP_MSG)
        .unwrap()
        .id;
    let l = g.listen(ctx, UNSPECIFIED, 8200, 4).unwrap();

    let acc_a = g.submit_accept(ctx, l, a);
    let acc_b = g.submit_accept(ctx, l, b);
    // Both stay pending: other commands complete past them (out of order).
    let info = g.query_device();
    assert_eq!(info.max_sge, MAX_SGE);
    assert!(
        g.admin_wait(acc_a, Duration::from_millis(50)).is_none(),
        "ACCEPT completed with no peer"
    );

    g.destroy_qp(ctx, a).unwrap();
    let c = g.admin_wait_done(acc_a);
    assert_eq!(
        c.status, ADMIN_STATUS_CANCELLED,
        "ACCEPT whose QP was destroyed: {c:?}"
    );
    g.destroy_listener(ctx, l).unwrap();
    let c = g.admin_wait_done(acc_b);
    assert_eq!(
        c.status, ADMIN_STATUS_CANCELLED,
        "ACCEPT whose listener was destroyed: {c:?}"
    );
    // The QP of the cancelled accept is idle again and can be offered to a new listener.
    let l2 = g.listen(ctx, UNSPECIFIED, 8200, 4).unwrap();
    let acc = g.submit_accept(ctx, l2, b);
    g.destroy_listener(ctx, l2).unwrap();
    assert_eq!(g.admin_wait_done(acc).status, ADMIN_STATUS_CANCELLED);
}

#[test]
fn a_pending_connect_is_cancelled_when_its_qp_goes() {
    let mut g = FakeGuest::new();
    let ctx = g.create_ctx().unwrap();
    let cq = g.create_cq(ctx, 16).unwrap();
    let qp = g
        .create_qp_typed(ctx, cq.id, cq.id, 4, 4, QP_TYPE_TCP, TCP_MSG)
        .unwrap()
        .id;
    // A peer that never answers: no network backend, so the SYN goes nowhere.
    let conn = g.submit_connect(ctx, qp, ip("2001:db8::99"), 80);
    assert!(
        g.admin_wait(conn, Duration::from_millis(50)).is_none(),
        "CONNECT to a silent peer completed at once"
    );
    g.destroy_qp(ctx, qp).unwrap();
    let c = g.admin_wait_done(conn);
    assert_eq!(
        c.status, ADMIN_STATUS_CANCELLED,
        "CONNECT whose QP was destroyed: {c:?}"
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
