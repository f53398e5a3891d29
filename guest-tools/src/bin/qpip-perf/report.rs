//! The results: a table that says what was measured, or one JSON object.

use crate::counters::Counters;
use crate::proto::Row;
use crate::Args;

/// The `q`-quantile of sorted `v` (nearest rank), in microseconds.
fn pct(v: &[u64], q: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    Some(v[i] as f64 / 1000.0)
}

/// Per-row figures derived from the raw measurements.
struct Figures {
    p50: Option<f64>,
    p90: Option<f64>,
    p99: Option<f64>,
    max: Option<f64>,
    /// Megabytes (10^6) per second received by the server.
    mb_s: f64,
    msgs_s: f64,
    client_cpu_us: Option<f64>,
    server_cpu_us: Option<f64>,
    /// Each guest's whole busy time over the measured interval per message (latency: per
    /// round trip), both divided by the client's count, and their sum.
    guest_cpu_us: Option<f64>,
    server_guest_cpu_us: Option<f64>,
    both_guests_cpu_us: Option<f64>,
    loss: f64,
}

fn figures(r: &Row) -> Figures {
    let secs = r.elapsed.as_secs_f64().max(1e-9);
    let per = |ns: u64, n: u64| (n > 0).then(|| ns as f64 / n as f64 / 1000.0);
    let sent_msgs = r.msgs + r.lost;
    let guest = |us: Option<u64>| per(us? * 1000, r.msgs);
    let (gc, gs) = (guest(r.client_busy_us), guest(r.server_busy_us));
    Figures {
        p50: pct(&r.rtt_ns, 0.50),
        p90: pct(&r.rtt_ns, 0.90),
        p99: pct(&r.rtt_ns, 0.99),
        max: r.rtt_ns.last().map(|x| *x as f64 / 1000.0),
        mb_s: r.bytes_received as f64 / secs / 1e6,
        msgs_s: r.msgs_received as f64 / secs,
        client_cpu_us: per(r.client_cpu_ns, r.msgs),
        server_cpu_us: per(r.server_cpu_ns, r.server_msgs),
        guest_cpu_us: gc,
        server_guest_cpu_us: gs,
        both_guests_cpu_us: gc.zip(gs).map(|(c, s)| c + s),
        loss: if r.test == "bandwidth" && sent_msgs > 0 {
            1.0 - (r.msgs_received as f64 / sent_msgs as f64).min(1.0)
        } else if sent_msgs > 0 {
            r.lost as f64 / sent_msgs as f64
        } else {
            0.0
        },
    }
}

pub fn print(a: &Args, rows: &[Row]) {
    if a.json {
        println!("{}", json(a, rows));
    } else {
        print!("{}", table(rows, a.sockets));
    }
}

fn opt(v: Option<f64>, prec: usize) -> String {
    v.map(|x| format!("{x:.prec$}"))
        .unwrap_or_else(|| "-".into())
}

/// The table of `rows`, and their counters per message under it (`sockets`: those of a
/// kernel-socket test).
fn table(rows: &[Row], sockets: bool) -> String {
    let mut s = String::new();
    s += "latency: round-trip time of one message echoed by the server (µs, percentiles of the measured round trips)\n";
    s += "bandwidth: messages sent back to back; MB/s (10^6 bytes) and msg/s the server received, over the time until its report\n";
    s += "cpu: process CPU time (user+system, getrusage) per message (latency: per round trip), client and server\n";
    s += "guest: each guest's whole busy time (/proc/stat: user, nice, system, irq, softirq) over the measured interval, per message\n";
    s += &format!(
        "{:<9} {:<4} {:>7} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>6} {:>10} {:>10} {:>10} {:>10}\n",
        "test",
        "net",
        "size",
        "msgs",
        "p50 µs",
        "p90 µs",
        "p99 µs",
        "max µs",
        "MB/s",
        "msg/s",
        "loss%",
        "cpu µs cl",
        "cpu µs sv",
        "guest µs cl",
        "guest µs sv"
    );
    for r in rows {
        let f = figures(r);
        let lat = r.test == "latency";
        s += &format!(
            "{:<9} {:<4} {:>7} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>6.2} {:>10} {:>10} {:>10} {:>10}\n",
            r.test,
            r.transport,
            r.size,
            r.msgs,
            opt(f.p50, 1),
            opt(f.p90, 1),
            opt(f.p99, 1),
            opt(f.max, 1),
            if lat {
                "-".into()
            } else {
                format!("{:.2}", f.mb_s)
            },
            if lat {
                format!("{:.0}", r.msgs as f64 / r.elapsed.as_secs_f64().max(1e-9))
            } else {
                format!("{:.0}", f.msgs_s)
            },
            f.loss * 100.0,
            opt(f.client_cpu_us, 2),
            opt(f.server_cpu_us, 2),
            opt(f.guest_cpu_us, 1),
            opt(f.server_guest_cpu_us, 1),
        );
    }
    if rows.iter().any(|r| r.client_counters.is_some()) {
        s += &if sockets {
            counter_table(rows, &SOCKETS_PER_MSG, SOCKETS_LEGEND)
        } else {
            counter_table(rows, &PER_MSG, PER_MSG_LEGEND)
        };
    }
    s
}

