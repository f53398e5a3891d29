//! Sections (d) and (e), and the results file: everything printed is also kept here and
//! written as JSON and Markdown at the end.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use super::throughput::{self, gbps, StageTable, Wire};
use super::Options;

const KIB64: usize = 64 * 1024;

pub struct Report {
    /// Top-level JSON members, already rendered.
    json: Vec<(String, String)>,
    md: String,
}

fn num(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.3}")
    } else {
        "null".into()
    }
}

fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    s[s.len() / 2]
}

fn spread(v: &[f64]) -> (f64, f64) {
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (min, max)
}

impl Report {
    pub fn new() -> Report {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut r = Report {
            json: Vec::new(),
            md: String::new(),
        };
        r.json.push(("unix_time".into(), secs.to_string()));
        let _ = writeln!(r.md, "# qpip engine bench\n");
        r
    }

    pub fn host(&mut self, load: &str) {
        let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
        self.json.push(("cpus".into(), cpus.to_string()));
        self.json.push(("load_start".into(), format!("\"{load}\"")));
        let _ = writeln!(
            self.md,
            "Host: {cpus} CPUs, load average {load} at the start (shared machine).\n"
        );
    }

    pub fn host_end(&mut self, load: &str) {
        self.json.push(("load_end".into(), format!("\"{load}\"")));
        let _ = writeln!(self.md, "\nLoad average {load} at the end.");
    }

    pub fn latency(&mut self, v: &[(&str, f64)]) {
        let body: Vec<String> = v
            .iter()
            .map(|(k, x)| format!("\"{k}\": {}", num(*x)))
            .collect();
        self.json.push((
            "doorbell_latency".into(),
            format!("{{{}}}", body.join(", ")),
        ));
        let _ = writeln!(
            self.md,
            "## Doorbell to completion (qpipd over vfio-user, 32-byte UDP to itself)\n"
        );
        let _ = writeln!(self.md, "| figure | value |\n| --- | --- |");
        for (k, x) in v {
            let _ = writeln!(self.md, "| {k} | {x:.2} |");
        }
        let _ = writeln!(self.md);
    }

    /// Writes `engine-<time>.{json,md}` and `engine-latest.{json,md}` to `out`, else to
    /// `$QPIP_CACHE/bench`, else `target/bench` beside this binary.
    pub fn write(&self, out: Option<PathBuf>) {
        let dir = out.unwrap_or_else(|| match std::env::var_os("QPIP_CACHE") {
            Some(c) => PathBuf::from(c).join("bench"),
            None => std::env::current_exe()
                .ok()
                .and_then(|p| Some(p.parent()?.parent()?.parent()?.join("bench")))
                .unwrap_or_else(|| PathBuf::from("target/bench")),
        });
        if let Err(e) = std::fs::create_dir_all(&dir) {
            eprintln!(
                "engine_bench: cannot write results to {}: {e}",
                dir.display()
            );
            return;
        }
        let json = format!(
            "{{\n{}\n}}\n",
            self.json
                .iter()
                .map(|(k, v)| format!("  \"{k}\": {v}"))
                .collect::<Vec<_>>()
                .join(",\n")
        );
        let stamp = self.json[0].1.clone();
        for name in [format!("engine-{stamp}"), "engine-latest".to_string()] {
            for (ext, text) in [("json", &json), ("md", &self.md)] {
                let p = dir.join(format!("{name}.{ext}"));
                if let Err(e) = std::fs::write(&p, text) {
                    eprintln!("engine_bench: {}: {e}", p.display());
                }
            }
        }
        println!(
            "results: {} and .md (also engine-latest.*)",
            dir.join(format!("engine-{stamp}.json")).display()
        );
    }
}

