//! The demo and the QP-versus-sockets bench: guests `a` and `b` on the lab network, guest
//! a running each step against guest b (and the lab host), the results side by side.
//!
//! Steps, in order (guest a is the client, guest b serves; see [`scripts`]):
//! 1. `ready`: guest b starts `qpip-perf -s` (QPs, and `--sockets`), a `qpip-cat` and a
//!    `nc` listener for the bulk transfers, and says when each listens;
//! 2. over QPs between the qpip devices: UDP ping-pong, TCP message ping-pong, TCP
//!    bandwidth (`qpip-perf`), then a bulk transfer a→b with `qpip-cat` whose SHA-256 guest
//!    b checks;
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
//! CPU time of the run's QEMU and qpipd processes ([`serve_cpu_marks`]), so a block under
//! the table shows where the rest of the work went on the host.
//!
//! Progress is reported step by step; the first failing step ends the run and is named.
//! Guest CPU per message is `qpip-perf`'s process CPU time (client in a + server in b): with
//! QPs the transport runs in the device (qpipd, on the host), with sockets in the guest
//! kernel. Guests run under TCG here, so guest-side times are inflated: judge by the
//! ratios.

pub mod results;
pub mod scripts;

use crate::netns;
use crate::{run_lab, GuestSpec, LabError, LabSpec, Network, Stream, VmSpec};
use results::{Line, Measurements};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The smallest TCP bandwidth message whose test moves [`Plan::bw_large_factor`] times
/// [`Plan::bw_bytes`].
pub const LARGE_MSG: usize = 64 << 10;

/// A measurement the run makes on both nets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Test {
    /// UDP ping-pong (`qpip-perf --udp --test latency`).
    UdpPing,
    /// TCP ping-pong.
    TcpPing,
    /// TCP bandwidth by message size.
    TcpBw,
    /// UDP bandwidth by datagram size, with its loss.
    UdpBw,
    /// A bulk transfer a→b checked by SHA-256.
    Bulk,
}

impl Test {
    /// The first half of its step id and `@perf` name (`udp` in `udp-qp`).
    pub fn id(self) -> &'static str {
        match self {
            Test::UdpPing => "udp",
            Test::TcpPing => "tcp",
            Test::TcpBw => "bw",
            Test::UdpBw => "udpbw",
            Test::Bulk => "bulk",
        }
    }
}

/// Which net a measurement uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Net {
    /// QPs between the guests' qpip devices.
    Qp,
    /// Kernel sockets through the guests' virtio-net NICs.
    Sockets,
}

impl Net {
    /// The second half of a step id (`qp` in `udp-qp`), and the name of a bulk report.
    pub fn id(self) -> &'static str {
        match self {
            Net::Qp => "qp",
            Net::Sockets => "sk",
        }
    }
}

/// What a step does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Guest b starts its servers, guest a makes the test data.
    Ready,
    /// One measurement in one round (from 1).
    Measure { test: Test, net: Net, round: u32 },
    /// Guest a's TCP QP to the lab host's echo server.
    HostOut,
    /// The lab host's client to a TCP QP listener in guest a.
    HostIn,
    /// UDP datagrams from a QP in guest a, echoed by the lab host.
    HostUdp,
    /// `qpip-overhead` in guest a, in one round (from 1).
    Overhead { round: u32 },
}

/// One step of guest a's script.
#[derive(Debug, Clone)]
pub struct Step {
    /// What guest a reports it by (`@step=ID`), unique in the run: `udp-qp`, or `udp-qp.2`
    /// for round 2 of a run of several rounds.
    pub id: String,
    /// What it does, for the progress lines.
    pub what: String,
    pub action: Action,
}

