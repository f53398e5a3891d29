//! How qpipd's threads are scheduled against the vCPUs they serve: a function's control
//! thread (below), and the engine thread while it polls with nothing to do
//! ([`IdlePolling`]).
//!
//! A guest's doorbell write that kicks a sleeping engine reaches qpipd as a vfio-user
//! message that QEMU's vCPU thread sends without waiting for an answer (a posted write).
//! Sending it wakes the function's control thread (the one in [`crate::vfio`] that reads
//! QEMU's messages). A host scheduler that puts the woken thread on the waker's CPU — as
//! one that packs work onto few CPUs does, and as Linux may for a synchronous wake-up —
//! lets it preempt the vCPU thread there, so the vCPU waits while the control thread reads
//! the message and wakes the engine, though the write asked for no answer. A control
//! thread that runs `SCHED_BATCH` does not preempt on wake-up: the vCPU goes on at once,
//! and the control thread runs when the vCPU blocks, on another CPU, or at the
//! scheduler's next turn.
//!
//! Which is better depends on what the guest does after kicking, so it is a choice
//! (`qpipd --control-sched`), measured on a 2-CPU host with one TCG guest, messages of 64
//! bytes after 1 ms of quiet (the engine asleep), three runs of 400-500 each:
//!
//! - the guest's time in the calls (`qpip-overhead`, kicked messages): UDP 44-54 µs with
//!   the control thread preempting (`normal`), 19-27 µs with it `SCHED_BATCH`; TCP 58-70
//!   against 24-29. The engine thread's policy changes nothing (46-49 µs with it batch).
//! - a guest that busy-polls for the answer right after kicking (UDP to itself, post to
//!   receive completion): p50 73-89 µs and p90 128-175 µs with `normal`, p50 308-564 µs
//!   and p90 2.6-3.0 ms with `batch` — its doorbell waits for the scheduler to take the
//!   CPU from the spinning vCPU.
//!
//! A busy-polling guest is the common case for latency, so `normal` is the default;
//! `batch` suits guests that sleep on their completion queues and count their CPU. The
//! policy applies while the thread serves (it is put back afterwards), and never replaces
//! a real-time policy a user gave qpipd (`chrt -f`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use crate::engine::idle::{
    FIRST_LOOK, LOWER_AFTER, LOWER_LOOK_EVERY, LOWER_TRIES_FOR, NAP_AFTER_LOOKS,
};

use log::{debug, warn};

/// The policy of the control threads (qpipd `--control-sched`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ControlSched {
    /// `SCHED_BATCH`: woken, it does not preempt the thread that woke it.
    Batch,
    /// Whatever policy the process has (normal time-sharing, as started; the default).
    Inherit,
}

static BATCH: AtomicBool = AtomicBool::new(false);

/// Sets the policy of control threads that start serving from now on.
pub fn set_control_sched(policy: ControlSched) {
    BATCH.store(policy == ControlSched::Batch, Ordering::Relaxed);
}

/// The policy control threads take.
pub fn control_sched() -> ControlSched {
    if BATCH.load(Ordering::Relaxed) {
        ControlSched::Batch
    } else {
        ControlSched::Inherit
    }
}

/// The calling thread's policy (`SCHED_OTHER`, `SCHED_BATCH`, ...), or None if it cannot be
/// read.
pub fn thread_policy() -> Option<i32> {
    // SAFETY: no pointers; 0 names the calling thread.
    let p = unsafe { libc::sched_getscheduler(0) };
    (p >= 0).then_some(p)
}

fn set_thread_policy(policy: i32) -> std::io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid sched_param for the call; 0 names the calling thread.
    if unsafe { libc::sched_setscheduler(0, policy, &param) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// How the engine thread is scheduled while it polls idle (qpipd `--idle-poll-sched`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdlePollSched {
    /// `SCHED_IDLE` while polling with nothing to do: the polling takes only a CPU that
    /// nothing else wants (the default where the thread may switch back).
    Idle,
    /// The thread's own policy throughout (it yields now and then, see `engine::idle`).
    Normal,
}

static IDLE_POLL_NORMAL: AtomicBool = AtomicBool::new(false);

/// Sets how engine threads that start from now on poll idle.
pub fn set_idle_poll_sched(policy: IdlePollSched) {
    IDLE_POLL_NORMAL.store(policy == IdlePollSched::Normal, Ordering::Relaxed);
}

