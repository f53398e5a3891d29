//! `qpip-lab demo` and `qpip-lab bench` on the terminal and in files.

use qpip_lab::demo::results::record::Measured;
use qpip_lab::demo::results::sockets::SocketsRun;
use qpip_lab::demo::results::storage::StorageRun;
use qpip_lab::demo::sockets::SocketsPlan;
use qpip_lab::demo::storage::StoragePlan;
use qpip_lab::demo::{self, results, Plan, Report};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

fn say(what: &str, msg: &str) {
    if std::io::stderr().is_terminal() {
        eprintln!("\x1b[1m[qpip]\x1b[0m {what}: {msg}");
    } else {
        eprintln!("[qpip] {what}: {msg}");
    }
}

fn fail(what: &str, e: &demo::DemoError) -> ExitCode {
    let msg = e.to_string();
    if std::io::stderr().is_terminal() {
        eprintln!("\x1b[1;31m[qpip] {what} failed:\x1b[0m {msg}");
    } else {
        eprintln!("[qpip] {what} failed: {msg}");
    }
    ExitCode::from(if e.interrupted { 130 } else { 1 })
}

fn print_table(r: &Report) {
    println!();
    println!(
        "QPs between the guests' qpip devices vs kernel sockets through their virtio-net NICs,"
    );
    println!("guest a ⇄ guest b:");
    print!("{}", results::text_table(&r.lines));
    println!();
    println!("{}", results::TCG_NOTE);
    println!();
}

pub fn demo(netns: &str, layout: qpip_lab::QpipdLayout, verbose: bool) -> ExitCode {
    let plan = Plan {
        layout,
        ..Plan::demo()
    };
    let steps = plan.steps().len();
    let mut progress = |m: &str| say("demo", m);
    let r = match demo::run(&plan, netns, verbose, &mut progress) {
        Ok(r) => r,
        Err(e) => return fail("demo", &e),
    };
    print_table(&r);
    let (json, md) = documents(&plan, &r, "demo", None, None);
    let written = write_pair(&r.dir, "results", &json, &md);
    say(
        "demo",
        &format!(
            "all {steps} steps passed; the guests ran {:.0} s and are stopped, the lab network removed",
            r.elapsed.as_secs_f64()
        ),
    );
    match written {
        Ok(p) => say(
            "demo",
            &format!(
                "results: {} (and .md); logs: {}",
                p.display(),
                r.dir.display()
            ),
        ),
        Err(e) => say(
            "demo",
            &format!("cannot write the results into {}: {e}", r.dir.display()),
        ),
    }
    ExitCode::SUCCESS
}

/// The bench's comparison of the qpipd layouts: its rows and the second pass's wall time.
struct Layouts {
    rows: Vec<results::LayoutRow>,
    elapsed: std::time::Duration,
}

/// The bench's second pass: the ping-pongs and 8 KiB TCP bandwidth over QPs with the
/// guests' devices in the other layout; its rows next to the main pass's `r`.
fn layout_pass(plan: &Plan, r: &Report, netns: &str, verbose: bool) -> Result<Layouts, ExitCode> {
    use qpip_lab::QpipdLayout::{Adapter, PerGuest};
    let other = if plan.layout == Adapter {
        PerGuest
    } else {
        Adapter
    };
    let pass = plan.layout_pass(other);
    let mut progress = |m: &str| say("bench, other layout", m);
    let alt = demo::run(&pass, netns, verbose, &mut progress).map_err(|e| fail("bench", &e))?;
    let (adapter, per_guest) = if plan.layout == Adapter {
        (&r.lines, &alt.lines)
    } else {
        (&alt.lines, &r.lines)
    };
    Ok(Layouts {
        rows: results::layout_rows(adapter, per_guest),
        elapsed: alt.elapsed,
    })
}

/// The bench's storage part: its own pass, with guests of more RAM (see
/// `qpip_lab::demo::storage`); its figures and the pass's wall time.
fn storage_pass(
    plan: &StoragePlan,
    netns: &str,
    verbose: bool,
) -> Result<(StorageRun, std::time::Duration), ExitCode> {
    let mut progress = |m: &str| say("bench, storage", m);
    let r = demo::storage::run(plan, netns, verbose, &mut progress)
        .map_err(|e| fail("bench (storage part)", &e))?;
    print!("{}", r.0.text());
    println!();
    Ok(r)
}

/// The bench's sockets part: its own pass (see `qpip_lab::demo::sockets`); its figures
/// and the pass's wall time.
fn sockets_pass(
    plan: &SocketsPlan,
    netns: &str,
    verbose: bool,
) -> Result<(SocketsRun, std::time::Duration), ExitCode> {
    let mut progress = |m: &str| say("bench, sockets", m);
    let r = demo::sockets::run(plan, netns, verbose, &mut progress)
        .map_err(|e| fail("bench (sockets part)", &e))?;
    print!("{}", r.0.text());
    println!();
    Ok(r)
}

