//! Data (out of order, overlapping) and closing (FIN, passive and active close).

use crate::script::*;

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
