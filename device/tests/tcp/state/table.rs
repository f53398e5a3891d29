//! The connection table on its own: demultiplexing to connections and listeners, the
//! timer heap, and the resets for segments that meet no connection (RFC 9293 §3.10.7.1).

use std::net::Ipv6Addr;

use qpip_device::net::tcp::listener::Listener;
use qpip_device::net::tcp::wire;
use qpip_device::net::tcp::{self, ConnId, ConnectionTable, Input, IsnGenerator};

use super::*;
use crate::common::oracle;
use crate::harness::ms;

fn table(t0: Instant) -> ConnectionTable<u32> {
    ConnectionTable::new(IsnGenerator::new([1; 16], t0))
}

/// Connection `id` sends what it owes at `t` (one segment: its SYN or SYN-ACK), and its
/// timer goes into the table's heap.
fn send_syn(table: &mut ConnectionTable<u32>, id: ConnId, t: Instant) {
    let e = table.get_mut(id).unwrap();
    assert_eq!(e.conn.transmit_all(t, &mut tcp::NoData).len(), 1);
    table.update(id);
}

#[test]
fn table_demultiplexes_listens_and_runs_timers_from_a_heap() {
    let t0 = Instant::now();
    let mut table = table(t0);
    table
        .listen(Listener::new(Ipv6Addr::UNSPECIFIED, 80, cfg(), 8, true, t0))
        .unwrap();
    assert!(table
        .listen(Listener::new(Ipv6Addr::UNSPECIFIED, 80, cfg(), 8, true, t0))
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
    let bytes = from_remote(&h, &[]);
    let Input::Reply(r) = table.input(&parse_remote(&bytes), t0, 0) else {
        panic!("reset")
    };
    let rst = wire::parse(r.src, r.dst, &r.segment).unwrap().header;
    assert_eq!((rst.flags, rst.seq, rst.ack), (RST | ACK, 0, 78));
    // A SYN to the listener: a half-open connection, SYN-ACK due.
    let mut h = h;
    h.dst_port = 80;
    let bytes = from_remote(&h, &[]);
    let seg = parse_remote(&bytes);
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
        send_syn(&mut table, i, t0);
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
    let mut table = table(t0);
    let a = table
        .connect(tuple(LOCAL, 2000, REMOTE, 443), t0, &cfg(), 1)
        .unwrap();
    let b = table
        .connect(tuple(LOCAL, 2001, REMOTE, 443), t0 + ms(10), &cfg(), 2)
        .unwrap();
    for (i, t) in [(a, t0), (b, t0 + ms(10))] {
        send_syn(&mut table, i, t);
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
    let reset = |h: Header, payload: &[u8]| -> Option<Header> {
        let bytes = from_remote(&h, payload);
        wire::reset_for(&parse_remote(&bytes)).map(|(s, d, r)| {
            oracle(s, d, &r);
            wire::parse(s, d, &r).unwrap().header
        })
    };
    assert_eq!(
        reset(hdr(ACK | FIN, 10, 20, 0), b"abc"),
        Some(out(RST, 20, 0, 0))
    );
    assert_eq!(
        reset(hdr(FIN, 10, 0, 0), b"abc"),
        Some(out(RST | ACK, 0, 14, 0))
    );
    assert_eq!(reset(hdr(RST, 10, 0, 0), &[]), None);
}
