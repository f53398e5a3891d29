//! What an engine thread does after a pass that found no work: poll on, yield its CPU,
//! nap, or sleep until a kick, a frame or a timer wakes it ([`IdlePolicy`]).
//!
//! Polling catches the next doorbell or frame without a wake-up (no kick for the guest to
//! send, no scheduler latency), but on a small host it burns a CPU that a guest's vCPU may
//! need. So the policy
//! - polls for a budget that adapts to the traffic, in the manner of KVM's halt polling
//!   ([`SpinBudget`]): work that came within the longest budget grows it, sleeps longer than
//!   that shrink it, down to not polling at all;
//! - polls the first [`LOWER_AFTER`] at its own priority, yielding every [`YIELD_EVERY`]
//!   passes, and then, if a CPU is free of other work, lowers itself to `SCHED_IDLE` for the
//!   rest of the budget, where any runnable thread preempts it. With every CPU taken by other
//!   threads (guests at work) it stops polling at [`LOWER_AFTER`] instead, as polling then
//!   takes CPU from the vCPUs that make the traffic;
//! - with `--idle-nap`, naps ([`NAP`]) rather than polls while every CPU stays taken;
//! - goes back to its own priority as soon as it finds work, and before it sleeps (a woken
//!   engine must not wait behind every runnable thread).
//!
//! The host is seen through [`Host`] (runnable threads, CPUs, the thread's policy), so the
//! decisions are specified by the unit tests below; `crate::sched` has the real one.

use std::time::Duration;

/// The engine thread's idle settings (`qpipd --idle-poll-us`, `--idle-poll-sched`,
/// `--idle-nap`), part of [`super::EngineConfig`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdleConfig {
    /// The longest the engine polls after its last work; the budget adapts below it. Long
    /// enough to bridge messages a millisecond apart without a kick.
    pub max_poll: Duration,
    /// How it polls past [`LOWER_AFTER`].
    pub poll_sched: IdlePollSched,
    /// Nap while every CPU is taken by other threads.
    pub nap: bool,
}

impl Default for IdleConfig {
    fn default() -> Self {
        IdleConfig {
            max_poll: Duration::from_micros(2000),
            poll_sched: IdlePollSched::Idle,
            nap: false,
        }
    }
}

/// How the engine thread is scheduled while it polls idle (qpipd `--idle-poll-sched`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdlePollSched {
    /// `SCHED_IDLE` past [`LOWER_AFTER`], if a CPU is free: the polling takes only a CPU
    /// that nothing else wants (the default).
    Idle,
    /// The thread's own policy for the whole budget: an engine with a CPU of its own.
    Normal,
}

/// Smallest budget the engine grows to from 0 (below this, polling is not worth a pass).
pub const MIN_BUDGET: Duration = Duration::from_micros(10);

/// While polling idle, the engine looks at its link (a system call) only on every
/// `LINK_EVERY`-th pass; doorbells, the admin queue and timers are memory reads.
pub const LINK_EVERY: u32 = 8;

/// While polling at its own priority, the engine yields its CPU every `YIELD_EVERY`
/// passes, so a runnable vCPU thread on the same CPU is not held off for the whole budget.
pub const YIELD_EVERY: u32 = 64;

/// How long the engine polls idle at its own priority before it may lower itself: long
/// enough to bridge a stream's and a ping-pong's gaps as a thread the guests' vCPUs do not
/// preempt (a lowered engine waits whenever the vCPUs hold every CPU, and then sends in
/// bursts), and all it polls when it may not lower itself.
pub const LOWER_AFTER: Duration = Duration::from_micros(500);

/// How long past [`LOWER_AFTER`] the engine goes on polling at its own priority while it
/// waits for a CPU to come free, when it found one runnable thread too many: that is often
/// a burst of tens of µs (a vCPU's timer work, QEMU's main loop, a kernel thread).
pub const LOWER_TRIES_FOR: Duration = Duration::from_micros(200);

/// How often, within an idle spell, the engine looks at the host's runnable threads (a
/// read of `/proc/loadavg`).
pub const LOWER_LOOK_EVERY: Duration = Duration::from_micros(25);

