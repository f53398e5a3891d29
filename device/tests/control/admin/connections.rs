//! Ports and connections: BIND, LISTEN and DESTROY_LISTENER, CONNECT, ACCEPT, CLOSE and
//! SET_QP_OPT on the wrong objects or in the wrong state, and pending ones cancelled when
//! what they wait on goes.

use std::time::Duration;

use super::{check_destroy, pending_result, tcp_qp};
use crate::support::*;

#[test]
fn bind_gives_ports_and_refuses_conflicts() {
    let mut g = FakeGuest::new();
    let ctx = g.create_ctx().unwrap();
    let other = g.create_ctx().unwrap();
    let cq = g.create_cq(ctx, 16).unwrap();
    let ocq = g.create_cq(other, 16).unwrap();
    let mut qps = Vec::new();
    for _ in 0..5 {
        qps.push(g.create_qp(ctx, cq.id, cq.id, 4, 4).unwrap().id);
    }
    let oqp = g.create_qp(other, ocq.id, ocq.id, 4, 4).unwrap().id;

    assert_eq!(g.bind(ctx, qps[0], UNSPECIFIED, 7000), Ok(7000));
    assert_admin_err(
        g.bind(ctx, qps[1], UNSPECIFIED, 7000),
        ADMIN_STATUS_ADDR_IN_USE,
        "same port twice",
    );
    assert_admin_err(
        g.bind(other, oqp, LOOPBACK, 7000),
        ADMIN_STATUS_ADDR_IN_USE,
        "same port, specific address, another context",
    );
    assert_admin_err(
        g.bind(ctx, qps[0], UNSPECIFIED, 7001),
        ADMIN_STATUS_BAD_STATE,
        "bind a QP twice",
    );
    let e1 = g.bind(ctx, qps[2], UNSPECIFIED, 0).unwrap();
    let e2 = g.bind(ctx, qps[3], LOOPBACK, 0).unwrap();
    assert!(e1 != 0 && e2 != 0 && e1 != e2, "ephemeral ports {e1} {e2}");
    assert_admin_err(
        g.bind(ctx, 0xdead, UNSPECIFIED, 7002),
        ADMIN_STATUS_BAD_HANDLE,
        "bind unknown QP",
    );
    assert_admin_err(
        g.bind(ctx, oqp, UNSPECIFIED, 7002),
        ADMIN_STATUS_BAD_HANDLE,
        "bind another context's QP",
    );
    // Destroying the QP frees its port.
    g.destroy_qp(ctx, qps[0]).unwrap();
    assert_eq!(
        g.bind(ctx, qps[4], UNSPECIFIED, 7000),
        Ok(7000),
        "port free after DESTROY_QP"
    );
    // An ephemeral port let go is not the next one handed out (a new connection from it
    // would reuse the 4-tuple of one reset a moment ago).
    g.destroy_qp(ctx, qps[3]).unwrap();
    let next = g.create_qp(ctx, cq.id, cq.id, 4, 4).unwrap().id;
    let e3 = g.bind(ctx, next, UNSPECIFIED, 0).unwrap();
    assert!(e3 != e2 && e3 != e1, "ephemeral ports {e1} {e2}, then {e3}");
}

#[test]
fn listeners_bind_ports_within_the_limit() {
    let mut g = FakeGuest::new();
    let ctx = g.create_ctx().unwrap();
    let other = g.create_ctx().unwrap();
    let l = g.listen(ctx, UNSPECIFIED, 8000, 8).unwrap();
    assert_ne!(l, 0);
    assert_admin_err(
        g.listen(ctx, UNSPECIFIED, 0, 8),
        ADMIN_STATUS_BAD_PARAM,
        "listen on port 0",
    );
    assert_admin_err(
        g.listen(other, UNSPECIFIED, 8000, 8),
        ADMIN_STATUS_ADDR_IN_USE,
        "listen twice on a port",
    );
    check_destroy(
        &mut g,
        FakeGuest::destroy_listener,
        "listener",
        (ctx, other),
        l,
    );
    g.listen(other, UNSPECIFIED, 8000, 8)
        .expect("port free after DESTROY_LISTENER");
    for i in 1..MAX_LISTENERS {
        g.listen(ctx, UNSPECIFIED, 8000 + i as u16, 1)
            .unwrap_or_else(|s| panic!("listener #{i}: {}", admin_status_name(s)));
    }
    assert_admin_err(
        g.listen(ctx, UNSPECIFIED, 9999, 1),
        ADMIN_STATUS_NO_RESOURCES,
        "listener beyond MAX_LISTENERS",
    );
}

