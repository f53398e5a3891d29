//! The demo and the QP-versus-sockets bench: guests `a` and `b` on the lab network, guest
//! a running each step against guest b (and the lab host), the results side by side.
//!
//! Steps, in order (guest a is the client, guest b serves; see [`scripts`]):
//! 1. `ready`: guest b starts `qpip-perf -s` (QPs, and `--sockets`), a `qpip-cat` and a
//!    `nc` listener for the bulk transfers, and says when each listens;
//! 2. over QPs between the qpip devices: UDP ping-pong, TCP message ping-pong, TCP
//!    bandwidth (`qpip-perf`), then a bulk transfer a→b with `qpip-cat` whose SHA-256 guest
//!    b checks;
//!    (demo) then a network disk over QPs: `qpip-nbd connect` (a ublk device) to guest
//!    b's `qpip-nbd serve`, an ext2 file written, remounted and read back;
//! 3. (demo) guest a's QPs with a plain Linux socket of the lab host (Python, in the lab's
//!    namespace): a QP connects to a TCP echo server, a host client connects to a QP
//!    listener and both send, and UDP datagrams go out and are echoed back;
//! 4. the same ping-pong, bandwidth and bulk over the guests' kernel sockets through their
//!    virtio-net NICs (`qpip-perf --sockets`, busybox `nc`).
//!
//! The bench runs steps 2 and 4 in several rounds ([`Plan::rounds`]), each measurement over
//! QPs right next to the same over sockets, the two taking turns to go first: on a loaded
//! host the load drifts, and this way the drift hits both sides alike. The table shows each
//! figure's median and spread, and the QP gain per round beside the gain of the medians.
//!
//! The bench also measures what the QPIP paper measured: at the end of each round guest a
//! runs `qpip-overhead` (the host overhead of one message, the paper's Table 1, QPs against
//! kernel sockets); the table has both guests' whole busy time per message (`/proc/stat`),
//! which `qpip-perf` measures on each end over exactly its measured interval, and every
//! ping-pong and TCP bandwidth run (each message size on its own) is a CPU window: just
//! before and just after it, guest a reads both guests' `/proc/stat` and the lab host the
//! CPU time of the run's QEMU and qpipd processes (`host_side::serve_cpu_marks`), so a
//! block under the table shows where the rest of the work went on the host.
//!
//! Progress is reported step by step; the first failing step ends the run and is named.
//! Guest CPU per message is `qpip-perf`'s process CPU time (client in a + server in b): with
//! QPs the transport runs in the device (qpipd, on the host), with sockets in the guest
//! kernel. Guests run under TCG here, so guest-side times are inflated: judge by the
//! ratios.

mod host_side;
mod pass;
mod plan;
pub mod results;
pub mod scripts;
pub mod sockets;
pub mod storage;
mod watch;

pub use plan::{Action, Net, Plan, Step, Test, LARGE_MSG, LAYOUT_BW_MSG, RDMA_LAT_TRIPWIRE};

use crate::{run_lab, GuestSpec, LabError, LabSpec, Network, Stream, VmSpec};
use host_side::{run_host_side, serve_cpu_marks, HostSide};
use results::{Line, Measurements};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use watch::Watcher;

/// A byte count as people write it (binary units when exact).
pub fn human(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes % (1 << 20) == 0 {
        format!("{} MiB", bytes >> 20)
    } else if bytes >= 1024 && bytes % 1024 == 0 {
        format!("{} KiB", bytes >> 10)
    } else {
        format!("{bytes} B")
    }
}

/// What a run that passed every step produced.
#[derive(Debug)]
pub struct Report {
    pub measurements: Measurements,
    pub lines: Vec<Line>,
    /// The lab's run folder (each guest's logs, the shared folder).
    pub dir: PathBuf,
    /// Wall time of the lab run, boot to power-off.
    pub elapsed: Duration,
}

/// Why a run failed.
#[derive(Debug)]
pub struct DemoError {
    /// The step that failed (its description), if a step did.
    pub step: Option<String>,
    pub message: String,
    /// The run folder, if the lab made one.
    pub dir: Option<PathBuf>,
    /// Ctrl-C or SIGTERM ended the run.
    pub interrupted: bool,
}

impl std::fmt::Display for DemoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.step {
            Some(s) => write!(f, "step failed: {s}: {}", self.message)?,
            None => write!(f, "{}", self.message)?,
        }
        if let Some(d) = &self.dir {
            write!(f, " (logs: {})", d.display())?;
        }
        Ok(())
    }
}

