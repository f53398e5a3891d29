//! `ioctls`: every ioctl with good and bad arguments, the mmap rules, events, limits.

use crate::*;

/// Every ioctl, good and bad.
pub(crate) fn cmd_ioctls() -> u32 {
    let mut c = Checks::default();
    let mut ctx = match Ctx::open() {
        Ok(ctx) => ctx,
        Err(e) => {
            c.check("open", Err(e));
            return c.failed;
        }
    };
    println!("@ctx={}", ctx.info.ctx);
    println!("@comp_vectors={}", ctx.info.comp_vectors);
    check_argument_rules(&mut c, &ctx);
    let Some(cq) = check_cqs(&mut c, &ctx) else {
        return c.failed;
    };
    let Some(qp) = check_qps(&mut c, &ctx, &cq) else {
        return c.failed;
    };
    let udp = check_bind(&mut c, &ctx, &cq, &qp);
    check_memory_regions(&mut c, &ctx);
    check_connection_calls(&mut c, &ctx, &cq, &udp);
    check_counters(&mut c, &ctx);
    check_addresses_and_mac(&mut c, &ctx);
    check_mmap_rules(&mut c, &ctx, &cq);
    check_unprivileged(&mut c);
    check_context_limit(&mut c, &ctx);
    // epoll over several CQs, one of them sharing the receive CQ's vector.
    c.check("cq.epoll_shared_vector", epoll_shared_vector(&mut ctx));
    // The data path through everything above.
    c.check(
        "udp.exchange",
        udp_exchange(&mut ctx, 7200, 20, "ioctls.udp").map(|_| ()),
    );
    println!("@ioctls.kicks={}", ctx.kicks);
    c.failed
}

/// QUERY_DEVICE, and the rules every argument follows: its size (larger with a zero tail is
/// fine, a non-zero tail E2BIG, too short or zero EINVAL), a bad pointer (EFAULT), an
/// unknown or mistyped ioctl number (ENOTTY).
fn check_argument_rules(c: &mut Checks, ctx: &Ctx) {
    let (fd, info) = (ctx.fd, ctx.info);
    c.check(
        "query_device",
        ensure(
            info.uapi_version == UAPI_VERSION
                && info.abi_version >> 16 == ABI_VERSION_MAJOR as u32
                && info.ctx < info.max_contexts
                && info.max_queue_depth >= 2
                && info.max_mr_pages > 0
                && info.comp_vectors >= 1
                && info.mac != [0; 6]
                && info.size == QUERY_DEVICE_SIZE_V1,
            || format!("{info:?}"),
        ),
    );
    // A larger buffer: the driver writes only what it knows and leaves the rest.
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Bigger {
        q: QueryDevice,
        extra: [u8; 16],
    }
    let mut big: Bigger = zeroed();
    big.q.size = std::mem::size_of::<Bigger>() as u32;
    c.check(
        "size.larger_with_zero_tail",
        ok(ioc(fd, IOCTL_QUERY_DEVICE, &mut big), "QUERY_DEVICE").and_then(|_| {
            ensure(big.q.ctx == info.ctx && big.extra == [0; 16], || {
                "larger argument not handled".into()
            })
        }),
    );
    big = zeroed();
    big.q.size = std::mem::size_of::<Bigger>() as u32;
    big.extra[3] = 1;
    c.check(
        "size.larger_with_nonzero_tail",
        fails_with(ioc(fd, IOCTL_QUERY_DEVICE, &mut big), libc::E2BIG),
    );
    for (name, size, errno) in [
        ("size.zero", 0, libc::EINVAL),
        ("size.short", QUERY_DEVICE_SIZE_V1 - 8, libc::EINVAL),
        ("size.huge", 1 << 20, libc::E2BIG),
    ] {
        let mut q = QueryDevice::new();
        q.size = size;
        c.check(name, fails_with(ctx.ioc(IOCTL_QUERY_DEVICE, &mut q), errno));
    }
    c.check(
        "arg.null_pointer",
        fails_with(
            ioctl_ptr(fd, IOCTL_QUERY_DEVICE, ptr::null_mut()),
            libc::EFAULT,
        ),
    );
    c.check(
        "arg.kernel_pointer",
        fails_with(
            ioctl_ptr(fd, IOCTL_QUERY_DEVICE, 0xffff_8880_0000_0000usize as *mut _),
            libc::EFAULT,
        ),
    );
    let mut q = QueryDevice::new();
    c.check(
        "ioctl.unknown_number",
        fails_with(ioc(fd, iowr(0x7f, 88), &mut q), libc::ENOTTY),
    );
    c.check(
        "ioctl.wrong_type",
        fails_with(ioc(fd, IOCTL_QUERY_DEVICE ^ (1 << 8), &mut q), libc::ENOTTY),
    );
}

