//! `qpip-verbs-test`: the verbs library (`qpip`) on a device, call by call: UDP and TCP
//! between QPs over the device's own loopback (`::1`), every error path the API reports,
//! many QPs on one CQ, CQ overflow, blocking waits and their wake-ups, epoll on CQ and
//! context descriptors, and the async adapter (tokio).
//!
//! `qpip-verbs-test [--device PATH | --soft]` (default `/dev/qpip0`). Reports
//! `@check.NAME=ok` or `@check.NAME=FAIL: why` lines and `@key=value` facts (the VM test
//! `ci/tests/verbs.rs` asserts on them); exits 1 when a check failed.

mod aio;
mod messages;
mod post_cost;

#[global_allocator]
static ALLOC: post_cost::Counting = post_cost::Counting;

use std::net::{Ipv6Addr, SocketAddrV6};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use qpip::{
    Completion, Context, Cq, Detail, Error, EventKind, Framing, Opcode, ProviderKind, Qp, QpInit,
    QpKind, SendWr, Status,
};

/// Longest any single wait may take (a TCG guest on a busy host is slow).
const T: Duration = Duration::from_secs(20);

type R = Result<(), String>;

fn lo(port: u16) -> SocketAddrV6 {
    SocketAddrV6::new(Ipv6Addr::LOCALHOST, port, 0, 0)
}

fn ensure(cond: bool, msg: impl FnOnce() -> String) -> R {
    if cond {
        Ok(())
    } else {
        Err(msg())
    }
}

fn e<T>(r: qpip::Result<T>, what: &str) -> Result<T, String> {
    r.map_err(|err| format!("{what}: {err}"))
}

fn next(cq: &Cq, what: &str) -> Result<Completion, String> {
    e(cq.wait_one(Some(T)), what)?.ok_or_else(|| format!("no completion for {what} within {T:?}"))
}

/// `n` completions from `cq`, in the order they came.
fn take(cq: &Cq, n: usize, what: &str) -> Result<Vec<Completion>, String> {
    let mut v = Vec::new();
    while v.len() < n {
        v.push(next(cq, what)?);
    }
    Ok(v)
}

fn udp_pair(ctx: &Context, cq: &Cq) -> Result<(Qp, Qp, SocketAddrV6, SocketAddrV6), String> {
    let a = e(
        ctx.create_qp(&QpInit::new(QpKind::Udp, cq)),
        "create UDP QP a",
    )?;
    let b = e(
        ctx.create_qp(&QpInit::new(QpKind::Udp, cq)),
        "create UDP QP b",
    )?;
    let pa = e(a.bind(lo(0)), "bind a")?;
    let pb = e(b.bind(lo(0)), "bind b")?;
    Ok((a, b, lo(pa.port()), lo(pb.port())))
}

fn tcp_pair(ctx: &Context, cq: &Cq, framing: Framing, port: u16) -> Result<(Qp, Qp), String> {
    let server = e(
        ctx.create_qp(&QpInit::new(QpKind::Tcp(framing), cq)),
        "create server QP",
    )?;
    let client = e(
        ctx.create_qp(&QpInit::new(QpKind::Tcp(framing), cq)),
        "create client QP",
    )?;
    let l = e(ctx.listen(lo(port), 4), "listen")?;
    e(l.accept(&server, 0xacce), "accept")?;
    e(client.connect(lo(port), 0xc0), "connect")?;
    let c = e(
        ctx.wait_event_for(client.id(), EventKind::Connect, Some(T)),
        "connect event",
    )?
    .ok_or("no connect event")?;
    ensure(c.status == 0 && c.user_data == 0xc0, || {
        format!("connect event {c:?}")
    })?;
    let a = e(
        ctx.wait_event_for(server.id(), EventKind::Accept, Some(T)),
        "accept event",
    )?
    .ok_or("no accept event")?;
    ensure(
        a.status == 0 && a.user_data == 0xacce && a.peer.is_some(),
        || format!("accept event {a:?}"),
    )?;
    Ok((server, client))
}

// ---- the checks --------------------------------------------------------------------------------

