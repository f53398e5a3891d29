//! Shared by the TCP tests (included with `#[path]`): smoltcp's view of every segment the
//! connection builds, and two endpoints over an in-memory wire with a bottleneck and
//! seeded loss, reordering, duplication and corruption.

#![allow(dead_code)]

use std::collections::BinaryHeap;
use std::net::Ipv6Addr;
use std::time::{Duration, Instant};

use qpip_device::net::tcp::{self, wire, Connection, Event, RecvSink, SendSource};
use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{IpAddress, TcpControl, TcpPacket, TcpRepr};

// ---- the oracle ---------------------------------------------------------------------------

/// Parses a segment we built with smoltcp, verifies its checksum, and checks that it says
/// what our own parser says. Panics on any disagreement.
pub fn oracle(src: Ipv6Addr, dst: Ipv6Addr, seg: &[u8]) {
    let p = TcpPacket::new_checked(seg).expect("oracle: TCP packet");
    // With the default capabilities smoltcp verifies the checksum over the IPv6
    // pseudo-header as it parses.
    let r = TcpRepr::parse(
        &p,
        &IpAddress::Ipv6(src),
        &IpAddress::Ipv6(dst),
        &ChecksumCapabilities::default(),
    )
    .expect("oracle: TCP header, options and checksum");
    let ours = wire::parse(src, dst, seg).expect("our parser");
    let h = ours.header;
    assert_eq!(r.src_port, h.src_port);
    assert_eq!(r.dst_port, h.dst_port);
    assert_eq!(r.seq_number.0 as u32, h.seq);
    assert_eq!(
        r.ack_number.map(|a| a.0 as u32),
        h.ack_flag().then_some(h.ack)
    );
    assert_eq!(r.window_len, h.window);
    assert_eq!(r.max_seg_size, h.options.mss);
    assert_eq!(r.window_scale, h.options.window_scale);
    assert_eq!(r.sack_permitted, h.options.sack_permitted);
    assert_eq!(
        r.timestamp.map(|t| (t.tsval, t.tsecr)),
        h.options.timestamps
    );
    let sr: Vec<(u32, u32)> = r.sack_ranges.iter().flatten().copied().collect();
    let n = h.options.sack.len().min(3);
    assert_eq!(sr, h.options.sack.as_slice()[..n].to_vec());
    assert_eq!(r.payload, ours.payload);
    let ctl = match r.control {
        TcpControl::Syn => wire::flags::SYN,
        TcpControl::Fin => wire::flags::FIN,
        TcpControl::Rst => wire::flags::RST,
        TcpControl::Psh | TcpControl::None => 0,
    };
    assert_eq!(
        ctl,
        h.flags & (wire::flags::SYN | wire::flags::FIN | wire::flags::RST)
    );
}

// ---- applications -------------------------------------------------------------------------

/// `len` bytes of the test pattern from `seed` (`qpip_abi::pattern`).
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    qpip_abi::pattern::Pattern::new(seed).take(len).collect()
}

/// The receiving application: posts buffers (its space) and reads what arrives. With
/// `placing`, it also accepts out-of-order bytes inside its posted space (as the
/// engine does when receive WRs cover them).
pub struct App {
    pub data: Vec<u8>,
    /// Bytes placed ahead of `data.len()` (offset -> bytes) when placing.
    ahead: Vec<Option<u8>>,
    /// Posted space beyond `data.len()`.
    pub room: usize,
    pub placing: bool,
    pub placed_bytes: u64,
}

impl App {
    pub fn new(room: usize, placing: bool) -> App {
        App {
            data: Vec::new(),
            ahead: Vec::new(),
            room,
            placing,
            placed_bytes: 0,
        }
    }
}

