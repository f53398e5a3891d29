//! IPv4 beside IPv6, and peers beyond the link, in VMs: on the lab network's
//! `198.18.0.0/24` (inside the lab's namespace), QPs with IPv4-mapped addresses in the API
//! talk IPv4 on the wire between the guests' devices and with the lab host's plain IPv4
//! sockets; then guest a's QPs reach the far host — a namespace on a second subnet behind
//! the lab host, which routes (see `qpip_lab::netns`) — through the gateway the lab gives
//! every device (`qpipd --route`), for both families. One boot for both. (The lab test
//! pings the devices over IPv4; the device's own tests check ARP, fragments, ICMPv4, TCP,
//! routes, metrics and path MTU against Linux packet by packet: `device/tests/net`,
//! `device/tests/routed_kernel.rs`.)
//!
//! Ignored by a plain `cargo test`; `./qpip test` runs them with `-- --ignored`. They need
//! root (namespace, bridge, TAPs).

mod common;

use common::needs_root;
use common::traffic::*;
use qpip_lab::netns;
use qpip_lab::LabHost;

/// QPs over IPv4 (IPv4-mapped addresses in the API), on the lab network's
/// `198.18.0.0/24`: UDP and TCP message ping-pong and a TCP stream a→b between the
/// devices (b's servers listen on every address, both families); the lab host's plain
/// IPv4 sockets ⇄ a's QPs (TCP stream both ways, UDP echo). Then QPs through a gateway:
/// guest a's device and the far host's plain sockets, IPv6 then IPv4 — a TCP stream far
/// host → a (its SYN-ACK and data go back through the lab host), one a → far host (the
/// device resolves the gateway, not the far host), and a UDP echo.
#[test]
#[ignore = "boots VMs: run by ./qpip test"]
fn qps_speak_ipv4_and_reach_the_far_host_through_the_gateway() {
    needs_root!();
    let a_script = r#"
B4=198.18.0.102
await udp4; run udp4 qpip-e2e ping -u $B4 --port 7441 --iters 50 --size 1000
await tcp4; run tcp4 qpip-e2e ping $B4 --port 7442 --iters 50 --size 1000
await bulk4; run bulk4 qpip-e2e send --stream $B4 --port 7443 --bytes 2000000 --chunk 65536
# The lab host's plain IPv4 sockets.
host_exchange 4 $QPIP_HOST_ADDR4 7444
# The far host, through the lab host.
host_exchange f6 $QPIP_FAR_ADDR 7450
host_exchange f4 $QPIP_FAR_ADDR4 7460
counters end
"#;
    let b_script = r#"
serve udp4 qpip-e2e echo -u --port 7441 -w 300; finish udp4
serve tcp4 qpip-e2e echo --port 7442 -w 300; finish tcp4
serve bulk4 qpip-e2e sink --stream --port 7443 -w 300; finish bulk4
lab-wait host-done 600
"#;
    let out = pair_lab(a_script, b_script, 900, ipv4_host);
    let (a, b) = pair_reports(&out);
    assert_ping(&a, "udp4", 50);
    assert_ping(&a, "tcp4", 50);
    assert_same_bytes(&a, "bulk4", &b, "bulk4", 1, false);

    let (lab4, far6, far4) = &out.host;
    assert_exchange(&a, "4", lab4, "the lab host ⇄ a over IPv4");
    for (tag, fam, v) in [("f6", 6, far6), ("f4", 4, far4)] {
        assert_exchange(&a, tag, v, &format!("the far host ⇄ a over IPv{fam}"));
    }
}

/// The host side: the lab host's plain IPv4 sockets to and from guest a's device, then the
/// far host's, both families.
fn ipv4_host(host: &LabHost) -> (ExchangeView, ExchangeView, ExchangeView) {
    let dev6 = netns::device_addr(1).parse().unwrap();
    let dev4 = netns::device_addr4(1).parse().unwrap();
    let lab4 = host_exchange_side(host, dev4, 7444, "4", (4, 200));
    let far = host.far();
    let far6 = host_exchange_side(&far, dev6, 7450, "f6", (6, 300));
    let far4 = host_exchange_side(&far, dev4, 7460, "f4", (6, 300));
    let _ = host.signal("host-done");
    (lab4, far6, far4)
}
