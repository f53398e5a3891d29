//! Segment-exact tests of the TCP state machine, in the smoltcp style: in this state,
//! given this segment (or this much time), exactly these segments come out. Every
//! segment the connection builds also goes through smoltcp's parser.


use std::net::Ipv6Addr;
use std::time::{Duration, Instant};

use crate::common::{oracle, tuple, App, Source, A, B};
use qpip_device::net::tcp::connection::ts_offset_for;
use qpip_device::net::tcp::wire::{self, flags::*, Header, Options, SackBlocks};
use qpip_device::net::tcp::{
    self, Config, Connection, ConnectionTable, Event, Input, IsnGenerator, ListenOutcome, Listener,
    State,
};

const LOCAL: Ipv6Addr = A;
const REMOTE: Ipv6Addr = B;
const LPORT: u16 = 1000;
const RPORT: u16 = 80;
const ISS: u32 = 1000;
const IRS: u32 = 5000;
const MSS: u16 = 1000;
const STAGING: usize = 10_000;
const ROOM: usize = 20_000;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Plain options (no window scaling, no timestamps) keep the expected headers short;
/// tests of those options turn them on.
fn cfg() -> Config {
    Config {
        mss: MSS,
        window_scale: None,
        timestamps: false,
        sack: true,
        staging: STAGING,
        msl: ms(500),
        initial_window: 4,
        ..Config::default()
    }
}

/// A header from the remote end.
fn hdr(fl: u8, seq: u32, ack: u32, window: u16) -> Header {
    Header {
        src_port: RPORT,
        dst_port: LPORT,
        seq,
        ack,
        flags: fl,
        window,
        urgent: 0,
        options: Options::default(),
    }
}

/// A header we expect from the connection.
fn out(fl: u8, seq: u32, ack: u32, window: u16) -> Header {
    Header {
        src_port: LPORT,
        dst_port: RPORT,
        seq,
        ack,
        flags: fl,
        window,
        urgent: 0,
        options: Options::default(),
    }
}

fn sack(blocks: &[(u32, u32)]) -> Options {
    Options {
        sack: SackBlocks::from_slice(blocks),
        ..Options::default()
    }
}

struct T {
    c: Connection,
    t0: Instant,
    now: Instant,
    app: App,
    data: Vec<u8>,
    events: Vec<Event>,
}

impl T {
    fn connect(cfg: &Config) -> T {
        let t0 = Instant::now();
        T {
            c: Connection::connect(tuple(LOCAL, LPORT, REMOTE, RPORT), ISS, t0, cfg),
            t0,
            now: t0,
            app: App::new(ROOM, false),
            data: crate::common::pattern(7, 200_000),
            events: Vec::new(),
        }
    }

    /// An established connection (active open, SYN-ACK without options but MSS and
    /// SACK-permitted), the handshake's segments checked and taken.
    fn established(cfg: &Config) -> T {
        let mut t = T::connect(cfg);
        let syn = t.recv1();
        assert!(syn.0.syn());
        let mut h = hdr(SYN | ACK, IRS, ISS + 1, 30_000);
        h.options.mss = Some(MSS);
        h.options.sack_permitted = cfg.sack;
        t.send(h, &[]);
        assert_eq!(t.c.state(), State::Established);
        let ack = t.recv1();
        assert_eq!(
            ack.0,
            out(ACK, ISS + 1, IRS + 1, (ROOM + cfg.staging) as u16)
        );
        assert_eq!(t.take_events(), vec![Event::Established]);
        t
    }

    fn send(&mut self, h: Header, payload: &[u8]) {
        let bytes = wire::build(&REMOTE, &LOCAL, &h, payload);
        let seg = wire::parse(REMOTE, LOCAL, &bytes).expect("our own segment parses");
        self.c.on_segment(&seg, self.now, &mut self.app);
        self.collect();
    }

    fn collect(&mut self) {
        while let Some(e) = self.c.pop_event() {
            self.events.push(e);
        }
    }

    fn take_events(&mut self) -> Vec<Event> {
        self.collect();
        std::mem::take(&mut self.events)
    }

    /// Everything the connection sends now.
    fn recv(&mut self) -> Vec<(Header, Vec<u8>)> {
        let queued = self.c.queued() as usize;
        let mut src = Source(&self.data[..queued]);
        let mut v = Vec::new();
        while let Some(o) = self.c.poll_transmit(self.now, &mut src) {
            assert_eq!((o.src, o.dst), (LOCAL, REMOTE));
            oracle(o.src, o.dst, &o.segment);
            let s = wire::parse(o.src, o.dst, &o.segment).expect("parses");
            v.push((s.header, s.payload.to_vec()));
        }
        self.collect();
        v
    }

    fn recv1(&mut self) -> (Header, Vec<u8>) {
        let mut v = self.recv();
        assert_eq!(v.len(), 1, "exactly one segment: {v:#?}");
        v.pop().expect("one")
    }

    fn recv_none(&mut self) {
        let v = self.recv();
        assert!(v.is_empty(), "no segment expected: {v:#?}");
    }

