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

use super::human;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// The most rounds a run may have (guest b's bulk ports are numbered by round).
pub const MAX_ROUNDS: u32 = 20;

/// What guest a reported in one round: `@perf.NAME=JSON` and `@bulk.NAME=BYTES START END`.
#[derive(Debug, Default, Clone)]
pub struct Round {
    /// By test (`udp-qp`, `bw-sk`, ...): the `results` rows qpip-perf printed.
    pub perf: BTreeMap<String, Vec<Value>>,
    /// By net (`qp`, `sk`): bytes and seconds of a verified bulk transfer.
    pub bulk: BTreeMap<String, (u64, f64)>,
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
                .insert(test.to_string(), rows.clone());
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
    t += &counter_text(lines);
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
    let width = block
        .lines()
        .map(|l| l.chars().count())
        .max()
        .unwrap_or(0)
        .max(80);
    let mut t = String::from("\n");
    t += &wrap(&counter_title(lines), width);
    t += &block;
    for l in counter_legend() {
        t += &wrap(&l, width);
    }
    t
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
        t += &counter_markdown(lines);
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
    t += &counter_markdown(lines);
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
            "{{\"test\":\"latency\",\"size\":1,\"rtt_us\":{{\"p50\":{p50},\"p90\":1,\"p99\":2}},\"cpu_us_per_msg\":{{\"client\":{cl},\"server\":{sv}}}}}"
        )
    }

    fn bw(size: u64, mbs: f64) -> String {
        format!(
            "{{\"test\":\"bandwidth\",\"size\":{size},\"mb_per_s\":{mbs},\"cpu_us_per_msg\":{{\"client\":10,\"server\":5}}}}"
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
        (a - b).abs() < 1e-9
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
                    "[{{\"size\":262144,\"mb_per_s\":30.8,\"cpu_us_per_msg\":{{\"client\":{},\"server\":1}}}}]",
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
                    "[{{\"size\":262144,\"mb_per_s\":37.8,\"cpu_us_per_msg\":{{\"client\":{},\"server\":1}}}}]",
                    14268.0 + 1000.0 * k
                ))
                .unwrap()
                .as_array()
                .unwrap()
                .clone(),
            );
        }
        let l = lines(&m, true);
        let t = text_table(&l);
        for row in t.lines() {
            assert!(
                row.chars().count() <= 100,
                "{} columns: {row}",
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
