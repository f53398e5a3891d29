//! qpip sockets: unmodified socket programs in the guests with their TCP sockets on the qpip
//! device, through the preload library (`qpip-run CMD`, docs/sockets.md): iperf3 with the
//! lab host's, lab-sockets-check (the descriptor semantics such programs rely on: epoll,
//! fork, SCM_RIGHTS, sendfile...) with the lab host's and the other guest's, nginx serving
//! wrk and curl, valkey-server serving valkey-benchmark, sockperf's ping-pong. The guests
//! talk over their devices' addresses; each test checks the programs' results (bytes by
//! SHA-256, the benchmarks' counts) and that their sockets really were the device's: the
//! preload's counters (`QPIP_PRELOAD_STATS`: connections it put on the device) and the
//! device's own TCP counters (`/sys/class/qpip/qpip0/counters`: connections opened).
//!
//! `QPIP_SOCKETS_BASELINE=1` runs the same programs and checks without qpip-run, over the
//! guests' virtio-net NICs (kernel sockets): the tests' own logic, proven without the
//! device, which then must not have opened a single TCP connection.
//!
//! The programs come from the extras share (images/sockets-extras.sh, which ./qpip test
//! runs); lab-sockets-check is in the guest image (images/guest/lab-sockets-check.c), and
//! built for the lab host by the test that needs it.
//!
//! The VM tests are ignored by a plain `cargo test`; `./qpip test` runs them with
//! `-- --ignored`. They need root (namespace, bridge, TAPs). One test needs no VM and runs
//! with the unit tests: lab-sockets-check over the host's loopback.

mod common;

use common::{needs_root, Report};
use qpip_lab::{
    netns, unique_netns, GuestSpec, LabHost, LabOutcome, LabSpec, Network, QpipdLayout,
};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Whether the programs run under qpip-run on the devices' addresses, or plainly on the
/// virtio-net NICs' (`QPIP_SOCKETS_BASELINE=1`).
#[derive(Clone, Copy, PartialEq, Debug)]
enum Mode {
    Qpip,
    Baseline,
}

fn mode() -> Mode {
    match std::env::var("QPIP_SOCKETS_BASELINE").as_deref() {
        Ok("1") => Mode::Baseline,
        _ => Mode::Qpip,
    }
}

impl Mode {
    /// Guest `n`'s IPv6 and IPv4 addresses the programs use.
    fn addrs(self, n: usize) -> (String, String) {
        match self {
            Mode::Qpip => (netns::device_addr(n), netns::device_addr4(n)),
            Mode::Baseline => (netns::virtio_addr(n), netns::virtio_addr4(n)),
        }
    }

    /// The assignments a guest script starts with: MODE, and A6, A4, B6, B4 (guests a and
    /// b), H6, H4 (the lab host).
    fn prelude(self) -> String {
        let (a6, a4) = self.addrs(1);
        let (b6, b4) = self.addrs(2);
        let m = if self == Mode::Qpip {
            "qpip"
        } else {
            "baseline"
        };
        format!(
            "MODE={m}; A6={a6}; A4={a4}; B6={b6}; B4={b4}; H6={}; H4={}\n",
            netns::HOST_ADDR,
            netns::HOST_ADDR4
        )
    }
}