static IDLE_NAP: AtomicBool = AtomicBool::new(false);

/// Sets whether engine threads that start from now on nap while every CPU is taken
/// (`qpipd --idle-nap`, [`IdlePolling::nap`]).
pub fn set_idle_nap(on: bool) {
    IDLE_NAP.store(on, Ordering::Relaxed);
}

/// How engine threads poll idle.
pub fn idle_poll_sched() -> IdlePollSched {
    if IDLE_POLL_NORMAL.load(Ordering::Relaxed) {
        IdlePollSched::Normal
    } else {
        IdlePollSched::Idle
    }
}

/// Whether a thread of this process may go from `SCHED_IDLE` back to `SCHED_OTHER`: Linux
/// lets it only with the right to raise its priority (`CAP_SYS_NICE`, or an `RLIMIT_NICE`
/// that allows nice 0), and an engine that could not come back would be left starving
/// behind every runnable thread. Tried once, on a thread of its own that ends either way.
fn can_leave_sched_idle() -> bool {
    static CAN: OnceLock<bool> = OnceLock::new();
    *CAN.get_or_init(|| {
        std::thread::spawn(|| {
            thread_policy() == Some(libc::SCHED_OTHER)
                && set_thread_policy(libc::SCHED_IDLE).is_ok()
                && set_thread_policy(libc::SCHED_OTHER).is_ok()
        })
        .join()
        .unwrap_or(false)
    })
}

/// The engine thread's policy while it polls with nothing to do.
///
/// An engine that polls after its work catches the next doorbell without the guest having
/// to kick it — a kick costs the guest 45-110 µs where a doorbell the engine finds costs
/// nothing — but on a small host its polling takes a CPU from the guests' vCPUs, so its
/// budget had to stay short ([`crate::engine::idle`]). Polling `SCHED_IDLE` takes only a
/// CPU nothing else wants: any vCPU that becomes runnable preempts it at once. The engine
/// lowers itself only once it has polled idle as long as it always did at its own
/// priority ([`LOWER_AFTER`]: a stream's gaps are shorter) and goes back to its own policy as soon
/// as it finds work, and before it sleeps (a woken engine must not wait behind the vCPUs).
/// A lowered engine does not run while every CPU is busy, and a doorbell rung then waits
/// for a CPU to come free — as it does when the guests' own vCPUs have the CPUs.
pub struct IdlePolling {
    /// The thread may lower itself (setting, policy and privilege allow it).
    allowed: bool,
    /// It is lowered now.
    low: bool,
    /// When in this idle spell [`IdlePolling::lower`] last looked for a free CPU (the
    /// spell's idle time then), if it has.
    looked: Option<Duration>,
    /// This idle spell found every CPU taken by other threads: it will not lower itself.
    gave_up: bool,
    /// Naps are on (`qpipd --idle-nap`).
    nap_on: bool,
    /// This idle spell's last look of [`IdlePolling::nap`] (the spell's idle time then).
    nap_looked: Option<Duration>,
    /// How many of [`IdlePolling::nap`]'s looks in a row, across idle spells, found every
    /// CPU taken.
    taken_looks: u32,
    /// Told to poll the whole budget at its own priority (`--idle-poll-sched normal`).
    whole_budget: bool,
    /// `/proc/loadavg`, kept open: how many threads are runnable host-wide.
    loadavg: Option<std::fs::File>,
    /// The CPUs this process may run on.
    cpus: usize,
}

