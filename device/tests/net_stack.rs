//! The network stack frame by frame: neighbour discovery, echo, ICMPv6 errors, path MTU,
//! fragmentation both ways, and hostile input. Frames fed in are built by an independent
//! library (smoltcp's wire module), and every frame the stack sends is parsed and its
//! checksums verified by it.

mod net_oracle;

use std::net::Ipv6Addr;
use std::time::{Duration, Instant};

use net_oracle::{Frame, Parsed};
use qpip_device::net::{
    neighbor, Delivery, DropReason, NetConfig, SendError, Stack, StaticNeighbor, Upper,
};
use smoltcp::wire::Icmpv6Repr;

const OUR_MAC: [u8; 6] = [0x02, 0x51, 0x50, 0x00, 0x01, 0x01];
const PEER_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x99];
const OUR: Ipv6Addr = Ipv6Addr::new(0xfd51, 0x5050, 0, 0, 0, 0, 1, 1);
const PEER: Ipv6Addr = Ipv6Addr::new(0xfd51, 0x5050, 0, 0, 0, 0, 0, 1);
const OUR_LL: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0x51, 0x50ff, 0xfe00, 0x0101);
const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);

fn config() -> NetConfig {
    let mut c = NetConfig::new(OUR_MAC);
    c.addrs.push((OUR, 64));
    c.seed = Some(1);
    c
}

fn drain(s: &mut Stack) -> Vec<Frame> {
    std::iter::from_fn(|| s.pop_tx())
        .map(|f| net_oracle::check(&f))
        .collect()
}

/// A stack past its start-up probes.
fn stack_with(c: NetConfig) -> (Stack, Instant) {
    let t = Instant::now();
    let mut s = Stack::new(&c, t);
    drain(&mut s);
    (s, t)
}

fn stack() -> (Stack, Instant) {
    stack_with(config())
}

/// The peer solicits our address, so the stack knows the peer's MAC.
fn introduce_peer(s: &mut Stack, t: Instant) {
    let (g, gmac) = net_oracle::solicited(OUR);
    let ns = net_oracle::icmp_frame(
        PEER_MAC,
        gmac,
        PEER,
        g,
        255,
        &net_oracle::ns_repr(OUR, Some(PEER_MAC)),
    );
    assert!(s.receive(&ns, t).is_none());
    drain(s);
}

fn icmp(f: &Frame) -> (u8, u8, &[u8]) {
    match &f.parsed {
        Parsed::Icmp { ty, code, body, .. } => (*ty, *code, body),
        p => panic!("expected ICMPv6, got {p:?}"),
    }
}

