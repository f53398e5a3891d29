//! Every guest address the engine touches goes through here: rings described by page lists
//! (or, for the admin queue, a contiguous base), and memory regions addressed by
//! (lkey, virtual address, length). Bounds and access rights are checked before a byte
//! moves; guest RAM accesses themselves are checked again by vm-memory, so memory that QEMU
//! unmapped under us gives an error, never a stray access.

use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};

use qpip_abi::admin as abi_admin;
use qpip_abi::cqe;

pub const PAGE_SIZE: u64 = 4096;

/// Why a translation failed, as the CQE detail code reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    pub status: u8,
    pub detail: u32,
}

impl Fault {
    pub const fn protection(detail: u32) -> Fault {
        Fault {
            status: cqe::CQE_STATUS_LOCAL_PROTECTION,
            detail,
        }
    }
}

/// Reads a page list of `npages` u64 entries at `list` and checks every page is 4 KiB
/// aligned and inside guest RAM. Returns None (BAD_ADDRESS) otherwise. For rings, whose
/// lists are short; a region's list is read over several passes ([`PageListReader`]).
pub fn read_page_list(mem: &GuestMemoryMmap, list: u64, npages: u32) -> Option<Vec<u64>> {
    let mut reader = PageListReader::new(list, npages)?;
    let mut unlimited = u32::MAX;
    match reader.read(mem, &mut unlimited) {
        Some(true) => Some(reader.into_pages()),
        _ => None,
    }
}

/// A page list read a part at a time. A region's list names up to `MAX_MR_PAGES` pages,
/// and the engine thread serves other functions too: `REG_MR` reads a budget of entries
/// per pass, and the rest in the passes after.
#[derive(Debug)]
pub struct PageListReader {
    /// Where the next unread entry is.
    next: u64,
    npages: u32,
    pages: Vec<u64>,
    /// The guest RAM region the last page was in: a page inside it is checked with two
    /// compares, a full lookup only when the region changes.
    region: Option<(u64, u64)>,
}

impl PageListReader {
    /// None (BAD_ADDRESS) if the list is misaligned, empty or runs past the address space.
    pub fn new(list: u64, npages: u32) -> Option<PageListReader> {
        if !list.is_multiple_of(8) || npages == 0 {
            return None;
        }
        list.checked_add(npages as u64 * 8)?;
        Some(PageListReader {
            next: list,
            npages,
            pages: Vec::with_capacity(npages as usize),
            region: None,
        })
    }

    /// Reads and checks up to `budget` more entries and takes them from it. Some(true) once
    /// the whole list is read, Some(false) while entries are left, None if an entry is not
    /// in guest RAM or names a page that is misaligned or not in guest RAM.
    pub fn read(&mut self, mem: &GuestMemoryMmap, budget: &mut u32) -> Option<bool> {
        // A page of entries at a time: no buffer the size of the list.
        const CHUNK: usize = (PAGE_SIZE / 8) as usize;
        let mut raw = [0u8; PAGE_SIZE as usize];
        loop {
            let left = self.npages as usize - self.pages.len();
            if left == 0 {
                return Some(true);
            }
            let n = left.min(CHUNK).min(*budget as usize);
            if n == 0 {
                return Some(false);
            }
            let raw = &mut raw[..n * 8];
            mem.read_slice(raw, GuestAddress(self.next)).ok()?;
            for c in raw.chunks_exact(8) {
                let p = u64::from_le_bytes(c.try_into().expect("8 bytes"));
                if p % PAGE_SIZE != 0 {
                    return None;
                }
                let inside = self
                    .region
                    .is_some_and(|(start, end)| p >= start && p < end && end - p >= PAGE_SIZE);
                if !inside {
                    if !mem.check_range(GuestAddress(p), PAGE_SIZE as usize) {
                        return None;
                    }
                    self.region = mem
                        .find_region(GuestAddress(p))
                        .map(|r| (r.start_addr().0, r.start_addr().0 + r.len()));
                }
                self.pages.push(p);
            }
            self.next += n as u64 * 8;
            *budget -= n as u32;
        }
    }

    /// The pages read (all of them once `read` answered Some(true)).
    pub fn into_pages(self) -> Vec<u64> {
        self.pages
    }
}

