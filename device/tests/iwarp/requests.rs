//! Listeners that hold iWARP connection requests (`LISTEN_FLAG_IWARP_REQUESTS`): the
//! request seen through CONN_REQUEST before any QP is chosen, answered by an ACCEPT onto
//! a QP of another context or by a REJECT; what is dropped, reset and counted. Requests of
//! an initiator played segment by segment on a cable, however its segments cut them.

use std::time::Duration;

use qpip_device::net::iwarp::wire::mpa;

use crate::script::{Peer, Seg, Setup, DEV_PORT, PEER_ISN, PEER_PORT};
use crate::support::*;
use crate::*;

/// A requests listener on `port` in `ctx`.
fn listen_requests(g: &mut FakeGuest, ctx: u32, port: u16, backlog: u32) -> u32 {
    let mut a = ListenArgs::new_zeroed();
    a.addr = UNSPECIFIED;
    a.port = port;
    a.backlog = backlog;
    a.flags = LISTEN_FLAG_IWARP_REQUESTS;
    g.admin_result(cmd(ADMIN_OP_LISTEN, ctx, 0, &a))
        .expect("listen")
        .result0 as u32
}

/// Submits CONN_REQUEST on `listener`: (cmd_id, the buffer it writes).
fn submit_conn_request(g: &mut FakeGuest, ctx: u32, listener: u32) -> (u32, u64) {
    let buf = g.alloc_pages(1);
    let mut q = QueryArgs::new_zeroed();
    q.buf = buf;
    q.len = 4096;
    (
        g.admin_submit(cmd(ADMIN_OP_CONN_REQUEST, ctx, listener, &q)),
        buf,
    )
}

/// The next request of `listener`, waiting for it.
fn conn_request(g: &mut FakeGuest, ctx: u32, listener: u32) -> ConnRequest {
    let (id, buf) = submit_conn_request(g, ctx, listener);
    let done = g.admin_wait_done(id);
    assert_eq!(
        done.status,
        ADMIN_STATUS_OK,
        "{}",
        admin_status_name(done.status)
    );
    let r: ConnRequest = g.read_obj(buf);
    assert_eq!(r.request as u64, done.result0);
    r
}

fn submit_accept_request(
    g: &mut FakeGuest,
    ctx: u32,
    listener: u32,
    qp: u32,
    request: u32,
    m: &Mpa,
) -> u32 {
    let mut a = AcceptArgs::new_zeroed();
    a.qp = qp;
    a.request = request;
    a.iwarp = g.iwarp_args(m);
    g.admin_submit(cmd(ADMIN_OP_ACCEPT, ctx, listener, &a))
}

fn reject(g: &mut FakeGuest, ctx: u32, listener: u32, request: u32, pd: &[u8]) -> Result<(), u16> {
    let mut a = RejectArgs::new_zeroed();
    a.request = request;
    a.iwarp = g.iwarp_args(&Mpa {
        private_data: pd.to_vec(),
        ..Mpa::default()
    });
    g.admin_result(cmd(ADMIN_OP_REJECT, ctx, listener, &a))
        .map(|_| ())
}

fn stat(g: &mut FakeGuest, which: u32) -> u64 {
    g.query_stats().counters[which as usize]
}

#[track_caller]
fn still_pending(g: &mut FakeGuest, id: u32, what: &str) {
    if let Some(c) = g.admin_wait(id, Duration::from_millis(200)) {
        panic!("{what}: completed ({})", admin_status_name(c.status));
    }
}

#[track_caller]
fn status(c: AdminCqe, want: u16, what: &str) {
    assert_eq!(
        c.status,
        want,
        "{what}: {} instead of {}",
        admin_status_name(c.status),
        admin_status_name(want)
    );
}

