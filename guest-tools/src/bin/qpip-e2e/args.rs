//! The command line.

use std::net::Ipv6Addr;
use std::time::Duration;

use qpip::Framing;

use crate::Fail;

const USAGE: &str =
    "usage: qpip-e2e (sink|send|echo|ping|rdma-serve|rdma) [--provider soft|device] [--stream|--message] [-u] \
[ADDR] --port P [--conns N] [--clean K] [--max-msg B] [--sizes B,...] [--bytes N] [--chunk B] \
[--mark BYTES:FILE] [--count N] [--iters N] [--size B] [--violate bad-rkey|bounds|read-only|dereg] [-w SECS]";

pub fn usage(msg: impl std::fmt::Display) -> Fail {
    Fail(2, format!("{msg}\n{USAGE}"))
}

#[derive(Clone)]
pub struct Args {
    pub mode: String,
    pub provider: Option<String>,
    pub framing: Framing,
    pub udp: bool,
    pub addr: Option<Ipv6Addr>,
    pub port: u16,
    pub conns: usize,
    pub clean: Option<usize>,
    pub max_msg: usize,
    pub sizes: Vec<usize>,
    pub bytes: Option<u64>,
    pub chunk: usize,
    pub mark: Option<(u64, String)>,
    pub count: u64,
    pub iters: u64,
    pub size: usize,
    pub wait: Duration,
    /// `rdma`: a forbidden access to try instead of the transfer.
    pub violate: Option<String>,
}

pub fn parse_args(mut it: impl Iterator<Item = String>) -> Result<Args, Fail> {
    let mode = it.next().ok_or_else(|| usage("no mode"))?;
    if !["sink", "send", "echo", "ping", "rdma-serve", "rdma"].contains(&mode.as_str()) {
        return Err(usage(format!("unknown mode {mode}")));
    }
    let mut a = Args {
        mode,
        provider: None,
        framing: Framing::Message,
        udp: false,
        addr: None,
        port: 0,
        conns: 1,
        clean: None,
        max_msg: 64 * 1024,
        sizes: Vec::new(),
        bytes: None,
        chunk: 64 * 1024,
        mark: None,
        count: 0,
        iters: 100,
        size: 64,
        wait: Duration::from_secs(300),
        violate: None,
    };
    fn num<T: std::str::FromStr>(flag: &str, v: Option<String>) -> Result<T, Fail> {
        let v = v.ok_or_else(|| usage(format!("{flag} needs a value")))?;
        v.parse()
            .map_err(|_| usage(format!("{flag} {v}: not a number")))
    }
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--provider" => {
                a.provider = Some(it.next().ok_or_else(|| usage("--provider needs a value"))?)
            }
            "--stream" => a.framing = Framing::Stream,
            "--message" => a.framing = Framing::Message,
            "-u" => a.udp = true,
            "--port" => a.port = num("--port", it.next())?,
            "--conns" => a.conns = num("--conns", it.next())?,
            "--clean" => a.clean = Some(num("--clean", it.next())?),
            "--max-msg" => a.max_msg = num("--max-msg", it.next())?,
            "--bytes" => a.bytes = Some(num("--bytes", it.next())?),
            "--chunk" => a.chunk = num("--chunk", it.next())?,
            "--count" => a.count = num("--count", it.next())?,
            "--iters" => a.iters = num("--iters", it.next())?,
            "--size" => a.size = num("--size", it.next())?,
            "-w" => a.wait = Duration::from_secs(num("-w", it.next())?),
            "--violate" => {
                let v = it.next().ok_or_else(|| usage("--violate needs a kind"))?;
                if !["bad-rkey", "bounds", "read-only", "dereg"].contains(&v.as_str()) {
                    return Err(usage(format!(
                        "--violate {v}: bad-rkey, bounds, read-only or dereg"
                    )));
                }
                a.violate = Some(v);
            }
            "--sizes" => {
                let v = it.next().ok_or_else(|| usage("--sizes needs a list"))?;
                a.sizes = v
                    .split(',')
                    .map(|s| {
                        s.parse()
                            .map_err(|_| usage(format!("--sizes: {s} is not a number")))
                    })
                    .collect::<Result<_, _>>()?;
            }
            "--mark" => {
                let v = it.next().ok_or_else(|| usage("--mark needs BYTES:FILE"))?;
                let (b, f) = v
                    .split_once(':')
                    .ok_or_else(|| usage("--mark needs BYTES:FILE"))?;
                a.mark = Some((
                    b.parse().map_err(|_| usage("--mark: bad BYTES"))?,
                    f.to_string(),
                ));
            }
            s if s.starts_with('-') => return Err(usage(format!("unknown option {s}"))),
            s => {
                // An IPv4 address is its IPv4-mapped form, as the API takes it.
                a.addr = Some(
                    *qpip::resolve_addr(s, 0)
                        .map_err(|_| usage(format!("{s}: not an IPv6 or IPv4 address")))?
                        .ip(),
                );
            }
        }
    }
    if a.port == 0 {
        return Err(usage("--port is required"));
    }
    if a.conns == 0 || a.chunk == 0 || a.max_msg == 0 {
        return Err(usage("--conns, --chunk and --max-msg must be positive"));
    }
    if matches!(a.mode.as_str(), "send" | "ping" | "rdma") && a.addr.is_none() {
        return Err(usage("the peer's ADDR is missing"));
    }
    Ok(a)
}
