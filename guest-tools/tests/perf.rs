//! `qpip-perf` on the host: a server and a client with the software provider, and with
//! `--sockets`; the JSON output parses and holds every figure, the table lists every test.
//! No assertion on the figures themselves (timing depends on the machine).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::{TcpListener, UdpSocket};
use std::process::{Child, Command, Output, Stdio};

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A port free for both TCP and UDP (the server takes both).
fn free_port() -> u16 {
    loop {
        let t = TcpListener::bind("[::]:0").unwrap();
        let port = t.local_addr().unwrap().port();
        if UdpSocket::bind(("::", port)).is_ok() {
            return port;
        }
    }
}

fn server(extra: &[&str]) -> (Server, String) {
    let port = free_port().to_string();
    let mut child = Command::new(env!("CARGO_BIN_EXE_qpip-perf"))
        .args(["-s", "--provider", "soft", "--port", &port])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start qpip-perf -s");
    // It says so once it listens.
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.contains("serving"), "server said {line:?}");
    (Server(child), port)
}

fn client(port: &str, extra: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_qpip-perf"))
        .args([
            "::1",
            "--provider",
            "soft",
            "--port",
            port,
            "--iters",
            "200",
            "--bytes",
            "200000",
        ])
        .args(["--sizes", "64,1024,8192"])
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "qpip-perf {extra:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

// ---- a small JSON reader, enough to check the output is well-formed -----------------------

#[derive(Debug, Clone)]
enum J {
    Null,
    Num(f64),
    Str(String),
    Arr(Vec<J>),
    Obj(BTreeMap<String, J>),
    Bool(bool),
}

impl J {
    fn get(&self, k: &str) -> &J {
        match self {
            J::Obj(m) => m
                .get(k)
                .unwrap_or_else(|| panic!("no key {k:?} in {self:?}")),
            _ => panic!("not an object: {self:?}"),
        }
    }
    fn num(&self) -> f64 {
        match self {
            J::Num(x) => *x,
            _ => panic!("not a number: {self:?}"),
        }
    }
    fn str(&self) -> &str {
        match self {
            J::Str(s) => s,
            _ => panic!("not a string: {self:?}"),
        }
    }
}

fn parse_json(s: &str) -> J {
    let b = s.trim().as_bytes();
    let (v, rest) = value(b);
    assert!(
        rest.is_empty(),
        "trailing text after JSON: {:?}",
        String::from_utf8_lossy(rest)
    );
    v
}

fn ws(b: &[u8]) -> &[u8] {
    let n = b.iter().take_while(|c| c.is_ascii_whitespace()).count();
    &b[n..]
}

fn value(b: &[u8]) -> (J, &[u8]) {
    let b = ws(b);
    match b.first().copied() {
        Some(b'{') => {
            let mut m = BTreeMap::new();
            let mut b = ws(&b[1..]);
            if b[0] == b'}' {
                return (J::Obj(m), &b[1..]);
            }
            loop {
                let (k, r) = value(b);
                let r = ws(r);
                assert_eq!(r[0], b':', "expected ':'");
                let (v, r) = value(&r[1..]);
                m.insert(k.str().to_string(), v);
                let r = ws(r);
                match r[0] {
                    b',' => b = &r[1..],
                    b'}' => return (J::Obj(m), &r[1..]),
                    c => panic!("expected , or }} in object, found {:?}", c as char),
                }
            }
        }
        Some(b'[') => {
            let mut v = Vec::new();
            let mut b = ws(&b[1..]);
            if b[0] == b']' {
                return (J::Arr(v), &b[1..]);
            }
            loop {
                let (x, r) = value(b);
                v.push(x);
                let r = ws(r);
                match r[0] {
                    b',' => b = &r[1..],
                    b']' => return (J::Arr(v), &r[1..]),
                    c => panic!("expected , or ] in array, found {:?}", c as char),
                }
            }
        }
        Some(b'"') => {
            let end = b[1..]
                .iter()
                .position(|c| *c == b'"')
                .expect("unterminated string")
                + 1;
            let s = std::str::from_utf8(&b[1..end]).unwrap();
            assert!(!s.contains('\\'), "escapes are not expected here");
            (J::Str(s.to_string()), &b[end + 1..])
        }
        Some(b'n') if b.starts_with(b"null") => (J::Null, &b[4..]),
        Some(b't') if b.starts_with(b"true") => (J::Bool(true), &b[4..]),
        Some(b'f') if b.starts_with(b"false") => (J::Bool(false), &b[5..]),
        _ => {
            let n = b
                .iter()
                .take_while(|c| c.is_ascii_digit() || b"+-.eE".contains(c))
                .count();
            let x: f64 = std::str::from_utf8(&b[..n])
                .unwrap()
                .parse()
                .unwrap_or_else(|_| {
                    panic!(
                        "not JSON at {:?}",
                        String::from_utf8_lossy(&b[..b.len().min(40)])
                    )
                });
            (J::Num(x), &b[n..])
        }
    }
}

/// Every latency row has percentiles in order, every bandwidth row a rate; CPU figures are
/// there for both ends; TCP bandwidth delivered every byte.
fn check_json(out: &Output, net: &str) {
    let text = String::from_utf8(out.stdout.clone()).unwrap();
    let j = parse_json(&text);
    assert_eq!(j.get("tool").str(), "qpip-perf");
    assert_eq!(j.get("net").str(), net);
    if net == "qpip" {
        assert!(j.get("depth").num() >= 1.0);
    }
    let J::Arr(rows) = j.get("results") else {
        panic!("results is not an array")
    };
    let mut seen = Vec::new();
    for r in rows {
        let (test, transport, size) = (
            r.get("test").str(),
            r.get("transport").str(),
            r.get("size").num(),
        );
        seen.push(format!("{test}/{transport}/{size}"));
        assert!(r.get("msgs").num() > 0.0, "{r:?}");
        assert!(r.get("elapsed_s").num() > 0.0, "{r:?}");
        let cpu = r.get("cpu_us_per_msg");
        assert!(
            cpu.get("client").num() >= 0.0 && cpu.get("server").num() >= 0.0,
            "{r:?}"
        );
        // Counters per message on both sides: over QPs the library's (the software
        // provider has no device's), over sockets the guest's segments or datagrams sent
        // (a NIC's interrupts only with a NIC: not over loopback).
        for side in ["client", "server"] {
            let per = r.get("per_msg").get(side);
            let raw = r.get("counters").get(side);
            let keys: &[&str] = match (net, transport) {
                ("qpip", _) => &["kicks", "waits"],
                (_, "tcp") => &["tcp_segs_out"],
                _ => &["udp_tx"],
            };
            for k in keys {
                assert!(per.get(k).num() >= 0.0 && raw.get(k).num() >= 0.0, "{r:?}");
            }
            if net != "qpip" {
                let J::Obj(m) = raw else {
                    panic!("no counters in {r:?}")
                };
                assert!(!m.contains_key("nic_irqs"), "{r:?}");
                // What the client sent per message: at least the messages themselves
                // (a TCP stream of small messages may share segments).
                if side == "client" && (test == "latency" || transport == "udp") {
                    assert!(per.get(keys[0]).num() >= 1.0, "{r:?}");
                }
            }
        }
        if test == "latency" {
            let rtt = r.get("rtt_us");
            let (p50, p90, p99, max) = (
                rtt.get("p50").num(),
                rtt.get("p90").num(),
                rtt.get("p99").num(),
                rtt.get("max").num(),
            );
            assert!(0.0 < p50 && p50 <= p90 && p90 <= p99 && p99 <= max, "{r:?}");
            assert_eq!(size, 1.0);
        } else {
            assert!(r.get("mb_per_s").num() > 0.0, "{r:?}");
            if transport == "tcp" {
                assert_eq!(
                    r.get("bytes_received").num(),
                    r.get("bytes_sent").num(),
                    "{r:?}"
                );
                assert_eq!(r.get("loss").num(), 0.0, "{r:?}");
            }
        }
    }
    let want: Vec<String> = ["udp", "tcp"]
        .iter()
        .flat_map(|t| {
            std::iter::once(format!("latency/{t}/1")).chain(
                [64, 1024, 8192]
                    .iter()
                    .map(move |s| format!("bandwidth/{t}/{s}")),
            )
        })
        .collect();
    assert_eq!(seen, want);
}

#[test]
fn qp_server_and_client_json() {
    let (_s, port) = server(&[]);
    check_json(&client(&port, &["--json"]), "qpip");
    // Stream framing, both ends.
    let (_s, port) = server(&["--stream"]);
    check_json(&client(&port, &["--json", "--stream"]), "qpip");
    // Copying through shallow queues, both ends: messages wait for free buffers.
    let (_s, port) = server(&["--copy", "--depth", "3"]);
    let out = client(&port, &["--json", "--copy", "--depth", "3"]);
    check_json(&out, "qpip");
    let j = parse_json(&String::from_utf8(out.stdout).unwrap());
    assert_eq!(j.get("depth").num(), 3.0);
    assert!(matches!(j.get("copy"), J::Bool(true)));
}

#[test]
fn sockets_baseline_json_and_table() {
    let (_s, port) = server(&["--sockets"]);
    check_json(&client(&port, &["--json", "--sockets"]), "sockets");
    let out = client(&port, &["--sockets", "--tcp", "--test", "latency"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("kernel sockets"), "{text}");
    let row = text
        .lines()
        .find(|l| l.starts_with("latency "))
        .unwrap_or_else(|| panic!("{text}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols[1], "tcp", "{row}");
    for c in &cols[4..8] {
        c.parse::<f64>()
            .unwrap_or_else(|_| panic!("{c:?} in {row}"));
    }
    // The counters per message: segments out, no NIC over loopback.
    assert!(text.contains("\nper message"), "{text}");
    let counted = text
        .lines()
        .find(|l| l.starts_with("  latency   tcp"))
        .unwrap_or_else(|| panic!("{text}"));
    let cells: Vec<&str> = counted.split_whitespace().collect();
    assert_eq!(cells[3], "-/-", "{counted}");
    assert_ne!(cells[4], "-/-", "{counted}");
}

#[test]
fn table_and_usage_errors() {
    let (_s, port) = server(&[]);
    let out = client(&port, &["--udp"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("software provider"), "{text}");
    assert!(text.contains("depth 64, zero-copy"), "{text}");
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("bandwidth udp"))
            .count(),
        3,
        "{text}"
    );
    // The counters per message, a row for each test.
    assert!(text.contains("\nper message"), "{text}");
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("  bandwidth udp"))
            .count(),
        3,
        "{text}"
    );
    assert_eq!(
        text.lines().filter(|l| l.starts_with("latency ")).count(),
        1,
        "{text}"
    );
    let bad = Command::new(env!("CARGO_BIN_EXE_qpip-perf"))
        .args(["::1", "--sizes", "0"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--sizes 0"));
    let bad = Command::new(env!("CARGO_BIN_EXE_qpip-perf"))
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    let bad = Command::new(env!("CARGO_BIN_EXE_qpip-perf"))
        .args(["::1", "--depth", "0"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--depth 0"));
}
