//! `ports`: the port split between the guest kernel's sockets and the device's QPs. Every
//! port a QP or listener takes is reserved in the kernel by the driver, so a kernel socket
//! and a QP never hold the same one: whichever comes second gets EADDRINUSE, and the port
//! is the kernel's again once the QP, the listener, its context or its process is gone,
//! or the device is reset or removed.

use std::net::{TcpListener, UdpSocket};

use crate::*;

/// What a kernel socket of `proto` gets binding `addr` (an address without the port)
/// port `port`: Ok, or the errno.
fn kernel_bind(proto: u8, addr: &str, port: u16) -> Result<(), i32> {
    let at = format!("{addr}:{port}");
    let r = if proto == QP_TYPE_TCP {
        TcpListener::bind(&at).map(drop)
    } else {
        UdpSocket::bind(&at).map(drop)
    };
    r.map_err(|e| e.raw_os_error().unwrap_or(0))
}

/// A kernel socket of `proto` bound to a port the kernel chose on `addr`, and the port.
fn kernel_socket(proto: u8, addr: &str) -> Result<(Box<dyn std::any::Any>, u16), String> {
    let at = format!("{addr}:0");
    let r = if proto == QP_TYPE_TCP {
        TcpListener::bind(&at).and_then(|s| {
            let p = s.local_addr()?.port();
            Ok((Box::new(s) as Box<dyn std::any::Any>, p))
        })
    } else {
        UdpSocket::bind(&at).and_then(|s| {
            let p = s.local_addr()?.port();
            Ok((Box::new(s) as Box<dyn std::any::Any>, p))
        })
    };
    r.map_err(|e| format!("kernel socket on {at}: {e}"))
}

/// A port no kernel socket of `proto` holds at the moment (the kernel's choice, let go).
fn free_port(proto: u8) -> Result<u16, String> {
    kernel_socket(proto, "[::]").map(|(_, p)| p)
}

fn proto_name(proto: u8) -> &'static str {
    if proto == QP_TYPE_TCP {
        "tcp"
    } else {
        "udp"
    }
}

/// A kernel socket of `proto` on port `port` is refused, on IPv6 and on IPv4.
fn kernel_refused(proto: u8, port: u16) -> Result<(), String> {
    fails_with(kernel_bind(proto, "[::]", port), libc::EADDRINUSE)
        .map_err(|e| format!("[::]:{port}: {e}"))?;
    fails_with(kernel_bind(proto, "0.0.0.0", port), libc::EADDRINUSE)
        .map_err(|e| format!("0.0.0.0:{port}: {e}"))
}

/// A kernel socket of `proto` may have port `port` (on every address).
fn kernel_allowed(proto: u8, port: u16) -> Result<(), String> {
    ok(
        kernel_bind(proto, "[::]", port),
        &format!("kernel bind [::]:{port}"),
    )
}

/// A QP of `proto` with its own CQ, its rings unmapped again (so closing the file
/// releases the context).
fn bare_qp(ctx: &Ctx, proto: u8) -> Result<u32, String> {
    let (qp, cq) = qp_with_cq(ctx, proto)?;
    unmap_tcp_qp(&qp, &cq);
    Ok(qp.handle)
}

fn qp_with_cq(ctx: &Ctx, proto: u8) -> Result<(Qp, Cq), String> {
    let cq = ok(ctx.create_cq(8, -1), "CREATE_CQ")?;
    let qp = ok(ctx.create_qp(proto, cq.handle, cq.handle, 4), "CREATE_QP")?;
    Ok((qp, cq))
}

pub(crate) fn cmd_ports() -> u32 {
    let mut c = Checks::default();
    let ctx = match Ctx::open() {
        Ok(ctx) => ctx,
        Err(e) => {
            c.check("ports.open", Err(e));
            return c.failed;
        }
    };
    for proto in [QP_TYPE_UDP, QP_TYPE_TCP] {
        kernel_first(&mut c, &ctx, proto);
        qp_first(&mut c, &ctx, proto);
        ephemeral(&mut c, &ctx, proto);
    }
    listener(&mut c, &ctx);
    connect(&mut c, &ctx);
    drop(ctx);
    context_close(&mut c);
    process_exit(&mut c);
    device_gone(&mut c, false);
    device_gone(&mut c, true);
    c.failed
}

