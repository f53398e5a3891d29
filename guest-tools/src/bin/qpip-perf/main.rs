//! `qpip-perf`: latency and bandwidth over qpip queue pairs, and over kernel sockets on the
//! same path for the baseline.
//!
//! ```text
//! qpip-perf -s [--port P] [--bind ADDR] [--sockets] [--stream] [--provider soft|device] [--spin]
//!              [--depth N] [--copy]
//! qpip-perf ADDR [--port P] [--udp|--tcp] [--test latency|bandwidth|all] [--iters N]
//!           [--duration SECS] [--sizes 64,1024,...] [--bytes N] [--sockets] [--stream]
//!           [--provider soft|device] [--spin] [--depth N] [--copy] [--json]
//! ```
//!
//! The server answers UDP and TCP on one port (default 5201), one test at a time:
//! with qpip QPs, or with `--sockets` with plain kernel sockets. The client runs, per
//! transport: **latency** — a 1-byte message echoed by the server, `--iters` round trips
//! (after a tenth as many unmeasured), percentiles of the round-trip time; **bandwidth**
//! — messages of each `--sizes` size sent back to back, `--bytes` per size, the rate at
//! which the server received them (UDP: what arrived; the loss is reported; a QP server
//! takes a UDP stream busy-polling its CQ, a socket server blocking in `recv`, see
//! `Link::set_spin`). Each test
//! stops early after `--duration` seconds. CPU is the process CPU time (user + system,
//! `getrusage`, so the software provider's engine thread counts) over a test, per
//! message (latency: per round trip), on the client and as the server reports it.
//!
//! QPs are used as QPs are meant to be: each keeps `--depth` sends and as many receives in
//! flight (default [`DEFAULT_DEPTH`]), sends straight from registered buffers that hold the
//! test data and takes received bytes where the device placed them (zero-copy; `--copy`
//! copies every message into and out of the registered buffers instead, as a socket's
//! caller does — see `link.rs`). Each side also reports counters per message: the
//! library's kicks and blocking waits, and the device's interrupts, engine sleeps and TCP
//! segments (`counters.rs`); over sockets, the interrupts of the NIC the test's traffic
//! goes through and the guest's TCP segments or UDP datagrams sent (`sockets.rs`).
//!
//! TCP QPs use message framing (QP ⇄ QP) unless `--stream`; both ends must agree.
//! A table by default, `--json` for one JSON object.
//!
//! `--rdma write|read` (both ends; the server's verb is the client's to choose) measures
//! RDMA Writes or Reads on iWARP QPs instead, as perftest's `ib_write_lat`/`ib_write_bw`
//! do, so that the figures compare with theirs on soft-iWARP: see `rdma.rs`. With
//! `--tripwire` the Write ping-pong sleeps on tripwires instead of spinning.

mod counters;
mod link;
mod proto;
mod rdma;
mod report;
mod sockets;

use std::net::{Ipv6Addr, SocketAddr, SocketAddrV6, TcpListener, TcpStream, UdpSocket};
use std::process::ExitCode;
use std::time::Duration;

use qpip::{Context, EventKind, Framing, QpInit, QpKind};

use link::{ring, Bufs, Cqs, Link, QpLink, SockLink};

const USAGE: &str = "usage: qpip-perf -s [--port P] [--bind ADDR] [--sockets] [--stream] [--provider soft|device] [--spin]
                    [--depth N] [--copy]
       qpip-perf ADDR [--port P] [--udp|--tcp] [--test latency|bandwidth|all] [--iters N] [--duration SECS]
                 [--sizes N,N,...] [--bytes N] [--sockets] [--stream] [--provider soft|device] [--spin]
                 [--depth N] [--copy] [--json]
       qpip-perf -s --rdma write|read [--port P] [--bind ADDR] [--depth N]
       qpip-perf ADDR --rdma write|read [--port P] [--test latency|bandwidth|all] [--iters N]
                 [--sizes N,N,...] [--bytes N] [--depth N] [--tripwire] [--json]";