/// How much the run measures.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Round trips of each ping-pong.
    pub latency_iters: u64,
    /// TCP bandwidth message sizes.
    pub tcp_sizes: Vec<usize>,
    /// UDP bandwidth datagram sizes (none: no UDP bandwidth test).
    pub udp_sizes: Vec<usize>,
    /// Bytes per bandwidth test and size (TCP messages from [`LARGE_MSG`] on: times
    /// [`Plan::bw_large_factor`]).
    pub bw_bytes: u64,
    /// How many times [`Plan::bw_bytes`] a TCP bandwidth test with messages of
    /// [`LARGE_MSG`] or more moves, so that it has enough messages for a steady state.
    pub bw_large_factor: u64,
    /// Bytes of each bulk transfer a→b.
    pub bulk_bytes: u64,
    /// Bytes each way between guest a and the lab host (0: no host steps).
    pub host_bytes: u64,
    /// How many times every measurement runs (1..=[`results::MAX_ROUNDS`]); the table
    /// shows each figure's median and spread.
    pub rounds: u32,
    /// Each measurement over QPs right next to the same over sockets, the two taking turns
    /// to go first round by round, so a change in the host's load hits both sides alike
    /// (the bench). Else every QP step, then the host steps, then every sockets step (the
    /// demo: it reads as a story).
    pub interleave: bool,
    /// Limit for one round (the first includes the boot); the run's limit is
    /// [`Plan::limit`].
    pub round_timeout: Duration,
    /// Messages of each `qpip-overhead` transport at the end of every round (0: none).
    pub overhead_messages: u64,
    /// Each ping-pong and TCP bandwidth test (one message size at a time) is a CPU window:
    /// both guests' `/proc/stat` and the host's CPU of QEMU and qpipd at its edges.
    pub cpu_marks: bool,
}

impl Plan {
    /// The demo: modest counts (TCG guests), everything once, in about a minute.
    pub fn demo() -> Plan {
        Plan {
            latency_iters: 300,
            tcp_sizes: vec![65536],
            udp_sizes: Vec::new(),
            bw_bytes: 4 << 20,
            bw_large_factor: 1,
            bulk_bytes: 8 << 20,
            host_bytes: 1 << 20,
            rounds: 1,
            interleave: false,
            round_timeout: Duration::from_secs(280),
            overhead_messages: 0,
            cpu_marks: false,
        }
    }

    /// The bench: more round trips, every message size, UDP bandwidth, three rounds with
    /// QPs and sockets interleaved, each ending with `qpip-overhead`; CPU windows; no host
    /// steps. TCP bandwidth moves 16 MiB of 1 KiB and 8 KiB messages and 64 MiB of 64 KiB
    /// and 256 KiB messages (1024 and 256 messages: with 16 MiB, 256 and 64 were over in a
    /// fraction of a second, too few for a steady state or for `/proc/stat`'s 10 ms ticks).
    pub fn bench() -> Plan {
        Plan {
            latency_iters: 2000,
            tcp_sizes: vec![1024, 8192, 65536, 262144],
            udp_sizes: vec![1024, 8192],
            bw_bytes: 16 << 20,
            bw_large_factor: 4,
            bulk_bytes: 32 << 20,
            host_bytes: 0,
            rounds: 3,
            interleave: true,
            round_timeout: Duration::from_secs(1200),
            overhead_messages: 1000,
            cpu_marks: true,
        }
    }

    /// Bytes of a TCP bandwidth test with messages of `size`.
    pub fn tcp_bw_bytes(&self, size: usize) -> u64 {
        if size >= LARGE_MSG {
            self.bw_bytes.saturating_mul(self.bw_large_factor.max(1))
        } else {
            self.bw_bytes
        }
    }

    /// Limit for the whole run, boot to power-off.
    pub fn limit(&self) -> Duration {
        self.round_timeout * self.rounds.max(1)
    }

    /// The measurements of one round on one net, in order.
    fn tests(&self) -> Vec<Test> {
        let mut t = vec![Test::UdpPing, Test::TcpPing, Test::TcpBw];
        if !self.udp_sizes.is_empty() {
            t.push(Test::UdpBw);
        }
        t.push(Test::Bulk);
        t
    }

