//! How figures, gains and the text around the tables are written.

use super::lines::{rounds_of, Line};
use super::spread::{spread, Spread};

/// Decimals for a figure of this size: three or so significant digits. Gains take the
/// same: two below 10 (1.23x), fewer above (12.3x, 123x).
fn decimals(x: f64) -> usize {
    if x >= 100.0 {
        0
    } else if x >= 10.0 {
        1
    } else {
        2
    }
}

pub(super) fn fmt(v: Option<f64>, unit: &str) -> String {
    match v {
        None => "-".into(),
        Some(x) => format!("{x:.0$} {unit}", decimals(x)),
    }
}

pub(super) fn fmt_gain(g: Option<f64>) -> String {
    g.map(|g| format!("{g:.0$}x", decimals(g)))
        .unwrap_or_else(|| "-".into())
}

/// A median without its unit (the label carries it).
pub(super) fn fmt_median(s: Option<Spread>) -> String {
    s.map_or("-".into(), |s| {
        format!("{:.1$}", s.median, decimals(s.median))
    })
}

/// min–max, both with the median's decimals so the three read alike.
pub(super) fn fmt_range(s: Option<Spread>) -> String {
    s.map_or("-".into(), |s| {
        let d = decimals(s.median);
        format!("{:.d$}–{:.d$}", s.min, s.max)
    })
}

/// The range of the per-round gains; `*` marks a line missing a figure in some round.
pub(super) fn fmt_gain_range(l: &Line) -> String {
    fmt_ratio_range(&l.round_gains())
}

/// The range of per-round ratios; `*` marks a round without one.
pub(super) fn fmt_ratio_range(ratios: &[Option<f64>]) -> String {
    let mark = if ratios.iter().all(Option::is_some) {
        ""
    } else {
        "*"
    };
    match spread(ratios) {
        Some(g) => {
            let d = decimals(g.max);
            format!("{:.d$}–{:.d$}{mark}", g.min, g.max)
        }
        None => format!("-{mark}"),
    }
}

/// A counter per message: about three significant digits, `-` if not counted.
pub(super) fn fmt_count(v: Option<f64>) -> String {
    v.map_or("-".into(), |x| format!("{x:.0$}", decimals(x)))
}

/// What the figures of a block under the table are over: `medians of N rounds` or
/// `one round`.
pub(super) fn rounds_said(lines: &[Line]) -> String {
    let n = rounds_of(lines);
    if n > 1 {
        format!("medians of {n} rounds")
    } else {
        "one round".to_string()
    }
}

/// The indent of a block under the table: that of the table above it (the table of one
/// round is indented, the table of several is not).
pub(super) fn block_indent(lines: &[Line]) -> &'static str {
    if rounds_of(lines) > 1 {
        ""
    } else {
        "  "
    }
}

/// The width of each column of a block: its widest cell.
pub(super) fn column_widths(rows: &[&Vec<String>]) -> Vec<usize> {
    let columns = rows.first().map_or(0, |r| r.len());
    (0..columns)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect()
}

/// A row of a block: the label left-aligned, the other cells right-aligned, two spaces
/// apart, no trailing blanks.
pub(super) fn block_row(indent: &str, w: &[usize], r: &[String]) -> String {
    let mut s = format!("{indent}{}", pad(&r[0], w[0], false));
    for i in 1..r.len() {
        s += &format!("  {}", pad(&r[i], w[i], true));
    }
    s.trim_end().to_string() + "\n"
}

/// A block of the terminal's output under the table: a blank line, `title`, the table
/// `block`, then `legend`, the text wrapped to the block's width (at least 80 columns).
pub(super) fn framed(title: &str, block: &str, legend: &[String]) -> String {
    let width = block
        .lines()
        .map(|l| l.chars().count())
        .max()
        .unwrap_or(0)
        .max(80);
    let mut t = String::from("\n");
    t += &wrap(title, width);
    t += block;
    for l in legend {
        t += &wrap(l, width);
    }
    t
}

/// Wraps `text` into lines of at most `width` characters (at spaces).
pub(super) fn wrap(text: &str, width: usize) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            out += &line;
            out.push('\n');
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line += word;
    }
    if !line.is_empty() {
        out += &line;
        out.push('\n');
    }
    out
}

pub(super) fn pad(s: &str, w: usize, right: bool) -> String {
    let fill = " ".repeat(w.saturating_sub(s.chars().count()));
    if right {
        format!("{fill}{s}")
    } else {
        format!("{s}{fill}")
    }
}

pub(super) fn centre(s: &str, w: usize) -> String {
    let free = w.saturating_sub(s.chars().count());
    format!("{}{s}{}", " ".repeat(free / 2), " ".repeat(free - free / 2))
}

/// A block of labelled rows of counters: `head` (its first cell blank) over each row's
/// label and its counters (`-` where not counted).
pub(super) fn counter_cells(
    head: &[(&str, &str)],
    rows: impl IntoIterator<Item = (String, Vec<Option<f64>>)>,
) -> Vec<Vec<String>> {
    let mut t = vec![std::iter::once(String::new())
        .chain(head.iter().map(|c| c.0.to_string()))
        .collect::<Vec<_>>()];
    for (label, c) in rows {
        t.push(
            std::iter::once(label)
                .chain(c.iter().map(|x| fmt_count(*x)))
                .collect(),
        );
    }
    t
}

/// A legend line naming each of `head`'s columns: `name: what; ...`.
pub(super) fn columns_said(head: &[(&str, &str)]) -> String {
    head.iter()
        .map(|(c, w)| format!("{c}: {w}"))
        .collect::<Vec<_>>()
        .join("; ")
        + "."
}

/// The table `t` (header first) as a block of the terminal's output under `title`, its
/// columns aligned, with `legend` under it (see [`framed`]).
pub(super) fn framed_table(title: &str, t: &[Vec<String>], legend: &[String]) -> String {
    let w = column_widths(&t.iter().collect::<Vec<_>>());
    let block: String = t.iter().map(|r| block_row("", &w, r)).collect();
    framed(title, &block, legend)
}

/// The table `t` (header first; its other columns right-aligned) in Markdown, then each
/// paragraph of `legend`.
pub(super) fn md_table(t: &[Vec<String>], legend: &[String]) -> String {
    let mut md = String::new();
    for (i, r) in t.iter().enumerate() {
        md += &format!("| {} |\n", r.join(" | "));
        if i == 0 {
            md += "| --- |";
            md += &" ---: |".repeat(r.len() - 1);
            md += "\n";
        }
    }
    md += "\n";
    for l in legend {
        md += &format!("{l}\n\n");
    }
    md
}
