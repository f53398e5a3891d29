//! Sends and receives that cannot complete as asked: immediate data (UDP has no room for
//! it), a datagram beyond the UDP maximum, a receive buffer too small, and datagrams with no
//! receive posted, dropped and counted.

use crate::support::*;
use crate::{pair, wait_stat, MAX_UDP};

#[test]
fn immediate_data_is_refused_on_udp() {
    // A UDP datagram has no room for immediate data on the wire, so the device refuses it
    // rather than deliver it inside the device only.
    let mut g = FakeGuest::new();
    let (mut tx, mut rx) = pair(&mut g, true, 4096);
    g.post_recv(
        &mut rx.qp,
        &[recv_wqe(9, &[rx.buf.sge(0, 4096, rx.mr.lkey)])],
    );
    let mut w = inline_wqe(5, LOOPBACK, rx.port, b"imm");
    let mut h = Wqe::read_from_bytes(&w[..WQE_SGE_OFFSET as usize]).unwrap();
    h.imm_data = 0x1234;
    w[..WQE_SGE_OFFSET as usize].copy_from_slice(h.as_bytes());
    g.post_send(&mut tx.qp, &[w]);
    let sc = g.wait_cqe(&mut tx.scq);
    assert_eq!(sc.wr_id, 5);
    assert_cqe(&sc, CQE_STATUS_BAD_WQE, 0, "imm_data on a UDP send");
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert!(g.poll_cq(&mut rx.rcq).is_none(), "nothing was delivered");
}

#[test]
fn a_send_beyond_the_udp_maximum_fails_with_local_length() {
    let mut g = FakeGuest::new();
    let (mut a, mut b) = pair(&mut g, true, MAX_UDP + 1);
    g.post_recv(
        &mut b.qp,
        &[recv_wqe(
            7,
            &[b.buf.sge(0, (MAX_UDP + 1) as u32, b.mr.lkey)],
        )],
    );
    // One byte too many, in two SGEs so no single SGE is the problem.
    let s = send_wqe(
        1,
        LOOPBACK,
        b.port,
        &[
            a.buf.sge(0, 60_000, a.mr.lkey),
            a.buf.sge(60_000, (MAX_UDP + 1 - 60_000) as u32, a.mr.lkey),
        ],
    );
    g.post_send(&mut a.qp, &[s]);
    let sc = g.wait_cqe(&mut a.scq);
    assert_cqe(&sc, CQE_STATUS_LOCAL_LENGTH, 0, "a 65528-byte UDP send");
    assert_eq!(sc.wr_id, 1);
    // Nothing was sent: the receive is still there for the next datagram.
    g.post_send(&mut a.qp, &[inline_wqe(2, LOOPBACK, b.port, b"next")]);
    assert_cqe(
        &g.wait_cqe(&mut a.scq),
        CQE_STATUS_SUCCESS,
        0,
        "the QP still works",
    );
    let rc = g.wait_cqe(&mut b.rcq);
    assert_eq!(
        (rc.wr_id, rc.status, rc.byte_len),
        (7, CQE_STATUS_SUCCESS, 4),
        "{rc:?}"
    );
}

