//! `Cq`: a completion queue. Polling reads completions without a system call (device: the
//! mapped ring; soft: memory the provider's thread fills); waiting blocks on the CQ's
//! eventfd, which `poll`/`epoll` can watch too.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::context::CtxInner;
use crate::device;
use crate::error::Result;
use crate::soft;
use crate::sys;
use crate::types::Completion;

/// A completion queue: every work request of the QPs that report to it completes here
/// with one [`Completion`], in the order the requests were posted on their queue.
///
/// Size it for every request that can be outstanding on the queues that share it: when it
/// is full the device stops completing to it (nothing is lost; the QPs stall) until
/// completions are polled.
pub struct Cq {
    pub(crate) inner: Arc<CqInner>,
}

pub(crate) struct CqInner {
    pub(crate) ctx: Arc<CtxInner>,
    pub(crate) imp: CqImpl,
    /// Signalled once per arming when a completion is there (see [`Cq::arm`]).
    pub(crate) efd: OwnedFd,
    pub(crate) depth: u32,
    /// Threads in [`Cq::wait`]. One signal wakes them all, but the first to clear it may
    /// leave the others asleep on a descriptor no longer readable, with the arming their
    /// wake-up needed spent: whoever clears a signal while others wait arms again for them.
    pub(crate) blocked: AtomicU32,
    /// How long [`Cq::wait`] polls before it arms and sleeps, in microseconds.
    pub(crate) busy_poll_us: AtomicU32,
}

/// The environment variable that sets the busy-poll time of new CQs, in microseconds
/// (like Onload's `EF_POLL_USEC` or Linux's `net.core.busy_read`); [`Cq::set_busy_poll`]
/// sets it per CQ. Default [`DEFAULT_BUSY_POLL_US`].
pub const BUSY_POLL_ENV: &str = "QPIP_BUSY_POLL_US";

/// The busy-poll time of a new CQ without [`BUSY_POLL_ENV`]: none. Measured on TCG guests
/// (docs/qpipd.md, "Tuning for the host"): a wait that spins catches a reply only when the
/// round trip is shorter than the spin, and otherwise only burns the CPU the guest's other
/// work needs.
pub const DEFAULT_BUSY_POLL_US: u32 = 0;

/// The busy-poll time new CQs start with: [`BUSY_POLL_ENV`] if it holds a number, else
/// [`DEFAULT_BUSY_POLL_US`].
pub(crate) fn default_busy_poll_us() -> u32 {
    std::env::var(BUSY_POLL_ENV)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(DEFAULT_BUSY_POLL_US)
}

impl CqInner {
    /// Clears the descriptor after a wake-up and, if it held a signal and `others` blocking
    /// waiters may still sleep on it, arms again so the next completion (or one already
    /// there) wakes them.
    pub(crate) fn took_wakeup(&self, cq: &Cq, others: u32) -> Result<()> {
        if sys::eventfd_drain(self.efd.as_raw_fd()) > 0 && others > 0 {
            cq.arm()?;
        }
        Ok(())
    }
}

pub(crate) enum CqImpl {
    Device(device::Cq),
    Soft(soft::Cq),
}

impl Cq {
    /// The CQ's number in its context.
    pub fn id(&self) -> u32 {
        match &self.inner.imp {
            CqImpl::Device(c) => c.handle,
            CqImpl::Soft(c) => c.id,
        }
    }

    /// Entries in the queue.
    pub fn depth(&self) -> u32 {
        self.inner.depth
    }

    /// Moves up to `out.len()` completions into `out`; returns how many. Never blocks and
    /// makes no system call on the device except, when it took completions, a doorbell
    /// that may kick a sleeping device.
    pub fn poll(&self, out: &mut [Completion]) -> usize {
        match &self.inner.imp {
            CqImpl::Device(c) => c.poll(self.inner.ctx.dev(), out),
            CqImpl::Soft(c) => c.poll(out),
        }
    }

    /// One completion, if there is one.
    pub fn poll_one(&self) -> Option<Completion> {
        let mut c = [Completion::default()];
        (self.poll(&mut c) == 1).then(|| c[0])
    }

    /// Asks for one wake-up: the CQ's descriptor becomes readable as soon as there is a
    /// completion to poll (at once, if there is one already). One arming gives at most one
    /// wake-up. The usual loop: poll until empty, arm, poll once more, then wait. On the
    /// device the descriptor may also wake without a completion (CQs share interrupt
    /// vectors), so after a wake-up poll and, if empty, arm again.
    pub fn arm(&self) -> Result<()> {
        match &self.inner.imp {
            CqImpl::Device(c) => {
                c.arm(self.inner.ctx.dev());
                Ok(())
            }
            CqImpl::Soft(c) => {
                c.arm();
                Ok(())
            }
        }
    }