/// Boots guests a and b in namespace `netns` and runs `plan`. `progress` gets one line per
/// event (guests up, each step and its end); `verbose` also passes every guest output line.
pub fn run(
    plan: &Plan,
    netns: &str,
    verbose: bool,
    progress: &mut dyn FnMut(&str),
) -> Result<Report, DemoError> {
    let vm = |cmd: String| VmSpec {
        timeout: plan.limit(),
        memory_mib: 512,
        qpipd_args: vec![plan.qpipd_args.clone()],
        ..VmSpec::new(cmd)
    };
    let spec = LabSpec {
        guests: vec![
            GuestSpec::new("a", vm(scripts::guest_a(plan))),
            GuestSpec::new("b", vm(scripts::guest_b(plan))),
        ],
        network: Network::Lab(netns.to_string()),
        layout: plan.layout,
    };
    let started = Instant::now();
    let devices = match plan.layout {
        crate::QpipdLayout::Adapter => "their qpip devices functions of one adapter qpipd",
        crate::QpipdLayout::PerGuest => "a qpipd each for their qpip devices",
    };
    progress(&format!(
        "booting guests a and b (QEMU, TCG), {devices}, on the lab network (namespace {netns}) ..."
    ));
    let mut watcher = Watcher::new(plan.steps(), plan.rounds as usize, progress, verbose);
    let host_bytes = plan.host_bytes;
    let cpu_marks = plan.cpu_marks;
    let limit = plan.limit();
    let result = {
        let watcher = &mut watcher;
        let mut observe = |i: usize, s: Stream, b: &[u8]| {
            if s == Stream::Output {
                watcher.feed(i, b);
            }
        };
        run_lab(&spec, &mut observe, |host| {
            std::thread::scope(|scope| {
                let marks = cpu_marks.then(|| scope.spawn(|| serve_cpu_marks(host, limit)));
                let side = if host_bytes == 0 {
                    HostSide {
                        ok: true,
                        output: String::new(),
                    }
                } else {
                    run_host_side(host, host_bytes, limit)
                };
                if let Some(t) = marks {
                    let _ = t.join();
                }
                side
            })
        })
    };
    let outcome = match result {
        Ok(o) => o,
        Err(e) => return Err(lab_error(e, &watcher)),
    };
    let dir = outcome.dir.clone();
    let fail = |step: Option<String>, message: String| DemoError {
        step,
        message,
        dir: Some(dir.clone()),
        interrupted: false,
    };
    if let Some((id, why)) = &watcher.failure {
        let mut why = why.clone();
        if !outcome.host.ok && !outcome.host.output.is_empty() {
            why = format!(
                "{why}\nthe lab host's side said:\n{}",
                outcome.host.output.trim_end()
            );
        }
        return Err(fail(Some(watcher.describe(id)), why));
    }
    for g in &outcome.guests {
        if g.status != 0 {
            return Err(fail(
                None,
                format!(
                    "the script of guest {} exited with status {} without naming a failed step; its output:\n{}",
                    g.run_dir.file_name().unwrap_or_default().to_string_lossy(),
                    g.status,
                    g.output.trim_end()
                ),
            ));
        }
    }
    if !outcome.host.ok {
        return Err(fail(
            Some("the lab host's side (Python sockets in the namespace)".into()),
            outcome.host.output.trim_end().to_string(),
        ));
    }
    if let Some(e) = &watcher.bad_line {
        return Err(fail(None, e.clone()));
    }
    let done: Vec<&str> = watcher.steps.iter().map(|s| s.id.as_str()).collect();
    // The bench's passes (several sizes, or the host's CPU marked around each run, as the
    // layouts' pass does) get the detailed lines, whole-system CPU included.
    let detail = plan.tcp_sizes.len() > 1 || plan.cpu_marks;
    let lines = results::lines(&watcher.measurements, detail);
    // A round that lacks a figure still leaves the others' median; a figure no round has
    // means the guests' reports and this reader disagree. A plan over QPs only has no
    // sockets side. perftest's lines are the exception: a program that failed on its
    // device 3 times in every round (guest a said so, a note each time) leaves its line
    // without that side, and the table's notes name it, rather than the whole bench fail.
    if lines
        .iter()
        .any(|l| !l.is_perftest() && (l.qp().is_none() || (!plan.qp_only && l.sockets().is_none())))
    {
        return Err(fail(
            None,
            format!(
                "the guests passed every step ({}) but some figures are missing: {:?}",
                done.join(", "),
                watcher.measurements
            ),
        ));
    }
    Ok(Report {
        measurements: watcher.measurements,
        lines,
        dir: outcome.dir,
        elapsed: started.elapsed(),
    })
}

fn lab_error(e: LabError, w: &Watcher) -> DemoError {
    let step = w.current.map(|(i, _)| w.steps[i].what.clone());
    DemoError {
        step,
        interrupted: e.is_interrupted(),
        dir: e.run_dir.clone(),
        message: if e.is_interrupted() {
            e.headline()
        } else {
            format!("the lab failed: {e}")
        },
    }
}

/// Asserts that `script` is valid shell (`sh -n`), so that a slip in a guest script is
/// found by the unit tests, not minutes into a run.
#[cfg(test)]
fn assert_valid_shell(script: &str) {
    use std::io::Write;
    let mut sh = std::process::Command::new("sh")
        .arg("-n")
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("sh");
    sh.stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let out = sh.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}\n{script}",
        String::from_utf8_lossy(&out.stderr)
    );
}
