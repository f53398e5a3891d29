//! The receive side of an iWARP QP: the FPDUs the deframer cuts from the in-order stream,
//! each parsed and acted on at once — a Send's payload scattered into the receive WR its
//! MSN names, a Write's or Read Response's into the region its STag names (checked for
//! key, context, bounds and right before a byte moves), a Read Request answered by a
//! response queued on the transmit side, a Terminate taken as the end. Any error found
//! here ends the connection with a Terminate that says what and where
//! ([`super::IwarpQp::fail`]).

use std::collections::HashMap;

use qpip_abi::admin::{MR_ACCESS_REMOTE_READ, MR_ACCESS_REMOTE_WRITE};
use qpip_abi::cqe::*;
use vm_memory::GuestMemoryMmap;

use crate::engine::completion::{cqe, cqe_ok};
use crate::engine::memory::{MemoryRegion, Span};
use crate::engine::tcp::rx::scatter;
use crate::engine::tripwire::{self, Tripwire};
use crate::net::iwarp::wire::ddp::Buffer;
use crate::net::iwarp::wire::fpdu;
use crate::net::iwarp::wire::rdmap::{self, Body, Message, Opcode};
use crate::net::iwarp::wire::terminate::{
    DdpTaggedCode, DdpUntaggedCode, MpaCode, RdmapCode, RdmapType, TermError,
};

use super::tx::{Data, Until};
use super::IwarpQp;

/// A receive WR taken from the ring, waiting for the Send whose MSN is its turn.
#[derive(Debug)]
pub(super) struct RecvWr {
    pub(super) wr_id: u64,
    /// Its buffer, or why it has none (status, detail).
    pub(super) spans: Result<Vec<Span>, (u8, u32)>,
    pub(super) cap: u64,
    /// Bytes placed so far (the end of the furthest segment).
    pub(super) filled: u64,
}

/// What the receive side needs of the engine: guest memory, the memory regions an STag
/// may name, the QP's context and id.
pub(in crate::engine::tcp) struct Env<'a> {
    pub(in crate::engine::tcp) mem: &'a GuestMemoryMmap,
    pub(in crate::engine::tcp) mrs: &'a HashMap<u32, MemoryRegion>,
    pub(in crate::engine::tcp) tripwires: &'a HashMap<u32, Tripwire>,
    pub(in crate::engine::tcp) ctx: u32,
    pub(in crate::engine::tcp) qp: u32,
}

type Checked<T> = Result<T, TermError>;

const fn protection(code: RdmapCode) -> TermError {
    TermError::Rdmap(RdmapType::RemoteProtection, code)
}

impl Env<'_> {
    /// The guest spans of `[to, to + len)` of the region `stag` names, if it is one of
    /// this QP's context granting `right`. The errors are a tagged buffer's (`tagged`: a
    /// Write) or RDMAP's (a Read Request's source).
    fn region(&self, stag: u32, to: u64, len: u64, right: u32, tagged: bool) -> Checked<Vec<Span>> {
        let (invalid, bounds) = if tagged {
            (
                TermError::DdpTagged(DdpTaggedCode::InvalidStag),
                TermError::DdpTagged(DdpTaggedCode::BaseOrBounds),
            )
        } else {
            (
                protection(RdmapCode::InvalidStag),
                protection(RdmapCode::BaseOrBounds),
            )
        };
        let mr = self
            .mrs
            .get(&stag)
            .filter(|m| m.ctx == self.ctx)
            .ok_or(invalid)?;
        if mr.access & right != right {
            return Err(protection(RdmapCode::AccessRights));
        }
        let mut spans = Vec::new();
        mr.translate(stag, to, len, &mut spans)
            .map_err(|_| bounds)?;
        Ok(spans)
    }
}

/// Segments placed ahead of a hole that one QP remembers at most ([`IwarpQp::place_ahead`]).
pub(super) const MAX_AHEAD_RANGES: usize = 1024;

impl IwarpQp {
    /// Writes `data` at byte `off` of the buffer `spans` describes, noting the tripwires
    /// it touches. False if guest memory refused the write.
    fn place(&mut self, env: &Env<'_>, spans: &[Span], off: u64, data: &[u8]) -> bool {
        if !scatter(env.mem, spans, off, data) {
            return false;
        }
        self.trips.extend(tripwire::hits(
            env.tripwires,
            env.ctx,
            spans,
            off,
            data.len(),
        ));
        true
    }