/// A port a kernel socket holds (IPv6 or IPv4) is refused to a QP's BIND with EADDRINUSE;
/// the QP keeps no part of it and binds elsewhere.
fn kernel_first(c: &mut Checks, ctx: &Ctx, proto: u8) {
    let name = proto_name(proto);
    let r = (|| {
        let qp = bare_qp(ctx, proto)?;
        for addr in ["[::]", "0.0.0.0"] {
            let (_sock, p) = kernel_socket(proto, addr)?;
            fails_with(ctx.bind(qp, p), libc::EADDRINUSE)
                .map_err(|e| format!("BIND to {p} held on {addr}: {e}"))?;
        }
        let p = ok(ctx.bind(qp, 0), "BIND 0 after the refusals")?;
        ensure(p != 0, || "port 0".into())?;
        ok(ctx.destroy(IOCTL_DESTROY_QP, qp), "DESTROY_QP")
    })();
    c.check(&format!("ports.{name}.kernel_holds_bind_refused"), r);
}

/// A port a QP binds is refused to kernel sockets (IPv6 and IPv4), is the kernel's again
/// once the QP is destroyed; the other protocol's port of the same number stays free.
fn qp_first(c: &mut Checks, ctx: &Ctx, proto: u8) {
    let name = proto_name(proto);
    let other = if proto == QP_TYPE_TCP {
        QP_TYPE_UDP
    } else {
        QP_TYPE_TCP
    };
    let r = (|| {
        let qp = bare_qp(ctx, proto)?;
        let p = free_port(proto)?;
        let got = ok(ctx.bind(qp, p), &format!("BIND {p}"))?;
        ensure(got == p, || format!("bound {got}, asked {p}"))?;
        kernel_refused(proto, p)?;
        kernel_allowed(other, p).map_err(|e| format!("the other protocol: {e}"))?;
        ok(ctx.destroy(IOCTL_DESTROY_QP, qp), "DESTROY_QP")?;
        kernel_allowed(proto, p).map_err(|e| format!("after DESTROY_QP: {e}"))
    })();
    c.check(&format!("ports.{name}.qp_bind_refuses_kernel"), r);
}

/// BIND to port 0: the port the QP gets is refused to kernel sockets while it has it.
fn ephemeral(c: &mut Checks, ctx: &Ctx, proto: u8) {
    let name = proto_name(proto);
    let r = (|| {
        let qp = bare_qp(ctx, proto)?;
        let p = ok(ctx.bind(qp, 0), "BIND 0")?;
        ensure(p != 0, || "port 0".into())?;
        kernel_refused(proto, p)?;
        ok(ctx.destroy(IOCTL_DESTROY_QP, qp), "DESTROY_QP")?;
        kernel_allowed(proto, p).map_err(|e| format!("after DESTROY_QP: {e}"))
    })();
    c.check(&format!("ports.{name}.ephemeral_refused_to_kernel"), r);
}

/// LISTEN: refused on a port a kernel socket holds; its own port refused to kernel
/// sockets until the listener is destroyed.
fn listener(c: &mut Checks, ctx: &Ctx) {
    let r = (|| {
        let (_sock, p) = kernel_socket(QP_TYPE_TCP, "[::]")?;
        fails_with(ctx.listen(p), libc::EADDRINUSE)
    })();
    c.check("ports.listen.kernel_holds_refused", r);
    let r = (|| {
        let p = free_port(QP_TYPE_TCP)?;
        let l = ok(ctx.listen(p), &format!("LISTEN {p}"))?;
        kernel_refused(QP_TYPE_TCP, p)?;
        ok(ctx.destroy(IOCTL_DESTROY_LISTENER, l), "DESTROY_LISTENER")?;
        kernel_allowed(QP_TYPE_TCP, p).map_err(|e| format!("after DESTROY_LISTENER: {e}"))
    })();
    c.check("ports.listen.refuses_kernel_until_destroyed", r);
}

