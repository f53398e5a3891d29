//! The port split, seen on the wire: a port is the kernel's (the raw QP's) until a QP or
//! listener takes it, the engine's while one holds it — what arrives for it goes to the
//! engine alone, and what the raw QP sends from it never reaches the link (dropped and
//! counted, its WR completing SUCCESS) — and the kernel's again once it is let go. Per
//! protocol, over IPv4 and IPv6; and a connection the engine holds keeps its segments
//! from the raw QP.

use super::*;

/// The port the kernel and a QP contend for.
const P: u16 = 7070;
/// The peer's port the kernel's frames go to.
const PEER_PORT: u16 = 5555;
/// The raw QP's buffer slot its sends are written to (receive buffers take the first).
const SEND_SLOT: u64 = 48;

#[derive(Clone, Copy, Debug)]
enum Family {
    V4,
    V6,
}

const FAMILIES: [Family; 2] = [Family::V4, Family::V6];

impl Family {
    /// An Ethernet frame around `proto`'s `l4` (its checksum at `csum_at` filled in): from
    /// the peer to the device, or (`from_peer` false) from the device's address to the
    /// peer's, as the kernel sends it.
    fn frame(self, from_peer: bool, proto: u8, l4: Vec<u8>, csum_at: usize) -> Vec<u8> {
        let (dst_mac, src_mac) = if from_peer {
            (MAC, PEER_MAC)
        } else {
            (PEER_MAC, MAC)
        };
        match self {
            Family::V4 => {
                let (s, d) = if from_peer {
                    (PEER_V4, V4)
                } else {
                    (V4, PEER_V4)
                };
                eth(
                    dst_mac,
                    src_mac,
                    0x0800,
                    &ipv4(s, d, proto, l4, csum_at, false),
                )
            }
            Family::V6 => {
                let (s, d) = if from_peer {
                    (peer_v6(), v6())
                } else {
                    (v6(), peer_v6())
                };
                eth(
                    dst_mac,
                    src_mac,
                    0x86dd,
                    &ipv6(s, d, proto, l4, csum_at, 64),
                )
            }
        }
    }
}

/// A UDP datagram from the peer to port `P`.
fn peer_udp(f: Family) -> Vec<u8> {
    f.frame(
        true,
        17,
        udp(PEER_PORT, P, b"a datagram for port P, whoever"),
        6,
    )
}

/// A TCP segment from the peer's port `sport` to port `P`.
fn peer_tcp(f: Family, sport: u16, seq: u32, ack: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut t = tcp(sport, P, seq, flags, payload);
    t[8..12].copy_from_slice(&ack.to_be_bytes());
    f.frame(true, 6, t, 16)
}

fn peer_syn(f: Family, sport: u16) -> Vec<u8> {
    peer_tcp(f, sport, 7, 0, 0x02, &[])
}

/// The kernel's UDP datagram from port `P`.
fn kernel_udp(f: Family) -> Vec<u8> {
    f.frame(
        false,
        17,
        udp(P, PEER_PORT, b"the kernel's datagram from port P"),
        6,
    )
}

/// The kernel's TCP segment (PSH, ACK, data) from port `P`.
fn kernel_tcp(f: Family) -> Vec<u8> {
    let mut t = tcp(
        P,
        PEER_PORT,
        1000,
        0x18,
        b"the kernel's segment from port P",
    );
    t[8..12].copy_from_slice(&1u32.to_be_bytes());
    f.frame(false, 6, t, 16)
}

/// The TCP header of a frame the device sent, if it is one.
fn tcp_of(f: &[u8]) -> Option<TcpPacket<&[u8]>> {
    if f.len() < 54 {
        return None;
    }
    let l4 = match u16::from_be_bytes([f[12], f[13]]) {
        0x0800 if f[23] == 6 => &f[14 + (f[14] & 0x0f) as usize * 4..],
        0x86dd if f[20] == 6 => &f[54..],
        _ => return None,
    };
    TcpPacket::new_checked(l4).ok()
}

/// The device's SYN-ACK from port `P` to the peer's port `sport` among `out`: its sequence
/// number.
fn syn_ack_to(out: &[Vec<u8>], sport: u16) -> Option<u32> {
    out.iter().find_map(|f| {
        let t = tcp_of(f)?;
        (t.syn() && t.ack() && t.src_port() == P && t.dst_port() == sport)
            .then(|| t.seq_number().0 as u32)
    })
}

