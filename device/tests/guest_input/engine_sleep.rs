//! Doorbells and the engine's sleep: an idle engine really sleeps, and every doorbell rung
//! around its going to sleep is still noticed (the eventidx protocol of `abi::doorbell` loses
//! no wake-up).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::support::*;

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

    // A doorbell rung while it sleeps: the producer sees the flag and kicks. A timer may
    // wake the engine between the look and the post (then the post rightly finds it awake
    // and does not kick): look again right before each try, a few tries.
    let mut kicked = false;
    for wr_id in 1..=5 {
        assert!(
            wait_asleep(&g, c1, Duration::from_secs(1)),
            "engine did not sleep"
        );
        let kicks = g.kicks;
        g.post_recv(
            &mut ep.qp,
            &[recv_wqe(wr_id, &[ep.buf.sge(0, 64, ep.mr.lkey)])],
        );
        if g.kicks > kicks {
            kicked = true;
            break;
        }
    }
    assert!(
        kicked,
        "posting to a sleeping engine did not kick in 5 tries (flag read as clear)"
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
