//! The C examples compiled with the system C compiler against `include/qpip.h` and
//! `libqpip.so` (warnings are errors), then run on the software provider:
//! `examples/pingpong.c` (UDP and TCP ping-pong and the error codes of misused calls) and
//! `examples/iwarp.c` (every iWARP and tripwire call: misused ones get their error codes,
//! and the software provider refuses iWARP QPs, remote rights and tripwires with
//! QPIP_E_UNSUPPORTED).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// `target/<profile>`, where cargo puts libqpip.so (this test runs from `deps/` below it).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(Path::parent).unwrap().to_path_buf()
}

/// Has cargo build libqpip.so, up to date, into [`target_dir`]; returns that directory.
///
/// Cargo does not build a library that is only a `cdylib` before the crate's tests (a test
/// cannot link one), and the crate has no `rlib`: its output would be `libqpip.rlib`, the
/// verbs library's name too. So the test asks for it, as a user would, with the profile
/// it was built with; cargo no longer holds the build directory's lock while tests run.
fn library_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = target_dir();
        let profile = match dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") => "dev",
            Some(name) => name,
            None => panic!("no profile directory above {}", dir.display()),
        };
        let out = Command::new(env!("CARGO"))
            .args([
                "build",
                "--quiet",
                "--lib",
                "-p",
                "qpip-capi",
                "--profile",
                profile,
            ])
            .arg("--manifest-path")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
            .arg("--target-dir")
            .arg(dir.parent().unwrap())
            .output()
            .expect("run cargo");
        assert!(
            out.status.success(),
            "cargo build -p qpip-capi failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            dir.join("libqpip.so").is_file(),
            "cargo built no libqpip.so in {}",
            dir.display()
        );
        dir
    })
}

/// Compiles `examples/<name>.c` into the test's directory; returns the executable.
fn build(name: &str) -> PathBuf {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let lib_dir = library_dir();
    let out_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let exe = out_dir.join(name);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let build = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O2"])
        .arg("-I")
        .arg(crate_dir.join("include"))
        .arg(crate_dir.join(format!("examples/{name}.c")))
        .arg("-L")
        .arg(lib_dir)
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