impl Rig {
    /// Sends `frame` through the raw QP, which completes it SUCCESS with its length
    /// whatever becomes of it: whether it reached the link.
    fn raw_send_reaches_link(&mut self, q: &mut RawQp, frame: &[u8]) -> bool {
        self.drain();
        let c = self.send(q, SEND_SLOT, frame, 0, RawTxOffload::default());
        assert_cqe(&c, CQE_STATUS_SUCCESS, CQE_DETAIL_NONE, "raw send");
        assert_eq!(c.byte_len as usize, frame.len());
        self.drain().iter().any(|f| f == frame)
    }

    /// The frames the raw QP received since the last look, each as it came (its receive
    /// buffers are the first slots, one a frame).
    fn raw_received(&mut self, q: &mut RawQp) -> Vec<Vec<u8>> {
        let c = self.cqes(&mut q.rcq);
        c.iter()
            .map(|c| {
                assert_cqe(c, CQE_STATUS_SUCCESS, CQE_DETAIL_NONE, "raw receive");
                read_frame(self, q, c.wr_id, c.byte_len as usize)
            })
            .collect()
    }

    /// A UDP QP bound to port `P` on every address, one receive posted.
    fn udp_qp_on_p(&mut self) -> Endpoint {
        let ctx = self.g.create_ctx();
        let scq = self.g.create_cq(ctx, 16);
        let rcq = self.g.create_cq(ctx, 16);
        let qp = self.g.create_qp(ctx, (scq.id, rcq.id), 8, (QP_TYPE_UDP, 0));
        let c = self.g.admin(bind_cmd(ctx, qp.id, UNSPECIFIED, P));
        assert_eq!((c.status, c.result0), (ADMIN_STATUS_OK, P as u64), "BIND");
        let (buf, mr) = self.g.reg_buf(ctx, 4096, MR_ACCESS_LOCAL_WRITE);
        let mut e = Endpoint::unbound(qp, (scq, rcq), buf, mr);
        self.g.post_recvs(&mut e, &[(0, 2048, 1)]);
        self.settle();
        e
    }

    /// A listener on TCP port `P`, every address, in a context of its own: (context,
    /// listener).
    fn listener_on_p(&mut self) -> (u32, u32) {
        let ctx = self.g.create_ctx();
        let c = self.g.admin(listen_cmd(ctx, UNSPECIFIED, P, 4));
        assert_eq!(c.status, ADMIN_STATUS_OK, "LISTEN");
        (ctx, c.result0 as u32)
    }

    /// The bytes the TCP QP `e` received since the last look.
    fn tcp_received(&mut self, e: &mut Endpoint) -> u32 {
        let c = self.cqes(&mut e.rcq);
        c.iter()
            .map(|c| {
                assert_cqe(c, CQE_STATUS_SUCCESS, CQE_DETAIL_NONE, "TCP QP receive");
                c.byte_len
            })
            .sum()
    }

    /// What becomes of the kernel's own UDP datagram and TCP segment from port `P`: whether
    /// each reached the link.
    fn kernel_from_p(&mut self, q: &mut RawQp, f: Family) -> (bool, bool) {
        let u = self.raw_send_reaches_link(q, &kernel_udp(f));
        let t = self.raw_send_reaches_link(q, &kernel_tcp(f));
        (u, t)
    }
}

