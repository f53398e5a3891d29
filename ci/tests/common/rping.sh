# rping's exchange between two guests: on the qpip device (qpip-rping) or on Linux's
# soft-iWARP over the virtio-net NIC (rdma-core's rping), run again when siw's responder
# stalls a new connection.
#  serve TAG KIND ARGS...   a server of KIND (qpip or qpip4: `qpip-rping -s ARGS`, on the
#                           device, both families; siw: `rping -s -a $QPIP_NET_ADDR ARGS`,
#                           siw4 the same on $QPIP_NET_ADDR4; siwf and siwf4 on the NIC's
#                           far-subnet addresses $FAR_NET_ADDR and $FAR_NET_ADDR4, once
#                           the guest has moved there); touches /lab/TAG.N
#                           once attempt N listens; reports TAG.listen (siw: its cm_id, on
#                           the first attempt), TAG.server (its exit status, or `stalled`)
#                           and TAG.stalls (the attempts that stalled)
#  client TAG KIND PEER ARGS...
#                           `rping -c -a PEER -V -v ARGS` (or qpip-rping's) once the server
#                           listens: reports TAG.client (its exit status) and TAG.pings, the
#                           iterations it completed and verified (its `ping data:` lines:
#                           rping exits 0 when the server disconnects early, so the status
#                           alone proves little)
#
# siw's responder can stall a new connection for good: siw_accept (siw_cm.c) sends the MPA
# reply before it hands the socket's data_ready upcall to the QP, and an FPDU that arrives
# in between is left unread (the connection manager's upcall ignores data in RDMA mode) —
# rping's client sends first and then waits, so nothing more comes. Under TCG the window is
# wide enough to be hit now and then. A siw server sees it (its socket holds unread bytes,
# the same for 3 s of guest time), reports the socket as TAG.stall.N, marks the attempt
# /lab/TAG.N.stalled and stops its rping; both sides try again, up to ATTEMPTS times.
ATTEMPTS=5
show_log() { [ "$2" = 0 ] || sed "s/^/  $1: /" "$3"; }
# unread [PORT]: the server's connection of PORT (default rping's 7174; state 01,
# established) with unread bytes.
unread() {
    hex=$(printf '%04X' "${1:-7174}")
    awk -v p=":$hex\$" '$2 ~ p && $4 == "01" && $5 !~ /:00000000$/ { print }' /proc/net/tcp6 /proc/net/tcp
}
# is_siw KIND: whether KIND runs on siw (siw, siw4) rather than the qpip device.
is_siw() { case $1 in siw*) return 0 ;; esac; return 1; }
# siw_addr KIND: the NIC's address a siw server of KIND listens at.
siw_addr() {
    case $1 in
        siw4) echo "$QPIP_NET_ADDR4" ;;
        siwf) echo "$FAR_NET_ADDR" ;;
        siwf4) echo "$FAR_NET_ADDR4" ;;
        *) echo "$QPIP_NET_ADDR" ;;
    esac
}
# watch PID [PORT]: 0 once server PID (rping's, or one on PORT) has ended, 1 if its
# connection stalled (then $stalled is it).
watch() {
    n=0; last=
    while kill -0 "$1" 2>/dev/null; do
        sleep 0.5
        now=$(unread "$2")
        if [ -n "$now" ] && [ "$now" = "$last" ]; then n=$((n + 1)); else n=0; fi
        last=$now
        if [ $n -ge 6 ]; then stalled=$now; return 1; fi
    done
    return 0
}
# listening KIND TAG: whether TAG's server listens.
listening() {
    if is_siw "$1"; then
        rdma res show cm_id 2>/dev/null | grep -q "siw0/1 .*state LISTEN.*comm rping"
    else
        grep -q listening "/tmp/$2.out"
    fi
}
serve() {
    t=$1; kind=$2; shift 2
    a=1
    while :; do
        if is_siw "$kind"; then
            rping -s -a "$(siw_addr "$kind")" "$@" >"/tmp/$t.out" 2>&1 &
        else
            qpip-rping -s "$@" >"/tmp/$t.out" 2>&1 &
        fi
        p=$!
        i=0
        until listening "$kind" "$t"; do
            i=$((i + 1))
            if [ $i -ge 300 ] || ! kill -0 $p 2>/dev/null; then break; fi
            sleep 0.1
        done
        if is_siw "$kind" && [ $a = 1 ]; then
            kv "$t.listen" "$(rdma res show cm_id 2>&1 | grep LISTEN)"
        fi
        touch "/lab/$t.$a"
        # qpip's own responder has no such race: its server is not watched.
        if ! is_siw "$kind" || watch $p; then
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
client() {
    t=$1; kind=$2; peer=$3; shift 3
    prog=qpip-rping
    ! is_siw "$kind" || prog=rping
    a=1
    while :; do
        await_unless_host_done "$t.$a" || return
        n=$( { $prog -c -a "$peer" -V -v "$@" 2>"/tmp/$t.err"; echo $? >"/tmp/$t.rc"; } |
             awk '/^ping data: / { n++ } END { print n + 0 }')
        st=$(cat "/tmp/$t.rc")
        if [ -e "/lab/$t.$a.stalled" ] && [ $a -lt $ATTEMPTS ]; then a=$((a + 1)); continue; fi
        kv "$t.client" "$st"; kv "$t.pings" "$n"; show_log "$t" "$st" "/tmp/$t.err"
        return
    done
}
