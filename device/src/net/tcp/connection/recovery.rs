//! Loss recovery: the SACK scoreboard (RFC 2018) and the recovery episode — SACK-based
//! recovery (RFC 6675), NewReno for peers without SACK (RFC 6582), recovery after a
//! retransmission timeout (RFC 5681 §3.1, RFC 6298 §5) and after a drop of the path MTU
//! (RFC 8201 §5.4).
//!
//! The connection tells [`LossRecovery`] what the peer acknowledged (SACK blocks,
//! duplicate ACKs, cumulative ACKs) and when the retransmission timer expired; the unit
//! decides when recovery begins and ends, what is lost, what to retransmit next (RFC 6675
//! NextSeg) and how much is in the network (pipe), and tells congestion control of the
//! loss and of the end of recovery. It keeps no copy of the connection's send sequence
//! variables: each call takes them as a [`Flight`].

use super::super::congestion::Congestion;
use super::super::ranges::{unwrap_seq, RangeSet};
use super::super::wire::SackBlocks;

/// Duplicate ACKs that signal a loss (RFC 5681; DupThresh of RFC 6675).
pub const DUP_THRESH: u32 = 3;

/// The connection's send sequence space as the unit sees it: offsets from the ISS of
/// SND.UNA and SND.NXT (HighData), and the send MSS.
#[derive(Debug, Clone, Copy)]
pub struct Flight {
    pub una: u64,
    pub nxt: u64,
    pub smss: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// RFC 6675.
    Sack,
    /// RFC 6582, for peers without SACK.
    NewReno,
    /// After a retransmission timeout: everything outstanding is lost; slow start.
    Timeout,
    /// The path MTU dropped: everything outstanding was cut to the new size and sent
    /// again; no congestion signal, so cwnd stays (RFC 8201 §5.4, RFC 9293 §3.7.3).
    PathMtu,
}

#[derive(Debug, Clone, Copy)]
struct Episode {
    kind: Kind,
    /// RecoveryPoint: HighData when recovery began.
    point: u64,
}

/// One connection's loss recovery state.
#[derive(Debug, Clone, Default)]
pub struct LossRecovery {
    episode: Option<Episode>,
    /// HighRxt: retransmissions in this recovery reached here.
    high_rxt: u64,
    /// Everything unsacked below here is lost, whatever the scoreboard says.
    lost_floor: u64,
    /// Retransmit once in recovery regardless of the window (RFC 6675 §5 step 4.3,
    /// RFC 6582 partial ACKs, the first segment after a timeout).
    force_rtx: bool,
    dupacks: u32,
    /// The SACK scoreboard: what the peer holds above SND.UNA.
    sacked: RangeSet,
}

impl LossRecovery {
    pub fn new() -> LossRecovery {
        LossRecovery::default()
    }

    #[inline]
    pub fn in_recovery(&self) -> bool {
        self.episode.is_some()
    }

    /// Checks that the scoreboard lies within what is outstanding.
    pub fn check_invariants(&self, f: Flight) {
        if let Some((s, e)) = self.sacked.first() {
            assert!(s >= f.una && s < e, "scoreboard above SND.UNA");
        }
        if let Some((_, e)) = self.sacked.last() {
            assert!(e <= f.nxt, "scoreboard within what was sent");
        }
    }

    /// Adds the SACK blocks of an ACK whose cumulative acknowledgment is `ack` (at or
    /// above `f.una`) to the scoreboard; `una_seq` is the wire sequence number of
    /// `f.una`. True if anything new was learned.
    pub fn on_sack(&mut self, blocks: &SackBlocks, una_seq: u32, f: Flight, ack: u64) -> bool {
        let mut new = false;
        for &(l, r) in blocks.as_slice() {
            let lo = unwrap_seq(l, una_seq, f.una);
            let hi = unwrap_seq(r, una_seq, f.una);
            // Blocks at or below the cumulative ACK (D-SACK) or beyond what was sent
            // are ignored.
            if hi <= lo || hi <= ack as i64 || hi > f.nxt as i64 || lo < 0 {
                continue;
            }
            let (lo, hi) = ((lo as u64).max(ack), hi as u64);
            if !self.sacked.contains_range(lo, hi) {
                new = true;
                self.sacked.insert(lo, hi);
            }
        }
        new
    }

