//! The raw Ethernet QP (`QP_TYPE_RAW_ETH`): the guest kernel's network interface on the
//! function. One engine on a memory wire whose far end plays the peer on the link: the
//! kernel-context rules, frames sent (plain, with checksum offload, cut by TSO, refused as
//! spoofs), and the steering of received frames (what the raw QP gets alone, what it gets
//! a copy of, what stays the engine's, and the answers the engine leaves to the kernel
//! while the raw QP exists), and the port split between the kernel and the QPs, both ways.
//! Checksums are verified with smoltcp's wire module.

use qpip_testkit as support;

use std::net::{Ipv4Addr, Ipv6Addr};

use qpip_device::backend::memory::{self, MemoryLink};
use qpip_device::backend::Backend;
use qpip_device::engine::network::NetworkConfig;
use qpip_device::engine::EngineConfig;
use qpip_device::net::config::StaticNeighbor;
use smoltcp::wire::{
    ArpPacket, EthernetFrame, EthernetProtocol, Icmpv4Packet, Icmpv6Message, Icmpv6Packet,
    IpAddress, IpProtocol, Ipv4Packet, Ipv6Packet, TcpPacket, UdpPacket,
};
use support::*;

mod contexts;
mod port_split;
mod receive;
mod send;
mod super_frames;

const MAC: [u8; 6] = [0x02, 0x51, 0x50, 0, 0, 0x31];
const PEER_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0, 0, 0x99];
const V4: Ipv4Addr = Ipv4Addr::new(10, 7, 0, 1);
const PEER_V4: Ipv4Addr = Ipv4Addr::new(10, 7, 0, 2);

fn v6() -> Ipv6Addr {
    "fd00:7::1".parse().unwrap()
}
fn peer_v6() -> Ipv6Addr {
    "fd00:7::2".parse().unwrap()
}

/// The engine, its guest, and the far end of its link.
struct Rig {
    g: SyncGuest,
    far: MemoryLink,
}

/// A raw QP in a kernel context with its CQs and a buffer (registered, and used through
/// PHYS_LKEY as well).
struct RawQp {
    ctx: u32,
    qp: Qp,
    scq: Cq,
    rcq: Cq,
    buf: Buf,
    mr: Mr,
}

const BUF: u64 = 64 * 4096;
const SLOT: u64 = 4096;

fn rig() -> Rig {
    rig_on(memory::pair().unwrap())
}

/// The rig on `link`, a memory pair (with or without receive offloads).
fn rig_on((near, far): (MemoryLink, MemoryLink)) -> Rig {
    let ram = Ram::new(c"raw-qp-ram", RAM_BASE, 64 << 20);
    let config = EngineConfig {
        mac: MAC,
        addrs: vec![(v6(), 64), (V4.to_ipv6_mapped(), 120)],
        ..EngineConfig::default()
    };
    let mut e = SyncEngine::new(ram, config);
    let mut net = NetworkConfig::new(qpip_device::backend::NetSpec::Tap("memory".into()));
    net.neighbors = vec![
        StaticNeighbor {
            addr: peer_v6(),
            mac: PEER_MAC,
        },
        StaticNeighbor {
            addr: PEER_V4.to_ipv6_mapped(),
            mac: PEER_MAC,
        },
    ];
    e.engine.attach_link(&net, Box::new(near));
    let mut r = Rig {
        g: SyncGuest::new(e),
        far,
    };
    r.settle();
    r.drain();
    r
}

impl Rig {
    fn settle(&mut self) {
        for _ in 0..20 {
            self.g.poll();
        }
    }

