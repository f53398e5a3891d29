//! Unmodified rdma-core programs on qpip's `ib_device` (`qpip_ib.ko` and the provider)
//! against Linux's soft-iWARP (`siw`), through the RDMA connection manager: guest a loads
//! `qpip_ib` and runs the clients on `qpip0`, guest b runs siw on its virtio-net NIC and
//! the servers. a reaches b's NIC through `qpip0` (host routes on it), so `rdma_cm` picks
//! the qpip device.
//!
//! - `rping -c -V` at several sizes and over both families, every ping's data checked by
//!   the client's `-V`; a connect to a port where nothing listens fails cleanly
//!   (`rdma_connect` is refused, no hang);
//! - perftest's clients in `-R` (rdma_cm) mode with short runs: `ib_send_bw`,
//!   `ib_write_bw`, `ib_read_bw`, `ib_send_lat`, `ib_write_lat`, `ib_read_lat`;
//! - an RDMA Write with immediate data (which siw does not have) from `qpip-cm-check` to
//!   rping's server on siw: the connection is set up (qpip's offer, a reserved bit of the
//!   MPA request, is nothing to siw) and the Write completes `IBV_WC_LOC_QP_OP_ERR`,
//!   nothing sent;
//! - the roles reversed, the driver's passive side: servers on a's `qpip0` (`rping -s -V`
//!   over IPv6 and IPv4, and perftest's servers with `-R` but `ib_write_lat`'s), b's
//!   clients on siw;
//! - an rping client killed while connected leaves no device context behind;
//! - the kernel log has no oops or warning.
//!
//! siw's responder can stall a new connection (`ci/tests/common/rping.sh`): rping and
//! perftest runs where siw serves are tried again when the server sees it.
//!
//! The test boots VMs: ignored by a plain `cargo test`, run by `./qpip test`.

mod common;

use common::{needs_root, Report};
use qpip_lab::netns;
use qpip_lab::{guest_name, unique_netns, LabSpec, Network, QpipdLayout};
use std::time::Duration;

/// rping runs: tag, IPv4 or not, iterations, size.
const RPINGS: [(&str, bool, u64, u64); 4] = [
    ("r64", false, 20, 64),
    ("r2000", false, 20, 2000),
    ("r65535", false, 10, 65535),
    ("r4", true, 20, 2000),
];

/// perftest programs, each run short (`-n`) with rdma_cm (`-R`) over IPv4.
const PERFTESTS: [&str; 6] = [
    "ib_send_bw",
    "ib_write_bw",
    "ib_read_bw",
    "ib_send_lat",
    "ib_write_lat",
    "ib_read_lat",
];

/// perftest programs with their server on qpip and their client on siw: all but
/// `ib_write_lat`, whose server writes first. MPA lets a responder send nothing before
/// the initiator's first FPDU unless they agreed on peer-to-peer mode, which siw's
/// initiator does not ask for: qpip's responder waits, as its client does (siw's own
/// responder sends anyway, so siw ⇄ siw runs).
const PERFTESTS_REVERSED: [&str; 5] = [
    "ib_send_bw",
    "ib_write_bw",
    "ib_read_bw",
    "ib_send_lat",
    "ib_read_lat",
];

