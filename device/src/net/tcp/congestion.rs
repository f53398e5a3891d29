//! Round-trip time estimation (RFC 6298) and congestion control: Reno (RFC 5681) and
//! CUBIC (RFC 9438). Windows are in bytes; the connection tells the controller what
//! happened (bytes acknowledged, a loss detected by duplicate ACKs or SACK, a timeout) and
//! reads `cwnd` and `ssthresh`.

use std::time::{Duration, Instant};

use super::config::CongestionKind;

/// RFC 6298 estimator. Samples come from timestamps or from one timed segment at a time
/// (never from a retransmitted one: Karn's algorithm is the caller's part).
#[derive(Debug, Clone)]
pub struct RttEstimator {
    srtt: Option<Duration>,
    rttvar: Duration,
    rto: Duration,
    backoff: u32,
    min: Duration,
    max: Duration,
}

/// Clock granularity G of RFC 6298 §2.
const GRANULARITY: Duration = Duration::from_millis(1);

impl RttEstimator {
    pub fn new(initial: Duration, min: Duration, max: Duration) -> RttEstimator {
        RttEstimator {
            srtt: None,
            rttvar: Duration::ZERO,
            rto: initial,
            backoff: 0,
            min,
            max,
        }
    }

    pub fn sample(&mut self, r: Duration) {
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(srtt) => {
                let diff = srtt.abs_diff(r);
                self.rttvar = self.rttvar * 3 / 4 + diff / 4;
                self.srtt = Some(srtt * 7 / 8 + r / 8);
            }
        }
        let srtt = self.srtt.expect("set above");
        self.rto = (srtt + GRANULARITY.max(self.rttvar * 4)).clamp(self.min, self.max);
        // A new sample ends the backoff (RFC 6298 §5.7 keeps it only until then).
        self.backoff = 0;
    }

    pub fn srtt(&self) -> Option<Duration> {
        self.srtt
    }

    /// The timeout to arm now, backoff included.
    pub fn rto(&self) -> Duration {
        let mut r = self.rto;
        for _ in 0..self.backoff {
            r = r.saturating_mul(2);
            if r >= self.max {
                return self.max;
            }
        }
        r.min(self.max)
    }

    /// Doubles the timeout (RFC 6298 §5.5).
    pub fn back_off(&mut self) {
        self.backoff = (self.backoff + 1).min(32);
    }

    pub fn backoff(&self) -> u32 {
        self.backoff
    }

    /// After a SYN was retransmitted and no sample was taken, data starts with 3 s
    /// (RFC 6298 §5.7).
    pub fn reset_after_syn_timeout(&mut self) {
        if self.srtt.is_none() {
            self.rto = Duration::from_secs(3).clamp(self.min, self.max);
        }
        self.backoff = 0;
    }
}

/// CUBIC's constants (RFC 9438 §4.1-4.2, §4.6).
const CUBIC_C: f64 = 0.4;
const CUBIC_BETA: f64 = 0.7;

#[derive(Debug, Clone)]
struct Cubic {
    /// W_max in segments.
    w_max: f64,
    k: f64,
    epoch: Option<Instant>,
    /// Reno-friendly estimate W_est in segments.
    w_est: f64,
    /// Fractional window growth carried between ACKs (bytes).
    carry: f64,
}

#[derive(Debug, Clone)]
pub struct Congestion {
    kind: CongestionKind,
    cwnd: u64,
    ssthresh: u64,
    mss: u64,
    /// Reno congestion avoidance: bytes acknowledged since cwnd last grew.
    acked_acc: u64,
    cubic: Cubic,
}

impl Congestion {
    pub fn new(kind: CongestionKind, mss: usize, initial_segments: u32) -> Congestion {
        let mss = mss.max(1) as u64;
        Congestion {
            kind,
            cwnd: initial_segments.max(1) as u64 * mss,
            ssthresh: u64::MAX,
            mss,
            acked_acc: 0,
            cubic: Cubic {
                w_max: 0.0,
                k: 0.0,
                epoch: None,
                w_est: 0.0,
                carry: 0.0,
            },
        }
    }

