//! Admin commands as a driver builds them, and the rules every completion follows, written
//! once for the fake guest, the engine bench, the fuzz harness and its seeds: a command with
//! its argument body, the bodies of the commands that name guest memory (filled from the
//! rings' page lists, so a ring's page count always matches its depth), and the check of a
//! completion against its command.

use qpip_abi::admin::*;
use qpip_abi::cqe::CQE_SIZE;
use qpip_abi::wqe::WQE_SIZE;
use zerocopy::{FromZeros, Immutable, IntoBytes};

use crate::ring_pages;

/// An admin command without arguments.
pub fn cmd0(opcode: u16, ctx: u32, handle: u32) -> AdminCmd {
    let mut c = AdminCmd::new_zeroed();
    c.opcode = opcode;
    c.ctx = ctx;
    c.handle = handle;
    c
}

/// An admin command with an argument body.
pub fn cmd<T: IntoBytes + Immutable>(opcode: u16, ctx: u32, handle: u32, body: &T) -> AdminCmd {
    let mut c = cmd0(opcode, ctx, handle);
    let b = body.as_bytes();
    assert_eq!(b.len(), c.body.len(), "argument bodies are 48 bytes");
    c.body.copy_from_slice(b);
    c
}

/// `CREATE_CTX` naming `doorbell_page`.
pub fn create_ctx_cmd(doorbell_page: u64) -> AdminCmd {
    let mut a = CreateCtxArgs::new_zeroed();
    a.doorbell_page = doorbell_page;
    cmd(ADMIN_OP_CREATE_CTX, 0, 0, &a)
}

/// A query (`QUERY_DEVICE`, `QUERY_STATS`, `LIST_ADDRS`) answering into `len` bytes at `buf`.
pub fn query_cmd(opcode: u16, buf: u64, len: u32) -> AdminCmd {
    let mut a = QueryArgs::new_zeroed();
    a.buf = buf;
    a.len = len;
    cmd(opcode, 0, 0, &a)
}

/// `CREATE_CQ` arguments: a ring of `depth` CQEs on the pages listed at `page_list`,
/// interrupting on `vector`.
pub fn cq_body(page_list: u64, depth: u32, vector: u32) -> CreateCqArgs {
    let mut a = CreateCqArgs::new_zeroed();
    a.page_list = page_list;
    a.npages = ring_pages(depth, CQE_SIZE) as u32;
    a.depth = depth;
    a.vector = vector;
    a
}

/// `CREATE_QP` arguments: queues of `sq_depth` and `rq_depth` WQEs on the pages listed at
/// `sq_page_list` and `rq_page_list`, completing to `send_cq` and `recv_cq`.
#[allow(clippy::too_many_arguments)]
pub fn qp_body(
    sq_page_list: u64,
    rq_page_list: u64,
    send_cq: u32,
    recv_cq: u32,
    sq_depth: u32,
    rq_depth: u32,
    qp_type: u8,
    framing: u8,
) -> CreateQpArgs {
    let mut a = CreateQpArgs::new_zeroed();
    a.sq_page_list = sq_page_list;
    a.rq_page_list = rq_page_list;
    a.send_cq = send_cq;
    a.recv_cq = recv_cq;
    a.sq_depth = sq_depth;
    a.rq_depth = rq_depth;
    a.sq_npages = ring_pages(sq_depth, WQE_SIZE) as u16;
    a.rq_npages = ring_pages(rq_depth, WQE_SIZE) as u16;
    a.qp_type = qp_type;
    a.framing = framing;
    a
}

/// `REG_MR` arguments: `length` bytes at virtual address `iova`, starting
/// `first_page_offset` bytes into the first of the `npages` pages listed at `page_list`.
pub fn mr_body(
    page_list: u64,
    npages: u32,
    first_page_offset: u32,
    iova: u64,
    length: u64,
    access: u32,
) -> RegMrArgs {
    let mut a = RegMrArgs::new_zeroed();
    a.page_list = page_list;
    a.npages = npages;
    a.first_page_offset = first_page_offset;
    a.iova = iova;
    a.length = length;
    a.access = access;
    a
}

/// Checks what holds for the completion of any command of `opcode`, whatever it asked: it
/// echoes the opcode, has a known status and zero reserved bytes, carries no results on
/// error, and is CANCELLED only if the command was one that waits (ACCEPT, CONNECT, CLOSE).
#[track_caller]
pub fn check_admin_cqe(c: &AdminCqe, opcode: u16) {
    assert_eq!(c.opcode, opcode, "completion echoes the opcode: {c:?}");
    assert!(
        c.status <= ADMIN_STATUS_TIMEOUT,
        "unknown admin status: {c:?}"
    );
    assert_eq!(c.reserved, [0; 3], "reserved bytes are zero: {c:?}");
    if c.status != ADMIN_STATUS_OK {
        assert!(
            c.result0 == 0 && c.result1 == 0 && c.result2 == 0,
            "results are 0 on error: {c:?}"
        );
    }
    if c.status == ADMIN_STATUS_CANCELLED {
        assert!(
            matches!(opcode, ADMIN_OP_ACCEPT | ADMIN_OP_CONNECT | ADMIN_OP_CLOSE),
            "only waiting commands are cancelled: {c:?}"
        );
    }
}