/// What a part run alone (`--storage-only`, `--sockets-only`) writes: its results' name
/// (`storage`: storage-*.{json,md}, the JSON's key), what it compared, its tool's name in
/// the JSON, its figures and report.
struct PartAlone<'a> {
    name: &'static str,
    what: &'static str,
    rounds: u32,
    layout: qpip_lab::QpipdLayout,
    qpipd_args: &'a [String],
    json: serde_json::Value,
    markdown: String,
    elapsed: std::time::Duration,
    load_start: String,
}

/// Records a part's section of docs/bench.md, given when and where it ran.
type Recorder<'a> = dyn Fn(Measured) -> ExitCode + 'a;

/// Writes a part's results as NAME-*.{json,md} (and NAME-latest.*) in `out` (default
/// $QPIP_CACHE/bench), then, with `record`, has it record its section of docs/bench.md
/// (given when and where it ran).
fn part_alone(p: PartAlone, out: Option<PathBuf>, record: Option<&Recorder<'_>>) -> ExitCode {
    let (stamp, date) = now();
    let load_end = loadavg();
    let (commit, uncommitted_changes) = results::commit_of(&qpip_lab::paths::root());
    let mut part = p.json;
    part["wall_s"] = serde_json::json!(p.elapsed.as_secs_f64());
    let json = serde_json::json!({
        "tool": format!("qpip-lab bench-{}", p.name),
        "date": date,
        "accel": "tcg",
        "host_cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "host_cpu_model": results::host_cpu_model(),
        "commit": commit,
        "uncommitted_changes": uncommitted_changes,
        "load_start": p.load_start,
        "load_end": load_end,
        "qpipd_layout": format!("{:?}", p.layout),
        "qpipd_args": p.qpipd_args,
        p.name: part,
    });
    let md =
        format!(
        "# qpip: {}\n\n{date}, `./qpip bench --{}-only`, commit {}; host load average {} at the \
         start, {} at the end; wall time {:.0} s.\n{}",
        p.what,
        p.name,
        commit.as_deref().map_or("not recorded", |c| &c[..c.len().min(12)]),
        p.load_start,
        load_end,
        p.elapsed.as_secs_f64(),
        p.markdown
    );
    let dir = out.unwrap_or_else(|| qpip_lab::paths::cache().join("bench"));
    let name = p.name;
    let written = std::fs::create_dir_all(&dir)
        .and_then(|()| write_pair(&dir, &format!("{name}-{stamp}"), &json, &md))
        .and_then(|path| write_pair(&dir, &format!("{name}-latest"), &json, &md).map(|_| path));
    match written {
        Ok(path) => {
            say(
                "bench",
                &format!(
                    "the {name} part, {} round{}, in {:.0} s; results: {} and .md (also {name}-latest.*)",
                    p.rounds,
                    if p.rounds == 1 { "" } else { "s" },
                    p.elapsed.as_secs_f64(),
                    path.display()
                ),
            );
            let when = Measured {
                date: &date,
                commit: commit.as_deref(),
                load: Some((&p.load_start, &load_end)),
            };
            record.map_or(ExitCode::SUCCESS, |r| r(when))
        }
        Err(e) => {
            say(
                "bench",
                &format!("cannot write the results into {}: {e}", dir.display()),
            );
            ExitCode::from(1)
        }
    }
}

/// `qpip-lab bench --storage-only`: the storage part alone, its results as
/// storage-*.{json,md} in `out` (default $QPIP_CACHE/bench); with `record`, its section of
/// docs/bench.md.
pub fn storage_only(
    plan: &StoragePlan,
    netns: &str,
    out: Option<PathBuf>,
    verbose: bool,
    record: bool,
) -> ExitCode {
    let load_start = loadavg();
    let (run, elapsed) = match storage_pass(plan, netns, verbose) {
        Ok(r) => r,
        Err(code) => return code,
    };
    let part = PartAlone {
        name: "storage",
        what: "a network disk over QPs vs kernel sockets between two guests",
        rounds: plan.facts.rounds,
        layout: plan.layout,
        qpipd_args: &plan.qpipd_args,
        json: run.json(),
        markdown: run.markdown(2),
        elapsed,
        load_start,
    };
    let rec = |when: Measured| record_storage(&run, when, &docs_dir());
    part_alone(part, out, record.then_some(&rec))
}

