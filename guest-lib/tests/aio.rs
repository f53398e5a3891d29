//! The async adapter (`qpip::aio`, feature `tokio`) against the software provider on `::1`:
//! completions and connection events as futures, many tasks on one CQ and one context,
//! cancellation (a dropped or timed-out future loses nothing), readiness without a
//! completion, and the calls outside a runtime.
#![cfg(feature = "tokio")]

use std::collections::HashSet;
use std::future::Future;
use std::net::{Ipv6Addr, SocketAddrV6};
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

mod common;

use common::{free_tcp_port, lo, pending_connection, tcp_qp};
use qpip::{
    AsyncContext, AsyncCq, Completion, Context, EventKind, Framing, Opcode, Qp, QpInit, QpKind,
    SendWr,
};
use tokio::time::timeout;

/// Longest any wait may take before the test fails (generous: the machine is shared).
const T: Duration = Duration::from_secs(20);

fn run<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

async fn next(cq: &AsyncCq, what: &str) -> Completion {
    timeout(T, cq.next())
        .await
        .unwrap_or_else(|_| panic!("no completion for {what} within {T:?}"))
        .expect("AsyncCq::next")
}

/// A bound UDP QP.
fn udp(ctx: &Context, cq: &qpip::Cq) -> (Qp, SocketAddrV6) {
    let qp = ctx
        .create_qp(&QpInit::new(QpKind::Udp, cq).depth(512, 512))
        .unwrap();
    let port = qp.bind(lo(0)).unwrap().port();
    (qp, lo(port))
}

/// On a new soft context: a bound UDP QP `a` whose sends complete on the plain CQ `scq`,
/// and a bound UDP QP `b` at `to` whose receives complete on the async CQ `rcq`, both CQs
/// `depth` deep: `(ctx, scq, rcq, a, b, to)`. Made inside the runtime (as an AsyncCq is).
fn datagrams(depth: u32) -> (Context, qpip::Cq, AsyncCq, Qp, Qp, SocketAddrV6) {
    let ctx = Context::open_soft().unwrap();
    let scq = ctx.create_cq(depth).unwrap();
    let rcq = AsyncCq::new(ctx.create_cq(depth).unwrap()).unwrap();
    let (a, _) = udp(&ctx, &scq);
    let (b, to) = udp(&ctx, &rcq);
    (ctx, scq, rcq, a, b, to)
}