/// CREATE_CQ with each field wrong, DESTROY_CQ of bad handles and twice, completion vectors
/// shared evenly among more CQs than vectors, a destroyed CQ's ring offset no longer
/// mappable. Returns the first CQ made, which the later checks use.
fn check_cqs(c: &mut Checks, ctx: &Ctx) -> Option<Cq> {
    let (fd, info) = (ctx.fd, ctx.info);
    let efd = eventfd();
    let cq = ctx.create_cq(64, efd);
    c.check(
        "cq.create",
        ok(cq.as_ref().map(|_| ()).map_err(|e| *e), "CREATE_CQ"),
    );
    let Ok(cq) = cq else { return None };
    // Each case is a good request (8 entries, any vector, no eventfd) with one field wrong.
    type Wrong<'a> = &'a dyn Fn(&mut CreateCq);
    let cases: [(&str, Wrong, i32); 7] = [
        ("cq.depth_zero", &|a| a.depth = 0, libc::EINVAL),
        ("cq.depth_not_power_of_two", &|a| a.depth = 3, libc::EINVAL),
        ("cq.depth_huge", &|a| a.depth = 1 << 20, libc::EINVAL),
        (
            "cq.bad_vector",
            &|a| a.comp_vector = info.comp_vectors,
            libc::EINVAL,
        ),
        // The context's own file: not an eventfd.
        ("cq.not_an_eventfd", &|a| a.eventfd = fd, libc::EINVAL),
        ("cq.bad_eventfd", &|a| a.eventfd = 9999, libc::EBADF),
        ("cq.reserved_nonzero", &|a| a.reserved = 1, libc::EINVAL),
    ];
    for (name, wrong, errno) in cases {
        let mut a = CreateCq::new();
        a.depth = 8;
        a.comp_vector = ANY_VECTOR;
        a.eventfd = -1;
        wrong(&mut a);
        c.check(name, fails_with(ctx.ioc(IOCTL_CREATE_CQ, &mut a), errno));
    }
    c.check(
        "cq.destroy_bad_handle",
        fails_with(ctx.destroy(IOCTL_DESTROY_CQ, 0xdead_beef), libc::ENOENT),
    );
    c.check(
        "cq.destroy_zero_handle",
        fails_with(ctx.destroy(IOCTL_DESTROY_CQ, 0), libc::ENOENT),
    );
    // More CQs than completion vectors: vectors are shared, spread evenly.
    let many: Vec<Result<Cq, i32>> = (0..(info.comp_vectors + 5))
        .map(|_| ctx.create_cq(4, efd))
        .collect();
    let mut per_vector = vec![0u32; info.comp_vectors as usize];
    for cqr in many.iter().flatten() {
        per_vector[cqr.vector as usize] += 1;
    }
    c.check(
        "cq.vectors_shared",
        ensure(
            many.iter().all(|r| r.is_ok())
                && per_vector.iter().max().unwrap_or(&0) - per_vector.iter().min().unwrap_or(&0)
                    <= 1,
            || format!("CQs per vector {per_vector:?}"),
        ),
    );
    for cqr in many.into_iter().flatten() {
        let _ = ctx.destroy(IOCTL_DESTROY_CQ, cqr.handle);
        unmap(cqr.ring, cqr.ring_len);
    }
    let cq2 = ctx.create_cq(8, -1).expect("second CQ");
    destroy_twice(
        c,
        ctx,
        (IOCTL_DESTROY_CQ, "DESTROY_CQ"),
        cq2.handle,
        ["cq.destroy", "cq.double_destroy"],
    );
    // The ring mapping outlives the CQ (the pages stay until unmapped).
    // SAFETY: reading the still-mapped ring.
    let _ = unsafe { ptr::read_volatile(cq2.ring) };
    c.check(
        "mmap.destroyed_ring_offset",
        fails_with(map(fd, cq2.ring_offset, cq2.ring_len), libc::EINVAL),
    );
    unmap(cq2.ring, cq2.ring_len);
    Some(cq)
}

