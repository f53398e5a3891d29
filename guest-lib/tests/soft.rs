//! The verbs API against the software provider, on the host's loopback (`::1`): UDP and
//! TCP (message and stream framing, also against plain kernel sockets to pin the wire
//! format), scatter/gather, immediate data, tags, errors, many QPs on one CQ, waits with
//! a timeout, and epoll on a CQ's descriptor.

use std::io::{Read, Write};
use std::net::{Ipv6Addr, SocketAddrV6, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

mod common;
#[path = "../../guest-tools/src/bin/qpip-verbs-test/messages.rs"]
mod messages;

use common::{free_tcp_port, lo, pending_connection, tcp_qp};
use qpip::{
    Completion, Context, Cq, Detail, Error, EventKind, Framing, Opcode, Qp, QpInit, QpKind, SendWr,
    Sge, Status,
};

const T: Duration = Duration::from_secs(10);

fn soft() -> Context {
    Context::open_soft().expect("soft provider")
}

/// The next completion, or a panic naming what was awaited.
fn next(cq: &Cq, what: &str) -> Completion {
    cq.wait_one(Some(T))
        .expect("wait")
        .unwrap_or_else(|| panic!("no completion for {what} within {T:?}"))
}

fn udp_pair(ctx: &Context, cq: &Cq) -> (Qp, Qp, SocketAddrV6, SocketAddrV6) {
    let a = ctx.create_qp(&QpInit::new(QpKind::Udp, cq)).unwrap();
    let b = ctx.create_qp(&QpInit::new(QpKind::Udp, cq)).unwrap();
    let pa = a.bind(lo(0)).unwrap();
    let pb = b.bind(lo(0)).unwrap();
    (a, b, pa, pb)
}

/// A TCP QP with `framing` connected to a kernel socket on [::1]: the QP, the socket (read
/// timeout [`T`]) and its address.
fn tcp_qp_to_socket(ctx: &Context, cq: &Cq, framing: Framing) -> (Qp, TcpStream, SocketAddrV6) {
    let l = TcpListener::bind("[::1]:0").unwrap();
    let std::net::SocketAddr::V6(addr) = l.local_addr().unwrap() else {
        panic!()
    };
    let qp = tcp_qp(ctx, cq, framing);
    let peer = qp.connect_wait(addr, T).unwrap();
    assert_eq!(peer, addr);
    let (s, _) = l.accept().unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    (qp, s, addr)
}

/// A connected pair of TCP QPs with `framing`, through a listener of the same context.
fn tcp_pair(ctx: &Context, cq: &Cq, framing: Framing) -> (Qp, Qp) {
    let p = pending_connection(ctx, cq, framing, 0xacce);
    p.client.connect(lo(p.port), 0xc0).unwrap();
    let c = ctx
        .wait_event_for(p.client.id(), EventKind::Connect, Some(T))
        .unwrap()
        .unwrap();
    assert_eq!((c.status, c.user_data), (0, 0xc0), "{c:?}");
    let a = ctx
        .wait_event_for(p.server.id(), EventKind::Accept, Some(T))
        .unwrap()
        .unwrap();
    assert_eq!((a.status, a.user_data), (0, 0xacce), "{a:?}");
    assert_eq!(a.peer.unwrap().ip(), &Ipv6Addr::LOCALHOST);
    (p.server, p.client)
}

#[test]
fn udp_scatter_gather_tags_and_source() {
    let ctx = soft();
    let cq = ctx.create_cq(16).unwrap();
    let (a, b, pa, pb) = udp_pair(&ctx, &cq);
    let mut src = ctx.alloc(64).unwrap();
    for (i, x) in src.iter_mut().enumerate() {
        *x = i as u8;
    }
    let dst = ctx.alloc(64).unwrap();
    // Receive into two pieces (10 bytes at 40, then 20 at 0).
    b.post_recv(77, &[dst.sge(40, 10), dst.sge(0, 20)]).unwrap();
    // Gather three pieces: 5 at 0, 7 at 30, 3 at 60.
    let sges = [src.sge(0, 5), src.sge(30, 7), src.sge(60, 3)];
    a.post_send(&SendWr::new(55, &sges).to(pb)).unwrap();
    let mut seen = Vec::new();
    while seen.len() < 2 {
        seen.push(next(&cq, "send and receive"));
    }
    let s = seen.iter().find(|c| c.opcode == Opcode::Send).unwrap();
    let r = seen.iter().find(|c| c.opcode == Opcode::Recv).unwrap();
    assert_eq!(
        (s.wr_id, s.qp, s.status, s.byte_len),
        (55, a.id(), Status::Success, 15)
    );
    assert_eq!(
        (r.wr_id, r.qp, r.status, r.byte_len),
        (77, b.id(), Status::Success, 15)
    );
    assert_eq!(r.src, Some(pa));
    let want: Vec<u8> = (0..5).chain(30..37).chain(60..63).collect();
    assert_eq!(&dst[40..50], &want[..10]);
    assert_eq!(&dst[0..5], &want[10..]);
}

#[test]
fn udp_from_and_to_plain_sockets() {
    let ctx = soft();
    let cq = ctx.create_cq(8).unwrap();
    let qp = ctx.create_qp(&QpInit::new(QpKind::Udp, &cq)).unwrap();
    let me = qp.bind(lo(0)).unwrap();
    let sock = UdpSocket::bind("[::1]:0").unwrap();
    sock.set_read_timeout(Some(T)).unwrap();
    let buf = ctx.alloc(100).unwrap();
    qp.post_recv(1, &[buf.sge_all()]).unwrap();
    sock.send_to(b"from a socket", me).unwrap();
    let r = next(&cq, "datagram from a socket");
    assert_eq!((r.status, r.byte_len), (Status::Success, 13));
    assert_eq!(&buf[..13], b"from a socket");
    let std::net::SocketAddr::V6(peer) = sock.local_addr().unwrap() else {
        panic!()
    };
    assert_eq!(r.src, Some(peer));
    qp.post_send(&SendWr::inline(2, b"to a socket").to(peer))
        .unwrap();
    assert!(next(&cq, "inline send").is_ok());
    let mut got = [0u8; 64];
    let (n, from) = sock.recv_from(&mut got).unwrap();
    assert_eq!(&got[..n], b"to a socket");
    assert_eq!(from, std::net::SocketAddr::V6(me));
}

#[test]
fn udp_error_completions() {
    let ctx = soft();
    let cq = ctx.create_cq(16).unwrap();
    let (a, b, _, pb) = udp_pair(&ctx, &cq);
    let unbound = ctx.create_qp(&QpInit::new(QpKind::Udp, &cq)).unwrap();
    // Immediate data has no room in a datagram.
    a.post_send(&SendWr::inline(1, b"x").imm(5).to(pb)).unwrap();
    let c = next(&cq, "imm on UDP");
    assert_eq!((c.wr_id, c.status), (1, Status::BadWqe));
    // Port 0 and the unspecified address are no destinations.
    a.post_send(&SendWr::inline(2, b"x").to(lo(0))).unwrap();
    let c = next(&cq, "port 0");
    assert_eq!(
        (c.wr_id, c.status, c.detail),
        (2, Status::BadDest, Detail::BadAddress)
    );
    // A QP that is not bound cannot send.
    unbound.post_send(&SendWr::inline(3, b"x").to(pb)).unwrap();
    let c = next(&cq, "unbound");
    assert_eq!(
        (c.wr_id, c.status, c.detail),
        (3, Status::BadDest, Detail::NotBound)
    );
    // A datagram bigger than the receive buffer: consumed, nothing placed, its size told.
    let small = ctx.alloc(4).unwrap();
    b.post_recv(4, &[small.sge_all()]).unwrap();
    a.post_send(&SendWr::inline(5, b"too long").to(pb)).unwrap();
    let mut got = [next(&cq, "long send"), next(&cq, "long receive")];
    got.sort_by_key(|c| c.wr_id);
    assert_eq!((got[0].status, got[0].byte_len), (Status::LocalLength, 8));
    assert_eq!(&small[..], &[0, 0, 0, 0]);
    assert!(got[1].is_ok());
}

#[test]
fn post_errors_are_typed() {
    let ctx = soft();
    let other = soft();
    let cq = ctx.create_cq(4).unwrap();
    let qp = ctx
        .create_qp(&QpInit::new(QpKind::Udp, &cq).depth(2, 2))
        .unwrap();
    let buf = ctx.alloc(16).unwrap();
    let foreign = other.alloc(16).unwrap();
    let to = lo(9);
    assert!(matches!(
        qp.post_recv(1, &[buf.sge(10, 7)]),
        Err(Error::OutOfBounds {
            offset: 10,
            end: 17,
            size: 16,
            ..
        })
    ));
    let six = [buf.sge(0, 1); 6];
    assert!(matches!(
        qp.post_recv(1, &six),
        Err(Error::TooManySges { given: 6, max: 5 })
    ));
    assert!(matches!(
        qp.post_send(&SendWr::inline(1, &[0; 81]).to(to)),
        Err(Error::InlineTooLong { len: 81, max: 80 })
    ));
    assert!(matches!(
        qp.post_send(&SendWr::inline(1, b"x")),
        Err(Error::Destination(_))
    ));
    assert!(matches!(
        qp.post_recv(1, &[foreign.sge_all()]),
        Err(Error::ForeignObject(_))
    ));
    assert!(matches!(qp.connect(to, 0), Err(Error::WrongQpKind { .. })));
    assert!(matches!(ctx.create_cq(3), Err(Error::InvalidArgument(_))));
    assert!(matches!(ctx.alloc(0), Err(Error::InvalidArgument(_))));
    let other_cq = other.create_cq(4).unwrap();
    assert!(matches!(
        ctx.create_qp(&QpInit::new(QpKind::Udp, &other_cq)),
        Err(Error::ForeignObject(_))
    ));
    // The receive queue holds two; the third is refused until one completes.
    qp.post_recv(1, &[buf.sge(0, 8)]).unwrap();
    qp.post_recv(2, &[buf.sge(8, 8)]).unwrap();
    let e = qp.post_recv(3, &[buf.sge(0, 8)]).unwrap_err();
    assert!(matches!(e, Error::QueueFull { depth: 2, .. }), "{e}");
    assert!(e.to_string().contains("receive queue"), "{e}");
    // Dropping the QP flushes what it held, in order.
    drop(qp);
    let a = next(&cq, "flush 1");
    let b = next(&cq, "flush 2");
    assert_eq!((a.wr_id, a.status), (1, Status::Flushed));
    assert_eq!((b.wr_id, b.status), (2, Status::Flushed));
}

#[test]
fn tcp_messages_keep_boundaries_immediates_and_tags() {
    let ctx = soft();
    let cq = ctx.create_cq(64).unwrap();
    let (server, client) = tcp_pair(&ctx, &cq, Framing::Message);
    let rbuf = ctx.alloc(8 * messages::RECV_SIZE).unwrap();
    for i in 0..8 {
        let sge = [rbuf.sge(i * messages::RECV_SIZE, messages::RECV_SIZE)];
        server.post_recv(100 + i as u64, &sge).unwrap();
    }
    let mut sbuf = ctx.alloc(messages::SEND_SIZE).unwrap();
    messages::fill(&mut sbuf);
    // Sizes: one byte, nothing, a gather of two pieces, inline, one too big for 4096.
    messages::post(&client, &sbuf).unwrap();
    let (mut sends, mut recvs) = (Vec::new(), Vec::new());
    while sends.len() < 6 || recvs.len() < 6 {
        let c = next(&cq, "messages");
        if c.opcode == Opcode::Send {
            sends.push(c)
        } else {
            recvs.push(c)
        }
    }
    assert_eq!(
        sends.iter().map(|c| c.wr_id).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5, 6]
    );
    assert!(sends.iter().all(|c| c.is_ok() && c.qp == client.id()));
    let got: Vec<_> = recvs
        .iter()
        .map(|c| (c.wr_id, c.status, c.byte_len, c.imm))
        .collect();
    assert_eq!(got, messages::RECEIVES);
    assert_eq!(rbuf[0], 0);
    let want = messages::gathered(&sbuf);
    assert_eq!(&rbuf[2 * 4096..2 * 4096 + 3000], &want[..]);
    assert_eq!(&rbuf[3 * 4096..3 * 4096 + 6], b"inline");
    assert_eq!(&rbuf[5 * 4096..5 * 4096 + 5], b"after");
}

