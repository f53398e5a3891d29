//! Memory regions: registered memory a C program fills and reads in place, and (iWARP)
//! the rights and addresses by which peers reach it.

use std::ffi::c_int;

use verbs::{Access, Context, MemoryRegion};

use crate::error::{err, fail};
use crate::handle::{free, get, give, put, Handle, MAGIC_CTX, MAGIC_MR};
use crate::types::*;

/// Allocates and registers `len` zeroed bytes; qpip_mr_data() is where they are.
///
/// # Safety
/// `ctx` is null or a live handle; `out` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn qpip_mr_alloc(
    ctx: *const qpip_context,
    len: usize,
    out: *mut *mut qpip_mr,
) -> c_int {
    // SAFETY: the caller's promise.
    let c = tri!(unsafe { get::<Context>(ctx.cast(), MAGIC_CTX, "context") });
    // SAFETY: the caller's promise.
    unsafe { give(out, MAGIC_MR, || c.alloc(len).map_err(err)) }
}

/// The library's rights for QPIP_ACCESS_* bits `flags` (unknown bits: QPIP_E_INVALID).
pub(crate) fn access_of(flags: u32) -> Result<Access, c_int> {
    let known = QPIP_ACCESS_REMOTE_READ | QPIP_ACCESS_REMOTE_WRITE;
    if flags & !known != 0 {
        return Err(fail(
            QPIP_E_INVALID,
            format!(
                "unknown access flags {flags:#x}: expected QPIP_ACCESS_REMOTE_READ and/or _WRITE"
            ),
        ));
    }
    Ok(Access {
        remote_read: flags & QPIP_ACCESS_REMOTE_READ != 0,
        remote_write: flags & QPIP_ACCESS_REMOTE_WRITE != 0,
    })
}

/// qpip_mr_alloc() whose region peers of this context's iWARP QPs may also reach with
/// `access` (QPIP_ACCESS_* bits; 0: none, as qpip_mr_alloc()) by its qpip_mr_rkey().
/// Remote rights need the device: the software provider gives QPIP_E_UNSUPPORTED.
///
/// # Safety
/// `ctx` is null or a live handle; `out` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn qpip_mr_alloc_remote(
    ctx: *const qpip_context,
    len: usize,
    access: u32,
    out: *mut *mut qpip_mr,
) -> c_int {
    // SAFETY: the caller's promise.
    let c = tri!(unsafe { get::<Context>(ctx.cast(), MAGIC_CTX, "context") });
    let a = tri!(access_of(access));
    // SAFETY: the caller's promise.
    unsafe { give(out, MAGIC_MR, || c.alloc_with(len, a).map_err(err)) }
}

/// The key peers name the region by in RDMA Writes and Reads: 0 when it grants no remote
/// right (or `mr` is a bad handle).
///
/// # Safety
/// `mr` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn qpip_mr_rkey(mr: *const qpip_mr) -> u32 {
    // SAFETY: the caller's promise.
    unsafe { get::<MemoryRegion>(mr.cast(), MAGIC_MR, "memory region") }.map_or(0, |m| m.rkey())
}

/// Fills `out` with where a peer's RDMA Write or Read reaches byte `offset` of the region
/// (`offset` at most its length), for the application to send to the peer. A region
/// without remote rights gives QPIP_E_INVALID.
///
/// # Safety
/// `mr` is null or a live handle; `out` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn qpip_mr_remote(
    mr: *const qpip_mr,
    offset: usize,
    out: *mut qpip_remote,
) -> c_int {
    // SAFETY: the caller's promise.
    let m = tri!(unsafe { get::<MemoryRegion>(mr.cast(), MAGIC_MR, "memory region") });
    if out.is_null() {
        return fail(QPIP_E_NULL, "out is NULL");
    }
    if offset > m.len() {
        return fail(
            QPIP_E_LENGTH,
            format!("offset {offset} is beyond the region's {} bytes", m.len()),
        );
    }
    if m.rkey() == 0 {
        return fail(
            QPIP_E_INVALID,
            "the region grants peers no access: allocate it with qpip_mr_alloc_remote()",
        );
    }
    let r = m.remote(offset);
    // SAFETY: checked non-null; the caller's promise that it is writable.
    unsafe {
        put(
            out,
            qpip_remote {
                addr: r.addr,
                rkey: r.rkey,
            },
        )
    };
    QPIP_OK
}

/// The region's bytes (NULL for a bad handle). Fill a send buffer before posting it and
/// leave it until its completion; read a receive buffer after its completion. The
/// pointer is valid until qpip_mr_free().
///
/// # Safety
/// `mr` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn qpip_mr_data(mr: *mut qpip_mr) -> *mut u8 {
    // SAFETY: the caller's promise; `get` checked the magic, so `mr` is a live
    // Handle<MemoryRegion> of ours, and the &mut lasts only for this call. The pointer
    // handed out is from as_mut_slice: the region's heap buffer, which the device (or
    // provider) shares anyway; writes through it follow the contract above, the same as
    // MemoryRegion::as_mut_slice's.
    unsafe {
        match get::<MemoryRegion>(mr.cast(), MAGIC_MR, "memory region") {
            Ok(_) => (*(mr as *mut Handle<MemoryRegion>))
                .value
                .as_mut_slice()
                .as_mut_ptr(),
            Err(_) => std::ptr::null_mut(),
        }
    }
}

/// The region's size in bytes (0 for a bad handle).
///
/// # Safety
/// `mr` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn qpip_mr_len(mr: *const qpip_mr) -> usize {
    // SAFETY: the caller's promise.
    unsafe { get::<MemoryRegion>(mr.cast(), MAGIC_MR, "memory region") }.map_or(0, |m| m.len())
}

/// Frees a region: it stays registered until the work requests naming it completed, but
/// qpip_mr_data()'s pointer must not be used any more. NULL is allowed. Peers lose it
/// when it is deregistered: an RDMA Read or Write of it still under way then resets the
/// iWARP QP serving it (QPIP_EVENT_QP_ERROR; its requests complete QPIP_WC_FLUSHED).
///
/// # Safety
/// `mr` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn qpip_mr_free(mr: *mut qpip_mr) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { free::<MemoryRegion>(mr.cast(), MAGIC_MR, "memory region") }
}
