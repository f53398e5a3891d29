//! IPv4 beside IPv6: ARP (resolution, answers, announcements, the cache's bounds), header
//! validation, ICMPv4 echo and errors, UDP both ways, fragments both ways, and path MTU
//! from "fragmentation needed". Addresses go in and out of the stack IPv4-mapped.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use crate::net_oracle::{self, Frame, Parsed, V4};
use crate::peer::*;
use qpip_device::net::neighbor::{self, State};
use qpip_device::net::{DropReason, NetConfig, SendError, Stack, Upper};
use smoltcp::wire::{IpAddress, UdpPacket};

const OUR4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const PEER4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const BROADCAST: [u8; 6] = [0xff; 6];

fn m(a: Ipv4Addr) -> Ipv6Addr {
    a.to_ipv6_mapped()
}

fn config4() -> NetConfig {
    let mut c = config();
    c.addrs.push((m(OUR4), 120));
    c
}

fn stack4() -> (Stack, std::time::Instant) {
    stack_with(config4())
}

/// The peer asks for our address, so the stack knows the peer's MAC.
fn introduce_peer4(s: &mut Stack, t: std::time::Instant) {
    let req = net_oracle::arp_frame(BROADCAST, true, PEER_MAC, PEER4, [0; 6], OUR4);
    assert!(s.receive(&req, t).is_none());
    drain(s);
}

/// An ARP message from the device's address: a request (the target's MAC unknown, zero)
/// or a reply to the target.
fn our_arp(request: bool, target_mac: [u8; 6], target_ip: Ipv4Addr) -> Parsed {
    Parsed::Arp {
        request,
        sender_mac: OUR_MAC,
        sender_ip: OUR4,
        target_mac,
        target_ip,
    }
}

/// A datagram from the peer's port 4000 to port 9, broadcast at the link layer to `dst`.
fn udp4_broadcast_from_peer(dst: Ipv4Addr, payload: &[u8]) -> Vec<u8> {
    net_oracle::udp4_frame(PEER_MAC, BROADCAST, PEER4, dst, 4000, 9, payload)
}

fn udp4_from_peer(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    net_oracle::udp4_frame(PEER_MAC, OUR_MAC, PEER4, OUR4, sport, dport, payload)
}

/// `f`'s IPv4 packet that is not a whole UDP datagram.
fn ipv4(f: &Frame) -> (u8, bool, bool, usize, u16, &[u8]) {
    match &f.parsed {
        Parsed::Ipv4 {
            protocol,
            dont_frag,
            more,
            offset,
            id,
            payload,
            ..
        } => (*protocol, *dont_frag, *more, *offset, *id, payload),
        p => panic!("expected IPv4, got {p:?}"),
    }
}

#[test]
fn a_new_address_is_announced_with_a_gratuitous_arp() {
    let mut s = Stack::new(&config4(), std::time::Instant::now());
    let out = drain(&mut s);
    let arp: Vec<_> = out
        .iter()
        .filter_map(|f| match f.parsed {
            Parsed::Arp {
                request,
                sender_ip,
                target_ip,
                sender_mac,
                ..
            } => Some((f.eth_dst, request, sender_ip, target_ip, sender_mac)),
            _ => None,
        })
        .collect();
    assert_eq!(arp, vec![(BROADCAST, true, OUR4, OUR4, OUR_MAC)]);
    // No IPv6 duplicate address detection for an IPv4 address: two probes, the link-local
    // and the IPv6 address.
    assert_eq!(out.len(), 3);
    assert_eq!(s.stats().arp_requests_tx, 1);
}

