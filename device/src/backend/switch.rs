//! An Ethernet switch inside the adapter, as the embedded switch of an SR-IOV NIC: several
//! functions, one [`SwitchPort`] each (a [`Backend`] a function's stack sits on exactly as
//! on a TAP), and at most one uplink (any backend: a TAP, a cable ...) to everyone else.
//!
//! Who a function is: each port has an [`Identity`] (its function's MAC and IP addresses,
//! IPv4 ones mapped), claimed by the function's stack ([`Backend::claim_identity`]) when it starts
//! and whenever the guest changes it (SET_MAC, ADD_ADDR, DEL_ADDR, a reset). A claim is
//! refused if the MAC or an address (the link-local one from the MAC included) is another
//! function's, now or as configured ([`PortOptions::reserved`]). A function's MAC is pinned
//! to its port in the table: nothing learned moves it. A port that is not
//! [`PortOptions::trusted`] sends only as itself: a frame whose source MAC is not its
//! identity's, an IPv6 frame whose source address is none of its addresses (nor `::`,
//! which duplicate address detection uses), an IPv4 frame whose source address is none of
//! its IPv4 addresses (nor 0.0.0.0 in a DHCP client's datagram), or an ARP message whose sender is not its MAC and one of its IPv4
//! addresses (or 0.0.0.0, an address probe), is dropped and counted
//! ([`PortStats::spoofed`]); it needs no learning (its one address is pinned). Frames of
//! other EtherTypes are checked by MAC only. A trusted port (a function that bridges others behind it) sends as anyone,
//! and its other sources are learned; it can still not take another function's MAC.
//!
//! Otherwise it is a learning bridge. A frame from the uplink or a trusted port teaches it
//! on which port its source MAC lives; a frame for a MAC it knows goes to that port only,
//! and a frame for any other (unknown unicast, broadcast, multicast) is flooded to every
//! port and the uplink, but never back out of the port it came in on. A learned MAC seen
//! on another port moves there; a function's never does (from the uplink such a frame is
//! dropped as spoofed). Each port learns at most [`SwitchConfig::port_macs`] addresses
//! ([`PORT_MACS`] by default) and the table at most [`MAC_TABLE`] in all, so one port
//! sending from countless addresses can neither push out nor crowd out anyone else's.
//! A new address beyond its port's share is not learned — frames to it keep being flooded
//! — and is counted ([`PortStats::not_learned`]), unless some of the port's own addresses
//! have not been seen for [`SwitchConfig::mac_age`] ([`MAC_AGE`]): those are forgotten to
//! make room (looked for at most once a second per port).
//!
//! Frames between functions never leave memory: each port has a receive queue of owned
//! buffers, at most [`PORT_QUEUE`] frames; a frame that finds it full is dropped and
//! counted (as a NIC ring drops it), the sender never waits. Only a flood copies a frame.
//! TCP super-frames ([`Backend::send_gso`]) go whole to the functions (their stacks take
//! them, as over the memory wire with offloads) and to the uplink through its own
//! `send_gso`, which cuts them when it has no offloads.
//!
//! Nothing here trusts the bytes sent in: a frame shorter than an Ethernet header or
//! longer than [`MAX_FRAME`] is dropped and counted, and any other is forwarded by its
//! first twelve bytes alone (above Ethernet, only an IP source address or ARP's sender is
//! looked at).
//!
//! Readiness: each port has an eventfd, signalled while its queue holds frames, and an
//! epoll fd watching that eventfd and the uplink's fd; the epoll fd is the port's
//! [`Backend::fd`], so an engine sleeps in poll(2) until a frame is queued for it or the
//! uplink may have one. A port's `recv` takes from its queue; when that is empty (and
//! every [`UPLINK_BATCH`] frames, so busy functions do not starve the uplink) it pumps up
//! to [`UPLINK_BATCH`] frames from the uplink, forwarding each by MAC like any other, and
//! takes again. Only one engine pumps at a time (`try_lock`: the others go on with their
//! own work; the frames for them arrive in their queues).
//!
//! Link state: a function's link follows the uplink's ([`Backend::link_up`]), as SR-IOV
//! VFs in "auto" link mode follow their port; a switch without an uplink is up (its
//! functions still reach each other). Whichever port asks first looks at the uplink, at
//! most twice every [`LINK_CHECK`]; the others read the answer. While the uplink is down,
//! frames for it are dropped and counted ([`PortStats::link_down`]).

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::Ipv6Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};
use std::time::{Duration, Instant};

