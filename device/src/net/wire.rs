//! Packet formats: building and parsing Ethernet II, IPv6 (with its fragment header),
//! ICMPv6 (echo, errors, neighbour discovery), UDP, and beside them IPv4, ICMPv4 and ARP.
//! No protocol state lives here.
//!
//! Addresses are IPv6 addresses everywhere above this module: an IPv4 address is its
//! IPv4-mapped form `::ffff:a.b.c.d` (RFC 4291 §2.5.5.2), as Linux's dual-stack sockets
//! show it. Whether a packet goes out as IPv4 is read off its addresses ([`ipv4_of`]); the
//! few things that differ by family above the wire (header sizes, pseudo-headers) ask
//! [`ip_header_len`] and [`super::checksum::pseudo_header`].
//!
//! Headers and checksums come from `etherparse`; this module fixes the few shapes the stack
//! uses and adds what `etherparse` leaves to its users (NDP option lists, MAC and
//! multicast address mapping).
//!
//! Outgoing packets are built *with room for the Ethernet header in front* ([`ETH_LEN`]
//! bytes): an IPv6 packet waiting for its next hop to be resolved is already its frame, and
//! resolution only writes the first 14 bytes.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

use etherparse::{
    checksum::Sum16BitWords, Icmpv6Type, IpNumber, Ipv6FlowLabel, Ipv6FragmentHeader, Ipv6Header,
};

mod ipv4;
pub use ipv4::*;

/// A MAC address (as the engine keeps it).
pub type Mac = [u8; 6];

pub const ETH_LEN: usize = 14;
pub const IPV6_LEN: usize = 40;
pub const UDP_LEN: usize = 8;
pub const FRAG_LEN: usize = 8;
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
pub const IPV4_LEN: usize = 20;
pub const ETHERTYPE_IPV4: u16 = 0x0800;
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// An ARP message for Ethernet and IPv4 (RFC 826).
pub const ARP_LEN: usize = 28;
pub const BROADCAST_MAC: Mac = [0xff; 6];

/// The IPv4 address an IPv4-mapped IPv6 address stands for; None for any other address.
#[inline]
pub fn ipv4_of(a: &Ipv6Addr) -> Option<Ipv4Addr> {
    a.to_ipv4_mapped()
}

/// Whether `a` is an IPv4 address in its mapped form.
#[inline]
pub fn is_ipv4(a: &Ipv6Addr) -> bool {
    ipv4_of(a).is_some()
}

/// The mapped form of an IPv4 address.
#[inline]
pub fn mapped(a: Ipv4Addr) -> Ipv6Addr {
    a.to_ipv6_mapped()
}

/// The bytes of IP header (without options or extension headers) in front of a packet
/// between these addresses: 20 for IPv4, 40 for IPv6. Sets MSS and payload limits.
#[inline]
pub fn ip_header_len(a: &Ipv6Addr) -> usize {
    if is_ipv4(a) {
        IPV4_LEN
    } else {
        IPV6_LEN
    }
}

/// The IPv4 limited broadcast address, mapped.
pub const IPV4_BROADCAST: Ipv6Addr = Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0xffff, 0xffff);

/// IPv6 next-header values the stack knows.
pub mod proto {
    pub const HOP_BY_HOP: u8 = 0;
    pub const TCP: u8 = 6;
    pub const UDP: u8 = 17;
    pub const ROUTING: u8 = 43;
    pub const FRAGMENT: u8 = 44;
    pub const ICMPV6: u8 = 58;
    pub const NO_NEXT: u8 = 59;
    pub const DEST_OPTS: u8 = 60;
}

/// ICMPv6 message types (RFC 4443, RFC 4861, RFC 3810).
pub mod icmp {
    pub const DEST_UNREACHABLE: u8 = 1;
    pub const PACKET_TOO_BIG: u8 = 2;
    pub const TIME_EXCEEDED: u8 = 3;
    pub const PARAM_PROBLEM: u8 = 4;
    pub const ECHO_REQUEST: u8 = 128;
    pub const ECHO_REPLY: u8 = 129;
    pub const MLD_QUERY: u8 = 130;
    pub const MLD_REPORT: u8 = 131;
    pub const MLD_DONE: u8 = 132;
    pub const ROUTER_SOLICIT: u8 = 133;
    pub const ROUTER_ADVERT: u8 = 134;
    pub const NEIGHBOR_SOLICIT: u8 = 135;
    pub const NEIGHBOR_ADVERT: u8 = 136;
    pub const REDIRECT: u8 = 137;
    pub const MLDV2_REPORT: u8 = 143;

