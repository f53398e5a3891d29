//! `iwarp [N]`: iWARP QPs through the driver, over the device's loopback in one guest.
//! REG_MR's remote rights and CREATE_QP's iWARP framing reach the device; ACCEPT and
//! CONNECT carry private data, IRD, ORD and flags (copied when the ioctl is made, so the
//! caller's buffer is free at once), QUERY_CONN shows what MPA agreed; the member's errors
//! are the ioctl's; callers of the first version of the arguments are unaffected; and N
//! connections with private data on fresh QPs leave the kernel's slab as it was.

use crate::*;
use qpip_abi::admin::{
    CONN_INFO_CRC, FRAMING_IWARP, FRAMING_STREAM, IWARP_CONN_CRC, IWARP_CONN_FLAGS,
    IWARP_MAX_IRD_ORD, IWARP_MAX_PRIVATE_DATA, MR_ACCESS_REMOTE_READ, MR_ACCESS_REMOTE_WRITE,
};

/// What one end brings to MPA: `pd` (which the caller keeps alive), IRD, ORD, flags.
fn conn(pd: &[u8], ird: u8, ord: u8, flags: u32) -> IwarpConn {
    IwarpConn {
        private_data: if pd.is_empty() { 0 } else { pd.as_ptr() as u64 },
        pd_len: pd.len() as u16,
        ird,
        ord,
        flags,
    }
}

/// QUERY_CONN of `qp`, its output fields filled with 0xff first: what the driver does not
/// write shows.
fn query_conn(ctx: &Ctx, qp: u32) -> Result<QueryConn, i32> {
    let mut a = QueryConn::new();
    a.qp = qp;
    a.flags = !0;
    a.ird = !0;
    a.ord = !0;
    a.mpa_revision = !0;
    a.reserved0 = !0;
    a.pd_len = !0;
    a.terminate = !0;
    a.reserved1 = [0xff; 16];
    a.private_data = [0xff; 512];
    ctx.ioc(IOCTL_QUERY_CONN, &mut a)?;
    Ok(a)
}

/// `q` says MPA revision 2, the peer's private data `pd` (and zeros after it), IRD and
/// ORD as given, CRC as asked, no Terminate.
fn conn_is(q: &QueryConn, pd: &[u8], ird: u16, ord: u16, crc: bool) -> Result<(), String> {
    let n = q.pd_len as usize;
    ensure(n == pd.len() && &q.private_data[..pd.len()] == pd, || {
        format!(
            "peer's private data {:?} ({} bytes), expected {:?}",
            String::from_utf8_lossy(&q.private_data[..n.min(512)]),
            q.pd_len,
            String::from_utf8_lossy(pd)
        )
    })?;
    ensure(q.private_data[n..].iter().all(|&b| b == 0), || {
        "bytes after the private data not zeroed".into()
    })?;
    let flags = if crc { CONN_INFO_CRC } else { 0 };
    ensure(
        q.mpa_revision == 2
            && (q.ird, q.ord) == (ird, ord)
            && q.flags == flags
            && q.terminate == 0
            && q.reserved0 == 0
            && q.reserved1 == [0; 16],
        || {
            format!(
                "revision {} IRD {} ORD {} flags {:#x} terminate {:#x} reserved {} {:?}, \
                 expected revision 2 IRD {ird} ORD {ord} flags {flags:#x}",
                q.mpa_revision, q.ird, q.ord, q.flags, q.terminate, q.reserved0, q.reserved1
            )
        },
    )
}

/// A TCP QP of `framing` in `ctx` on the CQ `cq`, its rings unmapped again (the QP keeps
/// them): the tests here post no work.
fn qp_of(ctx: &Ctx, framing: u8, cq: u32) -> Result<u32, String> {
    let qp = ok(
        ctx.create_qp_framed(QP_TYPE_TCP, framing, cq, cq, 4),
        &format!("CREATE_QP (framing {framing})"),
    )?;
    unmap(qp.sq, qp.sq_len);
    unmap(qp.rq, qp.rq_len);
    Ok(qp.handle)
}

/// A CQ of `ctx`, its ring unmapped again.
fn cq_of(ctx: &Ctx) -> Result<u32, String> {
    let cq = ok(ctx.create_cq(8, -1), "CREATE_CQ")?;
    unmap(cq.ring, cq.ring_len);
    Ok(cq.handle)
}