    /// Moves the clock by `d` and runs the timers.
    fn wait(&mut self, d: Duration) {
        self.now += d;
        self.c.poll(self.now);
        self.collect();
    }

    /// Moves the clock to the next deadline.
    fn wait_deadline(&mut self) -> Duration {
        let d = self.c.next_deadline().expect("a timer");
        let waited = d - self.now;
        self.now = d;
        self.c.poll(self.now);
        self.collect();
        waited
    }

    fn queue(&mut self, n: u64) {
        self.c.queue_send(n).expect("queue");
    }

    fn bytes(&self, from: u64, len: usize) -> Vec<u8> {
        self.data[from as usize..from as usize + len].to_vec()
    }
}

// ---- opening --------------------------------------------------------------------------------

#[test]
fn syn_carries_all_options() {
    let c = Config {
        window_scale: Some(7),
        timestamps: true,
        ..cfg()
    };
    let mut t = T::connect(&c);
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
    let c = Config {
        window_scale: Some(7),
        timestamps: true,
        ..cfg()
    };
    let mut t = T::connect(&c);
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
    let c = Config {
        window_scale: Some(7),
        timestamps: true,
        ..cfg()
    };
    let mut t = T::connect(&c);
    t.recv1();
    t.send(hdr(SYN | ACK, IRS, ISS + 1, 30_000), &[]);
    assert_eq!(t.c.negotiated(), (false, false, false));
    // No MSS option: IPv6's default 1220, capped by ours.
    assert_eq!(t.c.smss(), 1000);
    let (a, _) = t.recv1();
    // Unscaled window, capped at 65535.
    assert_eq!(a, out(ACK, ISS + 1, IRS + 1, (ROOM + STAGING) as u16));
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
    assert_eq!(t.c.state(), State::Closed);
    assert_eq!(t.take_events(), vec![Event::Reset]);
    t.recv_none();
}

#[test]
fn syn_retransmits_with_backoff_then_times_out() {
    let c = Config {
        syn_retries: 3,
        ..cfg()
    };
    let mut t = T::connect(&c);
    t.recv1();
    for (i, gap) in [1000u64, 2000, 4000].iter().enumerate() {
        assert_eq!(t.wait_deadline(), ms(*gap), "retransmission {i}");
        let (h, _) = t.recv1();
        assert!(h.syn() && !h.ack_flag() && h.seq == ISS);
    }
    assert_eq!(t.wait_deadline(), ms(8000));
    assert_eq!(t.c.state(), State::Closed);
    assert_eq!(t.take_events(), vec![Event::TimedOut]);
    t.recv_none();
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
    let mut want = out(SYN | ACK, ISS, IRS + 1, (ROOM + STAGING) as u16);
    want.options.mss = Some(MSS);
    assert_eq!(sa, want);
    // Their SYN-ACK (to our SYN): its SYN is old news, answered with an ACK.
    let mut h = hdr(SYN | ACK, IRS, ISS + 1, 30_000);
    h.options.mss = Some(MSS);
    t.send(h, &[]);
    assert_eq!(
        t.recv1().0,
        out(ACK, ISS + 1, IRS + 1, (ROOM + STAGING) as u16)
    );
    assert_eq!(t.c.state(), State::SynReceived);
    // Their ACK of our SYN-ACK.
    t.send(hdr(ACK, IRS + 1, ISS + 1, 30_000), &[]);
    assert_eq!(t.c.state(), State::Established);
    assert_eq!(t.take_events(), vec![Event::Established]);
}

