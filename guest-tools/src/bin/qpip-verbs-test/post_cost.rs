//! What posting costs the caller: heap allocations per work request (exact, counted by
//! this program's allocator) and time per post call (only the calls, not the device's
//! work; under TCG the absolute times are inflated, compare them run to run). Reported as
//! facts, not checked against a bound here; the VM test asserts the allocation counts.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use qpip::{Completion, Context, QpInit, QpKind, SendWr};

use crate::{e, ensure, lo, R, T};

/// The system allocator, counting allocations (and reallocations, which may move).
pub struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is passed on unchanged to the system allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.realloc(p, l, new) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(p, l) }
    }
}

fn allocs() -> u64 {
    ALLOCS.load(Ordering::Relaxed)
}

/// Totals over the measured rounds of one kind of post.
#[derive(Default)]
struct Cost {
    posts: u64,
    allocs: u64,
    time: Duration,
    kicks: u64,
    /// The batches in which no doorbell found the device asleep: a kick is a trapped
    /// register write (a VM exit and a round trip to the device process) that costs more
    /// than everything else a post does, so these show the library's own cost.
    quiet_posts: u64,
    quiet_time: Duration,
}

impl Cost {
    /// Runs `post` `n` times, adding the allocations, time and kicks of all but the first
    /// (which wakes the device if it slept, so the rest find it awake).
    fn measure(&mut self, ctx: &Context, n: u64, mut post: impl FnMut(u64) -> R) -> R {
        post(0)?;
        let n = n - 1;
        let k0 = ctx.kicks();
        let a0 = allocs();
        let t0 = Instant::now();
        for i in 1..=n {
            post(i)?;
        }
        let t = t0.elapsed();
        self.allocs += allocs() - a0;
        let kicks = ctx.kicks() - k0;
        self.time += t;
        self.posts += n;
        self.kicks += kicks;
        if kicks == 0 {
            self.quiet_time += t;
            self.quiet_posts += n;
        }
        Ok(())
    }

    fn report(&self, name: &str) {
        let per = |t: Duration, n: u64| t.as_nanos() / n.max(1) as u128;
        println!("@post.{name}_ns={}", per(self.time, self.posts));
        println!("@post.{name}_kicks={}", self.kicks);
        println!("@post.{name}_quiet_posts={}", self.quiet_posts);
        println!(
            "@post.{name}_quiet_ns={}",
            per(self.quiet_time, self.quiet_posts)
        );
        // Per 1000 posts, so a rare growth of a queue shows without rounding to 0.
        println!(
            "@post.{name}_allocs_per_1000={}",
            self.allocs * 1000 / self.posts.max(1)
        );
    }
}

/// Rounds of `DEPTH` receives, then `DEPTH` inline sends, `DEPTH` gather sends, each batch
/// timed while it is posted and its completions taken untimed; the first round warms up
/// (queues reach their size) and is not counted.
pub fn post_cost(ctx: &Context) -> R {
    const DEPTH: u64 = 128;
    const ROUNDS: u64 = 17;
    let scq = e(ctx.create_cq(256), "create CQ")?;
    let rcq = e(ctx.create_cq(512), "create CQ")?;
    let d = DEPTH as u32;
    let a = e(
        ctx.create_qp(&QpInit::new(QpKind::Udp, &scq).depth(d, d)),
        "create QP",
    )?;
    let b = e(
        ctx.create_qp(&QpInit::new(QpKind::Udp, &rcq).depth(d, 2 * d)),
        "create QP",
    )?;
    e(a.bind(lo(0)), "bind")?;
    let to = lo(e(b.bind(lo(0)), "bind")?.port());
    let rbuf = e(ctx.alloc(2 * DEPTH as usize * 64), "register")?;
    let sbuf = e(ctx.alloc(64), "register")?;
    let (mut recv, mut inline, mut gather) = (Cost::default(), Cost::default(), Cost::default());
    let mut out = vec![Completion::default(); 64];
    let mut drain = |cq: &qpip::Cq, n: u64, what: &str| -> R {
        let mut got = 0;
        while got < n {
            let k = e(cq.wait(&mut out, Some(T)), what)? as u64;
            ensure(k > 0, || format!("{got} of {n} completions of {what}"))?;
            ensure(out[..k as usize].iter().all(|c| c.is_ok()), || {
                format!("{what}: {:?}", &out[..k as usize])
            })?;
            got += k;
        }
        Ok(())
    };
    for round in 0..ROUNDS {
        let mut scratch = Cost::default();
        let counted = if round == 0 { &mut scratch } else { &mut recv };
        counted.measure(ctx, 2 * DEPTH, |i| {
            let at = i as usize * 64;
            e(b.post_recv(i, &[rbuf.sge(at, 64)]), "post_recv")
        })?;
        let counted = if round == 0 {
            &mut scratch
        } else {
            &mut inline
        };
        counted.measure(ctx, DEPTH, |i| {
            e(
                a.post_send(&SendWr::inline(i, b"sixteen bytes!!!").to(to)),
                "inline post_send",
            )
        })?;
        drain(&scq, DEPTH, "inline sends")?;
        let counted = if round == 0 {
            &mut scratch
        } else {
            &mut gather
        };
        counted.measure(ctx, DEPTH, |i| {
            e(
                a.post_send(&SendWr::new(i, &[sbuf.sge(0, 16)]).to(to)),
                "gather post_send",
            )
        })?;
        drain(&scq, DEPTH, "gather sends")?;
        drain(&rcq, 2 * DEPTH, "receives")?;
    }
    recv.report("recv");
    inline.report("send_inline");
    gather.report("send_gather");
    Ok(())
}
