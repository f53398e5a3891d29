//! IPv4 (RFC 791), ICMPv4 (RFC 792) and ARP (RFC 826) formats, on `etherparse`'s headers.
//! Addresses come and go in their IPv4-mapped form, as everywhere above the wire.

use std::net::{Ipv4Addr, Ipv6Addr};

use etherparse::{ArpEthIpv4Packet, ArpHardwareId, ArpOperation, ArpPacket, EtherType, IpNumber};

use super::{ipv4_of, mapped, Mac, ParseError, ETHERTYPE_ARP, ETHERTYPE_IPV4, ETH_LEN, IPV4_LEN};

/// ICMPv4 message types and codes the stack uses (RFC 792, RFC 1191).
pub mod icmp4 {
    pub const ECHO_REPLY: u8 = 0;
    pub const DEST_UNREACHABLE: u8 = 3;
    pub const ECHO_REQUEST: u8 = 8;
    pub const TIME_EXCEEDED: u8 = 11;
    pub const PARAM_PROBLEM: u8 = 12;

    /// Destination unreachable codes.
    pub const UNREACH_PROTOCOL: u8 = 2;
    pub const UNREACH_PORT: u8 = 3;
    pub const UNREACH_FRAG_NEEDED: u8 = 4;
    /// Time exceeded codes.
    pub const TIME_EXCEEDED_REASSEMBLY: u8 = 1;

    /// Whether a type is an error (never answered with another error: RFC 1122 §3.2.2).
    pub fn is_error(ty: u8) -> bool {
        matches!(ty, 3 | 4 | 5 | 11 | 12)
    }
}

/// The protocol number of ICMPv4.
pub const PROTO_ICMPV4: u8 = 1;

/// The fields of an IPv4 header the stack sets: besides them version 4, IHL 5 (no options),
/// TOS 0.
#[derive(Debug, Clone, Copy)]
pub struct Ipv4Fields {
    pub protocol: u8,
    pub ttl: u8,
    pub id: u16,
    pub dont_fragment: bool,
    /// In bytes (a multiple of 8).
    pub offset: usize,
    pub more: bool,
}

impl Ipv4Fields {
    /// A whole packet: not a fragment.
    pub fn whole(protocol: u8, ttl: u8, id: u16, dont_fragment: bool) -> Ipv4Fields {
        Ipv4Fields {
            protocol,
            ttl,
            id,
            dont_fragment,
            offset: 0,
            more: false,
        }
    }
}

fn ipv4_header(src: &Ipv4Addr, dst: &Ipv4Addr, f: &Ipv4Fields, len: usize) -> [u8; IPV4_LEN] {
    let mut h = etherparse::Ipv4Header::new(
        len as u16,
        f.ttl,
        IpNumber(f.protocol),
        src.octets(),
        dst.octets(),
    )
    .expect("length checked by the caller");
    h.identification = f.id;
    h.dont_fragment = f.dont_fragment;
    h.more_fragments = f.more;
    h.fragment_offset =
        etherparse::IpFragOffset::try_new((f.offset / 8) as u16).expect("offset checked");
    h.header_checksum = h.calc_header_checksum();
    h.to_bytes()[..].try_into().expect("no options: 20 bytes")
}

/// A frame buffer holding `[Ethernet (left blank)][IPv4 header][upper-layer bytes]`, from
/// and to IPv4-mapped addresses. `upper` must fit the total length's 16 bits.
pub fn ipv4_packet(src: &Ipv6Addr, dst: &Ipv6Addr, f: &Ipv4Fields, upper: &[u8]) -> Vec<u8> {
    debug_assert!(IPV4_LEN + upper.len() <= u16::MAX as usize);
    debug_assert!(f.offset.is_multiple_of(8) && f.offset / 8 <= 0x1fff);
    let (s, d) = (
        ipv4_of(src).unwrap_or(Ipv4Addr::UNSPECIFIED),
        ipv4_of(dst).unwrap_or(Ipv4Addr::UNSPECIFIED),
    );
    let mut out = Vec::with_capacity(ETH_LEN + IPV4_LEN + upper.len());
    out.extend_from_slice(&[0u8; ETH_LEN]);
    out.extend_from_slice(&ipv4_header(&s, &d, f, upper.len()));
    out.extend_from_slice(upper);
    out
}