/// Guest a's helpers: a client that follows `serve`'s attempts (`common/rping.sh`).
const CLIENT_SHELL: &str = r#"
# rclient TAG PEER ARGS...: rdma-core's rping on qpip0 once attempt N of TAG's server
# listens, again if that attempt stalled; reports TAG.client and TAG.pings. A client still
# running after 240 s is reported (its threads' kernel stacks, the RDMA resources) and
# killed.
rclient() {
    t=$1; peer=$2; shift 2
    a=1
    while :; do
        await "$t.$a" || return
        rping -c -a "$peer" -V -v -d "$@" >"/tmp/$t.log" 2>&1 & p=$!
        i=0
        while kill -0 $p 2>/dev/null && [ $i -lt 2400 ]; do i=$((i + 1)); sleep 0.1; done
        if kill -0 $p 2>/dev/null; then
            kv "$t.hung" "$(cat /proc/$p/task/*/stack 2>&1 | tr '\n' '|')"
            kv "$t.hung_res" "$(rdma res show qp 2>&1 | tr '\n' '|') $(rdma res show cm_id 2>&1 | tr '\n' '|')"
            kill -9 $p
        fi
        wait $p; st=$?
        n=$(grep -c '^ping data: ' "/tmp/$t.log")
        if [ -e "/lab/$t.$a.stalled" ] && [ $a -lt $ATTEMPTS ]; then a=$((a + 1)); continue; fi
        kv "$t.client" "$st"; kv "$t.pings" "$n"
        [ "$st" = 0 ] || grep -v '^ping data: ' "/tmp/$t.log" | tail -n 40 | sed "s/^/  $t: /"
        return
    done
}
# pclient PROG PEER ARGS...: PROG's client on qpip0 (rdma_cm) once attempt N of its
# server is ready, again if that attempt stalled (`pserve`); reports PROG.client and
# PROG.result (its figures). A client still running after 60 s is reported (its threads'
# kernel stacks, the RDMA resources) and killed.
pclient() {
    prog=$1; peer=$2; shift 2
    a=1
    while :; do
        await "$prog.ready.$a" || return
        "$prog" -d qpip0 -R "$@" "$peer" >"/tmp/$prog.out" 2>&1 & p=$!
        i=0
        while kill -0 $p 2>/dev/null && [ $i -lt 600 ] && [ ! -e "/lab/$prog.$a.stalled" ]; do
            i=$((i + 1)); sleep 0.1
        done
        if [ -e "/lab/$prog.$a.stalled" ] && [ $a -lt $ATTEMPTS ]; then
            kill -9 $p 2>/dev/null; wait $p; a=$((a + 1)); continue
        fi
        if kill -0 $p 2>/dev/null; then
            kv "$prog.hung" "$(cat /proc/$p/task/*/stack 2>&1 | tr '\n' '|')"
            kv "$prog.hung_res" "$(rdma res show qp 2>&1 | tr '\n' '|') $(rdma res show cm_id 2>&1 | tr '\n' '|')"
            kill -9 $p
        fi
        wait $p; st=$?
        kv "$prog.client" $st; show_log "$prog" $st "/tmp/$prog.out"
        kv "$prog.result" "$(grep -E '^ *[0-9]+ +[0-9]+' "/tmp/$prog.out" | tail -n 1)"
        [ "$st" = 0 ] || dmesg | grep -E 'QP [0-9]+:' | tail -n 30 | sed "s/^/  $prog: /"
        return
    done
}
# under TAG CMD...: an rping client connected to TAG's server, then CMD under it;
# reports TAG.running (connected when CMD ran), TAG.status (CMD's), TAG.exited (rping
# ended by itself within 10 s; else it is killed).
under() {
    t=$1; shift
    await "$t.1" || return
    rping -c -a "$B6" -C 1000000 -S 1000 >"/tmp/$t.rping" 2>&1 & p=$!
    sleep 5; kv "$t.running" "$(kill -0 $p 2>/dev/null && echo yes || echo no)"
    "$@"; kv "$t.status" $?
    i=0; while kill -0 $p 2>/dev/null && [ $i -lt 100 ]; do i=$((i + 1)); sleep 0.1; done
    kv "$t.exited" "$(kill -0 $p 2>/dev/null && echo no || echo yes)"
    kill -9 $p 2>/dev/null; wait $p
    i=0; until [ "$(contexts)" = "$before" ] || [ $i -ge 100 ]; do i=$((i + 1)); sleep 0.1; done
    kv "$t.contexts" "$(contexts)"
}
# contexts: the function's device contexts.
contexts() { cat /sys/class/qpip/qpip0/contexts; }
# qserve TAG ADDR PROG ARGS...: PROG's server on qpip0 at ADDR (the passive side), for
# b's client on siw; /lab/TAG.ready once it listens, TAG.server its exit status.
qserve() {
    t=$1; addr=$2; prog=$3; shift 3
    case $prog in
        rping) timeout 120 rping -s -a "$addr" -V "$@" >"/tmp/$t.out" 2>&1 & p=$! ;;
        *) timeout 120 "$prog" -d qpip0 -R "$@" >"/tmp/$t.out" 2>&1 & p=$! ;;
    esac
    i=0
    until rdma res show cm_id 2>/dev/null | grep -q "state LISTEN.*comm $prog" ||
          [ $i -ge 100 ] || ! kill -0 $p 2>/dev/null; do
        i=$((i + 1)); sleep 0.1
    done
    touch "/lab/$t.ready"
    wait $p; st=$?
    kv "$t.server" $st; show_log "$t" $st "/tmp/$t.out"
}
"#;

