//! The block under the bench's table: the QP side's counters per message.

use super::format::{block_indent, block_row, column_widths, fmt_count, framed, rounds_said};
use super::lines::{Counted, Counter, Line, COUNTERS};
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

/// The block of QP counters per message under the table (empty if no line has them).
pub(super) fn counter_text(lines: &[Line]) -> String {
    let counted: Vec<&Counted> = lines.iter().filter_map(|l| l.counted.as_ref()).collect();
    if counted.is_empty() {
        return String::new();
    }
    let rows: Vec<Vec<String>> = counted
        .iter()
        .map(|c| {
            std::iter::once(c.what.clone())
                .chain(c.counters.iter().map(counter_cell))
                .collect()
        })
        .collect();
    let head: Vec<String> = std::iter::once(String::new())
        .chain(COUNTERS.iter().map(|c| c.0.to_string()))
        .collect();
    let sub: Vec<String> = std::iter::once(String::new())
        .chain(COUNTERS.iter().map(|_| "a/b".to_string()))
        .collect();
    let w = column_widths(&rows.iter().chain([&head, &sub]).collect::<Vec<_>>());
    // Indented as the table above it is.
    let indent = block_indent(lines);
    let mut block = block_row(indent, &w, &head);
    block += &block_row(indent, &w, &sub);
    for r in &rows {
        block += &block_row(indent, &w, r);
    }
    framed(&counter_title(lines), &block, &counter_legend())
}

/// The same block as a Markdown table.
pub(super) fn counter_markdown(lines: &[Line]) -> String {
    let counted: Vec<&Counted> = lines.iter().filter_map(|l| l.counted.as_ref()).collect();
    if counted.is_empty() {
        return String::new();
    }
    let mut t = format!("\n{}\n\n| QPs, per message: a / b |", counter_title(lines));
    for c in COUNTERS {
        t += &format!(" {} |", c.0);
    }
    t += "\n| --- |";
    t += &" ---: |".repeat(COUNTERS.len());
    t += "\n";
    for c in counted {
        t += &format!("| {} |", c.what);
        for x in &c.counters {
            t += &format!(" {} |", counter_cell(x));
        }
        t += "\n";
    }
    t += "\n";
    t += &counter_legend().join(" ");
    t += "\n";
    t
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::super::{json_value, lines, markdown_table, text_table};
    use super::*;
    use serde_json::Value;

    #[test]
    fn the_bench_shows_the_qp_counters_per_message_under_its_table() {
        // Round k's QP client kicked k times per message: medians over 1, 3, 2 are 2.
        let m = rounds(&[1.0, 3.0, 2.0]);
        let l = lines(&m, true);
        let counted: Vec<&Counted> = l.iter().filter_map(|l| l.counted.as_ref()).collect();
        let names: Vec<&str> = counted.iter().map(|c| c.what.as_str()).collect();
        assert_eq!(
            names,
            [
                "UDP ping-pong",
                "TCP ping-pong",
                "TCP bandwidth, 1 KiB messages",
                "TCP bandwidth, 64 KiB messages"
            ]
        );
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
}