#[test]
fn arp_resolves_the_next_hop_and_the_datagram_follows() {
    let (mut s, t) = stack4();
    assert_eq!(
        s.send_udp(None, 4000, m(PEER4), 9, b"over IPv4", t),
        Ok(m(OUR4))
    );
    let f = drain_one(&mut s);
    assert_eq!(f.eth_dst, BROADCAST);
    assert_eq!(f.parsed, our_arp(true, [0; 6], PEER4));
    assert_eq!(s.neighbors().get(&m(PEER4)).unwrap().0, State::Incomplete);
    let reply = net_oracle::arp_frame(OUR_MAC, false, PEER_MAC, PEER4, OUR_MAC, OUR4);
    assert!(s.receive(&reply, t).is_none());
    let f = drain_one(&mut s);
    assert_eq!((f.eth_dst, f.eth_src), (PEER_MAC, OUR_MAC));
    assert_eq!(
        f.parsed,
        Parsed::Udp {
            src: m(OUR4),
            dst: m(PEER4),
            sport: 4000,
            dport: 9,
            payload: b"over IPv4".to_vec(),
        }
    );
    assert_eq!(
        s.neighbors().get(&m(PEER4)),
        Some((State::Reachable, Some(PEER_MAC)))
    );
    // Resolved: the next one goes at once.
    s.send_udp(None, 4000, m(PEER4), 9, b"again", t).unwrap();
    assert!(matches!(drain_one(&mut s).parsed, Parsed::Udp { .. }));
    assert_eq!(s.stats().arp_replies_rx, 1);
}

#[test]
fn arp_requests_for_our_address_are_answered_and_teach_the_cache() {
    let (mut s, t) = stack4();
    let req = net_oracle::arp_frame(BROADCAST, true, PEER_MAC, PEER4, [0; 6], OUR4);
    assert!(s.receive(&req, t).is_none());
    let f = drain_one(&mut s);
    assert_eq!(f.eth_dst, PEER_MAC);
    assert_eq!(f.parsed, our_arp(false, PEER_MAC, PEER4));
    assert_eq!(
        s.neighbors().get(&m(PEER4)),
        Some((State::Stale, Some(PEER_MAC)))
    );
    // So a datagram to the asker needs no request of ours.
    s.send_udp(None, 1, m(PEER4), 2, b"x", t).unwrap();
    assert!(matches!(drain_one(&mut s).parsed, Parsed::Udp { .. }));
    assert_eq!(
        (s.stats().arp_requests_rx, s.stats().arp_replies_tx),
        (1, 1)
    );
}

#[test]
fn arp_for_other_addresses_is_counted_and_not_answered() {
    let (mut s, t) = stack4();
    let other = Ipv4Addr::new(198, 18, 0, 77);
    let req = net_oracle::arp_frame(BROADCAST, true, PEER_MAC, PEER4, [0; 6], other);
    s.receive(&req, t);
    assert!(drain(&mut s).is_empty());
    assert_eq!(s.stats().dropped(DropReason::NotForUs), 1);
    assert!(s.neighbors().get(&m(PEER4)).is_none(), "learns nothing new");
    // ARP to another station's MAC.
    let req = net_oracle::arp_frame([2, 0, 0, 0, 0, 5], true, PEER_MAC, PEER4, [0; 6], OUR4);
    s.receive(&req, t);
    assert!(drain(&mut s).is_empty());
    assert_eq!(s.stats().dropped(DropReason::NotForUs), 2);
    // Malformed: cut short.
    let mut short = net_oracle::arp_frame(BROADCAST, true, PEER_MAC, PEER4, [0; 6], OUR4);
    short.truncate(30);
    s.receive(&short, t);
    assert_eq!(s.stats().dropped(DropReason::Malformed), 1);
    // A station announcing (or using) our address is a conflict, not an update.
    let gratuitous = net_oracle::arp_frame(BROADCAST, true, PEER_MAC, OUR4, [0; 6], OUR4);
    s.receive(&gratuitous, t);
    assert!(drain(&mut s).is_empty());
    assert_eq!(s.stats().duplicate_address, 1);
    // A probe for our address (sender 0.0.0.0, RFC 5227) is defended.
    let probe = net_oracle::arp_frame(
        BROADCAST,
        true,
        PEER_MAC,
        Ipv4Addr::UNSPECIFIED,
        [0; 6],
        OUR4,
    );
    s.receive(&probe, t);
    let f = drain_one(&mut s);
    assert!(matches!(f.parsed, Parsed::Arp { request: false, sender_ip, .. } if sender_ip == OUR4));
    assert_eq!(s.stats().dad_defended, 1);
}

#[test]
fn a_known_neighbour_that_moves_is_updated_by_its_announcement() {
    let (mut s, t) = stack4();
    introduce_peer4(&mut s, t);
    let moved = [2, 0, 0, 0, 0, 0x42];
    let gratuitous = net_oracle::arp_frame(BROADCAST, true, moved, PEER4, [0; 6], PEER4);
    s.receive(&gratuitous, t);
    assert!(drain(&mut s).is_empty());
    assert_eq!(s.neighbors().get(&m(PEER4)).unwrap().1, Some(moved));
}