    /// The name round `round`'s measurement `base` is reported by: `base` itself in a run
    /// of one round, else `base.ROUND` (see [`results::Measurements::take_line`]).
    pub fn tag(&self, base: &str, round: u32) -> String {
        if self.rounds > 1 {
            format!("{base}.{round}")
        } else {
            base.to_string()
        }
    }

    fn measure(&self, test: Test, net: Net, round: u32) -> Step {
        let iters = self.latency_iters;
        let sizes = |v: &[usize]| {
            v.iter()
                .map(|s| human(*s as u64))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let over = match net {
            Net::Qp => "over QPs",
            Net::Sockets => "over kernel sockets",
        };
        let bytes = human(self.bw_bytes);
        // TCP: the sizes grouped by the bytes each moves, "16 MiB per size, messages of
        // 1 KiB, 8 KiB; 64 MiB per size, messages of 64 KiB, 256 KiB".
        let mut groups: Vec<(u64, Vec<usize>)> = Vec::new();
        for s in &self.tcp_sizes {
            let b = self.tcp_bw_bytes(*s);
            match groups.iter_mut().find(|g| g.0 == b) {
                Some(g) => g.1.push(*s),
                None => groups.push((b, vec![*s])),
            }
        }
        let tcp_detail = groups
            .iter()
            .map(|(b, v)| format!("{} per size, messages of {}", human(*b), sizes(v)))
            .collect::<Vec<_>>()
            .join("; ");
        let mut what = match test {
            Test::UdpPing => format!("UDP ping-pong a⇄b {over}"),
            Test::TcpPing if net == Net::Qp => format!("TCP message ping-pong a⇄b {over}"),
            Test::TcpPing => format!("TCP ping-pong a⇄b {over}"),
            Test::TcpBw => format!("TCP bandwidth a→b {over}"),
            Test::UdpBw => format!("UDP bandwidth a→b {over}"),
            Test::Bulk => format!("TCP bulk transfer a→b {over}"),
        };
        if net == Net::Sockets && matches!(test, Test::UdpPing | Test::TcpPing) {
            what += ", virtio-net";
        }
        let detail = match test {
            Test::UdpPing | Test::TcpPing => format!("{iters} round trips"),
            Test::TcpBw => tcp_detail,
            Test::UdpBw => format!("{bytes} per size, datagrams of {}", sizes(&self.udp_sizes)),
            Test::Bulk => format!(
                "{}, {}, SHA-256 compared",
                if net == Net::Qp {
                    "qpip-cat"
                } else {
                    "busybox nc"
                },
                human(self.bulk_bytes)
            ),
        };
        let round_note = if self.rounds > 1 {
            format!("round {round}/{}: ", self.rounds)
        } else {
            String::new()
        };
        Step {
            id: self.tag(&format!("{}-{}", test.id(), net.id()), round),
            what: format!("{round_note}{what} ({detail})"),
            action: Action::Measure { test, net, round },
        }
    }

    /// The steps guest a runs, in order, with what each does.
    pub fn steps(&self) -> Vec<Step> {
        let step = |id: &str, what: String, action| Step {
            id: id.to_string(),
            what,
            action,
        };
        let mut s = vec![step(
            "ready",
            "guest b starts its servers (qpip-perf, qpip-cat, nc); guest a makes the test data"
                .to_string(),
            Action::Ready,
        )];
        let tests = self.tests();
        let host_steps = || {
            if self.host_bytes == 0 {
                return Vec::new();
            }
            let hb = human(self.host_bytes);
            let host = netns::HOST_ADDR;
            vec![
                step(
                    "host-out",
                    format!("guest a's TCP QP to a Python echo server on the lab host {host} ({hb} out and back)"),
                    Action::HostOut,
                ),
                step(
                    "host-in",
                    format!("a Python client on the lab host to a TCP QP listener in guest a ({hb} each way)"),
                    Action::HostIn,
                ),
                step(
                    "host-udp",
                    "UDP datagrams from a QP in guest a, echoed by a Python socket on the lab host"
                        .to_string(),
                    Action::HostUdp,
                ),
            ]
        };
        for round in 1..=self.rounds.max(1) {
            if self.interleave {
                // Odd rounds: QPs first; even rounds: sockets first.
                let order = if round % 2 == 1 {
                    [Net::Qp, Net::Sockets]
                } else {
                    [Net::Sockets, Net::Qp]
                };
                for t in &tests {
                    s.extend(order.map(|net| self.measure(*t, net, round)));
                }
                if round == 1 {
                    s.extend(host_steps());
                }
            } else {
                s.extend(tests.iter().map(|t| self.measure(*t, Net::Qp, round)));
                if round == 1 {
                    s.extend(host_steps());
                }
                s.extend(tests.iter().map(|t| self.measure(*t, Net::Sockets, round)));
            }
            if self.overhead_messages > 0 {
                let round_note = if self.rounds > 1 {
                    format!("round {round}/{}: ", self.rounds)
                } else {
                    String::new()
                };
                s.push(step(
                    &self.tag("overhead", round),
                    format!(
                        "{round_note}host overhead per message in guest a, QPs vs kernel sockets on \
                         loopback (qpip-overhead, {} messages each, 1 ms apart, then {} µs)",
                        self.overhead_messages,
                        scripts::OVERHEAD_SPIN_US
                    ),
                    Action::Overhead { round },
                ));
            }
        }
        s
    }
}

/// A byte count as people write it (binary units when exact).
pub fn human(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else if bytes >= 1024 && bytes.is_multiple_of(1024) {
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

/// Reads the guests' output line by line as it comes: progress, failures, measurements.
struct Watcher<'a> {
    steps: Vec<Step>,
    partial: [Vec<u8>; 2],
    current: Option<(usize, Instant)>,
    /// (step id, message) of the first failure a guest reported.
    failure: Option<(String, String)>,
    measurements: Measurements,
    /// A measurement line that could not be read.
    bad_line: Option<String>,
    progress: &'a mut dyn FnMut(&str),
    verbose: bool,
}

impl Watcher<'_> {
    fn feed(&mut self, guest: usize, bytes: &[u8]) {
        let i = guest.min(1);
        self.partial[i].extend_from_slice(bytes);
        while let Some(pos) = self.partial[i].iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.partial[i].drain(..=pos).collect();
            let line = String::from_utf8_lossy(&line).trim_end().to_string();
            self.line(guest, &line);
        }
    }

