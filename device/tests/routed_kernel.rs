//! Routes against Linux routing: the device on subnet A reaches a peer on subnet B through
//! a Linux router, over IPv6 and IPv4.
//!
//! Two network namespaces the test creates: R, the router, with the device's TAP (subnet
//! A: fd51:5050::/80 and 198.18.0.0/24, R being ::1 and .1) and forwarding on for both
//! families; P, the peer, on subnet B (fd51:5050:0:0:1::/80 and 198.18.1.0/24) behind R
//! over a veth pair, its default routes through R. R's route toward B is narrower than
//! the links (MTU 1300, locked), so R answers the device's larger packets with ICMP
//! errors (packet too big, fragmentation needed) and the device's path MTU toward P must
//! follow them.
//!
//! Through a fake guest: UDP and TCP QPs toward P fail with no route until ADD_ROUTE gives
//! the device its routes; then a UDP datagram goes to a kernel socket in P and its echo
//! comes back, a datagram larger than the narrow hop gets through once the path MTU
//! fell, and a TCP QP exchanges data both ways with a kernel stream in P.
//!
//! Needs root (CI runs as root); without it, or without `ip`, the test says so and passes.

#[path = "support/netns.rs"]
mod netns;
use qpip_testkit as support;

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, UdpSocket};
use std::time::{Duration, Instant};

use netns::{root_and_tools, Netns};
use qpip_device::backend::NetSpec;
use qpip_device::engine::network::NetworkConfig;
use qpip_device::engine::EngineConfig;
use qpip_device::function::FunctionConfig;
use qpip_device::vfio::ServeOptions;
use support::*;

const TAP: &str = "qrt0";
const VETH_R: &str = "qrtv0";
const VETH_P: &str = "qrtv1";
const DEV_MAC: [u8; 6] = [0x02, 0x51, 0x50, 0x00, 0x0b, 0x01];
/// The narrow hop between R and P.
const NARROW_MTU: usize = 1300;

/// One family's addresses: the device's and R's on A, R's and P's on B (each subnet's
/// prefix length is `cidr`), and the route the device needs (destination, prefix length
/// over 128 bits).
struct Family {
    name: &'static str,
    dev: &'static str,
    dev_plen: u8,
    gw: &'static str,
    gw_b: &'static str,
    peer: &'static str,
    cidr: &'static str,
    b_prefix: &'static str,
    route: (&'static str, u8),
}

const V6: Family = Family {
    name: "IPv6",
    dev: "fd51:5050::1:1",
    dev_plen: 80,
    gw: "fd51:5050::1",
    gw_b: "fd51:5050::1:0:0:1",
    peer: "fd51:5050::1:0:0:2",
    cidr: "/80",
    b_prefix: "fd51:5050:0:0:1::/80",
    // The default route.
    route: ("::", 0),
};

const V4: Family = Family {
    name: "IPv4",
    dev: "198.18.0.2",
    dev_plen: 120,
    gw: "198.18.0.1",
    gw_b: "198.18.1.1",
    peer: "198.18.1.2",
    cidr: "/24",
    b_prefix: "198.18.1.0/24",
    route: ("198.18.1.0", 120),
};

/// R and P, wired as the module documentation says; removed when dropped.
struct Lab {
    r: Netns,
    p: Netns,
}

impl Lab {
    fn new() -> Lab {
        let r = Netns::new("qroute-r");
        let p = Netns::new("qroute-p");
        r.owns_link(TAP);
        r.ip(&["tuntap", "add", "dev", TAP, "mode", "tap"]);
        r.owns_link(VETH_R);
        r.ip(&[
            "link", "add", VETH_R, "type", "veth", "peer", "name", VETH_P, "netns", &p.name,
        ]);
        for f in [&V6, &V4] {
            let gw = format!("{}{}", f.gw, f.cidr);
            let gw_b = format!("{}{}", f.gw_b, f.cidr);
            let peer = format!("{}{}", f.peer, f.cidr);
            r.ip(&["addr", "add", &gw, "dev", TAP, "nodad"]);
            r.ip(&["addr", "add", &gw_b, "dev", VETH_R, "nodad"]);
            p.ip(&["addr", "add", &peer, "dev", VETH_P, "nodad"]);
        }
        for (ns, dev) in [(&r, TAP), (&r, VETH_R), (&p, VETH_P)] {
            ns.ip(&["link", "set", dev, "up"]);
        }
        p.ip(&["-6", "route", "add", "default", "via", V6.gw_b]);
        p.ip(&["route", "add", "default", "via", V4.gw_b]);
        let mtu = NARROW_MTU.to_string();
        // Below the connected route's metric (256) for IPv6; in its place for IPv4.
        r.ip(&[
            "-6",
            "route",
            "add",
            V6.b_prefix,
            "dev",
            VETH_R,
            "metric",
            "1",
            "mtu",
            "lock",
            &mtu,
        ]);
        r.ip(&[
            "route",
            "replace",
            V4.b_prefix,
            "dev",
            VETH_R,
            "mtu",
            "lock",
            &mtu,
        ]);
        for knob in ["net.ipv6.conf.all.forwarding=1", "net.ipv4.ip_forward=1"] {
            let out = r.exec(&["sysctl", "-qw", knob]);
            assert!(out.status.success(), "sysctl {knob}: {out:?}");
        }
        Lab { r, p }
    }

