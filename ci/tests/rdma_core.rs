//! qpip as an RDMA device for unmodified rdma-core programs: `qpip_ib.ko` registers an
//! iWARP ib_device per function, and rdma-core's provider for it
//! (`libqpip-rdmav34.so`, `/etc/libibverbs.d/qpip.driver`) lets libibverbs open it.
//!
//! One guest loads the RDMA stack and `qpip_ib.ko` on demand (`lab-qpip-ib`: nothing of it
//! is loaded at boot), then checks with rdma-core's and iproute2's own tools: `ibv_devices`
//! lists `qpip0`; `ibv_devinfo -v` shows an iWARP device with the device's limits and one
//! port, ACTIVE while `qpip0` is up and DOWN while it is down (a user hears the changes as
//! port events, `ibv_asyncwatch`); `rdma link` shows the port
//! over `qpip0`; `ibv_rc_pingpong` (a client and a server on the guest) gets a context,
//! whose doorbell page the provider maps, a protection domain, memory regions, CQs and a
//! QP, and stops where iWARP does: an InfiniBand-style move to RTR with a peer's address is
//! refused (only the connection manager connects an iWARP QP); `qpip-verbs-check` (the
//! project's, plain libibverbs) checks the CQ, its completion channel, regions and their
//! access rights, a QP's states (RTS refused locally) and receives flushed by ERR one by
//! one, WRs posted after ERR completed flushed (the CQ's channel told, a second QP
//! untouched), and a process killed holding them leaves nothing behind (`rdma res` counts
//! its context, PD, CQs, region and QP, then none); `rping` to
//! qpip0's own address connects through `rdma_cm` and the device, and is refused (nobody listens);
//! servers on `qpip0` (the driver's passive side) with clients to them, both ends on the
//! device: `rping -V` over IPv6 (64 and 65535 bytes) and IPv4, `ib_write_bw` and
//! `ib_read_lat` with `-R`; `qpip-cm-check` (the project's, plain librdmacm): private data
//! both ways, a reject with the server's private data, an RDMA Write with immediate data
//! (the receiver's completion carries the sender's `imm_data` bytes, its region the
//! written ones), a request the server drops unanswered; a server killed while listening leaves nobody listening (a client is
//! refused again). Then `qpip_ib` is unloaded while `ibv_asyncwatch`
//! holds a context open (the context is disassociated, the module goes), loaded again,
//! unloaded with no user and loaded again, each time finding the device again; the device
//! is reset under a user (told `IBV_EVENT_DEVICE_FATAL`), and under one waiting on a
//! completion channel for receives
//! (woken, they complete flushed, and so do WRs it posts afterwards), and the function
//! removed under one (its ib_device goes first) and found again by a PCI rescan; qpip's own library (`qpip-c-pingpong` over
//! `/dev/qpip0`) works beside it throughout; and the kernel log has no oops or warning.
//!
//! Like the other VM tests it is ignored by a plain `cargo test`; `./qpip test` runs it
//! (as root: the guest is on the lab network, where the device's link is up).

mod common;

use common::traffic::{guest, lab};
use common::{needs_root, Report};
use qpip_lab::QpipdLayout;

/// The guest's checks, reported as `@key=value` lines; the assertions are made here.
const SCRIPT: &str = r#"
# devinfo KEY: the value of "KEY:" in /tmp/devinfo (ibv_devinfo -v's output).
devinfo() { sed -n "s/^[[:space:]]*$1:[[:space:]]*//p" /tmp/devinfo | head -n 1; }
# has_qpip0: ibv_devices lists qpip0.
has_qpip0() { ibv_devices 2>&1 | grep -q '^[[:space:]]*qpip0[[:space:]]'; }
# port_state: the port's state as ibv_devinfo says it (PORT_ACTIVE, PORT_DOWN, ...).
port_state() { ibv_devinfo -d qpip0 2>&1 | sed -n 's/^[[:space:]]*state:[[:space:]]*\([A-Z_]*\).*/\1/p'; }
# wait_state STATE: up to 5 s for the port to be in STATE.
wait_state() {
    i=0
    while [ "$(port_state)" != "$1" ] && [ $i -lt 50 ]; do i=$((i + 1)); sleep 0.1; done
    port_state
}
no_qpip_dev() { [ -z "$(ls /sys/class/infiniband 2>/dev/null | grep qpip)" ]; }

has_qpip0 && kv before.listed yes || kv before.listed no
[ -d /sys/module/ib_core ] && kv before.ib_core loaded || kv before.ib_core absent

lab-qpip-ib > /tmp/load 2>&1; kv load.status $?
kv load.out "$(tr '\n' '|' < /tmp/load)"
has_qpip0 && kv listed yes || kv listed no
kv devices "$(ibv_devices 2>&1 | tr '\n' '|')"

