//! TCP queue pairs: the device's TCP ([`crate::net::tcp`]) joined to the QP engine.
//!
//! The engine owns one [`ConnectionTable`] tagged with QP ids. Segments come from the stack
//! ([`super::network`]) or, for the device's own addresses, from a local queue inside the
//! engine (so two TCP QPs of one device can connect to each other); segments out go to the
//! stack's `send_ip` or back into that queue. The table's timer heap is folded into the
//! engine's sleep deadline.
//!
//! Data never lives in the device beyond the connection's staging allowance:
//! - **send**: a send WR is checked (protection) when the engine takes it from the ring;
//!   its bytes are queued on the connection by length only and read from guest memory
//!   through the WR's translated spans each time a segment is built (`QpSource`). The WR
//!   completes (CQE `SEND`, `byte_len` = its payload) when the peer has acknowledged its
//!   last byte. With message framing a `MsgHeader` precedes the WR's bytes in the stream.
//! - **receive**: receive WRs are taken from the ring as soon as the doorbell shows them and
//!   become the connection's receive space (`QpSink`). With stream framing the advertised
//!   window is the posted space plus the staging allowance, so posting buffers is flow
//!   control (a WR completed early by PSH gives up the rest of its buffer: the connection
//!   is told at once, `rx::settle_with`, and staging takes what the window offered); with
//!   message framing a WR holds one message whatever its size, so the window is the QP's
//!   message buffer (`MESSAGE_BUFFER`, offered once a receive was posted) plus the message
//!   in progress and the staging allowance. Bytes are scattered straight into the WRs'
//!   buffers; only bytes no posted WR can take wait in the device.
//!
//! Receive completion rules:
//! - stream framing: a WR completes when full, or when a segment with PSH has been placed
//!   (the WR then holds everything received so far);
//! - message framing: each message completes one WR with its length and `imm_data`; a
//!   message longer than its WR completes the WR with `LOCAL_LENGTH` (`byte_len` = the
//!   message's length) and the message is discarded (see [`qpip_abi::wqe::MsgHeader`]);
//! - end of stream: once the peer's FIN has arrived and every byte before it has been
//!   placed, a partly filled WR completes with what it holds and every receive WR after
//!   it completes with `byte_len` 0 (as `read()` returns 0 at end of file);
//! - a reset or a timeout moves the QP to the error state: every outstanding WR completes
//!   `FLUSHED`, and a pending CONNECT or CLOSE completes with `REFUSED` or `TIMEOUT`.
//!
//! Completions keep the order of their queue; when a CQ is full they wait in order
//! (`super::completion`) instead of being dropped, since the WRs are already consumed.
//!
//! A WR's spans name the region they lie in: DEREG_MR of a region a QP's WR (or, on
//! iWARP, a Read Response it serves) still holds resets the connection and fails the QP
//! at once (`Engine::tcp_region_gone`), so no segment is ever built from, nor placed
//! into, the pages of a region after its deregistration.
//!
//! Destroying a TCP QP (DESTROY_QP, or its context going away) aborts its connection with
//! a reset, unless the application had closed it gracefully and nothing would be lost —
//! every byte of data acknowledged (only our FIN may be outstanding: the bytes live in
//! guest memory the owner may free, so data is never sent after the destroy) and every
//! byte received handed to the application. Then the connection becomes an orphan
//! ([`ConnectionTable::orphan`]): it has no QP and finishes its close by itself in the
//! table (FIN retransmitted, FIN-WAIT-2 bounded by [`TcpLimits::fin_timeout`], TIME-WAIT,
//! a reset for new data), with no completion, event or DMA ever, up to
//! [`TcpLimits::max_orphans`] of them (beyond, the reset as before). Its local port is not
//! handed out as an ephemeral port again while it lives. A device reset drops orphans
//! with everything else.

mod cm;
pub mod iwarp;
mod rx;
mod tx;

use crate::net::stack::Unreachable;
use crate::net::tcp::FourTuple;
use std::collections::VecDeque;
use std::net::Ipv6Addr;
use std::time::{Duration, Instant};

use log::debug;
use vm_memory::GuestMemoryMmap;