    /// The frames the device sent since the last look.
    fn drain(&mut self) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 70000];
        while let Some(n) = self.far.recv(&mut buf).unwrap() {
            out.push(buf[..n].to_vec());
        }
        out
    }

    fn inject(&mut self, frame: &[u8]) {
        self.far.send(frame).unwrap();
        self.settle();
    }

    /// A raw QP receiving one frame a WR.
    fn raw_qp(&mut self) -> RawQp {
        self.raw_qp_framed(0)
    }

    /// A raw QP with receive mode `framing` (0 or `RAW_RX_MERGEABLE`), no WR posted.
    fn raw_qp_framed(&mut self, framing: u8) -> RawQp {
        let ctx = self.g.create_ctx_flags(CTX_FLAG_KERNEL).unwrap();
        let scq = self.g.create_cq(ctx, 64);
        let rcq = self.g.create_cq(ctx, 64);
        let qp = self
            .g
            .try_create_qp(ctx, (scq.id, rcq.id), 32, (QP_TYPE_RAW_ETH, framing))
            .unwrap();
        let (buf, mr) = self.g.reg_buf(ctx, BUF, MR_ACCESS_LOCAL_WRITE);
        RawQp {
            ctx,
            qp,
            scq,
            rcq,
            buf,
            mr,
        }
    }

    fn cqes(&mut self, cq: &mut Cq) -> Vec<Cqe> {
        self.settle();
        let mut out = Vec::new();
        self.g.reap(cq, &mut out);
        out
    }

    /// Sends `frame` from slot `slot` of the raw QP's buffer through PHYS_LKEY, with
    /// `flags` and `o`; its completion.
    fn send(&mut self, r: &mut RawQp, slot: u64, frame: &[u8], flags: u8, o: RawTxOffload) -> Cqe {
        let gpa = r.buf.gpa(slot * SLOT);
        self.g.write(gpa, frame);
        let mut h = wqe_hdr(WQE_OP_SEND, 100 + slot);
        h.flags = flags;
        h.set_raw_offload(o);
        h.num_sge = 2;
        // Two SGEs, to gather across them.
        let half = frame.len() as u32 / 2;
        let sges = [
            Sge {
                addr: gpa,
                length: half,
                lkey: PHYS_LKEY,
            },
            Sge {
                addr: gpa + half as u64,
                length: frame.len() as u32 - half,
                lkey: PHYS_LKEY,
            },
        ];
        let w = wqe_bytes(&h, &sges);
        self.g.post_wqes(&mut r.qp, true, &[w]);
        let c = self.cqes(&mut r.scq);
        assert_eq!(c.len(), 1, "one send completion: {c:?}");
        c[0]
    }

    /// Posts `n` receive buffers of `len` bytes (slots from `first`), registered ones.
    fn post_recvs(&mut self, r: &mut RawQp, first: u64, n: u64, len: u32) {
        let ws: Vec<WqeBytes> = (first..first + n)
            .map(|i| recv_wqe(i, &[r.buf.sge(i * SLOT, len, r.mr.lkey)]))
            .collect();
        self.g.post_wqes(&mut r.qp, false, &ws);
        self.settle();
    }

    fn stat(&mut self, which: u32) -> u64 {
        self.g.stat(which)
    }
}

// ---- frames ------------------------------------------------------------------------------

fn eth(dst: [u8; 6], src: [u8; 6], ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + payload.len());
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

fn sum(data: &[u8]) -> u32 {
    data.chunks(2)
        .map(|c| u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u32)
        .sum()
}

fn fold(mut s: u32) -> u16 {
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

fn pseudo4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, len: usize) -> u32 {
    sum(&src.octets()) + sum(&dst.octets()) + proto as u32 + len as u32
}

/// An IPv4 packet (no options) of `proto` around `l4`, whose checksum field at
/// `csum_at` gets the right checksum (or, if `pseudo_only`, the pseudo-header sum as
/// Linux leaves it for CHECKSUM_PARTIAL).
fn ipv4(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    proto: u8,
    mut l4: Vec<u8>,
    csum_at: usize,
    pseudo_only: bool,
) -> Vec<u8> {
    let p = pseudo4(src, dst, proto, l4.len());
    l4[csum_at..csum_at + 2].copy_from_slice(&[0, 0]);
    let c = if pseudo_only {
        fold(p)
    } else {
        !fold(p + sum(&l4))
    };
    l4[csum_at..csum_at + 2].copy_from_slice(&c.to_be_bytes());
    let mut ip = vec![0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&((20 + l4.len()) as u16).to_be_bytes());
    ip[4..6].copy_from_slice(&0x1234u16.to_be_bytes());
    ip[8] = 64;
    ip[9] = proto;
    ip[12..16].copy_from_slice(&src.octets());
    ip[16..20].copy_from_slice(&dst.octets());
    let h = !fold(sum(&ip));
    ip[10..12].copy_from_slice(&h.to_be_bytes());
    ip.extend_from_slice(&l4);
    ip
}

