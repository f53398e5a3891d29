//! Protection: every way a guest (or a hostile process) can name memory or work it must not
//! touch ends in an error completion with the right detail, never in a memory access. Every
//! buffer the device could write is filled with a canary first and checked afterwards, and
//! the QPs around keep working.

use qpip_testkit as support;

use support::*;

const CANARY: u8 = 0xa5;

/// Two contexts: A with a sender and a receiver, B with a registered buffer A must not use,
/// and C with a healthy pair that must keep working whatever A does.
struct World {
    g: FakeGuest,
    tx: Udp,
    rx: Udp,
    b_buf: Buf,
    b_mr: Mr,
    ok_tx: Udp,
    ok_rx: Udp,
}

impl World {
    fn new() -> World {
        let mut g = FakeGuest::new();
        let a = g.create_ctx().unwrap();
        let b = g.create_ctx().unwrap();
        let c = g.create_ctx().unwrap();
        let tx = g.udp_endpoint_in(a, UNSPECIFIED, 0, 16, 32, 16 * 1024);
        let rx = g.udp_endpoint_in(a, UNSPECIFIED, 0, 16, 32, 16 * 1024);
        let b_buf = g.alloc_buf(8192, 100);
        let b_mr = g.reg_mr(b, &b_buf, MR_ACCESS_LOCAL_WRITE).unwrap();
        let ok_tx = g.udp_endpoint_in(c, UNSPECIFIED, 0, 16, 32, 1024);
        let ok_rx = g.udp_endpoint_in(c, UNSPECIFIED, 0, 16, 32, 1024);
        let w = World {
            g,
            tx,
            rx,
            b_buf,
            b_mr,
            ok_tx,
            ok_rx,
        };
        w.fill_canaries();
        w
    }

    fn fill_canaries(&self) {
        self.g.buf_fill(&self.rx.buf, CANARY);
        self.g.buf_fill(&self.b_buf, CANARY);
    }

    /// Nothing was written to any buffer the device could have been tricked into writing.
    #[track_caller]
    fn assert_canaries(&self, what: &str) {
        for (name, b) in [
            ("A's receive buffer", &self.rx.buf),
            ("B's buffer", &self.b_buf),
        ] {
            let bytes = self.g.buf_read(b, 0, b.len as usize);
            if let Some(i) = bytes.iter().position(|&x| x != CANARY) {
                panic!("{what}: byte {i} of {name} was written ({:#x})", bytes[i]);
            }
        }
    }

    /// The healthy pair in context C, and A's own pair, still exchange a datagram.
    #[track_caller]
    fn assert_healthy(&mut self, what: &str) {
        let g = &mut self.g;
        for (tx, rx) in [
            (&mut self.ok_tx, &mut self.ok_rx),
            (&mut self.tx, &mut self.rx),
        ] {
            g.post_recv(
                &mut rx.qp,
                &[recv_wqe(0x600d, &[rx.buf.sge(0, 64, rx.mr.lkey)])],
            );
            g.post_send(
                &mut tx.qp,
                &[inline_wqe(0x600d, LOOPBACK, rx.port, b"still fine")],
            );
            let s = g.wait_cqe(&mut tx.scq);
            assert_cqe(&s, CQE_STATUS_SUCCESS, 0, &format!("after {what}: send"));
            let r = g.wait_cqe(&mut rx.rcq);
            assert_cqe(&r, CQE_STATUS_SUCCESS, 0, &format!("after {what}: receive"));
            assert_eq!((r.wr_id, r.byte_len), (0x600d, 10));
            assert_eq!(g.buf_read(&rx.buf, 0, 10), b"still fine");
        }
        self.fill_canaries();
    }

    /// Sends one WQE from A's sender and returns its completion.
    fn send(&mut self, w: WqeBytes) -> Cqe {
        self.g.post_send(&mut self.tx.qp, &[w]);
        self.g.wait_cqe(&mut self.tx.scq)
    }

