//! The guest around a [`SyncEngine`]: the driver's and the application's side of an engine
//! that works only when [`SyncGuest::poll`] runs it, so that several engines and their
//! guests share one thread and every step is the caller's. It writes admin commands, WQEs
//! and doorbells into the same guest RAM a real guest would, and reads completions by their
//! phase bit, with the kit's ring arithmetic and command builders; the engine never sleeps
//! under it (it runs on the same thread), so doorbells need no kick. The engine bench's
//! throughput sections drive their engines this way. Set-up commands must succeed: a
//! failure panics.

use std::time::{Duration, Instant};

use qpip_device::engine::Control;

use crate::*;

/// Admin queue depth: set-up runs one command at a time, a connection two.
const ADMIN_DEPTH: u32 = 16;

pub struct SyncGuest {
    e: SyncEngine,
    /// Guest-physical address of each context's doorbell page, by context id.
    db_pages: Vec<u64>,
    admin: AdminRing,
    next_cmd_id: u32,
}

impl SyncGuest {
    /// A guest around `e` (its network attached or not), with an admin queue in the first
    /// pages its RAM hands out, enabled.
    pub fn new(mut e: SyncEngine) -> SyncGuest {
        let admin = AdminRing::new(e.ram.alloc_pages(1), e.ram.alloc_pages(1), ADMIN_DEPTH);
        e.enable_admin(&admin);
        SyncGuest {
            e,
            db_pages: vec![0; DOORBELL_PAGES as usize],
            admin,
            next_cmd_id: 1,
        }
    }

    /// One pass of the engine: whether it did anything.
    #[inline]
    pub fn poll(&mut self) -> bool {
        self.e.engine.poll_once()
    }

    /// Writes guest memory (the engine touches it only inside poll(), on this same thread).
    #[inline]
    pub fn write(&self, gpa: u64, data: &[u8]) {
        self.e.ram.write(gpa, data);
    }

    /// Guest memory as it is, without a copy.
    #[inline]
    pub fn slice(&self, gpa: u64, len: usize) -> &[u8] {
        // SAFETY: in bounds (Ram::ptr checks); the engine writes guest RAM only inside
        // poll(), which cannot run while this borrow of `self` lives.
        unsafe { std::slice::from_raw_parts(self.e.ram.ptr(gpa, len), len) }
    }

    /// Rings a doorbell in the context's page (guest RAM) with the ABI's producer. The
    /// engine runs on this thread, so it never sleeps under us: no kick is needed.
    #[inline]
    fn ring(&self, ctx: u32, off: u32, value: u32) {
        let _ = self
            .e
            .ram
            .producer(self.db_pages[ctx as usize])
            .ring(off, value);
    }

    // ---- admin queue ----------------------------------------------------------------------

    /// Submits an admin command; returns its cmd_id.
    pub fn submit(&mut self, mut c: AdminCmd) -> u32 {
        c.cmd_id = self.next_cmd_id;
        self.next_cmd_id += 1;
        self.e.ram.write_obj(self.admin.push(), &c);
        self.e.control(Control::AdminSqTail(self.admin.tail));
        c.cmd_id
    }

    /// The next admin completion, if there is one (it must be a success).
    pub fn admin_done(&mut self) -> Option<AdminCqe> {
        let c = self.admin.take(&self.e.ram)?;
        self.e.control(Control::AdminCqHead(self.admin.head));
        assert_eq!(
            c.status, ADMIN_STATUS_OK,
            "admin command {:#x} failed: {c:?}",
            c.opcode
        );
        Some(c)
    }

    /// Runs a command that completes at once.
    pub fn admin(&mut self, c: AdminCmd) -> AdminCqe {
        let id = self.submit(c);
        for _ in 0..1000 {
            self.poll();
            if let Some(c) = self.admin_done() {
                assert_eq!(c.cmd_id, id, "admin completion out of order: {c:?}");
                return c;
            }
        }
        panic!("admin command {:#x} did not complete", c.opcode);
    }

