//! What the demo and the bench measured: read from guest a's report lines round by round,
//! put side by side (QPs vs kernel sockets) as a table, and written as JSON and Markdown.
//!
//! With several rounds each figure is the median of its rounds, shown with its spread
//! (min–max); the QP gain is the ratio of the two medians, shown with the range of the
//! ratios of each round (QPs and sockets ran next to each other in a round, so a round's
//! ratio saw the same host load on both sides).
//!
//! The bench's table is followed by the QP side's counters per message of each
//! measurement (what `qpip-perf` reports for guest a, the client, and guest b, the
//! server): the kicks, interrupts, engine sleeps and segments behind each figure.
//!
//! Two more kinds of figure, when the guests report them (the bench):
//! - **host overhead per message**, the QPIP paper's Table 1: `qpip-overhead` in guest a,
//!   the time inside the calls that post and reap one message (QPs) against `send()` and
//!   `recv(MSG_DONTWAIT)` of data already queued (kernel sockets), reported as
//!   `@overhead[.ROUND]=JSON`, once sleeping between messages and once with `--spin-us`
//!   (`spin_us` in the JSON: the device's engine stays awake, the posts are quiet);
//! - **whole-system CPU per message**: the table's `guest-wide CPU` is both guests' busy
//!   time (all of `/proc/stat` but idle, iowait and steal) per message as `qpip-perf`
//!   measures it on each end over exactly its measured interval (its row's
//!   `both_guests_cpu_us`: `guest_cpu_us` of guest a, the client, plus
//!   `server_guest_cpu_us` of guest b, the server). The host's side comes from CPU marks at
//!   both edges of each whole `qpip-perf` run, `@cpu.NAME=PHASE|A|B|HOST` (PHASE `start` or
//!   `end`; A and B the first line of guest a's and guest b's `/proc/stat`; HOST the lab
//!   host's `qemu-a=SECS qpipd-a=SECS ...`, the CPU time of each guest's QEMU and qpipd
//!   processes): a block under the table has the host's CPU of QEMU and qpipd per message
//!   over those windows, which hold the run's start-up, connection and buffer
//!   registration too.

use super::human;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// The most rounds a run may have (guest b's bulk ports are numbered by round).
pub const MAX_ROUNDS: u32 = 20;

/// Ticks per second of a guest's `/proc/stat` (Linux's USER_HZ).
pub const GUEST_HZ: f64 = 100.0;

/// What guest a reported in one round: `@perf.NAME=JSON`, `@bulk.NAME=BYTES START END`,
/// `@overhead=JSON` and `@cpu.NAME=PHASE|A|B|HOST`.
#[derive(Debug, Default, Clone)]
pub struct Round {
    /// By test (`udp-qp`, `bw-sk`, ...): the `results` rows qpip-perf printed (a test run
    /// in several parts, one message size each, has the rows of every part).
    pub perf: BTreeMap<String, Vec<Value>>,
    /// By net (`qp`, `sk`): bytes and seconds of a verified bulk transfer.
    pub bulk: BTreeMap<String, (u64, f64)>,
    /// The `results` rows of `qpip-overhead` (`qp-udp`, `sockets-udp`, `qp-tcp`,
    /// `sockets-tcp`), settling by sleeping between messages (most posts kick the device).
    pub overhead: Vec<Value>,
    /// The same with `--spin-us` (most posts find the device's engine awake).
    pub overhead_spin: Vec<Value>,
    /// By measurement (`udp-qp`, `bw-sk:1024` for one message size): the CPU marks at the
    /// edges of its window.
    pub cpu: BTreeMap<String, CpuWindow>,
}

/// CPU time at one edge of a measurement window.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct CpuMark {
    /// The figures of the first line of guest a's `/proc/stat`, in [`GUEST_HZ`] ticks:
    /// user, nice, system, idle, iowait, irq, softirq, steal, ...
    pub a: Vec<u64>,
    /// The same of guest b.
    pub b: Vec<u64>,
    /// CPU seconds (user + system, every thread) of the lab's processes on the host, by
    /// name: `qemu-a`, `qpipd-a` (all of guest a's qpipd), `qemu-b`, ...
    pub host: BTreeMap<String, f64>,
}

/// The CPU marks of one measurement.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct CpuWindow {
    pub start: Option<CpuMark>,
    pub end: Option<CpuMark>,
}

/// A guest's busy ticks in the figures of its `/proc/stat` line: user, nice, system, irq
/// and softirq (all but idle, iowait and steal; guest time is part of user).
fn busy_ticks(stat: &[u64]) -> Option<u64> {
    if stat.len() < 7 {
        return None;
    }
    Some(stat[0] + stat[1] + stat[2] + stat[5] + stat[6])
}

/// The figures of a `/proc/stat` CPU line (`cpu  1 2 3 ...`).
fn parse_stat_line(text: &str) -> Option<Vec<u64>> {
    let mut w = text.split_whitespace();
    if w.next()? != "cpu" {
        return None;
    }
    let v: Vec<u64> = w.map(str::parse).collect::<Result<_, _>>().ok()?;
    (v.len() >= 7).then_some(v)
}

impl CpuWindow {
    /// Busy seconds of guests a and b together over the window.
    fn guests_busy_s(&self) -> Option<f64> {
        let (s, e) = (self.start.as_ref()?, self.end.as_ref()?);
        let mut ticks = 0;
        for (s, e) in [(&s.a, &e.a), (&s.b, &e.b)] {
            ticks += busy_ticks(e)?.checked_sub(busy_ticks(s)?)?;
        }
        Some(ticks as f64 / GUEST_HZ)
    }

    /// Host CPU seconds over the window of the processes named `CLASS-GUEST` (`qemu`,
    /// `qpipd`), summed over the guests; None unless both edges have some.
    fn host_s(&self, class: &str) -> Option<f64> {
        let (s, e) = (self.start.as_ref()?, self.end.as_ref()?);
        let prefix = format!("{class}-");
        let mut found = false;
        let mut sum = 0.0;
        for (name, end) in e.host.iter().filter(|(k, _)| k.starts_with(&prefix)) {
            let start = s.host.get(name)?;
            sum += (end - start).max(0.0);
            found = true;
        }
        found.then_some(sum)
    }
}

/// Everything guest a reported, by round (index 0 is round 1).
#[derive(Debug, Default, Clone)]
pub struct Measurements {
    pub rounds: Vec<Round>,
}

/// Splits a reported name into its test and round: `udp-qp.2` is round 2 of `udp-qp`, a
/// name without a round number is round 1 (a run of one round reports no numbers).
fn split_round(name: &str) -> Result<(&str, usize), String> {
    match name.rsplit_once('.') {
        Some((base, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
            match n.parse::<u32>() {
                Ok(r) if (1..=MAX_ROUNDS).contains(&r) => Ok((base, r as usize)),
                _ => Err(format!(
                    "round {n} of {base} is not between 1 and {MAX_ROUNDS}"
                )),
            }
        }
        _ => Ok((name, 1)),
    }
}

impl Measurements {
    /// Room for `n` rounds, so that a round that reported nothing still counts as one.
    pub fn with_rounds(n: usize) -> Measurements {
        Measurements {
            rounds: vec![Round::default(); n],
        }
    }

    fn round_mut(&mut self, r: usize) -> &mut Round {
        if self.rounds.len() < r {
            self.rounds.resize_with(r, Round::default);
        }
        &mut self.rounds[r - 1]
    }

    /// Takes one report line of guest a (without its end of line); other lines are ignored.
    /// An unreadable measurement is an error naming the line.
    pub fn take_line(&mut self, line: &str) -> Result<(), String> {
        if let Some(rest) = line.strip_prefix("@perf.") {
            let (name, text) = rest
                .split_once('=')
                .ok_or_else(|| format!("no '=' in {line:?}"))?;
            let (test, round) = split_round(name)?;
            let v: Value = serde_json::from_str(text)
                .map_err(|e| format!("qpip-perf's JSON for {name} is unreadable ({e}): {text}"))?;
            let rows = v["results"]
                .as_array()
                .ok_or_else(|| format!("qpip-perf's JSON for {name} has no results: {text}"))?;
            self.round_mut(round)
                .perf
                .entry(test.to_string())
                .or_default()
                .extend(rows.iter().cloned());
        } else if let Some(rest) = line.strip_prefix("@overhead") {
            let (suffix, text) = rest
                .split_once('=')
                .ok_or_else(|| format!("no '=' in {line:?}"))?;
            let (base, round) =
                split_round(&format!("overhead{suffix}")).map(|(b, r)| (b.to_string(), r))?;
            if base != "overhead" {
                return Err(format!("unreadable overhead report {line:?}"));
            }
            let v: Value = serde_json::from_str(text)
                .map_err(|e| format!("qpip-overhead's JSON is unreadable ({e}): {text}"))?;
            let rows = v["results"]
                .as_array()
                .ok_or_else(|| format!("qpip-overhead's JSON has no results: {text}"))?;
            let r = self.round_mut(round);
            if v["spin_us"].as_u64().unwrap_or(0) > 0 {
                r.overhead_spin = rows.clone();
            } else {
                r.overhead = rows.clone();
            }
        } else if let Some(rest) = line.strip_prefix("@cpu.") {
            let bad = || format!("unreadable CPU mark {line:?}");
            let (name, text) = rest.split_once('=').ok_or_else(bad)?;
            let (test, round) = split_round(name)?;
            let parts: Vec<&str> = text.split('|').collect();
            let [phase, a, b, host] = parts[..] else {
                return Err(bad());
            };
            let mut h = BTreeMap::new();
            for kv in host.split_whitespace() {
                let (k, v) = kv.split_once('=').ok_or_else(bad)?;
                h.insert(k.to_string(), v.parse::<f64>().map_err(|_| bad())?);
            }
            let mark = CpuMark {
                a: parse_stat_line(a).ok_or_else(bad)?,
                b: parse_stat_line(b).ok_or_else(bad)?,
                host: h,
            };
            let w = self
                .round_mut(round)
                .cpu
                .entry(test.to_string())
                .or_default();
            match phase {
                "start" => w.start = Some(mark),
                "end" => w.end = Some(mark),
                _ => return Err(bad()),
            }
        } else if let Some(rest) = line.strip_prefix("@bulk.") {
            let bad = || format!("unreadable bulk report {line:?}");
            let (name, text) = rest.split_once('=').ok_or_else(bad)?;
            let (net, round) = split_round(name)?;
            let w: Vec<&str> = text.split_whitespace().collect();
            let [bytes, t0, t1] = w[..] else {
                return Err(bad());
            };
            let bytes: u64 = bytes.parse().map_err(|_| bad())?;
            let t0: f64 = t0.parse().map_err(|_| bad())?;
            let t1: f64 = t1.parse().map_err(|_| bad())?;
            // /proc/uptime has 10 ms steps: never divide by zero.
            self.round_mut(round)
                .bulk
                .insert(net.to_string(), (bytes, (t1 - t0).max(0.01)));
        }
        Ok(())
    }

    /// The message sizes of `test` (`bw`, `udpbw`) that QPs and sockets both measured in
    /// some round, in the order QPs reported them.
    fn sizes(&self, test: &str) -> Vec<u64> {
        let of = |name: String| -> Vec<u64> {
            let mut v = Vec::new();
            for r in &self.rounds {
                for row in r.perf.get(&name).into_iter().flatten() {
                    if let Some(s) = row["size"].as_u64() {
                        if !v.contains(&s) {
                            v.push(s);
                        }
                    }
                }
            }
            v
        };
        let sk = of(format!("{test}-sk"));
        of(format!("{test}-qp"))
            .into_iter()
            .filter(|s| sk.contains(s))
            .collect()
    }
}

impl Round {
    /// The row of test NAME with this message size, if measured.
    fn row(&self, name: &str, size: Option<u64>) -> Option<&Value> {
        self.perf
            .get(name)?
            .iter()
            .find(|r| size.is_none() || r["size"].as_u64() == size)
    }

    fn num(&self, name: &str, size: Option<u64>, path: &[&str]) -> Option<f64> {
        let mut v = self.row(name, size)?;
        for p in path {
            v = &v[*p];
        }
        v.as_f64()
    }

    /// Guest CPU (client in a + server in b) per message, µs.
    fn cpu(&self, name: &str, size: Option<u64>) -> Option<f64> {
        let c = self.num(name, size, &["cpu_us_per_msg", "client"])?;
        let s = self.num(name, size, &["cpu_us_per_msg", "server"])?;
        Some(c + s)
    }

    /// The CPU window of test NAME (`udp-qp`, `bw-sk`) with this message size.
    fn window(&self, name: &str, size: Option<u64>) -> Option<&CpuWindow> {
        match size {
            Some(s) => self.cpu.get(&format!("{name}:{s}")),
            None => self.cpu.get(name),
        }
    }

    /// Messages (round trips of a ping-pong) of test NAME with this size.
    fn msgs(&self, name: &str, size: Option<u64>) -> Option<f64> {
        self.num(name, size, &["msgs"]).filter(|n| *n > 0.0)
    }

    /// Busy time of both guests (their `/proc/stat`) per message over the test's measured
    /// interval, as `qpip-perf` reports it (client in a + server in b), µs.
    fn guest_wide(&self, name: &str, size: Option<u64>) -> Option<f64> {
        self.num(name, size, &["both_guests_cpu_us"])
    }

    /// Busy time of both guests per message over the test's CPU window (the whole
    /// `qpip-perf` run), µs.
    fn guest_window(&self, name: &str, size: Option<u64>) -> Option<f64> {
        let s = self.window(name, size)?.guests_busy_s()?;
        Some(s * 1e6 / self.msgs(name, size)?)
    }

    /// Host CPU of the processes of `class` (`qemu`, `qpipd`) of both guests per message
    /// over the test's window, µs.
    fn host_cpu(&self, name: &str, size: Option<u64>, class: &str) -> Option<f64> {
        let s = self.window(name, size)?.host_s(class)?;
        Some(s * 1e6 / self.msgs(name, size)?)
    }

    /// A figure of `qpip-overhead`'s row `test` (`qp-udp`, ...) given in ns, in µs, from
    /// the run that slept between messages (`spin` false) or the one that spun.
    fn overhead_us(&self, spin: bool, test: &str, key: &str) -> Option<f64> {
        let rows = if spin {
            &self.overhead_spin
        } else {
            &self.overhead
        };
        let row = rows.iter().find(|r| r["test"] == test)?;
        row[key].as_f64().map(|ns| ns / 1e3)
    }

    /// QP figure `key` of transport `p` (`udp`, `tcp`) and the sockets' time per message
    /// of the same `qpip-overhead` run: from the run `spin` says if it has the QP figure,
    /// else from the other.
    fn overhead_pair(&self, spin: bool, p: &str, key: &str) -> (Option<f64>, Option<f64>) {
        let of = |spin| {
            let qp = self.overhead_us(spin, &format!("qp-{p}"), key)?;
            Some((
                qp,
                self.overhead_us(spin, &format!("sockets-{p}"), "ns_per_message"),
            ))
        };
        match of(spin).or_else(|| of(!spin)) {
            Some((qp, sk)) => (Some(qp), sk),
            None => (None, None),
        }
    }

    fn bulk_mb_s(&self, net: &str) -> Option<f64> {
        self.bulk
            .get(net)
            .map(|(bytes, secs)| *bytes as f64 / secs / 1e6)
    }
}

/// The median and the extremes of the figures one side measured over the rounds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// How many rounds had the figure.
    pub n: usize,
}

