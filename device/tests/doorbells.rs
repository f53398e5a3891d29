//! Doorbells and the engine's sleep: an idle engine really sleeps, every doorbell rung around
//! its going to sleep is still noticed (the eventidx protocol of `abi::doorbell` loses no
//! wake-up), and a reset in the middle of traffic leaves nothing behind.

use qpip_testkit as support;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use support::*;

/// Waits (up to `timeout`) for the engine to publish that it sleeps on `ctx`'s page.
fn wait_asleep(g: &FakeGuest, ctx: u32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while !g.engine_sleeping(ctx) {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    true
}

fn spin(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

#[test]
fn an_idle_engine_sleeps_on_every_active_page_and_a_kick_wakes_it() {
    let mut g = FakeGuest::new();
    let c1 = g.create_ctx().unwrap();
    let mut ep = g.udp_endpoint_in(c1, UNSPECIFIED, 0, 8, 16, 64);
    let c2 = g.create_ctx().unwrap();
    for ctx in [c1, c2] {
        assert!(
            wait_asleep(&g, ctx, Duration::from_secs(1)),
            "engine_sleeping never set on page {ctx} within 1 s of idleness"
        );
    }
    // An unused page is left alone.
    assert_eq!(
        g.db(DOORBELL_PAGES - 1, DB_ENGINE_SLEEPING)
            .load(Ordering::SeqCst),
        0
    );

    // A doorbell rung while it sleeps: the producer sees the flag and kicks.
    let kicks = g.kicks;
    g.post_recv(&mut ep.qp, &[recv_wqe(1, &[ep.buf.sge(0, 64, ep.mr.lkey)])]);
    assert!(
        g.kicks > kicks,
        "posting to a sleeping engine did not kick (flag read as clear)"
    );
    g.post_send(&mut ep.qp, &[inline_wqe(2, LOOPBACK, ep.port, b"wake up")]);
    assert_cqe(
        &g.wait_cqe(&mut ep.scq),
        CQE_STATUS_SUCCESS,
        0,
        "send after a kick",
    );
    assert_eq!(g.wait_cqe(&mut ep.rcq).byte_len, 7);
    // And it goes back to sleep.
    assert!(
        wait_asleep(&g, c1, Duration::from_secs(1)),
        "engine did not sleep again"
    );
    let s = g.query_stats().counters;
    assert!(
        s[STAT_SLEEPS as usize] >= 2,
        "STAT_SLEEPS {}",
        s[STAT_SLEEPS as usize]
    );
    assert!(
        s[STAT_KICKS as usize] >= 1,
        "STAT_KICKS {}",
        s[STAT_KICKS as usize]
    );
    assert!(
        s[STAT_DOORBELLS as usize] >= 1,
        "STAT_DOORBELLS {}",
        s[STAT_DOORBELLS as usize]
    );
}

#[test]
fn no_doorbell_is_lost_around_the_engine_going_to_sleep() {
    const N: u64 = 20_000;
    const SQ: u32 = 64;
    let mut g = FakeGuest::new();
    let ctx = g.create_ctx().unwrap();
    // A CQ much smaller than the SQ: the QP stalls on it often, so the consumer's cq_head
    // doorbell must wake the engine too.
    let mut cq = g.create_cq(ctx, 8).unwrap();
    let mut qp = g.create_qp(ctx, cq.id, cq.id, SQ, 2).unwrap();
    g.bind(ctx, qp.id, UNSPECIFIED, 0).unwrap();
    let mut rng = Rng::new(0x0d00_be11);
    let (mut posted, mut done) = (0u64, 0u64);
    let (mut saw_asleep, mut quiet_waits) = (0u64, 0u64);

    let reap = |g: &mut FakeGuest, cq: &mut Cq, done: &mut u64, upto: u64, posted: u64| {
        while *done < upto {
            let Some(c) = g.try_wait_cqe(cq, TIMEOUT) else {
                panic!(
                    "lost wake-up: WR {} of {posted} posted never completed within {TIMEOUT:?} \
                     (engine_sleeping {}, change_count {}, kicks sent {})",
                    *done,
                    g.engine_sleeping(cq.ctx),
                    g.db(cq.ctx, DB_CHANGE_COUNT).load(Ordering::SeqCst),
                    g.kicks
                );
            };
            assert_cqe(&c, CQE_STATUS_SUCCESS, 0, "send");
            assert_eq!(c.wr_id, *done, "completions in order, one per WR");
            *done += 1;
        }
    };

    let started = Instant::now();
    while posted < N {
        // Random spacing: back to back, a little (around when the engine decides to sleep),
        // or until it has certainly gone to sleep.
        match rng.below(100) {
            0..=69 => {}
            70..=94 => spin(Duration::from_micros(rng.below(300))),
            95..=98 => spin(Duration::from_micros(rng.below(2000))),
            _ => {
                assert!(
                    wait_asleep(&g, ctx, Duration::from_secs(1)),
                    "engine never slept"
                );
            }
        }
        if g.engine_sleeping(ctx) {
            saw_asleep += 1;
        }
        if posted - done == SQ as u64 {
            reap(&mut g, &mut cq, &mut done, posted - SQ as u64 + 1, posted);
        }
        // To a port nobody bound: each send completes at once, and nothing else rings.
        g.post_send(
            &mut qp,
            &[inline_wqe(posted, LOOPBACK, 9, &posted.to_le_bytes())],
        );
        posted += 1;
        // Now and then go quiet until everything completed: a doorbell the engine missed
        // shows up here, as nothing else rings to cover for it.
        if rng.below(4) == 0 {
            quiet_waits += 1;
            reap(&mut g, &mut cq, &mut done, posted, posted);
        }
    }
    reap(&mut g, &mut cq, &mut done, posted, posted);
    assert!(g.poll_cq(&mut cq).is_none(), "more CQEs than WRs");
    let s = g.query_stats().counters;
    eprintln!(
        "{N} doorbells in {:?}: engine seen asleep before {saw_asleep} of them, {} kicks, \
         {quiet_waits} quiet waits, device: {} sleeps, {} kicks, {} CQ-full stalls",
        started.elapsed(),
        g.kicks,
        s[STAT_SLEEPS as usize],
        s[STAT_KICKS as usize],
        s[STAT_CQ_FULL as usize]
    );
    assert!(
        saw_asleep >= 100,
        "the engine was rarely asleep ({saw_asleep}): the race was not exercised"
    );
    assert!(
        g.kicks >= 100,
        "too few kicks ({}) to exercise the wake-up path",
        g.kicks
    );
    assert_eq!(s[STAT_SEND_WQES as usize], N);
}

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

fn build_and_start_traffic(g: &mut FakeGuest, port: u16, listen_port: u16) -> Before {
    g.set_mac([0x02, 0x99, 0x88, 0x77, 0x66, 0x55]).unwrap();
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
        *snap = cq
            .pages
            .iter()
            .flat_map(|&p| g.mem_read(p, PAGE as usize))
            .collect();
    }
    std::thread::sleep(Duration::from_millis(50));
    for (cq, snap) in &before.cq_rings {
        let now: Vec<u8> = cq
            .pages
            .iter()
            .flat_map(|&p| g.mem_read(p, PAGE as usize))
            .collect();
        assert!(
            now == *snap,
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
    assert_admin_err(
        g.destroy_qp(ctx, before.qp),
        ADMIN_STATUS_BAD_HANDLE,
        "a QP from before the reset",
    );
    assert_admin_err(
        g.destroy_cq(ctx, before.cq),
        ADMIN_STATUS_BAD_HANDLE,
        "a CQ from before the reset",
    );
    assert_admin_err(
        g.dereg_mr(ctx, before.lkey),
        ADMIN_STATUS_BAD_HANDLE,
        "an MR from before the reset",
    );
    assert_admin_err(
        g.destroy_listener(ctx, before.listener),
        ADMIN_STATUS_BAD_HANDLE,
        "a listener from before",
    );
    let info = g.query_device();
    assert_eq!(
        info.mac, original_mac,
        "the MAC set by the driver is dropped by reset"
    );
    let s = g.query_stats().counters;
    assert_eq!(s[STAT_UDP_TX as usize], 0, "counters start again at reset");

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
