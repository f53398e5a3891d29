//! `qpip-lab`: the command-line face of the lab.
//!
//! `qpip-lab vm [--guests N] [--devices N] [--netns NAME | --no-net] [--accel tcg|kvm]
//! [--timeout SECS] [--memory MIB] [-v] -- CMD...` boots N guests (`a`, `b`, ...), each
//! with its qpip devices, on the lab network when the host allows it (root), runs CMD in
//! every guest (its words joined with spaces and run by the guest's sh, like ssh; the
//! guest's number is in `QPIP_GUEST`), prints CMD's output as it comes (prefixed with the
//! guest's name when there are several) and exits with the first non-zero status of a
//! guest, in guest order, else that of the `--host` command (run in the lab's namespace
//! once every guest is up), or 0. A failure of the lab itself (a device or QEMU failing, no
//! exit status, a kernel warning or oops in a guest) exits 1 with a one-line error naming
//! the console log.

mod show;

use clap::{Parser, Subcommand};
use qpip_lab::{
    guest_name, run_lab, Accel, GuestSpec, LabSpec, Network, QpipdLayout, Stream, VmSpec,
};
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
    /// Boot guests, run CMD in each, exit with the first non-zero exit status (or 0).
    Vm(VmArgs),
    /// Guests a and b on the lab network: QPs a⇄b, with the lab host's sockets, and
    /// kernel sockets through virtio-net; one table, QPs and sockets side by side.
    Demo(DemoArgs),
    /// The demo's QP-versus-sockets comparison with more round trips and message sizes,
    /// every measurement in several rounds (QPs and sockets interleaved; medians, spreads,
    /// ratios); results as JSON and Markdown in $QPIP_CACHE/bench (or --out).
    Bench(BenchArgs),
    /// Writes the recorded report, docs/bench.md's generated section and the chart
    /// docs/bench.svg, from a bench's results JSON (e.g.
    /// $QPIP_CACHE/bench/qp-sockets-latest.json) without running anything.
    BenchReport(BenchReportArgs),
}

#[derive(clap::Args)]
struct BenchReportArgs {
    /// The results JSON of a bench (qp-sockets-*.json).
    #[arg(value_name = "FILE.json")]
    file: std::path::PathBuf,
    /// Where bench.md and bench.svg are (default: the repository's docs/).
    #[arg(long, value_name = "DIR")]
    docs: Option<std::path::PathBuf>,
}

#[derive(clap::Args)]
struct DemoArgs {
    /// Name of the lab's network namespace.
    #[arg(long, default_value = "qpip-demo")]
    netns: String,
    /// One qpipd per guest's device instead of one adapter qpipd for both guests.
    #[arg(long)]
    qpipd_per_guest: bool,
    /// Also show every line the guests print.
    #[arg(short, long)]
    verbose: bool,
}

#[derive(clap::Args)]
struct BenchArgs {
    /// Name of the lab's network namespace.
    #[arg(long, default_value = "qpip-bench")]
    netns: String,
    /// Round trips of each ping-pong.
    #[arg(long, value_name = "N")]
    iters: Option<u64>,
    /// Bytes per bandwidth test and message size.
    #[arg(long, value_name = "BYTES")]
    bytes: Option<u64>,
    /// How many times every measurement runs; the table shows each figure's median and
    /// spread. Each round takes about a minute under TCG, plus 40 s to boot and get ready
    /// (default: 3).
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=i64::from(qpip_lab::demo::results::MAX_ROUNDS)))]
    rounds: Option<u32>,
    /// Where the results go (default: $QPIP_CACHE/bench).
    #[arg(long, value_name = "DIR")]
    out: Option<std::path::PathBuf>,
    /// One qpipd per guest's device instead of one adapter qpipd for both guests (the
    /// main pass; the comparison pass then uses the adapter).
    #[arg(long)]
    qpipd_per_guest: bool,
    /// Skip the second pass that measures the ping-pongs and 8 KiB TCP bandwidth over QPs
    /// in the other qpipd layout (adapter vs one qpipd per guest).
    #[arg(long)]
    one_layout: bool,
    /// Extra argument for every qpipd of the run (repeat for several), e.g.
    /// --qpipd-arg=--control-sched=batch; the results record them.
    #[arg(long = "qpipd-arg", value_name = "ARG", allow_hyphen_values = true)]
    qpipd_args: Vec<String>,
    /// Then write the full report into the repository's docs: docs/bench.md's generated
    /// section and the chart docs/bench.svg (as bench-report does from the results).
    #[arg(long)]
    record: bool,
    /// Only the storage part: an ext2 file system and fio on a network disk (NBD) over QPs
    /// vs kernel sockets, in its own pass with guests of 1536 MiB; results as storage-*.json
    /// and .md (--record: its section of docs/bench.md).
    #[arg(long, conflicts_with = "no_storage")]
    storage_only: bool,
    /// Skip the storage part.
    #[arg(long)]
    no_storage: bool,
    /// Only the sockets part: unmodified programs (nginx and wrk, iperf3, sockperf) between
    /// the guests on QPs through the preload library vs kernel sockets, in its own pass;
    /// results as sockets-*.json and .md (--record: its section of docs/bench.md).
    #[arg(long, conflicts_with_all = ["no_sockets", "storage_only"])]
    sockets_only: bool,
    /// Skip the sockets part.
    #[arg(long)]
    no_sockets: bool,
    /// Only the RDMA rows: perftest's ib_write_lat, ib_write_bw, ib_read_lat, ib_read_bw,
    /// ib_send_lat and ib_send_bw on qpip's ib_device (qpip0), on siw and on rxe, and qpip's
    /// own library (qpip-perf --rdma), in rounds as in the full bench, with the perftest
    /// clients' system calls per operation; results as rdma-*.json and .md (not recorded).
    #[arg(long, conflicts_with_all = ["storage_only", "sockets_only", "record"])]
    rdma_only: bool,
    /// Seconds of each program run of the sockets part (default 10).
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u32).range(1..=600))]
    sockets_secs: Option<u32>,
    /// Also show every line the guests print.
    #[arg(short, long)]
    verbose: bool,
}

