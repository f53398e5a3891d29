//! `qpip-nbd`: a network block device over qpip queue pairs.
//!
//! ```text
//! qpip-nbd serve FILE|DEVICE [-p PORT] [-a ADDR] [-n NAME] [-r]
//! ```
//!
//! `serve` exports a file or a block device over TCP QPs in stream framing: the wire is
//! the standard NBD protocol (fixed newstyle handshake), so the stock `nbd-client` and
//! the kernel's `nbd` driver, over plain sockets, can use it as well as a QP client.
//! Port 10809 (NBD's) by default; each client that connects is served in a thread of its
//! own until it disconnects. `RUST_LOG=debug` shows every connection's steps.

use std::net::{Ipv6Addr, SocketAddrV6};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use qpip::Context;
use qpip_nbd::backing::Backing;
use qpip_nbd::serve::{ServeConfig, Server};

const USAGE: &str = "\
usage: qpip-nbd serve FILE|DEVICE [-p PORT] [-a ADDR] [-n NAME] [-r]
A network block device over qpip queue pairs (the standard NBD protocol).
  serve        export FILE or DEVICE to NBD clients (qpip-nbd, or nbd-client on sockets)
  -p PORT      port to listen on (10809)     -a ADDR   address to listen on (all)
  -n NAME      export name (the file name; clients asking for \"\" get it too)
  -r           read-only";

struct ServeArgs {
    path: PathBuf,
    port: u16,
    addr: Ipv6Addr,
    name: Option<String>,
    read_only: bool,
}

fn parse_serve(mut args: impl Iterator<Item = String>) -> Result<ServeArgs, String> {
    let mut a = ServeArgs {
        path: PathBuf::new(),
        port: 10809,
        addr: Ipv6Addr::UNSPECIFIED,
        name: None,
        read_only: false,
    };
    let mut path = None;
    while let Some(arg) = args.next() {
        let mut value = |what: &str| args.next().ok_or(format!("{arg} needs {what}"));
        match arg.as_str() {
            "-p" => {
                let v = value("a port")?;
                a.port = v.parse().map_err(|_| format!("-p {v}: not a port"))?;
            }
            "-a" => {
                let v = value("an IPv6 address")?;
                a.addr = v
                    .parse()
                    .map_err(|_| format!("-a {v}: not an IPv6 address"))?;
            }
            "-n" => a.name = Some(value("a name")?),
            "-r" => a.read_only = true,
            _ if arg.starts_with('-') => return Err(format!("unknown option {arg}")),
            _ if path.is_none() => path = Some(PathBuf::from(arg)),
            _ => return Err(format!("unexpected argument {arg}")),
        }
    }
    a.path = path.ok_or("serve needs the FILE or DEVICE to export")?;
    Ok(a)
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
    let config = ServeConfig { name };
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
