//! `qpip-testkit`: the fake guest of the device tests (as QEMU's libqos is every qtest's
//! driver), one crate compiled once for all of them: qpipd's `serve` runs in a thread on a
//! temporary socket and the `vfio_user` crate's client plays QEMU, so every register access,
//! DMA map and interrupt goes through the same path as with a real VM.
//!
//! Guest RAM is a memfd mapped both into the device (by DMA_MAP) and into the test, so tests
//! build rings, page lists and buffers in it and read what the device wrote; each context's
//! doorbell page is a page of it, rung with the ABI's own producer
//! (`qpip_abi::doorbell::Producer`). Everything the tests put in guest memory is an `abi`
//! structure serialized with zerocopy: no offsets are written by hand here. [`relay`] sits
//! between two devices on a cable to drop, delay or answer frames.
//!
//! The pieces under the fake guest serve the harnesses that drive an engine without
//! vfio-user too (the fuzz targets, the engine bench), so that each piece of the ABI's logic
//! is written once: [`Ram`] (guest RAM), [`SyncEngine`] (an engine polled on the caller's
//! thread) and [`SyncGuest`] (the guest around one), objects laid out in guest memory
//! ([`PlannedCq`], [`PlannedQp`]), the ring arithmetic ([`AdminRing`], [`ring_slot`], [`Cq::slot_gpa`],
//! [`Qp::push_sq`]), the admin command builders ([`cmd`], [`cq_body`], [`qp_body`],
//! [`mr_body`], [`listen_cmd`], ...) and the rules every admin completion follows ([`check_admin_cqe`]).

mod admin;
mod admin_ok;
mod commands;
mod iwarp;
mod plans;
mod queues;
mod ram;
pub mod relay;
mod rings;
mod scratch_dir;
mod snapshots;
mod sync_engine;
mod sync_guest;
mod tcp;
mod tshark;

pub use admin_ok::*;
pub use commands::*;
pub use iwarp::*;
pub use plans::*;
pub use queues::*;
pub use ram::Ram;
pub use rings::*;
pub use scratch_dir::*;
pub use sync_engine::SyncEngine;
pub use sync_guest::{sync_connect, SyncGuest};
pub use tcp::*;
pub use tshark::*;

use std::collections::VecDeque;
use std::fs::File;
use std::io::Read;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::PathBuf;
use std::sync::atomic::{fence, AtomicU32, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use qpip_abi::admin::*;
pub use qpip_abi::cqe::*;
pub use qpip_abi::doorbell::*;
pub use qpip_abi::pci::*;
pub use qpip_abi::regs::*;
pub use qpip_abi::wqe::*;
use qpip_device::vfio::{serve, ServeOptions};
use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD, VFIO_PCI_MSIX_IRQ_INDEX,
};
use vfio_user::Client;
pub use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes};

/// Guest-physical base of guest RAM. Above 4 GiB so the `_HI` halves of address registers
/// and the upper bits of page-list entries matter.
pub const RAM_BASE: u64 = 0x1_0000_0000;
/// Size of guest RAM.
pub const RAM_SIZE: u64 = 64 << 20;
pub const PAGE: u64 = 4096;
/// How long any single wait (admin completion, CQE, interrupt) may take before the test
/// fails. Generous: the machine is shared; a correct device answers in microseconds.
pub const TIMEOUT: Duration = Duration::from_secs(5);
/// Admin queue depth the harness sets up.
pub const ADMIN_DEPTH: u32 = 64;
/// `::1`.
pub const LOOPBACK: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
/// `::`.
pub const UNSPECIFIED: [u8; 16] = [0; 16];

/// Parses an address literal into network-order bytes: IPv6, or IPv4 in its IPv4-mapped
/// form (`198.18.0.2` is `::ffff:198.18.0.2`), as the device's contract carries it.
pub fn ip(s: &str) -> [u8; 16] {
    match s.parse::<IpAddr>().expect("IP literal") {
        IpAddr::V6(a) => a.octets(),
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
    }
}

