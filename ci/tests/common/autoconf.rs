//! The lab host's side of address autoconfiguration on the lab bridge, for the tests that
//! show a guest's network interface taking its addresses from the network: IPv6 router
//! advertisements (SLAAC) and a DHCPv4 server.
//!
//! The advertisements are sent from the test process itself (a raw ICMPv6 socket in the
//! lab's namespace), so there is no process to stop, and to one interface's link-local
//! address (a host takes a unicast advertisement as it takes one to all nodes): sent to
//! all nodes, every NIC on the bridge, virtio-net ones too, would form addresses from it.
//! The DHCP server is the runtime's
//! busybox `udhcpd` (the same static busybox as the guests'), stopped by its pid when its
//! guard is dropped, on failure too.

use std::fs;
use std::io;
use std::mem;
use std::net::Ipv6Addr;
use std::process::{Child, Stdio};

use qpip_lab::{netns, paths, LabHost};

/// The prefix information option's A flag (RFC 4861 §4.6.2); its L flag (0x80) is left
/// off.
const PREFIX_AUTONOMOUS: u8 = 0x40;

/// A router advertisement (RFC 4861 §4.2) that offers `prefix`/64 for stateless address
/// autoconfiguration only: the A flag without the L flag (the lab's on-link prefix is the
/// /80 its hosts already have, and a /64 on-link route would take the far subnet's place),
/// router lifetime 0 (the sender is no default router: no guest's routes change), and the
/// sender's link-layer address (the lab bridge's). `valid_s` and `preferred_s` are the
/// prefix's lifetimes. The checksum is left 0: the kernel fills it in for ICMPv6 sockets.
pub fn router_advert(prefix: Ipv6Addr, valid_s: u32, preferred_s: u32) -> Vec<u8> {
    let mut ra = vec![
        134, 0, 0, 0, // type, code, checksum
        64, 0, // current hop limit, flags (no M, no O)
        0, 0, // router lifetime
        0, 0, 0, 0, // reachable time
        0, 0, 0, 0, // retransmission timer
    ];
    // Prefix information: type 3, 4 × 8 bytes.
    ra.extend_from_slice(&[3, 4, 64, PREFIX_AUTONOMOUS]);
    ra.extend_from_slice(&valid_s.to_be_bytes());
    ra.extend_from_slice(&preferred_s.to_be_bytes());
    ra.extend_from_slice(&[0; 4]);
    ra.extend_from_slice(&prefix.octets());
    // Source link-layer address: type 1, 1 × 8 bytes.
    ra.extend_from_slice(&[1, 1]);
    ra.extend(
        netns::BRIDGE_MAC
            .split(':')
            .map(|b| u8::from_str_radix(b, 16).expect("the bridge's MAC")),
    );
    ra
}

/// The IPv6 link-local address a MAC gives an interface (modified EUI-64, RFC 4291 §2.5.1):
/// the qpip device derives its own this way, and so does the guest kernel for the
/// interface.
pub fn link_local(mac: &str) -> Ipv6Addr {
    let m: Vec<u8> = mac
        .split(':')
        .map(|b| u8::from_str_radix(b, 16).expect("a MAC"))
        .collect();
    let mut a = [0u8; 16];
    a[0] = 0xfe;
    a[1] = 0x80;
    a[8..11].copy_from_slice(&[m[0] ^ 2, m[1], m[2]]);
    a[11..13].copy_from_slice(&[0xff, 0xfe]);
    a[13..16].copy_from_slice(&m[3..6]);
    Ipv6Addr::from(a)
}

/// Sends ICMPv6 message `msg` from the lab host to link-local `to` on the lab bridge, with
/// hop limit 255 (a receiver takes neighbour discovery only so, RFC 4861 §6.1.2) and the
/// bridge's link-local address as its source (the kernel's choice for a link-local
/// destination; a router advertisement from any other source is ignored).
pub fn send_icmpv6(host: &LabHost, to: Ipv6Addr, msg: &[u8]) -> Result<(), String> {
    host.in_netns(|| raw_icmpv6_send(to, msg))
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("ICMPv6 to {to}: {e}"))
}

fn raw_icmpv6_send(to: Ipv6Addr, msg: &[u8]) -> io::Result<()> {
    let bridge = std::ffi::CString::new(netns::BRIDGE).expect("a name");
    // SAFETY: a C string that outlives the call.
    let ifindex = unsafe { libc::if_nametoindex(bridge.as_ptr()) };
    if ifindex == 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: plain socket calls on a descriptor this function owns and closes; every
    // pointer passed is to a local that outlives the call, with its true size.
    unsafe {
        let fd = libc::socket(libc::AF_INET6, libc::SOCK_RAW, libc::IPPROTO_ICMPV6);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let hops: libc::c_int = 255;
        let mut ret = 0;
        for opt in [libc::IPV6_UNICAST_HOPS, libc::IPV6_MULTICAST_HOPS] {
            ret |= libc::setsockopt(
                fd,
                libc::IPPROTO_IPV6,
                opt,
                (&hops as *const libc::c_int).cast(),
                mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
        let mut sa: libc::sockaddr_in6 = mem::zeroed();
        sa.sin6_family = libc::AF_INET6 as libc::sa_family_t;
        sa.sin6_addr.s6_addr = to.octets();
        sa.sin6_scope_id = ifindex;
        if ret == 0 {
            let n = libc::sendto(
                fd,
                msg.as_ptr().cast(),
                msg.len(),
                0,
                (&sa as *const libc::sockaddr_in6).cast(),
                mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t,
            );
            if n < 0 {
                ret = -1;
            }
        }
        let err = io::Error::last_os_error();
        libc::close(fd);
        if ret != 0 {
            return Err(err);
        }
    }
    Ok(())
}

/// A DHCPv4 server on the lab bridge (busybox `udhcpd`, in the lab's namespace) that leases
/// one address, for as long as the guard lives.
pub struct DhcpServer {
    child: Option<Child>,
}

impl DhcpServer {
    /// Starts it, leasing `addr` (in the lab's 198.18.0.0/24, an address no lab participant
    /// has) with the lab's netmask; its configuration and lease file go in the lab's
    /// shared folder (the run folder keeps them).
    pub fn start(host: &LabHost, addr: &str) -> Result<DhcpServer, String> {
        let dir = host.shared_dir();
        let conf = dir.join("udhcpd.conf");
        let text = format!(
            "interface {}\nstart {addr}\nend {addr}\nmax_leases 1\n\
             lease_file {}\npidfile {}\noption subnet 255.255.255.0\noption lease 3600\n",
            netns::BRIDGE,
            dir.join("udhcpd.leases").display(),
            dir.join("udhcpd.pid").display(),
        );
        fs::write(&conf, text).map_err(|e| format!("{}: {e}", conf.display()))?;
        let busybox = paths::runtime().join("usr/bin/busybox");
        let child = host
            .command(&busybox)
            .arg("udhcpd")
            .arg("-f")
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("{} udhcpd: {e}", busybox.display()))?;
        Ok(DhcpServer { child: Some(child) })
    }
}

impl Drop for DhcpServer {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