impl IdlePolling {
    /// For the calling thread, under the process's setting ([`idle_poll_sched`]): lowers
    /// only a thread of the ordinary policy, and only if it could come back.
    pub fn new() -> IdlePolling {
        let whole_budget = idle_poll_sched() == IdlePollSched::Normal;
        let allowed =
            !whole_budget && thread_policy() == Some(libc::SCHED_OTHER) && can_leave_sched_idle();
        if !whole_budget && !allowed {
            debug!("engine polls idle at its own priority (SCHED_IDLE not reversible here)");
        }
        let nap_on = IDLE_NAP.load(Ordering::Relaxed);
        // Naps end when due, not up to the default 50 µs later.
        // SAFETY: PR_SET_TIMERSLACK takes a value and changes only this thread's slack.
        if nap_on && unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong) } != 0 {
            debug!("engine keeps the default timer slack");
        }
        IdlePolling {
            allowed,
            low: false,
            looked: None,
            gave_up: false,
            nap_on,
            nap_looked: None,
            taken_looks: 0,
            whole_budget,
            loadavg: std::fs::File::open("/proc/loadavg").ok(),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }

    /// Whether a CPU would stay free for this thread even if one more thread became
    /// runnable: `/proc/loadavg`'s count of runnable threads (this one included) against
    /// the CPUs (unknown: yes). The one more is the vCPU the engine's last work is likely
    /// waking (the interrupt of a completion it wrote): counting only the threads running
    /// now, the engine lowered itself beside a guest spinning on its CQ, the other guest's
    /// vCPU woke, and the lowered engine waited while both ran — a UDP stream then lost
    /// 35-53 % of its datagrams in 3 of 6 rounds.
    fn cpus_now(&self) -> Cpus {
        let Some(f) = &self.loadavg else {
            return Cpus::Spare;
        };
        let mut buf = [0u8; 128];
        let n = std::os::unix::fs::FileExt::read_at(f, &mut buf, 0).unwrap_or(0);
        match runnable_in_loadavg(&buf[..n]) {
            None => Cpus::Spare,
            Some(r) => {
                let others = r.saturating_sub(1);
                match (others + 1).cmp(&self.cpus) {
                    std::cmp::Ordering::Less => Cpus::Spare,
                    std::cmp::Ordering::Equal => Cpus::OneShort,
                    std::cmp::Ordering::Greater => Cpus::Taken,
                }
            }
        }
    }

    /// Whether the thread polls lowered now.
    pub fn is_low(&self) -> bool {
        self.low
    }

    /// The longest the engine should poll idle now, given its budget: all of it when it
    /// polls lowered or was told to poll at its own priority (`--idle-poll-sched normal`,
    /// an engine with a CPU of its own); while it waits for a CPU to come free so that it
    /// may lower itself, no more than [`LOWER_AFTER`] + [`LOWER_TRIES_FOR`]; if it may not
    /// lower itself, no more than [`LOWER_AFTER`]: polling at its own priority takes CPU
    /// from the guests' vCPUs.
    pub fn limit(&self, budget: Duration) -> Duration {
        if self.low || self.whole_budget {
            budget
        } else if self.allowed && !self.gave_up {
            budget.min(LOWER_AFTER + LOWER_TRIES_FOR)
        } else {
            budget.min(LOWER_AFTER)
        }
    }

    /// Whether the engine should nap ([`crate::engine::idle::NAP`]) rather than poll now
    /// (with `qpipd --idle-nap` only): from [`FIRST_LOOK`] into an idle spell until
    /// [`LOWER_AFTER`], while the last [`NAP_AFTER_LOOKS`] looks or more, in this spell and
    /// the ones before it, all found every CPU taken by other threads (counting one more,
    /// as [`IdlePolling::lower`] does). It looks every [`LOWER_LOOK_EVERY`] (or a nap
    /// apart). Guests that hold every
    /// CPU for good (spinning) make the looks agree spell after spell; the threads the
    /// engine's last work wakes (the vCPU its interrupt wakes, QEMU's thread that delivers
    /// it) fill the CPUs only for a moment, and a look that finds a CPU starts the count
    /// again — a nap then would only delay the next doorbell. Not for an engine lowered or
    /// told to poll the whole budget (`--idle-poll-sched normal`: a CPU of its own, which
    /// the host-wide count cannot tell).
    pub fn nap(&mut self, idle_for: Duration) -> bool {
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
        if matches!(self.cpus_now(), Cpus::Taken) {
            self.taken_looks = self.taken_looks.saturating_add(1);
        } else {
            self.taken_looks = 0;
        }
        self.taken_looks >= NAP_AFTER_LOOKS
    }

    /// Lowers the thread to `SCHED_IDLE` for the rest of this idle spell (until
    /// [`IdlePolling::restore`]), if allowed and some CPU has nothing else to run; the
    /// engine calls it on every idle pass from [`LOWER_AFTER`] on, with the spell's idle
    /// time, and it looks at most every [`LOWER_LOOK_EVERY`]. With no CPU to spare a
    /// lowered engine would not run until one came free, and the doorbells the guests ring
    /// meanwhile would wait for it. One runnable thread too many is often a burst (a
    /// vCPU's timer work, QEMU's main loop): the engine polls on at its own priority,
    /// yielding, and looks again, no longer than [`IdlePolling::limit`]. Every CPU taken by
    /// other threads is guests at work (a stream: one sending, one spinning on its CQ): it
    /// gives up for the spell and stops polling at [`LOWER_AFTER`], as its polling then
    /// takes CPU from the vCPUs that make the traffic.
    pub fn lower(&mut self, idle_for: Duration) {
        if !self.allowed || self.low || self.gave_up {
            return;
        }
        if self.looked.is_some_and(|t| idle_for < t + LOWER_LOOK_EVERY) {
            return;
        }
        self.looked = Some(idle_for);
        match self.cpus_now() {
            Cpus::Spare => self.set_low(),
            Cpus::OneShort => {}
            Cpus::Taken => self.gave_up = true,
        }
    }

    /// Lowers the thread to `SCHED_IDLE` now (if allowed).
    fn set_low(&mut self) {
        if self.allowed && !self.low {
            match set_thread_policy(libc::SCHED_IDLE) {
                Ok(()) => self.low = true,
                Err(e) => {
                    debug!("engine stays at its own priority: {e}");
                    self.allowed = false;
                }
            }
        }
    }

    /// Ends the idle spell: puts the thread back to `SCHED_OTHER` if lowered.
    pub fn restore(&mut self) {
        self.looked = None;
        self.gave_up = false;
        self.nap_looked = None;
        if self.low {
            self.low = false;
            if let Err(e) = set_thread_policy(libc::SCHED_OTHER) {
                // Not expected (checked at start); polling lowered is no longer safe.
                warn!("engine thread could not leave SCHED_IDLE: {e}");
                self.allowed = false;
            }
        }
    }
}

