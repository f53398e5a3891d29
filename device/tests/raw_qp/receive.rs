//! Receiving: the steering between the engine and the raw QP, one frame a buffer.

use super::*;

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
    l4: Vec<u8>,
    csum_at: usize,
    hop: u8,
) -> Vec<u8> {
    let ip = ipv6(peer_v6(), dst, next, l4, csum_at, hop);
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
