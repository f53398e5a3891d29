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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::super::config::Config;
    use super::super::super::io::{NoSpace, SendSource};
    use super::super::super::wire::{flags, Header, Options, Segment};
    use super::super::FourTuple;
    use super::*;

    const MS: Duration = Duration::from_millis(1);
    const PEER_ISS: u32 = 5000;

    struct Zeros;

    impl SendSource for Zeros {
        fn read(&mut self, _offset: u64, buf: &mut [u8]) {
            buf.fill(0);
        }
    }

    fn tuple() -> FourTuple {
        FourTuple {
            local: "fd00::1".parse().unwrap(),
            local_port: 1000,
            remote: "fd00::2".parse().unwrap(),
            remote_port: 2000,
        }
    }

    /// A segment from the peer (no options) acknowledging our sequence offset `ack` (the
    /// ISS is 0).
    fn from_peer(c: &mut Connection, fl: u8, ack: u64, now: Instant) {
        let t = tuple();
        let seg = Segment {
            src: t.remote,
            dst: t.local,
            header: Header {
                src_port: t.remote_port,
                dst_port: t.local_port,
                seq: PEER_ISS.wrapping_add(1 - (fl & flags::SYN != 0) as u32),
                ack: ack as u32,
                flags: fl,
                window: u16::MAX,
                urgent: 0,
                options: Options {
                    mss: (fl & flags::SYN != 0).then_some(1000),
                    ..Options::default()
                },
            },
            payload: &[],
        };
        c.on_segment(&seg, now, &mut NoSpace);
        c.transmit_all(now, &mut Zeros);
    }

    /// A connection whose handshake measured an RTT of 100 ms: SRTT 100 ms, RTTVAR 50 ms,
    /// RTO 300 ms (RFC 6298 §2.2). No timestamps: RTT samples come from timed segments.
    fn established(cfg: Config, t0: Instant) -> Connection {
        let mut c = Connection::connect(tuple(), 0, t0, &cfg);
        assert_eq!(c.transmit_all(t0, &mut Zeros).len(), 1);
        from_peer(&mut c, flags::SYN | flags::ACK, 1, t0 + 100 * MS);
        assert_eq!(c.state(), State::Established);
        assert_eq!(c.rto(), 300 * MS);
        c
    }

    fn config() -> Config {
        Config {
            timestamps: false,
            ..Config::default()
        }
    }

    #[test]
    fn rto_backs_off_on_expiry_and_resets_on_a_new_sample() {
        let t0 = Instant::now();
        let mut c = established(config(), t0);
        let smss = c.smss() as u64;
        let t1 = t0 + Duration::from_secs(1);
        c.queue_send(2 * smss).unwrap();
        assert_eq!(c.transmit_all(t1, &mut Zeros).len(), 2);
        // RFC 6298 §5.1: armed when data is sent, for the RTO.
        assert_eq!(c.next_deadline(), Some(t1 + 300 * MS));
        // §5.4-5.6: on expiry the earliest segment goes again and the timer doubles.
        let mut at = t1 + 300 * MS;
        for rto in [600, 1200] {
            c.poll(at);
            let sent = c.transmit_all(at, &mut Zeros);
            assert_eq!(sent.len(), 1);
            assert_eq!(c.rto(), rto * MS);
            assert_eq!(c.next_deadline(), Some(at + rto * MS));
            at += rto * MS;
        }
        assert_eq!(c.stats().timeouts, 2);
        assert_eq!(c.stats().retransmitted_segments, 2);
        // The retransmitted segment is acknowledged: no sample from it (Karn), so the
        // backed-off RTO stays, and the timer restarts with it for what is left (§5.3).
        let t2 = t1 + 1000 * MS;
        from_peer(&mut c, flags::ACK, 1 + smss, t2);
        assert_eq!(c.rto(), 1200 * MS);
        assert_eq!(c.next_deadline(), Some(t2 + 1200 * MS));
        from_peer(&mut c, flags::ACK, 1 + 2 * smss, t2);
        assert_eq!(c.next_deadline(), None);
        // New data timed at 50 ms: the sample ends the backoff (§5.7) and updates
        // the estimate: SRTT 93.75 ms, RTTVAR 50 ms.
        c.queue_send(smss).unwrap();
        assert_eq!(c.transmit_all(t2, &mut Zeros).len(), 1);
        from_peer(&mut c, flags::ACK, 1 + 3 * smss, t2 + 50 * MS);
        assert_eq!(c.rto(), Duration::from_micros(293_750));
    }

    #[test]
    fn unanswered_retransmissions_time_the_connection_out() {
        let t0 = Instant::now();
        let cfg = Config {
            max_retries: 2,
            ..config()
        };
        let mut c = established(cfg, t0);
        c.queue_send(100).unwrap();
        c.transmit_all(t0, &mut Zeros);
        for _ in 0..3 {
            let at = c.next_deadline().expect("the retransmission timer runs");
            c.poll(at);
            c.transmit_all(at, &mut Zeros);
        }
        assert_eq!(c.state(), State::Closed);
        assert!(std::iter::from_fn(|| c.pop_event()).any(|e| e == Event::TimedOut));
        assert_eq!(c.stats().timeouts, 2);
        assert_eq!(c.next_deadline(), None);
    }

    #[test]
    fn zero_window_probes_back_off() {
        let t0 = Instant::now();
        let mut c = established(config(), t0);
        // The peer shuts its window with data queued.
        c.snd_wnd = 0;
        c.queue_send(100).unwrap();
        assert!(c.transmit_all(t0, &mut Zeros).is_empty());
        let first = c.next_deadline().expect("persist timer");
        assert_eq!(first, t0 + 300 * MS);
        c.poll(first);
        // One byte probes the window; the retransmission timer now watches it.
        let probe = c.transmit_all(first, &mut Zeros);
        assert_eq!(probe.len(), 1);
        assert_eq!(c.stats().window_probes, 1);
        assert_eq!(c.persist_backoff, 1);
    }

    #[test]
    fn time_wait_lasts_two_msl() {
        let t0 = Instant::now();
        let cfg = config();
        let mut c = established(cfg, t0);
        c.enter_time_wait(t0);
        assert_eq!(c.next_deadline(), Some(t0 + cfg.msl * 2));
        c.poll(t0 + cfg.msl * 2 - MS);
        assert_eq!(c.state(), State::TimeWait);
        c.poll(t0 + cfg.msl * 2);
        assert_eq!(c.state(), State::Closed);
        assert_eq!(c.pop_event(), Some(Event::Established));
        assert_eq!(c.pop_event(), Some(Event::Closed));
    }
}
