//! The bench's RDMA lines when perftest ran on qpip's ib_device (`qpip0`, measurements
//! `*-vb`): perftest's six programs, each on qpip0 against the same program on siw (the
//! headline, goal ≥ 2x), on rxe (a second software anchor), and for bandwidth against
//! qpip's own library on the same operation (`qpip-perf --rdma`, goal within 20 %); each
//! line's goal and, where it misses, why; and the perftest client's system calls per
//! operation on each device.
//!
//! On these lines the table's QP column is perftest on qpip0 and its sockets column the
//! line's other side (siw, rxe or qpip-perf), named in the line.

use super::lines::Line;
use super::report::{Measurements, Round};
use super::spread::{spread, Better};
use crate::demo::human;
use std::collections::BTreeMap;

/// perftest's programs, as the bench runs them: (measurement, program, bandwidth?).
pub const PROGRAMS: [(&str, &str, bool); 6] = [
    ("rdmalat", "ib_write_lat", false),
    ("rdmabw", "ib_write_bw", true),
    ("rdmareadlat", "ib_read_lat", false),
    ("rdmareadbw", "ib_read_bw", true),
    ("rdmasendlat", "ib_send_lat", false),
    ("rdmasendbw", "ib_send_bw", true),
];

/// The headline goal: perftest on qpip0 at least this many times better than on siw.
pub const SIW_GOAL: f64 = 2.0;
/// Bandwidth through perftest on qpip0 within 20 % of qpip's own library.
pub const OWN_LIBRARY_GOAL: f64 = 0.8;

/// What a line aims at: its gain at least `min`; `why` says what keeps it from it (shown
/// when the line misses).
#[derive(Debug, Clone, PartialEq)]
pub struct Goal {
    pub min: f64,
    pub why: String,
}

/// The perftest client's system calls per operation (iteration) in every round it was
/// counted, on qpip0 and on the line's other device.
#[derive(Debug, Clone, PartialEq)]
pub struct Syscalls {
    pub program: &'static str,
    /// The other device (`siw`, `rxe`).
    pub other: &'static str,
    pub qpip0: Vec<Option<f64>>,
    pub others: Vec<Option<f64>>,
    /// The calls made at least once per two operations, per operation (the first round
    /// counted): what the program calls in its loop rather than once to start.
    pub qpip0_loop: Vec<(String, f64)>,
    pub others_loop: Vec<(String, f64)>,
}

/// The run measured perftest on qpip0.
pub fn measured(m: &Measurements) -> bool {
    m.rounds
        .iter()
        .any(|r| r.perf.keys().any(|k| k.ends_with("-vb")))
}

/// The calls of a perftest row made at least once per two operations, per operation,
/// most frequent first.
fn loop_calls(row: &serde_json::Value) -> Vec<(String, f64)> {
    let ops = row["msgs"].as_f64().filter(|n| *n > 0.0).unwrap_or(1.0);
    let mut v: Vec<(String, f64)> = row["syscalls"]["by_call"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, n)| Some((k.clone(), n.as_f64()? / ops)))
        .filter(|(_, per)| *per >= 0.5)
        .collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1));
    v
}

fn syscalls_of(m: &Measurements, test: &str, program: &'static str, other: &str) -> Syscalls {
    let per_op = |net: &str| -> Vec<Option<f64>> {
        let n = format!("{test}-{net}");
        m.rounds
            .iter()
            .map(|r| r.num(&n, None, &["syscalls_per_op"]))
            .collect()
    };
    let first_loop = |net: &str| {
        let n = format!("{test}-{net}");
        m.rounds
            .iter()
            .find_map(|r| r.row(&n, None).filter(|row| row["syscalls"].is_object()))
            .map(loop_calls)
            .unwrap_or_default()
    };
    Syscalls {
        program,
        other: if other == "rx" { "rxe" } else { "siw" },
        qpip0: per_op("vb"),
        others: per_op(other),
        qpip0_loop: first_loop("vb"),
        others_loop: first_loop(other),
    }
}

