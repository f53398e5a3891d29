//! The device's identity on the link: SET_MAC, ADD_ADDR and DEL_ADDR within their limits,
//! and LIST_ADDRS (the link-local address first) with its buffer; its routes and static
//! neighbours within theirs.

use super::check_result_buffer;
use crate::support::*;

#[test]
fn set_mac_changes_the_mac_and_refuses_group_addresses() {
    let mut g = FakeGuest::new();
    let mac = [0x02, 0x11, 0x22, 0x33, 0x44, 0x55];
    g.set_mac(mac).unwrap();
    assert_eq!(g.query_device().mac, mac);
    assert_admin_err(
        g.set_mac([0x03, 0, 0, 0, 0, 1]),
        ADMIN_STATUS_BAD_PARAM,
        "SET_MAC multicast",
    );
    assert_admin_err(
        g.set_mac([0xff; 6]),
        ADMIN_STATUS_BAD_PARAM,
        "SET_MAC broadcast",
    );
    assert_eq!(
        g.query_device().mac,
        mac,
        "a refused SET_MAC changes nothing"
    );
}

#[test]
fn addresses_are_added_and_deleted_within_the_limit() {
    let mut g = FakeGuest::new();
    assert_admin_err(
        g.add_addr(ip("ff02::1"), 64),
        ADMIN_STATUS_BAD_PARAM,
        "ADD_ADDR multicast",
    );
    assert_admin_err(
        g.add_addr(UNSPECIFIED, 64),
        ADMIN_STATUS_BAD_PARAM,
        "ADD_ADDR ::",
    );
    assert_admin_err(
        g.add_addr(ip("2001:db8::1"), 0),
        ADMIN_STATUS_BAD_PARAM,
        "ADD_ADDR /0",
    );
    assert_admin_err(
        g.add_addr(ip("2001:db8::1"), 129),
        ADMIN_STATUS_BAD_PARAM,
        "ADD_ADDR /129",
    );
    for i in 0..MAX_ADDRS {
        g.add_addr(ip(&format!("2001:db8::{:x}", i + 1)), 64)
            .unwrap_or_else(|s| panic!("ADD_ADDR #{i}: {}", admin_status_name(s)));
    }
    assert_admin_err(
        g.add_addr(ip("2001:db8::ff"), 64),
        ADMIN_STATUS_NO_RESOURCES,
        "ADD_ADDR beyond MAX_ADDRS",
    );
    g.del_addr(ip("2001:db8::3")).unwrap();
    assert!(
        g.del_addr(ip("2001:db8::3")).is_err(),
        "deleting an absent address fails"
    );
    g.add_addr(ip("2001:db8::ff"), 128)
        .expect("room again after DEL_ADDR");
}

#[test]
fn list_addrs_reports_the_link_local_address_first_then_the_configured_ones() {
    use qpip_device::engine::EngineConfig;
    use qpip_device::function::FunctionConfig;
    use qpip_device::vfio::ServeOptions;
    let mac = [0x02, 0x51, 0x50, 0x00, 0x0a, 0x0b];
    let mut g = FakeGuest::with_options(ServeOptions {
        core: FunctionConfig {
            engine: EngineConfig {
                mac,
                addrs: vec![
                    ("fd51:5050::1:1".parse().unwrap(), 64),
                    ("2001:db8::7".parse().unwrap(), 128),
                ],
                ..EngineConfig::default()
            },
            ..FunctionConfig::default()
        },
    });
    // What qpipd was started with (--mac, --ip) shows.
    assert_eq!(
        g.list_addrs(),
        vec![
            (link_local(mac), 64, ADDR_FLAG_LINK_LOCAL),
            (ip("fd51:5050::1:1"), 64, 0),
            (ip("2001:db8::7"), 128, 0),
        ]
    );
    // Changes through the admin queue show in their order; a new MAC is a new link-local.
    g.del_addr(ip("fd51:5050::1:1")).unwrap();
    g.add_addr(ip("2001:db8::8"), 48).unwrap();
    let mac2 = [0x02, 0, 0, 0, 0, 0x42];
    g.set_mac(mac2).unwrap();
    assert_eq!(
        g.list_addrs(),
        vec![
            (link_local(mac2), 64, ADDR_FLAG_LINK_LOCAL),
            (ip("2001:db8::7"), 128, 0),
            (ip("2001:db8::8"), 48, 0),
        ]
    );
    // A full list: every entry used.
    for i in 0..MAX_ADDRS - 2 {
        g.add_addr(ip(&format!("2001:db8:1::{:x}", i + 1)), 64)
            .unwrap();
    }
    let all = g.list_addrs();
    assert_eq!(all.len(), MAX_ADDRS as usize + 1);
    assert_eq!(
        all[MAX_ADDRS as usize].0,
        ip(&format!("2001:db8:1::{:x}", MAX_ADDRS - 2))
    );
    // A reset gives back the identity qpipd was started with.
    g.reset();
    g.enable();
    g.setup_admin(ADMIN_DEPTH);
    assert_eq!(g.list_addrs().len(), 3);
}

