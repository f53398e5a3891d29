//! One TCP connection's state machine (RFC 9293 §3.10), with the extensions the device
//! runs: window scaling and timestamps with PAWS (RFC 7323), SACK (RFC 2018) and
//! SACK-based loss recovery (RFC 6675), NewReno when the peer has no SACK (RFC 6582),
//! RTO (RFC 6298), CUBIC or Reno, delayed ACKs, persist and zero-window probes, challenge
//! ACKs (RFC 5961), keepalive.
//!
//! The connection knows nothing of QPs. It is driven with received segments
//! ([`Connection::on_segment`]), the clock ([`Connection::poll`] at
//! [`Connection::next_deadline`]) and application calls ([`Connection::queue_send`],
//! [`Connection::close`], [`Connection::abort`], [`Connection::recv_space_changed`]);
//! it hands back segments to send ([`Connection::poll_transmit`], built with bytes read
//! from a [`SendSource`](super::SendSource)) and [`Event`]s ([`Connection::pop_event`]).
//!
//! Sequence numbers are kept as 64-bit offsets from the initial sequence numbers (the
//! SYN is offset 0, stream byte k is offset k + 1, the FIN follows the data), so nothing
//! but the wire ever compares modulo 2^32.
//!
//! The state lives in [`Connection`] (this file: construction, inspection); its work is
//! divided by concern:
//!
//! - `calls`: the application's calls (send, close, abort, orphan) and path MTU changes.
//! - `types`: what the connection exchanges with its user ([`Event`], [`Outgoing`],
//!   [`State`], [`FourTuple`], [`ConnStats`]).
//! - `input`: segment arrival (RFC 9293 §3.10.7): the handshake, acceptability, RST and
//!   SYN checks, PAWS, the ACK field.
//! - `receive`: received data and FIN, delivery to the sink, the receive window offered.
//! - `recovery`: the SACK scoreboard and loss recovery (`LossRecovery`, a unit with its
//!   own state, told of ACKs and timeouts, tested on its own).
//! - `timers`: retransmission, persist, delayed ACK, keepalive, TIME-WAIT, FIN-WAIT-2.
//! - `output`: the segments to send: SYN, data and retransmissions, ACKs, resets.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::config::Config;
use super::congestion::{Congestion, RttEstimator};
use super::ranges::seq_lt;
use super::recv::Receiver;
use super::wire::{self, Segment};

mod calls;
mod input;
mod output;
mod receive;
mod recovery;
mod timers;
mod types;

use recovery::{Flight, LossRecovery};
pub use types::{CallError, ConnStats, Event, FourTuple, Outgoing, State, GSO_MAX_PAYLOAD};

/// MSS assumed when the peer sends none: IPv6's minimum MTU less 60 (RFC 9293 §3.7.1).
pub const DEFAULT_IPV6_MSS: u16 = 1220;
/// The same for IPv4: 576 less 40 (RFC 9293 §3.7.1, RFC 1122 §4.2.2.6).
pub const DEFAULT_IPV4_MSS: u16 = 536;

/// The MSS assumed for a peer at `remote` that announces none.
pub fn default_mss(remote: &std::net::Ipv6Addr) -> u16 {
    if crate::net::wire::is_ipv4(remote) {
        DEFAULT_IPV4_MSS
    } else {
        DEFAULT_IPV6_MSS
    }
}

/// The largest segment (payload with a bare TCP header) that fits a path MTU toward
/// `remote`: less the IP header (40 bytes for IPv6, 20 for IPv4) and 20 of TCP.
pub fn path_mss(mtu: usize, remote: &std::net::Ipv6Addr) -> u16 {
    let headers = crate::net::wire::ip_header_len(remote) + 20;
    mtu.saturating_sub(headers).min(u16::MAX as usize) as u16
}
/// How soon a delivery the application took, or a window it opened, is acknowledged when
/// no segment carries the ACK first ([`Connection::ack_delivery`]): long enough for an
/// answer to carry it (a guest under emulation answers in a few hundred microseconds),
/// short against the delayed-ACK timer a waiting sender would otherwise sit out.
pub const QUICK_ACK: Duration = Duration::from_millis(1);

