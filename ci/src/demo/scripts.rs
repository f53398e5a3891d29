//! The guest side of the demo: shell scripts for guest `a` (runs the steps, as the client)
//! and guest `b` (serves), meeting in `/lab`.
//!
//! Guest a reports on its output, one line each:
//! - `@step=ID` when step ID starts, `@ok=ID` when it passed, `@fail=ID: WHY` when it
//!   failed (the script then exits 1);
//! - `@perf.NAME=JSON`: what `qpip-perf --json` printed;
//! - `@bulk.NAME=BYTES START END`: a verified bulk transfer and its guest uptime at start
//!   and end (seconds, 10 ms resolution);
//! - `@note=TEXT`: something the progress lines show (which qpip netdev the bench uses, or
//!   why it has none);
//! - `@overhead[.ROUND]=JSON`: what `qpip-overhead --json` printed (the bench);
//! - `@cpu.NAME=start|A|B|HOST` and `@cpu.NAME=end|A|B|HOST`: the edges of the CPU window
//!   of measurement NAME (the bench; see [`super::results`]).
//!
//! A CPU window (the bench's [`Plan::cpu_marks`]): at each edge guest a creates
//! `/lab/cpu-mark.N` (N counts from 1); guest b answers with the first line of its
//! `/proc/stat` in `/lab/cpu-mark.N.b`, the lab host with its line in
//! `/lab/cpu-mark.N.host` (see `host_side::serve_cpu_marks`). Guest a reads its own
//! `/proc/stat` last at the start and first at the end, so its waits for the answers stay
//! outside the window; the window holds the test whole, and about 0.1 s more of guest b's
//! and the host's time (the answers' polling). The bench takes the host's CPU from these
//! windows; the guests' busy time over the measured interval alone comes from `qpip-perf`
//! itself (see [`super::results`]).
//!
//! Guest b starts its `qpip-perf` servers, then the bulk receivers of round 1 (a `qpip-cat`
//! and an `nc` listener), checks each is listening, then creates `/lab/b-ready` (or reports
//! `@fail=ready: ...` and creates `/lab/b-failed`). After each bulk transfer it writes
//! `/lab/bulk-NAME.b`: its receiver's exit status and the SHA-256 of what it received. Once
//! both receivers of a round are done it starts those of the next round, on their own ports,
//! and creates `/lab/bulk-ready.ROUND` when they listen (guest a waits for it before a
//! round's bulk transfers). It stays up until guest a creates `/lab/a-done` (a does on every
//! way out).

use super::{Action, Net, Plan, Test, RDMA_LAT_TRIPWIRE};
use crate::netns;

/// TCP/UDP ports guest b serves on, and the lab host's.
pub const PERF_QP_PORT: u16 = 5201;
pub const PERF_SOCKETS_PORT: u16 = 5202;
/// Guest b's `qpip-perf -s --rdma write` (iWARP QPs on its qpip device).
pub const PERF_RDMA_PORT: u16 = 5203;
/// The first of guest b's perftest servers on siw and rxe (perftest's default port), one
/// port per RDMA measurement on siw or rxe in the run, each server serving one test.
pub const PERFTEST_PORT: u16 = 18515;
/// Round 1's bulk ports; round r's are 2·(r-1) above (below the lab host's ports for
/// every round up to [`super::results::MAX_ROUNDS`]).
pub const BULK_QP_PORT: u16 = 7000;
pub const BULK_SOCKETS_PORT: u16 = 7001;
/// Round 1's bulk port over the qpip netdev; round r's is r-1 above (clear of the two
/// above's for every round up to [`super::results::MAX_ROUNDS`]).
pub const BULK_NETDEV_PORT: u16 = 7040;
pub const HOST_TCP_PORT: u16 = 7100;
pub const HOST_UDP_PORT: u16 = 7101;
pub const GUEST_LISTEN_PORT: u16 = 7102;

/// Helpers both guests use.
pub(super) const COMMON: &str = r#"
set -u
now() { cut -d' ' -f1 /proc/uptime; }
sha() { sha256sum < "$1" | cut -d' ' -f1; }
oneline() { tr '\n' ' ' < "$1" | cut -c1-400; }
# listening PORT: a kernel TCP socket listens on PORT (state 0A in /proc/net/tcp6).
listening() { grep -qi "^ *[0-9]*: [0-9A-F]*:$(printf %04X "$1") [0-9A-F]*:0000 0A" /proc/net/tcp6; }
# nap: waits 0.1 s without starting a process, so a guest waiting for its peer stays idle.
. /lib/qpip/nap.sh
# until_true SECS CMD...: runs CMD every 0.1 s until it succeeds; fails after SECS.
until_true() {
    n=$(($1 * 10)); shift
    while ! "$@"; do
        n=$((n - 1)); [ "$n" -gt 0 ] || return 1
        nap
    done
}
has() { grep -q "$2" "$1" 2>/dev/null; }
"#;

/// Guest a's step reports and CPU marks (see the module's documentation): `step ID`,
/// `ok`, `fail WHY`, `await NAME SECS`, `cpu_start` and `cpu_end NAME`. Guest a's script
/// also traps its exit to create `/lab/a-done`.
pub(super) const STEPS_A: &str = r#"CUR=start
step() { CUR=$1; echo "@step=$1"; }
ok() { echo "@ok=$CUR"; }
fail() { echo "@fail=$CUR: $*"; exit 1; }
# await NAME SECS: waits for /lab/NAME; guest b's failure ends the wait.
await() {
    n=$(($2 * 10))
    until [ -e "/lab/$1" ]; do
        [ ! -e /lab/b-failed ] || fail "guest b failed (see its output)"
        n=$((n - 1)); [ "$n" -gt 0 ] || fail "/lab/$1 did not appear within $2 s"
        nap
    done
}
# cpu_ask: a CPU mark's answers from guest b (CPU_B) and the lab host (CPU_H).
MARK=0
cpu_ask() {
    MARK=$((MARK + 1))
    touch /lab/cpu-mark.$MARK
    await cpu-mark.$MARK.b 60
    await cpu-mark.$MARK.host 60
    read -r CPU_B < /lab/cpu-mark.$MARK.b
    read -r CPU_H < /lab/cpu-mark.$MARK.host
}
# cpu_start, then cpu_end NAME: the edges of the CPU window of measurement NAME, both
# reported by cpu_end (after the window) as @cpu.NAME=start|... and @cpu.NAME=end|...
cpu_start() {
    cpu_ask
    START_B=$CPU_B; START_H=$CPU_H
    read -r START_A < /proc/stat
}
cpu_end() {
    read -r end_a < /proc/stat
    cpu_ask
    echo "@cpu.$1=start|$START_A|$START_B|$START_H"
    echo "@cpu.$1=end|$end_a|$CPU_B|$CPU_H"
}
"#;

