//! The world of the `frames` target: the device's real network stack (`net::Stack`, with
//! its addresses, a static and a learned neighbour) and its TCP (`ConnectionTable` with a
//! listener and an established connection), driven the way the engine drives them, and fed
//! a sequence of operations decoded from the fuzz input: raw frames, well-formed frames
//! built around fuzzed fields (TCP segments near the live sequence numbers, fragmented or
//! corrupted at will; ICMPv6 echo, NDP, packet too big; UDP), time passing, and the
//! application's calls. [`Op`] is both the decoder and, through [`Op::encode`], the seed
//! encoder, so the two cannot drift apart.

use std::net::Ipv6Addr;
use std::time::{Duration, Instant};

use qpip_device::net::stack::Upper;
use qpip_device::net::tcp::wire::{self as tcpw, Header, Options, SackBlocks};
use qpip_device::net::tcp::{
    Config, ConnId, ConnectionTable, Event, FourTuple, Input as TcpInput, IsnGenerator,
    RecvSink, SendSource,
};
use qpip_device::net::wire::{self, icmp, proto, Mac};
use qpip_device::net::{NetConfig, Stack, StaticNeighbor};

use crate::{Input, Seed};

pub const OUR_MAC: Mac = [0x02, 0x51, 0x50, 0, 0, 1];
pub const PEER_MAC: Mac = [0x02, 0x51, 0x50, 0, 0, 2];
pub const PEER2_MAC: Mac = [0x02, 0x51, 0x50, 0, 0, 3];
pub const OUR: Ipv6Addr = Ipv6Addr::new(0xfd51, 0x5050, 0, 0, 0, 0, 1, 1);
/// A neighbour with a static entry.
pub const PEER: Ipv6Addr = Ipv6Addr::new(0xfd51, 0x5050, 0, 0, 0, 0, 0, 1);
/// A neighbour the device must resolve with NDP.
pub const PEER2: Ipv6Addr = Ipv6Addr::new(0xfd51, 0x5050, 0, 0, 0, 0, 0, 2);
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

/// One operation of the input.
#[derive(Debug, Clone)]
pub enum Op {
    /// Any bytes as a frame.
    Raw(Vec<u8>),
    /// A TCP segment from a peer, built with a right checksum unless `corrupt` says
    /// otherwise, possibly in fragments.
    Tcp(TcpOp),
    /// An ICMPv6 message from a peer (right checksum).
    Icmp(IcmpOp),
    /// A UDP datagram to the device; answered with port unreachable if `unreachable`.
    Udp {
        dport: u16,
        len: u8,
        unreachable: bool,
    },
    /// Time passes: `ms` milliseconds, times 60 if `long`.
    Wait { ms: u16, long: bool },
    /// An application call on the `which`-th connection (in tuple order).
    App { which: u8, call: AppCall },
    /// An active open to PEER's `port`.
    Connect { port: u16 },
    /// The listener goes away, or comes back (with SYN cookies if `cookies`).
    Relisten { cookies: bool },
}

#[derive(Debug, Clone, Copy)]
pub enum AppCall {
    Send(u16),
    Read(u16),
    Close,
    Abort,
}

/// Where a fuzzed sequence or acknowledgement number points.
#[derive(Debug, Clone, Copy)]
pub enum Num {
    /// Exactly the live value (RCV.NXT of the connection as the peer sees it, or SND.UNA).
    Live,
    /// The live value plus a small signed offset.
    Near(i16),
    /// Any value.
    Any(u32),
}

#[derive(Debug, Clone)]
pub struct TcpOp {
    /// 0: the established connection; 1: the listener from peer port `peer_port`; 2: any
    /// port pair (`ports`).
    pub target: u8,
    pub peer_port: u8,
    pub ports: (u16, u16),
    /// From PEER2 (resolved by NDP) instead of PEER.
    pub from_peer2: bool,
    pub flags: u8,
    pub seq: Num,
    pub ack: Num,
    pub window: u16,
    pub mss: Option<u16>,
    pub wscale: Option<u8>,
    pub sack_permitted: bool,
    pub timestamps: Option<(u32, u32)>,
    /// SACK blocks as (offset from the ACK, length).
    pub sack: Vec<(u16, u16)>,
    pub payload_len: u16,
    pub payload_seed: u8,
    /// Flip this byte of the IPv6 payload (0: none; the byte index is `corrupt - 1`).
    pub corrupt: u16,
    /// Fragment size in 8-byte units (0: not fragmented), and reversed order.
    pub frag_units: u8,
    pub frag_reverse: bool,
}

