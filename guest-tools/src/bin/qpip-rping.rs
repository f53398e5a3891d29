//! `qpip-rping`: rping (rdma-core's `librdmacm/examples/rping.c`) over a qpip iWARP QP,
//! so it runs against `rping` on any iWARP device — Linux's soft-iWARP (`siw`), a NIC —
//! or against itself.
//!
//! ```text
//! qpip-rping -s [-a ADDR] [-p PORT] [-C COUNT] [-S SIZE] [-v] [-V] [-q]
//! qpip-rping -c -a ADDR [-p PORT] [-C COUNT] [-S SIZE] [-v] [-V] [-q]
//! ```
//!
//! rping's protocol, per iteration: the client fills its start buffer with
//! `"rdma-ping-N: "` and a rotating run of letters, and sends `{be64 addr, be32 rkey, be32
//! size}` naming it; the server RDMA-Reads that many bytes into its own buffer and sends
//! back a 16-byte "go"; the client sends the same triple for its (empty) RDMA buffer; the
//! server RDMA-Writes what it read into it (the string and its NUL) and sends "go"; with
//! `-V` the client checks that the two buffers are equal. Every message is exactly 16
//! bytes, as rping requires of its peer. `-v` prints each ping's data as rping does; `-q`
//! prints only the closing line. Port 7174 by default, as rping.

use std::net::{Ipv6Addr, SocketAddrV6};
use std::process::ExitCode;
use std::time::Duration;

use qpip::{
    resolve_addr, Access, Completion, Context, Cq, EventKind, MemoryRegion, Mpa, Opcode, Qp,
    QpInit, QpKind, SendWr,
};

const USAGE: &str = "\
usage: qpip-rping -s [-a ADDR] [-p PORT] [-C COUNT] [-S SIZE] [-v] [-V] [-q]
       qpip-rping -c -a ADDR [-p PORT] [-C COUNT] [-S SIZE] [-v] [-V] [-q]