use crate::net::stack::Delivery;
use crate::net::stats::DropReason;
use crate::net::tcp::{
    self, ConnId, ConnectionTable, Event, Input, IsnGenerator, Keepalive, Outgoing, RecvSink,
};

use super::objects::PendingCmd;
use super::Engine;
use rx::{settle_with, QpSink, RxState, Unclaimed};
use tx::{QpSource, TxEntry, TxQueue};

/// Hop limit of the segments we send.
const HOP_LIMIT: u8 = 64;
/// Send WRs one QP may take per turn.
const SEND_BUDGET: u32 = 64;
/// Largest accept backlog (ListenArgs::backlog is clamped to it; 0 means this).
const MAX_BACKLOG: usize = 1024;

/// What a TCP QP is doing on the connection side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpRole {
    Idle,
    /// Offered to a listener by ACCEPT; `listener` None when the ACCEPT answers a held
    /// iWARP request (the QP has its connection already: the listener may go).
    Accepting {
        listener: Option<u32>,
        cmd: PendingCmd,
    },
    Connecting {
        cmd: PendingCmd,
    },
    /// Carries a connection (or carried one that has ended).
    Connected,
}

/// What a TCP QP holds beyond its rings ([`super::objects::QpKind::Tcp`]).
pub struct TcpQp {
    /// What the QP is doing on the connection side.
    pub(in crate::engine) role: TcpRole,
    /// Message framing (else stream framing).
    message: bool,
    conn: Option<ConnId>,
    tx: TxQueue,
    rx: RxState,
    close_cmd: Option<PendingCmd>,
    /// Keepalive for the connection the QP carries or will carry (`SET_QP_OPT`).
    keepalive: Option<Keepalive>,
    /// iWARP framing: MPA, DDP and RDMAP on the connection (`tx` and `rx` stay unused).
    pub(in crate::engine) iwarp: Option<Box<iwarp::IwarpQp>>,
}

impl TcpQp {
    /// The TCP side of new QP `id` with `framing` (`FRAMING_*`).
    pub fn new(id: u32, framing: u8) -> Box<TcpQp> {
        let message = framing == qpip_abi::admin::FRAMING_MESSAGE;
        let iwarp = framing == qpip_abi::admin::FRAMING_IWARP;
        Box::new(TcpQp {
            role: TcpRole::Idle,
            message,
            conn: None,
            tx: TxQueue::default(),
            rx: RxState::new(id, message),
            close_cmd: None,
            keepalive: None,
            iwarp: iwarp.then(|| Box::new(iwarp::IwarpQp::new())),
        })
    }

    /// Whether the QP speaks iWARP.
    pub fn is_iwarp(&self) -> bool {
        self.iwarp.is_some()
    }

    /// Whether a WR the QP holds, or a stream it serves (an iWARP Read Response), lies
    /// in the region keyed `key`.
    pub(in crate::engine) fn uses_region(&self, key: u32) -> bool {
        match &self.iwarp {
            Some(iw) => iw.uses_region(key),
            None => self.tx.uses_region(key) || self.rx.uses_region(key),
        }
    }

    /// The region keyed `key` is gone: every WR that lies in it is marked to complete
    /// with a protection error (`CQE_DETAIL_REGION_GONE`) when the QP's WRs are flushed,
    /// and nothing is read from or written to it again.
    fn region_gone(&mut self, key: u32) {
        match &mut self.iwarp {
            Some(iw) => iw.region_gone(key),
            None => {
                self.tx.region_gone(key);
                self.rx.region_gone(key);
            }
        }
    }
}

/// A connection the device accepted for a listener, waiting for an ACCEPT.
struct Ready {
    conn: ConnId,
    peer_closed: bool,
}

/// A listener's rendezvous: QPs offered by ACCEPT and connections waiting for one
/// ([`super::objects::Listener`]).
pub struct AcceptQueue {
    backlog: usize,
    parked: VecDeque<u32>,
    ready: VecDeque<Ready>,
    /// `LISTEN_FLAG_IWARP_REQUESTS`: the iWARP connection requests held (instead of
    /// `ready`, which stays empty).
    requests: Option<iwarp::Requests>,
}