/// An ICMPv4 message: type, code, checksum (over the message only), then `body` (whose
/// first 4 bytes are the type-specific word).
pub fn icmpv4(ty: u8, code: u8, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&[ty, code, 0, 0]);
    out.extend_from_slice(body);
    let sum = !super::super::checksum::sum(0, &out);
    out[2..4].copy_from_slice(&sum.to_be_bytes());
    out
}

/// A received IPv4 packet whose header passed RFC 1122 §3.2.1's checks: version 4, IHL at
/// least 5, header checksum right, total length within the frame (link padding after it is
/// cut off).
#[derive(Debug)]
pub struct Ipv4Packet<'a> {
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    pub protocol: u8,
    pub ttl: u8,
    pub id: u16,
    pub dont_fragment: bool,
    pub more: bool,
    /// In bytes.
    pub offset: usize,
    /// The header's length, options included (options are skipped, not acted on).
    pub header_len: usize,
    /// The whole packet, header included, trimmed to its total length.
    pub packet: &'a [u8],
}

impl<'a> Ipv4Packet<'a> {
    pub fn payload(&self) -> &'a [u8] {
        &self.packet[self.header_len..]
    }

    /// Whether it is a fragment rather than a whole packet.
    pub fn is_fragment(&self) -> bool {
        self.more || self.offset != 0
    }
}

pub fn parse_ipv4(bytes: &[u8]) -> Result<Ipv4Packet<'_>, ParseError> {
    use etherparse::err::ipv4::HeaderSliceError;
    let h = match etherparse::Ipv4HeaderSlice::from_slice(bytes) {
        Ok(h) => h,
        Err(HeaderSliceError::Len(_)) => return Err(ParseError::Truncated),
        Err(HeaderSliceError::Content(_)) => return Err(ParseError::Invalid),
    };
    let header_len = h.slice().len();
    let total = h.total_len() as usize;
    if total < header_len {
        return Err(ParseError::Invalid);
    }
    if total > bytes.len() {
        return Err(ParseError::Truncated);
    }
    // A header sums to zero with its checksum field in (RFC 1071).
    if super::super::checksum::sum(0, h.slice()) != 0xffff {
        return Err(ParseError::Checksum);
    }
    Ok(Ipv4Packet {
        src: mapped(h.source_addr()),
        dst: mapped(h.destination_addr()),
        protocol: h.protocol().0,
        ttl: h.ttl(),
        id: h.identification(),
        dont_fragment: h.dont_fragment(),
        more: h.more_fragments(),
        offset: h.fragments_offset().value() as usize * 8,
        header_len,
        packet: &bytes[..total],
    })
}

/// An ICMPv4 message: type, code, the 4-byte word and what follows, checksum verified.
pub struct Icmpv4Message<'a> {
    pub ty: u8,
    pub code: u8,
    pub word: [u8; 4],
    pub body: &'a [u8],
}

/// Parses an ICMPv4 message (at least 8 bytes) and checks its checksum.
pub fn parse_icmpv4(msg: &[u8]) -> Result<Icmpv4Message<'_>, ParseError> {
    if msg.len() < 8 {
        return Err(ParseError::Truncated);
    }
    if super::super::checksum::sum(0, msg) != 0xffff {
        return Err(ParseError::Checksum);
    }
    Ok(Icmpv4Message {
        ty: msg[0],
        code: msg[1],
        word: msg[4..8].try_into().expect("8 bytes"),
        body: &msg[8..],
    })
}

/// Source and destination of the IPv4 packet an ICMPv4 error quotes (its header and 8
/// bytes of its data, RFC 792), mapped; the header must be whole.
pub fn parse_quoted_ipv4(body: &[u8]) -> Result<(Ipv6Addr, Ipv6Addr, u8), ParseError> {
    if body.len() < IPV4_LEN {
        return Err(ParseError::Truncated);
    }
    if body[0] >> 4 != 4 || (body[0] & 0xf) < 5 {
        return Err(ParseError::Invalid);
    }
    let a = |at: usize| {
        mapped(Ipv4Addr::from(
            <[u8; 4]>::try_from(&body[at..at + 4]).expect("4"),
        ))
    };
    Ok((a(12), a(16), body[9]))
}

