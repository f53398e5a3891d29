//! Thin wrappers of the system calls both providers use: eventfds, poll, socket addresses.
//! Each `unsafe` block here is a plain system call on descriptors and buffers the caller
//! owns.

use std::io;
use std::net::{Ipv6Addr, SocketAddrV6};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// A new non-blocking, close-on-exec eventfd.
pub(crate) fn eventfd() -> Result<OwnedFd> {
    // SAFETY: plain system call; the result is checked before it is owned.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(Error::last_os("eventfd"));
    }
    // SAFETY: a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Adds 1 to an eventfd (makes it readable).
pub(crate) fn eventfd_signal(fd: RawFd) {
    let one = 1u64;
    // SAFETY: writes 8 bytes from a live u64. A full counter (EAGAIN) is still readable,
    // which is all a signal needs, so the result is not checked.
    unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
}

/// Reads (and so resets) a non-blocking eventfd; 0 when it was not signalled.
pub(crate) fn eventfd_drain(fd: RawFd) -> u64 {
    let mut v = 0u64;
    // SAFETY: reads 8 bytes into a live u64.
    let n = unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
    if n == 8 {
        v
    } else {
        0
    }
}

/// Waits until `fd` is readable, at most `timeout` (`None`: for ever). True if readable.
/// Interrupted waits are restarted with the time that is left.
pub(crate) fn wait_readable(fd: BorrowedFd<'_>, timeout: Option<Duration>) -> Result<bool> {
    wait_any_readable(&[fd], timeout)
}

/// The most descriptors [`wait_any_readable`] waits on at once.
pub const MAX_WAIT_FDS: usize = 8;

/// Waits until one of `fds` (at most [`MAX_WAIT_FDS`]) is readable or `timeout` passed
/// (`None`: no limit): true when one is. For an event loop that sleeps on CQs
/// ([`crate::Cq`] after [`crate::Cq::arm`]), the context's events
/// ([`crate::Context::events_fd`]) and descriptors of its own at once. Interrupted waits
/// are restarted with the time that is left; a descriptor that is gone (`POLLNVAL`,
/// `POLLERR` and nothing readable) is [`Error::DeviceGone`].
pub fn wait_any_readable(fds: &[BorrowedFd<'_>], timeout: Option<Duration>) -> Result<bool> {
    let deadline = timeout.map(|t| Instant::now() + t);
    // On the stack: CQ waits are on the data path.
    let none = libc::pollfd {
        fd: -1,
        events: 0,
        revents: 0,
    };
    let mut all = [none; MAX_WAIT_FDS];
    assert!(fds.len() <= all.len(), "at most {MAX_WAIT_FDS} descriptors");
    let ps = &mut all[..fds.len()];
    for (p, fd) in ps.iter_mut().zip(fds) {
        p.fd = fd.as_raw_fd();
        p.events = libc::POLLIN;
    }
    loop {
        let ms = match deadline {
            None => -1,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                // Round up so a short wait does not become a busy poll of 0 ms.
                left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
            }
        };
        // SAFETY: a live array of valid pollfds and its length.
        let n = unsafe { libc::poll(ps.as_mut_ptr(), ps.len() as libc::nfds_t, ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(Error::os("poll", e));
        }
        if n > 0 {
            let bad = libc::POLLERR | libc::POLLNVAL;
            if ps.iter().all(|p| p.revents & libc::POLLIN == 0)
                && ps.iter().any(|p| p.revents & bad != 0)
            {
                return Err(Error::DeviceGone);
            }
            return Ok(true);
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(false);
        }
    }
}

/// A `sockaddr_in6` for `addr`.
pub(crate) fn sockaddr(addr: &SocketAddrV6) -> libc::sockaddr_in6 {
    // SAFETY: sockaddr_in6 is plain integers and byte arrays: all zeros is valid.
    let mut sa: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
    sa.sin6_family = libc::AF_INET6 as libc::sa_family_t;
    sa.sin6_port = addr.port().to_be();
    sa.sin6_addr.s6_addr = addr.ip().octets();
    sa.sin6_flowinfo = addr.flowinfo();
    sa.sin6_scope_id = addr.scope_id();
    sa
}

/// The address in a `sockaddr_in6` (`None` if it is not one).
pub(crate) fn from_sockaddr(sa: &libc::sockaddr_in6, len: libc::socklen_t) -> Option<SocketAddrV6> {
    if (len as usize) < std::mem::size_of::<libc::sockaddr_in6>()
        || sa.sin6_family != libc::AF_INET6 as libc::sa_family_t
    {
        return None;
    }
    Some(SocketAddrV6::new(
        Ipv6Addr::from(sa.sin6_addr.s6_addr),
        u16::from_be(sa.sin6_port),
        sa.sin6_flowinfo,
        sa.sin6_scope_id,
    ))
}
