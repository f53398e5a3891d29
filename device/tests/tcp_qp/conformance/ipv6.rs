//! TCP inside IPv6 fragments and behind extension headers.

use crate::script::*;

const NH_TCP: u8 = 6;
const NH_HOP_BY_HOP: u8 = 0;
const NH_ROUTING: u8 = 43;
const NH_DEST_OPTS: u8 = 60;
const ICMP_PARAM_PROBLEM: u8 = 4;

/// An options extension header (hop-by-hop or destination options) holding `opts`,
/// padded with PadN to a multiple of 8 bytes (RFC 8200 §4.2).
fn opts_header(next: u8, opts: &[u8]) -> Vec<u8> {
    let mut h = vec![next, 0];
    h.extend_from_slice(opts);
    let pad = (8 - h.len() % 8) % 8;
    match pad {
        0 => {}
        1 => h.push(0),
        n => {
            h.push(1);
            h.push((n - 2) as u8);
            h.resize(h.len() + n - 2, 0);
        }
    }
    h[1] = (h.len() / 8 - 1) as u8;
    h
}

/// The test's stream up to relative sequence `end` was taken: the device acknowledges it,
/// and the guest receives it.
fn taken(p: &mut Peer, end: u32) {
    p.run(&format!("< . 1:1(0) ack {end} win *"));
    p.received(end as usize - 1);
}

/// IPv6 fragments of `upper` (next header `next`), cut at the given offsets (multiples
/// of 8), injected in the order given.
fn inject_fragments(p: &mut Peer, next: u8, id: u32, upper: &[u8], order: &[(usize, usize)]) {
    for &(from, to) in order {
        let mut f = qpip_device::net::wire::ipv6_fragment(
            &p.addr,
            &p.dev,
            next,
            64,
            id,
            from,
            to < upper.len(),
            &upper[from..to],
        );
        qpip_device::net::wire::write_ethernet(&mut f, &DEV_MAC, &PEER_MAC);
        p.inject_frame(&f);
    }
}

/// RFC 8200 §4.5: a TCP segment in IPv6 fragments (arriving last first) is reassembled
/// and taken; so is one in an atomic fragment (offset 0, no more: RFC 8200 §4.5, RFC
/// 6946).
#[test]
fn tcp_in_ipv6_fragments() {
    let mut p = Peer::receiving("frag");
    let seg = p.tcp("> P. 1:1001(1000) ack 1 win 1024");
    inject_fragments(&mut p, NH_TCP, 7, &seg, &[(512, seg.len()), (0, 512)]);
    taken(&mut p, 1001);
    p.run(
        "
        @post 20000
        < . 1:1(0) ack 1001 win *
        ",
    );
    let seg = p.tcp("> P. 1001:1101(100) ack 1 win 1024");
    inject_fragments(&mut p, NH_TCP, 8, &seg, &[(0, seg.len())]);
    taken(&mut p, 1101);
}

/// RFC 5722 and RFC 8200 §4.5: fragments that overlap make the whole packet be dropped
/// (the TCP segment in it is never seen); RFC 7112 §5: a first fragment without the
/// whole TCP header is dropped with an ICMPv6 parameter problem (code 3).
#[test]
fn overlapping_or_incomplete_fragments_are_dropped() {
    let mut p = Peer::established("badfrag");
    let seg = p.tcp("> P. 1:1001(1000) ack 1 win 1024");
    inject_fragments(
        &mut p,
        NH_TCP,
        9,
        &seg,
        &[(0, 512), (504, seg.len())], // 8 bytes twice
    );
    p.run("< nothing");
    inject_fragments(&mut p, NH_TCP, 10, &seg, &[(0, 8), (8, seg.len())]);
    let (ty, code, _) = p.next_icmp();
    assert_eq!((ty, code), (ICMP_PARAM_PROBLEM, 3));
    p.run("< nothing");
    // The same segment whole is taken.
    p.run(
        "
        @post 10000
        < . 1:1(0) ack 1 win *
        > P. 1:1001(1000) ack 1 win 1024
        ",
    );
    taken(&mut p, 1001);
}

/// RFC 8200 §4.3, §4.4 and §4.6: TCP behind a hop-by-hop options header, a destination
/// options header with an unknown option to skip (action 00), and a routing header with
/// no segments left, is taken.
#[test]
fn tcp_behind_extension_headers() {
    let mut p = Peer::receiving("exthdr");
    let seg = p.tcp("> P. 1:101(100) ack 1 win 1024");
    let mut b = opts_header(NH_ROUTING, &[]);
    b.extend_from_slice(&[NH_DEST_OPTS, 0, 253, 0, 0, 0, 0, 0]); // type 253, segments left 0
    b.extend(opts_header(NH_TCP, &[0x1e, 2, 0xaa, 0xbb]));
    b.extend_from_slice(&seg);
    p.inject_ip(NH_HOP_BY_HOP, &b);
    taken(&mut p, 101);
}

/// RFC 8200 §4.2 and §4.4: a packet the IPv6 layer must discard never reaches TCP — an
/// unknown destination option of action 01 (silently), of action 10 (with a parameter
/// problem, code 2, pointing at the option), a routing header with segments left
/// (parameter problem, code 0, pointing at its type).
#[test]
fn extension_headers_that_discard_the_packet() {
    let mut p = Peer::established("exthdr-drop");
    let seg = p.tcp("> P. 1:101(100) ack 1 win 1024");
    let mut b = opts_header(NH_TCP, &[0x7e, 2, 0, 0]);
    b.extend_from_slice(&seg);
    p.inject_ip(NH_DEST_OPTS, &b);
    p.run("< nothing");
    let mut b = opts_header(NH_TCP, &[0xbe, 2, 0, 0]);
    b.extend_from_slice(&seg);
    p.inject_ip(NH_DEST_OPTS, &b);
    let (ty, code, body) = p.next_icmp();
    assert_eq!((ty, code), (ICMP_PARAM_PROBLEM, 2));
    assert_eq!(u32::from_be_bytes(body[..4].try_into().unwrap()), 40 + 2);
    let mut b = vec![NH_TCP, 0, 253, 1, 0, 0, 0, 0];
    b.extend_from_slice(&seg);
    p.inject_ip(NH_ROUTING, &b);
    let (ty, code, body) = p.next_icmp();
    assert_eq!((ty, code), (ICMP_PARAM_PROBLEM, 0));
    assert_eq!(u32::from_be_bytes(body[..4].try_into().unwrap()), 40 + 2);
    p.run("< nothing");
}
