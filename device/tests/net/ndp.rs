//! Neighbour discovery (RFC 4861, RFC 4862): the stack's start-up probes, its answers to
//! solicitations, the defence of its addresses, the NDP it refuses, and resolving a next
//! hop before datagrams go out.

use std::net::Ipv6Addr;
use std::time::{Duration, Instant};

use crate::net_oracle::{self, Parsed};
use crate::peer::*;
use qpip_device::net::{neighbor, DropReason, Stack};

#[test]
fn start_up_probes_for_every_address() {
    let t = Instant::now();
    let mut s = Stack::new(&config(), t);
    let frames = drain(&mut s);
    assert_eq!(frames.len(), 2);
    for (f, target) in frames.iter().zip([OUR_LL, OUR]) {
        let m = icmp(f);
        assert_eq!(m.ty, 135);
        assert_eq!(m.src, Ipv6Addr::UNSPECIFIED);
        assert_eq!((m.dst, f.eth_dst), net_oracle::solicited(target));
        assert_eq!(&m.body[4..20], &target.octets());
        assert_eq!(
            m.body.len(),
            20,
            "no link-layer option from the unspecified address"
        );
    }
    assert_eq!(s.link_local(), OUR_LL);
}

#[test]
fn answers_solicitations_for_its_addresses() {
    let (mut s, t) = stack();
    for target in [OUR, OUR_LL] {
        assert!(s.receive(&peer_solicits(target), t).is_none());
        let f = drain_one(&mut s);
        assert_eq!((f.eth_dst, f.eth_src), (PEER_MAC, OUR_MAC));
        let m = icmp(&f);
        assert_eq!((m.ty, m.src, m.dst), (136, target, PEER));
        assert_eq!(m.body[0], 0x60, "solicited and override");
        assert_eq!(&m.body[4..20], &target.octets());
        assert_eq!(
            &m.body[20..28],
            &[2, 1, 2, 0x51, 0x50, 0, 1, 1],
            "target link-layer option"
        );
    }
    assert_eq!(
        s.neighbors().get(&PEER),
        Some((neighbor::State::Stale, Some(PEER_MAC)))
    );
    assert_eq!(s.stats().ns_rx, 2);
    assert_eq!(s.stats().na_tx, 2);
}

#[test]
fn unicast_solicitation_without_option_answered_to_frame_source() {
    let (mut s, t) = stack();
    let ns = net_oracle::icmp_frame(
        PEER_MAC,
        OUR_MAC,
        PEER,
        OUR,
        255,
        &net_oracle::ns_repr(OUR, None),
    );
    s.receive(&ns, t);
    assert_eq!(drain_one(&mut s).eth_dst, PEER_MAC);
    assert!(
        s.neighbors().get(&PEER).is_none(),
        "no option, no cache entry"
    );
}

#[test]
fn defends_its_addresses_against_dad() {
    let (mut s, t) = stack();
    let (g, gmac) = net_oracle::solicited(OUR);
    let ns = net_oracle::icmp_frame(
        PEER_MAC,
        gmac,
        Ipv6Addr::UNSPECIFIED,
        g,
        255,
        &net_oracle::ns_repr(OUR, None),
    );
    s.receive(&ns, t);
    let f = drain_one(&mut s);
    let m = icmp(&f);
    assert_eq!((m.ty, m.src, m.dst), (136, OUR, ALL_NODES));
    assert_eq!(f.eth_dst, ALL_NODES_MAC);
    assert_eq!(m.body[0], 0x20, "override, not solicited (RFC 4861 §7.2.4)");
    assert_eq!(s.stats().dad_defended, 1);
    // Someone else advertising our address is a conflict, logged and counted.
    let na = net_oracle::icmp_frame(
        PEER_MAC,
        ALL_NODES_MAC,
        PEER,
        ALL_NODES,
        255,
        &net_oracle::na_repr(OUR, Some(PEER_MAC), false, true),
    );
    s.receive(&na, t);
    assert_eq!(s.stats().duplicate_address, 1);
    assert!(drain(&mut s).is_empty());
}

