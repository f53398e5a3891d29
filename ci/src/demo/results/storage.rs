//! The bench's storage part (see [`crate::demo::storage`]): guest a's `@storage.NAME=...`
//! and `@fio.NAME=JSON` lines with the CPU windows of the same names read into phases,
//! round by round; the figures of the three client/server pairs side by side (throughput
//! and CPU effectiveness of the ext2 write and read, fio's IOPS and latencies), the ratios
//! of `qp` and `mixed` to `sockets` per round and of the medians; the counters that
//! explain them; all as text, Markdown and JSON, and read back from the JSON.

use super::format::{
    columns_said, counter_cells, fmt_gain, fmt_median, fmt_range, framed_table, md_table,
};
use super::report::{split_round, Measurements};
use super::spread::{spread, Better, SidesRow, Spread};
use crate::demo::storage::{Pair, StoragePlan};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// What one phase of one round measured (a write, a read back, or a fio run).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Phase {
    /// Bytes the file system phase moved (0 for fio).
    pub bytes: u64,
    /// Its wall time by guest a's uptime (10 ms resolution).
    pub secs: f64,
    /// Requests the block device completed (reads + writes), the sectors they moved, and
    /// the sum of their times in its queue, ms (`/sys/block/DEV/stat`).
    pub requests: Option<u64>,
    pub sectors: Option<u64>,
    pub queue_ms: Option<u64>,
    /// Interrupts of guest a's qpip device and of its virtio-net NIC; the same of guest b.
    pub irq_a: Option<[u64; 2]>,
    pub irq_b: Option<[u64; 2]>,
    /// Both guests' busy CPU seconds over the phase's window (`/proc/stat`).
    pub guests_cpu_s: Option<f64>,
    /// The same apart: guest a's user and kernel seconds, then guest b's.
    pub guests_split_s: Option<[f64; 4]>,
    /// The host's CPU seconds of both guests' QEMU, and of the qpipd processes.
    pub host_qemu_s: Option<f64>,
    pub host_qpipd_s: Option<f64>,
    /// fio: read IOPS, completion latency p50 and p99 (µs), requests completed.
    pub iops: Option<f64>,
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
    pub ios: Option<u64>,
}

impl Phase {
    /// MB (10^6 bytes) per second.
    pub fn mb_per_s(&self) -> Option<f64> {
        (self.bytes > 0 && self.secs > 0.0).then(|| self.bytes as f64 / 1e6 / self.secs)
    }

    /// MB per CPU-second of both guests.
    pub fn mb_per_cpu_s(&self) -> Option<f64> {
        let cpu = self.guests_cpu_s.filter(|c| *c > 0.0)?;
        (self.bytes > 0).then(|| self.bytes as f64 / 1e6 / cpu)
    }

    /// Requests of the phase: fio's own count, else the device's.
    fn reqs(&self) -> Option<f64> {
        self.ios
            .or(self.requests)
            .filter(|n| *n > 0)
            .map(|n| n as f64)
    }

    /// The counters per request (and the averages) the block under the tables shows, in
    /// the order of [`COUNTERS`].
    fn counters(&self) -> [Option<f64>; N_COUNTERS] {
        let reqs = self.reqs();
        let per = |v: Option<u64>| Some(v? as f64 / reqs?);
        let irq = |v: Option<[u64; 2]>, i: usize| per(v.map(|v| v[i]));
        let split = |i: usize| Some(self.guests_split_s?[i] * 1e6 / reqs?);
        [
            self.requests.map(|n| n as f64),
            // Sectors are 512 bytes.
            self.sectors
                .zip(self.requests)
                .filter(|(_, r)| *r > 0)
                .map(|(s, r)| s as f64 * 512.0 / 1024.0 / r as f64),
            // Requests in the device's queue on average: their summed time in it over the
            // phase's time.
            self.queue_ms
                .filter(|_| self.secs > 0.0)
                .map(|q| q as f64 / (self.secs * 1000.0)),
            irq(self.irq_a, 0),
            irq(self.irq_a, 1),
            irq(self.irq_b, 0),
            irq(self.irq_b, 1),
            self.guests_cpu_s.zip(reqs).map(|(c, r)| c * 1e6 / r),
            split(0),
            split(1),
            split(2),
            split(3),
            self.host_qemu_s
                .zip(reqs)
                .map(|(q, r)| (q + self.host_qpipd_s.unwrap_or(0.0)) * 1e6 / r),
        ]
    }
}

