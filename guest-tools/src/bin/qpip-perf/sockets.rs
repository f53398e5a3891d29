//! The counters a kernel-socket test (`--sockets`) reports per message, so that its
//! figures explain themselves as the QP side's do (`counters.rs`):
//!
//! - `nic_irqs`: the interrupts of the NIC that carries the test's traffic, the interface
//!   that owns the socket's local address (a UDP socket bound to any address: the one the
//!   kernel picks to reach the peer). From the interface's device in sysfs up to the
//!   first directory with `msi_irqs/` (virtio-net: the virtio device's PCI parent; the
//!   qpip netdev: its PCI function), the sum over every CPU of those IRQs' counts in
//!   `/proc/interrupts`. Left out where there is no such device (loopback) rather than
//!   counted as 0.
//! - `tcp_segs_out` (TCP) or `udp_tx` (UDP): the guest's TCP segments (`/proc/net/snmp`
//!   `Tcp: OutSegs`, IPv4 and IPv6 alike) or UDP datagrams (`Udp: OutDatagrams` plus
//!   IPv6's `Udp6OutDatagrams` of `/proc/net/snmp6`) sent, the names the device's own
//!   counters have on the QP side.
//!
//! All are the whole guest's: exact while the test is all the guest does.

use std::ffi::CStr;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6, UdpSocket};
use std::path::{Path, PathBuf};

use crate::counters::Counters;

/// The counters now of a test whose traffic leaves from `local` (TCP, or UDP).
pub fn take(local: Option<SocketAddr>, tcp: bool) -> Option<Counters> {
    let mut v = Vec::new();
    if let Some(n) = local.and_then(iface_of).and_then(|i| nic_irqs(&i)) {
        v.push(("nic_irqs".to_string(), n));
    }
    let snmp = read("/proc/net/snmp");
    let sent = if tcp {
        snmp.as_deref()
            .and_then(|s| snmp_field(s, "Tcp", "OutSegs"))
            .map(|n| ("tcp_segs_out", n))
    } else {
        let v4 = snmp
            .as_deref()
            .and_then(|s| snmp_field(s, "Udp", "OutDatagrams"));
        let v6 = read("/proc/net/snmp6").and_then(|s| snmp6_field(&s, "Udp6OutDatagrams"));
        (v4.is_some() || v6.is_some()).then(|| ("udp_tx", v4.unwrap_or(0) + v6.unwrap_or(0)))
    };
    if let Some((name, n)) = sent {
        v.push((name.to_string(), n));
    }
    (!v.is_empty()).then_some(Counters(v))
}

/// The local address of a UDP socket bound to `bound` that sends to `peer`: `bound`
/// unless it is any address, then the one the kernel picks to reach `peer` (a socket
/// connected to it, which sends nothing).
pub fn udp_local(bound: SocketAddr, peer: Option<SocketAddrV6>) -> Option<SocketAddr> {
    if !bound.ip().is_unspecified() {
        return Some(bound);
    }
    let probe = UdpSocket::bind(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 0, 0, 0)).ok()?;
    probe.connect(peer?).ok()?;
    probe.local_addr().ok()
}

fn read(path: impl AsRef<Path>) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// The interface that owns `addr`.
fn iface_of(addr: SocketAddr) -> Option<String> {
    match addr {
        SocketAddr::V4(a) => iface_of_v4(*a.ip()),
        SocketAddr::V6(a) => match a.ip().to_ipv4_mapped() {
            Some(v4) => iface_of_v4(v4),
            None => iface_in_if_inet6(&read("/proc/net/if_inet6")?, a.ip(), a.scope_id()),
        },
    }
}

/// The interface that owns `addr` in the text of `/proc/net/if_inet6` (per line: the
/// address in hex, ifindex in hex, prefix length, scope, flags, name). A link-local
/// address may be on several: `scope_id` (its ifindex, 0 if none) picks one.
pub fn iface_in_if_inet6(text: &str, addr: &Ipv6Addr, scope_id: u32) -> Option<String> {
    let hex: String = addr.octets().iter().map(|b| format!("{b:02x}")).collect();
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 6 || !f[0].eq_ignore_ascii_case(&hex) {
            return None;
        }
        let index = u32::from_str_radix(f[1], 16).ok()?;
        (scope_id == 0 || index == scope_id).then(|| f[5].to_string())
    })
}

