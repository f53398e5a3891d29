//! Unmodified rdma-core programs with both ends on qpip: two guests load `qpip_ib.ko`
//! (`lab-qpip-ib`); the servers run on guest b's `qpip0`, the clients on guest a's. Both
//! functions sit on one qpipd adapter's switch, so a's device reaches b's at b's device
//! addresses (host routes on `qpip0` make `rdma_cm` pick the qpip device over the
//! virtio-net NIC, whose addresses share the lab's prefix). With Debian trixie's binaries:
//!
//! - `rping -s` / `rping -c -V` over IPv6 (2000 and 65535 bytes) and IPv4, every ping's data
//!   checked by the client (its `ping data:` lines counted);
//! - perftest's `ib_send_lat`, `ib_send_bw`, `ib_write_lat`, `ib_write_bw`, `ib_read_lat`,
//!   `ib_read_bw` with `-R` (rdma_cm), `-n 100`: server and client exit 0, the result lines
//!   reported;
//! - `qperf -cm1`: `rc_lat`, `rc_bw`, `rc_rdma_write_bw` (it posts RDMA Writes with
//!   immediate data, which both qpip ends agree to at their MPA setup; siw refuses them),
//!   `rc_rdma_read_bw`;
//! - librdmacm's examples: `ucmatose` (server on the wildcard address, client `-s`) and
//!   `rdma_server` / `rdma_client`;
//! - a peer that vanishes: b's rping server is killed (`-9`) under a's connected client,
//!   which sees its connection end and exits within a bound; both guests' device contexts
//!   (`/sys/class/qpip/qpip0/contexts`) come back to their count before;
//! - neither guest's kernel log has an oops or a warning.
//!
//! Every server and client runs under a limit (`limited`): a hang is reported with the
//! process's kernel stacks and the RDMA resources, and fails the test instead of stalling
//! it. The test boots VMs: ignored by a plain `cargo test`, run by `./qpip test`.
//!
//! A connect refused (`RDMA_CM_EVENT_REJECTED`) is tried again, server and client anew, up
//! to 3 times, and each refusal is reported. perftest's client makes two connections to
//! the same port, the comm channel's and then the test's, and its server listens for the
//! second only once the first is accepted: a client quicker than that is refused (the
//! port has no listener, a reset). perftest then tries again by itself, but trixie's
//! 25.01 crashes doing so (a general protection fault in librdmacm, fixed upstream in
//! 2025 by "Fix crashes and logical flaws in RDMA CM connection retry"). qperf's client
//! can be refused too, now and then, with its server's listener in place (the device's
//! listener gets no request): why is not found yet.

mod common;

use common::{needs_root, Report};
use qpip_lab::netns;
use qpip_lab::{guest_name, unique_netns, LabSpec, Network, QpipdLayout};
use std::time::Duration;

/// rping runs: tag, IPv4 or not, iterations, size.
const RPINGS: [(&str, bool, u64, u64); 3] = [
    ("rping6", false, 20, 2000),
    ("rping6big", false, 10, 65535),
    ("rping4", true, 20, 2000),
];

/// perftest programs, each run short (`-n 100`) with rdma_cm (`-R`) over IPv4.
const PERFTESTS: [&str; 6] = [
    "ib_send_lat",
    "ib_send_bw",
    "ib_write_lat",
    "ib_write_bw",
    "ib_read_lat",
    "ib_read_bw",
];

/// qperf's tests, each its own client run against one server.
/// `rc_rdma_write_bw` posts its Writes with immediate data (`IBV_WR_RDMA_WRITE_WITH_IMM`):
/// RFC 7306's Immediate Data, which two qpip ends agree to at their MPA setup.
const QPERF_TESTS: [&str; 4] = ["rc_lat", "rc_bw", "rc_rdma_write_bw", "rc_rdma_read_bw"];

/// How long a's client may take to notice its server was killed, in tenths of a second.
const VANISH_BOUND_DS: u64 = 150;

