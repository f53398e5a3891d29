//! Receiving: when ACKs go (delayed, quick, with SACK blocks), and the window offered —
//! its right edge never moving left, staging keeping what was promised, zero windows and
//! their reopening.

use qpip_device::net::tcp;

use super::*;
use crate::harness::ms;

impl T {
    /// The peer sends `n` segments of 1000 bytes `b` from `seq`, acknowledging nothing
    /// new; returns where they end.
    fn full_segments(&mut self, mut seq: u32, n: usize, b: u8) -> u32 {
        for _ in 0..n {
            self.send(hdr(ACK, seq, ISS + 1, 30_000), &[b; 1000]);
            seq += 1000;
        }
        seq
    }
}

#[test]
fn delayed_ack_then_every_second_segment() {
    let mut t = T::established(&cfg());
    t.send(hdr(ACK, IRS + 1, ISS + 1, 30_000), &[7; 500]);
    t.recv_none();
    assert_eq!(t.c.next_deadline(), Some(t.now + ms(40)));
    t.wait(ms(40));
    let w = WINDOW - 500;
    assert_eq!(t.recv1().0, out(ACK, ISS + 1, IRS + 501, w));
    // Two full segments: acknowledged at once.
    t.send(hdr(ACK, IRS + 501, ISS + 1, 30_000), &[1; 1000]);
    t.recv_none();
    t.send(hdr(ACK, IRS + 1501, ISS + 1, 30_000), &[2; 1000]);
    assert_eq!(t.recv1().0, out(ACK, ISS + 1, IRS + 2501, w - 2000));
    assert_eq!(t.app.data.len(), 2500);
}

/// A delivery that completed something the peer waits on (the engine calls `ack_delivery`
/// when a receive WR completes) is acknowledged within QUICK_ACK, not after the timer; an
/// answer sent before then carries the ACK (one segment each way for a request/response).
#[test]
fn a_completed_delivery_is_acknowledged_soon_or_with_the_answer() {
    let mut t = T::established(&cfg());
    t.send(hdr(ACK | PSH, IRS + 1, ISS + 1, 30_000), &[7; 100]);
    t.recv_none();
    t.c.ack_delivery(t.now);
    assert_eq!(
        t.c.next_deadline(),
        Some(t.now + tcp::connection::QUICK_ACK),
        "a quick ACK, far sooner than the delayed-ACK timer"
    );
    t.recv_none();
    t.wait(tcp::connection::QUICK_ACK);
    let w = WINDOW - 100;
    assert_eq!(t.recv1().0, out(ACK, ISS + 1, IRS + 101, w));
    // The timer is off, and with nothing unacknowledged the call sends nothing.
    assert_eq!(t.c.next_deadline(), None);
    t.c.ack_delivery(t.now);
    t.recv_none();

    // The next request is answered in time: the answer carries the ACK, nothing else goes.
    t.send(hdr(ACK | PSH, IRS + 101, ISS + 1, 30_000), &[8; 100]);
    t.c.ack_delivery(t.now);
    t.wait(tcp::connection::QUICK_ACK / 2);
    t.recv_none();
    t.queue(50);
    let (h, data) = t.recv1();
    assert_eq!((h.ack, data.len()), (IRS + 201, 50), "{h:?}");
    t.wait(tcp::connection::QUICK_ACK);
    t.recv_none();
}

#[test]
fn out_of_order_is_sacked_and_hole_fill_acked_at_once() {
    let mut t = T::established(&cfg());
    let w = WINDOW;
    t.send(hdr(ACK, IRS + 1001, ISS + 1, 30_000), &[2; 1000]);
    let mut want = out(ACK, ISS + 1, IRS + 1, w);
    want.options = sack(&[(IRS + 1001, IRS + 2001)]);
    assert_eq!(t.recv1().0, want);
    t.send(hdr(ACK, IRS + 3001, ISS + 1, 30_000), &[4; 500]);
    want.options = sack(&[(IRS + 3001, IRS + 3501), (IRS + 1001, IRS + 2001)]);
    assert_eq!(t.recv1().0, want);
    // A duplicate of an old segment: ACK.
    t.send(hdr(ACK, IRS + 1001, ISS + 1, 30_000), &[2; 1000]);
    want.options = sack(&[(IRS + 1001, IRS + 2001), (IRS + 3001, IRS + 3501)]);
    assert_eq!(t.recv1().0, want);
    // The first hole filled: ACK to the next hole, at once.
    t.send(hdr(ACK, IRS + 1, ISS + 1, 30_000), &[1; 1000]);
    let mut want = out(ACK, ISS + 1, IRS + 2001, w - 2000);
    want.options = sack(&[(IRS + 3001, IRS + 3501)]);
    assert_eq!(t.recv1().0, want);
    t.send(hdr(ACK | PSH, IRS + 2001, ISS + 1, 30_000), &[3; 1000]);
    assert_eq!(t.recv1().0, out(ACK, ISS + 1, IRS + 3501, w - 3500));
    assert_eq!(t.app.data.len(), 3500);
    assert_eq!(t.c.stats().out_of_order, 3);
}