/// The port guest b receives round `round`'s bulk transfer over `net` on (QPs on IPv4
/// have no bulk transfer: theirs would be the QPs').
pub fn bulk_port(net: Net, round: u32) -> u16 {
    let r = (round.max(1) - 1) as u16;
    match net {
        Net::Qp | Net::Qp4 => BULK_QP_PORT + 2 * r,
        // (rxe and qpip0's perftest measure RDMA only, never a bulk transfer.)
        Net::Sockets | Net::Rxe | Net::Verbs => BULK_SOCKETS_PORT + 2 * r,
        Net::Netdev => BULK_NETDEV_PORT + r,
    }
}

/// Both guests' setup of their qpip netdev (the plan's [`Plan::netdev`]): `netdev_up PEER6
/// PEER4 OWN6 OWN4` finds the network interface the guest driver made for the qpip device
/// (the one with the device's MAC), makes each interface answer ARP for its own addresses
/// only, brings it up, waits for its carrier and for the device's IPv6 address on it (the
/// driver gives the interface the device's addresses when it comes up), and routes the
/// peer's device addresses through it with host routes from this guest's device addresses:
/// the guests' virtio-net NICs are on the same subnets, and without them the kernel may
/// send by virtio-net. It checks that the kernel's route to each peer address is now by the
/// interface. It sets ND_DEV; returns 0
/// when done, 2 when the guest has no such interface (a driver without it) and 1 when the
/// setup failed, ND_WHY saying why.
const NETDEV_UP: &str = r#"# netdev_up PEER6 PEER4 OWN6 OWN4: see the bench's scripts (ci/src/demo/scripts.rs).
netdev_up() {
    ND_DEV=; ND_WHY=
    mac=$(tr A-F a-f < /sys/class/qpip/qpip0/mac 2>/dev/null)
    [ -n "$mac" ] || { ND_WHY="no qpip device (/sys/class/qpip/qpip0/mac)"; return 2; }
    for f in /sys/class/net/*/address; do
        if [ "$(tr A-F a-f < "$f")" = "$mac" ]; then
            ND_DEV=${f#/sys/class/net/}; ND_DEV=${ND_DEV%/address}
        fi
    done
    [ -n "$ND_DEV" ] || { ND_WHY="no network interface has the qpip device's MAC $mac (a driver without the netdev)"; return 2; }
    # Once the netdev is up its IPv4 address is the kernel's: each interface answers ARP
    # for its own addresses only (else virtio-net would answer for the device's, on the
    # same link, and take its traffic), as a host with two NICs on one link must. No
    # duplicate address detection on it: the device has the address already.
    { echo 1 > /proc/sys/net/ipv4/conf/all/arp_ignore && echo 2 > /proc/sys/net/ipv4/conf/all/arp_announce; } 2> /tmp/nd.err \
        || { ND_WHY="cannot set arp_ignore and arp_announce: $(oneline /tmp/nd.err)"; return 1; }
    echo 0 > /proc/sys/net/ipv6/conf/$ND_DEV/accept_dad 2> /dev/null
    ip link set "$ND_DEV" up 2> /tmp/nd.err || { ND_WHY="ip link set $ND_DEV up failed: $(oneline /tmp/nd.err)"; return 1; }
    # Carrier: the driver's queues on the device are up (a device without raw QPs leaves
    # the interface without it).
    n=100
    until [ "$(cat /sys/class/net/$ND_DEV/carrier 2>/dev/null)" = 1 ]; do
        n=$((n - 1))
        [ "$n" -gt 0 ] || { ND_WHY="$ND_DEV has no carrier 10 s after ip link set up (see the guest's kernel log)"; return 1; }
        nap
    done
    # The device's IPv6 address on it (the driver gives it when the interface comes up),
    # not tentative (else the kernel would source from virtio-net's, and routes from it
    # are refused).
    n=300
    until ip -6 addr show dev "$ND_DEV" > /tmp/nd.addr 2>&1 && grep "inet6 $3/" /tmp/nd.addr | grep -qv tentative; do
        n=$((n - 1))
        [ "$n" -gt 0 ] || { ND_WHY="$ND_DEV has not the device's address $3 (or it stays tentative): $(oneline /tmp/nd.addr)"; return 1; }
        nap
    done
    # replace: an existing route to the peer (left from before, or by another interface)
    # is taken over, never an error.
    ip -6 route replace "$1/128" dev "$ND_DEV" src "$3" 2> /tmp/nd.err \
        || { ND_WHY="ip -6 route replace $1/128 dev $ND_DEV src $3 failed: $(oneline /tmp/nd.err)"; return 1; }
    ip -4 route replace "$2/32" dev "$ND_DEV" src "$4" 2> /tmp/nd.err \
        || { ND_WHY="ip -4 route replace $2/32 dev $ND_DEV src $4 failed: $(oneline /tmp/nd.err)"; return 1; }
    for peer in "$1" "$2"; do
        ip route get "$peer" > /tmp/nd.route 2>&1
        grep -q "dev $ND_DEV " /tmp/nd.route || { ND_WHY="the route to $peer is not by $ND_DEV: $(oneline /tmp/nd.route)"; return 1; }
    done
}
"#;

/// `netdev_up`'s arguments in guest `n` (1: a, 2: b), its peer being the other one.
fn netdev_args(n: usize) -> String {
    let peer = 3 - n;
    format!(
        "{} {} {} {}",
        netns::device_addr(peer),
        netns::device_addr4(peer),
        netns::device_addr(n),
        netns::device_addr4(n)
    )
}

/// The RDMA measurements of perftest (on qpip0, siw and rxe), in the order guest a runs
/// them: (step id, test, net, the port of guest b's perftest server for it).
fn perftest_steps(plan: &Plan) -> Vec<(String, Test, Net, u16)> {
    plan.steps()
        .into_iter()
        .filter_map(|s| match s.action {
            Action::Measure { test, net, .. }
                if test.is_rdma() && matches!(net, Net::Sockets | Net::Rxe | Net::Verbs) =>
            {
                Some((s.id, test, net))
            }
            _ => None,
        })
        .zip(PERFTEST_PORT..)
        .map(|((id, test, net), port)| (id, test, net, port))
        .collect()
}

/// The name of the RDMA device perftest runs on over `net` (for messages).
fn anchor(net: Net) -> &'static str {
    match net {
        Net::Rxe => "rxe",
        Net::Verbs => "qpip0",
        _ => "siw",
    }
}

/// The GID of IPv6 address `addr` as sysfs prints a port's GIDs (eight groups of four
/// hex digits): how a guest finds the index of rxe0's GID for its lab address.
pub fn gid_of(addr: &str) -> String {
    let ip: std::net::Ipv6Addr = addr.parse().expect("an IPv6 address");
    ip.segments()
        .iter()
        .map(|g| format!("{g:04x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Guest `n`'s soft-RoCE: `lab-rxe` (after `lab-siw`, so that rdma_cm, which takes the
/// first device over an address's interface, keeps siw0 for the siw measurements), then
/// `RXE_GID`, the index of rxe0's GID for the guest's lab IPv6 address (RoCEv2), which
/// perftest's `-x` takes on both ends. `die` is the guest's failure command.
fn rxe_up(n: usize, die: &str) -> String {
    format!(
        r#"lab-rxe > /tmp/rxe 2>&1 || {die} "lab-rxe: $(oneline /tmp/rxe)"
RXE_GID=
for g in /sys/class/infiniband/rxe0/ports/1/gids/*; do
    [ "$(cat "$g")" = {gid} ] && RXE_GID=${{g##*/}} && break
