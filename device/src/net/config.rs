//! Settings of the network layer and the parsing of their command-line forms.

use std::net::Ipv6Addr;
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
    /// Configured addresses with their prefix length (the link-local one is implied).
    pub addrs: Vec<(Ipv6Addr, u8)>,
    pub mtu: usize,
    /// Static neighbour entries (`--neighbor`): never expire, never overridden by NDP.
    pub neighbors: Vec<StaticNeighbor>,
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

/// `--neighbor ADDR=MAC`: a static neighbour cache entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StaticNeighbor {
    pub addr: Ipv6Addr,
    pub mac: Mac,
}

impl FromStr for StaticNeighbor {
    type Err = String;
    fn from_str(s: &str) -> Result<StaticNeighbor, String> {
        let (a, m) = s
            .split_once('=')
            .ok_or_else(|| format!("neighbor '{s}' is not ADDR=MAC"))?;
        let addr: Ipv6Addr = a
            .parse()
            .map_err(|_| format!("neighbor '{s}': '{a}' is not an IPv6 address"))?;
        if addr.is_multicast() || addr.is_unspecified() || addr.is_loopback() {
            return Err(format!("neighbor '{s}': {addr} is not a unicast address"));
        }
        let mac = parse_mac(m).map_err(|e| format!("neighbor '{s}': {e}"))?;
        Ok(StaticNeighbor { addr, mac })
    }
}

impl std::fmt::Display for StaticNeighbor {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "{}={}", self.addr, MacDisplay(&self.mac))
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
    }
}