    /// Runs a command that completes at once and may fail: its completion, whatever its
    /// status.
    pub fn admin_any(&mut self, c: AdminCmd) -> AdminCqe {
        let id = self.submit(c);
        for _ in 0..1000 {
            self.poll();
            if let Some(c) = self.admin.take(&self.e.ram) {
                self.e.control(Control::AdminCqHead(self.admin.head));
                assert_eq!(c.cmd_id, id, "admin completion out of order: {c:?}");
                return c;
            }
        }
        panic!("admin command {:#x} did not complete", c.opcode);
    }

    // ---- objects --------------------------------------------------------------------------

    /// CREATE_CTX with a fresh page of guest RAM as the context's doorbell page.
    pub fn create_ctx(&mut self) -> u32 {
        let page = self.e.ram.alloc_pages(1);
        let ctx = self.admin(create_ctx_cmd(page)).result0 as u32;
        self.db_pages[ctx as usize] = page;
        ctx
    }

    /// CREATE_CTX with `flags` (`CTX_FLAG_*`): the context, or the admin status.
    pub fn create_ctx_flags(&mut self, flags: u32) -> Result<u32, u16> {
        let page = self.e.ram.alloc_pages(1);
        let mut a = CreateCtxArgs::new_zeroed();
        a.doorbell_page = page;
        a.flags = flags;
        let c = self.admin_any(cmd(ADMIN_OP_CREATE_CTX, 0, 0, &a));
        if c.status != ADMIN_STATUS_OK {
            return Err(c.status);
        }
        let ctx = c.result0 as u32;
        self.db_pages[ctx as usize] = page;
        Ok(ctx)
    }

    /// CREATE_QP as [`SyncGuest::create_qp`], its status kept: the QP, or the admin status.
    pub fn try_create_qp(
        &mut self,
        ctx: u32,
        cqs: (u32, u32),
        depth: u32,
        types: (u8, u8),
    ) -> Result<Qp, u16> {
        let (c, plan) = PlannedQp::new(&mut self.e.ram, ctx, cqs, depth, types);
        let c = self.admin_any(c);
        if c.status != ADMIN_STATUS_OK {
            return Err(c.status);
        }
        Ok(plan.created((c.result0, c.result1)))
    }

    /// Device counter `which` (`STAT_*`), through QUERY_STATS.
    pub fn stat(&mut self, which: u32) -> u64 {
        let page = self.e.ram.alloc_pages(1);
        let c = self.admin(query_cmd(ADMIN_OP_QUERY_STATS, page, 4096));
        assert_eq!(c.status, ADMIN_STATUS_OK, "QUERY_STATS");
        let at = page + which as u64 * 8;
        u64::from_le_bytes(self.slice(at, 8).try_into().expect("8 bytes"))
    }

    /// Writes `wqes` into `qp`'s send ring (`send`) or receive ring and rings once.
    pub fn post_wqes(&mut self, qp: &mut Qp, send: bool, wqes: &[WqeBytes]) {
        for w in wqes {
            let at = if send { qp.push_sq() } else { qp.push_rq() };
            self.write(at, w);
        }
        let (off, tail) = if send {
            (qp_sq_tail(qp.slot), qp.sq_tail)
        } else {
            (qp_rq_tail(qp.slot), qp.rq_tail)
        };
        self.ring(qp.ctx, off, tail);
    }

    /// Runs a command that completes at once: its (result0, result1).
    fn results(&mut self, c: AdminCmd) -> (u64, u64) {
        let c = self.admin(c);
        (c.result0, c.result1)
    }

    /// A CQ of `depth` entries in one piece of fresh pages, on vector 1.
    pub fn create_cq(&mut self, ctx: u32, depth: u32) -> Cq {
        let (c, plan) = PlannedCq::new(&mut self.e.ram, ctx, depth, 1);
        plan.created(self.results(c))
    }

    /// A QP of `types` (QP type, framing), both queues `depth` deep in fresh pages,
    /// completing to the CQs `cqs` (send, receive).
    pub fn create_qp(&mut self, ctx: u32, cqs: (u32, u32), depth: u32, types: (u8, u8)) -> Qp {
        let (c, plan) = PlannedQp::new(&mut self.e.ram, ctx, cqs, depth, types);
        plan.created(self.results(c))
    }

