//! The doorbell BAR: shared memory that QEMU maps straight into the guest.
//!
//! The BAR is a memfd offered to QEMU as an mmappable region with one sparse-mmap area
//! covering all of it, so guest writes land in this memory with no trap and no message. The
//! device maps the same memfd and (from step 2 on) polls it. Accesses that do reach the
//! device as messages (a client that chose not to mmap) are served from the same memory, so
//! both paths see one set of bytes.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};

use std::sync::atomic::Ordering;

use vm_memory::{Bytes, FileOffset, MmapRegion, VolatileMemory};

/// Shared doorbell memory.
pub struct DoorbellBar {
    file: File,
    map: MmapRegion,
    size: usize,
}

impl DoorbellBar {
    pub fn new(size: usize) -> io::Result<Self> {
        // SAFETY: memfd_create with a valid NUL-terminated name; the returned fd is owned by
        // the File from here on.
        let fd = unsafe { libc::memfd_create(c"qpip-doorbells".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len(size as u64)?;
        let map = MmapRegion::from_file(FileOffset::new(file.try_clone()?, 0), size)
            .map_err(|e| io::Error::other(format!("cannot map doorbell memory: {e}")))?;
        Ok(DoorbellBar { file, map, size })
    }

    /// The fd handed to the vfio-user client for mmap.
    pub fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    pub fn size(&self) -> usize {
        self.size
    }

    /// Message-path read. Bounds are checked; out-of-range is an error, never a stray access.
    pub fn read(&self, offset: u64, data: &mut [u8]) -> io::Result<()> {
        let slice = self.slice(offset, data.len())?;
        slice.copy_to(data);
        Ok(())
    }

    /// Message-path write.
    pub fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let slice = self.slice(offset, data.len())?;
        slice.copy_from(data);
        Ok(())
    }

    /// Atomic load of the u32 at `offset` (4-byte aligned, in bounds: offsets come from the
    /// ABI's constants and validated slot numbers, never from the guest).
    pub fn load_u32(&self, offset: usize) -> u32 {
        self.map
            .as_volatile_slice()
            .load::<u32>(offset, Ordering::Acquire)
            .expect("doorbell offset in bounds")
    }

    /// Atomic store of the u32 at `offset`.
    pub fn store_u32(&self, offset: usize, value: u32) {
        self.map
            .as_volatile_slice()
            .store(value, offset, Ordering::Release)
            .expect("doorbell offset in bounds")
    }

    /// Zeroes one page (a new context starts with clean doorbells).
    pub fn clear_page(&self, page: usize) {
        let size = qpip_abi::pci::DOORBELL_PAGE_SIZE as usize;
        if let Ok(s) = self.map.as_volatile_slice().subslice(page * size, size) {
            s.copy_from(&vec![0u8; size]);
        }
    }

    /// Zeroes every page (device reset: no stale producer index survives).
    pub fn clear(&self) {
        self.map
            .as_volatile_slice()
            .copy_from(&vec![0u8; self.size]);
    }

    fn slice(
        &self,
        offset: u64,
        len: usize,
    ) -> io::Result<vm_memory::volatile_memory::VolatileSlice<'_, ()>> {
        let start = usize::try_from(offset)
            .ok()
            .filter(|o| o.checked_add(len).is_some_and(|e| e <= self.size));
        let start = start.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("doorbell BAR access of {len} bytes at {offset:#x} is outside the {:#x}-byte BAR", self.size),
            )
        })?;
        self.map
            .as_volatile_slice()
            .subslice(start, len)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    #[test]
    fn message_writes_and_file_share_bytes() {
        let bar = DoorbellBar::new(8192).unwrap();
        bar.write(4096 + 8, &7u32.to_le_bytes()).unwrap();
        let mut b = [0u8; 4];
        bar.file.read_exact_at(&mut b, 4096 + 8).unwrap();
        assert_eq!(u32::from_le_bytes(b), 7);
        bar.file.write_all_at(&9u32.to_le_bytes(), 16).unwrap();
        bar.read(16, &mut b).unwrap();
        assert_eq!(u32::from_le_bytes(b), 9);
        bar.clear();
        bar.read(16, &mut b).unwrap();
        assert_eq!(b, [0; 4]);
    }

    #[test]
    fn out_of_bounds_is_an_error() {
        let bar = DoorbellBar::new(4096).unwrap();
        let mut b = [0u8; 8];
        assert!(bar.read(4092, &mut b).is_err());
        assert!(bar.write(u64::MAX, &[1]).is_err());
        assert!(bar.read(4088, &mut b).is_ok());
    }
}
