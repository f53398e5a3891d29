//! The receive unit of TCP QPs: placement. Receive WRs taken from the ring become the
//! connection's receive space (`QpSink`); the bytes the connection delivers in order are
//! scattered straight into the WRs' buffers (`RxState::deliver` → `scatter`), with
//! message framing deframed on the way (one message per WR, its header read by
//! `qpip_abi::wqe::HeaderReader`), and the completed WRs become receive CQEs.

use std::collections::VecDeque;
use std::time::Instant;

use qpip_abi::admin::*;
use qpip_abi::cqe::*;
use qpip_abi::wqe::HeaderReader;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use crate::net::tcp::{Connection, RecvSink};

use crate::engine::completion::cqe;
use crate::engine::decode;
use crate::engine::memory::{spans_use, Fault, Span};
use crate::engine::Engine;

/// What a message-framed QP buffers in the device for messages that no receive WR can take
/// yet, once its application has posted a receive: the receive window such a QP offers
/// (beyond the message in progress and the connection's staging). Posted bytes cannot be
/// the window here, as they are in stream framing: a WR holds one message whatever its
/// size, so a WR of 64 KiB may take only 1 KiB of the stream, and a window of posted bytes
/// would promise what the receiver then drops.
pub(super) const MESSAGE_BUFFER: usize = 256 * 1024;

/// The capacity an emptied buffer of pending bytes may keep (more is given back).
const PENDING_KEPT: usize = 16 * 1024;

/// A receive WR taken from the ring.
pub(super) struct RecvWr {
    pub(super) wr_id: u64,
    pub(super) spans: Result<Vec<Span>, (u8, u32)>,
    pub(super) cap: u64,
    pub(super) filled: u64,
    /// A placement into it failed (its guest memory went away under the device, unmapped
    /// by the VMM): it completes in error, never as a success with bytes missing.
    pub(super) fault: bool,
}

/// A receive WR as [`Engine::take_recv_wr`] takes it off its ring.
pub(super) struct TakenRecv {
    pub(super) wr_id: u64,
    /// Its buffer, or why it has none (status, detail).
    pub(super) spans: Result<Vec<Span>, (u8, u32)>,
    /// The bytes its SGEs hold.
    pub(super) cap: u64,
}

/// The receive side of a TCP QP.
pub(super) struct RxState {
    pub(super) qp: u32,
    pub(super) message: bool,
    pub(super) wrs: VecDeque<RecvWr>,
    /// Bytes the connection delivered that no WR could take yet (bounded by the space
    /// reported: with message framing up to [`MESSAGE_BUFFER`]).
    pub(super) pending: VecDeque<u8>,
    /// Message framing: a receive was ever posted, so the application receives and the
    /// QP's [`MESSAGE_BUFFER`] is offered (once offered, never taken back: a window once
    /// promised must stay kept).
    pub(super) buffering: bool,
    /// Free capacity of the posted WRs that have usable buffers.
    pub(super) room: u64,
    // Message framing: the header being read and the message being placed.
    pub(super) hdr: HeaderReader,
    pub(super) in_msg: bool,
    pub(super) msg_decided: bool,
    pub(super) msg_left: u64,
    pub(super) msg_len: u32,
    pub(super) msg_imm: u32,
    pub(super) discard: bool,
    /// Stream framing: a pushed segment was placed; complete the partly filled WR.
    pub(super) push: bool,
    /// The peer's FIN arrived after every byte.
    pub(super) eof: bool,
    /// The end of the stream was announced (`ASYNC_EVENT_PEER_CLOSED`).
    pub(super) eof_announced: bool,
    /// Completions made, for the engine to write.
    pub(super) done: Vec<Cqe>,
}