use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use super::{Backend, IdentityTaken, LINK_CHECK, MAX_FRAME};

mod identity;

pub use identity::{sent_as, Identity, PortOptions};

/// Frames a port's receive queue holds; beyond, frames for it are dropped.
pub const PORT_QUEUE: usize = 1024;
/// MAC addresses the switch learns at most, all ports together (the functions' own,
/// pinned, come on top; see the module text for what happens beyond).
pub const MAC_TABLE: usize = 4096;
/// MAC addresses one port (the uplink, a trusted function's) learns at most, by default.
pub const PORT_MACS: usize = 1024;
/// A learned address not seen for this long may be forgotten to make room on its port
/// (as a bridge's ageing time; Linux's default is the same 300 s).
pub const MAC_AGE: Duration = Duration::from_secs(300);
/// A port whose share is full looks for expired addresses at most this often, so that a
/// flood of new addresses costs a scan of the table once a second, not once a frame.
const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// Frames one pump of the uplink forwards at most, so that the engine doing it gets back
/// to its own function soon.
pub const UPLINK_BATCH: usize = 64;
/// Destination MAC, source MAC, EtherType.
const ETH_HEADER: usize = 14;

pub type Mac = [u8; 6];

/// A port of the switch: a function's, or the uplink.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortId {
    Port(usize),
    Uplink,
}

/// What went through one port, counted by the switch. "In" is into the switch (a
/// function's send, a frame from the uplink), "out" is out of it (queued for a function,
/// taken by the uplink). A TCP super-frame counts once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortStats {
    pub frames_in: u64,
    pub bytes_in: u64,
    pub frames_out: u64,
    pub bytes_out: u64,
    /// Frames for this port dropped because its queue was full (the uplink: refused by
    /// its backend, or failed there).
    pub queue_full: u64,
    /// Frames for this port dropped because its link was down (the uplink's).
    pub link_down: u64,
    /// Frames that came in here and were flooded (unknown unicast, broadcast, multicast).
    pub flooded: u64,
    /// Frames that came in here for a MAC learned on this same port: not forwarded.
    pub filtered: u64,
    /// Frames that came in here shorter than an Ethernet header: dropped.
    pub too_short: u64,
    /// Frames that came in here longer than [`MAX_FRAME`]: dropped.
    pub too_long: u64,
    /// Frames dropped because they came in as someone else: from a function that is not
    /// trusted, a source MAC not its own or an IP source (or ARP sender) none of its
    /// addresses; from the
    /// uplink, a function's MAC as the source (a spoof or a loop). The function's address
    /// stays where it is.
    pub spoofed: u64,
    /// New source MACs of frames that came in here and were not learned: this port's
    /// share of the table ([`SwitchConfig::port_macs`]) or the table was full. The frames
    /// were forwarded all the same; frames to those addresses are flooded.
    pub not_learned: u64,
}

/// The MAC table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TableStats {
    /// Addresses learned now (not counting the functions' own).
    pub learned: usize,
    /// Functions' own addresses, pinned to their ports.
    pub pinned: usize,
    /// New addresses not learned, every port's together ([`PortStats::not_learned`]).
    pub refused: u64,
    /// Learned addresses forgotten after [`SwitchConfig::mac_age`] to make room.
    pub aged: u64,
}

/// The switch's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SwitchConfig {
    /// MAC addresses each port learns at most.
    pub port_macs: usize,
    /// How long a learned address is kept for sure without being seen again.
    pub mac_age: Duration,
}

impl Default for SwitchConfig {
    fn default() -> SwitchConfig {
        SwitchConfig {
            port_macs: PORT_MACS,
            mac_age: MAC_AGE,
        }
    }
}

