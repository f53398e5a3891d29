//! Segment sizes, segment by segment: a data segment never outgrows the path MTU because
//! of its options (RFC 6691: the MSS counts a bare TCP header, so SACK blocks take their
//! room from the payload, as in Linux's tcp_current_mss()), and a path MTU that a packet
//! too big lowered grows back when that expires (RFC 8201 §4).

use crate::harness::*;
use qpip_device::net::tcp::wire::flags::*;
use qpip_device::net::tcp::wire::Header;
use qpip_device::net::tcp::ConnId;

/// An established active open whose peer offered `LINK_MSS` and SACK (and timestamps if
/// `ts`). Returns the handle and the ISS.
fn established(d: &mut Dev, ts: bool) -> (ConnId, u32) {
    let (id, iss, _) = d.connected(&link_cfg(ts), 60_000, link_options(ts));
    (id, iss)
}

/// A segment from the peer: data at stream offset `off`, acknowledging `ack`.
fn peer(ts: bool, off: u32, ack: u32, len: usize) -> (Header, Vec<u8>) {
    let mut h = hdr(CPORT, ACK, IRS + 1 + off, ack, 60_000);
    h.options.timestamps = ts.then_some((2, 1));
    (h, vec![0x5a; len])
}

/// The peer's data arrives with holes: 100 bytes at 100, 300, 500 and 700 (four SACK
/// blocks held). Then `queued` bytes are sent while they are held, and then after the
/// holes are filled. Returns (segments with SACK blocks, segments after).
fn send_around_holes(ts: bool, queued: u64, more: u64) -> (u32, Segments, Segments) {
    let mut d = Dev::new();
    let (id, iss) = established(&mut d, ts);
    for (i, off) in [100u32, 300, 500, 700].into_iter().enumerate() {
        let (h, p) = peer(ts, off, iss + 1, 100);
        let out = d.send(h, &p);
        // Out of order: acknowledged at once, with what is held.
        assert_eq!(shape(&out), vec![(ACK, iss + 1, IRS + 1, 0)]);
        let blocks = out[0].0.options.sack.len();
        assert_eq!(
            blocks,
            (i + 1).min(if ts { 3 } else { 4 }),
            "{:?}",
            out[0].0
        );
    }
    let with_sack = d.queue(id, queued);
    let sent: u32 = with_sack.iter().map(|(_, p)| p.len() as u32).sum();
    // The holes are filled and everything sent acknowledged: no more SACK blocks.
    let (h, p) = peer(ts, 0, iss + 1 + sent, 800);
    d.send(h, &p);
    let after = d.queue(id, more);
    (iss, with_sack, after)
}

#[test]
fn sack_blocks_take_their_room_from_the_payload() {
    // Four blocks: 4 + 4 * 8 = 36 bytes of options, so 1440 - 36 = 1404 bytes of data.
    let (iss, out, after) = send_around_holes(false, 2 * 1404, 2 * 1440);
    assert_eq!(shape(&out), data(iss + 1, IRS + 1, &[1404; 2], true));
    for (h, _) in &out {
        assert_eq!(h.options.sack.len(), 4, "{h:?}");
        assert_eq!(20 + h.options.wire_len(), 56);
    }
    fits(&out, 1500);
    // Without blocks, full segments again.
    let s = iss + 1 + 2 * 1404;
    assert_eq!(shape(&after), data(s, IRS + 801, &[1440; 2], true));
    assert!(after.iter().all(|(h, _)| h.options.sack.is_empty()));
    fits(&after, 1500);
}

#[test]
fn with_timestamps_three_blocks_fill_the_forty_bytes() {
    // Timestamps (12) and three blocks (4 + 24): 40 bytes of options, 1400 of data.
    let (iss, out, after) = send_around_holes(true, 2 * 1400, 2 * 1428);
    assert_eq!(shape(&out), data(iss + 1, IRS + 1, &[1400; 2], true));
    for (h, _) in &out {
        assert_eq!(h.options.sack.len(), 3, "{h:?}");
        assert!(h.options.timestamps.is_some());
    }
    fits(&out, 1500);
    let s = iss + 1 + 2 * 1400;
    assert_eq!(shape(&after), data(s, IRS + 801, &[1428; 2], true));
    fits(&after, 1500);
}

