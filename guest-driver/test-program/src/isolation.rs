//! `isolation`: two processes, whose handles and offsets are nothing to each other, moving
//! traffic at once, each in its own context.

use crate::*;

/// Two processes: the child opens its own context and tries everything of the parent's.
pub(crate) fn cmd_isolation() -> u32 {
    let mut c = Checks::default();
    let ctx = match Ctx::open() {
        Ok(ctx) => ctx,
        Err(e) => {
            c.check("open", Err(e));
            return c.failed;
        }
    };
    let cq = ctx.create_cq(16, -1).expect("CQ");
    let qp = ctx
        .create_qp(QP_TYPE_UDP, cq.handle, cq.handle, 8)
        .expect("QP");
    let buf = anon(4 * PAGE);
    let lkey = ctx
        .reg_mr(buf as u64, 4 * PAGE as u64, MR_ACCESS_LOCAL_WRITE)
        .expect("MR");
    let listener = ctx.listen(5100).expect("listener");
    // SAFETY: reading our own doorbell page.
    let my_change_count = unsafe { ptr::read_volatile(ctx.db_u32(DB_CHANGE_COUNT)) };

    // The handles go to the other process by value, as a malicious one would pass them.
    let mut fds = [0i32; 2];
    // SAFETY: a pipe into a two-element array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let mut msg = String::new();
    let _ = write!(
        msg,
        "{} {} {} {} {} {} {}",
        info_ctx(&ctx),
        cq.handle,
        qp.handle,
        lkey,
        listener,
        cq.ring_offset,
        qp.sq_offset
    );
    flush();
    // SAFETY: fork in a single-threaded program.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        close(fds[1]);
        let mut line = vec![0u8; 256];
        let n = read_fd(fds[0], &mut line).unwrap_or(0);
        let v: Vec<u64> = String::from_utf8_lossy(&line[..n])
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        let mut cc = Checks::default();
        let r = (|| -> Result<(), String> {
            ensure(v.len() == 7, || format!("bad message {v:?}"))?;
            let (pctx, pcq, pqp, plkey, plist, pcq_off, psq_off) = (
                v[0] as u32,
                v[1] as u32,
                v[2] as u32,
                v[3] as u32,
                v[4] as u32,
                v[5],
                v[6],
            );
            let mut mine = Ctx::open()?;
            cc.check(
                "isolation.own_context",
                ensure(mine.info.ctx != pctx, || format!("both in context {pctx}")),
            );
            // The other context's objects do not exist in this one.
            for (name, req, handle) in [
                ("isolation.destroy_cq", IOCTL_DESTROY_CQ, pcq),
                ("isolation.destroy_qp", IOCTL_DESTROY_QP, pqp),
                ("isolation.deregister_mr", IOCTL_DEREG_MR, plkey),
                ("isolation.destroy_listener", IOCTL_DESTROY_LISTENER, plist),
            ] {
                cc.check(name, fails_with(mine.destroy(req, handle), libc::ENOENT));
            }
            cc.check(
                "isolation.bind_qp",
                fails_with(mine.bind(pqp, 0), libc::ENOENT),
            );
            let mut opt = SetQpOpt::new();
            opt.qp = pqp;
            opt.option = QP_OPT_KEEPALIVE;
            (
                opt.keepalive_idle,
                opt.keepalive_interval,
                opt.keepalive_probes,
            ) = (1, 1, 1);
            cc.check(
                "isolation.set_qp_opt",
                fails_with(mine.ioc(IOCTL_SET_QP_OPT, &mut opt), libc::ENOENT),
            );
            let mine_cq = mine.create_cq(8, -1).map_err(errname)?;
            cc.check(
                "isolation.qp_on_foreign_cq",
                fails_with(
                    mine.create_qp(QP_TYPE_UDP, pcq, mine_cq.handle, 4)
                        .map(|_| ()),
                    libc::ENOENT,
                ),
            );
            cc.check(
                "isolation.accept",
                fails_with(mine.accept(plist, pqp, 0), libc::ENOENT),
            );
            cc.check(
                "isolation.mmap_foreign_cq_ring",
                fails_with(map(mine.fd, pcq_off, PAGE), libc::EINVAL),
            );
            cc.check(
                "isolation.mmap_foreign_sq_ring",
                fails_with(map(mine.fd, psq_off, PAGE), libc::EINVAL),
            );
            // Scribble over this context's whole doorbell page: the other's must not change.
            for off in (0..PAGE as u32).step_by(4) {
                if off != DB_ENGINE_SLEEPING {
                    // SAFETY: inside our mapped doorbell page.
                    unsafe { ptr::write_volatile(mine.db_u32(off), 0xffff_fff0) };
                }
            }
            // Then both move traffic at once, each in its own context.
            udp_exchange(&mut mine, 7301, 10, "isolation.child").map(|_| ())?;
            Ok(())
        })();
        cc.check("isolation.child", r);
        flush();
        // SAFETY: ending the child.
        unsafe { libc::_exit(cc.failed.min(1) as i32) };
    }
    close(fds[0]);
    // SAFETY: writing the message into the pipe.
    unsafe { libc::write(fds[1], msg.as_ptr().cast(), msg.len()) };
    close(fds[1]);
    let mut ctx = ctx;
    c.check(
        "isolation.parent_traffic",
        udp_exchange(&mut ctx, 7302, 10, "isolation.parent").map(|_| ()),
    );
    c.check("isolation.child_exit", wait_child(pid));
    // SAFETY: reading our own doorbell page.
    let cc_now = unsafe { ptr::read_volatile(ctx.db_u32(DB_CHANGE_COUNT)) };
    // Our own traffic moved our counter; the child's scribbles (0xfffffff0) must not be here.
    let mut foreign = 0;
    for off in (DB_QP_BASE..PAGE as u32).step_by(4) {
        // SAFETY: inside our mapped doorbell page.
        if unsafe { ptr::read_volatile(ctx.db_u32(off)) } == 0xffff_fff0 {
            foreign += 1;
        }
    }
    c.check(
        "isolation.doorbell_page_untouched",
        ensure(foreign == 0 && cc_now != 0xffff_fff0, || {
            format!("{foreign} slots hold the other process's value (change count {my_change_count} -> {cc_now})")
        }),
    );
    // The parent's objects are all still there.
    c.check(
        "isolation.parent_objects_intact",
        ok(
            ctx.destroy(IOCTL_DESTROY_LISTENER, listener),
            "destroy own listener",
        ),
    );
    c.failed
}

pub(crate) fn info_ctx(ctx: &Ctx) -> u32 {
    ctx.info.ctx
}

/// Leaves an accept pending in `ctx` (the TCP engine completes it only when cancelled).
pub(crate) fn pending_accept(ctx: &Ctx, port: u16, user_data: u64) -> Result<u32, String> {
    let cq = ok(ctx.create_cq(4, -1), "CREATE_CQ for accept")?;
    let qp = ok(
        ctx.create_qp(QP_TYPE_TCP, cq.handle, cq.handle, 4),
        "CREATE_QP for accept",
    )?;
    let l = ok(ctx.listen(port), "LISTEN")?;
    ok(ctx.accept(l, qp.handle, user_data), "ACCEPT")?;
    // The objects stay; their rings need not be mapped (a mapping keeps the file open).
    unmap(cq.ring, cq.ring_len);
    unmap(qp.sq, qp.sq_len);
    unmap(qp.rq, qp.rq_len);
    Ok(qp.handle)
}