#[test]
fn a_request_is_seen_then_accepted_onto_a_qp_of_another_context() {
    let mut g = FakeGuest::new();
    let (ls, c, other) = (
        g.create_ctx().unwrap(),
        g.create_ctx().unwrap(),
        g.create_ctx().unwrap(),
    );
    let l = listen_requests(&mut g, ls, 7300, 4);
    // Asked for before any connection: it waits.
    let (early, buf) = submit_conn_request(&mut g, ls, l);
    still_pending(&mut g, early, "CONN_REQUEST with nothing held");
    let client = Mpa {
        private_data: b"hello from the initiator".to_vec(),
        ird: 3,
        ord: 8,
        flags: IWARP_CONN_CRC,
    };
    let mut ce = g.iwarp_endpoint_in(c, 16, 1 << 20);
    let con = g.submit_connect_iwarp(c, ce.qp.id, LOOPBACK, 7300, &client);
    let done = g.admin_wait_done(early);
    status(done, ADMIN_STATUS_OK, "CONN_REQUEST");
    let r: ConnRequest = g.read_obj(buf);
    assert_ne!(r.request, 0);
    assert_eq!(done.result0, r.request as u64);
    assert_eq!(
        &r.private_data[..r.pd_len as usize],
        &client.private_data[..]
    );
    assert_eq!((r.ird, r.ord, r.mpa_revision), (3, 8, 2));
    assert_eq!(r.flags, CONN_REQUEST_CRC);
    assert_eq!((r.local_port, r.local_addr), (7300, LOOPBACK));
    assert_eq!(r.peer_addr, LOOPBACK);
    assert_ne!(r.peer_port, 0);
    still_pending(&mut g, con, "CONNECT before the answer");
    // A plain ACCEPT is not how this listener's connections are taken.
    let plain = g.iwarp_endpoint_in(ls, 4, 4096);
    let acc = g.submit_accept_iwarp(ls, l, plain.qp.id, &Mpa::plain());
    status(
        g.admin_wait_done(acc),
        ADMIN_STATUS_BAD_STATE,
        "plain ACCEPT",
    );
    // Accepted onto a QP of a third context, with private data of its own.
    let server = Mpa {
        private_data: b"welcome".to_vec(),
        ird: 4,
        ord: 2,
        flags: 0,
    };
    let mut se = g.iwarp_endpoint_in(other, 16, 1 << 20);
    let acc = submit_accept_request(&mut g, other, l, se.qp.id, r.request, &server);
    let acc = g.admin_wait_done(acc);
    status(acc, ADMIN_STATUS_OK, "ACCEPT of the request");
    assert_eq!(acc.result2 as u16, r.peer_port, "the ACCEPT names the peer");
    status(g.admin_wait_done(con), ADMIN_STATUS_OK, "CONNECT");
    let ci = g.query_conn(c, ce.qp.id).unwrap();
    assert_eq!(&ci.private_data[..ci.pd_len as usize], b"welcome");
    assert_eq!(
        (ci.ird, ci.ord),
        (3, 8),
        "the responder serves the initiator's ORD"
    );
    let si = g.query_conn(other, se.qp.id).unwrap();
    assert_eq!(
        &si.private_data[..si.pd_len as usize],
        &client.private_data[..]
    );
    assert_eq!((si.ird, si.ord), (8, 2));
    assert_ne!(si.flags & CONN_INFO_CRC, 0);
    // The same request cannot be answered twice.
    let again = g.iwarp_endpoint_in(other, 4, 4096);
    let twice = submit_accept_request(&mut g, other, l, again.qp.id, r.request, &server);
    status(
        g.admin_wait_done(twice),
        ADMIN_STATUS_BAD_HANDLE,
        "second ACCEPT",
    );

    // Sends both ways (the initiator first, as MPA wants), RDMA Writes and Reads both
    // ways.
    send(&mut g, &mut ce, &mut se, 1);
    send(&mut g, &mut se, &mut ce, 2);
    write_and_read(&mut g, &mut ce, other, 5);
    write_and_read(&mut g, &mut se, c, 6);
}

