//! The async adapter (Cargo feature `tokio`): futures that complete from the descriptors the
//! blocking waits sleep on — a CQ's eventfd ([`AsyncCq`]) and the context's event descriptor
//! ([`AsyncContext`]) — registered with tokio's reactor (`AsyncFd`).
//!
//! Both follow the protocol the blocking waits use, so no wake-up is lost: poll; arm; poll
//! again (a completion that came before the arm is found here, one that comes after it
//! signals the descriptor); only then wait. tokio keeps a readiness until it is cleared, and
//! a clear only drops the readiness it was given (a signal that came after it stays), so the
//! order of signal and clear cannot lose one either. A wake-up with nothing to poll is
//! normal on the device (CQs share interrupt vectors): the futures poll again and go back to
//! waiting.
//!
//! Cancellation: a future takes completions or an event out of the queue only in the poll
//! that returns them, so dropping it (a timeout, `select!`) loses nothing — what it was
//! waiting for stays queued for the next caller. Any number of tasks may wait on one
//! [`AsyncCq`] or [`AsyncContext`] at once; each completion or event goes to one of them.
//!
//! ```
//! use std::net::{Ipv6Addr, SocketAddrV6};
//! use qpip::{AsyncContext, AsyncCq, Context, EventKind, Framing, QpInit, QpKind, SendWr};
//!
//! # fn main() -> Result<(), qpip::Error> {
//! # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
//! # rt.block_on(async {
//! // Inside a tokio runtime (with IO enabled).
//! let ctx = Context::open()?;
//! let actx = AsyncContext::new(&ctx)?;
//! let cq = AsyncCq::new(ctx.create_cq(64)?)?;
//! let kind = QpKind::Tcp(Framing::Message);
//! let (server, client) = (ctx.create_qp(&QpInit::new(kind, &cq))?,
//!                         ctx.create_qp(&QpInit::new(kind, &cq))?);
//! # let port = std::net::TcpListener::bind("[::1]:0").unwrap().local_addr().unwrap().port();
//! let at = SocketAddrV6::new(Ipv6Addr::LOCALHOST, port, 0, 0);
//! let listener = ctx.listen(at, 1)?;
//!
//! // Offer the server QP to the listener (returns at once), connect, then take the accept's
//! // event; both waits complete from the context's connection events.
//! listener.accept(&server, 0)?;
//! actx.connect(&client, at).await?;
//! let accepted = actx.event_for(server.id(), EventKind::Accept).await?;
//! assert_eq!(accepted.status, 0);
//!
//! let buf = ctx.alloc(64)?;
//! server.post_recv(1, &[buf.sge_all()])?;
//! client.post_send(&SendWr::inline(2, b"hello"))?;
//! for _ in 0..2 {
//!     let c = cq.next().await?; // the send's and the receive's completions
//!     assert!(c.is_ok(), "{c:?}");
//! }
//! actx.close(&client).await?;
//! # Ok(())
//! # })
//! # }
//! ```

use std::future::{poll_fn, Future};
use std::net::{Ipv6Addr, SocketAddrV6};
use std::ops::Deref;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;

use ::tokio::io::unix::AsyncFd;
use ::tokio::io::Interest;

use crate::error::{Error, Result};
use crate::qp::{outcome, Listener, Qp};
use crate::types::{Completion, Event, EventKind};
use crate::{Context, Cq};

/// The reactor registration needs a runtime: say so instead of letting tokio panic.
fn need_runtime(what: &'static str) -> Result<()> {
    ::tokio::runtime::Handle::try_current()
        .map(|_| ())
        .map_err(|e| Error::Os {
            op: what,
            source: std::io::Error::other(e),
        })
}

/// A [`Cq`] whose completions can be awaited. It owns the CQ (and derefs to it, for
/// [`crate::QpInit::new`], [`Cq::poll`] and the rest); share it between tasks with an
/// [`Arc`]. Its descriptor is registered with the runtime it was created in, which must have
/// IO enabled (`enable_io`/`enable_all`).
pub struct AsyncCq {
    fd: AsyncFd<Cq>,
}

