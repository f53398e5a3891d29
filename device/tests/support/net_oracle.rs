//! An independent view of frames, from `smoltcp`'s wire module: every frame the stack
//! builds is parsed here and its checksums verified, and the frames the tests feed the
//! stack are built here, so the stack's own formats never judge themselves.

#![allow(dead_code)]

use std::collections::HashMap;
use std::net::Ipv6Addr;

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    EthernetAddress, EthernetFrame, EthernetProtocol, EthernetRepr, Icmpv6Packet, Icmpv6Repr,
    IpAddress, IpProtocol, Ipv6FragmentHeader, Ipv6Packet, Ipv6Repr, NdiscNeighborFlags, NdiscRepr,
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
    let repr = UdpRepr {
        src_port: sport,
        dst_port: dport,
    };
    let mut buf = vec![0u8; 8 + payload.len()];
    let mut p = UdpPacket::new_unchecked(&mut buf[..]);
    repr.emit(
        &mut p,
        &IpAddress::Ipv6(src),
        &IpAddress::Ipv6(dst),
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