#[test]
fn tcp_message_framing_on_the_wire_is_msg_header() {
    let ctx = soft();
    let cq = ctx.create_cq(8).unwrap();
    let (qp, mut s, _) = tcp_qp_to_socket(&ctx, &cq, Framing::Message);
    qp.post_send(&SendWr::inline(1, b"abc").imm(0x0102_0304))
        .unwrap();
    let mut got = [0u8; 11];
    s.read_exact(&mut got).unwrap();
    assert_eq!(got, [3, 0, 0, 0, 4, 3, 2, 1, b'a', b'b', b'c']);
    // And the other way: a header written in two pieces still makes one message.
    let buf = ctx.alloc(16).unwrap();
    qp.post_recv(9, &[buf.sge_all()]).unwrap();
    s.write_all(&[2, 0, 0]).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    s.write_all(&[0, 7, 0, 0, 0, b'h', b'i']).unwrap();
    let mut c = next(&cq, "send");
    if c.opcode == Opcode::Send {
        c = next(&cq, "message from a socket");
    }
    assert_eq!(
        (c.wr_id, c.status, c.byte_len, c.imm),
        (9, Status::Success, 2, 7)
    );
    assert_eq!(&buf[..2], b"hi");
}

#[test]
fn tcp_stream_with_a_plain_socket_and_end_of_stream() {
    let ctx = soft();
    let cq = ctx.create_cq(16).unwrap();
    let (qp, mut s, _) = tcp_qp_to_socket(&ctx, &cq, Framing::Stream);
    // 1 MiB from the QP to the socket, in 64 KiB sends from one region.
    let mut big = ctx.alloc(1 << 20).unwrap();
    for (i, x) in big.iter_mut().enumerate() {
        *x = (i * 7 % 253) as u8;
    }
    for i in 0..16 {
        qp.post_send(&SendWr::new(i, &[big.sge(i as usize * 65536, 65536)]))
            .unwrap();
    }
    let reader = std::thread::spawn(move || {
        let mut all = vec![0u8; 1 << 20];
        s.read_exact(&mut all).unwrap();
        (s, all)
    });
    for i in 0..16 {
        let c = next(&cq, "stream send");
        assert_eq!((c.wr_id, c.status, c.byte_len), (i, Status::Success, 65536));
    }
    let (mut s, all) = reader.join().unwrap();
    assert!(all == big[..], "the stream arrived changed");
    // The socket's bytes fill receives in order; its close ends the stream.
    let rbuf = ctx.alloc(8192).unwrap();
    qp.post_recv(50, &[rbuf.sge(0, 4096)]).unwrap();
    s.write_all(b"plain bytes").unwrap();
    let c = next(&cq, "stream receive");
    assert_eq!((c.wr_id, c.status, c.byte_len), (50, Status::Success, 11));
    assert_eq!(&rbuf[..11], b"plain bytes");
    drop(s);
    qp.post_recv(51, &[rbuf.sge(4096, 4096)]).unwrap();
    qp.post_recv(52, &[rbuf.sge(4096, 4096)]).unwrap();
    for id in [51, 52] {
        let c = next(&cq, "end of stream");
        assert_eq!((c.wr_id, c.status, c.byte_len), (id, Status::Success, 0));
    }
    let e = ctx
        .wait_event_for(qp.id(), EventKind::PeerClosed, Some(T))
        .unwrap()
        .unwrap();
    assert_eq!(e.status, 0);
}

