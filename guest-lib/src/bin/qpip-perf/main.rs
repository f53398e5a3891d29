//! `qpip-perf`: latency and bandwidth over qpip queue pairs, and over kernel sockets on the
//! same path for the baseline.
//!
//! ```text
//! qpip-perf -s [--port P] [--bind ADDR] [--sockets] [--stream] [--provider soft|device] [--spin]
//! qpip-perf ADDR [--port P] [--udp|--tcp] [--test latency|bandwidth|all] [--iters N]
//!           [--duration SECS] [--sizes 64,1024,...] [--bytes N] [--sockets] [--stream]
//!           [--provider soft|device] [--spin] [--json]
//! ```
//!
//! The server answers UDP and TCP on one port (default 5201), one test at a time:
//! with qpip QPs, or with `--sockets` with plain kernel sockets. The client runs, per
//! transport: **latency** — a 1-byte message echoed by the server, `--iters` round trips
//! (after a tenth as many unmeasured), percentiles of the round-trip time; **bandwidth**
//! — messages of each `--sizes` size sent back to back, `--bytes` per size, the rate at
//! which the server received them (UDP: what arrived; the loss is reported). Each test
//! stops early after `--duration` seconds. CPU is the process CPU time (user + system,
//! `getrusage`, so the software provider's engine thread counts) over a test, per
//! message (latency: per round trip), on the client and as the server reports it.
//!
//! TCP QPs use message framing (QP ⇄ QP) unless `--stream`; both ends must agree.
//! A table by default, `--json` for one JSON object.

mod link;
mod proto;
mod report;

use std::net::{Ipv6Addr, SocketAddr, SocketAddrV6, TcpListener, TcpStream, UdpSocket};
use std::process::ExitCode;
use std::time::Duration;

use qpip::{Context, EventKind, Framing, QpInit, QpKind};

use link::{Cqs, Link, QpLink, SockLink, SLOTS};

const USAGE: &str = "usage: qpip-perf -s [--port P] [--bind ADDR] [--sockets] [--stream] [--provider soft|device] [--spin]
       qpip-perf ADDR [--port P] [--udp|--tcp] [--test latency|bandwidth|all] [--iters N] [--duration SECS]
                 [--sizes N,N,...] [--bytes N] [--sockets] [--stream] [--provider soft|device] [--spin] [--json]";

/// Largest TCP message (and buffer) a test uses.
pub const MAX_TCP: usize = 256 << 10;
/// Largest UDP datagram a test sends; receive buffers take any datagram.
pub const MAX_UDP: usize = 65507;
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
    pub udp: bool,
    pub tcp: bool,
    pub latency: bool,
    pub bandwidth: bool,
    pub iters: u64,
    pub duration: Duration,
    pub sizes: Option<Vec<usize>>,
    pub bytes: u64,
    pub json: bool,
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
        udp: true,
        tcp: true,
        latency: true,
        bandwidth: true,
        iters: 10_000,
        duration: Duration::from_secs(10),
        sizes: None,
        bytes: 16 << 20,
        json: false,
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
        if a.server {
            proto::serve(&a)
        } else {
            let results = proto::client(&a)?;
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
    Qp {
        ctx: Context,
        framing: Framing,
        spin: bool,
    },
    Sockets,
}

impl Net {
    pub fn open(a: &Args) -> Result<Net, Fail> {
        if a.sockets {
            return Ok(Net::Sockets);
        }
        let ctx = Context::open().map_err(|e| Fail(1, e.to_string()))?;
        Ok(Net::Qp {
            ctx,
            framing: a.framing,
            spin: a.spin,
        })
    }

    pub fn describe(&self) -> String {
        match self {
            Net::Sockets => "kernel sockets".into(),
            Net::Qp { ctx, framing, .. } => format!(
                "qpip QPs ({} provider{}, TCP {} framing)",
                match ctx.provider() {
                    qpip::ProviderKind::Device => "device",
                    qpip::ProviderKind::Soft => "software",
                },
                ctx.device_path()
                    .map(|p| format!(" {}", p.display()))
                    .unwrap_or_default(),
                match framing {
                    Framing::Message => "message",
                    Framing::Stream => "stream",
                }
            ),
        }
    }

