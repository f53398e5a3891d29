//! The send queues' scheduler: every QP with send work (or WRs to flush) gets a turn
//! of at most a budget per pass, its kind takes its sends ([`super::qp_kinds`]),
//! and an errored QP's WRs complete FLUSHED. Also how a WQE is taken from a ring: a WR
//! holds its ring slot until its completion is written.

use qpip_abi::admin::STAT_SEND_WQES;
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
        for _ in 0..self.objects.busy_count() {
            let Some(id) = self.objects.pop_busy() else {
                break;
            };
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
        match self.objects.qp(id).map(Qp::state) {
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
            let Some(qp) = self.objects.qp(id) else {
                return (did, false);
            };
            let (ring_is_sq, cq) = if qp.posted(true) {
                (true, qp.send_cq())
            } else if qp.posted(false) {
                (false, qp.recv_cq())
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
            .qp(id)
            .filter(|qp| qp.posted(true) && qp.is_ready())
    }

    /// Takes up to `budget` send WRs of QP `id` for its transport: while the QP is ready, a
    /// WR waits in its send ring and `may_take` lets the next one go, takes its WQE
    /// (counted in `STAT_SEND_WQES`) and hands it to `execute` with the QP's context.
    /// Returns how many it took.
    pub(super) fn take_sends(
        &mut self,
        mem: &GuestMemoryMmap,
        id: u32,
        budget: u32,
        may_take: impl Fn(&Self, &Qp) -> bool,
        mut execute: impl FnMut(&mut Self, u32, &[u8; WQE_SIZE as usize]),
    ) -> u32 {
        let mut n = 0;
        while n < budget {
            let Some(qp) = self.send_waiting(id) else {
                break;
            };
            let ctx = qp.home().ctx;
            if !may_take(self, qp) {
                break;
            }
            let Some(raw) = self.take_wqe(mem, id, true) else {
                break;
            };
            self.shared.stats.add(STAT_SEND_WQES, 1);
            n += 1;
            execute(self, ctx, &raw);
        }
        n
    }

    /// Whether QP `id` (which must exist) has send work for another turn: a WR waits in
    /// the send ring of the ready QP, and the ring is not held (a held ring waits for a
    /// completion, which marks the QP busy again).
    pub(super) fn sends_left(&self, id: u32) -> bool {
        let qp = self.objects.qp(id).expect("caller checked");
        qp.posted(true) && qp.is_ready() && !qp.ring_held(true)
    }

    /// Reads the WQE slot at `index` of a QP ring; None if the ring's memory is gone.
    pub(super) fn read_slot(
        mem: &GuestMemoryMmap,
        addr: GuestAddress,
    ) -> Option<[u8; WQE_SIZE as usize]> {
        let mut raw = [0u8; WQE_SIZE as usize];
        mem.read_slice(&mut raw, addr).ok().map(|_| raw)
    }

    /// Completes the next WR of an errored QP's send (or receive) ring with FLUSHED, or
    /// with the error no WR had taken yet ([`Qp::take_unclaimed_send_error`]).
    fn flush_one(&mut self, mem: &GuestMemoryMmap, id: u32, sq: bool) {
        let Some(raw) = self.take_wqe(mem, id, sq) else {
            return;
        };
        let wr_id = u64::from_le_bytes(raw[..8].try_into().expect("8 bytes"));
        let qp = self.objects.qp_mut(id).expect("taken from it");
        let c = if !sq {
            cqe(wr_id, id, CQE_OP_RECV, CQE_STATUS_FLUSHED, CQE_DETAIL_NONE)
        } else if let Some((status, detail)) = qp.take_unclaimed_send_error() {
            let op = decode::send_wqe(&raw).map_or(CQE_OP_SEND, |wr| send_op(wr.opcode));
            cqe(wr_id, id, op, status, detail)
        } else {
            cqe(wr_id, id, CQE_OP_SEND, CQE_STATUS_FLUSHED, CQE_DETAIL_NONE)
        };
        let cq = qp.cq(sq);
        self.write_cqe(mem, cq, c);
    }

    /// Completes every outstanding WR of a QP with FLUSHED, as far as its CQs have room
    /// (the QP is going away and cannot wait).
    pub(super) fn flush_qp(&mut self, mem: &GuestMemoryMmap, id: u32) {
        for sq in [true, false] {
            loop {
                let Some(qp) = self.objects.qp(id) else {
                    return;
                };
                let (pending, cq) = (qp.posted(sq), qp.cq(sq));
                if !pending || qp.ring_held(sq) || !self.cq_has_room(cq) {
                    break;
                }
                self.flush_one(mem, id, sq);
            }
        }
    }

    /// Whether datagram-like QP `id` (UDP, raw) may take its next send WQE in this turn;
    /// else whether it still has work when its turn ends: a QP that is not ready has its
    /// WRs flushed on its next turn; one with nothing posted, or a ring's depth of WRs
    /// waiting for completions (a completion written marks it busy again), or a full send
    /// CQ (the CQ doorbell wakes it when there is room) waits to be woken.
    pub(super) fn send_turn_open(&mut self, id: u32) -> Result<(), bool> {
        let Some(qp) = self.objects.qp(id) else {
            return Err(false);
        };
        if !qp.is_ready() {
            return Err(true);
        }
        if !qp.posted(true) || qp.ring_held(true) {
            return Err(false);
        }
        let cq = qp.send_cq();
        if !self.cq_has_room(cq) {
            return Err(false);
        }
        Ok(())
    }

    /// Consumes the next WQE of a QP's send (`sq`) or receive ring and returns its bytes;
    /// the WR is owed a completion from then on ([`Qp::take_slot`]). None, taking nothing, while
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
        let qp = self.objects.qp_mut(id).expect("caller checked");
        // None: a ring's depth of WRs waits for completions, the producer must poll.
        let addr = qp.take_slot(sq)?;
        let (cq, op) = (qp.cq(sq), if sq { CQE_OP_SEND } else { CQE_OP_RECV });
        let raw = Self::read_slot(mem, addr);
        if raw.is_none() {
            log::warn!("QP {id}: ring no longer in guest RAM; QP moves to the error state");
            qp.fail();
            self.write_cqe(mem, cq, cqe(0, id, op, CQE_STATUS_FLUSHED, CQE_DETAIL_NONE));
        }
        raw
    }
}
