//! What an established connection refuses (RFC 9293 §3.10.7.4, RFC 5961, RFC 7323 §5):
//! resets off the exact sequence number, SYNs, ACKs of what was never sent, and old
//! timestamps (PAWS) — answered with a (rate-limited) challenge ACK or dropped.

use qpip_device::net::tcp::connection::ts_offset_for;

use super::*;

#[test]
fn rst_exact_resets_in_window_challenges_outside_ignored() {
    let mut t = T::established(&cfg());
    t.send(hdr(RST, IRS + 100, 0, 0), &[]);
    assert_eq!(
        t.recv1().0,
        out(ACK, ISS + 1, IRS + 1, WINDOW),
        "challenge ACK"
    );
    assert_eq!(t.c.state(), State::Established);
    t.send(hdr(RST, IRS + 1_000_000, 0, 0), &[]);
    t.recv_none();
    t.send(hdr(RST, IRS + 1, 0, 0), &[]);
    t.ended_with(Event::Reset);
}

#[test]
fn syn_in_established_gets_a_rate_limited_challenge_ack() {
    let mut t = T::established(&Config {
        challenge_ack_limit: 2,
        ..cfg()
    });
    let challenge = out(ACK, ISS + 1, IRS + 1, WINDOW);
    for _ in 0..2 {
        t.send(hdr(SYN, IRS + 1, 0, 1000), &[]);
        assert_eq!(t.recv1().0, challenge);
    }
    t.send(hdr(SYN, IRS + 1, 0, 1000), &[]);
    t.recv_none();
    assert_eq!(t.c.stats().challenge_acks, 2);
    t.now += Duration::from_secs(1);
    t.send(hdr(SYN, IRS + 1, 0, 1000), &[]);
    assert_eq!(t.recv1().0, challenge);
    assert_eq!(t.c.state(), State::Established);
}

#[test]
fn ack_of_unsent_data_is_answered_and_dropped() {
    let mut t = T::established(&cfg());
    t.send(hdr(ACK, IRS + 1, ISS + 500, 30_000), b"data");
    assert_eq!(t.recv1().0, out(ACK, ISS + 1, IRS + 1, WINDOW));
    assert!(t.app.data.is_empty(), "the segment was dropped");
    // An old ACK far below SND.UNA - MAX.SND.WND is dropped with a challenge.
    t.send(
        hdr(ACK, IRS + 1, ISS.wrapping_sub(100_000), 30_000),
        b"data",
    );
    assert_eq!(t.c.stats().challenge_acks, 1);
    assert!(t.app.data.is_empty());
}

#[test]
fn paws_drops_old_timestamps() {
    let mut t = T::connect(&Config {
        timestamps: true,
        ..cfg()
    });
    t.recv1();
    let mut h = hdr(SYN | ACK, IRS, ISS + 1, 30_000);
    h.options.mss = Some(MSS);
    h.options.timestamps = Some((1000, ts_offset_for(ISS)));
    t.send(h, &[]);
    t.recv1();
    let mut d = hdr(ACK, IRS + 1, ISS + 1, 30_000);
    d.options.timestamps = Some((1010, 0));
    t.send(d, b"abc");
    // An older timestamp (a wrapped-around old duplicate): dropped, ACKed.
    let mut old = hdr(ACK, IRS + 4, ISS + 1, 30_000);
    old.options.timestamps = Some((900, 0));
    t.send(old, b"def");
    let segs = t.recv();
    assert_eq!(segs.last().unwrap().0.ack, IRS + 4);
    assert_eq!(segs.last().unwrap().0.options.timestamps.unwrap().1, 1010);
    assert_eq!(t.app.data, b"abc");
    assert_eq!(t.c.stats().paws_rejected, 1);
}
