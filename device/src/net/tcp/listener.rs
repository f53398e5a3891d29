//! LISTEN: answering SYNs for a port. Each SYN takes a half-open connection (SYN-RECEIVED)
//! while the backlog has room; beyond it, SYN cookies answer without keeping any state
//! (the handshake is rebuilt from the ACK that comes back), so a SYN flood can fill
//! neither memory nor the backlog.
//!
//! A cookie is our ISN: `t (5 bits) | MSS index (3 bits) | 24 bits of a keyed hash` of
//! the 4-tuple, the peer's ISN and `t` (a 64-second counter). When the peer uses
//! timestamps, our TSval's low 5 bits keep its window shift and SACK-permitted (as Linux
//! does); without timestamps a cookie connection has neither.

use std::net::Ipv6Addr;
use std::time::{Duration, Instant};

use super::config::Config;
use super::connection::{Connection, FourTuple, Outgoing};
use super::isn::{siphash24, tuple_bytes, IsnGenerator};
use super::wire::{self, flags, Header, Options, Segment};

/// The MSS values a cookie can carry (the largest not above the peer's is used).
const COOKIE_MSS: [u16; 8] = [536, 1220, 1280, 1380, 1440, 1460, 4036, 8940];
/// Cookie age unit.
const COOKIE_TICK: Duration = Duration::from_secs(64);

/// What a segment to a listening port brought.
#[derive(Debug)]
pub enum ListenOutcome {
    /// Nothing: a reset, a segment with neither SYN nor ACK, or a SYN dropped because
    /// the backlog is full and cookies are off.
    Ignore,
    /// A stateless answer: a reset for a stray ACK, or a SYN-ACK carrying a cookie.
    Reply(Outgoing),
    /// A SYN took a half-open connection: it waits in SYN-RECEIVED with its SYN-ACK due.
    HalfOpen(Connection),
    /// An ACK returned a valid cookie: the connection is made (in SYN-RECEIVED); hand it
    /// the same segment to complete the handshake.
    FromCookie(Connection),
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListenerStats {
    pub syns: u64,
    pub half_open_created: u64,
    pub cookies_sent: u64,
    pub cookies_accepted: u64,
    pub cookies_rejected: u64,
    pub backlog_drops: u64,
    pub resets_sent: u64,
}

#[derive(Debug)]
pub struct Listener {
    local: Ipv6Addr,
    port: u16,
    cfg: Config,
    backlog: usize,
    cookies: bool,
    half_open: usize,
    base: Instant,
    stats: ListenerStats,
}

impl Listener {
    /// Listens on `port` of `local` (the unspecified address: any of the device's).
    /// At most `backlog` half-open connections at once; beyond, cookies if `cookies`.
    pub fn new(
        local: Ipv6Addr,
        port: u16,
        cfg: Config,
        backlog: usize,
        cookies: bool,
        now: Instant,
    ) -> Listener {
        Listener {
            local,
            port,
            cfg,
            backlog,
            cookies,
            half_open: 0,
            base: now,
            stats: ListenerStats::default(),
        }
    }