/// The device's link-local address for `mac`: fe80::/64 with the modified EUI-64 interface
/// identifier (RFC 4291 appendix A).
pub fn link_local(mac: [u8; 6]) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[0] = 0xfe;
    a[1] = 0x80;
    a[8] = mac[0] ^ 0x02;
    a[9] = mac[1];
    a[10] = mac[2];
    a[11] = 0xff;
    a[12] = 0xfe;
    a[13] = mac[3];
    a[14] = mac[4];
    a[15] = mac[5];
    a
}

pub fn admin_status_name(s: u16) -> &'static str {
    match s {
        ADMIN_STATUS_OK => "OK",
        ADMIN_STATUS_BAD_OPCODE => "BAD_OPCODE",
        ADMIN_STATUS_BAD_PARAM => "BAD_PARAM",
        ADMIN_STATUS_BAD_HANDLE => "BAD_HANDLE",
        ADMIN_STATUS_NO_RESOURCES => "NO_RESOURCES",
        ADMIN_STATUS_BAD_ADDRESS => "BAD_ADDRESS",
        ADMIN_STATUS_BUSY => "BUSY",
        ADMIN_STATUS_ADDR_IN_USE => "ADDR_IN_USE",
        ADMIN_STATUS_BAD_STATE => "BAD_STATE",
        ADMIN_STATUS_CANCELLED => "CANCELLED",
        ADMIN_STATUS_REFUSED => "REFUSED",
        ADMIN_STATUS_TIMEOUT => "TIMEOUT",
        ADMIN_STATUS_UNREACHABLE => "UNREACHABLE",
        _ => "(unknown admin status)",
    }
}

pub fn cqe_status_name(s: u8) -> &'static str {
    match s {
        CQE_STATUS_SUCCESS => "SUCCESS",
        CQE_STATUS_LOCAL_LENGTH => "LOCAL_LENGTH",
        CQE_STATUS_LOCAL_PROTECTION => "LOCAL_PROTECTION",
        CQE_STATUS_BAD_OPCODE => "BAD_OPCODE",
        CQE_STATUS_BAD_WQE => "BAD_WQE",
        CQE_STATUS_FLUSHED => "FLUSHED",
        CQE_STATUS_BAD_DEST => "BAD_DEST",
        _ => "(unknown CQE status)",
    }
}

/// Asserts an admin result is the error `want`, naming both statuses on failure.
#[track_caller]
pub fn assert_admin_err<T: std::fmt::Debug>(r: Result<T, u16>, want: u16, what: &str) {
    match r {
        Err(s) if s == want => {}
        Err(s) => panic!(
            "{what}: expected {}, got {} ({s})",
            admin_status_name(want),
            admin_status_name(s)
        ),
        Ok(v) => panic!(
            "{what}: expected {}, but it succeeded ({v:?})",
            admin_status_name(want)
        ),
    }
}

/// Asserts a CQE has status `want` (and, for errors, `detail`), naming both on failure.
#[track_caller]
pub fn assert_cqe(c: &Cqe, want: u8, detail: u32, what: &str) {
    assert!(
        c.status == want && (want == CQE_STATUS_SUCCESS || c.detail == detail),
        "{what}: expected {} detail {detail}, got {} detail {} ({c:?})",
        cqe_status_name(want),
        cqe_status_name(c.status),
        c.detail
    );
}

/// A non-blocking eventfd: what an interrupt vector is wired to (by QEMU's SET_IRQS, or
/// `Interrupts::set` for an engine in this process).
pub fn eventfd() -> File {
    // SAFETY: plain eventfd creation; checked for failure.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    assert!(fd >= 0, "eventfd: {}", std::io::Error::last_os_error());
    // SAFETY: fd was just created and is owned by nothing else.
    unsafe { File::from_raw_fd(fd) }
}

/// xorshift64*: deterministic, seedable, enough for payloads and spacing.
pub struct Rng(u64);
impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform-enough in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| (self.next_u64() >> 32) as u8).collect()
    }
}

/// A run of guest memory as a process would register it: scattered physical pages, a
/// virtual address (`iova`) with the same offset in its first page.
#[derive(Clone, Debug)]
pub struct Buf {
    pub pages: Vec<u64>,
    pub offset: u32,
    pub len: u64,
    pub iova: u64,
}

