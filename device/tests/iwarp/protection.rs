//! Remote access that is not allowed — an unknown rkey, a deregistered region, a region of
//! another context, out of bounds, a missing right — moves no byte, and ends with a
//! Terminate naming the error: the WR that asked completes with it, everything else
//! FLUSHED, both QPs in the error state with their asynchronous events.

use crate::support::*;
use crate::*;

/// What a bad access should end in: the Terminate's (layer, type, code).
struct Case {
    what: &'static str,
    op: u8,
    /// (remote address offset, rkey change): where the WR points relative to the region.
    offset: u64,
    len: u32,
    access: u32,
    /// Deregister the region before the access.
    dereg: bool,
    /// Register the region in a third context instead.
    foreign: bool,
    bad_rkey: bool,
    want: (u8, u8, u8),
}

const PROTECTION: u8 = 0; // RDMAP
const DDP: u8 = 1;

fn cases() -> Vec<Case> {
    let base = Case {
        what: "",
        op: WQE_OP_RDMA_WRITE,
        offset: 0,
        len: 64,
        access: MR_ACCESS_REMOTE_WRITE,
        dereg: false,
        foreign: false,
        bad_rkey: false,
        want: (0, 0, 0),
    };
    vec![
        Case {
            what: "a Write with an unknown rkey",
            bad_rkey: true,
            want: (DDP, 1, 0x00), // tagged buffer: invalid STag
            ..base
        },
        Case {
            what: "a Write to a deregistered region",
            dereg: true,
            want: (DDP, 1, 0x00),
            ..base
        },
        Case {
            what: "a Write to another context's region",
            foreign: true,
            want: (DDP, 1, 0x00),
            ..base
        },
        Case {
            what: "a Write beyond the region",
            offset: 4096 - 32,
            want: (DDP, 1, 0x01), // base or bounds
            ..base
        },
        Case {
            what: "a Write to a read-only region",
            access: MR_ACCESS_REMOTE_READ,
            want: (PROTECTION, 1, 0x02), // remote protection: access rights
            ..base
        },
        Case {
            what: "a Read of a write-only region",
            op: WQE_OP_RDMA_READ,
            access: MR_ACCESS_REMOTE_WRITE,
            want: (PROTECTION, 1, 0x02),
            ..base
        },
        Case {
            what: "a Read beyond the region",
            op: WQE_OP_RDMA_READ,
            access: MR_ACCESS_REMOTE_READ,
            offset: 4000,
            len: 200,
            want: (PROTECTION, 1, 0x01),
            ..base
        },
        Case {
            what: "a Read with an unknown rkey",
            op: WQE_OP_RDMA_READ,
            access: MR_ACCESS_REMOTE_READ,
            bad_rkey: true,
            want: (PROTECTION, 1, 0x00),
            ..base
        },
    ]
}

