//! Guest memory as the device sees it: the DMA regions QEMU maps over vfio-user.
//!
//! QEMU sends one DMA_MAP per guest RAM region with the fd of its memory backend (the guest
//! must use a shared, fd-backed memory backend for this). Those are mmapped here and kept in
//! a `GuestMemoryAtomic`, so engine threads can take a consistent snapshot while the control
//! thread maps and unmaps. QEMU also announces regions it does not back with a file (its own
//! BARs, option ROMs); those carry no fd and are accepted and ignored: the device never DMAs
//! to them.

use std::fs::File;
use std::io;

use log::{debug, info};
use vm_memory::{
    FileOffset, GuestAddress, GuestAddressSpace, GuestMemoryAtomic, GuestMemoryBackend,
    GuestMemoryMmap, GuestMemoryRegion, GuestRegionMmap, MmapRegion,
};

/// The device's map of guest physical memory.
pub struct GuestRam {
    memory: GuestMemoryAtomic<GuestMemoryMmap>,
    ignored_maps: u64,
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

impl GuestRam {
    pub fn new() -> Self {
        GuestRam {
            memory: GuestMemoryAtomic::new(GuestMemoryMmap::new()),
            ignored_maps: 0,
        }
    }

    /// A handle engine threads keep; `memory().memory()` gives the current snapshot.
    pub fn memory(&self) -> GuestMemoryAtomic<GuestMemoryMmap> {
        self.memory.clone()
    }

    /// Number of fd-less maps accepted and ignored.
    pub fn ignored_maps(&self) -> u64 {
        self.ignored_maps
    }

    /// Total bytes of guest memory currently mapped.
    pub fn mapped_bytes(&self) -> u64 {
        self.memory.memory().iter().map(|r| r.len()).sum()
    }

    /// Handles DMA_MAP: `size` bytes of guest physical memory at `address`, backed by `fd` at
    /// `file_offset`. Refuses empty, wrapping or overlapping ranges.
    pub fn map(
        &mut self,
        address: u64,
        size: u64,
        file_offset: u64,
        fd: Option<File>,
    ) -> io::Result<()> {
        if size == 0 || address.checked_add(size - 1).is_none() {
            return Err(invalid(format!(
                "DMA map of {size:#x} bytes at {address:#x} is empty or wraps"
            )));
        }
        let Some(file) = fd else {
            debug!("DMA map {address:#x}+{size:#x} has no fd (QEMU-internal memory): ignored");
            self.ignored_maps += 1;
            return Ok(());
        };
        let len = usize::try_from(size)
            .map_err(|_| invalid(format!("DMA map size {size:#x} too large")))?;
        let region =
            MmapRegion::from_file(FileOffset::new(file, file_offset), len).map_err(|e| {
                io::Error::other(format!(
                    "cannot mmap DMA region {address:#x}+{size:#x}: {e}"
                ))
            })?;
        let region = GuestRegionMmap::new(region, GuestAddress(address)).ok_or_else(|| {
            invalid(format!(
                "DMA region {address:#x}+{size:#x} does not fit the address space"
            ))
        })?;
        let guard = self
            .memory
            .lock()
            .map_err(|_| io::Error::other("guest memory lock poisoned"))?;
        let updated = self
            .memory
            .memory()
            .insert_region(std::sync::Arc::new(region))
            .map_err(|e| invalid(format!("DMA map {address:#x}+{size:#x} refused: {e}")))?;
        guard.replace(updated);
        info!("DMA map {address:#x}+{size:#x} (file offset {file_offset:#x})");
        Ok(())
    }

    /// Handles DMA_UNMAP. Unmapping a range that was accepted without an fd is a no-op;
    /// unmapping anything else that is not exactly a mapped region is an error.
    pub fn unmap(&mut self, address: u64, size: u64) -> io::Result<()> {
        let guard = self
            .memory
            .lock()
            .map_err(|_| io::Error::other("guest memory lock poisoned"))?;
        match self
            .memory
            .memory()
            .remove_region(GuestAddress(address), size)
        {
            Ok((updated, _removed)) => {
                guard.replace(updated);
                info!("DMA unmap {address:#x}+{size:#x}");
                Ok(())
            }
            Err(_) => {
                // QEMU unmaps fd-less regions too; they were never mapped here.
                debug!("DMA unmap {address:#x}+{size:#x}: not a mapped region, ignored");
                Ok(())
            }
        }
    }
}

impl Default for GuestRam {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Seek, SeekFrom, Write};
    use vm_memory::Bytes;

