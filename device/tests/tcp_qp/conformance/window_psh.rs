//! The window kept whatever the peer's PSH pattern, for stream and message framing.

use qpip_testkit as support;

use crate::script::*;
use support::*;

use super::next_ack_edge;

/// The staging allowance, and the buffer a message-framed QP offers once a receive is posted
/// (docs/device.md).
const STAGING: u32 = 64 * 1024;
const MESSAGE_BUFFER: u32 = 256 * 1024;

/// Which of the test's segments carry PSH, by their index.
#[derive(Clone, Copy)]
enum Psh {
    Every,
    None,
    /// Every third (a peer pushing at the end of bursts).
    EveryThird,
}

impl Psh {
    fn on(self, i: usize) -> bool {
        match self {
            Psh::Every => true,
            Psh::None => false,
            Psh::EveryThird => i % 3 == 2,
        }
    }
}

/// Injects `stream[seq - 1..][..len]` at relative sequence `seq`, with PSH if `psh`.
fn inject_piece(p: &mut Peer, stream: &[u8], seq: u32, len: u32, psh: bool) {
    let mut h = etherparse::TcpHeader::new(p.port, p.dev_port, PEER_ISN.wrapping_add(seq), 1024);
    h.ack = true;
    h.psh = psh;
    h.acknowledgment_number = p.iss.expect("the device's ISN").wrapping_add(1);
    let from = (seq - 1) as usize;
    p.inject_tcp(&h, &stream[from..from + len as usize]);
}

/// The guest has posted its receives and reads nothing more; the test, a demanding peer,
/// sends `stream` (relative sequence 1 is its first byte) in full segments, PSH on those
/// `psh` picks, two at a time, as far as the device's window lets it (its right edge
/// starting at `right`, then as each ACK moves it). RFC 9293 §3.8.6: every byte sent inside
/// the window must be acknowledged (nothing in-window is dropped: a dropped segment would
/// never be acknowledged), the right edge never moves left (by more than the rounding to
/// the scale unit, RFC 7323 §2.4) and never passes `bound` — what the device could take:
/// what was taken plus what can still be taken without the application. The window closes
/// to zero, and a zero-window probe (RFC 9293 §3.8.6.1) is answered with window 0 and
/// the same ACK. Returns where the data ends.
fn window_kept(p: &mut Peer, stream: &[u8], mut right: u32, bound: u32, psh: Psh) -> u32 {
    let (mut nxt, mut i) = (1u32, 0usize);
    assert!(
        right <= bound,
        "the window opened to {right}, beyond {bound}"
    );
    while nxt < right {
        let mut sent = 0;
        while sent < 2 && nxt < right {
            let n = (right - nxt).min(1440);
            inject_piece(p, stream, nxt, n, psh.on(i));
            nxt += n;
            i += 1;
            sent += 1;
        }
        loop {
            let (ack, edge, _) = next_ack_edge(p, right);
            assert!(
                edge <= bound,
                "right edge {edge} (ack {ack}) beyond what the device can take, {bound}"
            );
            right = right.max(edge);
            assert!(ack <= nxt, "ack {ack} beyond {nxt}");
            if ack == nxt {
                break;
            }
        }
    }
    // Every byte offered was taken; the window is shut, and a probe finds it so.
    inject_piece(p, stream, nxt, 1, true);
    let s = p.next_seg();
    assert!(s.h.ack && s.payload.is_empty(), "an ACK: {s:?}");
    assert_eq!(
        (
            s.h.acknowledgment_number.wrapping_sub(PEER_ISN),
            s.h.window_size
        ),
        (nxt, 0),
        "the probe is answered with the zero window"
    );
    nxt
}

/// The window update the guest's receives opened: its right edge.
fn opened(p: &mut Peer) -> u32 {
    let s = p.next_seg();
    assert!(s.h.ack && s.payload.is_empty(), "a window update: {s:?}");
    let ack = s.h.acknowledgment_number.wrapping_sub(PEER_ISN);
    ack + ((s.h.window_size as u32) << 7)
}

/// A stream-framed QP posts `receives` and stops reading; the test fills the window with
/// PSH as `psh` says ([`window_kept`]): the device can take at most what was posted plus
/// the staging allowance. Then the guest completes its receives, reads what the device
/// staged, and every byte is the test's stream.
fn stream_window_kept(name: &str, receives: &[u64], psh: Psh) {
    let mut p = Peer::established(name);
    p.post_recvs(receives);
    let right = opened(&mut p);
    let posted: u64 = receives.iter().sum();
    let bound = 1 + posted as u32 + STAGING + 127;
    let stream: Vec<u8> = (0..bound as u64 + 1).map(peer_byte).collect();
    let nxt = window_kept(&mut p, &stream, right, bound, psh);
    for _ in receives {
        assert_eq!(p.recv_done(), CQE_STATUS_SUCCESS, "a posted receive");
    }
    let staged = nxt as u64 - 1 - p.received.len() as u64;
    if staged > 0 {
        p.post_recv(staged);
    }
    p.received(nxt as usize - 1);
}