#[test]
fn tcp_close_is_a_fin_after_the_sends() {
    let ctx = soft();
    let cq = ctx.create_cq(16).unwrap();
    let (server, client) = tcp_pair(&ctx, &cq, Framing::Message);
    let rbuf = ctx.alloc(64).unwrap();
    server.post_recv(1, &[rbuf.sge(0, 32)]).unwrap();
    server.post_recv(2, &[rbuf.sge(32, 32)]).unwrap();
    client
        .post_send(&SendWr::inline(10, b"last words"))
        .unwrap();
    client.close(0xc105e).unwrap();
    let e = ctx
        .wait_event_for(client.id(), EventKind::Close, Some(T))
        .unwrap()
        .unwrap();
    assert_eq!((e.status, e.user_data), (0, 0xc105e));
    let mut got = Vec::new();
    while got.len() < 3 {
        got.push(next(&cq, "close"));
    }
    got.sort_by_key(|c| c.wr_id);
    assert_eq!((got[0].wr_id, got[0].byte_len), (1, 10));
    assert_eq!((got[1].wr_id, got[1].byte_len), (2, 0), "end of stream");
    assert_eq!(got[2].wr_id, 10);
    assert!(ctx
        .wait_event_for(server.id(), EventKind::PeerClosed, Some(T))
        .unwrap()
        .is_some());
    // A send after the close has no connection to go on.
    client.post_send(&SendWr::inline(11, b"late")).unwrap();
    let c = next(&cq, "send after close");
    assert_eq!(
        (c.wr_id, c.status, c.detail),
        (11, Status::BadDest, Detail::NotBound)
    );
    // A second close is refused in its event.
    client.close(7).unwrap();
    let e = ctx
        .wait_event_for(client.id(), EventKind::Close, Some(T))
        .unwrap()
        .unwrap();
    assert_eq!(e.status, -libc::EINVAL);
}

