//! Orphans, segment by segment through the table: a connection whose owner closed it
//! gracefully and went away ([`ConnectionTable::orphan`]) finishes its close by itself, as
//! Linux finishes an orphaned socket — its FIN retransmitted until acknowledged, FIN-WAIT-2
//! bounded by `Config::fin_timeout`, TIME-WAIT, new data answered with a reset — without
//! ever reading the application's data again (the harness gives an orphan a source that
//! panics when read). Only connections that lose nothing by it are orphaned, and at most
//! `MAX_ORPHANS` of them.

use std::time::Duration;

use crate::harness::*;
use qpip_device::net::tcp::wire::flags::*;
use qpip_device::net::tcp::wire::Header;
use qpip_device::net::tcp::{Config, ConnId, Connection, OrphanRefused, State, MAX_ORPHANS};

/// The peer's window.
const WND: u16 = 30_000;

/// A header from the peer at remote port `rport`.
fn from(rport: u16, fl: u8, seq: u32, ack: u32) -> Header {
    let mut h = hdr(LPORT, fl, seq, ack, WND);
    h.src_port = rport;
    h
}

/// A connection from the peer's `rport`, accepted by the device: the peer sent 100 bytes,
/// the device sent 100 bytes and the peer acknowledged them. Returns its handle and ISS.
fn open(d: &mut Dev, rport: u16) -> (ConnId, u32) {
    let mut syn = from(rport, SYN, IRS, 0);
    syn.options.mss = Some(MSS);
    let out = d.send(syn, &[]);
    let id = d.accepted(rport);
    let iss = d.iss(id);
    assert_eq!(shape(&out), vec![(SYN | ACK, iss, IRS + 1, 0)]);
    let out = d.send(from(rport, ACK | PSH, IRS + 1, iss + 1), &[7; 100]);
    assert_eq!(shape(&out), vec![(ACK, iss + 1, IRS + 101, 0)]);
    let out = d.queue(id, 100);
    assert_eq!(shape(&out), vec![(ACK | PSH, iss + 1, IRS + 101, 100)]);
    let out = d.send(from(rport, ACK, IRS + 101, iss + 101), &[]);
    assert!(out.is_empty());
    (id, iss)
}

/// The application closes: the FIN goes out (FIN-WAIT-1).
fn close(d: &mut Dev, id: ConnId, iss: u32) {
    let out = d.by_app(id, Connection::close);
    assert_eq!(shape(&out), vec![(ACK | FIN, iss + 101, IRS + 101, 0)]);
    assert_eq!(d.conn(id).state(), State::FinWait1);
}

/// [`open`], [`close`], and the peer acknowledges the FIN (FIN-WAIT-2).
fn in_fin_wait_2(d: &mut Dev, rport: u16) -> (ConnId, u32) {
    let (id, iss) = open(d, rport);
    close(d, id, iss);
    let out = d.send(from(rport, ACK, IRS + 101, iss + 102), &[]);
    assert!(out.is_empty());
    assert_eq!(d.conn(id).state(), State::FinWait2);
    (id, iss)
}

fn dev() -> Dev {
    let mut d = Dev::new();
    d.listen(&cfg(), 4, false);
    d
}

#[test]
fn an_orphan_retransmits_its_lost_fin_and_goes_through_time_wait() {
    let mut d = dev();
    let (id, iss) = open(&mut d, RPORT);
    close(&mut d, id, iss); // this FIN is lost
    assert!(d.conn(id).may_orphan());
    d.table.orphan(id, d.now).expect("orphaned");
    let e = d.table.get(id).expect("still in the table");
    assert!(e.tag.is_none() && e.conn.is_orphan());
    assert_eq!((d.table.orphans(), d.table.stats().orphans), (1, 1));
    assert!(d.table.orphan_holds_port(LPORT));
    // The retransmission timer still runs: the FIN again.
    let out = d.wait_deadline();
    assert_eq!(shape(&out), vec![(ACK | FIN, iss + 101, IRS + 101, 0)]);
    // Acknowledged: FIN-WAIT-2; the peer's FIN: TIME-WAIT.
    assert!(d
        .send(from(RPORT, ACK, IRS + 101, iss + 102), &[])
        .is_empty());
    assert_eq!(d.conn(id).state(), State::FinWait2);
    let out = d.send(from(RPORT, ACK | FIN, IRS + 101, iss + 102), &[]);
    assert_eq!(shape(&out), vec![(ACK, iss + 102, IRS + 102, 0)]);
    assert_eq!(d.conn(id).state(), State::TimeWait);
    // A retransmitted FIN (our ACK was lost) is acknowledged again, as in any TIME-WAIT.
    let out = d.send(from(RPORT, ACK | FIN, IRS + 101, iss + 102), &[]);
    assert_eq!(shape(&out), vec![(ACK, iss + 102, IRS + 102, 0)]);
    // 2 MSL later it is gone, and with it its hold on the port.
    d.wait(cfg().msl * 2);
    assert!(d.table.get(id).is_none());
    assert_eq!(d.table.orphans(), 0);
    assert!(!d.table.orphan_holds_port(LPORT));
    assert_eq!(d.table.stats().orphan_aborts, 0);
    assert_eq!(d.table.stats().rsts_out, 0);
    // Nothing is left to answer for the 4-tuple but the table itself: a reset.
    let out = d.send(from(RPORT, ACK, IRS + 102, iss + 102), &[]);
    assert_eq!(shape(&out), vec![(RST, iss + 102, 0, 0)]);
}

