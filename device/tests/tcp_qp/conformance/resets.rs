//! Resets: closed ports, RST in SYN-SENT and SYN-RECEIVED.

use crate::script::*;

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
