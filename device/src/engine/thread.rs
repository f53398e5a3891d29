//! An engine thread: the processor of the adapter, serving the engines (one per PCI
//! function) it was given, in turns. A host with many guests runs many functions on one or
//! a few such threads, as a NIC's processors serve all of its functions; a single-function
//! `qpipd` is the case of one engine on one thread.
//!
//! Each pass gives every engine one [`Engine::poll_once`] (each bounded by its own budgets,
//! so a busy function cannot hold the others off for more than its turn). While any engine
//! had work the thread keeps passing; idle, it polls on for the adaptive budget of
//! [`super::idle`], then every engine publishes "sleeping" (the `qpip_abi::doorbell`
//! protocol), looks once more, and the thread sleeps in ppoll(2) on its wake-up eventfd
//! (control messages and kicks of every function), every engine's link, and the earliest
//! timer of them all.
//!
//! One function's fault stays in that function. Every call into an engine runs under
//! [`std::panic::catch_unwind`]: an engine that panics (a bug; with overflow checks on, an
//! arithmetic overflow too) is dropped at once — its objects, connections and state go, and
//! with them every access to its guest's memory — and its function is marked failed
//! ([`Shared::failed`], which the driver reads as `STATUS_FAILED`). The function keeps its
//! place on the thread: its control messages are still taken (nobody waits for a reply that
//! never comes; admin doorbells are ignored), and a reset builds it a fresh engine on the
//! same link. The thread's other engines never notice. Unwinding out of an engine is sound
//! here because nothing it touched survives it: the engine is dropped, not reused, and what it
//! shares (counters, interrupts, guest RAM) holds no invariant a half-done pass could break.
//! (Fuzz builds are unaffected: libFuzzer's runtime aborts the process from its panic hook,
//! before any unwinding, so a panic there is still the crash the fuzzer reports.)

use std::any::Any;
use std::os::fd::AsRawFd;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use log::{debug, error, info, warn};
use vmm_sys_util::eventfd::EventFd;

use super::{idle, Control, Engine, EngineConfig, EngineHandle, Shared};
use crate::backend::Backend;
use crate::sched;

/// A thread serving engines. Dropping it (after every [`EngineHandle`] it made) ends the
/// thread.
pub struct EngineThread {
    name: String,
    /// New engines for the thread.
    add: Mutex<Option<Sender<Slot>>>,
    /// Written after every control message of any of its engines.
    wake: Arc<EventFd>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl EngineThread {
    /// Starts a thread whose idle passes follow `idle` ([`idle::IdlePolicy`]).
    pub fn spawn(name: &str, idle: idle::IdleConfig) -> std::io::Result<Arc<EngineThread>> {
        let wake = Arc::new(EventFd::new(libc::EFD_NONBLOCK | libc::EFD_CLOEXEC)?);
        let (add, added) = mpsc::channel();
        let mut turns = Turns {
            slots: Vec::new(),
            added,
            wake: wake.clone(),
            idle,
        };
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || turns.run())?;
        Ok(Arc::new(EngineThread {
            name: name.into(),
            add: Mutex::new(Some(add)),
            wake,
            thread: Mutex::new(Some(thread)),
        }))
    }

    /// Builds an engine for a function (its network attached: `link` if given, already
    /// open, else the one `config.network` names) and hands it to the thread.
    pub fn start(
        self: &Arc<Self>,
        shared: Shared,
        config: EngineConfig,
        link: Option<Box<dyn Backend>>,
    ) -> std::io::Result<EngineHandle> {
        let (tx, rx) = mpsc::channel();
        let net = config.network.clone();
        let mut engine = Engine::new(shared.clone(), config.clone(), rx);
        match (net, link) {
            (Some(net), Some(link)) => engine.attach_link(&net, link),
            (Some(net), None) => engine.attach_network(&net)?,
            (None, _) => {}
        }
        let slot = Slot {
            shared,
            config,
            state: State::Serving(Box::new(engine)),
        };
        let add = self.add.lock().unwrap_or_else(|p| p.into_inner());
        let sent = add.as_ref().is_some_and(|a| a.send(slot).is_ok());
        if !sent {
            return Err(std::io::Error::other(format!(
                "engine thread {} has stopped",
                self.name
            )));
        }
        drop(add);
        let _ = self.wake.write(1);
        Ok(EngineHandle {
            tx,
            wake: self.wake.clone(),
            _thread: self.clone(),
        })
    }
}