/// The shell helpers of this file's guest scripts (after common's `kv`, `await`, `run`).
///  ready               the extras share's programs on the PATH (`@extras.status`), and in
///                      the qpip mode qpip-run (`@qpip_run`: its path, or `missing`) and
///                      the lab routed through qpip0 (`@net.status`, lab-qpip-net); the
///                      script ends (status 1) without them
///  qrun TAG CMD...     CMD under qpip-run, its processes' preload counters appended to
///                      /tmp/TAG.stats; in the baseline CMD as it is
///  bgq TAG CMD...      `qrun TAG CMD` in the background (output /tmp/TAG.out, pid
///                      /tmp/TAG.pid: CMD's own, qpip-run and the wrappers exec it)
///  listening PORT      waits (up to 30 s) until something listens on TCP PORT
///  stop TAG [SIG]      signal SIG (default TERM) to TAG's process, waits for its end:
///                      `@TAG.status`, and `@TAG.tail`, the end of its output
///  pstats TAG          the preload's counters of TAG's processes, summed: `@TAG.pre.KEY`
///                      (`@TAG.pre.lines`: how many processes wrote theirs)
///  devc TAG            the device's TCP and UDP counters: `@TAG.KEY`
///  digest TAG FILE     `@TAG.sha` and `@TAG.bytes` of FILE
///  iperf TAG ARGS...    `qrun TAG iperf3 ARGS`, tried up to 3 times 1 s apart (an iperf3
///                      server still ending the previous run resets the next one's control
///                      connection): `@TAG.status`, `@TAG.tries`, `@TAG.receiver` (its
///                      receiver reports) and `@TAG.rate` (the last one's rate)
///  stall_state TAG PID PID's qpip sockets (fdinfo), its threads' kernel wait points and
///                      the device's counters as `@stall.TAG.*`
const HELPERS: &str = r#"
ready() {
    lab-extras >/tmp/extras.log 2>&1; st=$?; kv extras.status $st
    [ $st = 0 ] || { cat /tmp/extras.log; exit 1; }
    if [ "$MODE" = qpip ]; then
        q=$(command -v qpip-run) || { kv qpip_run missing; exit 1; }
        kv qpip_run "$q"
        lab-qpip-net >/tmp/net.log 2>&1; st=$?; kv net.status $st
        [ $st = 0 ] || { cat /tmp/net.log; exit 1; }
    fi
}
# (Not $t: `run TAG qrun ...` keeps its own tag there.)
qrun() {
    q=$1; shift
    if [ "$MODE" = qpip ]; then QPIP_PRELOAD_STATS=/tmp/$q.stats qpip-run "$@"; else "$@"; fi
}
bgq() {
    t=$1; shift
    if [ "$MODE" = qpip ]; then QPIP_PRELOAD_STATS=/tmp/$t.stats qpip-run "$@" >/tmp/$t.out 2>&1 &
    else "$@" >/tmp/$t.out 2>&1 &
    fi
    echo $! >/tmp/$t.pid
}
listening() {
    i=0
    until netstat -ltn 2>/dev/null | grep -q "[:.]$1 "; do
        i=$((i + 1)); [ $i -lt 300 ] || { kv "listen.$1" failed; return 1; }; sleep 0.1
    done
}
stop() {
    p=$(cat /tmp/$1.pid); kill -${2:-TERM} $p 2>/dev/null; wait $p; kv $1.status $?
    kv $1.tail "$(tail -n 4 /tmp/$1.out | tr '\n\r' '  ')"
}
pstats() {
    kv $1.pre.lines "$(cat /tmp/$1.stats 2>/dev/null | grep -c ' stats ')"
    for k in connect_qpip listen_qpip accept_qpip accept_kernel udp_connect_qpip udp_bind_qpip \
             declined_port fast_mapped fast_opts fast_sendfiles; do
        kv $1.pre.$k "$(cat /tmp/$1.stats 2>/dev/null | awk -v k=$k '
            { for (i = 1; i <= NF; i++) if (index($i, k "=") == 1) s += substr($i, length(k) + 2) }
            END { print s + 0 }')"
    done
}
devc() {
    for c in tcp_active_opens tcp_passive_opens tcp_segs_in tcp_segs_out udp_tx udp_rx; do
        kv "$1.$c" "$(cat /sys/class/qpip/qpip0/counters/$c 2>/dev/null || echo missing)"
    done
}
digest() { kv "$1.sha" "$(sha256sum < "$2" | cut -d' ' -f1)"; kv "$1.bytes" "$(wc -c < "$2")"; }
# stall_state TAG PID: PID's qpip sockets (fdinfo), its threads' kernel wait points and
# the device's counters, as `@stall.TAG.*`, for a program that stopped making progress.
iperf() {
    t=$1; shift
    for i in 1 2 3; do
        qrun $t iperf3 "$@" >/tmp/run.$t 2>&1; st=$?
        [ $st = 0 ] && break
        sleep 1
    done
    cat /tmp/run.$t; kv $t.status $st; kv $t.tries $i
    kv $t.receiver "$(grep -c receiver /tmp/run.$t)"
    kv $t.rate "$(grep receiver /tmp/run.$t | tail -n 1 | grep -o '[0-9.]* [KMG]*bits/sec')"
}
stall_state() {
    for f in /proc/$2/fd/*; do case $(readlink $f) in *qpip-socket*)
        kv stall.$1.fd${f##*/} "$(grep qpip /proc/$2/fdinfo/${f##*/} | tr '\t\n' ' ;')";; esac
    done
    for t in /proc/$2/task/*; do
        kv stall.$1.task${t##*/} "$(cat $t/wchan 2>/dev/null) $(tr '\n' ';' < $t/stack 2>/dev/null)"
    done
    kv stall.$1.dev "$(cd /sys/class/qpip/qpip0/counters && grep -H . * 2>/dev/null | tr '\n' ' ')"
    # Where its time goes: user and system ticks, and the system call it is in, sampled.
    kv stall.$1.stat "$(cut -d' ' -f14,15 /proc/$2/stat)"
    i=0; while [ $i -lt 10 ]; do
        kv stall.$1.sys$i "$(cat /proc/$2/syscall 2>/dev/null)"; i=$((i + 1)); sleep 0.1
    done
    kv stall.$1.stat2 "$(cut -d' ' -f14,15 /proc/$2/stat)"
    kv stall.$1.fds "$(ls -l /proc/$2/fd | awk '{print $9 $10 $11}' | tr '\n' ' ')"
}
"#;

/// A lab guest running `body` after the helpers and the mode's addresses.
fn guest(name: &str, body: &str, timeout_s: u64) -> GuestSpec {
    let script = common::script(HELPERS, &format!("{}{body}", mode().prelude()));
    common::lab_guest(name, script, Duration::from_secs(timeout_s))
}

fn lab<R: Send>(guests: Vec<GuestSpec>, host: impl FnOnce(&LabHost) -> R + Send) -> LabOutcome<R> {
    let spec = LabSpec {
        guests,
        network: Network::Lab(unique_netns("qpip-sockets")),
        layout: QpipdLayout::Adapter,
    };
    common::lab(&spec, host)
}