#[derive(Debug, Clone)]
pub enum IcmpOp {
    Echo { id: u16, seq: u16, len: u8 },
    Solicit { target_ours: bool, with_sllao: bool, multicast: bool },
    Advert { solicited: bool, override_: bool, from_peer2: bool },
    /// A packet too big quoting a TCP segment of the established connection.
    TooBig { mtu: u32 },
    /// An error of `ty`/`code` quoting what the device sent.
    Error { ty: u8, code: u8 },
}

fn num(i: &mut Input) -> Num {
    match i.choose(3) {
        0 => Num::Live,
        1 => Num::Near(i.u16() as i16),
        _ => Num::Any(i.u32()),
    }
}

fn enc_num(s: &mut Seed, n: Num) {
    match n {
        Num::Live => s.u8(0),
        Num::Near(d) => s.u8(1).u16(d as u16),
        Num::Any(v) => s.u8(2).u32(v),
    };
}

impl Op {
    pub fn decode(i: &mut Input) -> Op {
        match i.choose(8) {
            0 => {
                let n = i.u16() as usize % 1600;
                Op::Raw(i.bytes(n))
            }
            1 => {
                let target = i.u8() % 3;
                let peer_port = i.u8() % 4;
                let ports = if target == 2 { (i.u16(), i.u16()) } else { (0, 0) };
                let from_peer2 = i.bool();
                let flags = i.u8();
                let seq = num(i);
                let ack = num(i);
                let window = i.u16();
                let opts = i.u8();
                let mss = (opts & 1 != 0).then(|| i.u16());
                let wscale = (opts & 2 != 0).then(|| i.u8());
                let sack_permitted = opts & 4 != 0;
                let timestamps = (opts & 8 != 0).then(|| (i.u32(), i.u32()));
                let sack = if opts & 16 != 0 {
                    (0..i.u8() % 5).map(|_| (i.u16(), i.u16())).collect()
                } else {
                    Vec::new()
                };
                let payload_len = i.u16() % 3000;
                let payload_seed = i.u8();
                let corrupt = if opts & 32 != 0 { i.u16() } else { 0 };
                let (frag_units, frag_reverse) = if opts & 64 != 0 {
                    (i.u8(), i.bool())
                } else {
                    (0, false)
                };
                Op::Tcp(TcpOp {
                    target,
                    peer_port,
                    ports,
                    from_peer2,
                    flags,
                    seq,
                    ack,
                    window,
                    mss,
                    wscale,
                    sack_permitted,
                    timestamps,
                    sack,
                    payload_len,
                    payload_seed,
                    corrupt,
                    frag_units,
                    frag_reverse,
                })
            }
            2 => Op::Icmp(match i.choose(5) {
                0 => IcmpOp::Echo {
                    id: i.u16(),
                    seq: i.u16(),
                    len: i.u8(),
                },
                1 => IcmpOp::Solicit {
                    target_ours: i.bool(),
                    with_sllao: i.bool(),
                    multicast: i.bool(),
                },
                2 => IcmpOp::Advert {
                    solicited: i.bool(),
                    override_: i.bool(),
                    from_peer2: i.bool(),
                },
                3 => IcmpOp::TooBig { mtu: i.u32() },
                _ => IcmpOp::Error {
                    ty: i.u8(),
                    code: i.u8(),
                },
            }),
            3 => Op::Udp {
                dport: i.u16(),
                len: i.u8(),
                unreachable: i.bool(),
            },
            4 => Op::Wait {
                ms: i.u16(),
                long: i.bool(),
            },
            5 => {
                let which = i.u8();
                let call = match i.choose(4) {
                    0 => AppCall::Send(i.u16()),
                    1 => AppCall::Read(i.u16()),
                    2 => AppCall::Close,
                    _ => AppCall::Abort,
                };
                Op::App { which, call }
            }
            6 => Op::Connect { port: i.u16() },
            _ => Op::Relisten { cookies: i.bool() },
        }
    }

