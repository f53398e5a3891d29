//! The world of the `frames` target: the device's real network stack (`net::Stack`, with
//! its addresses, a static and a learned neighbour) and its TCP (`ConnectionTable` with a
//! listener and an established connection), driven the way the engine drives them, and fed
//! a sequence of operations decoded from the fuzz input: raw frames, well-formed frames
//! built around fuzzed fields (TCP segments near the live sequence numbers, fragmented or
//! corrupted at will; ICMPv6 echo, NDP, packet too big; UDP), time passing, and the
//! application's calls. [`Op`] is both the decoder and, through [`Op::encode`], the seed
//! encoder, so the two cannot drift apart (`op.rs`); `craft.rs` builds an operation's frames
//! from its fuzzed fields.

use std::net::Ipv6Addr;
use std::time::{Duration, Instant};

use qpip_device::net::stack::Upper;
use qpip_device::net::tcp::listener::Listener;
use qpip_device::net::tcp::wire as tcpw;
use qpip_device::net::tcp::{
    Config, ConnId, ConnectionTable, Event, FourTuple, Input as TcpInput, IsnGenerator, RecvSink,
    SendSource,
};
use qpip_device::net::wire::{self, proto, Mac};
use qpip_device::net::{NetConfig, Stack, StaticNeighbor};

mod craft;
mod op;

pub use craft::frame_from;
pub use op::{AppCall, IcmpOp, Num, Op, TcpOp};

pub const OUR_MAC: Mac = [0x02, 0x51, 0x50, 0, 0, 1];
pub const PEER_MAC: Mac = [0x02, 0x51, 0x50, 0, 0, 2];
pub const PEER2_MAC: Mac = [0x02, 0x51, 0x50, 0, 0, 3];
pub const OUR: Ipv6Addr = Ipv6Addr::new(0xfd51, 0x5050, 0, 0, 0, 0, 1, 1);
/// A neighbour with a static entry.
pub const PEER: Ipv6Addr = Ipv6Addr::new(0xfd51, 0x5050, 0, 0, 0, 0, 0, 1);
/// A neighbour the device must resolve with NDP.
pub const PEER2: Ipv6Addr = Ipv6Addr::new(0xfd51, 0x5050, 0, 0, 0, 0, 0, 2);
/// The device's IPv4 address (198.18.0.2/24, mapped) and an IPv4 neighbour it resolves with
/// ARP (raw frames speak IPv4 and ARP to it).
pub const OUR4: Ipv6Addr = Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0xc612, 0x0002);
pub const PEER4: Ipv6Addr = Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0xc612, 0x0001);
pub const MTU: usize = 1500;
/// The listening port, and the established connection's ports.
pub const LISTEN_PORT: u16 = 80;
pub const EST_LOCAL_PORT: u16 = 1000;
pub const EST_PEER_PORT: u16 = 5000;
/// The established connection's peer ISN.
pub const EST_IRS: u32 = 0x7000_0000;
/// Peer ports that talk to the listener: `PEER_PORT_BASE + 0..4`.
pub const PEER_PORT_BASE: u16 = 40000;
/// Application limits: bytes queued per connection, connections opened.
const MAX_QUEUED: u64 = 4 << 20;
const MAX_CONNECTS: usize = 32;
const SINK_ROOM: usize = 64 * 1024;

// ---- the application side ---------------------------------------------------------------------

/// A connection's receive buffers: in-order delivery within the room it offered.
#[derive(Default)]
struct Sink {
    delivered: u64,
    room: usize,
}

impl RecvSink for Sink {
    fn space(&self) -> usize {
        self.room
    }
    fn deliver(&mut self, offset: u64, data: &[u8]) {
        assert_eq!(offset, self.delivered, "in-order delivery");
        assert!(data.len() <= self.room, "delivery within the space offered");
        self.delivered += data.len() as u64;
        self.room -= data.len();
    }
}

/// The bytes queued: a function of the offset, never read beyond what was queued.
struct Source {
    queued: u64,
}

impl SendSource for Source {
    fn read(&mut self, offset: u64, buf: &mut [u8]) {
        assert!(
            offset + buf.len() as u64 <= self.queued,
            "read beyond the queued bytes"
        );
        for (k, b) in buf.iter_mut().enumerate() {
            *b = (offset + k as u64).wrapping_mul(31) as u8;
        }
    }
}

struct App {
    sink: Sink,
    acked: u64,
    ended: bool,
}

// ---- the world ----------------------------------------------------------------------------------

pub struct World {
    pub stack: Stack,
    pub table: ConnectionTable<usize>,
    apps: Vec<App>,
    cfg: Config,
    now: Instant,
    connects: usize,
    listening: bool,
    /// Frames the device sent, for seeds and checks.
    pub sent: Vec<Vec<u8>>,
}

