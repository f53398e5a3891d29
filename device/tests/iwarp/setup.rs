//! MPA connection setup: private data both ways, IRD/ORD and CRC agreed, QUERY_CONN,
//! peer-to-peer mode, and what is refused.

use crate::support::*;
use crate::*;

#[test]
fn setup_carries_private_data_and_agrees_on_crc_ird_and_ord() {
    let (mut g, s, c) = guest();
    let server = Mpa {
        private_data: b"from the responder".to_vec(),
        ird: 4,
        ord: 2,
        flags: 0,
    };
    let client = Mpa {
        private_data: vec![0xc5; IWARP_MAX_PRIVATE_DATA as usize],
        ird: 3,
        ord: 8,
        flags: IWARP_CONN_CRC,
    };
    let (se, ce, con, acc) = g.iwarp_pair((s, c), 7174, &server, &client);
    assert_eq!(
        con.status,
        ADMIN_STATUS_OK,
        "{}",
        admin_status_name(con.status)
    );
    assert_eq!(
        acc.status,
        ADMIN_STATUS_OK,
        "{}",
        admin_status_name(acc.status)
    );
    assert_eq!(con.result2, 7174, "the CONNECT names the peer's port");
    let ci = g.query_conn(c, ce.qp.id).unwrap();
    let si = g.query_conn(s, se.qp.id).unwrap();
    // Each end sees the other's private data (the IRD/ORD block not counted).
    assert_eq!(
        &ci.private_data[..ci.pd_len as usize],
        b"from the responder"
    );
    assert_eq!(
        &si.private_data[..si.pd_len as usize],
        &client.private_data[..]
    );
    // CRC on because one end asked; revision 2; the responder serves as many reads as
    // the initiator will issue (its IRD raised from 4 to the initiator's ORD of 8: an
    // initiator may refuse a reply whose IRD is below its ORD); each end issues no more
    // reads than the other serves.
    for (i, ird, ord) in [(&ci, 3, 8), (&si, 8, 2)] {
        assert_eq!(i.mpa_revision, 2);
        assert_eq!(i.flags & CONN_INFO_CRC, CONN_INFO_CRC, "{i:?}");
        assert_eq!((i.ird, i.ord), (ird, ord));
        assert_eq!(i.flags & (CONN_INFO_REJECTED | CONN_INFO_PEER_TO_PEER), 0);
        assert_eq!(i.terminate, 0);
    }
}

#[test]
fn query_conn_answers_only_once_the_setup_is_done() {
    let (mut g, s, c) = guest();
    let e = g.iwarp_endpoint_in(c, 4, 4096);
    assert_admin_err(
        g.query_conn(c, e.qp.id),
        ADMIN_STATUS_BAD_STATE,
        "QUERY_CONN before any connection",
    );
    assert_admin_err(
        g.query_conn(s, e.qp.id),
        ADMIN_STATUS_BAD_HANDLE,
        "QUERY_CONN from another context",
    );
    // A connect nobody answers: still no MPA.
    let id = g.submit_connect_iwarp(c, e.qp.id, LOOPBACK, 7999, &Mpa::plain());
    let done = g.admin_wait_done(id);
    assert_eq!(done.status, ADMIN_STATUS_REFUSED, "no listener: a reset");
    assert_admin_err(
        g.query_conn(c, e.qp.id),
        ADMIN_STATUS_BAD_STATE,
        "QUERY_CONN after a refused TCP connect",
    );
}

#[test]
fn private_data_must_lie_in_guest_ram_within_a_page() {
    let (mut g, s, c) = guest();
    let e = g.iwarp_endpoint_in(c, 4, 4096);
    let _ = s;
    let mut a = ConnectArgs::new_zeroed();
    a.addr = LOOPBACK;
    a.port = 7174;
    a.iwarp.pd_len = 16;
    a.iwarp.pd_addr = g.alloc_pages(1) + 4090;
    assert_admin_err(
        g.admin_result(cmd(ADMIN_OP_CONNECT, c, e.qp.id, &a)),
        ADMIN_STATUS_BAD_ADDRESS,
        "private data across a page",
    );
    a.iwarp.pd_addr = 1 << 50;
    assert_admin_err(
        g.admin_result(cmd(ADMIN_OP_CONNECT, c, e.qp.id, &a)),
        ADMIN_STATUS_BAD_ADDRESS,
        "private data outside guest RAM",
    );
}