impl AsyncCq {
    /// Registers `cq`'s descriptor with the current tokio runtime. Fails outside a runtime.
    pub fn new(cq: Cq) -> Result<AsyncCq> {
        need_runtime("AsyncCq::new outside a tokio runtime")?;
        // SAFETY: the descriptor is the CQ's eventfd, which the CQ owns (closed only when the
        // last handle of the CQ goes, and the AsyncFd holds one) and returns every time.
        let fd = unsafe { AsyncFd::register_with_interest(cq, Interest::READABLE) }
            .map_err(|e| Error::os("registering a CQ with the tokio reactor", e.into_parts().1))?;
        Ok(AsyncCq { fd })
    }

    /// The CQ.
    pub fn cq(&self) -> &Cq {
        self.fd.get_ref()
    }

    /// Gives the CQ back, no longer registered with the runtime.
    pub fn into_inner(self) -> Cq {
        self.fd.into_inner()
    }

    /// Waits until there is at least one completion, then moves up to `out.len()` of them
    /// into `out`; returns how many (0 only when `out` is empty). Cancel-safe: completions
    /// leave the CQ only when this returns.
    pub async fn poll_batch(&self, out: &mut [Completion]) -> Result<usize> {
        if out.is_empty() {
            return Ok(0);
        }
        let cq = self.cq();
        loop {
            let n = cq.poll(out);
            if n > 0 {
                return Ok(n);
            }
            cq.arm()?;
            // A completion that came before the arm does not signal: look once more.
            let n = cq.poll(out);
            if n > 0 {
                return Ok(n);
            }
            let mut ready = self
                .fd
                .readable()
                .await
                .map_err(|e| Error::os("waiting for a CQ's descriptor", e))?;
            // Clear before polling again: a signal after this point leaves a new readiness,
            // so the next wait does not sleep through it. The wake-up may be spurious (a
            // shared interrupt vector, or another task took the completion): poll and arm
            // again.
            // Blocking waiters on the same CQ sleep in poll(2), which rechecks the
            // descriptor: arm again for them if this took the signal.
            let blocked = cq.inner.blocked.load(std::sync::atomic::Ordering::SeqCst);
            cq.inner.took_wakeup(cq, blocked)?;
            ready.clear_ready();
        }
    }

    /// The next completion. Cancel-safe.
    pub async fn next(&self) -> Result<Completion> {
        let mut c = [Completion::default()];
        self.poll_batch(&mut c).await?;
        Ok(c[0])
    }
}

impl Deref for AsyncCq {
    type Target = Cq;

    fn deref(&self) -> &Cq {
        self.cq()
    }
}

impl std::fmt::Debug for AsyncCq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("AsyncCq").field(self.cq()).finish()
    }
}

/// A [`Context`]'s connection events as futures, and connect/accept/close that complete
/// when their event comes. Cheap to clone; several may exist for one context (each has its
/// own duplicate of the event descriptor), and they share the events with the context's
/// blocking calls: an event one waiter reads that another wants is kept for it (and for
/// [`Context::poll_event`]).
#[derive(Clone)]
pub struct AsyncContext {
    inner: Arc<AsyncCtxInner>,
}

struct AsyncCtxInner {
    ctx: Context,
    fd: AsyncFd<OwnedFd>,
}