/// The engine's TCP: its connections (TCP QPs and listeners are objects, with their TCP
/// state in them).
pub struct Tcp {
    table: ConnectionTable<u32>,
    cfg: tcp::Config,
    /// Segments produced and not yet sent.
    outbox: Vec<Outgoing>,
    /// iWARP QPs waiting for an MPA frame, by deadline (`TcpLimits::mpa_reply`,
    /// `mpa_request`); an entry whose QP is no longer waiting is dropped when due.
    mpa_due: std::collections::BTreeSet<(Instant, u32)>,
    /// Connections held by a requests listener (no QP has them), and which listener.
    held: std::collections::HashMap<ConnId, u32>,
    /// Timers of held requests: (due, listener, request id); an entry whose request is no
    /// longer at that stage is dropped when due.
    request_due: std::collections::BTreeSet<(Instant, u32, u32)>,
    limits: TcpLimits,
}

/// How long the device's TCP holds on: to a peer that stopped answering, and to
/// connections whose QP is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpLimits {
    /// Retransmissions of unacknowledged data (or unanswered zero-window probes) before
    /// the connection times out — RFC 9293 §3.8.3's threshold R2, counted in
    /// retransmissions as that section allows (Linux: `net.ipv4.tcp_retries2`). The
    /// default, 15, is Linux's too; with the RTO doubling each time from the 200 ms floor
    /// up to the 60 s ceiling, that is about 9 minutes. RFC 9293 asks for at least 100
    /// seconds (SHOULD-10); fewer retries give up on a vanished peer sooner (N retries on
    /// a fast link take about 0.2 × (2^(N+1) − 1) seconds), for applications — and tests
    /// — that want to hear of it quickly.
    pub max_retries: u32,
    /// Maximum segment lifetime: TIME-WAIT lasts twice this (30 s, as Linux's 60 s
    /// TIME-WAIT).
    pub msl: Duration,
    /// How long an orphan waits in FIN-WAIT-2 for the peer's FIN ([`tcp::Config::fin_timeout`],
    /// 60 s as Linux's `tcp_fin_timeout`).
    pub fin_timeout: Duration,
    /// Orphans the device holds at most ([`tcp::MAX_ORPHANS`]); beyond, a destroyed QP's
    /// connection is reset even after a graceful close.
    pub max_orphans: usize,
    /// How long an iWARP initiator waits for the MPA reply, and a responder for the
    /// request once its QP took the connection (10 s and 5 s, as Linux's siw); the
    /// CONNECT or ACCEPT then fails with `TIMEOUT` and the connection is reset.
    pub mpa_reply: Duration,
    pub mpa_request: Duration,
}

impl Default for TcpLimits {
    fn default() -> Self {
        let c = tcp::Config::default();
        TcpLimits {
            max_retries: c.max_retries,
            msl: c.msl,
            fin_timeout: c.fin_timeout,
            max_orphans: tcp::MAX_ORPHANS,
            mpa_reply: Duration::from_secs(10),
            mpa_request: Duration::from_secs(5),
        }
    }
}

impl Tcp {
    /// TCP with its ISNs and SYN cookies keyed by `secrets` (each by its own).
    pub fn new(secrets: &crate::engine::secrets::Secrets, mtu: usize, limits: TcpLimits) -> Tcp {
        let cfg = tcp::Config {
            mss: tcp::Config::mss_for_mtu(mtu),
            max_retries: limits.max_retries,
            msl: limits.msl,
            fin_timeout: limits.fin_timeout,
            ..tcp::Config::default()
        };
        let mut table = ConnectionTable::new(IsnGenerator::with_secrets(
            secrets.isn,
            secrets.syn_cookies,
            Instant::now(),
        ));
        table.set_max_orphans(limits.max_orphans);
        Tcp {
            table,
            cfg,
            outbox: Vec::new(),
            mpa_due: Default::default(),
            held: Default::default(),
            request_due: Default::default(),
            limits,
        }
    }

    /// Charges what the connections made from now on hold for their QPs to `pool`.
    pub fn set_memory_pool(&mut self, pool: Option<std::sync::Arc<tcp::MemoryPool>>) {
        self.table.set_memory_pool(pool);
    }

    /// Whether connections build super-segments (the link cuts them or takes them whole:
    /// [`crate::backend::Backend::gso`]). Connections made from now on follow.
    pub fn set_gso(&mut self, on: bool) {
        self.cfg.gso = on;
    }

