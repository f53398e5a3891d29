//! Lab network tests: several guests at once on the lab bridge, the lab host's side in the
//! namespace, and nothing left behind afterwards.
//!
//! Each test boots guests (seconds each under TCG), so they are ignored by a plain
//! `cargo test`; `./qpip test` runs them with `-- --ignored`. They need root (namespaces,
//! TAPs) and say so when skipped. Every test uses a namespace name of its own, so they
//! run in parallel with each other and with a user's `./qpip vm`.

mod common;

use common::{needs_root, Report};
use qpip_lab::netns::{self, LabNet};
use qpip_lab::{unique_netns, GuestSpec, LabOutcome, LabSpec, Network, QpipdLayout};
use std::net::{Ipv6Addr, SocketAddrV6, UdpSocket};
use std::process::Command;
use std::time::Duration;

/// The shell helpers of this file's guest scripts (after common's).
///  try KEY CMD...    runs CMD, reports KEY=ok or KEY=failed(STATUS) with its output
const HELPERS: &str = r#"
try() {
    k=$1; shift
    if out=$("$@" 2>&1); then kv "$k" ok; else kv "$k" "failed($?): $(echo "$out" | tr '\n' ' ')"; fi
}
"#;

fn guest(name: &str, script: &str) -> GuestSpec {
    // Two guests share two CPUs with whatever else runs: generous.
    let mut g = common::lab_guest(
        name,
        common::script(HELPERS, script),
        Duration::from_secs(300),
    );
    g.vm.memory_mib = 384;
    g
}

/// Asserts that a finished lab left nothing behind: no namespace, none of its interfaces
/// in this namespace, none of its processes.
fn assert_nothing_left<R>(out: &LabOutcome<R>) {
    let ns = out.netns.as_deref().expect("the lab had a network");
    assert!(
        !netns::ns_path(ns).exists(),
        "namespace {ns} is still there"
    );
    let list = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let list = String::from_utf8_lossy(&list.stdout);
    assert!(
        !list.split_whitespace().any(|w| w == ns),
        "ip netns list still shows {ns}:\n{list}"
    );
    assert!(!out.links.is_empty(), "the lab reported no interfaces");
    for link in &out.links {
        let st = Command::new("ip")
            .args(["link", "show", "dev", link])
            .output()
            .unwrap();
        assert!(
            !st.status.success(),
            "interface {link} exists outside the namespace after the lab:\n{}",
            String::from_utf8_lossy(&st.stdout)
        );
    }
    assert!(!out.pids.is_empty(), "the lab reported no processes");
    for pid in &out.pids {
        // A pid can be reused, but not by one of ours: the lab reaped them all.
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        assert!(
            !cmdline.contains("qpipd") && !cmdline.contains("qemu-system"),
            "process {pid} of the lab is still running: {cmdline}"
        );
    }
}

/// What the host side saw while the guests were up.
#[derive(Debug, Default)]
struct HostView {
    /// (address, ping output or error) for each address pinged from the namespace.
    pings: Vec<(String, Result<String, String>)>,
    /// `ip -br link` in the namespace while the guests ran.
    links: String,
    udp_error: Option<String>,
}

const UDP_PORT: u16 = 7777;
const UDP_TEXT: &str = "hello from the lab host";