/// How many counters [`Phase::counters`] has.
const N_COUNTERS: usize = 13;

/// The counter columns of [`Phase::counters`] and what each is.
const COUNTERS: [(&str, &str); N_COUNTERS] = [
    ("requests", "requests the block device completed in guest a"),
    ("KiB/req", "their average size"),
    (
        "in flight",
        "requests in the device's queue on average (their summed time in it over the phase's)",
    ),
    ("a qpip", "interrupts of guest a's qpip device per request"),
    ("a virtio", "of guest a's virtio-net NIC"),
    ("b qpip", "of guest b's qpip device"),
    ("b virtio", "of guest b's virtio-net NIC"),
    ("guest µs", "both guests' busy CPU per request"),
    ("a usr", "of it, guest a's in user space (user, nice)"),
    ("a sys", "guest a's in its kernel (system, irq, softirq)"),
    ("b usr", "guest b's in user space"),
    ("b sys", "guest b's in its kernel"),
    (
        "host µs",
        "the host's CPU of both QEMUs and the qpipd processes per request",
    ),
];

/// What the storage part measures ([`StoragePlan::facts`]), which its report states and its
/// results keep.
#[derive(Debug, Clone, PartialEq)]
pub struct StorageFacts {
    /// How many times every measurement runs (1..=[`super::MAX_ROUNDS`]).
    pub rounds: u32,
    /// Bytes of the file written and read back.
    pub file_bytes: u64,
    /// Bytes of the exported disk (room for the file system around the file).
    pub export_bytes: u64,
    /// fio's queue depths, one run each.
    pub fio_depths: Vec<u32>,
    /// Seconds of each fio run (after a second of ramp).
    pub fio_secs: u32,
    /// Guest RAM: guest a holds the file in its tmpfs and, reading it back, in its page
    /// cache; guest b holds the exported disk in its tmpfs.
    pub memory_mib: u32,
    /// Whether the exported file was filled beforehand and mkfs kept from discarding it,
    /// so that writes overwrite its tmpfs pages as a disk's blocks; else (runs before this
    /// was so) the file was sparse and mkfs discarded it, and each write had guest b
    /// allocate and zero the pages it touched.
    pub export_filled: bool,
}

/// Everything the storage part measured: by round (index 0 is round 1), its phases by
/// name (`write-qp`, `read-mx`, `fio16-sk`).
#[derive(Debug, Clone, PartialEq)]
pub struct StorageRun {
    pub facts: StorageFacts,
    pub rounds: Vec<BTreeMap<String, Phase>>,
}

/// `/sys/block/DEV/stat`'s figures.
fn dev_stat(text: &str) -> Option<Vec<u64>> {
    let v: Vec<u64> = text
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    (v.len() >= 11).then_some(v)
}

/// `QPIP VIRTIO` interrupt counts.
pub(super) fn irqs(text: &str) -> Option<[u64; 2]> {
    let mut w = text.split_whitespace().map(str::parse::<u64>);
    let (Some(Ok(q)), Some(Ok(v)), None) = (w.next(), w.next(), w.next()) else {
        return None;
    };
    Some([q, v])
}

pub(super) fn delta2(a: Option<[u64; 2]>, b: Option<[u64; 2]>) -> Option<[u64; 2]> {
    let (a, b) = (a?, b?);
    Some([b[0].checked_sub(a[0])?, b[1].checked_sub(a[1])?])
}

/// A part's rounds (by round, its runs by name) as a JSON list of objects.
pub(super) fn rounds_json<T>(rounds: &[BTreeMap<String, T>], f: impl Fn(&T) -> Value) -> Value {
    rounds
        .iter()
        .map(|r| Value::Object(r.iter().map(|(k, x)| (k.clone(), f(x))).collect()))
        .collect()
}

/// [`rounds_json`]'s list read back, each run by `f(name, value)`; `part` names the part in
/// errors.
pub(super) fn rounds_from_json<T>(
    j: &Value,
    part: &str,
    f: impl Fn(&str, &Value) -> Result<T, String>,
) -> Result<Vec<BTreeMap<String, T>>, String> {
    j.as_array()
        .ok_or_else(|| format!("the {part} results have no rounds"))?
        .iter()
        .map(|r| {
            r.as_object()
                .ok_or_else(|| format!("a {part} round is not an object"))?
                .iter()
                .map(|(k, v)| Ok((k.clone(), f(k, v)?)))
                .collect()
        })
        .collect()
}