/// Waits for the event `kind` of `qp` on `fd`, passing over the asynchronous events
/// (QP errors, peer closes, losses) of QPs torn down before; the event's status.
fn event_status(fd: i32, kind: u32, qp: u32) -> Result<i32, String> {
    loop {
        let rev = poll1(fd, libc::POLLIN, TIMEOUT);
        ensure(rev & libc::POLLIN != 0, || {
            format!("no event {kind} of QP {qp} within {TIMEOUT:?}")
        })?;
        let ev = read_event_now(fd)?;
        if ev.kind == kind && ev.qp == qp {
            return Ok(ev.status);
        }
        ensure(
            matches!(ev.kind, EVENT_QP_ERROR | EVENT_PEER_CLOSED | EVENT_LOST),
            || format!("event {ev:?} while waiting for event {kind} of QP {qp}"),
        )?;
    }
}

/// Both events of a connection came, successful.
fn connected(server: &Ctx, client: &Ctx, sqp: u32, cqp: u32) -> Result<(), String> {
    let s = event_status(client.fd, EVENT_CONNECT, cqp)?;
    ensure(s == 0, || format!("EVENT_CONNECT status {}", errname(-s)))?;
    let s = event_status(server.fd, EVENT_ACCEPT, sqp)?;
    ensure(s == 0, || format!("EVENT_ACCEPT status {}", errname(-s)))
}

pub(crate) fn cmd_iwarp(loops: u64) -> u32 {
    let mut c = Checks::default();
    let r = (|| -> Result<(), String> {
        let server = Ctx::open()?;
        let client = Ctx::open()?;
        remote_rights(&mut c, &client);
        let scq = cq_of(&server)?;
        let ccq = cq_of(&client)?;
        let sqp = qp_of(&server, FRAMING_IWARP, scq)?;
        let cqp = qp_of(&client, FRAMING_IWARP, ccq)?;
        println!("@iwarp.qp_created=1");
        c.check(
            "iwarp.query_before_connect",
            fails_with(query_conn(&client, cqp), libc::EINVAL),
        );
        bad_arguments(&mut c, (&server, sqp), (&client, cqp, ccq))?;

        // The connection: each end's private data, IRD, ORD; CRC asked by the client.
        let l = ok(server.listen(7300), "LISTEN")?;
        let mut spd = *b"server";
        let mut cpd = *b"client";
        c.check(
            "iwarp.accept",
            ok(
                server.accept_iwarp(l, sqp, 0x5e, conn(&spd, 4, 2, 0)),
                "ACCEPT",
            ),
        );
        c.check(
            "iwarp.connect",
            ok(
                client.connect_iwarp(cqp, LOOPBACK, 7300, 0xc1, conn(&cpd, 3, 8, IWARP_CONN_CRC)),
                "CONNECT",
            ),
        );
        // The driver took copies: the callers' buffers are theirs again at once.
        spd.fill(b'X');
        cpd.fill(b'Y');
        c.check("iwarp.events", connected(&server, &client, sqp, cqp));
        // Each end issues no more reads than the other serves; the server serves the
        // client's ORD (8), above the 4 it asked for.
        c.check(
            "iwarp.query_conn_client",
            ok(query_conn(&client, cqp), "QUERY_CONN (client)")
                .and_then(|q| conn_is(&q, b"server", 3, 8, true)),
        );
        c.check(
            "iwarp.query_conn_server",
            ok(query_conn(&server, sqp), "QUERY_CONN (server)")
                .and_then(|q| conn_is(&q, b"client", 8, 2, true)),
        );
        c.check(
            "iwarp.query_conn_other_context",
            fails_with(query_conn(&server, cqp), libc::ENOENT),
        );
        c.check(
            "iwarp.query_conn_unknown_qp",
            fails_with(query_conn(&client, 0xdead_beef), libc::ENOENT),
        );
        stream_qps(&mut c, &server, &client, l, (scq, ccq))?;
        ok(
            server.destroy(IOCTL_DESTROY_LISTENER, l),
            "DESTROY_LISTENER",
        )?;
        ok(client.destroy(IOCTL_DESTROY_QP, cqp), "DESTROY_QP (client)")?;
        ok(server.destroy(IOCTL_DESTROY_QP, sqp), "DESTROY_QP (server)")?;
        Ok(())
    })();
    c.check("iwarp.sequence", r);
    if loops > 0 {
        c.check("iwarp.churn_no_slab_growth", churn(loops));
    }
    c.failed
}