/// A passive open through a listener, checked segment by segment.
fn accept(cfg: &Config, syn_opts: Options) -> T {
    let t0 = Instant::now();
    let isn = IsnGenerator::new([9; 16], t0);
    let mut l = Listener::new(LOCAL, LPORT, *cfg, 4, false, t0);
    let mut h = hdr(SYN, IRS, 0, 30_000);
    h.options = syn_opts;
    let bytes = wire::build(&REMOTE, &LOCAL, &h, &[]);
    let seg = wire::parse(REMOTE, LOCAL, &bytes).unwrap();
    let ListenOutcome::HalfOpen(c) = l.on_segment(&seg, t0, &isn, 0) else {
        panic!("a half-open connection");
    };
    assert_eq!(l.half_open(), 1);
    assert_eq!(c.state(), State::SynReceived);
    assert_eq!(c.iss(), isn.isn(&tuple(LOCAL, LPORT, REMOTE, RPORT), t0));
    T {
        c,
        t0,
        now: t0,
        app: App::new(ROOM, false),
        data: crate::common::pattern(7, 200_000),
        events: Vec::new(),
    }
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
    want.window = (ROOM + STAGING) as u16;
    assert_eq!(t.recv1().0, want);
    // An ACK of something else: reset, still SYN-RECEIVED.
    t.send(hdr(ACK, IRS + 1, iss + 50, 30_000), &[]);
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
    let t0 = Instant::now();
    let isn = IsnGenerator::new([9; 16], t0);
    let mut l = Listener::new(LOCAL, LPORT, cfg(), 2, false, t0);
    let feed = |l: &mut Listener, h: Header| {
        let bytes = wire::build(&REMOTE, &LOCAL, &h, &[]);
        let seg = wire::parse(REMOTE, LOCAL, &bytes).unwrap();
        l.on_segment(&seg, t0, &isn, 0)
    };
    let ListenOutcome::Reply(r) = feed(&mut l, hdr(ACK, 1, 4242, 100)) else {
        panic!("reset expected")
    };
    let s = wire::parse(r.src, r.dst, &r.segment).unwrap();
    assert_eq!(s.header, out(RST, 4242, 0, 0));
    assert!(matches!(
        feed(&mut l, hdr(RST, 1, 0, 0)),
        ListenOutcome::Ignore
    ));
    for port in [1, 2] {
        let mut h = hdr(SYN, IRS, 0, 100);
        h.src_port = port;
        assert!(matches!(feed(&mut l, h), ListenOutcome::HalfOpen(_)));
    }
    // The backlog is full and cookies are off: dropped.
    let mut h = hdr(SYN, IRS, 0, 100);
    h.src_port = 3;
    assert!(matches!(feed(&mut l, h), ListenOutcome::Ignore));
    assert_eq!(l.stats().backlog_drops, 1);
    l.half_open_done();
    assert!(matches!(feed(&mut l, h), ListenOutcome::HalfOpen(_)));
}

#[test]
fn syn_cookies_when_the_backlog_is_full() {
    let t0 = Instant::now();
    let isn = IsnGenerator::new([9; 16], t0);
    let c = Config {
        window_scale: Some(7),
        timestamps: true,
        ..cfg()
    };
    let mut l = Listener::new(LOCAL, LPORT, c, 0, true, t0);
    let mut h = hdr(SYN, IRS, 0, 30_000);
    h.options = Options {
        mss: Some(1460),
        window_scale: Some(3),
        sack_permitted: true,
        timestamps: Some((100, 0)),
        sack: SackBlocks::new(),
    };
    let bytes = wire::build(&REMOTE, &LOCAL, &h, &[]);
    let seg = wire::parse(REMOTE, LOCAL, &bytes).unwrap();
    let ListenOutcome::Reply(r) = l.on_segment(&seg, t0, &isn, 0) else {
        panic!("a cookie SYN-ACK");
    };
    oracle(r.src, r.dst, &r.segment);
    let sa = wire::parse(r.src, r.dst, &r.segment).unwrap().header;
    assert_eq!(sa.flags, SYN | ACK);
    assert_eq!(sa.ack, IRS + 1);
    assert_eq!(sa.options.window_scale, Some(7));
    assert!(sa.options.sack_permitted);
    let (tsval, tsecr) = sa.options.timestamps.unwrap();
    assert_eq!(tsecr, 100);
    assert_eq!(l.half_open(), 0, "no state kept");
    // The ACK brings the cookie back.
    let later = t0 + ms(20);
    let mut a = hdr(ACK, IRS + 1, sa.seq.wrapping_add(1), 1000);
    a.options.timestamps = Some((101, tsval));
    let bytes = wire::build(&REMOTE, &LOCAL, &a, b"x");
    let seg = wire::parse(REMOTE, LOCAL, &bytes).unwrap();
    let ListenOutcome::FromCookie(mut conn) = l.on_segment(&seg, later, &isn, 0) else {
        panic!("a connection from the cookie");
    };
    let mut app = App::new(ROOM, false);
    conn.on_segment(&seg, later, &mut app);
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
    let bytes = wire::build(&REMOTE, &LOCAL, &bad, &[]);
    let seg = wire::parse(REMOTE, LOCAL, &bytes).unwrap();
    assert!(matches!(
        l.on_segment(&seg, later, &isn, 0),
        ListenOutcome::Reply(_)
    ));
    assert_eq!(l.stats().cookies_rejected, 1);
    // Too old: rejected.
    let bytes = wire::build(&REMOTE, &LOCAL, &a, &[]);
    let seg = wire::parse(REMOTE, LOCAL, &bytes).unwrap();
    assert!(matches!(
        l.on_segment(&seg, t0 + Duration::from_secs(200), &isn, 0),
        ListenOutcome::Reply(_)
    ));
}

// ---- receiving ------------------------------------------------------------------------------

