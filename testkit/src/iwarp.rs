//! iWARP queue pairs: RDMA WQEs, connect and accept with MPA parameters and private data,
//! QUERY_CONN.

use crate::*;

/// An RDMA Write (`WQE_OP_RDMA_WRITE`) or Read (`WQE_OP_RDMA_READ`) of the peer's region
/// at `remote`/`rkey`, gathering (Write) or scattering into (Read) `sges`.
pub fn rdma_wqe(op: u8, wr_id: u64, remote: u64, rkey: u32, sges: &[Sge]) -> WqeBytes {
    let mut h = wqe_hdr(op, wr_id);
    h.num_sge = sges.len() as u8;
    h.set_remote(remote, rkey);
    wqe_bytes(&h, sges)
}

/// A Send with Solicited Event gathering `sges`.
pub fn send_se_wqe(wr_id: u64, sges: &[Sge]) -> WqeBytes {
    let mut h = wqe_hdr(WQE_OP_SEND, wr_id);
    h.num_sge = sges.len() as u8;
    h.flags = WQE_FLAG_SOLICITED;
    wqe_bytes(&h, sges)
}

/// What one end of an iWARP connection brings: private data, IRD, ORD, `IWARP_CONN_*`.
#[derive(Clone, Debug, Default)]
pub struct Mpa {
    pub private_data: Vec<u8>,
    pub ird: u8,
    pub ord: u8,
    pub flags: u32,
}

impl Mpa {
    /// IRD and ORD of 4, no private data, no flags.
    pub fn plain() -> Mpa {
        Mpa {
            ird: 4,
            ord: 4,
            ..Mpa::default()
        }
    }
}

impl FakeGuest {
    /// The argument block for `m`, its private data written to a page of guest RAM.
    pub fn iwarp_args(&mut self, m: &Mpa) -> IwarpConnArgs {
        let mut a = IwarpConnArgs::new_zeroed();
        if !m.private_data.is_empty() {
            let page = self.alloc_pages(1);
            self.mem_write(page, &m.private_data);
            a.pd_addr = page;
        }
        a.pd_len = m.private_data.len() as u16;
        a.ird = m.ird;
        a.ord = m.ord;
        a.flags = m.flags;
        a
    }

    /// Submits an ACCEPT of `qp` on `listener` with MPA parameters `m`; returns the cmd_id.
    pub fn submit_accept_iwarp(&mut self, ctx: u32, listener: u32, qp: u32, m: &Mpa) -> u32 {
        let mut a = AcceptArgs::new_zeroed();
        a.qp = qp;
        a.iwarp = self.iwarp_args(m);
        self.admin_submit(cmd(ADMIN_OP_ACCEPT, ctx, listener, &a))
    }

    /// Submits a CONNECT of `qp` to `addr`/`port` with MPA parameters `m`.
    pub fn submit_connect_iwarp(
        &mut self,
        ctx: u32,
        qp: u32,
        addr: [u8; 16],
        port: u16,
        m: &Mpa,
    ) -> u32 {
        let mut a = ConnectArgs::new_zeroed();
        a.addr = addr;
        a.port = port;
        a.iwarp = self.iwarp_args(m);
        self.admin_submit(cmd(ADMIN_OP_CONNECT, ctx, qp, &a))
    }

    /// An iWARP QP in `ctx`, queues of `depth`, and a registered buffer of `buf_len` bytes
    /// (local write; remote rights come with regions of their own).
    pub fn iwarp_endpoint_in(&mut self, ctx: u32, depth: u32, buf_len: u64) -> TcpEnd {
        self.tcp_endpoint_in(ctx, FRAMING_IWARP, depth, buf_len)
    }

    /// Listens on `port` in `sctx`, accepts on a new iWARP QP there with `server`'s
    /// parameters and connects a new iWARP QP of `cctx` to it with `client`'s, over the
    /// device's loopback. Returns (server end, client end, CONNECT and ACCEPT completions).
    pub fn iwarp_pair(
        &mut self,
        (sctx, cctx): (u32, u32),
        port: u16,
        server: &Mpa,
        client: &Mpa,
    ) -> (TcpEnd, TcpEnd, AdminCqe, AdminCqe) {
        let s = self.iwarp_endpoint_in(sctx, 16, 1 << 20);
        let c = self.iwarp_endpoint_in(cctx, 16, 1 << 20);
        let l = self.listen(sctx, UNSPECIFIED, port, 4).expect("listen");
        let acc = self.submit_accept_iwarp(sctx, l, s.qp.id, server);
        let con = self.submit_connect_iwarp(cctx, c.qp.id, LOOPBACK, port, client);
        let con = self.admin_wait_done(con);
        let acc = self.admin_wait_done(acc);
        (s, c, con, acc)
    }

    /// QUERY_CONN of iWARP QP `qp`.
    pub fn query_conn(&mut self, ctx: u32, qp: u32) -> Result<ConnInfo, u16> {
        let buf = self.alloc_pages(1);
        let mut q = QueryArgs::new_zeroed();
        q.buf = buf;
        q.len = 4096;
        self.admin_result(cmd(ADMIN_OP_QUERY_CONN, ctx, qp, &q))?;
        Ok(self.read_obj(buf))
    }
}

/// A tripwire's parameters (`CreateTripwireArgs`).
pub fn tripwire_args(
    (lkey, addr, len): (u32, u64, u64),
    (arm_lkey, arm_addr): (u32, u64),
    cq: u32,
    tag: u64,
) -> CreateTripwireArgs {
    let mut a = CreateTripwireArgs::new_zeroed();
    (a.lkey, a.addr, a.len) = (lkey, addr, len);
    (a.arm_lkey, a.arm_addr) = (arm_lkey, arm_addr);
    a.cq = cq;
    a.tag = tag;
    a
}

impl FakeGuest {
    /// CREATE_TRIPWIRE; the tripwire's id.
    pub fn create_tripwire(&mut self, ctx: u32, a: &CreateTripwireArgs) -> Result<u32, u16> {
        self.admin_result(cmd(ADMIN_OP_CREATE_TRIPWIRE, ctx, 0, a))
            .map(|c| c.result0 as u32)
    }

    pub fn destroy_tripwire(&mut self, ctx: u32, id: u32) -> Result<(), u16> {
        self.admin_result(cmd0(ADMIN_OP_DESTROY_TRIPWIRE, ctx, id))
            .map(|_| ())
    }
}

/// An RDMA Write of `sges` to `remote`/`rkey` followed by RFC 7306 Immediate Data `imm`.
pub fn rdma_write_imm_wqe(wr_id: u64, remote: u64, rkey: u32, sges: &[Sge], imm: u32) -> WqeBytes {
    let mut h = wqe_hdr(WQE_OP_RDMA_WRITE, wr_id);
    h.num_sge = sges.len() as u8;
    h.set_remote(remote, rkey);
    h.flags = WQE_FLAG_IMM;
    h.imm_data = imm;
    wqe_bytes(&h, sges)
}