/// (d): qpip at MTU 1500 and 9000, kernel loopback TCP, memcpy; `o.runs` rounds,
/// interleaved so that a change in the machine's load touches all of them alike.
pub fn throughput_section(o: &Options, cpu: Option<usize>, r: &mut Report) {
    let total = o.mib << 20;
    let where_ = cpu.map_or("unpinned".to_string(), |c| format!("pinned to CPU {c}"));
    println!(
        "(d) TCP throughput, {} KiB messages, {} MiB per run, {} runs, one thread {where_} \
         (the kernel's writer and reader: two threads on that CPU)",
        KIB64 / 1024,
        o.mib,
        o.runs
    );
    println!(
        "    qpip: two engines in this process joined by in-process frame queues (memory wire) or \
         by a cable (unix datagram sockets, as between two qpipd), message-framed TCP QPs, 63 \
         send WRs in flight; one thread runs both engines and both guests in turn"
    );
    println!(
        "    qpip with offloads: the memory wire carries TCP super-frames whole (segments of the \
         MTU-1500 MSS built 64 KiB at a time and taken as one, as veth does between namespaces \
         with TSO/GRO)"
    );
    println!(
        "    qpip over TAPs: two TAPs with offloads (TSO6 out, GRO'd frames in) on a Linux bridge \
         in a network namespace the bench makes and removes (root only)"
    );
    println!("    kernel: std TcpStream over [::1] (loopback MTU, GSO/GRO as the host has them)");
    let bridge = throughput::Bridge::new();
    println!("    memcpy: the same bytes, message by message, between buffers of qpip's sizes");
    let (mut q1500, mut q9000, mut qc, mut k, mut m) = (vec![], vec![], vec![], vec![], vec![]);
    let mut qg = vec![];
    let mut qt = vec![];
    let mut engine_share = vec![];
    for i in 0..o.runs {
        let a = throughput::qpip(KIB64, total, 1500, Wire::Memory, false);
        let b = throughput::qpip(KIB64, total, 9000, Wire::Memory, false);
        let c = throughput::qpip(KIB64, total, 1500, Wire::Cable, false);
        let g = throughput::qpip(KIB64, total, 1500, Wire::MemoryGso, false);
        let t = bridge
            .as_ref()
            .map(|br| throughput::qpip_on(KIB64, total, 1500, Wire::Taps, false, Some(br)).gbps());
        let kt = gbps(total, throughput::kernel(KIB64, total, cpu));
        let mt = gbps(total, throughput::memcpy(KIB64, total));
        println!(
            "    run {}: qpip MTU 1500 {:.2} Gbit/s, qpip MTU 9000 {:.2} Gbit/s, qpip over a cable {:.2} Gbit/s, qpip MTU 1500 with offloads {:.2} Gbit/s, qpip over TAPs {}, kernel {:.2} Gbit/s, memcpy {:.2} Gbit/s",
            i + 1,
            a.gbps(),
            b.gbps(),
            c.gbps(),
            g.gbps(),
            t.map_or("skipped".into(), |t| format!("{t:.2} Gbit/s")),
            kt,
            mt
        );
        qc.push(c.gbps());
        qg.push(g.gbps());
        qt.extend(t);
        engine_share.push((a.engine_a + a.engine_b).as_secs_f64() / a.wall.as_secs_f64() * 100.0);
        q1500.push(a.gbps());
        q9000.push(b.gbps());
        k.push(kt);
        m.push(mt);
    }
    let rows = [
        ("qpip engine to engine, MTU 1500", &q1500),
        ("qpip engine to engine, MTU 9000", &q9000),
        ("qpip over a cable, MTU 1500", &qc),
        ("qpip MTU 1500 with offloads", &qg),
        ("qpip over TAPs + bridge, MTU 1500", &qt),
        ("host kernel TCP, loopback", &k),
        ("memcpy (copy limit)", &m),
    ];
    println!(
        "    {:<34} {:>10} {:>22}",
        "", "median", "spread (min .. max)"
    );
    for (name, v) in rows.iter().filter(|(_, v)| !v.is_empty()) {
        let (lo, hi) = spread(v);
        println!(
            "    {name:<34} {:>6.2} Gbit/s   {lo:>6.2} .. {hi:.2} Gbit/s",
            median(v)
        );
    }
    let (mq, mq9, mk, mm) = (median(&q1500), median(&q9000), median(&k), median(&m));
    // Ratios of medians: qpip to the kernel (MTU 1500, 9000, with offloads, over TAPs) and
    // to memcpy (MTU 1500, 9000).
    let (rk, rk9, rkg, rkt) = (mq / mk, mq9 / mk, median(&qg) / mk, median(&qt) / mk);
    let (rm, rm9) = (mq / mm, mq9 / mm);
    println!(
        "    ratios of medians: qpip/kernel {rk:.3} (MTU 9000: {rk9:.3}, with offloads: {rkg:.3}, over TAPs: {rkt:.3}), qpip/memcpy {rm:.3} (MTU 9000: {rm9:.3})"
    );
    println!(
        "    share of the qpip run's time spent inside the two engines (the rest: the guests' \
         posting and polling): median {:.0} %",
        median(&engine_share)
    );
    let arr = |v: &Vec<f64>| {
        format!(
            "[{}]",
            v.iter().map(|x| num(*x)).collect::<Vec<_>>().join(", ")
        )
    };
    r.json.push((
        "throughput".into(),
        format!(
            "{{\"message_bytes\": {KIB64}, \"bytes_per_run\": {total}, \"cpu\": {}, \
             \"method\": \"one thread runs two qpip engines (in-process frame queues between them, or a cable) and both guests; \
             kernel: std TcpStream over [::1], writer and reader pinned to the same CPU; memcpy of \
             the same bytes between buffers of qpip's sizes\", \
             \"qpip_mtu1500_gbps\": {}, \"qpip_mtu9000_gbps\": {}, \"qpip_cable_mtu1500_gbps\": {}, \"qpip_mtu1500_offloads_gbps\": {}, \"qpip_taps_bridge_gbps\": {}, \"kernel_loopback_gbps\": {}, \
             \"memcpy_gbps\": {}, \"ratio_qpip_kernel\": {}, \"ratio_qpip9000_kernel\": {}, \"ratio_qpip_offloads_kernel\": {}, \"ratio_qpip_taps_kernel\": {}, \
             \"ratio_qpip_memcpy\": {}, \"ratio_qpip9000_memcpy\": {}}}",
            cpu.map_or("null".into(), |c| c.to_string()),
            arr(&q1500),
            arr(&q9000),
            arr(&qc),
            arr(&qg),
            arr(&qt),
            arr(&k),
            arr(&m),
            num(rk),
            num(rk9),
            num(rkg),
            num(rkt),
            num(rm),
            num(rm9)
        ),
    ));
    let _ = writeln!(
        r.md,
        "## TCP throughput, 64 KiB messages, one core ({where_})\n\n\
         {} MiB per run, {} runs, interleaved. qpip: two engines in one process joined by a \
         memory wire (or a cable), one thread running both engines and both guests. Kernel: TcpStream over [::1], \
         writer and reader on the same CPU. memcpy: the same bytes.\n\n\
         | what | median Gbit/s | min .. max |\n| --- | --- | --- |",
        o.mib, o.runs
    );
    for (name, v) in rows.iter().filter(|(_, v)| !v.is_empty()) {
        let (lo, hi) = spread(v);
        let _ = writeln!(r.md, "| {name} | {:.2} | {lo:.2} .. {hi:.2} |", median(v));
    }
    let _ = writeln!(
        r.md,
        "\nRatios of medians: qpip/kernel **{rk:.3}** (MTU 9000: {rk9:.3}, MTU 1500 with offloads: \
         **{rkg:.3}**, over two TAPs on a bridge: **{rkt:.3}**), qpip/memcpy **{rm:.3}** (MTU 9000: {rm9:.3}).\n"
    );
}