/// Whether `len` bytes at `addr` lie in guest RAM.
pub fn in_ram(mem: &GuestMemoryMmap, addr: u64, len: u64) -> bool {
    usize::try_from(len)
        .is_ok_and(|l| addr.checked_add(len).is_some() && mem.check_range(GuestAddress(addr), l))
}

/// Where a ring's entries live.
#[derive(Debug, Clone)]
enum Backing {
    /// Physically contiguous (the admin queue).
    Contiguous(u64),
    /// One guest page per 4 KiB of ring (queues mapped from a process).
    Pages(Vec<u64>),
}

/// A ring of fixed-size entries in guest memory. Entry sizes divide the page size, so an
/// entry never straddles two pages.
#[derive(Debug, Clone)]
pub struct Ring {
    backing: Backing,
    entry_size: u32,
    depth: u32,
}

impl Ring {
    pub fn contiguous(base: u64, entry_size: u32, depth: u32) -> Ring {
        Ring {
            backing: Backing::Contiguous(base),
            entry_size,
            depth,
        }
    }

    /// A ring over a page list; None if the list does not hold exactly the pages the ring needs.
    pub fn paged(pages: Vec<u64>, entry_size: u32, depth: u32) -> Option<Ring> {
        let bytes = depth as u64 * entry_size as u64;
        let needed = bytes.div_ceil(PAGE_SIZE);
        (pages.len() as u64 == needed).then_some(Ring {
            backing: Backing::Pages(pages),
            entry_size,
            depth,
        })
    }

    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// Guest address of the entry for free-running index `index`.
    pub fn entry_addr(&self, index: u32) -> GuestAddress {
        let offset = (index % self.depth) as u64 * self.entry_size as u64;
        match &self.backing {
            Backing::Contiguous(base) => GuestAddress(base + offset),
            Backing::Pages(pages) => {
                GuestAddress(pages[(offset / PAGE_SIZE) as usize] + offset % PAGE_SIZE)
            }
        }
    }
}

/// Checks a queue depth: a power of two in 2..=max.
pub fn valid_depth(depth: u32, max: u32) -> bool {
    depth.is_power_of_two() && (2..=max).contains(&depth)
}

/// A registered memory region.
#[derive(Debug, Clone)]
pub struct MemoryRegion {
    pub ctx: u32,
    pub pages: Vec<u64>,
    pub iova: u64,
    pub length: u64,
    pub first_page_offset: u32,
    pub access: u32,
}

/// A piece of guest memory a transfer touches, and the region it was reached through: a
/// WR that keeps spans keeps them only while that region lives (DEREG_MR invalidates
/// every WR holding one of its spans, `Engine::tcp_region_gone`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub addr: u64,
    pub len: usize,
    /// The key of the region the span lies in (0: memory the device owns, no region).
    pub key: u32,
}

/// Whether any of `spans` lies in the region keyed `key`.
pub fn spans_use(spans: &[Span], key: u32) -> bool {
    spans.iter().any(|s| s.key == key)
}

impl MemoryRegion {
    /// Checks REG_MR arguments other than the page list; the error is an admin status.
    pub fn check(args: &abi_admin::RegMrArgs) -> Result<(), u16> {
        if args.length == 0
            || args.npages == 0
            || args.npages > abi_admin::MAX_MR_PAGES
            || args.first_page_offset as u64 >= PAGE_SIZE
            || args.iova % PAGE_SIZE != args.first_page_offset as u64
            || args.iova.checked_add(args.length).is_none()
            || args.access
                & !(abi_admin::MR_ACCESS_LOCAL_WRITE
                    | abi_admin::MR_ACCESS_REMOTE_WRITE
                    | abi_admin::MR_ACCESS_REMOTE_READ)
                != 0
        {
            return Err(abi_admin::ADMIN_STATUS_BAD_PARAM);
        }
        let needed = (args.first_page_offset as u64 + args.length).div_ceil(PAGE_SIZE);
        if needed != args.npages as u64 {
            return Err(abi_admin::ADMIN_STATUS_BAD_PARAM);
        }
        Ok(())
    }