/// CREATE_QP with a foreign CQ, a bad type or depth; a CQ in use cannot go; DESTROY_QP twice;
/// a destroyed QP's ring no longer mappable. Returns a UDP QP on `cq`.
fn check_qps(c: &mut Checks, ctx: &Ctx, cq: &Cq) -> Option<Qp> {
    let fd = ctx.fd;
    let qp = ctx.create_qp(QP_TYPE_UDP, cq.handle, cq.handle, 8);
    c.check(
        "qp.create",
        ok(qp.as_ref().map(|_| ()).map_err(|e| *e), "CREATE_QP"),
    );
    let Ok(qp) = qp else { return None };
    for (name, qp_type, send_cq, depth, errno) in [
        ("qp.foreign_cq", QP_TYPE_UDP, 0xdead_beef, 8, libc::ENOENT),
        ("qp.bad_type", 9, cq.handle, 8, libc::EINVAL),
        ("qp.bad_depth", QP_TYPE_UDP, cq.handle, 5, libc::EINVAL),
    ] {
        let r = ctx.create_qp(qp_type, send_cq, cq.handle, depth);
        c.check(name, fails_with(r.map(|_| ()), errno));
    }
    c.check(
        "cq.destroy_while_used",
        fails_with(ctx.destroy(IOCTL_DESTROY_CQ, cq.handle), libc::EBUSY),
    );
    let qp2 = ctx
        .create_qp(QP_TYPE_UDP, cq.handle, cq.handle, 4)
        .expect("second QP");
    destroy_twice(
        c,
        ctx,
        (IOCTL_DESTROY_QP, "DESTROY_QP"),
        qp2.handle,
        ["qp.destroy", "qp.double_destroy"],
    );
    c.check(
        "mmap.destroyed_qp_ring",
        fails_with(map(fd, qp2.sq_offset, qp2.sq_len), libc::EINVAL),
    );
    unmap(qp2.sq, qp2.sq_len);
    unmap(qp2.rq, qp2.rq_len);
    Some(qp)
}

/// BIND of `qp` to an ephemeral port, twice, of a bad QP, to a port in use, with reserved
/// bits. Returns another UDP QP on `cq`, left unbound.
fn check_bind(c: &mut Checks, ctx: &Ctx, cq: &Cq, qp: &Qp) -> Qp {
    let port = ctx.bind(qp.handle, 0);
    c.check(
        "bind.ephemeral",
        ok(port.map(|p| ensure(p != 0, || "port 0".into())), "BIND").and_then(|r| r),
    );
    c.check(
        "bind.twice",
        fails_with(ctx.bind(qp.handle, 0), libc::EINVAL),
    );
    c.check(
        "bind.bad_qp",
        fails_with(ctx.bind(0xdead_beef, 0), libc::ENOENT),
    );
    let qp3 = ctx
        .create_qp(QP_TYPE_UDP, cq.handle, cq.handle, 4)
        .expect("third QP");
    if let Ok(p) = port {
        c.check(
            "bind.port_in_use",
            fails_with(ctx.bind(qp3.handle, p), libc::EADDRINUSE),
        );
    }
    let mut b = Bind::new();
    b.qp = qp3.handle;
    b.reserved = 1;
    c.check(
        "bind.reserved_nonzero",
        fails_with(ctx.ioc(IOCTL_BIND, &mut b), libc::EINVAL),
    );
    qp3
}

/// REG_MR of unaligned, empty, huge, wrapping, kernel, unmapped and read-only memory and
/// with bad access bits; DEREG_MR twice and of a bad key.
fn check_memory_regions(c: &mut Checks, ctx: &Ctx) {
    let info = ctx.info;
    let buf = anon(16 * PAGE);
    let base = buf as u64;
    c.check(
        "mr.unaligned",
        ok(
            ctx.reg_mr(base + 123, 10_000, MR_ACCESS_LOCAL_WRITE),
            "REG_MR",
        )
        .map(|_| ()),
    );
    let lkey = ctx.reg_mr(base, 4 * PAGE as u64, MR_ACCESS_LOCAL_WRITE);
    c.check("mr.register", ok(lkey, "REG_MR").map(|_| ()));
    c.check(
        "mr.zero_length",
        fails_with(ctx.reg_mr(base, 0, 0), libc::EINVAL),
    );
    let huge = (info.max_mr_pages as u64 + 1) * PAGE as u64;
    c.check(
        "mr.huge",
        fails_with(ctx.reg_mr(base, huge, 0), libc::EINVAL),
    );
    c.check(
        "mr.wrapping",
        fails_with(ctx.reg_mr(u64::MAX - 100, 1000, 0), libc::EFAULT),
    );
    c.check(
        "mr.kernel_address",
        fails_with(ctx.reg_mr(0xffff_8880_0000_0000, 4096, 0), libc::EFAULT),
    );
    c.check(
        "mr.bad_access",
        fails_with(ctx.reg_mr(base, 4096, 0x80), libc::EINVAL),
    );
    let hole = anon(4 * PAGE);
    unmap(hole, 4 * PAGE);
    c.check(
        "mr.unmapped",
        fails_with(ctx.reg_mr(hole as u64, 4096, 0), libc::EFAULT),
    );
    let ro = mmap_flags(
        -1,
        0,
        PAGE,
        libc::PROT_READ,
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
    )
    .unwrap();
    c.check(
        "mr.read_only_memory_writable",
        fails_with(
            ctx.reg_mr(ro as u64, 64, MR_ACCESS_LOCAL_WRITE),
            libc::EFAULT,
        ),
    );
    c.check(
        "mr.read_only_memory_readable",
        ok(ctx.reg_mr(ro as u64, 64, 0), "REG_MR read-only").map(|_| ()),
    );
    if let Ok(l) = lkey {
        destroy_twice(
            c,
            ctx,
            (IOCTL_DEREG_MR, "DEREG_MR"),
            l,
            ["mr.deregister", "mr.double_deregister"],
        );
    }
    c.check(
        "mr.bad_lkey",
        fails_with(ctx.destroy(IOCTL_DEREG_MR, 0), libc::ENOENT),
    );
}

