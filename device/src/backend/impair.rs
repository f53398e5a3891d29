//! `--impair loss=P,reorder=P,dup=P,corrupt=P,delay=MS[,jitter=MS][,seed=N]`: a bad link,
//! in both directions, from a seed (the kernels here have no `tc netem`).
//!
//! Probabilities are percentages (`loss=5` or `loss=5%` is 5 in 100; `0.5` is one in 200).
//! Each frame, independently and in this order: is lost with probability `loss`; else is
//! duplicated with probability `dup`; each copy has one random bit flipped past its
//! Ethernet header with probability `corrupt` (so checksums, not MAC filtering, meet it);
//! is delayed by `delay` ± `jitter` ms (uniform; frames whose delays differ are reordered
//! by it); and with probability `reorder` is held back a further `delay` + 1 ms, so the
//! frames after it overtake it. The two directions have their own random streams derived
//! from the seed, so a run is reproduced by its seed (logged when none is given).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::str::FromStr;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ImpairSpec {
    /// Percentages, 0..=100.
    pub loss: f64,
    pub reorder: f64,
    pub dup: f64,
    pub corrupt: f64,
    /// Milliseconds.
    pub delay: f64,
    pub jitter: f64,
    pub seed: Option<u64>,
}

const KEYS: &str = "loss, reorder, dup, corrupt, delay, jitter, seed";

impl FromStr for ImpairSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<ImpairSpec, String> {
        let mut spec = ImpairSpec::default();
        let mut seen: Vec<&str> = Vec::new();
        if s.trim().is_empty() {
            return Err(format!(
                "empty impairment (give some of {KEYS}, e.g. loss=1,delay=5)"
            ));
        }
        for item in s.split(',') {
            let (k, v) = item
                .split_once('=')
                .ok_or_else(|| format!("impairment '{item}' is not KEY=VALUE"))?;
            if seen.contains(&k) {
                return Err(format!("impairment '{k}' given twice"));
            }
            seen.push(k);
            let pct = |v: &str| -> Result<f64, String> {
                let n: f64 = v
                    .strip_suffix('%')
                    .unwrap_or(v)
                    .parse()
                    .map_err(|_| format!("{k}={v}: not a percentage"))?;
                if !(0.0..=100.0).contains(&n) {
                    return Err(format!("{k}={v}: must be within 0..=100 (percent)"));
                }
                Ok(n)
            };
            let ms = |v: &str| -> Result<f64, String> {
                let n: f64 = v
                    .strip_suffix("ms")
                    .unwrap_or(v)
                    .parse()
                    .map_err(|_| format!("{k}={v}: not a number of milliseconds"))?;
                if !(0.0..=60_000.0).contains(&n) {
                    return Err(format!("{k}={v}: must be within 0..=60000 ms"));
                }
                Ok(n)
            };
            match k {
                "loss" => spec.loss = pct(v)?,
                "reorder" => spec.reorder = pct(v)?,
                "dup" => spec.dup = pct(v)?,
                "corrupt" => spec.corrupt = pct(v)?,
                "delay" => spec.delay = ms(v)?,
                "jitter" => spec.jitter = ms(v)?,
                "seed" => {
                    spec.seed = Some(v.parse().map_err(|_| format!("seed={v}: not a number"))?)
                }
                _ => return Err(format!("unknown impairment '{k}' (expected {KEYS})")),
            }
        }
        Ok(spec)
    }
}

impl fmt::Display for ImpairSpec {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "loss={},reorder={},dup={},corrupt={},delay={},jitter={}",
            self.loss, self.reorder, self.dup, self.corrupt, self.delay, self.jitter
        )?;
        if let Some(s) = self.seed {
            write!(f, ",seed={s}")?;
        }
        Ok(())
    }
}

/// What the impairment did, per direction.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ImpairStats {
    pub frames: u64,
    pub lost: u64,
    pub duplicated: u64,
    pub corrupted: u64,
    pub reordered: u64,
    /// Dropped because too many frames were held back at once.
    pub overflow: u64,
}

/// Frames held back at most, per direction.
pub const MAX_HELD: usize = 16384;

/// One direction of a bad link.
pub struct Impairment {
    spec: ImpairSpec,
    rng: fastrand::Rng,
    held: BinaryHeap<Reverse<(Instant, u64, Vec<u8>)>>,
    seq: u64,
    pub stats: ImpairStats,
}