done
[ -n "$RXE_GID" ] || {die} "rxe0 has no GID for {addr}: $(cat /sys/class/infiniband/rxe0/ports/1/gids/* | sort -u | tr '\n' ' ')"
"#,
        gid = gid_of(&netns::virtio_addr(n)),
        addr = netns::virtio_addr(n)
    )
}

/// Guest `n`'s RDMA device on qpip (`lab-qpip-ib`: `qpip_ib.ko`, an ib_device `qpip0` over
/// the qpip netdev), when the plan runs perftest on it ([`Net::Verbs`]); after `lab-siw`
/// and `lab-rxe`, which keep the virtio-net NIC's devices. `die` is the guest's failure
/// command.
fn qpip_ib_up(plan: &Plan, die: &str) -> String {
    if !plan.netdev || plan.qp_only {
        return String::new();
    }
    format!("lab-qpip-ib > /tmp/qpip-ib 2>&1 || {die} \"lab-qpip-ib: $(oneline /tmp/qpip-ib)\"\n")
}

/// perftest's arguments for an RDMA measurement on qpip0, siw or rxe (`net`), the same on
/// both ends (perftest's server takes its size and count from its own command line), the
/// same sizes, counts and depths on every device. siw: `-R`, the QP is connected by
/// rdma_cm, as iWARP needs, over IPv6 (`--ipv6-addr`: perftest resolves IPv4 only without
/// it, "Address family for hostname not supported"). qpip0: `-d qpip0 -R`, rdma_cm over
/// IPv4 to guest b's qpip device address (routed through the qpip netdevs, so rdma_cm picks
/// qpip0). rxe: `-d rxe0 -x $RXE_GID`, the device and its RoCEv2 GID named, QP numbers
/// exchanged over perftest's own TCP connection (not rdma_cm, which would take siw0, the
/// first device over the same interface), IPv6. `-F`: no failure when the CPU frequency is
/// not fixed (never under TCG).
fn perftest(plan: &Plan, test: Test, net: Net, port: u16) -> String {
    let (connect, family) = match net {
        Net::Rxe => ("-d rxe0 -x $RXE_GID", " --ipv6-addr"),
        Net::Verbs => ("-d qpip0 -R", ""),
        _ => ("-R", " --ipv6-addr"),
    };
    let program = test.perftest_program().unwrap_or("ib_write_bw");
    let common = format!("{program} {connect} -F{family} -p {port}");
    match test {
        Test::RdmaLat | Test::RdmaReadLat | Test::RdmaSendLat => format!(
            "{common} -s {} -n {}",
            plan.rdma_lat_size, plan.latency_iters
        ),
        Test::RdmaReadBw => format!(
            "{common} -s {} -n {} -t {RDMA_DEPTH} -o {RDMA_READS}",
            plan.rdma_bw_size,
            plan.rdma_bw_count(),
        ),
        _ => format!(
            "{common} -s {} -n {} -t {RDMA_DEPTH}",
            plan.rdma_bw_size,
            plan.rdma_bw_count(),
        ),
    }
}

