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
//! from a [`SendSource`]) and [`Event`]s ([`Connection::pop_event`]).
//!
//! Sequence numbers are kept as 64-bit offsets from the initial sequence numbers (the
//! SYN is offset 0, stream byte k is offset k + 1, the FIN follows the data), so nothing
//! but the wire ever compares modulo 2^32.

use std::collections::VecDeque;
use std::net::Ipv6Addr;
use std::time::{Duration, Instant};

use super::config::Config;
use super::congestion::{Congestion, RttEstimator};
use super::io::{RecvSink, SendSource};
use super::ranges::{seq_lt, unwrap_seq, RangeSet};
use super::recv::Receiver;
use super::wire::{self, flags, Header, Options, SackBlocks, Segment};

/// MSS assumed when the peer sends none: IPv6's minimum MTU less 60 (RFC 9293 §3.7.1).
pub const DEFAULT_IPV6_MSS: u16 = 1220;
/// Duplicate ACKs that signal a loss (RFC 5681).
const DUP_THRESH: u32 = 3;
/// How soon a delivery the application took, or a window it opened, is acknowledged when
/// no segment carries the ACK first ([`Connection::ack_delivery`]): long enough for an
/// answer to carry it (a guest under emulation answers in a few hundred microseconds),
/// short against the delayed-ACK timer a waiting sender would otherwise sit out.
pub const QUICK_ACK: Duration = Duration::from_millis(1);
/// PAWS: a TS.Recent idle this long is no longer trusted (RFC 7323 §5.5).
const PAWS_IDLE: Duration = Duration::from_secs(24 * 24 * 3600);

/// A connection's timestamp offset until [`Connection::set_ts_clock`] gives it its
/// 4-tuple's clock ([`super::IsnGenerator::ts_clock`], as the connection table and
/// listeners do): derived from the ISS, for connections made on their own (tests).
pub fn ts_offset_for(iss: u32) -> u32 {
    iss.wrapping_mul(0x9e37_79b9).rotate_left(7)
}

/// A connection's addresses and ports, from the device's side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FourTuple {
    pub local: Ipv6Addr,
    pub local_port: u16,
    pub remote: Ipv6Addr,
    pub remote_port: u16,
}

impl FourTuple {
    /// The connection an arriving segment belongs to.
    pub fn of_incoming(seg: &Segment) -> FourTuple {
        FourTuple {
            local: seg.dst,
            local_port: seg.header.dst_port,
            remote: seg.src,
            remote_port: seg.header.src_port,
        }
    }
}

/// RFC 9293 states (LISTEN lives in [`super::Listener`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Closed,
    SynSent,
    SynReceived,
    Established,
    FinWait1,
    FinWait2,
    CloseWait,
    Closing,
    LastAck,
    TimeWait,
}

/// What the application learns. Stream offsets count data bytes from 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The handshake completed.
    Established,
    /// The peer acknowledged every byte below `upto`: sends covering them are complete.
    Acked { upto: u64 },
    /// The sink now holds every byte below `upto` in order. `push` is the highest
    /// boundary of a segment with PSH at or below `upto` not reported before.
    DataArrived { upto: u64, push: Option<u64> },
    /// The peer sent FIN and every byte before it is in the sink.
    PeerClosed,
    /// The peer reset the connection (or refused it). The connection is closed.
    Reset,
    /// Retransmissions (or the handshake, or keepalive probes) went unanswered; the
    /// connection is closed.
    TimedOut,
    /// The connection is closed (both FINs acknowledged and TIME_WAIT over, or aborted).
    /// After `Reset` or `TimedOut` no `Closed` follows.
    Closed,
}

/// A segment to send: the TCP bytes (checksum included) and the IPv6 addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    pub segment: Vec<u8>,
    /// 0, or the payload size of the segments this super-segment stands for (its payload
    /// is longer: [`Config::gso`]); the link or [`crate::net::gso`] cuts it.
    pub gso: u16,
}

/// The most payload a super-segment carries: the IPv6 payload length (16 bits) less the
/// largest TCP header.
pub const GSO_MAX_PAYLOAD: u64 = 65535 - 60;

