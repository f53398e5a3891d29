//! A new SYN for a connection in TIME-WAIT, segment by segment: taken as a new incarnation
//! when acceptable (RFC 6191 with timestamps: a newer TSval; without: a sequence number
//! beyond the old connection's, RFC 9293 §3.10.7.4 / RFC 1122 §4.2.2.13) and a listener
//! is on the port; otherwise answered as TIME-WAIT answers any segment (an ACK), the old
//! connection left as it was.

use crate::harness::*;
use qpip_device::net::tcp::wire::flags::*;
use qpip_device::net::tcp::wire::{Header, Options};
use qpip_device::net::tcp::{Config, ConnId, Connection, Event, FourTuple, State};

/// The peer's TSval on the old connection.
const PEER_TS: u32 = 1000;

fn ts_cfg() -> Config {
    Config {
        timestamps: true,
        ..cfg()
    }
}

/// A header from the peer with its timestamp when `ts`.
fn phdr(ts: Option<u32>, fl: u8, seq: u32, ack: u32) -> Header {
    let mut h = hdr(LPORT, fl, seq, ack, 30_000);
    h.options.timestamps = ts.map(|v| (v, 0));
    h
}

/// The device accepted a connection, exchanged 100 bytes each way and closed first: it
/// is in TIME-WAIT. Returns the handle, the ISS, and the old connection's SND.NXT.
fn in_time_wait(d: &mut Dev, c: &Config) -> (ConnId, u32, u32) {
    let ts = c.timestamps.then_some(PEER_TS);
    let mut syn = phdr(ts, SYN, IRS, 0);
    syn.options = Options {
        mss: Some(MSS),
        sack_permitted: true,
        timestamps: ts.map(|v| (v, 0)),
        ..Options::default()
    };
    let out = d.send(syn, &[]);
    let id = d.accepted(RPORT);
    let iss = d.iss(id);
    assert_eq!(shape(&out), vec![(SYN | ACK, iss, IRS + 1, 0)]);
    let out = d.send(phdr(ts, ACK | PSH, IRS + 1, iss + 1), &[5; 100]);
    assert_eq!(shape(&out), vec![(ACK, iss + 1, IRS + 101, 0)]);
    let out = d.queue(id, 100);
    assert_eq!(shape(&out), vec![(ACK | PSH, iss + 1, IRS + 101, 100)]);
    let out = d.by_app(id, Connection::close);
    assert_eq!(shape(&out), vec![(ACK | FIN, iss + 101, IRS + 101, 0)]);
    let out = d.send(phdr(ts, ACK | FIN, IRS + 101, iss + 102), &[]);
    assert_eq!(shape(&out), vec![(ACK, iss + 102, IRS + 102, 0)]);
    assert_eq!(d.conn(id).state(), State::TimeWait);
    d.take_events();
    (id, iss, iss + 102)
}

/// The new SYN's options.
fn new_syn(ts: Option<u32>, seq: u32) -> Header {
    let mut h = phdr(ts, SYN, seq, 0);
    h.options.mss = Some(MSS);
    h.options.sack_permitted = true;
    h
}

#[test]
fn without_timestamps_a_syn_beyond_the_old_sequence_reopens() {
    let mut d = Dev::new();
    d.listen(&cfg(), 4, false);
    let (old, _, snd_nxt) = in_time_wait(&mut d, &cfg());
    // Beyond the old connection's last sequence number (its FIN at IRS + 101).
    let out = d.send(new_syn(None, IRS + 102), &[]);
    let new_iss = snd_nxt.wrapping_add(65537);
    assert_eq!(shape(&out), vec![(SYN | ACK, new_iss, IRS + 103, 0)]);
    assert!(d.table.get(old).is_none(), "the old incarnation is over");
    let id = d.accepted(RPORT);
    assert_eq!(d.conn(id).state(), State::SynReceived);
    assert_eq!(d.iss(id), new_iss);
    assert_eq!(d.table.stats().passive_opens, 2);
    // And it completes like any other.
    assert!(d
        .send(phdr(None, ACK, IRS + 103, new_iss + 1), &[])
        .is_empty());
    assert_eq!(d.conn(id).state(), State::Established);
    assert_eq!(d.take_events(), vec![Event::Established]);
}

