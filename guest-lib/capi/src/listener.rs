//! Listeners (listen, accept) and the context's connection events: what accepts,
//! connects and closes report.

use std::ffi::c_int;

use verbs::{Context, Event, EventKind, Listener, Qp};

use crate::addr::{addr_arg, from_sock};
use crate::error::{err, fail};
use crate::handle::{free, get, give, put, MAGIC_CTX, MAGIC_LISTENER, MAGIC_QP};
use crate::timeout::{timeout, timeout_or_forever};
use crate::types::*;

/// Listens for TCP connections on `addr` (port non-zero).
///
/// # Safety
/// `ctx` null or live; `addr` null or readable; `out` null or writable.
#[no_mangle]
pub unsafe extern "C" fn qpip_listen(
    ctx: *const qpip_context,
    addr: *const qpip_addr,
    backlog: u32,
    out: *mut *mut qpip_listener,
) -> c_int {
    // SAFETY: the caller's promise.
    let (c, a) = unsafe {
        (
            tri!(get::<Context>(ctx.cast(), MAGIC_CTX, "context")),
            tri!(addr_arg(addr, "addr")),
        )
    };
    // SAFETY: the caller's promise.
    unsafe { give(out, MAGIC_LISTENER, || c.listen(a, backlog).map_err(err)) }
}

/// Frees a listener (pending accepts end with -ECANCELED). NULL is allowed.
///
/// # Safety
/// `l` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn qpip_listener_free(l: *mut qpip_listener) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { free::<Listener>(l.cast(), MAGIC_LISTENER, "listener") }
}

/// Offers the idle TCP QP `qp` for the next connection; the outcome is a
/// QPIP_EVENT_ACCEPT event with `user_data`.
///
/// # Safety
/// Handles null or live.
#[no_mangle]
pub unsafe extern "C" fn qpip_accept(
    l: *const qpip_listener,
    qp: *const qpip_qp,
    user_data: u64,
) -> c_int {
    // SAFETY: the caller's promise.
    let (l, qp) = unsafe {
        (
            tri!(get::<Listener>(l.cast(), MAGIC_LISTENER, "listener")),
            tri!(get::<Qp>(qp.cast(), MAGIC_QP, "QP")),
        )
    };
    q!(l.accept(qp, user_data));
    QPIP_OK
}

/// Accepts a connection on `qp`, waiting up to `timeout_ms` (negative: for ever); the peer
/// goes to `peer` if not NULL.
///
/// # Safety
/// Handles null or live; `peer` null or writable.
#[no_mangle]
pub unsafe extern "C" fn qpip_accept_wait(
    l: *const qpip_listener,
    qp: *const qpip_qp,
    timeout_ms: c_int,
    peer: *mut qpip_addr,
) -> c_int {
    // SAFETY: the caller's promise.
    let (l, qp) = unsafe {
        (
            tri!(get::<Listener>(l.cast(), MAGIC_LISTENER, "listener")),
            tri!(get::<Qp>(qp.cast(), MAGIC_QP, "QP")),
        )
    };
    let p = q!(l.accept_wait(qp, timeout_or_forever(timeout_ms)));
    // SAFETY: the caller's promise.
    unsafe { put(peer, from_sock(p)) };
    QPIP_OK
}

fn event_to_c(e: &Event) -> qpip_event {
    qpip_event {
        kind: match e.kind {
            EventKind::Accept => QPIP_EVENT_ACCEPT,
            EventKind::Connect => QPIP_EVENT_CONNECT,
            EventKind::Close => QPIP_EVENT_CLOSE,
            EventKind::QpError => QPIP_EVENT_QP_ERROR,
            EventKind::PeerClosed => QPIP_EVENT_PEER_CLOSED,
            EventKind::Lost => QPIP_EVENT_LOST,
            EventKind::Other(_) => QPIP_EVENT_OTHER,
        },
        status: e.status,
        qp: e.qp,
        has_peer: e.peer.is_some() as u32,
        user_data: e.user_data,
        peer: e.peer.map(from_sock).unwrap_or_default(),
    }
}

/// The next connection event, waiting up to `timeout_ms` (0: just look; negative: for
/// ever). Returns 1 with `*out` filled, 0 if none came, or an error code.
///
/// # Safety
/// `ctx` null or live; `out` null or writable.
#[no_mangle]
pub unsafe extern "C" fn qpip_wait_event(
    ctx: *const qpip_context,
    out: *mut qpip_event,
    timeout_ms: c_int,
) -> c_int {
    // SAFETY: the caller's promise.
    let c = tri!(unsafe { get::<Context>(ctx.cast(), MAGIC_CTX, "context") });
    if out.is_null() {
        return fail(QPIP_E_NULL, "out is NULL");
    }
    let e = if timeout_ms == 0 {
        q!(c.poll_event())
    } else {
        q!(c.wait_event(timeout(timeout_ms)))
    };
    match e {
        Some(e) => {
            // SAFETY: checked non-null; the caller's promise that it is writable.
            unsafe { put(out, event_to_c(&e)) };
            1
        }
        None => 0,
    }
}

/// The descriptor that polls readable while a connection event is queued.
///
/// # Safety
/// `ctx` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn qpip_events_fd(ctx: *const qpip_context) -> c_int {
    use std::os::fd::AsRawFd;
    // SAFETY: the caller's promise.
    let c = tri!(unsafe { get::<Context>(ctx.cast(), MAGIC_CTX, "context") });
    c.events_fd().as_raw_fd()
}
