//! Work queues as the library drives them: WQEs built from `abi` structures, posted with
//! a doorbell, completions polled and waited for; UDP endpoints set up in one call.

use crate::*;

/// One 128-byte WQE slot.
pub type WqeBytes = [u8; WQE_SIZE as usize];

/// A WQE header with everything zero.
pub fn wqe_hdr(opcode: u8, wr_id: u64) -> Wqe {
    let mut w = Wqe::new_zeroed();
    w.opcode = opcode;
    w.wr_id = wr_id;
    w
}

/// Serializes a header and its SGEs into a slot (`num_sge` is taken from the header as
/// given, so malformed WQEs can be built).
pub fn wqe_bytes(hdr: &Wqe, sges: &[Sge]) -> WqeBytes {
    qpip_abi::wqe::slot(hdr, sges)
}

/// A UDP send WQE gathering `sges`.
pub fn send_wqe(wr_id: u64, dest: [u8; 16], port: u16, sges: &[Sge]) -> WqeBytes {
    let mut h = wqe_hdr(WQE_OP_SEND, wr_id);
    h.num_sge = sges.len() as u8;
    h.dest_addr = dest;
    h.dest_port = port;
    wqe_bytes(&h, sges)
}

/// A UDP send WQE with inline data.
pub fn inline_wqe(wr_id: u64, dest: [u8; 16], port: u16, data: &[u8]) -> WqeBytes {
    let mut h = wqe_hdr(WQE_OP_SEND, wr_id);
    h.flags = WQE_FLAG_INLINE;
    h.inline_len = data.len() as u32;
    h.dest_addr = dest;
    h.dest_port = port;
    qpip_abi::wqe::slot_with(&h, data)
}

/// A receive WQE scattering into `sges`.
pub fn recv_wqe(wr_id: u64, sges: &[Sge]) -> WqeBytes {
    let mut h = wqe_hdr(WQE_OP_RECV, wr_id);
    h.num_sge = sges.len() as u8;
    wqe_bytes(&h, sges)
}

impl FakeGuest {
    // ---- work queues ----------------------------------------------------------------------

    /// Writes WQEs into the send ring without ringing.
    pub fn write_sq(&mut self, qp: &mut Qp, wqes: &[WqeBytes]) {
        for w in wqes {
            self.mem_write(qp.push_sq(), w);
        }
    }

    pub fn write_rq(&mut self, qp: &mut Qp, wqes: &[WqeBytes]) {
        for w in wqes {
            self.mem_write(qp.push_rq(), w);
        }
    }

    /// Posts send WQEs and rings the SQ doorbell once.
    pub fn post_send(&mut self, qp: &mut Qp, wqes: &[WqeBytes]) {
        self.write_sq(qp, wqes);
        self.ring(qp.ctx, qp_sq_tail(qp.slot), qp.sq_tail);
    }

    /// Posts receive WQEs and rings the RQ doorbell once.
    pub fn post_recv(&mut self, qp: &mut Qp, wqes: &[WqeBytes]) {
        self.write_rq(qp, wqes);
        self.ring(qp.ctx, qp_rq_tail(qp.slot), qp.rq_tail);
    }

    /// The CQE in ring slot `idx % depth`, whatever its phase.
    pub fn cq_slot(&self, cq: &Cq, idx: u32) -> Cqe {
        self.read_obj(cq.slot_gpa(idx))
    }

    /// Whether CQE number `idx` (free-running) has been written in the current pass.
    pub fn cqe_ready(&self, cq: &Cq, idx: u32) -> bool {
        self.ram.cqe_ready(cq, idx)
    }

    /// Takes the next CQE if there is one, without publishing the new head (a consumer
    /// that takes several publishes once, with [`FakeGuest::publish_cq_head`]).
    pub fn take_cqe(&self, cq: &mut Cq) -> Option<Cqe> {
        self.ram.take_cqe(cq)
    }

    /// Publishes how far the consumer has taken CQEs (`cq_head` in the doorbell page).
    pub fn publish_cq_head(&mut self, cq: &Cq) {
        self.ring(cq.ctx, cq_head(cq.slot), cq.head);
    }

