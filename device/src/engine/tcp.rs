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
//!   through the WR's translated spans each time a segment is built ([`QpSource`]). The WR
//!   completes (CQE `SEND`, `byte_len` = its payload) when the peer has acknowledged its
//!   last byte. With message framing a [`MsgHeader`] precedes the WR's bytes in the stream.
//! - **receive**: receive WRs are taken from the ring as soon as the doorbell shows them and
//!   become the connection's receive space ([`QpSink`]): the advertised window is the
//!   posted space plus the staging allowance, so posting buffers is flow control. Bytes
//!   are scattered straight into the WRs' buffers.
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
//! ([`Tcp::deferred`]) instead of being dropped, since the WRs are already consumed.
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

use std::collections::{HashMap, VecDeque};
use std::net::Ipv6Addr;
use std::time::{Duration, Instant};

use log::debug;
use qpip_abi::admin::*;
use qpip_abi::cqe::*;
use qpip_abi::wqe::MSG_HEADER_SIZE;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};
use zerocopy::FromZeros;

use crate::net::stats::DropReason;
use crate::net::tcp::{
    self, ConnId, ConnectionTable, Event, FourTuple, Input, IsnGenerator, Outgoing, RecvSink,
    SendSource, State,
};

use super::decode::{self, Payload, WqeError};
use super::memory::{Fault, Span};
use super::objects::{PendingCmd, QpState, TcpRole};
use super::Engine;

/// Hop limit of the segments we send.
const HOP_LIMIT: u8 = 64;
/// Send WRs one QP may take per turn.
const SEND_BUDGET: u32 = 64;
/// Locally routed segments processed per pass before other work gets a turn.
const LOCAL_BUDGET: usize = 256;
/// Largest accept backlog (ListenArgs::backlog is clamped to it; 0 means this).
const MAX_BACKLOG: usize = 1024;
/// What a message-framed QP buffers in the device for messages that no receive WR can take
/// yet, once its application has posted a receive: the receive window such a QP offers
/// (beyond the message in progress and the connection's staging). Posted bytes cannot be
/// the window here, as they are in stream framing: a WR holds one message whatever its
/// size, so a WR of 64 KiB may take only 1 KiB of the stream, and a window of posted bytes
/// would promise what the receiver then drops.
const MESSAGE_BUFFER: usize = 256 * 1024;

/// A send WR taken from the ring, in the stream at `start..end` (header included).
struct TxEntry {
    wr_id: u64,
    start: u64,
    end: u64,
    header: Option<[u8; MSG_HEADER_SIZE as usize]>,
    data: TxData,
    /// Payload bytes (what the CQE reports).
    len: u32,
    /// A WR that failed its checks: it holds no bytes and completes with this status in
    /// its turn (completions keep the order of the queue).
    error: Option<(u8, u32)>,
}

enum TxData {
    Inline(Vec<u8>),
    Spans(Vec<Span>),
}

/// The QP's send WRs that are queued on the connection and not yet acknowledged.
#[derive(Default)]
struct TxQueue {
    entries: VecDeque<TxEntry>,
    /// Stream bytes queued so far.
    queued: u64,
}

/// A receive WR taken from the ring.
struct RecvWr {
    wr_id: u64,
    spans: Result<Vec<Span>, (u8, u32)>,
    cap: u64,
    filled: u64,
    /// A placement into it failed (its guest memory went away under the device, unmapped
    /// by the VMM): it completes in error, never as a success with bytes missing.
    fault: bool,
}

/// The receive side of a TCP QP.
struct RxState {
    qp: u32,
    message: bool,
    wrs: VecDeque<RecvWr>,
    /// Bytes the connection delivered that no WR could take yet (bounded by the space
    /// reported: with message framing up to [`MESSAGE_BUFFER`]).
    pending: VecDeque<u8>,
    /// Message framing: a receive was ever posted, so the application receives and the
    /// QP's [`MESSAGE_BUFFER`] is offered (once offered, never taken back: a window once
    /// promised must stay kept).
    buffering: bool,
    /// Free capacity of the posted WRs that have usable buffers.
    room: u64,
    // Message framing: the header being read and the message being placed.
    hdr: [u8; MSG_HEADER_SIZE as usize],
    hdr_have: usize,
    in_msg: bool,
    msg_decided: bool,
    msg_left: u64,
    msg_len: u32,
    msg_imm: u32,
    discard: bool,
    /// Stream framing: a pushed segment was placed; complete the partly filled WR.
    push: bool,
    /// The peer's FIN arrived after every byte.
    eof: bool,
    /// The end of the stream was announced (`ASYNC_EVENT_PEER_CLOSED`).
    eof_announced: bool,
    /// Completions made, for the engine to write.
    done: Vec<Cqe>,
}

fn cqe(wr_id: u64, qp: u32, opcode: u8, status: u8, detail: u32) -> Cqe {
    let mut c = Cqe::new_zeroed();
    c.wr_id = wr_id;
    c.qp = qp;
    c.opcode = opcode;
    c.status = status;
    c.detail = detail;
    c
}

/// Writes `data` at byte `off` of the buffer described by `spans`. False if some of it
/// could not be written: the spans were checked against the region and guest RAM when the
/// WR was taken, but the VMM may have unmapped that memory since.
#[must_use]
fn scatter(mem: &GuestMemoryMmap, spans: &[Span], mut off: u64, mut data: &[u8]) -> bool {
    let mut ok = true;
    for s in spans {
        if data.is_empty() {
            break;
        }
        if off >= s.len as u64 {
            off -= s.len as u64;
            continue;
        }
        let n = (s.len as u64 - off).min(data.len() as u64) as usize;
        ok &= mem
            .write_slice(&data[..n], GuestAddress(s.addr + off))
            .is_ok();
        data = &data[n..];
        off = 0;
    }
    ok
}

/// Reads `buf.len()` bytes at byte `off` of the buffer described by `spans`.
fn gather(mem: &GuestMemoryMmap, spans: &[Span], mut off: u64, buf: &mut [u8]) {
    let mut at = 0;
    for s in spans {
        if at == buf.len() {
            return;
        }
        if off >= s.len as u64 {
            off -= s.len as u64;
            continue;
        }
        let n = (s.len as u64 - off).min((buf.len() - at) as u64) as usize;
        if mem
            .read_slice(&mut buf[at..at + n], GuestAddress(s.addr + off))
            .is_err()
        {
            buf[at..at + n].fill(0);
        }
        at += n;
        off = 0;
    }
}

impl RxState {
    fn new(qp: u32, message: bool) -> RxState {
        RxState {
            qp,
            message,
            wrs: VecDeque::new(),
            pending: VecDeque::new(),
            buffering: false,
            room: 0,
            hdr: [0; MSG_HEADER_SIZE as usize],
            hdr_have: 0,
            in_msg: false,
            msg_decided: false,
            msg_left: 0,
            msg_len: 0,
            msg_imm: 0,
            discard: false,
            push: false,
            eof: false,
            eof_announced: false,
            done: Vec::new(),
        }
    }

