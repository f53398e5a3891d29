//! The receive window a connection offers when no receive is posted (RFC 9293 §3.8.6):
//! it promises only what the staging allowance can take (rounded down to the window
//! scale's unit, RFC 7323 §2.4), reaches zero when staging is full, answers window probes
//! with that zero, accepts every byte it advertised, and opens again with a window update
//! once receives are posted.

use crate::harness::*;
use qpip_device::net::tcp::wire::flags::*;
use qpip_device::net::tcp::wire::{Header, Options};
use qpip_device::net::tcp::{Config, ConnId};

const SHIFT: u8 = 7;
const STAGE: usize = 64 * 1024;

/// The device's defaults where the window is concerned: scale 7, 64 KiB of staging.
fn scaled_cfg() -> Config {
    Config {
        mss: LINK_MSS,
        window_scale: Some(SHIFT),
        staging: STAGE,
        ..cfg()
    }
}

/// A passive open from a peer offering window scale 7, accepted by an application with
/// no receive posted. Returns the handle, the ISS and the SYN-ACK's window.
fn accepted_with_nothing_posted(d: &mut Dev) -> (ConnId, u32, u16) {
    d.listen(&scaled_cfg(), 8, false);
    let mut syn = hdr(LPORT, SYN, IRS, 0, 65535);
    syn.options = Options {
        mss: Some(LINK_MSS),
        window_scale: Some(SHIFT),
        sack_permitted: true,
        ..Options::default()
    };
    let out = d.send(syn, &[]);
    assert_eq!(out.len(), 1, "{out:?}");
    let (sa, _) = &out[0];
    assert_eq!(sa.flags, SYN | ACK);
    let iss = sa.seq;
    // The application took the QP but posted nothing.
    d.apps[0].room = 0;
    let out = d.send(hdr(LPORT, ACK, IRS + 1, iss + 1, 512), &[]);
    assert!(out.is_empty(), "{out:?}");
    let id = d.table.ids()[0];
    (id, iss, sa.window)
}

/// The peer's view of the window of an ACK: its right edge.
fn edge(h: &Header) -> u32 {
    h.ack.wrapping_add((h.window as u32) << SHIFT)
}

#[test]
fn window_without_receives_is_honest_and_closes_to_zero() {
    let mut d = Dev::new();
    let (id, iss, syn_window) = accepted_with_nothing_posted(&mut d);
    let data = d.data.clone();
    // Unscaled in the SYN-ACK: what staging takes.
    assert_eq!(syn_window, 65535);
    let mut right = IRS + 1 + syn_window as u32;
    let mut nxt = IRS + 1;
    let mut last: Option<Header> = None;
    // The peer sends full segments as far as the window lets it, one at a time (each
    // acknowledged at once), then what is left of it.
    for _ in 0..200 {
        let room = right.wrapping_sub(nxt);
        if room == 0 {
            break;
        }
        let n = room.min(LINK_MSS as u32) as usize;
        let off = (nxt - IRS - 1) as usize;
        let out = d.send(hdr(LPORT, ACK, nxt, iss + 1, 512), &data[off..off + n]);
        assert_eq!(out.len(), 1, "one ACK per segment: {out:?}");
        let (a, _) = &out[0];
        // Everything advertised is accepted.
        assert_eq!(a.ack, nxt + n as u32, "in-window data was dropped");
        nxt += n as u32;
        // The right edge never moves left by more than the rounding to the scale unit
        // (RFC 7323 §2.4).
        let e = edge(a);
        assert!(
            e.wrapping_sub(right) as i32 > -(1 << SHIFT),
            "the window shrank: edge {e} < {right}"
        );
        right = right.max(e);
        last = Some(*a);
    }
    let last = last.expect("ACKs");
    assert_eq!(last.window, 0, "a full staging closes the window");
    let staged = (nxt - IRS - 1) as usize;
    assert!((STAGE - (1 << SHIFT)..=STAGE).contains(&staged), "{staged}");
    assert_eq!(d.conn(id).received(), staged as u64);

    // A window probe (one byte at RCV.NXT, RFC 9293 §3.8.6.1) is answered with the
    // zero window and not taken.
    let out = d.send(hdr(LPORT, ACK, nxt, iss + 1, 512), &[0x55]);
    assert_eq!(shape(&out), vec![(ACK, iss + 1, nxt, 0)]);
    assert_eq!(out[0].0.window, 0);
    // A segment beyond the window: the same answer.
    let out = d.send(hdr(LPORT, ACK, nxt + 1000, iss + 1, 512), &[1; 100]);
    assert_eq!(shape(&out), vec![(ACK, iss + 1, nxt, 0)]);
    assert_eq!(out[0].0.window, 0);

    // The application posts 30000 bytes: staged bytes move into them and a window update
    // goes out at once (RFC 9293 §3.8.6.2.2: the window opened by at least an MSS).
    d.apps[0].room = 30_000;
    let e = d.table.get_mut(id).unwrap();
    e.conn.recv_space_changed(d.now, &mut d.apps[0]);
    let mut out = Vec::new();
    d.service(id, &mut out);
    assert_eq!(shape(&out), vec![(ACK, iss + 1, nxt, 0)]);
    let w = (out[0].0.window as usize) << SHIFT;
    assert!((30_000 - (1 << SHIFT)..=30_000).contains(&w), "window {w}");
    assert_eq!(d.apps[0].data[..], data[..30_000]);
    // The peer fills the window it was given: all of it is accepted.
    let off = (nxt - IRS - 1) as usize;
    let out = d.send(hdr(LPORT, ACK, nxt, iss + 1, 512), &data[off..off + 1000]);
    assert_eq!(shape(&out), vec![(ACK, iss + 1, nxt + 1000, 0)]);
}
