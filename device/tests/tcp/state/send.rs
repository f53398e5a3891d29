//! Sending: segments of the MSS within cwnd and the peer's window, retransmission on
//! timeouts (backoff, Karn) and on duplicate ACKs (NewReno, SACK recovery), the persist
//! timer against a zero window.

use qpip_device::net::tcp;

use super::*;
use crate::harness::ms;

#[test]
fn data_goes_out_in_mss_segments_within_cwnd_and_acks_complete_it() {
    let mut t = T::established(&cfg());
    t.queue(5500);
    let segs = t.recv();
    // Initial window 4 segments.
    assert_eq!(segs.len(), 4);
    for (i, (h, p)) in segs.iter().enumerate() {
        let seq = ISS + 1 + 1000 * i as u32;
        assert_eq!(*h, out(ACK, seq, IRS + 1, 30_000));
        assert_eq!(*p, t.bytes(1000 * i as u64, 1000));
    }
    t.ack(ISS + 2001);
    assert_eq!(t.take_events(), vec![Event::Acked { upto: 2000 }]);
    // Slow start: cwnd 4000 + 2000 (ABC, L = 2): 6000, 2000 in flight; 1500 remain.
    let segs = t.recv();
    assert_eq!(segs.len(), 2);
    assert_eq!(segs[0].0, out(ACK, ISS + 4001, IRS + 1, 30_000));
    assert_eq!(segs[1].0, out(ACK | PSH, ISS + 5001, IRS + 1, 30_000));
    assert_eq!(segs[1].1.len(), 500);
    t.ack(ISS + 5501);
    assert_eq!(t.take_events(), vec![Event::Acked { upto: 5500 }]);
    assert_eq!(t.c.next_deadline(), None, "nothing outstanding, no timer");
}

#[test]
fn peer_window_limits_sending() {
    let mut t = T::established(&cfg());
    t.send(hdr(ACK, IRS + 1, ISS + 1, 1500), &[]);
    t.queue(2500);
    let (h, p) = t.recv1();
    assert_eq!((h.seq, p.len()), (ISS + 1, 1000));
    // 500 left in the window: less than an MSS, less than half the largest window seen,
    // with data in flight: not sent (sender silly window avoidance).
    t.recv_none();
    t.send(hdr(ACK, IRS + 1, ISS + 1001, 1500), &[]);
    let segs = t.recv();
    assert_eq!(segs.len(), 2);
    assert_eq!(segs[0].0, out(ACK, ISS + 1001, IRS + 1, WINDOW));
    assert_eq!(segs[1].0, out(ACK | PSH, ISS + 2001, IRS + 1, WINDOW));
    assert_eq!(segs[1].1.len(), 500);
    // Nothing in flight and a small window: what fits goes (the override of RFC 9293
    // §3.8.6.2.1, or the connection would wait forever).
    t.send(hdr(ACK, IRS + 1, ISS + 2501, 300), &[]);
    t.queue(1000);
    let (h, p) = t.recv1();
    assert_eq!((h.seq, p.len(), h.flags), (ISS + 2501, 300, ACK));
}

#[test]
fn rto_retransmits_with_backoff_and_karn() {
    let mut t = T::established(&cfg());
    t.queue(1000);
    let (h, _) = t.recv1();
    assert_eq!(h.seq, ISS + 1);
    // The handshake's RTT sample (0 here) gave the minimum RTO, 200 ms; doubling.
    for gap in [200, 400, 800] {
        assert_eq!(t.wait_deadline(), ms(gap));
        let (h, p) = t.recv1();
        assert_eq!(h, out(ACK | PSH, ISS + 1, IRS + 1, 30_000));
        assert_eq!(p, t.bytes(0, 1000));
    }
    assert_eq!(t.c.stats().timeouts, 3);
    assert_eq!(t.c.cwnd(), 1000, "loss window after a timeout");
    // The ACK after retransmissions gives no RTT sample (Karn): RTO stays backed off
    // until a new sample.
    t.now += ms(50);
    t.ack(ISS + 1001);
    assert_eq!(t.c.srtt(), Some(ms(0)));
    assert_eq!(t.c.rto(), ms(1600));
    t.queue(1000);
    t.recv1();
    t.now += ms(400);
    t.ack(ISS + 2001);
    // srtt 0 * 7/8 + 400/8 = 50; rttvar 0 * 3/4 + 400/4 = 100: RTO 450, backoff gone.
    assert_eq!(t.c.srtt(), Some(ms(50)));
    assert_eq!(t.c.rto(), ms(450));
}

#[test]
fn retries_exhausted_time_out() {
    let mut t = T::established(&Config {
        max_retries: 2,
        ..cfg()
    });
    t.queue(10);
    t.recv1();
    // Two retransmissions (`max_retries`), then it gives up.
    for _ in 0..2 {
        t.wait_deadline();
        t.recv1();
    }
    t.wait_deadline();
    t.ended_with(Event::TimedOut);
}

/// Sends `n` full segments from an established connection with a large cwnd.
fn in_flight(cfg: &Config, n: u32) -> T {
    let c = Config {
        initial_window: n,
        ..*cfg
    };
    let mut t = T::established(&c);
    t.queue(n as u64 * 1000);
    assert_eq!(t.recv().len(), n as usize);
    t
}

