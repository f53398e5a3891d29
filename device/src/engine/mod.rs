//! The QPIP engine: the paper's doorbell, management, transmit and receive state machines,
//! on a thread of their own that owns every object.
//!
//! The vfio-user control thread talks to the engine only through [`Control`] messages (admin
//! doorbells, kicks, reset) and shared memory it does not own (guest RAM, the doorbell BAR,
//! the interrupt table). The engine never waits for the control thread: it polls while
//! there is work, then sleeps with the protocol of `qpip_abi::doorbell`.
//!
//! Where things are, by the paper's state machines:
//! - management: [`admin`] decodes and dispatches the admin queue's commands (its rings in
//!   `admin::ring`), [`objects`] holds the tables of contexts, CQs, QPs, regions, listeners
//!   and tripwires and owns the shared state of contexts, CQs and QPs (the rest of the
//!   engine changes it only through their named transitions), [`ports`] which QP or
//!   listener holds each port;
//! - doorbell: [`doorbell_scan`] notices producer and consumer indices and CQ arms in the
//!   contexts' doorbell pages ([`doorbell_page`]: one page of guest RAM per context);
//! - transmit: [`send_queues`] gives every QP with work a turn and takes WQEs from its
//!   rings; a QP's kind does the rest through the hooks of [`qp_kinds`] — [`udp`]
//!   (datagrams), [`tcp`] (TCP QPs in stream or message framing, and iWARP QPs in
//!   `tcp::iwarp`: `tcp::tx` takes send WRs into a connection's stream, `tcp::cm` manages
//!   connections);
//! - receive: [`network`] joins the engine to the link through the IPv6 stack and hands
//!   datagrams to [`udp`] and segments to [`tcp`] (`tcp::rx` places bytes into receive
//!   WRs); [`tripwire`] raises completions when a peer's write reaches a watched record.
//!
//! Beside them: [`completion`] writes every CQE, [`events`] holds the asynchronous events
//! waiting for the driver's requests, [`memory`] checks and translates every guest address
//! and [`sges`] a WR's scatter/gather list, [`decode`] parses what the guest wrote,
//! [`secrets`] draws keys, ISNs and cookies; [`thread`] runs engines in turns on an engine
//! thread and [`idle`] decides what it does between turns without work.
//! `docs/architecture.md` in the repository follows a message through them.

pub mod admin;
pub mod completion;
pub mod decode;
pub mod doorbell_page;
pub mod doorbell_scan;
pub mod events;
pub mod idle;
pub mod link;
pub mod memory;
pub mod network;
pub mod objects;
pub mod ports;
pub mod qp_kinds;
pub mod raw;
pub mod secrets;
pub mod send_queues;
pub mod sges;
pub mod tcp;
pub mod thread;
pub mod tripwire;
pub mod udp;

use std::collections::{HashMap, VecDeque};
use std::net::Ipv6Addr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use log::{info, warn};
use qpip_abi::admin::STATS_COUNT;
use vm_memory::{GuestAddressSpace, GuestMemoryAtomic, GuestMemoryMmap};

use crate::backend::none::NoLink;
use crate::irq::Interrupts;
use crate::net::config::NetConfig;
use crate::net::interface::Interface;
use admin::AdminQueue;
use objects::Objects;
use secrets::{KeyGen, Secrets};
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
    /// Stop: the engine leaves its thread and is dropped (its link closed), then the
    /// sender, if any, hears of it.
    Shutdown(Option<Sender<()>>),
}

/// Engine settings fixed at start.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// The function's name in logs (`f0`, `f1`, ... in an adapter).
    pub name: String,
    pub mac: [u8; 6],
    pub addrs: Vec<(Ipv6Addr, u8)>,
    /// What the engine's thread does when it has no work ([`idle`]): how long it polls
    /// on, how, and whether it naps. A single-function `qpipd` starts its thread with it;
    /// an adapter's threads take the adapter's.
    pub idle: idle::IdleConfig,
    /// The link beneath the QPs, if any (`--net`).
    pub network: Option<network::NetworkConfig>,
    /// How long TCP connections keep retransmitting to a silent peer (`--tcp-retries`).
    pub tcp_limits: tcp::TcpLimits,
    /// Pages the function's memory regions may hold in all (`--max-region-pages`): each
    /// costs the device 8 bytes of page list, whatever the guest's pages are.
    pub region_pages: u64,
    /// What the function's TCP may hold of data its QPs have not taken (staged, out of
    /// order), within the adapter's pool (`--tcp-mem`); None: only each connection's own
    /// bounds.
    pub tcp_memory: Option<std::sync::Arc<crate::net::tcp::MemoryPool>>,
    /// For tests only: makes the engine panic on demand, to check that the fault stays in
    /// its function. Set only through this in-process API; nothing a guest writes and no
    /// command-line option reaches it.
    #[doc(hidden)]
    pub fault: FaultInjection,
}

