//! Packet scripts against a whole device, in the manner of packetdrill: a device (the real
//! engine behind vfio-user, driven by the fake guest) on a cable whose other end is held by
//! the test, which plays the remote TCP frame by frame. A script is text, one segment a
//! line, with sequence numbers relative to the initial sequence numbers:
//!
//! ```text
//! > S 0:0(0) win 65535 <mss 1440,sackOK,nop,wscale 7>   # the test injects
//! < S. 0:0(0) ack 1 win 65535 <mss 1440,nop,wscale 7,sackOK>  # the device must send
//! > . 1:1(0) ack 1 win 512
//! > P. 1:1001(1000) ack 1 win 512
//! < . 1:1(0) ack 1001 win 511
//! < nothing                                             # and nothing else (see below)
//! @post 4096                                            # the guest posts a receive
//! ```
//!
//! - `>` lines are injected: seq relative to the test's ISN, ack to the device's. Payload
//!   bytes follow a pattern of the stream offset ([`peer_byte`]), so what the guest
//!   receives can be checked.
//! - `<` lines are expected: the next TCP segment the device sends (within a generous
//!   time limit) must match: flags exactly; seq (relative to the device's ISN, learned
//!   from its SYN or SYN-ACK); ack, window and options when given (`*` for any value;
//!   options are compared as a set, without NOP/EOL padding; `<>`: none).
//! - Flags: `S` SYN, `F` FIN, `R` RST, `P` PSH, `.` ACK.
//! - Options: `mss N`, `wscale N`, `sackOK`, `TS val N ecr N` (`ecr $`: the device's last
//!   TSval), `sack A:B ...` (relative to the ISN of whoever sent the data), `nop`, `eol`,
//!   `raw HEX` (bytes as they are, for unknown or malformed options).
//! - `< nothing`: the device sent nothing since the last expected segment. A barrier
//!   proves it: an old, out-of-window segment is injected (RFC 9293 §3.10.7.4 answers it
//!   with an ACK, or a connection that is gone with a RST), and its answer must be the very
//!   next segment — anything the device had sent before would come first.
//! - `@post N`, `@send N`, `@close`, `@accepted`, `@connected`: the guest posts a receive
//!   of N bytes, sends N bytes, closes, or waits for its ACCEPT / CONNECT to complete.
//!
//! `#` starts a comment. Rust code between scripts does what the text cannot.

#![allow(dead_code)]

use std::collections::VecDeque;
use std::net::Ipv6Addr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use etherparse::TcpHeader;
use qpip_device::backend::cable::Cable;
use qpip_device::backend::{Backend, MAX_FRAME};
use qpip_device::engine::network::NetworkConfig;
use qpip_device::engine::tcp::TcpLimits;
use qpip_device::engine::EngineConfig;
use qpip_device::net::config::StaticNeighbor;
use qpip_device::net::wire;
use qpip_device::vfio::ServeOptions;

use super::support::*;

pub const DEV_MAC: [u8; 6] = [0x02, 0x51, 0x50, 0, 0x16, 0x01];
pub const PEER_MAC: [u8; 6] = [0x02, 0x51, 0x50, 0, 0x16, 0x02];
pub const DEV_ADDR: &str = "fd51:5050::16:1";
pub const PEER_ADDR: &str = "fd51:5050::16:2";
/// A router on the path (packets too big come from it).
pub const ROUTER: &str = "fd51:5050::16:fe";
/// The device's port when it listens; the test's port.
pub const DEV_PORT: u16 = 8080;
pub const PEER_PORT: u16 = 40000;
/// The test's ISN.
pub const PEER_ISN: u32 = 0xa000_0000;
/// How long the device may take to send an expected segment (generous: the machine is
/// shared; a correct device answers in microseconds, or when its timer runs).
pub const WAIT: Duration = Duration::from_secs(10);
/// Maximum segment lifetime of the device in these tests: TIME-WAIT is 2 × this.
pub const MSL: Duration = Duration::from_millis(500);

const TCP: u8 = 6;
const ICMPV6: u8 = 58;
const FRAGMENT: u8 = 44;

/// The byte at offset `k` of the test's stream.
pub fn peer_byte(k: u64) -> u8 {
    (k.wrapping_mul(31).wrapping_add(7) % 251) as u8
}

/// The byte at offset `k` of the guest's stream.
pub fn dev_byte(k: u64) -> u8 {
    (k.wrapping_mul(17).wrapping_add(3) % 241) as u8
}

/// One TCP option as on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Opt {
    Mss(u16),
    Wscale(u8),
    SackOk,
    Ts(u32, u32),
    Sack(Vec<(u32, u32)>),
    Nop,
    Eol,
    Raw(Vec<u8>),
}