#[test]
fn newreno_fast_retransmit_and_partial_acks() {
    let c = Config {
        sack: false,
        congestion: tcp::CongestionKind::Reno,
        ..cfg()
    };
    let mut t = in_flight(&c, 10);
    // Segments 1 and 4 (of 0..10) lost: the peer acknowledges segment 0, then repeats.
    t.ack(ISS + 1001);
    t.take_events();
    t.recv_none();
    // Two duplicates: limited transmit has nothing new to send.
    t.ack(ISS + 1001);
    t.ack(ISS + 1001);
    t.recv_none();
    // The third: fast retransmit of segment 1.
    t.ack(ISS + 1001);
    let (h, p) = t.recv1();
    assert_eq!(h, out(ACK, ISS + 1001, IRS + 1, 30_000));
    assert_eq!(p, t.bytes(1000, 1000));
    // ssthresh = flight (9000) / 2, cwnd = ssthresh + 3 MSS.
    assert_eq!(t.c.ssthresh(), 4500);
    assert_eq!(t.c.cwnd(), 7500);
    // Partial ACK up to the second loss: retransmit segment 4 at once.
    t.ack(ISS + 4001);
    let (h, _) = t.recv1();
    assert_eq!(h.seq, ISS + 4001);
    // Full ACK: recovery over, cwnd deflated to ssthresh.
    t.ack(ISS + 10_001);
    assert_eq!(
        t.c.cwnd(),
        1000 + 1000,
        "min(ssthresh, flight + MSS) with nothing in flight"
    );
    assert_eq!(t.c.stats().fast_recoveries, 1);
}

#[test]
fn sack_recovery_retransmits_only_the_holes() {
    let mut t = in_flight(&cfg(), 10);
    // Segments 2 and 5 lost. SACKs for 3-4 and 6-9 arrive with duplicate ACKs.
    let a = |t: &mut T, blocks: &[(u32, u32)]| {
        let mut h = hdr(ACK, IRS + 1, ISS + 2001, 30_000);
        h.options = sack(blocks);
        t.send(h, &[]);
    };
    t.ack(ISS + 2001);
    t.take_events();
    a(&mut t, &[(ISS + 3001, ISS + 4001)]);
    t.recv_none();
    a(&mut t, &[(ISS + 3001, ISS + 5001)]);
    t.recv_none();
    // 3 SACKed segments above the hole now (more than 2 MSS): segment 2 is lost.
    a(
        &mut t,
        &[(ISS + 6001, ISS + 7001), (ISS + 3001, ISS + 5001)],
    );
    let segs = t.recv();
    assert_eq!(segs[0].0.seq, ISS + 2001, "the first hole");
    assert_eq!(t.c.stats().fast_recoveries, 1);
    a(
        &mut t,
        &[(ISS + 6001, ISS + 10_001), (ISS + 3001, ISS + 5001)],
    );
    let segs2 = t.recv();
    let seqs: Vec<u32> = segs.iter().chain(segs2.iter()).map(|s| s.0.seq).collect();
    assert!(seqs.contains(&(ISS + 5001)), "the second hole: {seqs:?}");
    for s in &seqs {
        assert!(
            [ISS + 2001, ISS + 5001].contains(s),
            "only holes are resent: {seqs:?}"
        );
    }
    // Both holes acknowledged: out of recovery.
    t.ack(ISS + 10_001);
    assert_eq!(t.take_events(), vec![Event::Acked { upto: 10_000 }]);
    t.recv_none();
}

#[test]
fn zero_window_persist_probes_back_off_and_window_reopens() {
    let mut t = T::established(&cfg());
    t.send(hdr(ACK, IRS + 1, ISS + 1, 0), &[]);
    t.queue(3000);
    t.recv_none();
    // Persist timer (the RTO, 200 ms): one byte beyond the window.
    assert_eq!(t.wait_deadline(), ms(200));
    let (h, p) = t.recv1();
    assert_eq!(h, out(ACK, ISS + 1, IRS + 1, 30_000));
    assert_eq!(p, t.bytes(0, 1));
    // The peer still has no room: it acknowledges nothing. The probe is resent with
    // backoff, never given up while the peer answers.
    for gap in [
        200, 400, 800, 1600, 3200, 6400, 12800, 25600, 51200, 60000, 60000,
    ] {
        t.send(hdr(ACK, IRS + 1, ISS + 1, 0), &[]);
        assert_eq!(t.wait_deadline(), ms(gap));
        let (h, p) = t.recv1();
        assert_eq!((h.seq, p.len()), (ISS + 1, 1));
    }
    assert_eq!(t.c.state(), State::Established);
    // The window opens: the rest flows.
    t.ack(ISS + 2);
    assert_eq!(t.take_events(), vec![Event::Acked { upto: 1 }]);
    let segs = t.recv();
    assert_eq!(segs.iter().map(|s| s.1.len()).sum::<usize>(), 2999);
    assert_eq!(segs[0].0.seq, ISS + 2);
}
