//! A qpip engine driven synchronously on the caller's thread, with a guest around it: the
//! engine is built directly (the test kit's [`SyncEngine`]: no vfio-user, no engine thread)
//! and works only when [`SyncGuest::poll`] calls its `poll_once`, so two of them and their
//! guests can share one thread — one core, honestly. The guest side writes rings, WQEs and
//! doorbells into the same shared memory a real guest would, and reads CQEs by their phase
//! bit, with the test kit's ring arithmetic and command builders.

use qpip_device::backend::memory::MemoryLink;
use qpip_device::backend::NetSpec;
use qpip_device::engine::network::NetworkConfig;
use qpip_device::engine::{Control, EngineConfig};
use qpip_testkit::{
    cmd, contiguous, cq_body, cq_head, create_ctx_cmd, mr_body, qp_body, qp_rq_tail, qp_sq_tail,
    recv_wqe, ring_pages, tcp_send_wqe, AcceptArgs, AdminCmd, AdminCqe, AdminRing, Buf,
    ConnectArgs, Cq, Cqe, Endpoint, FromZeros, ListenArgs, Mr, Qp, Ram, SyncEngine,
    ADMIN_OP_ACCEPT, ADMIN_OP_CONNECT, ADMIN_OP_CREATE_CQ, ADMIN_OP_CREATE_QP, ADMIN_OP_LISTEN,
    ADMIN_OP_REG_MR, ADMIN_STATUS_OK, CQE_SIZE, DOORBELL_PAGES, FRAMING_MESSAGE,
    MR_ACCESS_LOCAL_WRITE, PAGE, QP_TYPE_TCP, RAM_BASE, WQE_SIZE,
};

use super::fail;

const ADMIN_DEPTH: u32 = 16;

pub struct SyncGuest {
    e: SyncEngine,
    /// Guest-physical address of each context's doorbell page, by context id.
    db_pages: Vec<u64>,
    admin: AdminRing,
    next_cmd_id: u32,
}

impl SyncGuest {
    /// An engine with `ram_mib` MiB of guest RAM, on `link` (else the link `spec` names) with
    /// `mtu`.
    pub fn new(
        mac: [u8; 6],
        addr: &str,
        spec: NetSpec,
        link: Option<MemoryLink>,
        mtu: usize,
        ram_mib: u64,
    ) -> SyncGuest {
        let mut ram = Ram::new(c"bench-guest", RAM_BASE, ram_mib << 20);
        let admin = AdminRing::new(ram.alloc_pages(1), ram.alloc_pages(1), ADMIN_DEPTH);
        let network = NetworkConfig {
            mtu,
            ..NetworkConfig::new(spec)
        };
        let config = EngineConfig {
            mac,
            addrs: vec![(addr.parse().expect("address"), 64)],
            network: Some(network.clone()),
            ..EngineConfig::default()
        };
        let mut e = SyncEngine::new(ram, config);
        match link {
            Some(l) => e.engine.attach_link(&network, Box::new(l)),
            None => e
                .engine
                .attach_network(&network)
                .unwrap_or_else(|err| fail(format!("network: {err}"))),
        }
        e.enable_admin(&admin);
        SyncGuest {
            e,
            db_pages: vec![0; DOORBELL_PAGES as usize],
            admin,
            next_cmd_id: 1,
        }
    }

    /// One pass of the engine.
    #[inline]
    pub fn poll(&mut self) -> bool {
        self.e.engine.poll_once()
    }

    /// Writes guest memory (the engine touches it only inside poll(), on this same thread).
    pub fn write(&self, gpa: u64, data: &[u8]) {
        self.e.ram.write(gpa, data);
    }

    /// Guest memory as it is, without a copy.
    pub fn slice(&self, gpa: u64, len: usize) -> &[u8] {
        // SAFETY: in bounds (Ram::ptr checks); the engine writes guest RAM only inside
        // poll(), which cannot run while this borrow of `self` lives.
        unsafe { std::slice::from_raw_parts(self.e.ram.ptr(gpa, len), len) }
    }

    /// `n` pages in one piece, and their page list in guest memory.
    fn pages(&mut self, n: u64) -> (Vec<u64>, u64) {
        let pages = contiguous(self.e.ram.alloc_pages(n), n);
        let list = self.e.ram.page_list(&pages);
        (pages, list)
    }

    /// Rings a doorbell in the context's page (guest RAM) with the ABI's producer. The
    /// engine runs on this thread, so it never sleeps under us: no kick is needed.
    fn ring(&self, ctx: u32, off: u32, value: u32) {
        let _ = self
            .e
            .ram
            .producer(self.db_pages[ctx as usize])
            .ring(off, value);
    }

    /// CREATE_CTX with a fresh page of guest RAM as the context's doorbell page.
    fn create_ctx(&mut self) -> u32 {
        let page = self.e.ram.alloc_pages(1);
        let ctx = self.admin(create_ctx_cmd(page)).result0 as u32;
        self.db_pages[ctx as usize] = page;
        ctx
    }

