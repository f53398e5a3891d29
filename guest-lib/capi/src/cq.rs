//! Completion queues: polling, waiting, and the descriptor for poll/epoll.

use std::ffi::c_int;
use std::time::Duration;

use verbs::{Completion, Context, Cq, Opcode, Status};

use crate::addr::from_sock;
use crate::error::{err, fail};
use crate::handle::{free, get, give, MAGIC_CQ, MAGIC_CTX};
use crate::timeout::timeout;
use crate::types::*;

/// Creates a CQ of `depth` entries (a power of two).
///
/// # Safety
/// `ctx` is null or a live handle; `out` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn qpip_cq_create(
    ctx: *const qpip_context,
    depth: u32,
    out: *mut *mut qpip_cq,
) -> c_int {
    // SAFETY: the caller's promise.
    let c = tri!(unsafe { get::<Context>(ctx.cast(), MAGIC_CTX, "context") });
    // SAFETY: the caller's promise.
    unsafe { give(out, MAGIC_CQ, || c.create_cq(depth).map_err(err)) }
}

/// Frees a CQ (after the QPs that use it). NULL is allowed.
///
/// # Safety
/// `cq` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn qpip_cq_free(cq: *mut qpip_cq) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { free::<Cq>(cq.cast(), MAGIC_CQ, "CQ") }
}

fn to_c(c: &Completion) -> qpip_completion {
    let status = match c.status {
        Status::Success => QPIP_WC_SUCCESS,
        Status::LocalLength => QPIP_WC_LOCAL_LENGTH,
        Status::LocalProtection => QPIP_WC_LOCAL_PROTECTION,
        Status::BadOpcode => QPIP_WC_BAD_OPCODE,
        Status::BadWqe => QPIP_WC_BAD_WQE,
        Status::Flushed => QPIP_WC_FLUSHED,
        Status::BadDest => QPIP_WC_BAD_DEST,
        Status::RemoteAccess => QPIP_WC_REMOTE_ACCESS,
        Status::RemoteOperation => QPIP_WC_REMOTE_OPERATION,
        _ => QPIP_WC_OTHER,
    };
    let detail = match c.detail {
        verbs::Detail::None => 0,
        verbs::Detail::BadLkey => 1,
        verbs::Detail::OtherContext => 2,
        verbs::Detail::OutOfBounds => 3,
        verbs::Detail::Access => 4,
        verbs::Detail::BadIndex => 5,
        verbs::Detail::NoRoute => 6,
        verbs::Detail::NotBound => 7,
        verbs::Detail::BadAddress => 8,
        verbs::Detail::RegionGone => QPIP_DETAIL_REGION_GONE,
        // QPIP_DETAIL_TERMINATE, then bit 24 if the peer sent it, the layer (bits 16-19),
        // error type (8-11) and code (0-7) of RFC 5040.
        verbs::Detail::Terminate(t) => {
            QPIP_DETAIL_TERMINATE
                | (t.received as u32) << 24
                | ((t.layer & 0xf) as u32) << 16
                | ((t.etype & 0xf) as u32) << 8
                | t.code as u32
        }
        verbs::Detail::Other(d) => d,
    };
    qpip_completion {
        wr_id: c.wr_id,
        qp: c.qp,
        opcode: match c.opcode {
            Opcode::Recv => QPIP_OP_RECV,
            Opcode::RdmaWrite => QPIP_OP_RDMA_WRITE,
            Opcode::RdmaRead => QPIP_OP_RDMA_READ,
            Opcode::RecvImm => QPIP_OP_RECV_IMM,
            Opcode::Tripwire => QPIP_OP_TRIPWIRE,
            Opcode::Send => QPIP_OP_SEND,
        },
        status,
        detail,
        byte_len: c.byte_len,
        imm: c.imm,
        has_src: c.src.is_some() as u32,
        src: c.src.map(from_sock).unwrap_or_default(),
        solicited: c.solicited as u32,
        addr: c.addr,
    }
}

/// Moves up to `n` completions to `out` (never blocks); returns how many, or an error.
///
/// # Safety
/// `cq` is null or a live handle; `out` is null or valid for `n` writes.
#[no_mangle]
pub unsafe extern "C" fn qpip_cq_poll(
    cq: *const qpip_cq,
    out: *mut qpip_completion,
    n: usize,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { cq_take(cq, out, n, None) }
}

/// Waits up to `timeout_ms` (negative: for ever) for a completion, then as qpip_cq_poll;
/// returns 0 when the time ran out.
///
/// # Safety
/// As qpip_cq_poll.
#[no_mangle]
pub unsafe extern "C" fn qpip_cq_wait(
    cq: *const qpip_cq,
    out: *mut qpip_completion,
    n: usize,
    timeout_ms: c_int,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { cq_take(cq, out, n, Some(timeout(timeout_ms))) }
}

/// # Safety
/// As qpip_cq_poll.
unsafe fn cq_take(
    cq: *const qpip_cq,
    out: *mut qpip_completion,
    n: usize,
    wait: Option<Option<Duration>>,
) -> c_int {
    // SAFETY: the caller's promise.
    let cq = tri!(unsafe { get::<Cq>(cq.cast(), MAGIC_CQ, "CQ") });
    if out.is_null() {
        return fail(QPIP_E_NULL, "out is NULL");
    }
    let mut buf = vec![Completion::default(); n.min(1024)];
    let got = match wait {
        None => cq.poll(&mut buf),
        Some(t) => q!(cq.wait(&mut buf, t)),
    };
    for (i, c) in buf[..got].iter().enumerate() {
        // SAFETY: i < got <= n, and `out` is valid for n writes (the caller's promise).
        unsafe { out.add(i).write(to_c(c)) };
    }
    got as c_int
}

/// Asks for one wake-up of qpip_cq_fd() at the next completion.
///
/// # Safety
/// `cq` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn qpip_cq_arm(cq: *const qpip_cq) -> c_int {
    // SAFETY: the caller's promise.
    let cq = tri!(unsafe { get::<Cq>(cq.cast(), MAGIC_CQ, "CQ") });
    q!(cq.arm());
    QPIP_OK
}

/// Clears the descriptor's readiness after a wake-up; returns how many it gathered.
///
/// # Safety
/// `cq` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn qpip_cq_ack(cq: *const qpip_cq) -> c_int {
    // SAFETY: the caller's promise.
    let cq = tri!(unsafe { get::<Cq>(cq.cast(), MAGIC_CQ, "CQ") });
    cq.ack().min(c_int::MAX as u64) as c_int
}

/// The CQ's descriptor for poll/epoll (readable after qpip_cq_arm once a completion is
/// there), or an error code.
///
/// # Safety
/// `cq` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn qpip_cq_fd(cq: *const qpip_cq) -> c_int {
    use std::os::fd::AsRawFd;
    // SAFETY: the caller's promise.
    let cq = tri!(unsafe { get::<Cq>(cq.cast(), MAGIC_CQ, "CQ") });
    cq.as_raw_fd()
}