impl Buf {
    /// Guest-physical address of byte `off` of the buffer.
    pub fn gpa(&self, off: u64) -> u64 {
        assert!(
            off < self.len.max(1),
            "offset {off} outside a {}-byte buffer",
            self.len
        );
        let o = self.offset as u64 + off;
        self.pages[(o / PAGE) as usize] + o % PAGE
    }
    /// An SGE naming `len` bytes at `off` (virtual addresses, as a WQE names them).
    pub fn sge(&self, off: u64, len: u32, lkey: u32) -> Sge {
        Sge {
            addr: self.iova + off,
            length: len,
            lkey,
        }
    }
}

/// A registered memory region.
#[derive(Clone, Copy, Debug)]
pub struct Mr {
    pub lkey: u32,
    pub rkey: u32,
}

/// A completion queue as its owner sees it.
#[derive(Clone, Debug)]
pub struct Cq {
    pub ctx: u32,
    pub id: u32,
    pub slot: u32,
    pub depth: u32,
    pub vector: u32,
    pub pages: Vec<u64>,
    /// CQEs consumed (free-running), as published in the doorbell page.
    pub head: u32,
    pub arm_seq: u32,
}

/// A queue pair as its owner sees it.
#[derive(Clone, Debug)]
pub struct Qp {
    pub ctx: u32,
    pub id: u32,
    pub slot: u32,
    pub sq_pages: Vec<u64>,
    pub rq_pages: Vec<u64>,
    pub sq_depth: u32,
    pub rq_depth: u32,
    pub sq_tail: u32,
    pub rq_tail: u32,
    pub send_cq: u32,
    pub recv_cq: u32,
}

/// A QP with its own send and receive CQs and a registered (LOCAL_WRITE) buffer: the usual
/// test endpoint, UDP ([`Udp`]) or TCP ([`TcpEnd`]).
pub struct Endpoint {
    pub ctx: u32,
    pub qp: Qp,
    pub scq: Cq,
    pub rcq: Cq,
    pub buf: Buf,
    pub mr: Mr,
    /// The port BIND gave a UDP QP; 0 for a TCP QP (its ports come with connect or accept).
    pub port: u16,
}

impl Endpoint {
    /// `qp` with its (send, receive) CQs and registered buffer, not bound yet (port 0).
    pub fn unbound(qp: Qp, (scq, rcq): (Cq, Cq), buf: Buf, mr: Mr) -> Endpoint {
        Endpoint {
            ctx: qp.ctx,
            qp,
            scq,
            rcq,
            buf,
            mr,
            port: 0,
        }
    }
}

/// A bound UDP QP with its CQs and buffer.
pub type Udp = Endpoint;
/// A TCP QP with its CQs and buffer.
pub type TcpEnd = Endpoint;

