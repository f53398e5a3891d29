//! A pass of its own for a part of the bench (storage, sockets): guests a and b booted with
//! their scripts, guest a's steps watched, the host answering the CPU marks; the guests'
//! failures turned into one error naming the step.

use super::host_side::serve_cpu_marks;
use super::results::Measurements;
use super::watch::Watcher;
use super::{lab_error, DemoError, Step};
use crate::{run_lab, GuestSpec, LabOutcome, LabSpec, Network, Stream, VmSpec};
use std::time::Duration;

/// What a part runs: its guests' scripts, the steps guest a reports, how many rounds, and
/// the guests' RAM, devices and limit.
pub(super) struct PassSpec<'a> {
    /// The guests as the boot's progress line names them (`guests a and b`).
    pub(super) guests: &'static str,
    pub(super) guest_a: String,
    pub(super) guest_b: String,
    pub(super) steps: Vec<Step>,
    pub(super) rounds: u32,
    pub(super) memory_mib: u32,
    /// Boot to power-off, for the whole pass.
    pub(super) limit: Duration,
    pub(super) layout: crate::QpipdLayout,
    pub(super) qpipd_args: &'a [String],
}

/// What a pass that passed every step brought back.
pub(super) struct PassOutput {
    /// Everything guest a printed.
    pub(super) lines_a: String,
    /// What the watcher read from it (the CPU windows).
    pub(super) measurements: Measurements,
    pub(super) outcome: LabOutcome<()>,
    /// Boot to power-off.
    pub(super) elapsed: Duration,
}

impl PassOutput {
    /// An error of the pass that no step names, with its run folder.
    pub(super) fn fail(&self, message: String) -> DemoError {
        DemoError {
            step: None,
            message,
            dir: Some(self.outcome.dir.clone()),
            interrupted: false,
        }
    }
}

/// Boots guests a and b in namespace `netns` with `spec`'s scripts; `progress` gets a line
/// per step (`verbose`: every line the guests print). An error names the step that failed,
/// or a guest whose script failed without naming one.
pub(super) fn run_pass(
    spec: PassSpec,
    netns: &str,
    verbose: bool,
    progress: &mut dyn FnMut(&str),
) -> Result<PassOutput, DemoError> {
    let started = std::time::Instant::now();
    progress(&format!(
        "booting {} (QEMU, TCG, {} MiB each) on the lab network (namespace {netns}) ...",
        spec.guests, spec.memory_mib
    ));
    let vm = |cmd: String| VmSpec {
        timeout: spec.limit,
        memory_mib: spec.memory_mib,
        qpipd_args: vec![spec.qpipd_args.to_vec()],
        ..VmSpec::new(cmd)
    };
    let lab = LabSpec {
        guests: vec![
            GuestSpec::new("a", vm(spec.guest_a)),
            GuestSpec::new("b", vm(spec.guest_b)),
        ],
        network: Network::Lab(netns.to_string()),
        layout: spec.layout,
    };
    let mut watcher = Watcher::new(spec.steps, spec.rounds as usize, progress, verbose);
    let limit = spec.limit;
    let mut lines_a = String::new();
    let result = {
        let watcher = &mut watcher;
        let lines_a = &mut lines_a;
        let mut observe = |i: usize, s: Stream, b: &[u8]| {
            if s == Stream::Output {
                watcher.feed(i, b);
                if i == 0 {
                    lines_a.push_str(&String::from_utf8_lossy(b));
                }
            }
        };
        run_lab(&lab, &mut observe, |host| serve_cpu_marks(host, limit))
    };
    let outcome = result.map_err(|e| lab_error(e, &watcher))?;
    let fail = |step: Option<String>, message: String| DemoError {
        step,
        message,
        dir: Some(outcome.dir.clone()),
        interrupted: false,
    };
    if let Some((id, why)) = &watcher.failure {
        return Err(fail(Some(watcher.describe(id)), why.clone()));
    }
    for g in &outcome.guests {
        if g.status != 0 {
            return Err(fail(
                None,
                format!(
                    "a guest's script exited with status {} without naming a failed step; its output:\n{}",
                    g.status,
                    g.output.trim_end()
                ),
            ));
        }
    }
    if let Some(e) = &watcher.bad_line {
        return Err(fail(None, e.clone()));
    }
    Ok(PassOutput {
        lines_a,
        measurements: watcher.measurements,
        outcome,
        elapsed: started.elapsed(),
    })
}
