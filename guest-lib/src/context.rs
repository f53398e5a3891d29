//! `Context`: an open device (or the software provider), the owner of every other object,
//! and the source of connection events.

use std::collections::VecDeque;
use std::net::SocketAddrV6;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::cq::{Cq, CqImpl, CqInner};
use crate::device;
use crate::error::{Error, Result};
use crate::mr::{MemoryRegion, MrInner};
use crate::qp::{Listener, ListenerImpl, ListenerInner, Qp, QpImpl, QpInit, QpInner};
use crate::soft;
use crate::sys;
use crate::types::{Event, EventKind, Limits, ProviderKind};

/// Environment variable that picks the provider: `soft` or `device`.
pub const PROVIDER_ENV: &str = "QPIP_PROVIDER";

/// An open qpip context: the device's `/dev/qpipN` (one context of the adapter, with its
/// own doorbell page) or the software provider over kernel sockets. Every CQ, QP, memory
/// region, listener and tripwire belongs to one context; the context stays open while any of them
/// exists. Cheap to clone (a shared handle).
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<CtxInner>,
}

pub(crate) struct CtxInner {
    pub(crate) imp: CtxImpl,
    pub(crate) limits: Limits,
    /// Events read while a blocking helper looked for another one.
    stash: Mutex<VecDeque<Event>>,
    /// Blocking event waits take turns: one thread at a time (the reader) sleeps on the
    /// event descriptor and keeps back what it reads for others; the rest sleep on `turn`.
    /// (Were they all on the descriptor, one could drain the event another wants and leave
    /// that one asleep on a descriptor that no longer becomes readable.) True while a
    /// reader is out.
    reading: Mutex<bool>,
    /// Signalled when the reader leaves or an event is kept back.
    turn: Condvar,
    /// Made readable when an event is kept back, so a reader asleep on the descriptor
    /// looks at the stash (an async waiter may have kept its event).
    kept: OwnedFd,
    /// Wakes the async waiters for events (`crate::aio`) when an event is put in the stash:
    /// the event was read from the descriptor, which then no longer wakes them for it.
    #[cfg(feature = "tokio")]
    pub(crate) stashed: tokio::sync::Notify,
    /// The arm words of the context's tripwires.
    pub(crate) arm_words: crate::tripwire::ArmWords,
}

pub(crate) enum CtxImpl {
    Device(device::Ctx),
    Soft(soft::Ctx),
}

impl Context {
    /// Opens the provider `QPIP_PROVIDER` names (`soft` or `device`); without it, the first
    /// device (`/dev/qpip0`, ...) if one exists, else the software provider.
    pub fn open() -> Result<Context> {
        match std::env::var(PROVIDER_ENV) {
            Ok(v) if v == "soft" => Context::open_soft(),
            Ok(v) if v == "device" => {
                Context::open_device(&first_device()?.ok_or(Error::NoDevice)?)
            }
            Ok(v) if !v.is_empty() => Err(Error::BadProviderName(v)),
            _ => match first_device()? {
                Some(path) => Context::open_device(&path),
                None => Context::open_soft(),
            },
        }
    }

    /// Opens a context on the device behind `path` (`/dev/qpipN`).
    pub fn open_device(path: &Path) -> Result<Context> {
        let (dev, limits) = device::Ctx::open(path)?;
        Context::new(CtxImpl::Device(dev), limits)
    }

    /// Opens a context of the software provider (kernel sockets, no device needed).
    pub fn open_soft() -> Result<Context> {
        let (soft, limits) = soft::Ctx::open()?;
        Context::new(CtxImpl::Soft(soft), limits)
    }

    pub(crate) fn new(imp: CtxImpl, limits: Limits) -> Result<Context> {
        Ok(Context {
            inner: Arc::new(CtxInner {
                imp,
                limits,
                stash: Mutex::new(VecDeque::new()),
                reading: Mutex::new(false),
                turn: Condvar::new(),
                kept: sys::eventfd()?,
                #[cfg(feature = "tokio")]
                stashed: tokio::sync::Notify::new(),
                arm_words: Default::default(),
            }),
        })
    }

    /// Which provider this context runs on.
    pub fn provider(&self) -> ProviderKind {
        match self.inner.imp {
            CtxImpl::Device(_) => ProviderKind::Device,
            CtxImpl::Soft(_) => ProviderKind::Soft,
        }
    }