/// Both guests' helpers. A step TAG runs a server on b and its client on a:
///  limited TAG SECS CMD...  runs CMD in the background for at most SECS; $! is in $lp
///                           while it runs. Returns CMD's exit status, or 124 when it was
///                           still running at SECS: then its threads' kernel stacks and
///                           the RDMA resources are reported as TAG.hung and it is killed
///  started TAG SECS READY CMD...
///                           `limited`, without waiting: returns once READY (a shell
///                           condition) holds, CMD ended, or 30 s passed; `finish` waits
///  finish TAG SECS          waits for what `started` began (SECS its limit), the same
///                           way `limited` does; the status in $st
///  srv TAG SECS READY CMD...
///                           b: a server; /lab/TAG.ready.N once attempt N's READY holds.
///                           When a's client is done (/lab/TAG.cdone) the server has 20 s
///                           more to end and is stopped otherwise (qperf serves until
///                           stopped); when it asks for another attempt (/lab/TAG.retry.N)
///                           the server is stopped and started again.
///                           Reports TAG.server: its status, `stopped`, or 124 at SECS;
///                           its output and the qpip lines of the kernel log when it
///                           failed
///  cli TAG SECS CMD...      a: once /lab/TAG.ready.N, CMD for at most SECS; a connect
///                           refused (REJECTED) is tried again with a new server, up to
///                           ATTEMPTS times (see the top of the file), each refusal
///                           reported as TAG.rejected.N. Reports TAG.client (the last
///                           status) and TAG.attempts, the output and the qpip lines of
///                           the kernel log when it failed; then /lab/TAG.cdone
///  cm_listens PROG          whether PROG holds an rdma_cm listener
///  tcp_listens PORT         whether a TCP socket listens on PORT (qperf's control port)
///  contexts                 the function's device contexts
///  qperf_kv TAG FILE        qperf's results in FILE as `@TAG.TEST=name = value unit, ...`
const HELPERS: &str = r#"
started() {
    lt=$1; lr=$3; shift 3
    "$@" >"/tmp/$lt.out" 2>&1 & lp=$!
    li=0
    until eval "$lr"; do
        li=$((li + 1))
        if [ $li -ge 300 ] || ! kill -0 $lp 2>/dev/null; then break; fi
        sleep 0.1
    done
    lstart=$(cut -d. -f1 /proc/uptime)
}
finish() {
    while kill -0 $lp 2>/dev/null &&
          [ $(( $(cut -d. -f1 /proc/uptime) - lstart )) -lt "$2" ]; do
        sleep 0.1
    done
    hang_check "$1"
}
hang_check() {
    if kill -0 $lp 2>/dev/null; then
        kv "$1.hung" "$(cat /proc/$lp/task/*/stack 2>&1 | tr '\n' '|')"
        kv "$1.hung_res" "$(rdma res show qp 2>&1 | tr '\n' '|') $(rdma res show cm_id 2>&1 | tr '\n' '|')"
        kill -9 $lp; wait $lp; st=124
    else
        wait $lp; st=$?
    fi
}
limited() {
    lt=$1; lsecs=$2; shift 2
    "$@" >"/tmp/$lt.out" 2>&1 & lp=$!
    lstart=$(cut -d. -f1 /proc/uptime)
    finish "$lt" "$lsecs"
    return $st
}
cm_listens() { rdma res show cm_id 2>/dev/null | grep -q "state LISTEN.*comm $1"; }
tcp_listens() {
    awk -v p=$(printf ':%04X' "$1") '$2 ~ p"$" && $4 == "0A" { f = 1 } END { exit !f }' \
        /proc/net/tcp /proc/net/tcp6
}
contexts() { cat /sys/class/qpip/qpip0/contexts; }
srv() {
    t=$1; secs=$2; ready=$3; shift 3
    a=1
    while :; do
        started "$t" "$secs" "$ready" "$@"
        touch "/lab/$t.ready.$a"
        while kill -0 $lp 2>/dev/null && [ ! -e "/lab/$t.cdone" ] && [ ! -e "/lab/$t.retry.$a" ] &&
              [ $(( $(cut -d. -f1 /proc/uptime) - lstart )) -lt "$secs" ]; do
            sleep 0.2
        done
        # A server that ended waits for the client's word: done, or another attempt.
        while [ ! -e "/lab/$t.cdone" ] && [ ! -e "/lab/$t.retry.$a" ] &&
              [ $(( $(cut -d. -f1 /proc/uptime) - lstart )) -lt "$secs" ]; do
            sleep 0.2
        done
        if [ -e "/lab/$t.retry.$a" ]; then
            kill $lp 2>/dev/null; wait $lp; a=$((a + 1)); continue
        fi
        break
    done
    if [ -e "/lab/$t.cdone" ]; then
        i=0; while kill -0 $lp 2>/dev/null && [ $i -lt 200 ]; do i=$((i + 1)); sleep 0.1; done
        if kill -0 $lp 2>/dev/null; then kill $lp; wait $lp; kv "$t.server" stopped; return; fi
    fi
    hang_check "$t"
    kv "$t.server" $st
    if [ $st != 0 ]; then
        sed "s/^/  $t server: /" "/tmp/$t.out" | grep -v ': ping data: ' | tail -n 40
        dmesg | grep qpip | tail -n 30 | sed "s/^/  $t dmesg: /"
    fi
}
# rejected FILE: the program's connect was refused, as rping, perftest (its test's
# connection; its comm channel's says "Unexpected CM event bl blka 8", 8 being
# RDMA_CM_EVENT_REJECTED) and qperf say it.
rejected() { grep -qiE 'RDMA_CM_EVENT_REJECTED|CM event bl blka 8$|Event rejected' "$1"; }
cli() {
    t=$1; secs=$2; shift 2
    a=1
    while :; do
        await "$t.ready.$a" || return
        limited "$t" "$secs" "$@"; st=$?
        [ $st != 0 ] && [ $a -lt $ATTEMPTS ] && rejected "/tmp/$t.out" || break
        kv "$t.rejected.$a" "$(grep -iE 'rejected|blka' "/tmp/$t.out" | head -n 1)"
        touch "/lab/$t.retry.$a"; a=$((a + 1))
    done
    kv "$t.client" $st; kv "$t.attempts" $a
    if [ $st != 0 ]; then
        grep -v '^ping data: ' "/tmp/$t.out" | tail -n 40 | sed "s/^/  $t client: /"
        dmesg | grep qpip | tail -n 30 | sed "s/^/  $t dmesg: /"
    fi
    touch "/lab/$t.cdone"
}
ATTEMPTS=3
qperf_kv() {
    awk -v t="$1" '/^[a-z_]+:$/ { name = substr($1, 1, length($1) - 1); next }
                   /=/ && name != "" { sub(/^ +/, ""); gsub(/ +/, " ");
                                       v[name] = v[name] (v[name] == "" ? "" : ", ") $0 }
                   END { for (n in v) printf "@%s.%s=%s\n", t, n, v[n] }' "$2"
}
"#;