    /// When the next timer is due: the table's, or an MPA setup's.
    pub fn next_deadline(&mut self) -> Option<Instant> {
        let mpa = self.mpa_due.first().map(|&(t, _)| t);
        let requests = self.request_due.first().map(|&(t, _, _)| t);
        [self.table.next_deadline(), mpa, requests]
            .into_iter()
            .flatten()
            .min()
    }

    /// The TCP counters (QUERY_STATS' `STAT_TCP_*`).
    pub fn stats(&self) -> &tcp::TcpStats {
        self.table.stats()
    }

    /// A packet too big lowered the path MTU toward `dst`: its connections cut their
    /// segments, and what must go again is due in the timer heap at once
    /// ([`Engine::poll_tcp`] sends it).
    pub fn path_mtu_changed(&mut self, dst: Ipv6Addr, mtu: usize, now: Instant) {
        self.table.path_mtu_changed(dst, mtu, now);
    }

    /// Whether an orphan holds `port` as its local port (not to be chosen as an
    /// ephemeral port: a new connection from it to the same peer would meet the orphan).
    pub(super) fn orphan_holds_port(&self, port: u16) -> bool {
        self.table.orphan_holds_port(port)
    }

    /// Whether a CONNECT on `tuple` would be let through (no connection holds it, or one
    /// it may take over from TIME-WAIT).
    pub(super) fn can_connect(&self, tuple: &FourTuple) -> bool {
        self.table.can_connect(tuple)
    }

    /// Whether work is waiting that needs no event to wake it.
    pub fn busy(&self) -> bool {
        !self.outbox.is_empty()
    }
}

/// Results of an admin command.
type Results = (u64, u64, u32);

pub(super) fn peer_results(addr: Ipv6Addr, port: u16) -> Results {
    let o = addr.octets();
    (
        u64::from_ne_bytes(o[..8].try_into().expect("8")),
        u64::from_ne_bytes(o[8..].try_into().expect("8")),
        port as u32,
    )
}

impl Engine {
    /// A TCP QP's turn in the send scheduler: new receive WRs become receive space, new
    /// send WRs are queued on the connection. Returns (progress, more work).
    pub(in crate::engine) fn tcp_qp_work(
        &mut self,
        mem: &GuestMemoryMmap,
        id: u32,
    ) -> (bool, bool) {
        let iwarp = self.objects.tcp_qp(id).expect("TCP QP").is_iwarp();
        let mut did = if iwarp {
            self.iwarp_take_recvs(mem, id)
        } else {
            self.tcp_take_recvs(mem, id)
        };
        let qp = self.objects.qp(id).expect("caller checked");
        if !qp.posted(true) {
            return (did, false);
        }
        match qp.tcp().expect("TCP QP").role {
            // Sends wait for the connection.
            TcpRole::Accepting { .. } | TcpRole::Connecting { .. } => return (did, false),
            TcpRole::Idle | TcpRole::Connected => {}
        }
        let (n, more) = if iwarp {
            self.iwarp_take_sends(mem, id, SEND_BUDGET)
        } else {
            self.tcp_take_sends(mem, id, SEND_BUDGET)
        };
        did |= n > 0;
        (did, more)
    }

