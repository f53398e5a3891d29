//! The test protocol, the same over QPs and sockets. Control messages are text starting
//! with `QPIPPERF `; everything else is test data.
//!
//! TCP, one connection per test: the client sends `QPIPPERF v1 lat|bw SIZE\n`, the server
//! answers `QPIPPERF OK\n`; then (latency) each SIZE bytes from the client are echoed, or
//! (bandwidth) the server counts what arrives; the client closes its direction, the server
//! answers `QPIPPERF DONE BYTES MSGS CPU_NS\n` (what it received, its process CPU time
//! over the test) and closes.
//!
//! UDP, one socket/QP: the same hello as a datagram (repeated until `QPIPPERF OK`), data
//! datagrams (echoed in a latency test), and `QPIPPERF end` (repeated until the `DONE`
//! answer).

use std::io;
use std::net::{Ipv6Addr, SocketAddrV6};
use std::time::{Duration, Instant};

use crate::link::Link;
use crate::{resolve, Acceptor, Args, Fail, Net, MAX_TCP, MAX_UDP, T};

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

fn parse_done(s: &str) -> Option<(u64, u64, u64)> {
    let mut w = s
        .strip_prefix("QPIPPERF DONE ")?
        .split_whitespace()
        .map(|x| x.parse::<u64>());
    Some((w.next()?.ok()?, w.next()?.ok()?, w.next()?.ok()?))
}

// ---- server ------------------------------------------------------------------------------

pub fn serve(a: &Args) -> Result<(), Fail> {
    let net = Net::open(a)?;
    let local = match &a.bind {
        Some(b) => resolve(b, a.port)?,
        None => SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, a.port, 0, 0),
    };
    let acceptor = Acceptor::new(&net, local)?;
    let udp = net.udp(local)?;
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
    let cpu0 = cpu_ns();
    let (mut bytes, mut msgs) = (0u64, 0u64);
    let mut buf = vec![0u8; MAX_TCP];
    'test: loop {
        if lat {
            let mut got = 0;
            while got < size {
                match link.recv(&mut buf[got..size], Some(T))? {
                    None => return Err(io::Error::new(io::ErrorKind::TimedOut, "client silent")),
                    Some((0, _)) => break 'test,
                    Some((n, _)) => got += n,
                }
            }
            link.send(&buf[..size])?;
            bytes += size as u64;
            msgs += 1;
        } else {
            match link.recv(&mut buf, Some(T))? {
                None => return Err(io::Error::new(io::ErrorKind::TimedOut, "client silent")),
                Some((0, _)) => break,
                Some((n, _)) => {
                    bytes += n as u64;
                    msgs += 1;
                }
            }
        }
    }
    let cpu = cpu_ns() - cpu0;
    link.send(format!("QPIPPERF DONE {bytes} {msgs} {cpu}\n").as_bytes())?;
    link.finish()
}