/// The median (of an even count: the mean of the middle two) and min and max of the
/// figures that are there; None when no round has one.
pub fn spread(values: &[Option<f64>]) -> Option<Spread> {
    let mut v: Vec<f64> = values.iter().flatten().copied().collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    Some(Spread {
        median,
        min: v[0],
        max: v[n - 1],
        n,
    })
}

/// Whether a larger figure is the better one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Better {
    Lower,
    Higher,
}

impl Better {
    /// How many times better QPs did than sockets (> 1: QPs better); None unless both
    /// figures are positive.
    fn gain(self, qp: f64, sockets: f64) -> Option<f64> {
        if qp <= 0.0 || sockets <= 0.0 {
            return None;
        }
        Some(match self {
            Better::Lower => sockets / qp,
            Better::Higher => qp / sockets,
        })
    }
}

/// One line of the comparison: each side's figure in every round (None: not measured).
#[derive(Debug, Clone)]
pub struct Line {
    pub what: String,
    pub unit: &'static str,
    pub qp: Vec<Option<f64>>,
    pub sockets: Vec<Option<f64>>,
    pub better: Better,
    /// The QP side's counters per message of the measurement this line is the first
    /// figure of (the bench's ping-pong and bandwidth lines).
    pub counted: Option<Counted>,
    /// The host's CPU per message over the same windows (guest-wide CPU lines).
    pub host_cpu: Option<HostCpu>,
}

/// The host's CPU per message of one measurement over its CPU windows, in every round, µs.
#[derive(Debug, Clone, PartialEq)]
pub struct HostCpu {
    /// The measurement (`UDP ping-pong`).
    pub what: String,
    /// QEMU of guests a and b: over QPs, over sockets.
    pub qemu: [Vec<Option<f64>>; 2],
    /// qpipd of guests a and b: over QPs, over sockets (there: what an idle qpipd burns).
    pub qpipd: [Vec<Option<f64>>; 2],
    /// Both guests' busy time over the same windows (whole runs): over QPs, over sockets.
    pub guests: [Vec<Option<f64>>; 2],
}

impl HostCpu {
    /// QEMU + qpipd of each round, over QPs (`side` 0) or sockets (1).
    pub fn sum(&self, side: usize) -> Vec<Option<f64>> {
        self.qemu[side]
            .iter()
            .zip(&self.qpipd[side])
            .map(|(q, d)| Some((*q)? + (*d)?))
            .collect()
    }

    /// How many times less host CPU QPs took than sockets, from the medians of the sums.
    pub fn gain(&self) -> Option<f64> {
        let m = |side| spread(&self.sum(side)).map(|s| s.median);
        Better::Lower.gain(m(0)?, m(1)?)
    }
}

/// The counters shown per message of a QP measurement: (column, what it counts, the
/// name in `qpip-perf`'s `per_msg` of a TCP row, of a UDP row).
pub const COUNTERS: [(&str, &str, &str, &str); 4] = [
    (
        "kicks",
        "doorbells that found the device's engine asleep and woke it",
        "kicks",
        "kicks",
    ),
    (
        "interrupts",
        "completion interrupts the device raised",
        "interrupts",
        "interrupts",
    ),
    (
        "sleeps",
        "times the device's engine went to sleep",
        "sleeps",
        "sleeps",
    ),
    (
        "segs out",
        "TCP segments (UDP: datagrams) sent; in a bandwidth test b's are its ACKs",
        "tcp_segs_out",
        "udp_tx",
    ),
];

/// One counter per message in every round, on guest a (the client) and guest b (the
/// server).
#[derive(Debug, Clone, PartialEq)]
pub struct Counter {
    pub name: &'static str,
    pub a: Vec<Option<f64>>,
    pub b: Vec<Option<f64>>,
}

/// The QP side's [`COUNTERS`] per message of one measurement.
#[derive(Debug, Clone, PartialEq)]
pub struct Counted {
    /// The measurement (`TCP bandwidth, 1 KiB messages`).
    pub what: String,
    pub counters: Vec<Counter>,
}

impl Line {
    pub fn qp(&self) -> Option<Spread> {
        spread(&self.qp)
    }

    pub fn sockets(&self) -> Option<Spread> {
        spread(&self.sockets)
    }

    /// The rounds of the run this line covers.
    pub fn rounds(&self) -> usize {
        self.qp.len().max(self.sockets.len())
    }

    /// How many times better QPs do than sockets, from the two medians (> 1: QPs better).
    pub fn gain(&self) -> Option<f64> {
        self.better.gain(self.qp()?.median, self.sockets()?.median)
    }

    /// The gain of each round that measured both sides.
    pub fn round_gains(&self) -> Vec<Option<f64>> {
        (0..self.rounds())
            .map(|i| {
                let q = self.qp.get(i).copied().flatten()?;
                let s = self.sockets.get(i).copied().flatten()?;
                self.better.gain(q, s)
            })
            .collect()
    }

    /// The median and range of the per-round gains.
    pub fn gain_spread(&self) -> Option<Spread> {
        spread(&self.round_gains())
    }

    /// Every round has a gain (both sides measured).
    pub fn complete(&self) -> bool {
        self.round_gains().iter().all(Option::is_some)
    }
}