#[test]
fn delayed_ack_then_every_second_segment() {
    let mut t = T::established(&cfg());
    t.send(hdr(ACK, IRS + 1, ISS + 1, 30_000), &[7; 500]);
    t.recv_none();
    assert_eq!(t.c.next_deadline(), Some(t.now + ms(40)));
    t.wait(ms(40));
    let w = (ROOM + STAGING - 500) as u16;
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
    let w = (ROOM + STAGING - 100) as u16;
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
    let w = (ROOM + STAGING) as u16;
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
    let mut seq = IRS + 1;
    for _ in 0..10 {
        t.send(hdr(ACK, seq, ISS + 1, 30_000), &[5; 1000]);
        seq += 1000;
    }
    let last = t.recv().last().unwrap().0;
    assert_eq!(last.ack, IRS + 1 + 10_000);
    // The edge stays at IRS + 1 + 30000: the window field is what is left of it.
    assert_eq!(last.window, 20_000);
    assert!(t.app.data.is_empty());
    for _ in 0..20 {
        t.send(hdr(ACK, seq, ISS + 1, 30_000), &[5; 1000]);
        seq += 1000;
    }
    let last = t.recv().last().unwrap().0;
    assert_eq!((last.ack, last.window), (IRS + 1 + 30_000, 0), "all taken");
    assert_eq!(t.c.stats().dropped_bytes, 0);
    // Beyond the promise (the window is zero): not acceptable, not acknowledged.
    t.send(hdr(ACK, seq, ISS + 1, 30_000), &[6; 1000]);
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
    let c = Config {
        staging: 2000,
        ..cfg()
    };
    let mut t = T::established(&c);
    // The window offered after the handshake: 20000 + 2000, then the posted space is
    // given up: staging takes what was promised, up to four times its allowance.
    t.app.room = 0;
    let mut seq = IRS + 1;
    for _ in 0..8 {
        t.send(hdr(ACK, seq, ISS + 1, 30_000), &[5; 1000]);
        seq += 1000;
    }
    let a = t.recv();
    assert_eq!(a.last().unwrap().0, out(ACK, ISS + 1, IRS + 8001, 14_000));
    // Beyond four times the allowance what was promised cannot be kept: dropped.
    t.send(hdr(ACK, seq, ISS + 1, 30_000), &[5; 1000]);
    assert_eq!(t.recv1().0, out(ACK, ISS + 1, IRS + 8001, 14_000));
    assert_eq!(t.c.stats().dropped_bytes, 1000);
    t.app.room = 50_000;
    t.c.recv_space_changed(t.now, &mut t.app);
    // The peer still has 14000 bytes of window: the update waits for a segment to ride
    // on, or the quick ACK's timer.
    t.recv_none();
    t.wait(tcp::connection::QUICK_ACK);
    let a = t.recv1().0;
    // Staging drained: 50000 - 8000 in the sink + 2000 staging.
    assert_eq!(a, out(ACK, ISS + 1, IRS + 8001, 44_000));
}

// ---- sending --------------------------------------------------------------------------------

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
    t.send(hdr(ACK, IRS + 1, ISS + 2001, 30_000), &[]);
    assert_eq!(t.take_events(), vec![Event::Acked { upto: 2000 }]);
    // Slow start: cwnd 4000 + 2000 (ABC, L = 2): 6000, 2000 in flight; 1500 remain.
    let segs = t.recv();
    assert_eq!(segs.len(), 2);
    assert_eq!(segs[0].0, out(ACK, ISS + 4001, IRS + 1, 30_000));
    assert_eq!(segs[1].0, out(ACK | PSH, ISS + 5001, IRS + 1, 30_000));
    assert_eq!(segs[1].1.len(), 500);
    t.send(hdr(ACK, IRS + 1, ISS + 5501, 30_000), &[]);
    assert_eq!(t.take_events(), vec![Event::Acked { upto: 5500 }]);
    assert_eq!(t.c.next_deadline(), None, "nothing outstanding, no timer");
}

#[test]
fn peer_window_limits_sending() {
    let mut t = T::established(&cfg());
    let w = (ROOM + STAGING) as u16;
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
    assert_eq!(segs[0].0, out(ACK, ISS + 1001, IRS + 1, w));
    assert_eq!(segs[1].0, out(ACK | PSH, ISS + 2001, IRS + 1, w));
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
    t.send(hdr(ACK, IRS + 1, ISS + 1001, 30_000), &[]);
    assert_eq!(t.c.srtt(), Some(ms(0)));
    assert_eq!(t.c.rto(), ms(1600));
    t.queue(1000);
    t.recv1();
    t.now += ms(400);
    t.send(hdr(ACK, IRS + 1, ISS + 2001, 30_000), &[]);
    // srtt 0 * 7/8 + 400/8 = 50; rttvar 0 * 3/4 + 400/4 = 100: RTO 450, backoff gone.
    assert_eq!(t.c.srtt(), Some(ms(50)));
    assert_eq!(t.c.rto(), ms(450));
}

