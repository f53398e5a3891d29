//! What the demo measured: read from guest a's report lines, put side by side (QPs vs
//! kernel sockets) as a table, and written as JSON and Markdown.

use super::human;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// Everything guest a reported: `@perf.NAME=JSON` and `@bulk.NAME=BYTES START END`.
#[derive(Debug, Default, Clone)]
pub struct Measurements {
    /// By name (`udp-qp`, `bw-sk`, ...): the `results` rows qpip-perf printed.
    pub perf: BTreeMap<String, Vec<Value>>,
    /// By name (`qp`, `sk`): bytes and seconds of a verified bulk transfer.
    pub bulk: BTreeMap<String, (u64, f64)>,
}

impl Measurements {
    /// Takes one report line of guest a (without its end of line); other lines are ignored.
    /// An unreadable measurement is an error naming the line.
    pub fn take_line(&mut self, line: &str) -> Result<(), String> {
        if let Some(rest) = line.strip_prefix("@perf.") {
            let (name, text) = rest
                .split_once('=')
                .ok_or_else(|| format!("no '=' in {line:?}"))?;
            let v: Value = serde_json::from_str(text)
                .map_err(|e| format!("qpip-perf's JSON for {name} is unreadable ({e}): {text}"))?;
            let rows = v["results"]
                .as_array()
                .ok_or_else(|| format!("qpip-perf's JSON for {name} has no results: {text}"))?;
            self.perf.insert(name.to_string(), rows.clone());
        } else if let Some(rest) = line.strip_prefix("@bulk.") {
            let bad = || format!("unreadable bulk report {line:?}");
            let (name, text) = rest.split_once('=').ok_or_else(bad)?;
            let w: Vec<&str> = text.split_whitespace().collect();
            let [bytes, t0, t1] = w[..] else {
                return Err(bad());
            };
            let bytes: u64 = bytes.parse().map_err(|_| bad())?;
            let t0: f64 = t0.parse().map_err(|_| bad())?;
            let t1: f64 = t1.parse().map_err(|_| bad())?;
            // /proc/uptime has 10 ms steps: never divide by zero.
            self.bulk
                .insert(name.to_string(), (bytes, (t1 - t0).max(0.01)));
        }
        Ok(())
    }

    /// The row of test NAME with this transport/test/size, if measured.
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

    fn bulk_mb_s(&self, name: &str) -> Option<f64> {
        self.bulk
            .get(name)
            .map(|(bytes, secs)| *bytes as f64 / secs / 1e6)
    }

    /// The sizes of the TCP bandwidth test that both nets measured.
    fn sizes(&self, test: &str) -> Vec<u64> {
        let of = |name: String| -> Vec<u64> {
            self.perf
                .get(&name)
                .map(|rows| rows.iter().filter_map(|r| r["size"].as_u64()).collect())
                .unwrap_or_default()
        };
        let qp = of(format!("{test}-qp"));
        let sk = of(format!("{test}-sk"));
        qp.into_iter().filter(|s| sk.contains(s)).collect()
    }
}

/// Whether a larger figure is the better one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Better {
    Lower,
    Higher,
}

/// One line of the comparison.
#[derive(Debug, Clone)]
pub struct Line {
    pub what: String,
    pub unit: &'static str,
    pub qp: Option<f64>,
    pub sockets: Option<f64>,
    pub better: Better,
}

impl Line {
    /// How many times better QPs do than sockets (> 1: QPs better).
    pub fn gain(&self) -> Option<f64> {
        let (q, s) = (self.qp?, self.sockets?);
        if q <= 0.0 || s <= 0.0 {
            return None;
        }
        Some(match self.better {
            Better::Lower => s / q,
            Better::Higher => q / s,
        })
    }
}

