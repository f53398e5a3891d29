//! Fragmentation both ways: large datagrams sent in fragments on every MTU, TCP
//! super-segments cut at their piece size, and reassembly in any order, with duplicates,
//! overlaps (RFC 5722), timeouts and bad fragments.

use std::time::Duration;

use crate::net_oracle::{self, Parsed};
use crate::peer::*;
use qpip_device::net::{DropReason, StaticNeighbor};

#[test]
fn sends_large_datagrams_in_fragments() {
    for mtu in [1280usize, 1500, 9000] {
        let mut c = config();
        c.mtu = mtu;
        let (mut s, t) = stack_with(c);
        introduce_peer(&mut s, t);
        for size in [mtu - 48, mtu - 47, 20000, 65527] {
            let payload: Vec<u8> = (0..size).map(|i| (i * 31 % 251) as u8).collect();
            s.send_udp(None, 777, PEER, 888, &payload, t).unwrap();
            let frames = drain(&mut s);
            let mut d = net_oracle::Defrag::default();
            let mut got = None;
            let mut ids = std::collections::HashSet::new();
            for f in &frames {
                match &f.parsed {
                    Parsed::Udp { payload: p, .. } => got = Some(p.clone()),
                    Parsed::Fragment { ip_len, id, .. } => {
                        assert!(*ip_len <= mtu, "fragment of {ip_len} bytes on a {mtu} link");
                        ids.insert(*id);
                        if let Some(Parsed::Udp {
                            payload: p,
                            sport,
                            dport,
                            ..
                        }) = d.add(&f.parsed)
                        {
                            assert_eq!((sport, dport), (777, 888));
                            got = Some(p);
                        }
                    }
                    p => panic!("{p:?}"),
                }
            }
            if got.as_deref() != Some(&payload[..]) {
                for f in &frames {
                    if let Parsed::Fragment {
                        offset,
                        more,
                        id,
                        data,
                        ip_len,
                        next_header,
                        ..
                    } = &f.parsed
                    {
                        eprintln!("frag off {offset} more {more} id {id} len {} ip_len {ip_len} nh {next_header}", data.len());
                    }
                }
                panic!(
                    "mtu {mtu} size {size}: got {:?} bytes",
                    got.map(|g| g.len())
                );
            }
            assert!(ids.len() <= 1);
            let expect_frags = if size + 48 <= mtu {
                1
            } else {
                (size + 8).div_ceil((mtu - 48) & !7)
            };
            assert_eq!(frames.len(), expect_frags, "mtu {mtu} size {size}");
        }
    }
}

/// A TCP super-segment is cut at its piece size (the peer's MSS), even when it would fit
/// the MTU whole: queued as one super-frame toward a known neighbour, and cut into frames
/// for a caller that takes plain frames.
#[test]
fn tcp_super_segments_are_cut_at_the_piece_size() {
    use qpip_device::net::tcp::wire as tw;
    let h = tw::Header {
        src_port: 80,
        dst_port: 5000,
        seq: 1,
        ack: 1,
        flags: tw::flags::ACK | tw::flags::PSH,
        window: 100,
        ..tw::Header::default()
    };
    let seg = tw::build(&OUR, &PEER, &h, &[9u8; 1200]);
    let mut c = config();
    c.neighbors.push(StaticNeighbor {
        addr: PEER,
        mac: PEER_MAC,
    });
    let (mut s, t) = stack_with(c);
    s.send_tcp(OUR, PEER, 64, &seg, 536, t).unwrap();
    let (frame, gso) = s.pop_tx_gso().expect("one super-frame");
    assert_eq!((frame.len(), gso), (14 + 40 + 20 + 1200, 536));
    assert!(s.pop_tx_gso().is_none());
    s.send_tcp(OUR, PEER, 64, &seg, 536, t).unwrap();
    let pieces: Vec<Vec<u8>> = std::iter::from_fn(|| s.pop_tx()).collect();
    let lens: Vec<usize> = pieces.iter().map(|p| p.len() - 74).collect();
    assert_eq!(lens, [536, 536, 128]);
    for p in &pieces {
        assert!(tw::parse(OUR, PEER, &p[54..]).is_ok(), "a valid segment");
    }
}