/// A connection's timestamp offset until [`Connection::set_ts_clock`] gives it its
/// 4-tuple's clock ([`super::IsnGenerator::ts_clock`], as the connection table and
/// listeners do): derived from the ISS, for connections made on their own (tests).
pub fn ts_offset_for(iss: u32) -> u32 {
    iss.wrapping_mul(0x9e37_79b9).rotate_left(7)
}

pub struct Connection {
    tuple: FourTuple,
    state: State,
    cfg: Config,
    /// The timestamp clock's origin (TSval = offset + ms since then).
    ts_base: Instant,
    /// Completed by a SYN cookie: the first ACK's echo is no RTT sample.
    cookie: bool,

    // ---- send side (offsets from ISS) ----
    iss: u32,
    una: u64,
    nxt: u64,
    /// Data bytes queued by the application.
    queued: u64,
    fin_queued: bool,
    snd_wnd: u64,
    snd_wl1: u32,
    snd_wl2: u64,
    max_snd_wnd: u64,
    /// Shift applied to the peer's window fields, and to ours.
    snd_shift: u8,
    rcv_shift: u8,
    /// Window scaling agreed (both SYNs carried the option).
    ws_ok: bool,
    sack_ok: bool,
    ts_ok: bool,
    peer_mss: u16,
    mss_limit: u16,
    acked_reported: u64,

    // ---- receive side ----
    irs: u32,
    rcv: Receiver,
    /// The FIN was consumed in order.
    fin_rcvd: bool,
    peer_closed_reported: bool,
    delivered_reported: u64,
    /// Right edge of the window advertised (offset from IRS); never moves left, but when
    /// the memory pool refuses bytes inside it ([`Connection::retract`]).
    adv_edge: u64,
    /// The window offered in our SYN (before the peer's ISN is known).
    syn_window: u64,
    sink_space: usize,
    /// The memory pool refused in-order bytes: the window offers no staging until the
    /// sink's space changes ([`Connection::retract`]).
    pool_short: bool,
    /// In-order bytes received since the last ACK sent.
    unacked_rcv: u64,

    // ---- timestamps ----
    ts_recent: u32,
    ts_recent_at: Option<Instant>,
    last_ack_sent: u64,
    ts_offset: u32,

    // ---- timers ----
    rto_at: Option<Instant>,
    persist_at: Option<Instant>,
    persist_backoff: u32,
    delack_at: Option<Instant>,
    keepalive_at: Option<Instant>,
    keepalive_sent: u32,
    time_wait_at: Option<Instant>,
    /// An orphan's bound on FIN-WAIT-2 ([`Config::fin_timeout`]).
    fin_wait2_at: Option<Instant>,
    /// Output is due without a segment, timer or call having come (the path MTU
    /// dropped): the engine finds the connection among the expired timers.
    kick_at: Option<Instant>,
    rtt: RttEstimator,
    retries: u32,
    /// Karn: one timed segment (offset its ACK must reach, when sent).
    rtt_probe: Option<(u64, Instant)>,
    syn_retransmitted: bool,

    // ---- congestion and loss recovery ----
    cc: Congestion,
    /// The SACK scoreboard and the recovery episode.
    loss: LossRecovery,

    // ---- pending output ----
    ack_now: bool,
    rst_pending: bool,
    /// A reset answering an unacceptable ACK in SYN-RECEIVED: its sequence number.
    reply_rst: Option<u32>,
    probe_pending: bool,
    keepalive_pending: bool,
    challenge_window: Option<Instant>,
    challenges: u32,

    events: VecDeque<Event>,
    stats: ConnStats,
    /// Its owner closed it and went away ([`Connection::orphan`]).
    orphaned: bool,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("tuple", &self.tuple)
            .field("state", &self.state)
            .field("una", &self.una)
            .field("nxt", &self.nxt)
            .field("queued", &self.queued)
            .field("rcv_next", &self.rcv.next())
            .finish_non_exhaustive()
    }
}

