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