impl AsyncContext {
    /// Registers `ctx`'s event descriptor (a duplicate of it) with the current tokio
    /// runtime, which must have IO enabled. Fails outside a runtime.
    pub fn new(ctx: &Context) -> Result<AsyncContext> {
        need_runtime("AsyncContext::new outside a tokio runtime")?;
        // SAFETY: duplicates a descriptor the context keeps open for this call; the result
        // is checked before it is owned.
        let fd = unsafe {
            libc::fcntl(
                ctx.events_fd().as_raw_fd(),
                libc::F_DUPFD_CLOEXEC,
                0 as libc::c_int,
            )
        };
        if fd < 0 {
            return Err(Error::last_os("duplicating the context's event descriptor"));
        }
        // SAFETY: a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: the AsyncFd owns the descriptor (an OwnedFd, which returns it every time).
        let fd =
            unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }.map_err(|e| {
                let source = e.into_parts().1;
                Error::os(
                    "registering the event descriptor with the tokio reactor",
                    source,
                )
            })?;
        Ok(AsyncContext {
            inner: Arc::new(AsyncCtxInner {
                ctx: ctx.clone(),
                fd,
            }),
        })
    }

    /// The context.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// The next connection event. Cancel-safe.
    pub async fn next_event(&self) -> Result<Event> {
        self.event_matching(|_| true).await
    }

    /// The event of `kind` about QP `qp`; other events read meanwhile stay queued, in their
    /// order, for other waiters and [`Context::poll_event`]. Cancel-safe.
    pub async fn event_for(&self, qp: u32, kind: EventKind) -> Result<Event> {
        self.event_matching(|e| e.qp == qp && e.kind == kind).await
    }

    /// Connects the TCP QP `qp` to `peer` ([`Qp::connect`]) and waits for the outcome;
    /// returns the peer. Dropping the future does not stop the connection: its
    /// [`EventKind::Connect`] event then stays queued.
    pub async fn connect(&self, qp: &Qp, peer: SocketAddrV6) -> Result<SocketAddrV6> {
        qp.connect(peer, 0)?;
        let e = self.event_for(qp.id(), EventKind::Connect).await?;
        outcome(&e, "connect").map(|p| p.unwrap_or(peer))
    }

    /// Offers the idle TCP QP `qp` to `listener` ([`Listener::accept`]) and waits for a
    /// connection; returns the peer. Dropping the future leaves the offer in place (drop
    /// the QP or the listener to cancel it); its event then stays queued.
    pub async fn accept(&self, listener: &Listener, qp: &Qp) -> Result<SocketAddrV6> {
        listener.accept(qp, 0)?;
        let e = self.event_for(qp.id(), EventKind::Accept).await?;
        outcome(&e, "accept")
            .map(|p| p.unwrap_or(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 0, 0, 0)))
    }

    /// Closes the sending direction of `qp` gracefully ([`Qp::close`]) and waits until it
    /// is done. Dropping the future does not stop the close.
    pub async fn close(&self, qp: &Qp) -> Result<()> {
        qp.close(0)?;
        let e = self.event_for(qp.id(), EventKind::Close).await?;
        outcome(&e, "close").map(|_| ())
    }

    async fn event_matching(&self, want: impl Fn(&Event) -> bool) -> Result<Event> {
        let ctx = &self.inner.ctx.inner;
        loop {
            // Listen for stash changes before looking at the stash, so an event another
            // waiter keeps back after the look still wakes this one.
            let mut stashed = pin!(ctx.stashed.notified());
            stashed.as_mut().enable();
            if let Some(e) = ctx.take_stashed(&want) {
                return Ok(e);
            }
            while let Some(e) = ctx.read_event()? {
                if want(&e) {
                    return Ok(e);
                }
                ctx.stash(e);
            }
            // Nothing queued: wait for the descriptor, or for another waiter's catch.
            let mut readable = pin!(self.inner.fd.readable());
            let woke = poll_fn(|cx| {
                if let Poll::Ready(r) = readable.as_mut().poll(cx) {
                    return Poll::Ready(Some(r));
                }
                stashed.as_mut().poll(cx).map(|()| None)
            })
            .await;
            if let Some(r) = woke {
                // Cleared before the next read, which then sees every event that came
                // before; one that comes after leaves a new readiness.
                r.map_err(|e| Error::os("waiting for the context's event descriptor", e))?
                    .clear_ready();
            }
        }
    }
}

impl std::fmt::Debug for AsyncContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("AsyncContext")
            .field(&self.inner.ctx)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::tests::{keep_back_close, KEPT_QP};

    /// A waiter asleep on the descriptor wakes when another waiter (async or blocking)
    /// keeps back the event it wants: that event was read from the descriptor, whose
    /// readiness may then already be spent. The keeping back is done here directly, so the
    /// race it stands for is not left to chance.
    #[test]
    fn an_event_kept_back_by_another_waiter_wakes_the_one_that_wants_it() {
        let rt = ::tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let ctx = Context::open_soft().unwrap();
            let actx = AsyncContext::new(&ctx).unwrap();
            let mut wait = pin!(actx.event_for(KEPT_QP, EventKind::Close));
            let first = poll_fn(|cx| Poll::Ready(wait.as_mut().poll(cx).is_pending())).await;
            assert!(first, "an event before any was made");
            let e = keep_back_close(&ctx);
            let got = ::tokio::time::timeout(std::time::Duration::from_secs(10), wait)
                .await
                .expect("woken by the stash");
            assert_eq!(got.unwrap(), e);
        });
    }
}