    /// A buffer of `len` bytes in one piece of fresh pages (a message of it is one run of
    /// guest memory), registered with `access` at iova 0.
    pub fn reg_buf(&mut self, ctx: u32, len: u64, access: u32) -> (Buf, Mr) {
        let npages = len.div_ceil(PAGE);
        let (pages, list) = contiguous_pages(&mut self.e.ram, npages);
        let m = mr_body(list, npages as u32, 0, 0, len, access);
        let c = self.admin(cmd(ADMIN_OP_REG_MR, ctx, 0, &m));
        let buf = Buf {
            pages,
            offset: 0,
            len,
            iova: 0,
        };
        let mr = Mr {
            lkey: c.result0 as u32,
            rkey: c.result1 as u32,
        };
        (buf, mr)
    }

    /// A context with a message-framed TCP QP of `depth`, CQs of twice that, and a buffer
    /// of `buf_len` bytes registered for local write.
    pub fn tcp_end(&mut self, depth: u32, buf_len: u64) -> Endpoint {
        let ctx = self.create_ctx();
        let scq = self.create_cq(ctx, 2 * depth);
        let rcq = self.create_cq(ctx, 2 * depth);
        let qp = self.create_qp(ctx, (scq.id, rcq.id), depth, (QP_TYPE_TCP, FRAMING_MESSAGE));
        let (buf, mr) = self.reg_buf(ctx, buf_len, MR_ACCESS_LOCAL_WRITE);
        Endpoint::unbound(qp, (scq, rcq), buf, mr)
    }

    // ---- data path ------------------------------------------------------------------------

    /// Writes one-SGE WQEs of (offset in the registered buffer, length, wr_id) into the send
    /// queue (`send`) or the receive queue, then rings once.
    fn post(&mut self, e: &mut Endpoint, send: bool, wrs: &[(u64, u32, u64)]) {
        for &(off, len, wr_id) in wrs {
            let sge = [e.buf.sge(off, len, e.mr.lkey)];
            let (at, wqe) = if send {
                (e.qp.push_sq(), tcp_send_wqe(wr_id, 0, &sge))
            } else {
                (e.qp.push_rq(), recv_wqe(wr_id, &sge))
            };
            self.write(at, &wqe);
        }
        let (off, tail) = if send {
            (qp_sq_tail(e.qp.slot), e.qp.sq_tail)
        } else {
            (qp_rq_tail(e.qp.slot), e.qp.rq_tail)
        };
        self.ring(e.qp.ctx, off, tail);
    }

    /// Sends of (offset, length, wr_id), rung once.
    pub fn post_sends(&mut self, e: &mut Endpoint, sends: &[(u64, u32, u64)]) {
        self.post(e, true, sends);
    }

    /// Receives of (offset, length, wr_id), rung once.
    pub fn post_recvs(&mut self, e: &mut Endpoint, recvs: &[(u64, u32, u64)]) {
        self.post(e, false, recvs);
    }

    /// Takes the CQEs that are there and publishes the new head once for all of them (a
    /// busy application consumes in batches, not one doorbell per CQE).
    pub fn reap(&mut self, cq: &mut Cq, out: &mut Vec<Cqe>) {
        let start = cq.head;
        while let Some(c) = self.e.ram.take_cqe(cq) {
            out.push(c);
        }
        if cq.head != start {
            self.ring(cq.ctx, cq_head(cq.slot), cq.head);
        }
    }
}

/// Connects `client` (on `cg`) to a listener for `server` (on `sg`) at `addr` port `port`,
/// driving both engines until both sides completed (within 10 s).
pub fn sync_connect(
    sg: &mut SyncGuest,
    server: &Endpoint,
    cg: &mut SyncGuest,
    client: &Endpoint,
    addr: [u8; 16],
    port: u16,
) {
    let listener = sg
        .admin(listen_cmd(server.ctx, UNSPECIFIED, port, 4))
        .result0 as u32;
    sg.submit(accept_cmd(server.ctx, listener, server.qp.id));
    cg.submit(connect_cmd(client.ctx, client.qp.id, addr, port));
    let (mut accepted, mut connected) = (false, false);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !(accepted && connected) {
        sg.poll();
        cg.poll();
        accepted |= sg.admin_done().is_some();
        connected |= cg.admin_done().is_some();
        assert!(
            Instant::now() <= deadline,
            "the connection did not come up within 10 s"
        );
    }
}
