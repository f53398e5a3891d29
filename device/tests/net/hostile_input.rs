//! Input the stack must refuse and count, never act on: extension headers and options it
//! does not support, frames for someone else, every truncation and bit flip of a good
//! frame, and random bytes.

use std::net::Ipv6Addr;
use std::time::Duration;

use crate::net_oracle;
use crate::peer::*;
use qpip_device::net::DropReason;

#[test]
fn unsupported_headers_and_options() {
    let (mut s, t) = stack();
    introduce_peer(&mut s, t);
    // No transport 253 here: parameter problem code 1 pointing at the next header field.
    let f = from_peer(253, &[0; 20]);
    assert_eq!(answer_to(&mut s, t, &f), (4, 1, [0, 0, 0, 6]));
    assert_eq!(s.stats().dropped(DropReason::UnsupportedNextHeader), 1);
    // Extension headers (`next` names the first), then a UDP datagram.
    let udp = net_oracle::udp_bytes(PEER, OUR, 1, 2, b"opt");
    let with_udp = |next: u8, headers: &[u8]| from_peer(next, &[headers, &udp].concat());
    // Destination options with an unknown "skip" option (00xxxxxx), then UDP: accepted.
    let f = with_udp(60, &[17, 0, 0x1e, 4, 0, 0, 0, 0]);
    let d = s.receive(&f, t);
    assert_eq!(d.map(|d| d.payload().to_vec()), Some(b"opt".to_vec()));
    // Hop-by-hop with router alert and padding: accepted.
    let f = with_udp(0, &[17, 0, 5, 2, 0, 0, 1, 0]);
    assert!(s.receive(&f, t).is_some());
    // Unknown "discard" (01xxxxxx): silently dropped.
    let f = with_udp(60, &[17, 0, 0x5e, 4, 0, 0, 0, 0]);
    assert!(s.receive(&f, t).is_none());
    assert!(drain(&mut s).is_empty());
    // Unknown "discard and report" (10xxxxxx): parameter problem code 2 at the option.
    let f = with_udp(60, &[17, 0, 0x9e, 4, 0, 0, 0, 0]);
    assert_eq!(answer_to(&mut s, t, &f), (4, 2, [0, 0, 0, 42]));
    assert_eq!(s.stats().dropped(DropReason::UnknownOption), 2);
    // A routing header with segments left: pointer at its routing type.
    let f = with_udp(43, &[17, 0, 4, 1, 0, 0, 0, 0]);
    assert_eq!(answer_to(&mut s, t, &f), (4, 0, [0, 0, 0, 42]));
    // ... and with none left it is ignored.
    let f = with_udp(43, &[17, 0, 4, 0, 0, 0, 0, 0]);
    assert!(s.receive(&f, t).is_some());
    // Hop-by-hop anywhere but first: parameter problem code 1.
    let f = with_udp(60, &[0, 0, 1, 4, 0, 0, 0, 0, 17, 0, 1, 4, 0, 0, 0, 0]);
    assert_eq!(answer_to(&mut s, t, &f).1, 1);
}

