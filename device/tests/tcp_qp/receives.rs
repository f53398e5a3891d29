//! Receive WRs at the edges of a connection's life: posted before it exists (kept and
//! filled), or left without their memory (completed in error).

use std::time::Duration;

use super::*;

/// Receive WRs posted on an idle QP (before ACCEPT or CONNECT, or while either is pending)
/// become the connection's receive space: they are kept, not flushed, and the peer's data
/// completes them in order.
#[test]
fn receives_posted_before_accept_or_connect_are_kept_and_filled() {
    // The ACCEPT waits for the connection, or the device has accepted it before the ACCEPT
    // comes (then the client's CONNECT completes first).
    for (framing, accept_first) in [
        (FRAMING_STREAM, true),
        (FRAMING_MESSAGE, true),
        (FRAMING_STREAM, false),
        (FRAMING_MESSAGE, false),
    ] {
        let mut g = FakeGuest::new();
        let (sctx, cctx) = (g.create_ctx().unwrap(), g.create_ctx().unwrap());
        let port = 6300 + 2 * framing as u16 + accept_first as u16;
        let mut s = g.tcp_endpoint_in(sctx, framing, 8, 1 << 16);
        let mut c = g.tcp_endpoint_in(cctx, framing, 8, 1 << 16);
        // Each QP: one receive while idle, one while its ACCEPT or CONNECT is pending.
        post_recv_at(&mut g, &mut s, 1, 0, 4096);
        post_recv_at(&mut g, &mut c, 3, 0, 4096);
        let l = g.listen(sctx, UNSPECIFIED, port, 4).expect("listen");
        let accept = |g: &mut FakeGuest, s: &mut TcpEnd| {
            let acc = g.submit_accept(sctx, l, s.qp.id);
            post_recv_at(g, s, 2, 4096, 4096);
            acc
        };
        let acc = accept_first.then(|| accept(&mut g, &mut s));
        let con = g.submit_connect(cctx, c.qp.id, LOOPBACK, port);
        post_recv_at(&mut g, &mut c, 4, 4096, 4096);
        g.admin_wait_ok(con, "connect");
        let acc = acc.unwrap_or_else(|| accept(&mut g, &mut s));
        g.admin_wait_ok(acc, "accept");
        let how = format!("framing {framing}, accept first {accept_first}");
        send_into_posted(
            &mut g,
            &mut c,
            &mut s,
            &format!("client -> server, {how}"),
            [b"first", b"second!"],
        );
        send_into_posted(
            &mut g,
            &mut s,
            &mut c,
            &format!("server -> client, {how}"),
            [b"third", b"fourth!"],
        );
    }
}

/// Sends two messages from `from`; the two receives `to` posted (4 KiB each, at offsets 0
/// and 4096) complete with them in order.
fn send_into_posted(
    g: &mut FakeGuest,
    from: &mut TcpEnd,
    to: &mut TcpEnd,
    what: &str,
    words: [&[u8]; 2],
) {
    for (i, w) in words.iter().enumerate() {
        g.post_send(&mut from.qp, &[tcp_inline_wqe(10 + i as u64, 0, w)]);
        assert_cqe(&g.wait_cqe(&mut from.scq), CQE_STATUS_SUCCESS, 0, "send");
        let r = g
            .try_wait_cqe(&mut to.rcq, TIMEOUT)
            .unwrap_or_else(|| panic!("{what}: receive {i} did not complete"));
        assert_cqe(&r, CQE_STATUS_SUCCESS, 0, &format!("{what}: receive {i}"));
        assert_eq!(r.byte_len as usize, w.len(), "{what}: receive {i}");
        assert_eq!(g.buf_read(&to.buf, 4096 * i as u64, w.len()), *w, "{what}");
    }
}

/// A receive WR whose guest memory the VMM unmaps after it was posted: the bytes cannot be
/// placed, and the WR completes in error — never as a success with its data missing.
#[test]
fn a_receive_whose_memory_went_away_completes_in_error() {
    use std::os::fd::{AsRawFd, FromRawFd};
    let mut g = FakeGuest::new();
    let (sctx, cctx) = (g.create_ctx().unwrap(), g.create_ctx().unwrap());
    let (mut s, mut c) = g.loopback_pair(sctx, cctx, 6111, FRAMING_MESSAGE);

    // A second stretch of guest RAM, as a hot-plugged DIMM would be, holding the buffer.
    const EXTRA: u64 = 0x40_0000_0000;
    const EXTRA_SIZE: u64 = 1 << 20;
    // SAFETY: memfd creation; the fd is owned by the File from here on.
    let file = unsafe {
        std::fs::File::from_raw_fd(libc::memfd_create(c"extra-ram".as_ptr(), libc::MFD_CLOEXEC))
    };
    file.set_len(EXTRA_SIZE).unwrap();
    g.client
        .dma_map(0, EXTRA, EXTRA_SIZE, file.as_raw_fd())
        .unwrap();
    let buf = Buf {
        pages: vec![EXTRA, EXTRA + PAGE],
        offset: 0,
        len: 2 * PAGE,
        iova: 0x6000_0000_0000,
    };
    let mr = g.reg_mr(sctx, &buf, MR_ACCESS_LOCAL_WRITE).unwrap();
    // A receive WR over the whole buffer.
    let whole = |wr_id: u64| recv_wqe(wr_id, &[buf.sge(0, 2 * PAGE as u32, mr.lkey)]);
    // The client sends a message (its send completes): the receive completion it makes.
    let send = |g: &mut FakeGuest, c: &mut TcpEnd, s: &mut TcpEnd, wr_id: u64, msg: &[u8]| {
        g.post_send(&mut c.qp, &[tcp_inline_wqe(wr_id, 0, msg)]);
        assert_eq!(g.wait_cqe(&mut c.scq).status, CQE_STATUS_SUCCESS);
        g.wait_cqe(&mut s.rcq)
    };
    g.post_recv(&mut s.qp, &[whole(7)]);
    // The device takes the WR (its send of a first message proves the engine ran past the
    // doorbell), then the memory goes.
    let got = send(&mut g, &mut c, &mut s, 1, b"first");
    assert_eq!((got.wr_id, got.status), (7, CQE_STATUS_SUCCESS), "{got:?}");
    g.post_recv(&mut s.qp, &[whole(8)]);
    // A message to make sure the device took WR 8 before the unmap.
    let empty = send(&mut g, &mut c, &mut s, 2, b"");
    assert_eq!((empty.wr_id, empty.byte_len), (8, 0), "{empty:?}");
    g.post_recv(&mut s.qp, &[whole(9)]);
    std::thread::sleep(Duration::from_millis(50));
    g.client.dma_unmap(EXTRA, EXTRA_SIZE).unwrap();
    let lost = send(&mut g, &mut c, &mut s, 3, b"lost in unmapped memory");
    assert_eq!(lost.wr_id, 9);
    assert_eq!(
        (lost.status, lost.detail),
        (CQE_STATUS_LOCAL_PROTECTION, CQE_DETAIL_OUT_OF_BOUNDS),
        "a placement that failed must not complete as a success: {lost:?}"
    );
}
