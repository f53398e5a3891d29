//! Transmit and receive: executes send WQEs (gather the data through the QP's memory
//! regions, frame it, hand it to its destination) and places received datagrams into posted
//! receive buffers, completing both sides with CQEs.
//!
//! A UDP datagram to one of the device's own addresses stays inside the device (delivered
//! to the QP bound to its port through the receive path); any other destination goes to the
//! network ([`super::network`]), whose received datagrams come back through the same
//! receive path.

use std::net::Ipv6Addr;

use qpip_abi::admin::*;
use qpip_abi::cqe::*;
use qpip_abi::wqe::WQE_SIZE;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use super::completion::{cqe, cqe_ok};
use super::decode::{self, Payload};
use super::memory::{Fault, Span};
use super::objects::QpState;
use super::ports::Proto;
use super::Engine;

/// Largest UDP payload: the IPv6 payload length field (65535) less the UDP header.
pub const MAX_UDP_PAYLOAD: usize = 65535 - 8;

/// Send WQEs one QP may execute before the others get a turn.
const QP_BUDGET: u32 = 32;

/// Frames one QP's datagrams may put on the link in a pass: as many as a receiving engine
/// takes from its link per pass. Counting WQEs alone let a sender of 8 KiB datagrams (six
/// fragments each) put three times what a receiver on the same engine thread takes into
/// its switch port per pass, and the port's queue dropped the rest.
const QP_FRAME_BUDGET: u64 = super::network::RX_BUDGET as u64;

/// A datagram on its way to a receive queue.
pub struct Datagram<'a> {
    pub src: Ipv6Addr,
    pub src_port: u16,
    pub dst: Ipv6Addr,
    pub dst_port: u16,
    pub payload: &'a [u8],
}

impl Engine {
    /// Gives every QP with send work (or flushes) a turn. Returns whether anything moved.
    pub(super) fn run_send_queues(&mut self, mem: &GuestMemoryMmap) -> bool {
        let _stage = crate::stages::span(crate::stages::Stage::Schedule);
        let mut did = false;
        for _ in 0..self.objects.busy_qps.len() {
            let Some(id) = self.objects.busy_qps.pop_front() else {
                break;
            };
            match self.objects.qps.get_mut(&id) {
                Some(qp) => qp.queued = false,
                None => continue,
            }
            let (progress, more) = self.process_qp(mem, id);
            did |= progress;
            if more {
                self.objects.mark_busy(id);
            }
        }
        did
    }

    /// Runs up to a budget of one QP's send work. Returns (made progress, has more work).
    fn process_qp(&mut self, mem: &GuestMemoryMmap, id: u32) -> (bool, bool) {
        let mut did = false;
        let frames = |e: &Engine| {
            let s = e.net.stack.stats();
            s.tx_frames + s.looped
        };
        let frames0 = frames(self);
        for _ in 0..QP_BUDGET {
            if frames(self) - frames0 >= QP_FRAME_BUDGET {
                break;
            }
            let Some(qp) = self.objects.qps.get(&id) else {
                return (did, false);
            };
            let error = qp.state == QpState::Error;
            if qp.is_tcp() && !error {
                // TCP sends complete when acknowledged, receives when data arrives.
                return self.tcp_qp_work(mem, id);
            }
            let (ring_is_sq, cq) = if qp.sq_head != qp.sq_tail {
                (true, qp.send_cq)
            } else if error && qp.rq_head != qp.rq_tail {
                (false, qp.recv_cq)
            } else {
                return (did, false);
            };
            if qp.ring_held(ring_is_sq) {
                return (did, false); // a completion written marks the QP busy again
            }
            if !self.cq_has_room(cq) {
                return (did, false); // the CQ doorbell wakes us when there is room
            }
            did = true;
            if error {
                self.flush_one(mem, id, ring_is_sq);
            } else {
                self.send_one(mem, id);
            }
        }
        (did, true)
    }

    /// Reads the WQE slot at `index` of a QP ring; None if the ring's memory is gone.
    fn read_slot(mem: &GuestMemoryMmap, addr: GuestAddress) -> Option<[u8; WQE_SIZE as usize]> {
        let mut raw = [0u8; WQE_SIZE as usize];
        mem.read_slice(&mut raw, addr).ok().map(|_| raw)
    }