ip link set qpip0 up
kv port.up "$(wait_state PORT_ACTIVE)"
ibv_devinfo -v -d qpip0 > /tmp/devinfo 2>&1; kv devinfo.status $?
kv devinfo.out "$(tr '\n' '|' < /tmp/devinfo)"
for k in transport fw_ver vendor_id vendor_part_id phys_port_cnt max_qp max_qp_wr max_sge \
         max_cq max_cqe max_mr max_mr_size max_pd max_qp_rd_atom max_qp_init_rd_atom \
         atomic_cap link_layer active_mtu max_mtu active_speed active_width; do
    kv "devinfo.$k" "$(devinfo $k)"
done
kv devinfo.ports "$(grep -c '^[[:space:]]*port:[[:space:]]' /tmp/devinfo)"
kv qpip0.mtu "$(cat /sys/class/net/qpip0/mtu)"
kv rdma.link "$(rdma link show qpip0/1 2>&1)"
kv rdma.dev "$(rdma dev show qpip0 2>&1)"

# qpip0 down and up again: the port follows, and a user hears it as port events.
ibv_asyncwatch -d qpip0 > /tmp/awp 2>&1 & awp=$!
sleep 1
ip link set qpip0 down
kv port.down "$(wait_state PORT_DOWN)"
kv rdma.link_down "$(rdma link show qpip0/1 2>&1)"
ip link set qpip0 up
kv port.up_again "$(wait_state PORT_ACTIVE)"
sleep 0.5
kill $awp; wait $awp 2>/dev/null
kv port.events "$(grep -o 'IBV_EVENT_[A-Z_]*' /tmp/awp | tr '\n' ' ')"

# A context, a PD, CQs, regions and a QP, then an InfiniBand-style connection: refused.
timeout 60 ibv_rc_pingpong -d qpip0 -g 0 > /tmp/pps 2>&1 & pps=$!
sleep 2
timeout 60 ibv_rc_pingpong -d qpip0 -g 0 127.0.0.1 > /tmp/pp 2>&1; kv pingpong.status $?
kv pingpong.out "$(tr '\n' '|' < /tmp/pp)"
wait $pps; kv pingpong_server.status $?
kv pingpong_server.out "$(tr '\n' '|' < /tmp/pps)"

# The verbs objects one by one (qpip-verbs-check prints "KEY VALUE" lines).
# Traffic on qpip0 meanwhile: its queues' interrupts share a vector with CQs (the check's
# CQ asks for vector 0, where the interface's queues are too), and must not become events
# of a CQ with nothing completed.
ping -c 100 -i 0.01 -I qpip0 fd51:5050::1 > /dev/null 2>&1 & pg=$!
timeout 60 qpip-verbs-check qpip0 > /tmp/vc 2>&1; kv verbs.status $?
kill $pg 2>/dev/null; wait $pg 2>/dev/null
while read -r k v; do kv "verbs.$k" "$v"; done < /tmp/vc
# A process killed while it holds them: the device context and all in it are freed.
kv contexts.before_hold "$(contexts)"
qpip-verbs-check qpip0 hold > /tmp/vh 2>&1 & vh=$!
i=0; until grep -q '^holding' /tmp/vh || [ $i -ge 100 ]; do i=$((i + 1)); sleep 0.1; done
kv hold.out "$(tr '\n' '|' < /tmp/vh)"
kv contexts.holding "$(contexts)"
# iproute2's view of the RDMA core's resource tracking: qpip0's summary line.
kv res.holding "$(rdma res show 2>&1 | grep 'qpip0:')"
kill -9 $vh; wait $vh 2>/dev/null
sleep 0.5
kv contexts.killed "$(contexts)"
kv res.killed "$(rdma res show 2>&1 | grep 'qpip0:')"

