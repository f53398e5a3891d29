//! Static neighbours set by the driver (ADD_NEIGH): a QP's datagram to such an address
//! leaves for its MAC at once, with no ARP request or neighbour solicitation before it;
//! once the entry is deleted (DEL_NEIGH) the address is resolved again. The test holds the
//! far end of the device's cable and reads the frames themselves; nothing answers there.

use std::time::{Duration, Instant};

use qpip_device::backend::cable::Cable;
use qpip_device::backend::{Backend, MAX_FRAME};

use crate::support::*;

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_ARP: u16 = 0x0806;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const PROTO_UDP: u8 = 17;
const PROTO_ICMPV6: u8 = 58;
const ICMP_NEIGHBOR_SOLICIT: u8 = 135;

/// What a frame from the device is to this test.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    /// A UDP datagram, to this MAC.
    Udp([u8; 6]),
    /// An ARP request or a neighbour solicitation for this address (mapped for IPv4).
    Solicitation([u8; 16]),
    Other,
}

fn classify(f: &[u8]) -> Seen {
    let dst: [u8; 6] = f[..6].try_into().unwrap();
    let ethertype = u16::from_be_bytes([f[12], f[13]]);
    let l3 = &f[14..];
    match ethertype {
        ETHERTYPE_IPV4 if l3[9] == PROTO_UDP => Seen::Udp(dst),
        ETHERTYPE_IPV6 if l3[6] == PROTO_UDP => Seen::Udp(dst),
        ETHERTYPE_ARP if u16::from_be_bytes([l3[6], l3[7]]) == 1 => {
            let target: [u8; 4] = l3[24..28].try_into().unwrap();
            Seen::Solicitation(std::net::Ipv4Addr::from(target).to_ipv6_mapped().octets())
        }
        ETHERTYPE_IPV6 if l3[6] == PROTO_ICMPV6 && l3[40] == ICMP_NEIGHBOR_SOLICIT => {
            Seen::Solicitation(l3[48..64].try_into().unwrap())
        }
        _ => Seen::Other,
    }
}

/// The frames the device sends until one satisfies `until` (which is last), or panics
/// after a while.
fn frames_until(wire: &mut Cable, what: &str, until: impl Fn(&Seen) -> bool) -> Vec<Seen> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buf = vec![0u8; MAX_FRAME];
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        match wire.recv(&mut buf).expect("the cable") {
            Some(n) => {
                let s = classify(&buf[..n]);
                let done = until(&s);
                seen.push(s);
                if done {
                    return seen;
                }
            }
            None => std::thread::sleep(Duration::from_millis(1)),
        }
    }
    panic!("{what}: not seen; the device sent {seen:?}");
}

#[test]
fn a_static_neighbour_takes_the_place_of_resolution_until_deleted() {
    for (name, a_addr, peer, mac) in [
        ("neigh6", "fd51:5050::1:1", "fd51:5050::1:9", 0xc1),
        ("neigh4", "198.18.0.1", "198.18.0.9", 0xc4),
    ] {
        let peer_mac = [0x02, 0, 0, 0, 0x99, mac];
        let dir = std::env::temp_dir().join(format!("qpip-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cable = dir.join("cable");
        let mut wire = Cable::open(&cable).expect("the far end of the cable");
        let mut a = cabled_device(
            [0x02, 0, 0, 0, 0, mac],
            a_addr,
            &cable,
            None,
            Default::default(),
        );
        let ctx = a.create_ctx().unwrap();
        let mut u = a.udp_endpoint_in(ctx, UNSPECIFIED, 7010, 16, 32, 4096);

        a.add_neigh(ip(peer), peer_mac).unwrap();
        a.post_send(&mut u.qp, &[inline_wqe(1, ip(peer), 7011, b"static")]);
        assert_cqe(&a.wait_cqe(&mut u.scq), CQE_STATUS_SUCCESS, 0, name);
        let seen = frames_until(&mut wire, name, |s| matches!(s, Seen::Udp(_)));
        assert_eq!(
            seen.last(),
            Some(&Seen::Udp(peer_mac)),
            "{name}: the datagram goes to the static entry's MAC"
        );
        assert!(
            !seen.contains(&Seen::Solicitation(ip(peer))),
            "{name}: the device asked for a static neighbour: {seen:?}"
        );

        a.del_neigh(ip(peer)).unwrap();
        a.post_send(&mut u.qp, &[inline_wqe(2, ip(peer), 7011, b"resolved")]);
        assert_cqe(&a.wait_cqe(&mut u.scq), CQE_STATUS_SUCCESS, 0, name);
        let seen = frames_until(&mut wire, &format!("{name}: a solicitation"), |s| {
            *s == Seen::Solicitation(ip(peer))
        });
        assert!(
            !seen.iter().any(|s| matches!(s, Seen::Udp(_))),
            "{name}: a datagram went before the address was resolved: {seen:?}"
        );
        drop((a, wire));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