/// Writes `data` at byte `off` of the buffer described by `spans`. False if some of it
/// could not be written: the spans were checked against the region and guest RAM when the
/// WR was taken, but the VMM may have unmapped that memory since.
#[must_use]
pub(super) fn scatter(
    mem: &GuestMemoryMmap,
    spans: &[Span],
    mut off: u64,
    mut data: &[u8],
) -> bool {
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

impl RxState {
    pub(super) fn new(qp: u32, message: bool) -> RxState {
        RxState {
            qp,
            message,
            wrs: VecDeque::new(),
            pending: VecDeque::new(),
            buffering: false,
            room: 0,
            hdr: HeaderReader::default(),
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
    pub(super) fn space(&self) -> usize {
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
            self.hdr.missing() as u64
        } else if self.msg_decided {
            // Placed into the front WR (it fits, checked when decided) or discarded.
            self.msg_left
        } else {
            0
        };
        (current as usize).saturating_add(buffer)
    }

    pub(super) fn add(&mut self, wr: RecvWr) {
        if wr.spans.is_ok() {
            self.room += wr.cap;
        }
        self.buffering = true;
        self.wrs.push_back(wr);
    }

    /// Completes the front WR (in error, whatever `status` says, if a placement into it
    /// failed).
    pub(super) fn complete_front(&mut self, status: u8, detail: u32, byte_len: u32, imm: u32) {
        let Some(wr) = self.wrs.pop_front() else {
            return;
        };
        if wr.spans.is_ok() {
            self.room -= wr.cap - wr.filled;
        }
        let (status, detail) = if wr.fault && status == CQE_STATUS_SUCCESS {
            // As a UDP datagram whose buffer cannot be written (engine/udp.rs).
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
    pub(super) fn fail_front(&mut self) -> bool {
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
    pub(super) fn consume(&mut self, mem: &GuestMemoryMmap, data: &[u8]) -> usize {
        if self.message {
            self.consume_messages(mem, data)
        } else {
            self.consume_stream(mem, data)
        }
    }

    pub(super) fn consume_stream(&mut self, mem: &GuestMemoryMmap, data: &[u8]) -> usize {
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

    pub(super) fn consume_messages(&mut self, mem: &GuestMemoryMmap, data: &[u8]) -> usize {
        let mut i = 0;
        loop {
            if !self.in_msg {
                if i == data.len() {
                    break;
                }
                let (n, header) = self.hdr.take(&data[i..]);
                i += n;
                let Some(h) = header else {
                    continue;
                };
                self.msg_len = h.length;
                self.msg_imm = h.imm_data;
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
    pub(super) fn deliver(&mut self, mem: &GuestMemoryMmap, data: &[u8]) {
        if self.pending.is_empty() {
            let n = self.consume(mem, data);
            self.pending.extend(&data[n..]);
        } else {
            self.pending.extend(data);
            self.drain(mem);
        }
    }

    /// Places pending bytes into WRs posted since, then applies push and end of stream.
    pub(super) fn drain(&mut self, mem: &GuestMemoryMmap) {
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
        if self.pending.is_empty() && self.pending.capacity() > PENDING_KEPT {
            // A QP that once buffered up to its whole message buffer does not keep that
            // memory while idle: thousands of connections may each have done so.
            self.pending = VecDeque::new();
        }
        self.settle();
    }

    /// Push and end-of-stream completions, once every delivered byte is placed.
    pub(super) fn settle(&mut self) {
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
    pub(super) fn holds_unread(&self) -> bool {
        !self.pending.is_empty()
            || self.hdr.partial()
            || (self.in_msg && !(self.msg_decided && self.discard))
            || self.wrs.iter().any(|w| w.filled > 0)
    }

    /// Every WR taken completes FLUSHED (the QP went to the error state).
    pub(super) fn flush(&mut self) {
        self.pending.clear();
        while let Some(wr) = self.wrs.front() {
            // A WR that failed its checks (or lost its region) says why.
            let (status, detail) = wr
                .spans
                .as_ref()
                .err()
                .copied()
                .unwrap_or((CQE_STATUS_FLUSHED, CQE_DETAIL_NONE));
            self.complete_front(status, detail, 0, 0);
        }
    }

    pub(super) fn uses_region(&self, key: u32) -> bool {
        self.wrs
            .iter()
            .any(|w| w.spans.as_ref().is_ok_and(|s| spans_use(s, key)))
    }

    /// Fails the WRs in region `key` (they complete so when the QP flushes; nothing is
    /// placed into them again).
    pub(super) fn region_gone(&mut self, key: u32) {
        for w in &mut self.wrs {
            if w.spans.as_ref().is_ok_and(|s| spans_use(s, key)) {
                self.room -= w.cap - w.filled;
                w.spans = Err((CQE_STATUS_LOCAL_PROTECTION, CQE_DETAIL_REGION_GONE));
            }
        }
    }
}

/// Applies push and end of stream to `rx` ([`RxState::settle`]) and, when that gave up
/// receive space — a stream receive completed early by PSH gives up the rest of its
/// buffer — tells `conn` before it offers a window from the space it knew: the window it
/// offered already is then kept by staging (`Connection::keep_promise`), and the right edge
/// does not move.
pub(super) fn settle_with(
    conn: Option<&mut Connection>,
    mem: &GuestMemoryMmap,
    rx: &mut RxState,
    now: Instant,
) {
    let before = rx.space();
    rx.settle();
    if let Some(c) = conn {
        if rx.space() < before {
            c.recv_space_changed(now, &mut QpSink { mem, rx });
            rx.settle();
        }
    }
}

/// A QP's receive WRs as the connection's [`RecvSink`].
pub(super) struct QpSink<'a> {
    pub(super) mem: &'a GuestMemoryMmap,
    pub(super) rx: &'a mut RxState,
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
pub(super) struct Unclaimed;

impl RecvSink for Unclaimed {
    fn space(&self) -> usize {
        0
    }
    fn deliver(&mut self, _offset: u64, _data: &[u8]) {
        debug_assert!(false, "no delivery beyond the space offered");
    }
}

impl Engine {
    /// Writes the receive completions made, and announces the end of the stream once
    /// every byte before the peer's FIN has been placed.
    pub(super) fn post_rx_done(&mut self, mem: &GuestMemoryMmap, qp: u32) {
        let Some(q) = self.objects.qp_mut(qp) else {
            return;
        };
        let cq = q.recv_cq();
        let Some(t) = q.tcp_mut() else {
            return;
        };
        let eof = t.rx.eof && t.rx.pending.is_empty() && !t.rx.eof_announced;
        t.rx.eof_announced |= eof;
        let done = std::mem::take(&mut t.rx.done);
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

    /// The next receive WR posted on TCP QP `id` (of either framing, or iWARP) since the
    /// last look, decoded and its buffer translated; None when there is none or the QP is
    /// not ready. A WR that fails its checks carries why (status, detail): it completes in
    /// error in its turn.
    pub(super) fn take_recv_wr(&mut self, mem: &GuestMemoryMmap, id: u32) -> Option<TakenRecv> {
        let qp = self.objects.qp(id).expect("caller checked");
        if !qp.posted(false) || !qp.is_ready() {
            return None;
        }
        let ctx = qp.home().ctx;
        let raw = self.take_wqe(mem, id, false)?;
        Some(match decode::recv_wqe(&raw) {
            Err(e) => TakenRecv {
                wr_id: e.wr_id,
                spans: Err((e.status, e.detail)),
                cap: 0,
            },
            Ok(wr) => TakenRecv {
                wr_id: wr.wr_id,
                cap: wr.sges.iter().map(|s| s.length as u64).sum(),
                spans: self
                    .translate(ctx, &wr.sges, MR_ACCESS_LOCAL_WRITE)
                    .map_err(|Fault { status, detail }| {
                        self.shared.stats.add(STAT_PROTECTION_ERRORS, 1);
                        (status, detail)
                    }),
            },
        })
    }

    /// Takes the receive WRs posted since the last look.
    pub(super) fn tcp_take_recvs(&mut self, mem: &GuestMemoryMmap, id: u32) -> bool {
        let mut did = false;
        while let Some(TakenRecv { wr_id, spans, cap }) = self.take_recv_wr(mem, id) {
            did = true;
            let t = self.objects.tcp_qp_mut(id).expect("TCP QP");
            t.rx.add(RecvWr {
                wr_id,
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
        let table = &mut self.tcp.table;
        let t = self.objects.tcp_qp_mut(id).expect("TCP QP");
        t.rx.drain(mem);
        let conn = t.conn;
        if let Some(e) = conn.and_then(|c| table.get_mut(c)) {
            e.conn
                .recv_space_changed(now, &mut QpSink { mem, rx: &mut t.rx });
            settle_with(Some(&mut e.conn), mem, &mut t.rx, now);
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
}