/// A TCP segment the device sent, parsed by etherparse (checksum verified).
#[derive(Debug, Clone)]
pub struct Seg {
    pub h: TcpHeader,
    pub opts: Vec<Opt>,
    pub payload: Vec<u8>,
    /// The IPv6 packet's length.
    pub ip_len: usize,
}

impl Seg {
    pub fn flags(&self) -> String {
        flag_string(&self.h)
    }
    pub fn ts(&self) -> Option<(u32, u32)> {
        self.opts.iter().find_map(|o| match o {
            Opt::Ts(a, b) => Some((*a, *b)),
            _ => None,
        })
    }
}

/// What the device sent, frame by frame.
#[derive(Debug, Clone)]
pub enum Frame {
    Tcp(Seg),
    /// An ICMPv6 message: type, code, the rest (from the 4th byte).
    Icmp(u8, u8, Vec<u8>),
    /// An IPv6 fragment (the device fragmented a packet).
    Fragment(usize),
    Other,
}

fn flag_string(h: &TcpHeader) -> String {
    let mut s = String::new();
    for (on, c) in [(h.syn, 'S'), (h.fin, 'F'), (h.rst, 'R'), (h.psh, 'P')] {
        if on {
            s.push(c);
        }
    }
    if h.ack {
        s.push('.');
    }
    s
}

/// Parses TCP options strictly (panics on anything the device should never send).
fn parse_opts(mut b: &[u8]) -> Vec<Opt> {
    let mut v = Vec::new();
    while let Some(&kind) = b.first() {
        match kind {
            0 => {
                v.push(Opt::Eol);
                b = &b[1..];
                continue;
            }
            1 => {
                v.push(Opt::Nop);
                b = &b[1..];
                continue;
            }
            _ => {}
        }
        assert!(b.len() >= 2, "option {kind} cut short");
        let len = b[1] as usize;
        assert!(len >= 2 && len <= b.len(), "option {kind} of length {len}");
        let d = &b[2..len];
        let be32 = |x: &[u8]| u32::from_be_bytes([x[0], x[1], x[2], x[3]]);
        v.push(match (kind, len) {
            (2, 4) => Opt::Mss(u16::from_be_bytes([d[0], d[1]])),
            (3, 3) => Opt::Wscale(d[0]),
            (4, 2) => Opt::SackOk,
            (8, 10) => Opt::Ts(be32(&d[0..4]), be32(&d[4..8])),
            (5, _) if (len - 2) & 7 == 0 => Opt::Sack(
                d.chunks(8)
                    .map(|c| (be32(&c[0..4]), be32(&c[4..8])))
                    .collect(),
            ),
            _ => panic!("the device sent option {kind} of length {len}"),
        });
        b = &b[len..];
    }
    v
}

fn opt_bytes(opts: &[Opt]) -> Vec<u8> {
    let mut b = Vec::new();
    for o in opts {
        match o {
            Opt::Mss(m) => {
                b.extend_from_slice(&[2, 4]);
                b.extend_from_slice(&m.to_be_bytes());
            }
            Opt::Wscale(s) => b.extend_from_slice(&[3, 3, *s]),
            Opt::SackOk => b.extend_from_slice(&[4, 2]),
            Opt::Ts(a, c) => {
                b.extend_from_slice(&[8, 10]);
                b.extend_from_slice(&a.to_be_bytes());
                b.extend_from_slice(&c.to_be_bytes());
            }
            Opt::Sack(blocks) => {
                b.extend_from_slice(&[5, 2 + 8 * blocks.len() as u8]);
                for (s, e) in blocks {
                    b.extend_from_slice(&s.to_be_bytes());
                    b.extend_from_slice(&e.to_be_bytes());
                }
            }
            Opt::Nop => b.push(1),
            Opt::Eol => b.push(0),
            Opt::Raw(r) => b.extend_from_slice(r),
        }
    }
    while b.len() % 4 != 0 {
        b.push(0);
    }
    b
}

// ---- script lines -----------------------------------------------------------------------------

/// A number in a script, or `*` (any), or `$` (the device's last TSval).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Num {
    Any,
    Last,
    N(u64),
}

fn num(s: &str) -> Num {
    match s {
        "*" => Num::Any,
        "$" => Num::Last,
        _ => Num::N(s.parse().unwrap_or_else(|_| panic!("not a number: {s}"))),
    }
}

#[derive(Debug, Clone, PartialEq)]
enum OptSpec {
    Mss(Num),
    Wscale(Num),
    SackOk,
    Ts(Num, Num),
    Sack(Vec<(u32, u32)>),
    Nop,
    Eol,
    Raw(Vec<u8>),
}

#[derive(Debug, Clone)]
struct Line {
    flags: String,
    seq: Num,
    len: usize,
    ack: Option<Num>,
    win: Option<Num>,
    opts: Option<Vec<OptSpec>>,
}

