//! Blind in-window attacks (RFC 5961): RST, SYN and ACK outside what they must be.

use qpip_testkit as support;

use crate::script::*;
use support::*;

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