/// A Send of 3000 bytes from `from` into a receive WR of `to`.
fn send(g: &mut FakeGuest, from: &mut TcpEnd, to: &mut TcpEnd, seed: u8) {
    let data = pattern(3000, seed);
    g.buf_write(&from.buf, 0, &data);
    let rsge = to.buf.sge(0, 4096, to.mr.lkey);
    g.post_recv(&mut to.qp, &[recv_wqe(10 + seed as u64, &[rsge])]);
    let sge = from.buf.sge(0, 3000, from.mr.lkey);
    g.post_send(&mut from.qp, &[tcp_send_wqe(seed as u64, 0, &[sge])]);
    ok(&g.wait_cqe(&mut from.scq), CQE_OP_SEND, 3000, "send");
    ok(&g.wait_cqe(&mut to.rcq), CQE_OP_RECV, 3000, "receive");
    assert!(g.buf_read(&to.buf, 0, 3000) == data);
}

/// An RDMA Write from `from` into a region of the peer's context `peer`, then a Read of
/// it back.
fn write_and_read(g: &mut FakeGuest, from: &mut TcpEnd, peer: u32, seed: u8) {
    let len = 20_000u64;
    let access = MR_ACCESS_REMOTE_WRITE | MR_ACCESS_REMOTE_READ;
    let (target, tmr) = region(g, peer, len, access, 0);
    let data = pattern(len as usize, seed);
    g.buf_write(&from.buf, 0, &data);
    let sge = from.buf.sge(0, len as u32, from.mr.lkey);
    g.post_send(
        &mut from.qp,
        &[rdma_wqe(
            WQE_OP_RDMA_WRITE,
            1,
            target.iova,
            tmr.rkey,
            &[sge],
        )],
    );
    ok(
        &g.wait_cqe(&mut from.scq),
        CQE_OP_RDMA_WRITE,
        len as u32,
        "write",
    );
    assert!(g.buf_read(&target, 0, len as usize) == data, "written");
    let back = from.buf.sge(100_000, len as u32, from.mr.lkey);
    g.post_send(
        &mut from.qp,
        &[rdma_wqe(
            WQE_OP_RDMA_READ,
            2,
            target.iova,
            tmr.rkey,
            &[back],
        )],
    );
    ok(
        &g.wait_cqe(&mut from.scq),
        CQE_OP_RDMA_READ,
        len as u32,
        "read",
    );
    assert!(
        g.buf_read(&from.buf, 100_000, len as usize) == data,
        "read back"
    );
}

#[test]
fn a_rejected_request_refuses_the_connect_with_the_private_data() {
    let (mut g, s, c) = guest();
    // A backlog of one: the rejected connection must leave it for the next.
    let l = listen_requests(&mut g, s, 7301, 1);
    let ce = g.iwarp_endpoint_in(c, 4, 4096);
    let con = g.submit_connect_iwarp(c, ce.qp.id, LOOPBACK, 7301, &Mpa::plain());
    // The request is held before CONN_REQUEST asks: it is handed out at once.
    still_pending(&mut g, con, "CONNECT while its request is held");
    let r = conn_request(&mut g, s, l);
    assert_eq!(r.pd_len, 0);
    // ird/ord/flags have no place in a reject.
    let mut a = RejectArgs::new_zeroed();
    a.request = r.request;
    a.iwarp.ird = 1;
    assert_admin_err(
        g.admin_result(cmd(ADMIN_OP_REJECT, s, l, &a)),
        ADMIN_STATUS_BAD_PARAM,
        "a REJECT with an IRD",
    );
    assert_admin_err(
        reject(&mut g, c, l, r.request, b"x"),
        ADMIN_STATUS_BAD_HANDLE,
        "a REJECT from another context",
    );
    assert_admin_err(
        reject(&mut g, s, l, r.request + 1, b"x"),
        ADMIN_STATUS_BAD_HANDLE,
        "a REJECT of an unknown request",
    );
    reject(&mut g, s, l, r.request, b"go away").expect("reject");
    status(g.admin_wait_done(con), ADMIN_STATUS_REFUSED, "CONNECT");
    let ci = g.query_conn(c, ce.qp.id).unwrap();
    assert_ne!(ci.flags & CONN_INFO_REJECTED, 0);
    assert_eq!(&ci.private_data[..ci.pd_len as usize], b"go away");
    assert_admin_err(
        reject(&mut g, s, l, r.request, b"x"),
        ADMIN_STATUS_BAD_HANDLE,
        "a second REJECT",
    );
    // The listener goes on: the next request is served once the rejected connection
    // has finished its close (the reply acknowledged).
    std::thread::sleep(Duration::from_millis(100));
    let ce2 = g.iwarp_endpoint_in(c, 4, 4096);
    let con2 = g.submit_connect_iwarp(c, ce2.qp.id, LOOPBACK, 7301, &Mpa::plain());
    let r2 = conn_request(&mut g, s, l);
    assert_ne!(r2.request, r.request, "ids are not reused");
    let se = g.iwarp_endpoint_in(s, 4, 4096);
    let acc = submit_accept_request(&mut g, s, l, se.qp.id, r2.request, &Mpa::plain());
    status(g.admin_wait_done(acc), ADMIN_STATUS_OK, "ACCEPT");
    status(g.admin_wait_done(con2), ADMIN_STATUS_OK, "CONNECT");
}