    /// Posts one receive WQE on A's receiver, sends it a valid datagram of `len` bytes, and
    /// returns the receive completion.
    fn recv_into(&mut self, w: WqeBytes, len: usize) -> Cqe {
        let g = &mut self.g;
        g.post_recv(&mut self.rx.qp, &[w]);
        let data = vec![0x11u8; len];
        g.buf_write(&self.tx.buf, 0, &data);
        let s = send_wqe(
            1,
            LOOPBACK,
            self.rx.port,
            &[self.tx.buf.sge(0, len as u32, self.tx.mr.lkey)],
        );
        g.post_send(&mut self.tx.qp, &[s]);
        assert_cqe(
            &g.wait_cqe(&mut self.tx.scq),
            CQE_STATUS_SUCCESS,
            0,
            "the datagram's send",
        );
        g.wait_cqe(&mut self.rx.rcq)
    }

    fn send_gather(&self, wr_id: u64, sges: &[Sge]) -> WqeBytes {
        send_wqe(wr_id, LOOPBACK, self.rx.port, sges)
    }
}

#[test]
fn unknown_and_deregistered_lkeys_are_refused() {
    let mut w = World::new();
    let errors = w.g.stat(STAT_PROTECTION_ERRORS);
    // A receive waits on A's receiver; a refused send must not consume it.
    w.g.post_recv(
        &mut w.rx.qp,
        &[recv_wqe(77, &[w.rx.buf.sge(0, 4096, w.rx.mr.lkey)])],
    );
    for lkey in [0u32, 0xdead_beef, w.tx.mr.lkey ^ 0x8000_0000] {
        let sge = w.tx.buf.sge(0, 100, lkey);
        let c = w.send(w.send_gather(5, &[sge]));
        assert_cqe(
            &c,
            CQE_STATUS_LOCAL_PROTECTION,
            CQE_DETAIL_BAD_LKEY,
            &format!("send with lkey {lkey:#x}"),
        );
        assert_eq!((c.wr_id, c.qp), (5, w.tx.qp.id));
    }
    // A bad lkey in the last of several SGEs fails the whole send.
    let sges = [
        w.tx.buf.sge(0, 10, w.tx.mr.lkey),
        w.tx.buf.sge(10, 10, 0x1234_5678),
    ];
    let c = w.send(w.send_gather(6, &sges));
    assert_cqe(
        &c,
        CQE_STATUS_LOCAL_PROTECTION,
        CQE_DETAIL_BAD_LKEY,
        "bad lkey in the second SGE",
    );
    // The waiting receive was not consumed by any of them: the next datagram lands in it.
    w.g.post_send(&mut w.tx.qp, &[inline_wqe(7, LOOPBACK, w.rx.port, b"ok")]);
    assert_cqe(
        &w.g.wait_cqe(&mut w.tx.scq),
        CQE_STATUS_SUCCESS,
        0,
        "valid send",
    );
    let c = w.g.wait_cqe(&mut w.rx.rcq);
    assert_eq!(
        (c.wr_id, c.status, c.byte_len),
        (77, CQE_STATUS_SUCCESS, 2),
        "{c:?}"
    );
    w.fill_canaries();
    // A receive naming an unknown lkey.
    let c = w.recv_into(recv_wqe(8, &[w.rx.buf.sge(0, 4096, 0xdead_beef)]), 100);
    assert_eq!(c.wr_id, 8);
    assert_cqe(
        &c,
        CQE_STATUS_LOCAL_PROTECTION,
        CQE_DETAIL_BAD_LKEY,
        "receive with an unknown lkey",
    );
    let sges = [w.rx.buf.sge(0, 64, w.rx.mr.lkey), w.rx.buf.sge(64, 64, 0)];
    let c = w.recv_into(recv_wqe(9, &sges), 100);
    assert_eq!(c.wr_id, 9);
    assert_cqe(
        &c,
        CQE_STATUS_LOCAL_PROTECTION,
        CQE_DETAIL_BAD_LKEY,
        "receive with lkey 0 in its second SGE",
    );
    w.assert_canaries("receives with unknown lkeys");

    // A deregistered region is as unknown as one never registered.
    let ctx = w.tx.ctx;
    let gone = w.g.alloc_buf(4096, 0);
    let mr = w.g.reg_mr(ctx, &gone, MR_ACCESS_LOCAL_WRITE).unwrap();
    w.g.dereg_mr(ctx, mr.lkey).unwrap();
    let c = w.send(w.send_gather(10, &[gone.sge(0, 10, mr.lkey)]));
    assert_cqe(
        &c,
        CQE_STATUS_LOCAL_PROTECTION,
        CQE_DETAIL_BAD_LKEY,
        "send from a deregistered region",
    );
    assert!(
        w.g.stat(STAT_PROTECTION_ERRORS) >= errors + 7,
        "STAT_PROTECTION_ERRORS counts them"
    );
    w.assert_healthy("bad lkeys");
}

