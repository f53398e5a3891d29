//! The device's TCP counters (`ConnectionTable::stats`, QUERY_STATS' `STAT_TCP_*`), checked
//! segment by segment: each test plays the remote end against a table driven as the engine
//! drives it and compares the whole counter set after each step, so a counter that moves
//! when it should not fails as surely as one that does not move.

use std::net::Ipv6Addr;

use crate::harness::*;
use qpip_device::net::tcp::listener::Listener;
use qpip_device::net::tcp::wire::flags::*;
use qpip_device::net::tcp::wire::{Header, Options};
use qpip_device::net::tcp::{Config, ConnId, Event, State, TcpStats};

/// A table driven as the engine drives it, and the counters it should show. Each segment
/// the remote end sends counts once in `segs_in`, each one the device sends once in
/// `segs_out` (what it sent is what the steps return, so their shapes pin these); a test
/// says what else moves at each step.
struct Counted {
    d: Dev,
    want: TcpStats,
}

impl Counted {
    fn new() -> Counted {
        Counted {
            d: Dev::new(),
            want: TcpStats::default(),
        }
    }

    /// The remote end sends a segment: what the device answers.
    fn send(&mut self, h: Header, payload: &[u8]) -> Segments {
        self.want.segs_in += 1;
        let out = self.d.send(h, payload);
        self.sent(out)
    }

    fn connect(&mut self, c: &Config) -> (ConnId, Segments) {
        let (id, out) = self.d.connect(c);
        (id, self.sent(out))
    }

    fn queue(&mut self, id: ConnId, n: u64) -> Segments {
        let out = self.d.queue(id, n);
        self.sent(out)
    }

    fn wait_deadline(&mut self) -> Segments {
        let out = self.d.wait_deadline();
        self.sent(out)
    }

    /// The connection's owner aborts it (destroys its QP).
    fn abort(&mut self, id: ConnId) -> Segments {
        let out = self.d.by_app(id, |c| c.abort());
        self.sent(out)
    }

    fn sent(&mut self, out: Segments) -> Segments {
        self.want.segs_out += out.len() as u64;
        out
    }

    /// After a step: `more` moved too, and the whole counter set is what it should be.
    #[track_caller]
    fn check(&mut self, more: impl FnOnce(&mut TcpStats)) {
        more(&mut self.want);
        assert_eq!(*self.d.table.stats(), self.want);
    }
}

/// A SYN from the remote end's port `rport`, with MSS and SACK-permitted.
fn syn(rport: u16) -> Header {
    let mut h = hdr(LPORT, SYN, IRS, 0, 30_000);
    h.src_port = rport;
    h.options = Options {
        mss: Some(MSS),
        sack_permitted: true,
        ..Options::default()
    };
    h
}

#[test]
fn passive_open_out_of_order_duplicates_challenge_and_reset_by_the_peer() {
    let mut c = Counted::new();
    c.d.listen(&cfg(), 4, true);
    let out = c.send(syn(RPORT), &[]);
    let id = c.d.accepted(RPORT);
    let iss = c.d.iss(id);
    assert_eq!(shape(&out), vec![(SYN | ACK, iss, IRS + 1, 0)]);
    c.check(|w| w.passive_opens += 1);

    // The handshake completes: nothing to send.
    let seg = |seq: u32| hdr(LPORT, ACK, seq, iss + 1, 30_000);
    assert!(c.send(seg(IRS + 1), &[]).is_empty());
    assert_eq!(c.d.take_events(), vec![Event::Established]);
    c.check(|_| {});

    // The second segment before the first: out of order, SACKed at once.
    let out = c.send(seg(IRS + 1001), &[1; 1000]);
    assert_eq!(shape(&out), vec![(ACK, iss + 1, IRS + 1, 0)]);
    assert_eq!(
        out[0].0.options.sack.as_slice(),
        &[(IRS + 1001, IRS + 2001)]
    );
    c.check(|w| w.ooo_segs += 1);

    // The first fills the hole; the first again: all of it was received before.
    for dup in [0, 1] {
        let out = c.send(seg(IRS + 1), &[2; 1000]);
        assert_eq!(shape(&out), vec![(ACK, iss + 1, IRS + 2001, 0)]);
        c.check(|w| w.dup_segs += dup);
    }

    // Half old, half new: no duplicate.
    let out = c.send(seg(IRS + 1501), &[3; 1000]);
    assert_eq!(shape(&out), vec![(ACK, iss + 1, IRS + 2501, 0)]);
    c.check(|_| {});

    // A SYN in the window: a challenge ACK (RFC 5961 §4).
    let out = c.send(hdr(LPORT, SYN, IRS + 2501, 0, 30_000), &[]);
    assert_eq!(shape(&out), vec![(ACK, iss + 1, IRS + 2501, 0)]);
    c.check(|w| w.challenge_acks += 1);

    // A reset at RCV.NXT: an established connection reset by the peer.
    assert!(c.send(hdr(LPORT, RST, IRS + 2501, 0, 0), &[]).is_empty());
    assert_eq!(
        c.d.take_events(),
        vec![
            Event::DataArrived {
                upto: 2000,
                push: None
            },
            Event::DataArrived {
                upto: 2500,
                push: None
            },
            Event::Reset
        ]
    );
    assert!(c.d.table.is_empty());
    c.check(|w| w.estab_resets += 1);
}