/// The comparison. `detail`: percentiles beyond the median and every size (the bench);
/// else the demo's short table.
pub fn lines(m: &Measurements, detail: bool) -> Vec<Line> {
    let mut out = Vec::new();
    // (line, measurement, test, size, UDP?) of the lines the bench shows counters for.
    let mut counted: Vec<(usize, String, &str, Option<u64>, bool)> = Vec::new();
    let mut both =
        |what: String, unit, name: &str, f: &dyn Fn(&Round, &str) -> Option<f64>, better| {
            let side = |net: &str| -> Vec<Option<f64>> {
                let n = format!("{name}-{net}");
                m.rounds.iter().map(|r| f(r, &n)).collect()
            };
            out.push(Line {
                what,
                unit,
                qp: side("qp"),
                sockets: side("sk"),
                better,
                counted: None,
                host_cpu: None,
            });
            out.len() - 1
        };
    let pcts: &[&str] = if detail {
        &["p50", "p90", "p99"]
    } else {
        &["p50"]
    };
    for (t, name) in [("UDP", "udp"), ("TCP", "tcp")] {
        for (i, p) in pcts.iter().enumerate() {
            let at = both(
                format!("{t} ping-pong, round trip {p}"),
                "µs",
                name,
                &|r, n| r.num(n, None, &["rtt_us", p]),
                Better::Lower,
            );
            if i == 0 {
                counted.push((at, format!("{t} ping-pong"), name, None, name == "udp"));
            }
        }
    }
    let tcp_sizes = m.sizes("bw");
    for s in &tcp_sizes {
        let what = format!("TCP bandwidth, {} messages", human(*s));
        let at = both(
            what.clone(),
            "MB/s",
            "bw",
            &|r, n| r.num(n, Some(*s), &["mb_per_s"]),
            Better::Higher,
        );
        counted.push((at, what, "bw", Some(*s), false));
    }
    let udp_sizes = m.sizes("udpbw");
    for s in &udp_sizes {
        let what = format!("UDP bandwidth, {} datagrams", human(*s));
        let at = both(
            what.clone(),
            "MB/s",
            "udpbw",
            &|r, n| r.num(n, Some(*s), &["mb_per_s"]),
            Better::Higher,
        );
        counted.push((at, what, "udpbw", Some(*s), true));
        // What was sent back to back and never arrived (the bandwidth counts what did).
        both(
            format!("UDP loss at that rate, {} datagrams", human(*s)),
            "%",
            "udpbw",
            &|r, n| r.num(n, Some(*s), &["loss"]).map(|l| l * 100.0),
            Better::Lower,
        );
    }
    let bulk_bytes = m.rounds.iter().find_map(|r| r.bulk.get("qp").map(|b| b.0));
    if let Some(bytes) = bulk_bytes {
        both(
            format!("bulk a→b, {}, SHA-256 checked", human(bytes)),
            "MB/s",
            "bulk",
            &|r, n| r.bulk_mb_s(if n.ends_with("-qp") { "qp" } else { "sk" }),
            Better::Higher,
        );
    }
    for (t, name) in [("UDP", "udp"), ("TCP", "tcp")] {
        both(
            format!("guest CPU per {t} round trip (a+b)"),
            "µs",
            name,
            &|r, n| r.cpu(n, None),
            Better::Lower,
        );
    }
    let cpu_sizes: Vec<u64> = if detail {
        tcp_sizes.clone()
    } else {
        tcp_sizes.last().copied().into_iter().collect()
    };
    for s in cpu_sizes {
        both(
            format!("guest CPU per TCP {} message (a+b)", human(s)),
            "µs",
            "bw",
            &|r, n| r.cpu(n, Some(s)),
            Better::Lower,
        );
    }
    // Whole-system CPU, where qpip-perf measured it (the bench): both guests' busy time over
    // each test's measured interval, and beside it (under the table) the host's QEMU and
    // qpipd over the windows the run marked around each whole qpip-perf run.
    let measured = |name: &str, size: Option<u64>| {
        detail
            && m.rounds.iter().any(|r| {
                ["qp", "sk"]
                    .iter()
                    .any(|n| r.guest_wide(&format!("{name}-{n}"), size).is_some())
            })
    };
    let mut wide: Vec<(String, String, &str, Option<u64>)> = vec![
        ("UDP round trip".into(), "UDP ping-pong".into(), "udp", None),
        ("TCP round trip".into(), "TCP ping-pong".into(), "tcp", None),
    ];
    for s in &tcp_sizes {
        let h = human(*s);
        wide.push((
            format!("TCP {h} message"),
            format!("TCP bandwidth, {h} messages"),
            "bw",
            Some(*s),
        ));
    }
    let mut hosted = Vec::new();
    for (per, what, name, size) in wide {
        if !measured(name, size) {
            continue;
        }
        let at = both(
            format!("guest-wide CPU per {per}"),
            "µs",
            name,
            &|r, n| r.guest_wide(n, size),
            Better::Lower,
        );
        hosted.push((at, host_cpu_of(m, what, name, size)));
    }
    for (at, h) in hosted {
        if h.sum(0).iter().chain(&h.sum(1)).any(Option::is_some) {
            out[at].host_cpu = Some(h);
        }
    }
    // Host overhead per message (Table 1), where guest a ran qpip-overhead (the bench).
    // The per-message figure is the run that slept between messages (as qpip-overhead
    // measures by default); quiet posts are taken from the run that spun (the engine stays
    // awake), kicks from the one that slept, each against the sockets of the same run.
    if m.rounds.iter().any(|r| !r.overhead.is_empty()) {
        for (t, p) in [("UDP", "udp"), ("TCP", "tcp")] {
            for (what, spin, key) in [
                (
                    format!("host overhead per {t} message (Table 1)"),
                    false,
                    "ns_per_message",
                ),
                (
                    format!("{t} overhead, QP: device awake (quiet)"),
                    true,
                    "quiet_ns",
                ),
                (
                    format!("{t} overhead, QP: device woken (kick)"),
                    false,
                    "kicked_ns",
                ),
            ] {
                let (qp, sockets): (Vec<_>, Vec<_>) = m
                    .rounds
                    .iter()
                    .map(|r| {
                        if key == "ns_per_message" {
                            (
                                r.overhead_us(false, &format!("qp-{p}"), key),
                                r.overhead_us(false, &format!("sockets-{p}"), key),
                            )
                        } else {
                            r.overhead_pair(spin, p, key)
                        }
                    })
                    .unzip();
                // A kind of post no round saw (no kick at all, say) has no line.
                if key != "ns_per_message" && qp.iter().all(Option::is_none) {
                    continue;
                }
                out.push(Line {
                    what,
                    unit: "µs",
                    qp,
                    sockets,
                    better: Better::Lower,
                    counted: None,
                    host_cpu: None,
                });
            }
        }
    }
    if detail {
        for (at, what, test, size, udp) in counted {
            let c = counted_of(m, what, test, size, udp);
            if c.counters.iter().any(|c| spread(&c.a).is_some()) {
                out[at].counted = Some(c);
            }
        }
    }
    out
}

/// The host's CPU per message of measurement `test` (`udp`, `bw` ...) with this size.
fn host_cpu_of(m: &Measurements, what: String, test: &str, size: Option<u64>) -> HostCpu {
    let of = |net: &str, class: &str| -> Vec<Option<f64>> {
        let name = format!("{test}-{net}");
        m.rounds
            .iter()
            .map(|r| r.host_cpu(&name, size, class))
            .collect()
    };
    let guests = |net: &str| -> Vec<Option<f64>> {
        let name = format!("{test}-{net}");
        m.rounds
            .iter()
            .map(|r| r.guest_window(&name, size))
            .collect()
    };
    HostCpu {
        what,
        qemu: [of("qp", "qemu"), of("sk", "qemu")],
        qpipd: [of("qp", "qpipd"), of("sk", "qpipd")],
        guests: [guests("qp"), guests("sk")],
    }
}

/// The QP side's [`COUNTERS`] of measurement `test` (`udp`, `bw` ...) with this size.
fn counted_of(m: &Measurements, what: String, test: &str, size: Option<u64>, udp: bool) -> Counted {
    let name = format!("{test}-qp");
    let side = |side: &str, key: &str| -> Vec<Option<f64>> {
        m.rounds
            .iter()
            .map(|r| r.num(&name, size, &["per_msg", side, key]))
            .collect()
    };
    Counted {
        what,
        counters: COUNTERS
            .iter()
            .map(|(col, _, tcp_key, udp_key)| {
                let key = if udp { udp_key } else { tcp_key };
                Counter {
                    name: col,
                    a: side("client", key),
                    b: side("server", key),
                }
            })
            .collect(),
    }
}

/// Decimals for a figure of this size: three or so significant digits.
fn decimals(x: f64) -> usize {
    if x >= 100.0 {
        0
    } else if x >= 10.0 {
        1
    } else {
        2
    }
}

fn fmt(v: Option<f64>, unit: &str) -> String {
    match v {
        None => "-".into(),
        Some(x) => format!("{x:.0$} {unit}", decimals(x)),
    }
}

/// Decimals for a gain: two below 10 (1.23x), fewer above (12.3x, 123x).
fn gain_decimals(g: f64) -> usize {
    if g >= 100.0 {
        0
    } else if g >= 10.0 {
        1
    } else {
        2
    }
}

fn fmt_gain(g: Option<f64>) -> String {
    g.map(|g| format!("{g:.0$}x", gain_decimals(g)))
        .unwrap_or_else(|| "-".into())
}

/// A median without its unit (the label carries it).
fn fmt_median(s: Option<Spread>) -> String {
    s.map_or("-".into(), |s| {
        format!("{:.1$}", s.median, decimals(s.median))
    })
}

/// min–max, both with the median's decimals so the three read alike.
fn fmt_range(s: Option<Spread>) -> String {
    s.map_or("-".into(), |s| {
        let d = decimals(s.median);
        format!("{:.d$}–{:.d$}", s.min, s.max)
    })
}

/// The range of the per-round gains; `*` marks a line missing a figure in some round.
fn fmt_gain_range(l: &Line) -> String {
    let mark = if l.complete() { "" } else { "*" };
    match l.gain_spread() {
        Some(g) => {
            let d = gain_decimals(g.max);
            format!("{:.d$}–{:.d$}{mark}", g.min, g.max)
        }
        None => format!("-{mark}"),
    }
}

/// The rounds of the run (the longest line's).
fn rounds_of(lines: &[Line]) -> usize {
    lines.iter().map(Line::rounds).max().unwrap_or(0)
}

/// The cells of a line in a table of several rounds: label with unit, QP median and
/// min–max, sockets median and min–max, gain of the medians, range of the round gains.
fn round_cells(l: &Line) -> [String; 7] {
    let (q, s) = (l.qp(), l.sockets());
    [
        format!("{}, {}", l.what, l.unit),
        fmt_median(q),
        fmt_range(q),
        fmt_median(s),
        fmt_range(s),
        fmt_gain(l.gain()),
        fmt_gain_range(l),
    ]
}

/// What the columns of a table of several rounds mean, and the `*` if any line has it.
fn legend(lines: &[Line]) -> Vec<String> {
    let n = rounds_of(lines);
    let mut v = vec![
        format!(
            "Median and min–max of {n} rounds; in each round QPs and sockets ran next to each other, \
             taking turns to go first."
        ),
        "QP gain: how many times better QPs do (> 1 favours QPs): the ratio of the two \
         medians, and min–max of the rounds' own ratios."
            .to_string(),
    ];
    if lines.iter().any(|l| !l.complete()) {
        v.push(
            "* a round lacks this figure on one side: its medians and ranges are of the rounds \
             that have it."
                .to_string(),
        );
    }
    v
}

/// A block of the terminal's output under the table: a blank line, `title`, the table
/// `block`, then `legend`, the text wrapped to the block's width (at least 80 columns).
fn framed(title: &str, block: &str, legend: &[String]) -> String {
    let width = block
        .lines()
        .map(|l| l.chars().count())
        .max()
        .unwrap_or(0)
        .max(80);
    let mut t = String::from("\n");
    t += &wrap(title, width);
    t += block;
    for l in legend {
        t += &wrap(l, width);
    }
    t
}