fn tcp_cfg() -> Config {
    Config {
        mss: Config::mss_for_mtu(MTU),
        // Short timers, so that the fuzzer's waits reach them.
        msl: Duration::from_secs(2),
        keepalive: Some(qpip_device::net::tcp::Keepalive {
            idle: Duration::from_secs(30),
            interval: Duration::from_secs(5),
            probes: 3,
        }),
        staging: 16 * 1024,
        ooo_limit: 64 * 1024,
        ..Config::default()
    }
}

impl World {
    /// The stack with its addresses, a listener on `LISTEN_PORT`, and a connection from
    /// `EST_LOCAL_PORT` to PEER's `EST_PEER_PORT`, established through frames.
    pub fn new() -> World {
        let now = Instant::now();
        let mut nc = NetConfig::new(OUR_MAC);
        nc.addrs.push((OUR, 64));
        nc.addrs.push((OUR4, 120));
        nc.mtu = MTU;
        nc.seed = Some(1);
        nc.neighbors.push(StaticNeighbor {
            addr: PEER,
            mac: PEER_MAC,
        });
        let mut stack = Stack::new(&nc, now);
        stack.set_tcp(true);
        let cfg = tcp_cfg();
        let mut table = ConnectionTable::new(IsnGenerator::new([5; 16], now));
        table
            .listen(Listener::new(
                Ipv6Addr::UNSPECIFIED,
                LISTEN_PORT,
                cfg,
                4,
                true,
                now,
            ))
            .expect("listen");
        let mut w = World {
            stack,
            table,
            apps: Vec::new(),
            cfg,
            now,
            connects: 0,
            listening: true,
            sent: Vec::new(),
        };
        // Duplicate address detection runs its course first.
        w.wait(Duration::from_secs(2));
        let tuple = FourTuple {
            local: OUR,
            local_port: EST_LOCAL_PORT,
            remote: PEER,
            remote_port: EST_PEER_PORT,
        };
        let tag = w.new_app();
        let id = w.table.connect(tuple, w.now, &cfg, tag).expect("connect");
        w.service(id);
        // The peer's SYN-ACK, with every option, built as a fuzzed segment is.
        let iss = w.table.get(id).expect("there").conn.iss();
        let syn_ack = TcpOp {
            seq: Num::Any(EST_IRS),
            ack: Num::Any(iss.wrapping_add(1)),
            mss: Some(1440),
            wscale: Some(7),
            sack_permitted: true,
            timestamps: Some((1, 0)),
            ..TcpOp::to_established(tcpw::flags::SYN | tcpw::flags::ACK, 0)
        };
        for frame in w.tcp_frames(&syn_ack) {
            w.receive(&frame);
        }
        assert!(
            w.table
                .get(id)
                .is_some_and(|e| e.conn.state() == qpip_device::net::tcp::State::Established),
            "the connection is established"
        );
        w.check();
        w
    }

    fn new_app(&mut self) -> usize {
        self.apps.push(App {
            sink: Sink {
                delivered: 0,
                room: SINK_ROOM,
            },
            acked: 0,
            ended: false,
        });
        self.apps.len() - 1
    }

    /// Connections in a fixed order (the table's is a hash map's).
    fn sorted_ids(&self) -> Vec<ConnId> {
        let mut v: Vec<(FourTuple, ConnId)> = self
            .table
            .ids()
            .into_iter()
            .map(|id| (self.table.get(id).expect("listed").conn.tuple(), id))
            .collect();
        v.sort_by_key(|(t, _)| (t.local_port, t.remote_port, t.remote, t.local));
        v.into_iter().map(|(_, id)| id).collect()
    }

    /// Runs one operation, then checks every invariant.
    pub fn step(&mut self, op: &Op) {
        match op {
            Op::Raw(b) => self.receive(b),
            Op::Tcp(t) => {
                for f in self.tcp_frames(t) {
                    self.receive(&f);
                }
            }
            Op::Icmp(m) => {
                if let Some(f) = self.icmp_frame(m) {
                    self.receive(&f);
                }
            }
            Op::Udp {
                dport,
                len,
                unreachable,
            } => {
                let payload = vec![0x55; *len as usize];
                let d = wire::udp(&PEER, &OUR, 7777, *dport, &payload);
                let f = frame_from(PEER_MAC, PEER, OUR, proto::UDP, &d);
                if let Some(Upper::Udp(u)) = self.stack.receive_upper(&f, self.now) {
                    assert_eq!(u.payload(), &payload[..]);
                    if *unreachable {
                        self.stack.port_unreachable(&u, self.now);
                    }
                }
                self.flush();
            }
            Op::Wait { ms, long } => {
                let d = Duration::from_millis(*ms as u64 * if *long { 60 } else { 1 });
                self.wait(d);
            }
            Op::App { which, call } => self.app_call(*which, *call),
            Op::Connect { port } => {
                if self.connects < MAX_CONNECTS {
                    self.connects += 1;
                    let tuple = FourTuple {
                        local: OUR,
                        local_port: 2000 + self.connects as u16,
                        remote: PEER,
                        remote_port: *port,
                    };
                    let tag = self.new_app();
                    let cfg = self.cfg;
                    if let Ok(id) = self.table.connect(tuple, self.now, &cfg, tag) {
                        self.service(id);
                    }
                }
            }
            Op::Relisten { cookies } => {
                if self.listening {
                    self.table.unlisten(Ipv6Addr::UNSPECIFIED, LISTEN_PORT);
                } else {
                    let cfg = self.cfg;
                    self.table
                        .listen(Listener::new(
                            Ipv6Addr::UNSPECIFIED,
                            LISTEN_PORT,
                            cfg,
                            4,
                            *cookies,
                            self.now,
                        ))
                        .expect("the port is free");
                }
                self.listening = !self.listening;
            }
        }
        self.flush();
        self.check();
    }