#[test]
fn another_contexts_region_is_refused_for_sends_and_receives() {
    let mut w = World::new();
    let secret = b"context B's secret";
    w.g.buf_write(&w.b_buf, 0, secret);
    let c = w.send(w.send_gather(1, &[w.b_buf.sge(0, secret.len() as u32, w.b_mr.lkey)]));
    assert_cqe(
        &c,
        CQE_STATUS_LOCAL_PROTECTION,
        CQE_DETAIL_OTHER_CONTEXT,
        "send from B's region",
    );
    w.g.buf_fill(&w.b_buf, CANARY);
    let c = w.recv_into(recv_wqe(2, &[w.b_buf.sge(0, 4096, w.b_mr.lkey)]), 200);
    assert_eq!(c.wr_id, 2);
    assert_cqe(
        &c,
        CQE_STATUS_LOCAL_PROTECTION,
        CQE_DETAIL_OTHER_CONTEXT,
        "receive into B's region",
    );
    // Mixed: first SGE A's own, second B's. Nothing at all may be written.
    let sges = [
        w.rx.buf.sge(0, 100, w.rx.mr.lkey),
        w.b_buf.sge(0, 100, w.b_mr.lkey),
    ];
    let c = w.recv_into(recv_wqe(3, &sges), 150);
    assert_cqe(
        &c,
        CQE_STATUS_LOCAL_PROTECTION,
        CQE_DETAIL_OTHER_CONTEXT,
        "receive half into B's region",
    );
    w.assert_canaries("receives into another context's region");
    w.assert_healthy("other-context regions");
}

#[test]
fn addresses_outside_the_region_are_refused_including_overflow() {
    let mut w = World::new();
    let b = w.tx.buf.clone();
    let k = w.tx.mr.lkey;
    let end = b.iova + b.len;
    let cases: [(&str, u64, u32); 7] = [
        ("one byte before the region", b.iova - 1, 10),
        ("running past the end", end - 5, 10),
        ("starting at the end", end, 1),
        ("far away", b.iova + (1 << 40), 1),
        ("wrapping around 2^64", u64::MAX - 3, 100),
        ("at u64::MAX", u64::MAX, 1),
        ("longer than the region", b.iova, b.len as u32 + 1),
    ];
    for (i, (what, addr, length)) in cases.iter().enumerate() {
        let sge = Sge {
            addr: *addr,
            length: *length,
            lkey: k,
        };
        let c = w.send(w.send_gather(i as u64, &[sge]));
        assert_cqe(
            &c,
            CQE_STATUS_LOCAL_PROTECTION,
            CQE_DETAIL_OUT_OF_BOUNDS,
            &format!("send {what}"),
        );
    }
    // Just inside is fine.
    w.g.post_recv(
        &mut w.rx.qp,
        &[recv_wqe(98, &[w.rx.buf.sge(0, 64, w.rx.mr.lkey)])],
    );
    let c = w.send(w.send_gather(
        99,
        &[Sge {
            addr: end - 10,
            length: 10,
            lkey: k,
        }],
    ));
    assert_cqe(
        &c,
        CQE_STATUS_SUCCESS,
        0,
        "send of the region's last 10 bytes",
    );
    let c = w.g.wait_cqe(&mut w.rx.rcq);
    assert_eq!(
        (c.wr_id, c.status, c.byte_len),
        (98, CQE_STATUS_SUCCESS, 10),
        "{c:?}"
    );
    w.fill_canaries();

    // Receives: the valid first SGE must not be written either.
    let rb = w.rx.buf.clone();
    let rk = w.rx.mr.lkey;
    let rend = rb.iova + rb.len;
    let rcases: [(&str, u64, u32); 4] = [
        ("running past the end", rend - 50, 100),
        ("before the region", rb.iova - 64, 64),
        ("wrapping around 2^64", u64::MAX - 10, 100),
        ("a 4 GiB length", rb.iova + 200, u32::MAX),
    ];
    for (i, (what, addr, length)) in rcases.iter().enumerate() {
        let sges = [
            rb.sge(0, 100, rk),
            Sge {
                addr: *addr,
                length: *length,
                lkey: rk,
            },
        ];
        let c = w.recv_into(recv_wqe(100 + i as u64, &sges), 150);
        assert_eq!(c.wr_id, 100 + i as u64);
        assert_cqe(
            &c,
            CQE_STATUS_LOCAL_PROTECTION,
            CQE_DETAIL_OUT_OF_BOUNDS,
            &format!("receive {what}"),
        );
        w.assert_canaries(&format!("receive {what}"));
    }
    w.assert_healthy("out-of-bounds SGEs");
}