fn udp_scatter_gather(ctx: &Context) -> R {
    let cq = e(ctx.create_cq(16), "create CQ")?;
    let (a, b, pa, pb) = udp_pair(ctx, &cq)?;
    let mut src = e(ctx.alloc(64), "register")?;
    for (i, x) in src.iter_mut().enumerate() {
        *x = i as u8;
    }
    let dst = e(ctx.alloc(64), "register")?;
    e(
        b.post_recv(77, &[dst.sge(40, 10), dst.sge(0, 20)]),
        "post_recv",
    )?;
    let sges = [src.sge(0, 5), src.sge(30, 7), src.sge(60, 3)];
    e(a.post_send(&SendWr::new(55, &sges).to(pb)), "post_send")?;
    let got = take(&cq, 2, "gathered datagram")?;
    let s = got
        .iter()
        .find(|c| c.opcode == Opcode::Send)
        .ok_or("no send completion")?;
    let r = got
        .iter()
        .find(|c| c.opcode == Opcode::Recv)
        .ok_or("no receive completion")?;
    ensure(
        s.wr_id == 55 && s.is_ok() && s.byte_len == 15 && s.qp == a.id(),
        || format!("{s:?}"),
    )?;
    ensure(
        r.wr_id == 77 && r.is_ok() && r.byte_len == 15 && r.qp == b.id(),
        || format!("{r:?}"),
    )?;
    ensure(r.src.map(|s| s.port()) == Some(pa.port()), || {
        format!("source {:?}, sent from {pa}", r.src)
    })?;
    let want: Vec<u8> = (0..5).chain(30..37).chain(60..63).collect();
    ensure(dst[40..50] == want[..10] && dst[0..5] == want[10..], || {
        format!("scattered bytes {:?}", &dst[..])
    })?;
    // Inline, and a datagram to each of many receive buffers in turn (tags in order).
    for i in 0..8u64 {
        e(b.post_recv(200 + i, &[dst.sge(0, 64)]), "post_recv")?;
    }
    for i in 0..8u64 {
        let msg = [i as u8; 40];
        e(
            a.post_send(&SendWr::inline(100 + i, &msg).to(pb)),
            "inline post_send",
        )?;
    }
    let got = take(&cq, 16, "inline datagrams")?;
    let sends: Vec<u64> = got
        .iter()
        .filter(|c| c.opcode == Opcode::Send)
        .map(|c| c.wr_id)
        .collect();
    let recvs: Vec<u64> = got
        .iter()
        .filter(|c| c.opcode == Opcode::Recv)
        .map(|c| c.wr_id)
        .collect();
    ensure(sends == (100..108).collect::<Vec<_>>(), || {
        format!("send tags {sends:?}")
    })?;
    ensure(recvs == (200..208).collect::<Vec<_>>(), || {
        format!("receive tags {recvs:?}")
    })?;
    ensure(got.iter().all(|c| c.is_ok() && c.byte_len == 40), || {
        format!("{got:?}")
    })
}

fn udp_errors(ctx: &Context) -> R {
    let cq = e(ctx.create_cq(16), "create CQ")?;
    let (a, b, _, pb) = udp_pair(ctx, &cq)?;
    let unbound = e(ctx.create_qp(&QpInit::new(QpKind::Udp, &cq)), "create QP")?;
    e(
        a.post_send(&SendWr::inline(1, b"x").imm(5).to(pb)),
        "post imm",
    )?;
    let c = next(&cq, "imm on UDP")?;
    ensure(c.wr_id == 1 && c.status == Status::BadWqe, || {
        format!("imm on UDP: {c:?}")
    })?;
    e(
        a.post_send(&SendWr::inline(2, b"x").to(lo(0))),
        "post port 0",
    )?;
    let c = next(&cq, "port 0")?;
    ensure(
        c.status == Status::BadDest && c.detail == Detail::BadAddress,
        || format!("port 0: {c:?}"),
    )?;
    e(
        unbound.post_send(&SendWr::inline(3, b"x").to(pb)),
        "post unbound",
    )?;
    let c = next(&cq, "unbound")?;
    ensure(
        c.status == Status::BadDest && c.detail == Detail::NotBound,
        || format!("unbound: {c:?}"),
    )?;
    let small = e(ctx.alloc(4), "register")?;
    e(b.post_recv(4, &[small.sge_all()]), "post_recv")?;
    e(a.post_send(&SendWr::inline(5, b"too long").to(pb)), "post")?;
    let mut got = take(&cq, 2, "datagram too long")?;
    got.sort_by_key(|c| c.wr_id);
    ensure(
        got[0].status == Status::LocalLength && got[0].byte_len == 8,
        || format!("{:?}", got[0]),
    )?;
    ensure(small[..] == [0, 0, 0, 0], || {
        "a datagram too long was placed".into()
    })?;
    ensure(got[1].is_ok(), || format!("{:?}", got[1]))
}