#[test]
fn start_up_probes_for_every_address() {
    let t = Instant::now();
    let mut s = Stack::new(&config(), t);
    let frames = drain(&mut s);
    assert_eq!(frames.len(), 2);
    for (f, target) in frames.iter().zip([OUR_LL, OUR]) {
        let Parsed::Icmp {
            src, dst, ty, body, ..
        } = &f.parsed
        else {
            panic!()
        };
        assert_eq!(*ty, 135);
        assert_eq!(*src, Ipv6Addr::UNSPECIFIED);
        assert_eq!((*dst, f.eth_dst), net_oracle::solicited(target));
        assert_eq!(&body[4..20], &target.octets());
        assert_eq!(
            body.len(),
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
        let (g, gmac) = net_oracle::solicited(target);
        let ns = net_oracle::icmp_frame(
            PEER_MAC,
            gmac,
            PEER,
            g,
            255,
            &net_oracle::ns_repr(target, Some(PEER_MAC)),
        );
        assert!(s.receive(&ns, t).is_none());
        let out = drain(&mut s);
        assert_eq!(out.len(), 1);
        let f = &out[0];
        assert_eq!((f.eth_dst, f.eth_src), (PEER_MAC, OUR_MAC));
        let Parsed::Icmp {
            src, dst, ty, body, ..
        } = &f.parsed
        else {
            panic!()
        };
        assert_eq!((*ty, *src, *dst), (136, target, PEER));
        assert_eq!(body[0], 0x60, "solicited and override");
        assert_eq!(&body[4..20], &target.octets());
        assert_eq!(
            &body[20..28],
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
    let out = drain(&mut s);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].eth_dst, PEER_MAC);
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
    let out = drain(&mut s);
    assert_eq!(out.len(), 1);
    let Parsed::Icmp {
        src, dst, ty, body, ..
    } = &out[0].parsed
    else {
        panic!()
    };
    assert_eq!((*ty, *src, *dst), (136, OUR, ALL_NODES));
    assert_eq!(out[0].eth_dst, [0x33, 0x33, 0, 0, 0, 1]);
    assert_eq!(body[0], 0x20, "override, not solicited (RFC 4861 §7.2.4)");
    assert_eq!(s.stats().dad_defended, 1);
    // Someone else advertising our address is a conflict, logged and counted.
    let na = net_oracle::icmp_frame(
        PEER_MAC,
        [0x33, 0x33, 0, 0, 0, 1],
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
    let cases: Vec<(Vec<u8>, DropReason)> = vec![
        // Crossed a router.
        (
            net_oracle::icmp_frame(
                PEER_MAC,
                gmac,
                PEER,
                g,
                254,
                &net_oracle::ns_repr(OUR, Some(PEER_MAC)),
            ),
            DropReason::HopLimit,
        ),
        // DAD probes carry no link-layer option.
        (
            net_oracle::icmp_frame(
                PEER_MAC,
                gmac,
                Ipv6Addr::UNSPECIFIED,
                g,
                255,
                &net_oracle::ns_repr(OUR, Some(PEER_MAC)),
            ),
            DropReason::BadNdp,
        ),
        // DAD probes go to the solicited-node group.
        (
            net_oracle::icmp_frame(
                PEER_MAC,
                OUR_MAC,
                Ipv6Addr::UNSPECIFIED,
                OUR,
                255,
                &net_oracle::ns_repr(OUR, None),
            ),
            DropReason::BadNdp,
        ),
        // A multicast target.
        (
            net_oracle::icmp_frame(
                PEER_MAC,
                gmac,
                PEER,
                g,
                255,
                &net_oracle::ns_repr(ALL_NODES, None),
            ),
            DropReason::BadNdp,
        ),
        // Someone else's address.
        (
            net_oracle::icmp_frame(
                PEER_MAC,
                gmac,
                PEER,
                g,
                255,
                &net_oracle::ns_repr(PEER, None),
            ),
            DropReason::NotForUs,
        ),
        // A solicited advertisement to a group.
        (
            net_oracle::icmp_frame(
                PEER_MAC,
                [0x33, 0x33, 0, 0, 0, 1],
                PEER,
                ALL_NODES,
                255,
                &net_oracle::na_repr(PEER, Some(PEER_MAC), true, true),
            ),
            DropReason::BadNdp,
        ),
    ];
    for (i, (f, why)) in cases.iter().enumerate() {
        let before = s.stats().dropped(*why);
        assert!(s.receive(f, t).is_none());
        assert_eq!(s.stats().dropped(*why), before + 1, "case {i}");
        assert!(drain(&mut s).is_empty(), "case {i}: no answer");
    }
    // An option of length zero.
    let mut f = net_oracle::icmp_frame(
        PEER_MAC,
        gmac,
        PEER,
        g,
        255,
        &net_oracle::ns_repr(OUR, Some(PEER_MAC)),
    );
    let n = f.len();
    f[n - 7] = 0; // the option's length byte
                  // (the checksum no longer matches either; fix it so only the option is wrong)
    let ip_payload = f[54..].to_vec();
    let fixed = fix_icmp_checksum(PEER, g, ip_payload);
    f[54..].copy_from_slice(&fixed);
    s.receive(&f, t);
    assert_eq!(s.stats().dropped(DropReason::BadNdp), 5);
}

fn fix_icmp_checksum(src: Ipv6Addr, dst: Ipv6Addr, mut msg: Vec<u8>) -> Vec<u8> {
    msg[2] = 0;
    msg[3] = 0;
    let mut sum: u32 = 0;
    let mut add = |b: &[u8]| {
        for c in b.chunks(2) {
            sum += u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u32;
        }
    };
    add(&src.octets());
    add(&dst.octets());
    add(&(msg.len() as u32).to_be_bytes());
    add(&[0, 0, 0, 58]);
    add(&msg);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    let c = !(sum as u16);
    msg[2..4].copy_from_slice(&c.to_be_bytes());
    msg
}

#[test]
fn resolves_next_hop_then_sends_queued_datagrams() {
    let (mut s, t) = stack();
    assert_eq!(s.send_udp(None, 5000, PEER, 7, b"one", t), Ok(OUR));
    assert_eq!(s.send_udp(None, 5000, PEER, 7, b"two", t), Ok(OUR));
    let out = drain(&mut s);
    assert_eq!(out.len(), 1, "one solicitation, datagrams wait");
    let (g, gmac) = net_oracle::solicited(PEER);
    let Parsed::Icmp {
        src,
        dst,
        ty,
        hop_limit,
        body,
        ..
    } = &out[0].parsed
    else {
        panic!()
    };
    assert_eq!(
        (*ty, *src, *dst, *hop_limit, out[0].eth_dst),
        (135, OUR, g, 255, gmac)
    );
    assert_eq!(
        &body[20..28],
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
        let out = drain(&mut s);
        assert_eq!(out.len(), 1);
        assert_eq!(icmp(&out[0]).0, 135);
    }
    now += Duration::from_secs(1);
    s.poll(now);
    assert!(drain(&mut s).is_empty());
    assert_eq!(s.stats().resolution_failed, 1);
    assert_eq!(s.next_deadline(), None);
}

#[test]
fn routing_is_on_link_only() {
    let mut c = config();
    let far: Ipv6Addr = "2001:db8::7".parse().unwrap();
    let (mut s, t) = stack_with(c.clone());
    assert_eq!(
        s.send_udp(None, 1, far, 7, b"x", t),
        Err(SendError::NoRoute)
    );
    // The device's own addresses are reached through the loopback (see
    // the_device_reaches_itself_through_the_loopback).
    assert_eq!(s.send_udp(None, 1, OUR, 7, b"x", t), Ok(OUR));
    assert_eq!(
        s.send_udp(None, 1, Ipv6Addr::LOCALHOST, 7, b"x", t),
        Ok(Ipv6Addr::LOCALHOST)
    );
    assert_eq!(
        s.send_udp(None, 1, Ipv6Addr::UNSPECIFIED, 7, b"x", t),
        Err(SendError::BadDestination)
    );
    assert_eq!(
        s.send_udp(Some(far), 1, PEER, 7, b"x", t),
        Err(SendError::BadSource)
    );
    assert_eq!(
        s.send_udp(None, 1, PEER, 7, &vec![0; 65528], t),
        Err(SendError::TooBig)
    );
    assert_eq!(s.stats().no_route, 1);
    // Link-local destinations use the link-local source.
    assert_eq!(
        s.send_udp(None, 1, "fe80::9".parse().unwrap(), 7, b"x", t),
        Ok(OUR_LL)
    );
    // A static neighbour is on-link whatever its prefix, and needs no solicitation.
    c.neighbors.push(StaticNeighbor {
        addr: far,
        mac: PEER_MAC,
    });
    let (mut s, t) = stack_with(c);
    s.send_udp(None, 1, far, 7, b"x", t).unwrap();
    let out = drain(&mut s);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].eth_dst, PEER_MAC);
    assert!(matches!(out[0].parsed, Parsed::Udp { .. }));
}

