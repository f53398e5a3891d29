//! What a results file says about its run beside the figures: when and where it ran (date,
//! commit, the host's CPUs and load), what it measured (the plan's counts and sizes) and how
//! long it took. The demo and the bench write it into their JSON; the report is rebuilt
//! from it (see [`super::saved`]).

use crate::demo::Plan;
use serde_json::{json, Value};
use std::path::Path;

/// The plan's figures the report names.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanFacts {
    pub latency_iters: u64,
    pub tcp_sizes: Vec<u64>,
    pub udp_sizes: Vec<u64>,
    pub bw_bytes: u64,
    pub bulk_bytes: u64,
    pub rounds: u32,
    pub interleave: bool,
    /// The TCP message size from which bandwidth tests move more bytes, and how many.
    pub tcp_large_message: u64,
    pub tcp_large_message_bytes: u64,
}

impl PlanFacts {
    pub fn of(plan: &Plan) -> PlanFacts {
        PlanFacts {
            latency_iters: plan.latency_iters,
            tcp_sizes: plan.tcp_sizes.iter().map(|s| *s as u64).collect(),
            udp_sizes: plan.udp_sizes.iter().map(|s| *s as u64).collect(),
            bw_bytes: plan.bw_bytes,
            bulk_bytes: plan.bulk_bytes,
            rounds: plan.rounds,
            interleave: plan.interleave,
            tcp_large_message: crate::demo::LARGE_MSG as u64,
            tcp_large_message_bytes: plan.tcp_bw_bytes(crate::demo::LARGE_MSG),
        }
    }
}

/// The facts of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunInfo {
    /// The `./qpip` command that ran: `demo` or `bench`.
    pub what: String,
    /// Local time when the results were written, `YYYY-MM-DD HH:MM`.
    pub date: String,
    pub unix_time: u64,
    pub accel: String,
    pub host_cpus: usize,
    /// The host CPU's model as `/proc/cpuinfo` names it (None: not known, or results older
    /// than the field).
    pub host_cpu_model: Option<String>,
    /// The commit of the tree that ran (None: not in a git checkout, or older results).
    pub commit: Option<String>,
    /// Whether that tree had changes not committed (None: not known).
    pub uncommitted_changes: Option<bool>,
    /// The host's load average (1, 5, 15 minutes) at the start (the bench) and the end.
    pub load_start: Option<String>,
    pub load_end: String,
    /// Wall time of the main pass, boot to power-off.
    pub wall_s: f64,
    pub qpipd_layout: String,
    pub qpipd_args: Vec<String>,
    pub plan: PlanFacts,
}

impl RunInfo {
    /// The run's facts as the top-level fields of its JSON (`layouts` is the caller's).
    pub fn json_fields(&self) -> serde_json::Map<String, Value> {
        let p = &self.plan;
        let v = json!({
            "tool": format!("qpip-lab {}", self.what),
            "date": self.date,
            "unix_time": self.unix_time,
            "accel": self.accel,
            "host_cpus": self.host_cpus,
            "host_cpu_model": self.host_cpu_model,
            "commit": self.commit,
            "uncommitted_changes": self.uncommitted_changes,
            "load_start": self.load_start,
            "load_end": self.load_end,
            "wall_s": self.wall_s,
            "qpipd_layout": self.qpipd_layout,
            "qpipd_args": self.qpipd_args,
            "plan": {
                "latency_iters": p.latency_iters,
                "tcp_sizes": p.tcp_sizes,
                "udp_sizes": p.udp_sizes,
                "bw_bytes": p.bw_bytes,
                "bulk_bytes": p.bulk_bytes,
                "rounds": p.rounds,
                "interleave": p.interleave,
                "tcp_large_message": p.tcp_large_message,
                "tcp_large_message_bytes": p.tcp_large_message_bytes,
            },
        });
        match v {
            Value::Object(m) => m,
            _ => unreachable!("json! of an object"),
        }
    }

    /// The facts from a results JSON; fields added later (CPU model, commit) may be
    /// missing, the others must be there.
    pub fn from_json(j: &Value) -> Result<RunInfo, String> {
        let need = |v: &Value, key: &str| -> Result<Value, String> {
            match &v[key] {
                Value::Null => Err(format!("the results have no {key:?}")),
                x => Ok(x.clone()),
            }
        };
        let text = |v: &Value, key: &str| -> Result<String, String> {
            need(v, key)?
                .as_str()
                .map(str::to_string)
                .ok_or_else(|| format!("the results' {key:?} is not text"))
        };
        let num = |v: &Value, key: &str| -> Result<u64, String> {
            need(v, key)?
                .as_u64()
                .ok_or_else(|| format!("the results' {key:?} is not a count"))
        };
        let sizes = |v: &Value, key: &str| -> Result<Vec<u64>, String> {
            need(v, key)?
                .as_array()
                .and_then(|a| a.iter().map(Value::as_u64).collect())
                .ok_or_else(|| format!("the results' {key:?} is not a list of sizes"))
        };
        let optional = |key: &str| j[key].as_str().map(str::to_string);
        let tool = text(j, "tool")?;
        let what = tool
            .strip_prefix("qpip-lab ")
            .ok_or_else(|| format!("the results come from {tool:?}, not qpip-lab"))?;
        let p = need(j, "plan")?;
        Ok(RunInfo {
            what: what.to_string(),
            date: text(j, "date")?,
            unix_time: num(j, "unix_time")?,
            accel: text(j, "accel")?,
            host_cpus: num(j, "host_cpus")? as usize,
            host_cpu_model: optional("host_cpu_model"),
            commit: optional("commit"),
            uncommitted_changes: j["uncommitted_changes"].as_bool(),
            load_start: optional("load_start"),
            load_end: text(j, "load_end")?,
            wall_s: need(j, "wall_s")?
                .as_f64()
                .ok_or("the results' \"wall_s\" is not a number")?,
            qpipd_layout: text(j, "qpipd_layout")?,
            qpipd_args: j["qpipd_args"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default(),
            plan: PlanFacts {
                latency_iters: num(&p, "latency_iters")?,
                tcp_sizes: sizes(&p, "tcp_sizes")?,
                udp_sizes: sizes(&p, "udp_sizes")?,
                bw_bytes: num(&p, "bw_bytes")?,
                bulk_bytes: num(&p, "bulk_bytes")?,
                rounds: num(&p, "rounds")? as u32,
                interleave: p["interleave"].as_bool().unwrap_or(false),
                tcp_large_message: num(&p, "tcp_large_message")?,
                tcp_large_message_bytes: num(&p, "tcp_large_message_bytes")?,
            },
        })
    }
}

/// The model name of the host's first CPU in `/proc/cpuinfo` (x86's `model name`; other
/// architectures' nearest line), if it has one.
pub fn host_cpu_model() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    ["model name", "Model", "cpu model", "Hardware"]
        .iter()
        .find_map(|key| {
            info.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == *key && !v.trim().is_empty()).then(|| v.trim().to_string())
            })
        })
}

/// The commit checked out in `repo` and whether its tracked files have changes, if `git`
/// can tell.
pub fn commit_of(repo: &Path) -> (Option<String>, Option<bool>) {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(repo)
            .args(args)
            .stderr(std::process::Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let commit = git(&["rev-parse", "HEAD"]).filter(|c| !c.is_empty());
    let changed = commit
        .as_ref()
        .and_then(|_| git(&["status", "--porcelain", "--untracked-files=no"]))
        .map(|s| !s.is_empty());
    (commit, changed)
}