    /// Out-of-order bytes at stream offset `offset`, ahead of a hole: placed at once if
    /// they are whole FPDUs (length, pad and, when on, CRC agreeing), each a Write into a
    /// region of this context that allows it, or a Read Response segment of an outstanding
    /// Read that is not its last (the last completes the Read, so it waits for order).
    /// Anything else is refused and waits for the hole like any byte; the in-order pass
    /// then finds any error. True if placed: the stream then skips these bytes.
    pub(super) fn place_ahead(&mut self, env: &Env<'_>, offset: u64, data: &[u8]) -> bool {
        // Each segment placed ahead is remembered until the in-order point passes it: a
        // peer sending many small segments past a hole it never fills must not grow that
        // list without bound. Beyond it, segments wait for the hole as any byte does
        // (buffered by TCP within its own bounds, or dropped and sent again).
        if self.phase() != super::Phase::Running || self.ahead_ranges.len() >= MAX_AHEAD_RANGES {
            return false;
        }
        let mut ulpdus = Vec::new();
        let mut at = 0;
        while at < data.len() {
            match fpdu::parse_prefix(&data[at..], self.tx.crc, fpdu::MAX_ULPDU) {
                Ok(fpdu::Prefix::Complete { ulpdu, len }) => {
                    ulpdus.push(ulpdu);
                    at += len;
                }
                _ => return false,
            }
        }
        // Every FPDU checked before any byte moves.
        let mut places = Vec::with_capacity(ulpdus.len());
        for u in &ulpdus {
            let Ok(m) = rdmap::parse(u) else {
                return false;
            };
            let (Buffer::Tagged { stag, to }, Body::Data(payload)) = (m.header.buffer, m.body)
            else {
                return false;
            };
            let spans = match m.opcode {
                Opcode::Write => {
                    let len = payload.len() as u64;
                    match env.region(stag, to, len, MR_ACCESS_REMOTE_WRITE, true) {
                        Ok(s) => (s, 0),
                        Err(_) => return false,
                    }
                }
                Opcode::ReadResponse if !m.header.last => {
                    let Some(r) = self.tx.reads.iter().find(|r| r.stag == stag) else {
                        return false;
                    };
                    let off = to.wrapping_sub(r.to);
                    let fits = to >= r.to
                        && off
                            .checked_add(payload.len() as u64)
                            .is_some_and(|e| e <= r.size as u64);
                    if !fits {
                        return false;
                    }
                    (r.sink.to_vec(), off)
                }
                _ => return false,
            };
            places.push((spans, payload));
        }
        for ((spans, off), payload) in places {
            if !self.place(env, &spans, off, payload) {
                return false;
            }
        }
        self.placed_ahead += ulpdus.len() as u64;
        self.ahead_ranges
            .push_back((offset, offset + data.len() as u64));
        true
    }

    /// The in-order point passed bytes placed ahead: the FPDUs before them must have ended
    /// exactly where they began (else the peer's FPDUs were not where their segments
    /// started, and what was placed was not what it seemed).
    pub(super) fn caught_up(&mut self, upto: u64) {
        while let Some(&(start, end)) = self.ahead_ranges.front() {
            if end > upto {
                break;
            }
            self.ahead_ranges.pop_front();
            if self.deframer_partial() {
                let _ = start;
                self.fail(TermError::Mpa(MpaCode::FpduStart), None);
                return;
            }
        }
    }