#[test]
fn destroying_the_listener_cancels_waiting_requests_and_resets_held_ones() {
    let (mut g, s, c) = guest();
    let l = listen_requests(&mut g, s, 7302, 4);
    let ce = g.iwarp_endpoint_in(c, 4, 4096);
    let con = g.submit_connect_iwarp(c, ce.qp.id, LOOPBACK, 7302, &Mpa::plain());
    let held = conn_request(&mut g, s, l);
    let ce2 = g.iwarp_endpoint_in(c, 4, 4096);
    let con2 = g.submit_connect_iwarp(c, ce2.qp.id, LOOPBACK, 7302, &Mpa::plain());
    // Two requests held (one handed out), then one CONN_REQUEST too many waits.
    let second = conn_request(&mut g, s, l);
    assert_ne!(second.request, held.request);
    let (waiting, _) = submit_conn_request(&mut g, s, l);
    still_pending(
        &mut g,
        waiting,
        "CONN_REQUEST with every request handed out",
    );
    g.destroy_listener(s, l).unwrap();
    status(
        g.admin_wait_done(waiting),
        ADMIN_STATUS_CANCELLED,
        "waiting CONN_REQUEST",
    );
    status(
        g.admin_wait_done(con),
        ADMIN_STATUS_REFUSED,
        "held request's CONNECT",
    );
    status(
        g.admin_wait_done(con2),
        ADMIN_STATUS_REFUSED,
        "second CONNECT",
    );
    // The port is free again.
    listen_requests(&mut g, s, 7302, 4);
}

#[test]
fn requests_beyond_the_backlog_are_reset_and_counted() {
    let (mut g, s, c) = guest();
    let _l = listen_requests(&mut g, s, 7303, 1);
    let before = stat(&mut g, STAT_IWARP_REQUESTS_OVERFLOW);
    let ce = g.iwarp_endpoint_in(c, 4, 4096);
    let con = g.submit_connect_iwarp(c, ce.qp.id, LOOPBACK, 7303, &Mpa::plain());
    still_pending(&mut g, con, "the first CONNECT is held");
    let ce2 = g.iwarp_endpoint_in(c, 4, 4096);
    let con2 = g.submit_connect_iwarp(c, ce2.qp.id, LOOPBACK, 7303, &Mpa::plain());
    status(
        g.admin_wait_done(con2),
        ADMIN_STATUS_REFUSED,
        "CONNECT beyond the backlog",
    );
    assert_eq!(stat(&mut g, STAT_IWARP_REQUESTS_OVERFLOW), before + 1);
    still_pending(&mut g, con, "the first CONNECT is still held");
}

