//! Path MTU to connections (RFC 8201, RFC 9293 §3.7.3), segment by segment: a packet too
//! big that lowers the path MTU toward a peer makes its connections cut their segments to
//! fit; what was in flight (and not SACKed) is sent again at once at the new size, without
//! waiting for the retransmission timer and without reducing cwnd.

use std::net::Ipv6Addr;

use crate::harness::*;
use qpip_device::net::tcp::wire::flags::*;
use qpip_device::net::tcp::wire::{Options, SackBlocks};
use qpip_device::net::tcp::{Config, ConnId};

/// An established active open whose peer offered `LINK_MSS`, with four full segments
/// in flight. Returns the handle and the ISS.
fn four_in_flight(d: &mut Dev, c: &Config) -> (ConnId, u32) {
    let (id, iss, _) = d.connected(c, 60_000, link_options(c.timestamps));
    let smss = d.conn(id).smss();
    let out = d.queue(id, 4 * smss as u64);
    assert_eq!(shape(&out), data(iss + 1, IRS + 1, &[smss; 4], true));
    (id, iss)
}

#[test]
fn flight_is_resent_at_once_in_smaller_segments_and_cwnd_stays() {
    let mut d = Dev::new();
    let (id, iss) = four_in_flight(&mut d, &link_cfg(false));
    let cwnd = d.conn(id).cwnd();
    let rto_at = d.table.next_deadline().unwrap();
    let before = d.table.stats().clone();

    // A router on the way says 1280: due now, not at the RTO.
    d.table.path_mtu_changed(REMOTE, 1280, d.now);
    assert_eq!(d.table.next_deadline(), Some(d.now));
    assert!(d.now < rto_at);
    assert_eq!(d.conn(id).smss(), 1220);
    let out = d.wait(ms(0));
    // As much as cwnd (four old segments' worth) allows: four of 1220.
    assert_eq!(shape(&out), data(iss + 1, IRS + 1, &[1220; 4], false));
    fits(&out, 1280);
    for (h, p) in &out {
        let o = (h.seq - iss - 1) as usize;
        assert_eq!(p[..], d.data[o..o + p.len()], "the same bytes, cut anew");
    }
    assert_eq!(d.conn(id).cwnd(), cwnd, "no congestion");
    assert_eq!(d.table.stats().retrans_segs, before.retrans_segs + 4);
    assert_eq!(d.table.stats().rto_timeouts, before.rto_timeouts);
    assert_eq!(d.table.stats().fast_retransmits, before.fast_retransmits);

    // The first two arrive: the rest of the old flight follows.
    let out = d.send(hdr(CPORT, ACK, IRS + 1, iss + 2441, 60_000), &[]);
    assert_eq!(shape(&out), vec![(ACK | PSH, iss + 4881, IRS + 1, 880)]);
    // All of it: new data goes out in segments of the new size, cwnd not below where
    // it was.
    assert!(d
        .send(hdr(CPORT, ACK, IRS + 1, iss + 5761, 60_000), &[])
        .is_empty());
    assert!(d.conn(id).cwnd() >= cwnd);
    let out = d.queue(id, 3000);
    assert_eq!(
        shape(&out),
        data(iss + 5761, IRS + 1, &[1220, 1220, 560], true)
    );
    fits(&out, 1280);
}

#[test]
fn sacked_data_is_not_resent_and_options_count_against_the_mtu() {
    let mut d = Dev::new();
    let (id, iss) = four_in_flight(&mut d, &link_cfg(true));
    // With timestamps each segment has 12 bytes of options less data.
    let s0 = 1440 - 12;
    // The third segment arrived (SACKed), the others were too big for the path.
    let mut dup = hdr(CPORT, ACK, IRS + 1, iss + 1, 60_000);
    dup.options.timestamps = Some((2, 1));
    dup.options.sack = SackBlocks::from_slice(&[(iss + 1 + 2 * s0, iss + 1 + 3 * s0)]);
    let o = d.send(dup, &[]);
    assert!(o.is_empty(), "{o:?}");
    d.table.path_mtu_changed(REMOTE, 1280, d.now);
    let s1 = 1220 - 12;
    assert_eq!(d.conn(id).smss() as u32, s1);
    let out = d.wait(ms(0));
    let hole1 = 2 * s0 - s1; // what is left of the first two segments after one
    let hole2 = s0 - s1;
    assert_eq!(
        shape(&out),
        vec![
            (ACK, iss + 1, IRS + 1, s1 as usize),
            (ACK, iss + 1 + s1, IRS + 1, s1 as usize),
            (ACK, iss + 1 + 2 * s1, IRS + 1, (hole1 - s1) as usize),
            (ACK, iss + 1 + 3 * s0, IRS + 1, s1 as usize),
            (ACK | PSH, iss + 1 + 3 * s0 + s1, IRS + 1, hole2 as usize),
        ]
    );
    fits(&out, 1280);
}