#[test]
fn arp_resolution_fails_within_the_neighbour_caches_bounds() {
    let (mut s, t) = stack4();
    // Packets wait while ARP asks; beyond the queue's bound the oldest go.
    for i in 0..neighbor::MAX_QUEUE_PER_NEIGHBOR + 5 {
        s.send_udp(None, 1, m(PEER4), 2, &[i as u8], t).unwrap();
    }
    assert_eq!(drain(&mut s).len(), 1, "one request");
    assert_eq!(s.stats().neighbor_queue_overflow, 5);
    assert_eq!(s.neighbors().queued(), neighbor::MAX_QUEUE_PER_NEIGHBOR);
    // Requests are retried every second, then resolution fails and the packets are lost.
    let mut at = t;
    for _ in 0..neighbor::MAX_MULTICAST_SOLICIT {
        at += neighbor::RETRANS_TIMER;
        s.poll(at);
    }
    let retries = drain(&mut s);
    assert_eq!(retries.len(), neighbor::MAX_MULTICAST_SOLICIT as usize - 1);
    assert!(retries
        .iter()
        .all(|f| matches!(f.parsed, Parsed::Arp { request: true, .. })));
    assert_eq!(
        s.stats().resolution_failed,
        neighbor::MAX_QUEUE_PER_NEIGHBOR as u64
    );
    assert!(s.neighbors().get(&m(PEER4)).is_none());
}

#[test]
fn reachability_probes_are_unicast_arp() {
    let (mut s, t) = stack4();
    introduce_peer4(&mut s, t);
    // Stale: the first use sends, and after DELAY_FIRST_PROBE_TIME a unicast request asks.
    s.send_udp(None, 1, m(PEER4), 2, b"x", t).unwrap();
    drain(&mut s);
    let later = t + neighbor::DELAY_FIRST_PROBE_TIME;
    s.poll(later);
    let f = drain_one(&mut s);
    assert_eq!(f.eth_dst, PEER_MAC);
    assert!(matches!(f.parsed, Parsed::Arp { request: true, target_ip, .. } if target_ip == PEER4));
}

#[test]
fn echo_requests_are_answered() {
    let (mut s, t) = stack4();
    introduce_peer4(&mut s, t);
    let data: Vec<u8> = (0..56).collect();
    let req = net_oracle::echo4_frame(PEER_MAC, OUR_MAC, PEER4, OUR4, 0x1234, 7, &data);
    assert!(s.receive(&req, t).is_none());
    let f = drain_one(&mut s);
    let (protocol, df, ..) = ipv4(&f);
    assert_eq!((protocol, df), (1, false));
    let Parsed::Ipv4 {
        src, dst, payload, ..
    } = &f.parsed
    else {
        unreachable!()
    };
    assert_eq!((*src, *dst), (OUR4, PEER4));
    assert_eq!(&payload[..2], &[0, 0], "an echo reply");
    assert_eq!(&payload[4..8], &[0x12, 0x34, 0, 7]);
    assert_eq!(&payload[8..], &data[..]);
    assert_eq!(s.stats().echo_replies, 1);
    // Not to a broadcast (Linux's icmp_echo_ignore_broadcasts).
    let bcast = Ipv4Addr::new(198, 18, 0, 255);
    let req = net_oracle::echo4_frame(PEER_MAC, BROADCAST, PEER4, bcast, 1, 1, b"all?");
    s.receive(&req, t);
    assert!(drain(&mut s).is_empty());
    assert_eq!(s.stats().dropped(DropReason::Ignored), 1);
}

