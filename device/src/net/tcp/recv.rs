//! The receive side's data: what arrived in order goes to the [`RecvSink`] (or, while the
//! sink has no room, into the staging allowance); what arrived out of order is placed in
//! the sink when it can take it at its offset, or buffered here within a fixed bound. All
//! offsets are stream offsets (0 = the first byte after the SYN).

use std::collections::{BTreeMap, VecDeque};

use super::io::RecvSink;
use super::memory::{Charge, MemoryPool};
use super::ranges::RangeSet;

/// Most out-of-order pieces held at once (besides the byte bound): a peer sending
/// one-byte segments into holes cannot make the map large.
const MAX_OOO_PIECES: usize = 2048;
/// Push boundaries remembered ahead of delivery.
const MAX_PUSH_POINTS: usize = 256;
/// SACK blocks remembered (RFC 2018 reports at most 4).
const MAX_SACK_MEMORY: usize = 4;

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DataOutcome {
    /// Bytes the in-order point moved.
    pub advanced: u64,
    /// The segment landed beyond the in-order point.
    pub out_of_order: bool,
    /// It moved the in-order point into data held out of order (a hole filled).
    pub filled_hole: bool,
    /// Bytes of it that could not be kept (buffers full).
    pub dropped: u64,
}

#[derive(Debug)]
pub struct Receiver {
    /// Everything below is received (in the sink or staged).
    next: u64,
    /// The sink has `[0, delivered)`.
    delivered: u64,
    staging: VecDeque<u8>,
    staging_cap: usize,
    ooo: BTreeMap<u64, Vec<u8>>,
    ooo_bytes: usize,
    ooo_limit: usize,
    /// Ranges placed in the sink ahead of the in-order point.
    placed: RangeSet,
    /// Everything held ahead of the in-order point (`ooo` and `placed`).
    held: RangeSet,
    /// Most recently changed SACK blocks first (RFC 2018 §4).
    recent: Vec<(u64, u64)>,
    /// Where the FIN is, once seen.
    fin: Option<u64>,
    push_points: VecDeque<u64>,
    /// What staging and `ooo` hold, charged to the function's and adapter's pools.
    charge: Charge,
}

impl Receiver {
    pub fn new(staging_cap: usize, ooo_limit: usize) -> Receiver {
        Receiver {
            next: 0,
            delivered: 0,
            staging: VecDeque::new(),
            staging_cap,
            ooo: BTreeMap::new(),
            ooo_bytes: 0,
            ooo_limit,
            placed: RangeSet::new(),
            held: RangeSet::new(),
            recent: Vec::new(),
            fin: None,
            push_points: VecDeque::new(),
            charge: Charge::default(),
        }
    }

    /// Charges what this receiver holds from now on to `pool` (before any byte is held).
    pub fn set_pool(&mut self, pool: Option<std::sync::Arc<MemoryPool>>) {
        debug_assert_eq!(self.charge.held(), 0);
        self.charge = Charge::new(pool);
    }

    /// Bytes held (staged and out of order), as charged to the pools.
    pub fn held_bytes(&self) -> usize {
        self.charge.held()
    }

    pub fn next(&self) -> u64 {
        self.next
    }

    pub fn delivered(&self) -> u64 {
        self.delivered
    }

    pub fn staged(&self) -> usize {
        self.staging.len()
    }

    /// Sets how many bytes staging holds at most (never dropping what it holds).
    pub fn set_staging_cap(&mut self, cap: usize) {
        self.staging_cap = cap;
    }

    /// Bytes staging can still take.
    pub fn staging_room(&self) -> usize {
        self.staging_cap.saturating_sub(self.staging.len())
    }

    pub fn ooo_bytes(&self) -> usize {
        self.ooo_bytes
    }

    pub fn fin(&self) -> Option<u64> {
        self.fin
    }

    pub fn has_held(&self) -> bool {
        !self.held.is_empty()
    }

    /// The FIN is at `at` (the end of the data).
    pub fn set_fin(&mut self, at: u64) {
        // A FIN before data already held would contradict it; a peer that sends that is
        // broken or lying, and its FIN is not taken.
        let held_end = self.held.last().map_or(0, |(_, e)| e);
        if self.fin.is_none() && at >= self.next && at >= held_end {
            self.fin = Some(at);
        }
    }

