//! Doorbell pages: one page of guest RAM per context, named by the driver when it creates
//! the context ([`qpip_abi::admin::CreateCtxArgs`]). The producer (the process owning the
//! context) stores into it as into any memory; the engine polls it through its mapping of
//! guest RAM, as it reads the rings, and writes only the `engine_sleeping` word and the
//! zeroes of new slots. The layout is [`qpip_abi::doorbell`].
//!
//! Every access goes through vm-memory with the page's guest-physical address: memory that
//! QEMU unmapped under us reads as `None` and takes no store, never a stray access.

use std::sync::atomic::Ordering;

use qpip_abi::pci::DOORBELL_PAGE_SIZE;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

/// A context's doorbell page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DoorbellPage {
    gpa: u64,
}

impl DoorbellPage {
    /// The page at guest-physical `gpa`, if it is page aligned and wholly in guest RAM.
    pub fn new(mem: &GuestMemoryMmap, gpa: u64) -> Option<DoorbellPage> {
        let size = DOORBELL_PAGE_SIZE as u64;
        let aligned = gpa.is_multiple_of(size) && gpa.checked_add(size).is_some();
        (aligned && crate::engine::memory::in_ram(mem, gpa, size)).then_some(DoorbellPage { gpa })
    }

    /// Guest-physical address of the page.
    pub fn gpa(&self) -> u64 {
        self.gpa
    }

    /// Atomic load (acquire) of the u32 at `offset`, a constant of the layout or a slot
    /// offset the engine computed from a validated slot number.
    pub fn load(&self, mem: &GuestMemoryMmap, offset: u32) -> Option<u32> {
        debug_assert!(offset.is_multiple_of(4) && offset < DOORBELL_PAGE_SIZE);
        mem.load::<u32>(GuestAddress(self.gpa + offset as u64), Ordering::Acquire)
            .ok()
    }

    /// Atomic store (release) of the u32 at `offset`.
    pub fn store(&self, mem: &GuestMemoryMmap, offset: u32, value: u32) {
        debug_assert!(offset.is_multiple_of(4) && offset < DOORBELL_PAGE_SIZE);
        let _ = mem.store(
            value,
            GuestAddress(self.gpa + offset as u64),
            Ordering::Release,
        );
    }

    /// Zeroes the whole page (a new context starts with clean doorbells).
    pub fn clear(&self, mem: &GuestMemoryMmap) {
        let zeroes = [0u8; DOORBELL_PAGE_SIZE as usize];
        let _ = mem.write_slice(&zeroes, GuestAddress(self.gpa));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vm_memory::GuestMemoryMmap;

    fn ram() -> GuestMemoryMmap {
        GuestMemoryMmap::from_ranges(&[(GuestAddress(0x10000), 0x4000)]).unwrap()
    }

    #[test]
    fn only_aligned_pages_in_ram() {
        let mem = ram();
        assert!(DoorbellPage::new(&mem, 0x10000).is_some());
        assert!(DoorbellPage::new(&mem, 0x13000).is_some());
        assert!(DoorbellPage::new(&mem, 0x10008).is_none(), "unaligned");
        assert!(DoorbellPage::new(&mem, 0x14000).is_none(), "past RAM");
        assert!(DoorbellPage::new(&mem, 0).is_none(), "before RAM");
        assert!(DoorbellPage::new(&mem, !0xfff_u64).is_none(), "wraps");
    }

    #[test]
    fn loads_and_stores_reach_guest_memory() {
        let mem = ram();
        let page = DoorbellPage::new(&mem, 0x11000).unwrap();
        mem.write_obj(7u32, GuestAddress(0x11000 + 0x40)).unwrap();
        assert_eq!(page.load(&mem, 0x40), Some(7));
        page.store(&mem, 0x4, 1);
        assert_eq!(mem.read_obj::<u32>(GuestAddress(0x11004)).unwrap(), 1);
        page.clear(&mem);
        assert_eq!(page.load(&mem, 0x40), Some(0));
        assert_eq!(page.load(&mem, 0x4), Some(0));
    }
}
