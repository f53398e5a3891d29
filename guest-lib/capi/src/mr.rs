//! Memory regions: registered memory a C program fills and reads in place.

use std::ffi::c_int;

use verbs::{Context, MemoryRegion};

use crate::error::err;
use crate::handle::{free, get, give, Handle, MAGIC_CTX, MAGIC_MR};
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
/// qpip_mr_data()'s pointer must not be used any more. NULL is allowed.
///
/// # Safety
/// `mr` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn qpip_mr_free(mr: *mut qpip_mr) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { free::<MemoryRegion>(mr.cast(), MAGIC_MR, "memory region") }
}
