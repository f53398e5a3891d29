//! How long the engine polls after its last work before it sleeps: a budget that adapts
//! to the traffic, in the manner of KVM's halt polling. Polling catches the next doorbell
//! or frame without a wake-up (no kick for the guest to send, no scheduler latency), but
//! it burns a CPU that, on a small host, a guest's vCPU may need.
//!
//! After every sleep the engine says how long it slept and whether work (a kick, a frame,
//! a control message) woke it. Work that came within the longest budget would have been
//! caught by polling that long: the budget grows. A sleep longer than the longest budget
//! (or one only a timer ended) shows polling would have been wasted: the budget shrinks,
//! down to not polling at all, so an engine whose traffic comes in gaps longer than the
//! budget sleeps at once instead of burning CPU beside the guests' vCPUs.

use std::time::Duration;

/// Smallest budget the engine grows to from 0 (below this, polling is not worth a pass).
pub const MIN_BUDGET: Duration = Duration::from_micros(10);

/// While polling idle, the engine looks at its link (a system call) only on every
/// `LINK_EVERY`-th pass; doorbells, the admin queue and timers are memory reads.
pub const LINK_EVERY: u32 = 8;

/// While polling idle, the engine yields its CPU every `YIELD_EVERY` passes, so a runnable
/// vCPU thread on the same CPU is not held off for the whole budget.
pub const YIELD_EVERY: u32 = 64;

/// How long the engine polls idle at its own priority (yielding) before it lowers itself
/// to `SCHED_IDLE` for the rest of its budget ([`crate::sched::IdlePolling`]), and all it
/// polls when it cannot lower itself. The budget's default before the engine could lower
/// itself, measured to bridge a ping-pong's gaps without slowing the guests: within it the
/// engine polls as it always did. Lowering sooner (after 50 µs) made a UDP stream lose
/// more: a lowered engine waits whenever both guests' vCPUs run, one spinning on its CQ,
/// and then sends in bursts (1 KiB datagrams: 37-74 % lost in 5 of 9 rounds, against
/// 11-23 % in 12 rounds polling as before).
pub const LOWER_AFTER: Duration = Duration::from_micros(500);

/// How long past [`LOWER_AFTER`] the engine goes on polling at its own priority while it
/// waits for a CPU to come free so that it may lower itself ([`crate::sched::IdlePolling`]),
/// when it found one runnable thread too many. Looking only once, at [`LOWER_AFTER`], it
/// found other threads runnable in about one idle spell in seven with two guests on a
/// 2-CPU host — a vCPU's timer work, QEMU's main loop, a kernel thread: bursts of tens of
/// µs — slept, and the guest's next message 1 ms later had to kick it. With every CPU
/// taken by other threads it does not wait (guests at work need those CPUs).
pub const LOWER_TRIES_FOR: Duration = Duration::from_micros(200);

/// Within [`LOWER_TRIES_FOR`], how often the engine looks whether a CPU came free (a read
/// of `/proc/loadavg`).
pub const LOWER_LOOK_EVERY: Duration = Duration::from_micros(25);

/// With `qpipd --idle-nap`: how long into an idle spell the engine first looks whether every
/// CPU is taken by other threads, to nap rather than poll while they are
/// ([`crate::sched::IdlePolling::nap`]); looking only after a few µs keeps the read of
/// `/proc/loadavg` off a stream's short gaps.
pub const FIRST_LOOK: Duration = Duration::from_micros(10);

/// With `qpipd --idle-nap`: how long the engine naps at a time while every CPU is taken by
/// other threads, up to [`LOWER_AFTER`] — a timed sleep that does not publish "sleeping",
/// so the guests do not kick, after which the engine looks at its work again. Polling
/// then, it is one more runnable thread beside vCPUs that hold every CPU: it shares one
/// with a vCPU in the scheduler's time slices, and a doorbell rung while the vCPU has the
/// CPU waits for the engine's next slice — an RDMA Write ping-pong between two guests
/// spinning on the bytes they wait for took 1.6-2.4 ms per round trip so on a 2-CPU host,
/// 70-86 µs napping. Not the default: with guests that sleep on their CQs it added 25-45
/// µs to a UDP or TCP round trip. The looks read the host-wide count of runnable threads,
/// which cannot tell guests that spin from QEMU at work for a message: in a UDP ping-pong
/// 61-77 % of the looks in the first 85 µs of a spell found every CPU taken — the vCPUs,
/// and QEMU's main loops delivering interrupts and vfio-user messages. Counting the
/// guests' own vCPU threads would tell them apart.
pub const NAP: Duration = Duration::from_micros(25);

/// How many looks in a row, across idle spells, must find every CPU taken before the
/// engine naps ([`crate::sched::IdlePolling::nap`]).
pub const NAP_AFTER_LOOKS: u32 = 3;

/// The adaptive polling budget.
#[derive(Debug, Clone)]
pub struct SpinBudget {
    max: Duration,
    now: Duration,
}

impl SpinBudget {
    /// A budget of at most `max` (`--idle-poll-us`), starting there.
    pub fn new(max: Duration) -> SpinBudget {
        SpinBudget { max, now: max }
    }

    /// How long to poll after the last work.
    pub fn budget(&self) -> Duration {
        self.now
    }

    /// The engine slept `slept` and was woken by work (`by_work`) or only by a timer.
    pub fn after_sleep(&mut self, slept: Duration, by_work: bool) {
        if by_work && slept <= self.max {
            self.now = (self.now * 2).max(MIN_BUDGET).min(self.max);
        } else if slept > self.max {
            self.now /= 2;
            if self.now < MIN_BUDGET {
                self.now = Duration::ZERO;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: Duration = Duration::from_micros(200);

    #[test]
    fn long_gaps_shrink_the_budget_to_nothing() {
        let mut b = SpinBudget::new(MAX);
        let mut seen = vec![b.budget()];
        for _ in 0..6 {
            b.after_sleep(Duration::from_millis(1), true);
            seen.push(b.budget());
        }
        assert_eq!(seen[1], Duration::from_micros(100));
        assert_eq!(seen[2], Duration::from_micros(50));
        assert_eq!(*seen.last().unwrap(), Duration::ZERO, "{seen:?}");
    }

    #[test]
    fn work_that_polling_would_have_caught_grows_it_back_to_the_maximum() {
        let mut b = SpinBudget::new(MAX);
        for _ in 0..10 {
            b.after_sleep(Duration::from_millis(5), true);
        }
        assert_eq!(b.budget(), Duration::ZERO);
        b.after_sleep(Duration::from_micros(30), true);
        assert_eq!(
            b.budget(),
            MIN_BUDGET,
            "from nothing to the smallest budget"
        );
        for _ in 0..10 {
            b.after_sleep(Duration::from_micros(30), true);
        }
        assert_eq!(b.budget(), MAX, "never beyond --idle-poll-us");
    }

    #[test]
    fn a_timer_does_not_grow_it_and_a_short_timer_sleep_does_not_shrink_it() {
        let mut b = SpinBudget::new(MAX);
        b.after_sleep(Duration::from_millis(1), true);
        let before = b.budget();
        b.after_sleep(Duration::from_micros(20), false);
        assert_eq!(b.budget(), before);
        b.after_sleep(Duration::from_millis(3), false);
        assert_eq!(b.budget(), before / 2);
    }

    #[test]
    fn a_zero_maximum_never_polls() {
        let mut b = SpinBudget::new(Duration::ZERO);
        b.after_sleep(Duration::ZERO, true);
        assert_eq!(b.budget(), Duration::ZERO);
    }
}
