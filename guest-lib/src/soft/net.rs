//! Socket system calls of the software provider: IPv6 sockets, always non-blocking. Each
//! `unsafe` block is one system call on a descriptor the provider owns, with buffers that
//! are live for the call (iovecs point into registered regions kept alive by their
//! requests).

use std::io;
use std::net::SocketAddrV6;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::sys::{from_sockaddr, sockaddr};

fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn checkn(r: isize) -> io::Result<usize> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

fn setsockopt<T>(fd: RawFd, level: i32, name: i32, v: T) -> io::Result<()> {
    // SAFETY: passes a live value of its own size.
    check(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&v as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    })
    .map(|_| ())
}

/// TCP keepalive on a stream socket: on with its three settings, or off.
pub(crate) fn set_keepalive(fd: &OwnedFd, k: Option<crate::Keepalive>) -> io::Result<()> {
    let fd = fd.as_raw_fd();
    let Some(k) = k else {
        return setsockopt(fd, libc::SOL_SOCKET, libc::SO_KEEPALIVE, 0i32);
    };
    // The caller checked the ranges (crate::Keepalive::checked): they fit an i32.
    setsockopt(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_KEEPIDLE,
        k.idle.as_secs() as i32,
    )?;
    setsockopt(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_KEEPINTVL,
        k.interval.as_secs() as i32,
    )?;
    setsockopt(fd, libc::IPPROTO_TCP, libc::TCP_KEEPCNT, k.probes as i32)?;
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1i32)
}

/// A non-blocking dual-stack IPv6 socket (`SOCK_DGRAM` or `SOCK_STREAM`).
pub(crate) fn socket(ty: i32) -> io::Result<OwnedFd> {
    // SAFETY: plain system call; the result is checked before it is owned.
    let fd = check(unsafe {
        libc::socket(
            libc::AF_INET6,
            ty | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    })?;
    // SAFETY: a fresh descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // Dual-stack, as the device: IPv4 peers are IPv4-mapped IPv6 addresses (::ffff:a.b.c.d),
    // and a QP bound to every address takes IPv4 too.
    setsockopt(fd.as_raw_fd(), libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, 0i32)?;
    if ty == libc::SOCK_STREAM {
        setsockopt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_REUSEADDR, 1i32)?;
        setsockopt(fd.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_NODELAY, 1i32)?;
    }
    Ok(fd)
}

pub(crate) fn bind(fd: &OwnedFd, addr: &SocketAddrV6) -> io::Result<()> {
    let sa = sockaddr(addr);
    // SAFETY: a live sockaddr_in6 of the size given.
    check(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_in6).cast(),
            std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t,
        )
    })
    .map(|_| ())
}

pub(crate) fn local_addr(fd: &OwnedFd) -> io::Result<SocketAddrV6> {
    name_of(fd, libc::getsockname)
}

pub(crate) fn peer_addr(fd: &OwnedFd) -> io::Result<SocketAddrV6> {
    name_of(fd, libc::getpeername)
}

type NameFn =
    unsafe extern "C" fn(libc::c_int, *mut libc::sockaddr, *mut libc::socklen_t) -> libc::c_int;

fn name_of(fd: &OwnedFd, f: NameFn) -> io::Result<SocketAddrV6> {
    // SAFETY: plain integers and arrays: all zeros is valid.
    let mut sa: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t;
    // SAFETY: a live sockaddr_in6 and its length.
    check(unsafe {
        f(
            fd.as_raw_fd(),
            (&mut sa as *mut libc::sockaddr_in6).cast(),
            &mut len,
        )
    })?;
    from_sockaddr(&sa, len).ok_or_else(|| io::Error::from_raw_os_error(libc::EAFNOSUPPORT))
}

/// Starts a connection; `EINPROGRESS` is the usual answer of a non-blocking socket.
pub(crate) fn connect(fd: &OwnedFd, addr: &SocketAddrV6) -> io::Result<()> {
    let sa = sockaddr(addr);
    // SAFETY: a live sockaddr_in6 of the size given.
    check(unsafe {
        libc::connect(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_in6).cast(),
            std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t,
        )
    })
    .map(|_| ())
}

pub(crate) fn listen(fd: &OwnedFd, backlog: u32) -> io::Result<()> {
    // SAFETY: plain system call.
    check(unsafe { libc::listen(fd.as_raw_fd(), backlog as i32) }).map(|_| ())
}