#[test]
fn fin_wait_2_of_an_orphan_ends_after_fin_timeout_silently() {
    assert_eq!(
        Config::default().fin_timeout,
        Duration::from_secs(60),
        "Linux's tcp_fin_timeout"
    );
    let fin_timeout = cfg().fin_timeout;
    let mut d = dev();
    let (id, iss) = in_fin_wait_2(&mut d, RPORT);
    // With its owner, FIN-WAIT-2 lasts as long as the owner waits.
    assert!(d.wait(fin_timeout * 3).is_empty());
    assert_eq!(d.conn(id).state(), State::FinWait2);
    // Orphaned: the bound starts now.
    d.table.orphan(id, d.now).expect("orphaned");
    assert!(d.wait(fin_timeout - ms(1)).is_empty());
    assert_eq!(d.conn(id).state(), State::FinWait2);
    let out = d.wait(ms(1));
    assert!(out.is_empty(), "it ends without a word: {:?}", shape(&out));
    assert!(d.table.get(id).is_none());
    assert_eq!(d.table.orphans(), 0);
    let st = d.table.stats();
    assert_eq!((st.orphans, st.orphan_aborts, st.rsts_out), (1, 0, 0));
    // The peer's late FIN meets no connection.
    let out = d.send(from(RPORT, ACK | FIN, IRS + 101, iss + 102), &[]);
    assert_eq!(shape(&out), vec![(RST, iss + 102, 0, 0)]);
}

#[test]
fn orphaned_in_fin_wait_1_the_bound_starts_at_fin_wait_2() {
    let fin_timeout = cfg().fin_timeout;
    let mut d = dev();
    let (id, iss) = open(&mut d, RPORT);
    close(&mut d, id, iss);
    d.table.orphan(id, d.now).expect("orphaned");
    d.now += fin_timeout; // the FIN is acknowledged late
    let out = d.send(from(RPORT, ACK, IRS + 101, iss + 102), &[]);
    assert!(out.is_empty());
    assert_eq!(d.conn(id).state(), State::FinWait2);
    assert!(d.wait(fin_timeout - ms(1)).is_empty());
    assert_eq!(d.conn(id).state(), State::FinWait2);
    d.wait(ms(1));
    assert!(d.table.get(id).is_none());
}

#[test]
fn new_data_for_an_orphan_is_answered_with_a_reset() {
    let mut d = dev();
    let (id, iss) = in_fin_wait_2(&mut d, RPORT);
    d.table.orphan(id, d.now).expect("orphaned");
    // Old data again (our ACK was lost): acknowledged as usual.
    let out = d.send(from(RPORT, ACK | PSH, IRS + 1, iss + 102), &[7; 100]);
    assert_eq!(shape(&out), vec![(ACK, iss + 102, IRS + 101, 0)]);
    assert_eq!(d.conn(id).state(), State::FinWait2);
    // New data: nobody will read it. A reset at the segment's ACK, and the orphan is gone.
    let out = d.send(from(RPORT, ACK | PSH, IRS + 101, iss + 102), &[8; 50]);
    assert_eq!(shape(&out), vec![(RST, iss + 102, 0, 0)]);
    assert!(d.table.get(id).is_none());
    assert_eq!(d.table.orphans(), 0);
    let st = d.table.stats();
    assert_eq!((st.orphans, st.orphan_aborts, st.rsts_out), (1, 1, 1));
    assert_eq!(st.estab_resets, 0, "we reset the peer, not it us");
}

#[test]
fn new_data_acknowledging_the_fin_of_an_orphan_in_fin_wait_1_is_reset_too() {
    let mut d = dev();
    let (id, iss) = open(&mut d, RPORT);
    close(&mut d, id, iss);
    d.table.orphan(id, d.now).expect("orphaned");
    let out = d.send(from(RPORT, ACK | PSH, IRS + 101, iss + 102), &[8; 50]);
    assert_eq!(shape(&out), vec![(RST, iss + 102, 0, 0)]);
    assert!(d.table.get(id).is_none());
    assert_eq!(d.table.stats().orphan_aborts, 1);
}

