//! Queue pairs: creating, binding, connecting and closing them, and posting sends and
//! receives.

use std::ffi::{c_int, c_void};
use std::net::SocketAddrV6;

use verbs::{Context, Cq, Framing, MemoryRegion, Qp, QpInit, QpKind, SendWr};

use crate::addr::{addr_arg, from_sock, opt_addr};
use crate::error::{err, fail};
use crate::handle::{free, get, give, put, MAGIC_CQ, MAGIC_CTX, MAGIC_MR, MAGIC_QP};
use crate::timeout::timeout_or_forever;
use crate::types::*;

/// Creates a QP of `kind` (QPIP_QP_*); sends complete on `send_cq`, receives on
/// `recv_cq` (may be the same); queue depths are powers of two (0: 64).
///
/// # Safety
/// Handles are null or live; `out` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn qpip_qp_create(
    ctx: *const qpip_context,
    kind: c_int,
    send_cq: *const qpip_cq,
    recv_cq: *const qpip_cq,
    sq_depth: u32,
    rq_depth: u32,
    out: *mut *mut qpip_qp,
) -> c_int {
    // SAFETY: the caller's promise, for each handle.
    let (c, scq, rcq) = unsafe {
        (
            tri!(get::<Context>(ctx.cast(), MAGIC_CTX, "context")),
            tri!(get::<Cq>(send_cq.cast(), MAGIC_CQ, "send CQ")),
            tri!(get::<Cq>(recv_cq.cast(), MAGIC_CQ, "receive CQ")),
        )
    };
    let make = || {
        let kind = match kind {
            QPIP_QP_UDP => QpKind::Udp,
            QPIP_QP_TCP_MESSAGE => QpKind::Tcp(Framing::Message),
            QPIP_QP_TCP_STREAM => QpKind::Tcp(Framing::Stream),
            QPIP_QP_TCP_IWARP => QpKind::Tcp(Framing::Iwarp),
            k => {
                return Err(fail(
                    QPIP_E_INVALID,
                    format!(
                        "QP kind {k}: expected QPIP_QP_UDP, _TCP_MESSAGE, _TCP_STREAM or _TCP_IWARP"
                    ),
                ))
            }
        };
        let or64 = |d: u32| if d == 0 { 64 } else { d };
        let init = QpInit::new(kind, scq)
            .recv_cq(rcq)
            .depth(or64(sq_depth), or64(rq_depth));
        c.create_qp(&init).map_err(err)
    };
    // SAFETY: the caller's promise.
    unsafe { give(out, MAGIC_QP, make) }
}

/// Destroys a QP: outstanding requests complete flushed, a connection is reset (unless
/// it was closed gracefully). NULL is allowed.
///
/// # Safety
/// `qp` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn qpip_qp_free(qp: *mut qpip_qp) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { free::<Qp>(qp.cast(), MAGIC_QP, "QP") }
}

/// The QP's number (the `qp` of its completions and events), or an error code.
///
/// # Safety
/// `qp` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn qpip_qp_id(qp: *const qpip_qp) -> c_int {
    // SAFETY: the caller's promise.
    let qp = tri!(unsafe { get::<Qp>(qp.cast(), MAGIC_QP, "QP") });
    qp.id().min(c_int::MAX as u32) as c_int
}

/// Binds to `addr` (port 0: an ephemeral one); the bound address goes to `bound` if not
/// NULL.
///
/// # Safety
/// `qp` is null or live; `addr` null or readable; `bound` null or writable.
#[no_mangle]
pub unsafe extern "C" fn qpip_qp_bind(
    qp: *const qpip_qp,
    addr: *const qpip_addr,
    bound: *mut qpip_addr,
) -> c_int {
    // SAFETY: the caller's promise, for each pointer.
    let (qp, a) = unsafe {
        (
            tri!(get::<Qp>(qp.cast(), MAGIC_QP, "QP")),
            tri!(addr_arg(addr, "addr")),
        )
    };
    let b = q!(qp.bind(a));
    // SAFETY: the caller's promise.
    unsafe { put(bound, from_sock(b)) };
    QPIP_OK
}

