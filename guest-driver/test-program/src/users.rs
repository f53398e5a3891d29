//! `users`: what one user of the guest may take of the device, and who may use the
//! privileged ports. Run as root: it sets the driver's per-user quotas
//! (`/sys/module/qpip/parameters/max_user_*`) low, forks processes that become ordinary
//! users (uids 1000 to 1002), and puts the parameters back at the end.
//!
//! * ports: an ordinary user's LISTEN and BIND on a port below 1024 are EACCES, root's
//!   succeed, and `net.ipv4.ip_unprivileged_port_start` moves the line
//! * contexts and regions: a user at its quota gets EDQUOT, from any of its processes,
//!   while another user still creates and root (CAP_SYS_RESOURCE) is not limited; once the
//!   first user's process is killed, its quota is free again
//! * locked memory, CQs, QPs, listeners, tripwires: each quota met gives EDQUOT, and a
//!   destroyed object gives its place back

use crate::*;

const PARAMS: &str = "/sys/module/qpip/parameters";
const QUOTAS: [&str; 7] = [
    "max_user_contexts",
    "max_user_cqs",
    "max_user_qps",
    "max_user_mrs",
    "max_user_pinned_mb",
    "max_user_listeners",
    "max_user_tripwires",
];
const PORT_START: &str = "/proc/sys/net/ipv4/ip_unprivileged_port_start";

fn read_str(path: &str) -> Result<String, String> {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .map_err(|e| format!("{path}: {e}"))
}

fn write_str(path: &str, v: &str) -> Result<(), String> {
    std::fs::write(path, v).map_err(|e| format!("{path}: {e}"))
}

fn set_quota(name: &str, v: u32) -> Result<(), String> {
    write_str(&format!("{PARAMS}/{name}"), &v.to_string())
}

/// `/dev`, opened by root: a process that became another user opens the device through it
/// (the guest image's root directory is not searchable by other users).
fn dev_dir() -> i32 {
    let path = CString::new("/dev").unwrap();
    // SAFETY: a valid path.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_PATH | libc::O_DIRECTORY) };
    assert!(fd >= 0, "open /dev: {}", errname(errno()));
    fd
}

