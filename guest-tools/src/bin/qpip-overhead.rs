//! `qpip-overhead`: the host overhead of one message, as the QPIP paper's Table 1 measures
//! it: the application's time inside the calls that send and receive a message, with the
//! transport's own work left out.
//!
//! ```text
//! qpip-overhead [--messages N] [--size BYTES] [--spin-us N] [--json]
//! ```
//!
//! - **QPs** (UDP and TCP over the device's loopback): `post_recv` (replenishing the
//!   receive), `post_send`, then — after the device has done its part — the `poll` of the
//!   sender's CQ and the `poll` of the receiver's CQ, each reaping a completion that is
//!   already there (on TCP the sender's is often that of an earlier message: a send
//!   completes when acknowledged, and the receiver may hold its ACK up to a millisecond
//!   for an answer to carry it). Posts that had to kick a sleeping device (a trapped
//!   write) are counted apart from quiet ones, so both costs show.
//! - **Kernel sockets** (UDP and TCP over the guest's loopback): `send()`, then — after the
//!   kernel has delivered it — `recv(MSG_DONTWAIT)` of the data already queued. The kernel's
//!   TCP/IP work for the send runs inside `send()`, as it does on a real host; on the receive
//!   side much of it has already run in softirq, which this does not count (the bench's
//!   guest-wide CPU figure does).
//!
//! Every timed interval is the clock read before and after the calls, less what reading the
//! clock twice costs by itself (the median of 2000 empty intervals measured at the start,
//! `clock_ns` in the JSON): QPs time four intervals per message (each post and each poll,
//! also given apart in the JSON: `post_recv_ns`, `post_send_ns`, `send_poll_ns`,
//! `recv_poll_ns`), sockets two or more (the send and each `recv`), so the clock's own cost would otherwise
//! weigh on the two sides differently.
//!
//! Between the timed calls the program sleeps (1 ms), untimed, so the device or the kernel
//! finishes; a completion not yet there after it is waited for untimed and the message is
//! left out (and counted). The device's engine usually falls asleep in that time, so most
//! posts kick it; `--spin-us N` busy-waits N µs instead of sleeping, short enough for the
//! engine to stay awake from one message to the next: the quiet posts (the JSON says which
//! in `spin_us`, 0 for the sleep). Times are medians per message of `--messages` (default
//! 2000) messages of `--size` bytes (default 64). Under TCG the absolute times are
//! inflated; the ratio of the two is the figure.

