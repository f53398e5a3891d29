//! The blocks under the bench's table: the QP side's counters per message, then the
//! kernel sockets' (over virtio-net and over the qpip netdev).

use super::format::{block_indent, block_row, column_widths, fmt_count, framed, rounds_said};
use super::lines::{Counted, Counter, Line, SocketsCounted, COUNTERS, SOCKET_COUNTERS};
use super::spread::spread;

/// The cells of a counter: the medians of a and b over the rounds, `a/b`.
fn counter_cell(c: &Counter) -> String {
    let m = |v: &[Option<f64>]| spread(v).map(|s| s.median);
    format!("{}/{}", fmt_count(m(&c.a)), fmt_count(m(&c.b)))
}

/// What the counter block's numbers are.
fn counter_title(lines: &[Line]) -> String {
    let of = rounds_said(lines);
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

/// A row per measurement: its name, then each counter's a/b cell.
fn qp_rows(counted: &[&Counted]) -> Vec<Vec<String>> {
    counted
        .iter()
        .map(|c| {
            std::iter::once(c.what.clone())
                .chain(c.counters.iter().map(counter_cell))
                .collect()
        })
        .collect()
}

/// The block of QP counters per message under the table (empty if no line has them).
pub(super) fn counter_text(lines: &[Line]) -> String {
    let counted: Vec<&Counted> = lines.iter().filter_map(|l| l.counted.as_ref()).collect();
    if counted.is_empty() {
        return String::new();
    }
    let rows = qp_rows(&counted);
    let head: Vec<String> = std::iter::once(String::new())
        .chain(COUNTERS.iter().map(|c| c.0.to_string()))
        .collect();
    let sub: Vec<String> = std::iter::once(String::new())
        .chain(COUNTERS.iter().map(|_| "a/b".to_string()))
        .collect();
    text_block(
        lines,
        [head, sub],
        &rows,
        &counter_title(lines),
        &counter_legend(),
    )
}

/// The same block as a Markdown table.
pub(super) fn counter_markdown(lines: &[Line]) -> String {
    let counted: Vec<&Counted> = lines.iter().filter_map(|l| l.counted.as_ref()).collect();
    if counted.is_empty() {
        return String::new();
    }
    let head: Vec<String> = COUNTERS.iter().map(|c| c.0.to_string()).collect();
    let rows = qp_rows(&counted);
    markdown_block(
        &counter_title(lines),
        "QPs, per message: a / b",
        &head,
        &rows,
        &counter_legend(),
    )
}

/// The measurements with kernel-socket counters, and whether any has them over the
/// netdev (its columns are left out otherwise).
fn sockets_counted(lines: &[Line]) -> (Vec<&SocketsCounted>, bool) {
    let counted: Vec<&SocketsCounted> = lines
        .iter()
        .filter_map(|l| l.sockets_counted.as_ref())
        .collect();
    let netdev = counted.iter().any(|c| c.has_netdev());
    (counted, netdev)
}

/// The columns of the kernel-socket block: (counter, over the netdev?), each counter over
/// virtio-net and, with `netdev`, over the netdev beside it.
fn socket_columns(netdev: bool) -> Vec<(usize, bool)> {
    (0..SOCKET_COUNTERS.len())
        .flat_map(|i| [(i, false), (i, true)])
        .filter(|(_, nd)| netdev || !nd)
        .collect()
}

/// The cell of column `(i, nd)` of a measurement.
fn socket_cell(c: &SocketsCounted, (i, nd): (usize, bool)) -> String {
    counter_cell(if nd { &c.netdev[i] } else { &c.virtio[i] })
}

fn net_name(nd: bool) -> &'static str {
    if nd {
        "netdev"
    } else {
        "virtio-net"
    }
}

/// A row per measurement: its name, then the cell of each of `cols`.
fn socket_rows(counted: &[&SocketsCounted], cols: &[(usize, bool)]) -> Vec<Vec<String>> {
    counted
        .iter()
        .map(|c| {
            std::iter::once(c.what.clone())
                .chain(cols.iter().map(|col| socket_cell(c, *col)))
                .collect()
        })
        .collect()
}

/// What the kernel-socket block's numbers are.
fn sockets_title(lines: &[Line]) -> String {
    let of = rounds_said(lines);
    format!(
        "Kernel sockets per message (ping-pong: per round trip), guest a (the client) / guest b \
         (the server), {of}; over virtio-net and over the qpip netdev, each guest's NIC and \
         kernel count all they did meanwhile:"
    )
}

fn sockets_legend() -> Vec<String> {
    SOCKET_COUNTERS
        .iter()
        .map(|(col, what, ..)| format!("{col}: {what}."))
        .collect()
}

