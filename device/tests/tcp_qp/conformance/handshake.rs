//! The handshake and its options (RFC 9293 §3.5, §3.7.1; RFC 7323; RFC 2018), PAWS.

use qpip_testkit as support;

use crate::script::*;
use support::*;

/// RFC 9293 §3.5 and §3.7.1, RFC 7323 §2.2 and §3.2, RFC 2018 §2: a SYN offering every
/// option gets a SYN-ACK agreeing to each (MSS of the link, window scale 7, SACK
/// permitted, timestamps echoing the SYN's), the third segment completes the ACCEPT, and
/// the ACKs carry timestamps from then on (RFC 7323 §3.2).
#[test]
fn handshake_with_every_option() {
    with_every_option("allopts", 1001).received(100);
}

/// The exchange [`handshake_with_every_option`] checks, the test's TSvals from `tsval` on
/// after its SYN's: the handshake, a receive posted (the window update it opens), the
/// test's first 100 bytes and their ACK.
fn with_every_option(name: &str, tsval: u32) -> Peer {
    let mut p = Peer::listening(name);
    p.run(&format!(
        "
        > S 0:0(0) win 65535 <mss 1440,sackOK,TS val 1000 ecr 0,nop,wscale 7>
        < S. 0:0(0) ack 1 win 65535 <mss 1440,sackOK,TS val * ecr 1000,wscale 7>
        > . 1:1(0) ack 1 win 1024 <nop,nop,TS val {tsval} ecr $>
        @accepted
        @post 10000
        < . 1:1(0) ack 1 win * <TS val * ecr {tsval}>   # the window opened: an update
        > P. 1:101(100) ack 1 win 1024 <nop,nop,TS val {data} ecr $>
        < . 1:1(0) ack 101 win * <TS val * ecr {data}>
        ",
        data = tsval + 1
    ));
    p
}

/// RFC 9293 §3.7.1 (MUST-15): a SYN without an MSS option means 1220 bytes over IPv6
/// (the minimum MTU less 60); without window scaling, SACK-permitted or timestamps in the
/// SYN the SYN-ACK offers none of them (RFC 7323 §1.3, RFC 2018 §2), and the window
/// fields are not scaled.
#[test]
fn handshake_without_options() {
    Peer::listening("noopts").run(
        "
        > S 0:0(0) win 65535
        < S. 0:0(0) ack 1 win 65535 <mss 1440>
        > . 1:1(0) ack 1 win 65535
        @accepted
        @send 3000
        < . 1:1221(1220) ack 1 win 65535 <>
        < . 1221:2441(1220) ack 1 win 65535 <>
        < P. 2441:3001(560) ack 1 win 65535 <>
        ",
    );
}

/// RFC 9293 §3.7.1: the device never sends a segment larger than the MSS the peer
/// announced.
#[test]
fn peer_mss_bounds_the_segments() {
    Peer::listening("mss536").run(
        "
        > S 0:0(0) win 65535 <mss 536>
        < S. 0:0(0) ack 1 win 65535 <mss 1440>
        > . 1:1(0) ack 1 win 65535
        @accepted
        @send 1200
        < . 1:537(536) ack 1 win 65535
        < . 537:1073(536) ack 1 win 65535
        < P. 1073:1201(128) ack 1 win 65535
        ",
    );
}

/// RFC 7323 §2.3: a window scale above 14 is taken as 14 (and ours is still offered).
#[test]
fn window_scale_above_14_is_taken_as_14() {
    let mut p = Peer::listening("ws15");
    p.run(
        "
        > S 0:0(0) win 65535 <mss 1440,nop,wscale 15>
        < S. 0:0(0) ack 1 win 65535 <mss 1440,wscale 7>
        > . 1:1(0) ack 1 win 1   # a window of 1 << 14 bytes
        @accepted
        @send 60000
        ",
    );
    // The initial window: ten segments.
    p.expect_data(1, 10, 1440);
    // All acknowledged, the window still 1 << 14: cwnd would allow twenty segments, the
    // window takes eleven (a twelfth would not fit; 1 << 15 would take twenty).
    p.run("> . 1:1(0) ack 14401 win 1");
    p.expect_data(14401, 11, 1440);
    p.run("< nothing");
}

/// RFC 9293 §3.1 (MUST-68): options the device does not know are skipped by their length
/// (here kind 30 and an experimental kind 253, RFC 6994), the others still taken.
#[test]
fn unknown_options_are_ignored() {
    Peer::listening("unknownopt").run(
        "
        > S 0:0(0) win 65535 <raw 1e0400aa,mss 1440,raw fd06abcdef01,sackOK,nop,wscale 7>
        < S. 0:0(0) ack 1 win 65535 <mss 1440,sackOK,wscale 7>
        ",
    );
}

/// RFC 9293 §3.1 (MUST-7): an option whose length is illegal (0, or running past the
/// header) makes the segment unusable: the device drops it without an answer (and counts
/// it), then answers a well-formed SYN.
#[test]
fn malformed_options_drop_the_segment() {
    let mut p = Peer::listening("badopt");
    let dropped = p.stat(STAT_NET_RX_DROPPED);
    p.run(
        "
        > S 0:0(0) win 65535 <mss 1440,raw 0800>            # timestamps of length 0
        > S 0:0(0) win 65535 <mss 1440,raw 030a0700>        # window scale running past the end
        > S 0:0(0) win 65535 <mss 1440,raw 0201>            # MSS of length 1
        < nothing
        > S 0:0(0) win 65535 <mss 1440>
        < S. 0:0(0) ack 1 win 65535 <mss 1440>
        ",
    );
    assert!(
        p.stat(STAT_NET_RX_DROPPED) >= dropped + 3,
        "the drops are counted"
    );
}

/// RFC 9293 §3.5 and §3.10.7.3: the device's active open offers every option; a SYN-ACK
/// acknowledging what was never sent is answered with <SEQ=SEG.ACK><CTL=RST> and does not
/// complete the open; the right SYN-ACK does (CONNECT completes), and the device's ACK
/// echoes the peer's timestamp (RFC 7323 §4.3) with its window scaled from then on.
#[test]
fn active_open_with_a_bad_then_a_good_syn_ack() {
    Peer::connecting("activeopen").run(
        "
        < S 0:0(0) win 65535 <mss 1440,sackOK,TS val * ecr 0,nop,wscale 7>
        > S. 0:0(0) ack 5 win 65535 <mss 1440>
        < R 5:5(0)
        > S. 0:0(0) ack 1 win 65535 <mss 1440,sackOK,TS val 500 ecr $,nop,wscale 7>
        < . 1:1(0) ack 1 win 512 <TS val * ecr 500>
        @connected
        ",
    );
}

/// RFC 7323 §5.3 (PAWS): a segment whose TSval is older than TS.Recent is dropped and
/// answered with an ACK echoing TS.Recent; its data is not taken.
#[test]
fn paws_drops_an_old_timestamp() {
    with_every_option("paws", 2000).run(
        "
        @post 10000
        > P. 101:201(100) ack 1 win 1024 <nop,nop,TS val 1500 ecr $>   # older: PAWS
        < . 1:1(0) ack 101 win * <TS val * ecr 2001>
        > P. 101:201(100) ack 1 win 1024 <nop,nop,TS val 2002 ecr $>
        < . 1:1(0) ack 201 win * <TS val * ecr 2002>
        @received 200
        ",
    );
}