use std::io::{Read, Write};
use std::net::{Ipv6Addr, SocketAddrV6, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use qpip::{Completion, Context, Cq, Framing, QpInit, QpKind, SendWr};

const USAGE: &str = "usage: qpip-overhead [--messages N] [--size BYTES] [--spin-us N] [--json]";
const T: Duration = Duration::from_secs(60);
const SETTLE: Duration = Duration::from_millis(1);

/// `--spin-us`: the settle time busy-waited, in µs (0: sleep [`SETTLE`]).
static SPIN_US: AtomicU64 = AtomicU64::new(0);

/// Lets the device or the kernel finish, untimed: a sleep, or a busy-wait (`--spin-us`).
fn settle() {
    let us = SPIN_US.load(Ordering::Relaxed);
    if us == 0 {
        std::thread::sleep(SETTLE);
        return;
    }
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_micros(us) {
        std::hint::spin_loop();
    }
}

/// What two clock reads cost by themselves, ns (see the module's documentation).
static CLOCK_NS: AtomicU64 = AtomicU64::new(0);

/// Measures [`CLOCK_NS`]: the median of empty timed intervals.
fn calibrate_clock() -> u64 {
    let mut v: Vec<Duration> = (0..2000)
        .map(|_| {
            let t0 = Instant::now();
            t0.elapsed()
        })
        .collect();
    v.sort_unstable();
    let ns = v[v.len() / 2].as_nanos() as u64;
    CLOCK_NS.store(ns, Ordering::Relaxed);
    ns
}

/// The time since `t0`, less the clock's own cost.
fn since(t0: Instant) -> Duration {
    t0.elapsed()
        .saturating_sub(Duration::from_nanos(CLOCK_NS.load(Ordering::Relaxed)))
}

fn lo(port: u16) -> SocketAddrV6 {
    SocketAddrV6::new(Ipv6Addr::LOCALHOST, port, 0, 0)
}

/// Per-message samples of one transport.
#[derive(Default)]
struct Samples {
    /// Send + receive side calls, per message.
    total: Vec<Duration>,
    send: Vec<Duration>,
    recv: Vec<Duration>,
    /// Messages whose send side kicked the device (QPs only).
    kicked: Vec<Duration>,
    quiet: Vec<Duration>,
    /// Messages left out: a completion or the data was not there after the settle time.
    late: u64,
    /// QPs only: each call's own time, per message, in the order of [`Samples::PARTS`]
    /// (the breakdown of `total`, to see which call a change moved).
    parts: [Vec<Duration>; 4],
}

fn median(v: &[Duration]) -> Option<u128> {
    let mut v: Vec<u128> = v.iter().map(|d| d.as_nanos()).collect();
    v.sort_unstable();
    v.get(v.len() / 2).copied()
}

impl Samples {
    /// The calls of a QP's message, as [`Samples::parts`] holds them (JSON `<name>_ns`).
    const PARTS: [&'static str; 4] = ["post_recv", "post_send", "send_poll", "recv_poll"];

    /// Names of the figures of a row, in the order [`Samples::figures`] gives them.
    const NAMES: [&'static str; 9] = [
        "messages",
        "ns_per_message",
        "send_ns",
        "recv_ns",
        "kicked_messages",
        "kicked_ns",
        "quiet_messages",
        "quiet_ns",
        "late",
    ];

    /// The row's figures: counts as they are, medians (ns) through `median`.
    fn figures(&self, median_of: impl Fn(&[Duration]) -> String) -> [String; 9] {
        [
            self.total.len().to_string(),
            median_of(&self.total),
            median_of(&self.send),
            median_of(&self.recv),
            self.kicked.len().to_string(),
            median_of(&self.kicked),
            self.quiet.len().to_string(),
            median_of(&self.quiet),
            self.late.to_string(),
        ]
    }

    fn json(&self, name: &str) -> String {
        let f = self.figures(|v| median(v).map_or("null".into(), |n| n.to_string()));
        let fields: Vec<String> = Self::NAMES
            .iter()
            .zip(&f)
            .map(|(k, v)| format!("\"{k}\":{v}"))
            .chain(
                Self::PARTS
                    .iter()
                    .zip(&self.parts)
                    .filter(|(_, v)| !v.is_empty())
                    .map(|(k, v)| format!("\"{k}_ns\":{}", median(v).unwrap_or(0))),
            )
            .collect();
        format!("{{\"test\":\"{name}\",{}}}", fields.join(","))
    }

    fn row(&self, name: &str) -> String {
        let f =
            self.figures(|v| median(v).map_or("-".into(), |n| format!("{:.2}", n as f64 / 1e3)));
        let mut line = format!("{name:<12}");
        for (v, w) in f.iter().zip(WIDTHS) {
            line += &format!(" {v:>w$}");
        }
        line
    }
}

/// Column widths of the table (after the test's name), in the order of [`Samples::NAMES`].
const WIDTHS: [usize; 9] = [8, 10, 10, 10, 8, 10, 8, 10, 6];

type R<T> = Result<T, String>;

fn q<T>(r: qpip::Result<T>, what: &str) -> R<T> {
    r.map_err(|e| format!("{what}: {e}"))
}

/// Takes exactly one completion, timing only a poll that finds it there: after the settle
/// time it usually is; if not, it is waited for untimed and `None` says so.
fn reap(cq: &Cq, what: &str) -> R<Option<Duration>> {
    match reap_present(cq, what)? {
        Some(t) => Ok(Some(t)),
        None => {
            wait_one(cq, what)?;
            Ok(None)
        }
    }
}

/// One poll, timed, that takes a completion if one is there (`None`: there was none).
fn reap_present(cq: &Cq, what: &str) -> R<Option<Duration>> {
    let mut c = [Completion::default()];
    let t0 = Instant::now();
    let n = cq.poll(&mut c);
    let t = since(t0);
    if n == 0 {
        return Ok(None);
    }
    c[0].is_ok()
        .then_some(Some(t))
        .ok_or(format!("{what}: {:?}", c[0]))
}

/// Waits, untimed, for one completion.
fn wait_one(cq: &Cq, what: &str) -> R<()> {
    let mut c = [Completion::default()];
    let n = q(cq.wait(&mut c, Some(T)), what)?;
    if n != 1 || !c[0].is_ok() {
        return Err(format!("{what}: no completion within {T:?} ({:?})", c[0]));
    }
    Ok(())
}

/// A sending QP `a` and a receiving QP `b` (with the CQs that matter here), and where `a`
/// sends to (UDP) or nothing (connected TCP).
struct Pair<'a> {
    a: &'a qpip::Qp,
    b: &'a qpip::Qp,
    a_scq: &'a Cq,
    b_rcq: &'a Cq,
    to: Option<SocketAddrV6>,
}

fn qp_messages(ctx: &Context, p: Pair<'_>, n: usize, size: usize) -> R<Samples> {
    let Pair {
        a,
        b,
        a_scq,
        b_rcq,
        to,
    } = p;
    let sbuf = q(ctx.alloc(size), "register")?;
    let rbuf = q(ctx.alloc(size), "register")?;
    let mut s = Samples::default();
    // Sends posted whose completion no poll has taken yet.
    let mut unreaped = 0u32;
    for i in 0..n as u64 + 10 {
        let k0 = ctx.kicks();
        let t0 = Instant::now();
        q(b.post_recv(i, &[rbuf.sge_all()]), "post_recv")?;
        let posted_recv = since(t0);
        let t1 = Instant::now();
        let sges = [sbuf.sge_all()];
        let wr = SendWr::new(i, &sges);
        let wr = match to {
            Some(to) => wr.to(to),
            None => wr,
        };
        q(a.post_send(&wr), "post_send")?;
        let posted_send = since(t1);
        let send = posted_recv + posted_send;
        let kicked = ctx.kicks() != k0;
        unreaped += 1;
        settle();
        // The poll of the send CQ takes the oldest send completion there: on UDP this
        // message's (a datagram completes once sent); on TCP often an earlier one's, since
        // a send completes when acknowledged and the receiver may hold its ACK up to a
        // millisecond for an answer to carry it. Either way it is the cost of a poll that
        // reaps a completion already there; a poll that finds none leaves the message out.
        let sent = reap_present(a_scq, "send completion")?;
        if sent.is_some() {
            unreaped -= 1;
        }
        let got = reap(b_rcq, "receive completion")?;
        if i < 10 {
            continue; // warm-up: queues and caches reach their steady state
        }
        match (sent, got) {
            (Some(p1), Some(p2)) => {
                let total = send + p1 + p2;
                s.total.push(total);
                s.send.push(send + p1);
                s.recv.push(p2);
                for (v, t) in s.parts.iter_mut().zip([posted_recv, posted_send, p1, p2]) {
                    v.push(t);
                }
                if kicked {
                    s.kicked.push(total);
                } else {
                    s.quiet.push(total);
                }
            }
            _ => s.late += 1,
        }
    }
    for _ in 0..unreaped {
        wait_one(a_scq, "send completion")?;
    }
    Ok(s)
}

fn qp_udp(ctx: &Context, n: usize, size: usize) -> R<Samples> {
    let (a_scq, a_rcq) = (q(ctx.create_cq(64), "CQ")?, q(ctx.create_cq(64), "CQ")?);
    let (b_scq, b_rcq) = (q(ctx.create_cq(64), "CQ")?, q(ctx.create_cq(64), "CQ")?);
    let a = q(
        ctx.create_qp(&QpInit::new(QpKind::Udp, &a_scq).recv_cq(&a_rcq)),
        "QP",
    )?;
    let b = q(
        ctx.create_qp(&QpInit::new(QpKind::Udp, &b_scq).recv_cq(&b_rcq)),
        "QP",
    )?;
    q(a.bind(lo(0)), "bind")?;
    let to = lo(q(b.bind(lo(0)), "bind")?.port());
    let pair = Pair {
        a: &a,
        b: &b,
        a_scq: &a_scq,
        b_rcq: &b_rcq,
        to: Some(to),
    };
    qp_messages(ctx, pair, n, size)
}

fn qp_tcp(ctx: &Context, n: usize, size: usize) -> R<Samples> {
    let (a_scq, a_rcq) = (q(ctx.create_cq(64), "CQ")?, q(ctx.create_cq(64), "CQ")?);
    let (b_scq, b_rcq) = (q(ctx.create_cq(64), "CQ")?, q(ctx.create_cq(64), "CQ")?);
    let kind = QpKind::Tcp(Framing::Message);
    let a = q(
        ctx.create_qp(&QpInit::new(kind, &a_scq).recv_cq(&a_rcq)),
        "QP",
    )?;
    let b = q(
        ctx.create_qp(&QpInit::new(kind, &b_scq).recv_cq(&b_rcq)),
        "QP",
    )?;
    // A listener needs a port of its own choosing: the first free one from 7391 (a run
    // just before may still hold one, its connection finishing its close).
    let (port, listener) = (7391..7391 + 64)
        .find_map(|p| ctx.listen(lo(p), 1).ok().map(|l| (p, l)))
        .ok_or("listen: no free port in 7391..7455")?;
    q(listener.accept(&b, 1), "accept")?;
    q(a.connect_wait(lo(port), T), "connect")?;
    q(
        ctx.wait_event_for(b.id(), qpip::EventKind::Accept, Some(T)),
        "accept event",
    )?;
    let pair = Pair {
        a: &a,
        b: &b,
        a_scq: &a_scq,
        b_rcq: &b_rcq,
        to: None,
    };
    qp_messages(ctx, pair, n, size)
}

/// `send()` on one socket, then `recv(MSG_DONTWAIT)` of the data already queued on the other.
fn socket_messages(
    send: &mut dyn FnMut(&[u8]) -> std::io::Result<usize>,
    recv_fd: i32,
    n: usize,
    size: usize,
) -> R<Samples> {
    let data = vec![0x5au8; size];
    let mut buf = vec![0u8; size.max(1) * 2];
    let mut s = Samples::default();
    for i in 0..n + 10 {
        let t0 = Instant::now();
        let sent = send(&data).map_err(|e| format!("send: {e}"))?;
        let send_t = since(t0);
        if sent != size {
            return Err(format!("send: {sent} of {size} bytes"));
        }
        settle();
        let mut got = 0;
        let mut timed = None;
        while got < size {
            let t1 = Instant::now();
            // SAFETY: a plain recv into a buffer of the length given.
            let r = unsafe {
                libc::recv(
                    recv_fd,
                    buf.as_mut_ptr().cast(),
                    size - got,
                    libc::MSG_DONTWAIT,
                )
            };
            let t = since(t1);
            if r > 0 {
                got += r as usize;
                timed = Some(timed.map_or(t, |x: Duration| x + t));
            } else {
                timed = None; // not all there: left out, waited for untimed
                settle();
            }
        }
        if i < 10 {
            continue;
        }
        match timed {
            Some(r) => {
                s.total.push(send_t + r);
                s.send.push(send_t);
                s.recv.push(r);
            }
            None => s.late += 1,
        }
    }
    Ok(s)
}

fn sockets_udp(n: usize, size: usize) -> R<Samples> {
    let a = UdpSocket::bind(lo(0)).map_err(|e| format!("bind: {e}"))?;
    let b = UdpSocket::bind(lo(0)).map_err(|e| format!("bind: {e}"))?;
    a.connect(b.local_addr().map_err(|e| e.to_string())?)
        .map_err(|e| format!("connect: {e}"))?;
    socket_messages(&mut |d| a.send(d), b.as_raw_fd(), n, size)
}

fn sockets_tcp(n: usize, size: usize) -> R<Samples> {
    let l = TcpListener::bind(lo(0)).map_err(|e| format!("listen: {e}"))?;
    let mut a = TcpStream::connect(l.local_addr().map_err(|e| e.to_string())?)
        .map_err(|e| format!("connect: {e}"))?;
    let (b, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
    a.set_nodelay(true).map_err(|e| e.to_string())?;
    let r = socket_messages(&mut |d| a.write(d), b.as_raw_fd(), n, size);
    drop(b);
    let _ = a.read(&mut [0u8; 1]);
    r
}

fn run(n: usize, size: usize, json: bool) -> R<()> {
    let ctx = q(Context::open(), "open the device")?;
    let clock_ns = calibrate_clock();
    let rows = [
        ("qp-udp", qp_udp(&ctx, n, size)?),
        ("sockets-udp", sockets_udp(n, size)?),
        ("qp-tcp", qp_tcp(&ctx, n, size)?),
        ("sockets-tcp", sockets_tcp(n, size)?),
    ];
    if json {
        let body: Vec<String> = rows.iter().map(|(name, s)| s.json(name)).collect();
        println!(
            "{{\"tool\":\"qpip-overhead\",\"size\":{size},\"spin_us\":{},\"clock_ns\":{clock_ns},\"results\":[{}]}}",
            SPIN_US.load(Ordering::Relaxed),
            body.join(",")
        );
    } else {
        println!(
            "host overhead per message of {size} bytes (median, µs): the calls only, the transport's work left out;\n\
             each timed interval less the clock's own cost ({:.2} µs)",
            clock_ns as f64 / 1e3
        );
        let heads = [
            "msgs",
            "total",
            "send",
            "recv",
            "kicked",
            "kicked µs",
            "quiet",
            "quiet µs",
            "late",
        ];
        let mut head = format!("{:<12}", "test");
        for (h, w) in heads.iter().zip(WIDTHS) {
            head += &format!(" {h:>w$}");
        }
        println!("{head}");
        for (name, s) in &rows {
            println!("{}", s.row(name));
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mut n, mut size, mut json) = (2000usize, 64usize, false);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut num = |what: &str| -> Option<usize> {
            let v = it.next().and_then(|v| v.parse().ok());
            if v.is_none() {
                eprintln!("qpip-overhead: {what} needs a number\n{USAGE}");
            }
            v
        };
        match a.as_str() {
            "--messages" => match num("--messages") {
                Some(v) if v > 0 => n = v,
                _ => return ExitCode::from(2),
            },
            "--size" => match num("--size") {
                Some(v) if (1..=65000).contains(&v) => size = v,
                _ => return ExitCode::from(2),
            },
            "--spin-us" => match num("--spin-us") {
                Some(v) if (1..=1_000_000).contains(&v) => {
                    SPIN_US.store(v as u64, Ordering::Relaxed)
                }
                _ => return ExitCode::from(2),
            },
            "--json" => json = true,
            _ => {
                eprintln!("qpip-overhead: unknown argument {a:?}\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    match run(n, size, json) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("qpip-overhead: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Samples {
        let us = Duration::from_micros;
        Samples {
            total: vec![us(3), us(1), us(2)],
            send: vec![us(2), us(1), us(1)],
            recv: vec![us(1), us(0), us(1)],
            kicked: vec![us(3)],
            quiet: vec![us(1), us(2)],
            late: 4,
            parts: Default::default(),
        }
    }

    #[test]
    fn a_row_as_json_and_as_a_line_of_the_table() {
        assert_eq!(
            sample().json("qp-udp"),
            "{\"test\":\"qp-udp\",\"messages\":3,\"ns_per_message\":2000,\"send_ns\":1000,\
             \"recv_ns\":1000,\"kicked_messages\":1,\"kicked_ns\":3000,\"quiet_messages\":2,\
             \"quiet_ns\":2000,\"late\":4}"
        );
        assert_eq!(
            sample().row("qp-udp"),
            "qp-udp              3       2.00       1.00       1.00        1       3.00        2       2.00      4"
        );
        let mut parts = sample();
        parts.parts[1] = vec![Duration::from_micros(5)];
        assert!(parts
            .json("qp-udp")
            .ends_with("\"late\":4,\"post_send_ns\":5000}"));
        let none = Samples::default();
        assert!(none.json("x").contains("\"quiet_ns\":null"));
        assert!(none.row("x").ends_with("         -      0"));
    }
}