/// Wraps `text` into lines of at most `width` characters (at spaces).
fn wrap(text: &str, width: usize) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            out += &line;
            out.push('\n');
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line += word;
    }
    if !line.is_empty() {
        out += &line;
        out.push('\n');
    }
    out
}

fn pad(s: &str, w: usize, right: bool) -> String {
    let fill = " ".repeat(w.saturating_sub(s.chars().count()));
    if right {
        format!("{fill}{s}")
    } else {
        format!("{s}{fill}")
    }
}

fn centre(s: &str, w: usize) -> String {
    let free = w.saturating_sub(s.chars().count());
    format!("{}{s}{}", " ".repeat(free / 2), " ".repeat(free - free / 2))
}

/// The comparison as a plain-text table for the terminal: one column per side for a
/// single round (the demo), median and min–max per side and the gains for several; then
/// the QP side's counters per message, if the lines have them (the bench).
pub fn text_table(lines: &[Line]) -> String {
    let mut t = if rounds_of(lines) > 1 {
        text_table_rounds(lines)
    } else {
        text_table_one(lines)
    };
    let width = t.lines().map(|l| l.chars().count()).max().unwrap_or(0);
    for n in notes(lines) {
        t += &wrap(&n, width.clamp(60, 100));
    }
    t += &counter_text(lines);
    t += &host_text(lines);
    t
}

/// What the whole-system and host overhead lines are, if the table has them.
fn notes(lines: &[Line]) -> Vec<String> {
    let mut v = Vec::new();
    if lines.iter().any(|l| l.what.starts_with("guest-wide CPU")) {
        v.push(
            "guest-wide CPU: the busy time of guests a and b together from their /proc/stat \
             (user, nice, system, irq, softirq: the sockets' receive work in softirq too) per \
             message (ping-pong: per round trip), as qpip-perf reads it on each end over \
             exactly its measured interval: guest a (the client) over the measured round trips, \
             or from its first send to the server's report (bandwidth); guest b (the server) \
             from the first measured message to its report. Start-up, connection and buffer \
             registration stay outside; the host's CPU under the table covers each whole \
             qpip-perf run."
                .to_string(),
        );
    }
    if lines.iter().any(|l| l.what.starts_with("host overhead")) {
        v.push(
            "host overhead (the QPIP paper's Table 1): guest a's time inside the calls, per \
             message of 64 bytes (qpip-overhead, each over its own loopback): QP post_send and \
             the polls that reap completions already there, against send() and \
             recv(MSG_DONTWAIT) of data already queued, 1 ms apart. device awake: the QP's \
             posts that found the device's engine awake, from a second run that busy-waits a \
             fraction of a millisecond between messages (--spin-us); device woken: those that kicked it; each \
             against the sockets of the same run."
                .to_string(),
        );
    }
    v
}

/// The columns of the host CPU block: (side, column).
const HOST_COLUMNS: [(&str, &str); 6] = [
    ("QPs", "QEMU"),
    ("QPs", "qpipd"),
    ("QPs", "sum"),
    ("sockets", "QEMU"),
    ("sockets", "qpipd"),
    ("sockets", "sum"),
];

/// The cells of a measurement in the host CPU block: QEMU, qpipd and their sum over QPs,
/// the same over sockets (medians of the rounds), and the gain of the sums.
fn host_cells(h: &HostCpu) -> Vec<String> {
    let m = |v: &[Option<f64>]| fmt_count(spread(v).map(|s| s.median));
    let mut c = vec![h.what.clone()];
    for side in 0..2 {
        c.push(m(&h.qemu[side]));
        c.push(m(&h.qpipd[side]));
        c.push(m(&h.sum(side)));
    }
    c.push(fmt_gain(h.gain()));
    c
}

fn host_title(lines: &[Line]) -> String {
    let n = rounds_of(lines);
    let of = if n > 1 {
        format!("medians of {n} rounds")
    } else {
        "one round".to_string()
    };
    format!(
        "Host CPU per message (ping-pong: per round trip), µs, {of}: the QEMU and qpipd \
         processes of guests a and b together, from just before each qpip-perf run to just \
         after it (its start-up, connection and buffer registration included). QEMU's \
         includes the guests' emulated CPUs; over sockets qpipd only idles. host gain: the \
         sockets' sum over the QPs'."
    )
}

