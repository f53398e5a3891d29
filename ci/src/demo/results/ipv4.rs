//! The block under the bench's table comparing QPs over IPv4 with QPs over IPv6: the same
//! ping-pongs and TCP bandwidth between the same qpip devices, by address family, whose
//! ratio should stay within the noise of the rounds.

use super::format::{
    block_indent, block_row, column_widths, fmt_gain, fmt_median, fmt_range, fmt_ratio_range,
    framed, rounds_said,
};
use super::lines::Line;

/// The lines that have QPs over IPv4 (none: no block).
fn ipv4_lines(lines: &[Line]) -> Vec<&Line> {
    lines.iter().filter(|l| l.has_qp4()).collect()
}

/// The cells of a line in the block: label with unit, IPv4's median and min–max, IPv6's,
/// the ratio of the medians and min–max of the rounds' ratios.
fn ipv4_cells(l: &Line) -> Vec<String> {
    let (v4, v6) = (l.qp4(), l.qp());
    vec![
        format!("{}, {}", l.what, l.unit),
        fmt_median(v4),
        fmt_range(v4),
        fmt_median(v6),
        fmt_range(v6),
        fmt_gain(l.ipv4_ratio()),
        fmt_ratio_range(&l.ipv4_round_ratios()),
    ]
}

/// The columns of the block.
const IPV4_HEAD: [&str; 7] = [
    "",
    "IPv4 median",
    "min–max",
    "IPv6 median",
    "min–max",
    "ratio",
    "min–max",
];

fn ipv4_title(lines: &[Line]) -> String {
    format!(
        "QPs over IPv4 vs IPv6, {}: the same measurements between the same qpip devices, \
         to guest b's device's IPv4 address. ratio: how many times better IPv4 does (the \
         ratio of the medians, and min–max of the rounds' own ratios); within the rounds' \
         noise, about 1.",
        rounds_said(lines)
    )
}

/// The block under the table (empty if no line has QPs over IPv4).
pub(super) fn ipv4_text(lines: &[Line]) -> String {
    let v4 = ipv4_lines(lines);
    if v4.is_empty() {
        return String::new();
    }
    let head: Vec<String> = IPV4_HEAD.iter().map(|s| s.to_string()).collect();
    let rows: Vec<Vec<String>> = v4.iter().map(|l| ipv4_cells(l)).collect();
    let w = column_widths(&rows.iter().chain([&head]).collect::<Vec<_>>());
    let indent = block_indent(lines);
    let mut block = block_row(indent, &w, &head);
    for r in &rows {
        block += &block_row(indent, &w, r);
    }
    framed(&ipv4_title(lines), &block, &[])
}

/// The same block as a Markdown table.
pub(super) fn ipv4_markdown(lines: &[Line]) -> String {
    let v4 = ipv4_lines(lines);
    if v4.is_empty() {
        return String::new();
    }
    let mut t = format!(
        "\n{}\n\n| QPs | IPv4: median | IPv4: min–max | IPv6: median | IPv6: min–max \
         | IPv4 vs IPv6: ratio | IPv4 vs IPv6: min–max |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n",
        ipv4_title(lines)
    );
    for l in v4 {
        t += &format!("| {} |\n", ipv4_cells(l).join(" | "));
    }
    t
}
