//! The admin queue, end to end over vfio-user: every command's success path and its errors,
//! one module per family of commands, and the ring itself (phases, wrap-around, a full
//! completion ring, disable/re-enable, bad set-ups) with its interrupt.

use crate::support::*;

mod addresses;
mod connections;
mod contexts;
mod device;
mod memory;
mod queues;
mod ring;

/// What every DESTROY command (and DEREG_MR) does with the handle it names: an unknown
/// handle and another context's are refused with BAD_HANDLE and change nothing, the
/// owner's goes, and naming it once more is refused as unknown.
fn check_destroy(
    g: &mut FakeGuest,
    destroy: fn(&mut FakeGuest, u32, u32) -> Result<(), u16>,
    what: &str,
    (owner, other): (u32, u32),
    handle: u32,
) {
    let refused = [
        (owner, 0xdead, format!("destroy unknown {what}")),
        (other, handle, format!("destroy another context's {what}")),
    ];
    for (ctx, h, why) in refused {
        assert_admin_err(destroy(g, ctx, h), ADMIN_STATUS_BAD_HANDLE, &why);
    }
    destroy(g, owner, handle)
        .unwrap_or_else(|s| panic!("the owner destroys its {what}: {}", admin_status_name(s)));
    assert_admin_err(
        destroy(g, owner, handle),
        ADMIN_STATUS_BAD_HANDLE,
        &format!("destroy {what} twice"),
    );
}

/// What a command that writes its result into a guest buffer (QUERY_DEVICE, QUERY_STATS,
/// LIST_ADDRS) does with the buffer it is given: one outside RAM, across a page boundary or
/// misaligned is refused with BAD_ADDRESS, one `short` bytes smaller than the `len` of its
/// result with BAD_PARAM, and neither writes a byte; a buffer of a whole page is taken and
/// only the first `len` bytes of it are written. `run` issues the command into (address,
/// length). Returns the page the result is in and what `run` returned for it.
fn check_result_buffer<T: std::fmt::Debug>(
    g: &mut FakeGuest,
    name: &str,
    (len, short): (u32, u32),
    run: fn(&mut FakeGuest, u64, u32) -> Result<T, u16>,
) -> (u64, T) {
    let page = g.alloc_pages(2);
    g.mem_fill(page, 2 * PAGE as usize, 0xee);
    for (what, buf) in [
        ("beyond the end of RAM", RAM_BASE + RAM_SIZE),
        ("straddling the end of RAM", RAM_BASE + RAM_SIZE - 64),
        ("below RAM", 0x1000),
        ("crossing a page boundary", page + PAGE - 64),
        ("misaligned", page + 4),
        ("at the top of the address space", u64::MAX - 7),
    ] {
        assert_admin_err(
            run(g, buf, len),
            ADMIN_STATUS_BAD_ADDRESS,
            &format!("{name} into a buffer {what}"),
        );
    }
    assert_admin_err(
        run(g, page, len - short),
        ADMIN_STATUS_BAD_PARAM,
        &format!("{name} into a buffer {short} bytes short"),
    );
    assert!(
        g.mem_read(page, 2 * PAGE as usize)
            .iter()
            .all(|&b| b == 0xee),
        "a refused {name} wrote guest memory"
    );
    let done = run(g, page, PAGE as u32)
        .unwrap_or_else(|s| panic!("{name} into a page: {}", admin_status_name(s)));
    assert!(
        g.mem_read(page + len as u64, (PAGE - len as u64) as usize)
            .iter()
            .all(|&b| b == 0xee),
        "{name} wrote past its {len} bytes"
    );
    (page, done)
}

/// The pending command `id` (an ACCEPT or a CONNECT) once it completes: Ok(completion) or
/// Err(status), as `FakeGuest::admin_result` gives a command run to completion at once.
fn pending_result(g: &mut FakeGuest, id: u32) -> Result<AdminCqe, u16> {
    let c = g.admin_wait_done(id);
    if c.status == ADMIN_STATUS_OK {
        Ok(c)
    } else {
        Err(c.status)
    }
}

/// A message-framed TCP QP on `cq` (for both its queues, in `cq`'s context), `depth` deep
/// each way; returns its handle.
fn tcp_qp(g: &mut FakeGuest, cq: &Cq, depth: u32) -> u32 {
    g.create_qp_typed(
        cq.ctx,
        (cq.id, cq.id),
        (depth, depth),
        QP_TYPE_TCP,
        FRAMING_MESSAGE,
    )
    .unwrap()
    .id
}