    /// The device file, for a device context.
    pub fn device_path(&self) -> Option<&Path> {
        match &self.inner.imp {
            CtxImpl::Device(d) => Some(d.path()),
            CtxImpl::Soft(_) => None,
        }
    }

    /// Doorbells that found the device asleep and kicked it (0 for the soft provider).
    pub fn kicks(&self) -> u64 {
        match &self.inner.imp {
            CtxImpl::Device(d) => d.kicks.load(std::sync::atomic::Ordering::Relaxed),
            CtxImpl::Soft(_) => 0,
        }
    }

    /// What the context can do.
    pub fn limits(&self) -> Limits {
        self.inner.limits
    }

    /// Registers `buf` (taking it over) for receives and sends.
    pub fn register(&self, buf: Vec<u8>) -> Result<MemoryRegion> {
        self.register_with(buf, crate::Access::default())
    }

    /// [`Context::register`], also granting peers of iWARP QPs of this context `access`
    /// (RDMA Read, Write) to the region by its [`MemoryRegion::rkey`]. The device only.
    pub fn register_with(&self, buf: Vec<u8>, access: crate::Access) -> Result<MemoryRegion> {
        let mut mr = MrInner::new(self.inner.clone(), buf)?;
        (mr.lkey, mr.rkey) = match &self.inner.imp {
            CtxImpl::Device(d) => d.reg_mr(mr.addr(), mr.len(), access.bits())?,
            CtxImpl::Soft(_) if access != crate::Access::default() => {
                return Err(Error::Unsupported(
                    "remote access to memory needs iWARP, which the software provider lacks",
                ))
            }
            CtxImpl::Soft(s) => (s.reg_mr(), 0),
        };
        Ok(MemoryRegion {
            inner: Arc::new(mr),
        })
    }

    /// Allocates and registers `len` zeroed bytes.
    pub fn alloc(&self, len: usize) -> Result<MemoryRegion> {
        self.register(vec![0; len])
    }

    /// Allocates and registers `len` zeroed bytes that peers may reach with `access`
    /// ([`Context::register_with`]).
    pub fn alloc_with(&self, len: usize, access: crate::Access) -> Result<MemoryRegion> {
        self.register_with(vec![0; len], access)
    }

    /// Creates a completion queue of `depth` entries (a power of two, 2 ..=
    /// [`Limits::max_queue_depth`]).
    pub fn create_cq(&self, depth: u32) -> Result<Cq> {
        check_depth("CQ", depth, self.inner.limits.max_queue_depth)?;
        let efd = sys::eventfd()?;
        let imp = match &self.inner.imp {
            CtxImpl::Device(d) => CqImpl::Device(d.create_cq(depth, efd.as_raw_fd())?),
            CtxImpl::Soft(s) => CqImpl::Soft(s.create_cq(depth, efd.as_raw_fd())?),
        };
        Ok(Cq {
            inner: Arc::new(CqInner {
                ctx: self.inner.clone(),
                imp,
                efd,
                depth,
                blocked: AtomicU32::new(0),
                busy_poll_us: AtomicU32::new(crate::cq::default_busy_poll_us()),
            }),
        })
    }

    /// Creates a queue pair.
    pub fn create_qp(&self, init: &QpInit<'_>) -> Result<Qp> {
        let lim = self.inner.limits.max_queue_depth;
        check_depth("send queue", init.sq_depth, lim)?;
        check_depth("receive queue", init.rq_depth, lim)?;
        for cq in [init.send_cq, init.recv_cq] {
            if !Arc::ptr_eq(&cq.inner.ctx, &self.inner) {
                return Err(Error::ForeignObject("the completion queue"));
            }
        }
        let imp = match &self.inner.imp {
            CtxImpl::Device(d) => QpImpl::Device(d.create_qp(init)?),
            CtxImpl::Soft(s) => QpImpl::Soft(s.create_qp(init)?),
        };
        Ok(Qp {
            inner: Arc::new(QpInner {
                ctx: self.inner.clone(),
                kind: init.kind,
                imp,
                send_cq: init.send_cq.inner.clone(),
                recv_cq: init.recv_cq.inner.clone(),
            }),
        })
    }