#[test]
fn forbidden_remote_access_ends_in_a_terminate_and_errors_on_both_sides() {
    for (i, case) in cases().into_iter().enumerate() {
        let (mut g, s, c) = guest();
        let (mut se, mut ce) = connected(&mut g, s, c, 7190 + i as u16);
        let owner = if case.foreign {
            g.create_ctx().unwrap()
        } else {
            s
        };
        let (target, mr) = region(&mut g, owner, 4096, case.access, 0x5a);
        if case.dereg {
            g.dereg_mr(owner, mr.lkey).unwrap();
        }
        let rkey = if case.bad_rkey {
            mr.rkey ^ 0x8000_0001
        } else {
            mr.rkey
        };
        g.buf_write(&ce.buf, 0, &[0xa5; 4096]);
        // A receive on each side, to be flushed.
        let rsge = |e: &TcpEnd| e.buf.sge(65_536, 1024, e.mr.lkey);
        let (sr, cr) = (rsge(&se), rsge(&ce));
        g.post_recv(&mut se.qp, &[recv_wqe(50, &[sr])]);
        g.post_recv(&mut ce.qp, &[recv_wqe(60, &[cr])]);
        let sge = ce.buf.sge(0, case.len, ce.mr.lkey);
        let after = ce.buf.sge(0, 8, ce.mr.lkey);
        g.post_send(
            &mut ce.qp,
            &[
                rdma_wqe(case.op, 1, target.iova + case.offset, rkey, &[sge]),
                tcp_send_wqe(2, 0, &[after]),
            ],
        );
        let what = case.what;
        let (layer, etype, code) = case.want;
        // The first WR not completed when the Terminate arrives completes with its error,
        // the ones after it FLUSHED. A Read is always that WR (it waits for its response);
        // a Write may have completed already (iWARP reports a Write's error afterwards,
        // on the connection), then the Send after it takes the error.
        let status = if etype == 1 {
            CQE_STATUS_REMOTE_ACCESS
        } else {
            CQE_STATUS_REMOTE_OPERATION
        };
        let detail = cqe_detail_terminate(layer, etype, code, true);
        let done = [g.wait_cqe(&mut ce.scq), g.wait_cqe(&mut ce.scq)];
        assert_eq!((done[0].wr_id, done[1].wr_id), (1, 2), "{what}: in order");
        let first = done.iter().position(|c| c.status != CQE_STATUS_SUCCESS);
        let Some(first) = first else {
            panic!("{what}: no WR completed in error: {done:?}")
        };
        assert_eq!(
            (done[first].status, done[first].detail),
            (status, detail),
            "{what}: the WR completes with the Terminate's error: {:?}",
            done[first]
        );
        assert!(
            done[first + 1..]
                .iter()
                .all(|c| c.status == CQE_STATUS_FLUSHED),
            "{what}: {done:?}"
        );
        if case.op == WQE_OP_RDMA_READ {
            assert_eq!(first, 0, "{what}: the Read itself fails");
        }
        for (e, wr) in [(&mut ce, 60), (&mut se, 50)] {
            let r = g.wait_cqe(&mut e.rcq);
            assert_eq!(
                (r.wr_id, r.status),
                (wr, CQE_STATUS_FLUSHED),
                "{what}: {r:?}"
            );
        }
        // Both QPs know why.
        let ci = g.query_conn(c, ce.qp.id).unwrap();
        let si = g.query_conn(s, se.qp.id).unwrap();
        let term = (layer as u32) << 12 | (etype as u32) << 8 | code as u32;
        assert_eq!((ci.terminate, si.terminate), (term, term), "{what}");
        assert_eq!(
            ci.flags & CONN_INFO_TERMINATE_RECEIVED,
            CONN_INFO_TERMINATE_RECEIVED
        );
        assert_eq!(
            si.flags & CONN_INFO_TERMINATE_RECEIVED,
            0,
            "{what}: the server sent it"
        );
        // Nothing of the region moved.
        if !case.dereg {
            assert!(
                g.buf_read(&target, 0, 4096).iter().all(|&b| b == 0x5a),
                "{what}: the region was touched"
            );
        }
        // The asynchronous events: one QP error each, reason Terminate.
        let mut seen = Vec::new();
        for _ in 0..2 {
            let id = g.submit_async_event();
            let (ctx, qp, kind, reason, _) = async_event(&g.admin_wait_done(id));
            assert_eq!(
                (kind, reason),
                (ASYNC_EVENT_QP_ERROR, ASYNC_REASON_TERMINATE),
                "{what}"
            );
            seen.push((ctx, qp));
        }
        seen.sort();
        let mut want = vec![(s, se.qp.id), (c, ce.qp.id)];
        want.sort();
        assert_eq!(seen, want, "{what}");
    }
}