    /// One ULPDU of the peer: parsed, checked and acted on; an error becomes the
    /// Terminate that ends the connection.
    pub(super) fn ulpdu(&mut self, env: &Env<'_>, u: &[u8]) {
        let m = match rdmap::parse(u) {
            Ok(m) => m,
            // A Terminate is never answered with one, even one this end cannot read.
            Err(rdmap::Error::Terminate(_)) => {
                return self.terminated(TermError::Rdmap(
                    RdmapType::RemoteOperation,
                    RdmapCode::Unspecified,
                ))
            }
            Err(e) => return self.fail(e.term_error(), Some(u)),
        };
        if self.awaiting_first_fpdu() {
            self.first_fpdu_arrived();
            if self.is_rtr(&m) {
                return;
            }
        }
        let r = match m.opcode {
            op if op.is_send() => self.on_send(env, &m),
            Opcode::Write => self.on_write(env, &m),
            Opcode::ReadRequest => self.on_read_request(env, &m),
            Opcode::ReadResponse => self.on_read_response(env, &m),
            Opcode::Terminate => {
                if let Body::Terminate(t) = m.body {
                    self.terminated(t.error);
                }
                Ok(())
            }
            Opcode::ImmediateData | Opcode::ImmediateDataSe if self.immediate() => {
                self.on_immediate(env, &m)
            }
            // Immediate Data on a connection that did not agree to it, or an opcode this
            // end does not know.
            _ => Err(TermError::Rdmap(
                RdmapType::RemoteOperation,
                RdmapCode::UnexpectedOpcode,
            )),
        };
        if let Err(e) = r {
            self.fail(e, Some(u));
        }
    }

    /// A segment of a Send: into the receive WR of its MSN, completed with its last.
    fn on_send(&mut self, env: &Env<'_>, m: &Message<'_>) -> Checked<()> {
        let Buffer::Untagged { msn, mo, .. } = m.header.buffer else {
            unreachable!("a Send parses untagged");
        };
        let Body::Data(payload) = m.body else {
            unreachable!("a Send carries data");
        };
        if m.opcode.invalidates() {
            // No region of this device can be invalidated by a peer.
            return Err(TermError::Rdmap(
                RdmapType::RemoteOperation,
                RdmapCode::CannotInvalidate,
            ));
        }
        if msn != self.rx_msn[0] {
            return Err(TermError::DdpUntagged(DdpUntaggedCode::MsnRange));
        }
        let Some(wr) = self.recv_wrs.front_mut() else {
            return Err(TermError::DdpUntagged(DdpUntaggedCode::NoBuffer));
        };
        let end = mo as u64 + payload.len() as u64;
        if end > wr.cap {
            return Err(TermError::DdpUntagged(DdpUntaggedCode::TooLong));
        }
        let spans = match &wr.spans {
            Ok(s) => s,
            &Err((status, detail)) => {
                // A buffer that failed its checks when posted: it completes with that, and
                // the message it was to take cannot be placed.
                let c = cqe(wr.wr_id, env.qp, CQE_OP_RECV, status, detail);
                self.recv_done.push(c);
                self.recv_wrs.pop_front();
                return Err(TermError::DdpCatastrophic);
            }
        };
        let spans = spans.clone();
        if !self.place(env, &spans, mo as u64, payload) {
            return Err(TermError::DdpCatastrophic);
        }
        let wr = self.recv_wrs.front_mut().expect("front");
        wr.filled = wr.filled.max(end);
        if m.header.last {
            let wr = self.recv_wrs.pop_front().expect("front");
            let mut c = cqe_ok(wr.wr_id, env.qp, CQE_OP_RECV, end as u32);
            if m.opcode.solicited() {
                c.detail = CQE_DETAIL_SOLICITED;
            }
            self.recv_done.push(c);
            self.rx_msn[0] = self.rx_msn[0].wrapping_add(1);
        }
        Ok(())
    }

    /// Immediate Data (RFC 7306): completes the receive WR of its MSN, carrying the data.
    fn on_immediate(&mut self, env: &Env<'_>, m: &Message<'_>) -> Checked<()> {
        let Buffer::Untagged { msn, .. } = m.header.buffer else {
            unreachable!("Immediate Data parses untagged");
        };
        let Body::Immediate(d) = m.body else {
            unreachable!("Immediate Data carries its 8 bytes");
        };
        if msn != self.rx_msn[0] {
            return Err(TermError::DdpUntagged(DdpUntaggedCode::MsnRange));
        }
        let Some(wr) = self.recv_wrs.pop_front() else {
            return Err(TermError::DdpUntagged(DdpUntaggedCode::NoBuffer));
        };
        let mut c = cqe_ok(wr.wr_id, env.qp, CQE_OP_RECV_IMM, 0);
        c.imm_data = u32::from_be_bytes([d[0], d[1], d[2], d[3]]);
        if m.opcode.solicited() {
            c.detail = CQE_DETAIL_SOLICITED;
        }
        self.recv_done.push(c);
        self.rx_msn[0] = self.rx_msn[0].wrapping_add(1);
        Ok(())
    }

