//! Destination unreachable about the device's own TCP segments: what the stack hands TCP
//! so that a connection attempt a router (or the peer) refused fails at once, instead of
//! retrying its SYN until it times out. The stack only reads the quote; whether it
//! concerns a live attempt is TCP's call (`Connection::unreachable`).

use std::net::Ipv6Addr;

use super::icmpv6::parse_quoted;
use super::Stack;
use crate::net::wire::{self, proto, IPV6_LEN};

/// Quotes kept between two passes of the engine at most: enough for any burst a real
/// router sends, bounded against a flood of forged errors (the rest are dropped: a
/// connection then times out as before).
const MAX_PENDING: usize = 64;

/// One of the device's TCP segments, quoted by a destination unreachable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unreachable {
    /// The device's address and port (the quoted packet's source).
    pub local: Ipv6Addr,
    pub local_port: u16,
    /// Where the segment was going.
    pub remote: Ipv6Addr,
    pub remote_port: u16,
    /// The quoted segment's sequence number.
    pub seq: u32,
}

impl Stack {
    /// An ICMPv6 destination unreachable's body (the quoted packet) about one of ours.
    pub(super) fn unreachable_v6(&mut self, body: &[u8]) {
        let Ok((src, dst)) = parse_quoted(body) else {
            return;
        };
        // The device sends TCP with no extension headers.
        if body[6] == proto::TCP {
            self.note_unreachable(src, dst, &body[IPV6_LEN..]);
        }
    }

    /// An ICMPv4 destination unreachable's body (the quoted packet) about one of ours.
    pub(super) fn unreachable_v4(&mut self, body: &[u8]) {
        let Ok((src, dst, protocol)) = wire::parse_quoted_ipv4(body) else {
            return;
        };
        let ihl = (body[0] & 0x0f) as usize * 4;
        if protocol == proto::TCP && body.len() >= ihl {
            self.note_unreachable(src, dst, &body[ihl..]);
        }
    }

    /// The quoted TCP header's first 8 bytes (ports and sequence number, all RFC 792 and
    /// RFC 4443 promise) from one of the device's own addresses.
    fn note_unreachable(&mut self, src: Ipv6Addr, dst: Ipv6Addr, tcp: &[u8]) {
        if tcp.len() < 8 || !self.is_own_unicast(&src) || self.unreachable.len() >= MAX_PENDING {
            return;
        }
        self.unreachable.push(Unreachable {
            local: src,
            local_port: u16::from_be_bytes([tcp[0], tcp[1]]),
            remote: dst,
            remote_port: u16::from_be_bytes([tcp[2], tcp[3]]),
            seq: u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]),
        });
    }

    /// The destination unreachables about the device's TCP segments since the last call,
    /// for TCP ([`Unreachable`]).
    pub fn take_unreachable(&mut self) -> Vec<Unreachable> {
        std::mem::take(&mut self.unreachable)
    }
}