    /// Destination unreachable codes.
    pub const UNREACH_ADDRESS: u8 = 3;
    pub const UNREACH_PORT: u8 = 4;
    /// Time exceeded codes.
    pub const TIME_EXCEEDED_REASSEMBLY: u8 = 1;
    /// Parameter problem codes.
    pub const PARAM_HEADER_FIELD: u8 = 0;
    pub const PARAM_NEXT_HEADER: u8 = 1;
    pub const PARAM_OPTION: u8 = 2;
    pub const PARAM_INCOMPLETE_CHAIN: u8 = 3;
}

/// Hop limit of the packets the device originates (other than NDP, which uses 255).
pub const DEFAULT_HOP_LIMIT: u8 = 64;
/// NDP messages are sent with, and only accepted with, this hop limit (RFC 4861 §7.1).
pub const NDP_HOP_LIMIT: u8 = 255;

pub const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);

/// The link-local address from a MAC (modified EUI-64, RFC 4291 appendix A).
pub fn link_local(m: &Mac) -> Ipv6Addr {
    Ipv6Addr::from([
        0xfe,
        0x80,
        0,
        0,
        0,
        0,
        0,
        0,
        m[0] ^ 0x02,
        m[1],
        m[2],
        0xff,
        0xfe,
        m[3],
        m[4],
        m[5],
    ])
}

/// The solicited-node multicast group of an address (RFC 4291 §2.7.1).
pub fn solicited_node(a: &Ipv6Addr) -> Ipv6Addr {
    let o = a.octets();
    Ipv6Addr::from([
        0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, o[13], o[14], o[15],
    ])
}

/// The Ethernet address of an IPv6 multicast group (RFC 2464 §7).
pub fn multicast_mac(a: &Ipv6Addr) -> Mac {
    let o = a.octets();
    [0x33, 0x33, o[12], o[13], o[14], o[15]]
}

pub fn is_link_local(a: &Ipv6Addr) -> bool {
    a.segments()[0] & 0xffc0 == 0xfe80
}

/// Whether `a` lies in `prefix/len`.
pub fn in_prefix(a: &Ipv6Addr, prefix: &Ipv6Addr, len: u8) -> bool {
    let len = len.min(128) as u32;
    if len == 0 {
        return true;
    }
    let mask = u128::MAX << (128 - len);
    u128::from(*a) & mask == u128::from(*prefix) & mask
}

/// Formats a MAC as `02:51:50:00:00:01`.
pub struct MacDisplay<'a>(pub &'a Mac);

impl fmt::Display for MacDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

/// Parses `02:51:50:00:00:01` (also with `-`); any unicast MAC.
pub fn parse_mac(s: &str) -> Result<Mac, String> {
    let parts: Vec<&str> = s.split([':', '-']).collect();
    if parts.len() != 6 {
        return Err(format!(
            "'{s}' is not a MAC address (six hex bytes like 02:51:50:00:00:01)"
        ));
    }
    let mut mac = [0u8; 6];
    for (b, p) in mac.iter_mut().zip(parts) {
        if p.is_empty() || p.len() > 2 {
            return Err(format!(
                "'{s}' is not a MAC address (six hex bytes like 02:51:50:00:00:01)"
            ));
        }
        *b = u8::from_str_radix(p, 16).map_err(|_| {
            format!("'{s}' is not a MAC address (six hex bytes like 02:51:50:00:00:01)")
        })?;
    }
    if mac[0] & 1 != 0 || mac == [0; 6] {
        return Err(format!("'{s}' is not a unicast MAC address"));
    }
    Ok(mac)
}

// ---- building -----------------------------------------------------------------------------