/// Starts connecting a TCP QP; the outcome is a QPIP_EVENT_CONNECT event with `user_data`.
///
/// # Safety
/// `qp` is null or live; `peer` null or readable.
#[no_mangle]
pub unsafe extern "C" fn qpip_qp_connect(
    qp: *const qpip_qp,
    peer: *const qpip_addr,
    user_data: u64,
) -> c_int {
    // SAFETY: the caller's promise.
    let (qp, p) = unsafe {
        (
            tri!(get::<Qp>(qp.cast(), MAGIC_QP, "QP")),
            tri!(addr_arg(peer, "peer")),
        )
    };
    q!(qp.connect(p, user_data));
    QPIP_OK
}

/// Connects and waits up to `timeout_ms` (negative: for ever).
///
/// # Safety
/// `qp` is null or live; `peer` null or readable.
#[no_mangle]
pub unsafe extern "C" fn qpip_qp_connect_wait(
    qp: *const qpip_qp,
    peer: *const qpip_addr,
    timeout_ms: c_int,
) -> c_int {
    // SAFETY: the caller's promise.
    let (qp, p) = unsafe {
        (
            tri!(get::<Qp>(qp.cast(), MAGIC_QP, "QP")),
            tri!(addr_arg(peer, "peer")),
        )
    };
    q!(qp.connect_wait(p, timeout_or_forever(timeout_ms)));
    QPIP_OK
}

/// Closes the sending direction gracefully after the sends posted before; the outcome is
/// a QPIP_EVENT_CLOSE event.
///
/// # Safety
/// `qp` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn qpip_qp_close(qp: *const qpip_qp, user_data: u64) -> c_int {
    // SAFETY: the caller's promise.
    let qp = tri!(unsafe { get::<Qp>(qp.cast(), MAGIC_QP, "QP") });
    q!(qp.close(user_data));
    QPIP_OK
}

/// TCP keepalive on the QP's connection (the one it has, or the one connect or accept
/// gives it): after `idle_s` seconds with nothing received a probe every `interval_s`
/// seconds, and after `probes` unanswered ones the connection times out and the QP fails.
/// `idle_s` 0 (with the others 0) turns it off. Whole seconds 1..=32767, probes 1..=127.
///
/// # Safety
/// `qp` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn qpip_qp_set_keepalive(
    qp: *const qpip_qp,
    idle_s: u32,
    interval_s: u32,
    probes: u32,
) -> c_int {
    // SAFETY: the caller's promise.
    let qp = tri!(unsafe { get::<Qp>(qp.cast(), MAGIC_QP, "QP") });
    let k = if (idle_s, interval_s, probes) == (0, 0, 0) {
        None
    } else {
        Some(verbs::Keepalive {
            idle: std::time::Duration::from_secs(idle_s.into()),
            interval: std::time::Duration::from_secs(interval_s.into()),
            probes,
        })
    };
    q!(qp.set_keepalive(k));
    QPIP_OK
}

/// qpip_qp_close and wait up to `timeout_ms` (negative: for ever).
///
/// # Safety
/// `qp` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn qpip_qp_close_wait(qp: *const qpip_qp, timeout_ms: c_int) -> c_int {
    // SAFETY: the caller's promise.
    let qp = tri!(unsafe { get::<Qp>(qp.cast(), MAGIC_QP, "QP") });
    q!(qp.close_wait(timeout_or_forever(timeout_ms)));
    QPIP_OK
}

/// Resolves C SGEs into the library's (each region checked).
///
/// # Safety
/// `sges` is null (then `n` must be 0) or valid for `n` reads; their `mr` are null or live.
pub(crate) unsafe fn sges<'a>(
    sges: *const qpip_sge,
    n: usize,
) -> Result<Vec<verbs::Sge<'a>>, c_int> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if sges.is_null() {
        return Err(fail(QPIP_E_NULL, "sges is NULL"));
    }
    if n > 64 {
        return Err(fail(QPIP_E_LENGTH, format!("{n} SGEs")));
    }
    // SAFETY: non-null and valid for n reads (the caller's promise).
    let s = unsafe { std::slice::from_raw_parts(sges, n) };
    s.iter()
        .map(|g| {
            // SAFETY: the caller's promise about each mr.
            let mr = unsafe { get::<MemoryRegion>(g.mr.cast(), MAGIC_MR, "SGE memory region") }?;
            Ok(mr.sge(g.offset, g.len))
        })
        .collect()
}