/// Before a QP holds port P, P is the kernel's: a SYN and a datagram to it go to the raw QP
/// (unanswered), and the kernel's frames from it go out. A UDP QP bound to P takes the
/// datagram, a listener on P answers the SYN, the raw QP gets neither, and the kernel's
/// frames from P of the held protocol are dropped and counted — per protocol: while only
/// UDP P is held, TCP P is still the kernel's. Once the QP and the listener let P go, all
/// of it is the kernel's again.
#[test]
fn a_port_is_the_kernels_until_a_qp_takes_it_and_again_once_let_go() {
    for f in FAMILIES {
        let mut r = rig();
        let mut q = r.raw_qp();
        r.post_recvs(&mut q, 0, 16, 2048);

        // (a) Nobody holds P.
        let (datagram, syn) = (peer_udp(f), peer_syn(f, 40000));
        r.inject(&datagram);
        r.inject(&syn);
        assert_eq!(r.raw_received(&mut q), vec![datagram.clone(), syn], "{f:?}");
        assert_eq!(
            syn_ack_to(&r.drain(), 40000),
            None,
            "{f:?}: not the engine's"
        );
        assert_eq!(r.kernel_from_p(&mut q, f), (true, true), "{f:?}");

        // (b) A UDP QP binds P: the datagram is the engine's; TCP P is still the kernel's.
        let mut u = r.udp_qp_on_p();
        r.inject(&datagram);
        let mut got = Vec::new();
        r.g.reap(&mut u.rcq, &mut got);
        assert_eq!(got.len(), 1, "{f:?}: the datagram is the UDP QP's: {got:?}");
        assert_cqe(
            &got[0],
            CQE_STATUS_SUCCESS,
            CQE_DETAIL_NONE,
            "UDP QP receive",
        );
        assert_eq!(got[0].src_port, PEER_PORT);
        let syn = peer_syn(f, 40001);
        r.inject(&syn);
        assert_eq!(r.raw_received(&mut q), vec![syn], "{f:?}: only the SYN");
        assert_eq!(r.kernel_from_p(&mut q, f), (false, true), "{f:?}");
        assert_eq!(r.stat(STAT_RAW_TX_PORT_HELD), 1, "{f:?}");

        // A listener takes TCP P: it answers the SYN, the raw QP sees none of it.
        let (lctx, listener) = r.listener_on_p();
        r.inject(&peer_syn(f, 40002));
        assert!(
            syn_ack_to(&r.drain(), 40002).is_some(),
            "{f:?}: the listener answers"
        );
        r.inject(&datagram);
        assert_eq!(r.raw_received(&mut q), Vec::<Vec<u8>>::new(), "{f:?}");
        let sent_before = r.stat(STAT_RAW_TX_FRAMES);
        assert_eq!(r.kernel_from_p(&mut q, f), (false, false), "{f:?}");
        assert_eq!(r.stat(STAT_RAW_TX_PORT_HELD), 3, "{f:?}");
        assert_eq!(
            r.stat(STAT_RAW_TX_FRAMES),
            sent_before,
            "{f:?}: a dropped frame is not one sent"
        );
        assert_eq!(r.stat(STAT_RAW_TX_REFUSED), 0, "{f:?}: nor one refused");

        // (c) Both let P go: it is the kernel's again.
        r.g.admin(cmd0(ADMIN_OP_DESTROY_LISTENER, lctx, listener));
        r.g.admin(cmd0(ADMIN_OP_DESTROY_QP, u.ctx, u.qp.id));
        r.drain();
        let syn = peer_syn(f, 40003);
        r.inject(&datagram);
        r.inject(&syn);
        assert_eq!(r.raw_received(&mut q), vec![datagram, syn], "{f:?}");
        assert_eq!(syn_ack_to(&r.drain(), 40003), None, "{f:?}");
        assert_eq!(r.kernel_from_p(&mut q, f), (true, true), "{f:?}");
        assert_eq!(r.stat(STAT_RAW_TX_PORT_HELD), 3, "{f:?}");
    }
}

/// A frame from another of the device's ports, or to port P from another source port, is
/// none of the split's business: only the source port the kernel sends from counts.
#[test]
fn only_the_kernels_source_port_is_checked() {
    for f in FAMILIES {
        let mut r = rig();
        let mut q = r.raw_qp();
        let _u = r.udp_qp_on_p();
        let other = f.frame(false, 17, udp(P + 1, P, b"from another port, to port P"), 6);
        assert!(r.raw_send_reaches_link(&mut q, &other), "{f:?}");
        assert!(!r.raw_send_reaches_link(&mut q, &kernel_udp(f)), "{f:?}");
        assert_eq!(r.stat(STAT_RAW_TX_PORT_HELD), 1, "{f:?}");
    }
}