/// Two counts written as a JSON list (the interrupts `QPIP VIRTIO`).
pub(super) fn json_pair(v: &Value) -> Option<[u64; 2]> {
    let a = v.as_array()?;
    Some([a.first()?.as_u64()?, a.get(1)?.as_u64()?])
}

/// Four seconds written as a JSON list (guest a's user and kernel time, then guest b's).
pub(super) fn json_split(v: &Value) -> Option<[f64; 4]> {
    let a = v.as_array()?;
    let f = |i: usize| a.get(i)?.as_f64();
    Some([f(0)?, f(1)?, f(2)?, f(3)?])
}

/// One `@storage.NAME=` line's text: `BYTES T0 T1|DEV0|DEV1|IRQA0|IRQA1|IRQB0|IRQB1`.
fn phase_of(text: &str) -> Result<Phase, String> {
    let bad = |why: &str| format!("unreadable storage report ({why}): {text:?}");
    let parts: Vec<&str> = text.split('|').collect();
    let [head, d0, d1, a0, a1, b0, b1] = parts[..] else {
        return Err(bad("not 7 parts"));
    };
    let h: Vec<&str> = head.split_whitespace().collect();
    let [bytes, t0, t1] = h[..] else {
        return Err(bad("no bytes and times"));
    };
    let bytes = bytes.parse::<u64>().map_err(|_| bad("bytes"))?;
    let (t0, t1) = (
        t0.parse::<f64>().map_err(|_| bad("start"))?,
        t1.parse::<f64>().map_err(|_| bad("end"))?,
    );
    // A device whose statistics cannot be read has no counters, but its phase counts.
    let (d0, d1) = (dev_stat(d0), dev_stat(d1));
    let d = |i: usize| d1.as_ref()?[i].checked_sub(d0.as_ref()?[i]);
    Ok(Phase {
        bytes,
        secs: (t1 - t0).max(0.0),
        requests: d(0).zip(d(4)).map(|(r, w)| r + w),
        sectors: d(2).zip(d(6)).map(|(r, w)| r + w),
        queue_ms: d(10),
        irq_a: delta2(irqs(a0), irqs(a1)),
        irq_b: delta2(irqs(b0), irqs(b1)),
        ..Phase::default()
    })
}

/// fio's JSON: the first job's read IOPS, completion latency p50 and p99 (µs) and count,
/// as the fields of a phase.
fn fio_of(text: &str) -> Result<Phase, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| {
        format!(
            "fio's JSON is unreadable ({e}): {}",
            text.chars().take(200).collect::<String>()
        )
    })?;
    let read = &v["jobs"][0]["read"];
    let iops = read["iops"]
        .as_f64()
        .ok_or_else(|| "fio's JSON has no jobs[0].read.iops".to_string())?;
    let pct = |p: &str| {
        read["clat_ns"]["percentile"][p]
            .as_f64()
            .map(|ns| ns / 1000.0)
    };
    Ok(Phase {
        iops: Some(iops),
        p50_us: pct("50.000000"),
        p99_us: pct("99.000000"),
        ios: read["total_ios"].as_u64(),
        ..Phase::default()
    })
}