#[test]
fn in_peer_to_peer_mode_the_responder_may_send_first() {
    let (mut g, s, c) = guest();
    let client = Mpa {
        flags: IWARP_CONN_PEER_TO_PEER,
        ..Mpa::plain()
    };
    let (mut se, mut ce, con, acc) = g.iwarp_pair((s, c), 7175, &Mpa::plain(), &client);
    assert_eq!((con.status, acc.status), (ADMIN_STATUS_OK, ADMIN_STATUS_OK));
    for i in [
        g.query_conn(c, ce.qp.id).unwrap(),
        g.query_conn(s, se.qp.id).unwrap(),
    ] {
        assert_eq!(i.flags & CONN_INFO_PEER_TO_PEER, CONN_INFO_PEER_TO_PEER);
    }
    // The responder speaks first: the initiator's ready-to-receive message let it.
    let msg = b"the responder first";
    g.buf_write(&se.buf, 0, msg);
    let sge = se.buf.sge(0, msg.len() as u32, se.mr.lkey);
    let rsge = ce.buf.sge(0, 4096, ce.mr.lkey);
    g.post_recv(&mut ce.qp, &[recv_wqe(1, &[rsge])]);
    g.post_send(&mut se.qp, &[tcp_send_wqe(2, 0, &[sge])]);
    ok(
        &g.wait_cqe(&mut se.scq),
        CQE_OP_SEND,
        msg.len() as u32,
        "send",
    );
    let r = g.wait_cqe(&mut ce.rcq);
    ok(&r, CQE_OP_RECV, msg.len() as u32, "receive");
    assert_eq!(
        r.wr_id, 1,
        "the ready-to-receive message took no receive WR"
    );
    assert_eq!(g.buf_read(&ce.buf, 0, msg.len()), msg);
}

#[test]
fn a_responder_sends_nothing_before_the_initiators_first_fpdu() {
    let (mut g, s, c) = guest();
    let (mut se, mut ce) = connected(&mut g, s, c, 7176);
    let sge = se.buf.sge(0, 10, se.mr.lkey);
    let rsge = ce.buf.sge(0, 4096, ce.mr.lkey);
    g.post_recv(&mut ce.qp, &[recv_wqe(1, &[rsge])]);
    g.post_send(&mut se.qp, &[tcp_send_wqe(2, 0, &[sge])]);
    assert!(
        g.try_wait_cqe(&mut ce.rcq, std::time::Duration::from_millis(300))
            .is_none(),
        "the responder's Send waits for the initiator's first FPDU"
    );
    // The initiator speaks: then both go.
    let ssge = ce.buf.sge(8192, 5, ce.mr.lkey);
    let srsge = se.buf.sge(8192, 4096, se.mr.lkey);
    g.post_recv(&mut se.qp, &[recv_wqe(3, &[srsge])]);
    g.post_send(&mut ce.qp, &[tcp_send_wqe(4, 0, &[ssge])]);
    ok(&g.wait_cqe(&mut se.rcq), CQE_OP_RECV, 5, "initiator's send");
    ok(
        &g.wait_cqe(&mut ce.rcq),
        CQE_OP_RECV,
        10,
        "responder's send",
    );
    ok(
        &g.wait_cqe(&mut se.scq),
        CQE_OP_SEND,
        10,
        "responder's send",
    );
}

/// A device whose iWARP setups wait `wait` for the peer's MPA frame.
pub(crate) fn impatient(wait: std::time::Duration) -> FakeGuest {
    use qpip_device::engine::tcp::TcpLimits;
    use qpip_device::engine::EngineConfig;
    let engine = EngineConfig {
        tcp_limits: TcpLimits {
            mpa_reply: wait,
            mpa_request: wait,
            ..TcpLimits::default()
        },
        ..EngineConfig::default()
    };
    FakeGuest::with_options(qpip_device::vfio::ServeOptions {
        core: qpip_device::function::FunctionConfig {
            engine,
            ..Default::default()
        },
    })
}

#[test]
fn a_peer_that_never_speaks_mpa_times_the_setup_out() {
    let wait = std::time::Duration::from_millis(300);
    let timed_out = |done: AdminCqe, what| {
        let status = admin_status_name(done.status);
        assert_eq!(done.status, ADMIN_STATUS_TIMEOUT, "{what}: {status}");
    };
    // The initiator's peer is a stream QP: it accepts the TCP connection and says nothing.
    let mut g = impatient(wait);
    let (s, c) = (g.create_ctx().unwrap(), g.create_ctx().unwrap());
    let plain = g.tcp_endpoint_in(s, FRAMING_STREAM, 4, 4096);
    let iw = g.iwarp_endpoint_in(c, 4, 4096);
    let l = g.listen(s, UNSPECIFIED, 7230, 4).unwrap();
    let acc = g.submit_accept(s, l, plain.qp.id);
    let con = g.submit_connect_iwarp(c, iw.qp.id, LOOPBACK, 7230, &Mpa::plain());
    assert_eq!(g.admin_wait_done(acc).status, ADMIN_STATUS_OK, "TCP is up");
    timed_out(g.admin_wait_done(con), "no MPA reply");
    // The responder's peer is a stream QP too: it connects and never sends a request.
    let iw2 = g.iwarp_endpoint_in(s, 4, 4096);
    let plain2 = g.tcp_endpoint_in(c, FRAMING_STREAM, 4, 4096);
    let l2 = g.listen(s, UNSPECIFIED, 7231, 4).unwrap();
    let acc = g.submit_accept_iwarp(s, l2, iw2.qp.id, &Mpa::plain());
    let con = g.submit_connect(c, plain2.qp.id, LOOPBACK, 7231);
    assert_eq!(g.admin_wait_done(con).status, ADMIN_STATUS_OK, "TCP is up");
    timed_out(g.admin_wait_done(acc), "no MPA request");
}