/// Largest TCP message (and buffer) a test uses.
pub const MAX_TCP: usize = 256 << 10;
/// Largest UDP datagram a test sends; receive buffers take any datagram.
pub const MAX_UDP: usize = 65507;
/// Receive buffers a server's UDP QP keeps posted at least (each takes the largest
/// datagram, so 16 MiB registered). Measured with two TCG guests, 16 MB of 1 KiB datagrams
/// sent back to back: 64 posted lost 60% and 35%, 256 lost 2% and 12% (sockets with the
/// kernel's default buffer: 56% and 54%).
pub const UDP_SERVER_DEPTH: usize = 256;
/// Sends and receives each QP keeps in flight unless `--depth` says otherwise.
pub const DEFAULT_DEPTH: usize = 64;
/// The deepest `--depth` (a server's TCP receive buffers take `depth` × [`MAX_TCP`]).
pub const MAX_DEPTH: usize = 256;
/// Bytes of a receive buffer that takes only control lines.
const CONTROL: usize = 256;

/// How long one wait may take before the test is called failed (TCG guests are slow).
pub const T: Duration = Duration::from_secs(60);

#[derive(Clone, Debug)]
pub struct Args {
    pub server: bool,
    pub addr: Option<String>,
    pub bind: Option<String>,
    pub port: u16,
    pub sockets: bool,
    pub framing: Framing,
    pub provider: Option<String>,
    pub spin: bool,
    /// Sends and receives in flight per QP.
    pub depth: usize,
    /// Copy data into and out of the registered buffers.
    pub copy: bool,
    pub udp: bool,
    pub tcp: bool,
    pub latency: bool,
    pub bandwidth: bool,
    pub iters: u64,
    pub duration: Duration,
    pub sizes: Option<Vec<usize>>,
    pub bytes: u64,
    pub json: bool,
    /// RDMA Writes or Reads on iWARP QPs instead of the UDP and TCP tests.
    pub rdma: Option<rdma::Verb>,
    /// `--rdma write` latency: both ends sleep on tripwires instead of spinning.
    pub tripwire: bool,
}

pub struct Fail(pub u8, pub String);

fn usage(msg: impl std::fmt::Display) -> Fail {
    Fail(2, format!("{msg}\n{USAGE}"))
}

fn num<T: std::str::FromStr>(flag: &str, v: Option<String>) -> Result<T, Fail> {
    let v = v.ok_or_else(|| usage(format!("{flag} needs a value")))?;
    v.parse()
        .map_err(|_| usage(format!("{flag} {v}: not a valid number")))
}

