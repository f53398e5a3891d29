//! The async adapter (`qpip::aio`) on the device: futures woken by the CQ's interrupt
//! (eventfd) and by the context's event descriptor, several tasks on one CQ and one context
//! on a multi-thread runtime, and waits cut short by timeouts racing with arrivals.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use qpip::{
    AsyncContext, AsyncCq, Completion, Context, EventKind, Framing, Opcode, Qp, QpInit, QpKind,
    SendWr,
};
use tokio::time::timeout;

use crate::{e, ensure, lo, R, T};

/// Runs the async checks; each reports like the others.
pub fn checks(ctx: &Context, port: u16, check: &mut dyn FnMut(&str, R)) {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => return check("aio.runtime", Err(format!("tokio runtime: {err}"))),
    };
    check("aio.tasks_share_a_cq", rt.block_on(tasks_share_a_cq(ctx)));
    check("aio.timed_out_waits", rt.block_on(timed_out_waits(ctx)));
    check("aio.connections", rt.block_on(connections(ctx, port)));
}

async fn next(cq: &AsyncCq, what: &str) -> Result<Completion, String> {
    match timeout(T, cq.next()).await {
        Ok(c) => e(c, what),
        Err(_) => Err(format!("no completion for {what} within {T:?}")),
    }
}

fn udp(ctx: &Context, cq: &qpip::Cq) -> Result<(Qp, std::net::SocketAddrV6), String> {
    let q = e(
        ctx.create_qp(&QpInit::new(QpKind::Udp, cq).depth(128, 128)),
        "create UDP QP",
    )?;
    let port = e(q.bind(lo(0)), "bind")?.port();
    Ok((q, lo(port)))
}

/// Four tasks wait on one CQ while 96 datagrams arrive in bursts: each receive completes
/// to exactly one task; the tasks still waiting at the end are aborted.
async fn tasks_share_a_cq(ctx: &Context) -> R {
    const N: u64 = 96;
    let scq = e(ctx.create_cq(128), "create CQ")?;
    let rcq = Arc::new(e(
        AsyncCq::new(e(ctx.create_cq(128), "create CQ")?),
        "AsyncCq::new",
    )?);
    let (a, _) = udp(ctx, &scq)?;
    let (b, to) = udp(ctx, &rcq)?;
    let buf = e(ctx.alloc(N as usize * 16), "register")?;
    for i in 0..N {
        e(b.post_recv(i, &[buf.sge(i as usize * 16, 16)]), "post_recv")?;
    }
    let got = Arc::new(Mutex::new(Vec::new()));
    let done = Arc::new(tokio::sync::Notify::new());
    let mut tasks = Vec::new();
    for t in 0..4 {
        let (rcq, got, done) = (rcq.clone(), got.clone(), done.clone());
        // Runs until aborted; ends by itself only with an error.
        tasks.push(tokio::spawn(async move {
            let mut batch = [Completion::default(); 4];
            loop {
                let n = match rcq.poll_batch(&mut batch).await {
                    Ok(n) => n,
                    Err(err) => return err,
                };
                let mut g = got.lock().unwrap();
                g.extend(batch[..n].iter().map(|c| (t, *c)));
                if g.len() as u64 >= N {
                    done.notify_one();
                }
            }
        }));
    }
    for i in 0..N {
        e(
            a.post_send(&SendWr::inline(i, &i.to_le_bytes()).to(to)),
            "post_send",
        )?;
        // Bursts and pauses, so the tasks both find completions waiting and sleep for them.
        if i % 8 == 7 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // The send queue is 128 deep: take the send completions as they come.
        while scq.poll_one().is_some() {}
    }
    let finished = timeout(T, done.notified()).await;
    for t in &tasks {
        t.abort();
    }
    for t in tasks {
        if let Ok(err) = t.await {
            return Err(format!("a waiting task failed: {err}"));
        }
    }
    let got = got.lock().unwrap();
    ensure(finished.is_ok(), || {
        format!("{} of {N} receives within {T:?}", got.len())
    })?;
    let ids: HashSet<u64> = got.iter().map(|(_, c)| c.wr_id).collect();
    ensure(got.len() as u64 == N, || {
        format!("{} completions for {N} receives", got.len())
    })?;
    ensure(ids == (0..N).collect::<HashSet<_>>(), || {
        format!("receive tags {ids:?}")
    })?;
    for (_, c) in got.iter() {
        let at = c.wr_id as usize * 16;
        ensure(
            c.is_ok() && c.opcode == Opcode::Recv && buf[at..at + 8] == c.wr_id.to_le_bytes(),
            || format!("{c:?}"),
        )?;
    }
    ensure(rcq.poll_one().is_none(), || "a completion left over".into())?;
    let takers: HashSet<_> = got.iter().map(|(t, _)| *t).collect();
    println!("@aio.cq_completions={}", got.len());
    println!("@aio.cq_tasks_served={}", takers.len());
    Ok(())
}