/// LISTEN, ACCEPT, CONNECT and CLOSE: their errors, and cancellation reported as events (an
/// accept whose listener goes, a connect whose QP goes); a connect or close on the UDP QP
/// `udp` fails in its event. Reading the context's file: EAGAIN without an event (the file
/// is left non-blocking), EINVAL for a buffer too small.
fn check_connection_calls(c: &mut Checks, ctx: &Ctx, cq: &Cq, udp: &Qp) {
    let fd = ctx.fd;
    let l = ctx.listen(5000);
    c.check("listen", ok(l, "LISTEN").map(|_| ()));
    c.check(
        "listen.port_in_use",
        fails_with(ctx.listen(5000), libc::EADDRINUSE),
    );
    c.check("listen.port_zero", fails_with(ctx.listen(0), libc::EINVAL));
    let tcp = ctx
        .create_qp(QP_TYPE_TCP, cq.handle, cq.handle, 4)
        .expect("TCP QP");
    // SAFETY: fcntl on our own descriptor.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    unsafe { libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) };
    let mut evbuf = [0u8; 2 * EVENT_SIZE as usize];
    c.check(
        "read.no_event_nonblocking",
        fails_with(read_fd(fd, &mut evbuf), libc::EAGAIN),
    );
    c.check(
        "read.buffer_too_small",
        fails_with(read_fd(fd, &mut evbuf[..10]), libc::EINVAL),
    );
    if let Ok(l) = l {
        check_accept(c, ctx, l, &tcp);
    }
    check_connect_and_close(c, ctx, &tcp, udp);
}

/// ACCEPT of `tcp` on listener `l`, and with a bad listener or QP; a pending accept makes no
/// event until its listener is destroyed (twice: the second finds nothing), which cancels it.
fn check_accept(c: &mut Checks, ctx: &Ctx, l: u32, tcp: &Qp) {
    let fd = ctx.fd;
    let mut acc = Accept {
        listener: l,
        qp: tcp.handle,
        user_data: 0xacce,
        ..Accept::new()
    };
    c.check(
        "accept.submit",
        ok(ctx.ioc(IOCTL_ACCEPT, &mut acc), "ACCEPT"),
    );
    let mut bad = acc;
    bad.listener = 0xdead_beef;
    c.check(
        "accept.bad_listener",
        fails_with(ctx.ioc(IOCTL_ACCEPT, &mut bad), libc::ENOENT),
    );
    bad = acc;
    bad.qp = 0xdead_beef;
    c.check(
        "accept.bad_qp",
        fails_with(ctx.ioc(IOCTL_ACCEPT, &mut bad), libc::ENOENT),
    );
    c.check(
        "accept.pending_no_event",
        ensure(
            poll1(fd, libc::POLLIN, Duration::from_millis(200)) == 0,
            || "event before cancellation".into(),
        ),
    );
    destroy_twice(
        c,
        ctx,
        (IOCTL_DESTROY_LISTENER, "DESTROY_LISTENER"),
        l,
        ["listener.destroy", "listener.double_destroy"],
    );
    c.check(
        "accept.cancelled_event",
        expect_event(fd, EVENT_ACCEPT, -libc::ECANCELED, tcp.handle, 0xacce),
    );
}

