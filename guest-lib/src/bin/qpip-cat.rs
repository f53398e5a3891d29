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
//!
//! Bulk data moves as queue pairs are meant to be used: up to 32 TCP sends of up to
//! 256 KiB in flight (a message carries at most 256 KiB, so a receiver takes any message
//! a sender makes), the next stdin reads overlapping the sends in flight, and 32 receive
//! buffers of 256 KiB (8 posted before the connection exists, the rest once data comes),
//! whose completed data goes to stdout with one `writev` per batch of completions. When
//! stdin is a regular file (TCP) the file is not read at all: its pages are mapped,
//! registered as memory regions (windows of 2 MiB growing to 16 MiB) and sent from in
//! place, so no byte is copied on the way out — on the device for a file in tmpfs (the
//! only files whose shared pages may be pinned for the device; the file is reopened
//! read-write for that, and never written), with the software provider for any regular
//! file. Pipes, terminals and other files are read into registered buffers; the file
//! offset of stdin ends where `read` would have left it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io;
use std::net::{Ipv6Addr, SocketAddrV6};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use qpip::{
    Completion, Context, Cq, EventKind, Framing, MemoryRegion, Opcode, Qp, QpInit, QpKind, SendWr,
    Status,
};

const USAGE: &str = "usage: qpip-cat [-u] [--stream|--message] [--provider soft|device] [-w SECS] [-v] (-l [ADDR] PORT | ADDR PORT)";

/// TCP: bytes per send (one stdin read, or one piece of a mapped file) and per receive
/// buffer; in message framing the largest message sent and taken.
const TCP_CHUNK: usize = 256 * 1024;
/// TCP: sends in flight and receive buffers posted (8 MiB of receive window).
const TCP_SLOTS: usize = 32;
/// Largest datagram sent; receive buffers take the largest UDP payload.
const UDP_CHUNK: usize = 8192;
const UDP_RECV: usize = 65536;
/// UDP: send and receive buffers in flight.
const UDP_SLOTS: usize = 16;
/// TCP: receive buffers posted before any data arrives (2 MiB of window); the rest are
/// registered and posted with the first data, so a sender does not pay for them.
const TCP_FIRST_RECVS: usize = 8;
/// Bytes of a regular-file stdin mapped and registered at a time: 2 MiB first, so the
/// first send goes out soon, then twice the window before, up to 16 MiB; each window is
/// registered while the sends of the one before are in flight.
const WINDOW: usize = 16 << 20;
const FIRST_WINDOW: usize = 2 << 20;
/// Completions taken per poll of the CQ.
const BATCH: usize = 64;
/// Most buffers one `writev` takes (IOV_MAX on Linux).
const MAX_IOV: usize = 1024;

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
    let slots = if args.udp { UDP_SLOTS } else { TCP_SLOTS } as u32;
    let cq = ctx
        .create_cq((4 * slots).next_power_of_two())
        .map_err(|e| ("create CQ", e))?;
    let kind = if args.udp {
        QpKind::Udp
    } else {
        QpKind::Tcp(args.framing)
    };
    let init = QpInit::new(kind, &cq).depth(slots, slots);
    let qp = ctx.create_qp(&init).map_err(|e| ("create QP", e))?;
    let say = |msg: String| {
        if args.verbose {
            eprintln!("qpip-cat: {msg}");
        }
    };
    say(format!("provider {:?}", ctx.provider()));
    let mut cat = Cat::new(&ctx, &cq, &qp, &args)?;
    if !args.udp {
        // Receive buffers before the connection, so its first window is open.
        cat.post_receives()?;
    }
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
        cat.post_receives()?;
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
    cat.peer = peer;
    cat.open_input()?;
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

/// What stdin is, for the copy loop.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Input {
    /// A pipe, terminal or socket: read when poll(2) says so.
    Poll,
    /// A regular file (or block device): reads never wait, so no poll(2).
    File,
}