/// REG_MR passes the remote rights to the device and returns the rkey it made.
fn remote_rights(c: &mut Checks, ctx: &Ctx) {
    let buf = anon(2 * PAGE) as u64;
    let all = MR_ACCESS_LOCAL_WRITE | MR_ACCESS_REMOTE_WRITE | MR_ACCESS_REMOTE_READ;
    for (name, access, remote) in [
        ("mr.remote_read_write", all, true),
        ("mr.remote_read", MR_ACCESS_REMOTE_READ, true),
        ("mr.remote_write", MR_ACCESS_REMOTE_WRITE, true),
        ("mr.local_only", MR_ACCESS_LOCAL_WRITE, false),
    ] {
        let r =
            ok(ctx.reg_mr_keys(buf, 2 * PAGE as u64, access), "REG_MR").and_then(|(lkey, rkey)| {
                println!("@iwarp.{name}.keys={lkey:#x} {rkey:#x}");
                ok(ctx.destroy(IOCTL_DEREG_MR, lkey), "DEREG_MR")?;
                ensure((rkey != 0) == remote, || {
                    format!("access {access:#x}: rkey {rkey:#x}")
                })
            });
        c.check(name, r);
    }
    unmap(buf as *mut u8, 2 * PAGE);
}

/// The iWARP member's own errors fail the ioctl, and leave no event behind.
fn bad_arguments(
    c: &mut Checks,
    (server, sqp): (&Ctx, u32),
    (client, cqp, ccq): (&Ctx, u32, u32),
) -> Result<(), String> {
    let l = ok(server.listen(7398), "LISTEN")?;
    let pd = [0x5au8; 300];
    let max = IWARP_MAX_PRIVATE_DATA as usize;
    let max_ird = IWARP_MAX_IRD_ORD;
    let hole = anon(PAGE);
    unmap(hole, PAGE);
    let cases = [
        (
            "iwarp.pd_len_over_max",
            conn(&pd[..max + 1], 0, 0, 0),
            libc::EINVAL,
        ),
        (
            "iwarp.unknown_flag",
            conn(b"x", 0, 0, IWARP_CONN_FLAGS + 1),
            libc::EINVAL,
        ),
        (
            "iwarp.ird_over_max",
            conn(b"x", max_ird + 1, 0, 0),
            libc::EINVAL,
        ),
        (
            "iwarp.ord_over_max",
            conn(b"x", 0, max_ird + 1, 0),
            libc::EINVAL,
        ),
        (
            "iwarp.pd_without_pointer",
            IwarpConn {
                private_data: 0,
                ..conn(b"abc", 0, 0, 0)
            },
            libc::EINVAL,
        ),
        (
            "iwarp.pd_bad_pointer",
            IwarpConn {
                private_data: hole as u64,
                ..conn(b"abc", 0, 0, 0)
            },
            libc::EFAULT,
        ),
        (
            "iwarp.pd_kernel_pointer",
            IwarpConn {
                private_data: 0xffff_8880_0000_0000,
                ..conn(b"abc", 0, 0, 0)
            },
            libc::EFAULT,
        ),
    ];
    for (name, iw, errno) in cases {
        c.check(
            &format!("{name}.connect"),
            fails_with(client.connect_iwarp(cqp, LOOPBACK, 7399, 0xbad, iw), errno),
        );
        c.check(
            &format!("{name}.accept"),
            fails_with(server.accept_iwarp(l, sqp, 0xbad, iw), errno),
        );
    }
    c.check("iwarp.errors_leave_no_event", no_event(client.fd));
    c.check("iwarp.errors_leave_no_event_server", no_event(server.fd));
    ok(
        server.destroy(IOCTL_DESTROY_LISTENER, l),
        "DESTROY_LISTENER",
    )?;
    // The largest private data passes the driver; nothing listens there: refused.
    let qp = qp_of(client, FRAMING_IWARP, ccq)?;
    c.check(
        "iwarp.pd_max_connect_refused",
        ok(
            client.connect_iwarp(qp, LOOPBACK, 7399, 0x3a, conn(&pd[..max], 0, 0, 0)),
            "CONNECT",
        )
        .and_then(|()| {
            let s = event_status(client.fd, EVENT_CONNECT, qp)?;
            ensure(s == -libc::ECONNREFUSED, || {
                format!("EVENT_CONNECT status {}", errname(-s))
            })
        }),
    );
    ok(client.destroy(IOCTL_DESTROY_QP, qp), "DESTROY_QP")
}