#[test]
fn list_addrs_buffers_must_be_in_ram_aligned_within_a_page_and_big_enough() {
    let mut g = FakeGuest::new();
    let len = std::mem::size_of::<AddrList>() as u32;
    assert_eq!(len, 224);
    // Without --ip: the link-local address alone.
    let (page, n) = check_result_buffer(&mut g, "LIST_ADDRS", (len, 1), FakeGuest::list_addrs_at);
    assert_eq!(n, 1);
    let l: AddrList = g.read_obj(page);
    assert_eq!(l.entries[0].flags, ADDR_FLAG_LINK_LOCAL);
    assert_eq!(l.entries[0].addr, g.link_local());
}

/// An IPv4 address goes through ADD_ADDR in its IPv4-mapped form, its prefix length
/// counted over 128 bits (97..=128); IPv4's unspecified, broadcast and multicast addresses
/// are refused like IPv6's.
#[test]
fn ipv4_addresses_are_added_in_their_mapped_form() {
    let mut g = FakeGuest::new();
    g.add_addr(ip("198.18.0.2"), 120).expect("an IPv4 /24");
    assert_eq!(g.list_addrs()[1], (ip("::ffff:198.18.0.2"), 120, 0));
    for (addr, plen, what) in [
        ("198.18.0.3", 96, "an IPv4 /0"),
        ("198.18.0.3", 64, "a prefix shorter than the mapped range"),
        ("0.0.0.0", 128, "0.0.0.0"),
        ("255.255.255.255", 128, "the broadcast address"),
        ("224.0.0.1", 128, "a multicast group"),
    ] {
        assert_admin_err(g.add_addr(ip(addr), plen), ADMIN_STATUS_BAD_PARAM, what);
    }
    assert_admin_err(
        g.add_addr(ip("198.18.0.2"), 128),
        ADMIN_STATUS_ADDR_IN_USE,
        "the same address again",
    );
    g.add_addr(ip("198.18.0.3"), 97).expect("an IPv4 /1");
    g.del_addr(ip("198.18.0.2")).unwrap();
    assert_eq!(g.list_addrs().len(), 2);
}

#[test]
fn routes_are_added_and_deleted_within_the_limit() {
    let mut g = FakeGuest::new();
    let gw6 = ip("fd51:5050::1");
    let gw4 = ip("198.18.0.254");
    // The default routes of both families, and a narrower one.
    g.add_route(UNSPECIFIED, 0, gw6, 0).unwrap();
    g.add_route(ip("::ffff:0.0.0.0"), 96, gw4, 0).unwrap();
    g.add_route(ip("198.18.1.0"), 120, gw4, 0).unwrap();
    // The gateway need not be on-link yet (the device has no address here): that is
    // checked when the route is used.
    g.add_route(ip("fd51:5050:0:0:1::"), 80, ip("fe80::1"), 0)
        .unwrap();
    for (dest, plen, gw, what) in [
        (ip("198.18.1.1"), 120, gw4, "bits beyond the prefix"),
        (ip("fd51:5050::"), 129, gw6, "prefix length 129"),
        (ip("198.18.1.0"), 120, gw6, "an IPv6 gateway for IPv4"),
        (UNSPECIFIED, 0, gw4, "an IPv4 gateway for IPv6"),
        (UNSPECIFIED, 0, UNSPECIFIED, "no gateway"),
        (UNSPECIFIED, 0, ip("ff02::1"), "a multicast gateway"),
        (
            ip("198.18.1.0"),
            120,
            ip("255.255.255.255"),
            "a broadcast gateway",
        ),
    ] {
        assert_admin_err(
            g.add_route(dest, plen, gw, 0),
            ADMIN_STATUS_BAD_PARAM,
            &format!("ADD_ROUTE with {what}"),
        );
    }
    // A route is named by its prefix and metric: the same again is refused, whatever its
    // gateway; another metric is another route.
    assert_admin_err(
        g.add_route(ip("198.18.1.0"), 120, ip("198.18.0.253"), 0),
        ADMIN_STATUS_ADDR_IN_USE,
        "ADD_ROUTE twice",
    );
    g.add_route(ip("198.18.1.0"), 120, ip("198.18.0.253"), 10)
        .unwrap();
    // A reserved byte set.
    let mut a = route_args(ip("198.18.2.0"), 120, gw4, 0);
    a.reserved0[1] = 1;
    assert_admin_err(
        g.admin_result(cmd(ADMIN_OP_ADD_ROUTE, 0, 0, &a)),
        ADMIN_STATUS_BAD_OPCODE,
        "ADD_ROUTE with a reserved byte set",
    );
    for i in 5..MAX_ROUTES {
        g.add_route(ip(&format!("fd51:5050::{:x}:0", i)), 112, gw6, 0)
            .unwrap_or_else(|s| panic!("ADD_ROUTE #{i}: {}", admin_status_name(s)));
    }
    assert_admin_err(
        g.add_route(ip("fd51:5050::ff:0"), 112, gw6, 0),
        ADMIN_STATUS_NO_RESOURCES,
        "ADD_ROUTE beyond MAX_ROUTES",
    );
    g.del_route(ip("198.18.1.0"), 120, 0).unwrap();
    assert_admin_err(
        g.del_route(ip("198.18.1.0"), 120, 0),
        ADMIN_STATUS_BAD_HANDLE,
        "DEL_ROUTE of a deleted route",
    );
    assert_admin_err(
        g.del_route(ip("198.18.1.0"), 112, 10),
        ADMIN_STATUS_BAD_HANDLE,
        "DEL_ROUTE with another prefix length",
    );
    g.add_route(ip("fd51:5050::ff:0"), 112, gw6, 0)
        .expect("room again after DEL_ROUTE");
}

