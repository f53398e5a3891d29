//! What the VM test files share: the guest scripts' shell helpers, running a guest or a lab
//! (an interrupted run ends the test process, the lab having stopped its children) and
//! reading the `@key=value` report lines guest scripts print. Assertions are made in Rust,
//! and failures show the guest's whole report, its qpip kernel messages and the run folder.
#![allow(dead_code)] // each test file uses its own part

use std::time::{Duration, Instant};

pub mod traffic;

use qpip_lab::{
    run_lab, run_vm, GuestSpec, LabError, LabHost, LabOutcome, LabSpec, VmOutcome, VmSpec,
};

/// The shell helpers every guest script starts with: `kv`, `await`,
/// `await_unless_host_done`, `run` (see `guest.sh`). They travel in the script rather than
/// in the guest image: they are the tests' report format, and a change to them needs no
/// image rebuild.
pub const SHELL: &str = include_str!("guest.sh");

/// rping between two guests, on the qpip device or on soft-iWARP, tried again when siw's
/// responder stalls: `serve` and `client` (see `rping.sh`). For [`script`]'s `helpers`.
pub const RPING_SHELL: &str = include_str!("rping.sh");

/// A guest script: [`SHELL`], then a test file's own `helpers`, then `body`.
pub fn script(helpers: &str, body: &str) -> String {
    format!("{SHELL}{helpers}\n{body}")
}

/// A guest that runs `body` after [`SHELL`], with [`VmSpec::new`]'s defaults.
pub fn vm(body: &str) -> VmSpec {
    VmSpec::new(script("", body))
}

/// A lab guest named `name` that runs `cmd` (see [`script`]) within `timeout`, with 512 MiB.
pub fn lab_guest(name: impl Into<String>, cmd: String, timeout: Duration) -> GuestSpec {
    let mut vm = VmSpec::new(cmd);
    vm.timeout = timeout;
    vm.memory_mib = 512;
    GuestSpec::new(name, vm)
}

/// Runs the lab `spec` with `host` as its host side and returns what happened; panics if
/// the lab failed. Says how long it took and where its run folder is.
pub fn lab<R: Send>(spec: &LabSpec, host: impl FnOnce(&LabHost) -> R + Send) -> LabOutcome<R> {
    let t0 = Instant::now();
    let out = match run_lab(spec, &mut |_, _, _| {}, host) {
        Ok(out) => out,
        Err(e) if e.is_interrupted() => interrupted(&e),
        Err(e) => panic!("lab run failed: {e}"),
    };
    eprintln!(
        "lab of {} guests: {:.0} s (run folder {})",
        spec.guests.len(),
        t0.elapsed().as_secs_f64(),
        out.dir.display()
    );
    out
}

/// Whether the tests run as root, which the lab network needs.
pub fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Ends a test that needs the lab network, saying why, when it does not run as root.
#[allow(unused_macros)] // each test file uses its own part
macro_rules! needs_root {
    () => {
        if !$crate::common::root() {
            eprintln!("skipped: the lab network needs root (network namespace, bridge, TAPs)");
            return;
        }
    };
}
#[allow(unused_imports)]
pub(crate) use needs_root;

/// Boots a guest as `spec` says and returns what happened; panics if the lab failed.
pub fn boot(spec: &VmSpec) -> VmOutcome {
    match run_vm(spec) {
        Ok(outcome) => outcome,
        Err(e) if e.is_interrupted() => interrupted(&e),
        Err(e) => panic!("VM run failed: {e}"),
    }
}

/// Ends the test process after a Ctrl-C or SIGTERM (the lab has stopped its children).
pub fn interrupted(e: &LabError) -> ! {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{}", e.headline());
    std::process::exit(130);
}

/// The guest's `@key=value` report lines.
pub struct Report<'a> {
    pub outcome: &'a VmOutcome,
    pub pairs: Vec<(&'a str, &'a str)>,
}

impl<'a> Report<'a> {
    pub fn new(outcome: &'a VmOutcome) -> Report<'a> {
        let pairs = outcome
            .output
            .lines()
            .filter_map(|l| l.strip_prefix('@')?.split_once('='))
            .collect();
        Report { outcome, pairs }
    }

    /// The report of a guest whose script exited 0; the test fails, showing the report,
    /// if it did not.
    #[track_caller]
    pub fn succeeded(outcome: &'a VmOutcome) -> Report<'a> {
        let rep = Report::new(outcome);
        assert_eq!(outcome.status, 0, "guest script failed\n{}", rep.context());
        rep
    }

    pub fn all(&self, key: &str) -> Vec<&'a str> {
        self.pairs
            .iter()
            .filter(|(k, _)| *k == key)
            .map(|(_, v)| *v)
            .collect()
    }

    pub fn get(&self, key: &str) -> &'a str {
        match self.all(key).as_slice() {
            [v] => v,
            vs => panic!(
                "expected one '{key}' in the guest report, found {vs:?}\n{}",
                self.context()
            ),
        }
    }

    pub fn num(&self, key: &str) -> u64 {
        let v = self.get(key);
        v.parse()
            .unwrap_or_else(|_| panic!("'{key}' is {v:?}, not a number\n{}", self.context()))
    }

    /// Each `NAME.status` of `names` (a run of `tool NAME` in the guest) must be 0.
    pub fn statuses_zero(&self, tool: &str, names: &[&str]) {
        for t in names {
            assert_eq!(
                self.get(&format!("{t}.status")),
                "0",
                "{tool} {t}\n{}",
                self.context()
            );
        }
    }

    /// Every `check.NAME` the guest reported must be `ok`, and each of `required` must be
    /// among them (so a check that silently stopped running fails the test too).
    pub fn checks_pass(&self, required: &[&str]) {
        let failed: Vec<String> = self
            .pairs
            .iter()
            .filter(|(k, v)| k.starts_with("check.") && *v != "ok")
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        assert!(
            failed.is_empty(),
            "failed checks:\n  {}\n{}",
            failed.join("\n  "),
            self.context()
        );
        let missing: Vec<&&str> = required
            .iter()
            .filter(|name| self.all(&format!("check.{name}")).is_empty())
            .collect();
        assert!(
            missing.is_empty(),
            "checks that did not run: {missing:?}\n{}",
            self.context()
        );
    }

    pub fn context(&self) -> String {
        let qpip_dmesg: Vec<&str> = self
            .outcome
            .dmesg
            .lines()
            .filter(|l| l.contains("qpip"))
            .collect();
        format!(
            "--- guest output:\n{}--- qpip lines of the guest dmesg:\n{}\n--- run folder: {}",
            self.outcome.output,
            qpip_dmesg.join("\n"),
            self.outcome.run_dir.display()
        )
    }
}