/// What the refusals of an object of the wrong kind or context are tried on: context `ctx`
/// with a CQ, a UDP QP and a TCP QP; context `other` with a TCP QP of its own.
struct TwoContexts {
    ctx: u32,
    other: u32,
    cq: Cq,
    udp: u32,
    tcp: u32,
    otcp: u32,
}

impl TwoContexts {
    fn new(g: &mut FakeGuest) -> TwoContexts {
        let ctx = g.create_ctx().unwrap();
        let other = g.create_ctx().unwrap();
        let cq = g.create_cq(ctx, 16).unwrap();
        let ocq = g.create_cq(other, 16).unwrap();
        let udp = g.create_qp(ctx, cq.id, cq.id, 4, 4).unwrap().id;
        let tcp = tcp_qp(g, &cq, 4);
        let otcp = tcp_qp(g, &ocq, 4);
        TwoContexts {
            ctx,
            other,
            cq,
            udp,
            tcp,
            otcp,
        }
    }
}

#[test]
fn connection_commands_refuse_wrong_objects_and_states() {
    let mut g = FakeGuest::new();
    let TwoContexts {
        ctx,
        other,
        udp,
        tcp,
        otcp,
        ..
    } = TwoContexts::new(&mut g);
    let l = g.listen(ctx, UNSPECIFIED, 8100, 4).unwrap();
    let ol = g.listen(other, UNSPECIFIED, 8101, 4).unwrap();

    // Each runs to completion before the next is submitted.
    let accept = |g: &mut FakeGuest, listener, qp| {
        let id = g.submit_accept(ctx, listener, qp);
        pending_result(g, id)
    };
    let connect = |g: &mut FakeGuest, qp| {
        let id = g.submit_connect(ctx, qp, LOOPBACK, 8100);
        pending_result(g, id)
    };
    let close = |g: &mut FakeGuest, qp| g.admin_result(cmd0(ADMIN_OP_CLOSE, ctx, qp));
    let refused = [
        (
            connect(&mut g, udp),
            ADMIN_STATUS_BAD_STATE,
            "CONNECT on a UDP QP",
        ),
        (
            accept(&mut g, l, udp),
            ADMIN_STATUS_BAD_STATE,
            "ACCEPT with a UDP QP",
        ),
        (
            close(&mut g, udp),
            ADMIN_STATUS_BAD_STATE,
            "CLOSE on a UDP QP",
        ),
        (
            close(&mut g, tcp),
            ADMIN_STATUS_BAD_STATE,
            "CLOSE on an unconnected TCP QP",
        ),
        (
            accept(&mut g, ol, tcp),
            ADMIN_STATUS_BAD_HANDLE,
            "ACCEPT on another context's listener",
        ),
        (
            accept(&mut g, l, otcp),
            ADMIN_STATUS_BAD_HANDLE,
            "ACCEPT with another context's QP",
        ),
        (
            accept(&mut g, l, 0xdead),
            ADMIN_STATUS_BAD_HANDLE,
            "ACCEPT with an unknown QP",
        ),
        (
            connect(&mut g, otcp),
            ADMIN_STATUS_BAD_HANDLE,
            "CONNECT another context's QP",
        ),
    ];
    for (result, status, what) in refused {
        assert_admin_err(result, status, what);
    }
    // A listener does not bind a UDP port, and vice versa: different protocols.
    g.bind(ctx, udp, UNSPECIFIED, 8100)
        .expect("UDP port equal to a TCP listening port");
}