/// A MAC table entry.
#[derive(Debug, Clone, Copy)]
struct Entry {
    at: PortId,
    /// A function's own MAC: never moved, never aged, not counted in any port's share.
    pinned: bool,
    /// When a frame from it was last seen (learned entries).
    seen: Instant,
}

/// What a port learned.
#[derive(Debug, Default)]
struct Learning {
    /// Learned entries on this port.
    count: usize,
    /// When its expired entries may be looked for again.
    next_sweep: Option<Instant>,
}

/// Locks, whether or not a thread panicked while holding the lock: every critical
/// section here leaves the state consistent between its steps (at worst a port's eventfd
/// is signalled with its queue empty, which its next `recv` repairs).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn try_lock<T>(m: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

fn is_group(mac: &Mac) -> bool {
    mac[0] & 1 != 0
}

struct Slot {
    name: String,
    queue: VecDeque<Vec<u8>>,
    /// Signalled while `queue` is not empty: written and read under the state lock, so a
    /// wake-up is never lost between a push and a pop. None once the port is gone.
    ready: Option<EventFd>,
    stats: PortStats,
    options: PortOptions,
    /// The identity its function claimed (kept while the port is closed, so that nobody
    /// takes it meanwhile). None: nothing claimed yet, and an untrusted port sends nothing.
    identity: Option<Identity>,
    /// `identity`'s IPv6 and IPv4 sources, for the check of every frame.
    sources: Vec<[u8; 16]>,
    sources4: Vec<[u8; 4]>,
    learning: Learning,
    /// A spoofed frame of this port was logged; further ones are only counted.
    spoof_logged: bool,
}

impl Slot {
    fn new(name: &str, options: PortOptions) -> Slot {
        Slot {
            name: name.to_string(),
            queue: VecDeque::new(),
            ready: None,
            stats: PortStats::default(),
            options,
            identity: None,
            sources: Vec::new(),
            sources4: Vec::new(),
            learning: Learning::default(),
            spoof_logged: false,
        }
    }
}

/// Everything a frame's forwarding reads or changes, under one lock. One lock is enough:
/// every frame needs the table (to learn its source and look up its destination) and
/// then one queue or, for a flood, all of them, so finer locks would all be taken by
/// every frame anyway; each critical section is a lookup and a push (a flood: one per
/// port), short beside the stack work an engine does per frame.
struct State {
    ports: Vec<Slot>,
    table: HashMap<Mac, Entry>,
    /// Learned (not pinned) entries of `table`, every port's.
    learned: usize,
    /// What the uplink learned.
    uplink_learning: Learning,
    config: SwitchConfig,
    table_stats: TableStats,
    has_uplink: bool,
    /// The uplink's counters of frames that came in from it (what it took of the frames
    /// sent to it is counted in [`Uplink`], known only while holding it).
    uplink_in: PortStats,
}

impl State {
    fn stats_mut(&mut self, port: PortId) -> &mut PortStats {
        match port {
            PortId::Port(i) => &mut self.ports[i].stats,
            PortId::Uplink => &mut self.uplink_in,
        }
    }

    fn learning_mut(&mut self, port: PortId) -> &mut Learning {
        match port {
            PortId::Port(i) => &mut self.ports[i].learning,
            PortId::Uplink => &mut self.uplink_learning,
        }
    }

    /// Forwards a frame that came in on `from`: the functions' queues get theirs now; the
    /// uplink's copy, if it is to have one, is returned, to be sent once the state lock
    /// is released. `now`, if the caller has it (learning needs it; an untrusted
    /// function's frame does not).
    fn forward(&mut self, from: PortId, frame: Vec<u8>, now: Option<Instant>) -> Option<Vec<u8>> {
        let stats = self.stats_mut(from);
        if frame.len() < ETH_HEADER {
            stats.too_short += 1;
            return None;
        }
        if frame.len() > MAX_FRAME {
            stats.too_long += 1;
            return None;
        }
        stats.frames_in += 1;
        stats.bytes_in += frame.len() as u64;
        let dst: Mac = frame[0..6].try_into().expect("6 bytes");
        let src: Mac = frame[6..12].try_into().expect("6 bytes");
        let as_itself = match from {
            PortId::Port(i) if !self.ports[i].options.trusted => {
                self.ports[i].sends_as_itself(&frame)
            }
            _ => self.learn(src, from, now.unwrap_or_else(Instant::now)),
        };
        if !as_itself {
            self.spoofed(from, &src);
            return None;
        }
        let to = if is_group(&dst) {
            None
        } else {
            self.table.get(&dst).map(|e| e.at)
        };
        match to {
            Some(to) if to == from => {
                self.stats_mut(from).filtered += 1;
                None
            }
            Some(PortId::Port(i)) => {
                self.deliver(i, frame);
                None
            }
            Some(PortId::Uplink) => Some(frame),
            None => self.flood(from, frame),
        }
    }

