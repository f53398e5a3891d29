//! What a datagram carries arrives intact: every size up to the UDP maximum, within a
//! context and across contexts, gathered from and scattered into uneven SGEs across page
//! boundaries, and inline data of every length the WQE holds.

use crate::support::*;
use crate::{pair, MAX_UDP};

/// Sends `payload` from `a` (at offset 100 of its buffer) to `b` (received at offset 7),
/// checks both completions, the bytes and the canary around them.
fn round_trip(
    g: &mut FakeGuest,
    a: &mut Udp,
    b: &mut Udp,
    dst: [u8; 16],
    payload: &[u8],
    tag: u64,
) {
    let n = payload.len() as u64;
    g.buf_fill(&b.buf, 0x5a);
    g.buf_write(&a.buf, 100, payload);
    let rlen = (b.buf.len - 7) as u32;
    let r = recv_wqe(tag | 1 << 63, &[b.buf.sge(7, rlen, b.mr.lkey)]);
    g.post_recv(&mut b.qp, &[r]);
    let s = send_wqe(tag, dst, b.port, &[a.buf.sge(100, n as u32, a.mr.lkey)]);
    g.post_send(&mut a.qp, &[s]);

    let sc = g.wait_cqe(&mut a.scq);
    assert_cqe(&sc, CQE_STATUS_SUCCESS, 0, &format!("send of {n} bytes"));
    assert_eq!(
        (sc.wr_id, sc.opcode, sc.qp, sc.byte_len),
        (tag, CQE_OP_SEND, a.qp.id, n as u32),
        "{sc:?}"
    );
    let Some(rc) = g.try_wait_cqe(&mut b.rcq, TIMEOUT) else {
        let s = g.query_stats().counters;
        panic!(
            "the {n}-byte datagram was never received; UDP_RX_NO_WR {} UDP_RX_NO_PORT {} UDP_RX {}",
            s[STAT_UDP_RX_NO_WR as usize], s[STAT_UDP_RX_NO_PORT as usize], s[STAT_UDP_RX as usize]
        );
    };
    assert_cqe(&rc, CQE_STATUS_SUCCESS, 0, &format!("receive of {n} bytes"));
    assert_eq!(
        (rc.wr_id, rc.opcode, rc.qp, rc.byte_len, rc.imm_data),
        (tag | 1 << 63, CQE_OP_RECV, b.qp.id, n as u32, 0),
        "{rc:?}"
    );
    assert_eq!(rc.src_port, a.port, "source port");
    assert_eq!(rc.src_addr, dst, "source address of a sender bound to ::");
    let got = g.buf_read(&b.buf, 7, n as usize);
    if let Some(i) = got.iter().zip(payload).position(|(x, y)| x != y) {
        panic!("{n}-byte datagram differs at byte {i}");
    }
    assert_eq!(
        g.buf_read(&b.buf, 0, 7),
        vec![0x5a; 7],
        "bytes before the receive buffer"
    );
    let after = (b.buf.len - 7 - n).min(256) as usize;
    assert!(
        g.buf_read(&b.buf, 7 + n, after).iter().all(|&x| x == 0x5a),
        "bytes after a {n}-byte datagram were written"
    );
}

fn sizes_round_trip(same_ctx: bool) {
    let mut g = FakeGuest::new();
    let ll = g.link_local();
    let (mut a, mut b) = pair(&mut g, same_ctx, MAX_UDP + 200);
    let mut rng = Rng::new(0x5eed);
    for (i, size) in [0usize, 1, 63, 64, 1500, 4096, 9000, MAX_UDP as usize]
        .into_iter()
        .enumerate()
    {
        let payload = rng.bytes(size);
        let dst = if i % 2 == 0 { ll } else { LOOPBACK };
        round_trip(&mut g, &mut a, &mut b, dst, &payload, 1000 + i as u64);
    }
}

#[test]
fn datagrams_of_every_size_arrive_intact_within_a_context() {
    sizes_round_trip(true);
}

#[test]
fn datagrams_of_every_size_arrive_intact_across_contexts() {
    sizes_round_trip(false);
}