/// Two guests on the lab network. From the namespace: every guest's qpip device and
/// virtio-net address answer ping (the device answers ICMPv6 echo itself). Guest to guest:
/// each pings the other's virtio-net and qpip device addresses with busybox ping. A UDP
/// datagram from the lab host reaches a program in guest b through its virtio-net NIC.
/// Afterwards nothing of the lab is left.
#[test]
#[ignore = "boots VMs: run by ./qpip test"]
fn guests_and_host_reach_each_other_on_the_lab_network() {
    needs_root!();
    // Each guest announces itself in /lab, waits for the other, pings it on both
    // addresses, then stays up until the host side is done with it.
    let script = r#"
me=$QPIP_GUEST_NAME; other=a; on=1
[ "$me" = a ] && { other=b; on=2; }
kv env.guest "$QPIP_GUEST $QPIP_GUEST_NAME $QPIP_GUESTS"
kv env.addrs "$QPIP_HOST_ADDR $QPIP_DEV_ADDR $QPIP_NET_ADDR"
if [ "$me" = b ]; then
    # Receives one datagram from the lab host on its virtio-net address; /lab/udp-bound
    # tells the host the socket is bound.
    (lab-udp recv -r /lab/udp-bound 7777 1 >/tmp/udp 2>&1; mv /tmp/udp /lab/udp-got) &
fi
touch "/lab/up-$me"
lab-wait "up-$other" 120; kv wait.other $?
# A wait that times out after 2 s (20 turns): the processes it started, from the kernel's
# last PID before and after.
p0=$(cut -d' ' -f5 /proc/loadavg)
lab-wait never-made 2; kv wait.timeout $?
p1=$(cut -d' ' -f5 /proc/loadavg)
kv wait.processes $((p1 - p0))
# An echo each, with a long wait: answered even if the other guest stalls for a while
# under load (the lab's neighbour discovery outlasts such stalls, see ci/src/netns.rs).
# Up to three: an echo can still be lost for good (one sent while the guests' neighbour
# entries were not settled once went unanswered for the whole 60 s).
pings() { ping -c 1 -W 30 "$1" || ping -c 1 -W 30 "$1" || ping -c 1 -W 30 "$1"; }
try ping.virtio pings "fd51:5050::2:$on"
try ping.device pings "fd51:5050::1:$on"
# IPv4 beside IPv6: the other guest's NIC and device (which answers ARP and echo itself),
# and the lab host.
kv env.addrs4 "$QPIP_HOST_ADDR4 $QPIP_DEV_ADDR4 $QPIP_NET_ADDR4"
try ping4.virtio pings "198.18.0.$((200 + on))"
try ping4.device pings "198.18.0.$((100 + on))"
try ping4.host pings "$QPIP_HOST_ADDR4"
# The far host, on a subnet behind the lab host: through the gateway, both families.
try ping.far pings "$QPIP_FAR_ADDR"
try ping4.far pings "$QPIP_FAR_ADDR4"
lab-wait host-done 200; kv wait.host $?
if [ "$me" = b ]; then kv udp "$(cat /lab/udp-got 2>/dev/null)"; fi
"#;
    let spec = LabSpec {
        guests: vec![guest("a", script), guest("b", script)],
        network: Network::Lab(unique_netns("qpip-test")),
        layout: QpipdLayout::Adapter,
    };
    let out = common::lab(&spec, |host| {
        let mut view = HostView {
            links: host.sh("ip -br link").unwrap_or_else(|e| e),
            ..HostView::default()
        };
        for n in 1..=2 {
            for addr in [netns::device_addr(n), netns::virtio_addr(n)] {
                let r = host.sh(&format!("ping -6 -c 1 -W 60 {addr}"));
                view.pings.push((addr, r));
            }
            for addr in [netns::device_addr4(n), netns::virtio_addr4(n)] {
                let r = host.sh(&format!("ping -4 -c 1 -W 60 {addr}"));
                view.pings.push((addr, r));
            }
        }
        if let Err(e) = host.wait_for("udp-bound", Duration::from_secs(120)) {
            view.udp_error = Some(e);
            return view;
        }
        // One datagram: nothing on the bridge loses it (the namespace's neighbour entry
        // for guest b is fresh from the ping above).
        let dest = SocketAddrV6::new(
            netns::virtio_addr(2).parse::<Ipv6Addr>().unwrap(),
            UDP_PORT,
            0,
            0,
        );
        let sent = host.in_netns(|| {
            let sock = UdpSocket::bind("[::]:0")?;
            sock.send_to(UDP_TEXT.as_bytes(), dest)
        });
        match sent {
            Ok(Ok(_)) => {}
            Ok(Err(e)) | Err(e) => {
                view.udp_error = Some(format!("cannot send from the namespace: {e}"));
                return view;
            }
        }
        if let Err(e) = host.wait_for("udp-got", Duration::from_secs(120)) {
            view.udp_error = Some(format!("guest b did not receive the datagram: {e}"));
        }
        view
    });
    let view = &out.host;

    for (name, n) in [("a", 1), ("b", 2)] {
        let g = out.guest(name);
        let rep = Report::new(g);
        assert_eq!(g.status, 0, "guest {name} failed\n{}", rep.context());
        assert_eq!(
            rep.get("env.guest"),
            format!("{n} {name} 2"),
            "{}",
            rep.context()
        );
        assert_eq!(
            rep.get("env.addrs"),
            format!(
                "{} {} {}",
                netns::HOST_ADDR,
                netns::device_addr(n),
                netns::virtio_addr(n)
            ),
            "{}",
            rep.context()
        );
        for key in ["wait.other", "wait.host"] {
            assert_eq!(rep.get(key), "0", "guest {name}: {key}\n{}", rep.context());
        }
        assert_eq!(rep.get("wait.timeout"), "1", "{}", rep.context());
        // lab-wait itself, its mount check and the `cut` after it, not a `sleep` per turn
        // (a waiting guest must stay idle: it shares the host's CPUs with the measured one).
        let started: u32 = rep.get("wait.processes").parse().unwrap_or(u32::MAX);
        assert!(
            started < 10,
            "guest {name}: a 2 s lab-wait started {started} processes\n{}",
            rep.context()
        );
        assert_eq!(
            rep.get("env.addrs4"),
            format!(
                "{} {} {}",
                netns::HOST_ADDR4,
                netns::device_addr4(n),
                netns::virtio_addr4(n)
            ),
            "{}",
            rep.context()
        );
        for key in [
            "ping.virtio",
            "ping.device",
            "ping4.virtio",
            "ping4.device",
            "ping4.host",
            "ping.far",
            "ping4.far",
        ] {
            assert_eq!(
                rep.get(key),
                "ok",
                "guest {name} pinging the other guest's {key}\n{}",
                rep.context()
            );
        }
    }

    assert_eq!(view.pings.len(), 8, "{view:?}");
    for (addr, r) in &view.pings {
        match r {
            Ok(text) => assert!(text.contains("1 received"), "ping {addr}: {text}"),
            Err(e) => panic!("ping {addr} from the lab namespace failed: {e}"),
        }
    }
    // The adapter's uplink carries both devices; each guest's virtio-net has its TAP.
    let taps = [netns::ADAPTER_TAP.to_string()]
        .into_iter()
        .chain((1..=2).map(netns::virtio_tap));
    for tap in taps {
        assert!(
            view.links
                .lines()
                .any(|l| l.starts_with(&tap) && l.contains("UP")),
            "TAP {tap} not up in the namespace while the guests ran:\n{}",
            view.links
        );
    }
    for n in 1..=2 {
        let tap = netns::device_tap(n);
        assert!(
            !view
                .links
                .lines()
                .any(|l| l.starts_with(&format!("{tap} ")) || l.starts_with(&format!("{tap}@"))),
            "TAP {tap} of a per-guest qpipd exists in the adapter layout:\n{}",
            view.links
        );
    }
    // One adapter served both devices: a function each, each saw its QEMU go, and the lab
    // stopped it with SIGTERM at the end (run_lab checks how it exited).
    let log = std::fs::read_to_string(out.dir.join("qpipd-adapter.log")).unwrap_or_default();
    for f in ["f0", "f1"] {
        assert!(
            log.contains(&format!("function {f}: client 1 gone")),
            "the adapter's log does not show function {f}'s QEMU going:\n{log}"
        );
    }
    assert!(log.contains("signal 15: stopping"), "{log}");

    assert_eq!(view.udp_error, None, "UDP from the lab host to guest b");
    let b = out.guest("b");
    let got = Report::new(b).get("udp");
    assert!(
        got.starts_with(&format!("from {} port ", netns::HOST_ADDR))
            && got.ends_with(&format!("len {}: {UDP_TEXT}", UDP_TEXT.len())),
        "guest b received {got:?}\n{}",
        Report::new(b).context()
    );

    assert_nothing_left(&out);
}

