//! An independent view of frames, from `smoltcp`'s wire module: every frame the stack
//! builds is parsed here and its checksums verified, and the frames the tests feed the
//! stack are built here, so the stack's own formats never judge themselves.

#![allow(dead_code)]

use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr};

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    ArpOperation, ArpPacket, ArpRepr, EthernetAddress, EthernetFrame, EthernetProtocol,
    EthernetRepr, Icmpv4Packet, Icmpv4Repr, Icmpv6Packet, Icmpv6Repr, IpAddress, IpProtocol,
    Ipv4Packet, Ipv4Repr, Ipv6FragmentHeader, Ipv6Packet, Ipv6Repr, NdiscNeighborFlags, NdiscRepr,
    RawHardwareAddress, UdpPacket, UdpRepr,
};

pub type Mac = [u8; 6];

/// A frame as the oracle understands it.
#[derive(Debug, Clone, PartialEq)]
pub enum Parsed {
    Udp {
        src: Ipv6Addr,
        dst: Ipv6Addr,
        sport: u16,
        dport: u16,
        payload: Vec<u8>,
    },
    Fragment {
        src: Ipv6Addr,
        dst: Ipv6Addr,
        next_header: u8,
        offset: usize,
        more: bool,
        id: u32,
        data: Vec<u8>,
        /// The IPv6 packet's length (fixed header included).
        ip_len: usize,
    },
    Icmp {
        src: Ipv6Addr,
        dst: Ipv6Addr,
        hop_limit: u8,
        ty: u8,
        code: u8,
        /// After type, code and checksum: the 4-byte word and the rest.
        body: Vec<u8>,
    },
    /// An IPv4 packet that is neither a whole UDP datagram nor ARP: its header fields and
    /// what it carries (ICMPv4, TCP, a fragment ...).
    Ipv4 {
        src: Ipv4Addr,
        dst: Ipv4Addr,
        protocol: u8,
        ttl: u8,
        id: u16,
        dont_frag: bool,
        more: bool,
        offset: usize,
        payload: Vec<u8>,
    },
    Arp {
        request: bool,
        sender_mac: Mac,
        sender_ip: Ipv4Addr,
        target_mac: Mac,
        target_ip: Ipv4Addr,
    },
}

/// A parsed frame with its link-layer addresses.
#[derive(Debug, Clone)]
pub struct Frame {
    pub eth_dst: Mac,
    pub eth_src: Mac,
    pub parsed: Parsed,
}

/// Parses a frame the stack built and checks everything the oracle can: Ethernet type,
/// IPv6 version and lengths, UDP and ICMPv6 checksums, NDP message shape. Panics with the
/// reason on any fault.
pub fn check(frame: &[u8]) -> Frame {
    let eth = EthernetFrame::new_checked(frame).expect("oracle: Ethernet frame");
    match eth.ethertype() {
        EthernetProtocol::Ipv4 => return check_ipv4(&eth),
        EthernetProtocol::Arp => return check_arp(&eth),
        _ => {}
    }
    assert_eq!(eth.ethertype(), EthernetProtocol::Ipv6, "oracle: ethertype");
    let ip = Ipv6Packet::new_checked(eth.payload()).expect("oracle: IPv6 packet");
    assert_eq!(ip.version(), 6);
    assert_eq!(
        ip.payload_len() as usize + 40,
        eth.payload().len(),
        "oracle: no trailing bytes after the IPv6 packet"
    );
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    let parsed = match ip.next_header() {
        IpProtocol::Udp => {
            let u = UdpPacket::new_checked(ip.payload()).expect("oracle: UDP");
            assert!(
                u.verify_checksum(&IpAddress::Ipv6(src), &IpAddress::Ipv6(dst)),
                "oracle: UDP checksum"
            );
            assert_ne!(
                u.checksum(),
                0,
                "oracle: UDP checksum 0 is not allowed in IPv6"
            );
            assert_eq!(u.len() as usize, ip.payload().len(), "oracle: UDP length");
            Parsed::Udp {
                src,
                dst,
                sport: u.src_port(),
                dport: u.dst_port(),
                payload: u.payload().to_vec(),
            }
        }
        IpProtocol::Icmpv6 => {
            let p = Icmpv6Packet::new_checked(ip.payload()).expect("oracle: ICMPv6");
            assert!(p.verify_checksum(&src, &dst), "oracle: ICMPv6 checksum");
            // Let smoltcp's full parser judge the message too (NDP options included).
            Icmpv6Repr::parse(&src, &dst, &p, &ChecksumCapabilities::default())
                .expect("oracle: ICMPv6 message");
            let ty: u8 = p.msg_type().into();
            if ty == 135 || ty == 136 {
                assert_eq!(ip.hop_limit(), 255, "oracle: NDP hop limit");
                NdiscRepr::parse(&p).expect("oracle: NDP");
            }
            Parsed::Icmp {
                src,
                dst,
                hop_limit: ip.hop_limit(),
                ty,
                code: p.msg_code(),
                body: ip.payload()[4..].to_vec(),
            }
        }
        IpProtocol::Ipv6Frag => {
            // smoltcp's fragment header starts after the generic next-header/length bytes.
            let h = Ipv6FragmentHeader::new_checked(&ip.payload()[2..8]).expect("oracle: fragment");
            let data = &ip.payload()[8..];
            if h.more_frags() {
                assert_eq!(data.len() % 8, 0, "oracle: non-last fragment length");
            }
            let nh: u8 = ip.payload()[0];
            Parsed::Fragment {
                src,
                dst,
                next_header: nh,
                offset: h.frag_offset() as usize * 8,
                more: h.more_frags(),
                id: h.ident(),
                data: data.to_vec(),
                ip_len: eth.payload().len(),
            }
        }
        other => panic!("oracle: unexpected next header {other}"),
    };
    Frame {
        eth_dst: eth.dst_addr().0,
        eth_src: eth.src_addr().0,
        parsed,
    }
}

