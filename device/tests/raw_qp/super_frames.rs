//! TCP super-frames a link merged: cut to the MTU, or whole in mergeable buffers.

use super::*;

/// A link with receive offloads (a TAP) hands over TCP super-frames its host merged; the
/// raw QP takes frames of at most the MTU, so the device cuts one into segments, each in a
/// buffer of its own with a valid checksum, the payload rejoined unchanged.
#[test]
fn a_merged_super_frame_reaches_the_raw_qp_as_segments_that_fit() {
    let mut r = rig_on(memory::pair_gso().unwrap());
    let mut q = r.raw_qp();
    r.post_recvs(&mut q, 0, 8, 2048);
    let payload: Vec<u8> = (0..4000u32).map(|i| (i * 7 + 3) as u8).collect();
    let frame = peer_super_frame(&payload);
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

/// What a link that merges segments hands over: the peer's TCP segment (IPv4, sequence
/// number 1000, port 40000 to 9999) of all of `payload`, however long.
fn peer_super_frame(payload: &[u8]) -> Vec<u8> {
    let ip = ipv4(
        PEER_V4,
        V4,
        6,
        tcp(40000, 9999, 1000, 0x18, payload),
        16,
        false,
    );
    eth(MAC, PEER_MAC, 0x0800, &ip)
}

/// A raw QP created with `RAW_RX_MERGEABLE` on `r`, receive buffers of `len` bytes posted
/// in slots `0..n`.
fn mergeable_qp(r: &mut Rig, n: u64, len: u32) -> RawQp {
    let mut q = r.raw_qp_framed(RAW_RX_MERGEABLE);
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
    let frame = peer_super_frame(&payload);
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
    r.inject(&peer_super_frame(&payload));
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