    /// Bytes of the stream the QP can take now. Stream framing: the free room of the posted
    /// WRs (every byte of it is usable). Message framing: the bytes that certainly fit —
    /// the rest of the next message's header, or the rest of the message in progress (it
    /// fits its WR, or is being discarded) — and the free part of the QP's
    /// [`MESSAGE_BUFFER`], which takes what no WR can. Re-asked after every delivery; in
    /// message framing it never shrinks by more than the bytes delivered, so a window
    /// offered from it is always kept.
    fn space(&self) -> usize {
        if !self.message {
            return self.room.saturating_sub(self.pending.len() as u64) as usize;
        }
        let buffer = if self.buffering {
            MESSAGE_BUFFER.saturating_sub(self.pending.len())
        } else {
            0
        };
        if !self.pending.is_empty() {
            // Everything goes through the buffer, in order, until it is drained.
            return buffer;
        }
        let current = if !self.in_msg {
            (self.hdr.len() - self.hdr_have) as u64
        } else if self.msg_decided {
            // Placed into the front WR (it fits, checked when decided) or discarded.
            self.msg_left
        } else {
            0
        };
        (current as usize).saturating_add(buffer)
    }

    fn add(&mut self, wr: RecvWr) {
        if wr.spans.is_ok() {
            self.room += wr.cap;
        }
        self.buffering = true;
        self.wrs.push_back(wr);
    }

    /// Completes the front WR (in error, whatever `status` says, if a placement into it
    /// failed).
    fn complete_front(&mut self, status: u8, detail: u32, byte_len: u32, imm: u32) {
        let Some(wr) = self.wrs.pop_front() else {
            return;
        };
        if wr.spans.is_ok() {
            self.room -= wr.cap - wr.filled;
        }
        let (status, detail) = if wr.fault && status == CQE_STATUS_SUCCESS {
            // As a UDP datagram whose buffer cannot be written (engine/datapath.rs).
            (CQE_STATUS_LOCAL_PROTECTION, CQE_DETAIL_OUT_OF_BOUNDS)
        } else {
            (status, detail)
        };
        let mut c = cqe(wr.wr_id, self.qp, CQE_OP_RECV, status, detail);
        c.byte_len = byte_len;
        c.imm_data = imm;
        self.done.push(c);
    }

    /// Completes a front WR that failed its checks. True if there was one.
    fn fail_front(&mut self) -> bool {
        match self.wrs.front().map(|w| w.spans.as_ref().err().copied()) {
            Some(Some((status, detail))) => {
                self.complete_front(status, detail, 0, 0);
                true
            }
            _ => false,
        }
    }

    /// Places bytes into the posted WRs; returns how many were taken (the rest wait for
    /// more WRs).
    fn consume(&mut self, mem: &GuestMemoryMmap, data: &[u8]) -> usize {
        if self.message {
            self.consume_messages(mem, data)
        } else {
            self.consume_stream(mem, data)
        }
    }

    fn consume_stream(&mut self, mem: &GuestMemoryMmap, data: &[u8]) -> usize {
        let mut i = 0;
        while i < data.len() {
            if self.fail_front() {
                continue;
            }
            let Some(wr) = self.wrs.front_mut() else {
                break;
            };
            let Ok(spans) = &wr.spans else { unreachable!() };
            let n = (wr.cap - wr.filled).min((data.len() - i) as u64) as usize;
            wr.fault |= !scatter(mem, spans, wr.filled, &data[i..i + n]);
            wr.filled += n as u64;
            self.room -= n as u64;
            i += n;
            if wr.filled == wr.cap {
                let len = wr.filled as u32;
                self.complete_front(CQE_STATUS_SUCCESS, CQE_DETAIL_NONE, len, 0);
            }
        }
        i
    }

    fn consume_messages(&mut self, mem: &GuestMemoryMmap, data: &[u8]) -> usize {
        let mut i = 0;
        loop {
            if !self.in_msg {
                if i == data.len() {
                    break;
                }
                let n = (self.hdr.len() - self.hdr_have).min(data.len() - i);
                self.hdr[self.hdr_have..self.hdr_have + n].copy_from_slice(&data[i..i + n]);
                self.hdr_have += n;
                i += n;
                if self.hdr_have < self.hdr.len() {
                    continue;
                }
                self.hdr_have = 0;
                self.msg_len = u32::from_le_bytes(self.hdr[..4].try_into().expect("4"));
                self.msg_imm = u32::from_le_bytes(self.hdr[4..].try_into().expect("4"));
                self.msg_left = self.msg_len as u64;
                self.in_msg = true;
                self.msg_decided = false;
                self.discard = false;
            }
            if !self.msg_decided {
                if self.fail_front() {
                    continue;
                }
                let Some(wr) = self.wrs.front() else {
                    break; // the message waits for a WR
                };
                if self.msg_len as u64 > wr.cap {
                    let (len, imm) = (self.msg_len, self.msg_imm);
                    self.complete_front(CQE_STATUS_LOCAL_LENGTH, CQE_DETAIL_NONE, len, imm);
                    self.discard = true;
                }
                self.msg_decided = true;
            }
            if self.msg_left > 0 {
                if i == data.len() {
                    break;
                }
                let n = self.msg_left.min((data.len() - i) as u64) as usize;
                if !self.discard {
                    let wr = self.wrs.front_mut().expect("decided");
                    let Ok(spans) = &wr.spans else { unreachable!() };
                    wr.fault |= !scatter(mem, spans, wr.filled, &data[i..i + n]);
                    wr.filled += n as u64;
                    self.room -= n as u64;
                }
                self.msg_left -= n as u64;
                i += n;
            }
            if self.msg_left == 0 {
                if !self.discard {
                    let (len, imm) = (self.msg_len, self.msg_imm);
                    self.complete_front(CQE_STATUS_SUCCESS, CQE_DETAIL_NONE, len, imm);
                }
                self.in_msg = false;
                self.msg_decided = false;
                self.discard = false;
            }
        }
        i
    }

    /// Bytes delivered by the connection: placed now, or kept until WRs are posted.
    fn deliver(&mut self, mem: &GuestMemoryMmap, data: &[u8]) {
        if self.pending.is_empty() {
            let n = self.consume(mem, data);
            self.pending.extend(&data[n..]);
        } else {
            self.pending.extend(data);
            self.drain(mem);
        }
    }

