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
//! - `@post N`, `@send N`, `@close`: the guest posts a receive of N bytes, sends the next
//!   N bytes of its stream (a pattern of the offset, [`dev_byte`]), or closes.
//! - `@accepted`, `@connected`, `@closed`, `@refused`: the guest's pending ACCEPT, CONNECT
//!   or CLOSE completes, successfully or refused.
//! - `@received N`, `@eof`, `@sent`: receives complete until N bytes of the test's stream
//!   have arrived (checked byte by byte); the next receive completes empty (the end of
//!   the stream); the next send completes, successfully.
//!
//! `#` starts a comment. Rust code between scripts does what the text cannot.
//!
//! Here: the device, its guest and the test's [`Peer`]; in `line` the script lines
//! parsed, in `segment` the device's segments as on the wire, in `cable` the frames that
//! cross, in `run` a script run line by line, in `guest` what the guest does.

mod cable;
mod guest;
mod line;
mod run;
mod segment;

use std::collections::VecDeque;
use std::net::Ipv6Addr;
use std::time::Duration;

use qpip_device::backend::cable::Cable;
use qpip_device::engine::network::NetworkConfig;
use qpip_device::engine::tcp::TcpLimits;
use qpip_device::engine::EngineConfig;
use qpip_device::net::config::StaticNeighbor;
use qpip_device::vfio::ServeOptions;
use qpip_testkit::*;

pub use segment::Frame;

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

// ---- the test's side of the cable ------------------------------------------------------------

/// A posted receive: its wr_id, where it is in the buffer, its length.
struct Posted {
    wr_id: u64,
    at: u64,
}

/// The device under test, a guest with one TCP QP on it, and the test's end of the cable.
pub struct Peer {
    pub g: FakeGuest,
    link: Cable,
    _dir: ScratchDir,
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
        Peer::framed(name, FRAMING_STREAM)
    }

    /// The device and its guest, whose QP has `framing` (`FRAMING_*`).
    fn framed(name: &str, framing: u8) -> Peer {
        let dir = ScratchDir::new(&format!("script-{name}"));
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
            core: qpip_device::function::FunctionConfig {
                engine,
                ..Default::default()
            },
        });
        let ctx = g.create_ctx().expect("context");
        let end = g.tcp_endpoint_in(ctx, framing, DEPTH, BUF_LEN);
        let data: Vec<u8> = (0..SEND_AREA).map(dev_byte).collect();
        g.buf_write(&end.buf, 0, &data);
        Peer {
            g,
            link,
            _dir: dir,
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
        Peer::listening_framed(name, FRAMING_STREAM)
    }

    fn listening_framed(name: &str, framing: u8) -> Peer {
        let mut p = Peer::framed(name, framing);
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
        Peer::established_framed(name, FRAMING_STREAM)
    }

    /// [`Peer::established`] with a QP of `framing` (`FRAMING_*`).
    pub fn established_framed(name: &str, framing: u8) -> Peer {
        let mut p = Peer::listening_framed(name, framing);
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

    /// [`Peer::established`], and the guest posts a receive of 10000 bytes: the window
    /// update that opens is taken.
    pub fn receiving(name: &str) -> Peer {
        let mut p = Peer::established(name);
        p.run(
            "
            @post 10000
            < . 1:1(0) ack 1 win *
            ",
        );
        p
    }
}