# rping through rdma_cm on qpip0's own address: the client's QP connects through the
# device, where nobody listens (refused). Then servers on qpip0 (the passive side) and
# clients to them, both ends on the device: rping -V over both families, perftest with
# rdma_cm; and once the servers have gone, a client is refused again (the listeners gone).
A=$(ip -6 addr show dev qpip0 scope global | awk '/inet6/ {print $2}' | cut -d/ -f1 | head -n 1)
A4=$(ip -4 addr show dev qpip0 scope global | awk '/inet / {print $2}' | cut -d/ -f1 | head -n 1)
kv qpip0.addr "$A"
kv qpip0.addr4 "$A4"
timeout 20 rping -c -a "$A" -C 1 > /tmp/rping 2>&1; kv rping.status $?
kv rping.out "$(tr '\n' '|' < /tmp/rping)"
# listens PROG: waits (up to 10 s) for a listening cm_id of PROG's.
listens() {
    i=0
    until rdma res show cm_id 2>/dev/null | grep -q "state LISTEN.*comm $1" ||
          [ $i -ge 100 ]; do
        i=$((i + 1)); sleep 0.1
    done
}
# srv TAG ADDR ARGS...: rping's server and client on qpip0, ADDR; TAG.server, TAG.client,
# TAG.pings (the client's checked pings).
srv() {
    t=$1; addr=$2; shift 2
    timeout 60 rping -s -a "$addr" -V "$@" > "/tmp/$t.s" 2>&1 & sp=$!
    listens rping
    timeout 60 rping -c -a "$addr" -V -v "$@" > "/tmp/$t.c" 2>&1; kv "$t.client" $?
    wait $sp; kv "$t.server" $?
    kv "$t.pings" "$(grep -c '^ping data: ' "/tmp/$t.c")"
    kv "$t.out" "$(grep -v '^ping data: ' "/tmp/$t.c" | tail -n 20 | tr '\n' '|') || $(tail -n 20 "/tmp/$t.s" | tr '\n' '|')"
}
srv lo64 "$A" -C 20 -S 64
srv lo65535 "$A" -C 10 -S 65535
[ -z "$A4" ] || srv lo4 "$A4" -C 20 -S 2000
# perf PROG ARGS...: perftest's server and client on qpip0 with rdma_cm, over IPv4.
perf() {
    prog=$1; shift
    timeout 100 "$prog" -d qpip0 -R "$@" > "/tmp/$prog.s" 2>&1 & sp=$!
    listens "$prog"
    timeout 100 "$prog" -d qpip0 -R "$@" "$A4" > "/tmp/$prog.c" 2>&1; kv "$prog.client" $?
    wait $sp; kv "$prog.server" $?
    kv "$prog.result" "$(grep -E '^ *[0-9]+ +[0-9]+' "/tmp/$prog.c" | tail -n 1)"
    kv "$prog.out" "$(tail -n 20 "/tmp/$prog.c" | tr '\n' '|') || $(tail -n 20 "/tmp/$prog.s" | tr '\n' '|')"
}
if [ -n "$A4" ]; then
    perf ib_write_bw -n 100 -s 65536
    perf ib_read_lat -n 100 -s 2048
fi
# What rdma_cm carries besides a plain connect (qpip-cm-check, plain librdmacm): private
# data both ways, a reject with the server's private data, a Write with immediate data on
# the accepted connection, a request dropped unanswered.
timeout 90 qpip-cm-check "$A" 7471 > /tmp/cm 2>&1; kv cm.status $?
while read -r k v; do kv "cm.$k" "$v"; done < /tmp/cm
# A server killed while it listens: its listener goes; a client then is refused.
rping -s -a "$A" > /tmp/rpingk 2>&1 & sp=$!
listens rping
kill -9 $sp; wait $sp 2>/dev/null
timeout 20 rping -c -a "$A" -C 1 > /tmp/rping2 2>&1; kv rping_after.status $?
kv rping_after.out "$(tr '\n' '|' < /tmp/rping2)"

# Unloading with a user: ibv_asyncwatch holds a context open, a device context of the
# function (counted in /sys/class/qpip/qpip0/contexts beside /dev/qpip0's).
kv contexts.before "$(contexts)"
ibv_asyncwatch -d qpip0 > /tmp/aw 2>&1 & aw=$!
sleep 1
kill -0 $aw 2>/dev/null && kv watch.running yes || kv watch.running no
kv contexts.watch "$(contexts)"
# qpip's own library beside it, on the same function.
qpip-c-pingpong 50 7420 > /tmp/cpp 2>&1; kv lib.status $?
kv lib.out "$(tr '\n' '|' < /tmp/cpp)"
# Another user waits on a completion channel with receives posted: the unload wakes it.
timeout 60 qpip-verbs-check qpip0 reset > /tmp/vu 2>&1 & vu=$!
i=0; until grep -q '^armed' /tmp/vu || [ $i -ge 100 ]; do i=$((i + 1)); sleep 0.1; done
sleep 1
rmmod qpip_ib 2> /tmp/rmmod; kv unload_busy.status $?
wait $vu; kv unloadwait.status $?
while read -r k v; do kv "unloadwait.$k" "$v"; done < /tmp/vu
kv unload_busy.err "$(cat /tmp/rmmod)"
no_qpip_dev && kv unload_busy.gone yes || kv unload_busy.gone no
kv contexts.unloaded "$(contexts)"
sleep 0.5
kv watch.out "$(tr '\n' '|' < /tmp/aw)"
kill $aw 2>/dev/null; wait $aw 2>/dev/null

lab-qpip-ib > /tmp/load 2>&1; kv reload.status $?
has_qpip0 && kv reload.listed yes || kv reload.listed no
kv reload.port "$(wait_state PORT_ACTIVE)"

