//! The preload library (`libqpip-preload.so`, docs/sockets.md) in a guest: unmodified
//! socket programs over qpip sockets, against the lab host's Linux sockets.

mod common;

use std::process::{Child, Stdio};
use std::time::Duration;

use common::{needs_root, Report};
use qpip_lab::{netns, paths, unique_netns, LabHost, LabSpec, Network, QpipdLayout};

/// Guest a: the lab host routed through the qpip interface (lab-qpip-net), then
///  - `qpip-sockcheck` against the lab host's echo server (test/echo.py), each family: first
///    on kernel sockets (the reference: every check must pass on Linux's own TCP), then
///    under the preload, where every check must pass again, over qpip sockets; and
///    `qpip-sockcheck --close-race` under the preload: sockets closed while another thread
///    writes and reads them on the fast path, 100 times, without a fault;
///  - Debian's iperf3 under `qpip-run` against the lab host's iperf3, both directions (4
///    streams, a thread each, one way), and as a server the lab host's iperf3 connects to;
///  - `qpip-run --disable`: the same iperf3 on kernel sockets (no qpip socket made).
const SCRIPT: &str = r#"
lab-qpip-net >/tmp/net 2>&1; kv net.status $?
lab-extras >/tmp/extras 2>&1; kv extras.status $?
# fails TAG FILE: the failed checks of a qpip-sockcheck output, on one line.
fails() { kv $1.fails "$(grep FAIL "$2" | tr '\n' ';')"; kv $1.summary "$(tail -n 1 "$2")"; }
await echo-up
for f in 6 4; do
    if [ $f = 6 ]; then H=$QPIP_HOST_ADDR; else H=$QPIP_HOST_ADDR4; fi
    qpip-sockcheck $H 7000 >/tmp/ref$f 2>&1; kv ref$f.status $?; fails ref$f /tmp/ref$f
    QPIP_PRELOAD_LOG=1 qpip-run --stats=/tmp/stats$f qpip-sockcheck $H 7000 >/tmp/pre$f 2>&1
    kv pre$f.status $?; fails pre$f /tmp/pre$f
    kv pre$f.qpip_connects "$(grep -c 'connect .* -> qpip' /tmp/pre$f)"
    kv pre$f.port_reuse "$(grep -c 'note port reused over qpip' /tmp/pre$f)"
    kv pre$f.stats "$(tr '\n' ';' < /tmp/stats$f)"
    qpip-run --stats=/tmp/rstats$f qpip-sockcheck --close-race $H 7000 >/tmp/race$f 2>&1
    kv race$f.status $?; fails race$f /tmp/race$f
    kv race$f.stats "$(tr '\n' ';' < /tmp/rstats$f)"
done
# rate FILE: the receiver's total rate of an iperf3 client's output.
rate() { grep receiver "$1" | tail -1 | sed -n 's|.* \([0-9.]* [KMG]*bits/sec\).*|\1|p'; }
await iperf-up
qpip-run -v --stats iperf3 -c $QPIP_HOST_ADDR -p 5299 -t 2 -P 4 >/tmp/ip 2>&1; kv iperf.status $?
kv iperf.qpip "$(grep -c 'connect .* -> qpip' /tmp/ip)"
kv iperf.stats "$(grep 'stats prog=' /tmp/ip)"
kv iperf.rate "$(rate /tmp/ip)"
qpip-run -v iperf3 -c $QPIP_HOST_ADDR4 -p 5299 -t 2 -R >/tmp/ipr 2>&1; kv iperf_r.status $?
kv iperf_r.qpip "$(grep -c 'connect .* -> qpip' /tmp/ipr)"
kv iperf_r.rate "$(rate /tmp/ipr)"
QPIP_PRELOAD_LOG=1 qpip-run --disable iperf3 -c $QPIP_HOST_ADDR -p 5299 -t 1 >/tmp/ipk 2>&1
kv iperf_k.status $?
kv iperf_k.lines "$(grep -c 'qpip-preload.*connect' /tmp/ipk)"
qpip-run -v --stats iperf3 -s -1 -p 5300 >/tmp/ips 2>&1 &
spid=$!
i=0; until grep -q "listen .* -> " /tmp/ips || [ $i -ge 100 ]; do i=$((i + 1)); sleep 0.1; done
touch /lab/guest-server-up
wait $spid; kv server.status $?
kv server.listen "$(grep -c 'listen .* -> qpip' /tmp/ips)"
kv server.accept "$(grep -c 'accept .* -> qpip' /tmp/ips)"
touch /lab/guest-done
lab-wait host-done 300
"#;

