//! Who a function is: an untrusted function sends only with its own MAC and IPv6
//! addresses (else dropped and counted, never learned), a trusted one may send as anyone
//! without moving another's MAC, a claim of another function's MAC or address is refused,
//! and each port has its own share of the MAC table, so one port sending from countless
//! addresses cannot push out or crowd out anyone else's.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use qpip_device::backend::switch::{
    Identity, Mac, PortId, PortOptions, SwitchConfig, MAC_TABLE, PORT_MACS,
};
use qpip_device::backend::Backend;
use qpip_device::net::wire::link_local;

use crate::{
    drain, drain_all, frame, switch, switch_with, tag, tags, A, B, BROADCAST, C, H, UNKNOWN,
};

const ADDR_A: Ipv6Addr = Ipv6Addr::new(0xfd51, 0x5050, 0, 0, 0, 0, 1, 0xa);
const ADDR_B: Ipv6Addr = Ipv6Addr::new(0xfd51, 0x5050, 0, 0, 0, 0, 1, 0xb);
const ELSEWHERE: Ipv6Addr = Ipv6Addr::new(0xfd51, 0x5050, 0, 0, 0, 0, 9, 9);

/// An IPv6 frame (header only, no upper layer) from `src_mac`/`src` carrying `tag` in
/// its flow label's place (the switch reads no further than the source address).
fn ipv6_frame(dst: &Mac, src_mac: &Mac, src: Ipv6Addr, tag: u32) -> Vec<u8> {
    let mut f = Vec::with_capacity(54 + 4);
    f.extend_from_slice(dst);
    f.extend_from_slice(src_mac);
    f.extend_from_slice(&[0x86, 0xdd]);
    f.extend_from_slice(&tag.to_be_bytes()); // stands where `tag` reads
    f.extend_from_slice(&[0, 0, 59, 64]); // payload length 0, no next header
    f.extend_from_slice(&src.octets());
    f.extend_from_slice(&"ff02::1".parse::<Ipv6Addr>().unwrap().octets());
    f
}

/// A unicast MAC of its own per `i`.
fn mac(prefix: u8, i: u32) -> Mac {
    let b = i.to_be_bytes();
    [0x02, prefix, b[0], b[1], b[2], b[3]]
}

#[test]
fn a_spoofed_source_mac_is_dropped_counted_and_not_learned() {
    let (sw, mut p, far) = switch(3, true);
    let mut far = far.unwrap();
    // Function 0 (A) sends as function 1 (B), and as a host nobody knows.
    p[0].send(&frame(&BROADCAST, &B, 1)).unwrap();
    p[0].send(&frame(&UNKNOWN, &H, 2)).unwrap();
    p[0].send(&frame(&C, &H, 3)).unwrap();
    let got = drain_all(&mut p);
    assert!(got.iter().all(|f| f.is_empty()), "{got:?}");
    assert!(drain(&mut far).is_empty());
    let s = p[0].stats();
    assert_eq!((s.frames_in, s.spoofed, s.flooded), (3, 3, 0), "{s:?}");
    // Nothing learned, B stays where it is and still gets its frames.
    assert_eq!(sw.lookup(&B), Some(PortId::Port(1)));
    assert_eq!(sw.lookup(&H), None);
    assert_eq!(sw.table_stats().learned, 0);
    p[2].send(&frame(&B, &C, 4)).unwrap();
    assert_eq!(tags(&mut p[1]), [4]);
    // As itself, it goes.
    p[0].send(&frame(&B, &A, 5)).unwrap();
    assert_eq!(tags(&mut p[1]), [5]);
    assert_eq!(p[0].stats().spoofed, 3);
}

#[test]
fn an_ipv6_source_must_be_one_of_the_functions_addresses() {
    let (_sw, mut p, far) = switch(2, true);
    let mut far = far.unwrap();
    p[0].claim_identity(A, &[ADDR_A]).unwrap();
    p[1].claim_identity(B, &[ADDR_B]).unwrap();
    // Its configured address, its link-local one, and :: (duplicate address detection).
    for (i, src) in [ADDR_A, link_local(&A), Ipv6Addr::UNSPECIFIED]
        .into_iter()
        .enumerate()
    {
        p[0].send(&ipv6_frame(&B, &A, src, i as u32)).unwrap();
        assert_eq!(tags(&mut p[1]), [i as u32], "from {src}");
    }
    // Another function's address (global or link-local), anybody's: dropped.
    for src in [ADDR_B, link_local(&B), ELSEWHERE] {
        p[0].send(&ipv6_frame(&BROADCAST, &A, src, 9)).unwrap();
    }
    // An IPv6 frame cut before its source address cannot say who sent it.
    p[0].send(&ipv6_frame(&BROADCAST, &A, ADDR_A, 9)[..30])
        .unwrap();
    assert!(drain_all(&mut p).iter().all(|f| f.is_empty()));
    assert!(drain(&mut far).is_empty());
    assert_eq!(p[0].stats().spoofed, 4);
    // A new address, once claimed, is its own.
    p[0].claim_identity(A, &[ADDR_A, ELSEWHERE]).unwrap();
    p[0].send(&ipv6_frame(&B, &A, ELSEWHERE, 7)).unwrap();
    assert_eq!(tags(&mut p[1]), [7]);
}