    /// A duplicate ACK came (the caller judged it one, RFC 5681 §2). True if it started
    /// fast recovery: the caller then counts it and takes no RTT sample from what is
    /// retransmitted (Karn).
    pub fn on_dup_ack(&mut self, f: Flight, sack: bool, cc: &mut Congestion) -> bool {
        self.dupacks += 1;
        match self.episode {
            None => {
                let lost = sack && self.scoreboard_lost_edge(f) > f.una;
                if self.dupacks >= DUP_THRESH || lost {
                    self.enter_fast_recovery(f, sack, cc);
                    return true;
                }
            }
            Some(Episode {
                kind: Kind::NewReno,
                ..
            }) => {
                // Each further duplicate means a segment left the network (RFC 6582).
                cc.set_cwnd(cc.cwnd() + f.smss);
            }
            _ => {}
        }
        false
    }

    fn enter_fast_recovery(&mut self, f: Flight, sack: bool, cc: &mut Congestion) {
        cc.on_loss(f.nxt - f.una);
        let kind = if sack { Kind::Sack } else { Kind::NewReno };
        self.episode = Some(Episode { kind, point: f.nxt });
        self.high_rxt = f.una;
        self.lost_floor = (f.una + f.smss).min(f.nxt);
        self.force_rtx = true;
        if kind == Kind::NewReno {
            cc.set_cwnd(cc.ssthresh() + DUP_THRESH as u64 * f.smss);
        }
    }

    /// SND.UNA advanced: `f` is the flight after it did, `acked` the bytes newly
    /// acknowledged. Ends recovery when the recovery point is reached. True if congestion
    /// control grows on this ACK as usual (outside recovery, or slow start after a
    /// timeout); false while fast recovery governs cwnd.
    #[inline]
    pub fn on_new_ack(&mut self, f: Flight, acked: u64, cc: &mut Congestion) -> bool {
        self.sacked.remove_below(f.una);
        self.dupacks = 0;
        match self.episode {
            None => true,
            Some(r) => self.new_ack_in_recovery(r, f, acked, cc),
        }
    }

    fn new_ack_in_recovery(
        &mut self,
        r: Episode,
        f: Flight,
        acked: u64,
        cc: &mut Congestion,
    ) -> bool {
        if f.una >= r.point {
            self.episode = None;
            self.force_rtx = false;
            return match r.kind {
                Kind::Sack | Kind::NewReno => {
                    cc.end_recovery(f.nxt - f.una);
                    false
                }
                Kind::Timeout | Kind::PathMtu => true,
            };
        }
        match r.kind {
            Kind::NewReno => {
                // Partial ACK (RFC 6582 §3.2 step 5): retransmit the next hole, deflate
                // by what was acknowledged, add back one MSS.
                self.high_rxt = f.una;
                self.lost_floor = f.una + f.smss;
                self.force_rtx = true;
                let c = cc.cwnd().saturating_sub(acked);
                cc.set_cwnd(if acked >= f.smss { c + f.smss } else { c });
                false
            }
            Kind::Sack => false,
            Kind::Timeout | Kind::PathMtu => true,
        }
    }

    /// The retransmission timer expired with data outstanding (its backoff is the
    /// timer's part): everything outstanding is lost. `window_shut`: the peer's window is
    /// zero, so what went unanswered was a window probe — no congestion signal.
    pub fn on_timeout(&mut self, f: Flight, window_shut: bool, cc: &mut Congestion) {
        let again = matches!(
            self.episode,
            Some(Episode {
                kind: Kind::Timeout,
                ..
            })
        );
        if window_shut {
        } else if again {
            // The same data timed out again: ssthresh stays (RFC 5681 §3.1).
            cc.set_cwnd(f.smss);
        } else {
            cc.on_timeout(f.nxt - f.una);
        }
        self.episode = Some(Episode {
            kind: Kind::Timeout,
            point: f.nxt,
        });
        self.high_rxt = f.una;
        self.lost_floor = f.una;
        self.force_rtx = true;
        self.dupacks = 0;
        // The receiver may have reneged on what it SACKed (RFC 2018 §8): after a timeout
        // nothing is taken as held until it is SACKed again.
        self.sacked.clear();
    }