struct TempDir(PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A device and a guest driving it.
pub struct FakeGuest {
    pub client: Client,
    /// The thread serving the device, unless the device is another process's.
    server: Option<JoinHandle<Result<(), String>>>,
    _dir: Option<TempDir>,
    ram: Ram,
    /// Guest-physical address of each context's doorbell page (guest RAM the guest names
    /// in CREATE_CTX); indices of contexts not created point at pages the device never saw.
    db_pages: Vec<u64>,
    next_iova: u64,
    irqs: Vec<File>,
    admin: Option<AdminRing>,
    stash: VecDeque<AdminCqe>,
    next_cmd_id: u32,
    next_vector: u32,
    /// Kick register writes this guest made (a producer saw `engine_sleeping`).
    pub kicks: u64,
}

impl FakeGuest {
    /// A device that is enabled, with guest RAM mapped, every MSI-X vector wired to an
    /// eventfd and the admin queue set up.
    pub fn new() -> Self {
        Self::with_options(ServeOptions::default())
    }

    /// As [`FakeGuest::new`], for a device started with `options` (network, MAC, ...).
    pub fn with_options(options: ServeOptions) -> Self {
        let mut g = Self::bare_with(options);
        g.enable();
        g.setup_admin(ADMIN_DEPTH);
        g
    }

    /// A device with guest RAM mapped and interrupts wired, not yet enabled.
    pub fn bare() -> Self {
        Self::bare_with(ServeOptions::default())
    }

    fn bare_with(options: ServeOptions) -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("qpip-hostif-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("qpip.sock");
        let path = socket.clone();
        let server = std::thread::spawn(move || serve(&path, options));
        let deadline = Instant::now() + Duration::from_secs(10);
        let client = loop {
            if socket.exists() {
                if let Ok(c) = Client::new(&socket) {
                    break c;
                }
            }
            assert!(Instant::now() < deadline, "qpipd did not start listening");
            std::thread::sleep(Duration::from_millis(5));
        };
        let mut g = Self::attach(client);
        g.server = Some(server);
        g._dir = Some(TempDir(dir));
        g
    }

    /// A guest of a device served elsewhere (a qpipd process) that `client` is connected to:
    /// guest RAM mapped and interrupts wired, not yet enabled, as [`FakeGuest::bare`].
    pub fn attach(client: Client) -> Self {
        Self::attach_sized(client, RAM_SIZE)
    }

    /// As [`FakeGuest::attach`], with `ram_size` bytes of guest RAM (a sparse memfd: only
    /// what is touched takes memory) for harnesses that create very many objects.
    pub fn attach_sized(mut client: Client, ram_size: u64) -> Self {
        // Guest RAM: a memfd, as QEMU's memory-backend-memfd.
        let mut ram = Ram::new(c"guest-ram", RAM_BASE, ram_size);
        // Default doorbell pages for contexts not created (pages the device never sees).
        let db_base = ram.alloc_pages(DOORBELL_PAGES as u64);
        client
            .dma_map(0, RAM_BASE, ram_size, ram.file().as_raw_fd())
            .unwrap();

        // One eventfd per MSI-X vector, as QEMU installs them when the guest enables MSI-X.
        let irqs: Vec<File> = (0..MSIX_VECTORS).map(|_| eventfd()).collect();
        let fds: Vec<i32> = irqs.iter().map(|f| f.as_raw_fd()).collect();
        client
            .set_irqs(
                VFIO_PCI_MSIX_IRQ_INDEX,
                VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER,
                0,
                MSIX_VECTORS as u32,
                &fds,
            )
            .unwrap();

        FakeGuest {
            client,
            server: None,
            _dir: None,
            ram,
            db_pages: contiguous(db_base, DOORBELL_PAGES as u64),
            next_iova: 0x7f00_0000_0000,
            irqs,
            admin: None,
            stash: VecDeque::new(),
            next_cmd_id: 0x100,
            next_vector: 1,
            kicks: 0,
        }
    }

    // ---- registers ------------------------------------------------------------------------

    pub fn reg_read(&mut self, reg: u32) -> u32 {
        let mut b = [0u8; 4];
        self.client
            .region_read(CTRL_BAR, reg as u64, &mut b)
            .unwrap();
        u32::from_le_bytes(b)
    }

    pub fn reg_write(&mut self, reg: u32, v: u32) {
        self.client
            .region_write(CTRL_BAR, reg as u64, &v.to_le_bytes())
            .unwrap();
    }

    pub fn enable(&mut self) {
        self.reg_write(REG_CONTROL, CONTROL_ENABLE);
        assert_ne!(
            self.reg_read(REG_STATUS) & STATUS_READY,
            0,
            "device not ready after ENABLE"
        );
    }

    /// Function-level reset as QEMU issues it. The admin queue is gone afterwards.
    pub fn reset(&mut self) {
        self.client.reset().unwrap();
        self.forget_admin();
    }

    /// Forgets the harness's admin queue state (after a reset or a disable).
    pub fn forget_admin(&mut self) {
        self.admin = None;
        self.stash.clear();
    }

    /// Writes the admin queue registers (bases, then depth) and returns REG_STATUS. The
    /// harness's own queue state is set only if the device reports the queue enabled.
    pub fn program_admin(&mut self, sq: u64, cq: u64, depth: u32) -> u32 {
        self.reg_write(REG_ADMIN_SQ_BASE_LO, sq as u32);
        self.reg_write(REG_ADMIN_SQ_BASE_HI, (sq >> 32) as u32);
        self.reg_write(REG_ADMIN_CQ_BASE_LO, cq as u32);
        self.reg_write(REG_ADMIN_CQ_BASE_HI, (cq >> 32) as u32);
        self.reg_write(REG_ADMIN_DEPTH, depth);
        let status = self.reg_read(REG_STATUS);
        self.stash.clear();
        self.admin = (status & STATUS_ADMIN_ENABLED != 0).then(|| AdminRing::new(sq, cq, depth));
        status
    }

    /// Sets up a fresh admin queue of `depth` entries in newly allocated guest memory.
    pub fn setup_admin(&mut self, depth: u32) {
        let sq = self.alloc_pages(((depth as u64 * 64).div_ceil(PAGE)) as usize);
        let cq = self.alloc_pages(((depth as u64 * 32).div_ceil(PAGE)) as usize);
        let status = self.program_admin(sq, cq, depth);
        assert!(
            status & STATUS_ADMIN_ENABLED != 0 && status & STATUS_ADMIN_ERROR == 0,
            "admin queue of depth {depth} not enabled: REG_STATUS = {status:#x}"
        );
    }

    /// Disables the admin queue (REG_ADMIN_DEPTH = 0).
    pub fn disable_admin(&mut self) {
        self.reg_write(REG_ADMIN_DEPTH, 0);
        self.forget_admin();
    }

    // ---- guest memory ---------------------------------------------------------------------

    /// Allocates `n` contiguous zeroed pages of guest RAM (never reused).
    pub fn alloc_pages(&mut self, n: usize) -> u64 {
        self.ram.alloc_pages(n as u64)
    }

    /// `n` pages that are not physically contiguous and in descending order, so a device
    /// that ignores its page list and assumes contiguity reads the wrong memory.
    pub fn alloc_scattered(&mut self, n: usize) -> Vec<u64> {
        let base = self.alloc_pages(2 * n);
        (0..n).rev().map(|i| base + 2 * i as u64 * PAGE).collect()
    }

    /// A buffer of `len` bytes starting `offset` bytes into its first page.
    pub fn alloc_buf(&mut self, len: u64, offset: u32) -> Buf {
        assert!((offset as u64) < PAGE);
        let npages = (offset as u64 + len.max(1)).div_ceil(PAGE) as usize;
        let pages = self.alloc_scattered(npages);
        let iova = self.next_iova + offset as u64;
        self.next_iova += (npages as u64 + 16) * PAGE;
        Buf {
            pages,
            offset,
            len,
            iova,
        }
    }

    /// Writes guest memory. The device may read it concurrently: that is the point.
    pub fn mem_write(&self, gpa: u64, data: &[u8]) {
        self.ram.write(gpa, data);
    }

    pub fn mem_read(&self, gpa: u64, len: usize) -> Vec<u8> {
        self.ram.read(gpa, len)
    }

    pub fn mem_fill(&self, gpa: u64, len: usize, byte: u8) {
        self.ram.fill(gpa, len, byte);
    }

    pub fn write_obj<T: IntoBytes + Immutable>(&self, gpa: u64, v: &T) {
        self.ram.write_obj(gpa, v);
    }

    pub fn read_obj<T: FromBytes>(&self, gpa: u64) -> T {
        self.ram.read_obj(gpa)
    }

    /// Writes `data` at byte `off` of a buffer, following its page list.
    pub fn buf_write(&self, b: &Buf, off: u64, data: &[u8]) {
        assert!(
            off + data.len() as u64 <= b.len,
            "test bug: write past the buffer"
        );
        let mut done = 0usize;
        while done < data.len() {
            let at = off + done as u64;
            let in_page = PAGE - (b.offset as u64 + at) % PAGE;
            let n = (in_page as usize).min(data.len() - done);
            self.mem_write(b.gpa(at), &data[done..done + n]);
            done += n;
        }
    }

    pub fn buf_read(&self, b: &Buf, off: u64, len: usize) -> Vec<u8> {
        assert!(off + len as u64 <= b.len, "test bug: read past the buffer");
        let mut v = Vec::with_capacity(len);
        while v.len() < len {
            let at = off + v.len() as u64;
            let in_page = PAGE - (b.offset as u64 + at) % PAGE;
            let n = (in_page as usize).min(len - v.len());
            v.extend(self.mem_read(b.gpa(at), n));
        }
        v
    }

    pub fn buf_fill(&self, b: &Buf, byte: u8) {
        self.buf_write(b, 0, &vec![byte; b.len as usize]);
    }

    /// Writes a page list (u64 entries) into fresh guest memory and returns its address.
    pub fn page_list(&mut self, pages: &[u64]) -> u64 {
        self.ram.page_list(pages)
    }

    // ---- interrupts -----------------------------------------------------------------------

    /// Interrupts of `vector` since the last take, without waiting.
    pub fn irq_take(&self, vector: u32) -> u64 {
        let mut v = [0u8; 8];
        match (&self.irqs[vector as usize]).read(&mut v) {
            Ok(8) => u64::from_ne_bytes(v),
            _ => 0,
        }
    }

    /// Waits up to `timeout` for `vector` to fire; returns the count taken (0 on timeout).
    pub fn irq_wait(&self, vector: u32, timeout: Duration) -> u64 {
        let mut pfd = libc::pollfd {
            fd: self.irqs[vector as usize].as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut pfd, 1, timeout.as_millis() as i32) };
        self.irq_take(vector)
    }

    // ---- doorbells ------------------------------------------------------------------------

    /// The u32 at `off` in context `ctx`'s doorbell page (guest RAM).
    pub fn db(&self, ctx: u32, off: u32) -> &AtomicU32 {
        assert!(ctx < DOORBELL_PAGES && off + 4 <= DOORBELL_PAGE_SIZE && off & 3 == 0);
        let p = self.ram.ptr(self.db_pages[ctx as usize] + off as u64, 4);
        // SAFETY: in bounds of the RAM mapping (Ram::ptr checks) and 4-byte aligned.
        unsafe { &*p.cast::<AtomicU32>() }
    }

    /// Guest-physical address of context `ctx`'s doorbell page.
    pub fn db_page(&self, ctx: u32) -> u64 {
        self.db_pages[ctx as usize]
    }

    pub fn engine_sleeping(&self, ctx: u32) -> bool {
        self.db(ctx, DB_ENGINE_SLEEPING).load(Ordering::SeqCst) != 0
    }

    /// Context `ctx`'s doorbell page as its producer uses it (`abi::doorbell::Producer`).
    pub fn producer(&self, ctx: u32) -> Producer<'_> {
        assert!(ctx < DOORBELL_PAGES);
        self.ram.producer(self.db_pages[ctx as usize])
    }

    /// Rings a doorbell exactly as `abi::doorbell` prescribes, and kicks if the engine
    /// published that it sleeps.
    pub fn ring(&mut self, ctx: u32, off: u32, value: u32) {
        if self.producer(ctx).ring(off, value) {
            self.kick();
        }
    }

    /// Writes the kick register.
    pub fn kick(&mut self) {
        self.kicks += 1;
        self.reg_write(KICK_PAGE_OFFSET + KICK, 1);
    }
}

impl Default for FakeGuest {
    /// [`FakeGuest::new`].
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for FakeGuest {
    fn drop(&mut self) {
        // Disconnect like QEMU quitting; the device must return from serve promptly.
        let _ = self.client.shutdown();
        if let Some(server) = self.server.take() {
            let deadline = Instant::now() + Duration::from_secs(5);
            while !server.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            if server.is_finished() {
                let r = server.join();
                if !std::thread::panicking() {
                    match r {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => panic!("qpipd serve returned an error: {e}"),
                        Err(_) => panic!("qpipd serve thread panicked"),
                    }
                }
            } else if !std::thread::panicking() {
                panic!("qpipd did not return from serve within 5 s of the client disconnecting");
            }
        }
    }
}
