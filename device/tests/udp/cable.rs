//! Two devices, each driven by its own fake guest, joined by a cable: UDP queue pairs on
//! one exchange datagrams with queue pairs on the other over real Ethernet/IPv6/UDP frames
//! (neighbour discovery first, fragmentation for the large ones), and over IPv4 (ARP),
//! through the engine's network seam.

use std::time::Duration;

use crate::support::*;

fn device(mac: [u8; 6], addr: &str, cable: &std::path::Path) -> FakeGuest {
    cabled_device(mac, addr, cable, None, Default::default())
}

#[test]
fn udp_queue_pairs_talk_across_a_cable() {
    talk_across_a_cable("two", ["fd51:5050::1:1", "fd51:5050::1:2"], 0xa1, 65_527);
}

/// Over IPv4 (ARP first, IPv4 fragments for the large ones), up to IPv4's largest
/// datagram; one byte more is refused at the send.
#[test]
fn udp_queue_pairs_talk_across_a_cable_over_ipv4() {
    let (mut a, mut ua) = talk_across_a_cable("two4", ["198.18.1.1", "198.18.1.2"], 0xa4, 65_507);
    a.post_send(
        &mut ua.qp,
        &[send_wqe(
            9,
            ip("198.18.1.2"),
            7002,
            &[ua.buf.sge(0, 65_508, ua.mr.lkey)],
        )],
    );
    assert_cqe(
        &a.wait_cqe(&mut ua.scq),
        CQE_STATUS_LOCAL_LENGTH,
        0,
        "past the largest IPv4 datagram",
    );
}

