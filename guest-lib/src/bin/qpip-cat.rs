//! `qpip-cat`: an `nc`-like tool over qpip queue pairs — stdin to the peer, the peer to
//! stdout.
//!
//! ```text
//! qpip-cat [OPTIONS] -l [ADDR] PORT     listen (TCP: accept one connection; UDP: answer the
//!                                       first sender)
//! qpip-cat [OPTIONS] ADDR PORT          connect (TCP) or send to ADDR PORT (UDP)
//!   -u                     UDP instead of TCP
//!   --stream | --message   TCP framing: stream (default; talks to plain sockets, `nc -6`)
//!                          or message (QP ⇄ QP: each stdin read is one message)
//!   --provider soft|device the provider (default: QPIP_PROVIDER, else the device if present)
//!   -w SECS                TCP: give up connecting or accepting after SECS;
//!                          UDP: exit once stdin is done and nothing came for SECS
//!   -v                     say on stderr what happens (connected, closed)
//! ```
//!
//! TCP: end of stdin closes the sending direction gracefully (a FIN after every byte);
//! the peer's close ends its direction. The program exits once both directions are
//! closed and what arrived is written out; when stdin is a terminal, the peer's close
//! ends the session at once. UDP: each read from stdin is one datagram (at most 8192 bytes);
//! each datagram's payload is written to stdout. Exit status: 0 on a clean end, 1 when
//! the connection or the device failed (a one-line message on stderr), 2 for bad usage.

use std::io::{Read, Write};
use std::net::{Ipv6Addr, SocketAddrV6};
use std::os::fd::AsRawFd;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use qpip::{
    Completion, Context, Cq, EventKind, Framing, MemoryRegion, Opcode, Qp, QpInit, QpKind, SendWr,
    Status,
};

const USAGE: &str = "usage: qpip-cat [-u] [--stream|--message] [--provider soft|device] [-w SECS] [-v] (-l [ADDR] PORT | ADDR PORT)";

/// Bytes per send (one stdin read) and per receive buffer.
const TCP_CHUNK: usize = 64 * 1024;
/// Largest datagram sent; receive buffers take the largest UDP payload.
const UDP_CHUNK: usize = 8192;
const UDP_RECV: usize = 65536;
/// Send and receive buffers in flight.
const SLOTS: usize = 16;

struct Args {
    udp: bool,
    framing: Framing,
    provider: Option<String>,
    listen: bool,
    addr: Option<String>,
    port: u16,
    wait: Option<Duration>,
    verbose: bool,
}

/// What ends the program: a message and its exit status.
struct Fail(u8, String);

impl<E: std::fmt::Display> From<(&str, E)> for Fail {
    fn from((what, e): (&str, E)) -> Fail {
        Fail(1, format!("{what}: {e}"))
    }
}

fn usage(msg: impl std::fmt::Display) -> Fail {
    Fail(2, format!("{msg}\n{USAGE}"))
}

fn parse_args(mut it: impl Iterator<Item = String>) -> Result<Args, Fail> {
    let mut a = Args {
        udp: false,
        framing: Framing::Stream,
        provider: None,
        listen: false,
        addr: None,
        port: 0,
        wait: None,
        verbose: false,
    };
    let mut pos = Vec::new();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "-u" | "--udp" => a.udp = true,
            "-l" | "--listen" => a.listen = true,
            "-v" | "--verbose" => a.verbose = true,
            "--stream" => a.framing = Framing::Stream,
            "--message" => a.framing = Framing::Message,
            "--provider" => {
                let p = it
                    .next()
                    .ok_or_else(|| usage("--provider needs soft or device"))?;
                if p != "soft" && p != "device" {
                    return Err(usage(format!("--provider {p}: expected soft or device")));
                }
                a.provider = Some(p);
            }
            "-w" | "--wait" => {
                let s = it
                    .next()
                    .ok_or_else(|| usage("-w needs a number of seconds"))?;
                let secs: f64 = s
                    .parse()
                    .ok()
                    .filter(|x: &f64| x.is_finite() && *x > 0.0)
                    .ok_or_else(|| usage(format!("-w {s}: not a positive number of seconds")))?;
                a.wait = Some(Duration::from_secs_f64(secs));
            }
            "-h" | "--help" => return Err(Fail(0, USAGE.to_string())),
            s if s.starts_with('-') && s.len() > 1 => {
                return Err(usage(format!("unknown option {s}")))
            }
            _ => pos.push(arg),
        }
    }
    let port_of = |s: &str| {
        s.parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| usage(format!("{s}: not a port number (1-65535)")))
    };
    match (a.listen, pos.as_slice()) {
        (true, [port]) => a.port = port_of(port)?,
        (_, [addr, port]) => {
            a.addr = Some(addr.clone());
            a.port = port_of(port)?;
        }
        (true, _) => return Err(usage("-l takes [ADDR] PORT")),
        (false, _) => return Err(usage("expected ADDR PORT (or -l PORT)")),
    }
    Ok(a)
}

