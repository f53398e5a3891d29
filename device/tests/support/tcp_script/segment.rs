//! The device's TCP segments as they are on the wire: options parsed strictly, flags as
//! the script writes them, and the frames the test takes off the cable.

use etherparse::TcpHeader;
use qpip_device::net::wire::{Arp, Mac};

/// One TCP option as on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Opt {
    Mss(u16),
    Wscale(u8),
    SackOk,
    Ts(u32, u32),
    Sack(Vec<(u32, u32)>),
    Nop,
    Eol,
    Raw(Vec<u8>),
}

/// A TCP segment the device sent, parsed by etherparse (checksum verified).
#[derive(Debug, Clone)]
pub struct Seg {
    pub h: TcpHeader,
    pub opts: Vec<Opt>,
    pub payload: Vec<u8>,
    /// The IP packet's length.
    pub ip_len: usize,
    /// The Ethernet destination (the MAC the device resolved the test's address to).
    pub eth_dst: Mac,
    /// Over IPv4, whether "don't fragment" was set.
    pub df: Option<bool>,
}

impl Seg {
    pub fn flags(&self) -> String {
        flag_string(&self.h)
    }
    pub fn ts(&self) -> Option<(u32, u32)> {
        self.opts.iter().find_map(|o| match o {
            Opt::Ts(a, b) => Some((*a, *b)),
            _ => None,
        })
    }
}

/// What the device sent, frame by frame.
#[derive(Debug, Clone)]
pub enum Frame {
    Tcp(Seg),
    /// An ICMPv6 (or over IPv4, ICMPv4) message: type, code, the rest (from the 4th
    /// byte).
    Icmp(u8, u8, Vec<u8>),
    /// An IP fragment (the device fragmented a packet): its length.
    Fragment(usize),
    /// An ARP message, to the given Ethernet destination (logged; the test takes these
    /// with [`super::Peer::next_arp`]).
    Arp(Mac, Arp),
    Other,
}

pub(super) fn flag_string(h: &TcpHeader) -> String {
    let mut s = String::new();
    for (on, c) in [(h.syn, 'S'), (h.fin, 'F'), (h.rst, 'R'), (h.psh, 'P')] {
        if on {
            s.push(c);
        }
    }
    if h.ack {
        s.push('.');
    }
    s
}

/// Parses TCP options strictly (panics on anything the device should never send).
pub(super) fn parse_opts(mut b: &[u8]) -> Vec<Opt> {
    let mut v = Vec::new();
    while let Some(&kind) = b.first() {
        match kind {
            0 => {
                v.push(Opt::Eol);
                b = &b[1..];
                continue;
            }
            1 => {
                v.push(Opt::Nop);
                b = &b[1..];
                continue;
            }
            _ => {}
        }
        assert!(b.len() >= 2, "option {kind} cut short");
        let len = b[1] as usize;
        assert!(len >= 2 && len <= b.len(), "option {kind} of length {len}");
        let d = &b[2..len];
        let be32 = |x: &[u8]| u32::from_be_bytes([x[0], x[1], x[2], x[3]]);
        v.push(match (kind, len) {
            (2, 4) => Opt::Mss(u16::from_be_bytes([d[0], d[1]])),
            (3, 3) => Opt::Wscale(d[0]),
            (4, 2) => Opt::SackOk,
            (8, 10) => Opt::Ts(be32(&d[0..4]), be32(&d[4..8])),
            (5, _) if (len - 2) & 7 == 0 => Opt::Sack(
                d.chunks(8)
                    .map(|c| (be32(&c[0..4]), be32(&c[4..8])))
                    .collect(),
            ),
            _ => panic!("the device sent option {kind} of length {len}"),
        });
        b = &b[len..];
    }
    v
}

pub(super) fn opt_bytes(opts: &[Opt]) -> Vec<u8> {
    let mut b = Vec::new();
    for o in opts {
        match o {
            Opt::Mss(m) => {
                b.extend_from_slice(&[2, 4]);
                b.extend_from_slice(&m.to_be_bytes());
            }
            Opt::Wscale(s) => b.extend_from_slice(&[3, 3, *s]),
            Opt::SackOk => b.extend_from_slice(&[4, 2]),
            Opt::Ts(a, c) => {
                b.extend_from_slice(&[8, 10]);
                b.extend_from_slice(&a.to_be_bytes());
                b.extend_from_slice(&c.to_be_bytes());
            }
            Opt::Sack(blocks) => {
                b.extend_from_slice(&[5, 2 + 8 * blocks.len() as u8]);
                for (s, e) in blocks {
                    b.extend_from_slice(&s.to_be_bytes());
                    b.extend_from_slice(&e.to_be_bytes());
                }
            }
            Opt::Nop => b.push(1),
            Opt::Eol => b.push(0),
            Opt::Raw(r) => b.extend_from_slice(r),
        }
    }
    while b.len() % 4 != 0 {
        b.push(0);
    }
    b
}