/// The guest had what the test runs: the extras share, and qpip-run in the qpip mode.
fn assert_ready(r: &Report) {
    let ctx = r.context();
    assert_eq!(
        r.get("extras.status"),
        "0",
        "lab-extras failed (the socket programs come from images/sockets-extras.sh)\n{ctx}"
    );
    if mode() == Mode::Qpip {
        assert_ne!(
            r.get("qpip_run"),
            "missing",
            "no qpip-run in the guest image (QPIP_SOCKETS_BASELINE=1 runs the tests without it)\n{ctx}"
        );
        assert_eq!(
            r.get("net.status"),
            "0",
            "lab-qpip-net could not route the lab through qpip0\n{ctx}"
        );
    }
}

/// The preload counter `key` summed over the processes of `tag`.
fn pre(r: &Report, tag: &str, key: &str) -> u64 {
    r.num(&format!("{tag}.pre.{key}"))
}

/// Tag's programs put at least `connects` outgoing and `accepts` accepted connections on
/// the device (the preload's counters), in the qpip mode; nothing to check in the baseline.
fn assert_preload(r: &Report, tag: &str, connects: u64, accepts: u64) {
    if mode() == Mode::Baseline {
        return;
    }
    let ctx = r.context();
    assert!(
        r.num(&format!("{tag}.pre.lines")) > 0,
        "{tag}: no process wrote its preload counters (QPIP_PRELOAD_STATS)\n{ctx}"
    );
    assert!(
        pre(r, tag, "connect_qpip") >= connects,
        "{tag}: {} connects on the device, expected at least {connects}\n{ctx}",
        pre(r, tag, "connect_qpip")
    );
    assert!(
        pre(r, tag, "accept_qpip") >= accepts,
        "{tag}: {} accepted on the device, expected at least {accepts}\n{ctx}",
        pre(r, tag, "accept_qpip")
    );
    if accepts > 0 {
        assert!(
            pre(r, tag, "listen_qpip") >= 1,
            "{tag}: no listener on the device\n{ctx}"
        );
    }
}

/// The device of the guest of report `r` opened at least `active` connections and took at
/// least `passive` between `devc before` and `devc after`, in the qpip mode; in the
/// baseline it opened and took none (the programs used virtio-net, and the check would see
/// a fallback to kernel sockets).
fn assert_device_opens(r: &Report, active: u64, passive: u64) {
    let ctx = r.context();
    let grew = |c: &str| r.num(&format!("after.{c}")) - r.num(&format!("before.{c}"));
    let (a, p) = (grew("tcp_active_opens"), grew("tcp_passive_opens"));
    match mode() {
        Mode::Qpip => {
            assert!(
                a >= active && p >= passive,
                "the device opened {a} connections and took {p}; expected at least {active} and {passive}\n{ctx}"
            );
            assert!(grew("tcp_segs_in") > 0 && grew("tcp_segs_out") > 0, "{ctx}");
        }
        Mode::Baseline => assert_eq!(
            (a, p),
            (0, 0),
            "the baseline's programs must not use the device\n{ctx}"
        ),
    }
}

/// Guest `name`'s report, its script having found its programs and exited 0.
fn report<'a, R>(out: &'a LabOutcome<R>, name: &str) -> Report<'a> {
    assert_ready(&Report::new(out.guest(name)));
    Report::succeeded(out.guest(name))
}

/// Guests a's and b's reports (see [`report`]).
fn pair<R>(out: &LabOutcome<R>) -> (Report<'_>, Report<'_>) {
    (report(out, "a"), report(out, "b"))
}

/// A host command's output, or why it failed; `timeout` bounds it.
fn host_run(host: &LabHost, secs: u64, cmd: &str) -> Result<String, String> {
    host.sh(&format!("timeout {secs} {cmd} 2>&1"))
}