impl Drop for EngineThread {
    fn drop(&mut self) {
        // No more engines can come; the thread ends once its last engine has stopped.
        self.add.lock().unwrap_or_else(|p| p.into_inner()).take();
        let _ = self.wake.write(1);
        let thread = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(t) = thread {
            let _ = t.join();
        }
    }
}

/// One function's place on the thread: its engine, or what is left of it after it failed.
struct Slot {
    /// What a fresh engine is built from, after a failure.
    shared: Shared,
    config: EngineConfig,
    state: State,
}

enum State {
    Serving(Box<Engine>),
    /// The engine panicked and was dropped. Its control messages are still taken, and a
    /// reset builds a fresh engine, on `link` (the failed engine's, kept: the function's
    /// port on the switch, its TAP, ...) if the function has a network.
    Failed {
        rx: Receiver<Control>,
        link: Option<Box<dyn Backend>>,
    },
}

impl Slot {
    fn rx(&self) -> &Receiver<Control> {
        match &self.state {
            State::Serving(e) => &e.rx,
            State::Failed { rx, .. } => rx,
        }
    }

    /// Runs `f` on the engine, if the function has one, catching a panic: then the engine
    /// is dropped and the function fails ([`Slot::fail`]). None if there was no engine or
    /// it panicked.
    fn guarded<R>(&mut self, doing: &str, f: impl FnOnce(&mut Engine) -> R) -> Option<R> {
        let State::Serving(engine) = &mut self.state else {
            return None;
        };
        match catch_unwind(AssertUnwindSafe(|| f(engine))) {
            Ok(r) => Some(r),
            Err(cause) => {
                self.fail(doing, &*cause);
                None
            }
        }
    }

    /// One turn: the engine's [`Engine::poll_once`]. True when it had work (a failure
    /// counts as work: the thread looks again before it sleeps).
    fn poll(&mut self, idle_passes: u32) -> bool {
        if matches!(self.state, State::Failed { .. }) {
            return false;
        }
        // One relaxed load a turn: the test hook costs the engine nothing else.
        let inject = self.config.fault.take();
        self.guarded("polling", |e| {
            if inject {
                panic!("fault injected by a test");
            }
            e.idle_passes = idle_passes;
            e.poll_once()
        })
        .unwrap_or(true)
    }

    /// A control message other than `Shutdown`.
    fn handle(&mut self, msg: Control) {
        match msg {
            // Handled here rather than by the engine: whatever happens in the engine's
            // reset, the function comes out of it with a working engine, and who asked
            // hears back.
            Control::Reset(ack) => {
                self.guarded("resetting", Engine::reset);
                if matches!(self.state, State::Failed { .. }) {
                    self.rebuild();
                }
                let _ = ack.send(());
            }
            msg if matches!(self.state, State::Serving(_)) => {
                self.guarded("handling a control message", |e| e.handle(msg));
            }
            // A failed function does nothing for its guest until a reset: the admin queue's
            // doorbells and kicks are ignored.
            _ => {}
        }
    }