    /// Listens for TCP connections on `addr` (port non-zero; the unspecified address
    /// listens on every address). Connections wait in the listener, up to `backlog`, until
    /// [`Listener::accept`] gives each a QP.
    pub fn listen(&self, addr: SocketAddrV6, backlog: u32) -> Result<Listener> {
        if addr.port() == 0 {
            return Err(Error::InvalidArgument("a listener needs a port".into()));
        }
        if backlog == 0 || backlog > 1024 {
            return Err(Error::InvalidArgument(format!(
                "backlog {backlog}: expected 1..=1024"
            )));
        }
        let imp = match &self.inner.imp {
            CtxImpl::Device(d) => ListenerImpl::Device(d.listen(&addr, backlog)?),
            CtxImpl::Soft(s) => ListenerImpl::Soft(s.listen(&addr, backlog)?),
        };
        Ok(Listener {
            inner: Arc::new(ListenerInner {
                ctx: self.inner.clone(),
                imp,
                addr,
            }),
        })
    }

    /// The next connection event, if one is queued (never blocks).
    pub fn poll_event(&self) -> Result<Option<Event>> {
        if let Some(e) = self.inner.stash.lock().unwrap().pop_front() {
            return Ok(Some(e));
        }
        self.inner.read_event()
    }

    /// Waits for the next connection event, at most `timeout` (`None`: for ever).
    /// `Ok(None)` when the time ran out.
    pub fn wait_event(&self, timeout: Option<Duration>) -> Result<Option<Event>> {
        self.wait_event_matching(timeout, |_| true)
    }

    /// Waits for the event of `kind` about QP `qp`; other events met meanwhile stay queued
    /// for [`Context::poll_event`] in their order. Threads may wait at once, each for its
    /// own event: whichever reads another's keeps it back and wakes the other.
    pub fn wait_event_for(
        &self,
        qp: u32,
        kind: EventKind,
        timeout: Option<Duration>,
    ) -> Result<Option<Event>> {
        self.wait_event_matching(timeout, |e| e.qp == qp && e.kind == kind)
    }

    fn wait_event_matching(
        &self,
        timeout: Option<Duration>,
        want: impl Fn(&Event) -> bool,
    ) -> Result<Option<Event>> {
        let inner = &self.inner;
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let mut reading = inner.reading.lock().unwrap();
            // Under the turn lock: an event kept back after this look signals `turn` only
            // once this thread waits on it.
            if let Some(e) = inner.take_stashed(&want) {
                return Ok(Some(e));
            }
            if *reading {
                if left == Some(Duration::ZERO) {
                    return Ok(None);
                }
                let _g = match left {
                    None => inner.turn.wait(reading).unwrap(),
                    Some(t) => inner.turn.wait_timeout(reading, t).unwrap().0,
                };
                continue;
            }
            *reading = true;
            drop(reading);
            let got = self.read_for(&want, left);
            *inner.reading.lock().unwrap() = false;
            inner.turn.notify_all();
            match got? {
                Some(e) => return Ok(Some(e)),
                None if left == Some(Duration::ZERO) => return Ok(None),
                None => {}
            }
        }
    }

    /// The reader's part of a blocking wait: reads the queued events, keeping back those
    /// `want` refuses, and if none was wanted sleeps (at most `left`) until the descriptor
    /// is readable or another waiter kept an event back.
    fn read_for(
        &self,
        want: impl Fn(&Event) -> bool,
        left: Option<Duration>,
    ) -> Result<Option<Event>> {
        let inner = &self.inner;
        while let Some(e) = inner.read_event()? {
            if want(&e) {
                return Ok(Some(e));
            }
            inner.stash(e);
        }
        sys::eventfd_drain(inner.kept.as_raw_fd());
        // Kept back by an async waiter since the caller's look.
        if let Some(e) = inner.take_stashed(&want) {
            return Ok(Some(e));
        }
        if left != Some(Duration::ZERO) {
            sys::wait_any_readable(&[self.events_fd(), inner.kept.as_fd()], left)?;
        }
        Ok(None)
    }

    /// The descriptor that polls readable while a connection event is queued, for
    /// `poll`/`epoll` (then call [`Context::poll_event`]). Events kept back by
    /// [`Context::wait_event_for`] do not make it readable.
    pub fn events_fd(&self) -> BorrowedFd<'_> {
        match &self.inner.imp {
            CtxImpl::Device(d) => d.fd.as_fd(),
            CtxImpl::Soft(s) => s.events_fd(),
        }
    }

    /// The device's counters (`qpip_abi::admin::STAT_*`), or `None` for the software
    /// provider.
    pub fn device_counters(&self) -> Result<Option<Vec<u64>>> {
        match &self.inner.imp {
            CtxImpl::Device(d) => d.stats().map(Some),
            CtxImpl::Soft(_) => Ok(None),
        }
    }
}