#[test]
fn answers_echo_requests() {
    let (mut s, t) = stack();
    introduce_peer(&mut s, t);
    let data: Vec<u8> = (0..56).collect();
    let req = Icmpv6Repr::EchoRequest {
        ident: 0x1234,
        seq_no: 7,
        data: &data,
    };
    s.receive(
        &net_oracle::icmp_frame(PEER_MAC, OUR_MAC, PEER, OUR, 64, &req),
        t,
    );
    let out = drain(&mut s);
    assert_eq!(out.len(), 1);
    let Parsed::Icmp {
        src,
        dst,
        ty,
        code,
        body,
        ..
    } = &out[0].parsed
    else {
        panic!()
    };
    assert_eq!((*ty, *code, *src, *dst), (129, 0, OUR, PEER));
    assert_eq!(&body[..4], &[0x12, 0x34, 0, 7]);
    assert_eq!(&body[4..], &data[..]);
    // To all nodes too (RFC 4443 §4.2), from the link-local address for a link-local asker.
    let peer_ll: Ipv6Addr = "fe80::99".parse().unwrap();
    let ns = net_oracle::icmp_frame(
        PEER_MAC,
        OUR_MAC,
        peer_ll,
        OUR_LL,
        255,
        &net_oracle::ns_repr(OUR_LL, Some(PEER_MAC)),
    );
    s.receive(&ns, t);
    drain(&mut s);
    s.receive(
        &net_oracle::icmp_frame(
            PEER_MAC,
            [0x33, 0x33, 0, 0, 0, 1],
            peer_ll,
            ALL_NODES,
            64,
            &req,
        ),
        t,
    );
    let out = drain(&mut s);
    assert_eq!(out.len(), 1);
    let Parsed::Icmp { src, ty, .. } = &out[0].parsed else {
        panic!()
    };
    assert_eq!((*ty, *src), (129, OUR_LL));
    // A big echo (fragmented both ways).
    let big: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
    let msg = net_oracle::icmp_bytes(
        PEER,
        OUR,
        &Icmpv6Repr::EchoRequest {
            ident: 1,
            seq_no: 2,
            data: &big,
        },
    );
    for (off, chunk) in msg.chunks(1448).enumerate() {
        let more = (off + 1) * 1448 < msg.len();
        s.receive(
            &net_oracle::fragment_frame(
                PEER_MAC,
                OUR_MAC,
                PEER,
                OUR,
                58,
                off * 1448,
                more,
                99,
                chunk,
            ),
            t,
        );
    }
    let out = drain(&mut s);
    assert!(out.len() >= 4, "the reply is fragmented");
    let total: usize = out
        .iter()
        .map(|f| match &f.parsed {
            Parsed::Fragment { data, ip_len, .. } => {
                assert!(*ip_len <= 1500);
                data.len()
            }
            p => panic!("{p:?}"),
        })
        .sum();
    assert_eq!(total, msg.len());
    assert_eq!(s.stats().echo_replies, 3);
}

