//! A deregistered region is never touched again: DEREG_MR invalidates the region at once,
//! so a WR that still holds it fails with `CQE_DETAIL_REGION_GONE`, its QP moves to the
//! error state (the connection is reset: nothing is sent again from the pages, nothing
//! placed into them), and the other WRs are flushed.

use super::*;

/// The bytes a region's pages hold before the test, to see that nothing wrote them.
const UNTOUCHED: u8 = 0xa5;

/// A receive WR the device has taken holds a region that is then deregistered: the WR
/// completes with a protection error at once, and data that arrives afterwards is never
/// written into the pages (the guest may have given them to someone else).
#[test]
fn a_receive_whose_region_is_deregistered_fails_and_nothing_lands_in_it() {
    for framing in [FRAMING_MESSAGE, FRAMING_STREAM] {
        let mut g = FakeGuest::new();
        let (sctx, cctx) = (g.create_ctx().unwrap(), g.create_ctx().unwrap());
        let (mut s, mut c) = g.loopback_pair(sctx, cctx, 6400 + framing as u16, framing);
        let buf = g.alloc_buf(2 * PAGE, 0);
        g.buf_write(&buf, 0, &vec![UNTOUCHED; 2 * PAGE as usize]);
        let mr = g.reg_mr(sctx, &buf, MR_ACCESS_LOCAL_WRITE).unwrap();
        // WR 1 in the endpoint's own buffer, WR 2 in the region: the device takes both in
        // one look at the doorbell, before the client's send below can arrive.
        let own = s.buf.sge(0, 64, s.mr.lkey);
        g.post_recv(
            &mut s.qp,
            &[
                recv_wqe(1, &[own]),
                recv_wqe(2, &[buf.sge(0, 2 * PAGE as u32, mr.lkey)]),
            ],
        );
        g.post_send(&mut c.qp, &[tcp_inline_wqe(10, 0, b"first")]);
        assert_eq!(g.wait_cqe(&mut c.scq).status, CQE_STATUS_SUCCESS);
        let first = g.wait_cqe(&mut s.rcq);
        assert_eq!(
            (first.wr_id, first.status),
            (1, CQE_STATUS_SUCCESS),
            "{first:?}"
        );

        g.dereg_mr(sctx, mr.lkey).expect("dereg");
        let gone = g
            .try_wait_cqe(&mut s.rcq, TIMEOUT)
            .expect("the WR in the deregistered region completes at once");
        assert_eq!(
            (gone.wr_id, gone.status, gone.detail),
            (2, CQE_STATUS_LOCAL_PROTECTION, CQE_DETAIL_REGION_GONE),
            "framing {framing}: {gone:?}"
        );
        // The client's next bytes find no connection (it was reset) and never reach the
        // pages.
        g.post_send(&mut c.qp, &[tcp_inline_wqe(11, 0, b"for freed pages")]);
        let sent = g.wait_cqe(&mut c.scq);
        assert_ne!(
            sent.status, CQE_STATUS_SUCCESS,
            "the peer was reset: {sent:?}"
        );
        std::thread::sleep(QUIET);
        assert!(
            g.buf_read(&buf, 0, 2 * PAGE as usize)
                .iter()
                .all(|&b| b == UNTOUCHED),
            "framing {framing}: the device wrote into a deregistered region"
        );
    }
}

/// A send waiting for its ACK (and any retransmission of it) reads its region each time
/// a segment is built. Deregistered under it: the WR fails, the connection is reset, and
/// the bytes not yet sent never leave the pages.
#[test]
fn a_send_whose_region_is_deregistered_before_its_ack_fails_and_stops() {
    let mut g = FakeGuest::new();
    let (sctx, cctx) = (g.create_ctx().unwrap(), g.create_ctx().unwrap());
    let (mut s, mut c) = g.loopback_pair(sctx, cctx, 6410, FRAMING_STREAM);
    // Far more than the receiver takes without posting receives (its staging
    // allowance): most of it waits for window in the client's region.
    const LEN: u64 = 1 << 20;
    let buf = g.alloc_buf(LEN, 0);
    g.buf_write(&buf, 0, &vec![UNTOUCHED; LEN as usize]);
    let mr = g.reg_mr(cctx, &buf, 0).unwrap();
    g.post_send(
        &mut c.qp,
        &[tcp_send_wqe(20, 0, &[buf.sge(0, LEN as u32, mr.lkey)])],
    );
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        g.poll_cq(&mut c.scq).is_none(),
        "the send cannot be acknowledged yet: nothing receives"
    );
    g.dereg_mr(cctx, mr.lkey).expect("dereg");
    let failed = g
        .try_wait_cqe(&mut c.scq, TIMEOUT)
        .expect("the send in the deregistered region completes at once");
    assert_eq!(
        (failed.wr_id, failed.status, failed.detail),
        (20, CQE_STATUS_LOCAL_PROTECTION, CQE_DETAIL_REGION_GONE),
        "{failed:?}"
    );
    // The receiver now posts room for everything: what it gets is what had been sent
    // before the deregistration, never the whole megabyte, and then the reset.
    let room = s.buf.len.min(LEN);
    let mut got = 0u64;
    for i in 0..16 {
        g.post_recv(
            &mut s.qp,
            &[recv_wqe(100 + i, &[s.buf.sge(0, room as u32, s.mr.lkey)])],
        );
    }
    while let Some(r) = g.try_wait_cqe(&mut s.rcq, QUIET) {
        if r.status != CQE_STATUS_SUCCESS {
            assert_eq!(r.status, CQE_STATUS_FLUSHED, "{r:?}");
            break;
        }
        got += r.byte_len as u64;
    }
    assert!(
        got < LEN,
        "{got} bytes arrived: the send went on after its region was gone"
    );
}

/// Deregistering a region no WR holds changes nothing for the QPs of its context.
#[test]
fn a_region_no_wr_holds_is_deregistered_without_harm() {
    let mut g = FakeGuest::new();
    let (sctx, cctx) = (g.create_ctx().unwrap(), g.create_ctx().unwrap());
    let (mut s, mut c) = g.loopback_pair(sctx, cctx, 6420, FRAMING_MESSAGE);
    let buf = g.alloc_buf(PAGE, 0);
    let mr = g.reg_mr(sctx, &buf, MR_ACCESS_LOCAL_WRITE).unwrap();
    g.post_recv(&mut s.qp, &[recv_wqe(1, &[s.buf.sge(0, 64, s.mr.lkey)])]);
    g.dereg_mr(sctx, mr.lkey).expect("dereg");
    g.post_send(&mut c.qp, &[tcp_inline_wqe(10, 0, b"still here")]);
    assert_eq!(g.wait_cqe(&mut c.scq).status, CQE_STATUS_SUCCESS);
    let r = g.wait_cqe(&mut s.rcq);
    assert_eq!(
        (r.wr_id, r.status, r.byte_len),
        (1, CQE_STATUS_SUCCESS, 10),
        "{r:?}"
    );
}