    /// Stores in-order bytes at `self.next`: into the sink while it has room and nothing
    /// is staged before them, else into staging. Returns how many were kept. `charged`:
    /// the bytes come from `ooo` and are charged already (what the sink takes is given
    /// back; what is not kept stays charged, for it goes back into `ooo`); else staging
    /// them must be charged first, and under memory pressure they are not kept.
    fn store_in_order(&mut self, data: &[u8], sink: &mut dyn RecvSink, charged: bool) -> usize {
        let mut kept = 0;
        if self.staging.is_empty() {
            let n = sink.space().min(data.len());
            if n > 0 {
                sink.deliver(self.delivered, &data[..n]);
                self.delivered += n as u64;
                kept = n;
                if charged {
                    self.charge.shrink(n);
                }
            }
        }
        let room = self.staging_cap.saturating_sub(self.staging.len());
        let mut s = (data.len() - kept).min(room);
        if !charged && !self.charge.grow(s) {
            s = 0;
        }
        self.staging.extend(&data[kept..kept + s]);
        kept += s;
        self.next += kept as u64;
        kept
    }

    /// Bytes at stream offset `off` arrived (PSH set or not).
    pub fn on_data(
        &mut self,
        off: u64,
        data: &[u8],
        push: bool,
        sink: &mut dyn RecvSink,
    ) -> DataOutcome {
        let mut out = DataOutcome::default();
        // Nothing exists beyond the FIN.
        let data = match self.fin {
            Some(f) if off >= f => &[][..],
            Some(f) => &data[..data.len().min((f - off) as usize)],
            None => data,
        };
        let end = off + data.len() as u64;
        if end <= self.next || data.is_empty() {
            return out;
        }
        if off > self.next {
            out.out_of_order = true;
            out.dropped = self.out_of_order(off, data, sink);
            if push && out.dropped == 0 {
                self.add_push(end);
            }
            return out;
        }
        let start = self.next;
        loop {
            if self.next >= end {
                break;
            }
            let before = self.next;
            let d = &data[(self.next - off) as usize..];
            // Up to the first held range; what lies in it is held already.
            let limit = self
                .held
                .first()
                .map(|(s, _)| (s - self.next) as usize)
                .unwrap_or(usize::MAX);
            let take = d.len().min(limit);
            let kept = self.store_in_order(&d[..take], sink, false);
            if kept < take {
                out.dropped = end - self.next - self.held.covered(self.next, end);
                break;
            }
            if self.held.first().is_some_and(|(s, _)| s <= self.next) {
                out.filled_hole |= self.absorb(sink);
            }
            if self.next == before {
                // Held data next in line could not move (staging full): the rest of
                // this segment is held already or must wait.
                out.dropped = end - self.next - self.held.covered(self.next, end);
                break;
            }
        }
        if push && out.dropped == 0 {
            self.add_push(end);
        }
        out.advanced = self.next - start;
        self.prune_recent();
        out
    }

    /// Moves held ranges that the in-order point reached into order.
    fn absorb(&mut self, sink: &mut dyn RecvSink) -> bool {
        let mut any = false;
        while let Some((s, e)) = self.held.first() {
            if s > self.next {
                break;
            }
            if self.placed.contains(s) {
                // The sink holds these bytes already (it could only take them where its
                // space reached, so nothing is staged before them).
                let (ps, pe) = self.placed.range_at(s).expect("contains");
                debug_assert!(self.staging.is_empty() && self.delivered == self.next);
                self.placed.remove_below(pe);
                self.held.remove_below(pe);
                let _ = ps;
                if self.staging.is_empty() {
                    self.delivered = pe;
                    sink.placed_in_order(pe);
                }
                self.next = pe;
                any = true;
                continue;
            }
            let Some((&k, _)) = self.ooo.first_key_value() else {
                break;
            };
            if k != s {
                // Only a placed range could start here; handled above.
                break;
            }
            let piece = self.ooo.remove(&k).expect("present");
            self.ooo_bytes -= piece.len();
            let kept = self.store_in_order(&piece, sink, true);
            self.held.remove_below(self.next);
            any = true;
            if kept < piece.len() {
                let rest = piece[kept..].to_vec();
                self.ooo_bytes += rest.len();
                self.ooo.insert(self.next, rest);
                self.held
                    .insert(self.next, self.next + (piece.len() - kept) as u64);
                break;
            }
            let _ = e;
        }
        any
    }

