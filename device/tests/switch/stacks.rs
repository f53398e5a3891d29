//! Two real stacks, each on a port, find each other (neighbour discovery, multicast
//! flooded) and exchange UDP datagrams through the switch; the uplink sees the floods
//! and nothing of their unicast traffic.

use std::net::Ipv6Addr;
use std::time::{Duration, Instant};

use qpip_device::backend::switch::PortId;
use qpip_device::net::{Delivery, Interface, NetConfig, Stack};

use crate::{drain, switch};

const MAC_A: [u8; 6] = [0x02, 0x51, 0x50, 0, 0, 0x0a];
const MAC_B: [u8; 6] = [0x02, 0x51, 0x50, 0, 0, 0x0b];
const ADDR_A: Ipv6Addr = Ipv6Addr::new(0xfd51, 0x5050, 0, 0, 0, 0, 1, 0xa);
const ADDR_B: Ipv6Addr = Ipv6Addr::new(0xfd51, 0x5050, 0, 0, 0, 0, 1, 0xb);

fn config(mac: [u8; 6], addr: Ipv6Addr, seed: u64) -> NetConfig {
    let mut c = NetConfig::new(mac);
    c.addrs.push((addr, 64));
    c.seed = Some(seed);
    c
}

/// Runs both interfaces until `b` received a datagram (returned with its source), or
/// gives up after a while (None).
fn until_received(from: &mut Interface, to: &mut Interface) -> Option<(Ipv6Addr, u16, Vec<u8>)> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        let now = Instant::now();
        let mut got = None;
        from.poll_rx(now, 64, |_| Delivery::Delivered);
        to.poll_rx(now, 64, |d| {
            got = Some((d.src, d.sport, d.payload().to_vec()));
            Delivery::Delivered
        });
        if got.is_some() {
            return got;
        }
        from.poll_timers(now);
        to.poll_timers(now);
        std::thread::sleep(Duration::from_millis(1));
    }
    None
}

#[test]
fn two_stacks_exchange_datagrams_through_the_switch() {
    let (sw, ports, far) = switch(2, true);
    let mut far = far.unwrap();
    let mut ports = ports.into_iter();
    let t = Instant::now();
    let mut a = Interface::new(
        Stack::new(&config(MAC_A, ADDR_A, 1), t),
        Box::new(ports.next().unwrap()),
    );
    let mut b = Interface::new(
        Stack::new(&config(MAC_B, ADDR_B, 2), t),
        Box::new(ports.next().unwrap()),
    );
    assert!(a.backend().gso());

    a.stack
        .send_udp(None, 1000, ADDR_B, 9, b"through the switch", t)
        .unwrap();
    a.flush();
    assert_eq!(
        until_received(&mut a, &mut b),
        Some((ADDR_A, 1000, b"through the switch".to_vec()))
    );
    b.stack
        .send_udp(None, 9, ADDR_A, 1000, b"and back", Instant::now())
        .unwrap();
    b.flush();
    assert_eq!(
        until_received(&mut b, &mut a),
        Some((ADDR_B, 9, b"and back".to_vec()))
    );

    assert_eq!(sw.lookup(&MAC_A), Some(PortId::Port(0)));
    assert_eq!(sw.lookup(&MAC_B), Some(PortId::Port(1)));
    for s in [&a.stack, &b.stack] {
        assert_eq!(s.stats().udp_rx, 1);
    }
    // Beyond the uplink: the floods (neighbour solicitations to multicast groups), none
    // of the unicast frames between the two.
    let out = drain(&mut far);
    assert!(!out.is_empty());
    for f in &out {
        assert!(f[0] & 1 == 1, "a unicast frame left: {:02x?}", &f[..14]);
    }
    let (pa, pb) = (sw.port_stats(0).unwrap(), sw.port_stats(1).unwrap());
    assert!(pa.frames_in > pa.flooded && pb.frames_in > pb.flooded);
    assert_eq!(
        sw.uplink_stats().unwrap().frames_out,
        out.len() as u64,
        "{pa:?} {pb:?}"
    );
}

/// The same over IPv4: ARP broadcast through the switch, answered; the datagrams pass
/// each function's identity check.
#[test]
fn two_stacks_exchange_datagrams_over_ipv4_through_the_switch() {
    let (sw, ports, far) = switch(2, true);
    let mut far = far.unwrap();
    let mut ports = ports.into_iter();
    let t = Instant::now();
    let v4 = |d: u8| std::net::Ipv4Addr::new(198, 18, 0, d).to_ipv6_mapped();
    let with_v4 = |mut c: NetConfig, d: u8| {
        c.addrs.push((v4(d), 120));
        c
    };
    let mut a = Interface::new(
        Stack::new(&with_v4(config(MAC_A, ADDR_A, 3), 10), t),
        Box::new(ports.next().unwrap()),
    );
    let mut b = Interface::new(
        Stack::new(&with_v4(config(MAC_B, ADDR_B, 4), 11), t),
        Box::new(ports.next().unwrap()),
    );
    a.stack
        .send_udp(None, 1000, v4(11), 9, b"IPv4 through the switch", t)
        .unwrap();
    a.flush();
    assert_eq!(
        until_received(&mut a, &mut b),
        Some((v4(10), 1000, b"IPv4 through the switch".to_vec()))
    );
    b.stack
        .send_udp(None, 9, v4(10), 1000, b"and back", Instant::now())
        .unwrap();
    b.flush();
    assert_eq!(
        until_received(&mut b, &mut a),
        Some((v4(11), 9, b"and back".to_vec()))
    );
    for s in [&a.stack, &b.stack] {
        assert_eq!(s.stats().udp_rx, 1);
    }
    assert_eq!(
        sw.port_stats(0).unwrap().spoofed + sw.port_stats(1).unwrap().spoofed,
        0
    );
    // The uplink saw ARP's broadcasts and the announcements, no unicast.
    let out = drain(&mut far);
    assert!(out.iter().any(|f| f[12..14] == [0x08, 0x06]));
    assert!(out.iter().all(|f| f[0] & 1 == 1));
}
