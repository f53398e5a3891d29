//! The bench's comparison of the two qpipd layouts: the QP figures of the ping-pongs and the
//! 8 KiB TCP bandwidth with one adapter qpipd for both guests (the main pass) next to the
//! same with one qpipd per guest (a second, shorter pass of the same run), and their ratio;
//! then the host's CPU per message of the same measurements in each layout (QEMU of both
//! guests plus every qpipd, over the same windows).

use super::format::{block_row, column_widths, fmt_median, fmt_range, framed};
use super::lines::Line;
use super::spread::{spread, Better};
use crate::demo::{human, LAYOUT_BW_MSG};
use serde_json::{json, Value};

/// The lines of the main table the layouts are compared on.
fn compared() -> [String; 3] {
    [
        "UDP ping-pong, round trip p50".into(),
        "TCP ping-pong, round trip p50".into(),
        format!("TCP bandwidth, {} messages", human(LAYOUT_BW_MSG as u64)),
    ]
}

/// One compared figure: its QP side in every round with the adapter and per guest.
#[derive(Debug, Clone, PartialEq)]
pub struct LayoutRow {
    pub what: String,
    pub unit: &'static str,
    pub better: Better,
    pub adapter: Vec<Option<f64>>,
    pub per_guest: Vec<Option<f64>>,
}

impl LayoutRow {
    /// The adapter's median over the per-guest median (what "adapter/per-guest" means: for
    /// a round trip below 1 is faster with the adapter, for bandwidth above 1 is).
    pub fn ratio(&self) -> Option<f64> {
        let a = spread(&self.adapter)?.median;
        let p = spread(&self.per_guest)?.median;
        (p > 0.0).then(|| a / p)
    }
}

/// The measurements whose host CPU per message the layouts are compared on (as the host
/// CPU table names them).
fn hosted() -> [String; 3] {
    [
        "UDP ping-pong".into(),
        "TCP ping-pong".into(),
        format!("TCP bandwidth, {} messages", human(LAYOUT_BW_MSG as u64)),
    ]
}

/// The compared rows, from the lines of the pass with the adapter and of the pass with one
/// qpipd per guest; a line missing from a pass has no figures on that side.
pub fn layout_rows(adapter: &[Line], per_guest: &[Line]) -> Vec<LayoutRow> {
    let find = |lines: &[Line], what: &str| lines.iter().find(|l| l.what == what).cloned();
    let figures = compared().into_iter().filter_map(|what| {
        let (a, p) = (find(adapter, &what), find(per_guest, &what));
        let any = a.as_ref().or(p.as_ref())?;
        Some(LayoutRow {
            unit: any.unit,
            better: any.better,
            adapter: a.map(|l| l.qp).unwrap_or_default(),
            per_guest: p.map(|l| l.qp).unwrap_or_default(),
            what,
        })
    });
    // The host's CPU per message over QPs: QEMU a+b and the qpipd (the adapter, or both
    // guests' own).
    let host = |lines: &[Line], what: &str| {
        lines
            .iter()
            .filter_map(|l| l.host_cpu.as_ref())
            .find(|h| h.what == what)
            .map(|h| h.sum(0))
    };
    let cpu = hosted().into_iter().filter_map(|what| {
        let (a, p) = (host(adapter, &what), host(per_guest, &what));
        a.is_some().then_some(()).or(p.is_some().then_some(()))?;
        Some(LayoutRow {
            what: format!("host CPU per message (QEMU a+b and qpipd), {what}"),
            unit: "µs",
            better: Better::Lower,
            adapter: a.unwrap_or_default(),
            per_guest: p.unwrap_or_default(),
        })
    });
    figures.chain(cpu).collect()
}

fn cells(r: &LayoutRow) -> Vec<String> {
    let (a, p) = (spread(&r.adapter), spread(&r.per_guest));
    vec![
        format!("{}, {}", r.what, r.unit),
        fmt_median(a),
        fmt_range(a),
        fmt_median(p),
        fmt_range(p),
        r.ratio().map_or("-".into(), |x| format!("{x:.2}")),
    ]
}

const HEADER: [&str; 6] = [
    "QPs",
    "adapter",
    "min–max",
    "per guest",
    "min–max",
    "adapter/per guest",
];

const LEGEND: &str = "adapter: one qpipd serves both guests' devices as two PCI functions \
    (--function), frames between them switched in memory (the main pass); per guest: one \
    qpipd per guest's device, each with its own TAP, frames between them through the lab \
    bridge (a second pass of the same run, these tests only, over QPs only). Medians of the \
    rounds; the ratio is of the medians (round trip: below 1 favours the adapter; \
    bandwidth: above 1 does).";

