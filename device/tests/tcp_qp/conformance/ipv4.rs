//! TCP over IPv4: the handshake and data with the link's MSS and "don't fragment" (RFC 9293
//! §3.7.1, RFC 1191), ARP (RFC 826, RFC 5227), the IPv4 header's checks (RFC 791, RFC 1122
//! §3.2.1), fragments (RFC 791, RFC 815), "fragmentation needed" (RFC 1191) and the ICMPv4
//! errors the device sends (RFC 1122 §3.2.2, §4.1.3.1).

use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use etherparse::{IpNumber, Ipv4Header};
use qpip_device::net::frag::MAX_REASSEMBLIES;
use qpip_device::net::stats::DropReason;
use qpip_device::net::wire::{self, icmp4, Arp, Ipv4Fields, Mac, BROADCAST_MAC};
use qpip_testkit as support;

use super::path_mtu::expect_stream;
use crate::script::*;
use support::*;

const TCP: u8 = 6;
const UDP: u8 = 17;
/// Another station on the link, and its MAC.
const OTHER4: &str = "198.18.0.3";
const OTHER_MAC: Mac = [0x02, 0x51, 0x50, 0, 0x16, 0x03];

fn v4(s: &str) -> Ipv6Addr {
    wire::mapped(s.parse::<Ipv4Addr>().unwrap())
}

fn drops(p: &mut Peer, why: DropReason) -> u64 {
    p.stat(STAT_NET_DROP_BASE + why as u32)
}

/// The last TCP segment the device sent.
fn last_seg(p: &Peer) -> &Seg {
    p.log
        .iter()
        .rev()
        .find_map(|f| match f {
            Frame::Tcp(s) => Some(s),
            _ => None,
        })
        .expect("a TCP segment")
}

/// Every packet the device sent so far fits `mtu` bytes, is no fragment, and carries "don't
/// fragment" if it is TCP: TCP over IPv4 does path MTU discovery, never fragmentation (RFC
/// 1191 §3, RFC 9293 §3.7.2).
fn all_fit_with_df(p: &Peer, mtu: usize) {
    for f in &p.log {
        match f {
            Frame::Fragment(n) => panic!("the device fragmented a packet ({n} bytes)"),
            Frame::Tcp(s) => {
                assert!(s.ip_len <= mtu, "{} bytes > {mtu}", s.ip_len);
                assert_eq!(s.df, Some(true), "DF on a TCP segment");
            }
            _ => {}
        }
    }
}

/// The script of a passive open over IPv4: the test's SYN announcing 1460, the device's
/// SYN-ACK announcing the same (1500 less 40 bytes of headers).
const HANDSHAKE: &str = "
    > S 0:0(0) win 65535 <mss 1460,sackOK,nop,wscale 7>
    < S. 0:0(0) ack 1 win 65535 <mss 1460,sackOK,wscale 7>
    > . 1:1(0) ack 1 win 1024
    @accepted
";

// ---- the handshake and data ----------------------------------------------------------------

/// RFC 9293 §3.7.1 (and RFC 879): the SYN-ACK announces the MTU of the link less 40 bytes
/// of IPv4 and TCP headers, 1460; data crosses both ways in segments of that size; every
/// TCP packet the device sends carries "don't fragment" (RFC 1191 §3) and goes to the
/// test's MAC.
#[test]
fn handshake_and_data_over_ipv4() {
    let mut p = Peer::listening_v4("v4-data");
    assert_eq!(p.link_mss(), 1460);
    p.run(HANDSHAKE);
    p.run(
        "
        @post 10000
        < . 1:1(0) ack 1 win *
        > . 1:1461(1460) ack 1 win 1024
        > P. 1461:2001(540) ack 1 win 1024
        < . 1:1(0) ack 2001 win *
        @received 2000
        @send 4000
        ",
    );
    p.expect_data(1, 2, 1460);
    p.run(
        "
        < P. 2921:4001(1080) ack 2001 win *
        > . 2001:2001(0) ack 4001 win 1024
        @sent
        < nothing
        ",
    );
    all_fit_with_df(&p, 1500);
    assert!(p.log.iter().all(|f| match f {
        Frame::Tcp(s) => s.eth_dst == PEER_MAC,
        _ => true,
    }));
}

