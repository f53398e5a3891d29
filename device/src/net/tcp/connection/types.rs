//! What a connection exchanges with its user: its identity, states, events, segments to
//! send, counters.

use std::net::Ipv6Addr;

use super::super::wire::Segment;

/// A connection's addresses and ports, from the device's side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FourTuple {
    pub local: Ipv6Addr,
    pub local_port: u16,
    pub remote: Ipv6Addr,
    pub remote_port: u16,
}

impl FourTuple {
    /// The connection an arriving segment belongs to.
    pub fn of_incoming(seg: &Segment) -> FourTuple {
        FourTuple {
            local: seg.dst,
            local_port: seg.header.dst_port,
            remote: seg.src,
            remote_port: seg.header.src_port,
        }
    }
}

/// RFC 9293 states (LISTEN lives in [`crate::net::tcp::Listener`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Closed,
    SynSent,
    SynReceived,
    Established,
    FinWait1,
    FinWait2,
    CloseWait,
    Closing,
    LastAck,
    TimeWait,
}

/// What the application learns. Stream offsets count data bytes from 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The handshake completed.
    Established,
    /// The peer acknowledged every byte below `upto`: sends covering them are complete.
    Acked { upto: u64 },
    /// The sink now holds every byte below `upto` in order. `push` is the highest
    /// boundary of a segment with PSH at or below `upto` not reported before.
    DataArrived { upto: u64, push: Option<u64> },
    /// The peer sent FIN and every byte before it is in the sink.
    PeerClosed,
    /// The peer reset the connection (or refused it). The connection is closed.
    Reset,
    /// Retransmissions (or the handshake, or keepalive probes) went unanswered; the
    /// connection is closed.
    TimedOut,
    /// An ICMP destination unreachable answered the SYN ([`super::Connection::unreachable`]);
    /// the connection is closed.
    Unreachable,
    /// The connection is closed (both FINs acknowledged and TIME_WAIT over, or aborted).
    /// After `Reset`, `TimedOut` or `Unreachable` no `Closed` follows.
    Closed,
}

/// A segment to send: the TCP bytes (checksum included) and the IPv6 addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    pub segment: Vec<u8>,
    /// 0, or the payload size of the segments this super-segment stands for (its payload
    /// is longer: [`crate::net::tcp::Config::gso`]); the link or [`crate::net::gso`] cuts it.
    pub gso: u16,
}

/// The most payload a super-segment carries: the IPv6 payload length (16 bits) less the
/// largest TCP header.
pub const GSO_MAX_PAYLOAD: u64 = 65535 - 60;

/// Counters of one connection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnStats {
    pub segments_in: u64,
    pub segments_out: u64,
    pub bytes_out: u64,
    pub retransmitted_segments: u64,
    pub retransmitted_bytes: u64,
    pub timeouts: u64,
    pub fast_recoveries: u64,
    pub dup_acks_in: u64,
    pub challenge_acks: u64,
    pub paws_rejected: u64,
    pub unacceptable: u64,
    pub out_of_order: u64,
    pub dropped_bytes: u64,
    /// Windows withdrawn because the memory pool refused bytes inside them
    /// ([`super::Connection::retract`]).
    pub window_retractions: u64,
    pub window_probes: u64,
    /// Resets sent.
    pub resets_out: u64,
    /// Segments whose data had all been received before.
    pub dup_segments: u64,
    /// 1 if the connection went from SYN-SENT or SYN-RECEIVED straight to CLOSED.
    pub attempt_fails: u64,
    /// 1 if the peer reset it while synchronized (ESTABLISHED through LAST-ACK).
    pub estab_resets: u64,
    /// 1 if it was dropped because retransmissions or keepalives went unanswered.
    pub gave_up: u64,
    /// 1 if it was orphaned ([`super::Connection::orphan`]) and then reset because new data
    /// arrived that nobody would read.
    pub orphan_resets: u64,
}
/// Why an application call was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallError {
    /// The connection is closing or closed for this direction.
    Closing,
}