/// Guest a's system call count of one program (a perftest client): `sys_count_start`
/// before it runs, `sys_count_end PROG` after, which prints what PROG made in between as
/// `TOTAL NAME:N NAME:N ...` (by call; nothing without tracefs) and stops counting. The
/// guest kernel's ftrace counts them, a hist trigger on `raw_syscalls:sys_enter` keyed on
/// the process (shown by its program's name: `.execname`) and the call, no tracer in the
/// program's way. (The hist keys of 6.12 have no `common_comm`.)
const SYS_COUNT: &str = r#"TRACE=/sys/kernel/tracing
[ -e $TRACE/events ] || mount -t tracefs none $TRACE 2>/dev/null
SYS_HIST='hist:keys=common_pid.execname,id.syscall:vals=hitcount:size=4096'
# (A try before, that failed, leaves its counts: they go with its trigger.)
sys_count_start() {
    echo "!$SYS_HIST" > $TRACE/events/raw_syscalls/sys_enter/trigger 2>/dev/null
    echo "$SYS_HIST" > $TRACE/events/raw_syscalls/sys_enter/trigger 2>/dev/null
}
sys_count_end() {
    awk -v p="$1" '
        index($0, "common_pid: " p " ") || index($0, "common_pid: " p "[") {
            n = $NF; c = $0
            sub(/.*id: */, "", c); sub(/[ 	[].*/, "", c); sub(/^sys_/, "", c)
            tot += n; by[c] += n; any = 1
        }
        END { if (any) { printf "%d", tot; for (k in by) printf " %s:%d", k, by[k]; print "" } }
    ' $TRACE/events/raw_syscalls/sys_enter/hist 2>/dev/null
    echo "!$SYS_HIST" > $TRACE/events/raw_syscalls/sys_enter/trigger 2>/dev/null
}
"#;

/// How long one perftest run on siw or rxe may take, s (the longest takes a few seconds
/// under TCG): siw has been seen to stall an `ib_read_bw` for good, and the bench must not wait
/// for it past its round's limit. Guest a then tells guest b, which restarts its server.
pub const PERFTEST_LIMIT_S: u32 = 120;

/// RDMA Writes in flight in the bandwidth test, on both sides (qpip-perf's own default
/// depth; perftest's `-t`).
pub const RDMA_DEPTH: usize = 64;
/// RDMA Reads outstanding in the Read bandwidth test: the ORD qpip-perf's ends agree on,
/// and perftest's `-o`.
pub const RDMA_READS: usize = 16;

/// Guest b: the servers, the bulk receivers round by round; waits for guest a to finish.
pub fn guest_b(plan: &Plan) -> String {
    // Which of guest a's steps a receiver's failure in a round belongs to: round 1's are
    // part of getting ready, a later round's to its first bulk transfer to them (over QPs
    // or virtio-net; the qpip netdev's receivers are apart).
    let steps = plan.steps();
    let first_bulk = |round: u32| {
        steps
            .iter()
            .find(|s| {
                matches!(s.action, Action::Measure { test: Test::Bulk, round: r, net } if r == round && net != Net::Netdev)
            })
            .map_or_else(|| "ready".to_string(), |s| s.id.clone())
    };
    let bulk = steps.iter().any(|s| {
        matches!(
            s.action,
            Action::Measure {
                test: Test::Bulk,
                ..
            }
        )
    });
    let mut rounds = String::new();
    for r in (1..=plan.rounds.max(1)).filter(|_| bulk) {
        let fail_as = if r == 1 {
            "ready".to_string()
        } else {
            first_bulk(r)
        };
        rounds += &format!(
            "    receivers {r} {} {} {} {} {fail_as}\n",
            plan.tag("qp", r),
            plan.tag("sk", r),
            bulk_port(Net::Qp, r),
            bulk_port(Net::Sockets, r),
        );
    }
    // RDMA: soft-iWARP and soft-RoCE, the qpip-perf server on iWARP QPs, and one perftest
    // server after another, each started when the one before has served its test.
    let steps = perftest_steps(plan);
    let (rdma_start, rdma_ready) = if plan.rdma {
        let serves: String = steps
            .iter()
            .map(|(id, test, net, port)| {
                format!(
                    "    perftest_serve {id} {port} {} {}\n",
                    // Readiness: siw's rdma_cm listener and rxe's perftest listen with a
                    // kernel TCP socket on IPv6; qpip0's listens on the device.
                    if *net == Net::Verbs { "cm" } else { "tcp6" },
                    perftest(plan, *test, *net, *port)
                )
            })
            .collect();
        (
            format!(
                r#"lab-siw > /tmp/siw 2>&1 || bfail ready "lab-siw: $(oneline /tmp/siw)"
{rxe_up}{qpip_ib}qpip-perf -s --rdma write --port {PERF_RDMA_PORT} > /tmp/perf-rdma 2>&1 &
# cm_listening PROG: PROG has a listening rdma_cm id (a server on qpip0 listens on the
# device, with no kernel socket).
cm_listening() {{ rdma res show cm_id 2>/dev/null | grep -q "state LISTEN.*comm $1"; }}
# perftest_serve STEP PORT READY CMD...: a perftest server for guest a's step STEP, listening
# on PORT; says so in /lab/pt-ready.STEP once it listens: READY tcp6, a kernel TCP socket
# listens on PORT (rdma_cm over siw, and perftest's own connection on rxe); cm, CMD has a
# listening rdma_cm id (qpip0's listener is on the device).
# siw now and then refuses a connection its listener should take, or stalls a test, and
# guest a's client then tries again: a server that failed, or that guest a found stalled
# (/lab/pt-stalled.STEP), is started again (3 times; one that ended well served its
# test, whether or not it prints a result: ib_read_lat's side does not).
perftest_serve() {{
    s=$1; port=$2; ready=$3; shift 3
    for try in 1 2 3; do
        "$@" >> /tmp/pt-$s 2>&1 &
        p=$!
        if [ $ready = cm ]; then
            until_true 60 cm_listening $1 || bfail $s "$1 -p $port is not listening: $(oneline /tmp/pt-$s)"
        else
            until_true 60 listening $port || bfail $s "$1 -p $port is not listening: $(oneline /tmp/pt-$s)"
        fi
        touch /lab/pt-ready.$s
        (
            until [ -e /lab/pt-stalled.$s ] || ! kill -0 $p 2>/dev/null; do sleep 1; done
            [ -e /lab/pt-stalled.$s ] && rm -f /lab/pt-stalled.$s && kill $p 2>/dev/null
        ) &
        wait $p && return 0
    done
}}
"#,
                rxe_up = rxe_up(2, "bfail ready"),
                qpip_ib = qpip_ib_up(plan, "bfail ready")
            ),
            format!(
                r#"until_true 60 has /tmp/perf-rdma serving || bfail ready "qpip-perf -s --rdma is not serving: $(oneline /tmp/perf-rdma)"
(
{serves}) &
"#
            ),
        )
    } else {
        (String::new(), String::new())
    };
    let netdev = netdev_b(plan);
    // Past the lab's own limit: the lab ends the run, never this wait.
    let wait_secs = plan.limit().as_secs() + 60;
    format!(
        r#"{COMMON}
# bfail STEP WHY: reports a failure as guest a's step STEP and tells guest a.
bfail() {{ s=$1; shift; echo "@fail=$s: $*"; touch /lab/b-failed; exit 1; }}
{rdma_start}{nbd_start}qpip-perf -s --port {PERF_QP_PORT} > /tmp/perf-qp 2>&1 &
qpip-perf -s --sockets --port {PERF_SOCKETS_PORT} > /tmp/perf-sk 2>&1 &
# Each receiver reports its exit status and the SHA-256 of what it got, written under
# another name first so guest a never reads half a report; what it got is then dropped
# (the guest's files are in RAM).
receive() {{
    name=$1; shift
    "$@" > /tmp/bulk-$name 2> /tmp/bulk-$name.err
    echo "$? $(sha /tmp/bulk-$name) $(oneline /tmp/bulk-$name.err)" > /lab/.bulk-$name.b
    rm -f /tmp/bulk-$name
    mv /lab/.bulk-$name.b /lab/bulk-$name.b
}}
# busybox nc ends its sending direction when its stdin ends, and the client nc exits when
# it sees that: stdin is a FIFO opened read-write, which never ends.
mkfifo /tmp/never
# receivers ROUND QP_NAME SK_NAME QP_PORT SK_PORT STEP: one round's two bulk receivers;
# says when both listen (/lab/bulk-ready.ROUND) and returns when both are done.
receivers() {{
    receive $2 qpip-cat -v --message -w 600 -l $4 &
    q=$!
    receive $3 nc -l -p $5 <> /tmp/never &
    k=$!
    until_true 60 has /tmp/bulk-$2.err "listening on" || bfail $6 "qpip-cat -l $4 is not listening: $(oneline /tmp/bulk-$2.err)"
    until_true 60 listening $5 || bfail $6 "nc -l -p $5 is not listening"
    touch /lab/bulk-ready.$1
    wait $q $k
}}
{receivers}{netdev}until_true 60 has /tmp/perf-qp serving || bfail ready "qpip-perf -s (QPs) is not serving: $(oneline /tmp/perf-qp)"
until_true 60 has /tmp/perf-sk serving || bfail ready "qpip-perf -s --sockets is not serving: $(oneline /tmp/perf-sk)"
{receivers_ready}{rdma_ready}[ ! -e /lab/b-failed ] || exit 1
touch /lab/b-ready
{wait}"#,
        nbd_start = if plan.nbd_bytes > 0 {
            nbd_serve()
        } else {
            String::new()
        },
        // Without bulk transfers (the bench's pass in the other layout) no receivers.
        receivers = if bulk {
            format!("(\n{rounds}) &\n")
        } else {
            String::new()
        },
        receivers_ready = if bulk {
            "until_true 130 test -e /lab/bulk-ready.1 -o -e /lab/b-failed || bfail ready \"the bulk receivers did not start\"\n"
        } else {
            ""
        },
        wait = if plan.cpu_marks {
            serve_marks(wait_secs, r#"echo "$l""#)
        } else {
            format!("lab-wait a-done {wait_secs}\n")
        }
    )
}

/// Guest b's side of the qpip netdev ([`Plan::netdev`]), part of getting ready: its
/// netdev up and routed to guest a's device, the outcome in `/lab/netdev.b` for guest a's
/// [`Action::NetdevUp`] step (`ok DEV`, `none WHY` or `fail WHY`), and with a netdev one
/// bulk receiver per round over it, all listening from the start.
fn netdev_b(plan: &Plan) -> String {
    if !plan.netdev || plan.qp_only {
        return String::new();
    }
    let rounds: Vec<u32> = plan
        .steps()
        .iter()
        .filter_map(|s| match s.action {
            Action::Measure {
                test: Test::Bulk,
                net: Net::Netdev,
                round,
            } => Some(round),
            _ => None,
        })
        .collect();
    let mut receivers = String::new();
    for r in &rounds {
        let (name, port) = (plan.tag(Net::Netdev.id(), *r), bulk_port(Net::Netdev, *r));
        receivers += &format!("    receive {name} nc -l -p {port} <> /tmp/never &\n");
    }
    for r in &rounds {
        let port = bulk_port(Net::Netdev, *r);
        receivers += &format!(
            "    until_true 60 listening {port} || bfail ready \"nc -l -p {port} (over the qpip netdev) is not listening\"\n"
        );
    }
    format!(
        r#"{NETDEV_UP}if netdev_up {args}; then
    echo "ok $ND_DEV" > /lab/.netdev.b
{receivers}elif [ $? = 2 ]; then
    echo "none $ND_WHY" > /lab/.netdev.b
else
    echo "fail $ND_WHY" > /lab/.netdev.b
fi
mv /lab/.netdev.b /lab/netdev.b
"#,
        args = netdev_args(2)
    )
}

/// Guest a's [`Action::NetdevUp`] step: its own netdev, then guest b's outcome. Either
/// failing fails the step; either guest without a netdev leaves `NETDEV` empty, and the
/// measurements over it ([`ND_ONLY`]) are skipped, which guest a reports as a note.
fn netdev_a() -> String {
    format!(
        r#"if netdev_up {args}; then
    NETDEV=$ND_DEV
elif [ $? = 2 ]; then
    NETDEV=; why="guest a: $ND_WHY"
else
    fail "guest a: $ND_WHY"
fi
await netdev.b 60
read -r b_st b_why < /lab/netdev.b
case $b_st in
    ok) ;;
    none) [ -z "$NETDEV" ] || why="guest b: $b_why"; NETDEV= ;;
    *) fail "guest b: $b_why" ;;
esac
if [ -n "$NETDEV" ]; then
    echo "@note=kernel sockets over the qpip netdev: $NETDEV in guest a, $b_why in guest b"
else
    echo "@note=no qpip netdev ($why): the measurements over it are skipped"
fi
"#,
        args = netdev_args(1)
    )
}