/// Stream QPs: a caller of the first version of ACCEPT and CONNECT (whatever lies past
/// its size is not read), QUERY_CONN refused on them, and an iWARP member on them refused
/// by the device in the event.
fn stream_qps(
    c: &mut Checks,
    server: &Ctx,
    client: &Ctx,
    l: u32,
    (scq, ccq): (u32, u32),
) -> Result<(), String> {
    let sqp = qp_of(server, FRAMING_STREAM, scq)?;
    let cqp = qp_of(client, FRAMING_STREAM, ccq)?;
    let junk = IwarpConn {
        private_data: 1,
        pd_len: 0xffff,
        ird: 0xff,
        ord: 0xff,
        flags: !0,
    };
    let mut acc = Accept {
        size: ACCEPT_SIZE_V1,
        listener: l,
        qp: sqp,
        user_data: 0xacc1,
        iwarp: junk,
        ..Accept::new()
    };
    let mut con = Connect {
        size: CONNECT_SIZE_V1,
        qp: cqp,
        peer: Endpoint {
            addr: LOOPBACK,
            port: 7300,
            reserved: 0,
        },
        user_data: 0xc01,
        iwarp: junk,
        ..Connect::new()
    };
    c.check(
        "iwarp.v1_caller_stream",
        ok(server.ioc(IOCTL_ACCEPT, &mut acc), "ACCEPT (first version)")
            .and_then(|()| {
                ok(
                    client.ioc(IOCTL_CONNECT, &mut con),
                    "CONNECT (first version)",
                )
            })
            .and_then(|()| connected(server, client, sqp, cqp)),
    );
    c.check(
        "iwarp.query_conn_stream_qp",
        fails_with(query_conn(client, cqp), libc::EINVAL),
    );
    // A stream QP takes no iWARP parameters: the device says so in the event.
    let other = qp_of(client, FRAMING_STREAM, ccq)?;
    c.check(
        "iwarp.member_on_stream_qp_event",
        ok(
            client.connect_iwarp(other, LOOPBACK, 7300, 0xc02, conn(&[], 1, 1, 0)),
            "CONNECT",
        )
        .and_then(|()| {
            let s = event_status(client.fd, EVENT_CONNECT, other)?;
            ensure(s == -libc::EINVAL, || {
                format!("EVENT_CONNECT status {}", errname(-s))
            })
        }),
    );
    for (ctx, qp) in [(client, cqp), (client, other), (server, sqp)] {
        ok(ctx.destroy(IOCTL_DESTROY_QP, qp), "DESTROY_QP (stream)")?;
    }
    Ok(())
}

/// Objects in use in the kernel's 256-byte kmalloc caches (/proc/slabinfo; where the
/// driver's private-data buffers of 129 to 256 bytes and its event records come from),
/// and the unreclaimable slab in kB (/proc/meminfo).
fn slab_usage() -> Result<(u64, u64), String> {
    let slabinfo =
        std::fs::read_to_string("/proc/slabinfo").map_err(|e| format!("/proc/slabinfo: {e}"))?;
    let objs = slabinfo
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let name = w.next()?;
            let active: u64 = w.next()?.parse().ok()?;
            (name.starts_with("kmalloc-") && name.ends_with("-256")).then_some(active)
        })
        .sum();
    let meminfo =
        std::fs::read_to_string("/proc/meminfo").map_err(|e| format!("/proc/meminfo: {e}"))?;
    let sunreclaim = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("SUnreclaim:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .ok_or("no SUnreclaim in /proc/meminfo")?;
    Ok((objs, sunreclaim))
}

/// Waits for the event `kind` of `qp` on `ctx`'s file and wants `status`.
fn event_is(ctx: &Ctx, kind: u32, qp: u32, status: i32) -> Result<(), String> {
    let s = event_status(ctx.fd, kind, qp)?;
    ensure(s == status, || {
        format!(
            "event {kind} of QP {qp}: status {}, expected {}",
            errname(-s),
            errname(-status)
        )
    })
}

