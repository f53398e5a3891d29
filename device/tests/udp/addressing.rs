//! Addresses and ports: what a receive completion says of the sender, a QP bound to one
//! address, destinations a send cannot reach, and the link-local and added addresses as the
//! device's own.

use std::net::Ipv6Addr;

use crate::support::*;
use crate::wait_stat;

#[test]
fn receive_completions_carry_wr_id_and_the_senders_address_and_port() {
    let mut g = FakeGuest::new();
    let ll = g.link_local();
    let global = ip("2001:db8::5");
    g.add_addr(global, 64).unwrap();
    let ctx = g.create_ctx().unwrap();
    let mut rx = g.udp_endpoint_in(ctx, UNSPECIFIED, 9100, 8, 16, 4096);
    let from_lo = g.udp_endpoint_in(ctx, LOOPBACK, 6000, 8, 16, 64);
    let from_global = g.udp_endpoint_in(ctx, global, 6001, 8, 16, 64);
    let from_any = g.udp_endpoint_in(ctx, UNSPECIFIED, 0, 8, 16, 64);
    assert_eq!((from_lo.port, from_global.port), (6000, 6001));

    let mut txs = [from_lo, from_global, from_any];
    let cases = [
        (0usize, LOOPBACK, LOOPBACK, u64::MAX),
        (1, ll, global, 0),
        (1, LOOPBACK, global, 0x0123_4567_89ab_cdef),
        (2, global, global, 42),
        (2, ll, ll, 43),
    ];
    for (t, dst, want_src, wr_id) in cases {
        let tx = &mut txs[t];
        g.post_recv(
            &mut rx.qp,
            &[recv_wqe(!wr_id, &[rx.buf.sge(0, 4096, rx.mr.lkey)])],
        );
        let w = inline_wqe(wr_id, dst, rx.port, b"hello");
        g.post_send(&mut tx.qp, &[w]);
        let sc = g.wait_cqe(&mut tx.scq);
        assert_cqe(&sc, CQE_STATUS_SUCCESS, 0, "send");
        assert_eq!(sc.wr_id, wr_id);
        let rc = g.wait_cqe(&mut rx.rcq);
        assert_cqe(&rc, CQE_STATUS_SUCCESS, 0, "receive");
        assert_eq!(rc.wr_id, !wr_id);
        assert_eq!(rc.src_port, tx.port);
        assert_eq!(
            Ipv6Addr::from(rc.src_addr),
            Ipv6Addr::from(want_src),
            "source of a datagram to {}",
            Ipv6Addr::from(dst)
        );
        assert_eq!(rc.imm_data, 0, "UDP carries no immediate data");
    }
}

#[test]
fn a_qp_bound_to_one_address_receives_only_datagrams_to_it() {
    let mut g = FakeGuest::new();
    let global = ip("2001:db8::7");
    g.add_addr(global, 64).unwrap();
    let ctx = g.create_ctx().unwrap();
    let mut rx = g.udp_endpoint_in(ctx, global, 9200, 8, 16, 4096);
    let mut tx = g.udp_endpoint_in(ctx, UNSPECIFIED, 0, 8, 16, 64);
    g.post_recv(
        &mut rx.qp,
        &[recv_wqe(1, &[rx.buf.sge(0, 4096, rx.mr.lkey)])],
    );
    let no_port = g.stat(STAT_UDP_RX_NO_PORT);
    g.post_send(&mut tx.qp, &[inline_wqe(1, LOOPBACK, 9200, b"not for you")]);
    assert_cqe(
        &g.wait_cqe(&mut tx.scq),
        CQE_STATUS_SUCCESS,
        0,
        "send to an unbound address",
    );
    wait_stat(&mut g, STAT_UDP_RX_NO_PORT, no_port + 1);
    g.post_send(&mut tx.qp, &[inline_wqe(2, global, 9200, b"for you")]);
    assert_cqe(
        &g.wait_cqe(&mut tx.scq),
        CQE_STATUS_SUCCESS,
        0,
        "send to the bound address",
    );
    let rc = g.wait_cqe(&mut rx.rcq);
    assert_eq!((rc.status, rc.byte_len), (CQE_STATUS_SUCCESS, 7));
    assert_eq!(g.buf_read(&rx.buf, 0, 7), b"for you");
}

