//! The scheduling system calls qpipd's threads make: a function's control thread takes the
//! policy `--control-sched` asks for (below), and an engine thread's idle policy
//! ([`crate::engine::idle`]) sees the host and lowers itself through [`SystemHost`].
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
//! (`qpipd --control-sched`). With `batch` a guest that kicks and goes on spends far less
//! time in the kick; a guest that busy-polls for the answer right after kicking waits
//! instead, as its doorbell's message waits for the scheduler to take the CPU from the
//! spinning vCPU.
//!
//! A busy-polling guest is the common case for latency, so `normal` is the default;
//! `batch` suits guests that sleep on their completion queues and count their CPU. The
//! policy applies while the thread serves (it is put back afterwards), and never replaces
//! a real-time policy a user gave qpipd (`chrt -f`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use crate::engine::idle::{Host, IdleConfig};

use log::debug;

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

/// The host as an engine thread's idle policy sees it: the runnable threads from
/// `/proc/loadavg`, the CPUs this process may use, and `SCHED_IDLE` for the calling thread.
///
/// Polling `SCHED_IDLE` takes only a CPU nothing else wants: any vCPU that becomes runnable
/// preempts it at once. A thread may lower itself only if it runs the ordinary policy and
/// may come back ([`can_leave_sched_idle`]): left lowered, it would starve behind every
/// runnable thread.
pub struct SystemHost {
    /// `/proc/loadavg`, kept open.
    loadavg: Option<std::fs::File>,
    cpus: usize,
    may_lower: bool,
}

impl SystemHost {
    /// The host for the calling thread (the engine thread) under `config`.
    pub fn new(config: &IdleConfig) -> SystemHost {
        if config.nap {
            // Naps end when due, not up to the default 50 µs later.
            // SAFETY: PR_SET_TIMERSLACK takes a value and changes only this thread's slack.
            if unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong) } != 0 {
                debug!("engine keeps the default timer slack");
            }
        }
        SystemHost {
            loadavg: std::fs::File::open("/proc/loadavg").ok(),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            may_lower: thread_policy() == Some(libc::SCHED_OTHER) && can_leave_sched_idle(),
        }
    }
}

impl Host for SystemHost {
    fn runnable(&mut self) -> Option<usize> {
        let f = self.loadavg.as_ref()?;
        let mut buf = [0u8; 128];
        let n = std::os::unix::fs::FileExt::read_at(f, &mut buf, 0).unwrap_or(0);
        runnable_in_loadavg(&buf[..n])
    }

    fn cpus(&self) -> usize {
        self.cpus
    }

    fn may_lower(&self) -> bool {
        self.may_lower
    }

    fn set_lowered(&mut self, low: bool) -> std::io::Result<()> {
        set_thread_policy(if low {
            libc::SCHED_IDLE
        } else {
            libc::SCHED_OTHER
        })
    }
}

/// The runnable threads of a `/proc/loadavg` line (`0.52 0.58 0.59 3/467 12345`: the
/// fourth field's first number).
fn runnable_in_loadavg(line: &[u8]) -> Option<usize> {
    let line = std::str::from_utf8(line).ok()?;
    let field = line.split_ascii_whitespace().nth(3)?;
    field.split('/').next()?.parse().ok()
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

    /// The real host lowers the calling thread to `SCHED_IDLE` and back, where it may
    /// come back (as root can), and says so.
    #[test]
    fn the_system_host_lowers_the_calling_thread_and_puts_it_back() {
        let (may, lowered, back) = std::thread::spawn(|| {
            let mut h = SystemHost::new(&IdleConfig::default());
            if !h.may_lower() {
                return (false, None, thread_policy());
            }
            h.set_lowered(true).unwrap();
            let lowered = thread_policy();
            h.set_lowered(false).unwrap();
            (true, lowered, thread_policy())
        })
        .join()
        .unwrap();
        assert_eq!(may, can_leave_sched_idle());
        if may {
            assert_eq!(lowered, Some(libc::SCHED_IDLE));
        }
        assert_eq!(back, Some(libc::SCHED_OTHER));
        let mut h = SystemHost::new(&IdleConfig::default());
        assert!(h.runnable().is_some_and(|r| r >= 1) && h.cpus() >= 1);
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
