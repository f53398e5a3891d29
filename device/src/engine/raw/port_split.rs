//! The port split on the raw QP's sends: a TCP segment or UDP datagram the guest kernel
//! sends from a port a QP or listener of the function holds never reaches the link.
//!
//! Why: the device steers what arrives for a port a QP or listener holds to its engine
//! ([`crate::engine::ports`]), and the guest driver holds a kernel socket on each such
//! port, so no kernel socket owns it. A frame the kernel still sends from one is stale (a
//! socket's last segments after the port changed hands) or forged (a raw socket), and would
//! land in the QP's connection or flow at the peer: the device drops it, as a NIC's filter
//! drops what its host may not send, and counts it (`STAT_RAW_TX_PORT_HELD`). The WR
//! completes SUCCESS: the frame was well-formed and the function's own, and what a filter
//! does with it is no error of the sender's (an error would count a driver's `tx_errors`
//! for every frame of a port the kernel lost a moment ago).
//!
//! What is looked at: TCP and UDP over IPv4, and over IPv6 behind the extension headers a
//! receiver walks (hop-by-hop, routing, destination options, fragment), from a specified
//! source. The identity check comes first, so a specified source is one of the function's
//! addresses; the unspecified one (DHCP's client, address probes) names no port of its
//! own. An IP fragment other than the first carries no ports and passes: without its first
//! fragment, dropped here, the datagram is never reassembled at the peer (a later fragment
//! starts at least 8 bytes in, past the ports, so it cannot rewrite them either). The cost
//! is a parse of the headers and one lookup in the port tables the steering uses.

use super::Engine;
use crate::engine::ports::Proto;
use crate::net::wire::{proto, ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETH_LEN, FRAG_LEN, IPV6_LEN};

/// The transport and source port of a TCP segment or UDP datagram `frame` carries from a
/// specified source address; `None` for anything else, or a frame too short to say.
pub fn source_port(frame: &[u8]) -> Option<(Proto, u16)> {
    let ethertype = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
    let ip = &frame[ETH_LEN..];
    let (next, l4) = match ethertype {
        ETHERTYPE_IPV4 => ipv4_upper(ip)?,
        ETHERTYPE_IPV6 => ipv6_upper(ip)?,
        _ => return None,
    };
    let transport = match next {
        proto::TCP => Proto::Tcp,
        proto::UDP => Proto::Udp,
        _ => return None,
    };
    let port = l4.get(..2)?;
    Some((transport, u16::from_be_bytes([port[0], port[1]])))
}

/// An IPv4 packet's protocol and what follows its header, unless its source is
/// unspecified or it is a fragment other than the first.
fn ipv4_upper(ip: &[u8]) -> Option<(u8, &[u8])> {
    let vihl = *ip.first()?;
    let ihl = (vihl & 0x0f) as usize * 4;
    if vihl >> 4 != 4 || ihl < 20 || ip.len() < ihl {
        return None;
    }
    let offset = u16::from_be_bytes([ip[6], ip[7]]) & 0x1fff;
    if offset != 0 || ip[12..16] == [0; 4] {
        return None;
    }
    Some((ip[9], &ip[ihl..]))
}

/// An IPv6 packet's upper-layer protocol and header, its extension headers walked (RFC 8200
/// §4), unless its source is unspecified or it is a fragment other than the first. Each
/// header moves at least 8 bytes on, so the walk ends within the frame.
fn ipv6_upper(ip: &[u8]) -> Option<(u8, &[u8])> {
    if ip.len() < IPV6_LEN || ip[0] >> 4 != 6 || ip[8..24] == [0; 16] {
        return None;
    }
    let mut next = ip[6];
    let mut at = IPV6_LEN;
    loop {
        let h = ip.get(at..at + 8)?;
        match next {
            proto::HOP_BY_HOP | proto::ROUTING | proto::DEST_OPTS => {
                next = h[0];
                at += (h[1] as usize + 1) * 8;
            }
            proto::FRAGMENT => {
                if u16::from_be_bytes([h[2], h[3]]) >> 3 != 0 {
                    return None;
                }
                next = h[0];
                at += FRAG_LEN;
            }
            _ => return Some((next, &ip[at..])),
        }
    }
}

impl Engine {
    /// Whether the raw QP's `frame` (which passed the identity check) is a TCP segment or
    /// UDP datagram from a port a QP or listener of the function holds for its protocol.
    pub(super) fn raw_from_held_port(&self, frame: &[u8]) -> bool {
        source_port(frame).is_some_and(|(proto, port)| self.objects.ports().taken(proto, port))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(ethertype: u16, ip: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; ETH_LEN];
        f[12..14].copy_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(ip);
        f
    }