    /// Holds out-of-order bytes: the parts not already held are placed in the sink if it
    /// takes them, else buffered. Returns how many could not be kept.
    fn out_of_order(&mut self, off: u64, data: &[u8], sink: &mut dyn RecvSink) -> u64 {
        let end = off + data.len() as u64;
        let mut dropped = 0;
        let sink_end = if self.staging.is_empty() {
            self.delivered + sink.space() as u64
        } else {
            0
        };
        let mut kept_any = false;
        for (s, e) in self.held.gaps(off, end) {
            let piece = &data[(s - off) as usize..(e - off) as usize];
            if e <= sink_end && sink.place_at(s, piece) {
                self.placed.insert(s, e);
            } else if self.ooo_bytes + piece.len() <= self.ooo_limit
                && self.ooo.len() < MAX_OOO_PIECES
                && self.charge.grow(piece.len())
            {
                self.ooo.insert(s, piece.to_vec());
                self.ooo_bytes += piece.len();
            } else {
                dropped += e - s;
                continue;
            }
            self.held.insert(s, e);
            kept_any = true;
        }
        if kept_any || self.held.contains(off) {
            if let Some(b) = self.held.range_at(off).or_else(|| self.held.next_from(off)) {
                self.recent.retain(|r| !(r.0 <= b.1 && b.0 <= r.1));
                self.recent.insert(0, b);
                self.recent.truncate(MAX_SACK_MEMORY);
            }
        }
        dropped
    }

    fn add_push(&mut self, at: u64) {
        if self.push_points.back().is_some_and(|&p| p >= at) {
            // Out of order: keep the list sorted.
            let i = self.push_points.partition_point(|&p| p < at);
            if self.push_points.get(i) != Some(&at) {
                self.push_points.insert(i, at);
            }
        } else {
            self.push_points.push_back(at);
        }
        while self.push_points.len() > MAX_PUSH_POINTS {
            self.push_points.pop_front();
        }
    }

    /// The highest push boundary at or below `upto`, consuming those passed.
    pub fn take_push(&mut self, upto: u64) -> Option<u64> {
        let mut last = None;
        while let Some(&p) = self.push_points.front() {
            if p > upto {
                break;
            }
            last = Some(p);
            self.push_points.pop_front();
        }
        last
    }

    fn prune_recent(&mut self) {
        let next = self.next;
        let held = &self.held;
        self.recent.retain(|&(_, e)| e > next);
        for r in self.recent.iter_mut() {
            if let Some(b) = held.range_at(r.0.max(next)) {
                *r = b;
            }
        }
        // Merges may have made two blocks one.
        let mut seen: Vec<(u64, u64)> = Vec::with_capacity(self.recent.len());
        self.recent.retain(|r| {
            if seen.contains(r) {
                false
            } else {
                seen.push(*r);
                true
            }
        });
    }

    /// SACK blocks to report (most recent first), in stream offsets.
    pub fn sack_blocks(&self) -> Vec<(u64, u64)> {
        let mut v: Vec<(u64, u64)> = self.recent.clone();
        // Fill with other held ranges (highest first) if fewer were recently touched.
        for b in self.held.iter().rev() {
            if v.len() >= MAX_SACK_MEMORY {
                break;
            }
            if !v.contains(&b) {
                v.push(b);
            }
        }
        v
    }

