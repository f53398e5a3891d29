//! System calls on the device file and the other descriptors the checks use: ioctls
//! with size-versioned arguments, mmap, eventfds, poll, sysfs.

use crate::*;

pub(crate) fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

pub(crate) fn errname(e: i32) -> String {
    let name = match e {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::ENODEV => "ENODEV",
        libc::EINVAL => "EINVAL",
        libc::ENOSPC => "ENOSPC",
        libc::ENOTTY => "ENOTTY",
        libc::E2BIG => "E2BIG",
        libc::EADDRINUSE => "EADDRINUSE",
        libc::ECANCELED => "ECANCELED",
        libc::EACCES => "EACCES",
        libc::ECONNREFUSED => "ECONNREFUSED",
        libc::ECONNRESET => "ECONNRESET",
        libc::EDQUOT => "EDQUOT",
        _ => "",
    };
    format!("{name}({e})")
}

/// The ioctl argument structures: zeroed, with `size` (their first field) filled in.
pub(crate) trait Arg: Sized + Copy {
    fn new() -> Self {
        // SAFETY: every uapi structure is plain integers and byte arrays: all zeros is valid.
        let mut v: Self = unsafe { std::mem::zeroed() };
        // SAFETY: each structure starts with its u32 `size` field (repr(C)).
        unsafe { *(&mut v as *mut Self as *mut u32) = std::mem::size_of::<Self>() as u32 };
        v
    }
}
impl Arg for QueryDevice {}
impl Arg for CreateCq {}
impl Arg for Handle {}
impl Arg for CreateQp {}
impl Arg for RegMr {}
impl Arg for Bind {}
impl Arg for Listen {}
impl Arg for Accept {}
impl Arg for Connect {}
impl Arg for Close {}
impl Arg for QueryStats {}
impl Arg for Addr {}
impl Arg for SetMac {}
impl Arg for QueryConn {}
impl Arg for CreateTripwire {}
impl Arg for SetQpOpt {}

pub(crate) fn ioctl_ptr(fd: i32, req: u32, arg: *mut libc::c_void) -> Result<(), i32> {
    // SAFETY: the driver reads and writes at most the size the argument says it has; the
    // callers pass buffers at least that large (or deliberately bad pointers it must reject).
    let r = unsafe { libc::ioctl(fd, req as libc::Ioctl, arg) };
    if r == 0 {
        Ok(())
    } else {
        Err(errno())
    }
}

pub(crate) fn ioc<T>(fd: i32, req: u32, arg: &mut T) -> Result<(), i32> {
    ioctl_ptr(fd, req, arg as *mut T as *mut libc::c_void)
}

pub(crate) fn open_dev(flags: i32) -> Result<i32, i32> {
    let path = CString::new(DEV).unwrap();
    // SAFETY: a valid path.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC | flags) };
    if fd < 0 {
        Err(errno())
    } else {
        Ok(fd)
    }
}

pub(crate) fn close(fd: i32) {
    // SAFETY: closing a descriptor this program owns.
    unsafe { libc::close(fd) };
}

pub(crate) fn mmap_flags(
    fd: i32,
    off: u64,
    len: usize,
    prot: i32,
    flags: i32,
) -> Result<*mut u8, i32> {
    // SAFETY: a new mapping; the kernel validates everything.
    let p = unsafe { libc::mmap(ptr::null_mut(), len, prot, flags, fd, off as libc::off_t) };
    if p == libc::MAP_FAILED {
        Err(errno())
    } else {
        Ok(p.cast())
    }
}

pub(crate) fn map(fd: i32, off: u64, len: usize) -> Result<*mut u8, i32> {
    mmap_flags(
        fd,
        off,
        len,
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_SHARED,
    )
}

pub(crate) fn unmap(p: *mut u8, len: usize) {
    // SAFETY: unmapping what map() returned with its length.
    unsafe { libc::munmap(p.cast(), len) };
}

/// Anonymous memory for registered buffers.
pub(crate) fn anon(len: usize) -> *mut u8 {
    let p = mmap_flags(
        -1,
        0,
        len,
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
    )
    .expect("anonymous mmap");
    // Touch it so it is populated (pinning would do that too).
    // SAFETY: fresh mapping of len bytes.
    unsafe { ptr::write_bytes(p, 0, len) };
    p
}

pub(crate) fn eventfd() -> i32 {
    // SAFETY: plain system call.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    assert!(fd >= 0, "eventfd: {}", errname(errno()));
    fd
}

/// Waits until `fd` polls with any of `events` or `timeout`; returns revents (0 on timeout).
pub(crate) fn poll1(fd: i32, events: i16, timeout: Duration) -> i16 {
    let mut p = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut p, 1, timeout.as_millis() as i32) };
    if n > 0 {
        p.revents
    } else {
        0
    }
}

pub(crate) fn read_eventfd(fd: i32) -> u64 {
    let mut v = 0u64;
    // SAFETY: reading 8 bytes into a u64.
    let n = unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
    if n == 8 {
        v
    } else {
        0
    }
}

pub(crate) fn sysfs(attr: &str) -> String {
    std::fs::read_to_string(format!("{SYSFS}/{attr}"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|e| format!("<{e}>"))
}

pub(crate) fn flush() {
    let _ = std::io::stdout().flush();
}

pub(crate) fn read_fd(fd: i32, buf: &mut [u8]) -> Result<usize, i32> {
    // SAFETY: reading into a buffer of buf.len() bytes.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        Err(errno())
    } else {
        Ok(n as usize)
    }
}
