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
    CreateCqArgs {
        page_list,
        npages: ring_pages(depth, CQE_SIZE) as u32,
        depth,
        vector,
        reserved: [0; 28],
    }
}

/// `CREATE_QP` arguments of a QP of `qp_type` with `framing`, its (send, receive) queues on
/// the pages listed at `page_lists`, `depths` WQEs deep, completing to the CQs `cqs`.
pub fn qp_body(
    page_lists: (u64, u64),
    cqs: (u32, u32),
    depths: (u32, u32),
    qp_type: u8,
    framing: u8,
) -> CreateQpArgs {
    CreateQpArgs {
        sq_page_list: page_lists.0,
        rq_page_list: page_lists.1,
        send_cq: cqs.0,
        recv_cq: cqs.1,
        sq_depth: depths.0,
        rq_depth: depths.1,
        sq_npages: ring_pages(depths.0, WQE_SIZE) as u16,
        rq_npages: ring_pages(depths.1, WQE_SIZE) as u16,
        qp_type,
        framing,
        reserved: [0; 10],
    }
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
    RegMrArgs {
        page_list,
        iova,
        length,
        npages,
        first_page_offset,
        access,
        reserved: [0; 12],
    }
}

/// `BIND` of QP `qp` to `addr`/`port`.
pub fn bind_cmd(ctx: u32, qp: u32, addr: [u8; 16], port: u16) -> AdminCmd {
    let mut a = BindArgs::new_zeroed();
    a.addr = addr;
    a.port = port;
    cmd(ADMIN_OP_BIND, ctx, qp, &a)
}

/// `BIND` of QP `qp` to `port` on every address, for a connect to `peer`/`peer_port` from
/// a port the driver chose (interface 2.5).
pub fn bind_for_cmd(ctx: u32, qp: u32, port: u16, peer: [u8; 16], peer_port: u16) -> AdminCmd {
    let mut a = BindArgs::new_zeroed();
    a.port = port;
    a.peer_addr = peer;
    a.peer_port = peer_port;
    cmd(ADMIN_OP_BIND, ctx, qp, &a)
}

/// `BIND` of UDP QP `qp` to `addr`/`port`, sharing the port (`BIND_FLAG_SHARE_PORT`,
/// interface 2.6).
pub fn bind_shared_cmd(ctx: u32, qp: u32, addr: [u8; 16], port: u16) -> AdminCmd {
    let mut a = BindArgs::new_zeroed();
    a.addr = addr;
    a.port = port;
    a.flags = BIND_FLAG_SHARE_PORT;
    cmd(ADMIN_OP_BIND, ctx, qp, &a)
}

/// `SET_QP_OPT` UDP_PEER on QP `qp`: its connected peer, or none with port 0 (interface 2.6).
pub fn udp_peer_cmd(ctx: u32, qp: u32, peer: [u8; 16], peer_port: u16) -> AdminCmd {
    let mut a = SetQpOptArgs::new_zeroed();
    a.option = QP_OPT_UDP_PEER;
    a.peer_addr = peer;
    a.peer_port = peer_port;
    cmd(ADMIN_OP_SET_QP_OPT, ctx, qp, &a)
}

/// `LISTEN` on `addr`/`port` with room for `backlog` connections not yet accepted.
pub fn listen_cmd(ctx: u32, addr: [u8; 16], port: u16, backlog: u32) -> AdminCmd {
    let mut a = ListenArgs::new_zeroed();
    a.addr = addr;
    a.port = port;
    a.backlog = backlog;
    cmd(ADMIN_OP_LISTEN, ctx, 0, &a)
}

/// `ACCEPT` of the listener's next connection onto QP `qp`.
pub fn accept_cmd(ctx: u32, listener: u32, qp: u32) -> AdminCmd {
    let mut a = AcceptArgs::new_zeroed();
    a.qp = qp;
    cmd(ADMIN_OP_ACCEPT, ctx, listener, &a)
}

/// `CONNECT` of QP `qp` to `addr`/`port`.
pub fn connect_cmd(ctx: u32, qp: u32, addr: [u8; 16], port: u16) -> AdminCmd {
    let mut a = ConnectArgs::new_zeroed();
    a.addr = addr;
    a.port = port;
    cmd(ADMIN_OP_CONNECT, ctx, qp, &a)
}

/// Checks what holds for the completion of any command of `opcode`, whatever it asked: it
/// echoes the opcode, has a known status and zero reserved bytes, carries no results on
/// error, and is CANCELLED only if the command was one that waits (ACCEPT, CONNECT, CLOSE).
#[track_caller]
pub fn check_admin_cqe(c: &AdminCqe, opcode: u16) {
    assert_eq!(c.opcode, opcode, "completion echoes the opcode: {c:?}");
    assert!(
        c.status <= ADMIN_STATUS_UNREACHABLE,
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

/// The arguments of ADD_ROUTE and DEL_ROUTE.
pub fn route_args(dest: [u8; 16], prefix_len: u8, gateway: [u8; 16], metric: u32) -> RouteArgs {
    let mut a = RouteArgs::new_zeroed();
    a.dest = dest;
    a.prefix_len = prefix_len;
    a.gateway = gateway;
    a.metric = metric;
    a
}

/// The arguments of ADD_NEIGH and DEL_NEIGH.
pub fn neighbor_args(addr: [u8; 16], mac: [u8; 6]) -> NeighborArgs {
    let mut a = NeighborArgs::new_zeroed();
    a.addr = addr;
    a.mac = mac;
    a
}
