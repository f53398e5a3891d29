//! The receiving side: data and FIN taken in order into the sink (the out-of-order
//! buffer and staging are [`super::super::recv::Receiver`]'s), the events that report
//! them, when to acknowledge, and the receive window offered (RFC 9293 §3.8.6, RFC 7323
//! §2.4).

use std::time::Instant;

use super::super::io::RecvSink;
use super::super::wire::{flags, Segment};
use super::{Connection, Event, State, QUICK_ACK};

impl Connection {
    /// The sink's space changed (receive buffers were posted): staged bytes move into
    /// it, and the window opened is announced. At once when the peer may be held back
    /// (the window it knows of is under two segments); otherwise with the next segment
    /// that goes anyway, or the quick ACK's timer at the latest — a receiver that reposts
    /// a buffer per message would else send a window update per message beside its data.
    pub fn recv_space_changed(&mut self, now: Instant, sink: &mut dyn RecvSink) {
        self.pool_short = false;
        self.sink_space = sink.space();
        self.deliver_staged(sink, now);
        self.sink_space = sink.space();
        self.keep_promise();
        if self.synchronized() && !self.fin_rcvd && self.window_grows() {
            let known = self.adv_edge.saturating_sub(self.rcv_nxt());
            if known < 2 * self.cfg.mss as u64 {
                self.ack_now = true;
            } else {
                self.ack_soon(now);
            }
        }
    }

    /// The application was handed something its peer may be waiting on (in the device: a
    /// receive WR completed): what arrived is acknowledged within [`QUICK_ACK`] instead of
    /// the delayed-ACK timer, so a peer whose sends complete when acknowledged (a QP's
    /// send WRs) does not wait for the timer — and an answer the application sends within
    /// that time carries the ACK (a request/response exchange sends one segment each way).
    pub fn ack_delivery(&mut self, now: Instant) {
        if self.unacked_rcv > 0 || self.delack_at.is_some() {
            self.ack_soon(now);
        }
    }

    /// Acknowledges within [`QUICK_ACK`] (sooner if the delayed ACK is due sooner).
    pub(super) fn ack_soon(&mut self, now: Instant) {
        let at = now + QUICK_ACK;
        if !matches!(self.delack_at, Some(t) if t <= at) {
            self.delack_at = Some(at);
        }
    }

    /// Receive space we can offer: the in-order bytes beyond RCV.NXT that the receiver
    /// takes now — the sink's space and what is left of the staging allowance (the sink
    /// takes nothing while bytes wait in staging ahead of it).
    /// While the memory pool is short ([`Connection::retract`]) staging is not offered.
    pub(super) fn avail_window(&self) -> u64 {
        let sink = if self.rcv.staged() == 0 {
            self.sink_space
        } else {
            0
        };
        let staging = if self.pool_short {
            0
        } else {
            self.rcv.staging_room()
        };
        (sink + staging) as u64
    }

    /// In-order bytes inside the window were dropped: staging had room for them (it
    /// always has for what the window offered, [`Connection::keep_promise`]), so the
    /// function's or the adapter's memory pool refused them. The promise cannot be kept:
    /// the window is withdrawn — the right edge goes back to RCV.NXT and, until the sink's
    /// space changes, only the sink's space is offered — so that the peer probes a zero
    /// window instead of sending again and again into one that is not there. RFC 9293
    /// §3.8.6 discourages shrinking the window (SHLD-14) but allows it, and requires
    /// senders to cope (MUST-34); RFC 7323 §2.4 and Linux's `tcp_shrink_window` do it for
    /// this reason, memory exhausted.
    fn retract(&mut self) {
        self.pool_short = true;
        self.adv_edge = self.adv_edge.min(self.rcv_nxt());
        self.stats.window_retractions += 1;
    }

    /// What the window advertised stays accepted when the sink's space shrinks by more
    /// than the bytes it took — a stream receive completed early (PSH) gives up the rest
    /// of its buffer: staging grows to take every byte up to the advertised right edge,
    /// and back to the allowance as the promise is used up or the sink grows again. The
    /// promise is bounded by what a window field can say (65535 << the window shift) and
    /// what staging holds is charged to the memory pool; the right edge does not move
    /// while staging holds more than the allowance ([`Connection::avail_window`] offers
    /// only what is left of the promise).
    pub(super) fn keep_promise(&mut self) {
        if self.adv_edge == 0 {
            return;
        }
        let promised = self.adv_edge.saturating_sub(self.rcv_nxt()) as usize;
        let staged = self.rcv.staged();
        let sink = if staged == 0 { self.sink_space } else { 0 };
        let need = staged + promised.saturating_sub(sink);
        self.rcv.set_staging_cap(need.max(self.cfg.staging));
    }

    /// Receiver silly window avoidance (RFC 9293 §3.8.6.2.2): the right edge moves only
    /// by at least min(MSS, half the buffer).
    fn sws_threshold(&self) -> u64 {
        (self.cfg.mss as u64)
            .min((self.sink_space + self.cfg.staging) as u64 / 2)
            .max(1)
    }

    /// Whether the receive space reaches far enough beyond the advertised right edge to
    /// move it (receiver SWS avoidance): by the threshold, or by half of it when the
    /// window offered is nearly closed.
    fn window_grows(&self) -> bool {
        let rcv_nxt = self.rcv_nxt();
        let edge = rcv_nxt + self.avail_window();
        let threshold = self.sws_threshold();
        self.adv_edge == 0
            || edge >= self.adv_edge + threshold
            || (self.adv_edge <= rcv_nxt + threshold / 2 && edge > self.adv_edge + threshold / 2)
    }