#[test]
fn receiving_needs_local_write_but_sending_does_not() {
    let mut w = World::new();
    let ctx = w.rx.ctx;
    let ro = w.g.alloc_buf(4096, 0);
    let ro_mr = w.g.reg_mr(ctx, &ro, 0).unwrap();
    w.g.buf_fill(&ro, CANARY);
    let c = w.recv_into(recv_wqe(1, &[ro.sge(0, 4096, ro_mr.lkey)]), 64);
    assert_cqe(
        &c,
        CQE_STATUS_LOCAL_PROTECTION,
        CQE_DETAIL_ACCESS,
        "receive into a read-only region",
    );
    assert!(
        w.g.buf_read(&ro, 0, 4096).iter().all(|&x| x == CANARY),
        "read-only region written"
    );
    // Remote rights do not imply local write.
    let rr = w.g.reg_mr(ctx, &ro, MR_ACCESS_REMOTE_READ).unwrap();
    let c = w.recv_into(recv_wqe(2, &[ro.sge(0, 4096, rr.lkey)]), 64);
    assert_cqe(
        &c,
        CQE_STATUS_LOCAL_PROTECTION,
        CQE_DETAIL_ACCESS,
        "receive into a remote-read-only region",
    );
    assert!(
        w.g.buf_read(&ro, 0, 4096).iter().all(|&x| x == CANARY),
        "read-only region written"
    );
    // Sending from it is a local read, always allowed.
    w.g.buf_write(&ro, 0, b"read-only source");
    w.g.post_recv(
        &mut w.rx.qp,
        &[recv_wqe(3, &[w.rx.buf.sge(0, 64, w.rx.mr.lkey)])],
    );
    let c = w.send(w.send_gather(4, &[ro.sge(0, 16, ro_mr.lkey)]));
    assert_cqe(&c, CQE_STATUS_SUCCESS, 0, "send from a read-only region");
    let c = w.g.wait_cqe(&mut w.rx.rcq);
    assert_eq!((c.wr_id, c.byte_len), (3, 16));
    assert_eq!(w.g.buf_read(&w.rx.buf, 0, 16), b"read-only source");
    w.fill_canaries();
    w.assert_healthy("access rights");
}

