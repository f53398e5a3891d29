//! Segment arrival (RFC 9293 §3.10.7): the handshake's segments, acceptability, RST and
//! SYN in a synchronized state (RFC 5961), PAWS (RFC 7323 §5), and the ACK field — the
//! send window, RTT samples, and what loss recovery learns from it. Data and FIN go on
//! to `receive`.

use std::time::{Duration, Instant};

use super::super::io::RecvSink;
use super::super::ranges::{seq_lt, unwrap_seq};
use super::super::wire::{self, Header, Segment};
use super::{default_mss, Connection, Event, State};

/// PAWS: a TS.Recent idle this long is no longer trusted (RFC 7323 §5.5).
const PAWS_IDLE: Duration = Duration::from_secs(24 * 24 * 3600);

impl Connection {
    pub(super) fn challenge_ack(&mut self, now: Instant) {
        // RFC 5961 §7: a per-connection budget per second.
        match self.challenge_window {
            Some(t) if now.saturating_duration_since(t) < Duration::from_secs(1) => {}
            _ => {
                self.challenge_window = Some(now);
                self.challenges = 0;
            }
        }
        if self.challenges < self.cfg.challenge_ack_limit {
            self.challenges += 1;
            self.stats.challenge_acks += 1;
            self.ack_now = true;
        }
    }

    /// Takes the options and sequence number of the peer's SYN.
    pub(super) fn take_syn(&mut self, syn: &Segment, now: Instant) {
        let h = &syn.header;
        self.irs = h.seq;
        self.peer_mss = h
            .options
            .mss
            .unwrap_or(default_mss(&self.tuple.remote))
            .max(64);
        if let (Some(ours), Some(theirs)) = (self.cfg.window_scale, h.options.window_scale) {
            self.rcv_shift = ours.min(wire::MAX_WINDOW_SHIFT);
            self.snd_shift = theirs;
            self.ws_ok = true;
        } else {
            self.rcv_shift = 0;
            self.snd_shift = 0;
            self.ws_ok = false;
        }
        self.sack_ok = self.cfg.sack && h.options.sack_permitted;
        self.ts_ok = self.cfg.timestamps && h.options.timestamps.is_some();
        if let Some((val, _)) = h.options.timestamps {
            self.ts_recent = val;
            self.ts_recent_at = Some(now);
        }
        // The window in a SYN is never scaled (RFC 7323 §2.2).
        self.snd_wnd = h.window as u64;
        self.max_snd_wnd = self.snd_wnd;
        self.snd_wl1 = h.seq;
        self.snd_wl2 = 0;
        self.last_ack_sent = 1;
        self.arm_keepalive(now);
    }

    /// Processes a segment of this connection (its checksum already verified by
    /// [`wire::parse`]). `sink` receives in-order data.
    pub fn on_segment(&mut self, seg: &Segment, now: Instant, sink: &mut dyn RecvSink) {
        let _stage = crate::stages::span(crate::stages::Stage::Protocol);
        self.stats.segments_in += 1;
        self.sink_space = sink.space();
        self.keep_promise();
        match self.state {
            State::Closed => {}
            State::SynSent => self.on_syn_sent(seg, now),
            _ => self.on_synchronized(seg, now, sink),
        }
        // Deliveries used some of the sink's space.
        self.sink_space = sink.space();
        self.keep_promise();
        if self.synchronized() {
            self.arm_keepalive(now);
        }
    }