#[test]
fn retries_exhausted_time_out() {
    let c = Config {
        max_retries: 2,
        ..cfg()
    };
    let mut t = T::established(&c);
    t.queue(10);
    t.recv1();
    t.wait_deadline();
    t.recv1();
    t.wait_deadline();
    t.recv1();
    t.wait_deadline();
    assert_eq!(t.c.state(), State::Closed);
    assert_eq!(t.take_events(), vec![Event::TimedOut]);
    t.recv_none();
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
    t.send(hdr(ACK, IRS + 1, ISS + 1001, 30_000), &[]);
    t.take_events();
    t.recv_none();
    // Two duplicates: limited transmit has nothing new to send.
    t.send(hdr(ACK, IRS + 1, ISS + 1001, 30_000), &[]);
    t.send(hdr(ACK, IRS + 1, ISS + 1001, 30_000), &[]);
    t.recv_none();
    // The third: fast retransmit of segment 1.
    t.send(hdr(ACK, IRS + 1, ISS + 1001, 30_000), &[]);
    let (h, p) = t.recv1();
    assert_eq!(h, out(ACK, ISS + 1001, IRS + 1, 30_000));
    assert_eq!(p, t.bytes(1000, 1000));
    // ssthresh = flight (9000) / 2, cwnd = ssthresh + 3 MSS.
    assert_eq!(t.c.ssthresh(), 4500);
    assert_eq!(t.c.cwnd(), 7500);
    // Partial ACK up to the second loss: retransmit segment 4 at once.
    t.send(hdr(ACK, IRS + 1, ISS + 4001, 30_000), &[]);
    let (h, _) = t.recv1();
    assert_eq!(h.seq, ISS + 4001);
    // Full ACK: recovery over, cwnd deflated to ssthresh.
    t.send(hdr(ACK, IRS + 1, ISS + 10_001, 30_000), &[]);
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
    t.send(hdr(ACK, IRS + 1, ISS + 2001, 30_000), &[]);
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
    t.send(hdr(ACK, IRS + 1, ISS + 10_001, 30_000), &[]);
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
    t.send(hdr(ACK, IRS + 1, ISS + 2, 30_000), &[]);
    assert_eq!(t.take_events(), vec![Event::Acked { upto: 1 }]);
    let segs = t.recv();
    assert_eq!(segs.iter().map(|s| s.1.len()).sum::<usize>(), 2999);
    assert_eq!(segs[0].0.seq, ISS + 2);
}

// ---- resets, challenge ACKs, PAWS --------------------------------------------------------

#[test]
fn rst_exact_resets_in_window_challenges_outside_ignored() {
    let mut t = T::established(&cfg());
    let w = (ROOM + STAGING) as u16;
    t.send(hdr(RST, IRS + 100, 0, 0), &[]);
    assert_eq!(t.recv1().0, out(ACK, ISS + 1, IRS + 1, w), "challenge ACK");
    assert_eq!(t.c.state(), State::Established);
    t.send(hdr(RST, IRS + 1_000_000, 0, 0), &[]);
    t.recv_none();
    t.send(hdr(RST, IRS + 1, 0, 0), &[]);
    assert_eq!(t.c.state(), State::Closed);
    assert_eq!(t.take_events(), vec![Event::Reset]);
    t.recv_none();
}

#[test]
fn syn_in_established_gets_a_rate_limited_challenge_ack() {
    let c = Config {
        challenge_ack_limit: 2,
        ..cfg()
    };
    let mut t = T::established(&c);
    let w = (ROOM + STAGING) as u16;
    for _ in 0..2 {
        t.send(hdr(SYN, IRS + 1, 0, 1000), &[]);
        assert_eq!(t.recv1().0, out(ACK, ISS + 1, IRS + 1, w));
    }
    t.send(hdr(SYN, IRS + 1, 0, 1000), &[]);
    t.recv_none();
    assert_eq!(t.c.stats().challenge_acks, 2);
    t.now += Duration::from_secs(1);
    t.send(hdr(SYN, IRS + 1, 0, 1000), &[]);
    assert_eq!(t.recv1().0, out(ACK, ISS + 1, IRS + 1, w));
    assert_eq!(t.c.state(), State::Established);
}