/// RFC 9293 §3.7.1: an active open over IPv4 announces 1460 too, and sends no more than
/// the peer's MSS (536 here) in a segment.
#[test]
fn active_open_over_ipv4_respects_the_peers_mss() {
    let mut p = Peer::connecting_with("v4-active", Setup::V4);
    p.run(
        "
        < S 0:0(0) win 65535 <mss 1460,sackOK,TS val * ecr 0,wscale 7>
        > S. 0:0(0) ack 1 win 65535 <mss 536,sackOK,nop,wscale 7>
        < . 1:1(0) ack 1 win 512
        @connected
        @send 1000
        ",
    );
    p.expect_data(1, 1, 536);
    p.run("< P. 537:1001(464) ack 1 win 512");
    all_fit_with_df(&p, 576);
}

/// RFC 9293 §3.7.1 (MUST-15) and RFC 1122 §4.2.2.6: a SYN without an MSS option means 536
/// bytes over IPv4 (576 less 40), whatever the link allows.
#[test]
fn no_mss_option_means_536_over_ipv4() {
    let mut p = Peer::listening_v4("v4-nomss");
    p.run(
        "
        > S 0:0(0) win 65535
        < S. 0:0(0) ack 1 win 65535 <mss 1460>
        > . 1:1(0) ack 1 win 65535
        @accepted
        @send 1200
        < . 1:537(536) ack 1 win 65535 <>
        < . 537:1073(536) ack 1 win 65535 <>
        < P. 1073:1201(128) ack 1 win 65535 <>
        ",
    );
    all_fit_with_df(&p, 576);
}

// ---- ARP -------------------------------------------------------------------------------------

/// RFC 826's packet reception: a request for the device's address is answered, to the
/// asker, with the device's MAC, and the asker's address is learned — the SYN-ACK goes to
/// its MAC without the device asking for it (RFC 1122 §2.3.2.1).
#[test]
fn arp_request_is_answered_and_the_asker_learned() {
    let mut p = Peer::listening_with("v4-arp-answer", Setup::V4_ARP);
    p.arp_request(p.dev);
    let (to, m) = p.next_arp();
    assert_eq!(to, PEER_MAC, "the reply goes to the asker");
    assert_eq!(
        m,
        Arp {
            request: false,
            sender_mac: DEV_MAC,
            sender_ip: p.dev,
            target_mac: PEER_MAC,
            target_ip: p.addr,
        }
    );
    p.run(HANDSHAKE);
    assert_eq!(last_seg(&p).eth_dst, PEER_MAC);
    assert_eq!(
        p.arps_pending(),
        vec![],
        "the device asked for a MAC it knew"
    );
}

/// RFC 826: a request for another station's address is not answered (it is counted as
/// not for the device) and teaches nothing: to answer the test's SYN the device asks for
/// the test's MAC first, by broadcast, and sends its SYN-ACK once the test replied.
#[test]
fn arp_request_for_another_address_is_ignored() {
    let mut p = Peer::listening_with("v4-arp-other", Setup::V4_ARP);
    let not_for_us = drops(&mut p, DropReason::NotForUs);
    p.arp_request(v4(OTHER4));
    p.run("> S 0:0(0) win 65535 <mss 1460,sackOK,nop,wscale 7>");
    let req = p.expect_arp_request(p.addr);
    assert!(drops(&mut p, DropReason::NotForUs) > not_for_us);
    p.arp_reply(&req);
    p.run(
        "
        < S. 0:0(0) ack 1 win 65535 <mss 1460,sackOK,wscale 7>
        > . 1:1(0) ack 1 win 1024
        @accepted
        ",
    );
    assert_eq!(last_seg(&p).eth_dst, PEER_MAC);
}

/// RFC 826 and RFC 1122 §2.3.2.2: a connection to a peer whose MAC is unknown waits for
/// ARP: broadcast requests first, no more than one a second (RFC 1122 §2.3.2.1), and the
/// SYN (held meanwhile) once one is answered, to the MAC in the reply.
#[test]
fn an_unknown_peer_is_resolved_before_the_syn() {
    let mut p = Peer::connecting_with("v4-arp-resolve", Setup::V4_ARP);
    p.expect_arp_request(p.addr);
    let first = Instant::now();
    let req = p.expect_arp_request(p.addr);
    assert!(
        first.elapsed() >= Duration::from_millis(800),
        "ARP requests {:?} apart",
        first.elapsed()
    );
    assert!(
        !p.log.iter().any(|f| matches!(f, Frame::Tcp(_))),
        "a TCP segment before the peer was resolved"
    );
    p.arp_reply(&req);
    p.run("< S 0:0(0) win 65535 <mss 1460,sackOK,TS val * ecr 0,wscale 7>");
    assert_eq!(last_seg(&p).eth_dst, PEER_MAC);
}

