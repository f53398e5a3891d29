//! The block under the bench's table: the host's CPU (QEMU and qpipd) per message.

use super::format::{
    block_indent, block_row, centre, column_widths, fmt_count, fmt_gain, framed, rounds_said,
};
use super::lines::{HostCpu, Line};
use super::spread::spread;

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

pub(super) fn host_title(lines: &[Line]) -> String {
    let of = rounds_said(lines);
    format!(
        "Host CPU per message (ping-pong: per round trip), µs, {of}: the QEMU and qpipd \
         processes of guests a and b together, from just before each qpip-perf run to just \
         after it (its start-up, connection and buffer registration included). QEMU's \
         includes the guests' emulated CPUs; over sockets qpipd only idles. host gain: the \
         sockets' sum over the QPs'."
    )
}

/// The host CPU block under the table (empty if no line has it).
pub(super) fn host_text(lines: &[Line]) -> String {
    let hosted: Vec<&HostCpu> = lines.iter().filter_map(|l| l.host_cpu.as_ref()).collect();
    if hosted.is_empty() {
        return String::new();
    }
    let rows: Vec<Vec<String>> = hosted.iter().map(|h| host_cells(h)).collect();
    let sub: Vec<String> = std::iter::once(String::new())
        .chain(HOST_COLUMNS.iter().map(|c| c.1.to_string()))
        .chain(["gain".to_string()])
        .collect();
    let mut w = column_widths(&rows.iter().chain([&sub]).collect::<Vec<_>>());
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
    let indent = block_indent(lines);
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
    block += &block_row(indent, &w, &sub);
    for r in &rows {
        block += &block_row(indent, &w, r);
    }
    framed(&host_title(lines), &block, &[])
}

/// The same block as a Markdown table.
pub(super) fn host_markdown(lines: &[Line]) -> String {
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

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::super::table::notes;
    use super::super::{json_value, lines, markdown_table, text_table};
    use super::*;

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
}
