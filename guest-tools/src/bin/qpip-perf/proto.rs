//! The test protocol, the same over QPs and sockets. Control messages are text starting
//! with `QPIPPERF `; everything else is test data.
//!
//! TCP, one connection per test: the client sends `QPIPPERF v1 lat|bw SIZE [WARMUP]\n`
//! (WARMUP: how many messages of a latency test come before the measured ones), the server
//! answers `QPIPPERF OK\n`; then (latency) the client's SIZE bytes are echoed piece by
//! piece as they arrive, or (bandwidth) the server counts what arrives (without reading
//! it, over QPs and sockets alike); the client closes its direction, the server
//! answers `QPIPPERF DONE BYTES MSGS CPU_NS [guest_busy_us=US] [NAME=VALUE ...]\n` (what it
//! received, its process CPU time over the test, its guest's whole busy time from the
//! first measured message to this answer, and how much its counters grew over the test:
//! see `counters.rs`, and over sockets `sockets.rs`) and closes.
//!
//! The guest-wide busy time (`/proc/stat`, see [`counters::guest_busy_us`]) covers exactly
//! the measured interval on each side: the client's from just before the first measured
//! round trip to just after the last (latency) or from just before its first send to the
//! server's `DONE` (bandwidth); the server's from the arrival of the first measured
//! message (after WARMUP messages) to its `DONE`. Start-up, connection, registering
//! buffers and the warm-up stay outside.
//!
//! UDP, one socket/QP: the same hello as a datagram (repeated until `QPIPPERF OK`), data
//! datagrams (echoed in a latency test), and `QPIPPERF end` (repeated until the `DONE`
//! answer).

use std::io;
use std::net::{Ipv6Addr, SocketAddrV6};
use std::time::{Duration, Instant};

use crate::counters::{self, Counters};
use crate::link::Link;
use crate::{resolve, Acceptor, Args, Fail, Net, MAX_TCP, T};

const MAGIC: &[u8] = b"QPIPPERF ";

/// What a test measured.
#[derive(Clone, Debug, Default)]
pub struct Row {
    pub transport: &'static str,
    pub test: &'static str,
    pub size: usize,
    /// Round trips (latency) or messages sent (bandwidth) that were measured.
    pub msgs: u64,
    /// UDP latency: pings without an answer within a second.
    pub lost: u64,
    /// Round-trip times, nanoseconds, sorted.
    pub rtt_ns: Vec<u64>,
    pub bytes_sent: u64,
    /// What the server says it received (bandwidth).
    pub bytes_received: u64,
    pub msgs_received: u64,
    pub elapsed: Duration,
    pub client_cpu_ns: u64,
    pub server_cpu_ns: u64,
    pub server_msgs: u64,
    /// The client's guest's whole busy time over the measured interval, µs.
    pub client_busy_us: Option<u64>,
    /// The server's guest's, as it reported it.
    pub server_busy_us: Option<u64>,
    /// How much the client's counters grew over the test.
    pub client_counters: Option<Counters>,
    /// The same of the server, as it reported them.
    pub server_counters: Option<Counters>,
}

impl Row {
    /// An empty row of a `transport` latency (`lat`) or bandwidth test with messages of
    /// `size` bytes.
    fn new(transport: &'static str, lat: bool, size: usize) -> Row {
        Row {
            transport,
            test: if lat { "latency" } else { "bandwidth" },
            size,
            ..Row::default()
        }
    }
}

/// Process CPU time so far (user + system), in nanoseconds.
pub fn cpu_ns() -> u64 {
    // SAFETY: getrusage only writes the rusage it is given; a zeroed rusage is a valid
    // value of that plain C struct.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    ns(ru.ru_utime) + ns(ru.ru_stime)
}

fn io_fail(what: &str, e: io::Error) -> Fail {
    Fail(1, format!("{what}: {e}"))
}

