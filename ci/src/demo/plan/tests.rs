//! The plan's tests: the steps of the demo and the bench, in order.
use super::*;
use crate::demo::results;

/// The step ids of `plan` with their `Measure` actions only.
fn measures(plan: &Plan) -> Vec<(String, Test, Net, u32)> {
    plan.steps()
        .into_iter()
        .filter_map(|s| match s.action {
            Action::Measure { test, net, round } => Some((s.id, test, net, round)),
            _ => None,
        })
        .collect()
}

#[test]
fn every_step_of_the_plan_is_in_guest_a_script_in_order() {
    let mut five = Plan::bench();
    five.rounds = 5;
    for plan in [Plan::demo(), Plan::bench(), five] {
        let script = scripts::guest_a(&plan);
        let mut at = 0;
        for step in plan.steps() {
            let id = &step.id;
            let pos = script[at..]
                .find(&format!("\nstep {id}\n"))
                .unwrap_or_else(|| panic!("step {id} missing or out of order"));
            at += pos + 1;
        }
        assert_eq!(
            script.matches("\nstep ").count(),
            plan.steps().len(),
            "the script has steps the plan does not describe"
        );
        let ids: Vec<String> = plan.steps().into_iter().map(|s| s.id).collect();
        let mut unique = ids.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), ids.len(), "step ids repeat: {ids:?}");
    }
    assert!(scripts::guest_a(&Plan::demo()).contains("host-out"));
    assert!(!scripts::guest_a(&Plan::bench()).contains("host-out"));
}

#[test]
fn the_demo_is_one_round_in_its_story_order() {
    let plan = Plan::demo();
    assert_eq!(plan.rounds, 1);
    let ids: Vec<String> = plan.steps().into_iter().map(|s| s.id).collect();
    assert_eq!(
        ids,
        [
            "ready", "udp-qp", "tcp-qp", "bw-qp", "bulk-qp", "nbd-qp", "host-out", "host-in",
            "host-udp", "udp-sk", "tcp-sk", "bw-sk", "bulk-sk"
        ]
    );
    assert_eq!(plan.limit(), plan.round_timeout);
    assert!(plan.steps()[1].what.starts_with("UDP ping-pong"));
    // The network disk: guest b serves it while getting ready, guest a's step uses it.
    let a = scripts::guest_a(&plan);
    assert!(
        a.contains("\nstep nbd-qp\nlab-storage > /tmp/storage"),
        "{a}"
    );
    assert!(a.contains("qpip-nbd connect fd51:5050::1:2 -n disk"), "{a}");
    assert!(
        a.contains("head -c 8388608 /dev/urandom > /tmp/nbdf"),
        "{a}"
    );
    let b = scripts::guest_b(&plan);
    assert!(b.contains("qpip-nbd serve /tmp/disk.img -n disk"), "{b}");
    // The bench measures storage in a pass of its own.
    for p in [
        Plan::bench(),
        Plan::bench().layout_pass(crate::QpipdLayout::PerGuest),
    ] {
        assert!(!scripts::guest_a(&p).contains("qpip-nbd"));
        assert!(!scripts::guest_b(&p).contains("qpip-nbd"));
    }
}

#[test]
fn the_layout_pass_runs_the_ping_pongs_and_8k_bandwidth_over_qps_only() {
    let plan = Plan::bench().layout_pass(crate::QpipdLayout::PerGuest);
    assert_eq!(plan.layout, crate::QpipdLayout::PerGuest);
    let m = measures(&plan);
    let want: Vec<(String, Test, Net, u32)> = (1..=3)
        .flat_map(|r| {
            [Test::UdpPing, Test::TcpPing, Test::TcpBw]
                .map(|t| (format!("{}-qp.{r}", t.id()), t, Net::Qp, r))
        })
        .collect();
    assert_eq!(m, want);
    assert_eq!(plan.tcp_sizes, [LAYOUT_BW_MSG]);
    assert!(!plan.steps().iter().any(|s| matches!(
        s.action,
        Action::Overhead { .. } | Action::HostOut | Action::HostIn | Action::HostUdp
    )));
    let b = scripts::guest_b(&plan);
    assert!(
        !b.contains("receivers 1 ") && !b.contains("test -e /lab/bulk-ready.1"),
        "{b}"
    );
    assert!(b.contains("qpip-perf -s --port"), "{b}");
    // The full bench's guest b still starts its bulk receivers.
    assert!(scripts::guest_b(&Plan::bench()).contains("bulk-ready.1 -o"));
}