/// Writes an Ethernet II header for an IP frame into the first [`ETH_LEN`] bytes; the
/// ethertype is the IP version's (the packet after the header says which).
pub fn write_ethernet(frame: &mut [u8], dst: &Mac, src: &Mac) {
    frame[0..6].copy_from_slice(dst);
    frame[6..12].copy_from_slice(src);
    let ethertype = if frame.get(ETH_LEN).is_some_and(|b| b >> 4 == 4) {
        ETHERTYPE_IPV4
    } else {
        ETHERTYPE_IPV6
    };
    frame[12..14].copy_from_slice(&ethertype.to_be_bytes());
}

fn ipv6_header(src: &Ipv6Addr, dst: &Ipv6Addr, next: u8, len: usize, hop_limit: u8) -> [u8; 40] {
    Ipv6Header {
        traffic_class: 0,
        flow_label: Ipv6FlowLabel::ZERO,
        payload_length: len as u16,
        next_header: IpNumber(next),
        hop_limit,
        source: src.octets(),
        destination: dst.octets(),
    }
    .to_bytes()
}

/// A frame buffer holding `[Ethernet (left blank)][IPv6 header][upper-layer bytes]`.
pub fn ipv6_packet(
    src: &Ipv6Addr,
    dst: &Ipv6Addr,
    next: u8,
    hop_limit: u8,
    upper: &[u8],
) -> Vec<u8> {
    debug_assert!(upper.len() <= u16::MAX as usize);
    let mut f = Vec::with_capacity(ETH_LEN + IPV6_LEN + upper.len());
    f.extend_from_slice(&[0u8; ETH_LEN]);
    f.extend_from_slice(&ipv6_header(src, dst, next, upper.len(), hop_limit));
    f.extend_from_slice(upper);
    f
}

/// One fragment frame: `[Ethernet][IPv6][Fragment header][data]` (RFC 8200 §4.5).
#[allow(clippy::too_many_arguments)]
pub fn ipv6_fragment(
    src: &Ipv6Addr,
    dst: &Ipv6Addr,
    next: u8,
    hop_limit: u8,
    id: u32,
    offset: usize,
    more: bool,
    data: &[u8],
) -> Vec<u8> {
    debug_assert!(offset.is_multiple_of(8) && offset / 8 <= 0x1fff);
    let mut f = Vec::with_capacity(ETH_LEN + IPV6_LEN + FRAG_LEN + data.len());
    f.extend_from_slice(&[0u8; ETH_LEN]);
    f.extend_from_slice(&ipv6_header(
        src,
        dst,
        proto::FRAGMENT,
        FRAG_LEN + data.len(),
        hop_limit,
    ));
    let fh = Ipv6FragmentHeader::new(
        IpNumber(next),
        etherparse::IpFragOffset::try_new((offset / 8) as u16).expect("offset checked"),
        more,
        id,
    );
    f.extend_from_slice(&fh.to_bytes());
    f.extend_from_slice(data);
    f
}

/// A UDP datagram (header with its checksum, then the payload). The checksum is
/// mandatory over IPv6 (RFC 8200 §8.1) and always sent over IPv4 too; a sum of zero goes
/// as 0xffff (RFC 768). `payload` must leave the length in 16 bits.
pub fn udp(src: &Ipv6Addr, dst: &Ipv6Addr, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let len = UDP_LEN + payload.len();
    debug_assert!(len <= u16::MAX as usize);
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(&sport.to_be_bytes());
    out.extend_from_slice(&dport.to_be_bytes());
    out.extend_from_slice(&(len as u16).to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(payload);
    let pseudo = super::checksum::pseudo_header(src, dst, proto::UDP, len as u32);
    let sum = match !super::checksum::sum(pseudo, &out) {
        0 => 0xffff,
        s => s,
    };
    out[6..8].copy_from_slice(&sum.to_be_bytes());
    out
}

/// An ICMPv6 message: 4 bytes of type/code/checksum, then `body` (whose first 4 bytes are
/// the type-specific header word). The checksum covers the pseudo-header (RFC 4443 §2.3).
pub fn icmpv6(src: &Ipv6Addr, dst: &Ipv6Addr, ty: u8, code: u8, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&[ty, code, 0, 0]);
    out.extend_from_slice(body);
    let sum = pseudo_sum(src, dst, proto::ICMPV6, out.len())
        .add_slice(&out)
        .ones_complement()
        .to_be();
    out[2..4].copy_from_slice(&sum.to_be_bytes());
    out
}