/// Reads from `link` until a `\n` (TCP control lines); `None` if the peer closed first.
fn read_line(link: &mut dyn Link) -> io::Result<Option<String>> {
    let mut line = Vec::new();
    let mut buf = [0u8; 256];
    while !line.contains(&b'\n') {
        match link.recv(&mut buf, Some(T))? {
            None => return Err(io::Error::new(io::ErrorKind::TimedOut, "no answer")),
            Some((0, _)) => return Ok(None),
            Some((n, _)) => line.extend_from_slice(&buf[..n]),
        }
        if line.len() > 4096 {
            return Err(io::Error::other("control line too long"));
        }
    }
    Ok(Some(String::from_utf8_lossy(&line).trim().to_string()))
}

/// What a client's hello asks for.
#[derive(Debug, PartialEq)]
struct Hello {
    lat: bool,
    size: usize,
    /// Messages before the measured ones (0 if the hello does not say).
    warmup: u64,
}

fn hello_line(lat: bool, size: usize, warmup: u64) -> String {
    let kind = if lat { "lat" } else { "bw" };
    format!("QPIPPERF v1 {kind} {size} {warmup}")
}

/// `v1 lat|bw SIZE [WARMUP]`.
fn parse_hello(s: &str) -> Option<Hello> {
    let mut w = s.strip_prefix("QPIPPERF v1 ")?.split_whitespace();
    let lat = match w.next()? {
        "lat" => true,
        "bw" => false,
        _ => return None,
    };
    let size = w.next()?.parse().ok()?;
    let warmup = match w.next() {
        Some(n) => n.parse().ok()?,
        None => 0,
    };
    Some(Hello { lat, size, warmup })
}

/// Where the server's guest-wide busy time starts: at the first message after the
/// warm-up's.
struct BusyMark {
    warmup: u64,
    start: Option<Option<u64>>,
}

impl BusyMark {
    fn new(warmup: u64) -> BusyMark {
        BusyMark {
            warmup,
            start: None,
        }
    }

    /// Message number `msgs` (from 0) is arriving: marks the start at the first measured.
    fn arriving(&mut self, msgs: u64) {
        if self.start.is_none() && msgs >= self.warmup {
            self.start = Some(counters::guest_busy_us());
        }
    }

    /// The busy time since the start (`None` if no measured message came, or
    /// `/proc/stat` could not be read).
    fn since(&self) -> Option<u64> {
        let start = self.start??;
        Some(counters::guest_busy_us()?.saturating_sub(start))
    }
}

/// What the server's `DONE` says.
#[derive(Debug, PartialEq)]
struct Done {
    bytes: u64,
    msgs: u64,
    cpu_ns: u64,
    /// Its guest's whole busy time over the measured interval, µs.
    busy_us: Option<u64>,
    counters: Option<Counters>,
}

/// The word of a `DONE` line that carries the server's guest-wide busy time.
const BUSY_WORD: &str = "guest_busy_us=";

fn parse_done(s: &str) -> Option<Done> {
    let mut w = s.strip_prefix("QPIPPERF DONE ")?.split_whitespace();
    let mut num = || w.next()?.parse::<u64>().ok();
    let (bytes, msgs, cpu_ns) = (num()?, num()?, num()?);
    let rest: Vec<&str> = w.collect();
    let busy_us = rest
        .iter()
        .find_map(|x| x.strip_prefix(BUSY_WORD)?.parse().ok());
    Some(Done {
        bytes,
        msgs,
        cpu_ns,
        busy_us,
        counters: Counters::from_words(rest.into_iter().filter(|x| !x.starts_with(BUSY_WORD))),
    })
}

fn done_line(
    bytes: u64,
    msgs: u64,
    cpu_ns: u64,
    busy_us: Option<u64>,
    counters: Option<Counters>,
) -> String {
    let mut s = format!("QPIPPERF DONE {bytes} {msgs} {cpu_ns}");
    if let Some(b) = busy_us {
        s += &format!(" {BUSY_WORD}{b}");
    }
    if let Some(c) = counters {
        s += " ";
        s += &c.to_words();
    }
    s
}

/// How much `link`'s counters grew since `before`.
fn grown(link: &dyn Link, before: &Option<Counters>) -> Option<Counters> {
    Some(link.counters()?.since(before.as_ref()?))
}

// ---- server ------------------------------------------------------------------------------