impl RecvSink for App {
    fn space(&self) -> usize {
        self.room
    }
    fn deliver(&mut self, offset: u64, bytes: &[u8]) {
        assert_eq!(offset as usize, self.data.len(), "in-order delivery");
        assert!(bytes.len() <= self.room, "delivery beyond the posted space");
        // Bytes placed ahead must agree with what is now delivered over them.
        for (i, b) in bytes.iter().enumerate() {
            if let Some(Some(p)) = self.ahead.get(i) {
                assert_eq!(p, b, "placed byte differs");
            }
        }
        self.ahead.drain(..bytes.len().min(self.ahead.len()));
        self.data.extend_from_slice(bytes);
        self.room -= bytes.len();
    }
    fn place_at(&mut self, offset: u64, bytes: &[u8]) -> bool {
        if !self.placing {
            return false;
        }
        let rel = offset as usize - self.data.len();
        assert!(rel > 0, "placement only ahead of the in-order point");
        assert!(rel + bytes.len() <= self.room, "placement inside the space");
        if self.ahead.len() < rel + bytes.len() {
            self.ahead.resize(rel + bytes.len(), None);
        }
        for (i, b) in bytes.iter().enumerate() {
            self.ahead[rel + i] = Some(*b);
        }
        self.placed_bytes += bytes.len() as u64;
        true
    }
    fn placed_in_order(&mut self, upto: u64) {
        let n = upto as usize - self.data.len();
        for i in 0..n {
            let b = self.ahead[i].expect("placed bytes are there");
            self.data.push(b);
        }
        self.ahead.drain(..n);
        self.room -= n;
    }
}

pub struct Source<'a>(pub &'a [u8]);

impl SendSource for Source<'_> {
    fn read(&mut self, offset: u64, buf: &mut [u8]) {
        let o = offset as usize;
        assert!(o + buf.len() <= self.0.len(), "read beyond the queued data");
        buf.copy_from_slice(&self.0[o..o + buf.len()]);
    }
}

// ---- the wire -----------------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
pub struct Impair {
    pub loss: f64,
    pub dup: f64,
    pub reorder: f64,
    pub corrupt: f64,
    /// One-way propagation delay.
    pub delay: Duration,
    /// Extra delay of a reordered frame: up to this.
    pub jitter: Duration,
    /// Bottleneck rate in bytes per second (0: none) and its queue in bytes.
    pub rate: u64,
    pub queue: usize,
}

impl Impair {
    pub fn clean() -> Impair {
        Impair {
            loss: 0.0,
            dup: 0.0,
            reorder: 0.0,
            corrupt: 0.0,
            delay: Duration::from_millis(1),
            jitter: Duration::from_millis(3),
            rate: 0,
            queue: 0,
        }
    }
}

#[derive(PartialEq, Eq)]
struct InFlight {
    at: Instant,
    seq: u64,
    to: usize,
    src: Ipv6Addr,
    dst: Ipv6Addr,
    bytes: Vec<u8>,
}

impl Ord for InFlight {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        // Earliest first in a max-heap.
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

impl PartialOrd for InFlight {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

#[derive(Debug, Default, Clone)]
pub struct WireStats {
    pub sent: u64,
    pub lost: u64,
    pub duplicated: u64,
    pub reordered: u64,
    pub corrupted: u64,
    pub queue_drops: u64,
    pub checksum_drops: u64,
    /// Super-segments (`Outgoing::gso`) handed to the wire.
    pub super_segments: u64,
}

pub struct Wire {
    q: BinaryHeap<InFlight>,
    n: u64,
    rng: fastrand::Rng,
    imp: Impair,
    /// When each direction's bottleneck is next free.
    busy_until: [Option<Instant>; 2],
    pub stats: WireStats,
    /// Whether super-segments are cut into their segments (a link without offloads)
    /// rather than carried whole (as GRO would hand them over).
    pub cut_gso: bool,
}

impl Wire {
    pub fn new(imp: Impair, seed: u64) -> Wire {
        Wire {
            q: BinaryHeap::new(),
            n: 0,
            rng: fastrand::Rng::with_seed(seed),
            imp,
            busy_until: [None, None],
            stats: WireStats::default(),
            cut_gso: false,
        }
    }

