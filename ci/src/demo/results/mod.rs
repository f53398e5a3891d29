//! What the demo and the bench measured: read from guest a's report lines round by round,
//! put side by side (QPs vs kernel sockets) as a table, and written as JSON and Markdown.
//!
//! With several rounds each figure is the median of its rounds, shown with its spread
//! (min–max); the QP gain is the ratio of the two medians, shown with the range of the
//! ratios of each round (QPs and sockets ran next to each other in a round, so a round's
//! ratio saw the same host load on both sides).
//!
//! When the run has them (the bench with the guest driver's netdev), a third column has
//! kernel sockets over the qpip netdev, with its gain over sockets over virtio-net beside
//! the QP gain, and a block under the table sets QPs over IPv4 against QPs over IPv6. Runs
//! without them (older results, the demo) render as before.
//!
//! The bench's table is followed by the QP side's counters per message of each
//! measurement (what `qpip-perf` reports for guest a, the client, and guest b, the
//! server): the kicks, interrupts, engine sleeps and segments behind each figure; then the
//! kernel sockets' (NIC interrupts and segments), over virtio-net and the qpip netdev side
//! by side, where `qpip-perf --sockets` reports them.
//!
//! Two more kinds of figure, when the guests report them (the bench):
//! - **host overhead per message**, the QPIP paper's Table 1: `qpip-overhead` in guest a,
//!   the time inside the calls that post and reap one message (QPs) against `send()` and
//!   `recv(MSG_DONTWAIT)` of data already queued (kernel sockets), reported as
//!   `@overhead[.ROUND]=JSON`, once sleeping between messages and once with `--spin-us`
//!   (`spin_us` in the JSON: the device's engine stays awake, the posts are quiet);
//! - **whole-system CPU per message**: the table's `guest-wide CPU` is both guests' busy
//!   time (all of `/proc/stat` but idle, iowait and steal) per message as `qpip-perf`
//!   measures it on each end over exactly its measured interval (its row's
//!   `both_guests_cpu_us`: `guest_cpu_us` of guest a, the client, plus
//!   `server_guest_cpu_us` of guest b, the server). The host's side comes from CPU marks at
//!   both edges of each whole `qpip-perf` run, `@cpu.NAME=PHASE|A|B|HOST` (PHASE `start` or
//!   `end`; A and B the first line of guest a's and guest b's `/proc/stat`; HOST the lab
//!   host's `qemu-a=SECS qpipd-a=SECS ... qpipd-adapter=SECS`, the CPU time of each guest's
//!   QEMU and own qpipd processes and, once, of the adapter qpipd serving both): a block under the table has the host's CPU of QEMU and qpipd per message
//!   over those windows, which hold the run's start-up, connection and buffer
//!   registration too.
//!
//! A results JSON holds the run's facts ([`RunInfo`]) and every round's raw measurements,
//! so [`SavedRun`] rebuilds the whole report from it; [`record`] writes that report into
//! `docs/bench.md` with its chart ([`gain_chart`]).

mod chart;
mod counters;
mod document;
#[cfg(test)]
mod fixtures;
mod format;
mod host_cpu;
mod ipv4;
mod json;
mod layouts;
mod lines;
pub mod record;
mod report;
mod run_info;
mod saved;
pub mod sockets;
mod spread;
pub mod storage;
mod table;
mod verbs;

pub use chart::gain_chart;
pub use document::{markdown, markdown_body, TCG_NOTE};
pub use json::json_value;
pub use layouts::{layout_json, layout_markdown, layout_rows, layout_text, LayoutRow};
pub use lines::{
    lines, Counted, Counter, HostCpu, Line, SocketsCounted, COUNTERS, SOCKET_COUNTERS,
};
pub use report::{CpuMark, CpuWindow, Measurements, Round};
pub use run_info::{commit_of, host_cpu_model, PlanFacts, RunInfo};
pub use saved::SavedRun;
pub use spread::{spread, Better, Spread};
pub use table::{markdown_table, text_table};

/// The most rounds a run may have (guest b's bulk ports are numbered by round).
pub const MAX_ROUNDS: u32 = 20;

/// Ticks per second of a guest's `/proc/stat` (Linux's USER_HZ).
pub const GUEST_HZ: f64 = 100.0;