/// With naps on: how long into an idle spell the engine first looks whether every CPU is
/// taken (a stream's short gaps pay no look).
pub const FIRST_LOOK: Duration = Duration::from_micros(10);

/// With naps on: how long the engine naps at a time while every CPU is taken by other
/// threads, up to [`LOWER_AFTER`]. A timed sleep that does not publish "sleeping", so the
/// guests do not kick. Polling then, the engine would share a CPU with a vCPU in the
/// scheduler's time slices, and a doorbell rung while the vCPU has it would wait for the
/// engine's next slice. Not the default: a nap delays the answer to a guest that sleeps on
/// its CQ, and the host-wide count cannot tell guests that spin from QEMU at work.
pub const NAP: Duration = Duration::from_micros(25);

/// How many looks in a row, across idle spells, must find every CPU taken before the
/// engine naps: the threads the engine's own last work wakes (a vCPU taking its interrupt)
/// fill the CPUs only for a moment.
pub const NAP_AFTER_LOOKS: u32 = 3;

/// The host as the idle policy sees it.
pub trait Host {
    /// Runnable threads host-wide, the calling one included (None: unknown).
    fn runnable(&mut self) -> Option<usize>;
    /// CPUs the threads share.
    fn cpus(&self) -> usize;
    /// Whether the calling thread may lower itself to `SCHED_IDLE` and come back.
    fn may_lower(&self) -> bool;
    /// Lowers the calling thread to `SCHED_IDLE` (true) or puts it back (false).
    fn set_lowered(&mut self, low: bool) -> std::io::Result<()>;
}

/// What the engine thread does next, idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Another pass at once.
    Poll,
    /// Another pass after yielding the CPU.
    Yield,
    /// Another pass after a timed sleep (not published: the guests do not kick).
    Nap(Duration),
    /// Publish "sleeping" and sleep until woken; then report with
    /// [`IdlePolicy::after_sleep`].
    Sleep,
}

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

/// What the host's runnable threads say for a thread that would poll lowered, counting one
/// more than are runnable now: the vCPU the engine's last work is likely waking (the
/// interrupt of a completion it wrote). Counting only the threads running now, an engine
/// lowered itself beside a guest spinning on its CQ, the other guest's vCPU woke, and the
/// lowered engine waited while both ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cpus {
    /// One would stay free.
    Spare,
    /// Exactly one thread too many (often a burst).
    OneShort,
    /// Every CPU taken by other threads.
    Taken,
}

/// One engine thread's idle policy.
pub struct IdlePolicy<H: Host> {
    host: H,
    budget: SpinBudget,
    /// The thread may lower itself (setting and host allow it).
    may_lower: bool,
    /// Polls its whole budget at its own priority (`--idle-poll-sched normal`).
    whole_budget: bool,
    nap_on: bool,
    /// It is lowered now.
    low: bool,
    /// When in this idle spell the policy last looked for a free CPU to lower itself.
    looked: Option<Duration>,
    /// This spell found every CPU taken by other threads: it will not lower itself.
    gave_up: bool,
    /// This spell's last look for a nap.
    nap_looked: Option<Duration>,
    /// How many nap looks in a row, across spells, found every CPU taken.
    taken_looks: u32,
}

impl<H: Host> IdlePolicy<H> {
    pub fn new(config: IdleConfig, host: H) -> IdlePolicy<H> {
        let whole_budget = config.poll_sched == IdlePollSched::Normal;
        let may_lower = !whole_budget && host.may_lower();
        if !whole_budget && !may_lower {
            log::debug!("engine polls idle at its own priority (SCHED_IDLE not reversible here)");
        }
        IdlePolicy {
            host,
            budget: SpinBudget::new(config.max_poll),
            may_lower,
            whole_budget,
            nap_on: config.nap,
            low: false,
            looked: None,
            gave_up: false,
            nap_looked: None,
            taken_looks: 0,
        }
    }

    /// A pass found work: the idle spell ends (the thread back at its own priority).
    pub fn on_work(&mut self) {
        self.end_spell();
    }