    /// A segment of a Write: into the region its STag names.
    fn on_write(&mut self, env: &Env<'_>, m: &Message<'_>) -> Checked<()> {
        let Buffer::Tagged { stag, to } = m.header.buffer else {
            unreachable!("a Write parses tagged");
        };
        let Body::Data(payload) = m.body else {
            unreachable!("a Write carries data");
        };
        if payload.is_empty() {
            return Ok(());
        }
        let spans = env.region(stag, to, payload.len() as u64, MR_ACCESS_REMOTE_WRITE, true)?;
        if !self.place(env, &spans, 0, payload) {
            return Err(TermError::DdpCatastrophic);
        }
        self.placed += 1;
        Ok(())
    }

    /// A Read Request: checked, and answered by a response queued after what is queued.
    fn on_read_request(&mut self, env: &Env<'_>, m: &Message<'_>) -> Checked<()> {
        let Buffer::Untagged { msn, .. } = m.header.buffer else {
            unreachable!("a Read Request parses untagged");
        };
        let Body::ReadRequest(rr) = m.body else {
            unreachable!("a Read Request carries its body");
        };
        if msn != self.rx_msn[1] {
            return Err(TermError::DdpUntagged(DdpUntaggedCode::MsnRange));
        }
        if self.tx.serving.len() >= self.conn_ird as usize {
            // More reads at once than this end said it serves (its IRD).
            return Err(TermError::DdpUntagged(DdpUntaggedCode::NoBuffer));
        }
        let data = if rr.size == 0 {
            Data::None
        } else {
            let spans = env.region(
                rr.source_stag,
                rr.source_to,
                rr.size as u64,
                MR_ACCESS_REMOTE_READ,
                false,
            )?;
            Data::Guest {
                spans: spans.into(),
                off: 0,
                len: rr.size as usize,
            }
        };
        self.rx_msn[1] = self.rx_msn[1].wrapping_add(1);
        self.tx.push_read_response(data, rr.sink_stag, rr.sink_to);
        let end = self.tx.end;
        self.tx.serving.push_back(end);
        Ok(())
    }

    /// A segment of a Read Response: into the sink of the oldest read this end asked for.
    fn on_read_response(&mut self, env: &Env<'_>, m: &Message<'_>) -> Checked<()> {
        let Buffer::Tagged { stag, to } = m.header.buffer else {
            unreachable!("a Read Response parses tagged");
        };
        let Body::Data(payload) = m.body else {
            unreachable!("a Read Response carries data");
        };
        let Some(r) = self.tx.reads.front_mut() else {
            return Err(TermError::Rdmap(
                RdmapType::RemoteOperation,
                RdmapCode::UnexpectedOpcode,
            ));
        };
        if stag != r.stag {
            return Err(TermError::DdpTagged(DdpTaggedCode::InvalidStag));
        }
        let off = to.wrapping_sub(r.to);
        let end = off.checked_add(payload.len() as u64);
        if to < r.to || end.is_none_or(|e| e > r.size as u64) {
            return Err(TermError::DdpTagged(DdpTaggedCode::BaseOrBounds));
        }
        let sink = std::mem::take(&mut r.sink);
        let ok = self.place(env, &sink, off, payload);
        let r = self.tx.reads.front_mut().expect("front");
        r.sink = sink;
        if !ok {
            return Err(TermError::DdpCatastrophic);
        }
        r.placed += payload.len() as u64;
        if m.header.last {
            let r = self.tx.reads.pop_front().expect("front");
            if !r.for_wr {
                return Ok(());
            }
            if let Some(wr) = self
                .tx
                .wrs
                .iter_mut()
                .find(|w| w.until == Until::ReadResponse)
            {
                wr.until = Until::Done;
            }
        }
        Ok(())
    }
}