fn post_errors(ctx: &Context) -> R {
    let other = e(Context::open_soft(), "a second context")?;
    let cq = e(ctx.create_cq(4), "create CQ")?;
    let qp = e(
        ctx.create_qp(&QpInit::new(QpKind::Udp, &cq).depth(2, 2)),
        "create QP",
    )?;
    e(qp.bind(lo(0)), "bind")?;
    let buf = e(ctx.alloc(16), "register")?;
    let foreign = e(other.alloc(16), "register elsewhere")?;
    let r = qp.post_recv(1, &[buf.sge(10, 7)]);
    ensure(matches!(r, Err(Error::OutOfBounds { .. })), || {
        format!("out of bounds: {r:?}")
    })?;
    let six = [buf.sge(0, 1); 6];
    let r = qp.post_recv(1, &six);
    ensure(matches!(r, Err(Error::TooManySges { .. })), || {
        format!("6 SGEs: {r:?}")
    })?;
    let r = qp.post_send(&SendWr::inline(1, &[0; 81]).to(lo(9)));
    ensure(matches!(r, Err(Error::InlineTooLong { .. })), || {
        format!("81 inline: {r:?}")
    })?;
    let r = qp.post_send(&SendWr::inline(1, b"x"));
    ensure(matches!(r, Err(Error::Destination(_))), || {
        format!("no destination: {r:?}")
    })?;
    let r = qp.post_recv(1, &[foreign.sge_all()]);
    ensure(matches!(r, Err(Error::ForeignObject(_))), || {
        format!("foreign region: {r:?}")
    })?;
    let r = qp.connect(lo(9), 0);
    ensure(matches!(r, Err(Error::WrongQpKind { .. })), || {
        format!("connect UDP: {r:?}")
    })?;
    let r = ctx.create_cq(3);
    ensure(matches!(r, Err(Error::InvalidArgument(_))), || {
        format!("CQ depth 3: {r:?}")
    })?;
    let r = qp.bind(lo(0));
    ensure(
        matches!(&r, Err(err) if err.raw_os_error() == Some(libc::EINVAL)),
        || format!("bind twice: {r:?}"),
    )?;
    e(qp.post_recv(1, &[buf.sge(0, 8)]), "post_recv 1")?;
    e(qp.post_recv(2, &[buf.sge(8, 8)]), "post_recv 2")?;
    let r = qp.post_recv(3, &[buf.sge(0, 8)]);
    ensure(matches!(r, Err(Error::QueueFull { depth: 2, .. })), || {
        format!("third receive: {r:?}")
    })?;
    drop(qp);
    let got = take(&cq, 2, "flush on destroy")?;
    ensure(
        got[0].wr_id == 1 && got[1].wr_id == 2 && got.iter().all(|c| c.status == Status::Flushed),
        || format!("flush: {got:?}"),
    )
}

fn tcp_messages(ctx: &Context, port: u16) -> R {
    let cq = e(ctx.create_cq(64), "create CQ")?;
    let (server, client) = tcp_pair(ctx, &cq, Framing::Message, port)?;
    let rbuf = e(ctx.alloc(8 * messages::RECV_SIZE), "register")?;
    for i in 0..8 {
        let sge = [rbuf.sge(i * messages::RECV_SIZE, messages::RECV_SIZE)];
        e(server.post_recv(100 + i as u64, &sge), "post_recv")?;
    }
    let mut sbuf = e(ctx.alloc(messages::SEND_SIZE), "register")?;
    messages::fill(&mut sbuf);
    messages::post(&client, &sbuf).map_err(|(n, err)| format!("send {n}: {err}"))?;
    let got = take(&cq, 12, "messages")?;
    let sends: Vec<_> = got.iter().filter(|c| c.opcode == Opcode::Send).collect();
    let recvs: Vec<_> = got
        .iter()
        .filter(|c| c.opcode == Opcode::Recv)
        .map(|c| (c.wr_id, c.status, c.byte_len, c.imm))
        .collect();
    ensure(
        sends.iter().map(|c| c.wr_id).collect::<Vec<_>>() == [1, 2, 3, 4, 5, 6]
            && sends.iter().all(|c| c.is_ok()),
        || format!("sends {sends:?}"),
    )?;
    ensure(recvs == messages::RECEIVES, || {
        format!("receives {recvs:?}")
    })?;
    let joined = messages::gathered(&sbuf);
    ensure(rbuf[2 * 4096..2 * 4096 + 3000] == joined[..], || {
        "message 3 arrived changed".into()
    })?;
    ensure(&rbuf[3 * 4096..3 * 4096 + 6] == b"inline", || {
        "message 4 arrived changed".into()
    })?;
    // Close: the peer's receives end with 0 bytes, after the last message.
    e(client.post_send(&SendWr::inline(7, b"bye")), "send 7")?;
    e(client.close(0xc105e), "close")?;
    let ev = e(
        ctx.wait_event_for(client.id(), EventKind::Close, Some(T)),
        "close event",
    )?
    .ok_or("no close event")?;
    ensure(ev.status == 0 && ev.user_data == 0xc105e, || {
        format!("close event {ev:?}")
    })?;
    let got = take(&cq, 3, "close")?;
    let r: Vec<_> = got
        .iter()
        .filter(|c| c.opcode == Opcode::Recv)
        .map(|c| (c.wr_id, c.byte_len))
        .collect();
    ensure(r == [(106, 3), (107, 0)], || {
        format!("receives around the close: {got:?}")
    })?;
    let pc = e(
        ctx.wait_event_for(server.id(), EventKind::PeerClosed, Some(T)),
        "peer closed",
    )?;
    ensure(pc.is_some(), || "no peer-closed event".into())
}