/// The next event on `fd`, waited for.
fn next_event(fd: i32) -> Result<Event, String> {
    let rev = poll1(fd, libc::POLLIN, TIMEOUT);
    ensure(rev & libc::POLLIN != 0, || {
        format!("no event within {TIMEOUT:?}")
    })?;
    read_event_now(fd)
}

/// CONNECT of an unbound TCP QP: the port the connection comes from (the accept's peer
/// port) is refused to kernel sockets until the QP is destroyed. The accepted QP shares
/// the listener's port, which is the kernel's again once both are gone.
fn connect(c: &mut Checks, ctx: &Ctx) {
    let r = (|| {
        let server = Ctx::open()?;
        let (addr, _) = device_addr();
        let p = free_port(QP_TYPE_TCP)?;
        let sqp = bare_qp(&server, QP_TYPE_TCP)?;
        let cqp = bare_qp(ctx, QP_TYPE_TCP)?;
        let l = ok(server.listen(p), &format!("LISTEN {p}"))?;
        ok(server.accept(l, sqp, 0xacc), "ACCEPT")?;
        ok(ctx.connect(cqp, addr, p, 0xc0), "CONNECT")?;
        let ev = next_event(ctx.fd)?;
        ensure(ev.kind == EVENT_CONNECT && ev.status == 0, || {
            format!("connect event {ev:?}")
        })?;
        let ev = next_event(server.fd)?;
        ensure(ev.kind == EVENT_ACCEPT && ev.status == 0, || {
            format!("accept event {ev:?}")
        })?;
        let from = ev.peer_port;
        ensure(from != 0 && from != p, || {
            format!("connected from port {from}")
        })?;
        kernel_refused(QP_TYPE_TCP, from).map_err(|e| format!("the connecting QP's: {e}"))?;
        ok(
            server.destroy(IOCTL_DESTROY_LISTENER, l),
            "DESTROY_LISTENER",
        )?;
        // The accepted connection still has the port: it has no reservation of its own.
        ok(ctx.destroy(IOCTL_DESTROY_QP, cqp), "DESTROY_QP (client)")?;
        kernel_allowed(QP_TYPE_TCP, from).map_err(|e| format!("after DESTROY_QP: {e}"))?;
        ok(server.destroy(IOCTL_DESTROY_QP, sqp), "DESTROY_QP (server)")?;
        kernel_allowed(QP_TYPE_TCP, p).map_err(|e| format!("listener's port at the end: {e}"))
    })();
    c.check("ports.connect.ephemeral_refused_to_kernel", r);
}

/// Closing the file gives back the ports of its QPs and listeners.
fn context_close(c: &mut Checks) {
    let r = (|| {
        let ctx = Ctx::open()?;
        let qp = bare_qp(&ctx, QP_TYPE_UDP)?;
        let pu = ok(ctx.bind(qp, 0), "BIND 0")?;
        let pt = free_port(QP_TYPE_TCP)?;
        ok(ctx.listen(pt), &format!("LISTEN {pt}"))?;
        kernel_refused(QP_TYPE_UDP, pu)?;
        kernel_refused(QP_TYPE_TCP, pt)?;
        drop(ctx);
        kernel_allowed(QP_TYPE_UDP, pu).map_err(|e| format!("after close: {e}"))?;
        kernel_allowed(QP_TYPE_TCP, pt).map_err(|e| format!("after close: {e}"))
    })();
    c.check("ports.context_close_releases", r);
}