    fn line(&mut self, guest: usize, line: &str) {
        let name = if guest == 0 { "a" } else { "b" };
        if self.verbose && !line.starts_with("@perf.") {
            (self.progress)(&format!("  [{name}] {line}"));
        }
        if let Some(rest) = line.strip_prefix("@fail=") {
            let (id, why) = rest.split_once(": ").unwrap_or((rest, ""));
            if self.failure.is_none() {
                self.failure = Some((id.to_string(), format!("guest {name}: {why}")));
            }
            return;
        }
        if guest != 0 {
            return;
        }
        if let Some(id) = line.strip_prefix("@step=") {
            let i = self.steps.iter().position(|s| s.id == id);
            let Some(i) = i else {
                return;
            };
            let n = self.steps.len();
            (self.progress)(&format!("[{}/{n}] {} ...", i + 1, self.steps[i].what));
            self.current = Some((i, Instant::now()));
        } else if line.starts_with("@ok=") {
            if let Some((_, t0)) = self.current.take() {
                (self.progress)(&format!("      ok ({:.1} s)", t0.elapsed().as_secs_f64()));
            }
        } else if let Err(e) = self.measurements.take_line(line) {
            self.bad_line.get_or_insert(e);
        }
    }

    fn describe(&self, id: &str) -> String {
        self.steps
            .iter()
            .find(|s| s.id == id)
            .map(|s| s.what.clone())
            .unwrap_or_else(|| id.to_string())
    }
}

