//! A packet-level conformance suite: the device (the real engine behind vfio-user, a guest
//! QP listening or connecting) on a cable, the test on the other end crafting every frame
//! and checking every answer, with sequence numbers relative to the ISNs (the script
//! format is described in `tcp_script/mod.rs`). Each case names the RFC section it checks.

use qpip_testkit as support;

use crate::script::*;
use support::*;

// ---- the handshake and its options ------------------------------------------------------------

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

// ---- RFC 5961 -------------------------------------------------------------------------------

/// The connection lives on: a receive posted, 10 bytes of the test's taken, acknowledged
/// and received by the guest.
fn lives_on(p: &mut Peer) {
    p.run(
        "
        @post 10000
        < . 1:1(0) ack 1 win *
        > P. 1:11(10) ack 1 win 1024
        < . 1:1(0) ack 11 win *
        @received 10
        ",
    );
}

/// RFC 5961 §3.2: a RST inside the window but not at RCV.NXT gets a challenge ACK and
/// the connection lives on.
#[test]
fn rst_in_window_not_exact_gets_a_challenge_ack() {
    let mut p = Peer::established("rst-inwin");
    let challenges = p.stat(STAT_TCP_CHALLENGE_ACKS);
    p.run(
        "
        > R 1001:1001(0) win 0
        < . 1:1(0) ack 1 win 512
        ",
    );
    lives_on(&mut p);
    assert_eq!(p.stat(STAT_TCP_CHALLENGE_ACKS), challenges + 1);
}

/// RFC 5961 §3.2 and RFC 9293 §3.10.7.4: a RST exactly at RCV.NXT resets the connection:
/// the guest's receive is flushed, the QP reports the peer's reset, and a later segment
/// of the old connection meets no connection (a RST answers it).
#[test]
fn rst_at_rcv_nxt_resets_the_connection() {
    let mut p = Peer::receiving("rst-exact");
    let req = p.g.submit_async_event();
    p.run("> R 1:1(0) win 0");
    let e = p.g.admin_wait_done(req);
    let (_, qp, kind, reason, _) = async_event(&e);
    assert_eq!(
        (qp, kind, reason),
        (p.end.qp.id, ASYNC_EVENT_QP_ERROR, ASYNC_REASON_PEER_RESET)
    );
    assert_eq!(p.recv_done(), CQE_STATUS_FLUSHED);
    p.run(
        "
        > . 1:1(0) ack 1 win 1024
        < R 1:1(0)
        ",
    );
}

/// RFC 5961 §3.2 and RFC 9293 §3.10.7.4: a RST outside the window is dropped without a
/// word.
#[test]
fn rst_out_of_window_is_ignored() {
    let mut p = Peer::established("rst-outwin");
    p.run(
        "
        > R 200000:200000(0) win 0
        < nothing
        ",
    );
    lives_on(&mut p);
}

/// RFC 5961 §4.2: a SYN on a synchronized connection, in window or not, gets a
/// challenge ACK; the connection is not reset.
#[test]
fn syn_on_an_established_connection_gets_a_challenge_ack() {
    let mut p = Peer::established("syn-estab");
    p.run(
        "
        > S 0:0(0) win 65535 <mss 1440>      # a SYN again (the peer restarted?)
        < . 1:1(0) ack 1 win 512
        > S 500:500(0) win 65535 <mss 1440>  # in the window
        < . 1:1(0) ack 1 win 512
        ",
    );
    lives_on(&mut p);
}

/// RFC 5961 §5.2 and RFC 9293 §3.10.7.4 (fifth step): an ACK of data never sent is
/// answered with an ACK and dropped, its data with it; an ACK far below SND.UNA (beyond
/// MAX.SND.WND back) likewise.
#[test]
fn ack_outside_the_acceptable_range_is_answered_and_dropped() {
    Peer::receiving("ack-range").run(
        "
        > P. 1:11(10) ack 5000 win 1024     # acknowledges 4999 bytes never sent
        < . 1:1(0) ack 1 win *
        > P. 1:11(10) ack 4000000000 win 1024
        < . 1:1(0) ack 1 win *
        > P. 1:11(10) ack 1 win 1024        # the same data, acceptable now
        < . 1:1(0) ack 11 win *
        @received 10
        ",
    );
}