    /// Places pending bytes into WRs posted since, then applies push and end of stream.
    fn drain(&mut self, mem: &GuestMemoryMmap) {
        while !self.pending.is_empty() {
            let (a, _) = self.pending.as_slices();
            let chunk = a.to_vec();
            let n = self.consume(mem, &chunk);
            self.pending.drain(..n);
            if n < chunk.len() {
                break;
            }
        }
        if self.pending.is_empty() && self.message {
            // A message whose header waited for a WR and has no bytes (or none yet)
            // completes or takes the WR now.
            self.consume(mem, &[]);
        }
        self.settle();
    }

    /// Push and end-of-stream completions, once every delivered byte is placed.
    fn settle(&mut self) {
        if !self.pending.is_empty() {
            return;
        }
        if self.push && !self.message {
            self.push = false;
            if let Some(wr) = self.wrs.front() {
                if wr.filled > 0 && wr.spans.is_ok() {
                    let len = wr.filled as u32;
                    self.complete_front(CQE_STATUS_SUCCESS, CQE_DETAIL_NONE, len, 0);
                }
            }
        }
        if self.eof {
            self.push = false;
            while !self.wrs.is_empty() {
                if self.fail_front() {
                    continue;
                }
                let wr = self.wrs.front().expect("not empty");
                let len = if self.message { 0 } else { wr.filled as u32 };
                self.complete_front(CQE_STATUS_SUCCESS, CQE_DETAIL_NONE, len, 0);
            }
            self.in_msg = false;
            self.msg_decided = false;
        }
    }

    /// Whether bytes the connection delivered never reached the application: waiting for a
    /// WR, in a partly filled WR (no completion told of them), or a message begun and not
    /// completed (one being discarded for want of room was already reported).
    fn holds_unread(&self) -> bool {
        !self.pending.is_empty()
            || self.hdr_have > 0
            || (self.in_msg && !(self.msg_decided && self.discard))
            || self.wrs.iter().any(|w| w.filled > 0)
    }

    /// Every WR taken completes FLUSHED (the QP went to the error state).
    fn flush(&mut self) {
        self.pending.clear();
        while let Some(wr) = self.wrs.front() {
            let id = wr.wr_id;
            self.complete_front(CQE_STATUS_FLUSHED, CQE_DETAIL_NONE, 0, 0);
            let _ = id;
        }
    }
}

/// A QP's receive WRs as the connection's [`RecvSink`].
struct QpSink<'a> {
    mem: &'a GuestMemoryMmap,
    rx: &'a mut RxState,
}

impl RecvSink for QpSink<'_> {
    fn space(&self) -> usize {
        self.rx.space()
    }
    fn deliver(&mut self, _offset: u64, data: &[u8]) {
        let _stage = crate::stages::span(crate::stages::Stage::Place);
        self.rx.deliver(self.mem, data);
    }
}

/// The sink of a connection no QP has taken yet (accepted by the device, waiting for an
/// ACCEPT): no posted space, so everything stays within the staging allowance.
struct Unclaimed;

impl RecvSink for Unclaimed {
    fn space(&self) -> usize {
        0
    }
    fn deliver(&mut self, _offset: u64, _data: &[u8]) {
        debug_assert!(false, "no delivery beyond the space offered");
    }
}

/// A QP's queued send WRs as the connection's [`SendSource`].
struct QpSource<'a> {
    mem: &'a GuestMemoryMmap,
    tx: &'a TxQueue,
}

impl SendSource for QpSource<'_> {
    fn read(&mut self, offset: u64, buf: &mut [u8]) {
        let _stage = crate::stages::span(crate::stages::Stage::GetData);
        let entries = &self.tx.entries;
        let mut i = entries.partition_point(|e| e.end <= offset);
        let mut at = 0;
        let mut off = offset;
        while at < buf.len() {
            let Some(e) = entries.get(i) else {
                buf[at..].fill(0);
                debug_assert!(false, "read beyond the queued bytes");
                return;
            };
            i += 1;
            if e.end <= off {
                continue;
            }
            let mut rel = off - e.start;
            if let Some(h) = &e.header {
                if rel < h.len() as u64 {
                    let n = (h.len() - rel as usize).min(buf.len() - at);
                    buf[at..at + n].copy_from_slice(&h[rel as usize..rel as usize + n]);
                    at += n;
                    off += n as u64;
                    rel += n as u64;
                }
                rel -= h.len() as u64;
                if at == buf.len() {
                    return;
                }
            }
            let left = (e.end - off) as usize;
            let n = left.min(buf.len() - at);
            match &e.data {
                TxData::Inline(b) => {
                    buf[at..at + n].copy_from_slice(&b[rel as usize..rel as usize + n])
                }
                TxData::Spans(s) => gather(self.mem, s, rel, &mut buf[at..at + n]),
            }
            at += n;
            off += n as u64;
        }
    }
}

/// What a TCP QP holds beyond its rings.
pub struct TcpQp {
    conn: Option<ConnId>,
    message: bool,
    send_cq: u32,
    recv_cq: u32,
    tx: TxQueue,
    rx: RxState,
    close_cmd: Option<PendingCmd>,
}

/// A connection the device accepted for a listener, waiting for an ACCEPT.
struct Ready {
    conn: ConnId,
    peer_closed: bool,
}

/// An engine listener's rendezvous: QPs offered by ACCEPT and connections waiting for one.
struct ListenState {
    addr: Ipv6Addr,
    port: u16,
    backlog: usize,
    parked: VecDeque<u32>,
    ready: VecDeque<Ready>,
}

/// The engine's TCP: connections, listeners' rendezvous, TCP QPs.
pub struct Tcp {
    table: ConnectionTable<u32>,
    cfg: tcp::Config,
    /// Segments for the device's own addresses, input on the next pass.
    local: VecDeque<Outgoing>,
    /// Segments produced and not yet sent.
    outbox: Vec<Outgoing>,
    listeners: HashMap<u32, ListenState>,
    qps: HashMap<u32, TcpQp>,
    /// Completions waiting for room in their CQ, per CQ, in order.
    pub(super) deferred: HashMap<u32, VecDeque<Cqe>>,
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
}

impl Default for TcpLimits {
    fn default() -> Self {
        let c = tcp::Config::default();
        TcpLimits {
            max_retries: c.max_retries,
            msl: c.msl,
            fin_timeout: c.fin_timeout,
            max_orphans: tcp::MAX_ORPHANS,
        }
    }
}

impl Tcp {
    pub fn new(seed: u64, mtu: usize, limits: TcpLimits) -> Tcp {
        let mut key = [0u8; 16];
        key[..8].copy_from_slice(&seed.to_le_bytes());
        key[8..].copy_from_slice(
            &seed
                .rotate_left(29)
                .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                .to_le_bytes(),
        );
        let cfg = tcp::Config {
            mss: tcp::Config::mss_for_mtu(mtu),
            max_retries: limits.max_retries,
            msl: limits.msl,
            fin_timeout: limits.fin_timeout,
            ..tcp::Config::default()
        };
        let mut table = ConnectionTable::new(IsnGenerator::new(key, Instant::now()));
        table.set_max_orphans(limits.max_orphans);
        Tcp {
            table,
            cfg,
            local: VecDeque::new(),
            outbox: Vec::new(),
            listeners: HashMap::new(),
            qps: HashMap::new(),
            deferred: HashMap::new(),
        }
    }