    /// Completes the next WR of an errored QP's send (or receive) ring with FLUSHED.
    fn flush_one(&mut self, mem: &GuestMemoryMmap, id: u32, sq: bool) {
        let Some(raw) = self.take_wqe(mem, id, sq) else {
            return;
        };
        let wr_id = u64::from_le_bytes(raw[..8].try_into().expect("8 bytes"));
        let qp = &self.objects.qps[&id];
        let (cq, op) = if sq {
            (qp.send_cq, CQE_OP_SEND)
        } else {
            (qp.recv_cq, CQE_OP_RECV)
        };
        self.write_cqe(
            mem,
            cq,
            cqe(wr_id, id, op, CQE_STATUS_FLUSHED, CQE_DETAIL_NONE),
        );
    }

    /// Completes every outstanding WR of a QP with FLUSHED, as far as its CQs have room
    /// (the QP is going away and cannot wait).
    pub(super) fn flush_qp(&mut self, mem: &GuestMemoryMmap, id: u32) {
        for sq in [true, false] {
            loop {
                let Some(qp) = self.objects.qps.get(&id) else {
                    return;
                };
                let (pending, cq) = if sq {
                    (qp.sq_head != qp.sq_tail, qp.send_cq)
                } else {
                    (qp.rq_head != qp.rq_tail, qp.recv_cq)
                };
                if !pending || qp.ring_held(sq) || !self.cq_has_room(cq) {
                    break;
                }
                self.flush_one(mem, id, sq);
            }
        }
    }

    /// Consumes the next WQE of a QP's send (`sq`) or receive ring and returns its bytes;
    /// the WR is owed a completion from then on (`Qp::owed`). None, taking nothing, while
    /// the ring's depth of WRs waits for completions. If the ring's memory is gone from
    /// guest RAM, the QP moves to the error state, the WR completes FLUSHED, and None is
    /// returned.
    pub(super) fn take_wqe(
        &mut self,
        mem: &GuestMemoryMmap,
        id: u32,
        sq: bool,
    ) -> Option<[u8; WQE_SIZE as usize]> {
        let _stage = crate::stages::span(crate::stages::Stage::GetWr);
        let qp = self.objects.qps.get_mut(&id).expect("caller checked");
        if qp.ring_held(sq) {
            // A ring's depth of WRs waits for completions: the producer must poll.
            return None;
        }
        qp.owed[usize::from(!sq)] += 1;
        let (ring, head, cq, op) = if sq {
            (&qp.sq, &mut qp.sq_head, qp.send_cq, CQE_OP_SEND)
        } else {
            (&qp.rq, &mut qp.rq_head, qp.recv_cq, CQE_OP_RECV)
        };
        let addr = ring.entry_addr(*head);
        *head = head.wrapping_add(1);
        let raw = Self::read_slot(mem, addr);
        if raw.is_none() {
            log::warn!("QP {id}: ring no longer in guest RAM; QP moves to the error state");
            qp.state = QpState::Error;
            self.write_cqe(mem, cq, cqe(0, id, op, CQE_STATUS_FLUSHED, CQE_DETAIL_NONE));
        }
        raw
    }