/// Posts a send of the bytes named by `sges` (gathered in order), tagged `wr_id`; `dest`
/// for UDP (NULL for TCP); `imm` goes with it when `flags` has QPIP_SEND_IMM; on iWARP
/// QPs, QPIP_SEND_SOLICITED in `flags` asks for a solicited event.
///
/// # Safety
/// `qp` null or live; `sg` null or valid for `n` reads; `dest` null or readable.
#[no_mangle]
pub unsafe extern "C" fn qpip_post_send(
    qp: *const qpip_qp,
    wr_id: u64,
    sg: *const qpip_sge,
    n: usize,
    dest: *const qpip_addr,
    imm: u32,
    flags: u32,
) -> c_int {
    // SAFETY: the caller's promise, for each pointer.
    let (qp, list) = unsafe {
        (
            tri!(get::<Qp>(qp.cast(), MAGIC_QP, "QP")),
            tri!(sges(sg, n)),
        )
    };
    // SAFETY: dest is null or readable (the caller's promise).
    let dest = unsafe { opt_addr(dest) };
    post(qp, SendWr::new(wr_id, &list), dest, imm, flags)
}

/// Posts a send of `len` bytes at `data`, copied now (at most qpip_max_inline() bytes;
/// no registered memory needed); the other arguments as qpip_post_send()'s.
///
/// # Safety
/// `qp` null or live; `data` null (then `len` 0) or valid for `len` reads; `dest` null or
/// readable.
#[no_mangle]
pub unsafe extern "C" fn qpip_post_send_inline(
    qp: *const qpip_qp,
    wr_id: u64,
    data: *const c_void,
    len: usize,
    dest: *const qpip_addr,
    imm: u32,
    flags: u32,
) -> c_int {
    // SAFETY: the caller's promise.
    let qp = tri!(unsafe { get::<Qp>(qp.cast(), MAGIC_QP, "QP") });
    if data.is_null() && len > 0 {
        return fail(QPIP_E_NULL, "data is NULL");
    }
    let bytes: &[u8] = if len == 0 {
        &[]
    } else {
        // SAFETY: non-null and valid for len reads (the caller's promise).
        unsafe { std::slice::from_raw_parts(data.cast(), len) }
    };
    // SAFETY: dest is null or readable (the caller's promise).
    let dest = unsafe { opt_addr(dest) };
    post(qp, SendWr::inline(wr_id, bytes), dest, imm, flags)
}

fn post(qp: &Qp, mut wr: SendWr<'_>, dest: Option<SocketAddrV6>, imm: u32, flags: u32) -> c_int {
    if flags & !(QPIP_SEND_IMM | QPIP_SEND_SOLICITED) != 0 {
        return fail(QPIP_E_INVALID, format!("unknown send flags {flags:#x}"));
    }
    if flags & QPIP_SEND_IMM != 0 {
        wr = wr.imm(imm);
    }
    if flags & QPIP_SEND_SOLICITED != 0 {
        // Checked here, before the destination: the flag, not a missing address, is what
        // is wrong with a solicited send on a UDP QP.
        tri!(crate::iwarp::need_iwarp(qp, "QPIP_SEND_SOLICITED"));
        wr = wr.solicited();
    }
    if let Some(d) = dest {
        wr = wr.to(d);
    }
    q!(qp.post_send(&wr));
    QPIP_OK
}

/// Posts a receive buffer made of `sges` (filled in order), tagged `wr_id`.
///
/// # Safety
/// `qp` null or live; `sg` null or valid for `n` reads.
#[no_mangle]
pub unsafe extern "C" fn qpip_post_recv(
    qp: *const qpip_qp,
    wr_id: u64,
    sg: *const qpip_sge,
    n: usize,
) -> c_int {
    // SAFETY: the caller's promise, for each pointer.
    let (qp, list) = unsafe {
        (
            tri!(get::<Qp>(qp.cast(), MAGIC_QP, "QP")),
            tri!(sges(sg, n)),
        )
    };
    q!(qp.post_recv(wr_id, &list));
    QPIP_OK
}
