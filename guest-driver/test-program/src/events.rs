//! `events`, `events-lost` and `timeout`: asynchronous events reach the owning context and
//! no other, are bounded per file, and tell of a peer that vanished.

use crate::*;

/// The first address of the device that is not link-local (sysfs `addresses`), else ::1.
pub(crate) fn device_addr() -> ([u8; 16], String) {
    for line in sysfs("addresses").lines() {
        let a = line.split('/').next().unwrap_or("");
        if let Ok(ip) = a.parse::<std::net::Ipv6Addr>() {
            if ip.segments()[0] & 0xffc0 != 0xfe80 {
                return (ip.octets(), a.to_string());
            }
        }
    }
    (LOOPBACK, "::1".into())
}

/// A TCP QP of `ctx` with one CQ for both directions, its rings mapped.
pub(crate) fn tcp_qp(ctx: &Ctx, what: &str) -> Result<(Qp, Cq), String> {
    let cq = ok(ctx.create_cq(8, -1), &format!("CREATE_CQ ({what})"))?;
    let qp = ok(
        ctx.create_qp(QP_TYPE_TCP, cq.handle, cq.handle, 4),
        &format!("CREATE_QP ({what})"),
    )?;
    Ok((qp, cq))
}

pub(crate) fn unmap_tcp_qp(qp: &Qp, cq: &Cq) {
    unmap(cq.ring, cq.ring_len);
    unmap(qp.sq, qp.sq_len);
    unmap(qp.rq, qp.rq_len);
}

/// Connects QP `cqp` of `client` through `addr` to QP `sqp` of `server`, accepted on a
/// listener on `port` that is gone again afterwards.
pub(crate) fn tcp_connect(
    server: &Ctx,
    client: &Ctx,
    sqp: u32,
    cqp: u32,
    addr: [u8; 16],
    port: u16,
) -> Result<(), String> {
    let l = ok(server.listen(port), "LISTEN")?;
    ok(server.accept(l, sqp, 0xacc), "ACCEPT")?;
    ok(client.connect(cqp, addr, port, 0xc0), "CONNECT")?;
    expect_event(client.fd, EVENT_CONNECT, 0, cqp, 0xc0).map_err(|e| format!("connect: {e}"))?;
    expect_event(server.fd, EVENT_ACCEPT, 0, sqp, 0xacc).map_err(|e| format!("accept: {e}"))?;
    ok(
        server.destroy(IOCTL_DESTROY_LISTENER, l),
        "DESTROY_LISTENER",
    )
}

/// A TCP connection between a QP of `server` and a QP of `client` through `addr`.
pub(crate) fn tcp_pair(
    server: &Ctx,
    client: &Ctx,
    addr: [u8; 16],
    port: u16,
) -> Result<(u32, u32), String> {
    let (sqp, scq) = tcp_qp(server, "server")?;
    unmap_tcp_qp(&sqp, &scq);
    let (cqp, ccq) = tcp_qp(client, "client")?;
    unmap_tcp_qp(&cqp, &ccq);
    tcp_connect(server, client, sqp.handle, cqp.handle, addr, port)?;
    Ok((sqp.handle, cqp.handle))
}

/// No event queued on `fd` (non-blocking read: EAGAIN).
pub(crate) fn no_event(fd: i32) -> Result<(), String> {
    let rev = poll1(fd, libc::POLLIN, Duration::from_millis(500));
    ensure(rev & libc::POLLIN == 0, || {
        let mut buf = [0u8; EVENT_SIZE as usize];
        let _ = read_fd(fd, &mut buf);
        // SAFETY: EVENT_SIZE bytes of a repr(C) plain-integer structure.
        let ev: Event = unsafe { ptr::read_unaligned(buf.as_ptr().cast()) };
        format!("an unexpected event: {ev:?}")
    })
}

