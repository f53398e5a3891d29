//! A shared mapping of a file, the one `mmap` call of the parties to this contract: the
//! library maps the device file's pages (doorbell page, kick page, rings) with it, and the
//! test kit and the engine bench map the guest RAM memfd that the device maps too. Only with
//! the `mmap` feature (std and libc); the rest of the crate stays `no_std`.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;

/// Maps `len` bytes of `fd` from `offset`, shared and read-write. The caller owns the mapping
/// and unmaps it (`libc::munmap`) when done.
pub fn map_shared(fd: BorrowedFd<'_>, offset: u64, len: usize) -> io::Result<NonNull<u8>> {
    let offset =
        libc::off_t::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: a new mapping at an address the kernel chooses, of a file descriptor that is
    // open for the duration of the call; nothing else refers to that memory yet.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            offset,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(NonNull::new(p.cast()).expect("mmap returned null"))
}
