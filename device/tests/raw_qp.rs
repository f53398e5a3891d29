//! The raw Ethernet QP (`QP_TYPE_RAW_ETH`): the guest kernel's network interface on the
//! function. One engine on a memory wire whose far end plays the peer on the link: the
//! kernel-context rules, frames sent (plain, with checksum offload, cut by TSO, refused as
//! spoofs), and the steering of received frames (what the raw QP gets alone, what it gets
//! a copy of, what stays the engine's, and the answers the engine leaves to the kernel
//! while the raw QP exists). Checksums are verified with smoltcp's wire module.

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

    fn raw_qp(&mut self) -> RawQp {
        let ctx = self.g.create_ctx_flags(CTX_FLAG_KERNEL).unwrap();
        let scq = self.g.create_cq(ctx, 64);
        let rcq = self.g.create_cq(ctx, 64);
        let qp = self
            .g
            .try_create_qp(ctx, (scq.id, rcq.id), 32, (QP_TYPE_RAW_ETH, 0))
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

// ---- kernel contexts ---------------------------------------------------------------------

#[test]
fn only_a_kernel_context_holds_a_raw_qp_and_only_one() {
    let mut r = rig();
    assert_admin_err(
        r.g.create_ctx_flags(1 << 1),
        ADMIN_STATUS_BAD_PARAM,
        "unknown flag",
    );
    let user = r.g.create_ctx();
    let cq = r.g.create_cq(user, 16);
    assert_admin_err(
        r.g.try_create_qp(user, (cq.id, cq.id), 16, (QP_TYPE_RAW_ETH, 0)),
        ADMIN_STATUS_BAD_PARAM,
        "raw QP in a user context",
    );
    let kctx = r.g.create_ctx_flags(CTX_FLAG_KERNEL).unwrap();
    let kcq = r.g.create_cq(kctx, 16);
    assert_admin_err(
        r.g.try_create_qp(kctx, (kcq.id, kcq.id), 16, (QP_TYPE_RAW_ETH, 2)),
        ADMIN_STATUS_BAD_PARAM,
        "raw QP with an unknown receive mode",
    );
    let first =
        r.g.try_create_qp(kctx, (kcq.id, kcq.id), 16, (QP_TYPE_RAW_ETH, 0))
            .unwrap();
    assert_admin_err(
        r.g.try_create_qp(kctx, (kcq.id, kcq.id), 16, (QP_TYPE_RAW_ETH, 0)),
        ADMIN_STATUS_BUSY,
        "a second raw QP",
    );
    // Gone, another may take its place.
    r.g.admin(cmd0(ADMIN_OP_DESTROY_QP, kctx, first.id));
    r.g.try_create_qp(kctx, (kcq.id, kcq.id), 16, (QP_TYPE_RAW_ETH, 0))
        .unwrap();
}

#[test]
fn phys_lkey_is_an_unknown_key_outside_a_kernel_context() {
    let mut r = rig();
    let ctx = r.g.create_ctx();
    let scq = r.g.create_cq(ctx, 16);
    let mut scq2 = scq.clone();
    let mut qp = r.g.create_qp(ctx, (scq.id, scq.id), 16, (QP_TYPE_UDP, 0));
    r.g.admin(bind_cmd(ctx, qp.id, UNSPECIFIED, 0));
    let (buf, _) = r.g.reg_buf(ctx, 4096, MR_ACCESS_LOCAL_WRITE);
    let sge = Sge {
        addr: buf.gpa(0),
        length: 64,
        lkey: PHYS_LKEY,
    };
    let w = send_wqe(1, peer_v6().octets(), 9, &[sge]);
    r.g.post_wqes(&mut qp, true, &[w]);
    let c = r.cqes(&mut scq2);
    assert_eq!(c.len(), 1);
    assert_cqe(
        &c[0],
        CQE_STATUS_LOCAL_PROTECTION,
        CQE_DETAIL_BAD_LKEY,
        "lkey 0 in a user context",
    );
}

#[test]
fn a_physical_sge_outside_guest_ram_is_a_protection_error() {
    let mut r = rig();
    let mut q = r.raw_qp();
    let frame = eth(PEER_MAC, MAC, 0x88b5, &[0u8; 50]);
    let before = r.drain().len();
    assert_eq!(before, 0);
    for (addr, len) in [
        (RAM_BASE - 16, 64u32),           // starts below RAM
        (RAM_BASE + (64 << 20) - 32, 64), // runs past its end
        (u64::MAX - 8, 64),               // wraps
    ] {
        let mut h = wqe_hdr(WQE_OP_SEND, 7);
        h.num_sge = 1;
        let sge = Sge {
            addr,
            length: len,
            lkey: PHYS_LKEY,
        };
        r.g.post_wqes(&mut q.qp, true, &[wqe_bytes(&h, &[sge])]);
        let c = r.cqes(&mut q.scq);
        assert_eq!(c.len(), 1);
        assert_cqe(
            &c[0],
            CQE_STATUS_LOCAL_PROTECTION,
            CQE_DETAIL_OUT_OF_BOUNDS,
            "outside RAM",
        );
    }
    // A frame spanning pages inside RAM goes.
    let c = r.send(&mut q, 3, &frame, 0, RawTxOffload::default());
    assert_cqe(&c, CQE_STATUS_SUCCESS, CQE_DETAIL_NONE, "inside RAM");
    assert_eq!(r.drain(), vec![frame]);
}

// ---- sending -----------------------------------------------------------------------------

#[test]
fn a_plain_frame_goes_to_the_link_as_it_was_given() {
    let mut r = rig();
    let mut q = r.raw_qp();
    let frame = eth(
        PEER_MAC,
        MAC,
        0x0800,
        &ipv4(V4, PEER_V4, 17, udp(68, 99, b"x"), 6, false),
    );
    let c = r.send(&mut q, 0, &frame, 0, RawTxOffload::default());
    assert_cqe(&c, CQE_STATUS_SUCCESS, CQE_DETAIL_NONE, "plain frame");
    assert_eq!(c.byte_len as usize, frame.len());
    assert_eq!(r.drain(), vec![frame]);
    assert_eq!(r.stat(STAT_RAW_TX_FRAMES), 1);
    // Also inline.
    let arp = {
        let mut a = vec![0, 1, 8, 0, 6, 4, 0, 1];
        a.extend_from_slice(&MAC);
        a.extend_from_slice(&V4.octets());
        a.extend_from_slice(&[0; 6]);
        a.extend_from_slice(&PEER_V4.octets());
        eth([0xff; 6], MAC, 0x0806, &a)
    };
    let mut h = wqe_hdr(WQE_OP_SEND, 5);
    h.flags = WQE_FLAG_INLINE;
    h.inline_len = arp.len() as u32;
    let w = qpip_abi::wqe::slot_with(&h, &arp);
    r.g.post_wqes(&mut q.qp, true, &[w]);
    let c = r.cqes(&mut q.scq);
    assert_cqe(&c[0], CQE_STATUS_SUCCESS, CQE_DETAIL_NONE, "inline ARP");
    assert_eq!(r.drain(), vec![arp]);
}

#[test]
fn checksum_offload_fills_the_udp_checksum() {
    let mut r = rig();
    let mut q = r.raw_qp();
    let ip = ipv4(
        V4,
        PEER_V4,
        17,
        udp(4000, 4001, b"partial checksum"),
        6,
        true,
    );
    let frame = eth(PEER_MAC, MAC, 0x0800, &ip);
    let o = RawTxOffload {
        csum_start: 14 + 20,
        csum_offset: 6,
        ..Default::default()
    };
    let c = r.send(&mut q, 0, &frame, WQE_FLAG_CSUM, o);
    assert_cqe(&c, CQE_STATUS_SUCCESS, CQE_DETAIL_NONE, "csum");
    let out = r.drain();
    assert_eq!(out.len(), 1);
    let e = EthernetFrame::new_checked(&out[0][..]).unwrap();
    let ipp = Ipv4Packet::new_checked(e.payload()).unwrap();
    let u = UdpPacket::new_checked(ipp.payload()).unwrap();
    assert!(u.verify_checksum(&IpAddress::Ipv4(V4), &IpAddress::Ipv4(PEER_V4)));
}

#[test]
fn tso_cuts_a_super_segment_into_valid_segments() {
    let mut r = rig();
    let mut q = r.raw_qp();
    let payload: Vec<u8> = (0..20_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    for over_v6 in [false, true] {
        let mss = 1400u16;
        let t = tcp(5000, 6000, 1_000_000, 0x18 | 0x01, &payload);
        let frame = if over_v6 {
            let mut ip = vec![0u8; 40];
            ip[0] = 0x60;
            ip[4..6].copy_from_slice(&(t.len() as u16).to_be_bytes());
            ip[6] = 6;
            ip[7] = 64;
            ip[8..24].copy_from_slice(&v6().octets());
            ip[24..40].copy_from_slice(&peer_v6().octets());
            ip.extend_from_slice(&t);
            eth(PEER_MAC, MAC, 0x86dd, &ip)
        } else {
            eth(PEER_MAC, MAC, 0x0800, &ipv4(V4, PEER_V4, 6, t, 16, true))
        };
        let o = RawTxOffload {
            csum_start: 14 + if over_v6 { 40 } else { 20 },
            csum_offset: 16,
            mss,
            gso_type: if over_v6 {
                RAW_GSO_TCPV6
            } else {
                RAW_GSO_TCPV4
            },
        };
        let c = r.send(&mut q, 0, &frame, WQE_FLAG_CSUM | WQE_FLAG_TSO, o);
        assert_cqe(&c, CQE_STATUS_SUCCESS, CQE_DETAIL_NONE, "tso");
        assert_eq!(c.byte_len as usize, frame.len());
        let out = r.drain();
        assert_eq!(out.len(), payload.len().div_ceil(mss as usize), "segments");
        let mut got = Vec::new();
        let mut seq = 1_000_000u32;
        for (i, f) in out.iter().enumerate() {
            let e = EthernetFrame::new_checked(&f[..]).unwrap();
            let (src, dst, l4) = if over_v6 {
                let ip = Ipv6Packet::new_checked(e.payload()).unwrap();
                (
                    IpAddress::Ipv6(ip.src_addr()),
                    IpAddress::Ipv6(ip.dst_addr()),
                    ip.payload().to_vec(),
                )
            } else {
                let ip = Ipv4Packet::new_checked(e.payload()).unwrap();
                assert!(ip.verify_checksum(), "IPv4 header checksum of segment {i}");
                assert!(ip.total_len() as usize <= 1500);
                (
                    IpAddress::Ipv4(ip.src_addr()),
                    IpAddress::Ipv4(ip.dst_addr()),
                    ip.payload().to_vec(),
                )
            };
            let t = TcpPacket::new_checked(&l4[..]).unwrap();
            assert!(t.verify_checksum(&src, &dst), "TCP checksum of segment {i}");
            assert_eq!(t.seq_number().0 as u32, seq);
            let last = i == out.len() - 1;
            assert_eq!(t.fin(), last);
            assert_eq!(t.psh(), last);
            seq = seq.wrapping_add(t.payload().len() as u32);
            got.extend_from_slice(t.payload());
        }
        assert_eq!(got, payload);
    }
    assert_eq!(r.stat(STAT_RAW_TX_TSO), 2);
}

#[test]
fn frames_not_the_functions_own_are_refused() {
    let mut r = rig();
    let mut q = r.raw_qp();
    let other = Ipv4Addr::new(10, 7, 0, 77);
    let spoofs = [
        // Another MAC.
        eth(
            PEER_MAC,
            PEER_MAC,
            0x0800,
            &ipv4(V4, PEER_V4, 17, udp(1, 2, b"x"), 6, false),
        ),
        // Another IPv4 source.
        eth(
            PEER_MAC,
            MAC,
            0x0800,
            &ipv4(other, PEER_V4, 17, udp(1, 2, b"x"), 6, false),
        ),
        // 0.0.0.0, not DHCP.
        eth(
            PEER_MAC,
            MAC,
            0x0800,
            &ipv4(
                Ipv4Addr::UNSPECIFIED,
                PEER_V4,
                17,
                udp(1, 2, b"x"),
                6,
                false,
            ),
        ),
    ];
    for (i, f) in spoofs.iter().enumerate() {
        let c = r.send(&mut q, 0, f, 0, RawTxOffload::default());
        assert_cqe(
            &c,
            CQE_STATUS_BAD_WQE,
            CQE_DETAIL_NONE,
            &format!("spoof {i}"),
        );
    }
    assert_eq!(r.stat(STAT_RAW_TX_REFUSED), spoofs.len() as u64);
    assert!(r.drain().is_empty(), "nothing spoofed reached the link");
    // What a host sends before it has an address passes: DHCP from 0.0.0.0, DAD from ::.
    let dhcp = eth(
        [0xff; 6],
        MAC,
        0x0800,
        &ipv4(
            Ipv4Addr::UNSPECIFIED,
            Ipv4Addr::BROADCAST,
            17,
            udp(68, 67, b"discover"),
            6,
            false,
        ),
    );
    let c = r.send(&mut q, 1, &dhcp, 0, RawTxOffload::default());
    assert_cqe(&c, CQE_STATUS_SUCCESS, CQE_DETAIL_NONE, "DHCP discover");
    assert_eq!(r.drain(), vec![dhcp]);
}

// ---- receiving ---------------------------------------------------------------------------

#[test]
fn datagrams_and_segments_the_engine_does_not_own_go_to_the_raw_qp_unanswered() {
    let mut r = rig();
    let mut q = r.raw_qp();
    r.post_recvs(&mut q, 0, 8, 2048);
    let udp_frame = peer_udp4(7777, true);
    let syn = peer_syn4(8888);
    r.inject(&udp_frame);
    r.inject(&syn);
    let c = r.cqes(&mut q.rcq);
    assert_eq!(c.len(), 2, "{c:?}");
    assert_cqe(&c[0], CQE_STATUS_SUCCESS, CQE_DETAIL_NONE, "udp");
    assert_eq!(c[0].byte_len as usize, udp_frame.len());
    assert_eq!(read_frame(&r, &q, c[0].wr_id, udp_frame.len()), udp_frame);
    assert_eq!(c[0].imm_data, CQE_RAW_RX_CSUM_OK);
    assert_eq!(read_frame(&r, &q, c[1].wr_id, syn.len()), syn);
    assert_eq!(c[1].imm_data, CQE_RAW_RX_CSUM_OK);
    assert!(
        !r.drain().iter().any(|f| is_unreachable_or_rst(f)),
        "no unreachable and no RST while the raw QP exists"
    );
    // Without the raw QP the engine answers again.
    r.g.admin(cmd0(ADMIN_OP_DESTROY_QP, q.ctx, q.qp.id));
    let flushed = r.cqes(&mut q.rcq);
    assert!(flushed.iter().all(|c| c.status == CQE_STATUS_FLUSHED));
    r.inject(&udp_frame);
    r.inject(&syn);
    let answers = r.drain();
    assert_eq!(
        answers.iter().filter(|f| is_unreachable_or_rst(f)).count(),
        2,
        "port unreachable and RST after the raw QP is gone"
    );
}

#[test]
fn arp_is_copied_and_still_answered_and_echo_stays_the_engines() {
    let mut r = rig();
    let mut q = r.raw_qp();
    r.post_recvs(&mut q, 0, 8, 2048);
    let arp = arp_request();
    r.inject(&arp);
    let c = r.cqes(&mut q.rcq);
    assert_eq!(c.len(), 1);
    assert_eq!(read_frame(&r, &q, c[0].wr_id, arp.len()), arp);
    assert_eq!(c[0].imm_data, 0, "no checksum to vouch for");
    let out = r.drain();
    assert!(
        out.iter().any(|f| {
            let e = EthernetFrame::new_checked(&f[..]).unwrap();
            e.ethertype() == EthernetProtocol::Arp
                && ArpPacket::new_checked(e.payload()).unwrap().operation()
                    == smoltcp::wire::ArpOperation::Reply
        }),
        "the engine still answers ARP"
    );
    r.inject(&echo_request4());
    assert!(
        r.cqes(&mut q.rcq).is_empty(),
        "an echo request is not copied"
    );
    let out = r.drain();
    assert!(
        out.iter().any(|f| {
            let e = EthernetFrame::new_checked(&f[..]).unwrap();
            e.ethertype() == EthernetProtocol::Ipv4 && {
                let ip = Ipv4Packet::new_checked(e.payload()).unwrap();
                ip.next_header() == IpProtocol::Icmp
                    && Icmpv4Packet::new_checked(ip.payload()).unwrap().msg_type()
                        == smoltcp::wire::Icmpv4Message::EchoReply
            }
        }),
        "the engine answers the echo request"
    );
}

#[test]
fn a_bad_checksum_arrives_without_csum_ok_and_no_buffer_is_counted() {
    let mut r = rig();
    let mut q = r.raw_qp();
    r.post_recvs(&mut q, 0, 1, 2048);
    let bad = peer_udp4(7777, false);
    r.inject(&bad);
    let c = r.cqes(&mut q.rcq);
    assert_eq!(c.len(), 1);
    assert_cqe(
        &c[0],
        CQE_STATUS_SUCCESS,
        CQE_DETAIL_NONE,
        "bad checksum frame",
    );
    assert_eq!(c[0].imm_data, 0, "no CSUM_OK for a bad checksum");
    // No buffer left: dropped and counted.
    r.inject(&peer_udp4(7777, true));
    assert_eq!(r.stat(STAT_RAW_RX_NO_WR), 1);
    // A buffer too small: LOCAL_LENGTH.
    r.post_recvs(&mut q, 1, 1, 16);
    r.inject(&peer_udp4(7777, true));
    let c = r.cqes(&mut q.rcq);
    assert_eq!(c.len(), 1);
    assert_cqe(&c[0], CQE_STATUS_LOCAL_LENGTH, CQE_DETAIL_NONE, "too long");
    assert_eq!(r.stat(STAT_RAW_RX_TOO_LONG), 1);
    assert_eq!(r.stat(STAT_RAW_RX_FRAMES), 1);
}

#[test]
fn query_stats_writes_what_fits() {
    let mut r = rig();
    let mut g = r.g;
    let _ = &mut r.far;
    let buf = {
        let ctx = g.create_ctx();
        g.reg_buf(ctx, 4096, MR_ACCESS_LOCAL_WRITE).0
    };
    for (len, want) in [(8u32, 1u64), (64 * 8, 64), (96 * 8, 96), (4096, 96)] {
        let c = g.admin_any(query_cmd(ADMIN_OP_QUERY_STATS, buf.gpa(0), len));
        assert_eq!(c.status, ADMIN_STATUS_OK);
        assert_eq!(c.result0, want, "len {len}");
    }
    let c = g.admin_any(query_cmd(ADMIN_OP_QUERY_STATS, buf.gpa(0), 7));
    assert_eq!(c.status, ADMIN_STATUS_BAD_PARAM);
}

/// An IPv6 packet from the peer to the device: `next` around `l4`, whose checksum at
/// `csum_at` is filled in.
fn peer_ipv6(
    dst_mac: [u8; 6],
    dst: Ipv6Addr,
    next: u8,
    mut l4: Vec<u8>,
    csum_at: usize,
    hop: u8,
) -> Vec<u8> {
    let src = peer_v6();
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
    eth(dst_mac, PEER_MAC, 0x86dd, &ip)
}

#[test]
fn over_ipv6_a_closed_port_goes_to_the_raw_qp_and_neighbour_discovery_is_copied() {
    let mut r = rig();
    let mut q = r.raw_qp();
    r.post_recvs(&mut q, 0, 8, 2048);
    let d = peer_ipv6(MAC, v6(), 17, udp(5555, 7777, b"v6 for the kernel"), 6, 64);
    r.inject(&d);
    // A neighbour solicitation for the device's address, to its solicited-node group.
    let target = v6();
    let o = target.octets();
    let group: Ipv6Addr = Ipv6Addr::new(
        0xff02,
        0,
        0,
        0,
        0,
        1,
        0xff00 | o[13] as u16,
        u16::from_be_bytes([o[14], o[15]]),
    );
    let mut ns = vec![135, 0, 0, 0, 0, 0, 0, 0];
    ns.extend_from_slice(&o);
    ns.extend_from_slice(&[1, 1]);
    ns.extend_from_slice(&PEER_MAC);
    let gm = group.octets();
    let ns = peer_ipv6(
        [0x33, 0x33, gm[12], gm[13], gm[14], gm[15]],
        group,
        58,
        ns,
        2,
        255,
    );
    r.inject(&ns);
    let c = r.cqes(&mut q.rcq);
    assert_eq!(c.len(), 2, "{c:?}");
    assert_eq!(read_frame(&r, &q, c[0].wr_id, d.len()), d);
    assert_eq!(c[0].imm_data, CQE_RAW_RX_CSUM_OK);
    assert_eq!(read_frame(&r, &q, c[1].wr_id, ns.len()), ns);
    let out = r.drain();
    let icmp6 = |f: &Vec<u8>| -> Option<Icmpv6Message> {
        let e = EthernetFrame::new_checked(&f[..]).ok()?;
        let ip = Ipv6Packet::new_checked(e.payload()).ok()?;
        (ip.next_header() == IpProtocol::Icmpv6)
            .then(|| Icmpv6Packet::new_checked(ip.payload()).unwrap().msg_type())
    };
    assert!(
        out.iter()
            .any(|f| icmp6(f) == Some(Icmpv6Message::NeighborAdvert)),
        "the engine still answers the solicitation"
    );
    assert!(
        !out.iter()
            .any(|f| icmp6(f) == Some(Icmpv6Message::DstUnreachable)),
        "no port unreachable while the raw QP exists"
    );
}

#[test]
fn what_the_device_sends_itself_is_never_steered() {
    let mut r = rig();
    let mut q = r.raw_qp();
    r.post_recvs(&mut q, 0, 8, 2048);
    // A CONNECT to the device's own address on a port nobody listens on is refused at
    // once (the engine's own RST), raw QP or not.
    let ctx = r.g.create_ctx();
    let cq = r.g.create_cq(ctx, 16);
    let qp =
        r.g.create_qp(ctx, (cq.id, cq.id), 16, (QP_TYPE_TCP, FRAMING_STREAM));
    let c = r.g.admin_any(connect_cmd(ctx, qp.id, v6().octets(), 4444));
    assert_eq!(c.status, ADMIN_STATUS_REFUSED, "{c:?}");
    assert!(
        r.cqes(&mut q.rcq).is_empty(),
        "nothing looped reached the raw QP"
    );
}

#[test]
fn frames_too_short_too_long_or_with_offloads_outside_them_are_refused() {
    let mut r = rig();
    let mut q = r.raw_qp();
    let none = RawTxOffload::default();
    let ok = eth(PEER_MAC, MAC, 0x88b5, &[7u8; 100]);
    let csum_past_end = RawTxOffload {
        csum_start: 14,
        csum_offset: 99,
        ..none
    };
    let tso_not_tcp = RawTxOffload {
        csum_start: 34,
        csum_offset: 16,
        mss: 1000,
        gso_type: RAW_GSO_TCPV4,
    };
    let cases: [(&str, Vec<u8>, u8, RawTxOffload); 5] = [
        ("too short", ok[..16].to_vec(), 0, none),
        (
            "beyond the MTU",
            eth(PEER_MAC, MAC, 0x88b5, &[7u8; 1501]),
            0,
            none,
        ),
        (
            "checksum field past the end",
            ok.clone(),
            WQE_FLAG_CSUM,
            csum_past_end,
        ),
        (
            "TSO of no TCP frame",
            ok.clone(),
            WQE_FLAG_CSUM | WQE_FLAG_TSO,
            tso_not_tcp,
        ),
        ("TSO without CSUM", ok.clone(), WQE_FLAG_TSO, tso_not_tcp),
    ];
    for (i, (what, f, flags, o)) in cases.iter().enumerate() {
        let c = r.send(&mut q, i as u64, f, *flags, *o);
        assert_cqe(&c, CQE_STATUS_BAD_WQE, CQE_DETAIL_NONE, what);
    }
    assert_eq!(r.stat(STAT_RAW_TX_REFUSED), cases.len() as u64);
    assert!(r.drain().is_empty());
    // The largest frame the MTU allows goes.
    let full = eth(PEER_MAC, MAC, 0x88b5, &[7u8; 1500]);
    let c = r.send(&mut q, 9, &full, 0, none);
    assert_cqe(&c, CQE_STATUS_SUCCESS, CQE_DETAIL_NONE, "MTU-sized frame");
    assert_eq!(r.drain(), vec![full]);
}

#[test]
fn fragments_are_copied_to_a_physical_buffer_without_csum_ok() {
    let mut r = rig();
    let mut q = r.raw_qp();
    // Receive buffers named by guest-physical address.
    let ws: Vec<WqeBytes> = (0..4u64)
        .map(|i| {
            let sge = Sge {
                addr: q.buf.gpa(i * SLOT),
                length: 2048,
                lkey: PHYS_LKEY,
            };
            recv_wqe(i, &[sge])
        })
        .collect();
    r.g.post_wqes(&mut q.qp, false, &ws);
    r.settle();
    // A UDP datagram to a closed port in two IPv4 fragments.
    let whole = ipv4(PEER_V4, V4, 17, udp(5555, 7777, &[0x5a; 64]), 6, false);
    let l4 = &whole[20..];
    let frag = |offset: usize, data: &[u8], more: bool| {
        let mut ip = whole[..20].to_vec();
        ip[2..4].copy_from_slice(&((20 + data.len()) as u16).to_be_bytes());
        let field = (offset / 8) as u16 | if more { 0x2000 } else { 0 };
        ip[6..8].copy_from_slice(&field.to_be_bytes());
        ip[10..12].copy_from_slice(&[0, 0]);
        let h = !fold(sum(&ip));
        ip[10..12].copy_from_slice(&h.to_be_bytes());
        ip.extend_from_slice(data);
        eth(MAC, PEER_MAC, 0x0800, &ip)
    };
    let (f1, f2) = (frag(0, &l4[..32], true), frag(32, &l4[32..], false));
    r.inject(&f1);
    r.inject(&f2);
    let c = r.cqes(&mut q.rcq);
    assert_eq!(c.len(), 2, "both fragments, once each: {c:?}");
    for (c, f) in c.iter().zip([&f1, &f2]) {
        assert_cqe(c, CQE_STATUS_SUCCESS, CQE_DETAIL_NONE, "fragment");
        assert_eq!(c.imm_data, 0, "no checksum vouched for a fragment");
        assert_eq!(&read_frame(&r, &q, c.wr_id, f.len()), f);
    }
    assert_eq!(
        r.stat(STAT_NET_REASSEMBLED),
        1,
        "the engine reassembled it too"
    );
    assert!(
        !r.drain().iter().any(|f| is_unreachable_or_rst(f)),
        "the reassembled datagram is the kernel's to answer"
    );
}

/// A link with receive offloads (a TAP) hands over TCP super-frames its host merged; the
/// raw QP takes frames of at most the MTU, so the device cuts one into segments, each in a
/// buffer of its own with a valid checksum, the payload rejoined unchanged.
#[test]
fn a_merged_super_frame_reaches_the_raw_qp_as_segments_that_fit() {
    let mut r = rig_on(memory::pair_gso().unwrap());
    let mut q = r.raw_qp();
    r.post_recvs(&mut q, 0, 8, 2048);
    let payload: Vec<u8> = (0..4000u32).map(|i| (i * 7 + 3) as u8).collect();
    let ip = ipv4(
        PEER_V4,
        V4,
        6,
        tcp(40000, 9999, 1000, 0x18, &payload),
        16,
        false,
    );
    let frame = eth(MAC, PEER_MAC, 0x0800, &ip);
    assert!(frame.len() > 1514);
    r.inject(&frame);
    let c = r.cqes(&mut q.rcq);
    assert_eq!(c.len(), 3, "4000 bytes in segments of 1460: {c:?}");
    let mut joined = Vec::new();
    let mut seq = 1000u32;
    for cqe in &c {
        assert_cqe(cqe, CQE_STATUS_SUCCESS, CQE_DETAIL_NONE, "segment");
        assert!(cqe.byte_len as usize <= 1514, "{cqe:?}");
        assert_eq!(cqe.imm_data, CQE_RAW_RX_CSUM_OK);
        let f = read_frame(&r, &q, cqe.wr_id, cqe.byte_len as usize);
        let eth = EthernetFrame::new_checked(&f[..]).unwrap();
        let ip = Ipv4Packet::new_checked(eth.payload()).unwrap();
        assert!(ip.verify_checksum());
        let t = TcpPacket::new_checked(ip.payload()).unwrap();
        let (s, d) = (IpAddress::Ipv4(PEER_V4), IpAddress::Ipv4(V4));
        assert!(t.verify_checksum(&s, &d), "TCP checksum of a segment");
        assert_eq!(t.seq_number().0 as u32, seq);
        seq += t.payload().len() as u32;
        joined.extend_from_slice(t.payload());
    }
    assert_eq!(joined, payload);
    assert_eq!(r.stat(STAT_RAW_RX_TOO_LONG), 0);
}

/// A raw QP created with `RAW_RX_MERGEABLE` on `r`, receive buffers of `len` bytes posted
/// in slots `0..n`.
fn mergeable_qp(r: &mut Rig, n: u64, len: u32) -> RawQp {
    let ctx = r.g.create_ctx_flags(CTX_FLAG_KERNEL).unwrap();
    let scq = r.g.create_cq(ctx, 64);
    let rcq = r.g.create_cq(ctx, 64);
    let qp =
        r.g.try_create_qp(
            ctx,
            (scq.id, rcq.id),
            32,
            (QP_TYPE_RAW_ETH, RAW_RX_MERGEABLE),
        )
        .unwrap();
    let (buf, mr) = r.g.reg_buf(ctx, BUF, MR_ACCESS_LOCAL_WRITE);
    let mut q = RawQp {
        ctx,
        qp,
        scq,
        rcq,
        buf,
        mr,
    };
    r.post_recvs(&mut q, 0, n, len);
    q
}

/// With mergeable buffers a merged TCP super-frame arrives whole across consecutive
/// receive WQEs (MORE on all but the last), the last carrying its GSO type and segment
/// size; a plain frame still takes one buffer; too few buffers posted for a frame drop
/// it whole, taking none.
#[test]
fn mergeable_buffers_take_a_super_frame_whole() {
    let mut r = rig_on(memory::pair_gso().unwrap());
    let mut q = mergeable_qp(&mut r, 8, 2048);
    let payload: Vec<u8> = (0..5000u32).map(|i| (i * 13 + 1) as u8).collect();
    let ip = ipv4(
        PEER_V4,
        V4,
        6,
        tcp(40000, 9999, 1000, 0x18, &payload),
        16,
        false,
    );
    let frame = eth(MAC, PEER_MAC, 0x0800, &ip);
    r.inject(&frame);
    let c = r.cqes(&mut q.rcq);
    assert_eq!(c.len(), 3, "5054 bytes in buffers of 2048: {c:?}");
    let mut joined = Vec::new();
    for (i, cqe) in c.iter().enumerate() {
        assert_cqe(cqe, CQE_STATUS_SUCCESS, CQE_DETAIL_NONE, "piece");
        joined.extend(read_frame(&r, &q, cqe.wr_id, cqe.byte_len as usize));
        if i < 2 {
            assert_eq!(cqe.imm_data, CQE_RAW_RX_MORE, "{cqe:?}");
        } else {
            assert_eq!(
                cqe.imm_data,
                CQE_RAW_RX_CSUM_OK | CQE_RAW_RX_GSO_TCPV4,
                "{cqe:?}"
            );
            assert_eq!(cqe.src_port, 1460, "the segment size");
        }
    }
    assert_eq!(joined, frame);
    // A plain frame: one buffer, no flags but the checksum's.
    let small = peer_udp4(7777, true);
    r.inject(&small);
    let c = r.cqes(&mut q.rcq);
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(c[0].imm_data, CQE_RAW_RX_CSUM_OK);
    assert_eq!(read_frame(&r, &q, c[0].wr_id, small.len()), small);
    // Four buffers are left: a frame needing three more than that is dropped whole.
    let big: Vec<u8> = (0..12000u32).map(|i| i as u8).collect();
    let ip = ipv4(
        PEER_V4,
        V4,
        6,
        tcp(40000, 9999, 6000, 0x18, &big),
        16,
        false,
    );
    r.inject(&eth(MAC, PEER_MAC, 0x0800, &ip));
    assert!(r.cqes(&mut q.rcq).is_empty());
    assert_eq!(r.stat(STAT_RAW_RX_NO_WR), 1);
    // The buffers are still there for what fits.
    r.inject(&small);
    assert_eq!(r.cqes(&mut q.rcq).len(), 1);
}

/// With mergeable buffers, a piece that cannot be placed (its buffer outside guest RAM)
/// completes in error, still with MORE when pieces follow, so the frame's end stays
/// where the driver expects it; the next frame starts afresh.
#[test]
fn a_mergeable_piece_that_cannot_be_placed_keeps_the_frame_boundary() {
    let mut r = rig_on(memory::pair_gso().unwrap());
    let mut q = mergeable_qp(&mut r, 0, 0);
    let bad = Sge {
        addr: RAM_BASE + (64 << 20) - 32,
        length: 2048,
        lkey: PHYS_LKEY,
    };
    let ws = vec![
        recv_wqe(0, &[q.buf.sge(0, 2048, q.mr.lkey)]),
        recv_wqe(1, &[bad]),
        recv_wqe(2, &[q.buf.sge(2 * SLOT, 2048, q.mr.lkey)]),
        recv_wqe(3, &[q.buf.sge(3 * SLOT, 2048, q.mr.lkey)]),
    ];
    r.g.post_wqes(&mut q.qp, false, &ws);
    r.settle();
    let payload = vec![0x5au8; 5000];
    let ip = ipv4(
        PEER_V4,
        V4,
        6,
        tcp(40000, 9999, 1000, 0x18, &payload),
        16,
        false,
    );
    r.inject(&eth(MAC, PEER_MAC, 0x0800, &ip));
    let c = r.cqes(&mut q.rcq);
    assert_eq!(c.len(), 3, "{c:?}");
    assert_cqe(&c[0], CQE_STATUS_SUCCESS, CQE_DETAIL_NONE, "first piece");
    assert_eq!(c[0].imm_data, CQE_RAW_RX_MORE);
    assert_cqe(
        &c[1],
        CQE_STATUS_LOCAL_PROTECTION,
        CQE_DETAIL_OUT_OF_BOUNDS,
        "outside RAM",
    );
    assert_eq!(
        c[1].imm_data, CQE_RAW_RX_MORE,
        "more follows the failed piece"
    );
    assert_eq!(c[2].imm_data & CQE_RAW_RX_MORE, 0, "the frame's last piece");
    // The next frame takes the last buffer, whole.
    let small = peer_udp4(7777, true);
    r.inject(&small);
    let c = r.cqes(&mut q.rcq);
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(read_frame(&r, &q, c[0].wr_id, small.len()), small);
}
