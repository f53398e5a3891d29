//! RFC 7306 Immediate Data between qpip devices: agreed only when both ends offer it (the
//! offer and the answer are qpip's reserved bits of the MPA header, the private data is
//! the applications' untouched), an RDMA Write with immediate data then completes a
//! receive on the peer carrying it, and without the agreement such a Write is refused.
//! Peers that are not qpip are played by stream QPs that speak MPA's frames byte by byte:
//! one that neither sets nor reads the bits, and one that sends the request's header bits
//! back in its reply the way Linux's siw does.

use qpip_device::net::iwarp::wire::mpa::{self, Prefix};

use crate::support::*;
use crate::*;

fn offer(pd: &[u8]) -> Mpa {
    Mpa {
        private_data: pd.to_vec(),
        flags: IWARP_CONN_IMMEDIATE,
        ..Mpa::plain()
    }
}

#[test]
fn a_write_with_immediate_data_completes_a_receive_on_the_peer() {
    let (mut g, s, c) = guest();
    let (mut se, mut ce, con, acc) =
        g.iwarp_pair((s, c), 7220, &offer(b"server pd"), &offer(b"client pd"));
    assert_eq!((con.status, acc.status), (ADMIN_STATUS_OK, ADMIN_STATUS_OK));
    let (ci, si) = (
        g.query_conn(c, ce.qp.id).unwrap(),
        g.query_conn(s, se.qp.id).unwrap(),
    );
    for i in [&ci, &si] {
        assert_eq!(i.flags & CONN_INFO_IMMEDIATE, CONN_INFO_IMMEDIATE, "{i:?}");
    }
    // The applications see their peer's private data, not the devices' block.
    assert_eq!(&ci.private_data[..ci.pd_len as usize], b"server pd");
    assert_eq!(&si.private_data[..si.pd_len as usize], b"client pd");

    let (target, tmr) = region(&mut g, s, 4096, MR_ACCESS_REMOTE_WRITE, 0);
    let data = pattern(3000, 9);
    g.buf_write(&ce.buf, 0, &data);
    let rsge = se.buf.sge(0, 64, se.mr.lkey);
    g.post_recv(&mut se.qp, &[recv_wqe(77, &[rsge])]);
    let sge = ce.buf.sge(0, 3000, ce.mr.lkey);
    g.post_send(
        &mut ce.qp,
        &[rdma_write_imm_wqe(
            1,
            target.iova,
            tmr.rkey,
            &[sge],
            0xdead_beef,
        )],
    );
    ok(&g.wait_cqe(&mut ce.scq), CQE_OP_RDMA_WRITE, 3000, "write");
    let r = g.wait_cqe(&mut se.rcq);
    assert_eq!(
        (r.wr_id, r.opcode, r.status, r.byte_len, r.imm_data),
        (77, CQE_OP_RECV_IMM, CQE_STATUS_SUCCESS, 0, 0xdead_beef),
        "{r:?}"
    );
    assert!(
        g.buf_read(&target, 0, 3000) == data,
        "the Write's bytes are there first"
    );
}

#[test]
fn without_both_offers_there_is_no_immediate_data() {
    let (mut g, s, c) = guest();
    // Only the initiator offers: the responder's device does not answer it, and its
    // application gets the private data as it was sent.
    let (se, mut ce, con, acc) = g.iwarp_pair((s, c), 7221, &Mpa::plain(), &offer(b"client pd"));
    assert_eq!((con.status, acc.status), (ADMIN_STATUS_OK, ADMIN_STATUS_OK));
    let (ci, si) = (
        g.query_conn(c, ce.qp.id).unwrap(),
        g.query_conn(s, se.qp.id).unwrap(),
    );
    assert_eq!((ci.flags | si.flags) & CONN_INFO_IMMEDIATE, 0);
    assert_eq!(&si.private_data[..si.pd_len as usize], b"client pd");
    let (target, tmr) = region(&mut g, s, 4096, MR_ACCESS_REMOTE_WRITE, 0);
    let sge = ce.buf.sge(0, 10, ce.mr.lkey);
    g.post_send(
        &mut ce.qp,
        &[rdma_write_imm_wqe(1, target.iova, tmr.rkey, &[sge], 5)],
    );
    let c1 = g.wait_cqe(&mut ce.scq);
    assert_eq!((c1.wr_id, c1.status), (1, CQE_STATUS_BAD_WQE), "{c1:?}");
    // The connection goes on: a plain Write works.
    g.post_send(
        &mut ce.qp,
        &[rdma_wqe(
            WQE_OP_RDMA_WRITE,
            2,
            target.iova,
            tmr.rkey,
            &[sge],
        )],
    );
    ok(
        &g.wait_cqe(&mut ce.scq),
        CQE_OP_RDMA_WRITE,
        10,
        "plain write",
    );
    // Immediate data without the flag is malformed.
    let mut h = wqe_hdr(WQE_OP_RDMA_WRITE, 3);
    h.num_sge = 1;
    h.set_remote(target.iova, tmr.rkey);
    h.imm_data = 9;
    g.post_send(&mut ce.qp, &[wqe_bytes(&h, &[sge])]);
    assert_eq!(g.wait_cqe(&mut ce.scq).status, CQE_STATUS_BAD_WQE);
}