impl Connection {
    fn new(tuple: FourTuple, iss: u32, now: Instant, cfg: &Config, state: State) -> Connection {
        let mut cfg = *cfg;
        cfg.mss = cfg.mss_toward(&tuple.remote);
        let mss = cfg.mss as usize;
        Connection {
            tuple,
            state,
            cfg,
            ts_base: now,
            cookie: false,
            iss,
            una: 0,
            nxt: 0,
            queued: 0,
            fin_queued: false,
            snd_wnd: 0,
            snd_wl1: 0,
            snd_wl2: 0,
            max_snd_wnd: 0,
            snd_shift: 0,
            rcv_shift: 0,
            ws_ok: false,
            sack_ok: false,
            ts_ok: false,
            peer_mss: default_mss(&tuple.remote),
            mss_limit: cfg.mss,
            acked_reported: 0,
            irs: 0,
            rcv: Receiver::new(cfg.staging, cfg.ooo_limit),
            fin_rcvd: false,
            peer_closed_reported: false,
            delivered_reported: 0,
            adv_edge: 0,
            syn_window: 0,
            sink_space: 0,
            pool_short: false,
            unacked_rcv: 0,
            ts_recent: 0,
            ts_recent_at: None,
            last_ack_sent: 0,
            // RFC 7323 §7.1: a per-connection offset, derived here from the ISN (itself
            // a keyed hash of the 4-tuple).
            ts_offset: ts_offset_for(iss),
            rto_at: None,
            persist_at: None,
            persist_backoff: 0,
            delack_at: None,
            keepalive_at: None,
            keepalive_sent: 0,
            time_wait_at: None,
            fin_wait2_at: None,
            kick_at: None,
            rtt: RttEstimator::new(cfg.initial_rto, cfg.min_rto, cfg.max_rto),
            retries: 0,
            rtt_probe: None,
            syn_retransmitted: false,
            cc: Congestion::new(cfg.congestion, mss, cfg.initial_window),
            loss: LossRecovery::new(),
            ack_now: false,
            rst_pending: false,
            reply_rst: None,
            probe_pending: false,
            keepalive_pending: false,
            challenge_window: None,
            challenges: 0,
            events: VecDeque::new(),
            stats: ConnStats::default(),
            orphaned: false,
        }
    }

    /// Sets the clock of the timestamps this connection sends (RFC 7323 §7.1): TSval =
    /// `offset` + milliseconds since `base` ([`super::IsnGenerator::ts_clock`]). Before
    /// it sends anything.
    pub fn set_ts_clock(&mut self, (offset, base): (u32, Instant)) {
        self.ts_offset = offset;
        self.ts_base = base;
    }

    /// An active open: the SYN goes out with the next [`Connection::poll_transmit`].
    /// Charges the data this connection holds for its application (staged, out of
    /// order) to `pool` from now on (set before it holds any).
    pub fn set_memory_pool(&mut self, pool: Option<std::sync::Arc<super::MemoryPool>>) {
        self.rcv.set_pool(pool);
    }

    pub fn connect(tuple: FourTuple, iss: u32, now: Instant, cfg: &Config) -> Connection {
        Connection::new(tuple, iss, now, cfg, State::SynSent)
    }

    /// A passive open answering `syn` (a listener's work): SYN-RECEIVED, the SYN-ACK
    /// waits in [`Connection::poll_transmit`]. `sink_space` is the receive space already
    /// posted (usually 0: the window offered is then the staging allowance).
    pub fn accept_syn(
        syn: &Segment,
        iss: u32,
        now: Instant,
        cfg: &Config,
        sink_space: usize,
    ) -> Connection {
        let mut c = Connection::new(
            FourTuple::of_incoming(syn),
            iss,
            now,
            cfg,
            State::SynReceived,
        );
        c.sink_space = sink_space;
        c.take_syn(syn, now);
        c.stats.segments_in += 1;
        c
    }

