//! UDP over the device's own addresses (loopback inside the device): datagrams of every size,
//! scatter/gather and inline data, what a receive CQE reports, length errors, drops, a full
//! CQ, interrupt arming and a long stream through ring wrap-around.

use qpip_testkit as support;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use support::*;

/// Largest UDP payload in one send (the 65535-byte UDP length minus its 8-byte header).
const MAX_UDP: u64 = 65527;

/// Two bound endpoints, in one context or in two.
fn pair(g: &mut FakeGuest, same_ctx: bool, buf_len: u64) -> (Udp, Udp) {
    let c1 = g.create_ctx().unwrap();
    let c2 = if same_ctx {
        c1
    } else {
        g.create_ctx().unwrap()
    };
    let a = g.udp_endpoint_in(c1, UNSPECIFIED, 0, 16, 32, buf_len);
    let b = g.udp_endpoint_in(c2, UNSPECIFIED, 0, 16, 32, buf_len);
    (a, b)
}

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
        let sc = g.wait_cqe(&mut a.scq);
        assert_cqe(
            &sc,
            CQE_STATUS_SUCCESS,
            0,
            &format!("inline send of {i} bytes"),
        );
        assert_eq!((sc.wr_id, sc.byte_len), (i as u64, i as u32));
        let rc = g.wait_cqe(&mut b.rcq);
        assert_cqe(
            &rc,
            CQE_STATUS_SUCCESS,
            0,
            &format!("receive of an inline {i}-byte send"),
        );
        assert_eq!((rc.wr_id, rc.byte_len), (i as u64, i as u32));
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

#[test]
fn receive_completions_carry_wr_id_and_the_senders_address_and_port() {
    let mut g = FakeGuest::new();
    let ll = g.link_local();
    let global = ip("2001:db8::5");
    g.add_addr(global, 64).unwrap();
    let ctx = g.create_ctx().unwrap();
    let mut rx = g.udp_endpoint_in(ctx, UNSPECIFIED, 9100, 8, 16, 4096);
    let from_lo = g.udp_endpoint_in(ctx, LOOPBACK, 6000, 8, 16, 64);
    let from_global = g.udp_endpoint_in(ctx, global, 6001, 8, 16, 64);
    let from_any = g.udp_endpoint_in(ctx, UNSPECIFIED, 0, 8, 16, 64);
    assert_eq!((from_lo.port, from_global.port), (6000, 6001));

    let mut txs = [from_lo, from_global, from_any];
    let cases = [
        (0usize, LOOPBACK, LOOPBACK, u64::MAX),
        (1, ll, global, 0),
        (1, LOOPBACK, global, 0x0123_4567_89ab_cdef),
        (2, global, global, 42),
        (2, ll, ll, 43),
    ];
    for (t, dst, want_src, wr_id) in cases {
        let tx = &mut txs[t];
        g.post_recv(
            &mut rx.qp,
            &[recv_wqe(!wr_id, &[rx.buf.sge(0, 4096, rx.mr.lkey)])],
        );
        let w = inline_wqe(wr_id, dst, rx.port, b"hello");
        g.post_send(&mut tx.qp, &[w]);
        let sc = g.wait_cqe(&mut tx.scq);
        assert_cqe(&sc, CQE_STATUS_SUCCESS, 0, "send");
        assert_eq!(sc.wr_id, wr_id);
        let rc = g.wait_cqe(&mut rx.rcq);
        assert_cqe(&rc, CQE_STATUS_SUCCESS, 0, "receive");
        assert_eq!(rc.wr_id, !wr_id);
        assert_eq!(rc.src_port, tx.port);
        assert_eq!(
            Ipv6Addr::from(rc.src_addr),
            Ipv6Addr::from(want_src),
            "source of a datagram to {}",
            Ipv6Addr::from(dst)
        );
        assert_eq!(rc.imm_data, 0, "UDP carries no immediate data");
    }
}

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

use std::net::Ipv6Addr;

