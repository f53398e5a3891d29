//! What a connection sends: resets, SYN and SYN-ACK, data (new or retransmitted as loss
//! recovery chooses, within the peer's window and cwnd, with Nagle and sender silly
//! window avoidance), window probes, keepalives and ACKs.

use std::time::Instant;

use super::super::io::SendSource;
use super::super::wire::{self, flags, Header, Options, SackBlocks};
use super::recovery::Flight;
use super::{Connection, Outgoing, State, GSO_MAX_PAYLOAD};

impl Connection {
    /// Payload bytes a data segment sent now may carry: the send MSS less the SACK blocks
    /// the segment will carry. The MSS counts a bare TCP header (RFC 6691 §2; the
    /// timestamps already come off in [`Connection::smss`]), so when the options grow the
    /// payload shrinks, as Linux's tcp_current_mss() does, instead of the packet outgrowing
    /// the path MTU and being fragmented at the source.
    pub(super) fn seg_room(&self, now: Instant) -> u64 {
        let m = self.peer_mss.min(self.mss_limit) as usize;
        m.saturating_sub(self.options(now).wire_len()).max(64) as u64
    }

    pub(super) fn options(&self, now: Instant) -> Options {
        let mut o = Options::default();
        if self.ts_ok {
            o.timestamps = Some((self.ts_now(now), self.ts_recent));
        }
        if self.sack_ok && self.rcv.has_held() {
            let mut b = SackBlocks::new();
            for (s, e) in self.rcv.sack_blocks() {
                b.push((self.rcv_seq(1 + s), self.rcv_seq(1 + e)));
            }
            o.sack = b;
        }
        o
    }

    fn emit(&mut self, h: &Header, len: usize, fill: impl FnOnce(&mut [u8])) -> Outgoing {
        let segment = wire::emit(&self.tuple.local, &self.tuple.remote, h, len, fill);
        self.stats.segments_out += 1;
        self.stats.bytes_out += len as u64;
        if h.ack_flag() {
            self.ack_now = false;
            self.unacked_rcv = 0;
            self.delack_at = None;
            self.last_ack_sent = self.rcv_nxt();
        }
        Outgoing {
            src: self.tuple.local,
            dst: self.tuple.remote,
            segment,
            gso: 0,
        }
    }

    fn header(&mut self, seq_off: u64, fl: u8, now: Instant) -> Header {
        let ack_ok = fl & flags::ACK != 0;
        Header {
            src_port: self.tuple.local_port,
            dst_port: self.tuple.remote_port,
            seq: self.snd_seq(seq_off),
            ack: if ack_ok {
                self.rcv_seq(self.rcv_nxt())
            } else {
                0
            },
            flags: fl,
            window: if ack_ok { self.take_window() } else { 0 },
            urgent: 0,
            options: self.options(now),
        }
    }

    /// Window room for new data (offsets).
    pub(super) fn snd_room(&self) -> u64 {
        (self.snd_wl2 + self.snd_wnd).saturating_sub(self.nxt)
    }

    /// The next segment to send, if any; call until None after every input, timer run
    /// or application call. Data is read from `source` at its stream offsets.
    pub fn poll_transmit(&mut self, now: Instant, source: &mut dyn SendSource) -> Option<Outgoing> {
        let _stage = crate::stages::span(crate::stages::Stage::BuildHeaders);
        if let Some(seq) = self.reply_rst.take() {
            let h = Header {
                src_port: self.tuple.local_port,
                dst_port: self.tuple.remote_port,
                seq,
                flags: flags::RST,
                ..Header::default()
            };
            self.stats.resets_out += 1;
            return Some(self.emit(&h, 0, |_| {}));
        }
        if self.rst_pending {
            self.rst_pending = false;
            let h = Header {
                src_port: self.tuple.local_port,
                dst_port: self.tuple.remote_port,
                seq: self.snd_seq(self.nxt),
                flags: flags::RST,
                ..Header::default()
            };
            self.stats.resets_out += 1;
            return Some(self.emit(&h, 0, |_| {}));
        }
        match self.state {
            State::Closed => None,
            State::SynSent | State::SynReceived if self.nxt == 0 => Some(self.send_syn(now)),
            State::SynSent => None,
            State::SynReceived => {
                // Data waits for ESTABLISHED; only ACKs (answers to unacceptable
                // segments) go out.
                if self.ack_now {
                    let h = self.header(self.nxt, flags::ACK, now);
                    return Some(self.emit(&h, 0, |_| {}));
                }
                None
            }
            _ => {
                if self.state != State::TimeWait {
                    if let Some(o) = self.send_data(now, source) {
                        return Some(o);
                    }
                    if self.keepalive_pending {
                        self.keepalive_pending = false;
                        // <SEQ=SND.NXT-1>: the peer must answer with an ACK.
                        let h = self.header(self.nxt - 1, flags::ACK, now);
                        return Some(self.emit(&h, 0, |_| {}));
                    }
                }
                if self.ack_now {
                    let h = self.header(self.nxt, flags::ACK, now);
                    return Some(self.emit(&h, 0, |_| {}));
                }
                None
            }
        }
    }

    /// Every segment due now.
    pub fn transmit_all(&mut self, now: Instant, source: &mut dyn SendSource) -> Vec<Outgoing> {
        let mut v = Vec::new();
        while let Some(o) = self.poll_transmit(now, source) {
            v.push(o);
        }
        v
    }