    /// The window field to send (RFC 9293 §3.8.6, RFC 7323 §2.4). What it advertises is
    /// accepted: a new right edge never passes what the receiver can take
    /// ([`Connection::avail_window`]), so with staging full and nothing posted the window
    /// is zero. The edge moves right only as receiver SWS avoidance allows, and never
    /// left (RFC 9293 SHLD-14) but for the rounding of a scaled window: the field is the
    /// edge rounded up to the scale unit when the receiver can take those bytes, else
    /// rounded down — the edge then appears to retreat by less than one unit (RFC 7323
    /// appendix F), and segments up to the old edge are still taken — also when the
    /// sink's space shrank meanwhile ([`Connection::keep_promise`]).
    pub(super) fn take_window(&mut self) -> u16 {
        let rcv_nxt = self.rcv_nxt();
        let room = self.avail_window();
        let unit = 1u64 << self.rcv_shift;
        let want = if self.window_grows() {
            room
        } else {
            self.adv_edge.saturating_sub(rcv_nxt)
        };
        let up = want.div_ceil(unit);
        let field = if up * unit <= room { up } else { want / unit };
        let field = field.min(u16::MAX as u64);
        self.adv_edge = self.adv_edge.max(rcv_nxt + (field << self.rcv_shift));
        field as u16
    }

    // ---- received data ------------------------------------------------------------

    pub(super) fn on_data(
        &mut self,
        seg: &Segment,
        seg_off: i64,
        now: Instant,
        sink: &mut dyn RecvSink,
    ) {
        let h = &seg.header;
        let rcv_nxt = self.rcv_nxt() as i64;
        let mut payload = seg.payload;
        let mut fin = h.fin();
        // Trim what lies beyond the window we offered; a trimmed FIN is not seen.
        let edge = self.adv_edge as i64;
        let end = seg_off + payload.len() as i64;
        if end > edge {
            let keep = (edge - seg_off).clamp(0, payload.len() as i64) as usize;
            self.stats.dropped_bytes += (payload.len() - keep) as u64;
            payload = &payload[..keep];
            fin = false;
        }
        if !self.fin_rcvd && !payload.is_empty() && end > rcv_nxt {
            // Stream offset of the first byte (offset 1 is stream byte 0).
            let (off, data) = if seg_off < 1 {
                let skip = (1 - seg_off) as usize;
                (0u64, &payload[skip.min(payload.len())..])
            } else {
                ((seg_off - 1) as u64, payload)
            };
            let out = self.rcv.on_data(off, data, h.has(flags::PSH), sink);
            if out.out_of_order {
                self.stats.out_of_order += 1;
                self.ack_now = true;
            }
            if out.filled_hole {
                self.ack_now = true;
            }
            if out.dropped > 0 {
                self.stats.dropped_bytes += out.dropped;
                self.ack_now = true;
                if !out.out_of_order {
                    self.retract();
                }
            }
            self.unacked_rcv += out.advanced;
        } else if !payload.is_empty() {
            // Entirely old: our ACK may have been lost.
            self.stats.dup_segments += 1;
            self.ack_now = true;
        }
        if fin && !self.fin_rcvd {
            let at = seg_off + seg.payload.len() as i64 - 1;
            if at >= 0 {
                self.rcv.set_fin(at as u64);
            }
            if self.rcv.fin() != Some(self.rcv.next()) {
                // Out of order FIN: ACK what we have.
                self.ack_now = true;
            }
        }
        self.report_delivery();
        self.check_fin(now);
        // Delayed ACK: at least every second full segment (RFC 9293 §3.8.6.3).
        if !self.ack_now && self.unacked_rcv > 0 {
            match self.cfg.delayed_ack {
                Some(d) if self.unacked_rcv < 2 * self.cfg.mss as u64 => {
                    if self.delack_at.is_none() {
                        self.delack_at = Some(now + d);
                    }
                }
                _ => self.ack_now = true,
            }
        }
    }

    /// The FIN is consumed once the in-order point reaches it.
    fn check_fin(&mut self, now: Instant) {
        if self.fin_rcvd || self.rcv.fin() != Some(self.rcv.next()) {
            return;
        }
        self.fin_rcvd = true;
        self.ack_now = true;
        match self.state {
            State::Established => self.state = State::CloseWait,
            State::FinWait1 => {
                if self.fin_queued && self.una == self.end_all() {
                    self.enter_time_wait(now);
                } else {
                    self.state = State::Closing;
                }
            }
            State::FinWait2 => self.enter_time_wait(now),
            _ => {}
        }
        self.report_peer_closed();
    }

    #[inline]
    fn report_delivery(&mut self) {
        let upto = self.rcv.delivered();
        if upto > self.delivered_reported {
            self.delivered_reported = upto;
            let push = self.rcv.take_push(upto);
            self.events.push_back(Event::DataArrived { upto, push });
        }
    }

    fn report_peer_closed(&mut self) {
        if self.fin_rcvd && !self.peer_closed_reported && self.rcv.staged() == 0 {
            self.peer_closed_reported = true;
            self.events.push_back(Event::PeerClosed);
        }
    }

    pub(super) fn deliver_staged(&mut self, sink: &mut dyn RecvSink, now: Instant) {
        let next = self.rcv.next();
        if self.rcv.drain_staging(sink) > 0 {
            self.report_delivery();
        }
        if self.rcv.next() > next {
            // Held data moved up behind the staged bytes: acknowledge it.
            self.ack_now = true;
            if matches!(
                self.state,
                State::Established | State::FinWait1 | State::FinWait2
            ) {
                self.check_fin(now);
            }
        }
        self.report_peer_closed();
    }
}