// ---- the window ------------------------------------------------------------------------------

/// RFC 9293 §3.10.7.4: a segment entirely beyond the right edge of the window is not
/// taken and is answered with an ACK of RCV.NXT; one crossing the edge is trimmed to it.
#[test]
fn data_beyond_the_window_is_not_taken() {
    // Nothing posted: the window is the staging allowance, 65536 bytes (512 << 7).
    Peer::established("outwin").run(
        "
        > . 70001:71001(1000) ack 1 win 1024
        < . 1:1(0) ack 1 win 512
        > . 65000:66440(1440) ack 1 win 1024   # 537 bytes past the edge
        < . 1:1(0) ack 1 win 512 <sack 65000:65537>
        ",
    );
}

/// The test sends full segments from relative sequence `nxt` as far as the device's
/// window lets it (its right edge starting at `right`, then as each ACK moves it), two at
/// a time (a full pair is acknowledged at once), until the window is used up. Every byte
/// sent must be acknowledged, and the right edge must never move left by more than the
/// rounding to the scale unit (RFC 7323 §2.4). Returns where the data ends and the last
/// window field.
fn fill_window(p: &mut Peer, mut nxt: u32, mut right: u32) -> (u32, Option<u16>) {
    let mut last_win = None;
    while nxt < right {
        let mut sent = 0;
        while sent < 2 && nxt < right {
            let n = (right - nxt).min(1440);
            p.run(&format!("> . {nxt}:{}({n}) ack 1 win 1024", nxt + n));
            nxt += n;
            sent += 1;
        }
        loop {
            let s = p.next_seg();
            assert!(s.h.ack && s.payload.is_empty(), "an ACK: {s:?}");
            let ack = s.h.acknowledgment_number.wrapping_sub(PEER_ISN);
            let edge = ack + ((s.h.window_size as u32) << 7);
            assert!(
                edge + 128 > right,
                "the window shrank: edge {edge} < {right}"
            );
            right = right.max(edge);
            last_win = Some(s.h.window_size);
            if ack == nxt {
                break;
            }
            assert!(ack < nxt, "ack {ack} beyond {nxt}");
        }
    }
    (nxt, last_win)
}

/// RFC 9293 §3.8.6 and §3.8.6.1: with no receive posted the window offered is what
/// staging takes; every byte advertised is accepted, the right edge never moves left (by
/// more than the rounding to the scale unit, RFC 7323 §2.4), the window closes to zero
/// when staging is full, a window probe is answered with the zero window, and posting a
/// receive sends a window update (RFC 9293 §3.8.6.2.2); the bytes arrive intact.
#[test]
fn zero_window_when_staging_is_full_then_a_window_update() {
    let mut p = Peer::established("zerownd");
    let (nxt, last_win) = fill_window(&mut p, 1, 1 + 65536);
    assert_eq!(last_win, Some(0), "staging full: the window is zero");
    let staged = nxt - 1;
    assert!(
        staged > 65536 - 128 && staged <= 65536,
        "{staged} bytes staged"
    );
    p.run(&format!(
        "
        > . {nxt}:{}(1) ack 1 win 1024    # a window probe
        < . 1:1(0) ack {nxt} win 0
        ",
        nxt + 1
    ));
    // The guest posts 100 KB: staging moves into it, the window opens.
    p.post_recv(100_000);
    let s = p.next_seg();
    assert_eq!(s.h.acknowledgment_number.wrapping_sub(PEER_ISN), nxt);
    let w = (s.h.window_size as u32) << 7;
    assert!(w >= 100_000 - staged, "window update of {w} bytes");
    p.run(&format!(
        "
        > P. {nxt}:{}(1000) ack 1 win 1024
        < . 1:1(0) ack {} win *
        ",
        nxt + 1000,
        nxt + 1000
    ));
    p.received(staged as usize + 1000);
}