#[test]
fn a_port_that_claimed_nothing_sends_nothing() {
    let (sw, mut p, _) = switch(1, false);
    let mut q = sw.port("unclaimed").unwrap();
    q.send(&frame(&BROADCAST, &H, 1)).unwrap();
    assert!(drain(&mut p[0]).is_empty());
    assert_eq!(q.stats().spoofed, 1);
}

#[test]
fn a_trusted_function_sends_as_anyone_without_moving_a_functions_mac() {
    let (sw, mut p, far) = switch_with(3, true, SwitchConfig::default(), &[0]);
    let mut far = far.unwrap();
    // A host bridged behind function 0: learned there.
    p[0].send(&frame(&BROADCAST, &H, 1)).unwrap();
    let got = drain_all(&mut p);
    assert_eq!((got[1].len(), got[2].len()), (1, 1));
    assert_eq!(tags(&mut far), [1]);
    assert_eq!(sw.lookup(&H), Some(PortId::Port(0)));
    // With function 1's MAC: forwarded, but B stays on port 1.
    p[0].send(&frame(&C, &B, 2)).unwrap();
    assert_eq!(tags(&mut p[2]), [2]);
    assert_eq!(sw.lookup(&B), Some(PortId::Port(1)));
    p[2].send(&frame(&B, &C, 3)).unwrap();
    assert_eq!(tags(&mut p[1]), [3]);
    assert!(drain(&mut p[0]).is_empty());
    // Any IPv6 source.
    p[0].send(&ipv6_frame(&C, &H, ELSEWHERE, 4)).unwrap();
    assert_eq!(tags(&mut p[2]), [4]);
    assert_eq!(p[0].stats().spoofed, 0);
}

#[test]
fn another_functions_mac_or_address_cannot_be_claimed() {
    let (sw, mut p, _) = switch(2, false);
    p[0].claim_identity(A, &[ADDR_A]).unwrap();
    // Function 3 is configured but has no guest yet: its identity is reserved.
    let d: Mac = mac(0xdd, 1);
    let addr_d: Ipv6Addr = "fd51:5050::1:d".parse().unwrap();
    sw.declare(
        "f3",
        PortOptions {
            trusted: false,
            reserved: Some(Identity {
                mac: d,
                addrs: vec![addr_d],
            }),
        },
    );
    for (mac, addrs, what) in [
        (A, vec![], "function 0's MAC"),
        (B, vec![ADDR_A], "function 0's address"),
        (B, vec![link_local(&A)], "function 0's link-local address"),
        (d, vec![], "a reserved MAC"),
        (B, vec![addr_d], "a reserved address"),
    ] {
        let e = p[1].claim_identity(mac, &addrs).expect_err(what);
        assert!(e.to_string().contains("function f"), "{what}: {e}");
    }
    // Refused claims changed nothing.
    assert_eq!(sw.lookup(&B), Some(PortId::Port(1)));
    assert_eq!(sw.lookup(&A), Some(PortId::Port(0)));
    // A free MAC moves the function's pin; its old MAC is no longer its to send with.
    let e: Mac = mac(0xee, 1);
    p[1].claim_identity(e, &[]).unwrap();
    assert_eq!(sw.lookup(&e), Some(PortId::Port(1)));
    assert_eq!(sw.lookup(&B), None);
    p[1].send(&frame(&A, &B, 1)).unwrap();
    assert!(drain(&mut p[0]).is_empty());
    p[1].send(&frame(&A, &e, 2)).unwrap();
    assert_eq!(tags(&mut p[0]), [2]);
    // B is free now: function 0 may take it.
    p[0].claim_identity(B, &[ADDR_A]).unwrap();
}

