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
    pub fn on_new_ack(&mut self, f: Flight, acked: u64, cc: &mut Congestion) -> bool {
        self.sacked.remove_below(f.una);
        self.dupacks = 0;
        match self.episode {
            Some(r) if f.una >= r.point => {
                self.episode = None;
                self.force_rtx = false;
                match r.kind {
                    Kind::Sack | Kind::NewReno => {
                        cc.end_recovery(f.nxt - f.una);
                        false
                    }
                    Kind::Timeout | Kind::PathMtu => true,
                }
            }
            Some(r) => match r.kind {
                Kind::NewReno => {
                    // Partial ACK (RFC 6582 §3.2 step 5): retransmit the next hole,
                    // deflate by what was acknowledged, add back one MSS.
                    self.high_rxt = f.una;
                    self.lost_floor = f.una + f.smss;
                    self.force_rtx = true;
                    let c = cc.cwnd().saturating_sub(acked);
                    cc.set_cwnd(if acked >= f.smss { c + f.smss } else { c });
                    false
                }
                Kind::Sack => false,
                Kind::Timeout | Kind::PathMtu => true,
            },
            None => true,
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
    pub fn next_retransmit(&mut self, f: Flight, room: u64, cwnd: u64) -> Option<(u64, u64)> {
        let r = self.episode?;
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
