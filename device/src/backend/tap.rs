//! `tap:IFNAME`: a Linux TAP interface through /dev/net/tun.
//!
//! An existing TAP (made with `ip tuntap add dev IFNAME mode tap [user U]`) is attached to;
//! its owner brings it up and gives it addresses. If no interface of that name exists and
//! the process may create one (CAP_NET_ADMIN), a TAP is created for the life of the
//! process and brought up. Frames are read and written whole, without the packet
//! information header (IFF_NO_PI). The interface is opened in the network namespace of
//! the calling thread.
//!
//! Offloads: the TAP is opened with a virtio-net header on every frame (IFF_VNET_HDR, see
//! [`super::vnet`]) and told the device handles partial checksums and IPv6 and IPv4 TCP
//! segmentation (TUNSETOFFLOAD with TUN_F_CSUM | TUN_F_TSO6 | TUN_F_TSO4). So the device hands the
//! kernel TCP super-frames of up to 64 KiB in one write (the kernel cuts them, or a local
//! socket takes them whole), and the kernel hands the device segments GRO merged and
//! frames whose checksum it left partial, which are completed here. A kernel that refuses
//! the offloads gets plain frames. Frames whose header does not fit the frame are dropped
//! and counted ([`Backend::rx_dropped`]).
//!
//! Link state ([`Backend::link_up`]): up while the host side of the interface is
//! administratively up and running (`IFF_UP` and `IFF_RUNNING`, one SIOCGIFFLAGS on a
//! socket kept for it). A TAP whose host side is down refuses writes with EIO; those come
//! back as `NetworkDown`, so they are counted as link-down drops, not errors.

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;

use super::{vnet, Backend};
use crate::net::gso;

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TAP: libc::c_short = 0x0002;
const IFF_NO_PI: libc::c_short = 0x1000;
const IFF_VNET_HDR: libc::c_short = 0x4000;
/// `_IOW('T', 208, unsigned int)`
const TUNSETOFFLOAD: libc::c_ulong = 0x4004_54d0;
const TUN_F_CSUM: libc::c_ulong = 0x01;
const TUN_F_TSO4: libc::c_ulong = 0x02;
const TUN_F_TSO6: libc::c_ulong = 0x04;

/// `struct ifreq` as TUNSETIFF and SIOC\[GS\]IFFLAGS use it: the name, then the flags in
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
    /// A datagram socket for SIOCGIFFLAGS (the link state), opened once.
    flags_sock: File,
    /// Whether the kernel took TUNSETOFFLOAD (super-frames may be written).
    offloads: bool,
    /// Received frames refused for their virtio-net header.
    rx_dropped: u64,
    bad_header_logged: bool,
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
        req.flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
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
        // SAFETY: TUNSETOFFLOAD takes the offload flags as its argument.
        let flags = TUN_F_CSUM | TUN_F_TSO6 | TUN_F_TSO4;
        let offloads = unsafe { libc::ioctl(file.as_raw_fd(), TUNSETOFFLOAD, flags) } == 0;
        if !offloads {
            log::info!(
                "TAP {name}: no offloads ({}); frames go one segment at a time",
                io::Error::last_os_error()
            );
        }
        Ok(Tap {
            file,
            name: name.to_string(),
            flags_sock: ioctl_socket()?,
            offloads,
            rx_dropped: 0,
            bad_header_logged: false,
        })
    }

    /// Whether the kernel took the offloads (TUNSETOFFLOAD).
    pub fn offloads(&self) -> bool {
        self.offloads
    }

    /// Writes a virtio-net header and the frame in `parts` as one frame.
    fn write_parts(&mut self, parts: &[&[u8]]) -> io::Result<()> {
        let iov: Vec<libc::iovec> = parts
            .iter()
            .map(|p| libc::iovec {
                iov_base: p.as_ptr() as *mut libc::c_void,
                iov_len: p.len(),
            })
            .collect();
        let want: usize = parts.iter().map(|p| p.len()).sum();
        // SAFETY: every iovec points into a live slice of its length.
        let n = unsafe { libc::writev(self.file.as_raw_fd(), iov.as_ptr(), iov.len() as i32) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EIO) {
                // The host side is down: the link's state, not a fault.
                return Err(io::Error::new(io::ErrorKind::NetworkDown, e));
            }
            return Err(e);
        }
        if n as usize != want {
            return Err(io::Error::other(format!("TAP took {n} of {want} bytes")));
        }
        Ok(())
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