/// What the counters of a QP test under the table are.
const PER_MSG_LEGEND: &str = concat!(
    "per message (latency: per round trip), client/server: kicks (doorbells that woke the device),\n",
    "waits (blocking CQ waits), intr (the device's CQ interrupts), sleeps (its engine's), segments/datagrams sent\n",
);
/// The counters the table of a QP test shows per message, as (column, counter).
const PER_MSG: [(&str, &str); 6] = [
    ("kicks", "kicks"),
    ("waits", "waits"),
    ("intr", "interrupts"),
    ("sleeps", "sleeps"),
    ("segs out", "tcp_segs_out"),
    ("dgrams out", "udp_tx"),
];

/// What the counters of a kernel-socket test are.
const SOCKETS_LEGEND: &str = concat!(
    "per message (latency: per round trip), client/server: nic intr (interrupts of the NIC that carries the test),\n",
    "segments/datagrams sent (the whole guest's)\n",
);
/// The counters the table of a kernel-socket test shows per message.
const SOCKETS_PER_MSG: [(&str, &str); 3] = [
    ("nic intr", "nic_irqs"),
    ("segs out", "tcp_segs_out"),
    ("dgrams out", "udp_tx"),
];

/// `x` per message, or `-` if not counted.
fn per(c: Option<&Counters>, name: &str, msgs: u64) -> String {
    match c.and_then(|c| c.get(name)) {
        Some(v) if msgs > 0 => {
            let x = v as f64 / msgs as f64;
            format!("{x:.0$}", if x >= 100.0 { 0 } else { 2 })
        }
        _ => "-".into(),
    }
}

/// The rows' `columns` of counters per message (latency: per round trip),
/// client/server, under `legend`.
fn counter_table(rows: &[Row], columns: &[(&str, &str)], legend: &str) -> String {
    let mut s = legend.to_string();
    // Indented, so that a row is not taken for one of the table above.
    s += &format!("  {:<9} {:<4} {:>7}", "test", "net", "size");
    for (col, _) in columns {
        s += &format!(" {col:>13}");
    }
    s += "\n";
    for r in rows.iter().filter(|r| r.client_counters.is_some()) {
        s += &format!("  {:<9} {:<4} {:>7}", r.test, r.transport, r.size);
        for (_, name) in columns {
            let pair = format!(
                "{}/{}",
                per(r.client_counters.as_ref(), name, r.msgs),
                per(r.server_counters.as_ref(), name, r.msgs)
            );
            s += &format!(" {pair:>13}");
        }
        s += "\n";
    }
    s
}

fn jnum(v: Option<f64>) -> String {
    match v {
        Some(x) if x.is_finite() => format!("{x:.3}"),
        _ => "null".into(),
    }
}

fn juint(v: Option<u64>) -> String {
    v.map_or("null".into(), |x| x.to_string())
}

fn counters_json(c: &Option<Counters>) -> String {
    c.as_ref().map_or("null".into(), Counters::json)
}

/// Per message sent (latency: per round trip), the same divisor for both sides.
fn per_msg_json(c: &Option<Counters>, msgs: u64) -> String {
    c.as_ref().map_or("null".into(), |c| c.json_per(msgs))
}