rmmod qpip_ib 2> /tmp/rmmod; kv unload.status $?
no_qpip_dev && kv unload.gone yes || kv unload.gone no
has_qpip0 && kv unload.listed yes || kv unload.listed no
lab-qpip-ib > /tmp/load 2>&1; kv reload2.status $?
ibv_devinfo -d qpip0 > /dev/null 2>&1; kv reload2.devinfo $?

# A device reset under a user: its context is forgotten by the device (the user closes it
# without harm), and a new context works. Another user waits on a completion channel for
# receives it posted: the reset completes them flushed and wakes it.
ibv_asyncwatch -d qpip0 > /tmp/aw2 2>&1 & aw=$!
timeout 60 qpip-verbs-check qpip0 reset > /tmp/vr 2>&1 & vr=$!
i=0; until grep -q '^armed' /tmp/vr || [ $i -ge 100 ]; do i=$((i + 1)); sleep 0.1; done
sleep 1
echo 1 > /sys/class/qpip/qpip0/reset; kv reset.status $?
wait $vr; kv resetwait.status $?
while read -r k v; do kv "resetwait.$k" "$v"; done < /tmp/vr
kill $aw; wait $aw 2>/dev/null
kv reset.watch "$(tr '\n' '|' < /tmp/aw2)"
kv contexts.after_reset "$(contexts)"
ibv_devinfo -d qpip0 > /dev/null 2>&1; kv reset.devinfo $?

# The function removed under a user: its ib_device goes first (the user told), then the
# function; a rescan probes it again, and qpip_ib, still loaded, binds it again.
ibv_asyncwatch -d qpip0 > /tmp/aw3 2>&1 & aw=$!
sleep 1
pci=$(basename "$(readlink -f /sys/class/qpip/qpip0/device)")
echo 1 > "/sys/bus/pci/devices/$pci/remove"; kv remove.status $?
no_qpip_dev && kv remove.gone yes || kv remove.gone no
sleep 0.5
kv remove.watch "$(tr '\n' '|' < /tmp/aw3)"
kill $aw; wait $aw 2>/dev/null
echo 1 > /sys/bus/pci/rescan
i=0; until has_qpip0 || [ $i -ge 50 ]; do i=$((i + 1)); sleep 0.1; done
has_qpip0 && kv rescan.listed yes || kv rescan.listed no
i=0; until [ -e /sys/class/net/qpip0 ] || [ $i -ge 50 ]; do i=$((i + 1)); sleep 0.1; done
ip link set qpip0 up
kv rescan.port "$(wait_state PORT_ACTIVE)"
kv rescan.link "$(rdma link show qpip0/1 2>&1)"

# The library again after all of it.
qpip-c-pingpong 20 7421 > /tmp/cpp 2>&1; kv lib_after.status $?
kv dmesg.bad "$(dmesg | grep -E 'BUG:|Oops|WARNING:|general protection|refcount_t|speed is unknown' | tr '\n' '|')"
"#;