    /// Writes what [`Op::decode`] reads back as this operation.
    pub fn encode(&self, s: &mut Seed) {
        match self {
            Op::Raw(b) => {
                s.u8(0).u16(b.len() as u16).bytes(b);
            }
            Op::Tcp(t) => {
                s.u8(1).u8(t.target).u8(t.peer_port);
                if t.target == 2 {
                    s.u16(t.ports.0).u16(t.ports.1);
                }
                s.u8(t.from_peer2 as u8).u8(t.flags);
                enc_num(s, t.seq);
                enc_num(s, t.ack);
                s.u16(t.window);
                let opts = t.mss.is_some() as u8
                    | (t.wscale.is_some() as u8) << 1
                    | (t.sack_permitted as u8) << 2
                    | (t.timestamps.is_some() as u8) << 3
                    | (!t.sack.is_empty() as u8) << 4
                    | ((t.corrupt != 0) as u8) << 5
                    | ((t.frag_units != 0) as u8) << 6;
                s.u8(opts);
                if let Some(m) = t.mss {
                    s.u16(m);
                }
                if let Some(w) = t.wscale {
                    s.u8(w);
                }
                if let Some((v, e)) = t.timestamps {
                    s.u32(v).u32(e);
                }
                if !t.sack.is_empty() {
                    s.u8(t.sack.len() as u8);
                    for &(o, l) in &t.sack {
                        s.u16(o).u16(l);
                    }
                }
                s.u16(t.payload_len).u8(t.payload_seed);
                if t.corrupt != 0 {
                    s.u16(t.corrupt);
                }
                if t.frag_units != 0 {
                    s.u8(t.frag_units).u8(t.frag_reverse as u8);
                }
            }
            Op::Icmp(m) => {
                s.u8(2);
                match *m {
                    IcmpOp::Echo { id, seq, len } => {
                        s.u8(0).u16(id).u16(seq).u8(len);
                    }
                    IcmpOp::Solicit {
                        target_ours,
                        with_sllao,
                        multicast,
                    } => {
                        s.u8(1)
                            .u8(target_ours as u8)
                            .u8(with_sllao as u8)
                            .u8(multicast as u8);
                    }
                    IcmpOp::Advert {
                        solicited,
                        override_,
                        from_peer2,
                    } => {
                        s.u8(2)
                            .u8(solicited as u8)
                            .u8(override_ as u8)
                            .u8(from_peer2 as u8);
                    }
                    IcmpOp::TooBig { mtu } => {
                        s.u8(3).u32(mtu);
                    }
                    IcmpOp::Error { ty, code } => {
                        s.u8(4).u8(ty).u8(code);
                    }
                }
            }
            Op::Udp {
                dport,
                len,
                unreachable,
            } => {
                s.u8(3).u16(*dport).u8(*len).u8(*unreachable as u8);
            }
            Op::Wait { ms, long } => {
                s.u8(4).u16(*ms).u8(*long as u8);
            }
            Op::App { which, call } => {
                s.u8(5).u8(*which);
                match *call {
                    AppCall::Send(n) => s.u8(0).u16(n),
                    AppCall::Read(n) => s.u8(1).u16(n),
                    AppCall::Close => s.u8(2),
                    AppCall::Abort => s.u8(3),
                };
            }
            Op::Connect { port } => {
                s.u8(6).u16(*port);
            }
            Op::Relisten { cookies } => {
                s.u8(7).u8(*cookies as u8);
            }
        }
    }
}