#[test]
fn iwarp_parameters_and_query_conn_are_refused_on_other_qps() {
    let mut g = FakeGuest::new();
    let TwoContexts {
        ctx, cq, tcp, otcp, ..
    } = TwoContexts::new(&mut g);
    let l = g.listen(ctx, UNSPECIFIED, 8102, 4).unwrap();
    let iwarp = IwarpConnArgs {
        pd_addr: 0,
        pd_len: 0,
        ird: 1,
        ord: 1,
        flags: 0,
    };
    let mut c = ConnectArgs::new_zeroed();
    c.addr = LOOPBACK;
    c.port = 8102;
    c.iwarp = iwarp;
    let mut a = AcceptArgs::new_zeroed();
    a.qp = tcp;
    a.iwarp = iwarp;
    let buf = g.alloc_pages(1);
    let mut q = QueryArgs::new_zeroed();
    q.buf = buf;
    q.len = 4096;
    let refused = [
        (
            g.admin_result(cmd(ADMIN_OP_CONNECT, ctx, tcp, &c)),
            ADMIN_STATUS_BAD_PARAM,
            "CONNECT with iWARP parameters on a stream QP",
        ),
        (
            g.admin_result(cmd(ADMIN_OP_ACCEPT, ctx, l, &a)),
            ADMIN_STATUS_BAD_PARAM,
            "ACCEPT with iWARP parameters of a stream QP",
        ),
        (
            g.admin_result(cmd(ADMIN_OP_QUERY_CONN, ctx, tcp, &q)),
            ADMIN_STATUS_BAD_STATE,
            "QUERY_CONN on a stream QP",
        ),
        (
            g.admin_result(cmd(ADMIN_OP_QUERY_CONN, ctx, otcp, &q)),
            ADMIN_STATUS_BAD_HANDLE,
            "QUERY_CONN on another context's QP",
        ),
    ];
    for (result, status, what) in refused {
        assert_admin_err(result, status, what);
    }
    // The QP was left as it was: a plain connect still works on it.
    let id = g.submit_connect(ctx, tcp, LOOPBACK, 8102);
    let server = tcp_qp(&mut g, &cq, 4);
    let accepted = g.submit_accept(ctx, l, server);
    pending_result(&mut g, id).expect("connect");
    pending_result(&mut g, accepted).expect("accept");
}

#[test]
fn pending_accepts_are_cancelled_when_the_listener_or_qp_goes() {
    let mut g = FakeGuest::new();
    let ctx = g.create_ctx().unwrap();
    let cq = g.create_cq(ctx, 16).unwrap();
    let a = tcp_qp(&mut g, &cq, 4);
    let b = tcp_qp(&mut g, &cq, 4);
    let l = g.listen(ctx, UNSPECIFIED, 8200, 4).unwrap();

    let acc_a = g.submit_accept(ctx, l, a);
    let acc_b = g.submit_accept(ctx, l, b);
    // Both stay pending: other commands complete past them (out of order).
    let info = g.query_device();
    assert_eq!(info.max_sge, MAX_SGE);
    assert!(
        g.admin_wait(acc_a, Duration::from_millis(50)).is_none(),
        "ACCEPT completed with no peer"
    );

    g.destroy_qp(ctx, a).unwrap();
    assert_admin_err(
        pending_result(&mut g, acc_a),
        ADMIN_STATUS_CANCELLED,
        "ACCEPT whose QP was destroyed",
    );
    g.destroy_listener(ctx, l).unwrap();
    assert_admin_err(
        pending_result(&mut g, acc_b),
        ADMIN_STATUS_CANCELLED,
        "ACCEPT whose listener was destroyed",
    );
    // The QP of the cancelled accept is idle again and can be offered to a new listener.
    let l2 = g.listen(ctx, UNSPECIFIED, 8200, 4).unwrap();
    let acc = g.submit_accept(ctx, l2, b);
    g.destroy_listener(ctx, l2).unwrap();
    assert_admin_err(
        pending_result(&mut g, acc),
        ADMIN_STATUS_CANCELLED,
        "ACCEPT whose new listener was destroyed",
    );
}