#[test]
fn ack_of_unsent_data_is_answered_and_dropped() {
    let mut t = T::established(&cfg());
    t.send(hdr(ACK, IRS + 1, ISS + 500, 30_000), b"data");
    assert_eq!(
        t.recv1().0,
        out(ACK, ISS + 1, IRS + 1, (ROOM + STAGING) as u16)
    );
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
    let c = Config {
        timestamps: true,
        ..cfg()
    };
    let mut t = T::connect(&c);
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

// ---- closing ------------------------------------------------------------------------------

#[test]
fn active_close_through_time_wait() {
    let mut t = T::established(&cfg());
    let w = (ROOM + STAGING) as u16;
    t.c.close();
    assert_eq!(t.c.state(), State::FinWait1);
    assert_eq!(t.recv1().0, out(ACK | FIN, ISS + 1, IRS + 1, w));
    assert!(t.c.queue_send(1).is_err());
    t.send(hdr(ACK, IRS + 1, ISS + 2, 30_000), &[]);
    assert_eq!(t.c.state(), State::FinWait2);
    // Data may still arrive in FIN-WAIT-2, then the FIN.
    t.send(hdr(ACK | FIN, IRS + 1, ISS + 2, 30_000), b"bye");
    assert_eq!(t.c.state(), State::TimeWait);
    // The right edge stays where it was (the FIN took one sequence number).
    assert_eq!(t.recv1().0, out(ACK, ISS + 2, IRS + 5, w - 4));
    assert_eq!(
        t.take_events(),
        vec![
            Event::DataArrived {
                upto: 3,
                push: None
            },
            Event::PeerClosed
        ]
    );
    // The FIN again (our ACK lost): ACK again, 2 MSL restarted.
    t.now += ms(600);
    t.send(hdr(ACK | FIN, IRS + 1, ISS + 2, 30_000), b"bye");
    assert_eq!(t.recv1().0, out(ACK, ISS + 2, IRS + 5, w - 4));
    assert_eq!(t.wait_deadline(), ms(1000));
    assert_eq!(t.c.state(), State::Closed);
    assert_eq!(t.take_events(), vec![Event::Closed]);
}

#[test]
fn passive_close() {
    let mut t = T::established(&cfg());
    let w = (ROOM + STAGING) as u16;
    t.send(hdr(ACK | FIN, IRS + 1, ISS + 1, 30_000), &[]);
    assert_eq!(t.c.state(), State::CloseWait);
    assert_eq!(t.take_events(), vec![Event::PeerClosed]);
    assert_eq!(t.recv1().0, out(ACK, ISS + 1, IRS + 2, w - 1));
    // We may still send, then close.
    t.queue(10);
    assert_eq!(t.recv1().0, out(ACK | PSH, ISS + 1, IRS + 2, w - 1));
    t.c.close();
    assert_eq!(t.c.state(), State::LastAck);
    assert_eq!(t.recv1().0, out(ACK | FIN, ISS + 11, IRS + 2, w - 1));
    t.send(hdr(ACK, IRS + 2, ISS + 12, 30_000), &[]);
    assert_eq!(t.c.state(), State::Closed);
    assert_eq!(
        t.take_events(),
        vec![Event::Acked { upto: 10 }, Event::Closed]
    );
}

#[test]
fn simultaneous_close() {
    let mut t = T::established(&cfg());
    let w = (ROOM + STAGING) as u16;
    t.c.close();
    assert_eq!(t.recv1().0, out(ACK | FIN, ISS + 1, IRS + 1, w));
    // Their FIN crosses ours (it does not acknowledge our FIN).
    t.send(hdr(ACK | FIN, IRS + 1, ISS + 1, 30_000), &[]);
    assert_eq!(t.c.state(), State::Closing);
    assert_eq!(t.recv1().0, out(ACK, ISS + 2, IRS + 2, w - 1));
    t.send(hdr(ACK, IRS + 2, ISS + 2, 30_000), &[]);
    assert_eq!(t.c.state(), State::TimeWait);
    t.wait_deadline();
    assert_eq!(t.c.state(), State::Closed);
}

#[test]
fn fin_wait_1_to_time_wait_when_the_fin_acks_ours() {
    let mut t = T::established(&cfg());
    t.c.close();
    t.recv1();
    t.send(hdr(ACK | FIN, IRS + 1, ISS + 2, 30_000), &[]);
    assert_eq!(t.c.state(), State::TimeWait);
    assert_eq!(
        t.recv1().0,
        out(ACK, ISS + 2, IRS + 2, (ROOM + STAGING - 1) as u16)
    );
}

#[test]
fn fin_retransmitted_on_timeout_and_out_of_order_fin_waits() {
    let mut t = T::established(&cfg());
    // A FIN beyond a hole: held until the hole fills.
    t.send(hdr(ACK | FIN, IRS + 11, ISS + 1, 30_000), b"world");
    assert_eq!(t.c.state(), State::Established);
    t.recv1();
    t.send(hdr(ACK, IRS + 1, ISS + 1, 30_000), b"hello, the");
    assert_eq!(t.c.state(), State::CloseWait);
    assert_eq!(t.app.data, b"hello, theworld");
    t.recv1();
    t.c.close();
    let fin = t.recv1().0;
    assert!(fin.fin());
    t.wait_deadline();
    assert_eq!(t.recv1().0, fin, "the FIN again after the RTO");
}

#[test]
fn abort_sends_reset() {
    let mut t = T::established(&cfg());
    t.queue(100);
    t.recv1();
    t.c.abort();
    assert_eq!(t.recv1().0, out(RST, ISS + 101, 0, 0));
    assert_eq!(t.take_events(), vec![Event::Closed]);
    assert!(t.c.is_closed());
    assert_eq!(t.c.next_deadline(), None);
}

#[test]
fn keepalive_probes_then_gives_up() {
    let c = Config {
        keepalive: Some(tcp::Keepalive {
            idle: Duration::from_secs(10),
            interval: Duration::from_secs(1),
            probes: 2,
        }),
        ..cfg()
    };
    let mut t = T::established(&c);
    let w = (ROOM + STAGING) as u16;
    assert_eq!(t.wait_deadline(), Duration::from_secs(10));
    assert_eq!(t.recv1().0, out(ACK, ISS, IRS + 1, w));
    // An answer restarts the idle time.
    t.send(hdr(ACK, IRS + 1, ISS + 1, 30_000), &[]);
    assert_eq!(t.wait_deadline(), Duration::from_secs(10));
    t.recv1();
    assert_eq!(t.wait_deadline(), Duration::from_secs(1));
    t.recv1();
    assert_eq!(t.wait_deadline(), Duration::from_secs(1));
    assert_eq!(t.c.state(), State::Closed);
    assert_eq!(t.take_events(), vec![Event::TimedOut]);
}

// ---- the table --------------------------------------------------------------------------------

#[test]
fn table_demultiplexes_listens_and_runs_timers_from_a_heap() {
    let t0 = Instant::now();
    let mut table: ConnectionTable<u32> = ConnectionTable::new(IsnGenerator::new([1; 16], t0));
    table
        .listen(Ipv6Addr::UNSPECIFIED, 80, cfg(), 8, true, t0)
        .unwrap();
    assert!(table
        .listen(Ipv6Addr::UNSPECIFIED, 80, cfg(), 8, true, t0)
        .is_err());
    let id = table
        .connect(tuple(LOCAL, 2000, REMOTE, 443), t0, &cfg(), 7)
        .unwrap();
    assert!(table
        .connect(tuple(LOCAL, 2000, REMOTE, 443), t0, &cfg(), 8)
        .is_err());
    // Nothing can be sent to port 0 or from it, nor to a group (found by the frames
    // fuzz target: the SYN to port 0 was a segment no parser takes).
    for t in [
        tuple(LOCAL, 2001, REMOTE, 0),
        tuple(LOCAL, 0, REMOTE, 443),
        tuple(LOCAL, 2001, "ff02::1".parse().unwrap(), 443),
        tuple(LOCAL, 2001, Ipv6Addr::UNSPECIFIED, 443),
    ] {
        assert_eq!(
            table.connect(t, t0, &cfg(), 9).err(),
            Some(tcp::TableError::BadAddress)
        );
    }
    // A segment for no connection and no listener: reset.
    let h = Header {
        src_port: 5555,
        dst_port: 81,
        seq: 77,
        flags: SYN,
        window: 100,
        ..Header::default()
    };
    let bytes = wire::build(&REMOTE, &LOCAL, &h, &[]);
    let seg = wire::parse(REMOTE, LOCAL, &bytes).unwrap();
    let Input::Reply(r) = table.input(&seg, t0, 0) else {
        panic!("reset")
    };
    let rst = wire::parse(r.src, r.dst, &r.segment).unwrap().header;
    assert_eq!((rst.flags, rst.seq, rst.ack), (RST | ACK, 0, 78));
    // A SYN to the listener: a half-open connection, SYN-ACK due.
    let mut h = h;
    h.dst_port = 80;
    let bytes = wire::build(&REMOTE, &LOCAL, &h, &[]);
    let seg = wire::parse(REMOTE, LOCAL, &bytes).unwrap();
    let Input::HalfOpen(half) = table.input(&seg, t0, 0) else {
        panic!("half-open")
    };
    assert_eq!(
        table
            .listener(Ipv6Addr::UNSPECIFIED, 80)
            .unwrap()
            .half_open(),
        1
    );
    assert!(matches!(table.input(&seg, t0, 0), Input::Connection(x) if x == half));
    assert_eq!(table.len(), 2);
    assert_eq!(table.get(id).unwrap().tag, Some(7));
    assert_eq!(table.get(half).unwrap().tag, None);
    // Both owe a SYN: send them; their timers go into the heap.
    for i in [id, half] {
        let e = table.get_mut(i).unwrap();
        assert_eq!(e.conn.transmit_all(t0, &mut tcp::NoData).len(), 1);
        table.update(i);
    }
    assert_eq!(table.next_deadline(), Some(t0 + Duration::from_secs(1)));
    assert_eq!(table.pop_expired(t0 + ms(999)), None);
    let due = t0 + Duration::from_secs(1);
    let mut expired = vec![];
    while let Some(i) = table.pop_expired(due) {
        table.get_mut(i).unwrap().conn.poll(due);
        table.update(i);
        expired.push(i);
    }
    expired.sort_by_key(|i| table.get(*i).unwrap().tag);
    assert_eq!(expired.len(), 2);
    // Removing the half-open connection frees its backlog slot; its handle is dead.
    table.remove(half).unwrap();
    assert_eq!(
        table
            .listener(Ipv6Addr::UNSPECIFIED, 80)
            .unwrap()
            .half_open(),
        0
    );
    assert!(table.get(half).is_none());
    assert_eq!(table.lookup(&tuple(LOCAL, 2000, REMOTE, 443)), Some(id));
}

#[test]
fn the_tables_next_deadline_is_exact_when_timers_are_cancelled() {
    // An engine sleeps until the table's next deadline: an entry left in the heap by a
    // connection that went away or whose timer was cancelled must not wake it.
    let t0 = Instant::now();
    let mut table: ConnectionTable<u32> = ConnectionTable::new(IsnGenerator::new([1; 16], t0));
    let a = table
        .connect(tuple(LOCAL, 2000, REMOTE, 443), t0, &cfg(), 1)
        .unwrap();
    let b = table
        .connect(tuple(LOCAL, 2001, REMOTE, 443), t0 + ms(10), &cfg(), 2)
        .unwrap();
    for (i, t) in [(a, t0), (b, t0 + ms(10))] {
        let e = table.get_mut(i).unwrap();
        assert_eq!(e.conn.transmit_all(t, &mut tcp::NoData).len(), 1);
        table.update(i);
    }
    assert_eq!(table.next_deadline(), Some(t0 + Duration::from_secs(1)));
    // a goes away: b's retransmission is next.
    table.remove(a).unwrap();
    assert_eq!(
        table.next_deadline(),
        Some(t0 + ms(10) + Duration::from_secs(1))
    );
    // b aborts: its timers are cancelled, nothing is due.
    table.get_mut(b).unwrap().conn.abort();
    let _ = table
        .get_mut(b)
        .unwrap()
        .conn
        .transmit_all(t0, &mut tcp::NoData);
    table.update(b);
    assert_eq!(table.next_deadline(), None);
    assert_eq!(table.pop_expired(t0 + Duration::from_secs(5)), None);
}

#[test]
fn reset_for_segments_without_a_connection() {
    // RFC 9293 §3.10.7.1: with ACK, <SEQ=SEG.ACK><CTL=RST>; without, <SEQ=0>
    // <ACK=SEG.SEQ+SEG.LEN><CTL=RST,ACK>; never for a reset.
    let h = hdr(ACK | FIN, 10, 20, 0);
    let bytes = wire::build(&REMOTE, &LOCAL, &h, b"abc");
    let seg = wire::parse(REMOTE, LOCAL, &bytes).unwrap();
    let (s, d, r) = wire::reset_for(&seg).unwrap();
    oracle(s, d, &r);
    assert_eq!(wire::parse(s, d, &r).unwrap().header, out(RST, 20, 0, 0));
    let h = hdr(FIN, 10, 0, 0);
    let bytes = wire::build(&REMOTE, &LOCAL, &h, b"abc");
    let seg = wire::parse(REMOTE, LOCAL, &bytes).unwrap();
    let (s, d, r) = wire::reset_for(&seg).unwrap();
    assert_eq!(
        wire::parse(s, d, &r).unwrap().header,
        out(RST | ACK, 0, 14, 0)
    );
    let h = hdr(RST, 10, 0, 0);
    let bytes = wire::build(&REMOTE, &LOCAL, &h, &[]);
    assert!(wire::reset_for(&wire::parse(REMOTE, LOCAL, &bytes).unwrap()).is_none());
}

#[test]
fn close_in_syn_received_sends_fin_once_established() {
    let mut t = accept(&cfg(), Options::default());
    let iss = t.c.iss();
    t.recv1();
    t.c.close();
    assert_eq!(t.c.state(), State::SynReceived);
    t.recv_none();
    t.send(hdr(ACK, IRS + 1, iss + 1, 30_000), &[]);
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
    assert_eq!(t.c.state(), State::Closed);
    assert_eq!(t.take_events(), vec![Event::Reset]);
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
    assert_eq!(t.c.state(), State::Closed);
    assert_eq!(t.take_events(), vec![Event::TimedOut]);
}

#[test]
fn last_ack_retransmits_fin_and_close_wait_ignores_more_data() {
    let mut t = T::established(&cfg());
    let w = (ROOM + STAGING - 1) as u16;
    t.send(hdr(ACK | FIN, IRS + 1, ISS + 1, 30_000), &[]);
    t.recv1();
    // Data after the FIN cannot exist: ACKed, not taken.
    t.send(hdr(ACK, IRS + 2, ISS + 1, 30_000), b"ghost");
    assert_eq!(t.recv1().0, out(ACK, ISS + 1, IRS + 2, w));
    assert!(t.app.data.is_empty());
    t.c.close();
    let fin = t.recv1().0;
    assert_eq!(fin, out(ACK | FIN, ISS + 1, IRS + 2, w));
    assert_eq!(t.wait_deadline(), ms(200));
    assert_eq!(t.recv1().0, fin);
    t.send(hdr(ACK, IRS + 2, ISS + 2, 30_000), &[]);
    assert_eq!(t.c.state(), State::Closed);
    assert_eq!(t.take_events(), vec![Event::PeerClosed, Event::Closed]);
}

#[test]
fn window_probe_from_the_peer_into_our_zero_window() {
    let c = Config {
        staging: 1000,
        ..cfg()
    };
    let mut t = T::established(&c);
    // 21000 promised: 20000 fill the sink, 1000 the staging. The window is zero.
    let mut seq = IRS + 1;
    for _ in 0..21 {
        t.send(hdr(ACK, seq, ISS + 1, 30_000), &[1; 1000]);
        seq += 1000;
    }
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