/// `n` rounds of every way an accept or connect carrying private data (each a 256-byte
/// buffer in the driver) ends, on fresh QPs destroyed after: an iWARP connection made
/// (both ends), a connect refused (nothing listens), an accept cancelled (its listener
/// destroyed). The contexts are closed at the end (their unread records go with them).
fn connections(n: u64, port: u16) -> Result<(), String> {
    let server = Ctx::open()?;
    let client = Ctx::open()?;
    let (scq, ccq) = (cq_of(&server)?, cq_of(&client)?);
    let l = ok(server.listen(port), "LISTEN")?;
    let spd = [b's'; 200];
    let cpd = [b'c'; IWARP_MAX_PRIVATE_DATA as usize];
    for i in 0..n {
        let sqp = qp_of(&server, FRAMING_IWARP, scq)?;
        let cqp = qp_of(&client, FRAMING_IWARP, ccq)?;
        ok(
            server.accept_iwarp(l, sqp, i, conn(&spd, 2, 2, 0)),
            "ACCEPT",
        )?;
        ok(
            client.connect_iwarp(cqp, LOOPBACK, port, i, conn(&cpd, 2, 2, 0)),
            "CONNECT",
        )?;
        connected(&server, &client, sqp, cqp).map_err(|e| format!("connection {i}: {e}"))?;
        ok(client.destroy(IOCTL_DESTROY_QP, cqp), "DESTROY_QP (client)")?;
        ok(server.destroy(IOCTL_DESTROY_QP, sqp), "DESTROY_QP (server)")?;

        let refused = qp_of(&client, FRAMING_IWARP, ccq)?;
        ok(
            client.connect_iwarp(refused, LOOPBACK, port + 1, i, conn(&cpd, 2, 2, 0)),
            "CONNECT (nobody listens)",
        )?;
        event_is(&client, EVENT_CONNECT, refused, -libc::ECONNREFUSED)?;
        ok(client.destroy(IOCTL_DESTROY_QP, refused), "DESTROY_QP")?;

        let cancelled = qp_of(&server, FRAMING_IWARP, scq)?;
        let l2 = ok(server.listen(port + 1), "LISTEN")?;
        ok(
            server.accept_iwarp(l2, cancelled, i, conn(&spd, 2, 2, 0)),
            "ACCEPT",
        )?;
        ok(
            server.destroy(IOCTL_DESTROY_LISTENER, l2),
            "DESTROY_LISTENER",
        )?;
        event_is(&server, EVENT_ACCEPT, cancelled, -libc::ECANCELED)?;
        ok(server.destroy(IOCTL_DESTROY_QP, cancelled), "DESTROY_QP")?;
    }
    Ok(())
}

/// `n` contexts closed with an accept carrying private data still pending: the device
/// cancels it as the context goes, into no file.
fn closed_while_pending(n: u64, port: u16) -> Result<(), String> {
    let spd = [b'p'; 200];
    for i in 0..n {
        let ctx = Ctx::open()?;
        let qp = qp_of(&ctx, FRAMING_IWARP, cq_of(&ctx)?)?;
        let l = ok(ctx.listen(port), "LISTEN")?;
        ok(ctx.accept_iwarp(l, qp, i, conn(&spd, 2, 2, 0)), "ACCEPT")?;
    }
    Ok(())
}

/// An accept with private data left pending on a new iWARP QP of `ctx`, listening on
/// `port` (for `reset` and `remove`: its buffer is freed when the device goes); the QP.
pub(crate) fn pending_iwarp_accept(ctx: &Ctx, port: u16, user_data: u64) -> Result<u32, String> {
    let qp = qp_of(ctx, FRAMING_IWARP, cq_of(ctx)?)?;
    let l = ok(ctx.listen(port), "LISTEN")?;
    let pd = [b'r'; 100];
    ok(
        ctx.accept_iwarp(l, qp, user_data, conn(&pd, 1, 1, 0)),
        "ACCEPT (iWARP)",
    )?;
    Ok(qp)
}

/// The driver frees every private-data buffer however its command ends: `loops` rounds of
/// [`connections`] (4 buffers each) and `loops` contexts closed with one pending grow the
/// 256-byte caches by far less than one object a round.
fn churn(loops: u64) -> Result<(), String> {
    // A first round settles the caches and the device's tables.
    connections(10, 7301)?;
    closed_while_pending(10, 7303)?;
    let (objs0, kb0) = slab_usage()?;
    connections(loops, 7301)?;
    closed_while_pending(loops, 7303)?;
    let (objs1, kb1) = slab_usage()?;
    let grew = objs1 as i64 - objs0 as i64;
    println!("@iwarp.churn.rounds={loops}");
    println!("@iwarp.churn.kmalloc256_objs={objs0} -> {objs1} ({grew:+})");
    println!(
        "@iwarp.churn.sunreclaim_kb={kb0} -> {kb1} ({:+})",
        kb1 as i64 - kb0 as i64
    );
    ensure(grew < loops as i64 / 2, || {
        format!("{grew} more 256-byte objects after {loops} rounds")
    })
}