fn parse_args(mut it: impl Iterator<Item = String>) -> Result<Args, Fail> {
    let mut a = Args {
        server: false,
        addr: None,
        bind: None,
        port: 5201,
        sockets: false,
        framing: Framing::Message,
        provider: None,
        spin: false,
        depth: DEFAULT_DEPTH,
        copy: false,
        udp: true,
        tcp: true,
        latency: true,
        bandwidth: true,
        iters: 10_000,
        duration: Duration::from_secs(10),
        sizes: None,
        bytes: 16 << 20,
        json: false,
        rdma: None,
        tripwire: false,
    };
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "-s" | "--server" => a.server = true,
            "-p" | "--port" => {
                a.port = num("--port", it.next())?;
                if a.port == 0 {
                    return Err(usage("--port 0: not a port"));
                }
            }
            "--bind" => a.bind = Some(it.next().ok_or_else(|| usage("--bind needs an address"))?),
            "--sockets" => a.sockets = true,
            "--stream" => a.framing = Framing::Stream,
            "--message" => a.framing = Framing::Message,
            "--provider" => {
                let p = it.next().unwrap_or_default();
                if p != "soft" && p != "device" {
                    return Err(usage(format!("--provider {p:?}: expected soft or device")));
                }
                a.provider = Some(p);
            }
            "--spin" => a.spin = true,
            "--tripwire" => a.tripwire = true,
            "--depth" => {
                a.depth = num("--depth", it.next())?;
                if !(1..=MAX_DEPTH).contains(&a.depth) {
                    return Err(usage(format!("--depth {}: from 1 to {MAX_DEPTH}", a.depth)));
                }
            }
            "--copy" => a.copy = true,
            "-u" | "--udp" => (a.udp, a.tcp) = (true, false),
            "-t" | "--tcp" => (a.udp, a.tcp) = (false, true),
            "--test" => match it.next().as_deref() {
                Some("latency") => (a.latency, a.bandwidth) = (true, false),
                Some("bandwidth") => (a.latency, a.bandwidth) = (false, true),
                Some("all") => (a.latency, a.bandwidth) = (true, true),
                other => {
                    return Err(usage(format!(
                        "--test {other:?}: expected latency, bandwidth or all"
                    )))
                }
            },
            "-n" | "--iters" => a.iters = num("--iters", it.next())?,
            "-d" | "--duration" => {
                let secs: f64 = num("--duration", it.next())?;
                if !(secs.is_finite() && secs > 0.0) {
                    return Err(usage("--duration: a positive number of seconds"));
                }
                a.duration = Duration::from_secs_f64(secs);
            }
            "--sizes" => {
                let v = it.next().ok_or_else(|| usage("--sizes needs a list"))?;
                let sizes = v
                    .split(',')
                    .map(|s| {
                        s.trim()
                            .parse::<usize>()
                            .ok()
                            .filter(|n| (1..=MAX_TCP).contains(n))
                    })
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| {
                        usage(format!(
                            "--sizes {v}: sizes from 1 to {MAX_TCP}, comma-separated"
                        ))
                    })?;
                a.sizes = Some(sizes);
            }
            "--bytes" => a.bytes = num("--bytes", it.next())?,
            "--json" => a.json = true,
            "--rdma" => {
                a.rdma = Some(match it.next().as_deref() {
                    Some("write") => rdma::Verb::Write,
                    Some("read") => rdma::Verb::Read,
                    other => {
                        return Err(usage(format!("--rdma {other:?}: expected write or read")))
                    }
                })
            }
            "-h" | "--help" => return Err(Fail(0, USAGE.into())),
            s if s.starts_with('-') => return Err(usage(format!("unknown option {s}"))),
            _ if a.addr.is_none() => a.addr = Some(arg),
            _ => return Err(usage(format!("unexpected argument {arg}"))),
        }
    }
    if a.iters == 0 {
        return Err(usage("--iters 0: at least one round trip"));
    }
    if !a.server && a.addr.is_none() {
        return Err(usage("expected the server's address (or -s)"));
    }
    Ok(a)
}

/// `addr` as an IPv6 socket address (names resolved; IPv4 becomes IPv4-mapped).
pub fn resolve(addr: &str, port: u16) -> Result<SocketAddrV6, Fail> {
    qpip::resolve_addr(addr, port).map_err(|e| Fail(1, format!("{addr}: {e}")))
}

fn main() -> ExitCode {
    let r = parse_args(std::env::args().skip(1)).and_then(|a| {
        if let Some(p) = &a.provider {
            // Read by Context::open; no other thread exists yet.
            std::env::set_var(qpip::PROVIDER_ENV, p);
        }
        if a.server && a.rdma.is_some() {
            rdma::serve(&a)
        } else if a.server {
            proto::serve(&a)
        } else {
            let results = match a.rdma {
                Some(verb) => rdma::client(&a, verb)?,
                None => proto::client(&a)?,
            };
            report::print(&a, &results);
            Ok(())
        }
    });
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(Fail(0, msg)) => {
            println!("{msg}");
            ExitCode::SUCCESS
        }
        Err(Fail(code, msg)) => {
            eprintln!("qpip-perf: {msg}");
            ExitCode::from(code)
        }
    }
}

/// How the two ends are made: a qpip context, or kernel sockets.
pub enum Net {
    Qp(QpNet),
    Sockets,
}

/// The QP side: the context, and how each QP of a test is made and used.
#[derive(Clone)]
pub struct QpNet {
    ctx: Context,
    framing: Framing,
    spin: bool,
    depth: usize,
    copy: bool,
}

impl QpNet {
    /// The link over `qp` (with its CQs), `depth` buffers each way of `send_size` and
    /// `recv_size` bytes, the send buffers registered at once or (`lazy_send`) when needed.
    fn link(
        &self,
        (cqs, qp): (Cqs, qpip::Qp),
        depth: usize,
        (send_size, recv_size): (usize, usize),
        lazy_send: bool,
    ) -> std::io::Result<QpLink> {
        let bufs = Bufs {
            depth,
            send_size,
            recv_size,
            lazy_send,
            copy: self.copy,
        };
        QpLink::new(&self.ctx, cqs, qp, bufs, self.spin)
    }
}