impl AsRawFd for Context {
    fn as_raw_fd(&self) -> RawFd {
        self.events_fd().as_raw_fd()
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("provider", &self.provider())
            .finish()
    }
}

impl CtxInner {
    /// The device context; only called on objects of a device context.
    pub(crate) fn dev(&self) -> &device::Ctx {
        match &self.imp {
            CtxImpl::Device(d) => d,
            CtxImpl::Soft(_) => unreachable!("a device object in a soft context"),
        }
    }

    /// The first kept-back event `want` accepts, taken out of the stash.
    pub(crate) fn take_stashed(&self, want: impl Fn(&Event) -> bool) -> Option<Event> {
        let mut stash = self.stash.lock().unwrap();
        let i = stash.iter().position(want)?;
        stash.remove(i)
    }

    /// Keeps back an event read while looking for another one, and wakes the waiters
    /// that may want it: blocking ones (on `turn`, or the reader on `kept`) and async ones.
    pub(crate) fn stash(&self, e: Event) {
        self.stash.lock().unwrap().push_back(e);
        {
            let _g = self.reading.lock().unwrap();
            self.turn.notify_all();
        }
        sys::eventfd_signal(self.kept.as_raw_fd());
        #[cfg(feature = "tokio")]
        self.stashed.notify_waiters();
    }

    pub(crate) fn read_event(&self) -> Result<Option<Event>> {
        match &self.imp {
            CtxImpl::Device(d) => d.read_event(),
            CtxImpl::Soft(s) => Ok(s.read_event()),
        }
    }
}

fn check_depth(what: &str, depth: u32, max: u32) -> Result<()> {
    if depth < 2 || depth > max || !depth.is_power_of_two() {
        return Err(Error::InvalidArgument(format!(
            "{what} depth {depth}: expected a power of two from 2 to {max}"
        )));
    }
    Ok(())
}

/// The first `/dev/qpipN` by number, if any.
fn first_device() -> Result<Option<PathBuf>> {
    let entries = match std::fs::read_dir(crate::DEV_DIR) {
        Ok(e) => e,
        Err(_) => return Ok(None),
    };
    let mut best: Option<(u32, PathBuf)> = None;
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(n) = name
            .to_str()
            .and_then(|s| s.strip_prefix(crate::CLASS))
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if best.as_ref().is_none_or(|(b, _)| n < *b) {
            best = Some((n, e.path()));
        }
    }
    Ok(best.map(|(_, p)| p))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The QP of the event [`keep_back_close`] keeps.
    pub(crate) const KEPT_QP: u32 = 42;

    /// Keeps back a Close event of [`KEPT_QP`] in `ctx`, as a waiter does that read it from
    /// the descriptor while it waited for another, and returns it.
    pub(crate) fn keep_back_close(ctx: &Context) -> Event {
        let e = Event {
            kind: EventKind::Close,
            status: 0,
            qp: KEPT_QP,
            user_data: 7,
            peer: None,
        };
        ctx.inner.stash(e);
        e
    }

    /// A blocking reader asleep on the event descriptor wakes when another waiter keeps
    /// back the event it wants (an async waiter can read it from the descriptor first, and
    /// the descriptor then never becomes readable for it). The keeping back is done here
    /// directly, so the race it stands for is not left to chance.
    #[test]
    fn a_reader_asleep_on_the_descriptor_wakes_for_a_kept_event() {
        let ctx = Context::open_soft().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn({
            let ctx = ctx.clone();
            move || {
                let r =
                    ctx.wait_event_for(KEPT_QP, EventKind::Close, Some(Duration::from_secs(60)));
                let _ = tx.send(r.map_err(|e| e.to_string()));
            }
        });
        // Let it become the reader and fall asleep (if it has not yet, it finds the event
        // in the stash instead: the test then passes without exercising the wake-up).
        std::thread::sleep(Duration::from_millis(100));
        let e = keep_back_close(&ctx);
        let got = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("the reader woke for the kept event");
        assert_eq!(got.unwrap(), Some(e));
        waiter.join().unwrap();
    }
}