/// The fast-path counters of a stats line (0 when absent: only non-zero ones are printed).
#[derive(Debug, Default)]
struct FastCounters {
    reads: u64,
    writes: u64,
    syscalls: u64,
    kicks: u64,
    opts: u64,
    sendfiles: u64,
}

/// The counters of the process that made the most fast-path calls, of the stats lines
/// joined by ';' (the main qpip-sockcheck; its forked children and exec'd images made few).
fn fast_counters(stats: &str) -> FastCounters {
    let field = |line: &str, key: &str| -> u64 {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
            .unwrap_or(0)
    };
    stats
        .split(';')
        .map(|line| FastCounters {
            reads: field(line, "fast_reads"),
            writes: field(line, "fast_writes"),
            syscalls: field(line, "data_syscalls"),
            kicks: field(line, "kicks"),
            opts: field(line, "fast_opts"),
            sendfiles: field(line, "fast_sendfiles"),
        })
        .max_by_key(|c| c.reads + c.writes)
        .unwrap_or_default()
}

/// What the lab host saw: its iperf3 client's exit status against the guest's server.
struct HostView {
    client_status: Result<i32, String>,
}

fn spawn_quiet(host: &LabHost, program: &str, args: &[&str]) -> Option<Child> {
    host.command(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| eprintln!("the lab host cannot run {program}: {e}"))
        .ok()
}

fn host_side(host: &LabHost) -> HostView {
    let echo_py = paths::root().join("preload/test/echo.py");
    let echo = spawn_quiet(host, "python3", &[echo_py.to_str().unwrap(), "::", "7000"]);
    let iperf = spawn_quiet(host, "iperf3", &["-s", "-p", "5299"]);
    std::thread::sleep(Duration::from_millis(700));
    let _ = host.signal("echo-up");
    let _ = host.signal("iperf-up");
    let client_status = host
        .wait_for("guest-server-up", Duration::from_secs(300))
        .and_then(|_| {
            std::thread::sleep(Duration::from_millis(300));
            host.command("iperf3")
                .args(["-c", &netns::device_addr(1), "-p", "5300", "-t", "2"])
                .stdout(Stdio::null())
                .status()
                .map_err(|e| e.to_string())
                .map(|s| s.code().unwrap_or(-1))
        });
    let _ = host.wait_for("guest-done", Duration::from_secs(300));
    for mut c in [echo, iperf].into_iter().flatten() {
        let _ = c.kill();
        let _ = c.wait();
    }
    let _ = host.signal("host-done");
    HostView { client_status }
}