#[test]
fn refused_connect_and_cancelled_accept() {
    let ctx = soft();
    let cq = ctx.create_cq(8).unwrap();
    let qp = tcp_qp(&ctx, &cq, Framing::Message);
    let buf = ctx.alloc(16).unwrap();
    qp.post_recv(1, &[buf.sge_all()]).unwrap();
    let e = qp.connect_wait(lo(free_tcp_port()), T).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ECONNREFUSED), "{e}");
    // The failed connection flushed what was posted.
    let c = next(&cq, "flush after refusal");
    assert_eq!((c.wr_id, c.status), (1, Status::Flushed));
    let idle = tcp_qp(&ctx, &cq, Framing::Stream);
    let l = ctx.listen(lo(free_tcp_port()), 1).unwrap();
    l.accept(&idle, 42).unwrap();
    drop(l);
    let e = ctx
        .wait_event_for(idle.id(), EventKind::Accept, Some(T))
        .unwrap()
        .unwrap();
    assert_eq!((e.status, e.user_data), (-libc::ECANCELED, 42));
}

#[test]
fn many_qps_share_one_cq() {
    let ctx = soft();
    let cq = ctx.create_cq(256).unwrap();
    let n = 16;
    let qps: Vec<Qp> = (0..n)
        .map(|_| {
            ctx.create_qp(&QpInit::new(QpKind::Udp, &cq).depth(8, 8))
                .unwrap()
        })
        .collect();
    let addrs: Vec<_> = qps.iter().map(|q| q.bind(lo(0)).unwrap()).collect();
    let buf = ctx.alloc(n * 64).unwrap();
    for (i, q) in qps.iter().enumerate() {
        q.post_recv(1000 + i as u64, &[buf.sge(i * 64, 64)])
            .unwrap();
    }
    for (i, q) in qps.iter().enumerate() {
        let msg = format!("from {i}");
        q.post_send(&SendWr::inline(i as u64, msg.as_bytes()).to(addrs[(i + 1) % n]))
            .unwrap();
    }
    let mut out = [Completion::default(); 7];
    let mut all = Vec::new();
    let deadline = Instant::now() + T;
    while all.len() < 2 * n && Instant::now() < deadline {
        let k = cq.wait(&mut out, Some(T)).unwrap();
        all.extend_from_slice(&out[..k]);
    }
    assert_eq!(all.len(), 2 * n);
    for (i, q) in qps.iter().enumerate() {
        let r = all
            .iter()
            .find(|c| c.qp == q.id() && c.opcode == Opcode::Recv)
            .unwrap();
        let from = (i + n - 1) % n;
        assert_eq!(r.wr_id, 1000 + i as u64);
        assert_eq!(r.src, Some(addrs[from]));
        let text = format!("from {from}");
        assert_eq!(&buf[i * 64..i * 64 + text.len()], text.as_bytes());
    }
}