/// What the lab host's side did.
#[derive(Debug, Default)]
struct HostSide {
    ok: bool,
    output: String,
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
        ..VmSpec::new(cmd)
    };
    let spec = LabSpec {
        guests: vec![
            GuestSpec::new("a", vm(scripts::guest_a(plan))),
            GuestSpec::new("b", vm(scripts::guest_b(plan))),
        ],
        network: Network::Lab(netns.to_string()),
    };
    let started = Instant::now();
    progress(&format!(
        "booting guests a and b (QEMU, TCG) with a qpip device each, on the lab network (namespace {netns}) ..."
    ));
    let mut watcher = Watcher {
        steps: plan.steps(),
        partial: [Vec::new(), Vec::new()],
        current: None,
        failure: None,
        measurements: Measurements::with_rounds(plan.rounds as usize),
        bad_line: None,
        progress,
        verbose,
    };
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
    let lines = results::lines(&watcher.measurements, plan.tcp_sizes.len() > 1);
    // A round that lacks a figure still leaves the others' median; a figure no round has
    // means the guests' reports and this reader disagree.
    if lines
        .iter()
        .any(|l| l.qp().is_none() || l.sockets().is_none())
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

/// The lab host's side: `host.py` in the namespace, stopped if it outlives `limit`.
fn run_host_side(host: &crate::LabHost, bytes: u64, limit: Duration) -> HostSide {
    let shared = host.shared_dir().to_string_lossy().into_owned();
    let mut cmd = host.command("python3");
    cmd.arg("-c")
        .arg(include_str!("host.py"))
        .args([
            shared.as_str(),
            netns::HOST_ADDR,
            &netns::device_addr(1),
            &bytes.to_string(),
            &scripts::HOST_TCP_PORT.to_string(),
            &scripts::HOST_UDP_PORT.to_string(),
            &scripts::GUEST_LISTEN_PORT.to_string(),
        ])
        .stdin(Stdio::null());
    let dir = host.shared_dir().to_path_buf();
    let out = dir.join(".host.out");
    match run_limited(cmd, &out, limit) {
        Ok((ok, output)) => HostSide { ok, output },
        Err(e) => HostSide {
            ok: false,
            output: format!(
                "cannot run python3 in the lab's namespace: {e} (./qpip setup installs it)"
            ),
        },
    }
}