#[test]
fn port_unreachable_is_sent_and_rate_limited() {
    let (mut s, t) = stack();
    introduce_peer(&mut s, t);
    let f = net_oracle::udp_frame(PEER_MAC, OUR_MAC, PEER, OUR, 4000, 9, b"anyone?");
    let d = s.receive(&f, t).expect("a datagram for us");
    assert_eq!(
        (d.src, d.dst, d.sport, d.dport, d.payload()),
        (PEER, OUR, 4000, 9, &b"anyone?"[..])
    );
    assert!(!d.reassembled());
    s.port_unreachable(&d, t);
    let out = drain(&mut s);
    assert_eq!(out.len(), 1);
    let Parsed::Icmp {
        src,
        dst,
        ty,
        code,
        body,
        ..
    } = &out[0].parsed
    else {
        panic!()
    };
    assert_eq!((*ty, *code, *src, *dst), (1, 4, OUR, PEER));
    assert_eq!(&body[4..], &f[14..], "quotes the whole invoking packet");
    // A burst: the bucket holds 50, then refills at 100/s.
    for _ in 0..200 {
        let d = s.receive(&f, t).unwrap();
        s.port_unreachable(&d, t);
    }
    assert_eq!(drain(&mut s).len(), 49);
    assert_eq!(s.stats().icmp_errors_rate_limited, 151);
    let later = t + Duration::from_millis(100);
    for _ in 0..20 {
        let d = s.receive(&f, later).unwrap();
        s.port_unreachable(&d, later);
    }
    assert_eq!(drain(&mut s).len(), 10);
    // Never about a datagram sent to a group.
    let m = net_oracle::udp_frame(
        PEER_MAC,
        [0x33, 0x33, 0, 0, 0, 1],
        PEER,
        ALL_NODES,
        4000,
        9,
        b"x",
    );
    let d = s.receive(&m, t + Duration::from_secs(5)).unwrap();
    s.port_unreachable(&d, t + Duration::from_secs(5));
    assert!(drain(&mut s).is_empty());
}

