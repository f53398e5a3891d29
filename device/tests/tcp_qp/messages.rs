//! Message framing: boundaries and immediate data kept, a message too large for its
//! receive WR, receive WRs of any size around a message's, and many small messages into
//! few large receives without a byte lost.

use std::time::{Duration, Instant};

use super::*;

#[test]
fn message_framing_keeps_boundaries_and_immediate_data() {
    let (_cable, mut a, mut b, mut s, mut c) =
        cabled_pair(IPV6_PAIR, 6002, None, FRAMING_MESSAGE, 16, 1 << 20);
    // Messages from the client (b) to the server (a): assorted sizes, one too big for
    // its 64 KiB receive WR, and an empty one.
    let sizes = [1usize, 0, 7, 1440, 1441, 3000, 65_536, 100_000, 5, 50_000];
    let mut rng = Rng::new(9);
    let data: Vec<Vec<u8>> = sizes.iter().map(|&n| rng.bytes(n)).collect();
    let mut at = 0u64;
    let mut wqes = Vec::new();
    for (i, d) in data.iter().enumerate() {
        if d.len() <= 80 && i % 2 == 0 {
            wqes.push(tcp_inline_wqe(i as u64, 0x1000 + i as u32, d));
        } else {
            b.buf_write(&c.buf, at, d);
            let half = d.len() as u32 / 2;
            wqes.push(tcp_send_wqe(
                i as u64,
                0x1000 + i as u32,
                &[
                    c.buf.sge(at, half, c.mr.lkey),
                    c.buf
                        .sge(at + half as u64, d.len() as u32 - half, c.mr.lkey),
                ],
            ));
        }
        at += d.len() as u64 + 64;
    }
    b.post_send(&mut c.qp, &wqes);
    let cqes = receive_messages(&mut a, &mut s, sizes.len());
    for (i, (d, r)) in data.iter().zip(&cqes).enumerate() {
        assert_eq!(r.wr_id, 100 + i as u64);
        assert_eq!(r.imm_data, 0x1000 + i as u32, "imm_data of message {i}");
        assert_eq!(r.byte_len, d.len() as u32, "length of message {i}");
        if d.len() > 65_536 {
            assert_cqe(
                r,
                CQE_STATUS_LOCAL_LENGTH,
                0,
                "a message larger than its WR",
            );
        } else {
            assert_cqe(r, CQE_STATUS_SUCCESS, 0, "message");
            assert_eq!(
                &a.buf_read(&s.buf, i as u64 * 65_536, d.len()),
                d,
                "message {i} intact"
            );
        }
    }
    for (i, d) in data.iter().enumerate() {
        let sc = b.wait_cqe(&mut c.scq);
        assert_cqe(&sc, CQE_STATUS_SUCCESS, 0, "send");
        assert_eq!((sc.wr_id, sc.byte_len), (i as u64, d.len() as u32));
    }
}

/// Every message completes its receive WR whatever the WR's size: exactly the message,
/// a few bytes more (the message's header takes no room in the WR, so the stream carries
/// more bytes than the WR holds), a page, or less (LOCAL_LENGTH). One message at a time,
/// then many back to back into WRs one byte larger than each.
#[test]
fn messages_complete_receive_wrs_of_any_size() {
    let mut g = FakeGuest::new();
    let (sctx, cctx) = (g.create_ctx().unwrap(), g.create_ctx().unwrap());
    let (mut s, mut c) = g.loopback_pair(sctx, cctx, 6320, FRAMING_MESSAGE);
    let sizes = [
        0usize, 1, 7, 8, 9, 100, 1000, 1001, 1400, 1431, 1432, 1440, 1500, 2000, 2880, 3000, 4088,
        4095, 4096, 4097, 10_000, 30_000, 60_000,
    ];
    let mut rng = Rng::new(31);
    let mut wr = 0u64;
    for &size in &sizes {
        let data = rng.bytes(size);
        g.buf_write(&c.buf, 0, &data);
        for buf in [size, size + 1, size + 7, size + 8, size + 9, 4096] {
            let buf = buf.min(1 << 16);
            wr += 1;
            post_recv_at(&mut g, &mut s, wr, 0, buf as u32);
            g.post_send(
                &mut c.qp,
                &[tcp_send_wqe(
                    wr,
                    wr as u32,
                    &[c.buf.sge(0, size as u32, c.mr.lkey)],
                )],
            );
            let what = format!("{size} B message into a {buf} B receive");
            let sc = g.wait_cqe(&mut c.scq);
            assert_cqe(&sc, CQE_STATUS_SUCCESS, 0, &format!("send of a {what}"));
            let r = g
                .try_wait_cqe(&mut s.rcq, TIMEOUT)
                .unwrap_or_else(|| panic!("{what}: the receive did not complete"));
            assert_eq!((r.wr_id, r.imm_data), (wr, wr as u32), "{what}");
            assert_eq!(r.byte_len as usize, size, "{what}");
            if size <= buf {
                assert_cqe(&r, CQE_STATUS_SUCCESS, 0, &what);
                assert_eq!(g.buf_read(&s.buf, 0, size), data, "{what}: intact");
            } else {
                assert_cqe(&r, CQE_STATUS_LOCAL_LENGTH, 0, &what);
            }
        }
    }
    // Back to back: a queue of WRs, each one byte larger than its message.
    let burst = [100usize, 1000, 1, 0, 1431, 3000, 7, 2000]; // the rings hold 8
    let mut off = 0u64;
    let mut recvs = Vec::new();
    let mut sends = Vec::new();
    let mut datas = Vec::new();
    for (i, &size) in burst.iter().enumerate() {
        let data = rng.bytes(size);
        g.buf_write(&c.buf, off, &data);
        recvs.push(recv_at(&s, 500 + i as u64, off, size as u32 + 1));
        sends.push(tcp_send_wqe(
            500 + i as u64,
            i as u32,
            &[c.buf.sge(off, size as u32, c.mr.lkey)],
        ));
        datas.push((off, data));
        off += size as u64 + 1;
    }
    g.post_recv(&mut s.qp, &recvs);
    g.post_send(&mut c.qp, &sends);
    for (i, (off, data)) in datas.iter().enumerate() {
        let what = format!("burst message {i} ({} B)", data.len());
        let r = g
            .try_wait_cqe(&mut s.rcq, TIMEOUT)
            .unwrap_or_else(|| panic!("{what}: the receive did not complete"));
        assert_cqe(&r, CQE_STATUS_SUCCESS, 0, &what);
        assert_eq!(
            (r.wr_id, r.byte_len as usize),
            (500 + i as u64, data.len()),
            "{what}"
        );
        assert_eq!(
            &g.buf_read(&s.buf, *off, data.len()),
            data,
            "{what}: intact"
        );
    }
    for i in 0..burst.len() {
        let sc = g.wait_cqe(&mut c.scq);
        assert_cqe(&sc, CQE_STATUS_SUCCESS, 0, "burst send");
        assert_eq!(sc.wr_id, 500 + i as u64);
    }
}