/// Guest b's helpers: a perftest server on siw0 (rdma_cm), ready once it listens; an
/// rping server kept until a says it is done with it.
const SERVER_SHELL: &str = r#"
# hold TAG: rping's server on siw until /lab/TAG.done.a; /lab/TAG.1 once it listens.
hold() {
    rping -s -a "$QPIP_NET_ADDR" -C 1000000 -S 1000 >"/tmp/$1.out" 2>&1 & sp=$!
    i=0
    until listening siw "$1" || [ $i -ge 300 ]; do i=$((i + 1)); sleep 0.1; done
    touch "/lab/$1.1"
    await "$1.done.a"
    kill $sp 2>/dev/null; wait $sp || true
}
# pserve TAG PROG ARGS...: PROG's server on siw0; touches /lab/TAG.ready.N once attempt
# N listens. siw's responder stall (`common/rping.sh`) hits perftest as it hits rping: a
# connection of perftest's port whose socket keeps unread bytes is reported as
# TAG.stall.N, the attempt marked /lab/TAG.N.stalled and stopped, and both sides try
# again. Reports TAG.server (the last attempt's exit status, or `stalled`) and
# TAG.stalls.
pserve() {
    t=$1; prog=$2; shift 2
    a=1
    while :; do
        timeout 200 "$prog" -d siw0 -R "$@" >"/tmp/$t.out" 2>&1 & p=$!
        i=0
        until rdma res show cm_id 2>/dev/null | grep -q "state LISTEN.*comm $prog" ||
              [ $i -ge 300 ] || ! kill -0 $p 2>/dev/null; do
            i=$((i + 1)); sleep 0.1
        done
        touch "/lab/$t.ready.$a"
        if watch $p 18515; then
            wait $p; st=$?
            kv "$t.server" $st; kv "$t.stalls" $((a - 1)); show_log "$t" $st "/tmp/$t.out"
            return
        fi
        kv "$t.stall.$a" "$stalled"
        touch "/lab/$t.$a.stalled"
        kill $p; wait $p
        if [ $a -ge $ATTEMPTS ]; then kv "$t.server" stalled; kv "$t.stalls" $a; return; fi
        a=$((a + 1))
    done
}
"#;

fn perf_args(prog: &str) -> String {
    // Short runs; bandwidth tests at 64 KiB messages, latency tests at 2 KiB (perftest
    // asks a device it does not know for no inline data).
    let size = if prog.ends_with("_bw") { 65536 } else { 2048 };
    format!("-n 100 -s {size}")
}