/// (e): per-stage cost for 64 B and 64 KiB messages.
pub fn stages_section(r: &mut Report) {
    if !qpip_device::stages::BUILT_IN {
        println!(
            "(e) per-stage cost: not measured — this build lacks the stage hooks (build the bench \
             with --features stage-timing)"
        );
        let _ = writeln!(
            r.md,
            "## Per-stage cost\n\nNot measured (built without stage-timing).\n"
        );
        return;
    }
    println!(
        "(e) per-stage cost (the QPIP paper's Tables 2-3), counted inside the running engines of a \
         transfer as in (d) on the memory wire at MTU 1500: each stage's exclusive time (a stage running inside another \
         is not counted twice), from the CPU's time-stamp counter, divided by the messages moved. \
         Messages are streamed (up to 63 in flight), so per-message costs include batching: one \
         doorbell, one segment or one ACK may serve several messages. 'doorbell' includes the scans \
         that found nothing (the engine polls). 'other' is engine time outside every stage (the \
         engine's loop, TCP bookkeeping between stages)."
    );
    let mut tables = Vec::new();
    for (msg, total) in [(64usize, 64u64 * 200_000), (KIB64, 128u64 << 20)] {
        let plain = throughput::qpip(msg, total, 1500, Wire::Memory, false);
        let timed = throughput::qpip(msg, total, 1500, Wire::Memory, true);
        let t = throughput::stage_table(msg, &timed);
        print_table(&t, plain.gbps());
        tables.push((t, plain.gbps()));
    }
    let mut md = String::from(
        "## Per-stage cost (the QPIP paper's Tables 2-3)\n\n\
         Counted inside the running engines (feature stage-timing), exclusive times per message, \
         streamed transfer on the memory wire at MTU 1500; the sender's engine sends data and takes ACKs, the \
         receiver's places data and sends ACKs.\n\n",
    );
    let mut json = Vec::new();
    for (t, plain) in &tables {
        let _ = writeln!(
            md,
            "### {} B messages ({} messages; {:.2} Gbit/s timed, {:.2} untimed)\n\n\
             | stage | sender ns/msg | share | receiver ns/msg | share |\n| --- | --- | --- | --- | --- |",
            t.msg, t.messages, t.gbps, plain
        );
        let (ta, tb) = t.engine_ns;
        for (name, sa, share_a, sb, share_b) in share_rows(t) {
            let _ = writeln!(
                md,
                "| {name} | {sa:.0} | {share_a:.1} % | {sb:.0} | {share_b:.1} % |"
            );
        }
        let _ = writeln!(
            md,
            "| **engine total** | {ta:.0} | 100 % | {tb:.0} | 100 % |\n"
        );
        let rows: Vec<String> = t
            .rows
            .iter()
            .map(|row| {
                format!(
                    "{{\"stage\": \"{}\", \"sender_ns\": {}, \"receiver_ns\": {}}}",
                    row.stage.name(),
                    num(row.sender_ns),
                    num(row.receiver_ns)
                )
            })
            .collect();
        let (oa, ob) = other(t);
        json.push(format!(
            "{{\"message_bytes\": {}, \"messages\": {}, \"gbps_timed\": {}, \"gbps_untimed\": {}, \
             \"sender_engine_ns\": {}, \"receiver_engine_ns\": {}, \"sender_other_ns\": {}, \
             \"receiver_other_ns\": {}, \"stages\": [{}]}}",
            t.msg,
            t.messages,
            num(t.gbps),
            num(*plain),
            num(ta),
            num(tb),
            num(oa),
            num(ob),
            rows.join(", ")
        ));
    }
    r.md.push_str(&md);
    r.json
        .push(("stages".into(), format!("[{}]", json.join(", "))));
}

