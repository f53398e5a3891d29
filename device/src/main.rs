//! `qpipd`: serves one qpip PCI function to QEMU over a vfio-user socket.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use log::error;
use qpip_device::core::CoreConfig;
use qpip_device::vfio::{serve, ServeOptions};

/// The qpip adapter: a PCI network function for QEMU, attached over vfio-user.
///
/// Start qpipd first, then QEMU with
/// -device '{"driver":"vfio-user-pci","socket":{"path":"PATH","type":"unix"}}'
/// and guest RAM from a shared memfd backend. qpipd exits when QEMU disconnects.
#[derive(Parser, Debug)]
#[command(name = "qpipd", version, about, long_about)]
struct Args {
    /// Path of the vfio-user socket to listen on (a stale socket file is replaced).
    #[arg(long, value_name = "PATH")]
    socket: PathBuf,

    /// More log output (-v: debug, -vv: trace). RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count)]
    verbose: u8,

    /// Report this interface major version instead of the real one (tests of a driver's
    /// version check only).
    #[arg(long, hide = true, value_name = "N")]
    advertise_abi_major: Option<u16>,
}

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) if e.use_stderr() => {
            // One clear line, not clap's multi-line usage dump: the message may span a few
            // lines (e.g. the list of missing arguments), so fold everything before the
            // usage block into one.
            let msg = e.to_string();
            let first: Vec<&str> = msg
                .lines()
                .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect();
            let first = first.join(" ");
            let first = first.trim_start_matches("error: ");
            eprintln!("qpipd: {first} (see qpipd --help)");
            return ExitCode::from(2);
        }
        Err(e) => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
    };
    let level = match args.verbose {
        0 => "info",
        1 => "debug",
        _ => "trace",
    };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(level)).init();

    let socket = args.socket.clone();
    install_signal_cleanup(socket.clone());
    let options = ServeOptions {
        core: CoreConfig {
            advertised_abi_major: args
                .advertise_abi_major
                .unwrap_or(qpip_abi::ABI_VERSION_MAJOR),
        },
    };
    match serve(&socket, options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            error!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// On SIGINT/SIGTERM remove the socket file and exit, so a stopped qpipd leaves nothing behind.
fn install_signal_cleanup(socket: PathBuf) {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = match signal_hook::iterator::Signals::new([SIGINT, SIGTERM]) {
        Ok(s) => s,
        Err(e) => {
            error!("cannot install signal handlers: {e}");
            return;
        }
    };
    std::thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            let _ = std::fs::remove_file(&socket);
            log::info!("signal {sig}: stopping");
            std::process::exit(128 + sig);
        }
    });
}