#[test]
fn listener_cookies_drops_and_stateless_resets() {
    let mut c = Counted::new();
    c.d.listen(&cfg(), 1, true);
    // The backlog's one slot.
    let out = c.send(syn(RPORT), &[]);
    assert_eq!(out.len(), 1);
    c.check(|w| w.passive_opens += 1);

    // The backlog is full: a cookie answers.
    let out = c.send(syn(RPORT + 1), &[]);
    assert_eq!(out.len(), 1);
    let cookie = out[0].0.seq;
    assert_eq!((out[0].0.flags, out[0].0.ack), (SYN | ACK, IRS + 1));
    c.check(|w| w.syn_cookies += 1);

    // An ACK with a cookie that is not ours: dropped by the listener, reset.
    let mut bad = hdr(LPORT, ACK, IRS + 1, cookie ^ 0x55, 30_000);
    bad.src_port = RPORT + 2;
    let out = c.send(bad, &[]);
    assert_eq!(shape(&out), vec![(RST, cookie ^ 0x55, 0, 0)]);
    c.check(|w| {
        w.rsts_out += 1;
        w.listen_drops += 1;
    });

    // A segment for a port nobody listens on: reset.
    let out = c.send(hdr(81, SYN, 77, 0, 100), &[]);
    assert_eq!(shape(&out), vec![(RST | ACK, 0, 78, 0)]);
    c.check(|w| w.rsts_out += 1);

    // The good cookie comes back: a passive open without a backlog slot.
    let mut ack = hdr(LPORT, ACK, IRS + 1, cookie.wrapping_add(1), 30_000);
    ack.src_port = RPORT + 1;
    assert!(c.send(ack, &[]).is_empty());
    assert_eq!(c.d.take_events(), vec![Event::Established]);
    c.check(|w| w.passive_opens += 1);

    // A listener with neither backlog nor cookies drops SYNs.
    c.d.table
        .listen(Listener::new(
            Ipv6Addr::UNSPECIFIED,
            81,
            cfg(),
            0,
            false,
            c.d.now,
        ))
        .unwrap();
    assert!(c.send(hdr(81, SYN, 77, 0, 100), &[]).is_empty());
    c.check(|w| w.listen_drops += 1);

    // The half-open connection is reset by the peer: a failed attempt.
    assert!(c.send(hdr(LPORT, RST, IRS + 1, 0, 0), &[]).is_empty());
    assert_eq!(c.d.take_events(), vec![Event::Reset]);
    c.check(|w| w.attempt_fails += 1);
    assert_eq!(c.d.table.len(), 1, "the cookie connection stays");
}