/// perftest's arguments: short runs, bandwidth tests at 64 KiB messages, latency tests at
/// 2 KiB.
fn perf_args(prog: &str) -> String {
    let size = if prog.ends_with("_bw") { 65536 } else { 2048 };
    format!("-n 100 -s {size}")
}

/// Guest `n`'s script (1 = a, the clients; 2 = b, the servers).
fn script(n: usize) -> String {
    let server = n == 2;
    // The peer's device addresses: a's routes and clients go to b's, b's routes to a's.
    let peer = if server { 1 } else { 2 };
    let (p6, p4) = (netns::device_addr(peer), netns::device_addr4(peer));
    let mut s = String::new();
    s += "lab-qpip-ib >/tmp/load 2>&1; st=$?; kv load.status $st\n";
    s += "[ $st = 0 ] || sed 's/^/  load: /' /tmp/load\n";
    // The driver's debug messages (its CM events) in the kernel log, for a failure's report.
    s += "echo 'module qpip_ib +p' > /proc/dynamic_debug/control\n";
    s += "ip link set qpip0 up\n";
    // The peer's device through qpip0: rdma_cm then resolves the route to the qpip device
    // (the lab's prefix is on the virtio-net NIC too).
    s += &format!("ip -6 route add {p6}/128 dev qpip0\nip -4 route add {p4}/32 dev qpip0\n");
    s += &format!("kv route6 \"$(ip -6 route get {p6})\"\n");
    s += &format!("kv route4 \"$(ip -4 route get {p4})\"\n");
    s +=
        "kv qpip0.addr4 \"$(ip -4 addr show dev qpip0 scope global | awk '/inet / {print $2}')\"\n";
    s += "kv contexts.start \"$(contexts)\"\n";
    s += "touch /lab/up.$QPIP_GUEST_NAME\nawait up.a && await up.b\n";

    // rping, every ping checked by the client's -V (and counted from its -v lines).
    for (tag, v4, iters, size) in RPINGS {
        let args = format!("-V -C {iters} -S {size}");
        if server {
            let addr = if v4 {
                "$QPIP_DEV_ADDR4"
            } else {
                "$QPIP_DEV_ADDR"
            };
            s += &format!("srv {tag} 120 'cm_listens rping' rping -s -a \"{addr}\" {args}\n");
        } else {
            let addr = if v4 { &p4 } else { &p6 };
            s += &format!("cli {tag} 120 rping -c -a {addr} -v {args}\n");
            s += &format!("kv {tag}.pings \"$(grep -c '^ping data: ' /tmp/{tag}.out)\"\n");
        }
    }

    // perftest through rdma_cm: its client connects twice (a channel of its own, then the
    // test's connection), the server listening again in between.
    for prog in PERFTESTS {
        let args = perf_args(prog);
        if server {
            s += &format!("srv {prog} 120 'cm_listens {prog}' {prog} -d qpip0 -R {args}\n");
        } else {
            s += &format!("cli {prog} 120 {prog} -d qpip0 -R {args} {p4}\n");
            s += &format!(
                "kv {prog}.result \"$(grep -E '^ *[0-9]+ +[0-9]+' /tmp/{prog}.out | tail -n 1)\"\n"
            );
        }
    }

    // qperf: one server (it serves until stopped), a client run per test.
    if server {
        s += "srv qperf 300 'tcp_listens 19765' qperf\n";
    } else {
        s += "await qperf.ready.1 && for t in rc_lat rc_bw rc_rdma_write_bw rc_rdma_read_bw; do\n";
        s += "    a=1; while :; do\n";
        s += &format!("        limited qperf.$t 60 qperf -cm1 -t 1 -m 64k {p4} $t; st=$?\n");
        // The server stays (it serves each client in a process of its own).
        s +=
            "        [ $st != 0 ] && [ $a -lt $ATTEMPTS ] && rejected /tmp/qperf.$t.out || break\n";
        s += "        kv qperf.$t.rejected.$a \"$(tr '\\n' ' ' < /tmp/qperf.$t.out)\"; a=$((a + 1))\n";
        s += "    done\n";
        s += "    kv qperf.$t.client $st; kv qperf.$t.attempts $a\n";
        s += "    qperf_kv qperf /tmp/qperf.$t.out\n";
        s += "    [ $st = 0 ] || sed \"s/^/  qperf $t: /\" /tmp/qperf.$t.out\n";
        s += "    kv qperf.$t.out \"$(tr '\\n' ' ' < /tmp/qperf.$t.out)\"\n";
        s += "done\ntouch /lab/qperf.cdone\n";
    }

    // librdmacm's examples: ucmatose (its server on the wildcard address), rdma_server and
    // rdma_client (port 7471 each, one after the other).
    if server {
        s += "srv ucmatose 120 'cm_listens ucmatose' ucmatose\n";
        s += "srv rdma_server 120 'cm_listens rdma_server' rdma_server\n";
    } else {
        s += &format!("cli ucmatose 120 ucmatose -s {p4}\n");
        s += &format!("cli rdma_server 120 rdma_client -s {p4}\n");
        s += "kv rdma_client.out \"$(tr '\\n' '|' < /tmp/rdma_server.out)\"\n";
    }

    // A peer that vanishes: b's server killed under a's connected client.
    if server {
        s += "before=$(contexts); kv vanish.before \"$before\"\n";
        s += "started vanish 120 'cm_listens rping' rping -s -a \"$QPIP_DEV_ADDR\" -C 1000000 -S 1000\n";
        s += "touch /lab/vanish.ready\n";
        s += "await vanish.connected && kv vanish.connected \"$(contexts)\"\n";
        s += "kill -9 $lp; wait $lp; kv vanish.server $?\ntouch /lab/vanish.killed\n";
    } else {
        s += "before=$(contexts); kv vanish.before \"$before\"\n";
        s += "await vanish.ready\n";
        s += &format!("started vanish 120 'true' rping -c -a {p6} -C 1000000 -S 1000\n");
        // Connected: rping's cm_id established and its pings going.
        s += "i=0; until rdma res show cm_id 2>/dev/null | grep -q 'state CONNECT.*comm rping' || [ $i -ge 200 ]; do i=$((i + 1)); sleep 0.1; done\n";
        s += "sleep 2\n";
        s += "kv vanish.running \"$(kill -0 $lp 2>/dev/null && echo yes || echo no)\"\n";
        s += "kv vanish.cm_id \"$(rdma res show cm_id 2>&1 | grep rping | tr '\\n' '|')\"\n";
        s += "kv vanish.connected \"$(contexts)\"\n";
        s += "touch /lab/vanish.connected\nawait vanish.killed\n";
        s += &format!(
            "i=0; while kill -0 $lp 2>/dev/null && [ $i -lt {VANISH_BOUND_DS} ]; do i=$((i + 1)); sleep 0.1; done\n"
        );
        s += "kv vanish.exit_ds $i\n";
        s += "kv vanish.exited \"$(kill -0 $lp 2>/dev/null && echo no || echo yes)\"\n";
        s += "hang_check vanish; kv vanish.client $st\n";
        s += "kv vanish.out \"$(tail -n 5 /tmp/vanish.out | tr '\\n' '|')\"\n";
    }
    // Both guests' contexts back to their count before (the server's listening context and
    // the killed process's; the client's).
    s += "i=0; until [ \"$(contexts)\" = \"$before\" ] || [ $i -ge 100 ]; do i=$((i + 1)); sleep 0.1; done\n";
    s += "kv vanish.after \"$(contexts)\"\n";
    s += "touch /lab/vanish.done.$QPIP_GUEST_NAME\nawait vanish.done.a && await vanish.done.b\n";
    // The device's TCP counters (resets sent, listen drops...), for a refused connect's report.
    s += "kv tcp_counters \"$(cd /sys/class/qpip/qpip0/counters && grep -H . tcp_* | tr '\\n' ' ')\"\n";
    // A program's own crash is no kernel trouble: the kernel reports it as "traps: PROG[PID]
    // general protection fault ... in LIB" (perftest 25.01 in its retry), kept apart.
    s += "kv dmesg.bad \"$(dmesg | grep -E 'BUG:|Oops|WARNING:|general protection|refcount_t|hung_task' | grep -v ' traps: ' | tr '\\n' '|')\"\n";
    s += "kv dmesg.traps \"$(dmesg | grep ' traps: ' | tr '\\n' '|')\"\n";
    common::script(HELPERS, &s)
}

