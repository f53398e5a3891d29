//! A UDP port shared by several QPs (`BIND_FLAG_SHARE_PORT`, a socket's `SO_REUSEADDR` or
//! `SO_REUSEPORT`): a QP connected to a peer (`QP_OPT_UDP_PEER`) gets that peer's datagrams,
//! the first-bound QP with no peer the others — as a server that connects one socket per
//! client and binds a new one for the next (`iperf3 -s`) needs. Who may share: QPs of one
//! context that all asked to.

use std::net::Ipv6Addr;

use crate::support::*;
use crate::wait_stat;

const PORT: u16 = 9300;

/// A UDP endpoint in `ctx` bound to `PORT` on every address, sharing it.
fn shared(g: &mut FakeGuest, ctx: u32) -> Udp {
    let mut e = g.endpoint_in(ctx, (QP_TYPE_UDP, 0), 8, 16, 4096);
    e.port = g
        .bind_shared(ctx, e.qp.id, UNSPECIFIED, PORT)
        .expect("shared bind");
    assert_eq!(e.port, PORT);
    e
}

/// Posts one receive on `rx`.
fn post_recv(g: &mut FakeGuest, rx: &mut Udp, wr_id: u64) {
    g.post_recv(
        &mut rx.qp,
        &[recv_wqe(wr_id, &[rx.buf.sge(0, 4096, rx.mr.lkey)])],
    );
}

/// Sends `msg` from `tx` to `PORT`.
fn send(g: &mut FakeGuest, tx: &mut Udp, msg: &[u8]) {
    g.post_send(&mut tx.qp, &[inline_wqe(1, LOOPBACK, PORT, msg)]);
    assert_cqe(&g.wait_cqe(&mut tx.scq), CQE_STATUS_SUCCESS, 0, "send");
}

/// Receives the next datagram on `rx`: its payload and source.
fn recv(g: &mut FakeGuest, rx: &mut Udp) -> (Vec<u8>, ([u8; 16], u16)) {
    let c = g.wait_cqe(&mut rx.rcq);
    assert_cqe(&c, CQE_STATUS_SUCCESS, 0, "receive");
    let data = g.buf_read(&rx.buf, 0, c.byte_len as usize);
    (data, (c.src_addr, c.src_port))
}

/// Checks `rx` receives nothing for a while.
fn nothing(g: &mut FakeGuest, rx: &mut Udp, what: &str) {
    assert!(
        g.try_wait_cqe(&mut rx.rcq, std::time::Duration::from_millis(30))
            .is_none(),
        "{what}"
    );
}

#[test]
fn a_connected_qp_gets_its_peers_datagrams_and_the_unconnected_one_the_rest() {
    let mut g = FakeGuest::new();
    let ctx = g.create_ctx().unwrap();
    let mut first = shared(&mut g, ctx);
    let mut c1 = g.udp_endpoint_in(ctx, UNSPECIFIED, 0, 8, 16, 64);
    let mut c2 = g.udp_endpoint_in(ctx, UNSPECIFIED, 0, 8, 16, 64);

    // iperf3 -s: the first client's datagram reaches the only socket, which connects to it
    // and a new socket takes the port for the next client.
    post_recv(&mut g, &mut first, 1);
    send(&mut g, &mut c1, b"c1 hello");
    let (data, (addr, port)) = recv(&mut g, &mut first);
    assert_eq!((data.as_slice(), port), (&b"c1 hello"[..], c1.port));
    g.set_udp_peer(ctx, first.qp.id, addr, port).unwrap();
    let mut second = shared(&mut g, ctx);

    post_recv(&mut g, &mut first, 2);
    post_recv(&mut g, &mut second, 3);
    send(&mut g, &mut c2, b"c2 hello");
    let (data, (_, port)) = recv(&mut g, &mut second);
    assert_eq!((data.as_slice(), port), (&b"c2 hello"[..], c2.port));
    nothing(
        &mut g,
        &mut first,
        "the connected QP got another peer's datagram",
    );
    send(&mut g, &mut c1, b"c1 again");
    let (data, (_, port)) = recv(&mut g, &mut first);
    assert_eq!((data.as_slice(), port), (&b"c1 again"[..], c1.port));

    // Connected to c2 in turn, the second QP leaves a third source to no QP: dropped and
    // counted, as Linux answers a datagram no socket takes.
    post_recv(&mut g, &mut second, 4);
    let c2_addr = Ipv6Addr::from(addr); // the same source address as c1's
    g.set_udp_peer(ctx, second.qp.id, c2_addr.octets(), c2.port)
        .unwrap();
    let mut c3 = g.udp_endpoint_in(ctx, UNSPECIFIED, 0, 8, 16, 64);
    let no_port = g.stat(STAT_UDP_RX_NO_PORT);
    send(&mut g, &mut c3, b"c3 nobody");
    wait_stat(&mut g, STAT_UDP_RX_NO_PORT, no_port + 1);
    send(&mut g, &mut c2, b"c2 again");
    assert_eq!(recv(&mut g, &mut second).0, b"c2 again");

    // No peer again: the QP takes the rest once more.
    post_recv(&mut g, &mut second, 5);
    g.set_udp_peer(ctx, second.qp.id, [0; 16], 0).unwrap();
    send(&mut g, &mut c3, b"c3 now");
    assert_eq!(recv(&mut g, &mut second).0, b"c3 now");
}