/// The interface that owns IPv4 address `ip` (`getifaddrs`).
fn iface_of_v4(ip: Ipv4Addr) -> Option<String> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list it allocated into `head`, freed below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return None;
    }
    let mut found = None;
    let mut p = head;
    while !p.is_null() && found.is_none() {
        // SAFETY: `p` is a node of the list getifaddrs made, alive until freeifaddrs; an
        // AF_INET address is a sockaddr_in, and the name a C string.
        unsafe {
            let ifa = &*p;
            let sa = ifa.ifa_addr;
            if !sa.is_null() && i32::from((*sa).sa_family) == libc::AF_INET {
                let sin = &*(sa as *const libc::sockaddr_in);
                if Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)) == ip {
                    found = Some(CStr::from_ptr(ifa.ifa_name).to_string_lossy().into_owned());
                }
            }
            p = ifa.ifa_next;
        }
    }
    // SAFETY: the list getifaddrs made, no longer used.
    unsafe { libc::freeifaddrs(head) };
    found
}

/// The interrupts so far of the device behind interface `iface` (see the module's
/// documentation); `None` if it has no device with MSI interrupts.
fn nic_irqs(iface: &str) -> Option<u64> {
    let dev = std::fs::canonicalize(format!("/sys/class/net/{iface}/device")).ok()?;
    let msi = msi_dir(&dev)?;
    let irqs: Vec<u32> = std::fs::read_dir(msi)
        .ok()?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    if irqs.is_empty() {
        return None;
    }
    interrupts_of(&read("/proc/interrupts")?, &irqs)
}

/// The first of `dev` and its parents in sysfs with an `msi_irqs/` directory.
fn msi_dir(dev: &Path) -> Option<PathBuf> {
    dev.ancestors()
        .take_while(|d| d.starts_with("/sys/devices") && *d != Path::new("/sys/devices"))
        .map(|d| d.join("msi_irqs"))
        .find(|d| d.is_dir())
}

/// The sum over every CPU of the counts of `irqs` in the text of `/proc/interrupts` (a
/// header of CPU names, then per IRQ `N: COUNT... CHIP ... NAME`); `None` if none of them
/// is there.
pub fn interrupts_of(text: &str, irqs: &[u32]) -> Option<u64> {
    let mut lines = text.lines();
    let cpus = lines.next()?.split_whitespace().count();
    let mut sum = None;
    for l in lines {
        let Some((label, counts)) = l.split_once(':') else {
            continue;
        };
        if !label.trim().parse().is_ok_and(|n: u32| irqs.contains(&n)) {
            continue;
        }
        let n: u64 = counts
            .split_whitespace()
            .take(cpus)
            .map_while(|w| w.parse::<u64>().ok())
            .sum();
        sum = Some(sum.unwrap_or(0) + n);
    }
    sum
}

/// Field `field` of group `group` (`Tcp`, `Udp`) in the text of `/proc/net/snmp`, where
/// each group is a line of names and a line of values, both starting `GROUP:`.
pub fn snmp_field(text: &str, group: &str, field: &str) -> Option<u64> {
    let prefix = format!("{group}:");
    let mut rows = text
        .lines()
        .filter(|l| l.split_whitespace().next() == Some(prefix.as_str()));
    let names = rows.next()?;
    let values = rows.next()?;
    let i = names.split_whitespace().position(|w| w == field)?;
    values.split_whitespace().nth(i)?.parse().ok()
}

