//! The C examples compiled with the system C compiler against `include/qpip.h` and
//! `libqpip.so` (warnings are errors), then run on the software provider:
//! `examples/pingpong.c` (UDP and TCP ping-pong and the error codes of misused calls) and
//! `examples/iwarp.c` (every iWARP and tripwire call: misused ones get their error codes,
//! and the software provider refuses iWARP QPs, remote rights and tripwires with
//! QPIP_E_UNSUPPORTED).

use std::path::{Path, PathBuf};
use std::process::Command;

/// `target/<profile>`, where cargo put libqpip.so (this test runs from `deps/` below it).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(Path::parent).unwrap().to_path_buf()
}

/// Compiles `examples/<name>.c` into the test's directory; returns the executable.
fn build(name: &str) -> PathBuf {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    // Cargo builds the library (both its crate types) before this test, into deps/; it
    // copies it up to target/<profile>/ only when the library itself was asked for, so a
    // copy there may be older than the sources: the newer of the two is linked.
    let modified = |d: &PathBuf| {
        std::fs::metadata(d.join("libqpip.so"))
            .and_then(|m| m.modified())
            .ok()
    };
    let lib_dir = [target_dir().join("deps"), target_dir()]
        .into_iter()
        .filter(|d| modified(d).is_some())
        .max_by_key(|d| modified(d))
        .expect("cargo builds libqpip.so with this crate's tests");
    let out_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let exe = out_dir.join(name);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let build = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O2"])
        .arg("-I")
        .arg(crate_dir.join("include"))
        .arg(crate_dir.join(format!("examples/{name}.c")))
        .arg("-L")
        .arg(&lib_dir)
        .arg(format!("-Wl,-rpath,{}", lib_dir.display()))
        .arg("-lqpip")
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("run the C compiler");
    assert!(
        build.status.success(),
        "{cc} failed on {name}.c:\n{}",
        String::from_utf8_lossy(&build.stderr)
    );
    exe
}

/// A TCP port free on ::1 just now.
fn free_port() -> String {
    let l = std::net::TcpListener::bind("[::1]:0").unwrap();
    l.local_addr().unwrap().port().to_string()
}

/// Runs `exe args` on the software provider: it must succeed and print each of `lines`.
fn run_soft(exe: &Path, args: &[&str], lines: &[&str]) {
    // The library the program was linked with, found by its run path: cargo's
    // LD_LIBRARY_PATH for tests would come first and may name an older copy.
    let run = Command::new(exe)
        .args(args)
        .env_remove("LD_LIBRARY_PATH")
        .env("QPIP_PROVIDER", "soft")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{} failed:\n{text}{}",
        exe.display(),
        String::from_utf8_lossy(&run.stderr)
    );
    for line in lines {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
}

#[test]
fn c_pingpong_builds_and_runs_on_the_soft_provider() {
    let exe = build("pingpong");
    let port = free_port();
    run_soft(
        &exe,
        &["200", &port],
        &[
            "provider soft",
            "udp ping-pong: 200 round trips ok",
            "tcp ping-pong: 200 round trips ok",
            "errors ok",
            "pingpong: all ok",
        ],
    );
}

#[test]
fn c_iwarp_builds_and_is_refused_cleanly_on_the_soft_provider() {
    let exe = build("iwarp");
    let port = free_port();
    run_soft(
        &exe,
        &[&port],
        &[
            "provider soft",
            "iwarp misuse: error codes ok",
            "iwarp on the software provider: refused ok",
            "iwarp: all ok",
        ],
    );
}
