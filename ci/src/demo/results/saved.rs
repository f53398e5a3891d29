//! A results JSON read back (the demo's `results.json`, the bench's `qp-sockets-*.json`):
//! the run's facts, the raw measurements of every round, the comparison recomputed from
//! them as the run computed it, and the layouts' rows. The report is rebuilt from it
//! without running anything.

use super::layouts::LayoutRow;
use super::lines::{lines, Line};
use super::report::{CpuMark, CpuWindow, Measurements, Round};
use super::run_info::RunInfo;
use super::sockets::SocketsRun;
use super::spread::Better;
use super::storage::StorageRun;
use serde_json::Value;
use std::collections::BTreeMap;

/// Everything a results file holds, ready to render.
#[derive(Debug, Clone)]
pub struct SavedRun {
    pub info: RunInfo,
    pub measurements: Measurements,
    pub lines: Vec<Line>,
    pub layouts: Vec<LayoutRow>,
    /// The storage part, when the run had it.
    pub storage: Option<StorageRun>,
    /// The sockets part, when the run had it.
    pub sockets: Option<SocketsRun>,
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
        let storage = match &j["storage"] {
            Value::Null => None,
            s => Some(StorageRun::from_json(s)?),
        };
        let sockets = match &j["sockets"] {
            Value::Null => None,
            s => Some(SocketsRun::from_json(s)?),
        };
        Ok(SavedRun {
            info,
            measurements,
            lines,
            layouts,
            storage,
            sockets,
        })
    }

    /// When and where the run was, as a part's recorded section says it.
    pub fn measured(&self) -> super::record::Measured<'_> {
        super::record::Measured {
            date: &self.info.date,
            commit: self.info.commit.as_deref(),
            load: self
                .info
                .load_start
                .as_deref()
                .map(|s| (s, self.info.load_end.as_str())),
        }
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

#[cfg(test)]
mod tests {
    use super::super::fixtures::{close, netdev_rounds, same_as_saved, saved_results};
    use super::super::{json_value, markdown_table, text_table};
    use super::*;

    #[test]
    fn a_results_file_reads_back_as_the_run_wrote_it() {
        let j = saved_results();
        let run = SavedRun::from_json(&j).unwrap();
        // The raw rounds come back whole, so the lines are the run's.
        assert_eq!(
            json_value(&run.measurements, &run.lines)["rounds"],
            j["rounds"]
        );
        assert!(run
            .lines
            .iter()
            .any(|l| l.what == "TCP ping-pong, round trip p90"));
        assert!(run.lines.iter().any(|l| l.host_cpu.is_some()));
        let info = &run.info;
        assert_eq!((info.what.as_str(), info.host_cpus), ("bench", 2));
        assert_eq!(
            info.commit.as_deref(),
            Some("0123456789abcdef0123456789abcdef01234567")
        );
        assert_eq!(info.uncommitted_changes, Some(false));
        assert_eq!(info.plan.tcp_sizes, [1024, 8192, 65536, 262144]);
        // The facts write back the fields they were read from.
        for (k, v) in info.json_fields() {
            assert_eq!(v, j[&k], "{k}");
        }
        assert_eq!(run.layouts.len(), 4);
        assert_eq!(run.layouts[1].per_guest, [Some(240.0), Some(230.0), None]);
        assert_eq!(run.layouts[2].better, Better::Higher);
        assert_eq!(run.layouts[0].ratio(), Some(0.8));
    }

    /// A whole results JSON of a bench with sockets over the qpip netdev and QPs over IPv4
    /// (`testdata/bench-netdev.json`): the facts of `bench-facts.json`, the comparison and
    /// rounds of [`netdev_rounds`].
    fn netdev_results() -> Value {
        let m = netdev_rounds();
        let mut j = saved_results();
        let v = json_value(&m, &lines(&m, true));
        j["comparison"] = v["comparison"].clone();
        j["rounds"] = v["rounds"].clone();
        j
    }

