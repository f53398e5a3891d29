//! Settings of the network layer and the parsing of their command-line forms.

use std::net::{IpAddr, Ipv6Addr};
use std::str::FromStr;

use super::wire::{parse_mac, Mac, MacDisplay};

/// Smallest and largest MTU (`--mtu`): IPv6's minimum link MTU, and jumbo frames.
pub const MIN_MTU: usize = 1280;
pub const MAX_MTU: usize = 9000;
pub const DEFAULT_MTU: usize = 1500;

/// Everything the stack needs to start.
#[derive(Debug, Clone)]
pub struct NetConfig {
    pub mac: Mac,
    /// Configured addresses with their prefix length (the link-local one is implied). An
    /// IPv4 address is in its mapped form, its prefix length counted over the 128 bits
    /// (198.18.0.2/24 is `::ffff:198.18.0.2`/120).
    pub addrs: Vec<(Ipv6Addr, u8)>,
    pub mtu: usize,
    /// Static neighbour entries (`--neighbor`): never expire, never overridden by NDP.
    pub neighbors: Vec<StaticNeighbor>,
    /// Routes to destinations off the link (`--route`).
    pub routes: Vec<super::route::Route>,
    /// Seed for fragment identifiers and reachability jitter; None takes one from the
    /// clock (tests fix it).
    pub seed: Option<u64>,
    /// Multicast neighbour solicitations before resolving an address fails
    /// (`--ndp-solicit`; RFC 4861's MAX_MULTICAST_SOLICIT, 3, by default).
    pub ndp_solicits: u8,
    /// Whether there is a link (`--net`). Without one the stack reaches only the device's
    /// own addresses, through its loopback: every other destination has no route, and
    /// nothing is sent for address detection.
    pub link: bool,
}

impl NetConfig {
    pub fn new(mac: Mac) -> NetConfig {
        NetConfig {
            mac,
            addrs: Vec::new(),
            mtu: DEFAULT_MTU,
            neighbors: Vec::new(),
            routes: Vec::new(),
            seed: None,
            ndp_solicits: super::neighbor::MAX_MULTICAST_SOLICIT,
            link: true,
        }
    }
}

/// `--mtu N`: 1280..=9000.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mtu(pub usize);

impl FromStr for Mtu {
    type Err = String;
    fn from_str(s: &str) -> Result<Mtu, String> {
        let n: usize = s
            .parse()
            .map_err(|_| format!("MTU '{s}' is not a number"))?;
        if !(MIN_MTU..=MAX_MTU).contains(&n) {
            return Err(format!("MTU {n} is outside {MIN_MTU}..={MAX_MTU}"));
        }
        Ok(Mtu(n))
    }
}

/// An address of either family as the stack keeps it: IPv6, or IPv4 in its mapped form
/// (`198.18.0.1` is `::ffff:198.18.0.1`). `what` names it in the error.
pub fn parse_ip(s: &str, what: &str) -> Result<Ipv6Addr, String> {
    match s.parse::<IpAddr>() {
        Ok(IpAddr::V6(a)) => Ok(a),
        Ok(IpAddr::V4(a)) => Ok(a.to_ipv6_mapped()),
        Err(_) => Err(format!("{what}'{s}' is not an IPv6 or IPv4 address")),
    }
}

/// `--ip ADDR/PLEN`: an address of the device with its prefix length, IPv6
/// (`fd51:5050::1:1/64`, 1..=128) or IPv4 (`198.18.0.2/24`, 1..=32, kept mapped with the
/// length counted over 128 bits). Any unicast address a host may have.
pub fn parse_address(s: &str) -> Result<(Ipv6Addr, u8), String> {
    let (a, p) = s.split_once('/').ok_or_else(|| {
        format!("'{s}' needs a prefix length, like fd51:5050::1:1/64 or 198.18.0.2/24")
    })?;
    let ip: IpAddr = a
        .parse()
        .map_err(|_| format!("'{a}' is not an IPv6 or IPv4 address"))?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let plen: u8 = p
        .parse()
        .ok()
        .filter(|n| (1..=max).contains(n))
        .ok_or_else(|| format!("prefix length '{p}' is not 1..{max}"))?;
    let bad = ip.is_unspecified()
        || ip.is_multicast()
        || ip.is_loopback()
        || matches!(ip, IpAddr::V4(v) if v.is_broadcast());
    if bad {
        return Err(format!("'{a}' is not a unicast address a device can have"));
    }
    Ok(match ip {
        IpAddr::V6(v) => (v, plen),
        IpAddr::V4(v) => (v.to_ipv6_mapped(), plen + 96),
    })
}

/// A static neighbour cache entry (IPv6 or IPv4): `--neighbor ADDR=MAC`, or
/// `ADMIN_OP_ADD_NEIGH`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StaticNeighbor {
    pub addr: Ipv6Addr,
    pub mac: Mac,
}

