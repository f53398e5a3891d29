//! The comparison as a table: plain text for the terminal, Markdown for the files.

use super::counters::{
    counter_markdown, counter_text, sockets_counter_markdown, sockets_counter_text,
};
use super::format::{
    centre, fmt, fmt_gain, fmt_gain_range, fmt_median, fmt_range, fmt_ratio_range, pad, wrap,
};
use super::host_cpu::{host_markdown, host_text};
use super::ipv4::{ipv4_markdown, ipv4_text};
use super::lines::{any_netdev, rounds_of, Line};

/// The cells of a line in a table of one round: label, each side's figure with its unit,
/// the gain; with `netdev`, the sockets over the qpip netdev after those over virtio-net
/// and their gain last.
fn one_round_cells(l: &Line, netdev: bool) -> Vec<String> {
    let mut v = vec![
        l.what.clone(),
        fmt(l.qp().map(|s| s.median), l.unit),
        fmt(l.sockets().map(|s| s.median), l.unit),
    ];
    if netdev {
        v.push(fmt(l.netdev().map(|s| s.median), l.unit));
    }
    v.push(fmt_gain(l.gain()));
    if netdev {
        v.push(fmt_gain(l.netdev_gain()));
    }
    v
}

/// The cells of a line in a table of several rounds: label with unit, QP median and
/// min–max, sockets median and min–max, gain of the medians, range of the round gains;
/// with `netdev`, the netdev's median and min–max after the sockets' and its gain over
/// virtio-net last.
pub(super) fn round_cells(l: &Line, netdev: bool) -> Vec<String> {
    let (q, s, n) = (l.qp(), l.sockets(), l.netdev());
    let mut v = vec![
        format!("{}, {}", l.what, l.unit),
        fmt_median(q),
        fmt_range(q),
        fmt_median(s),
        fmt_range(s),
    ];
    if netdev {
        v.extend([fmt_median(n), fmt_range(n)]);
    }
    v.extend([fmt_gain(l.gain()), fmt_gain_range(l)]);
    if netdev {
        v.extend([
            fmt_gain(l.netdev_gain()),
            fmt_ratio_range(&l.netdev_round_gains()),
        ]);
    }
    v
}

/// What the netdev column is, when the table has it.
const NETDEV_LEGEND: &str = "netdev: kernel sockets over the qpip netdev (the guest \
driver's network interface on the qpip device), to the peer's qpip device address, beside \
kernel sockets over virtio-net: the same guest kernel TCP/IP on the offloading adapter. \
netdev gain: how many times better than over virtio-net (> 1 favours the netdev).";

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
    if any_netdev(lines) {
        v.push(format!(
            "{NETDEV_LEGEND} Its ratio and min–max as the QP gain's."
        ));
    }
    if lines.iter().any(|l| !l.complete()) {
        v.push(
            "* a round lacks this figure on one side: its medians and ranges are of the rounds \
             that have it."
                .to_string(),
        );
    }
    v
}

/// The comparison as a plain-text table for the terminal: one column per side for a
/// single round (the demo), median and min–max per side and the gains for several; then
/// the QP side's and the kernel sockets' counters per message, if the lines have them
/// (the bench).
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
    t += &sockets_counter_text(lines);
    t += &host_text(lines);
    t += &ipv4_text(lines);
    t
}

