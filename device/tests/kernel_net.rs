//! The device's network against the Linux kernel: a network namespace made for the test,
//! a TAP in it with the lab's host address (fd51:5050::1/64, and 198.18.0.1/24 for IPv4),
//! the stack on the TAP from this process, and in the namespace `ping`, kernel UDP
//! sockets, nftables random loss, and `tshark` reading the device's capture.
//!
//! Needs root (CI runs as root); without it the tests say so and pass. Host packages:
//! iproute2 (`ip`), iputils-ping, nftables, tshark — a missing one skips its part with a
//! message naming the package.

#[path = "support/checked_datagrams.rs"]
mod checked_datagrams;
#[path = "support/net_oracle.rs"]
mod net_oracle;
#[path = "support/netns.rs"]
mod netns;

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use checked_datagrams::{datagram, verify, HEADER};
use netns::{have, root_and_tools, Netns};
use qpip_device::backend::{link::Link, tap::Tap, Backend, ImpairSpec};
use qpip_device::net::{Delivery, Interface, NetConfig, Stack};

const DEV_MAC: [u8; 6] = [0x02, 0x51, 0x50, 0x00, 0x01, 0x01];
const DEV: Ipv6Addr = Ipv6Addr::new(0xfd51, 0x5050, 0, 0, 0, 0, 1, 1);
const HOST: Ipv6Addr = Ipv6Addr::new(0xfd51, 0x5050, 0, 0, 0, 0, 0, 1);
const DEV4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const HOST4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const TAP: &str = "qtap0";
/// Device ports: 7 echoes datagrams back, 9 hands them to the test; others are closed.
const ECHO: u16 = 7;
const SINK: u16 = 9;

/// Whether this machine can run the tests; says why not.
fn can_run() -> bool {
    root_and_tools("kernel interop tests")
}

enum Cmd {
    Send {
        dst: SocketAddr,
        sport: u16,
        payload: Vec<u8>,
    },
}

/// The device's network running on its own thread, the way the engine will run it:
/// poll(2) on the backend's fd with the stack's next deadline as the timeout.
struct Device {
    stop: Arc<AtomicBool>,
    cmds: Sender<Cmd>,
    sink: Receiver<(SocketAddr, Vec<u8>)>,
    thread: Option<JoinHandle<Interface>>,
}

impl Device {
    fn start(backend: Box<dyn Backend>) -> Device {
        let mut c = NetConfig::new(DEV_MAC);
        c.addrs.push((DEV, 64));
        c.addrs.push((DEV4.to_ipv6_mapped(), 120));
        let stop = Arc::new(AtomicBool::new(false));
        let (cmds, cmd_rx) = mpsc::channel::<Cmd>();
        let (sink_tx, sink) = mpsc::channel();
        let mut iface = Interface::new(Stack::new(&c, Instant::now()), backend);
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut echo = Vec::new();
            while !stopping.load(Ordering::Relaxed) {
                let now = Instant::now();
                iface.poll_rx(now, 64, |d| match d.dport {
                    ECHO => {
                        echo.push((d.src, d.sport, d.payload().to_vec()));
                        Delivery::Delivered
                    }
                    SINK => {
                        let _ = sink_tx.send((socket_addr(d.src, d.sport), d.payload().to_vec()));
                        Delivery::Delivered
                    }
                    _ => Delivery::NoPort,
                });
                for (src, sport, p) in echo.drain(..) {
                    iface
                        .stack
                        .send_udp(None, ECHO, src, sport, &p, now)
                        .expect("echo");
                }
                while let Ok(Cmd::Send {
                    dst,
                    sport,
                    payload,
                }) = cmd_rx.try_recv()
                {
                    let ip = match dst.ip() {
                        std::net::IpAddr::V6(a) => a,
                        std::net::IpAddr::V4(a) => a.to_ipv6_mapped(),
                    };
                    iface
                        .stack
                        .send_udp(None, sport, ip, dst.port(), &payload, now)
                        .expect("send");
                }
                iface.flush();
                iface.poll_timers(now);
                let wait = iface
                    .next_deadline()
                    .map_or(Duration::from_millis(5), |d| {
                        d.saturating_duration_since(Instant::now())
                    })
                    .min(Duration::from_millis(5));
                let mut p = libc::pollfd {
                    fd: iface.fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd.
                unsafe { libc::poll(&mut p, 1, wait.as_millis() as i32) };
            }
            iface
        });
        Device {
            stop,
            cmds,
            sink,
            thread: Some(thread),
        }
    }

    fn send(&self, dst: SocketAddr, sport: u16, payload: Vec<u8>) {
        self.cmds
            .send(Cmd::Send {
                dst,
                sport,
                payload,
            })
            .unwrap();
    }

    /// Stops the thread; the interface comes back (its capture is complete once dropped).
    fn stop(mut self) -> Interface {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().expect("device thread")
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A kernel socket address for an address the stack gives (IPv4 ones mapped).
fn socket_addr(a: Ipv6Addr, port: u16) -> SocketAddr {
    match a.to_ipv4_mapped() {
        Some(v4) => SocketAddr::new(v4.into(), port),
        None => SocketAddr::new(a.into(), port),
    }
}

/// Sends from a kernel socket; a datagram the namespace's nftables rules drop on output
/// is refused with EPERM, which is the loss we asked for.
fn host_send(host: &UdpSocket, d: &[u8], to: SocketAddr) {
    match host.send_to(d, to) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {}
        Err(e) => panic!("send to {to}: {e}"),
    }
}

