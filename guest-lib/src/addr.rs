//! Addresses as the tools take them on their command lines.

use std::io;
use std::net::{Ipv6Addr, SocketAddr, SocketAddrV6, ToSocketAddrs};

/// `addr` (an IPv6 or IPv4 address, an IPv6 one bracketed or not, or a name) with `port`
/// as an IPv6 socket address: an IPv4 address is its IPv4-mapped form (`::ffff:a.b.c.d`),
/// as dual-stack sockets show it and as the API takes it; a name resolves to its first IPv6
/// address, else to its first IPv4 address, mapped.
pub fn resolve_addr(addr: &str, port: u16) -> io::Result<SocketAddrV6> {
    let bare = addr.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = bare.parse::<Ipv6Addr>() {
        return Ok(SocketAddrV6::new(ip, port, 0, 0));
    }
    let mut v4 = None;
    for sa in (bare, port).to_socket_addrs()? {
        match sa {
            SocketAddr::V6(v6) => return Ok(v6),
            SocketAddr::V4(v) => v4 = v4.or(Some(v)),
        }
    }
    v4.map(|v| SocketAddrV6::new(v.ip().to_ipv6_mapped(), port, 0, 0))
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no address"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_brackets_and_ipv4_names() {
        let want = SocketAddrV6::new("fd51:5050::1".parse().unwrap(), 7, 0, 0);
        assert_eq!(resolve_addr("fd51:5050::1", 7).unwrap(), want);
        assert_eq!(resolve_addr("[fd51:5050::1]", 7).unwrap(), want);
        let v4 = resolve_addr("127.0.0.1", 9).unwrap();
        assert_eq!(*v4.ip(), "::ffff:127.0.0.1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(v4.port(), 9);
        assert!(resolve_addr("no such host.invalid", 9).is_err());
    }
}