/// A's and B's QPs exchange datagrams of up to `largest` bytes across a cable between
/// the devices at `a_addr` and `b_addr`. Returns device A and its endpoint.
fn talk_across_a_cable(
    name: &str,
    [a_addr, b_addr]: [&str; 2],
    mac: u8,
    largest: usize,
) -> (FakeGuest, Udp) {
    let dir = std::env::temp_dir().join(format!("qpip-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cable = dir.join("cable");
    let mut a = device([0x02, 0, 0, 0, 0, mac], a_addr, &cable);
    let mut b = device([0x02, 0, 0, 0, 0, mac + 1], b_addr, &cable);
    let ca = a.create_ctx().unwrap();
    let cb = b.create_ctx().unwrap();
    let mut ua = a.udp_endpoint_in(ca, ip(a_addr), 7001, 16, 32, 64 * 1024);
    let mut ub = b.udp_endpoint_in(cb, UNSPECIFIED, 7002, 16, 32, 64 * 1024);

    for (n, tag) in [(1usize, 1u64), (1400, 2), (20_000, 3), (largest, 4)] {
        let payload: Vec<u8> = (0..n).map(|i| (i * 7 + n) as u8).collect();
        a.buf_write(&ua.buf, 0, &payload);
        b.post_recv(
            &mut ub.qp,
            &[recv_wqe(
                100 + tag,
                &[ub.buf.sge(0, ub.buf.len as u32, ub.mr.lkey)],
            )],
        );
        a.post_send(
            &mut ua.qp,
            &[send_wqe(
                tag,
                ip(b_addr),
                ub.port,
                &[ua.buf.sge(0, n as u32, ua.mr.lkey)],
            )],
        );
        let sc = a.wait_cqe(&mut ua.scq);
        assert_cqe(&sc, CQE_STATUS_SUCCESS, 0, "send across the cable");
        let rc = b
            .try_wait_cqe(&mut ub.rcq, Duration::from_secs(10))
            .unwrap_or_else(|| panic!("the {n}-byte datagram did not arrive"));
        assert_cqe(&rc, CQE_STATUS_SUCCESS, 0, "receive across the cable");
        assert_eq!(
            (rc.wr_id, rc.byte_len, rc.src_port),
            (100 + tag, n as u32, 7001)
        );
        assert_eq!(rc.src_addr, ip(a_addr), "source address");
        assert_eq!(b.buf_read(&ub.buf, 0, n), payload, "{n} bytes intact");
    }

    // And back.
    a.post_recv(
        &mut ua.qp,
        &[recv_wqe(7, &[ua.buf.sge(0, 4096, ua.mr.lkey)])],
    );
    b.post_send(&mut ub.qp, &[inline_wqe(8, ip(a_addr), 7001, b"pong")]);
    assert_cqe(&b.wait_cqe(&mut ub.scq), CQE_STATUS_SUCCESS, 0, "reply");
    let rc = a
        .try_wait_cqe(&mut ua.rcq, Duration::from_secs(10))
        .expect("reply arrives");
    assert_eq!((rc.byte_len, rc.src_port), (4, 7002));
    assert_eq!(a.buf_read(&ua.buf, 0, 4), b"pong");

    // The network's counters are in QUERY_STATS: frames both ways, the 20000 and 65527-byte
    // datagrams came in fragments, and nothing was dropped on this clean cable.
    let s = b.query_stats().counters;
    assert!(
        s[STAT_NET_RX_FRAMES as usize] >= 4 && s[STAT_NET_TX_FRAMES as usize] >= 1,
        "{s:?}"
    );
    assert!(
        s[STAT_NET_FRAGMENTS_RX as usize] >= 2 + 45 && s[STAT_NET_REASSEMBLED as usize] >= 2,
        "{s:?}"
    );
    assert_eq!(s[STAT_NET_RX_DROPPED as usize], 0, "{s:?}");
    drop(b);
    let _ = std::fs::remove_dir_all(&dir);
    (a, ua)
}

#[test]
fn a_destination_off_link_has_no_route() {
    let dir = std::env::temp_dir().join(format!("qpip-noroute-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut a = device(
        [0x02, 0, 0, 0, 0, 0xa3],
        "fd51:5050::1:1",
        &dir.join("cable"),
    );
    let ca = a.create_ctx().unwrap();
    let mut ua = a.udp_endpoint_in(ca, UNSPECIFIED, 7003, 16, 32, 4096);
    // Not within any of the device's prefixes, and there is no router: no route.
    a.post_send(&mut ua.qp, &[inline_wqe(9, ip("2001:db8::99"), 9, b"x")]);
    assert_cqe(
        &a.wait_cqe(&mut ua.scq),
        CQE_STATUS_BAD_DEST,
        CQE_DETAIL_NO_ROUTE,
        "off-link",
    );
    drop(a);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A's destination lies outside its prefix, behind a gateway on the link: B, which holds
/// the far address besides its on-link one (a host route on a router would do the same).
/// A's route sends the datagram to B's MAC, resolved for the gateway; without the route
/// (deleted), no route again. Both families.
#[test]
fn a_destination_off_link_is_reached_through_its_routes_gateway() {
    for (name, [a_addr, gw, far], [dest, plen], mac) in [
        (
            "route6",
            ["fd51:5050::1:1", "fd51:5050::1:2", "2001:db8::9"],
            ["2001:db8::", "32"],
            0xb1,
        ),
        (
            "route4",
            ["198.18.0.1", "198.18.0.2", "198.18.1.9"],
            ["198.18.1.0", "120"],
            0xb4,
        ),
    ] {
        let plen: u8 = plen.parse().unwrap();
        let dir = std::env::temp_dir().join(format!("qpip-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cable = dir.join("cable");
        let mut a = device([0x02, 0, 0, 0, 0, mac], a_addr, &cable);
        let mut b = device([0x02, 0, 0, 0, 0, mac + 1], gw, &cable);
        b.add_addr(ip(far), 128).unwrap();
        let ca = a.create_ctx().unwrap();
        let cb = b.create_ctx().unwrap();
        let mut ua = a.udp_endpoint_in(ca, UNSPECIFIED, 7004, 16, 32, 4096);
        let mut ub = b.udp_endpoint_in(cb, ip(far), 7005, 16, 32, 4096);

        a.post_send(&mut ua.qp, &[inline_wqe(1, ip(far), ub.port, b"x")]);
        assert_cqe(
            &a.wait_cqe(&mut ua.scq),
            CQE_STATUS_BAD_DEST,
            CQE_DETAIL_NO_ROUTE,
            &format!("{name}: before the route"),
        );
        // A gateway off the link is passed over.
        a.add_route(ip(dest), plen, ip(far), 5).unwrap();
        a.post_send(&mut ua.qp, &[inline_wqe(2, ip(far), ub.port, b"x")]);
        assert_cqe(
            &a.wait_cqe(&mut ua.scq),
            CQE_STATUS_BAD_DEST,
            CQE_DETAIL_NO_ROUTE,
            &format!("{name}: a gateway off the link"),
        );
        a.add_route(ip(dest), plen, ip(gw), 0).unwrap();
        for (i, wr_id) in [3u64, 4].into_iter().enumerate() {
            b.post_recv(
                &mut ub.qp,
                &[recv_wqe(wr_id, &[ub.buf.sge(0, 4096, ub.mr.lkey)])],
            );
            let msg = format!("through the gateway {i}");
            a.post_send(
                &mut ua.qp,
                &[inline_wqe(wr_id, ip(far), ub.port, msg.as_bytes())],
            );
            assert_cqe(
                &a.wait_cqe(&mut ua.scq),
                CQE_STATUS_SUCCESS,
                0,
                &format!("{name}: send"),
            );
            let rc = b.try_wait_cqe(&mut ub.rcq, Duration::from_secs(10));
            let rc = rc.unwrap_or_else(|| panic!("{name}: nothing arrived at {far}"));
            assert_eq!(rc.byte_len as usize, msg.len(), "{name}");
            assert_eq!(rc.src_addr, ip(a_addr), "{name}: the source is A's address");
            assert_eq!(b.buf_read(&ub.buf, 0, msg.len()), msg.as_bytes());
        }
        a.del_route(ip(dest), plen, 0).unwrap();
        a.post_send(&mut ua.qp, &[inline_wqe(5, ip(far), ub.port, b"x")]);
        assert_cqe(
            &a.wait_cqe(&mut ua.scq),
            CQE_STATUS_BAD_DEST,
            CQE_DETAIL_NO_ROUTE,
            &format!("{name}: after DEL_ROUTE"),
        );
        drop((a, b));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
