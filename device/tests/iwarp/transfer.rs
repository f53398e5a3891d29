//! Data both ways: Sends of every size (one FPDU, many, none) into receive WRs, RDMA
//! Writes into the peer's region and RDMA Reads from it, with and without CRC, every byte
//! checked, completions in the order of their queue.

use crate::support::*;
use crate::*;

const SIZES: [usize; 7] = [0, 1, 100, 1440, 5000, 65_536, 200_000];

fn sends_arrive_whole(crc: bool) {
    let (mut g, s, c) = guest();
    let client = Mpa {
        flags: if crc { IWARP_CONN_CRC } else { 0 },
        ..Mpa::plain()
    };
    let (mut se, mut ce, con, acc) = g.iwarp_pair((s, c), 7180, &Mpa::plain(), &client);
    assert_eq!((con.status, acc.status), (ADMIN_STATUS_OK, ADMIN_STATUS_OK));
    let slot = 256 * 1024u64;
    // The server's receive buffers, one slot each, after its send data.
    let rx = g.alloc_buf(slot * SIZES.len() as u64, 0);
    let rmr = g.reg_mr(s, &rx, MR_ACCESS_LOCAL_WRITE).unwrap();
    let recvs: Vec<WqeBytes> = (0..SIZES.len())
        .map(|i| {
            let sge = rx.sge(i as u64 * slot, slot as u32, rmr.lkey);
            recv_wqe(100 + i as u64, &[sge])
        })
        .collect();
    g.post_recv(&mut se.qp, &recvs);
    let mut at = 0u64;
    for (i, &n) in SIZES.iter().enumerate() {
        let data = pattern(n, i as u8);
        g.buf_write(&ce.buf, at, &data);
        let sge = ce.buf.sge(at, n as u32, ce.mr.lkey);
        let w = if i % 2 == 1 {
            send_se_wqe(i as u64, &[sge])
        } else {
            tcp_send_wqe(i as u64, 0, &[sge])
        };
        g.post_send(&mut ce.qp, &[w]);
        at += n as u64;
    }
    for (i, &n) in SIZES.iter().enumerate() {
        let sc = g.wait_cqe(&mut ce.scq);
        ok(&sc, CQE_OP_SEND, n as u32, "send");
        assert_eq!(sc.wr_id, i as u64, "sends complete in order");
        let r = g.wait_cqe(&mut se.rcq);
        ok(&r, CQE_OP_RECV, n as u32, "receive");
        assert_eq!(r.wr_id, 100 + i as u64, "each Send takes the next WR");
        let solicited = if i % 2 == 1 { CQE_DETAIL_SOLICITED } else { 0 };
        assert_eq!(r.detail, solicited, "the solicited event shows");
        assert!(
            g.buf_read(&rx, i as u64 * slot, n) == pattern(n, i as u8),
            "the bytes of Send {i} ({n} bytes)"
        );
    }
    assert_eq!(
        g.query_conn(s, se.qp.id).unwrap().flags & CONN_INFO_CRC != 0,
        crc
    );
}

#[test]
fn sends_of_every_size_arrive_whole_and_in_order() {
    sends_arrive_whole(false);
}

#[test]
fn sends_arrive_whole_with_crc_on() {
    sends_arrive_whole(true);
}

#[test]
fn rdma_writes_land_in_the_peers_region_with_no_completion_there() {
    let (mut g, s, c) = guest();
    let (mut se, mut ce) = connected(&mut g, s, c, 7181);
    let len = 300_000u64;
    let (target, tmr) = region(&mut g, s, len, MR_ACCESS_REMOTE_WRITE, 0);
    assert_ne!(tmr.rkey, 0, "remote write rights give an rkey");
    let data = pattern(len as usize, 7);
    g.buf_write(&ce.buf, 0, &data[..(1 << 20).min(len as usize)]);
    // Two writes: the whole region but its first 100 bytes, then those, in two WRs.
    let sge = |off: u64, n: u64| ce.buf.sge(off, n as u32, ce.mr.lkey);
    g.post_send(
        &mut ce.qp,
        &[
            rdma_wqe(
                WQE_OP_RDMA_WRITE,
                1,
                target.iova + 100,
                tmr.rkey,
                &[sge(100, len - 100)],
            ),
            rdma_wqe(WQE_OP_RDMA_WRITE, 2, target.iova, tmr.rkey, &[sge(0, 100)]),
        ],
    );
    let a = g.wait_cqe(&mut ce.scq);
    ok(&a, CQE_OP_RDMA_WRITE, (len - 100) as u32, "write 1");
    ok(&g.wait_cqe(&mut ce.scq), CQE_OP_RDMA_WRITE, 100, "write 2");
    assert!(
        g.buf_read(&target, 0, len as usize) == data,
        "the region holds the bytes"
    );
    assert!(
        g.poll_cq(&mut se.rcq).is_none(),
        "a Write completes nothing at its target"
    );
    assert!(g.poll_cq(&mut se.scq).is_none());
}