/// Calls `send` with datagram `i` of `sizes[i]` body bytes, for each `i` in turn, resting
/// `pause` after every `every` of them so that no socket buffer on the way overflows.
fn paced(sizes: &[usize], every: usize, pause: Duration, mut send: impl FnMut(Vec<u8>)) {
    for (i, &len) in sizes.iter().enumerate() {
        send(datagram(i as u32, len));
        if i % every == every - 1 {
            std::thread::sleep(pause);
        }
    }
}

/// Sends `sizes` (see [`paced`]) from the kernel socket `host` to the device's sink port;
/// returns what the sink received until it stayed quiet for 2 s: the sender, and what
/// [`verify`] says of the datagram.
fn host_to_device(
    dev: &Device,
    host: &UdpSocket,
    sizes: &[usize],
    every: usize,
    pause: Duration,
) -> Vec<(SocketAddr, (u32, bool))> {
    let sink = SocketAddr::new(DEV.into(), SINK);
    paced(sizes, every, pause, |d| host_send(host, &d, sink));
    std::iter::from_fn(|| dev.sink.recv_timeout(Duration::from_secs(2)).ok())
        .map(|(from, d)| (from, verify(&d)))
        .collect()
}

/// Sends `sizes` (see [`paced`]) from the device to the kernel socket `host`; returns
/// what [`verify`] says of each datagram the socket read until it stayed quiet for 2 s
/// (duplicates included).
fn device_to_host(
    dev: &Device,
    host: &UdpSocket,
    sizes: &[usize],
    every: usize,
    pause: Duration,
) -> Vec<(u32, bool)> {
    let to = SocketAddr::new(HOST.into(), host.local_addr().unwrap().port());
    host.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let reader = std::thread::spawn({
        let host = host.try_clone().unwrap();
        move || {
            let mut got = Vec::new();
            let mut buf = vec![0u8; 70000];
            while let Ok(n) = host.recv(&mut buf) {
                got.push(verify(&buf[..n]));
            }
            got
        }
    });
    paced(sizes, every, pause, |d| dev.send(to, 4242, d));
    reader.join().unwrap()
}

/// Prints the stack's non-zero counters, for the log of a run.
fn print_counters(iface: &Interface) {
    let stats = iface.stack.stats();
    let moved: Vec<_> = stats.iter().filter(|(_, v)| *v > 0).collect();
    println!("device counters: {moved:?}");
}

fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("qpip-kernel-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The namespace with a TAP the host side configured (`ip tuntap add`), opened by us.
fn setup_existing_tap(ns: &Netns) -> Tap {
    ns.add_tap(TAP, "fd51:5050::1");
    ns.enter(|| Tap::open(TAP)).expect("open the TAP")
}

/// Pings `to` until it answers once (at most 10 tries of 2 s): what follows then
/// counts every answer, not the time it took to be reachable.
fn wait_for_answer(ns: &Netns, to: &str) {
    for _ in 0..10 {
        match ping_addr(ns, to, 1, 56) {
            Some((1, _)) | None => return,
            _ => {}
        }
    }
}

fn ping(ns: &Netns, count: u32, size: usize) -> Option<(u32, String)> {
    ping_addr(ns, &DEV.to_string(), count, size)
}

fn ping_addr(ns: &Netns, to: &str, count: u32, size: usize) -> Option<(u32, String)> {
    if !have("ping") {
        println!("SKIPPED ping: not installed (install iputils-ping)");
        return None;
    }
    let out = ns.exec(&[
        "ping",
        "-n",
        "-c",
        &count.to_string(),
        "-i",
        "0.2",
        "-W",
        "2",
        "-s",
        &size.to_string(),
        to,
    ]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let received = text
        .split(',')
        .find_map(|p| {
            p.trim()
                .strip_suffix(" received")
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0);
    Some((received, text))
}

/// tshark over the capture: no malformed packet, no error (bad checksums included).
fn tshark_clean(pcap: &Path) {
    let Some(capture) = qpip_testkit::Tshark::over(pcap) else {
        return;
    };
    let plain = netns::tshark_plain_payloads();
    let run_tshark = |extra: &[&str]| {
        let checksums = ["-o", "udp.check_checksum:TRUE"];
        capture.read(&[&plain[..], &checksums, extra].concat())
    };
    let all = run_tshark(&[]);
    assert!(
        all.lines().count() > 10,
        "capture has {} packets",
        all.lines().count()
    );
    assert!(
        all.contains("ICMPv6") && all.contains("UDP"),
        "capture:\n{all}"
    );
    let bad = run_tshark(&["-Y", "_ws.malformed || _ws.expert.severity == error"]);
    assert!(
        bad.trim().is_empty(),
        "tshark finds problems in the capture:\n{bad}"
    );
    // Every frame passes the independent parser too.
    let mut r = pcap_file::pcap::PcapReader::new(std::fs::File::open(pcap).unwrap()).unwrap();
    while let Some(p) = r.next_packet() {
        let p = p.unwrap();
        // The host's frames include MLD and router solicitations the oracle does not
        // model; check ours.
        if p.data[6..12] == DEV_MAC {
            net_oracle::check(&p.data);
        }
    }
}

fn udp_echo_round_trips(host: &UdpSocket, sizes: &[usize]) {
    udp_echo_round_trips_with(host, SocketAddr::new(DEV.into(), ECHO), sizes)
}

fn udp_echo_round_trips_with(host: &UdpSocket, echo: SocketAddr, sizes: &[usize]) {
    host.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut buf = vec![0u8; 70000];
    for (i, &len) in sizes.iter().enumerate() {
        let d = datagram(i as u32, len);
        host.send_to(&d, echo).unwrap();
        let (n, from) = host
            .recv_from(&mut buf)
            .unwrap_or_else(|e| panic!("echo of {} bytes: {e}", d.len()));
        assert_eq!(from, echo);
        assert_eq!(&buf[..n], &d[..], "echo of {} bytes", d.len());
    }
}

/// The device sends a 20000-byte datagram from `dev_addr` (fragmented on the way) to
/// `host`, bound at `host_addr`, which receives it whole.
fn device_sends_big_datagram(dev: &Device, host: &UdpSocket, host_addr: IpAddr, dev_addr: IpAddr) {
    let port = host.local_addr().unwrap().port();
    let big = datagram(99, 20000);
    dev.send(SocketAddr::new(host_addr, port), 4242, big.clone());
    let mut buf = vec![0u8; 70000];
    let (n, from) = host
        .recv_from(&mut buf)
        .expect("20000 bytes from the device");
    assert_eq!(
        (&buf[..n], from),
        (&big[..], SocketAddr::new(dev_addr, 4242))
    );
}

/// A closed port of the device (at `dev_addr`) answers "port unreachable", which a
/// kernel socket bound at `bind` and connected to it reports.
fn closed_port_refuses(ns: &Netns, bind: &str, dev_addr: IpAddr) {
    let closed = ns.enter(|| UdpSocket::bind(bind)).unwrap();
    closed.connect(SocketAddr::new(dev_addr, 5)).unwrap();
    closed
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    closed.send(b"anyone?").unwrap();
    let mut buf = [0u8; 64];
    let e = closed.recv(&mut buf).expect_err("refused");
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{e}");
}

#[test]
fn kernel_ping_udp_port_unreachable_and_nftables_loss() {
    if !can_run() {
        return;
    }
    let ns = Netns::new("qpipt");
    let tap = setup_existing_tap(&ns);
    let dir = tempdir("plain");
    let pcap = dir.join("device.pcap");
    let dev = Device::start(Box::new(Link::new(tap, Some(&pcap), None).unwrap()));

    // ping -6 to the device, small and fragmented: once it answers at all (the host's
    // neighbour discovery and the device's start take a moment on a busy host), every
    // ping is answered.
    wait_for_answer(&ns, &DEV.to_string());
    if let Some((got, text)) = ping(&ns, 3, 56) {
        assert_eq!(got, 3, "ping:\n{text}");
        let (got, text) = ping(&ns, 2, 3000).unwrap();
        assert_eq!(got, 2, "ping -s 3000:\n{text}");
    }

    // Kernel UDP socket ⇄ device, up to the largest datagram, fragmented both ways.
    let host = ns.enter(|| UdpSocket::bind("[fd51:5050::1]:0")).unwrap();
    udp_echo_round_trips(&host, &[0, 1, 100, 1440, 1441, 5000, 20000, 65507 - HEADER]);
    device_sends_big_datagram(&dev, &host, HOST.into(), DEV.into());

    // A closed port answers "port unreachable", which a connected kernel socket reports.
    closed_port_refuses(&ns, "[fd51:5050::1]:0", DEV.into());

    // Random loss from the real kernel (nftables), both directions, NDP spared: lost
    // datagrams are lost, and nothing damaged arrives.
    if !have("nft") {
        println!("SKIPPED nftables loss: nft not installed (install nftables)");
    } else {
        let rules = "table inet qpiptest {
            chain lossy_in {
                type filter hook input priority 0; policy accept;
                meta l4proto != ipv6-icmp numgen random mod 100 < 10 drop
            }
            chain lossy_out {
                type filter hook output priority 0; policy accept;
                meta l4proto != ipv6-icmp numgen random mod 100 < 10 drop
            }
        }\n";
        let mut nft = Command::new("ip")
            .args(["netns", "exec", &ns.name, "nft", "-f", "-"])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(nft.stdin.as_mut().unwrap(), rules.as_bytes()).unwrap();
        drop(nft.stdin.take());
        assert!(nft.wait().unwrap().success(), "nft rules");
        let n = 300u32;
        let sizes: Vec<usize> = (0..n)
            .map(|i| [10, 500, 1400, 3000, 6000][i as usize % 5])
            .collect();
        let pause = Duration::from_millis(2);
        let from_host = SocketAddr::new(HOST.into(), host.local_addr().unwrap().port());
        let to_device = host_to_device(&dev, &host, &sizes, 10, pause);
        assert!(to_device.iter().all(|&(from, _)| from == from_host));
        let to_device = to_device.into_iter().map(|(_, verdict)| verdict).collect();
        for (way, got) in [
            ("host → device", to_device),
            (
                "device → host",
                device_to_host(&dev, &host, &sizes, 10, pause),
            ),
        ] {
            assert!(
                got.iter().all(|&(_, damaged)| !damaged),
                "{way}: nothing corrupts frames on this path"
            );
            let got: HashSet<u32> = got.iter().map(|&(seq, _)| seq).collect();
            println!(
                "nftables loss, {way}: {} of {n} datagrams arrived",
                got.len()
            );
            assert!(
                got.len() < n as usize,
                "{way}: 10% loss lost nothing: were the rules active?"
            );
            assert!(
                got.len() * 100 >= n as usize * 55,
                "{way}: {} of {n}",
                got.len()
            );
        }
        ns.exec(&["nft", "delete", "table", "inet", "qpiptest"]);
    }

    let iface = dev.stop();
    print_counters(&iface);
    assert!(
        iface
            .stack
            .stats()
            .dropped(qpip_device::net::DropReason::BadChecksum)
            == 0
    );
    drop(iface);
    tshark_clean(&pcap);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn kernel_udp_and_ping_through_the_device_impairment() {
    if !can_run() {
        return;
    }
    let ns = Netns::new("qpipt");
    // This time the device creates the TAP (it lives as long as the device holds it).
    ns.owns_link(TAP);
    let tap = ns.enter(|| Tap::open(TAP)).expect("create a TAP");
    ns.ip(&["addr", "add", "fd51:5050::1/64", "dev", TAP, "nodad"]);
    let dir = tempdir("impaired");
    let pcap = dir.join("device.pcap");
    let spec: ImpairSpec = "reorder=25,dup=2,corrupt=1,delay=2,jitter=1,seed=7"
        .parse()
        .unwrap();
    let dev = Device::start(Box::new(Link::new(tap, Some(&pcap), Some(&spec)).unwrap()));

    if let Some((got, text)) = ping(&ns, 5, 56) {
        assert!(got >= 3, "ping through the impairment:\n{text}");
    }
    let host = ns.enter(|| UdpSocket::bind("[fd51:5050::1]:0")).unwrap();
    let n = 200u32;
    let sizes: Vec<usize> = (0..n)
        .map(|i| [20, 700, 1440, 4000, 20000][i as usize % 5])
        .collect();
    let pause = Duration::from_millis(3);
    let to_device = host_to_device(&dev, &host, &sizes, 5, pause)
        .into_iter()
        .map(|(_, verdict)| verdict)
        .collect();
    for (way, got) in [
        ("host → device", to_device),
        (
            "device → host",
            device_to_host(&dev, &host, &sizes, 5, pause),
        ),
    ] {
        let distinct: HashSet<u32> = got.iter().map(|&(seq, _)| seq).collect();
        println!(
            "impaired, {way}: {} of {n} datagrams ({} with duplicates)",
            distinct.len(),
            got.len()
        );
        assert!(
            distinct.len() * 100 >= n as usize * 70,
            "{way}: {} of {n}",
            distinct.len()
        );
    }
    let iface = dev.stop();
    print_counters(&iface);
    drop(iface); // closes the TAP, which goes away
    tshark_clean(&pcap);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn kernel_ipv4_arp_ping_udp_and_port_unreachable() {
    if !can_run() {
        return;
    }
    let ns = Netns::new("qpipt4");
    let tap = setup_existing_tap(&ns);
    ns.ip(&["addr", "add", "198.18.0.1/24", "dev", TAP]);
    let dir = tempdir("ipv4");
    let pcap = dir.join("device.pcap");
    let dev = Device::start(Box::new(Link::new(tap, Some(&pcap), None).unwrap()));

    // The kernel resolves the device with ARP; ping small and fragmented (once it
    // answers at all).
    wait_for_answer(&ns, &DEV4.to_string());
    if let Some((got, text)) = ping_addr(&ns, &DEV4.to_string(), 3, 56) {
        assert_eq!(got, 3, "ping:\n{text}");
        let (got, text) = ping_addr(&ns, &DEV4.to_string(), 2, 3000).unwrap();
        assert_eq!(got, 2, "ping -s 3000:\n{text}");
    }
    let neigh =
        String::from_utf8_lossy(&ns.ip(&["neigh", "show", "198.18.0.2"]).stdout).to_string();
    assert!(
        neigh.contains("02:51:50:00:01:01"),
        "the kernel's ARP entry: {neigh}"
    );

    // Kernel UDP socket ⇄ device over IPv4, up to the largest IPv4 datagram, fragmented
    // both ways.
    let host = ns.enter(|| UdpSocket::bind("198.18.0.1:0")).unwrap();
    let echo = SocketAddr::new(DEV4.into(), ECHO);
    udp_echo_round_trips_with(
        &host,
        echo,
        &[0, 1, 100, 1460, 1472, 1473, 5000, 65507 - HEADER],
    );
    device_sends_big_datagram(&dev, &host, HOST4.into(), DEV4.into());
    // What the device received came from the kernel's IPv4 address.
    host.send_to(b"hello sink", SocketAddr::new(DEV4.into(), SINK))
        .unwrap();
    let (from, got) = dev.sink.recv_timeout(Duration::from_secs(3)).expect("sink");
    assert_eq!(
        (from, &got[..]),
        (
            SocketAddr::new(HOST4.into(), host.local_addr().unwrap().port()),
            &b"hello sink"[..]
        )
    );

    // A closed port answers ICMPv4 port unreachable, which a connected socket reports.
    closed_port_refuses(&ns, "198.18.0.1:0", DEV4.into());

    let iface = dev.stop();
    print_counters(&iface);
    let stats = iface.stack.stats();
    assert!(stats.arp_requests_rx + stats.arp_replies_rx > 0);
    assert_eq!(stats.dropped(qpip_device::net::DropReason::BadChecksum), 0);
    drop(iface);
    tshark_clean(&pcap);
    let _ = std::fs::remove_dir_all(&dir);
}