/// Guest a's `nd_only CMD...`: runs CMD only if both guests have their qpip netdev up
/// (`NETDEV`, set by the [`Action::NetdevUp`] step).
const ND_ONLY: &str = r#"NETDEV=
# nd_only CMD...: CMD, if both guests have a qpip netdev (else the step passes, measuring
# nothing).
nd_only() {
    [ -n "$NETDEV" ] || { echo "no qpip netdev: skipped" >&2; return 0; }
    "$@"
}
"#;

/// Guest b's end: answers guest a's CPU marks until guest a is done (polling as
/// `lab-wait` does, every 0.1 s). `answer` is a shell command that prints the answer from
/// `$l`, the first line of /proc/stat read at the mark.
pub(super) fn serve_marks(wait_secs: u64, answer: &str) -> String {
    format!(
        r#"# Answers each /lab/cpu-mark.N in /lab/cpu-mark.N.b (read first, then written under
# another name and renamed) until guest a is done.
n=1
t=$(({wait_secs} * 10))
until [ -e /lab/a-done ]; do
    if [ -e /lab/cpu-mark.$n ]; then
        read -r l < /proc/stat
        {answer} > /lab/.cpu-mark.$n.b
        mv /lab/.cpu-mark.$n.b /lab/cpu-mark.$n.b
        n=$((n + 1))
        continue
    fi
    t=$((t - 1)); [ "$t" -gt 0 ] || exit 1
    nap
done
"#
    )
}

/// Guest a: every step of the plan in order.
pub fn guest_a(plan: &Plan) -> String {
    let bulk = plan.bulk_bytes;
    let mut s = format!(
        r#"{COMMON}
trap 'touch /lab/a-done' EXIT
{STEPS_A}# perf NAME MARK ARGS...: qpip-perf ARGS with --json; its JSON is reported as @perf.NAME.
# Unless MARK is -, the run is the CPU window MARK.
perf() {{
    name=$1; mark=$2; shift 2
    [ "$mark" = - ] || cpu_start
    qpip-perf "$@" --json > /tmp/perf.json 2> /tmp/perf.err \
        || fail "qpip-perf $* failed: $(oneline /tmp/perf.err)"
    [ "$mark" = - ] || cpu_end "$mark"
    echo "@perf.$name=$(cat /tmp/perf.json)"
}}
# bulk NAME ROUND CMD...: once guest b's receivers of ROUND listen, sends /tmp/bulk with
# CMD, then checks guest b's SHA-256 of it.
bulk() {{
    name=$1; round=$2; shift 2
    await bulk-ready.$round 180
    t0=$(now)
    "$@" < /tmp/bulk > /dev/null 2> /tmp/bulk.err || fail "$* failed: $(oneline /tmp/bulk.err)"
    t1=$(now)
    await bulk-$name.b 120
    read -r st got rest < /lab/bulk-$name.b
    [ "$st" = 0 ] || fail "the receiver in guest b failed (status $st): $rest"
    [ "$got" = "$BULK_SHA" ] || fail "guest b received other bytes: SHA-256 $got, sent $BULK_SHA"
    echo "@bulk.$name={bulk} $t0 $t1"
}}
"#
    );
    if plan.netdev && !plan.qp_only {
        s += NETDEV_UP;
        s += ND_ONLY;
    }
    if plan.rdma {
        s += SYS_COUNT;
    }
    for step in plan.steps() {
        let body = match step.action {
            Action::Ready => format!(
                "{}await b-ready 180\nhead -c {bulk} /dev/urandom > /tmp/bulk\nBULK_SHA=$(sha /tmp/bulk)\n",
                if plan.rdma {
                    format!(
                        "lab-siw > /tmp/siw 2>&1 || fail \"lab-siw: $(oneline /tmp/siw)\"\n{}{}",
                        rxe_up(1, "fail"),
                        qpip_ib_up(plan, "fail")
                    )
                } else {
                    String::new()
                }
            ),
            Action::Measure {
                test,
                net: Net::Netdev,
                round,
            } => measure(plan, &step.id, test, Net::Netdev, round)
                .lines()
                .map(|l| format!("nd_only {l}\n"))
                .collect(),
            Action::Measure { test, net, round } => measure(plan, &step.id, test, net, round),
            Action::NetdevUp => netdev_a(),
            Action::HostOut => host_out(plan.host_bytes),
            Action::HostIn => host_in(plan.host_bytes),
            Action::HostUdp => host_udp(),
            Action::Overhead { round } => overhead(plan, round),
            Action::Nbd => nbd(plan.nbd_bytes),
        };
        s += &format!("\nstep {}\n{body}ok\n", step.id);
    }
    s
}