    fn send_syn(&mut self, now: Instant) -> Outgoing {
        let synack = self.state == State::SynReceived;
        let mut o = Options {
            mss: Some(self.cfg.mss),
            ..Options::default()
        };
        if synack {
            if self.ws_ok {
                o.window_scale = Some(self.rcv_shift);
            }
            o.sack_permitted = self.sack_ok;
            if self.ts_ok {
                o.timestamps = Some((self.ts_now(now), self.ts_recent));
            }
        } else {
            o.window_scale = self.cfg.window_scale.map(|s| s.min(wire::MAX_WINDOW_SHIFT));
            o.sack_permitted = self.cfg.sack;
            if self.cfg.timestamps {
                o.timestamps = Some((self.ts_now(now), 0));
            }
        }
        // The window in a SYN is unscaled.
        let wnd = self.avail_window().min(u16::MAX as u64);
        let mut h = Header {
            src_port: self.tuple.local_port,
            dst_port: self.tuple.remote_port,
            seq: self.iss,
            ack: 0,
            flags: flags::SYN,
            window: wnd as u16,
            urgent: 0,
            options: o,
        };
        if synack {
            h.flags |= flags::ACK;
            h.ack = self.rcv_seq(1);
            self.adv_edge = self.adv_edge.max(1 + wnd);
        } else {
            self.syn_window = wnd;
        }
        if self.syn_retransmitted {
            self.stats.retransmitted_segments += 1;
        } else {
            self.rtt_probe = Some((1, now));
        }
        self.nxt = 1;
        if self.rto_at.is_none() {
            self.rto_at = Some(now + self.rtt.rto());
        }
        self.emit(&h, 0, |_| {})
    }

    /// Data (new or retransmitted) or FIN, if the windows allow.
    fn send_data(&mut self, now: Instant, source: &mut dyn SendSource) -> Option<Outgoing> {
        let end_all = self.end_all();
        let smss = self.smss() as u64;
        let room = self.seg_room(now);
        if self.probe_pending {
            self.probe_pending = false;
            if self.nxt < end_all && self.una == self.nxt {
                let (s, e) = (self.nxt, self.nxt + 1);
                self.nxt = e;
                self.arm_rto(now);
                return Some(self.send_range(s, e, now, source, false));
            }
        }
        let flight = Flight {
            una: self.una,
            nxt: self.nxt,
            smss,
        };
        if let Some((s, e)) = self.loss.next_retransmit(flight, room, self.cc.cwnd()) {
            self.arm_rto(now);
            return Some(self.send_range(s, e, now, source, true));
        }
        if self.nxt >= end_all {
            return None;
        }
        // New data: within the peer's window and the congestion window.
        let in_flight = self.loss.in_flight(flight);
        let cwnd = self.cc.cwnd() + self.loss.limited_transmit(smss);
        let cwnd_room = cwnd.saturating_sub(in_flight);
        let wnd_room = self.snd_room();
        let remaining = end_all - self.nxt;
        // With segmentation offload, as many whole segments as fit in one super-segment.
        let most = if self.cfg.gso {
            (GSO_MAX_PAYLOAD / room).max(1) * room
        } else {
            room
        };
        let mut len = most.min(remaining).min(wnd_room).min(cwnd_room);
        if len == 0 {
            if wnd_room == 0 && self.una == self.nxt && self.persist_at.is_none() {
                // Zero window and nothing in flight to bring an update: probe later.
                let t = self.rtt.rto() * (1 << self.persist_backoff.min(10));
                self.persist_at = Some(now + t.clamp(self.cfg.min_rto, self.cfg.max_rto));
            }
            return None;
        }
        // Sender silly window avoidance and Nagle (RFC 9293 §3.8.6.2.1).
        let idle = self.una == self.nxt;
        let send = len >= room
            || (len == remaining && (!self.cfg.nagle || idle))
            || len >= self.max_snd_wnd / 2
            || idle && wnd_room < room && len == wnd_room;
        if !send {
            return None;
        }
        if len > room && len < remaining {
            // A super-segment is whole segments, but for the end of the data.
            len -= len % room;
        }
        // A source of records (iWARP FPDUs) ends the segment where a record ends, which is
        // a short segment sent at once rather than held: the next record starts the next.
        let start = self.nxt - 1;
        len = match source.segment_end(start, len, room) - start {
            0 => len,
            cut => cut.min(len),
        };
        let (s, e) = (self.nxt, self.nxt + len);
        self.nxt = e;
        if self.rtt_probe.is_none() && !self.ts_ok && !self.loss.in_recovery() {
            self.rtt_probe = Some((e, now));
        }
        self.arm_rto(now);
        Some(self.send_range(s, e, now, source, false))
    }

    /// Builds the segment for sequence offsets `[s, e)` (data, and FIN if `e` covers it).
    #[inline]
    fn send_range(
        &mut self,
        s: u64,
        e: u64,
        now: Instant,
        source: &mut dyn SendSource,
        retransmit: bool,
    ) -> Outgoing {
        let data_end = 1 + self.queued;
        let ds = s.max(1);
        let de = e.min(data_end);
        let len = de.saturating_sub(ds) as usize;
        let mut fl = flags::ACK;
        if self.fin_queued && e > data_end {
            fl |= flags::FIN;
        }
        if len > 0 && de == data_end {
            fl |= flags::PSH;
        }
        if retransmit {
            self.stats.retransmitted_segments += 1;
            self.stats.retransmitted_bytes += len as u64;
        }
        let h = self.header(s, fl, now);
        let piece = self.seg_room(now);
        let mut o = self.emit(&h, len, |buf| {
            if !buf.is_empty() {
                source.read(ds - 1, buf)
            }
        });
        if len as u64 > piece {
            o.gso = piece as u16;
            self.stats.segments_out += (len as u64).div_ceil(piece) - 1;
        }
        o
    }
}
