//! Tripwires: an armed tripwire fires once when an RDMA Write or a Send places data in its
//! range — the ring-buffer consumer that sleeps until the next record is written — and its
//! parameters and the objects it holds are checked.

use std::time::Duration;

use crate::support::*;
use crate::*;

const RECORD: u64 = 64;

/// The client writes record `i` of the server's ring (wr_id `i`).
fn write_record(g: &mut FakeGuest, c: &mut TcpEnd, ring: &Buf, rkey: u32, i: u64) {
    let data = pattern(RECORD as usize, i as u8);
    g.buf_write(&c.buf, i * RECORD, &data);
    let sge = c.buf.sge(i * RECORD, RECORD as u32, c.mr.lkey);
    g.post_send(
        &mut c.qp,
        &[rdma_wqe(
            WQE_OP_RDMA_WRITE,
            i,
            ring.iova + i * RECORD,
            rkey,
            &[sge],
        )],
    );
    ok(
        &g.wait_cqe(&mut c.scq),
        CQE_OP_RDMA_WRITE,
        RECORD as u32,
        "write",
    );
}

#[test]
fn an_armed_tripwire_fires_once_when_a_write_reaches_its_record() {
    let (mut g, s, c) = guest();
    let (_se, mut ce) = connected(&mut g, s, c, 7210);
    let (ring, rmr) = region(&mut g, s, 16 * RECORD, MR_ACCESS_REMOTE_WRITE, 0);
    // The arm word in a small region of the server's own.
    let (arm, amr) = region(&mut g, s, 64, MR_ACCESS_LOCAL_WRITE, 0);
    let mut events = g.create_cq(s, 16).unwrap();
    // Watches the first byte of record 3 (where a consumer waits for the next record).
    let a = tripwire_args(
        (rmr.lkey, ring.iova + 3 * RECORD, 1),
        (amr.lkey, arm.iova + 8),
        events.id,
        0xfeed,
    );
    let tw = g.create_tripwire(s, &a).unwrap();
    let quiet = |g: &mut FakeGuest, events: &mut Cq, what: &str| {
        assert!(
            g.try_wait_cqe(events, Duration::from_millis(200)).is_none(),
            "{what}"
        );
    };
    // Disarmed at creation: record 3 written, no event.
    write_record(&mut g, &mut ce, &ring, rmr.rkey, 3);
    quiet(&mut g, &mut events, "a tripwire is disarmed until armed");
    // Armed (the word changes): records 0-2 do not touch it...
    g.buf_write(&arm, 8, &1u32.to_le_bytes());
    for i in 0..3 {
        write_record(&mut g, &mut ce, &ring, rmr.rkey, i);
    }
    quiet(&mut g, &mut events, "records before it");
    // ...record 3 does: one event, naming the tripwire, its tag and where.
    write_record(&mut g, &mut ce, &ring, rmr.rkey, 3);
    let e = g.wait_cqe(&mut events);
    assert_eq!(
        (e.opcode, e.status, e.wr_id, e.qp, e.byte_len),
        (CQE_OP_TRIPWIRE, CQE_STATUS_SUCCESS, 0xfeed, tw, 1),
        "{e:?}"
    );
    assert_eq!(e.src_addr[..8], (ring.iova + 3 * RECORD).to_le_bytes());
    // Once per arm.
    write_record(&mut g, &mut ce, &ring, rmr.rkey, 3);
    quiet(&mut g, &mut events, "fired once per arm");
    g.buf_write(&arm, 8, &2u32.to_le_bytes());
    write_record(&mut g, &mut ce, &ring, rmr.rkey, 3);
    assert_eq!(
        g.wait_cqe(&mut events).opcode,
        CQE_OP_TRIPWIRE,
        "armed again"
    );
    // Destroyed: nothing more, and the objects it held are free again.
    g.buf_write(&arm, 8, &3u32.to_le_bytes());
    g.destroy_tripwire(s, tw).unwrap();
    write_record(&mut g, &mut ce, &ring, rmr.rkey, 3);
    quiet(&mut g, &mut events, "a destroyed tripwire");
    g.destroy_cq(s, events.id).unwrap();
    g.dereg_mr(s, rmr.lkey).unwrap();
}

