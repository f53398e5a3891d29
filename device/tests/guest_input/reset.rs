//! A reset in the middle of traffic, from the VMM or the driver, leaves nothing behind: no
//! write to the old rings or doorbell pages, no handle, port, address or MAC from before.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::support::*;

/// Everything the driver built, and traffic in flight, then a reset.
struct Before {
    ctxs: Vec<u32>,
    qp: u32,
    cq: u32,
    lkey: u32,
    listener: u32,
    listen_port: u16,
    port: u16,
    cq_rings: Vec<(Cq, Vec<u8>)>,
}

/// A route and a static neighbour the driver adds before the reset.
const ROUTE: &str = "2001:db8:1::";
const NEIGHBOR: &str = "fe80::77";

fn build_and_start_traffic(g: &mut FakeGuest, port: u16, listen_port: u16) -> Before {
    g.add_route(ip(ROUTE), 48, ip("fe80::1"), 0).unwrap();
    g.add_neigh(ip(NEIGHBOR), [0x02, 0, 0, 0, 0x77, 0x77])
        .unwrap();
    g.set_mac([0x02, 0x99, 0x88, 0x77, 0x66, 0x55]).unwrap();
    assert_admin_err(
        g.add_route(ip(ROUTE), 48, ip("fe80::1"), 0),
        ADMIN_STATUS_ADDR_IN_USE,
        "the route outlives SET_MAC",
    );
    g.del_neigh(ip(NEIGHBOR))
        .expect("the static neighbour outlives SET_MAC");
    g.add_neigh(ip(NEIGHBOR), [0x02, 0, 0, 0, 0x77, 0x77])
        .unwrap();
    g.add_addr(ip("2001:db8::9"), 64).unwrap();
    let c1 = g.create_ctx().unwrap();
    let c2 = g.create_ctx().unwrap();
    let mut a = g.udp_endpoint_in(c1, UNSPECIFIED, 0, 64, 128, 64 * 9000);
    let mut b = g.udp_endpoint_in(c2, UNSPECIFIED, port, 64, 128, 64 * 9000);
    let listener = g.listen(c2, UNSPECIFIED, listen_port, 4).unwrap();
    let recvs: Vec<WqeBytes> = (0..64u64)
        .map(|i| recv_wqe(i, &[b.buf.sge(i * 9000, 9000, b.mr.lkey)]))
        .collect();
    g.post_recv(&mut b.qp, &recvs);
    let sends: Vec<WqeBytes> = (0..64u64)
        .map(|i| send_wqe(i, LOOPBACK, b.port, &[a.buf.sge(i * 9000, 9000, a.mr.lkey)]))
        .collect();
    g.post_send(&mut a.qp, &sends);
    Before {
        ctxs: vec![c1, c2],
        qp: b.qp.id,
        cq: b.rcq.id,
        lkey: b.mr.lkey,
        listener,
        listen_port,
        port: b.port,
        cq_rings: vec![(a.scq.clone(), Vec::new()), (b.rcq.clone(), Vec::new())],
    }
}