    fn ipv4(protocol: u8, src: [u8; 4], frag: u16, l4: &[u8]) -> Vec<u8> {
        let mut ip = vec![0u8; 20];
        ip[0] = 0x45;
        ip[6..8].copy_from_slice(&frag.to_be_bytes());
        ip[9] = protocol;
        ip[12..16].copy_from_slice(&src);
        ip.extend_from_slice(l4);
        frame(ETHERTYPE_IPV4, &ip)
    }

    /// An IPv6 packet from `src` whose header chain is `chain` (each a next-header value
    /// and the header's bytes), then `l4`.
    fn ipv6(src: [u8; 16], first: u8, chain: &[&[u8]], l4: &[u8]) -> Vec<u8> {
        let mut ip = vec![0u8; IPV6_LEN];
        ip[0] = 0x60;
        ip[6] = first;
        ip[8..24].copy_from_slice(&src);
        for h in chain {
            ip.extend_from_slice(h);
        }
        ip.extend_from_slice(l4);
        frame(ETHERTYPE_IPV6, &ip)
    }

    const PORTS: [u8; 8] = [0x1f, 0x90, 0x30, 0x39, 0, 0, 0, 0];
    const SRC6: [u8; 16] = [0xfd, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];

    #[test]
    fn tcp_and_udp_over_ipv4_name_their_source_port() {
        let src = [10, 7, 0, 1];
        assert_eq!(
            source_port(&ipv4(6, src, 0, &PORTS)),
            Some((Proto::Tcp, 8080))
        );
        assert_eq!(
            source_port(&ipv4(17, src, 0x2000, &PORTS)),
            Some((Proto::Udp, 8080)),
            "a first fragment carries the ports"
        );
        assert_eq!(
            source_port(&ipv4(17, src, 0x2001, &PORTS)),
            None,
            "a later fragment carries none"
        );
        assert_eq!(source_port(&ipv4(1, src, 0, &PORTS)), None, "ICMP");
        assert_eq!(
            source_port(&ipv4(17, [0; 4], 0, &PORTS)),
            None,
            "from the unspecified address (DHCP)"
        );
        assert_eq!(source_port(&ipv4(6, src, 0, &[0x1f])), None, "truncated");
    }

    #[test]
    fn over_ipv6_the_extension_headers_are_walked_to_the_ports() {
        assert_eq!(
            source_port(&ipv6(SRC6, 17, &[], &PORTS)),
            Some((Proto::Udp, 8080))
        );
        let hop = [proto::DEST_OPTS, 0, 1, 4, 0, 0, 0, 0];
        let dest = [
            proto::FRAGMENT,
            1,
            1,
            12,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
        ];
        let first_fragment = [proto::TCP, 0, 0, 1, 0, 0, 0, 9];
        assert_eq!(
            source_port(&ipv6(
                SRC6,
                proto::HOP_BY_HOP,
                &[&hop, &dest, &first_fragment],
                &PORTS
            )),
            Some((Proto::Tcp, 8080)),
            "behind hop-by-hop, destination options and a first fragment"
        );
        let later_fragment = [proto::TCP, 0, 0, 8, 0, 0, 0, 9];
        assert_eq!(
            source_port(&ipv6(SRC6, proto::FRAGMENT, &[&later_fragment], &PORTS)),
            None
        );
        assert_eq!(
            source_port(&ipv6([0; 16], 17, &[], &PORTS)),
            None,
            "from ::"
        );
        assert_eq!(source_port(&ipv6(SRC6, 58, &[], &PORTS)), None, "ICMPv6");
        let long = [proto::TCP, 200, 0, 0, 0, 0, 0, 0];
        assert_eq!(
            source_port(&ipv6(SRC6, proto::DEST_OPTS, &[&long], &PORTS)),
            None,
            "a header longer than the frame"
        );
    }

    #[test]
    fn frames_too_short_or_not_ip_name_no_port() {
        assert_eq!(source_port(&[]), None);
        assert_eq!(source_port(&frame(0x0806, &[0; 28])), None);
        assert_eq!(source_port(&frame(ETHERTYPE_IPV4, &[0x45, 0])), None);
        assert_eq!(source_port(&frame(ETHERTYPE_IPV6, &[0x60; 39])), None);
    }
}