/// Opens the device as the calling process's user: the raw result, for quota checks.
fn open_as(dir: i32) -> Result<i32, i32> {
    let name = CString::new(DEV.trim_start_matches("/dev/")).unwrap();
    // SAFETY: a valid directory descriptor and name.
    let fd = unsafe { libc::openat(dir, name.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        Err(errno())
    } else {
        Ok(fd)
    }
}

fn ctx_as(dir: i32) -> Result<Ctx, String> {
    Ctx::from_fd(ok(open_as(dir), "open")?)
}

/// Forks a process that becomes user `uid` (no supplementary groups, no capabilities),
/// runs `body` and exits with 0 if all its checks passed. Its pid.
fn as_user(uid: u32, body: impl FnOnce(&mut Checks)) -> i32 {
    flush();
    // SAFETY: fork in a single-threaded program; the child makes system calls, prints and
    // _exits.
    let pid = unsafe { libc::fork() };
    if pid != 0 {
        return pid;
    }
    let mut c = Checks::default();
    // SAFETY: plain system calls.
    let dropped = unsafe {
        libc::setgroups(0, ptr::null()) == 0 && libc::setgid(uid) == 0 && libc::setuid(uid) == 0
    };
    if dropped {
        body(&mut c);
    } else {
        c.check("users.drop", Err(errname(errno())));
    }
    flush();
    // SAFETY: ending the child without running the parent's destructors.
    unsafe { libc::_exit(c.failed.min(1) as i32) }
}

pub(crate) fn cmd_users() -> u32 {
    let mut c = Checks::default();
    let saved: Vec<(String, String)> = QUOTAS
        .iter()
        .map(|q| {
            (
                q.to_string(),
                read_str(&format!("{PARAMS}/{q}")).unwrap_or_default(),
            )
        })
        .collect();
    for (q, v) in &saved {
        println!("@users.default.{q}={v}");
    }
    let dir = dev_dir();
    ports(&mut c, dir);
    contexts_and_regions(&mut c, dir);
    objects(&mut c, dir);
    for (q, v) in &saved {
        if !v.is_empty() {
            let _ = write_str(&format!("{PARAMS}/{q}"), v);
        }
    }
    close(dir);
    c.failed
}

/// LISTEN and BIND below 1024: EACCES for an ordinary user, allowed for root, and the line
/// where net.ipv4.ip_unprivileged_port_start puts it.
fn ports(c: &mut Checks, dir: i32) {
    let pid = as_user(1000, |cc| {
        let r = (|| -> Result<(), String> {
            let ctx = ctx_as(dir)?;
            cc.check(
                "ports.user_listen_80",
                fails_with(ctx.listen(80), libc::EACCES),
            );
            cc.check(
                "ports.user_listen_1023",
                fails_with(ctx.listen(1023), libc::EACCES),
            );
            cc.check(
                "ports.user_listen_1024",
                ok(ctx.listen(1024), "LISTEN 1024").map(|_| ()),
            );
            let cq = ok(ctx.create_cq(8, -1), "CREATE_CQ")?;
            let qp = ok(
                ctx.create_qp(QP_TYPE_UDP, cq.handle, cq.handle, 8),
                "CREATE_QP",
            )?;
            cc.check(
                "ports.user_bind_80",
                fails_with(ctx.bind(qp.handle, 80), libc::EACCES),
            );
            let port = ctx.bind(qp.handle, 0);
            cc.check(
                "ports.user_bind_ephemeral",
                ok(port, "BIND 0").and_then(|p| ensure(p >= 1024, || format!("port {p}"))),
            );
            Ok(())
        })();
        cc.check("ports.user", r);
    });
    c.check("ports.user_child", wait_child(pid));

    let r = (|| -> Result<(), String> {
        let ctx = Ctx::open()?;
        let l = ok(ctx.listen(80), "root's LISTEN 80")?;
        let cq = ok(ctx.create_cq(8, -1), "CREATE_CQ")?;
        let qp = ok(
            ctx.create_qp(QP_TYPE_UDP, cq.handle, cq.handle, 8),
            "CREATE_QP",
        )?;
        ok(ctx.bind(qp.handle, 81), "root's BIND 81")?;
        // Port 80 free for the next check (the mapped rings keep the file open).
        ok(ctx.destroy(IOCTL_DESTROY_LISTENER, l), "DESTROY_LISTENER")
    })();
    c.check("ports.root", r);

    // The sysctl moves the line, as for sockets.
    let Ok(start) = read_str(PORT_START) else {
        println!("@ports.sysctl=absent");
        return;
    };
    c.check("ports.sysctl_set", write_str(PORT_START, "80"));
    let pid = as_user(1000, |cc| {
        let r = (|| -> Result<(), String> {
            let ctx = ctx_as(dir)?;
            cc.check(
                "ports.sysctl_listen_80",
                ok(ctx.listen(80), "LISTEN 80").map(|_| ()),
            );
            cc.check(
                "ports.sysctl_listen_79",
                fails_with(ctx.listen(79), libc::EACCES),
            );
            Ok(())
        })();
        cc.check("ports.sysctl_user", r);
    });
    c.check("ports.sysctl_child", wait_child(pid));
    let _ = write_str(PORT_START, &start);
}

/// Quotas of 2 contexts and 2 regions: user 1000 holds both in one process; its second
/// process gets EDQUOT, user 1001 and root do not; once the first is killed, 1000 gets
/// them again.
fn contexts_and_regions(c: &mut Checks, dir: i32) {
    let set = set_quota("max_user_contexts", 2)
        .and_then(|_| set_quota("max_user_mrs", 2))
        .and_then(|_| set_quota("max_user_pinned_mb", 1));
    c.check("quota.set", set);
    let buf = anon(1 << 20) as u64;

    // Takes the user's whole quota of contexts and regions (EDQUOT beyond): the contexts
    // and the first one's region.
    let take_all = |cc: &mut Checks, who: &str| -> (Vec<Ctx>, u32) {
        let mut held = Vec::new();
        let mut first = 0;
        let r = (|| -> Result<(), String> {
            held.push(ctx_as(dir)?);
            held.push(ctx_as(dir)?);
            cc.check(
                &format!("{who}.third_context"),
                fails_with(open_as(dir), libc::EDQUOT),
            );
            first = ok(
                held[0].reg_mr(buf, 16 << 10, MR_ACCESS_LOCAL_WRITE),
                "REG_MR 1",
            )?;
            ok(
                held[1].reg_mr(buf, 16 << 10, MR_ACCESS_LOCAL_WRITE),
                "REG_MR 2",
            )?;
            cc.check(
                &format!("{who}.third_region"),
                fails_with(held[0].reg_mr(buf, PAGE as u64, 0), libc::EDQUOT),
            );
            Ok(())
        })();
        cc.check(&format!("{who}.within_quota"), r);
        (held, first)
    };

    // The holder reports its failures through the pipe, then waits to be killed.
    let mut fds = [0i32; 2];
    // SAFETY: a pipe into a two-element array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let holder = as_user(1000, |cc| {
        close(fds[0]);
        let _held = take_all(cc, "quota.holder");
        flush();
        let failed = [cc.failed.min(255) as u8];
        // SAFETY: writing one byte from a live buffer.
        unsafe { libc::write(fds[1], failed.as_ptr().cast(), 1) };
        loop {
            // SAFETY: plain system call; the parent kills this process.
            unsafe { libc::pause() };
        }
    });
    close(fds[1]);
    let mut b = [1u8];
    let n = read_fd(fds[0], &mut b).unwrap_or(0);
    close(fds[0]);
    c.check(
        "quota.holder",
        ensure(n == 1 && b[0] == 0, || {
            format!("holder's checks failed ({n} {b:?})")
        }),
    );

    // The same user from another process: the quota is the user's, not the process's.
    let pid = as_user(1000, |cc| {
        cc.check(
            "quota.same_user_other_process",
            fails_with(open_as(dir), libc::EDQUOT),
        );
    });
    c.check("quota.same_user_child", wait_child(pid));

    // Another user is not starved; its locked memory has a quota of its own (1 MiB: the
    // doorbell pages and 16 KiB regions fit, 1 MiB more does not).
    let pid = as_user(1001, |cc| {
        let (held, first) = take_all(cc, "quota.other_user");
        if let Some(ctx) = held.first() {
            // A region's place freed: now the quota on locked memory is what refuses.
            cc.check(
                "quota.deregister_frees",
                ok(ctx.destroy(IOCTL_DEREG_MR, first), "DEREG_MR"),
            );
            cc.check(
                "quota.pinned_over",
                fails_with(ctx.reg_mr(buf, 1 << 20, 0), libc::EDQUOT),
            );
            cc.check(
                "quota.pinned_within",
                ok(ctx.reg_mr(buf, 512 << 10, 0), "REG_MR 512 KiB").map(|_| ()),
            );
        }
    });
    c.check("quota.other_user_child", wait_child(pid));

    // Root, with CAP_SYS_RESOURCE, is counted but not limited.
    let r = (|| -> Result<(), String> {
        let held: Vec<Ctx> = (0..3).map(|_| Ctx::open()).collect::<Result<_, _>>()?;
        for ctx in &held {
            ok(ctx.reg_mr(buf, 16 << 10, 0), "root's REG_MR")?;
        }
        Ok(())
    })();
    c.check("quota.root_unlimited", r);

    // The holder dies: everything it held is given back with its files.
    // SAFETY: killing and reaping our own child.
    unsafe {
        libc::kill(holder, libc::SIGKILL);
        libc::waitpid(holder, ptr::null_mut(), 0);
    }
    let pid = as_user(1000, |cc| {
        let _held = take_all(cc, "quota.after_exit");
    });
    c.check("quota.after_exit_child", wait_child(pid));
}