#[test]
fn receives_posted_as_a_batch_fill_in_order_and_a_full_queue_stops_the_batch() {
    let ctx = soft();
    let cq = ctx.create_cq(16).unwrap();
    let scq = ctx.create_cq(16).unwrap();
    let a = ctx
        .create_qp(&QpInit::new(QpKind::Udp, &scq).depth(8, 4))
        .unwrap();
    let b = ctx
        .create_qp(&QpInit::new(QpKind::Udp, &cq).depth(8, 4))
        .unwrap();
    a.bind(lo(0)).unwrap();
    let pb = lo(b.bind(lo(0)).unwrap().port());
    let buf = ctx.alloc(6 * 16).unwrap();
    let sges: Vec<[Sge<'_>; 1]> = (0..6).map(|i| [buf.sge(i * 16, 16)]).collect();
    // Six for a queue of four: four go, the count says so.
    let n = b
        .post_recvs(sges.iter().enumerate().map(|(i, s)| (i as u64, &s[..])))
        .unwrap();
    assert_eq!(n, 4);
    for i in 0..4u8 {
        a.post_send(&SendWr::inline(100 + i as u64, &[i; 3]).to(pb))
            .unwrap();
    }
    for i in 0..4u64 {
        let c = next(&cq, "receive");
        assert_eq!((c.wr_id, c.byte_len), (i, 3), "in posting order");
        assert_eq!(&buf.as_slice()[i as usize * 16..][..3], &[i as u8; 3]);
    }
    // An empty batch posts nothing.
    assert_eq!(b.post_recvs(std::iter::empty()).unwrap(), 0);
}

#[test]
fn a_busy_polling_wait_takes_completions_and_keeps_to_its_timeout() {
    let ctx = soft();
    let cq = ctx.create_cq(8).unwrap();
    assert_eq!(
        cq.busy_poll(),
        Duration::ZERO,
        "new CQs sleep at once by default"
    );
    cq.set_busy_poll(Duration::from_secs(3600));
    assert_eq!(cq.busy_poll(), Duration::from_secs(3600));
    // A spin of an hour still ends with the wait's timeout.
    assert_eq!(cq.wait_one(Some(Duration::from_millis(50))).unwrap(), None);
    let (a, b, _, pb) = udp_pair(&ctx, &cq);
    let buf = ctx.alloc(16).unwrap();
    b.post_recv(1, &[buf.sge_all()]).unwrap();
    a.post_send(&SendWr::inline(2, b"spun").to(pb)).unwrap();
    let mut ids = Vec::new();
    while ids.len() < 2 {
        let c = cq.wait_one(None).unwrap().expect("no timeout given");
        ids.push(c.wr_id);
    }
    ids.sort();
    assert_eq!(ids, [1, 2]);
    assert_eq!(&buf.as_slice()[..4], b"spun");
}

#[test]
fn wait_times_out_and_epoll_wakes_on_arm() {
    let ctx = soft();
    // A wait that times out leaves its CQ armed: use a CQ of its own.
    let idle = ctx.create_cq(2).unwrap();
    assert_eq!(
        idle.wait_one(Some(Duration::from_millis(50))).unwrap(),
        None
    );
    let cq = ctx.create_cq(8).unwrap();
    let (a, b, _, pb) = udp_pair(&ctx, &cq);
    let buf = ctx.alloc(16).unwrap();
    b.post_recv(1, &[buf.sge_all()]).unwrap();

    // SAFETY: plain system calls on descriptors this test owns.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    assert!(ep >= 0);
    let mut ev = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: 7,
    };
    // SAFETY: as above.
    assert_eq!(
        unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, cq.as_raw_fd(), &mut ev) },
        0
    );
    let wait = |ms| {
        let mut out = [libc::epoll_event { events: 0, u64: 0 }; 2];
        // SAFETY: as above.
        unsafe { libc::epoll_wait(ep, out.as_mut_ptr(), 2, ms) }
    };
    // Not armed: no wake-up, even with a completion there.
    a.post_send(&SendWr::inline(2, b"one").to(pb)).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(wait(0), 0, "woke without arming");
    let mut out = [Completion::default(); 4];
    let mut got = 0;
    while got < 2 {
        got += cq.poll(&mut out[got..]);
    }
    // Armed on an empty CQ: the next completion wakes epoll, once.
    cq.arm().unwrap();
    assert_eq!(wait(0), 0);
    a.post_send(&SendWr::inline(3, b"two").to(pb)).unwrap();
    assert_eq!(wait(10_000), 1, "no wake-up after arming");
    assert_eq!(cq.ack(), 1);
    assert_eq!(wait(0), 0, "still readable after ack");
    assert_eq!(cq.poll_one().map(|c| c.wr_id), Some(3));
    // Armed with a completion already there: at once.
    a.post_send(&SendWr::inline(4, b"three").to(pb)).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    cq.arm().unwrap();
    assert_eq!(wait(10_000), 1);
    // SAFETY: closing the epoll descriptor this test opened.
    unsafe { libc::close(ep) };
}

