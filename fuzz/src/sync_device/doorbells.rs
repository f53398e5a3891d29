//! Doorbells and completion queues as the guest's driver rings and reads them.

use std::collections::HashMap;

use qpip_abi::cqe::{phase, Cqe};
use qpip_abi::doorbell::*;
use qpip_abi::pci::DOORBELL_PAGE_SIZE;
use qpip_testkit::Cq;

use super::*;

impl SyncDevice {
    /// Guest-physical address of context `ctx`'s doorbell page: the page it was last created
    /// with (so a destroyed context's page can still be written, as a process may).
    pub fn db_page(&self, ctx: u32) -> u64 {
        *self
            .db_pages
            .get(&ctx)
            .unwrap_or_else(|| panic!("context {ctx} was never created"))
    }

    /// The live contexts' doorbell pages, by context id, as the completions taken so far
    /// tell.
    pub fn live_db_pages(&self) -> &HashMap<u32, u64> {
        &self.live_pages
    }

    /// Writes the u32 at `off` in context `ctx`'s doorbell page (guest RAM).
    pub fn db_write(&mut self, ctx: u32, off: u32, value: u32) {
        assert!(off & 3 == 0 && off < DOORBELL_PAGE_SIZE);
        let at = self.db_page(ctx) + off as u64;
        self.write(at, &value.to_le_bytes());
    }

    pub fn db_read(&self, ctx: u32, off: u32) -> u32 {
        assert!(off & 3 == 0 && off < DOORBELL_PAGE_SIZE);
        let at = self.db_page(ctx) + off as u64;
        u32::from_le_bytes(self.read(at, 4).try_into().expect("4 bytes"))
    }

    /// Rings a doorbell the way the ABI prescribes: the value, then the page's change count.
    /// Not with `abi::doorbell::Producer`: these stores go through [`Self::write`], so that the
    /// shadow knows them (a destroyed context's page is not the device's to write).
    pub fn ring(&mut self, ctx: u32, off: u32, value: u32) {
        self.db_write(ctx, off, value);
        let c = self.db_read(ctx, DB_CHANGE_COUNT);
        self.db_write(ctx, DB_CHANGE_COUNT, c.wrapping_add(1));
    }

    /// The CQE at free-running index `idx` of `cq`, raw, if it is ready (its owner bit
    /// says the device wrote it on this pass of the ring).
    pub fn ready_cqe(&self, cq: &Cq, idx: u32) -> Option<[u8; 64]> {
        let raw: [u8; 64] = self.read_obj(cq.slot_gpa(idx));
        let owner = std::mem::offset_of!(Cqe, owner);
        (raw[owner] & 1 == phase(idx, cq.depth)).then_some(raw)
    }

    /// The ready CQEs of `cq` from its head on, in order, with their indices, into `out`
    /// (emptied first: a buffer kept from check to check).
    pub fn ready_cqes(&self, cq: &Cq, out: &mut Vec<(u32, [u8; 64])>) {
        out.clear();
        for k in 0..cq.depth {
            let idx = cq.head.wrapping_add(k);
            match self.ready_cqe(cq, idx) {
                Some(raw) => out.push((idx, raw)),
                None => break,
            }
        }
    }

    /// Moves `cq`'s head to `head`, as its consumer does: the CQEs `seen` before it are
    /// forgotten, and the CQ's head doorbell says where it is now.
    pub fn consume_cq(&mut self, cq: &mut Cq, seen: &mut HashMap<u32, [u8; 64]>, head: u32) {
        let old = cq.head;
        cq.head = head;
        seen.retain(|idx, _| idx.wrapping_sub(old) >= head.wrapping_sub(old));
        self.ring(cq.ctx, cq_head(cq.slot), head);
    }
}