    /// A TCP segment for one of the device's addresses. Returns what became of it, which the
    /// caller hands back to the stack (`Stack::delivered`): dropped when it does not parse
    /// (counted there), steered to the raw QP when one exists and no connection or
    /// listener owns the segment (no RST: the kernel answers for its ports).
    pub(in crate::engine) fn tcp_segment_in(
        &mut self,
        mem: &GuestMemoryMmap,
        src: Ipv6Addr,
        dst: Ipv6Addr,
        bytes: &[u8],
    ) -> Delivery {
        let seg = match tcp::wire::parse(src, dst, bytes) {
            Ok(s) => s,
            Err(tcp::ParseError::Checksum) => return Delivery::Dropped(DropReason::BadChecksum),
            Err(_) => return Delivery::Dropped(DropReason::Malformed),
        };
        if self.net.stack.steering() && !self.tcp.table.owns(&seg) {
            // No connection or listener: the kernel's raw QP takes it (and answers it).
            if seg.header.syn() && !seg.header.ack_flag() {
                // A connect the device has no listener for: the kernel will refuse it,
                // unless a socket of its own listens there.
                debug!("TCP SYN to port {} left to the kernel", seg.header.dst_port);
            }
            return Delivery::Steered;
        }
        let now = Instant::now();
        match self.tcp.table.input(&seg, now, 0) {
            Input::Connection(id) => {
                let (table, objects) = (&mut self.tcp.table, &mut self.objects);
                let e = table.get_mut(id).expect("demultiplexed");
                let iwarp = e
                    .tag
                    .filter(|&q| objects.tcp_qp(q).is_some_and(|t| t.is_iwarp()));
                if let Some(qp) = iwarp {
                    let mut sink = objects.iwarp_sink(mem, qp).expect("an iWARP QP");
                    e.conn.on_segment(&seg, now, &mut sink);
                    self.iwarp_settle(mem, qp);
                    self.tcp_service(mem, id, now);
                    return Delivery::Delivered;
                }
                match e.tag.and_then(|q| objects.tcp_qp_mut(q)) {
                    Some(t) => {
                        let mut sink = QpSink { mem, rx: &mut t.rx };
                        e.conn.on_segment(&seg, now, &mut sink);
                        // The connection gives the sink at most the space it had before the
                        // segment and stages the rest; with message framing the headers
                        // took no room, so the space left may take staged bytes now (else
                        // a message just smaller than its WR waits for another WR).
                        if e.conn.received() > e.conn.delivered() && sink.space() > 0 {
                            e.conn.recv_space_changed(now, &mut sink);
                        }
                        let qp = t.rx.qp;
                        self.post_rx_done(mem, qp);
                    }
                    None => match self.tcp.held.get(&id).copied() {
                        // A requests listener reads the MPA request itself.
                        Some(l) => {
                            let r = objects
                                .listener_mut(l)
                                .and_then(|l| l.accept_mut().requests.as_mut());
                            match r {
                                Some(r) => e.conn.on_segment(&seg, now, &mut r.sink(id)),
                                None => e.conn.on_segment(&seg, now, &mut Unclaimed),
                            }
                            self.iwarp_request_read(mem, l, id);
                        }
                        None => e.conn.on_segment(&seg, now, &mut Unclaimed),
                    },
                }
                self.tcp_service(mem, id, now);
            }
            Input::HalfOpen(id) => self.tcp_service(mem, id, now),
            Input::Reply(o) => self.tcp.outbox.push(o),
            Input::Dropped => {}
        }
        Delivery::Delivered
    }

    /// A destination unreachable quoted one of our segments: the connection it names
    /// decides whether it ends ([`tcp::Connection::unreachable`]).
    pub(in crate::engine) fn tcp_unreachable(
        &mut self,
        mem: &GuestMemoryMmap,
        u: &Unreachable,
        now: Instant,
    ) {
        let tuple = FourTuple {
            local: u.local,
            local_port: u.local_port,
            remote: u.remote,
            remote_port: u.remote_port,
        };
        let Some(id) = self.tcp.table.lookup(&tuple) else {
            return;
        };
        let ended = self
            .tcp
            .table
            .get_mut(id)
            .is_some_and(|e| e.conn.unreachable(u.seq));
        if ended {
            debug!("{}:{}: destination unreachable", u.remote, u.remote_port);
            self.tcp_service(mem, id, now);
        }
    }