/// The block of kernel-socket counters per message, after the QP one (empty if no line
/// has them: older results).
pub(super) fn sockets_counter_text(lines: &[Line]) -> String {
    let (counted, netdev) = sockets_counted(lines);
    if counted.is_empty() {
        return String::new();
    }
    let cols = socket_columns(netdev);
    let rows = socket_rows(&counted, &cols);
    let head: Vec<String> = std::iter::once(String::new())
        .chain(cols.iter().map(|(i, _)| SOCKET_COUNTERS[*i].0.to_string()))
        .collect();
    let sub: Vec<String> = std::iter::once(String::new())
        .chain(cols.iter().map(|(_, nd)| format!("{} a/b", net_name(*nd))))
        .collect();
    text_block(
        lines,
        [head, sub],
        &rows,
        &sockets_title(lines),
        &sockets_legend(),
    )
}

/// The same block as a Markdown table.
pub(super) fn sockets_counter_markdown(lines: &[Line]) -> String {
    let (counted, netdev) = sockets_counted(lines);
    if counted.is_empty() {
        return String::new();
    }
    let cols = socket_columns(netdev);
    let head: Vec<String> = cols
        .iter()
        .map(|(i, nd)| format!("{}: {}", net_name(*nd), SOCKET_COUNTERS[*i].0))
        .collect();
    let rows = socket_rows(&counted, &cols);
    markdown_block(
        &sockets_title(lines),
        "Kernel sockets, per message: a / b",
        &head,
        &rows,
        &sockets_legend(),
    )
}

/// A counter block for the terminal: the two head rows, then `rows`, indented as the
/// table above it is, under `title` and over `legend`.
fn text_block(
    lines: &[Line],
    [head, sub]: [Vec<String>; 2],
    rows: &[Vec<String>],
    title: &str,
    legend: &[String],
) -> String {
    let w = column_widths(&rows.iter().chain([&head, &sub]).collect::<Vec<_>>());
    let indent = block_indent(lines);
    let mut block = block_row(indent, &w, &head);
    block += &block_row(indent, &w, &sub);
    for r in rows {
        block += &block_row(indent, &w, r);
    }
    framed(title, &block, legend)
}

