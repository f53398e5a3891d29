//! The guest kernel's routes through the function's network interface, mirrored into the
//! device (qpip.ko's `qpip_routes.c`): `ip route add ... dev qpip0` gives the device the
//! route (`ADD_ROUTE`), `ip route del` takes it away (`DEL_ROUTE`). And its permanent
//! neighbour entries (`qpip_netdev_neigh.c`): an entry made permanent (`ip neigh add ...
//! nud permanent`, here busybox's `arp -s`) gives the device a static neighbour
//! (`ADD_NEIGH`), deleting it takes that away (`DEL_NEIGH`).
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

use std::ffi::CString;
use std::io;
use std::net::UdpSocket;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use common::traffic::*;
use common::{needs_root, Report};
use qpip_lab::{netns, LabHost, QpipdLayout};

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
///  static_neighbour HOST_MAC
///                   the lab host (GW4) as a permanent neighbour of ND while the host
///                   answers no ARP (its side, [`static_neighbour_host`]): a QP's datagram
///                   to it (`@neigh.send.status`), then the entry deleted and another
///                   datagram, for which the device must resolve the host again (the host
///                   watches for that). The image's busybox `ip` has no `neigh add`: its
///                   `arp -s` makes the same entry (SIOCSARP, ATF_PERM: NUD_PERMANENT, what
///                   `ip neigh add ... nud permanent` makes) and `arp -d` deletes it
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
static_neighbour() {
    await neigh
    arp -i $ND -s $GW4 $1; kv neigh.add.status $?
    sleep 2
    echo static-neighbour | qpip-cat -u -w 2 $GW4 7475 >/dev/null 2>/tmp/neigh.err
    kv neigh.send.status $?; kv neigh.send.err "$(tr '\n' ' ' < /tmp/neigh.err)"
    await neigh-received
    kv neigh.kernel "$(ip neigh show dev $ND | grep "^$GW4 ")"
    arp -i $ND -d $GW4; kv neigh.del.status $?
    sleep 1
    touch /lab/neigh-deleted
    await neigh-watching
    echo resolved | qpip-cat -u -w 2 $GW4 7475 >/dev/null 2>&1; kv neigh.resend.status $?
    await neigh-host-done
}
"#;

