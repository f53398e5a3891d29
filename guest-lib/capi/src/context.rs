//! Contexts: opening the device or the software provider, and what a context tells.

use std::ffi::{c_char, c_int, CStr};
use std::path::Path;

use verbs::Context;

use crate::error::{err, fail};
use crate::handle::{free, get, give, MAGIC_CTX};
use crate::types::*;

/// Hands out the context `r` opened through `out`.
///
/// # Safety
/// `out` is null or writable.
unsafe fn open_with(
    out: *mut *mut qpip_context,
    r: impl FnOnce() -> verbs::Result<Context>,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { give(out, MAGIC_CTX, || r().map_err(err)) }
}

/// Opens the provider QPIP_PROVIDER names (soft or device); unset: the first device if
/// there is one, else the software provider.
///
/// # Safety
/// `out` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn qpip_open(out: *mut *mut qpip_context) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { open_with(out, Context::open) }
}

/// Opens the software provider (kernel sockets).
///
/// # Safety
/// `out` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn qpip_open_soft(out: *mut *mut qpip_context) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { open_with(out, Context::open_soft) }
}

/// Opens the device at `path` (/dev/qpipN).
///
/// # Safety
/// `path` is null or NUL-terminated; `out` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn qpip_open_device(
    path: *const c_char,
    out: *mut *mut qpip_context,
) -> c_int {
    if path.is_null() {
        return fail(QPIP_E_NULL, "path is NULL");
    }
    // SAFETY: the caller's promise: a NUL-terminated string.
    let p = unsafe { CStr::from_ptr(path) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: the caller's promise.
    unsafe { open_with(out, || Context::open_device(Path::new(&p))) }
}

/// Frees a context (its objects keep it open while they exist). NULL is allowed.
///
/// # Safety
/// `ctx` is null or a live context handle.
#[no_mangle]
pub unsafe extern "C" fn qpip_context_free(ctx: *mut qpip_context) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { free::<Context>(ctx.cast(), MAGIC_CTX, "context") }
}

/// QPIP_PROVIDER_DEVICE or QPIP_PROVIDER_SOFT, or an error code.
///
/// # Safety
/// `ctx` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn qpip_provider(ctx: *const qpip_context) -> c_int {
    // SAFETY: the caller's promise.
    let c = tri!(unsafe { get::<Context>(ctx.cast(), MAGIC_CTX, "context") });
    match c.provider() {
        verbs::ProviderKind::Device => QPIP_PROVIDER_DEVICE,
        verbs::ProviderKind::Soft => QPIP_PROVIDER_SOFT,
    }
}

/// Largest inline send, in bytes, or an error code.
///
/// # Safety
/// `ctx` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn qpip_max_inline(ctx: *const qpip_context) -> c_int {
    // SAFETY: the caller's promise.
    let c = tri!(unsafe { get::<Context>(ctx.cast(), MAGIC_CTX, "context") });
    c.limits().max_inline as c_int
}
