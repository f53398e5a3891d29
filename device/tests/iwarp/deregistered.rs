//! A deregistered region is never touched again, on iWARP QPs too: a receive WR in it
//! fails at once, and an RDMA Read whose source (the responder's region, streamed as Read
//! Responses) or sink (the requester's) is deregistered while the response is under way
//! stops there — the connection is reset, the Read does not complete as a success, and no
//! byte moves to or from the pages after DEREG_MR completed.

use crate::support::*;
use crate::*;

/// A receive WR the device has taken lies in a region that is then deregistered: it
/// completes with a protection error, and a Send that comes afterwards lands nowhere.
#[test]
fn a_receive_whose_region_is_deregistered_fails_and_nothing_lands_in_it() {
    let (mut g, s, c) = guest();
    let (mut se, mut ce) = connected(&mut g, s, c, 7300);
    let (buf, mr) = region(&mut g, s, 4096, MR_ACCESS_LOCAL_WRITE, 0xa5);
    let own = se.buf.sge(0, 64, se.mr.lkey);
    g.post_recv(
        &mut se.qp,
        &[
            recv_wqe(1, &[own]),
            recv_wqe(2, &[buf.sge(0, 4096, mr.lkey)]),
        ],
    );
    let msg = ce.buf.sge(0, 5, ce.mr.lkey);
    g.buf_write(&ce.buf, 0, b"first");
    g.post_send(&mut ce.qp, &[tcp_send_wqe(10, 0, &[msg])]);
    ok(&g.wait_cqe(&mut ce.scq), CQE_OP_SEND, 5, "send");
    ok(
        &g.wait_cqe(&mut se.rcq),
        CQE_OP_RECV,
        5,
        "receive into the endpoint's buffer",
    );

    g.dereg_mr(s, mr.lkey).expect("dereg");
    let gone = g.wait_cqe(&mut se.rcq);
    assert_eq!(
        (gone.wr_id, gone.status, gone.detail),
        (2, CQE_STATUS_LOCAL_PROTECTION, CQE_DETAIL_REGION_GONE),
        "{gone:?}"
    );
    g.post_send(&mut ce.qp, &[tcp_send_wqe(11, 0, &[msg])]);
    let sent = g.wait_cqe(&mut ce.scq);
    assert_ne!(
        sent.status, CQE_STATUS_SUCCESS,
        "the peer was reset: {sent:?}"
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(
        g.buf_read(&buf, 0, 4096).iter().all(|&b| b == 0xa5),
        "the device wrote into a deregistered region"
    );
}

/// Which end lets its region go while a Read's response is under way.
#[derive(Clone, Copy, Debug)]
enum Side {
    /// The responder deregisters the source its Read Responses stream from.
    Source,
    /// The requester deregisters the sink the response lands in.
    Sink,
}

/// A Read of 8 MiB; once its first bytes have landed, one side deregisters its region.
/// No byte moves after the deregistration: the sink's last bytes stay as they were, and
/// the Read fails. (Should the whole response land before the deregistration, the
/// attempt tells nothing and is made again.)
fn a_read_stops_when_a_region_goes(side: Side, port: u16) {
    const LEN: u64 = 8 << 20;
    for attempt in 0..5 {
        let (mut g, s, c) = guest();
        let (_se, mut ce) = connected(&mut g, s, c, port + attempt);
        let (source, smr) = region(&mut g, s, LEN, MR_ACCESS_REMOTE_READ, 0x5a);
        let (sink, kmr) = region(&mut g, c, LEN, MR_ACCESS_LOCAL_WRITE, 0);
        g.post_send(
            &mut ce.qp,
            &[rdma_wqe(
                WQE_OP_RDMA_READ,
                1,
                source.iova,
                smr.rkey,
                &[sink.sge(0, LEN as u32, kmr.lkey)],
            )],
        );
        let deadline = std::time::Instant::now() + TIMEOUT;
        while g.buf_read(&sink, 0, 1)[0] == 0 {
            assert!(std::time::Instant::now() < deadline, "no response came");
        }
        match side {
            Side::Source => g.dereg_mr(s, smr.lkey).expect("dereg source"),
            Side::Sink => g.dereg_mr(c, kmr.lkey).expect("dereg sink"),
        }
        let tail = g.buf_read(&sink, LEN - 4096, 4096);
        if tail.iter().any(|&b| b != 0) {
            eprintln!("{side:?}, attempt {attempt}: the whole response landed first; again");
            continue;
        }
        let r = g.wait_cqe(&mut ce.scq);
        assert_eq!(r.wr_id, 1);
        assert_ne!(
            r.status, CQE_STATUS_SUCCESS,
            "{side:?}: the Read went on after a region it used was deregistered: {r:?}"
        );
        if let Side::Sink = side {
            assert_eq!(
                (r.status, r.detail),
                (CQE_STATUS_LOCAL_PROTECTION, CQE_DETAIL_REGION_GONE),
                "{r:?}"
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert_eq!(
            g.buf_read(&sink, LEN - 4096, 4096),
            tail,
            "{side:?}: bytes moved after the deregistration"
        );
        return;
    }
    panic!("{side:?}: every attempt's response landed whole before the deregistration");
}

#[test]
fn a_read_response_stops_when_its_source_region_is_deregistered() {
    a_read_stops_when_a_region_goes(Side::Source, 7310);
}

#[test]
fn a_read_stops_when_its_sink_region_is_deregistered() {
    a_read_stops_when_a_region_goes(Side::Sink, 7320);
}