/// The host CPU block under the table (empty if no line has it).
fn host_text(lines: &[Line]) -> String {
    let hosted: Vec<&HostCpu> = lines.iter().filter_map(|l| l.host_cpu.as_ref()).collect();
    if hosted.is_empty() {
        return String::new();
    }
    let rows: Vec<Vec<String>> = hosted.iter().map(|h| host_cells(h)).collect();
    let sub: Vec<String> = std::iter::once(String::new())
        .chain(HOST_COLUMNS.iter().map(|c| c.1.to_string()))
        .chain(["gain".to_string()])
        .collect();
    let mut w: Vec<usize> = (0..sub.len())
        .map(|i| {
            rows.iter()
                .chain([&sub])
                .map(|r| r[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    // Each side's three columns under one title.
    let groups = ["QPs (a+b)", "sockets (a+b)", "host"];
    for (g, title) in groups.iter().enumerate() {
        let cols: Vec<usize> = if g < 2 {
            (1 + 3 * g..4 + 3 * g).collect()
        } else {
            vec![7]
        };
        let span: usize = cols.iter().map(|i| w[*i]).sum::<usize>() + 2 * (cols.len() - 1);
        let need = title.chars().count();
        if span < need {
            w[*cols.last().expect("a column")] += need - span;
        }
    }
    let indent = if rounds_of(lines) > 1 { "" } else { "  " };
    let line = |r: &[String]| {
        let mut s = format!("{indent}{}", pad(&r[0], w[0], false));
        for i in 1..r.len() {
            s += &format!("  {}", pad(&r[i], w[i], true));
        }
        s.trim_end().to_string() + "\n"
    };
    let mut head = format!("{indent}{}", " ".repeat(w[0]));
    for (g, title) in groups.iter().enumerate() {
        let span = if g < 2 {
            w[1 + 3 * g] + w[2 + 3 * g] + w[3 + 3 * g] + 4
        } else {
            w[7]
        };
        head += &format!("  {}", centre(title, span));
    }
    let mut block = head.trim_end().to_string() + "\n";
    block += &line(&sub);
    for r in &rows {
        block += &line(r);
    }
    framed(&host_title(lines), &block, &[])
}

/// The same block as a Markdown table.
fn host_markdown(lines: &[Line]) -> String {
    let hosted: Vec<&HostCpu> = lines.iter().filter_map(|l| l.host_cpu.as_ref()).collect();
    if hosted.is_empty() {
        return String::new();
    }
    let mut t = format!("\n{}\n\n| host CPU per message, µs |", host_title(lines));
    for (side, col) in HOST_COLUMNS {
        t += &format!(" {side}: {col} a+b |");
    }
    t += " host gain |\n| --- |";
    t += &" ---: |".repeat(HOST_COLUMNS.len() + 1);
    t += "\n";
    for h in hosted {
        t += &format!("| {} |\n", host_cells(h).join(" | "));
    }
    t
}

/// A counter per message: about three significant digits, `-` if not counted.
fn fmt_count(v: Option<f64>) -> String {
    v.map_or("-".into(), |x| format!("{x:.0$}", decimals(x)))
}

/// The cells of a counter: the medians of a and b over the rounds, `a/b`.
fn counter_cell(c: &Counter) -> String {
    let m = |v: &[Option<f64>]| spread(v).map(|s| s.median);
    format!("{}/{}", fmt_count(m(&c.a)), fmt_count(m(&c.b)))
}

/// What the counter block's numbers are.
fn counter_title(lines: &[Line]) -> String {
    let n = rounds_of(lines);
    let of = if n > 1 {
        format!("medians of {n} rounds")
    } else {
        "one round".to_string()
    };
    format!(
        "The QP side per message (ping-pong: per round trip), guest a (the client) / guest b \
         (the server), {of}; each guest's device counts all it did meanwhile:"
    )
}

/// What each counter counts.
fn counter_legend() -> Vec<String> {
    COUNTERS
        .iter()
        .map(|(col, what, ..)| format!("{col}: {what}."))
        .collect()
}

/// The block of QP counters per message under the table (empty if no line has them).
fn counter_text(lines: &[Line]) -> String {
    let counted: Vec<&Counted> = lines.iter().filter_map(|l| l.counted.as_ref()).collect();
    if counted.is_empty() {
        return String::new();
    }
    let rows: Vec<Vec<String>> = counted
        .iter()
        .map(|c| {
            std::iter::once(c.what.clone())
                .chain(c.counters.iter().map(counter_cell))
                .collect()
        })
        .collect();
    let head: Vec<String> = std::iter::once(String::new())
        .chain(COUNTERS.iter().map(|c| c.0.to_string()))
        .collect();
    let sub: Vec<String> = std::iter::once(String::new())
        .chain(COUNTERS.iter().map(|_| "a/b".to_string()))
        .collect();
    let w: Vec<usize> = (0..head.len())
        .map(|i| {
            rows.iter()
                .chain([&head, &sub])
                .map(|r| r[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    // Indented as the table above it is.
    let indent = if rounds_of(lines) > 1 { "" } else { "  " };
    let line = |r: &[String]| {
        let mut s = format!("{indent}{}", pad(&r[0], w[0], false));
        for i in 1..r.len() {
            s += &format!("  {}", pad(&r[i], w[i], true));
        }
        s.trim_end().to_string() + "\n"
    };
    let mut block = line(&head);
    block += &line(&sub);
    for r in &rows {
        block += &line(r);
    }
    framed(&counter_title(lines), &block, &counter_legend())
}

/// The same block as a Markdown table.
fn counter_markdown(lines: &[Line]) -> String {
    let counted: Vec<&Counted> = lines.iter().filter_map(|l| l.counted.as_ref()).collect();
    if counted.is_empty() {
        return String::new();
    }
    let mut t = format!("\n{}\n\n| QPs, per message: a / b |", counter_title(lines));
    for c in COUNTERS {
        t += &format!(" {} |", c.0);
    }
    t += "\n| --- |";
    t += &" ---: |".repeat(COUNTERS.len());
    t += "\n";
    for c in counted {
        t += &format!("| {} |", c.what);
        for x in &c.counters {
            t += &format!(" {} |", counter_cell(x));
        }
        t += "\n";
    }
    t += "\n";
    t += &counter_legend().join(" ");
    t += "\n";
    t
}

/// The table of one round: each side's figure with its unit, and the gain.
fn text_table_one(lines: &[Line]) -> String {
    let head = ["", "QP (qpip device)", "sockets (virtio-net)", "QP gain"];
    let rows: Vec<[String; 4]> = lines
        .iter()
        .map(|l| {
            [
                l.what.clone(),
                fmt(l.qp().map(|s| s.median), l.unit),
                fmt(l.sockets().map(|s| s.median), l.unit),
                fmt_gain(l.gain()),
            ]
        })
        .collect();
    let width = |i: usize| {
        rows.iter()
            .map(|r| r[i].chars().count())
            .chain([head[i].chars().count()])
            .max()
            .unwrap_or(0)
    };
    let w: Vec<usize> = (0..4).map(width).collect();
    let mut t = String::new();
    let line = |cells: [&str; 4]| {
        format!(
            "  {}  {}  {}  {}\n",
            pad(cells[0], w[0], false),
            pad(cells[1], w[1], true),
            pad(cells[2], w[2], true),
            pad(cells[3], w[3], true)
        )
    };
    t += &line(head);
    for r in &rows {
        t += &line([&r[0], &r[1], &r[2], &r[3]]);
    }
    t
}

/// The table of several rounds, kept within 100 columns for the bench's rows: units in
/// the labels, a two-line head (the side, then median and min–max; for the gain the ratio
/// of the medians and min–max of the rounds' ratios).
fn text_table_rounds(lines: &[Line]) -> String {
    let groups = ["QPs", "sockets", "QP gain"];
    let head = [
        "",
        "median",
        "min–max",
        "median",
        "min–max",
        "ratio",
        "min–max",
    ];
    let rows: Vec<[String; 7]> = lines.iter().map(round_cells).collect();
    let mut w: Vec<usize> = (0..7)
        .map(|i| {
            rows.iter()
                .map(|r| r[i].chars().count())
                .chain([head[i].chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    // A group's title may be wider than its two columns: widen the second.
    for (g, title) in groups.iter().enumerate() {
        let (a, b) = (1 + 2 * g, 2 + 2 * g);
        let need = title.chars().count();
        if w[a] + 1 + w[b] < need {
            w[b] = need - 1 - w[a];
        }
    }
    let line = |c: [&str; 7]| {
        let mut s = pad(c[0], w[0], false);
        for g in 0..3 {
            let (a, b) = (1 + 2 * g, 2 + 2 * g);
            s += &format!("  {} {}", pad(c[a], w[a], true), pad(c[b], w[b], true));
        }
        s.trim_end().to_string() + "\n"
    };
    let mut t = " ".repeat(w[0]);
    for (g, title) in groups.iter().enumerate() {
        let span = w[1 + 2 * g] + 1 + w[2 + 2 * g];
        t += &format!("  {}", centre(title, span));
    }
    t = t.trim_end().to_string() + "\n";
    t += &line(head);
    for r in &rows {
        t += &line([&r[0], &r[1], &r[2], &r[3], &r[4], &r[5], &r[6]]);
    }
    let width = t.lines().map(|l| l.chars().count()).max().unwrap_or(0);
    for l in legend(lines) {
        t += &wrap(&l, width.max(60));
    }
    t
}

/// The comparison as a Markdown table: the same columns as the terminal's.
pub fn markdown_table(lines: &[Line]) -> String {
    if rounds_of(lines) > 1 {
        let mut t = String::from(
            "| | QPs: median | QPs: min–max | sockets: median | sockets: min–max \
             | QP gain: ratio | QP gain: min–max |\n\
             | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n",
        );
        for l in lines {
            t += &format!("| {} |\n", round_cells(l).join(" | "));
        }
        t += "\n";
        t += &legend(lines).join(" ");
        t += "\n";
        for n in notes(lines) {
            t += &format!("\n{n}\n");
        }
        t += &counter_markdown(lines);
        t += &host_markdown(lines);
        return t;
    }
    let mut t = String::from(
        "| | QP (qpip device) | sockets (virtio-net) | QP gain |\n| --- | ---: | ---: | ---: |\n",
    );
    for l in lines {
        t += &format!(
            "| {} | {} | {} | {} |\n",
            l.what,
            fmt(l.qp().map(|s| s.median), l.unit),
            fmt(l.sockets().map(|s| s.median), l.unit),
            fmt_gain(l.gain())
        );
    }
    for n in notes(lines) {
        t += &format!("\n{n}\n");
    }
    t += &counter_markdown(lines);
    t += &host_markdown(lines);
    t
}

fn spread_json(values: &[Option<f64>]) -> Value {
    let s = spread(values);
    json!({
        "median": s.map(|s| s.median),
        "min": s.map(|s| s.min),
        "max": s.map(|s| s.max),
        "rounds": values,
    })
}

/// A CPU mark as reported: each guest's `/proc/stat` figures (ticks), the host's seconds.
fn mark_json(m: &CpuMark) -> Value {
    json!({ "a_proc_stat": m.a, "b_proc_stat": m.b, "host_cpu_s": m.host })
}

/// The comparison (each side's figure of every round, median and spread, the gains) and
/// the raw measurements of every round as one JSON value.
pub fn json_value(m: &Measurements, lines: &[Line]) -> Value {
    let round = |(i, r): (usize, &Round)| {
        json!({
            "round": i + 1,
            "qpip_perf": r.perf,
            "bulk": r.bulk.iter().map(|(k, (bytes, secs))| (k.clone(), json!({
                "bytes": bytes, "seconds": secs,
            }))).collect::<serde_json::Map<String, Value>>(),
            "qpip_overhead": r.overhead,
            "qpip_overhead_spin": r.overhead_spin,
            "cpu_windows": r.cpu.iter().map(|(k, w)| (k.clone(), json!({
                "start": w.start.as_ref().map(mark_json),
                "end": w.end.as_ref().map(mark_json),
            }))).collect::<serde_json::Map<String, Value>>(),
        })
    };
    json!({
        "comparison": lines.iter().map(|l| json!({
            "what": l.what,
            "unit": l.unit,
            "better": match l.better { Better::Lower => "lower", Better::Higher => "higher" },
            "qp": spread_json(&l.qp),
            "sockets": spread_json(&l.sockets),
            "qp_gain": l.gain(),
            "qp_gain_per_round": spread_json(&l.round_gains()),
            "qp_per_msg": l.counted.as_ref().map(|c| c.counters.iter().map(|x| (
                x.name.to_string(),
                json!({ "a": spread_json(&x.a), "b": spread_json(&x.b) }),
            )).collect::<serde_json::Map<String, Value>>()),
            "host_cpu_per_msg": l.host_cpu.as_ref().map(|h| {
                let side = |i: usize| json!({
                    "qemu": spread_json(&h.qemu[i]),
                    "qpipd": spread_json(&h.qpipd[i]),
                    "sum": spread_json(&h.sum(i)),
                });
                json!({
                    "qp": side(0),
                    "sockets": side(1),
                    "gain": h.gain(),
                    // Both guests' busy time over the same windows, beside the table's
                    // figure over the measured interval only.
                    "guests_whole_run": { "qp": spread_json(&h.guests[0]), "sockets": spread_json(&h.guests[1]) },
                })
            }),
        })).collect::<Vec<_>>(),
        "rounds": m.rounds.iter().enumerate().map(round).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn perf(rows: &str) -> String {
        format!("{{\"tool\":\"qpip-perf\",\"results\":[{rows}]}}")
    }

    fn lat(p50: f64, cl: f64, sv: f64) -> String {
        format!(
            "{{\"test\":\"latency\",\"size\":1,\"msgs\":100,\"rtt_us\":{{\"p50\":{p50},\"p90\":1,\"p99\":2}},\"cpu_us_per_msg\":{{\"client\":{cl},\"server\":{sv}}}}}"
        )
    }

    fn bw(size: u64, mbs: f64) -> String {
        format!(
            "{{\"test\":\"bandwidth\",\"size\":{size},\"msgs\":1000,\"mb_per_s\":{mbs},\"cpu_us_per_msg\":{{\"client\":10,\"server\":5}}}}"
        )
    }

    /// A QP row: `row` with counters per message, client and server (`k` kicks on the
    /// client, half as many on the server; segments: `k` TCP, `10·k` UDP).
    fn qp(row: String, k: f64) -> String {
        let side = |x: f64| {
            format!(
                "{{\"kicks\":{x},\"waits\":9,\"interrupts\":0.5,\"sleeps\":0.25,\"tcp_segs_out\":{x},\"udp_tx\":{}}}",
                10.0 * x
            )
        };
        format!(
            "{},\"per_msg\":{{\"client\":{},\"server\":{}}}}}",
            row.strip_suffix('}').unwrap(),
            side(k),
            side(k / 2.0)
        )
    }

    /// One round's report lines, names suffixed `sfx` (`""` or `.N`), figures scaled by
    /// `k` on the QP side.
    fn round_lines(sfx: &str, k: f64) -> Vec<String> {
        vec![
            format!(
                "@perf.udp-qp{sfx}={}",
                perf(&qp(lat(100.0 * k, 3.0, 2.0), k))
            ),
            format!("@perf.udp-sk{sfx}={}", perf(&lat(200.0, 30.0, 20.0))),
            format!(
                "@perf.tcp-qp{sfx}={}",
                perf(&qp(lat(150.0 * k, 3.0, 2.0), k))
            ),
            format!("@perf.tcp-sk{sfx}={}", perf(&lat(300.0, 30.0, 20.0))),
            format!(
                "@perf.bw-qp{sfx}={}",
                perf(&[qp(bw(1024, 5.0 * k), k), qp(bw(65536, 40.0 * k), k)].join(","))
            ),
            format!(
                "@perf.bw-sk{sfx}={}",
                perf(&[bw(1024, 10.0), bw(65536, 20.0)].join(","))
            ),
            format!("@bulk.qp{sfx}=8388608 10.00 11.00"),
            format!("@bulk.sk{sfx}=8388608 20.00 22.00"),
            "other output".into(),
        ]
    }

    /// The CPU marks of window `name`: guests a and b busy `ta` and `tb` ticks (user, nice,
    /// irq and softirq; idle, iowait and steal grow too), QEMU of a and b `qemu` seconds
    /// together, their qpipd `qpipd`.
    fn cpu_lines(name: &str, ta: u64, tb: u64, qemu: f64, qpipd: f64) -> [String; 2] {
        let stat0 = "cpu  100 1 50 1000 7 5 5 2 0 0";
        let stat1 = |t: u64| format!("cpu  {} 2 50 1050 17 6 6 9 0 0", 100 + t - 3);
        let (q, d) = (qemu / 2.0, qpipd / 2.0);
        [
            format!("@cpu.{name}=start|{stat0}|{stat0}|qemu-a=10 qpipd-a=1 qemu-b=20 qpipd-b=2"),
            format!(
                "@cpu.{name}=end|{}|{}|qemu-a={} qpipd-a={} qemu-b={} qpipd-b={}",
                stat1(ta),
                stat1(tb),
                10.0 + q,
                1.0 + d,
                20.0 + q,
                2.0 + d
            ),
        ]
    }

    /// `qpip-overhead`'s report, sleeping between messages: QP UDP 2 µs per message (1.5
    /// quiet, 20 kicked), sockets 30; QP TCP 3 µs (never kicked), sockets 45.
    fn overhead_line(sfx: &str) -> String {
        let row = |t: &str, ns: u64, kicked: &str, quiet: &str| {
            format!(
                "{{\"test\":\"{t}\",\"messages\":1000,\"ns_per_message\":{ns},\"send_ns\":1,\"recv_ns\":1,\
                 \"kicked_messages\":10,\"kicked_ns\":{kicked},\"quiet_messages\":990,\"quiet_ns\":{quiet},\"late\":0}}"
            )
        };
        format!(
            "@overhead{sfx}={{\"tool\":\"qpip-overhead\",\"size\":64,\"results\":[{},{},{},{}]}}",
            row("qp-udp", 2000, "20000", "1500"),
            row("sockets-udp", 30000, "null", "null"),
            row("qp-tcp", 3000, "null", "3000"),
            row("sockets-tcp", 45000, "null", "null"),
        )
    }

    /// The same with `--spin-us`: QP UDP 1 µs quiet, sockets 25; TCP 2, sockets 40.
    fn overhead_spin_line(sfx: &str) -> String {
        overhead_line(sfx)
            .replace("\"size\":64,", "\"size\":64,\"spin_us\":50,")
            .replace("\"quiet_ns\":1500", "\"quiet_ns\":1000")
            .replace(":30000,", ":25000,")
            .replace("\"quiet_ns\":3000", "\"quiet_ns\":2000")
            .replace(":45000,", ":40000,")
    }

    /// The bench's extra reports of one round: CPU windows of the ping-pongs and of the
    /// 1 KiB bandwidth test, and qpip-overhead.
    fn whole_system_lines(sfx: &str) -> Vec<String> {
        let mut v = Vec::new();
        v.extend(cpu_lines(&format!("udp-qp{sfx}"), 12, 8, 0.8, 0.2));
        v.extend(cpu_lines(&format!("udp-sk{sfx}"), 30, 10, 1.6, 0.5));
        v.extend(cpu_lines(&format!("tcp-qp{sfx}"), 10, 10, 1.0, 0.4));
        v.extend(cpu_lines(&format!("tcp-sk{sfx}"), 50, 50, 2.0, 0.02));
        v.extend(cpu_lines(&format!("bw-qp:1024{sfx}"), 50, 50, 5.0, 3.0));
        v.extend(cpu_lines(&format!("bw-sk:1024{sfx}"), 100, 100, 10.0, 0.1));
        v.push(overhead_line(sfx));
        v.push(overhead_spin_line(sfx));
        v
    }

    /// `qpip-perf`'s guest-wide figures in every row whose test has a CPU window: half the
    /// window's (a window holds the whole run, set-up included), three quarters of it from
    /// the client's guest, one from the server's.
    fn measure_guests(m: &mut Measurements) {
        for r in &mut m.rounds {
            let marked = r.clone();
            for (name, rows) in r.perf.iter_mut() {
                for row in rows.iter_mut() {
                    let size = row["size"].as_u64().filter(|_| name.starts_with("bw"));
                    let Some(w) = marked.guest_window(name, size) else {
                        continue;
                    };
                    let o = row.as_object_mut().unwrap();
                    o.insert("guest_cpu_us".into(), json!(w * 0.375));
                    o.insert("server_guest_cpu_us".into(), json!(w * 0.125));
                    o.insert("both_guests_cpu_us".into(), json!(w * 0.5));
                }
            }
        }
    }

    fn sample() -> Measurements {
        let mut m = Measurements::default();
        for line in round_lines("", 1.0) {
            m.take_line(&line).unwrap();
        }
        m
    }

    /// `n` rounds; round r's QP figures are scaled by `scale[r-1]`.
    fn rounds(scale: &[f64]) -> Measurements {
        let mut m = Measurements::with_rounds(scale.len());
        for (i, k) in scale.iter().enumerate() {
            for line in round_lines(&format!(".{}", i + 1), *k) {
                m.take_line(&line).unwrap();
            }
        }
        m
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9 * b.abs().max(1.0)
    }

    /// The report lines guest a printed for the rounds of a saved bench result (its
    /// `rounds`), named by round unless `one` (the names of a run of one round).
    fn replayed(saved: &Value, one: bool) -> Vec<String> {
        let rounds = saved["rounds"].as_array().unwrap();
        let mut v = Vec::new();
        for (i, r) in rounds.iter().enumerate() {
            let sfx = if one {
                String::new()
            } else {
                format!(".{}", i + 1)
            };
            for (test, rows) in r["qpip_perf"].as_object().unwrap() {
                v.push(format!("@perf.{test}{sfx}={}", json!({ "results": rows })));
            }
            for (net, b) in r["bulk"].as_object().unwrap() {
                let secs = b["seconds"].as_f64().unwrap();
                v.push(format!("@bulk.{net}{sfx}={} 0 {secs}", b["bytes"]));
            }
            for (key, spin) in [("qpip_overhead", 0), ("qpip_overhead_spin", 400)] {
                let rows = &r[key];
                if rows.as_array().is_some_and(|a| !a.is_empty()) {
                    let j = json!({ "spin_us": spin, "results": rows });
                    v.push(format!("@overhead{sfx}={j}"));
                }
            }
            for (name, w) in r["cpu_windows"].as_object().unwrap() {
                for phase in ["start", "end"] {
                    let m = &w[phase];
                    let stat = |k: &str| {
                        let f: Vec<String> = m[k]
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|x| x.to_string())
                            .collect();
                        format!("cpu  {}", f.join(" "))
                    };
                    let host: Vec<String> = m["host_cpu_s"]
                        .as_object()
                        .unwrap()
                        .iter()
                        .map(|(k, s)| format!("{k}={}", s.as_f64().unwrap()))
                        .collect();
                    v.push(format!(
                        "@cpu.{name}{sfx}={phase}|{}|{}|{}",
                        stat("a_proc_stat"),
                        stat("b_proc_stat"),
                        host.join(" ")
                    ));
                }
            }
            if one {
                break;
            }
        }
        v
    }

    /// Compares `got` with the file `testdata/NAME`; with `QPIP_BLESS=1` in the
    /// environment, writes it instead (when the output is meant to change).
    fn same_as_saved(name: &str, got: &str) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/demo/results/testdata")
            .join(name);
        if std::env::var_os("QPIP_BLESS").is_some() {
            std::fs::write(&path, got).unwrap();
            return;
        }
        let want =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(
            got == want,
            "{} differs; what it renders now:\n{got}",
            path.display()
        );
    }

    #[test]
    fn a_saved_bench_result_renders_as_it_did() {
        let saved: Value =
            serde_json::from_str(include_str!("results/testdata/bench-rounds.json")).unwrap();
        // The bench: three rounds with every figure, counters and the host's CPU.
        let mut m = Measurements::with_rounds(3);
        for line in replayed(&saved, false) {
            m.take_line(&line).unwrap();
        }
        let l = lines(&m, true);
        assert!(l
            .iter()
            .any(|x| x.counted.is_some() && x.host_cpu.is_none()));
        assert!(l.iter().any(|x| x.host_cpu.is_some()));
        same_as_saved("bench.txt", &text_table(&l));
        same_as_saved("bench.md", &markdown_table(&l));
        let j = json_value(&m, &l);
        let comparison = serde_json::to_string_pretty(&j["comparison"]).unwrap() + "\n";
        same_as_saved("bench-comparison.json", &comparison);
        assert_eq!(j["rounds"], saved["rounds"]);
        // Its first round as one round of the demo's short table, and of the bench's.
        let mut one = Measurements::with_rounds(1);
        for line in replayed(&saved, true) {
            one.take_line(&line).unwrap();
        }
        let short = lines(&one, false);
        same_as_saved("demo.txt", &text_table(&short));
        same_as_saved("demo.md", &markdown_table(&short));
        let detail = lines(&one, true);
        same_as_saved("one-round.txt", &text_table(&detail));
        same_as_saved("one-round.md", &markdown_table(&detail));
    }

    #[test]
    fn lines_put_qps_and_sockets_side_by_side() {
        let m = sample();
        let short = lines(&m, false);
        let names: Vec<&str> = short.iter().map(|l| l.what.as_str()).collect();
        assert_eq!(
            names,
            [
                "UDP ping-pong, round trip p50",
                "TCP ping-pong, round trip p50",
                "TCP bandwidth, 1 KiB messages",
                "TCP bandwidth, 64 KiB messages",
                "bulk a→b, 8 MiB, SHA-256 checked",
                "guest CPU per UDP round trip (a+b)",
                "guest CPU per TCP round trip (a+b)",
                "guest CPU per TCP 64 KiB message (a+b)",
            ]
        );
        assert_eq!(short[0].gain(), Some(2.0));
        assert_eq!(short[2].gain(), Some(0.5));
        assert_eq!(short[3].gain(), Some(2.0));
        let bulk = &short[4];
        assert!(close(bulk.qp().unwrap().median, 8.388608));
        assert_eq!(bulk.gain(), Some(2.0));
        assert_eq!(short[5].qp, [Some(5.0)]);
        assert_eq!(short[5].gain(), Some(10.0));
        assert_eq!(lines(&m, true).len(), short.len() + 4 + 1);
        let t = text_table(&short);
        assert!(t.contains("2.00x"), "{t}");
        assert!(
            !t.contains("min–max"),
            "one round keeps the short table: {t}"
        );
        assert!(markdown_table(&short).starts_with("| | QP (qpip device)"));
        let j = json_value(&m, &short);
        assert_eq!(j["rounds"][0]["bulk"]["sk"]["seconds"], 2.0);
        assert_eq!(j["comparison"][0]["qp_gain"], 2.0);
        assert_eq!(j["comparison"][0]["qp"]["median"], 100.0);
    }

    #[test]
    fn the_bench_shows_the_qp_counters_per_message_under_its_table() {
        // Round k's QP client kicked k times per message: medians over 1, 3, 2 are 2.
        let m = rounds(&[1.0, 3.0, 2.0]);
        let l = lines(&m, true);
        let counted: Vec<&Counted> = l.iter().filter_map(|l| l.counted.as_ref()).collect();
        let names: Vec<&str> = counted.iter().map(|c| c.what.as_str()).collect();
        assert_eq!(
            names,
            [
                "UDP ping-pong",
                "TCP ping-pong",
                "TCP bandwidth, 1 KiB messages",
                "TCP bandwidth, 64 KiB messages"
            ]
        );
        // On the first figure of each measurement.
        let first = l.iter().find(|l| l.counted.is_some()).unwrap();
        assert_eq!(first.what, "UDP ping-pong, round trip p50");
        let kicks = &counted[2].counters[0];
        assert_eq!(kicks.name, "kicks");
        assert_eq!(kicks.a, [Some(1.0), Some(3.0), Some(2.0)]);
        assert_eq!(kicks.b, [Some(0.5), Some(1.5), Some(1.0)]);
        // Segments out: TCP segments on TCP rows, datagrams on UDP rows.
        assert_eq!(counted[0].counters[3].a[0], Some(10.0));
        assert_eq!(counted[1].counters[3].a[0], Some(1.0));
        let t = text_table(&l);
        let row = t
            .lines()
            .find(|r| r.starts_with("TCP bandwidth, 1 KiB messages  "))
            .unwrap_or_else(|| panic!("{t}"));
        let cells: Vec<&str> = row.split("  ").filter(|c| !c.is_empty()).collect();
        assert_eq!(
            cells[1..].iter().map(|c| c.trim()).collect::<Vec<_>>(),
            ["2.00/1.00", "0.50/0.50", "0.25/0.25", "2.00/1.00"],
            "{row}"
        );
        assert!(t.contains("medians of 3 rounds"), "{t}");
        assert!(t.contains("segs out: TCP segments"), "{t}");
        let md = markdown_table(&l);
        assert!(
            md.contains("| TCP ping-pong | 2.00/1.00 | 0.50/0.50 | 0.25/0.25 | 2.00/1.00 |"),
            "{md}"
        );
        let j = json_value(&m, &l);
        assert_eq!(
            j["comparison"][0]["qp_per_msg"]["kicks"]["a"]["median"],
            2.0
        );
        assert_eq!(j["comparison"][1]["qp_per_msg"], Value::Null);
        // One round of the bench has them too; the demo's short table has none.
        let one = lines(&sample(), true);
        assert!(text_table(&one).contains("one round"));
        let short = lines(&sample(), false);
        assert!(short.iter().all(|l| l.counted.is_none()));
        assert!(!text_table(&short).contains("kicks"));
        // Sockets-only figures (no counters on any QP row): no block.
        let mut bare = sample();
        for rows in bare.rounds[0].perf.values_mut() {
            for r in rows {
                r.as_object_mut().unwrap().remove("per_msg");
            }
        }
        assert!(lines(&bare, true).iter().all(|l| l.counted.is_none()));
    }

    #[test]
    fn whole_system_cpu_and_host_overhead_have_their_lines() {
        let mut m = sample();
        for line in whole_system_lines("") {
            m.take_line(&line).unwrap();
        }
        // CPU windows alone (qpip-perf without guest-wide figures): no guest-wide lines.
        assert!(lines(&m, true)
            .iter()
            .all(|x| !x.what.starts_with("guest-wide")));
        measure_guests(&mut m);
        let w = &m.rounds[0].cpu["udp-qp"];
        assert_eq!(w.start.as_ref().unwrap().a.len(), 10);
        assert_eq!(w.end.as_ref().unwrap().host["qpipd-b"], 2.1);
        assert_eq!(m.rounds[0].overhead.len(), 4);
        let l = lines(&m, true);
        let at = |what: &str| {
            l.iter()
                .find(|x| x.what == what)
                .unwrap_or_else(|| panic!("no line {what}: {l:?}"))
        };
        // qpip-perf's figure (half the window's 20 busy ticks of a and b over 100 round
        // trips), not the window's.
        let udp = at("guest-wide CPU per UDP round trip");
        assert!(close(udp.qp[0].unwrap(), 1000.0), "{udp:?}");
        assert!(close(udp.sockets[0].unwrap(), 2000.0));
        assert!(close(udp.gain().unwrap(), 2.0));
        let tcp = at("guest-wide CPU per TCP round trip");
        assert!(close(tcp.gain().unwrap(), 5.0));
        // Bandwidth: only the size qpip-perf measured it for, per message of 1000.
        let bw = at("guest-wide CPU per TCP 1 KiB message");
        assert!(close(bw.qp[0].unwrap(), 500.0));
        assert!(!l
            .iter()
            .any(|x| x.what == "guest-wide CPU per TCP 64 KiB message"));
        // The host's QEMU and qpipd over the same windows.
        let h = udp.host_cpu.as_ref().unwrap();
        assert_eq!(h.what, "UDP ping-pong");
        assert!(close(h.qemu[0][0].unwrap(), 8000.0));
        assert!(close(h.qpipd[0][0].unwrap(), 2000.0));
        assert!(close(h.qpipd[1][0].unwrap(), 5000.0));
        assert!(close(h.gain().unwrap(), 2.1));
        // Both guests over the whole run's window, beside the measured interval's.
        assert!(close(h.guests[0][0].unwrap(), 2000.0));
        assert!(close(h.guests[1][0].unwrap(), 4000.0));
        // Table 1: per message, and the QP's quiet and kicked posts against the same
        // sockets figure; TCP never kicked, so it has no such line.
        let names: Vec<&str> = l
            .iter()
            .map(|x| x.what.as_str())
            .skip_while(|w| !w.starts_with("host overhead"))
            .collect();
        assert_eq!(
            names,
            [
                "host overhead per UDP message (Table 1)",
                "UDP overhead, QP: device awake (quiet)",
                "UDP overhead, QP: device woken (kick)",
                "host overhead per TCP message (Table 1)",
                "TCP overhead, QP: device awake (quiet)",
            ]
        );
        // Quiet posts from the run that spun, kicks from the one that slept, each against
        // the sockets of its run.
        let gains: Vec<f64> = l[l.len() - 5..].iter().map(|x| x.gain().unwrap()).collect();
        for (g, want) in gains.iter().zip([15.0, 25.0, 1.5, 15.0, 20.0]) {
            assert!(close(*g, want), "{gains:?}");
        }
        let quiet = at("UDP overhead, QP: device awake (quiet)");
        assert_eq!((quiet.qp[0], quiet.sockets[0]), (Some(1.0), Some(25.0)));
        let kick = at("UDP overhead, QP: device woken (kick)");
        assert_eq!((kick.qp[0], kick.sockets[0]), (Some(20.0), Some(30.0)));
        // The one-round table: the lines, what they are, and the host block.
        let t = text_table(&l);
        assert!(t.contains("  guest-wide CPU per UDP round trip  "), "{t}");
        assert!(t.contains("1000 µs"), "{t}");
        assert!(
            t.contains("guest-wide CPU: the busy time of guests a and b"),
            "{t}"
        );
        // The notes say which window each figure covers.
        let said = notes(&l).join(" ") + &host_title(&l);
        assert!(
            said.contains("over exactly its measured interval"),
            "{said}"
        );
        assert!(
            said.contains("from just before each qpip-perf run"),
            "{said}"
        );
        assert!(t.contains("QPIP paper's Table 1"), "{t}");
        assert!(t.contains("Host CPU per message"), "{t}");
        let block = t.split("Host CPU per message").nth(1).unwrap();
        let row = block
            .lines()
            .find(|r| r.starts_with("  UDP ping-pong  "))
            .unwrap_or_else(|| panic!("{t}"));
        let cells: Vec<&str> = row.split_whitespace().skip(2).collect();
        assert_eq!(
            cells,
            ["8000", "2000", "10000", "16000", "5000", "21000", "2.10x"],
            "{row}"
        );
        for r in t.lines() {
            assert!(r.chars().count() <= 100, "{r}");
        }
        let md = markdown_table(&l);
        assert!(
            md.contains("| UDP ping-pong | 8000 | 2000 | 10000 | 16000 | 5000 | 21000 | 2.10x |"),
            "{md}"
        );
        assert!(
            md.contains("| host overhead per UDP message (Table 1) | 2.00 µs | 30.0 µs | 15.0x |"),
            "{md}"
        );
        // JSON: the figures with the host's beside them, and every raw report.
        let j = json_value(&m, &l);
        let c = j["comparison"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["what"] == "guest-wide CPU per UDP round trip")
            .unwrap();
        assert_eq!(c["host_cpu_per_msg"]["sockets"]["qpipd"]["median"], 5000.0);
        let sum = c["host_cpu_per_msg"]["qp"]["sum"]["rounds"][0]
            .as_f64()
            .unwrap();
        assert!(close(sum, 10000.0), "{sum}");
        let whole = &c["host_cpu_per_msg"]["guests_whole_run"];
        assert!(close(whole["qp"]["median"].as_f64().unwrap(), 2000.0));
        assert!(close(c["qp"]["median"].as_f64().unwrap(), 1000.0));
        let r = &j["rounds"][0];
        assert_eq!(r["qpip_overhead"][0]["kicked_ns"], 20000);
        assert_eq!(r["qpip_overhead_spin"][0]["quiet_ns"], 1000);
        assert_eq!(
            r["cpu_windows"]["bw-qp:1024"]["start"]["a_proc_stat"][0],
            100
        );
        assert_eq!(
            r["cpu_windows"]["udp-sk"]["end"]["host_cpu_s"]["qemu-b"],
            20.8
        );
        // Without the reports (the demo): none of these lines.
        let plain = lines(&sample(), true);
        assert!(plain
            .iter()
            .all(|x| !x.what.contains("overhead") && !x.what.starts_with("guest-wide")));
        assert!(!text_table(&plain).contains("Host CPU"));
    }

    #[test]
    fn cpu_windows_and_overhead_reports_are_read_by_round() {
        let mut m = Measurements::with_rounds(2);
        for line in cpu_lines("bw-sk:8192.2", 4, 4, 1.0, 1.0) {
            m.take_line(&line).unwrap();
        }
        m.take_line(&overhead_line(".2")).unwrap();
        assert!(m.rounds[0].cpu.is_empty() && m.rounds[0].overhead.is_empty());
        let w = &m.rounds[1].cpu["bw-sk:8192"];
        assert!(close(w.guests_busy_s().unwrap(), 0.08));
        assert!(close(w.host_s("qemu").unwrap(), 1.0));
        assert_eq!(m.rounds[1].overhead[1]["test"], "sockets-udp");
        assert!(m.rounds[1].overhead_spin.is_empty());
        // Without a run that spun, quiet posts come from the one that slept (if any).
        let l = lines(&m, false);
        let quiet = l
            .iter()
            .find(|x| x.what == "UDP overhead, QP: device awake (quiet)")
            .unwrap();
        assert_eq!(quiet.qp, [None, Some(1.5)]);
        assert_eq!(quiet.sockets, [None, Some(30.0)]);
        m.take_line(&overhead_spin_line(".2")).unwrap();
        assert_eq!(m.rounds[1].overhead_spin.len(), 4);
        assert_eq!(m.rounds[1].overhead[0]["quiet_ns"], 1500);
        // A window missing an edge, or a process, has no figure.
        let mut half = Measurements::default();
        half.take_line(&cpu_lines("udp-qp", 1, 1, 1.0, 1.0)[0])
            .unwrap();
        assert_eq!(half.rounds[0].cpu["udp-qp"].guests_busy_s(), None);
        let mut gone = Measurements::default();
        let [s0, e0] = cpu_lines("udp-qp", 3, 3, 1.0, 1.0);
        gone.take_line(&s0.replace(" qpipd-b=2", "")).unwrap();
        gone.take_line(&e0).unwrap();
        assert_eq!(gone.rounds[0].cpu["udp-qp"].host_s("qpipd"), None);
        assert!(close(
            gone.rounds[0].cpu["udp-qp"].host_s("qemu").unwrap(),
            1.0
        ));
        // A test run in parts (one message size each) keeps every part's rows.
        m.take_line(&format!("@perf.bw-qp.2={}", perf(&bw(1024, 1.0))))
            .unwrap();
        m.take_line(&format!("@perf.bw-qp.2={}", perf(&bw(8192, 2.0))))
            .unwrap();
        assert_eq!(m.rounds[1].perf["bw-qp"].len(), 2);
        let stat = "cpu  1 2 3 4 5 6 7";
        for bad in [
            format!("@cpu.udp-qp=middle|{stat}|{stat}|"),
            format!("@cpu.udp-qp=start|cpu 1 2|{stat}|"),
            format!("@cpu.udp-qp=start|{stat}|{stat}|qemu-a=x"),
            format!("@cpu.udp-qp=start|{stat}|{stat}"),
            format!("@cpu.udp-qp=start|cpu0 1 2 3 4 5 6 7|{stat}|"),
            "@overhead.0={\"results\":[]}".to_string(),
            "@overheads={\"results\":[]}".to_string(),
            "@overhead={\"results\":1}".to_string(),
            "@overhead={".to_string(),
        ] {
            assert!(m.take_line(&bad).is_err(), "{bad}");
        }
        m.take_line(&format!("@cpu.udp-qp=start|{stat}|{stat}|"))
            .unwrap();
    }

    #[test]
    fn a_missing_side_has_no_gain_and_bad_lines_are_errors() {
        let mut m = sample();
        m.rounds[0].perf.remove("tcp-sk");
        let l = lines(&m, false);
        assert_eq!(l[1].sockets, [None]);
        assert_eq!(l[1].gain(), None);
        assert!(text_table(&l).contains(" -"));
        assert!(m.take_line("@perf.x={not json").is_err());
        assert!(m.take_line("@perf.x={\"results\":1}").is_err());
        assert!(m.take_line("@bulk.qp=12 a b").is_err());
        assert!(m.take_line("@bulk.qp.0=12 1 2").is_err());
        assert!(m
            .take_line(&format!("@bulk.qp.{}=12 1 2", MAX_ROUNDS + 1))
            .is_err());
    }

    #[test]
    fn spread_is_the_median_and_extremes_of_what_was_measured() {
        let odd = spread(&[Some(3.0), Some(1.0), Some(2.0)]).unwrap();
        assert_eq!((odd.median, odd.min, odd.max, odd.n), (2.0, 1.0, 3.0, 3));
        let even = spread(&[Some(4.0), Some(1.0), Some(2.0), Some(10.0)]).unwrap();
        assert_eq!(
            (even.median, even.min, even.max, even.n),
            (3.0, 1.0, 10.0, 4)
        );
        let gap = spread(&[Some(5.0), None, Some(7.0)]).unwrap();
        assert_eq!((gap.median, gap.min, gap.max, gap.n), (6.0, 5.0, 7.0, 2));
        assert_eq!(spread(&[None, None]), None);
        assert_eq!(spread(&[]), None);
    }

    #[test]
    fn report_lines_go_to_their_round() {
        let mut m = Measurements::with_rounds(2);
        m.take_line(&format!("@perf.udp-qp.2={}", perf(&lat(1.0, 1.0, 1.0))))
            .unwrap();
        m.take_line("@bulk.sk.2=100 1.00 2.00").unwrap();
        m.take_line(&format!("@perf.bw-qp={}", perf(&bw(1024, 1.0))))
            .unwrap();
        assert!(m.rounds[1].perf.contains_key("udp-qp"));
        assert!(m.rounds[1].bulk.contains_key("sk"));
        assert!(m.rounds[0].perf.contains_key("bw-qp"));
        // A later round than announced makes room for itself.
        m.take_line("@bulk.qp.4=100 1.00 2.00").unwrap();
        assert_eq!(m.rounds.len(), 4);
    }

    #[test]
    fn odd_rounds_give_medians_spreads_and_the_gain_of_the_medians() {
        // QP UDP round trips 100, 300, 200 µs against 200 µs of sockets each round.
        let m = rounds(&[1.0, 3.0, 2.0]);
        let l = lines(&m, true);
        let udp = &l[0];
        assert_eq!(udp.what, "UDP ping-pong, round trip p50");
        let q = udp.qp().unwrap();
        assert_eq!((q.median, q.min, q.max, q.n), (200.0, 100.0, 300.0, 3));
        assert_eq!(udp.sockets().unwrap().median, 200.0);
        // The gain of the medians is not the median of the round gains (2, 2/3, 1).
        assert_eq!(udp.gain(), Some(1.0));
        let g = udp.gain_spread().unwrap();
        assert!(close(g.min, 200.0 / 300.0) && close(g.max, 2.0), "{g:?}");
        assert!(udp.complete());
        // Bandwidth: higher is better, QP 40·k against 20 MB/s.
        let bw64 = l
            .iter()
            .find(|l| l.what == "TCP bandwidth, 64 KiB messages")
            .unwrap();
        assert_eq!(bw64.gain(), Some(4.0));
        let g = bw64.gain_spread().unwrap();
        assert_eq!((g.min, g.max), (2.0, 6.0));
    }

    #[test]
    fn even_rounds_take_the_mean_of_the_middle_two() {
        let m = rounds(&[1.0, 4.0, 2.0, 3.0]);
        let l = lines(&m, false);
        let udp = l[0].qp().unwrap();
        assert_eq!((udp.median, udp.min, udp.max), (250.0, 100.0, 400.0));
        assert_eq!(l[0].gain(), Some(200.0 / 250.0));
        let t = text_table(&l);
        assert!(t.contains(" 250 "), "{t}");
        assert!(t.contains(" 100–400 "), "{t}");
        assert!(t.contains("0.80x"), "{t}");
        assert!(t.contains("0.50–2.00"), "{t}");
        assert!(t.contains("of 4 rounds"), "{t}");
    }

    #[test]
    fn a_figure_missing_in_one_round_leaves_the_others_and_is_marked() {
        let mut m = rounds(&[1.0, 3.0, 2.0]);
        m.rounds[1].perf.remove("udp-sk");
        m.rounds[2].bulk.remove("qp");
        let l = lines(&m, false);
        let udp = &l[0];
        assert_eq!(udp.sockets, [Some(200.0), None, Some(200.0)]);
        assert_eq!(udp.round_gains(), [Some(2.0), None, Some(1.0)]);
        assert!(!udp.complete());
        let g = udp.gain_spread().unwrap();
        assert_eq!((g.min, g.max, g.n), (1.0, 2.0, 2));
        let bulk = l.iter().find(|l| l.what.starts_with("bulk")).unwrap();
        assert_eq!(bulk.qp().unwrap().n, 2);
        assert!(l[1].complete());
        let t = text_table(&l);
        assert!(t.contains("1.00–2.00*"), "{t}");
        assert!(t.contains("\n* a round lacks"), "{t}");
        let md = markdown_table(&l);
        assert!(md.contains("| 1.00–2.00* |"), "{md}");
        let j = json_value(&m, &l);
        let c = &j["comparison"][0];
        assert_eq!(c["sockets"]["rounds"], json!([200.0, null, 200.0]));
        assert_eq!(c["qp_gain_per_round"]["rounds"], json!([2.0, null, 1.0]));
        assert_eq!(c["qp_gain_per_round"]["min"], 1.0);
        // A side missing in every round has no median and no gain at all.
        m.rounds.iter_mut().for_each(|r| {
            r.perf.remove("tcp-sk");
        });
        let l = lines(&m, false);
        assert_eq!(l[1].sockets(), None);
        assert_eq!(l[1].gain(), None);
        assert!(text_table(&l).contains("  -"));
    }

    #[test]
    fn the_table_of_several_rounds_fits_100_columns_and_markdown_matches() {
        // The widest figures the bench has shown: five-digit µs on both sides.
        let mut m = rounds(&[1.0, 1.5, 2.0]);
        for (i, r) in m.rounds.iter_mut().enumerate() {
            let k = i as f64;
            r.perf.insert(
                "bw-qp".into(),
                serde_json::from_str::<Value>(&format!(
                    "[{{\"size\":262144,\"msgs\":640,\"mb_per_s\":30.8,\"cpu_us_per_msg\":{{\"client\":{},\"server\":1}}}}]",
                    10864.0 + 1000.0 * k
                ))
                .unwrap()
                .as_array()
                .unwrap()
                .clone(),
            );
            r.perf.insert(
                "bw-sk".into(),
                serde_json::from_str::<Value>(&format!(
                    "[{{\"size\":262144,\"msgs\":640,\"mb_per_s\":37.8,\"cpu_us_per_msg\":{{\"client\":{},\"server\":1}}}}]",
                    14268.0 + 1000.0 * k
                ))
                .unwrap()
                .as_array()
                .unwrap()
                .clone(),
            );
        }
        // With the whole-system lines and host overhead, five-digit figures there too.
        for (i, r) in ["1", "2", "3"].iter().enumerate() {
            let k = 1 + i as u64;
            let mut v = whole_system_lines(&format!(".{r}"));
            v.extend(cpu_lines(
                &format!("bw-qp:262144.{r}"),
                900 * k,
                900,
                90.0,
                30.0,
            ));
            v.extend(cpu_lines(
                &format!("bw-sk:262144.{r}"),
                1900,
                1900 * k,
                190.0,
                1.0,
            ));
            for line in v {
                m.take_line(&line).unwrap();
            }
        }
        measure_guests(&mut m);
        let l = lines(&m, true);
        assert!(l
            .iter()
            .any(|x| x.what == "guest-wide CPU per TCP 256 KiB message"));
        assert!(l.iter().any(|x| x.what.starts_with("host overhead")));
        let t = text_table(&l);
        assert!(t.contains("Host CPU per message"), "{t}");
        for row in t.lines() {
            assert!(
                row.chars().count() <= 100,
                "{} columns: {row}\n{t}",
                row.chars().count()
            );
        }
        let cpu = l
            .iter()
            .find(|l| l.what == "guest CPU per TCP 256 KiB message (a+b)")
            .unwrap();
        let row = t
            .lines()
            .find(|r| r.starts_with("guest CPU per TCP 256 KiB message (a+b), µs"))
            .unwrap();
        assert!(row.contains(" 11865 10865–12865 "), "{row}");
        assert!(row.contains(&fmt_gain(cpu.gain())), "{row}");
        let head: Vec<&str> = t.lines().take(2).collect();
        assert!(
            head[0].contains("QPs") && head[0].contains("sockets"),
            "{t}"
        );
        assert!(
            head[1].contains("median") && head[1].contains("min–max"),
            "{t}"
        );
        // Markdown: the same cells, row by row.
        let md = markdown_table(&l);
        // The comparison is the first table (the QP counters follow it).
        let md_rows: Vec<&str> = md
            .split("\n\n")
            .next()
            .unwrap()
            .lines()
            .filter(|r| r.starts_with("| ") && !r.starts_with("| |") && !r.starts_with("| ---"))
            .collect();
        assert_eq!(md_rows.len(), l.len());
        for (r, line) in md_rows.iter().zip(&l) {
            for cell in round_cells(line) {
                assert!(r.contains(&format!("| {cell} |")), "{r}: {cell}");
            }
        }
    }
}