/// RFC 9293 §3.8.6: a stream receive completed early (PSH) gives up the rest of its
/// buffer, which the window had already offered: the offer is still kept — every byte up
/// to the advertised right edge is taken (staging holds them) and the window closes to
/// zero, with no data dropped.
#[test]
fn window_offered_by_a_receive_completed_early_is_kept() {
    let mut p = Peer::established("promise");
    p.run(
        "
        @post 20000
        < . 1:1(0) ack 1 win 668        # (20000 + 65536) >> 7
        > P. 1:101(100) ack 1 win 1024   # completes the receive with 100 bytes
        < . 1:1(0) ack 101 win *
        ",
    );
    assert_eq!(p.recv_done(), CQE_STATUS_SUCCESS);
    let (nxt, last_win) = fill_window(&mut p, 101, 1 + 668 * 128);
    assert_eq!(last_win, Some(0));
    assert!(
        nxt >= 1 + 668 * 128 - 128,
        "data up to the edge offered: {nxt}"
    );
    // A receive of exactly what is staged completes full.
    p.post_recv(nxt as u64 - 101);
    p.received(nxt as usize - 1);
}

// ---- the window against the peer's PSH pattern ------------------------------------------------

/// The staging allowance, and the buffer a message-framed QP offers once a receive is posted
/// (docs/device.md).
const STAGING: u32 = 64 * 1024;
const MESSAGE_BUFFER: u32 = 256 * 1024;

/// Which of the test's segments carry PSH, by their index.
#[derive(Clone, Copy)]
enum Psh {
    Every,
    None,
    /// Every third (a peer pushing at the end of bursts).
    EveryThird,
}

impl Psh {
    fn on(self, i: usize) -> bool {
        match self {
            Psh::Every => true,
            Psh::None => false,
            Psh::EveryThird => i % 3 == 2,
        }
    }
}

/// Injects `stream[seq - 1..][..len]` at relative sequence `seq`, with PSH if `psh`.
fn inject_piece(p: &mut Peer, stream: &[u8], seq: u32, len: u32, psh: bool) {
    let mut h = etherparse::TcpHeader::new(p.port, p.dev_port, PEER_ISN.wrapping_add(seq), 1024);
    h.ack = true;
    h.psh = psh;
    h.acknowledgment_number = p.iss.expect("the device's ISN").wrapping_add(1);
    let from = (seq - 1) as usize;
    p.inject_tcp(&h, &stream[from..from + len as usize]);
}

/// The guest has posted its receives and reads nothing more; the test, a demanding peer,
/// sends `stream` (relative sequence 1 is its first byte) in full segments, PSH on those
/// `psh` picks, two at a time, as far as the device's window lets it (its right edge
/// starting at `right`, then as each ACK moves it). RFC 9293 §3.8.6: every byte sent inside
/// the window must be acknowledged (nothing in-window is dropped: a dropped segment would
/// never be acknowledged), the right edge never moves left (by more than the rounding to
/// the scale unit, RFC 7323 §2.4) and never passes `bound` — what the device could take:
/// what was taken plus what can still be taken without the application. The window closes
/// to zero, and a zero-window probe (RFC 9293 §3.8.6.1) is answered with window 0 and
/// the same ACK. Returns where the data ends.
fn window_kept(p: &mut Peer, stream: &[u8], mut right: u32, bound: u32, psh: Psh) -> u32 {
    let (mut nxt, mut i) = (1u32, 0usize);
    assert!(
        right <= bound,
        "the window opened to {right}, beyond {bound}"
    );
    while nxt < right {
        let mut sent = 0;
        while sent < 2 && nxt < right {
            let n = (right - nxt).min(1440);
            inject_piece(p, stream, nxt, n, psh.on(i));
            nxt += n;
            i += 1;
            sent += 1;
        }
        loop {
            let s = p.next_seg();
            assert!(s.h.ack && s.payload.is_empty(), "an ACK: {s:?}");
            let ack = s.h.acknowledgment_number.wrapping_sub(PEER_ISN);
            let edge = ack + ((s.h.window_size as u32) << 7);
            assert!(
                edge + 128 > right,
                "the window shrank: edge {edge} < {right}"
            );
            assert!(
                edge <= bound,
                "right edge {edge} (ack {ack}) beyond what the device can take, {bound}"
            );
            right = right.max(edge);
            assert!(ack <= nxt, "ack {ack} beyond {nxt}");
            if ack == nxt {
                break;
            }
        }
    }
    // Every byte offered was taken; the window is shut, and a probe finds it so.
    inject_piece(p, stream, nxt, 1, true);
    let s = p.next_seg();
    assert!(s.h.ack && s.payload.is_empty(), "an ACK: {s:?}");
    assert_eq!(
        (
            s.h.acknowledgment_number.wrapping_sub(PEER_ISN),
            s.h.window_size
        ),
        (nxt, 0),
        "the probe is answered with the zero window"
    );
    nxt
}