pub fn serve(a: &Args) -> Result<(), Fail> {
    let net = Net::open(a)?;
    let local = match &a.bind {
        Some(b) => resolve(b, a.port)?,
        None => SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, a.port, 0, 0),
    };
    let acceptor = Acceptor::new(&net, local)?;
    let udp = net.udp(local, net.max_udp(), true)?;
    println!(
        "qpip-perf: serving {} on UDP and TCP {local}",
        net.describe()
    );
    use std::io::Write;
    let _ = std::io::stdout().flush();
    std::thread::spawn(move || serve_udp(udp));
    loop {
        let (mut link, peer) = acceptor.accept()?;
        if let Err(e) = serve_tcp(&mut *link) {
            eprintln!("qpip-perf: TCP client {peer}: {e}");
        }
    }
}

fn serve_tcp(link: &mut dyn Link) -> io::Result<()> {
    let Some(hello) = read_line(link)? else {
        return Ok(());
    };
    let Hello { lat, size, warmup } = parse_hello(&hello)
        .filter(|h| (1..=MAX_TCP).contains(&h.size))
        .ok_or_else(|| io::Error::other(format!("bad hello {hello:?}")))?;
    link.send(b"QPIPPERF OK\n")?;
    let before = link.counters();
    let cpu0 = cpu_ns();
    let (mut bytes, mut msgs) = (0u64, 0u64);
    let mut busy = BusyMark::new(if lat { warmup } else { 0 });
    // Each piece that arrives is counted (and in a latency test echoed) where it is, not
    // read: the same over sockets and QPs (see link.rs for what each costs).
    'test: loop {
        let mut got = 0;
        while got < size {
            match link.hold(Some(T))? {
                None => return Err(io::Error::new(io::ErrorKind::TimedOut, "client silent")),
                Some((0, _)) => break 'test,
                Some((n, _)) => {
                    busy.arriving(msgs);
                    got += n;
                    if lat {
                        link.echo()?;
                    } else {
                        link.release()?;
                        bytes += n as u64;
                        msgs += 1;
                    }
                }
            }
        }
        if lat {
            bytes += size as u64;
            msgs += 1;
        }
    }
    let busy_us = busy.since();
    let cpu = cpu_ns() - cpu0;
    let grew = grown(link, &before);
    link.send(format!("{}\n", done_line(bytes, msgs, cpu, busy_us, grew)).as_bytes())?;
    link.finish()
}

fn serve_udp(mut link: Box<dyn Link + Send>) {
    let (mut lat, mut bytes, mut msgs, mut cpu0) = (false, 0u64, 0u64, cpu_ns());
    let mut before = None;
    let mut busy = BusyMark::new(0);
    loop {
        let (n, src) = match link.hold(None) {
            Ok(Some((n, Some(src)))) => (n, src),
            Ok(_) => continue,
            Err(e) => {
                eprintln!("qpip-perf: UDP: {e}");
                return;
            }
        };
        let r = if link.held().starts_with(MAGIC) {
            let text = String::from_utf8_lossy(link.held()).to_string();
            let _ = link.release();
            let reply = if let Some(h) = parse_hello(&text) {
                before = link.counters();
                (lat, bytes, msgs, cpu0) = (h.lat, 0, 0, cpu_ns());
                busy = BusyMark::new(if h.lat { h.warmup } else { 0 });
                // A stream of datagrams is taken busy-polling (on QPs; sockets block, see
                // `SockLink`): a receiver that sleeps whenever it has caught up falls
                // behind a sender that never sleeps while it waits to be woken and
                // scheduled again.
                link.set_spin(!h.lat);
                Some("QPIPPERF OK".to_string())
            } else if text == "QPIPPERF end" {
                link.set_spin(false);
                let busy_us = busy.since();
                let cpu = cpu_ns() - cpu0;
                Some(done_line(bytes, msgs, cpu, busy_us, grown(&*link, &before)))
            } else {
                None
            };
            link.set_peer(src);
            reply.map_or(Ok(()), |r| link.send(r.as_bytes()))
        } else {
            busy.arriving(msgs);
            bytes += n as u64;
            msgs += 1;
            if lat {
                link.set_peer(src);
                link.echo()
            } else {
                link.release()
            }
        };
        if let Err(e) = r {
            eprintln!("qpip-perf: UDP send to {src}: {e}");
        }
    }
}