#[test]
fn the_bench_runs_each_measurement_in_every_round_taking_turns() {
    let plan = Plan::bench();
    assert_eq!(plan.rounds, 3);
    // QPs (IPv6) against sockets over virtio-net; the other nets, and RDMA's four, have
    // tests of their own below.
    let m: Vec<_> = measures(&plan)
        .into_iter()
        .filter(|x| matches!(x.2, Net::Qp | Net::Sockets) && !x.1.is_rdma())
        .collect();
    // Five tests on two nets, three rounds.
    assert_eq!(m.len(), 5 * 2 * 3);
    for pair in m.chunks(2) {
        let (a, b) = (&pair[0], &pair[1]);
        assert_eq!(
            (a.1, a.3),
            (b.1, b.3),
            "QPs and sockets are next to each other"
        );
        let first = if a.3 % 2 == 1 { Net::Qp } else { Net::Sockets };
        assert_eq!(a.2, first, "round {}: {} goes first", a.3, a.0);
        assert_ne!(a.2, b.2);
    }
    assert_eq!(m[0].0, "udp-qp.1");
    assert_eq!(m[10].0, "udp-sk.2");
    assert_eq!(plan.steps()[1].id, "netdev");
    assert!(plan.steps()[2].what.starts_with("round 1/3: UDP ping-pong"));
    assert_eq!(plan.limit(), plan.round_timeout * 3);
    // Each round's bulk transfers have their own ports, clear of the lab host's.
    let mut ports: Vec<u16> = (1..=results::MAX_ROUNDS)
        .flat_map(|r| {
            [
                scripts::bulk_port(Net::Qp, r),
                scripts::bulk_port(Net::Sockets, r),
                scripts::bulk_port(Net::Netdev, r),
            ]
        })
        .collect();
    let n = ports.len();
    ports.sort();
    ports.dedup();
    assert_eq!(ports.len(), n);
    assert!(*ports.last().unwrap() < scripts::HOST_TCP_PORT);
    let a = scripts::guest_a(&plan);
    assert!(a.contains("bulk qp.2 2 qpip-cat --message -w 60"), "{a}");
    assert!(a.contains(&format!(" {}\n", scripts::bulk_port(Net::Sockets, 3))));
    let b = scripts::guest_b(&plan);
    assert!(b.contains("receivers 1 qp.1 sk.1 7000 7001 ready\n"), "{b}");
    // A later round's receivers fail as that round's first bulk step (sockets go
    // first in even rounds).
    assert!(
        b.contains("receivers 2 qp.2 sk.2 7002 7003 bulk-sk.2\n"),
        "{b}"
    );
    assert!(
        b.contains("receivers 3 qp.3 sk.3 7004 7005 bulk-qp.3\n"),
        "{b}"
    );
    // One round: names without round numbers, as the demo reports them.
    let one = scripts::guest_b(&Plan::demo());
    assert!(one.contains("receivers 1 qp sk 7000 7001 ready\n"), "{one}");
}