/// `addr` (an IPv6 address, optionally in brackets, or a name) and `port` as an IPv6
/// socket address; IPv4 addresses become IPv4-mapped ones.
fn resolve(addr: &str, port: u16) -> Result<SocketAddrV6, Fail> {
    qpip::resolve_addr(addr, port).map_err(|e| Fail(1, format!("{addr}: {e}")))
}

fn main() -> ExitCode {
    let result = parse_args(std::env::args().skip(1)).and_then(run);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Fail(0, msg)) => {
            println!("{msg}");
            ExitCode::SUCCESS
        }
        Err(Fail(code, msg)) => {
            eprintln!("qpip-cat: {msg}");
            ExitCode::from(code)
        }
    }
}

fn run(args: Args) -> Result<(), Fail> {
    if let Some(p) = &args.provider {
        // Read by Context::open; set before any other thread exists.
        std::env::set_var(qpip::PROVIDER_ENV, p);
    }
    let ctx = Context::open().map_err(|e| Fail(1, e.to_string()))?;
    let cq = ctx
        .create_cq(4 * SLOTS as u32)
        .map_err(|e| ("create CQ", e))?;
    let kind = if args.udp {
        QpKind::Udp
    } else {
        QpKind::Tcp(args.framing)
    };
    let init = QpInit::new(kind, &cq).depth(SLOTS as u32, SLOTS as u32);
    let qp = ctx.create_qp(&init).map_err(|e| ("create QP", e))?;
    let say = |msg: String| {
        if args.verbose {
            eprintln!("qpip-cat: {msg}");
        }
    };
    say(format!("provider {:?}", ctx.provider()));
    let any = SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 0, 0, 0);
    let peer = if args.udp {
        let local = match (&args.addr, args.listen) {
            (Some(a), true) => resolve(a, args.port)?,
            (None, true) => SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, args.port, 0, 0),
            (_, false) => any,
        };
        let bound = qp
            .bind(local)
            .map_err(|e| Fail(1, format!("bind {local}: {e}")))?;
        say(format!("UDP bound to {bound}"));
        if args.listen {
            None
        } else {
            Some(resolve(args.addr.as_deref().unwrap_or("::1"), args.port)?)
        }
    } else if args.listen {
        let local = match &args.addr {
            Some(a) => resolve(a, args.port)?,
            None => SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, args.port, 0, 0),
        };
        let l = ctx
            .listen(local, 1)
            .map_err(|e| Fail(1, format!("listen on {local}: {e}")))?;
        say(format!("listening on {local}"));
        l.accept(&qp, 0).map_err(|e| ("accept", e))?;
        let ev = ctx
            .wait_event_for(qp.id(), EventKind::Accept, args.wait)
            .map_err(|e| ("accept", e))?
            .ok_or_else(|| {
                Fail(
                    1,
                    format!(
                        "accept on {local}: nobody connected within {:?}",
                        args.wait.unwrap_or_default()
                    ),
                )
            })?;
        if let Some(e) = ev.error() {
            return Err(Fail(1, format!("accept on {local}: {e}")));
        }
        say(format!("connection from {}", fmt_peer(ev.peer)));
        // One connection: the listener goes away at once.
        drop(l);
        ev.peer
    } else {
        let to = resolve(args.addr.as_deref().unwrap_or_default(), args.port)?;
        let t = args.wait.unwrap_or(Duration::from_secs(3600 * 24 * 365));
        qp.connect_wait(to, t)
            .map_err(|e| Fail(1, format!("connect to {to}: {}", short(&e))))?;
        say(format!("connected to {to}"));
        Some(to)
    };
    let mut cat = Cat::new(&ctx, &cq, &qp, &args, peer)?;
    cat.run()?;
    say("done".to_string());
    Ok(())
}

fn fmt_peer(p: Option<SocketAddrV6>) -> String {
    p.map(|p| p.to_string()).unwrap_or_else(|| "?".into())
}

