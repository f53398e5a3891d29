//! A connection's timers: retransmission (RFC 6298), persist (zero-window probes),
//! delayed ACK, keepalive, TIME-WAIT (2 MSL), an orphan's FIN-WAIT-2 bound, and the kick
//! that makes output due after the path MTU dropped. Each is a deadline in the
//! connection; [`Connection::poll`] runs those due.

use std::time::Instant;

use super::{Connection, Event, State};

impl Connection {
    pub(super) fn stop_timers(&mut self) {
        self.rto_at = None;
        self.persist_at = None;
        self.delack_at = None;
        self.keepalive_at = None;
        self.time_wait_at = None;
        self.fin_wait2_at = None;
        self.kick_at = None;
        self.probe_pending = false;
        self.keepalive_pending = false;
    }

    pub(super) fn enter_time_wait(&mut self, now: Instant) {
        self.state = State::TimeWait;
        self.stop_timers();
        self.time_wait_at = Some(now + self.cfg.msl * 2);
    }

    pub(super) fn arm_keepalive(&mut self, now: Instant) {
        if let Some(k) = self.cfg.keepalive {
            if self.synchronized() && self.state != State::TimeWait {
                self.keepalive_at = Some(now + k.idle);
                self.keepalive_sent = 0;
            }
        }
    }

    // ---- timers -------------------------------------------------------------------

    /// When [`Connection::poll`] has work next.
    pub fn next_deadline(&self) -> Option<Instant> {
        [
            self.rto_at,
            self.persist_at,
            self.delack_at,
            self.keepalive_at,
            self.time_wait_at,
            self.fin_wait2_at,
            self.kick_at,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Runs the timers due at `now`.
    pub fn poll(&mut self, now: Instant) {
        if self.kick_at.is_some_and(|t| t <= now) {
            self.kick_at = None;
        }
        if self.time_wait_at.is_some_and(|t| t <= now) {
            self.time_wait_at = None;
            self.finish(Event::Closed);
            return;
        }
        if self.fin_wait2_at.is_some_and(|t| t <= now) {
            // An orphan's peer never closed: drop the connection silently, as Linux does
            // when tcp_fin_timeout runs out (a late segment from the peer then meets no
            // connection and is answered with a reset).
            self.fin_wait2_at = None;
            self.finish(Event::Closed);
            return;
        }
        if self.delack_at.is_some_and(|t| t <= now) {
            self.delack_at = None;
            self.ack_now = true;
        }
        if self.rto_at.is_some_and(|t| t <= now) {
            self.rto_at = None;
            self.on_rto(now);
        }
        if self.persist_at.is_some_and(|t| t <= now) {
            self.persist_at = None;
            if self.snd_room() == 0 && self.una == self.nxt && self.nxt < self.end_all() {
                self.probe_pending = true;
                self.persist_backoff = (self.persist_backoff + 1).min(16);
                self.stats.window_probes += 1;
            }
        }
        if self.keepalive_at.is_some_and(|t| t <= now) {
            self.keepalive_at = None;
            if let Some(k) = self.cfg.keepalive {
                if self.una < self.nxt {
                    // Data outstanding: retransmissions watch the peer, not keepalive.
                    self.keepalive_at = Some(now + k.idle);
                    return;
                }
                if self.keepalive_sent >= k.probes {
                    self.finish(Event::TimedOut);
                    return;
                }
                self.keepalive_sent += 1;
                self.keepalive_pending = true;
                self.keepalive_at = Some(now + k.interval);
            }
        }
    }

    fn on_rto(&mut self, now: Instant) {
        match self.state {
            State::SynSent | State::SynReceived => {
                self.retries += 1;
                if self.retries > self.cfg.syn_retries {
                    self.finish(Event::TimedOut);
                    return;
                }
                self.rtt.back_off();
                self.syn_retransmitted = true;
                self.rtt_probe = None;
                self.nxt = 0;
                self.stats.timeouts += 1;
            }
            State::Closed | State::TimeWait => {}
            _ if self.una < self.nxt => {
                self.retries += 1;
                if self.retries > self.cfg.max_retries {
                    self.finish(Event::TimedOut);
                    return;
                }
                self.rtt.back_off();
                self.rtt_probe = None;
                self.stats.timeouts += 1;
                let flight = self.flight();
                // A window probe unanswered is no congestion.
                let window_shut = self.snd_wnd == 0;
                self.loss.on_timeout(flight, window_shut, &mut self.cc);
            }
            _ => {}
        }
        let _ = now;
    }

    pub(super) fn arm_rto(&mut self, now: Instant) {
        if self.rto_at.is_none() {
            self.rto_at = Some(now + self.rtt.rto());
        }
    }
}
