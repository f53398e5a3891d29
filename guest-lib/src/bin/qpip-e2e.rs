//! `qpip-e2e`: the traffic of the VM integration suite (`ci/tests/e2e.rs`) — senders and
//! receivers whose every byte is checked, on the device or the software provider.
//!
//! ```text
//! qpip-e2e sink [COMMON] --port P [--conns N] [--clean K] [--max-msg B] [-w SECS]
//!     accepts N TCP connections on one listener at once and receives on each until the
//!     peer closes; ends once every connection ended, or once K (default N) ended cleanly
//! qpip-e2e send [COMMON] ADDR --port P [--conns N] (--sizes B,B,... | --bytes N [--chunk B])
//!     [--mark BYTES:FILE]
//!     N TCP connections at once, each sends the messages (sizes, or N bytes in chunks),
//!     then closes gracefully; --mark creates FILE once BYTES were acknowledged on one
//! qpip-e2e echo [COMMON] --port P [-u] [--max-msg B] [--count N] [-w SECS]
//!     TCP: accepts one connection and sends every message back until the peer closes;
//!     UDP: sends every datagram back to its sender, N of them (or until SECS of quiet)
//! qpip-e2e ping [COMMON] ADDR --port P [-u] [--iters N] [--size B]
//!     N round trips of B-byte messages, each echo compared byte for byte with what went
//!     out; UDP: a datagram without an answer in 2 s is counted lost and sent again
//! COMMON: --provider soft|device, --stream | --message (TCP framing, default message)
//! ```
//!
//! Results are `@key=value` lines on stdout. The bytes of connection i come from a
//! generator seeded with i, so connections carry different data. Each side reports a
//! SHA-256 of what it sent or received: of the bytes with stream framing, of each
//! message's length (u32, little endian) and bytes with message framing — so equal digests
//! on both ends mean the same bytes with the same message boundaries. Exit status 0 when
//! everything ended cleanly (sink: as asked), 1 otherwise, 2 for bad usage.

use std::collections::VecDeque;
use std::fs;
use std::net::{Ipv6Addr, SocketAddrV6};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use qpip::{
    Completion, Context, Cq, EventKind, Framing, MemoryRegion, Opcode, Qp, QpInit, QpKind, SendWr,
    Status,
};

const USAGE: &str =
    "usage: qpip-e2e (sink|send|echo|ping) [--provider soft|device] [--stream|--message] [-u] \
[ADDR] --port P [--conns N] [--clean K] [--max-msg B] [--sizes B,...] [--bytes N] [--chunk B] \
[--mark BYTES:FILE] [--count N] [--iters N] [--size B] [-w SECS]";

/// Receives (and sends) in flight per QP.
const DEPTH: usize = 4;

struct Fail(u8, String);

fn usage(msg: impl std::fmt::Display) -> Fail {
    Fail(2, format!("{msg}\n{USAGE}"))
}

fn fail(what: &str, e: impl std::fmt::Display) -> Fail {
    Fail(1, format!("{what}: {e}"))
}

#[derive(Clone)]
struct Args {
    mode: String,
    provider: Option<String>,
    framing: Framing,
    udp: bool,
    addr: Option<Ipv6Addr>,
    port: u16,
    conns: usize,
    clean: Option<usize>,
    max_msg: usize,
    sizes: Vec<usize>,
    bytes: Option<u64>,
    chunk: usize,
    mark: Option<(u64, String)>,
    count: u64,
    iters: u64,
    size: usize,
    wait: Duration,
}