/// The QEMU process of guest `name` in namespace `ns` (QEMU runs inside the lab's
/// namespace; its kernel command line names the guest).
fn qemu_pid(ns: &str, name: &str) -> Option<u32> {
    let mark = format!("qpip_lab.name={name} ");
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if !(cmdline.contains("qemu-system") && cmdline.contains(&mark)) {
            continue;
        }
        let here = Command::new("ip")
            .args(["netns", "identify", &pid.to_string()])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim() == ns)
            .unwrap_or(false);
        if here {
            return Some(pid);
        }
    }
    None
}

/// Guest a's QEMU is stopped (SIGSTOP) for 8 s, as a host under load can starve a TCG
/// guest. Meanwhile guest b and the lab host each send guest a's virtio-net address one
/// echo request: both are answered once guest a runs again. Neighbour discovery with
/// Linux's defaults (3 solicitations 1 s apart) gives up during the stall and drops the
/// request, so this fails without the lab's longer resolution.
#[test]
#[ignore = "boots VMs: run by ./qpip test"]
fn an_echo_to_a_stalled_guest_is_answered_once_it_runs_again() {
    needs_root!();
    let a = "lab-wait host-done 300; kv a.done 0";
    let b = r#"
touch /lab/b-up
lab-wait a-stopped 200; kv wait $?
up() { cut -d' ' -f1 /proc/uptime; }
t0=$(up)
try ping.a ping -c 1 -W 60 fd51:5050::2:1
kv ping.secs "$t0 $(up)"
lab-wait host-done 200
"#;
    let ns = unique_netns("qpip-test");
    let spec = LabSpec {
        guests: vec![guest("a", a), guest("b", b)],
        network: Network::Lab(ns.clone()),
        layout: QpipdLayout::Adapter,
    };
    const STALL: Duration = Duration::from_secs(8);
    let out = common::lab(&spec, |host| -> Result<String, String> {
        host.wait_for("b-up", Duration::from_secs(200))?;
        let pid = qemu_pid(&ns, "a").ok_or("no QEMU process of guest a in the namespace")?;
        // SAFETY: kill on a process of this lab, found by its command line and namespace.
        unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
        let ping = host
            .command("ping")
            .args(["-6", "-c", "1", "-W", "60", &netns::virtio_addr(1)])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn();
        let signalled = host.signal("a-stopped");
        std::thread::sleep(STALL);
        // SAFETY: as above.
        unsafe { libc::kill(pid as i32, libc::SIGCONT) };
        signalled.map_err(|e| e.to_string())?;
        let out = ping
            .and_then(|c| c.wait_with_output())
            .map_err(|e| format!("ping from the namespace: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        if out.status.success() {
            Ok(text)
        } else {
            Err(format!(
                "ping from the namespace to the stalled guest a: {text}"
            ))
        }
    });
    let rep = Report::new(out.guest("b"));
    assert_eq!(out.guest("b").status, 0, "{}", rep.context());
    assert_eq!(rep.get("wait"), "0", "{}", rep.context());
    assert_eq!(
        rep.get("ping.a"),
        "ok",
        "guest b's echo to the stalled guest a\n{}",
        rep.context()
    );
    match &out.host {
        Ok(text) => assert!(text.contains("1 received"), "{text}"),
        Err(e) => panic!("{e}"),
    }
    assert_nothing_left(&out);
}

/// The command line: `qpip-lab vm --guests 2` runs the command in both guests, with the
/// guest's number in QPIP_GUEST, each output line prefixed with the guest's name; it exits
/// with the first non-zero status in guest order. While it runs, `ip netns exec NAME ping`
/// reaches the guests. It removes a stale namespace of its name (one nobody holds: a killed
/// lab's) with a message, and a second lab cannot take a namespace in use.
#[test]
#[ignore = "boots VMs: run by ./qpip test"]
fn command_line_runs_several_guests_in_the_lab_namespace() {
    needs_root!();
    let ns = unique_netns("qpip-test");
    // What a lab killed with SIGKILL leaves: the namespace, unlocked, nobody in it.
    let made = Command::new("ip")
        .args(["netns", "add", &ns])
        .status()
        .unwrap();
    assert!(made.success());

    // Each guest says who it is, then waits until it has answered a ping to its virtio-net
    // address (the kernel's ICMPv6 counter; then a second for the answer to arrive), and
    // exits with its number + 10.
    let script = r#"echo "I am $QPIP_GUEST_NAME, guest $QPIP_GUEST of $QPIP_GUESTS";
replies() { awk '$1 == "Icmp6OutEchoReplies" { print $2 }' /proc/net/snmp6; }
i=0; while [ "$(replies)" = 0 ]; do
  i=$((i+1)); [ $i -lt 600 ] || { echo "nobody pinged me"; exit 99; }; sleep 0.2;
done; echo pinged; sleep 1; exit $((QPIP_GUEST + 10))"#;
    let child = Command::new(env!("CARGO_BIN_EXE_qpip-lab"))
        .args(["vm", "--guests", "2", "--devices", "1", "--memory", "384"])
        .args(["--timeout", "300", "--netns", &ns, "--", script])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run qpip-lab");

    // The lab is up once it holds the lock on its namespace (flock on /run/netns/NAME);
    // then a second lab cannot have the namespace.
    let mut locked = false;
    for _ in 0..600 {
        if let Ok(f) = std::fs::File::open(netns::ns_path(&ns)) {
            use std::os::fd::AsRawFd;
            // SAFETY: flock on a descriptor we own; released at once if we got it.
            let free = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
            if !free {
                locked = true;
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let second = LabNet::create(&ns).map(|_| ()).map_err(|e| e.to_string());
    let ping = |addr: &str| {
        Command::new("ip")
            .args([
                "netns", "exec", &ns, "ping", "-6", "-c", "1", "-W", "5", addr,
            ])
            .output()
            .map(|o| {
                (
                    o.status.success(),
                    String::from_utf8_lossy(&o.stdout).into_owned()
                        + &String::from_utf8_lossy(&o.stderr),
                )
            })
            .unwrap_or_else(|e| (false, e.to_string()))
    };
    // Each guest's device answers as soon as its qpipd runs; its virtio-net address once
    // the guest has booted, which also lets the guest's command finish.
    let mut answered = Vec::new();
    for n in 1..=2 {
        for addr in [netns::device_addr(n), netns::virtio_addr(n)] {
            let mut last = (false, String::new());
            for _ in 0..60 {
                last = ping(&addr);
                if last.0 {
                    break;
                }
                std::thread::sleep(Duration::from_millis(500));
            }
            if !last.0 {
                let state = Command::new("ip")
                    .args([
                        "netns",
                        "exec",
                        &ns,
                        "sh",
                        "-c",
                        "ip -br link; ip -6 neigh; ip -6 addr",
                    ])
                    .output()
                    .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                    .unwrap_or_default();
                last.1.push_str(&format!("\nnamespace state:\n{state}"));
            }
            answered.push((addr, last));
        }
    }
    let out = child.wait_with_output().expect("wait for qpip-lab");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let ctx = format!("stdout:\n{stdout}\nstderr:\n{stderr}");

    assert!(locked, "the lab never locked its namespace\n{ctx}");
    match &second {
        Err(e) => assert!(e.contains("in use by another running lab"), "{e}\n{ctx}"),
        Ok(()) => panic!("a second lab could take the namespace of a running one\n{ctx}"),
    }
    for (addr, (ok, text)) in &answered {
        assert!(
            ok,
            "ip netns exec {ns} ping {addr} got no answer: {text}\n{ctx}"
        );
    }
    assert_eq!(out.status.code(), Some(11), "{ctx}");
    for (name, n) in [("a", 1), ("b", 2)] {
        for line in [
            format!("[{name}] I am {name}, guest {n} of 2"),
            format!("[{name}] pinged"),
        ] {
            assert!(stdout.lines().any(|l| l == line), "no line {line:?}\n{ctx}");
        }
    }
    assert!(
        stderr.contains(&format!(
            "removing network namespace {ns}, left behind by a lab run that was killed"
        )),
        "no message about the stale namespace\n{ctx}"
    );
    assert!(
        !netns::ns_path(&ns).exists(),
        "namespace {ns} left behind\n{ctx}"
    );
}