fn script(n: usize) -> String {
    let mut s = String::new();
    let b6 = netns::virtio_addr(2);
    let b4 = netns::virtio_addr4(2);
    if n == 2 {
        s += "lab-siw >/tmp/lab-siw.out 2>&1; kv siw.status $?\n";
    } else {
        s += "lab-qpip-ib >/tmp/load 2>&1; kv load.status $?\n";
        // No peer-to-peer mode towards siw's servers: this test kills a server whose
        // connection siw's responder stalled (common/rping.sh), and a siw responder that
        // left the ready-to-receive message unread then hit a BUG in its kernel's iw_cm
        // (cm_work_handler, iwcm.c:964) once its server was killed.
        s += "echo 0 > /sys/module/qpip_ib/parameters/peer_to_peer\n";

        // The driver's debug messages (its events) in the kernel log, for a failure's report.
        s += "echo 'module qpip_ib +p' > /proc/dynamic_debug/control\n";
        s += "ip link set qpip0 up\n";
        // b's NIC through qpip0: rdma_cm then resolves the route to the qpip device.
        s += &format!("ip -6 route add {b6}/128 dev qpip0\nip -4 route add {b4}/32 dev qpip0\n");
        s += &format!("kv route6 \"$(ip -6 route get {b6})\"\n");
        s += &format!("kv route4 \"$(ip -4 route get {b4})\"\n");
    }
    s += "touch /lab/up.$QPIP_GUEST_NAME\nawait up.a && await up.b\n";
    for (tag, v4, iters, size) in RPINGS {
        let args = format!("-C {iters} -S {size}");
        if n == 2 {
            s += &format!("serve {tag} {} {args}\n", if v4 { "siw4" } else { "siw" });
        } else {
            s += &format!("rclient {tag} {} {args}\n", if v4 { &b4 } else { &b6 });
        }
        s += &format!(
            "touch /lab/{tag}.done.$QPIP_GUEST_NAME\nawait {tag}.done.a && await {tag}.done.b\n"
        );
    }
    // Nobody listens: the connect is refused, cleanly.
    if n == 1 {
        s += &format!(
            "timeout 60 rping -c -a {b6} -p 7999 -C 1 >/tmp/refused 2>&1; kv refused.status $?\n"
        );
        s += "kv refused.out \"$(tr '\\n' '|' < /tmp/refused)\"\n";
    }
    for prog in PERFTESTS {
        let args = perf_args(prog);
        if n == 2 {
            s += &format!("pserve {prog} {prog} {args}\n");
        } else {
            s += &format!("pclient {prog} {b4} {args}\n");
        }
        s += &format!(
            "touch /lab/{prog}.done.$QPIP_GUEST_NAME\nawait {prog}.done.a && await {prog}.done.b\n"
        );
    }
    // An RDMA Write with immediate data towards siw (rping's server there accepts the
    // connection): the connection did not agree to immediate data, so it completes in
    // error. (qperf's rc_rdma_write_bw cannot show it: its server asks siw for a QP of no
    // send WRs, which siw refuses.)
    if n == 2 {
        s += "hold wimm\n";
    } else {
        s += &format!(
            "await wimm.1 && {{ timeout 60 qpip-cm-check --write-imm-to {b6} 7174 >/tmp/wimm 2>&1; kv wimm.status $?; }}\n"
        );
        s += "while read -r k v; do kv \"$k\" \"$v\"; done < /tmp/wimm\ntouch /lab/wimm.done.a\n";
    }
    s += "touch /lab/wimm.end.$QPIP_GUEST_NAME\nawait wimm.end.a && await wimm.end.b\n";
    // The roles reversed: servers on a's qpip0 (the passive side), b's clients on siw.
    if n == 1 {
        s += "A4=$(ip -4 addr show dev qpip0 scope global | awk '/inet / {print $2}' | cut -d/ -f1 | head -n 1)\n";
        s += "kv qpip0.addr4 \"$A4\"; [ -n \"$A4\" ] || touch /lab/no4\n";
        s += "qserve rs6 \"$QPIP_DEV_ADDR\" rping -C 20 -S 2000\n";
        s += "[ -z \"$A4\" ] || qserve rs4 \"$A4\" rping -C 20 -S 2000\n";
        // perftest's servers on qpip0 (IPv4, its default), for b's siw clients.
        for prog in PERFTESTS_REVERSED {
            s += &format!(
                "[ -z \"$A4\" ] || qserve p.{prog} - {prog} {}\n",
                perf_args(prog)
            );
        }
    } else {
        let a6 = netns::device_addr(1);
        let a4 = netns::device_addr4(1);
        // a's device through b's NIC, whatever b's own qpip0 does: siw carries it.
        s += &format!("ip -6 route replace {a6}/128 dev \"$QPIP_NET_IF\"\n");
        s += &format!("ip -4 route replace {a4}/32 dev \"$QPIP_NET_IF\"\n");
        s += "sclient() { t=$1; addr=$2; shift 2; await \"$t.ready\" || return\n";
        s += "    timeout 120 rping -c -a \"$addr\" -V -v \"$@\" >\"/tmp/$t.c\" 2>&1; st=$?\n";
        s += "    kv \"$t.client\" $st; kv \"$t.pings\" \"$(grep -c '^ping data: ' \"/tmp/$t.c\")\"\n";
        s += "    [ $st = 0 ] || grep -v '^ping data: ' \"/tmp/$t.c\" | tail -n 40 | sed \"s/^/  $t: /\"; }\n";
        s += &format!("sclient rs6 {a6} -C 20 -S 2000\n");
        s += &format!("[ -e /lab/no4 ] || sclient rs4 {a4} -C 20 -S 2000\n");
        // perftest's clients on siw: each connects twice, the second time right after its
        // server listened again (the driver's lingering listener holds that connection).
        s += "sperf() { t=p.$1; await \"$t.ready\" || return\n";
        s += "    timeout 120 \"$@\" >\"/tmp/$t.c\" 2>&1; st=$?\n";
        s += "    kv \"$t.client\" $st\n";
        s += "    kv \"$t.result\" \"$(grep -E '^ *[0-9]+ +[0-9]+' \"/tmp/$t.c\" | tail -n 1)\"\n";
        s += "    [ $st = 0 ] || tail -n 40 \"/tmp/$t.c\" | sed \"s/^/  $t: /\"; }\n";
        for prog in PERFTESTS_REVERSED {
            s += &format!(
                "[ -e /lab/no4 ] || sperf {prog} -d siw0 -R {} {a4}\n",
                perf_args(prog)
            );
        }
    }
    s += "touch /lab/rs.done.$QPIP_GUEST_NAME\nawait rs.done.a && await rs.done.b\n";
    // A client killed while connected: its device context goes.
    if n == 2 {
        // One attempt: a's client is killed on purpose and does not follow a second one.
        // Killing it can leave bytes unread on the server's socket, which `serve` would
        // take for siw's responder stall, and a second server would then wait forever.
        s += "ATTEMPTS=1; serve killed siw -C 100000 -S 1000; ATTEMPTS=5\n";
    } else {
        s += "before=$(contexts); kv contexts.before \"$before\"\n";
        s += &format!(
            "await killed.1 && {{ rping -c -a {b6} -C 100000 -S 1000 >/dev/null 2>&1 & p=$!; }}\n"
        );
        s += "sleep 5; kv killed.running \"$(kill -0 $p 2>/dev/null && echo yes || echo no)\"\n";
        s += "kv contexts.connected \"$(contexts)\"\n";
        s += "kill -9 $p; wait $p\n";
        s += "i=0; until [ \"$(contexts)\" = \"$before\" ] || [ $i -ge 100 ]; do i=$((i + 1)); sleep 0.1; done\n";
        s += "kv contexts.killed \"$(contexts)\"\n";
    }
    s += "touch /lab/killed.done.$QPIP_GUEST_NAME\nawait killed.done.a && await killed.done.b\n";
    // A device reset, then qpip_ib unloaded, each under a connected client.
    if n == 2 {
        s += "hold reset\nhold unload\n";
    } else {
        s += &format!("B6={b6}\n");
        s += "under reset sh -c 'echo 1 > /sys/class/qpip/qpip0/reset'\n";
        s += "touch /lab/reset.done.a\nip link set qpip0 up\n";
        s += "under unload rmmod qpip_ib\ntouch /lab/unload.done.a\n";
        s += "kv dmesg.bad \"$(dmesg | grep -E 'BUG:|Oops|WARNING:|general protection|refcount_t|hung_task' | tr '\\n' '|')\"\n";
    }
    common::script(
        &format!("{}{CLIENT_SHELL}{SERVER_SHELL}", common::RPING_SHELL),
        &s,
    )
}

