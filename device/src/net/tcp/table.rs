//! The device's TCP connections and listeners: O(1) demultiplexing of a segment to its
//! connection by the 4-tuple (a hash map), to a listener by local address and port, and
//! the connections' timers in one heap (the engine sleeps until its top, never scans).
//!
//! Each connection carries a tag of the engine's choosing (its QP); half-open connections
//! made by listeners have none until the engine gives them one (an accepted QP). An
//! orphan — a connection whose owner closed it gracefully and went away
//! ([`ConnectionTable::orphan`]) — has none either and stays until its close is done.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::fmt;
use std::net::Ipv6Addr;
use std::time::Instant;

use super::config::Config;
use super::connection::{ConnStats, Connection, FourTuple, Outgoing, State};
use super::isn::IsnGenerator;
use super::listener::{ListenOutcome, Listener, ListenerStats};
use super::stats::TcpStats;
use super::wire::{self, Segment};

/// How many orphans the table holds at most by default (Linux bounds its orphans too,
/// `net.ipv4.tcp_max_orphans`): each costs a slot and a timer, and a peer that never
/// acknowledges our FIN keeps one for the whole retransmission budget. Beyond it a
/// connection is reset instead of orphaned.
pub const MAX_ORPHANS: usize = 4096;

/// Destinations whose lowered path MTU the table remembers at most (as many as the IPv6
/// layer keeps; beyond, one is forgotten and its new connections start at the link's).
pub const MAX_PATH_MTUS: usize = 1024;

/// A connection's handle: slot and generation (a removed connection's handle never
/// finds its slot's next occupant).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnId {
    index: u32,
    gen: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableError {
    /// The 4-tuple (or the listening address and port) is taken.
    InUse,
    /// Port 0, or a remote address no connection can have (unspecified, multicast): no
    /// segment to it could be sent (or parsed by the peer).
    BadAddress,
}

impl fmt::Display for TableError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(match self {
            TableError::InUse => "address and port already in use",
            TableError::BadAddress => "port 0 or not a unicast address",
        })
    }
}

impl std::error::Error for TableError {}

/// Why a connection was not orphaned (its owner then aborts it, as before).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrphanRefused {
    /// Not closed gracefully, or data (ours unacknowledged, or the peer's unread) would be
    /// lost: [`Connection::may_orphan`] is false.
    NotClosed,
    /// The table holds its maximum of orphans ([`ConnectionTable::set_max_orphans`]).
    Full,
    /// No such connection.
    Gone,
}

/// Where a received segment went.
#[derive(Debug)]
pub enum Input {
    /// To this connection: hand the segment to its [`Connection::on_segment`].
    Connection(ConnId),
    /// A SYN made a half-open connection (already processed; its SYN-ACK is due).
    HalfOpen(ConnId),
    /// Send this (a reset, or a SYN-ACK with a cookie).
    Reply(Outgoing),
    /// Nothing to do.
    Dropped,
}

pub struct Entry<T> {
    pub conn: Connection,
    /// The engine's handle (its QP), if it gave one.
    pub tag: Option<T>,
    /// The listener that made it, while it is half-open.
    listener: Option<(Ipv6Addr, u16)>,
    /// The earliest live heap entry for it.
    heap_at: Option<Instant>,
    /// Its counters as last added to the table's.
    counted: ConnStats,
}

struct Slot<T> {
    gen: u32,
    entry: Option<Entry<T>>,
}

pub struct ConnectionTable<T> {
    by_tuple: HashMap<FourTuple, ConnId>,
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    listeners: HashMap<(Ipv6Addr, u16), Listener>,
    timers: BinaryHeap<Reverse<(Instant, u32, u32)>>,
    isn: IsnGenerator,
    stats: TcpStats,
    /// Orphans held now, and the most allowed.
    orphans: usize,
    max_orphans: usize,
    /// Orphans by local port (for ephemeral port choice: a port an orphan holds is not
    /// handed out again while it lives).
    orphan_ports: HashMap<u16, u32>,
    /// The lowered path MTUs by destination, as [`ConnectionTable::path_mtu_changed`]
    /// reported them: new connections to those destinations start with segments that fit.
    path_mtus: HashMap<Ipv6Addr, usize>,
    /// The pool new connections charge ([`ConnectionTable::set_memory_pool`]).
    memory: Option<std::sync::Arc<super::MemoryPool>>,
}