/// The one's complement sum of the IPv6 pseudo-header (RFC 8200 §8.1).
fn pseudo_sum(src: &Ipv6Addr, dst: &Ipv6Addr, next: u8, len: usize) -> Sum16BitWords {
    Sum16BitWords::new()
        .add_16bytes(src.octets())
        .add_16bytes(dst.octets())
        .add_4bytes((len as u32).to_be_bytes())
        .add_2bytes([0, next])
}

/// Whether an upper-layer message (checksum field included) sums to zero with its
/// pseudo-header, i.e. its checksum is right.
pub fn checksum_ok(src: &Ipv6Addr, dst: &Ipv6Addr, next: u8, upper: &[u8]) -> bool {
    super::checksum::sum(
        super::checksum::pseudo_header(src, dst, next, upper.len() as u32),
        upper,
    ) == 0xffff
}

/// Body of an echo reply/request: identifier, sequence, data.
pub fn echo_body(id: u16, seq: u16, data: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(4 + data.len());
    b.extend_from_slice(&id.to_be_bytes());
    b.extend_from_slice(&seq.to_be_bytes());
    b.extend_from_slice(data);
    b
}

/// NDP option types (RFC 4861 §4.6).
pub const OPT_SOURCE_LL: u8 = 1;
pub const OPT_TARGET_LL: u8 = 2;
pub const OPT_MTU: u8 = 5;

/// Body of a neighbour solicitation: reserved word, target, and the source link-layer
/// address option unless the source is unspecified (DAD, RFC 4861 §4.3).
pub fn ns_body(target: &Ipv6Addr, sllao: Option<&Mac>) -> Vec<u8> {
    let mut b = vec![0u8; 4];
    b.extend_from_slice(&target.octets());
    if let Some(m) = sllao {
        b.extend_from_slice(&[OPT_SOURCE_LL, 1]);
        b.extend_from_slice(m);
    }
    b
}

/// Body of a neighbour advertisement with flags, target and target link-layer address.
pub fn na_body(target: &Ipv6Addr, solicited: bool, override_: bool, tllao: &Mac) -> Vec<u8> {
    let flags = (solicited as u8) << 6 | (override_ as u8) << 5;
    let mut b = vec![flags, 0, 0, 0];
    b.extend_from_slice(&target.octets());
    b.extend_from_slice(&[OPT_TARGET_LL, 1]);
    b.extend_from_slice(tllao);
    b
}

/// The type name of an ICMPv6 type as `etherparse` decodes it (for logs).
pub fn icmp_type_name(ty: u8, code: u8) -> String {
    let t = etherparse::Icmpv6Header::from_slice(&[ty, code, 0, 0, 0, 0, 0, 0])
        .map(|(h, _)| h.icmp_type)
        .ok();
    match t {
        Some(Icmpv6Type::Unknown { .. }) | None => format!("ICMPv6 type {ty} code {code}"),
        Some(t) => format!("{t:?}"),
    }
}

// ---- parsing ------------------------------------------------------------------------------

/// Why a frame or packet could not be parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// Shorter than its headers or than its length fields say.
    Truncated,
    /// A field has a value the format does not allow.
    Invalid,
    /// A header checksum that does not verify (IPv4's header, ICMPv4).
    Checksum,
}

/// An Ethernet II frame.
pub struct EthernetFrame<'a> {
    pub dst: Mac,
    pub src: Mac,
    pub ethertype: u16,
    pub payload: &'a [u8],
}

pub fn parse_ethernet(frame: &[u8]) -> Result<EthernetFrame<'_>, ParseError> {
    let h =
        etherparse::Ethernet2HeaderSlice::from_slice(frame).map_err(|_| ParseError::Truncated)?;
    Ok(EthernetFrame {
        dst: h.destination(),
        src: h.source(),
        ethertype: h.ether_type().0,
        payload: &frame[ETH_LEN..],
    })
}