fn tcp_stream(ctx: &Context, port: u16) -> R {
    let cq = e(ctx.create_cq(64), "create CQ")?;
    let (server, client) = tcp_pair(ctx, &cq, Framing::Stream, port)?;
    let total = 256 * 1024;
    let chunk = 16 * 1024;
    let slots = 8;
    let mut sbuf = e(ctx.alloc(total), "register")?;
    for (i, x) in sbuf.iter_mut().enumerate() {
        *x = (i * 7 % 253) as u8;
    }
    // Receives of 16 KiB in a ring of slots; each completes full or at a push with what it
    // holds, so the stream is what the completions held, in their order.
    let rbuf = e(ctx.alloc(slots * chunk), "register")?;
    for s in 0..slots {
        e(
            server.post_recv(s as u64, &[rbuf.sge(s * chunk, chunk)]),
            "post_recv",
        )?;
    }
    for i in 0..(total / chunk) {
        let sge = [sbuf.sge(i * chunk, chunk)];
        e(
            client.post_send(&SendWr::new(1_000_000 + i as u64, &sge)),
            "post_send",
        )?;
    }
    let mut stream = Vec::with_capacity(total);
    let mut sends = 0;
    while stream.len() < total || sends < total / chunk {
        let c = next(&cq, "stream")?;
        ensure(c.is_ok(), || format!("stream completion {c:?}"))?;
        if c.opcode == Opcode::Send {
            ensure(c.wr_id == 1_000_000 + sends as u64, || {
                format!("send out of order: {c:?}")
            })?;
            sends += 1;
            continue;
        }
        let s = c.wr_id as usize;
        stream.extend_from_slice(&rbuf[s * chunk..s * chunk + c.byte_len as usize]);
        e(
            server.post_recv(s as u64, &[rbuf.sge(s * chunk, chunk)]),
            "post_recv",
        )?;
    }
    ensure(stream.len() == total && stream[..] == sbuf[..], || {
        format!(
            "the stream arrived changed ({} of {total} bytes)",
            stream.len()
        )
    })?;
    println!("@tcp_stream.bytes={total}");
    Ok(())
}

/// Receives posted on idle QPs, and while their ACCEPT or CONNECT is pending, become the
/// connection's receive space: the peer's first bytes complete them in order (none is
/// flushed when the connection comes up). Both framings; each side sends two words, one at
/// a time, so in stream framing each is its own pushed segment.
fn tcp_receives_before_connect(ctx: &Context, port: u16) -> R {
    for (i, framing) in [Framing::Message, Framing::Stream].into_iter().enumerate() {
        let port = port + i as u16;
        let cq = e(ctx.create_cq(16), "create CQ")?;
        let server = e(
            ctx.create_qp(&QpInit::new(QpKind::Tcp(framing), &cq)),
            "create server QP",
        )?;
        let client = e(
            ctx.create_qp(&QpInit::new(QpKind::Tcp(framing), &cq)),
            "create client QP",
        )?;
        let sbuf = e(ctx.alloc(2 * 4096), "register")?;
        let cbuf = e(ctx.alloc(2 * 4096), "register")?;
        e(
            server.post_recv(1, &[sbuf.sge(0, 4096)]),
            "post_recv idle server",
        )?;
        e(
            client.post_recv(3, &[cbuf.sge(0, 4096)]),
            "post_recv idle client",
        )?;
        let l = e(ctx.listen(lo(port), 1), "listen")?;
        e(l.accept(&server, 0xacce), "accept")?;
        e(
            server.post_recv(2, &[sbuf.sge(4096, 4096)]),
            "post_recv accepting",
        )?;
        e(client.connect(lo(port), 0xc0), "connect")?;
        e(
            client.post_recv(4, &[cbuf.sge(4096, 4096)]),
            "post_recv connecting",
        )?;
        for (qp, kind) in [(&client, EventKind::Connect), (&server, EventKind::Accept)] {
            let ev = e(ctx.wait_event_for(qp.id(), kind, Some(T)), "event")?
                .ok_or_else(|| format!("{framing:?}: no {kind:?} event"))?;
            ensure(ev.status == 0, || {
                format!("{framing:?}: {kind:?} event {ev:?}")
            })?;
        }
        let exchange =
            |from: &Qp, to_buf: &qpip::MemoryRegion, words: [&[u8]; 2], ids: [u64; 2]| {
                for (k, w) in words.iter().enumerate() {
                    e(
                        from.post_send(&SendWr::inline(10 + k as u64, w)),
                        "post_send",
                    )?;
                    let mut got_send = false;
                    let mut got_recv = None;
                    while !got_send || got_recv.is_none() {
                        let c = next(&cq, "exchange")?;
                        ensure(c.is_ok(), || format!("{framing:?}: completion {c:?}"))?;
                        match c.opcode {
                            Opcode::Send => got_send = true,
                            _ => got_recv = Some(c),
                        }
                    }
                    let c = got_recv.expect("loop ends with it");
                    ensure(c.wr_id == ids[k] && c.byte_len as usize == w.len(), || {
                        format!(
                            "{framing:?}: word {k} completed {c:?}, wanted WR {}",
                            ids[k]
                        )
                    })?;
                    let at = k * 4096;
                    ensure(&to_buf[at..at + w.len()] == *w, || {
                        format!("{framing:?}: word {k} arrived changed")
                    })?;
                }
                Ok::<(), String>(())
            };
        exchange(&client, &sbuf, [b"first", b"second!"], [1, 2])?;
        exchange(&server, &cbuf, [b"third", b"fourth!"], [3, 4])?;
    }
    Ok(())
}