    /// A UDP endpoint bound to `local`.
    pub fn udp(&self, local: SocketAddrV6) -> Result<Box<dyn Link + Send>, Fail> {
        match self {
            Net::Sockets => {
                let s = UdpSocket::bind(local)
                    .map_err(|e| Fail(1, format!("bind UDP {local}: {e}")))?;
                Ok(Box::new(SockLink::udp(s)))
            }
            Net::Qp { ctx, spin, .. } => {
                let (cqs, qp) = new_qp(ctx, QpKind::Udp)?;
                qp.bind(local)
                    .map_err(|e| Fail(1, format!("bind UDP {local}: {e}")))?;
                let size = MAX_UDP.min(ctx.limits().max_udp_payload as usize);
                let l =
                    QpLink::new(ctx, cqs, qp, size, *spin).map_err(|e| Fail(1, e.to_string()))?;
                Ok(Box::new(l))
            }
        }
    }

    /// A TCP connection to `peer`.
    pub fn connect(&self, peer: SocketAddrV6) -> Result<Box<dyn Link + Send>, Fail> {
        let fail = |e: String| Fail(1, format!("connect to {peer}: {e}"));
        match self {
            Net::Sockets => {
                let s = TcpStream::connect_timeout(&SocketAddr::V6(peer), T)
                    .map_err(|e| fail(e.to_string()))?;
                Ok(Box::new(SockLink::tcp(s).map_err(|e| fail(e.to_string()))?))
            }
            Net::Qp { ctx, framing, spin } => {
                let (cqs, qp) = new_qp(ctx, QpKind::Tcp(*framing))?;
                qp.connect_wait(peer, T).map_err(|e| fail(e.to_string()))?;
                Ok(Box::new(
                    QpLink::new(ctx, cqs, qp, MAX_TCP, *spin).map_err(|e| fail(e.to_string()))?,
                ))
            }
        }
    }
}

/// A QP of `kind` with a CQ for its sends and one for its receives: a receiver waits only
/// for what it reads (a send's completion never wakes it; sends are reaped by polling, and
/// waited for only when every send buffer is in flight), as with a socket.
fn new_qp(ctx: &Context, kind: QpKind) -> Result<(Cqs, qpip::Qp), Fail> {
    let cq = || {
        ctx.create_cq(2 * SLOTS as u32)
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
                .depth(SLOTS as u32, SLOTS as u32),
        )
        .map_err(|e| Fail(1, format!("create QP: {e}")))?;
    Ok((cqs, qp))
}

/// A TCP listener of either kind, handing out one connection after another.
pub enum Acceptor {
    Qp {
        ctx: Context,
        listener: qpip::Listener,
        framing: Framing,
        spin: bool,
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
            Net::Qp { ctx, framing, spin } => Ok(Acceptor::Qp {
                ctx: ctx.clone(),
                listener: ctx.listen(local, 8).map_err(|e| fail(e.to_string()))?,
                framing: *framing,
                spin: *spin,
            }),
        }
    }

    /// The next connection and its peer.
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
                    Box::new(SockLink::tcp(s).map_err(|e| fail(e.to_string()))?),
                    from,
                ))
            }
            Acceptor::Qp {
                ctx,
                listener,
                framing,
                spin,
            } => {
                let (cqs, qp) = new_qp(ctx, QpKind::Tcp(*framing))?;
                listener.accept(&qp, 0).map_err(|e| fail(e.to_string()))?;
                let ev = ctx
                    .wait_event_for(qp.id(), EventKind::Accept, None)
                    .map_err(|e| fail(e.to_string()))?
                    .ok_or_else(|| fail("no accept event".into()))?;
                if let Some(e) = ev.error() {
                    return Err(fail(e.to_string()));
                }
                let link =
                    QpLink::new(ctx, cqs, qp, MAX_TCP, *spin).map_err(|e| fail(e.to_string()))?;
                link.drain_events().map_err(|e| fail(e.to_string()))?;
                let any = SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 0, 0, 0);
                Ok((Box::new(link), ev.peer.unwrap_or(any)))
            }
        }
    }
}