/// An IPv4 frame: header checksum and lengths; a whole UDP datagram with its checksum
/// (addresses mapped, as the stack keeps them); ICMPv4 with its checksum and smoltcp's
/// judgement of echo and error messages.
fn check_ipv4(eth: &EthernetFrame<&[u8]>) -> Frame {
    let ip = Ipv4Packet::new_checked(eth.payload()).expect("oracle: IPv4 packet");
    assert_eq!(ip.version(), 4);
    assert!(ip.verify_checksum(), "oracle: IPv4 header checksum");
    assert_eq!(ip.header_len(), 20, "oracle: the stack sends no options");
    assert_eq!(
        ip.total_len() as usize,
        eth.payload().len(),
        "oracle: no trailing bytes after the IPv4 packet"
    );
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    let whole = !ip.more_frags() && ip.frag_offset() == 0;
    let parsed = match ip.next_header() {
        IpProtocol::Udp if whole => {
            let u = UdpPacket::new_checked(ip.payload()).expect("oracle: UDP");
            assert!(
                u.verify_checksum(&IpAddress::Ipv4(src), &IpAddress::Ipv4(dst)),
                "oracle: UDP checksum"
            );
            assert_ne!(u.checksum(), 0, "oracle: the stack always sends a checksum");
            assert_eq!(u.len() as usize, ip.payload().len(), "oracle: UDP length");
            Parsed::Udp {
                src: src.to_ipv6_mapped(),
                dst: dst.to_ipv6_mapped(),
                sport: u.src_port(),
                dport: u.dst_port(),
                payload: u.payload().to_vec(),
            }
        }
        p => {
            if p == IpProtocol::Icmp && whole {
                let m = Icmpv4Packet::new_checked(ip.payload()).expect("oracle: ICMPv4");
                assert!(m.verify_checksum(), "oracle: ICMPv4 checksum");
                let ty: u8 = m.msg_type().into();
                if ty != 3 {
                    // smoltcp knows echo and time exceeded; its destination unreachable
                    // parser wants a quoted header it can parse (not a fragment's).
                    Icmpv4Repr::parse(&m, &ChecksumCapabilities::default())
                        .expect("oracle: ICMPv4 message");
                }
            }
            Parsed::Ipv4 {
                src,
                dst,
                protocol: p.into(),
                ttl: ip.hop_limit(),
                id: ip.ident(),
                dont_frag: ip.dont_frag(),
                more: ip.more_frags(),
                offset: ip.frag_offset() as usize,
                payload: ip.payload().to_vec(),
            }
        }
    };
    Frame {
        eth_dst: eth.dst_addr().0,
        eth_src: eth.src_addr().0,
        parsed,
    }
}

