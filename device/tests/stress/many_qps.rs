//! Ten thousand TCP QPs on one adapter: rounds of a message each way on every connection,
//! and the device's heap per QP with its connection.

use std::time::{Duration, Instant};

use qpip_testkit::*;

use crate::fixture::*;
use crate::{live, PER_CTX};

/// Bytes of each message.
const MSG: usize = 64;

/// One side's QPs: per context its CQs, its buffer and its QPs.
struct Side {
    ctxs: Vec<SideCtx>,
}

struct SideCtx {
    ctx: u32,
    scq: Cq,
    rcq: Cq,
    buf: Buf,
    mr: Mr,
    qps: Vec<Qp>,
    listener: Option<u32>,
}

impl Side {
    /// `n` TCP QPs (message framing, queues of 2) in contexts of [`PER_CTX`].
    fn new(g: &mut FakeGuest, n: usize) -> Side {
        let mut ctxs = Vec::new();
        let mut left = n;
        while left > 0 {
            let k = left.min(PER_CTX);
            let ctx = g.create_ctx().expect("a context");
            let depth = (2 * k as u32).next_power_of_two();
            let scq = g.create_cq(ctx, depth).expect("send CQ");
            let rcq = g.create_cq(ctx, depth).expect("receive CQ");
            let buf = g.alloc_buf((2 * k * MSG) as u64, 0);
            let mr = g.reg_mr(ctx, &buf, MR_ACCESS_LOCAL_WRITE).expect("MR");
            let qps = (0..k)
                .map(|_| {
                    g.create_qp_typed(ctx, (scq.id, rcq.id), (2, 2), QP_TYPE_TCP, FRAMING_MESSAGE)
                        .expect("a TCP QP")
                })
                .collect();
            ctxs.push(SideCtx {
                ctx,
                scq,
                rcq,
                buf,
                mr,
                qps,
                listener: None,
            });
            left -= k;
        }
        Side { ctxs }
    }

    fn qps(&self) -> usize {
        self.ctxs.iter().map(|c| c.qps.len()).sum()
    }
}

