//! Host-side measurements of qpipd (`./qpip bench` runs this): a real `qpipd` process,
//! driven over its vfio-user socket by the test kit's fake guest (`qpip_testkit::FakeGuest`)
//! playing QEMU and the guest at once. Guest RAM is a memfd the device maps through DMA_MAP,
//! each context's doorbell page is a page of it, and the kick register is written with a
//! vfio-user region write (what a trapped guest MMIO store becomes).
//!
//! What is measured:
//!
//! (a) doorbell-to-engine latency while the engine polls: a UDP datagram posted on a QP bound
//!     to port 7 and sent to ::1 port 7 (the device's loopback: it comes back to the same
//!     QP), timed from the doorbell store to the send CQE (the engine noticed the doorbell,
//!     fetched and checked the WQE and completed it) and to the receive CQE (the datagram
//!     went through the receive path into the posted buffer). Iterations run back to back,
//!     so the engine is still polling when the next doorbell rings.
//! (b) the same with the engine asleep: before each iteration the bench waits until the
//!     engine has published `engine_sleeping` in the doorbell page; the producer then sees
//!     the flag and writes the kick register, as the doorbell protocol prescribes. The time
//!     includes the kick (a vfio-user round trip) and the engine's wake-up.
//! (c) qpipd's CPU use while idle: utime + stime of the process from /proc/PID/stat over an
//!     idle interval after the set-up (contexts, CQs, QP, MR exist; nothing is posted), and
//!     again after the latency runs.
//!
//! Guest time is not in these figures (no VM): they are the device's share of a round trip.
//!
//! (d) engine-to-engine TCP throughput with 64 KiB messages on one core, beside the host
//!     kernel's TCP over loopback and a memcpy of the same bytes ([`throughput`]): over the
//!     in-memory wire at MTU 1500 and 9000, over a cable, over a memory wire with offloads
//!     (TCP super-frames carried whole), and (as root) over two TAPs with offloads on a
//!     Linux bridge in a network namespace the bench makes and removes;
//! (e) the per-stage cost of the data path, the QPIP paper's Tables 2 and 3, for 64 B and
//!     64 KiB messages, counted inside the running engines (built with the feature
//!     `stage-timing`; without it the section says so and is skipped).
//!
//! (d) and (e) run in this process, pinned to one CPU; the results of all sections are also
//! written as JSON and Markdown to `$QPIP_CACHE/bench/` (else `target/bench/`).
//!
//!     cargo run --release -p qpip-device --features stage-timing --example engine_bench --
//!         [--qpipd PATH] [--iterations N] [--sleeping-iterations N] [--idle-seconds S]
//!         [--idle-poll-us US] [--only latency,throughput,stages] [--mib N] [--runs N]
//!         [--cpu N] [--out DIR]

mod daemon;
mod latency;
mod report;
mod throughput;

use std::path::PathBuf;

struct Options {
    qpipd: PathBuf,
    iterations: usize,
    sleeping_iterations: usize,
    idle_seconds: u64,
    idle_poll_us: Option<u64>,
    only: Vec<String>,
    mib: u64,
    runs: usize,
    cpu: Option<usize>,
    out: Option<PathBuf>,
}

fn fail(msg: impl std::fmt::Display) -> ! {
    eprintln!("engine_bench: {msg}");
    std::process::exit(1);
}

fn options() -> Options {
    // Next to this binary's folder (target/release/examples/..) is target/release/qpipd.
    let default_qpipd = std::env::current_exe()
        .ok()
        .and_then(|p| Some(p.parent()?.parent()?.join("qpipd")))
        .unwrap_or_else(|| PathBuf::from("target/release/qpipd"));
    let mut o = Options {
        qpipd: default_qpipd,
        iterations: 5000,
        sleeping_iterations: 500,
        idle_seconds: 10,
        idle_poll_us: None,
        only: vec!["latency".into(), "throughput".into(), "stages".into()],
        mib: 256,
        runs: 3,
        cpu: None,
        out: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| {
            args.next()
                .unwrap_or_else(|| fail(format!("{name} needs a value")))
        };
        let num = |name: &str, v: String| -> u64 {
            v.parse()
                .unwrap_or_else(|_| fail(format!("{name}: '{v}' is not a number")))
        };
        match a.as_str() {
            "--qpipd" => o.qpipd = PathBuf::from(value("--qpipd")),
            "--iterations" => o.iterations = num("--iterations", value("--iterations")) as usize,
            "--sleeping-iterations" => {
                o.sleeping_iterations =
                    num("--sleeping-iterations", value("--sleeping-iterations")) as usize
            }
            "--idle-seconds" => o.idle_seconds = num("--idle-seconds", value("--idle-seconds")),
            "--idle-poll-us" => {
                o.idle_poll_us = Some(num("--idle-poll-us", value("--idle-poll-us")))
            }
            "--only" => {
                o.only = value("--only").split(',').map(str::to_string).collect();
                if let Some(x) = o
                    .only
                    .iter()
                    .find(|x| !["latency", "throughput", "stages"].contains(&x.as_str()))
                {
                    fail(format!(
                        "--only: '{x}' is not latency, throughput or stages"
                    ));
                }
            }
            "--mib" => o.mib = num("--mib", value("--mib")).max(1),
            "--runs" => o.runs = num("--runs", value("--runs")).max(1) as usize,
            "--cpu" => o.cpu = Some(num("--cpu", value("--cpu")) as usize),
            "--out" => o.out = Some(PathBuf::from(value("--out"))),
            "-h" | "--help" => {
                println!(
                    "usage: engine_bench [--qpipd PATH] [--iterations N] [--sleeping-iterations N] \
                     [--idle-seconds S] [--idle-poll-us US] [--only latency,throughput,stages] \
                     [--mib N] [--runs N] [--cpu N] [--out DIR]"
                );
                std::process::exit(0);
            }
            other => fail(format!("unknown argument '{other}' (see --help)")),
        }
    }
    if o.only.iter().any(|x| x == "latency") && !o.qpipd.is_file() {
        fail(format!(
            "no qpipd at {} (build it: cargo build --release -p qpip-device)",
            o.qpipd.display()
        ));
    }
    o
}

/// The 1, 5 and 15 minute load averages, as /proc/loadavg gives them.
fn load_average() -> String {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    load.split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn main() {
    // As qpipd does (the engines run in this process).
    qpip_device::tune_allocator();
    let o = options();
    let mut r = report::Report::new();
    let load = load_average();
    println!(
        "host: {} CPUs, load average {load} at the start (other processes' load shows in the tails)",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    r.host(&load);
    if o.only.iter().any(|x| x == "latency") {
        latency::latency_section(&o, &mut r);
    }
    let run_tp = o.only.iter().any(|x| x == "throughput");
    let run_stages = o.only.iter().any(|x| x == "stages");
    if run_tp || run_stages {
        let before = throughput::affinity();
        let cpu = o.cpu.or_else(|| before.last().copied());
        if let Some(c) = cpu {
            throughput::pin(c);
        }
        if run_tp {
            report::throughput_section(&o, cpu, &mut r);
        }
        if run_stages {
            report::stages_section(&mut r);
        }
        throughput::restore(&before);
    }
    let load = load_average();
    println!("load average {load} at the end");
    r.host_end(&load);
    r.write(o.out.clone());
}
