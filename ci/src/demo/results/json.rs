//! The comparison and the raw measurements as one JSON value (the results' `.json`).

use super::lines::{Counter, Line};
use super::report::{CpuMark, Measurements, Round};
use super::spread::{spread, Better};
use serde_json::{json, Value};

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

/// Counters per message: each one's guest a and guest b, median and spread.
fn per_msg_json(counters: &[Counter]) -> Value {
    Value::Object(
        counters
            .iter()
            .map(|x| {
                let v = json!({ "a": spread_json(&x.a), "b": spread_json(&x.b) });
                (x.name.to_string(), v)
            })
            .collect(),
    )
}

/// A comparison line's JSON `v` with the columns runs before them lacked, where the line
/// has them: sockets over the qpip netdev (`netdev`, and `netdev_gain` over virtio-net's
/// sockets, > 1 favouring the netdev) and QPs over IPv4 (`qp_ipv4`, and
/// `qp_ipv4_vs_ipv6`, > 1 favouring IPv4), and the kernel sockets' counters per message
/// (`sockets_per_msg`: `virtio_net` and, with them, `netdev`, as `qp_per_msg` is). A line
/// without them is written as before.
fn with_new_columns(l: &Line, mut v: Value) -> Value {
    if l.has_netdev() {
        v["netdev"] = spread_json(&l.netdev);
        v["netdev_gain"] = json!(l.netdev_gain());
        v["netdev_gain_per_round"] = spread_json(&l.netdev_round_gains());
    }
    if let Some(c) = &l.sockets_counted {
        let mut k = json!({ "virtio_net": per_msg_json(&c.virtio) });
        if c.has_netdev() {
            k["netdev"] = per_msg_json(&c.netdev);
        }
        v["sockets_per_msg"] = k;
    }
    if let Some(g) = &l.goal {
        v["goal"] = json!(g.min);
        v["goal_met"] = json!(l.gain().map(|x| x >= g.min));
        if super::verbs::missed(l).is_some() {
            v["why_missed"] = json!(g.why);
        }
    }
    if let Some(s) = &l.syscalls {
        v["syscalls_per_op"] = json!({
            "program": s.program,
            "qpip0": spread_json(&s.qpip0),
            s.other: spread_json(&s.others),
            "qpip0_loop": s.qpip0_loop,
            format!("{}_loop", s.other): s.others_loop,
        });
    }
    if l.has_qp4() {
        v["qp_ipv4"] = spread_json(&l.qp4);
        v["qp_ipv4_vs_ipv6"] = json!(l.ipv4_ratio());
        v["qp_ipv4_vs_ipv6_per_round"] = spread_json(&l.ipv4_round_ratios());
    }
    v
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
        "comparison": lines.iter().map(|l| with_new_columns(l, json!({
            "what": l.what,
            "unit": l.unit,
            "better": match l.better { Better::Lower => "lower", Better::Higher => "higher" },
            "qp": spread_json(&l.qp),
            "sockets": spread_json(&l.sockets),
            "qp_gain": l.gain(),
            "qp_gain_per_round": spread_json(&l.round_gains()),
            "qp_per_msg": l.counted.as_ref().map(|c| per_msg_json(&c.counters)),
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
        }))).collect::<Vec<_>>(),
        "rounds": m.rounds.iter().enumerate().map(round).collect::<Vec<_>>(),
    })
}