    #[test]
    fn a_results_file_with_the_netdev_and_ipv4_rows_reads_back_with_their_columns() {
        let j = netdev_results();
        same_as_saved(
            "bench-netdev.json",
            &(serde_json::to_string_pretty(&j).unwrap() + "\n"),
        );
        let saved: Value =
            serde_json::from_str(include_str!("testdata/bench-netdev.json")).unwrap();
        let run = SavedRun::from_json(&saved).unwrap();
        // The raw rounds come back whole; the comparison is recomputed from them (its
        // figures may differ from the file's in the last bit: JSON's decimals).
        assert!(json_value(&run.measurements, &run.lines)["rounds"] == saved["rounds"]);
        let gains = |c: &Value| -> Vec<(String, Option<f64>)> {
            c.as_array()
                .unwrap()
                .iter()
                .map(|l| (l["what"].to_string(), l["netdev_gain"].as_f64()))
                .collect()
        };
        let (now, then) = (
            gains(&json_value(&run.measurements, &run.lines)["comparison"]),
            gains(&saved["comparison"]),
        );
        assert_eq!(now.len(), then.len());
        for (a, b) in now.iter().zip(&then) {
            assert_eq!(a.0, b.0);
            assert!(a.1.zip(b.1).is_none_or(|(a, b)| close(a, b)), "{a:?} {b:?}");
        }
        assert!(run.lines.iter().any(|l| l.netdev_gain().is_some()));
        assert!(run.lines.iter().any(|l| l.ipv4_ratio().is_some()));
        same_as_saved("netdev.txt", &text_table(&run.lines));
        same_as_saved("netdev.md", &markdown_table(&run.lines));
        let md = super::super::markdown_body(&run.info, &run.lines, &run.layouts, 2);
        assert!(
            md.contains("Also measured: kernel sockets through the guests' qpip netdevs")
                && md.contains("; QPs over IPv4 (the block QPs over IPv4 vs IPv6).\n"),
            "{md}"
        );
        // A file from before these rows reads back without them.
        let old = SavedRun::from_json(&saved_results()).unwrap();
        assert!(!old.lines.iter().any(|l| l.has_netdev() || l.has_qp4()));
        let md = super::super::markdown_body(&old.info, &old.lines, &old.layouts, 2);
        assert!(!md.contains("Also measured") && !md.contains("netdev"));
    }

    #[test]
    fn older_results_lack_the_commit_and_cpu_model_and_broken_ones_are_errors() {
        let mut j = saved_results();
        for k in ["commit", "uncommitted_changes", "host_cpu_model", "layouts"] {
            j.as_object_mut().unwrap().remove(k);
        }
        let run = SavedRun::from_json(&j).unwrap();
        assert_eq!(run.info.commit, None);
        assert_eq!(run.info.uncommitted_changes, None);
        assert_eq!(run.info.host_cpu_model, None);
        assert!(run.layouts.is_empty());
        let broken = |edit: &dyn Fn(&mut Value)| {
            let mut b = saved_results();
            edit(&mut b);
            SavedRun::from_json(&b).unwrap_err()
        };
        assert!(broken(&|b| b["tool"] = "engine_bench".into()).contains("not qpip-lab"));
        assert!(broken(&|b| b["plan"] = Value::Null).contains("\"plan\""));
        assert!(broken(&|b| b["rounds"] = 1.into()).contains("no rounds"));
        assert!(
            broken(&|b| b["rounds"][0]["bulk"]["qp"]["bytes"] = "x".into()).contains("round 1")
        );
        assert!(broken(&|b| b["layouts"]["rows"][0]["unit"] = "s".into()).contains("UDP ping-pong"));
    }

    #[test]
    fn a_bench_with_its_storage_part_reads_it_back() {
        let mut j = saved_results();
        assert!(SavedRun::from_json(&j).unwrap().storage.is_none());
        let storage = super::super::storage::tests::run();
        j["storage"] = storage.json();
        j["storage"]["wall_s"] = 600.0.into();
        assert_eq!(SavedRun::from_json(&j).unwrap().storage, Some(storage));
        j["storage"]["rounds"] = 1.into();
        assert!(SavedRun::from_json(&j).unwrap_err().contains("storage"));
    }
}