fn json(a: &Args, rows: &[Row]) -> String {
    let items: Vec<String> = rows
        .iter()
        .map(|r| {
            let f = figures(r);
            format!(
                concat!(
                    "{{\"test\":\"{}\",\"transport\":\"{}\",\"size\":{},\"msgs\":{},\"lost\":{},",
                    "\"elapsed_s\":{:.6},\"bytes_sent\":{},\"bytes_received\":{},\"msgs_received\":{},",
                    "\"rtt_us\":{{\"p50\":{},\"p90\":{},\"p99\":{},\"max\":{}}},",
                    "\"mb_per_s\":{},\"msgs_per_s\":{},\"loss\":{:.6},",
                    "\"cpu_us_per_msg\":{{\"client\":{},\"server\":{}}},",
                    "\"cpu_ns\":{{\"client\":{},\"server\":{}}},\"server_msgs\":{},",
                    "\"guest_cpu_us\":{},\"server_guest_cpu_us\":{},\"both_guests_cpu_us\":{},",
                    "\"guest_busy_us\":{{\"client\":{},\"server\":{}}},",
                    "\"counters\":{{\"client\":{},\"server\":{}}},",
                    "\"per_msg\":{{\"client\":{},\"server\":{}}}}}"
                ),
                r.test,
                r.transport,
                r.size,
                r.msgs,
                r.lost,
                r.elapsed.as_secs_f64(),
                r.bytes_sent,
                r.bytes_received,
                r.msgs_received,
                jnum(f.p50),
                jnum(f.p90),
                jnum(f.p99),
                jnum(f.max),
                jnum((r.test == "bandwidth").then_some(f.mb_s)),
                jnum(Some(if r.test == "latency" {
                    r.msgs as f64 / r.elapsed.as_secs_f64().max(1e-9)
                } else {
                    f.msgs_s
                })),
                f.loss,
                jnum(f.client_cpu_us),
                jnum(f.server_cpu_us),
                r.client_cpu_ns,
                r.server_cpu_ns,
                r.server_msgs,
                jnum(f.guest_cpu_us),
                jnum(f.server_guest_cpu_us),
                jnum(f.both_guests_cpu_us),
                juint(r.client_busy_us),
                juint(r.server_busy_us),
                counters_json(&r.client_counters),
                counters_json(&r.server_counters),
                per_msg_json(&r.client_counters, r.msgs),
                per_msg_json(&r.server_counters, r.msgs),
            )
        })
        .collect();
    format!(
        "{{\"tool\":\"qpip-perf\",\"net\":\"{}\",\"server\":\"{}\",\"port\":{},\"iters\":{},\"depth\":{},\"copy\":{},\"results\":[{}]}}",
        if a.sockets { "sockets" } else { "qpip" },
        a.addr.as_deref().unwrap_or_default().replace(['"', '\\'], ""),
        a.port,
        a.iters,
        if a.sockets { "null".into() } else { a.depth.to_string() },
        !a.sockets && a.copy,
        items.join(",")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn guest_wide_cpu_is_per_message_of_the_client_on_both_sides() {
        let r = Row {
            transport: "tcp",
            test: "bandwidth",
            size: 65536,
            msgs: 400,
            elapsed: Duration::from_secs(2),
            client_busy_us: Some(1_000_000),
            server_busy_us: Some(600_000),
            // The server's own count of reads does not divide its busy time.
            server_msgs: 1000,
            ..Row::default()
        };
        let f = figures(&r);
        assert_eq!(f.guest_cpu_us, Some(2500.0));
        assert_eq!(f.server_guest_cpu_us, Some(1500.0));
        assert_eq!(f.both_guests_cpu_us, Some(4000.0));
        let a = crate::parse_args(["::1".to_string()].into_iter())
            .ok()
            .unwrap();
        let j = json(&a, std::slice::from_ref(&r));
        assert!(
            j.contains(concat!(
                "\"guest_cpu_us\":2500.000,\"server_guest_cpu_us\":1500.000,",
                "\"both_guests_cpu_us\":4000.000,",
                "\"guest_busy_us\":{\"client\":1000000,\"server\":600000}"
            )),
            "{j}"
        );
        // A server that did not report it (older, or without /proc/stat): no sum.
        let old = Row {
            server_busy_us: None,
            ..r
        };
        let f = figures(&old);
        assert_eq!((f.server_guest_cpu_us, f.both_guests_cpu_us), (None, None));
        let j = json(&a, &[old]);
        assert!(
            j.contains("\"server_guest_cpu_us\":null,\"both_guests_cpu_us\":null"),
            "{j}"
        );
        assert!(
            j.contains("\"guest_busy_us\":{\"client\":1000000,\"server\":null}"),
            "{j}"
        );
        assert!(table(&[], false).contains("guest µs cl"));
    }
}