#[test]
fn reassembles_fragments_in_any_order_with_duplicates() {
    let (mut s, t) = stack();
    let payload: Vec<u8> = (0..20000u32).map(|i| (i % 253) as u8).collect();
    let mut frags = peer_fragments(&payload, 1448, 1);
    let n = frags.len();
    frags.reverse();
    frags.insert(3, frags[5].clone()); // an exact duplicate
    let mut got = None;
    for f in &frags {
        if let Some(d) = s.receive(f, t) {
            assert!(got.is_none(), "delivered once");
            assert!(d.reassembled());
            got = Some((d.sport, d.dport, d.payload().to_vec()));
            // The error quotes the reassembled packet.
            s.port_unreachable(&d, t);
        }
    }
    assert_eq!(got, Some((4000, 9, payload)));
    assert_eq!(s.stats().fragments_rx, n as u64 + 1);
    assert_eq!(s.stats().duplicate_fragments, 1);
    assert_eq!(s.stats().reassembled, 1);
    assert_eq!(s.reassemblies(), 0);
    // (the peer is unknown, so the error waits for resolution: a solicitation goes out)
    assert_eq!(icmp(&drain(&mut s)[0]).ty, 135);
}

#[test]
fn overlapping_fragments_abandon_the_packet() {
    let (mut s, t) = stack();
    let payload = vec![1u8; 4000];
    let frags = peer_fragments(&payload, 1448, 5);
    assert!(s.receive(&frags[0], t).is_none());
    // A fragment that overlaps the first one by 8 bytes (RFC 5722).
    let u = net_oracle::udp_bytes(PEER, OUR, 4000, 9, &payload);
    let evil = peer_fragment(17, 1440, true, 5, &u[1440..2888]);
    assert!(s.receive(&evil, t).is_none());
    for f in &frags[1..] {
        assert!(
            s.receive(f, t).is_none(),
            "nothing of that packet is delivered"
        );
    }
    assert_eq!(
        s.stats().dropped(DropReason::FragmentOverlap),
        2 + frags.len() as u64 - 1
    );
    assert!(drain(&mut s).is_empty(), "no ICMP about overlaps");
}

#[test]
fn incomplete_reassembly_times_out_with_time_exceeded() {
    let (mut s, t) = stack();
    introduce_peer(&mut s, t);
    let frags = peer_fragments(&[3u8; 4000], 1448, 9);
    s.receive(&frags[0], t);
    s.receive(&frags[2], t);
    assert_eq!(s.reassemblies(), 1);
    assert_eq!(s.next_deadline(), Some(t + Duration::from_secs(60)));
    s.poll(t + Duration::from_secs(59));
    assert!(drain(&mut s).is_empty());
    s.poll(t + Duration::from_secs(60));
    let f = drain_one(&mut s);
    let m = icmp(&f);
    assert_eq!((m.ty, m.code), (3, 1));
    assert_eq!(
        &m.body[4..],
        &frags[0][14..14 + 1232],
        "quotes the first fragment, cut to fit 1280"
    );
    assert_eq!(s.stats().reassembly_timeouts, 1);
    assert_eq!(s.stats().dropped(DropReason::ReassemblyFailed), 2);
    // Without the first fragment: no message.
    s.receive(&frags[1], t + Duration::from_secs(61));
    s.poll(t + Duration::from_secs(122));
    assert!(
        drain(&mut s).iter().all(|f| icmp(f).ty != 3),
        "(only reachability probes)"
    );
    assert_eq!(s.stats().reassembly_timeouts, 2);
}

#[test]
fn bad_fragments_get_parameter_problems() {
    let (mut s, t) = stack();
    introduce_peer(&mut s, t);
    // Not a multiple of 8 with more to come: pointer to the payload length.
    let u = net_oracle::udp_bytes(PEER, OUR, 4000, 9, &[0; 100]);
    let f = peer_fragment(17, 0, true, 1, &u[..50]);
    assert_eq!(answer_to(&mut s, t, &f), (4, 0, [0, 0, 0, 4]));
    // Past 65535 bytes: pointer to the fragment offset.
    let f = peer_fragment(17, 65528, false, 2, &[0; 16]);
    assert_eq!(answer_to(&mut s, t, &f), (4, 0, [0, 0, 0, 42]));
    // A first fragment without the whole UDP header (RFC 7112): code 3.
    let (ty, code, _) = answer_to(&mut s, t, &peer_fragment(17, 0, true, 3, &[]));
    assert_eq!((ty, code), (4, 3));
    assert_eq!(s.stats().dropped(DropReason::BadFragment), 3);
    // An atomic fragment is just a packet (RFC 6946).
    let f = peer_fragment(17, 0, false, 4, &u);
    assert_eq!(s.receive(&f, t).unwrap().payload(), &[0; 100]);
}