    /// Whether connections build super-segments (the link cuts them or takes them whole:
    /// [`crate::backend::Backend::gso`]). Connections made from now on follow.
    pub fn set_gso(&mut self, on: bool) {
        self.cfg.gso = on;
    }

    /// When the table's next timer is due.
    pub fn next_deadline(&mut self) -> Option<Instant> {
        self.table.next_deadline()
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

    /// Whether work is waiting that needs no event to wake it.
    pub fn busy(&self) -> bool {
        !self.local.is_empty() || !self.outbox.is_empty()
    }
}

/// Results of an admin command.
type Results = (u64, u64, u32);

fn peer_results(addr: Ipv6Addr, port: u16) -> Results {
    let o = addr.octets();
    (
        u64::from_ne_bytes(o[..8].try_into().expect("8")),
        u64::from_ne_bytes(o[8..].try_into().expect("8")),
        port as u32,
    )
}

impl Engine {
    // ---- completions ----------------------------------------------------------------

    /// Writes a completion now if its CQ has room and nothing is waiting before it, else
    /// queues it (in order) until the consumer makes room.
    pub(super) fn post_cqe(&mut self, mem: &GuestMemoryMmap, cq: u32, c: Cqe) {
        if !self.objects.cqs.contains_key(&cq) {
            return;
        }
        let waiting = self.tcp.deferred.get(&cq).is_some_and(|q| !q.is_empty());
        if !waiting && self.objects.cqs[&cq].free() > 0 {
            self.write_cqe(mem, cq, c);
        } else {
            if let Some(c) = self.objects.cqs.get_mut(&cq) {
                if !c.stalled {
                    c.stalled = true;
                    self.shared.stats.add(STAT_CQ_FULL, 1);
                }
            }
            self.tcp.deferred.entry(cq).or_default().push_back(c);
        }
    }

    /// Writes the completions that waited for room. Returns whether any went.
    pub(super) fn drain_deferred(&mut self, mem: &GuestMemoryMmap) -> bool {
        if self.tcp.deferred.is_empty() {
            return false;
        }
        let mut did = false;
        let cqs: Vec<u32> = self.tcp.deferred.keys().copied().collect();
        for cq in cqs {
            loop {
                let Some(c) = self.objects.cqs.get(&cq) else {
                    self.tcp.deferred.remove(&cq);
                    break;
                };
                if c.free() == 0 {
                    break;
                }
                let Some(q) = self.tcp.deferred.get_mut(&cq) else {
                    break;
                };
                let Some(e) = q.pop_front() else {
                    self.tcp.deferred.remove(&cq);
                    break;
                };
                self.write_cqe(mem, cq, e);
                did = true;
            }
        }
        did
    }

    /// Whether completions wait for room in `cq` (others must queue behind them).
    pub(super) fn cq_deferred(&self, cq: u32) -> bool {
        self.tcp.deferred.get(&cq).is_some_and(|q| !q.is_empty())
    }

    /// Writes the receive completions made, and announces the end of the stream once
    /// every byte before the peer's FIN has been placed.
    fn post_rx_done(&mut self, mem: &GuestMemoryMmap, qp: u32) {
        let Some(t) = self.tcp.qps.get_mut(&qp) else {
            return;
        };
        let eof = t.rx.eof && t.rx.pending.is_empty() && !t.rx.eof_announced;
        t.rx.eof_announced |= eof;
        let done = std::mem::take(&mut t.rx.done);
        let cq = t.recv_cq;
        if !done.is_empty() {
            // A receive WR completed: its sender may be waiting for the ACK (its send WR
            // completes then), so it goes soon (with the answer, if one comes in time),
            // not after the delayed-ACK timer.
            if let Some(e) = t.conn.and_then(|c| self.tcp.table.get_mut(c)) {
                e.conn.ack_delivery(std::time::Instant::now());
            }
            self.shared.stats.add(STAT_RECV_WQES, done.len() as u64);
            for c in done {
                self.post_cqe(mem, cq, c);
            }
        }
        if eof {
            // Not for a QP in the error state: its bytes were flushed, not placed.
            self.tcp_async_event(qp, ASYNC_EVENT_PEER_CLOSED, 0);
        }
    }

    /// Raises an asynchronous event about a TCP QP that carries a connection (an event
    /// about a connection the owner is still waiting for is its CONNECT's completion).
    fn tcp_async_event(&mut self, qp: u32, kind: u16, reason: u8) {
        let Some(q) = self.objects.qps.get(&qp) else {
            return;
        };
        if q.role != TcpRole::Connected || q.state != QpState::Ready {
            return;
        }
        debug!("QP {qp}: asynchronous event {kind} (reason {reason})");
        self.events.stage(super::events::AsyncEvent {
            ctx: q.ctx,
            object: qp,
            kind,
            reason,
        });
    }

    // ---- QP life ----------------------------------------------------------------------

    /// A TCP QP was created.
    pub(super) fn tcp_qp_created(&mut self, id: u32, framing: u8, send_cq: u32, recv_cq: u32) {
        let message = framing == FRAMING_MESSAGE;
        self.tcp.qps.insert(
            id,
            TcpQp {
                conn: None,
                message,
                send_cq,
                recv_cq,
                tx: TxQueue::default(),
                rx: RxState::new(id, message),
                close_cmd: None,
            },
        );
    }

    /// A TCP QP is being destroyed: its connection becomes an orphan if it was closed
    /// gracefully and nothing would be lost, else it is aborted (RST); the WRs the QP had
    /// taken complete FLUSHED (if `flush`), a pending CLOSE is cancelled.
    pub(super) fn tcp_qp_removed(&mut self, mem: &GuestMemoryMmap, id: u32, flush: bool) {
        for l in self.tcp.listeners.values_mut() {
            l.parked.retain(|&q| q != id);
        }
        let Some(mut t) = self.tcp.qps.remove(&id) else {
            return;
        };
        if let Some(conn) = t.conn.take() {
            let now = Instant::now();
            // Bytes received and never read would be lost without a word: a reset tells
            // the peer (as Linux's close() does with unread data).
            let orphaned = !t.rx.holds_unread() && self.tcp.table.orphan(conn, now).is_ok();
            if orphaned {
                debug!("QP {id}: its closed connection finishes without it");
                // Whatever is due goes out; its events from now on concern nobody.
                self.tcp_service(mem, conn, now);
            } else {
                if let Some(e) = self.tcp.table.get_mut(conn) {
                    e.conn.abort();
                    while let Some(o) = e.conn.poll_transmit(now, &mut tcp::NoData) {
                        self.tcp.outbox.push(o);
                    }
                }
                self.tcp.table.remove(conn);
            }
        }
        if let Some(cmd) = t.close_cmd.take() {
            self.cancel(mem, cmd);
        }
        if flush {
            for e in t.tx.entries.drain(..) {
                self.post_cqe(
                    mem,
                    t.send_cq,
                    cqe(
                        e.wr_id,
                        id,
                        CQE_OP_SEND,
                        CQE_STATUS_FLUSHED,
                        CQE_DETAIL_NONE,
                    ),
                );
            }
            t.rx.flush();
            for c in t.rx.done.drain(..) {
                self.post_cqe(mem, t.recv_cq, c);
            }
        }
    }

