//! The QPIP engine: the paper's doorbell, management, transmit and receive state machines,
//! on a thread of their own that owns every object.
//!
//! The vfio-user control thread talks to the engine only through [`Control`] messages (admin
//! doorbells, kicks, reset) and shared memory it does not own (guest RAM, the doorbell BAR,
//! the interrupt table). The engine never waits for the control thread: it polls while
//! there is work, then sleeps with the protocol of `qpip_abi::doorbell`.
//!
//! Where things are: [`admin`] runs the admin queue (management), [`doorbells`] scans
//! doorbell pages (doorbell), [`idle`] decides how long to poll before sleeping,
//! [`datapath`] executes UDP send WQEs and places received datagrams (transmit/receive),
//! [`tcp`] joins the device's TCP connections to TCP QPs in three units — `tcp::tx` takes
//! send WRs into a connection's stream, `tcp::rx` places received bytes into receive WRs,
//! `tcp::cm` manages connections —, [`completion`] writes every CQE, [`events`] holds the asynchronous events waiting for the
//! driver's requests, [`network`] joins the engine to the link through the IPv6 stack,
//! [`memory`] checks and translates every guest address, [`decode`] parses what the guest
//! wrote, [`objects`] holds the tables. `docs/architecture.md` in the repository follows a
//! message through them.

pub mod admin;
pub mod completion;
pub mod datapath;
pub mod decode;
pub mod doorbells;
pub mod events;
pub mod idle;
pub mod memory;
pub mod network;
pub mod objects;
pub mod tcp;

use std::collections::{HashMap, VecDeque};
use std::net::Ipv6Addr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use log::{debug, info, warn};
use qpip_abi::admin::STATS_COUNT;
use vm_memory::{GuestAddressSpace, GuestMemoryAtomic, GuestMemoryMmap};

use crate::backend::none::NoLink;
use crate::irq::Interrupts;
use crate::net::config::NetConfig;
use crate::net::interface::Interface;
use admin::AdminQueue;
use objects::Objects;
use std::os::fd::AsRawFd;
use vmm_sys_util::eventfd::EventFd;

/// Messages from the control thread.
#[derive(Debug)]
pub enum Control {
    /// The driver enabled the admin queue (the control thread checked the rings' placement).
    AdminEnable {
        sq: u64,
        cq: u64,
        depth: u32,
    },
    AdminDisable,
    AdminSqTail(u32),
    AdminCqHead(u32),
    /// A write to the kick register.
    Kick,
    /// Destroy everything and acknowledge.
    Reset(Sender<()>),
    Shutdown,
}

/// Engine settings fixed at start.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub mac: [u8; 6],
    pub addrs: Vec<(Ipv6Addr, u8)>,
    /// How long the engine keeps polling after the last piece of work before it sleeps.
    pub idle_poll: Duration,
    /// The link beneath the QPs, if any (`--net`).
    pub network: Option<network::NetworkConfig>,
    /// How long TCP connections keep retransmitting to a silent peer (`--tcp-retries`).
    pub tcp_limits: tcp::TcpLimits,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            mac: DEFAULT_MAC,
            addrs: Vec::new(),
            idle_poll: Duration::from_micros(500),
            network: None,
            tcp_limits: tcp::TcpLimits::default(),
        }
    }
}

/// A locally administered unicast MAC ("QP" in the last bytes); `--mac` sets another.
pub const DEFAULT_MAC: [u8; 6] = [0x02, 0x51, 0x50, 0x00, 0x00, 0x01];

/// The device counters (`QUERY_STATS`), shared so the control thread can log them.
pub struct Stats {
    counters: [AtomicU64; STATS_COUNT as usize],
}