    /// The engine panicked while `doing`: drop it (and with it every object of the
    /// function), keeping its control channel and link for a fresh one, and mark the
    /// function failed.
    fn fail(&mut self, doing: &str, cause: &(dyn Any + Send)) {
        let (_, none) = mpsc::channel();
        let placeholder = State::Failed {
            rx: none,
            link: None,
        };
        let State::Serving(mut engine) = std::mem::replace(&mut self.state, placeholder) else {
            return;
        };
        let (_, none) = mpsc::channel();
        let rx = std::mem::replace(&mut engine.rx, none);
        let link = self
            .config
            .network
            .is_some()
            .then(|| engine.net.take_backend());
        self.shared.set_failed(true);
        error!(
            "function {} (engine thread {}) FAILED: its engine panicked while {doing}: {}. \
             Its engine and every object of it are dropped (no more access to its guest's \
             memory); it reports STATUS_FAILED and ignores its admin queue until its driver \
             resets it. The thread's other functions serve on.",
            self.config.name,
            std::thread::current().name().unwrap_or("?"),
            panic_message(cause)
        );
        // Its drop runs code of the failed engine too.
        if catch_unwind(AssertUnwindSafe(move || drop(engine))).is_err() {
            error!(
                "function {}: dropping its failed engine panicked as well; what was left of it is leaked",
                self.config.name
            );
        }
        self.state = State::Failed { rx, link };
    }

    /// A reset of a failed function: a fresh engine, as at start, on the function's link.
    fn rebuild(&mut self) {
        let (_, none) = mpsc::channel();
        let placeholder = State::Failed {
            rx: none,
            link: None,
        };
        let State::Failed { rx, link } = std::mem::replace(&mut self.state, placeholder) else {
            return;
        };
        let (shared, config) = (self.shared.clone(), self.config.clone());
        let built = catch_unwind(AssertUnwindSafe(move || {
            let (_, none) = mpsc::channel();
            let mut e = Engine::new(shared, config.clone(), none);
            if let (Some(net), Some(link)) = (&config.network, link) {
                e.attach_link(net, link);
            }
            e
        }));
        match built {
            Ok(mut engine) => {
                engine.rx = rx;
                self.shared.stats.clear();
                self.shared.set_failed(false);
                info!(
                    "function {}: reset after its failure; a fresh engine serves it",
                    self.config.name
                );
                self.state = State::Serving(Box::new(engine));
            }
            Err(cause) => {
                error!(
                    "function {}: building a fresh engine panicked ({}); it stays failed, \
                     without its link",
                    self.config.name,
                    panic_message(&*cause)
                );
                self.state = State::Failed { rx, link: None };
            }
        }
    }
}