/// Asynchronous events reach the owning context, and only it.
pub(crate) fn cmd_events() -> u32 {
    let mut c = Checks::default();
    let (addr, text) = device_addr();
    println!("@events.addr={text}");
    // Another process with a context of its own watches its file the whole time.
    let mut go = [0i32; 2];
    let mut done = [0i32; 2];
    // SAFETY: pipe(2) into arrays of two fds.
    unsafe {
        libc::pipe(go.as_mut_ptr());
        libc::pipe(done.as_mut_ptr());
    }
    // SAFETY: fork in a single-threaded program.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let r = (|| -> Result<(), String> {
            let other = Ctx::open()?;
            // SAFETY: writing one byte to our pipe.
            unsafe { libc::write(go[1], b"r".as_ptr().cast(), 1) };
            let mut fds = [
                libc::pollfd {
                    fd: other.fd,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: done[0],
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: two valid pollfds; wait until the parent is done (or 2 minutes).
            unsafe { libc::poll(fds.as_mut_ptr(), 2, 120_000) };
            ensure(fds[1].revents & libc::POLLIN != 0, || {
                "parent never finished".into()
            })?;
            no_event(other.fd)
        })();
        let mut ch = Checks::default();
        ch.check("events.other_process_sees_nothing", r);
        flush();
        std::process::exit(if ch.failed == 0 { 0 } else { 1 });
    }
    let mut b = [0u8; 1];
    // SAFETY: reading one byte from our pipe: the child's context exists.
    unsafe { libc::read(go[0], b.as_mut_ptr().cast(), 1) };

    let r = (|| -> Result<(), String> {
        let server = Ctx::open()?;
        let client = Ctx::open()?;
        // The peer goes away abruptly: the survivor's QP is reset.
        let (sqp, cqp) = tcp_pair(&server, &client, addr, 5600)?;
        ok(client.destroy(IOCTL_DESTROY_QP, cqp), "DESTROY_QP (client)")?;
        c.check(
            "events.qp_error_reset",
            expect_event(server.fd, EVENT_QP_ERROR, -libc::ECONNRESET, sqp, 0),
        );
        c.check("events.destroyer_hears_nothing", no_event(client.fd));
        // A graceful close: the other side hears the peer closed, the closer its CLOSE.
        let (sqp, cqp) = tcp_pair(&server, &client, addr, 5601)?;
        close_and_hear(
            &mut c,
            (&client, cqp, 0xc105e, "CLOSE"),
            (&server, sqp),
            ["events.close_completes", "events.peer_closed"],
        )?;
        c.check("events.closer_hears_no_peer_close", no_event(client.fd));
        // Now the server closes too: the client hears of it.
        close_and_hear(
            &mut c,
            (&server, sqp, 0x5c, "CLOSE (server)"),
            (&client, cqp),
            [
                "events.second_close_completes",
                "events.peer_closed_both_ways",
            ],
        )?;
        let st = ok(server.stats(), "QUERY_STATS")?;
        println!(
            "@events.device_events={} lost={}",
            st.counters[STAT_ASYNC_EVENTS as usize], st.counters[STAT_ASYNC_EVENTS_LOST as usize]
        );
        Ok(())
    })();
    c.check("events.sequence", r);
    // SAFETY: one byte to the child: we are done.
    unsafe { libc::write(done[1], b"d".as_ptr().cast(), 1) };
    c.check("events.child", wait_child(pid));
    c.failed
}

/// A graceful close of `qp` in `closer` (tagged `user_data`; the call named `what` in a
/// failure): check `completes` wants the closer's EVENT_CLOSE, check `heard` the peer's
/// EVENT_PEER_CLOSED on its end, `peer_qp`.
fn close_and_hear(
    c: &mut Checks,
    (closer, qp, user_data, what): (&Ctx, u32, u64, &str),
    (peer, peer_qp): (&Ctx, u32),
    [completes, heard]: [&str; 2],
) -> Result<(), String> {
    ok(closer.close(qp, user_data), what)?;
    c.check(
        completes,
        expect_event(closer.fd, EVENT_CLOSE, 0, qp, user_data),
    );
    c.check(
        heard,
        expect_event(peer.fd, EVENT_PEER_CLOSED, 0, peer_qp, 0),
    );
    Ok(())
}

/// Reads one event without waiting.
pub(crate) fn read_event_now(fd: i32) -> Result<Event, String> {
    let mut buf = [0u8; EVENT_SIZE as usize];
    let n = ok(read_fd(fd, &mut buf), "read event")?;
    ensure(n == EVENT_SIZE as usize, || format!("read {n} bytes"))?;
    // SAFETY: EVENT_SIZE bytes of a repr(C) plain-integer structure.
    Ok(unsafe { ptr::read_unaligned(buf.as_ptr().cast()) })
}

/// Waits until the device has delivered `n` asynchronous events in all, then a little for
/// the driver to route the last ones.
pub(crate) fn wait_device_events(ctx: &Ctx, n: u64) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let st = ok(ctx.stats(), "QUERY_STATS")?;
        if st.counters[STAT_ASYNC_EVENTS as usize] >= n {
            break;
        }
        ensure(Instant::now() < deadline, || {
            format!(
                "the device delivered {} of {n} events",
                st.counters[STAT_ASYNC_EVENTS as usize]
            )
        })?;
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    Ok(())
}