/// The cause of a connection failure without the library's "what failed" prefix.
fn short(e: &qpip::Error) -> String {
    match e {
        qpip::Error::Connection { source, .. } => source.to_string(),
        other => other.to_string(),
    }
}

/// The copy loop: registered send buffers filled from stdin, receive buffers written to
/// stdout, one poll(2) over stdin, the CQ and the context's events.
struct Cat<'a> {
    ctx: &'a Context,
    cq: &'a Cq,
    qp: &'a Qp,
    udp: bool,
    listen: bool,
    verbose: bool,
    wait: Option<Duration>,
    /// UDP: where stdin goes (the listener learns it from the first datagram).
    peer: Option<SocketAddrV6>,
    send_bufs: Vec<MemoryRegion>,
    free_sends: Vec<usize>,
    recv_bufs: Vec<MemoryRegion>,
    chunk: usize,
    stdin_done: bool,
    /// TCP: our FIN was asked for, and its Close event came.
    closing: bool,
    closed: bool,
    /// TCP: the peer's end of stream arrived.
    peer_done: bool,
    last_input: Instant,
    out: std::io::Stdout,
}

impl<'a> Cat<'a> {
    fn new(
        ctx: &'a Context,
        cq: &'a Cq,
        qp: &'a Qp,
        args: &Args,
        peer: Option<SocketAddrV6>,
    ) -> Result<Cat<'a>, Fail> {
        let (chunk, rlen) = if args.udp {
            let max = ctx.limits().max_udp_payload as usize;
            (UDP_CHUNK.min(max), UDP_RECV.min(max.max(1)))
        } else {
            (TCP_CHUNK, TCP_CHUNK)
        };
        let mut send_bufs = Vec::new();
        let mut recv_bufs = Vec::new();
        for _ in 0..SLOTS {
            send_bufs.push(ctx.alloc(chunk).map_err(|e| ("register memory", e))?);
            recv_bufs.push(ctx.alloc(rlen).map_err(|e| ("register memory", e))?);
        }
        for (i, b) in recv_bufs.iter().enumerate() {
            qp.post_recv(i as u64, &[b.sge_all()])
                .map_err(|e| ("post receive", e))?;
        }
        Ok(Cat {
            ctx,
            cq,
            qp,
            udp: args.udp,
            listen: args.listen,
            verbose: args.verbose,
            wait: args.wait,
            peer,
            send_bufs,
            free_sends: (0..SLOTS).rev().collect(),
            recv_bufs,
            chunk,
            stdin_done: false,
            closing: false,
            closed: false,
            peer_done: false,
            last_input: Instant::now(),
            out: std::io::stdout(),
        })
    }

    fn finished(&self) -> bool {
        if !self.udp {
            return self.closed && self.peer_done;
        }
        let sent = self.free_sends.len() == SLOTS;
        let quiet = self.wait.is_some_and(|w| self.last_input.elapsed() >= w);
        if self.listen {
            // Only -w ends a UDP listener: quiet for that long after the first datagram.
            sent && quiet && self.peer.is_some()
        } else {
            sent && self.stdin_done && (self.wait.is_none() || quiet)
        }
    }

    fn run(&mut self) -> Result<(), Fail> {
        let mut comps = [Completion::default(); 32];
        let mut armed = false;
        loop {
            // Completions first, without a system call.
            let n = self.cq.poll(&mut comps);
            for c in &comps[..n] {
                self.complete(c)?;
            }
            if n > 0 {
                self.out.flush().map_err(|e| ("write to stdout", e))?;
            }
            while let Some(ev) = self.ctx.poll_event().map_err(|e| ("events", e))? {
                self.event(ev)?;
            }
            if self.finished() {
                return Ok(());
            }
            if n > 0 {
                continue;
            }
            if !armed {
                // Poll once more after arming, so a completion that came in between is
                // not slept through.
                self.cq.arm().map_err(|e| ("arm CQ", e))?;
                armed = true;
                continue;
            }
            armed = false;
            // stdin only while a send buffer is free and (UDP) someone to send to.
            let want_stdin = !self.stdin_done
                && !self.closing
                && !self.free_sends.is_empty()
                && (!self.udp || self.peer.is_some());
            let mut fds = vec![
                libc::pollfd {
                    fd: self.cq.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: self.ctx.events_fd().as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            if want_stdin {
                fds.push(libc::pollfd {
                    fd: 0,
                    events: libc::POLLIN,
                    revents: 0,
                });
            }
            let timeout_ms = match self.wait {
                Some(w) if self.udp => {
                    let left = w.saturating_sub(self.last_input.elapsed());
                    (left.as_millis().min(i32::MAX as u128) as i32).max(1)
                }
                _ => -1,
            };
            // SAFETY: `fds` is a valid array of `fds.len()` pollfd entries that outlives
            // the call.
            let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
            if r < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(("poll", e).into());
            }
            if fds[0].revents != 0 {
                self.cq.ack();
            }
            if want_stdin && fds[2].revents != 0 {
                self.read_stdin()?;
            }
        }
    }

    fn read_stdin(&mut self) -> Result<(), Fail> {
        let slot = self.free_sends.pop().expect("a free send buffer");
        let chunk = self.chunk;
        let buf = &mut self.send_bufs[slot].as_mut_slice()[..chunk];
        let n = loop {
            match std::io::stdin().lock().read(buf) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(("read stdin", e).into()),
            }
        };
        if n == 0 {
            self.free_sends.push(slot);
            self.stdin_done = true;
            self.last_input = Instant::now();
            if !self.udp {
                self.start_close()?;
            }
            return Ok(());
        }
        let sge = [self.send_bufs[slot].sge(0, n)];
        let mut wr = SendWr::new(slot as u64, &sge);
        if self.udp {
            wr = wr.to(self.peer.expect("UDP peer known"));
        }
        self.qp.post_send(&wr).map_err(|e| ("send", e))?;
        Ok(())
    }

    fn start_close(&mut self) -> Result<(), Fail> {
        if !self.closing {
            self.closing = true;
            self.qp.close(0).map_err(|e| ("close", e))?;
        }
        Ok(())
    }

    fn complete(&mut self, c: &Completion) -> Result<(), Fail> {
        let slot = c.wr_id as usize;
        match c.opcode {
            Opcode::Send => {
                if !c.is_ok() {
                    return Err(Fail(1, format!("send failed: {}", c.status)));
                }
                self.free_sends.push(slot);
            }
            Opcode::Recv => {
                if c.status == Status::Flushed && self.peer_done {
                    return Ok(());
                }
                if !c.is_ok() {
                    let what = if c.status == Status::LocalLength {
                        format!(
                            "a message of {} bytes is larger than the receive buffers",
                            c.byte_len
                        )
                    } else {
                        format!("receive failed: {}", c.status)
                    };
                    return Err(Fail(1, what));
                }
                if self.udp {
                    self.last_input = Instant::now();
                    let src = c.src;
                    if self.peer.is_none() {
                        self.peer = src;
                        if self.verbose {
                            eprintln!("qpip-cat: datagram from {}", fmt_peer(src));
                        }
                    } else if src != self.peer {
                        // One peer, like `nc -u -l`: others are not ours.
                        return self.repost(slot);
                    }
                } else if c.byte_len == 0 {
                    // End of stream: every later receive completes empty too. A
                    // terminal session ends here; otherwise the rest of stdin still goes
                    // out (half-close), so `qpip-cat -l P > file &` — stdin at its end
                    // at once — still receives everything the other side sends.
                    self.peer_done = true;
                    // SAFETY: isatty only inspects descriptor 0.
                    if self.stdin_done || unsafe { libc::isatty(0) } == 1 {
                        return self.start_close();
                    }
                    return Ok(());
                }
                let data = &self.recv_bufs[slot][..c.byte_len as usize];
                self.out
                    .write_all(data)
                    .map_err(|e| ("write to stdout", e))?;
                self.repost(slot)?;
            }
        }
        Ok(())
    }

    fn repost(&mut self, slot: usize) -> Result<(), Fail> {
        if self.peer_done {
            return Ok(());
        }
        let sge = [self.recv_bufs[slot].sge_all()];
        self.qp
            .post_recv(slot as u64, &sge)
            .map_err(|e| ("post receive", e))?;
        Ok(())
    }

    fn event(&mut self, ev: qpip::Event) -> Result<(), Fail> {
        if ev.qp != self.qp.id() {
            return Ok(());
        }
        match ev.kind {
            EventKind::Close => {
                if let Some(e) = ev.error() {
                    return Err(Fail(1, format!("close: {e}")));
                }
                self.closed = true;
            }
            EventKind::PeerClosed if self.verbose => eprintln!("qpip-cat: the peer closed"),
            EventKind::QpError => {
                let why = ev
                    .error()
                    .map(|e| e.to_string())
                    .unwrap_or_else(|| "failed".into());
                return Err(Fail(1, format!("connection lost: {why}")));
            }
            _ => {}
        }
        Ok(())
    }
}