/// A regular-file stdin sent from its pages: the file from `pos` to `end` (its size when
/// the transfer began), mapped and registered a window at a time.
struct Mapped {
    /// The descriptor mapped: stdin, or stdin reopened read-write (device).
    fd: Option<OwnedFd>,
    /// A shared, writable mapping (the device pins its pages for writing) or a private,
    /// read-only one (software provider).
    shared: bool,
    pos: u64,
    end: u64,
    /// Windows mapped so far.
    windows: usize,
    /// The window being sent: its region and the file offset of the region's first byte.
    win: Option<(MemoryRegion, u64)>,
}

impl Mapped {
    fn raw_fd(&self) -> RawFd {
        self.fd.as_ref().map_or(0, |f| f.as_raw_fd())
    }
}

/// `wr_id` of a send from a mapped file (copy buffers are named by their index).
const MAPPED_WR: u64 = 1 << 63;

/// The copy loop: sends from stdin (mapped, or read into registered buffers), receive
/// buffers written to stdout, one poll(2) over stdin, the CQ and the context's events.
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
    input: Input,
    map: Option<Mapped>,
    /// Copy buffers for stdin reads, registered as they are first needed.
    send_bufs: Vec<MemoryRegion>,
    free_sends: Vec<usize>,
    /// Sends posted and not completed.
    in_flight: usize,
    slots: usize,
    /// The receive buffers, `rlen` bytes each: the first `first_recvs` in one region, the
    /// rest (once data came) in a second.
    recv: Vec<MemoryRegion>,
    first_recvs: usize,
    rlen: usize,
    /// Receives completed with data, in order, to write out and post again.
    ready: Vec<(usize, usize)>,
    chunk: usize,
    stdin_done: bool,
    /// TCP: our FIN was asked for, and its Close event came.
    closing: bool,
    closed: bool,
    /// TCP: the peer's end of stream arrived.
    peer_done: bool,
    last_input: Instant,
}

impl<'a> Cat<'a> {
    fn new(ctx: &'a Context, cq: &'a Cq, qp: &'a Qp, args: &Args) -> Result<Cat<'a>, Fail> {
        let (chunk, rlen, slots, first_recvs) = if args.udp {
            let max = ctx.limits().max_udp_payload as usize;
            (
                UDP_CHUNK.min(max),
                UDP_RECV.min(max.max(1)),
                UDP_SLOTS,
                UDP_SLOTS,
            )
        } else {
            (TCP_CHUNK, TCP_CHUNK, TCP_SLOTS, TCP_FIRST_RECVS)
        };
        let recv = ctx
            .alloc(rlen * first_recvs)
            .map_err(|e| ("register memory", e))?;
        Ok(Cat {
            ctx,
            cq,
            qp,
            udp: args.udp,
            listen: args.listen,
            verbose: args.verbose,
            wait: args.wait,
            peer: None,
            input: Input::Poll,
            map: None,
            send_bufs: Vec::new(),
            free_sends: Vec::new(),
            in_flight: 0,
            slots,
            recv: vec![recv],
            first_recvs,
            rlen,
            ready: Vec::with_capacity(slots),
            chunk,
            stdin_done: false,
            closing: false,
            closed: false,
            peer_done: false,
            last_input: Instant::now(),
        })
    }

    fn say(&self, msg: impl std::fmt::Display) {
        if self.verbose {
            eprintln!("qpip-cat: {msg}");
        }
    }

    fn post_receives(&mut self) -> Result<(), Fail> {
        for slot in 0..self.first_recvs {
            self.post_recv(slot)?;
        }
        Ok(())
    }

    /// The rest of the receive buffers, once data arrives.
    fn more_receives(&mut self) -> Result<(), Fail> {
        let more = self.slots - self.first_recvs;
        let mr = self
            .ctx
            .alloc(self.rlen * more)
            .map_err(|e| ("register memory", e))?;
        self.recv.push(mr);
        for slot in self.first_recvs..self.slots {
            self.post_recv(slot)?;
        }
        Ok(())
    }

    /// Receive buffer `slot`: its region and offset.
    fn recv_buf(&self, slot: usize) -> (&MemoryRegion, usize) {
        match slot.checked_sub(self.first_recvs) {
            None => (&self.recv[0], slot * self.rlen),
            Some(i) => (&self.recv[1], i * self.rlen),
        }
    }

    fn post_recv(&self, slot: usize) -> Result<(), Fail> {
        let (mr, off) = self.recv_buf(slot);
        let sge = [mr.sge(off, self.rlen)];
        self.qp
            .post_recv(slot as u64, &sge)
            .map_err(|e| ("post receive", e))?;
        Ok(())
    }

    /// Looks at stdin: a regular file is sent from its mapping where that works (TCP),
    /// read without waiting otherwise; anything else is read when poll(2) says so.
    fn open_input(&mut self) -> Result<(), Fail> {
        // SAFETY: fstat writes into the zeroed stat it is given.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(0, &mut st) } != 0 {
            // No stdin at all: treat it like an empty one, as read() would.
            return Ok(());
        }
        let fmt = st.st_mode & libc::S_IFMT;
        if fmt != libc::S_IFREG && fmt != libc::S_IFBLK {
            return Ok(());
        }
        self.input = Input::File;
        if fmt != libc::S_IFREG || self.udp {
            return Ok(());
        }
        // SAFETY: lseek on descriptor 0 only moves or reads its offset.
        let pos = unsafe { libc::lseek(0, 0, libc::SEEK_CUR) };
        if pos < 0 || pos >= st.st_size {
            return Ok(());
        }
        match self.map_file(pos as u64, st.st_size as u64) {
            Ok(m) => {
                self.say(format!(
                    "stdin: {} bytes of a regular file, sent from its mapped pages (zero-copy)",
                    m.end - m.pos
                ));
                self.map = Some(m);
            }
            Err(why) => self.say(format!("stdin: a regular file, read into buffers ({why})")),
        }
        Ok(())
    }

