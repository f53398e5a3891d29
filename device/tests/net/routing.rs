//! Which destinations the stack sends to and from which of its addresses: on-link without
//! routes, static neighbours, destinations off the link through their route's gateway, the
//! link-local source for link-local peers, and addresses changed at run time.

use std::net::Ipv6Addr;

use crate::net_oracle::{self, Parsed};
use crate::peer::*;
use qpip_device::net::{DropReason, NetConfig, SendError, Stack, StaticNeighbor, Upper};
use std::time::Instant;

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
    let f = udp_from_peer(1, 2, b"x");
    assert!(s.receive(&f, t).is_none());
    assert_eq!(s.stats().dropped(DropReason::NotForUs), 1);
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
    let mut c: NetConfig = config();
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

/// Destinations off the link go to their route's gateway (the peer here): one neighbour
/// entry for all of them, longest prefix first, and a route whose gateway is not on-link
/// passed over. Echo replies and ICMP errors take the route too; link-local destinations
/// never do.
#[test]
fn destinations_off_the_link_go_to_their_routes_gateway() {
    use qpip_device::net::Route;
    let far1: Ipv6Addr = "2001:db8::1".parse().unwrap();
    let far2: Ipv6Addr = "2001:db8:0:1::2".parse().unwrap();
    let mut c = config();
    c.routes
        .push("default via fd51:5050::1".parse::<Route>().unwrap());
    let (mut s, t) = stack_with(c);
    introduce_peer(&mut s, t);
    for far in [far1, far2] {
        assert_eq!(s.send_udp(None, 1, far, 7, b"x", t), Ok(OUR));
        let f = drain_one(&mut s);
        assert_eq!(f.eth_dst, PEER_MAC, "{far} goes to the gateway's MAC");
        assert!(matches!(f.parsed, Parsed::Udp { dst, .. } if dst == far));
    }
    assert_eq!(s.neighbors().len(), 1, "one entry: the gateway's");

    // A longer prefix through a gateway that is not on-link is passed over; through
    // one that is, it wins.
    let narrow = |gw: &str| Route::new("2001:db8::".parse().unwrap(), 64, gw.parse().unwrap(), 0);
    s.add_route(narrow("2001:db9::1").unwrap()).unwrap();
    s.send_udp(None, 1, far1, 7, b"x", t).unwrap();
    assert_eq!(drain_one(&mut s).eth_dst, PEER_MAC);
    s.remove_route(&"2001:db8::".parse().unwrap(), 64, 0)
        .unwrap();
    s.add_route(narrow("fd51:5050::77").unwrap()).unwrap();
    s.send_udp(None, 1, far1, 7, b"x", t).unwrap();
    match &drain_one(&mut s).parsed {
        Parsed::Icmp { ty: 135, body, .. } => {
            assert_eq!(
                body[4..20],
                "fd51:5050::77".parse::<Ipv6Addr>().unwrap().octets()
            );
        }
        other => panic!("a solicitation for the narrower route's gateway: {other:?}"),
    }
    s.send_udp(None, 1, far2, 7, b"x", t).unwrap();
    assert_eq!(
        drain_one(&mut s).eth_dst,
        PEER_MAC,
        "far2 is outside the /64"
    );

    // An echo request from beyond the gateway is answered through it.
    let req = smoltcp::wire::Icmpv6Repr::EchoRequest {
        ident: 1,
        seq_no: 1,
        data: b"ping",
    };
    let b = net_oracle::icmp_bytes(far2, OUR, &req);
    s.receive(
        &net_oracle::ip_frame(PEER_MAC, OUR_MAC, far2, OUR, 58, 60, &b),
        t,
    );
    let f = drain_one(&mut s);
    assert_eq!(f.eth_dst, PEER_MAC);
    assert!(matches!(f.parsed, Parsed::Icmp { dst, ty: 129, .. } if dst == far2));

    // So is "port unreachable" about a datagram from there.
    let f = net_oracle::udp_frame(PEER_MAC, OUR_MAC, far2, OUR, 4000, 9, b"x");
    let d = s.receive(&f, t).expect("a datagram for us");
    s.port_unreachable(&d, t);
    let f = drain_one(&mut s);
    assert_eq!(f.eth_dst, PEER_MAC);
    assert!(matches!(f.parsed, Parsed::Icmp { dst, ty: 1, .. } if dst == far2));

    // Link-local destinations are on-link, never routed.
    let ll: Ipv6Addr = "fe80::7".parse().unwrap();
    s.send_udp(None, 1, ll, 7, b"x", t).unwrap();
    assert!(matches!(
        drain_one(&mut s).parsed,
        Parsed::Icmp { ty: 135, .. }
    ));

    // No route, no sending.
    s.set_routes(&[]);
    assert_eq!(
        s.send_udp(None, 1, far2, 7, b"x", t),
        Err(SendError::NoRoute)
    );
}

/// The same over IPv4: ARP for the gateway, not for the destination, and the IPv4 default
/// route for what no narrower route holds; IPv4 link-local destinations are never routed.
#[test]
fn ipv4_destinations_off_the_link_go_to_their_routes_gateway() {
    use qpip_device::net::Route;
    let mut c = config();
    c.addrs.push(("::ffff:198.18.0.2".parse().unwrap(), 120));
    c.routes
        .push("198.18.1.0/24 via 198.18.0.1".parse::<Route>().unwrap());
    c.routes
        .push("default via 198.18.0.254".parse::<Route>().unwrap());
    let (mut s, t) = stack_with(c);
    for (far, gw) in [
        ("198.18.1.5", [198, 18, 0, 1]),
        ("203.0.113.9", [198, 18, 0, 254]),
    ] {
        let far: Ipv6Addr = format!("::ffff:{far}").parse().unwrap();
        assert!(s.send_udp(None, 1, far, 7, b"x", t).is_ok());
        match drain_one(&mut s).parsed {
            Parsed::Arp {
                request: true,
                target_ip,
                sender_ip,
                ..
            } => {
                assert_eq!(target_ip.octets(), gw, "{far}");
                assert_eq!(sender_ip.octets(), [198, 18, 0, 2]);
            }
            other => panic!("an ARP request for the gateway of {far}: {other:?}"),
        }
    }
    let ll: Ipv6Addr = "::ffff:169.254.0.9".parse().unwrap();
    assert_eq!(s.send_udp(None, 1, ll, 7, b"x", t), Err(SendError::NoRoute));
}