/// The lab host's side of an iperf3 test: its server on port 5299 for the guest's clients
/// (from `TAG-host-up` to the guest's `TAG-guest-up`), then `clients` (iperf3's arguments)
/// against the guest's server, each tried up to 3 times 1 s apart as in the guest, then
/// `TAG-host-done`. Their outputs, in order.
fn host_iperf(host: &LabHost, tag: &str, clients: &[String]) -> Result<Vec<String>, String> {
    let server = host
        .command("iperf3")
        .args(["-s", "-p", "5299"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let Ok(mut server) = server else {
        let _ = host.signal(&format!("{tag}-host-up"));
        let _ = host.signal(&format!("{tag}-host-done"));
        return Err("the lab host has no iperf3 (./qpip setup installs it)".to_string());
    };
    std::thread::sleep(Duration::from_millis(500));
    let _ = host.signal(&format!("{tag}-host-up"));
    let up = host.wait_for(&format!("{tag}-guest-up"), Duration::from_secs(200));
    let _ = server.kill();
    let _ = server.wait();
    let iperf = |args: &String| {
        let mut last = Err(String::new());
        for _ in 0..3 {
            last = host_run(host, 60, &format!("iperf3 {args}"));
            if last.is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        last
    };
    let runs = up.and_then(|_| clients.iter().map(iperf).collect());
    let _ = host.signal(&format!("{tag}-host-done"));
    runs
}

/// The rate of an iperf3 run's receiver summary ("… 1.23 Gbits/sec … receiver").
fn iperf_rate(text: &str) -> Option<String> {
    let line = text.lines().rfind(|l| l.contains("receiver"))?;
    let w: Vec<&str> = line.split_whitespace().collect();
    let i = w.iter().position(|x| x.ends_with("bits/sec"))?;
    Some(format!("{} {}", w[i - 1], w[i]))
}

/// iperf3 in guest a against the lab host's iperf3 server (4 parallel streams over IPv6,
/// then reversed over IPv4), then the lab host's iperf3 client against an iperf3 server in
/// guest a, the same two ways: 2 s each. Every run completes with a receiver rate; in the
/// qpip mode every connection is the device's (preload and device counters).
#[test]
#[ignore = "boots VMs: run by ./qpip test"]
fn iperf3_with_the_lab_host_both_ways() {
    needs_root!();
    let a = guest(
        "a",
        r#"
ready; devc before
await iperf-host-up
iperf up6 -c $H6 -p 5299 -t 2 -P 4
iperf down4 -c $H4 -p 5299 -t 2 -R
bgq srv iperf3 -s -p 5201
listening 5201; touch /lab/iperf-guest-up
await iperf-host-done
stop srv
devc after
pstats up6; pstats down4; pstats srv
"#,
        300,
    );
    let (a6, a4) = mode().addrs(1);
    let out = lab(vec![a], |host: &LabHost| {
        host_iperf(
            host,
            "iperf",
            &[
                format!("-c {a6} -p 5201 -t 2 -P 4"),
                format!("-c {a4} -p 5201 -t 2 -R"),
            ],
        )
    });
    let a = report(&out, "a");
    let ctx = a.context();
    a.statuses_zero("iperf3 -c", &["up6", "down4"]);
    for t in ["up6", "down4"] {
        assert_ne!(
            a.get(&format!("{t}.rate")),
            "",
            "{t}: no receiver rate\n{ctx}"
        );
        eprintln!(
            "  guest a → lab host, {t}: {} ({} tries)",
            a.get(&format!("{t}.rate")),
            a.get(&format!("{t}.tries"))
        );
    }
    let (p4, r) = match &out.host {
        Ok(v) => (&v[0], &v[1]),
        Err(e) => panic!("the lab host's iperf3 client: {e}\n{ctx}"),
    };
    for (what, text) in [("-P 4", p4), ("-R", r)] {
        let rate = iperf_rate(text)
            .unwrap_or_else(|| panic!("lab host iperf3 {what}: no receiver rate:\n{text}\n{ctx}"));
        eprintln!("  lab host → guest a, {what}: {rate}");
    }
    // A control connection and the data streams each.
    assert_preload(&a, "up6", 5, 0);
    assert_preload(&a, "down4", 2, 0);
    assert_preload(&a, "srv", 0, 7);
    assert_device_opens(&a, 7, 7);
}

/// The device of the guest of report `r` sent at least `tx` and delivered at least `rx` UDP
/// datagrams between `devc before` and `devc after` in the qpip mode, none in the baseline:
/// a UDP socket left on the kernel would not count.
fn assert_device_udp(r: &Report, tx: u64, rx: u64) {
    let ctx = r.context();
    let grew = |c: &str| r.num(&format!("after.{c}")) - r.num(&format!("before.{c}"));
    let (t, x) = (grew("udp_tx"), grew("udp_rx"));
    match mode() {
        Mode::Qpip => assert!(
            t >= tx && x >= rx,
            "the device sent {t} UDP datagrams and delivered {x}; expected at least {tx} and {rx}\n{ctx}"
        ),
        Mode::Baseline => assert_eq!(
            (t, x),
            (0, 0),
            "the baseline's programs must not use the device\n{ctx}"
        ),
    }
}

/// Tag's programs put at least `n` UDP sockets on the device (the preload's counters: made
/// by connect or by bind), in the qpip mode.
fn assert_preload_udp(r: &Report, tag: &str, n: u64) {
    if mode() == Mode::Baseline {
        return;
    }
    let ctx = r.context();
    let got = pre(r, tag, "udp_connect_qpip") + pre(r, tag, "udp_bind_qpip");
    assert!(
        got >= n,
        "{tag}: {got} UDP sockets on the device, expected at least {n}\n{ctx}"
    );
}

/// iperf3 over UDP (`-u`, 2 s at 20 Mbit/s): guest a's client against the lab host's
/// server (IPv6 with 2 streams, then reversed over IPv4), the lab host's client against guest
/// a's server (the same two ways: its 2 streams share the server's port, each connected
/// socket steered its client's datagrams by the device), then guest a's client against guest b's server (both under
/// qpip-run: qpip ⇄ qpip, IPv6 and reversed over IPv4). Every run ends with a receiver
/// report; in the qpip mode the guests' UDP sockets were the device's (the preload's
/// counters) and the devices sent and delivered the datagrams (their UDP counters).
#[test]
#[ignore = "boots VMs: run by ./qpip test"]
fn iperf3_udp_with_the_lab_host_and_between_guests() {
    needs_root!();
    let a = guest(
        "a",
        r#"
ready; devc before
await udp-host-up
iperf up6 -u -b 20M -c $H6 -p 5299 -t 2 -P 2
iperf down4 -u -b 20M -c $H4 -p 5299 -t 2 -R
bgq srv iperf3 -s -p 5201
listening 5201; touch /lab/udp-guest-up
await udp-host-done
stop srv
await udp-b-up
iperf g6 -u -b 20M -c $B6 -p 5202 -t 2
iperf g4 -u -b 20M -c $B4 -p 5202 -t 2 -R
touch /lab/udp-a-done
devc after
pstats up6; pstats down4; pstats srv; pstats g6; pstats g4
"#,
        300,
    );
    let b = guest(
        "b",
        r#"
ready; devc before
bgq bsrv iperf3 -s -p 5202
listening 5202; touch /lab/udp-b-up
await udp-a-done
stop bsrv
devc after
pstats bsrv
"#,
        300,
    );
    let (a6, a4) = mode().addrs(1);
    let out = lab(vec![a, b], |host: &LabHost| {
        host_iperf(
            host,
            "udp",
            &[
                format!("-u -b 20M -c {a6} -p 5201 -t 2 -P 2"),
                format!("-u -b 20M -c {a4} -p 5201 -t 2 -R"),
            ],
        )
    });
    let (a, b) = pair(&out);
    let ctx = a.context();
    a.statuses_zero("iperf3 -u -c", &["up6", "down4", "g6", "g4"]);
    for t in ["up6", "down4", "g6", "g4"] {
        assert!(
            a.num(&format!("{t}.receiver")) > 0,
            "{t}: no receiver report\n{ctx}"
        );
    }
    let (u, r) = match &out.host {
        Ok(v) => (&v[0], &v[1]),
        Err(e) => panic!("the lab host's iperf3 client: {e}\n{ctx}"),
    };
    for (what, text) in [("-u", u), ("-u -R", r)] {
        assert!(
            text.contains("receiver"),
            "lab host iperf3 {what}: no receiver report:\n{text}\n{ctx}"
        );
    }
    // The data sockets of each run (the control connection is TCP's).
    for (t, streams) in [("up6", 2), ("down4", 1), ("g6", 1), ("g4", 1)] {
        assert_preload_udp(&a, t, streams);
        assert_preload(&a, t, 1, 0);
    }
    // Both of the host's streams were heard by guest a's server.
    assert_udp_streams_heard(u, 2, &ctx);
    // The server binds a socket per stream on its port (SO_REUSEADDR): with 2 streams and
    // then 1, and a socket waiting for a next stream each time, five binds, all the
    // device's: none left to the kernel for want of the port.
    assert_preload_udp(&a, "srv", 5);
    if mode() == Mode::Qpip {
        assert_eq!(
            pre(&a, "srv", "declined_port"),
            0,
            "a socket sharing the server's port stayed the kernel's\n{ctx}"
        );
    }
    assert_preload_udp(&b, "bsrv", 2);
    // 20 Mbit/s for 2 s is well over a thousand datagrams each way; a hundred is plenty.
    assert_device_udp(&a, 100, 100);
    assert_device_udp(&b, 100, 100);
}

/// An iperf3 UDP client's output (`text`) has a receiver report for each of its `streams`
/// streams (and their sum), each with datagrams received.
fn assert_udp_streams_heard(text: &str, streams: usize, ctx: &str) {
    // "[  5]   0.00-2.00  sec  4.77 MBytes  20.0 Mbits/sec  0.020 ms  0/3456 (0%)  receiver"
    let received: Vec<u64> = text
        .lines()
        .filter(|l| l.contains("receiver") && !l.contains("[SUM]"))
        .filter_map(|l| {
            // The first "LOST/TOTAL" word (not "Mbits/sec").
            l.split_whitespace().find_map(|w| {
                let (lost, total) = w.split_once('/')?;
                Some(
                    total
                        .parse::<u64>()
                        .ok()?
                        .saturating_sub(lost.parse().ok()?),
                )
            })
        })
        .collect();
    assert_eq!(
        received.len(),
        streams,
        "receiver reports of {streams} streams expected:\n{text}\n{ctx}"
    );
    assert!(
        received.iter().all(|&n| n > 0),
        "a stream's datagrams were not heard: {received:?}\n{text}\n{ctx}"
    );
}

/// lab-sockets-check built for the lab host (the guest image has its own build).
fn host_sockets_check() -> PathBuf {
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("lab-sockets-check");
    let src = qpip_lab::paths::root().join("images/guest/lab-sockets-check.c");
    let st = Command::new("cc")
        .args(["-O2", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("run cc");
    assert!(st.success(), "cannot build {}", src.display());
    out
}

/// lab-sockets-check on the host's loopback, a server and a client of each family: every
/// check passes on plain kernel sockets (what the guests' runs are measured against).
/// No VM: runs with the unit tests.
#[test]
fn lab_sockets_check_passes_on_loopback() {
    let bin = host_sockets_check();
    // A free port whose next one is free too (the client's closed port).
    let port = (0..50)
        .find_map(|_| {
            let l = std::net::TcpListener::bind("[::]:0").ok()?;
            let p = l.local_addr().ok()?.port();
            (p < 65535 && std::net::TcpListener::bind(("::", p + 1)).is_ok()).then_some(p)
        })
        .expect("a free pair of ports");
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let log = dir.join(format!("lab-sockets-check-{}.out", std::process::id()));
    let f = std::fs::File::create(&log).unwrap();
    let server = Command::new(&bin)
        .args(["server", &port.to_string(), "2"])
        .stdout(f.try_clone().unwrap())
        .stderr(f)
        .spawn()
        .expect("start the server");
    // Until it listens.
    let t0 = Instant::now();
    while !std::fs::read_to_string(&log).is_ok_and(|t| t.contains("listening")) {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the server never listened"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    for addr in ["::1", "127.0.0.1"] {
        let out = Command::new(&bin)
            .args(["client", addr, &port.to_string()])
            .output()
            .expect("run the client");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("all checks passed"),
            "client of {addr}: {}\n{text}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let served = finish(server, &log, Duration::from_secs(60));
    let _ = std::fs::remove_file(&log);
    match served {
        Ok(text) => assert!(text.contains("served 2 clients"), "{text}"),
        Err(e) => panic!("the server: {e}"),
    }
}

/// What the lab host's lab-sockets-check did: its clients' outputs against guest a (IPv6,
/// IPv4), and its server's output and exit status (serving guest a's two clients).
#[derive(Debug)]
struct HostChecks {
    clients: Result<(String, String), String>,
    server: Result<String, String>,
}

/// Waits for `child` up to `limit`, killing it then; its output file's text, or why not.
fn finish(
    mut child: std::process::Child,
    out: &std::path::Path,
    limit: Duration,
) -> Result<String, String> {
    let t0 = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break st,
            Ok(None) if t0.elapsed() < limit => std::thread::sleep(Duration::from_millis(100)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "still running after {} s:\n{}",
                    limit.as_secs(),
                    std::fs::read_to_string(out).unwrap_or_default()
                ));
            }
        }
    };
    let text = std::fs::read_to_string(out).map_err(|e| e.to_string())?;
    if status.success() {
        Ok(text)
    } else {
        Err(format!("{status}:\n{text}"))
    }
}

/// lab-sockets-check's server in guest a (under qpip-run) serves the lab host's clients
/// (IPv6 and IPv4), then guest b's (IPv6, under qpip-run; the server takes one client at a
/// time); meanwhile guest a's clients (under
/// qpip-run) run against the lab host's server (IPv6 and IPv4). Every check of each pair
/// passes: epoll, connect, fork, SCM_RIGHTS, shutdown, options, dup2, sendfile/splice,
/// iovecs.
#[test]
#[ignore = "boots VMs: run by ./qpip test"]
fn lab_sockets_check_with_the_lab_host_and_between_guests() {
    needs_root!();
    let bin = host_sockets_check();
    let a = guest(
        "a",
        r#"
ready; devc before
bgq srv lab-sockets-check server 7700 3
listening 7700; touch /lab/lsc-a-up
await lsc-host-up
run cli6 qrun cli6 lab-sockets-check client $H6 7710
run cli4 qrun cli4 lab-sockets-check client $H4 7710
wait $(cat /tmp/srv.pid); kv srv.status $?
sed 's/^/srv: /' /tmp/srv.out
kv srv.served "$(grep -c '^served 3 clients' /tmp/srv.out)"
devc after
pstats srv; pstats cli6; pstats cli4
"#,
        300,
    );
    let b = guest(
        "b",
        r#"
ready; devc before
await lsc-host-clients-done
run b6 qrun b6 lab-sockets-check client $A6 7700
devc after
pstats b6
"#,
        300,
    );
    let (a6, a4) = mode().addrs(1);
    let out = lab(vec![a, b], |host: &LabHost| {
        let log = host.shared_dir().join("host-server.out");
        let server = std::fs::File::create(&log).and_then(|f| {
            host.command(&bin)
                .args(["server", "7710", "2"])
                .stdout(f.try_clone()?)
                .stderr(f)
                .spawn()
        });
        let server = match server {
            Ok(s) => s,
            Err(e) => {
                let _ = host.signal("lsc-host-up");
                let _ = host.signal("lsc-host-clients-done");
                let e = format!("cannot start {}: {e}", bin.display());
                return HostChecks {
                    clients: Err(e.clone()),
                    server: Err(e),
                };
            }
        };
        std::thread::sleep(Duration::from_millis(300));
        let _ = host.signal("lsc-host-up");
        let clients = host
            .wait_for("lsc-a-up", Duration::from_secs(200))
            .and_then(|_| {
                let c6 = host_run(host, 120, &format!("{} client {a6} 7700", bin.display()))?;
                let c4 = host_run(host, 120, &format!("{} client {a4} 7700", bin.display()))?;
                Ok((c6, c4))
            });
        // Guest a's server takes one client at a time: guest b's comes after these.
        let _ = host.signal("lsc-host-clients-done");
        HostChecks {
            clients,
            server: finish(server, &log, Duration::from_secs(240)),
        }
    });
    let (a, b) = pair(&out);
    let ctx = a.context();
    a.statuses_zero(
        "lab-sockets-check client (to the lab host)",
        &["cli6", "cli4"],
    );
    b.statuses_zero("lab-sockets-check client (to guest a)", &["b6"]);
    assert_eq!(a.get("srv.status"), "0", "guest a's server\n{ctx}");
    assert_eq!(
        a.get("srv.served"),
        "1",
        "guest a's server served 3 clients\n{ctx}"
    );
    match &out.host.clients {
        Ok((c6, c4)) => {
            for c in [c6, c4] {
                assert!(
                    c.contains("all checks passed"),
                    "the lab host's client:\n{c}\n{ctx}"
                );
            }
        }
        Err(e) => panic!("the lab host's clients: {e}\n{ctx}"),
    }
    match &out.host.server {
        Ok(s) => assert!(
            s.contains("served 2 clients"),
            "the lab host's server:\n{s}\n{ctx}"
        ),
        Err(e) => panic!("the lab host's server: {e}\n{ctx}"),
    }
    // Each client run makes 14 connections (and tries 2 to a closed port).
    assert_preload(&a, "cli6", 10, 0);
    assert_preload(&a, "cli4", 10, 0);
    assert_preload(&a, "srv", 0, 30);
    assert_preload(&b, "b6", 10, 0);
    assert_device_opens(&a, 20, 30);
    assert_device_opens(&b, 10, 0);
}

/// nginx (2 worker processes, epoll) in guest a under qpip-run serves guest b's curl
/// (3 MB, IPv6 and IPv4, SHA-256 compared) and wrk (8 connections for 3 s over IPv6, no
/// error), both under qpip-run.
#[test]
#[ignore = "boots VMs: run by ./qpip test"]
fn nginx_serves_wrk_and_curl() {
    needs_root!();
    let a = guest(
        "a",
        r#"
ready; devc before
mkdir -p /tmp/www
head -c 3000000 /dev/urandom > /tmp/www/blob; digest blob /tmp/www/blob
head -c 65536 /dev/urandom > /tmp/www/64k
bgq nginx lab-nginx
listening 8080; touch /lab/nginx-up
await nginx-done
stop nginx QUIT
devc after
pstats nginx
"#,
        300,
    );
    let b = guest(
        "b",
        r#"
ready; devc before
await nginx-up
qrun curl6 curl -sS -g -o /tmp/c6 "http://[$A6]:8080/blob"; kv curl6.status $?; digest curl6 /tmp/c6
qrun curl4 curl -sS -o /tmp/c4 "http://$A4:8080/blob"; kv curl4.status $?; digest curl4 /tmp/c4
run wrk qrun wrk wrk -t 2 -c 8 -d 3s "http://[$A6]:8080/64k"
kv wrk.requests "$(sed -n 's/^ *\([0-9]*\) requests in .*/\1/p' /tmp/run.wrk)"
kv wrk.errors "$(grep -c -e 'Socket errors' -e 'Non-2xx' /tmp/run.wrk)"
kv wrk.rate "$(sed -n 's/^Requests\/sec: *//p' /tmp/run.wrk) requests/s"
touch /lab/nginx-done
devc after
pstats curl6; pstats curl4; pstats wrk
"#,
        300,
    );
    let out = lab(vec![a, b], |_| ());
    let (a, b) = pair(&out);
    let ctx = b.context();
    for t in ["curl6", "curl4"] {
        assert_eq!(b.get(&format!("{t}.status")), "0", "{t}\n{ctx}");
        assert_eq!(
            b.get(&format!("{t}.sha")),
            a.get("blob.sha"),
            "{t}: the file's bytes\n{ctx}"
        );
    }
    assert_eq!(b.get("wrk.status"), "0", "{ctx}");
    assert!(b.num("wrk.requests") > 0, "wrk made no request\n{ctx}");
    assert_eq!(
        b.get("wrk.errors"),
        "0",
        "wrk's socket errors or non-2xx answers\n{ctx}"
    );
    eprintln!("  wrk against nginx, 64 KiB: {}", b.get("wrk.rate"));
    assert_eq!(
        a.get("nginx.status"),
        "0",
        "nginx stopped cleanly\n{}",
        a.context()
    );
    assert_preload(&b, "curl6", 1, 0);
    assert_preload(&b, "curl4", 1, 0);
    assert_preload(&b, "wrk", 8, 0);
    assert_preload(&a, "nginx", 0, 10);
    assert_device_opens(&a, 0, 10);
    assert_device_opens(&b, 10, 0);
    if mode() == Mode::Qpip {
        // Every connection a worker accepted was its own to map (whichever process's
        // accept offered it: the master's listen, the other worker), and its responses'
        // TCP_CORK and sendfile took the fast path.
        let ctx = a.context();
        let (accepted, mapped) = (
            pre(&a, "nginx", "accept_qpip"),
            pre(&a, "nginx", "fast_mapped"),
        );
        assert!(
            mapped >= accepted,
            "nginx's workers mapped {mapped} of the {accepted} connections they accepted\n{ctx}"
        );
        assert!(
            pre(&a, "nginx", "fast_opts") > 0 && pre(&a, "nginx", "fast_sendfiles") > 0,
            "nginx's TCP_CORK and sendfile made system calls\n{ctx}"
        );
    }
}

/// valkey-server in guest a under qpip-run serves guest b's valkey-benchmark (2,000
/// requests each of PING, SET and GET over 50 connections, IPv6) and valkey-cli (a SET
/// over IPv4 read back over IPv6), both under qpip-run.
///
/// valkey-benchmark spins for good on a client whose write fails with anything but EAGAIN
/// (its writer takes every error for EAGAIN), so a connect that failed after EINPROGRESS —
/// as one did when the guest reused a port the device still had in TIME-WAIT — stalls the
/// whole run. A benchmark still running after 120 s records its and the server's qpip
/// sockets (`/proc/PID/fdinfo`), wait points and sampled system calls as `@stall.*`.
#[test]
#[ignore = "boots VMs: run by ./qpip test"]
fn valkey_serves_valkey_benchmark() {
    needs_root!();
    let a = guest(
        "a",
        r#"
ready; devc before
bgq valkey lab-valkey
listening 6379; touch /lab/valkey-up
# A stalled benchmark asks for the server's state before it is stopped.
until [ -e /lab/valkey-stall ] || [ -e /lab/valkey-done ]; do sleep 0.2; done
if [ -e /lab/valkey-stall ]; then stall_state srv $(cat /tmp/valkey.pid); fi
touch /lab/valkey-srv-seen
await valkey-done
stop valkey
devc after
pstats valkey
"#,
        300,
    );
    let b = guest(
        "b",
        r#"
ready; devc before
await valkey-up
# Bounded: a benchmark still running after 120 s records its qpip sockets' state and
# the server's, and is stopped (the test then fails on its status).
bgq bench valkey-benchmark -h $A6 -q -n 2000 -t ping,set,get
p=$(cat /tmp/bench.pid); i=0
while kill -0 $p 2>/dev/null && [ $i -lt 1200 ]; do sleep 0.1; i=$((i + 1)); done
if kill -0 $p 2>/dev/null; then
    stall_state bench $p; touch /lab/valkey-stall; await valkey-srv-seen; kill $p
fi
wait $p; kv bench.status $?; cp /tmp/bench.out /tmp/run.bench
for t in PING_INLINE SET GET; do
    kv bench.$t "$(tr '\r' '\n' < /tmp/run.bench | sed -n "s/^ *$t: \([0-9.]*\) requests per second.*/\1/p" | tail -n 1)"
done
run set qrun cli valkey-cli -h $A4 set lab-key lab-value
run get qrun cli valkey-cli -h $A6 get lab-key
kv get.value "$(tail -n 1 /tmp/run.get)"
touch /lab/valkey-done
devc after
pstats bench; pstats cli
"#,
        300,
    );
    let out = lab(vec![a, b], |_| ());
    let (a, b) = pair(&out);
    let ctx = b.context();
    b.statuses_zero("valkey", &["bench", "set", "get"]);
    for t in ["PING_INLINE", "SET", "GET"] {
        let v = b.get(&format!("bench.{t}"));
        assert!(
            v.parse::<f64>().is_ok_and(|r| r > 0.0),
            "valkey-benchmark {t}: no rate ({v:?})\n{ctx}"
        );
        eprintln!("  valkey-benchmark {t}: {v} requests/s");
    }
    assert_eq!(b.get("get.value"), "lab-value", "{ctx}");
    assert_eq!(
        a.get("valkey.status"),
        "0",
        "valkey-server stopped cleanly\n{}",
        a.context()
    );
    assert_preload(&b, "bench", 50, 0);
    assert_preload(&b, "cli", 2, 0);
    assert_preload(&a, "valkey", 0, 50);
    assert_device_opens(&a, 0, 50);
    assert_device_opens(&b, 50, 0);
}

/// sockperf's TCP ping-pong for 3 s from guest b to a sockperf server in guest a, both
/// under qpip-run, over IPv4 (Debian's sockperf 3.7 has no IPv6): every message answered.
#[test]
#[ignore = "boots VMs: run by ./qpip test"]
fn sockperf_ping_pong() {
    needs_root!();
    let a = guest(
        "a",
        r#"
ready; devc before
bgq srv sockperf sr --tcp -i 0.0.0.0 -p 11111
listening 11111; touch /lab/sockperf-up
await sockperf-done
stop srv INT
devc after
pstats srv
"#,
        300,
    );
    let b = guest(
        "b",
        r#"
ready; devc before
await sockperf-up
run pp qrun pp sockperf pp --tcp -i $A4 -p 11111 -t 3
kv pp.latency "$(sed -n 's/.*Summary: Latency is \([0-9.]*\) usec.*/\1/p' /tmp/run.pp)"
kv pp.observations "$(sed -n 's/.*Total \([0-9]*\) observations.*/\1/p' /tmp/run.pp)"
kv pp.lost "$(sed -n 's/.*# dropped messages = \([0-9]*\); # duplicated messages = \([0-9]*\); # out-of-order messages = \([0-9]*\).*/\1 \2 \3/p' /tmp/run.pp)"
touch /lab/sockperf-done
devc after
pstats pp
"#,
        300,
    );
    let out = lab(vec![a, b], |_| ());
    let (a, b) = pair(&out);
    let ctx = b.context();
    assert_eq!(b.get("pp.status"), "0", "{ctx}");
    assert!(
        b.num("pp.observations") > 0,
        "no round trip measured\n{ctx}"
    );
    assert_eq!(
        b.get("pp.lost"),
        "0 0 0",
        "dropped, duplicated, out-of-order\n{ctx}"
    );
    eprintln!("  sockperf ping-pong: {} µs", b.get("pp.latency"));
    assert_preload(&b, "pp", 1, 0);
    assert_preload(&a, "srv", 0, 1);
    assert_device_opens(&a, 0, 1);
    assert_device_opens(&b, 1, 0);
}