    /// What to do after the `passes`-th pass without work, `idle_for` after the last work.
    pub fn next(&mut self, idle_for: Duration, passes: u32) -> Step {
        let budget = self.budget.budget();
        if idle_for >= LOWER_AFTER && idle_for < budget {
            self.lower(idle_for);
        }
        if idle_for >= self.limit(budget) {
            self.end_spell();
            return Step::Sleep;
        }
        if self.nap(idle_for) {
            return Step::Nap(NAP);
        }
        // Lowered, any runnable thread preempts the polling: no yield needed.
        if !self.low && passes.is_multiple_of(YIELD_EVERY) {
            Step::Yield
        } else {
            Step::Poll
        }
    }

    /// The thread slept `slept` and was woken by work (`by_work`) or only by a timer.
    pub fn after_sleep(&mut self, slept: Duration, by_work: bool) {
        self.budget.after_sleep(slept, by_work);
    }

    /// The longest to poll idle now: all the budget lowered or told to poll at its own
    /// priority; while it waits for a CPU to come free so that it may lower itself, no
    /// more than [`LOWER_AFTER`] + [`LOWER_TRIES_FOR`]; else no more than [`LOWER_AFTER`].
    fn limit(&self, budget: Duration) -> Duration {
        if self.low || self.whole_budget {
            budget
        } else if self.may_lower && !self.gave_up {
            budget.min(LOWER_AFTER + LOWER_TRIES_FOR)
        } else {
            budget.min(LOWER_AFTER)
        }
    }

    fn cpus_now(&mut self) -> Cpus {
        let Some(runnable) = self.host.runnable() else {
            return Cpus::Spare;
        };
        let others = runnable.saturating_sub(1);
        match (others + 1).cmp(&self.host.cpus()) {
            std::cmp::Ordering::Less => Cpus::Spare,
            std::cmp::Ordering::Equal => Cpus::OneShort,
            std::cmp::Ordering::Greater => Cpus::Taken,
        }
    }

    /// Lowers the thread for the rest of the spell if a CPU is spare; one thread short, it
    /// looks again every [`LOWER_LOOK_EVERY`]; every CPU taken, it gives up for the spell.
    fn lower(&mut self, idle_for: Duration) {
        if !self.may_lower || self.low || self.gave_up {
            return;
        }
        if self.looked.is_some_and(|t| idle_for < t + LOWER_LOOK_EVERY) {
            return;
        }
        self.looked = Some(idle_for);
        match self.cpus_now() {
            Cpus::Spare => match self.host.set_lowered(true) {
                Ok(()) => self.low = true,
                Err(e) => {
                    log::debug!("engine stays at its own priority: {e}");
                    self.may_lower = false;
                }
            },
            Cpus::OneShort => {}
            Cpus::Taken => self.gave_up = true,
        }
    }

    /// With naps on, from [`FIRST_LOOK`] into a spell until [`LOWER_AFTER`]: whether the
    /// last [`NAP_AFTER_LOOKS`] looks or more, across spells, all found every CPU taken.
    /// It looks every [`LOWER_LOOK_EVERY`] until then, and before every nap after.
    fn nap(&mut self, idle_for: Duration) -> bool {
        if !self.nap_on
            || self.low
            || self.whole_budget
            || idle_for < FIRST_LOOK
            || idle_for >= LOWER_AFTER
        {
            return false;
        }
        let napping = self.taken_looks >= NAP_AFTER_LOOKS;
        if !napping
            && self
                .nap_looked
                .is_some_and(|at| idle_for < at + LOWER_LOOK_EVERY)
        {
            return false;
        }
        self.nap_looked = Some(idle_for);
        if self.cpus_now() == Cpus::Taken {
            self.taken_looks = self.taken_looks.saturating_add(1);
        } else {
            self.taken_looks = 0;
        }
        self.taken_looks >= NAP_AFTER_LOOKS
    }

    fn end_spell(&mut self) {
        self.looked = None;
        self.gave_up = false;
        self.nap_looked = None;
        if self.low {
            self.low = false;
            if let Err(e) = self.host.set_lowered(false) {
                // Not expected (checked at start); polling lowered is no longer safe.
                log::warn!("engine thread could not leave SCHED_IDLE: {e}");
                self.may_lower = false;
            }
        }
    }
}

