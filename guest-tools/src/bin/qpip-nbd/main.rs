//! `qpip-nbd`: a network block device over qpip queue pairs.
//!
//! ```text
//! qpip-nbd serve FILE|DEVICE [-p PORT] [-a ADDR] [-n NAME] [-r] [-k SECS]
//! qpip-nbd connect HOST [-p PORT] [-n NAME] [-t SECS] [-q DEPTH]
//! ```
//!
//! `serve` exports a file or a block device over TCP QPs in stream framing: the wire is
//! the standard NBD protocol (fixed newstyle handshake), so the stock `nbd-client` and
//! the kernel's `nbd` driver, over plain sockets, can use it as well as a QP client.
//! Port 10809 (NBD's) by default; each client that connects is served in a thread of its
//! own until it disconnects, or until TCP keepalive finds it gone: a client whose machine
//! died or whose link was cut is dropped after about `-k` seconds (120) of silence.
//!
//! `connect` makes an NBD export (of `qpip-nbd serve`, or of the stock `nbd-server`) a
//! block device of this machine, `/dev/ublkbN` (Linux's userspace block devices,
//! `ublk_drv`), whose requests all go over a TCP QP. It prints the device's path once the
//! device is there, and serves it until SIGINT or SIGTERM, then removes it. A request
//! that waits longer than `-t` seconds (30) for its reply, or for a lost connection to
//! come back, ends with an I/O error; the client keeps connecting again meanwhile.
//! `RUST_LOG=debug` shows every step.

use std::net::{Ipv6Addr, SocketAddrV6};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use qpip::{resolve_addr, Context};
use qpip_nbd::attach::{attach, AttachConfig};
use qpip_nbd::backing::Backing;
use qpip_nbd::serve::{ServeConfig, Server};

const USAGE: &str = "\
usage: qpip-nbd serve FILE|DEVICE [-p PORT] [-a ADDR] [-n NAME] [-r] [-k SECS]
       qpip-nbd connect HOST [-p PORT] [-n NAME] [-t SECS] [-q DEPTH]
A network block device over qpip queue pairs (the standard NBD protocol).
  serve        export FILE or DEVICE to NBD clients (qpip-nbd, or nbd-client on sockets)
    -p PORT    port to listen on (10809)     -a ADDR   address to listen on (all)
    -n NAME    export name (the file name; clients asking for \"\" get it too)
    -r         read-only
    -k SECS    drop a client that vanished (keepalive probes unanswered) after about
               this long (120; 0: never)
  connect      the export of an NBD server at HOST as a block device, /dev/ublkbN,
               until SIGINT or SIGTERM (needs ublk_drv)
    -p PORT    the server's port (10809)     -n NAME   export name (\"\": its default)
    -t SECS    a request ends with an I/O error after waiting this long for its reply
               or for a lost connection to come back (30)
    -q DEPTH   requests in flight (64)";

/// A command's arguments: its options (each `-X VALUE`, or a flag) and one operand.
struct Parsed {
    values: Vec<(String, String)>,
    flags: Vec<String>,
    operand: Option<String>,
}

impl Parsed {
    /// Reads `args`: options in `with_value` take the next argument, those in `flags`
    /// none; one operand.
    fn new(
        mut args: impl Iterator<Item = String>,
        with_value: &[&str],
        flags: &[&str],
    ) -> Result<Parsed, String> {
        let mut p = Parsed {
            values: Vec::new(),
            flags: Vec::new(),
            operand: None,
        };
        while let Some(arg) = args.next() {
            if with_value.contains(&arg.as_str()) {
                let v = args.next().ok_or(format!("{arg} needs a value"))?;
                p.values.push((arg, v));
            } else if flags.contains(&arg.as_str()) {
                p.flags.push(arg);
            } else if arg.starts_with('-') {
                return Err(format!("unknown option {arg}"));
            } else if p.operand.is_none() {
                p.operand = Some(arg);
            } else {
                return Err(format!("unexpected argument {arg}"));
            }
        }
        Ok(p)
    }

    fn value(&self, opt: &str) -> Option<&str> {
        self.values
            .iter()
            .rev()
            .find(|(o, _)| o == opt)
            .map(|(_, v)| v.as_str())
    }

    fn flag(&self, f: &str) -> bool {
        self.flags.iter().any(|x| x == f)
    }

    /// Option `opt` as a `T` within `ok` (default `default`); `what` names it in errors.
    fn number<T: std::str::FromStr + Copy>(
        &self,
        opt: &str,
        default: T,
        what: &str,
        ok: impl Fn(T) -> bool,
    ) -> Result<T, String> {
        match self.value(opt) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .ok()
                .filter(|&n| ok(n))
                .ok_or(format!("{opt} {v}: not {what}")),
        }
    }
}