/// Many small messages into few large receive WRs (message framing), taken by an
/// application that reposts only now and then: each message takes a whole WR, so the
/// posted space in bytes is far more than the receiver can place, and the sender runs
/// ahead. The window offered must still be one the receiver keeps: over a lossless cable
/// every segment goes once (no retransmission, which a segment dropped inside the window
/// would cause) and every message arrives intact and in order.
#[test]
fn small_messages_into_large_receives_lose_nothing() {
    const MSG: usize = 1024;
    const MSGS: usize = 1000;
    const WRS: u64 = 8;
    const WR_LEN: u32 = 64 * 1024;
    const IN_FLIGHT: usize = 64;
    let (_cable, mut a, mut b, mut s, mut c) = cabled_pair(
        IPV6_PAIR,
        6011,
        None,
        FRAMING_MESSAGE,
        64,
        WRS * WR_LEN as u64 + (IN_FLIGHT * MSG) as u64,
    );
    let mut rng = Rng::new(31);
    let data = rng.bytes(MSG * MSGS);
    let rwqe = |i: u64| recv_wqe(i, &[s.buf.sge(i * WR_LEN as u64, WR_LEN, s.mr.lkey)]);
    let posted: Vec<_> = (0..WRS).map(rwqe).collect();
    a.post_recv(&mut s.qp, &posted);
    // The sender's slots sit after the receiver's area in its own buffer.
    let base = WRS * WR_LEN as u64;
    let (mut sent, mut done, mut got) = (0usize, 0usize, 0usize);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut next_look = Instant::now();
    while got < MSGS {
        assert!(
            Instant::now() < deadline,
            "stalled: {sent} sent, {done} send completions, {got} of {MSGS} received"
        );
        let mut busy = false;
        while sent < MSGS && sent - done < IN_FLIGHT {
            let at = base + ((sent % IN_FLIGHT) * MSG) as u64;
            b.buf_write(&c.buf, at, &data[sent * MSG..(sent + 1) * MSG]);
            let w = tcp_send_wqe(sent as u64, 0, &[c.buf.sge(at, MSG as u32, c.mr.lkey)]);
            b.post_send(&mut c.qp, &[w]);
            sent += 1;
            busy = true;
        }
        while let Some(sc) = b.poll_cq(&mut c.scq) {
            assert_cqe(&sc, CQE_STATUS_SUCCESS, 0, "send");
            done += 1;
            busy = true;
        }
        // The receiving application looks every 20 ms.
        while Instant::now() >= next_look {
            let Some(r) = a.poll_cq(&mut s.rcq) else {
                next_look = Instant::now() + Duration::from_millis(20);
                break;
            };
            assert_cqe(&r, CQE_STATUS_SUCCESS, 0, "receive");
            assert_eq!(r.byte_len as usize, MSG, "length of message {got}");
            let slot = r.wr_id;
            assert_eq!(
                a.buf_read(&s.buf, slot * WR_LEN as u64, MSG),
                &data[got * MSG..(got + 1) * MSG],
                "message {got} intact and in order"
            );
            got += 1;
            a.post_recv(&mut s.qp, &[rwqe(slot)]);
            busy = true;
        }
        if !busy {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    assert_eq!(
        b.stat(STAT_TCP_RETRANS_SEGS),
        0,
        "a segment was sent twice over a lossless cable: the receiver dropped data inside \
         the window it offered"
    );
    assert_eq!(
        a.stat(STAT_TCP_OOO_SEGS),
        0,
        "out-of-order segments at the receiver"
    );
}