    /// The region `args` describe ([`MemoryRegion::check`]ed), over `pages` read from its
    /// page list.
    pub fn new(ctx: u32, args: &abi_admin::RegMrArgs, pages: Vec<u64>) -> MemoryRegion {
        debug_assert_eq!(pages.len(), args.npages as usize);
        MemoryRegion {
            ctx,
            pages,
            iova: args.iova,
            length: args.length,
            first_page_offset: args.first_page_offset,
            access: args.access,
        }
    }

    /// The guest-physical spans of `len` bytes at virtual address `va`, after checking they
    /// lie inside the region. Access rights are checked by the caller (it knows what it
    /// will do).
    pub fn translate(&self, key: u32, va: u64, len: u64, out: &mut Vec<Span>) -> Result<(), Fault> {
        let end = va
            .checked_add(len)
            .ok_or(Fault::protection(cqe::CQE_DETAIL_OUT_OF_BOUNDS))?;
        if va < self.iova || end > self.iova + self.length {
            return Err(Fault::protection(cqe::CQE_DETAIL_OUT_OF_BOUNDS));
        }
        let mut offset = va - self.iova + self.first_page_offset as u64;
        let mut left = len;
        while left > 0 {
            let page = self.pages[(offset / PAGE_SIZE) as usize];
            let in_page = offset % PAGE_SIZE;
            let n = left.min(PAGE_SIZE - in_page);
            let addr = page + in_page;
            // Merge physically contiguous pages of one region into one span.
            match out.last_mut() {
                Some(last) if last.addr + last.len as u64 == addr && last.key == key => {
                    last.len += n as usize
                }
                _ => out.push(Span {
                    addr,
                    len: n as usize,
                    key,
                }),
            }
            offset += n;
            left -= n;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mr(pages: Vec<u64>, iova: u64, length: u64) -> MemoryRegion {
        MemoryRegion {
            ctx: 0,
            pages,
            iova,
            length,
            first_page_offset: (iova % PAGE_SIZE) as u32,
            access: 0,
        }
    }

    #[test]
    fn translation_follows_the_page_list() {
        let r = mr(vec![0x5000, 0x9000, 0xa000], 0x7f00_0000_0f00, 0x2000);
        let mut spans = Vec::new();
        r.translate(1, 0x7f00_0000_0f80, 0x200, &mut spans).unwrap();
        assert_eq!(
            spans,
            [
                Span {
                    addr: 0x5f80,
                    len: 0x80,
                    key: 1
                },
                Span {
                    addr: 0x9000,
                    len: 0x180,
                    key: 1
                }
            ]
        );
        spans.clear();
        // Pages 0x9000 and 0xa000 are contiguous: one span.
        r.translate(1, 0x7f00_0000_1f00, 0x1000, &mut spans)
            .unwrap();
        assert_eq!(
            spans,
            [Span {
                addr: 0x9f00,
                len: 0x1000,
                key: 1
            }]
        );
    }

    #[test]
    fn translation_refuses_anything_outside() {
        let r = mr(vec![0x5000], 0x1000, 0x800);
        let mut spans = Vec::new();
        assert!(r.translate(1, 0xfff, 1, &mut spans).is_err());
        assert!(r.translate(1, 0x1000, 0x801, &mut spans).is_err());
        assert!(r.translate(1, 0x17ff, 2, &mut spans).is_err());
        assert!(r.translate(1, u64::MAX, 2, &mut spans).is_err(), "wraps");
        assert!(spans.is_empty());
        r.translate(1, 0x1800, 0, &mut spans).unwrap();
    }

    #[test]
    fn paged_rings_need_exactly_their_pages() {
        assert!(Ring::paged(vec![0x1000], 128, 32).is_some());
        assert!(Ring::paged(vec![0x1000], 128, 64).is_none());
        assert!(Ring::paged(vec![0x1000, 0x2000], 128, 32).is_none());
        let r = Ring::paged(vec![0x4000, 0x8000], 64, 128).unwrap();
        assert_eq!(r.entry_addr(64), GuestAddress(0x8000));
        assert_eq!(
            r.entry_addr(128 + 1),
            GuestAddress(0x4040),
            "indices wrap at depth"
        );
    }
}
