//! qpip's iWARP queue pairs against the iWARP peer nobody here wrote: Linux's soft-iWARP
//! (`siw`) with rdma-core's `rping`, between two guests on the lab network — guest a's qpip
//! device running `qpip-rping`, guest b's virtio-net NIC running siw — in both roles, at
//! several sizes, every ping's data checked by whichever end rping's `-V` runs on, over IPv6
//! and over IPv4 (`rping -a` an IPv4 address); then `qpip-rping` against itself between the
//! two guests' devices (functions of one adapter); then, with b's NIC moved to the far
//! subnet behind the lab host (which routes), siw against qpip again in both roles and
//! both families, through the gateway.
//! Every frame of port 7174 on the lab bridge is captured, and tshark's iWARP dissectors
//! must read each one without a malformed frame or an error.
//!
//! siw's responder can leave a new connection stalled (its accept race, see
//! `ci/tests/common/rping.sh`): the run where siw serves detects it (its socket keeps unread bytes)
//! and is tried again, up to five times (the window is wide on a loaded host).
//!
//! The test boots VMs: ignored by a plain `cargo test`, run by `./qpip test` (as root).

mod common;
#[path = "common/dumpcap.rs"]
mod dumpcap;

use common::{needs_root, Report};
use dumpcap::Capture;
use qpip_lab::netns;
use qpip_lab::{guest_name, unique_netns, LabHost, LabSpec, Network, QpipdLayout};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// One exchange: who serves (which guest, which implementation), iterations and size.
struct Run {
    tag: &'static str,
    /// (guest, "qpip" or "siw", or "qpip4" and "siw4" over IPv4) of the server and of
    /// the client.
    server: (usize, &'static str),
    client: (usize, &'static str),
    iters: u64,
    size: u64,
}

const fn run(
    tag: &'static str,
    server: (usize, &'static str),
    client: (usize, &'static str),
    iters: u64,
    size: u64,
) -> Run {
    Run {
        tag,
        server,
        client,
        iters,
        size,
    }
}

const QPIP_A: (usize, &str) = (1, "qpip");
const QPIP_B: (usize, &str) = (2, "qpip");
const SIW_B: (usize, &str) = (2, "siw");
const QPIP4_A: (usize, &str) = (1, "qpip4");
const SIW4_B: (usize, &str) = (2, "siw4");
/// siw on b's NIC once it is on the far subnet, behind the lab host.
const SIWF_B: (usize, &str) = (2, "siwf");
const SIWF4_B: (usize, &str) = (2, "siwf4");

/// The exchanges, in order: siw's client against qpip's server, qpip's client against
/// siw's server (rping's smallest buffer, a size over one segment, its largest), then qpip
/// against qpip.
const RUNS: [Run; 9] = [
    run("qs23", QPIP_A, SIW_B, 100, 23),
    run("qs2000", QPIP_A, SIW_B, 50, 2000),
    run("qs65535", QPIP_A, SIW_B, 10, 65535),
    run("sq23", SIW_B, QPIP_A, 100, 23),
    run("sq2000", SIW_B, QPIP_A, 50, 2000),
    run("sq65535", SIW_B, QPIP_A, 10, 65535),
    run("qq2000", QPIP_B, QPIP_A, 50, 2000),
    // Over IPv4 (rping -a an IPv4 address), both roles.
    run("qs4", QPIP4_A, SIW4_B, 50, 2000),
    run("sq4", SIW4_B, QPIP4_A, 50, 2000),
];

/// The exchanges once b's NIC is on the far subnet: every frame goes through the lab host,
/// which routes; both roles, both families.
const ROUTED_RUNS: [Run; 4] = [
    run("qsr6", QPIP_A, SIWF_B, 20, 2000),
    run("sqr6", SIWF_B, QPIP_A, 20, 2000),
    run("qsr4", QPIP4_A, SIWF4_B, 20, 2000),
    run("sqr4", SIWF4_B, QPIP4_A, 20, 2000),
];

/// The address a server of `kind` on guest `n` listens at.
fn addr_of((n, kind): (usize, &str)) -> String {
    match kind {
        "siw" => netns::virtio_addr(n),
        "siw4" => netns::virtio_addr4(n),
        "siwf" => netns::far_virtio_addr(n),
        "siwf4" => netns::far_virtio_addr4(n),
        "qpip4" => netns::device_addr4(n),
        _ => netns::device_addr(n),
    }
}

/// Guest `n`'s script: siw up on b, then its side of every run (`serve` and `client` of
/// `common/rping.sh`).
fn script(n: usize) -> String {
    let mut s = String::new();
    if n == 2 {
        s += "lab-siw >/tmp/lab-siw.out 2>&1; st=$?; sed 's/^/  /' /tmp/lab-siw.out\n";
        s += "kv siw.status $st\n";
    }
    if n == 2 {
        let (gw6, gw4) = netns::FAR_GATEWAYS;
        s += &format!(
            "FAR_NET_ADDR={} FAR_NET_ADDR4={} FAR_GW={gw6} FAR_GW4={gw4} \
             QPIP_DEV6_A={} QPIP_DEV4_A={}\n",
            netns::far_virtio_addr(n),
            netns::far_virtio_addr4(n),
            netns::device_addr(1),
            netns::device_addr4(1),
        );
    }
    s += "touch /lab/up.$QPIP_GUEST_NAME\nawait up.a && await up.b && await capture\n";
    s += &runs_script(n, &RUNS);
    // b's NIC goes to the far subnet: the host moves its TAP, b renumbers it and routes
    // the lab subnet through the lab host.
    if n == 2 {
        s += "touch /lab/move.b && await moved && to_far\n";
        s += "touch /lab/far-ready\n";
    } else {
        s += "await far-ready\n";
    }
    s += &runs_script(n, &ROUTED_RUNS);
    s += "touch /lab/all-done.$QPIP_GUEST_NAME\n";
    // Up until the host has stopped its capture: its marker is a ping to guest a.
    s += "lab-wait host-done 300\n";
    common::script(&format!("{}{TO_FAR}", common::RPING_SHELL), &s)
}

/// Guest b's NIC renumbered onto the far subnet, routes to the lab subnet through the lab
/// host (its address there), and the routes the kernel then takes to a's device reported.
const TO_FAR: &str = r#"
to_far() {
    i=$QPIP_NET_IF
    ip -6 route del fd51:5050:0:0:1::/80 via fd51:5050::1 dev "$i"
    ip -4 route del 198.18.1.0/24 via 198.18.0.1 dev "$i"
    ip -6 addr del "$QPIP_NET_ADDR/80" dev "$i"
    ip -4 addr del "$QPIP_NET_ADDR4/24" dev "$i"
    ip -6 addr add "$FAR_NET_ADDR/80" dev "$i"
    ip -4 addr add "$FAR_NET_ADDR4/24" dev "$i"
    ip -6 route add fd51:5050::/80 via "$FAR_GW" dev "$i"
    ip -4 route add 198.18.0.0/24 via "$FAR_GW4" dev "$i"
    kv far.route6 "$(ip -6 route get "$QPIP_DEV6_A")"
    kv far.route4 "$(ip -4 route get "$QPIP_DEV4_A")"
}
"#;

/// Guest `n`'s side of `runs`, one at a time (`serve` and `client` of `common/rping.sh`).
fn runs_script(n: usize, runs: &[Run]) -> String {
    let mut s = String::new();
    for r in runs {
        let args = format!("-C {} -S {}", r.iters, r.size);
        if r.server.0 == n {
            s += &format!("serve {} {} {args}\n", r.tag, r.server.1);
        } else if r.client.0 == n {
            let peer = addr_of(r.server);
            s += &format!("client {} {} {peer} {args}\n", r.tag, r.client.1);
        }
        // Runs go one at a time: both guests meet after each.
        s += &format!("touch /lab/{}.done.$QPIP_GUEST_NAME\n", r.tag);
        s += &format!("await {0}.done.a && await {0}.done.b\n", r.tag);
    }
    s
}

/// Where a capture named `name` goes: beside the run's shared folder.
fn capture_file(host: &LabHost, name: &str) -> Result<PathBuf, String> {
    Ok(host
        .shared_dir()
        .parent()
        .ok_or("the shared folder has no parent")?
        .join(name))
}

/// What the host side saw: the capture, and the packets the lab host forwarded during the
/// routed runs (IPv4, IPv6).
struct HostSide {
    pcap: PathBuf,
    forwarded: (u64, u64),
}

/// The host side: dumpcap on the bridge around all the runs (port 7174); between the
/// on-link and the routed runs, b's NIC moved to the far subnet, and the lab host's
/// forwarding counters read around the routed runs.
fn capture(host: &LabHost) -> Result<HostSide, String> {
    for g in host.guests() {
        host.wait_for(&format!("up.{g}"), Duration::from_secs(300))?;
    }
    let pcap = capture_file(host, "iwarp-interop.pcap")?;
    let mut cap = Capture::start(host, &pcap, 7174..=7174, None)?;
    host.signal("capture")
        .map_err(|e| format!("signal capture: {e}"))?;
    let routed = || -> Result<(u64, u64), String> {
        host.wait_for("move.b", Duration::from_secs(900))?;
        host.move_virtio_to_far(2)?;
        let before = forwarded(host)?;
        host.signal("moved")
            .map_err(|e| format!("signal moved: {e}"))?;
        host.guests()
            .iter()
            .try_for_each(|g| host.wait_for(&format!("all-done.{g}"), Duration::from_secs(900)))?;
        let after = forwarded(host)?;
        Ok((after.0 - before.0, after.1 - before.1))
    };
    let forwarded = routed();
    cap.stop(host)?;
    Ok(HostSide {
        pcap,
        forwarded: forwarded?,
    })
}

/// The lab host's forwarded packets so far: IPv4 (`ForwDatagrams` of /proc/net/snmp) and
/// IPv6 (`Ip6OutForwDatagrams` of /proc/net/snmp6), in its namespace.
fn forwarded(host: &LabHost) -> Result<(u64, u64), String> {
    let v4 = host.sh("awk '/^Ip: [0-9]/ { print $7 }' /proc/net/snmp")?;
    let v6 = host.sh("awk '$1 == \"Ip6OutForwDatagrams\" { print $2 }' /proc/net/snmp6")?;
    let num = |t: &str, what: &str| {
        t.trim()
            .parse::<u64>()
            .map_err(|e| format!("{what} {t:?}: {e}"))
    };
    Ok((num(&v4, "ForwDatagrams")?, num(&v6, "Ip6OutForwDatagrams")?))
}

/// Checks `pcap` as Wireshark's iWARP dissectors read it (MPA found by its heuristic on
/// TCP): no frame malformed or in error, and more than `min_iwarp` frames carrying iWARP.
fn assert_dissects_cleanly(pcap: &std::path::Path, min_iwarp: usize) {
    let run = |filter: &str| {
        // RPC-over-RDMA's heuristic takes any Send's payload for its own and reports a
        // 4-byte "done" as a malformed RPC message: not an iWARP frame's fault.
        let out = Command::new("tshark")
            .args(["--enable-heuristic", "iwarp_mpa_tcp"])
            .args(["--disable-protocol", "rpcordma", "-r"])
            .arg(pcap)
            .args(["-Y", filter])
            .output()
            .expect("tshark");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let bad = run("_ws.malformed || _ws.expert.severity == error");
    assert!(
        bad.is_empty(),
        "tshark finds malformed or erroneous frames in {}:\n{bad}",
        pcap.display()
    );
    let iwarp = run("iwarp_ddp_rdmap").lines().count();
    assert!(
        iwarp > min_iwarp,
        "only {iwarp} iWARP frames in {}",
        pcap.display()
    );
}

#[test]
#[ignore = "boots VMs: run by ./qpip test"]
fn qpip_rping_interoperates_with_rping_on_siw_both_ways() {
    needs_root!();
    let guest = |n: usize| common::lab_guest(guest_name(n), script(n), Duration::from_secs(900));
    let spec = LabSpec {
        guests: vec![guest(1), guest(2)],
        network: Network::Lab(unique_netns("qpip-iwarp")),
        layout: QpipdLayout::Adapter,
    };
    let out = common::lab(&spec, capture);
    let (ga, gb) = (out.guest("a"), out.guest("b"));
    let (a, b) = (Report::new(ga), Report::new(gb));
    let ctx = || format!("=== a:\n{}\n=== b:\n{}", a.context(), b.context());
    assert_eq!((ga.status, gb.status), (0, 0), "{}", ctx());
    assert_eq!(b.get("siw.status"), "0", "siw on b\n{}", ctx());
    let guest_report = |n: usize| if n == 1 { &a } else { &b };
    for r in RUNS.iter().chain(&ROUTED_RUNS) {
        let (server, client) = (guest_report(r.server.0), guest_report(r.client.0));
        let done = [
            server.get(&format!("{}.server", r.tag)),
            client.get(&format!("{}.client", r.tag)),
        ];
        assert_eq!(done, ["0", "0"], "{}: server and client\n{}", r.tag, ctx());
        assert_eq!(
            client.num(&format!("{}.pings", r.tag)),
            r.iters,
            "{}: pings the client checked\n{}",
            r.tag,
            ctx()
        );
        let stalls = server.num(&format!("{}.stalls", r.tag));
        eprintln!(
            "  {}: {} server on {}, {} client, {} × {} bytes checked{}",
            r.tag,
            r.server.1,
            guest_name(r.server.0),
            r.client.1,
            r.iters,
            r.size,
            if stalls > 0 {
                format!(" (siw stalled {stalls} attempt(s) first)")
            } else {
                String::new()
            }
        );
    }
    let host = out
        .host
        .as_ref()
        .unwrap_or_else(|e| panic!("host side: {e}\n{}", ctx()));
    // The routed runs went through the lab host: b's kernel routed a's device through its
    // gateway, and the lab host forwarded packets of both families meanwhile.
    let (gw6, gw4) = netns::FAR_GATEWAYS;
    for (key, gw) in [("far.route6", gw6), ("far.route4", gw4)] {
        assert!(
            b.get(key).contains(&format!("via {gw} ")),
            "{key}: b's route to a's device is not through the lab host\n{}",
            ctx()
        );
    }
    let (f4, f6) = host.forwarded;
    assert!(
        f4 > 40 && f6 > 40,
        "the lab host forwarded {f4} IPv4 and {f6} IPv6 packets during the routed runs\n{}",
        ctx()
    );
    eprintln!("  routed runs: the lab host forwarded {f4} IPv4 and {f6} IPv6 packets");
    assert_dissects_cleanly(&host.pcap, 1000);
}

// ---- qpip ⇄ qpip: RDMA under loss and reordering, and forbidden accesses ------------------

/// What a guest script of the next test runs: serve the region (b) or use it (a), a
/// transfer then each forbidden access, one after the other (`/lab/rN` says run N listens),
/// each a `run TAG qpip-e2e ...` whose report lines are prefixed with its tag.
fn rdma_script(server: bool) -> String {
    let mut s = String::new();
    let runs = [
        ("xfer", "--bytes 2000000 --chunk 262144"),
        ("rkey", "--bytes 4096 --violate bad-rkey"),
        ("bounds", "--bytes 4096 --violate bounds"),
        ("ro", "--bytes 4096 --violate read-only"),
        ("dereg", "--bytes 4096 --violate dereg"),
    ];
    s += if server { "" } else { "await loss-on\n" };
    for (i, (tag, args)) in runs.iter().enumerate() {
        let port = 7610 + i;
        if server {
            let bytes = args.split_whitespace().nth(1).unwrap_or("4096");
            let extra = if *tag == "dereg" {
                " --violate dereg"
            } else {
                ""
            };
            s += &format!(
                "(sleep 1; touch /lab/r{i}) & run {tag} qpip-e2e rdma-serve --port {port} --bytes {bytes}{extra} -w 600\n"
            );
            s += &format!("await c{i}\n");
        } else {
            let b = netns::device_addr(2);
            s += &format!(
                "await r{i}; sleep 1; run {tag} qpip-e2e rdma {b} --port {port} {args} -w 600; touch /lab/c{i}\n"
            );
        }
    }
    s += "touch /lab/done.$QPIP_GUEST_NAME\n";
    // Up until the host has stopped its capture: its marker is a ping to guest a.
    s += "lab-wait host-done 300\n";
    common::script("", &s)
}

/// Guest a RDMA-Writes 2 MB into guest b's region and reads it back, with immediate data
/// on the last Write, while a's device reorders its frames and the bridge drops 3 % of
/// them (nftables): b's device places Write segments that come ahead of a hole at once
/// (counted), and every byte arrives (digests and a's comparison); b's tripwires on the
/// region fire once per arm (the whole region's once for all the Writes, the last byte's
/// at the end of the last Write, the unarmed one never). Then a tries a Write with a wrong
/// rkey, one past the region's end, one into a read-only region and one into a region b
/// has deregistered: each ends in the Terminate that names it, an error completion on a
/// and the reason on both, and no tripwire fires (nothing of the region was touched).
#[test]
#[ignore = "boots VMs: run by ./qpip test"]
fn rdma_between_qpip_guests_under_loss_and_reordering_and_forbidden_accesses() {
    needs_root!();
    let guest = |name: &str, script: String, qpipd: &[&str]| {
        let mut g = common::lab_guest(name, script, Duration::from_secs(900));
        g.vm.qpipd_args = vec![qpipd.iter().map(|s| s.to_string()).collect()];
        g
    };
    let impair = "reorder=10,seed=5";
    let spec = LabSpec {
        guests: vec![
            guest("a", rdma_script(false), &["--impair", impair]),
            guest("b", rdma_script(true), &[]),
        ],
        network: Network::Lab(unique_netns("qpip-rdma")),
        // A qpipd per guest: their frames cross the bridge (the loss) and a's link (its
        // impairment); one adapter would switch them in memory, past both.
        layout: QpipdLayout::PerGuest,
    };
    let out = common::lab(&spec, |host: &LabHost| {
        host.sh("nft add table bridge rdma && \
             nft add chain bridge rdma lossy '{ type filter hook forward priority 0; }' && \
             nft add rule bridge rdma lossy numgen random mod 100 '<' 3 counter drop")?;
        let pcap = capture_file(host, "iwarp-rdma.pcap")?;
        let mut cap = Capture::start(host, &pcap, 7610..=7614, None)?;
        host.signal("loss-on").map_err(|e| e.to_string())?;
        let waited = host
            .guests()
            .iter()
            .try_for_each(|g| host.wait_for(&format!("done.{g}"), Duration::from_secs(900)));
        cap.stop(host)?;
        waited?;
        Ok::<_, String>((host.sh("nft list chain bridge rdma lossy")?, pcap))
    });
    let (ga, gb) = (out.guest("a"), out.guest("b"));
    let (a, b) = (Report::new(ga), Report::new(gb));
    let ctx = || format!("=== a:\n{}\n=== b:\n{}", a.context(), b.context());
    assert_eq!((ga.status, gb.status), (0, 0), "{}", ctx());
    let (rules, pcap) = out
        .host
        .clone()
        .unwrap_or_else(|e| panic!("host: {e}\n{}", ctx()));
    // Every frame of every run as Wireshark's iWARP dissectors read it: the transfer's
    // retransmissions and reordering, and each Terminate, well-formed.
    assert_dissects_cleanly(&pcap, 500);
    // The transfer: the same bytes on both ends, read back whole, the immediate data there.
    assert_eq!(a.get("xfer.cli.read_ok"), "1", "{}", ctx());
    assert_eq!(a.get("xfer.cli.sha"), b.get("xfer.srv.sha"), "{}", ctx());
    assert_eq!(a.get("xfer.cli.immediate"), "1", "{}", ctx());
    assert_eq!(b.get("xfer.srv.imm"), "0xc0ffee", "{}", ctx());
    assert_eq!(b.get("xfer.srv.terminate"), "none", "{}", ctx());
    // Tripwires on the written region: one event per arm however many Writes land, the
    // one on the last byte where the last Write ended, none from the one never armed.
    let whole = b.get("xfer.srv.tw_whole");
    let hit: Vec<u64> = whole
        .split(':')
        .map(|x| x.parse().unwrap_or(u64::MAX))
        .collect();
    assert!(
        hit.len() == 3 && hit[0] == 1 && hit[1] < 2_000_000 && (1..=262_144).contains(&hit[2]),
        "the whole region's tripwire: {whole}\n{}",
        ctx()
    );
    assert_eq!(b.get("xfer.srv.tw_last"), "1:1999999:1", "{}", ctx());
    assert_eq!(b.get("xfer.srv.tw_never"), "0", "{}", ctx());
    let placed = b.num("xfer.srv.ooo_placed");
    assert!(
        placed > 0,
        "no Write segment placed ahead of a hole\n{}",
        ctx()
    );
    eprintln!(
        "RDMA Write of 2 MB under loss and reordering: {placed} segments placed ahead of a \
         hole; bridge: {}",
        rules
            .lines()
            .find(|l| l.contains("drop"))
            .unwrap_or("")
            .trim()
    );
    // The forbidden accesses: layer/type/code of each Terminate.
    for (tag, want) in [
        ("rkey", "1/1/0x0"),
        ("bounds", "1/1/0x1"),
        ("ro", "0/1/0x2"),
        ("dereg", "1/1/0x0"),
    ] {
        assert_eq!(
            a.get(&format!("{tag}.cli.error")),
            "RemoteAccess",
            "{tag}\n{}",
            ctx()
        );
        assert_eq!(
            a.get(&format!("{tag}.cli.detail")),
            want,
            "{tag}\n{}",
            ctx()
        );
        assert_eq!(
            a.get(&format!("{tag}.cli.terminate")),
            format!("{want}/received"),
            "{tag}\n{}",
            ctx()
        );
        assert_eq!(
            b.get(&format!("{tag}.srv.terminate")),
            format!("{want}/sent"),
            "{tag}\n{}",
            ctx()
        );
        if tag != "dereg" {
            // Nothing of the region was touched: no armed tripwire fired.
            for tw in ["whole", "last", "never"] {
                assert_eq!(
                    b.get(&format!("{tag}.srv.tw_{tw}")),
                    "0",
                    "{tag}\n{}",
                    ctx()
                );
            }
        }
        eprintln!(
            "  {tag}: Terminate {want}, an error completion on the writer, the QP error on both"
        );
    }
}
