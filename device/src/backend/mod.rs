//! Network backends: where the device's Ethernet frames go and come from.
//!
//! - [`tap`]: a Linux TAP interface (`--net tap:IFNAME`), the way into a host's network.
//! - [`cable`]: a unix datagram socket pair joining two `qpipd` directly
//!   (`--net cable:PATH`), no privileges needed.
//! - [`memory`]: an in-process pair, for tests.
//! - [`none`]: no link (a device without `--net`: only its loopback).
//! - [`switch`]: a learning Ethernet switch joining several functions (a
//!   [`switch::SwitchPort`] backend each) to each other in memory and to one uplink (any
//!   backend above), as an SR-IOV NIC's embedded switch does.
//!
//! Any of them can be wrapped in a [`link::Link`], which writes a capture (`--pcap FILE`)
//! and applies seeded faults (`--impair SPEC`, see [`impair`]).
//!
//! Every backend says whether its link is up ([`Backend::link_up`], the port's carrier):
//! a TAP while its host side is up and running, a switch port while the switch's uplink
//! is, a cable and a memory pair always (a memory pair until a test takes it down), no
//! link never. The engine asks at most every [`LINK_CHECK`], and while the link is down
//! drops what its stack sends (counted, never queued).
//!
//! Every backend is non-blocking: `send` never waits (a frame the backend cannot take is
//! refused with `WouldBlock` and is lost, as on a full NIC ring), `recv` returns `None`
//! when nothing is there, and `fd` is readable when a frame may be waiting, so the engine
//! can sleep in poll(2) on it (plus [`Backend::next_deadline`] for frames a [`link::Link`]
//! holds back).

pub mod cable;
pub mod impair;
pub mod link;
pub mod memory;
pub mod none;
pub mod pcap;
pub mod switch;
pub mod tap;
pub mod vnet;

use std::fmt;
use std::io;
use std::net::Ipv6Addr;
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::{Duration, Instant};

pub use impair::ImpairSpec;

/// How often the engine looks at its link's state ([`Backend::link_up`]): often enough
/// that a driver sees a change within a fraction of a second, seldom enough that the
/// system call a TAP needs for it costs nothing.
pub const LINK_CHECK: Duration = Duration::from_millis(200);

/// Receive buffers must hold this much: the largest IPv6 packet a link may carry (a TAP's
/// MTU is set by its owner) with its Ethernet header.
pub const MAX_FRAME: usize = 14 + 65535 + 40;

pub trait Backend: Send {
    /// Sends one frame without blocking. `WouldBlock` means it was dropped (full).
    fn send(&mut self, frame: &[u8]) -> io::Result<()>;
    /// Whether [`Backend::send_gso`] takes TCP super-frames whole (the link, or the
    /// kernel behind it, cuts them into segments, or the peer takes them as they are).
    fn gso(&self) -> bool {
        false
    }
    /// Sends an Ethernet + IPv6 + TCP super-frame whose payload is to go as segments of
    /// `mss` bytes. A backend without offloads ([`Backend::gso`] false) sends the segments,
    /// cut here ([`crate::net::gso`]).
    fn send_gso(&mut self, frame: &[u8], mss: u16) -> io::Result<()> {
        send_segments(self, frame, mss)
    }
    /// As [`Backend::send`] (`gso` 0) or [`Backend::send_gso`], with a frame the caller
    /// gives up: a backend that queues frames keeps the buffer instead of copying it.
    fn send_owned(&mut self, frame: Vec<u8>, gso: u16) -> io::Result<()> {
        if gso == 0 {
            self.send(&frame)
        } else {
            self.send_gso(&frame, gso)
        }
    }
    /// As [`Backend::recv`], into `buf`, which a backend that queues frames may replace
    /// with the frame's own buffer (no copy). The frame is `buf[..n]`.
    fn recv_owned(&mut self, buf: &mut Vec<u8>) -> io::Result<Option<usize>> {
        if buf.len() < MAX_FRAME {
            buf.resize(MAX_FRAME, 0);
        }
        self.recv(buf)
    }
    /// Receives one frame into `buf` (at least [`MAX_FRAME`] bytes) without blocking.
    /// Frames may be larger than the MTU when the link coalesces segments (GRO).
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>>;
    /// Received frames the backend itself refused (a malformed offload header ...), so far.
    fn rx_dropped(&self) -> u64 {
        0
    }
    /// Readable when a frame may be waiting.
    fn fd(&self) -> RawFd;
    /// Releases frames held back until now (impairment delays). `recv` does this too.
    fn poll(&mut self, _now: Instant) -> io::Result<()> {
        Ok(())
    }
    /// When frames held back are due (the fd does not signal those).
    fn next_deadline(&self) -> Option<Instant> {
        None
    }
    /// For logs: `tap:qpip0`, `cable:/run/x` ...
    fn describe(&self) -> String;
    /// Whether the link is up: frames can go and come, as a NIC's port reports its
    /// carrier. May cost a system call: the engine asks at most every [`LINK_CHECK`].
    fn link_up(&mut self) -> bool {
        true
    }
    /// Whether [`Backend::link_up`] can change on its own, so that a sleeping engine must
    /// wake every [`LINK_CHECK`] to look (a TAP, a switch port); a link that cannot change
    /// costs the engine no wake-up.
    fn link_watched(&self) -> bool {
        false
    }
    /// The function on this link is now `mac` with `addrs` (and the link-local address
    /// from `mac`): what it may send as. A port of the embedded switch refuses a MAC or
    /// address another function of the adapter has (or is configured with); any other
    /// link takes anything.
    fn claim_identity(&mut self, _mac: [u8; 6], _addrs: &[Ipv6Addr]) -> Result<(), IdentityTaken> {
        Ok(())
    }
}