fn tcp_refused_and_cancelled(ctx: &Context, port: u16) -> R {
    let cq = e(ctx.create_cq(8), "create CQ")?;
    let qp = e(
        ctx.create_qp(&QpInit::new(QpKind::Tcp(Framing::Message), &cq)),
        "create QP",
    )?;
    let buf = e(ctx.alloc(16), "register")?;
    e(qp.post_recv(1, &[buf.sge_all()]), "post_recv")?;
    let r = qp.connect_wait(lo(port), T);
    ensure(
        matches!(&r, Err(err) if err.raw_os_error() == Some(libc::ECONNREFUSED)),
        || format!("connect to a closed port: {r:?}"),
    )?;
    let c = next(&cq, "flush after refusal")?;
    ensure(c.wr_id == 1 && c.status == Status::Flushed, || {
        format!("after refusal: {c:?}")
    })?;
    let idle = e(
        ctx.create_qp(&QpInit::new(QpKind::Tcp(Framing::Stream), &cq)),
        "create QP",
    )?;
    let l = e(ctx.listen(lo(port), 1), "listen")?;
    e(l.accept(&idle, 42), "accept")?;
    drop(l);
    let ev = e(
        ctx.wait_event_for(idle.id(), EventKind::Accept, Some(T)),
        "accept event",
    )?
    .ok_or("no accept event")?;
    ensure(ev.status == -libc::ECANCELED && ev.user_data == 42, || {
        format!("cancelled accept {ev:?}")
    })
}

fn many_qps_one_cq(ctx: &Context) -> R {
    let n = 16usize;
    let cq = e(ctx.create_cq(64), "create CQ")?;
    let mut qps = Vec::new();
    let mut addrs = Vec::new();
    for _ in 0..n {
        let q = e(
            ctx.create_qp(&QpInit::new(QpKind::Udp, &cq).depth(4, 4)),
            "create QP",
        )?;
        addrs.push(lo(e(q.bind(lo(0)), "bind")?.port()));
        qps.push(q);
    }
    let buf = e(ctx.alloc(n * 64), "register")?;
    for (i, q) in qps.iter().enumerate() {
        e(
            q.post_recv(1000 + i as u64, &[buf.sge(i * 64, 64)]),
            "post_recv",
        )?;
    }
    for (i, q) in qps.iter().enumerate() {
        let msg = format!("from {i}");
        e(
            q.post_send(&SendWr::inline(i as u64, msg.as_bytes()).to(addrs[(i + 1) % n])),
            "post_send",
        )?;
    }
    let mut all = Vec::new();
    let mut out = [Completion::default(); 5];
    while all.len() < 2 * n {
        let k = e(cq.wait(&mut out, Some(T)), "wait")?;
        ensure(k > 0, || format!("{} of {} completions", all.len(), 2 * n))?;
        all.extend_from_slice(&out[..k]);
    }
    for (i, q) in qps.iter().enumerate() {
        let r = all
            .iter()
            .find(|c| c.qp == q.id() && c.opcode == Opcode::Recv)
            .ok_or_else(|| format!("QP {i} received nothing"))?;
        let from = (i + n - 1) % n;
        let text = format!("from {from}");
        ensure(
            r.is_ok()
                && r.src.map(|s| s.port()) == Some(addrs[from].port())
                && buf[i * 64..i * 64 + text.len()] == *text.as_bytes(),
            || format!("QP {i}: {r:?}"),
        )?;
    }
    println!("@many_qps.qps={n}");
    Ok(())
}