/// An IPv6 packet (no extension headers) of `next` around `l4`, whose checksum field at
/// `csum_at` gets the right checksum, with hop limit `hop`.
fn ipv6(
    src: Ipv6Addr,
    dst: Ipv6Addr,
    next: u8,
    mut l4: Vec<u8>,
    csum_at: usize,
    hop: u8,
) -> Vec<u8> {
    let p = sum(&src.octets()) + sum(&dst.octets()) + l4.len() as u32 + next as u32;
    l4[csum_at..csum_at + 2].copy_from_slice(&[0, 0]);
    let c = !fold(p + sum(&l4));
    l4[csum_at..csum_at + 2].copy_from_slice(&c.to_be_bytes());
    let mut ip = vec![0u8; 40];
    ip[0] = 0x60;
    ip[4..6].copy_from_slice(&(l4.len() as u16).to_be_bytes());
    ip[6] = next;
    ip[7] = hop;
    ip[8..24].copy_from_slice(&src.octets());
    ip[24..40].copy_from_slice(&dst.octets());
    ip.extend_from_slice(&l4);
    ip
}

fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut u = vec![0u8; 8];
    u[0..2].copy_from_slice(&sport.to_be_bytes());
    u[2..4].copy_from_slice(&dport.to_be_bytes());
    u[4..6].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    u.extend_from_slice(payload);
    u
}

fn tcp(sport: u16, dport: u16, seq: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut t = vec![0u8; 20];
    t[0..2].copy_from_slice(&sport.to_be_bytes());
    t[2..4].copy_from_slice(&dport.to_be_bytes());
    t[4..8].copy_from_slice(&seq.to_be_bytes());
    t[12] = 5 << 4;
    t[13] = flags;
    t[14..16].copy_from_slice(&65535u16.to_be_bytes());
    t.extend_from_slice(payload);
    t
}

/// A UDP datagram from the peer to the device over IPv4, checksum right or not.
fn peer_udp4(dport: u16, good: bool) -> Vec<u8> {
    let mut ip = ipv4(
        PEER_V4,
        V4,
        17,
        udp(5555, dport, b"for the kernel"),
        6,
        false,
    );
    if !good {
        let n = ip.len();
        ip[n - 1] ^= 0xff;
    }
    eth(MAC, PEER_MAC, 0x0800, &ip)
}

fn peer_syn4(dport: u16) -> Vec<u8> {
    let ip = ipv4(PEER_V4, V4, 6, tcp(40000, dport, 7, 0x02, &[]), 16, false);
    eth(MAC, PEER_MAC, 0x0800, &ip)
}

fn arp_request() -> Vec<u8> {
    let mut a = vec![0, 1, 8, 0, 6, 4, 0, 1];
    a.extend_from_slice(&PEER_MAC);
    a.extend_from_slice(&PEER_V4.octets());
    a.extend_from_slice(&[0; 6]);
    a.extend_from_slice(&V4.octets());
    eth([0xff; 6], PEER_MAC, 0x0806, &a)
}

fn echo_request4() -> Vec<u8> {
    let mut m = vec![8, 0, 0, 0, 0, 1, 0, 1];
    m.extend_from_slice(b"ping");
    let c = !fold(sum(&m));
    m[2..4].copy_from_slice(&c.to_be_bytes());
    let ip = ipv4(PEER_V4, V4, 1, m, 2, false);
    // ipv4() put a pseudo-header checksum in: ICMP has none, so rebuild it plainly.
    let mut ip = ip;
    let icmp = &mut ip[20..];
    icmp[2..4].copy_from_slice(&[0, 0]);
    let c = !fold(sum(icmp));
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    eth(MAC, PEER_MAC, 0x0800, &ip)
}

// ---- what the device sent ------------------------------------------------------------------

/// Whether `f` is an ICMP(v4) port unreachable or a TCP RST.
fn is_unreachable_or_rst(f: &[u8]) -> bool {
    let Ok(e) = EthernetFrame::new_checked(f) else {
        return false;
    };
    if e.ethertype() != EthernetProtocol::Ipv4 {
        return false;
    }
    let ip = Ipv4Packet::new_checked(e.payload()).unwrap();
    match ip.next_header() {
        IpProtocol::Icmp => {
            Icmpv4Packet::new_checked(ip.payload()).unwrap().msg_type()
                == smoltcp::wire::Icmpv4Message::DstUnreachable
        }
        IpProtocol::Tcp => TcpPacket::new_checked(ip.payload()).unwrap().rst(),
        _ => false,
    }
}

fn read_frame(rig: &Rig, r: &RawQp, slot: u64, len: usize) -> Vec<u8> {
    rig.g.slice(r.buf.gpa(slot * SLOT), len).to_vec()
}