    pub fn kind(&self) -> CongestionKind {
        self.kind
    }

    pub fn cwnd(&self) -> u64 {
        self.cwnd
    }

    pub fn ssthresh(&self) -> u64 {
        self.ssthresh
    }

    pub fn set_mss(&mut self, mss: usize) {
        self.mss = mss.max(1) as u64;
    }

    /// Sets cwnd directly (recovery's inflation and deflation, RFC 6582).
    pub fn set_cwnd(&mut self, cwnd: u64) {
        self.cwnd = cwnd.max(self.mss);
    }

    /// One MSS after a SYN was retransmitted (RFC 5681 §3.1, RFC 6298 §5.7).
    pub fn syn_lost(&mut self) {
        self.cwnd = self.mss;
    }

    /// `acked` new bytes were acknowledged outside loss recovery (or during recovery from
    /// a timeout, which slow-starts).
    pub fn on_ack(&mut self, acked: u64, now: Instant, srtt: Option<Duration>) {
        if acked == 0 {
            return;
        }
        if self.cwnd < self.ssthresh {
            // Slow start with appropriate byte counting, L = 2 (RFC 3465).
            self.cwnd += acked.min(2 * self.mss);
            return;
        }
        match self.kind {
            CongestionKind::Reno => {
                self.acked_acc += acked;
                if self.acked_acc >= self.cwnd {
                    self.acked_acc -= self.cwnd;
                    self.cwnd += self.mss;
                }
            }
            CongestionKind::Cubic => self.cubic_ack(acked, now, srtt),
        }
    }

    fn cubic_ack(&mut self, acked: u64, now: Instant, srtt: Option<Duration>) {
        let mss = self.mss as f64;
        let cwnd = self.cwnd as f64 / mss;
        let c = &mut self.cubic;
        let epoch = match c.epoch {
            Some(e) => e,
            None => {
                // A new congestion avoidance epoch (RFC 9438 §4.2): K from W_max, or no
                // concave phase when the window is already past W_max.
                if cwnd < c.w_max {
                    c.k = ((c.w_max - cwnd) / CUBIC_C).cbrt();
                } else {
                    c.k = 0.0;
                    c.w_max = cwnd;
                }
                c.w_est = cwnd;
                c.epoch = Some(now);
                now
            }
        };
        let rtt = srtt.unwrap_or(Duration::from_millis(100)).as_secs_f64();
        let t = now.saturating_duration_since(epoch).as_secs_f64();
        let w = |t: f64| CUBIC_C * (t - c.k).powi(3) + c.w_max;
        // Reno-friendly region (§4.3), with alpha_cubic until W_est reaches W_max.
        let segs = acked as f64 / mss;
        let alpha = if c.w_est < c.w_max {
            3.0 * (1.0 - CUBIC_BETA) / (1.0 + CUBIC_BETA)
        } else {
            1.0
        };
        c.w_est += alpha * segs / cwnd;
        let target = w(t + rtt).clamp(cwnd, 1.5 * cwnd);
        let grow_bytes = if w(t) < c.w_est {
            // Reno-friendly: follow W_est.
            (c.w_est - cwnd).max(0.0) * mss
        } else {
            // Concave or convex region (§4.4, §4.5): (target - cwnd)/cwnd per segment.
            (target - cwnd) / cwnd * segs * mss
        };
        c.carry += grow_bytes;
        if c.carry >= 1.0 {
            let g = c.carry.floor();
            c.carry -= g;
            self.cwnd += g as u64;
        }
    }