#[test]
fn headers_are_validated() {
    let (mut s, t) = stack4();
    introduce_peer4(&mut s, t);
    let good = udp4_from_peer(4000, 9, b"checked");
    let mut bad_sum = good.clone();
    bad_sum[14 + 10] ^= 1;
    let mut version = good.clone();
    version[14] = 0x65;
    let mut ihl = good.clone();
    ihl[14] = 0x44;
    let mut long = good.clone();
    long[14 + 2..14 + 4].copy_from_slice(&200u16.to_be_bytes());
    let fix = |f: &mut Vec<u8>| {
        f[24..26].copy_from_slice(&[0, 0]);
        let c = !ip_sum(&f[14..34]);
        f[24..26].copy_from_slice(&c.to_be_bytes());
    };
    fix(&mut version);
    fix(&mut ihl);
    fix(&mut long);
    let other = net_oracle::udp4_frame(
        PEER_MAC,
        OUR_MAC,
        PEER4,
        Ipv4Addr::new(198, 18, 0, 9),
        1,
        2,
        b"x",
    );
    let from_bcast =
        net_oracle::udp4_frame(PEER_MAC, OUR_MAC, Ipv4Addr::BROADCAST, OUR4, 1, 2, b"x");
    let from_us = net_oracle::udp4_frame(PEER_MAC, OUR_MAC, OUR4, OUR4, 1, 2, b"x");
    let from_loopback =
        net_oracle::udp4_frame(PEER_MAC, OUR_MAC, Ipv4Addr::LOCALHOST, OUR4, 1, 2, b"x");
    let mut bad_udp = good.clone();
    let n = bad_udp.len();
    bad_udp[n - 1] ^= 1;
    for (f, why) in [
        (bad_sum, DropReason::BadChecksum),
        (version, DropReason::Malformed),
        (ihl, DropReason::Malformed),
        (long, DropReason::Malformed),
        (other, DropReason::NotForUs),
        (from_bcast, DropReason::BadSource),
        (from_us, DropReason::BadSource),
        (from_loopback, DropReason::BadSource),
        (bad_udp, DropReason::BadChecksum),
    ] {
        let before = s.stats().dropped(why);
        assert!(s.receive(&f, t).is_none(), "{why:?}");
        assert_eq!(s.stats().dropped(why), before + 1, "{why:?}");
    }
    assert!(drain(&mut s).is_empty());
    // Link padding after the packet is cut off; options are skipped.
    let mut padded = udp4_from_peer(4000, 9, b"pad");
    padded.resize(60, 0xee);
    let d = s.receive(&padded, t).expect("delivered");
    assert_eq!(d.payload(), b"pad");
    let u = net_oracle::udp4_bytes(PEER4, OUR4, 4000, 9, b"opts");
    let mut with_opts = net_oracle::ipv4_frame(PEER_MAC, OUR_MAC, V4::new(PEER4, OUR4, 17), &[]);
    with_opts[14] = 0x46;
    with_opts.extend_from_slice(&[1, 1, 1, 0]); // NOP NOP NOP EOL
    with_opts.extend_from_slice(&u);
    let total = (with_opts.len() - 14) as u16;
    with_opts[16..18].copy_from_slice(&total.to_be_bytes());
    fix_with_opts(&mut with_opts);
    let d = s.receive(&with_opts, t).expect("delivered");
    assert_eq!(
        (d.src, d.dst, d.payload()),
        (m(PEER4), m(OUR4), &b"opts"[..])
    );
    // A zero UDP checksum means none (RFC 768).
    let mut none = udp4_from_peer(4000, 9, b"no sum");
    none[14 + 20 + 6..14 + 20 + 8].copy_from_slice(&[0, 0]);
    assert_eq!(s.receive(&none, t).expect("delivered").payload(), b"no sum");
    // A datagram to the subnet's broadcast is delivered like one to us.
    let b = udp4_broadcast_from_peer(Ipv4Addr::new(198, 18, 0, 255), b"all");
    assert_eq!(s.receive(&b, t).expect("delivered").payload(), b"all");
    let b = udp4_broadcast_from_peer(Ipv4Addr::BROADCAST, b"all");
    assert_eq!(s.receive(&b, t).expect("delivered").payload(), b"all");
}