    /// To every open port but `from`, and to the uplink unless the frame came from it.
    /// The last receiver takes the frame itself, the others a copy.
    fn flood(&mut self, from: PortId, frame: Vec<u8>) -> Option<Vec<u8>> {
        self.stats_mut(from).flooded += 1;
        let to_uplink = self.has_uplink && from != PortId::Uplink;
        let receivers: Vec<usize> = (0..self.ports.len())
            .filter(|&i| PortId::Port(i) != from && self.ports[i].ready.is_some())
            .collect();
        let (copies, last) = if to_uplink {
            (&receivers[..], None)
        } else {
            match receivers.split_last() {
                Some((&last, copies)) => (copies, Some(last)),
                None => (&receivers[..], None),
            }
        };
        for &i in copies {
            self.deliver(i, frame.clone());
        }
        match last {
            Some(i) => {
                self.deliver(i, frame);
                None
            }
            None => to_uplink.then_some(frame),
        }
    }

    fn deliver(&mut self, port: usize, frame: Vec<u8>) {
        let slot = &mut self.ports[port];
        let Some(ready) = &slot.ready else {
            return; // gone (its addresses were forgotten with it; a flood skips it)
        };
        if slot.queue.len() >= PORT_QUEUE {
            slot.stats.queue_full += 1;
            return;
        }
        slot.stats.frames_out += 1;
        slot.stats.bytes_out += frame.len() as u64;
        slot.queue.push_back(frame);
        if slot.queue.len() == 1 {
            // Cannot fail: the counter is read back to 0 whenever the queue drains.
            let _ = ready.write(1);
        }
    }

    fn take(&mut self, port: usize) -> Option<Vec<u8>> {
        let slot = &mut self.ports[port];
        let frame = slot.queue.pop_front();
        if slot.queue.is_empty() {
            if let Some(ready) = &slot.ready {
                let _ = ready.read(); // WouldBlock when it was not signalled
            }
        }
        frame
    }

    /// Learns where `src` is, from a frame of the uplink or of a trusted port. False for a
    /// frame from the uplink that claims a function's MAC: a function's address is pinned
    /// to its port (as an SR-IOV switch pins its functions' addresses), so nobody outside
    /// can draw its traffic away. A trusted port's frame with another function's MAC goes
    /// on without moving it.
    fn learn(&mut self, src: Mac, on: PortId, now: Instant) -> bool {
        if is_group(&src) {
            return true; // a group address is never a sender's
        }
        if let Some(e) = self.table.get_mut(&src) {
            if e.pinned {
                return e.at == on || on != PortId::Uplink;
            }
            if e.at == on {
                e.seen = now;
                return true;
            }
            // A learned address moves: off its old port, onto this one if there is room.
            let old = e.at;
            self.forget(&src, old);
        }
        if !self.has_room(on, now) {
            self.stats_mut(on).not_learned += 1;
            self.table_stats.refused += 1;
            return true;
        }
        self.table.insert(
            src,
            Entry {
                at: on,
                pinned: false,
                seen: now,
            },
        );
        self.learning_mut(on).count += 1;
        self.learned += 1;
        true
    }

    /// Removes learned entry `mac` of port `at`.
    fn forget(&mut self, mac: &Mac, at: PortId) {
        self.table.remove(mac);
        self.learning_mut(at).count -= 1;
        self.learned -= 1;
    }