    /// Submits an admin command; returns its cmd_id.
    pub fn submit(&mut self, mut c: AdminCmd) -> u32 {
        c.cmd_id = self.next_cmd_id;
        self.next_cmd_id += 1;
        self.e.ram.write_obj(self.admin.push(), &c);
        self.e.control(Control::AdminSqTail(self.admin.tail));
        c.cmd_id
    }

    /// The next admin completion, if there is one.
    pub fn admin_done(&mut self) -> Option<AdminCqe> {
        let c = self.admin.take(&self.e.ram)?;
        self.e.control(Control::AdminCqHead(self.admin.head));
        if c.status != ADMIN_STATUS_OK {
            fail(format!("admin command {:#x} failed: {c:?}", c.opcode));
        }
        Some(c)
    }

    /// Runs a command that completes at once.
    pub fn admin(&mut self, c: AdminCmd) -> AdminCqe {
        let id = self.submit(c);
        for _ in 0..1000 {
            self.poll();
            if let Some(c) = self.admin_done() {
                if c.cmd_id != id {
                    fail(format!("admin completion out of order: {c:?}"));
                }
                return c;
            }
        }
        fail(format!("admin command {:#x} did not complete", c.opcode));
    }

    fn cq(&mut self, ctx: u32, depth: u32) -> Cq {
        let (pages, list) = self.pages(ring_pages(depth, CQE_SIZE));
        let a = cq_body(list, depth, 1);
        let c = self.admin(cmd(ADMIN_OP_CREATE_CQ, ctx, 0, &a));
        Cq::created(ctx, &a, pages, (c.result0 as u32, c.result1 as u32))
    }

    /// A context with a message-framed TCP QP of `depth`, CQs of twice that, and a buffer
    /// of `buf_len` bytes registered for local write at iova 0 (in one piece: a message
    /// of it is one run of guest memory).
    pub fn tcp_end(&mut self, depth: u32, buf_len: u64) -> Endpoint {
        let ctx = self.create_ctx();
        let scq = self.cq(ctx, 2 * depth);
        let rcq = self.cq(ctx, 2 * depth);
        let n = ring_pages(depth, WQE_SIZE);
        let sq = contiguous(self.e.ram.alloc_pages(n), n);
        let rq = contiguous(self.e.ram.alloc_pages(n), n);
        let lists = (self.e.ram.page_list(&sq), self.e.ram.page_list(&rq));
        let cqs = (scq.id, rcq.id);
        let a = qp_body(lists, cqs, (depth, depth), QP_TYPE_TCP, FRAMING_MESSAGE);
        let c = self.admin(cmd(ADMIN_OP_CREATE_QP, ctx, 0, &a));
        let qp = Qp::created(ctx, &a, (sq, rq), (c.result0 as u32, c.result1 as u32));
        let npages = buf_len.div_ceil(PAGE);
        let (pages, list) = self.pages(npages);
        let m = mr_body(list, npages as u32, 0, 0, buf_len, MR_ACCESS_LOCAL_WRITE);
        let lkey = self.admin(cmd(ADMIN_OP_REG_MR, ctx, 0, &m)).result0 as u32;
        Endpoint {
            ctx,
            qp,
            scq,
            rcq,
            buf: Buf {
                pages,
                offset: 0,
                len: buf_len,
                iova: 0,
            },
            mr: Mr { lkey, rkey: 0 },
            port: 0,
        }
    }

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

    /// Takes the CQEs that are there and publishes the new head once for all of them (the
    /// bench's guest consumes in batches, as a busy application does, not one doorbell per
    /// CQE).
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
/// driving both engines until both sides completed.
pub fn connect(
    sg: &mut SyncGuest,
    server: &Endpoint,
    cg: &mut SyncGuest,
    client: &Endpoint,
    addr: &str,
    port: u16,
) {
    let mut l = ListenArgs::new_zeroed();
    l.port = port;
    l.backlog = 4;
    let listener = sg.admin(cmd(ADMIN_OP_LISTEN, server.ctx, 0, &l)).result0 as u32;
    let mut a = AcceptArgs::new_zeroed();
    a.qp = server.qp.id;
    sg.submit(cmd(ADMIN_OP_ACCEPT, server.ctx, listener, &a));
    let mut c = ConnectArgs::new_zeroed();
    c.addr = qpip_testkit::ip(addr);
    c.port = port;
    cg.submit(cmd(ADMIN_OP_CONNECT, client.ctx, client.qp.id, &c));
    let (mut accepted, mut connected) = (false, false);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !(accepted && connected) {
        sg.poll();
        cg.poll();
        accepted |= sg.admin_done().is_some();
        connected |= cg.admin_done().is_some();
        if std::time::Instant::now() > deadline {
            fail("the bench connection did not come up within 10 s");
        }
    }
}