/// CONNECT of `tcp` where nothing listens, cancelled (or refused) when the QP is destroyed;
/// CONNECT and CLOSE on the UDP QP `udp` submitted but failed in their events; both of a
/// bad QP.
fn check_connect_and_close(c: &mut Checks, ctx: &Ctx, tcp: &Qp, udp: &Qp) {
    let fd = ctx.fd;
    // SET_QP_OPT: keepalive on the TCP QP (before it connects), refused elsewhere.
    let keepalive = |qp: u32, idle: u32| {
        let mut a = SetQpOpt::new();
        a.qp = qp;
        a.option = QP_OPT_KEEPALIVE;
        (a.keepalive_idle, a.keepalive_interval, a.keepalive_probes) = (idle, 5, 3);
        ctx.ioc(IOCTL_SET_QP_OPT, &mut a)
    };
    c.check(
        "set_qp_opt.keepalive",
        ok(keepalive(tcp.handle, 60), "SET_QP_OPT"),
    );
    c.check(
        "set_qp_opt.out_of_range",
        fails_with(keepalive(tcp.handle, 40000), libc::EINVAL),
    );
    c.check(
        "set_qp_opt.udp_qp",
        fails_with(keepalive(udp.handle, 60), libc::EINVAL),
    );
    c.check(
        "set_qp_opt.bad_qp",
        fails_with(keepalive(0xdead_beef, 60), libc::ENOENT),
    );
    // A connect of `qp` to [::1]:5001, where nothing listens.
    let connect = |qp: u32, user_data: u64| ctx.connect(qp, LOOPBACK, 5001, user_data);
    c.check("connect.submit", ok(connect(tcp.handle, 0xc0), "CONNECT"));
    c.check(
        "qp.destroy_with_pending_connect",
        ok(ctx.destroy(IOCTL_DESTROY_QP, tcp.handle), "DESTROY_QP"),
    );
    // Nothing listens on that port: the connect waits until the QP goes (no TCP engine yet)
    // or is refused (with one).
    c.check(
        "connect.cancelled_event",
        expect_event_of(
            fd,
            EVENT_CONNECT,
            &[-libc::ECANCELED, -libc::ECONNREFUSED],
            tcp.handle,
            0xc0,
        ),
    );
    // Connect on a UDP QP is refused by the device: the event says so.
    c.check(
        "connect.udp_qp_submit",
        ok(connect(udp.handle, 0xc1), "CONNECT"),
    );
    c.check(
        "connect.udp_qp_event",
        expect_event(fd, EVENT_CONNECT, -libc::EINVAL, udp.handle, 0xc1),
    );
    c.check(
        "connect.bad_qp",
        fails_with(connect(0xdead_beef, 0xc1), libc::ENOENT),
    );
    c.check("close.submit", ok(ctx.close(udp.handle, 0xc105e), "CLOSE"));
    c.check(
        "close.not_connected_event",
        expect_event(fd, EVENT_CLOSE, -libc::EINVAL, udp.handle, 0xc105e),
    );
    c.check(
        "close.bad_qp",
        fails_with(ctx.close(0, 0xc105e), libc::ENOENT),
    );
}

/// QUERY_STATS: every counter, the admin commands made so far counted.
fn check_counters(c: &mut Checks, ctx: &Ctx) {
    c.check(
        "stats",
        ok(ctx.stats(), "QUERY_STATS").and_then(|s| {
            ensure(
                s.count as usize == s.counters.len()
                    && s.counters[STAT_ADMIN_COMMANDS as usize] > 0,
                || format!("count {} admin_commands {}", s.count, s.counters[0]),
            )
        }),
    );
}

/// fd51:5050::99: the address the checks add and delete (and an unprivileged process may
/// not).
const TEST_ADDR: [u8; 16] = std::net::Ipv6Addr::new(0xfd51, 0x5050, 0, 0, 0, 0, 0, 0x99).octets();