/// What a panic said, if it said it as text.
fn panic_message(cause: &(dyn Any + Send)) -> &str {
    cause
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| cause.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// The thread's own state.
struct Turns {
    slots: Vec<Slot>,
    added: Receiver<Slot>,
    wake: Arc<EventFd>,
    idle: idle::IdleConfig,
}

impl Turns {
    fn run(&mut self) {
        info!(
            "engine thread running (idle poll up to {:?}, adaptive; {:?}{})",
            self.idle.max_poll,
            self.idle.poll_sched,
            if self.idle.nap { ", naps" } else { "" }
        );
        let mut policy = idle::IdlePolicy::new(self.idle, sched::SystemHost::new(&self.idle));
        let mut last_work = Instant::now();
        let mut idle_passes: u32 = 0;
        loop {
            if !self.take_new() {
                return;
            }
            let mut did = self.messages();
            for s in &mut self.slots {
                did |= s.poll(idle_passes);
            }
            if did {
                policy.on_work();
                last_work = Instant::now();
                idle_passes = 0;
                continue;
            }
            idle_passes = idle_passes.wrapping_add(1);
            match policy.next(last_work.elapsed(), idle_passes) {
                idle::Step::Poll => {
                    std::hint::spin_loop();
                    continue;
                }
                idle::Step::Yield => {
                    std::thread::yield_now();
                    continue;
                }
                idle::Step::Nap(d) => {
                    std::thread::sleep(d);
                    continue;
                }
                idle::Step::Sleep => {}
            }
            // Idle: every engine publishes "sleeping", then looks once more (see
            // qpip_abi::doorbell), its link included.
            idle_passes = 0;
            self.set_sleeping(true);
            std::sync::atomic::fence(Ordering::SeqCst);
            let mut late = false;
            for s in &mut self.slots {
                late |= s.poll(0);
            }
            if late {
                self.set_sleeping(false);
                last_work = Instant::now();
                continue;
            }
            for s in &self.slots {
                if matches!(s.state, State::Serving(_)) {
                    s.shared.stats.add(qpip_abi::admin::STAT_SLEEPS, 1);
                }
            }
            debug!("engine thread sleeping");
            let slept = Instant::now();
            let by_work = self.sleep();
            policy.after_sleep(slept.elapsed(), by_work);
            self.set_sleeping(false);
            last_work = Instant::now();
        }
    }

    /// Takes the engines started since the last pass. False when the thread is done: no
    /// engine left and none can come.
    fn take_new(&mut self) -> bool {
        loop {
            match self.added.try_recv() {
                Ok(s) => self.slots.push(s),
                Err(mpsc::TryRecvError::Empty) => return true,
                Err(mpsc::TryRecvError::Disconnected) => return !self.slots.is_empty(),
            }
        }
    }

    /// Handles every engine's control messages; an engine told to stop (or whose handle
    /// is gone) leaves, and who asked hears of it once it is dropped. Returns whether there
    /// were any.
    fn messages(&mut self) -> bool {
        let mut any = false;
        let mut stopped = Vec::new();
        self.slots.retain_mut(|s| loop {
            match s.rx().try_recv() {
                Ok(Control::Shutdown(ack)) => {
                    stopped.extend(ack);
                    return false;
                }
                Ok(msg) => {
                    any = true;
                    s.handle(msg);
                }
                Err(mpsc::TryRecvError::Empty) => return true,
                Err(mpsc::TryRecvError::Disconnected) => return false,
            }
        });
        for ack in stopped {
            any = true;
            let _ = ack.send(());
        }
        any
    }

    fn set_sleeping(&mut self, asleep: bool) {
        for s in &mut self.slots {
            s.guarded("publishing its sleep", |e| e.set_sleeping(asleep));
        }
    }

    /// Blocks until a control message is signalled, a link has a frame, or the next timer
    /// of any engine is due. Returns whether work (a message, a frame) ended the sleep
    /// rather than a timer.
    fn sleep(&mut self) -> bool {
        let mut fds = vec![libc::pollfd {
            fd: self.wake.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        let mut deadline: Option<Instant> = None;
        for s in &mut self.slots {
            let Some((fd, due)) = s.guarded("looking at its timers", Engine::wake_sources) else {
                continue;
            };
            if fd >= 0 {
                fds.push(libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                });
            }
            deadline = deadline.into_iter().chain(due).min();
        }
        // To the microsecond, not poll(2)'s millisecond: a timer due in 0.9 ms would
        // otherwise be a zero timeout, and the thread would spin in and out of "sleep"
        // (flag stores, a system call) until it came due.
        let timeout = deadline.map(|t| {
            let d = t.saturating_duration_since(Instant::now());
            libc::timespec {
                tv_sec: d.as_secs().min(i32::MAX as u64) as libc::time_t,
                tv_nsec: d.subsec_nanos() as libc::c_long,
            }
        });
        let timeout_ptr = timeout
            .as_ref()
            .map_or(std::ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: `fds` is a valid array of pollfd and `timeout_ptr` null or a valid
        // timespec for the duration of the call; no signal mask is given.
        let r = unsafe {
            libc::ppoll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                timeout_ptr,
                std::ptr::null(),
            )
        };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                warn!("engine thread poll failed: {e}");
            }
        }
        let _ = self.wake.read(); // reset the counter; the messages are in the channels
        r > 0 && fds.iter().any(|f| f.revents != 0)
    }
}