fn check_clean_after_reset(
    g: &mut FakeGuest,
    mut before: Before,
    original_mac: [u8; 6],
    resets: u32,
) {
    assert_eq!(g.reg_read(REG_RESET_COUNT), resets);
    assert_eq!(
        g.reg_read(REG_STATUS),
        0,
        "not ready, admin queue disabled after reset"
    );
    // Nothing is written to the old rings once the reset is done.
    for (cq, snap) in &mut before.cq_rings {
        *snap = g.cq_ring_bytes(cq);
    }
    std::thread::sleep(Duration::from_millis(50));
    for (cq, snap) in &before.cq_rings {
        assert!(
            g.cq_ring_bytes(cq) == *snap,
            "CQ {} ring written after the reset returned",
            cq.id
        );
    }
    // The doorbell pages are guest RAM that the device forgets with their contexts: from
    // the reset on it writes them no more (no sleeping flag, no zeroing), whatever they hold.
    let db_snaps: Vec<(u64, Vec<u8>)> = before
        .ctxs
        .iter()
        .map(|&c| (g.db_page(c), g.mem_read(g.db_page(c), PAGE as usize)))
        .collect();
    // The admin queue must be set up again before anything works.
    g.enable();
    g.setup_admin(ADMIN_DEPTH);
    for &ctx in &before.ctxs {
        assert_admin_err(
            g.destroy_ctx(ctx),
            ADMIN_STATUS_BAD_HANDLE,
            "a context from before the reset",
        );
    }
    let dirty = g.alloc_pages(1);
    g.mem_fill(dirty, PAGE as usize, 0xff);
    let ctx = g.create_ctx_at(dirty).unwrap();
    // A new context starts from a zeroed page, even one the guest hands over dirty.
    for off in (0..DOORBELL_PAGE_SIZE).step_by(4) {
        if off != DB_ENGINE_SLEEPING {
            assert_eq!(
                g.db(ctx, off).load(Ordering::SeqCst),
                0,
                "new page +{off:#x}"
            );
        }
    }
    for (gone, what) in [
        (g.destroy_qp(ctx, before.qp), "a QP from before the reset"),
        (g.destroy_cq(ctx, before.cq), "a CQ from before the reset"),
        (g.dereg_mr(ctx, before.lkey), "an MR from before the reset"),
        (
            g.destroy_listener(ctx, before.listener),
            "a listener from before the reset",
        ),
    ] {
        assert_admin_err(gone, ADMIN_STATUS_BAD_HANDLE, what);
    }
    let info = g.query_device();
    assert_eq!(
        info.mac, original_mac,
        "the MAC set by the driver is dropped by reset"
    );
    let s = g.query_stats().counters;
    assert_eq!(s[STAT_UDP_TX as usize], 0, "counters start again at reset");
    g.add_route(ip(ROUTE), 48, ip("fe80::1"), 0)
        .expect("the route added by the driver is dropped by reset");
    g.del_route(ip(ROUTE), 48, 0).unwrap();
    assert_admin_err(
        g.del_neigh(ip(NEIGHBOR)),
        ADMIN_STATUS_BAD_HANDLE,
        "the static neighbour added by the driver is dropped by reset",
    );

    // From scratch: the old ports are free, the added address is gone, traffic flows.
    let mut a = g.udp_endpoint_in(ctx, UNSPECIFIED, 0, 16, 32, 2048);
    let mut b = g.udp_endpoint_in(ctx, UNSPECIFIED, before.port, 16, 32, 16 * 128);
    assert_eq!(b.port, before.port);
    g.listen(ctx, UNSPECIFIED, before.listen_port, 4)
        .expect("the old listening port is free");
    g.post_send(&mut a.qp, &[inline_wqe(0, ip("2001:db8::9"), b.port, b"x")]);
    let c = g.wait_cqe(&mut a.scq);
    assert_cqe(
        &c,
        CQE_STATUS_BAD_DEST,
        CQE_DETAIL_NO_ROUTE,
        "send to an address added before the reset",
    );
    for round in 0..10u64 {
        let r: Vec<WqeBytes> = (0..16u64)
            .map(|i| recv_wqe(i, &[b.buf.sge(i * 128, 128, b.mr.lkey)]))
            .collect();
        g.post_recv(&mut b.qp, &r);
        let s: Vec<WqeBytes> = (0..16u64)
            .map(|i| inline_wqe(i, LOOPBACK, b.port, &(round * 16 + i).to_le_bytes()))
            .collect();
        g.post_send(&mut a.qp, &s);
        for i in 0..16u64 {
            assert_cqe(
                &g.wait_cqe(&mut a.scq),
                CQE_STATUS_SUCCESS,
                0,
                "send after reset",
            );
            let rc = g.wait_cqe(&mut b.rcq);
            assert_cqe(&rc, CQE_STATUS_SUCCESS, 0, "receive after reset");
            assert_eq!(
                g.buf_read(&b.buf, i * 128, 8),
                (round * 16 + i).to_le_bytes()
            );
        }
    }
    for (page, snap) in &db_snaps {
        assert!(
            g.mem_read(*page, PAGE as usize) == *snap,
            "the doorbell page at {page:#x} (of a context from before the reset) was written"
        );
    }
}

#[test]
fn a_reset_in_the_middle_of_traffic_leaves_nothing_behind() {
    let mut g = FakeGuest::new();
    let mac = g.mac();
    // Twice: a function reset from the VMM, then the driver's CONTROL_RESET.
    let before = build_and_start_traffic(&mut g, 7777, 8888);
    g.reset();
    check_clean_after_reset(&mut g, before, mac, 1);

    let before = build_and_start_traffic(&mut g, 7778, 8889);
    g.reg_write(REG_CONTROL, CONTROL_RESET);
    g.forget_admin();
    check_clean_after_reset(&mut g, before, mac, 2);
}
