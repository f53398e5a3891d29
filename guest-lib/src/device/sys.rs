//! The device file's system calls: ioctls with size-versioned arguments, mmap of the
//! doorbell page, kick page and rings, event records.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::ptr::NonNull;

use zerocopy::{FromBytes, Immutable, IntoBytes};

use crate::error::{Error, Result};

/// Calls ioctl `req` with `arg`, whose first field (`size`) the caller has set.
pub(crate) fn ioctl<T: IntoBytes + FromBytes + Immutable>(
    fd: &OwnedFd,
    req: u32,
    arg: &mut T,
    op: &'static str,
) -> Result<()> {
    // SAFETY: `arg` is a live, exclusively borrowed repr(C) structure of the size its
    // `size` field announces; the driver reads and writes at most that many bytes.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), req as libc::Ioctl, arg as *mut T) };
    if r == 0 {
        Ok(())
    } else {
        Err(Error::last_os(op))
    }
}

/// A shared mapping of the device file, unmapped when dropped.
pub(crate) struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is process-wide memory; all access through it is by raw pointer
// with volatile or atomic-ordered operations, whose synchronisation the callers provide.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    pub(crate) fn new(
        fd: &OwnedFd,
        offset: u64,
        len: usize,
        what: &'static str,
    ) -> Result<Mapping> {
        // The driver validates offset and length against what this context owns.
        let ptr =
            qpip_abi::mmap::map_shared(fd.as_fd(), offset, len).map_err(|e| Error::os(what, e))?;
        Ok(Mapping { ptr, len })
    }

    /// Pointer to byte `off`; panics if it is outside (a library bug, not a user error).
    pub(crate) fn at(&self, off: usize) -> *mut u8 {
        assert!(
            off < self.len,
            "offset {off} outside a {}-byte mapping",
            self.len
        );
        // SAFETY: inside the mapping, checked just above.
        unsafe { self.ptr.as_ptr().add(off) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what new() mapped; nothing refers to it any more.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}
