//! The guest side of the demo: shell scripts for guest `a` (runs the steps, as the client)
//! and guest `b` (serves), meeting in `/lab`.
//!
//! Guest a reports on its output, one line each:
//! - `@step=ID` when step ID starts, `@ok=ID` when it passed, `@fail=ID: WHY` when it
//!   failed (the script then exits 1);
//! - `@perf.NAME=JSON`: what `qpip-perf --json` printed;
//! - `@bulk.NAME=BYTES START END`: a verified bulk transfer and its guest uptime at start
//!   and end (seconds, 10 ms resolution).
//!
//! Guest b starts everything it serves, checks each is listening, then creates
//! `/lab/b-ready` (or reports `@fail=ready: ...` and creates `/lab/b-failed`). After each
//! bulk transfer it writes `/lab/bulk-NAME.b`: its receiver's exit status and the SHA-256 of
//! what it received. It stays up until guest a creates `/lab/a-done` (a does on every way
//! out).

use super::Plan;
use crate::netns;

/// TCP/UDP ports guest b serves on, and the lab host's.
pub const PERF_QP_PORT: u16 = 5201;
pub const PERF_SOCKETS_PORT: u16 = 5202;
pub const BULK_QP_PORT: u16 = 7000;
pub const BULK_SOCKETS_PORT: u16 = 7001;
pub const HOST_TCP_PORT: u16 = 7100;
pub const HOST_UDP_PORT: u16 = 7101;
pub const GUEST_LISTEN_PORT: u16 = 7102;

/// Helpers both guests use.
const COMMON: &str = r#"
set -u
now() { cut -d' ' -f1 /proc/uptime; }
sha() { sha256sum < "$1" | cut -d' ' -f1; }
oneline() { tr '\n' ' ' < "$1" | cut -c1-400; }
# listening PORT: a kernel TCP socket listens on PORT (state 0A in /proc/net/tcp6).
listening() { grep -qi "^ *[0-9]*: [0-9A-F]*:$(printf %04X "$1") [0-9A-F]*:0000 0A" /proc/net/tcp6; }
# until_true SECS CMD...: runs CMD every 0.1 s until it succeeds; fails after SECS.
until_true() {
    n=$(($1 * 10)); shift
    while ! "$@"; do
        n=$((n - 1)); [ "$n" -gt 0 ] || return 1
        sleep 0.1
    done
}
has() { grep -q "$2" "$1" 2>/dev/null; }
"#;

/// Guest b: the servers, the bulk receivers; waits for guest a to finish.
pub fn guest_b(_plan: &Plan) -> String {
    format!(
        r#"{COMMON}
bfail() {{ echo "@fail=ready: $*"; touch /lab/b-failed; exit 1; }}
qpip-perf -s --port {PERF_QP_PORT} > /tmp/perf-qp 2>&1 &
qpip-perf -s --sockets --port {PERF_SOCKETS_PORT} > /tmp/perf-sk 2>&1 &
# Each receiver reports its exit status and the SHA-256 of what it got, written under
# another name first so guest a never reads half a report.
receive() {{
    name=$1; shift
    "$@" > /tmp/bulk-$name 2> /tmp/bulk-$name.err
    echo "$? $(sha /tmp/bulk-$name) $(oneline /tmp/bulk-$name.err)" > /lab/.bulk-$name.b
    mv /lab/.bulk-$name.b /lab/bulk-$name.b
}}
receive qp qpip-cat -v --message -w 600 -l {BULK_QP_PORT} &
# busybox nc ends its sending direction when its stdin ends, and the client nc exits when
# it sees that: stdin is a FIFO opened read-write, which never ends.
mkfifo /tmp/never
receive sk nc -l -p {BULK_SOCKETS_PORT} <> /tmp/never &
until_true 60 has /tmp/perf-qp serving || bfail "qpip-perf -s (QPs) is not serving: $(oneline /tmp/perf-qp)"
until_true 60 has /tmp/perf-sk serving || bfail "qpip-perf -s --sockets is not serving: $(oneline /tmp/perf-sk)"
until_true 60 has /tmp/bulk-qp.err "listening on" || bfail "qpip-cat -l {BULK_QP_PORT} is not listening: $(oneline /tmp/bulk-qp.err)"
until_true 60 listening {BULK_SOCKETS_PORT} || bfail "nc -l -p {BULK_SOCKETS_PORT} is not listening"
touch /lab/b-ready
lab-wait a-done 3600
"#
    )
}