impl StorageRun {
    /// The run's figures from guest a's output `text` and the CPU windows `cpu` the watcher
    /// read from it. Every phase the plan has must be there.
    pub fn from_lines(
        plan: &StoragePlan,
        text: &str,
        cpu: &Measurements,
    ) -> Result<StorageRun, String> {
        let mut rounds: Vec<BTreeMap<String, Phase>> =
            vec![BTreeMap::new(); plan.facts.rounds as usize];
        let mut fio: Vec<(String, usize, String)> = Vec::new();
        for line in text.lines().map(str::trim_end) {
            if let Some(rest) = line.strip_prefix("@storage.") {
                let (name, t) = rest
                    .split_once('=')
                    .ok_or_else(|| format!("no '=' in {line:?}"))?;
                let (base, round) = split_round(name)?;
                let mut phase = phase_of(t)?;
                if let Some(w) = cpu.rounds.get(round - 1).and_then(|r| r.cpu.get(base)) {
                    phase.guests_cpu_s = w.guests_busy_s();
                    phase.guests_split_s = w.guests_split_s();
                    phase.host_qemu_s = w.host_s("qemu");
                    phase.host_qpipd_s = w.host_s("qpipd");
                }
                if rounds.len() < round {
                    rounds.resize_with(round, BTreeMap::new);
                }
                rounds[round - 1].insert(base.to_string(), phase);
            } else if let Some(rest) = line.strip_prefix("@fio.") {
                let (name, t) = rest
                    .split_once('=')
                    .ok_or_else(|| format!("no '=' in {line:?}"))?;
                let (base, round) = split_round(name)?;
                fio.push((base.to_string(), round, t.to_string()));
            }
        }
        for (base, round, t) in fio {
            let f = fio_of(&t).map_err(|e| format!("{base}: {e}"))?;
            let phase = rounds
                .get_mut(round - 1)
                .and_then(|r| r.get_mut(&base))
                .ok_or_else(|| format!("fio's result for {base} has no phase"))?;
            phase.iops = f.iops;
            phase.p50_us = f.p50_us;
            phase.p99_us = f.p99_us;
            phase.ios = f.ios;
        }
        let run = StorageRun {
            facts: plan.facts.clone(),
            rounds,
        };
        let missing: Vec<String> = (1..=plan.facts.rounds)
            .flat_map(|r| run.expected(r).into_iter().map(move |n| (r, n)))
            .filter(|(r, n)| !run.rounds[*r as usize - 1].contains_key(n))
            .map(|(r, n)| format!("{n} (round {r})"))
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "the guests passed every step but these phases were not reported: {}",
                missing.join(", ")
            ));
        }
        Ok(run)
    }

    /// The phases of a round.
    fn expected(&self, _round: u32) -> Vec<String> {
        let mut v = Vec::new();
        for p in Pair::ALL {
            v.push(format!("write-{}", p.id()));
            v.push(format!("read-{}", p.id()));
            if p.fio() {
                for d in &self.facts.fio_depths {
                    v.push(format!("fio{d}-{}", p.id()));
                }
            }
        }
        v
    }

    /// A figure of phase `base` of `pair` in every round.
    fn side(&self, base: &str, pair: Pair, f: fn(&Phase) -> Option<f64>) -> Vec<Option<f64>> {
        let name = format!("{base}-{}", pair.id());
        self.rounds
            .iter()
            .map(|r| r.get(&name).and_then(f))
            .collect()
    }

    /// The rows of the table.
    pub fn rows(&self) -> Vec<StorageRow> {
        let mb = self.facts.file_bytes / 1_000_000;
        let mut rows = Vec::new();
        let mut row = |what: String,
                       unit: &'static str,
                       better,
                       base: &str,
                       f: fn(&Phase) -> Option<f64>,
                       fio: bool| {
            let side = |p: Pair| {
                if fio && !p.fio() {
                    Vec::new()
                } else {
                    self.side(base, p, f)
                }
            };
            rows.push(StorageRow {
                what,
                unit,
                better,
                sides: Pair::ALL.map(side),
                baseline: 1,
            });
        };
        for (base, what) in [
            ("write", format!("ext2 write {mb} MB + sync")),
            ("read", format!("ext2 read back {mb} MB")),
        ] {
            row(
                format!("{what}, throughput"),
                "MB/s",
                Better::Higher,
                base,
                Phase::mb_per_s,
                false,
            );
            row(
                format!("{what}, CPU effectiveness"),
                "MB/CPU-s",
                Better::Higher,
                base,
                Phase::mb_per_cpu_s,
                false,
            );
        }
        for d in &self.facts.fio_depths {
            let base = format!("fio{d}");
            let what = format!("fio 4 KiB random reads, depth {d}");
            row(
                what.clone(),
                "IOPS",
                Better::Higher,
                &base,
                |p| p.iops,
                true,
            );
            row(
                format!("{what}, latency p50"),
                "µs",
                Better::Lower,
                &base,
                |p| p.p50_us,
                true,
            );
            row(
                format!("{what}, latency p99"),
                "µs",
                Better::Lower,
                &base,
                |p| p.p99_us,
                true,
            );
        }
        rows
    }

    /// The counters block's rows: (phase and pair, medians of each counter).
    fn counter_rows(&self) -> Vec<(String, [Option<f64>; N_COUNTERS])> {
        let mut bases = vec!["write".to_string(), "read".to_string()];
        bases.extend(self.facts.fio_depths.iter().map(|d| format!("fio{d}")));
        let mut out = Vec::new();
        for base in &bases {
            for p in Pair::ALL {
                let name = format!("{base}-{}", p.id());
                let phases: Vec<&Phase> = self.rounds.iter().filter_map(|r| r.get(&name)).collect();
                if phases.is_empty() {
                    continue;
                }
                let per: Vec<[Option<f64>; N_COUNTERS]> =
                    phases.iter().map(|p| p.counters()).collect();
                let medians: [Option<f64>; N_COUNTERS] = std::array::from_fn(|i| {
                    spread(&per.iter().map(|c| c[i]).collect::<Vec<_>>()).map(|s| s.median)
                });
                let label = match base.strip_prefix("fio") {
                    Some(d) => format!("fio depth {d}, {}", p.name()),
                    None => format!("{base}, {}", p.name()),
                };
                out.push((label, medians));
            }
        }
        out
    }

    /// The run as JSON: the plan's facts, every round's phases, and the rows.
    pub fn json(&self) -> Value {
        let phase = |p: &Phase| {
            json!({
                "bytes": p.bytes, "seconds": p.secs, "requests": p.requests,
                "sectors": p.sectors, "queue_ms": p.queue_ms,
                "irq_a_qpip_virtio": p.irq_a, "irq_b_qpip_virtio": p.irq_b,
                "guests_cpu_s": p.guests_cpu_s, "guests_user_kernel_s": p.guests_split_s,
                "host_qemu_s": p.host_qemu_s,
                "host_qpipd_s": p.host_qpipd_s, "iops": p.iops, "p50_us": p.p50_us,
                "p99_us": p.p99_us, "ios": p.ios,
            })
        };
        let f = &self.facts;
        json!({
            "plan": {
                "rounds": f.rounds, "file_bytes": f.file_bytes, "export_bytes": f.export_bytes,
                "fio_depths": f.fio_depths, "fio_secs": f.fio_secs, "memory_mib": f.memory_mib,
                "export_filled": f.export_filled,
            },
            "rounds": rounds_json(&self.rounds, phase),
            "rows": self.rows().iter().map(row_json).collect::<Vec<_>>(),
        })
    }

    /// A run read back from [`StorageRun::json`]'s output.
    pub fn from_json(j: &Value) -> Result<StorageRun, String> {
        let p = &j["plan"];
        let num = |k: &str| {
            p[k].as_u64()
                .ok_or_else(|| format!("the storage results' plan has no {k:?}"))
        };
        let facts = StorageFacts {
            rounds: num("rounds")? as u32,
            file_bytes: num("file_bytes")?,
            export_bytes: num("export_bytes")?,
            fio_depths: p["fio_depths"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|d| d.as_u64().map(|d| d as u32))
                        .collect()
                })
                .unwrap_or_default(),
            fio_secs: num("fio_secs")? as u32,
            memory_mib: num("memory_mib")? as u32,
            export_filled: p["export_filled"].as_bool().unwrap_or(false),
        };
        let rounds = rounds_from_json(&j["rounds"], "storage", |k, v| {
            let u = |f: &str| v[f].as_u64();
            let x = |f: &str| v[f].as_f64();
            Ok(Phase {
                bytes: u("bytes").ok_or_else(|| format!("storage phase {k} has no bytes"))?,
                secs: x("seconds").ok_or_else(|| format!("storage phase {k} has no seconds"))?,
                requests: u("requests"),
                sectors: u("sectors"),
                queue_ms: u("queue_ms"),
                irq_a: json_pair(&v["irq_a_qpip_virtio"]),
                irq_b: json_pair(&v["irq_b_qpip_virtio"]),
                guests_cpu_s: x("guests_cpu_s"),
                guests_split_s: json_split(&v["guests_user_kernel_s"]),
                host_qemu_s: x("host_qemu_s"),
                host_qpipd_s: x("host_qpipd_s"),
                iops: x("iops"),
                p50_us: x("p50_us"),
                p99_us: x("p99_us"),
                ios: u("ios"),
            })
        })?;
        Ok(StorageRun { facts, rounds })
    }

    /// What the part measured, in a paragraph.
    fn intro(&self) -> String {
        let f = &self.facts;
        format!(
            "Guest b exports a {} MiB file on its tmpfs{}; guest a makes an ext2 file system on \
             it, writes a {} MB file from its tmpfs and flushes it with `sync` (write), \
             unmounts, drops its caches, mounts again and reads the file back (read; its \
             SHA-256 compared after). fio: 4 KiB random reads of the raw device, direct I/O, \
             libaio, {} s per queue depth after 1 s of ramp. qp: `qpip-nbd connect` (ublk) \
             against `qpip-nbd serve`, over QPs; sockets: the stock `nbd-client` (the \
             kernel's nbd driver) against the stock `nbd-server`, over kernel sockets through \
             virtio-net (the baseline); mixed: the stock `nbd-client` against `qpip-nbd \
             serve` (the server side's share). CPU effectiveness: MB per CPU-second of both \
             guests (all of `/proc/stat` but idle, iowait and steal, over the phase). Guests \
             of {} MiB; {}, the three pairs taking turns to go first.",
            f.export_bytes >> 20,
            if f.export_filled {
                ", filled beforehand as a disk's blocks exist (mkfs does not discard it: a \
                 write overwrites its pages)"
            } else {
                ", sparse (mkfs discards it: a write has tmpfs allocate and zero its pages)"
            },
            f.file_bytes / 1_000_000,
            f.fio_secs,
            f.memory_mib,
            if f.rounds > 1 {
                format!("{} rounds, medians and min–max of the rounds", f.rounds)
            } else {
                "one round".to_string()
            }
        )
    }

    /// The table's cells, header first.
    fn table(&self) -> Vec<Vec<String>> {
        let mut t = vec![[
            "",
            "qp",
            "min–max",
            "sockets",
            "min–max",
            "mixed",
            "min–max",
            "qp/sockets",
            "min–max",
            "mixed/sockets",
            "min–max",
        ]
        .map(String::from)
        .to_vec()];
        for r in self.rows() {
            let s = r.sides.each_ref().map(|v| spread(v));
            let g = |i| r.gain_spread(i);
            t.push(vec![
                format!("{}, {}", r.what, r.unit),
                fmt_median(s[0]),
                fmt_range(s[0]),
                fmt_median(s[1]),
                fmt_range(s[1]),
                fmt_median(s[2]),
                fmt_range(s[2]),
                fmt_gain(r.gain(0)),
                gain_range(g(0)),
                fmt_gain(r.gain(2)),
                gain_range(g(2)),
            ]);
        }
        t
    }

    fn counter_table(&self) -> Vec<Vec<String>> {
        counter_cells(
            &COUNTERS,
            self.counter_rows()
                .into_iter()
                .map(|(l, c)| (l, c.to_vec())),
        )
    }

    /// The block on the terminal.
    pub fn text(&self) -> String {
        framed_table(
            "Storage, guest a ⇄ guest b: NBD over QPs (qp) vs kernel sockets (sockets), and the stock client against qpip-nbd serve (mixed):",
            &self.table(),
            &[self.intro()],
        ) + &framed_table(
            "What explains them, per phase and request (medians of the rounds):",
            &self.counter_table(),
            &counter_legend(),
        )
    }

    /// The section of the Markdown document, under a heading of `level`.
    pub fn markdown(&self, level: usize) -> String {
        let h = "#".repeat(level);
        let mut md = format!(
            "\n{h} Storage: a network disk over QPs (NBD)\n\n{}\n\n",
            self.intro()
        );
        md += &md_table(&self.table(), &[]);
        md += &format!("{h}# What explains the storage figures, per phase and request\n\n");
        md += &md_table(&self.counter_table(), &counter_legend());
        md
    }
}