#[test]
fn a_qp_bound_to_one_address_receives_only_datagrams_to_it() {
    let mut g = FakeGuest::new();
    let global = ip("2001:db8::7");
    g.add_addr(global, 64).unwrap();
    let ctx = g.create_ctx().unwrap();
    let mut rx = g.udp_endpoint_in(ctx, global, 9200, 8, 16, 4096);
    let mut tx = g.udp_endpoint_in(ctx, UNSPECIFIED, 0, 8, 16, 64);
    g.post_recv(
        &mut rx.qp,
        &[recv_wqe(1, &[rx.buf.sge(0, 4096, rx.mr.lkey)])],
    );
    let no_port = g.stat(STAT_UDP_RX_NO_PORT);
    g.post_send(&mut tx.qp, &[inline_wqe(1, LOOPBACK, 9200, b"not for you")]);
    assert_cqe(
        &g.wait_cqe(&mut tx.scq),
        CQE_STATUS_SUCCESS,
        0,
        "send to an unbound address",
    );
    wait_stat(&mut g, STAT_UDP_RX_NO_PORT, no_port + 1);
    g.post_send(&mut tx.qp, &[inline_wqe(2, global, 9200, b"for you")]);
    assert_cqe(
        &g.wait_cqe(&mut tx.scq),
        CQE_STATUS_SUCCESS,
        0,
        "send to the bound address",
    );
    let rc = g.wait_cqe(&mut rx.rcq);
    assert_eq!((rc.status, rc.byte_len), (CQE_STATUS_SUCCESS, 7));
    assert_eq!(g.buf_read(&rx.buf, 0, 7), b"for you");
}

/// Waits until a stats counter reaches `want` (the receive side may lag the send CQE), and
/// checks it does not go beyond.
fn wait_stat(g: &mut FakeGuest, index: u32, want: u64) {
    let v = wait_stat_at_least(g, index, want);
    assert_eq!(v, want, "counter {index} overshot");
}