/// Field `field` in the text of `/proc/net/snmp6` (a `NAME VALUE` line each).
pub fn snmp6_field(text: &str, field: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let mut w = l.split_whitespace();
        (w.next()? == field).then(|| w.next()?.parse().ok())?
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    const INTERRUPTS: &str = "           CPU0       CPU1
  24:          1          0  IO-APIC   5-edge      ACPI:Ged
  28:          0          0 PCI-MSIX-0000:00:01.0   0-edge      virtio0-config
  29:       1200         34 PCI-MSIX-0000:00:01.0   1-edge      virtio0-input.0
  30:         56        700 PCI-MSIX-0000:00:01.0   2-edge      virtio0-output.0
 NMI:          0          0   Non-maskable interrupts
 LOC:     123456     654321   Local timer interrupts
 ERR:          0
";

    #[test]
    fn interrupts_are_summed_over_cpus_and_irqs() {
        assert_eq!(interrupts_of(INTERRUPTS, &[28, 29, 30]), Some(1990));
        assert_eq!(interrupts_of(INTERRUPTS, &[29]), Some(1234));
        // The chip's numbers (`5-edge`, `1-edge`) are not counts.
        assert_eq!(interrupts_of(INTERRUPTS, &[24]), Some(1));
        // IRQs not listed: not counted as 0.
        assert_eq!(interrupts_of(INTERRUPTS, &[99]), None);
        assert_eq!(interrupts_of("", &[29]), None);
        // One CPU.
        let one = "           CPU0\n  40:         17   PCI-MSI 49152-edge      qpip\n";
        assert_eq!(interrupts_of(one, &[40]), Some(17));
    }

    const IF_INET6: &str = "\
fe8000000000000000fc00fffe000001 02 40 20 80     eth0
fe8000000000000000fc00fffe000001 03 40 20 80    qpip0
fd000000000000000000000000000202 02 40 00 80     eth0
fd000000000000000000000000000102 03 40 00 80    qpip0
00000000000000000000000000000001 01 80 10 80       lo
";

    #[test]
    fn the_interface_of_an_ipv6_address() {
        let a = |s: &str| s.parse::<Ipv6Addr>().unwrap();
        let of = |s, scope| iface_in_if_inet6(IF_INET6, &a(s), scope);
        assert_eq!(of("fd00::202", 0).as_deref(), Some("eth0"));
        assert_eq!(of("fd00::102", 0).as_deref(), Some("qpip0"));
        assert_eq!(of("::1", 0).as_deref(), Some("lo"));
        assert_eq!(of("fd00::303", 0), None);
        // The same link-local address on two interfaces: the scope picks.
        assert_eq!(of("fe80::fc:ff:fe00:1", 3).as_deref(), Some("qpip0"));
        assert_eq!(of("fe80::fc:ff:fe00:1", 2).as_deref(), Some("eth0"));
        assert_eq!(of("fe80::fc:ff:fe00:1", 9), None);
    }

    const SNMP: &str = "\
Ip: Forwarding DefaultTTL InReceives
Ip: 1 64 3000
Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets CurrEstab InSegs OutSegs RetransSegs InErrs OutRsts InCsumErrors
Tcp: 1 200 120000 -1 52 41 1 5 0 1379066 1337422 371 0 3172 0
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
Udp: 900 3 0 812 0 0 0 0 0
UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
UdpLite: 0 0 0 7 0 0 0 0 0
";

    #[test]
    fn snmp_fields_by_group_and_name() {
        assert_eq!(snmp_field(SNMP, "Tcp", "OutSegs"), Some(1337422));
        assert_eq!(snmp_field(SNMP, "Udp", "OutDatagrams"), Some(812));
        assert_eq!(snmp_field(SNMP, "UdpLite", "OutDatagrams"), Some(7));
        // A signed field, an unknown one, an unknown group.
        assert_eq!(snmp_field(SNMP, "Tcp", "MaxConn"), None);
        assert_eq!(snmp_field(SNMP, "Tcp", "Nope"), None);
        assert_eq!(snmp_field(SNMP, "Icmp", "OutMsgs"), None);
        let snmp6 =
            "Udp6InDatagrams                 \t1000\nUdp6OutDatagrams                \t903822\n";
        assert_eq!(snmp6_field(snmp6, "Udp6OutDatagrams"), Some(903822));
        assert_eq!(snmp6_field(snmp6, "Udp6"), None);
    }

    #[test]
    fn loopback_has_no_nic_but_still_counts_what_is_sent() {
        let lo = SocketAddr::from((Ipv6Addr::LOCALHOST, 5201));
        assert_eq!(iface_of(lo).as_deref(), Some("lo"));
        assert_eq!(nic_irqs("lo"), None);
        let c = take(Some(lo), true).expect("/proc/net/snmp");
        assert_eq!(c.get("nic_irqs"), None);
        assert!(c.get("tcp_segs_out").is_some());
        let c = take(Some(lo), false).unwrap();
        assert!(c.get("udp_tx").is_some() && c.get("tcp_segs_out").is_none());
        // IPv4 through getifaddrs, also as an IPv4-mapped address.
        let lo4 = SocketAddr::from((Ipv4Addr::LOCALHOST, 5201));
        assert_eq!(iface_of(lo4).as_deref(), Some("lo"));
        let mapped = SocketAddrV6::new(Ipv4Addr::LOCALHOST.to_ipv6_mapped(), 1, 0, 0);
        assert_eq!(iface_of(SocketAddr::V6(mapped)).as_deref(), Some("lo"));
        // A UDP socket bound to any address leaves from the one that reaches the peer.
        let any = SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0));
        let peer = SocketAddrV6::new(Ipv6Addr::LOCALHOST, 5201, 0, 0);
        assert_eq!(
            udp_local(any, Some(peer)).map(|a| a.ip()),
            Some(IpAddr::V6(Ipv6Addr::LOCALHOST))
        );
        assert_eq!(udp_local(any, None), None);
        assert_eq!(udp_local(lo, None), Some(lo));
    }
}