/// An ARP message for IPv4 over Ethernet, addresses mapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arp {
    /// True for a request, false for a reply.
    pub request: bool,
    pub sender_mac: Mac,
    pub sender_ip: Ipv6Addr,
    pub target_mac: Mac,
    pub target_ip: Ipv6Addr,
}

/// Parses an ARP message; only Ethernet/IPv4 requests and replies are valid.
pub fn parse_arp(bytes: &[u8]) -> Result<Arp, ParseError> {
    let p = ArpPacket::from_slice(bytes).map_err(|_| ParseError::Truncated)?;
    let p = p.try_eth_ipv4().map_err(|_| ParseError::Invalid)?;
    let request = match p.operation {
        ArpOperation::REQUEST => true,
        ArpOperation::REPLY => false,
        _ => return Err(ParseError::Invalid),
    };
    Ok(Arp {
        request,
        sender_mac: p.sender_mac,
        sender_ip: mapped(p.sender_ipv4_addr()),
        target_mac: p.target_mac,
        target_ip: mapped(p.target_ipv4_addr()),
    })
}

/// A whole ARP frame (Ethernet header written: to `eth_dst`, from the sender's MAC).
pub fn arp_frame(m: &Arp, eth_dst: &Mac) -> Vec<u8> {
    let v4 = |a: &Ipv6Addr| ipv4_of(a).unwrap_or(Ipv4Addr::UNSPECIFIED).octets();
    let p: ArpPacket = ArpEthIpv4Packet {
        operation: if m.request {
            ArpOperation::REQUEST
        } else {
            ArpOperation::REPLY
        },
        sender_mac: m.sender_mac,
        sender_ipv4: v4(&m.sender_ip),
        target_mac: m.target_mac,
        target_ipv4: v4(&m.target_ip),
    }
    .into();
    debug_assert_eq!(p.hw_addr_type, ArpHardwareId::ETHERNET);
    debug_assert_eq!(p.proto_addr_type, EtherType::IPV4);
    let mut f = Vec::with_capacity(ETH_LEN + super::ARP_LEN);
    f.extend_from_slice(eth_dst);
    f.extend_from_slice(&m.sender_mac);
    f.extend_from_slice(&ETHERTYPE_ARP.to_be_bytes());
    f.extend_from_slice(&p.to_bytes());
    f
}

/// Whether a frame's ethertype is IPv4's (for the few places that look at raw frames).
pub fn is_ipv4_frame(frame: &[u8]) -> bool {
    frame.len() >= ETH_LEN && u16::from_be_bytes([frame[12], frame[13]]) == ETHERTYPE_IPV4
}

#[cfg(test)]
mod tests {
    use super::*;
    use smoltcp::phy::ChecksumCapabilities;
    use smoltcp::wire as sm;