    /// A connection completed by a SYN cookie: ESTABLISHED at once, with the options the
    /// cookie kept. `ack` is the segment that completed the handshake; the caller still
    /// hands it to [`Connection::on_segment`] (it may carry data).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn from_cookie(
        ack: &Segment,
        iss: u32,
        now: Instant,
        ts_base: Instant,
        cfg: &Config,
        peer_mss: u16,
        peer_shift: Option<u8>,
        sack: bool,
    ) -> Connection {
        let mut c = Connection::new(
            FourTuple::of_incoming(ack),
            iss,
            now,
            cfg,
            State::SynReceived,
        );
        let h = &ack.header;
        c.ts_base = ts_base;
        c.cookie = true;
        c.irs = h.seq.wrapping_sub(1);
        c.peer_mss = peer_mss;
        if let (Some(p), Some(ours)) = (peer_shift, cfg.window_scale) {
            c.snd_shift = p;
            c.rcv_shift = ours.min(wire::MAX_WINDOW_SHIFT);
            c.ws_ok = true;
        }
        c.sack_ok = sack && cfg.sack;
        c.ts_ok = cfg.timestamps && h.options.timestamps.is_some();
        if let Some((val, _)) = h.options.timestamps {
            c.ts_recent = val;
            c.ts_recent_at = Some(now);
        }
        c.nxt = 1;
        c.last_ack_sent = 1;
        // The SYN-ACK offered the staging allowance, unscaled.
        c.adv_edge = 1 + (cfg.staging as u64).min(u16::MAX as u64);
        c.snd_wl1 = c.irs;
        c.reset_congestion();
        c
    }

    // ---- inspection -----------------------------------------------------------------

    pub fn tuple(&self) -> FourTuple {
        self.tuple
    }

    pub fn state(&self) -> State {
        self.state
    }

    pub fn stats(&self) -> &ConnStats {
        &self.stats
    }

    pub fn iss(&self) -> u32 {
        self.iss
    }

    /// The peer's initial sequence number (0 until its SYN came).
    pub fn irs(&self) -> u32 {
        self.irs
    }

    /// Data bytes acknowledged by the peer.
    pub fn acked(&self) -> u64 {
        self.una.clamp(1, 1 + self.queued) - 1
    }

    /// Data bytes queued so far.
    pub fn queued(&self) -> u64 {
        self.queued
    }

    /// Data bytes received in order (in the sink or staged).
    pub fn received(&self) -> u64 {
        self.rcv.next()
    }

    /// Data bytes held by the sink.
    pub fn delivered(&self) -> u64 {
        self.rcv.delivered()
    }

    pub fn cwnd(&self) -> u64 {
        self.cc.cwnd()
    }

    pub fn ssthresh(&self) -> u64 {
        self.cc.ssthresh()
    }

    /// The peer's window in bytes.
    pub fn send_window(&self) -> u64 {
        self.snd_wnd
    }

    pub fn rto(&self) -> Duration {
        self.rtt.rto()
    }

    pub fn srtt(&self) -> Option<Duration> {
        self.rtt.srtt()
    }

    /// The send MSS: payload bytes in a full segment.
    pub fn smss(&self) -> usize {
        let m = self.peer_mss.min(self.mss_limit) as usize;
        let opts = if self.ts_ok { 12 } else { 0 };
        m.saturating_sub(opts).max(64)
    }

    /// Whether the options were agreed: (window scaling, SACK, timestamps).
    pub fn negotiated(&self) -> (bool, bool, bool) {
        (self.ws_ok, self.sack_ok, self.ts_ok)
    }

    /// Whether the connection is over (nothing more will happen; remove it).
    pub fn is_closed(&self) -> bool {
        self.state == State::Closed && !self.rst_pending && self.reply_rst.is_none()
    }

    /// Whether the application closed its direction ([`Connection::close`]) and the peer
    /// acknowledged every byte of data (only our FIN may still be outstanding), with no
    /// received byte left that the sink has not taken: then nothing of the application's
    /// is lost if it goes away, and the connection can finish its close as an orphan.
    pub fn may_orphan(&self) -> bool {
        matches!(
            self.state,
            State::FinWait1 | State::FinWait2 | State::Closing | State::LastAck | State::TimeWait
        ) && self.fin_queued
            && self.acked() == self.queued
            && self.rcv.staged() == 0
    }

    /// Whether the connection was orphaned.
    pub fn is_orphan(&self) -> bool {
        self.orphaned
    }

    /// Checks the connection's internal invariants, panicking with the first broken one
    /// (for tests and fuzz targets: no input from the network may break them).
    pub fn check_invariants(&self) {
        assert!(self.una <= self.nxt, "SND.UNA <= SND.NXT");
        assert!(self.nxt <= self.end_all(), "nothing sent beyond the stream");
        self.loss.check_invariants(self.flight());
        assert!(self.acked() <= self.queued, "acknowledged <= queued");
        assert!(
            self.acked_reported <= self.acked(),
            "Acked events <= SND.UNA"
        );
        assert!(
            self.rcv.delivered() <= self.rcv.next(),
            "delivered <= received"
        );
        assert_eq!(
            self.rcv.staged() as u64,
            self.rcv.next() - self.rcv.delivered(),
            "staging holds exactly what the sink lacks"
        );
        if self.synchronized() || self.state == State::SynReceived {
            assert!(
                self.adv_edge >= self.rcv_nxt() || self.fin_rcvd,
                "edge >= RCV.NXT"
            );
        }
        if let Some(fin) = self.rcv.fin() {
            assert!(
                fin >= self.rcv.next(),
                "FIN at or beyond the in-order point"
            );
        }
        assert!(self.cc.cwnd() > 0, "cwnd > 0");
    }

    pub fn pop_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Whether `syn` may open a new incarnation of this connection while it is in
    /// TIME-WAIT (RFC 6191; RFC 9293 §3.10.7.4 and RFC 1122 §4.2.2.13 without
    /// timestamps). `timestamps` is whether the new incarnation would use them (the
    /// listener's configuration). If the old incarnation used timestamps and the new one
    /// would too, the SYN's TSval must be newer than the last seen (or equal with a
    /// sequence number beyond the old one); otherwise its sequence number must be beyond
    /// the last one seen. Anything else is no reopening: the SYN is handled in TIME-WAIT
    /// as usual.
    pub fn reopens(&self, syn: &Segment, timestamps: bool) -> bool {
        let h = &syn.header;
        if self.state != State::TimeWait || !h.syn() || h.ack_flag() || h.rst() {
            return false;
        }
        // The last sequence number seen from the peer: its FIN.
        let last = self.rcv_seq(self.rcv_nxt()).wrapping_sub(1);
        let seq_beyond = seq_lt(last, h.seq);
        match h.options.timestamps {
            Some((val, _)) if self.ts_ok && timestamps => {
                seq_lt(self.ts_recent, val) || (val == self.ts_recent && seq_beyond)
            }
            _ => seq_beyond,
        }
    }

    /// The highest sequence number this connection sent (its SND.NXT), for the ISS of a
    /// new incarnation of it, which must lie beyond (RFC 1122 §4.2.2.13).
    pub fn snd_nxt_seq(&self) -> u32 {
        self.snd_seq(self.nxt)
    }

    // ---- helpers ------------------------------------------------------------------

    /// What is outstanding, for loss recovery.
    #[inline]
    fn flight(&self) -> Flight {
        Flight {
            una: self.una,
            nxt: self.nxt,
            smss: self.smss() as u64,
        }
    }

    fn synchronized(&self) -> bool {
        !matches!(
            self.state,
            State::Closed | State::SynSent | State::SynReceived
        )
    }

    fn snd_seq(&self, off: u64) -> u32 {
        self.iss.wrapping_add(off as u32)
    }

    fn rcv_seq(&self, off: u64) -> u32 {
        self.irs.wrapping_add(off as u32)
    }

    /// RCV.NXT as an offset from IRS.
    fn rcv_nxt(&self) -> u64 {
        1 + self.rcv.next() + self.fin_rcvd as u64
    }

    /// Where data (and FIN) end in our sequence space.
    fn end_all(&self) -> u64 {
        1 + self.queued + self.fin_queued as u64
    }

    fn ts_now(&self, now: Instant) -> u32 {
        self.ts_offset
            .wrapping_add(now.saturating_duration_since(self.ts_base).as_millis() as u32)
    }

    fn finish(&mut self, ev: Event) {
        if self.state != State::Closed || !self.events.contains(&ev) {
            self.events.push_back(ev);
        }
        self.count_close(ev);
        self.state = State::Closed;
        self.stop_timers();
    }

    /// Counts how the connection leaves its state for CLOSED (call before it does).
    fn count_close(&mut self, ev: Event) {
        match (self.state, ev) {
            (State::SynSent | State::SynReceived, _) => self.stats.attempt_fails += 1,
            (
                State::Established
                | State::FinWait1
                | State::FinWait2
                | State::CloseWait
                | State::Closing
                | State::LastAck,
                Event::Reset,
            ) => self.stats.estab_resets += 1,
            _ => {}
        }
        if ev == Event::TimedOut && self.state != State::Closed {
            self.stats.gave_up += 1;
        }
    }

    fn reset_congestion(&mut self) {
        self.cc = Congestion::new(self.cfg.congestion, self.smss(), self.cfg.initial_window);
        if self.syn_retransmitted {
            self.cc.syn_lost();
            self.rtt.reset_after_syn_timeout();
        }
    }
}
