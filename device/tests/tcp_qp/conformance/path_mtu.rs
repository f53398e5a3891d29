//! Path MTU discovery (RFC 8201) on live and new connections.

use crate::script::*;

/// Every packet the device sent so far fits `mtu` bytes and none is a fragment: TCP does
/// not rely on IPv6 fragmentation (RFC 8201 §5.2).
fn all_fit(p: &Peer, mtu: usize) {
    for f in &p.log {
        match f {
            Frame::Fragment(n) => panic!("the device fragmented a packet ({n} bytes)"),
            Frame::Tcp(s) => assert!(s.ip_len <= mtu, "{} bytes > {mtu}", s.ip_len),
            _ => {}
        }
    }
}

/// An established connection on which the guest sends `n` bytes of its stream: segments of
/// the link's MSS (1440) go out, then a packet too big reporting `mtu` makes the device
/// send them all again at once, in segments of 1220 (what fits 1280, the least a path MTU
/// is taken to be). From the packet too big on, `p.log` holds what the device sends.
fn narrowed(name: &str, n: u32, mtu: u32) -> Peer {
    let mut p = Peer::established(name);
    p.run(&format!("@send {n}"));
    expect_stream(&mut p, 1, n, 1440);
    p.packet_too_big(mtu);
    p.log.clear();
    expect_stream(&mut p, 1, n, 1220);
    p
}

/// The guest sends 3000 more bytes, from relative sequence `from`: segments of 1220, and
/// nothing the device sent since `p.log` was cleared is larger than 1280 bytes or a
/// fragment.
fn more_fits(p: &mut Peer, from: u32) {
    p.run("@send 3000");
    expect_stream(p, from, 3000, 1220);
    all_fit(p, 1280);
}

/// `n` bytes of the guest's stream from relative sequence `from`: full segments of `mss`
/// bytes, then the rest in one with PSH.
pub(super) fn expect_stream(p: &mut Peer, from: u32, n: u32, mss: u32) {
    let full = (n - 1) / mss;
    p.expect_data(from, full as usize, mss as usize);
    let (start, end) = (from + full * mss, from + n);
    p.run(&format!(
        "< P. {start}:{end}({}) ack 1 win 512",
        end - start
    ));
}

/// RFC 8201 §4 and §5.2, RFC 9293 §3.7.3: a packet too big lowers the path MTU of a live
/// connection: what was in flight is sent again at once in segments that fit (1220
/// bytes for 1280), not fragmented.
#[test]
fn packet_too_big_on_a_live_connection() {
    let mut p = narrowed("ptb-live", 4000, 1280);
    p.run("> . 1:1(0) ack 4001 win 1024");
    p.run("@sent");
    p.log.clear();
    more_fits(&mut p, 4001);
}

/// RFC 8201 §5.2: a new connection to a destination whose path MTU was lowered starts
/// with segments that fit it (while its SYN still announces the MSS of the link, RFC
/// 9293 §3.7.1): 1220 bytes, never IPv6 fragments.
#[test]
fn packet_too_big_applies_to_new_connections() {
    let mut p = narrowed("ptb-new", 2000, 1280);
    p.log.clear();
    p.new_connection(PEER_PORT + 1);
    p.run(
        "
        < S 0:0(0) win 65535 <mss 1440,sackOK,TS val * ecr 0,wscale 7>
        > S. 0:0(0) ack 1 win 65535 <mss 1440,sackOK,nop,wscale 7>
        < . 1:1(0) ack 1 win 512
        @connected
        ",
    );
    more_fits(&mut p, 1);
}

/// RFC 8201 §4: a packet too big reporting less than the IPv6 minimum MTU lowers the
/// path MTU to 1280 and no further (segments of 1220 bytes, never smaller, never
/// fragmented); at 1280 another such report is ignored: nothing is sent again.
#[test]
fn packet_too_big_below_1280() {
    let mut p = narrowed("ptb-small", 2000, 600);
    p.packet_too_big(500);
    p.run("< nothing");
    all_fit(&p, 1280);
}