    /// Whether port `on` may learn one more address: below its share and the table's
    /// bound, or its share made room for by forgetting its addresses not seen for the
    /// age (looked for at most once per [`SWEEP_EVERY`], or the age if shorter).
    fn has_room(&mut self, on: PortId, now: Instant) -> bool {
        let cap = self.config.port_macs;
        let age = self.config.mac_age;
        let l = self.learning_mut(on);
        if l.count >= cap {
            if l.next_sweep.is_some_and(|t| now < t) {
                return false;
            }
            l.next_sweep = Some(now + SWEEP_EVERY.min(age));
            let before = self.table.len();
            self.table.retain(|_, e| {
                e.pinned || e.at != on || now.saturating_duration_since(e.seen) < age
            });
            let aged = before - self.table.len();
            self.learning_mut(on).count -= aged;
            self.learned -= aged;
            self.table_stats.aged += aged as u64;
            if self.learning_mut(on).count >= cap {
                return false;
            }
        }
        self.learned < MAC_TABLE
    }

    /// Pins function `port`'s MAC to it, taking it from whoever had learned it.
    fn pin(&mut self, mac: Mac, port: usize) {
        if let Some(e) = self.table.get(&mac).copied() {
            if !e.pinned {
                self.forget(&mac, e.at);
            }
        }
        self.table.insert(
            mac,
            Entry {
                at: PortId::Port(port),
                pinned: true,
                seen: Instant::now(),
            },
        );
    }
}

/// The uplink, under its own lock: sending to it and pumping it may take a while (a
/// system call per frame) and need not hold up the functions' frames between each other.
/// Lock order: the uplink, then the state (a pump forwards while holding the uplink, so
/// its frames keep their order); the state lock is never held while taking this one.
struct Uplink {
    backend: Box<dyn Backend>,
    buf: Vec<u8>,
    /// Of the frames given to the uplink: frames and bytes it took, and `queue_full` for
    /// those it refused or failed.
    out: PortStats,
    /// The first hard error sending to it was logged; further ones are only counted.
    error_logged: bool,
    /// When its link state was last looked at.
    link_checked: Option<Instant>,
}

impl Uplink {
    fn send(&mut self, frame: Vec<u8>, gso: u16) {
        let len = frame.len() as u64;
        match self.backend.send_owned(frame, gso) {
            Ok(()) => {
                self.out.frames_out += 1;
                self.out.bytes_out += len;
            }
            Err(e) if e.kind() == io::ErrorKind::NetworkDown => self.out.link_down += 1,
            Err(e) => {
                self.out.queue_full += 1;
                if e.kind() != io::ErrorKind::WouldBlock && !self.error_logged {
                    log::warn!(
                        "switch uplink {}: cannot send: {e} (counted from now on)",
                        self.backend.describe()
                    );
                    self.error_logged = true;
                }
            }
        }
    }

    /// The next frame from the uplink, in a buffer of its size.
    fn recv(&mut self) -> io::Result<Option<Vec<u8>>> {
        let Some(n) = self.backend.recv_owned(&mut self.buf)? else {
            return Ok(None);
        };
        let n = n.min(self.buf.len());
        if n * 2 < self.buf.len() {
            // A backend that copies into the buffer: keep the large buffer for the next
            // frame, queue a copy of the size of this one.
            return Ok(Some(self.buf[..n].to_vec()));
        }
        let mut frame = std::mem::take(&mut self.buf);
        frame.truncate(n);
        Ok(Some(frame))
    }
}

/// The switch, shared by the ports (and the engines they belong to).
pub struct Switch {
    state: Mutex<State>,
    uplink: Option<Mutex<Uplink>>,
    /// The uplink's fd (or -1), which every port's epoll watches.
    uplink_fd: RawFd,
    uplink_name: Option<String>,
    /// The uplink's link state as last looked at (up without an uplink).
    uplink_up: AtomicBool,
}

impl Switch {
    /// A switch without ports yet; frames for no function go to `uplink` (or nowhere).
    pub fn new(uplink: Option<Box<dyn Backend>>) -> Arc<Switch> {
        Self::with_config(uplink, SwitchConfig::default())
    }