#[test]
fn a_datagram_through_async_cqs() {
    run(async {
        let ctx = Context::open_soft().unwrap();
        let scq = AsyncCq::new(ctx.create_cq(8).unwrap()).unwrap();
        let rcq = AsyncCq::new(ctx.create_cq(8).unwrap()).unwrap();
        let (a, _) = udp(&ctx, &scq);
        let (b, to) = udp(&ctx, &rcq);
        let buf = ctx.alloc(64).unwrap();
        b.post_recv(7, &[buf.sge_all()]).unwrap();
        // The receive is awaited before the send exists: the future must sleep, then wake.
        let recv = tokio::spawn(async move {
            let c = next(&rcq, "receive").await;
            (c, buf, rcq)
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        a.post_send(&SendWr::inline(8, b"async hello").to(to))
            .unwrap();
        let s = next(&scq, "send").await;
        assert!(
            s.is_ok() && s.wr_id == 8 && s.opcode == Opcode::Send,
            "{s:?}"
        );
        let (c, buf, _rcq) = recv.await.unwrap();
        assert!(
            c.is_ok() && c.wr_id == 7 && c.opcode == Opcode::Recv,
            "{c:?}"
        );
        assert_eq!(&buf[..c.byte_len as usize], b"async hello");
    });
}

/// Eight tasks wait on one CQ while 256 datagrams arrive: every receive completes to
/// exactly one of them, none twice, none lost; the tasks still waiting at the end are
/// aborted (cancelled mid-wait).
#[test]
fn many_tasks_share_one_cq() {
    const N: u64 = 256;
    run(async {
        let (ctx, _scq, rcq, a, b, to) = datagrams(1024);
        let rcq = Arc::new(rcq);
        let buf = ctx.alloc(N as usize * 16).unwrap();
        for i in 0..N {
            b.post_recv(i, &[buf.sge(i as usize * 16, 16)]).unwrap();
        }
        let got = Arc::new(Mutex::new(Vec::new()));
        let done = Arc::new(tokio::sync::Notify::new());
        let mut tasks = Vec::new();
        for t in 0..8 {
            let (rcq, got, done) = (rcq.clone(), got.clone(), done.clone());
            tasks.push(tokio::spawn(async move {
                let mut batch = [Completion::default(); 4];
                loop {
                    let n = rcq.poll_batch(&mut batch).await.unwrap();
                    assert!(n > 0);
                    let mut g = got.lock().unwrap();
                    g.extend(batch[..n].iter().map(|c| (t, *c)));
                    if g.len() as u64 == N {
                        done.notify_one();
                    }
                }
            }));
        }
        let sender = tokio::spawn(async move {
            for i in 0..N {
                a.post_send(&SendWr::inline(i, &i.to_le_bytes()).to(to))
                    .unwrap();
                if i % 16 == 0 {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }
            a
        });
        timeout(T, done.notified())
            .await
            .expect("every datagram received");
        for t in &tasks {
            t.abort();
        }
        let _a = sender.await.unwrap();
        let got = got.lock().unwrap();
        let ids: HashSet<u64> = got.iter().map(|(_, c)| c.wr_id).collect();
        assert_eq!(got.len() as u64, N, "a completion taken twice");
        assert_eq!(ids, (0..N).collect::<HashSet<_>>());
        for (_, c) in got.iter() {
            assert!(c.is_ok(), "{c:?}");
            let at = c.wr_id as usize * 16;
            assert_eq!(buf[at..at + 8], c.wr_id.to_le_bytes(), "{c:?}");
        }
        let takers: HashSet<_> = got.iter().map(|(t, _)| *t).collect();
        eprintln!("{} completions went to {} tasks", got.len(), takers.len());
        // Nothing was left behind in the CQ.
        assert!(rcq.poll_one().is_none());
    });
}

/// Waits cut short by a timeout race with arrivals: each completion is returned by exactly
/// one call, whether it arrived while a future was pending, just before it was dropped, or
/// between two waits.
#[test]
fn timed_out_waits_lose_nothing() {
    const N: u64 = 200;
    run(async {
        let (ctx, _scq, rcq, a, b, to) = datagrams(1024);
        let buf = ctx.alloc(64).unwrap();
        for i in 0..N {
            b.post_recv(i, &[buf.sge_all()]).unwrap();
        }
        // Nothing posted to arrive yet: a wait times out.
        assert!(timeout(Duration::from_millis(50), rcq.next())
            .await
            .is_err());
        let sender = tokio::spawn(async move {
            for i in 0..N {
                a.post_send(&SendWr::inline(i, b"x").to(to)).unwrap();
                // Delays around the waits' timeouts, so arrivals land in every phase.
                tokio::time::sleep(Duration::from_micros(100 * (i % 7))).await;
            }
            a
        });
        let mut seen = HashSet::new();
        let mut timeouts = 0;
        let started = std::time::Instant::now();
        while (seen.len() as u64) < N {
            assert!(
                started.elapsed() < 3 * T,
                "only {} of {N} arrived",
                seen.len()
            );
            let limit = Duration::from_micros(50 + 150 * (seen.len() as u64 % 5));
            match timeout(limit, rcq.next()).await {
                Ok(c) => {
                    let c = c.unwrap();
                    assert!(c.is_ok(), "{c:?}");
                    assert!(seen.insert(c.wr_id), "{c:?} returned twice");
                }
                Err(_) => timeouts += 1,
            }
        }
        eprintln!("{N} completions, {timeouts} timed-out waits");
        let _a = sender.await.unwrap();
        assert!(rcq.poll_one().is_none());
    });
}

/// A future polled until it sleeps, then dropped: the completion that comes after is
/// there for the next wait.
#[test]
fn a_dropped_wait_leaves_the_completion() {
    run(async {
        let (ctx, _scq, rcq, a, b, to) = datagrams(8);
        let buf = ctx.alloc(64).unwrap();
        b.post_recv(1, &[buf.sge_all()]).unwrap();
        {
            let mut fut = pin!(rcq.next());
            let pending = std::future::poll_fn(|cx: &mut TaskContext<'_>| {
                Poll::Ready(fut.as_mut().poll(cx).is_pending())
            })
            .await;
            assert!(pending, "a completion before anything was sent");
        }
        a.post_send(&SendWr::inline(2, b"after").to(to)).unwrap();
        let c = next(&rcq, "receive after a dropped wait").await;
        assert!(c.is_ok() && c.wr_id == 1 && c.byte_len == 5, "{c:?}");
    });
}

/// A readable descriptor with nothing to poll (the device has this when CQs share an
/// interrupt vector; here the completion that signalled is taken by a plain poll first):
/// the future goes back to sleep instead of returning.
#[test]
fn readiness_without_a_completion_is_waited_through() {
    run(async {
        let (ctx, _scq, rcq, a, b, to) = datagrams(8);
        let buf = ctx.alloc(64).unwrap();
        b.post_recv(1, &[buf.sge_all()]).unwrap();
        b.post_recv(2, &[buf.sge_all()]).unwrap();
        rcq.arm().unwrap();
        a.post_send(&SendWr::inline(1, b"one").to(to)).unwrap();
        // The arm's wake-up fires; the completion is taken without the adapter.
        let c = rcq.wait_one(Some(T)).unwrap().expect("first receive");
        assert_eq!(c.wr_id, 1);
        assert!(
            timeout(Duration::from_millis(200), rcq.next())
                .await
                .is_err(),
            "returned with nothing to return"
        );
        a.post_send(&SendWr::inline(2, b"two").to(to)).unwrap();
        assert_eq!(next(&rcq, "second receive").await.wr_id, 2);
    });
}

/// Eight connections made at once on one context — eight accepts on one listener, eight
/// connects, each a task waiting for its own event — then data both ways, async closes,
/// and the peers' end of stream.
#[test]
fn concurrent_connects_accepts_and_closes() {
    const K: usize = 8;
    run(async {
        let ctx = Context::open_soft().unwrap();
        let actx = AsyncContext::new(&ctx).unwrap();
        // A second adapter on the same context: events are shared, not duplicated.
        let actx2 = AsyncContext::new(&ctx).unwrap();
        let cq = Arc::new(AsyncCq::new(ctx.create_cq(256).unwrap()).unwrap());
        let port = free_tcp_port();
        let l = Arc::new(ctx.listen(lo(port), K as u32).unwrap());
        let mut servers = Vec::new();
        let mut clients = Vec::new();
        for i in 0..K {
            let qp = Arc::new(tcp_qp(&ctx, &cq, Framing::Message));
            let (ax, l, q) = (actx.clone(), l.clone(), qp.clone());
            servers.push((
                qp,
                tokio::spawn(async move { timeout(T, ax.accept(&l, &q)).await }),
            ));
            let qp = Arc::new(tcp_qp(&ctx, &cq, Framing::Message));
            let a = if i % 2 == 0 { &actx } else { &actx2 }.clone();
            let q = qp.clone();
            clients.push((
                qp,
                tokio::spawn(async move { timeout(T, a.connect(&q, lo(port))).await }),
            ));
        }
        for (_, t) in servers.iter_mut().chain(clients.iter_mut()) {
            let peer = t.await.unwrap().expect("in time").expect("connected");
            assert_eq!(peer.ip(), &Ipv6Addr::LOCALHOST);
        }
        // Which server got which client is the listener's business: send each client's
        // index and check every server hears one, all different.
        let buf = ctx.alloc(K * 16).unwrap();
        for (i, (s, _)) in servers.iter().enumerate() {
            s.post_recv(100 + i as u64, &[buf.sge(i * 16, 16)]).unwrap();
        }
        for (i, (c, _)) in clients.iter().enumerate() {
            c.post_send(&SendWr::inline(i as u64, &[i as u8]).imm(i as u32))
                .unwrap();
        }
        let mut imms = HashSet::new();
        for _ in 0..2 * K {
            let c = next(&cq, "message").await;
            assert!(c.is_ok(), "{c:?}");
            if c.opcode == Opcode::Recv {
                imms.insert(c.imm);
            }
        }
        assert_eq!(imms, (0..K as u32).collect::<HashSet<_>>());
        // Graceful closes, all at once; the servers then read the end of stream.
        for (s, _) in &servers {
            s.post_recv(200, &[buf.sge(0, 16)]).unwrap();
        }
        let closes: Vec<_> = clients
            .iter()
            .map(|(c, _)| {
                let (a, c) = (actx.clone(), c.clone());
                tokio::spawn(async move { timeout(T, a.close(&c)).await })
            })
            .collect();
        for t in closes {
            t.await.unwrap().expect("in time").expect("closed");
        }
        for _ in 0..K {
            let c = next(&cq, "end of stream").await;
            assert!(c.is_ok() && c.wr_id == 200 && c.byte_len == 0, "{c:?}");
        }
        for (s, _) in &servers {
            let e = timeout(T, actx2.event_for(s.id(), EventKind::PeerClosed))
                .await
                .expect("peer closed in time")
                .unwrap();
            assert_eq!(e.status, 0);
        }
    });
}

/// An accept whose wait timed out is still pending; its event comes later and waits,
/// queued, for whoever asks — an async waiter or the blocking API.
#[test]
fn a_timed_out_accept_keeps_its_event() {
    run(async {
        let ctx = Context::open_soft().unwrap();
        let actx = AsyncContext::new(&ctx).unwrap();
        let cq = ctx.create_cq(16).unwrap();
        let port = free_tcp_port();
        let l = ctx.listen(lo(port), 1).unwrap();
        let server = tcp_qp(&ctx, &cq, Framing::Stream);
        let r = timeout(Duration::from_millis(100), actx.accept(&l, &server)).await;
        assert!(r.is_err(), "accepted with nobody connecting: {r:?}");
        // A waiter for another QP's event reads the accept first and keeps it.
        let other = tokio::spawn({
            let actx = actx.clone();
            async move {
                timeout(
                    Duration::from_millis(300),
                    actx.event_for(9999, EventKind::Close),
                )
                .await
                .is_err()
            }
        });
        let client = tcp_qp(&ctx, &cq, Framing::Stream);
        timeout(T, actx.connect(&client, lo(port)))
            .await
            .unwrap()
            .unwrap();
        assert!(
            other.await.unwrap(),
            "an event for a QP that does not exist"
        );
        let e = timeout(T, actx.event_for(server.id(), EventKind::Accept))
            .await
            .expect("the accept's event is kept")
            .unwrap();
        assert_eq!(e.status, 0, "{e:?}");
        assert_eq!(e.peer.unwrap().ip(), &Ipv6Addr::LOCALHOST);
        // Nothing else queued.
        assert!(ctx.poll_event().unwrap().is_none());
    });
}

/// Connection failures are errors of the future, like the blocking helpers'.
#[test]
fn refused_connect_is_an_error() {
    run(async {
        let ctx = Context::open_soft().unwrap();
        let actx = AsyncContext::new(&ctx).unwrap();
        let cq = ctx.create_cq(16).unwrap();
        let qp = tcp_qp(&ctx, &cq, Framing::Message);
        let e = timeout(T, actx.connect(&qp, lo(free_tcp_port())))
            .await
            .unwrap()
            .unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ECONNREFUSED), "{e}");
        // A UDP QP cannot connect: a typed error at once.
        let udp = ctx.create_qp(&QpInit::new(QpKind::Udp, &cq)).unwrap();
        let e = actx.connect(&udp, lo(1)).await.unwrap_err();
        assert!(matches!(e, qpip::Error::WrongQpKind { .. }), "{e}");
    });
}