    /// The device on R's TAP, with its address of each family on subnet A and no route.
    fn device(&self) -> FakeGuest {
        let addrs = [&V6, &V4]
            .iter()
            .map(|f| (std::net::Ipv6Addr::from(ip(f.dev)), f.dev_plen))
            .collect();
        let engine = EngineConfig {
            mac: DEV_MAC,
            addrs,
            network: Some(NetworkConfig::new(NetSpec::Tap(TAP.into()))),
            ..EngineConfig::default()
        };
        self.r.within(|| {
            FakeGuest::with_options(ServeOptions {
                core: FunctionConfig {
                    engine,
                    ..FunctionConfig::default()
                },
            })
        })
    }
}

fn at(a: &str, port: u16) -> SocketAddr {
    SocketAddr::new(a.parse::<IpAddr>().unwrap(), port)
}

#[test]
fn qps_reach_a_peer_behind_a_linux_router_through_their_route() {
    if !root_and_tools("routed kernel interop") {
        return;
    }
    let lab = Lab::new();
    let mut g = lab.device();
    let ctx = g.create_ctx().unwrap();
    let mut u = g.udp_endpoint_in(ctx, UNSPECIFIED, 7300, 16, 32, 4096);
    for (i, f) in [&V6, &V4].into_iter().enumerate() {
        let port = 7310 + i as u16;
        let sock = lab
            .p
            .within(|| UdpSocket::bind(at(f.peer, port)).expect("bind in P"));
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();

        // No route yet: P is off the link.
        let no_route = g.stat(STAT_NET_NO_ROUTE);
        g.post_send(&mut u.qp, &[inline_wqe(1, ip(f.peer), port, b"x")]);
        assert_cqe(
            &g.wait_cqe(&mut u.scq),
            CQE_STATUS_BAD_DEST,
            CQE_DETAIL_NO_ROUTE,
            &format!("{}: UDP before the route", f.name),
        );
        assert_eq!(g.stat(STAT_NET_NO_ROUTE), no_route + 1, "{}", f.name);

        g.add_route(ip(f.route.0), f.route.1, ip(f.gw), 0)
            .unwrap_or_else(|s| panic!("{}: ADD_ROUTE: {}", f.name, admin_status_name(s)));

        // A datagram there and its echo back.
        g.post_recv(&mut u.qp, &[recv_wqe(2, &[u.buf.sge(0, 4096, u.mr.lkey)])]);
        g.post_send(&mut u.qp, &[inline_wqe(2, ip(f.peer), port, b"routed")]);
        assert_cqe(&g.wait_cqe(&mut u.scq), CQE_STATUS_SUCCESS, 0, "send");
        let mut b = [0u8; 2048];
        let (n, from) = sock
            .recv_from(&mut b)
            .unwrap_or_else(|e| panic!("{}: nothing reached P through R: {e}", f.name));
        assert_eq!(&b[..n], b"routed");
        assert_eq!(
            from,
            at(f.dev, 7300),
            "{}: the device's address on A",
            f.name
        );
        sock.send_to(b"echo", from).unwrap();
        let rc = g
            .try_wait_cqe(&mut u.rcq, Duration::from_secs(5))
            .unwrap_or_else(|| panic!("{}: P's echo did not come back", f.name));
        assert_cqe(&rc, CQE_STATUS_SUCCESS, 0, "receive");
        assert_eq!(rc.src_addr, ip(f.peer));
        assert_eq!(g.buf_read(&u.buf, 0, 4), b"echo");

        // Larger than the narrow hop: over IPv6 R answers "packet too big" and the
        // device fragments for the path from then on (over IPv4, R fragments it).
        // It goes from the endpoint's buffer, past the first 2 KiB (which receives take).
        let big = vec![0x5a; 1400];
        g.buf_write(&u.buf, 2048, &big);
        let sge = u.buf.sge(2048, big.len() as u32, u.mr.lkey);
        let got = (3..8).find(|&wr_id| {
            g.post_send(&mut u.qp, &[send_wqe(wr_id, ip(f.peer), port, &[sge])]);
            assert_cqe(&g.wait_cqe(&mut u.scq), CQE_STATUS_SUCCESS, 0, "big send");
            sock.set_read_timeout(Some(Duration::from_millis(500)))
                .unwrap();
            matches!(sock.recv_from(&mut b), Ok((n, _)) if n == big.len())
        });
        let got = got.unwrap_or_else(|| {
            panic!(
                "{}: a datagram larger than the narrow hop never got through",
                f.name
            )
        });
        if f.name == "IPv6" {
            // The first was too big for R to forward: the hop is narrow indeed.
            assert!(
                got > 3,
                "IPv6: the first large datagram should not fit the hop"
            );
        }
    }

    // TCP through the routes: a QP connects to a kernel listener in P and data goes both
    // ways. The device's full-sized segments do not fit the narrow hop: the transfer
    // completes only if the device follows R's ICMP errors.
    for (i, f) in [&V6, &V4].into_iter().enumerate() {
        let port = 7320 + i as u16;
        let listener = lab
            .p
            .within(|| TcpListener::bind(at(f.peer, port)).expect("listen in P"));
        tcp_exchange(&mut g, ctx, &listener, f, port);
    }

    // Without the routes, P is out of reach again.
    g.del_route(ip(V6.route.0), V6.route.1, 0).unwrap();
    g.del_route(ip(V4.route.0), V4.route.1, 0).unwrap();
    for f in [&V6, &V4] {
        g.post_send(&mut u.qp, &[inline_wqe(9, ip(f.peer), 7310, b"x")]);
        assert_cqe(
            &g.wait_cqe(&mut u.scq),
            CQE_STATUS_BAD_DEST,
            CQE_DETAIL_NO_ROUTE,
            &format!("{}: UDP after DEL_ROUTE", f.name),
        );
    }
    drop(g);
    drop(lab);
}

/// Bytes each way over TCP.
const N: usize = 256 << 10;

fn tcp_exchange(g: &mut FakeGuest, ctx: u32, listener: &TcpListener, f: &Family, port: u16) {
    let limit = Duration::from_secs(60);
    let mut e = g.tcp_endpoint_in(ctx, FRAMING_STREAM, 16, Flow::buf_len(N, 16));
    let con = g.submit_connect(ctx, e.qp.id, ip(f.peer), port);
    listener.set_nonblocking(true).unwrap();
    let deadline = Instant::now() + limit;
    let (s, peer) = loop {
        match listener.accept() {
            Ok(x) => break x,
            Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(err) => panic!("accept in P: {err}"),
        }
        assert!(
            Instant::now() < deadline,
            "{}: the device's connection did not reach P",
            f.name
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    s.set_nonblocking(false).unwrap();
    g.admin_wait_ok(con, "connect");
    assert_eq!(peer.ip(), f.dev.parse::<IpAddr>().unwrap(), "{}", f.name);

    let mut rng = Rng::new(91);
    let kout = rng.bytes(N);
    let kernel = {
        let out = kout.clone();
        std::thread::spawn(move || {
            s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
            let mut w = s.try_clone().unwrap();
            let writer = std::thread::spawn(move || w.write_all(&out).expect("write in P"));
            let mut got = vec![0u8; N];
            (&s).read_exact(&mut got).expect("read in P");
            writer.join().unwrap();
            got
        })
    };
    let mut flow = Flow::new(g, &e, rng.bytes(N), 5);
    while !(flow.sent == flow.out.len() && flow.got.len() >= N) {
        assert!(
            Instant::now() < deadline,
            "{}: the TCP exchange through R stalled: sent {}/{N}, got {}/{N}",
            f.name,
            flow.sent,
            flow.got.len()
        );
        if !flow.pump(g, &mut e) {
            std::thread::sleep(Duration::from_micros(300));
        }
    }
    let kgot = kernel.join().expect("P's side");
    assert!(
        kgot == flow.out,
        "{}: the device's bytes reached P intact",
        f.name
    );
    assert!(
        flow.got[..N] == kout[..],
        "{}: P's bytes reached the device intact",
        f.name
    );
    let cl = g.submit_close(ctx, e.qp.id);
    g.admin_wait_ok(cl, "close");
}
