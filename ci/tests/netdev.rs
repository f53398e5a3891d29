//! The function's network interface in the guest (qpip.ko's netdev, docs/netdev.md): a
//! net_device with the function's MAC, its addresses kept the same as the device's, and
//! the guest kernel's own traffic through the device's raw Ethernet QP.
//!
//! `netdev_follows_the_device_and_unloads_cleanly` needs only the driver (a device that
//! refuses raw QPs leaves the interface up without carrier, and it must still pass);
//! `guest_kernel_traffic_goes_through_the_netdev` needs a device with raw QPs.
//!
//! The lab's guests also have virtio-net on the same subnet, with their own addresses: the
//! guest kernel would route the lab prefix through either interface, so every check here
//! names the qpip interface (`ping -I`, host routes through it), and the guests answer ARP
//! only on the interface that owns the address (`arp_ignore=1`), as a host with two NICs
//! on one link must.
//!
//! Ignored by a plain `cargo test`; `./qpip test` runs them with `-- --ignored`. They need
//! root (namespace, bridge, TAPs).

#[path = "common/autoconf.rs"]
mod autoconf;
mod common;

use common::traffic::*;
use common::{needs_root, Report};
use qpip_lab::netns;
use qpip_lab::payload::pattern;
use qpip_lab::{LabHost, QpipdLayout};
use std::io::Read;
use std::net::{SocketAddrV4, SocketAddrV6, TcpListener};
use std::time::Duration;

/// The shell helpers of this file's guest scripts (after common's and traffic's).
///  ND                   the qpip network interface (the one whose driver is qpip)
///  nd_addrs             its addresses, ADDR/PLEN, space-separated (not the link-local one)
///  dev_addrs            the device's, as sysfs lists them (LIST_ADDRS)
///  nd_stats TAG         its /sys/class/net statistics as TAG.NAME
///  dev_stats TAG        the device's raw-QP counters from `ethtool -S` as TAG.NAME
///                       (ethtool from the extras share)
///  nd_up                brings it up, waits up to 10 s for its carrier (`@up.carrier`) and
///                       up to 5 s for the device's addresses on it
const ND_HELPERS: &str = r#"
Q=/sys/class/qpip/qpip0
ND=
for i in /sys/class/net/*; do
    [ "$(basename "$(readlink -f "$i/device/driver" 2>/dev/null)")" = qpip ] && ND=${i##*/}
done
nd_addrs() {
    ip addr show dev "$ND" 2>/dev/null | awk '($1 == "inet" || $1 == "inet6") && $2 !~ /^fe80:/ {print $2}' | tr '\n' ' '
}
dev_addrs() { tr '\n' ' ' < $Q/addresses; }
nd_stats() {
    for s in rx_packets tx_packets rx_bytes tx_bytes rx_errors tx_errors tx_dropped; do
        kv "$1.$s" "$(cat /sys/class/net/$ND/statistics/$s 2>/dev/null || echo missing)"
    done
}
dev_stats() {
    lab-extras >/dev/null 2>&1
    for s in dev_raw_tx_frames dev_raw_rx_frames dev_raw_tx_refused; do
        kv "$1.$s" "$(ethtool -S $ND 2>/dev/null | awk -v s="$s:" '$1 == s {print $2}')"
    done
}
# rx_modes TAG: the driver's receive-mode counters from `ethtool -S` as TAG.NAME.
rx_modes() {
    for s in rx_merged_frames rx_gso_frames rx_too_many_frags rx_copied_frames; do
        kv "$1.$s" "$(ethtool -S $ND 2>/dev/null | awk -v s="$s:" '$1 == s {print $2}')"
    done
}
nd_up() {
    echo 1 > /proc/sys/net/ipv4/conf/all/arp_ignore
    echo 2 > /proc/sys/net/ipv4/conf/all/arp_announce
    echo 0 > /proc/sys/net/ipv6/conf/$ND/accept_dad 2>/dev/null
    ip link set "$ND" up; kv up.status $?
    i=0; until [ "$(cat /sys/class/net/$ND/carrier 2>/dev/null)" = 1 ] || [ $i -ge 100 ]; do
        i=$((i + 1)); sleep 0.1
    done
    kv up.carrier "$(cat /sys/class/net/$ND/carrier 2>/dev/null || echo missing)"
    i=0; until [ -n "$(nd_addrs)" ] || [ $i -ge 50 ]; do i=$((i + 1)); sleep 0.1; done
}
"#;

fn nd_script(body: &str) -> String {
    format!("{ND_HELPERS}\n{body}")
}

/// Waits in the guest (up to 5 s) until CONDITION (a shell test) holds: the work item that
/// carries address changes runs a moment after the change.
const SETTLE: &str = r#"
settle() { i=0; until eval "$1" || [ $i -ge 50 ]; do i=$((i + 1)); sleep 0.1; done; }
"#;