/// The window update the guest's receives opened: its right edge.
fn opened(p: &mut Peer) -> u32 {
    let s = p.next_seg();
    assert!(s.h.ack && s.payload.is_empty(), "a window update: {s:?}");
    let ack = s.h.acknowledgment_number.wrapping_sub(PEER_ISN);
    ack + ((s.h.window_size as u32) << 7)
}

/// A stream-framed QP posts `receives` and stops reading; the test fills the window with
/// PSH as `psh` says ([`window_kept`]): the device can take at most what was posted plus
/// the staging allowance. Then the guest completes its receives, reads what the device
/// staged, and every byte is the test's stream.
fn stream_window_kept(name: &str, receives: &[u64], psh: Psh) {
    let mut p = Peer::established(name);
    p.post_recvs(receives);
    let right = opened(&mut p);
    let posted: u64 = receives.iter().sum();
    let bound = 1 + posted as u32 + STAGING + 127;
    let stream: Vec<u8> = (0..bound as u64 + 1).map(peer_byte).collect();
    let nxt = window_kept(&mut p, &stream, right, bound, psh);
    for _ in receives {
        assert_eq!(p.recv_done(), CQE_STATUS_SUCCESS, "a posted receive");
    }
    let staged = nxt as u64 - 1 - p.received.len() as u64;
    if staged > 0 {
        p.post_recv(staged);
    }
    p.received(nxt as usize - 1);
}

/// RFC 9293 §3.8.6: PSH on every segment, the application not reading, small receives
/// (each pushed segment completes a 4 KiB receive with 1440 bytes, giving up the rest):
/// every byte of the window offered is taken, the window closes to zero.
#[test]
fn psh_on_every_segment_small_receives_window_kept() {
    stream_window_kept("psh-every-small", &[4096; 16], Psh::Every);
}

/// As [`psh_on_every_segment_small_receives_window_kept`] with 256 KiB receives (as
/// `qpip-cat -l` posts them): each pushed segment gives up almost a whole receive, so the
/// posted receives run out long before the posted bytes do.
#[test]
fn psh_on_every_segment_large_receives_window_kept() {
    stream_window_kept("psh-every-large", &[256 * 1024; 4], Psh::Every);
}

/// No PSH at all: the receives fill whole, then staging; the window closes after what was
/// posted plus the allowance.
#[test]
fn psh_on_no_segment_window_kept() {
    stream_window_kept("psh-none", &[256 * 1024; 4], Psh::None);
}

/// PSH on every third segment (the end of a burst), 64 KiB receives.
#[test]
fn psh_now_and_then_window_kept() {
    stream_window_kept("psh-mixed", &[64 * 1024; 8], Psh::EveryThird);
}

/// Message framing: the test's stream of `count` messages of `len` bytes (a header, then
/// bytes that tell message and offset apart).
fn messages(len: u32, count: u32) -> (Vec<u8>, Vec<u8>) {
    let (mut stream, mut payloads) = (Vec::new(), Vec::new());
    for i in 0..count {
        stream.extend_from_slice(&len.to_le_bytes());
        stream.extend_from_slice(&i.to_le_bytes());
        let body: Vec<u8> = (0..len)
            .map(|j| (i.wrapping_mul(131).wrapping_add(j.wrapping_mul(7)) % 251) as u8)
            .collect();
        stream.extend_from_slice(&body);
        payloads.extend_from_slice(&body);
    }
    (stream, payloads)
}

