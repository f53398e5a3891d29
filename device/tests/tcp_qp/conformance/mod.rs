//! A packet-level conformance suite: the device (the real engine behind vfio-user, a guest
//! QP listening or connecting) on a cable, the test on the other end crafting every frame
//! and checking every answer, with sequence numbers relative to the ISNs (the script
//! format is described in `support/tcp_script/mod.rs`). Each case names the RFC section
//! it checks.

use crate::script::*;

mod data;
mod handshake;
mod ipv4;
mod ipv6;
mod path_mtu;
mod resets;
mod robustness;
mod unreachable;
mod window;
mod window_psh;

/// The device's next segment, which must be a bare ACK: its acknowledgment number
/// (relative), the right edge of the window it offers (scale 7) and its window field.
/// The edge must not have moved left of `right` by a scale unit or more (RFC 7323 §2.4).
fn next_ack_edge(p: &mut Peer, right: u32) -> (u32, u32, u16) {
    let s = p.next_seg();
    assert!(s.h.ack && s.payload.is_empty(), "an ACK: {s:?}");
    let ack = s.h.acknowledgment_number.wrapping_sub(PEER_ISN);
    let edge = ack + ((s.h.window_size as u32) << 7);
    assert!(
        edge + 128 > right,
        "the window shrank: edge {edge} < {right}"
    );
    (ack, edge, s.h.window_size)
}
