//! The test protocol, the same over QPs and sockets. Control messages are text starting
//! with `QPIPPERF `; everything else is test data.
//!
//! TCP, one connection per test: the client sends `QPIPPERF v1 lat|bw SIZE\n`, the server
//! answers `QPIPPERF OK\n`; then (latency) the client's SIZE bytes are echoed piece by
//! piece as they arrive, or (bandwidth) the server counts what arrives (without reading
//! it, over QPs and sockets alike); the client closes its direction, the server
//! answers `QPIPPERF DONE BYTES MSGS CPU_NS [NAME=VALUE ...]\n` (what it received, its
//! process CPU time over the test, and how much its counters grew over it: see
//! `counters.rs`; none over sockets) and closes.
//!
//! UDP, one socket/QP: the same hello as a datagram (repeated until `QPIPPERF OK`), data
//! datagrams (echoed in a latency test), and `QPIPPERF end` (repeated until the `DONE`
//! answer).

use std::io;
use std::net::{Ipv6Addr, SocketAddrV6};
use std::time::{Duration, Instant};

use crate::counters::Counters;
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
    /// How much the client's counters grew over the test (QPs).
    pub client_counters: Option<Counters>,
    /// The same of the server, as it reported them.
    pub server_counters: Option<Counters>,
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

/// `v1 lat|bw SIZE` → (latency?, size).
fn parse_hello(s: &str) -> Option<(bool, usize)> {
    let mut w = s.strip_prefix("QPIPPERF v1 ")?.split_whitespace();
    let lat = match w.next()? {
        "lat" => true,
        "bw" => false,
        _ => return None,
    };
    let size = w.next()?.parse().ok()?;
    Some((lat, size))
}

/// What the server's `DONE` says.
#[derive(Debug, PartialEq)]
struct Done {
    bytes: u64,
    msgs: u64,
    cpu_ns: u64,
    counters: Option<Counters>,
}

fn parse_done(s: &str) -> Option<Done> {
    let mut w = s.strip_prefix("QPIPPERF DONE ")?.split_whitespace();
    let mut num = || w.next()?.parse::<u64>().ok();
    let (bytes, msgs, cpu_ns) = (num()?, num()?, num()?);
    Some(Done {
        bytes,
        msgs,
        cpu_ns,
        counters: Counters::from_words(w),
    })
}

