//! The guest kernel's routes through the function's network interface, mirrored into the
//! device (qpip.ko's `qpip_routes.c`): `ip route add ... dev qpip0` gives the device the
//! route (`ADD_ROUTE`), `ip route del` takes it away (`DEL_ROUTE`).
//!
//! The lab runs guest a's device without the far subnet's routes (`qpipd --route`, see
//! [`qpip_lab::GuestSpec::without_far_routes`]), so the only way its QPs reach the far host
//! is a route the guest's kernel gives it: none before `ip route add` (a UDP send to the far
//! host fails for want of a route, counted in `net_no_route`), a TCP stream to the far host
//! with each family's route, none again after `ip route del`.
//!
//! Ignored by a plain `cargo test`; `./qpip test` runs them with `-- --ignored`. They need
//! root (namespaces, bridge, TAPs).

mod common;

use common::traffic::*;
use common::{needs_root, Report};
use qpip_lab::{LabHost, QpipdLayout};

/// The shell helpers of this file's guest script (after common's and traffic's).
///  ND               the qpip network interface: the one with the device's MAC
///  nd_up            brings it up (answering ARP only for its own addresses, as the
///                   virtio-net on the same link does) and waits for the device's
///                   addresses on it (the carrier does not matter to routes: a device
///                   without raw QPs leaves it off)
///  probe TAG ADDR   a UDP datagram from a QP to ADDR: `@TAG.status` of `qpip-cat`, its
///                   error, and `@TAG.no_route`, how much the device's `net_no_route` grew
///                   (a send with no route fails and counts there)
///  routes add|del   the far subnet through the lab host on ND, both families
///                   (`@add6.status`, ...), then a moment for the work item
///  FAR6, FAR4, GW6, GW4  the far subnet and the lab host, its gateway, each family
const ROUTE_HELPERS: &str = r#"
Q=/sys/class/qpip/qpip0
ND=
for i in /sys/class/net/*; do
    [ "$(cat "$i/address" 2>/dev/null)" = "$(cat $Q/mac)" ] && ND=${i##*/}
done
FAR6=fd51:5050:0:0:1::/80; FAR4=198.18.1.0/24; GW6=fd51:5050::1; GW4=198.18.0.1
nd_up() {
    echo 1 > /proc/sys/net/ipv4/conf/all/arp_ignore
    echo 2 > /proc/sys/net/ipv4/conf/all/arp_announce
    echo 0 > /proc/sys/net/ipv6/conf/$ND/accept_dad 2>/dev/null
    ip link set "$ND" up; kv up.status $?
    # The device's addresses come onto it a moment later: the gateways are on-link then.
    i=0; until { ip -4 addr show dev $ND | grep -q 'inet ' &&
                 ip -6 addr show dev $ND | grep inet6 | grep -qv fe80; } || [ $i -ge 100 ]; do
        i=$((i + 1)); sleep 0.1
    done
    kv up.addrs "$(ip addr show dev $ND | awk '$1 == "inet" || $1 == "inet6" {print $2}' | tr '\n' ' ')"
}
probe() {
    n0=$(cat $Q/counters/net_no_route)
    echo x | qpip-cat -u -w 2 "$2" 7479 >/dev/null 2>/tmp/nr.$1; kv $1.status $?
    kv $1.err "$(tr '\n' ' ' < /tmp/nr.$1)"
    kv $1.no_route $(( $(cat $Q/counters/net_no_route) - n0 ))
}
routes() {
    ip -6 route $1 $FAR6 via $GW6 dev $ND; kv $1${2}6.status $?
    ip -4 route $1 $FAR4 via $GW4 dev $ND; kv $1${2}4.status $?
    sleep 1
}
"#;