/// A trusted function floods the table with new source MACs: it learns its share and
/// no more, the uplink's hosts and the functions' own MACs stay, the frames still go,
/// and the uplink still learns new hosts. The same from the uplink's side.
#[test]
fn one_port_sending_from_countless_macs_cannot_evict_or_exhaust_the_others() {
    let (sw, mut p, far) = switch_with(2, true, SwitchConfig::default(), &[0]);
    let mut far = far.unwrap();
    let hosts: Vec<Mac> = (0..10).map(|i| mac(0x11, i)).collect();
    for (i, h) in hosts.iter().enumerate() {
        far.send(&frame(&BROADCAST, h, i as u32)).unwrap();
    }
    drain_all(&mut p);
    drain(&mut far);
    let flood = MAC_TABLE as u32 + 904;
    let mut delivered = 0;
    for round in (0..flood).collect::<Vec<_>>().chunks(500) {
        for &i in round {
            p[0].send(&frame(&B, &mac(0x22, i), i)).unwrap();
        }
        delivered += drain_all(&mut p)[1].len();
    }
    assert_eq!(delivered, flood as usize, "every frame for B reached B");
    let s = p[0].stats();
    assert_eq!(s.not_learned, (flood as usize - PORT_MACS) as u64, "{s:?}");
    let t = sw.table_stats();
    assert_eq!(t.learned, PORT_MACS + hosts.len(), "{t:?}");
    for h in &hosts {
        assert_eq!(sw.lookup(h), Some(PortId::Uplink), "an uplink host stays");
    }
    assert_eq!(sw.lookup(&A), Some(PortId::Port(0)));
    assert_eq!(sw.lookup(&B), Some(PortId::Port(1)));
    let newcomer = mac(0x11, 99);
    far.send(&frame(&A, &newcomer, 0)).unwrap();
    drain_all(&mut p);
    assert_eq!(sw.lookup(&newcomer), Some(PortId::Uplink));

    // Now from beyond the uplink: its share fills, the trusted port's entries stay, and
    // the trusted port still learns.
    for round in (0..flood).collect::<Vec<_>>().chunks(500) {
        for &i in round {
            far.send(&frame(&A, &mac(0x33, i), i)).unwrap();
        }
        drain_all(&mut p);
    }
    let up = sw.uplink_stats().unwrap();
    assert_eq!(
        up.not_learned,
        (flood as usize - (PORT_MACS - hosts.len() - 1)) as u64
    );
    assert_eq!(sw.lookup(&mac(0x22, 0)), Some(PortId::Port(0)));
    assert_eq!(
        sw.lookup(&mac(0x22, PORT_MACS as u32 - 1)),
        Some(PortId::Port(0))
    );
    p[0].send(&frame(&B, &mac(0x44, 0), 0)).unwrap();
    // (its own share is full: counted; a port with room would learn it)
    assert_eq!(p[0].stats().not_learned, s.not_learned + 1);
    assert_eq!(sw.table_stats().learned, 2 * PORT_MACS);
}

/// Addresses a port has not been seen with for the age make room for new ones; until
/// then a full share refuses them.
#[test]
fn a_full_share_makes_room_from_addresses_not_seen_for_the_age() {
    let config = SwitchConfig {
        port_macs: 4,
        mac_age: Duration::from_millis(100),
    };
    let (sw, mut p, far) = switch_with(1, true, config, &[]);
    let mut far = far.unwrap();
    for i in 0..5 {
        far.send(&frame(&A, &mac(0x11, i), i)).unwrap();
    }
    assert_eq!(drain_all(&mut p)[0].len(), 5);
    assert_eq!(sw.lookup(&mac(0x11, 4)), None);
    assert_eq!(sw.uplink_stats().unwrap().not_learned, 1);
    std::thread::sleep(Duration::from_millis(150));
    far.send(&frame(&A, &mac(0x11, 5), 5)).unwrap();
    assert_eq!(
        drain_all(&mut p)[0]
            .iter()
            .map(|f| tag(f))
            .collect::<Vec<_>>(),
        [5]
    );
    assert_eq!(sw.lookup(&mac(0x11, 5)), Some(PortId::Uplink));
    let t = sw.table_stats();
    assert_eq!((t.learned, t.aged), (1, 4), "{t:?}");
}

/// An IPv4 frame (header only) from `src_mac`/`src` carrying `tag` where its version,
/// length and total length would be (the switch reads no further than the source).
fn ipv4_frame(dst: &Mac, src_mac: &Mac, src: Ipv4Addr, tag: u32) -> Vec<u8> {
    let mut f = Vec::with_capacity(34);
    f.extend_from_slice(dst);
    f.extend_from_slice(src_mac);
    f.extend_from_slice(&[0x08, 0x00]);
    f.extend_from_slice(&tag.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0x40, 0, 64, 59, 0, 0]);
    f.extend_from_slice(&src.octets());
    f.extend_from_slice(&[198, 18, 0, 255]);
    f
}

