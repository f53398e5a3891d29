//! The median and spread of a figure over the rounds, and which way is better.

/// The median and the extremes of the figures one side measured over the rounds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// How many rounds had the figure.
    pub n: usize,
}

/// The median (of an even count: the mean of the middle two) and min and max of the
/// figures that are there; None when no round has one.
pub fn spread(values: &[Option<f64>]) -> Option<Spread> {
    let mut v: Vec<f64> = values.iter().flatten().copied().collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    Some(Spread {
        median,
        min: v[0],
        max: v[n - 1],
        n,
    })
}

/// Whether a larger figure is the better one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Better {
    Lower,
    Higher,
}

impl Better {
    /// How many times better QPs did than sockets (> 1: QPs better); None unless both
    /// figures are positive.
    pub(super) fn gain(self, qp: f64, sockets: f64) -> Option<f64> {
        if qp <= 0.0 || sockets <= 0.0 {
            return None;
        }
        Some(match self {
            Better::Lower => sockets / qp,
            Better::Higher => qp / sockets,
        })
    }
}

/// One figure of several sides (the ways a part of the bench connects its guests) in every
/// round, each side's gain reckoned over the side [`SidesRow::baseline`].
#[derive(Debug, Clone, PartialEq)]
pub struct SidesRow<const N: usize> {
    pub what: String,
    pub unit: &'static str,
    pub better: Better,
    /// Each side's figure by round (a side that does not measure it: none).
    pub sides: [Vec<Option<f64>>; N],
    /// The side the others are compared with.
    pub baseline: usize,
}

impl<const N: usize> SidesRow<N> {
    /// How many times better side `i` did than the baseline, from the medians.
    pub fn gain(&self, i: usize) -> Option<f64> {
        let m = |v: &[Option<f64>]| spread(v).map(|s| s.median);
        self.better
            .gain(m(&self.sides[i])?, m(&self.sides[self.baseline])?)
    }

    /// Side `i`'s gain over the baseline, round by round (the two ran next to each other).
    pub fn round_gains(&self, i: usize) -> Vec<Option<f64>> {
        self.sides[i]
            .iter()
            .zip(&self.sides[self.baseline])
            .map(|(a, b)| self.better.gain((*a)?, (*b)?))
            .collect()
    }

    /// The median and range of side `i`'s gains over the baseline, round by round.
    pub fn gain_spread(&self, i: usize) -> Option<Spread> {
        spread(&self.round_gains(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_is_the_median_and_extremes_of_what_was_measured() {
        let odd = spread(&[Some(3.0), Some(1.0), Some(2.0)]).unwrap();
        assert_eq!((odd.median, odd.min, odd.max, odd.n), (2.0, 1.0, 3.0, 3));
        let even = spread(&[Some(4.0), Some(1.0), Some(2.0), Some(10.0)]).unwrap();
        assert_eq!(
            (even.median, even.min, even.max, even.n),
            (3.0, 1.0, 10.0, 4)
        );
        let gap = spread(&[Some(5.0), None, Some(7.0)]).unwrap();
        assert_eq!((gap.median, gap.min, gap.max, gap.n), (6.0, 5.0, 7.0, 2));
        assert_eq!(spread(&[None, None]), None);
        assert_eq!(spread(&[]), None);
    }
}