/// The lab host's side of the CPU windows: for each `/lab/cpu-mark.N` guest a creates (N
/// from 1, in order) it writes `/lab/cpu-mark.N.host`, one line of the CPU seconds so far of
/// each guest's QEMU and of its qpipd (`qemu-a=12.3 qpipd-a=4.56 qemu-b=...`), until guest
/// a is done (`/lab/a-done`), the lab ends early or `limit` has passed.
fn serve_cpu_marks(host: &crate::LabHost, limit: Duration) {
    let dir = host.shared_dir();
    let deadline = Instant::now() + limit;
    let mut n = 1u64;
    loop {
        if dir.join(format!("cpu-mark.{n}")).exists() {
            let tmp = dir.join(format!(".cpu-mark.{n}.host"));
            let done = dir.join(format!("cpu-mark.{n}.host"));
            let line = host_cpu_line(host);
            if let Err(e) =
                std::fs::write(&tmp, line + "\n").and_then(|()| std::fs::rename(&tmp, &done))
            {
                log::warn!("cannot write {}: {e}", done.display());
            }
            n += 1;
            continue;
        }
        if dir.join("a-done").exists()
            || host.ending()
            || crate::interrupted()
            || Instant::now() >= deadline
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `qemu-NAME=SECS qpipd-NAME=SECS` for each guest: the CPU time (user + system, all
/// threads) of its QEMU and of all its qpipd; a process that cannot be read is left out.
fn host_cpu_line(host: &crate::LabHost) -> String {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let secs = |pid: &u32| -> Option<f64> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        Some(proc_cpu_ticks(&text)? as f64 / hz)
    };
    let mut parts = Vec::new();
    for (i, name) in host.guests().iter().enumerate() {
        let Some((qemu, devices)) = host.pids(i).split_first() else {
            continue;
        };
        if let Some(s) = secs(qemu) {
            parts.push(format!("qemu-{name}={s}"));
        }
        if let Some(s) = devices.iter().map(secs).sum::<Option<f64>>() {
            parts.push(format!("qpipd-{name}={s}"));
        }
    }
    parts.join(" ")
}

/// utime + stime (ticks) from the text of `/proc/PID/stat`.
fn proc_cpu_ticks(stat: &str) -> Option<u64> {
    // The command name in parentheses may hold spaces; the figures follow its last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Field 3 (state) is f[0]: utime is field 14, stime field 15.
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// Runs `cmd` with stdout and stderr to `out`, killing it after `limit`; (success, output).
fn run_limited(mut cmd: Command, out: &Path, limit: Duration) -> std::io::Result<(bool, String)> {
    let f = std::fs::File::create(out)?;
    cmd.stdout(f.try_clone()?).stderr(f);
    let mut child: Child = cmd.spawn()?;
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break Some(st);
        }
        if Instant::now() >= deadline || crate::interrupted() {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut text = std::fs::read_to_string(out).unwrap_or_default();
    if status.is_none() {
        text.push_str(&format!("(stopped after {} s)\n", limit.as_secs()));
    }
    Ok((status.is_some_and(|s| s.success()), text))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The step ids of `plan` with their `Measure` actions only.
    fn measures(plan: &Plan) -> Vec<(String, Test, Net, u32)> {
        plan.steps()
            .into_iter()
            .filter_map(|s| match s.action {
                Action::Measure { test, net, round } => Some((s.id, test, net, round)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn every_step_of_the_plan_is_in_guest_a_script_in_order() {
        let mut five = Plan::bench();
        five.rounds = 5;
        for plan in [Plan::demo(), Plan::bench(), five] {
            let script = scripts::guest_a(&plan);
            let mut at = 0;
            for step in plan.steps() {
                let id = &step.id;
                let pos = script[at..]
                    .find(&format!("\nstep {id}\n"))
                    .unwrap_or_else(|| panic!("step {id} missing or out of order"));
                at += pos + 1;
            }
            assert_eq!(
                script.matches("\nstep ").count(),
                plan.steps().len(),
                "the script has steps the plan does not describe"
            );
            let ids: Vec<String> = plan.steps().into_iter().map(|s| s.id).collect();
            let mut unique = ids.clone();
            unique.sort();
            unique.dedup();
            assert_eq!(unique.len(), ids.len(), "step ids repeat: {ids:?}");
        }
        assert!(scripts::guest_a(&Plan::demo()).contains("host-out"));
        assert!(!scripts::guest_a(&Plan::bench()).contains("host-out"));
    }

    #[test]
    fn the_demo_is_one_round_in_its_story_order() {
        let plan = Plan::demo();
        assert_eq!(plan.rounds, 1);
        let ids: Vec<String> = plan.steps().into_iter().map(|s| s.id).collect();
        assert_eq!(
            ids,
            [
                "ready", "udp-qp", "tcp-qp", "bw-qp", "bulk-qp", "host-out", "host-in", "host-udp",
                "udp-sk", "tcp-sk", "bw-sk", "bulk-sk"
            ]
        );
        assert_eq!(plan.limit(), plan.round_timeout);
        assert!(plan.steps()[1].what.starts_with("UDP ping-pong"));
    }

    #[test]
    fn the_bench_runs_each_measurement_in_every_round_taking_turns() {
        let plan = Plan::bench();
        assert_eq!(plan.rounds, 3);
        let m = measures(&plan);
        // Five tests on two nets, three rounds.
        assert_eq!(m.len(), 5 * 2 * 3);
        for pair in m.chunks(2) {
            let (a, b) = (&pair[0], &pair[1]);
            assert_eq!(
                (a.1, a.3),
                (b.1, b.3),
                "QPs and sockets are next to each other"
            );
            let first = if a.3 % 2 == 1 { Net::Qp } else { Net::Sockets };
            assert_eq!(a.2, first, "round {}: {} goes first", a.3, a.0);
            assert_ne!(a.2, b.2);
        }
        assert_eq!(m[0].0, "udp-qp.1");
        assert_eq!(m[10].0, "udp-sk.2");
        assert!(plan.steps()[1].what.starts_with("round 1/3: UDP ping-pong"));
        assert_eq!(plan.limit(), plan.round_timeout * 3);
        // Each round's bulk transfers have their own ports, clear of the lab host's.
        let mut ports: Vec<u16> = (1..=results::MAX_ROUNDS)
            .flat_map(|r| {
                [
                    scripts::bulk_port(Net::Qp, r),
                    scripts::bulk_port(Net::Sockets, r),
                ]
            })
            .collect();
        let n = ports.len();
        ports.sort();
        ports.dedup();
        assert_eq!(ports.len(), n);
        assert!(*ports.last().unwrap() < scripts::HOST_TCP_PORT);
        let a = scripts::guest_a(&plan);
        assert!(a.contains("bulk qp.2 2 qpip-cat --message -w 60"), "{a}");
        assert!(a.contains(&format!(" {}\n", scripts::bulk_port(Net::Sockets, 3))));
        let b = scripts::guest_b(&plan);
        assert!(b.contains("receivers 1 qp.1 sk.1 7000 7001 ready\n"), "{b}");
        // A later round's receivers fail as that round's first bulk step (sockets go
        // first in even rounds).
        assert!(
            b.contains("receivers 2 qp.2 sk.2 7002 7003 bulk-sk.2\n"),
            "{b}"
        );
        assert!(
            b.contains("receivers 3 qp.3 sk.3 7004 7005 bulk-qp.3\n"),
            "{b}"
        );
        // One round: names without round numbers, as the demo reports them.
        let one = scripts::guest_b(&Plan::demo());
        assert!(one.contains("receivers 1 qp sk 7000 7001 ready\n"), "{one}");
    }

    #[test]
    fn the_bench_ends_each_round_with_qpip_overhead_and_marks_cpu_windows() {
        let plan = Plan::bench();
        let steps = plan.steps();
        let overhead: Vec<(usize, &str)> = steps
            .iter()
            .enumerate()
            .filter(|(_, s)| matches!(s.action, Action::Overhead { .. }))
            .map(|(i, s)| (i, s.id.as_str()))
            .collect();
        // 1 + (10 + 1) per round: the last step of each round.
        assert_eq!(
            overhead,
            [(11, "overhead.1"), (22, "overhead.2"), (33, "overhead.3")]
        );
        let a = scripts::guest_a(&plan);
        assert!(a.contains("\nstep overhead.2\nqpip-overhead --messages 1000 --json"));
        assert!(
            a.contains("echo \"@overhead.2=$(cat /tmp/overhead.json)\""),
            "{a}"
        );
        assert!(
            a.contains("qpip-overhead --messages 1000 --spin-us 400 --json"),
            "{a}"
        );
        // Ping-pongs are windows named as their step; TCP bandwidth one per size.
        assert!(a.contains("perf udp-sk.2 udp-sk.2 "), "{a}");
        for size in &plan.tcp_sizes {
            let line = format!("perf bw-qp.3 bw-qp:{size}.3 ");
            assert!(a.contains(&line), "{line}: {a}");
            assert!(a.contains(&format!("--sizes {size} --bytes")), "{a}");
        }
        assert!(a.contains("perf udpbw-qp.1 - "), "{a}");
        // TCP bandwidth: 16 MiB of small messages, 64 MiB from 64 KiB on; UDP 16 MiB.
        for (size, bytes) in [
            (1024, 16 << 20),
            (8192, 16 << 20),
            (65536, 64 << 20),
            (262144, 64 << 20),
        ] {
            assert_eq!(plan.tcp_bw_bytes(size), bytes);
            assert!(
                a.contains(&format!("--sizes {size} --bytes {bytes}\n")),
                "{a}"
            );
        }
        assert!(
            a.contains("--udp --test bandwidth --sizes 1024,8192 --bytes 16777216\n"),
            "{a}"
        );
        let bw = plan
            .steps()
            .into_iter()
            .find(|s| s.id == "bw-qp.1")
            .unwrap();
        assert!(
            bw.what.ends_with(
                "(16 MiB per size, messages of 1 KiB, 8 KiB; 64 MiB per size, messages of 64 KiB, 256 KiB)"
            ),
            "{}",
            bw.what
        );
        let b = scripts::guest_b(&plan);
        assert!(b.contains("cpu-mark.$n.b"), "{b}");
        assert!(!b.contains("lab-wait a-done"), "{b}");
        // The demo: none of it.
        let demo = Plan::demo();
        let a = scripts::guest_a(&demo);
        assert!(!a.contains("qpip-overhead --messages"));
        assert!(a.contains("perf udp-qp - "), "{a}");
        assert!(a.contains("--sizes 65536 --bytes 4194304\n"), "{a}");
        assert!(scripts::guest_b(&demo).contains("lab-wait a-done"));
        assert!(demo
            .steps()
            .iter()
            .all(|s| !matches!(s.action, Action::Overhead { .. })));
    }

    #[test]
    fn host_cpu_is_read_from_proc_stat() {
        // A command name with spaces and a ')' of its own.
        let stat = "4242 (qemu (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 1234 567 0 0 20 0 9";
        assert_eq!(proc_cpu_ticks(stat), Some(1234 + 567));
        assert_eq!(proc_cpu_ticks("4242 (qpipd) S 1 2"), None);
        let own = std::fs::read_to_string("/proc/self/stat").unwrap();
        assert!(proc_cpu_ticks(&own).is_some());
    }

    #[test]
    fn watcher_reports_progress_failures_and_measurements() {
        let mut said = Vec::new();
        let mut progress = |s: &str| said.push(s.to_string());
        let plan = Plan::bench();
        let mut w = Watcher {
            steps: plan.steps(),
            partial: [Vec::new(), Vec::new()],
            current: None,
            failure: None,
            measurements: Measurements::with_rounds(3),
            bad_line: None,
            progress: &mut progress,
            verbose: false,
        };
        w.feed(0, b"@step=udp-qp.1\n@perf.udp-qp.1={\"results\":[]}\n@o");
        w.feed(
            0,
            b"k=udp-qp.1\n@step=udp-sk.2\n@perf.udp-sk.2={\"results\":[]}\n",
        );
        w.feed(1, b"@fail=ready: nothing listens\n");
        w.feed(0, b"@fail=udp-sk.2: timeout\n");
        let (id, why) = w.failure.clone().unwrap();
        assert_eq!(id, "ready");
        assert_eq!(why, "guest b: nothing listens");
        assert!(w.measurements.rounds[0].perf.contains_key("udp-qp"));
        assert!(w.measurements.rounds[1].perf.contains_key("udp-sk"));
        assert!(w.current.is_some());
        assert!(w
            .describe("udp-sk.2")
            .starts_with("round 2/3: UDP ping-pong"));
        drop(w);
        assert!(said[0].starts_with("[2/34] round 1/3: UDP"), "{said:?}");
        assert!(said[1].starts_with("      ok ("), "{said:?}");
        assert!(
            said[2].starts_with("[13/34] round 2/3: UDP ping-pong a⇄b over kernel"),
            "{said:?}"
        );
    }
}