#[derive(clap::Args)]
struct VmArgs {
    /// Number of guests (a, b, ...), all running CMD, with $QPIP_GUEST = 1, 2, ...
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=26))]
    guests: u16,
    /// Number of qpip devices per guest (device 0 is on the lab network, a function of the
    /// adapter qpipd; the others have a qpipd each).
    #[arg(long, default_value_t = 1)]
    devices: usize,
    /// Name of the lab's network namespace (ip netns exec NAME ... reaches the guests).
    #[arg(long, default_value = qpip_lab::netns::DEFAULT_NETNS)]
    netns: String,
    /// No lab network: the devices reach only themselves (the behaviour without root).
    #[arg(long)]
    no_net: bool,
    /// CPU accelerator: tcg (works everywhere) or kvm (real hosts).
    #[arg(long, default_value = "tcg")]
    accel: Accel,
    /// Limit for each guest's run, boot to power-off, in seconds.
    #[arg(long, default_value_t = 180, value_name = "SECS")]
    timeout: u64,
    /// Guest RAM in MiB.
    #[arg(long, default_value_t = 512, value_name = "MIB")]
    memory: u32,
    /// A shell command run on the host, in the lab's namespace, once every guest is up
    /// (its output is shown prefixed with [host]); guests can wait for its end with
    /// `lab-wait host-done`.
    #[arg(long, value_name = "CMD")]
    host: Option<String>,
    /// Extra argument for every qpipd (repeat for several); with the adapter, for it.
    #[arg(long = "qpipd-arg", value_name = "ARG", allow_hyphen_values = true)]
    qpipd_args: Vec<String>,
    /// One qpipd per device of every guest, each with its own TAP, instead of one adapter
    /// qpipd serving every guest's lab-network device (device 0) as a PCI function.
    #[arg(long)]
    qpipd_per_guest: bool,
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

/// Writes a stream of chunks line by line with a prefix, keeping partial lines until
/// their end arrives (several guests write at once).
#[derive(Default)]
struct Prefixer {
    partial: Vec<u8>,
}

impl Prefixer {
    fn feed(&mut self, prefix: &str, bytes: &[u8], out: &mut dyn Write) {
        self.partial.extend_from_slice(bytes);
        while let Some(pos) = self.partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=pos).collect();
            let _ = out.write_all(prefix.as_bytes());
            let _ = out.write_all(&line);
        }
        let _ = out.flush();
    }

    fn flush(&mut self, prefix: &str, out: &mut dyn Write) {
        if !self.partial.is_empty() {
            self.partial.push(b'\n');
            self.feed(prefix, &[], out);
        }
    }
}