    /// The path MTU dropped and segments now cut smaller: everything outstanding and not
    /// SACKed was too big to arrive and is sent again, with no congestion response.
    pub fn on_path_mtu_drop(&mut self, f: Flight) {
        match &mut self.episode {
            Some(r) => r.point = r.point.max(f.nxt),
            None => {
                self.episode = Some(Episode {
                    kind: Kind::PathMtu,
                    point: f.nxt,
                })
            }
        }
        self.high_rxt = f.una;
        self.lost_floor = f.nxt;
        self.force_rtx = true;
        self.dupacks = 0;
    }

    /// The range to retransmit now, if any (RFC 6675 NextSeg rule 1; RFC 6582): in
    /// recovery, when cwnd leaves a segment's room above pipe (NewReno: only when a
    /// retransmission is due), the first lost bytes not yet retransmitted, at most
    /// `room` bytes. Taking it counts it as retransmitted (HighRxt).
    #[inline]
    pub fn next_retransmit(&mut self, f: Flight, room: u64, cwnd: u64) -> Option<(u64, u64)> {
        let r = self.episode?;
        self.retransmit_in_recovery(r, f, room, cwnd)
    }

    fn retransmit_in_recovery(
        &mut self,
        r: Episode,
        f: Flight,
        room: u64,
        cwnd: u64,
    ) -> Option<(u64, u64)> {
        let edge = self.lost_edge(f);
        let room_ok = r.kind != Kind::NewReno && cwnd >= self.pipe(f, edge) + f.smss;
        if !(self.force_rtx || room_ok) {
            return None;
        }
        let (s, e) = self.next_hole(f, edge, room)?;
        self.force_rtx = false;
        self.high_rxt = e;
        Some((s, e))
    }

    /// Bytes that count against cwnd when new data is sent: pipe during recovery (but
    /// NewReno's, which inflates cwnd instead), else everything outstanding.
    #[inline]
    pub fn in_flight(&self, f: Flight) -> u64 {
        match self.episode {
            Some(r) if r.kind != Kind::NewReno => self.pipe(f, self.lost_edge(f)),
            _ => f.nxt - f.una,
        }
    }

    /// Limited transmit (RFC 3042): outside recovery, each of the first two duplicate
    /// ACKs lets one more segment of new data out.
    #[inline]
    pub fn limited_transmit(&self, smss: u64) -> u64 {
        if self.episode.is_none() {
            self.dupacks.min(2) as u64 * smss
        } else {
            0
        }
    }

    /// RFC 6675 IsLost boundary from the scoreboard: unsacked bytes below it are lost
    /// (DupThresh SACKed blocks or more than (DupThresh - 1) * SMSS SACKed bytes above).
    fn scoreboard_lost_edge(&self, f: Flight) -> u64 {
        let need = (DUP_THRESH as u64 - 1) * f.smss + 1;
        let mut acc = 0;
        let mut edge = f.una;
        for (n, (s, e)) in self.sacked.iter().rev().enumerate() {
            if n + 1 >= DUP_THRESH as usize {
                edge = edge.max(s);
            }
            if acc + (e - s) >= need {
                edge = edge.max(e + acc - need);
                break;
            }
            acc += e - s;
        }
        edge.max(f.una)
    }

    /// Everything unsacked below this is lost.
    fn lost_edge(&self, f: Flight) -> u64 {
        let mut edge = self.scoreboard_lost_edge(f).max(self.lost_floor);
        if let Some(Episode {
            kind: Kind::Timeout | Kind::PathMtu,
            point,
        }) = self.episode
        {
            edge = edge.max(point);
        }
        edge.min(f.nxt)
    }