/// Waits until a stats counter reaches at least `want`; returns its value.
fn wait_stat_at_least(g: &mut FakeGuest, index: u32, want: u64) -> u64 {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let v = g.stat(index);
        if v >= want {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "counter {index} stuck at {v}, expected {want}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
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

#[test]
fn sends_to_unusable_destinations_fail_with_bad_dest() {
    let mut g = FakeGuest::new();
    let ctx = g.create_ctx().unwrap();
    let mut a = g.udp_endpoint_in(ctx, UNSPECIFIED, 0, 16, 32, 64);
    let rx = g.udp_endpoint_in(ctx, UNSPECIFIED, 9300, 16, 32, 64);
    for (i, (dst, port, detail, what)) in [
        (
            ip("2001:db8::77"),
            rx.port,
            CQE_DETAIL_NO_ROUTE,
            "a non-local address",
        ),
        (
            ip("fe80::1"),
            rx.port,
            CQE_DETAIL_NO_ROUTE,
            "someone else's link-local address",
        ),
        (LOOPBACK, 0, CQE_DETAIL_BAD_ADDRESS, "port 0"),
        (
            UNSPECIFIED,
            rx.port,
            CQE_DETAIL_BAD_ADDRESS,
            "the unspecified address",
        ),
        (
            ip("ff02::1"),
            rx.port,
            CQE_DETAIL_BAD_ADDRESS,
            "a multicast address",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        g.post_send(&mut a.qp, &[inline_wqe(i as u64, dst, port, b"x")]);
        let c = g.wait_cqe(&mut a.scq);
        assert_cqe(&c, CQE_STATUS_BAD_DEST, detail, &format!("send to {what}"));
        assert_eq!(c.wr_id, i as u64);
    }
    // A QP that was never bound cannot send at all.
    let cq = g.create_cq(ctx, 8).unwrap();
    let mut unbound = g.create_qp(ctx, cq.id, cq.id, 4, 4).unwrap();
    let mut cq = cq;
    g.post_send(&mut unbound, &[inline_wqe(9, LOOPBACK, rx.port, b"x")]);
    let c = g.wait_cqe(&mut cq);
    assert_cqe(
        &c,
        CQE_STATUS_BAD_DEST,
        CQE_DETAIL_NOT_BOUND,
        "send from an unbound QP",
    );
    // The QP that got the errors still works.
    g.post_send(&mut a.qp, &[inline_wqe(10, LOOPBACK, rx.port, b"x")]);
    assert_cqe(
        &g.wait_cqe(&mut a.scq),
        CQE_STATUS_SUCCESS,
        0,
        "send after errors",
    );
}

#[test]
fn the_link_local_address_follows_the_mac_and_added_addresses_are_local() {
    let mut g = FakeGuest::new();
    let old = g.link_local();
    let ctx = g.create_ctx().unwrap();
    let mut a = g.udp_endpoint_in(ctx, UNSPECIFIED, 0, 16, 32, 64);
    let mut b = g.udp_endpoint_in(ctx, UNSPECIFIED, 9400, 16, 32, 4096);
    let send = |g: &mut FakeGuest, a: &mut Udp, b: &mut Udp, dst: [u8; 16]| -> Cqe {
        g.post_recv(&mut b.qp, &[recv_wqe(0, &[b.buf.sge(0, 4096, b.mr.lkey)])]);
        g.post_send(&mut a.qp, &[inline_wqe(0, dst, b.port, b"ping")]);
        g.wait_cqe(&mut a.scq)
    };
    let mac = [0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee];
    g.set_mac(mac).unwrap();
    let new = link_local(mac);
    assert_ne!(old, new);
    let c = send(&mut g, &mut a, &mut b, old);
    assert_cqe(
        &c,
        CQE_STATUS_BAD_DEST,
        CQE_DETAIL_NO_ROUTE,
        "send to the link-local address of the old MAC",
    );
    let c = send(&mut g, &mut a, &mut b, new);
    assert_cqe(
        &c,
        CQE_STATUS_SUCCESS,
        0,
        "send to the link-local address of the new MAC",
    );
    let rc = g.wait_cqe(&mut b.rcq);
    assert_eq!(
        (rc.status, rc.byte_len, rc.src_addr),
        (CQE_STATUS_SUCCESS, 4, new)
    );

    let global = ip("2001:db8:1::1");
    let c = send(&mut g, &mut a, &mut b, global);
    assert_cqe(
        &c,
        CQE_STATUS_BAD_DEST,
        CQE_DETAIL_NO_ROUTE,
        "send to an address not yet added",
    );
    g.add_addr(global, 48).unwrap();
    let c = send(&mut g, &mut a, &mut b, global);
    assert_cqe(&c, CQE_STATUS_SUCCESS, 0, "send to an added address");
    assert_eq!(g.wait_cqe(&mut b.rcq).status, CQE_STATUS_SUCCESS);
    g.del_addr(global).unwrap();
    let c = send(&mut g, &mut a, &mut b, global);
    assert_cqe(
        &c,
        CQE_STATUS_BAD_DEST,
        CQE_DETAIL_NO_ROUTE,
        "send to a deleted address",
    );
}

#[test]
fn a_full_cq_holds_completions_back_and_loses_none() {
    let mut g = FakeGuest::new();
    let ctx = g.create_ctx().unwrap();
    let mut scq = g.create_cq(ctx, 4).unwrap();
    let mut a_qp = g.create_qp(ctx, scq.id, scq.id, 16, 2).unwrap();
    let a_port = g.bind(ctx, a_qp.id, UNSPECIFIED, 0).unwrap();
    let mut b = g.udp_endpoint_in(ctx, UNSPECIFIED, 0, 16, 32, 16 * 64);
    let _ = a_port;
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
    let deadline = Instant::now() + TIMEOUT;
    while !(0..4).all(|i| g.cqe_ready(&scq, i)) {
        assert!(
            Instant::now() < deadline,
            "the first 4 send completions never arrived"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    wait_stat_at_least(&mut g, STAT_CQ_FULL, full_before + 1);
    // Give an overwriting device every chance to do it.
    std::thread::sleep(Duration::from_millis(100));
    for i in 0..4u32 {
        let c = g.cq_slot(&scq, i);
        assert_eq!(
            (c.wr_id, c.owner & 1),
            (i as u64, 1),
            "CQ slot {i} overwritten while unconsumed: {c:?}"
        );
    }
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
fn an_armed_cq_interrupts_once_per_arm() {
    let mut g = FakeGuest::new();
    let ctx = g.create_ctx().unwrap();
    let v = 7;
    let mut scq = g.create_cq_on(ctx, 32, v).unwrap();
    let mut a = g.create_qp(ctx, scq.id, scq.id, 16, 2).unwrap();
    g.bind(ctx, a.id, UNSPECIFIED, 0).unwrap();
    let irqs_before = g.stat(STAT_CQ_INTERRUPTS);
    g.irq_take(v);
    let send = |g: &mut FakeGuest, a: &mut Qp, n: u64| {
        // To a port nobody bound: completes at once, nothing to receive.
        let w: Vec<WqeBytes> = (0..n)
            .map(|i| inline_wqe(i, LOOPBACK, 9, b"tick"))
            .collect();
        g.post_send(a, &w);
    };
    let wait_ready = |g: &FakeGuest, cq: &Cq, upto: u32| {
        let deadline = Instant::now() + TIMEOUT;
        while !g.cqe_ready(cq, upto - 1) {
            assert!(Instant::now() < deadline, "CQE {} never arrived", upto - 1);
            std::thread::sleep(Duration::from_millis(1));
        }
    };

    // Not armed: completions, no interrupt.
    send(&mut g, &mut a, 2);
    wait_ready(&g, &scq, 2);
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
    wait_ready(&g, &scq, 5);
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
    let deadline = Instant::now() + TIMEOUT;
    while !(0..4).all(|i| g.cqe_ready(&rcq, i)) {
        assert!(
            Instant::now() < deadline,
            "the first four receive completions never arrived"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    wait_stat_at_least(&mut g, STAT_CQ_FULL, full_before + 1);
    for i in 0..4u32 {
        let c = g.cq_slot(&rcq, i);
        assert_eq!(
            (c.wr_id, c.owner & 1),
            (i as u64, 1),
            "receive CQ slot {i} overwritten: {c:?}"
        );
    }
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
fn destroying_a_qp_flushes_its_outstanding_work_requests() {
    let mut g = FakeGuest::new();
    let ctx = g.create_ctx().unwrap();
    let mut cq = g.create_cq(ctx, 32).unwrap();
    let mut qp = g.create_qp(ctx, cq.id, cq.id, 8, 8).unwrap();
    g.bind(ctx, qp.id, UNSPECIFIED, 0).unwrap();
    let buf = g.alloc_buf(4096, 0);
    let mr = g.reg_mr(ctx, &buf, MR_ACCESS_LOCAL_WRITE).unwrap();
    let recvs: Vec<WqeBytes> = (0..5u64)
        .map(|i| recv_wqe(10 + i, &[buf.sge(i * 64, 64, mr.lkey)]))
        .collect();
    g.post_recv(&mut qp, &recvs);
    g.buf_fill(&buf, 0x3c);
    g.destroy_qp(ctx, qp.id).unwrap();
    for i in 0..5u64 {
        let c = g.wait_cqe(&mut cq);
        assert_eq!(
            (c.wr_id, c.opcode, c.qp),
            (10 + i, CQE_OP_RECV, qp.id),
            "{c:?}"
        );
        assert_cqe(&c, CQE_STATUS_FLUSHED, 0, "receive of a destroyed QP");
    }
    assert!(
        g.try_wait_cqe(&mut cq, Duration::from_millis(20)).is_none(),
        "one CQE per WR"
    );
    assert!(
        g.buf_read(&buf, 0, 4096).iter().all(|&x| x == 0x3c),
        "a flushed receive wrote its buffer"
    );
    g.destroy_cq(ctx, cq.id)
        .expect("the CQ is free once its QP is gone");
}

#[test]
fn destroying_a_context_drops_its_work_requests_without_completions() {
    let mut g = FakeGuest::new();
    let ctx = g.create_ctx().unwrap();
    let mut ep = g.udp_endpoint_in(ctx, UNSPECIFIED, 0, 8, 16, 4096);
    let recvs: Vec<WqeBytes> = (0..5u64)
        .map(|i| recv_wqe(i, &[ep.buf.sge(i * 64, 64, ep.mr.lkey)]))
        .collect();
    g.post_recv(&mut ep.qp, &recvs);
    // Let the device see them (a datagram to itself takes the first).
    g.post_send(&mut ep.qp, &[inline_wqe(0, LOOPBACK, ep.port, b"me")]);
    assert_cqe(&g.wait_cqe(&mut ep.scq), CQE_STATUS_SUCCESS, 0, "send");
    assert_eq!(g.wait_cqe(&mut ep.rcq).wr_id, 0);
    let ring: Vec<u8> = ep
        .rcq
        .pages
        .iter()
        .flat_map(|&p| g.mem_read(p, PAGE as usize))
        .collect();
    g.destroy_ctx(ctx).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let now: Vec<u8> = ep
        .rcq
        .pages
        .iter()
        .flat_map(|&p| g.mem_read(p, PAGE as usize))
        .collect();
    assert!(
        now == ring,
        "CQEs written for a destroyed context (its rings go away with it)"
    );
}