impl<T> ConnectionTable<T> {
    pub fn new(isn: IsnGenerator) -> ConnectionTable<T> {
        ConnectionTable {
            by_tuple: HashMap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            listeners: HashMap::new(),
            timers: BinaryHeap::new(),
            isn,
            stats: TcpStats::default(),
            orphans: 0,
            max_orphans: MAX_ORPHANS,
            orphan_ports: HashMap::new(),
            path_mtus: HashMap::new(),
            memory: None,
        }
    }

    /// Charges what connections made from now on hold of data not yet taken (staged, out
    /// of order) to `pool` ([`super::memory`]).
    pub fn set_memory_pool(&mut self, pool: Option<std::sync::Arc<super::MemoryPool>>) {
        self.memory = pool;
    }

    /// Sets the most orphans the table holds ([`MAX_ORPHANS`] unless set; 0: none).
    pub fn set_max_orphans(&mut self, n: usize) {
        self.max_orphans = n;
    }

    /// Orphans held now.
    pub fn orphans(&self) -> usize {
        self.orphans
    }

    /// Whether an orphan has `port` as its local port.
    pub fn orphan_holds_port(&self, port: u16) -> bool {
        self.orphan_ports.contains_key(&port)
    }

    /// The device's TCP counters: exact for every connection as of its last
    /// [`ConnectionTable::update`] or [`ConnectionTable::remove`].
    pub fn stats(&self) -> &TcpStats {
        &self.stats
    }

    /// Adds a connection's counters since they were last added.
    fn count(stats: &mut TcpStats, e: &mut Entry<T>) {
        let now = e.conn.stats();
        if *now != e.counted {
            stats.add_delta(now, &e.counted);
            e.counted = now.clone();
        }
    }

    pub fn len(&self) -> usize {
        self.by_tuple.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_tuple.is_empty()
    }

    pub fn isn(&self) -> &IsnGenerator {
        &self.isn
    }

    // ---- listeners ----------------------------------------------------------------

    /// Takes `listener` (its address unspecified: every address of the device); refused
    /// if one listens there already.
    pub fn listen(&mut self, listener: Listener) -> Result<(), TableError> {
        let at = listener.local();
        if self.listeners.contains_key(&at) {
            return Err(TableError::InUse);
        }
        self.listeners.insert(at, listener);
        Ok(())
    }

    /// Stops listening. Half-open connections it made stay (they finish or time out).
    pub fn unlisten(&mut self, local: Ipv6Addr, port: u16) -> Option<Listener> {
        self.listeners.remove(&(local, port))
    }

    pub fn listener(&self, local: Ipv6Addr, port: u16) -> Option<&Listener> {
        self.listeners.get(&(local, port))
    }

    /// Whether a connection (in any state) or a listener owns `seg`: what [`ConnectionTable::input`]
    /// would not answer with a reset.
    pub fn owns(&self, seg: &Segment) -> bool {
        let (local, port) = (seg.dst, seg.header.dst_port);
        self.by_tuple.contains_key(&FourTuple::of_incoming(seg))
            || self.listeners.contains_key(&(local, port))
            || self.listeners.contains_key(&(Ipv6Addr::UNSPECIFIED, port))
    }

    fn find_listener(&mut self, local: Ipv6Addr, port: u16) -> Option<&mut Listener> {
        let key = if self.listeners.contains_key(&(local, port)) {
            (local, port)
        } else {
            (Ipv6Addr::UNSPECIFIED, port)
        };
        self.listeners.get_mut(&key)
    }

    // ---- connections --------------------------------------------------------------