/// A message-framed QP posts `wrs` receives of `wr_len` bytes and stops reading; the test
/// sends messages of 1000 bytes (each completes a receive, however large: a short message
/// gives up the rest of its receive), PSH as `psh` says ([`window_kept`]). The device can
/// take a message per receive, its message buffer, the staging allowance and the message in
/// progress. Then the guest reads every whole message, intact and in order.
fn message_window_kept(name: &str, wr_len: u64, wrs: usize, psh: Psh) {
    const LEN: u32 = 1000;
    let framed = 8 + LEN;
    let mut p = Peer::established_framed(name, FRAMING_MESSAGE);
    p.post_recvs(&vec![wr_len; wrs]);
    let right = opened(&mut p);
    let bound = 1 + wrs as u32 * framed + MESSAGE_BUFFER + STAGING + framed + 127;
    let (stream, payloads) = messages(LEN, bound / framed + 2);
    let nxt = window_kept(&mut p, &stream, right, bound, psh);
    let whole = ((nxt - 1) / framed) as usize;
    assert!(whole >= wrs, "{whole} messages");
    for _ in 0..wrs {
        assert_eq!(p.recv_done(), CQE_STATUS_SUCCESS, "a posted receive");
    }
    let mut done = wrs;
    while done < whole {
        let n = (whole - done).min(32);
        p.post_recvs(&vec![LEN as u64; n]);
        for _ in 0..n {
            assert_eq!(p.recv_done(), CQE_STATUS_SUCCESS, "a message");
        }
        done += n;
    }
    assert_eq!(p.received.len(), whole * LEN as usize, "bytes received");
    assert!(
        p.received == payloads[..whole * LEN as usize],
        "the messages arrived intact, in order"
    );
}

/// Message framing, PSH on every segment, receives just large enough for a message.
#[test]
fn message_framing_small_receives_window_kept() {
    message_window_kept("msg-small", 1000, 8, Psh::Every);
}

/// Message framing, PSH now and then, 64 KiB receives that each take one 1000-byte
/// message.
#[test]
fn message_framing_large_receives_window_kept() {
    message_window_kept("msg-large", 64 * 1024, 4, Psh::EveryThird);
}

/// RFC 9293 §3.8.6.1: when the peer's window is zero the device probes it on its persist
/// timer with one byte, again (backing off) while the window stays shut, and sends the
/// rest once it opens.
#[test]
fn persist_timer_probes_a_zero_window() {
    Peer::listening("persist").run(
        "
        > S 0:0(0) win 65535 <mss 1440,sackOK,nop,wscale 7>
        < S. 0:0(0) ack 1 win 65535 <mss 1440,sackOK,wscale 7>
        > . 1:1(0) ack 1 win 0
        @accepted
        @send 100
        < . 1:2(1) ack 1 win 512     # the first probe
        > . 1:1(0) ack 1 win 0        # still shut (the byte not taken)
        < . 1:2(1) ack 1 win 512     # the next probe
        > . 1:1(0) ack 2 win 1024     # the probe's byte taken, the window open
        < P. 2:101(99) ack 1 win 512
        > . 1:1(0) ack 101 win 1024
        @sent
        ",
    );
}

// ---- data ------------------------------------------------------------------------------------

/// RFC 2018 §4 and RFC 9293 §3.10.7.4: out-of-order data is held and acknowledged at once
/// with SACK blocks (the most recent first); filling the holes acknowledges everything,
/// and the guest receives the bytes in order.
#[test]
fn out_of_order_data_is_sacked_then_delivered_in_order() {
    Peer::receiving("ooo").run(
        "
        > . 1001:2001(1000) ack 1 win 1024
        < . 1:1(0) ack 1 win * <sack 1001:2001>
        > . 3001:4001(1000) ack 1 win 1024
        < . 1:1(0) ack 1 win * <sack 3001:4001 1001:2001>
        > . 1:1001(1000) ack 1 win 1024
        < . 1:1(0) ack 2001 win * <sack 3001:4001>
        > P. 2001:3001(1000) ack 1 win 1024
        < . 1:1(0) ack 4001 win * <>
        @received 4000
        ",
    );
}

/// RFC 9293 §3.10.7.4 (and §3.4): a retransmission entirely below RCV.NXT is answered with
/// an ACK; one overlapping old and new bytes has its old part trimmed and the new part
/// taken; the guest sees each byte once.
#[test]
fn overlapping_retransmissions_are_trimmed() {
    Peer::receiving("overlap").run(
        "
        > . 1:1001(1000) ack 1 win 1024
        > . 1001:2001(1000) ack 1 win 1024
        < . 1:1(0) ack 2001 win *
        > . 501:1501(1000) ack 1 win 1024      # all old
        < . 1:1(0) ack 2001 win *
        > P. 1501:2941(1440) ack 1 win 1024    # 500 old, 940 new
        < . 1:1(0) ack 2941 win *
        @received 2940
        ",
    );
}