impl Stats {
    fn new() -> Self {
        Stats {
            counters: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    pub fn add(&self, which: u32, n: u64) {
        self.counters[which as usize].fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(&self, which: u32) -> u64 {
        self.counters[which as usize].load(Ordering::Relaxed)
    }

    pub fn snapshot(&self) -> [u64; STATS_COUNT as usize] {
        std::array::from_fn(|i| self.counters[i].load(Ordering::Relaxed))
    }

    fn clear(&self) {
        self.counters
            .iter()
            .for_each(|c| c.store(0, Ordering::Relaxed));
    }
}

/// What the engine shares with the rest of the device.
#[derive(Clone)]
pub struct Shared {
    pub ram: GuestMemoryAtomic<GuestMemoryMmap>,
    pub irqs: Arc<Interrupts>,
    pub stats: Arc<Stats>,
}

impl Shared {
    pub fn new(ram: GuestMemoryAtomic<GuestMemoryMmap>, irqs: Arc<Interrupts>) -> Self {
        Shared {
            ram,
            irqs,
            stats: Arc::new(Stats::new()),
        }
    }
}

pub struct Engine {
    shared: Shared,
    rx: Receiver<Control>,
    pub(crate) objects: Objects,
    pub(crate) admin: AdminQueue,
    idle_poll: Duration,
    /// How long to poll after the last work, adapted to the traffic (at most `idle_poll`).
    spin: idle::SpinBudget,
    /// Passes without work since the last work (0 while busy, and for callers that drive
    /// the engine themselves): idle passes look at the link only now and then.
    pub(crate) idle_passes: u32,
    sleeping: bool,
    /// Reused buffer of contexts with changed doorbell pages.
    scratch_ctxs: Vec<u32>,
    /// Set by [`EngineHandle::start`]: signalled after each control message.
    wake: Option<Arc<EventFd>>,
    /// Messages taken while sleeping without a wake fd (tests), handled next.
    pending: Vec<Control>,
    /// The network stack on its link: it owns the device's MAC and addresses, and its
    /// loopback carries what the device sends to itself. Without `--net` the link is
    /// [`crate::backend::none`] and the loopback is all there is.
    pub(crate) net: Interface,
    /// The stack's configuration at start: what a reset returns to.
    net_start: NetConfig,
    tcp_limits: tcp::TcpLimits,
    /// TCP connections and the TCP state of QPs.
    pub(crate) tcp: tcp::Tcp,
    /// Asynchronous events and the requests waiting for them.
    pub(crate) events: events::AsyncEvents,
    /// Completions waiting for room in their CQ, per CQ, in order ([`completion`]).
    deferred: HashMap<u32, VecDeque<qpip_abi::cqe::Cqe>>,
}

/// The control thread's handle on the engine thread.
pub struct EngineHandle {
    tx: Sender<Control>,
    /// Written after every message, so a sleeping engine wakes (it sleeps in poll(2) on
    /// this and on its network's fd).
    wake: Arc<EventFd>,
    thread: Option<JoinHandle<()>>,
}

impl EngineHandle {
    /// Starts the engine thread.
    pub fn start(shared: Shared, config: EngineConfig) -> std::io::Result<EngineHandle> {
        let (tx, rx) = mpsc::channel();
        let wake = Arc::new(EventFd::new(libc::EFD_NONBLOCK | libc::EFD_CLOEXEC)?);
        let net = config.network.clone();
        let mut engine = Engine::new(shared, config, rx);
        engine.wake = Some(wake.clone());
        if let Some(net) = net {
            engine.attach_network(&net)?;
        }
        let thread = std::thread::Builder::new()
            .name("qpip-engine".into())
            .spawn(move || engine.run())?;
        Ok(EngineHandle {
            tx,
            wake,
            thread: Some(thread),
        })
    }

    pub fn send(&self, msg: Control) {
        if self.tx.send(msg).is_err() {
            warn!("the engine thread is gone; message dropped");
            return;
        }
        // After the message is queued, so the engine that wakes finds it.
        if let Err(e) = self.wake.write(1) {
            warn!("cannot wake the engine: {e}");
        }
    }

    /// Resets the engine and waits until it has destroyed everything.
    pub fn reset(&self) {
        let (ack_tx, ack_rx) = mpsc::channel();
        self.send(Control::Reset(ack_tx));
        if ack_rx.recv_timeout(Duration::from_secs(10)).is_err() {
            warn!("the engine did not acknowledge the reset within 10 s");
        }
    }
}

impl Drop for EngineHandle {
    fn drop(&mut self) {
        self.send(Control::Shutdown);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Engine {
    pub fn new(shared: Shared, config: EngineConfig, rx: Receiver<Control>) -> Engine {
        let mut net_start = NetConfig::new(config.mac);
        net_start.addrs = config.addrs.clone();
        net_start.link = false; // until attach_link
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0x5150)
            ^ (std::process::id() as u64) << 32;
        Engine {
            shared,
            rx,
            objects: Objects::new(seed),
            admin: AdminQueue::default(),
            idle_poll: config.idle_poll,
            spin: idle::SpinBudget::new(config.idle_poll),
            idle_passes: 0,
            sleeping: false,
            scratch_ctxs: Vec::new(),
            wake: None,
            pending: Vec::new(),
            net: Interface::new(network::new_stack(&net_start), Box::new(NoLink)),
            net_start,
            tcp: tcp::Tcp::new(
                seed ^ 0x7463_7000,
                config.network.as_ref().map_or(1500, |n| n.mtu),
                config.tcp_limits,
            ),
            tcp_limits: config.tcp_limits,
            events: events::AsyncEvents::default(),
            deferred: HashMap::new(),
        }
    }

    pub fn shared(&self) -> &Shared {
        &self.shared
    }

    /// The engine thread's loop: handle control messages, run the admin queue, scan
    /// doorbells, move data; poll while busy, sleep when idle.
    fn run(&mut self) {
        info!(
            "engine running (idle poll up to {:?}, adaptive)",
            self.idle_poll
        );
        let mut last_work = Instant::now();
        loop {
            for msg in std::mem::take(&mut self.pending) {
                if !self.handle(msg) {
                    return;
                }
            }
            loop {
                match self.rx.try_recv() {
                    Ok(msg) => {
                        if !self.handle(msg) {
                            return;
                        }
                        last_work = Instant::now();
                        self.idle_passes = 0;
                    }
                    Err(mpsc::TryRecvError::Empty) => break,
                    Err(mpsc::TryRecvError::Disconnected) => return,
                }
            }
            if self.poll_once() {
                last_work = Instant::now();
                self.idle_passes = 0;
                continue;
            }
            self.idle_passes = self.idle_passes.wrapping_add(1);
            if last_work.elapsed() < self.spin.budget() {
                if self.idle_passes.is_multiple_of(idle::YIELD_EVERY) {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
                continue;
            }
            // Idle: publish "sleeping", then look once more (see qpip_abi::doorbell), the
            // link included.
            self.idle_passes = 0;
            self.set_sleeping(true);
            std::sync::atomic::fence(Ordering::SeqCst);
            if self.poll_once() {
                self.set_sleeping(false);
                last_work = Instant::now();
                continue;
            }
            self.shared.stats.add(qpip_abi::admin::STAT_SLEEPS, 1);
            debug!("engine sleeping");
            let slept = Instant::now();
            let by_work = self.sleep();
            self.spin.after_sleep(slept.elapsed(), by_work);
            self.set_sleeping(false);
            last_work = Instant::now();
        }
    }

    /// One pass over everything that may have work. Returns whether anything happened.
    pub fn poll_once(&mut self) -> bool {
        let mem = self.shared.ram.memory();
        let mut did = self.process_admin(&mem);
        // Doorbells before anything that completes work: a CQ armed without a kick while
        // the engine slept (abi::doorbell) is seen before the completion it waits for.
        did |= self.scan_doorbells(&mem);
        did |= self.drain_deferred(&mem);
        did |= self.run_send_queues(&mem);
        did |= self.poll_network(&mem);
        did |= self.poll_tcp(&mem);
        did |= self.flush_tcp();
        did |= self.deliver_events(&mem);
        did | self.tcp.busy() | self.net.stack.loopback_pending()
    }

    /// Handles one control message; false means stop. Public so that tests and fuzz
    /// targets can drive an engine synchronously on their own thread: build it with
    /// [`Engine::new`], feed it messages with `handle`, and let it work with
    /// [`Engine::poll_once`].
    pub fn handle(&mut self, msg: Control) -> bool {
        match msg {
            Control::AdminEnable { sq, cq, depth } => {
                self.admin.enable(sq, cq, depth);
                self.events.forget_requests();
            }
            Control::AdminDisable => {
                self.admin.disable();
                self.events.forget_requests();
            }
            Control::AdminSqTail(t) => self.admin.sq_tail = t,
            Control::AdminCqHead(h) => self.admin.cq_head = h,
            Control::Kick => self.shared.stats.add(qpip_abi::admin::STAT_KICKS, 1),
            Control::Reset(ack) => {
                self.reset();
                let _ = ack.send(());
            }
            Control::Shutdown => return false,
        }
        true
    }

    /// Destroys every object and forgets all state: the device is as after start.
    pub fn reset(&mut self) {
        let seed = self.objects.new_key() as u64;
        self.objects = Objects::new(seed);
        self.tcp = tcp::Tcp::new(seed.rotate_left(17), self.net_start.mtu, self.tcp_limits);
        // Super-segments where there is a link (as attach_link set them).
        self.tcp.set_gso(self.net_start.link);
        self.admin = AdminQueue::default();
        self.events = events::AsyncEvents::default();
        self.deferred.clear();
        self.restore_identity();
        self.shared.stats.clear();
        self.sleeping = false;
        info!("engine reset: all objects destroyed");
    }

    fn set_sleeping(&mut self, asleep: bool) {
        if self.sleeping == asleep {
            return;
        }
        self.sleeping = asleep;
        let v = asleep as u32;
        let mem = self.shared.ram.memory();
        for c in self.objects.contexts.values() {
            c.doorbell
                .store(&mem, qpip_abi::doorbell::DB_ENGINE_SLEEPING, v);
        }
    }

    /// Blocks until a control message is signalled, the network has a frame, or the next
    /// network timer is due. Messages themselves are taken by the main loop. Returns
    /// whether work (a message, a frame) ended the sleep rather than a timer.
    fn sleep(&mut self) -> bool {
        let Some(wake) = self.wake.clone() else {
            // Driven without a handle (tests): nothing can wake us but a message.
            if let Ok(msg) = self.rx.recv() {
                self.pending.push(msg);
            }
            return true;
        };
        let mut fds = vec![libc::pollfd {
            fd: wake.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        if self.net.fd() >= 0 {
            fds.push(libc::pollfd {
                fd: self.net.fd(),
                events: libc::POLLIN,
                revents: 0,
            });
        }
        let net_deadline = self.net.next_deadline();
        let deadline = match (net_deadline, self.tcp.next_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        // To the microsecond, not poll(2)'s millisecond: a timer due in 0.9 ms would
        // otherwise be a zero timeout, and the engine would spin in and out of "sleep"
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
                warn!("engine poll failed: {e}");
            }
        }
        let _ = wake.read(); // reset the counter; the messages are in the channel
        r > 0 && fds.iter().any(|f| f.revents != 0)
    }

    /// Waits for a message for at most `timeout` and handles it (used by tests driving the
    /// engine on their own thread). Returns false when told to stop.
    pub fn wait_and_handle(&mut self, timeout: Duration) -> bool {
        match self.rx.recv_timeout(timeout) {
            Ok(m) => self.handle(m),
            Err(RecvTimeoutError::Timeout) => true,
            Err(RecvTimeoutError::Disconnected) => false,
        }
    }
}