/// The same block as a Markdown table: `corner` heads the first column, `head` the others.
fn markdown_block(
    title: &str,
    corner: &str,
    head: &[String],
    rows: &[Vec<String>],
    legend: &[String],
) -> String {
    let mut t = format!("\n{title}\n\n| {corner} |");
    for h in head {
        t += &format!(" {h} |");
    }
    t += "\n| --- |";
    t += &" ---: |".repeat(head.len());
    t += "\n";
    for r in rows {
        t += "|";
        for cell in r {
            t += &format!(" {cell} |");
        }
        t += "\n";
    }
    t += "\n";
    t += &legend.join(" ");
    t += "\n";
    t
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::super::{json_value, lines, markdown_table, text_table};
    use super::*;
    use serde_json::Value;

    /// The measurements of the fixtures that get counter rows, in order.
    const COUNTED: [&str; 4] = [
        "UDP ping-pong",
        "TCP ping-pong",
        "TCP bandwidth, 1 KiB messages",
        "TCP bandwidth, 64 KiB messages",
    ];

    #[test]
    fn the_bench_shows_the_qp_counters_per_message_under_its_table() {
        // Round k's QP client kicked k times per message: medians over 1, 3, 2 are 2.
        let m = rounds(&[1.0, 3.0, 2.0]);
        let l = lines(&m, true);
        let counted: Vec<&Counted> = l.iter().filter_map(|l| l.counted.as_ref()).collect();
        let names: Vec<&str> = counted.iter().map(|c| c.what.as_str()).collect();
        assert_eq!(names, COUNTED);
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

    /// The cells after the label of the kernel-socket block's row that starts with `what`.
    fn cells(text: &str, what: &str) -> Vec<String> {
        let block = &text[text.find("Kernel sockets per message").expect(text)..];
        let row = block
            .lines()
            .find(|r| r.trim_start().starts_with(&format!("{what}  ")))
            .unwrap_or_else(|| panic!("no row {what}: {text}"));
        row.split("  ")
            .filter(|c| !c.is_empty())
            .skip(1)
            .map(|c| c.trim().to_string())
            .collect()
    }

    #[test]
    fn the_kernel_sockets_counters_follow_the_qp_block_with_the_netdev_beside_virtio_net() {
        // Rounds 1, 2, 3: medians of round 2 (virtio-net 4 NIC interrupts per message on
        // a, 2 on b; the netdev half that).
        let mut m = netdev_rounds();
        count_sockets(&mut m, true);
        let l = lines(&m, true);
        let counted: Vec<&SocketsCounted> = l
            .iter()
            .filter_map(|l| l.sockets_counted.as_ref())
            .collect();
        let names: Vec<&str> = counted.iter().map(|c| c.what.as_str()).collect();
        assert_eq!(names, COUNTED);
        assert!(counted.iter().all(|c| c.has_netdev()));
        assert_eq!(counted[0].virtio[0].a, [Some(2.0), Some(4.0), Some(6.0)]);
        assert_eq!(counted[0].netdev[0].b, [Some(0.5), Some(1.0), Some(1.5)]);
        let t = text_table(&l);
        let qp = t.find("The QP side per message").unwrap();
        let sk = t
            .find("Kernel sockets per message (ping-pong: per round trip)")
            .unwrap_or_else(|| panic!("{t}"));
        assert!(qp < sk, "{t}");
        assert!(t.contains("virtio-net a/b  netdev a/b"), "{t}");
        // NIC interrupts over virtio-net, over the netdev, segments (UDP: datagrams) the same.
        assert_eq!(
            cells(&t, "UDP ping-pong"),
            ["4.00/2.00", "2.00/1.00", "6.00/3.00", "3.00/1.50"]
        );
        assert_eq!(
            cells(&t, "TCP bandwidth, 64 KiB messages"),
            ["4.00/2.00", "2.00/1.00", "12.0/6.00", "6.00/3.00"]
        );
        assert!(t.contains("NIC interrupts: interrupts of the NIC"), "{t}");
        let md = markdown_table(&l);
        assert!(
            md.contains(
                "| Kernel sockets, per message: a / b | virtio-net: NIC interrupts | \
                 netdev: NIC interrupts | virtio-net: segs out | netdev: segs out |"
            ),
            "{md}"
        );
        assert!(
            md.contains("| TCP ping-pong | 4.00/2.00 | 2.00/1.00 | 12.0/6.00 | 6.00/3.00 |"),
            "{md}"
        );
        let j = json_value(&m, &l);
        let c = &j["comparison"][0]["sockets_per_msg"];
        assert_eq!(c["virtio_net"]["NIC interrupts"]["a"]["median"], 4.0);
        assert_eq!(c["netdev"]["segs out"]["b"]["median"], 1.5);
        assert_eq!(j["comparison"][1].get("sockets_per_msg"), None);
        // A saved run rebuilds the block from its rounds.
        let mut saved = saved_results();
        saved["rounds"] = j["rounds"].clone();
        let run = super::super::SavedRun::from_json(&saved).unwrap();
        assert!(text_table(&run.lines).contains(&t[sk..]));
    }

    #[test]
    fn without_the_netdev_or_its_counters_the_kernel_sockets_block_has_virtio_net_alone() {
        // A run without the netdev, and one whose netdev rows have no counters.
        let mut plain = rounds(&[1.0, 3.0, 2.0]);
        count_sockets(&mut plain, false);
        let mut silent = netdev_rounds();
        count_sockets(&mut silent, false);
        for m in [plain, silent] {
            let l = lines(&m, true);
            let t = text_table(&l);
            assert!(t.contains("Kernel sockets per message"), "{t}");
            assert!(!t.contains("netdev a/b"), "{t}");
            assert_eq!(cells(&t, "TCP ping-pong"), ["4.00/2.00", "12.0/6.00"]);
            let md = markdown_table(&l);
            assert!(
                md.contains("| TCP ping-pong | 4.00/2.00 | 12.0/6.00 |"),
                "{md}"
            );
            assert!(!md.contains("netdev: NIC interrupts"), "{md}");
            let j = json_value(&m, &l);
            let c = &j["comparison"][0]["sockets_per_msg"];
            assert_eq!(c["virtio_net"]["segs out"]["a"]["median"], 6.0);
            assert_eq!(c.get("netdev"), None);
        }
    }

    #[test]
    fn results_without_kernel_socket_counters_have_no_block() {
        for m in [sample(), rounds(&[1.0, 3.0, 2.0]), netdev_rounds()] {
            let l = lines(&m, true);
            assert!(l.iter().all(|l| l.sockets_counted.is_none()));
            assert!(!text_table(&l).contains("Kernel sockets per message"));
            assert!(!markdown_table(&l).contains("Kernel sockets, per message"));
            let j = json_value(&m, &l);
            assert!(j["comparison"]
                .as_array()
                .unwrap()
                .iter()
                .all(|c| c.get("sockets_per_msg").is_none()));
        }
        // A saved bench result of before.
        let run = super::super::SavedRun::from_json(&saved_results()).unwrap();
        assert!(!text_table(&run.lines).contains("Kernel sockets per message"));
        // The demo's short table has none either.
        let mut m = sample();
        count_sockets(&mut m, true);
        assert!(lines(&m, false).iter().all(|l| l.sockets_counted.is_none()));
    }
}