/// Quotas of one CQ, QP, listener and tripwire: the second is EDQUOT; destroying the first
/// frees its place.
fn objects(c: &mut Checks, dir: i32) {
    let set = [
        ("max_user_contexts", 2),
        ("max_user_mrs", 2),
        ("max_user_pinned_mb", 1),
        ("max_user_cqs", 1),
        ("max_user_qps", 1),
        ("max_user_listeners", 1),
        ("max_user_tripwires", 1),
    ]
    .iter()
    .try_for_each(|(q, v)| set_quota(q, *v));
    c.check("objects.set", set);
    let pid = as_user(1002, |cc| {
        let r = (|| -> Result<(), String> {
            let ctx = ctx_as(dir)?;
            let objs = Objects::new(&ctx)?;
            cc.check(
                "objects.second_cq",
                fails_with(ctx.create_cq(8, -1).map(|cq| cq.handle), libc::EDQUOT),
            );
            let qp = ok(ctx.create_qp(QP_TYPE_UDP, objs.cq, objs.cq, 8), "CREATE_QP")?;
            cc.check(
                "objects.second_qp",
                fails_with(
                    ctx.create_qp(QP_TYPE_UDP, objs.cq, objs.cq, 8)
                        .map(|q| q.handle),
                    libc::EDQUOT,
                ),
            );
            ok(ctx.destroy(IOCTL_DESTROY_QP, qp.handle), "DESTROY_QP")?;
            cc.check(
                "objects.qp_after_destroy",
                ok(
                    ctx.create_qp(QP_TYPE_UDP, objs.cq, objs.cq, 8),
                    "CREATE_QP again",
                )
                .map(|_| ()),
            );
            let l = ok(ctx.listen(9000), "LISTEN")?;
            cc.check(
                "objects.second_listener",
                fails_with(ctx.listen(9001), libc::EDQUOT),
            );
            ok(ctx.destroy(IOCTL_DESTROY_LISTENER, l), "DESTROY_LISTENER")?;
            cc.check(
                "objects.listener_after_destroy",
                ok(ctx.listen(9001), "LISTEN again").map(|_| ()),
            );
            let mut a = objs.args(0, 1);
            ok(ctx.ioc(IOCTL_CREATE_TRIPWIRE, &mut a), "CREATE_TRIPWIRE")?;
            let mut b = objs.args(1, 2);
            cc.check(
                "objects.second_tripwire",
                fails_with(ctx.ioc(IOCTL_CREATE_TRIPWIRE, &mut b), libc::EDQUOT),
            );
            ok(
                ctx.destroy(IOCTL_DESTROY_TRIPWIRE, a.handle),
                "DESTROY_TRIPWIRE",
            )?;
            let mut b = objs.args(1, 2);
            cc.check(
                "objects.tripwire_after_destroy",
                ok(
                    ctx.ioc(IOCTL_CREATE_TRIPWIRE, &mut b),
                    "CREATE_TRIPWIRE again",
                ),
            );
            Ok(())
        })();
        cc.check("objects.sequence", r);
    });
    c.check("objects.child", wait_child(pid));
}
