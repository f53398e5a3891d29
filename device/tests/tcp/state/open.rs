//! Opening: the active open from SYN-SENT (options negotiated, bad ACKs, resets, SYN
//! retransmissions, the simultaneous open), the passive open through a listener
//! (SYN-RECEIVED, the backlog, SYN cookies).

use qpip_device::net::tcp::connection::ts_offset_for;
use qpip_device::net::tcp::{IsnGenerator, ListenOutcome, Listener};

use super::*;
use crate::harness::ms;

/// [`cfg`] with window scaling (shift 7) and timestamps on as well.
fn all_options() -> Config {
    Config {
        window_scale: Some(7),
        timestamps: true,
        ..cfg()
    }
}

#[test]
fn syn_carries_all_options() {
    let mut t = T::connect(&all_options());
    assert_eq!(t.c.state(), State::SynSent);
    let (h, p) = t.recv1();
    assert!(p.is_empty());
    let mut want = out(SYN, ISS, 0, STAGING as u16);
    want.options = Options {
        mss: Some(MSS),
        window_scale: Some(7),
        sack_permitted: true,
        timestamps: Some((ts_offset_for(ISS), 0)),
        sack: SackBlocks::new(),
    };
    assert_eq!(h, want);
    // Nothing more until the retransmission timer.
    t.recv_none();
    assert_eq!(t.c.next_deadline(), Some(t.t0 + Duration::from_secs(1)));
}

#[test]
fn syn_sent_to_established_negotiates_scaling_and_timestamps() {
    let mut t = T::connect(&all_options());
    t.recv1();
    t.now += ms(10);
    let mut h = hdr(SYN | ACK, IRS, ISS + 1, 65535);
    h.options = Options {
        mss: Some(1200),
        window_scale: Some(2),
        sack_permitted: true,
        timestamps: Some((777, ts_offset_for(ISS))),
        sack: SackBlocks::new(),
    };
    t.send(h, &[]);
    assert_eq!(t.c.state(), State::Established);
    assert_eq!(t.c.negotiated(), (true, true, true));
    // The window in the SYN-ACK is not scaled.
    assert_eq!(t.c.send_window(), 65535);
    // RTT sampled from the echoed timestamp: 10 ms.
    assert_eq!(t.c.srtt(), Some(ms(10)));
    // SMSS: the smaller MSS (ours, 1000) less 12 bytes of timestamps.
    assert_eq!(t.c.smss(), 988);
    let (a, _) = t.recv1();
    let mut want = out(ACK, ISS + 1, IRS + 1, ((ROOM + STAGING) >> 7) as u16);
    want.options.timestamps = Some((ts_offset_for(ISS) + 10, 777));
    assert_eq!(a, want);
    // From now on the peer's window is scaled by 4.
    let mut h = hdr(ACK, IRS + 1, ISS + 1, 1000);
    h.options.timestamps = Some((778, ts_offset_for(ISS) + 10));
    t.send(h, &[]);
    assert_eq!(t.c.send_window(), 4000);
}

#[test]
fn syn_ack_without_options_turns_them_off() {
    let mut t = T::connect(&all_options());
    t.recv1();
    t.send(hdr(SYN | ACK, IRS, ISS + 1, 30_000), &[]);
    assert_eq!(t.c.negotiated(), (false, false, false));
    // No MSS option: IPv6's default 1220, capped by ours.
    assert_eq!(t.c.smss(), 1000);
    let (a, _) = t.recv1();
    // Unscaled window, capped at 65535.
    assert_eq!(a, out(ACK, ISS + 1, IRS + 1, WINDOW));
}

#[test]
fn syn_sent_bad_ack_gets_reset_and_reset_needs_acceptable_ack() {
    let mut t = T::connect(&cfg());
    t.recv1();
    // ACK of something never sent: <SEQ=SEG.ACK><CTL=RST>, state unchanged.
    t.send(hdr(SYN | ACK, IRS, ISS + 7, 1000), &[]);
    assert_eq!(t.recv1().0, out(RST, ISS + 7, 0, 0));
    assert_eq!(t.c.state(), State::SynSent);
    // A reset without ACK is ignored in SYN-SENT.
    t.send(hdr(RST, IRS, 0, 0), &[]);
    assert_eq!(t.c.state(), State::SynSent);
    t.recv_none();
    // With an acceptable ACK it refuses the connection.
    t.send(hdr(RST | ACK, 0, ISS + 1, 0), &[]);
    t.ended_with(Event::Reset);
}