#[test]
fn a_receive_buffer_too_small_completes_with_local_length() {
    let mut g = FakeGuest::new();
    let (mut a, mut b) = pair(&mut g, true, 8192);
    let small = [b.buf.sge(0, 50, b.mr.lkey), b.buf.sge(100, 50, b.mr.lkey)];
    g.post_recv(
        &mut b.qp,
        &[
            recv_wqe(1, &small),
            recv_wqe(2, &[b.buf.sge(1000, 4096, b.mr.lkey)]),
            recv_wqe(3, &small),
        ],
    );
    let mut rng = Rng::new(3);
    let big = rng.bytes(101);
    let next = rng.bytes(300);
    let exact = rng.bytes(100);
    g.buf_write(&a.buf, 0, &big);
    g.buf_write(&a.buf, 1000, &next);
    g.buf_write(&a.buf, 2000, &exact);
    g.post_send(
        &mut a.qp,
        &[
            send_wqe(1, LOOPBACK, b.port, &[a.buf.sge(0, 101, a.mr.lkey)]),
            send_wqe(2, LOOPBACK, b.port, &[a.buf.sge(1000, 300, a.mr.lkey)]),
            send_wqe(3, LOOPBACK, b.port, &[a.buf.sge(2000, 100, a.mr.lkey)]),
        ],
    );
    for i in 1..=3 {
        assert_cqe(&g.wait_cqe(&mut a.scq), CQE_STATUS_SUCCESS, 0, "send");
        let _ = i;
    }
    let r1 = g.wait_cqe(&mut b.rcq);
    assert_cqe(
        &r1,
        CQE_STATUS_LOCAL_LENGTH,
        0,
        "101 bytes into a 100-byte receive",
    );
    assert_eq!(
        (r1.wr_id, r1.byte_len),
        (1, 101),
        "byte_len is the size of what arrived"
    );
    // The datagram was dropped whole: the next receive gets the next datagram from its start.
    let r2 = g.wait_cqe(&mut b.rcq);
    assert_cqe(&r2, CQE_STATUS_SUCCESS, 0, "the next datagram");
    assert_eq!((r2.wr_id, r2.byte_len), (2, 300));
    assert_eq!(g.buf_read(&b.buf, 1000, 300), next);
    let r3 = g.wait_cqe(&mut b.rcq);
    assert_cqe(&r3, CQE_STATUS_SUCCESS, 0, "exactly 100 bytes into 100");
    assert_eq!((r3.wr_id, r3.byte_len), (3, 100));
    let mut got = g.buf_read(&b.buf, 0, 50);
    got.extend(g.buf_read(&b.buf, 100, 50));
    assert_eq!(got, exact);
}

#[test]
fn datagrams_without_a_posted_receive_are_dropped_and_counted() {
    let mut g = FakeGuest::new();
    let (mut a, mut b) = pair(&mut g, false, 4096);
    let s0 = g.query_stats();
    let w: Vec<WqeBytes> = (0..3)
        .map(|i| inline_wqe(i, LOOPBACK, b.port, b"stale"))
        .collect();
    g.post_send(&mut a.qp, &w);
    for _ in 0..3 {
        assert_cqe(
            &g.wait_cqe(&mut a.scq),
            CQE_STATUS_SUCCESS,
            0,
            "a send nobody receives still succeeds",
        );
    }
    wait_stat(
        &mut g,
        STAT_UDP_RX_NO_WR,
        s0.counters[STAT_UDP_RX_NO_WR as usize] + 3,
    );
    // A receive posted now gets only what is sent from now on.
    g.post_recv(&mut b.qp, &[recv_wqe(9, &[b.buf.sge(0, 4096, b.mr.lkey)])]);
    g.post_send(&mut a.qp, &[inline_wqe(4, LOOPBACK, b.port, b"fresh!")]);
    assert_cqe(&g.wait_cqe(&mut a.scq), CQE_STATUS_SUCCESS, 0, "send");
    let rc = g.wait_cqe(&mut b.rcq);
    assert_eq!(
        (rc.wr_id, rc.status, rc.byte_len),
        (9, CQE_STATUS_SUCCESS, 6)
    );
    assert_eq!(g.buf_read(&b.buf, 0, 6), b"fresh!");
    // To a port nobody bound: counted separately.
    g.post_send(&mut a.qp, &[inline_wqe(5, LOOPBACK, 1, b"nobody")]);
    assert_cqe(
        &g.wait_cqe(&mut a.scq),
        CQE_STATUS_SUCCESS,
        0,
        "send to an unbound port",
    );
    wait_stat(
        &mut g,
        STAT_UDP_RX_NO_PORT,
        s0.counters[STAT_UDP_RX_NO_PORT as usize] + 1,
    );
    let s1 = g.query_stats();
    let d = |i: u32| s1.counters[i as usize] - s0.counters[i as usize];
    assert_eq!(d(STAT_UDP_TX), 5);
    assert_eq!(d(STAT_UDP_RX), 1);
    assert_eq!(d(STAT_SEND_WQES), 5);
    assert_eq!(d(STAT_RECV_WQES), 1);
    assert!(d(STAT_CQES) >= 6, "STAT_CQES moved by {}", d(STAT_CQES));
}