#[test]
fn rdma_reads_fetch_the_peers_region_within_the_ord_in_order() {
    let (mut g, s, c) = guest();
    // The client may have one read outstanding at a time.
    let client = Mpa {
        ord: 1,
        ..Mpa::plain()
    };
    let (_se, mut ce, con, acc) = g.iwarp_pair((s, c), 7182, &Mpa::plain(), &client);
    assert_eq!((con.status, acc.status), (ADMIN_STATUS_OK, ADMIN_STATUS_OK));
    assert_eq!(g.query_conn(c, ce.qp.id).unwrap().ord, 1);
    let len = 100_000u64;
    let (source, smr) = region(&mut g, s, len, MR_ACCESS_REMOTE_READ, 0);
    let data = pattern(len as usize, 3);
    g.buf_write(&source, 0, &data);
    // Four reads of pieces of it into the client's buffer, a Send between them: all
    // complete, in the order posted.
    let pieces = [(0u64, 1u64), (1, 40_000), (40_001, 59_999), (0, 0)];
    let mut wqes = Vec::new();
    for (i, &(off, n)) in pieces.iter().enumerate() {
        let sge = ce.buf.sge(off, n as u32, ce.mr.lkey);
        wqes.push(rdma_wqe(
            WQE_OP_RDMA_READ,
            i as u64,
            source.iova + off,
            smr.rkey,
            &[sge],
        ));
    }
    g.post_send(&mut ce.qp, &wqes);
    for (i, &(_, n)) in pieces.iter().enumerate() {
        let r = g.wait_cqe(&mut ce.scq);
        ok(&r, CQE_OP_RDMA_READ, n as u32, "read");
        assert_eq!(r.wr_id, i as u64, "reads complete in order");
    }
    assert!(
        g.buf_read(&ce.buf, 0, len as usize) == data,
        "the reads brought every byte"
    );
}

/// Reads kept at the ORD the whole time, a new one posted as each completes: the
/// requester may post the next read once it has the last byte of a response, so the
/// responder must count that response's slot free as soon as the peer's ACK covers it
/// (the ACK rides on the segment carrying the next Read Request), not at some later
/// point of its own.
#[test]
fn reads_kept_at_the_ord_back_to_back_never_exceed_the_responders_ird() {
    let (mut g, s, c) = guest();
    let (_se, mut ce, con, acc) = g.iwarp_pair((s, c), 7183, &Mpa::plain(), &Mpa::plain());
    assert_eq!((con.status, acc.status), (ADMIN_STATUS_OK, ADMIN_STATUS_OK));
    let ord = g.query_conn(c, ce.qp.id).unwrap().ord as u64;
    assert_eq!(ord, 4);
    let len = 4096u64;
    let (source, smr) = region(&mut g, s, len, MR_ACCESS_REMOTE_READ, 0);
    let data = pattern(len as usize, 5);
    g.buf_write(&source, 0, &data);
    let n_reads = 400u64;
    let read = |i: u64| {
        // Sizes vary so that responses end at every offset of a segment.
        let n = 1 + (i * 37) % len;
        let sge = ce.buf.sge((i % ord) * len, n as u32, ce.mr.lkey);
        (
            n,
            rdma_wqe(WQE_OP_RDMA_READ, i, source.iova, smr.rkey, &[sge]),
        )
    };
    let first: Vec<WqeBytes> = (0..ord).map(|i| read(i).1).collect();
    g.post_send(&mut ce.qp, &first);
    for i in 0..n_reads {
        let r = g.wait_cqe(&mut ce.scq);
        let (n, _) = read(i);
        ok(&r, CQE_OP_RDMA_READ, n as u32, "read");
        assert_eq!(r.wr_id, i, "reads complete in order");
        assert!(
            g.buf_read(&ce.buf, (i % ord) * len, n as usize) == data[..n as usize],
            "read {i} brought its bytes"
        );
        if i + ord < n_reads {
            g.post_send(&mut ce.qp, &[read(i + ord).1]);
        }
    }
}

