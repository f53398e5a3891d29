//! qpipd's command line: bad input gives one clear line and exit status 2.

use std::process::{Command, Stdio};
use std::time::Duration;

/// Runs qpipd with `args` and returns its exit code and output. One that starts serving
/// (the arguments were taken) instead of exiting is stopped after 10 s: the test fails on
/// its exit code rather than hanging.
fn qpipd(args: &[&str]) -> (i32, String, String) {
    let child = Command::new(env!("CARGO_BIN_EXE_qpipd"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if done_rx.recv_timeout(Duration::from_secs(10)).is_err() {
            // SAFETY: kill(2) on the child's pid, which is not reaped before
            // wait_with_output below returns.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
    });
    let out = child.wait_with_output().unwrap();
    let _ = done_tx.send(());
    watchdog.join().unwrap();
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

#[test]
fn routes_are_documented_and_bad_ones_refused_in_one_line() {
    let (code, out, _) = qpipd(&["--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("--route <PREFIX via GATEWAY>"), "{out}");
    let net = ["--socket", "/tmp/x.sock", "--net", "tap:qpip-none"];
    let many: Vec<String> = (0..33)
        .map(|i| format!("fd51:5050::{i:x}:0/112 via fd51:5050::1"))
        .collect();
    let mut too_many = net.to_vec();
    for r in &many {
        too_many.extend(["--route", r.as_str()]);
    }
    for (args, says) in [
        (vec!["198.18.1.0/24"], "is not PREFIX via GATEWAY"),
        (vec!["198.18.1.1/24 via 198.18.0.1"], "bits set beyond"),
        (
            vec!["198.18.1.0/24 via fd51:5050::1"],
            "not of the destination's family",
        ),
        (vec!["default via nowhere"], "gateway 'nowhere'"),
        (vec!["fd51::/129 via fd51:5050::1"], "not 0..128"),
        (
            vec!["default via fd51:5050::1", "::/0 via fd51:5050::2"],
            "two --route's for ::/0",
        ),
    ] {
        let mut a = net.to_vec();
        for r in &args {
            a.extend(["--route", r]);
        }
        let (code, _, err) = qpipd(&a);
        assert_eq!(code, 2, "{args:?}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    let (code, _, err) = qpipd(&too_many);
    assert_eq!(code, 2);
    assert!(err.contains("at most 32 --route's"), "{err}");
    // Routes need a link.
    let (code, _, err) = qpipd(&["--socket", "/tmp/x.sock", "--route", "default via fd51::1"]);
    assert_eq!(code, 2);
    assert!(err.contains("--net"), "{err}");
}

#[test]
fn functions_of_an_adapter_are_checked_with_one_line_each() {
    let f = |spec: &str| vec!["--function".to_string(), spec.to_string()];
    let cases: Vec<(Vec<String>, &str)> = vec![
        (f("mac=02:00:00:00:00:01"), "needs socket=PATH"),
        (f("socket=/tmp/a.sock,colour=red"), "unknown key 'colour'"),
        (f("socket=/tmp/a.sock,pcap="), "one non-empty pcap="),
        (f("socket=/tmp/a.sock,ip=fd51::1"), "needs a prefix length"),
        (
            f("socket=/tmp/a.sock,mac=01:00:00:00:00:01"),
            "not a unicast MAC",
        ),
        (
            [f("socket=/tmp/a.sock"), f("socket=/tmp/a.sock")].concat(),
            "two functions on socket /tmp/a.sock",
        ),
        (
            [
                f("socket=/tmp/a.sock,mac=02:00:00:00:00:07"),
                f("socket=/tmp/b.sock,mac=02:00:00:00:00:07"),
            ]
            .concat(),
            "two functions with MAC 02:00:00:00:00:07",
        ),
        (
            [
                f("socket=/tmp/a.sock,ip=fd51:5050::7/64"),
                f("socket=/tmp/b.sock,ip=fd51:5050::7/64"),
            ]
            .concat(),
            "two functions with address fd51:5050::7",
        ),
        (
            [
                f("socket=/tmp/a.sock,trusted"),
                vec!["--port-macs".to_string(), "0".to_string()],
            ]
            .concat(),
            "'0' is not 1..=4096",
        ),
        (f("socket=/tmp/a.sock,trusted=yes"), "unknown key 'trusted'"),
        (
            f(&(1..=9)
                .map(|i| format!("ip=fd51:5050::{i}/64"))
                .chain(["socket=/tmp/a.sock".to_string()])
                .collect::<Vec<_>>()
                .join(",")),
            "function 0: at most 8 ip= addresses",
        ),
        (
            [
                vec!["--socket".to_string(), "/tmp/x.sock".to_string()],
                f("socket=/tmp/a.sock"),
            ]
            .concat(),
            "cannot be used with",
        ),
        (
            [vec![
                "--engine-threads".to_string(),
                "2".to_string(),
                "--socket".to_string(),
                "/tmp/x.sock".to_string(),
            ]]
            .concat(),
            "--function",
        ),
    ];
    for (args, want) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, _, err) = qpipd(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: wanted '{want}' in: {err}");
    }
}

#[test]
fn ipv4_addresses_are_taken_and_bad_ones_refused_in_one_line() {
    for (bad, says) in [
        ("198.18.0.2", "needs a prefix length"),
        ("198.18.0.2/33", "prefix length '33' is not 1..32"),
        ("198.18.0/24", "is not an IPv6 or IPv4 address"),
        ("255.255.255.255/32", "not a unicast address"),
        ("127.0.0.1/8", "not a unicast address"),
    ] {
        let (code, _, err) = qpipd(&["--socket", "/tmp/x.sock", "--ip", bad]);
        assert_eq!(code, 2, "--ip {bad}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(says), "--ip {bad}: {err}");
    }
    // Taken beside an IPv6 address: qpipd goes on to its socket (here not one).
    let file = std::env::temp_dir().join(format!("qpipd-cli4-{}", std::process::id()));
    std::fs::write(&file, b"not a socket").unwrap();
    let (code, _, err) = qpipd(&[
        "--socket",
        file.to_str().unwrap(),
        "--ip",
        "198.18.0.2/24",
        "--ip",
        "fd51:5050::1:1/64",
    ]);
    std::fs::remove_file(&file).unwrap();
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("is not a socket"), "{err}");
}
