//! The doorbell state machine: notices producer indices, CQ consumer indices and CQ arm
//! requests in the contexts' doorbell pages. A page's `change_count` tells whether any slot in
//! it moved since the last scan, so an idle page costs one load.

use qpip_abi::admin::{STAT_BAD_DOORBELLS, STAT_CQ_INTERRUPTS, STAT_DOORBELLS};
use qpip_abi::doorbell;
use vm_memory::GuestMemoryMmap;

use super::objects::{BeyondRing, QpState};
use super::Engine;

impl Engine {
    /// Scans the pages whose change count moved. Returns whether any did.
    pub(super) fn scan_doorbells(&mut self, mem: &GuestMemoryMmap) -> bool {
        let _stage = crate::stages::span(crate::stages::Stage::Doorbell);
        let mut changed = std::mem::take(&mut self.scratch_ctxs);
        changed.clear();
        for (ctx, c) in self.objects.contexts_mut() {
            let Some(count) = c.doorbell().load(mem, doorbell::DB_CHANGE_COUNT) else {
                continue;
            };
            if c.change_count_moved(count) {
                changed.push(ctx);
            }
        }
        let any = !changed.is_empty();
        for &ctx in &changed {
            self.shared.stats.add(STAT_DOORBELLS, 1);
            self.scan_context(mem, ctx);
        }
        self.scratch_ctxs = changed;
        any
    }

    fn scan_context(&mut self, mem: &GuestMemoryMmap, ctx: u32) {
        let Some(c) = self.objects.context(ctx) else {
            return;
        };
        let qps: Vec<u32> = c.qps().collect();
        let cqs: Vec<u32> = c.cqs().collect();
        for id in qps {
            self.read_qp_doorbell(mem, id);
        }
        for id in cqs {
            self.read_cq_doorbell(mem, id);
        }
    }

    pub(super) fn read_qp_doorbell(&mut self, mem: &GuestMemoryMmap, id: u32) {
        let Some(qp) = self.objects.qp(id) else {
            return;
        };
        let Some(page) = self.objects.context(qp.home().ctx).map(|c| c.doorbell()) else {
            return;
        };
        let (Some(sq_tail), Some(rq_tail)) = (
            page.load(mem, doorbell::qp_sq_tail(qp.home().slot)),
            page.load(mem, doorbell::qp_rq_tail(qp.home().slot)),
        ) else {
            return;
        };
        let qp = self.objects.qp_mut(id).expect("looked up");
        let mut work = false;
        let mut bad = false;
        // Ahead of what we consumed by at most the depth, or the producer is broken.
        match qp.producer_moved(true, sq_tail) {
            Ok(moved) => work = moved,
            Err(BeyondRing) => bad = true,
        }
        match qp.producer_moved(false, rq_tail) {
            // Receives are consumed when data arrives (UDP) or become a connection's
            // receive space (TCP); an errored QP flushes them.
            Ok(true) => work |= qp.state() == QpState::Error || Self::receives_are_work(qp),
            Ok(false) => {}
            Err(BeyondRing) => bad = true,
        }
        if bad {
            self.shared.stats.add(STAT_BAD_DOORBELLS, 1);
            if qp.fail() {
                log::warn!("QP {id}: doorbell index beyond its ring; QP moves to the error state");
            }
            work = true;
        }
        if work {
            self.objects.mark_busy(id);
        }
    }

    pub(super) fn read_cq_doorbell(&mut self, mem: &GuestMemoryMmap, id: u32) {
        let Some(cq) = self.objects.cq(id) else {
            return;
        };
        let Some(page) = self.objects.context(cq.home().ctx).map(|c| c.doorbell()) else {
            return;
        };
        let slot = cq.home().slot;
        // The arm first (acquire), then the head: a consumer stores its head before it
        // arms, so a new arm comes with the head that went before it. Read the other way
        // round, an arm could meet a stale head that still counts consumed completions and
        // raise an interrupt for nothing.
        let Some(arm) = page.load(mem, doorbell::cq_arm_seq(slot)) else {
            return;
        };
        let Some(head) = page.load(mem, doorbell::cq_head(slot)) else {
            return;
        };
        let cq = self.objects.cq_mut(id).expect("looked up");
        let ctx = cq.home().ctx;
        let moved = cq.consumer_moved(head, arm);
        if !moved.head_ok {
            self.shared.stats.add(STAT_BAD_DOORBELLS, 1);
        }
        if let Some(vector) = moved.raise {
            self.shared.irqs.raise(vector as usize);
            self.shared.stats.add(STAT_CQ_INTERRUPTS, 1);
        }
        if moved.unstalled {
            // Wake the QPs that were waiting for room in this CQ.
            let waiting: Vec<u32> = self
                .objects
                .qps()
                .filter(|(_, q)| q.home().ctx == ctx && (q.send_cq() == id || q.recv_cq() == id))
                .map(|(q, _)| q)
                .collect();
            for q in waiting {
                self.objects.mark_busy(q);
            }
        }
    }
}