/// The block on the terminal (empty without rows).
pub fn layout_text(rows: &[LayoutRow]) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let header: Vec<String> = HEADER.iter().map(|s| s.to_string()).collect();
    let body: Vec<Vec<String>> = rows.iter().map(cells).collect();
    let w = column_widths(&std::iter::once(&header).chain(&body).collect::<Vec<_>>());
    let mut block = block_row("  ", &w, &header);
    for r in &body {
        block += &block_row("  ", &w, r);
    }
    framed("The qpipd layouts, QPs a⇄b:", &block, &[LEGEND.to_string()])
}

/// The block in the Markdown document (empty without rows), under a heading of `level`
/// (2: `##`).
pub fn layout_markdown(rows: &[LayoutRow], level: usize) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let mut t = format!("\n{} The qpipd layouts (QPs a⇄b)\n\n", "#".repeat(level));
    t += "| | adapter: median | adapter: min–max | per guest: median | per guest: min–max | adapter/per guest |\n\
          | --- | ---: | ---: | ---: | ---: | ---: |\n";
    for r in rows {
        t += &format!("| {} |\n", cells(r).join(" | "));
    }
    t += &format!("\n{LEGEND}\n");
    t
}

/// The rows as JSON: each side's rounds and median, and the ratio.
pub fn layout_json(rows: &[LayoutRow]) -> Value {
    let side = |v: &[Option<f64>]| json!({ "rounds": v, "median": spread(v).map(|s| s.median) });
    Value::Array(
        rows.iter()
            .map(|r| {
                json!({
                    "what": r.what,
                    "unit": r.unit,
                    "adapter": side(&r.adapter),
                    "per_guest": side(&r.per_guest),
                    "adapter_over_per_guest": r.ratio(),
                })
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(what: &str, qp: &[f64]) -> Line {
        Line {
            what: what.into(),
            unit: "µs",
            qp: qp.iter().map(|v| Some(*v)).collect(),
            sockets: vec![Some(1.0); qp.len()],
            netdev: Vec::new(),
            qp4: Vec::new(),
            better: Better::Lower,
            counted: None,
            sockets_counted: None,
            goal: None,
            syscalls: None,
            host_cpu: None,
        }
    }

    #[test]
    fn the_layouts_are_compared_on_the_ping_pongs_and_8k_bandwidth() {
        let [udp, tcp, bw] = compared();
        assert_eq!(bw, "TCP bandwidth, 8 KiB messages");
        let adapter = vec![
            line(&udp, &[90.0, 100.0, 110.0]),
            line(&tcp, &[200.0, 210.0, 220.0]),
            line(&bw, &[50.0, 60.0, 70.0]),
            line("TCP bandwidth, 1 KiB messages", &[5.0]),
        ];
        let per_guest = vec![line(&udp, &[200.0, 190.0, 210.0]), line(&bw, &[30.0])];
        let rows = layout_rows(&adapter, &per_guest);
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0].ratio(), Some(0.5));
        assert!(rows[1].per_guest.is_empty() && rows[1].ratio().is_none());
        assert_eq!(rows[2].ratio(), Some(2.0));
        let text = layout_text(&rows);
        assert!(text.contains("adapter/per guest"), "{text}");
        assert!(text.contains("0.50") && text.contains("2.00"), "{text}");
        assert!(layout_markdown(&rows, 2).contains("| UDP ping-pong, round trip p50, µs | 100 |"));
        let j = layout_json(&rows);
        assert_eq!(j[2]["adapter_over_per_guest"], 2.0);
        assert_eq!(j[0]["per_guest"]["median"], 200.0);
        assert!(layout_text(&[]).is_empty() && layout_markdown(&[], 2).is_empty());
    }

    #[test]
    fn the_layouts_host_cpu_per_message_is_compared_too() {
        use super::super::lines::HostCpu;
        let hosted = |what: &str, qemu: f64, qpipd: f64| {
            let mut l = line(&format!("guest-wide CPU per {what}"), &[1.0]);
            l.host_cpu = Some(HostCpu {
                what: what.into(),
                qemu: [vec![Some(qemu)], vec![None]],
                qpipd: [vec![Some(qpipd)], vec![None]],
                guests: [vec![None], vec![None]],
            });
            l
        };
        let adapter = vec![hosted("UDP ping-pong", 300.0, 200.0)];
        let per_guest = vec![hosted("UDP ping-pong", 350.0, 650.0)];
        let rows = layout_rows(&adapter, &per_guest);
        assert_eq!(rows.len(), 1);
        assert_eq!(
            rows[0].what,
            "host CPU per message (QEMU a+b and qpipd), UDP ping-pong"
        );
        assert_eq!(rows[0].ratio(), Some(0.5));
    }
}