    /// RFC 9293 §3.10.7.3.
    fn on_syn_sent(&mut self, seg: &Segment, now: Instant) {
        let h = &seg.header;
        let mut ack_ok = false;
        if h.ack_flag() {
            let a = h.ack.wrapping_sub(self.iss) as u64;
            if a == 0 || a > self.nxt {
                if !h.rst() {
                    self.reply_rst = Some(h.ack);
                }
                return;
            }
            ack_ok = true;
        }
        if h.rst() {
            if ack_ok {
                self.finish(Event::Reset);
            }
            return;
        }
        if !h.syn() {
            return;
        }
        self.take_syn(seg, now);
        self.adv_edge = 1 + self.syn_window;
        if ack_ok {
            // The peer's SYN-ACK: established.
            self.una = h.ack.wrapping_sub(self.iss) as u64;
            if let Some((_, ecr)) = h.options.timestamps.filter(|_| self.ts_ok) {
                self.rtt_sample_ts(ecr, now);
            } else if let Some((_, t0)) = self.rtt_probe.take() {
                self.rtt.sample(now.saturating_duration_since(t0));
            }
            self.rtt_probe = None;
            self.snd_wl2 = self.una;
            self.rto_at = None;
            self.retries = 0;
            self.state = State::Established;
            self.reset_congestion();
            self.events.push_back(Event::Established);
            self.ack_now = true;
            if self.una > 1 {
                // Cannot happen (only the SYN was sent); keep offsets sane.
                self.una = 1;
            }
        } else {
            // Simultaneous open: our SYN is answered by a SYN; SYN-ACK it.
            self.state = State::SynReceived;
            self.nxt = 0;
            self.rtt_probe = None;
        }
    }

    pub(super) fn rtt_sample_ts(&mut self, ecr: u32, now: Instant) {
        let d = self.ts_now(now).wrapping_sub(ecr);
        if ecr != 0 && d < 1 << 31 {
            self.rtt.sample(Duration::from_millis(d as u64));
        }
    }