/// Waits with short timeouts while datagrams arrive: each completion is returned once,
/// whether it came while a future slept, just as it was dropped, or between two waits.
async fn timed_out_waits(ctx: &Context) -> R {
    const N: u64 = 64;
    let scq = e(ctx.create_cq(128), "create CQ")?;
    let rcq = e(
        AsyncCq::new(e(ctx.create_cq(128), "create CQ")?),
        "AsyncCq::new",
    )?;
    let (a, _) = udp(ctx, &scq)?;
    let (b, to) = udp(ctx, &rcq)?;
    let buf = e(ctx.alloc(64), "register")?;
    for i in 0..N {
        e(b.post_recv(i, &[buf.sge_all()]), "post_recv")?;
    }
    ensure(
        timeout(Duration::from_millis(100), rcq.next())
            .await
            .is_err(),
        || "a completion before anything was sent".into(),
    )?;
    let a = Arc::new(a);
    let sender = tokio::spawn({
        let a = a.clone();
        async move {
            for i in 0..N {
                a.post_send(&SendWr::inline(i, b"x").to(to))?;
                tokio::time::sleep(Duration::from_millis(i % 5)).await;
            }
            Ok::<(), qpip::Error>(())
        }
    });
    let mut seen = HashSet::new();
    let mut timeouts = 0u64;
    let deadline = tokio::time::Instant::now() + 3 * T;
    while (seen.len() as u64) < N {
        ensure(tokio::time::Instant::now() < deadline, || {
            format!("{} of {N} receives", seen.len())
        })?;
        let limit = Duration::from_micros(200 + 700 * (seen.len() as u64 % 4));
        match timeout(limit, rcq.next()).await {
            Ok(c) => {
                let c = e(c, "AsyncCq::next")?;
                ensure(c.is_ok(), || format!("{c:?}"))?;
                ensure(seen.insert(c.wr_id), || format!("{c:?} returned twice"))?;
            }
            Err(_) => timeouts += 1,
        }
    }
    e(
        sender.await.map_err(|e| e.to_string())?,
        "post_send from a task",
    )?;
    ensure(rcq.poll_one().is_none(), || "a completion left over".into())?;
    println!("@aio.timed_out_waits={timeouts}");
    Ok(())
}