    /// A loss found by duplicate ACKs or SACK: the multiplicative decrease. `flight` is
    /// the data outstanding. cwnd becomes ssthresh (recovery may inflate it after).
    pub fn on_loss(&mut self, flight: u64) {
        match self.kind {
            CongestionKind::Reno => {
                self.ssthresh = (flight / 2).max(2 * self.mss);
            }
            CongestionKind::Cubic => {
                let mss = self.mss as f64;
                let cwnd = self.cwnd as f64 / mss;
                let c = &mut self.cubic;
                // Fast convergence (§4.7).
                c.w_max = if cwnd < c.w_max {
                    cwnd * (1.0 + CUBIC_BETA) / 2.0
                } else {
                    cwnd
                };
                c.epoch = None;
                c.carry = 0.0;
                let base = (self.cwnd).min(flight.max(self.mss));
                self.ssthresh = ((base as f64 * CUBIC_BETA) as u64).max(2 * self.mss);
            }
        }
        self.cwnd = self.ssthresh;
        self.acked_acc = 0;
    }

    /// A retransmission timeout: ssthresh as for a loss, cwnd one segment (RFC 5681 §3.1,
    /// RFC 9438 §4.8).
    pub fn on_timeout(&mut self, flight: u64) {
        self.on_loss(flight);
        self.cwnd = self.mss;
    }

    /// Leaving fast recovery: cwnd deflates to ssthresh (or less when little is in
    /// flight, RFC 6582 §3.2 step 3).
    pub fn end_recovery(&mut self, flight: u64) {
        self.cwnd = self
            .ssthresh
            .min(flight.max(self.mss) + self.mss)
            .max(self.mss);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rto_follows_rfc6298() {
        let ms = Duration::from_millis;
        let mut r = RttEstimator::new(ms(1000), ms(200), ms(60_000));
        assert_eq!(r.rto(), ms(1000));
        r.sample(ms(100));
        // srtt 100, rttvar 50: 100 + 200.
        assert_eq!(r.rto(), ms(300));
        r.back_off();
        r.back_off();
        assert_eq!(r.rto(), ms(1200));
        r.sample(ms(100));
        assert_eq!(r.backoff(), 0);
        // rttvar 37.5, srtt 100: 250.
        assert_eq!(r.rto(), Duration::from_micros(250_000));
        for _ in 0..40 {
            r.back_off();
        }
        assert_eq!(r.rto(), ms(60_000));
    }

    #[test]
    fn reno_halves_and_grows_linearly() {
        let now = Instant::now();
        let mut c = Congestion::new(CongestionKind::Reno, 1000, 10);
        assert_eq!(c.cwnd(), 10_000);
        c.on_ack(1000, now, None);
        assert_eq!(c.cwnd(), 11_000);
        c.on_loss(11_000);
        assert_eq!((c.cwnd(), c.ssthresh()), (5_500, 5_500));
        for _ in 0..5 {
            c.on_ack(1100, now, None);
        }
        assert_eq!(c.cwnd(), 6_500);
        c.on_timeout(6_500);
        assert_eq!((c.cwnd(), c.ssthresh()), (1000, 3_250));
    }

    #[test]
    fn cubic_backs_off_by_beta_and_regrows_to_w_max() {
        let t0 = Instant::now();
        let mut c = Congestion::new(CongestionKind::Cubic, 1000, 100);
        c.on_loss(100_000);
        assert_eq!(c.cwnd(), 70_000);
        // Acknowledge a window's worth every 10 ms for 10 s: the window climbs back past
        // W_max (100 segments) with the concave then convex curve.
        let mut t = t0;
        let rtt = Some(Duration::from_millis(10));
        let mut seen_plateau = false;
        for _ in 0..1000 {
            t += Duration::from_millis(10);
            let w = c.cwnd();
            c.on_ack(w, t, rtt);
            if (95_000..105_000).contains(&c.cwnd()) {
                seen_plateau = true;
            }
        }
        assert!(seen_plateau);
        assert!(c.cwnd() > 110_000, "cwnd {}", c.cwnd());
    }
}
