//! A results JSON read back (the demo's `results.json`, the bench's `qp-sockets-*.json`):
//! the run's facts, the raw measurements of every round, the comparison recomputed from
//! them as the run computed it, and the layouts' rows. The report is rebuilt from it
//! without running anything.

use super::layouts::LayoutRow;
use super::lines::{lines, Line};
use super::report::{CpuMark, CpuWindow, Measurements, Round};
use super::run_info::RunInfo;
use super::spread::Better;
use serde_json::Value;
use std::collections::BTreeMap;

/// Everything a results file holds, ready to render.
#[derive(Debug, Clone)]
pub struct SavedRun {
    pub info: RunInfo,
    pub measurements: Measurements,
    pub lines: Vec<Line>,
    pub layouts: Vec<LayoutRow>,
}

impl SavedRun {
    pub fn from_json(j: &Value) -> Result<SavedRun, String> {
        let info = RunInfo::from_json(j)?;
        let measurements = measurements(&j["rounds"])?;
        // The run's own rule (`demo::run`): the bench's passes (several sizes, or CPU
        // windows marked) have the detailed lines.
        let detail =
            info.plan.tcp_sizes.len() > 1 || measurements.rounds.iter().any(|r| !r.cpu.is_empty());
        let lines = lines(&measurements, detail);
        let layouts = match &j["layouts"] {
            Value::Null => Vec::new(),
            l => layout_rows(&l["rows"])?,
        };
        Ok(SavedRun {
            info,
            measurements,
            lines,
            layouts,
        })
    }

    /// Reads the results file at `path`.
    pub fn read(path: &std::path::Path) -> Result<SavedRun, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let j: Value = serde_json::from_str(&text)
            .map_err(|e| format!("{} is not JSON: {e}", path.display()))?;
        SavedRun::from_json(&j).map_err(|e| format!("{}: {e}", path.display()))
    }
}

/// The measurements of the results' `rounds`, as [`super::json_value`] wrote them.
fn measurements(rounds: &Value) -> Result<Measurements, String> {
    let rounds = rounds.as_array().ok_or("the results have no rounds")?;
    let mut m = Measurements::default();
    for (i, r) in rounds.iter().enumerate() {
        let bad = |what: &str| format!("round {} of the results: {what}", i + 1);
        let mut round = Round::default();
        for (test, rows) in r["qpip_perf"]
            .as_object()
            .ok_or_else(|| bad("no qpip_perf"))?
        {
            let rows = rows.as_array().ok_or_else(|| bad("rows not a list"))?;
            round.perf.insert(test.clone(), rows.clone());
        }
        for (net, b) in r["bulk"].as_object().ok_or_else(|| bad("no bulk"))? {
            let (Some(bytes), Some(secs)) = (b["bytes"].as_u64(), b["seconds"].as_f64()) else {
                return Err(bad("unreadable bulk transfer"));
            };
            round.bulk.insert(net.clone(), (bytes, secs));
        }
        round.overhead = rows_of(&r["qpip_overhead"]);
        round.overhead_spin = rows_of(&r["qpip_overhead_spin"]);
        // Results of runs without CPU windows (the demo) may lack the field.
        let windows = r["cpu_windows"].as_object().into_iter().flatten();
        for (name, w) in windows {
            let edge = |e: &str| match &w[e] {
                Value::Null => Ok(None),
                v => mark(v).map(Some).ok_or_else(|| bad("unreadable CPU mark")),
            };
            round.cpu.insert(
                name.clone(),
                CpuWindow {
                    start: edge("start")?,
                    end: edge("end")?,
                },
            );
        }
        m.rounds.push(round);
    }
    Ok(m)
}

fn rows_of(v: &Value) -> Vec<Value> {
    v.as_array().cloned().unwrap_or_default()
}

fn mark(v: &Value) -> Option<CpuMark> {
    let stat =
        |k: &str| -> Option<Vec<u64>> { v[k].as_array()?.iter().map(Value::as_u64).collect() };
    let host: Option<BTreeMap<String, f64>> = v["host_cpu_s"]
        .as_object()?
        .iter()
        .map(|(k, s)| Some((k.clone(), s.as_f64()?)))
        .collect();
    Some(CpuMark {
        a: stat("a_proc_stat")?,
        b: stat("b_proc_stat")?,
        host: host?,
    })
}

/// The unit of a figure as the lines name it.
fn unit(u: &str) -> Option<&'static str> {
    ["µs", "MB/s", "%"].into_iter().find(|k| *k == u)
}

/// The layouts' rows as [`super::layout_json`] wrote them.
fn layout_rows(rows: &Value) -> Result<Vec<LayoutRow>, String> {
    let rows = rows.as_array().ok_or("the results' layouts have no rows")?;
    let side = |v: &Value| -> Option<Vec<Option<f64>>> {
        Some(v["rounds"].as_array()?.iter().map(Value::as_f64).collect())
    };
    rows.iter()
        .map(|r| {
            let what = r["what"].as_str().ok_or("a layouts row has no name")?;
            let bad = || format!("the layouts row {what:?} is unreadable");
            let unit = r["unit"].as_str().and_then(unit).ok_or_else(bad)?;
            Ok(LayoutRow {
                what: what.to_string(),
                unit,
                // Bandwidth is better higher; round trips and CPU per message lower.
                better: if unit == "MB/s" {
                    Better::Higher
                } else {
                    Better::Lower
                },
                adapter: side(&r["adapter"]).ok_or_else(bad)?,
                per_guest: side(&r["per_guest"]).ok_or_else(bad)?,
            })
        })
        .collect()
}