    /// RFC 9293 §3.10.7.4, for every state from SYN-RECEIVED on.
    fn on_synchronized(&mut self, seg: &Segment, now: Instant, sink: &mut dyn RecvSink) {
        let h = seg.header;
        // A retransmitted SYN while our SYN-ACK is outstanding: send it again.
        if self.state == State::SynReceived
            && h.syn()
            && !h.ack_flag()
            && !h.rst()
            && h.seq == self.irs
        {
            if self.una == 0 {
                self.nxt = 0;
            }
            return;
        }
        let rcv_nxt = self.rcv_nxt();
        // PAWS (RFC 7323 §5.3).
        if self.ts_ok && !h.rst() {
            if let Some((val, _)) = h.options.timestamps {
                let fresh = self
                    .ts_recent_at
                    .is_some_and(|t| now.saturating_duration_since(t) < PAWS_IDLE);
                if fresh && seq_lt(val, self.ts_recent) {
                    self.stats.paws_rejected += 1;
                    self.ack_now = true;
                    return;
                }
            }
        }
        // First: is the segment in the window?
        let seg_off = unwrap_seq(h.seq, self.rcv_seq(rcv_nxt), rcv_nxt);
        let seg_len = seg.seg_len() as i64;
        let wnd = self.adv_edge.saturating_sub(rcv_nxt) as i64;
        let (nxt, edge) = (rcv_nxt as i64, rcv_nxt as i64 + wnd);
        let in_wnd = |x: i64| nxt <= x && x < edge;
        let acceptable = match (seg_len == 0, wnd == 0) {
            (true, true) => seg_off == nxt,
            (true, false) => in_wnd(seg_off),
            (false, true) => false,
            (false, false) => in_wnd(seg_off) || in_wnd(seg_off + seg_len - 1),
        };
        if !acceptable {
            self.stats.unacceptable += 1;
            if h.rst() {
                return;
            }
            if !seg.payload.is_empty() && seg_off + seg.payload.len() as i64 <= nxt {
                self.stats.dup_segments += 1;
            }
            self.ack_now = true;
            if self.state == State::TimeWait && h.fin() {
                // The peer's FIN again: our last ACK was lost. Restart 2 MSL (RFC 9293
                // §3.10.7.4, TIME-WAIT).
                self.time_wait_at = Some(now + self.cfg.msl * 2);
            }
            // A zero window still takes valid ACKs (RFC 9293 §3.10.7.4): a window probe
            // at RCV.NXT may carry news about our data.
            if wnd == 0 && seg_off == nxt && h.ack_flag() && self.state != State::SynReceived {
                self.on_ack(seg, now);
            }
            return;
        }
        // Second: RST (RFC 5961 §3.2).
        if h.rst() {
            if seg_off != nxt {
                self.challenge_ack(now);
                return;
            }
            match self.state {
                // Both sides have closed and every byte is acknowledged: TIME-WAIT runs its
                // course (RFC 1337 §3, against TIME-WAIT assassination). Such a reset is
                // common and harmless: the peer closed the connection when our last ACK
                // arrived and answers a duplicate of it (or of an older segment) with RST.
                State::TimeWait => {}
                // RFC 9293 §3.10.7.4: in CLOSING and LAST-ACK the user has closed and the
                // peer's FIN has come; a reset ends the connection without the "connection
                // reset" signal — provided no data of ours is lost (only our FIN was
                // unacknowledged).
                State::Closing | State::LastAck if self.acked() == self.queued => {
                    self.finish(Event::Closed)
                }
                _ => self.finish(Event::Reset),
            }
            return;
        }
        // Fourth: SYN in a synchronized state (RFC 5961 §4.2).
        if h.syn() {
            self.challenge_ack(now);
            return;
        }
        // Fifth: ACK.
        if !h.ack_flag() {
            return;
        }
        if self.state == State::SynReceived {
            let a = unwrap_seq(h.ack, self.snd_seq(self.una), self.una);
            if a > self.una as i64 && a <= self.nxt as i64 {
                self.state = if self.fin_queued {
                    State::FinWait1
                } else {
                    State::Established
                };
                self.reset_congestion();
                self.events.push_back(Event::Established);
                self.retries = 0;
            } else {
                self.reply_rst = Some(h.ack);
                return;
            }
        }
        // TS.Recent (RFC 7323 §4.3): from a segment at or below Last.ACK.sent.
        if self.ts_ok {
            if let Some((val, _)) = h.options.timestamps {
                if seg_off <= self.last_ack_sent as i64 && !seq_lt(val, self.ts_recent) {
                    self.ts_recent = val;
                    self.ts_recent_at = Some(now);
                }
            }
        }
        if !self.on_ack(seg, now) {
            return;
        }
        if self.state == State::Closed {
            return;
        }
        sink.acked(self.acked());
        if self.orphaned
            && matches!(self.state, State::FinWait1 | State::FinWait2)
            && !seg.payload.is_empty()
            && seg_off + seg.payload.len() as i64 > rcv_nxt as i64
        {
            // New data for an orphan: nobody will read it. RFC 1122 §4.2.2.13 and Linux
            // (TCPAbortOnData) answer with a reset, taking its sequence number from the
            // segment's ACK field (RFC 9293 §3.10.7.1), and drop the connection.
            self.reply_rst = Some(h.ack);
            self.stats.orphan_resets += 1;
            self.finish(Event::Closed);
            return;
        }
        // Seventh and eighth: data and FIN.
        match self.state {
            State::Established | State::FinWait1 | State::FinWait2 => {
                self.on_data(seg, seg_off, now, sink);
            }
            State::TimeWait => {
                if h.fin() {
                    // The peer's FIN again: our ACK was lost. ACK, restart 2 MSL.
                    self.ack_now = true;
                    self.time_wait_at = Some(now + self.cfg.msl * 2);
                }
            }
            _ => {
                if seg_len > 0 {
                    // Beyond the peer's FIN: nothing more can come; re-ACK.
                    self.ack_now = true;
                }
            }
        }
    }