fn parse_opts_spec(s: &str) -> Vec<OptSpec> {
    let mut v = Vec::new();
    for item in s.split(',').map(str::trim).filter(|x| !x.is_empty()) {
        let w: Vec<&str> = item.split_whitespace().collect();
        v.push(match w[0] {
            "mss" => OptSpec::Mss(num(w[1])),
            "wscale" => OptSpec::Wscale(num(w[1])),
            "sackOK" => OptSpec::SackOk,
            "TS" => {
                assert!(w.len() == 5 && w[1] == "val" && w[3] == "ecr", "TS: {item}");
                OptSpec::Ts(num(w[2]), num(w[4]))
            }
            "sack" => OptSpec::Sack(
                w[1..]
                    .iter()
                    .map(|r| {
                        let (a, b) = r.split_once(':').expect("sack A:B");
                        (a.parse().expect("A"), b.parse().expect("B"))
                    })
                    .collect(),
            ),
            "nop" => OptSpec::Nop,
            "eol" => OptSpec::Eol,
            "raw" => OptSpec::Raw(
                (0..w[1].len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&w[1][i..i + 2], 16).expect("hex"))
                    .collect(),
            ),
            o => panic!("unknown option {o}"),
        });
    }
    v
}

fn parse_line(s: &str) -> Line {
    let (head, opts) = match s.find('<') {
        Some(i) => {
            let j = s.rfind('>').expect("options end with >");
            (&s[..i], Some(parse_opts_spec(&s[i + 1..j])))
        }
        None => (s, None),
    };
    let w: Vec<&str> = head.split_whitespace().collect();
    let flags = w[0].to_string();
    assert!(flags.chars().all(|c| "SFRP.".contains(c)), "flags: {flags}");
    let (seq, len) = match w[1].split_once(':') {
        None => (num(w[1]), 0),
        Some((a, rest)) => {
            let (b, l) = rest
                .trim_end_matches(')')
                .split_once('(')
                .expect("START:END(LEN)");
            let (a, b, l): (u64, u64, usize) = (
                a.parse().expect("start"),
                b.parse().expect("end"),
                l.parse().expect("len"),
            );
            assert_eq!(b - a, l as u64, "{s}: END - START is LEN");
            (Num::N(a), l)
        }
    };
    let mut line = Line {
        flags,
        seq,
        len,
        ack: None,
        win: None,
        opts,
    };
    let mut i = 2;
    while i < w.len() {
        match w[i] {
            "ack" => line.ack = Some(num(w[i + 1])),
            "win" => line.win = Some(num(w[i + 1])),
            x => panic!("{s}: unexpected {x}"),
        }
        i += 2;
    }
    line
}

// ---- the test's side of the cable ------------------------------------------------------------