/// The command of one measurement; `id` is the step's id, which its report carries.
fn measure(plan: &Plan, id: &str, test: Test, net: Net, round: u32) -> String {
    let (addr, port, sockets) = match net {
        Net::Qp => (netns::device_addr(2), PERF_QP_PORT, ""),
        Net::Qp4 => (netns::device_addr4(2), PERF_QP_PORT, ""),
        Net::Sockets => (netns::virtio_addr(2), PERF_SOCKETS_PORT, " --sockets"),
        // perftest's only (RDMA); its server's port is its step's.
        Net::Rxe => (netns::virtio_addr(2), PERFTEST_PORT, ""),
        Net::Verbs => (netns::device_addr4(2), PERFTEST_PORT, ""),
        // Guest b's device address, routed through the qpip netdevs by the NetdevUp step.
        Net::Netdev => (netns::device_addr(2), PERF_SOCKETS_PORT, " --sockets"),
    };
    // The CPU window of a ping-pong is named as its step; of a bandwidth test, one per size.
    let mark = |name: String| {
        if plan.cpu_marks {
            plan.tag(&name, round)
        } else {
            "-".to_string()
        }
    };
    let base = format!("{}-{}", test.id(), net.id());
    let perf = |mark: String| format!("perf {id} {mark} {addr} --port {port}{sockets}");
    let iters = plan.latency_iters;
    let bw_bytes = plan.bw_bytes;
    match test {
        Test::UdpPing => format!(
            "{} --udp --test latency --iters {iters}\n",
            perf(mark(base))
        ),
        Test::TcpPing => format!(
            "{} --tcp --test latency --iters {iters}\n",
            perf(mark(base))
        ),
        // One message size at a time, each its own CPU window.
        Test::TcpBw => plan
            .tcp_sizes
            .iter()
            .map(|s| {
                format!(
                    "{} --tcp --test bandwidth --sizes {s} --bytes {}\n",
                    perf(mark(format!("{base}:{s}"))),
                    plan.tcp_bw_bytes(*s)
                )
            })
            .collect(),
        Test::UdpBw => format!(
            "{} --udp --test bandwidth --sizes {} --bytes {bw_bytes}\n",
            perf("-".to_string()),
            join(&plan.udp_sizes)
        ),
        Test::Bulk => {
            let name = plan.tag(net.id(), round);
            let port = bulk_port(net, round);
            if net.is_sockets() {
                format!("bulk {name} {round} nc {addr} {port}\n")
            } else {
                format!("bulk {name} {round} qpip-cat --message -w 60 {addr} {port}\n")
            }
        }
        Test::RdmaReadLat | Test::RdmaReadBw if net == Net::Qp => {
            let rdma = format!(
                "perf {id} - {addr} --port {PERF_RDMA_PORT} --rdma read --depth {RDMA_DEPTH}"
            );
            if test == Test::RdmaReadLat {
                format!(
                    "{rdma} --test latency --sizes {} --iters {iters}\n",
                    plan.rdma_lat_size
                )
            } else {
                format!(
                    "{rdma} --test bandwidth --sizes {} --bytes {}\n",
                    plan.rdma_bw_size,
                    plan.rdma_bw_count() * plan.rdma_bw_size as u64
                )
            }
        }
        Test::RdmaLat | Test::RdmaBw if net == Net::Qp => {
            let rdma = format!(
                "perf {id} - {addr} --port {PERF_RDMA_PORT} --rdma write --depth {RDMA_DEPTH}"
            );
            if test == Test::RdmaLat {
                // Spinning as ib_write_lat does, then asleep on tripwires.
                let lat = format!(
                    "--test latency --sizes {} --iters {iters}",
                    plan.rdma_lat_size
                );
                let tw = plan.tag(RDMA_LAT_TRIPWIRE, round);
                format!(
                    "{rdma} {lat}\nperf {tw} - {addr} --port {PERF_RDMA_PORT} --rdma write --tripwire {lat}\n"
                )
            } else {
                format!(
                    "{rdma} --test bandwidth --sizes {} --bytes {}\n",
                    plan.rdma_bw_size,
                    plan.rdma_bw_count() * plan.rdma_bw_size as u64
                )
            }
        }
        Test::RdmaLat
        | Test::RdmaBw
        | Test::RdmaReadLat
        | Test::RdmaReadBw
        | Test::RdmaSendLat
        | Test::RdmaSendBw => {
            let port = perftest_steps(plan)
                .into_iter()
                .find(|s| s.0 == id)
                .map_or(PERFTEST_PORT, |s| s.3);
            let cmd = perftest(plan, test, net, port);
            let tool = cmd.split(' ').next().unwrap_or_default();
            let dev = anchor(net);
            // The client's system calls, in round 1 only: the count is the same every
            // round, and the trigger costs each call a little (siw's, not qpip0's), which
            // the other rounds' figures are then free of.
            let (count_start, count_end) = if round == 1 {
                (
                    "sys_count_start\n    ".to_string(),
                    format!(
                        "    sys=$(sys_count_end {tool})\n    [ -z \"$sys\" ] || echo \"@syscalls.{id}=$sys\"\n"
                    ),
                )
            } else {
                (String::new(), String::new())
            };
            let need_netdev = if net == Net::Verbs {
                "[ -n \"$NETDEV\" ] || fail \"perftest on qpip0 needs the qpip netdevs up (rdma_cm routes by them)\"\n"
            } else {
                ""
            };
            format!(
                r#"{need_netdev}await pt-ready.{id} 180
# siw may refuse the connection or stall (guest b then starts its server again): up to 3
# tries, each of at most {PERFTEST_LIMIT_S} s; after a stall, until b's server is back. A
# device failing 3 times leaves this round without its figure (the table shows the rounds
# it has) rather than end the whole bench; b's server is told to stop.
try=1
pt_ok=1
while :; do
    pt0=$(cut -d. -f1 /proc/uptime)
    {count_start}timeout {PERFTEST_LIMIT_S} {cmd} {addr} > /tmp/pt.out 2>&1 && break
    if [ $try -ge 3 ]; then
        pt_ok=0; touch /lab/pt-stalled.{id}
        echo "@note={dev}'s {tool} failed $try times: no figure from it in this round ($(tail -n 2 /tmp/pt.out | tr '\n' ' '))"
        break
    fi
    pause=3
    if [ $(cut -d. -f1 /proc/uptime) -ge $((pt0 + {PERFTEST_LIMIT_S})) ]; then
        # Stalled: guest b stops its server and starts it again.
        touch /lab/pt-stalled.{id}; pause=20
    fi
    echo "{tool} failed (try $try), again in $pause s: $(tail -n 2 /tmp/pt.out | tr '\n' ' ')" >&2
    try=$((try + 1)); sleep $pause
done
if [ $pt_ok = 1 ]; then
    line=$(awk '/#bytes/ {{ getline; print; exit }}' /tmp/pt.out)
    [ -n "$line" ] || fail "{tool} printed no result: $(tail -n 4 /tmp/pt.out | tr '\n' ' ')"
    echo "@perftest.{id}=$line"
{count_end}fi
"#
            )
        }
    }
}

