//! A run's results as one Markdown document: what ran where and when, the comparison with
//! its notes, the counters and host CPU under it, the layouts' block and why guest-side
//! times are what they are. The results' `.md` beside their JSON and the generated part of
//! `docs/bench.md` are this document.

use super::layouts::{layout_markdown, LayoutRow};
use super::lines::Line;
use super::run_info::RunInfo;
use super::table::markdown_table;
use crate::demo::human;

/// Why guest-side figures are what they are; under every table, on the terminal too.
pub const TCG_NOTE: &str = "\
Guests run under TCG (QEMU emulates their CPUs, many times slower than native), so guest-side
times are inflated: judge by the ratios (QP gain: how many times better QPs do; > 1 favours
QPs). TCG inflates the two sides differently: with sockets the guest kernel's TCP/IP and
virtio-net driver run emulated; with QPs the transport runs natively in qpipd on the host
(its CPU is not the guest's) and the guest runs the library and its waits for completions.";

/// Where the run was: the host's CPUs and, when recorded, their model; then the commit.
fn provenance(info: &RunInfo) -> String {
    let model = match &info.host_cpu_model {
        Some(m) => format!(" ({m})"),
        None => " (model not recorded)".to_string(),
    };
    let commit = match (&info.commit, info.uncommitted_changes) {
        (Some(c), Some(true)) => format!(
            " Commit `{}`, with uncommitted changes.",
            &c[..c.len().min(12)]
        ),
        (Some(c), _) => format!(" Commit `{}`.", &c[..c.len().min(12)]),
        (None, _) => " Commit not recorded.".to_string(),
    };
    format!(
        "Host: {} CPUs{model}, load average {} at the start, {} at the end.{commit}",
        info.host_cpus,
        info.load_start.as_deref().unwrap_or("-"),
        info.load_end
    )
}

/// The document without a title: its sections' headings are of `level` (2: `##`).
pub fn markdown_body(
    info: &RunInfo,
    lines: &[Line],
    layouts: &[LayoutRow],
    level: usize,
) -> String {
    let p = &info.plan;
    // The bench's RDMA rows alone (`--rdma-only`): none of the rest of the plan ran.
    let rdma_only = info.what.ends_with("--rdma-only");
    let mut md = if rdma_only {
        format!(
            "{}, `./qpip {}`: guests a and b (QEMU, {}, 512 MiB) on the lab network; the \
             bench's RDMA rows alone: perftest's six programs on qpip's ib_device qpip0 \
             against the same on siw and rxe, and qpip's own library. {}\n\n",
            info.date,
            info.what,
            info.accel.to_uppercase(),
            provenance(info),
        )
    } else {
        format!(
            "{}, `./qpip {}`: guests a and b (QEMU, {}, 512 MiB) on the lab network; \
             QPs between their qpip devices vs kernel sockets through their virtio-net NICs. \
             Ping-pong: {} round trips of 1 byte; bandwidth: {} per message size ({} for \
             TCP messages of {} and more); bulk: {} \
             with `qpip-cat` / busybox `nc`, SHA-256 compared. Guest CPU: `qpip-perf`'s \
             process CPU time per message, client in a + server in b. {}\n\n",
            info.date,
            info.what,
            info.accel.to_uppercase(),
            p.latency_iters,
            human(p.bw_bytes),
            human(p.tcp_large_message_bytes),
            human(p.tcp_large_message),
            human(p.bulk_bytes),
            provenance(info),
        )
    };
    let netdev = lines.iter().any(Line::has_netdev);
    let qp4 = lines.iter().any(Line::has_qp4);
    if (netdev || qp4) && !rdma_only {
        let mut also = Vec::new();
        if netdev {
            also.push(
                "kernel sockets through the guests' qpip netdevs to the peer's qpip device \
                 address (the netdev column, its gain over virtio-net beside the QP gain)",
            );
        }
        if qp4 {
            also.push("QPs over IPv4 (the block QPs over IPv4 vs IPv6)");
        }
        md += &format!("Also measured: {}.\n\n", also.join("; "));
    }
    if !info.qpipd_args.is_empty() {
        md += &format!(
            "qpipd ran with `{}` (`--qpipd-arg`).\n\n",
            info.qpipd_args.join(" ")
        );
    }
    if p.rounds > 1 {
        md += &format!(
            "Every measurement ran {} times (rounds), QPs and sockets next to each other in \
             each round, taking turns to go first; wall time {:.0} s.\n\n",
            p.rounds, info.wall_s
        );
    }
    md += &markdown_table(lines);
    md += &layout_markdown(layouts, level);
    md += "\n";
    md += &TCG_NOTE.replace('\n', " ");
    md += "\n";
    md
}

/// The results' `.md`: a title, then [`markdown_body`].
pub fn markdown(info: &RunInfo, lines: &[Line], layouts: &[LayoutRow]) -> String {
    let mut md = String::from(if info.what.ends_with("--rdma-only") {
        "# qpip: perftest on qpip's ib_device vs siw and rxe between two guests\n\n"
    } else {
        "# qpip: QPs vs kernel sockets between two guests\n\n"
    });
    md += &markdown_body(info, lines, layouts, 2);
    md
}
