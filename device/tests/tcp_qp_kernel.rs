//! TCP queue pairs against the Linux kernel's TCP: a device driven by a fake guest on a
//! TAP in a network namespace the test creates, with kernel sockets in that namespace. A
//! qpip QP connects to a `TcpListener` and accepts a `TcpStream`; 1 MiB goes each way at
//! once, verified by SHA-256; then again with nftables dropping 5% of the kernel's packets
//! in both directions; then again through the device's own impairment (`--impair`:
//! reordering 25%, duplication 2%, corruption 1%, delay with jitter, fixed seed) with a
//! capture (`--pcap`) that tshark reads.
//!
//! What the capture can prove: it sits between the device and its impairment (see
//! `backend::link`), so it holds every frame as the device built it — before a bit is
//! flipped, a copy made or an order changed — and the kernel's frames as the kernel sent
//! them. tshark finding no malformed packet and no bad TCP/IPv6 checksum among the device's
//! frames therefore says the device built every segment right; it cannot see (and does not
//! claim to see) the corrupted copies. That those were injected and refused is checked
//! apart: both transfers must still arrive intact by SHA-256 (a corrupted segment that got
//! through would break them), and the device's TCP counters must show the reordering and
//! duplication it met.
//!
//! The same exchange runs over IPv4 too (the device's and the host's IPv4 addresses on the
//! same TAP), with the TAP's IPv4 offloads (TSO4) at work the same way.
//!
//! Needs root (CI runs as root); without it, or without `ip`/`nft`, the tests say so and
//! pass (and the tshark check says it is skipped when tshark is missing).

#[path = "support/netns.rs"]
mod netns;
use qpip_testkit as support;

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use netns::{have, root_and_tools, Netns};
use qpip_device::backend::{ImpairSpec, NetSpec};
use qpip_device::engine::network::NetworkConfig;
use qpip_device::engine::EngineConfig;
use qpip_device::function::FunctionConfig;
use qpip_device::net::DropReason;
use qpip_device::vfio::ServeOptions;
use sha2::{Digest, Sha256};
use support::*;

const DEV: &str = "fd51:5050::1:1";
const HOST: &str = "fd51:5050::1";
const DEV4: &str = "198.18.0.2";
const HOST4: &str = "198.18.0.1";
const TAP: &str = "qtcp0";
const DEV_MAC: [u8; 6] = [0x02, 0x51, 0x50, 0x00, 0x07, 0x01];
/// Bytes each way in each exchange.
const N: usize = 1 << 20;

fn can_run(nft: bool) -> bool {
    if !root_and_tools("TCP QP kernel interop") {
        return false;
    }
    if nft && !have("nft") {
        println!("TCP QP kernel interop under loss SKIPPED: no `nft` (install nftables)");
        return false;
    }
    true
}

/// The namespace's own part of these tests: random loss of TCP in both directions.
trait Lossy {
    fn loss(&self, percent: u32);
}

impl Lossy for Netns {
    fn loss(&self, percent: u32) {
        let rules = format!(
            "table inet qpiptcp {{
                chain lossy_in {{
                    type filter hook input priority 0; policy accept;
                    meta l4proto tcp numgen random mod 100 < {percent} drop
                }}
                chain lossy_out {{
                    type filter hook output priority 0; policy accept;
                    meta l4proto tcp numgen random mod 100 < {percent} drop
                }}
            }}\n"
        );
        let mut nft = Command::new("ip")
            .args(["netns", "exec", &self.name, "nft", "-f", "-"])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        nft.stdin
            .as_mut()
            .unwrap()
            .write_all(rules.as_bytes())
            .unwrap();
        drop(nft.stdin.take());
        assert!(nft.wait().unwrap().success(), "nft rules");
    }
}

/// A bad link in the device's backend, and a capture of what crosses it.
struct Bad {
    impair: ImpairSpec,
    pcap: PathBuf,
}