#[test]
fn active_opens_retransmissions_fast_retransmit_and_timeouts() {
    let mut c = Counted::new();
    let cfg = Config {
        max_retries: 2,
        ..cfg()
    };
    // Refused after one SYN retransmission.
    let (id, out) = c.connect(&cfg);
    let iss = c.d.iss(id);
    assert_eq!(shape(&out), vec![(SYN, iss, 0, 0)]);
    c.check(|w| w.active_opens += 1);
    let out = c.wait_deadline();
    assert_eq!(shape(&out), vec![(SYN, iss, 0, 0)]);
    c.check(|w| {
        w.retrans_segs += 1;
        w.rto_timeouts += 1;
    });
    assert!(c.send(hdr(CPORT, RST | ACK, 0, iss + 1, 0), &[]).is_empty());
    assert_eq!(c.d.take_events(), vec![Event::Reset]);
    assert!(c.d.table.is_empty());
    c.check(|w| w.attempt_fails += 1);

    // Again, answered; four segments of data go out.
    let (id, out) = c.connect(&cfg);
    let iss = c.d.iss(id);
    assert_eq!(shape(&out), vec![(SYN, iss, 0, 0)]);
    let mut sa = hdr(CPORT, SYN | ACK, IRS, iss + 1, 30_000);
    sa.options = syn(RPORT).options;
    let out = c.send(sa, &[]);
    assert_eq!(shape(&out), vec![(ACK, iss + 1, IRS + 1, 0)]);
    let out = c.queue(id, 4000);
    assert_eq!(shape(&out), data(iss + 1, IRS + 1, &[1000; 4], true));
    c.check(|w| w.active_opens += 1);

    // Three duplicate ACKs: one fast retransmit of the first segment.
    let dup = hdr(CPORT, ACK, IRS + 1, iss + 1, 30_000);
    for _ in 0..2 {
        assert!(c.send(dup, &[]).is_empty());
    }
    let out = c.send(dup, &[]);
    assert_eq!(shape(&out), vec![(ACK, iss + 1, IRS + 1, 1000)]);
    c.check(|w| {
        w.retrans_segs += 1;
        w.fast_retransmits += 1;
    });

    // Then silence: two timeouts retransmit it, the third gives up.
    for _ in 0..2 {
        let out = c.wait_deadline();
        assert_eq!(shape(&out), vec![(ACK, iss + 1, IRS + 1, 1000)]);
        c.check(|w| {
            w.retrans_segs += 1;
            w.rto_timeouts += 1;
        });
    }
    assert!(c.wait_deadline().is_empty());
    assert_eq!(c.d.take_events(), vec![Event::Established, Event::TimedOut]);
    assert!(c.d.table.is_empty());
    c.check(|w| w.timeouts += 1);
}

#[test]
fn aborts_count_resets_sent_and_failed_attempts() {
    let mut c = Counted::new();
    c.d.listen(&cfg(), 4, false);
    assert_eq!(c.send(syn(RPORT), &[]).len(), 1, "the SYN-ACK");
    let id = c.d.accepted(RPORT);
    let iss = c.d.iss(id);
    // Aborted in SYN-RECEIVED (its QP destroyed): a reset, and a failed attempt.
    let out = c.abort(id);
    assert_eq!(shape(&out), vec![(RST, iss + 1, 0, 0)]);
    assert!(c.d.table.is_empty());
    c.check(|w| {
        w.passive_opens += 1;
        w.rsts_out += 1;
        w.attempt_fails += 1;
    });

    // Aborted when established: a reset, no failed attempt, no peer reset.
    assert_eq!(c.send(syn(RPORT + 1), &[]).len(), 1, "the SYN-ACK");
    let id = c.d.accepted(RPORT + 1);
    let iss = c.d.iss(id);
    let mut ack = hdr(LPORT, ACK, IRS + 1, iss + 1, 30_000);
    ack.src_port = RPORT + 1;
    assert!(c.send(ack, &[]).is_empty());
    assert_eq!(c.d.conn(id).state(), State::Established);
    let out = c.abort(id);
    assert_eq!(shape(&out), vec![(RST, iss + 1, 0, 0)]);
    c.check(|w| {
        w.passive_opens += 1;
        w.rsts_out += 1;
    });
}