/// What `/proc/loadavg` says of the CPUs for a thread that would poll lowered, counting
/// one more thread than are runnable now ([`IdlePolling::cpus_now`]).
enum Cpus {
    /// One would stay free.
    Spare,
    /// Exactly one thread too many (often a burst).
    OneShort,
    /// Every CPU taken by other threads.
    Taken,
}

/// The runnable threads of a `/proc/loadavg` line (`0.52 0.58 0.59 3/467 12345`: the
/// fourth field's first number).
fn runnable_in_loadavg(line: &[u8]) -> Option<usize> {
    let line = std::str::from_utf8(line).ok()?;
    let field = line.split_ascii_whitespace().nth(3)?;
    field.split('/').next()?.parse().ok()
}

impl Default for IdlePolling {
    fn default() -> Self {
        IdlePolling::new()
    }
}

impl Drop for IdlePolling {
    fn drop(&mut self) {
        self.restore();
    }
}

/// The control thread's policy while it lives: taken by the thread that serves a client,
/// dropped by it when it stops serving.
pub struct ControlThread {
    /// The thread was switched from `SCHED_OTHER` to `SCHED_BATCH`, and goes back on drop.
    batch: bool,
}

impl ControlThread {
    /// Gives the calling thread the control threads' policy ([`control_sched`]) if it runs
    /// the ordinary time-sharing policy; anything else (batch already, real-time) is left.
    pub fn enter() -> ControlThread {
        let mut batch = false;
        if control_sched() == ControlSched::Batch && thread_policy() == Some(libc::SCHED_OTHER) {
            match set_thread_policy(libc::SCHED_BATCH) {
                Ok(()) => batch = true,
                Err(e) => debug!("control thread stays SCHED_OTHER: {e}"),
            }
        }
        ControlThread { batch }
    }
}