#[test]
fn static_neighbours_are_added_and_deleted_within_the_limit() {
    let mut g = FakeGuest::new();
    let mac = [0x02, 0, 0, 0, 0, 0x10];
    g.add_neigh(ip("198.18.0.1"), mac).unwrap();
    g.add_neigh(ip("fd51:5050::1"), mac).unwrap();
    g.add_neigh(ip("fe80::1"), mac).unwrap();
    // The same address again replaces its MAC (`ip neigh replace`): no new entry.
    g.add_neigh(ip("198.18.0.1"), [0x02, 0, 0, 0, 0, 0x11])
        .unwrap();
    for (addr, mac, what) in [
        (UNSPECIFIED, mac, "no address"),
        (ip("::ffff:0.0.0.0"), mac, "the IPv4 unspecified address"),
        (ip("ff02::1"), mac, "a multicast address"),
        (ip("224.0.0.1"), mac, "an IPv4 multicast address"),
        (ip("255.255.255.255"), mac, "the IPv4 broadcast address"),
        (ip("::1"), mac, "loopback"),
        (ip("127.0.0.1"), mac, "IPv4 loopback"),
        (ip("fd51:5050::2"), [0; 6], "a MAC of zeros"),
        (ip("fd51:5050::2"), [0xff; 6], "the broadcast MAC"),
        (
            ip("fd51:5050::2"),
            [0x33, 0x33, 0, 0, 0, 1],
            "a multicast MAC",
        ),
    ] {
        assert_admin_err(
            g.add_neigh(addr, mac),
            ADMIN_STATUS_BAD_PARAM,
            &format!("ADD_NEIGH with {what}"),
        );
    }
    assert_admin_err(
        g.del_neigh(ip("ff02::1")),
        ADMIN_STATUS_BAD_PARAM,
        "DEL_NEIGH of a multicast address",
    );
    let mut a = neighbor_args(ip("fd51:5050::2"), mac);
    a.reserved[25] = 1;
    assert_admin_err(
        g.admin_result(cmd(ADMIN_OP_ADD_NEIGH, 0, 0, &a)),
        ADMIN_STATUS_BAD_OPCODE,
        "ADD_NEIGH with a reserved byte set",
    );
    for i in 3..MAX_NEIGHBORS {
        g.add_neigh(ip(&format!("fd51:5050::1:{i:x}")), mac)
            .unwrap_or_else(|s| panic!("ADD_NEIGH #{i}: {}", admin_status_name(s)));
    }
    assert_admin_err(
        g.add_neigh(ip("fd51:5050::2:0"), mac),
        ADMIN_STATUS_NO_RESOURCES,
        "ADD_NEIGH beyond MAX_NEIGHBORS",
    );
    // A full table still takes a new MAC for an address it holds.
    g.add_neigh(ip("fe80::1"), [0x02, 0, 0, 0, 0, 0x12])
        .expect("ADD_NEIGH replacing an entry of a full table");
    g.del_neigh(ip("198.18.0.1")).unwrap();
    assert_admin_err(
        g.del_neigh(ip("198.18.0.1")),
        ADMIN_STATUS_BAD_HANDLE,
        "DEL_NEIGH of a deleted entry",
    );
    assert_admin_err(
        g.del_neigh(ip("198.18.0.9")),
        ADMIN_STATUS_BAD_HANDLE,
        "DEL_NEIGH of an address never added",
    );
    g.add_neigh(ip("fd51:5050::2:0"), mac)
        .expect("room again after DEL_NEIGH");
}