fn serve_udp(mut link: Box<dyn Link + Send>) {
    let mut buf = vec![0u8; 65536];
    let (mut lat, mut bytes, mut msgs, mut cpu0) = (false, 0u64, 0u64, cpu_ns());
    loop {
        let (n, src) = match link.recv(&mut buf, None) {
            Ok(Some((n, Some(src)))) => (n, src),
            Ok(_) => continue,
            Err(e) => {
                eprintln!("qpip-perf: UDP: {e}");
                return;
            }
        };
        let msg = &buf[..n];
        let reply = if msg.starts_with(MAGIC) {
            let text = String::from_utf8_lossy(msg).to_string();
            if let Some((l, _)) = parse_hello(&text) {
                (lat, bytes, msgs, cpu0) = (l, 0, 0, cpu_ns());
                Some("QPIPPERF OK".to_string())
            } else if text == "QPIPPERF end" {
                Some(format!("QPIPPERF DONE {bytes} {msgs} {}", cpu_ns() - cpu0))
            } else {
                None
            }
        } else {
            bytes += n as u64;
            msgs += 1;
            lat.then(String::new)
        };
        if let Some(r) = reply {
            link.set_peer(src);
            let data: Vec<u8> = if r.is_empty() {
                buf[..n].to_vec()
            } else {
                r.into_bytes()
            };
            if let Err(e) = link.send(&data) {
                eprintln!("qpip-perf: UDP send to {src}: {e}");
            }
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
        let max_udp = match &net {
            Net::Qp { ctx, .. } => MAX_UDP.min(ctx.limits().max_udp_payload as usize),
            Net::Sockets => MAX_UDP,
        };
        let any = SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 0, 0, 0);
        let mut link = net.udp(any)?;
        link.set_peer(server);
        if a.latency {
            rows.push(udp_test(&mut *link, a, true, 1).map_err(|e| io_fail("UDP latency", e))?);
        }
        if a.bandwidth {
            let sizes = a.sizes.clone().unwrap_or_else(|| default_sizes(8192));
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
            let mut link = net.connect(server)?;
            rows.push(tcp_test(&mut *link, a, true, 1).map_err(|e| io_fail("TCP latency", e))?);
        }
        if a.bandwidth {
            for size in a.sizes.clone().unwrap_or_else(|| default_sizes(MAX_TCP)) {
                let mut link = net.connect(server)?;
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
    let payload = vec![0xa5u8; size];
    let mut row = Row {
        transport: "tcp",
        test: if lat { "latency" } else { "bandwidth" },
        size,
        ..Row::default()
    };
    let mut buf = vec![0u8; size.max(256)];
    let (cpu0, t0);
    if lat {
        for _ in 0..warmup(a) {
            link.send(&payload)?;
            recv_exact(link, &mut buf[..size])?;
        }
        (cpu0, t0) = (cpu_ns(), Instant::now());
        while row.msgs < a.iters && t0.elapsed() < a.duration {
            let t = Instant::now();
            link.send(&payload)?;
            recv_exact(link, &mut buf[..size])?;
            row.rtt_ns.push(t.elapsed().as_nanos() as u64);
            row.msgs += 1;
        }
        row.bytes_sent = row.msgs * size as u64;
    } else {
        (cpu0, t0) = (cpu_ns(), Instant::now());
        let count = bw_count(a, size);
        while row.msgs < count && t0.elapsed() < a.duration {
            link.send(&payload)?;
            row.msgs += 1;
        }
        row.bytes_sent = row.msgs * size as u64;
    }
    link.close_write()?;
    let done = read_line(link)?.unwrap_or_default();
    row.elapsed = t0.elapsed();
    row.client_cpu_ns = cpu_ns() - cpu0;
    let (bytes, msgs, cpu) = parse_done(&done)
        .ok_or_else(|| io::Error::other(format!("server answered {done:?} at the end")))?;
    (row.bytes_received, row.server_msgs, row.server_cpu_ns) = (bytes, msgs, cpu);
    row.msgs_received = if lat { msgs } else { bytes / size as u64 };
    // Per message sent, whatever the server's reads were (a stream has no messages).
    row.server_msgs = row.msgs_received;
    if !lat && bytes != row.bytes_sent {
        return Err(io::Error::other(format!(
            "server received {bytes} bytes, {} sent",
            row.bytes_sent
        )));
    }
    // The server closes after its answer.
    while let Some((n, _)) = link.recv(&mut buf, Some(T))? {
        if n == 0 {
            break;
        }
    }
    link.finish()?;
    row.rtt_ns.sort_unstable();
    Ok(row)
}

fn recv_exact(link: &mut dyn Link, buf: &mut [u8]) -> io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        match link.recv(&mut buf[got..], Some(T))? {
            None => return Err(io::Error::new(io::ErrorKind::TimedOut, "no echo")),
            Some((0, _)) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "server closed",
                ))
            }
            Some((n, _)) => got += n,
        }
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
    let payload = vec![0xa5u8; size];
    let mut buf = vec![0u8; 65536];
    let mut row = Row {
        transport: "udp",
        test: if lat { "latency" } else { "bandwidth" },
        size,
        ..Row::default()
    };
    let (cpu0, t0);
    if lat {
        // One ping: true if its echo came within a second (control datagrams are skipped).
        let mut ping = |link: &mut dyn Link| -> io::Result<bool> {
            link.send(&payload)?;
            let until = Instant::now() + Duration::from_secs(1);
            while let Some(left) = until.checked_duration_since(Instant::now()) {
                match link.recv(&mut buf, Some(left))? {
                    Some((n, _)) if !buf[..n].starts_with(MAGIC) => return Ok(true),
                    _ => {}
                }
            }
            Ok(false)
        };
        for _ in 0..warmup(a) {
            ping(link)?;
        }
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
        (cpu0, t0) = (cpu_ns(), Instant::now());
        let count = bw_count(a, size);
        while row.msgs < count && t0.elapsed() < a.duration {
            link.send(&payload)?;
            row.msgs += 1;
        }
        row.bytes_sent = row.msgs * size as u64;
    }
    let done = udp_ask(link, "QPIPPERF end", "QPIPPERF DONE ")?;
    row.elapsed = t0.elapsed();
    row.client_cpu_ns = cpu_ns() - cpu0;
    let (bytes, msgs, cpu) =
        parse_done(&done).ok_or_else(|| io::Error::other(format!("server answered {done:?}")))?;
    (
        row.bytes_received,
        row.msgs_received,
        row.server_cpu_ns,
        row.server_msgs,
    ) = (bytes, msgs, cpu, msgs);
    row.rtt_ns.sort_unstable();
    Ok(row)
}