    /// The ACK field (RFC 9293 fifth step, RFC 5961 §5). False if the segment must be
    /// dropped.
    fn on_ack(&mut self, seg: &Segment, now: Instant) -> bool {
        let h = &seg.header;
        let ack = unwrap_seq(h.ack, self.snd_seq(self.una), self.una);
        if ack > self.nxt as i64 {
            // Acknowledges what was never sent.
            self.ack_now = true;
            return false;
        }
        if ack < self.una as i64 - self.max_snd_wnd as i64 {
            self.challenge_ack(now);
            return false;
        }
        let old_wnd = self.snd_wnd;
        let window = (h.window as u64) << self.snd_shift;
        let mut window_changed = false;
        if ack >= self.una as i64
            && (seq_lt(self.snd_wl1, h.seq)
                || (self.snd_wl1 == h.seq && self.snd_wl2 as i64 <= ack))
        {
            self.snd_wnd = window;
            self.snd_wl1 = h.seq;
            self.snd_wl2 = ack as u64;
            self.max_snd_wnd = self.max_snd_wnd.max(window);
            window_changed = window != old_wnd;
            if window > 0 {
                self.persist_at = None;
                self.persist_backoff = 0;
            }
        }
        let mut new_sack = false;
        if self.sack_ok && !h.options.sack.is_empty() {
            let una_seq = self.snd_seq(self.una);
            let flight = self.flight();
            let cum_ack = ack.max(self.una as i64) as u64;
            new_sack = self.loss.on_sack(&h.options.sack, una_seq, flight, cum_ack);
        }
        if ack > self.una as i64 {
            let ack = ack as u64;
            self.on_new_ack(ack, h, now);
        } else if ack == self.una as i64 && self.una < self.nxt {
            if old_wnd == 0 && self.snd_wnd == 0 {
                // An answer to a window probe: the peer is alive.
                self.retries = 0;
            }
            let pure = seg.payload.is_empty() && !h.fin() && !h.syn();
            // With the window shut, repeated ACKs answer our probes: no loss signal.
            if pure && self.snd_wnd > 0 && (!window_changed || new_sack) {
                self.stats.dup_acks_in += 1;
                let flight = self.flight();
                if self.loss.on_dup_ack(flight, self.sack_ok, &mut self.cc) {
                    // Karn: no RTT sample from what is sent again.
                    self.rtt_probe = None;
                    self.stats.fast_recoveries += 1;
                }
            }
        }
        true
    }

    fn on_new_ack(&mut self, ack: u64, h: &Header, now: Instant) {
        // Bytes of data (and FIN) acknowledged; the SYN is no data for cwnd.
        let acked = ack - self.una.max(1).min(ack);
        // RTT: timestamps when both sides use them, else the timed segment (Karn).
        if self.cookie && self.una == 0 {
            // The SYN-ACK's timestamp came from the listener's cookie: no sample.
        } else if let Some((_, ecr)) = h.options.timestamps.filter(|_| self.ts_ok) {
            self.rtt_sample_ts(ecr, now);
        } else if let Some((end, t0)) = self.rtt_probe {
            if ack >= end {
                self.rtt.sample(now.saturating_duration_since(t0));
                self.rtt_probe = None;
            }
        }
        self.una = ack;
        if self.nxt < self.una {
            self.nxt = self.una;
        }
        self.retries = 0;
        let upto = self.acked();
        if upto > self.acked_reported {
            self.acked_reported = upto;
            self.events.push_back(Event::Acked { upto });
        }
        // Congestion control: loss recovery's while it lasts.
        let flight = self.flight();
        if self.loss.on_new_ack(flight, acked, &mut self.cc) {
            self.cc.on_ack(acked, now, self.rtt.srtt());
        }
        // Retransmission timer (RFC 6298 §5.2-5.3).
        self.rto_at = (self.una < self.nxt).then(|| now + self.rtt.rto());
        if self.una >= self.nxt {
            self.probe_pending = false;
        }
        // Our FIN acknowledged?
        if self.fin_queued && self.una == self.end_all() {
            match self.state {
                State::FinWait1 => {
                    self.state = State::FinWait2;
                    if self.orphaned {
                        self.fin_wait2_at = Some(now + self.cfg.fin_timeout);
                    }
                }
                State::Closing => self.enter_time_wait(now),
                State::LastAck => self.finish(Event::Closed),
                _ => {}
            }
        }
    }
}