/// A socket for the interface ioctls (SIOCGIFFLAGS, SIOCSIFFLAGS).
fn ioctl_socket() -> io::Result<File> {
    // SAFETY: plain socket(2); the fd is owned by the File right after.
    let fd = unsafe { libc::socket(libc::AF_INET6, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor we own.
    Ok(unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}

/// The interface flags of `name` (SIOCGIFFLAGS on `sock`).
fn if_flags(sock: &File, name: &str) -> io::Result<libc::c_short> {
    let mut req = IfReq::new(name);
    // SAFETY: SIOCGIFFLAGS reads and writes a struct ifreq, which `req` is.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(req.flags)
}

/// Whether interface flags say the link is up: administratively up and running.
fn flags_up(flags: libc::c_short) -> bool {
    let want = (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
    flags & want == want
}

/// Brings an interface up (SIOCSIFFLAGS with IFF_UP).
fn set_up(name: &str) -> io::Result<()> {
    let sock = ioctl_socket()?;
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
        self.write_parts(&[&[0u8; vnet::LEN], frame])
    }

    fn gso(&self) -> bool {
        self.offloads
    }

    /// One write of the whole super-frame: the kernel cuts it (TSO6, TSO4), its TCP
    /// checksum left partial as a NIC with checksum offload would get it.
    fn send_gso(&mut self, frame: &[u8], mss: u16) -> io::Result<()> {
        let Some(headers) = gso::frame_headers_len(frame).filter(|_| self.offloads) else {
            return super::send_segments(self, frame, mss);
        };
        let (h, src, dst) = if gso::is_ipv4_frame(frame) {
            let v4 = |at: usize| {
                let a: [u8; 4] = frame[at..at + 4].try_into().expect("4");
                std::net::Ipv4Addr::from(a).to_ipv6_mapped()
            };
            (vnet::VnetHdr::tcp4_gso(headers, mss), v4(26), v4(30))
        } else {
            let v6 = |at: usize| {
                std::net::Ipv6Addr::from(<[u8; 16]>::try_from(&frame[at..at + 16]).expect("16"))
            };
            (vnet::VnetHdr::tcp6_gso(headers, mss), v6(22), v6(38))
        };
        let at = (h.csum_start + h.csum_offset) as usize;
        let partial = vnet::partial_tcp_checksum(&src, &dst, frame.len() - h.csum_start as usize);
        self.write_parts(&[&h.to_bytes(), &frame[..at], &partial, &frame[at + 2..]])
    }

    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        let mut hdr = [0u8; vnet::LEN];
        loop {
            let iov = [
                libc::iovec {
                    iov_base: hdr.as_mut_ptr() as *mut libc::c_void,
                    iov_len: hdr.len(),
                },
                libc::iovec {
                    iov_base: buf.as_mut_ptr() as *mut libc::c_void,
                    iov_len: buf.len(),
                },
            ];
            // SAFETY: both iovecs point into live, writable buffers of their lengths.
            let n = unsafe { libc::readv(self.file.as_raw_fd(), iov.as_ptr(), 2) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::WouldBlock {
                    return Ok(None);
                }
                return Err(e);
            }
            let n = n as usize;
            let verdict = match vnet::VnetHdr::parse(&hdr[..n.min(vnet::LEN)]) {
                None => Err(vnet::RxError::Short),
                Some(h) => vnet::finish_rx(&h, &mut buf[..n - vnet::LEN]).map(|_| h),
            };
            match verdict {
                Ok(_) => return Ok(Some(n - vnet::LEN)),
                Err(e) => {
                    self.rx_dropped += 1;
                    if !self.bad_header_logged {
                        self.bad_header_logged = true;
                        log::warn!("{}: frame dropped: {e:?} (counted from now on)", self.name);
                    }
                }
            }
        }
    }

    fn rx_dropped(&self) -> u64 {
        self.rx_dropped
    }

    fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    fn describe(&self) -> String {
        format!("tap:{}", self.name)
    }

    /// One SIOCGIFFLAGS. An interface that cannot be asked (deleted under us) is down.
    fn link_up(&mut self) -> bool {
        if_flags(&self.flags_sock, &self.name).is_ok_and(flags_up)
    }

    fn link_watched(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn ifreq_layout() {
        assert_eq!(std::mem::size_of::<super::IfReq>(), 40);
    }

    /// Up means administratively up and running (the host side has a carrier).
    #[test]
    fn link_up_needs_up_and_running() {
        use super::flags_up;
        let (up, running) = (libc::IFF_UP as i16, libc::IFF_RUNNING as i16);
        assert!(flags_up(up | running | libc::IFF_BROADCAST as i16));
        assert!(!flags_up(up));
        assert!(!flags_up(running));
        assert!(!flags_up(0));
    }

    /// The loopback interface of the test's namespace is up and running; a name that is
    /// no interface cannot be asked.
    #[test]
    fn flags_of_an_interface() {
        let sock = super::ioctl_socket().unwrap();
        assert!(super::flags_up(super::if_flags(&sock, "lo").unwrap()));
        assert!(super::if_flags(&sock, "qpip-no-such").is_err());
    }
}