/// An ARP request from `src_mac` whose sender is `sender_mac`/`sender`, with `tag` where
/// its hardware and protocol types would be.
fn arp_frame(src_mac: &Mac, sender_mac: &Mac, sender: Ipv4Addr, tag: u32) -> Vec<u8> {
    let mut f = Vec::with_capacity(42);
    f.extend_from_slice(&BROADCAST);
    f.extend_from_slice(src_mac);
    f.extend_from_slice(&[0x08, 0x06]);
    f.extend_from_slice(&tag.to_be_bytes());
    f.extend_from_slice(&[6, 4, 0, 1]);
    f.extend_from_slice(sender_mac);
    f.extend_from_slice(&sender.octets());
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&[198, 18, 0, 1]);
    f
}

const V4_A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 10);
const V4_B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 11);

#[test]
fn an_ipv4_source_or_arp_sender_must_be_the_functions_own() {
    let (_sw, mut p, far) = switch(2, true);
    let mut far = far.unwrap();
    p[0].claim_identity(A, &[ADDR_A, V4_A.to_ipv6_mapped()])
        .unwrap();
    p[1].claim_identity(B, &[ADDR_B, V4_B.to_ipv6_mapped()])
        .unwrap();
    // Its own IPv4 address; ARP with its MAC and address, or 0.0.0.0 (a probe).
    p[0].send(&ipv4_frame(&B, &A, V4_A, 1)).unwrap();
    assert_eq!(tags(&mut p[1]), [1]);
    p[0].send(&arp_frame(&A, &A, V4_A, 2)).unwrap();
    p[0].send(&arp_frame(&A, &A, Ipv4Addr::UNSPECIFIED, 3))
        .unwrap();
    assert_eq!(tags(&mut p[1]), [2, 3]);
    assert_eq!(tags(&mut far), [2, 3]);
    // Another function's IPv4 address, anybody's; ARP posing as another function's
    // address or MAC (which would poison the neighbours' caches): dropped.
    let elsewhere = Ipv4Addr::new(198, 18, 0, 99);
    for src in [V4_B, elsewhere] {
        p[0].send(&ipv4_frame(&BROADCAST, &A, src, 9)).unwrap();
    }
    p[0].send(&arp_frame(&A, &A, V4_B, 9)).unwrap();
    p[0].send(&arp_frame(&A, &B, V4_A, 9)).unwrap();
    p[0].send(&arp_frame(&A, &H, elsewhere, 9)).unwrap();
    // Cut before the source says who sent it.
    p[0].send(&ipv4_frame(&BROADCAST, &A, V4_A, 9)[..28])
        .unwrap();
    p[0].send(&arp_frame(&A, &A, V4_A, 9)[..30]).unwrap();
    // An IPv4 address is not an IPv6 source, nor the other way.
    p[0].send(&ipv6_frame(&BROADCAST, &A, V4_A.to_ipv6_mapped(), 9))
        .unwrap();
    assert!(drain_all(&mut p).iter().all(|f| f.is_empty()));
    assert!(drain(&mut far).is_empty());
    assert_eq!(p[0].stats().spoofed, 8);
    // Nor can a function claim another's IPv4 address.
    let e = p[1]
        .claim_identity(B, &[V4_A.to_ipv6_mapped()])
        .expect_err("function 0's IPv4 address");
    assert!(e.to_string().contains("function f"), "{e}");
}

/// A DHCP client's datagram (UDP `sport` to `dport`) from 0.0.0.0 to the broadcast address,
/// IPv4 and UDP headers only.
fn dhcp_frame(src_mac: &Mac, sport: u16, dport: u16) -> Vec<u8> {
    let mut f = Vec::with_capacity(42);
    f.extend_from_slice(&BROADCAST);
    f.extend_from_slice(src_mac);
    f.extend_from_slice(&[0x08, 0x00]);
    f.extend_from_slice(&[0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0]);
    f.extend_from_slice(&[0, 0, 0, 0]);
    f.extend_from_slice(&[255, 255, 255, 255]);
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&[0, 8, 0, 0]);
    f
}

#[test]
fn from_0_0_0_0_only_a_dhcp_client_datagram_passes() {
    let (_sw, mut p, far) = switch(2, true);
    let mut far = far.unwrap();
    p[0].claim_identity(A, &[ADDR_A]).unwrap();
    let discover = dhcp_frame(&A, 68, 67);
    p[0].send(&discover).unwrap();
    assert_eq!(drain(&mut far), std::slice::from_ref(&discover));
    assert_eq!(drain(&mut p[1]), [discover]);
    // Other ports, or another MAC: a spoof.
    p[0].send(&dhcp_frame(&A, 67, 68)).unwrap();
    p[0].send(&dhcp_frame(&A, 5000, 67)).unwrap();
    p[0].send(&dhcp_frame(&B, 68, 67)).unwrap();
    assert!(drain(&mut far).is_empty());
    assert_eq!(p[0].stats().spoofed, 3);
}