/// The comparison. `detail`: percentiles beyond the median and every size (the bench);
/// else the demo's short table.
pub fn lines(m: &Measurements, detail: bool) -> Vec<Line> {
    let mut out = Vec::new();
    let mut both = |what: String, unit, name: &str, f: &dyn Fn(&str) -> Option<f64>, better| {
        out.push(Line {
            what,
            unit,
            qp: f(&format!("{name}-qp")),
            sockets: f(&format!("{name}-sk")),
            better,
        });
    };
    let pcts: &[&str] = if detail {
        &["p50", "p90", "p99"]
    } else {
        &["p50"]
    };
    for (t, name) in [("UDP", "udp"), ("TCP", "tcp")] {
        for p in pcts {
            both(
                format!("{t} ping-pong, round trip {p}"),
                "µs",
                name,
                &|n| m.num(n, None, &["rtt_us", p]),
                Better::Lower,
            );
        }
    }
    let tcp_sizes = m.sizes("bw");
    for s in &tcp_sizes {
        both(
            format!("TCP bandwidth, {} messages", human(*s)),
            "MB/s",
            "bw",
            &|n| m.num(n, Some(*s), &["mb_per_s"]),
            Better::Higher,
        );
    }
    let udp_sizes = m.sizes("udpbw");
    for s in &udp_sizes {
        both(
            format!("UDP bandwidth, {} datagrams", human(*s)),
            "MB/s",
            "udpbw",
            &|n| m.num(n, Some(*s), &["mb_per_s"]),
            Better::Higher,
        );
        // What was sent back to back and never arrived (the bandwidth counts what did).
        both(
            format!("UDP loss at that rate, {} datagrams", human(*s)),
            "%",
            "udpbw",
            &|n| m.num(n, Some(*s), &["loss"]).map(|l| l * 100.0),
            Better::Lower,
        );
    }
    if let Some((bytes, _)) = m.bulk.get("qp") {
        both(
            format!("bulk a→b, {}, SHA-256 checked", human(*bytes)),
            "MB/s",
            "bulk",
            &|n| m.bulk_mb_s(if n.ends_with("-qp") { "qp" } else { "sk" }),
            Better::Higher,
        );
    }
    for (t, name) in [("UDP", "udp"), ("TCP", "tcp")] {
        both(
            format!("guest CPU per {t} round trip (a+b)"),
            "µs",
            name,
            &|n| m.cpu(n, None),
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
            &|n| m.cpu(n, Some(s)),
            Better::Lower,
        );
    }
    out
}

fn fmt(v: Option<f64>, unit: &str) -> String {
    match v {
        None => "-".into(),
        Some(x) if x >= 100.0 => format!("{x:.0} {unit}"),
        Some(x) if x >= 10.0 => format!("{x:.1} {unit}"),
        Some(x) => format!("{x:.2} {unit}"),
    }
}

fn fmt_gain(g: Option<f64>) -> String {
    g.map(|g| format!("{g:.2}x")).unwrap_or_else(|| "-".into())
}