#[test]
fn malformed_wqes_complete_with_errors_and_the_qp_carries_on() {
    let mut w = World::new();
    let base = |op: u8, wr_id: u64| {
        let mut h = wqe_hdr(op, wr_id);
        h.dest_addr = LOOPBACK;
        h
    };
    let port = w.rx.port;
    let sge = w.tx.buf.sge(0, 8, w.tx.mr.lkey);
    let mut cases: Vec<(&str, Wqe, u8)> = Vec::new();
    cases.push(("opcode 0", base(0, 1), CQE_STATUS_BAD_OPCODE));
    cases.push(("opcode 0x7e", base(0x7e, 2), CQE_STATUS_BAD_OPCODE));
    cases.push((
        "a receive in the send ring",
        base(WQE_OP_RECV, 3),
        CQE_STATUS_BAD_OPCODE,
    ));
    let mut h = base(WQE_OP_SEND, 4);
    h.num_sge = MAX_SGE as u8 + 1;
    cases.push(("6 SGEs", h, CQE_STATUS_BAD_WQE));
    let mut h = base(WQE_OP_SEND, 5);
    h.num_sge = 0xff;
    cases.push(("255 SGEs", h, CQE_STATUS_BAD_WQE));
    let mut h = base(WQE_OP_SEND, 6);
    h.flags = WQE_FLAG_INLINE;
    h.inline_len = MAX_INLINE + 1;
    cases.push(("81 bytes inline", h, CQE_STATUS_BAD_WQE));
    let mut h = base(WQE_OP_SEND, 7);
    h.flags = WQE_FLAG_INLINE;
    h.inline_len = u32::MAX;
    cases.push(("u32::MAX bytes inline", h, CQE_STATUS_BAD_WQE));
    let mut h = base(WQE_OP_SEND, 8);
    h.flags = 0x80;
    h.num_sge = 1;
    cases.push(("an unknown flag", h, CQE_STATUS_BAD_WQE));
    let mut h = base(WQE_OP_SEND, 9);
    h.reserved1 = 1;
    h.num_sge = 1;
    cases.push(("a reserved field set", h, CQE_STATUS_BAD_WQE));
    let mut h = base(WQE_OP_SEND, 10);
    h.flags = WQE_FLAG_INLINE;
    h.num_sge = 1;
    h.inline_len = 4;
    cases.push(("inline with SGEs", h, CQE_STATUS_BAD_WQE));
    for (what, mut h, status) in cases {
        h.dest_port = port;
        let c = w.send(wqe_bytes(&h, &[sge; 5]));
        assert_eq!(c.wr_id, h.wr_id, "{what}: wr_id echoed");
        assert_eq!(c.opcode, CQE_OP_SEND, "{what}: a send-ring completion");
        assert_cqe(&c, status, 0, &format!("send WQE with {what}"));
    }
    w.assert_canaries("malformed sends");

    // The receive ring.
    let rsge = w.rx.buf.sge(0, 4096, w.rx.mr.lkey);
    let mut rcases: Vec<(&str, Wqe, u8)> = Vec::new();
    rcases.push((
        "a send in the receive ring",
        wqe_hdr(WQE_OP_SEND, 20),
        CQE_STATUS_BAD_OPCODE,
    ));
    rcases.push(("opcode 0x55", wqe_hdr(0x55, 21), CQE_STATUS_BAD_OPCODE));
    let mut h = wqe_hdr(WQE_OP_RECV, 22);
    h.num_sge = 6;
    rcases.push(("6 SGEs", h, CQE_STATUS_BAD_WQE));
    let mut h = wqe_hdr(WQE_OP_RECV, 23);
    h.num_sge = 1;
    h.flags = WQE_FLAG_INLINE;
    rcases.push(("the inline flag", h, CQE_STATUS_BAD_WQE));
    for (what, mut h, status) in rcases {
        if h.num_sge == 0 {
            h.num_sge = 1;
        }
        let c = w.recv_into(wqe_bytes(&h, &[rsge; 5]), 32);
        assert_eq!(c.wr_id, h.wr_id, "{what}: wr_id echoed");
        assert_cqe(&c, status, 0, &format!("receive WQE with {what}"));
        w.assert_canaries(&format!("receive WQE with {what}"));
    }
    w.assert_healthy("malformed WQEs");
}

#[test]
fn doorbells_for_slots_without_objects_do_nothing() {
    let mut w = World::new();
    let ctx = w.tx.ctx;
    let g = &mut w.g;
    // Empty QP and CQ slots of a live context, and slots of a page no context owns.
    g.ring(ctx, qp_sq_tail(DB_QP_SLOTS - 1), 5);
    g.ring(ctx, qp_rq_tail(200), 0xffff_ffff);
    g.ring(ctx, cq_head(DB_CQ_SLOTS - 1), 77);
    g.ring(ctx, cq_arm_seq(100), 1);
    g.ring(DOORBELL_PAGES - 1, qp_sq_tail(0), 3);
    g.ring(DOORBELL_PAGES - 1, cq_arm_seq(0), 1);
    // And the reserved words between the header and the first QP slot.
    g.ring(ctx, 8, 0xdead_beef);
    g.ring(ctx, 0x3c, 0xdead_beef);
    w.assert_canaries("stray doorbells");
    w.assert_healthy("stray doorbells");
}