#[test]
fn a_send_placed_in_the_range_fires_it_too() {
    let (mut g, s, c) = guest();
    let (mut se, mut ce) = connected(&mut g, s, c, 7211);
    let (arm, amr) = region(&mut g, s, 64, MR_ACCESS_LOCAL_WRITE, 0);
    let mut events = g.create_cq(s, 16).unwrap();
    // Watches bytes 1000..1100 of the server's receive buffer.
    let a = tripwire_args(
        (se.mr.lkey, se.buf.iova + 1000, 100),
        (amr.lkey, arm.iova),
        events.id,
        7,
    );
    g.create_tripwire(s, &a).unwrap();
    g.buf_write(&arm, 0, &1u32.to_le_bytes());
    let rsge = se.buf.sge(0, 4096, se.mr.lkey);
    g.post_recv(&mut se.qp, &[recv_wqe(1, &[rsge])]);
    let sge = ce.buf.sge(0, 1050, ce.mr.lkey);
    g.post_send(&mut ce.qp, &[tcp_send_wqe(2, 0, &[sge])]);
    ok(&g.wait_cqe(&mut se.rcq), CQE_OP_RECV, 1050, "receive");
    let e = g.wait_cqe(&mut events);
    assert_eq!((e.opcode, e.wr_id, e.byte_len), (CQE_OP_TRIPWIRE, 7, 50));
    assert_eq!(e.src_addr[..8], (se.buf.iova + 1000).to_le_bytes());
}

#[test]
fn tripwire_parameters_and_the_objects_it_holds_are_checked() {
    let (mut g, s, c) = guest();
    let (b, mr) = region(&mut g, s, 4096, MR_ACCESS_REMOTE_WRITE, 0);
    let (ob, omr) = region(&mut g, c, 4096, MR_ACCESS_REMOTE_WRITE, 0);
    let cq = g.create_cq(s, 4).unwrap();
    let ocq = g.create_cq(c, 4).unwrap();
    let good = tripwire_args((mr.lkey, b.iova, 16), (mr.lkey, b.iova + 4000), cq.id, 1);
    // Refused: (what, watched range, arm word, CQ, the refusal), each with one thing wrong.
    let (range, arm) = ((mr.lkey, b.iova, 16), (mr.lkey, b.iova));
    let (param, handle) = (ADMIN_STATUS_BAD_PARAM, ADMIN_STATUS_BAD_HANDLE);
    let cases = [
        ("an empty range", (mr.lkey, b.iova, 0), arm, cq.id, param),
        (
            "a range outside its region",
            (mr.lkey, b.iova + 4090, 16),
            arm,
            cq.id,
            param,
        ),
        (
            "a misaligned arm word",
            range,
            (mr.lkey, b.iova + 2),
            cq.id,
            param,
        ),
        (
            "an arm word outside its region",
            range,
            (mr.lkey, b.iova + 4096),
            cq.id,
            param,
        ),
        (
            "another context's region",
            (omr.lkey, ob.iova, 16),
            arm,
            cq.id,
            handle,
        ),
        (
            "another context's arm word",
            range,
            (omr.lkey, ob.iova),
            cq.id,
            handle,
        ),
        ("another context's CQ", range, arm, ocq.id, handle),
    ];
    for (what, range, arm, cqid, want) in cases {
        let a = tripwire_args(range, arm, cqid, 1);
        assert_admin_err(g.create_tripwire(s, &a), want, what);
    }
    let mut r = good;
    r.reserved = 1;
    assert_admin_err(
        g.create_tripwire(s, &r),
        ADMIN_STATUS_BAD_OPCODE,
        "reserved bits",
    );
    let tw = g.create_tripwire(s, &good).unwrap();
    assert_admin_err(
        g.dereg_mr(s, mr.lkey),
        ADMIN_STATUS_BUSY,
        "a watched region",
    );
    assert_admin_err(g.destroy_cq(s, cq.id), ADMIN_STATUS_BUSY, "its CQ");
    assert_admin_err(
        g.destroy_tripwire(c, tw),
        ADMIN_STATUS_BAD_HANDLE,
        "from another context",
    );
    g.destroy_tripwire(s, tw).unwrap();
    assert_admin_err(g.destroy_tripwire(s, tw), ADMIN_STATUS_BAD_HANDLE, "twice");
    g.dereg_mr(s, mr.lkey).unwrap();
    g.destroy_cq(s, cq.id).unwrap();
    // A context's tripwires go with it.
    let t2 = tripwire_args((omr.lkey, ob.iova, 16), (omr.lkey, ob.iova + 64), ocq.id, 2);
    g.create_tripwire(c, &t2).unwrap();
    g.destroy_ctx(c).unwrap();
}
