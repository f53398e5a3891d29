//! Guest RAM as QEMU's memory-backend-memfd makes it: a memfd that the device maps (by DMA_MAP
//! over vfio-user, or `qpip_device::dma::GuestRam::map` for an engine built in this process)
//! and that this process maps too, so rings, page lists and buffers are built in it and what
//! the device wrote is read back from it. The fake guest, the engine bench and the fuzz
//! harness all keep their guest RAM in one of these.

use std::ffi::CStr;
use std::fs::File;
use std::os::fd::{AsFd, FromRawFd};
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU8, Ordering};

use qpip_abi::doorbell::Producer;
use qpip_abi::pci::DOORBELL_PAGE_SIZE;
use zerocopy::{FromBytes, Immutable, IntoBytes};

use crate::PAGE;

/// A memfd of guest RAM at a guest-physical base, mapped into this process, and the pages of
/// it handed out so far (from the base up, never reused).
pub struct Ram {
    file: File,
    map: NonNull<u8>,
    base: u64,
    size: u64,
    next_page: u64,
}

impl Ram {
    /// `size` bytes of zeroed guest RAM at guest-physical `base`, in a memfd named `name`.
    pub fn new(name: &CStr, base: u64, size: u64) -> Ram {
        // SAFETY: memfd_create with a valid NUL-terminated name.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
        // SAFETY: fd was just created and is owned by nothing else.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len(size).expect("size the guest RAM memfd");
        let map = qpip_abi::mmap::map_shared(file.as_fd(), 0, size as usize)
            .unwrap_or_else(|e| panic!("mmap of guest RAM: {e}"));
        Ram {
            file,
            map,
            base,
            size,
            next_page: base,
        }
    }

    /// The memfd, for the device to map.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Guest-physical address of the first byte.
    pub fn base(&self) -> u64 {
        self.base
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    /// First guest-physical address past RAM.
    pub fn end(&self) -> u64 {
        self.base + self.size
    }

    /// `n` contiguous pages of zeroed guest RAM, never handed out before: their
    /// guest-physical address.
    pub fn alloc_pages(&mut self, n: u64) -> u64 {
        let at = self.next_page;
        self.next_page += n * PAGE;
        assert!(
            self.next_page <= self.end(),
            "guest RAM exhausted (the harness allocates too much)"
        );
        at
    }

    /// First guest-physical address never handed out by [`Ram::alloc_pages`].
    pub fn next_free(&self) -> u64 {
        self.next_page
    }

    /// Takes back every page handed out, zeroing them, so that the next
    /// [`Ram::alloc_pages`] starts from the base again: RAM as [`Ram::new`] made it, if
    /// nothing wrote past the pages handed out (the caller's to know). Cheaper than a new
    /// memfd, whose pages each cost a fault and a clear on first touch — what the fuzz
    /// targets, which build a device per input, pay otherwise.
    pub fn recycle(&mut self) {
        self.fill(self.base, (self.next_page - self.base) as usize, 0);
        self.next_page = self.base;
    }

    /// Pages needed for a page list of `n` entries.
    pub fn page_list_pages(n: usize) -> u64 {
        (n as u64 * 8).div_ceil(PAGE).max(1)
    }

    /// Writes a page list (u64 entries) into fresh pages and returns its address.
    pub fn page_list(&mut self, pages: &[u64]) -> u64 {
        let at = self.alloc_pages(Self::page_list_pages(pages.len()));
        self.write(at, pages.as_bytes());
        at
    }

    /// This process's pointer to the `len` bytes at `gpa`; panics if any of them lies outside
    /// RAM (a bug of the caller, never the device's).
    pub fn ptr(&self, gpa: u64, len: usize) -> *mut u8 {
        assert!(
            gpa >= self.base && gpa.checked_add(len as u64).is_some_and(|e| e <= self.end()),
            "test bug: guest access {gpa:#x}+{len} outside RAM"
        );
        // SAFETY: inside the mapping, checked above.
        unsafe { self.map.as_ptr().add((gpa - self.base) as usize) }
    }

    /// Writes guest memory. The device may read it concurrently: that is the point.
    pub fn write(&self, gpa: u64, data: &[u8]) {
        let p = self.ptr(gpa, data.len());
        // SAFETY: bounds checked; the mapping is shared memory with the device, which only
        // ever sees it as bytes.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) };
    }

    /// Reads guest memory, after an acquire fence (so what a phase bit announced is seen).
    pub fn read(&self, gpa: u64, len: usize) -> Vec<u8> {
        let p = self.ptr(gpa, len);
        let mut v = vec![0u8; len];
        fence(Ordering::Acquire);
        // SAFETY: as in write.
        unsafe { std::ptr::copy_nonoverlapping(p, v.as_mut_ptr(), len) };
        v
    }

    pub fn fill(&self, gpa: u64, len: usize, byte: u8) {
        let p = self.ptr(gpa, len);
        // SAFETY: as in write.
        unsafe { std::ptr::write_bytes(p, byte, len) };
    }

    pub fn write_obj<T: IntoBytes + Immutable>(&self, gpa: u64, v: &T) {
        self.write(gpa, v.as_bytes());
    }

    pub fn read_obj<T: FromBytes>(&self, gpa: u64) -> T {
        let p = self.ptr(gpa, std::mem::size_of::<T>());
        fence(Ordering::Acquire);
        // SAFETY: in bounds (ptr checks); an unaligned read of bytes that any value of a
        // FromBytes type may hold. No allocation: the bench reads CQEs this way.
        unsafe { std::ptr::read_unaligned(p.cast::<T>()) }
    }

    /// The byte at `gpa` as an atomic (a phase byte the device writes last).
    pub fn atomic_u8(&self, gpa: u64) -> &AtomicU8 {
        // SAFETY: in bounds (ptr checks), and AtomicU8 has no alignment requirement.
        unsafe { &*(self.ptr(gpa, 1) as *const AtomicU8) }
    }

    /// The doorbell page at `page` as its producer uses it (`abi::doorbell::Producer`).
    pub fn producer(&self, page: u64) -> Producer<'_> {
        assert!(
            page % DOORBELL_PAGE_SIZE as u64 == 0,
            "doorbell page {page:#x} unaligned"
        );
        let p = self.ptr(page, DOORBELL_PAGE_SIZE as usize);
        // SAFETY: a whole page inside the mapping (ptr checks), page-aligned, mapped as long
        // as `self`; doorbell pages are touched only through the producer's atomics.
        unsafe { Producer::from_ptr(p) }
    }
}

impl Drop for Ram {
    fn drop(&mut self) {
        // SAFETY: mapped in new() with this size; nothing borrows from it any more (every
        // reference handed out borrows `self`).
        unsafe { libc::munmap(self.map.as_ptr().cast(), self.size as usize) };
    }
}