#[test]
fn sends_to_unusable_destinations_fail_with_bad_dest() {
    let mut g = FakeGuest::new();
    let ctx = g.create_ctx().unwrap();
    let mut a = g.udp_endpoint_in(ctx, UNSPECIFIED, 0, 16, 32, 64);
    let rx = g.udp_endpoint_in(ctx, UNSPECIFIED, 9300, 16, 32, 64);
    for (i, (dst, port, detail, what)) in [
        (
            ip("2001:db8::77"),
            rx.port,
            CQE_DETAIL_NO_ROUTE,
            "a non-local address",
        ),
        (
            ip("fe80::1"),
            rx.port,
            CQE_DETAIL_NO_ROUTE,
            "someone else's link-local address",
        ),
        (LOOPBACK, 0, CQE_DETAIL_BAD_ADDRESS, "port 0"),
        (
            UNSPECIFIED,
            rx.port,
            CQE_DETAIL_BAD_ADDRESS,
            "the unspecified address",
        ),
        (
            ip("ff02::1"),
            rx.port,
            CQE_DETAIL_BAD_ADDRESS,
            "a multicast address",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        g.post_send(&mut a.qp, &[inline_wqe(i as u64, dst, port, b"x")]);
        let c = g.wait_cqe(&mut a.scq);
        assert_cqe(&c, CQE_STATUS_BAD_DEST, detail, &format!("send to {what}"));
        assert_eq!(c.wr_id, i as u64);
    }
    // A QP that was never bound cannot send at all.
    let cq = g.create_cq(ctx, 8).unwrap();
    let mut unbound = g.create_qp(ctx, cq.id, cq.id, 4, 4).unwrap();
    let mut cq = cq;
    g.post_send(&mut unbound, &[inline_wqe(9, LOOPBACK, rx.port, b"x")]);
    let c = g.wait_cqe(&mut cq);
    assert_cqe(
        &c,
        CQE_STATUS_BAD_DEST,
        CQE_DETAIL_NOT_BOUND,
        "send from an unbound QP",
    );
    // The QP that got the errors still works.
    g.post_send(&mut a.qp, &[inline_wqe(10, LOOPBACK, rx.port, b"x")]);
    assert_cqe(
        &g.wait_cqe(&mut a.scq),
        CQE_STATUS_SUCCESS,
        0,
        "send after errors",
    );
}

#[test]
fn the_link_local_address_follows_the_mac_and_added_addresses_are_local() {
    let mut g = FakeGuest::new();
    let old = g.link_local();
    let ctx = g.create_ctx().unwrap();
    let mut a = g.udp_endpoint_in(ctx, UNSPECIFIED, 0, 16, 32, 64);
    let mut b = g.udp_endpoint_in(ctx, UNSPECIFIED, 9400, 16, 32, 4096);
    let send = |g: &mut FakeGuest, a: &mut Udp, b: &mut Udp, dst: [u8; 16]| -> Cqe {
        g.post_recv(&mut b.qp, &[recv_wqe(0, &[b.buf.sge(0, 4096, b.mr.lkey)])]);
        g.post_send(&mut a.qp, &[inline_wqe(0, dst, b.port, b"ping")]);
        g.wait_cqe(&mut a.scq)
    };
    let mac = [0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee];
    g.set_mac(mac).unwrap();
    let new = link_local(mac);
    assert_ne!(old, new);
    let c = send(&mut g, &mut a, &mut b, old);
    assert_cqe(
        &c,
        CQE_STATUS_BAD_DEST,
        CQE_DETAIL_NO_ROUTE,
        "send to the link-local address of the old MAC",
    );
    let c = send(&mut g, &mut a, &mut b, new);
    assert_cqe(
        &c,
        CQE_STATUS_SUCCESS,
        0,
        "send to the link-local address of the new MAC",
    );
    let rc = g.wait_cqe(&mut b.rcq);
    assert_eq!(
        (rc.status, rc.byte_len, rc.src_addr),
        (CQE_STATUS_SUCCESS, 4, new)
    );

    let global = ip("2001:db8:1::1");
    let c = send(&mut g, &mut a, &mut b, global);
    assert_cqe(
        &c,
        CQE_STATUS_BAD_DEST,
        CQE_DETAIL_NO_ROUTE,
        "send to an address not yet added",
    );
    g.add_addr(global, 48).unwrap();
    let c = send(&mut g, &mut a, &mut b, global);
    assert_cqe(&c, CQE_STATUS_SUCCESS, 0, "send to an added address");
    assert_eq!(g.wait_cqe(&mut b.rcq).status, CQE_STATUS_SUCCESS);
    g.del_addr(global).unwrap();
    let c = send(&mut g, &mut a, &mut b, global);
    assert_cqe(
        &c,
        CQE_STATUS_BAD_DEST,
        CQE_DETAIL_NO_ROUTE,
        "send to a deleted address",
    );
}