fn done_line(bytes: u64, msgs: u64, cpu_ns: u64, counters: Option<Counters>) -> String {
    let mut s = format!("QPIPPERF DONE {bytes} {msgs} {cpu_ns}");
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
    let (lat, size) = parse_hello(&hello)
        .filter(|(_, s)| (1..=MAX_TCP).contains(s))
        .ok_or_else(|| io::Error::other(format!("bad hello {hello:?}")))?;
    link.send(b"QPIPPERF OK\n")?;
    let before = link.counters();
    let cpu0 = cpu_ns();
    let (mut bytes, mut msgs) = (0u64, 0u64);
    // Each piece that arrives is counted (and in a latency test echoed) where it is, not
    // read: the same over sockets and QPs (see link.rs for what each costs).
    'test: loop {
        let mut got = 0;
        while got < size {
            match link.hold(Some(T))? {
                None => return Err(io::Error::new(io::ErrorKind::TimedOut, "client silent")),
                Some((0, _)) => break 'test,
                Some((n, _)) => {
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
    let cpu = cpu_ns() - cpu0;
    let grew = grown(link, &before);
    link.send(format!("{}\n", done_line(bytes, msgs, cpu, grew)).as_bytes())?;
    link.finish()
}

fn serve_udp(mut link: Box<dyn Link + Send>) {
    let (mut lat, mut bytes, mut msgs, mut cpu0) = (false, 0u64, 0u64, cpu_ns());
    let mut before = None;
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
            let reply = if let Some((l, _)) = parse_hello(&text) {
                before = link.counters();
                (lat, bytes, msgs, cpu0) = (l, 0, 0, cpu_ns());
                Some("QPIPPERF OK".to_string())
            } else if text == "QPIPPERF end" {
                let cpu = cpu_ns() - cpu0;
                Some(done_line(bytes, msgs, cpu, grown(&*link, &before)))
            } else {
                None
            };
            link.set_peer(src);
            reply.map_or(Ok(()), |r| link.send(r.as_bytes()))
        } else {
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
    let kind = if lat { "lat" } else { "bw" };
    link.send(format!("QPIPPERF v1 {kind} {size}\n").as_bytes())?;
    let ok = read_line(link)?;
    if ok.as_deref() != Some("QPIPPERF OK") {
        return Err(io::Error::other(format!("server answered {ok:?}")));
    }
    link.prepare(size)?;
    let mut row = Row {
        transport: "tcp",
        test: if lat { "latency" } else { "bandwidth" },
        size,
        ..Row::default()
    };
    let (before, cpu0, t0);
    if lat {
        for _ in 0..warmup(a) {
            link.send_pattern(size)?;
            take_echo(link, size)?;
        }
        before = link.counters();
        (cpu0, t0) = (cpu_ns(), Instant::now());
        while row.msgs < a.iters && t0.elapsed() < a.duration {
            let t = Instant::now();
            link.send_pattern(size)?;
            take_echo(link, size)?;
            row.rtt_ns.push(t.elapsed().as_nanos() as u64);
            row.msgs += 1;
        }
        row.bytes_sent = row.msgs * size as u64;
    } else {
        before = link.counters();
        (cpu0, t0) = (cpu_ns(), Instant::now());
        let count = bw_count(a, size);
        while row.msgs < count && t0.elapsed() < a.duration {
            link.send_pattern(size)?;
            row.msgs += 1;
        }
        row.bytes_sent = row.msgs * size as u64;
    }
    link.close_write()?;
    let done = read_line(link)?.unwrap_or_default();
    row.elapsed = t0.elapsed();
    row.client_cpu_ns = cpu_ns() - cpu0;
    row.client_counters = grown(link, &before);
    let d = parse_done(&done)
        .ok_or_else(|| io::Error::other(format!("server answered {done:?} at the end")))?;
    (row.bytes_received, row.server_cpu_ns) = (d.bytes, d.cpu_ns);
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
    let kind = if lat { "lat" } else { "bw" };
    udp_ask(link, &format!("QPIPPERF v1 {kind} {size}"), "QPIPPERF OK")?;
    link.prepare(size)?;
    let mut row = Row {
        transport: "udp",
        test: if lat { "latency" } else { "bandwidth" },
        size,
        ..Row::default()
    };
    let (before, cpu0, t0);
    if lat {
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
        for _ in 0..warmup(a) {
            ping(link)?;
        }
        before = link.counters();
        (cpu0, t0) = (cpu_ns(), Instant::now());
        while row.msgs + row.lost < a.iters && t0.elapsed() < a.duration {
            let t = Instant::now();
            if ping(link)? {
                row.rtt_ns.push(t.elapsed().as_nanos() as u64);
                row.msgs += 1;
            } else {
                row.lost += 1;
            }
        }
        row.bytes_sent = (row.msgs + row.lost) * size as u64;
    } else {
        before = link.counters();
        (cpu0, t0) = (cpu_ns(), Instant::now());
        let count = bw_count(a, size);
        while row.msgs < count && t0.elapsed() < a.duration {
            link.send_pattern(size)?;
            row.msgs += 1;
        }
        row.bytes_sent = row.msgs * size as u64;
    }
    let done = udp_ask(link, "QPIPPERF end", "QPIPPERF DONE ")?;
    row.elapsed = t0.elapsed();
    row.client_cpu_ns = cpu_ns() - cpu0;
    row.client_counters = grown(link, &before);
    let d =
        parse_done(&done).ok_or_else(|| io::Error::other(format!("server answered {done:?}")))?;
    (
        row.bytes_received,
        row.msgs_received,
        row.server_cpu_ns,
        row.server_msgs,
    ) = (d.bytes, d.msgs, d.cpu_ns, d.msgs);
    row.server_counters = d.counters;
    row.rtt_ns.sort_unstable();
    Ok(row)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_and_done_lines_parse() {
        assert_eq!(parse_hello("QPIPPERF v1 lat 1"), Some((true, 1)));
        assert_eq!(parse_hello("QPIPPERF v1 bw 65536"), Some((false, 65536)));
        assert_eq!(parse_hello("QPIPPERF v1 echo 1"), None);
        let c = Counters(vec![("kicks".into(), 2), ("tcp_segs_out".into(), 9)]);
        let line = done_line(100, 4, 5000, Some(c.clone()));
        assert_eq!(line, "QPIPPERF DONE 100 4 5000 kicks=2 tcp_segs_out=9");
        let d = parse_done(&line).unwrap();
        assert_eq!((d.bytes, d.msgs, d.cpu_ns), (100, 4, 5000));
        assert_eq!(d.counters, Some(c));
        // A server without counters (sockets), or of an older version.
        let d = parse_done(&done_line(1, 2, 3, None)).unwrap();
        assert_eq!(d.counters, None);
        assert_eq!(parse_done("QPIPPERF DONE 1 2"), None);
    }
}
