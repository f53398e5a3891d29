//! A context: one process's share of the device, with its own doorbell page, whose QP and
//! CQ slots name the objects that ring there.

use qpip_abi::doorbell;

use crate::engine::doorbell_page::DoorbellPage;

/// Where a QP or CQ belongs: its context, and its slot in that context's doorbell page,
/// which it holds from its insertion into `Objects` to its removal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Home {
    pub ctx: u32,
    pub slot: u32,
}

#[derive(Debug)]
pub struct Context {
    /// The context's doorbell page, in guest RAM.
    doorbell: DoorbellPage,
    /// The last `change_count` the engine saw in the context's doorbell page.
    seen_change_count: u32,
    /// QP id per doorbell slot (taken and given back by `Objects`).
    pub(super) qp_slots: Vec<Option<u32>>,
    /// CQ id per doorbell slot (taken and given back by `Objects`).
    pub(super) cq_slots: Vec<Option<u32>>,
    /// Created with `CTX_FLAG_KERNEL`: the driver's own context, whose WQEs may name
    /// guest-physical memory (`PHYS_LKEY`) and which may hold the raw Ethernet QP.
    kernel: bool,
}

impl Context {
    /// A context with no QPs or CQs, ringing in `doorbell`.
    pub(super) fn new(doorbell: DoorbellPage, kernel: bool) -> Context {
        Context {
            kernel,
            doorbell,
            seen_change_count: 0,
            qp_slots: vec![None; doorbell::DB_QP_SLOTS as usize],
            cq_slots: vec![None; doorbell::DB_CQ_SLOTS as usize],
        }
    }

    /// Whether it is the driver's own (`CTX_FLAG_KERNEL`).
    #[inline]
    pub fn is_kernel(&self) -> bool {
        self.kernel
    }

    /// Its doorbell page.
    #[inline]
    pub fn doorbell(&self) -> DoorbellPage {
        self.doorbell
    }

    /// The page's `change_count` as just read: whether it moved since the last look
    /// (it is remembered).
    #[inline]
    pub fn change_count_moved(&mut self, count: u32) -> bool {
        if count == self.seen_change_count {
            return false;
        }
        self.seen_change_count = count;
        true
    }

    /// The first free QP slot of its page.
    pub fn free_qp_slot(&self) -> Option<u32> {
        free_slot(&self.qp_slots)
    }

    /// The first free CQ slot of its page.
    pub fn free_cq_slot(&self) -> Option<u32> {
        free_slot(&self.cq_slots)
    }

    /// The QPs that ring in its page, by slot.
    pub fn qps(&self) -> impl Iterator<Item = u32> + '_ {
        self.qp_slots.iter().flatten().copied()
    }

    /// The CQs whose consumer indices are in its page, by slot.
    pub fn cqs(&self) -> impl Iterator<Item = u32> + '_ {
        self.cq_slots.iter().flatten().copied()
    }
}

fn free_slot(slots: &[Option<u32>]) -> Option<u32> {
    slots.iter().position(|s| s.is_none()).map(|p| p as u32)
}