impl<H: Host> Drop for IdlePolicy<H> {
    fn drop(&mut self) {
        self.end_spell();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host with `cpus` CPUs and `runnable` threads (this one included).
    struct FakeHost {
        cpus: usize,
        runnable: Option<usize>,
        may_lower: bool,
        lowered: bool,
        looks: u32,
    }

    impl Host for FakeHost {
        fn runnable(&mut self) -> Option<usize> {
            self.looks += 1;
            self.runnable
        }
        fn cpus(&self) -> usize {
            self.cpus
        }
        fn may_lower(&self) -> bool {
            self.may_lower
        }
        fn set_lowered(&mut self, low: bool) -> std::io::Result<()> {
            self.lowered = low;
            Ok(())
        }
    }

    fn host(runnable: usize) -> FakeHost {
        FakeHost {
            cpus: 2,
            runnable: Some(runnable),
            may_lower: true,
            lowered: false,
            looks: 0,
        }
    }

    fn config(max_poll_us: u64) -> IdleConfig {
        IdleConfig {
            max_poll: Duration::from_micros(max_poll_us),
            ..Default::default()
        }
    }

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    const LOWER: u64 = LOWER_AFTER.as_micros() as u64;
    const EVERY: u64 = LOWER_LOOK_EVERY.as_micros() as u64;

    #[test]
    fn it_polls_yielding_now_and_then_and_sleeps_once_the_budget_is_spent() {
        let mut p = IdlePolicy::new(config(100), host(1));
        assert_eq!(p.next(us(1), 1), Step::Poll);
        assert_eq!(p.next(us(2), YIELD_EVERY), Step::Yield);
        assert_eq!(p.next(us(99), 3), Step::Poll);
        assert_eq!(p.next(us(100), 4), Step::Sleep);
        assert_eq!(
            p.host.looks, 0,
            "a budget under LOWER_AFTER never looks at the host"
        );
    }

    #[test]
    fn with_a_cpu_spare_it_lowers_itself_for_the_rest_of_the_budget_and_comes_back_on_work() {
        let mut p = IdlePolicy::new(config(2000), host(1));
        assert_eq!(p.next(us(LOWER - 1), 1), Step::Poll);
        assert!(!p.low);
        assert_eq!(p.next(us(LOWER), 2), Step::Poll);
        assert!(p.low && p.host.lowered);
        assert_eq!(
            p.next(us(1999), YIELD_EVERY),
            Step::Poll,
            "lowered: no yield"
        );
        p.on_work();
        assert!(!p.low && !p.host.lowered, "work: back at its own priority");
        p.next(us(LOWER), 1);
        assert_eq!(p.next(us(2000), 2), Step::Sleep);
        assert!(!p.host.lowered, "it sleeps at its own priority");
    }

    #[test]
    fn one_thread_short_it_looks_again_and_polls_on_a_little_while() {
        let mut p = IdlePolicy::new(config(2000), host(2));
        p.next(us(LOWER), 1);
        assert!(!p.low, "this thread and one more runnable on 2 CPUs");
        p.host.runnable = Some(1);
        p.next(us(LOWER + EVERY - 1), 2);
        assert!(!p.low, "too soon to look again");
        p.next(us(LOWER + EVERY), 3);
        assert!(p.low, "a CPU came free");

        let mut p = IdlePolicy::new(config(2000), host(2));
        let tries = (LOWER_AFTER + LOWER_TRIES_FOR).as_micros() as u64;
        assert_ne!(p.next(us(tries - 1), 1), Step::Sleep);
        assert_eq!(
            p.next(us(tries), 2),
            Step::Sleep,
            "no CPU came free in time"
        );
    }

    #[test]
    fn with_every_cpu_taken_it_gives_up_for_the_spell_and_sleeps_at_lower_after() {
        let mut p = IdlePolicy::new(config(2000), host(3));
        assert_eq!(p.next(us(LOWER - 1), 1), Step::Poll);
        assert_eq!(
            p.next(us(LOWER), 2),
            Step::Sleep,
            "polling would take a vCPU's CPU"
        );
        assert!(!p.low);
        p.after_sleep(us(100), true);
        p.host.runnable = Some(1);
        assert_eq!(p.next(us(LOWER), 1), Step::Poll);
        assert!(p.low, "the next spell looks afresh");
    }

    #[test]
    fn where_it_may_not_come_back_it_never_lowers_itself_and_polls_only_lower_after() {
        let mut h = host(1);
        h.may_lower = false;
        let mut p = IdlePolicy::new(config(2000), h);
        assert_eq!(p.next(us(LOWER - 1), 1), Step::Poll);
        assert_eq!(p.next(us(LOWER), 2), Step::Sleep);
        assert!(!p.host.lowered);
    }

    #[test]
    fn told_to_poll_at_its_own_priority_it_polls_the_whole_budget() {
        let cfg = IdleConfig {
            poll_sched: IdlePollSched::Normal,
            ..config(2000)
        };
        let mut p = IdlePolicy::new(cfg, host(3));
        assert_eq!(p.next(us(1999), 1), Step::Poll);
        assert!(!p.low && p.host.looks == 0);
        assert_eq!(p.next(us(2000), 2), Step::Sleep);
    }

    #[test]
    fn the_budget_shrinks_after_long_sleeps_and_grows_back_when_polling_would_have_caught_work() {
        let mut p = IdlePolicy::new(config(200), host(1));
        for _ in 0..6 {
            p.after_sleep(Duration::from_millis(1), true);
        }
        assert_eq!(p.budget.budget(), Duration::ZERO);
        assert_eq!(
            p.next(Duration::ZERO, 1),
            Step::Sleep,
            "no budget: sleep at once"
        );
        p.after_sleep(us(30), true);
        assert_eq!(p.budget.budget(), MIN_BUDGET);
        for _ in 0..10 {
            p.after_sleep(us(30), true);
        }
        assert_eq!(p.budget.budget(), us(200), "never beyond the maximum");
        p.after_sleep(us(20), false);
        assert_eq!(
            p.budget.budget(),
            us(200),
            "a short timer sleep changes nothing"
        );
        p.after_sleep(Duration::from_millis(3), false);
        assert_eq!(p.budget.budget(), us(100), "a long one halves it");
    }

    #[test]
    fn with_naps_on_it_naps_while_every_cpu_stays_taken() {
        let cfg = IdleConfig {
            nap: true,
            ..config(2000)
        };
        let mut p = IdlePolicy::new(cfg, host(3));
        let first = FIRST_LOOK.as_micros() as u64;
        assert_eq!(p.next(us(first - 1), 1), Step::Poll, "too early to look");
        let mut steps = Vec::new();
        for i in 0..NAP_AFTER_LOOKS as u64 {
            steps.push(p.next(us(first + i * EVERY), 2));
        }
        assert_eq!(steps.last(), Some(&Step::Nap(NAP)), "{steps:?}");
        assert!(steps[..steps.len() - 1].iter().all(|s| *s == Step::Poll));
        p.on_work();
        assert_eq!(
            p.next(us(first), 1),
            Step::Nap(NAP),
            "the count spans spells"
        );
        assert_ne!(
            p.next(us(LOWER), 2),
            Step::Nap(NAP),
            "from LOWER_AFTER on: no naps"
        );
        p.on_work();
        p.host.runnable = Some(1);
        assert_eq!(
            p.next(us(first), 1),
            Step::Poll,
            "a free CPU starts the count again"
        );
        p.host.runnable = Some(3);
        assert_eq!(p.next(us(first + EVERY), 2), Step::Poll);

        let mut off = IdlePolicy::new(config(2000), host(3));
        for i in 0..10 {
            assert_ne!(
                off.next(us(first + i * EVERY), 2),
                Step::Nap(NAP),
                "naps off"
            );
        }
    }

    #[test]
    fn an_unknown_host_counts_as_spare() {
        let mut h = host(0);
        h.runnable = None;
        let mut p = IdlePolicy::new(config(2000), h);
        p.next(us(LOWER), 1);
        assert!(p.low);
    }
}