/// Reads the MPA frame of `kind` that stream QP `e` receives, in as many pieces as it
/// comes; nothing may follow it.
fn read_frame(g: &mut FakeGuest, e: &mut TcpEnd, kind: mpa::Kind) -> Vec<u8> {
    let mut got = Vec::new();
    loop {
        let rsge = e.buf.sge(2048, 1024, e.mr.lkey);
        g.post_recv(&mut e.qp, &[recv_wqe(1, &[rsge])]);
        let r = g.wait_cqe(&mut e.rcq);
        assert_eq!(r.status, CQE_STATUS_SUCCESS, "{r:?}");
        got.extend(g.buf_read(&e.buf, 2048, r.byte_len as usize));
        match mpa::parse_prefix(&got, kind).expect("an MPA frame") {
            Prefix::Complete { len, .. } => {
                assert_eq!(len, got.len(), "bytes after the frame");
                return got;
            }
            Prefix::Incomplete { .. } => {}
        }
    }
}

/// Sends `bytes` on stream QP `e`.
fn send_raw(g: &mut FakeGuest, e: &mut TcpEnd, bytes: &[u8]) {
    g.buf_write(&e.buf, 0, bytes);
    let sge = e.buf.sge(0, bytes.len() as u32, e.mr.lkey);
    g.post_send(&mut e.qp, &[tcp_send_wqe(2, 0, &[sge])]);
    let c = g.wait_cqe(&mut e.scq);
    assert_eq!(c.status, CQE_STATUS_SUCCESS, "raw send: {c:?}");
}

/// The frame's flags byte, and its private data after the IRD/ORD block.
fn flags_and_pd(frame: &[u8], kind: mpa::Kind) -> (u8, Vec<u8>) {
    let Ok(Prefix::Complete { frame: f, .. }) = mpa::parse_prefix(frame, kind) else {
        panic!("not a whole frame: {frame:02x?}");
    };
    let (_, pd) = f.split_enhanced().expect("a well-formed frame");
    (frame[16], pd.to_vec())
}

/// A qpip initiator offering immediate data to a peer that is not qpip: the offer is the
/// request's header bit 0x01 and nothing else, the private data is the application's
/// alone. A peer that sends the request's bits back in its reply (siw does) has not agreed.
#[test]
fn a_peer_that_sends_the_offer_back_has_not_agreed() {
    let (mut g, s, c) = guest();
    let mut raw = g.tcp_endpoint_in(s, FRAMING_STREAM, 4, 4096);
    let mut ce = g.iwarp_endpoint_in(c, 4, 4096);
    let l = g.listen(s, UNSPECIFIED, 7222, 4).unwrap();
    let acc = g.submit_accept(s, l, raw.qp.id);
    let con = g.submit_connect_iwarp(c, ce.qp.id, LOOPBACK, 7222, &offer(b"client pd"));
    assert_eq!(g.admin_wait_done(acc).status, ADMIN_STATUS_OK, "TCP is up");
    let req = read_frame(&mut g, &mut raw, mpa::Kind::Request);
    let (flags, pd) = flags_and_pd(&req, mpa::Kind::Request);
    assert_eq!(
        flags & mpa::flags::RESERVED,
        mpa::flags::QPIP_IMMEDIATE_OFFER,
        "the offer: {flags:#04x}"
    );
    assert_eq!(pd, b"client pd", "the private data is the application's");
    // siw's reply: the request's header with the reply's key, its own private data.
    let mut reply = req[..mpa::HEADER_LEN + mpa::ENHANCED_BLOCK_LEN].to_vec();
    reply[..mpa::KEY_LEN].copy_from_slice(mpa::REPLY_KEY);
    reply.extend_from_slice(b"siw pd");
    let pd_len = (mpa::ENHANCED_BLOCK_LEN + 6) as u16;
    reply[18..20].copy_from_slice(&pd_len.to_be_bytes());
    send_raw(&mut g, &mut raw, &reply);
    assert_eq!(g.admin_wait_done(con).status, ADMIN_STATUS_OK, "CONNECT");
    let ci = g.query_conn(c, ce.qp.id).unwrap();
    assert_eq!(ci.flags & CONN_INFO_IMMEDIATE, 0, "{ci:?}");
    assert_eq!(&ci.private_data[..ci.pd_len as usize], b"siw pd");
    // A Write with immediate data is refused before anything goes out.
    let sge = ce.buf.sge(0, 10, ce.mr.lkey);
    g.post_send(
        &mut ce.qp,
        &[rdma_write_imm_wqe(1, 0x1000, 0x100, &[sge], 5)],
    );
    let c1 = g.wait_cqe(&mut ce.scq);
    assert_eq!(
        (c1.wr_id, c1.opcode, c1.status),
        (1, CQE_OP_RDMA_WRITE, CQE_STATUS_BAD_WQE),
        "{c1:?}"
    );
}

