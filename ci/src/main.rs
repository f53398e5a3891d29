//! `qpip-lab`: the command-line face of the lab.
//!
//! `qpip-lab vm [--devices N] [--accel tcg|kvm] [--timeout SECS] [--memory MIB] [-v] -- CMD...`
//! boots a guest with N qpip devices, runs CMD in it (its words joined with spaces and run
//! by the guest's sh, like ssh), prints CMD's output as it comes and exits with CMD's exit
//! status. A failure of the lab itself (a device or QEMU failing, no exit status, a kernel
//! warning or oops in the guest) exits 1 with a one-line error naming the console log.

use clap::{Parser, Subcommand};
use qpip_lab::{run_vm_observed, Accel, Stream, VmSpec};
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "qpip-lab",
    version,
    about = "Boots QEMU guests with qpip devices and runs commands in them"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Boot a guest, run CMD in it, exit with CMD's exit status.
    Vm(VmArgs),
}

#[derive(clap::Args)]
struct VmArgs {
    /// Number of qpip devices (one qpipd each).
    #[arg(long, default_value_t = 1)]
    devices: usize,
    /// CPU accelerator: tcg (works everywhere) or kvm (real hosts).
    #[arg(long, default_value = "tcg")]
    accel: Accel,
    /// Limit for the whole run, boot to power-off, in seconds.
    #[arg(long, default_value_t = 180, value_name = "SECS")]
    timeout: u64,
    /// Guest RAM in MiB.
    #[arg(long, default_value_t = 512, value_name = "MIB")]
    memory: u32,
    /// Extra argument for every qpipd (repeat for several).
    #[arg(long = "qpipd-arg", value_name = "ARG", allow_hyphen_values = true)]
    qpipd_args: Vec<String>,
    /// Also show the guest console (on stderr) and the lab's progress.
    #[arg(short, long)]
    verbose: bool,
    /// The command to run in the guest.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    cmd: Vec<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let Cmd::Vm(args) = cli.command;
    env_logger::Builder::from_env(
        env_logger::Env::default().default_filter_or(if args.verbose { "info" } else { "warn" }),
    )
    .format_timestamp(None)
    .init();

    let spec = VmSpec {
        devices: args.devices,
        accel: args.accel,
        timeout: Duration::from_secs(args.timeout),
        memory_mib: args.memory,
        qpipd_args: vec![args.qpipd_args.clone(); args.devices],
        cmd: args.cmd.join(" "),
    };
    let verbose = args.verbose;
    let mut console_filter = qpip_lab::console::TerminalFilter::default();
    let mut observe = |stream: Stream, bytes: &[u8]| match stream {
        Stream::Output => {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(bytes);
            let _ = out.flush();
        }
        Stream::Console if verbose => {
            let mut err = std::io::stderr().lock();
            let _ = err.write_all(&console_filter.filter(bytes));
            let _ = err.flush();
        }
        Stream::Console => {}
    };
    match run_vm_observed(&spec, &mut observe) {
        Ok(outcome) => {
            log::info!(
                "guest command exited with status {} after {:.1} s; run folder {}",
                outcome.status,
                outcome.elapsed.as_secs_f64(),
                outcome.run_dir.display()
            );
            // A shell status is 0..=255; anything else would be the guest's init's bug.
            ExitCode::from(u8::try_from(outcome.status).unwrap_or(1))
        }
        Err(e) if e.is_interrupted() => {
            eprintln!("qpip-lab: {}", e.headline());
            ExitCode::from(130)
        }
        Err(e) => {
            eprintln!("qpip-lab: error: {e}");
            ExitCode::from(1)
        }
    }
}