#[test]
fn packet_too_big_lowers_path_mtu() {
    let (mut s, t) = stack();
    introduce_peer(&mut s, t);
    assert_eq!(s.path_mtu(&PEER, t), 1500);
    s.send_udp(None, 1, PEER, 7, &[7; 1400], t).unwrap();
    let sent = drain(&mut s);
    assert!(matches!(sent[0].parsed, Parsed::Udp { .. }));
    // What we sent, as a router quotes it.
    let quoted = net_oracle::udp_bytes(OUR, PEER, 1, 7, &[7; 1400]);
    let mut invoking =
        net_oracle::ip_frame(OUR_MAC, PEER_MAC, OUR, PEER, 17, 64, &quoted)[14..].to_vec();
    invoking.truncate(1232);
    let router: Ipv6Addr = "fe80::1".parse().unwrap();
    let ptb = |mtu: u32| {
        let mut body = mtu.to_be_bytes().to_vec();
        body.extend_from_slice(&invoking);
        let mut msg = vec![2, 0, 0, 0];
        msg.extend_from_slice(&body);
        let msg = fix_icmp_checksum(router, OUR, msg);
        net_oracle::ip_frame(PEER_MAC, OUR_MAC, router, OUR, 58, 64, &msg)
    };
    assert!(s.take_path_mtu_changes().is_empty());
    s.receive(&ptb(1300), t);
    assert_eq!(s.path_mtu(&PEER, t), 1300);
    assert_eq!(s.stats().ptb_rx, 1);
    // TCP hears of it once.
    assert_eq!(s.take_path_mtu_changes(), vec![(PEER, 1300)]);
    assert!(s.take_path_mtu_changes().is_empty());
    s.send_udp(None, 1, PEER, 7, &[7; 1400], t).unwrap();
    let frags = drain(&mut s);
    assert_eq!(frags.len(), 2);
    let mut d = net_oracle::Defrag::default();
    let mut whole = None;
    for f in &frags {
        let Parsed::Fragment { ip_len, .. } = &f.parsed else {
            panic!("{f:?}")
        };
        assert!(*ip_len <= 1300);
        whole = whole.or(d.add(&f.parsed));
    }
    assert!(matches!(whole, Some(Parsed::Udp { ref payload, .. }) if payload == &vec![7; 1400]));
    // Never below the IPv6 minimum, never raised by a PTB.
    s.receive(&ptb(500), t);
    assert_eq!(s.path_mtu(&PEER, t), 1280);
    s.receive(&ptb(1400), t);
    assert_eq!(s.path_mtu(&PEER, t), 1280);
    assert_eq!(
        s.take_path_mtu_changes(),
        vec![(PEER, 1280)],
        "the lowering only, once"
    );
    // It expires (RFC 8201: after 10 minutes the link MTU is tried again): the stack
    // wants a poll by then, and TCP hears that the path is back to the link's MTU.
    assert!(s
        .next_deadline()
        .is_some_and(|d| d <= t + Duration::from_secs(600)));
    s.poll(t + Duration::from_secs(599));
    assert!(s.take_path_mtu_changes().is_empty(), "not before its time");
    s.poll(t + Duration::from_secs(601));
    assert_eq!(s.path_mtu(&PEER, t + Duration::from_secs(601)), 1500);
    assert_eq!(
        s.take_path_mtu_changes(),
        vec![(PEER, 1500)],
        "the raise, once"
    );
    assert!(s.take_path_mtu_changes().is_empty());
    // A PTB about a packet we did not send changes nothing.
    let other: Ipv6Addr = "fd51:5050::77".parse().unwrap();
    let q = net_oracle::ip_frame(PEER_MAC, OUR_MAC, other, PEER, 17, 64, &[0; 100])[14..].to_vec();
    let mut msg = vec![2, 0, 0, 0];
    msg.extend_from_slice(&1280u32.to_be_bytes());
    msg.extend_from_slice(&q);
    let msg = fix_icmp_checksum(router, OUR, msg);
    s.receive(
        &net_oracle::ip_frame(PEER_MAC, OUR_MAC, router, OUR, 58, 64, &msg),
        t + Duration::from_secs(602),
    );
    assert_eq!(s.path_mtu(&PEER, t + Duration::from_secs(602)), 1500);
    assert!(s.take_path_mtu_changes().is_empty());
}

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

/// Fragments of a UDP datagram from the peer, cut at `chunk` bytes (a multiple of 8).
fn peer_fragments(payload: &[u8], chunk: usize, id: u32) -> Vec<Vec<u8>> {
    let u = net_oracle::udp_bytes(PEER, OUR, 4000, 9, payload);
    u.chunks(chunk)
        .enumerate()
        .map(|(i, c)| {
            let more = (i + 1) * chunk < u.len();
            net_oracle::fragment_frame(PEER_MAC, OUR_MAC, PEER, OUR, 17, i * chunk, more, id, c)
        })
        .collect()
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
    let out = drain(&mut s);
    assert_eq!(icmp(&out[0]).0, 135);
}