/// Guest a: every step in order.
pub fn guest_a(plan: &Plan) -> String {
    let b_dev = netns::device_addr(2);
    let b_net = netns::virtio_addr(2);
    let host = netns::HOST_ADDR;
    let iters = plan.latency_iters;
    let tcp_sizes = join(&plan.tcp_sizes);
    let bw_bytes = plan.bw_bytes;
    let bulk = plan.bulk_bytes;
    let mut s = format!(
        r#"{COMMON}
trap 'touch /lab/a-done' EXIT
CUR=start
step() {{ CUR=$1; echo "@step=$1"; }}
ok() {{ echo "@ok=$CUR"; }}
fail() {{ echo "@fail=$CUR: $*"; exit 1; }}
# await NAME SECS: waits for /lab/NAME; guest b's failure ends the wait.
await() {{
    n=$(($2 * 10))
    until [ -e "/lab/$1" ]; do
        [ ! -e /lab/b-failed ] || fail "guest b failed (see its output)"
        n=$((n - 1)); [ "$n" -gt 0 ] || fail "/lab/$1 did not appear within $2 s"
        sleep 0.1
    done
}}
# perf NAME ARGS...: qpip-perf ARGS with --json; its JSON is reported as @perf.NAME.
perf() {{
    name=$1; shift
    qpip-perf "$@" --json > /tmp/perf.json 2> /tmp/perf.err \
        || fail "qpip-perf $* failed: $(oneline /tmp/perf.err)"
    echo "@perf.$name=$(cat /tmp/perf.json)"
}}
# bulk NAME CMD...: sends /tmp/bulk with CMD, then checks guest b's SHA-256 of it.
bulk() {{
    name=$1; shift
    t0=$(now)
    "$@" < /tmp/bulk > /dev/null 2> /tmp/bulk.err || fail "$* failed: $(oneline /tmp/bulk.err)"
    t1=$(now)
    await bulk-$name.b 120
    read -r st got rest < /lab/bulk-$name.b
    [ "$st" = 0 ] || fail "the receiver in guest b failed (status $st): $rest"
    [ "$got" = "$BULK_SHA" ] || fail "guest b received other bytes: SHA-256 $got, sent $BULK_SHA"
    echo "@bulk.$name={bulk} $t0 $t1"
}}

step ready
await b-ready 180
head -c {bulk} /dev/urandom > /tmp/bulk
BULK_SHA=$(sha /tmp/bulk)
ok

step udp-qp
perf udp-qp {b_dev} --port {PERF_QP_PORT} --udp --test latency --iters {iters}
ok
step tcp-qp
perf tcp-qp {b_dev} --port {PERF_QP_PORT} --tcp --test latency --iters {iters}
ok
step bw-qp
perf bw-qp {b_dev} --port {PERF_QP_PORT} --tcp --test bandwidth --sizes {tcp_sizes} --bytes {bw_bytes}
ok
"#
    );
    if !plan.udp_sizes.is_empty() {
        s += &format!(
            "step udpbw-qp\nperf udpbw-qp {b_dev} --port {PERF_QP_PORT} --udp --test bandwidth --sizes {} --bytes {bw_bytes}\nok\n",
            join(&plan.udp_sizes)
        );
    }
    s += &format!(
        r#"
step bulk-qp
bulk qp qpip-cat --message -w 60 {b_dev} {BULK_QP_PORT}
ok
"#
    );
    if plan.host_bytes > 0 {
        let hb = plan.host_bytes;
        s += &format!(
            r#"
step host-out
await host-listening 60
head -c {hb} /dev/urandom > /tmp/hin
qpip-cat --stream -w 60 {host} {HOST_TCP_PORT} < /tmp/hin > /tmp/hout 2> /tmp/herr \
    || fail "qpip-cat {host} {HOST_TCP_PORT} failed: $(oneline /tmp/herr)"
[ "$(sha /tmp/hout)" = "$(sha /tmp/hin)" ] \
    || fail "the echo from the host differs: $(wc -c < /tmp/hout) bytes back of {hb}"
ok

step host-in
head -c {hb} /dev/urandom > /tmp/hreply
qpip-cat -v --stream -w 120 -l {GUEST_LISTEN_PORT} < /tmp/hreply > /tmp/hgot 2> /tmp/herr &
l=$!
until_true 60 has /tmp/herr "listening on" || fail "qpip-cat -l {GUEST_LISTEN_PORT} is not listening: $(oneline /tmp/herr)"
touch /lab/a-listening
wait $l || fail "qpip-cat -l {GUEST_LISTEN_PORT} failed: $(oneline /tmp/herr)"
await host-in.done 60
read -r sent got < /lab/host-in.done
[ "$(sha /tmp/hgot)" = "$sent" ] || fail "received other bytes than the host sent ($(wc -c < /tmp/hgot) bytes)"
[ "$got" = "$(sha /tmp/hreply)" ] || fail "the host received other bytes than guest a sent"
ok

step host-udp
head -c 20000 /dev/urandom > /tmp/uin
qpip-cat -u -w 3 {host} {HOST_UDP_PORT} < /tmp/uin > /tmp/uout 2> /tmp/uerr \
    || fail "qpip-cat -u {host} {HOST_UDP_PORT} failed: $(oneline /tmp/uerr)"
cmp -s /tmp/uin /tmp/uout || fail "the datagrams echoed by the host differ: $(wc -c < /tmp/uout) bytes back of 20000"
ok
"#
        );
    }
    s += &format!(
        r#"
step udp-sk
perf udp-sk {b_net} --port {PERF_SOCKETS_PORT} --sockets --udp --test latency --iters {iters}
ok
step tcp-sk
perf tcp-sk {b_net} --port {PERF_SOCKETS_PORT} --sockets --tcp --test latency --iters {iters}
ok
step bw-sk
perf bw-sk {b_net} --port {PERF_SOCKETS_PORT} --sockets --tcp --test bandwidth --sizes {tcp_sizes} --bytes {bw_bytes}
ok
"#
    );
    if !plan.udp_sizes.is_empty() {
        s += &format!(
            "step udpbw-sk\nperf udpbw-sk {b_net} --port {PERF_SOCKETS_PORT} --sockets --udp --test bandwidth --sizes {} --bytes {bw_bytes}\nok\n",
            join(&plan.udp_sizes)
        );
    }
    s += &format!(
        r#"
step bulk-sk
bulk sk nc {b_net} {BULK_SOCKETS_PORT}
ok
"#
    );
    s
}

fn join(v: &[usize]) -> String {
    v.iter().map(usize::to_string).collect::<Vec<_>>().join(",")
}