/// A CQ smaller than the work posted to it: the device stops completing while it is full
/// and resumes as it is polled; nothing is lost and the order holds.
fn cq_overflow(ctx: &Context) -> R {
    let full_before = counter(ctx, qpip_abi::admin::STAT_CQ_FULL)?;
    let cq = e(ctx.create_cq(4), "create CQ")?;
    let rcq = e(ctx.create_cq(4), "create CQ")?;
    let a = e(
        ctx.create_qp(&QpInit::new(QpKind::Udp, &cq).recv_cq(&rcq).depth(16, 4)),
        "create QP",
    )?;
    let sink = e(ctx.create_qp(&QpInit::new(QpKind::Udp, &rcq)), "create QP")?;
    e(a.bind(lo(0)), "bind")?;
    let to = lo(e(sink.bind(lo(0)), "bind")?.port());
    for i in 0..12u64 {
        e(
            a.post_send(&SendWr::inline(i, b"overflow").to(to)),
            "post_send",
        )?;
    }
    // Give the device time to fill the CQ and stall.
    std::thread::sleep(Duration::from_millis(300));
    let got = take(&cq, 12, "completions beyond the CQ's depth")?;
    let ids: Vec<u64> = got.iter().map(|c| c.wr_id).collect();
    ensure(
        ids == (0..12).collect::<Vec<_>>() && got.iter().all(|c| c.is_ok()),
        || format!("completions {got:?}"),
    )?;
    let full_after = counter(ctx, qpip_abi::admin::STAT_CQ_FULL)?;
    if let (Some(b), Some(a)) = (full_before, full_after) {
        println!("@cq_overflow.cq_full={}", a - b);
        ensure(a > b, || "the device never found the CQ full".into())?;
    }
    Ok(())
}

fn counter(ctx: &Context, i: u32) -> Result<Option<u64>, String> {
    Ok(e(ctx.device_counters(), "QUERY_STATS")?.and_then(|c| c.get(i as usize).copied()))
}

/// Blocking waits: a timeout on an empty CQ, then a wait woken by a completion that
/// arrives while it sleeps (posted by another thread).
fn wait_wakeups(ctx: &Context) -> R {
    let cq = e(ctx.create_cq(8), "create CQ")?;
    let t0 = Instant::now();
    let r = e(cq.wait_one(Some(Duration::from_millis(200))), "wait")?;
    ensure(r.is_none(), || format!("completion from nowhere: {r:?}"))?;
    ensure(t0.elapsed() >= Duration::from_millis(200), || {
        "returned before the timeout".into()
    })?;
    let scq = e(ctx.create_cq(8), "create CQ")?;
    let a = std::sync::Arc::new(e(
        ctx.create_qp(&QpInit::new(QpKind::Udp, &scq)),
        "create QP",
    )?);
    let b = e(ctx.create_qp(&QpInit::new(QpKind::Udp, &cq)), "create QP")?;
    e(a.bind(lo(0)), "bind")?;
    let to = lo(e(b.bind(lo(0)), "bind")?.port());
    let buf = e(ctx.alloc(64), "register")?;
    let mut wakes = 0;
    for round in 0..5u64 {
        e(b.post_recv(round, &[buf.sge_all()]), "post_recv")?;
        let sender = std::thread::spawn({
            let a = a.clone();
            move || {
                std::thread::sleep(Duration::from_millis(100));
                a.post_send(&SendWr::inline(round, b"wake up").to(to))
            }
        });
        let c = next(&cq, "wake-up")?;
        sender
            .join()
            .map_err(|_| "sender panicked")?
            .map_err(|e| e.to_string())?;
        ensure(c.wr_id == round && c.is_ok() && c.byte_len == 7, || {
            format!("{c:?}")
        })?;
        next(&scq, "send")?;
        wakes += 1;
    }
    println!("@wait.wakeups={wakes}");
    println!("@wait.kicks={}", ctx.kicks());
    Ok(())
}

/// Which posts kick a sleeping device (`qpip_abi::doorbell`): a UDP QP's receives never do
/// (a datagram wakes the device before it needs one), its sends and a TCP QP's receives do.
/// An attempt lets the device fall asleep, posts a receive on UDP QP `b`, then a send from
/// `a` to `b`: the send kicking proves the device slept through the receive post, which
/// must not have kicked, and the datagram must land in that receive. Then a receive on a
/// connected TCP QP after the device fell asleep must kick. Attempts are repeated (a TCP
/// timer may have the device awake at the wrong moment); kicks are counted, not timed.
fn quiet_receives(ctx: &Context, port: u16) -> R {
    if ctx.provider() != ProviderKind::Device {
        return Ok(()); // the software provider has no doorbells
    }
    let scq = e(ctx.create_cq(16), "create CQ")?;
    let rcq = e(ctx.create_cq(16), "create CQ")?;
    let a = e(ctx.create_qp(&QpInit::new(QpKind::Udp, &scq)), "create QP")?;
    let b = e(
        ctx.create_qp(&QpInit::new(QpKind::Udp, &scq).recv_cq(&rcq)),
        "create QP",
    )?;
    e(a.bind(lo(0)), "bind")?;
    let to = lo(e(b.bind(lo(0)), "bind")?.port());
    let buf = e(ctx.alloc(64), "register")?;
    let asleep = Duration::from_millis(50);
    let mut proven = 0;
    for i in 0..5u64 {
        std::thread::sleep(asleep);
        let k0 = ctx.kicks();
        e(b.post_recv(i, &[buf.sge_all()]), "post_recv")?;
        let k1 = ctx.kicks();
        e(
            a.post_send(&SendWr::inline(i, b"quiet receive").to(to)),
            "post_send",
        )?;
        let k2 = ctx.kicks();
        ensure(k1 == k0, || {
            format!("a UDP receive post kicked the device (attempt {i})")
        })?;
        let c = next(&rcq, "receive")?;
        ensure(c.wr_id == i && c.is_ok() && c.byte_len == 13, || {
            format!("receive {c:?}")
        })?;
        next(&scq, "send")?;
        proven += (k2 == k1 + 1) as u32;
    }
    println!("@quiet_receives.udp_proven={proven}");
    ensure(proven > 0, || {
        "the device never slept before a send: nothing proven".into()
    })?;
    let cq = e(ctx.create_cq(16), "create CQ")?;
    let (server, _client) = tcp_pair(ctx, &cq, Framing::Message, port)?;
    let mut tcp_kicked = 0;
    for i in 0..5u64 {
        std::thread::sleep(asleep);
        let k0 = ctx.kicks();
        e(server.post_recv(i, &[buf.sge_all()]), "post_recv")?;
        tcp_kicked += (ctx.kicks() == k0 + 1) as u32;
    }
    println!("@quiet_receives.tcp_kicked={tcp_kicked}");
    ensure(tcp_kicked > 0, || {
        "a TCP receive post never kicked the sleeping device".into()
    })
}