#[test]
fn the_bench_ends_each_round_with_qpip_overhead_and_marks_cpu_windows() {
    let plan = Plan::bench();
    let steps = plan.steps();
    let overhead: Vec<(usize, &str)> = steps
        .iter()
        .enumerate()
        .filter(|(_, s)| matches!(s.action, Action::Overhead { .. }))
        .map(|(i, s)| (i, s.id.as_str()))
        .collect();
    // Ready and the netdevs, then (39 + 1) per round: the last step of each round.
    assert_eq!(
        overhead,
        [(41, "overhead.1"), (81, "overhead.2"), (121, "overhead.3")]
    );
    let a = scripts::guest_a(&plan);
    assert!(a.contains("\nstep overhead.2\nqpip-overhead --messages 1000 --json"));
    assert!(
        a.contains("echo \"@overhead.2=$(cat /tmp/overhead.json)\""),
        "{a}"
    );
    assert!(
        a.contains("qpip-overhead --messages 1000 --spin-us 400 --json"),
        "{a}"
    );
    // Ping-pongs are windows named as their step; TCP bandwidth one per size.
    assert!(a.contains("perf udp-sk.2 udp-sk.2 "), "{a}");
    for size in &plan.tcp_sizes {
        let line = format!("perf bw-qp.3 bw-qp:{size}.3 ");
        assert!(a.contains(&line), "{line}: {a}");
        assert!(a.contains(&format!("--sizes {size} --bytes")), "{a}");
    }
    assert!(a.contains("perf udpbw-qp.1 - "), "{a}");
    // TCP bandwidth: 16 MiB of small messages, 64 MiB from 64 KiB on; UDP 16 MiB.
    for (size, bytes) in [
        (1024, 16 << 20),
        (8192, 16 << 20),
        (65536, 64 << 20),
        (262144, 64 << 20),
    ] {
        assert_eq!(plan.tcp_bw_bytes(size), bytes);
        assert!(
            a.contains(&format!("--sizes {size} --bytes {bytes}\n")),
            "{a}"
        );
    }
    assert!(
        a.contains("--udp --test bandwidth --sizes 1024,8192 --bytes 16777216\n"),
        "{a}"
    );
    let bw = plan
        .steps()
        .into_iter()
        .find(|s| s.id == "bw-qp.1")
        .unwrap();
    assert!(
        bw.what.ends_with(
            "(16 MiB per size, messages of 1 KiB, 8 KiB; 64 MiB per size, messages of 64 KiB, 256 KiB)"
        ),
        "{}",
        bw.what
    );
    let b = scripts::guest_b(&plan);
    assert!(b.contains("cpu-mark.$n.b"), "{b}");
    assert!(!b.contains("lab-wait a-done"), "{b}");
    // The demo: none of it.
    let demo = Plan::demo();
    let a = scripts::guest_a(&demo);
    assert!(!a.contains("qpip-overhead --messages"));
    assert!(a.contains("perf udp-qp - "), "{a}");
    assert!(a.contains("--sizes 65536 --bytes 4194304\n"), "{a}");
    assert!(scripts::guest_b(&demo).contains("lab-wait a-done"));
    assert!(demo
        .steps()
        .iter()
        .all(|s| !matches!(s.action, Action::Overhead { .. })));
}