pub(crate) fn accept(fd: &OwnedFd) -> io::Result<(OwnedFd, SocketAddrV6)> {
    // SAFETY: plain integers and arrays: all zeros is valid.
    let mut sa: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t;
    // SAFETY: a live sockaddr_in6 and its length; the result is checked before it is owned.
    let c = check(unsafe {
        libc::accept4(
            fd.as_raw_fd(),
            (&mut sa as *mut libc::sockaddr_in6).cast(),
            &mut len,
            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        )
    })?;
    // SAFETY: a fresh descriptor nobody else owns.
    let c = unsafe { OwnedFd::from_raw_fd(c) };
    setsockopt(c.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_NODELAY, 1i32)?;
    let peer =
        from_sockaddr(&sa, len).ok_or_else(|| io::Error::from_raw_os_error(libc::EAFNOSUPPORT))?;
    Ok((c, peer))
}

/// The pending error of a socket (`SO_ERROR`), 0 if none.
pub(crate) fn so_error(fd: &OwnedFd) -> i32 {
    let mut v = 0i32;
    let mut len = std::mem::size_of::<i32>() as libc::socklen_t;
    // SAFETY: a live i32 and its length.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            (&mut v as *mut i32).cast(),
            &mut len,
        )
    };
    if r < 0 {
        io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
    } else {
        v
    }
}

/// True when a connecting socket has finished (connected or failed).
pub(crate) fn writable_now(fd: &OwnedFd) -> bool {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no waiting.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n > 0 && p.revents != 0
}

/// Makes a close send a reset, as destroying a device QP does.
pub(crate) fn set_linger_zero(fd: &OwnedFd) {
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    let _ = setsockopt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_LINGER, l);
}

pub(crate) fn shutdown_write(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: plain system call.
    check(unsafe { libc::shutdown(fd.as_raw_fd(), libc::SHUT_WR) }).map(|_| ())
}

/// `sendmsg` of `iov` (to `dest` for datagrams), never blocking, never raising SIGPIPE.
pub(crate) fn send(
    fd: &OwnedFd,
    iov: &[libc::iovec],
    dest: Option<&SocketAddrV6>,
) -> io::Result<usize> {
    let mut sa = dest.map(sockaddr);
    // SAFETY: plain integers and pointers: all zeros is a valid empty msghdr.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    if let Some(sa) = sa.as_mut() {
        msg.msg_name = (sa as *mut libc::sockaddr_in6).cast();
        msg.msg_namelen = std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t;
    }
    msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = iov.len() as _;
    // SAFETY: msghdr points at live iovecs and address; each iovec names bytes of a
    // registered region (or inline data) kept alive by its request.
    checkn(unsafe {
        libc::sendmsg(
            fd.as_raw_fd(),
            &msg,
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    })
}

/// `recvmsg` into `iov`; returns the bytes and the sender.
pub(crate) fn recv(fd: &OwnedFd, iov: &[libc::iovec]) -> io::Result<(usize, Option<SocketAddrV6>)> {
    // SAFETY: plain integers and arrays: all zeros is valid.
    let mut sa: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = (&mut sa as *mut libc::sockaddr_in6).cast();
    msg.msg_namelen = std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t;
    msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = iov.len() as _;
    // SAFETY: msghdr points at a live address buffer and iovecs naming writable bytes of
    // registered regions kept alive by their request.
    let n = checkn(unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) })?;
    Ok((n, from_sockaddr(&sa, msg.msg_namelen)))
}

/// The size of the next datagram, without taking it.
pub(crate) fn peek_len(fd: &OwnedFd) -> io::Result<usize> {
    // SAFETY: a zero-length receive into no buffer.
    checkn(unsafe {
        libc::recv(
            fd.as_raw_fd(),
            std::ptr::null_mut(),
            0,
            libc::MSG_PEEK | libc::MSG_TRUNC | libc::MSG_DONTWAIT,
        )
    })
}

/// Takes the next datagram and throws it away; returns the sender.
pub(crate) fn discard(fd: &OwnedFd) -> io::Result<Option<SocketAddrV6>> {
    recv(fd, &[]).map(|(_, a)| a)
}

/// `read` into a byte buffer of the provider's own.
pub(crate) fn read(fd: &OwnedFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: writes at most buf.len() bytes into buf.
    checkn(unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) })
}

pub(crate) fn epoll_set(epfd: RawFd, op: i32, fd: RawFd, events: u32, token: u64) {
    let mut ev = libc::epoll_event { events, u64: token };
    // SAFETY: a live epoll_event; both descriptors are the provider's. A failure (the
    // descriptor is already gone) leaves nothing registered, which is what the caller wants.
    unsafe { libc::epoll_ctl(epfd, op, fd, &mut ev) };
}
