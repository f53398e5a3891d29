//! TCP queue pairs against the Linux kernel's TCP: a device driven by a fake guest on a
//! TAP in a network namespace the test creates, with kernel sockets in that namespace. A
//! qpip QP connects to a `TcpListener` and accepts a `TcpStream`; 1 MiB goes each way at
//! once, verified by SHA-256; then again with nftables dropping 5% of the kernel's packets
//! in both directions.
//!
//! Needs root (CI runs as root); without it, or without `ip`/`nft`, the tests say so and
//! pass.

mod netns;
mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use netns::{have, root_and_tools, Netns};
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
    let ns = Netns::new("qpiptcp");
    ns.add_tap(TAP, HOST);
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