/// The layout `--qpipd-per-guest` asks for.
fn layout(per_guest: bool) -> QpipdLayout {
    if per_guest {
        QpipdLayout::PerGuest
    } else {
        QpipdLayout::Adapter
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let args = match cli.command {
        Cmd::Vm(args) => args,
        Cmd::Demo(d) => {
            init_log(d.verbose);
            return show::demo(&d.netns, layout(d.qpipd_per_guest), d.verbose);
        }
        Cmd::Bench(b) => {
            init_log(b.verbose);
            let mut plan = qpip_lab::demo::Plan::bench();
            if let Some(n) = b.iters {
                plan.latency_iters = n.max(1);
            }
            if let Some(n) = b.bytes {
                plan.bw_bytes = n.max(1);
            }
            if let Some(n) = b.rounds {
                plan.rounds = n;
            }
            plan.layout = layout(b.qpipd_per_guest);
            plan.qpipd_args = b.qpipd_args.clone();
            let mut storage = qpip_lab::demo::storage::StoragePlan::bench();
            storage.facts.rounds = plan.rounds;
            storage.layout = plan.layout;
            storage.qpipd_args = plan.qpipd_args.clone();
            let mut sockets = qpip_lab::demo::sockets::SocketsPlan::bench();
            sockets.facts.rounds = plan.rounds;
            if let Some(s) = b.sockets_secs {
                sockets.facts.secs = s;
            }
            sockets.layout = plan.layout;
            sockets.qpipd_args = plan.qpipd_args.clone();
            if b.storage_only {
                return show::storage_only(&storage, &b.netns, b.out, b.verbose, b.record);
            }
            if b.sockets_only {
                return show::sockets_only(&sockets, &b.netns, b.out, b.verbose, b.record);
            }
            if b.rdma_only {
                let rdma = plan.rdma_only();
                return show::bench(&rdma, None, None, &b.netns, b.out, b.verbose, false, false);
            }
            return show::bench(
                &plan,
                (!b.no_storage).then_some(&storage),
                (!b.no_sockets).then_some(&sockets),
                &b.netns,
                b.out,
                b.verbose,
                !b.one_layout,
                b.record,
            );
        }
        Cmd::BenchReport(r) => {
            init_log(false);
            return show::bench_report(&r.file, &r.docs.unwrap_or_else(show::docs_dir));
        }
    };
    env_logger::Builder::from_env(
        env_logger::Env::default().default_filter_or(if args.verbose { "info" } else { "warn" }),
    )
    .format_timestamp(None)
    .init();

    let guests = usize::from(args.guests);
    let vm = VmSpec {
        devices: args.devices,
        accel: args.accel,
        timeout: Duration::from_secs(args.timeout),
        memory_mib: args.memory,
        qpipd_args: vec![args.qpipd_args.clone(); args.devices],
        device_props: Vec::new(),
        cmd: args.cmd.join(" "),
    };
    let spec = LabSpec {
        guests: (1..=guests)
            .map(|n| GuestSpec::new(guest_name(n), vm.clone()))
            .collect(),
        network: if args.no_net {
            Network::Off
        } else {
            Network::LabIfAvailable(args.netns.clone())
        },
        layout: layout(args.qpipd_per_guest),
    };
    let verbose = args.verbose;
    let names: Vec<String> = spec.guests.iter().map(|g| g.name.clone()).collect();
    let prefix = |i: usize| {
        if guests > 1 {
            format!("[{}] ", names[i])
        } else {
            String::new()
        }
    };
    let mut outputs: Vec<Prefixer> = (0..guests).map(|_| Prefixer::default()).collect();
    let mut consoles: Vec<Prefixer> = (0..guests).map(|_| Prefixer::default()).collect();
    let mut filters: Vec<_> = (0..guests)
        .map(|_| qpip_lab::console::TerminalFilter::default())
        .collect();
    let mut observe = |i: usize, stream: Stream, bytes: &[u8]| match stream {
        Stream::Output if guests == 1 => {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(bytes);
            let _ = out.flush();
        }
        Stream::Output => outputs[i].feed(&prefix(i), bytes, &mut std::io::stdout().lock()),
        Stream::Console if verbose => {
            let text = filters[i].filter(bytes);
            consoles[i].feed(&prefix(i), &text, &mut std::io::stderr().lock());
        }
        Stream::Console => {}
    };
    let host_cmd = args.host.clone();
    let result = run_lab(&spec, &mut observe, |host| {
        let cmd = host_cmd?;
        let out = host
            .command("sh")
            .arg("-c")
            .arg(&cmd)
            .stdin(std::process::Stdio::null())
            .output();
        let mut stdout = std::io::stdout().lock();
        let mut p = Prefixer::default();
        match out {
            Ok(o) => {
                p.feed("[host] ", &o.stdout, &mut stdout);
                p.feed("[host] ", &o.stderr, &mut stdout);
                p.flush("[host] ", &mut stdout);
                Some(o.status.code().unwrap_or(1))
            }
            Err(e) => {
                eprintln!("qpip-lab: cannot run the host command: {e}");
                Some(1)
            }
        }
    });
    for (i, o) in outputs.iter_mut().enumerate() {
        o.flush(&prefix(i), &mut std::io::stdout().lock());
    }
    match result {
        Ok(outcome) => {
            for o in &outcome.guests {
                log::info!(
                    "guest command exited with status {} after {:.1} s; run folder {}",
                    o.status,
                    o.elapsed.as_secs_f64(),
                    o.run_dir.display()
                );
            }
            // A shell status is 0..=255; anything else would be the guest's init's bug.
            let status = match qpip_lab::exit_status(&outcome.guests) {
                0 => outcome.host.unwrap_or(0),
                s => s,
            };
            ExitCode::from(u8::try_from(status).unwrap_or(1))
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

fn init_log(verbose: bool) {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(if verbose {
        "info"
    } else {
        "warn"
    }))
    .format_timestamp(None)
    .init();
}

#[cfg(test)]
mod tests {
    use super::Prefixer;

    #[test]
    fn prefixer_prefixes_whole_lines_across_chunks() {
        let mut p = Prefixer::default();
        let mut out = Vec::new();
        p.feed("[a] ", b"one\ntw", &mut out);
        p.feed("[a] ", b"o\nthree", &mut out);
        assert_eq!(out, b"[a] one\n[a] two\n");
        p.flush("[a] ", &mut out);
        assert_eq!(out, b"[a] one\n[a] two\n[a] three\n");
    }
}