#[test]
fn the_bench_measures_sockets_over_the_qpip_netdev_and_qps_over_ipv4_beside_their_pairs() {
    let plan = Plan::bench();
    let m = measures(&plan);
    let ids = |test: Test, round: u32| -> Vec<String> {
        m.iter()
            .filter(|x| x.1 == test && x.3 == round)
            .map(|x| x.0.clone())
            .collect()
    };
    // QPs on IPv4 next to QPs on IPv6, sockets over the netdev next to those over
    // virtio-net; even rounds the other way round.
    assert_eq!(
        ids(Test::UdpPing, 1),
        ["udp-qp4.1", "udp-qp.1", "udp-sk.1", "udp-nd.1"]
    );
    assert_eq!(
        ids(Test::TcpBw, 2),
        ["bw-nd.2", "bw-sk.2", "bw-qp.2", "bw-qp4.2"]
    );
    // Bulk over the netdev too (no QPs over IPv4); UDP bandwidth and RDMA as before.
    assert_eq!(ids(Test::Bulk, 3), ["bulk-qp.3", "bulk-sk.3", "bulk-nd.3"]);
    assert_eq!(ids(Test::UdpBw, 1), ["udpbw-qp.1", "udpbw-sk.1"]);
    // RDMA: perftest on qpip0 between qpip's own library and siw, rxe after them (the
    // other way round in even rounds); the Sends, which qpip's library has not, on three.
    assert_eq!(
        ids(Test::RdmaBw, 1),
        ["rdmabw-qp.1", "rdmabw-vb.1", "rdmabw-sk.1", "rdmabw-rx.1"]
    );
    assert_eq!(
        ids(Test::RdmaBw, 2),
        ["rdmabw-rx.2", "rdmabw-sk.2", "rdmabw-vb.2", "rdmabw-qp.2"]
    );
    assert_eq!(
        ids(Test::RdmaSendLat, 1),
        ["rdmasendlat-vb.1", "rdmasendlat-sk.1", "rdmasendlat-rx.1"]
    );
    // 3 rounds of 4 nets × 3 tests, bulk on 3, UDP bandwidth on 2, 4 RDMA tests on 4 and
    // the 2 Sends on 3.
    assert_eq!(m.len(), 3 * (4 * 3 + 3 + 2 + 4 * 4 + 2 * 3));
    // The netdevs come up once, before any measurement.
    let steps = plan.steps();
    assert_eq!(steps[1].id, "netdev");
    assert_eq!(steps[1].action, Action::NetdevUp);
    assert_eq!(
        steps
            .iter()
            .filter(|s| s.action == Action::NetdevUp)
            .count(),
        1
    );
    let what = |id: &str| steps.iter().find(|s| s.id == id).unwrap().what.clone();
    assert!(
        what("tcp-nd.1").starts_with(
            "round 1/3: TCP ping-pong a⇄b over kernel sockets on the qpip netdev (2000"
        ),
        "{}",
        what("tcp-nd.1")
    );
    assert!(what("bulk-nd.2").contains("busybox nc"));
    assert!(
        what("tcp-qp4.1").starts_with("round 1/3: TCP message ping-pong a⇄b over QPs on IPv4"),
        "{}",
        what("tcp-qp4.1")
    );
    // Neither the demo nor the pass in the other layout has any of it.
    for p in [Plan::demo(), plan.layout_pass(crate::QpipdLayout::PerGuest)] {
        assert!(!p.steps().iter().any(|s| s.id.contains("-nd")
            || s.id.contains("-qp4")
            || s.action == Action::NetdevUp));
        assert!(!scripts::guest_a(&p).contains("netdev_up"));
        assert!(!scripts::guest_b(&p).contains("netdev_up"));
    }
}