#[test]
fn retransmissions_with_sack_blocks_fit_too() {
    // Data in flight is lost while the peer's data has holes: the retransmission after
    // the timeout carries the blocks and is cut to fit.
    let mut d = Dev::new();
    let (id, iss) = established(&mut d, false);
    // A full segment goes out before any hole exists...
    let first = d.queue(id, 1440);
    assert_eq!(shape(&first), vec![(ACK | PSH, iss + 1, IRS + 1, 1440)]);
    // ...then the peer's data arrives with four holes, and our segment is lost.
    for off in [100u32, 300, 500, 700] {
        let (h, p) = peer(false, off, iss + 1, 100);
        d.send(h, &p);
    }
    let again = d.wait_deadline();
    assert_eq!(
        shape(&again),
        vec![(ACK, iss + 1, IRS + 1, 1404)],
        "the timeout resends what fits beside four blocks"
    );
    assert_eq!(again[0].0.options.sack.len(), 4);
    fits(&again, 1500);
}

#[test]
fn segments_grow_back_when_a_lowered_path_mtu_expires() {
    let mut d = Dev::new();
    let (id, iss) = established(&mut d, false);
    d.table.path_mtu_changed(REMOTE, 1280, d.now);
    assert_eq!(d.conn(id).smss(), 1220);
    let out = d.queue(id, 2 * 1220);
    assert_eq!(shape(&out), data(iss + 1, IRS + 1, &[1220; 2], true));
    assert!(d
        .send(hdr(CPORT, ACK, IRS + 1, iss + 2441, 60_000), &[])
        .is_empty());
    // The lowered value expired (Stack::take_path_mtu_changes reports the link's MTU):
    // segments grow back, nothing is sent again and nothing is due early.
    let deadline = d.table.next_deadline();
    d.table.path_mtu_changed(REMOTE, 1500, d.now);
    assert_eq!(d.conn(id).smss(), 1440);
    assert_eq!(d.table.next_deadline(), deadline);
    assert!(d.wait(ms(0)).is_empty());
    let out = d.queue(id, 2 * 1440);
    assert_eq!(shape(&out), data(iss + 2441, IRS + 1, &[1440; 2], true));
    fits(&out, 1500);
    // Never beyond what the peer offered, whatever the link says.
    d.table.path_mtu_changed(REMOTE, 9000, d.now);
    assert_eq!(d.conn(id).smss(), 1440);
}

#[test]
fn a_source_of_records_starts_every_segment_with_a_record() {
    // Records as iWARP's FPDUs are: full ones of the MSS, short ones where a message ends.
    let mut d = Dev::new();
    d.record_ends = vec![100, 1540, 2980, 3280, 4720, 4800];
    let (id, iss) = established(&mut d, false);
    let out = d.queue(id, 4800);
    assert_eq!(
        shape(&out),
        data(iss + 1, IRS + 1, &[100, 1440, 1440, 300, 1440, 80], true)
    );
    fits(&out, 1500);
    // Plain bytes go in full segments.
    let mut d = Dev::new();
    let (id, iss) = established(&mut d, false);
    let out = d.queue(id, 4800);
    assert_eq!(
        shape(&out),
        data(iss + 1, IRS + 1, &[1440, 1440, 1440, 480], true)
    );
}

#[test]
fn a_super_segment_of_records_ends_with_its_only_short_record() {
    // A super-segment is cut every MSS bytes on the way: a short record must be its last,
    // or the record after it would start inside a piece.
    let ends = vec![1440u64, 2880, 3180, 4620, 6060, 6140, 7580, 7600, 7620];
    let mut d = Dev::new();
    d.record_ends = ends.clone();
    let mut cfg = link_cfg(false);
    cfg.gso = true;
    let (id, iss, _) = d.connected(&cfg, 60_000, link_options(false));
    let mut out = d.queue(id, 7620);
    let mut supers = Vec::new();
    let mut sent = 0u64;
    while sent < 7620 {
        assert!(!out.is_empty(), "stalled at {sent}");
        for (h, p) in &out {
            let start = h.seq.wrapping_sub(iss + 1) as u64;
            assert_eq!(start, sent, "in order");
            // Every piece the link cuts (every 1440 bytes) starts and ends a record.
            let mut at = start;
            while at < start + p.len() as u64 {
                assert!(at == 0 || ends.contains(&at), "a piece starts at {at}");
                at = (at + 1440).min(start + p.len() as u64);
                assert!(ends.contains(&at), "a piece ends at {at}");
            }
            supers.push(p.len());
            sent += p.len() as u64;
        }
        // Everything acknowledged: the window opens for the rest.
        let ack = hdr(CPORT, ACK, IRS + 1, iss + 1 + sent as u32, 60_000);
        out = d.send(ack, &[]);
    }
    assert!(
        supers.iter().any(|&n| n > 1440),
        "super-segments were built: {supers:?}"
    );
}