/// Socket programs under the preload library over qpip sockets: every call of
/// `qpip-sockcheck` answers as on Linux's own TCP (both families; descriptors inherited
/// across exec, the context closed by the program, a port bound again and connected to
/// the same peer while its last connection is in TIME-WAIT, non-blocking and refused connects, a
/// listener's kernel-side connections, a socket read by a forked child and its parent),
/// plain reads and writes mostly without a system call (the fast path's counters), iperf3 as client both ways and as server, and
/// `--disable` leaving every socket to the kernel.
#[test]
#[ignore = "boots VMs: run by ./qpip test"]
fn socket_programs_run_over_qpip_sockets() {
    needs_root!();
    let guest = common::lab_guest("a", common::script("", SCRIPT), Duration::from_secs(420));
    let spec = LabSpec {
        guests: vec![guest],
        network: Network::Lab(unique_netns("qpip-sockets")),
        layout: QpipdLayout::Adapter,
    };
    let out = common::lab(&spec, host_side);
    let a = Report::succeeded(&out.guests[0]);
    let ctx = a.context();
    a.statuses_zero("setup", &["net", "extras"]);
    for f in ["6", "4"] {
        assert_eq!(
            a.get(&format!("ref{f}.status")),
            "0",
            "qpip-sockcheck on kernel sockets (IPv{f}): {}\n{ctx}",
            a.get(&format!("ref{f}.fails"))
        );
        assert_eq!(
            a.get(&format!("pre{f}.status")),
            "0",
            "qpip-sockcheck under the preload (IPv{f}): {}\n{ctx}",
            a.get(&format!("pre{f}.fails"))
        );
        // Its connects to the lab host went over qpip sockets (the one to its own listener
        // over loopback stays the kernel's).
        assert!(
            a.num(&format!("pre{f}.qpip_connects")) >= 4,
            "IPv{f}: too few connects over qpip\n{ctx}"
        );
        // A port used again toward the same peer while the device still has its last
        // connection in TIME-WAIT: the new one is the device's too (it takes the
        // four-tuple over).
        assert_eq!(
            a.get(&format!("pre{f}.port_reuse")),
            "1",
            "IPv{f}: the connect from a port in TIME-WAIT was not the device's\n{ctx}"
        );
        assert!(
            a.get(&format!("pre{f}.stats")).contains("rediscovered=1"),
            "IPv{f}: the exec'd image did not find its qpip socket\n{ctx}"
        );
        // The fast path: its plain reads and writes (the 200 rounds of 16 writes and their
        // echoes above all) mostly made no system call.
        let stats = a.get(&format!("pre{f}.stats"));
        let main = fast_counters(&stats);
        assert!(
            main.writes >= 3000 && main.reads >= 1000,
            "IPv{f}: too few reads and writes on the fast path: {main:?}\n{ctx}"
        );
        assert!(
            main.reads + main.writes >= 4 * (main.syscalls + main.kicks),
            "IPv{f}: the fast path made too many system calls: {main:?}\n{ctx}"
        );
        // The corked responses: TCP_CORK on and off and the sendfile bodies in user space.
        assert!(
            main.opts >= 40 && main.sendfiles >= 20,
            "IPv{f}: TCP_CORK or sendfile did not take the fast path: {main:?}\n{ctx}"
        );
        // Sockets closed while another thread was in the middle of the fast path: no
        // fault (the mapping outlives the close until the call ends).
        assert_eq!(
            a.get(&format!("race{f}.status")),
            "0",
            "IPv{f}: close while another thread writes and reads: {}\n{ctx}",
            a.get(&format!("race{f}.summary"))
        );
        let race = fast_counters(a.get(&format!("race{f}.stats")));
        assert!(
            race.reads + race.writes > 0,
            "IPv{f}: the close race did not use the fast path: {race:?}\n{ctx}"
        );
        // After the fork, both processes read the shared socket through the kernel: the
        // 20 echoes after it are system calls at least.
        assert!(
            main.syscalls >= 40,
            "IPv{f}: the socket shared by a fork stayed on the fast path: {main:?}\n{ctx}"
        );
        // Its UDP checks ran over qpip sockets: the connected one and the bound one.
        assert!(
            a.get(&format!("pre{f}.stats"))
                .contains("udp_connect_qpip=1 udp_bind_qpip=1"),
            "IPv{f}: the UDP sockets were not the device's\n{ctx}"
        );
    }
    // iperf3's control connection and its data streams.
    for (t, conns) in [("iperf", 5), ("iperf_r", 2)] {
        assert_eq!(a.get(&format!("{t}.status")), "0", "{t}\n{ctx}");
        assert_eq!(
            a.num(&format!("{t}.qpip")),
            conns,
            "{t}: every connection over qpip\n{ctx}"
        );
    }
    assert_eq!(a.get("iperf_k.status"), "0", "iperf3 with --disable\n{ctx}");
    assert_eq!(a.num("iperf_k.lines"), 0, "--disable made decisions\n{ctx}");
    assert_eq!(
        a.get("server.status"),
        "0",
        "iperf3 -s under qpip-run\n{ctx}"
    );
    assert_eq!(
        a.num("server.listen"),
        1,
        "the guest's iperf3 listened over qpip\n{ctx}"
    );
    assert_eq!(
        a.num("server.accept"),
        2,
        "the lab host's connections came as qpip sockets\n{ctx}"
    );
    assert_eq!(
        out.host.client_status,
        Ok(0),
        "the lab host's iperf3 against the guest's\n{ctx}"
    );
}