/// Why a line of `program` against `other` (`sk`, `rx`, `qp`) misses its goal: what is
/// structural in it, and what would change it.
pub fn why_missed(program: &str, bandwidth: bool, other: &str) -> String {
    let reads = program.contains("read");
    match (bandwidth, other) {
        // A ping-pong with both ends spinning (ib_write_lat, ib_send_lat).
        (false, _) if !reads => format!(
            "{program} spins on both ends: each guest's single vCPU polls without a pause \
             the whole run, so the host's 2 CPUs carry two spinning QEMUs, and qpipd, which \
             moves every message of qpip0's, waits for one in the scheduler's time slices \
             (about a millisecond a round trip, as qpip's own library spinning). siw does \
             its work in the guest kernel inside the post's own system call (one write per \
             operation, below), on the vCPU that spins, so spinning does not starve it. The \
             device is not the limit: ib_read_lat, where only guest a spins, is many times \
             faster on qpip0 than on siw. What changes it: a CPU for the adapter, i.e. qpipd \
             on a core the spinning vCPUs do not take (a host with more CPUs than spinning \
             vCPUs, as a NIC has its own engine), or ends that sleep on their completions \
             instead of spinning (perftest's -e; qpip's own library on tripwires, the line \
             below)"
        ),
        (false, _) => format!(
            "{program}: guest a spins on its CQ and the host's 2 CPUs carry its QEMU, guest \
             b's and qpipd; a busy host leaves qpipd waiting for a CPU. What changes it: qpipd \
             on a core of its own"
        ),
        (true, "qp") => format!(
            "{program}'s loop signals one completion in -Q (cq_mod: 100, capped at -t 64): \
             it posts 64, waits for the 64th to complete and only then posts again, so the \
             pipe drains every 64 messages{}, where qpip's own library posts again as each \
             completes. What changes it: {}",
            if reads {
                ", and with at most 16 Reads outstanding (the device's ORD) each batch of 64 \
                 is 4 round trips' worth of waiting"
            } else {
                ""
            },
            if reads {
                "a device ORD as deep as the send queue (64 Reads in flight), so a batch is \
                 one round trip; or perftest posting as completions come (-Q 1), on both \
                 sides of the comparison"
            } else {
                "perftest posting as completions come (-Q 1), on both sides of the \
                 comparison"
            }
        ),
        (true, _) => format!(
            "{program}'s data crosses qpipd's TCP on the host while guest a's vCPU spins \
             polling the CQ; with 2 host CPUs for two QEMUs and qpipd the engine runs in what \
             the spinning leaves. What changes it: qpipd on a core of its own"
        ),
    }
}

/// The lines of perftest on qpip0, program by program: against siw (goal
/// [`SIW_GOAL`]), against rxe, and for bandwidth against qpip's own library (goal
/// [`OWN_LIBRARY_GOAL`]).
pub fn lines(m: &Measurements) -> Vec<Line> {
    let mut out = Vec::new();
    for (test, program, bw) in PROGRAMS {
        // A program the run measured on qpip0 or siw (one that failed on qpip0 in every
        // round keeps its line: its QP column empty, the notes say so).
        let Some(size) = ["vb", "sk"].iter().find_map(|net| {
            let n = format!("{test}-{net}");
            m.rounds
                .iter()
                .find_map(|r| r.row(&n, None)?["size"].as_u64())
        }) else {
            continue;
        };
        let figure = |r: &Round, n: &str| -> Option<f64> {
            if bw {
                r.num(n, Some(size), &["mb_per_s"])
            } else {
                r.num(n, Some(size), &["rtt_us", "p50"])
            }
        };
        let side = |net: &str| -> Vec<Option<f64>> {
            let n = format!("{test}-{net}");
            m.rounds.iter().map(|r| figure(r, &n)).collect()
        };
        let (what, unit, better) = if bw {
            (
                format!("{program}, {} messages, bandwidth", human(size)),
                "MB/s",
                Better::Higher,
            )
        } else {
            (
                format!("{program}, {} messages, round trip p50", human(size)),
                "µs",
                Better::Lower,
            )
        };
        let mut against = vec![("sk", "siw", Some(SIW_GOAL)), ("rx", "rxe", None)];
        if bw {
            against.push(("qp", "own library", Some(OWN_LIBRARY_GOAL)));
        }
        for (net, name, goal) in against {
            let others = side(net);
            if spread(&others).is_none() && net != "sk" {
                continue;
            }
            out.push(Line {
                what: format!("{what} (qpip0 vs {name})"),
                unit,
                qp: side("vb"),
                sockets: others,
                netdev: Vec::new(),
                qp4: Vec::new(),
                better,
                counted: None,
                sockets_counted: None,
                host_cpu: None,
                goal: goal.map(|min| Goal {
                    min,
                    why: why_missed(program, bw, net),
                }),
                syscalls: (net != "qp").then(|| syscalls_of(m, test, program, net)),
            });
        }
    }
    out
}