/// How long `qpip-overhead --spin-us` busy-waits between messages, µs: short enough for the
/// device's engine to stay awake (at 800 µs it sometimes slept; at 200 or less most
/// completions were not there yet under TCG on a loaded 2-CPU host, and such messages are
/// left out).
pub const OVERHEAD_SPIN_US: u32 = 400;

/// `qpip-overhead` in guest a: QPs and kernel sockets, UDP and TCP, each on its loopback;
/// once sleeping between messages (most posts kick the device), once busy-waiting
/// [`OVERHEAD_SPIN_US`] (most find it awake).
fn overhead(plan: &Plan, round: u32) -> String {
    let n = plan.overhead_messages;
    let sfx = if plan.rounds > 1 {
        format!(".{round}")
    } else {
        String::new()
    };
    ["", &format!(" --spin-us {OVERHEAD_SPIN_US}")]
        .iter()
        .map(|extra| {
            format!(
                r#"qpip-overhead --messages {n}{extra} --json > /tmp/overhead.json 2> /tmp/overhead.err \
    || fail "qpip-overhead --messages {n}{extra} failed: $(oneline /tmp/overhead.err)"
echo "@overhead{sfx}=$(cat /tmp/overhead.json)"
"#
            )
        })
        .collect()
}

/// Guest b's side of the network disk step: `qpip-nbd serve` of a file on its tmpfs, part
/// of getting ready.
fn nbd_serve() -> String {
    format!(
        r#"lab-storage > /tmp/storage 2>&1 || bfail ready "lab-storage: $(oneline /tmp/storage)"
truncate -s {NBD_DISK} /tmp/disk.img
qpip-nbd serve /tmp/disk.img -n disk > /tmp/serve.log 2>&1 &
until_true 60 has /tmp/serve.log serving || bfail ready "qpip-nbd serve is not serving: $(oneline /tmp/serve.log)"
"#
    )
}

/// Bytes of the disk guest b exports in the network disk step.
const NBD_DISK: u64 = 64 << 20;

/// Guest a's network disk step: `qpip-nbd connect` to guest b's server makes a ublk
/// device; ext2 on it, a file of `bytes` written and synced, the file system mounted again
/// with the caches dropped and the file compared; the device removed.
fn nbd(bytes: u64) -> String {
    let addr = netns::device_addr(2);
    format!(
        r#"lab-storage > /tmp/storage 2>&1 || fail "lab-storage: $(oneline /tmp/storage)"
qpip-nbd connect {addr} -n disk > /tmp/nbd.log 2>&1 &
c=$!
until_true 30 has /tmp/nbd.log '^qpip-nbd: /dev/ublkb' || fail "qpip-nbd connect made no device: $(oneline /tmp/nbd.log)"
dev=$(sed -n 's|^qpip-nbd: \(/dev/ublkb[0-9]*\) .*|\1|p' /tmp/nbd.log)
mkfs.ext2 -q $dev > /tmp/mkfs 2>&1 || fail "mkfs.ext2 $dev failed: $(oneline /tmp/mkfs)"
mkdir -p /mnt
mount -t ext2 $dev /mnt || fail "mount $dev failed"
head -c {bytes} /dev/urandom > /tmp/nbdf
cp /tmp/nbdf /mnt/f && sync || fail "writing the file to $dev failed"
umount /mnt || fail "umount $dev failed"
echo 3 > /proc/sys/vm/drop_caches
mount -t ext2 -o ro $dev /mnt || fail "mounting $dev again failed"
[ "$(sha /mnt/f)" = "$(sha /tmp/nbdf)" ] || fail "the file read back from $dev differs from the one written"
umount /mnt || fail "umount $dev failed"
kill -TERM $c
wait $c || fail "qpip-nbd connect ended with status $?: $(oneline /tmp/nbd.log)"
"#
    )
}

fn host_out(hb: u64) -> String {
    let host = netns::HOST_ADDR;
    format!(
        r#"await host-listening 60
head -c {hb} /dev/urandom > /tmp/hin
qpip-cat --stream -w 60 {host} {HOST_TCP_PORT} < /tmp/hin > /tmp/hout 2> /tmp/herr \
    || fail "qpip-cat {host} {HOST_TCP_PORT} failed: $(oneline /tmp/herr)"
[ "$(sha /tmp/hout)" = "$(sha /tmp/hin)" ] \
    || fail "the echo from the host differs: $(wc -c < /tmp/hout) bytes back of {hb}"
"#
    )
}

fn host_in(hb: u64) -> String {
    format!(
        r#"head -c {hb} /dev/urandom > /tmp/hreply
qpip-cat -v --stream -w 120 -l {GUEST_LISTEN_PORT} < /tmp/hreply > /tmp/hgot 2> /tmp/herr &
l=$!
until_true 60 has /tmp/herr "listening on" || fail "qpip-cat -l {GUEST_LISTEN_PORT} is not listening: $(oneline /tmp/herr)"
touch /lab/a-listening
wait $l || fail "qpip-cat -l {GUEST_LISTEN_PORT} failed: $(oneline /tmp/herr)"
await host-in.done 60
read -r sent got < /lab/host-in.done
[ "$(sha /tmp/hgot)" = "$sent" ] || fail "received other bytes than the host sent ($(wc -c < /tmp/hgot) bytes)"
[ "$got" = "$(sha /tmp/hreply)" ] || fail "the host received other bytes than guest a sent"
"#
    )
}

fn host_udp() -> String {
    let host = netns::HOST_ADDR;
    format!(
        r#"head -c 20000 /dev/urandom > /tmp/uin
qpip-cat -u -w 3 {host} {HOST_UDP_PORT} < /tmp/uin > /tmp/uout 2> /tmp/uerr \
    || fail "qpip-cat -u {host} {HOST_UDP_PORT} failed: $(oneline /tmp/uerr)"
cmp -s /tmp/uin /tmp/uout || fail "the datagrams echoed by the host differ: $(wc -c < /tmp/uout) bytes back of 20000"
"#
    )
}