#[test]
fn a_producer_index_beyond_the_ring_errors_the_qp_and_flushes_its_work() {
    let mut w = World::new();
    let bad_before = w.g.stat(STAT_BAD_DOORBELLS);
    // Three receives; one datagram proves the device has seen all three (one doorbell).
    let r: Vec<WqeBytes> = (0..3u64)
        .map(|i| recv_wqe(30 + i, &[w.rx.buf.sge(i * 1024, 1024, w.rx.mr.lkey)]))
        .collect();
    w.g.post_recv(&mut w.rx.qp, &r);
    w.g.post_send(&mut w.tx.qp, &[inline_wqe(1, LOOPBACK, w.rx.port, b"one")]);
    assert_cqe(&w.g.wait_cqe(&mut w.tx.scq), CQE_STATUS_SUCCESS, 0, "send");
    let c = w.g.wait_cqe(&mut w.rx.rcq);
    assert_eq!((c.wr_id, c.status), (30, CQE_STATUS_SUCCESS));
    w.fill_canaries();

    // The receive producer index jumps more than the depth (16) past what was consumed (1).
    let rq_depth = w.rx.qp.rq_depth;
    let wild = w.rx.qp.rq_tail + rq_depth + 1;
    w.g.ring(w.rx.ctx, qp_rq_tail(w.rx.qp.slot), wild);
    for want in [31u64, 32] {
        let c = w.g.wait_cqe(&mut w.rx.rcq);
        assert_eq!(
            (c.wr_id, c.opcode, c.qp),
            (want, CQE_OP_RECV, w.rx.qp.id),
            "{c:?}"
        );
        assert_cqe(
            &c,
            CQE_STATUS_FLUSHED,
            0,
            "outstanding receive of the errored QP",
        );
    }
    assert!(
        w.g.stat(STAT_BAD_DOORBELLS) > bad_before,
        "STAT_BAD_DOORBELLS counts it"
    );
    // In the error state: a send on it is flushed, and datagrams to it are not placed.
    let mut qp = w.rx.qp.clone();
    w.g.post_send(
        &mut qp,
        &[inline_wqe(
            40,
            LOOPBACK,
            w.ok_rx.port,
            b"from an errored QP",
        )],
    );
    let c = w.g.wait_cqe(&mut w.rx.scq);
    assert_eq!(c.wr_id, 40);
    assert_cqe(&c, CQE_STATUS_FLUSHED, 0, "send on an errored QP");
    w.g.post_send(&mut w.tx.qp, &[inline_wqe(2, LOOPBACK, w.rx.port, b"two")]);
    assert_cqe(
        &w.g.wait_cqe(&mut w.tx.scq),
        CQE_STATUS_SUCCESS,
        0,
        "send to the errored QP",
    );
    std::thread::sleep(std::time::Duration::from_millis(20));
    let c = w.g.poll_cq(&mut w.rx.rcq);
    assert!(
        c.is_none() || c.unwrap().status == CQE_STATUS_FLUSHED,
        "errored QP received: {c:?}"
    );
    w.assert_canaries("a wild receive index");

    // A wild send index on the healthy pair's sender: nothing in its ring is executed.
    let tx_before = w.g.stat(STAT_UDP_TX);
    let s = w.ok_tx.qp.clone();
    // Plant a valid-looking send in every slot; none may go out.
    let mut planted = s.clone();
    let plant: Vec<WqeBytes> = (0..s.sq_depth)
        .map(|i| inline_wqe(500 + i as u64, LOOPBACK, w.ok_rx.port, b"x"))
        .collect();
    w.g.write_sq(&mut planted, &plant);
    w.g.ring(
        s.ctx,
        qp_sq_tail(s.slot),
        s.sq_tail.wrapping_add(s.sq_depth + 1),
    );
    let deadline = std::time::Instant::now() + TIMEOUT;
    while w.g.stat(STAT_BAD_DOORBELLS) < bad_before + 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "a wild send index was not noticed"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(w.g.stat(STAT_UDP_TX), tx_before, "an errored QP sent");
    // Others carry on: A's sender to C's receiver.
    w.g.post_recv(
        &mut w.ok_rx.qp,
        &[recv_wqe(1, &[w.ok_rx.buf.sge(0, 64, w.ok_rx.mr.lkey)])],
    );
    w.g.post_send(
        &mut w.tx.qp,
        &[inline_wqe(3, LOOPBACK, w.ok_rx.port, b"across")],
    );
    assert_cqe(
        &w.g.wait_cqe(&mut w.tx.scq),
        CQE_STATUS_SUCCESS,
        0,
        "send after the wild indices",
    );
    let c = w.g.wait_cqe(&mut w.ok_rx.rcq);
    assert_eq!((c.wr_id, c.status, c.byte_len), (1, CQE_STATUS_SUCCESS, 6));
}