    fn app_call(&mut self, which: u8, call: AppCall) {
        let ids = self.sorted_ids();
        if ids.is_empty() {
            return;
        }
        let id = ids[which as usize % ids.len()];
        let Some(e) = self.table.get_mut(id) else {
            return;
        };
        let Some(tag) = e.tag else {
            return;
        };
        let app = &mut self.apps[tag];
        match call {
            AppCall::Send(n) => {
                if e.conn.queued() + (n as u64) <= MAX_QUEUED {
                    let _ = e.conn.queue_send(n as u64);
                }
            }
            AppCall::Read(n) => {
                // The application consumed what it had and posts `n` more bytes.
                let room = (app.sink.room + n as usize).min(SINK_ROOM);
                app.sink.room = room;
                e.conn.recv_space_changed(self.now, &mut app.sink);
            }
            AppCall::Close => e.conn.close(),
            AppCall::Abort => e.conn.abort(),
        }
        self.service(id);
    }

    /// A frame from the wire: up the stack, TCP segments to the table, then whatever the
    /// device sends.
    pub fn receive(&mut self, frame: &[u8]) {
        let now = self.now;
        let seg_bytes = match self.stack.receive_upper(frame, now) {
            Some(Upper::Tcp(t)) => Some((t.src, t.dst, t.segment().to_vec())),
            Some(Upper::Udp(_)) | None => None,
        };
        if let Some((src, dst, bytes)) = seg_bytes {
            self.segment_in(src, dst, &bytes);
        }
        for (dst, mtu) in self.stack.take_path_mtu_changes() {
            let floor = if wire::is_ipv4(&dst) {
                qpip_device::net::stack::MIN_IPV4_PATH_MTU
            } else {
                1280
            };
            assert!((floor..=MTU).contains(&mtu), "path MTU {mtu} to {dst}");
            self.table.path_mtu_changed(dst, mtu, now);
        }
        self.run_timers();
        self.flush();
    }

    fn segment_in(&mut self, src: Ipv6Addr, dst: Ipv6Addr, bytes: &[u8]) {
        let Ok(seg) = tcpw::parse(src, dst, bytes) else {
            return;
        };
        match self.table.input(&seg, self.now, 0) {
            TcpInput::Connection(id) => {
                if self.table.get(id).expect("demultiplexed").tag.is_none() {
                    let tag = self.new_app();
                    self.table.get_mut(id).expect("there").tag = Some(tag);
                }
                let e = self.table.get_mut(id).expect("demultiplexed");
                let tag = e.tag.expect("tagged");
                e.conn.on_segment(&seg, self.now, &mut self.apps[tag].sink);
                self.service(id);
            }
            TcpInput::HalfOpen(id) => {
                let tag = self.new_app();
                self.table.get_mut(id).expect("there").tag = Some(tag);
                self.service(id);
            }
            TcpInput::Reply(o) => {
                assert!(tcpw::parse(o.src, o.dst, &o.segment).is_ok());
                let _ = self
                    .stack
                    .send_ip(o.src, o.dst, proto::TCP, 64, &o.segment, self.now);
            }
            TcpInput::Dropped => {}
        }
    }