    /// A segment from endpoint `1 - to` to endpoint `to`.
    pub fn send(&mut self, to: usize, o: tcp::Outgoing, now: Instant) {
        oracle(o.src, o.dst, &o.segment);
        if o.gso > 0 {
            self.stats.super_segments += 1;
            if self.cut_gso {
                let mut pieces = Vec::new();
                qpip_device::net::gso::split_tcp(&o.src, &o.dst, &o.segment, o.gso as usize, |p| {
                    pieces.push(p)
                })
                .expect("a well-formed super-segment");
                for segment in pieces {
                    assert!(segment.len() <= o.gso as usize + 60, "a piece of one MSS");
                    let piece = tcp::Outgoing {
                        segment,
                        gso: 0,
                        ..o
                    };
                    self.send(to, piece, now);
                }
                return;
            }
        }
        self.stats.sent += 1;
        let mut at = now;
        if self.imp.rate > 0 {
            // Serialization at the bottleneck behind what is queued; tail drop beyond the
            // queue.
            let start = self.busy_until[to].map_or(now, |b| b.max(now));
            let backlog = start.saturating_duration_since(now).as_secs_f64() * self.imp.rate as f64;
            if backlog > self.imp.queue as f64 {
                self.stats.queue_drops += 1;
                return;
            }
            let tx = Duration::from_secs_f64((o.segment.len() + 60) as f64 / self.imp.rate as f64);
            self.busy_until[to] = Some(start + tx);
            at = start + tx;
        }
        if self.rng.f64() < self.imp.loss {
            self.stats.lost += 1;
            return;
        }
        let copies = if self.rng.f64() < self.imp.dup {
            self.stats.duplicated += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            let mut bytes = o.segment.clone();
            if self.rng.f64() < self.imp.corrupt {
                self.stats.corrupted += 1;
                let i = self.rng.usize(..bytes.len());
                bytes[i] ^= 1 << self.rng.u32(..8);
            }
            let mut when = at + self.imp.delay;
            if self.rng.f64() < self.imp.reorder {
                self.stats.reordered += 1;
                when += self.imp.jitter.mul_f64(self.rng.f64());
            }
            self.n += 1;
            self.q.push(InFlight {
                at: when,
                seq: self.n,
                to,
                src: o.src,
                dst: o.dst,
                bytes,
            });
        }
    }

    pub fn next_at(&self) -> Option<Instant> {
        self.q.peek().map(|f| f.at)
    }

    /// The next frame due at `now`: (to, src, dst, bytes).
    pub fn pop_due(&mut self, now: Instant) -> Option<(usize, Ipv6Addr, Ipv6Addr, Vec<u8>)> {
        if self.q.peek().is_some_and(|f| f.at <= now) {
            let f = self.q.pop().expect("peeked");
            return Some((f.to, f.src, f.dst, f.bytes));
        }
        None
    }

    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }
}

// ---- two endpoints ------------------------------------------------------------------------

pub const A: Ipv6Addr = Ipv6Addr::new(0xfd51, 0x5050, 0, 0, 0, 0, 1, 0xa);
pub const B: Ipv6Addr = Ipv6Addr::new(0xfd51, 0x5050, 0, 0, 0, 0, 1, 0xb);

pub fn tuple(local: Ipv6Addr, lport: u16, remote: Ipv6Addr, rport: u16) -> tcp::FourTuple {
    tcp::FourTuple {
        local,
        local_port: lport,
        remote,
        remote_port: rport,
    }
}

/// One side of a transfer: a connection, the bytes it sends, its receiving application,
/// and what its events said.
pub struct Peer {
    pub conn: Connection,
    pub out: Vec<u8>,
    /// Queued to the connection so far.
    pub queued: usize,
    /// Most bytes queued but not yet acknowledged (like send WRs in flight).
    pub send_budget: usize,
    pub app: App,
    /// Receive space the application keeps posted beyond what it has read.
    pub recv_buffer: usize,
    /// Posts buffers only when this much is consumed (a slow reader), else at once.
    pub post_chunk: usize,
    /// A stalling reader: posts buffers only every this long.
    pub stall: Option<Duration>,
    next_post: Option<Instant>,
    pub acked: u64,
    pub established: bool,
    pub peer_closed: bool,
    pub closed: bool,
    pub reset: bool,
    pub timed_out: bool,
    pub close_when_done: bool,
    pub events: Vec<Event>,
}

impl Peer {
    pub fn new(conn: Connection, out: Vec<u8>, recv_buffer: usize, placing: bool) -> Peer {
        Peer {
            conn,
            out,
            queued: 0,
            send_budget: 1 << 20,
            app: App::new(recv_buffer, placing),
            recv_buffer,
            post_chunk: 1,
            stall: None,
            next_post: None,
            acked: 0,
            established: false,
            peer_closed: false,
            closed: false,
            reset: false,
            timed_out: false,
            close_when_done: true,
            events: Vec::new(),
        }
    }

    /// Queues more data as the budget allows; closes when everything is acknowledged.
    fn feed(&mut self) {
        if !self.established || self.closed {
            return;
        }
        let inflight = self.queued - self.acked as usize;
        let n = (self.out.len() - self.queued).min(self.send_budget.saturating_sub(inflight));
        if n > 0 && self.conn.queue_send(n as u64).is_ok() {
            self.queued += n;
        }
        if self.close_when_done && self.queued == self.out.len() {
            self.conn.close();
        }
    }

