//! `tap:IFNAME`: a Linux TAP interface through /dev/net/tun.
//!
//! An existing TAP (made with `ip tuntap add dev IFNAME mode tap [user U]`) is attached to;
//! its owner brings it up and gives it addresses. If no interface of that name exists and
//! the process may create one (CAP_NET_ADMIN), a TAP is created for the life of the
//! process and brought up. Frames are read and written whole, without the packet
//! information header (IFF_NO_PI). The interface is opened in the network namespace of
//! the calling thread.

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;

use super::Backend;

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TAP: libc::c_short = 0x0002;
const IFF_NO_PI: libc::c_short = 0x1000;

/// `struct ifreq` as TUNSETIFF and SIOC[GS]IFFLAGS use it: the name, then the flags in
/// the union (the union is 24 bytes; the struct 40).
#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

impl IfReq {
    fn new(name: &str) -> IfReq {
        let mut r = IfReq {
            name: [0; libc::IFNAMSIZ],
            flags: 0,
            _pad: [0; 22],
        };
        r.name[..name.len()].copy_from_slice(name.as_bytes());
        r
    }
}

/// Interface names: 1..=15 bytes, no '/', ':' or whitespace (what the kernel accepts).
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return Err(format!("interface name '{name}' must be 1 to 15 bytes"));
    }
    if name
        .bytes()
        .any(|b| b == b'/' || b == b':' || b.is_ascii_whitespace() || b == 0)
    {
        return Err(format!(
            "interface name '{name}' has a character not allowed in one"
        ));
    }
    Ok(())
}

pub struct Tap {
    file: File,
    name: String,
}

impl Tap {
    pub fn open(name: &str) -> io::Result<Tap> {
        check_name(name).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let cname = CString::new(name).expect("checked");
        // SAFETY: a valid NUL-terminated string.
        let existed = unsafe { libc::if_nametoindex(cname.as_ptr()) } != 0;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open("/dev/net/tun")
            .map_err(|e| io::Error::new(e.kind(), format!("cannot open /dev/net/tun: {e}")))?;
        let mut req = IfReq::new(name);
        req.flags = IFF_TAP | IFF_NO_PI;
        // SAFETY: TUNSETIFF reads and writes a struct ifreq, which `req` is.
        if unsafe { libc::ioctl(file.as_raw_fd(), TUNSETIFF, &mut req) } < 0 {
            let e = io::Error::last_os_error();
            let why = match e.raw_os_error() {
                Some(libc::EPERM) if existed => {
                    format!("not allowed to attach to TAP {name} (owned by another user?)")
                }
                Some(libc::EPERM) => {
                    format!("no interface {name}, and creating a TAP needs CAP_NET_ADMIN")
                }
                Some(libc::EINVAL) | Some(libc::EBUSY) if existed => {
                    format!("{name} is not a free TAP interface ({e})")
                }
                _ => format!("cannot attach to TAP {name}: {e}"),
            };
            return Err(io::Error::new(e.kind(), why));
        }
        if !existed {
            set_up(name)?;
            log::info!("created TAP {name} (it goes away when qpipd stops)");
        }
        Ok(Tap {
            file,
            name: name.to_string(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

/// Brings an interface up (SIOCSIFFLAGS with IFF_UP).
fn set_up(name: &str) -> io::Result<()> {
    // SAFETY: plain socket(2); the fd is owned by `sock` right after.
    let fd = unsafe { libc::socket(libc::AF_INET6, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor we own.
    let sock = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let mut req = IfReq::new(name);
    // SAFETY: SIOCGIFFLAGS/SIOCSIFFLAGS read and write a struct ifreq.
    unsafe {
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) < 0 {
            return Err(io::Error::last_os_error());
        }
        req.flags |= libc::IFF_UP as libc::c_short;
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &mut req) < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!("cannot bring {name} up: {e}"),
            ));
        }
    }
    Ok(())
}

impl Backend for Tap {
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        match self.file.write(frame) {
            Ok(n) if n == frame.len() => Ok(()),
            Ok(n) => Err(io::Error::other(format!(
                "TAP took {n} of {} bytes",
                frame.len()
            ))),
            Err(e) => Err(e),
        }
    }

    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        match self.file.read(buf) {
            Ok(n) => Ok(Some(n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    fn describe(&self) -> String {
        format!("tap:{}", self.name)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn ifreq_layout() {
        assert_eq!(std::mem::size_of::<super::IfReq>(), 40);
    }
}