#[test]
fn five_uneven_sges_gather_and_scatter_across_page_boundaries() {
    let mut g = FakeGuest::new();
    let ctx = g.create_ctx().unwrap();
    let mut a = g.udp_endpoint_in(ctx, UNSPECIFIED, 0, 8, 16, 0);
    let mut b = g.udp_endpoint_in(ctx, UNSPECIFIED, 0, 8, 16, 0);
    // Buffers that start near the end of a page, on scattered pages.
    let sbuf = g.alloc_buf(20_000, 4000);
    let smr = g.reg_mr(ctx, &sbuf, 0).unwrap();
    let rbuf = g.alloc_buf(20_000, 2049);
    let rmr = g.reg_mr(ctx, &rbuf, MR_ACCESS_LOCAL_WRITE).unwrap();
    let mut rng = Rng::new(7);
    let data = rng.bytes(20_000);
    g.buf_write(&sbuf, 0, &data);

    let gather: [(u64, u32); 5] = [(0, 1), (10, 4095), (4200, 3000), (8190, 17), (9000, 5000)];
    let scatter: [(u64, u32); 5] = [
        (5, 700),
        (1000, 6000),
        (7100, 33),
        (8000, 4096),
        (13000, 5000),
    ];
    let expected: Vec<u8> = gather
        .iter()
        .flat_map(|&(o, l)| data[o as usize..o as usize + l as usize].to_vec())
        .collect();
    let total = expected.len();

    // Twice: once into five SGEs with room to spare, once with a zero-length SGE in each list.
    for round in 0..2 {
        g.buf_fill(&rbuf, 0xc3);
        let mut gs: Vec<Sge> = gather
            .iter()
            .map(|&(o, l)| sbuf.sge(o, l, smr.lkey))
            .collect();
        let mut ss: Vec<Sge> = scatter
            .iter()
            .map(|&(o, l)| rbuf.sge(o, l, rmr.lkey))
            .collect();
        if round == 1 {
            gs[2] = sbuf.sge(0, 0, smr.lkey);
            ss[1].length = 0;
            // Keep the receive big enough: the fourth SGE takes what the second no longer does.
            ss[3].length = 9000;
        }
        let want: Vec<u8> = if round == 0 {
            expected.clone()
        } else {
            gs.iter()
                .flat_map(|s| {
                    let o = (s.addr - sbuf.iova) as usize;
                    data[o..o + s.length as usize].to_vec()
                })
                .collect()
        };
        g.post_recv(&mut b.qp, &[recv_wqe(50 + round, &ss)]);
        g.post_send(&mut a.qp, &[send_wqe(round, LOOPBACK, b.port, &gs)]);
        let sc = g.wait_cqe(&mut a.scq);
        assert_cqe(&sc, CQE_STATUS_SUCCESS, 0, "multi-SGE send");
        assert_eq!(sc.byte_len as usize, want.len());
        let rc = g.wait_cqe(&mut b.rcq);
        assert_cqe(&rc, CQE_STATUS_SUCCESS, 0, "multi-SGE receive");
        assert_eq!(rc.byte_len as usize, want.len());

        // Walk the scatter list: bytes in order, the unused tail and the gaps untouched.
        let mut at = 0usize;
        let mut covered = vec![false; rbuf.len as usize];
        for s in &ss {
            let o = (s.addr - rbuf.iova) as usize;
            let n = (s.length as usize).min(want.len() - at);
            assert_eq!(
                g.buf_read(&rbuf, o as u64, n),
                want[at..at + n],
                "round {round}: SGE at {o}"
            );
            covered[o..o + n].iter_mut().for_each(|c| *c = true);
            at += n;
        }
        assert_eq!(at, want.len());
        let all = g.buf_read(&rbuf, 0, rbuf.len as usize);
        if let Some(i) = (0..all.len()).find(|&i| !covered[i] && all[i] != 0xc3) {
            panic!(
                "round {round}: byte {i} of the receive buffer outside the placed data was written"
            );
        }
    }
    assert!(total > 12_000);
}

#[test]
fn inline_sends_of_0_to_80_bytes() {
    let mut g = FakeGuest::new();
    let (mut a, mut b) = {
        let ctx = g.create_ctx().unwrap();
        let a = g.udp_endpoint_in(ctx, UNSPECIFIED, 0, 128, 256, 0);
        let b = g.udp_endpoint_in(ctx, UNSPECIFIED, 0, 128, 256, 128 * 128);
        (a, b)
    };
    g.buf_fill(&b.buf, 0xee);
    let recvs: Vec<WqeBytes> = (0..=80u64)
        .map(|i| recv_wqe(i, &[b.buf.sge(i * 128, 128, b.mr.lkey)]))
        .collect();
    g.post_recv(&mut b.qp, &recvs);
    let mut rng = Rng::new(80);
    let payloads: Vec<Vec<u8>> = (0..=80).map(|n| rng.bytes(n)).collect();
    let sends: Vec<WqeBytes> = payloads
        .iter()
        .enumerate()
        .map(|(i, p)| inline_wqe(i as u64, LOOPBACK, b.port, p))
        .collect();
    g.post_send(&mut a.qp, &sends);
    for (i, p) in payloads.iter().enumerate() {
        for (cq, what) in [(&mut a.scq, "inline send"), (&mut b.rcq, "its receive")] {
            let c = g.wait_cqe(cq);
            let what = format!("{what} of {i} bytes");
            assert_cqe(&c, CQE_STATUS_SUCCESS, 0, &what);
            assert_eq!((c.wr_id, c.byte_len), (i as u64, i as u32), "{what}");
        }
        assert_eq!(
            &g.buf_read(&b.buf, i as u64 * 128, i),
            p,
            "inline payload of {i} bytes"
        );
        assert!(g
            .buf_read(&b.buf, i as u64 * 128 + i as u64, 128 - i)
            .iter()
            .all(|&x| x == 0xee));
    }
}