    /// As [`Switch::new`], with `config`.
    pub fn with_config(mut uplink: Option<Box<dyn Backend>>, config: SwitchConfig) -> Arc<Switch> {
        let uplink_up = uplink.as_mut().is_none_or(|b| b.link_up());
        let uplink_fd = uplink.as_ref().map_or(-1, |b| b.fd());
        let uplink_name = uplink.as_ref().map(|b| b.describe());
        Arc::new(Switch {
            state: Mutex::new(State {
                ports: Vec::new(),
                table: HashMap::new(),
                learned: 0,
                uplink_learning: Learning::default(),
                config,
                table_stats: TableStats::default(),
                has_uplink: uplink.is_some(),
                uplink_in: PortStats::default(),
            }),
            uplink: uplink.map(|backend| {
                Mutex::new(Uplink {
                    backend,
                    buf: Vec::new(),
                    out: PortStats::default(),
                    error_logged: false,
                    link_checked: Some(Instant::now()),
                })
            }),
            uplink_fd,
            uplink_name,
            uplink_up: AtomicBool::new(uplink_up),
        })
    }

    /// Adds a port (one per function); `name` is for logs. Its index
    /// ([`SwitchPort::index`]) is the next one: 0, 1, 2 ..., except that a port named as
    /// one that was closed takes that one's place again, its counters going on (a
    /// function that starts afresh for its next guest keeps its port, and a function
    /// restarted any number of times costs one slot). Fails only when the system has no
    /// file descriptors left, or when a port of that name is open.
    pub fn port(self: &Arc<Self>, name: &str) -> io::Result<SwitchPort> {
        let ready = EventFd::new(EFD_NONBLOCK)?;
        let epoll = readiness(&[ready.as_raw_fd(), self.uplink_fd])?;
        let mut s = lock(&self.state);
        let index = match s.ports.iter().position(|p| p.name == name) {
            Some(i) if s.ports[i].ready.is_some() => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("switch port {name} is open"),
                ))
            }
            Some(i) => {
                s.ports[i].ready = Some(ready);
                // Its identity, kept while it was closed, is its own again at once.
                if let Some(mac) = s.ports[i].identity.as_ref().map(|id| id.mac) {
                    s.pin(mac, i);
                }
                i
            }
            None => {
                let mut slot = Slot::new(name, PortOptions::default());
                slot.ready = Some(ready);
                s.ports.push(slot);
                s.ports.len() - 1
            }
        };
        Ok(SwitchPort {
            switch: self.clone(),
            index,
            epoll,
            name: name.to_string(),
            since_pump: 0,
        })
    }

    /// Sets up the port of function `name` before it opens ([`Switch::port`] then takes
    /// this place): whether it is trusted, and the identity reserved for it. The ports
    /// declared take indices 0, 1, 2 ... in the order of their declaration.
    pub fn declare(&self, name: &str, options: PortOptions) {
        let mut s = lock(&self.state);
        match s.ports.iter().position(|p| p.name == name) {
            Some(i) => s.ports[i].options = options,
            None => s.ports.push(Slot::new(name, options)),
        }
    }

    /// Function `port` claims `identity` ([`Backend::claim_identity`]).
    pub fn claim(&self, port: usize, identity: Identity) -> Result<(), IdentityTaken> {
        lock(&self.state).claim(port, identity)
    }

    /// Port `port`'s counters (kept after the port is gone); None if there was no such port.
    pub fn port_stats(&self, port: usize) -> Option<PortStats> {
        lock(&self.state).ports.get(port).map(|p| p.stats)
    }

    /// Every port's name and counters, open or closed, in the order they were made.
    pub fn ports(&self) -> Vec<(String, PortStats)> {
        lock(&self.state)
            .ports
            .iter()
            .map(|p| (p.name.clone(), p.stats))
            .collect()
    }

    /// The uplink's counters; None without an uplink.
    pub fn uplink_stats(&self) -> Option<PortStats> {
        let uplink = self.uplink.as_ref()?;
        let mut stats = lock(&self.state).uplink_in;
        let out = lock(uplink).out;
        stats.frames_out = out.frames_out;
        stats.bytes_out = out.bytes_out;
        stats.queue_full = out.queue_full;
        stats.link_down = out.link_down;
        Some(stats)
    }

    /// Where `mac` was learned, if it was.
    pub fn lookup(&self, mac: &Mac) -> Option<PortId> {
        lock(&self.state).table.get(mac).map(|e| e.at)
    }

    pub fn table_stats(&self) -> TableStats {
        let s = lock(&self.state);
        TableStats {
            learned: s.learned,
            pinned: s.table.len() - s.learned,
            ..s.table_stats
        }
    }

    /// For logs: `switch (ports f0, f1; uplink tap:qpip0)`.
    pub fn describe(&self) -> String {
        let s = lock(&self.state);
        let ports: Vec<&str> = s
            .ports
            .iter()
            .filter(|p| p.ready.is_some())
            .map(|p| p.name.as_str())
            .collect();
        format!(
            "switch (ports {}; uplink {})",
            if ports.is_empty() {
                "none".to_string()
            } else {
                ports.join(", ")
            },
            self.uplink_name.as_deref().unwrap_or("none")
        )
    }

    fn send_from(&self, port: usize, frame: Vec<u8>, gso: u16) {
        let up = lock(&self.state).forward(PortId::Port(port), frame, None);
        if let (Some(frame), Some(uplink)) = (up, &self.uplink) {
            let mut uplink = lock(uplink);
            if self.uplink_up.load(Ordering::Relaxed) {
                uplink.send(frame, gso);
            } else {
                uplink.out.link_down += 1;
            }
        }
    }

    /// Whether the uplink's link is up (true without an uplink), looked at again if the
    /// last look is older than half a [`LINK_CHECK`] and nobody else holds the uplink
    /// (else the last answer).
    fn uplink_up(&self) -> bool {
        if let Some(mut uplink) = self.uplink.as_ref().and_then(try_lock) {
            let now = Instant::now();
            if uplink
                .link_checked
                .is_none_or(|t| now.saturating_duration_since(t) >= LINK_CHECK / 2)
            {
                uplink.link_checked = Some(now);
                let up = uplink.backend.link_up();
                self.uplink_up.store(up, Ordering::Relaxed);
            }
        }
        self.uplink_up.load(Ordering::Relaxed)
    }

    fn take(&self, port: usize) -> Option<Vec<u8>> {
        lock(&self.state).take(port)
    }

    /// Forwards up to [`UPLINK_BATCH`] frames from the uplink, unless another thread is
    /// at it already.
    fn pump_uplink(&self) -> io::Result<()> {
        let Some(uplink) = &self.uplink else {
            return Ok(());
        };
        let Some(mut uplink) = try_lock(uplink) else {
            return Ok(());
        };
        // One clock reading for the batch: what learning needs is seconds.
        let now = Instant::now();
        for _ in 0..UPLINK_BATCH {
            let Some(frame) = uplink.recv()? else {
                break;
            };
            // Nothing from the uplink goes back to it.
            let _ = lock(&self.state).forward(PortId::Uplink, frame, Some(now));
        }
        Ok(())
    }

    fn close(&self, port: usize) {
        let mut s = lock(&self.state);
        let slot = &mut s.ports[port];
        slot.queue.clear();
        slot.ready = None;
        // What it learned goes, and its own MAC is unpinned (frames for it are flooded
        // until it opens again); its identity stays claimed.
        let learned = std::mem::take(&mut slot.learning.count);
        s.learned -= learned;
        s.table.retain(|_, e| e.at != PortId::Port(port));
    }
}