impl TcpOp {
    /// A segment to the established connection with these flags and payload, live
    /// numbers, no options.
    pub fn to_established(flags: u8, payload_len: u16) -> TcpOp {
        TcpOp {
            target: 0,
            peer_port: 0,
            ports: (0, 0),
            from_peer2: false,
            flags,
            seq: Num::Live,
            ack: Num::Live,
            window: 65535,
            mss: None,
            wscale: None,
            sack_permitted: false,
            timestamps: None,
            sack: Vec::new(),
            payload_len,
            payload_seed: 7,
            corrupt: 0,
            frag_units: 0,
            frag_reverse: false,
        }
    }
}

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
            .listen(Ipv6Addr::UNSPECIFIED, LISTEN_PORT, cfg, 4, true, now)
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
        let iss = w.table.get(id).expect("there").conn.iss();
        let h = Header {
            src_port: EST_PEER_PORT,
            dst_port: EST_LOCAL_PORT,
            seq: EST_IRS,
            ack: iss.wrapping_add(1),
            flags: tcpw::flags::SYN | tcpw::flags::ACK,
            window: 65535,
            urgent: 0,
            options: Options {
                mss: Some(1440),
                window_scale: Some(7),
                sack_permitted: true,
                timestamps: Some((1, 0)),
                sack: SackBlocks::new(),
            },
        };
        let seg = tcpw::build(&PEER, &OUR, &h, &[]);
        let frame = frame_from(PEER_MAC, PEER, OUR, proto::TCP, &seg);
        w.receive(&frame);
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
                        .listen(Ipv6Addr::UNSPECIFIED, LISTEN_PORT, cfg, 4, *cookies, self.now)
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
            assert!((1280..=MTU).contains(&mtu), "path MTU {mtu}");
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
                    Event::Reset | Event::TimedOut | Event::Closed => app.ended = true,
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
                assert_eq!(o.src, OUR);
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
            assert!(e.conn.delivered() == app.sink.delivered, "the sink holds what was delivered");
        }
        let l = self.table.listener(Ipv6Addr::UNSPECIFIED, LISTEN_PORT);
        if let Some(l) = l {
            assert!(l.half_open() <= 4, "the backlog bounds half-open connections");
        }
        let s = self.table.stats();
        assert!(s.retrans_segs <= s.segs_out && s.rsts_out <= s.segs_out);
    }

    // ---- frames from fuzzed fields ----------------------------------------------------------

    fn tcp_frames(&self, t: &TcpOp) -> Vec<Vec<u8>> {
        let (src, mac) = if t.from_peer2 {
            (PEER2, PEER2_MAC)
        } else {
            (PEER, PEER_MAC)
        };
        let (sport, dport) = match t.target {
            0 => (EST_PEER_PORT, EST_LOCAL_PORT),
            1 => (PEER_PORT_BASE + t.peer_port as u16, LISTEN_PORT),
            _ => t.ports,
        };
        let tuple = FourTuple {
            local: OUR,
            local_port: dport,
            remote: src,
            remote_port: sport,
        };
        // The live numbers: what the connection expects next and what it has had acked.
        let (seq0, ack0) = match self.table.lookup(&tuple).and_then(|id| self.table.get(id)) {
            Some(e) => (
                e.conn
                    .irs()
                    .wrapping_add(1)
                    .wrapping_add(e.conn.received() as u32),
                e.conn
                    .iss()
                    .wrapping_add(1)
                    .wrapping_add(e.conn.acked() as u32),
            ),
            None => (0x1000_0000 + sport as u32, 0),
        };
        let pick = |n: Num, live: u32| match n {
            Num::Live => live,
            Num::Near(d) => live.wrapping_add(d as i32 as u32),
            Num::Any(v) => v,
        };
        let ack = pick(t.ack, ack0);
        let mut sack = SackBlocks::new();
        for &(o, l) in t.sack.iter().take(4) {
            let l0 = ack.wrapping_add(o as u32);
            sack.push((l0, l0.wrapping_add(l as u32)));
        }
        let h = Header {
            src_port: sport,
            dst_port: dport,
            seq: pick(t.seq, seq0),
            ack,
            flags: t.flags,
            window: t.window,
            urgent: 0,
            options: Options {
                mss: t.mss,
                window_scale: t.wscale,
                sack_permitted: t.sack_permitted,
                timestamps: t.timestamps,
                sack,
            },
        };
        let payload: Vec<u8> = (0..t.payload_len)
            .map(|k| (k as u8).wrapping_mul(t.payload_seed))
            .collect();
        let mut seg = tcpw::build(&src, &OUR, &h, &payload);
        if t.corrupt != 0 {
            let at = (t.corrupt as usize - 1) % seg.len();
            seg[at] ^= 0x10;
        }
        if t.frag_units == 0 {
            return vec![frame_from(mac, src, OUR, proto::TCP, &seg)];
        }
        let size = 8 * t.frag_units as usize;
        let mut frames = Vec::new();
        let mut off = 0;
        while off < seg.len() {
            let end = (off + size).min(seg.len());
            let mut f = wire::ipv6_fragment(
                &src,
                &OUR,
                proto::TCP,
                64,
                0xabcd,
                off,
                end < seg.len(),
                &seg[off..end],
            );
            wire::write_ethernet(&mut f, &OUR_MAC, &mac);
            frames.push(f);
            off = end;
            if off / 8 > 0x1fff {
                break;
            }
        }
        if t.frag_reverse {
            frames.reverse();
        }
        frames
    }

    fn icmp_frame(&self, m: &IcmpOp) -> Option<Vec<u8>> {
        let f = match *m {
            IcmpOp::Echo { id, seq, len } => {
                let body = wire::echo_body(id, seq, &vec![0x61; len as usize]);
                let msg = wire::icmpv6(&PEER, &OUR, icmp::ECHO_REQUEST, 0, &body);
                frame_from(PEER_MAC, PEER, OUR, proto::ICMPV6, &msg)
            }
            IcmpOp::Solicit {
                target_ours,
                with_sllao,
                multicast,
            } => {
                let target = if target_ours { OUR } else { PEER2 };
                let dst = if multicast {
                    wire::solicited_node(&target)
                } else {
                    OUR
                };
                let body = wire::ns_body(&target, with_sllao.then_some(&PEER2_MAC));
                let msg = wire::icmpv6(&PEER2, &dst, icmp::NEIGHBOR_SOLICIT, 0, &body);
                let mut f = wire::ipv6_packet(&PEER2, &dst, proto::ICMPV6, 255, &msg);
                let dmac = if multicast {
                    wire::multicast_mac(&dst)
                } else {
                    OUR_MAC
                };
                wire::write_ethernet(&mut f, &dmac, &PEER2_MAC);
                f
            }
            IcmpOp::Advert {
                solicited,
                override_,
                from_peer2,
            } => {
                let (who, mac) = if from_peer2 {
                    (PEER2, PEER2_MAC)
                } else {
                    (PEER, PEER_MAC)
                };
                let body = wire::na_body(&who, solicited, override_, &mac);
                let msg = wire::icmpv6(&who, &OUR, icmp::NEIGHBOR_ADVERT, 0, &body);
                let mut f = wire::ipv6_packet(&who, &OUR, proto::ICMPV6, 255, &msg);
                wire::write_ethernet(&mut f, &OUR_MAC, &mac);
                f
            }
            IcmpOp::TooBig { mtu } => {
                let quoted = self.quoted_segment();
                let mut body = mtu.to_be_bytes().to_vec();
                body.extend_from_slice(&quoted);
                let router: Ipv6Addr = "fe80::1".parse().expect("address");
                let msg = wire::icmpv6(&router, &OUR, icmp::PACKET_TOO_BIG, 0, &body);
                let mut f = wire::ipv6_packet(&router, &OUR, proto::ICMPV6, 64, &msg);
                wire::write_ethernet(&mut f, &OUR_MAC, &PEER_MAC);
                f
            }
            IcmpOp::Error { ty, code } => {
                let mut body = vec![0, 0, 0, 0];
                body.extend_from_slice(&self.quoted_segment());
                let msg = wire::icmpv6(&PEER, &OUR, ty, code, &body);
                frame_from(PEER_MAC, PEER, OUR, proto::ICMPV6, &msg)
            }
        };
        Some(f)
    }

    /// The start of an IPv6 packet the device sent to PEER on the established connection,
    /// as a router quotes it.
    fn quoted_segment(&self) -> Vec<u8> {
        let h = Header {
            src_port: EST_LOCAL_PORT,
            dst_port: EST_PEER_PORT,
            seq: 1,
            ack: 1,
            flags: tcpw::flags::ACK,
            window: 100,
            ..Header::default()
        };
        let seg = tcpw::build(&OUR, &PEER, &h, &[0; 1400]);
        let mut p = wire::ipv6_packet(&OUR, &PEER, proto::TCP, 64, &seg)[wire::ETH_LEN..].to_vec();
        p.truncate(1232);
        p
    }
}