#[test]
fn only_the_destination_concerned_and_only_when_smaller() {
    let mut d = Dev::new();
    let (id, _) = four_in_flight(&mut d, &link_cfg(false));
    let rto_at = d.table.next_deadline().unwrap();
    // Another destination: nothing changes.
    let other: Ipv6Addr = "fd51:5050::99".parse().unwrap();
    d.table.path_mtu_changed(other, 1280, d.now);
    assert_eq!(d.table.next_deadline(), Some(rto_at));
    assert_eq!(d.conn(id).smss(), 1440);
    // An MTU that still fits what was sent: no retransmission.
    d.table.path_mtu_changed(REMOTE, 1500, d.now);
    assert_eq!(d.table.next_deadline(), Some(rto_at));
    assert!(d.wait(ms(0)).is_empty());
    assert_eq!(d.table.stats().retrans_segs, 0);
    // Nothing in flight: smaller segments from now on, nothing sent now.
    let iss = d.iss(id);
    d.send(hdr(CPORT, ACK, IRS + 1, iss + 1 + 4 * 1440, 60_000), &[]);
    d.table.path_mtu_changed(REMOTE, 1280, d.now);
    assert!(d.wait(ms(0)).is_empty());
    let out = d.queue(id, 1440);
    assert_eq!(shape(&out), data(iss + 5761, IRS + 1, &[1220, 220], true));
    // Below the IPv6 minimum MTU is never believed.
    d.table.path_mtu_changed(REMOTE, 600, d.now);
    assert_eq!(d.conn(id).smss(), 1220);
}

/// Establishes an active open (the peer offers `LINK_MSS`) and returns the segments of a
/// 3000-byte send, after checking the SYN still announces the link's MSS.
fn active_send(d: &mut Dev, c: &Config) -> (u32, Segments) {
    let mss = Options {
        mss: Some(LINK_MSS),
        ..Options::default()
    };
    let (id, iss, syn) = d.connected(c, 60_000, mss);
    assert_eq!(
        syn.options.mss,
        Some(LINK_MSS),
        "the MSS announced is what the link receives (RFC 9293 §3.7.1)"
    );
    (iss, d.queue(id, 3000))
}

#[test]
fn new_connections_start_at_the_path_mtu_learned_before() {
    // RFC 8201 §5.2: a packet too big for a destination lowers the segments of the
    // connections opened to it afterwards, active and passive, from their first
    // segment (rather than leaving them to IPv6 fragmentation).
    let mut d = Dev::new();
    let c = link_cfg(false);
    d.table.path_mtu_changed(REMOTE, 1280, d.now);
    let (iss, out) = active_send(&mut d, &c);
    assert_eq!(
        shape(&out),
        data(iss + 1, IRS + 1, &[1220, 1220, 560], true)
    );
    fits(&out, 1280);

    // A passive open from the same destination: the same.
    d.listen(&c, 4, false);
    let mut syn = hdr(LPORT, SYN, IRS, 0, 60_000);
    syn.options.mss = Some(LINK_MSS);
    let sa = d.send(syn, &[]);
    assert_eq!(sa.len(), 1);
    assert_eq!(sa[0].0.options.mss, Some(LINK_MSS));
    let liss = sa[0].0.seq;
    d.send(hdr(LPORT, ACK, IRS + 1, liss + 1, 60_000), &[]);
    let id = d.accepted(RPORT);
    assert_eq!(d.conn(id).smss(), 1220);
    let out = d.queue(id, 1500);
    assert_eq!(shape(&out), data(liss + 1, IRS + 1, &[1220, 280], true));
}

#[test]
fn new_connections_grow_again_once_the_path_mtu_is_raised() {
    let mut d = Dev::new();
    let c = link_cfg(false);
    // Another destination's packet too big concerns only it.
    d.table
        .path_mtu_changed("fd51:5050::99".parse().unwrap(), 1280, d.now);
    d.table.path_mtu_changed(REMOTE, 1280, d.now);
    // The lowered value expired: back to the link's MTU.
    d.table.path_mtu_changed(REMOTE, 1500, d.now);
    assert_eq!(d.table.path_mtu(&REMOTE), None);
    let (iss, out) = active_send(&mut d, &c);
    assert_eq!(
        shape(&out),
        data(iss + 1, IRS + 1, &[1440, 1440, 120], true)
    );
}
