//! The calls of the connection's user on the sending side and on its life: sends queued,
//! close, abort, orphaning, path MTU changes. (Receive space posted and deliveries taken
//! are the receiving side's, in `receive`.)

use std::time::Instant;

use super::{default_mss, path_mss, CallError, Connection, Event, State};

impl Connection {
    /// Appends `len` bytes to the send stream (the [`SendSource`](super::super::SendSource) must
    /// serve them at their offsets until they are acknowledged).
    pub fn queue_send(&mut self, len: u64) -> Result<(), CallError> {
        if self.fin_queued || matches!(self.state, State::Closed | State::TimeWait) {
            return Err(CallError::Closing);
        }
        self.queued += len;
        Ok(())
    }

    /// Sends FIN after the queued data (RFC 9293 CLOSE).
    pub fn close(&mut self) {
        match self.state {
            State::SynSent => self.finish(Event::Closed),
            State::SynReceived => {
                // FIN-WAIT-1 once established (RFC 9293 CLOSE in SYN-RECEIVED: queued
                // sends go first).
                self.fin_queued = true;
            }
            State::Established => {
                self.fin_queued = true;
                self.state = State::FinWait1;
            }
            State::CloseWait => {
                self.fin_queued = true;
                self.state = State::LastAck;
            }
            _ => {}
        }
    }

    /// An ICMP destination unreachable quoted one of this connection's segments whose
    /// sequence number was `seq`. While the SYN is unanswered it ends the attempt
    /// ([`Event::Unreachable`], no reset: the peer never knew of it), as Linux fails a
    /// `connect` at once (RFC 1122 §4.2.3.9 lets an application hear of such errors).
    /// Only a quote of the SYN itself counts (its sequence number is the ISS, which an
    /// off-path sender cannot know, RFC 5927 §4.1); later on, and for anything else, it
    /// changes nothing: a synchronized connection rides out transient errors. True if it
    /// ended the attempt.
    pub fn unreachable(&mut self, seq: u32) -> bool {
        if self.state != State::SynSent || seq != self.iss {
            return false;
        }
        self.finish(Event::Unreachable);
        true
    }

    /// Aborts: a reset is sent if the peer knows of the connection (RFC 9293 ABORT).
    pub fn abort(&mut self) {
        match self.state {
            State::SynSent | State::Closed => self.finish(Event::Closed),
            State::TimeWait => self.finish(Event::Closed),
            _ => {
                self.rst_pending = true;
                self.count_close(Event::Closed);
                self.state = State::Closed;
                self.stop_timers();
                self.events.push_back(Event::Closed);
            }
        }
    }

    /// Its owner went away after closing it gracefully ([`Connection::may_orphan`]; the
    /// caller checks): the connection finishes its close by itself, as Linux finishes an
    /// orphaned socket. Its FIN is retransmitted until acknowledged; FIN-WAIT-2 lasts at
    /// most [`Config::fin_timeout`](super::super::Config::fin_timeout) (then it closes
    /// without a word); TIME-WAIT as usual; new data from the peer, which nobody would
    /// read, is answered with a reset and ends it (RFC 9293 §3.10.7.4 and RFC 1122
    /// §4.2.2.13, as Linux does). From now on it never reads its
    /// [`SendSource`](super::super::SendSource) (every byte of data was acknowledged) and
    /// never delivers to its [`RecvSink`](super::super::RecvSink).
    pub fn orphan(&mut self, now: Instant) {
        self.orphaned = true;
        if self.state == State::FinWait2 {
            self.fin_wait2_at = Some(now + self.cfg.fin_timeout);
        }
    }

    /// Keepalive on (probes after `k.idle` of silence) or off, from now: a peer that is
    /// gone is then found and the connection times out rather than waiting forever.
    pub fn set_keepalive(&mut self, k: Option<super::super::Keepalive>, now: Instant) {
        self.cfg.keepalive = k;
        self.keepalive_at = None;
        self.keepalive_pending = false;
        self.arm_keepalive(now);
    }

    /// The path MTU toward the peer changed: segments are cut to fit.
    pub fn set_path_mss(&mut self, mss: u16) {
        let floor = default_mss(&self.tuple.remote).min(self.cfg.mss);
        self.mss_limit = mss.clamp(floor, self.cfg.mss);
        self.cc.set_mss(self.smss());
    }

    /// The path MTU toward the peer is now `mtu`: lowered by a packet too big (RFC 8201,
    /// RFC 9293 §3.7.3), or back up when that expired (RFC 8201 §4; segments then grow,
    /// nothing else happens). Segments are cut to fit from now on; if that made them smaller, what is
    /// in flight and not SACKed was too big to arrive (the PTB said so for one segment;
    /// the others were no smaller), so it is retransmitted at once, re-segmented to the
    /// new size, as far as cwnd allows; cwnd is not reduced (no congestion). The output
    /// is due at `now` ([`Connection::next_deadline`]).
    pub fn path_mtu_changed(&mut self, mtu: usize, now: Instant) {
        // The IP and TCP headers; options come off in smss().
        let mss = path_mss(mtu, &self.tuple.remote);
        let before = self.smss();
        self.set_path_mss(mss);
        if self.smss() >= before || !self.synchronized() || self.una >= self.nxt {
            return;
        }
        self.loss.on_path_mtu_drop(self.flight());
        // Karn: no RTT sample from what is sent again.
        self.rtt_probe = None;
        self.kick_at = Some(now);
    }
}