#[test]
fn without_timestamps_an_old_sequence_number_is_answered_in_time_wait() {
    let mut d = Dev::new();
    d.listen(&cfg(), 4, false);
    let (old, _, snd_nxt) = in_time_wait(&mut d, &cfg());
    // At or below the last sequence number seen: an old duplicate, perhaps.
    for seq in [IRS + 101, IRS, IRS.wrapping_sub(50_000)] {
        let out = d.send(new_syn(None, seq), &[]);
        assert_eq!(shape(&out), vec![(ACK, snd_nxt, IRS + 102, 0)], "{seq}");
        assert_eq!(d.conn(old).state(), State::TimeWait);
    }
    assert_eq!(d.table.stats().passive_opens, 1);
}

#[test]
fn with_timestamps_a_newer_tsval_reopens_whatever_the_sequence_number() {
    let mut d = Dev::new();
    d.listen(&ts_cfg(), 4, false);
    let (old, _, snd_nxt) = in_time_wait(&mut d, &ts_cfg());
    // An older TSval: refused even with a sequence number beyond (PAWS answers).
    let out = d.send(new_syn(Some(PEER_TS - 1), IRS + 5000), &[]);
    assert_eq!(shape(&out), vec![(ACK, snd_nxt, IRS + 102, 0)]);
    assert_eq!(d.conn(old).state(), State::TimeWait);
    // The same TSval with an old sequence number: refused.
    let out = d.send(new_syn(Some(PEER_TS), IRS), &[]);
    assert_eq!(shape(&out), vec![(ACK, snd_nxt, IRS + 102, 0)]);
    assert_eq!(d.conn(old).state(), State::TimeWait);
    // A newer TSval with an old sequence number: a new incarnation.
    let out = d.send(new_syn(Some(PEER_TS + 1), IRS - 7), &[]);
    let new_iss = snd_nxt.wrapping_add(65537);
    assert_eq!(shape(&out), vec![(SYN | ACK, new_iss, IRS - 6, 0)]);
    assert_eq!(out[0].0.options.timestamps.map(|t| t.1), Some(PEER_TS + 1));
    assert!(d.table.get(old).is_none());
}

#[test]
fn with_timestamps_an_equal_tsval_needs_a_sequence_number_beyond() {
    let mut d = Dev::new();
    d.listen(&ts_cfg(), 4, false);
    let (old, _, snd_nxt) = in_time_wait(&mut d, &ts_cfg());
    let out = d.send(new_syn(Some(PEER_TS), IRS + 200), &[]);
    assert_eq!(
        shape(&out),
        vec![(SYN | ACK, snd_nxt.wrapping_add(65537), IRS + 201, 0)]
    );
    assert!(d.table.get(old).is_none());
}

#[test]
fn with_no_listener_time_wait_answers_as_before() {
    // The device opened the connection (no listener on its port) and closed first.
    let mut d = Dev::new();
    let mss = Options {
        mss: Some(MSS),
        ..Options::default()
    };
    let (id, iss, _) = d.connected(&cfg(), 30_000, mss);
    let out = d.by_app(id, Connection::close);
    assert_eq!(shape(&out), vec![(ACK | FIN, iss + 1, IRS + 1, 0)]);
    let out = d.send(hdr(CPORT, ACK | FIN, IRS + 1, iss + 2, 30_000), &[]);
    assert_eq!(shape(&out), vec![(ACK, iss + 2, IRS + 2, 0)]);
    assert_eq!(d.conn(id).state(), State::TimeWait);
    let out = d.send(hdr(CPORT, SYN, IRS + 1000, 0, 30_000), &[]);
    assert_eq!(shape(&out), vec![(ACK, iss + 2, IRS + 2, 0)]);
    assert_eq!(d.conn(id).state(), State::TimeWait);
    // TIME-WAIT still ends after 2 MSL.
    d.wait(ms(1000));
    assert!(d.table.get(id).is_none());
}

// ---- resets after both sides closed ---------------------------------------------------------

