//! The device's TCP counters (QUERY_STATS indices `STAT_TCP_*` of the ABI; the names
//! follow RFC 4022's tcp group where one exists). [`super::ConnectionTable`] keeps them:
//! what happens to a segment before it reaches a connection (demultiplexing, listeners,
//! stateless resets and cookies) is counted there as it happens, and each connection's own
//! counters ([`super::ConnStats`]) are added in when the engine hands the connection back
//! ([`super::ConnectionTable::update`] or [`super::ConnectionTable::remove`], which the
//! engine calls after anything happened to it).

use super::connection::ConnStats;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TcpStats {
    /// Connections opened by CONNECT (SYN sent).
    pub active_opens: u64,
    /// Connections opened by a listener: a SYN took a half-open connection, or an ACK
    /// brought back a valid SYN cookie.
    pub passive_opens: u64,
    /// Connections that went from SYN-SENT or SYN-RECEIVED straight to CLOSED (refused,
    /// reset, timed out, or aborted before established; RFC 4022 tcpAttemptFails).
    pub attempt_fails: u64,
    /// Synchronized connections (ESTABLISHED through LAST-ACK) reset by the peer.
    pub estab_resets: u64,
    /// Segments received: parsed with a valid checksum for one of the device's
    /// addresses and handed to the table, whatever became of them.
    pub segs_in: u64,
    /// Segments sent, retransmissions included (the table's stateless replies too).
    pub segs_out: u64,
    /// Segments retransmitted (SYN, SYN-ACK, data and FIN).
    pub retrans_segs: u64,
    /// Resets sent (by connections and for segments no connection took).
    pub rsts_out: u64,
    /// Fast retransmit / recovery episodes entered (duplicate ACKs or SACK).
    pub fast_retransmits: u64,
    /// Retransmission timeouts that fired.
    pub rto_timeouts: u64,
    /// Segments whose data landed beyond the next expected byte (placed or buffered).
    pub ooo_segs: u64,
    /// Segments whose data was all received before.
    pub dup_segs: u64,
    /// Challenge ACKs sent (RFC 5961).
    pub challenge_acks: u64,
    /// SYN-ACKs sent with a SYN cookie (the backlog was full).
    pub syn_cookies: u64,
    /// SYNs dropped by a listener with a full backlog and no cookies, and ACKs whose
    /// cookie was invalid or too old.
    pub listen_drops: u64,
    /// Connections dropped because retransmissions or keepalive probes went unanswered.
    pub timeouts: u64,
    /// Connections orphaned: their owner closed them gracefully and went away, and they
    /// finished the close by themselves ([`super::ConnectionTable::orphan`]).
    pub orphans: u64,
    /// Connections that were to be orphaned, or were, and were reset instead: the table
    /// held its maximum of orphans already (Linux: TCPAbortOnMemory), or new data arrived
    /// for an orphan (TCPAbortOnData).
    pub orphan_aborts: u64,
}

impl TcpStats {
    /// Adds what a connection counted since `before`.
    pub(crate) fn add_delta(&mut self, now: &ConnStats, before: &ConnStats) {
        fn d(a: u64, b: u64) -> u64 {
            a.saturating_sub(b)
        }
        self.segs_out += d(now.segments_out, before.segments_out);
        self.retrans_segs += d(now.retransmitted_segments, before.retransmitted_segments);
        self.rsts_out += d(now.resets_out, before.resets_out);
        self.fast_retransmits += d(now.fast_recoveries, before.fast_recoveries);
        self.rto_timeouts += d(now.timeouts, before.timeouts);
        self.ooo_segs += d(now.out_of_order, before.out_of_order);
        self.dup_segs += d(now.dup_segments, before.dup_segments);
        self.challenge_acks += d(now.challenge_acks, before.challenge_acks);
        self.attempt_fails += d(now.attempt_fails, before.attempt_fails);
        self.estab_resets += d(now.estab_resets, before.estab_resets);
        self.timeouts += d(now.gave_up, before.gave_up);
        self.orphan_aborts += d(now.orphan_resets, before.orphan_resets);
    }
}