/// A test's trigger for a panic in one engine ([`EngineConfig::fault`]).
#[doc(hidden)]
#[derive(Debug, Clone, Default)]
pub struct FaultInjection(Arc<AtomicBool>);

impl FaultInjection {
    /// The engine panics at the start of its next turn on its thread (once).
    pub fn panic_next_turn(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Whether a panic was asked for (and, if so, forgets it).
    fn take(&self) -> bool {
        self.0.load(Ordering::Relaxed) && self.0.swap(false, Ordering::Relaxed)
    }
}

/// [`EngineConfig::region_pages`] by default: 4 GiB of guest memory registered at once,
/// 8 MiB of page lists in `qpipd` per function.
pub const DEFAULT_REGION_PAGES: u64 = 1 << 20;

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            // A single-function qpipd's one function is named as an adapter's first.
            name: "f0".into(),
            mac: DEFAULT_MAC,
            addrs: Vec::new(),
            idle: idle::IdleConfig::default(),
            network: None,
            tcp_limits: tcp::TcpLimits::default(),
            region_pages: DEFAULT_REGION_PAGES,
            tcp_memory: None,
            fault: FaultInjection::default(),
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
    /// Set by the engine thread when this function's engine panicked and was dropped;
    /// cleared when a reset has built a fresh one. The control thread shows it to the
    /// driver as `STATUS_FAILED`.
    failed: Arc<AtomicBool>,
    /// The function's link is up, as the engine last looked ([`link`]); the control
    /// thread shows it as `STATUS_LINK_UP`.
    link_up: Arc<AtomicBool>,
}