fn check_arp(eth: &EthernetFrame<&[u8]>) -> Frame {
    let p = ArpPacket::new_checked(eth.payload()).expect("oracle: ARP");
    let ArpRepr::EthernetIpv4 {
        operation,
        source_hardware_addr,
        source_protocol_addr,
        target_hardware_addr,
        target_protocol_addr,
    } = ArpRepr::parse(&p).expect("oracle: Ethernet/IPv4 ARP")
    else {
        panic!("oracle: not Ethernet/IPv4 ARP")
    };
    assert_eq!(
        eth.src_addr(),
        source_hardware_addr,
        "oracle: ARP from its sender"
    );
    Frame {
        eth_dst: eth.dst_addr().0,
        eth_src: eth.src_addr().0,
        parsed: Parsed::Arp {
            request: operation == ArpOperation::Request,
            sender_mac: source_hardware_addr.0,
            sender_ip: source_protocol_addr,
            target_mac: target_hardware_addr.0,
            target_ip: target_protocol_addr,
        },
    }
}

/// Reassembles fragments the stack sent (all present, any order) and checks the UDP
/// datagram inside with the oracle.
#[derive(Default)]
pub struct Defrag {
    parts: HashMap<u32, Vec<(usize, bool, Vec<u8>)>>,
}

impl Defrag {
    /// Takes a fragment; returns the datagram once complete.
    pub fn add(&mut self, p: &Parsed) -> Option<Parsed> {
        let Parsed::Fragment {
            src,
            dst,
            next_header,
            offset,
            more,
            id,
            data,
            ..
        } = p
        else {
            return None;
        };
        let v = self.parts.entry(*id).or_default();
        v.push((*offset, *more, data.clone()));
        v.sort_by_key(|x| x.0);
        let mut at = 0;
        for (o, _, d) in v.iter() {
            if *o != at {
                return None;
            }
            at += d.len();
        }
        if v.last().is_some_and(|x| x.1) {
            return None;
        }
        let whole: Vec<u8> = v.iter().flat_map(|x| x.2.clone()).collect();
        self.parts.remove(id);
        assert_eq!(*next_header, 17, "oracle: fragmented UDP");
        let u = UdpPacket::new_checked(&whole[..]).expect("oracle: reassembled UDP");
        assert!(
            u.verify_checksum(&IpAddress::Ipv6(*src), &IpAddress::Ipv6(*dst)),
            "oracle: reassembled UDP checksum"
        );
        Some(Parsed::Udp {
            src: *src,
            dst: *dst,
            sport: u.src_port(),
            dport: u.dst_port(),
            payload: u.payload().to_vec(),
        })
    }
}

// ---- building frames as a peer would ------------------------------------------------------

fn frame(src_mac: Mac, dst_mac: Mac, ip: Ipv6Repr, upper: &[u8]) -> Vec<u8> {
    let eth = EthernetRepr {
        src_addr: EthernetAddress(src_mac),
        dst_addr: EthernetAddress(dst_mac),
        ethertype: EthernetProtocol::Ipv6,
    };
    let mut buf = vec![0u8; 14 + 40 + upper.len()];
    let mut f = EthernetFrame::new_unchecked(&mut buf[..]);
    eth.emit(&mut f);
    let mut p = Ipv6Packet::new_unchecked(f.payload_mut());
    ip.emit(&mut p);
    p.payload_mut().copy_from_slice(upper);
    buf
}

/// An IPv6 frame with any upper-layer bytes.
pub fn ip_frame(
    src_mac: Mac,
    dst_mac: Mac,
    src: Ipv6Addr,
    dst: Ipv6Addr,
    next: u8,
    hop_limit: u8,
    upper: &[u8],
) -> Vec<u8> {
    frame(
        src_mac,
        dst_mac,
        Ipv6Repr {
            src_addr: src,
            dst_addr: dst,
            next_header: IpProtocol::from(next),
            payload_len: upper.len(),
            hop_limit,
        },
        upper,
    )
}

/// The bytes of an ICMPv6 message.
pub fn icmp_bytes(src: Ipv6Addr, dst: Ipv6Addr, repr: &Icmpv6Repr) -> Vec<u8> {
    let mut buf = vec![0u8; repr.buffer_len()];
    let mut p = Icmpv6Packet::new_unchecked(&mut buf[..]);
    repr.emit(&src, &dst, &mut p, &ChecksumCapabilities::default());
    buf
}