// ---- client ------------------------------------------------------------------------------

pub fn client(a: &Args) -> Result<Vec<Row>, Fail> {
    let net = Net::open(a)?;
    let server = resolve(a.addr.as_deref().unwrap_or_default(), a.port)?;
    let mut rows = Vec::new();
    if !a.json {
        println!("qpip-perf: {} to {server}", net.describe());
    }
    let default_sizes = |max: usize| -> Vec<usize> {
        [64, 1024, 8192, 65536, MAX_TCP]
            .into_iter()
            .filter(|s| *s <= max)
            .collect()
    };
    if a.udp {
        let max_udp = net.max_udp();
        let sizes = a.sizes.clone().unwrap_or_else(|| default_sizes(8192));
        let send = if a.bandwidth {
            sizes.iter().copied().max().unwrap_or(1).min(max_udp)
        } else {
            1
        };
        let any = SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 0, 0, 0);
        let mut link = net.udp(any, send, false)?;
        link.set_peer(server);
        if a.latency {
            rows.push(udp_test(&mut *link, a, true, 1).map_err(|e| io_fail("UDP latency", e))?);
        }
        if a.bandwidth {
            for size in sizes {
                if size > max_udp {
                    return Err(Fail(
                        2,
                        format!("--sizes: {size} is more than the largest UDP payload {max_udp}"),
                    ));
                }
                rows.push(
                    udp_test(&mut *link, a, false, size)
                        .map_err(|e| io_fail("UDP bandwidth", e))?,
                );
            }
        }
    }
    if a.tcp {
        if a.latency {
            let mut link = net.connect(server, 1, true)?;
            rows.push(tcp_test(&mut *link, a, true, 1).map_err(|e| io_fail("TCP latency", e))?);
        }
        if a.bandwidth {
            for size in a.sizes.clone().unwrap_or_else(|| default_sizes(MAX_TCP)) {
                let mut link = net.connect(server, size, false)?;
                rows.push(
                    tcp_test(&mut *link, a, false, size)
                        .map_err(|e| io_fail("TCP bandwidth", e))?,
                );
            }
        }
    }
    Ok(rows)
}

/// Round trips measured, and the unmeasured ones before them.
fn warmup(a: &Args) -> u64 {
    (a.iters / 10).clamp(1, 1000)
}

/// Messages of `size` for a bandwidth test.
fn bw_count(a: &Args, size: usize) -> u64 {
    (a.bytes / size as u64).max(1)
}

fn tcp_test(link: &mut dyn Link, a: &Args, lat: bool, size: usize) -> io::Result<Row> {
    let warm = if lat { warmup(a) } else { 0 };
    link.send(format!("{}\n", hello_line(lat, size, warm)).as_bytes())?;
    let ok = read_line(link)?;
    if ok.as_deref() != Some("QPIPPERF OK") {
        return Err(io::Error::other(format!("server answered {ok:?}")));
    }
    link.prepare(size)?;
    let mut row = Row::new("tcp", lat, size);
    // A round trip: the echo always comes (or the test fails).
    let span = measure(link, a, lat, size, &mut row, |link: &mut dyn Link| {
        link.send_pattern(size)?;
        take_echo(link, size)?;
        Ok(true)
    })?;
    link.close_write()?;
    let done = read_line(link)?.unwrap_or_default();
    // Bandwidth: until the server's report, as the rate.
    span.end(link, &mut row);
    let d = parse_done(&done)
        .ok_or_else(|| io::Error::other(format!("server answered {done:?} at the end")))?;
    (row.bytes_received, row.server_cpu_ns) = (d.bytes, d.cpu_ns);
    row.server_busy_us = d.busy_us;
    row.server_counters = d.counters;
    row.msgs_received = if lat { d.msgs } else { d.bytes / size as u64 };
    // Per message sent, whatever the server's reads were (a stream has no messages).
    row.server_msgs = row.msgs_received;
    if !lat && d.bytes != row.bytes_sent {
        return Err(io::Error::other(format!(
            "server received {} bytes, {} sent",
            d.bytes, row.bytes_sent
        )));
    }
    // The server closes after its answer.
    let mut buf = [0u8; 256];
    while let Some((n, _)) = link.recv(&mut buf, Some(T))? {
        if n == 0 {
            break;
        }
    }
    link.finish()?;
    row.rtt_ns.sort_unstable();
    Ok(row)
}