/// What the whole-system and host overhead lines are, if the table has them.
pub(super) fn notes(lines: &[Line]) -> Vec<String> {
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
    let perftest = lines.iter().any(Line::is_perftest);
    if perftest && lines.iter().any(|l| l.what.starts_with("RDMA ")) {
        // Beside perftest on qpip0's lines only qpip's own ping-pong on tripwires is left.
        v.push(
            "RDMA Write latency (qpip on tripwires vs siw spinning): qpip's own library \
             (qpip-perf --rdma write --tripwire), each end asleep on a tripwire on the byte \
             the peer writes, woken by the device's interrupt, against ib_write_lat on siw, \
             both ends spinning: what sleeping instead of spinning does on this host."
                .to_string(),
        );
    } else if lines.iter().any(|l| l.what.starts_with("RDMA ")) {
        v.push(
            "RDMA (qpip vs siw): on these lines the QP column is qpip's iWARP QPs \
             (qpip-perf --rdma) and the sockets column the guest kernel's soft-iWARP, siw \
             over virtio-net (perftest's ib_write_lat, ib_write_bw, ib_read_lat and \
             ib_read_bw, -R); the same two guests, the same tests. Latency: a ping-pong of RDMA Writes, each end spinning \
             on the last byte of the buffer the other writes into, the median round trip \
             (perftest's half round trip doubled); \"on tripwires\": qpip's ends sleep \
             instead, each on a tripwire on that byte, woken by the device's interrupt \
             (qpip-perf --tripwire) — spinning guests keep the host's CPUs from qpipd, \
             which moves every Write, while siw runs inside the guest that spins. Bandwidth: Writes back to back, 64 in \
             flight, from the first post to the last completion (perftest's MiB/s in 10^6 \
             bytes). RDMA Read: one Read at a time from post to completion, qpip asleep \
             until the completion's interrupt (qpip-perf --rdma read), siw polling its CQ \
             (ib_read_lat, whole round trips); bandwidth: Reads back to back, 16 \
             outstanding on both (the ORD; ib_read_bw -o 16). (qpip vs rxe): the same \
             lines with the sockets column the guest kernel's soft-RoCE, rxe over the same \
             virtio-net NICs (RoCEv2 over UDP), the same perftest tools with the device and \
             its GID named (-d rxe0 -x) instead of -R, in the same run: a second software \
             anchor, its ratio and min–max from the same rounds."
                .to_string(),
        );
    }
    v.extend(super::verbs::notes(lines));
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

/// The head of a table of one round.
fn one_round_head(netdev: bool) -> Vec<&'static str> {
    if netdev {
        vec![
            "",
            "QP (qpip device)",
            "sockets (virtio-net)",
            "sockets (qpip netdev)",
            "QP gain",
            "netdev gain",
        ]
    } else {
        vec!["", "QP (qpip device)", "sockets (virtio-net)", "QP gain"]
    }
}

/// The table of one round: each side's figure with its unit, and the gain.
fn text_table_one(lines: &[Line]) -> String {
    let netdev = any_netdev(lines);
    let head = one_round_head(netdev);
    let rows: Vec<Vec<String>> = lines.iter().map(|l| one_round_cells(l, netdev)).collect();
    let width = |i: usize| {
        rows.iter()
            .map(|r| r[i].chars().count())
            .chain([head[i].chars().count()])
            .max()
            .unwrap_or(0)
    };
    let w: Vec<usize> = (0..head.len()).map(width).collect();
    let mut t = String::new();
    let line = |cells: &[&str]| {
        let mut s = format!(" {}", pad(cells[0], w[0], false));
        for (c, w) in cells.iter().zip(&w).skip(1) {
            s += &format!("  {}", pad(c, *w, true));
        }
        format!(" {s}\n")
    };
    t += &line(&head);
    for r in &rows {
        t += &line(&r.iter().map(String::as_str).collect::<Vec<_>>());
    }
    if netdev {
        t += &wrap(
            NETDEV_LEGEND,
            t.lines()
                .map(|l| l.chars().count())
                .max()
                .unwrap_or(60)
                .clamp(60, 100),
        );
    }
    t
}