/// ADD_ADDR and DEL_ADDR (sysfs lists the address; twice, missing, a bad prefix), SET_MAC
/// (QUERY_DEVICE and sysfs show it; multicast refused), the MAC restored. Needs root.
fn check_addresses_and_mac(c: &mut Checks, ctx: &Ctx) {
    let mut a = Addr::new();
    a.addr = TEST_ADDR;
    a.prefix_len = 64;
    c.check("addr.add", ok(ctx.ioc(IOCTL_ADD_ADDR, &mut a), "ADD_ADDR"));
    c.check(
        "addr.sysfs_lists_it",
        ensure(sysfs("addresses").contains("fd51:5050::99/64"), || {
            sysfs("addresses")
        }),
    );
    c.check(
        "addr.add_twice",
        fails_with(ctx.ioc(IOCTL_ADD_ADDR, &mut a), libc::EADDRINUSE),
    );
    c.check(
        "addr.delete",
        ok(ctx.ioc(IOCTL_DEL_ADDR, &mut a), "DEL_ADDR"),
    );
    c.check(
        "addr.delete_missing",
        fails_with(ctx.ioc(IOCTL_DEL_ADDR, &mut a), libc::ENOENT),
    );
    a.prefix_len = 0;
    c.check(
        "addr.bad_prefix",
        fails_with(ctx.ioc(IOCTL_ADD_ADDR, &mut a), libc::EINVAL),
    );
    let old_mac = ctx.info.mac;
    let mut m = SetMac::new();
    m.mac = [0x02, 0x51, 0x50, 0x00, 0x00, 0x42];
    c.check(
        "mac.set",
        ok(ctx.ioc(IOCTL_SET_MAC, &mut m), "SET_MAC").and_then(|_| {
            let mut q = QueryDevice::new();
            ok(ctx.ioc(IOCTL_QUERY_DEVICE, &mut q), "QUERY_DEVICE")?;
            ensure(
                q.mac == m.mac && sysfs("mac") == "02:51:50:00:00:42",
                || format!("query {:02x?}, sysfs {}", q.mac, sysfs("mac")),
            )
        }),
    );
    m.mac = [0x01, 0, 0, 0, 0, 1];
    c.check(
        "mac.multicast",
        fails_with(ctx.ioc(IOCTL_SET_MAC, &mut m), libc::EINVAL),
    );
    m.mac = old_mac;
    c.check("mac.restore", ok(ctx.ioc(IOCTL_SET_MAC, &mut m), "SET_MAC"));
}

/// mmap of the doorbell page: two pages, private or executable refused; an unknown offset;
/// `cq`'s ring at the wrong length.
fn check_mmap_rules(c: &mut Checks, ctx: &Ctx, cq: &Cq) {
    let (fd, info) = (ctx.fd, ctx.info);
    c.check(
        "mmap.doorbell_two_pages",
        fails_with(map(fd, info.doorbell_offset, 2 * PAGE), libc::EINVAL),
    );
    c.check(
        "mmap.private",
        fails_with(
            mmap_flags(
                fd,
                info.doorbell_offset,
                PAGE,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
            ),
            libc::EINVAL,
        ),
    );
    c.check(
        "mmap.exec",
        fails_with(
            mmap_flags(
                fd,
                info.kick_offset,
                PAGE,
                libc::PROT_READ | libc::PROT_EXEC,
                libc::MAP_SHARED,
            ),
            libc::EPERM,
        ),
    );
    c.check(
        "mmap.unknown_offset",
        fails_with(map(fd, 0x1234_5000, PAGE), libc::EINVAL),
    );
    c.check(
        "mmap.ring_wrong_length",
        fails_with(map(fd, cq.ring_offset, cq.ring_len + PAGE), libc::EINVAL),
    );
}

/// In a child process without root and with a 64 KiB RLIMIT_MEMLOCK: configuration needs
/// CAP_NET_ADMIN (EPERM), and pinned memory, rings included, counts against the limit
/// (ENOMEM) until it is released.
fn check_unprivileged(c: &mut Checks) {
    flush();
    // SAFETY: fork in a single-threaded program; the child only makes system calls and
    // prints, then _exits.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let mut cc = Checks::default();
        // Opened before dropping privileges: the guest image's root directory is not
        // searchable by other users. What is checked here is at ioctl time anyway.
        let opened = Ctx::open();
        let lim = libc::rlimit {
            rlim_cur: 64 << 10,
            rlim_max: 64 << 10,
        };
        // SAFETY: plain system calls.
        let dropped = unsafe {
            libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) == 0
                && libc::setgid(65534) == 0
                && libc::setuid(65534) == 0
        };
        cc.check("unprivileged.drop", ensure(dropped, || errname(errno())));
        match opened {
            Ok(uctx) => check_unprivileged_calls(&mut cc, &uctx),
            Err(e) => cc.check("unprivileged.open", Err(e)),
        }
        flush();
        // SAFETY: ending the child without running the parent's destructors.
        unsafe { libc::_exit(cc.failed.min(1) as i32) };
    }
    c.check("unprivileged.child", wait_child(pid));
}