#[test]
fn page_lists_outside_guest_ram_are_refused() {
    let mut g = FakeGuest::new();
    let ctx = g.create_ctx().unwrap();
    let end = RAM_BASE + RAM_SIZE;
    let good = g.alloc_pages(1);
    let outside = [
        0u64,
        0x1000,
        RAM_BASE - PAGE,
        end,
        end + 0x10_0000,
        !0xfffu64,
    ];

    // REG_MR: a page outside RAM, anywhere in the list.
    for &bad in &outside {
        let list = g.page_list(&[good, bad, good]);
        let mut a = RegMrArgs::new_zeroed();
        a.page_list = list;
        a.iova = 0x5000_0000;
        a.length = 3 * PAGE;
        a.npages = 3;
        a.access = MR_ACCESS_LOCAL_WRITE;
        assert_admin_err(
            g.reg_mr_args(ctx, &a),
            ADMIN_STATUS_BAD_ADDRESS,
            &format!("MR page {bad:#x}"),
        );
    }
    // The list itself outside RAM or running off its end.
    for list in [0x2000u64, end, end - 8] {
        let mut a = RegMrArgs::new_zeroed();
        a.page_list = list;
        a.iova = 0x5000_0000;
        a.length = 2 * PAGE;
        a.npages = 2;
        assert_admin_err(
            g.reg_mr_args(ctx, &a),
            ADMIN_STATUS_BAD_ADDRESS,
            &format!("MR page list at {list:#x}"),
        );
    }

    // CREATE_CQ: ring pages and list.
    for &bad in &outside {
        let list = g.page_list(&[good, bad]);
        let mut a = CreateCqArgs::new_zeroed();
        a.page_list = list;
        a.npages = 2;
        a.depth = 128;
        a.vector = 1;
        assert_admin_err(
            g.create_cq_args(ctx, &a),
            ADMIN_STATUS_BAD_ADDRESS,
            &format!("CQ ring page {bad:#x}"),
        );
    }
    let mut a = CreateCqArgs::new_zeroed();
    a.page_list = end - 8;
    a.npages = 2;
    a.depth = 128;
    a.vector = 1;
    assert_admin_err(
        g.create_cq_args(ctx, &a),
        ADMIN_STATUS_BAD_ADDRESS,
        "CQ page list off the end of RAM",
    );

    // CREATE_QP: either ring.
    let cq = g.create_cq(ctx, 16).unwrap();
    for &bad in &outside {
        for which in 0..2 {
            let (mut a, ..) = g.qp_args(cq.id, cq.id, 64, 64, QP_TYPE_UDP, 0);
            let list = g.page_list(&[good, bad]);
            if which == 0 {
                a.sq_page_list = list;
            } else {
                a.rq_page_list = list;
            }
            assert_admin_err(
                g.create_qp_args(ctx, &a),
                ADMIN_STATUS_BAD_ADDRESS,
                &format!("{} ring page {bad:#x}", ["SQ", "RQ"][which]),
            );
        }
    }
    let (mut a, ..) = g.qp_args(cq.id, cq.id, 64, 64, QP_TYPE_UDP, 0);
    a.rq_page_list = end;
    assert_admin_err(
        g.create_qp_args(ctx, &a),
        ADMIN_STATUS_BAD_ADDRESS,
        "RQ page list outside RAM",
    );
    // None of it leaked a resource or broke the context.
    let mut ep = g.udp_endpoint_in(ctx, UNSPECIFIED, 0, 8, 16, 64);
    g.post_recv(&mut ep.qp, &[recv_wqe(1, &[ep.buf.sge(0, 64, ep.mr.lkey)])]);
    g.post_send(&mut ep.qp, &[inline_wqe(2, LOOPBACK, ep.port, b"self")]);
    assert_cqe(
        &g.wait_cqe(&mut ep.scq),
        CQE_STATUS_SUCCESS,
        0,
        "send to itself",
    );
    assert_eq!(g.wait_cqe(&mut ep.rcq).byte_len, 4);
}