/// The fixed IPv6 header of a packet, and the bytes its payload length covers (link-layer
/// padding after them is cut off).
pub struct Ipv6Packet<'a> {
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    pub next_header: u8,
    pub hop_limit: u8,
    /// The whole packet, fixed header included, trimmed to its length.
    pub packet: &'a [u8],
}

impl<'a> Ipv6Packet<'a> {
    pub fn payload(&self) -> &'a [u8] {
        &self.packet[IPV6_LEN..]
    }
}

pub fn parse_ipv6(bytes: &[u8]) -> Result<Ipv6Packet<'_>, ParseError> {
    let h = match etherparse::Ipv6HeaderSlice::from_slice(bytes) {
        Ok(h) => h,
        Err(etherparse::err::ipv6::HeaderSliceError::Len(_)) => return Err(ParseError::Truncated),
        Err(_) => return Err(ParseError::Invalid), // version is not 6
    };
    let total = IPV6_LEN + h.payload_length() as usize;
    if bytes.len() < total {
        return Err(ParseError::Truncated);
    }
    Ok(Ipv6Packet {
        src: h.source_addr(),
        dst: h.destination_addr(),
        next_header: h.next_header().0,
        hop_limit: h.hop_limit(),
        packet: &bytes[..total],
    })
}

/// A UDP header and the payload its length field covers.
pub struct UdpDatagram<'a> {
    pub sport: u16,
    pub dport: u16,
    pub checksum: u16,
    /// Header and payload, as far as the length field says.
    pub datagram: &'a [u8],
}

impl<'a> UdpDatagram<'a> {
    pub fn payload(&self) -> &'a [u8] {
        &self.datagram[UDP_LEN..]
    }
}

/// Parses UDP carried in `upper` (the bytes after the IPv6 header chain).
pub fn parse_udp(upper: &[u8]) -> Result<UdpDatagram<'_>, ParseError> {
    let h = etherparse::UdpHeaderSlice::from_slice(upper).map_err(|_| ParseError::Truncated)?;
    let len = h.length() as usize;
    if len < UDP_LEN {
        return Err(ParseError::Invalid);
    }
    if len > upper.len() {
        return Err(ParseError::Truncated);
    }
    Ok(UdpDatagram {
        sport: h.source_port(),
        dport: h.destination_port(),
        checksum: h.checksum(),
        datagram: &upper[..len],
    })
}

/// An ICMPv6 message: type, code, the 4-byte type-specific word and what follows.
pub struct Icmpv6Message<'a> {
    pub ty: u8,
    pub code: u8,
    pub word: [u8; 4],
    pub body: &'a [u8],
}

/// Parses an ICMPv6 message (at least 8 bytes: every type has the 4-byte word).
pub fn parse_icmpv6(upper: &[u8]) -> Result<Icmpv6Message<'_>, ParseError> {
    let s = etherparse::Icmpv6Slice::from_slice(upper).map_err(|_| ParseError::Truncated)?;
    Ok(Icmpv6Message {
        ty: s.type_u8(),
        code: s.code_u8(),
        word: s.bytes5to8(),
        body: &upper[8..],
    })
}

/// The options of an NDP message that the stack uses.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct NdpOptions {
    pub source_ll: Option<Mac>,
    pub target_ll: Option<Mac>,
}

/// Parses an NDP option list. Every option must have a non-zero length and fit
/// (RFC 4861 §4.6); unknown options are skipped (§4.6 "silently ignore").
pub fn parse_ndp_options(mut opts: &[u8]) -> Result<NdpOptions, ParseError> {
    let mut out = NdpOptions::default();
    while !opts.is_empty() {
        if opts.len() < 2 {
            return Err(ParseError::Truncated);
        }
        let len = opts[1] as usize * 8;
        if len == 0 {
            return Err(ParseError::Invalid);
        }
        if len > opts.len() {
            return Err(ParseError::Truncated);
        }
        let mac = || -> Mac { opts[2..8].try_into().expect("len >= 8") };
        match opts[0] {
            OPT_SOURCE_LL => out.source_ll = Some(mac()),
            OPT_TARGET_LL => out.target_ll = Some(mac()),
            _ => {}
        }
        opts = &opts[len..];
    }
    Ok(out)
}