    /// How long [`Cq::wait`] keeps polling the queue before it arms it and sleeps: a
    /// completion that comes within this time is taken without an interrupt, a wake-up
    /// and their system calls, at the price of a CPU busy meanwhile. Zero (the default,
    /// see [`BUSY_POLL_ENV`]) sleeps at once. At most about 71 minutes.
    pub fn set_busy_poll(&self, t: Duration) {
        let us = t.as_micros().min(u32::MAX as u128) as u32;
        self.inner.busy_poll_us.store(us, Ordering::Relaxed);
    }

    /// The busy-poll time of [`Cq::set_busy_poll`].
    pub fn busy_poll(&self) -> Duration {
        Duration::from_micros(self.inner.busy_poll_us.load(Ordering::Relaxed) as u64)
    }

    /// Clears the descriptor's readiness after a wake-up; returns how many wake-ups it
    /// had gathered (0 if none).
    pub fn ack(&self) -> u64 {
        sys::eventfd_drain(self.inner.efd.as_raw_fd())
    }

    /// Waits until at least one completion is there or `timeout` passed (`None`: no
    /// limit), then polls into `out`. Returns 0 only when the time ran out; the CQ then
    /// stays armed (its descriptor becomes readable at the next completion). A wait that
    /// armed the CQ and then found a completion may leave it armed, or its descriptor
    /// readable, too: whoever watches the descriptor next may see one spurious wake-up. Threads may
    /// wait on one CQ at once; each completion goes to one of them. Polls for
    /// [`Cq::busy_poll`] first (no longer than `timeout`) before it sleeps.
    pub fn wait(&self, out: &mut [Completion], timeout: Option<Duration>) -> Result<usize> {
        let start = Instant::now();
        let deadline = timeout.map(|t| start + t);
        let spin = self.busy_poll();
        if !spin.is_zero() {
            let until = deadline.map_or(start + spin, |d| d.min(start + spin));
            loop {
                // A clock read every few dozen polls: polling is a few loads.
                for _ in 0..32 {
                    let n = self.poll(out);
                    if n > 0 {
                        return Ok(n);
                    }
                    std::hint::spin_loop();
                }
                if Instant::now() >= until {
                    break;
                }
            }
        }
        // Counted before arming, so a thread that clears the signal this arming brings
        // knows to arm again.
        self.inner.blocked.fetch_add(1, Ordering::SeqCst);
        let r = (|| loop {
            let n = self.poll(out);
            if n > 0 {
                return Ok(n);
            }
            self.arm()?;
            let n = self.poll(out);
            if n > 0 {
                return Ok(n);
            }
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left == Some(Duration::ZERO) {
                return Ok(0);
            }
            if sys::wait_readable(self.inner.efd.as_fd(), left)? {
                let others = self.inner.blocked.load(Ordering::SeqCst) - 1;
                self.inner.took_wakeup(self, others)?;
            }
        })();
        self.inner.blocked.fetch_sub(1, Ordering::SeqCst);
        r
    }

    /// [`Cq::wait`] for one completion. `Ok(None)` when the time ran out.
    pub fn wait_one(&self, timeout: Option<Duration>) -> Result<Option<Completion>> {
        let mut c = [Completion::default()];
        Ok((self.wait(&mut c, timeout)? == 1).then(|| c[0]))
    }
}

/// The CQ's eventfd, for `poll`/`epoll`: readable after [`Cq::arm`] once a completion is
/// there. Clear it with [`Cq::ack`].
impl AsFd for Cq {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.efd.as_fd()
    }
}

impl AsRawFd for Cq {
    fn as_raw_fd(&self) -> RawFd {
        self.inner.efd.as_raw_fd()
    }
}

impl std::fmt::Debug for Cq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cq")
            .field("id", &self.id())
            .field("depth", &self.depth())
            .finish()
    }
}

impl Drop for CqInner {
    fn drop(&mut self) {
        // The provider forgets the CQ before its eventfd (a field of self) is closed.
        match &self.imp {
            CqImpl::Device(c) => c.destroy(self.ctx.dev()),
            CqImpl::Soft(c) => c.destroy(),
        }
    }
}