/// A line misses its goal: its gain (the ratio of the medians) below it.
pub fn missed(l: &Line) -> Option<(&Goal, f64)> {
    let g = l.goal.as_ref()?;
    let gain = l.gain()?;
    (gain < g.min).then_some((g, gain))
}

/// The notes under the table on these lines: what they are, the goals they miss and why,
/// and the system calls per operation.
pub fn notes(lines: &[Line]) -> Vec<String> {
    if !lines
        .iter()
        .any(|l| l.goal.is_some() || l.syscalls.is_some())
    {
        return Vec::new();
    }
    let mut v = vec![
        "perftest on qpip0: on the lines (qpip0 vs ...) the QP column is unmodified perftest \
         (ib_write_lat, ib_write_bw, ib_read_lat, ib_read_bw, ib_send_lat, ib_send_bw) on \
         qpip's ib_device qpip0 in both guests (qpip_ib.ko and the rdma-core provider, -d \
         qpip0 -R, rdma_cm over IPv4 to guest b's qpip device address), and the sockets \
         column the line's other side, in the same run and rounds: the same programs with \
         the same sizes, counts and depths on the guest kernel's soft-iWARP (siw, -R, over \
         virtio-net) and soft-RoCE (rxe, -d rxe0 -x GID), and for bandwidth qpip's own \
         library on the same operation (qpip-perf --rdma: Writes and Reads; it has no \
         Send test). Latency: perftest's median (t_typical) round trip (its half doubled for \
         the ping-pongs; a Read's whole). Bandwidth: perftest's BW average, 10^6 bytes/s. \
         Goals: every line against siw at least 2x, latency included; bandwidth against the \
         own library at least 0.8x (within 20 %)."
            .to_string(),
    ];
    // perftest on qpip0 failed in every round (guest a's progress notes say how).
    let failed: Vec<&str> = lines
        .iter()
        .filter(|l| l.goal.is_some() && l.qp().is_none() && l.what.ends_with("vs siw)"))
        .map(|l| l.what.split(',').next().unwrap_or_default())
        .collect();
    if !failed.is_empty() {
        v.push(format!(
            "No figure on qpip0 in any round: {} (perftest failed there 3 times a round; the \
             run's progress lines say how).",
            failed.join(", ")
        ));
    }
    let misses: Vec<String> = lines
        .iter()
        .filter_map(|l| {
            let (g, gain) = missed(l)?;
            Some(format!(
                "{}: {gain:.2}x, goal {}x — {}.",
                l.what, g.min, g.why
            ))
        })
        .collect();
    let met = lines
        .iter()
        .filter(|l| l.goal.is_some() && l.gain().is_some() && missed(l).is_none())
        .count();
    if met + misses.len() > 0 {
        v.push(format!(
            "Goals met on {met} of {} lines.{}",
            met + misses.len(),
            if misses.is_empty() {
                String::new()
            } else {
                format!(" Missed: {}", misses.join(" "))
            }
        ));
    }
    // System calls per operation, program by program (its line against siw, then rxe).
    let mut by_program: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let mut order = Vec::new();
    let fmt = |v: &[Option<f64>], loop_calls: &[(String, f64)]| -> Option<String> {
        let s = spread(v)?;
        let calls = if loop_calls.is_empty() {
            "no call per operation".to_string()
        } else {
            loop_calls
                .iter()
                .map(|(k, n)| format!("{k} {n:.2}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        Some(format!("{:.2} ({calls})", s.median))
    };
    for l in lines {
        let Some(s) = &l.syscalls else { continue };
        let e = by_program.entry(s.program).or_insert_with(|| {
            order.push(s.program);
            Vec::new()
        });
        if e.is_empty() {
            if let Some(q) = fmt(&s.qpip0, &s.qpip0_loop) {
                e.push(format!("qpip0 {q}"));
            }
        }
        if let Some(o) = fmt(&s.others, &s.others_loop) {
            e.push(format!("{} {o}", s.other));
        }
    }
    let per: Vec<String> = order
        .iter()
        .filter(|p| !by_program[*p].is_empty())
        .map(|p| format!("{p}: {}", by_program[p].join("; ")))
        .collect();
    if !per.is_empty() {
        v.push(format!(
            "System calls per operation of perftest's client (guest a), counted by the guest \
             kernel's ftrace (a hist trigger on raw_syscalls:sys_enter by program and call) \
             over its whole run in round 1, start-up and connection included, divided by its \
             iterations; in brackets the calls made at least once per two operations, per \
             operation (the loop's). {}.",
            per.join(". ")
        ));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{bw, close, perf};
    use super::super::{json_value, lines as all_lines, text_table, Measurements};
    use super::*;

    /// Three rounds of the RDMA rows as guest a reports them: perftest on qpip0, siw and
    /// rxe (ib_write_lat, ib_write_bw, ib_send_bw), qpip-perf's Write bandwidth, and round
    /// 1's system call counts.
    fn rdma_rounds() -> Measurements {
        let mut m = Measurements::with_rounds(3);
        // ib_write_lat's columns (half round trips, µs) and ib_write_bw's (MiB/s).
        let lat =
            |typical: f64| format!(" 64 2000 1.0 99.0 {typical} {typical} 0.5 {typical} {typical}");
        let bwl = |mib: f64| format!(" 65536 256 {mib} {mib} 0.001");
        for r in 1..=3 {
            let k = r as f64;
            for (net, half, mib) in [
                ("vb", 50.0 * k, 200.0),
                ("sk", 150.0, 20.0 * k),
                ("rx", 60.0, 100.0),
            ] {
                for (name, text) in [
                    ("rdmalat", lat(half)),
                    ("rdmabw", bwl(mib)),
                    ("rdmasendbw", bwl(mib)),
                ] {
                    m.take_line(&format!("@perftest.{name}-{net}.{r}={text}"))
                        .unwrap();
                }
            }
            m.take_line(&format!("@perf.rdmabw-qp.{r}={}", perf(&bw(65536, 300.0))))
                .unwrap();
        }
        for (net, total, write) in [("vb", 400, 0), ("sk", 2400, 2000), ("rx", 2410, 2000)] {
            m.take_line(&format!(
                "@syscalls.rdmalat-{net}.1={total} write:{write} openat:40 ioctl:90"
            ))
            .unwrap();
        }
        m
    }

    #[test]
    fn perftest_on_qpip0_makes_the_rdma_lines_against_siw_rxe_and_the_own_library() {
        let m = rdma_rounds();
        assert!(measured(&m));
        let row = m.rounds[0].row("rdmalat-vb", None).unwrap();
        assert_eq!(row["transport"], "qpip0");
        assert_eq!(row["syscalls"]["by_call"]["write"], 0);
        assert!(close(row["syscalls_per_op"].as_f64().unwrap(), 0.2));
        let l = all_lines(&m, true);
        let find = |what: &str| {
            l.iter()
                .find(|l| l.what == what)
                .unwrap_or_else(|| panic!("{what}: {l:#?}"))
        };
        // Latency: the round trip doubled; against siw 300 µs over 100, 200, 300.
        let siw = find("ib_write_lat, 64 B messages, round trip p50 (qpip0 vs siw)");
        assert_eq!(siw.qp, [Some(100.0), Some(200.0), Some(300.0)]);
        assert!(close(siw.gain().unwrap(), 1.5));
        let (goal, gain) = missed(siw).unwrap();
        assert!(close(gain, 1.5) && goal.min == SIW_GOAL);
        // Against rxe: no goal, a second anchor.
        let rxe = find("ib_write_lat, 64 B messages, round trip p50 (qpip0 vs rxe)");
        assert!(rxe.goal.is_none() && missed(rxe).is_none());
        // Bandwidth: against siw met (5x at the median), against the own library 200 MiB/s
        // (perftest's) over 300 MB/s.
        let bw_siw = find("ib_write_bw, 64 KiB messages, bandwidth (qpip0 vs siw)");
        assert!(missed(bw_siw).is_none());
        let own = find("ib_write_bw, 64 KiB messages, bandwidth (qpip0 vs own library)");
        assert!(close(own.gain().unwrap(), 200.0 * 1.048576 / 300.0));
        assert!(missed(own).is_some());
        // The Sends have no own-library line: qpip-perf has no Send test.
        assert!(!l
            .iter()
            .any(|l| l.what.starts_with("ib_send_bw") && l.what.ends_with("own library)")));
        assert!(l
            .iter()
            .any(|l| l.what == "ib_send_bw, 64 KiB messages, bandwidth (qpip0 vs siw)"));
        // None of qpip-perf's own RDMA lines against siw, and no line of what the run did
        // not measure (the RDMA rows alone).
        assert!(!l.iter().any(|l| l.what.starts_with("RDMA ")));
        assert!(
            !l.iter()
                .any(|l| l.what.contains("ping-pong") || l.what.starts_with("guest CPU")),
            "{l:#?}"
        );
        // Under the table: the goals missed with why, the system calls per operation with
        // the loop's calls.
        let t = text_table(&l).replace('\n', " ");
        let t = t.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(t.contains("Goals met on 2 of 4 lines."), "{t}");
        assert!(t.contains("ib_write_lat, 64 B messages, round trip p50 (qpip0 vs siw): 1.50x, goal 2x — ib_write_lat spins"), "{t}");
        assert!(
            t.contains("ib_write_lat: qpip0 0.20 (no call per operation); siw 1.20 (write 1.00); rxe 1.21 (write 1.00)."),
            "{t}"
        );
        // And in the JSON.
        let j = json_value(&m, &l);
        let c = j["comparison"].as_array().unwrap();
        let jl = c.iter().find(|v| v["what"] == siw.what).unwrap();
        assert_eq!(jl["goal"], 2.0);
        assert_eq!(jl["goal_met"], false);
        assert!(jl["why_missed"]
            .as_str()
            .unwrap()
            .starts_with("ib_write_lat spins"));
        assert!(close(
            jl["syscalls_per_op"]["siw"]["median"].as_f64().unwrap(),
            1.2
        ));
        let jb = c.iter().find(|v| v["what"] == bw_siw.what).unwrap();
        assert_eq!(jb["goal_met"], true);
        assert!(jb.get("why_missed").is_none());
    }

    #[test]
    fn a_program_that_failed_on_qpip0_in_every_round_keeps_its_line_and_says_so() {
        let mut m = rdma_rounds();
        for r in &mut m.rounds {
            r.perf.remove("rdmasendbw-vb");
        }
        let l = all_lines(&m, true);
        let send = l
            .iter()
            .find(|l| l.what == "ib_send_bw, 64 KiB messages, bandwidth (qpip0 vs siw)")
            .unwrap();
        assert!(send.qp().is_none() && send.gain().is_none());
        let t = text_table(&l).replace('\n', " ");
        let t = t.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            t.contains("No figure on qpip0 in any round: ib_send_bw (perftest failed"),
            "{t}"
        );
        assert!(t.contains("Goals met on 1 of 3 lines."), "{t}");
    }

    #[test]
    fn a_count_without_its_result_or_unreadable_is_an_error() {
        let mut m = Measurements::with_rounds(1);
        assert!(m.take_line("@syscalls.rdmalat-vb=12 write:1").is_err());
        m.take_line("@perftest.rdmalat-vb= 64 2000 1 2 3 4 5 6 7")
            .unwrap();
        assert!(m.take_line("@syscalls.rdmalat-vb=x").is_err());
        assert!(m.take_line("@syscalls.rdmalat-vb=12 write").is_err());
        m.take_line("@syscalls.rdmalat-vb=12").unwrap();
    }
}