/// Guest a, its device started without routes: no route to the far host; `ip route add`
/// through the qpip interface (IPv6 and IPv4) and a TCP stream from a QP to the far host's
/// plain socket, each family, its SHA-256 compared; a device reset, after which the driver
/// has given the routes back; `ip route del` and no route again; the routes added again,
/// more than the device holds (the rest refused and logged once), and the module unloaded
/// (which takes them out of the device) without a warning.
#[test]
#[ignore = "boots VMs: run by ./qpip test"]
fn the_interfaces_routes_take_qps_to_the_far_host() {
    needs_root!();
    let script = format!(
        "{ROUTE_HELPERS}{}",
        r#"
kv nd "${ND:-missing}"
nd_up
# The lab routes the far subnet through virtio-net in the guest's kernel (the kernel
# notifies only the route it uses for a prefix): the routes through ND take their place.
ip -6 route del $FAR6 dev $QPIP_NET_IF
ip -4 route del $FAR4 dev $QPIP_NET_IF
probe before6 $QPIP_FAR_ADDR
probe before4 $QPIP_FAR_ADDR4
routes add
kv routes "$(ip -6 route show $FAR6; ip -4 route show $FAR4)"
for f in 6 4; do
    if [ $f = 6 ]; then far=$QPIP_FAR_ADDR; else far=$QPIP_FAR_ADDR4; fi
    head -c 300000 /dev/urandom > /tmp/g2h$f; digest g2h$f.in /tmp/g2h$f
    await g2h$f; qpip-cat --stream -w 60 $far 7471 < /tmp/g2h$f; kv g2h$f.status $?
done
# A reset: the device forgets the routes it was given, the driver gives them back.
echo 1 > $Q/reset; kv reset.status $?
i=0; until [ "$(cat $Q/link_state 2>/dev/null)" = up ] || [ $i -ge 100 ]; do i=$((i + 1)); sleep 0.1; done
probe reset6 $QPIP_FAR_ADDR
probe reset4 $QPIP_FAR_ADDR4
routes del
probe after6 $QPIP_FAR_ADDR
probe after4 $QPIP_FAR_ADDR4
routes add again
# More routes than the device holds (MAX_ROUTES, 32, with the two above): the rest are
# refused, said once in the log, and not tried again.
for n in $(seq 1 40); do ip -6 route add fd51:5050:0:0:2:$n::/96 via $GW6 dev $ND; done
sleep 2
kv full.logged "$(dmesg | grep -c 'holds no more routes')"
probe full6 $QPIP_FAR_ADDR
rmmod qpip; kv rmmod.status $?
kv full.unload "$(dmesg | grep 'were not mirrored' | sed 's/.*qpip0: //')"
"#
    );
    let a = guest("a", &script, 900, &[]).without_far_routes();
    let out = lab(vec![a], QpipdLayout::Adapter, |host: &LabHost| {
        let far = host.far();
        let v6 = host_receives(&far, "[::]:7471", "g2h6");
        let v4 = host_receives(&far, "0.0.0.0:7471", "g2h4");
        let _ = host.signal("host-done");
        (v6, v4)
    });
    let ga = out.guest("a");
    let a = Report::new(ga);
    assert_eq!(ga.status, 0, "guest a failed\n{}", a.context());
    assert_ne!(a.get("nd"), "missing", "no qpip interface\n{}", a.context());
    let no_route = |tag: &str, why: &str| {
        assert_eq!(
            a.get(&format!("{tag}.status")),
            "1",
            "{tag}: {why}\n{}",
            a.context()
        );
        assert_ne!(
            a.get(&format!("{tag}.no_route")),
            "0",
            "{tag}: {why}\n{}",
            a.context()
        );
    };
    let routed = |tag: &str, why: &str| {
        assert_eq!(
            a.get(&format!("{tag}.no_route")),
            "0",
            "{tag}: {why}\n{}",
            a.context()
        );
    };
    no_route(
        "before6",
        "the device started with a route to the far subnet",
    );
    no_route(
        "before4",
        "the device started with a route to the far subnet",
    );
    for f in ["6", "4"] {
        assert_eq!(a.get(&format!("add{f}.status")), "0", "{}", a.context());
        assert_eq!(a.get(&format!("g2h{f}.status")), "0", "{}", a.context());
        let got = if f == "6" { &out.host.0 } else { &out.host.1 };
        match got {
            Ok((n, sha)) => {
                assert_eq!(n.to_string(), a.get(&format!("g2h{f}.in.bytes")));
                assert_eq!(
                    sha,
                    a.get(&format!("g2h{f}.in.sha")),
                    "a → far host, IPv{f}"
                );
            }
            Err(e) => panic!("a → far host over IPv{f}: {e}\n{}", a.context()),
        }
    }
    assert_eq!(a.get("reset.status"), "0", "{}", a.context());
    routed("reset6", "the routes were not given back after the reset");
    routed("reset4", "the routes were not given back after the reset");
    for f in ["6", "4"] {
        assert_eq!(a.get(&format!("del{f}.status")), "0", "{}", a.context());
        assert_eq!(
            a.get(&format!("addagain{f}.status")),
            "0",
            "{}",
            a.context()
        );
    }
    no_route("after6", "ip route del left the device its route");
    no_route("after4", "ip route del left the device its route");
    assert_eq!(a.get("full.logged"), "1", "{}", a.context());
    routed("full6", "a refused route took the far subnet's away");
    assert_eq!(a.get("rmmod.status"), "0", "{}", a.context());
    assert_eq!(
        a.get("full.unload"),
        "10 routes were not mirrored: the device had no room for them",
        "{}",
        a.context()
    );
}
