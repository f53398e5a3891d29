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
//!   receives can be checked; [`Peer::inject_bytes`] sends a line with bytes of the
//!   test's own (an upper protocol's).
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
//! Scripts run over IPv6 by default; a [`Setup`] of [`Family::V4`] puts the device and the
//! test on IPv4 (the same scripts: sequence numbers, flags and options do not change, only
//! the MSS of the link, [`Peer::link_mss`]).
//!
//! Here: the device, its guest and the test's [`Peer`]; in `line` the script lines
//! parsed, in `segment` the device's segments as on the wire, in `cable` the frames that
//! cross (in `ipv4` what is IPv4's own: its header, ARP, fragmentation needed), in `run` a
//! script run line by line, in `guest` what the guest does.

mod cable;
mod guest;
mod ipv4;
mod line;
mod run;
mod segment;

use std::collections::VecDeque;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use qpip_device::backend::cable::Cable;
use qpip_device::engine::network::NetworkConfig;
use qpip_device::engine::tcp::TcpLimits;
use qpip_device::engine::EngineConfig;
use qpip_device::net::config::StaticNeighbor;
use qpip_device::net::wire::{self, Arp, Mac};
use qpip_device::vfio::ServeOptions;
use qpip_testkit::*;

pub use segment::{Frame, Seg};

pub const DEV_MAC: [u8; 6] = [0x02, 0x51, 0x50, 0, 0x16, 0x01];
pub const PEER_MAC: [u8; 6] = [0x02, 0x51, 0x50, 0, 0x16, 0x02];
pub const DEV_ADDR: &str = "fd51:5050::16:1";
pub const PEER_ADDR: &str = "fd51:5050::16:2";
/// A router on the path (packets too big come from it).
pub const ROUTER: &str = "fd51:5050::16:fe";
/// The same over IPv4: the device's address (its prefix a /24), the test's, a router's.
pub const DEV_ADDR4: &str = "198.18.0.1";
pub const PEER_ADDR4: &str = "198.18.0.2";
pub const ROUTER4: &str = "198.18.0.254";
/// The MTU of the cable.
pub const LINK_MTU: u32 = 1500;
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
const ICMPV4: u8 = 1;
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

/// The IP version the device and the test speak to each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    V6,
    V4,
}

/// How a script's device is set up: the family, the framing of the guest's QP
/// (`FRAMING_*`), and whether the device knows the test's MAC from its configuration (a
/// static neighbour, so that it never asks) or must learn it (the test plays ARP).
#[derive(Debug, Clone, Copy)]
pub struct Setup {
    pub family: Family,
    pub framing: u8,
    pub peer_known: bool,
}

impl Setup {
    pub const V6: Setup = Setup {
        family: Family::V6,
        framing: FRAMING_STREAM,
        peer_known: true,
    };
    pub const V4: Setup = Setup {
        family: Family::V4,
        ..Setup::V6
    };
    /// IPv4, the test's MAC not configured: the device resolves it by ARP.
    pub const V4_ARP: Setup = Setup {
        peer_known: false,
        ..Setup::V4
    };
}