/// An epoll fd, level-triggered, readable while any of `fds` (the negative ones left out)
/// is readable.
fn readiness(fds: &[RawFd]) -> io::Result<OwnedFd> {
    // SAFETY: epoll_create1 takes no pointers; it returns a new descriptor or -1.
    let raw = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a new descriptor nothing else owns.
    let epoll = unsafe { OwnedFd::from_raw_fd(raw) };
    for &fd in fds.iter().filter(|&&fd| fd >= 0) {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: fd as u64,
        };
        // SAFETY: both descriptors are open, and `ev` is a valid epoll_event.
        if unsafe { libc::epoll_ctl(raw, libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(epoll)
}

/// One function's port: the backend its stack sits on. Dropping it takes the port out of
/// the switch (its queue and the addresses learned on it are forgotten).
pub struct SwitchPort {
    switch: Arc<Switch>,
    index: usize,
    epoll: OwnedFd,
    name: String,
    /// Frames taken from the queue since the uplink was last pumped.
    since_pump: usize,
}

impl SwitchPort {
    /// This port's index in the switch ([`Switch::port_stats`], [`PortId::Port`]).
    pub fn index(&self) -> usize {
        self.index
    }

    pub fn switch(&self) -> &Arc<Switch> {
        &self.switch
    }

    pub fn stats(&self) -> PortStats {
        self.switch
            .port_stats(self.index)
            .expect("a port's slot stays")
    }

    /// The next frame for this port: from its queue, else (and every [`UPLINK_BATCH`]
    /// frames) after pumping the uplink. An error of the uplink is returned only when no
    /// frame came.
    fn next_frame(&mut self) -> io::Result<Option<Vec<u8>>> {
        if self.since_pump < UPLINK_BATCH {
            if let Some(f) = self.switch.take(self.index) {
                self.since_pump += 1;
                return Ok(Some(f));
            }
        }
        self.since_pump = 0;
        let pumped = self.switch.pump_uplink();
        match self.switch.take(self.index) {
            Some(f) => Ok(Some(f)),
            None => pumped.map(|()| None),
        }
    }
}

impl Backend for SwitchPort {
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        self.send_owned(frame.to_vec(), 0)
    }

    /// Super-frames go whole to the other functions and to the uplink's `send_gso`.
    fn gso(&self) -> bool {
        true
    }

    fn send_gso(&mut self, frame: &[u8], mss: u16) -> io::Result<()> {
        self.send_owned(frame.to_vec(), mss)
    }

    /// The frame's buffer itself goes to its port's queue (a flood's other receivers get
    /// copies). Never refused: drops past the switch are counted there, as beyond a NIC's
    /// port.
    fn send_owned(&mut self, frame: Vec<u8>, gso: u16) -> io::Result<()> {
        self.switch.send_from(self.index, frame, gso);
        Ok(())
    }

    fn claim_identity(&mut self, mac: Mac, addrs: &[Ipv6Addr]) -> Result<(), IdentityTaken> {
        self.switch.claim(
            self.index,
            Identity {
                mac,
                addrs: addrs.to_vec(),
            },
        )
    }

    /// The frame's buffer itself comes out of the queue.
    fn recv_owned(&mut self, buf: &mut Vec<u8>) -> io::Result<Option<usize>> {
        Ok(self.next_frame()?.map(|f| {
            *buf = f;
            buf.len()
        }))
    }

    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        Ok(self.next_frame()?.map(|f| {
            let n = f.len().min(buf.len());
            buf[..n].copy_from_slice(&f[..n]);
            n
        }))
    }

    /// Readable while this port's queue holds frames or the uplink's fd is readable.
    fn fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }

    /// The uplink's timers (frames an impaired uplink holds back).
    fn poll(&mut self, now: Instant) -> io::Result<()> {
        match &self.switch.uplink {
            Some(uplink) => lock(uplink).backend.poll(now),
            None => Ok(()),
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        lock(self.switch.uplink.as_ref()?).backend.next_deadline()
    }

    fn describe(&self) -> String {
        format!(
            "switch port {} (uplink {})",
            self.name,
            self.switch.uplink_name.as_deref().unwrap_or("none")
        )
    }

    /// The uplink's (see the module text).
    fn link_up(&mut self) -> bool {
        self.switch.uplink_up()
    }

    fn link_watched(&self) -> bool {
        self.switch.uplink.is_some()
    }
}

impl Drop for SwitchPort {
    fn drop(&mut self) {
        self.switch.close(self.index);
    }
}
