//! ICMPv6 (RFC 4443): echo, port unreachable and its rate limit, and packet too big
//! lowering the path MTU (RFC 8201).

use std::net::Ipv6Addr;
use std::time::Duration;

use crate::net_oracle::{self, Parsed};
use crate::peer::*;
use qpip_device::net::Delivery;
use smoltcp::wire::Icmpv6Repr;

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
    let f = drain_one(&mut s);
    let m = icmp(&f);
    assert_eq!((m.ty, m.code, m.src, m.dst), (129, 0, OUR, PEER));
    assert_eq!(&m.body[..4], &[0x12, 0x34, 0, 7]);
    assert_eq!(&m.body[4..], &data[..]);
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
        &net_oracle::icmp_frame(PEER_MAC, ALL_NODES_MAC, peer_ll, ALL_NODES, 64, &req),
        t,
    );
    let f = drain_one(&mut s);
    let m = icmp(&f);
    assert_eq!((m.ty, m.src), (129, OUR_LL));
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
        s.receive(&peer_fragment(58, off * 1448, more, 99, chunk), t);
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
    let f = udp_from_peer(4000, 9, b"anyone?");
    let d = s.receive(&f, t).expect("a datagram for us");
    assert_eq!(
        (d.src, d.dst, d.sport, d.dport, d.payload()),
        (PEER, OUR, 4000, 9, &b"anyone?"[..])
    );
    assert!(!d.reassembled());
    s.port_unreachable(&d, t);
    let out = drain_one(&mut s);
    let m = icmp(&out);
    assert_eq!((m.ty, m.code, m.src, m.dst), (1, 4, OUR, PEER));
    assert_eq!(&m.body[4..], &f[14..], "quotes the whole invoking packet");
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
    let m = net_oracle::udp_frame(PEER_MAC, ALL_NODES_MAC, PEER, ALL_NODES, 4000, 9, b"x");
    let d = s.receive(&m, t + Duration::from_secs(5)).unwrap();
    s.port_unreachable(&d, t + Duration::from_secs(5));
    assert!(drain(&mut s).is_empty());
}

#[test]
fn delivery_enum_is_what_the_engine_answers() {
    // The seam the engine uses: NoPort makes the ICMP error, Delivered does not.
    assert_ne!(Delivery::Delivered, Delivery::NoPort);
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
    // A router's packet too big of `mtu`, quoting `invoking` (by default what we sent).
    let ptb_quoting = |mtu: u32, invoking: &[u8]| {
        let mut msg = vec![2, 0, 0, 0];
        msg.extend_from_slice(&mtu.to_be_bytes());
        msg.extend_from_slice(invoking);
        let msg = fix_icmp_checksum(router, OUR, msg);
        net_oracle::ip_frame(PEER_MAC, OUR_MAC, router, OUR, 58, 64, &msg)
    };
    let ptb = |mtu: u32| ptb_quoting(mtu, &invoking);
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
    let q = net_oracle::ip_frame(PEER_MAC, OUR_MAC, other, PEER, 17, 64, &[0; 100]);
    s.receive(&ptb_quoting(1280, &q[14..]), t + Duration::from_secs(602));
    assert_eq!(s.path_mtu(&PEER, t + Duration::from_secs(602)), 1500);
    assert!(s.take_path_mtu_changes().is_empty());
}