impl Impairment {
    /// `stream` tells the directions apart (each gets its own sequence from the seed).
    pub fn new(spec: ImpairSpec, seed: u64, stream: u64) -> Impairment {
        Impairment {
            spec,
            rng: fastrand::Rng::with_seed(seed ^ stream.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            held: BinaryHeap::new(),
            seq: 0,
            stats: ImpairStats::default(),
        }
    }

    fn chance(&mut self, pct: f64) -> bool {
        pct > 0.0 && self.rng.f64() * 100.0 < pct
    }

    /// Takes a frame onto the link at `now`; [`Impairment::due`] gives what comes out.
    pub fn push(&mut self, frame: &[u8], now: Instant) {
        self.stats.frames += 1;
        if self.chance(self.spec.loss) {
            self.stats.lost += 1;
            return;
        }
        let copies = if self.chance(self.spec.dup) {
            self.stats.duplicated += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            let mut f = frame.to_vec();
            if self.chance(self.spec.corrupt) && f.len() > 14 {
                let i = self.rng.usize(14..f.len());
                f[i] ^= 1 << self.rng.u8(0..8);
                self.stats.corrupted += 1;
            }
            let mut ms = self.spec.delay;
            if self.spec.jitter > 0.0 {
                ms += (self.rng.f64() * 2.0 - 1.0) * self.spec.jitter;
            }
            if self.chance(self.spec.reorder) {
                ms += self.spec.delay + 1.0;
                self.stats.reordered += 1;
            }
            let at = now + Duration::from_secs_f64(ms.max(0.0) / 1000.0);
            if self.held.len() >= MAX_HELD {
                self.stats.overflow += 1;
                continue;
            }
            self.seq += 1;
            self.held.push(Reverse((at, self.seq, f)));
        }
    }

    /// The next frame whose time has come.
    pub fn due(&mut self, now: Instant) -> Option<Vec<u8>> {
        match self.held.peek() {
            Some(Reverse((at, _, _))) if *at <= now => self.held.pop().map(|Reverse((_, _, f))| f),
            _ => None,
        }
    }

    pub fn next_deadline(&self) -> Option<Instant> {
        self.held.peek().map(|Reverse((at, _, _))| *at)
    }

    pub fn held(&self) -> usize {
        self.held.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse() {
        let s: ImpairSpec = "loss=5,reorder=25%,dup=2,corrupt=1,delay=10,jitter=3,seed=7"
            .parse()
            .unwrap();
        assert_eq!(
            s,
            ImpairSpec {
                loss: 5.0,
                reorder: 25.0,
                dup: 2.0,
                corrupt: 1.0,
                delay: 10.0,
                jitter: 3.0,
                seed: Some(7)
            }
        );
        assert_eq!(s.to_string().parse::<ImpairSpec>().unwrap(), s);
        assert_eq!("delay=0.5ms".parse::<ImpairSpec>().unwrap().delay, 0.5);
        assert!("loss=101".parse::<ImpairSpec>().is_err());
        assert!("loss=-1".parse::<ImpairSpec>().is_err());
        assert!("loss=x".parse::<ImpairSpec>().is_err());
        assert!("loss".parse::<ImpairSpec>().is_err());
        assert!("".parse::<ImpairSpec>().is_err());
        assert!("loss=1,loss=2".parse::<ImpairSpec>().is_err());
        assert_eq!(
            "lose=1".parse::<ImpairSpec>().unwrap_err(),
            "unknown impairment 'lose' (expected loss, reorder, dup, corrupt, delay, jitter, seed)"
        );
    }

    #[test]
    fn seeded_and_roughly_right() {
        let spec: ImpairSpec = "loss=10,dup=5,corrupt=3".parse().unwrap();
        let t = Instant::now();
        let run = |seed| {
            let mut imp = Impairment::new(spec, seed, 0);
            let mut out = Vec::new();
            for i in 0..10_000u32 {
                imp.push(&[i.to_be_bytes().as_slice(), &[0u8; 60]].concat(), t);
                while let Some(f) = imp.due(t) {
                    out.push(f);
                }
            }
            (imp.stats, out)
        };
        let (a, fa) = run(1);
        let (b, fb) = run(1);
        assert_eq!(a, b);
        assert_eq!(fa, fb);
        assert!((800..1200).contains(&a.lost), "{a:?}");
        assert!((350..650).contains(&a.duplicated), "{a:?}");
        assert!((200..400).contains(&a.corrupted), "{a:?}");
        assert_eq!(fa.len() as u64, a.frames - a.lost + a.duplicated);
        // Without delay, order is kept.
        assert!(fa.windows(2).all(|w| w[0][..4] <= w[1][..4]));
        assert_ne!(run(2).0, a);
    }

    #[test]
    fn delay_jitter_reorder() {
        let spec: ImpairSpec = "delay=10,jitter=5,reorder=50,seed=3".parse().unwrap();
        let t = Instant::now();
        let mut imp = Impairment::new(spec, 3, 1);
        for i in 0..100u8 {
            imp.push(&[i; 20], t + Duration::from_micros(i as u64 * 10));
        }
        assert!(imp.due(t + Duration::from_millis(4)).is_none());
        let mut order = Vec::new();
        let mut now = t;
        while imp.held() > 0 {
            now += Duration::from_millis(1);
            while let Some(f) = imp.due(now) {
                order.push(f[0]);
            }
        }
        assert_eq!(order.len(), 100);
        assert!(order.windows(2).any(|w| w[0] > w[1]), "reordered");
        assert!(now <= t + Duration::from_millis(40));
    }
}