    /// Executes the next send WQE of a ready QP (its send CQ has room).
    fn send_one(&mut self, mem: &GuestMemoryMmap, id: u32) {
        let qp = &self.objects.qps[&id];
        let (send_cq, ctx, tcp, bound) = (qp.send_cq, qp.ctx, qp.is_tcp(), qp.bound);
        self.shared.stats.add(STAT_SEND_WQES, 1);
        let Some(raw) = self.take_wqe(mem, id, true) else {
            return;
        };
        let wr = match decode::send_wqe(&raw) {
            Ok(wr) => wr,
            Err(e) => return self.write_cqe(mem, send_cq, e.completion(id, CQE_OP_SEND)),
        };
        let fail = |status, detail| cqe(wr.wr_id, id, CQE_OP_SEND, status, detail);
        if let Err(status) = wr.plain() {
            self.write_cqe(mem, send_cq, fail(status, CQE_DETAIL_NONE));
            return;
        }
        if !tcp && wr.imm_data != 0 {
            // A UDP datagram has no room for immediate data on the wire.
            self.write_cqe(mem, send_cq, fail(CQE_STATUS_BAD_WQE, CQE_DETAIL_NONE));
            return;
        }
        if tcp {
            // TCP data moves once connections exist (step 3); no QP is connected yet.
            self.write_cqe(
                mem,
                send_cq,
                fail(CQE_STATUS_BAD_DEST, CQE_DETAIL_NOT_BOUND),
            );
            return;
        }
        let Some((bound_addr, src_port)) = bound else {
            self.write_cqe(
                mem,
                send_cq,
                fail(CQE_STATUS_BAD_DEST, CQE_DETAIL_NOT_BOUND),
            );
            return;
        };
        let payload = match self.gather(mem, ctx, &wr.payload) {
            Ok(p) => p,
            Err(f) => {
                if f.status == CQE_STATUS_LOCAL_PROTECTION {
                    self.shared.stats.add(STAT_PROTECTION_ERRORS, 1);
                }
                self.write_cqe(mem, send_cq, fail(f.status, f.detail));
                return;
            }
        };
        if wr.dest_port == 0 || !decode::is_unicast(&wr.dest_addr) {
            self.write_cqe(
                mem,
                send_cq,
                fail(CQE_STATUS_BAD_DEST, CQE_DETAIL_BAD_ADDRESS),
            );
            return;
        }
        let src = (!bound_addr.is_unspecified()).then_some(bound_addr);
        // The send completes once the datagram is on its way: to the link, or on the
        // stack's loopback for the device itself (delivered on the next pass).
        match self.send_udp(src, src_port, wr.dest_addr, wr.dest_port, &payload) {
            Ok(()) => {
                self.shared.stats.add(STAT_UDP_TX, 1);
                let done = cqe_ok(wr.wr_id, id, CQE_OP_SEND, payload.len() as u32);
                self.write_cqe(mem, send_cq, done);
            }
            Err(detail) => self.write_cqe(mem, send_cq, fail(CQE_STATUS_BAD_DEST, detail)),
        }
    }

    /// Collects a send's bytes: inline, or through the context's memory regions (local
    /// read is always allowed). Every SGE is checked before any byte is read.
    fn gather(&self, mem: &GuestMemoryMmap, ctx: u32, payload: &Payload) -> Result<Vec<u8>, Fault> {
        let _stage = crate::stages::span(crate::stages::Stage::GetData);
        let sges = match payload {
            Payload::Inline(bytes) => return Ok(bytes.clone()),
            Payload::Gather(sges) => sges,
        };
        let total: u64 = sges.iter().map(|s| s.length as u64).sum();
        if total > MAX_UDP_PAYLOAD as u64 {
            return Err(Fault {
                status: CQE_STATUS_LOCAL_LENGTH,
                detail: CQE_DETAIL_NONE,
            });
        }
        let spans = self.translate(ctx, sges, 0)?;
        let mut out = vec![0u8; total as usize];
        let mut at = 0;
        for s in spans {
            mem.read_slice(&mut out[at..at + s.len], GuestAddress(s.addr))
                .map_err(|_| Fault::protection(CQE_DETAIL_OUT_OF_BOUNDS))?;
            at += s.len;
        }
        Ok(out)
    }

    /// Translates SGEs into guest spans after checking key, context, bounds and `access`.
    pub(super) fn translate(
        &self,
        ctx: u32,
        sges: &[qpip_abi::wqe::Sge],
        access: u32,
    ) -> Result<Vec<Span>, Fault> {
        let _stage = crate::stages::span(crate::stages::Stage::GetWr);
        let mut spans = Vec::new();
        for s in sges {
            if s.length == 0 {
                continue;
            }
            let mr = self
                .objects
                .mrs
                .get(&s.lkey)
                .ok_or(Fault::protection(CQE_DETAIL_BAD_LKEY))?;
            if mr.ctx != ctx {
                return Err(Fault::protection(CQE_DETAIL_OTHER_CONTEXT));
            }
            if mr.access & access != access {
                return Err(Fault::protection(CQE_DETAIL_ACCESS));
            }
            mr.translate(s.lkey, s.addr, s.length as u64, &mut spans)?;
        }
        Ok(spans)
    }

