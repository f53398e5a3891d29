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
use qpip_lab::payload::pattern;
use qpip_lab::LabHost;
use std::net::SocketAddrV4;
use std::time::Duration;

/// What the lab host did over IPv4.
#[derive(Debug)]
struct Ipv4View {
    h2g_sha: String,
    h2g: Result<(), String>,
    g2h: SentOrWhy,
    udp: Result<(u32, u32), String>,
}

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

    let v = &out.host;
    assert_eq!(v.h2g, Ok(()), "host → a\n{}", a.context());
    assert_eq!(a.get("h2g4.status"), "0", "{}", a.context());
    assert_eq!(a.get("h2g4.sha"), v.h2g_sha, "host → a\n{}", a.context());
    assert_eq!(a.get("g2h4.status"), "0", "{}", a.context());
    match &v.g2h {
        Ok((n, sha)) => {
            assert_eq!(n.to_string(), a.get("g2h4.in.bytes"), "{}", a.context());
            assert_eq!(sha, a.get("g2h4.in.sha"), "a → host\n{}", a.context());
        }
        Err(e) => panic!("a → host over IPv4: {e}\n{}", a.context()),
    }
    match &v.udp {
        Ok((ok, lost)) => assert!(
            *ok >= 27 && *ok + *lost == 30,
            "UDP host ⇄ a over IPv4: {ok} echoed, {lost} lost"
        ),
        Err(e) => panic!("UDP host ⇄ a over IPv4: {e}\n{}", a.context()),
    }
}

/// The lab host's side of the IPv4 lab: plain IPv4 sockets to and from guest a's device.
fn ipv4_host(host: &LabHost) -> Ipv4View {
    let long = Duration::from_secs(600);
    let a_dev = SocketAddrV4::new(netns::device_addr4(1).parse().unwrap(), 0);
    let to = |port| SocketAddrV4::new(*a_dev.ip(), port);
    let data = pattern(700_000, 4);
    let h2g_sha = sha256(&data);
    let h2g = host
        .wait_for("h2g4", long)
        .and_then(|_| host_sends(host, to(7444).into(), &data));
    let g2h = host_receives(host, "0.0.0.0:7445", "g2h4");
    let udp = host
        .wait_for("hudp4", long)
        .and_then(|_| host_echoes(host, "0.0.0.0:0", to(7446).into(), 30, 200));
    let _ = host.signal("host-done");
    Ipv4View {
        h2g_sha,
        h2g,
        g2h,
        udp,
    }
}