/// Probe, MAC and MTU from the device, the device's addresses imported when the interface
/// comes up (not before), `ip addr add/del` and `ip link set address` reaching the device
/// and sysfs changes reaching the interface, `ethtool -i`, `-S`, `-k` and `-K` (from the
/// extras share), the statistics files, and `rmmod` with the interface up: no Oops (the lab
/// fails a run whose console shows one), the interface gone, the module loading again.
#[test]
#[ignore = "boots VMs: run by ./qpip test"]
fn netdev_follows_the_device_and_unloads_cleanly() {
    needs_root!();
    let script = nd_script(&format!(
        "{SETTLE}{}",
        r#"
kv nd "${ND:-missing}"
kv nd.mac "$(cat /sys/class/net/$ND/address)"
kv dev.mac "$(cat $Q/mac)"
kv nd.mtu "$(cat /sys/class/net/$ND/mtu)"
kv dev.mtu "$(cat $Q/mtu)"
kv dev.addrs "$(dev_addrs)"
kv down.addrs "$(nd_addrs)"
nd_up
kv up.addrs "$(nd_addrs)"
ip -6 addr add fd51:5050::99/64 dev $ND; kv add6.status $?
ip -4 addr add 198.51.100.7/24 dev $ND; kv add4.status $?
settle 'dev_addrs | grep -q 198.51.100.7 && dev_addrs | grep -q fd51:5050::99/'
kv add.dev "$(dev_addrs)"
ip -6 addr del fd51:5050::99/64 dev $ND; kv del6.status $?
ip -4 addr del 198.51.100.7/24 dev $ND; kv del4.status $?
settle '! dev_addrs | grep -q 198.51.100.7'
kv del.dev "$(dev_addrs)"
echo "add fd51:5050::98/64" > $Q/addresses; kv sysfs_add.status $?
settle 'nd_addrs | grep -q fd51:5050::98'
kv sysfs_add.nd "$(nd_addrs)"
echo "del fd51:5050::98" > $Q/addresses; kv sysfs_del.status $?
settle '! nd_addrs | grep -q fd51:5050::98'
kv sysfs_del.nd "$(nd_addrs)"
kv sysfs_del.dev "$(dev_addrs)"
old=$(cat $Q/mac)
ip link set $ND address 02:51:50:01:00:77; kv setmac.status $?
kv setmac.dev "$(cat $Q/mac)"
echo 02:51:50:01:00:78 > $Q/mac; kv sysfs_mac.status $?
settle '[ "$(cat /sys/class/net/$ND/address)" = 02:51:50:01:00:78 ]'
kv sysfs_mac.nd "$(cat /sys/class/net/$ND/address)"
ip link set $ND address "$old"
if lab-extras >/dev/null 2>&1; then
    kv ethtool.driver "$(ethtool -i $ND | awk '$1 == "driver:" {print $2}')"
    kv ethtool.bus "$(ethtool -i $ND | awk '$1 == "bus-info:" {print $2}')"
    kv ethtool.pci "$(basename "$(readlink -f /sys/class/net/$ND/device)")"
    kv ethtool.stats "$(ethtool -S $ND | awk -F: '{print $1}' | tr -d ' ' | tr '\n' ' ')"
    ethtool -K $ND tso off rx off; kv ethtool.set $?
    kv ethtool.off "$(ethtool -k $ND | awk '$1 == "tcp-segmentation-offload:" || $1 == "rx-checksumming:" {print $2}' | tr '\n' ' ')"
    kv ethtool.grohw_rx_off "$(ethtool -k $ND | awk '$1 == "rx-gro-hw:" {print $2}')"
    ethtool -K $ND tso on rx on
    kv ethtool.grohw_rx_on "$(ethtool -k $ND | awk '$1 == "rx-gro-hw:" {print $2}')"
else
    kv ethtool.driver missing
fi
nd_stats stats
ip link set $ND down; kv down.status $?
kv down.dev "$(dev_addrs)"
ip link set $ND up
rmmod qpip; kv rmmod.status $?
kv rmmod.nd "$([ -e /sys/class/net/$ND ] && echo present || echo gone)"
insmod "$QPIP_KO"; kv insmod.status $?
i=0; until [ -e /sys/class/net/$ND ] || [ $i -ge 50 ]; do i=$((i + 1)); sleep 0.1; done
kv insmod.nd "$([ -e /sys/class/net/$ND ] && echo present || echo gone)"
"#
    ));
    let out = lab(
        vec![guest("a", &script, 300, &[])],
        QpipdLayout::Adapter,
        |_| (),
    );
    let a = Report::succeeded(out.guest("a"));
    let ctx = a.context();

    assert_ne!(a.get("nd"), "missing", "no qpip network interface\n{ctx}");
    assert_eq!(
        a.get("nd.mac"),
        a.get("dev.mac"),
        "the function's MAC\n{ctx}"
    );
    assert_eq!(a.get("nd.mtu"), a.get("dev.mtu"), "the device's MTU\n{ctx}");
    let (dev6, dev4) = (netns::device_addr(1), netns::device_addr4(1));
    let dev_addrs = a.get("dev.addrs");
    assert!(
        dev_addrs.contains(&dev6) && dev_addrs.contains(&dev4),
        "the lab gave the device {dev6} and {dev4}\n{ctx}"
    );
    assert_eq!(
        a.get("down.addrs"),
        "",
        "a down interface has none yet\n{ctx}"
    );
    assert_eq!(a.get("up.status"), "0", "{ctx}");
    let up = a.get("up.addrs");
    assert!(
        up.contains(&format!("{dev6}/")) && up.contains(&format!("{dev4}/{}", netns::PREFIX4_LEN)),
        "the device's addresses on the interface once up\n{ctx}"
    );
    for k in [
        "add6",
        "add4",
        "del6",
        "del4",
        "sysfs_add",
        "sysfs_del",
        "down",
    ] {
        assert_eq!(a.get(&format!("{k}.status")), "0", "{k}\n{ctx}");
    }
    let added = a.get("add.dev");
    assert!(
        added.contains("fd51:5050::99/64") && added.contains("::ffff:198.51.100.7/120"),
        "ip addr add reaches the device (IPv4 as IPv4-mapped, prefix + 96)\n{ctx}"
    );
    let deleted = a.get("del.dev");
    assert!(
        !deleted.contains("fd51:5050::99") && !deleted.contains("198.51.100.7"),
        "ip addr del reaches the device\n{ctx}"
    );
    assert!(
        a.get("sysfs_add.nd").contains("fd51:5050::98/64"),
        "a sysfs address reaches the interface\n{ctx}"
    );
    assert!(
        !a.get("sysfs_del.nd").contains("fd51:5050::98")
            && !a.get("sysfs_del.dev").contains("fd51:5050::98"),
        "a sysfs removal reaches the interface, and is not carried back\n{ctx}"
    );
    assert!(
        a.get("down.dev").contains(&dev6) && a.get("down.dev").contains(&dev4),
        "down is not removal: the device keeps its addresses\n{ctx}"
    );
    assert_eq!(
        a.get("setmac.status"),
        "0",
        "ip link set address, up\n{ctx}"
    );
    assert_eq!(a.get("setmac.dev"), "02:51:50:01:00:77", "SET_MAC\n{ctx}");
    assert_eq!(a.get("sysfs_mac.status"), "0", "{ctx}");
    assert_eq!(
        a.get("sysfs_mac.nd"),
        "02:51:50:01:00:78",
        "a sysfs MAC reaches the interface\n{ctx}"
    );
    assert_eq!(a.get("ethtool.driver"), "qpip", "ethtool -i\n{ctx}");
    assert_eq!(
        a.get("ethtool.bus"),
        a.get("ethtool.pci"),
        "ethtool -i\n{ctx}"
    );
    for s in [
        "tx_packets",
        "rx_packets",
        "rx_csum_ok",
        "rx_merged_frames",
        "rx_gso_frames",
        "rx_too_many_frags",
        "rx_copied_frames",
        "dev_raw_tx_frames",
        "dev_raw_rx_no_wr",
    ] {
        assert!(
            a.get("ethtool.stats").split(' ').any(|n| n == s),
            "ethtool -S has {s}\n{ctx}"
        );
    }
    assert_eq!(a.get("ethtool.set"), "0", "ethtool -K\n{ctx}");
    assert_eq!(
        a.get("ethtool.off"),
        "off off ",
        "ethtool -k after -K\n{ctx}"
    );
    // rx-gro-hw (the receive mode) goes with RX checksumming and comes back with it.
    assert_eq!(a.get("ethtool.grohw_rx_off"), "off", "{ctx}");
    assert_eq!(a.get("ethtool.grohw_rx_on"), "on", "{ctx}");
    for s in ["rx_packets", "tx_packets", "tx_dropped"] {
        assert_ne!(a.get(&format!("stats.{s}")), "missing", "{s}\n{ctx}");
    }
    assert_eq!(
        a.get("rmmod.status"),
        "0",
        "rmmod with the interface up\n{ctx}"
    );
    assert_eq!(a.get("rmmod.nd"), "gone", "{ctx}");
    assert_eq!(a.get("insmod.status"), "0", "{ctx}");
    assert_eq!(a.get("insmod.nd"), "present", "{ctx}");
}

