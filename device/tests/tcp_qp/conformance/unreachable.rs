//! Destination unreachable while a connection is being set up (RFC 1122 §4.2.3.9,
//! RFC 5927 §4.1), both families: the connect fails at once instead of retrying its SYN
//! until it times out — as Linux fails `connect` with `EHOSTUNREACH` — but only when the
//! error quotes the SYN itself; on a synchronized connection it changes nothing.

use qpip_testkit as support;

use crate::script::*;
use support::*;

/// The SYN of a connection attempt, then a destination unreachable of `code` from the
/// router quoting it: CONNECT fails with UNREACHABLE, and nothing more is sent.
fn attempt_ends(name: &str, setup: Setup, code: u8) {
    let mut p = Peer::connecting_with(name, setup);
    let syn = p.next_seg();
    assert_eq!(syn.flags(), "S", "{syn:?}");
    let quoted = p.last_tcp_packet();
    p.dest_unreachable(code, &quoted);
    assert_eq!(p.cmd_done(), ADMIN_STATUS_UNREACHABLE);
    p.run("< nothing");
}

/// RFC 1122 §4.2.3.9: ICMPv6 "no route" (code 0) and "address unreachable" (3) from a
/// router end the attempt.
#[test]
fn a_destination_unreachable_ends_a_connection_attempt() {
    attempt_ends("unreach-noroute", Setup::V6, 0);
    attempt_ends("unreach-addr", Setup::V6, 3);
}

/// The same over IPv4: "host unreachable" (code 1) and "port unreachable" (3).
#[test]
fn a_destination_unreachable_ends_a_connection_attempt_over_ipv4() {
    attempt_ends("unreach4-host", Setup::V4, 1);
    attempt_ends("unreach4-port", Setup::V4, 3);
}

/// RFC 5927 §4.1: an error whose quote does not carry the SYN's sequence number (what an
/// off-path sender would have to guess) changes nothing: the handshake completes.
#[test]
fn a_destination_unreachable_with_another_sequence_number_is_ignored() {
    for setup in [Setup::V6, Setup::V4] {
        let mut p = Peer::connecting_with("unreach-seq", setup);
        let mss = p.link_mss();
        p.run(&format!(
            "< S 0:0(0) win 65535 <mss {mss},sackOK,TS val * ecr 0,nop,wscale 7>"
        ));
        let mut quoted = p.last_tcp_packet();
        let tcp = if setup.family == Family::V4 { 20 } else { 40 };
        quoted[tcp + 4] ^= 0x80; // the sequence number's top byte
        p.dest_unreachable(1, &quoted);
        p.run(&format!(
            "
            > S. 0:0(0) ack 1 win 65535 <mss {mss}>
            < . 1:1(0) ack 1 win *
            @connected
            "
        ));
    }
}

/// RFC 1122 §4.2.3.9: on an established connection a destination unreachable is a soft
/// error: the connection carries on (its data is still delivered).
#[test]
fn a_destination_unreachable_on_an_established_connection_changes_nothing() {
    for setup in [Setup::V6, Setup::V4] {
        let mut p = Peer::established_with("unreach-estab", setup);
        p.run("@send 100");
        p.run("< P. 1:101(100) ack 1 win 512");
        let quoted = p.last_tcp_packet();
        p.dest_unreachable(1, &quoted);
        p.run(
            "
            > . 1:1(0) ack 101 win 1024
            @sent
            ",
        );
    }
}