#[test]
fn an_orphan_in_last_ack_ends_when_its_fin_is_acknowledged() {
    let mut d = dev();
    let (id, iss) = open(&mut d, RPORT);
    let out = d.send(from(RPORT, ACK | FIN, IRS + 101, iss + 101), &[]);
    assert_eq!(shape(&out), vec![(ACK, iss + 101, IRS + 102, 0)]);
    assert_eq!(d.conn(id).state(), State::CloseWait);
    assert!(!d.conn(id).may_orphan(), "the application has not closed");
    let out = d.by_app(id, Connection::close);
    assert_eq!(shape(&out), vec![(ACK | FIN, iss + 101, IRS + 102, 0)]);
    d.table.orphan(id, d.now).expect("orphaned in LAST-ACK");
    let out = d.wait_deadline();
    assert_eq!(shape(&out), vec![(ACK | FIN, iss + 101, IRS + 102, 0)]);
    assert!(d
        .send(from(RPORT, ACK, IRS + 102, iss + 102), &[])
        .is_empty());
    assert!(d.table.get(id).is_none(), "closed and removed");
    assert_eq!(d.table.orphans(), 0);
}

#[test]
fn only_a_graceful_close_that_loses_nothing_is_orphaned() {
    let mut d = dev();
    // Not closed by the application.
    let (open_id, _) = open(&mut d, RPORT);
    assert_eq!(
        d.table.orphan(open_id, d.now),
        Err(OrphanRefused::NotClosed)
    );
    // Closed, with data not acknowledged (it lives in memory the owner takes back).
    let (id, iss) = open(&mut d, RPORT + 1);
    let out = d.queue(id, 100);
    assert_eq!(shape(&out), vec![(ACK | PSH, iss + 101, IRS + 101, 100)]);
    let out = d.by_app(id, Connection::close);
    assert_eq!(shape(&out), vec![(ACK | FIN, iss + 201, IRS + 101, 0)]);
    assert_eq!(d.table.orphan(id, d.now), Err(OrphanRefused::NotClosed));
    // Part of it acknowledged: still refused. All of it: only the FIN is outstanding.
    assert!(d
        .send(from(RPORT + 1, ACK, IRS + 101, iss + 150), &[])
        .is_empty());
    assert_eq!(d.table.orphan(id, d.now), Err(OrphanRefused::NotClosed));
    assert!(d
        .send(from(RPORT + 1, ACK, IRS + 101, iss + 201), &[])
        .is_empty());
    assert_eq!(d.table.orphan(id, d.now), Ok(()));
    // Closed, everything acknowledged, but received bytes the application never took.
    let (id, iss) = open(&mut d, RPORT + 2);
    let room = ROOM - 100; // the application's space left after `open`'s 100 bytes
    let mut seq = IRS + 101;
    let mut sent = 0;
    while sent < room + 500 {
        let n = (MSS as usize).min(room + 500 - sent);
        d.send(from(RPORT + 2, ACK, seq, iss + 101), &vec![9; n]);
        seq += n as u32;
        sent += n;
    }
    let c = d.conn(id);
    assert_eq!(c.received() - c.delivered(), 500, "500 bytes staged");
    let out = d.by_app(id, Connection::close);
    assert_eq!(shape(&out), vec![(ACK | FIN, iss + 101, seq, 0)]);
    assert!(d.send(from(RPORT + 2, ACK, seq, iss + 102), &[]).is_empty());
    assert_eq!(d.conn(id).state(), State::FinWait2);
    assert_eq!(d.table.orphan(id, d.now), Err(OrphanRefused::NotClosed));
    // None of the refused ones changed.
    for id in [open_id, id] {
        let e = d.table.get(id).unwrap();
        assert!(e.tag.is_some() && !e.conn.is_orphan());
    }
    let st = d.table.stats();
    assert_eq!((st.orphans, st.orphan_aborts), (1, 0));
}

#[test]
fn the_table_holds_at_most_max_orphans() {
    let mut d = dev();
    let mut ids = Vec::new();
    for k in 0..=MAX_ORPHANS as u16 {
        ids.push(in_fin_wait_2(&mut d, 10_000 + k));
    }
    let (last, _) = ids.pop().unwrap();
    for &(id, _) in &ids {
        d.table.orphan(id, d.now).expect("within the bound");
    }
    assert_eq!(d.table.orphans(), MAX_ORPHANS);
    assert_eq!(d.table.orphan(last, d.now), Err(OrphanRefused::Full));
    let e = d.table.get(last).unwrap();
    assert!(e.tag.is_some() && !e.conn.is_orphan(), "left to its owner");
    let st = d.table.stats();
    assert_eq!((st.orphans, st.orphan_aborts), (MAX_ORPHANS as u64, 1));
    // One orphan ends (the peer closes too; TIME-WAIT runs out): room for one more.
    let (id, iss) = ids[0];
    d.send(from(10_000, ACK | FIN, IRS + 101, iss + 102), &[]);
    d.wait(cfg().msl * 2);
    assert!(d.table.get(id).is_none());
    assert_eq!(d.table.orphans(), MAX_ORPHANS - 1);
    d.table.orphan(last, d.now).expect("room again");
    // A smaller bound; 0 refuses every one.
    let mut d = dev();
    d.table.set_max_orphans(0);
    let (id, _) = in_fin_wait_2(&mut d, RPORT);
    assert_eq!(d.table.orphan(id, d.now), Err(OrphanRefused::Full));
}