/// A process that exits holding a QP's port and a listener's (with its rings still mapped,
/// its objects never destroyed) gives them back.
fn process_exit(c: &mut Checks) {
    let r = (|| {
        let (pu, pt) = (free_port(QP_TYPE_UDP)?, free_port(QP_TYPE_TCP)?);
        // `up`: the child says whether it holds the ports; `down`: closed to let it exit.
        let (mut up, mut down) = ([0i32; 2], [0i32; 2]);
        // SAFETY: pipes into two-element arrays.
        let piped =
            unsafe { libc::pipe(up.as_mut_ptr()) == 0 && libc::pipe(down.as_mut_ptr()) == 0 };
        ensure(piped, || errname(errno()))?;
        flush();
        // SAFETY: fork in a single-threaded program; the child makes system calls and
        // _exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            close(down[1]);
            let held = (|| {
                let ctx = Ctx::open()?;
                let (qp, _cq) = qp_with_cq(&ctx, QP_TYPE_UDP)?;
                ok(ctx.bind(qp.handle, pu), "BIND")?;
                ok(ctx.listen(pt), "LISTEN")?;
                std::mem::forget(ctx);
                Ok::<(), String>(())
            })();
            let b = [u8::from(held.is_ok())];
            let mut wait = [0u8; 1];
            // SAFETY: writing one byte from a live buffer, waiting for the parent to close
            // its end, then ending the child.
            unsafe {
                libc::write(up[1], b.as_ptr().cast(), 1);
                libc::read(down[0], wait.as_mut_ptr().cast(), 1);
                libc::_exit(0)
            }
        }
        close(up[1]);
        close(down[0]);
        let mut b = [0u8; 1];
        let n = read_fd(up[0], &mut b);
        close(up[0]);
        let holding = ensure(n == Ok(1) && b[0] == 1, || {
            "the child could not take its ports".into()
        })
        .and_then(|()| kernel_refused(QP_TYPE_UDP, pu))
        .and_then(|()| kernel_refused(QP_TYPE_TCP, pt));
        close(down[1]);
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        holding.map_err(|e| format!("while the child runs: {e}"))?;
        // The child has exited: its file was closed with it.
        kernel_allowed(QP_TYPE_UDP, pu).map_err(|e| format!("after exit: {e}"))?;
        kernel_allowed(QP_TYPE_TCP, pt).map_err(|e| format!("after exit: {e}"))
    })();
    c.check("ports.process_exit_releases", r);
}

/// A reset (the driver's sysfs `reset`) or the removal of the PCI function under a file
/// holding a QP's port and a listener's: the device forgot them, so the kernel has the
/// ports again while the file is still open. After a removal the function is rescanned.
fn device_gone(c: &mut Checks, remove: bool) {
    let what = if remove { "remove" } else { "reset" };
    let r = (|| {
        let slot = std::fs::read_link(format!("{SYSFS}/device"))
            .map_err(|e| format!("{SYSFS}/device: {e}"))?;
        let slot = slot
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .to_string();
        let ctx = Ctx::open()?;
        let qp = bare_qp(&ctx, QP_TYPE_UDP)?;
        let pu = ok(ctx.bind(qp, 0), "BIND 0")?;
        let pt = free_port(QP_TYPE_TCP)?;
        ok(ctx.listen(pt), &format!("LISTEN {pt}"))?;
        kernel_refused(QP_TYPE_UDP, pu)?;
        kernel_refused(QP_TYPE_TCP, pt)?;
        let path = if remove {
            format!("/sys/bus/pci/devices/{slot}/remove")
        } else {
            format!("{SYSFS}/reset")
        };
        std::fs::write(&path, "1").map_err(|e| format!("write {path}: {e}"))?;
        kernel_allowed(QP_TYPE_UDP, pu).map_err(|e| format!("file still open: {e}"))?;
        kernel_allowed(QP_TYPE_TCP, pt).map_err(|e| format!("file still open: {e}"))?;
        drop(ctx);
        if remove {
            std::fs::write("/sys/bus/pci/rescan", "1").map_err(|e| format!("rescan: {e}"))?;
            let deadline = Instant::now() + TIMEOUT;
            while open_dev(0).map(close).is_err() {
                if Instant::now() > deadline {
                    return Err("no /dev/qpip0 after rescan".into());
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(())
    })();
    c.check(&format!("ports.{what}_releases"), r);
}