/// `qpip-lab bench --sockets-only`: the sockets part alone, its results as
/// sockets-*.{json,md} in `out` (default $QPIP_CACHE/bench); with `record`, its section of
/// docs/bench.md.
pub fn sockets_only(
    plan: &SocketsPlan,
    netns: &str,
    out: Option<PathBuf>,
    verbose: bool,
    record: bool,
) -> ExitCode {
    let load_start = loadavg();
    let (run, elapsed) = match sockets_pass(plan, netns, verbose) {
        Ok(r) => r,
        Err(code) => return code,
    };
    let part = PartAlone {
        name: "sockets",
        what: "socket programs on QPs (the preload library) vs kernel sockets between two guests",
        rounds: plan.facts.rounds,
        layout: plan.layout,
        qpipd_args: &plan.qpipd_args,
        json: run.json(),
        markdown: run.markdown(2),
        elapsed,
        load_start,
    };
    let rec = |when: Measured| record_sockets(&run, when, &docs_dir());
    part_alone(part, out, record.then_some(&rec))
}

fn record_storage(run: &StorageRun, when: Measured, docs: &std::path::Path) -> ExitCode {
    said_recorded(
        "storage",
        when.date,
        results::record::record_storage(run, when, docs),
    )
}

fn record_sockets(run: &SocketsRun, when: Measured, docs: &std::path::Path) -> ExitCode {
    said_recorded(
        "sockets",
        when.date,
        results::record::record_sockets(run, when, docs),
    )
}