#[test]
fn the_first_bound_unconnected_qp_gets_datagrams_no_connected_qp_takes() {
    let mut g = FakeGuest::new();
    let ctx = g.create_ctx().unwrap();
    let mut a = shared(&mut g, ctx);
    let mut b = shared(&mut g, ctx);
    let mut c = g.udp_endpoint_in(ctx, UNSPECIFIED, 0, 8, 16, 64);
    post_recv(&mut g, &mut a, 1);
    post_recv(&mut g, &mut b, 2);
    for i in 0..3u8 {
        if i > 0 {
            post_recv(&mut g, &mut a, 1);
        }
        send(&mut g, &mut c, &[i]);
        assert_eq!(recv(&mut g, &mut a).0, [i]);
    }
    nothing(&mut g, &mut b, "the second unconnected QP got a datagram");
}

#[test]
fn sharing_needs_the_flag_on_every_qp_and_one_context() {
    let mut g = FakeGuest::new();
    let ctx = g.create_ctx().unwrap();
    let other = g.create_ctx().unwrap();
    // Held without the flag: nobody joins.
    let plain = g.udp_endpoint_in(ctx, UNSPECIFIED, PORT, 8, 16, 64);
    let e = g.endpoint_in(ctx, (QP_TYPE_UDP, 0), 8, 16, 64);
    assert_eq!(
        g.bind_shared(ctx, e.qp.id, UNSPECIFIED, PORT),
        Err(ADMIN_STATUS_ADDR_IN_USE)
    );
    g.destroy_qp(ctx, plain.qp.id).unwrap();
    // Held with it: a QP without the flag, or another context's, is refused.
    let _s = shared(&mut g, ctx);
    assert_eq!(
        g.bind(ctx, e.qp.id, UNSPECIFIED, PORT),
        Err(ADMIN_STATUS_ADDR_IN_USE)
    );
    let o = g.endpoint_in(other, (QP_TYPE_UDP, 0), 8, 16, 64);
    assert_eq!(
        g.bind_shared(other, o.qp.id, UNSPECIFIED, PORT),
        Err(ADMIN_STATUS_ADDR_IN_USE),
        "another context took a shared port"
    );
    assert_eq!(g.bind_shared(ctx, e.qp.id, UNSPECIFIED, PORT), Ok(PORT));
    // An ephemeral port and a TCP QP are never shared.
    let f = g.endpoint_in(ctx, (QP_TYPE_UDP, 0), 8, 16, 64);
    assert_eq!(
        g.bind_shared(ctx, f.qp.id, UNSPECIFIED, 0),
        Err(ADMIN_STATUS_BAD_PARAM)
    );
    let t = g.endpoint_in(ctx, (QP_TYPE_TCP, FRAMING_STREAM), 8, 16, 64);
    assert_eq!(
        g.bind_shared(ctx, t.qp.id, UNSPECIFIED, 4000),
        Err(ADMIN_STATUS_BAD_PARAM)
    );
    // A peer only on a bound UDP QP, and named whole.
    assert_eq!(
        g.set_udp_peer(ctx, f.qp.id, LOOPBACK, 7),
        Err(ADMIN_STATUS_BAD_STATE),
        "unbound"
    );
    assert_eq!(
        g.set_udp_peer(ctx, e.qp.id, LOOPBACK, 0),
        Err(ADMIN_STATUS_BAD_PARAM),
        "an address without a port"
    );
    assert_eq!(
        g.set_udp_peer(other, e.qp.id, LOOPBACK, 7),
        Err(ADMIN_STATUS_BAD_HANDLE),
        "another context's QP"
    );
}

#[test]
fn the_others_keep_the_port_when_one_goes() {
    let mut g = FakeGuest::new();
    let ctx = g.create_ctx().unwrap();
    let first = shared(&mut g, ctx);
    let mut second = shared(&mut g, ctx);
    let mut c = g.udp_endpoint_in(ctx, UNSPECIFIED, 0, 8, 16, 64);
    g.destroy_qp(ctx, first.qp.id).unwrap();
    post_recv(&mut g, &mut second, 1);
    send(&mut g, &mut c, b"still here");
    assert_eq!(recv(&mut g, &mut second).0, b"still here");
    // Once the last one goes, the port is free for anyone.
    g.destroy_qp(ctx, second.qp.id).unwrap();
    let other = g.create_ctx().unwrap();
    let _e = g.udp_endpoint_in(other, UNSPECIFIED, PORT, 8, 16, 64);
}