/// A connection the engine holds (accepted by a listener on P) keeps its segments from the
/// raw QP, also once its listener is gone; the kernel cannot send into it while P is held.
#[test]
fn a_connection_the_engine_holds_never_reaches_the_raw_qp() {
    for f in FAMILIES {
        let mut r = rig();
        let mut q = r.raw_qp();
        r.post_recvs(&mut q, 0, 16, 2048);
        let (ctx, listener) = r.listener_on_p();
        let scq = r.g.create_cq(ctx, 16);
        let rcq = r.g.create_cq(ctx, 16);
        let qp =
            r.g.create_qp(ctx, (scq.id, rcq.id), 8, (QP_TYPE_TCP, FRAMING_STREAM));
        let (buf, mr) = r.g.reg_buf(ctx, 4096, MR_ACCESS_LOCAL_WRITE);
        let mut e = Endpoint::unbound(qp, (scq, rcq), buf, mr);
        r.g.post_recvs(&mut e, &[(0, 1024, 1), (1024, 1024, 2)]);
        r.g.submit(accept_cmd(ctx, listener, e.qp.id));
        let sport = 41000;
        r.inject(&peer_syn(f, sport));
        let isn = syn_ack_to(&r.drain(), sport).expect("SYN-ACK");
        let ack = isn.wrapping_add(1);
        r.inject(&peer_tcp(f, sport, 8, ack, 0x10, &[]));
        let accepted = r.g.admin_done().expect("ACCEPT completes");
        assert_eq!(accepted.status, ADMIN_STATUS_OK, "{f:?}");

        let data = b"a segment of the engine's connection";
        r.inject(&peer_tcp(f, sport, 8, ack, 0x18, data));
        assert_eq!(r.raw_received(&mut q), Vec::<Vec<u8>>::new(), "{f:?}");
        assert_eq!(r.tcp_received(&mut e), data.len() as u32, "{f:?}: the QP's");
        let forged = {
            let mut t = tcp(P, sport, ack, 0x18, b"the kernel's forged data");
            t[8..12].copy_from_slice(&(8 + data.len() as u32).to_be_bytes());
            f.frame(false, 6, t, 16)
        };
        assert!(!r.raw_send_reaches_link(&mut q, &forged), "{f:?}");

        // The listener goes; its connection stays the engine's.
        r.g.admin(cmd0(ADMIN_OP_DESTROY_LISTENER, ctx, listener));
        r.drain();
        let more = b"another segment of it";
        let seq = 8 + data.len() as u32;
        r.inject(&peer_tcp(f, sport, seq, ack, 0x18, more));
        assert_eq!(r.raw_received(&mut q), Vec::<Vec<u8>>::new(), "{f:?}");
        assert_eq!(r.tcp_received(&mut e), more.len() as u32, "{f:?}: the QP's");
    }
}

/// A TSO super-segment the kernel sends from a held port is dropped whole, before it is
/// cut: no segment of it reaches the link, and it counts once.
#[test]
fn a_super_segment_from_a_held_port_is_dropped_whole() {
    for f in FAMILIES {
        let mut r = rig();
        let mut q = r.raw_qp();
        let _listener = r.listener_on_p();
        let payload: Vec<u8> = (0..6000u32).map(|i| (i * 11) as u8).collect();
        let frame = f.frame(false, 6, tcp(P, PEER_PORT, 1, 0x18, &payload), 16);
        let (iph, gso_type) = match f {
            Family::V4 => (20, RAW_GSO_TCPV4),
            Family::V6 => (40, RAW_GSO_TCPV6),
        };
        let o = RawTxOffload {
            csum_start: 14 + iph,
            csum_offset: 16,
            mss: 1400,
            gso_type,
        };
        r.drain();
        let c = r.send(&mut q, SEND_SLOT, &frame, WQE_FLAG_CSUM | WQE_FLAG_TSO, o);
        assert_cqe(&c, CQE_STATUS_SUCCESS, CQE_DETAIL_NONE, "TSO send");
        assert_eq!(c.byte_len as usize, frame.len());
        assert_eq!(
            r.drain(),
            Vec::<Vec<u8>>::new(),
            "{f:?}: nothing on the link"
        );
        assert_eq!(r.stat(STAT_RAW_TX_PORT_HELD), 1, "{f:?}");
        assert_eq!(r.stat(STAT_RAW_TX_TSO), 0, "{f:?}: not one sent");
    }
}