fn join(v: &[usize]) -> String {
    v.iter().map(usize::to_string).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `netdev_up` in `sh` against a made-up sysfs (`mac` the qpip device's, `ifaces`
    /// (name, MAC, carrier) the network interfaces) and an `ip` that says the device's
    /// address is `addr_flags` and routes IPv4 by `route4_dev`: its status, ND_DEV and
    /// ND_WHY, and the arp_ignore it set.
    fn netdev_up_in(
        mac: Option<&str>,
        ifaces: &[(&str, &str, u8)],
        addr_flags: &str,
        route4_dev: &str,
    ) -> (i32, String, String, String) {
        static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("qpip-netdev-up-{}-{run}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        if let Some(mac) = mac {
            std::fs::create_dir_all(dir.join("qpip/qpip0")).unwrap();
            std::fs::write(dir.join("qpip/qpip0/mac"), format!("{mac}\n")).unwrap();
        }
        for (name, mac, carrier) in ifaces {
            let net = dir.join("net").join(name);
            std::fs::create_dir_all(&net).unwrap();
            std::fs::write(net.join("address"), format!("{mac}\n")).unwrap();
            std::fs::write(net.join("carrier"), format!("{carrier}\n")).unwrap();
            std::fs::create_dir_all(dir.join("sysctl/ipv6/conf").join(name)).unwrap();
        }
        std::fs::create_dir_all(dir.join("sysctl/ipv4/conf/all")).unwrap();
        let d = dir.display();
        // The function with every path it touches in `dir`: never the host's own.
        let netdev_up = NETDEV_UP
            .replace("/sys/class/qpip", &format!("{d}/qpip"))
            .replace("/sys/class/net", &format!("{d}/net"))
            .replace("/proc/sys/net", &format!("{d}/sysctl"))
            .replace("/tmp/nd.", &format!("{d}/nd."));
        for outside in ["/sys/", "/proc/", "/tmp/nd."] {
            assert!(!netdev_up.contains(outside), "{netdev_up}");
        }
        let script = format!(
            r#"set -u
nap() {{ :; }}
oneline() {{ tr '\n' ' ' < "$1"; }}
ip() {{
    case "$*" in
        "-6 addr show dev "*) echo "    inet6 fd51:5050::1:1/64 scope global {addr_flags}" ;;
        "route get 198.18.0.102") echo "198.18.0.102 dev {route4_dev} src 198.18.0.101 uid 0" ;;
        "route get "*) echo "$3 from :: dev $ND_DEV proto kernel src fd51:5050::1:1 metric 1024" ;;
    esac
}}
{netdev_up}
netdev_up {}
echo "$?|$ND_DEV|$ND_WHY"
"#,
            netdev_args(1)
        );
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(&script)
            .output()
            .unwrap();
        let arp_ignore = std::fs::read_to_string(dir.join("sysctl/ipv4/conf/all/arp_ignore"))
            .unwrap_or_default();
        std::fs::remove_dir_all(&dir).unwrap();
        let out = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout).trim_end(),
            String::from_utf8_lossy(&out.stderr)
        );
        let mut f = out.splitn(3, '|');
        let mut next = || f.next().unwrap_or_default().to_string();
        (
            next().parse().unwrap_or_else(|_| panic!("{out}")),
            next(),
            next(),
            arp_ignore.trim().to_string(),
        )
    }

    /// `sys_count_end PROG` over a hist as Linux 6.12 prints it (keys `common_pid.execname`
    /// and `id.syscall`): PROG's calls by name, all its processes', nobody else's.
    #[test]
    fn the_system_call_count_is_the_program_s_by_call() {
        let dir = std::env::temp_dir().join(format!("qpip-sys-count-{}", std::process::id()));
        let ev = dir.join("events/raw_syscalls/sys_enter");
        std::fs::create_dir_all(&ev).unwrap();
        std::fs::write(
            ev.join("hist"),
            "# event histogram\n#\n\
             { common_pid: ib_write_lat    [       301], id: sys_write                     [  1] } hitcount:       2000\n\
             { common_pid: ib_write_lat    [       301], id: sys_openat                    [257] } hitcount:         41\n\
             { common_pid: ib_write_lat_x  [       302], id: sys_write                     [  1] } hitcount:          7\n\
             { common_pid: timeout         [       300], id: sys_wait4                     [ 61] } hitcount:          1\n\
             { common_pid: ib_write_lat    [       305], id: sys_ioctl                     [ 16] } hitcount:          3\n\
             \nTotals:\n    Hits: 2052\n",
        )
        .unwrap();
        let d = dir.display();
        let script = format!(
            "{}\nsys_count_end ib_write_lat\n",
            SYS_COUNT.replace("TRACE=/sys/kernel/tracing", &format!("TRACE={d}"))
        );
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(&script)
            .output()
            .unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let mut f: Vec<&str> = text.split_whitespace().collect();
        assert_eq!(f.first(), Some(&"2044"), "{text}");
        f.remove(0);
        f.sort();
        assert_eq!(f, ["ioctl:3", "openat:41", "write:2000"], "{text}");
    }

    #[test]
    fn netdev_up_finds_the_interface_by_the_device_s_mac_and_checks_its_routes() {
        let ifaces = [
            ("eth0", "02:51:50:02:00:01", 1),
            ("qpip0", "02:51:50:01:00:01", 1),
        ];
        let mac = Some("02:51:50:01:00:01");
        assert_eq!(
            netdev_up_in(mac, &ifaces, "", "qpip0"),
            (0, "qpip0".into(), String::new(), "1".into())
        );
        // The device's MAC in capitals finds it all the same.
        let upper = "02:51:50:01:00:01".to_uppercase();
        assert_eq!(netdev_up_in(Some(&upper), &ifaces, "", "qpip0").0, 0);
        // A route by virtio-net, an address that stays tentative, no carrier: the setup
        // failed.
        let (st, dev, why, _) = netdev_up_in(mac, &ifaces, "", "eth0");
        assert_eq!((st, dev.as_str()), (1, "qpip0"));
        assert!(
            why.starts_with("the route to 198.18.0.102 is not by qpip0: "),
            "{why}"
        );
        let (st, _, why, _) = netdev_up_in(mac, &ifaces, "tentative", "qpip0");
        assert_eq!(st, 1);
        assert!(
            why.starts_with("qpip0 has not the device's address fd51:5050::1:1"),
            "{why}"
        );
        let dark = [ifaces[0], ("qpip0", "02:51:50:01:00:01", 0)];
        let (st, _, why, _) = netdev_up_in(mac, &dark, "", "qpip0");
        assert_eq!(st, 1);
        assert!(why.starts_with("qpip0 has no carrier"), "{why}");
        // No interface with the device's MAC (a driver without the netdev), or no device:
        // nothing to measure over, not a failure, and nothing changed.
        let (st, dev, why, arp) = netdev_up_in(mac, &ifaces[..1], "", "qpip0");
        assert_eq!((st, dev.as_str(), arp.as_str()), (2, "", ""));
        assert!(why.contains("(a driver without the netdev)"), "{why}");
        assert_eq!(netdev_up_in(None, &ifaces, "", "qpip0").0, 2);
    }
}