fn device(ns: &Netns, bad: Option<&Bad>) -> FakeGuest {
    let network = NetworkConfig {
        pcap: bad.map(|b| b.pcap.clone()),
        impair: bad.map(|b| b.impair),
        ..NetworkConfig::new(NetSpec::Tap(TAP.into()))
    };
    let dev4: std::net::Ipv4Addr = DEV4.parse().unwrap();
    let engine = EngineConfig {
        mac: DEV_MAC,
        addrs: vec![(DEV.parse().unwrap(), 64), (dev4.to_ipv6_mapped(), 120)],
        network: Some(network),
        ..EngineConfig::default()
    };
    ns.within(|| {
        FakeGuest::with_options(ServeOptions {
            core: FunctionConfig {
                engine,
                ..FunctionConfig::default()
            },
        })
    })
}

/// The kernel's accept of the device's connection, within `limit`; a connection that never
/// arrives fails the test with the device's counters and the namespace's view (its TCP
/// sockets, counters and neighbours) rather than hanging it.
fn accept_within(
    ns: &Netns,
    listener: &TcpListener,
    g: &mut FakeGuest,
    limit: Duration,
) -> (TcpStream, SocketAddr) {
    listener.set_nonblocking(true).unwrap();
    let deadline = Instant::now() + limit;
    loop {
        match listener.accept() {
            Ok((s, peer)) => {
                s.set_nonblocking(false).unwrap();
                return (s, peer);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("kernel accept: {e}"),
        }
        if Instant::now() >= deadline {
            let counters: Vec<(u32, u64)> = (0..STAT_TCP_TIMEOUTS + 1)
                .map(|i| (i, g.stat(i)))
                .filter(|&(_, v)| v > 0)
                .collect();
            let view = |args: &[&str]| {
                let o = ns.exec(args);
                format!(
                    "$ {}\n{}{}",
                    args.join(" "),
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                )
            };
            panic!(
                "the device's connection did not reach Linux; its counters: {counters:?}\n{}{}{}",
                view(&["ss", "-tanoi"]),
                view(&["nstat", "-az", "Tcp*", "TcpExt*"]),
                view(&["ip", "neigh"])
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn sha(b: &[u8]) -> [u8; 32] {
    Sha256::digest(b).into()
}

/// The kernel's side: sends `out` and reads `n` bytes on one stream, on two threads.
fn kernel_side(s: TcpStream, out: Vec<u8>, n: usize) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
        let mut w = s.try_clone().unwrap();
        let writer = std::thread::spawn(move || {
            w.write_all(&out).expect("kernel write");
        });
        let mut got = vec![0u8; n];
        let mut r = &s;
        r.read_exact(&mut got).expect("kernel read");
        writer.join().unwrap();
        got
    })
}

/// The device's side: pumps a flow until it sent everything and received `n` bytes.
fn device_side(g: &mut FakeGuest, e: &mut TcpEnd, f: &mut Flow, n: usize, limit: Duration) {
    let deadline = Instant::now() + limit;
    while !(f.sent == f.out.len() && f.got.len() >= n) {
        assert!(
            Instant::now() < deadline,
            "device side stalled: sent {}/{} got {}/{n}",
            f.sent,
            f.out.len(),
            f.got.len()
        );
        if !f.pump(g, e) {
            std::thread::sleep(Duration::from_micros(300));
        }
    }
}

/// 1 MiB ([`N`]) each way at once between the kernel's stream `s` and the device's end `e` (the
/// device's flow seeded with `seed`), verified by SHA-256; `who` is the device's side in
/// the messages. Returns the end, for its close.
fn both_ways(
    g: &mut FakeGuest,
    mut e: TcpEnd,
    s: TcpStream,
    rng: &mut Rng,
    seed: u64,
    limit: Duration,
    who: &str,
) -> TcpEnd {
    let kout = rng.bytes(N);
    let kernel = kernel_side(s, kout.clone(), N);
    let mut f = Flow::new(g, &e, rng.bytes(N), seed);
    device_side(g, &mut e, &mut f, N, limit);
    let kgot = kernel.join().expect("kernel side");
    assert_eq!(sha(&kgot), sha(&f.out), "{who} -> Linux intact");
    assert_eq!(sha(&f.got), sha(&kout), "Linux -> {who} intact");
    e
}

fn exchange(loss: u32, bad: Option<&Bad>) -> FakeGuest {
    exchange_between(DEV, HOST, loss, bad)
}

/// [`exchange`] between the device's address `dev` and the host's `host` (both IPv6 or
/// both IPv4).
fn exchange_between(dev: &str, host: &str, loss: u32, bad: Option<&Bad>) -> FakeGuest {
    let ns = Netns::new("qpiptcp");
    ns.add_tap(TAP, HOST);
    ns.ip(&["addr", "add", &format!("{HOST4}/24"), "dev", TAP]);
    let at = |a: &str, port: u16| SocketAddr::new(a.parse::<IpAddr>().unwrap(), port);
    if loss > 0 {
        ns.loss(loss);
    }
    let mut g = device(&ns, bad);
    let ctx = g.create_ctx().unwrap();
    let limit = Duration::from_secs(if loss > 0 || bad.is_some() { 120 } else { 60 });
    let mut rng = Rng::new(77 + loss as u64);

    // 1. A qpip QP connects to a Linux listener.
    let listener = ns.within(|| TcpListener::bind(at(host, 7100)).expect("listen"));
    let e = g.tcp_endpoint_in(ctx, FRAMING_STREAM, 16, Flow::buf_len(N, 16));
    let con = g.submit_connect(ctx, e.qp.id, ip(host), 7100);
    let (s, peer) = accept_within(&ns, &listener, &mut g, limit);
    g.admin_wait_ok(con, "connect");
    assert_eq!(peer, at(dev, peer.port()));
    let e = both_ways(&mut g, e, s, &mut rng, 5, limit, "qpip client");
    let cl = g.submit_close(ctx, e.qp.id);
    g.admin_wait_ok(cl, "close");

    // 2. A Linux client connects to a qpip listener.
    let e = g.tcp_endpoint_in(ctx, FRAMING_STREAM, 16, Flow::buf_len(N, 16));
    let l = g.listen(ctx, UNSPECIFIED, 7200, 4).unwrap();
    let acc = g.submit_accept(ctx, l, e.qp.id);
    let s = ns.within(|| TcpStream::connect(at(dev, 7200)).expect("kernel connect"));
    let a = g.admin_wait_ok(acc, "accept");
    assert_eq!(peer_addr(&a), ip(host));
    assert_eq!(a.result2, s.local_addr().unwrap().port() as u32);
    both_ways(&mut g, e, s, &mut rng, 6, limit, "qpip server");
    // The namespace (and the TAP in it) goes now; the device lives on for its counters.
    drop(ns);
    g
}

/// The device's drop counters that are not zero, by reason, printed for the log.
fn print_drops(g: &mut FakeGuest) -> Vec<(&'static str, u64)> {
    let drops: Vec<(&str, u64)> = DropReason::ALL
        .iter()
        .map(|&r| (r.name(), g.stat(STAT_NET_DROP_BASE + r as u32)))
        .filter(|&(_, v)| v > 0)
        .collect();
    println!("device drops: {drops:?}");
    drops
}

/// The TAP's offloads were at work both ways in an exchange of 2 MiB each way, with
/// segments of at most `mss` payload bytes: fewer (larger) segments came in than the MSS
/// allows, and the device put fewer frames on the TAP than it sent segments.
fn assert_offloads_at_work(g: &mut FakeGuest, mss: u64) {
    let segs_in = g.stat(STAT_TCP_SEGS_IN);
    let segs_out = g.stat(STAT_TCP_SEGS_OUT);
    let frames_out = g.stat(STAT_NET_TX_FRAMES);
    println!("TCP segments in {segs_in}, out {segs_out}; frames out {frames_out}");
    assert!(
        segs_in < 2 * (1 << 20) / mss,
        "segments larger than the MSS ({mss}) came from the TAP (GRO/TSO): {segs_in} segments in"
    );
    assert!(
        frames_out < segs_out / 2,
        "super-segments went to the TAP whole: {frames_out} frames for {segs_out} segments"
    );
}

/// Also: the TAP's offloads were at work both ways. 2 MiB came from Linux and 2 MiB went
/// to it; segments of at most the MSS (1428 payload bytes with timestamps) would take more
/// than 1468 segments each way. Linux's TCP sent super-frames through the TAP (TSO6) that
/// arrived whole, so fewer (larger) segments came in; the device sent super-segments that
/// the kernel cut, so it put fewer frames on the TAP than it sent segments.
#[test]
fn qpip_tcp_qps_with_linux_sockets() {
    if !can_run(false) {
        return;
    }
    let mut g = exchange(0, None);
    assert_offloads_at_work(&mut g, 1428);
}

/// Over IPv4: ARP, MSS of MTU less 40, "don't fragment" on every segment, the IPv4
/// pseudo-header in every checksum (the kernel would refuse a bad one); super-frames both
/// ways through the TAP as over IPv6 (at most 1448 payload bytes a segment with
/// timestamps).
#[test]
fn qpip_tcp_qps_with_linux_sockets_over_ipv4() {
    if !can_run(false) {
        return;
    }
    let mut g = exchange_between(DEV4, HOST4, 0, None);
    assert_offloads_at_work(&mut g, 1448);
    print_drops(&mut g);
    assert_eq!(
        g.stat(STAT_NET_DROP_BASE + DropReason::BadChecksum as u32),
        0
    );
}

#[test]
fn qpip_tcp_qps_with_linux_sockets_over_ipv4_under_nftables_loss() {
    if can_run(true) {
        drop(exchange_between(DEV4, HOST4, 5, None));
    }
}

#[test]
fn qpip_tcp_qps_with_linux_sockets_under_nftables_loss() {
    if can_run(true) {
        drop(exchange(5, None));
    }
}

#[test]
fn qpip_tcp_qps_with_linux_sockets_under_the_device_impairment() {
    if !can_run(false) {
        return;
    }
    let dir = ScratchDir::new("tcp-impaired");
    let bad = Bad {
        impair: "reorder=25,dup=2,corrupt=1,delay=2,jitter=3,seed=4242"
            .parse()
            .expect("impairment spec"),
        pcap: dir.join("device.pcap"),
    };
    let mut g = exchange(0, Some(&bad));
    let drops = print_drops(&mut g);
    let tcp: Vec<u64> = (STAT_TCP_ACTIVE_OPENS..=STAT_TCP_TIMEOUTS)
        .map(|i| g.stat(i))
        .collect();
    println!("device TCP counters (STAT_TCP_ACTIVE_OPENS..): {tcp:?}");
    // The impairment was at work on the device's side: segments arrived out of order,
    // twice, and corrupted — refused by their checksum and counted (the SHA-256 checks
    // above show none got through).
    assert!(g.stat(STAT_TCP_OOO_SEGS) > 0, "reordered segments arrived");
    assert!(g.stat(STAT_TCP_DUP_SEGS) > 0, "duplicated segments arrived");
    assert!(
        g.stat(STAT_NET_DROP_BASE + DropReason::BadChecksum as u32) > 0,
        "corrupted segments were dropped and counted: {drops:?}"
    );
    drop(g);
    tshark_tcp_clean(&bad.pcap);
}

/// tshark over a TCP capture: the device's frames are well formed with right checksums
/// (see the module documentation for why the capture shows them as built), and there are
/// TCP segments both ways.
fn tshark_tcp_clean(pcap: &Path) {
    let Some(capture) = Tshark::over(pcap) else {
        return;
    };
    let mac = DEV_MAC
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":");
    let plain = netns::tshark_plain_payloads();
    let tshark = |filter: &str| {
        let checksums = ["-o", "tcp.check_checksum:TRUE", "-Y", filter];
        capture.read(&[&plain[..], &checksums].concat())
    };
    let ours = tshark(&format!("eth.src == {mac} && tcp")).lines().count();
    let theirs = tshark(&format!("eth.src != {mac} && tcp")).lines().count();
    println!("capture: {ours} TCP frames from the device, {theirs} from the kernel");
    assert!(ours > 500 && theirs > 500, "{ours} / {theirs} TCP frames");
    let bad = tshark(&format!(
        "eth.src == {mac} && (_ws.malformed || _ws.expert.severity == error)"
    ));
    assert!(
        bad.trim().is_empty(),
        "tshark finds problems in the device's frames:\n{bad}"
    );
}