    fn insert(
        &mut self,
        conn: Connection,
        tag: Option<T>,
        listener: Option<(Ipv6Addr, u16)>,
    ) -> ConnId {
        let tuple = conn.tuple();
        let mut conn = conn;
        conn.set_memory_pool(self.memory.clone());
        if let Some(&mtu) = self.path_mtus.get(&tuple.remote) {
            // RFC 8201 §5.2: the path MTU learned for the destination sets the segment
            // size of a new connection from its first segment on (TCP does not rely on
            // IPv6 fragmentation). The MSS it announces stays the link's (RFC 9293
            // §3.7.1: what it can receive).
            conn.set_path_mss(super::connection::path_mss(mtu, &tuple.remote));
        }
        let entry = Entry {
            conn,
            tag,
            listener,
            heap_at: None,
            counted: ConnStats::default(),
        };
        let index = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize].entry = Some(entry);
                i
            }
            None => {
                self.slots.push(Slot {
                    gen: 0,
                    entry: Some(entry),
                });
                (self.slots.len() - 1) as u32
            }
        };
        let id = ConnId {
            index,
            gen: self.slots[index as usize].gen,
        };
        self.by_tuple.insert(tuple, id);
        self.update(id);
        id
    }

    /// An active open with a fresh ISN (RFC 6528). Its SYN is due at once.
    pub fn connect(
        &mut self,
        tuple: FourTuple,
        now: Instant,
        cfg: &Config,
        tag: T,
    ) -> Result<ConnId, TableError> {
        if tuple.local_port == 0
            || tuple.remote_port == 0
            || tuple.remote.is_unspecified()
            || tuple.remote.is_multicast()
        {
            return Err(TableError::BadAddress);
        }
        let iss = match self.by_tuple.get(&tuple).copied() {
            None => self.isn.isn(&tuple, now),
            Some(old) => {
                let iss = self.reusing(old).ok_or(TableError::InUse)?;
                self.remove(old);
                iss
            }
        };
        self.stats.active_opens += 1;
        let mut c = Connection::connect(tuple, iss, now, cfg);
        c.set_ts_clock(self.isn.ts_clock(&tuple));
        Ok(self.insert(c, Some(tag), None))
    }

    /// Whether [`ConnectionTable::connect`] would take `tuple`: no connection has it, or one a new
    /// incarnation may take over (see `reusing`).
    pub fn can_connect(&self, tuple: &FourTuple) -> bool {
        self.by_tuple
            .get(tuple)
            .is_none_or(|&id| self.reusing(id).is_some())
    }

    pub fn lookup(&self, t: &FourTuple) -> Option<ConnId> {
        self.by_tuple.get(t).copied()
    }

    pub fn get(&self, id: ConnId) -> Option<&Entry<T>> {
        let s = self.slots.get(id.index as usize)?;
        (s.gen == id.gen).then_some(s.entry.as_ref()).flatten()
    }

    pub fn get_mut(&mut self, id: ConnId) -> Option<&mut Entry<T>> {
        let s = self.slots.get_mut(id.index as usize)?;
        (s.gen == id.gen).then_some(s.entry.as_mut()).flatten()
    }

    /// Handles of every connection.
    pub fn ids(&self) -> Vec<ConnId> {
        self.by_tuple.values().copied().collect()
    }

    /// Removes a connection (closed, or its QP destroyed after [`Connection::abort`] and
    /// the reset sent).
    pub fn remove(&mut self, id: ConnId) -> Option<Entry<T>> {
        let s = self.slots.get_mut(id.index as usize)?;
        if s.gen != id.gen {
            return None;
        }
        let mut e = s.entry.take()?;
        s.gen = s.gen.wrapping_add(1);
        Self::count(&mut self.stats, &mut e);
        if e.conn.is_orphan() {
            self.orphans -= 1;
            let port = e.conn.tuple().local_port;
            if let Some(n) = self.orphan_ports.get_mut(&port) {
                *n -= 1;
                if *n == 0 {
                    self.orphan_ports.remove(&port);
                }
            }
        }
        self.free.push(id.index);
        self.by_tuple.remove(&e.conn.tuple());
        if let Some(l) = e.listener {
            if let Some(l) = self.listeners.get_mut(&l) {
                l.half_open_done();
            }
        }
        Some(e)
    }

    /// The connection's owner went away after closing it gracefully: unless that would
    /// lose data or the table is full of orphans, it loses its tag and finishes its close
    /// by itself ([`Connection::orphan`]) — the caller keeps servicing it like any other
    /// (its events concern nobody; it never reads a [`super::SendSource`] nor delivers to
    /// a [`super::RecvSink`]) until it is closed and removed. Refused: nothing changed (the
    /// caller aborts it); [`OrphanRefused::Full`] counts as an orphan abort.
    pub fn orphan(&mut self, id: ConnId, now: Instant) -> Result<(), OrphanRefused> {
        let full = self.orphans >= self.max_orphans;
        let Some(e) = self.get_mut(id) else {
            return Err(OrphanRefused::Gone);
        };
        if !e.conn.may_orphan() {
            return Err(OrphanRefused::NotClosed);
        }
        if full {
            self.stats.orphan_aborts += 1;
            return Err(OrphanRefused::Full);
        }
        e.tag = None;
        e.conn.orphan(now);
        let port = e.conn.tuple().local_port;
        self.orphans += 1;
        *self.orphan_ports.entry(port).or_default() += 1;
        self.stats.orphans += 1;
        self.update(id);
        Ok(())
    }

    /// Call after anything happened to a connection: its timer is (re)registered and a
    /// half-open connection that completed leaves its listener's backlog.
    pub fn update(&mut self, id: ConnId) {
        let Some(s) = self.slots.get_mut(id.index as usize) else {
            return;
        };
        let Some(e) = s.entry.as_mut().filter(|_| s.gen == id.gen) else {
            return;
        };
        Self::count(&mut self.stats, e);
        let mut done_listener = None;
        if e.listener.is_some() && e.conn.state() != State::SynReceived {
            done_listener = e.listener.take();
        }
        let d = e.conn.next_deadline();
        let push = match (d, e.heap_at) {
            (Some(d), None) => Some(d),
            (Some(d), Some(h)) if d < h => Some(d),
            _ => None,
        };
        if let Some(d) = push {
            e.heap_at = Some(d);
            self.timers.push(Reverse((d, id.index, id.gen)));
        }
        if let Some(l) = done_listener {
            if let Some(l) = self.listeners.get_mut(&l) {
                l.half_open_done();
            }
        }
    }

    /// The path MTU toward `dst` is now `mtu` (`Stack::take_path_mtu_changes`). Lowered
    /// by a packet too big: every connection to `dst` cuts its segments to fit, and those
    /// with data in flight that was now too big are due at once in the timer heap — the
    /// next [`ConnectionTable::pop_expired`] at `now` or later returns them, and their
    /// [`Connection::poll`] and `poll_transmit` send it again. Raised (the lowered value
    /// expired): their segments grow back, up to what the peer and the link allow.
    /// Connections made later to `dst` start at the lowered size until it is raised again.
    pub fn path_mtu_changed(&mut self, dst: Ipv6Addr, mtu: usize, now: Instant) {
        match self.path_mtus.get(&dst) {
            // Raised: the lowered value expired (a packet too big never raises it, RFC
            // 8201 §4), new connections go back to the link's MTU.
            Some(&old) if mtu > old => {
                self.path_mtus.remove(&dst);
            }
            _ => {
                if self.path_mtus.len() >= MAX_PATH_MTUS && !self.path_mtus.contains_key(&dst) {
                    if let Some(&a) = self.path_mtus.keys().next() {
                        self.path_mtus.remove(&a);
                    }
                }
                self.path_mtus.insert(dst, mtu);
            }
        }
        // A scan of the connections: packets too big are rare, and rate-limited by
        // the routers that send them.
        let ids: Vec<ConnId> = self
            .by_tuple
            .iter()
            .filter(|(t, _)| t.remote == dst)
            .map(|(_, id)| *id)
            .collect();
        for id in ids {
            if let Some(e) = self.get_mut(id) {
                e.conn.path_mtu_changed(mtu, now);
            }
            self.update(id);
        }
    }

    /// The path MTU toward `dst` that new connections start with, if one was lowered.
    pub fn path_mtu(&self, dst: &Ipv6Addr) -> Option<usize> {
        self.path_mtus.get(dst).copied()
    }

    /// A connection whose timer is due at `now`, if any (call [`Connection::poll`], send
    /// what it produces, then [`ConnectionTable::update`]). Call until None.
    pub fn pop_expired(&mut self, now: Instant) -> Option<ConnId> {
        while let Some(&Reverse((t, index, gen))) = self.timers.peek() {
            if t > now {
                return None;
            }
            self.timers.pop();
            let id = ConnId { index, gen };
            let Some(e) = self.get_mut(id) else {
                continue;
            };
            if e.heap_at != Some(t) {
                continue; // superseded by an earlier entry
            }
            e.heap_at = None;
            match e.conn.next_deadline() {
                Some(d) if d <= now => return Some(id),
                Some(d) => {
                    // The deadline moved later: wait again.
                    e.heap_at = Some(d);
                    self.timers.push(Reverse((d, index, gen)));
                }
                None => {}
            }
        }
        None
    }

    /// When [`ConnectionTable::pop_expired`] next returns something. Entries a connection
    /// has moved later (a delayed ACK sent early with data, an RTO re-armed by an ACK) or
    /// left behind (closed) are settled first, so the answer is exact: an engine that
    /// sleeps until it is not woken for a timer that has nothing to do. Amortised
    /// O(log n): every entry settled was pushed once.
    pub fn next_deadline(&mut self) -> Option<Instant> {
        while let Some(&Reverse((t, index, gen))) = self.timers.peek() {
            let id = ConnId { index, gen };
            // Where this connection's entry belongs now, if anywhere.
            let settled = match self.get_mut(id) {
                // Gone, or superseded by an earlier entry: drop it.
                None => None,
                Some(e) if e.heap_at != Some(t) => None,
                Some(e) => match e.conn.next_deadline() {
                    Some(d) if d <= t => return Some(t),
                    d => {
                        e.heap_at = d;
                        d
                    }
                },
            };
            self.timers.pop();
            if let Some(d) = settled {
                self.timers.push(Reverse((d, index, gen)));
            }
        }
        None
    }

    /// Demultiplexes a received segment (parsed and checksum-verified): to its
    /// connection, to a listener on its port, or answered with a reset (RFC 9293
    /// §3.10.7.1). `sink_space` is the receive space a new connection would start with.
    /// A SYN that may reopen a connection in TIME-WAIT (RFC 6191) while a listener is on
    /// its port ends that connection and goes to the listener ([`Input::HalfOpen`]).
    pub fn input(&mut self, seg: &Segment, now: Instant, sink_space: usize) -> Input {
        let _stage = crate::stages::span(crate::stages::Stage::Parse);
        self.stats.segs_in += 1;
        let input = self.demultiplex(seg, now, sink_space);
        if let Input::Reply(o) = &input {
            self.stats.segs_out += 1;
            if wire::is_reset(&o.segment) {
                self.stats.rsts_out += 1;
            }
        }
        input
    }

    fn demultiplex(&mut self, seg: &Segment, now: Instant, sink_space: usize) -> Input {
        let tuple = FourTuple::of_incoming(seg);
        let mut iss = None;
        if let Some(&id) = self.by_tuple.get(&tuple) {
            match self.reopening(id, seg) {
                Some(i) => {
                    // The old incarnation ends here (its handle no longer resolves, as
                    // after `remove`); the SYN goes to the listener.
                    self.remove(id);
                    iss = Some(i);
                }
                None => return Input::Connection(id),
            }
        }
        let isn = self.isn.clone();
        let Some(l) = self.find_listener(seg.dst, seg.header.dst_port) else {
            return match wire::reset_for(seg) {
                Some((src, dst, segment)) => Input::Reply(Outgoing {
                    src,
                    dst,
                    segment,
                    gso: 0,
                }),
                None => Input::Dropped,
            };
        };
        let key = l.local();
        let before = l.stats().clone();
        let outcome = l.on_segment_with_iss(seg, now, &isn, sink_space, iss);
        let after = l.stats().clone();
        self.count_listener(&before, &after);
        match outcome {
            ListenOutcome::Ignore => Input::Dropped,
            ListenOutcome::Reply(o) => Input::Reply(o),
            ListenOutcome::HalfOpen(c) => {
                self.stats.passive_opens += 1;
                Input::HalfOpen(self.insert(c, None, Some(key)))
            }
            ListenOutcome::FromCookie(c) => {
                self.stats.passive_opens += 1;
                Input::Connection(self.insert(c, None, None))
            }
        }
    }

    /// A SYN for a connection in TIME-WAIT that a listener on its port would take as a
    /// new incarnation ([`Connection::reopens`]): the new ISS, beyond everything the
    /// old incarnation sent (its SND.NXT plus a maximum unscaled window, as Linux does),
    /// so the peer cannot take old segments of ours for new ones.
    fn reopening(&mut self, id: ConnId, seg: &Segment) -> Option<u32> {
        let timestamps = self
            .find_listener(seg.dst, seg.header.dst_port)?
            .config()
            .timestamps;
        let e = self.get(id)?;
        e.conn
            .reopens(seg, timestamps)
            .then(|| e.conn.snd_nxt_seq().wrapping_add(65535 + 2))
    }

    /// An active open onto the four-tuple of connection `id`: the new ISS if `id` is in
    /// TIME-WAIT with no QP and used timestamps, else None (the tuple is in use). This is
    /// Linux's rule for a connect from a port bound beforehand (`tcp_twsk_unique`): the
    /// peer's PAWS check (RFC 7323 §5) tells old segments from new ones, as the
    /// timestamps of one four-tuple keep rising across incarnations, and the ISS lies
    /// beyond everything the old incarnation sent (RFC 6191). The guest's port choice
    /// knows nothing of the device's TIME-WAITs, so without this a reused port fails its
    /// connect for the next minute.
    fn reusing(&self, id: ConnId) -> Option<u32> {
        let e = self.get(id)?;
        (e.tag.is_none() && e.conn.state() == State::TimeWait && e.conn.negotiated().2)
            .then(|| e.conn.snd_nxt_seq().wrapping_add(65535 + 2))
    }

    fn count_listener(&mut self, before: &ListenerStats, after: &ListenerStats) {
        self.stats.syn_cookies += after.cookies_sent - before.cookies_sent;
        self.stats.listen_drops += (after.backlog_drops - before.backlog_drops)
            + (after.cookies_rejected - before.cookies_rejected);
    }
}