/// Four connections at once on one context — accepts and connects each a task waiting for
/// its own event, half through a second adapter of the same context — messages both ways,
/// async closes, end of stream, and an accept whose wait timed out keeping its event.
async fn connections(ctx: &Context, port: u16) -> R {
    const K: usize = 4;
    let actx = e(AsyncContext::new(ctx), "AsyncContext::new")?;
    let actx2 = e(AsyncContext::new(ctx), "AsyncContext::new")?;
    // Events of earlier checks' connections (their resets) go first.
    while e(ctx.poll_event(), "poll_event")?.is_some() {}
    let cq = Arc::new(e(
        AsyncCq::new(e(ctx.create_cq(64), "create CQ")?),
        "AsyncCq::new",
    )?);
    let l = Arc::new(e(ctx.listen(lo(port), K as u32), "listen")?);
    let kind = QpKind::Tcp(Framing::Message);
    let mut servers = Vec::new();
    let mut clients = Vec::new();
    for i in 0..K {
        let s = Arc::new(e(ctx.create_qp(&QpInit::new(kind, &cq)), "create QP")?);
        let (ax, l2, q) = (actx.clone(), l.clone(), s.clone());
        servers.push((
            s,
            tokio::spawn(async move { timeout(T, ax.accept(&l2, &q)).await }),
        ));
        let c = Arc::new(e(ctx.create_qp(&QpInit::new(kind, &cq)), "create QP")?);
        let ax = if i % 2 == 0 { &actx } else { &actx2 }.clone();
        let q = c.clone();
        clients.push((
            c,
            tokio::spawn(async move { timeout(T, ax.connect(&q, lo(port))).await }),
        ));
    }
    for (what, (_, t)) in servers
        .iter_mut()
        .map(|s| ("accept", s))
        .chain(clients.iter_mut().map(|c| ("connect", c)))
    {
        let r = t.await.map_err(|e| format!("{what} task: {e}"))?;
        let peer = e(r.map_err(|_| format!("no {what} within {T:?}"))?, what)?;
        ensure(peer.ip() == &std::net::Ipv6Addr::LOCALHOST, || {
            format!("{what}: peer {peer}")
        })?;
    }
    let buf = e(ctx.alloc(K * 16), "register")?;
    for (i, (s, _)) in servers.iter().enumerate() {
        e(
            s.post_recv(100 + i as u64, &[buf.sge(i * 16, 16)]),
            "post_recv",
        )?;
    }
    for (i, (c, _)) in clients.iter().enumerate() {
        e(
            c.post_send(&SendWr::inline(i as u64, &[i as u8]).imm(i as u32)),
            "post_send",
        )?;
    }
    let mut imms = HashSet::new();
    for _ in 0..2 * K {
        let c = next(&cq, "message").await?;
        ensure(c.is_ok(), || format!("{c:?}"))?;
        if c.opcode == Opcode::Recv {
            imms.insert(c.imm);
        }
    }
    ensure(imms == (0..K as u32).collect::<HashSet<_>>(), || {
        format!("immediates {imms:?}")
    })?;
    for (s, _) in &servers {
        e(s.post_recv(200, &[buf.sge(0, 16)]), "post_recv")?;
    }
    let closes: Vec<_> = clients
        .iter()
        .map(|(c, _)| {
            let (ax, c) = (actx.clone(), c.clone());
            tokio::spawn(async move { timeout(T, ax.close(&c)).await })
        })
        .collect();
    for t in closes {
        let r = t.await.map_err(|e| format!("close task: {e}"))?;
        e(r.map_err(|_| format!("no close within {T:?}"))?, "close")?;
    }
    for _ in 0..K {
        let c = next(&cq, "end of stream").await?;
        ensure(c.is_ok() && c.wr_id == 200 && c.byte_len == 0, || {
            format!("end of stream: {c:?}")
        })?;
    }
    for (s, _) in &servers {
        let ev = timeout(T, actx2.event_for(s.id(), EventKind::PeerClosed))
            .await
            .map_err(|_| format!("no peer-closed event for QP {}", s.id()))?;
        let ev = e(ev, "peer closed")?;
        ensure(ev.status == 0, || format!("{ev:?}"))?;
    }
    // An accept whose wait timed out stays offered; its event comes later and is kept.
    let late = e(ctx.create_qp(&QpInit::new(kind, &cq)), "create QP")?;
    let r = timeout(Duration::from_millis(200), actx.accept(&l, &late)).await;
    ensure(r.is_err(), || {
        format!("accepted with nobody connecting: {r:?}")
    })?;
    let client = e(ctx.create_qp(&QpInit::new(kind, &cq)), "create QP")?;
    let c = timeout(T, actx2.connect(&client, lo(port)))
        .await
        .map_err(|_| "no connect within the time".to_string())?;
    e(c, "connect to the late accept")?;
    let ev = timeout(T, actx.event_for(late.id(), EventKind::Accept))
        .await
        .map_err(|_| "the timed-out accept's event was lost".to_string())?;
    let ev = e(ev, "late accept")?;
    ensure(ev.status == 0 && ev.peer.is_some(), || format!("{ev:?}"))?;
    println!("@aio.connections={K}");
    Ok(())
}
