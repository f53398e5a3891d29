//! The receive window the device offers (RFC 9293 §3.8.6, RFC 7323 §2.4), and the
//! persist timer probing the peer's zero window.

use qpip_testkit as support;

use crate::script::*;
use support::*;

use super::next_ack_edge;

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
            let (ack, edge, win) = next_ack_edge(p, right);
            right = right.max(edge);
            last_win = Some(win);
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