    /// The QP's connection failed (reset, timeout): the QP moves to the error state, its
    /// WRs are flushed, pending commands complete with `status`.
    fn tcp_fail(&mut self, mem: &GuestMemoryMmap, id: u32, status: u16) {
        if let Some(qp) = self.objects.qps.get_mut(&id) {
            qp.state = QpState::Error;
            if let TcpRole::Connecting { cmd } = qp.role {
                qp.role = TcpRole::Idle;
                self.finish_cmd(mem, cmd, status, (0, 0, 0));
            }
        }
        let Some(t) = self.tcp.qps.get_mut(&id) else {
            return;
        };
        t.conn = None;
        let close = t.close_cmd.take();
        let send_cq = t.send_cq;
        let entries: Vec<TxEntry> = t.tx.entries.drain(..).collect();
        t.rx.flush();
        if let Some(cmd) = close {
            self.finish_cmd(mem, cmd, status, (0, 0, 0));
        }
        for e in entries {
            self.post_cqe(
                mem,
                send_cq,
                cqe(
                    e.wr_id,
                    id,
                    CQE_OP_SEND,
                    CQE_STATUS_FLUSHED,
                    CQE_DETAIL_NONE,
                ),
            );
        }
        self.post_rx_done(mem, id);
        // What is still in the rings is flushed by the send queue turn.
        self.objects.mark_busy(id);
    }

    // ---- admin commands ---------------------------------------------------------------

    pub(super) fn tcp_listen(
        &mut self,
        id: u32,
        addr: Ipv6Addr,
        port: u16,
        backlog: u32,
    ) -> Result<(), u16> {
        let backlog = match backlog as usize {
            0 => MAX_BACKLOG,
            b => b.min(MAX_BACKLOG),
        };
        let cfg = self.tcp.cfg;
        self.tcp
            .table
            .listen(addr, port, cfg, backlog, true, Instant::now())
            .map_err(|_| ADMIN_STATUS_ADDR_IN_USE)?;
        self.tcp.listeners.insert(
            id,
            ListenState {
                addr,
                port,
                backlog,
                parked: VecDeque::new(),
                ready: VecDeque::new(),
            },
        );
        Ok(())
    }

    /// A listener goes away: connections waiting for an ACCEPT are reset.
    pub(super) fn tcp_unlisten(&mut self, id: u32) {
        let Some(l) = self.tcp.listeners.remove(&id) else {
            return;
        };
        self.tcp.table.unlisten(l.addr, l.port);
        let now = Instant::now();
        for r in l.ready {
            if let Some(e) = self.tcp.table.get_mut(r.conn) {
                e.conn.abort();
                while let Some(o) = e.conn.poll_transmit(now, &mut tcp::NoData) {
                    self.tcp.outbox.push(o);
                }
            }
            self.tcp.table.remove(r.conn);
        }
    }

    /// ACCEPT: a connection already waiting is given to the QP at once; otherwise the QP
    /// waits (oldest first) for the next one. None: pending.
    pub(super) fn tcp_accept(
        &mut self,
        mem: &GuestMemoryMmap,
        listener: u32,
        qp: u32,
    ) -> Option<Results> {
        let l = self.tcp.listeners.get_mut(&listener)?;
        while let Some(r) = l.ready.pop_front() {
            if self.tcp.table.get(r.conn).is_some() {
                let res = self.tcp_claim(mem, r.conn, qp, r.peer_closed);
                return Some(res);
            }
        }
        l.parked.push_back(qp);
        None
    }

    /// Gives connection `conn` to QP `qp`. Returns the ACCEPT results.
    fn tcp_claim(
        &mut self,
        mem: &GuestMemoryMmap,
        conn: ConnId,
        qp: u32,
        peer_closed: bool,
    ) -> Results {
        let now = Instant::now();
        let Tcp { table, qps, .. } = &mut self.tcp;
        let e = table.get_mut(conn).expect("caller checked");
        e.tag = Some(qp);
        let tuple = e.conn.tuple();
        let t = qps.get_mut(&qp).expect("TCP QPs have state");
        t.conn = Some(conn);
        t.rx.eof |= peer_closed;
        e.conn
            .recv_space_changed(now, &mut QpSink { mem, rx: &mut t.rx });
        t.rx.settle();
        if let Some(q) = self.objects.qps.get_mut(&qp) {
            q.role = TcpRole::Connected;
        }
        self.post_rx_done(mem, qp);
        self.tcp_service(mem, conn, now);
        // Sends posted while the QP waited can go now.
        self.objects.mark_busy(qp);
        debug!(
            "QP {qp}: accepted a connection from [{}]:{}",
            tuple.remote, tuple.remote_port
        );
        peer_results(tuple.remote, tuple.remote_port)
    }

    /// CONNECT. Err: the command fails at once; Ok: pending until established.
    pub(super) fn tcp_connect(
        &mut self,
        mem: &GuestMemoryMmap,
        ctx: u32,
        qp: u32,
        remote: Ipv6Addr,
        remote_port: u16,
    ) -> Result<(), u16> {
        if remote_port == 0 || !decode::is_unicast(&remote) {
            return Err(ADMIN_STATUS_BAD_PARAM);
        }
        let bound = self.objects.qps[&qp].bound;
        let local = match bound {
            Some((a, _)) if !a.is_unspecified() => a,
            _ if self.identity.is_local(&remote) => remote,
            // A destination the link cannot reach is treated as a silent peer: the SYN is
            // dropped and the CONNECT ends in TIMEOUT (or CANCELLED if the QP goes first).
            _ => match &self.net {
                Some(net) => net.stack.select_source(&remote),
                None => self
                    .identity
                    .addrs
                    .first()
                    .map_or(self.identity.link_local(), |(a, _)| *a),
            },
        };
        let local_port = match bound {
            Some((_, p)) => p,
            None => self.bind(ctx, qp, Ipv6Addr::UNSPECIFIED, 0)?.0 as u16,
        };
        let tuple = FourTuple {
            local,
            local_port,
            remote,
            remote_port,
        };
        let now = Instant::now();
        let cfg = self.tcp.cfg;
        let conn = self
            .tcp
            .table
            .connect(tuple, now, &cfg, qp)
            .map_err(|_| ADMIN_STATUS_ADDR_IN_USE)?;
        let Tcp { table, qps, .. } = &mut self.tcp;
        let t = qps.get_mut(&qp).expect("TCP QPs have state");
        t.conn = Some(conn);
        let e = table.get_mut(conn).expect("just made");
        e.conn
            .recv_space_changed(now, &mut QpSink { mem, rx: &mut t.rx });
        self.tcp_service(mem, conn, now);
        Ok(())
    }

