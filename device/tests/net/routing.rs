//! Which destinations the stack sends to and from which of its addresses: on-link only,
//! static neighbours, the link-local source for link-local peers, and addresses changed at
//! run time.

use std::net::Ipv6Addr;

use crate::net_oracle::Parsed;
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