#[test]
fn a_request_that_does_not_come_in_time_resets_the_connection() {
    let mut g = setup::impatient(Duration::from_millis(300));
    let (s, c) = (g.create_ctx().unwrap(), g.create_ctx().unwrap());
    let l = listen_requests(&mut g, s, 7304, 4);
    let (pending, _) = submit_conn_request(&mut g, s, l);
    // A stream QP connects and says nothing.
    let mut plain = g.tcp_endpoint_in(c, FRAMING_STREAM, 4, 4096);
    let con = g.submit_connect(c, plain.qp.id, LOOPBACK, 7304);
    status(g.admin_wait_done(con), ADMIN_STATUS_OK, "TCP is up");
    let rsge = plain.buf.sge(0, 4096, plain.mr.lkey);
    g.post_recv(&mut plain.qp, &[recv_wqe(1, &[rsge])]);
    let r = g.wait_cqe(&mut plain.rcq);
    assert_eq!(r.status, CQE_STATUS_FLUSHED, "reset: {r:?}");
    assert_eq!(stat(&mut g, STAT_IWARP_REQUESTS_DROPPED), 1);
    still_pending(&mut g, pending, "no request was held");
}

#[test]
fn a_malformed_request_resets_the_connection() {
    let (mut g, s, c) = guest();
    let l = listen_requests(&mut g, s, 7305, 4);
    let (pending, _) = submit_conn_request(&mut g, s, l);
    let mut plain = g.tcp_endpoint_in(c, FRAMING_STREAM, 4, 4096);
    let con = g.submit_connect(c, plain.qp.id, LOOPBACK, 7305);
    status(g.admin_wait_done(con), ADMIN_STATUS_OK, "TCP is up");
    let rsge = plain.buf.sge(1024, 1024, plain.mr.lkey);
    g.post_recv(&mut plain.qp, &[recv_wqe(1, &[rsge])]);
    let junk = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    g.buf_write(&plain.buf, 0, junk);
    let sge = plain.buf.sge(0, junk.len() as u32, plain.mr.lkey);
    g.post_send(&mut plain.qp, &[tcp_send_wqe(2, 0, &[sge])]);
    let r = g.wait_cqe(&mut plain.rcq);
    assert_eq!(r.status, CQE_STATUS_FLUSHED, "reset: {r:?}");
    assert_eq!(stat(&mut g, STAT_IWARP_REQUESTS_DROPPED), 1);
    still_pending(&mut g, pending, "no request was held");
    // An MPA request announcing markers gets a reject reply instead.
    let mut plain = g.tcp_endpoint_in(c, FRAMING_STREAM, 4, 4096);
    let con = g.submit_connect(c, plain.qp.id, LOOPBACK, 7305);
    status(g.admin_wait_done(con), ADMIN_STATUS_OK, "TCP is up");
    let rsge = plain.buf.sge(1024, 1024, plain.mr.lkey);
    g.post_recv(&mut plain.qp, &[recv_wqe(1, &[rsge])]);
    let mut req = b"MPA ID Req Frame".to_vec();
    req.extend_from_slice(&[0x80, 1, 0, 0]);
    g.buf_write(&plain.buf, 0, &req);
    let sge = plain.buf.sge(0, req.len() as u32, plain.mr.lkey);
    g.post_send(&mut plain.qp, &[tcp_send_wqe(3, 0, &[sge])]);
    let r = g.wait_cqe(&mut plain.rcq);
    assert_eq!(r.status, CQE_STATUS_SUCCESS, "{r:?}");
    let reply = g.buf_read(&plain.buf, 1024, r.byte_len as usize);
    assert_eq!(&reply[..16], b"MPA ID Rep Frame");
    assert_eq!(reply[16] & 0x20, 0x20, "the reject flag");
    still_pending(&mut g, pending, "no request was held");
}