/// Guest a, against a lab host whose TCP offers no timestamps (net.ipv4.tcp_timestamps=0
/// in the lab's namespace), connecting from ports the guest kernel chooses, each
/// connection closed by the guest first (the device keeps its end in TIME-WAIT, which
/// without timestamps a new connection cannot take over):
///  - the ephemeral range narrowed to port 40000: a connect from it (`qpip-sockcheck
///    --unbound`), closed; then another, which has no port left (40000's four-tuple is in
///    TIME-WAIT): `connect` itself says EADDRNOTAVAIL, as Linux's (not EINPROGRESS, then
///    EADDRINUSE);
///  - the range widened to 40000-40001: a connect skips 40000 and comes from 40001.
const UNBOUND_SCRIPT: &str = r#"
lab-qpip-net >/tmp/net 2>&1; kv net.status $?
await echo-up
sysctl -qw net.ipv4.ip_local_port_range="40000 40000"
# check TAG ARGS...: a qpip-sockcheck run under qpip-run, its status, failures and output.
check() {
    t=$1; shift
    QPIP_PRELOAD_LOG=1 qpip-run qpip-sockcheck "$@" >/tmp/$t 2>&1; kv $t.status $?
    kv $t.fails "$(grep FAIL /tmp/$t | tr '\n' ';')"
    kv $t.out "$(tr '\n' ';' < /tmp/$t)"
}
check first --unbound $QPIP_HOST_ADDR 7000 1
check none --no-port $QPIP_HOST_ADDR 7000
sysctl -qw net.ipv4.ip_local_port_range="40000 40001"
check other --unbound $QPIP_HOST_ADDR 7000 1
touch /lab/guest-done
lab-wait host-done 300
"#;

#[test]
#[ignore = "boots VMs: run by ./qpip test"]
fn unbound_connects_skip_ports_the_device_holds_in_time_wait() {
    needs_root!();
    let guest = common::lab_guest(
        "a",
        common::script("", UNBOUND_SCRIPT),
        Duration::from_secs(300),
    );
    let spec = LabSpec {
        guests: vec![guest],
        network: Network::Lab(unique_netns("qpip-unbound")),
        layout: QpipdLayout::Adapter,
    };
    let out = common::lab(&spec, |host: &LabHost| {
        let ts = host
            .command("sysctl")
            .args(["-qw", "net.ipv4.tcp_timestamps=0"])
            .status()
            .map(|s| s.success());
        let echo_py = paths::root().join("preload/test/echo.py");
        let echo = spawn_quiet(host, "python3", &[echo_py.to_str().unwrap(), "::", "7000"]);
        std::thread::sleep(Duration::from_millis(700));
        let _ = host.signal("echo-up");
        let _ = host.wait_for("guest-done", Duration::from_secs(300));
        if let Some(mut c) = echo {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = host.signal("host-done");
        ts
    });
    assert!(
        matches!(out.host, Ok(true)),
        "the lab host's timestamps could not be turned off: {:?}",
        out.host
    );
    let a = Report::succeeded(&out.guests[0]);
    let ctx = a.context();
    a.statuses_zero("setup", &["net"]);
    for t in ["first", "none", "other"] {
        assert_eq!(
            a.get(&format!("{t}.status")),
            "0",
            "{t}: {}\n{ctx}",
            a.get(&format!("{t}.fails"))
        );
    }
    let first = a.get("first.out");
    assert!(
        first.contains("unbound connect 1 (port 40000)") && first.contains("-> qpip"),
        "the first connect was not the device's, from 40000\n{ctx}"
    );
    let other = a.get("other.out");
    assert!(
        other.contains("unbound connect 1 (port 40001)") && other.contains("-> qpip"),
        "the connect did not skip the port in TIME-WAIT over qpip\n{ctx}"
    );
}