impl StaticNeighbor {
    /// Whether `addr` may have a neighbour entry: a unicast address, not loopback (an
    /// IPv4 one in its mapped form, not broadcast).
    pub fn addr_ok(addr: &Ipv6Addr) -> bool {
        let v4_bad = addr.to_ipv4_mapped().is_some_and(|v| {
            v.is_unspecified() || v.is_broadcast() || v.is_multicast() || v.is_loopback()
        });
        !(addr.is_multicast() || addr.is_unspecified() || addr.is_loopback() || v4_bad)
    }

    /// Whether `mac` may be a neighbour's: unicast, not all zeros.
    pub fn mac_ok(mac: &Mac) -> bool {
        mac[0] & 1 == 0 && *mac != [0; 6]
    }
}

impl FromStr for StaticNeighbor {
    type Err = String;
    fn from_str(s: &str) -> Result<StaticNeighbor, String> {
        let (a, m) = s
            .split_once('=')
            .ok_or_else(|| format!("neighbor '{s}' is not ADDR=MAC"))?;
        let addr = parse_ip(a, &format!("neighbor '{s}': "))?;
        if !StaticNeighbor::addr_ok(&addr) {
            return Err(format!("neighbor '{s}': {addr} is not a unicast address"));
        }
        let mac = parse_mac(m).map_err(|e| format!("neighbor '{s}': {e}"))?;
        Ok(StaticNeighbor { addr, mac })
    }
}

impl std::fmt::Display for StaticNeighbor {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self.addr.to_ipv4_mapped() {
            Some(v4) => write!(f, "{v4}={}", MacDisplay(&self.mac)),
            None => write!(f, "{}={}", self.addr, MacDisplay(&self.mac)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtu() {
        assert_eq!("1500".parse::<Mtu>(), Ok(Mtu(1500)));
        assert_eq!("9000".parse::<Mtu>(), Ok(Mtu(9000)));
        assert_eq!("1280".parse::<Mtu>(), Ok(Mtu(1280)));
        assert_eq!(
            "1279".parse::<Mtu>().unwrap_err(),
            "MTU 1279 is outside 1280..=9000"
        );
        assert!("9001".parse::<Mtu>().is_err());
        assert!("x".parse::<Mtu>().is_err());
    }

    #[test]
    fn neighbor() {
        let n: StaticNeighbor = "fd51:5050::1=02:00:00:00:00:05".parse().unwrap();
        assert_eq!(n.mac, [2, 0, 0, 0, 0, 5]);
        assert_eq!(n.to_string(), "fd51:5050::1=02:00:00:00:00:05");
        assert!("fd51:5050::1".parse::<StaticNeighbor>().is_err());
        assert!("ff02::1=02:00:00:00:00:05"
            .parse::<StaticNeighbor>()
            .is_err());
        assert!("fd51::1=01:00:00:00:00:05"
            .parse::<StaticNeighbor>()
            .is_err());
        assert!("nope=02:00:00:00:00:05".parse::<StaticNeighbor>().is_err());
        let v4: StaticNeighbor = "198.18.0.1=02:00:00:00:00:05".parse().unwrap();
        assert_eq!(v4.addr, "::ffff:198.18.0.1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(v4.to_string(), "198.18.0.1=02:00:00:00:00:05");
        for bad in ["255.255.255.255", "224.0.0.1", "0.0.0.0", "127.0.0.1"] {
            assert!(format!("{bad}=02:00:00:00:00:05")
                .parse::<StaticNeighbor>()
                .is_err());
        }
    }

    #[test]
    fn addresses() {
        let v6 = |s: &str| s.parse::<Ipv6Addr>().unwrap();
        assert_eq!(
            parse_address("fd51:5050::1:1/64"),
            Ok((v6("fd51:5050::1:1"), 64))
        );
        assert_eq!(
            parse_address("198.18.0.2/24"),
            Ok((v6("::ffff:198.18.0.2"), 120))
        );
        assert_eq!(
            parse_address("10.0.0.1/32"),
            Ok((v6("::ffff:10.0.0.1"), 128))
        );
        assert_eq!(
            parse_address("198.18.0.2").unwrap_err(),
            "'198.18.0.2' needs a prefix length, like fd51:5050::1:1/64 or 198.18.0.2/24"
        );
        assert_eq!(
            parse_address("198.18.0.2/33").unwrap_err(),
            "prefix length '33' is not 1..32"
        );
        assert_eq!(
            parse_address("fd51::1/129").unwrap_err(),
            "prefix length '129' is not 1..128"
        );
        assert_eq!(
            parse_address("198.18.0/24").unwrap_err(),
            "'198.18.0' is not an IPv6 or IPv4 address"
        );
        for bad in [
            "0.0.0.0/8",
            "224.0.0.1/4",
            "127.0.0.1/8",
            "255.255.255.255/32",
            "::1/128",
        ] {
            assert!(
                parse_address(bad)
                    .unwrap_err()
                    .ends_with("is not a unicast address a device can have"),
                "{bad}"
            );
        }
    }
}