    const S: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
    const D: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);

    #[test]
    fn ipv4_packets_round_trip_through_smoltcp() {
        let f = Ipv4Fields {
            protocol: 17,
            ttl: 33,
            id: 0xbeef,
            dont_fragment: false,
            offset: 1480,
            more: true,
        };
        let frame = ipv4_packet(&mapped(S), &mapped(D), &f, &[9u8; 24]);
        let p = sm::Ipv4Packet::new_checked(&frame[ETH_LEN..]).unwrap();
        assert!(p.verify_checksum());
        assert_eq!((p.src_addr(), p.dst_addr()), (S, D));
        assert_eq!((p.ident(), p.hop_limit(), p.total_len()), (0xbeef, 33, 44));
        assert_eq!(
            (p.more_frags(), p.dont_frag(), p.frag_offset()),
            (true, false, 1480)
        );
        // And ours reads smoltcp's.
        let mut buf = vec![0u8; 20 + 5];
        let mut q = sm::Ipv4Packet::new_unchecked(&mut buf[..]);
        sm::Ipv4Repr {
            src_addr: S,
            dst_addr: D,
            next_header: sm::IpProtocol::Tcp,
            payload_len: 5,
            hop_limit: 64,
        }
        .emit(&mut q, &ChecksumCapabilities::default());
        buf.extend_from_slice(&[0; 6]); // link padding
        let ip = parse_ipv4(&buf).unwrap();
        assert_eq!((ip.src, ip.dst), (mapped(S), mapped(D)));
        assert_eq!(
            (ip.protocol, ip.dont_fragment, ip.is_fragment()),
            (6, true, false)
        );
        assert_eq!(ip.payload().len(), 5);
        let mut bad = buf.clone();
        bad[8] ^= 1;
        assert_eq!(parse_ipv4(&bad).unwrap_err(), ParseError::Checksum);
        assert_eq!(parse_ipv4(&buf[..19]).unwrap_err(), ParseError::Truncated);
        let mut v6 = buf.clone();
        v6[0] = 0x65;
        assert_eq!(parse_ipv4(&v6).unwrap_err(), ParseError::Invalid);
        let mut short_total = buf.clone();
        short_total[2..4].copy_from_slice(&19u16.to_be_bytes());
        assert!(parse_ipv4(&short_total).is_err());
    }

    #[test]
    fn icmpv4_and_udp_checksums_agree_with_smoltcp() {
        let msg = icmpv4(icmp4::ECHO_REQUEST, 0, &[0, 1, 0, 2, b'h', b'i']);
        let p = sm::Icmpv4Packet::new_checked(&msg[..]).unwrap();
        assert!(p.verify_checksum());
        assert!(parse_icmpv4(&msg).is_ok());
        let mut bad = msg.clone();
        bad[9] ^= 1;
        assert_eq!(parse_icmpv4(&bad).err(), Some(ParseError::Checksum));
        let u = super::super::udp(&mapped(S), &mapped(D), 7, 9, b"hello");
        let p = sm::UdpPacket::new_checked(&u[..]).unwrap();
        assert!(p.verify_checksum(&sm::IpAddress::Ipv4(S), &sm::IpAddress::Ipv4(D)));
    }

    #[test]
    fn arp_round_trips_through_smoltcp() {
        let m = Arp {
            request: true,
            sender_mac: [2, 0, 0, 0, 0, 1],
            sender_ip: mapped(S),
            target_mac: [0; 6],
            target_ip: mapped(D),
        };
        let f = arp_frame(&m, &super::super::BROADCAST_MAC);
        assert_eq!(f.len(), ETH_LEN + super::super::ARP_LEN);
        let e = sm::EthernetFrame::new_checked(&f[..]).unwrap();
        assert_eq!(e.ethertype(), sm::EthernetProtocol::Arp);
        let p = sm::ArpPacket::new_checked(e.payload()).unwrap();
        let sm::ArpRepr::EthernetIpv4 {
            operation,
            source_protocol_addr,
            target_protocol_addr,
            ..
        } = sm::ArpRepr::parse(&p).unwrap()
        else {
            panic!()
        };
        assert_eq!(operation, sm::ArpOperation::Request);
        assert_eq!((source_protocol_addr, target_protocol_addr), (S, D));
        assert_eq!(parse_arp(&f[ETH_LEN..]).unwrap(), m);
        // Not Ethernet/IPv4, or another operation: invalid.
        let mut other = f[ETH_LEN..].to_vec();
        other[7] = 3;
        assert_eq!(parse_arp(&other).unwrap_err(), ParseError::Invalid);
        assert_eq!(
            parse_arp(&f[ETH_LEN..20]).unwrap_err(),
            ParseError::Truncated
        );
    }

    #[test]
    fn the_family_is_read_off_the_address() {
        assert!(super::super::is_ipv4(&mapped(S)));
        assert!(!super::super::is_ipv4(&"fd51::1".parse().unwrap()));
        assert!(!super::super::is_ipv4(&"::198.18.0.1".parse().unwrap()));
        assert_eq!(super::super::ip_header_len(&mapped(S)), 20);
        assert_eq!(super::super::ip_header_len(&"fd51::1".parse().unwrap()), 40);
        // The Ethernet header follows the packet's version.
        let mut f = ipv4_packet(
            &mapped(S),
            &mapped(D),
            &Ipv4Fields::whole(17, 64, 1, false),
            &[],
        );
        super::super::write_ethernet(&mut f, &[2; 6], &[4; 6]);
        assert!(is_ipv4_frame(&f));
    }
}