    /// The receive path: demultiplex by port, take the next posted receive WR, check and
    /// place the data, complete. Datagrams that cannot be placed are dropped and counted.
    /// Returns false when no QP is bound to the destination (the network then answers
    /// "port unreachable").
    pub fn deliver_udp(&mut self, mem: &GuestMemoryMmap, d: &Datagram) -> bool {
        let stats = self.shared.stats.clone();
        let Some(id) = self.objects.ports.qp(Proto::Udp, d.dst_port) else {
            stats.add(STAT_UDP_RX_NO_PORT, 1);
            return false;
        };
        let qp = self
            .objects
            .qps
            .get(&id)
            .expect("bound ports name live QPs");
        let (bound_addr, _) = qp.bound.expect("bound");
        if !bound_addr.is_unspecified() && bound_addr != d.dst {
            stats.add(STAT_UDP_RX_NO_PORT, 1);
            return false;
        }
        let recv_cq = qp.recv_cq;
        // The receiver's doorbell page may have been scanned before its latest receive was
        // posted (a producer may post a receive and then, elsewhere, the send that fills
        // it): look at its slots again before deciding there is no buffer or no room.
        if qp.rq_head == qp.rq_tail {
            self.read_qp_doorbell(mem, id);
        }
        if self
            .objects
            .cqs
            .get(&recv_cq)
            .is_some_and(|c| c.free() == 0)
        {
            self.read_cq_doorbell(mem, recv_cq);
        }
        let qp = self.objects.qps.get(&id).expect("exists");
        if qp.state != QpState::Ready || qp.rq_head == qp.rq_tail {
            stats.add(STAT_UDP_RX_NO_WR, 1);
            return true;
        }
        let ctx = qp.ctx;
        if !self.cq_has_room(recv_cq) {
            stats.add(STAT_UDP_RX_CQ_FULL, 1);
            return true;
        }
        stats.add(STAT_RECV_WQES, 1);
        let Some(raw) = self.take_wqe(mem, id, false) else {
            return true;
        };
        let wr = match decode::recv_wqe(&raw) {
            Ok(wr) => wr,
            Err(e) => {
                self.write_cqe(mem, recv_cq, e.completion(id, CQE_OP_RECV));
                return true;
            }
        };
        let capacity: u64 = wr.sges.iter().map(|s| s.length as u64).sum();
        if (d.payload.len() as u64) > capacity {
            let mut c = cqe(
                wr.wr_id,
                id,
                CQE_OP_RECV,
                CQE_STATUS_LOCAL_LENGTH,
                CQE_DETAIL_NONE,
            );
            c.byte_len = d.payload.len() as u32;
            self.write_cqe(mem, recv_cq, c);
            return true;
        }
        let spans = match self.translate(ctx, &wr.sges, MR_ACCESS_LOCAL_WRITE) {
            Ok(s) => s,
            Err(f) => {
                stats.add(STAT_PROTECTION_ERRORS, 1);
                self.write_cqe(
                    mem,
                    recv_cq,
                    cqe(wr.wr_id, id, CQE_OP_RECV, f.status, f.detail),
                );
                return true;
            }
        };
        let mut at = 0;
        for s in spans {
            if at == d.payload.len() {
                break;
            }
            let n = s.len.min(d.payload.len() - at);
            if mem
                .write_slice(&d.payload[at..at + n], GuestAddress(s.addr))
                .is_err()
            {
                self.write_cqe(
                    mem,
                    recv_cq,
                    cqe(
                        wr.wr_id,
                        id,
                        CQE_OP_RECV,
                        CQE_STATUS_LOCAL_PROTECTION,
                        CQE_DETAIL_OUT_OF_BOUNDS,
                    ),
                );
                return true;
            }
            at += n;
        }
        stats.add(STAT_UDP_RX, 1);
        let mut c = cqe_ok(wr.wr_id, id, CQE_OP_RECV, d.payload.len() as u32);
        c.src_addr = d.src.octets();
        c.src_port = d.src_port;
        self.write_cqe(mem, recv_cq, c);
        true
    }
}
