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
use qpip_lab::payload::pattern;
use qpip_lab::{LabHost, QpipdLayout};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// What the far host did with guest a's device, one family.
#[derive(Debug)]
struct FarView {
    h2g_sha: String,
    h2g: Result<(), String>,
    g2h: SentOrWhy,
    udp: Result<(u32, u32), String>,
}

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
            let v6 = far_side(&far, netns::device_addr(1).parse().unwrap(), 7450, "6");
            let v4 = far_side(&far, netns::device_addr4(1).parse().unwrap(), 7460, "4");
            let _ = host.signal("host-done");
            (v6, v4)
        },
    );
    let ga = out.guest("a");
    let a = Report::new(ga);
    assert_eq!(ga.status, 0, "guest a failed\n{}", a.context());
    for (fam, v) in [("6", &out.host.0), ("4", &out.host.1)] {
        assert_eq!(v.h2g, Ok(()), "far host → a, IPv{fam}\n{}", a.context());
        assert_eq!(a.get(&format!("h2g{fam}.status")), "0", "{}", a.context());
        assert_eq!(
            a.get(&format!("h2g{fam}.sha")),
            v.h2g_sha,
            "far host → a, IPv{fam}\n{}",
            a.context()
        );
        assert_eq!(a.get(&format!("g2h{fam}.status")), "0", "{}", a.context());
        match &v.g2h {
            Ok((n, sha)) => {
                assert_eq!(n.to_string(), a.get(&format!("g2h{fam}.in.bytes")));
                assert_eq!(
                    sha,
                    a.get(&format!("g2h{fam}.in.sha")),
                    "a → far host, IPv{fam}"
                );
            }
            Err(e) => panic!("a → far host over IPv{fam}: {e}\n{}", a.context()),
        }
        match &v.udp {
            Ok((ok, lost)) => assert!(
                *ok >= 27 && *ok + *lost == 30,
                "UDP far host ⇄ a over IPv{fam}: {ok} echoed, {lost} lost"
            ),
            Err(e) => panic!("UDP far host ⇄ a over IPv{fam}: {e}\n{}", a.context()),
        }
    }
}

/// The far host's side of one family's exchange with guest a's device at `dev`, ports
/// from `port` (`host_exchange` in the guest).
fn far_side(far: &LabHost, dev: IpAddr, port: u16, fam: &str) -> FarView {
    let long = Duration::from_secs(600);
    let to = |p| SocketAddr::new(dev, p);
    let data = pattern(700_000, 6);
    let h2g_sha = sha256(&data);
    let h2g = far
        .wait_for(&format!("h2g{fam}"), long)
        .and_then(|_| host_sends(far, to(port), &data));
    let any = if dev.is_ipv4() { "0.0.0.0" } else { "[::]" };
    let g2h = host_receives(far, &format!("{any}:{}", port + 1), &format!("g2h{fam}"));
    let udp = far
        .wait_for(&format!("hudp{fam}"), long)
        .and_then(|_| host_echoes(far, &format!("{any}:0"), to(port + 2), 30, 300));
    FarView {
        h2g_sha,
        h2g,
        g2h,
        udp,
    }
}
