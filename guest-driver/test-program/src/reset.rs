//! `reset`, `remove` and `churn`: the device reset or removed under open contexts, and
//! processes creating and destroying objects at once.

use crate::*;

/// Resets the device under an open context: through the driver's sysfs `reset`, or (`pci`)
/// through the PCI core's (`/sys/bus/pci/devices/ADDR/reset`, a function-level reset).
pub(crate) fn cmd_reset(pci: bool) -> u32 {
    let mut c = Checks::default();
    let r = (|| -> Result<(), String> {
        let mut ctx = Ctx::open()?;
        let p = udp_exchange(&mut ctx, 7400, 3, "reset.before")?;
        let accepts = PendingAccepts::new(&ctx, 5400, 0x7e5e7, 0x1e5e7)?;
        let resets = sysfs("reset_count");
        let path = if pci {
            format!("{SYSFS}/device/reset")
        } else {
            format!("{SYSFS}/reset")
        };
        std::fs::write(&path, "1").map_err(|e| format!("write {path}: {e}"))?;
        println!("@reset.count={resets}->{}", sysfs("reset_count"));
        check_gone(&mut c, &ctx, "reset", ctx.info.doorbell_offset);
        c.check(
            "reset.create_cq_fails",
            fails_with(ctx.create_cq(8, -1).map(|_| ()), libc::ENODEV),
        );
        c.check(
            "reset.destroy_fails",
            fails_with(ctx.destroy(IOCTL_DESTROY_QP, p.a.handle), libc::ENODEV),
        );
        // A process still on the data path rings doorbells into a revoked mapping: it
        // carries on (until its next call), and nothing reaches another context.
        for n in 0..3 {
            let head = p.rcq.head.wrapping_add(n);
            ctx.ring(doorbell::cq_head(p.rcq.slot), head);
        }
        c.check("reset.revoked_doorbells_harmless", Ok(()));
        // The accepts that were pending (one holding private data in the driver) end with
        // the device's reset, then the file is dead.
        accepts.check_ended(&mut c, &ctx, "reset");
        let mut evbuf = [0u8; EVENT_SIZE as usize];
        c.check(
            "reset.read_fails",
            fails_with(read_fd(ctx.fd, &mut evbuf), libc::ENODEV),
        );
        // The rings stay readable (nothing freed under the process).
        // SAFETY: the ring is still mapped.
        let _ = unsafe { ptr::read_volatile(p.rcq.ring) };
        drop(ctx);
        let mut again = Ctx::open()?;
        udp_exchange(&mut again, 7401, 3, "reset.after")?;
        Ok(())
    })();
    c.check("reset.sequence", r);
    c.failed
}

/// A TCP accept and an iWARP one (holding private data in the driver) left pending on a
/// context: a device that goes away must answer both. (QP, user data) of each.
struct PendingAccepts {
    tcp: (u32, u64),
    iwarp: (u32, u64),
}

impl PendingAccepts {
    /// The two accepts on `ctx`, on ports `port` and `port + 1`, tagged `tag` and
    /// `iwarp_tag`.
    fn new(ctx: &Ctx, port: u16, tag: u64, iwarp_tag: u64) -> Result<PendingAccepts, String> {
        Ok(PendingAccepts {
            tcp: (pending_accept(ctx, port, tag)?, tag),
            iwarp: (pending_iwarp_accept(ctx, port + 1, iwarp_tag)?, iwarp_tag),
        })
    }

    /// Check `{what}.pending_accept_event`: both ended with ENODEV, in order.
    fn check_ended(&self, c: &mut Checks, ctx: &Ctx, what: &str) {
        let ended = |(qp, user_data): (u32, u64)| (EVENT_ACCEPT, -libc::ENODEV, qp, user_data);
        c.check(
            &format!("{what}.pending_accept_event"),
            expect_events(ctx.fd, &[ended(self.tcp), ended(self.iwarp)]),
        );
    }
}

/// What every context of a device that is gone (reset or removed) sees: QUERY_DEVICE and
/// an mmap of the page at `offset` fail with ENODEV (checks `{what}.query_fails`,
/// `{what}.mmap_fails`), and poll reports POLLERR (`{what}.poll_err`).
fn check_gone(c: &mut Checks, ctx: &Ctx, what: &str, offset: u64) {
    let mut q = QueryDevice::new();
    c.check(
        &format!("{what}.query_fails"),
        fails_with(ctx.ioc(IOCTL_QUERY_DEVICE, &mut q), libc::ENODEV),
    );
    c.check(
        &format!("{what}.mmap_fails"),
        fails_with(map(ctx.fd, offset, PAGE), libc::ENODEV),
    );
    let rev = poll1(ctx.fd, libc::POLLIN, Duration::from_millis(100));
    c.check(
        &format!("{what}.poll_err"),
        ensure(rev & libc::POLLERR != 0, || format!("revents {rev:#x}")),
    );
}