pub fn icmp_frame(
    src_mac: Mac,
    dst_mac: Mac,
    src: Ipv6Addr,
    dst: Ipv6Addr,
    hop_limit: u8,
    repr: &Icmpv6Repr,
) -> Vec<u8> {
    let b = icmp_bytes(src, dst, repr);
    ip_frame(src_mac, dst_mac, src, dst, 58, hop_limit, &b)
}

/// The bytes of a UDP datagram (checksum computed).
pub fn udp_bytes(src: Ipv6Addr, dst: Ipv6Addr, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    udp_datagram(
        IpAddress::Ipv6(src),
        IpAddress::Ipv6(dst),
        sport,
        dport,
        payload,
    )
}

/// The bytes of a UDP datagram of either family, its checksum over that family's
/// pseudo-header.
fn udp_datagram(src: IpAddress, dst: IpAddress, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let repr = UdpRepr {
        src_port: sport,
        dst_port: dport,
    };
    let mut buf = vec![0u8; 8 + payload.len()];
    let mut p = UdpPacket::new_unchecked(&mut buf[..]);
    repr.emit(
        &mut p,
        &src,
        &dst,
        payload.len(),
        |b| b.copy_from_slice(payload),
        &ChecksumCapabilities::default(),
    );
    buf
}

pub fn udp_frame(
    src_mac: Mac,
    dst_mac: Mac,
    src: Ipv6Addr,
    dst: Ipv6Addr,
    sport: u16,
    dport: u16,
    payload: &[u8],
) -> Vec<u8> {
    let u = udp_bytes(src, dst, sport, dport, payload);
    ip_frame(src_mac, dst_mac, src, dst, 17, 64, &u)
}

/// A fragment: fragment header (next header, offset in bytes, M, id) then `data`.
#[allow(clippy::too_many_arguments)]
pub fn fragment_frame(
    src_mac: Mac,
    dst_mac: Mac,
    src: Ipv6Addr,
    dst: Ipv6Addr,
    next: u8,
    offset: usize,
    more: bool,
    id: u32,
    data: &[u8],
) -> Vec<u8> {
    let mut upper = vec![0u8; 8];
    let mut h = Ipv6FragmentHeader::new_unchecked(&mut upper[2..8]);
    h.set_frag_offset((offset / 8) as u16);
    h.set_more_frags(more);
    h.set_ident(id);
    upper[0] = next;
    upper.extend_from_slice(data);
    ip_frame(src_mac, dst_mac, src, dst, 44, 64, &upper)
}

pub fn ns_repr(target: Ipv6Addr, lladdr: Option<Mac>) -> Icmpv6Repr<'static> {
    Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit {
        target_addr: target,
        lladdr: lladdr.map(|m| RawHardwareAddress::from_bytes(&m)),
    })
}

pub fn na_repr(
    target: Ipv6Addr,
    lladdr: Option<Mac>,
    solicited: bool,
    override_: bool,
) -> Icmpv6Repr<'static> {
    let mut flags = NdiscNeighborFlags::empty();
    if solicited {
        flags |= NdiscNeighborFlags::SOLICITED;
    }
    if override_ {
        flags |= NdiscNeighborFlags::OVERRIDE;
    }
    Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
        flags,
        target_addr: target,
        lladdr: lladdr.map(|m| RawHardwareAddress::from_bytes(&m)),
    })
}

/// The solicited-node group and its MAC, computed here independently of the stack.
pub fn solicited(a: Ipv6Addr) -> (Ipv6Addr, Mac) {
    let o = a.octets();
    let g = Ipv6Addr::new(
        0xff02,
        0,
        0,
        0,
        0,
        1,
        0xff00 | o[13] as u16,
        u16::from_be_bytes([o[14], o[15]]),
    );
    (g, [0x33, 0x33, 0xff, o[13], o[14], o[15]])
}

// ---- IPv4 and ARP as a peer sends them ----------------------------------------------------

