//! Sending: frames as given, checksum offload, TSO, and what is refused.

use super::*;

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