impl Net {
    pub fn open(a: &Args) -> Result<Net, Fail> {
        if a.sockets {
            return Ok(Net::Sockets);
        }
        let ctx = Context::open().map_err(|e| Fail(1, e.to_string()))?;
        Ok(Net::Qp(QpNet {
            ctx,
            framing: a.framing,
            spin: a.spin,
            depth: a.depth,
            copy: a.copy,
        }))
    }

    pub fn describe(&self) -> String {
        match self {
            Net::Sockets => "kernel sockets".into(),
            Net::Qp(q) => format!(
                "qpip QPs ({} provider{}, TCP {} framing, depth {}, {})",
                match q.ctx.provider() {
                    qpip::ProviderKind::Device => "device",
                    qpip::ProviderKind::Soft => "software",
                },
                q.ctx
                    .device_path()
                    .map(|p| format!(" {}", p.display()))
                    .unwrap_or_default(),
                match q.framing {
                    Framing::Message => "message",
                    Framing::Stream => "stream",
                    Framing::Iwarp => "iWARP",
                },
                q.depth,
                if q.copy { "copying" } else { "zero-copy" }
            ),
        }
    }

    /// The largest UDP payload on this net.
    pub fn max_udp(&self) -> usize {
        match self {
            Net::Qp(q) => MAX_UDP.min(q.ctx.limits().max_udp_payload as usize),
            Net::Sockets => MAX_UDP,
        }
    }

    /// A UDP endpoint bound to `local` that sends datagrams of up to `send` bytes (QPs: a
    /// server registers its send buffers only when an echo needs them).
    pub fn udp(
        &self,
        local: SocketAddrV6,
        send: usize,
        server: bool,
    ) -> Result<Box<dyn Link + Send>, Fail> {
        let max = self.max_udp();
        match self {
            Net::Sockets => {
                let s = UdpSocket::bind(local)
                    .map_err(|e| Fail(1, format!("bind UDP {local}: {e}")))?;
                Ok(Box::new(SockLink::udp(s, max)))
            }
            Net::Qp(q) => {
                // A UDP receiver's posted buffers are all it has against a burst (the
                // device drops a datagram that finds none): a server keeps at least
                // UDP_SERVER_DEPTH, whatever --depth the test's sends use.
                let depth = if server {
                    q.depth.max(UDP_SERVER_DEPTH)
                } else {
                    q.depth
                };
                let (cqs, qp) = new_qp(&q.ctx, QpKind::Udp, depth)?;
                qp.bind(local)
                    .map_err(|e| Fail(1, format!("bind UDP {local}: {e}")))?;
                let l = q
                    .link((cqs, qp), depth, (send.clamp(1, max), max), server)
                    .map_err(|e| Fail(1, e.to_string()))?;
                Ok(Box::new(l))
            }
        }
    }

    /// A TCP connection to `peer` for a test with messages of `size` bytes.
    pub fn connect(
        &self,
        peer: SocketAddrV6,
        size: usize,
        lat: bool,
    ) -> Result<Box<dyn Link + Send>, Fail> {
        let fail = |e: String| Fail(1, format!("connect to {peer}: {e}"));
        match self {
            Net::Sockets => {
                let s = TcpStream::connect_timeout(&SocketAddr::V6(peer), T)
                    .map_err(|e| fail(e.to_string()))?;
                Ok(Box::new(
                    SockLink::tcp(s, size.max(CONTROL)).map_err(|e| fail(e.to_string()))?,
                ))
            }
            Net::Qp(q) => {
                let (cqs, qp) = new_qp(&q.ctx, QpKind::Tcp(q.framing), q.depth)?;
                qp.connect_wait(peer, T).map_err(|e| fail(e.to_string()))?;
                // Receives: the server's control lines, and in a latency test its echoes.
                let recv_size = if lat { size.max(CONTROL) } else { CONTROL };
                Ok(Box::new(
                    q.link((cqs, qp), q.depth, (size, recv_size), false)
                        .map_err(|e| fail(e.to_string()))?,
                ))
            }
        }
    }
}