/// More asynchronous events than a file holds unread: the first 128 are kept, the rest are
/// counted in one EVENT_LOST; other files are not touched; the file takes events again
/// once read.
pub(crate) fn cmd_events_lost(pairs: u64) -> u32 {
    const BOUND: u64 = 128;
    let mut c = Checks::default();
    let (addr, text) = device_addr();
    println!("@lost.addr={text}");
    println!("@lost.pairs={pairs}");
    let r = (|| -> Result<(), String> {
        let server = Ctx::open()?;
        let client = Ctx::open()?;
        let bystander = Ctx::open()?;
        let base = ok(server.stats(), "QUERY_STATS")?.counters[STAT_ASYNC_EVENTS as usize];
        let mut qps = Vec::new();
        for i in 0..pairs {
            qps.push(tcp_pair(&server, &client, addr, 5700 + i as u16)?);
        }
        // Every peer goes away: each survivor's QP is reset, and nobody reads yet.
        for &(_, cqp) in &qps {
            ok(client.destroy(IOCTL_DESTROY_QP, cqp), "DESTROY_QP (client)")?;
        }
        wait_device_events(&server, base + pairs)?;
        let mut got = Vec::new();
        let mut lost = Vec::new();
        // Read in batches of up to 16 records a call, without blocking.
        // SAFETY: fcntl on our own fd.
        unsafe { libc::fcntl(server.fd, libc::F_SETFL, libc::O_NONBLOCK) };
        let mut buf = vec![0u8; 16 * EVENT_SIZE as usize];
        loop {
            match read_fd(server.fd, &mut buf) {
                Ok(n) => {
                    ensure(n > 0 && n % EVENT_SIZE as usize == 0, || {
                        format!("read {n} bytes")
                    })?;
                    for rec in buf[..n].chunks(EVENT_SIZE as usize) {
                        // SAFETY: EVENT_SIZE bytes of a repr(C) plain-integer structure.
                        let ev: Event = unsafe { ptr::read_unaligned(rec.as_ptr().cast()) };
                        if ev.kind == EVENT_LOST {
                            lost.push(ev);
                        } else {
                            ensure(lost.is_empty(), || {
                                format!("an event after EVENT_LOST: {ev:?}")
                            })?;
                            got.push(ev);
                        }
                    }
                }
                Err(e) if e == libc::EAGAIN => break,
                Err(e) => return Err(format!("read: {}", errname(e))),
            }
        }
        println!("@lost.read={}", got.len());
        println!("@lost.lost_records={}", lost.len());
        c.check(
            "lost.bound_kept",
            ensure(got.len() as u64 == BOUND, || {
                format!(
                    "{} events read before EVENT_LOST, expected {BOUND}",
                    got.len()
                )
            }),
        );
        c.check(
            "lost.events_are_the_resets",
            ensure(
                got.iter().all(|e| {
                    e.kind == EVENT_QP_ERROR
                        && e.status == -libc::ECONNRESET
                        && qps.iter().any(|&(s, _)| s == e.qp)
                }) && {
                    let mut q: Vec<u32> = got.iter().map(|e| e.qp).collect();
                    q.sort();
                    q.dedup();
                    q.len() == got.len()
                },
                || {
                    format!(
                        "not 128 distinct resets of the server's QPs: {:?}",
                        got.first()
                    )
                },
            ),
        );
        c.check(
            "lost.one_record_with_the_count",
            ensure(
                lost.len() == 1 && lost[0].user_data == pairs - BOUND && lost[0].status == 0,
                || {
                    format!(
                        "EVENT_LOST records {lost:?}, expected one counting {}",
                        pairs - BOUND
                    )
                },
            ),
        );
        c.check("lost.destroyer_hears_nothing", no_event(client.fd));
        c.check("lost.bystander_hears_nothing", no_event(bystander.fd));
        let st = ok(server.stats(), "QUERY_STATS")?;
        println!(
            "@lost.device_events={} device_lost={}",
            st.counters[STAT_ASYNC_EVENTS as usize] - base,
            st.counters[STAT_ASYNC_EVENTS_LOST as usize]
        );
        c.check(
            "lost.not_the_device",
            ensure(st.counters[STAT_ASYNC_EVENTS_LOST as usize] == 0, || {
                "the device dropped events: the loss was to be the file's".into()
            }),
        );
        // Read: the file takes events again.
        // SAFETY: fcntl on our own fd.
        unsafe { libc::fcntl(server.fd, libc::F_SETFL, 0) };
        let (sqp, cqp) = tcp_pair(&server, &client, addr, 5699)?;
        ok(client.destroy(IOCTL_DESTROY_QP, cqp), "DESTROY_QP (client)")?;
        c.check(
            "lost.events_again_after_reading",
            expect_event(server.fd, EVENT_QP_ERROR, -libc::ECONNRESET, sqp, 0),
        );
        Ok(())
    })();
    c.check("lost.sequence", r);
    c.failed
}