/// RFC 9293 §3.10.7.4 (eighth step): a FIN carrying data: the data is taken, the FIN
/// acknowledged at once (CLOSE-WAIT), the guest reads the data then the end of the
/// stream; its close sends our FIN (LAST-ACK), and the peer's ACK of it ends the
/// connection.
#[test]
fn fin_with_data_then_passive_close() {
    Peer::receiving("findata").run(
        "
        > FP. 1:101(100) ack 1 win 1024
        < . 1:1(0) ack 102 win *
        @received 100
        @post 1000
        @eof
        @close
        < F. 1:1(0) ack 102 win *
        > . 102:102(0) ack 2 win 1024
        @closed
        > . 102:102(0) ack 2 win 1024   # the connection is gone: a reset answers
        < R 2:2(0)
        ",
    );
}

// ---- resets ----------------------------------------------------------------------------------

/// RFC 9293 §3.10.7.1: a segment for a port nobody listens on is answered with a reset —
/// a SYN with RST|ACK acknowledging it, an ACK with a RST at its ack number — and a
/// reset with nothing.
#[test]
fn closed_port_answers_with_resets() {
    let mut p = Peer::listening("closedport");
    p.dev_port = 9;
    // Sequence numbers of resets are absolute here.
    p.iss = Some(0);
    p.run(
        "
        > S 0:0(0) win 65535 <mss 1440>
        < R. 0:0(0) ack 1 win 0
        > P. 1:101(100) ack 77 win 1024
        < R 77:77(0)
        > R 1:1(0) win 0
        < nothing
        ",
    );
}

/// RFC 9293 §3.10.7.3: in SYN-SENT a RST is taken only with an acceptable ACK (the
/// connection is refused: CONNECT fails); without ACK it is dropped.
#[test]
fn rst_in_syn_sent() {
    Peer::connecting("rst-synsent").run(
        "
        < S 0:0(0) win 65535 <mss 1440,sackOK,TS val * ecr 0,wscale 7>
        > R 0:0(0) win 0          # no ACK: dropped
        < nothing
        > R. 0:0(0) ack 1 win 0
        @refused
        ",
    );
}

/// RFC 9293 §3.10.7.4 (first step, SYN-RECEIVED): a reset of a passive open in
/// SYN-RECEIVED drops it and the listener goes on: the guest's ACCEPT waits and is
/// given the next connection.
#[test]
fn rst_in_syn_received_returns_to_listen() {
    let mut p = Peer::listening("rst-synrcvd");
    p.run(
        "
        > S 0:0(0) win 65535 <mss 1440>
        < S. 0:0(0) ack 1 win 65535 <mss 1440>
        > R 1:1(0) win 0
        ",
    );
    p.iss = None;
    p.port = PEER_PORT + 1;
    p.run(
        "
        > S 0:0(0) win 65535 <mss 1440>
        < S. 0:0(0) ack 1 win 65535 <mss 1440>
        > . 1:1(0) ack 1 win 65535
        @accepted
        ",
    );
}

// ---- closing ---------------------------------------------------------------------------------

/// RFC 9293 §3.6 and §3.10.7.4: an active close goes FIN-WAIT-1, FIN-WAIT-2, TIME-WAIT;
/// a retransmitted FIN in TIME-WAIT is acknowledged again; after 2 MSL the connection is
/// gone and its segments meet a reset.
#[test]
fn active_close_through_time_wait() {
    let mut p = Peer::established("timewait");
    p.run(
        "
        @close
        < F. 1:1(0) ack 1 win 512
        > . 1:1(0) ack 2 win 1024
        > F. 1:1(0) ack 2 win 1024
        < . 2:2(0) ack 2 win *
        > F. 1:1(0) ack 2 win 1024     # our ACK was lost: the FIN again
        < . 2:2(0) ack 2 win *
        @closed
        ",
    );
    // TIME-WAIT answers an old segment with an ACK until 2 MSL have passed; then the
    // connection is gone and a reset answers (from the listener's port: RFC 9293
    // §3.10.7.2, <SEQ=SEG.ACK><CTL=RST>).
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        p.run("> . 1:2(1) ack 2 win 1024");
        let s = p.next_seg();
        if s.h.rst {
            assert_eq!(s.h.sequence_number, p.iss.unwrap().wrapping_add(2));
            break;
        }
        assert!(s.h.ack && s.payload.is_empty(), "TIME-WAIT's answer: {s:?}");
        assert!(
            std::time::Instant::now() < deadline,
            "TIME-WAIT never ended"
        );
        std::thread::sleep(MSL / 4);
    }
}