    /// After anything happened to a connection, as the engine does it.
    fn service(&mut self, id: ConnId) {
        loop {
            let Some(e) = self.table.get_mut(id) else {
                return;
            };
            let tag = e.tag.expect("every connection has an application here");
            let app = &mut self.apps[tag];
            let mut any = false;
            while let Some(ev) = e.conn.pop_event() {
                any = true;
                match ev {
                    Event::Acked { upto } => {
                        assert!(upto > app.acked, "Acked moves forward");
                        assert!(upto <= e.conn.queued(), "Acked within what was queued");
                        app.acked = upto;
                    }
                    Event::DataArrived { upto, .. } => {
                        assert!(upto <= app.sink.delivered, "DataArrived within the sink")
                    }
                    Event::Reset | Event::TimedOut | Event::Unreachable | Event::Closed => {
                        app.ended = true
                    }
                    Event::Established | Event::PeerClosed => {}
                }
            }
            let mut src = Source {
                queued: e.conn.queued(),
            };
            let mut out = Vec::new();
            while let Some(o) = e.conn.poll_transmit(self.now, &mut src) {
                out.push(o);
                assert!(out.len() < 10_000, "a connection sends without end");
            }
            let closed = e.conn.is_closed();
            for o in out {
                assert!(o.src == OUR || o.src == OUR4, "sent from {}", o.src);
                assert!(
                    tcpw::parse(o.src, o.dst, &o.segment).is_ok(),
                    "a segment the device built parses"
                );
                let _ = self
                    .stack
                    .send_ip(o.src, o.dst, proto::TCP, 64, &o.segment, self.now);
            }
            if any {
                continue;
            }
            if closed {
                self.table.remove(id);
            } else {
                self.table.update(id);
            }
            return;
        }
    }

    fn run_timers(&mut self) {
        let now = self.now;
        while let Some(id) = self.table.pop_expired(now) {
            if let Some(e) = self.table.get_mut(id) {
                e.conn.poll(now);
            }
            self.service(id);
        }
    }

    fn wait(&mut self, d: Duration) {
        // In steps, so timers run at about their time.
        let end = self.now + d;
        loop {
            let next = [self.table.next_deadline(), self.stack.next_deadline()]
                .into_iter()
                .flatten()
                .min()
                .map_or(end, |t| t.clamp(self.now, end));
            self.now = next;
            self.stack.poll(self.now);
            self.run_timers();
            self.flush();
            if self.now >= end {
                return;
            }
        }
    }

    /// Takes the frames the device sent and checks each.
    fn flush(&mut self) {
        while let Some(f) = self.stack.pop_tx() {
            check_sent(&f);
            if self.sent.len() < 64 {
                self.sent.push(f);
            }
        }
    }

    /// Invariants of the whole: each connection's, and the application's view.
    fn check(&self) {
        for id in self.table.ids() {
            let e = self.table.get(id).expect("listed");
            e.conn.check_invariants();
            let app = &self.apps[e.tag.expect("tagged")];
            assert!(
                e.conn.delivered() == app.sink.delivered,
                "the sink holds what was delivered"
            );
        }
        let l = self.table.listener(Ipv6Addr::UNSPECIFIED, LISTEN_PORT);
        if let Some(l) = l {
            assert!(
                l.half_open() <= 4,
                "the backlog bounds half-open connections"
            );
        }
        let s = self.table.stats();
        assert!(s.retrans_segs <= s.segs_out && s.rsts_out <= s.segs_out);
    }
}

impl Default for World {
    fn default() -> Self {
        World::new()
    }
}

/// A frame the device sent: from its MAC, within the MTU; IPv6 from one of its addresses
/// (or unspecified, for duplicate address detection), IPv4 from its IPv4 address, ARP as
/// itself; TCP with a right checksum.
fn check_sent(f: &[u8]) {
    assert!(f.len() <= wire::ETH_LEN + MTU, "a frame beyond the MTU");
    let eth = wire::parse_ethernet(f).expect("an Ethernet frame");
    assert_eq!(eth.src, OUR_MAC);
    if eth.ethertype == wire::ETHERTYPE_ARP {
        let arp = wire::parse_arp(eth.payload).expect("an ARP message");
        assert_eq!(
            (arp.sender_mac, arp.sender_ip),
            (OUR_MAC, OUR4),
            "ARP as itself"
        );
        return;
    }
    let (src, dst, protocol, upper) = if eth.ethertype == wire::ETHERTYPE_IPV4 {
        let ip = wire::parse_ipv4(eth.payload).expect("an IPv4 packet");
        assert_eq!(ip.src, OUR4, "sent from {}", ip.src);
        if ip.is_fragment() {
            return;
        }
        (ip.src, ip.dst, ip.protocol, ip.payload())
    } else {
        let ip = wire::parse_ipv6(eth.payload).expect("an IPv6 packet");
        let ll = wire::link_local(&OUR_MAC);
        assert!(
            ip.src == OUR || ip.src == ll || ip.src.is_unspecified(),
            "sent from {}",
            ip.src
        );
        (ip.src, ip.dst, ip.next_header, &ip.packet[wire::IPV6_LEN..])
    };
    if protocol == proto::TCP {
        assert!(
            wire::checksum_ok(&src, &dst, proto::TCP, upper),
            "TCP checksum"
        );
    }
}