#[test]
fn a_peer_that_resets_while_its_request_is_held_drops_it() {
    let (mut g, s, c) = guest();
    let l = listen_requests(&mut g, s, 7306, 4);
    let ce = g.iwarp_endpoint_in(c, 4, 4096);
    let con = g.submit_connect_iwarp(c, ce.qp.id, LOOPBACK, 7306, &Mpa::plain());
    let r = conn_request(&mut g, s, l);
    // The initiator goes: its QP's destroy resets the connection.
    g.destroy_qp(c, ce.qp.id).unwrap();
    status(
        g.admin_wait_done(con),
        ADMIN_STATUS_CANCELLED,
        "CONNECT of a destroyed QP",
    );
    let se = g.iwarp_endpoint_in(s, 4, 4096);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    // The reset travels the loopback: the request is gone once it has arrived.
    loop {
        let acc = submit_accept_request(&mut g, s, l, se.qp.id, r.request, &Mpa::plain());
        let done = g.admin_wait_done(acc);
        if done.status == ADMIN_STATUS_BAD_HANDLE {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{}",
            admin_status_name(done.status)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_admin_err(
        reject(&mut g, s, l, r.request, b""),
        ADMIN_STATUS_BAD_HANDLE,
        "REJECT of a dropped request",
    );
}

#[test]
fn an_accept_of_a_request_needs_an_idle_iwarp_qp() {
    let (mut g, s, c) = guest();
    let l = listen_requests(&mut g, s, 7307, 4);
    let ce = g.iwarp_endpoint_in(c, 4, 4096);
    let con = g.submit_connect_iwarp(c, ce.qp.id, LOOPBACK, 7307, &Mpa::plain());
    let r = conn_request(&mut g, s, l);
    // A stream QP.
    let stream = g.tcp_endpoint_in(s, FRAMING_STREAM, 4, 4096);
    let mut a = AcceptArgs::new_zeroed();
    a.qp = stream.qp.id;
    a.request = r.request;
    let acc = g.admin_submit(cmd(ADMIN_OP_ACCEPT, s, l, &a));
    status(
        g.admin_wait_done(acc),
        ADMIN_STATUS_BAD_STATE,
        "a stream QP",
    );
    // A busy iWARP QP (offered to another listener).
    let other = g.listen(s, UNSPECIFIED, 7308, 4).unwrap();
    let busy = g.iwarp_endpoint_in(s, 4, 4096);
    let offered = g.submit_accept_iwarp(s, other, busy.qp.id, &Mpa::plain());
    let acc = submit_accept_request(&mut g, s, l, busy.qp.id, r.request, &Mpa::plain());
    status(g.admin_wait_done(acc), ADMIN_STATUS_BAD_STATE, "a busy QP");
    // An unknown request.
    let se = g.iwarp_endpoint_in(s, 4, 4096);
    let acc = submit_accept_request(&mut g, s, l, se.qp.id, r.request + 7, &Mpa::plain());
    status(
        g.admin_wait_done(acc),
        ADMIN_STATUS_BAD_HANDLE,
        "an unknown request",
    );
    // A request on a listener without the flag.
    let acc = submit_accept_request(&mut g, s, other, se.qp.id, r.request, &Mpa::plain());
    status(
        g.admin_wait_done(acc),
        ADMIN_STATUS_BAD_STATE,
        "a plain listener",
    );
    // CONN_REQUEST on it too.
    let (id, _) = submit_conn_request(&mut g, s, other);
    status(
        g.admin_wait_done(id),
        ADMIN_STATUS_BAD_STATE,
        "CONN_REQUEST on a plain listener",
    );
    // The request is still there for a good QP.
    let acc = submit_accept_request(&mut g, s, l, se.qp.id, r.request, &Mpa::plain());
    status(g.admin_wait_done(acc), ADMIN_STATUS_OK, "ACCEPT");
    status(g.admin_wait_done(con), ADMIN_STATUS_OK, "CONNECT");
    g.destroy_listener(s, other).unwrap();
    status(
        g.admin_wait_done(offered),
        ADMIN_STATUS_CANCELLED,
        "the offered QP",
    );
}

#[test]
fn listen_flags_are_checked() {
    let (mut g, s, _c) = guest();
    let mut a = ListenArgs::new_zeroed();
    a.addr = UNSPECIFIED;
    a.port = 7309;
    a.backlog = 4;
    a.flags = 0x8000;
    assert_admin_err(
        g.admin_result(cmd(ADMIN_OP_LISTEN, s, 0, &a)),
        ADMIN_STATUS_BAD_PARAM,
        "an unknown LISTEN flag",
    );
}

/// How long a raw initiator's request may take to be held: far less than the responder's
/// MPA request timer (5 s), so that a request left unread fails here and not as a reset.
const REQUEST_WAIT: Duration = Duration::from_secs(3);

/// The length of the initiator's private data (after RFC 6581's IRD/ORD block).
const INITIATOR_PD_LEN: usize = 56;

/// A device with a requests listener on [`DEV_PORT`], and an initiator the test plays on
/// its cable the way Linux's siw does: the handshake alone, then its MPA request (revision
/// 2, the IRD/ORD block, no CRC) in segments cut at `cuts` (offsets into the request),
/// each piece sent once the device has taken the ones before. The request must be held
/// whole, as it was sent; an ACCEPT of it sends the MPA reply. With `offer` the request
/// sets qpip's reserved bit offering immediate data (a qpip initiator's request), the
/// ACCEPT offers too, and the reply must answer it.
fn raw_initiator(name: &str, cuts: &[usize], offer: bool) {
    let mut p = Peer::with(name, Setup::V6);
    let ctx = p.ctx;
    let l = listen_requests(&mut p.g, ctx, DEV_PORT, 4);
    let (pending, buf) = submit_conn_request(&mut p.g, ctx, l);
    // The handshake's last ACK carries nothing, and the barrier of `< nothing` proves it
    // was taken (the connection established and held) before any of the request comes.
    p.run(
        "
        > S 0:0(0) win 65535 <mss 1440,sackOK,nop,wscale 7>
        < S. 0:0(0) ack 1
        > . 1:1(0) ack 1 win 1024
        < nothing
        ",
    );
    still_pending(&mut p.g, pending, "CONN_REQUEST before the request");
    let pd = pattern(INITIATOR_PD_LEN, 0x5a);
    let block = mpa::EnhancedBlock {
        ird: 3,
        ord: 8,
        ..Default::default()
    };
    let flags = mpa::Flags {
        reserved: if offer {
            mpa::flags::QPIP_IMMEDIATE_OFFER
        } else {
            0
        },
        ..mpa::Flags::default()
    };
    let req = mpa::build(
        mpa::Kind::Request,
        flags,
        mpa::REVISION_2,
        Some(&block),
        &pd,
    )
    .expect("a request");
    let mut from = 0;
    for to in cuts.iter().copied().chain([req.len()]) {
        let (seq, end, len) = (from + 1, to + 1, to - from);
        p.inject_bytes(
            &format!("> P. {seq}:{end}({len}) ack 1 win 1024"),
            &req[from..to],
        );
        // Acknowledged: the device has the piece (taken or staged) before the next comes.
        acked(&mut p, end as u32);
        from = to;
    }
    let Some(done) = p.g.admin_wait(pending, REQUEST_WAIT) else {
        panic!(
            "the request ({} bytes, cut at {cuts:?}) was never held",
            req.len()
        );
    };
    status(done, ADMIN_STATUS_OK, "CONN_REQUEST");
    let r: ConnRequest = p.g.read_obj(buf);
    assert_eq!(done.result0, r.request as u64);
    assert_eq!(&r.private_data[..r.pd_len as usize], &pd[..]);
    let offered = if offer { CONN_REQUEST_IMMEDIATE } else { 0 };
    assert_eq!((r.ird, r.ord, r.mpa_revision, r.flags), (3, 8, 2, offered));
    assert_eq!((r.peer_addr, r.peer_port), (p.addr.octets(), PEER_PORT));
    assert_eq!((r.local_addr, r.local_port), (p.dev.octets(), DEV_PORT));

    // Accepted: the MPA reply goes out with the responder's private data.
    let server = Mpa {
        private_data: b"welcome".to_vec(),
        ird: 4,
        ord: 2,
        flags: if offer { IWARP_CONN_IMMEDIATE } else { 0 },
    };
    let se = p.g.iwarp_endpoint_in(ctx, 4, 4096);
    let acc = submit_accept_request(&mut p.g, ctx, l, se.qp.id, r.request, &server);
    let reply = next_payload(&mut p);
    assert_eq!(
        reply
            .h
            .sequence_number
            .wrapping_sub(p.iss.expect("the device's ISN")),
        1,
        "the reply is the first byte the device sends"
    );
    let Ok(mpa::Prefix::Complete { frame, len }) =
        mpa::parse_prefix(&reply.payload, mpa::Kind::Reply)
    else {
        panic!("not an MPA reply: {:02x?}", reply.payload);
    };
    assert_eq!(len, reply.payload.len(), "the segment is the reply alone");
    assert_eq!(frame.revision, mpa::REVISION_2);
    assert!(!frame.flags.reject, "an accepting reply");
    assert!(
        !frame.flags.crc && !frame.flags.markers,
        "{:?}",
        frame.flags
    );
    let agreed = if offer {
        mpa::flags::QPIP_IMMEDIATE_AGREE
    } else {
        0
    };
    assert_eq!(frame.flags.reserved, agreed, "{:?}", frame.flags);
    let (reply_block, reply_pd) = frame.split_enhanced().expect("the reply's block");
    assert!(reply_block.is_some(), "the reply answers IRD/ORD");
    assert_eq!(reply_pd, b"welcome");
    p.run(&format!(
        "> . {seq}:{seq}(0) ack {ack} win 1024",
        seq = req.len() + 1,
        ack = len + 1
    ));
    status(p.g.admin_wait_done(acc), ADMIN_STATUS_OK, "ACCEPT");
    let si = p.g.query_conn(ctx, se.qp.id).expect("QUERY_CONN");
    assert_eq!(&si.private_data[..si.pd_len as usize], &pd[..]);
    let agreed = if offer { CONN_INFO_IMMEDIATE } else { 0 };
    assert_eq!(si.flags & CONN_INFO_IMMEDIATE, agreed, "{si:?}");
}

/// The device's next segment with payload (bare ACKs and window updates before it are
/// passed over).
fn next_payload(p: &mut Peer) -> Seg {
    loop {
        let s = p.next_seg();
        assert!(
            !(s.h.syn || s.h.fin || s.h.rst),
            "the device sent {:?}",
            s.h
        );
        if !s.payload.is_empty() {
            return s;
        }
    }
}

/// Waits for the device to acknowledge the test's bytes up to relative sequence `end`
/// (bare ACKs of less before it, such as window updates, are passed over).
#[track_caller]
fn acked(p: &mut Peer, end: u32) {
    loop {
        let s = p.next_seg();
        assert!(
            s.h.ack && !(s.h.syn || s.h.fin || s.h.rst) && s.payload.is_empty(),
            "a bare ACK: {:?}",
            s.h
        );
        let ack = s.h.acknowledgment_number.wrapping_sub(PEER_ISN);
        if ack == end {
            return;
        }
        assert!(ack < end, "ack {ack} past {end}");
    }
}

/// A Linux initiator (siw) sends its whole request in one segment; when that segment comes
/// after the handshake (not with its last ACK) the request must still be read whole, not
/// only its header.
#[test]
fn a_request_in_one_segment_after_the_handshake_is_held() {
    raw_initiator("req-one-segment", &[], false);
}

/// The header alone, then the private data it announces.
#[test]
fn a_request_whose_header_comes_alone_is_held() {
    raw_initiator("req-header-alone", &[mpa::HEADER_LEN], false);
}

/// The header and part of the private data, then the rest.
#[test]
fn a_request_cut_inside_its_private_data_is_held() {
    let cut = mpa::HEADER_LEN + mpa::ENHANCED_BLOCK_LEN + INITIATOR_PD_LEN / 2;
    raw_initiator("req-cut-in-pd", &[cut], false);
}

/// A qpip initiator's request (its reserved bit offering immediate data) is held with the
/// offer as `CONN_REQUEST_IMMEDIATE` and its private data as sent; an ACCEPT that offers
/// too answers it in the reply.
#[test]
fn a_request_offering_immediate_data_is_answered() {
    raw_initiator("req-immediate", &[mpa::HEADER_LEN], true);
}
