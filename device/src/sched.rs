//! How a function's control thread is scheduled against the vCPU that writes to it.
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
}