/// RFC 1122 §2.3.2.1 and §2.3.2.2: a peer that never answers is asked a few times (three
/// broadcast requests, a second apart), then given up: the packets held for it are
/// dropped and counted, and nothing went out to it.
#[test]
fn an_unanswered_peer_is_given_up() {
    let mut p = Peer::connecting_with("v4-arp-unanswered", Setup::V4_ARP);
    let failed = p.stat(STAT_NET_RESOLUTION_FAILED);
    for _ in 0..3 {
        p.expect_arp_request(p.addr);
    }
    let deadline = Instant::now() + WAIT;
    while p.stat(STAT_NET_RESOLUTION_FAILED) == failed {
        assert!(Instant::now() < deadline, "the resolution never failed");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        !p.log.iter().any(|f| matches!(f, Frame::Tcp(_))),
        "a TCP segment to a peer never resolved"
    );
}

/// RFC 1122 §2.3.2.1 (a unicast poll), with RFC 4861 §7.3.3's states as for IPv6: a
/// neighbour learned from its request and not confirmed since is asked again, by a
/// request to its MAC, once the first packet sent to it is 5 s old; its reply keeps the
/// connection going.
#[test]
fn a_learned_neighbour_is_polled_by_unicast() {
    let mut p = Peer::listening_with("v4-arp-poll", Setup::V4_ARP);
    p.arp_request(p.dev);
    p.next_arp();
    p.run(
        "
        > S 0:0(0) win 65535 <mss 1460,sackOK,nop,wscale 7>
        < S. 0:0(0) ack 1 win 65535 <mss 1460,sackOK,wscale 7>
        ",
    );
    let sent = Instant::now();
    let (to, m) = p.next_arp();
    assert!(
        sent.elapsed() >= Duration::from_secs(4),
        "polled after {:?}",
        sent.elapsed()
    );
    assert_eq!(to, PEER_MAC, "a unicast poll");
    assert_eq!((m.request, m.target_ip), (true, p.addr));
    p.arp_reply(&m);
    p.run(
        "
        > . 1:1(0) ack 1 win 1024
        @accepted
        ",
    );
}

/// RFC 826 leaves unsolicited replies to the host; the device does as Linux does by
/// default (arp_accept off): a reply it did not ask for teaches it nothing, and it asks
/// before it answers the sender's SYN.
#[test]
fn an_unsolicited_arp_reply_is_not_learned() {
    let mut p = Peer::listening_with("v4-arp-unsolicited", Setup::V4_ARP);
    let m = Arp {
        request: false,
        sender_mac: PEER_MAC,
        sender_ip: p.addr,
        target_mac: DEV_MAC,
        target_ip: p.dev,
    };
    p.inject_arp(&m, &DEV_MAC);
    p.run("> S 0:0(0) win 65535 <mss 1460,sackOK,nop,wscale 7>");
    let req = p.expect_arp_request(p.addr);
    p.arp_reply(&req);
    p.run("< S. 0:0(0) ack 1 win 65535 <mss 1460,sackOK,wscale 7>");
}

/// RFC 826's merge step and RFC 5227 §3: an announcement (gratuitous ARP) by a neighbour
/// the device knows, with a new MAC, updates its entry: the device's next segment goes to
/// the new MAC without asking.
#[test]
fn gratuitous_arp_moves_a_known_neighbour() {
    let mut p = Peer::listening_with("v4-garp", Setup::V4_ARP);
    p.arp_request(p.dev);
    p.next_arp();
    p.run(HANDSHAKE);
    p.mac = OTHER_MAC;
    let announce = Arp {
        request: true,
        sender_mac: OTHER_MAC,
        sender_ip: p.addr,
        target_mac: [0; 6],
        target_ip: p.addr,
    };
    p.inject_arp(&announce, &BROADCAST_MAC);
    // The barrier's answer follows the announcement on the cable, and the guest's send
    // follows the barrier.
    p.run("< nothing");
    assert_eq!(last_seg(&p).eth_dst, OTHER_MAC);
    p.run(
        "
        @send 100
        < P. 1:101(100) ack 1 win 512
        ",
    );
    assert_eq!(last_seg(&p).eth_dst, OTHER_MAC);
    assert_eq!(p.arps_pending(), vec![]);
}