#[test]
fn syn_retransmits_with_backoff_then_times_out() {
    let mut t = T::connect(&Config {
        syn_retries: 3,
        ..cfg()
    });
    t.recv1();
    for (i, gap) in [1000u64, 2000, 4000].iter().enumerate() {
        assert_eq!(t.wait_deadline(), ms(*gap), "retransmission {i}");
        let (h, _) = t.recv1();
        assert!(h.syn() && !h.ack_flag() && h.seq == ISS);
    }
    assert_eq!(t.wait_deadline(), ms(8000));
    t.ended_with(Event::TimedOut);
}

#[test]
fn simultaneous_open() {
    let mut t = T::connect(&cfg());
    t.recv1();
    // Their SYN crosses ours.
    let mut h = hdr(SYN, IRS, 0, 30_000);
    h.options.mss = Some(MSS);
    t.send(h, &[]);
    assert_eq!(t.c.state(), State::SynReceived);
    let (sa, _) = t.recv1();
    let mut want = out(SYN | ACK, ISS, IRS + 1, WINDOW);
    want.options.mss = Some(MSS);
    assert_eq!(sa, want);
    // Their SYN-ACK (to our SYN): its SYN is old news, answered with an ACK.
    h.flags = SYN | ACK;
    h.ack = ISS + 1;
    t.send(h, &[]);
    assert_eq!(t.recv1().0, out(ACK, ISS + 1, IRS + 1, WINDOW));
    assert_eq!(t.c.state(), State::SynReceived);
    // Their ACK of our SYN-ACK.
    t.ack(ISS + 1);
    assert_eq!(t.c.state(), State::Established);
    assert_eq!(t.take_events(), vec![Event::Established]);
}

// ---- passive opens ----------------------------------------------------------------------------

/// A listener on the connection's port, and the ISN generator it draws from.
struct Listening {
    l: Listener,
    isn: IsnGenerator,
    t0: Instant,
}

impl Listening {
    fn new(cfg: Config, backlog: usize, cookies: bool) -> Listening {
        let t0 = Instant::now();
        Listening {
            l: Listener::new(LOCAL, LPORT, cfg, backlog, cookies, t0),
            isn: IsnGenerator::new([9; 16], t0),
            t0,
        }
    }

    /// The remote end sends the listener a segment at `at`.
    fn feed(&mut self, h: &Header, payload: &[u8], at: Instant) -> ListenOutcome {
        let bytes = from_remote(h, payload);
        self.l.on_segment(&parse_remote(&bytes), at, &self.isn, 0)
    }
}

/// A passive open through a listener, checked segment by segment.
fn accept(cfg: &Config, syn_opts: Options) -> T {
    let mut l = Listening::new(*cfg, 4, false);
    let mut h = hdr(SYN, IRS, 0, 30_000);
    h.options = syn_opts;
    let ListenOutcome::HalfOpen(c) = l.feed(&h, &[], l.t0) else {
        panic!("a half-open connection");
    };
    assert_eq!(l.l.half_open(), 1);
    assert_eq!(c.state(), State::SynReceived);
    let t = tuple(LOCAL, LPORT, REMOTE, crate::harness::RPORT);
    assert_eq!(c.iss(), l.isn.isn(&t, l.t0));
    T::new(c, l.t0)
}

#[test]
fn listener_answers_syn_and_completes() {
    let opts = Options {
        mss: Some(1400),
        sack_permitted: true,
        ..Options::default()
    };
    let mut t = accept(&cfg(), opts);
    let iss = t.c.iss();
    let (sa, _) = t.recv1();
    let mut want = out(SYN | ACK, iss, IRS + 1, STAGING as u16);
    want.options.mss = Some(MSS);
    want.options.sack_permitted = true;
    assert_eq!(sa, want);
    // The SYN again (our SYN-ACK was lost): the SYN-ACK again, now offering the space
    // the application posted meanwhile (a SYN's window is unscaled and may grow).
    t.send(hdr(SYN, IRS, 0, 30_000), &[]);
    want.window = WINDOW;
    assert_eq!(t.recv1().0, want);
    // An ACK of something else: reset, still SYN-RECEIVED.
    t.ack(iss + 50);
    assert_eq!(t.recv1().0, out(RST, iss + 50, 0, 0));
    assert_eq!(t.c.state(), State::SynReceived);
    // The right ACK, with data.
    t.send(hdr(ACK | PSH, IRS + 1, iss + 1, 30_000), b"hello");
    assert_eq!(t.c.state(), State::Established);
    assert_eq!(t.app.data, b"hello");
    assert_eq!(
        t.take_events(),
        vec![
            Event::Established,
            Event::DataArrived {
                upto: 5,
                push: Some(5)
            }
        ]
    );
    assert_eq!(t.c.send_window(), 30_000);
}