/// A claimed MAC or address is another function's ([`Backend::claim_identity`]); says
/// whose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityTaken(pub String);

impl fmt::Display for IdentityTaken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<B: Backend + ?Sized> Backend for Box<B> {
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        (**self).send(frame)
    }
    fn gso(&self) -> bool {
        (**self).gso()
    }
    fn send_gso(&mut self, frame: &[u8], mss: u16) -> io::Result<()> {
        (**self).send_gso(frame, mss)
    }
    fn send_owned(&mut self, frame: Vec<u8>, gso: u16) -> io::Result<()> {
        (**self).send_owned(frame, gso)
    }
    fn recv_owned(&mut self, buf: &mut Vec<u8>) -> io::Result<Option<usize>> {
        (**self).recv_owned(buf)
    }
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        (**self).recv(buf)
    }
    fn rx_dropped(&self) -> u64 {
        (**self).rx_dropped()
    }
    fn fd(&self) -> RawFd {
        (**self).fd()
    }
    fn poll(&mut self, now: Instant) -> io::Result<()> {
        (**self).poll(now)
    }
    fn next_deadline(&self) -> Option<Instant> {
        (**self).next_deadline()
    }
    fn describe(&self) -> String {
        (**self).describe()
    }
    fn link_up(&mut self) -> bool {
        (**self).link_up()
    }
    fn link_watched(&self) -> bool {
        (**self).link_watched()
    }
    fn claim_identity(&mut self, mac: [u8; 6], addrs: &[Ipv6Addr]) -> Result<(), IdentityTaken> {
        (**self).claim_identity(mac, addrs)
    }
}

/// Cuts a TCP super-frame into segments of `mss` payload bytes and sends each with
/// [`Backend::send`] (what a link without offloads does with [`Backend::send_gso`]).
pub fn send_segments<B: Backend + ?Sized>(b: &mut B, frame: &[u8], mss: u16) -> io::Result<()> {
    let mut r = Ok(());
    crate::net::gso::split_frame(frame, mss as usize, |f| {
        if r.is_ok() {
            r = b.send(&f);
        }
    })
    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("GSO frame: {e:?}")))?;
    r
}

/// `--net tap:IFNAME | cable:PATH`, or a port of the embedded switch (made by the switch,
/// never opened by name: [`switch`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetSpec {
    Tap(String),
    Cable(PathBuf),
    Switch(String),
}

impl FromStr for NetSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<NetSpec, String> {
        if let Some(name) = s.strip_prefix("tap:") {
            tap::check_name(name)?;
            return Ok(NetSpec::Tap(name.to_string()));
        }
        if let Some(path) = s.strip_prefix("cable:") {
            if path.is_empty() {
                return Err("cable: needs a path (cable:PATH)".into());
            }
            return Ok(NetSpec::Cable(PathBuf::from(path)));
        }
        Err(format!(
            "network '{s}' is neither tap:IFNAME nor cable:PATH"
        ))
    }
}

impl fmt::Display for NetSpec {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            NetSpec::Tap(n) => write!(f, "tap:{n}"),
            NetSpec::Cable(p) => write!(f, "cable:{}", p.display()),
            NetSpec::Switch(port) => write!(f, "switch port {port}"),
        }
    }
}

/// Opens the backend `spec` names.
pub fn open(spec: &NetSpec) -> io::Result<Box<dyn Backend>> {
    Ok(match spec {
        NetSpec::Tap(name) => Box::new(tap::Tap::open(name)?),
        NetSpec::Cable(path) => Box::new(cable::Cable::open(path)?),
        NetSpec::Switch(port) => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("switch port {port}: made by the adapter's switch, not opened by name"),
            ))
        }
    })
}

/// Opens `spec`, with a capture and/or impairment around it when asked for. Errors carry
/// a one-line explanation naming what failed.
pub fn open_link(
    spec: &NetSpec,
    pcap: Option<&Path>,
    impair: Option<&ImpairSpec>,
) -> io::Result<Box<dyn Backend>> {
    let inner = open(spec).map_err(|e| io::Error::new(e.kind(), format!("--net {spec}: {e}")))?;
    if pcap.is_none() && impair.is_none() {
        return Ok(inner);
    }
    Ok(Box::new(link::Link::new(inner, pcap, impair)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn net_specs() {
        assert_eq!("tap:qpip0".parse(), Ok(NetSpec::Tap("qpip0".into())));
        assert_eq!("cable:/tmp/c".parse(), Ok(NetSpec::Cable("/tmp/c".into())));
        assert!("tap:".parse::<NetSpec>().is_err());
        assert!("tap:0123456789abcdef".parse::<NetSpec>().is_err());
        assert!("tap:a/b".parse::<NetSpec>().is_err());
        assert!("cable:".parse::<NetSpec>().is_err());
        assert_eq!(
            "eth0".parse::<NetSpec>().unwrap_err(),
            "network 'eth0' is neither tap:IFNAME nor cable:PATH"
        );
        assert_eq!(NetSpec::Tap("t".into()).to_string(), "tap:t");
    }
}