/// Counters of one connection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnStats {
    pub segments_in: u64,
    pub segments_out: u64,
    pub bytes_out: u64,
    pub retransmitted_segments: u64,
    pub retransmitted_bytes: u64,
    pub timeouts: u64,
    pub fast_recoveries: u64,
    pub dup_acks_in: u64,
    pub challenge_acks: u64,
    pub paws_rejected: u64,
    pub unacceptable: u64,
    pub out_of_order: u64,
    pub dropped_bytes: u64,
    /// Windows withdrawn because the memory pool refused bytes inside them
    /// ([`Connection::retract`]).
    pub window_retractions: u64,
    pub window_probes: u64,
    /// Resets sent.
    pub resets_out: u64,
    /// Segments whose data had all been received before.
    pub dup_segments: u64,
    /// 1 if the connection went from SYN-SENT or SYN-RECEIVED straight to CLOSED.
    pub attempt_fails: u64,
    /// 1 if the peer reset it while synchronized (ESTABLISHED through LAST-ACK).
    pub estab_resets: u64,
    /// 1 if it was dropped because retransmissions or keepalives went unanswered.
    pub gave_up: u64,
    /// 1 if it was orphaned ([`Connection::orphan`]) and then reset because new data
    /// arrived that nobody would read.
    pub orphan_resets: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RecoveryKind {
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
struct Recovery {
    kind: RecoveryKind,
    /// RecoveryPoint: HighData when recovery began.
    point: u64,
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
    recovery: Option<Recovery>,
    /// HighRxt: retransmissions in this recovery reached here.
    high_rxt: u64,
    /// Everything unsacked below here is lost, whatever the scoreboard says.
    lost_floor: u64,
    /// Retransmit once in recovery regardless of the window (RFC 6675 §5 step 4.3,
    /// RFC 6582 partial ACKs, the first segment after a timeout).
    force_rtx: bool,
    dupacks: u32,
    /// The SACK scoreboard: what the peer holds above `una`.
    sacked: RangeSet,

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

/// Why an application call was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallError {
    /// The connection is closing or closed for this direction.
    Closing,
}

impl Connection {
    fn new(tuple: FourTuple, iss: u32, now: Instant, cfg: &Config, state: State) -> Connection {
        let cfg = *cfg;
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
            peer_mss: DEFAULT_IPV6_MSS,
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
            recovery: None,
            high_rxt: 0,
            lost_floor: 0,
            force_rtx: false,
            dupacks: 0,
            sacked: RangeSet::new(),
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

    /// Payload bytes a data segment sent now may carry: the send MSS less the SACK blocks
    /// the segment will carry. The MSS counts a bare TCP header (RFC 6691 §2; the
    /// timestamps already come off in [`Connection::smss`]), so when the options grow the
    /// payload shrinks, as Linux's tcp_current_mss() does, instead of the packet outgrowing
    /// the path MTU and being fragmented at the source.
    fn seg_room(&self, now: Instant) -> u64 {
        let m = self.peer_mss.min(self.mss_limit) as usize;
        m.saturating_sub(self.options(now).wire_len()).max(64) as u64
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
        if let Some((s, e)) = self.sacked.first() {
            assert!(s >= self.una && s < e, "scoreboard above SND.UNA");
        }
        if let Some((_, e)) = self.sacked.last() {
            assert!(e <= self.nxt, "scoreboard within what was sent");
        }
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

    // ---- application calls ------------------------------------------------------------

    /// Appends `len` bytes to the send stream (the [`SendSource`] must serve them at
    /// their offsets until they are acknowledged).
    pub fn queue_send(&mut self, len: u64) -> Result<(), CallError> {
        if self.fin_queued || matches!(self.state, State::Closed | State::TimeWait) {
            return Err(CallError::Closing);
        }
        self.queued += len;
        Ok(())
    }

    /// Sends FIN after the queued data (RFC 9293 CLOSE).
    pub fn close(&mut self) {
        match self.state {
            State::SynSent => self.finish(Event::Closed),
            State::SynReceived => {
                // FIN-WAIT-1 once established (RFC 9293 CLOSE in SYN-RECEIVED: queued
                // sends go first).
                self.fin_queued = true;
            }
            State::Established => {
                self.fin_queued = true;
                self.state = State::FinWait1;
            }
            State::CloseWait => {
                self.fin_queued = true;
                self.state = State::LastAck;
            }
            _ => {}
        }
    }

    /// Aborts: a reset is sent if the peer knows of the connection (RFC 9293 ABORT).
    pub fn abort(&mut self) {
        match self.state {
            State::SynSent | State::Closed => self.finish(Event::Closed),
            State::TimeWait => self.finish(Event::Closed),
            _ => {
                self.rst_pending = true;
                self.count_close(Event::Closed);
                self.state = State::Closed;
                self.stop_timers();
                self.events.push_back(Event::Closed);
            }
        }
    }

    /// Its owner went away after closing it gracefully ([`Connection::may_orphan`]; the
    /// caller checks): the connection finishes its close by itself, as Linux finishes an
    /// orphaned socket. Its FIN is retransmitted until acknowledged; FIN-WAIT-2 lasts at
    /// most [`Config::fin_timeout`] (then it closes without a word); TIME-WAIT as usual;
    /// new data from the peer, which nobody would read, is answered with a reset and ends
    /// it (RFC 9293 §3.10.7.4 and RFC 1122 §4.2.2.13, as Linux does). From now on it never
    /// reads its [`SendSource`] (every byte of data was acknowledged) and never delivers
    /// to its [`RecvSink`].
    pub fn orphan(&mut self, now: Instant) {
        self.orphaned = true;
        if self.state == State::FinWait2 {
            self.fin_wait2_at = Some(now + self.cfg.fin_timeout);
        }
    }

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
    fn ack_soon(&mut self, now: Instant) {
        let at = now + QUICK_ACK;
        if !matches!(self.delack_at, Some(t) if t <= at) {
            self.delack_at = Some(at);
        }
    }

    /// The path MTU toward the peer changed: segments are cut to fit.
    pub fn set_path_mss(&mut self, mss: u16) {
        self.mss_limit = mss.clamp(DEFAULT_IPV6_MSS.min(self.cfg.mss), self.cfg.mss);
        self.cc.set_mss(self.smss());
    }

    /// The path MTU toward the peer is now `mtu`: lowered by a packet too big (RFC 8201,
    /// RFC 9293 §3.7.3), or back up when that expired (RFC 8201 §4; segments then grow,
    /// nothing else happens). Segments are cut to fit from now on; if that made them smaller, what is
    /// in flight and not SACKed was too big to arrive (the PTB said so for one segment;
    /// the others were no smaller), so it is retransmitted at once, re-segmented to the
    /// new size, as far as cwnd allows; cwnd is not reduced (no congestion). The output
    /// is due at `now` ([`Connection::next_deadline`]).
    pub fn path_mtu_changed(&mut self, mtu: usize, now: Instant) {
        // 40 bytes of IPv6 header, 20 of TCP header; options come off in smss().
        let mss = mtu.saturating_sub(60).min(u16::MAX as usize) as u16;
        let before = self.smss();
        self.set_path_mss(mss);
        if self.smss() >= before || !self.synchronized() || self.una >= self.nxt {
            return;
        }
        match &mut self.recovery {
            Some(r) => r.point = r.point.max(self.nxt),
            None => {
                self.recovery = Some(Recovery {
                    kind: RecoveryKind::PathMtu,
                    point: self.nxt,
                })
            }
        }
        self.high_rxt = self.una;
        self.lost_floor = self.nxt;
        self.force_rtx = true;
        // Karn: no RTT sample from what is sent again.
        self.rtt_probe = None;
        self.dupacks = 0;
        self.kick_at = Some(now);
    }

    // ---- helpers ------------------------------------------------------------------

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

    /// Receive space we can offer: the in-order bytes beyond RCV.NXT that the receiver
    /// takes now — the sink's space and what is left of the staging allowance (the sink
    /// takes nothing while bytes wait in staging ahead of it).
    /// While the memory pool is short ([`Connection::retract`]) staging is not offered.
    fn avail_window(&self) -> u64 {
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
    fn keep_promise(&mut self) {
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
    fn take_window(&mut self) -> u16 {
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

    fn options(&self, now: Instant) -> Options {
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

    fn stop_timers(&mut self) {
        self.rto_at = None;
        self.persist_at = None;
        self.delack_at = None;
        self.keepalive_at = None;
        self.time_wait_at = None;
        self.fin_wait2_at = None;
        self.kick_at = None;
        self.probe_pending = false;
        self.keepalive_pending = false;
    }

    fn enter_time_wait(&mut self, now: Instant) {
        self.state = State::TimeWait;
        self.stop_timers();
        self.time_wait_at = Some(now + self.cfg.msl * 2);
    }

    fn reset_congestion(&mut self) {
        self.cc = Congestion::new(self.cfg.congestion, self.smss(), self.cfg.initial_window);
        if self.syn_retransmitted {
            self.cc.syn_lost();
            self.rtt.reset_after_syn_timeout();
        }
    }

    fn challenge_ack(&mut self, now: Instant) {
        // RFC 5961 §7: a per-connection budget per second.
        match self.challenge_window {
            Some(t) if now.saturating_duration_since(t) < Duration::from_secs(1) => {}
            _ => {
                self.challenge_window = Some(now);
                self.challenges = 0;
            }
        }
        if self.challenges < self.cfg.challenge_ack_limit {
            self.challenges += 1;
            self.stats.challenge_acks += 1;
            self.ack_now = true;
        }
    }

    fn arm_keepalive(&mut self, now: Instant) {
        if let Some(k) = self.cfg.keepalive {
            if self.synchronized() && self.state != State::TimeWait {
                self.keepalive_at = Some(now + k.idle);
                self.keepalive_sent = 0;
            }
        }
    }

    /// Takes the options and sequence number of the peer's SYN.
    fn take_syn(&mut self, syn: &Segment, now: Instant) {
        let h = &syn.header;
        self.irs = h.seq;
        self.peer_mss = h.options.mss.unwrap_or(DEFAULT_IPV6_MSS).max(64);
        if let (Some(ours), Some(theirs)) = (self.cfg.window_scale, h.options.window_scale) {
            self.rcv_shift = ours.min(wire::MAX_WINDOW_SHIFT);
            self.snd_shift = theirs;
            self.ws_ok = true;
        } else {
            self.rcv_shift = 0;
            self.snd_shift = 0;
            self.ws_ok = false;
        }
        self.sack_ok = self.cfg.sack && h.options.sack_permitted;
        self.ts_ok = self.cfg.timestamps && h.options.timestamps.is_some();
        if let Some((val, _)) = h.options.timestamps {
            self.ts_recent = val;
            self.ts_recent_at = Some(now);
        }
        // The window in a SYN is never scaled (RFC 7323 §2.2).
        self.snd_wnd = h.window as u64;
        self.max_snd_wnd = self.snd_wnd;
        self.snd_wl1 = h.seq;
        self.snd_wl2 = 0;
        self.last_ack_sent = 1;
        self.arm_keepalive(now);
    }

    // ---- segment arrival ------------------------------------------------------------

    /// Processes a segment of this connection (its checksum already verified by
    /// [`wire::parse`]). `sink` receives in-order data.
    pub fn on_segment(&mut self, seg: &Segment, now: Instant, sink: &mut dyn RecvSink) {
        let _stage = crate::stages::span(crate::stages::Stage::Protocol);
        self.stats.segments_in += 1;
        self.sink_space = sink.space();
        self.keep_promise();
        match self.state {
            State::Closed => {}
            State::SynSent => self.on_syn_sent(seg, now),
            _ => self.on_synchronized(seg, now, sink),
        }
        // Deliveries used some of the sink's space.
        self.sink_space = sink.space();
        self.keep_promise();
        if self.synchronized() {
            self.arm_keepalive(now);
        }
    }

    /// RFC 9293 §3.10.7.3.
    fn on_syn_sent(&mut self, seg: &Segment, now: Instant) {
        let h = &seg.header;
        let mut ack_ok = false;
        if h.ack_flag() {
            let a = h.ack.wrapping_sub(self.iss) as u64;
            if a == 0 || a > self.nxt {
                if !h.rst() {
                    self.reply_rst = Some(h.ack);
                }
                return;
            }
            ack_ok = true;
        }
        if h.rst() {
            if ack_ok {
                self.finish(Event::Reset);
            }
            return;
        }
        if !h.syn() {
            return;
        }
        self.take_syn(seg, now);
        self.adv_edge = 1 + self.syn_window;
        if ack_ok {
            // The peer's SYN-ACK: established.
            self.una = h.ack.wrapping_sub(self.iss) as u64;
            if let Some((_, ecr)) = h.options.timestamps.filter(|_| self.ts_ok) {
                self.rtt_sample_ts(ecr, now);
            } else if let Some((_, t0)) = self.rtt_probe.take() {
                self.rtt.sample(now.saturating_duration_since(t0));
            }
            self.rtt_probe = None;
            self.snd_wl2 = self.una;
            self.rto_at = None;
            self.retries = 0;
            self.state = State::Established;
            self.reset_congestion();
            self.events.push_back(Event::Established);
            self.ack_now = true;
            if self.una > 1 {
                // Cannot happen (only the SYN was sent); keep offsets sane.
                self.una = 1;
            }
        } else {
            // Simultaneous open: our SYN is answered by a SYN; SYN-ACK it.
            self.state = State::SynReceived;
            self.nxt = 0;
            self.rtt_probe = None;
        }
    }

    fn rtt_sample_ts(&mut self, ecr: u32, now: Instant) {
        let d = self.ts_now(now).wrapping_sub(ecr);
        if ecr != 0 && d < 1 << 31 {
            self.rtt.sample(Duration::from_millis(d as u64));
        }
    }

    /// RFC 9293 §3.10.7.4, for every state from SYN-RECEIVED on.
    fn on_synchronized(&mut self, seg: &Segment, now: Instant, sink: &mut dyn RecvSink) {
        let h = seg.header;
        // A retransmitted SYN while our SYN-ACK is outstanding: send it again.
        if self.state == State::SynReceived
            && h.syn()
            && !h.ack_flag()
            && !h.rst()
            && h.seq == self.irs
        {
            if self.una == 0 {
                self.nxt = 0;
            }
            return;
        }
        let rcv_nxt = self.rcv_nxt();
        // PAWS (RFC 7323 §5.3).
        if self.ts_ok && !h.rst() {
            if let Some((val, _)) = h.options.timestamps {
                let fresh = self
                    .ts_recent_at
                    .is_some_and(|t| now.saturating_duration_since(t) < PAWS_IDLE);
                if fresh && seq_lt(val, self.ts_recent) {
                    self.stats.paws_rejected += 1;
                    self.ack_now = true;
                    return;
                }
            }
        }
        // First: is the segment in the window?
        let seg_off = unwrap_seq(h.seq, self.rcv_seq(rcv_nxt), rcv_nxt);
        let seg_len = seg.seg_len() as i64;
        let wnd = self.adv_edge.saturating_sub(rcv_nxt) as i64;
        let (nxt, edge) = (rcv_nxt as i64, rcv_nxt as i64 + wnd);
        let in_wnd = |x: i64| nxt <= x && x < edge;
        let acceptable = match (seg_len == 0, wnd == 0) {
            (true, true) => seg_off == nxt,
            (true, false) => in_wnd(seg_off),
            (false, true) => false,
            (false, false) => in_wnd(seg_off) || in_wnd(seg_off + seg_len - 1),
        };
        if !acceptable {
            self.stats.unacceptable += 1;
            if h.rst() {
                return;
            }
            if !seg.payload.is_empty() && seg_off + seg.payload.len() as i64 <= nxt {
                self.stats.dup_segments += 1;
            }
            self.ack_now = true;
            if self.state == State::TimeWait && h.fin() {
                // The peer's FIN again: our last ACK was lost. Restart 2 MSL (RFC 9293
                // §3.10.7.4, TIME-WAIT).
                self.time_wait_at = Some(now + self.cfg.msl * 2);
            }
            // A zero window still takes valid ACKs (RFC 9293 §3.10.7.4): a window probe
            // at RCV.NXT may carry news about our data.
            if wnd == 0 && seg_off == nxt && h.ack_flag() && self.state != State::SynReceived {
                self.on_ack(seg, now);
            }
            return;
        }
        // Second: RST (RFC 5961 §3.2).
        if h.rst() {
            if seg_off != nxt {
                self.challenge_ack(now);
                return;
            }
            match self.state {
                // Both sides have closed and every byte is acknowledged: TIME-WAIT runs its
                // course (RFC 1337 §3, against TIME-WAIT assassination). Such a reset is
                // common and harmless: the peer closed the connection when our last ACK
                // arrived and answers a duplicate of it (or of an older segment) with RST.
                State::TimeWait => {}
                // RFC 9293 §3.10.7.4: in CLOSING and LAST-ACK the user has closed and the
                // peer's FIN has come; a reset ends the connection without the "connection
                // reset" signal — provided no data of ours is lost (only our FIN was
                // unacknowledged).
                State::Closing | State::LastAck if self.acked() == self.queued => {
                    self.finish(Event::Closed)
                }
                _ => self.finish(Event::Reset),
            }
            return;
        }
        // Fourth: SYN in a synchronized state (RFC 5961 §4.2).
        if h.syn() {
            self.challenge_ack(now);
            return;
        }
        // Fifth: ACK.
        if !h.ack_flag() {
            return;
        }
        if self.state == State::SynReceived {
            let a = unwrap_seq(h.ack, self.snd_seq(self.una), self.una);
            if a > self.una as i64 && a <= self.nxt as i64 {
                self.state = if self.fin_queued {
                    State::FinWait1
                } else {
                    State::Established
                };
                self.reset_congestion();
                self.events.push_back(Event::Established);
                self.retries = 0;
            } else {
                self.reply_rst = Some(h.ack);
                return;
            }
        }
        // TS.Recent (RFC 7323 §4.3): from a segment at or below Last.ACK.sent.
        if self.ts_ok {
            if let Some((val, _)) = h.options.timestamps {
                if seg_off <= self.last_ack_sent as i64 && !seq_lt(val, self.ts_recent) {
                    self.ts_recent = val;
                    self.ts_recent_at = Some(now);
                }
            }
        }
        if !self.on_ack(seg, now) {
            return;
        }
        if self.state == State::Closed {
            return;
        }
        sink.acked(self.acked());
        if self.orphaned
            && matches!(self.state, State::FinWait1 | State::FinWait2)
            && !seg.payload.is_empty()
            && seg_off + seg.payload.len() as i64 > rcv_nxt as i64
        {
            // New data for an orphan: nobody will read it. RFC 1122 §4.2.2.13 and Linux
            // (TCPAbortOnData) answer with a reset, taking its sequence number from the
            // segment's ACK field (RFC 9293 §3.10.7.1), and drop the connection.
            self.reply_rst = Some(h.ack);
            self.stats.orphan_resets += 1;
            self.finish(Event::Closed);
            return;
        }
        // Seventh and eighth: data and FIN.
        match self.state {
            State::Established | State::FinWait1 | State::FinWait2 => {
                self.on_data(seg, seg_off, now, sink);
            }
            State::TimeWait => {
                if h.fin() {
                    // The peer's FIN again: our ACK was lost. ACK, restart 2 MSL.
                    self.ack_now = true;
                    self.time_wait_at = Some(now + self.cfg.msl * 2);
                }
            }
            _ => {
                if seg_len > 0 {
                    // Beyond the peer's FIN: nothing more can come; re-ACK.
                    self.ack_now = true;
                }
            }
        }
    }

    /// The ACK field (RFC 9293 fifth step, RFC 5961 §5). False if the segment must be
    /// dropped.
    fn on_ack(&mut self, seg: &Segment, now: Instant) -> bool {
        let h = &seg.header;
        let ack = unwrap_seq(h.ack, self.snd_seq(self.una), self.una);
        if ack > self.nxt as i64 {
            // Acknowledges what was never sent.
            self.ack_now = true;
            return false;
        }
        if ack < self.una as i64 - self.max_snd_wnd as i64 {
            self.challenge_ack(now);
            return false;
        }
        let old_wnd = self.snd_wnd;
        let window = (h.window as u64) << self.snd_shift;
        let mut window_changed = false;
        if ack >= self.una as i64
            && (seq_lt(self.snd_wl1, h.seq)
                || (self.snd_wl1 == h.seq && self.snd_wl2 as i64 <= ack))
        {
            self.snd_wnd = window;
            self.snd_wl1 = h.seq;
            self.snd_wl2 = ack as u64;
            self.max_snd_wnd = self.max_snd_wnd.max(window);
            window_changed = window != old_wnd;
            if window > 0 {
                self.persist_at = None;
                self.persist_backoff = 0;
            }
        }
        let mut new_sack = false;
        if self.sack_ok && !h.options.sack.is_empty() {
            new_sack = self.take_sack(&h.options.sack, ack.max(self.una as i64) as u64);
        }
        if ack > self.una as i64 {
            let ack = ack as u64;
            self.on_new_ack(ack, h, now);
        } else if ack == self.una as i64 && self.una < self.nxt {
            if old_wnd == 0 && self.snd_wnd == 0 {
                // An answer to a window probe: the peer is alive.
                self.retries = 0;
            }
            let pure = seg.payload.is_empty() && !h.fin() && !h.syn();
            // With the window shut, repeated ACKs answer our probes: no loss signal.
            if pure && self.snd_wnd > 0 && (!window_changed || new_sack) {
                self.dupacks += 1;
                self.stats.dup_acks_in += 1;
                self.on_dupack(now);
            }
        }
        true
    }

    /// Adds SACK blocks to the scoreboard; true if anything new was learned.
    fn take_sack(&mut self, blocks: &SackBlocks, una: u64) -> bool {
        let mut new = false;
        for &(l, r) in blocks.as_slice() {
            let lo = unwrap_seq(l, self.snd_seq(self.una), self.una);
            let hi = unwrap_seq(r, self.snd_seq(self.una), self.una);
            // Blocks at or below the cumulative ACK (D-SACK) or beyond what was sent
            // are ignored.
            if hi <= lo || hi <= una as i64 || hi > self.nxt as i64 || lo < 0 {
                continue;
            }
            let (lo, hi) = ((lo as u64).max(una), hi as u64);
            if !self.sacked.contains_range(lo, hi) {
                new = true;
                self.sacked.insert(lo, hi);
            }
        }
        new
    }

    fn on_new_ack(&mut self, ack: u64, h: &Header, now: Instant) {
        // Bytes of data (and FIN) acknowledged; the SYN is no data for cwnd.
        let acked = ack - self.una.max(1).min(ack);
        // RTT: timestamps when both sides use them, else the timed segment (Karn).
        if self.cookie && self.una == 0 {
            // The SYN-ACK's timestamp came from the listener's cookie: no sample.
        } else if let Some((_, ecr)) = h.options.timestamps.filter(|_| self.ts_ok) {
            self.rtt_sample_ts(ecr, now);
        } else if let Some((end, t0)) = self.rtt_probe {
            if ack >= end {
                self.rtt.sample(now.saturating_duration_since(t0));
                self.rtt_probe = None;
            }
        }
        self.una = ack;
        if self.nxt < self.una {
            self.nxt = self.una;
        }
        self.retries = 0;
        self.sacked.remove_below(ack);
        let upto = self.acked();
        if upto > self.acked_reported {
            self.acked_reported = upto;
            self.events.push_back(Event::Acked { upto });
        }
        // Congestion control.
        let smss = self.smss() as u64;
        match self.recovery {
            Some(r) if ack >= r.point => {
                match r.kind {
                    RecoveryKind::Sack | RecoveryKind::NewReno => {
                        self.cc.end_recovery(self.nxt - self.una)
                    }
                    RecoveryKind::Timeout | RecoveryKind::PathMtu => {
                        self.cc.on_ack(acked, now, self.rtt.srtt())
                    }
                }
                self.recovery = None;
                self.force_rtx = false;
            }
            Some(r) => match r.kind {
                RecoveryKind::NewReno => {
                    // Partial ACK (RFC 6582 §3.2 step 5): retransmit the next hole,
                    // deflate by what was acknowledged, add back one MSS.
                    self.high_rxt = self.una;
                    self.lost_floor = self.una + smss;
                    self.force_rtx = true;
                    let c = self.cc.cwnd().saturating_sub(acked);
                    self.cc.set_cwnd(if acked >= smss { c + smss } else { c });
                }
                RecoveryKind::Sack => {}
                RecoveryKind::Timeout | RecoveryKind::PathMtu => {
                    self.cc.on_ack(acked, now, self.rtt.srtt())
                }
            },
            None => self.cc.on_ack(acked, now, self.rtt.srtt()),
        }
        self.dupacks = 0;
        // Retransmission timer (RFC 6298 §5.2-5.3).
        self.rto_at = (self.una < self.nxt).then(|| now + self.rtt.rto());
        if self.una >= self.nxt {
            self.probe_pending = false;
        }
        // Our FIN acknowledged?
        if self.fin_queued && self.una == self.end_all() {
            match self.state {
                State::FinWait1 => {
                    self.state = State::FinWait2;
                    if self.orphaned {
                        self.fin_wait2_at = Some(now + self.cfg.fin_timeout);
                    }
                }
                State::Closing => self.enter_time_wait(now),
                State::LastAck => self.finish(Event::Closed),
                _ => {}
            }
        }
    }

    fn on_dupack(&mut self, _now: Instant) {
        match self.recovery {
            None => {
                let lost = self.sack_ok && self.scoreboard_lost_edge() > self.una;
                if self.dupacks >= DUP_THRESH || lost {
                    self.enter_fast_recovery();
                }
            }
            Some(Recovery {
                kind: RecoveryKind::NewReno,
                ..
            }) => {
                // Each further duplicate means a segment left the network (RFC 6582).
                let c = self.cc.cwnd() + self.smss() as u64;
                self.cc.set_cwnd(c);
            }
            _ => {}
        }
    }

    fn enter_fast_recovery(&mut self) {
        let smss = self.smss() as u64;
        let flight = self.nxt - self.una;
        self.cc.on_loss(flight);
        let kind = if self.sack_ok {
            RecoveryKind::Sack
        } else {
            RecoveryKind::NewReno
        };
        self.recovery = Some(Recovery {
            kind,
            point: self.nxt,
        });
        self.high_rxt = self.una;
        self.lost_floor = (self.una + smss).min(self.nxt);
        self.force_rtx = true;
        self.rtt_probe = None;
        if kind == RecoveryKind::NewReno {
            let c = self.cc.ssthresh() + DUP_THRESH as u64 * smss;
            self.cc.set_cwnd(c);
        }
        self.stats.fast_recoveries += 1;
    }

    /// RFC 6675 IsLost boundary from the scoreboard: unsacked bytes below it are lost
    /// (DupThresh SACKed blocks or more than (DupThresh - 1) * SMSS SACKed bytes above).
    fn scoreboard_lost_edge(&self) -> u64 {
        let smss = self.smss() as u64;
        let need = (DUP_THRESH as u64 - 1) * smss + 1;
        let mut acc = 0;
        let mut edge = self.una;
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
        edge.max(self.una)
    }

    fn lost_edge(&self) -> u64 {
        let mut edge = self.scoreboard_lost_edge().max(self.lost_floor);
        if let Some(Recovery {
            kind: RecoveryKind::Timeout | RecoveryKind::PathMtu,
            point,
        }) = self.recovery
        {
            edge = edge.max(point);
        }
        edge.min(self.nxt)
    }

    fn unsacked(&self, a: u64, b: u64) -> u64 {
        if b <= a {
            return 0;
        }
        (b - a) - self.sacked.covered(a, b)
    }

    /// RFC 6675 pipe: bytes believed in the network.
    fn pipe(&self, lost_edge: u64) -> u64 {
        let from = self.una.max(self.high_rxt);
        self.unsacked(self.una, self.nxt) - self.unsacked(from, lost_edge)
    }

    /// The next lost range to retransmit: the first unsacked bytes at or past HighRxt
    /// below the lost edge, at most `room` bytes (one segment's payload).
    fn next_hole(&self, lost_edge: u64, room: u64) -> Option<(u64, u64)> {
        let from = self.una.max(self.high_rxt);
        self.sacked
            .gaps(from, lost_edge)
            .first()
            .map(|&(s, e)| (s, e.min(s + room)))
    }

    // ---- timers -------------------------------------------------------------------

    /// When [`Connection::poll`] has work next.
    pub fn next_deadline(&self) -> Option<Instant> {
        [
            self.rto_at,
            self.persist_at,
            self.delack_at,
            self.keepalive_at,
            self.time_wait_at,
            self.fin_wait2_at,
            self.kick_at,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Runs the timers due at `now`.
    pub fn poll(&mut self, now: Instant) {
        if self.kick_at.is_some_and(|t| t <= now) {
            self.kick_at = None;
        }
        if self.time_wait_at.is_some_and(|t| t <= now) {
            self.time_wait_at = None;
            self.finish(Event::Closed);
            return;
        }
        if self.fin_wait2_at.is_some_and(|t| t <= now) {
            // An orphan's peer never closed: drop the connection silently, as Linux does
            // when tcp_fin_timeout runs out (a late segment from the peer then meets no
            // connection and is answered with a reset).
            self.fin_wait2_at = None;
            self.finish(Event::Closed);
            return;
        }
        if self.delack_at.is_some_and(|t| t <= now) {
            self.delack_at = None;
            self.ack_now = true;
        }
        if self.rto_at.is_some_and(|t| t <= now) {
            self.rto_at = None;
            self.on_rto(now);
        }
        if self.persist_at.is_some_and(|t| t <= now) {
            self.persist_at = None;
            if self.snd_room() == 0 && self.una == self.nxt && self.nxt < self.end_all() {
                self.probe_pending = true;
                self.persist_backoff = (self.persist_backoff + 1).min(16);
                self.stats.window_probes += 1;
            }
        }
        if self.keepalive_at.is_some_and(|t| t <= now) {
            self.keepalive_at = None;
            if let Some(k) = self.cfg.keepalive {
                if self.una < self.nxt {
                    // Data outstanding: retransmissions watch the peer, not keepalive.
                    self.keepalive_at = Some(now + k.idle);
                    return;
                }
                if self.keepalive_sent >= k.probes {
                    self.finish(Event::TimedOut);
                    return;
                }
                self.keepalive_sent += 1;
                self.keepalive_pending = true;
                self.keepalive_at = Some(now + k.interval);
            }
        }
    }

    fn on_rto(&mut self, now: Instant) {
        match self.state {
            State::SynSent | State::SynReceived => {
                self.retries += 1;
                if self.retries > self.cfg.syn_retries {
                    self.finish(Event::TimedOut);
                    return;
                }
                self.rtt.back_off();
                self.syn_retransmitted = true;
                self.rtt_probe = None;
                self.nxt = 0;
                self.stats.timeouts += 1;
            }
            State::Closed | State::TimeWait => {}
            _ if self.una < self.nxt => {
                self.retries += 1;
                if self.retries > self.cfg.max_retries {
                    self.finish(Event::TimedOut);
                    return;
                }
                self.rtt.back_off();
                self.rtt_probe = None;
                self.stats.timeouts += 1;
                let again = matches!(
                    self.recovery,
                    Some(Recovery {
                        kind: RecoveryKind::Timeout,
                        ..
                    })
                );
                if self.snd_wnd == 0 {
                    // A window probe unanswered: not congestion.
                } else if again {
                    // The same data timed out again: ssthresh stays (RFC 5681 §3.1).
                    self.cc.set_cwnd(self.smss() as u64);
                } else {
                    self.cc.on_timeout(self.nxt - self.una);
                }
                self.recovery = Some(Recovery {
                    kind: RecoveryKind::Timeout,
                    point: self.nxt,
                });
                self.high_rxt = self.una;
                self.lost_floor = self.una;
                self.force_rtx = true;
                self.dupacks = 0;
                // The receiver may have reneged on what it SACKed (RFC 2018 §8): after a
                // timeout nothing is taken as held until it is SACKed again.
                self.sacked.clear();
            }
            _ => {}
        }
        let _ = now;
    }

    /// Window room for new data (offsets).
    fn snd_room(&self) -> u64 {
        (self.snd_wl2 + self.snd_wnd).saturating_sub(self.nxt)
    }

    // ---- output -------------------------------------------------------------------

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
        if let Some(r) = self.recovery {
            let edge = self.lost_edge();
            let pipe = self.pipe(edge);
            let cwnd = self.cc.cwnd();
            let room_ok = match r.kind {
                RecoveryKind::NewReno => false,
                _ => cwnd >= pipe + smss,
            };
            if self.force_rtx || room_ok {
                if let Some((s, e)) = self.next_hole(edge, room) {
                    self.force_rtx = false;
                    self.high_rxt = e;
                    self.arm_rto(now);
                    return Some(self.send_range(s, e, now, source, true));
                }
            }
        }
        if self.nxt >= end_all {
            return None;
        }
        // New data: within the peer's window and the congestion window.
        let flight = match self.recovery {
            Some(r) if r.kind != RecoveryKind::NewReno => self.pipe(self.lost_edge()),
            _ => self.nxt - self.una,
        };
        let mut cwnd = self.cc.cwnd();
        if self.recovery.is_none() {
            // Limited transmit (RFC 3042).
            cwnd += self.dupacks.min(2) as u64 * smss;
        }
        let cwnd_room = cwnd.saturating_sub(flight);
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
        if self.rtt_probe.is_none() && !self.ts_ok && self.recovery.is_none() {
            self.rtt_probe = Some((e, now));
        }
        self.arm_rto(now);
        Some(self.send_range(s, e, now, source, false))
    }

    fn arm_rto(&mut self, now: Instant) {
        if self.rto_at.is_none() {
            self.rto_at = Some(now + self.rtt.rto());
        }
    }

    /// Builds the segment for sequence offsets `[s, e)` (data, and FIN if `e` covers it).
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

    // ---- received data ------------------------------------------------------------

    fn on_data(&mut self, seg: &Segment, seg_off: i64, now: Instant, sink: &mut dyn RecvSink) {
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

    fn deliver_staged(&mut self, sink: &mut dyn RecvSink, now: Instant) {
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
