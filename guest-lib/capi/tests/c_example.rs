//! The C example (`examples/pingpong.c`) compiled with the system C compiler against
//! `include/qpip.h` and `libqpip.so` (warnings are errors), then run on the software
//! provider: UDP and TCP ping-pong and the error codes of misused calls.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `target/<profile>`, where cargo put libqpip.so (this test runs from `deps/` below it).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(Path::parent).unwrap().to_path_buf()
}

#[test]
fn c_pingpong_builds_and_runs_on_the_soft_provider() {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    // Cargo builds the library (both its crate types) before this test, into deps/; it
    // copies it up to target/<profile>/ only when the library itself was asked for.
    let lib_dir = [target_dir(), target_dir().join("deps")]
        .into_iter()
        .find(|d| d.join("libqpip.so").exists())
        .expect("cargo builds libqpip.so with this crate's tests");
    let out_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let exe = out_dir.join("pingpong");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let build = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O2"])
        .arg("-I")
        .arg(crate_dir.join("include"))
        .arg(crate_dir.join("examples/pingpong.c"))
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
        "{cc} failed:\n{}",
        String::from_utf8_lossy(&build.stderr)
    );

    let port = std::net::TcpListener::bind("[::1]:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let run = Command::new(&exe)
        .args(["200", &port.to_string()])
        .env("QPIP_PROVIDER", "soft")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "pingpong failed:\n{text}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    for line in [
        "provider soft",
        "udp ping-pong: 200 round trips ok",
        "tcp ping-pong: 200 round trips ok",
        "errors ok",
        "pingpong: all ok",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
}
