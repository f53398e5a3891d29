#!/bin/sh
# With no qpip device, libqpip-preload.so must change nothing: socket programs under it
# work as without it, and its log says why it left them to the kernel.
#   sh test/passthrough.sh PATH/libqpip-preload.so [PATH/qpip-sockcheck]
# Runs on this host, on loopback only (IPv4 and IPv6): iperf3 (server and client both
# preloaded, 2 parallel streams, then reverse), curl against Python's http.server (both
# preloaded), qpip-sockcheck against Python's echo server (every socket call checked against
# Linux's answers, first without the preload, then with it), a _FORTIFY_SOURCE program (the __recv_chk entry points), the stats file and
# QPIP_PRELOAD_DISABLE. Prints "passthrough: ok" or the first failure (exit status 1).
# Takes about 5 s. Programs missing on the host (iperf3, curl, python3) are skipped, said so.
set -u
LIB=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
[ -f "$LIB" ] || { echo "passthrough: no library at $1" >&2; exit 1; }
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=$(mktemp -d)
PIDS=
cleanup() {
    for p in $PIDS; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
fail() { echo "passthrough: FAIL: $*" >&2; for f in "$TMP"/*.log; do [ -f "$f" ] && { echo "--- $f" >&2; tail -n 20 "$f" >&2; }; done; exit 1; }

# Whatever this host has, the library must see no device.
export QPIP_DEVICE="$TMP/no-such-device"
pre() { env LD_PRELOAD="$LIB" QPIP_PRELOAD_LOG=1 "$@"; }
# The same in a background job: exec, so that $! is the program (cleanup kills it).
pre_bg() { exec env LD_PRELOAD="$LIB" QPIP_PRELOAD_LOG=1 "$@"; }
# A port nobody listens on (bind test by Python's socket would race; pick from the pid).
port_base=$(( 20000 + ($$ % 20000) ))

# wait_for FILE TEXT: up to 5 s for TEXT to appear in FILE.
wait_for() {
    i=0
    while ! grep -q "$2" "$1" 2>/dev/null; do
        i=$((i + 1)); [ $i -le 50 ] || return 1; sleep 0.1
    done
}

# --- iperf3 ---------------------------------------------------------------------------------
if command -v iperf3 >/dev/null; then
    for addr in 127.0.0.1 ::1; do
        port=$port_base; port_base=$((port_base + 1))
        pre_bg iperf3 -s -1 -p "$port" >"$TMP/iperf-s.log" 2>&1 &
        PIDS="$PIDS $!"; spid=$!
        wait_for "$TMP/iperf-s.log" "listen .* -> " || fail "iperf3 -s did not start"
        pre iperf3 -c "$addr" -p "$port" -t 1 -P 2 >"$TMP/iperf-c.log" 2>&1 || fail "iperf3 -c $addr failed under the preload"
        wait "$spid" || fail "iperf3 -s exited with an error"
        grep -q "sender" "$TMP/iperf-c.log" || fail "iperf3 -c $addr reported no result"
        grep -q "connect .*:$port -> kernel (no device)" "$TMP/iperf-c.log" || fail "the client's log does not say 'no device'"
        grep -q "listen .* -> kernel (no device)" "$TMP/iperf-s.log" || fail "the server's log does not say 'no device'"
        grep -q -- "-> qpip" "$TMP/iperf-c.log" "$TMP/iperf-s.log" && fail "a socket went to qpip without a device"
    done
    # Reverse mode over IPv6 (the server sends): recv/send on both ends.
    port=$port_base; port_base=$((port_base + 1))
    pre_bg iperf3 -s -1 -p "$port" >"$TMP/iperf-s.log" 2>&1 &
    PIDS="$PIDS $!"; spid=$!
    wait_for "$TMP/iperf-s.log" "listen .* -> " || fail "iperf3 -s did not start"
    pre iperf3 -c ::1 -p "$port" -t 1 -R >"$TMP/iperf-c.log" 2>&1 || fail "iperf3 -c -R failed under the preload"
    wait "$spid" || fail "iperf3 -s (reverse) exited with an error"
    # UDP (bind, connect, sendto/recvfrom through the library): both ways.
    for r in "" -R; do
        port=$port_base; port_base=$((port_base + 1))
        pre_bg iperf3 -s -1 -p "$port" >"$TMP/iperf-s.log" 2>&1 &
        PIDS="$PIDS $!"; spid=$!
        wait_for "$TMP/iperf-s.log" "listen .* -> " || fail "iperf3 -s did not start"
        pre iperf3 -u -c ::1 -p "$port" -t 1 $r >"$TMP/iperf-c.log" 2>&1 || fail "iperf3 -u -c $r failed under the preload"
        wait "$spid" || fail "iperf3 -s (UDP $r) exited with an error"
        grep -q "receiver" "$TMP/iperf-c.log" || fail "iperf3 -u $r reported no result"
        grep -q -- "-> qpip" "$TMP/iperf-c.log" "$TMP/iperf-s.log" && fail "a UDP socket went to qpip without a device"
    done
    echo "passthrough: iperf3 (IPv4, IPv6, -P 2, -R, UDP both ways) ok"
else
    echo "passthrough: iperf3 not installed, skipped"
fi

# --- curl and Python's http.server ------------------------------------------------------------
PY=$(command -v python3 || true)
if command -v curl >/dev/null && [ -n "$PY" ]; then
    port=$port_base; port_base=$((port_base + 1))
    mkdir "$TMP/www" && echo "hello over the preload" >"$TMP/www/index.html"
    (cd "$TMP/www" && pre_bg "$PY" -u -m http.server -b ::1 "$port" >"$TMP/http.log" 2>&1) &
    PIDS="$PIDS $!"
    wait_for "$TMP/http.log" "Serving HTTP" || fail "python3 -m http.server did not start"
    out=$(pre curl -sS "http://[::1]:$port/index.html" 2>"$TMP/curl.log") || fail "curl failed under the preload"
    [ "$out" = "hello over the preload" ] || fail "curl got '$out'"
    grep -q -- "-> kernel (no device)" "$TMP/curl.log" || fail "curl's log does not say 'no device'"
    echo "passthrough: curl and http.server ok"
else
    echo "passthrough: curl or python3 not installed, skipped"
fi

# --- qpip-sockcheck: the socket calls' answers, without and with the preload -----------------
SOCKCHECK=${2:-}
if [ -n "$SOCKCHECK" ] && [ -n "$PY" ]; then
    port=$port_base; port_base=$((port_base + 2))
    pre_bg "$PY" -u "$HERE/echo.py" ::1 "$port" >"$TMP/echo.log" 2>&1 &
    PIDS="$PIDS $!"
    wait_for "$TMP/echo.log" "listening" || fail "test/echo.py did not start"
    "$SOCKCHECK" ::1 "$port" >"$TMP/sockcheck-ref.log" 2>&1 || fail "qpip-sockcheck fails WITHOUT the preload: $(grep FAIL "$TMP/sockcheck-ref.log")"
    pre "$SOCKCHECK" ::1 "$port" >"$TMP/sockcheck.log" 2>&1 || fail "qpip-sockcheck under the preload: $(grep FAIL "$TMP/sockcheck.log")"
    echo "passthrough: qpip-sockcheck ($(tail -n 1 "$TMP/sockcheck.log" | sed 's/^sockcheck: //')) ok"
fi

# --- _FORTIFY_SOURCE entry points -------------------------------------------------------------
CC=${CC:-cc}
if command -v "$CC" >/dev/null; then
    "$CC" -O2 -D_FORTIFY_SOURCE=2 -o "$TMP/fortify" "$HERE/fortify.c" || fail "cannot build test/fortify.c"
    nm -D "$TMP/fortify" | grep -q __recvfrom_chk || fail "test/fortify.c does not call __recv_chk (no fortify?)"
    for call in recv recvfrom; do
        out=$(pre "$TMP/fortify" $call 8 2>&1) || fail "fortify $call 8: $out"
        [ "$out" = "fortify: ok" ] || fail "fortify $call 8 printed '$out'"
        if out=$(pre "$TMP/fortify" $call 9 2>&1); then fail "fortify $call 9 did not abort under the preload"; fi
        echo "$out" | grep -q "buffer overflow detected" || fail "fortify $call 9: '$out'"
    done
    echo "passthrough: _FORTIFY_SOURCE (__recv_chk, __recvfrom_chk) ok"
fi

# --- stats file, and QPIP_PRELOAD_DISABLE ------------------------------------------------------
if command -v curl >/dev/null; then
    env LD_PRELOAD="$LIB" QPIP_PRELOAD_STATS="$TMP/stats" curl -s -o /dev/null "http://127.0.0.1:1/" 2>/dev/null
    grep -q "stats prog=curl connect_qpip=0 .*kernel_no_device=1" "$TMP/stats" || fail "stats file: $(cat "$TMP/stats" 2>&1)"
    out=$(env LD_PRELOAD="$LIB" QPIP_PRELOAD_LOG=2 QPIP_PRELOAD_DISABLE=1 curl -s -o /dev/null "http://127.0.0.1:1/" 2>&1)
    echo "$out" | grep -q "loaded, disabled" && ! echo "$out" | grep -q "connect" \
        || fail "QPIP_PRELOAD_DISABLE=1: expected only 'loaded, disabled' in the log, got: $out"
    echo "passthrough: stats file, QPIP_PRELOAD_DISABLE ok"
fi
echo "passthrough: ok"