/// The comparison as a plain-text table for the terminal.
pub fn text_table(lines: &[Line]) -> String {
    let head = ["", "QP (qpip device)", "sockets (virtio-net)", "QP gain"];
    let rows: Vec<[String; 4]> = lines
        .iter()
        .map(|l| {
            [
                l.what.clone(),
                fmt(l.qp, l.unit),
                fmt(l.sockets, l.unit),
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
    let pad = |s: &str, w: usize, right: bool| {
        let fill = " ".repeat(w.saturating_sub(s.chars().count()));
        if right {
            format!("{fill}{s}")
        } else {
            format!("{s}{fill}")
        }
    };
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

/// The comparison as a Markdown table.
pub fn markdown_table(lines: &[Line]) -> String {
    let mut t = String::from(
        "| | QP (qpip device) | sockets (virtio-net) | QP gain |\n| --- | ---: | ---: | ---: |\n",
    );
    for l in lines {
        t += &format!(
            "| {} | {} | {} | {} |\n",
            l.what,
            fmt(l.qp, l.unit),
            fmt(l.sockets, l.unit),
            fmt_gain(l.gain())
        );
    }
    t
}

/// The comparison and the raw measurements as one JSON value.
pub fn json_value(m: &Measurements, lines: &[Line]) -> Value {
    json!({
        "comparison": lines.iter().map(|l| json!({
            "what": l.what,
            "unit": l.unit,
            "qp": l.qp,
            "sockets": l.sockets,
            "better": match l.better { Better::Lower => "lower", Better::Higher => "higher" },
            "qp_gain": l.gain(),
        })).collect::<Vec<_>>(),
        "qpip_perf": m.perf,
        "bulk": m.bulk.iter().map(|(k, (bytes, secs))| (k.clone(), json!({
            "bytes": bytes, "seconds": secs,
        }))).collect::<serde_json::Map<String, Value>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn perf(rows: &str) -> String {
        format!("{{\"tool\":\"qpip-perf\",\"results\":[{rows}]}}")
    }

    fn sample() -> Measurements {
        let lat = |p50: f64, cl: f64, sv: f64| {
            format!(
                "{{\"test\":\"latency\",\"size\":1,\"rtt_us\":{{\"p50\":{p50},\"p90\":1,\"p99\":2}},\"cpu_us_per_msg\":{{\"client\":{cl},\"server\":{sv}}}}}"
            )
        };
        let bw = |size: u64, mbs: f64| {
            format!(
                "{{\"test\":\"bandwidth\",\"size\":{size},\"mb_per_s\":{mbs},\"cpu_us_per_msg\":{{\"client\":10,\"server\":5}}}}"
            )
        };
        let mut m = Measurements::default();
        for line in [
            format!("@perf.udp-qp={}", perf(&lat(100.0, 3.0, 2.0))),
            format!("@perf.udp-sk={}", perf(&lat(200.0, 30.0, 20.0))),
            format!("@perf.tcp-qp={}", perf(&lat(150.0, 3.0, 2.0))),
            format!("@perf.tcp-sk={}", perf(&lat(300.0, 30.0, 20.0))),
            format!(
                "@perf.bw-qp={}",
                perf(&[bw(1024, 5.0), bw(65536, 40.0)].join(","))
            ),
            format!(
                "@perf.bw-sk={}",
                perf(&[bw(1024, 10.0), bw(65536, 20.0)].join(","))
            ),
            "@bulk.qp=8388608 10.00 11.00".into(),
            "@bulk.sk=8388608 20.00 22.00".into(),
            "other output".into(),
        ] {
            m.take_line(&line).unwrap();
        }
        m
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
        assert!((bulk.qp.unwrap() - 8.388608).abs() < 1e-9);
        assert_eq!(bulk.gain(), Some(2.0));
        assert_eq!(short[5].qp, Some(5.0));
        assert_eq!(short[5].gain(), Some(10.0));
        assert_eq!(lines(&m, true).len(), short.len() + 4 + 1);
        let t = text_table(&short);
        assert!(t.contains("2.00x"), "{t}");
        assert!(markdown_table(&short).starts_with("| | QP"));
        let j = json_value(&m, &short);
        assert_eq!(j["bulk"]["sk"]["seconds"], 2.0);
        assert_eq!(j["comparison"][0]["qp_gain"], 2.0);
    }

    #[test]
    fn a_missing_side_has_no_gain_and_bad_lines_are_errors() {
        let mut m = sample();
        m.perf.remove("tcp-sk");
        let l = lines(&m, false);
        assert_eq!(l[1].sockets, None);
        assert_eq!(l[1].gain(), None);
        assert!(text_table(&l).contains(" -"));
        assert!(m.take_line("@perf.x={not json").is_err());
        assert!(m.take_line("@perf.x={\"results\":1}").is_err());
        assert!(m.take_line("@bulk.qp=12 a b").is_err());
    }
}