#[test]
#[ignore = "boots VMs: run by ./qpip test"]
fn qpip_is_an_rdma_device_for_rdma_core() {
    // On the lab network: the device's link, and so qpip0's carrier, is up there.
    needs_root!();
    let out = lab(
        vec![guest("a", SCRIPT, 420, &[])],
        QpipdLayout::Adapter,
        |_| (),
    );
    let rep = Report::succeeded(out.guest("a"));
    let ctx = || rep.context();

    // Nothing of the RDMA stack at boot; lab-qpip-ib loads it.
    assert_eq!(rep.get("before.ib_core"), "absent", "{}", ctx());
    assert_eq!(rep.get("before.listed"), "no", "{}", ctx());
    assert_eq!(rep.get("load.status"), "0", "lab-qpip-ib\n{}", ctx());
    assert_eq!(rep.get("listed"), "yes", "ibv_devices\n{}", ctx());

    // ibv_devinfo -v: an iWARP device with the device's limits, one port.
    assert_eq!(rep.get("devinfo.status"), "0", "{}", ctx());
    assert_eq!(rep.get("devinfo.transport"), "iWARP (1)", "{}", ctx());
    assert_eq!(rep.get("devinfo.phys_port_cnt"), "1", "{}", ctx());
    assert_eq!(rep.get("devinfo.ports"), "1", "{}", ctx());
    assert_eq!(rep.get("devinfo.vendor_id"), "0x1234", "{}", ctx());
    assert_eq!(rep.get("devinfo.vendor_part_id"), "20816", "{}", ctx()); // 0x5150
    assert_eq!(rep.get("devinfo.link_layer"), "Ethernet", "{}", ctx());
    assert_eq!(
        rep.get("devinfo.atomic_cap"),
        "ATOMIC_NONE (0)",
        "{}",
        ctx()
    );
    assert!(
        rep.get("devinfo.fw_ver").contains('.'),
        "fw_ver is the device interface's version\n{}",
        ctx()
    );
    // The device's own limits (QUERY_DEVICE), not made-up ones.
    assert_eq!(rep.get("devinfo.max_sge"), "5", "{}", ctx());
    assert_eq!(rep.get("devinfo.max_mr"), "4096", "{}", ctx());
    assert_eq!(rep.get("devinfo.max_mr_size"), "0x10000000", "{}", ctx()); // 65536 pages
    assert_eq!(rep.get("devinfo.max_qp_rd_atom"), "32", "{}", ctx());
    assert_eq!(rep.get("devinfo.max_qp_init_rd_atom"), "32", "{}", ctx());
    for k in ["max_qp", "max_qp_wr", "max_cq", "max_cqe", "max_pd"] {
        assert!(
            rep.num(&format!("devinfo.{k}")) > 0,
            "{k} must be reported\n{}",
            ctx()
        );
    }
    assert_eq!(rep.get("devinfo.max_qp_wr"), rep.get("devinfo.max_cqe"));
    // The port follows qpip0: its MTU and state.
    let mtu = match rep.num("qpip0.mtu") {
        m if m >= 4096 => "4096",
        m if m >= 2048 => "2048",
        m if m >= 1024 => "1024",
        m if m >= 512 => "512",
        _ => "256",
    };
    assert!(
        rep.get("devinfo.active_mtu").starts_with(mtu),
        "active_mtu for qpip0's MTU {}\n{}",
        rep.get("qpip0.mtu"),
        ctx()
    );
    assert_eq!(rep.get("port.up"), "PORT_ACTIVE", "{}", ctx());
    assert_eq!(rep.get("port.down"), "PORT_DOWN", "{}", ctx());
    assert_eq!(rep.get("port.up_again"), "PORT_ACTIVE", "{}", ctx());
    assert_eq!(
        rep.get("port.events").trim(),
        "IBV_EVENT_PORT_ERR IBV_EVENT_PORT_ACTIVE",
        "qpip0 down and up: the port's events\n{}",
        ctx()
    );

    // rdma link: the port over qpip0.
    let link = rep.get("rdma.link");
    assert!(
        link.contains("link qpip0/1")
            && link.contains("state ACTIVE")
            && link.contains("netdev qpip0"),
        "rdma link show qpip0/1: {link}\n{}",
        ctx()
    );
    assert!(
        rep.get("rdma.link_down").contains("state DOWN"),
        "{}",
        ctx()
    );
    let dev = rep.get("rdma.dev");
    assert!(
        dev.contains("node_type rnic") && dev.contains("protocol iw"),
        "rdma dev show qpip0: {dev}\n{}",
        ctx()
    );

    // A context (the provider maps its doorbell page and kick register), a PD, a region,
    // CQs and a QP work; an InfiniBand-style RTR is refused (iWARP connects through the
    // CM): the server, which moves its QP first, stops there, and the client with it.
    let pp = format!(
        "{}{}",
        rep.get("pingpong.out"),
        rep.get("pingpong_server.out")
    );
    for k in ["pingpong.status", "pingpong_server.status"] {
        let st = rep.get(k);
        assert!(st != "0" && st != "124", "{k}: {st}\n{}", ctx());
    }
    assert!(
        rep.get("pingpong_server.out")
            .contains("Failed to modify QP to RTR"),
        "ibv_rc_pingpong should stop at RTR: {pp}\n{}",
        ctx()
    );
    for stop in [
        "Couldn't get context",
        "Couldn't allocate PD",
        "Couldn't register MR",
        "Couldn't create CQ",
        "Couldn't create QP",
    ] {
        assert!(!pp.contains(stop), "{stop}\n{}", ctx());
    }

    // The verbs objects: a CQ on a completion channel (its ring polled and armed by the
    // provider), regions with the device's access rights (the atomic right accepted,
    // granting nothing), and a QP: local states up to RTR, RTS refused (only a connection
    // makes it), receives posted and flushed by ERR; WRs posted after ERR are taken and
    // complete flushed (below).
    assert_eq!(rep.get("verbs.status"), "0", "qpip-verbs-check\n{}", ctx());
    for (k, v) in [
        ("verbs.pd", "ok"),
        ("verbs.channel", "ok"),
        ("verbs.cq", "ok"),
        ("verbs.cq.cqe", "128"), // 100 asked: the device's rings are powers of two
        ("verbs.cq.poll", "0"),
        ("verbs.cq.arm", "ok"),
        ("verbs.cq.arm_solicited", "ok"),
        ("verbs.channel.epoll_add", "ok"),
        ("verbs.mr", "ok"),
        ("verbs.mr.keys", "set"),
        ("verbs.mr.readonly", "ok"),
        ("verbs.mr.atomic", "ok"), // accepted, granting nothing (qperf asks for it)
        ("verbs.qp", "ok"),
        ("verbs.qp.cap", "16 16 80"),
        ("verbs.qp.state", "0"), // RESET
        ("verbs.qp.init", "ok"),
        ("verbs.qp.rtr", "ok"),
        ("verbs.qp.rts", "EINVAL"),
        ("verbs.qp.state_rtr", "2"), // RTR
        ("verbs.qp.post_recv", "ok"),
        ("verbs.qp.err", "ok"),
        ("verbs.qp.state_err", "6"), // ERR
        ("verbs.qp.flushed", "4"),
        ("verbs.qp.post_after_err", "ok"),
        ("verbs.qp.post_send_after_err", "ok"),
        ("verbs.qp.post_send_unsignaled_after_err", "ok"),
        ("verbs.qp2", "ok"),
        ("verbs.qp2.rtr", "ok"),
        ("verbs.qp2.post_recv", "ok"),
        ("verbs.qp.post_beside_qp2", "ok"),
        ("verbs.qp2.err", "ok"),
        ("verbs.qp2.destroy", "ok"),
        ("verbs.dead.setup", "ok"),
        ("verbs.dead.arm", "ok"),
        ("verbs.dead.post_recv", "ok"),
        ("verbs.qp.destroy", "ok"),
        ("verbs.mr.readonly.dereg", "ok"),
        ("verbs.mr.dereg", "ok"),
        ("verbs.cq.destroy", "ok"),
        ("verbs.channel.destroy", "ok"),
        ("verbs.pd.dealloc", "ok"),
        ("verbs.close", "ok"),
    ] {
        assert_eq!(rep.get(k), v, "{k}\n{}", ctx());
    }
    // Posting to a QP in ERR: each WR completes IBV_WC_WR_FLUSH_ERR with its own wr_id and
    // opcode (an unsignalled Send's too: a flush is an error). A second QP made while the
    // dead one lives (the dead QP's doorbell slot is not given to it) keeps its receives
    // while the dead QP's posts flush; its own ERR flushes them. An armed channel fires for
    // a WR posted to a dead QP (a fresh CQ's, which nothing else wakes).
    // ("WR_ID:OPCODE:STATUS:QP", in the order polled.)
    assert_eq!(rep.get("verbs.dead.event"), "yes", "{}", ctx());
    assert_eq!(
        rep.get("verbs.dead.event_flushed"),
        "600:RECV:FLUSH_ERR:qp",
        "{}",
        ctx()
    );
    assert_eq!(
        sorted(rep.get("verbs.dead.flushed")),
        "200:RECV:FLUSH_ERR:qp 300:SEND:FLUSH_ERR:qp 301:SEND:FLUSH_ERR:qp",
        "{}",
        ctx()
    );
    assert_eq!(
        rep.get("verbs.dead.flushed_beside_qp2"),
        "201:RECV:FLUSH_ERR:qp",
        "{}",
        ctx()
    );
    assert_eq!(
        rep.get("verbs.qp2.flushed"),
        "400:RECV:FLUSH_ERR:qp2 401:RECV:FLUSH_ERR:qp2",
        "{}",
        ctx()
    );
    // The channel's fd works with poll and epoll, and stays quiet: nothing completes on the
    // CQ, and the interrupts of the vector it shares with qpip0's queues (pinged meanwhile)
    // are not its events.
    for (k, v) in [
        ("verbs.channel.poll", "0"),
        ("verbs.channel.epoll_wait", "0"),
        ("verbs.channel.get_event", "EAGAIN"),
    ] {
        assert_eq!(rep.get(k), v, "{k}\n{}", ctx());
    }
    // Killed while holding them: its device context, CQ, regions go.
    assert!(rep.get("hold.out").contains("holding yes"), "{}", ctx());
    let before_hold = rep.num("contexts.before_hold");
    assert_eq!(rep.num("contexts.holding"), before_hold + 1, "{}", ctx());
    // `rdma res`: the holder's objects while it lives, none once it was killed.
    let res = |key: &str, kind: &str| -> u64 {
        let line = rep.get(key);
        let mut words = line.split_whitespace();
        let found = words.by_ref().find(|w| *w == kind).is_some();
        assert!(found, "{key}: no `{kind}` in {line:?}\n{}", ctx());
        words
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(u64::MAX)
    };
    for kind in ["pd", "cq", "qp", "mr", "ctx"] {
        assert!(
            res("res.holding", kind) >= 1,
            "rdma res while holding: {kind}\n{}",
            ctx()
        );
        assert_eq!(
            res("res.killed", kind),
            0,
            "rdma res once killed: {kind}\n{}",
            ctx()
        );
    }
    assert_eq!(rep.num("contexts.killed"), before_hold, "{}", ctx());

    // rping (librdmacm): the client's QP connects through the device to qpip0's own
    // address, where nobody listens: refused. A clean error, not a crash or a hang.
    assert_ne!(
        rep.get("qpip0.addr"),
        "",
        "qpip0 has no global IPv6 address\n{}",
        ctx()
    );
    let rping = rep.get("rping.status");
    assert!(rping != "0" && rping != "124", "rping: {rping}\n{}", ctx());
    assert!(
        !rep.get("rping.out").contains("rdma_create_qp"),
        "rping's QP is made now\n{}",
        ctx()
    );
    // The passive side: rping's server on qpip0 and a client to it, both through the
    // device, every ping's data checked; perftest with rdma_cm; a server killed while
    // listening leaves nobody listening.
    let mut rpings = vec![("lo64", 20), ("lo65535", 10)];
    let v4 = !rep.get("qpip0.addr4").is_empty();
    if v4 {
        rpings.push(("lo4", 20));
    }
    for (t, n) in rpings {
        let out = rep.get(&format!("{t}.out"));
        assert_eq!(
            [
                rep.get(&format!("{t}.server")),
                rep.get(&format!("{t}.client"))
            ],
            ["0", "0"],
            "{t}: rping server and client on qpip0: {out}\n{}",
            ctx()
        );
        assert_eq!(rep.num(&format!("{t}.pings")), n, "{t}: {out}\n{}", ctx());
    }
    if v4 {
        for prog in ["ib_write_bw", "ib_read_lat"] {
            let out = rep.get(&format!("{prog}.out"));
            assert_eq!(
                [
                    rep.get(&format!("{prog}.server")),
                    rep.get(&format!("{prog}.client"))
                ],
                ["0", "0"],
                "{prog} on qpip0 both ends: {out}\n{}",
                ctx()
            );
            eprintln!(
                "  {prog} qpip0 ⇄ qpip0: {}",
                rep.get(&format!("{prog}.result"))
            );
        }
    } else {
        eprintln!("  qpip0 has no IPv4 address: no IPv4 rping, no perftest");
    }
    // rdma_cm's private data both ways, a reject carrying the server's, an RDMA Write with
    // immediate data between the two qpip ends (agreed at their MPA setup), and a request
    // whose id is destroyed unanswered (iw_cm rejects it).
    let cm = |k: &str| rep.get(&format!("cm.{k}"));
    assert_eq!(cm("status"), "0", "qpip-cm-check\n{}", ctx());
    for (k, want) in [
        ("listen", "ok"),
        ("reject.request", "RDMA_CM_EVENT_CONNECT_REQUEST"),
        ("reject.request_pd", "ok"),
        ("reject.reject", "ok"),
        ("reject.client", "RDMA_CM_EVENT_REJECTED"),
        ("reject.client_status", "-111"),
        ("reject.client_pd", "ok"),
        ("accept.request_pd", "ok"),
        ("accept.accept", "ok"),
        ("accept.client", "RDMA_CM_EVENT_ESTABLISHED"),
        ("accept.client_pd", "ok"),
        ("accept.server", "RDMA_CM_EVENT_ESTABLISHED"),
        ("accept.write_imm", "ok"),
        ("accept.write_imm_send", "success RDMA_WRITE"),
        (
            "accept.write_imm_recv",
            "success RECV_RDMA_WITH_IMM WITH_IMM",
        ),
        ("accept.write_imm_value", "ok"),
        ("accept.write_imm_data", "ok"),
        ("accept.client_end", "RDMA_CM_EVENT_DISCONNECTED"),
        ("accept.server_end", "RDMA_CM_EVENT_DISCONNECTED"),
        ("drop.request", "RDMA_CM_EVENT_CONNECT_REQUEST"),
        ("drop.client", "RDMA_CM_EVENT_REJECTED"),
    ] {
        assert_eq!(cm(k), want, "qpip-cm-check: {k}\n{}", ctx());
    }
    let after = rep.get("rping_after.status");
    assert!(
        after != "0" && after != "124",
        "rping after its server was killed: {after} {}\n{}",
        rep.get("rping_after.out"),
        ctx()
    );

    // qpip's own library beside a verbs context on the same function.
    assert_eq!(rep.get("watch.running"), "yes", "{}", ctx());
    assert_eq!(rep.get("lib.status"), "0", "qpip-c-pingpong\n{}", ctx());

    // Unloading with a user present: its device context is destroyed with it; then
    // without a user, and loading again each time.
    let before = rep.num("contexts.before");
    assert_eq!(rep.num("contexts.watch"), before + 1, "{}", ctx());
    assert_eq!(
        rep.get("unload_busy.status"),
        "0",
        "rmmod with a user\n{}",
        ctx()
    );
    assert_eq!(rep.get("unload_busy.gone"), "yes", "{}", ctx());
    // A user waiting on its completion channel is woken by the unload; its receives were
    // flushed as the module destroyed its QP, and WRs it posts afterwards (its QP now
    // dead) complete flushed, with no kernel to ring.
    assert_eq!(rep.get("unloadwait.status"), "0", "{}", ctx());
    assert_eq!(rep.get("unloadwait.reset.event"), "yes", "{}", ctx());
    assert_eq!(
        rep.get("unloadwait.reset.flushed"),
        "500:RECV:FLUSH_ERR:qp 501:RECV:FLUSH_ERR:qp 502:RECV:FLUSH_ERR:qp \
         503:RECV:FLUSH_ERR:qp",
        "{}",
        ctx()
    );
    assert_eq!(
        sorted(rep.get("unloadwait.reset.flushed_after")),
        "510:RECV:FLUSH_ERR:qp 511:SEND:FLUSH_ERR:qp",
        "{}",
        ctx()
    );
    // Every context of qpip_ib's gone with it: the users' and the listening context kept
    // since the servers above listened (counted in `before`); no other is open.
    assert_eq!(rep.num("contexts.unloaded"), 0, "{}", ctx());
    assert!(
        rep.get("watch.out").contains("IBV_EVENT_DEVICE_FATAL"),
        "the user is told its device went away\n{}",
        ctx()
    );
    assert_eq!(rep.get("reload.status"), "0", "{}", ctx());
    assert_eq!(rep.get("reload.listed"), "yes", "{}", ctx());
    assert_eq!(rep.get("reload.port"), "PORT_ACTIVE", "{}", ctx());
    assert_eq!(rep.get("unload.status"), "0", "{}", ctx());
    assert_eq!(rep.get("unload.gone"), "yes", "{}", ctx());
    assert_eq!(rep.get("unload.listed"), "no", "{}", ctx());
    assert_eq!(rep.get("reload2.status"), "0", "{}", ctx());
    assert_eq!(rep.get("reload2.devinfo"), "0", "{}", ctx());
    // A reset under a user, then the function removed under one and found again.
    assert_eq!(rep.get("reset.status"), "0", "{}", ctx());
    assert!(
        rep.get("reset.watch").contains("IBV_EVENT_DEVICE_FATAL"),
        "a verbs user is told the reset killed its context\n{}",
        ctx()
    );
    // No context left: the users' closed, and qpip_ib, loaded again since, listened on
    // nothing yet.
    assert_eq!(rep.num("contexts.after_reset"), 0, "{}", ctx());
    // The user waiting on its completion channel is woken, and its receives outstanding
    // at the reset (which the device forgot) complete flushed; WRs it posts afterwards
    // too, its channel told.
    assert_eq!(rep.get("resetwait.status"), "0", "{}", ctx());
    for (k, v) in [
        ("resetwait.reset.setup", "ok"),
        ("resetwait.reset.post_recv", "ok"),
        ("resetwait.reset.arm", "ok"),
        ("resetwait.reset.event", "yes"),
        (
            "resetwait.reset.flushed",
            "500:RECV:FLUSH_ERR:qp 501:RECV:FLUSH_ERR:qp 502:RECV:FLUSH_ERR:qp \
             503:RECV:FLUSH_ERR:qp",
        ),
        ("resetwait.reset.arm_again", "ok"),
        ("resetwait.reset.post_recv_after", "ok"),
        ("resetwait.reset.post_send_after", "ok"),
        ("resetwait.reset.event_after", "yes"),
        ("resetwait.reset.qp.destroy", "ok"),
        ("resetwait.reset.cq.destroy", "ok"),
    ] {
        assert_eq!(rep.get(k), v, "{k}\n{}", ctx());
    }
    assert_eq!(
        sorted(rep.get("resetwait.reset.flushed_after")),
        "510:RECV:FLUSH_ERR:qp 511:SEND:FLUSH_ERR:qp",
        "{}",
        ctx()
    );
    assert_eq!(rep.get("reset.devinfo"), "0", "{}", ctx());
    assert_eq!(rep.get("remove.status"), "0", "{}", ctx());
    assert_eq!(rep.get("remove.gone"), "yes", "{}", ctx());
    assert!(
        rep.get("remove.watch").contains("IBV_EVENT_DEVICE_FATAL"),
        "{}",
        ctx()
    );
    assert_eq!(rep.get("rescan.listed"), "yes", "{}", ctx());
    assert_eq!(rep.get("rescan.port"), "PORT_ACTIVE", "{}", ctx());
    assert!(rep.get("rescan.link").contains("netdev qpip0"), "{}", ctx());
    assert_eq!(rep.get("lib_after.status"), "0", "{}", ctx());
    assert_eq!(rep.get("dmesg.bad"), "", "the kernel log\n{}", ctx());
}

/// A space-separated list in sorted order (completions of a QP's two queues come in no
/// order between the queues).
fn sorted(list: &str) -> String {
    let mut v: Vec<&str> = list.split_whitespace().collect();
    v.sort_unstable();
    v.join(" ")
}
