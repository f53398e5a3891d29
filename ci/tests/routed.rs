//! Peers beyond the link, in VMs: guest a's QPs reach the far host — a namespace on a
//! second subnet behind the lab host, which routes (see `qpip_lab::netns`) — through the
//! gateway the lab gives every device (`qpipd --route`), for both families: a TCP stream
//! each way and a UDP echo with the far host's plain sockets. (The device's own tests
//! check routes, metrics and path MTU through a Linux router packet by packet:
//! `device/tests/routed_kernel.rs`.)
//!
//! Ignored by a plain `cargo test`; `./qpip test` runs them with `-- --ignored`. They need
//! root (namespaces, bridge, TAPs).

mod common;

use common::traffic::*;
use common::{needs_root, Report};
use qpip_lab::netns;
use qpip_lab::{LabHost, QpipdLayout};

/// QPs through a gateway: guest a's device and the far host's plain sockets, IPv6 then
/// IPv4 — a TCP stream far host → a (its SYN-ACK and data go back through the lab host),
/// one a → far host (the device resolves the gateway, not the far host), and a UDP echo.
#[test]
#[ignore = "boots VMs: run by ./qpip test"]
fn qps_reach_the_far_host_through_the_gateway() {
    needs_root!();
    let script = r#"
host_exchange 6 $QPIP_FAR_ADDR 7450
host_exchange 4 $QPIP_FAR_ADDR4 7460
counters end
"#;
    let out = lab(
        vec![guest("a", script, 900, &[])],
        QpipdLayout::Adapter,
        |host: &LabHost| {
            let far = host.far();
            let v6 = netns::device_addr(1).parse().unwrap();
            let v6 = host_exchange_side(&far, v6, 7450, "6", (6, 300));
            let v4 = netns::device_addr4(1).parse().unwrap();
            let v4 = host_exchange_side(&far, v4, 7460, "4", (6, 300));
            let _ = host.signal("host-done");
            (v6, v4)
        },
    );
    let ga = out.guest("a");
    let a = Report::new(ga);
    assert_eq!(ga.status, 0, "guest a failed\n{}", a.context());
    for (fam, v) in [("6", &out.host.0), ("4", &out.host.1)] {
        assert_exchange(&a, fam, v, &format!("the far host ⇄ a over IPv{fam}"));
    }
}