    /// CLOSE: FIN after the queued sends. Err: fails at once; Ok: pending.
    pub(super) fn tcp_close(
        &mut self,
        mem: &GuestMemoryMmap,
        qp: u32,
        cmd: PendingCmd,
    ) -> Result<(), u16> {
        let t = self.tcp.qps.get_mut(&qp).ok_or(ADMIN_STATUS_BAD_STATE)?;
        let (Some(conn), None) = (t.conn, t.close_cmd) else {
            return Err(ADMIN_STATUS_BAD_STATE);
        };
        if self.objects.qps[&qp].role != TcpRole::Connected {
            return Err(ADMIN_STATUS_BAD_STATE);
        }
        // Sends posted before the CLOSE go first.
        self.read_qp_doorbell(mem, qp);
        self.tcp_take_sends(mem, qp, u32::MAX);
        let t = self.tcp.qps.get_mut(&qp).expect("checked");
        t.close_cmd = Some(cmd);
        if let Some(e) = self.tcp.table.get_mut(conn) {
            e.conn.close();
        }
        self.tcp_service(mem, conn, Instant::now());
        Ok(())
    }

    fn finish_cmd(&mut self, mem: &GuestMemoryMmap, cmd: PendingCmd, status: u16, r: Results) {
        self.complete_async(mem, cmd, status, r);
    }

    // ---- send and receive work of a QP --------------------------------------------------

    /// A TCP QP's turn in the send scheduler: new receive WRs become receive space, new
    /// send WRs are queued on the connection. Returns (progress, more work).
    pub(super) fn tcp_qp_work(&mut self, mem: &GuestMemoryMmap, id: u32) -> (bool, bool) {
        let mut did = self.tcp_take_recvs(mem, id);
        let qp = &self.objects.qps[&id];
        if qp.sq_head == qp.sq_tail {
            return (did, false);
        }
        match qp.role {
            // Sends wait for the connection.
            TcpRole::Accepting { .. } | TcpRole::Connecting { .. } => return (did, false),
            TcpRole::Idle | TcpRole::Connected => {}
        }
        let (n, more) = self.tcp_take_sends(mem, id, SEND_BUDGET);
        did |= n > 0;
        (did, more)
    }

    /// Takes the receive WRs posted since the last look.
    fn tcp_take_recvs(&mut self, mem: &GuestMemoryMmap, id: u32) -> bool {
        let mut did = false;
        loop {
            let qp = &self.objects.qps[&id];
            if qp.rq_head == qp.rq_tail || qp.state != QpState::Ready {
                break;
            }
            let ctx = qp.ctx;
            let Some(raw) = self.take_wqe(mem, id, false) else {
                break;
            };
            did = true;
            let wr = match decode::recv_wqe(&raw) {
                Ok(wr) => wr,
                Err(WqeError {
                    wr_id,
                    status,
                    detail,
                }) => {
                    let t = self.tcp.qps.get_mut(&id).expect("TCP QP");
                    t.rx.add(RecvWr {
                        wr_id,
                        spans: Err((status, detail)),
                        cap: 0,
                        filled: 0,
                        fault: false,
                    });
                    continue;
                }
            };
            let cap: u64 = wr.sges.iter().map(|s| s.length as u64).sum();
            let spans = match self.translate(ctx, &wr.sges, MR_ACCESS_LOCAL_WRITE) {
                Ok(s) => Ok(s),
                Err(Fault { status, detail }) => {
                    self.shared.stats.add(STAT_PROTECTION_ERRORS, 1);
                    Err((status, detail))
                }
            };
            let t = self.tcp.qps.get_mut(&id).expect("TCP QP");
            t.rx.add(RecvWr {
                wr_id: wr.wr_id,
                spans,
                cap,
                filled: 0,
                fault: false,
            });
        }
        if !did {
            return false;
        }
        let now = Instant::now();
        let Tcp { table, qps, .. } = &mut self.tcp;
        let t = qps.get_mut(&id).expect("TCP QP");
        t.rx.drain(mem);
        let conn = t.conn;
        if let Some(e) = conn.and_then(|c| table.get_mut(c)) {
            e.conn
                .recv_space_changed(now, &mut QpSink { mem, rx: &mut t.rx });
            t.rx.settle();
        } else {
            // No connection: failed WRs and, after the end of the stream, every WR
            // complete now.
            t.rx.settle();
            while t.rx.fail_front() {}
        }
        self.post_rx_done(mem, id);
        if let Some(c) = conn {
            self.tcp_service(mem, c, now);
        }
        true
    }

