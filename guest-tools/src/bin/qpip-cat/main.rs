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

mod args;
mod cat;
mod mapalloc;

use std::net::{Ipv6Addr, SocketAddrV6};
use std::process::ExitCode;
use std::time::Duration;

use qpip::{Context, EventKind, QpInit, QpKind};

use args::{parse_args, Args, Fail};
use cat::Cat;

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