/// RFC 5227 §2.1.1 and §2.4: the device defends its address against a probe (sender
/// 0.0.0.0) with a reply to the prober; another station announcing the device's address
/// changes nothing the device does: it keeps the address and the connection on it.
#[test]
fn address_probe_is_defended_and_a_conflict_changes_nothing() {
    let mut p = Peer::receiving_with("v4-conflict", Setup::V4);
    let probe = Arp {
        request: true,
        sender_mac: OTHER_MAC,
        sender_ip: v4("0.0.0.0"),
        target_mac: [0; 6],
        target_ip: p.dev,
    };
    p.inject_arp(&probe, &BROADCAST_MAC);
    let (to, m) = p.next_arp();
    assert_eq!(to, OTHER_MAC);
    assert_eq!(
        (m.request, m.sender_mac, m.sender_ip),
        (false, DEV_MAC, p.dev)
    );
    let claim = Arp {
        sender_ip: p.dev,
        ..probe
    };
    p.inject_arp(&claim, &BROADCAST_MAC);
    p.run(
        "
        > P. 1:101(100) ack 1 win 1024
        < . 1:1(0) ack 101 win *
        @received 100
        ",
    );
    assert_eq!(last_seg(&p).eth_dst, PEER_MAC);
    assert_eq!(p.arps_pending(), vec![]);
}

// ---- the IPv4 header -------------------------------------------------------------------------

/// A frame from the test carrying `seg` (TCP) in an IPv4 packet of TTL `ttl` with the
/// header options `options` (a multiple of 4 bytes), DF set, its header checksum right.
fn tcp_frame(p: &Peer, seg: &[u8], ttl: u8, options: &[u8]) -> Vec<u8> {
    let o = |a: &Ipv6Addr| wire::ipv4_of(a).unwrap().octets();
    let mut h = Ipv4Header::new(seg.len() as u16, ttl, IpNumber::TCP, o(&p.addr), o(&p.dev))
        .expect("a header");
    h.dont_fragment = true;
    h.options = options.try_into().expect("options");
    h.set_payload_len(seg.len()).expect("fits"); // the total length counts the options
    h.header_checksum = h.calc_header_checksum();
    let mut f = vec![0u8; wire::ETH_LEN];
    wire::write_ethernet(&mut f, &DEV_MAC, &p.mac);
    f[12..14].copy_from_slice(&wire::ETHERTYPE_IPV4.to_be_bytes());
    f.extend_from_slice(&h.to_bytes());
    f.extend_from_slice(seg);
    f
}

/// Byte `at` of the IPv4 header in a frame.
const IP: usize = wire::ETH_LEN;