#[test]
fn invalid_ndp_is_dropped_by_reason() {
    let (mut s, t) = stack();
    let (g, gmac) = net_oracle::solicited(OUR);
    let ns = |target, lladdr| net_oracle::ns_repr(target, lladdr);
    let unspecified = Ipv6Addr::UNSPECIFIED;
    // From the peer's MAC: (link destination, source, destination, hop limit, message,
    // why it is dropped).
    let cases = [
        // Crossed a router.
        (
            gmac,
            PEER,
            g,
            254,
            ns(OUR, Some(PEER_MAC)),
            DropReason::HopLimit,
        ),
        // DAD probes carry no link-layer option.
        (
            gmac,
            unspecified,
            g,
            255,
            ns(OUR, Some(PEER_MAC)),
            DropReason::BadNdp,
        ),
        // DAD probes go to the solicited-node group.
        (
            OUR_MAC,
            unspecified,
            OUR,
            255,
            ns(OUR, None),
            DropReason::BadNdp,
        ),
        // A multicast target.
        (gmac, PEER, g, 255, ns(ALL_NODES, None), DropReason::BadNdp),
        // Someone else's address.
        (gmac, PEER, g, 255, ns(PEER, None), DropReason::NotForUs),
        // A solicited advertisement to a group.
        (
            ALL_NODES_MAC,
            PEER,
            ALL_NODES,
            255,
            net_oracle::na_repr(PEER, Some(PEER_MAC), true, true),
            DropReason::BadNdp,
        ),
    ];
    for (i, (eth_dst, src, dst, hop_limit, msg, why)) in cases.iter().enumerate() {
        let f = net_oracle::icmp_frame(PEER_MAC, *eth_dst, *src, *dst, *hop_limit, msg);
        let before = s.stats().dropped(*why);
        assert!(s.receive(&f, t).is_none());
        assert_eq!(s.stats().dropped(*why), before + 1, "case {i}");
        assert!(drain(&mut s).is_empty(), "case {i}: no answer");
    }
    // An option of length zero.
    let mut f = peer_solicits(OUR);
    let n = f.len();
    f[n - 7] = 0; // the option's length byte
                  // (the checksum no longer matches either; fix it so only the option is wrong)
    let ip_payload = f[54..].to_vec();
    let fixed = fix_icmp_checksum(PEER, g, ip_payload);
    f[54..].copy_from_slice(&fixed);
    s.receive(&f, t);
    assert_eq!(s.stats().dropped(DropReason::BadNdp), 5);
}

#[test]
fn resolves_next_hop_then_sends_queued_datagrams() {
    let (mut s, t) = stack();
    assert_eq!(s.send_udp(None, 5000, PEER, 7, b"one", t), Ok(OUR));
    assert_eq!(s.send_udp(None, 5000, PEER, 7, b"two", t), Ok(OUR));
    let out = drain(&mut s);
    assert_eq!(out.len(), 1, "one solicitation, datagrams wait");
    let (g, gmac) = net_oracle::solicited(PEER);
    let m = icmp(&out[0]);
    assert_eq!(
        (m.ty, m.src, m.dst, m.hop_limit, out[0].eth_dst),
        (135, OUR, g, 255, gmac)
    );
    assert_eq!(
        &m.body[20..28],
        &[1, 1, 2, 0x51, 0x50, 0, 1, 1],
        "source link-layer option"
    );
    let na = net_oracle::icmp_frame(
        PEER_MAC,
        OUR_MAC,
        PEER,
        OUR,
        255,
        &net_oracle::na_repr(PEER, Some(PEER_MAC), true, true),
    );
    s.receive(&na, t);
    let out = drain(&mut s);
    let got: Vec<_> = out
        .iter()
        .map(|f| {
            assert_eq!(f.eth_dst, PEER_MAC);
            match &f.parsed {
                Parsed::Udp {
                    src,
                    dst,
                    sport,
                    dport,
                    payload,
                } => {
                    assert_eq!((*src, *dst, *sport, *dport), (OUR, PEER, 5000, 7));
                    payload.clone()
                }
                p => panic!("{p:?}"),
            }
        })
        .collect();
    assert_eq!(got, vec![b"one".to_vec(), b"two".to_vec()]);
    assert_eq!(
        s.neighbors().get(&PEER),
        Some((neighbor::State::Reachable, Some(PEER_MAC)))
    );
    // Now known: the next datagram goes at once.
    s.send_udp(None, 5000, PEER, 7, b"three", t).unwrap();
    assert_eq!(drain(&mut s).len(), 1);
    assert_eq!(s.stats().udp_tx, 3);
}

#[test]
fn unanswered_resolution_retries_then_drops() {
    let (mut s, t) = stack();
    s.send_udp(None, 1, PEER, 7, b"x", t).unwrap();
    assert_eq!(drain(&mut s).len(), 1);
    let mut now = t;
    for _ in 0..2 {
        assert_eq!(s.next_deadline(), Some(now + Duration::from_secs(1)));
        now += Duration::from_secs(1);
        s.poll(now);
        assert_eq!(icmp(&drain_one(&mut s)).ty, 135);
    }
    now += Duration::from_secs(1);
    s.poll(now);
    assert!(drain(&mut s).is_empty());
    assert_eq!(s.stats().resolution_failed, 1);
    assert_eq!(s.next_deadline(), None);
}