#[test]
fn overlapping_fragments_abandon_the_packet() {
    let (mut s, t) = stack();
    let payload = vec![1u8; 4000];
    let frags = peer_fragments(&payload, 1448, 5);
    assert!(s.receive(&frags[0], t).is_none());
    // A fragment that overlaps the first one by 8 bytes (RFC 5722).
    let u = net_oracle::udp_bytes(PEER, OUR, 4000, 9, &payload);
    let evil = net_oracle::fragment_frame(
        PEER_MAC,
        OUR_MAC,
        PEER,
        OUR,
        17,
        1440,
        true,
        5,
        &u[1440..2888],
    );
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
    let out = drain(&mut s);
    assert_eq!(out.len(), 1);
    let (ty, code, body) = icmp(&out[0]);
    assert_eq!((ty, code), (3, 1));
    assert_eq!(
        &body[4..],
        &frags[0][14..14 + 1232],
        "quotes the first fragment, cut to fit 1280"
    );
    assert_eq!(s.stats().reassembly_timeouts, 1);
    assert_eq!(s.stats().dropped(DropReason::ReassemblyFailed), 2);
    // Without the first fragment: no message.
    s.receive(&frags[1], t + Duration::from_secs(61));
    s.poll(t + Duration::from_secs(122));
    assert!(
        drain(&mut s).iter().all(|f| icmp(f).0 != 3),
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
    let f = net_oracle::fragment_frame(PEER_MAC, OUR_MAC, PEER, OUR, 17, 0, true, 1, &u[..50]);
    s.receive(&f, t);
    let out = drain(&mut s);
    let (ty, code, body) = icmp(&out[0]);
    assert_eq!((ty, code, &body[..4]), (4, 0, &[0u8, 0, 0, 4][..]));
    // Past 65535 bytes: pointer to the fragment offset.
    let f = net_oracle::fragment_frame(PEER_MAC, OUR_MAC, PEER, OUR, 17, 65528, false, 2, &[0; 16]);
    s.receive(&f, t);
    let out = drain(&mut s);
    let (ty, code, body) = icmp(&out[0]);
    assert_eq!((ty, code, &body[..4]), (4, 0, &[0u8, 0, 0, 42][..]));
    // A first fragment without the whole UDP header (RFC 7112): code 3.
    let f = net_oracle::fragment_frame(PEER_MAC, OUR_MAC, PEER, OUR, 17, 0, true, 3, &[]);
    s.receive(&f, t);
    let out = drain(&mut s);
    let (ty, code, _) = icmp(&out[0]);
    assert_eq!((ty, code), (4, 3));
    assert_eq!(s.stats().dropped(DropReason::BadFragment), 3);
    // An atomic fragment is just a packet (RFC 6946).
    let f = net_oracle::fragment_frame(PEER_MAC, OUR_MAC, PEER, OUR, 17, 0, false, 4, &u);
    assert_eq!(s.receive(&f, t).unwrap().payload(), &[0; 100]);
}

#[test]
fn unsupported_headers_and_options() {
    let (mut s, t) = stack();
    introduce_peer(&mut s, t);
    // No transport 253 here: parameter problem code 1 pointing at the next header field.
    s.receive(
        &net_oracle::ip_frame(PEER_MAC, OUR_MAC, PEER, OUR, 253, 64, &[0; 20]),
        t,
    );
    let out = drain(&mut s);
    let (ty, code, body) = icmp(&out[0]);
    assert_eq!((ty, code, &body[..4]), (4, 1, &[0u8, 0, 0, 6][..]));
    assert_eq!(s.stats().dropped(DropReason::UnsupportedNextHeader), 1);
    let udp = net_oracle::udp_bytes(PEER, OUR, 1, 2, b"opt");
    // Destination options with an unknown "skip" option (00xxxxxx), then UDP: accepted.
    let mut dest = vec![17, 0, 0x1e, 4, 0, 0, 0, 0];
    dest.extend_from_slice(&udp);
    let f = net_oracle::ip_frame(PEER_MAC, OUR_MAC, PEER, OUR, 60, 64, &dest);
    let d = s.receive(&f, t);
    assert_eq!(d.map(|d| d.payload().to_vec()), Some(b"opt".to_vec()));
    // Hop-by-hop with router alert and padding: accepted.
    let mut hbh = vec![17, 0, 5, 2, 0, 0, 1, 0];
    hbh.extend_from_slice(&udp);
    assert!(s
        .receive(
            &net_oracle::ip_frame(PEER_MAC, OUR_MAC, PEER, OUR, 0, 64, &hbh),
            t
        )
        .is_some());
    // Unknown "discard" (01xxxxxx): silently dropped.
    let mut x = vec![17, 0, 0x5e, 4, 0, 0, 0, 0];
    x.extend_from_slice(&udp);
    assert!(s
        .receive(
            &net_oracle::ip_frame(PEER_MAC, OUR_MAC, PEER, OUR, 60, 64, &x),
            t
        )
        .is_none());
    assert!(drain(&mut s).is_empty());
    // Unknown "discard and report" (10xxxxxx): parameter problem code 2 at the option.
    let mut x = vec![17, 0, 0x9e, 4, 0, 0, 0, 0];
    x.extend_from_slice(&udp);
    s.receive(
        &net_oracle::ip_frame(PEER_MAC, OUR_MAC, PEER, OUR, 60, 64, &x),
        t,
    );
    let out = drain(&mut s);
    let (ty, code, body) = icmp(&out[0]);
    assert_eq!((ty, code, &body[..4]), (4, 2, &[0u8, 0, 0, 42][..]));
    assert_eq!(s.stats().dropped(DropReason::UnknownOption), 2);
    // A routing header with segments left: pointer at its routing type.
    let mut rh = vec![17, 0, 4, 1, 0, 0, 0, 0];
    rh.extend_from_slice(&udp);
    s.receive(
        &net_oracle::ip_frame(PEER_MAC, OUR_MAC, PEER, OUR, 43, 64, &rh),
        t,
    );
    let out = drain(&mut s);
    let (ty, code, body) = icmp(&out[0]);
    assert_eq!((ty, code, &body[..4]), (4, 0, &[0u8, 0, 0, 42][..]));
    // ... and with none left it is ignored.
    let mut rh = vec![17, 0, 4, 0, 0, 0, 0, 0];
    rh.extend_from_slice(&udp);
    assert!(s
        .receive(
            &net_oracle::ip_frame(PEER_MAC, OUR_MAC, PEER, OUR, 43, 64, &rh),
            t
        )
        .is_some());
    // Hop-by-hop anywhere but first: parameter problem code 1.
    let mut late = vec![0, 0, 1, 4, 0, 0, 0, 0, 17, 0, 1, 4, 0, 0, 0, 0];
    late.extend_from_slice(&udp);
    s.receive(
        &net_oracle::ip_frame(PEER_MAC, OUR_MAC, PEER, OUR, 60, 64, &late),
        t,
    );
    let out = drain(&mut s);
    assert_eq!(icmp(&out[0]).1, 1);
}

#[test]
fn frames_not_for_us() {
    let (mut s, t) = stack();
    let other_mac = [2, 0, 0, 0, 0, 0x55];
    let cases: Vec<(Vec<u8>, DropReason)> = vec![
        (
            net_oracle::udp_frame(PEER_MAC, other_mac, PEER, OUR, 1, 2, b"x"),
            DropReason::NotForUs,
        ),
        (
            net_oracle::udp_frame(
                PEER_MAC,
                OUR_MAC,
                PEER,
                "fd51:5050::42".parse().unwrap(),
                1,
                2,
                b"x",
            ),
            DropReason::NotForUs,
        ),
        (
            net_oracle::udp_frame(
                PEER_MAC,
                [0x33, 0x33, 0, 0, 0, 2],
                PEER,
                "ff02::2".parse().unwrap(),
                1,
                2,
                b"x",
            ),
            DropReason::NotForUs,
        ),
        (
            net_oracle::udp_frame(OUR_MAC, OUR_MAC, PEER, OUR, 1, 2, b"x"),
            DropReason::Looped,
        ),
        (
            net_oracle::udp_frame(
                PEER_MAC,
                OUR_MAC,
                "ff02::1".parse().unwrap(),
                OUR,
                1,
                2,
                b"x",
            ),
            DropReason::BadSource,
        ),
        // Our own address (or ::1) as the source of a frame from the link: a spoof or a
        // loop; answered, it would reach us through our own loopback.
        (
            net_oracle::udp_frame(PEER_MAC, OUR_MAC, OUR, OUR, 1, 2, b"x"),
            DropReason::BadSource,
        ),
        (
            net_oracle::udp_frame(PEER_MAC, OUR_MAC, Ipv6Addr::LOCALHOST, OUR, 1, 2, b"x"),
            DropReason::BadSource,
        ),
        (
            net_oracle::ip_frame(PEER_MAC, OUR_MAC, PEER, OUR, 59, 64, &[]),
            DropReason::NoNextHeader,
        ),
    ];
    for (i, (f, why)) in cases.iter().enumerate() {
        let before = s.stats().dropped(*why);
        assert!(s.receive(f, t).is_none(), "case {i}");
        assert_eq!(s.stats().dropped(*why), before + 1, "case {i}");
    }
    assert_eq!(s.stats().dropped(DropReason::NotForUs), 3);
    let mut arp = net_oracle::udp_frame(PEER_MAC, OUR_MAC, PEER, OUR, 1, 2, b"x");
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    s.receive(&arp, t);
    assert_eq!(s.stats().dropped(DropReason::NotIpv6), 1);
    // A zero UDP checksum is not allowed over IPv6.
    let mut z = net_oracle::udp_frame(PEER_MAC, OUR_MAC, PEER, OUR, 1, 2, b"x");
    z[60..62].copy_from_slice(&[0, 0]);
    assert!(s.receive(&z, t).is_none());
    assert_eq!(s.stats().dropped(DropReason::BadChecksum), 1);
    assert!(drain(&mut s).is_empty());
}

#[test]
fn every_truncation_and_bit_flip_is_counted_once() {
    let (mut s, t) = stack();
    introduce_peer(&mut s, t);
    let good = net_oracle::udp_frame(
        PEER_MAC,
        OUR_MAC,
        PEER,
        OUR,
        4000,
        9,
        b"a datagram of some length",
    );
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
    let good = net_oracle::udp_frame(PEER_MAC, OUR_MAC, PEER, OUR, 4000, 9, &[5; 64]);
    let frag = net_oracle::fragment_frame(PEER_MAC, OUR_MAC, PEER, OUR, 17, 0, true, 1, &[5; 64]);
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

#[test]
fn delivery_enum_is_what_the_engine_answers() {
    // The seam the engine uses: NoPort makes the ICMP error, Delivered does not.
    assert_ne!(Delivery::Delivered, Delivery::NoPort);
}

#[test]
fn addresses_change_at_run_time() {
    let (mut s, t) = stack();
    let second: Ipv6Addr = "fd51:6060::5".parse().unwrap();
    s.set_addresses(&[(OUR, 64), (second, 64)]);
    let out = drain(&mut s);
    assert_eq!(out.len(), 1, "a probe for the new address only");
    assert_eq!(s.addresses(), &[(OUR, 64), (second, 64)]);
    assert!(s.is_local(&second));
    assert_eq!(
        s.send_udp(None, 1, "fd51:6060::9".parse().unwrap(), 2, b"x", t),
        Ok(second)
    );
    s.set_addresses(&[(second, 64)]);
    assert!(!s.is_local(&OUR));
    assert_eq!(
        s.send_udp(None, 1, PEER, 7, b"x", t),
        Err(SendError::NoRoute)
    );
    // A datagram to the removed address is no longer ours.
    let f = net_oracle::udp_frame(PEER_MAC, OUR_MAC, PEER, OUR, 1, 2, b"x");
    assert!(s.receive(&f, t).is_none());
    assert_eq!(s.stats().dropped(DropReason::NotForUs), 1);
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
fn the_device_reaches_itself_through_the_loopback() {
    let (mut s, t) = stack();
    let frames = s.stats().tx_frames; // the start-up probes
                                      // Bound to no address, the source is the destination (RFC 6724 rule 1).
    for (src, dst) in [
        (None, OUR),
        (None, OUR_LL),
        (None, Ipv6Addr::LOCALHOST),
        (Some(Ipv6Addr::LOCALHOST), Ipv6Addr::LOCALHOST),
    ] {
        assert_eq!(s.send_udp(src, 40000, dst, 7, b"to myself", t), Ok(dst));
        assert!(drain(&mut s).is_empty(), "nothing reaches the link");
        let p = s.pop_loopback().expect("looped");
        assert!(s.pop_loopback().is_none());
        match s.receive_looped(&p, t) {
            Some(Upper::Udp(d)) => {
                assert_eq!((d.src, d.dst, d.sport, d.dport), (dst, dst, 40000, 7));
                assert_eq!(d.payload(), b"to myself");
            }
            other => panic!("{dst}: {other:?}"),
        }
    }
    assert_eq!(s.stats().looped, 4);
    assert_eq!(
        s.stats().tx_frames,
        frames,
        "not counted as frames on the link"
    );
    // `::1` never goes to the link as a source.
    introduce_peer(&mut s, t);
    assert_eq!(
        s.send_udp(Some(Ipv6Addr::LOCALHOST), 1, PEER, 7, b"x", t),
        Err(SendError::BadSource)
    );
}

#[test]
fn a_stack_without_a_link_reaches_only_itself() {
    let mut c = config();
    c.link = false;
    let t = Instant::now();
    let mut s = Stack::new(&c, t);
    assert!(
        drain(&mut s).is_empty(),
        "no address detection without a link"
    );
    for dst in [PEER, "fe80::99".parse().unwrap(), ALL_NODES] {
        assert_eq!(
            s.send_udp(None, 1, dst, 7, b"x", t),
            Err(SendError::NoRoute),
            "{dst}"
        );
    }
    assert!(drain(&mut s).is_empty());
    assert_eq!(s.send_udp(None, 1, OUR, 7, b"x", t), Ok(OUR));
    assert!(s.pop_loopback().is_some());
}