    /// Hands staged bytes to the sink as far as its space allows, then lets held data
    /// that waited behind a full staging move up. Returns how many bytes reached the sink.
    pub fn drain_staging(&mut self, sink: &mut dyn RecvSink) -> usize {
        let start = self.delivered;
        loop {
            loop {
                let space = sink.space();
                if space == 0 || self.staging.is_empty() {
                    break;
                }
                let (a, _) = self.staging.as_slices();
                let n = a.len().min(space);
                sink.deliver(self.delivered, &a[..n]);
                self.staging.drain(..n);
                self.charge.shrink(n);
                self.delivered += n as u64;
            }
            let before = self.next;
            if self.held.first().is_some_and(|(s, _)| s <= self.next) {
                self.absorb(sink);
            }
            if self.next == before {
                break;
            }
            self.prune_recent();
        }
        (self.delivered - start) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::tcp::io::VecSink;

    /// A sink that also places out-of-order bytes into its space.
    struct Placing {
        buf: Vec<u8>,
        next: usize,
        cap: usize,
    }

    impl RecvSink for Placing {
        fn space(&self) -> usize {
            self.cap - self.next
        }
        fn deliver(&mut self, offset: u64, data: &[u8]) {
            assert_eq!(offset as usize, self.next);
            self.buf[self.next..self.next + data.len()].copy_from_slice(data);
            self.next += data.len();
        }
        fn placed_in_order(&mut self, upto: u64) {
            self.next = upto as usize;
        }
        fn place_at(&mut self, offset: u64, data: &[u8]) -> bool {
            let o = offset as usize;
            assert!(o + data.len() <= self.cap);
            self.buf[o..o + data.len()].copy_from_slice(data);
            true
        }
    }

    #[test]
    fn reorders_through_the_buffer() {
        let mut r = Receiver::new(8, 100);
        let mut sink = VecSink::new(10);
        let o = r.on_data(5, b"fghij", false, &mut sink);
        assert!(o.out_of_order && o.advanced == 0);
        assert_eq!(r.sack_blocks(), vec![(5, 10)]);
        let o = r.on_data(0, b"abcde", true, &mut sink);
        assert!(o.filled_hole);
        assert_eq!(o.advanced, 10);
        assert_eq!(sink.data, b"abcdefghij");
        assert!(r.sack_blocks().is_empty());
        // No room in the sink: staging takes up to 8.
        let o = r.on_data(10, b"0123456789", false, &mut sink);
        assert_eq!(o.advanced, 8);
        assert_eq!(o.dropped, 2);
        assert_eq!(r.staged(), 8);
        sink.room = 100;
        assert_eq!(r.drain_staging(&mut sink), 8);
        assert_eq!(sink.data, b"abcdefghij01234567");
        assert_eq!(r.take_push(100), Some(5));
    }

    #[test]
    fn full_staging_before_held_data_does_not_spin() {
        let mut r = Receiver::new(4, 100);
        let mut sink = VecSink::new(0);
        r.on_data(4, b"efgh", false, &mut sink);
        // Four bytes fill staging; the held range starts right after and cannot move.
        let o = r.on_data(0, b"abcdefgh", false, &mut sink);
        assert_eq!(o.advanced, 4);
        assert_eq!(r.next(), 4);
        let o = r.on_data(0, b"abcdefghij", false, &mut sink);
        assert_eq!(o.advanced, 0);
        assert_eq!(o.dropped, 2);
        sink.room = 100;
        // Draining lets the held bytes follow.
        assert_eq!(r.drain_staging(&mut sink), 8);
        assert_eq!(r.next(), 8);
        let o = r.on_data(8, b"ij", false, &mut sink);
        assert_eq!(o.advanced, 2);
        assert_eq!(sink.data, b"abcdefghij");
    }

    #[test]
    fn places_directly_and_skips_duplicates() {
        let mut r = Receiver::new(8, 0);
        let mut sink = Placing {
            buf: vec![0; 20],
            next: 0,
            cap: 20,
        };
        assert_eq!(r.on_data(10, b"klmno", false, &mut sink).dropped, 0);
        assert_eq!(r.on_data(4, b"efgh", false, &mut sink).dropped, 0);
        assert_eq!(r.sack_blocks(), vec![(4, 8), (10, 15)]);
        let o = r.on_data(0, b"abcdefghij", false, &mut sink);
        assert_eq!(o.advanced, 15);
        assert_eq!(&sink.buf[..15], b"abcdefghijklmno");
        assert_eq!(r.delivered(), 15);
        // Beyond the sink's space the buffer (limit 0) cannot take it.
        assert_eq!(r.on_data(17, b"xyz1", false, &mut sink).dropped, 4);
    }
}