impl Drop for ControlThread {
    fn drop(&mut self) {
        if self.batch {
            if let Err(e) = set_thread_policy(libc::SCHED_OTHER) {
                debug!("control thread policy not restored: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // One test (the setting is the process's): each case on a fresh thread, which starts
    // with the ordinary policy.
    #[test]
    fn a_control_thread_runs_batch_while_it_serves_only_when_told_to() {
        let policies = || {
            std::thread::spawn(|| {
                let before = thread_policy();
                let during = {
                    let _c = ControlThread::enter();
                    thread_policy()
                };
                (before, during, thread_policy())
            })
            .join()
            .unwrap()
        };
        let other = Some(libc::SCHED_OTHER);
        assert_eq!(control_sched(), ControlSched::Inherit, "the default");
        assert_eq!(policies(), (other, other, other));

        set_control_sched(ControlSched::Batch);
        let seen = policies();
        set_control_sched(ControlSched::Inherit);
        assert_eq!(
            seen,
            (other, Some(libc::SCHED_BATCH), other),
            "--control-sched batch"
        );
    }

    // The idle-poll setting is the process's too: one test, each case on a fresh thread.
    #[test]
    fn an_idle_polling_engine_lowers_itself_only_when_it_may_and_always_comes_back() {
        let run = || {
            std::thread::spawn(|| {
                let mut p = IdlePolling::new();
                // As lower() does when a CPU is free (the test's host may be busy).
                p.set_low();
                let lowered = (p.is_low(), thread_policy());
                p.restore();
                let back = (p.is_low(), thread_policy());
                p.set_low();
                drop(p);
                (lowered, back, thread_policy())
            })
            .join()
            .unwrap()
        };
        let other = Some(libc::SCHED_OTHER);
        assert_eq!(idle_poll_sched(), IdlePollSched::Idle, "the default");
        let (lowered, back, dropped) = run();
        if can_leave_sched_idle() {
            assert_eq!(lowered, (true, Some(libc::SCHED_IDLE)));
        } else {
            assert_eq!(
                lowered,
                (false, other),
                "not lowered without the right to come back"
            );
        }
        assert_eq!(
            (back, dropped),
            ((false, other), other),
            "restored, and on drop"
        );

        // Polling at its own priority: capped, a little later while it may still lower
        // itself; lowered: the budget.
        let two = Duration::from_millis(2);
        let short = Duration::from_micros(100);
        let mut p = IdlePolling {
            allowed: false,
            low: false,
            looked: None,
            gave_up: false,
            nap_on: false,
            nap_looked: None,
            taken_looks: 0,
            whole_budget: false,
            loadavg: None,
            cpus: 1,
        };
        assert_eq!((p.limit(two), p.limit(short)), (LOWER_AFTER, short));
        p.allowed = true;
        assert_eq!(p.limit(two), LOWER_AFTER + LOWER_TRIES_FOR);
        p.low = true;
        assert_eq!(p.limit(two), two);
        p.low = false;

        set_idle_poll_sched(IdlePollSched::Normal);
        let seen = run();
        // The setting is taken when the engine thread starts.
        let normal_limit = IdlePolling::new().limit(two);
        set_idle_poll_sched(IdlePollSched::Idle);
        assert_eq!(
            seen,
            ((false, other), (false, other), other),
            "--idle-poll-sched normal"
        );
        assert_eq!(
            normal_limit, two,
            "--idle-poll-sched normal polls the whole budget"
        );
    }

    /// One thread too many at the first look: looked for again, every `LOWER_LOOK_EVERY`
    /// of the spell's idle time, and the engine lowers itself as soon as a CPU is free;
    /// restoring starts a new spell. Every CPU taken by others: it gives up for the spell.
    #[test]
    fn an_engine_one_thread_short_looks_again_and_one_with_every_cpu_taken_gives_up() {
        if !can_leave_sched_idle() {
            eprintln!("skipped: this process may not leave SCHED_IDLE");
            return;
        }
        let dir = std::env::temp_dir().join(format!("qpip-loadavg-{}", std::process::id()));
        let busy = |n: usize| std::fs::write(&dir, format!("1.00 1.00 1.00 {n}/300 4242\n"));
        busy(2).unwrap();
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut p = IdlePolling {
                    allowed: true,
                    low: false,
                    looked: None,
                    gave_up: false,
                    nap_on: false,
                    nap_looked: None,
                    taken_looks: 0,
                    whole_budget: false,
                    loadavg: Some(std::fs::File::open(&dir).unwrap()),
                    cpus: 2,
                };
                let at = |us| LOWER_AFTER + Duration::from_micros(us);
                p.lower(at(0));
                assert!(!p.is_low(), "this thread and one more runnable on 2 CPUs");
                busy(1).unwrap();
                p.lower(at(LOWER_LOOK_EVERY.as_micros() as u64 - 1));
                assert!(!p.is_low(), "too soon to look again");
                p.lower(at(LOWER_LOOK_EVERY.as_micros() as u64));
                assert!(p.is_low(), "a CPU came free");
                assert_eq!(thread_policy(), Some(libc::SCHED_IDLE));
                p.restore();
                busy(3).unwrap();
                p.lower(at(0));
                assert!(!p.is_low(), "a new spell looks afresh");
                let two = Duration::from_millis(2);
                assert_eq!(
                    p.limit(two),
                    LOWER_AFTER,
                    "every CPU taken by others: no more polling at its own priority"
                );
                busy(1).unwrap();
                p.lower(at(100));
                assert!(!p.is_low(), "given up for this spell");
                p.restore();
                p.lower(at(0));
                assert!(p.is_low(), "the next spell looks again");
            })
            .join()
            .unwrap();
        });
        let _ = std::fs::remove_file(&dir);
    }