#[test]
fn frames_not_for_us() {
    let (mut s, t) = stack();
    let other_mac = [2, 0, 0, 0, 0, 0x55];
    let addr = |a: &str| a.parse::<Ipv6Addr>().unwrap();
    // A datagram by link source, link destination, source and destination.
    let udp =
        |eth_src, eth_dst, src, dst| net_oracle::udp_frame(eth_src, eth_dst, src, dst, 1, 2, b"x");
    let group_mac = [0x33, 0x33, 0, 0, 0, 2];
    let cases = [
        (udp(PEER_MAC, other_mac, PEER, OUR), DropReason::NotForUs),
        (
            udp(PEER_MAC, OUR_MAC, PEER, addr("fd51:5050::42")),
            DropReason::NotForUs,
        ),
        (
            udp(PEER_MAC, group_mac, PEER, addr("ff02::2")),
            DropReason::NotForUs,
        ),
        (udp(OUR_MAC, OUR_MAC, PEER, OUR), DropReason::Looped),
        (
            udp(PEER_MAC, OUR_MAC, addr("ff02::1"), OUR),
            DropReason::BadSource,
        ),
        // Our own address (or ::1) as the source of a frame from the link: a spoof or a
        // loop; answered, it would reach us through our own loopback.
        (udp(PEER_MAC, OUR_MAC, OUR, OUR), DropReason::BadSource),
        (
            udp(PEER_MAC, OUR_MAC, Ipv6Addr::LOCALHOST, OUR),
            DropReason::BadSource,
        ),
        (from_peer(59, &[]), DropReason::NoNextHeader),
    ];
    for (i, (f, why)) in cases.iter().enumerate() {
        let before = s.stats().dropped(*why);
        assert!(s.receive(f, t).is_none(), "case {i}");
        assert_eq!(s.stats().dropped(*why), before + 1, "case {i}");
    }
    assert_eq!(s.stats().dropped(DropReason::NotForUs), 3);
    // A VLAN tag: not a protocol the device speaks.
    let mut tagged = udp_from_peer(1, 2, b"x");
    tagged[12..14].copy_from_slice(&[0x81, 0x00]);
    s.receive(&tagged, t);
    assert_eq!(s.stats().dropped(DropReason::NotIp), 1);
    // A zero UDP checksum is not allowed over IPv6.
    let mut z = udp_from_peer(1, 2, b"x");
    z[60..62].copy_from_slice(&[0, 0]);
    assert!(s.receive(&z, t).is_none());
    assert_eq!(s.stats().dropped(DropReason::BadChecksum), 1);
    assert!(drain(&mut s).is_empty());
}

#[test]
fn every_truncation_and_bit_flip_is_counted_once() {
    let (mut s, t) = stack();
    introduce_peer(&mut s, t);
    let good = udp_from_peer(4000, 9, b"a datagram of some length");
    for len in 0..good.len() {
        let before = s.stats().total_dropped();
        assert!(s.receive(&good[..len], t).is_none(), "truncated to {len}");
        assert_eq!(s.stats().total_dropped(), before + 1, "truncated to {len}");
        assert_eq!(s.stats().dropped(DropReason::Malformed), len as u64 + 1);
    }
    // Ethernet padding after the packet is fine.
    let mut padded = good.clone();
    padded.extend_from_slice(&[0; 20]);
    assert!(s.receive(&padded, t).is_some());
    // Each single-bit flip: either still a good datagram (e.g. hop limit, flow label), or
    // exactly one drop. Never a datagram with other contents than sent, unless the flip
    // hit a field the checksum does not cover.
    for bit in 0..good.len() * 8 {
        let mut f = good.clone();
        f[bit / 8] ^= 1 << (bit % 8);
        let before = s.stats().total_dropped();
        match s.receive(&f, t) {
            Some(d) => {
                assert_eq!(s.stats().total_dropped(), before, "bit {bit}");
                assert_eq!(d.payload(), b"a datagram of some length", "bit {bit}");
            }
            None => assert_eq!(s.stats().total_dropped(), before + 1, "bit {bit}"),
        }
        drain(&mut s);
    }
}

#[test]
fn random_bytes_never_panic() {
    let (mut s, t) = stack();
    let mut rng = 0x1234_5678_9abc_def0u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let good = udp_from_peer(4000, 9, &[5; 64]);
    let frag = peer_fragment(17, 0, true, 1, &[5; 64]);
    for i in 0..20_000 {
        let mut f = if i % 2 == 0 {
            good.clone()
        } else {
            frag.clone()
        };
        // Keep the addressing intact so the fuzz reaches the deeper layers.
        for _ in 0..(next() % 6) {
            let at = 14 + 40 + (next() as usize % (f.len() - 54));
            f[at] = next() as u8;
        }
        if next() % 4 == 0 {
            let at = 14 + (next() as usize % 40);
            f[at] = next() as u8;
        }
        if next() % 5 == 0 {
            f.truncate(next() as usize % f.len());
        }
        let before = s.stats().total_dropped() + s.stats().udp_rx + s.stats().fragments_rx;
        let _ = s.receive(&f, t);
        drain(&mut s);
        assert!(
            s.stats().total_dropped() + s.stats().udp_rx + s.stats().fragments_rx > before
                || s.stats().echo_requests > 0
                || s.stats().icmp_errors_rx > 0
                || s.stats().ns_rx > 0
                || s.stats().na_rx > 0
                || s.stats().ptb_rx > 0
        );
    }
    s.poll(t + Duration::from_secs(120));
    drain(&mut s);
    assert_eq!(s.reassemblies(), 0);
}