/// What a device responder answers a request from a peer it cannot tell from siw: the
/// reply's flags byte and private data, and whether QUERY_CONN says agreed.
fn answer(port: u16, request_flags: u8, server: &Mpa) -> (u8, Vec<u8>, bool, Vec<u8>) {
    let (mut g, s, c) = guest();
    let se = g.iwarp_endpoint_in(s, 4, 4096);
    let mut raw = g.tcp_endpoint_in(c, FRAMING_STREAM, 4, 4096);
    let l = g.listen(s, UNSPECIFIED, port, 4).unwrap();
    let acc = g.submit_accept_iwarp(s, l, se.qp.id, server);
    let con = g.submit_connect(c, raw.qp.id, LOOPBACK, port);
    assert_eq!(g.admin_wait_done(con).status, ADMIN_STATUS_OK, "TCP is up");
    let block = mpa::EnhancedBlock {
        ird: 4,
        ord: 4,
        ..Default::default()
    };
    let flags = mpa::Flags::from_byte(request_flags);
    let req = mpa::build(
        mpa::Kind::Request,
        flags,
        mpa::REVISION_2,
        Some(&block),
        b"raw pd",
    )
    .unwrap();
    send_raw(&mut g, &mut raw, &req);
    let reply = read_frame(&mut g, &mut raw, mpa::Kind::Reply);
    assert_eq!(g.admin_wait_done(acc).status, ADMIN_STATUS_OK, "ACCEPT");
    let si = g.query_conn(s, se.qp.id).unwrap();
    let (flags, pd) = flags_and_pd(&reply, mpa::Kind::Reply);
    (
        flags,
        pd,
        si.flags & CONN_INFO_IMMEDIATE != 0,
        si.private_data[..si.pd_len as usize].to_vec(),
    )
}

#[test]
fn a_responder_agrees_in_its_reply_only_to_a_request_that_offers() {
    let offer_bit = mpa::flags::QPIP_IMMEDIATE_OFFER;
    let agree_bit = mpa::flags::QPIP_IMMEDIATE_AGREE;
    // A qpip initiator's offer (the bit and nothing else), answered.
    let (flags, pd, agreed, req_pd) = answer(7223, offer_bit, &offer(b"server pd"));
    assert_eq!(flags & mpa::flags::RESERVED, agree_bit, "{flags:#04x}");
    assert!(agreed);
    assert_eq!(
        (pd.as_slice(), req_pd.as_slice()),
        (&b"server pd"[..], &b"raw pd"[..])
    );
    // siw's request (its GSO bit 0x08 maybe): no offer, no answer, private data intact.
    for (port, bits) in [(7224, 0), (7225, 0x08)] {
        let (flags, pd, agreed, req_pd) = answer(port, bits, &offer(b"server pd"));
        assert_eq!(flags & mpa::flags::RESERVED, 0, "{bits:#04x}: {flags:#04x}");
        assert!(!agreed);
        assert_eq!(
            (pd.as_slice(), req_pd.as_slice()),
            (&b"server pd"[..], &b"raw pd"[..])
        );
    }
    // An offer to a responder whose application did not: not answered.
    let (flags, _, agreed, _) = answer(7226, offer_bit, &Mpa::plain());
    assert_eq!(flags & mpa::flags::RESERVED, 0, "{flags:#04x}");
    assert!(!agreed);
}