/// The client's readings at the start of a test's measured part.
struct Span {
    counters: Option<Counters>,
    cpu_ns: u64,
    busy_us: Option<u64>,
    t0: Instant,
    /// Latency: the busy time when the last round trip ended (bandwidth: read at the
    /// end, once the server's report came).
    busy_end: Option<Option<u64>>,
}

impl Span {
    fn start(link: &dyn Link) -> Span {
        let counters = link.counters();
        Span {
            counters,
            cpu_ns: cpu_ns(),
            busy_us: counters::guest_busy_us(),
            t0: Instant::now(),
            busy_end: None,
        }
    }

    /// The client's share of `row` at the end of the test: the time, busy time and CPU
    /// time since the start, and how the link's counters grew.
    fn end(self, link: &dyn Link, row: &mut Row) {
        row.elapsed = self.t0.elapsed();
        let busy1 = self.busy_end.unwrap_or_else(counters::guest_busy_us);
        row.client_busy_us = busy_since(self.busy_us, busy1);
        row.client_cpu_ns = cpu_ns() - self.cpu_ns;
        row.client_counters = grown(link, &self.counters);
    }
}

/// The measured part of a test, into `row`. Latency: the warm-up, then timed round trips
/// (`round_trip` sends one and says whether its answer came; one that did not counts as
/// lost). Bandwidth: messages of `size` back to back. Either stops at `--duration`.
fn measure(
    link: &mut dyn Link,
    a: &Args,
    lat: bool,
    size: usize,
    row: &mut Row,
    mut round_trip: impl FnMut(&mut dyn Link) -> io::Result<bool>,
) -> io::Result<Span> {
    if !lat {
        let span = Span::start(link);
        let count = bw_count(a, size);
        while row.msgs < count && span.t0.elapsed() < a.duration {
            link.send_pattern(size)?;
            row.msgs += 1;
        }
        row.bytes_sent = row.msgs * size as u64;
        return Ok(span);
    }
    for _ in 0..warmup(a) {
        round_trip(link)?;
    }
    let mut span = Span::start(link);
    while row.msgs + row.lost < a.iters && span.t0.elapsed() < a.duration {
        let t = Instant::now();
        if round_trip(link)? {
            row.rtt_ns.push(t.elapsed().as_nanos() as u64);
            row.msgs += 1;
        } else {
            row.lost += 1;
        }
    }
    span.busy_end = Some(counters::guest_busy_us());
    row.bytes_sent = (row.msgs + row.lost) * size as u64;
    Ok(span)
}

/// The busy time between two readings of [`counters::guest_busy_us`], µs.
fn busy_since(start: Option<u64>, end: Option<u64>) -> Option<u64> {
    Some(end?.saturating_sub(start?))
}

/// Takes the `size` bytes of an echo as they arrive (counted where they are, not read).
fn take_echo(link: &mut dyn Link, size: usize) -> io::Result<()> {
    let mut got = 0;
    while got < size {
        match link.hold(Some(T))? {
            None => return Err(io::Error::new(io::ErrorKind::TimedOut, "no echo")),
            Some((0, _)) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "server closed",
                ))
            }
            Some((n, _)) => got += n,
        }
        link.release()?;
    }
    Ok(())
}

/// Sends the control datagram `req` until an answer starting with `want` comes.
fn udp_ask(link: &mut dyn Link, req: &str, want: &str) -> io::Result<String> {
    let mut buf = vec![0u8; 65536];
    let deadline = Instant::now() + T;
    while Instant::now() < deadline {
        link.send(req.as_bytes())?;
        let until = Instant::now() + Duration::from_millis(300);
        while let Some(left) = until.checked_duration_since(Instant::now()) {
            if let Some((n, _)) = link.recv(&mut buf, Some(left))? {
                let s = String::from_utf8_lossy(&buf[..n]);
                if s.starts_with(want) {
                    return Ok(s.into_owned());
                }
            }
        }
    }
    Err(io::Error::new(
        io::ErrorKind::TimedOut,
        format!("no answer to {req:?} within {T:?}"),
    ))
}