/// Says where part `name`'s report of `date` went, or why it did not.
fn said_recorded(name: &str, date: &str, written: Result<PathBuf, String>) -> ExitCode {
    match written {
        Ok(p) => {
            say(
                "bench",
                &format!(
                    "the {name} part's report of {date} is in {} (its generated section)",
                    p.display()
                ),
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            say("bench", &format!("cannot record the {name} report: {e}"));
            ExitCode::from(1)
        }
    }
}

#[allow(clippy::too_many_arguments)]
pub fn bench(
    plan: &Plan,
    storage: Option<&StoragePlan>,
    sockets: Option<&SocketsPlan>,
    netns: &str,
    out: Option<PathBuf>,
    verbose: bool,
    compare_layouts: bool,
    record: bool,
) -> ExitCode {
    let load_start = loadavg();
    if !plan.qpipd_args.is_empty() {
        say(
            "bench",
            &format!("every qpipd runs with {}", plan.qpipd_args.join(" ")),
        );
    }
    let mut progress = |m: &str| say("bench", m);
    let r = match demo::run(plan, netns, verbose, &mut progress) {
        Ok(r) => r,
        Err(e) => return fail("bench", &e),
    };
    print_table(&r);
    let layouts = if compare_layouts {
        match layout_pass(plan, &r, netns, verbose) {
            Ok(l) => Some(l),
            Err(code) => return code,
        }
    } else {
        None
    };
    if let Some(l) = &layouts {
        print!("{}", results::layout_text(&l.rows));
        println!();
    }
    let storage = match storage.map(|s| storage_pass(s, netns, verbose)) {
        Some(Ok(s)) => Some(s),
        Some(Err(code)) => return code,
        None => None,
    };
    let sockets = match sockets.map(|s| sockets_pass(s, netns, verbose)) {
        Some(Ok(s)) => Some(s),
        Some(Err(code)) => return code,
        None => None,
    };
    let dir = out.unwrap_or_else(|| qpip_lab::paths::cache().join("bench"));
    let (stamp, _) = now();
    let what = if plan.rdma_only {
        "bench --rdma-only"
    } else {
        "bench"
    };
    let (mut json, mut md) = documents(plan, &r, what, Some(load_start), layouts.as_ref());
    // The RDMA rows alone (--rdma-only) are results of their own, never the bench's latest.
    let name = if plan.rdma_only { "rdma" } else { "qp-sockets" };
    if let Some((st, elapsed)) = &storage {
        let mut j = st.json();
        j["wall_s"] = serde_json::json!(elapsed.as_secs_f64());
        json["storage"] = j;
        md += &st.markdown(2);
    }
    if let Some((so, elapsed)) = &sockets {
        let mut j = so.json();
        j["wall_s"] = serde_json::json!(elapsed.as_secs_f64());
        json["sockets"] = j;
        md += &so.markdown(2);
    }
    let r1 = std::fs::create_dir_all(&dir)
        .and_then(|()| write_pair(&dir, &format!("{name}-{stamp}"), &json, &md))
        .and_then(|p| write_pair(&dir, &format!("{name}-latest"), &json, &md).map(|_| p));
    match r1 {
        Ok(p) => {
            say(
                "bench",
                &format!(
                    "{} round{} in {:.0} s (boot to power-off){}{}{}; results: {} and .md (also {name}-latest.*)",
                    plan.rounds,
                    if plan.rounds == 1 { "" } else { "s" },
                    r.elapsed.as_secs_f64(),
                    layouts.as_ref().map_or(String::new(), |l| format!(
                        ", the other layout's pass in {:.0} s",
                        l.elapsed.as_secs_f64()
                    )),
                    storage.as_ref().map_or(String::new(), |(_, e)| format!(
                        ", the storage part in {:.0} s",
                        e.as_secs_f64()
                    )),
                    sockets.as_ref().map_or(String::new(), |(_, e)| format!(
                        ", the sockets part in {:.0} s",
                        e.as_secs_f64()
                    )),
                    p.display()
                ),
            );
            if record {
                record_report(results::SavedRun::from_json(&json), &docs_dir())
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            say(
                "bench",
                &format!("cannot write the results into {}: {e}", dir.display()),
            );
            ExitCode::from(1)
        }
    }
}

/// The repository's `docs/`, where the recorded report goes.
pub fn docs_dir() -> PathBuf {
    qpip_lab::paths::root().join("docs")
}

/// `qpip-lab bench-report`: the recorded report from the results file `json`, into `docs`.
pub fn bench_report(json: &std::path::Path, docs: &std::path::Path) -> ExitCode {
    // A part's own results (--storage-only, --sockets-only) record its section alone.
    let alone = std::fs::read_to_string(json)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .filter(|j| j["tool"] == "qpip-lab bench-storage" || j["tool"] == "qpip-lab bench-sockets");
    if let Some(j) = alone {
        let when = Measured {
            date: j["date"].as_str().unwrap_or("-"),
            commit: j["commit"].as_str(),
            load: j["load_start"].as_str().zip(j["load_end"].as_str()),
        };
        let recorded = if j["tool"] == "qpip-lab bench-storage" {
            StorageRun::from_json(&j["storage"]).map(|run| record_storage(&run, when, docs))
        } else {
            SocketsRun::from_json(&j["sockets"]).map(|run| record_sockets(&run, when, docs))
        };
        return recorded.unwrap_or_else(|e| {
            say(
                "bench",
                &format!("cannot record the report: {}: {e}", json.display()),
            );
            ExitCode::from(1)
        });
    }
    record_report(results::SavedRun::read(json), docs)
}

/// Writes the report of `run` into `docs` (`bench.md`'s generated section, `bench.svg`).
fn record_report(run: Result<results::SavedRun, String>, docs: &std::path::Path) -> ExitCode {
    let written = run.and_then(|run| {
        results::record::record(&run, docs).map(|paths| (run.info.date.clone(), paths))
    });
    match written {
        Ok((date, [md, svg])) => {
            say(
                "bench",
                &format!(
                    "the report of the run of {date} is in {} (generated section) and {}",
                    md.display(),
                    svg.display()
                ),
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            say("bench", &format!("cannot record the report: {e}"));
            ExitCode::from(1)
        }
    }
}

/// Writes NAME.json and NAME.md into `dir`; the path of the JSON.
fn write_pair(
    dir: &std::path::Path,
    name: &str,
    json: &serde_json::Value,
    md: &str,
) -> std::io::Result<PathBuf> {
    let j = dir.join(format!("{name}.json"));
    std::fs::write(
        &j,
        serde_json::to_string_pretty(json).unwrap_or_default() + "\n",
    )?;
    std::fs::write(dir.join(format!("{name}.md")), md)?;
    Ok(j)
}

/// The results as JSON and as Markdown.
fn documents(
    plan: &Plan,
    r: &Report,
    what: &str,
    load_start: Option<String>,
    layouts: Option<&Layouts>,
) -> (serde_json::Value, String) {
    let (_, date) = now();
    let (commit, uncommitted_changes) = results::commit_of(&qpip_lab::paths::root());
    let info = results::RunInfo {
        what: what.to_string(),
        date,
        unix_time: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        accel: "tcg".to_string(),
        host_cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        host_cpu_model: results::host_cpu_model(),
        commit,
        uncommitted_changes,
        load_start,
        load_end: loadavg(),
        wall_s: r.elapsed.as_secs_f64(),
        qpipd_layout: format!("{:?}", plan.layout),
        qpipd_args: plan.qpipd_args.clone(),
        plan: results::PlanFacts::of(plan),
    };
    let mut j = results::json_value(&r.measurements, &r.lines);
    if let Some(o) = j.as_object_mut() {
        o.extend(info.json_fields());
        o.insert(
            "layouts".into(),
            serde_json::json!(layouts.map(|l| serde_json::json!({
                "rows": results::layout_json(&l.rows),
                "per_guest_pass_wall_s": l.elapsed.as_secs_f64(),
            }))),
        );
    }
    let rows = layouts.map_or(&[][..], |l| &l.rows[..]);
    (j, results::markdown(&info, &r.lines, rows))
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// Local time as (YYYYmmdd-HHMMSS, YYYY-MM-DD HH:MM).
fn now() -> (String, String) {
    let time = qpip_lab::local_time();
    let date = match time {
        Ok([y, mo, d, h, mi, _]) => format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}"),
        Err(t) => format!("t{t}"),
    };
    (qpip_lab::timestamp_of(time), date)
}