/// A QP of `kind` with `depth` sends and receives, and a CQ for its sends and one for its
/// receives: a receiver waits only for what it reads (a send's completion never wakes it;
/// sends are reaped by polling, and waited for only when every send buffer is in flight),
/// as with a socket.
fn new_qp(ctx: &Context, kind: QpKind, depth: usize) -> Result<(Cqs, qpip::Qp), Fail> {
    let cq = || {
        ctx.create_cq(ring(depth))
            .map_err(|e| Fail(1, format!("create CQ: {e}")))
    };
    let cqs = Cqs {
        send: cq()?,
        recv: cq()?,
    };
    let qp = ctx
        .create_qp(
            &QpInit::new(kind, &cqs.send)
                .recv_cq(&cqs.recv)
                .depth(ring(depth), ring(depth)),
        )
        .map_err(|e| Fail(1, format!("create QP: {e}")))?;
    Ok((cqs, qp))
}

/// A TCP listener of either kind, handing out one connection after another.
pub enum Acceptor {
    Qp {
        net: QpNet,
        listener: qpip::Listener,
    },
    Sockets(TcpListener),
}

impl Acceptor {
    pub fn new(net: &Net, local: SocketAddrV6) -> Result<Acceptor, Fail> {
        let fail = |e: String| Fail(1, format!("listen on TCP {local}: {e}"));
        match net {
            Net::Sockets => Ok(Acceptor::Sockets(
                TcpListener::bind(local).map_err(|e| fail(e.to_string()))?,
            )),
            Net::Qp(q) => Ok(Acceptor::Qp {
                net: q.clone(),
                listener: q.ctx.listen(local, 8).map_err(|e| fail(e.to_string()))?,
            }),
        }
    }

    /// The next connection and its peer. Its receive buffers take the largest message a
    /// client may send ([`MAX_TCP`]); its send buffers (for echoes longer than an inline
    /// send) are registered when first needed.
    pub fn accept(&self) -> Result<(Box<dyn Link + Send>, SocketAddrV6), Fail> {
        let fail = |e: String| Fail(1, format!("accept: {e}"));
        match self {
            Acceptor::Sockets(l) => {
                let (s, from) = l.accept().map_err(|e| fail(e.to_string()))?;
                let from = match from {
                    SocketAddr::V6(a) => a,
                    SocketAddr::V4(a) => SocketAddrV6::new(a.ip().to_ipv6_mapped(), a.port(), 0, 0),
                };
                Ok((
                    Box::new(SockLink::tcp(s, MAX_TCP).map_err(|e| fail(e.to_string()))?),
                    from,
                ))
            }
            Acceptor::Qp { net: q, listener } => {
                let (cqs, qp) = new_qp(&q.ctx, QpKind::Tcp(q.framing), q.depth)?;
                listener.accept(&qp, 0).map_err(|e| fail(e.to_string()))?;
                let ev = q
                    .ctx
                    .wait_event_for(qp.id(), EventKind::Accept, None)
                    .map_err(|e| fail(e.to_string()))?
                    .ok_or_else(|| fail("no accept event".into()))?;
                if let Some(e) = ev.error() {
                    return Err(fail(e.to_string()));
                }
                let link = q
                    .link((cqs, qp), q.depth, (MAX_TCP, MAX_TCP), true)
                    .map_err(|e| fail(e.to_string()))?;
                link.drain_events().map_err(|e| fail(e.to_string()))?;
                let any = SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 0, 0, 0);
                Ok((Box::new(link), ev.peer.unwrap_or(any)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Args, Fail> {
        parse_args(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn depth_and_copy() {
        let a = parse(&["::1"]).ok().unwrap();
        assert_eq!((a.depth, a.copy), (DEFAULT_DEPTH, false));
        let a = parse(&["-s", "--depth", "3", "--copy"]).ok().unwrap();
        assert_eq!((a.depth, a.copy), (3, true));
        for bad in ["0", "257", "x"] {
            let Err(Fail(code, msg)) = parse(&["::1", "--depth", bad]) else {
                panic!("--depth {bad} accepted");
            };
            assert_eq!(code, 2);
            assert!(msg.contains("--depth"), "{msg}");
        }
        assert!(parse(&["::1", "--depth"]).is_err());
        // Rings are powers of two, at least 2, for any depth.
        assert_eq!([1, 2, 3, 64, 100].map(ring), [2, 2, 4, 64, 128]);
    }
}