/// A reset in TIME-WAIT is ignored (RFC 1337 §3): no event, no reply, and TIME-WAIT ends
/// after 2 MSL as always with Closed. (A peer that left LAST-ACK on our final ACK answers a
/// duplicate of that ACK with exactly this reset; reporting it as "connection reset" would
/// turn a clean close into an error.)
#[test]
fn a_reset_in_time_wait_is_ignored() {
    let mut d = Dev::new();
    d.listen(&cfg(), 4, false);
    let (id, _, snd_nxt) = in_time_wait(&mut d, &cfg());
    let out = d.send(phdr(None, RST, IRS + 102, 0), &[]);
    assert!(out.is_empty(), "answered a reset: {:?}", shape(&out));
    assert_eq!(d.take_events(), vec![]);
    assert_eq!(d.conn(id).state(), State::TimeWait);
    // A reset with ACK (the form an answer to our ACK takes) likewise.
    let out = d.send(phdr(None, RST | ACK, IRS + 102, snd_nxt), &[]);
    assert!(out.is_empty(), "answered a reset: {:?}", shape(&out));
    assert_eq!(d.take_events(), vec![]);
    d.wait(cfg().msl * 2);
    assert_eq!(d.take_events(), vec![Event::Closed]);
}

/// In LAST-ACK with only our FIN unacknowledged, a reset closes the connection without the
/// "connection reset" signal (RFC 9293 §3.10.7.4): Closed, not Reset. With data still
/// unacknowledged it is a reset: bytes may be lost.
#[test]
fn a_reset_in_last_ack_closes_quietly_only_when_no_data_is_lost() {
    for unacked in [false, true] {
        let mut d = Dev::new();
        d.listen(&cfg(), 4, false);
        let out = d.send(new_syn(None, IRS), &[]);
        let id = d.accepted(RPORT);
        let iss = d.iss(id);
        assert_eq!(shape(&out)[0].0, SYN | ACK);
        d.send(phdr(None, ACK, IRS + 1, iss + 1), &[]);
        // 100 bytes out; acknowledged unless `unacked`.
        let out = d.queue(id, 100);
        assert_eq!(shape(&out), vec![(ACK | PSH, iss + 1, IRS + 1, 100)]);
        let ack = if unacked { iss + 1 } else { iss + 101 };
        // The peer closes first (CLOSE-WAIT), then we do (LAST-ACK).
        d.send(phdr(None, ACK | FIN, IRS + 1, ack), &[]);
        d.by_app(id, Connection::close);
        assert_eq!(d.conn(id).state(), State::LastAck);
        d.take_events();
        d.send(phdr(None, RST, IRS + 2, 0), &[]);
        let want = if unacked { Event::Reset } else { Event::Closed };
        assert_eq!(d.take_events(), vec![want], "unacked data: {unacked}");
    }
}

/// The device's own connect onto the four-tuple of one of its connections in TIME-WAIT
/// (a guest whose port choice reused the port): with timestamps, a new incarnation, its
/// ISS beyond the old one's sequence space and its SYN out at once; without timestamps,
/// refused (the tuple is in use), the old connection left as it was. `can_connect` (what
/// a BIND for a driver-chosen port asks) says so beforehand.
#[test]
fn an_active_open_takes_over_a_time_wait_only_with_timestamps() {
    for ts in [true, false] {
        let c = if ts { ts_cfg() } else { cfg() };
        let mut d = Dev::new();
        d.listen(&c, 4, false);
        let (old, _, snd_nxt) = in_time_wait(&mut d, &c);
        let tuple = d.conn(old).tuple();
        // While a QP has it, the tuple is that QP's; once the QP is gone, it is an orphan's.
        let tag = d.new_app();
        assert!(!d.table.can_connect(&tuple));
        assert!(d.table.connect(tuple, d.now, &c, tag).is_err());
        d.table.orphan(old, d.now).expect("orphaned");
        assert_eq!(d.table.can_connect(&tuple), ts);
        let other = FourTuple {
            local_port: tuple.local_port + 1,
            ..tuple
        };
        assert!(d.table.can_connect(&other), "another port's tuple is free");
        let r = d.table.connect(tuple, d.now, &c, tag);
        if !ts {
            assert!(r.is_err(), "no timestamps: the tuple stays TIME-WAIT's");
            assert_eq!(d.conn(old).state(), State::TimeWait);
            continue;
        }
        let new = r.expect("taken over");
        assert!(d.table.get(old).is_none(), "the old incarnation is gone");
        assert!(d.table.orphans() == 0 && !d.table.orphan_holds_port(tuple.local_port));
        assert_eq!(d.table.lookup(&tuple), Some(new));
        assert_eq!(d.iss(new), snd_nxt.wrapping_add(65535 + 2));
        assert_eq!(d.conn(new).state(), State::SynSent);
    }
}