// ---- IPv6 around TCP -------------------------------------------------------------------------

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

// ---- path MTU --------------------------------------------------------------------------------

/// Every packet the device sent so far fits `mtu` bytes and none is a fragment: TCP does
/// not rely on IPv6 fragmentation (RFC 8201 §5.2).
fn all_fit(p: &Peer, mtu: usize) {
    for f in &p.log {
        match f {
            Frame::Fragment(n) => panic!("the device fragmented a packet ({n} bytes)"),
            Frame::Tcp(s) => assert!(s.ip_len <= mtu, "{} bytes > {mtu}", s.ip_len),
            _ => {}
        }
    }
}

/// An established connection on which the guest sends `n` bytes of its stream: segments of
/// the link's MSS (1440) go out, then a packet too big reporting `mtu` makes the device
/// send them all again at once, in segments of 1220 (what fits 1280, the least a path MTU
/// is taken to be). From the packet too big on, `p.log` holds what the device sends.
fn narrowed(name: &str, n: u32, mtu: u32) -> Peer {
    let mut p = Peer::established(name);
    p.run(&format!("@send {n}"));
    expect_stream(&mut p, 1, n, 1440);
    p.packet_too_big(mtu);
    p.log.clear();
    expect_stream(&mut p, 1, n, 1220);
    p
}

/// The guest sends 3000 more bytes, from relative sequence `from`: segments of 1220, and
/// nothing the device sent since `p.log` was cleared is larger than 1280 bytes or a
/// fragment.
fn more_fits(p: &mut Peer, from: u32) {
    p.run("@send 3000");
    expect_stream(p, from, 3000, 1220);
    all_fit(p, 1280);
}

/// `n` bytes of the guest's stream from relative sequence `from`: full segments of `mss`
/// bytes, then the rest in one with PSH.
fn expect_stream(p: &mut Peer, from: u32, n: u32, mss: u32) {
    let full = (n - 1) / mss;
    p.expect_data(from, full as usize, mss as usize);
    let (start, end) = (from + full * mss, from + n);
    p.run(&format!(
        "< P. {start}:{end}({}) ack 1 win 512",
        end - start
    ));
}

/// RFC 8201 §4 and §5.2, RFC 9293 §3.7.3: a packet too big lowers the path MTU of a live
/// connection: what was in flight is sent again at once in segments that fit (1220
/// bytes for 1280), not fragmented.
#[test]
fn packet_too_big_on_a_live_connection() {
    let mut p = narrowed("ptb-live", 4000, 1280);
    p.run("> . 1:1(0) ack 4001 win 1024");
    p.run("@sent");
    p.log.clear();
    more_fits(&mut p, 4001);
}

/// RFC 8201 §5.2: a new connection to a destination whose path MTU was lowered starts
/// with segments that fit it (while its SYN still announces the MSS of the link, RFC
/// 9293 §3.7.1): 1220 bytes, never IPv6 fragments.
#[test]
fn packet_too_big_applies_to_new_connections() {
    let mut p = narrowed("ptb-new", 2000, 1280);
    p.log.clear();
    p.new_connection(PEER_PORT + 1);
    p.run(
        "
        < S 0:0(0) win 65535 <mss 1440,sackOK,TS val * ecr 0,wscale 7>
        > S. 0:0(0) ack 1 win 65535 <mss 1440,sackOK,nop,wscale 7>
        < . 1:1(0) ack 1 win 512
        @connected
        ",
    );
    more_fits(&mut p, 1);
}

/// RFC 8201 §4: a packet too big reporting less than the IPv6 minimum MTU lowers the
/// path MTU to 1280 and no further (segments of 1220 bytes, never smaller, never
/// fragmented); at 1280 another such report is ignored: nothing is sent again.
#[test]
fn packet_too_big_below_1280() {
    let mut p = narrowed("ptb-small", 2000, 600);
    p.packet_too_big(500);
    p.run("< nothing");
    all_fit(&p, 1280);
}