    fn memfd(len: u64) -> File {
        let file = tempfile_in_memory();
        file.set_len(len).unwrap();
        file
    }

    fn tempfile_in_memory() -> File {
        // SAFETY: memfd_create with a valid C string; ownership of the fd moves into File.
        let fd = unsafe { libc::memfd_create(c"qpip-test".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0);
        use std::os::fd::FromRawFd;
        unsafe { File::from_raw_fd(fd) }
    }

    #[test]
    fn mapped_memory_is_the_callers_memory() {
        let mut ram = GuestRam::new();
        let mut file = memfd(0x4000);
        file.seek(SeekFrom::Start(0x1000 + 0x10)).unwrap();
        file.write_all(b"guest bytes").unwrap();
        ram.map(0x10_0000, 0x2000, 0x1000, Some(file.try_clone().unwrap()))
            .unwrap();
        let mem = ram.memory().memory();
        let mut buf = [0u8; 11];
        mem.read_slice(&mut buf, GuestAddress(0x10_0010)).unwrap();
        assert_eq!(&buf, b"guest bytes");
        // Writes by the device land in the file (that is, in the guest).
        mem.write_slice(b"device", GuestAddress(0x10_0100)).unwrap();
        let mut back = [0u8; 6];
        use std::os::unix::fs::FileExt;
        file.read_exact_at(&mut back, 0x1100).unwrap();
        assert_eq!(&back, b"device");
        assert_eq!(ram.mapped_bytes(), 0x2000);
    }

    #[test]
    fn accesses_outside_mapped_ranges_fail() {
        let mut ram = GuestRam::new();
        ram.map(0x10_0000, 0x1000, 0, Some(memfd(0x1000))).unwrap();
        let mem = ram.memory().memory();
        let mut buf = [0u8; 16];
        assert!(
            mem.read_slice(&mut buf, GuestAddress(0x10_0ff8)).is_err(),
            "crosses the end"
        );
        assert!(
            mem.read_slice(&mut buf, GuestAddress(0x20_0000)).is_err(),
            "unmapped"
        );
    }

    #[test]
    fn fd_less_maps_are_accepted_and_ignored() {
        let mut ram = GuestRam::new();
        ram.map(0xfe00_0000, 0x4000, 0, None).unwrap();
        assert_eq!(ram.ignored_maps(), 1);
        assert_eq!(ram.mapped_bytes(), 0);
        ram.unmap(0xfe00_0000, 0x4000).unwrap();
    }

    #[test]
    fn bad_maps_are_refused() {
        let mut ram = GuestRam::new();
        assert!(ram.map(0x1000, 0, 0, Some(memfd(0x1000))).is_err(), "empty");
        assert!(
            ram.map(u64::MAX - 0xfff + 1, 0x2000, 0, Some(memfd(0x2000)))
                .is_err(),
            "wraps"
        );
        ram.map(0x10_0000, 0x2000, 0, Some(memfd(0x2000))).unwrap();
        assert!(
            ram.map(0x10_1000, 0x2000, 0, Some(memfd(0x2000))).is_err(),
            "overlaps"
        );
    }

    #[test]
    fn unmap_removes_the_region() {
        let mut ram = GuestRam::new();
        ram.map(0x10_0000, 0x1000, 0, Some(memfd(0x1000))).unwrap();
        let snapshot_before = ram.memory().memory();
        ram.unmap(0x10_0000, 0x1000).unwrap();
        assert_eq!(ram.mapped_bytes(), 0);
        let mut b = [0u8; 1];
        assert!(ram
            .memory()
            .memory()
            .read_slice(&mut b, GuestAddress(0x10_0000))
            .is_err());
        // A snapshot taken before stays valid for whoever holds it.
        assert!(snapshot_before
            .read_slice(&mut b, GuestAddress(0x10_0000))
            .is_ok());
    }
}