/// One round: every QP of both sides posts a receive, then sends one message naming
/// itself and the round; every message arrives once, intact, at its peer.
fn round(a: &mut FakeGuest, sa: &mut Side, b: &mut FakeGuest, sb: &mut Side, r: u32) {
    for (g, s) in [(&mut *a, &mut *sa), (&mut *b, &mut *sb)] {
        for c in &mut s.ctxs {
            for (i, qp) in c.qps.iter_mut().enumerate() {
                let at = ((2 * i + 1) * MSG) as u64;
                g.post_recv(
                    qp,
                    &[recv_wqe(i as u64, &[c.buf.sge(at, MSG as u32, c.mr.lkey)])],
                );
            }
        }
    }
    for (side, (g, s)) in [(&mut *a, &mut *sa), (&mut *b, &mut *sb)]
        .into_iter()
        .enumerate()
    {
        for (k, c) in s.ctxs.iter_mut().enumerate() {
            for (i, qp) in c.qps.iter_mut().enumerate() {
                let msg = message(side, k, i, r);
                let at = (2 * i * MSG) as u64;
                g.buf_write(&c.buf, at, &msg);
                g.post_send(
                    qp,
                    &[tcp_send_wqe(
                        i as u64,
                        r,
                        &[c.buf.sge(at, MSG as u32, c.mr.lkey)],
                    )],
                );
            }
        }
    }
    for (side, (g, s)) in [(&mut *a, &mut *sa), (&mut *b, &mut *sb)]
        .into_iter()
        .enumerate()
    {
        for (k, c) in s.ctxs.iter_mut().enumerate() {
            let n = c.qps.len();
            let (mut sent, mut got) = (0, 0);
            let deadline = Instant::now() + Duration::from_secs(60);
            while sent < n || got < n {
                assert!(
                    Instant::now() < deadline,
                    "round {r}: context {k}: {sent}/{n} sent, {got}/{n} received"
                );
                let mut any = false;
                while let Some(cqe) = g.poll_cq(&mut c.scq) {
                    assert_cqe(&cqe, CQE_STATUS_SUCCESS, 0, "send");
                    sent += 1;
                    any = true;
                }
                while let Some(cqe) = g.poll_cq(&mut c.rcq) {
                    assert_cqe(&cqe, CQE_STATUS_SUCCESS, 0, "receive");
                    let i = cqe.wr_id as usize;
                    assert_eq!((cqe.byte_len as usize, cqe.imm_data), (MSG, r));
                    let at = ((2 * i + 1) * MSG) as u64;
                    // The peer's QP i of context k sent it: connections pair them so.
                    assert_eq!(g.buf_read(&c.buf, at, MSG), message(1 - side, k, i, r));
                    got += 1;
                    any = true;
                }
                if !any {
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
        }
    }
}

/// The message QP `i` of context `k` of side `side` sends in round `r`.
fn message(side: usize, k: usize, i: usize, r: u32) -> Vec<u8> {
    let mut m = format!("side {side} ctx {k} qp {i} round {r} ").into_bytes();
    m.resize(MSG, b'.');
    m
}

#[test]
#[ignore = "a stress case: ./qpip stress"]
fn ten_thousand_tcp_qps_on_one_adapter() {
    const PAIRS: usize = 5_000;
    let start = Instant::now();
    let ad = adapter(2, 1, None);
    // Rings of 10,000 QPs (scattered pages, page lists) need more than the usual RAM.
    let ram = 512 << 20;
    let (mut a, mut b) = (ad.guest_with_ram(0, ram), ad.guest_with_ram(1, ram));
    let before = live();
    let mut sa = Side::new(&mut a, PAIRS);
    let mut sb = Side::new(&mut b, PAIRS);
    // Every QP of b accepts on its context's listener; every QP of a connects to the QP of
    // the same place in b (context k, QP i), one at a time, so the pairs are known.
    for (k, c) in sb.ctxs.iter_mut().enumerate() {
        c.listener = Some(
            b.listen(c.ctx, UNSPECIFIED, 9000 + k as u16, 1)
                .expect("a listener"),
        );
    }
    for k in 0..sa.ctxs.len() {
        for i in 0..sa.ctxs[k].qps.len() {
            let (cb, cq) = (&sb.ctxs[k], &sa.ctxs[k]);
            let acc = b.submit_accept(cb.ctx, cb.listener.unwrap(), cb.qps[i].id);
            let con = a.submit_connect(cq.ctx, cq.qps[i].id, ip(ADDRS[1]), 9000 + k as u16);
            a.admin_wait_ok(con, "connect");
            b.admin_wait_ok(acc, "accept");
        }
    }
    let established = start.elapsed();
    let t = Instant::now();
    const ROUNDS: u32 = 3;
    for r in 1..=ROUNDS {
        round(&mut a, &mut sa, &mut b, &mut sb, r);
    }
    let moving = t.elapsed();
    // Idle: what the device holds per QP with its connection (both ends are this adapter's).
    std::thread::sleep(Duration::from_millis(200));
    let qps = sa.qps() + sb.qps();
    // Less this test's own record of each QP (its struct in a vector, and its two ring
    // page lists of one page each), counted by the same allocator.
    let own = (std::mem::size_of::<Qp>() + 2 * std::mem::size_of::<u64>()) as i64;
    let per_qp = (live() - before) / qps as i64 - own;
    let sa_stats = a.query_stats().counters;
    let sb_stats = b.query_stats().counters;
    println!(
        "stress: {qps} TCP QPs ({PAIRS} connections) on one adapter of 2 functions: connected in {:.1} s, \
         {ROUNDS} rounds of a {MSG}-byte message each way on every connection in {:.1} s, every byte checked; \
         device heap per QP with its connection {per_qp} bytes (rings in guest RAM apart); \
         segments in {} / {}",
        established.as_secs_f64(),
        moving.as_secs_f64(),
        sa_stats[STAT_TCP_SEGS_IN as usize],
        sb_stats[STAT_TCP_SEGS_IN as usize],
    );
    assert!(per_qp > 0, "the count saw the QPs");
}