/// Each stage's row, then 'other': (name, sender ns/msg, its share of the sender's engine
/// time in %, receiver ns/msg, its share).
fn share_rows(t: &StageTable) -> Vec<(&'static str, f64, f64, f64, f64)> {
    let (ta, tb) = t.engine_ns;
    let (oa, ob) = other(t);
    t.rows
        .iter()
        .map(|row| (row.stage.name(), row.sender_ns, row.receiver_ns))
        .chain([("other", oa, ob)])
        .map(|(name, a, b)| (name, a, 100.0 * a / ta, b, 100.0 * b / tb))
        .collect()
}

fn other(t: &StageTable) -> (f64, f64) {
    let sa: f64 = t.rows.iter().map(|r| r.sender_ns).sum();
    let sb: f64 = t.rows.iter().map(|r| r.receiver_ns).sum();
    (t.engine_ns.0 - sa, t.engine_ns.1 - sb)
}

fn print_table(t: &StageTable, plain_gbps: f64) {
    println!(
        "    {} B messages: {} messages, {:.2} Gbit/s with the timing on ({:.2} Gbit/s off)",
        t.msg, t.messages, t.gbps, plain_gbps
    );
    println!(
        "      {:<16} {:>14} {:>7}   {:>16} {:>7}",
        "stage", "sender ns/msg", "share", "receiver ns/msg", "share"
    );
    let (ta, tb) = t.engine_ns;
    for (name, sa, share_a, sb, share_b) in share_rows(t) {
        println!("      {name:<16} {sa:>14.0} {share_a:>6.1}%   {sb:>16.0} {share_b:>6.1}%");
    }
    println!(
        "      {:<16} {:>14.0} {:>6}%   {:>16.0} {:>6}%",
        "engine total", ta, 100, tb, 100
    );
}