/// A fragment header (RFC 8200 §4.5).
#[derive(Debug, Clone, Copy)]
pub struct FragmentHeader {
    pub next_header: u8,
    /// In bytes.
    pub offset: usize,
    pub more: bool,
    pub id: u32,
}

pub fn parse_fragment_header(b: &[u8]) -> Result<FragmentHeader, ParseError> {
    let h =
        etherparse::Ipv6FragmentHeaderSlice::from_slice(b).map_err(|_| ParseError::Truncated)?;
    Ok(FragmentHeader {
        next_header: h.next_header().0,
        offset: h.fragment_offset().value() as usize * 8,
        more: h.more_fragments(),
        id: h.identification(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eui64_and_multicast_mapping() {
        let mac = [0x02, 0x51, 0x50, 0x00, 0x00, 0x01];
        assert_eq!(
            link_local(&mac),
            "fe80::51:50ff:fe00:1".parse::<Ipv6Addr>().unwrap()
        );
        let a: Ipv6Addr = "fd51:5050::1:1".parse().unwrap();
        assert_eq!(
            solicited_node(&a),
            "ff02::1:ff01:1".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(
            multicast_mac(&solicited_node(&a)),
            [0x33, 0x33, 0xff, 0x01, 0x00, 0x01]
        );
    }

    #[test]
    fn prefixes() {
        let p: Ipv6Addr = "fd51:5050::".parse().unwrap();
        assert!(in_prefix(&"fd51:5050::1:2".parse().unwrap(), &p, 64));
        assert!(!in_prefix(&"fd51:5051::1".parse().unwrap(), &p, 64));
        assert!(in_prefix(&"2001::1".parse().unwrap(), &p, 0));
        assert!(is_link_local(&"fe80::1".parse().unwrap()));
        assert!(!is_link_local(&"fec0::1".parse().unwrap()));
    }

    #[test]
    fn macs() {
        assert_eq!(
            parse_mac("02:51:50:00:00:0a").unwrap(),
            [2, 0x51, 0x50, 0, 0, 10]
        );
        assert!(parse_mac("03:00:00:00:00:01").is_err());
        assert!(parse_mac("02:00:00:00:00").is_err());
        assert!(parse_mac("02:00:00:00:00:001").is_err());
        assert_eq!(
            MacDisplay(&[2, 0x51, 0x50, 0, 0, 10]).to_string(),
            "02:51:50:00:00:0a"
        );
    }

    #[test]
    fn checksums_verify() {
        let s: Ipv6Addr = "fe80::1".parse().unwrap();
        let d: Ipv6Addr = "fe80::2".parse().unwrap();
        let u = udp(&s, &d, 1, 2, b"hello");
        assert!(checksum_ok(&s, &d, proto::UDP, &u));
        let i = icmpv6(&s, &d, icmp::ECHO_REQUEST, 0, &echo_body(1, 2, b"x"));
        assert!(checksum_ok(&s, &d, proto::ICMPV6, &i));
        let mut bad = i.clone();
        bad[8] ^= 1;
        assert!(!checksum_ok(&s, &d, proto::ICMPV6, &bad));
    }

    #[test]
    fn ndp_options() {
        assert_eq!(parse_ndp_options(&[]).unwrap(), NdpOptions::default());
        let o = parse_ndp_options(&[1, 1, 1, 2, 3, 4, 5, 6, 9, 1, 0, 0, 0, 0, 0, 0]).unwrap();
        assert_eq!(o.source_ll, Some([1, 2, 3, 4, 5, 6]));
        assert_eq!(
            parse_ndp_options(&[1, 0, 0, 0, 0, 0, 0, 0]),
            Err(ParseError::Invalid)
        );
        assert_eq!(
            parse_ndp_options(&[1, 2, 0, 0, 0, 0, 0, 0]),
            Err(ParseError::Truncated)
        );
        assert_eq!(parse_ndp_options(&[1]), Err(ParseError::Truncated));
    }
}