fn ip_sum(h: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for c in h.chunks(2) {
        sum += u16::from_be_bytes([c[0], c[1]]) as u32;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

fn fix_with_opts(f: &mut [u8]) {
    let hl = (f[14] & 0xf) as usize * 4;
    f[24..26].copy_from_slice(&[0, 0]);
    let c = !ip_sum(&f[14..14 + hl]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
}

#[test]
fn port_unreachable_over_ipv4_is_rate_limited_with_icmpv6() {
    let (mut s, t) = stack4();
    introduce_peer4(&mut s, t);
    let f = udp4_from_peer(4000, 9, b"anyone?");
    let d = s.receive(&f, t).expect("a datagram for us");
    assert_eq!(
        (d.src, d.dst, d.sport, d.dport),
        (m(PEER4), m(OUR4), 4000, 9)
    );
    s.port_unreachable(&d, t);
    let out = drain_one(&mut s);
    let (protocol, _, _, _, _, msg) = ipv4(&out);
    assert_eq!(protocol, 1);
    assert_eq!(&msg[..2], &[3, 3], "destination unreachable, port");
    assert_eq!(&msg[8..], &f[14..], "quotes the invoking packet");
    for _ in 0..200 {
        let d = s.receive(&f, t).unwrap();
        s.port_unreachable(&d, t);
    }
    assert_eq!(drain(&mut s).len(), 49);
    assert_eq!(s.stats().icmp_errors_rate_limited, 151);
    // Never about a broadcast.
    let later = t + Duration::from_secs(5);
    let b = udp4_broadcast_from_peer(Ipv4Addr::BROADCAST, b"x");
    let d = s.receive(&b, later).unwrap();
    s.port_unreachable(&d, later);
    assert!(drain(&mut s).is_empty());
    // An unknown protocol: protocol unreachable.
    let f = net_oracle::ipv4_frame(PEER_MAC, OUR_MAC, V4::new(PEER4, OUR4, 132), b"sctp?");
    assert!(s.receive(&f, later).is_none());
    let f = drain_one(&mut s);
    let (_, _, _, _, _, msg) = ipv4(&f);
    assert_eq!(&msg[..2], &[3, 2]);
    assert_eq!(s.stats().dropped(DropReason::UnsupportedNextHeader), 1);
}

#[test]
fn fragments_are_reassembled() {
    let (mut s, t) = stack4();
    introduce_peer4(&mut s, t);
    let payload: Vec<u8> = (0..3000u32).map(|i| (i * 3) as u8).collect();
    let u = net_oracle::udp4_bytes(PEER4, OUR4, 4000, 9, &payload);
    let frags: Vec<Vec<u8>> = u
        .chunks(1480)
        .enumerate()
        .map(|(i, c)| {
            let mut h = V4::new(PEER4, OUR4, 17);
            h.id = 0x4242;
            h.offset = i * 1480;
            h.more = (i + 1) * 1480 < u.len();
            net_oracle::ipv4_frame(PEER_MAC, OUR_MAC, h, c)
        })
        .collect();
    assert_eq!(frags.len(), 3);
    assert!(s.receive(&frags[2], t).is_none());
    assert!(s.receive(&frags[0], t).is_none());
    let d = s.receive(&frags[1], t).expect("complete");
    assert!(d.reassembled());
    assert_eq!(
        (d.src, d.dst, d.payload()),
        (m(PEER4), m(OUR4), &payload[..])
    );
    assert_eq!(s.stats().reassembled, 1);
    // Port unreachable about a reassembled datagram quotes its start.
    s.port_unreachable(&d, t);
    let f = drain_one(&mut s);
    let (_, _, _, _, _, msg) = ipv4(&f);
    assert_eq!(&msg[..2], &[3, 3]);
    // An overlap abandons the packet (RFC 5722's rule, as for IPv6).
    let mut a = V4::new(PEER4, OUR4, 17);
    a.id = 7;
    a.more = true;
    s.receive(&net_oracle::ipv4_frame(PEER_MAC, OUR_MAC, a, &u[..16]), t);
    a.offset = 8;
    s.receive(&net_oracle::ipv4_frame(PEER_MAC, OUR_MAC, a, &u[8..24]), t);
    assert_eq!(s.stats().dropped(DropReason::FragmentOverlap), 2);
    // A middle fragment not a multiple of 8.
    a.id = 8;
    s.receive(&net_oracle::ipv4_frame(PEER_MAC, OUR_MAC, a, &u[..13]), t);
    assert_eq!(s.stats().dropped(DropReason::BadFragment), 1);
    // A first fragment left alone: reassembly times out, time exceeded answers.
    a.id = 9;
    a.offset = 0;
    s.receive(&net_oracle::ipv4_frame(PEER_MAC, OUR_MAC, a, &u[..16]), t);
    assert!(drain(&mut s).is_empty());
    s.poll(t + Duration::from_secs(61));
    // (Beside a reachability probe of the peer, whose entry grew stale meanwhile.)
    let out: Vec<Frame> = drain(&mut s)
        .into_iter()
        .filter(|f| !matches!(f.parsed, Parsed::Arp { .. }))
        .collect();
    assert_eq!(out.len(), 1);
    let (_, _, _, _, _, msg) = ipv4(&out[0]);
    assert_eq!(&msg[..2], &[11, 1], "time exceeded in reassembly");
    assert_eq!(s.reassemblies(), 0);
}

#[test]
fn large_datagrams_go_in_fragments() {
    let (mut s, t) = stack4();
    introduce_peer4(&mut s, t);
    let payload: Vec<u8> = (0..5000u32).map(|i| (i * 7) as u8).collect();
    s.send_udp(None, 4000, m(PEER4), 9, &payload, t).unwrap();
    let out = drain(&mut s);
    assert_eq!(out.len(), 4);
    let mut whole = Vec::new();
    let mut ids = Vec::new();
    for (i, f) in out.iter().enumerate() {
        let (protocol, df, more, offset, id, data) = ipv4(f);
        assert_eq!((protocol, df, more), (17, false, i + 1 < out.len()));
        assert_eq!(offset, whole.len());
        assert!(20 + data.len() <= 1500);
        ids.push(id);
        whole.extend_from_slice(data);
    }
    assert!(ids.windows(2).all(|w| w[0] == w[1]));
    let u = UdpPacket::new_checked(&whole[..]).unwrap();
    assert!(u.verify_checksum(&IpAddress::Ipv4(OUR4), &IpAddress::Ipv4(PEER4)));
    assert_eq!(u.payload(), &payload[..]);
    assert_eq!(s.stats().fragments_tx, 4);
    // The largest datagram IPv4 carries, and one byte more.
    assert!(s.send_udp(None, 1, m(PEER4), 2, &vec![0; 65507], t).is_ok());
    assert_eq!(
        s.send_udp(None, 1, m(PEER4), 2, &vec![0; 65508], t),
        Err(SendError::TooBig)
    );
}

#[test]
fn fragmentation_needed_lowers_the_path_mtu() {
    let (mut s, t) = stack4();
    introduce_peer4(&mut s, t);
    let far = Ipv4Addr::new(198, 18, 0, 50);
    // What we sent, as a router quotes it: header and 8 bytes.
    let quoted = net_oracle::udp4_bytes(OUR4, far, 1, 7, &[7; 1400]);
    let invoking =
        net_oracle::ipv4_frame(OUR_MAC, PEER_MAC, V4::new(OUR4, far, 17), &quoted)[14..42].to_vec();
    let frag_needed = |mtu: u16, invoking: &[u8]| {
        let mut msg = vec![3, 4, 0, 0, 0, 0];
        msg.extend_from_slice(&mtu.to_be_bytes());
        msg.extend_from_slice(invoking);
        let c = !ip_sum_padded(&msg);
        msg[2..4].copy_from_slice(&c.to_be_bytes());
        net_oracle::ipv4_frame(PEER_MAC, OUR_MAC, V4::new(PEER4, OUR4, 1), &msg)
    };
    assert_eq!(s.path_mtu(&m(far), t), 1500);
    s.receive(&frag_needed(1400, &invoking), t);
    assert_eq!(s.path_mtu(&m(far), t), 1400);
    assert_eq!(s.take_path_mtu_changes(), vec![(m(far), 1400)]);
    // Never below 576, never up, never about another host's packet.
    s.receive(&frag_needed(100, &invoking), t);
    assert_eq!(s.path_mtu(&m(far), t), 576);
    s.receive(&frag_needed(1450, &invoking), t);
    assert_eq!(s.path_mtu(&m(far), t), 576);
    let mut theirs = invoking.clone();
    theirs[12..16].copy_from_slice(&[198, 18, 0, 99]);
    s.receive(&frag_needed(800, &theirs), t);
    assert_eq!(s.stats().dropped(DropReason::NotForUs), 1);
    assert_eq!(s.stats().ptb_rx, 3);
    // A bad ICMPv4 checksum.
    let mut bad = frag_needed(1000, &invoking);
    bad[14 + 20 + 2] ^= 1;
    s.receive(&bad, t);
    assert_eq!(s.stats().dropped(DropReason::BadChecksum), 1);
    assert_eq!(s.path_mtu(&m(far), t), 576);
    // It wears off as an IPv6 path MTU does.
    let later = t + qpip_device::net::stack::PMTU_TIMEOUT;
    s.poll(later);
    assert_eq!(s.path_mtu(&m(far), later), 1500);
}

fn ip_sum_padded(b: &[u8]) -> u16 {
    let mut v = b.to_vec();
    if v.len() % 2 == 1 {
        v.push(0);
    }
    ip_sum(&v)
}

#[test]
fn tcp_segments_go_with_dont_fragment() {
    let (mut s, t) = stack4();
    introduce_peer4(&mut s, t);
    let seg = qpip_device::net::tcp::wire::build(
        &m(OUR4),
        &m(PEER4),
        &qpip_device::net::tcp::wire::Header {
            src_port: 5,
            dst_port: 6,
            flags: qpip_device::net::tcp::wire::flags::ACK,
            ..Default::default()
        },
        &[1u8; 4000],
    );
    s.send_tcp(m(OUR4), m(PEER4), 64, &seg, 1460, t).unwrap();
    let out = drain(&mut s);
    assert_eq!(out.len(), 3, "cut to the MSS");
    let mut ids = Vec::new();
    for f in &out {
        let (protocol, df, more, offset, id, data) = ipv4(f);
        assert_eq!((protocol, df, more, offset), (6, true, false, 0));
        assert!(20 + data.len() <= 1500);
        ids.push(id);
    }
    assert!(
        ids.windows(2).all(|w| w[1] == w[0].wrapping_add(1)),
        "{ids:?}"
    );
    // Whole to a link that cuts it itself.
    s.send_tcp(m(OUR4), m(PEER4), 64, &seg, 1460, t).unwrap();
    let (frame, mss) = s.pop_tx_gso().expect("a super-frame");
    assert_eq!(mss, 1460);
    assert_eq!(frame.len(), 14 + 20 + seg.len());
    assert!(s.pop_tx_gso().is_none());
}

#[test]
fn routes_and_sources_keep_to_their_family() {
    let (mut s, t) = stack4();
    // Off the prefix: no route (on-link only, as for IPv6).
    assert_eq!(
        s.send_udp(None, 1, m(Ipv4Addr::new(10, 0, 0, 1)), 2, b"x", t),
        Err(SendError::NoRoute)
    );
    for bad in [
        Ipv4Addr::BROADCAST,
        Ipv4Addr::new(198, 18, 0, 255),
        Ipv4Addr::new(224, 0, 0, 1),
    ] {
        assert_eq!(
            s.send_udp(None, 1, m(bad), 2, b"x", t),
            Err(SendError::BadDestination),
            "{bad}"
        );
    }
    // An IPv6 source toward an IPv4 destination, and the other way.
    assert_eq!(
        s.send_udp(Some(OUR), 1, m(PEER4), 2, b"x", t),
        Err(SendError::BadSource)
    );
    assert_eq!(
        s.send_udp(Some(m(OUR4)), 1, PEER, 2, b"x", t),
        Err(SendError::BadSource)
    );
    assert_eq!(s.select_source(&m(PEER4)), m(OUR4));
    assert_eq!(s.select_source(&PEER), OUR);
    // A device without an IPv4 address reaches no IPv4 host.
    let (mut v6only, t) = stack();
    assert_eq!(
        v6only.send_udp(None, 1, m(PEER4), 2, b"x", t),
        Err(SendError::NoRoute)
    );
}

#[test]
fn the_device_reaches_its_ipv4_addresses_through_the_loopback() {
    let (mut s, t) = stack4();
    for dst in [m(OUR4), m(Ipv4Addr::LOCALHOST)] {
        assert_eq!(s.send_udp(None, 40000, dst, 7, b"to myself", t), Ok(dst));
        assert!(drain(&mut s).is_empty(), "nothing reaches the link");
        let p = s.pop_loopback().expect("looped");
        match s.receive_looped(&p, t) {
            Some(Upper::Udp(d)) => {
                assert_eq!((d.src, d.dst, d.sport, d.dport), (dst, dst, 40000, 7));
                assert_eq!(d.payload(), b"to myself");
            }
            other => panic!("{dst}: {other:?}"),
        }
    }
    // 127.0.0.1 never reaches the link as a source.
    introduce_peer4(&mut s, t);
    assert_eq!(
        s.send_udp(Some(m(Ipv4Addr::LOCALHOST)), 1, m(PEER4), 7, b"x", t),
        Err(SendError::BadSource)
    );
}