/// Sets the checksum of the 20-byte IPv4 header in `f` right (after an edit that may
/// leave it unreadable to a parser: RFC 1071's sum, written out).
fn fix_checksum(f: &mut [u8]) {
    f[IP + 10..IP + 12].fill(0);
    let mut sum: u32 = f[IP..IP + 20]
        .chunks(2)
        .map(|w| u16::from_be_bytes([w[0], w[1]]) as u32)
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    f[IP + 10..IP + 12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
}

/// RFC 1122 §3.2.1.1, §3.2.1.2 and RFC 791: a packet with a header checksum that does not
/// verify, a version other than 4, an IHL under 5 or a total length past the frame (or
/// shorter than its header) is dropped and counted, and the segment in it never reaches
/// TCP; RFC 1122 §3.2.1.3: so is one from a broadcast, multicast or loopback source, and
/// one to another station's address or to loopback.
#[test]
fn ipv4_headers_that_fail_the_checks_are_dropped() {
    let mut p = Peer::receiving_with("v4-badhdr", Setup::V4);
    let seg = p.tcp("> P. 1:101(100) ack 1 win 1024");
    let good = tcp_frame(&p, &seg, 64, &[]);
    let (bad_sum, malformed, bad_source) = (
        drops(&mut p, DropReason::BadChecksum),
        drops(&mut p, DropReason::Malformed),
        drops(&mut p, DropReason::BadSource),
    );
    let mut f = good.clone();
    f[IP + 10] ^= 0x40;
    p.inject_frame(&f);
    // Bytes written over the header at an offset: version 6; IHL 4; a total length past
    // the frame; one inside the header; a broadcast, a multicast and a loopback source.
    let edits: [(usize, &[u8]); 7] = [
        (IP, &[0x65]),
        (IP, &[0x44]),
        (IP + 2, &400u16.to_be_bytes()),
        (IP + 2, &16u16.to_be_bytes()),
        (IP + 12, &[255; 4]),
        (IP + 12, &[224, 0, 0, 1]),
        (IP + 12, &[127, 0, 0, 1]),
    ];
    for (at, bytes) in edits {
        let mut f = good.clone();
        f[at..at + bytes.len()].copy_from_slice(bytes);
        fix_checksum(&mut f);
        p.inject_frame(&f);
    }
    let not_for_us = drops(&mut p, DropReason::NotForUs);
    // To another station's address, and to loopback.
    for dst in [[198, 18, 0, 3], [127, 0, 0, 1]] {
        let mut f = good.clone();
        f[IP + 16..IP + 20].copy_from_slice(&dst);
        fix_checksum(&mut f);
        p.inject_frame(&f);
    }
    p.run("< nothing");
    assert_eq!(drops(&mut p, DropReason::NotForUs), not_for_us + 2);
    assert_eq!(drops(&mut p, DropReason::BadChecksum), bad_sum + 1);
    assert_eq!(drops(&mut p, DropReason::Malformed), malformed + 4);
    assert_eq!(drops(&mut p, DropReason::BadSource), bad_source + 3);
    p.inject_frame(&good);
    p.run("< . 1:1(0) ack 101 win *");
    p.received(100);
}

/// RFC 1122 §3.2.1.7: a host does not drop a packet for its TTL (0 or 1 included: TTL is
/// a router's business); §3.2.1.8: options it does not act on (no-ops, record route,
/// timestamps) are passed over; RFC 894 / RFC 1122 §3.2.1.1: link padding after the total
/// length is not data.
#[test]
fn ttl_options_and_padding_do_not_stop_a_segment() {
    let mut p = Peer::receiving_with("v4-opts", Setup::V4);
    let seg = p.tcp("> . 1:101(100) ack 1 win 1024");
    let f = tcp_frame(&p, &seg, 0, &[]);
    p.inject_frame(&f);
    p.run("< . 1:1(0) ack 101 win *");
    let seg = p.tcp("> . 101:201(100) ack 1 win 1024");
    // NOP, record route (room for one address), timestamps (room for one), EOL.
    let opts = [1, 7, 7, 4, 0, 0, 0, 0, 68, 8, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    let f = tcp_frame(&p, &seg, 1, &opts);
    p.inject_frame(&f);
    p.run("< . 1:1(0) ack 201 win *");
    let seg = p.tcp("> P. 201:301(100) ack 1 win 1024");
    let mut f = tcp_frame(&p, &seg, 64, &[]);
    f.extend_from_slice(&[0xee; 30]);
    p.inject_frame(&f);
    p.run("< . 1:1(0) ack 301 win *");
    p.received(300);
}

/// RFC 1122 §4.2.3.10 and §3.2.1.3: a SYN to a broadcast address (the link's, or the
/// limited broadcast) or to a multicast group is discarded, counted as not for the device.
#[test]
fn syn_to_a_broadcast_or_multicast_address_is_discarded() {
    let mut p = Peer::listening_v4("v4-bcast");
    let seg = p.tcp("> S 0:0(0) win 65535 <mss 1460>");
    let not_for_us = drops(&mut p, DropReason::NotForUs);
    let all_hosts_mac = [0x01, 0x00, 0x5e, 0, 0, 1];
    for (dst, mac) in [
        ("198.18.0.255", BROADCAST_MAC),
        ("255.255.255.255", BROADCAST_MAC),
        ("224.0.0.1", all_hosts_mac),
    ] {
        let f = Ipv4Fields::whole(TCP, 64, 0, true);
        // The TCP checksum is over the device's address: the IPv4 layer drops the packet
        // before TCP would look.
        let mut frame = wire::ipv4_packet(&p.addr, &v4(dst), &f, &seg);
        wire::write_ethernet(&mut frame, &mac, &p.mac);
        p.inject_frame(&frame);
    }
    p.run("< nothing");
    assert_eq!(drops(&mut p, DropReason::NotForUs), not_for_us + 3);
    // The barrier's answer was a RST: with DF too.
    all_fit_with_df(&p, 1500);
}

// ---- fragments -------------------------------------------------------------------------------

/// IPv4 fragments of `upper` (TCP) with identification `id`, cut at the given offsets
/// (multiples of 8), injected in the order given.
fn inject_fragments(p: &mut Peer, id: u16, upper: &[u8], order: &[(usize, usize)]) {
    for &(from, to) in order {
        let f = Ipv4Fields {
            protocol: TCP,
            ttl: 64,
            id,
            dont_fragment: false,
            offset: from,
            more: to < upper.len(),
        };
        let mut frame = wire::ipv4_packet(&p.addr, &p.dev, &f, &upper[from..to]);
        wire::write_ethernet(&mut frame, &DEV_MAC, &p.mac);
        p.inject_frame(&frame);
    }
}

/// RFC 791 §3.2 and RFC 815: a TCP segment in three fragments arriving out of order (the
/// last first) is reassembled and taken; the fragments and the reassembly are counted.
#[test]
fn tcp_in_ipv4_fragments_out_of_order() {
    let mut p = Peer::receiving_with("v4-frag", Setup::V4);
    let (frags, whole) = (p.stat(STAT_NET_FRAGMENTS_RX), p.stat(STAT_NET_REASSEMBLED));
    let seg = p.tcp("> P. 1:1001(1000) ack 1 win 1024");
    inject_fragments(&mut p, 7, &seg, &[(800, seg.len()), (400, 800), (0, 400)]);
    p.run("< . 1:1(0) ack 1001 win *");
    p.received(1000);
    assert_eq!(p.stat(STAT_NET_FRAGMENTS_RX), frags + 3);
    assert_eq!(p.stat(STAT_NET_REASSEMBLED), whole + 1);
}

/// RFC 791 leaves overlaps to the host: the device drops the whole packet as it does over
/// IPv6 (RFC 5722), counted; the segment sent again whole is taken. A fragment that
/// cannot be part of a packet (more to come, a length not a multiple of 8; past 65535
/// bytes) is dropped, counted as a bad fragment.
#[test]
fn overlapping_or_impossible_ipv4_fragments_are_dropped() {
    let mut p = Peer::receiving_with("v4-badfrag", Setup::V4);
    let (overlap, bad) = (
        drops(&mut p, DropReason::FragmentOverlap),
        drops(&mut p, DropReason::BadFragment),
    );
    let seg = p.tcp("> P. 1:1001(1000) ack 1 win 1024");
    inject_fragments(&mut p, 9, &seg, &[(0, 512), (504, seg.len())]); // 8 bytes twice
    p.run("< nothing");
    assert!(drops(&mut p, DropReason::FragmentOverlap) > overlap);
    inject_fragments(&mut p, 10, &seg, &[(0, 500)]); // more to come, 500 bytes
    let f = Ipv4Fields {
        protocol: TCP,
        ttl: 64,
        id: 11,
        dont_fragment: false,
        offset: 65528,
        more: false,
    };
    let mut frame = wire::ipv4_packet(&p.addr, &p.dev, &f, &[0; 16]);
    wire::write_ethernet(&mut frame, &DEV_MAC, &p.mac);
    p.inject_frame(&frame);
    p.run("< nothing");
    assert_eq!(drops(&mut p, DropReason::BadFragment), bad + 2);
    p.run(
        "
        > P. 1:1001(1000) ack 1 win 1024
        < . 1:1(0) ack 1001 win *
        ",
    );
    p.received(1000);
}

/// RFC 815's resource concerns (and RFC 1122 §3.3.2): packets never completed do not pile
/// up: past the device's bound on reassemblies in progress the oldest is abandoned and
/// counted, and a packet in fragments is still reassembled after.
#[test]
fn incomplete_ipv4_fragments_are_bounded() {
    let mut p = Peer::receiving_with("v4-fragbound", Setup::V4);
    let failed = drops(&mut p, DropReason::ReassemblyFailed);
    let junk = [0u8; 64];
    for id in 0..MAX_REASSEMBLIES as u16 + 8 {
        inject_fragments(&mut p, 1000 + id, &junk, &[(0, 32)]);
    }
    let seg = p.tcp("> P. 1:1001(1000) ack 1 win 1024");
    inject_fragments(&mut p, 7, &seg, &[(504, seg.len()), (0, 504)]);
    p.run("< . 1:1(0) ack 1001 win *");
    p.received(1000);
    assert!(
        drops(&mut p, DropReason::ReassemblyFailed) >= failed + 8,
        "reassemblies abandoned past the bound"
    );
}

// ---- fragmentation needed --------------------------------------------------------------------

/// An established IPv4 connection on which the guest sends `n` bytes: segments of 1460
/// go out, then "fragmentation needed" reporting `mtu` makes the device send them all
/// again at once in segments of `mss`. From then on `p.log` holds what the device sends.
fn narrowed(name: &str, n: u32, mtu: u16, mss: u32) -> Peer {
    let mut p = Peer::established_v4(name);
    p.run(&format!("@send {n}"));
    expect_stream(&mut p, 1, n, 1460);
    p.frag_needed(mtu);
    p.log.clear();
    expect_stream(&mut p, 1, n, mss);
    p
}

/// RFC 1191 §3 and §6.4, RFC 9293 §3.7.3: "fragmentation needed" lowers the path MTU of a
/// live connection: what was in flight is sent again at once in segments that fit (1000
/// bytes: 960 of data), with DF, never fragmented; what follows fits too. A later report
/// of a larger MTU does not raise it again.
#[test]
fn fragmentation_needed_on_a_live_connection() {
    let mut p = narrowed("v4-fn-live", 4000, 1000, 960);
    // A report of more than the path MTU never raises it (RFC 1191 §3).
    p.frag_needed(1400);
    p.run(
        "
        < nothing
        > . 1:1(0) ack 4001 win 1024
        @sent
        @send 3000
        ",
    );
    expect_stream(&mut p, 4001, 3000, 960);
    all_fit_with_df(&p, 1000);
}

/// RFC 1191 §3: the path MTU is the destination's: a new connection to it sends segments
/// that fit (while its SYN still announces the MSS of the link, RFC 9293 §3.7.1).
#[test]
fn fragmentation_needed_applies_to_new_connections() {
    let mut p = narrowed("v4-fn-new", 2000, 1000, 960);
    p.log.clear();
    p.new_connection(PEER_PORT + 1);
    p.run(
        "
        < S 0:0(0) win 65535 <mss 1460,sackOK,TS val * ecr 0,wscale 7>
        > S. 0:0(0) ack 1 win 65535 <mss 1460,sackOK,nop,wscale 7>
        < . 1:1(0) ack 1 win 512
        @connected
        @send 3000
        ",
    );
    expect_stream(&mut p, 1, 3000, 960);
    all_fit_with_df(&p, 1000);
}

/// RFC 1191 §3 and §5, RFC 1122 §3.3.3: a report below 576 bytes (or of 0, from a router
/// that predates RFC 1191) lowers the path MTU to 576 and no further: segments of 536
/// bytes, never smaller, never fragmented; at 576 another such report changes nothing.
#[test]
fn fragmentation_needed_below_576() {
    let mut p = narrowed("v4-fn-small", 2000, 300, 536);
    p.frag_needed(0);
    p.run("< nothing");
    all_fit_with_df(&p, 576);
}

/// RFC 1191 §3 and RFC 5927 §4: "fragmentation needed" that quotes a packet the device did
/// not send (another source) is ignored, counted as not for the device; one quoting a
/// packet to another destination leaves the connection to the test as it was: its
/// segments stay at 1460.
#[test]
fn fragmentation_needed_about_other_packets_changes_nothing() {
    let mut p = Peer::established_v4("v4-fn-other");
    let not_for_us = drops(&mut p, DropReason::NotForUs);
    let seg = p.tcp("> . 1:1(0) ack 1 win 1024");
    let quote = |src: &Ipv6Addr, dst: &Ipv6Addr| {
        let f = Ipv4Fields::whole(TCP, 64, 1, true);
        wire::ipv4_packet(src, dst, &f, &seg)[wire::ETH_LEN..].to_vec()
    };
    let (other, dev, peer) = (v4(OTHER4), p.dev, p.addr);
    p.frag_needed_quoting(600, &quote(&other, &peer));
    p.frag_needed_quoting(600, &quote(&dev, &other));
    p.run("< nothing");
    assert_eq!(drops(&mut p, DropReason::NotForUs), not_for_us + 1);
    p.log.clear();
    p.run("@send 3000");
    expect_stream(&mut p, 1, 3000, 1460);
    all_fit_with_df(&p, 1500);
}

/// ICMPv4 errors about a live connection other than "fragmentation needed" leave it as it
/// is: port, protocol and host unreachable and time exceeded are soft errors in a
/// synchronized state (RFC 5461 §4, as Linux treats them), parameter problems too, and a
/// source quench is ignored (RFC 6633 §3, counted as ignored); the data in flight is
/// neither resent nor resized.
#[test]
fn icmp_errors_about_a_live_connection_change_nothing() {
    let mut p = Peer::established_v4("v4-icmp-soft");
    p.run(
        "
        @send 1000
        < P. 1:1001(1000) ack 1 win 512
        ",
    );
    let q = p.last_data_packet();
    let ignored = drops(&mut p, DropReason::Ignored);
    for (ty, code) in [
        (icmp4::DEST_UNREACHABLE, icmp4::UNREACH_PORT),
        (icmp4::DEST_UNREACHABLE, icmp4::UNREACH_PROTOCOL),
        (icmp4::DEST_UNREACHABLE, 1), // host unreachable
        (icmp4::TIME_EXCEEDED, 0),
        (icmp4::PARAM_PROBLEM, 0),
        (4, 0), // source quench
    ] {
        p.icmp4_error(ty, code, [0; 4], &q);
    }
    p.run("< nothing");
    assert_eq!(drops(&mut p, DropReason::Ignored), ignored + 1);
    p.run(
        "
        > . 1:1(0) ack 1001 win 1024
        @sent
        @send 100
        < P. 1001:1101(100) ack 1 win 512
        ",
    );
}

// ---- ICMPv4 errors ---------------------------------------------------------------------------

/// An IPv4 packet as the test sends it (from the header on), protocol `next`.
fn packet(p: &Peer, next: u8, upper: &[u8]) -> Vec<u8> {
    p.ip_frame(next, upper)[wire::ETH_LEN..].to_vec()
}

/// The next ICMPv4 message is a destination unreachable of `code` quoting `invoking` (its
/// header and at least 8 bytes of its data, RFC 792; RFC 1812 §4.3.2.3 allows more, within
/// 576 bytes in all).
#[track_caller]
fn expect_unreachable(p: &mut Peer, code: u8, invoking: &[u8]) {
    let (ty, c, rest) = p.next_icmp();
    assert_eq!((ty, c), (icmp4::DEST_UNREACHABLE, code));
    let quoted = &rest[4..];
    assert!(quoted.len() >= 28, "the header and 8 bytes quoted");
    assert!(
        20 + 8 + quoted.len() <= 576,
        "an error of more than 576 bytes"
    );
    assert_eq!(
        quoted,
        &invoking[..quoted.len()],
        "the invoking packet quoted"
    );
}

/// RFC 1122 §4.1.3.1 and §3.2.2.1: a UDP datagram to a port nobody listens on is answered
/// with "port unreachable", one of an unknown protocol with "protocol unreachable" (the
/// packet counted as dropped); RFC 1122 §3.2.2: a datagram to a broadcast address gets no
/// error (the next error is about the next unicast datagram).
#[test]
fn port_and_protocol_unreachable() {
    let mut p = Peer::with("v4-unreach", Setup::V4);
    let unsupported = drops(&mut p, DropReason::UnsupportedNextHeader);
    let d = wire::udp(&p.addr, &p.dev, 5000, 9, &[0x5a; 1200]);
    let pkt = packet(&p, UDP, &d);
    p.inject_ip(UDP, &d);
    expect_unreachable(&mut p, icmp4::UNREACH_PORT, &pkt);
    let pkt = packet(&p, 253, b"experimental");
    p.inject_ip(253, b"experimental");
    expect_unreachable(&mut p, icmp4::UNREACH_PROTOCOL, &pkt);
    assert_eq!(
        drops(&mut p, DropReason::UnsupportedNextHeader),
        unsupported + 1
    );
    let bcast = v4("198.18.0.255");
    let d = wire::udp(&p.addr, &bcast, 5000, 9, b"anyone?");
    let mut f = wire::ipv4_packet(&p.addr, &bcast, &Ipv4Fields::whole(UDP, 64, 0, false), &d);
    wire::write_ethernet(&mut f, &BROADCAST_MAC, &p.mac);
    p.inject_frame(&f);
    let d = wire::udp(&p.addr, &p.dev, 5001, 9, b"and now?");
    let pkt = packet(&p, UDP, &d);
    p.inject_ip(UDP, &d);
    expect_unreachable(&mut p, icmp4::UNREACH_PORT, &pkt);
}

/// RFC 1812 §4.3.2.8 and RFC 1122 §3.2.2: ICMP errors are rate limited: a burst of
/// datagrams to a closed port gets no more errors than the device's bucket (a burst of 50,
/// then 100 a second) lets out.
#[test]
fn icmpv4_errors_are_rate_limited() {
    const N: u64 = 300;
    let mut p = Peer::with("v4-ratelimit", Setup::V4);
    let (no_port, sent) = (p.stat(STAT_UDP_RX_NO_PORT), p.stat(STAT_NET_ICMP_ERRORS_TX));
    let start = Instant::now();
    for i in 0..N {
        let d = wire::udp(&p.addr, &p.dev, 5000 + i as u16, 9, b"x");
        p.inject_ip(UDP, &d);
    }
    let deadline = Instant::now() + WAIT;
    while p.stat(STAT_UDP_RX_NO_PORT) < no_port + N {
        assert!(Instant::now() < deadline, "the datagrams never all arrived");
        std::thread::sleep(Duration::from_millis(1));
    }
    let elapsed = start.elapsed().as_secs_f64();
    let n = p.stat(STAT_NET_ICMP_ERRORS_TX) - sent;
    for _ in 0..n {
        let (ty, code, _) = p.next_icmp();
        assert_eq!((ty, code), (icmp4::DEST_UNREACHABLE, icmp4::UNREACH_PORT));
    }
    let allowed = 50.0 + 100.0 * elapsed + 1.0;
    assert!(
        n >= 50 && (n as f64) <= allowed,
        "{n} errors for {N} datagrams in {elapsed:.3} s"
    );
}