/// The address the lab's DHCP server leases (in the lab's 198.18.0.0/24, which no lab
/// participant has: see `netns::device_addr4`).
const DHCP_LEASE: &str = "198.18.0.77";

/// Guest a's steps of the network's address configuration on ND, in a guest whose
/// interface is up with its raw QP (the lab host's side is [`autoconf_host_side`]):
///
/// - SLAAC: with DAD on for ND, 5 probes 1 s apart (the address stays tentative long
///   enough to look at), the lab host advertises fd51:5050::/64 (autonomous, not on-link,
///   no default router) to ND's link-local address until the guest listens on the address
///   its kernel formed; the device gets that address only once DAD is done; a QP listens
///   on it and takes the lab host's stream; `ip addr del` takes it off the device.
/// - DHCPv4: udhcpc on ND (its discover and the server's broadcast offer and ack through
///   the raw QP) with a script that applies the lease with `ip addr add`, the device
///   getting the leased address, a QP listening on it taking the lab host's stream, then
///   `ip addr del`.
///
/// `$LEASE_ADDR` stands for [`DHCP_LEASE`].
const AUTOCONF: &str = r#"
LEASE=$LEASE_ADDR
upto() { i=0; until eval "$2" || [ $i -ge $(($1 * 10)) ]; do i=$((i + 1)); sleep 0.1; done; }
slaac_addr() { ip -6 addr show dev $ND | awk '$1 == "inet6" && / dynamic/ {print $2; exit}'; }
echo 1 > /proc/sys/net/ipv6/conf/$ND/accept_ra
echo 1 > /proc/sys/net/ipv6/conf/$ND/autoconf
echo 5 > /proc/sys/net/ipv6/conf/$ND/dad_transmits
echo 1 > /proc/sys/net/ipv6/conf/$ND/accept_dad
touch /lab/slaac-go
upto 120 '[ -n "$(slaac_addr)" ]'
S=$(slaac_addr); SA=${S%/*}
kv slaac.addr "$S"
# The device's list first: an address still tentative after it was read was so while it was.
kv slaac.dev_tentative "$(dev_addrs)"
kv slaac.tentative "$(ip -6 addr show dev $ND | grep -c "inet6 $S .*tentative")"
upto 60 '! ip -6 addr show dev $ND | grep -q "inet6 $S .*tentative"'
upto 10 'dev_addrs | grep -q "$SA/"'
kv slaac.dev "$(dev_addrs)"
echo 0 > /proc/sys/net/ipv6/conf/$ND/accept_dad
echo "$SA" > /lab/slaac.addr
cat_listen slaac qpip-cat -v --stream -w 300 -l $SA 7560
cat_wait slaac slaac.rx; digest slaac.rx /tmp/slaac.out
ip -6 addr del $S dev $ND; kv slaac_del.status $?
upto 10 '! dev_addrs | grep -q "$SA/"'
kv slaac_del.dev "$(dev_addrs)"
kv slaac_del.nd "$(nd_addrs)"
cat > /tmp/dhcp.sh <<'EOF'
#!/bin/sh
# The lease onto the interface and nothing else: busybox's example script flushes the
# interface on deconfig, which would take the device's own addresses off with it.
case "$1" in bound|renew) ip addr add "$ip/$mask" dev "$interface" ;; esac
exit 0
EOF
chmod +x /tmp/dhcp.sh
await dhcp-server
udhcpc -i $ND -f -q -n -t 20 -T 3 -s /tmp/dhcp.sh >/tmp/udhcpc.log 2>&1; kv dhcp.status $?
kv dhcp.log "$(tr '\n' ' ' < /tmp/udhcpc.log)"
kv dhcp.nd "$(nd_addrs)"
upto 10 'dev_addrs | grep -q "$LEASE/"'
kv dhcp.dev "$(dev_addrs)"
cat_listen dhcp qpip-cat -v --stream -w 300 -l $LEASE 7561
cat_wait dhcp dhcp.rx; digest dhcp.rx /tmp/dhcp.out
ip addr del $LEASE/24 dev $ND; kv dhcp_del.status $?
upto 10 '! dev_addrs | grep -q "$LEASE/"'
kv dhcp_del.dev "$(dev_addrs)"
"#;

/// What the lab host saw of guest a's SLAAC and DHCP addresses: each stream's SHA-256 and
/// whether it went through, and the SLAAC address the guest named.
#[derive(Debug)]
struct AutoconfView {
    sha: String,
    slaac_addr: String,
    slaac: Result<(), String>,
    dhcp: Result<(), String>,
}

/// The lab host's side of [`AUTOCONF`]: router advertisements to guest a's interface, one a
/// second, until the guest listens on its SLAAC address, then a stream to that listener;
/// a DHCP server (stopped when this returns, on failure too) and a stream to the listener
/// on the leased address.
fn autoconf_host_side(host: &LabHost) -> AutoconfView {
    let long = Duration::from_secs(300);
    let data = pattern(300_000, 11);
    let ra = autoconf::router_advert(netns::PREFIX.parse().unwrap(), 3600, 1800);
    let to = autoconf::link_local(&netns::device_mac(1));
    let shared = host.shared_dir().to_path_buf();
    let slaac = host.wait_for("slaac-go", long).and_then(|_| {
        for _ in 0..120 {
            autoconf::send_icmpv6(host, to, &ra)?;
            if shared.join("slaac").exists() || host.ending() {
                break;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        host.wait_for("slaac", Duration::from_secs(1))
    });
    let slaac_addr = std::fs::read_to_string(shared.join("slaac.addr"))
        .unwrap_or_default()
        .trim()
        .to_string();
    let slaac = slaac.and_then(|_| {
        let a: std::net::Ipv6Addr = slaac_addr
            .parse()
            .map_err(|e| format!("SLAAC address {slaac_addr:?}: {e}"))?;
        // The lab host's on-link prefix is a /80: the /64's other addresses are off its
        // link until a route says otherwise (the guest's device has the /64 on-link, so
        // its answers need none).
        let route = format!("{a}/128 dev {}", netns::BRIDGE);
        host.sh(&format!("ip -6 route replace {route}"))?;
        let sent = host_sends(host, SocketAddrV6::new(a, 7560, 0, 0).into(), &data);
        let _ = host.sh(&format!("ip -6 route del {route}"));
        sent
    });
    let dhcp = autoconf::DhcpServer::start(host, DHCP_LEASE).and_then(|server| {
        host.signal("dhcp-server").map_err(|e| e.to_string())?;
        let to = SocketAddrV4::new(DHCP_LEASE.parse().unwrap(), 7561);
        let sent = host
            .wait_for("dhcp", long)
            .and_then(|_| host_sends(host, to.into(), &data));
        drop(server);
        sent
    });
    AutoconfView {
        sha: sha256(&data),
        slaac_addr,
        slaac,
        dhcp,
    }
}

/// What the lab host saw of guest a's kernel over the qpip interface.
#[derive(Debug)]
struct HostView {
    /// What the lab host's DNS server logged ([`DnsServer`]).
    dns_log: Result<String, String>,
    /// Taking the adapter's uplink TAP down and up again ([`flap_uplink`]).
    link: Result<(), String>,
    g2h: SentOrWhy,
    h2g_sha: String,
    h2g: Result<(), String>,
    autoconf: AutoconfView,
}

/// In the lab's namespace, a plain TCP listener on `bind`; `ready` is signalled once it
/// listens; the first `n` bytes of the first connection (a busybox nc does not end its
/// side when its input ends), their length and SHA-256.
fn host_takes(host: &LabHost, bind: &str, ready: &str, n: usize) -> SentOrWhy {
    host.in_netns(|| -> SentOrWhy {
        let l = TcpListener::bind(bind).map_err(|e| e.to_string())?;
        host.signal(ready).map_err(|e| e.to_string())?;
        let mut s = accept_within(&l, Duration::from_secs(300))?;
        s.set_read_timeout(Some(Duration::from_secs(120)))
            .map_err(|e| e.to_string())?;
        let mut got = vec![0u8; n];
        s.read_exact(&mut got).map_err(|e| e.to_string())?;
        Ok((got.len(), sha256(&got)))
    })
    .map_err(|e| e.to_string())
    .and_then(|r| r)
}

/// In the lab's namespace, the adapter's uplink TAP taken down when guest a asks
/// (`nd-link-down`) and up again when it asks (`nd-link-up`); each done is signalled
/// (`nd-link-is-down`, `nd-link-is-up`) whatever happened, so the guest never waits long.
fn flap_uplink(host: &LabHost) -> Result<(), String> {
    let set = |state: &str| -> Result<(), String> {
        let tap = netns::ADAPTER_TAP;
        let st = host
            .command("ip")
            .args(["link", "set", tap, state])
            .status()
            .map_err(|e| format!("ip link set {tap} {state}: {e}"))?;
        st.success()
            .then_some(())
            .ok_or(format!("ip link set {tap} {state}: {st}"))
    };
    let limit = Duration::from_secs(300);
    let down = host
        .wait_for("nd-link-down", limit)
        .and_then(|_| set("down"));
    let _ = host.signal("nd-link-is-down");
    let up = host.wait_for("nd-link-up", limit).and_then(|_| set("up"));
    let _ = host.signal("nd-link-is-up");
    down.and(up)
}

/// The name the lab host's DNS server gives the far host.
const FAR_NAME: &str = "far.lab.test";

/// Debian's dnsmasq in the lab's namespace, a DNS server on the lab host's two addresses
/// that knows [`FAR_NAME`] (both families) and logs every query with its source.
struct DnsServer {
    child: std::process::Child,
    log: std::path::PathBuf,
}

impl DnsServer {
    fn start(host: &LabHost) -> Result<DnsServer, String> {
        let log = host.shared_dir().join("dnsmasq.log");
        let record = format!(
            "--host-record={FAR_NAME},{},{}",
            netns::FAR_HOST_ADDR4,
            netns::FAR_HOST_ADDR
        );
        let child = host
            .command("dnsmasq")
            .args([
                "--keep-in-foreground",
                "--conf-file=/dev/null",
                "--no-resolv",
                "--no-hosts",
                "--pid-file",
                "--user=root",
                "--bind-dynamic",
                "--log-queries",
            ])
            .arg(format!("--listen-address={}", netns::HOST_ADDR4))
            .arg(format!("--listen-address={}", netns::HOST_ADDR))
            .arg(format!("--log-facility={}", log.display()))
            .arg(record)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| {
                format!("cannot start dnsmasq ({e}; ./qpip setup installs dnsmasq-base)")
            })?;
        // Until it answers: its log says so once its sockets are bound.
        for _ in 0..100 {
            if std::fs::read_to_string(&log).is_ok_and(|t| t.contains("started")) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(DnsServer { child, log })
    }

    /// Stops it; its log.
    fn stop(mut self) -> Result<String, String> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::fs::read_to_string(&self.log).map_err(|e| format!("{}: {e}", self.log.display()))
    }
}

/// The lab host's iperf3 server on port 5299 while guest a runs its clients (from its
/// `nd-iperf` to its `nd-iperf-done`).
fn iperf3_server(host: &LabHost) {
    let server = host
        .command("iperf3")
        .args(["-s", "-p", "5299"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    let Ok(mut server) = server else {
        eprintln!("the lab host has no iperf3 (./qpip setup installs it)");
        let _ = host.signal("nd-iperf");
        return;
    };
    std::thread::sleep(Duration::from_millis(500));
    let _ = host.signal("nd-iperf");
    let _ = host.wait_for("nd-iperf-done", Duration::from_secs(300));
    let _ = server.kill();
    let _ = server.wait();
}

/// The guest kernel's traffic through the raw QP (a device with raw QPs): carrier on,
/// ping and ping -6 to the lab host and to the other guest's device, the carrier off
/// while the lab host has the adapter's uplink TAP down and on again after (a ping
/// through it then), a TCP stream from a
/// busybox nc in guest a's kernel to the lab host (TSO) and one from the lab host's plain
/// socket to a busybox nc in a's kernel (the engine has no listener on that port, so the
/// raw QP gets it), each with its SHA-256 compared, Debian's iperf3 against the lab host's
/// both ways (receiving super-frames whole in mergeable buffers, then with rx-gro-hw off
/// one frame per buffer, then at MTU 1400), the interface's
/// counters and the device's raw-QP counters grown (none refused), and rmmod with the
/// interface up.
#[test]
#[ignore = "boots VMs: run by ./qpip test"]
fn guest_kernel_traffic_goes_through_the_netdev() {
    needs_root!();
    let a_script = nd_script(
        r#"
nd_up
H4=198.18.0.1; H6=fd51:5050::1; B4=198.18.0.102
# Through the qpip interface, not virtio-net's routes to the same prefix.
ip route add $H4/32 dev $ND src 198.18.0.101
ip -6 route add $H6/128 dev $ND src $A
nd_stats before
dev_stats before
ping -c 5 -W 5 -I $ND $H4 >/tmp/p4 2>&1; kv ping4.status $?
ping -6 -c 5 -W 5 -I $ND $H6 >/tmp/p6 2>&1; kv ping6.status $?
ping -c 5 -W 5 -I $ND $B4 >/tmp/pb 2>&1; kv ping_b.status $?
ping -6 -c 5 -W 5 -I $ND $B >/tmp/pb6 2>&1; kv ping6_b.status $?
# Names: busybox's nslookup asks the lab host's dnsmasq for the far host's name, over each
# family (the routes above take both through the interface).
await nd-dns
nslookup far.lab.test $H4 >/tmp/ns4 2>&1; kv dns4.status $?
kv dns4.out "$(tr '\n\t' '  ' < /tmp/ns4)"
nslookup far.lab.test $H6 >/tmp/ns6 2>&1; kv dns6.status $?
kv dns6.out "$(tr '\n\t' '  ' < /tmp/ns6)"
# The lab host takes the adapter's uplink TAP down and up: the carrier (and ethtool's
# "Link detected") follows the device's link, and traffic flows again once it is back.
carrier_is() {
    i=0; until [ "$(cat /sys/class/net/$ND/carrier 2>/dev/null)" = "$1" ] || [ $i -ge 100 ]; do
        i=$((i + 1)); sleep 0.1
    done
}
link_detected() { ethtool $ND 2>/dev/null | awk -F': ' '/Link detected/ {print $2}'; }
touch /lab/nd-link-down; await nd-link-is-down
carrier_is 0
kv link_down.carrier "$(cat /sys/class/net/$ND/carrier 2>/dev/null || echo missing)"
kv link_down.ethtool "$(link_detected)"
touch /lab/nd-link-up; await nd-link-is-up
carrier_is 1
kv link_up.carrier "$(cat /sys/class/net/$ND/carrier 2>/dev/null || echo missing)"
kv link_up.ethtool "$(link_detected)"
ping -c 3 -w 30 -I $ND $H4 >/tmp/pl 2>&1; kv ping_link.status $?
head -c 1000000 /dev/urandom > /tmp/g2h; digest g2h.in /tmp/g2h
await nd-g2h; timeout 300 nc $H4 7553 < /tmp/g2h; kv g2h.status $?
nc -l -p 7552 > /tmp/h2g &
ncpid=$!
sleep 1; touch /lab/nd-h2g
wait $ncpid; kv h2g.status $?
digest h2g /tmp/h2g
# iperf3 (Debian's, from the extras share) against the lab host's, both directions.
lab-extras >/tmp/extras 2>&1; kv extras.status $?
await nd-iperf
iperf3 -c $H4 -p 5299 -t 3 >/tmp/ip1 2>&1; kv iperf.status $?
kv iperf.rate "$(grep receiver /tmp/ip1 | tail -1 | awk '{print $7, $8}')"
rx_modes merged0
iperf3 -c $H4 -p 5299 -t 3 -R >/tmp/ip2 2>&1; kv iperf_r.status $?
kv iperf_r.rate "$(grep receiver /tmp/ip2 | tail -1 | awk '{print $7, $8}')"
rx_modes merged
# Without rx-gro-hw the queues are rebuilt with one frame per buffer: no super-frame.
ethtool -K $ND rx-gro-hw off; kv grohw_off.status $?
iperf3 -c $H4 -p 5299 -t 2 -R >/tmp/ip3 2>&1; kv iperf_frames.status $?
rx_modes frames
ethtool -K $ND rx-gro-hw on
# An MTU change rebuilds the queues: pings that fill 1400 bytes and TCP (a smaller MSS
# for TSO) still go through.
ip link set $ND mtu 1400; kv mtu.status $?
kv mtu.now "$(cat /sys/class/net/$ND/mtu)"
ping -c 3 -W 5 -s 1372 -I $ND $H4 >/tmp/pm 2>&1; kv ping_mtu.status $?
iperf3 -c $H4 -p 5299 -t 2 >/tmp/ip4 2>&1; kv iperf_mtu.status $?
ip link set $ND mtu 1500
touch /lab/nd-iperf-done
nd_stats after
dev_stats after
$AUTOCONF
rmmod qpip; kv rmmod.status $?
lab-wait host-done 300
"#,
    )
    .replace("$AUTOCONF", AUTOCONF)
    .replace("$LEASE_ADDR", DHCP_LEASE);
    let b_script = nd_script(
        r#"
nd_up
lab-wait host-done 300
"#,
    );
    let out = pair_lab(&a_script, &b_script, 600, |host: &LabHost| {
        let dns = DnsServer::start(host);
        let _ = host.signal("nd-dns");
        let link = flap_uplink(host);
        let g2h = host_takes(host, "0.0.0.0:7553", "nd-g2h", 1_000_000);
        let data = pattern(1_000_000, 7);
        let to = SocketAddrV4::new(netns::device_addr4(1).parse().unwrap(), 7552);
        let h2g = host
            .wait_for("nd-h2g", Duration::from_secs(300))
            .and_then(|_| host_sends(host, to.into(), &data));
        iperf3_server(host);
        let autoconf = autoconf_host_side(host);
        let _ = host.signal("host-done");
        HostView {
            dns_log: dns.and_then(DnsServer::stop),
            link,
            g2h,
            h2g_sha: sha256(&data),
            h2g,
            autoconf,
        }
    });
    let (a, b) = pair_reports(&out);
    let ctx = a.context();
    assert_eq!(a.get("up.carrier"), "1", "carrier with the raw QP\n{ctx}");
    assert_eq!(b.get("up.carrier"), "1", "{}", b.context());
    for p in ["ping4", "ping6", "ping_b", "ping6_b"] {
        assert_eq!(a.get(&format!("{p}.status")), "0", "{p}\n{ctx}");
    }
    // The far host's name resolved over each family, the queries from a's device
    // addresses: they went through the interface.
    for (t, server) in [("dns4", netns::HOST_ADDR4), ("dns6", netns::HOST_ADDR)] {
        assert_eq!(
            a.get(&format!("{t}.status")),
            "0",
            "nslookup to {server}\n{ctx}"
        );
        let answer = a.get(&format!("{t}.out"));
        for addr in [netns::FAR_HOST_ADDR4, netns::FAR_HOST_ADDR] {
            assert!(
                answer.contains(&format!(" {addr} ")) || answer.ends_with(&format!(" {addr}")),
                "{FAR_NAME} is {addr} by {server}: {answer}\n{ctx}"
            );
        }
    }
    let dns_log = out.host.dns_log.as_ref().expect("the lab host's dnsmasq");
    for src in [netns::device_addr4(1), netns::device_addr(1)] {
        assert!(
            dns_log.contains(&format!("{FAR_NAME} from {src}")),
            "a query from a's device address {src} (through the interface):\n{dns_log}\n{ctx}"
        );
    }
    assert_eq!(out.host.link, Ok(()), "the uplink TAP down and up\n{ctx}");
    assert_eq!(
        a.get("link_down.carrier"),
        "0",
        "no carrier while the uplink is down\n{ctx}"
    );
    assert_eq!(a.get("link_down.ethtool"), "no", "{ctx}");
    assert_eq!(
        a.get("link_up.carrier"),
        "1",
        "the carrier back with the uplink\n{ctx}"
    );
    assert_eq!(a.get("link_up.ethtool"), "yes", "{ctx}");
    assert_eq!(
        a.get("ping_link.status"),
        "0",
        "ping through the interface after the link came back\n{ctx}"
    );
    match &out.host.g2h {
        Ok((n, sha)) => {
            assert_eq!(n.to_string(), a.get("g2h.in.bytes"), "{ctx}");
            assert_eq!(sha, a.get("g2h.in.sha"), "a's kernel → host, TSO\n{ctx}");
        }
        Err(e) => panic!("a's kernel → host over qpip: {e}\n{ctx}"),
    }
    assert_eq!(out.host.h2g, Ok(()), "host → a's kernel over qpip\n{ctx}");
    assert_eq!(a.get("h2g.status"), "0", "{ctx}");
    assert_eq!(
        a.get("h2g.sha"),
        out.host.h2g_sha,
        "the bytes intact\n{ctx}"
    );
    assert_eq!(a.num("h2g.bytes"), 1_000_000, "{ctx}");
    assert_eq!(a.get("extras.status"), "0", "{ctx}");
    assert_eq!(a.get("mtu.status"), "0", "{ctx}");
    assert_eq!(a.get("mtu.now"), "1400", "{ctx}");
    assert_eq!(
        a.get("ping_mtu.status"),
        "0",
        "a full ping at MTU 1400\n{ctx}"
    );
    assert_eq!(a.get("iperf_mtu.status"), "0", "TCP at MTU 1400\n{ctx}");
    for t in ["iperf", "iperf_r"] {
        assert_eq!(a.get(&format!("{t}.status")), "0", "{t}\n{ctx}");
        eprintln!("  {t}: {}", a.get(&format!("{t}.rate")));
    }
    for s in ["rx_packets", "tx_packets", "rx_bytes", "tx_bytes"] {
        assert!(
            a.num(&format!("after.{s}")) > a.num(&format!("before.{s}")),
            "{s} grows\n{ctx}"
        );
    }
    assert_eq!(a.get("after.tx_errors"), "0", "{ctx}");
    assert_eq!(a.get("after.rx_errors"), "0", "{ctx}");
    // Mergeable receive buffers: the lab host's stream to a's kernel arrives as
    // super-frames (GSO skbs), each in several buffers; with rx-gro-hw off, none.
    // ... and the small frames (the ACKs of a's own sends) are copied whole, their pages
    // straight back to the RQ.
    for s in ["rx_gso_frames", "rx_merged_frames", "rx_copied_frames"] {
        assert!(
            a.num(&format!("merged.{s}")) > a.num(&format!("merged0.{s}")),
            "{s} grows with mergeable buffers\n{ctx}"
        );
    }
    assert_eq!(a.get("merged.rx_too_many_frags"), "0", "{ctx}");
    assert_eq!(a.get("grohw_off.status"), "0", "{ctx}");
    assert_eq!(a.get("iperf_frames.status"), "0", "{ctx}");
    assert_eq!(
        a.get("frames.rx_gso_frames"),
        a.get("merged.rx_gso_frames"),
        "no super-frame with rx-gro-hw off\n{ctx}"
    );
    for s in ["dev_raw_tx_frames", "dev_raw_rx_frames"] {
        assert!(
            a.num(&format!("after.{s}")) > a.num(&format!("before.{s}")),
            "the device's {s} grows (ethtool -S)\n{ctx}"
        );
    }
    assert_eq!(
        a.get("after.dev_raw_tx_refused"),
        a.get("before.dev_raw_tx_refused"),
        "no raw send refused\n{ctx}"
    );
    assert_autoconf(&a, &out.host.autoconf);
    assert_eq!(
        a.get("rmmod.status"),
        "0",
        "rmmod with the interface up\n{ctx}"
    );
}

/// Guest a's report of [`AUTOCONF`] and the lab host's side of it agree: the SLAAC address
/// formed from the advertised prefix, kept from the device while tentative, given to it
/// after DAD, used by a QP and taken off by `ip addr del`; the same for the DHCP lease.
fn assert_autoconf(a: &Report, v: &AutoconfView) {
    let ctx = a.context();
    let s = a.get("slaac.addr");
    assert!(
        s.starts_with(netns::PREFIX) && s.ends_with("/64"),
        "a SLAAC address from the advertised prefix\n{ctx}"
    );
    let sa = s.trim_end_matches("/64");
    assert_eq!(sa, v.slaac_addr, "{ctx}");
    assert_eq!(a.get("slaac.tentative"), "1", "DAD first\n{ctx}");
    assert!(
        !a.get("slaac.dev_tentative").contains(&format!("{sa}/")),
        "a tentative address is not the device's yet\n{ctx}"
    );
    assert!(
        a.get("slaac.dev").contains(&format!("{sa}/64")),
        "the SLAAC address reaches the device once DAD is done\n{ctx}"
    );
    assert_eq!(
        v.slaac,
        Ok(()),
        "lab host → a QP on the SLAAC address\n{ctx}"
    );
    assert_eq!(a.get("slaac.rx.status"), "0", "{ctx}");
    assert_eq!(a.get("slaac.rx.sha"), v.sha, "the bytes intact\n{ctx}");
    assert_eq!(a.get("slaac_del.status"), "0", "{ctx}");
    assert!(
        !a.get("slaac_del.dev").contains(&format!("{sa}/"))
            && !a.get("slaac_del.nd").contains(&format!("{sa}/")),
        "ip addr del takes the SLAAC address off the device\n{ctx}"
    );

    assert_eq!(a.get("dhcp.status"), "0", "udhcpc got a lease\n{ctx}");
    assert!(
        a.get("dhcp.nd")
            .contains(&format!("{DHCP_LEASE}/{}", netns::PREFIX4_LEN)),
        "the lease on the interface\n{ctx}"
    );
    assert!(
        a.get("dhcp.dev")
            .contains(&format!("::ffff:{DHCP_LEASE}/120")),
        "the lease reaches the device\n{ctx}"
    );
    assert_eq!(
        v.dhcp,
        Ok(()),
        "lab host → a QP on the leased address\n{ctx}"
    );
    assert_eq!(a.get("dhcp.rx.status"), "0", "{ctx}");
    assert_eq!(a.get("dhcp.rx.sha"), v.sha, "the bytes intact\n{ctx}");
    assert_eq!(a.get("dhcp_del.status"), "0", "{ctx}");
    assert!(
        !a.get("dhcp_del.dev").contains(DHCP_LEASE),
        "ip addr del takes the lease off the device\n{ctx}"
    );
}