#[test]
fn context_events_fd_polls_readable() {
    let ctx = soft();
    let cq = ctx.create_cq(8).unwrap();
    let qp = tcp_qp(&ctx, &cq, Framing::Message);
    let l = ctx.listen(lo(free_tcp_port()), 1).unwrap();
    l.accept(&qp, 5).unwrap();
    let mut p = libc::pollfd {
        fd: ctx.events_fd().as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    assert_eq!(unsafe { libc::poll(&mut p, 1, 0) }, 0);
    drop(l);
    // SAFETY: as above.
    assert_eq!(unsafe { libc::poll(&mut p, 1, 10_000) }, 1);
    let e = ctx.poll_event().unwrap().unwrap();
    assert_eq!((e.kind, e.status), (EventKind::Accept, -libc::ECANCELED));
    assert_eq!(ctx.poll_event().unwrap(), None);
    // SAFETY: as above.
    assert_eq!(
        unsafe { libc::poll(&mut p, 1, 0) },
        0,
        "readable with no event queued"
    );
}

#[test]
fn provider_choice() {
    std::env::set_var(qpip::PROVIDER_ENV, "bogus");
    let e = Context::open().unwrap_err();
    assert!(matches!(e, Error::BadProviderName(_)), "{e}");
    std::env::set_var(qpip::PROVIDER_ENV, "soft");
    assert_eq!(
        Context::open().unwrap().provider(),
        qpip::ProviderKind::Soft
    );
    std::env::remove_var(qpip::PROVIDER_ENV);
}

#[test]
fn handles_are_send_and_sync() {
    fn both<T: Send + Sync>() {}
    both::<Context>();
    both::<Cq>();
    both::<Qp>();
    both::<qpip::Listener>();
    both::<qpip::MemoryRegion>();
    both::<qpip::Tripwire>();
}

/// A tripwire's arguments are checked as on the device (the region and the CQ of the
/// context, a range of at least one byte inside the region); then the software provider,
/// which places nothing itself, refuses plainly.
#[test]
fn tripwires_are_checked_then_refused_on_the_soft_provider() {
    let ctx = soft();
    let other = soft();
    let cq = ctx.create_cq(4).unwrap();
    let ocq = other.create_cq(4).unwrap();
    let mr = ctx.alloc(256).unwrap();
    let omr = other.alloc(256).unwrap();
    let cases = [
        (ctx.create_tripwire(&omr, 0, 8, &cq, 1), "a foreign region"),
        (ctx.create_tripwire(&mr, 0, 8, &ocq, 1), "a foreign CQ"),
        (ctx.create_tripwire(&mr, 0, 0, &cq, 1), "an empty range"),
        (ctx.create_tripwire(&mr, 250, 8, &cq, 1), "past the end"),
        (
            ctx.create_tripwire(&mr, usize::MAX, 2, &cq, 1),
            "a wrapping range",
        ),
        (ctx.create_tripwire(&mr, 248, 8, &cq, 1), "good arguments"),
    ];
    let got: Vec<String> = cases
        .into_iter()
        .map(|(r, what)| match r {
            Ok(t) => format!("{what}: created {t:?}"),
            Err(e) => format!("{what}: {}", error_name(&e)),
        })
        .collect();
    assert_eq!(
        got,
        [
            "a foreign region: ForeignObject",
            "a foreign CQ: ForeignObject",
            "an empty range: InvalidArgument",
            "past the end: OutOfBounds",
            "a wrapping range: OutOfBounds",
            "good arguments: Unsupported",
        ]
    );
}

fn error_name(e: &Error) -> &'static str {
    match e {
        Error::ForeignObject(_) => "ForeignObject",
        Error::InvalidArgument(_) => "InvalidArgument",
        Error::OutOfBounds { .. } => "OutOfBounds",
        Error::Unsupported(_) => "Unsupported",
        _ => "another error",
    }
}

