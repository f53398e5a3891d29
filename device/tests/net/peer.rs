//! The stack under test and the peer the tests play on its link: the addresses of both, a
//! stack past its start-up probes, frames from the peer, and what the stack sent as the
//! oracle reads it.

use std::net::Ipv6Addr;
use std::time::Instant;

use crate::net_oracle::{self, Frame, Mac, Parsed};
use qpip_device::net::{NetConfig, Stack};

pub const OUR_MAC: Mac = [0x02, 0x51, 0x50, 0x00, 0x01, 0x01];
pub const PEER_MAC: Mac = [0x02, 0x00, 0x00, 0x00, 0x00, 0x99];
pub const OUR: Ipv6Addr = Ipv6Addr::new(0xfd51, 0x5050, 0, 0, 0, 0, 1, 1);
pub const PEER: Ipv6Addr = Ipv6Addr::new(0xfd51, 0x5050, 0, 0, 0, 0, 0, 1);
pub const OUR_LL: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0x51, 0x50ff, 0xfe00, 0x0101);
pub const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
/// The Ethernet group of [`ALL_NODES`].
pub const ALL_NODES_MAC: Mac = [0x33, 0x33, 0, 0, 0, 1];

pub fn config() -> NetConfig {
    let mut c = NetConfig::new(OUR_MAC);
    c.addrs.push((OUR, 64));
    c.seed = Some(1);
    c
}

/// Everything the stack has to send, each frame checked by the oracle.
pub fn drain(s: &mut Stack) -> Vec<Frame> {
    std::iter::from_fn(|| s.pop_tx())
        .map(|f| net_oracle::check(&f))
        .collect()
}

/// The one frame the stack has to send: anything else fails the test.
pub fn drain_one(s: &mut Stack) -> Frame {
    let mut out = drain(s);
    assert_eq!(out.len(), 1, "one frame expected: {out:?}");
    out.remove(0)
}

/// A stack past its start-up probes.
pub fn stack_with(c: NetConfig) -> (Stack, Instant) {
    let t = Instant::now();
    let mut s = Stack::new(&c, t);
    drain(&mut s);
    (s, t)
}

pub fn stack() -> (Stack, Instant) {
    stack_with(config())
}

/// A frame from the peer to us: `upper` after an IPv6 header with next header `next`.
pub fn from_peer(next: u8, upper: &[u8]) -> Vec<u8> {
    net_oracle::ip_frame(PEER_MAC, OUR_MAC, PEER, OUR, next, 64, upper)
}

/// A UDP datagram from the peer to us.
pub fn udp_from_peer(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    net_oracle::udp_frame(PEER_MAC, OUR_MAC, PEER, OUR, sport, dport, payload)
}

/// The peer's solicitation for `target`, to its solicited-node group, with the peer's
/// link-layer address.
pub fn peer_solicits(target: Ipv6Addr) -> Vec<u8> {
    let (g, gmac) = net_oracle::solicited(target);
    net_oracle::icmp_frame(
        PEER_MAC,
        gmac,
        PEER,
        g,
        255,
        &net_oracle::ns_repr(target, Some(PEER_MAC)),
    )
}

/// The peer solicits our address, so the stack knows the peer's MAC.
pub fn introduce_peer(s: &mut Stack, t: Instant) {
    assert!(s.receive(&peer_solicits(OUR), t).is_none());
    drain(s);
}

/// An ICMPv6 message the stack sent, as the oracle parsed it.
pub struct Icmp<'a> {
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    pub hop_limit: u8,
    pub ty: u8,
    pub code: u8,
    /// After type, code and checksum: the 4-byte word and the rest.
    pub body: &'a [u8],
}

/// `f`'s ICMPv6 message; anything else fails the test.
pub fn icmp(f: &Frame) -> Icmp<'_> {
    match &f.parsed {
        Parsed::Icmp {
            src,
            dst,
            hop_limit,
            ty,
            code,
            body,
        } => Icmp {
            src: *src,
            dst: *dst,
            hop_limit: *hop_limit,
            ty: *ty,
            code: *code,
            body,
        },
        p => panic!("expected ICMPv6, got {p:?}"),
    }
}

/// Sets the ICMPv6 checksum of `msg` (from `src` to `dst`), for messages the tests build
/// by hand or damage on purpose, so that only the damage meant is wrong.
pub fn fix_icmp_checksum(src: Ipv6Addr, dst: Ipv6Addr, mut msg: Vec<u8>) -> Vec<u8> {
    msg[2] = 0;
    msg[3] = 0;
    let mut sum: u32 = 0;
    let mut add = |b: &[u8]| {
        for c in b.chunks(2) {
            sum += u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u32;
        }
    };
    add(&src.octets());
    add(&dst.octets());
    add(&(msg.len() as u32).to_be_bytes());
    add(&[0, 0, 0, 58]);
    add(&msg);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    let c = !(sum as u16);
    msg[2..4].copy_from_slice(&c.to_be_bytes());
    msg
}

/// A fragment from the peer to us: fragment header (next header, offset in bytes, M, id),
/// then `data`.
pub fn peer_fragment(next: u8, offset: usize, more: bool, id: u32, data: &[u8]) -> Vec<u8> {
    net_oracle::fragment_frame(PEER_MAC, OUR_MAC, PEER, OUR, next, offset, more, id, data)
}

/// Fragments of a UDP datagram from the peer, cut at `chunk` bytes (a multiple of 8).
pub fn peer_fragments(payload: &[u8], chunk: usize, id: u32) -> Vec<Vec<u8>> {
    let u = net_oracle::udp_bytes(PEER, OUR, 4000, 9, payload);
    u.chunks(chunk)
        .enumerate()
        .map(|(i, c)| {
            let more = (i + 1) * chunk < u.len();
            peer_fragment(17, i * chunk, more, id, c)
        })
        .collect()
}

/// Feeds the stack `frame` and returns the first frame it sends in answer, which must be
/// ICMPv6: its type, its code and the 4-byte word after the checksum (the pointer of a
/// parameter problem).
pub fn answer_to(s: &mut Stack, t: Instant, frame: &[u8]) -> (u8, u8, [u8; 4]) {
    s.receive(frame, t);
    let out = drain(s);
    let first = out.first().expect("an answer");
    let m = icmp(first);
    (m.ty, m.code, m.body[..4].try_into().unwrap())
}