/// After a Terminate the side that sent it may still CLOSE its QP and learn when the
/// close is done (its FIN, after the Terminate, acknowledged): an application that waits
/// for that before destroying the QP knows the peer got the Terminate. (Destroyed sooner,
/// the connection is reset, and a Terminate still unacknowledged is lost with it.)
#[test]
fn the_side_that_sent_a_terminate_can_close_and_wait_for_it() {
    let (mut g, s, c) = guest();
    let (se, mut ce) = connected(&mut g, s, c, 7290);
    let (target, mr) = region(&mut g, s, 4096, MR_ACCESS_REMOTE_READ, 0x5a);
    let sge = ce.buf.sge(0, 64, ce.mr.lkey);
    g.post_send(
        &mut ce.qp,
        &[rdma_wqe(WQE_OP_RDMA_WRITE, 1, target.iova, mr.rkey, &[sge])],
    );
    g.wait_cqe(&mut ce.scq);
    // The server's QP sent the Terminate and is in the error state.
    let si = g.query_conn(s, se.qp.id).unwrap();
    assert_ne!(si.terminate, 0, "no Terminate sent");
    let cmd = g.submit_close(s, se.qp.id);
    let done = g.admin_wait_done(cmd);
    assert_eq!(
        done.status,
        ADMIN_STATUS_OK,
        "CLOSE after a Terminate: {}",
        admin_status_name(done.status)
    );
    let ci = g.query_conn(c, ce.qp.id).unwrap();
    assert_ne!(
        ci.flags & CONN_INFO_TERMINATE_RECEIVED,
        0,
        "the client got it"
    );
}

/// A Terminate that comes when no WR is left to take its error (the refused Write had
/// completed, acknowledged before its verdict, and nothing else was posted) gives it to
/// the next WR the guest posts: the application learns why its QP failed, not just that
/// it did. The WRs after that one are FLUSHED.
#[test]
fn a_terminate_with_no_wr_waiting_gives_its_error_to_the_next_wr_posted() {
    let (mut g, s, c) = guest();
    let (_se, mut ce) = connected(&mut g, s, c, 7230);
    let (target, mr) = region(&mut g, s, 4096, MR_ACCESS_REMOTE_WRITE, 0x5a);
    let sge = ce.buf.sge(0, 64, ce.mr.lkey);
    let bad = rdma_wqe(
        WQE_OP_RDMA_WRITE,
        1,
        target.iova,
        mr.rkey ^ 0x8000_0001,
        &[sge],
    );
    g.post_send(&mut ce.qp, &[bad]);
    let w = g.wait_cqe(&mut ce.scq);
    assert_eq!(w.wr_id, 1);
    // Wait for the client's QP to have received the Terminate (its asynchronous event);
    // the server's event comes too, in either order.
    let mut client_failed = w.status != CQE_STATUS_SUCCESS;
    for _ in 0..2 {
        let id = g.submit_async_event();
        let (ctx, qp, kind, _, _) = async_event(&g.admin_wait_done(id));
        assert_eq!(kind, ASYNC_EVENT_QP_ERROR);
        client_failed |= (ctx, qp) == (c, ce.qp.id);
    }
    assert!(client_failed, "the client's QP got no error event");
    let detail = cqe_detail_terminate(DDP, 1, 0x00, true);
    if w.status != CQE_STATUS_SUCCESS {
        // The Write was still waiting when the Terminate came and took the error itself.
        assert_eq!((w.status, w.detail), (CQE_STATUS_REMOTE_ACCESS, detail));
        return;
    }
    let after = ce.buf.sge(0, 8, ce.mr.lkey);
    g.post_send(
        &mut ce.qp,
        &[tcp_send_wqe(2, 0, &[after]), tcp_send_wqe(3, 0, &[after])],
    );
    let next = g.wait_cqe(&mut ce.scq);
    assert_eq!(
        (next.wr_id, next.status, next.detail),
        (2, CQE_STATUS_REMOTE_ACCESS, detail),
        "the first WR posted after the Terminate takes its error: {next:?}"
    );
    let last = g.wait_cqe(&mut ce.scq);
    assert_eq!(
        (last.wr_id, last.status),
        (3, CQE_STATUS_FLUSHED),
        "{last:?}"
    );
}
