//! A qpip engine driven synchronously on the caller's thread, with a guest around it: the
//! engine is built directly (no vfio-user, no engine thread) and works only when
//! [`SyncGuest::poll`] calls its `poll_once`, so two of them and their guests can share one
//! thread — one core, honestly. The guest side writes rings, WQEs and doorbells into the
//! same shared memory a real guest would, and reads CQEs by their phase bit.

use std::fs::File;
use std::os::fd::FromRawFd;
use std::sync::mpsc::{self, Sender};
use std::sync::Arc;

use qpip_abi::admin::*;
use qpip_abi::cqe::*;
use qpip_abi::doorbell::*;
use qpip_abi::pci::*;
use qpip_abi::wqe::*;
use qpip_device::backend::memory::MemoryLink;
use qpip_device::backend::NetSpec;
use qpip_device::dma::GuestRam;
use qpip_device::engine::network::NetworkConfig;
use qpip_device::engine::{Control, Engine, EngineConfig, Shared};
use qpip_device::irq::Interrupts;
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes};

use super::fail;

const RAM_BASE: u64 = 0x1_0000_0000;
const PAGE: u64 = 4096;
const ADMIN_DEPTH: u32 = 16;
const ADMIN_SQ: u64 = RAM_BASE;
const ADMIN_CQ: u64 = RAM_BASE + PAGE;

pub struct SyncGuest {
    pub engine: Engine,
    _tx: Sender<Control>,
    _ram_file: File,
    ram: *mut u8,
    ram_size: u64,
    /// Guest-physical address of each context's doorbell page, by context id.
    db_pages: Vec<u64>,
    next_page: u64,
    admin_tail: u32,
    admin_head: u32,
    next_cmd_id: u32,
}

pub struct Cq {
    pub id: u32,
    ctx: u32,
    slot: u32,
    ring: u64,
    depth: u32,
    head: u32,
}

pub struct Qp {
    pub id: u32,
    ctx: u32,
    slot: u32,
    sq: Vec<u64>,
    rq: Vec<u64>,
    pub depth: u32,
    sq_tail: u32,
    rq_tail: u32,
}

