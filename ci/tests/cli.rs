//! The `./qpip` script's command line: every command answers `-h`/`--help` with its own
//! part of the usage and does nothing else (a bench or a demo is minutes of work), and a
//! command given an argument it does not know stops at once and says which it takes.
//! Nothing here needs root, a build or a guest.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The script at the root of the repository.
fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../qpip")
}

/// Runs `./qpip ARGS`, killing it if it is still running after `limit` (then the test
/// fails: it went on to do the work instead of answering).
fn qpip(args: &[&str], limit: Duration) -> Output {
    let mut child = Command::new(script())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run ./qpip");
    let t0 = Instant::now();
    while child.try_wait().expect("wait for ./qpip").is_none() {
        if t0.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("reap ./qpip");
            panic!(
                "./qpip {args:?} still running after {limit:?}; it printed:\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("reap ./qpip")
}

const QUICK: Duration = Duration::from_secs(20);

#[test]
fn every_command_answers_help_with_its_own_usage_and_runs_nothing() {
    for cmd in ["setup", "demo", "test", "fuzz", "bench", "stress"] {
        for flag in ["-h", "--help"] {
            let out = qpip(&[cmd, flag], QUICK);
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success(), "./qpip {cmd} {flag}: {out:?}");
            let first = text.lines().next().unwrap_or_default();
            assert!(
                first.starts_with(&format!("usage: ./qpip {cmd}")),
                "./qpip {cmd} {flag} printed:\n{text}"
            );
            assert!(
                !text.contains("usage: ./qpip COMMAND"),
                "./qpip {cmd} {flag} printed the whole usage:\n{text}"
            );
        }
    }
}

#[test]
fn bench_help_lists_the_options_of_both_parts() {
    let out = qpip(&["bench", "--help"], QUICK);
    let text = String::from_utf8_lossy(&out.stdout);
    for opt in [
        "--rounds N",
        "--guests-only",
        "--iters N",
        "--sleeping-iterations N",
        "--idle-poll-us",
        "--record",
        "--record-from FILE.json",
        "--sockets-only",
        "--no-sockets",
        "--sockets-secs",
        "docs/bench.md",
    ] {
        assert!(text.contains(opt), "no {opt} in:\n{text}");
    }
}

#[test]
fn bench_record_stops_at_once_when_it_has_nothing_to_record() {
    // --record is the guests' parts', which --engine-only skips.
    let out = qpip(&["bench", "--engine-only", "--record"], QUICK);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--record are for the guests' parts"), "{err}");
    // --record-from takes one results file that is there.
    for args in [
        &["bench", "--record-from"][..],
        &["bench", "--record-from", "a.json", "b.json"],
        &[
            "bench",
            "--record-from",
            "/nonexistent/qp-sockets-latest.json",
        ],
    ] {
        let out = qpip(args, QUICK);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(
            err.contains("--record-from takes one") || err.contains("no results file"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn help_alone_prints_every_command() {
    for args in [&["help"][..], &["--help"], &["help", "--help"]] {
        let out = qpip(args, QUICK);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success());
        for cmd in ["setup", "demo", "test", "vm", "fuzz", "bench", "stress"] {
            assert!(
                text.contains(&format!("\n  {cmd}")),
                "./qpip {args:?}: no {cmd}:\n{text}"
            );
        }
    }
}

#[test]
fn an_unknown_argument_stops_the_command_and_names_the_ones_it_takes() {
    let out = qpip(&["demo", "--bogus"], QUICK);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("'--bogus'") && err.contains("--qpipd-per-guest"),
        "{err}"
    );
    let out = qpip(&["stress", "--bogus"], QUICK);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("stress takes no arguments"));
}