impl Default for World {
    fn default() -> Self {
        World::new()
    }
}

/// An IPv6 frame from `mac` to the device.
pub fn frame_from(mac: Mac, src: Ipv6Addr, dst: Ipv6Addr, next: u8, upper: &[u8]) -> Vec<u8> {
    let mut f = wire::ipv6_packet(&src, &dst, next, 64, upper);
    wire::write_ethernet(&mut f, &OUR_MAC, &mac);
    f
}

/// A frame the device sent: from its MAC, IPv6 within the MTU, from one of its addresses
/// (or unspecified, for duplicate address detection), TCP with a right checksum.
fn check_sent(f: &[u8]) {
    assert!(f.len() <= wire::ETH_LEN + MTU, "a frame beyond the MTU");
    let eth = wire::parse_ethernet(f).expect("an Ethernet frame");
    assert_eq!(eth.src, OUR_MAC);
    let ip = wire::parse_ipv6(eth.payload).expect("an IPv6 packet");
    let ll = wire::link_local(&OUR_MAC);
    assert!(
        ip.src == OUR || ip.src == ll || ip.src.is_unspecified(),
        "sent from {}",
        ip.src
    );
    if ip.next_header == proto::TCP {
        assert!(
            wire::checksum_ok(&ip.src, &ip.dst, proto::TCP, &ip.packet[wire::IPV6_LEN..]),
            "TCP checksum"
        );
    }
}