    /// Prepares sending `pos..end` of stdin from its pages and maps the first window.
    fn map_file(&self, pos: u64, end: u64) -> Result<Mapped, String> {
        let soft = self.ctx.provider() == qpip::ProviderKind::Soft;
        let fd = if soft {
            None
        } else {
            // The device pins the pages for writing (every region may be written), which
            // the kernel allows long-term for shared memory (tmpfs) only, and which needs a
            // writable shared mapping: a read-write descriptor. Nothing is ever written.
            // SAFETY: fstatfs writes into the zeroed statfs it is given.
            let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
            if unsafe { libc::fstatfs(0, &mut fs) } != 0 {
                return Err(format!("fstatfs: {}", io::Error::last_os_error()));
            }
            if fs.f_type as i64 != libc::TMPFS_MAGIC {
                return Err("not in tmpfs".into());
            }
            // SAFETY: opening a path; the descriptor returned is owned below.
            let fd =
                unsafe { libc::open(c"/proc/self/fd/0".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
            if fd < 0 {
                return Err(format!(
                    "cannot reopen it read-write: {}",
                    io::Error::last_os_error()
                ));
            }
            // SAFETY: fd was just opened and nothing else owns it.
            Some(unsafe { OwnedFd::from_raw_fd(fd) })
        };
        let mut m = Mapped {
            fd,
            shared: !soft,
            pos,
            end,
            windows: 0,
            win: None,
        };
        self.next_window(&mut m)?;
        Ok(m)
    }

    /// Maps and registers the window of the file that starts at `m.pos`.
    fn next_window(&self, m: &mut Mapped) -> Result<(), String> {
        m.win = None;
        let page = page_size() as u64;
        let base = m.pos / page * page;
        let most = (FIRST_WINDOW << m.windows.min(8)).min(WINDOW);
        let len = (m.end - base).min(most as u64) as usize;
        let (prot, flags) = if m.shared {
            (libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED)
        } else {
            (libc::PROT_READ, libc::MAP_PRIVATE)
        };
        // SAFETY: a new mapping at an address the kernel picks; nothing refers to it yet.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                flags,
                m.raw_fd(),
                base as _,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(format!("mmap: {}", io::Error::last_os_error()));
        }
        // SAFETY: p is a fresh mapping of len bytes that nothing else refers to.
        let buf = unsafe { adopt_mapping(p.cast(), len) }.ok_or("too many mappings")?;
        let mr = self
            .ctx
            .register(buf)
            .map_err(|e| format!("cannot register its mapping: {e}"))?;
        m.win = Some((mr, base));
        m.windows += 1;
        Ok(())
    }

    fn finished(&self) -> bool {
        if !self.udp {
            return self.closed && self.peer_done;
        }
        let sent = self.in_flight == 0;
        let quiet = self.wait.is_some_and(|w| self.last_input.elapsed() >= w);
        if self.listen {
            // Only -w ends a UDP listener: quiet for that long after the first datagram.
            sent && quiet && self.peer.is_some()
        } else {
            sent && self.stdin_done && (self.wait.is_none() || quiet)
        }
    }

    /// Stdin is wanted: not at its end, a send may be posted and (UDP) someone to send to.
    fn want_stdin(&self) -> bool {
        !self.stdin_done
            && !self.closing
            && self.in_flight < self.slots
            && (!self.udp || self.peer.is_some())
    }

    fn run(&mut self) -> Result<(), Fail> {
        let mut comps = [Completion::default(); BATCH];
        let mut armed = false;
        loop {
            // Completions first, without a system call.
            let n = self.cq.poll(&mut comps);
            for c in &comps[..n] {
                self.complete(c)?;
            }
            self.write_out()?;
            while let Some(ev) = self.ctx.poll_event().map_err(|e| ("events", e))? {
                self.event(ev)?;
            }
            if self.finished() {
                return Ok(());
            }
            // Stdin that never waits (a mapped or regular file) goes out at once, while
            // the sends before it are in flight.
            let mut busy = n > 0;
            if self.input == Input::File && self.want_stdin() {
                busy |= self.feed()?;
            }
            if busy {
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
            let want_stdin = self.input == Input::Poll && self.want_stdin();
            let mut fds = [
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
                libc::pollfd {
                    fd: 0,
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            let nfds = if want_stdin { 3 } else { 2 };
            let timeout_ms = match self.wait {
                Some(w) if self.udp => {
                    let left = w.saturating_sub(self.last_input.elapsed());
                    (left.as_millis().min(i32::MAX as u128) as i32).max(1)
                }
                _ => -1,
            };
            // SAFETY: `fds` is a valid array of at least `nfds` pollfd entries that
            // outlives the call.
            let r = unsafe { libc::poll(fds.as_mut_ptr(), nfds as libc::nfds_t, timeout_ms) };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
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

    /// Posts what a file stdin has, up to the sends allowed in flight. Whether anything
    /// happened.
    fn feed(&mut self) -> Result<bool, Fail> {
        let mut any = false;
        while self.want_stdin() {
            if self.map.is_some() {
                self.send_mapped()?;
            } else {
                self.read_stdin()?;
            }
            any = true;
        }
        Ok(any)
    }

    /// One send from the mapped file; the next window is mapped when one is used up. When
    /// the mapped part is sent (or a window cannot be mapped) stdin's offset moves past
    /// what was sent and reads take over (a file that grew meanwhile is read to its end).
    fn send_mapped(&mut self) -> Result<(), Fail> {
        let mut m = self.map.take().expect("a mapped stdin");
        if m.pos < m.end {
            let win_end = m.win.as_ref().map(|(mr, base)| base + mr.len() as u64);
            if win_end.is_none_or(|e| m.pos >= e) {
                if let Err(why) = self.next_window(&mut m) {
                    self.say(format!("stdin: reading the rest of the file ({why})"));
                    m.end = m.pos;
                }
            }
        }
        if m.pos < m.end {
            let (mr, base) = m.win.as_ref().expect("a mapped window");
            let off = (m.pos - base) as usize;
            let len = (mr.len() - off).min(self.chunk);
            let sge = [mr.sge(off, len)];
            self.qp
                .post_send(&SendWr::new(MAPPED_WR, &sge))
                .map_err(|e| ("send", e))?;
            self.in_flight += 1;
            m.pos += len as u64;
        }
        if m.pos < m.end {
            self.map = Some(m);
            return Ok(());
        }
        // The sends in flight keep the last window registered and mapped until they
        // complete; the region goes with the last of them.
        // SAFETY: lseek on descriptor 0 only moves its offset.
        if unsafe { libc::lseek(0, m.pos as libc::off_t, libc::SEEK_SET) } < 0 {
            return Err(("seek stdin", io::Error::last_os_error()).into());
        }
        Ok(())
    }

    /// One read from stdin into a free copy buffer (registering one if none is free), sent
    /// at once; end of stdin starts the close (TCP).
    fn read_stdin(&mut self) -> Result<(), Fail> {
        let slot = match self.free_sends.pop() {
            Some(s) => s,
            None => {
                let mr = self
                    .ctx
                    .alloc(self.chunk)
                    .map_err(|e| ("register memory", e))?;
                self.send_bufs.push(mr);
                self.send_bufs.len() - 1
            }
        };
        let buf = &mut self.send_bufs[slot].as_mut_slice()[..self.chunk];
        let n = loop {
            // SAFETY: buf is valid for writes of buf.len() bytes.
            let r = unsafe { libc::read(0, buf.as_mut_ptr().cast(), buf.len()) };
            if r >= 0 {
                break r as usize;
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(("read stdin", e).into());
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
        self.in_flight += 1;
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
        match c.opcode {
            Opcode::Send => {
                if !c.is_ok() {
                    return Err(Fail(1, format!("send failed: {}", c.status)));
                }
                self.in_flight -= 1;
                if c.wr_id & MAPPED_WR == 0 {
                    self.free_sends.push(c.wr_id as usize);
                }
            }
            Opcode::Recv => {
                let slot = c.wr_id as usize;
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
                        self.say(format!("datagram from {}", fmt_peer(src)));
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
                self.ready.push((slot, c.byte_len as usize));
                if self.recv.len() == 1 && self.first_recvs < self.slots && !self.peer_done {
                    self.more_receives()?;
                }
            }
        }
        Ok(())
    }

    /// Writes the received data in order with as few `writev` calls as it takes, then
    /// posts its buffers again.
    fn write_out(&mut self) -> Result<(), Fail> {
        if self.ready.is_empty() {
            return Ok(());
        }
        let mut iov: Vec<libc::iovec> = self
            .ready
            .iter()
            .map(|&(slot, len)| {
                let (mr, off) = self.recv_buf(slot);
                libc::iovec {
                    iov_base: mr[off..off + len].as_ptr() as *mut libc::c_void,
                    iov_len: len,
                }
            })
            .collect();
        let mut first = 0;
        while first < iov.len() {
            let cnt = (iov.len() - first).min(MAX_IOV);
            // SAFETY: the entries name initialised bytes of the receive region, which the
            // device does not write while their receives are not posted again.
            let r = unsafe { libc::writev(1, iov[first..].as_ptr(), cnt as libc::c_int) };
            if r < 0 {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::Interrupted => continue,
                    io::ErrorKind::WouldBlock => {
                        wait_writable(1).map_err(|e| ("write to stdout", e))?;
                        continue;
                    }
                    _ => return Err(("write to stdout", e).into()),
                }
            }
            let mut done = r as usize;
            while done > 0 {
                let v = &mut iov[first];
                if done >= v.iov_len {
                    done -= v.iov_len;
                    first += 1;
                } else {
                    // SAFETY: done < iov_len keeps the pointer inside the buffer.
                    v.iov_base = unsafe { v.iov_base.cast::<u8>().add(done) }.cast();
                    v.iov_len -= done;
                    done = 0;
                }
            }
            while first < iov.len() && iov[first].iov_len == 0 {
                first += 1;
            }
        }
        let ready = std::mem::take(&mut self.ready);
        for &(slot, _) in &ready {
            self.repost(slot)?;
        }
        self.ready = ready;
        self.ready.clear();
        Ok(())
    }

    fn repost(&mut self, slot: usize) -> Result<(), Fail> {
        if self.peer_done {
            return Ok(());
        }
        self.post_recv(slot)
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

/// Waits until `fd` takes more output (a non-blocking stdout that was full).
fn wait_writable(fd: RawFd) -> io::Result<()> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one valid pollfd that outlives the call.
    if unsafe { libc::poll(&mut p, 1, -1) } < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(())
}

fn page_size() -> usize {
    // SAFETY: sysconf only reads a system value.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

// --- file mappings as registered buffers -------------------------------------------------
//
// `Context::register` takes over a `Vec<u8>` and gives its memory back to the global
// allocator once the last work request naming the region has completed. To register a
// file mapping, the program's allocator (the system's otherwise) hands the mapping out as
// the one allocation a `Vec` asks for right then on this thread, remembers it, and unmaps
// it when it is given back, instead of freeing it.

struct CatAlloc;

#[global_allocator]
static ALLOC: CatAlloc = CatAlloc;

/// Live file mappings handed out: address and length (0 for a free entry).
const MAPS: usize = 8;
static MAP_ADDR: [AtomicUsize; MAPS] = [const { AtomicUsize::new(0) }; MAPS];
static MAP_LEN: [AtomicUsize; MAPS] = [const { AtomicUsize::new(0) }; MAPS];

thread_local! {
    /// A mapping and its length that this thread's next allocation of exactly that many
    /// bytes (alignment 1) returns.
    static ADOPT: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
}

/// The entry of the live mapping at `p`, if it is one.
fn mapping_at(p: *mut u8) -> Option<usize> {
    (0..MAPS).find(|&i| MAP_ADDR[i].load(Ordering::Acquire) == p as usize)
}

/// The mapping of `len` bytes at `p` as a `Vec` that owns it (None when too many are live;
/// the mapping is then unmapped).
///
/// # Safety
/// `p` must be a mapping of `len` bytes (readable) that nothing else refers to.
unsafe fn adopt_mapping(p: *mut u8, len: usize) -> Option<Vec<u8>> {
    let Some(i) = (0..MAPS).find(|&i| {
        MAP_ADDR[i]
            .compare_exchange(0, p as usize, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }) else {
        // SAFETY: the caller's mapping, referred to by nothing.
        unsafe { libc::munmap(p.cast(), len) };
        return None;
    };
    MAP_LEN[i].store(len, Ordering::Release);
    ADOPT.with(|a| a.set((p as usize, len)));
    let mut v = Vec::<u8>::with_capacity(len);
    let taken = ADOPT.with(|a| a.replace((0, 0))).0 == 0;
    if !taken || v.as_ptr() != p.cast_const() || v.capacity() != len {
        // Not the mapping (an allocator that asked otherwise): dropping `v` gives back
        // whatever it holds, the mapping included.
        drop(v);
        if !taken {
            // SAFETY: the caller's mapping, never handed out.
            unsafe { libc::munmap(p.cast(), len) };
            MAP_ADDR[i].store(0, Ordering::Release);
        }
        return None;
    }
    // SAFETY: the mapping's bytes are the file's, all readable and initialised.
    unsafe { v.set_len(len) };
    Some(v)
}

// SAFETY: every block comes from `System` and goes back to it, except the mappings
// `adopt_mapping` hands out (each to one allocation of exactly its size and alignment 1),
// which are unmapped when given back and copied out when grown.
unsafe impl GlobalAlloc for CatAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.align() == 1 {
            let adopted = ADOPT
                .try_with(|a| {
                    let (p, len) = a.get();
                    (p != 0 && len == layout.size()).then(|| {
                        a.set((0, 0));
                        p as *mut u8
                    })
                })
                .ok()
                .flatten();
            if let Some(p) = adopted {
                return p;
            }
        }
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        match mapping_at(p) {
            Some(i) => {
                let len = MAP_LEN[i].load(Ordering::Acquire);
                // SAFETY: the mapping handed out for this block, now given back.
                unsafe { libc::munmap(p.cast(), len) };
                MAP_ADDR[i].store(0, Ordering::Release);
            }
            // SAFETY: a block System allocated, with the caller's guarantees.
            None => unsafe { System.dealloc(p, layout) },
        }
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if mapping_at(p).is_none() {
            // SAFETY: a block System allocated, with the caller's guarantees.
            return unsafe { System.realloc(p, layout, new_size) };
        }
        // SAFETY: the caller guarantees new_size forms a valid layout with this alignment.
        let new = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: a fresh block from System; the mapping stays valid until unmapped below.
        unsafe {
            let q = System.alloc(new);
            if !q.is_null() {
                std::ptr::copy_nonoverlapping(p, q, layout.size().min(new_size));
                self.dealloc(p, layout);
            }
            q
        }
    }
}
