//! Report lines and measurements the unit tests of the results share.

use super::report::Measurements;
use serde_json::{json, Value};

pub fn perf(rows: &str) -> String {
    format!("{{\"tool\":\"qpip-perf\",\"results\":[{rows}]}}")
}

pub fn lat(p50: f64, cl: f64, sv: f64) -> String {
    format!(
        "{{\"test\":\"latency\",\"size\":1,\"msgs\":100,\"rtt_us\":{{\"p50\":{p50},\"p90\":1,\"p99\":2}},\"cpu_us_per_msg\":{{\"client\":{cl},\"server\":{sv}}}}}"
    )
}

pub fn bw(size: u64, mbs: f64) -> String {
    format!(
        "{{\"test\":\"bandwidth\",\"size\":{size},\"msgs\":1000,\"mb_per_s\":{mbs},\"cpu_us_per_msg\":{{\"client\":10,\"server\":5}}}}"
    )
}

/// A QP row: `row` with counters per message, client and server (`k` kicks on the
/// client, half as many on the server; segments: `k` TCP, `10·k` UDP).
pub fn qp(row: String, k: f64) -> String {
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
pub fn round_lines(sfx: &str, k: f64) -> Vec<String> {
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

/// The report lines a bench with the qpip netdev and QPs over IPv4 adds to one round's
/// [`round_lines`] (the same `sfx` and `k`): sockets over the netdev `n` times better than
/// over virtio-net, QPs over IPv4 taking `v4` times the time (ping-pongs) or moving `1/v4`
/// times the bytes (bandwidth) of QPs over IPv6.
pub fn netdev_round_lines(sfx: &str, k: f64, n: f64, v4: f64) -> Vec<String> {
    vec![
        format!("@perf.udp-nd{sfx}={}", perf(&lat(200.0 / n, 30.0, 20.0))),
        format!("@perf.tcp-nd{sfx}={}", perf(&lat(300.0 / n, 30.0, 20.0))),
        format!(
            "@perf.bw-nd{sfx}={}",
            perf(&[bw(1024, 10.0 * n), bw(65536, 20.0 * n)].join(","))
        ),
        format!("@bulk.nd{sfx}=8388608 30.00 {:.2}", 30.0 + 2.0 / n),
        format!(
            "@perf.udp-qp4{sfx}={}",
            perf(&qp(lat(100.0 * k * v4, 3.0, 2.0), k))
        ),
        format!(
            "@perf.tcp-qp4{sfx}={}",
            perf(&qp(lat(150.0 * k * v4, 3.0, 2.0), k))
        ),
        format!(
            "@perf.bw-qp4{sfx}={}",
            perf(
                &[
                    qp(bw(1024, 5.0 * k / v4), k),
                    qp(bw(65536, 40.0 * k / v4), k)
                ]
                .join(",")
            )
        ),
    ]
}

/// Three rounds of a bench with the qpip netdev and QPs over IPv4: [`round_lines`] and
/// [`netdev_round_lines`] with the QP figures scaled by 1, 1.2 and 0.9, the netdev 1.5,
/// 1.25 and 2 times better than virtio-net, IPv4 within a few percent of IPv6.
pub fn netdev_rounds() -> Measurements {
    let mut m = Measurements::with_rounds(3);
    for (i, (k, n, v4)) in [(1.0, 1.5, 1.02), (1.2, 1.25, 0.97), (0.9, 2.0, 1.0)]
        .into_iter()
        .enumerate()
    {
        let sfx = format!(".{}", i + 1);
        for line in round_lines(&sfx, k)
            .into_iter()
            .chain(netdev_round_lines(&sfx, k, n, v4))
        {
            m.take_line(&line).unwrap();
        }
    }
    m
}

/// The CPU marks of window `name`: guests a and b busy `ta` and `tb` ticks (user, nice,
/// irq and softirq; idle, iowait and steal grow too), QEMU of a and b `qemu` seconds
/// together, their qpipd `qpipd`.
pub fn cpu_lines(name: &str, ta: u64, tb: u64, qemu: f64, qpipd: f64) -> [String; 2] {
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
pub fn overhead_line(sfx: &str) -> String {
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
pub fn overhead_spin_line(sfx: &str) -> String {
    overhead_line(sfx)
        .replace("\"size\":64,", "\"size\":64,\"spin_us\":50,")
        .replace("\"quiet_ns\":1500", "\"quiet_ns\":1000")
        .replace(":30000,", ":25000,")
        .replace("\"quiet_ns\":3000", "\"quiet_ns\":2000")
        .replace(":45000,", ":40000,")
}

/// The bench's extra reports of one round: CPU windows of the ping-pongs and of the
/// 1 KiB bandwidth test, and qpip-overhead.
pub fn whole_system_lines(sfx: &str) -> Vec<String> {
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
pub fn measure_guests(m: &mut Measurements) {
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

/// `qpip-perf --sockets`' counters per message in every row over virtio-net (`*-sk`) and,
/// if `netdev`, over the qpip netdev (`*-nd`): in round r, NIC interrupts `2·r` (netdev:
/// `r`) on the client, half as many on the server; TCP segments three times, UDP
/// datagrams one and a half times as many.
pub fn count_sockets(m: &mut Measurements, netdev: bool) {
    for (i, r) in m.rounds.iter_mut().enumerate() {
        let k = (i + 1) as f64;
        for (name, rows) in r.perf.iter_mut() {
            let base = match name.rsplit('-').next() {
                Some("sk") => 2.0,
                Some("nd") if netdev => 1.0,
                _ => continue,
            };
            let side =
                |x: f64| json!({ "nic_irqs": x, "tcp_segs_out": 3.0 * x, "udp_tx": 1.5 * x });
            for row in rows.iter_mut() {
                row["per_msg"] =
                    json!({ "client": side(base * k), "server": side(base * k / 2.0) });
            }
        }
    }
}

pub fn sample() -> Measurements {
    let mut m = Measurements::default();
    for line in round_lines("", 1.0) {
        m.take_line(&line).unwrap();
    }
    m
}

/// `n` rounds; round r's QP figures are scaled by `scale[r-1]`.
pub fn rounds(scale: &[f64]) -> Measurements {
    let mut m = Measurements::with_rounds(scale.len());
    for (i, k) in scale.iter().enumerate() {
        for line in round_lines(&format!(".{}", i + 1), *k) {
            m.take_line(&line).unwrap();
        }
    }
    m
}

pub fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9 * b.abs().max(1.0)
}

/// The report lines guest a printed for the rounds of a saved bench result (its
/// `rounds`), named by round unless `one` (the names of a run of one round).
pub fn replayed(saved: &Value, one: bool) -> Vec<String> {
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
pub fn same_as_saved(name: &str, got: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/demo/results/testdata")
        .join(name);
    if std::env::var_os("QPIP_BLESS").is_some() {
        std::fs::write(&path, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        got == want,
        "{} differs; what it renders now:\n{got}",
        path.display()
    );
}

/// A whole results JSON of the bench as it writes it: the run's facts and the layouts'
/// rows (`testdata/bench-facts.json`) with the rounds of `testdata/bench-rounds.json`.
pub fn saved_results() -> Value {
    let mut j: Value = serde_json::from_str(include_str!("testdata/bench-facts.json")).unwrap();
    let rounds: Value = serde_json::from_str(include_str!("testdata/bench-rounds.json")).unwrap();
    j["rounds"] = rounds["rounds"].clone();
    j
}