struct TempDir(PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A posted receive: its wr_id, where it is in the buffer, its length.
struct Posted {
    wr_id: u64,
    at: u64,
}

/// The device under test, a guest with one TCP QP on it, and the test's end of the cable.
pub struct Peer {
    pub g: FakeGuest,
    link: Cable,
    _dir: TempDir,
    pub dev: Ipv6Addr,
    pub addr: Ipv6Addr,
    /// The test's port and the device's.
    pub port: u16,
    pub dev_port: u16,
    pub ctx: u32,
    pub end: TcpEnd,
    listener: Option<u32>,
    pending_cmd: Option<u32>,
    /// The device's ISN, once seen.
    pub iss: Option<u32>,
    /// What the device sent that no expectation has taken yet.
    inbox: VecDeque<Frame>,
    /// Every frame the device sent.
    pub log: Vec<Frame>,
    /// The last TCP segment the device sent with payload (what a packet too big quotes).
    last_data_frame: Option<Vec<u8>>,
    last_ts: u32,
    /// The script line being run (for messages).
    line: String,
    /// TCP segments received from the device in all.
    tcp_seen: u64,
    /// The highest sequence (relative, plus length) the test has sent, and its last ack.
    peer_end: u64,
    last_ack: u32,
    /// Guest side: receives posted in order, where the next goes in the buffer, what
    /// arrived, how much was sent.
    posted: VecDeque<Posted>,
    next_rx: u64,
    next_wr: u64,
    pub received: Vec<u8>,
    pub eof: bool,
    sent: u64,
}

/// Where the guest's send data lives in its buffer, and where receives start.
const SEND_AREA: u64 = 1 << 20;
const BUF_LEN: u64 = 4 << 20;
const DEPTH: u32 = 64;

impl Peer {
    fn new(name: &str) -> Peer {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("qpip-script-{name}-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("cable");
        let link = Cable::open(&path).expect("the test's end of the cable");
        let dev: Ipv6Addr = DEV_ADDR.parse().unwrap();
        let addr: Ipv6Addr = PEER_ADDR.parse().unwrap();
        let mut network = NetworkConfig::new(qpip_device::backend::NetSpec::Cable(path));
        // The test answers no neighbour solicitations: the device knows its MAC.
        network.neighbors = vec![StaticNeighbor {
            addr,
            mac: PEER_MAC,
        }];
        let engine = EngineConfig {
            mac: DEV_MAC,
            addrs: vec![(dev, 64)],
            network: Some(network),
            tcp_limits: TcpLimits {
                msl: MSL,
                ..TcpLimits::default()
            },
            ..EngineConfig::default()
        };
        let mut g = FakeGuest::with_options(ServeOptions {
            core: qpip_device::core::CoreConfig {
                engine,
                ..Default::default()
            },
        });
        let ctx = g.create_ctx().expect("context");
        let end = g.tcp_endpoint_in(ctx, FRAMING_STREAM, DEPTH, BUF_LEN);
        let data: Vec<u8> = (0..SEND_AREA).map(dev_byte).collect();
        g.buf_write(&end.buf, 0, &data);
        Peer {
            g,
            link,
            _dir: TempDir(dir),
            dev,
            addr,
            port: PEER_PORT,
            dev_port: DEV_PORT,
            ctx,
            end,
            listener: None,
            pending_cmd: None,
            iss: None,
            inbox: VecDeque::new(),
            log: Vec::new(),
            last_data_frame: None,
            last_ts: 0,
            tcp_seen: 0,
            line: String::new(),
            peer_end: 0,
            last_ack: 0,
            posted: VecDeque::new(),
            next_rx: SEND_AREA,
            next_wr: 1,
            received: Vec::new(),
            eof: false,
            sent: 0,
        }
    }

    /// A device listening on [`DEV_PORT`] with the guest's QP offered to ACCEPT; no
    /// receive posted.
    pub fn listening(name: &str) -> Peer {
        let mut p = Peer::new(name);
        let l = p.g.listen(p.ctx, UNSPECIFIED, DEV_PORT, 8).expect("listen");
        p.listener = Some(l);
        p.pending_cmd = Some(p.g.submit_accept(p.ctx, l, p.end.qp.id));
        p
    }

    /// A device whose guest connects to the test's [`PEER_PORT`] (its SYN is on the way).
    pub fn connecting(name: &str) -> Peer {
        let mut p = Peer::new(name);
        p.pending_cmd = Some(p.connect());
        p
    }

    /// A second connection from the guest, on a new QP, to the test's port `port`: the
    /// script's state starts afresh (the device's ISN is learned from the new SYN).
    pub fn new_connection(&mut self, port: u16) {
        self.end = self
            .g
            .tcp_endpoint_in(self.ctx, FRAMING_STREAM, DEPTH, BUF_LEN);
        let data: Vec<u8> = (0..SEND_AREA).map(dev_byte).collect();
        self.g.buf_write(&self.end.buf, 0, &data);
        self.port = port;
        self.iss = None;
        self.peer_end = 0;
        self.last_ack = 0;
        self.posted.clear();
        self.next_rx = SEND_AREA;
        self.received.clear();
        self.eof = false;
        self.sent = 0;
        self.pending_cmd = Some(self.connect());
    }

    /// The guest submits CONNECT to the test (returns the command id).
    pub fn connect(&mut self) -> u32 {
        self.g
            .submit_connect(self.ctx, self.end.qp.id, self.addr.octets(), self.port)
    }

    /// A listening device after a plain handshake: the test's SYN with MSS 1440, SACK
    /// permitted and window scale 7 (no timestamps), the guest's ACCEPT completed.
    pub fn established(name: &str) -> Peer {
        let mut p = Peer::listening(name);
        p.run(
            "
            > S 0:0(0) win 65535 <mss 1440,sackOK,nop,wscale 7>
            < S. 0:0(0) ack 1 win 65535 <mss 1440,sackOK,wscale 7>
            > . 1:1(0) ack 1 win 1024
            @accepted
            ",
        );
        p
    }

    // ---- frames --------------------------------------------------------------------------

    fn frame(&self, next: u8, upper: &[u8]) -> Vec<u8> {
        let mut f = wire::ipv6_packet(&self.addr, &self.dev, next, 64, upper);
        wire::write_ethernet(&mut f, &DEV_MAC, &PEER_MAC);
        f
    }

    /// Sends a whole Ethernet frame to the device.
    pub fn inject_frame(&mut self, f: &[u8]) {
        self.link.send(f).expect("the cable takes the frame");
    }

    /// A TCP segment (header with checksum, then payload) from the test to the device.
    pub fn tcp_bytes(&self, h: &TcpHeader, payload: &[u8]) -> Vec<u8> {
        let mut h = h.clone();
        h.checksum = h
            .calc_checksum_ipv6_raw(self.addr.octets(), self.dev.octets(), payload)
            .expect("size");
        let mut b = h.to_bytes().to_vec();
        b.extend_from_slice(payload);
        b
    }

    /// Injects a TCP segment in a plain IPv6 packet.
    pub fn inject_tcp(&mut self, h: &TcpHeader, payload: &[u8]) {
        let b = self.tcp_bytes(h, payload);
        let f = self.frame(TCP, &b);
        self.inject_frame(&f);
    }

    /// Injects an IPv6 packet whose payload is `upper` after the header chain `next`
    /// (for extension headers built by the caller).
    pub fn inject_ip(&mut self, next: u8, upper: &[u8]) {
        let f = self.frame(next, upper);
        self.inject_frame(&f);
    }

    /// An ICMPv6 packet too big from [`ROUTER`] reporting `mtu`, quoting the device's last
    /// data segment (as much as fits the minimum MTU, RFC 4443 §3.2).
    pub fn packet_too_big(&mut self, mtu: u32) {
        let q = self
            .last_data_frame
            .clone()
            .expect("the device sent data to quote");
        let q = &q[wire::ETH_LEN..q.len().min(wire::ETH_LEN + 1280 - 40 - 8)];
        let mut body = mtu.to_be_bytes().to_vec();
        body.extend_from_slice(q);
        let router: Ipv6Addr = ROUTER.parse().unwrap();
        let m = wire::icmpv6(&router, &self.dev, 2, 0, &body);
        let mut f = wire::ipv6_packet(&router, &self.dev, ICMPV6, 64, &m);
        wire::write_ethernet(&mut f, &DEV_MAC, &PEER_MAC);
        self.inject_frame(&f);
    }

    /// Takes what the device sent so far into the inbox.
    fn pump(&mut self) {
        let mut buf = vec![0u8; MAX_FRAME];
        while let Ok(Some(n)) = self.link.recv(&mut buf) {
            let f = buf[..n].to_vec();
            let fr = self.classify(&f);
            if let Frame::Tcp(s) = &fr {
                self.tcp_seen += 1;
                if !s.payload.is_empty() {
                    self.last_data_frame = Some(f.clone());
                }
                if let Some((v, _)) = s.ts() {
                    self.last_ts = v;
                }
            }
            self.log.push(fr.clone());
            if !matches!(fr, Frame::Other) {
                self.inbox.push_back(fr);
            }
        }
    }

    fn classify(&self, f: &[u8]) -> Frame {
        if f.len() < 54 || f[12..14] != [0x86, 0xdd] {
            return Frame::Other;
        }
        let ip = &f[14..];
        let plen = u16::from_be_bytes([ip[4], ip[5]]) as usize;
        assert!(
            ip.len() >= 40 + plen,
            "IPv6 payload length beyond the frame"
        );
        let (next, upper) = (ip[6], &ip[40..40 + plen]);
        let src = Ipv6Addr::from(<[u8; 16]>::try_from(&ip[8..24]).unwrap());
        let dst = Ipv6Addr::from(<[u8; 16]>::try_from(&ip[24..40]).unwrap());
        match next {
            FRAGMENT => Frame::Fragment(40 + plen),
            ICMPV6 if upper.len() >= 4 && dst == self.addr => {
                assert!(
                    wire::checksum_ok(&src, &dst, ICMPV6, upper),
                    "ICMPv6 checksum"
                );
                Frame::Icmp(upper[0], upper[1], upper[4..].to_vec())
            }
            TCP => {
                assert_eq!((src, dst), (self.dev, self.addr), "TCP to the test");
                let (h, payload) = TcpHeader::from_slice(upper).expect("a TCP header");
                let sum = h
                    .calc_checksum_ipv6_raw(src.octets(), dst.octets(), payload)
                    .expect("size");
                assert_eq!(sum, h.checksum, "TCP checksum");
                Frame::Tcp(Seg {
                    opts: parse_opts(h.options.as_slice()),
                    h,
                    payload: payload.to_vec(),
                    ip_len: 40 + plen,
                })
            }
            _ => Frame::Other,
        }
    }

    /// The next frame the device sends that is not [`Frame::Other`] (it waits up to
    /// [`WAIT`]).
    pub fn next_frame(&mut self) -> Frame {
        let deadline = Instant::now() + WAIT;
        loop {
            self.pump();
            if let Some(f) = self.inbox.pop_front() {
                return f;
            }
            assert!(
                Instant::now() < deadline,
                "the device sent nothing within {WAIT:?} (after `{}`)",
                self.line
            );
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// The next TCP segment the device sends (ICMPv6 before it is an error).
    pub fn next_seg(&mut self) -> Seg {
        match self.next_frame() {
            Frame::Tcp(s) => s,
            f => panic!("expected a TCP segment, the device sent {f:?}"),
        }
    }

    /// The next ICMPv6 message the device sends (a TCP segment first is an error).
    pub fn next_icmp(&mut self) -> (u8, u8, Vec<u8>) {
        match self.next_frame() {
            Frame::Icmp(t, c, b) => (t, c, b),
            f => panic!("expected ICMPv6, the device sent {f:?}"),
        }
    }

    // ---- scripts -------------------------------------------------------------------------

    /// Runs a script (see the module's documentation).
    #[track_caller]
    pub fn run(&mut self, script: &str) {
        for raw in script.lines() {
            let line = raw.split('#').next().unwrap().trim();
            if line.is_empty() {
                continue;
            }
            self.line = line.to_string();
            if let Some(cmd) = line.strip_prefix('@') {
                self.command(cmd);
            } else if let Some(rest) = line.strip_prefix('>') {
                self.inject_line(&parse_line(rest.trim()));
            } else if let Some(rest) = line.strip_prefix('<') {
                let rest = rest.trim();
                if rest == "nothing" {
                    self.nothing();
                } else {
                    let l = parse_line(rest);
                    let s = self.next_seg();
                    if let Err(e) = self.check(&l, &s) {
                        panic!("line `{line}`: {e}\n  the device sent {}", self.show(&s));
                    }
                }
            } else {
                panic!("script line `{line}`: starts with >, < or @");
            }
        }
    }

    fn command(&mut self, cmd: &str) {
        let w: Vec<&str> = cmd.split_whitespace().collect();
        match w[0] {
            "post" => self.post_recv(w[1].parse().expect("bytes")),
            "send" => self.send(w[1].parse().expect("bytes")),
            "close" => {
                let id = self.g.submit_close(self.ctx, self.end.qp.id);
                self.pending_cmd = Some(id);
            }
            "accepted" | "connected" => {
                let id = self.pending_cmd.take().expect("a command to wait for");
                let c = self.g.admin_wait_done(id);
                assert_eq!(
                    c.status,
                    ADMIN_STATUS_OK,
                    "{}: {}",
                    w[0],
                    admin_status_name(c.status)
                );
            }
            c => panic!("unknown command @{c}"),
        }
    }

    /// The relative sequence of a `>` line as an absolute one.
    fn abs_ack(&self, n: u64) -> u32 {
        self.iss
            .expect("the device's ISN is not known yet")
            .wrapping_add(n as u32)
    }

    fn inject_line(&mut self, l: &Line) {
        let b = self.build_line(l);
        self.inject_ip(TCP, &b);
    }

    /// The bytes of the TCP segment a `>` line describes (header, checksum, payload),
    /// for the caller to wrap (fragments, extension headers). It counts as sent.
    pub fn tcp(&mut self, line: &str) -> Vec<u8> {
        self.build_line(&parse_line(line.trim().trim_start_matches('>').trim()))
    }

    fn build_line(&mut self, l: &Line) -> Vec<u8> {
        let Num::N(seq) = l.seq else {
            panic!("an injected segment needs its seq")
        };
        let win = match l.win {
            Some(Num::N(w)) => w as u16,
            None => 65535,
            _ => panic!("win of an injected segment"),
        };
        let mut h = TcpHeader::new(
            self.port,
            self.dev_port,
            PEER_ISN.wrapping_add(seq as u32),
            win,
        );
        for c in l.flags.chars() {
            match c {
                'S' => h.syn = true,
                'F' => h.fin = true,
                'R' => h.rst = true,
                'P' => h.psh = true,
                '.' => h.ack = true,
                _ => unreachable!(),
            }
        }
        if let Some(a) = l.ack {
            let Num::N(a) = a else {
                panic!("ack of an injected segment")
            };
            h.acknowledgment_number = self.abs_ack(a);
            self.last_ack = a as u32;
        }
        let mut opts = Vec::new();
        for o in l.opts.iter().flatten() {
            opts.push(match o {
                OptSpec::Mss(Num::N(m)) => Opt::Mss(*m as u16),
                OptSpec::Wscale(Num::N(s)) => Opt::Wscale(*s as u8),
                OptSpec::SackOk => Opt::SackOk,
                OptSpec::Ts(v, e) => {
                    let Num::N(v) = v else { panic!("TS val") };
                    let e = match e {
                        Num::N(e) => *e as u32,
                        Num::Last => self.last_ts,
                        Num::Any => panic!("TS ecr"),
                    };
                    Opt::Ts(*v as u32, e)
                }
                OptSpec::Sack(b) => Opt::Sack(
                    b.iter()
                        .map(|&(s, e)| (self.abs_ack(s as u64), self.abs_ack(e as u64)))
                        .collect(),
                ),
                OptSpec::Nop => Opt::Nop,
                OptSpec::Eol => Opt::Eol,
                OptSpec::Raw(r) => Opt::Raw(r.clone()),
                o => panic!("option {o:?} of an injected segment"),
            });
        }
        h.set_options_raw(&opt_bytes(&opts)).expect("options fit");
        // Stream offset of the first byte: the SYN takes sequence 0.
        let start = seq.saturating_sub(1);
        let payload: Vec<u8> = (start..start + l.len as u64).map(peer_byte).collect();
        self.peer_end = self
            .peer_end
            .max(seq + l.len as u64 + h.syn as u64 + h.fin as u64);
        self.tcp_bytes(&h, &payload)
    }

    fn show(&self, s: &Seg) -> String {
        let iss = self.iss.unwrap_or(0);
        format!(
            "{} {}:{}({}) ack {} win {} {:?}",
            s.flags(),
            s.h.sequence_number.wrapping_sub(iss),
            s.h.sequence_number
                .wrapping_sub(iss)
                .wrapping_add(s.payload.len() as u32),
            s.payload.len(),
            s.h.acknowledgment_number.wrapping_sub(PEER_ISN),
            s.h.window_size,
            s.opts
        )
    }

    /// Checks a segment against an expected line (learning the device's ISN from its
    /// first SYN).
    fn check(&mut self, l: &Line, s: &Seg) -> Result<(), String> {
        if s.flags() != l.flags {
            return Err(format!("flags {} instead of {}", s.flags(), l.flags));
        }
        if s.h.syn && self.iss.is_none() {
            let Num::N(rel) = l.seq else {
                return Err("a SYN's seq must be given".into());
            };
            self.iss = Some(s.h.sequence_number.wrapping_sub(rel as u32));
            // An active open's port is the device's choice.
            self.dev_port = s.h.source_port;
        }
        let iss = self.iss.ok_or("the device's ISN is not known yet")?;
        let cmp = |what: &str, want: Num, got: u64| -> Result<(), String> {
            match want {
                Num::N(n) if n != got => Err(format!("{what} {got} instead of {n}")),
                _ => Ok(()),
            }
        };
        cmp("seq", l.seq, s.h.sequence_number.wrapping_sub(iss) as u64)?;
        if s.payload.len() != l.len {
            return Err(format!("{} bytes instead of {}", s.payload.len(), l.len));
        }
        if let Some(a) = l.ack {
            cmp(
                "ack",
                a,
                s.h.acknowledgment_number.wrapping_sub(PEER_ISN) as u64,
            )?;
        }
        if let Some(w) = l.win {
            cmp("win", w, s.h.window_size as u64)?;
        }
        if let Some(want) = &l.opts {
            let got: Vec<&Opt> = s
                .opts
                .iter()
                .filter(|o| !matches!(o, Opt::Nop | Opt::Eol))
                .collect();
            let want: Vec<&OptSpec> = want
                .iter()
                .filter(|o| !matches!(o, OptSpec::Nop | OptSpec::Eol))
                .collect();
            if got.len() != want.len() {
                return Err(format!("options {got:?} instead of {want:?}"));
            }
            for w in want {
                let ok = got.iter().any(|g| match (w, g) {
                    (OptSpec::Mss(n), Opt::Mss(m)) => cmp("mss", *n, *m as u64).is_ok(),
                    (OptSpec::Wscale(n), Opt::Wscale(m)) => cmp("ws", *n, *m as u64).is_ok(),
                    (OptSpec::SackOk, Opt::SackOk) => true,
                    (OptSpec::Ts(v, e), Opt::Ts(a, b)) => {
                        cmp("val", *v, *a as u64).is_ok() && cmp("ecr", *e, *b as u64).is_ok()
                    }
                    (OptSpec::Sack(want), Opt::Sack(got)) => {
                        let rel: Vec<(u32, u32)> = got
                            .iter()
                            .map(|&(a, b)| (a.wrapping_sub(PEER_ISN), b.wrapping_sub(PEER_ISN)))
                            .collect();
                        rel == *want
                    }
                    _ => false,
                });
                if !ok {
                    return Err(format!("no option {w:?} among {got:?}"));
                }
            }
        }
        Ok(())
    }

    /// `< nothing`: the device sent nothing since the last segment taken. An old,
    /// out-of-window segment is injected as a barrier (RFC 9293 §3.10.7.4: answered with
    /// an ACK, or a RST where no connection is); its answer must be the first segment,
    /// and the device's count of segments sent (STAT_TCP_SEGS_OUT) must show no other.
    #[track_caller]
    pub fn nothing(&mut self) {
        self.pump();
        if let Some(f) = self.inbox.iter().find(|f| matches!(f, Frame::Tcp(_))) {
            panic!("the device sent {f:?}");
        }
        let before = self.tcp_seen;
        // Far below anything in the window, so never acceptable.
        let seq = PEER_ISN
            .wrapping_add(self.peer_end as u32)
            .wrapping_sub(100_000);
        let mut h = TcpHeader::new(self.port, self.dev_port, seq, 65535);
        h.ack = true;
        h.acknowledgment_number = self.iss.map_or(0, |i| i.wrapping_add(self.last_ack));
        self.inject_tcp(&h, &[]);
        let s = self.next_seg();
        let answer = if s.h.rst {
            s.h.sequence_number == h.acknowledgment_number
        } else {
            s.h.ack && !s.h.syn && !s.h.fin && s.payload.is_empty()
        };
        assert!(
            answer,
            "the device sent {} before answering the barrier",
            self.show(&s)
        );
        let n = self.stat(STAT_TCP_SEGS_OUT);
        let deadline = Instant::now() + WAIT;
        while self.tcp_seen < n {
            assert!(Instant::now() < deadline, "segments counted never came");
            std::thread::sleep(Duration::from_micros(200));
            self.pump();
        }
        if self.tcp_seen - before != 1 {
            panic!(
                "the device sent {} segments around the barrier: {:?}",
                self.tcp_seen - before,
                self.inbox
            );
        }
    }

    /// Expects `n` data segments of `size` bytes, in order from relative sequence `from`
    /// (ACK set, PSH as the device likes). Returns them.
    #[track_caller]
    pub fn expect_data(&mut self, from: u32, n: usize, size: usize) -> Vec<Seg> {
        let iss = self.iss.expect("the device's ISN");
        (0..n)
            .map(|i| {
                let s = self.next_seg();
                let want = from + (i * size) as u32;
                assert!(
                    s.h.ack && !s.h.syn && !s.h.fin && !s.h.rst,
                    "data segment {i}: {}",
                    self.show(&s)
                );
                assert_eq!(
                    (s.h.sequence_number.wrapping_sub(iss), s.payload.len()),
                    (want, size),
                    "data segment {i}: {}",
                    self.show(&s)
                );
                let off = (want - 1) as u64;
                for (k, &b) in s.payload.iter().enumerate() {
                    assert_eq!(b, dev_byte(off + k as u64), "byte {k} of segment {i}");
                }
                s
            })
            .collect()
    }

    // ---- the guest ----------------------------------------------------------------------

    /// The guest posts a receive of `n` bytes.
    pub fn post_recv(&mut self, n: u64) {
        assert!(self.next_rx + n <= BUF_LEN, "receive area used up");
        let id = self.next_wr;
        self.next_wr += 1;
        let w = recv_wqe(
            id,
            &[self.end.buf.sge(self.next_rx, n as u32, self.end.mr.lkey)],
        );
        self.posted.push_back(Posted {
            wr_id: id,
            at: self.next_rx,
        });
        self.next_rx += n;
        let (g, qp) = (&mut self.g, &mut self.end.qp);
        g.post_recv(qp, &[w]);
    }

    /// The guest sends the next `n` bytes of its stream.
    pub fn send(&mut self, n: u64) {
        assert!(self.sent + n <= SEND_AREA, "send area used up");
        let id = self.next_wr;
        self.next_wr += 1;
        let w = tcp_send_wqe(
            id,
            0,
            &[self.end.buf.sge(self.sent, n as u32, self.end.mr.lkey)],
        );
        self.sent += n;
        let (g, qp) = (&mut self.g, &mut self.end.qp);
        g.post_send(qp, &[w]);
    }

    /// Waits for the next receive completion and takes its bytes (a completion of 0
    /// bytes is the end of the stream). Returns its status.
    pub fn recv_done(&mut self) -> u8 {
        let c = self.g.wait_cqe(&mut self.end.rcq);
        let p = self.posted.pop_front().expect("a receive was posted");
        assert_eq!(c.wr_id, p.wr_id, "receives complete in order");
        if c.status == CQE_STATUS_SUCCESS {
            if c.byte_len == 0 {
                self.eof = true;
            } else {
                let b = self.g.buf_read(&self.end.buf, p.at, c.byte_len as usize);
                self.received.extend_from_slice(&b);
            }
        }
        c.status
    }

    /// The bytes received so far are the test's stream from its start.
    #[track_caller]
    pub fn check_received(&self, len: usize) {
        assert_eq!(self.received.len(), len, "bytes received");
        for (k, &b) in self.received.iter().enumerate() {
            assert_eq!(b, peer_byte(k as u64), "received byte {k}");
        }
    }

    /// Waits for the next send completion; returns its status.
    pub fn send_done(&mut self) -> u8 {
        self.g.wait_cqe(&mut self.end.scq).status
    }

    /// Waits for the guest's pending command (CONNECT, ACCEPT, CLOSE) to complete;
    /// returns its status.
    pub fn cmd_done(&mut self) -> u16 {
        let id = self.pending_cmd.take().expect("a command to wait for");
        self.g.admin_wait_done(id).status
    }

    /// A device counter.
    pub fn stat(&mut self, i: u32) -> u64 {
        self.g.stat(i)
    }
}
