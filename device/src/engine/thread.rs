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

use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use log::{debug, info, warn};
use vmm_sys_util::eventfd::EventFd;

use super::{idle, Control, Engine, EngineConfig, EngineHandle, Shared};
use crate::backend::Backend;
use crate::sched;

/// A thread serving engines. Dropping it (after every [`EngineHandle`] it made) ends the
/// thread.
pub struct EngineThread {
    name: String,
    /// New engines for the thread.
    add: Mutex<Option<Sender<Engine>>>,
    /// Written after every control message of any of its engines.
    wake: Arc<EventFd>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl EngineThread {
    /// Starts a thread that polls for up to `idle_poll` after its last work (adaptive, see
    /// [`idle`]) before it sleeps.
    pub fn spawn(name: &str, idle_poll: Duration) -> std::io::Result<Arc<EngineThread>> {
        let wake = Arc::new(EventFd::new(libc::EFD_NONBLOCK | libc::EFD_CLOEXEC)?);
        let (add, added) = mpsc::channel();
        let mut turns = Turns {
            engines: Vec::new(),
            added,
            wake: wake.clone(),
            spin: idle::SpinBudget::new(idle_poll),
            idle_poll,
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
        let mut engine = Engine::new(shared, config, rx);
        match (net, link) {
            (Some(net), Some(link)) => engine.attach_link(&net, link),
            (Some(net), None) => engine.attach_network(&net)?,
            (None, _) => {}
        }
        let add = self.add.lock().unwrap_or_else(|p| p.into_inner());
        let sent = add.as_ref().is_some_and(|a| a.send(engine).is_ok());
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

/// The thread's own state.
struct Turns {
    engines: Vec<Engine>,
    added: Receiver<Engine>,
    wake: Arc<EventFd>,
    spin: idle::SpinBudget,
    idle_poll: Duration,
}

impl Turns {
    fn run(&mut self) {
        info!(
            "engine thread running (idle poll up to {:?}, adaptive)",
            self.idle_poll
        );
        let mut last_work = Instant::now();
        let mut idle_passes: u32 = 0;
        let mut polling = sched::IdlePolling::new();
        loop {
            if !self.take_new() {
                return;
            }
            let mut did = self.messages();
            for e in &mut self.engines {
                e.idle_passes = idle_passes;
                did |= e.poll_once();
            }
            if did {
                polling.restore();
                last_work = Instant::now();
                idle_passes = 0;
                continue;
            }
            idle_passes = idle_passes.wrapping_add(1);
            let idle_for = last_work.elapsed();
            let budget = self.spin.budget();
            if idle_for >= idle::LOWER_AFTER && idle_for < budget {
                // Lowered, it may poll on for the whole budget; else it stops soon.
                polling.lower(idle_for);
            }
            if idle_for < polling.limit(budget) {
                if polling.nap(idle_for) {
                    std::thread::sleep(idle::NAP);
                    continue;
                }
                // Lowered, any runnable thread preempts the polling: no yield needed.
                if !polling.is_low() && idle_passes.is_multiple_of(idle::YIELD_EVERY) {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
                continue;
            }
            // A sleeping engine is woken for work: at its own priority, not behind every
            // runnable thread.
            polling.restore();
            // Idle: every engine publishes "sleeping", then looks once more (see
            // qpip_abi::doorbell), its link included.
            idle_passes = 0;
            self.set_sleeping(true);
            std::sync::atomic::fence(Ordering::SeqCst);
            let mut late = false;
            for e in &mut self.engines {
                e.idle_passes = 0;
                late |= e.poll_once();
            }
            if late {
                self.set_sleeping(false);
                last_work = Instant::now();
                continue;
            }
            for e in &self.engines {
                e.shared.stats.add(qpip_abi::admin::STAT_SLEEPS, 1);
            }
            debug!("engine thread sleeping");
            let slept = Instant::now();
            let by_work = self.sleep();
            self.spin.after_sleep(slept.elapsed(), by_work);
            self.set_sleeping(false);
            last_work = Instant::now();
        }
    }

    /// Takes the engines started since the last pass. False when the thread is done: no
    /// engine left and none can come.
    fn take_new(&mut self) -> bool {
        loop {
            match self.added.try_recv() {
                Ok(e) => self.engines.push(e),
                Err(mpsc::TryRecvError::Empty) => return true,
                Err(mpsc::TryRecvError::Disconnected) => return !self.engines.is_empty(),
            }
        }
    }

    /// Handles every engine's control messages; an engine told to stop (or whose handle
    /// is gone) leaves, and who asked hears of it once it is dropped. Returns whether there
    /// were any.
    fn messages(&mut self) -> bool {
        let mut any = false;
        let mut stopped = Vec::new();
        self.engines.retain_mut(|e| loop {
            match e.rx.try_recv() {
                Ok(Control::Shutdown(ack)) => {
                    stopped.extend(ack);
                    return false;
                }
                Ok(msg) => {
                    any = true;
                    e.handle(msg);
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
        for e in &mut self.engines {
            e.set_sleeping(asleep);
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
        for e in &mut self.engines {
            let (fd, due) = e.wake_sources();
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