    pub fn local(&self) -> (Ipv6Addr, u16) {
        (self.local, self.port)
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    pub fn stats(&self) -> &ListenerStats {
        &self.stats
    }

    pub fn half_open(&self) -> usize {
        self.half_open
    }

    /// A half-open connection of this listener completed or died.
    pub fn half_open_done(&mut self) {
        self.half_open = self.half_open.saturating_sub(1);
    }

    /// RFC 9293 §3.10.7.2 for a segment that matched no connection.
    pub fn on_segment(
        &mut self,
        seg: &Segment,
        now: Instant,
        isn: &IsnGenerator,
        sink_space: usize,
    ) -> ListenOutcome {
        self.on_segment_with_iss(seg, now, isn, sink_space, None)
    }

    /// [`Listener::on_segment`] where a half-open connection takes `iss` (if given) for
    /// its ISN instead of the generator's: a SYN that reopens a connection from
    /// TIME-WAIT. (A SYN answered with a cookie keeps the cookie as ISN.)
    pub fn on_segment_with_iss(
        &mut self,
        seg: &Segment,
        now: Instant,
        isn: &IsnGenerator,
        sink_space: usize,
        iss: Option<u32>,
    ) -> ListenOutcome {
        let h = &seg.header;
        if h.rst() {
            return ListenOutcome::Ignore;
        }
        if h.ack_flag() {
            if !h.syn() && self.cookies {
                if let Some(c) = self.check_cookie(seg, now, isn) {
                    self.stats.cookies_accepted += 1;
                    return ListenOutcome::FromCookie(c);
                }
                self.stats.cookies_rejected += 1;
            }
            return self.reset(seg);
        }
        if !h.syn() {
            return ListenOutcome::Ignore;
        }
        // Multicast or unspecified sources never open connections (RFC 9293 MUST-62 in
        // spirit: a SYN to or from a broadcast or multicast address is dropped).
        if seg.src.is_multicast() || seg.src.is_unspecified() || seg.dst.is_multicast() {
            return ListenOutcome::Ignore;
        }
        self.stats.syns += 1;
        let tuple = FourTuple::of_incoming(seg);
        if self.half_open < self.backlog {
            self.half_open += 1;
            self.stats.half_open_created += 1;
            let iss = iss.unwrap_or_else(|| isn.isn(&tuple, now));
            let mut c = Connection::accept_syn(seg, iss, now, &self.cfg, sink_space);
            c.set_ts_clock(isn.ts_clock(&tuple));
            return ListenOutcome::HalfOpen(c);
        }
        if !self.cookies {
            self.stats.backlog_drops += 1;
            return ListenOutcome::Ignore;
        }
        self.stats.cookies_sent += 1;
        ListenOutcome::Reply(self.cookie_syn_ack(seg, now, isn))
    }

    fn reset(&mut self, seg: &Segment) -> ListenOutcome {
        match wire::reset_for(seg) {
            Some((src, dst, segment)) => {
                self.stats.resets_sent += 1;
                ListenOutcome::Reply(Outgoing {
                    src,
                    dst,
                    segment,
                    gso: 0,
                })
            }
            None => ListenOutcome::Ignore,
        }
    }

    fn tick(&self, now: Instant) -> u32 {
        (now.saturating_duration_since(self.base).as_secs() / COOKIE_TICK.as_secs()) as u32
    }

    fn cookie_hash(isn: &IsnGenerator, t: &FourTuple, peer_isn: u32, tick: u32) -> u32 {
        let mut b = [0u8; 44];
        b[..36].copy_from_slice(&tuple_bytes(t));
        b[36..40].copy_from_slice(&peer_isn.to_be_bytes());
        b[40..44].copy_from_slice(&tick.to_be_bytes());
        (siphash24(isn.cookie_secret(), &b) >> 8) as u32 & 0x00ff_ffff
    }

    /// The TSval a connection of `t` made now from a cookie would send.
    fn ts_now(&self, isn: &IsnGenerator, t: &FourTuple, now: Instant) -> u32 {
        let (offset, base) = isn.ts_clock(t);
        offset.wrapping_add(now.saturating_duration_since(base).as_millis() as u32)
    }

    fn cookie_syn_ack(&self, syn: &Segment, now: Instant, isn: &IsnGenerator) -> Outgoing {
        let h = &syn.header;
        let t = FourTuple::of_incoming(syn);
        let peer_mss = h
            .options
            .mss
            .unwrap_or(super::connection::default_mss(&t.remote));
        let idx = COOKIE_MSS.iter().rposition(|&m| m <= peer_mss).unwrap_or(0) as u32;
        let tick = self.tick(now) & 0x1f;
        let iss = tick << 27 | idx << 24 | Self::cookie_hash(isn, &t, h.seq, tick);
        let mut o = Options {
            mss: Some(self.cfg.mss_toward(&t.remote)),
            ..Options::default()
        };
        if let (Some((peer_val, _)), true) = (h.options.timestamps, self.cfg.timestamps) {
            // Low 5 bits: window shift (15 = none) and SACK-permitted.
            let ws = match (h.options.window_scale, self.cfg.window_scale) {
                (Some(_), Some(ours)) => {
                    o.window_scale = Some(ours.min(wire::MAX_WINDOW_SHIFT));
                    h.options.window_scale.expect("matched") as u32
                }
                _ => 15,
            };
            let sack = (h.options.sack_permitted && self.cfg.sack) as u32;
            o.sack_permitted = sack == 1;
            let real = self.ts_now(isn, &t, now);
            let mut val = (real & !0x1f) | sack << 4 | ws;
            if seq_gt(val, real) {
                val = val.wrapping_sub(32);
            }
            o.timestamps = Some((val, peer_val));
        }
        let out = Header {
            src_port: h.dst_port,
            dst_port: h.src_port,
            seq: iss,
            ack: h.seq.wrapping_add(1),
            flags: flags::SYN | flags::ACK,
            window: self.cfg.staging.min(u16::MAX as usize) as u16,
            urgent: 0,
            options: o,
        };
        Outgoing {
            src: syn.dst,
            dst: syn.src,
            segment: wire::build(&syn.dst, &syn.src, &out, &[]),
            gso: 0,
        }
    }

    fn check_cookie(&self, seg: &Segment, now: Instant, isn: &IsnGenerator) -> Option<Connection> {
        let h = &seg.header;
        let cookie = h.ack.wrapping_sub(1);
        let tick = cookie >> 27;
        let age = (self.tick(now) & 0x1f).wrapping_sub(tick) & 0x1f;
        if age > 1 {
            return None;
        }
        let t = FourTuple::of_incoming(seg);
        let peer_isn = h.seq.wrapping_sub(1);
        if cookie & 0x00ff_ffff != Self::cookie_hash(isn, &t, peer_isn, tick) {
            return None;
        }
        let mss = COOKIE_MSS[((cookie >> 24) & 7) as usize];
        let (shift, sack) = match h.options.timestamps {
            Some((_, ecr)) if self.cfg.timestamps => {
                let ws = ecr & 0xf;
                ((ws <= 14).then_some(ws as u8), ecr & 0x10 != 0)
            }
            _ => (None, false),
        };
        let mut c =
            Connection::from_cookie(seg, cookie, now, self.base, &self.cfg, mss, shift, sack);
        c.set_ts_clock(isn.ts_clock(&t));
        Some(c)
    }
}

fn seq_gt(a: u32, b: u32) -> bool {
    super::ranges::seq_lt(b, a)
}
