//! Tripwires: an event on a CQ when data placed by the network touches a chosen range of a
//! region while the tripwire is armed (iWARP; the device only).

use std::ffi::c_int;

use verbs::{Context, Cq, MemoryRegion, Tripwire};

use crate::error::err;
use crate::handle::{free, get, give, MAGIC_CQ, MAGIC_CTX, MAGIC_MR, MAGIC_TRIPWIRE};
use crate::types::*;

/// Creates a tripwire on `len` bytes at `offset` of `mr`, whose events go to `cq` tagged
/// `tag`, disarmed. Each qpip_tripwire_arm() allows one event: the first time data an iWARP
/// QP of the context places (an RDMA Write, a Read Response, a Send into a receive buffer)
/// writes a byte of the range while it is armed, a completion with opcode QPIP_OP_TRIPWIRE
/// comes to `cq` — `wr_id` = `tag`, `qp` = qpip_tripwire_id(), `byte_len` = the bytes of
/// the range written, `addr` = the address of the first — and the tripwire is disarmed.
/// Arm, then look: data placed before the arm fires nothing. The tripwire keeps `mr` and
/// `cq` alive until qpip_tripwire_free(). Errors: QPIP_E_FOREIGN (`mr` or `cq` of another
/// context), QPIP_E_INVALID (`len` 0), QPIP_E_LENGTH (the range leaves the region),
/// QPIP_E_UNSUPPORTED (the software provider, after those checks).
///
/// # Safety
/// Handles null or live; `out` null or writable.
#[no_mangle]
pub unsafe extern "C" fn qpip_tripwire_create(
    ctx: *const qpip_context,
    mr: *const qpip_mr,
    offset: usize,
    len: usize,
    cq: *const qpip_cq,
    tag: u64,
    out: *mut *mut qpip_tripwire,
) -> c_int {
    // SAFETY: the caller's promise, for each handle.
    let (c, m, q) = unsafe {
        (
            tri!(get::<Context>(ctx.cast(), MAGIC_CTX, "context")),
            tri!(get::<MemoryRegion>(mr.cast(), MAGIC_MR, "memory region")),
            tri!(get::<Cq>(cq.cast(), MAGIC_CQ, "CQ")),
        )
    };
    // SAFETY: the caller's promise.
    unsafe {
        give(out, MAGIC_TRIPWIRE, || {
            c.create_tripwire(m, offset, len, q, tag).map_err(err)
        })
    }
}

/// Arms the tripwire: the next placement into its range fires it, once. A store to memory
/// shared with the device (no system call), ordered before the caller's next reads.
///
/// # Safety
/// `tw` null or live.
#[no_mangle]
pub unsafe extern "C" fn qpip_tripwire_arm(tw: *const qpip_tripwire) -> c_int {
    // SAFETY: the caller's promise.
    let t = tri!(unsafe { get::<Tripwire>(tw.cast(), MAGIC_TRIPWIRE, "tripwire") });
    t.arm();
    QPIP_OK
}

/// The tripwire's id (the `qp` of its events), or an error code.
///
/// # Safety
/// `tw` null or live.
#[no_mangle]
pub unsafe extern "C" fn qpip_tripwire_id(tw: *const qpip_tripwire) -> c_int {
    // SAFETY: the caller's promise.
    let t = tri!(unsafe { get::<Tripwire>(tw.cast(), MAGIC_TRIPWIRE, "tripwire") });
    t.id().min(c_int::MAX as u32) as c_int
}

/// Destroys a tripwire: no event of it follows. NULL is allowed.
///
/// # Safety
/// `tw` null or live.
#[no_mangle]
pub unsafe extern "C" fn qpip_tripwire_free(tw: *mut qpip_tripwire) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { free::<Tripwire>(tw.cast(), MAGIC_TRIPWIRE, "tripwire") }
}