#[test]
#[ignore = "boots VMs: run by ./qpip test"]
fn rdma_core_programs_between_two_qpip_guests() {
    needs_root!();
    let guest = |n: usize| common::lab_guest(guest_name(n), script(n), Duration::from_secs(900));
    let spec = LabSpec {
        guests: vec![guest(1), guest(2)],
        network: Network::Lab(unique_netns("qpip-q2q")),
        layout: QpipdLayout::Adapter,
    };
    let out = common::lab(&spec, |_| ());
    let (ga, gb) = (out.guest("a"), out.guest("b"));
    let (a, b) = (Report::new(ga), Report::new(gb));
    let ctx = || format!("=== a:\n{}\n=== b:\n{}", a.context(), b.context());
    assert_eq!((ga.status, gb.status), (0, 0), "{}", ctx());
    for (g, rep) in [("a", &a), ("b", &b)] {
        assert_eq!(rep.get("load.status"), "0", "lab-qpip-ib on {g}\n{}", ctx());
        for key in ["route6", "route4"] {
            assert!(rep.get(key).contains("dev qpip0"), "{g}: {key}\n{}", ctx());
        }
        assert!(
            !rep.get("qpip0.addr4").is_empty(),
            "{g}: qpip0 has no IPv4 address\n{}",
            ctx()
        );
    }
    // Server on b, client on a: both ended well.
    let both = |tag: &str, what: &str| {
        let done = [
            b.get(&format!("{tag}.server")),
            a.get(&format!("{tag}.client")),
        ];
        assert_eq!(
            done,
            ["0", "0"],
            "{what}: server (b) and client (a)\n{}",
            ctx()
        );
        let attempts = a.num(&format!("{tag}.attempts"));
        if attempts > 1 {
            eprintln!("  {tag}: {} refused connect(s) tried again", attempts - 1);
        }
    };

    for (tag, v4, iters, size) in RPINGS {
        both(tag, tag);
        assert_eq!(
            a.num(&format!("{tag}.pings")),
            iters,
            "{tag}: pings the client checked\n{}",
            ctx()
        );
        let family = if v4 { "IPv4" } else { "IPv6" };
        eprintln!("  {tag}: rping qpip ⇄ qpip over {family}, {iters} × {size} bytes checked");
    }

    for prog in PERFTESTS {
        both(prog, prog);
        let result = a.get(&format!("{prog}.result"));
        assert!(!result.is_empty(), "{prog}: no result line\n{}", ctx());
        eprintln!("  {prog}: {result}");
    }

    // qperf's server serves until it is stopped.
    assert_eq!(
        b.get("qperf.server"),
        "stopped",
        "qperf's server\n{}",
        ctx()
    );
    for t in QPERF_TESTS {
        assert_eq!(
            a.get(&format!("qperf.{t}.client")),
            "0",
            "qperf {t}\n{}",
            ctx()
        );
        let attempts = a.num(&format!("qperf.{t}.attempts"));
        if attempts > 1 {
            eprintln!(
                "  qperf {t}: {} refused connect(s) tried again",
                attempts - 1
            );
        }
        let figures = a.get(&format!("qperf.{t}"));
        eprintln!("  qperf -cm1 {t}: {figures}");
    }

    both("ucmatose", "ucmatose");
    both("rdma_server", "rdma_server and rdma_client");
    assert!(
        a.get("rdma_client.out").contains("rdma_client: end 0"),
        "rdma_client\n{}",
        ctx()
    );
    eprintln!("  ucmatose, rdma_server / rdma_client: exit 0");

    // The vanished peer.
    assert_eq!(a.get("vanish.running"), "yes", "vanish\n{}", ctx());
    assert_eq!(
        a.get("vanish.exited"),
        "yes",
        "a's client after its server was killed\n{}",
        ctx()
    );
    for (g, rep) in [("a", &a), ("b", &b)] {
        assert_eq!(
            rep.num("vanish.after"),
            rep.num("vanish.before"),
            "{g}'s device contexts after the killed server\n{}",
            ctx()
        );
    }
    eprintln!(
        "  vanish: a's client ended {:.1} s after b's server was killed (status {}); contexts a {} → {} → {}, b {} → {} → {}",
        a.num("vanish.exit_ds") as f64 / 10.0,
        a.get("vanish.client"),
        a.get("vanish.before"),
        a.get("vanish.connected"),
        a.get("vanish.after"),
        b.get("vanish.before"),
        b.get("vanish.connected"),
        b.get("vanish.after"),
    );
    for (g, rep) in [("a", &a), ("b", &b)] {
        assert_eq!(rep.get("dmesg.bad"), "", "{g}'s kernel log\n{}", ctx());
        let traps = rep.get("dmesg.traps");
        if !traps.is_empty() {
            eprintln!("  {g}: programs that crashed (their retries tried again): {traps}");
        }
    }
    // Refused connects tried again: what each side's device counted, and what was said.
    let refusals: Vec<(&str, &str)> = a
        .pairs
        .iter()
        .filter(|(k, _)| k.contains(".rejected."))
        .map(|(k, v)| (*k, *v))
        .collect();
    if !refusals.is_empty() {
        for (k, v) in refusals {
            eprintln!("  {k}: {v}");
        }
        for (g, rep) in [("a", &a), ("b", &b)] {
            eprintln!("  {g}'s device TCP counters: {}", rep.get("tcp_counters"));
        }
    }
}