/// Removes the PCI function under an open context, closes, rescans.
pub(crate) fn cmd_remove() -> u32 {
    let mut c = Checks::default();
    let r = (|| -> Result<(), String> {
        let slot = std::fs::read_link(format!("{SYSFS}/device"))
            .map_err(|e| format!("{SYSFS}/device: {e}"))?;
        let slot = slot.file_name().unwrap().to_string_lossy().to_string();
        println!("@remove.slot={slot}");
        let mut ctx = Ctx::open()?;
        let p = udp_exchange(&mut ctx, 7500, 3, "remove.before")?;
        let accepts = PendingAccepts::new(&ctx, 5500, 0x4e40, 0x1e40)?;
        std::fs::write(format!("/sys/bus/pci/devices/{slot}/remove"), "1")
            .map_err(|e| format!("remove: {e}"))?;
        check_gone(&mut c, &ctx, "remove", ctx.info.kick_offset);
        c.check(
            "remove.reg_mr_fails",
            fails_with(ctx.reg_mr(p.buf as u64, 4096, 0), libc::ENODEV),
        );
        accepts.check_ended(&mut c, &ctx, "remove");
        c.check(
            "remove.node_gone",
            ensure(open_dev(0) == Err(libc::ENOENT), || {
                "open still works".into()
            }),
        );
        // SAFETY: the ring is still mapped.
        let _ = unsafe { ptr::read_volatile(p.rcq.ring) };
        // Closing the file and unmapping everything frees the removed device's last
        // memory, its number included: the rescanned function is qpip0 again.
        drop(ctx);
        p.unmap();
        std::fs::write("/sys/bus/pci/rescan", "1").map_err(|e| format!("rescan: {e}"))?;
        let deadline = Instant::now() + TIMEOUT;
        while open_dev(0).map(close).is_err() {
            if Instant::now() > deadline {
                return Err("no /dev/qpip0 after rescan".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut again = Ctx::open()?;
        udp_exchange(&mut again, 7501, 3, "remove.after")?;
        Ok(())
    })();
    c.check("remove.sequence", r);
    c.failed
}

/// `procs` processes at once, each creating and destroying every kind of object `rounds`
/// times with an accept cancelled each round: the admin queue wraps many times with
/// commands of several contexts in flight and completions out of order.
pub(crate) fn cmd_churn(procs: u64, rounds: u64) -> u32 {
    let mut c = Checks::default();
    let mut pids = Vec::new();
    flush();
    for k in 0..procs {
        // SAFETY: fork in a single-threaded program; the child _exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let r = (|| -> Result<(), String> {
                let ctx = Ctx::open()?;
                let buf = anon(8 * PAGE);
                for i in 0..rounds {
                    let what = |s: &str| format!("process {k} round {i}: {s}");
                    let cq = ok(ctx.create_cq(16, -1), &what("CREATE_CQ"))?;
                    let qp = ok(
                        ctx.create_qp(QP_TYPE_TCP, cq.handle, cq.handle, 4),
                        &what("CREATE_QP"),
                    )?;
                    let lkey = ok(
                        ctx.reg_mr(buf as u64 + 100, 5 * PAGE as u64, MR_ACCESS_LOCAL_WRITE),
                        &what("REG_MR"),
                    )?;
                    let port = 20000 + (k * 1000 + i) as u16;
                    let l = ok(ctx.listen(port), &what("LISTEN"))?;
                    ok(ctx.accept(l, qp.handle, i), &what("ACCEPT"))?;
                    ok(
                        ctx.destroy(IOCTL_DESTROY_LISTENER, l),
                        &what("DESTROY_LISTENER"),
                    )?;
                    expect_event(ctx.fd, EVENT_ACCEPT, -libc::ECANCELED, qp.handle, i)
                        .map_err(|e| what(&e))?;
                    ok(ctx.destroy(IOCTL_DEREG_MR, lkey), &what("DEREG_MR"))?;
                    ok(
                        ctx.destroy(IOCTL_DESTROY_QP, qp.handle),
                        &what("DESTROY_QP"),
                    )?;
                    ok(
                        ctx.destroy(IOCTL_DESTROY_CQ, cq.handle),
                        &what("DESTROY_CQ"),
                    )?;
                    unmap(cq.ring, cq.ring_len);
                    unmap(qp.sq, qp.sq_len);
                    unmap(qp.rq, qp.rq_len);
                }
                Ok(())
            })();
            let failed = r.is_err();
            if let Err(e) = r {
                println!("@churn.error={e}");
            }
            flush();
            // SAFETY: ending the child.
            unsafe { libc::_exit(failed as i32) };
        }
        pids.push(pid);
    }
    // Meanwhile, traffic in a context of its own.
    let traffic =
        Ctx::open().and_then(|mut ctx| udp_exchange(&mut ctx, 7600, 50, "churn.udp").map(|_| ()));
    c.check("churn.traffic", traffic);
    for (k, pid) in pids.into_iter().enumerate() {
        c.check(&format!("churn.process{k}"), wait_child(pid));
    }
    println!("@churn.commands={}", procs * rounds * 10);
    c.failed
}