/// Deletes (`del`) or adds back (`add`) a device address through sysfs.
pub(crate) fn sysfs_addr(op: &str, addr: &str) -> Result<(), String> {
    let line = if op == "add" {
        format!("add {addr}/64")
    } else {
        format!("del {addr}")
    };
    std::fs::write(format!("{SYSFS}/addresses"), line)
        .map_err(|e| format!("{op} {addr} in sysfs addresses: {e}"))
}

/// A connection whose peer vanishes: the address both ends use is deleted from the device,
/// so the client's data goes out to a network where nobody has it and is never
/// acknowledged; after `--tcp-retries` retransmissions the QP fails with a timeout.
pub(crate) fn cmd_timeout() -> u32 {
    let mut c = Checks::default();
    let (addr, text) = device_addr();
    println!("@timeout.addr={text}");
    let r = (|| -> Result<(), String> {
        ensure(addr != LOOPBACK, || {
            "the device has no address but ::1".into()
        })?;
        let server = Ctx::open()?;
        let mut client = Ctx::open()?;
        let (sqp, scq) = tcp_qp(&server, "server")?;
        let (mut cqp, mut ccq) = tcp_qp(&client, "client")?;
        tcp_connect(&server, &client, sqp.handle, cqp.handle, addr, 5800)?;
        let before = ok(client.stats(), "QUERY_STATS")?.counters;
        sysfs_addr("del", &text)?;
        let mut h: Wqe = zeroed();
        h.wr_id = 0x5e4d;
        h.opcode = WQE_OP_SEND;
        h.flags = WQE_FLAG_INLINE;
        let msg = b"is anybody there?";
        h.inline_len = msg.len() as u32;
        let mut w = wqe_bytes(&h, &[]);
        w[WQE_SGE_OFFSET as usize..WQE_SGE_OFFSET as usize + msg.len()].copy_from_slice(msg);
        client.post(&mut cqp, true, &w);
        let started = Instant::now();
        let rev = poll1(client.fd, libc::POLLIN, Duration::from_secs(120));
        println!("@timeout.after_ms={}", started.elapsed().as_millis());
        let r = (|| {
            ensure(rev & libc::POLLIN != 0, || "no event within 120 s".into())?;
            let ev = read_event_now(client.fd)?;
            ensure(
                ev.kind == EVENT_QP_ERROR && ev.status == -libc::ETIMEDOUT && ev.qp == cqp.handle,
                || {
                    format!(
                        "event {ev:?}, expected QP_ERROR -ETIMEDOUT on {}",
                        cqp.handle
                    )
                },
            )
        })();
        c.check("timeout.qp_error_etimedout", r);
        c.check(
            "timeout.send_flushed",
            match client.wait_cq(&mut ccq) {
                Some(e) => ensure(e.status == CQE_STATUS_FLUSHED && e.wr_id == 0x5e4d, || {
                    format!("completion {e:?}, expected the send flushed")
                }),
                None => Err("no completion for the send".into()),
            },
        );
        let after = ok(client.stats(), "QUERY_STATS")?.counters;
        let d = |i: u32| after[i as usize] - before[i as usize];
        println!(
            "@timeout.tcp_timeouts={} rto_timeouts={}",
            d(STAT_TCP_TIMEOUTS),
            d(STAT_TCP_RTO_TIMEOUTS)
        );
        c.check(
            "timeout.counted",
            ensure(d(STAT_TCP_TIMEOUTS) == 1, || {
                format!("STAT_TCP_TIMEOUTS grew by {}", d(STAT_TCP_TIMEOUTS))
            }),
        );
        c.check("timeout.server_hears_nothing", no_event(server.fd));
        sysfs_addr("add", &text)?;
        unmap_tcp_qp(&sqp, &scq);
        unmap_tcp_qp(&cqp, &ccq);
        Ok(())
    })();
    c.check("timeout.sequence", r);
    c.failed
}