/// What the unprivileged process's context `uctx` may not do (configuration: EPERM) and
/// may pin (ENOMEM over its 64 KiB RLIMIT_MEMLOCK, registered regions and rings counted).
fn check_unprivileged_calls(c: &mut Checks, uctx: &Ctx) {
    let mut a = Addr::new();
    a.addr = TEST_ADDR;
    a.prefix_len = 64;
    for (name, req) in [
        ("unprivileged.add_addr", IOCTL_ADD_ADDR),
        ("unprivileged.del_addr", IOCTL_DEL_ADDR),
    ] {
        c.check(name, fails_with(uctx.ioc(req, &mut a), libc::EPERM));
    }
    let mut m = SetMac::new();
    m.mac = [0x02, 0, 0, 0, 0, 7];
    c.check(
        "unprivileged.set_mac",
        fails_with(uctx.ioc(IOCTL_SET_MAC, &mut m), libc::EPERM),
    );
    // Rings are locked memory too: a 128 KiB CQ ring is over 64 KiB.
    c.check(
        "memlock.ring_over_limit",
        fails_with(uctx.create_cq(2048, -1).map(|_| ()), libc::ENOMEM),
    );
    let small_cq = uctx.create_cq(64, -1);
    c.check(
        "memlock.ring_within_limit",
        ok(
            small_cq.as_ref().map(|_| ()).map_err(|e| *e),
            "CREATE_CQ 4 KiB",
        ),
    );
    if let Ok(cq) = small_cq {
        let _ = uctx.destroy(IOCTL_DESTROY_CQ, cq.handle);
    }
    let big = anon(1 << 20);
    c.check(
        "memlock.over_limit",
        fails_with(
            uctx.reg_mr(big as u64, 1 << 20, MR_ACCESS_LOCAL_WRITE),
            libc::ENOMEM,
        ),
    );
    let small = uctx.reg_mr(big as u64, 16 << 10, MR_ACCESS_LOCAL_WRITE);
    c.check(
        "memlock.within_limit",
        ok(small, "REG_MR 16 KiB").map(|_| ()),
    );
    c.check(
        "memlock.limit_counts_registered",
        fails_with(
            uctx.reg_mr(big as u64 + (16 << 10), 60 << 10, 0),
            libc::ENOMEM,
        ),
    );
    if let Ok(l) = small {
        let _ = uctx.destroy(IOCTL_DEREG_MR, l);
        c.check(
            "memlock.released_by_deregister",
            ok(
                uctx.reg_mr(big as u64, 60 << 10, 0),
                "REG_MR after deregister",
            )
            .map(|_| ()),
        );
    }
}

/// As many contexts as the device has doorbell pages, then ENOSPC; a closed one's place
/// can be taken again.
fn check_context_limit(c: &mut Checks, ctx: &Ctx) {
    let info = ctx.info;
    let mut extra = Vec::new();
    let last = loop {
        match open_dev(0) {
            Ok(fd) => extra.push(fd),
            Err(e) => break e,
        }
        if extra.len() > 1000 {
            break 0;
        }
    };
    println!("@contexts.opened={}", extra.len() + 1);
    c.check(
        "contexts.limit",
        ensure(
            last == libc::ENOSPC && extra.len() as u32 + 1 == info.max_contexts,
            || format!("{} contexts, then {}", extra.len() + 1, errname(last)),
        ),
    );
    extra.drain(..).for_each(close);
    c.check(
        "contexts.reusable",
        ok(open_dev(0).map(close), "open after closing"),
    );
}

/// Destroys `handle` with the destroy ioctl `req` (named `what` in a failure): check
/// `name` wants it done, check `again` wants the same call once more to find nothing
/// (ENOENT): a handle is gone once destroyed.
fn destroy_twice(
    c: &mut Checks,
    ctx: &Ctx,
    (req, what): (u32, &str),
    handle: u32,
    [name, again]: [&str; 2],
) {
    c.check(name, ok(ctx.destroy(req, handle), what));
    c.check(again, fails_with(ctx.destroy(req, handle), libc::ENOENT));
}

/// Waits for the context's next event and checks it.
pub(crate) fn expect_event(
    fd: i32,
    kind: u32,
    status: i32,
    qp: u32,
    user_data: u64,
) -> Result<(), String> {
    expect_event_of(fd, kind, &[status], qp, user_data)
}

/// As [`expect_event`], with any of `statuses`.
pub(crate) fn expect_event_of(
    fd: i32,
    kind: u32,
    statuses: &[i32],
    qp: u32,
    user_data: u64,
) -> Result<(), String> {
    let rev = poll1(fd, libc::POLLIN, TIMEOUT);
    ensure(rev & libc::POLLIN != 0, || {
        format!("no event within {TIMEOUT:?} (revents {rev:#x})")
    })?;
    let mut buf = [0u8; EVENT_SIZE as usize];
    let n = ok(read_fd(fd, &mut buf), "read event")?;
    ensure(n == EVENT_SIZE as usize, || format!("read {n} bytes"))?;
    // SAFETY: EVENT_SIZE bytes of a repr(C) plain-integer structure.
    let ev: Event = unsafe { ptr::read_unaligned(buf.as_ptr().cast()) };
    ensure(
        ev.kind == kind
            && statuses.contains(&ev.status)
            && ev.qp == qp
            && ev.user_data == user_data,
        || {
            format!(
                "event {ev:?}, expected kind {kind} status {statuses:?} qp {qp} user_data {user_data:#x}"
            )
        },
    )
}