/// RFC 9293 §3.8.6: PSH on every segment, the application not reading, small receives
/// (each pushed segment completes a 4 KiB receive with 1440 bytes, giving up the rest):
/// every byte of the window offered is taken, the window closes to zero.
#[test]
fn psh_on_every_segment_small_receives_window_kept() {
    stream_window_kept("psh-every-small", &[4096; 16], Psh::Every);
}

/// As [`psh_on_every_segment_small_receives_window_kept`] with 256 KiB receives (as
/// `qpip-cat -l` posts them): each pushed segment gives up almost a whole receive, so the
/// posted receives run out long before the posted bytes do.
#[test]
fn psh_on_every_segment_large_receives_window_kept() {
    stream_window_kept("psh-every-large", &[256 * 1024; 4], Psh::Every);
}

/// No PSH at all: the receives fill whole, then staging; the window closes after what was
/// posted plus the allowance.
#[test]
fn psh_on_no_segment_window_kept() {
    stream_window_kept("psh-none", &[256 * 1024; 4], Psh::None);
}

/// PSH on every third segment (the end of a burst), 64 KiB receives.
#[test]
fn psh_now_and_then_window_kept() {
    stream_window_kept("psh-mixed", &[64 * 1024; 8], Psh::EveryThird);
}

/// Message framing: the test's stream of `count` messages of `len` bytes (a header, then
/// bytes that tell message and offset apart).
fn messages(len: u32, count: u32) -> (Vec<u8>, Vec<u8>) {
    let (mut stream, mut payloads) = (Vec::new(), Vec::new());
    for i in 0..count {
        stream.extend_from_slice(&len.to_le_bytes());
        stream.extend_from_slice(&i.to_le_bytes());
        let body: Vec<u8> = (0..len)
            .map(|j| (i.wrapping_mul(131).wrapping_add(j.wrapping_mul(7)) % 251) as u8)
            .collect();
        stream.extend_from_slice(&body);
        payloads.extend_from_slice(&body);
    }
    (stream, payloads)
}

/// A message-framed QP posts `wrs` receives of `wr_len` bytes and stops reading; the test
/// sends messages of 1000 bytes (each completes a receive, however large: a short message
/// gives up the rest of its receive), PSH as `psh` says ([`window_kept`]). The device can
/// take a message per receive, its message buffer, the staging allowance and the message in
/// progress. Then the guest reads every whole message, intact and in order.
fn message_window_kept(name: &str, wr_len: u64, wrs: usize, psh: Psh) {
    const LEN: u32 = 1000;
    let framed = 8 + LEN;
    let mut p = Peer::established_framed(name, FRAMING_MESSAGE);
    p.post_recvs(&vec![wr_len; wrs]);
    let right = opened(&mut p);
    let bound = 1 + wrs as u32 * framed + MESSAGE_BUFFER + STAGING + framed + 127;
    let (stream, payloads) = messages(LEN, bound / framed + 2);
    let nxt = window_kept(&mut p, &stream, right, bound, psh);
    let whole = ((nxt - 1) / framed) as usize;
    assert!(whole >= wrs, "{whole} messages");
    for _ in 0..wrs {
        assert_eq!(p.recv_done(), CQE_STATUS_SUCCESS, "a posted receive");
    }
    let mut done = wrs;
    while done < whole {
        let n = (whole - done).min(32);
        p.post_recvs(&vec![LEN as u64; n]);
        for _ in 0..n {
            assert_eq!(p.recv_done(), CQE_STATUS_SUCCESS, "a message");
        }
        done += n;
    }
    assert_eq!(p.received.len(), whole * LEN as usize, "bytes received");
    assert!(
        p.received == payloads[..whole * LEN as usize],
        "the messages arrived intact, in order"
    );
}

/// Message framing, PSH on every segment, receives just large enough for a message.
#[test]
fn message_framing_small_receives_window_kept() {
    message_window_kept("msg-small", 1000, 8, Psh::Every);
}

/// Message framing, PSH now and then, 64 KiB receives that each take one 1000-byte
/// message.
#[test]
fn message_framing_large_receives_window_kept() {
    message_window_kept("msg-large", 64 * 1024, 4, Psh::EveryThird);
}