    pub fn handle_events(&mut self, now: Instant) {
        // Several deliveries may queue several DataArrived before they are read (a segment
        // injected between two passes): each is at most the sink's length, they grow, and
        // the last one read is the sink's length.
        let mut last_arrived = None;
        while let Some(e) = self.conn.pop_event() {
            self.events.push(e);
            if let Event::DataArrived { upto, .. } = e {
                assert!(
                    last_arrived.is_none_or(|l| upto > l),
                    "DataArrived grows: {upto} after {last_arrived:?}"
                );
                last_arrived = Some(upto);
            }
            match e {
                Event::Established => self.established = true,
                Event::Acked { upto } => {
                    assert!(
                        upto > self.acked,
                        "Acked moves forward: {upto} after {}",
                        self.acked
                    );
                    assert!(upto as usize <= self.queued, "Acked only what was queued");
                    self.acked = upto;
                }
                Event::DataArrived { upto, .. } => {
                    assert!(
                        upto as usize <= self.app.data.len(),
                        "DataArrived beyond the sink's length"
                    );
                }
                Event::PeerClosed => self.peer_closed = true,
                Event::Closed => self.closed = true,
                Event::Reset => {
                    self.reset = true;
                    self.closed = true
                }
                // These tests' links send no ICMP errors.
                Event::TimedOut | Event::Unreachable => {
                    self.timed_out = true;
                    self.closed = true
                }
            }
        }
        if let Some(upto) = last_arrived {
            assert_eq!(
                upto as usize,
                self.app.data.len(),
                "the last DataArrived is the sink's length"
            );
        }
        // The application reads and posts buffers again.
        let consumed_room = self.app.data.len() + self.app.room;
        let target = self.app.data.len() + self.recv_buffer;
        let mut may_post = true;
        if let Some(s) = self.stall {
            match self.next_post {
                Some(t) if now < t => may_post = false,
                _ => self.next_post = Some(now + s),
            }
        }
        if may_post && target >= consumed_room + self.post_chunk {
            self.app.room += target - consumed_room;
            self.conn.recv_space_changed(now, &mut self.app);
            self.drain_events_only();
        }
        self.feed();
    }

    /// When a stalling reader will post buffers next, if it has any to post.
    fn wants_to_post(&self) -> Option<Instant> {
        let short = self.app.data.len() + self.recv_buffer
            >= self.app.data.len() + self.app.room + self.post_chunk;
        if short && !self.closed {
            self.next_post
        } else {
            None
        }
    }