struct ServeArgs {
    path: PathBuf,
    port: u16,
    addr: Ipv6Addr,
    name: Option<String>,
    read_only: bool,
    drop_after: u32,
}

fn parse_serve(args: impl Iterator<Item = String>) -> Result<ServeArgs, String> {
    let p = Parsed::new(args, &["-p", "-a", "-n", "-k"], &["-r"])?;
    Ok(ServeArgs {
        path: PathBuf::from(
            p.operand
                .clone()
                .ok_or("serve needs the FILE or DEVICE to export")?,
        ),
        port: p.number("-p", 10809, "a port", |_| true)?,
        addr: p.number("-a", Ipv6Addr::UNSPECIFIED, "an IPv6 address", |_| true)?,
        name: p.value("-n").map(str::to_string),
        read_only: p.flag("-r"),
        drop_after: p.number(
            "-k",
            120u32,
            "0 or a number of seconds from 2 to 65534",
            |s| s == 0 || (2..=65534).contains(&s),
        )?,
    })
}

struct ConnectArgs {
    host: String,
    port: u16,
    name: String,
    timeout: Duration,
    depth: u16,
}

fn parse_connect(args: impl Iterator<Item = String>) -> Result<ConnectArgs, String> {
    let p = Parsed::new(args, &["-p", "-n", "-t", "-q"], &[])?;
    let secs = p.number("-t", 30u64, "a number of seconds, at least 1", |s| s >= 1)?;
    Ok(ConnectArgs {
        host: p
            .operand
            .clone()
            .ok_or("connect needs the server's address")?,
        port: p.number("-p", 10809, "a port", |_| true)?,
        name: p.value("-n").unwrap_or("").to_string(),
        timeout: Duration::from_secs(secs),
        depth: p.number("-q", 64u16, "a depth from 1 to 1024", |d| {
            (1..=1024).contains(&d)
        })?,
    })
}

/// Set by SIGINT and SIGTERM.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

fn run_connect(a: ConnectArgs) -> Result<(), String> {
    let server = resolve_addr(&a.host, a.port).map_err(|e| format!("{}: {e}", a.host))?;
    let ctx = Context::open().map_err(|e| format!("open the device: {e}"))?;
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic.
        unsafe { libc::signal(sig, on_signal as *const () as libc::sighandler_t) };
    }
    let config = AttachConfig {
        server,
        name: a.name,
        timeout: a.timeout,
        depth: a.depth,
        max_io: 1024 * 1024,
    };
    attach(Arc::new(ctx), config, &STOP, |path, export| {
        println!("qpip-nbd: {path} ({} bytes)", export.size);
    })
    .map_err(|e| e.to_string())
}

fn run_serve(a: ServeArgs) -> Result<(), String> {
    let backing =
        Backing::open(&a.path, a.read_only).map_err(|e| format!("{}: {e}", a.path.display()))?;
    let ctx = Context::open().map_err(|e| format!("open the device: {e}"))?;
    let name = a.name.unwrap_or_else(|| {
        a.path
            .file_name()
            .map_or("disk".into(), |n| n.to_string_lossy().into_owned())
    });
    let config = ServeConfig {
        name,
        keepalive: (a.drop_after > 0).then(|| ServeConfig::keepalive_for(a.drop_after)),
    };
    let listen = SocketAddrV6::new(a.addr, a.port, 0, 0);
    Server::bind(Arc::new(ctx), Arc::new(backing), &config, listen)
        .and_then(Server::run)
        .map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .format_timestamp(None)
        .format_target(false)
        .init();
    let mut args = std::env::args().skip(1);
    let r = match args.next().as_deref() {
        Some("serve") => parse_serve(args).and_then(run_serve),
        Some("connect") => parse_connect(args).and_then(run_connect),
        Some("-h" | "--help") => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Some(other) => Err(format!("unknown command {other}\n{USAGE}")),
        None => Err(USAGE.to_string()),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("qpip-nbd: {e}");
            ExitCode::FAILURE
        }
    }
}