/// The table of several rounds, kept within 100 columns for the bench's rows: units in
/// the labels, a two-line head (the side, then median and min–max; for the gain the ratio
/// of the medians and min–max of the rounds' ratios).
fn text_table_rounds(lines: &[Line]) -> String {
    let netdev = any_netdev(lines);
    let groups: &[&str] = if netdev {
        &["QPs", "sockets", "netdev", "QP gain", "netdev gain"]
    } else {
        &["QPs", "sockets", "QP gain"]
    };
    let mut head = vec![""];
    for g in groups {
        head.extend(if g.ends_with("gain") {
            ["ratio", "min–max"]
        } else {
            ["median", "min–max"]
        });
    }
    let rows: Vec<Vec<String>> = lines.iter().map(|l| round_cells(l, netdev)).collect();
    let mut w: Vec<usize> = (0..head.len())
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
    let line = |c: &[&str]| {
        let mut s = pad(c[0], w[0], false);
        for g in 0..groups.len() {
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
    t += &line(&head);
    for r in &rows {
        t += &line(&r.iter().map(String::as_str).collect::<Vec<_>>());
    }
    let width = t.lines().map(|l| l.chars().count()).max().unwrap_or(0);
    for l in legend(lines) {
        t += &wrap(&l, width.max(60));
    }
    t
}

/// The comparison as a Markdown table: the same columns as the terminal's.
pub fn markdown_table(lines: &[Line]) -> String {
    let mut t = String::new();
    let netdev = any_netdev(lines);
    if rounds_of(lines) > 1 && netdev {
        t += "| | QPs: median | QPs: min–max | sockets: median | sockets: min–max \
              | netdev: median | netdev: min–max | QP gain: ratio | QP gain: min–max \
              | netdev gain: ratio | netdev gain: min–max |\n\
              | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
        for l in lines {
            t += &format!("| {} |\n", round_cells(l, true).join(" | "));
        }
        t += "\n";
        t += &legend(lines).join(" ");
        t += "\n";
    } else if rounds_of(lines) > 1 {
        t += "| | QPs: median | QPs: min–max | sockets: median | sockets: min–max \
              | QP gain: ratio | QP gain: min–max |\n\
              | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n";
        for l in lines {
            t += &format!("| {} |\n", round_cells(l, false).join(" | "));
        }
        t += "\n";
        t += &legend(lines).join(" ");
        t += "\n";
    } else {
        let head = one_round_head(netdev);
        t += &format!(
            "| {} |\n| --- |{}\n",
            head.join(" | ").trim_start(),
            " ---: |".repeat(head.len() - 1)
        );
        for l in lines {
            t += &format!("| {} |\n", one_round_cells(l, netdev).join(" | "));
        }
        if netdev {
            t += &format!("\n{NETDEV_LEGEND}\n");
        }
    }
    for n in notes(lines) {
        t += &format!("\n{n}\n");
    }
    t += &counter_markdown(lines);
    t += &sockets_counter_markdown(lines);
    t += &host_markdown(lines);
    t += &ipv4_markdown(lines);
    t
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::super::format::fmt_gain;
    use super::super::{json_value, lines, Measurements};
    use super::*;
    use serde_json::{json, Value};

    #[test]
    fn a_saved_bench_result_renders_as_it_did() {
        let saved: Value =
            serde_json::from_str(include_str!("testdata/bench-rounds.json")).unwrap();
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
        // One line per comparison line: the same JSON value, so the same pretty output.
        let comparison: Vec<String> = j["comparison"]
            .as_array()
            .unwrap()
            .iter()
            .map(Value::to_string)
            .collect();
        same_as_saved("bench-comparison.jsonl", &(comparison.join("\n") + "\n"));
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
    fn the_netdev_column_and_the_ipv4_block_show_when_the_bench_has_them() {
        let m = netdev_rounds();
        let l = lines(&m, true);
        let udp = &l[0];
        assert_eq!(udp.what, "UDP ping-pong, round trip p50");
        // Sockets over the netdev: 200/1.5, 200/1.25, 200/2 µs against 200 µs.
        let nd = udp.netdev().unwrap();
        assert!(
            close(nd.median, 200.0 / 1.5) && close(nd.min, 100.0),
            "{nd:?}"
        );
        assert!(close(udp.netdev_gain().unwrap(), 1.5));
        let g = udp.netdev_round_gains();
        assert!(
            close(g[1].unwrap(), 1.25) && close(g[2].unwrap(), 2.0),
            "{g:?}"
        );
        // QPs over IPv4 against IPv6, round by round: 1/1.02, 1/0.97, 1.
        let r = udp.ipv4_round_ratios();
        assert!(close(r[0].unwrap(), 1.0 / 1.02) && close(r[1].unwrap(), 1.0 / 0.97));
        let bulk = l.iter().find(|l| l.what.starts_with("bulk")).unwrap();
        // Over 1.33 s (the guest's uptime has 10 ms steps) against 2 s.
        assert!((bulk.netdev_gain().unwrap() - 1.5).abs() < 0.01, "{bulk:?}");
        assert!(!bulk.has_qp4());
        // The terminal: a netdev column and its gain beside the QP gain, the IPv4 block.
        let t = text_table(&l);
        let head: Vec<&str> = t.lines().take(2).collect();
        for g in ["QPs", "sockets", "netdev", "QP gain", "netdev gain"] {
            assert!(head[0].contains(g), "{t}");
        }
        let row = t
            .lines()
            .find(|r| r.starts_with("UDP ping-pong, round trip p50, µs"))
            .unwrap();
        let cells: Vec<&str> = row
            .trim_start_matches("UDP ping-pong, round trip p50, µs")
            .split_whitespace()
            .collect();
        assert_eq!(
            cells,
            [
                "100",
                "90–120",
                "200",
                "200–200",
                "133",
                "100–160",
                "2.00x",
                "1.67–2.22",
                "1.50x",
                "1.25–2.00"
            ],
            "{row}"
        );
        assert!(
            t.contains("netdev: kernel sockets over the qpip netdev"),
            "{t}"
        );
        assert!(
            t.contains("\nQPs over IPv4 vs IPv6, medians of 3 rounds"),
            "{t}"
        );
        // Its last line of 64 KiB bandwidth: IPv4's 39.2 MB/s (40/1.02) against 40.
        let v4 = t
            .lines()
            .rfind(|r| r.starts_with("TCP bandwidth, 64 KiB messages, MB/s"))
            .unwrap();
        assert_eq!(
            v4.split_whitespace().skip(6).collect::<Vec<_>>(),
            [
                "39.2",
                "36.0–49.5",
                "40.0",
                "36.0–48.0",
                "0.98x",
                "0.98–1.03"
            ],
            "{t}"
        );
        // Markdown: the same cells.
        let md = markdown_table(&l);
        assert!(md.contains("| netdev: median | netdev: min–max |"), "{md}");
        for line in &l {
            assert!(
                md.contains(&format!("| {} |", round_cells(line, true).join(" | "))),
                "{md}"
            );
        }
        assert!(md.contains("| QPs | IPv4: median |"), "{md}");
        // One round: the netdev's column and gain too.
        let mut one = Measurements::with_rounds(1);
        for line in round_lines("", 1.0)
            .into_iter()
            .chain(netdev_round_lines("", 1.0, 1.5, 1.0))
        {
            one.take_line(&line).unwrap();
        }
        let short = lines(&one, false);
        let t = text_table(&short);
        assert!(
            t.contains("sockets (qpip netdev)") && t.contains("netdev gain"),
            "{t}"
        );
        assert!(t.contains(" 1.50x"), "{t}");
        let md = markdown_table(&short);
        assert!(md.starts_with("| | QP (qpip device) | sockets (virtio-net) | sockets (qpip netdev) | QP gain | netdev gain |\n| --- | ---: | ---: | ---: | ---: | ---: |\n"), "{md}");
        // The JSON: the new figures where measured.
        let j = json_value(&m, &l);
        let c = &j["comparison"][0];
        assert!(close(c["netdev"]["median"].as_f64().unwrap(), 200.0 / 1.5));
        assert!(close(c["netdev_gain"].as_f64().unwrap(), 1.5));
        assert_eq!(
            c["netdev_gain_per_round"]["rounds"]
                .as_array()
                .unwrap()
                .len(),
            3
        );
        assert!(close(c["qp_ipv4"]["median"].as_f64().unwrap(), 102.0));
        assert!(c["qp_ipv4_vs_ipv6"].is_number());
        assert!(c["qp_ipv4_vs_ipv6_per_round"]["min"].is_number());
        let bulk = j["comparison"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["what"].as_str().unwrap().starts_with("bulk"))
            .unwrap();
        assert!(bulk["netdev_gain"].is_number() && bulk.get("qp_ipv4").is_none());
        // A run without them (an older one, the demo) shows and writes none of it.
        let old = lines(&rounds(&[1.0, 3.0, 2.0]), true);
        assert!(!text_table(&old).contains("netdev") && !markdown_table(&old).contains("IPv4"));
        let j = json_value(&rounds(&[1.0, 3.0, 2.0]), &old);
        assert!(j["comparison"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c.get("netdev").is_none() && c.get("qp_ipv4").is_none()));
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
            for cell in round_cells(line, false) {
                assert!(r.contains(&format!("| {cell} |")), "{r}: {cell}");
            }
        }
    }
}