/// epoll over two CQ descriptors and the context's event descriptor.
fn epoll(ctx: &Context, port: u16) -> R {
    let cq1 = e(ctx.create_cq(8), "create CQ")?;
    let cq2 = e(ctx.create_cq(8), "create CQ")?;
    let (a, b, _, pb) = udp_pair(ctx, &cq1)?;
    let c = e(ctx.create_qp(&QpInit::new(QpKind::Udp, &cq2)), "create QP")?;
    let pc = lo(e(c.bind(lo(0)), "bind")?.port());
    let buf = e(ctx.alloc(64), "register")?;
    // SAFETY: plain system calls on descriptors this program owns.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    ensure(ep >= 0, || "epoll_create1 failed".into())?;
    for (fd, tag) in [
        (cq1.as_raw_fd(), 1u64),
        (cq2.as_raw_fd(), 2),
        (ctx.events_fd().as_raw_fd(), 3),
    ] {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: tag,
        };
        // SAFETY: as above.
        let r = unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev) };
        ensure(r == 0, || format!("epoll_ctl of {tag}"))?;
    }
    let wait = |ms: i32| -> Vec<u64> {
        let mut out = [libc::epoll_event { events: 0, u64: 0 }; 4];
        // SAFETY: as above.
        let n = unsafe { libc::epoll_wait(ep, out.as_mut_ptr(), 4, ms) };
        out[..n.max(0) as usize].iter().map(|e| e.u64).collect()
    };
    let result = (|| -> R {
        // Events left by earlier checks (resets of their connections) go first.
        while e(ctx.poll_event(), "poll_event")?.is_some() {}
        // On the device, CQs share interrupt vectors (with other processes' CQs too), so a
        // descriptor may wake spuriously: "no wake-up" is checked where it is promised.
        let exact = ctx.provider() == ProviderKind::Soft;
        ensure(!exact || wait(0).is_empty(), || {
            "readable before anything happened".into()
        })?;
        e(cq1.arm(), "arm")?;
        e(cq2.arm(), "arm")?;
        e(c.post_recv(9, &[buf.sge_all()]), "post_recv")?;
        e(a.post_send(&SendWr::inline(1, b"to c").to(pc)), "post_send")?;
        // cq1 gets the send completion, cq2 the receive; each is polled only after its
        // descriptor woke. A wake-up that finds its CQ empty (a shared vector, possibly
        // another process's CQ) re-arms, as the usual loop does.
        let mut got: [Option<u64>; 2] = [None, None];
        let mut woke = Vec::new();
        // Wake-ups that found their CQ empty and armed it again, by tag.
        let mut rearmed = Vec::new();
        let deadline = Instant::now() + T;
        while got.iter().any(Option::is_none) && Instant::now() < deadline {
            for tag in wait(1000) {
                woke.push(tag);
                let (cq, slot) = match tag {
                    1 => (&cq1, 0),
                    2 => (&cq2, 1),
                    _ => continue,
                };
                cq.ack();
                match cq.poll_one() {
                    Some(c) => got[slot] = Some(c.wr_id),
                    None => {
                        rearmed.push(tag);
                        e(cq.arm(), "re-arm")?
                    }
                }
            }
        }
        ensure(got == [Some(1), Some(9)], || {
            format!("completions {got:?} (send 1 on cq1, receive 9 on cq2) after wake-ups {woke:?}")
        })?;
        ensure(!exact || wait(0).is_empty(), || {
            "readable after ack with nothing armed".into()
        })?;
        // Not armed: a completion does not wake. Taken by polling alone: a waiting take
        // (`Cq::wait`) arms the CQ when its first polls find nothing, and may return a
        // completion that came just after, leaving the CQ armed or its descriptor readable.
        e(b.post_recv(3, &[buf.sge_all()]), "post_recv")?;
        e(a.post_send(&SendWr::inline(2, b"to b").to(pb)), "post_send")?;
        let deadline = Instant::now() + T;
        let mut taken = 0;
        while taken < 2 {
            ensure(Instant::now() < deadline, || {
                format!("{taken} of 2 unarmed completions within {T:?}")
            })?;
            match cq1.poll_one() {
                Some(_) => taken += 1,
                None => std::thread::sleep(Duration::from_millis(1)),
            }
        }
        ensure(!exact || !wait(300).contains(&1), || {
            format!(
                "woke without arming (wake-ups before: {woke:?}; armed again after an empty \
                 wake-up: {rearmed:?})"
            )
        })?;
        // A connection event makes the context descriptor readable.
        let qp = e(
            ctx.create_qp(&QpInit::new(QpKind::Tcp(Framing::Message), &cq2)),
            "create QP",
        )?;
        let l = e(ctx.listen(lo(port), 1), "listen")?;
        e(l.accept(&qp, 5), "accept")?;
        drop(l);
        let mut seen = Vec::new();
        let deadline = Instant::now() + T;
        while !seen.contains(&3) && Instant::now() < deadline {
            seen.extend(wait(1000));
        }
        ensure(seen.contains(&3), || {
            "no epoll wake-up for a connection event".into()
        })?;
        // Events of the QPs earlier checks destroyed (their peers' resets) may come first.
        let mut ev = e(ctx.poll_event(), "poll_event")?.ok_or("readable, but no event")?;
        while ev.qp != qp.id() {
            ev = e(ctx.poll_event(), "poll_event")?.ok_or("no event about the accepting QP")?;
        }
        ensure(
            ev.kind == EventKind::Accept && ev.status == -libc::ECANCELED,
            || format!("{ev:?}"),
        )
    })();
    // SAFETY: closing the epoll descriptor opened above.
    unsafe { libc::close(ep) };
    result
}