#[test]
fn the_netdev_rows_go_to_guest_b_s_device_address_through_both_guests_netdevs() {
    let plan = Plan::bench();
    let a = scripts::guest_a(&plan);
    let b = scripts::guest_b(&plan);
    // Each guest routes the other's device addresses (IPv6, IPv4) through its netdev,
    // from its own.
    assert!(a.contains(
        "\nstep netdev\nif netdev_up fd51:5050::1:2 198.18.0.102 fd51:5050::1:1 198.18.0.101; then\n"
    ), "{a}");
    assert!(
        b.contains(
            "\nif netdev_up fd51:5050::1:1 198.18.0.101 fd51:5050::1:2 198.18.0.102; then\n"
        ),
        "{b}"
    );
    for s in [&a, &b] {
        assert!(s.contains("tr A-F a-f < /sys/class/qpip/qpip0/mac"), "{s}");
        assert!(s.contains("ip link set \"$ND_DEV\" up"), "{s}");
        assert!(
            s.contains("ip -6 route replace \"$1/128\" dev \"$ND_DEV\" src \"$3\""),
            "{s}"
        );
        assert!(
            s.contains("ip -4 route replace \"$2/32\" dev \"$ND_DEV\" src \"$4\""),
            "{s}"
        );
        assert!(s.contains("grep -q \"dev $ND_DEV \" /tmp/nd.route"), "{s}");
    }
    // Guest b says how it went before it is ready; guest a's step reads it.
    let (said, ready) = (
        b.find("mv /lab/.netdev.b /lab/netdev.b").unwrap(),
        b.find("touch /lab/b-ready").unwrap(),
    );
    assert!(said < ready, "{b}");
    assert!(a.contains("await netdev.b 60\n"), "{a}");
    assert!(a.contains("@note=no qpip netdev ($why): the measurements over it are skipped"));
    // The measurements over it: kernel sockets to the device's address, run only when
    // both guests have a netdev.
    assert!(a.contains(
        "\nnd_only perf udp-nd.1 udp-nd.1 fd51:5050::1:2 --port 5202 --sockets --udp --test latency --iters 2000\n"
    ), "{a}");
    assert!(a.contains(
        "\nnd_only perf bw-nd.2 bw-nd:65536.2 fd51:5050::1:2 --port 5202 --sockets --tcp --test bandwidth --sizes 65536 --bytes 67108864\n"
    ), "{a}");
    // Bulk: busybox nc to guest b's receiver of the round, all listening from the start.
    assert!(
        a.contains("\nnd_only bulk nd.3 3 nc fd51:5050::1:2 7042\n"),
        "{a}"
    );
    assert!(
        b.contains("    receive nd.3 nc -l -p 7042 <> /tmp/never &\n"),
        "{b}"
    );
    assert!(
        b.contains("until_true 60 listening 7040 || bfail ready"),
        "{b}"
    );
    // QPs over IPv4: guest b's device's IPv4 address, the QP server's port.
    assert!(a.contains(
        "\nperf tcp-qp4.3 tcp-qp4.3 198.18.0.102 --port 5201 --tcp --test latency --iters 2000\n"
    ), "{a}");
    assert!(a.contains(
        "\nperf bw-qp4.1 bw-qp4:1024.1 198.18.0.102 --port 5201 --tcp --test bandwidth --sizes 1024 --bytes 16777216\n"
    ), "{a}");
}

/// Every guest script the demo and the bench run is valid shell (`sh -n`), so a slip
/// in one is found here, not minutes into a run.
#[test]
fn the_guest_scripts_are_valid_shell() {
    for plan in [Plan::demo(), Plan::bench()] {
        for script in [scripts::guest_a(&plan), scripts::guest_b(&plan)] {
            crate::demo::assert_valid_shell(&script);
        }
    }
}