#[test]
fn window_edge_never_moves_left_and_staging_keeps_the_promise() {
    let mut t = T::established(&cfg());
    // 30000 promised (20000 posted, 10000 of staging); then the posted space is given up
    // (as a stream receive completed early gives up the rest of its buffer). Staging
    // grows to take what was promised (RFC 9293 §3.8.6: what is advertised is taken),
    // and nothing beyond.
    t.app.room = 0;
    let seq = t.full_segments(IRS + 1, 10, 5);
    let last = t.recv().last().unwrap().0;
    assert_eq!(last.ack, IRS + 1 + 10_000);
    // The edge stays at IRS + 1 + 30000: the window field is what is left of it.
    assert_eq!(last.window, 20_000);
    assert!(t.app.data.is_empty());
    let seq = t.full_segments(seq, 20, 5);
    let last = t.recv().last().unwrap().0;
    assert_eq!((last.ack, last.window), (IRS + 1 + 30_000, 0), "all taken");
    assert_eq!(t.c.stats().dropped_bytes, 0);
    // Beyond the promise (the window is zero): not acceptable, not acknowledged.
    t.full_segments(seq, 1, 6);
    let a = t.recv1().0;
    assert_eq!((a.ack, a.window), (IRS + 1 + 30_000, 0));
    assert_eq!(t.c.received(), 30_000);
    // Posting buffers moves the staged bytes; while more than the allowance is staged
    // the window stays shut.
    t.app.room = 15_000;
    t.c.recv_space_changed(t.now, &mut t.app);
    t.recv_none();
    // More room: everything staged moves, the window opens by more than an MSS, the
    // update goes out.
    t.app.room += 25_000;
    t.c.recv_space_changed(t.now, &mut t.app);
    assert_eq!(t.app.data.len(), 30_000);
    assert_eq!(
        t.take_events(),
        vec![
            Event::DataArrived {
                upto: 15_000,
                push: None
            },
            Event::DataArrived {
                upto: 30_000,
                push: None
            }
        ]
    );
    let a = t.recv1().0;
    assert_eq!(
        a,
        out(ACK, ISS + 1, IRS + 30_001, (10_000 + STAGING) as u16)
    );
}

#[test]
fn zero_window_offered_then_reopened() {
    let mut t = T::established(&Config {
        staging: 2000,
        ..cfg()
    });
    // The window offered after the handshake: 20000 + 2000, then the posted space is
    // given up: staging takes everything that was promised, far beyond its allowance
    // (what was advertised is taken, RFC 9293 §3.8.6), and the window closes to zero.
    t.app.room = 0;
    let seq = t.full_segments(IRS + 1, 22, 5);
    let a = t.recv();
    assert_eq!(a.last().unwrap().0, out(ACK, ISS + 1, IRS + 22_001, 0));
    assert_eq!(t.c.stats().dropped_bytes, 0);
    // Beyond the promise: not acceptable, answered with the zero window.
    t.full_segments(seq, 1, 5);
    assert_eq!(t.recv1().0, out(ACK, ISS + 1, IRS + 22_001, 0));
    assert_eq!(t.c.received(), 22_000);
    // The application reads: staging drains into the sink, and as the peer's window is
    // shut the update goes at once: 50000 - 22000 in the sink + 2000 staging.
    t.app.room = 50_000;
    t.c.recv_space_changed(t.now, &mut t.app);
    assert_eq!(t.app.data.len(), 22_000);
    assert_eq!(t.recv1().0, out(ACK, ISS + 1, IRS + 22_001, 30_000));
}

#[test]
fn window_probe_from_the_peer_into_our_zero_window() {
    let mut t = T::established(&Config {
        staging: 1000,
        ..cfg()
    });
    // 21000 promised: 20000 fill the sink, 1000 the staging. The window is zero.
    let seq = t.full_segments(IRS + 1, 21, 1);
    let last = t.recv().pop().unwrap().0;
    assert_eq!(last, out(ACK, ISS + 1, IRS + 21_001, 0));
    // The peer's one-byte probe is not taken, but its ACK is processed and answered with
    // the (still zero) window.
    t.queue(100);
    t.recv1();
    t.send(hdr(ACK, seq, ISS + 101, 30_000), &[9]);
    assert_eq!(t.take_events().last(), Some(&Event::Acked { upto: 100 }));
    assert_eq!(t.recv1().0, out(ACK, ISS + 101, IRS + 21_001, 0));
    // The application reads: the window opens, an update goes out at once.
    t.app.room = 8_000;
    t.c.recv_space_changed(t.now, &mut t.app);
    assert_eq!(t.recv1().0, out(ACK, ISS + 101, IRS + 21_001, 8_000));
}

/// The memory pool refuses bytes inside the window (the sink gave up its space, staging
/// must take the promise): they are dropped and counted, and the window is withdrawn — the
/// right edge back to RCV.NXT, the window zero — so that the peer probes instead of
/// retransmitting into it (RFC 9293 §3.8.6 allows shrinking, SHLD-14, MUST-34). Posting
/// receives opens it again.
#[test]
fn window_withdrawn_when_the_pool_refuses() {
    let mut t = T::established(&cfg());
    let pool = tcp::MemoryPool::new(3000, None);
    t.c.set_memory_pool(Some(pool.clone()));
    t.app.room = 0;
    let seq = t.full_segments(IRS + 1, 3, 5);
    t.recv();
    assert_eq!(pool.used(), 3000);
    t.full_segments(seq, 1, 6);
    assert_eq!(t.recv1().0, out(ACK, ISS + 1, IRS + 3001, 0));
    assert_eq!(t.c.stats().dropped_bytes, 1000);
    assert_eq!(t.c.stats().window_retractions, 1);
    // Still withdrawn: the same segment again is beyond the (zero) window.
    t.full_segments(seq, 1, 6);
    assert_eq!(t.recv1().0, out(ACK, ISS + 1, IRS + 3001, 0));
    t.app.room = 10_000;
    t.c.recv_space_changed(t.now, &mut t.app);
    assert_eq!(pool.used(), 0);
    assert_eq!(
        t.recv1().0,
        out(ACK, ISS + 1, IRS + 3001, (7_000 + STAGING) as u16)
    );
}