// ---- main ----------------------------------------------------------------------------------------

fn main() {
    let mut args = std::env::args().skip(1);
    let mut target: Option<PathBuf> = Some(PathBuf::from("/dev/qpip0"));
    while let Some(a) = args.next() {
        match a.as_str() {
            "--soft" => target = None,
            "--device" => target = args.next().map(PathBuf::from),
            _ => {
                eprintln!("usage: qpip-verbs-test [--device PATH | --soft]");
                std::process::exit(2);
            }
        }
    }
    let ctx = match &target {
        Some(p) => Context::open_device(p),
        None => Context::open_soft(),
    };
    let ctx = match ctx {
        Ok(c) => c,
        Err(err) => {
            println!("@check.open=FAIL: {err}");
            std::process::exit(1);
        }
    };
    println!("@check.open=ok");
    println!("@provider={:?}", ctx.provider());
    println!("@limits={:?}", ctx.limits());
    // TCP ports of the checks, apart so a slow teardown cannot collide.
    let base = 6000 + (std::process::id() % 1000) as u16 * 10;
    let mut failed = 0;
    let mut check = |name: &str, r: R| match r {
        Ok(()) => println!("@check.{name}=ok"),
        Err(why) => {
            failed += 1;
            println!("@check.{name}=FAIL: {why}");
        }
    };
    check("udp.scatter_gather", udp_scatter_gather(&ctx));
    check("udp.errors", udp_errors(&ctx));
    check("post.errors", post_errors(&ctx));
    check("tcp.messages", tcp_messages(&ctx, base));
    check("tcp.stream", tcp_stream(&ctx, base + 1));
    check(
        "tcp.receives_before_connect",
        tcp_receives_before_connect(&ctx, base + 5),
    );
    check(
        "tcp.refused_and_cancelled",
        tcp_refused_and_cancelled(&ctx, base + 2),
    );
    check("cq.many_qps", many_qps_one_cq(&ctx));
    check("cq.overflow", cq_overflow(&ctx));
    check("cq.wait_wakeups", wait_wakeups(&ctx));
    check("epoll", epoll(&ctx, base + 3));
    check("doorbell.quiet_receives", quiet_receives(&ctx, base + 6));
    check("post.cost", post_cost::post_cost(&ctx));
    aio::checks(&ctx, base + 4, &mut check);
    if ctx.provider() == ProviderKind::Device {
        let r = ctx.device_counters().map(|c| c.map(|c| c.len()));
        check("device.counters", r.map(|_| ()).map_err(|e| e.to_string()));
    }
    std::process::exit(if failed == 0 { 0 } else { 1 });
}