impl Shared {
    pub fn new(ram: GuestMemoryAtomic<GuestMemoryMmap>, irqs: Arc<Interrupts>) -> Self {
        Shared {
            ram,
            irqs,
            stats: Arc::new(Stats::new()),
            failed: Arc::new(AtomicBool::new(false)),
            link_up: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Whether the function's link is up ([`link`]).
    pub fn link_up(&self) -> bool {
        self.link_up.load(Ordering::Acquire)
    }

    fn set_link_up(&self, up: bool) {
        self.link_up.store(up, Ordering::Release);
    }

    /// Whether the function's engine has failed (see [`thread`]) and not been reset since.
    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    fn set_failed(&self, failed: bool) {
        self.failed.store(failed, Ordering::Release);
    }
}

pub struct Engine {
    shared: Shared,
    rx: Receiver<Control>,
    objects: Objects,
    admin: AdminQueue,
    /// Passes without work since the last work (0 while busy, and for callers that drive
    /// the engine themselves): idle passes look at the link only now and then (set by
    /// its [`thread`]).
    idle_passes: u32,
    sleeping: bool,
    /// Reused buffer of contexts with changed doorbell pages.
    scratch_ctxs: Vec<u32>,
    /// The network stack on its link: it owns the device's MAC and addresses, and its
    /// loopback carries what the device sends to itself. Without `--net` the link is
    /// [`crate::backend::none`] and the loopback is all there is.
    net: Interface,
    /// The stack's configuration at start: what a reset returns to.
    net_start: NetConfig,
    tcp_limits: tcp::TcpLimits,
    /// [`EngineConfig::region_pages`].
    region_pages: u64,
    /// [`EngineConfig::tcp_memory`].
    tcp_memory: Option<std::sync::Arc<crate::net::tcp::MemoryPool>>,
    /// TCP connections and the TCP state of QPs.
    tcp: tcp::Tcp,
    /// Asynchronous events and the requests waiting for them.
    events: events::AsyncEvents,
    /// When the link's state is looked at next ([`link`]).
    link_watch: link::LinkWatch,
    /// Completions waiting for room in their CQ, per CQ, in order ([`completion`]).
    deferred: HashMap<u32, VecDeque<qpip_abi::cqe::Cqe>>,
    /// The function's raw Ethernet QP, if any ([`raw`]).
    raw: raw::RawPort,
}

/// The control thread's handle on its function's engine, on an [`thread::EngineThread`].
pub struct EngineHandle {
    tx: Sender<Control>,
    /// The engine thread's wake-up: written after every message, so a sleeping thread wakes
    /// (it sleeps in ppoll(2) on this and on its engines' links).
    wake: Arc<EventFd>,
    /// Keeps the thread running while its engines may get messages.
    _thread: Arc<thread::EngineThread>,
}

impl EngineHandle {
    /// Starts an engine on a thread of its own (a one-function qpipd).
    pub fn start(shared: Shared, config: EngineConfig) -> std::io::Result<EngineHandle> {
        thread::EngineThread::spawn("qpip-engine", config.idle)?.start(shared, config, None)
    }

    pub fn send(&self, msg: Control) {
        if self.tx.send(msg).is_err() {
            warn!("the engine is gone; message dropped");
            return;
        }
        // After the message is queued, so the thread that wakes finds it.
        if let Err(e) = self.wake.write(1) {
            warn!("cannot wake the engine thread: {e}");
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
    /// Stops the engine and waits until it is gone (its link closed), while the thread
    /// serves on for its other engines.
    fn drop(&mut self) {
        let (ack_tx, ack_rx) = mpsc::channel();
        self.send(Control::Shutdown(Some(ack_tx)));
        if ack_rx.recv_timeout(Duration::from_secs(10)).is_err() {
            warn!("the engine did not stop within 10 s");
        }
    }
}

impl Engine {
    /// An engine whose secrets (memory keys, TCP ISNs, SYN cookies) come from the OS.
    pub fn new(shared: Shared, config: EngineConfig, rx: Receiver<Control>) -> Engine {
        Self::with_secrets(shared, config, rx, Secrets::from_os())
    }

    /// As [`Engine::new`] with `secrets` given: for tests that replay a run
    /// ([`Secrets::from_seed`]); a reset draws new ones from the OS all the same.
    pub fn with_secrets(
        shared: Shared,
        config: EngineConfig,
        rx: Receiver<Control>,
        secrets: Secrets,
    ) -> Engine {
        let mut net_start = NetConfig::new(config.mac);
        net_start.addrs = config.addrs.clone();
        net_start.link = false; // until attach_link
        let mut engine = Engine {
            shared,
            rx,
            objects: Objects::new(KeyGen::new(secrets.region_keys)),
            admin: AdminQueue::default(),
            idle_passes: 0,
            sleeping: false,
            scratch_ctxs: Vec::new(),
            net: Interface::new(network::new_stack(&net_start), Box::new(NoLink)),
            net_start,
            tcp: tcp::Tcp::new(
                &secrets,
                config.network.as_ref().map_or(1500, |n| n.mtu),
                config.tcp_limits,
            ),
            tcp_limits: config.tcp_limits,
            region_pages: config.region_pages,
            tcp_memory: config.tcp_memory.clone(),
            events: events::AsyncEvents::default(),
            link_watch: link::LinkWatch::default(),
            deferred: HashMap::new(),
            raw: raw::RawPort::default(),
        };
        engine.tcp.set_memory_pool(engine.tcp_memory.clone());
        engine.shared.set_link_up(engine.net.link_up());
        engine
    }

    pub fn shared(&self) -> &Shared {
        &self.shared
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
            Control::AdminSqTail(t) => self.admin.ring.set_sq_tail(t),
            Control::AdminCqHead(h) => self.admin.ring.set_cq_head(h),
            Control::Kick => self.shared.stats.add(qpip_abi::admin::STAT_KICKS, 1),
            Control::Reset(ack) => {
                self.reset();
                let _ = ack.send(());
            }
            Control::Shutdown(_) => return false,
        }
        true
    }

    /// Destroys every object and forgets all state: the device is as after start.
    pub fn reset(&mut self) {
        // New secrets: nothing of the device before the reset (a key, a sequence number)
        // tells anything of the device after it.
        let secrets = Secrets::from_os();
        self.objects = Objects::new(KeyGen::new(secrets.region_keys));
        self.raw = raw::RawPort::default();
        self.tcp = tcp::Tcp::new(&secrets, self.net_start.mtu, self.tcp_limits);
        // Super-segments where there is a link (as attach_link set them).
        self.tcp.set_gso(self.net_start.link);
        self.tcp.set_memory_pool(self.tcp_memory.clone());
        self.admin = AdminQueue::default();
        self.events = events::AsyncEvents::default();
        self.deferred.clear();
        self.restore_identity();
        self.shared.stats.clear();
        self.sleeping = false;
        info!("engine reset: all objects destroyed");
    }

    /// The engine's link's fd (negative: none) and its earliest timer: what its thread
    /// sleeps on.
    fn wake_sources(&mut self) -> (std::os::fd::RawFd, Option<Instant>) {
        let due = [
            self.net.next_deadline(),
            self.tcp.next_deadline(),
            self.link_deadline(),
        ]
        .into_iter()
        .flatten()
        .min();
        (self.net.fd(), due)
    }

    fn set_sleeping(&mut self, asleep: bool) {
        if self.sleeping == asleep {
            return;
        }
        self.sleeping = asleep;
        let v = asleep as u32;
        let mem = self.shared.ram.memory();
        for (_, c) in self.objects.contexts() {
            c.doorbell()
                .store(&mem, qpip_abi::doorbell::DB_ENGINE_SLEEPING, v);
        }
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