#[test]
#[ignore = "boots VMs: run by ./qpip test"]
fn rdma_core_programs_on_qpip_against_siw() {
    needs_root!();
    let guest = |n: usize| common::lab_guest(guest_name(n), script(n), Duration::from_secs(900));
    let spec = LabSpec {
        guests: vec![guest(1), guest(2)],
        network: Network::Lab(unique_netns("qpip-rdmacm")),
        layout: QpipdLayout::Adapter,
    };
    let out = common::lab(&spec, |_| ());
    let (ga, gb) = (out.guest("a"), out.guest("b"));
    let (a, b) = (Report::new(ga), Report::new(gb));
    let ctx = || format!("=== a:\n{}\n=== b:\n{}", a.context(), b.context());
    assert_eq!((ga.status, gb.status), (0, 0), "{}", ctx());
    assert_eq!(b.get("siw.status"), "0", "siw on b\n{}", ctx());
    assert_eq!(a.get("load.status"), "0", "lab-qpip-ib on a\n{}", ctx());
    for key in ["route6", "route4"] {
        assert!(a.get(key).contains("dev qpip0"), "{key}\n{}", ctx());
    }

    for (tag, _, iters, size) in RPINGS {
        let done = [
            b.get(&format!("{tag}.server")),
            a.get(&format!("{tag}.client")),
        ];
        assert_eq!(done, ["0", "0"], "{tag}: server and client\n{}", ctx());
        assert_eq!(
            a.num(&format!("{tag}.pings")),
            iters,
            "{tag}: pings the client checked\n{}",
            ctx()
        );
        eprintln!("  {tag}: rping on qpip0 against siw, {iters} × {size} bytes checked");
    }

    let refused = a.get("refused.status");
    assert!(
        refused != "0" && refused != "124",
        "rping to a port nobody listens on: {refused}\n{}",
        ctx()
    );

    for prog in PERFTESTS {
        let done = [
            b.get(&format!("{prog}.server")),
            a.get(&format!("{prog}.client")),
        ];
        assert_eq!(done, ["0", "0"], "{prog}: server and client\n{}", ctx());
        eprintln!(
            "  {prog}: {} (siw stalls retried: {})",
            a.get(&format!("{prog}.result")),
            b.get(&format!("{prog}.stalls"))
        );
    }

    // A Write with immediate data on a qpip ⇄ siw connection: refused by an error
    // completion, cleanly (not a failed post, not a hang), the connection set up as ever.
    for (k, want) in [
        ("wimm.status", "0"),
        ("wimm.connect", "RDMA_CM_EVENT_ESTABLISHED"),
        ("wimm.post", "ok"),
        ("wimm.send", "local QP operation error RDMA_WRITE"),
        ("wimm.disconnect", "ok"),
    ] {
        assert_eq!(
            a.get(k),
            want,
            "{k}: a Write with immediate data to siw\n{}",
            ctx()
        );
    }
    eprintln!("  RDMA Write with immediate data to siw: completes IBV_WC_LOC_QP_OP_ERR");

    // The roles reversed: a's qpip0 serves, b's siw connects.
    let mut reversed = vec!["rs6"];
    let perf_reversed = PERFTESTS_REVERSED.map(|p| format!("p.{p}"));
    if !a.get("qpip0.addr4").is_empty() {
        reversed.push("rs4");
        for t in &perf_reversed {
            let done = [a.get(&format!("{t}.server")), b.get(&format!("{t}.client"))];
            assert_eq!(
                done,
                ["0", "0"],
                "{t}: perftest's server on qpip, its client on siw\n{}",
                ctx()
            );
            eprintln!(
                "  {t}: server on qpip0, client on siw: {}",
                b.get(&format!("{t}.result"))
            );
        }
    } else {
        eprintln!("  qpip0 has no IPv4 address: no IPv4 server on it");
    }
    for t in reversed {
        let done = [a.get(&format!("{t}.server")), b.get(&format!("{t}.client"))];
        assert_eq!(
            done,
            ["0", "0"],
            "{t}: server on qpip, client on siw\n{}",
            ctx()
        );
        assert_eq!(b.num(&format!("{t}.pings")), 20, "{t}\n{}", ctx());
        eprintln!("  {t}: server on qpip0 (passive side), client on siw");
    }

    assert_eq!(a.get("killed.running"), "yes", "{}", ctx());
    let before = a.num("contexts.before");
    assert_eq!(a.num("contexts.connected"), before + 1, "{}", ctx());
    assert_eq!(a.num("contexts.killed"), before, "{}", ctx());
    // A reset and an unload under a connected client: the client's context gone, no oops.
    // (A reset leaves the client waiting for completions the device can no longer write:
    // it is killed. An unload tells it the device went away.) `before` counts qpip_ib's
    // listening context, kept since a's servers listened: a reset kills it (it stays
    // counted until the next listen replaces it), unloading qpip_ib destroys it.
    for t in ["reset", "unload"] {
        assert_eq!(a.get(&format!("{t}.running")), "yes", "{t}\n{}", ctx());
        assert_eq!(a.get(&format!("{t}.status")), "0", "{t}\n{}", ctx());
    }
    assert_eq!(a.num("reset.contexts"), before, "reset\n{}", ctx());
    assert_eq!(a.num("unload.contexts"), 0, "unload\n{}", ctx());
    assert_eq!(a.get("unload.exited"), "yes", "{}", ctx());
    assert_eq!(a.get("dmesg.bad"), "", "the kernel log\n{}", ctx());
}
