//! The send queues' scheduler: every QP with send work (or WRs to flush) gets a turn
//! of at most a budget per pass, its kind takes its sends ([`super::qp_kinds`]),
//! and an errored QP's WRs complete FLUSHED. Also how a WQE is taken from a ring: a WR
//! holds its ring slot until its completion is written.

use qpip_abi::cqe::*;
use qpip_abi::wqe::WQE_SIZE;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use super::completion::{cqe, send_op};
use super::decode;
use super::objects::{Qp, QpState};
use super::Engine;

/// WQEs one QP may execute (or flush) before the others get a turn.
pub(super) const QP_BUDGET: u32 = 32;

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

    /// Runs up to a budget of one QP's work: a ready QP's kind takes its posted WRs, an
    /// errored QP's WRs complete FLUSHED. Returns (made progress, has more work).
    fn process_qp(&mut self, mem: &GuestMemoryMmap, id: u32) -> (bool, bool) {
        match self.objects.qps.get(&id).map(|qp| qp.state) {
            None => (false, false),
            Some(QpState::Ready) => self.kind_turn(mem, id),
            Some(QpState::Error) => self.flush_some(mem, id),
        }
    }

    /// Completes up to a budget of an errored QP's WRs with FLUSHED, sends first, as far
    /// as its CQs have room.
    fn flush_some(&mut self, mem: &GuestMemoryMmap, id: u32) -> (bool, bool) {
        let mut did = false;
        for _ in 0..QP_BUDGET {
            let Some(qp) = self.objects.qps.get(&id) else {
                return (did, false);
            };
            let (ring_is_sq, cq) = if qp.sq_head != qp.sq_tail {
                (true, qp.send_cq)
            } else if qp.rq_head != qp.rq_tail {
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
            self.flush_one(mem, id, ring_is_sq);
        }
        (did, true)
    }

    /// QP `id`, if it is ready and a send WR waits in its ring.
    pub(super) fn send_waiting(&self, id: u32) -> Option<&Qp> {
        self.objects
            .qps
            .get(&id)
            .filter(|qp| qp.sq_head != qp.sq_tail && qp.state == QpState::Ready)
    }

    /// Reads the WQE slot at `index` of a QP ring; None if the ring's memory is gone.
    fn read_slot(mem: &GuestMemoryMmap, addr: GuestAddress) -> Option<[u8; WQE_SIZE as usize]> {
        let mut raw = [0u8; WQE_SIZE as usize];
        mem.read_slice(&mut raw, addr).ok().map(|_| raw)
    }

    /// Completes the next WR of an errored QP's send (or receive) ring with FLUSHED, or
    /// with the error no WR had taken yet ([`Qp::unclaimed_send_error`]).
    fn flush_one(&mut self, mem: &GuestMemoryMmap, id: u32, sq: bool) {
        let Some(raw) = self.take_wqe(mem, id, sq) else {
            return;
        };
        let wr_id = u64::from_le_bytes(raw[..8].try_into().expect("8 bytes"));
        let qp = self.objects.qps.get_mut(&id).expect("taken from it");
        let c = if !sq {
            cqe(wr_id, id, CQE_OP_RECV, CQE_STATUS_FLUSHED, CQE_DETAIL_NONE)
        } else if let Some((status, detail)) = qp.unclaimed_send_error.take() {
            let op = decode::send_wqe(&raw).map_or(CQE_OP_SEND, |wr| send_op(wr.opcode));
            cqe(wr_id, id, op, status, detail)
        } else {
            cqe(wr_id, id, CQE_OP_SEND, CQE_STATUS_FLUSHED, CQE_DETAIL_NONE)
        };
        let cq = if sq { qp.send_cq } else { qp.recv_cq };
        self.write_cqe(mem, cq, c);
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
}