/// Two threads wait on one context, each for its own event, and the events come together:
/// whichever thread reads the other's event keeps it back and the other still gets it
/// (it must not sleep on the descriptor the first one drained).
#[test]
fn blocking_event_waits_in_two_threads_each_get_theirs() {
    let ctx = soft();
    let cq = ctx.create_cq(64).unwrap();
    for round in 0..30 {
        let p = pending_connection(&ctx, &cq, Framing::Message, round);
        let (sid, cid) = (p.server.id(), p.client.id());
        std::thread::scope(|s| {
            let a = s.spawn(|| ctx.wait_event_for(sid, EventKind::Accept, Some(T)));
            let b = s.spawn(|| ctx.wait_event_for(cid, EventKind::Connect, Some(T)));
            // Both threads are (most likely) asleep on the descriptor by now.
            std::thread::sleep(Duration::from_millis(5));
            p.client.connect(lo(p.port), round).unwrap();
            let a = a.join().unwrap().unwrap();
            let b = b.join().unwrap().unwrap();
            assert!(a.is_some(), "round {round}: the accept's event never came");
            assert!(b.is_some(), "round {round}: the connect's event never came");
        });
    }
}

/// Two threads in `Cq::wait` on one CQ, datagrams arriving one at a time: the wake-up of
/// the first arrival goes to one of them, and the other (whose arming that one interrupt
/// spent) must still wake for the next.
#[test]
fn blocking_cq_waits_in_two_threads_each_wake() {
    let ctx = soft();
    let scq = ctx.create_cq(64).unwrap();
    let rcq = ctx.create_cq(64).unwrap();
    let a = ctx.create_qp(&QpInit::new(QpKind::Udp, &scq)).unwrap();
    let b = ctx.create_qp(&QpInit::new(QpKind::Udp, &rcq)).unwrap();
    a.bind(lo(0)).unwrap();
    let to = lo(b.bind(lo(0)).unwrap().port());
    let buf = ctx.alloc(64).unwrap();
    for round in 0..20u64 {
        b.post_recv(2 * round, &[buf.sge_all()]).unwrap();
        b.post_recv(2 * round + 1, &[buf.sge_all()]).unwrap();
        // A wait that missed its wake-up still polls when its own time runs out, so the
        // waits are given much longer than the test waits for them.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            for _ in 0..2 {
                let tx = tx.clone();
                let rcq = &rcq;
                s.spawn(move || tx.send(rcq.wait_one(Some(6 * T)).unwrap()));
            }
            std::thread::sleep(Duration::from_millis(5));
            a.post_send(&SendWr::inline(1, b"one").to(to)).unwrap();
            std::thread::sleep(Duration::from_millis(5));
            a.post_send(&SendWr::inline(2, b"two").to(to)).unwrap();
            for _ in 0..2 {
                let c = rx.recv_timeout(T).unwrap_or_else(|_| {
                    panic!("round {round}: a waiter slept through a completion")
                });
                assert!(c.is_some_and(|c| c.is_ok()), "round {round}: {c:?}");
            }
        });
        while scq.poll_one().is_some() {}
    }
}

