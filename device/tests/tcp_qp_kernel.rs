//! TCP queue pairs against the Linux kernel's TCP: a device driven by a fake guest on a
//! TAP in a network namespace the test creates, with kernel sockets in that namespace. A
//! qpip QP connects to a `TcpListener` and accepts a `TcpStream`; 1 MiB goes each way at
//! once, verified by SHA-256; then again with nftables dropping 5% of the kernel's packets
//! in both directions.
//!
//! Needs root (CI runs as root); without it, or without `ip`/`nft`, the tests say so and
//! pass.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use qpip_device::backend::NetSpec;
use qpip_device::core::CoreConfig;
use qpip_device::engine::network::NetworkConfig;
use qpip_device::engine::EngineConfig;
use qpip_device::vfio::ServeOptions;
use sha2::{Digest, Sha256};
use support::*;

const DEV: &str = "fd51:5050::1:1";
const HOST: &str = "fd51:5050::1";
const TAP: &str = "qtcp0";

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn can_run(nft: bool) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        println!("TCP QP kernel interop SKIPPED: needs root (network namespace, TAP); CI runs it as root");
        return false;
    }
    if !have("ip") || !Path::new("/dev/net/tun").exists() {
        println!("TCP QP kernel interop SKIPPED: needs `ip` (iproute2) and /dev/net/tun");
        return false;
    }
    if nft && !have("nft") {
        println!("TCP QP kernel interop under loss SKIPPED: no `nft` (install nftables)");
        return false;
    }
    true
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A network namespace with a TAP (host side fd51:5050::1/64), removed when dropped.
struct Netns {
    name: String,
}

impl Netns {
    fn new() -> Netns {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "qpiptcp-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        run(Command::new("ip").args(["netns", "add", &name]));
        let ns = Netns { name };
        ns.ip(&["link", "set", "lo", "up"]);
        ns.ip(&["tuntap", "add", "dev", TAP, "mode", "tap"]);
        ns.ip(&["link", "set", TAP, "up"]);
        ns.ip(&["addr", "add", &format!("{HOST}/64"), "dev", TAP, "nodad"]);
        ns
    }

    fn ip(&self, args: &[&str]) -> Output {
        run(Command::new("ip").args(["-n", &self.name]).args(args))
    }

    /// Runs `f` on this thread inside the namespace, then returns to the thread's own.
    /// Threads started meanwhile (the device's) stay in the namespace.
    fn within<T>(&self, f: impl FnOnce() -> T) -> T {
        let own = std::fs::File::open("/proc/thread-self/ns/net").expect("own namespace");
        let ns = std::fs::File::open(format!("/run/netns/{}", self.name)).expect("namespace");
        // SAFETY: setns on namespace fds, for this thread only.
        assert_eq!(
            unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) },
            0
        );
        let r = f();
        // SAFETY: as above.
        assert_eq!(
            unsafe { libc::setns(own.as_raw_fd(), libc::CLONE_NEWNET) },
            0
        );
        r
    }

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

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["-n", &self.name, "link", "del", TAP])
            .stderr(Stdio::null())
            .status();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

fn device(ns: &Netns) -> FakeGuest {
    let network = NetworkConfig {
        spec: NetSpec::Tap(TAP.into()),
        mtu: 1500,
        pcap: None,
        impair: None,
        neighbors: Vec::new(),
    };
    let engine = EngineConfig {
        mac: [0x02, 0x51, 0x50, 0x00, 0x07, 0x01],
        addrs: vec![(DEV.parse().unwrap(), 64)],
        network: Some(network),
        ..EngineConfig::default()
    };
    ns.within(|| {
        FakeGuest::with_options(ServeOptions {
            core: CoreConfig {
                engine,
                ..CoreConfig::default()
            },
        })
    })
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

fn exchange(loss: u32) {
    let ns = Netns::new();
    if loss > 0 {
        ns.loss(loss);
    }
    let mut g = device(&ns);
    let ctx = g.create_ctx().unwrap();
    let n = 1 << 20;
    let limit = Duration::from_secs(if loss > 0 { 120 } else { 60 });
    let mut rng = Rng::new(77 + loss as u64);

    // 1. A qpip QP connects to a Linux listener.
    let listener = ns.within(|| TcpListener::bind(format!("[{HOST}]:7100")).expect("listen"));
    let mut e = g.tcp_endpoint_in(ctx, FRAMING_STREAM, 16, Flow::buf_len(n, 16));
    let con = g.submit_connect(ctx, e.qp.id, ip(HOST), 7100);
    let (s, peer) = listener.accept().expect("kernel accept");
    let c = g.admin_wait_done(con);
    assert_eq!(
        c.status,
        ADMIN_STATUS_OK,
        "connect: {}",
        admin_status_name(c.status)
    );
    assert_eq!(
        peer,
        SocketAddr::new(
            DEV.parse::<std::net::Ipv6Addr>().unwrap().into(),
            peer.port()
        )
    );
    let kout = rng.bytes(n);
    let kernel = kernel_side(s, kout.clone(), n);
    let mut f = Flow::new(&mut g, &e, rng.bytes(n), 5);
    device_side(&mut g, &mut e, &mut f, n, limit);
    let kgot = kernel.join().expect("kernel side");
    assert_eq!(sha(&kgot), sha(&f.out), "qpip client -> Linux intact");
    assert_eq!(sha(&f.got), sha(&kout), "Linux -> qpip client intact");
    let cl = g.submit_close(ctx, e.qp.id);
    assert_eq!(g.admin_wait_done(cl).status, ADMIN_STATUS_OK, "close");

    // 2. A Linux client connects to a qpip listener.
    let mut e = g.tcp_endpoint_in(ctx, FRAMING_STREAM, 16, Flow::buf_len(n, 16));
    let l = g.listen(ctx, UNSPECIFIED, 7200, 4).unwrap();
    let acc = g.submit_accept(ctx, l, e.qp.id);
    let s = ns.within(|| TcpStream::connect(format!("[{DEV}]:7200")).expect("kernel connect"));
    let a = g.admin_wait_done(acc);
    assert_eq!(
        a.status,
        ADMIN_STATUS_OK,
        "accept: {}",
        admin_status_name(a.status)
    );
    assert_eq!(peer_addr(&a), ip(HOST));
    assert_eq!(a.result2, s.local_addr().unwrap().port() as u32);
    let kout = rng.bytes(n);
    let kernel = kernel_side(s, kout.clone(), n);
    let mut f = Flow::new(&mut g, &e, rng.bytes(n), 6);
    device_side(&mut g, &mut e, &mut f, n, limit);
    let kgot = kernel.join().expect("kernel side");
    assert_eq!(sha(&kgot), sha(&f.out), "qpip server -> Linux intact");
    assert_eq!(sha(&f.got), sha(&kout), "Linux -> qpip server intact");
    drop(g);
}

#[test]
fn qpip_tcp_qps_with_linux_sockets() {
    if can_run(false) {
        exchange(0);
    }
}

#[test]
fn qpip_tcp_qps_with_linux_sockets_under_nftables_loss() {
    if can_run(true) {
        exchange(5);
    }
}