rping over a qpip iWARP QP (interoperates with rdma-core's rping on any iWARP device).
  -s / -c      server / client          -a ADDR   address to listen on / connect to
  -p PORT      port (7174)              -C COUNT  iterations (client default: forever;
  -S SIZE      ping size (64)                     server: until the client leaves)
  -v           print each ping's data   -V        client: check every echo
  -q           only the closing line";

/// How long one step may wait for the peer.
const T: Duration = Duration::from_secs(30);
/// rping's message: `{be64 buf, be32 rkey, be32 size}`.
const INFO: usize = 16;
/// rping's smallest ping: the text and a few letters.
const MIN_SIZE: usize = 16;
/// rping's `RPING_BUFSIZE` cap.
const MAX_SIZE: usize = 64 * 1024;

struct Args {
    server: bool,
    addr: Option<String>,
    port: u16,
    count: Option<u64>,
    size: usize,
    verbose: bool,
    validate: bool,
    quiet: bool,
}

fn parse(args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut a = Args {
        server: false,
        addr: None,
        port: 7174,
        count: None,
        size: 64,
        verbose: false,
        validate: false,
        quiet: false,
    };
    let mut role = None;
    let mut it = args;
    while let Some(arg) = it.next() {
        let mut value = |flag: &str| it.next().ok_or_else(|| format!("{flag} needs a value"));
        let num = |flag: &str, v: String| {
            v.parse::<u64>()
                .map_err(|_| format!("{flag}: {v:?} is not a number"))
        };
        match arg.as_str() {
            "-s" => role = Some(true),
            "-c" => role = Some(false),
            "-a" => a.addr = Some(value("-a")?),
            "-p" => {
                let v = value("-p")?;
                a.port = u16::try_from(num("-p", v)?).map_err(|_| "-p: not a port".to_string())?
            }
            "-C" => {
                let v = value("-C")?;
                a.count = Some(num("-C", v)?)
            }
            "-S" => {
                let v = value("-S")?;
                a.size = num("-S", v)? as usize
            }
            "-v" => a.verbose = true,
            "-V" => a.validate = true,
            "-q" => a.quiet = true,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    a.server = role.ok_or("-s or -c is needed")?;
    if !(MIN_SIZE..=MAX_SIZE).contains(&a.size) {
        return Err(format!("-S {}: from {MIN_SIZE} to {MAX_SIZE}", a.size));
    }
    if !a.server && a.addr.is_none() {
        return Err("the client needs -a ADDR".into());
    }
    Ok(a)
}

type R<T> = Result<T, String>;

fn q<T, E: std::fmt::Display>(r: Result<T, E>, what: &str) -> R<T> {
    r.map_err(|e| format!("{what}: {e}"))
}

/// One end: its QP, CQ and buffers. `info` holds the message sent, `recv` the one received.
struct End {
    qp: Qp,
    cq: Cq,
    info: MemoryRegion,
    recv: MemoryRegion,
}

impl End {
    fn new(ctx: &Context) -> R<End> {
        let cq = q(ctx.create_cq(16), "create CQ")?;
        let qp = q(
            ctx.create_qp(&QpInit::new(QpKind::Tcp(qpip::Framing::Iwarp), &cq).depth(8, 8)),
            "create QP",
        )?;
        Ok(End {
            qp,
            cq,
            info: q(ctx.alloc(INFO), "register")?,
            recv: q(ctx.alloc(INFO), "register")?,
        })
    }

    fn post_recv(&self) -> R<()> {
        q(self.qp.post_recv(1, &[self.recv.sge_all()]), "post receive")
    }

    /// The next completion (of anything), failing on an error one.
    fn next(&self, what: &str) -> R<Completion> {
        let c = q(self.cq.wait_one(Some(T)), what)?
            .ok_or_else(|| format!("{what}: nothing within {T:?}"))?;
        if !c.is_ok() {
            return Err(format!(
                "{what}: {} ({:?}){}",
                c.status,
                c.detail,
                self.why()
            ));
        }
        Ok(c)
    }

    /// What ended the connection, if a Terminate did.
    fn why(&self) -> String {
        match self.qp.conn_info().ok().and_then(|i| i.terminate) {
            Some(t) => format!(
                "; the connection ended with a Terminate {} (layer {}, type {}, code {:#x})",
                if t.received {
                    "from the peer"
                } else {
                    "sent to the peer"
                },
                t.layer,
                t.etype,
                t.code
            ),
            None => String::new(),
        }
    }

    /// Waits for the completion of `op`, and any send completions on the way.
    fn wait(&self, op: Opcode, what: &str) -> R<Completion> {
        loop {
            let c = self.next(what)?;
            if c.opcode == op {
                return Ok(c);
            }
        }
    }

    /// Sends rping's triple naming `len` bytes at the start of `mr`.
    fn send_info(&mut self, mr: &MemoryRegion, len: usize) -> R<()> {
        let r = mr.remote(0);
        self.info[..8].copy_from_slice(&r.addr.to_be_bytes());
        self.info[8..12].copy_from_slice(&r.rkey.to_be_bytes());
        self.info[12..16].copy_from_slice(&(len as u32).to_be_bytes());
        q(
            self.qp.post_send(&SendWr::new(2, &[self.info.sge_all()])),
            "post send",
        )
    }

    /// Receives rping's triple (exactly 16 bytes, as rping checks).
    fn recv_info(&self, what: &str) -> R<(u64, u32, u32)> {
        let c = self.wait(Opcode::Recv, what)?;
        if c.byte_len as usize != INFO {
            return Err(format!("{what}: a {}-byte message, not {INFO}", c.byte_len));
        }
        let b = &self.recv[..];
        let info = (
            u64::from_be_bytes(b[..8].try_into().expect("8")),
            u32::from_be_bytes(b[8..12].try_into().expect("4")),
            u32::from_be_bytes(b[12..16].try_into().expect("4")),
        );
        self.post_recv()?;
        Ok(info)
    }
}

/// The client's ping `n`: `"rdma-ping-N: "`, then letters from `start`, NUL-terminated.
fn ping_text(buf: &mut [u8], n: u64, start: u8) {
    let head = format!("rdma-ping-{n}: ");
    let k = head.len().min(buf.len());
    buf[..k].copy_from_slice(&head.as_bytes()[..k]);
    let mut c = start;
    for b in &mut buf[k..] {
        *b = c;
        c = if c >= 122 { 65 } else { c + 1 };
    }
    let last = buf.len() - 1;
    buf[last] = 0;
}

/// The bytes up to the NUL, as text.
fn text(buf: &[u8]) -> String {
    let n = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

fn mpa() -> Mpa {
    // rping sets responder_resources and initiator_depth to 1; more does no harm.
    Mpa::new().ird_ord(4, 4)
}

fn client(ctx: &Context, a: &Args) -> R<u64> {
    let peer = q(
        resolve_addr(a.addr.as_deref().unwrap_or_default(), a.port),
        "address",
    )?;
    let mut e = End::new(ctx)?;
    let mut start = q(
        ctx.alloc_with(a.size, Access::READ),
        "register start buffer",
    )?;
    let rdma = q(
        ctx.alloc_with(a.size, Access::WRITE),
        "register RDMA buffer",
    )?;
    e.post_recv()?;
    q(e.qp.connect_mpa_wait(peer, &mpa(), T), "connect")?;
    let mut letter = 65u8;
    let mut n = 0;
    while a.count.is_none_or(|c| n < c) {
        ping_text(&mut start, n, letter);
        letter = if letter >= 122 { 65 } else { letter + 1 };
        e.send_info(&start, a.size)?;
        e.recv_info("the server's go after its RDMA Read")?;
        e.send_info(&rdma, a.size)?;
        e.recv_info("the server's go after its RDMA Write")?;
        if a.validate && rdma[..] != start[..] {
            return Err(format!(
                "ping {n}: data mismatch: sent {:?}, got back {:?}",
                text(&start),
                text(&rdma)
            ));
        }
        if a.verbose {
            println!("ping data: {}", text(&rdma));
        }
        n += 1;
    }
    let _ = e.qp.close_wait(T);
    Ok(n)
}

/// Serves one client; returns the pings served and their size.
fn server(ctx: &Context, a: &Args) -> R<(u64, usize)> {
    let addr = match &a.addr {
        Some(s) => q(resolve_addr(s, a.port), "address")?,
        None => SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, a.port, 0, 0),
    };
    let listener = q(ctx.listen(addr, 1), "listen")?;
    let mut e = End::new(ctx)?;
    let buf = q(ctx.alloc(MAX_SIZE), "register RDMA buffer")?;
    e.post_recv()?;
    if !a.quiet {
        println!("qpip-rping: listening on {}", listener.local_addr());
    }
    let peer = q(
        listener.accept_mpa_wait(&e.qp, &mpa(), Duration::from_secs(3600)),
        "accept",
    )?;
    if !a.quiet {
        println!("qpip-rping: connection from {peer}");
    }
    let mut n = 0;
    let mut size = 0;
    while a.count.is_none_or(|c| n < c) {
        // The client's start buffer, or its leaving.
        let (addr, rkey, len) = match e.recv_info("the client's start buffer") {
            Ok(i) => i,
            Err(_) if n > 0 => break,
            Err(err) => return Err(err),
        };
        let len = len as usize;
        size = len;
        if len > buf.len() {
            return Err(format!(
                "the client's buffer of {len} bytes is larger than {MAX_SIZE}"
            ));
        }
        let from = qpip::RemoteAddr { addr, rkey };
        q(
            e.qp.post_send(&SendWr::rdma_read(3, &[buf.sge(0, len)], from)),
            "post RDMA Read",
        )?;
        e.wait(Opcode::RdmaRead, "RDMA Read")?;
        if a.verbose {
            println!("server ping data: {}", text(&buf[..len]));
        }
        e.send_info(&buf, 0)?;
        let (addr, rkey, _) = e.recv_info("the client's RDMA buffer")?;
        let echo = text(&buf[..len]).len() + 1;
        let to = qpip::RemoteAddr { addr, rkey };
        q(
            e.qp.post_send(&SendWr::rdma_write(4, &[buf.sge(0, echo.min(len))], to)),
            "post RDMA Write",
        )?;
        e.wait(Opcode::RdmaWrite, "RDMA Write")?;
        e.send_info(&buf, 0)?;
        n += 1;
    }
    // The client leaves first, once it has taken the last "go" (closing first could
    // reach it before that go is read: rping then stops one ping short); then close.
    if a.count.is_some() {
        let deadline = std::time::Instant::now() + T;
        while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
            match ctx.wait_event(Some(left)) {
                Ok(Some(ev))
                    if ev.qp == e.qp.id()
                        && matches!(ev.kind, EventKind::PeerClosed | EventKind::QpError) =>
                {
                    break
                }
                Ok(Some(_)) => {}
                _ => break,
            }
        }
    }
    let _ = e.qp.close_wait(T);
    Ok((n, size))
}

fn main() -> ExitCode {
    let a = match parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(msg) if msg.is_empty() => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(msg) => {
            eprintln!("qpip-rping: error: {msg}\n{USAGE}");
            return ExitCode::FAILURE;
        }
    };
    // iWARP needs the device: QPIP_PROVIDER=soft would fail on the first QP.
    let ctx = match Context::open() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("qpip-rping: error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let r = if a.server {
        server(&ctx, &a)
    } else {
        client(&ctx, &a).map(|n| (n, a.size))
    };
    match r {
        Ok((n, size)) => {
            let checked = if a.validate {
                ", every one checked"
            } else {
                ""
            };
            let did = if a.server { "served" } else { "sent" };
            println!("qpip-rping: {did} {n} pings of {size} bytes{checked}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("qpip-rping: error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pings_read_as_rping_writes_them() {
        let mut b = [0u8; 24];
        ping_text(&mut b, 3, b'x');
        assert_eq!(&b, b"rdma-ping-3: xyzABCDEFG\0");
        let a = parse(
            ["-c", "-a", "::1", "-C", "5", "-S", "100", "-V"]
                .map(String::from)
                .into_iter(),
        )
        .unwrap();
        assert_eq!(
            (a.server, a.count, a.size, a.validate),
            (false, Some(5), 100, true)
        );
        assert!(
            parse(["-c"].map(String::from).into_iter()).is_err(),
            "a client needs -a"
        );
        assert!(parse(["-s", "-S", "8"].map(String::from).into_iter()).is_err());
    }
}