/// A TCP QP with its CQs and one registered buffer (at iova 0).
pub struct End {
    pub ctx: u32,
    pub qp: Qp,
    pub scq: Cq,
    pub rcq: Cq,
    pub lkey: u32,
    pub buf: u64,
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
        let ram_size = ram_mib << 20;
        // SAFETY: memfd_create with a valid name; the fd is owned by the File.
        let fd = unsafe { libc::memfd_create(c"bench-guest".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            fail(format!("memfd_create: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: fd was just created and is owned by nothing else.
        let ram_file = unsafe { File::from_raw_fd(fd) };
        ram_file.set_len(ram_size).unwrap_or_else(|e| fail(e));
        let mut guest_ram = GuestRam::new();
        guest_ram
            .map(
                RAM_BASE,
                ram_size,
                0,
                Some(ram_file.try_clone().unwrap_or_else(|e| fail(e))),
            )
            .unwrap_or_else(|e| fail(format!("map guest RAM: {e}")));
        let ram = super::map_shared(
            std::os::fd::AsRawFd::as_raw_fd(&ram_file),
            0,
            ram_size as usize,
        );
        let irqs = Arc::new(Interrupts::new(MSIX_VECTORS as usize));
        let shared = Shared::new(guest_ram.memory(), irqs);
        let (tx, rx) = mpsc::channel();
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
        let mut engine = Engine::new(shared, config, rx);
        match link {
            Some(l) => engine.attach_link(&network, Box::new(l)),
            None => engine
                .attach_network(&network)
                .unwrap_or_else(|e| fail(format!("network: {e}"))),
        }
        let mut g = SyncGuest {
            engine,
            _tx: tx,
            _ram_file: ram_file,
            ram,
            ram_size,
            db_pages: vec![0; DOORBELL_PAGES as usize],
            next_page: RAM_BASE + 2 * PAGE,
            admin_tail: 0,
            admin_head: 0,
            next_cmd_id: 1,
        };
        g.engine.handle(Control::AdminEnable {
            sq: ADMIN_SQ,
            cq: ADMIN_CQ,
            depth: ADMIN_DEPTH,
        });
        g
    }

    /// One pass of the engine.
    #[inline]
    pub fn poll(&mut self) -> bool {
        self.engine.poll_once()
    }

    fn ptr(&self, gpa: u64, len: usize) -> *mut u8 {
        if gpa < RAM_BASE || gpa + len as u64 > RAM_BASE + self.ram_size {
            fail(format!("guest address {gpa:#x}+{len} outside RAM"));
        }
        // SAFETY: inside the mapping (checked).
        unsafe { self.ram.add((gpa - RAM_BASE) as usize) }
    }

    pub fn write(&self, gpa: u64, data: &[u8]) {
        // SAFETY: in bounds (ptr checks); the engine touches guest RAM only inside poll(),
        // on this same thread.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr(gpa, data.len()), data.len())
        }
    }

    pub fn slice(&self, gpa: u64, len: usize) -> &[u8] {
        // SAFETY: as in write.
        unsafe { std::slice::from_raw_parts(self.ptr(gpa, len), len) }
    }

    fn write_obj<T: IntoBytes + Immutable>(&self, gpa: u64, v: &T) {
        self.write(gpa, v.as_bytes());
    }

    fn read_obj<T: FromBytes>(&self, gpa: u64) -> T {
        T::read_from_bytes(self.slice(gpa, std::mem::size_of::<T>())).expect("sized")
    }

    pub fn alloc(&mut self, bytes: u64) -> u64 {
        let at = self.next_page;
        self.next_page += bytes.div_ceil(PAGE) * PAGE;
        if self.next_page > RAM_BASE + self.ram_size {
            fail("bench guest RAM exhausted");
        }
        at
    }

    fn page_list(&mut self, first: u64, n: u64) -> u64 {
        let pages: Vec<u64> = (0..n).map(|i| first + i * PAGE).collect();
        let at = self.alloc(n * 8);
        self.write(at, pages.as_bytes());
        at
    }

    /// Rings a doorbell in the context's page (guest RAM) with the ABI's producer. The
    /// engine runs on this thread, so it never sleeps under us: no kick is needed.
    fn ring(&self, ctx: u32, off: u32, value: u32) {
        let page = self.ptr(self.db_pages[ctx as usize], DOORBELL_PAGE_SIZE as usize);
        // SAFETY: a whole page inside the RAM mapping (ptr checks), page-aligned, mapped as
        // long as `self`; doorbell pages are touched only through the producer's atomics.
        let _ = unsafe { Producer::from_ptr(page) }.ring(off, value);
    }

    /// CREATE_CTX with a fresh page of guest RAM as the context's doorbell page.
    fn create_ctx(&mut self) -> u32 {
        let page = self.alloc(PAGE);
        let mut a = CreateCtxArgs::new_zeroed();
        a.doorbell_page = page;
        let ctx = self.admin(ADMIN_OP_CREATE_CTX, 0, 0, a.as_bytes()).result0 as u32;
        self.db_pages[ctx as usize] = page;
        ctx
    }

    /// Submits an admin command; returns its cmd_id.
    pub fn submit(&mut self, opcode: u16, ctx: u32, handle: u32, body: &[u8]) -> u32 {
        let mut c = AdminCmd::new_zeroed();
        c.opcode = opcode;
        c.ctx = ctx;
        c.handle = handle;
        c.body[..body.len()].copy_from_slice(body);
        c.cmd_id = self.next_cmd_id;
        self.next_cmd_id += 1;
        self.write_obj(ADMIN_SQ + (self.admin_tail % ADMIN_DEPTH) as u64 * 64, &c);
        self.admin_tail = self.admin_tail.wrapping_add(1);
        self.engine.handle(Control::AdminSqTail(self.admin_tail));
        c.cmd_id
    }

    /// The next admin completion, if there is one.
    pub fn admin_done(&mut self) -> Option<AdminCqe> {
        let at = ADMIN_CQ + (self.admin_head % ADMIN_DEPTH) as u64 * 32;
        let phase = ((self.admin_head / ADMIN_DEPTH) & 1 ^ 1) as u8;
        if self.slice(at + 31, 1)[0] & 1 != phase {
            return None;
        }
        let c: AdminCqe = self.read_obj(at);
        self.admin_head = self.admin_head.wrapping_add(1);
        self.engine.handle(Control::AdminCqHead(self.admin_head));
        if c.status != ADMIN_STATUS_OK {
            fail(format!("admin command {:#x} failed: {c:?}", c.opcode));
        }
        Some(c)
    }

    /// Runs a command that completes at once.
    pub fn admin(&mut self, opcode: u16, ctx: u32, handle: u32, body: &[u8]) -> AdminCqe {
        let id = self.submit(opcode, ctx, handle, body);
        for _ in 0..1000 {
            self.poll();
            if let Some(c) = self.admin_done() {
                if c.cmd_id != id {
                    fail(format!("admin completion out of order: {c:?}"));
                }
                return c;
            }
        }
        fail(format!("admin command {opcode:#x} did not complete"));
    }

    fn cq(&mut self, ctx: u32, depth: u32) -> Cq {
        let npages = (depth as u64 * CQE_SIZE as u64).div_ceil(PAGE);
        let ring = self.alloc(npages * PAGE);
        let mut a = CreateCqArgs::new_zeroed();
        a.page_list = self.page_list(ring, npages);
        a.npages = npages as u32;
        a.depth = depth;
        a.vector = 1;
        let c = self.admin(ADMIN_OP_CREATE_CQ, ctx, 0, a.as_bytes());
        Cq {
            id: c.result0 as u32,
            ctx,
            slot: c.result1 as u32,
            ring,
            depth,
            head: 0,
        }
    }

    /// A context with a message-framed TCP QP of `depth`, CQs of twice that, and a buffer
    /// of `buf_len` bytes registered for local write at iova 0.
    pub fn tcp_end(&mut self, depth: u32, buf_len: u64) -> End {
        let ctx = self.create_ctx();
        let scq = self.cq(ctx, 2 * depth);
        let rcq = self.cq(ctx, 2 * depth);
        let n = (depth as u64 * WQE_SIZE as u64).div_ceil(PAGE);
        let sq_at = self.alloc(n * PAGE);
        let rq_at = self.alloc(n * PAGE);
        let mut a = CreateQpArgs::new_zeroed();
        a.sq_page_list = self.page_list(sq_at, n);
        a.rq_page_list = self.page_list(rq_at, n);
        a.send_cq = scq.id;
        a.recv_cq = rcq.id;
        a.sq_depth = depth;
        a.rq_depth = depth;
        a.sq_npages = n as u16;
        a.rq_npages = n as u16;
        a.qp_type = QP_TYPE_TCP;
        a.framing = FRAMING_MESSAGE;
        let c = self.admin(ADMIN_OP_CREATE_QP, ctx, 0, a.as_bytes());
        let buf = self.alloc(buf_len);
        let npages = buf_len.div_ceil(PAGE);
        let mut m = RegMrArgs::new_zeroed();
        m.page_list = self.page_list(buf, npages);
        m.iova = 0;
        m.length = buf_len;
        m.npages = npages as u32;
        m.access = MR_ACCESS_LOCAL_WRITE;
        let lkey = self.admin(ADMIN_OP_REG_MR, ctx, 0, m.as_bytes()).result0 as u32;
        End {
            ctx,
            qp: Qp {
                id: c.result0 as u32,
                ctx,
                slot: c.result1 as u32,
                sq: (0..n).map(|i| sq_at + i * PAGE).collect(),
                rq: (0..n).map(|i| rq_at + i * PAGE).collect(),
                depth,
                sq_tail: 0,
                rq_tail: 0,
            },
            scq,
            rcq,
            lkey,
            buf,
        }
    }

    fn wqe_at(pages: &[u64], depth: u32, index: u32) -> u64 {
        let off = (index % depth) as u64 * WQE_SIZE as u64;
        pages[(off / PAGE) as usize] + off % PAGE
    }

    fn wqe(&self, at: u64, opcode: u8, wr_id: u64, sge: Sge) {
        let mut h = Wqe::new_zeroed();
        h.wr_id = wr_id;
        h.opcode = opcode;
        h.num_sge = 1;
        let mut b = [0u8; WQE_SIZE as usize];
        b[..std::mem::size_of::<Wqe>()].copy_from_slice(h.as_bytes());
        let o = WQE_SGE_OFFSET as usize;
        b[o..o + std::mem::size_of::<Sge>()].copy_from_slice(sge.as_bytes());
        self.write(at, &b);
    }

    /// Writes send WQEs of (offset, length) in the registered buffer, then rings once.
    pub fn post_sends(&mut self, e: &mut End, sends: &[(u64, u32, u64)]) {
        for &(off, len, wr_id) in sends {
            let at = Self::wqe_at(&e.qp.sq, e.qp.depth, e.qp.sq_tail);
            let sge = Sge {
                addr: off,
                length: len,
                lkey: e.lkey,
            };
            self.wqe(at, WQE_OP_SEND, wr_id, sge);
            e.qp.sq_tail = e.qp.sq_tail.wrapping_add(1);
        }
        let off = qp_sq_tail(e.qp.slot);
        self.ring(e.qp.ctx, off, e.qp.sq_tail);
    }

    /// Writes receive WQEs of (offset, length), then rings once.
    pub fn post_recvs(&mut self, e: &mut End, recvs: &[(u64, u32, u64)]) {
        for &(off, len, wr_id) in recvs {
            let at = Self::wqe_at(&e.qp.rq, e.qp.depth, e.qp.rq_tail);
            let sge = Sge {
                addr: off,
                length: len,
                lkey: e.lkey,
            };
            self.wqe(at, WQE_OP_RECV, wr_id, sge);
            e.qp.rq_tail = e.qp.rq_tail.wrapping_add(1);
        }
        let off = qp_rq_tail(e.qp.slot);
        self.ring(e.qp.ctx, off, e.qp.rq_tail);
    }

    /// Takes the CQEs that are there (up to `max`) and publishes the new head.
    pub fn reap(&mut self, cq: &mut Cq, out: &mut Vec<Cqe>) {
        let start = cq.head;
        loop {
            let at = cq.ring + (cq.head % cq.depth) as u64 * CQE_SIZE as u64;
            let phase = qpip_abi::cqe::phase(cq.head, cq.depth);
            if self.slice(at + CQE_SIZE as u64 - 1, 1)[0] & 1 != phase {
                break;
            }
            std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
            out.push(self.read_obj(at));
            cq.head = cq.head.wrapping_add(1);
        }
        if cq.head != start {
            let off = cq_head(cq.slot);
            self.ring(cq.ctx, off, cq.head);
        }
    }
}

impl Drop for SyncGuest {
    fn drop(&mut self) {
        // SAFETY: mapped in new() with this size; the engine (which holds its own mapping
        // of the memfd) is dropped after us but never reads through this pointer.
        unsafe { libc::munmap(self.ram.cast(), self.ram_size as usize) };
    }
}

/// Connects `client` (on `cg`) to a listener for `server` (on `sg`) at `addr` port `port`,
/// driving both engines until both sides completed.
pub fn connect(
    sg: &mut SyncGuest,
    server: &End,
    cg: &mut SyncGuest,
    client: &End,
    addr: &str,
    port: u16,
) {
    let mut l = ListenArgs::new_zeroed();
    l.port = port;
    l.backlog = 4;
    let listener = sg
        .admin(ADMIN_OP_LISTEN, server.ctx, 0, l.as_bytes())
        .result0 as u32;
    let mut a = AcceptArgs::new_zeroed();
    a.qp = server.qp.id;
    sg.submit(ADMIN_OP_ACCEPT, server.ctx, listener, a.as_bytes());
    let mut c = ConnectArgs::new_zeroed();
    c.addr = addr
        .parse::<std::net::Ipv6Addr>()
        .expect("address")
        .octets();
    c.port = port;
    cg.submit(ADMIN_OP_CONNECT, client.ctx, client.qp.id, c.as_bytes());
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
