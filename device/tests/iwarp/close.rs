//! CLOSE on an iWARP QP: the WRs posted before it go first, as iWARP messages.

use std::sync::atomic::Ordering;

use crate::support::*;
use crate::*;

/// A Send the engine has not taken yet when CLOSE comes (in the ring, its doorbell slot
/// written but not yet seen) goes out before the FIN as an iWARP Send — never as raw
/// bytes on the MPA stream, which no record would frame.
#[test]
fn a_send_posted_before_close_goes_out_as_an_iwarp_send() {
    let (mut g, s, c) = guest();
    let (mut se, mut ce) = connected(&mut g, s, c, 7310);
    let data = pattern(1000, 7);
    g.buf_write(&ce.buf, 0, &data);
    g.post_recv(
        &mut se.qp,
        &[recv_wqe(1, &[se.buf.sge(0, 4096, se.mr.lkey)])],
    );
    // The tail is in the slot but the page's change count is not bumped, so the engine
    // reads it only when CLOSE takes what was posted before it.
    g.write_sq(
        &mut ce.qp,
        &[tcp_send_wqe(10, 0, &[ce.buf.sge(0, 1000, ce.mr.lkey)])],
    );
    g.db(c, qp_sq_tail(ce.qp.slot))
        .store(ce.qp.sq_tail, Ordering::Release);
    let close = g.submit_close(c, ce.qp.id);
    ok(
        &g.wait_cqe(&mut ce.scq),
        CQE_OP_SEND,
        1000,
        "the Send posted before CLOSE",
    );
    ok(&g.wait_cqe(&mut se.rcq), CQE_OP_RECV, 1000, "its receive");
    assert_eq!(g.buf_read(&se.buf, 0, 1000), data, "the bytes received");
    let done = g.admin_wait_done(close);
    assert_eq!(
        done.status,
        ADMIN_STATUS_OK,
        "CLOSE: {}",
        admin_status_name(done.status)
    );
}