/// The fields of an IPv4 header a test sets (smoltcp's `Ipv4Repr` has no fragment fields).
#[derive(Debug, Clone, Copy)]
pub struct V4 {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub protocol: u8,
    pub ttl: u8,
    pub id: u16,
    pub dont_frag: bool,
    pub more: bool,
    /// In bytes.
    pub offset: usize,
}

impl V4 {
    pub fn new(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8) -> V4 {
        V4 {
            src,
            dst,
            protocol,
            ttl: 64,
            id: 1,
            dont_frag: false,
            more: false,
            offset: 0,
        }
    }
}

/// An IPv4 frame with any upper-layer bytes.
pub fn ipv4_frame(src_mac: Mac, dst_mac: Mac, h: V4, upper: &[u8]) -> Vec<u8> {
    let eth = EthernetRepr {
        src_addr: EthernetAddress(src_mac),
        dst_addr: EthernetAddress(dst_mac),
        ethertype: EthernetProtocol::Ipv4,
    };
    let mut buf = vec![0u8; 14 + 20 + upper.len()];
    let mut f = EthernetFrame::new_unchecked(&mut buf[..]);
    eth.emit(&mut f);
    let mut p = Ipv4Packet::new_unchecked(f.payload_mut());
    Ipv4Repr {
        src_addr: h.src,
        dst_addr: h.dst,
        next_header: IpProtocol::from(h.protocol),
        payload_len: upper.len(),
        hop_limit: h.ttl,
    }
    .emit(&mut p, &ChecksumCapabilities::default());
    p.set_ident(h.id);
    p.set_dont_frag(h.dont_frag);
    p.set_more_frags(h.more);
    p.set_frag_offset(h.offset as u16);
    p.fill_checksum();
    p.payload_mut().copy_from_slice(upper);
    buf
}

/// The bytes of a UDP datagram over IPv4 (checksum computed).
pub fn udp4_bytes(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    udp_datagram(
        IpAddress::Ipv4(src),
        IpAddress::Ipv4(dst),
        sport,
        dport,
        payload,
    )
}

pub fn udp4_frame(
    src_mac: Mac,
    dst_mac: Mac,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    sport: u16,
    dport: u16,
    payload: &[u8],
) -> Vec<u8> {
    let u = udp4_bytes(src, dst, sport, dport, payload);
    ipv4_frame(src_mac, dst_mac, V4::new(src, dst, 17), &u)
}

/// The bytes of an ICMPv4 message.
pub fn icmp4_bytes(repr: &Icmpv4Repr) -> Vec<u8> {
    let mut buf = vec![0u8; repr.buffer_len()];
    let mut p = Icmpv4Packet::new_unchecked(&mut buf[..]);
    repr.emit(&mut p, &ChecksumCapabilities::default());
    buf
}

/// An echo request.
pub fn echo4_frame(
    src_mac: Mac,
    dst_mac: Mac,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    ident: u16,
    seq_no: u16,
    data: &[u8],
) -> Vec<u8> {
    let m = icmp4_bytes(&Icmpv4Repr::EchoRequest {
        ident,
        seq_no,
        data,
    });
    ipv4_frame(src_mac, dst_mac, V4::new(src, dst, 1), &m)
}

/// An ARP frame (Ethernet/IPv4), from `sender_mac` to `eth_dst`.
pub fn arp_frame(
    eth_dst: Mac,
    request: bool,
    sender_mac: Mac,
    sender_ip: Ipv4Addr,
    target_mac: Mac,
    target_ip: Ipv4Addr,
) -> Vec<u8> {
    let repr = ArpRepr::EthernetIpv4 {
        operation: if request {
            ArpOperation::Request
        } else {
            ArpOperation::Reply
        },
        source_hardware_addr: EthernetAddress(sender_mac),
        source_protocol_addr: sender_ip,
        target_hardware_addr: EthernetAddress(target_mac),
        target_protocol_addr: target_ip,
    };
    let eth = EthernetRepr {
        src_addr: EthernetAddress(sender_mac),
        dst_addr: EthernetAddress(eth_dst),
        ethertype: EthernetProtocol::Arp,
    };
    let mut buf = vec![0u8; 14 + repr.buffer_len()];
    let mut f = EthernetFrame::new_unchecked(&mut buf[..]);
    eth.emit(&mut f);
    let mut p = ArpPacket::new_unchecked(f.payload_mut());
    repr.emit(&mut p);
    buf
}