    /// After anything happened to a connection: its events, its segments, its timer.
    pub(super) fn tcp_service(&mut self, mem: &GuestMemoryMmap, id: ConnId, now: Instant) {
        loop {
            let Some(e) = self.tcp.table.get_mut(id) else {
                return;
            };
            let mut events = Vec::new();
            while let Some(ev) = e.conn.pop_event() {
                events.push(ev);
            }
            let (tag, orphan) = (e.tag, e.conn.is_orphan());
            self.tcp_dispatch(mem, id, tag, orphan, &events);
            // Segments due (the QP may be gone after the events; then nothing is sent).
            let (table, outbox) = (&mut self.tcp.table, &mut self.tcp.outbox);
            let Some(e) = table.get_mut(id) else {
                return;
            };
            match e.tag.and_then(|q| self.objects.tcp_qp(q)) {
                Some(TcpQp {
                    iwarp: Some(iw), ..
                }) => {
                    let mut src = iw.source(mem);
                    while let Some(o) = e.conn.poll_transmit(now, &mut src) {
                        outbox.push(o);
                    }
                }
                Some(t) => {
                    let mut src = QpSource { mem, tx: &t.tx };
                    while let Some(o) = e.conn.poll_transmit(now, &mut src) {
                        outbox.push(o);
                    }
                }
                None => {
                    // A held iWARP request's connection sends its reject reply, if any.
                    let reply = self
                        .tcp
                        .held
                        .get(&id)
                        .and_then(|&l| self.objects.listener(l))
                        .and_then(|l| l.accept().requests.as_ref())
                        .and_then(|r| r.reply(id));
                    let mut src = reply.unwrap_or(&[]);
                    while let Some(o) = e.conn.poll_transmit(now, &mut src) {
                        outbox.push(o);
                    }
                }
            }
            if let Some(qp) = e.tag {
                self.tcp_check_close(mem, qp, id);
            }
            // Events that sending produced are handled before the connection may leave.
            let Some(e) = self.tcp.table.get_mut(id) else {
                return;
            };
            let closed = e.conn.is_closed();
            match e.conn.pop_event() {
                Some(ev) => {
                    // Put it back in order by handling it now, then go round again.
                    let (tag, orphan) = (e.tag, e.conn.is_orphan());
                    self.tcp_dispatch(mem, id, tag, orphan, &[ev]);
                    continue;
                }
                None if closed => {
                    let tag = e.tag;
                    self.tcp.table.remove(id);
                    if let Some(t) = tag.and_then(|q| self.objects.tcp_qp_mut(q)) {
                        if t.conn == Some(id) {
                            t.conn = None;
                        }
                    }
                    self.forget_ready(id);
                }
                None => self.tcp.table.update(id),
            }
            return;
        }
    }

    /// A connection's events to whom they concern: its QP, the listener rendezvous of a
    /// connection no QP has taken yet, or nobody for an orphan (its QP, CQs and memory
    /// may be gone).
    pub(super) fn tcp_dispatch(
        &mut self,
        mem: &GuestMemoryMmap,
        id: ConnId,
        tag: Option<u32>,
        orphan: bool,
        events: &[Event],
    ) {
        match tag {
            None if orphan => {}
            None => self.tcp_unclaimed_events(mem, id, events),
            Some(qp) => {
                for &ev in events {
                    self.tcp_event(mem, qp, id, ev);
                }
            }
        }
    }

    /// Due timers, and the segments they produce. Returns whether anything happened.
    pub(in crate::engine) fn poll_tcp(&mut self, mem: &GuestMemoryMmap) -> bool {
        let mut did = false;
        let now = Instant::now();
        while let Some(&(t, qp)) = self.tcp.mpa_due.first() {
            if t > now {
                break;
            }
            self.tcp.mpa_due.pop_first();
            did |= self.iwarp_setup_expired(mem, qp);
        }
        while let Some(&(t, listener, request)) = self.tcp.request_due.first() {
            if t > now {
                break;
            }
            self.tcp.request_due.pop_first();
            self.iwarp_request_expired(listener, request);
            did = true;
        }
        if self.tcp.table.next_deadline().is_some_and(|t| t <= now) {
            while let Some(id) = self.tcp.table.pop_expired(now) {
                did = true;
                if let Some(e) = self.tcp.table.get_mut(id) {
                    e.conn.poll(now);
                }
                self.tcp_service(mem, id, now);
            }
        }
        did |= self.flush_tcp();
        did
    }

    /// Sends the segments produced through the stack (those for the device itself come
    /// back up through its loopback). Returns whether there were any.
    pub(in crate::engine) fn flush_tcp(&mut self) -> bool {
        if self.tcp.outbox.is_empty() {
            return false;
        }
        let now = Instant::now();
        let out = std::mem::take(&mut self.tcp.outbox);
        let net = &mut self.net;
        for o in out {
            if let Err(e) = net
                .stack
                .send_tcp(o.src, o.dst, HOP_LIMIT, &o.segment, o.gso, now)
            {
                debug!("TCP segment to {} not sent: {e}", o.dst);
            }
        }
        net.flush();
        true
    }
}