    /// Takes up to `budget` send WRs and queues their bytes on the connection. Returns
    /// (taken, more waiting).
    fn tcp_take_sends(&mut self, mem: &GuestMemoryMmap, id: u32, budget: u32) -> (u32, bool) {
        let mut n = 0;
        let mut conn_touched = None;
        while n < budget {
            let qp = &self.objects.qps[&id];
            if qp.sq_head == qp.sq_tail || qp.state != QpState::Ready {
                break;
            }
            let ctx = qp.ctx;
            self.shared.stats.add(STAT_SEND_WQES, 1);
            let Some(raw) = self.take_wqe(mem, id, true) else {
                break;
            };
            n += 1;
            let t = self.tcp.qps.get(&id).expect("TCP QP");
            let conn = t.conn;
            let live = conn.and_then(|c| self.tcp.table.get(c));
            let (status, detail, wr) = match decode::send_wqe(&raw) {
                Err(WqeError {
                    wr_id,
                    status,
                    detail,
                }) => {
                    self.tcp_push_failed(mem, id, wr_id, status, detail);
                    continue;
                }
                Ok(wr) if live.is_none() => (CQE_STATUS_BAD_DEST, CQE_DETAIL_NOT_BOUND, wr),
                Ok(wr) => (CQE_STATUS_SUCCESS, CQE_DETAIL_NONE, wr),
            };
            if status != CQE_STATUS_SUCCESS {
                self.tcp_push_failed(mem, id, wr.wr_id, status, detail);
                continue;
            }
            let (data, len) = match &wr.payload {
                Payload::Inline(b) => (TxData::Inline(b.clone()), b.len() as u64),
                Payload::Gather(sges) => {
                    let len: u64 = sges.iter().map(|s| s.length as u64).sum();
                    if len > u32::MAX as u64 {
                        self.tcp_push_failed(mem, id, wr.wr_id, CQE_STATUS_LOCAL_LENGTH, 0);
                        continue;
                    }
                    match self.translate(ctx, sges, 0) {
                        Ok(s) => (TxData::Spans(s), len),
                        Err(f) => {
                            self.shared.stats.add(STAT_PROTECTION_ERRORS, 1);
                            self.tcp_push_failed(mem, id, wr.wr_id, f.status, f.detail);
                            continue;
                        }
                    }
                }
            };
            let t = self.tcp.qps.get_mut(&id).expect("TCP QP");
            let header = t.message.then(|| {
                let mut h = [0u8; MSG_HEADER_SIZE as usize];
                h[..4].copy_from_slice(&(len as u32).to_le_bytes());
                h[4..].copy_from_slice(&wr.imm_data.to_le_bytes());
                h
            });
            let stream_len = len + header.map_or(0, |h| h.len() as u64);
            let c = conn.expect("live");
            let e = self.tcp.table.get_mut(c).expect("live");
            if e.conn.queue_send(stream_len).is_err() {
                // Closing: nothing more may be sent.
                self.tcp_push_failed(mem, id, wr.wr_id, CQE_STATUS_BAD_DEST, CQE_DETAIL_NOT_BOUND);
                continue;
            }
            let start = t.tx.queued;
            t.tx.queued += stream_len;
            t.tx.entries.push_back(TxEntry {
                wr_id: wr.wr_id,
                start,
                end: start + stream_len,
                header,
                data,
                len: len as u32,
                error: None,
            });
            conn_touched = Some(c);
        }
        if let Some(c) = conn_touched {
            self.tcp_service(mem, c, Instant::now());
        }
        let qp = &self.objects.qps[&id];
        (n, qp.sq_head != qp.sq_tail && qp.state == QpState::Ready)
    }

    /// A send WR that failed its checks: it completes in its turn, after the WRs before it.
    fn tcp_push_failed(
        &mut self,
        mem: &GuestMemoryMmap,
        id: u32,
        wr_id: u64,
        status: u8,
        detail: u32,
    ) {
        let t = self.tcp.qps.get_mut(&id).expect("TCP QP");
        let at = t.tx.queued;
        t.tx.entries.push_back(TxEntry {
            wr_id,
            start: at,
            end: at,
            header: None,
            data: TxData::Inline(Vec::new()),
            len: 0,
            error: Some((status, detail)),
        });
        let acked = match t.conn.and_then(|c| self.tcp.table.get(c)) {
            Some(e) => e.conn.acked(),
            None => u64::MAX,
        };
        self.tcp_complete_sends(mem, id, acked);
    }

    /// Completes the send WRs whose last byte is below `upto`.
    fn tcp_complete_sends(&mut self, mem: &GuestMemoryMmap, id: u32, upto: u64) {
        let Some(t) = self.tcp.qps.get_mut(&id) else {
            return;
        };
        let mut done = Vec::new();
        while t.tx.entries.front().is_some_and(|e| e.end <= upto) {
            let e = t.tx.entries.pop_front().expect("front");
            let c = match e.error {
                Some((status, detail)) => cqe(e.wr_id, id, CQE_OP_SEND, status, detail),
                None => {
                    let mut c = cqe(
                        e.wr_id,
                        id,
                        CQE_OP_SEND,
                        CQE_STATUS_SUCCESS,
                        CQE_DETAIL_NONE,
                    );
                    c.byte_len = e.len;
                    c
                }
            };
            done.push(c);
        }
        let cq = t.send_cq;
        for c in done {
            self.post_cqe(mem, cq, c);
        }
    }

    // ---- segments in and out ---------------------------------------------------------------

    /// A TCP segment for one of the device's addresses. Returns why it was dropped when it
    /// does not parse (the caller counts it: the link is taken out of `self` while frames
    /// are delivered, so this cannot reach the stack's counters itself).
    pub(super) fn tcp_segment_in(
        &mut self,
        mem: &GuestMemoryMmap,
        src: Ipv6Addr,
        dst: Ipv6Addr,
        bytes: &[u8],
    ) -> Option<DropReason> {
        let seg = match tcp::wire::parse(src, dst, bytes) {
            Ok(s) => s,
            Err(tcp::ParseError::Checksum) => return Some(DropReason::BadChecksum),
            Err(_) => return Some(DropReason::Malformed),
        };
        let now = Instant::now();
        match self.tcp.table.input(&seg, now, 0) {
            Input::Connection(id) => {
                let Tcp { table, qps, .. } = &mut self.tcp;
                let e = table.get_mut(id).expect("demultiplexed");
                match e.tag.and_then(|q| qps.get_mut(&q)) {
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
                    None => e.conn.on_segment(&seg, now, &mut Unclaimed),
                }
                self.tcp_service(mem, id, now);
            }
            Input::HalfOpen(id) => self.tcp_service(mem, id, now),
            Input::Reply(o) => self.tcp.outbox.push(o),
            Input::Dropped => {}
        }
        None
    }

    /// After anything happened to a connection: its events, its segments, its timer.
    fn tcp_service(&mut self, mem: &GuestMemoryMmap, id: ConnId, now: Instant) {
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
            let table = &mut self.tcp.table;
            let qps = &mut self.tcp.qps;
            let outbox = &mut self.tcp.outbox;
            let Some(e) = table.get_mut(id) else {
                return;
            };
            match e.tag.and_then(|q| qps.get(&q)) {
                Some(t) => {
                    let mut src = QpSource { mem, tx: &t.tx };
                    while let Some(o) = e.conn.poll_transmit(now, &mut src) {
                        outbox.push(o);
                    }
                }
                None => {
                    while let Some(o) = e.conn.poll_transmit(now, &mut tcp::NoData) {
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
                    if let Some(t) = tag.and_then(|q| self.tcp.qps.get_mut(&q)) {
                        if t.conn == Some(id) {
                            t.conn = None;
                        }
                    }
                    for l in self.tcp.listeners.values_mut() {
                        l.ready.retain(|r| r.conn != id);
                    }
                }
                None => self.tcp.table.update(id),
            }
            return;
        }
    }