/// Waits for as many events as `want` lists, `(kind, status, qp, user_data)` each, in any
/// order (commands that end together, e.g. at a reset, complete in no set order).
pub(crate) fn expect_events(fd: i32, want: &[(u32, i32, u32, u64)]) -> Result<(), String> {
    let mut left = want.to_vec();
    while !left.is_empty() {
        let rev = poll1(fd, libc::POLLIN, TIMEOUT);
        ensure(rev & libc::POLLIN != 0, || {
            format!("no event within {TIMEOUT:?} (revents {rev:#x}); still expected {left:?}")
        })?;
        let ev = read_event_now(fd)?;
        let i = left
            .iter()
            .position(|&(k, s, q, u)| (k, s, q, u) == (ev.kind, ev.status, ev.qp, ev.user_data))
            .ok_or_else(|| format!("event {ev:?}, expected one of {left:?}"))?;
        left.swap_remove(i);
    }
    Ok(())
}

pub(crate) fn wait_child(pid: i32) -> Result<(), String> {
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    ensure(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        || format!("child failed (wait status {status:#x})"),
    )
}

/// A blocking wait in epoll on two CQ eventfds and the context's file, with another CQ
/// created on the receive CQ's MSI-X vector: the interrupt wakes every CQ on its vector,
/// and the one that has the completion is among them.
pub(crate) fn epoll_shared_vector(ctx: &mut Ctx) -> Result<(), String> {
    let mut p = Pair::new(ctx, 7250)?;
    p.post_recv(ctx, 0);
    let other_efd = eventfd();
    let mut a = CreateCq::new();
    a.depth = 4;
    a.comp_vector = p.rcq.vector;
    a.eventfd = other_efd;
    ok(
        ctx.ioc(IOCTL_CREATE_CQ, &mut a),
        "CREATE_CQ on a shared vector",
    )?;
    ensure(a.comp_vector_out == p.rcq.vector, || {
        format!(
            "asked for vector {}, got {}",
            p.rcq.vector, a.comp_vector_out
        )
    })?;
    // SAFETY: plain system calls on descriptors this process owns.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    ensure(ep >= 0, || format!("epoll_create1: {}", errname(errno())))?;
    for (fd, tag) in [(p.efd, 1u64), (other_efd, 2), (ctx.fd, 3)] {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: tag,
        };
        // SAFETY: as above.
        let r = unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev) };
        ensure(r == 0, || format!("epoll_ctl: {}", errname(errno())))?;
    }
    read_eventfd(p.efd);
    ctx.arm(&mut p.rcq);
    let src = p.send_slot(0) as *mut u8;
    for i in 0..32 {
        // SAFETY: inside the registered buffer.
        unsafe { *src.add(i) = pattern(0, i) };
    }
    let sge = Sge {
        addr: src as u64,
        length: 32,
        lkey: p.lkey,
    };
    ctx.post(&mut p.a, true, &send_wqe(0, p.port_b, sge));
    // A wake-up of the receive CQ's eventfd that finds its ring empty (an interrupt the
    // vector raised for some other CQ) arms again and goes on waiting, as a real consumer
    // does; the receive must come through a wake-up of its own eventfd.
    let deadline = Instant::now() + TIMEOUT;
    let mut woke: Vec<u64> = Vec::new();
    let received = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 3];
        // SAFETY: waiting into a three-element array.
        let n = unsafe { libc::epoll_wait(ep, events.as_mut_ptr(), 3, left.as_millis() as i32) };
        let ready: Vec<u64> = events[..n.max(0) as usize].iter().map(|e| e.u64).collect();
        woke.extend(&ready);
        if n <= 0 {
            break None;
        }
        if ready.contains(&1) {
            read_eventfd(p.efd);
            match ctx.poll_cq(&mut p.rcq) {
                Some(r) => break Some(r),
                None => ctx.arm(&mut p.rcq),
            }
        }
        // The other CQ on the vector wakes too; clear it so epoll does not spin on it.
        read_eventfd(other_efd);
    };
    close(ep);
    let r = received.ok_or_else(|| {
        format!("no receive completion after wake-ups {woke:?} (1: the receive CQ's eventfd)")
    })?;
    p.check_recv(&r, 0, 32)?;
    ctx.wait_cq(&mut p.scq).ok_or("no send completion")?;
    let _ = ctx.destroy(IOCTL_DESTROY_CQ, a.handle);
    close(other_efd);
    Ok(())
}