/// The device's address with its prefix length (over the mapped 128 bits for IPv4), the
/// test's and the router's.
fn addresses(family: Family) -> ((Ipv6Addr, u8), Ipv6Addr, Ipv6Addr) {
    let v4 = |s: &str| wire::mapped(s.parse::<Ipv4Addr>().unwrap());
    match family {
        Family::V6 => (
            (DEV_ADDR.parse().unwrap(), 64),
            PEER_ADDR.parse().unwrap(),
            ROUTER.parse().unwrap(),
        ),
        Family::V4 => ((v4(DEV_ADDR4), 120), v4(PEER_ADDR4), v4(ROUTER4)),
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
    _dir: ScratchDir,
    pub family: Family,
    /// The device's address, the test's and a router's (IPv4 ones mapped).
    pub dev: Ipv6Addr,
    pub addr: Ipv6Addr,
    pub router: Ipv6Addr,
    /// The test's MAC, what its frames come from.
    pub mac: Mac,
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
    /// The ARP messages the device sent that no expectation has taken yet, each with the
    /// frame's destination (kept apart: the device may announce its address any time).
    arps: VecDeque<(Mac, Arp)>,
    /// Every frame the device sent.
    pub log: Vec<Frame>,
    /// The last TCP segment the device sent with payload (what a packet too big or a
    /// "fragmentation needed" quotes).
    last_data_frame: Option<Vec<u8>>,
    /// The last TCP segment the device sent, whatever it carried (what a destination
    /// unreachable about a SYN quotes).
    last_tcp_frame: Option<Vec<u8>>,
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
    /// The device and its guest, set up as `setup` says.
    pub fn with(name: &str, setup: Setup) -> Peer {
        let dir = ScratchDir::new(&format!("script-{name}"));
        let path = dir.join("cable");
        let link = Cable::open(&path).expect("the test's end of the cable");
        let ((dev, prefix), addr, router) = addresses(setup.family);
        let mut network = NetworkConfig::new(qpip_device::backend::NetSpec::Cable(path));
        network.mtu = LINK_MTU as usize;
        // The test answers no neighbour solicitations: the device knows its MAC, unless
        // the test means to play ARP.
        if setup.peer_known {
            network.neighbors = vec![StaticNeighbor {
                addr,
                mac: PEER_MAC,
            }];
        }
        let engine = EngineConfig {
            mac: DEV_MAC,
            addrs: vec![(dev, prefix)],
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
        let end = g.tcp_endpoint_in(ctx, setup.framing, DEPTH, BUF_LEN);
        let data: Vec<u8> = (0..SEND_AREA).map(dev_byte).collect();
        g.buf_write(&end.buf, 0, &data);
        Peer {
            g,
            link,
            _dir: dir,
            family: setup.family,
            dev,
            addr,
            router,
            mac: PEER_MAC,
            port: PEER_PORT,
            dev_port: DEV_PORT,
            ctx,
            end,
            listener: None,
            pending_cmd: None,
            iss: None,
            inbox: VecDeque::new(),
            arps: VecDeque::new(),
            log: Vec::new(),
            last_data_frame: None,
            last_tcp_frame: None,
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
        Peer::listening_with(name, Setup::V6)
    }

    /// [`Peer::listening`] over IPv4.
    pub fn listening_v4(name: &str) -> Peer {
        Peer::listening_with(name, Setup::V4)
    }

    /// [`Peer::listening`], set up as `setup` says.
    pub fn listening_with(name: &str, setup: Setup) -> Peer {
        let mut p = Peer::with(name, setup);
        let l = p.g.listen(p.ctx, UNSPECIFIED, DEV_PORT, 8).expect("listen");
        p.listener = Some(l);
        p.pending_cmd = Some(p.g.submit_accept(p.ctx, l, p.end.qp.id));
        p
    }

    /// A device whose guest connects to the test's [`PEER_PORT`] (its SYN is on the way).
    pub fn connecting(name: &str) -> Peer {
        Peer::connecting_with(name, Setup::V6)
    }

    /// [`Peer::connecting`], set up as `setup` says.
    pub fn connecting_with(name: &str, setup: Setup) -> Peer {
        let mut p = Peer::with(name, setup);
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

    /// The MSS of the cable for the family: its MTU less the IP and TCP headers (1440
    /// over IPv6, 1460 over IPv4).
    pub fn link_mss(&self) -> u32 {
        LINK_MTU - wire::ip_header_len(&self.dev) as u32 - 20
    }

    /// A listening device after a plain handshake: the test's SYN with the link's MSS,
    /// SACK permitted and window scale 7 (no timestamps), the guest's ACCEPT completed.
    pub fn established(name: &str) -> Peer {
        Peer::established_with(name, Setup::V6)
    }

    /// [`Peer::established`] over IPv4.
    pub fn established_v4(name: &str) -> Peer {
        Peer::established_with(name, Setup::V4)
    }

    /// [`Peer::established`] with a QP of `framing` (`FRAMING_*`).
    pub fn established_framed(name: &str, framing: u8) -> Peer {
        Peer::established_with(
            name,
            Setup {
                framing,
                ..Setup::V6
            },
        )
    }

    /// [`Peer::established`], set up as `setup` says.
    pub fn established_with(name: &str, setup: Setup) -> Peer {
        let mut p = Peer::listening_with(name, setup);
        let mss = p.link_mss();
        p.run(&format!(
            "
            > S 0:0(0) win 65535 <mss {mss},sackOK,nop,wscale 7>
            < S. 0:0(0) ack 1 win 65535 <mss {mss},sackOK,wscale 7>
            > . 1:1(0) ack 1 win 1024
            @accepted
            ",
        ));
        p
    }

    /// [`Peer::established`], and the guest posts a receive of 10000 bytes: the window
    /// update that opens is taken.
    pub fn receiving(name: &str) -> Peer {
        Peer::receiving_with(name, Setup::V6)
    }

    /// [`Peer::receiving`], set up as `setup` says.
    pub fn receiving_with(name: &str, setup: Setup) -> Peer {
        let mut p = Peer::established_with(name, setup);
        p.run(
            "
            @post 10000
            < . 1:1(0) ack 1 win *
            ",
        );
        p
    }
}