fn parse_args(mut it: impl Iterator<Item = String>) -> Result<Args, Fail> {
    let mode = it.next().ok_or_else(|| usage("no mode"))?;
    if !["sink", "send", "echo", "ping"].contains(&mode.as_str()) {
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
                let ip = s.trim_matches(|c| c == '[' || c == ']');
                a.addr = Some(
                    ip.parse()
                        .map_err(|_| usage(format!("{s}: not an IPv6 address")))?,
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
    if matches!(a.mode.as_str(), "send" | "ping") && a.addr.is_none() {
        return Err(usage("the peer's ADDR is missing"));
    }
    Ok(a)
}

fn main() -> ExitCode {
    let r = parse_args(std::env::args().skip(1)).and_then(|a| {
        if let Some(p) = &a.provider {
            // Read by Context::open; set before any other thread exists.
            std::env::set_var(qpip::PROVIDER_ENV, p);
        }
        let ctx = Context::open().map_err(|e| fail("open", e))?;
        println!("@provider={:?}", ctx.provider());
        match a.mode.as_str() {
            "sink" => sink(&ctx, &a),
            "send" => send(&ctx, &a),
            "echo" => echo(&ctx, &a),
            _ => ping(&ctx, &a),
        }
    });
    match r {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(Fail(code, msg)) => {
            println!("@error={}", msg.lines().next().unwrap_or(""));
            eprintln!("qpip-e2e: {msg}");
            ExitCode::from(code)
        }
    }
}

// ---- data: a generator per connection, and digests ----------------------------------------

/// xorshift64*: cheap, and different for every seed.
struct Gen(u64);

impl Gen {
    fn new(seed: u64) -> Gen {
        Gen(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            let v = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

/// SHA-256 (FIPS 180-4), streaming.
struct Sha256 {
    h: [u32; 8],
    buf: [u8; 64],
    len: usize,
    total: u64,
}

const K: [u32; 64] = [
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
];

impl Sha256 {
    fn new() -> Sha256 {
        Sha256 {
            h: [
                0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab,
                0x5be0cd19,
            ],
            buf: [0; 64],
            len: 0,
            total: 0,
        }
    }

    fn block(h: &mut [u32; 8], b: &[u8]) {
        let mut w = [0u32; 64];
        for i in 0..16 {
            w[i] = u32::from_be_bytes(b[4 * i..4 * i + 4].try_into().expect("4 bytes"));
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16]
                .wrapping_add(s0)
                .wrapping_add(w[i - 7])
                .wrapping_add(s1);
        }
        let mut v = *h;
        for i in 0..64 {
            let s1 = v[4].rotate_right(6) ^ v[4].rotate_right(11) ^ v[4].rotate_right(25);
            let ch = (v[4] & v[5]) ^ (!v[4] & v[6]);
            let t1 = v[7]
                .wrapping_add(s1)
                .wrapping_add(ch)
                .wrapping_add(K[i])
                .wrapping_add(w[i]);
            let s0 = v[0].rotate_right(2) ^ v[0].rotate_right(13) ^ v[0].rotate_right(22);
            let maj = (v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]);
            let t2 = s0.wrapping_add(maj);
            v = [
                t1.wrapping_add(t2),
                v[0],
                v[1],
                v[2],
                v[3].wrapping_add(t1),
                v[4],
                v[5],
                v[6],
            ];
        }
        for (x, y) in h.iter_mut().zip(v) {
            *x = x.wrapping_add(y);
        }
    }

    fn update(&mut self, mut data: &[u8]) {
        self.total += data.len() as u64;
        if self.len > 0 {
            let n = (64 - self.len).min(data.len());
            self.buf[self.len..self.len + n].copy_from_slice(&data[..n]);
            self.len += n;
            data = &data[n..];
            if self.len < 64 {
                return;
            }
            let b = self.buf;
            Self::block(&mut self.h, &b);
            self.len = 0;
        }
        let mut blocks = data.chunks_exact(64);
        for b in &mut blocks {
            Self::block(&mut self.h, b);
        }
        let rest = blocks.remainder();
        self.buf[..rest.len()].copy_from_slice(rest);
        self.len = rest.len();
    }

    fn hex(&self) -> String {
        let mut s = Sha256 { ..*self };
        let bits = s.total.wrapping_mul(8);
        s.update(&[0x80]);
        while s.len != 56 {
            s.update(&[0]);
        }
        s.update(&bits.to_be_bytes());
        s.h.iter().map(|x| format!("{x:08x}")).collect()
    }
}

/// What one end of a connection saw: bytes, messages and their digest.
struct Tally {
    framing: Framing,
    bytes: u64,
    msgs: u64,
    sha: Sha256,
}

impl Tally {
    fn new(framing: Framing) -> Tally {
        Tally {
            framing,
            bytes: 0,
            msgs: 0,
            sha: Sha256::new(),
        }
    }
    fn add(&mut self, data: &[u8]) {
        if self.framing == Framing::Message {
            self.sha.update(&(data.len() as u32).to_le_bytes());
        }
        self.sha.update(data);
        self.bytes += data.len() as u64;
        self.msgs += 1;
    }
    fn summary(&self) -> String {
        format!(
            "bytes={} msgs={} sha={}",
            self.bytes,
            self.msgs,
            self.sha.hex()
        )
    }
}

fn any(port: u16) -> SocketAddrV6 {
    SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, port, 0, 0)
}

/// A QP of the kind the arguments ask for (UDP, or TCP with their framing), both queues
/// DEPTH deep, on `cq`.
fn new_qp(ctx: &Context, a: &Args, cq: &Cq) -> Result<Qp, Fail> {
    let kind = if a.udp {
        QpKind::Udp
    } else {
        QpKind::Tcp(a.framing)
    };
    ctx.create_qp(&QpInit::new(kind, cq).depth(DEPTH as u32, DEPTH as u32))
        .map_err(|e| fail("create QP", e))
}

/// A completion queue's depth for `n` requests: a power of two within the device's limit.
fn cq_depth(ctx: &Context, n: usize) -> u32 {
    (n.max(2) as u32)
        .next_power_of_two()
        .min(ctx.limits().max_queue_depth)
}

/// Waits for completions or events (arm, re-poll, sleep on both descriptors), up to `t`.
fn wait_any(ctx: &Context, cq: &Cq, out: &mut [Completion], t: Duration) -> Result<usize, Fail> {
    let n = cq.poll(out);
    if n > 0 {
        return Ok(n);
    }
    cq.arm().map_err(|e| fail("arm CQ", e))?;
    let n = cq.poll(out);
    if n > 0 {
        return Ok(n);
    }
    use std::os::fd::AsRawFd;
    let mut fds = [
        libc::pollfd {
            fd: cq.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: ctx.events_fd().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    let ms = t.as_millis().clamp(1, i32::MAX as u128) as i32;
    // SAFETY: `fds` is a valid array of two pollfd entries that outlives the call.
    let r = unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
    if r < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
        return Err(fail("poll", std::io::Error::last_os_error()));
    }
    if fds[0].revents != 0 {
        cq.ack();
    }
    Ok(cq.poll(out))
}

fn errno_name(status: i32) -> String {
    if status == 0 {
        "ok".into()
    } else {
        format!(
            "{} ({})",
            std::io::Error::from_raw_os_error(-status),
            -status
        )
    }
}

// ---- sink ----------------------------------------------------------------------------------

#[derive(PartialEq)]
enum State {
    Waiting,
    Open,
    Clean,
    Failed,
}

struct SinkConn {
    qp: Qp,
    mr: MemoryRegion,
    state: State,
    tally: Tally,
    peer: Option<SocketAddrV6>,
    /// The first failed completion and the QP error event, as reported.
    error_cqe: Option<String>,
    error_event: Option<String>,
    flushed: u32,
    /// Our close completed (our FIN was acknowledged).
    close_done: bool,
}

fn sink(ctx: &Context, a: &Args) -> Result<bool, Fail> {
    let cq = ctx
        .create_cq(cq_depth(ctx, a.conns * DEPTH * 2))
        .map_err(|e| fail("create CQ", e))?;
    let listener = ctx
        .listen(any(a.port), a.conns as u32)
        .map_err(|e| fail("listen", e))?;
    let mut conns = Vec::new();
    for i in 0..a.conns {
        let qp = new_qp(ctx, a, &cq)?;
        let mr = ctx
            .alloc(a.max_msg * DEPTH)
            .map_err(|e| fail("register memory", e))?;
        listener
            .accept(&qp, i as u64)
            .map_err(|e| fail("accept", e))?;
        conns.push(SinkConn {
            qp,
            mr,
            state: State::Waiting,
            tally: Tally::new(a.framing),
            peer: None,
            error_cqe: None,
            error_event: None,
            flushed: 0,
            close_done: false,
        });
    }
    println!("@sink.listening={}", a.port);
    let clean_goal = a.clean.unwrap_or(a.conns);
    let deadline = Instant::now() + a.wait;
    let mut comps = [Completion::default(); 64];
    let by_qp = |conns: &[SinkConn], qp: u32| conns.iter().position(|c| c.qp.id() == qp);
    loop {
        let clean = conns.iter().filter(|c| c.state == State::Clean).count();
        let ended = conns
            .iter()
            .filter(|c| matches!(c.state, State::Clean | State::Failed))
            .count();
        if ended == conns.len() || (clean >= clean_goal && clean_goal < conns.len()) {
            break;
        }
        if Instant::now() >= deadline {
            println!("@sink.timeout={}", a.wait.as_secs());
            break;
        }
        let n = wait_any(ctx, &cq, &mut comps, Duration::from_millis(500))?;
        for c in &comps[..n] {
            let Some(i) = by_qp(&conns, c.qp) else {
                continue;
            };
            let conn = &mut conns[i];
            let slot = c.wr_id as usize;
            if c.status == Status::Flushed {
                conn.flushed += 1;
            }
            if conn.state != State::Open {
                // After the end: the other receives complete empty or flushed; after a
                // failure, the first failed completion is what counts.
                if !c.is_ok() && conn.state == State::Failed {
                    conn.error_cqe
                        .get_or_insert_with(|| format!("{:?}/{:?}", c.status, c.detail));
                }
                continue;
            }
            if !c.is_ok() {
                conn.error_cqe = Some(format!("{:?}/{:?}", c.status, c.detail));
                conn.state = State::Failed;
                continue;
            }
            if c.byte_len == 0 {
                // The peer's FIN: every receive from now on completes empty.
                conn.state = State::Clean;
                conn.qp.close(0).map_err(|e| fail("close", e))?;
                continue;
            }
            let off = slot * a.max_msg;
            conn.tally.add(&conn.mr[off..off + c.byte_len as usize]);
            let sge = [conn.mr.sge(off, a.max_msg)];
            conn.qp
                .post_recv(c.wr_id, &sge)
                .map_err(|e| fail("post receive", e))?;
        }
        while let Some(ev) = ctx.poll_event().map_err(|e| fail("events", e))? {
            let Some(i) = by_qp(&conns, ev.qp) else {
                continue;
            };
            let conn = &mut conns[i];
            match ev.kind {
                EventKind::Accept if ev.status == 0 => {
                    conn.state = State::Open;
                    conn.peer = ev.peer;
                    for s in 0..DEPTH {
                        let sge = [conn.mr.sge(s * a.max_msg, a.max_msg)];
                        conn.qp
                            .post_recv(s as u64, &sge)
                            .map_err(|e| fail("post receive", e))?;
                    }
                }
                EventKind::Accept => {
                    conn.state = State::Failed;
                    conn.error_event = Some(format!("accept {}", errno_name(ev.status)));
                }
                EventKind::QpError => {
                    conn.error_event = Some(format!("QpError {}", errno_name(ev.status)));
                    if conn.state == State::Open {
                        conn.state = State::Failed;
                    }
                }
                // Read here, a close's event is not there for the wait below.
                EventKind::Close => conn.close_done = true,
                _ => {}
            }
        }
    }
    // A connection that failed by its completions has its QP error event still to come:
    // the device delivers the event after the flushed completions, and a loop that ends on
    // the completions may not have read it yet.
    let until = Instant::now() + Duration::from_secs(10);
    for c in conns
        .iter_mut()
        .filter(|c| c.state == State::Failed && c.error_event.is_none())
    {
        let left = until.saturating_duration_since(Instant::now());
        if let Some(ev) = ctx
            .wait_event_for(c.qp.id(), EventKind::QpError, Some(left))
            .map_err(|e| fail("events", e))?
        {
            c.error_event = Some(format!("QpError {}", errno_name(ev.status)));
        }
    }
    // Our FINs acknowledged before the QPs go (destroying one aborts its connection, and
    // under loss the peer may still be waiting for the acknowledgement of its own FIN).
    let clean_qps: Vec<u32> = conns
        .iter()
        .filter(|c| c.state == State::Clean && !c.close_done)
        .map(|c| c.qp.id())
        .collect();
    let until = Instant::now() + Duration::from_secs(30);
    for id in clean_qps {
        let left = until.saturating_duration_since(Instant::now());
        let _ = ctx.wait_event_for(id, EventKind::Close, Some(left));
    }
    let mut ok = true;
    for c in &conns {
        let st = match c.state {
            State::Waiting => "waiting",
            State::Open => "open",
            State::Clean => "clean",
            State::Failed => "failed",
        };
        ok &= c.state == State::Clean || (a.clean.is_some() && c.state != State::Failed);
        let peer = c.peer.map(|p| p.to_string()).unwrap_or_else(|| "-".into());
        println!(
            "@sink.conn={st} {} peer={peer} cqe={} event={} flushed={}",
            c.tally.summary(),
            c.error_cqe.as_deref().unwrap_or("-"),
            c.error_event.as_deref().unwrap_or("-"),
            c.flushed
        );
    }
    let clean = conns.iter().filter(|c| c.state == State::Clean).count();
    println!("@sink.clean={clean}");
    if a.clean.is_some() {
        ok = clean >= clean_goal;
    }
    Ok(ok)
}

// ---- send ----------------------------------------------------------------------------------

struct SendConn {
    qp: Qp,
    mr: MemoryRegion,
    gen: Gen,
    plan: VecDeque<usize>,
    free: Vec<usize>,
    slot: usize,
    tally: Tally,
    acked: u64,
    connected: bool,
    closing: bool,
    closed: bool,
    peer_closed: bool,
    /// Receives the peer's end of stream.
    eof: MemoryRegion,
    done: bool,
    error: Option<String>,
}

fn send(ctx: &Context, a: &Args) -> Result<bool, Fail> {
    let peer = SocketAddrV6::new(a.addr.expect("checked"), a.port, 0, 0);
    let plan: VecDeque<usize> = match a.bytes {
        Some(total) => {
            let mut p = VecDeque::new();
            let mut left = total;
            while left > 0 {
                let n = left.min(a.chunk as u64);
                p.push_back(n as usize);
                left -= n;
            }
            p
        }
        None if !a.sizes.is_empty() => a.sizes.iter().copied().collect(),
        None => return Err(usage("send needs --sizes or --bytes")),
    };
    let slot = plan.iter().copied().max().unwrap_or(1).max(1);
    let cq = ctx
        .create_cq(cq_depth(ctx, a.conns * DEPTH * 2))
        .map_err(|e| fail("create CQ", e))?;
    let mut conns = Vec::new();
    for i in 0..a.conns {
        let qp = new_qp(ctx, a, &cq)?;
        let mr = ctx
            .alloc(slot * DEPTH)
            .map_err(|e| fail("register memory", e))?;
        qp.connect(peer, i as u64).map_err(|e| fail("connect", e))?;
        conns.push(SendConn {
            qp,
            mr,
            gen: Gen::new(i as u64 + 1),
            plan: plan.clone(),
            free: (0..DEPTH).collect(),
            slot,
            tally: Tally::new(a.framing),
            acked: 0,
            connected: false,
            closing: false,
            closed: false,
            peer_closed: false,
            eof: ctx.alloc(64).map_err(|e| fail("register memory", e))?,
            done: false,
            error: None,
        });
    }
    let started = Instant::now();
    let deadline = started + a.wait;
    let mut marked = false;
    let mut comps = [Completion::default(); 64];
    let by_qp = |conns: &[SendConn], qp: u32| conns.iter().position(|c| c.qp.id() == qp);
    while conns.iter().any(|c| !c.done) {
        if Instant::now() >= deadline {
            println!("@send.timeout={}", a.wait.as_secs());
            break;
        }
        // Fill every free send slot of every connected QP.
        for c in conns
            .iter_mut()
            .filter(|c| c.connected && !c.done && !c.closing)
        {
            while let (Some(&len), Some(&s)) = (c.plan.front(), c.free.last()) {
                c.plan.pop_front();
                c.free.pop();
                let buf = &mut c.mr.as_mut_slice()[s * c.slot..s * c.slot + len];
                c.gen.fill(buf);
                c.tally.add(&c.mr[s * c.slot..s * c.slot + len]);
                let sge = [c.mr.sge(s * c.slot, len)];
                c.qp.post_send(&SendWr::new(s as u64, &sge))
                    .map_err(|e| fail("post send", e))?;
            }
            if c.plan.is_empty() && c.free.len() == DEPTH {
                c.closing = true;
                c.qp.close(1).map_err(|e| fail("close", e))?;
            }
        }
        let n = wait_any(ctx, &cq, &mut comps, Duration::from_millis(500))?;
        for comp in &comps[..n] {
            let Some(i) = by_qp(&conns, comp.qp) else {
                continue;
            };
            let c = &mut conns[i];
            if comp.opcode != Opcode::Send {
                if comp.is_ok() && comp.byte_len == 0 {
                    c.peer_closed = true;
                    c.done = c.closed;
                }
                continue;
            }
            if !comp.is_ok() {
                c.error
                    .get_or_insert_with(|| format!("send {:?}/{:?}", comp.status, comp.detail));
                c.done = true;
                continue;
            }
            c.free.push(comp.wr_id as usize);
            c.acked += u64::from(comp.byte_len);
            if let Some((at, file)) = &a.mark {
                if !marked && c.acked >= *at {
                    marked = true;
                    fs::write(file, b"").map_err(|e| fail(file, e))?;
                    println!("@send.marked={}", c.acked);
                }
            }
        }
        while let Some(ev) = ctx.poll_event().map_err(|e| fail("events", e))? {
            let Some(i) = by_qp(&conns, ev.qp) else {
                continue;
            };
            let c = &mut conns[i];
            match ev.kind {
                EventKind::Connect if ev.status == 0 => {
                    c.connected = true;
                    // A receive, so the peer's end of stream is read (it completes empty).
                    let sge = [c.eof.sge_all()];
                    c.qp.post_recv(u64::MAX, &sge)
                        .map_err(|e| fail("post receive", e))?;
                }
                // Done once our FIN is acknowledged and the peer's came: destroying the QP
                // earlier would abort the connection (RST) before the peer saw our end.
                EventKind::Close if ev.status == 0 => {
                    c.closed = true;
                    c.done = c.peer_closed;
                }
                EventKind::PeerClosed => {
                    c.peer_closed = true;
                    c.done = c.closed;
                }
                EventKind::Connect | EventKind::Close | EventKind::QpError => {
                    c.error
                        .get_or_insert_with(|| format!("{:?} {}", ev.kind, errno_name(ev.status)));
                    c.done = true;
                }
                _ => {}
            }
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let mut ok = true;
    let mut total = 0;
    for c in &conns {
        let clean = c.done && c.error.is_none();
        ok &= clean;
        total += c.acked;
        println!(
            "@send.conn={} {} error={}",
            if clean { "clean" } else { "failed" },
            c.tally.summary(),
            c.error.as_deref().unwrap_or("-")
        );
    }
    println!("@send.bytes={total}");
    println!("@send.seconds={secs:.3}");
    println!("@send.mb_per_s={:.3}", total as f64 / secs / 1e6);
    Ok(ok)
}

// ---- echo and ping -------------------------------------------------------------------------

fn echo(ctx: &Context, a: &Args) -> Result<bool, Fail> {
    let cq = ctx
        .create_cq(cq_depth(ctx, DEPTH * 2))
        .map_err(|e| fail("create CQ", e))?;
    let qp = new_qp(ctx, a, &cq)?;
    let mr = ctx
        .alloc(a.max_msg * DEPTH)
        .map_err(|e| fail("register memory", e))?;
    let listener = if a.udp {
        qp.bind(any(a.port)).map_err(|e| fail("bind", e))?;
        None
    } else {
        Some(ctx.listen(any(a.port), 1).map_err(|e| fail("listen", e))?)
    };
    // Receives go up before the peer can connect, so its first bytes have somewhere to go:
    // on a TCP QP, receives posted before ACCEPT become the connection's receive space.
    for s in 0..DEPTH {
        qp.post_recv(s as u64, &[mr.sge(s * a.max_msg, a.max_msg)])
            .map_err(|e| fail("post receive", e))?;
    }
    println!("@echo.listening={}", a.port);
    if let Some(l) = &listener {
        let peer = l.accept_wait(&qp, a.wait).map_err(|e| fail("accept", e))?;
        println!("@echo.peer={peer}");
    }
    const UDP_QUIET: Duration = Duration::from_secs(30);
    let mut echoed = 0u64;
    // UDP ends after --count datagrams, or UDP_QUIET of quiet after the first one, or -w
    // without any. The quiet time is long because a TCG guest on a loaded host can go
    // many seconds without CPU: the pinging side's retries must still find this echo.
    let started = Instant::now();
    let mut last: Option<Instant> = None;
    let mut comps = [Completion::default(); 16];
    let mut peer_closed = false;
    loop {
        if a.udp && a.count > 0 && echoed >= a.count {
            break;
        }
        let quiet = match last {
            Some(t) if a.udp => t.elapsed() >= UDP_QUIET,
            _ => started.elapsed() >= a.wait,
        };
        if quiet {
            break;
        }
        let n = wait_any(ctx, &cq, &mut comps, Duration::from_millis(500))?;
        for c in &comps[..n] {
            let s = c.wr_id as usize;
            if !c.is_ok() {
                if peer_closed && c.status == Status::Flushed {
                    continue;
                }
                println!("@echo.error={:?}/{:?}", c.status, c.detail);
                return Ok(false);
            }
            match c.opcode {
                Opcode::Recv if c.byte_len == 0 && !a.udp => peer_closed = true,
                Opcode::Recv => {
                    last = Some(Instant::now());
                    // The receive buffer goes back out; it is reposted once the send is done.
                    let sge = [mr.sge(s * a.max_msg, c.byte_len as usize)];
                    let mut wr = SendWr::new(s as u64, &sge);
                    if let Some(src) = c.src {
                        wr = wr.to(src);
                    } else if a.framing == Framing::Message {
                        wr = wr.imm(c.imm);
                    }
                    qp.post_send(&wr).map_err(|e| fail("post send", e))?;
                }
                Opcode::Send => {
                    echoed += 1;
                    if !peer_closed {
                        qp.post_recv(c.wr_id, &[mr.sge(s * a.max_msg, a.max_msg)])
                            .map_err(|e| fail("post receive", e))?;
                    }
                }
            }
        }
        while let Some(ev) = ctx.poll_event().map_err(|e| fail("events", e))? {
            if ev.kind == EventKind::QpError {
                println!("@echo.error=QpError {}", errno_name(ev.status));
                return Ok(false);
            }
        }
        if peer_closed {
            // Graceful: our FIN goes after the echoes still queued.
            qp.close_wait(Duration::from_secs(60))
                .map_err(|e| fail("close", e))?;
            break;
        }
    }
    println!("@echo.count={echoed}");
    Ok(a.udp || peer_closed)
}

fn ping(ctx: &Context, a: &Args) -> Result<bool, Fail> {
    if !a.udp && a.framing == Framing::Stream {
        return Err(usage(
            "ping over TCP needs --message (a stream has no round trips to count)",
        ));
    }
    let peer = SocketAddrV6::new(a.addr.expect("checked"), a.port, 0, 0);
    let cq = ctx
        .create_cq(cq_depth(ctx, DEPTH * 2))
        .map_err(|e| fail("create CQ", e))?;
    let qp = new_qp(ctx, a, &cq)?;
    if a.udp {
        qp.bind(any(0)).map_err(|e| fail("bind", e))?;
    } else {
        qp.connect_wait(peer, a.wait)
            .map_err(|e| fail("connect", e))?;
    }
    let mut out = ctx
        .alloc(a.size.max(1))
        .map_err(|e| fail("register memory", e))?;
    // Larger than sent: an echo that grew would show. At least 64 KiB: on the device a
    // message-framed receive buffer not much larger than the message never completes (a
    // 100-byte message into a 101-byte buffer stalls; into 4096 bytes it arrives).
    let inb = ctx
        .alloc((a.size + 1).max(65536))
        .map_err(|e| fail("register memory", e))?;
    let mut gen = Gen::new(7);
    let (mut sent, mut got) = (Tally::new(a.framing), Tally::new(a.framing));
    let (mut lost, mut bad, mut stale) = (0u64, 0u64, 0u64);
    let mut rtts = Vec::new();
    let mut comps = [Completion::default(); 8];
    let mut recv_posted = false;
    let mut sends_out = 0u32;
    for i in 0..a.iters {
        // The message buffer is rewritten only once its send completed.
        while sends_out > 0 {
            let n = wait_any(ctx, &cq, &mut comps, Duration::from_millis(200))?;
            for c in &comps[..n] {
                match c.opcode {
                    Opcode::Send => sends_out -= 1,
                    Opcode::Recv => recv_posted = false,
                }
            }
        }
        gen.fill(&mut out.as_mut_slice()[..a.size]);
        // UDP: the message number leads, so an echo of an earlier try (a duplicate, or
        // one that came after its try was counted lost) is recognised and skipped.
        if a.udp && a.size >= 8 {
            out.as_mut_slice()[..8].copy_from_slice(&i.to_le_bytes());
        }
        // UDP: a try without an echo in 2 s is counted lost and the same message goes
        // again (a late echo of it is then still the right bytes).
        let answer = loop {
            if !recv_posted {
                qp.post_recv(1, &[inb.sge_all()])
                    .map_err(|e| fail("post receive", e))?;
                recv_posted = true;
            }
            let sge = [out.sge(0, a.size)];
            let wr = if a.udp {
                SendWr::new(2, &sge).to(peer)
            } else {
                SendWr::new(2, &sge).imm(i as u32)
            };
            // The message buffer is rewritten only once its send completed.
            while sends_out > 0 {
                let n = wait_any(ctx, &cq, &mut comps, Duration::from_millis(200))?;
                for c in &comps[..n] {
                    match c.opcode {
                        Opcode::Send => sends_out -= 1,
                        Opcode::Recv => recv_posted = false,
                    }
                }
            }
            let t0 = Instant::now();
            qp.post_send(&wr).map_err(|e| fail("post send", e))?;
            sends_out += 1;
            let limit = if a.udp {
                Duration::from_secs(2)
            } else {
                a.wait
            };
            let mut answer = None;
            while answer.is_none() && t0.elapsed() < limit {
                let n = wait_any(ctx, &cq, &mut comps, Duration::from_millis(200))?;
                for c in &comps[..n] {
                    if !c.is_ok() {
                        println!(
                            "@ping.error={:?}/{:?} {:?} at {i}",
                            c.status, c.detail, c.opcode
                        );
                        while let Ok(Some(ev)) = ctx.poll_event() {
                            println!("@ping.event={:?} {}", ev.kind, errno_name(ev.status));
                        }
                        return Ok(false);
                    }
                    match c.opcode {
                        Opcode::Send => sends_out -= 1,
                        Opcode::Recv => {
                            recv_posted = false;
                            let len = c.byte_len as usize;
                            if a.udp && a.size >= 8 && len >= 8 && inb[..8] != out[..8] {
                                stale += 1;
                                qp.post_recv(1, &[inb.sge_all()])
                                    .map_err(|e| fail("post receive", e))?;
                                recv_posted = true;
                                continue;
                            }
                            answer = Some((t0.elapsed(), len));
                        }
                    }
                }
            }
            match answer {
                Some(x) => break x,
                // A datagram or its echo may be lost (the suite drops and corrupts frames on
                // purpose), and a TCG guest starved of CPU on a loaded host can miss the
                // wait for seconds: both are retried, and the budget only stops a dead peer
                // from looping forever (late echoes are recognised and skipped as stale).
                None if a.udp && lost < a.iters + 10 => lost += 1,
                None => {
                    println!(
                        "@ping.error=no echo within {} s at {i} ({lost} lost before)",
                        limit.as_secs()
                    );
                    return Ok(false);
                }
            }
        };
        let (rtt, len) = answer;
        rtts.push(rtt);
        sent.add(&out[..a.size]);
        got.add(&inb[..len]);
        if inb[..len] != out[..a.size] {
            bad += 1;
        }
    }
    if !a.udp {
        qp.close_wait(Duration::from_secs(60))
            .map_err(|e| fail("close", e))?;
        // The echo side closes once it saw our FIN; destroying the QP before its FIN came
        // would abort the connection (RST) under it.
        let _ = ctx.wait_event_for(
            qp.id(),
            EventKind::PeerClosed,
            Some(Duration::from_secs(60)),
        );
    }
    rtts.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let pick = |q: f64| {
        rtts.get(((rtts.len() as f64 - 1.0) * q) as usize)
            .map(|d| us(*d))
            .unwrap_or(0.0)
    };
    println!("@ping.count={}", rtts.len());
    println!("@ping.size={}", a.size);
    println!("@ping.lost={lost}");
    println!("@ping.mismatch={bad}");
    println!("@ping.stale={stale}");
    println!(
        "@ping.rtt_us=min {:.0} p50 {:.0} p90 {:.0} max {:.0}",
        pick(0.0),
        pick(0.5),
        pick(0.9),
        pick(1.0)
    );
    println!("@ping.sent={}", sent.summary());
    println!("@ping.got={}", got.summary());
    Ok(bad == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_matches_known_digests() {
        let mut s = Sha256::new();
        s.update(b"abc");
        assert_eq!(
            s.hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let mut s = Sha256::new();
        for _ in 0..1000 {
            s.update(&[b'a'; 1000]);
        }
        assert_eq!(
            s.hex(),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"
        );
        assert_eq!(
            Sha256::new().hex(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn generators_differ_by_seed() {
        let (mut a, mut b) = (vec![0u8; 64], vec![0u8; 64]);
        Gen::new(1).fill(&mut a);
        Gen::new(2).fill(&mut b);
        assert_ne!(a, b);
    }
}