    fn unsacked(&self, a: u64, b: u64) -> u64 {
        if b <= a {
            return 0;
        }
        (b - a) - self.sacked.covered(a, b)
    }

    /// RFC 6675 pipe: bytes believed in the network — what is outstanding and not
    /// SACKed, less what is lost and not yet retransmitted.
    fn pipe(&self, f: Flight, lost_edge: u64) -> u64 {
        let from = f.una.max(self.high_rxt);
        self.unsacked(f.una, f.nxt) - self.unsacked(from, lost_edge)
    }

    /// The next lost range to retransmit: the first unsacked bytes at or past HighRxt
    /// below the lost edge, at most `room` bytes (one segment's payload).
    fn next_hole(&self, f: Flight, lost_edge: u64, room: u64) -> Option<(u64, u64)> {
        let from = f.una.max(self.high_rxt);
        self.sacked
            .gaps(from, lost_edge)
            .first()
            .map(|&(s, e)| (s, e.min(s + room)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::tcp::config::CongestionKind;
    use std::time::Instant;

    const MSS: u64 = 1000;

    /// Sequence offset of the first byte of data segment `k` (the SYN is offset 0).
    fn seg(k: u64) -> u64 {
        1 + k * MSS
    }

    fn flight(una: u64, nxt: u64) -> Flight {
        Flight {
            una,
            nxt,
            smss: MSS,
        }
    }

    /// Reno with ten segments of cwnd.
    fn reno() -> Congestion {
        Congestion::new(CongestionKind::Reno, MSS as usize, 10)
    }

    /// SACK blocks as offsets; the ISS is 0, so wire sequence numbers equal offsets.
    fn blocks(b: &[(u64, u64)]) -> SackBlocks {
        let wire: Vec<(u32, u32)> = b.iter().map(|&(l, r)| (l as u32, r as u32)).collect();
        SackBlocks::from_slice(&wire)
    }

    /// A duplicate ACK for `f.una` carrying `sack` (SACK agreed when any is given).
    fn dup_ack(l: &mut LossRecovery, cc: &mut Congestion, f: Flight, sack: &[(u64, u64)]) -> bool {
        l.on_sack(&blocks(sack), f.una as u32, f, f.una);
        l.on_dup_ack(f, !sack.is_empty(), cc)
    }

    #[test]
    fn three_duplicate_acks_start_newreno_recovery() {
        let (mut l, mut cc) = (LossRecovery::new(), reno());
        let f = flight(seg(0), seg(10));
        for n in 1..DUP_THRESH {
            assert!(!dup_ack(&mut l, &mut cc, f, &[]));
            assert!(!l.in_recovery());
            // Limited transmit: one more segment of new data per duplicate.
            assert_eq!(l.limited_transmit(MSS), n as u64 * MSS);
            assert_eq!(l.next_retransmit(f, MSS, cc.cwnd()), None);
        }
        assert!(dup_ack(&mut l, &mut cc, f, &[]));
        assert!(l.in_recovery());
        assert_eq!(l.limited_transmit(MSS), 0);
        // RFC 6582 §3.2 step 2: ssthresh = flight / 2, cwnd = ssthresh + 3 SMSS.
        assert_eq!(cc.ssthresh(), 5 * MSS);
        assert_eq!(cc.cwnd(), 8 * MSS);
        // The first unacknowledged segment goes at once, and only it.
        assert_eq!(l.next_retransmit(f, MSS, cc.cwnd()), Some((seg(0), seg(1))));
        assert_eq!(l.next_retransmit(f, MSS, cc.cwnd()), None);
        // NewReno counts all that is outstanding, and inflates cwnd per duplicate.
        assert_eq!(l.in_flight(f), 10 * MSS);
        assert!(!dup_ack(&mut l, &mut cc, f, &[]));
        assert_eq!(cc.cwnd(), 9 * MSS);
    }

    #[test]
    fn sacked_bytes_beyond_dupthresh_segments_start_recovery_at_once() {
        let (mut l, mut cc) = (LossRecovery::new(), reno());
        let f = flight(seg(0), seg(10));
        // (DupThresh - 1) * SMSS bytes SACKed above the hole: not yet lost (RFC 6675
        // IsLost wants more).
        assert!(!dup_ack(&mut l, &mut cc, f, &[(seg(1), seg(3))]));
        assert!(!l.in_recovery());
        // One byte more: the first segment is lost, on the second duplicate ACK.
        assert!(dup_ack(&mut l, &mut cc, f, &[(seg(1), seg(3) + 1)]));
        assert!(l.in_recovery());
        // SACK recovery: cwnd = ssthresh, no inflation.
        assert_eq!(cc.cwnd(), 5 * MSS);
        assert_eq!(cc.ssthresh(), 5 * MSS);
    }

    #[test]
    fn dupthresh_discontiguous_sacked_blocks_start_recovery() {
        let (mut l, mut cc) = (LossRecovery::new(), reno());
        let f = flight(seg(0), seg(10));
        // Three small SACKed blocks, 300 bytes in all, on the first duplicate ACK.
        let three = [
            (seg(5), seg(5) + 100),
            (seg(3), seg(3) + 100),
            (seg(1), seg(1) + 100),
        ];
        assert!(!dup_ack(&mut l, &mut cc, f, &three[..2]));
        assert!(dup_ack(&mut l, &mut cc, f, &three));
    }

    #[test]
    fn without_sack_the_scoreboard_is_not_consulted() {
        let (mut l, mut cc) = (LossRecovery::new(), reno());
        let f = flight(seg(0), seg(10));
        l.on_sack(&blocks(&[(seg(1), seg(6))]), f.una as u32, f, f.una);
        assert!(!l.on_dup_ack(f, false, &mut cc));
        assert!(!l.on_dup_ack(f, false, &mut cc));
        assert!(l.on_dup_ack(f, false, &mut cc));
    }

    #[test]
    fn sack_blocks_outside_the_flight_are_ignored() {
        let mut l = LossRecovery::new();
        let f = flight(seg(2), seg(10));
        // D-SACK (below the cumulative ACK), beyond what was sent, empty.
        let b = blocks(&[(seg(0), seg(1)), (seg(9), seg(11)), (seg(4), seg(4))]);
        assert!(!l.on_sack(&b, f.una as u32, f, f.una));
        assert!(l.on_sack(&blocks(&[(seg(4), seg(5))]), f.una as u32, f, f.una));
        // Nothing new the second time.
        assert!(!l.on_sack(&blocks(&[(seg(4), seg(5))]), f.una as u32, f, f.una));
        l.check_invariants(f);
    }

    #[test]
    fn next_seg_retransmits_lost_holes_in_order_as_pipe_allows() {
        let (mut l, mut cc) = (LossRecovery::new(), reno());
        let f = flight(seg(0), seg(10));
        // Segments 2 and 4-6 SACKed: 4000 bytes above the holes at 0, 1 and 3.
        assert!(dup_ack(
            &mut l,
            &mut cc,
            f,
            &[(seg(4), seg(7)), (seg(2), seg(3))]
        ));
        assert_eq!(cc.cwnd(), 5 * MSS);
        // Pipe: 6000 unsacked bytes, of which 0, 1 and 3 are lost: 7, 8, 9 are in the
        // network.
        assert_eq!(l.in_flight(f), 3 * MSS);
        // The first hole goes regardless of cwnd (RFC 6675 §5 step 4.3) ...
        assert_eq!(l.next_retransmit(f, MSS, cc.cwnd()), Some((seg(0), seg(1))));
        assert_eq!(l.in_flight(f), 4 * MSS);
        // ... the next while cwnd >= pipe + SMSS ...
        assert_eq!(l.next_retransmit(f, MSS, cc.cwnd()), Some((seg(1), seg(2))));
        assert_eq!(l.in_flight(f), 5 * MSS);
        // ... and then none.
        assert_eq!(l.next_retransmit(f, MSS, cc.cwnd()), None);
        // Segment 7 arrives: pipe falls by one; the next hole skips SACKed segment 2.
        assert!(!dup_ack(
            &mut l,
            &mut cc,
            f,
            &[(seg(4), seg(8)), (seg(2), seg(3))]
        ));
        assert_eq!(l.in_flight(f), 4 * MSS);
        assert_eq!(l.next_retransmit(f, MSS, cc.cwnd()), Some((seg(3), seg(4))));
        assert_eq!(l.in_flight(f), 5 * MSS);
        // Segments 8 and 9 are not lost (too little is SACKed above them): no rule-1
        // retransmission is left; new data is the sender's to send.
        assert_eq!(l.next_retransmit(f, MSS, 20 * MSS), None);
        // A retransmission is at most `room` bytes.
        let mut l2 = l.clone();
        l2.on_timeout(f, false, &mut reno());
        assert_eq!(
            l2.next_retransmit(f, 300, 20 * MSS),
            Some((seg(0), seg(0) + 300))
        );
    }

    #[test]
    fn recovery_ends_when_the_recovery_point_is_acknowledged() {
        let (mut l, mut cc) = (LossRecovery::new(), reno());
        let f = flight(seg(0), seg(10));
        assert!(dup_ack(&mut l, &mut cc, f, &[(seg(2), seg(6))]));
        assert_eq!(l.next_retransmit(f, MSS, cc.cwnd()), Some((seg(0), seg(1))));
        // Segment 1 is lost too, but pipe (segments 0 and 6-9) leaves no room.
        assert_eq!(l.in_flight(f), 5 * MSS);
        assert_eq!(l.next_retransmit(f, MSS, cc.cwnd()), None);
        // A partial ACK (past the SACKed block): recovery goes on, cwnd is
        // recovery's (no growth), the scoreboard below SND.UNA is gone.
        let partial = flight(seg(6), seg(12));
        assert!(!l.on_new_ack(partial, 6 * MSS, &mut cc));
        assert!(l.in_recovery());
        l.check_invariants(partial);
        assert_eq!(cc.cwnd(), 5 * MSS);
        // The recovery point (HighData when recovery began): over. cwnd deflates to
        // ssthresh (RFC 6675 §5 step 3; less with little in flight).
        let done = flight(seg(10), seg(14));
        assert!(!l.on_new_ack(done, 4 * MSS, &mut cc));
        assert!(!l.in_recovery());
        assert_eq!(cc.cwnd(), 5 * MSS);
        assert_eq!(l.in_flight(done), 4 * MSS);
        // Afterwards ACKs grow cwnd as usual, and a new loss needs DupThresh duplicates.
        assert!(l.on_new_ack(flight(seg(11), seg(14)), MSS, &mut cc));
        let f = flight(seg(11), seg(14));
        assert!(!dup_ack(&mut l, &mut cc, f, &[]));
        assert!(!dup_ack(&mut l, &mut cc, f, &[]));
        assert!(dup_ack(&mut l, &mut cc, f, &[]));
    }

    #[test]
    fn newreno_partial_ack_retransmits_the_next_hole() {
        let (mut l, mut cc) = (LossRecovery::new(), reno());
        let f = flight(seg(0), seg(10));
        for _ in 0..DUP_THRESH {
            dup_ack(&mut l, &mut cc, f, &[]);
        }
        assert_eq!(l.next_retransmit(f, MSS, cc.cwnd()), Some((seg(0), seg(1))));
        // RFC 6582 §3.2 step 5: deflate by what was acknowledged, add back one SMSS,
        // retransmit the first unacknowledged segment.
        let partial = flight(seg(3), seg(10));
        assert!(!l.on_new_ack(partial, 3 * MSS, &mut cc));
        assert!(l.in_recovery());
        assert_eq!(cc.cwnd(), 8 * MSS - 3 * MSS + MSS);
        assert_eq!(
            l.next_retransmit(partial, MSS, cc.cwnd()),
            Some((seg(3), seg(4)))
        );
        assert_eq!(l.next_retransmit(partial, MSS, cc.cwnd()), None);
        // Full ACK: cwnd = min(ssthresh, flight + SMSS) (RFC 6582 §3.2 step 3).
        assert!(!l.on_new_ack(flight(seg(10), seg(10)), 7 * MSS, &mut cc));
        assert!(!l.in_recovery());
        assert_eq!(cc.cwnd(), 2 * MSS);
    }

    #[test]
    fn timeout_makes_everything_lost_and_slow_starts() {
        let (mut l, mut cc) = (LossRecovery::new(), reno());
        let f = flight(seg(0), seg(10));
        // Segment 5 SACKed, not enough for recovery.
        dup_ack(&mut l, &mut cc, f, &[(seg(5), seg(6))]);
        assert!(!l.in_recovery());
        l.on_timeout(f, false, &mut cc);
        assert!(l.in_recovery());
        // RFC 5681 §3.1 (7) and (4): ssthresh = flight / 2, cwnd = one segment.
        assert_eq!(cc.ssthresh(), 5 * MSS);
        assert_eq!(cc.cwnd(), MSS);
        // Nothing is in the network; what was SACKed is forgotten (the receiver may
        // renege, RFC 2018 §8).
        assert_eq!(l.in_flight(f), 0);
        assert_eq!(l.next_retransmit(f, MSS, cc.cwnd()), Some((seg(0), seg(1))));
        assert_eq!(l.next_retransmit(f, MSS, cc.cwnd()), None);
        // The retransmission is acknowledged: slow start (the caller grows cwnd).
        let f = flight(seg(1), seg(10));
        assert!(l.on_new_ack(f, MSS, &mut cc));
        cc.on_ack(MSS, Instant::now(), None);
        assert_eq!(cc.cwnd(), 2 * MSS);
        assert_eq!(l.next_retransmit(f, MSS, cc.cwnd()), Some((seg(1), seg(2))));
        assert_eq!(l.next_retransmit(f, MSS, cc.cwnd()), Some((seg(2), seg(3))));
        assert_eq!(l.next_retransmit(f, MSS, cc.cwnd()), None);
        // The same data times out again: cwnd one segment, ssthresh not halved again.
        l.on_timeout(f, false, &mut cc);
        assert_eq!(cc.cwnd(), MSS);
        assert_eq!(cc.ssthresh(), 5 * MSS);
        assert_eq!(l.next_retransmit(f, MSS, cc.cwnd()), Some((seg(1), seg(2))));
        // Recovery ends at HighData of the last timeout.
        assert!(l.on_new_ack(flight(seg(10), seg(10)), 9 * MSS, &mut cc));
        assert!(!l.in_recovery());
    }

    #[test]
    fn unanswered_window_probe_is_no_congestion() {
        let (mut l, mut cc) = (LossRecovery::new(), reno());
        let f = flight(seg(0), seg(1));
        l.on_timeout(f, true, &mut cc);
        assert_eq!(cc.cwnd(), 10 * MSS);
        assert_eq!(cc.ssthresh(), u64::MAX);
        assert_eq!(l.next_retransmit(f, MSS, cc.cwnd()), Some((seg(0), seg(1))));
    }

    #[test]
    fn path_mtu_drop_resends_unsacked_data_without_congestion_response() {
        let (mut l, mut cc) = (LossRecovery::new(), reno());
        let f = flight(seg(0), seg(4));
        l.on_sack(&blocks(&[(seg(1), seg(2))]), f.una as u32, f, f.una);
        l.on_path_mtu_drop(f);
        assert_eq!(cc.cwnd(), 10 * MSS);
        // Cut to the new size (room), SACKed bytes skipped.
        assert_eq!(
            l.next_retransmit(f, 600, cc.cwnd()),
            Some((seg(0), seg(0) + 600))
        );
        assert_eq!(
            l.next_retransmit(f, 600, cc.cwnd()),
            Some((seg(0) + 600, seg(1)))
        );
        assert_eq!(
            l.next_retransmit(f, 600, cc.cwnd()),
            Some((seg(2), seg(2) + 600))
        );
        // Ends at HighData; congestion control grows as usual on the ACKs.
        assert!(l.on_new_ack(flight(seg(4), seg(4)), 4 * MSS, &mut cc));
        assert!(!l.in_recovery());
    }
}