/// rping's exchange, iteration after iteration on queues of 8: the client advertises its
/// start buffer, the server reads it and says go, the client advertises its RDMA buffer,
/// the server writes back into it and says go; every echo checked.
#[test]
fn an_rping_exchange_runs_many_iterations_on_small_queues() {
    let (mut g, s, c) = guest();
    let (mut se, mut ce) = connected(&mut g, s, c, 7183);
    let size = 100u64;
    let (start, smr) = region(
        &mut g,
        c,
        size,
        MR_ACCESS_REMOTE_READ | MR_ACCESS_LOCAL_WRITE,
        0,
    );
    let (rdma, rmr) = region(
        &mut g,
        c,
        size,
        MR_ACCESS_REMOTE_WRITE | MR_ACCESS_LOCAL_WRITE,
        0,
    );
    let info = |g: &mut FakeGuest, e: &TcpEnd, at: u64, addr: u64, rkey: u32| {
        let mut b = addr.to_be_bytes().to_vec();
        b.extend_from_slice(&rkey.to_be_bytes());
        b.extend_from_slice(&(size as u32).to_be_bytes());
        g.buf_write(&e.buf, at, &b);
        e.buf.sge(at, 16, e.mr.lkey)
    };
    let rsge = |e: &TcpEnd| e.buf.sge(4096, 16, e.mr.lkey);
    let (sr, cr) = (rsge(&se), rsge(&ce));
    g.post_recv(&mut se.qp, &[recv_wqe(0, &[sr])]);
    g.post_recv(&mut ce.qp, &[recv_wqe(0, &[cr])]);
    for i in 0..50u64 {
        let text = pattern(size as usize, i as u8);
        g.buf_write(&start, 0, &text);
        // Client: its start buffer.
        let m = info(&mut g, &ce, 0, start.iova, smr.rkey);
        g.post_send(&mut ce.qp, &[tcp_send_wqe(1, 0, &[m])]);
        // Server: reads it into its buffer, says go.
        ok(
            &g.wait_cqe(&mut se.rcq),
            CQE_OP_RECV,
            16,
            "server: start buffer",
        );
        g.post_recv(&mut se.qp, &[recv_wqe(0, &[sr])]);
        let sink = se.buf.sge(8192, size as u32, se.mr.lkey);
        g.post_send(
            &mut se.qp,
            &[rdma_wqe(WQE_OP_RDMA_READ, 2, start.iova, smr.rkey, &[sink])],
        );
        ok(
            &g.wait_cqe(&mut se.scq),
            CQE_OP_RDMA_READ,
            size as u32,
            "server: read",
        );
        let go = info(&mut g, &se, 0, 0, 0);
        g.post_send(&mut se.qp, &[tcp_send_wqe(3, 0, &[go])]);
        // Client: its RDMA buffer.
        ok(&g.wait_cqe(&mut ce.rcq), CQE_OP_RECV, 16, "client: go 1");
        g.post_recv(&mut ce.qp, &[recv_wqe(0, &[cr])]);
        ok(
            &g.wait_cqe(&mut ce.scq),
            CQE_OP_SEND,
            16,
            "client: its send",
        );
        let m = info(&mut g, &ce, 0, rdma.iova, rmr.rkey);
        g.post_send(&mut ce.qp, &[tcp_send_wqe(4, 0, &[m])]);
        // Server: writes back, says go.
        ok(
            &g.wait_cqe(&mut se.rcq),
            CQE_OP_RECV,
            16,
            "server: rdma buffer",
        );
        g.post_recv(&mut se.qp, &[recv_wqe(0, &[sr])]);
        ok(&g.wait_cqe(&mut se.scq), CQE_OP_SEND, 16, "server: go 1");
        g.post_send(
            &mut se.qp,
            &[rdma_wqe(WQE_OP_RDMA_WRITE, 5, rdma.iova, rmr.rkey, &[sink])],
        );
        ok(
            &g.wait_cqe(&mut se.scq),
            CQE_OP_RDMA_WRITE,
            size as u32,
            "server: write",
        );
        g.post_send(&mut se.qp, &[tcp_send_wqe(6, 0, &[go])]);
        ok(&g.wait_cqe(&mut ce.rcq), CQE_OP_RECV, 16, "client: go 2");
        g.post_recv(&mut ce.qp, &[recv_wqe(0, &[cr])]);
        ok(
            &g.wait_cqe(&mut ce.scq),
            CQE_OP_SEND,
            16,
            "client: its send 2",
        );
        ok(&g.wait_cqe(&mut se.scq), CQE_OP_SEND, 16, "server: go 2");
        assert!(g.buf_read(&rdma, 0, size as usize) == text, "iteration {i}");
    }
}