#[test]
fn listener_resets_stray_ack_ignores_reset_and_bounds_backlog() {
    let mut l = Listening::new(cfg(), 2, false);
    let t0 = l.t0;
    let ListenOutcome::Reply(r) = l.feed(&hdr(ACK, 1, 4242, 100), &[], t0) else {
        panic!("reset expected")
    };
    assert_eq!(sent(r).0, out(RST, 4242, 0, 0));
    assert!(matches!(
        l.feed(&hdr(RST, 1, 0, 0), &[], t0),
        ListenOutcome::Ignore
    ));
    let mut h = hdr(SYN, IRS, 0, 100);
    for port in [1, 2] {
        h.src_port = port;
        assert!(matches!(l.feed(&h, &[], t0), ListenOutcome::HalfOpen(_)));
    }
    // The backlog is full and cookies are off: dropped.
    h.src_port = 3;
    assert!(matches!(l.feed(&h, &[], t0), ListenOutcome::Ignore));
    assert_eq!(l.l.stats().backlog_drops, 1);
    l.l.half_open_done();
    assert!(matches!(l.feed(&h, &[], t0), ListenOutcome::HalfOpen(_)));
}

#[test]
fn syn_cookies_when_the_backlog_is_full() {
    let mut l = Listening::new(all_options(), 0, true);
    let t0 = l.t0;
    let mut h = hdr(SYN, IRS, 0, 30_000);
    h.options = Options {
        mss: Some(1460),
        window_scale: Some(3),
        sack_permitted: true,
        timestamps: Some((100, 0)),
        sack: SackBlocks::new(),
    };
    let ListenOutcome::Reply(r) = l.feed(&h, &[], t0) else {
        panic!("a cookie SYN-ACK");
    };
    let (sa, _) = sent(r);
    assert_eq!(sa.flags, SYN | ACK);
    assert_eq!(sa.ack, IRS + 1);
    assert_eq!(sa.options.window_scale, Some(7));
    assert!(sa.options.sack_permitted);
    let (tsval, tsecr) = sa.options.timestamps.unwrap();
    assert_eq!(tsecr, 100);
    assert_eq!(l.l.half_open(), 0, "no state kept");
    // The ACK brings the cookie back.
    let later = t0 + ms(20);
    let mut a = hdr(ACK, IRS + 1, sa.seq.wrapping_add(1), 1000);
    a.options.timestamps = Some((101, tsval));
    let ListenOutcome::FromCookie(mut conn) = l.feed(&a, b"x", later) else {
        panic!("a connection from the cookie");
    };
    let mut app = App::new(ROOM, false);
    conn.on_segment(&parse_remote(&from_remote(&a, b"x")), later, &mut app);
    assert_eq!(conn.state(), State::Established);
    assert_eq!(conn.negotiated(), (true, true, true));
    assert_eq!(conn.smss(), 1000 - 12);
    assert_eq!(
        conn.send_window(),
        8000,
        "the peer's shift (3) came back in the cookie"
    );
    assert_eq!(app.data, b"x");
    // A forged cookie is reset.
    let mut bad = a;
    bad.ack ^= 0x40;
    bad.src_port = 9;
    assert!(matches!(l.feed(&bad, &[], later), ListenOutcome::Reply(_)));
    assert_eq!(l.l.stats().cookies_rejected, 1);
    // Too old: rejected.
    assert!(matches!(
        l.feed(&a, &[], t0 + Duration::from_secs(200)),
        ListenOutcome::Reply(_)
    ));
}

#[test]
fn close_in_syn_received_sends_fin_once_established() {
    let mut t = accept(&cfg(), Options::default());
    let iss = t.c.iss();
    t.recv1();
    t.c.close();
    assert_eq!(t.c.state(), State::SynReceived);
    t.recv_none();
    t.ack(iss + 1);
    assert_eq!(t.c.state(), State::FinWait1);
    assert_eq!(t.take_events(), vec![Event::Established]);
    let (h, _) = t.recv1();
    assert_eq!((h.flags, h.seq), (ACK | FIN, iss + 1));
}

#[test]
fn reset_in_syn_received() {
    let mut t = accept(&cfg(), Options::default());
    t.recv1();
    // Off the exact sequence number: a challenge ACK, no reset.
    t.send(hdr(RST, IRS + 5, 0, 0), &[]);
    assert_eq!(t.c.state(), State::SynReceived);
    assert_eq!(t.recv1().0.flags, ACK);
    t.send(hdr(RST, IRS + 1, 0, 0), &[]);
    t.ended_with(Event::Reset);
}

#[test]
fn syn_ack_retransmitted_until_the_handshake_times_out() {
    let c = Config {
        syn_retries: 2,
        ..cfg()
    };
    let mut t = accept(&c, Options::default());
    let first = t.recv1().0;
    for gap in [1000, 2000] {
        assert_eq!(t.wait_deadline(), ms(gap));
        assert_eq!(t.recv1().0, first);
    }
    t.wait_deadline();
    t.ended_with(Event::TimedOut);
}