    /// A connection's events to whom they concern: its QP, the listener rendezvous of a
    /// connection no QP has taken yet, or nobody for an orphan (its QP, CQs and memory
    /// may be gone).
    fn tcp_dispatch(
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

    /// A pending CLOSE completes once our FIN is acknowledged.
    fn tcp_check_close(&mut self, mem: &GuestMemoryMmap, qp: u32, id: ConnId) {
        let Some(t) = self.tcp.qps.get_mut(&qp) else {
            return;
        };
        if t.close_cmd.is_none() {
            return;
        }
        let done = match self.tcp.table.get(id) {
            Some(e) => matches!(
                e.conn.state(),
                State::FinWait2 | State::TimeWait | State::Closed
            ),
            None => true,
        };
        if done {
            let cmd = t.close_cmd.take().expect("checked");
            self.finish_cmd(mem, cmd, ADMIN_STATUS_OK, (0, 0, 0));
        }
    }

    fn tcp_event(&mut self, mem: &GuestMemoryMmap, qp: u32, id: ConnId, ev: Event) {
        match ev {
            Event::Established => {
                let tuple = match self.tcp.table.get(id) {
                    Some(e) => e.conn.tuple(),
                    None => return,
                };
                if let Some(q) = self.objects.qps.get_mut(&qp) {
                    if let TcpRole::Connecting { cmd } = q.role {
                        q.role = TcpRole::Connected;
                        self.finish_cmd(
                            mem,
                            cmd,
                            ADMIN_STATUS_OK,
                            peer_results(tuple.remote, tuple.remote_port),
                        );
                    }
                }
                self.objects.mark_busy(qp);
            }
            Event::Acked { upto } => self.tcp_complete_sends(mem, qp, upto),
            Event::DataArrived { push, .. } => {
                if let Some(t) = self.tcp.qps.get_mut(&qp) {
                    if push.is_some() {
                        t.rx.push = true;
                        t.rx.settle();
                    }
                }
                self.post_rx_done(mem, qp);
            }
            Event::PeerClosed => {
                if let Some(t) = self.tcp.qps.get_mut(&qp) {
                    t.rx.eof = true;
                    t.rx.settle();
                }
                self.post_rx_done(mem, qp);
            }
            // Raised before the QP leaves the ready state; delivered after the flush
            // completions (at the end of the engine's pass).
            Event::Reset => {
                debug!("QP {qp}: connection reset");
                self.tcp_async_event(qp, ASYNC_EVENT_QP_ERROR, ASYNC_REASON_PEER_RESET);
                self.tcp_fail(mem, qp, ADMIN_STATUS_REFUSED);
            }
            Event::TimedOut => {
                debug!("QP {qp}: connection timed out");
                self.tcp_async_event(qp, ASYNC_EVENT_QP_ERROR, ASYNC_REASON_TIMEOUT);
                self.tcp_fail(mem, qp, ADMIN_STATUS_TIMEOUT);
            }
            Event::Closed => {
                if let Some(q) = self.objects.qps.get_mut(&qp) {
                    if let TcpRole::Connecting { cmd } = q.role {
                        q.role = TcpRole::Idle;
                        self.finish_cmd(mem, cmd, ADMIN_STATUS_CANCELLED, (0, 0, 0));
                    }
                }
                if let Some(t) = self.tcp.qps.get_mut(&qp) {
                    if let Some(cmd) = t.close_cmd.take() {
                        self.finish_cmd(mem, cmd, ADMIN_STATUS_OK, (0, 0, 0));
                    }
                }
            }
        }
    }

    /// Events of a connection the device accepted and no QP has taken yet.
    fn tcp_unclaimed_events(&mut self, mem: &GuestMemoryMmap, id: ConnId, events: &[Event]) {
        for ev in events {
            match ev {
                Event::Established => {
                    let Some(e) = self.tcp.table.get(id) else {
                        return;
                    };
                    let port = e.conn.tuple().local_port;
                    let Some(&lid) = self.objects.listen_ports.get(&port) else {
                        self.tcp_abort_unclaimed(id);
                        continue;
                    };
                    let Some(l) = self.tcp.listeners.get_mut(&lid) else {
                        self.tcp_abort_unclaimed(id);
                        continue;
                    };
                    if let Some(qp) = l.parked.pop_front() {
                        let cmd = match self.objects.qps.get(&qp).map(|q| q.role) {
                            Some(TcpRole::Accepting { cmd, .. }) => cmd,
                            _ => continue,
                        };
                        let r = self.tcp_claim(mem, id, qp, false);
                        self.finish_cmd(mem, cmd, ADMIN_STATUS_OK, r);
                        return; // the QP's service took over
                    } else if l.ready.len() < l.backlog {
                        l.ready.push_back(Ready {
                            conn: id,
                            peer_closed: false,
                        });
                    } else {
                        self.tcp_abort_unclaimed(id);
                    }
                }
                Event::PeerClosed => {
                    for l in self.tcp.listeners.values_mut() {
                        if let Some(r) = l.ready.iter_mut().find(|r| r.conn == id) {
                            r.peer_closed = true;
                        }
                    }
                }
                Event::Reset | Event::TimedOut | Event::Closed => {
                    for l in self.tcp.listeners.values_mut() {
                        l.ready.retain(|r| r.conn != id);
                    }
                }
                Event::Acked { .. } | Event::DataArrived { .. } => {}
            }
        }
    }

    fn tcp_abort_unclaimed(&mut self, id: ConnId) {
        if let Some(e) = self.tcp.table.get_mut(id) {
            e.conn.abort();
        }
    }

    /// Locally routed segments, due timers, and the segments they produce. Returns
    /// whether anything happened.
    pub(super) fn poll_tcp(&mut self, mem: &GuestMemoryMmap) -> bool {
        let mut did = false;
        for _ in 0..LOCAL_BUDGET {
            let Some(o) = self.tcp.local.pop_front() else {
                break;
            };
            did = true;
            if let Some(why) = self.tcp_segment_in(mem, o.src, o.dst, &o.segment) {
                // Segments of the device's own connections to itself; count them like any.
                if let Some(net) = self.net.as_mut() {
                    net.stack.stats_mut().drop(why);
                }
            }
        }
        let now = Instant::now();
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

    /// Sends the segments produced: to the local queue for the device's own addresses,
    /// else onto the link. Returns whether there were any.
    pub(super) fn flush_tcp(&mut self) -> bool {
        if self.tcp.outbox.is_empty() {
            return false;
        }
        let now = Instant::now();
        let out = std::mem::take(&mut self.tcp.outbox);
        let mut sent = false;
        for o in out {
            if self.identity.is_local(&o.dst) {
                self.tcp.local.push_back(o);
            } else if let Some(net) = self.net.as_mut() {
                if let Err(e) = net
                    .stack
                    .send_tcp(o.src, o.dst, HOP_LIMIT, &o.segment, o.gso, now)
                {
                    debug!("TCP segment to {} not sent: {e}", o.dst);
                }
                sent = true;
            }
        }
        if sent {
            if let Some(net) = self.net.as_mut() {
                net.flush();
            }
        }
        true
    }
}