fn udp_test(link: &mut dyn Link, a: &Args, lat: bool, size: usize) -> io::Result<Row> {
    let warm = if lat { warmup(a) } else { 0 };
    udp_ask(link, &hello_line(lat, size, warm), "QPIPPERF OK")?;
    link.prepare(size)?;
    let mut row = Row::new("udp", lat, size);
    // One ping: true if its echo came within a second (control datagrams are skipped).
    let ping = |link: &mut dyn Link| -> io::Result<bool> {
        link.send_pattern(size)?;
        let until = Instant::now() + Duration::from_secs(1);
        while let Some(left) = until.checked_duration_since(Instant::now()) {
            if link.hold(Some(left))?.is_some() {
                let data = !link.held().starts_with(MAGIC);
                link.release()?;
                if data {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    };
    let span = measure(link, a, lat, size, &mut row, ping)?;
    let done = udp_ask(link, "QPIPPERF end", "QPIPPERF DONE ")?;
    span.end(link, &mut row);
    let d =
        parse_done(&done).ok_or_else(|| io::Error::other(format!("server answered {done:?}")))?;
    (
        row.bytes_received,
        row.msgs_received,
        row.server_cpu_ns,
        row.server_msgs,
    ) = (d.bytes, d.msgs, d.cpu_ns, d.msgs);
    row.server_busy_us = d.busy_us;
    row.server_counters = d.counters;
    row.rtt_ns.sort_unstable();
    Ok(row)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the server did with a [`Scripted`] link.
    #[derive(Default)]
    struct Log {
        /// `set_spin` calls, whether the link was spinning as each datagram came, and the
        /// replies sent.
        spin: Vec<bool>,
        spinning_at: Vec<bool>,
        sent: Vec<String>,
        now: bool,
    }

    /// A UDP link that delivers `incoming` datagrams in turn, then fails (which ends
    /// `serve_udp`).
    struct Scripted {
        incoming: std::collections::VecDeque<Vec<u8>>,
        held: Vec<u8>,
        log: std::sync::Arc<std::sync::Mutex<Log>>,
    }

    impl Link for Scripted {
        fn send(&mut self, data: &[u8]) -> io::Result<()> {
            let line = String::from_utf8_lossy(data).into();
            self.log.lock().unwrap().sent.push(line);
            Ok(())
        }
        fn prepare(&mut self, _: usize) -> io::Result<()> {
            Ok(())
        }
        fn send_pattern(&mut self, _: usize) -> io::Result<()> {
            Ok(())
        }
        fn recv(
            &mut self,
            _: &mut [u8],
            _: Option<Duration>,
        ) -> io::Result<Option<(usize, Option<SocketAddrV6>)>> {
            unreachable!("the UDP server holds")
        }
        fn hold(
            &mut self,
            _: Option<Duration>,
        ) -> io::Result<Option<(usize, Option<SocketAddrV6>)>> {
            let d = self
                .incoming
                .pop_front()
                .ok_or_else(|| io::Error::other("end of script"))?;
            let mut log = self.log.lock().unwrap();
            let now = log.now;
            log.spinning_at.push(now);
            let n = d.len();
            self.held = d;
            Ok(Some((
                n,
                Some(SocketAddrV6::new(Ipv6Addr::LOCALHOST, 9, 0, 0)),
            )))
        }
        fn held(&self) -> &[u8] {
            &self.held
        }
        fn release(&mut self) -> io::Result<()> {
            Ok(())
        }
        fn echo(&mut self) -> io::Result<()> {
            Ok(())
        }
        fn set_peer(&mut self, _: SocketAddrV6) {}
        fn close_write(&mut self) -> io::Result<()> {
            Ok(())
        }
        fn finish(&mut self) -> io::Result<()> {
            Ok(())
        }
        fn counters(&self) -> Option<Counters> {
            None
        }
        fn set_spin(&mut self, spin: bool) {
            let mut log = self.log.lock().unwrap();
            log.spin.push(spin);
            log.now = spin;
        }
    }

    #[test]
    fn the_udp_server_busy_polls_through_a_bandwidth_test_only() {
        let log = std::sync::Arc::new(std::sync::Mutex::new(Log::default()));
        let script = [
            hello_line(true, 1, 0).into_bytes(),
            vec![0x5a],
            b"QPIPPERF end".to_vec(),
            hello_line(false, 1024, 0).into_bytes(),
            vec![0x5a; 1024],
            vec![0x5a; 1024],
            b"QPIPPERF end".to_vec(),
        ];
        serve_udp(Box::new(Scripted {
            incoming: script.into_iter().collect(),
            held: Vec::new(),
            log: log.clone(),
        }));
        let log = log.lock().unwrap();
        // Latency: no spinning; bandwidth: on at its hello, off at its end.
        assert_eq!(log.spin, [false, false, true, false]);
        assert_eq!(
            log.spinning_at,
            [false, false, false, false, true, true, true]
        );
        let done = log.sent.iter().filter(|l| l.starts_with("QPIPPERF DONE"));
        assert_eq!(done.count(), 2, "{:?}", log.sent);
    }

    #[test]
    fn hello_and_done_lines_parse() {
        let hello = |lat, size, warmup| Some(Hello { lat, size, warmup });
        assert_eq!(parse_hello(&hello_line(true, 1, 200)), hello(true, 1, 200));
        assert_eq!(hello_line(false, 65536, 0), "QPIPPERF v1 bw 65536 0");
        // A client of an older version says nothing of its warm-up.
        assert_eq!(parse_hello("QPIPPERF v1 lat 1"), hello(true, 1, 0));
        assert_eq!(parse_hello("QPIPPERF v1 bw 65536"), hello(false, 65536, 0));
        assert_eq!(parse_hello("QPIPPERF v1 echo 1"), None);
        assert_eq!(parse_hello("QPIPPERF v1 lat 1 x"), None);
        let c = Counters(vec![("kicks".into(), 2), ("tcp_segs_out".into(), 9)]);
        let line = done_line(100, 4, 5000, Some(70000), Some(c.clone()));
        assert_eq!(
            line,
            "QPIPPERF DONE 100 4 5000 guest_busy_us=70000 kicks=2 tcp_segs_out=9"
        );
        let d = parse_done(&line).unwrap();
        assert_eq!((d.bytes, d.msgs, d.cpu_ns), (100, 4, 5000));
        assert_eq!(d.busy_us, Some(70000));
        // The busy time is not one of the counters.
        assert_eq!(d.counters, Some(c));
        // A server without counters (sockets): its busy time only.
        let d = parse_done(&done_line(1, 2, 3, Some(40), None)).unwrap();
        assert_eq!((d.busy_us, d.counters), (Some(40), None));
        // Without /proc/stat, or of an older version.
        let d = parse_done(&done_line(1, 2, 3, None, None)).unwrap();
        assert_eq!((d.busy_us, d.counters), (None, None));
        assert_eq!(
            parse_done("QPIPPERF DONE 1 2 3 kicks=1").unwrap().busy_us,
            None
        );
        assert_eq!(parse_done("QPIPPERF DONE 1 2"), None);
    }

    #[test]
    fn the_server_busy_time_starts_at_the_first_measured_message() {
        let mut m = BusyMark::new(3);
        assert_eq!(m.since(), None, "no measured message yet");
        for msgs in 0..3 {
            m.arriving(msgs);
            assert!(m.start.is_none(), "warm-up message {msgs}");
        }
        m.arriving(3);
        let start = m.start.unwrap().expect("/proc/stat");
        // Later messages keep the start.
        m.arriving(4);
        assert_eq!(m.start, Some(Some(start)));
        assert!(m.since().is_some());
        let mut bw = BusyMark::new(0);
        bw.arriving(0);
        assert!(bw.start.is_some());
        assert_eq!(busy_since(Some(5), Some(12)), Some(7));
        assert_eq!(busy_since(None, Some(12)), None);
        assert_eq!(busy_since(Some(12), Some(5)), Some(0));
    }
}
