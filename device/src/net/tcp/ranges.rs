//! Sets of byte ranges over 64-bit stream offsets: what the receiver holds out of order,
//! what the sender knows the peer holds (its SACK scoreboard). Few ranges are ever live
//! (bounded by the SACK blocks and segments in flight), so a sorted vector is the right
//! shape: merges are a shift of a short slice.

/// Disjoint, non-adjacent half-open ranges `[start, end)`, sorted by start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangeSet {
    r: Vec<(u64, u64)>,
}

impl RangeSet {
    pub fn new() -> RangeSet {
        RangeSet { r: Vec::new() }
    }

    pub fn is_empty(&self) -> bool {
        self.r.is_empty()
    }

    pub fn len(&self) -> usize {
        self.r.len()
    }

    pub fn clear(&mut self) {
        self.r.clear();
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (u64, u64)> + '_ {
        self.r.iter().copied()
    }

    pub fn first(&self) -> Option<(u64, u64)> {
        self.r.first().copied()
    }

    pub fn last(&self) -> Option<(u64, u64)> {
        self.r.last().copied()
    }

    /// Adds `[start, end)`, merging with what it overlaps or touches. Returns the merged
    /// range that now holds it.
    pub fn insert(&mut self, start: u64, end: u64) -> (u64, u64) {
        if start >= end {
            return (start, end);
        }
        // First range that ends at or after `start` (could merge), last that starts at or
        // before `end`.
        let lo = self.r.partition_point(|&(_, e)| e < start);
        let hi = self.r.partition_point(|&(s, _)| s <= end);
        if lo == hi {
            self.r.insert(lo, (start, end));
            return (start, end);
        }
        let s = start.min(self.r[lo].0);
        let e = end.max(self.r[hi - 1].1);
        self.r.drain(lo + 1..hi);
        self.r[lo] = (s, e);
        (s, e)
    }

    /// Forgets everything below `at`.
    pub fn remove_below(&mut self, at: u64) {
        let n = self.r.partition_point(|&(_, e)| e <= at);
        self.r.drain(..n);
        if let Some(f) = self.r.first_mut() {
            if f.0 < at {
                f.0 = at;
            }
        }
    }

    /// Whether `[start, end)` is wholly inside the set.
    pub fn contains_range(&self, start: u64, end: u64) -> bool {
        if start >= end {
            return true;
        }
        let i = self.r.partition_point(|&(_, e)| e <= start);
        i < self.r.len() && self.r[i].0 <= start && self.r[i].1 >= end
    }

    pub fn contains(&self, at: u64) -> bool {
        self.contains_range(at, at + 1)
    }

    /// The range holding `at`, if any.
    pub fn range_at(&self, at: u64) -> Option<(u64, u64)> {
        let i = self.r.partition_point(|&(_, e)| e <= at);
        (i < self.r.len() && self.r[i].0 <= at).then(|| self.r[i])
    }

    /// The first range starting at or after `at`.
    pub fn next_from(&self, at: u64) -> Option<(u64, u64)> {
        let i = self.r.partition_point(|&(s, _)| s < at);
        self.r.get(i).copied()
    }

    /// Bytes of the set inside `[start, end)`.
    pub fn covered(&self, start: u64, end: u64) -> u64 {
        if start >= end {
            return 0;
        }
        let i = self.r.partition_point(|&(_, e)| e <= start);
        let mut n = 0;
        for &(s, e) in &self.r[i..] {
            if s >= end {
                break;
            }
            n += e.min(end) - s.max(start);
        }
        n
    }

    /// The parts of `[start, end)` not in the set, in order.
    pub fn gaps(&self, start: u64, end: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut at = start;
        let i = self.r.partition_point(|&(_, e)| e <= start);
        for &(s, e) in &self.r[i..] {
            if s >= end || at >= end {
                break;
            }
            if s > at {
                out.push((at, s.min(end)));
            }
            at = at.max(e);
        }
        if at < end {
            out.push((at, end));
        }
        out
    }
}

/// Sequence number comparisons modulo 2^32 (RFC 9293 §3.4).
pub fn seq_lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

pub fn seq_le(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) <= 0
}

/// `seq` as a 64-bit offset, given that `base_seq` is at offset `base`: the nearest
/// offset (within 2^31) whose low 32 bits agree. Negative results mean "before offset 0".
pub fn unwrap_seq(seq: u32, base_seq: u32, base: u64) -> i64 {
    base as i64 + seq.wrapping_sub(base_seq) as i32 as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_merges() {
        let mut s = RangeSet::new();
        s.insert(10, 20);
        s.insert(30, 40);
        assert_eq!(s.insert(20, 25), (10, 25));
        assert_eq!(s.insert(26, 30), (26, 40));
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![(10, 25), (26, 40)]);
        assert_eq!(s.insert(0, 100), (0, 100));
        assert_eq!(s.len(), 1);
        s.remove_below(50);
        assert_eq!(s.first(), Some((50, 100)));
        assert!(s.contains_range(60, 70));
        assert!(!s.contains_range(40, 70));
    }

    #[test]
    fn gaps_and_cover() {
        let mut s = RangeSet::new();
        s.insert(10, 20);
        s.insert(30, 40);
        assert_eq!(s.gaps(0, 50), vec![(0, 10), (20, 30), (40, 50)]);
        assert_eq!(s.gaps(12, 35), vec![(20, 30)]);
        assert_eq!(s.covered(15, 35), 10);
        assert_eq!(s.next_from(21), Some((30, 40)));
        assert_eq!(s.range_at(35), Some((30, 40)));
        assert_eq!(s.range_at(25), None);
    }

    #[test]
    fn sequence_space() {
        assert!(seq_lt(0xffff_fff0, 5));
        assert!(!seq_lt(5, 0xffff_fff0));
        assert_eq!(unwrap_seq(5, 0xffff_fff0, 1000), 1021);
        assert_eq!(unwrap_seq(0xffff_fff0, 5, 1000), 979);
    }
}
