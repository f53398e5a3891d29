//! What a C handle is, how one is checked, handed out and freed, and the two early returns
//! every exported function uses (`tri!` for a code, `q!` for a library error).

use std::ffi::{c_int, c_void};

use crate::error::fail;
use crate::types::{QPIP_E_BAD_HANDLE, QPIP_E_NULL, QPIP_OK};

/// What a C handle points to: a magic number per type first (repr(C), so it is at offset
/// 0 whatever `T` is), then the object.
#[repr(C)]
pub(crate) struct Handle<T> {
    magic: u32,
    pub(crate) value: T,
}

pub(crate) const MAGIC_CTX: u32 = 0x5150_4301;
pub(crate) const MAGIC_MR: u32 = 0x5150_4302;
pub(crate) const MAGIC_CQ: u32 = 0x5150_4303;
pub(crate) const MAGIC_QP: u32 = 0x5150_4304;
pub(crate) const MAGIC_LISTENER: u32 = 0x5150_4305;
pub(crate) const MAGIC_TRIPWIRE: u32 = 0x5150_4306;

/// The value of a `Result<T, c_int>`, or return its error code.
macro_rules! tri {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(code) => return code,
        }
    };
}

/// The value of a `verbs::Result<T>`, or return the error's code (its message kept for
/// qpip_last_error()).
macro_rules! q {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return $crate::error::err(e),
        }
    };
}

/// The object behind handle `p` of type `magic`, or the error code.
///
/// # Safety
/// `p` is null or was returned by this library for some handle type and not freed.
pub(crate) unsafe fn get<'a, T>(p: *const c_void, magic: u32, what: &str) -> Result<&'a T, c_int> {
    if p.is_null() {
        return Err(fail(QPIP_E_NULL, format!("{what} is NULL")));
    }
    // SAFETY: every handle is a live Box<Handle<_>> (the caller's promise), and Handle is
    // repr(C) with the u32 magic first, so reading a u32 at `p` is valid for any handle
    // type; only once it matches is `p` taken as a Handle<T>.
    let h = unsafe {
        if *(p as *const u32) != magic {
            return Err(fail(
                QPIP_E_BAD_HANDLE,
                format!("{what} is not a {what} handle"),
            ));
        }
        &*(p as *const Handle<T>)
    };
    Ok(&h.value)
}

/// Makes an object with `make` and hands it out through `out` as a handle of type
/// `magic`; a NULL `out` fails before anything is made.
///
/// # Safety
/// `out` is null or writable.
pub(crate) unsafe fn give<T, H>(
    out: *mut *mut H,
    magic: u32,
    make: impl FnOnce() -> Result<T, c_int>,
) -> c_int {
    if out.is_null() {
        return fail(QPIP_E_NULL, "out is NULL");
    }
    let value = tri!(make());
    let h = Box::into_raw(Box::new(Handle { magic, value })) as *mut H;
    // SAFETY: checked non-null; the caller's promise that it is writable.
    unsafe { out.write(h) };
    QPIP_OK
}

/// Frees handle `p` of type `magic` (null: nothing).
///
/// # Safety
/// As for [`get`]; `p` is not used afterwards.
pub(crate) unsafe fn free<T>(p: *mut c_void, magic: u32, what: &str) -> c_int {
    if p.is_null() {
        return QPIP_OK;
    }
    // SAFETY: `get` checked the magic, so `p` is a Box<Handle<T>> from `give`;
    // the magic is cleared before the box is dropped so a second free of the same
    // pointer is more likely caught (it cannot be in general: the memory is gone).
    unsafe {
        if let Err(e) = get::<T>(p, magic, what) {
            return e;
        }
        (*(p as *mut Handle<T>)).magic = 0;
        drop(Box::from_raw(p as *mut Handle<T>));
    }
    QPIP_OK
}

/// Writes `v` to `out` if it is not null.
///
/// # Safety
/// `out` is null or valid for a write of T.
pub(crate) unsafe fn put<T>(out: *mut T, v: T) {
    if !out.is_null() {
        // SAFETY: the caller's promise.
        unsafe { out.write(v) };
    }
}
