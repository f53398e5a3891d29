//! IPv4 beside IPv6, in VMs: on the lab network's `198.18.0.0/24` (inside the lab's
//! namespace), QPs with IPv4-mapped addresses in the API talk IPv4 on the wire between the
//! guests' devices and with the lab host's plain IPv4 sockets. (The lab test pings the
//! devices over IPv4; the device's own tests check ARP, fragments, ICMPv4 and TCP against
//! Linux packet by packet.)
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
/// IPv4 sockets ⇄ a's QPs (TCP stream both ways, UDP echo).
#[test]
#[ignore = "boots VMs: run by ./qpip test"]
fn qps_speak_ipv4_between_guests_and_with_the_lab_hosts_sockets() {
    needs_root!();
    let a_script = r#"
B4=198.18.0.102
await udp4; run udp4 qpip-e2e ping -u $B4 --port 7441 --iters 50 --size 1000
await tcp4; run tcp4 qpip-e2e ping $B4 --port 7442 --iters 50 --size 1000
await bulk4; run bulk4 qpip-e2e send --stream $B4 --port 7443 --bytes 2000000 --chunk 65536
# The lab host's plain IPv4 sockets.
host_exchange 4 $QPIP_HOST_ADDR4 7444
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

    assert_exchange(&a, "4", &out.host, "the lab host ⇄ a over IPv4");
}

/// The lab host's side of the IPv4 lab: plain IPv4 sockets to and from guest a's device.
fn ipv4_host(host: &LabHost) -> ExchangeView {
    let dev = netns::device_addr4(1).parse().unwrap();
    let v = host_exchange_side(host, dev, 7444, "4", (4, 200));
    let _ = host.signal("host-done");
    v
}
