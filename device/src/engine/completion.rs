//! The completion queues' one owner: every CQE the engine makes — UDP and TCP, successes,
//! errors and flushes — is written here, in order, phase byte last, with the CQ's interrupt
//! when it is armed. A completion whose CQ is full waits in order (`Engine::post_cqe`)
//! until the consumer makes room, since its WR is already consumed; its WR keeps its ring
//! slot until then ([`super::objects::Qp::completed`]), so the completions waiting are
//! bounded by the rings.

use std::sync::atomic::Ordering;

use qpip_abi::admin::*;
use qpip_abi::cqe::*;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};
use zerocopy::{FromZeros, IntoBytes};

use super::Engine;

pub(super) fn cqe(wr_id: u64, qp: u32, opcode: u8, status: u8, detail: u32) -> Cqe {
    let mut c = Cqe::new_zeroed();
    c.wr_id = wr_id;
    c.qp = qp;
    c.opcode = opcode;
    c.status = status;
    c.detail = detail;
    c
}

/// A successful completion of `byte_len` bytes.
pub(super) fn cqe_ok(wr_id: u64, qp: u32, opcode: u8, byte_len: u32) -> Cqe {
    let mut c = cqe(wr_id, qp, opcode, CQE_STATUS_SUCCESS, CQE_DETAIL_NONE);
    c.byte_len = byte_len;
    c
}

/// The completion opcode of a send WR of WQE opcode `wqe_opcode` (anything not an RDMA
/// Write or Read is a Send).
pub(super) fn send_op(wqe_opcode: u8) -> u8 {
    match wqe_opcode {
        qpip_abi::wqe::WQE_OP_RDMA_WRITE => CQE_OP_RDMA_WRITE,
        qpip_abi::wqe::WQE_OP_RDMA_READ => CQE_OP_RDMA_READ,
        _ => CQE_OP_SEND,
    }
}

impl Engine {
    /// Writes a completion now if its CQ has room and nothing is waiting before it, else
    /// queues it (in order) until the consumer makes room.
    pub(super) fn post_cqe(&mut self, mem: &GuestMemoryMmap, cq: u32, c: Cqe) {
        if self.objects.cq(cq).is_none() {
            return;
        }
        if self.cq_has_room(cq) {
            self.write_cqe(mem, cq, c);
        } else {
            self.deferred.entry(cq).or_default().push_back(c);
        }
    }

    /// Writes the completions that waited for room. Returns whether any went.
    pub(super) fn drain_deferred(&mut self, mem: &GuestMemoryMmap) -> bool {
        if self.deferred.is_empty() {
            return false;
        }
        let mut did = false;
        let cqs: Vec<u32> = self.deferred.keys().copied().collect();
        for cq in cqs {
            loop {
                let Some(c) = self.objects.cq(cq) else {
                    self.deferred.remove(&cq);
                    break;
                };
                if c.free() == 0 {
                    break;
                }
                let Some(q) = self.deferred.get_mut(&cq) else {
                    break;
                };
                let Some(e) = q.pop_front() else {
                    self.deferred.remove(&cq);
                    break;
                };
                self.write_cqe(mem, cq, e);
                did = true;
            }
        }
        did
    }

    /// Drops the completions of QP `qp` that still wait for room in its CQs: the QP is gone
    /// (DESTROY_QP completes with it), and no CQE may name it afterwards.
    pub(super) fn forget_waiting_completions(&mut self, qp: u32, cqs: [u32; 2]) {
        for cq in cqs {
            if let Some(q) = self.deferred.get_mut(&cq) {
                q.retain(|c| c.qp != qp);
                if q.is_empty() {
                    self.deferred.remove(&cq);
                }
            }
        }
    }

    /// Whether completions wait for room in `cq` (others must queue behind them).
    pub(super) fn cq_deferred(&self, cq: u32) -> bool {
        self.deferred.get(&cq).is_some_and(|q| !q.is_empty())
    }

    /// Whether a completion for CQ `id` can be written now (room, and nothing waiting
    /// before it); if not, the CQ is marked stalled (and that counted once).
    pub(super) fn cq_has_room(&mut self, id: u32) -> bool {
        // Completions waiting for room go first.
        let deferred = self.cq_deferred(id);
        let Some(cq) = self.objects.cq_mut(id) else {
            return false;
        };
        if cq.free() > 0 && !deferred {
            return true;
        }
        if cq.stall() {
            self.shared.stats.add(STAT_CQ_FULL, 1);
        }
        false
    }

    /// Writes a CQE (the caller made sure there is room), phase byte last, then raises the
    /// CQ's vector if it is armed. The WR it completes gives its ring slot back.
    pub(super) fn write_cqe(&mut self, mem: &GuestMemoryMmap, cq_id: u32, mut c: Cqe) {
        let _stage = crate::stages::span(crate::stages::Stage::Complete);
        let stats = &self.shared.stats;
        let Some(cq) = self.objects.cq_mut(cq_id) else {
            return;
        };
        let (addr, phase) = cq.next_entry();
        c.owner = phase;
        let bytes = c.as_bytes();
        let last = bytes.len() - 1;
        if mem.write_slice(&bytes[..last], addr).is_err() {
            log::warn!("CQ {cq_id}: ring no longer in guest RAM; completion lost");
            self.slot_returned(&c);
            return;
        }
        std::sync::atomic::fence(Ordering::Release);
        let _ = mem.store(
            c.owner,
            GuestAddress(addr.0 + last as u64),
            Ordering::Release,
        );
        // A solicited-only arm waits for what a reader waits for: not the successful
        // completion of a send-queue WR.
        let solicited = c.status != CQE_STATUS_SUCCESS
            || !matches!(c.opcode, CQE_OP_SEND | CQE_OP_RDMA_WRITE | CQE_OP_RDMA_READ);
        let raise = cq.advance_tail(solicited);
        stats.add(STAT_CQES, 1);
        if c.status != CQE_STATUS_SUCCESS {
            stats.add(STAT_CQE_ERRORS, 1);
        }
        if let Some(vector) = raise {
            self.shared.irqs.raise(vector as usize);
            stats.add(STAT_CQ_INTERRUPTS, 1);
        }
        self.slot_returned(&c);
    }

    /// The WR `c` completes no longer holds its ring's slot
    /// ([`super::objects::Qp::completed`]); a ring that was held gives more again.
    fn slot_returned(&mut self, c: &Cqe) {
        let sq = match c.opcode {
            CQE_OP_RECV | CQE_OP_RECV_IMM => false,
            CQE_OP_SEND | CQE_OP_RDMA_WRITE | CQE_OP_RDMA_READ => true,
            _ => return, // not a WR's completion (a tripwire's)
        };
        let Some(q) = self.objects.qp_mut(c.qp) else {
            return;
        };
        if q.completed(sq) {
            self.objects.mark_busy(c.qp);
        }
    }
}