#[test]
fn the_bench_measures_rdma_writes_and_reads_on_qpip_on_siw_and_on_rxe_with_the_same_counts() {
    let plan = Plan::bench();
    let a = scripts::guest_a(&plan);
    let b = scripts::guest_b(&plan);
    // Both guests bring up soft-iWARP, then soft-RoCE and the index of rxe0's GID for their
    // own lab address; guest b serves RDMA on its qpip device too.
    for (s, gid) in [
        (&a, "fd51:5050:0000:0000:0000:0000:0002:0001"),
        (&b, "fd51:5050:0000:0000:0000:0000:0002:0002"),
    ] {
        let siw = s.find("lab-siw > /tmp/siw").expect("lab-siw");
        let rxe = s.find("lab-rxe > /tmp/rxe").expect("lab-rxe");
        assert!(siw < rxe, "{s}");
        assert!(
            s.contains(&format!("[ \"$(cat \"$g\")\" = {gid} ] && RXE_GID=")),
            "{s}"
        );
    }
    assert!(b.contains("qpip-perf -s --rdma write --port 5203"), "{b}");
    // qpip: the ping-pong and the bandwidth over the device's address.
    assert!(a.contains(
        "perf rdmalat-qp.1 - fd51:5050::1:2 --port 5203 --rdma write --depth 64 --test latency --sizes 64 --iters 2000\n"
    ), "{a}");
    // Then the same ping-pong asleep on tripwires.
    assert!(a.contains(
        "perf rdmalattw-qp.3 - fd51:5050::1:2 --port 5203 --rdma write --tripwire --test latency --sizes 64 --iters 2000\n"
    ), "{a}");
    assert!(a.contains(
        "perf rdmabw-qp.2 - fd51:5050::1:2 --port 5203 --rdma write --depth 64 --test bandwidth --sizes 65536 --bytes 16777216\n"
    ), "{a}");
    // qpip0, siw and rxe: one perftest server per measurement in guest b, its own port,
    // the same arguments as guest a's client, which goes to guest b's qpip device address
    // (qpip0, IPv4) or NIC's address (siw, rxe); qpip0's and siw's QPs connected by
    // rdma_cm (-R), rxe's by perftest itself on the named device and GID. A server on
    // qpip0 is ready once its rdma_cm id listens (on the device: no kernel socket), the
    // others once a kernel TCP socket listens on their port.
    let serves: Vec<&str> = b
        .lines()
        .filter(|l| l.contains("perftest_serve rdma"))
        .collect();
    // Per round and device: the six programs.
    assert_eq!(serves.len(), 3 * 3 * 6, "{b}");
    assert_eq!(
        serves[0].trim(),
        "perftest_serve rdmalat-vb.1 18515 cm ib_write_lat -d qpip0 -R -F -p 18515 -s 64 -n 2000"
    );
    assert_eq!(
        serves[1].trim(),
        "perftest_serve rdmalat-sk.1 18516 tcp6 ib_write_lat -R -F --ipv6-addr -p 18516 -s 64 -n 2000"
    );
    assert_eq!(
        serves[2].trim(),
        "perftest_serve rdmalat-rx.1 18517 tcp6 ib_write_lat -d rxe0 -x $RXE_GID -F --ipv6-addr -p 18517 -s 64 -n 2000"
    );
    // Round 2 has rxe first.
    assert_eq!(
        serves[22].trim(),
        "perftest_serve rdmabw-sk.2 18537 tcp6 ib_write_bw -R -F --ipv6-addr -p 18537 -s 65536 -n 256 -t 64"
    );
    assert!(a.contains("await pt-ready.rdmabw-sk.2 180\n"), "{a}");
    assert!(a.contains("    timeout 120 ib_write_bw -R -F --ipv6-addr -p 18537 -s 65536 -n 256 -t 64 fd51:5050::2:2 > /tmp/pt.out"), "{a}");
    assert!(a.contains("    timeout 120 ib_write_bw -d rxe0 -x $RXE_GID -F --ipv6-addr -p 18536 -s 65536 -n 256 -t 64 fd51:5050::2:2 > /tmp/pt.out"), "{a}");
    assert!(a.contains("    timeout 120 ib_write_bw -d qpip0 -R -F -p 18538 -s 65536 -n 256 -t 64 198.18.0.102 > /tmp/pt.out"), "{a}");
    // Sends, perftest's only.
    assert_eq!(
        serves[16].trim(),
        "perftest_serve rdmasendbw-sk.1 18531 tcp6 ib_send_bw -R -F --ipv6-addr -p 18531 -s 65536 -n 256 -t 64"
    );
    // The clients' system calls are counted in round 1: its runs between sys_count_start
    // and sys_count_end, whose count goes beside the result; later rounds run bare.
    assert!(a.contains("    sys_count_start\n    timeout 120 ib_send_lat -d qpip0 -R -F -p 18527 -s 64 -n 2000 198.18.0.102 > /tmp/pt.out"), "{a}");
    assert!(a.contains("    sys=$(sys_count_end ib_send_lat)\n    [ -z \"$sys\" ] || echo \"@syscalls.rdmasendlat-vb.1=$sys\"\n"), "{a}");
    assert!(a.contains("\n    timeout 120 ib_send_lat -d qpip0 -R -F -p 18547 -s 64 -n 2000 198.18.0.102 > /tmp/pt.out"), "{a}");
    assert!(!a.contains("@syscalls.rdmasendlat-vb.2"), "{a}");
    // qpip0's runs need the netdevs (rdma_cm routes by them); both guests load qpip_ib
    // after siw and rxe.
    assert!(
        a.contains("[ -n \"$NETDEV\" ] || fail \"perftest on qpip0 needs the qpip netdevs up"),
        "{a}"
    );
    for s in [&a, &b] {
        let rxe = s.find("lab-rxe > /tmp/rxe").expect("lab-rxe");
        let ib = s.find("lab-qpip-ib > /tmp/qpip-ib").expect("lab-qpip-ib");
        assert!(rxe < ib, "{s}");
    }
    // A stalled run ends on both sides: guest a says so, guest b stops its server.
    assert!(a.contains("touch /lab/pt-stalled.rdmabw-sk.2;"), "{a}");
    assert!(a.contains("@note=rxe's ib_write_bw failed"), "{a}");
    assert!(b.contains("until [ -e /lab/pt-stalled.$s ]"), "{b}");
    // Reads: one at a time and back to back, 16 outstanding on both.
    assert_eq!(
        serves[7].trim(),
        "perftest_serve rdmareadlat-sk.1 18522 tcp6 ib_read_lat -R -F --ipv6-addr -p 18522 -s 64 -n 2000"
    );
    assert_eq!(
        serves[47].trim(),
        "perftest_serve rdmareadbw-rx.3 18562 tcp6 ib_read_bw -d rxe0 -x $RXE_GID -F --ipv6-addr -p 18562 -s 65536 -n 256 -t 64 -o 16"
    );
    assert!(a.contains(
        "perf rdmareadlat-qp.2 - fd51:5050::1:2 --port 5203 --rdma read --depth 64 --test latency --sizes 64 --iters 2000\n"
    ), "{a}");
    assert!(a.contains(
        "perf rdmareadbw-qp.1 - fd51:5050::1:2 --port 5203 --rdma read --depth 64 --test bandwidth --sizes 65536 --bytes 16777216\n"
    ), "{a}");
    assert!(a.contains("echo \"@perftest.rdmalat-sk.3=$line\""), "{a}");
    // Neither the demo nor the pass in the other layout has any of it.
    for p in [Plan::demo(), plan.layout_pass(crate::QpipdLayout::PerGuest)] {
        assert!(!p.steps().iter().any(|s| s.id.starts_with("rdma")));
        for s in [scripts::guest_a(&p), scripts::guest_b(&p)] {
            assert!(!s.contains("lab-siw") && !s.contains("lab-rxe") && !s.contains("lab-qpip-ib"));
        }
    }
}

#[test]
fn the_rdma_rows_run_alone_with_the_netdevs_they_need() {
    let plan = Plan::bench().rdma_only();
    let steps = plan.steps();
    // Ready and the netdevs, then per round the six programs on qpip0, siw and rxe and the
    // four of qpip's own library: nothing else.
    assert_eq!(steps[0].action, Action::Ready);
    assert_eq!(steps[1].action, Action::NetdevUp);
    let m = measures(&plan);
    assert_eq!(steps.len(), 2 + m.len());
    assert!(m.iter().all(|x| x.1.is_rdma()));
    assert_eq!(m.len(), 3 * (6 * 3 + 4));
    assert_eq!(
        m.iter().filter(|x| x.2 == Net::Qp).count(),
        3 * 4,
        "qpip-perf has no Sends"
    );
    for s in [scripts::guest_a(&plan), scripts::guest_b(&plan)] {
        crate::demo::assert_valid_shell(&s);
        assert!(s.contains("lab-qpip-ib"));
    }
    // The counts are the bench's.
    let a = scripts::guest_a(&plan);
    assert!(
        a.contains("ib_write_lat -d qpip0 -R -F -p 18515 -s 64 -n 2000 198.18.0.102"),
        "{a}"
    );
}