/// Outside a runtime the constructors fail with an error instead of panicking.
#[test]
fn outside_a_runtime_is_an_error() {
    let ctx = Context::open_soft().unwrap();
    let e = AsyncCq::new(ctx.create_cq(8).unwrap()).unwrap_err();
    assert!(e.to_string().contains("tokio runtime"), "{e}");
    let e = AsyncContext::new(&ctx).unwrap_err();
    assert!(e.to_string().contains("tokio runtime"), "{e}");
    // Inside one, and back out: the CQ works without the adapter again.
    let cq = run(async {
        AsyncCq::new(ctx.create_cq(8).unwrap())
            .unwrap()
            .into_inner()
    });
    assert!(cq.poll_one().is_none());
}

#[test]
fn async_handles_are_send_and_sync() {
    fn both<T: Send + Sync>() {}
    both::<AsyncCq>();
    both::<AsyncContext>();
}

/// A blocking wait in a thread and an async wait in a task on one context, each for its
/// own event, the events coming together: whichever reads the other's event keeps it back
/// and wakes the other (the blocking reader through the context's own signal, the task
/// through its notification).
#[test]
fn blocking_and_async_waits_share_the_events() {
    run(async {
        let ctx = Context::open_soft().unwrap();
        let actx = AsyncContext::new(&ctx).unwrap();
        let cq = ctx.create_cq(64).unwrap();
        for round in 0..20 {
            let p = pending_connection(&ctx, &cq, Framing::Message, round);
            let (sid, cid) = (p.server.id(), p.client.id());
            let blocking = std::thread::spawn({
                let ctx = ctx.clone();
                move || ctx.wait_event_for(cid, EventKind::Connect, Some(T))
            });
            let task = tokio::spawn({
                let actx = actx.clone();
                async move { timeout(T, actx.event_for(sid, EventKind::Accept)).await }
            });
            tokio::time::sleep(Duration::from_millis(5)).await;
            p.client.connect(lo(p.port), round).unwrap();
            let b = tokio::task::spawn_blocking(move || blocking.join().unwrap())
                .await
                .unwrap();
            assert!(b.unwrap().is_some(), "round {round}: connect event lost");
            let a = task.await.unwrap();
            assert!(a.is_ok(), "round {round}: accept event lost");
        }
    });
}