    /// `--idle-nap`: the engine naps once `NAP_AFTER_LOOKS` looks in a row, across idle
    /// spells, found every CPU taken; it looks every `LOWER_LOOK_EVERY` until then and
    /// before every nap after; a look that finds a CPU starts the count again; never
    /// before `FIRST_LOOK` or from `LOWER_AFTER` on, never lowered, never when off.
    #[test]
    fn an_engine_naps_while_every_cpu_stays_taken_and_only_with_naps_on() {
        let file = std::env::temp_dir().join(format!("qpip-loadavg-nap-{}", std::process::id()));
        let busy = |n: usize| std::fs::write(&file, format!("1.00 1.00 1.00 {n}/300 4242\n"));
        busy(3).unwrap();
        let mut p = IdlePolling {
            allowed: false,
            low: false,
            looked: None,
            gave_up: false,
            nap_on: true,
            nap_looked: None,
            taken_looks: 0,
            whole_budget: false,
            loadavg: Some(std::fs::File::open(&file).unwrap()),
            cpus: 2,
        };
        let us = |n: u64| Duration::from_micros(n);
        let every = LOWER_LOOK_EVERY.as_micros() as u64;
        let first = FIRST_LOOK.as_micros() as u64;
        assert!(!p.nap(us(first - 1)), "too early in the spell to look");
        let mut naps = Vec::new();
        for i in 0..NAP_AFTER_LOOKS as u64 {
            let napped = p.nap(us(first + i * every));
            naps.push(napped);
            if !napped {
                assert!(
                    !p.nap(us(first + i * every + 1)),
                    "between looks: no look, no nap"
                );
            }
        }
        assert_eq!(
            naps.last(),
            Some(&true),
            "{NAP_AFTER_LOOKS} taken looks: {naps:?}"
        );
        assert!(naps[..naps.len() - 1].iter().all(|n| !n), "{naps:?}");
        // Napping: a look before each nap, however soon.
        assert!(p.nap(us(first + NAP_AFTER_LOOKS as u64 * every)));
        // A new spell goes on napping at its first look: the count spans spells.
        p.restore();
        assert!(p.nap(us(first)), "the count spans idle spells");
        assert!(
            !p.nap(LOWER_AFTER),
            "from LOWER_AFTER on, the lowering logic decides"
        );
        // A CPU free: the count starts again.
        busy(1).unwrap();
        assert!(!p.nap(us(first + 2)));
        busy(3).unwrap();
        assert!(!p.nap(us(first + 2 + every)), "counting again from one");
        // Lowered, or naps off: never.
        p.taken_looks = NAP_AFTER_LOOKS;
        p.low = true;
        assert!(!p.nap(us(first + 2 + 2 * every)));
        p.low = false;
        p.nap_on = false;
        assert!(!p.nap(us(first + 2 + 3 * every)));
        let _ = std::fs::remove_file(&file);
    }

    #[test]
    fn the_runnable_count_is_read_from_loadavg() {
        assert_eq!(
            runnable_in_loadavg(b"0.52 0.58 0.59 3/467 12345\n"),
            Some(3)
        );
        assert_eq!(runnable_in_loadavg(b"0.00 0.00 0.00 12/9 1"), Some(12));
        for bad in [&b""[..], b"0.1 0.2 0.3", b"0.1 0.2 0.3 x/4 5", b"\xff\xfe"] {
            assert_eq!(runnable_in_loadavg(bad), None);
        }
        let now = std::fs::read("/proc/loadavg").unwrap();
        assert!(runnable_in_loadavg(&now).is_some_and(|r| r >= 1), "{now:?}");
    }
}