/// Guest a, its device started without routes. First the lab host as a static neighbour:
/// with the host answering no ARP, a permanent entry on the interface lets a QP's datagram
/// reach it without the device asking for its MAC, and once the entry is deleted the
/// device asks again. Then no route to the far host; `ip route add`
/// through the qpip interface (IPv6 and IPv4) and a TCP stream from a QP to the far host's
/// plain socket, each family, its SHA-256 compared; a device reset, after which the driver
/// has given the routes back (and a permanent neighbour entry); `ip route del` and no route
/// again; the routes added again, more than the device holds (the rest refused and logged
/// once), and the module unloaded (which takes them and the entry out of the device)
/// without a warning.
#[test]
#[ignore = "boots VMs: run by ./qpip test"]
fn the_interfaces_routes_take_qps_to_the_far_host() {
    needs_root!();
    let script = format!(
        "{ROUTE_HELPERS}HOST_MAC={}\n{}",
        netns::BRIDGE_MAC,
        r#"
kv nd "${ND:-missing}"
kv nd.mac "$(cat $Q/mac)"
nd_up
static_neighbour $HOST_MAC
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
# A permanent entry the device holds through the reset (given again) and the unload
# (taken out): neither may fail.
arp -i $ND -s 198.18.0.77 02:51:50:00:00:77; kv neigh.kept.status $?
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
kv full.unload "$(dmesg | grep 'routes were not mirrored' | sed 's/.*qpip0: //')"
kv neigh.warnings "$(dmesg | grep -c 'static neighbour')"
"#
    );
    let a = guest("a", &script, 900, &[]).without_far_routes();
    let out = lab(vec![a], QpipdLayout::Adapter, |host: &LabHost| {
        let neigh = static_neighbour_host(host);
        let far = host.far();
        let v6 = host_receives(&far, "[::]:7471", "g2h6");
        let v4 = host_receives(&far, "0.0.0.0:7471", "g2h4");
        let _ = host.signal("host-done");
        (v6, v4, neigh)
    });
    let ga = out.guest("a");
    let a = Report::new(ga);
    assert_eq!(ga.status, 0, "guest a failed\n{}", a.context());
    assert_ne!(a.get("nd"), "missing", "no qpip interface\n{}", a.context());
    assert_static_neighbour(&a, &out.host.2);
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

/// What the lab host saw of the static neighbour step ([`static_neighbour_host`]).
#[derive(Debug)]
struct NeighbourView {
    /// The datagram the QP sent while the host was a static neighbour.
    datagram: Vec<u8>,
    /// ARP requests from the device for the host meanwhile (there must be none).
    asked_while_static: usize,
    /// An ARP request from the device for the host came after the entry was deleted.
    asked_after_del: bool,
}

/// The lab host's side of `static_neighbour`: while the guest's kernel holds the host as a
/// permanent neighbour of its qpip interface, the host answers no ARP on its bridge
/// (`arp_ignore` 8) and watches the ARP requests there; a UDP socket on its IPv4 address
/// takes the QP's datagram. Once the guest has deleted the entry, the device must ask for
/// the host again when its QP sends another datagram. `arp_ignore` is restored at the end,
/// whatever happened: the routes after this step need the host's ARP.
fn static_neighbour_host(host: &LabHost) -> Result<NeighbourView, String> {
    let sysctl = format!("net.ipv4.conf.{}.arp_ignore", netns::BRIDGE);
    let before = host.sh(&format!("sysctl -n {sysctl}"))?.trim().to_string();
    let r = host.sh(&format!("sysctl -qw {sysctl}=8")).and_then(|_| {
        host.in_netns(|| watch_static_neighbour(host))
            .map_err(|e| e.to_string())?
    });
    let restored = host.sh(&format!("sysctl -qw {sysctl}={before}"));
    // Whatever failed, the guest goes on to its routes.
    for name in [
        "neigh",
        "neigh-received",
        "neigh-watching",
        "neigh-host-done",
    ] {
        let _ = host.signal(name);
    }
    restored?;
    r
}

fn watch_static_neighbour(host: &LabHost) -> Result<NeighbourView, String> {
    let udp = UdpSocket::bind((netns::HOST_ADDR4, 7475)).map_err(|e| e.to_string())?;
    udp.set_read_timeout(Some(Duration::from_millis(50)))
        .map_err(|e| e.to_string())?;
    let arp = ArpWatch::open(netns::BRIDGE).map_err(|e| format!("ARP socket: {e}"))?;
    let device = parse_mac(&netns::device_mac(1));
    let target: std::net::Ipv4Addr = netns::HOST_ADDR4.parse().unwrap();
    host.signal("neigh").map_err(|e| e.to_string())?;

    let mut asked_while_static = 0;
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut buf = [0u8; 2048];
    let datagram = loop {
        asked_while_static += arp.requests(device, target);
        if let Ok((n, _)) = udp.recv_from(&mut buf) {
            break buf[..n].to_vec();
        }
        if Instant::now() >= deadline || host.ending() {
            return Err("no datagram from the guest's QP".into());
        }
    };
    host.signal("neigh-received").map_err(|e| e.to_string())?;
    let deleted = host.shared_dir().join("neigh-deleted");
    while !deleted.exists() {
        asked_while_static += arp.requests(device, target);
        if Instant::now() >= deadline || host.ending() {
            return Err("the guest did not delete its neighbour entry".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    asked_while_static += arp.requests(device, target);
    host.signal("neigh-watching").map_err(|e| e.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut asked_after_del = false;
    while !asked_after_del && Instant::now() < deadline && !host.ending() {
        asked_after_del = arp.requests(device, target) > 0;
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(NeighbourView {
        datagram,
        asked_while_static,
        asked_after_del,
    })
}

fn assert_static_neighbour(a: &Report, seen: &Result<NeighbourView, String>) {
    assert_eq!(
        a.get("nd.mac"),
        netns::device_mac(1),
        "the host watched another MAC's ARP\n{}",
        a.context()
    );
    for step in ["add", "send", "del", "resend", "kept"] {
        assert_eq!(
            a.get(&format!("neigh.{step}.status")),
            "0",
            "static neighbour: {step}\n{}",
            a.context()
        );
    }
    assert_eq!(
        a.get("neigh.warnings"),
        "0",
        "the driver complained about a static neighbour\n{}",
        a.context()
    );
    assert!(
        a.get("neigh.kernel").contains("PERMANENT"),
        "the kernel's entry\n{}",
        a.context()
    );
    let seen = match seen {
        Ok(v) => v,
        Err(e) => panic!("static neighbour, the host's side: {e}\n{}", a.context()),
    };
    assert_eq!(seen.datagram, b"static-neighbour\n", "{}", a.context());
    assert_eq!(
        seen.asked_while_static,
        0,
        "the device asked for a static neighbour's MAC\n{}",
        a.context()
    );
    assert!(
        seen.asked_after_del,
        "with the entry deleted the device did not resolve the host again\n{}",
        a.context()
    );
}

fn parse_mac(s: &str) -> [u8; 6] {
    let mut mac = [0u8; 6];
    for (b, p) in mac.iter_mut().zip(s.split(':')) {
        *b = u8::from_str_radix(p, 16).expect("a MAC");
    }
    mac
}

/// The ARP frames arriving at one interface (an `AF_PACKET` socket, non-blocking).
struct ArpWatch {
    fd: OwnedFd,
}

impl ArpWatch {
    fn open(ifname: &str) -> io::Result<ArpWatch> {
        let proto = (libc::ETH_P_ARP as u16).to_be();
        // SAFETY: socket has no memory preconditions; the result is checked.
        let fd = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                proto as i32,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let name = CString::new(ifname).map_err(io::Error::other)?;
        // SAFETY: name is a NUL-terminated string.
        let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if index == 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: sockaddr_ll is plain data; all zeros is a valid value.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = proto;
        sll.sll_ifindex = index as i32;
        // SAFETY: sll is a sockaddr_ll of the length given.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(ArpWatch { fd })
    }

    /// Reads every frame waiting; returns how many were ARP requests from `sender` for
    /// `target`.
    fn requests(&self, sender: [u8; 6], target: std::net::Ipv4Addr) -> usize {
        let mut buf = [0u8; 128];
        let mut n = 0;
        loop {
            // SAFETY: buf is valid for its length.
            let len = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr() as *mut libc::c_void,
                    buf.len(),
                    0,
                )
            };
            if len < 0 {
                return n;
            }
            // Ethernet (14 bytes), then ARP: operation at 6, sender MAC at 8, target IP
            // at 24.
            let f = &buf[..len as usize];
            if f.len() >= 42
                && f[20..22] == [0, 1]
                && f[22..28] == sender
                && f[38..42] == target.octets()
            {
                n += 1;
            }
        }
    }
}
