//! The device's TCP counters (`ConnectionTable::stats`, QUERY_STATS' `STAT_TCP_*`), checked
//! segment by segment: each test plays the remote end against a table driven as the engine
//! drives it and compares the whole counter set after each step, so a counter that moves
//! when it should not fails as surely as one that does not move.

use std::net::Ipv6Addr;

use crate::common::tuple;
use crate::harness::*;
use qpip_device::net::tcp::wire::flags::*;
use qpip_device::net::tcp::wire::Options;
use qpip_device::net::tcp::{Config, Event, State, TcpStats};

fn syn_opts() -> Options {
    Options {
        mss: Some(MSS),
        sack_permitted: true,
        ..Options::default()
    }
}

#[test]
fn passive_open_out_of_order_duplicates_challenge_and_reset_by_the_peer() {
    let mut d = Dev::new();
    d.listen(&cfg(), 4, true);
    let mut syn = hdr(LPORT, SYN, IRS, 0, 30_000);
    syn.options = syn_opts();
    let out = d.send(syn, &[]);
    let id = d
        .table
        .lookup(&tuple(LOCAL, LPORT, REMOTE, RPORT))
        .expect("half-open");
    let iss = d.iss(id);
    assert_eq!(shape(&out), vec![(SYN | ACK, iss, IRS + 1, 0)]);
    let mut want = TcpStats {
        segs_in: 1,
        passive_opens: 1,
        segs_out: 1,
        ..TcpStats::default()
    };
    assert_eq!(*d.table.stats(), want);

    // The handshake completes: nothing to send.
    assert!(d
        .send(hdr(LPORT, ACK, IRS + 1, iss + 1, 30_000), &[])
        .is_empty());
    assert_eq!(d.take_events(), vec![Event::Established]);
    want.segs_in += 1;
    assert_eq!(*d.table.stats(), want);

    // The second segment before the first: out of order, SACKed at once.
    let out = d.send(hdr(LPORT, ACK, IRS + 1001, iss + 1, 30_000), &[1; 1000]);
    assert_eq!(shape(&out), vec![(ACK, iss + 1, IRS + 1, 0)]);
    assert_eq!(
        out[0].0.options.sack.as_slice(),
        &[(IRS + 1001, IRS + 2001)]
    );
    want.segs_in += 1;
    want.segs_out += 1;
    want.ooo_segs += 1;
    assert_eq!(*d.table.stats(), want);

    // The first fills the hole.
    let out = d.send(hdr(LPORT, ACK, IRS + 1, iss + 1, 30_000), &[2; 1000]);
    assert_eq!(shape(&out), vec![(ACK, iss + 1, IRS + 2001, 0)]);
    want.segs_in += 1;
    want.segs_out += 1;
    assert_eq!(*d.table.stats(), want);

    // The first again: all of it was received before.
    let out = d.send(hdr(LPORT, ACK, IRS + 1, iss + 1, 30_000), &[2; 1000]);
    assert_eq!(shape(&out), vec![(ACK, iss + 1, IRS + 2001, 0)]);
    want.segs_in += 1;
    want.segs_out += 1;
    want.dup_segs += 1;
    assert_eq!(*d.table.stats(), want);

    // Half old, half new: no duplicate.
    let out = d.send(hdr(LPORT, ACK, IRS + 1501, iss + 1, 30_000), &[3; 1000]);
    assert_eq!(shape(&out), vec![(ACK, iss + 1, IRS + 2501, 0)]);
    want.segs_in += 1;
    want.segs_out += 1;
    assert_eq!(*d.table.stats(), want);

    // A SYN in the window: a challenge ACK (RFC 5961 §4).
    let out = d.send(hdr(LPORT, SYN, IRS + 2501, 0, 30_000), &[]);
    assert_eq!(shape(&out), vec![(ACK, iss + 1, IRS + 2501, 0)]);
    want.segs_in += 1;
    want.segs_out += 1;
    want.challenge_acks += 1;
    assert_eq!(*d.table.stats(), want);

    // A reset at RCV.NXT: an established connection reset by the peer.
    assert!(d.send(hdr(LPORT, RST, IRS + 2501, 0, 0), &[]).is_empty());
    assert_eq!(
        d.take_events(),
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
    assert!(d.table.is_empty());
    want.segs_in += 1;
    want.estab_resets += 1;
    assert_eq!(*d.table.stats(), want);
}

#[test]
fn listener_cookies_drops_and_stateless_resets() {
    let mut d = Dev::new();
    d.listen(&cfg(), 1, true);
    let mut syn = hdr(LPORT, SYN, IRS, 0, 30_000);
    syn.options = syn_opts();
    // The backlog's one slot.
    let out = d.send(syn, &[]);
    assert_eq!(out.len(), 1);
    let mut want = TcpStats {
        segs_in: 1,
        passive_opens: 1,
        segs_out: 1,
        ..TcpStats::default()
    };
    assert_eq!(*d.table.stats(), want);

    // The backlog is full: a cookie answers.
    let mut syn2 = syn;
    syn2.src_port = RPORT + 1;
    let out = d.send(syn2, &[]);
    assert_eq!(out.len(), 1);
    let cookie = out[0].0.seq;
    assert_eq!((out[0].0.flags, out[0].0.ack), (SYN | ACK, IRS + 1));
    want.segs_in += 1;
    want.segs_out += 1;
    want.syn_cookies += 1;
    assert_eq!(*d.table.stats(), want);

    // An ACK with a cookie that is not ours: dropped by the listener, reset.
    let mut bad = hdr(LPORT, ACK, IRS + 1, cookie ^ 0x55, 30_000);
    bad.src_port = RPORT + 2;
    let out = d.send(bad, &[]);
    assert_eq!(shape(&out), vec![(RST, cookie ^ 0x55, 0, 0)]);
    want.segs_in += 1;
    want.segs_out += 1;
    want.rsts_out += 1;
    want.listen_drops += 1;
    assert_eq!(*d.table.stats(), want);

    // A segment for a port nobody listens on: reset.
    let out = d.send(hdr(81, SYN, 77, 0, 100), &[]);
    assert_eq!(shape(&out), vec![(RST | ACK, 0, 78, 0)]);
    want.segs_in += 1;
    want.segs_out += 1;
    want.rsts_out += 1;
    assert_eq!(*d.table.stats(), want);

    // The good cookie comes back: a passive open without a backlog slot.
    let mut ack = hdr(LPORT, ACK, IRS + 1, cookie.wrapping_add(1), 30_000);
    ack.src_port = RPORT + 1;
    assert!(d.send(ack, &[]).is_empty());
    assert_eq!(d.take_events(), vec![Event::Established]);
    want.segs_in += 1;
    want.passive_opens += 1;
    assert_eq!(*d.table.stats(), want);

    // A listener with neither backlog nor cookies drops SYNs.
    d.table
        .listen(Ipv6Addr::UNSPECIFIED, 81, cfg(), 0, false, d.now)
        .unwrap();
    assert!(d.send(hdr(81, SYN, 77, 0, 100), &[]).is_empty());
    want.segs_in += 1;
    want.listen_drops += 1;
    assert_eq!(*d.table.stats(), want);

    // The half-open connection is reset by the peer: a failed attempt.
    assert!(d.send(hdr(LPORT, RST, IRS + 1, 0, 0), &[]).is_empty());
    assert_eq!(d.take_events(), vec![Event::Reset]);
    want.segs_in += 1;
    want.attempt_fails += 1;
    assert_eq!(*d.table.stats(), want);
    assert_eq!(d.table.len(), 1, "the cookie connection stays");
}

#[test]
fn active_opens_retransmissions_fast_retransmit_and_timeouts() {
    let mut d = Dev::new();
    let c = Config {
        max_retries: 2,
        ..cfg()
    };
    // Refused after one SYN retransmission.
    let (id, out) = d.connect(&c);
    let iss = d.iss(id);
    assert_eq!(shape(&out), vec![(SYN, iss, 0, 0)]);
    let mut want = TcpStats {
        active_opens: 1,
        segs_out: 1,
        ..TcpStats::default()
    };
    assert_eq!(*d.table.stats(), want);
    let out = d.wait_deadline();
    assert_eq!(shape(&out), vec![(SYN, iss, 0, 0)]);
    want.segs_out += 1;
    want.retrans_segs += 1;
    want.rto_timeouts += 1;
    assert_eq!(*d.table.stats(), want);
    assert!(d.send(hdr(CPORT, RST | ACK, 0, iss + 1, 0), &[]).is_empty());
    assert_eq!(d.take_events(), vec![Event::Reset]);
    assert!(d.table.is_empty());
    want.segs_in += 1;
    want.attempt_fails += 1;
    assert_eq!(*d.table.stats(), want);

    // Again, answered; four segments of data go out.
    let (id, out) = d.connect(&c);
    let iss = d.iss(id);
    assert_eq!(shape(&out), vec![(SYN, iss, 0, 0)]);
    let mut sa = hdr(CPORT, SYN | ACK, IRS, iss + 1, 30_000);
    sa.options = syn_opts();
    let out = d.send(sa, &[]);
    assert_eq!(shape(&out), vec![(ACK, iss + 1, IRS + 1, 0)]);
    let out = d.queue(id, 4000);
    assert_eq!(
        shape(&out),
        vec![
            (ACK, iss + 1, IRS + 1, 1000),
            (ACK, iss + 1001, IRS + 1, 1000),
            (ACK, iss + 2001, IRS + 1, 1000),
            (ACK | PSH, iss + 3001, IRS + 1, 1000),
        ]
    );
    want.active_opens += 1;
    want.segs_in += 1;
    want.segs_out += 6;
    assert_eq!(*d.table.stats(), want);

    // Three duplicate ACKs: one fast retransmit of the first segment.
    assert!(d
        .send(hdr(CPORT, ACK, IRS + 1, iss + 1, 30_000), &[])
        .is_empty());
    assert!(d
        .send(hdr(CPORT, ACK, IRS + 1, iss + 1, 30_000), &[])
        .is_empty());
    let out = d.send(hdr(CPORT, ACK, IRS + 1, iss + 1, 30_000), &[]);
    assert_eq!(shape(&out), vec![(ACK, iss + 1, IRS + 1, 1000)]);
    want.segs_in += 3;
    want.segs_out += 1;
    want.retrans_segs += 1;
    want.fast_retransmits += 1;
    assert_eq!(*d.table.stats(), want);

    // Then silence: two timeouts retransmit it, the third gives up.
    for _ in 0..2 {
        let out = d.wait_deadline();
        assert_eq!(shape(&out), vec![(ACK, iss + 1, IRS + 1, 1000)]);
        want.segs_out += 1;
        want.retrans_segs += 1;
        want.rto_timeouts += 1;
        assert_eq!(*d.table.stats(), want);
    }
    assert!(d.wait_deadline().is_empty());
    assert_eq!(d.take_events(), vec![Event::Established, Event::TimedOut]);
    assert!(d.table.is_empty());
    want.timeouts += 1;
    assert_eq!(*d.table.stats(), want);
}

#[test]
fn aborts_count_resets_sent_and_failed_attempts() {
    let mut d = Dev::new();
    d.listen(&cfg(), 4, false);
    let mut syn = hdr(LPORT, SYN, IRS, 0, 30_000);
    syn.options = syn_opts();
    d.send(syn, &[]);
    let id = d
        .table
        .lookup(&tuple(LOCAL, LPORT, REMOTE, RPORT))
        .expect("half-open");
    let iss = d.iss(id);
    // Aborted in SYN-RECEIVED (its QP destroyed): a reset, and a failed attempt.
    d.table.get_mut(id).unwrap().conn.abort();
    let mut out = Vec::new();
    d.service(id, &mut out);
    assert_eq!(shape(&out), vec![(RST, iss + 1, 0, 0)]);
    assert!(d.table.is_empty());
    let want = TcpStats {
        segs_in: 1,
        passive_opens: 1,
        segs_out: 2,
        rsts_out: 1,
        attempt_fails: 1,
        ..TcpStats::default()
    };
    assert_eq!(*d.table.stats(), want);

    // Aborted when established: a reset, no failed attempt, no peer reset.
    let mut syn2 = syn;
    syn2.src_port = RPORT + 1;
    d.send(syn2, &[]);
    let t2 = tuple(LOCAL, LPORT, REMOTE, RPORT + 1);
    let id = d.table.lookup(&t2).expect("half-open");
    let iss = d.iss(id);
    let mut ack = hdr(LPORT, ACK, IRS + 1, iss + 1, 30_000);
    ack.src_port = RPORT + 1;
    d.send(ack, &[]);
    assert_eq!(d.table.get(id).unwrap().conn.state(), State::Established);
    d.table.get_mut(id).unwrap().conn.abort();
    let mut out = Vec::new();
    d.service(id, &mut out);
    assert_eq!(shape(&out), vec![(RST, iss + 1, 0, 0)]);
    let want = TcpStats {
        segs_in: 3,
        passive_opens: 2,
        segs_out: 4,
        rsts_out: 2,
        attempt_fails: 1,
        ..TcpStats::default()
    };
    assert_eq!(*d.table.stats(), want);
}
