//! qpipd's command line: bad input gives one clear line and exit status 2.

use std::process::Command;

fn qpipd(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_qpipd"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn unknown_flag_is_one_line_and_exit_2() {
    let (code, _, err) = qpipd(&["--socket", "/tmp/x.sock", "--frobnicate"]);
    assert_eq!(code, 2);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--frobnicate"), "{err}");
}

#[test]
fn missing_socket_is_one_line_and_exit_2() {
    let (code, _, err) = qpipd(&[]);
    assert_eq!(code, 2);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--socket"), "{err}");
}

#[test]
fn bad_value_is_one_line_and_exit_2() {
    let (code, _, err) = qpipd(&["--socket", "/tmp/x.sock", "--advertise-abi-major", "lots"]);
    assert_eq!(code, 2);
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn help_lists_the_socket_option() {
    let (code, out, _) = qpipd(&["--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("--socket"));
    assert!(
        !out.contains("advertise-abi-major"),
        "test-only flag stays hidden"
    );
}

#[test]
fn a_path_that_is_not_a_socket_is_refused_clearly() {
    let file = std::env::temp_dir().join(format!("qpipd-cli-{}", std::process::id()));
    std::fs::write(&file, b"not a socket").unwrap();
    let (code, _, err) = qpipd(&["--socket", file.to_str().unwrap()]);
    std::fs::remove_file(&file).unwrap();
    assert_eq!(code, 1);
    assert!(err.contains("is not a socket"), "{err}");
}

#[test]
fn more_addresses_than_the_device_holds_are_refused_clearly() {
    let ips: Vec<String> = (1..=9).map(|i| format!("fd51:5050::{i}/64")).collect();
    let mut args = vec!["--socket", "/tmp/x.sock"];
    for ip in &ips {
        args.extend(["--ip", ip.as_str()]);
    }
    let (code, _, err) = qpipd(&args);
    assert_eq!(code, 2);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("at most 8 --ip addresses"), "{err}");
}

#[test]
fn tcp_retries_is_documented_and_bounded() {
    let (code, out, _) = qpipd(&["--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("--tcp-retries"), "{out}");
    assert!(
        out.contains("RFC 9293"),
        "help says what the limit is: {out}"
    );
    for bad in ["0", "31", "many"] {
        let (code, _, err) = qpipd(&["--socket", "/tmp/x.sock", "--tcp-retries", bad]);
        assert_eq!(code, 2, "--tcp-retries {bad}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("--tcp-retries"), "{err}");
    }
}