/// The timer column of the kernel's TCP socket from local port `port` to `peer` in
/// /proc/net/tcp6: 2 while its keepalive timer runs, 0 for an idle connection without one.
fn tcp6_timer(port: u16, peer: u16) -> u8 {
    let table = std::fs::read_to_string("/proc/net/tcp6").unwrap();
    let want = (format!(":{port:04X}"), format!(":{peer:04X}"));
    let line = table
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.len() > 5 && f[1].ends_with(&want.0) && f[2].ends_with(&want.1))
        .expect("the QP's socket in /proc/net/tcp6");
    u8::from_str_radix(&line[5][..2], 16).unwrap()
}

/// Keepalive on the soft provider is the kernel socket's: set on a connected QP its timer
/// runs, and off it stops; it is refused on a UDP QP and out of its bounds.
#[test]
fn keepalive_is_the_sockets_on_the_soft_provider() {
    use qpip::Keepalive;
    let ctx = soft();
    let cq = ctx.create_cq(16).unwrap();
    let (qp, s, addr) = tcp_qp_to_socket(&ctx, &cq, Framing::Stream);
    let port = s.peer_addr().unwrap().port();
    assert_eq!(tcp6_timer(port, addr.port()), 0, "no keepalive by default");
    let k = |idle, interval, probes| Keepalive {
        idle: Duration::from_secs(idle),
        interval: Duration::from_secs(interval),
        probes,
    };
    qp.set_keepalive(Some(k(60, 5, 3))).unwrap();
    assert_eq!(tcp6_timer(port, addr.port()), 2, "the keepalive timer runs");
    qp.set_keepalive(None).unwrap();
    assert_eq!(
        tcp6_timer(port, addr.port()),
        0,
        "and stops when turned off"
    );

    let bad = [
        k(0, 5, 3),
        k(60, 0, 3),
        k(60, 5, 0),
        k(u64::from(Keepalive::MAX_SECS) + 1, 5, 3),
        k(60, 5, Keepalive::MAX_PROBES + 1),
        Keepalive {
            idle: Duration::from_millis(1500),
            ..k(60, 5, 3)
        },
    ];
    for b in bad {
        let e = qp.set_keepalive(Some(b)).unwrap_err();
        assert_eq!(error_name(&e), "InvalidArgument", "{b:?}: {e}");
    }
    let udp = ctx.create_qp(&QpInit::new(QpKind::Udp, &cq)).unwrap();
    assert!(matches!(
        udp.set_keepalive(Some(k(60, 5, 3))),
        Err(Error::WrongQpKind { .. })
    ));
}

/// The soft provider is dual-stack, as the device: IPv4 peers are IPv4-mapped addresses
/// (what `qpip::resolve_addr` gives for `127.0.0.1`), over UDP and TCP, with plain IPv4
/// sockets on the other end.
#[test]
fn ipv4_peers_are_mapped_addresses() {
    let ctx = soft();
    let cq = ctx.create_cq(16).unwrap();
    // UDP: a datagram to a plain IPv4 socket, and its answer, from a mapped source.
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(T)).unwrap();
    let to = qpip::resolve_addr("127.0.0.1", sock.local_addr().unwrap().port()).unwrap();
    let qp = ctx.create_qp(&QpInit::new(QpKind::Udp, &cq)).unwrap();
    let me = qp
        .bind(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 0, 0, 0))
        .unwrap();
    let mut buf = ctx.alloc(4096).unwrap();
    qp.post_recv(1, &[buf.sge(0, 2048)]).unwrap();
    buf[2048..2053].copy_from_slice(b"to v4");
    qp.post_send(&SendWr::new(2, &[buf.sge(2048, 5)]).to(to))
        .unwrap();
    let mut got = [0u8; 16];
    let (n, from) = sock.recv_from(&mut got).unwrap();
    assert_eq!((&got[..n], from.port()), (&b"to v4"[..], me.port()));
    sock.send_to(b"from v4", from).unwrap();
    let mut seen = Vec::new();
    while seen.len() < 2 {
        seen.push(next(&cq, "UDP over IPv4"));
    }
    let r = seen.iter().find(|c| c.wr_id == 1).expect("the receive");
    assert_eq!(r.byte_len, 7);
    assert_eq!(r.src, Some(to));
    // TCP: a QP connects to a plain IPv4 listener.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let peer = qpip::resolve_addr("127.0.0.1", l.local_addr().unwrap().port()).unwrap();
    let tcp = tcp_qp(&ctx, &cq, Framing::Stream);
    assert_eq!(tcp.connect_wait(peer, T).unwrap(), peer);
    let (_s, from) = l.accept().unwrap();
    assert!(from.ip().is_loopback());
}