    /// Takes the next CQE if there is one and publishes the new head.
    pub fn poll_cq(&mut self, cq: &mut Cq) -> Option<Cqe> {
        let c = self.take_cqe(cq)?;
        self.publish_cq_head(cq);
        Some(c)
    }

    /// Waits up to `timeout` for the next CQE.
    pub fn try_wait_cqe(&mut self, cq: &mut Cq, timeout: Duration) -> Option<Cqe> {
        let at = cq.owner_gpa(cq.head);
        if !self.wait_phase(at, phase(cq.head, cq.depth), timeout) {
            return None;
        }
        self.poll_cq(cq)
    }

    /// Waits for the next CQE; panics after [`TIMEOUT`].
    #[track_caller]
    pub fn wait_cqe(&mut self, cq: &mut Cq) -> Cqe {
        match self.try_wait_cqe(cq, TIMEOUT) {
            Some(c) => c,
            None => panic!(
                "no CQE on CQ {} (ctx {}) within {TIMEOUT:?}; head {}, engine_sleeping {}",
                cq.id,
                cq.ctx,
                cq.head,
                self.engine_sleeping(cq.ctx)
            ),
        }
    }

    /// Arms a CQ (one interrupt at the next CQE beyond head).
    pub fn arm_cq(&mut self, cq: &mut Cq) {
        cq.arm_seq = cq.arm_seq.wrapping_add(1) & qpip_abi::doorbell::CQ_ARM_SEQ_MASK;
        self.ring(cq.ctx, cq_arm_seq(cq.slot), cq.arm_seq);
    }

    /// Arms `cq` for its next solicited CQE only (a receive or an error, not a send's
    /// success).
    pub fn arm_cq_solicited(&mut self, cq: &mut Cq) {
        cq.arm_seq = (cq.arm_seq.wrapping_add(1) & qpip_abi::doorbell::CQ_ARM_SEQ_MASK)
            | qpip_abi::doorbell::CQ_ARM_SOLICITED;
        self.ring(cq.ctx, cq_arm_seq(cq.slot), cq.arm_seq);
    }

    // ---- composite set-ups ----------------------------------------------------------------

    /// In `ctx`: a QP of `qp_type` with `framing` and queues of `depth`, its own send and
    /// receive CQs of `cq_depth`, and a registered (LOCAL_WRITE) buffer of `buf_len` (at
    /// least 64) bytes. Not bound: `port` is 0.
    pub fn endpoint_in(
        &mut self,
        ctx: u32,
        (qp_type, framing): (u8, u8),
        depth: u32,
        cq_depth: u32,
        buf_len: u64,
    ) -> Endpoint {
        let scq = self.create_cq(ctx, cq_depth).expect("create send CQ");
        let rcq = self.create_cq(ctx, cq_depth).expect("create recv CQ");
        let qp = self
            .create_qp_typed(ctx, (scq.id, rcq.id), (depth, depth), qp_type, framing)
            .unwrap_or_else(|s| panic!("create QP of type {qp_type}: {}", admin_status_name(s)));
        let buf = self.alloc_buf(buf_len.max(64), 0);
        let mr = self
            .reg_mr(ctx, &buf, MR_ACCESS_LOCAL_WRITE)
            .expect("register buffer");
        Endpoint::unbound(qp, (scq, rcq), buf, mr)
    }

    /// A context with a UDP QP bound to `addr`/`port`, its own send and receive CQs of
    /// `cq_depth`, queues of `depth`, and a registered (LOCAL_WRITE) buffer of `buf_len`.
    pub fn udp_endpoint_in(
        &mut self,
        ctx: u32,
        addr: [u8; 16],
        port: u16,
        depth: u32,
        cq_depth: u32,
        buf_len: u64,
    ) -> Udp {
        let mut e = self.endpoint_in(ctx, (QP_TYPE_UDP, 0), depth, cq_depth, buf_len);
        e.port = self.bind(ctx, e.qp.id, addr, port).expect("bind");
        e
    }

    /// As [`Self::udp_endpoint_in`], in a new context, bound to every address.
    pub fn udp_endpoint(&mut self, port: u16, depth: u32, buf_len: u64) -> Udp {
        let ctx = self.create_ctx().expect("create context");
        self.udp_endpoint_in(ctx, UNSPECIFIED, port, depth, 2 * depth, buf_len)
    }
}