#[test]
fn a_pending_connect_is_cancelled_when_its_qp_goes() {
    let mut g = FakeGuest::new();
    let ctx = g.create_ctx().unwrap();
    let cq = g.create_cq(ctx, 16).unwrap();
    let qp = tcp_qp(&mut g, &cq, 4);
    // A peer that never answers: no network backend, so the SYN goes nowhere.
    let conn = g.submit_connect(ctx, qp, ip("2001:db8::99"), 80);
    assert!(
        g.admin_wait(conn, Duration::from_millis(50)).is_none(),
        "CONNECT to a silent peer completed at once"
    );
    g.destroy_qp(ctx, qp).unwrap();
    assert_admin_err(
        pending_result(&mut g, conn),
        ADMIN_STATUS_CANCELLED,
        "CONNECT whose QP was destroyed",
    );
}

/// SET_QP_OPT's KEEPALIVE: on and off on a TCP QP of the context; anything else is
/// refused before it touches a QP.
#[test]
fn set_qp_opt_takes_keepalive_on_tcp_qps_only() {
    let mut g = FakeGuest::new();
    let TwoContexts {
        ctx,
        udp,
        tcp,
        otcp,
        ..
    } = TwoContexts::new(&mut g);
    let keepalive = |idle, interval, probes| SetQpOptArgs {
        option: QP_OPT_KEEPALIVE,
        keepalive_idle: idle,
        keepalive_interval: interval,
        keepalive_probes: probes,
        ..FromZeros::new_zeroed()
    };
    let mut set = |qp, a: SetQpOptArgs| g.admin_result(cmd(ADMIN_OP_SET_QP_OPT, ctx, qp, &a));

    set(tcp, keepalive(60, 10, 5)).expect("keepalive on");
    set(
        tcp,
        keepalive(KEEPALIVE_MAX_SECS, KEEPALIVE_MAX_SECS, KEEPALIVE_MAX_PROBES),
    )
    .expect("keepalive at its limits");
    set(tcp, keepalive(0, 0, 0)).expect("keepalive off");
    let mut unknown = keepalive(60, 10, 5);
    unknown.option = 3;
    let mut reserved = keepalive(60, 10, 5);
    reserved.reserved[13] = 1;
    let refused = [
        (tcp, unknown, ADMIN_STATUS_BAD_PARAM, "an unknown option"),
        (tcp, reserved, ADMIN_STATUS_BAD_OPCODE, "reserved bytes set"),
        (
            tcp,
            keepalive(0, 10, 0),
            ADMIN_STATUS_BAD_PARAM,
            "off with an interval",
        ),
        (
            tcp,
            keepalive(60, 0, 5),
            ADMIN_STATUS_BAD_PARAM,
            "no interval",
        ),
        (
            tcp,
            keepalive(60, 10, 0),
            ADMIN_STATUS_BAD_PARAM,
            "no probes",
        ),
        (
            tcp,
            keepalive(KEEPALIVE_MAX_SECS + 1, 10, 5),
            ADMIN_STATUS_BAD_PARAM,
            "idle beyond its limit",
        ),
        (
            tcp,
            keepalive(60, 10, KEEPALIVE_MAX_PROBES + 1),
            ADMIN_STATUS_BAD_PARAM,
            "probes beyond their limit",
        ),
        (
            udp,
            keepalive(60, 10, 5),
            ADMIN_STATUS_BAD_PARAM,
            "a UDP QP",
        ),
        (
            otcp,
            keepalive(60, 10, 5),
            ADMIN_STATUS_BAD_HANDLE,
            "another context's QP",
        ),
        (
            0xdead,
            keepalive(60, 10, 5),
            ADMIN_STATUS_BAD_HANDLE,
            "an unknown QP",
        ),
    ];
    for (qp, args, status, what) in refused {
        assert_admin_err(set(qp, args), status, what);
    }
}