fn counter_legend() -> Vec<String> {
    vec![
        columns_said(&COUNTERS),
        "Copies on the QP path, by design: `qpip-nbd connect` sends WRITE data in place from \
         the ublk request's buffer and copies READ data once, from its receive buffers into \
         the ublk buffer; `qpip-nbd serve` writes WRITE data to the file in place and sends \
         READ data in place. The stock pair copies through the kernels' socket buffers on \
         both ends and runs TCP/IP in the guests; over QPs TCP/IP runs in qpipd on the host \
         (its CPU is the host's, not the guests')."
            .to_string(),
    ]
}

fn gain_range(s: Option<Spread>) -> String {
    s.map_or("-".into(), |g| format!("{:.2}–{:.2}", g.min, g.max))
}

/// One figure of the three pairs in every round (a pair that does not measure it: none):
/// qp, sockets, mixed (the order of [`Pair::ALL`]), each compared with sockets.
pub type StorageRow = SidesRow<3>;

fn row_json(r: &StorageRow) -> Value {
    let side = |v: &[Option<f64>]| json!({ "rounds": v, "median": spread(v).map(|s| s.median) });
    json!({
        "what": r.what,
        "unit": r.unit,
        "qp": side(&r.sides[0]),
        "sockets": side(&r.sides[1]),
        "mixed": side(&r.sides[2]),
        "qp_over_sockets": r.gain(0),
        "mixed_over_sockets": r.gain(2),
    })
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::demo::results::Measurements;

    const STAT: &str = "cpu  100 0 50 1000 0 0 0 0 0 0";
    const STAT_END: &str = "cpu  300 0 150 2000 0 0 0 0 0 0";

    /// Guest a's lines of one phase: its CPU window (2 + 2 busy seconds) and its report.
    fn phase_lines(name: &str, bytes: u64, secs: f64, reqs: u64) -> String {
        format!(
            "@cpu.{name}=start|{STAT}|{STAT}|qemu-a=1 qemu-b=1 qpipd-adapter=1\n\
             @cpu.{name}=end|{STAT_END}|{STAT_END}|qemu-a=2 qemu-b=2 qpipd-adapter=1.5\n\
             @storage.{name}={bytes} 10.00 {}|0 0 0 0 0 0 0 0 0 0 0|{reqs} 0 {} 0 {reqs} 0 {} 0 0 0 {}|5 7|{} {}|1 1|{} 1\n",
            10.0 + secs,
            reqs * 8,
            reqs * 8,
            (secs * 1000.0) as u64 * 4,
            5 + reqs,
            7 + reqs,
            1 + 2 * reqs,
        )
    }

    fn fio_line(name: &str, iops: f64) -> String {
        format!(
            "@fio.{name}={{\"fio version\": \"fio-3.39\", \"jobs\": [{{\"read\": {{\"iops\": {iops}, \"total_ios\": 1000, \"clat_ns\": {{\"percentile\": {{\"50.000000\": 250000, \"99.000000\": 900000}}}}}}}}]}}\n"
        )
    }

    /// Two rounds: qp writes at 40 and 50 MB/s, sockets at 20 and 20, mixed at 25 and 30.
    pub(in crate::demo::results) fn run() -> StorageRun {
        let mut plan = StoragePlan::bench();
        plan.facts.rounds = 2;
        plan.facts.file_bytes = 400_000_000;
        let mut text = String::from("@step=storage-qp.1\nnoise\n");
        for (r, [q, s, m]) in [(1, [10.0, 20.0, 16.0]), (2, [8.0, 20.0, 400.0 / 30.0])] {
            for (id, secs) in [("qp", q), ("sk", s), ("mx", m)] {
                for base in ["write", "read"] {
                    text += &phase_lines(&format!("{base}-{id}.{r}"), 400_000_000, secs, 1000);
                }
                if id != "mx" {
                    for d in [1, 16] {
                        let name = format!("fio{d}-{id}.{r}");
                        text += &phase_lines(&name, 0, 10.0, 1000);
                        text +=
                            &fio_line(&name, if id == "qp" { 2000.0 } else { 1000.0 } * d as f64);
                    }
                }
            }
        }
        let mut cpu = Measurements::with_rounds(2);
        for l in text.lines() {
            cpu.take_line(l).unwrap();
        }
        StorageRun::from_lines(&plan, &text, &cpu).unwrap()
    }

    #[test]
    fn the_phases_are_read_with_their_cpu_windows_and_counters() {
        let run = run();
        let p = &run.rounds[0]["write-qp"];
        assert_eq!(p.bytes, 400_000_000);
        assert!((p.secs - 10.0).abs() < 1e-9);
        assert_eq!(p.requests, Some(2000));
        assert_eq!(p.sectors, Some(16000));
        assert_eq!(p.irq_a, Some([1000, 1000]));
        assert_eq!(p.irq_b, Some([2000, 0]));
        // (300 + 150 - 150) ticks in each guest: 3 s + 3 s.
        assert_eq!(p.guests_cpu_s, Some(6.0));
        // Of them, 200 user ticks and 100 system ticks in each.
        assert_eq!(p.guests_split_s, Some([2.0, 1.0, 2.0, 1.0]));
        assert_eq!(p.host_qemu_s, Some(2.0));
        assert_eq!(p.host_qpipd_s, Some(0.5));
        assert_eq!(p.mb_per_s(), Some(40.0));
        assert!((p.mb_per_cpu_s().unwrap() - 400.0 / 6.0).abs() < 1e-9);
        let c = p.counters();
        // 8 sectors of 512 bytes per request: 4 KiB.
        assert_eq!(c[1], Some(4.0));
        assert_eq!(c[2], Some(4.0));
        assert_eq!(
            (c[3], c[4], c[5], c[6]),
            (Some(0.5), Some(0.5), Some(1.0), Some(0.0))
        );
        // Per request (of 2000): 3000 µs of both guests, 1000 + 500 µs in each.
        assert_eq!(
            &c[7..12],
            &[
                Some(3000.0),
                Some(1000.0),
                Some(500.0),
                Some(1000.0),
                Some(500.0)
            ]
        );
        let f = &run.rounds[1]["fio16-qp"];
        assert_eq!(
            (f.iops, f.p50_us, f.p99_us, f.ios),
            (Some(32000.0), Some(250.0), Some(900.0), Some(1000))
        );
    }

    #[test]
    fn the_rows_have_the_ratios_to_sockets_per_round_and_of_the_medians() {
        let rows = run().rows();
        let w = &rows[0];
        assert_eq!(w.what, "ext2 write 400 MB + sync, throughput");
        assert_eq!(w.sides[0], [Some(40.0), Some(50.0)]);
        assert_eq!(w.gain(0), Some(2.25));
        let g = w.gain_spread(0).unwrap();
        assert_eq!((g.min, g.max), (2.0, 2.5));
        assert!((w.gain(2).unwrap() - 27.5 / 20.0).abs() < 1e-9);
        // fio: qp and sockets only; latency is better lower.
        let iops16 = rows
            .iter()
            .find(|r| r.what == "fio 4 KiB random reads, depth 16" && r.unit == "IOPS")
            .unwrap();
        assert!(iops16.sides[2].is_empty());
        assert_eq!(iops16.gain(0), Some(2.0));
        assert_eq!(iops16.gain(2), None);
        let p99 = rows
            .iter()
            .find(|r| r.what.ends_with("depth 1, latency p99"))
            .unwrap();
        assert_eq!(p99.gain(0), Some(1.0));
        assert_eq!(rows.len(), 4 + 6);
    }

    #[test]
    fn the_report_reads_back_from_its_json_and_renders() {
        let run = run();
        let back = StorageRun::from_json(&run.json()).unwrap();
        assert_eq!(back, run);
        let text = run.text();
        assert!(text.contains("qp/sockets"), "{text}");
        assert!(text.contains("2.25x"), "{text}");
        assert!(text.contains("write, mixed"), "{text}");
        let md = run.markdown(2);
        assert!(
            md.contains("\n## Storage: a network disk over QPs (NBD)\n"),
            "{md}"
        );
        assert!(md.contains("| ext2 write 400 MB + sync, throughput, MB/s | 45.0 | 40.0–50.0 | 20.0 | 20.0–20.0 |"), "{md}");
        assert!(md.contains("| fio depth 16, qp |"), "{md}");
        assert!(StorageRun::from_json(&json!({"plan": {}})).is_err());
    }

    #[test]
    fn a_missing_phase_or_a_broken_line_is_an_error() {
        let mut plan = StoragePlan::bench();
        plan.facts.rounds = 1;
        let m = Measurements::default();
        let e = StorageRun::from_lines(&plan, "", &m).unwrap_err();
        assert!(e.contains("write-qp (round 1)"), "{e}");
        assert!(StorageRun::from_lines(&plan, "@storage.write-qp=1 2|x", &m)
            .unwrap_err()
            .contains("not 7 parts"));
        assert!(
            StorageRun::from_lines(&plan, "@fio.fio1-qp={}", &m)
                .unwrap_err()
                .contains("no phase")
                || StorageRun::from_lines(&plan, "@fio.fio1-qp={}", &m)
                    .unwrap_err()
                    .contains("iops")
        );
    }
}
