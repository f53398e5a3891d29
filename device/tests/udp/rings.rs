//! The rings under load: a full CQ holds completions back and loses none, an armed CQ
//! interrupts once per arm, and ten thousand datagrams stream through ring wrap-around.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use crate::support::*;
use crate::{bound_qp, wait_stat_at_least};

/// Waits until CQEs `cq.head..upto` (free-running numbers) of `cq` are written, consuming
/// none of them.
fn wait_written(g: &FakeGuest, cq: &Cq, upto: u32) {
    let deadline = Instant::now() + TIMEOUT;
    while !(cq.head..upto).all(|i| g.cqe_ready(cq, i)) {
        assert!(
            Instant::now() < deadline,
            "CQEs {}..{upto} of CQ {} never arrived",
            cq.head,
            cq.id
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// With more completions due than `cq` (consumed from nowhere yet) has room for: waits
/// until the ring is full and the device has counted it full, gives an overwriting device
/// every chance to do it, then checks every slot still holds the completion of its WR
/// (WR `i` in slot `i`), unconsumed.
fn assert_full_and_kept(g: &mut FakeGuest, cq: &Cq, full_before: u64) {
    assert_eq!(cq.head, 0, "a CQ nothing was taken from");
    wait_written(g, cq, cq.depth);
    wait_stat_at_least(g, STAT_CQ_FULL, full_before + 1);
    std::thread::sleep(Duration::from_millis(100));
    for i in 0..cq.depth {
        let c = g.cq_slot(cq, i);
        assert_eq!(
            (c.wr_id, c.owner & 1),
            (i as u64, 1),
            "CQ {} slot {i} overwritten while unconsumed: {c:?}",
            cq.id
        );
    }
}

#[test]
fn a_full_cq_holds_completions_back_and_loses_none() {
    let mut g = FakeGuest::new();
    let ctx = g.create_ctx().unwrap();
    let mut scq = g.create_cq(ctx, 4).unwrap();
    let mut a_qp = bound_qp(&mut g, &scq, 16, 2);
    let mut b = g.udp_endpoint_in(ctx, UNSPECIFIED, 0, 16, 32, 16 * 64);
    let full_before = g.stat(STAT_CQ_FULL);
    let recvs: Vec<WqeBytes> = (0..10u64)
        .map(|i| recv_wqe(100 + i, &[b.buf.sge(i * 64, 64, b.mr.lkey)]))
        .collect();
    g.post_recv(&mut b.qp, &recvs);
    let sends: Vec<WqeBytes> = (0..10u64)
        .map(|i| inline_wqe(i, LOOPBACK, b.port, format!("datagram {i}").as_bytes()))
        .collect();
    g.post_send(&mut a_qp, &sends);

    // The first four completions fill the ring; nothing is consumed yet.
    assert_full_and_kept(&mut g, &scq, full_before);
    // Consuming makes room; the rest arrive in order, none lost.
    for i in 0..10u64 {
        let c = g.wait_cqe(&mut scq);
        assert_cqe(
            &c,
            CQE_STATUS_SUCCESS,
            0,
            "send completion after the CQ had been full",
        );
        assert_eq!(c.wr_id, i, "send completions in posting order");
    }
    assert!(g.poll_cq(&mut scq).is_none(), "exactly one CQE per WR");
    for i in 0..10u64 {
        let rc = g.wait_cqe(&mut b.rcq);
        assert_eq!((rc.wr_id, rc.status), (100 + i, CQE_STATUS_SUCCESS));
        let text = format!("datagram {i}");
        assert_eq!(g.buf_read(&b.buf, i * 64, text.len()), text.as_bytes());
    }
}

#[test]
fn a_full_receive_cq_is_never_overwritten() {
    let mut g = FakeGuest::new();
    let ctx = g.create_ctx().unwrap();
    let mut a = g.udp_endpoint_in(ctx, UNSPECIFIED, 0, 16, 32, 64);
    let mut rcq = g.create_cq(ctx, 4).unwrap();
    let scq = g.create_cq(ctx, 16).unwrap();
    let mut b = g.create_qp(ctx, scq.id, rcq.id, 2, 16).unwrap();
    let port = g.bind(ctx, b.id, UNSPECIFIED, 0).unwrap();
    let buf = g.alloc_buf(16 * 64, 0);
    let mr = g.reg_mr(ctx, &buf, MR_ACCESS_LOCAL_WRITE).unwrap();
    let full_before = g.stat(STAT_CQ_FULL);
    let recvs: Vec<WqeBytes> = (0..12u64)
        .map(|i| recv_wqe(i, &[buf.sge(i * 64, 64, mr.lkey)]))
        .collect();
    g.post_recv(&mut b, &recvs);
    // Eight datagrams, one at a time, into a receive CQ with room for four.
    for i in 0..8u64 {
        g.post_send(
            &mut a.qp,
            &[inline_wqe(
                i,
                LOOPBACK,
                port,
                format!("dgram {i}").as_bytes(),
            )],
        );
        assert_cqe(&g.wait_cqe(&mut a.scq), CQE_STATUS_SUCCESS, 0, "send");
    }
    assert_full_and_kept(&mut g, &rcq, full_before);
    // The completions that had room are right; whatever could not complete did not consume
    // a receive WR without a CQE: every WR completes exactly once, in order.
    for i in 0..4u64 {
        let c = g.wait_cqe(&mut rcq);
        assert_eq!((c.wr_id, c.status), (i, CQE_STATUS_SUCCESS));
        assert_eq!(g.buf_read(&buf, i * 64, 7), format!("dgram {i}").as_bytes());
    }
    let mut next = 4u64;
    while let Some(c) = g.try_wait_cqe(&mut rcq, Duration::from_millis(200)) {
        assert_eq!(c.wr_id, next, "receive WRs complete in order, once each");
        next += 1;
    }
    // The WRs left are still posted: fresh datagrams land in them in order.
    for i in next..12 {
        g.post_send(&mut a.qp, &[inline_wqe(100 + i, LOOPBACK, port, b"later")]);
        assert_cqe(&g.wait_cqe(&mut a.scq), CQE_STATUS_SUCCESS, 0, "send");
        let c = g.wait_cqe(&mut rcq);
        assert_eq!((c.wr_id, c.status, c.byte_len), (i, CQE_STATUS_SUCCESS, 5));
    }
}

#[test]
fn an_armed_cq_interrupts_once_per_arm() {
    let mut g = FakeGuest::new();
    let ctx = g.create_ctx().unwrap();
    let v = 7;
    let mut scq = g.create_cq_on(ctx, 32, v).unwrap();
    let mut a = bound_qp(&mut g, &scq, 16, 2);
    let irqs_before = g.stat(STAT_CQ_INTERRUPTS);
    g.irq_take(v);
    let send = |g: &mut FakeGuest, a: &mut Qp, n: u64| {
        // To a port nobody bound: completes at once, nothing to receive.
        let w: Vec<WqeBytes> = (0..n)
            .map(|i| inline_wqe(i, LOOPBACK, 9, b"tick"))
            .collect();
        g.post_send(a, &w);
    };

    // Not armed: completions, no interrupt.
    send(&mut g, &mut a, 2);
    wait_written(&g, &scq, 2);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(g.irq_take(v), 0, "an unarmed CQ interrupted");
    g.wait_cqe(&mut scq);
    g.wait_cqe(&mut scq);

    // Armed: several completions, exactly one interrupt.
    g.arm_cq(&mut scq);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        g.irq_take(v),
        0,
        "armed with nothing pending, yet it interrupted"
    );
    send(&mut g, &mut a, 3);
    assert_eq!(g.irq_wait(v, TIMEOUT), 1, "one interrupt after arming");
    wait_written(&g, &scq, 5);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(g.irq_take(v), 0, "more than one interrupt for one arm");

    // Re-armed with CQEs already pending beyond head: at once.
    g.arm_cq(&mut scq);
    assert_eq!(
        g.irq_wait(v, TIMEOUT),
        1,
        "arming with CQEs pending interrupts at once"
    );
    for _ in 0..3 {
        g.wait_cqe(&mut scq);
    }
    // Another arm after consuming everything: the next CQE interrupts, once.
    g.arm_cq(&mut scq);
    send(&mut g, &mut a, 1);
    assert_eq!(
        g.irq_wait(v, TIMEOUT),
        1,
        "the next completion after a re-arm"
    );
    g.wait_cqe(&mut scq);
    send(&mut g, &mut a, 1);
    g.wait_cqe(&mut scq);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(g.irq_take(v), 0, "a spent arm interrupted again");
    for other in (1..MSIX_VECTORS as u32).filter(|&x| x != v) {
        assert_eq!(
            g.irq_take(other),
            0,
            "vector {other} raised for a CQ on vector {v}"
        );
    }
    assert_eq!(g.stat(STAT_CQ_INTERRUPTS) - irqs_before, 3);
}

/// A CQ shared by a QP's sends and receives, armed solicited-only (a socket's reader):
/// send completions do not interrupt, a receive does — also one pending when it is armed.
#[test]
fn a_solicited_only_arm_ignores_send_completions() {
    let mut g = FakeGuest::new();
    let ctx = g.create_ctx().unwrap();
    let v = 5;
    let mut cq = g.create_cq_on(ctx, 32, v).unwrap();
    let mut qp = g.create_qp(ctx, cq.id, cq.id, 16, 8).unwrap();
    let port = g.bind(ctx, qp.id, UNSPECIFIED, 0).unwrap();
    let buf = g.alloc_buf(8 * 64, 0);
    let mr = g.reg_mr(ctx, &buf, MR_ACCESS_LOCAL_WRITE).unwrap();
    let recvs: Vec<WqeBytes> = (0..8u64)
        .map(|i| recv_wqe(100 + i, &[buf.sge(i * 64, 64, mr.lkey)]))
        .collect();
    g.post_recv(&mut qp, &recvs);
    g.irq_take(v);
    g.arm_cq_solicited(&mut cq);
    // Sends to a port nobody bound: their completions only.
    g.post_send(&mut qp, &[inline_wqe(1, LOOPBACK, 9, b"tick")]);
    g.post_send(&mut qp, &[inline_wqe(2, LOOPBACK, 9, b"tock")]);
    wait_written(&g, &cq, 2);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        g.irq_take(v),
        0,
        "a send's completion fired a solicited-only arm"
    );
    // A datagram to itself: its send's completion and the receive's; the receive fires.
    g.post_send(&mut qp, &[inline_wqe(3, LOOPBACK, port, b"to me")]);
    assert_eq!(g.irq_wait(v, TIMEOUT), 1, "the receive did not interrupt");
    wait_written(&g, &cq, 4);
    for _ in 0..4 {
        g.wait_cqe(&mut cq);
    }
    // Armed again with only a send's completion unreleased: nothing; then a receive.
    g.post_send(&mut qp, &[inline_wqe(4, LOOPBACK, 9, b"tick")]);
    wait_written(&g, &cq, 5);
    g.arm_cq_solicited(&mut cq);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(g.irq_take(v), 0, "armed over a send's completion");
    g.post_send(&mut qp, &[inline_wqe(5, LOOPBACK, port, b"again")]);
    assert_eq!(g.irq_wait(v, TIMEOUT), 1, "the receive did not interrupt");
    wait_written(&g, &cq, 7);
    // Re-armed with that receive unreleased: at once.
    g.arm_cq_solicited(&mut cq);
    assert_eq!(
        g.irq_wait(v, TIMEOUT),
        1,
        "a pending receive did not fire the arm"
    );
    for _ in 0..3 {
        g.wait_cqe(&mut cq);
    }
    // An ordinary arm fires for a send's completion.
    g.arm_cq(&mut cq);
    g.post_send(&mut qp, &[inline_wqe(6, LOOPBACK, 9, b"tick")]);
    assert_eq!(g.irq_wait(v, TIMEOUT), 1, "an ordinary arm ignored a send");
}

#[test]
fn ten_thousand_datagrams_stream_through_ring_wrap_around() {
    const N: u64 = 10_000;
    const DEPTH: u32 = 32;
    const SLOT: u64 = 2048;
    let mut g = FakeGuest::new();
    let (mut a, mut b) = {
        let c1 = g.create_ctx().unwrap();
        let c2 = g.create_ctx().unwrap();
        let a = g.udp_endpoint_in(c1, UNSPECIFIED, 0, DEPTH, 2 * DEPTH, DEPTH as u64 * SLOT);
        let b = g.udp_endpoint_in(c2, UNSPECIFIED, 0, DEPTH, 2 * DEPTH, DEPTH as u64 * SLOT);
        (a, b)
    };
    let dst = g.link_local();
    let s0 = g.query_stats();
    let payload = |seq: u64| -> Vec<u8> {
        let mut r = Rng::new(seq.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let len = 8 + r.below(1500 - 8) as usize;
        let mut p = seq.to_le_bytes().to_vec();
        p.extend(r.bytes(len - 8));
        p
    };
    let (mut sent, mut sent_done, mut posted, mut received) = (0u64, 0u64, 0u64, 0u64);
    let mut seen = HashSet::new();
    let mut last_progress = Instant::now();
    while received < N {
        let mut progressed = false;
        // Keep the receive ring full.
        let mut rw = Vec::new();
        while posted - received < DEPTH as u64 && posted < N {
            let slot = posted % DEPTH as u64;
            rw.push(recv_wqe(
                posted,
                &[b.buf.sge(slot * SLOT, SLOT as u32, b.mr.lkey)],
            ));
            posted += 1;
        }
        if !rw.is_empty() {
            g.post_recv(&mut b.qp, &rw);
        }
        // Send only as many as there are receives waiting for them, so nothing is dropped.
        let mut sw = Vec::new();
        while sent - sent_done < DEPTH as u64 && sent < posted && sw.len() < 8 {
            let slot = sent % DEPTH as u64;
            let p = payload(sent);
            g.buf_write(&a.buf, slot * SLOT, &p);
            sw.push(send_wqe(
                sent,
                dst,
                b.port,
                &[a.buf.sge(slot * SLOT, p.len() as u32, a.mr.lkey)],
            ));
            sent += 1;
        }
        if !sw.is_empty() {
            g.post_send(&mut a.qp, &sw);
        }
        while let Some(c) = g.poll_cq(&mut a.scq) {
            assert_cqe(&c, CQE_STATUS_SUCCESS, 0, "streamed send");
            assert_eq!(c.wr_id, sent_done, "send completions in order");
            sent_done += 1;
            progressed = true;
        }
        while let Some(c) = g.poll_cq(&mut b.rcq) {
            assert_cqe(&c, CQE_STATUS_SUCCESS, 0, "streamed receive");
            assert_eq!(c.wr_id, received, "receive WRs are consumed in order");
            let slot = c.wr_id % DEPTH as u64;
            let got = g.buf_read(&b.buf, slot * SLOT, c.byte_len as usize);
            let seq = u64::from_le_bytes(got[..8].try_into().unwrap());
            assert!(
                seq < N && seen.insert(seq),
                "datagram {seq} delivered twice or invented"
            );
            assert_eq!(got, payload(seq), "datagram {seq} corrupted");
            received += 1;
            progressed = true;
        }
        if progressed {
            last_progress = Instant::now();
        } else {
            if last_progress.elapsed() > TIMEOUT {
                let s = g.query_stats().counters;
                panic!(
                    "stream stalled: sent {sent}, send completions {sent_done}, receives posted \
                     {posted}, received {received}; device dropped {} for want of a receive WR",
                    s[STAT_UDP_RX_NO_WR as usize] - s0.counters[STAT_UDP_RX_NO_WR as usize]
                );
            }
            std::thread::yield_now();
        }
    }
    while sent_done < N {
        let c = g.wait_cqe(&mut a.scq);
        assert_eq!(c.wr_id, sent_done);
        sent_done += 1;
    }
    let s1 = g.query_stats();
    let d = |i: u32| s1.counters[i as usize] - s0.counters[i as usize];
    assert_eq!(
        (d(STAT_UDP_TX), d(STAT_UDP_RX), d(STAT_UDP_RX_NO_WR)),
        (N, N, 0)
    );
}