    fn drain_events_only(&mut self) {
        while let Some(e) = self.conn.pop_event() {
            self.events.push(e);
            match e {
                Event::DataArrived { upto, .. } => {
                    assert_eq!(upto as usize, self.app.data.len());
                }
                Event::PeerClosed => self.peer_closed = true,
                other => panic!("unexpected event on posting buffers: {other:?}"),
            }
        }
    }
}

/// Called after each segment delivered to `peers[to]`: may inject more.
pub type Hook<'a> = &'a mut dyn FnMut(&mut [Peer; 2], usize, &wire::Segment, Instant);

/// Runs two peers over `wire` until both are closed (or `limit` of simulated time).
/// Peer 0 talks to peer 1.
pub fn run(peers: &mut [Peer; 2], wire: &mut Wire, start: Instant, limit: Duration) -> Instant {
    run_hooked(peers, wire, start, limit, &mut |_, _, _, _| {})
}

pub fn run_hooked(
    peers: &mut [Peer; 2],
    wire: &mut Wire,
    start: Instant,
    limit: Duration,
    hook: Hook,
) -> Instant {
    let mut now = start;
    loop {
        for (i, p) in peers.iter_mut().enumerate() {
            p.handle_events(now);
            let mut src = Source(&p.out[..p.queued]);
            let mut n = 0;
            while let Some(o) = p.conn.poll_transmit(now, &mut src) {
                wire.send(1 - i, o, now);
                n += 1;
                assert!(n < 100_000, "a connection that never stops sending");
            }
        }
        if peers.iter().all(|p| p.closed) && wire.is_empty() {
            return now;
        }
        let next = [
            wire.next_at(),
            peers[0].conn.next_deadline(),
            peers[1].conn.next_deadline(),
            peers[0].wants_to_post(),
            peers[1].wants_to_post(),
        ]
        .into_iter()
        .flatten()
        .min();
        let Some(next) = next else {
            panic!(
                "stuck at {:?}: {:?} / {:?}",
                now - start,
                peers[0].conn,
                peers[1].conn
            );
        };
        assert!(
            next - start < limit,
            "no end after {:?}: {:?} (acked {}) / {:?} (acked {})",
            limit,
            peers[0].conn,
            peers[0].acked,
            peers[1].conn,
            peers[1].acked
        );
        now = now.max(next);
        if std::env::var("TCP_TRACE").is_ok() {
            eprintln!(
                "{:?}: {:?} {:?} | {:?} {:?}",
                now - start,
                peers[0].conn,
                peers[0].conn.next_deadline().map(|d| d - start),
                peers[1].conn,
                peers[1].conn.next_deadline().map(|d| d - start)
            );
        }
        while let Some((to, src, dst, bytes)) = wire.pop_due(now) {
            match wire::parse(src, dst, &bytes) {
                Ok(seg) => {
                    let p = &mut peers[to];
                    p.conn.on_segment(&seg, now, &mut p.app);
                    p.conn.check_invariants();
                    p.handle_events(now);
                    hook(peers, to, &seg, now);
                }
                Err(_) => wire.stats.checksum_drops += 1,
            }
        }
        for p in peers.iter_mut() {
            if p.conn.next_deadline().is_some_and(|d| d <= now) {
                p.conn.poll(now);
            }
        }
    }
}

/// A test configuration: short TIME_WAIT, and the rest as the device runs.
pub fn test_config() -> tcp::Config {
    tcp::Config {
        msl: Duration::from_millis(500),
        ..tcp::Config::default()
    }
}

/// Opens a connection A:1000 -> B:80 through a listener, returning both ends
/// established.
pub fn open_pair(
    cfg_a: &tcp::Config,
    cfg_b: &tcp::Config,
    now: Instant,
    wire: &mut Wire,
) -> (Connection, Connection, Instant) {
    let isn = tcp::IsnGenerator::new([3; 16], now);
    let mut client = Connection::connect(
        tuple(A, 1000, B, 80),
        isn.isn(&tuple(A, 1000, B, 80), now),
        now,
        cfg_a,
    );
    let mut listener = tcp::Listener::new(B, 80, *cfg_b, 16, true, now);
    let mut server: Option<Connection> = None;
    let mut t = now;
    let mut sink_a = App::new(0, false);
    let mut sink_b = App::new(0, false);
    for _ in 0..10_000 {
        while let Some(o) = client.poll_transmit(t, &mut tcp::NoData) {
            wire.send(1, o, t);
        }
        if let Some(s) = server.as_mut() {
            while let Some(o) = s.poll_transmit(t, &mut tcp::NoData) {
                wire.send(0, o, t);
            }
        }
        if client.state() == tcp::State::Established
            && server
                .as_ref()
                .is_some_and(|s| s.state() == tcp::State::Established)
        {
            return (client, server.expect("checked"), t);
        }
        let next = [
            wire.next_at(),
            client.next_deadline(),
            server.as_ref().and_then(|s| s.next_deadline()),
        ]
        .into_iter()
        .flatten()
        .min()
        .expect("something to wait for");
        t = t.max(next);
        while let Some((to, src, dst, bytes)) = wire.pop_due(t) {
            let Ok(seg) = wire::parse(src, dst, &bytes) else {
                wire.stats.checksum_drops += 1;
                continue;
            };
            if to == 0 {
                client.on_segment(&seg, t, &mut sink_a);
            } else if let Some(s) = server.as_mut() {
                s.on_segment(&seg, t, &mut sink_b);
            } else {
                match listener.on_segment(&seg, t, &isn, 0) {
                    tcp::ListenOutcome::HalfOpen(c) => server = Some(c),
                    tcp::ListenOutcome::Reply(o) => wire.send(0, o, t),
                    tcp::ListenOutcome::FromCookie(mut c) => {
                        c.on_segment(&seg, t, &mut sink_b);
                        server = Some(c);
                    }
                    tcp::ListenOutcome::Ignore => {}
                }
            }
        }
        client.poll(t);
        if let Some(s) = server.as_mut() {
            s.poll(t);
        }
    }
    panic!("handshake did not complete");
}
