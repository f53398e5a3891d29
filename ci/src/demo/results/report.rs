//! Guest a's report lines read into [`Measurements`], round by round, and the figures
//! each comparison line takes from a round.

use super::{GUEST_HZ, MAX_ROUNDS};
use serde_json::Value;
use std::collections::BTreeMap;

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
    /// name: `qemu-a`, `qpipd-a` (all of guest a's own qpipd), `qemu-b`, ...,
    /// `qpipd-adapter` (the adapter qpipd serving both guests' devices, counted once).
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
    pub(super) fn guests_busy_s(&self) -> Option<f64> {
        let (s, e) = (self.start.as_ref()?, self.end.as_ref()?);
        let mut ticks = 0;
        for (s, e) in [(&s.a, &e.a), (&s.b, &e.b)] {
            ticks += busy_ticks(e)?.checked_sub(busy_ticks(s)?)?;
        }
        Some(ticks as f64 / GUEST_HZ)
    }

    /// Guest a's user and kernel seconds over the window, then guest b's: user is user and
    /// nice, kernel is system, irq and softirq (together [`CpuWindow::guests_busy_s`]).
    pub(super) fn guests_split_s(&self) -> Option<[f64; 4]> {
        let (s, e) = (self.start.as_ref()?, self.end.as_ref()?);
        let delta = |s: &[u64], e: &[u64], fields: &[usize]| -> Option<f64> {
            let sum = |v: &[u64]| {
                fields
                    .iter()
                    .map(|&i| v.get(i).copied())
                    .sum::<Option<u64>>()
            };
            Some(sum(e)?.checked_sub(sum(s)?)? as f64 / GUEST_HZ)
        };
        let (user, kernel) = ([0, 1], [2, 5, 6]);
        Some([
            delta(&s.a, &e.a, &user)?,
            delta(&s.a, &e.a, &kernel)?,
            delta(&s.b, &e.b, &user)?,
            delta(&s.b, &e.b, &kernel)?,
        ])
    }

    /// Host CPU seconds over the window of the processes named `CLASS-GUEST` (`qemu`,
    /// `qpipd`), summed over the guests (and, for `qpipd`, the adapter's `qpipd-adapter`,
    /// which serves them all); None unless both edges have some.
    pub(super) fn host_s(&self, class: &str) -> Option<f64> {
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
pub(super) fn split_round(name: &str) -> Result<(&str, usize), String> {
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

/// perftest's result line (the one under its `#bytes` heading) as a row in the shape of
/// `qpip-perf --json`'s, by measurement: `rdmalat-*` is `ib_write_lat`'s
/// `#bytes #iterations t_min t_max t_typical t_avg t_stdev 99% 99.9%` (µs), where
/// t_typical is the median and every time is half the round trip (perftest's
/// `print_report_lat` divides an RDMA Write round trip by 2), so the row has them doubled;
/// `rdmabw-*` is `ib_write_bw`'s `#bytes #iterations BW_peak BW_average MsgRate`, in MiB/s
/// (`print_report_bw` divides by 0x100000), so the row has 10^6 bytes per second as
/// qpip-perf does. `rdmareadlat-*` and `rdmareadbw-*` are `ib_read_lat`'s and
/// `ib_read_bw`'s, the same columns; a Read's latency is its whole round trip (perftest
/// halves only the ping-pongs), so it is taken as it is. `rdmasendlat-*` and
/// `rdmasendbw-*` are `ib_send_lat`'s (a ping-pong: halved, so doubled here) and
/// `ib_send_bw`'s. The transport is the device perftest ran on: `rxe` for a measurement on
/// soft-RoCE (`*-rx`), `qpip0` on qpip's ib_device (`*-vb`), else `siw`.
fn perftest_row(test: &str, text: &str) -> Result<Value, String> {
    let bad = |why: &str| format!("perftest's result for {test} {why}: {text:?}");
    let transport = if test.ends_with("-rx") {
        "rxe"
    } else if test.ends_with("-vb") {
        "qpip0"
    } else {
        "siw"
    };
    let f: Vec<f64> = text
        .split_whitespace()
        .map(|w| w.parse::<f64>().map_err(|_| bad("is not a row of numbers")))
        .collect::<Result<_, _>>()?;
    let whole = |x: f64| (x >= 0.0 && x.fract() == 0.0).then_some(x as u64);
    let (Some(size), Some(iters)) = (
        f.first().copied().and_then(whole),
        f.get(1).copied().and_then(whole),
    ) else {
        return Err(bad("has no size and count"));
    };
    let lat = |tool: &str, factor: f64| {
        let [.., typical, _, _, p99, _] = f[..] else {
            return Err(bad(&format!("has not the 9 figures of {tool}")));
        };
        if f.len() != 9 {
            return Err(bad(&format!("has not the 9 figures of {tool}")));
        }
        Ok(serde_json::json!({
            "tool": tool, "test": "latency", "transport": transport,
            "size": size, "msgs": iters,
            "rtt_us": { "p50": factor * typical, "p99": factor * p99 },
        }))
    };
    let bw = |tool: &str| {
        let [_, _, _, average, _] = f[..] else {
            return Err(bad(&format!("has not the 5 figures of {tool}")));
        };
        Ok(serde_json::json!({
            "tool": tool, "test": "bandwidth", "transport": transport,
            "size": size, "msgs": iters,
            "mb_per_s": average * 1_048_576.0 / 1e6,
        }))
    };
    if test.starts_with("rdmalat-") {
        lat("ib_write_lat", 2.0)
    } else if test.starts_with("rdmabw-") {
        bw("ib_write_bw")
    } else if test.starts_with("rdmareadlat-") {
        lat("ib_read_lat", 1.0)
    } else if test.starts_with("rdmareadbw-") {
        bw("ib_read_bw")
    } else if test.starts_with("rdmasendlat-") {
        lat("ib_send_lat", 2.0)
    } else if test.starts_with("rdmasendbw-") {
        bw("ib_send_bw")
    } else {
        Err(bad("belongs to no RDMA measurement"))
    }
}

/// Guest a's count of a perftest client's system calls (`TOTAL NAME:N NAME:N ...`, see
/// the guest's `sys_count_end`) as `{"total": TOTAL, "by_call": {NAME: N, ...}}`.
fn syscalls_of(text: &str) -> Option<Value> {
    let mut w = text.split_whitespace();
    let total: u64 = w.next()?.parse().ok()?;
    let mut by = serde_json::Map::new();
    for kv in w {
        let (k, v) = kv.rsplit_once(':')?;
        by.insert(k.to_string(), serde_json::json!(v.parse::<u64>().ok()?));
    }
    Some(serde_json::json!({ "total": total, "by_call": by }))
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
        } else if let Some(rest) = line.strip_prefix("@perftest.") {
            let (name, text) = rest
                .split_once('=')
                .ok_or_else(|| format!("no '=' in {line:?}"))?;
            let (test, round) = split_round(name)?;
            let row = perftest_row(test, text)?;
            self.round_mut(round)
                .perf
                .entry(test.to_string())
                .or_default()
                .push(row);
        } else if let Some(rest) = line.strip_prefix("@syscalls.") {
            let (name, text) = rest
                .split_once('=')
                .ok_or_else(|| format!("no '=' in {line:?}"))?;
            let (test, round) = split_round(name)?;
            let counted = syscalls_of(text)
                .ok_or_else(|| format!("unreadable system call count for {name}: {text:?}"))?;
            // Beside perftest's row of the same run (reported just before it).
            let row = self
                .round_mut(round)
                .perf
                .get_mut(test)
                .and_then(|rows| rows.last_mut())
                .ok_or_else(|| format!("a system call count for {name} without its result"))?;
            let ops = row["msgs"].as_f64().filter(|n| *n > 0.0).unwrap_or(1.0);
            row["syscalls"] = counted;
            row["syscalls_per_op"] =
                serde_json::json!(row["syscalls"]["total"].as_f64().unwrap_or(0.0) / ops);
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
    /// some round, in the order QPs reported them; in a run without the test over sockets at
    /// all (the bench's pass over QPs only), those QPs measured.
    pub(super) fn sizes(&self, test: &str) -> Vec<u64> {
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
        let qp_only = !self
            .rounds
            .iter()
            .any(|r| r.perf.contains_key(&format!("{test}-sk")));
        of(format!("{test}-qp"))
            .into_iter()
            .filter(|s| qp_only || sk.contains(s))
            .collect()
    }
}

impl Round {
    /// The row of test NAME with this message size, if measured.
    pub(super) fn row(&self, name: &str, size: Option<u64>) -> Option<&Value> {
        self.perf
            .get(name)?
            .iter()
            .find(|r| size.is_none() || r["size"].as_u64() == size)
    }

    pub(super) fn num(&self, name: &str, size: Option<u64>, path: &[&str]) -> Option<f64> {
        let mut v = self.row(name, size)?;
        for p in path {
            v = &v[*p];
        }
        v.as_f64()
    }

    /// Guest CPU (client in a + server in b) per message, µs.
    pub(super) fn cpu(&self, name: &str, size: Option<u64>) -> Option<f64> {
        let c = self.num(name, size, &["cpu_us_per_msg", "client"])?;
        let s = self.num(name, size, &["cpu_us_per_msg", "server"])?;
        Some(c + s)
    }

    /// The CPU window of test NAME (`udp-qp`, `bw-sk`) with this message size.
    pub(super) fn window(&self, name: &str, size: Option<u64>) -> Option<&CpuWindow> {
        match size {
            Some(s) => self.cpu.get(&format!("{name}:{s}")),
            None => self.cpu.get(name),
        }
    }

    /// Messages (round trips of a ping-pong) of test NAME with this size.
    pub(super) fn msgs(&self, name: &str, size: Option<u64>) -> Option<f64> {
        self.num(name, size, &["msgs"]).filter(|n| *n > 0.0)
    }

    /// Busy time of both guests (their `/proc/stat`) per message over the test's measured
    /// interval, as `qpip-perf` reports it (client in a + server in b), µs.
    pub(super) fn guest_wide(&self, name: &str, size: Option<u64>) -> Option<f64> {
        self.num(name, size, &["both_guests_cpu_us"])
    }

    /// Busy time of both guests per message over the test's CPU window (the whole
    /// `qpip-perf` run), µs.
    pub(super) fn guest_window(&self, name: &str, size: Option<u64>) -> Option<f64> {
        let s = self.window(name, size)?.guests_busy_s()?;
        Some(s * 1e6 / self.msgs(name, size)?)
    }

    /// Host CPU of the processes of `class` (`qemu`, `qpipd`) of both guests per message
    /// over the test's window, µs.
    pub(super) fn host_cpu(&self, name: &str, size: Option<u64>, class: &str) -> Option<f64> {
        let s = self.window(name, size)?.host_s(class)?;
        Some(s * 1e6 / self.msgs(name, size)?)
    }

    /// A figure of `qpip-overhead`'s row `test` (`qp-udp`, ...) given in ns, in µs, from
    /// the run that slept between messages (`spin` false) or the one that spun.
    pub(super) fn overhead_us(&self, spin: bool, test: &str, key: &str) -> Option<f64> {
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
    pub(super) fn overhead_pair(
        &self,
        spin: bool,
        p: &str,
        key: &str,
    ) -> (Option<f64>, Option<f64>) {
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

    pub(super) fn bulk_mb_s(&self, net: &str) -> Option<f64> {
        self.bulk
            .get(net)
            .map(|(bytes, secs)| *bytes as f64 / secs / 1e6)
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;
    use crate::demo::results::{lines, markdown_table, text_table};

    #[test]
    fn a_run_over_qps_only_has_its_bandwidth_sizes() {
        let mut m = Measurements::default();
        m.take_line(&format!("@perf.bw-qp={}", perf(&bw(8192, 2.0))))
            .unwrap();
        assert_eq!(m.sizes("bw"), [8192]);
        // With sockets measured, a size needs both sides.
        m.take_line(&format!("@perf.bw-sk={}", perf(&bw(1024, 1.0))))
            .unwrap();
        assert!(m.sizes("bw").is_empty());
    }

    #[test]
    fn a_shared_adapter_counts_once_with_the_guests_qpipd() {
        let stat = "cpu  1 2 3 4 5 6 7";
        let mut m = Measurements::default();
        for (edge, host) in [
            ("start", "qemu-a=10 qemu-b=20 qpipd-adapter=3"),
            ("end", "qemu-a=11 qemu-b=22 qpipd-adapter=3.5"),
        ] {
            m.take_line(&format!("@cpu.udp-qp={edge}|{stat}|{stat}|{host}"))
                .unwrap();
        }
        let w = &m.rounds[0].cpu["udp-qp"];
        assert!(close(w.host_s("qpipd").unwrap(), 0.5));
        assert!(close(w.host_s("qemu").unwrap(), 3.0));
        // A guest's own qpipd (a device beyond the adapter's) adds to it.
        let mut both = Measurements::default();
        for (edge, host) in [
            ("start", "qemu-a=10 qpipd-a=1 qpipd-adapter=3"),
            ("end", "qemu-a=11 qpipd-a=1.25 qpipd-adapter=3.5"),
        ] {
            both.take_line(&format!("@cpu.udp-qp={edge}|{stat}|{stat}|{host}"))
                .unwrap();
        }
        assert!(close(
            both.rounds[0].cpu["udp-qp"].host_s("qpipd").unwrap(),
            0.75
        ));
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
    fn perftest_results_are_rows_beside_qpip_perfs_and_make_the_rdma_lines() {
        use super::super::lines::{
            RDMA_LAT_LINE, RDMA_LAT_RXE_LINE, RDMA_LAT_TRIPWIRE_LINE, RDMA_READ_LAT_LINE,
            RDMA_READ_LAT_RXE_LINE,
        };
        use super::super::spread::Better;
        let mut m = Measurements::with_rounds(3);
        // As ib_write_lat and ib_write_bw print them (tabs and all).
        let siw_lat = " 64      2000          220.67         13974.77      465.66   \t       1232.91     \t1783.99\t\t9610.70 \t\t13974.77";
        let siw_bw = " 65536      256              5.63               4.78   \t\t     0.000077";
        for r in 1..=3 {
            let k = r as f64;
            m.take_line(&format!("@perftest.rdmalat-sk.{r}={siw_lat}"))
                .unwrap();
            m.take_line(&format!("@perftest.rdmabw-sk.{r}={siw_bw}"))
                .unwrap();
            m.take_line(&format!(
                "@perf.rdmalat-qp.{r}={}",
                perf(&lat(400.0 * k, 1.0, 1.0))
            ))
            .unwrap();
            m.take_line(&format!(
                "@perf.rdmabw-qp.{r}={}",
                perf(&bw(65536, 100.0 * k))
            ))
            .unwrap();
            m.take_line(&format!(
                "@perf.rdmalattw-qp.{r}={}",
                perf(&lat(100.0 * k, 1.0, 1.0))
            ))
            .unwrap();
            // ib_read_lat and ib_read_bw print the same columns.
            m.take_line(&format!("@perftest.rdmareadlat-sk.{r}={siw_lat}"))
                .unwrap();
            m.take_line(&format!("@perftest.rdmareadbw-sk.{r}={siw_bw}"))
                .unwrap();
            m.take_line(&format!(
                "@perf.rdmareadlat-qp.{r}={}",
                perf(&lat(120.0 * k, 1.0, 1.0))
            ))
            .unwrap();
            m.take_line(&format!(
                "@perf.rdmareadbw-qp.{r}={}",
                perf(&bw(65536, 400.0 * k))
            ))
            .unwrap();
        }
        let row = m.rounds[0].row("rdmalat-sk", None).unwrap();
        assert_eq!(row["rtt_us"]["p50"].as_f64(), Some(931.32));
        assert_eq!(row["rtt_us"]["p99"].as_f64(), Some(19221.4));
        assert_eq!(row["msgs"].as_u64(), Some(2000));
        let bw_row = m.rounds[2].row("rdmabw-sk", Some(65536)).unwrap();
        assert!(close(bw_row["mb_per_s"].as_f64().unwrap(), 4.78 * 1.048576));
        let l = lines(&m, true);
        let lat_line = l.iter().find(|l| l.what == RDMA_LAT_LINE).unwrap();
        assert_eq!(lat_line.qp, [Some(400.0), Some(800.0), Some(1200.0)]);
        assert!(close(lat_line.gain().unwrap(), 931.32 / 800.0));
        // A Read's latency is perftest's whole round trip, not doubled.
        let read_row = m.rounds[0].row("rdmareadlat-sk", None).unwrap();
        assert_eq!(read_row["rtt_us"]["p50"].as_f64(), Some(465.66));
        assert_eq!(read_row["tool"], "ib_read_lat");
        let read_line = l.iter().find(|l| l.what == RDMA_READ_LAT_LINE).unwrap();
        assert!(close(read_line.gain().unwrap(), 465.66 / 240.0));
        let read_bw = l
            .iter()
            .find(|l| l.what == "RDMA Read bandwidth, 64 KiB messages (qpip vs siw)")
            .unwrap();
        assert!(close(read_bw.gain().unwrap(), 800.0 / (4.78 * 1.048576)));
        // The tripwire ping-pong against the same siw figures.
        let tw_line = l.iter().find(|l| l.what == RDMA_LAT_TRIPWIRE_LINE).unwrap();
        assert_eq!(tw_line.qp, [Some(100.0), Some(200.0), Some(300.0)]);
        assert_eq!(tw_line.sockets, lat_line.sockets);
        assert!(close(tw_line.gain().unwrap(), 931.32 / 200.0));
        let bw_line = l
            .iter()
            .find(|l| l.what == "RDMA Write bandwidth, 64 KiB messages (qpip vs siw)")
            .unwrap();
        assert_eq!(bw_line.unit, "MB/s");
        assert!(close(bw_line.gain().unwrap(), 200.0 / (4.78 * 1.048576)));
        let md = markdown_table(&l);
        assert!(
            md.contains("RDMA Write latency, round trip p50 (qpip vs siw)"),
            "{md}"
        );
        assert!(md.contains("soft-iWARP"), "{md}");
        // Without rxe's figures (older results), no line against rxe.
        assert!(!l.iter().any(|l| l.what.contains("vs rxe")));
        // Soft-RoCE, the second anchor: perftest's rows on rxe in rounds 1 and 3 (one round
        // without its figure), each RDMA line again with rxe in the sockets column.
        let rxe_lat = " 64      2000          100.00         500.00      150.00   \t       160.00     \t10.00\t\t400.00 \t\t500.00";
        let rxe_bw = " 65536      256              20.00               19.07   \t\t     0.000305";
        for r in [1, 3] {
            for (t, text) in [
                ("rdmalat", rxe_lat),
                ("rdmabw", rxe_bw),
                ("rdmareadlat", rxe_lat),
                ("rdmareadbw", rxe_bw),
            ] {
                m.take_line(&format!("@perftest.{t}-rx.{r}={text}"))
                    .unwrap();
            }
        }
        let rx_row = m.rounds[0].row("rdmalat-rx", None).unwrap();
        assert_eq!(rx_row["transport"], "rxe");
        assert_eq!(rx_row["rtt_us"]["p50"].as_f64(), Some(300.0));
        assert_eq!(
            m.rounds[0].row("rdmalat-sk", None).unwrap()["transport"],
            "siw"
        );
        let l = lines(&m, true);
        let find = |what: &str| l.iter().position(|x| x.what == what).unwrap();
        // Right under its line against siw, the same QP figures.
        let (siw_at, rxe_at) = (find(RDMA_LAT_LINE), find(RDMA_LAT_RXE_LINE));
        assert_eq!(rxe_at, siw_at + 1);
        let rxe_line = &l[rxe_at];
        assert_eq!(rxe_line.qp, l[siw_at].qp);
        assert_eq!(rxe_line.sockets, [Some(300.0), None, Some(300.0)]);
        // Its ratio from the rounds that have both: 300/400 and 300/1200.
        let g = rxe_line.round_gains();
        assert!(close(g[0].unwrap(), 0.75) && g[1].is_none() && close(g[2].unwrap(), 0.25));
        let read_rxe = &l[find(RDMA_READ_LAT_RXE_LINE)];
        assert_eq!(read_rxe.sockets[0], Some(150.0));
        let bw_rxe = &l[find("RDMA Write bandwidth, 64 KiB messages (qpip vs rxe)")];
        assert!(close(bw_rxe.sockets[2].unwrap(), 19.07 * 1.048576));
        assert_eq!(bw_rxe.better, Better::Higher);
        let rbw_rxe = &l[find("RDMA Read bandwidth, 64 KiB messages (qpip vs rxe)")];
        assert!(close(rbw_rxe.gain().unwrap(), 800.0 / (19.07 * 1.048576)));
        let md = markdown_table(&l);
        assert!(
            md.contains("RDMA Read latency, round trip p50 (qpip vs rxe)"),
            "{md}"
        );
        assert!(md.contains("soft-RoCE"), "{md}");
        // Without RDMA measurements, no RDMA lines (older results render as they did).
        assert!(!lines(&sample(), true)
            .iter()
            .any(|l| l.what.starts_with("RDMA")));
        // Anything else is an error, never a panic.
        for bad in [
            "@perftest.rdmalat-sk=",
            "@perftest.rdmalat-sk=64 2000 1 2",
            "@perftest.rdmalat-sk=64 2000 1 2 3 4 5 6 7 8",
            "@perftest.rdmabw-sk=65536 256 5.63",
            "@perftest.rdmabw-sk=65536 x 5.63 4.78 0.1",
            "@perftest.rdmabw-sk=-1 256 5.63 4.78 0.1",
            "@perftest.bw-sk=65536 256 5.63 4.78 0.1",
            "@perftest.rdmabw-sk",
        ] {
            assert!(m.take_line(bad).is_err(), "{bad}");
        }
    }
}
