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

pub mod relay;

use std::collections::VecDeque;
use std::fs::File;
use std::io::Read;
use std::net::Ipv6Addr;
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::PathBuf;
use std::sync::atomic::{fence, AtomicU32, AtomicU8, Ordering};
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

/// Parses an IPv6 address literal into network-order bytes.
pub fn ip(s: &str) -> [u8; 16] {
    s.parse::<Ipv6Addr>().expect("IPv6 literal").octets()
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

/// A bound UDP QP with its own send and receive CQs and a registered buffer: the usual
/// test endpoint.
pub struct Udp {
    pub ctx: u32,
    pub qp: Qp,
    pub scq: Cq,
    pub rcq: Cq,
    pub buf: Buf,
    pub mr: Mr,
    pub port: u16,
}

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
    let mut b = [0u8; WQE_SIZE as usize];
    let h = hdr.as_bytes();
    b[..h.len()].copy_from_slice(h);
    for (i, s) in sges.iter().enumerate() {
        let o = WQE_SGE_OFFSET as usize + i * std::mem::size_of::<Sge>();
        b[o..o + std::mem::size_of::<Sge>()].copy_from_slice(s.as_bytes());
    }
    b
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
    let mut b = wqe_bytes(&h, &[]);
    let o = WQE_SGE_OFFSET as usize;
    b[o..o + data.len()].copy_from_slice(data);
    b
}

/// A receive WQE scattering into `sges`.
pub fn recv_wqe(wr_id: u64, sges: &[Sge]) -> WqeBytes {
    let mut h = wqe_hdr(WQE_OP_RECV, wr_id);
    h.num_sge = sges.len() as u8;
    wqe_bytes(&h, sges)
}

struct AdminQueue {
    sq: u64,
    cq: u64,
    depth: u32,
    tail: u32,
    head: u32,
}

struct TempDir(PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A device and a guest driving it.
pub struct FakeGuest {
    pub client: Client,
    server: Option<JoinHandle<Result<(), String>>>,
    _dir: TempDir,
    _ram_file: File,
    ram: *mut u8,
    /// Guest-physical address of each context's doorbell page (guest RAM the guest names
    /// in CREATE_CTX); indices of contexts not created point at pages the device never saw.
    db_pages: Vec<u64>,
    next_page: u64,
    next_iova: u64,
    irqs: Vec<File>,
    admin: Option<AdminQueue>,
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
        let mut client = loop {
            if socket.exists() {
                if let Ok(c) = Client::new(&socket) {
                    break c;
                }
            }
            assert!(Instant::now() < deadline, "qpipd did not start listening");
            std::thread::sleep(Duration::from_millis(5));
        };

        // Guest RAM: a memfd, as QEMU's memory-backend-memfd.
        // SAFETY: memfd_create with a valid name; the fd is owned by the File from here on.
        let ram_file = unsafe {
            File::from_raw_fd(libc::memfd_create(c"guest-ram".as_ptr(), libc::MFD_CLOEXEC))
        };
        ram_file.set_len(RAM_SIZE).unwrap();
        let ram = map_shared(&ram_file, 0, RAM_SIZE as usize);
        client
            .dma_map(0, RAM_BASE, RAM_SIZE, ram_file.as_raw_fd())
            .unwrap();

        // One eventfd per MSI-X vector, as QEMU installs them when the guest enables MSI-X.
        let irqs: Vec<File> = (0..MSIX_VECTORS)
            .map(|_| {
                // SAFETY: eventfd creation; the fd is owned by the File.
                let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
                assert!(fd >= 0);
                unsafe { File::from_raw_fd(fd) }
            })
            .collect();
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
            server: Some(server),
            _dir: TempDir(dir),
            _ram_file: ram_file,
            ram,
            db_pages: (0..DOORBELL_PAGES as u64)
                .map(|i| RAM_BASE + i * PAGE)
                .collect(),
            next_page: RAM_BASE + DOORBELL_PAGES as u64 * PAGE,
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
        self.admin = (status & STATUS_ADMIN_ENABLED != 0).then_some(AdminQueue {
            sq,
            cq,
            depth,
            tail: 0,
            head: 0,
        });
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
        let a = self.next_page;
        self.next_page += n as u64 * PAGE;
        assert!(
            self.next_page <= RAM_BASE + RAM_SIZE,
            "guest RAM exhausted (test allocates too much)"
        );
        a
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

    fn ram_ptr(&self, gpa: u64, len: usize) -> *mut u8 {
        assert!(
            gpa >= RAM_BASE && gpa + len as u64 <= RAM_BASE + RAM_SIZE,
            "test bug: guest access {gpa:#x}+{len} outside RAM"
        );
        // SAFETY: in bounds of the mapping, checked above.
        unsafe { self.ram.add((gpa - RAM_BASE) as usize) }
    }

    /// Writes guest memory. The device may read it concurrently: that is the point.
    pub fn mem_write(&self, gpa: u64, data: &[u8]) {
        let p = self.ram_ptr(gpa, data.len());
        // SAFETY: bounds checked; the mapping is shared memory with the device, which only
        // ever sees it as bytes.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) };
    }

    pub fn mem_read(&self, gpa: u64, len: usize) -> Vec<u8> {
        let p = self.ram_ptr(gpa, len);
        let mut v = vec![0u8; len];
        fence(Ordering::Acquire);
        // SAFETY: as in mem_write.
        unsafe { std::ptr::copy_nonoverlapping(p, v.as_mut_ptr(), len) };
        v
    }

    pub fn mem_fill(&self, gpa: u64, len: usize, byte: u8) {
        let p = self.ram_ptr(gpa, len);
        // SAFETY: as in mem_write.
        unsafe { std::ptr::write_bytes(p, byte, len) };
    }

    pub fn write_obj<T: IntoBytes + Immutable>(&self, gpa: u64, v: &T) {
        self.mem_write(gpa, v.as_bytes());
    }

    pub fn read_obj<T: FromBytes>(&self, gpa: u64) -> T {
        T::read_from_bytes(&self.mem_read(gpa, std::mem::size_of::<T>())).unwrap()
    }

    fn atomic_u8(&self, gpa: u64) -> &AtomicU8 {
        // SAFETY: in bounds, and AtomicU8 has no alignment requirement.
        unsafe { &*(self.ram_ptr(gpa, 1) as *const AtomicU8) }
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
        let n = (pages.len() as u64 * 8).div_ceil(PAGE).max(1);
        let at = self.alloc_pages(n as usize);
        self.mem_write(at, pages.as_bytes());
        at
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
        let p = self.ram_ptr(self.db_pages[ctx as usize] + off as u64, 4);
        // SAFETY: in bounds of the RAM mapping (ram_ptr checks) and 4-byte aligned.
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
        let p = self.ram_ptr(self.db_pages[ctx as usize], DOORBELL_PAGE_SIZE as usize);
        // SAFETY: a whole page inside the RAM mapping (ram_ptr checks), page-aligned, mapped
        // as long as `self`; the test touches doorbell pages only through atomics.
        unsafe { Producer::from_ptr(p) }
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

    // ---- admin queue ----------------------------------------------------------------------

    /// Submits a command without waiting; returns its cmd_id (assigned here).
    pub fn admin_submit(&mut self, mut cmd: AdminCmd) -> u32 {
        let id = self.next_cmd_id;
        self.next_cmd_id = self.next_cmd_id.wrapping_add(1).max(1);
        cmd.cmd_id = id;
        let q = self.admin.as_mut().expect("admin queue not set up");
        let at = q.sq + (q.tail % q.depth) as u64 * std::mem::size_of::<AdminCmd>() as u64;
        q.tail = q.tail.wrapping_add(1);
        let tail = q.tail;
        self.write_obj(at, &cmd);
        fence(Ordering::Release);
        self.reg_write(REG_ADMIN_SQ_TAIL, tail);
        id
    }

    /// The next admin completion in ring order, if one arrives within `timeout`. Releases
    /// its slot (REG_ADMIN_CQ_HEAD) after reading it.
    pub fn admin_next(&mut self, timeout: Duration) -> Option<AdminCqe> {
        let (at, phase) = {
            let q = self.admin.as_ref().expect("admin queue not set up");
            let at = q.cq + (q.head % q.depth) as u64 * std::mem::size_of::<AdminCqe>() as u64;
            (at, ((q.head / q.depth) & 1 == 0) as u8)
        };
        let phase_at = at + std::mem::offset_of!(AdminCqe, phase) as u64;
        if !self.wait_phase(phase_at, phase, timeout) {
            return None;
        }
        let cqe: AdminCqe = self.read_obj(at);
        let q = self.admin.as_mut().unwrap();
        q.head = q.head.wrapping_add(1);
        let head = q.head;
        self.reg_write(REG_ADMIN_CQ_HEAD, head);
        Some(cqe)
    }

    fn wait_phase(&self, gpa: u64, phase: u8, timeout: Duration) -> bool {
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            if self.atomic_u8(gpa).load(Ordering::Acquire) & 1 == phase {
                return true;
            }
            if start.elapsed() > timeout {
                return false;
            }
            spins += 1;
            if spins < 200 {
                std::hint::spin_loop();
            } else {
                // Two cores shared with the device's threads: do not starve them.
                std::thread::sleep(Duration::from_micros(20));
            }
        }
    }

    /// Waits for the completion of `cmd_id` (completions of other commands that arrive
    /// first are kept for their own waiters).
    pub fn admin_wait(&mut self, cmd_id: u32, timeout: Duration) -> Option<AdminCqe> {
        if let Some(i) = self.stash.iter().position(|c| c.cmd_id == cmd_id) {
            return self.stash.remove(i);
        }
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let c = self.admin_next(left)?;
            if c.cmd_id == cmd_id {
                return Some(c);
            }
            self.stash.push_back(c);
        }
    }

    /// Runs one command to completion; panics if it does not complete within [`TIMEOUT`].
    /// Checks the completion echoes the opcode and carries no results on error.
    pub fn admin(&mut self, cmd: AdminCmd) -> AdminCqe {
        let op = cmd.opcode;
        let id = self.admin_submit(cmd);
        let c = self.admin_wait(id, TIMEOUT).unwrap_or_else(|| {
            panic!("admin command {op:#x} (cmd_id {id}) got no completion within {TIMEOUT:?}")
        });
        check_admin_cqe(&c, op);
        c
    }

    /// Runs a command; Ok(completion) or Err(status).
    pub fn admin_result(&mut self, cmd: AdminCmd) -> Result<AdminCqe, u16> {
        let c = self.admin(cmd);
        if c.status == ADMIN_STATUS_OK {
            Ok(c)
        } else {
            Err(c.status)
        }
    }

    // ---- typed admin commands -------------------------------------------------------------

    pub fn query_device_at(&mut self, buf: u64, len: u32) -> Result<(), u16> {
        let mut a = QueryArgs::new_zeroed();
        a.buf = buf;
        a.len = len;
        self.admin_result(cmd(ADMIN_OP_QUERY_DEVICE, 0, 0, &a))
            .map(|_| ())
    }

    pub fn query_device(&mut self) -> DeviceInfo {
        let buf = self.alloc_pages(1);
        self.query_device_at(buf, std::mem::size_of::<DeviceInfo>() as u32)
            .unwrap_or_else(|s| panic!("QUERY_DEVICE failed: {}", admin_status_name(s)));
        self.read_obj(buf)
    }

    pub fn query_stats_at(&mut self, buf: u64, len: u32) -> Result<(), u16> {
        let mut a = QueryArgs::new_zeroed();
        a.buf = buf;
        a.len = len;
        self.admin_result(cmd(ADMIN_OP_QUERY_STATS, 0, 0, &a))
            .map(|_| ())
    }

    pub fn query_stats(&mut self) -> Stats {
        let buf = self.alloc_pages(1);
        self.query_stats_at(buf, std::mem::size_of::<Stats>() as u32)
            .unwrap_or_else(|s| panic!("QUERY_STATS failed: {}", admin_status_name(s)));
        self.read_obj(buf)
    }

    pub fn list_addrs_at(&mut self, buf: u64, len: u32) -> Result<u64, u16> {
        let mut a = QueryArgs::new_zeroed();
        a.buf = buf;
        a.len = len;
        self.admin_result(cmd(ADMIN_OP_LIST_ADDRS, 0, 0, &a))
            .map(|c| c.result0)
    }

    /// LIST_ADDRS: (address, prefix length, flags) of each valid entry; checks the count
    /// result matches the list and the entries past it are zero.
    pub fn list_addrs(&mut self) -> Vec<([u8; 16], u8, u8)> {
        let buf = self.alloc_pages(1);
        let n = self
            .list_addrs_at(buf, std::mem::size_of::<AddrList>() as u32)
            .unwrap_or_else(|s| panic!("LIST_ADDRS failed: {}", admin_status_name(s)));
        let l: AddrList = self.read_obj(buf);
        assert_eq!(l.count as u64, n, "LIST_ADDRS result0 is the count written");
        assert_eq!(l.reserved, 0);
        for e in &l.entries[l.count as usize..] {
            assert_eq!(
                *e,
                AddrEntry::new_zeroed(),
                "entries past the count are zero"
            );
        }
        l.entries[..l.count as usize]
            .iter()
            .map(|e| {
                assert_eq!(e.reserved, [0; 6]);
                (e.addr, e.prefix_len, e.flags)
            })
            .collect()
    }

    /// One counter of QUERY_STATS.
    pub fn stat(&mut self, index: u32) -> u64 {
        self.query_stats().counters[index as usize]
    }

    /// The device's MAC and link-local address.
    pub fn mac(&mut self) -> [u8; 6] {
        self.query_device().mac
    }
    pub fn link_local(&mut self) -> [u8; 16] {
        let mac = self.mac();
        link_local(mac)
    }

    pub fn set_mac(&mut self, mac: [u8; 6]) -> Result<(), u16> {
        let mut a = SetMacArgs::new_zeroed();
        a.mac = mac;
        self.admin_result(cmd(ADMIN_OP_SET_MAC, 0, 0, &a))
            .map(|_| ())
    }

    pub fn add_addr(&mut self, addr: [u8; 16], prefix_len: u8) -> Result<(), u16> {
        let mut a = AddrArgs::new_zeroed();
        a.addr = addr;
        a.prefix_len = prefix_len;
        self.admin_result(cmd(ADMIN_OP_ADD_ADDR, 0, 0, &a))
            .map(|_| ())
    }

    pub fn del_addr(&mut self, addr: [u8; 16]) -> Result<(), u16> {
        let mut a = AddrArgs::new_zeroed();
        a.addr = addr;
        self.admin_result(cmd(ADMIN_OP_DEL_ADDR, 0, 0, &a))
            .map(|_| ())
    }

    /// CREATE_CTX with a fresh page of guest RAM as its doorbell page.
    pub fn create_ctx(&mut self) -> Result<u32, u16> {
        let page = self.alloc_pages(1);
        self.create_ctx_at(page)
    }

    /// CREATE_CTX naming `doorbell_page` (any address: tests of the device's checks).
    pub fn create_ctx_at(&mut self, doorbell_page: u64) -> Result<u32, u16> {
        let mut a = CreateCtxArgs::new_zeroed();
        a.doorbell_page = doorbell_page;
        let ctx = self
            .admin_result(cmd(ADMIN_OP_CREATE_CTX, 0, 0, &a))
            .map(|c| c.result0 as u32)?;
        self.db_pages[ctx as usize] = doorbell_page;
        Ok(ctx)
    }

    pub fn destroy_ctx(&mut self, ctx: u32) -> Result<(), u16> {
        self.admin_result(cmd0(ADMIN_OP_DESTROY_CTX, ctx, 0))
            .map(|_| ())
    }

    /// Raw CREATE_CQ: (CQ id, doorbell slot).
    pub fn create_cq_args(&mut self, ctx: u32, a: &CreateCqArgs) -> Result<(u32, u32), u16> {
        self.admin_result(cmd(ADMIN_OP_CREATE_CQ, ctx, 0, a))
            .map(|c| (c.result0 as u32, c.result1 as u32))
    }

    /// A CQ of `depth` entries on a scattered ring, raising `vector` when armed.
    pub fn create_cq_on(&mut self, ctx: u32, depth: u32, vector: u32) -> Result<Cq, u16> {
        let npages = (depth as u64 * CQE_SIZE as u64).div_ceil(PAGE) as usize;
        let pages = self.alloc_scattered(npages);
        let mut a = CreateCqArgs::new_zeroed();
        a.page_list = self.page_list(&pages);
        a.npages = npages as u32;
        a.depth = depth;
        a.vector = vector;
        let (id, slot) = self.create_cq_args(ctx, &a)?;
        assert_ne!(id, 0, "object handles are non-zero");
        assert!(slot < DB_CQ_SLOTS, "CQ doorbell slot {slot} out of range");
        Ok(Cq {
            ctx,
            id,
            slot,
            depth,
            vector,
            pages,
            head: 0,
            arm_seq: 0,
        })
    }

    /// A CQ on the next completion vector (1..16 in turn).
    pub fn create_cq(&mut self, ctx: u32, depth: u32) -> Result<Cq, u16> {
        let v = self.next_vector;
        self.next_vector = self.next_vector % (MSIX_VECTORS as u32 - 1) + 1;
        self.create_cq_on(ctx, depth, v)
    }

    pub fn destroy_cq(&mut self, ctx: u32, cq: u32) -> Result<(), u16> {
        self.admin_result(cmd0(ADMIN_OP_DESTROY_CQ, ctx, cq))
            .map(|_| ())
    }

    /// Raw CREATE_QP: (QP id, doorbell slot).
    pub fn create_qp_args(&mut self, ctx: u32, a: &CreateQpArgs) -> Result<(u32, u32), u16> {
        self.admin_result(cmd(ADMIN_OP_CREATE_QP, ctx, 0, a))
            .map(|c| (c.result0 as u32, c.result1 as u32))
    }

    /// Fills CreateQpArgs with fresh scattered rings; returns the args and the ring pages.
    pub fn qp_args(
        &mut self,
        send_cq: u32,
        recv_cq: u32,
        sq_depth: u32,
        rq_depth: u32,
        qp_type: u8,
        framing: u8,
    ) -> (CreateQpArgs, Vec<u64>, Vec<u64>) {
        let sq_n = (sq_depth as u64 * WQE_SIZE as u64).div_ceil(PAGE) as usize;
        let rq_n = (rq_depth as u64 * WQE_SIZE as u64).div_ceil(PAGE) as usize;
        let sq_pages = self.alloc_scattered(sq_n);
        let rq_pages = self.alloc_scattered(rq_n);
        let mut a = CreateQpArgs::new_zeroed();
        a.sq_page_list = self.page_list(&sq_pages);
        a.rq_page_list = self.page_list(&rq_pages);
        a.send_cq = send_cq;
        a.recv_cq = recv_cq;
        a.sq_depth = sq_depth;
        a.rq_depth = rq_depth;
        a.sq_npages = sq_n as u16;
        a.rq_npages = rq_n as u16;
        a.qp_type = qp_type;
        a.framing = framing;
        (a, sq_pages, rq_pages)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn create_qp_typed(
        &mut self,
        ctx: u32,
        send_cq: u32,
        recv_cq: u32,
        sq_depth: u32,
        rq_depth: u32,
        qp_type: u8,
        framing: u8,
    ) -> Result<Qp, u16> {
        let (a, sq_pages, rq_pages) =
            self.qp_args(send_cq, recv_cq, sq_depth, rq_depth, qp_type, framing);
        let (id, slot) = self.create_qp_args(ctx, &a)?;
        assert_ne!(id, 0, "object handles are non-zero");
        assert!(slot < DB_QP_SLOTS, "QP doorbell slot {slot} out of range");
        Ok(Qp {
            ctx,
            id,
            slot,
            sq_pages,
            rq_pages,
            sq_depth,
            rq_depth,
            sq_tail: 0,
            rq_tail: 0,
            send_cq,
            recv_cq,
        })
    }

    /// A UDP QP.
    pub fn create_qp(
        &mut self,
        ctx: u32,
        send_cq: u32,
        recv_cq: u32,
        sq_depth: u32,
        rq_depth: u32,
    ) -> Result<Qp, u16> {
        self.create_qp_typed(ctx, send_cq, recv_cq, sq_depth, rq_depth, QP_TYPE_UDP, 0)
    }

    pub fn destroy_qp(&mut self, ctx: u32, qp: u32) -> Result<(), u16> {
        self.admin_result(cmd0(ADMIN_OP_DESTROY_QP, ctx, qp))
            .map(|_| ())
    }

    pub fn reg_mr_args(&mut self, ctx: u32, a: &RegMrArgs) -> Result<Mr, u16> {
        self.admin_result(cmd(ADMIN_OP_REG_MR, ctx, 0, a))
            .map(|c| Mr {
                lkey: c.result0 as u32,
                rkey: c.result1 as u32,
            })
    }

    /// Registers `b` with `access` rights.
    pub fn reg_mr(&mut self, ctx: u32, b: &Buf, access: u32) -> Result<Mr, u16> {
        let mut a = RegMrArgs::new_zeroed();
        a.page_list = self.page_list(&b.pages);
        a.iova = b.iova;
        a.length = b.len;
        a.npages = b.pages.len() as u32;
        a.first_page_offset = b.offset;
        a.access = access;
        let mr = self.reg_mr_args(ctx, &a)?;
        assert_ne!(mr.lkey, 0, "lkeys are non-zero handles");
        Ok(mr)
    }

    pub fn dereg_mr(&mut self, ctx: u32, lkey: u32) -> Result<(), u16> {
        self.admin_result(cmd0(ADMIN_OP_DEREG_MR, ctx, lkey))
            .map(|_| ())
    }

    /// BIND: the port bound.
    pub fn bind(&mut self, ctx: u32, qp: u32, addr: [u8; 16], port: u16) -> Result<u16, u16> {
        let mut a = BindArgs::new_zeroed();
        a.addr = addr;
        a.port = port;
        self.admin_result(cmd(ADMIN_OP_BIND, ctx, qp, &a))
            .map(|c| c.result0 as u16)
    }

    pub fn listen(
        &mut self,
        ctx: u32,
        addr: [u8; 16],
        port: u16,
        backlog: u32,
    ) -> Result<u32, u16> {
        let mut a = ListenArgs::new_zeroed();
        a.addr = addr;
        a.port = port;
        a.backlog = backlog;
        self.admin_result(cmd(ADMIN_OP_LISTEN, ctx, 0, &a))
            .map(|c| c.result0 as u32)
    }

    pub fn destroy_listener(&mut self, ctx: u32, listener: u32) -> Result<(), u16> {
        self.admin_result(cmd0(ADMIN_OP_DESTROY_LISTENER, ctx, listener))
            .map(|_| ())
    }

    /// Submits ACCEPT (completes asynchronously); returns the cmd_id.
    pub fn submit_accept(&mut self, ctx: u32, listener: u32, qp: u32) -> u32 {
        let mut a = AcceptArgs::new_zeroed();
        a.qp = qp;
        self.admin_submit(cmd(ADMIN_OP_ACCEPT, ctx, listener, &a))
    }

    /// Submits CONNECT (completes asynchronously); returns the cmd_id.
    pub fn submit_connect(&mut self, ctx: u32, qp: u32, addr: [u8; 16], port: u16) -> u32 {
        let mut a = ConnectArgs::new_zeroed();
        a.addr = addr;
        a.port = port;
        self.admin_submit(cmd(ADMIN_OP_CONNECT, ctx, qp, &a))
    }

    /// Waits for an asynchronous command's completion; panics after [`TIMEOUT`].
    pub fn admin_wait_done(&mut self, cmd_id: u32) -> AdminCqe {
        self.admin_wait(cmd_id, TIMEOUT)
            .unwrap_or_else(|| panic!("cmd_id {cmd_id} got no completion within {TIMEOUT:?}"))
    }

    // ---- work queues ----------------------------------------------------------------------

    fn slot_gpa(pages: &[u64], entry: u64, idx: u32, depth: u32) -> u64 {
        let off = (idx % depth) as u64 * entry;
        pages[(off / PAGE) as usize] + off % PAGE
    }

    /// Writes WQEs into the send ring without ringing.
    pub fn write_sq(&mut self, qp: &mut Qp, wqes: &[WqeBytes]) {
        for w in wqes {
            let at = Self::slot_gpa(&qp.sq_pages, WQE_SIZE as u64, qp.sq_tail, qp.sq_depth);
            self.mem_write(at, w);
            qp.sq_tail = qp.sq_tail.wrapping_add(1);
        }
    }

    pub fn write_rq(&mut self, qp: &mut Qp, wqes: &[WqeBytes]) {
        for w in wqes {
            let at = Self::slot_gpa(&qp.rq_pages, WQE_SIZE as u64, qp.rq_tail, qp.rq_depth);
            self.mem_write(at, w);
            qp.rq_tail = qp.rq_tail.wrapping_add(1);
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
        self.read_obj(Self::slot_gpa(&cq.pages, CQE_SIZE as u64, idx, cq.depth))
    }

    /// Whether CQE number `idx` (free-running) has been written in the current pass.
    pub fn cqe_ready(&self, cq: &Cq, idx: u32) -> bool {
        let at = Self::slot_gpa(&cq.pages, CQE_SIZE as u64, idx, cq.depth)
            + std::mem::offset_of!(Cqe, owner) as u64;
        let phase = ((idx / cq.depth) & 1 == 0) as u8;
        self.atomic_u8(at).load(Ordering::Acquire) & 1 == phase
    }

    /// Takes the next CQE if there is one and publishes the new head.
    pub fn poll_cq(&mut self, cq: &mut Cq) -> Option<Cqe> {
        if !self.cqe_ready(cq, cq.head) {
            return None;
        }
        let c = self.cq_slot(cq, cq.head);
        cq.head = cq.head.wrapping_add(1);
        self.ring(cq.ctx, cq_head(cq.slot), cq.head);
        Some(c)
    }

    /// Waits up to `timeout` for the next CQE.
    pub fn try_wait_cqe(&mut self, cq: &mut Cq, timeout: Duration) -> Option<Cqe> {
        let at = Self::slot_gpa(&cq.pages, CQE_SIZE as u64, cq.head, cq.depth)
            + std::mem::offset_of!(Cqe, owner) as u64;
        let phase = ((cq.head / cq.depth) & 1 == 0) as u8;
        if !self.wait_phase(at, phase, timeout) {
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
        cq.arm_seq = cq.arm_seq.wrapping_add(1);
        self.ring(cq.ctx, cq_arm_seq(cq.slot), cq.arm_seq);
    }

    // ---- composite set-ups ----------------------------------------------------------------

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
        let scq = self.create_cq(ctx, cq_depth).expect("create send CQ");
        let rcq = self.create_cq(ctx, cq_depth).expect("create recv CQ");
        let qp = self
            .create_qp(ctx, scq.id, rcq.id, depth, depth)
            .expect("create UDP QP");
        let port = self.bind(ctx, qp.id, addr, port).expect("bind");
        let buf = self.alloc_buf(buf_len.max(64), 0);
        let mr = self
            .reg_mr(ctx, &buf, MR_ACCESS_LOCAL_WRITE)
            .expect("register buffer");
        Udp {
            ctx,
            qp,
            scq,
            rcq,
            buf,
            mr,
            port,
        }
    }

    /// As [`Self::udp_endpoint_in`], in a new context, bound to every address.
    pub fn udp_endpoint(&mut self, port: u16, depth: u32, buf_len: u64) -> Udp {
        let ctx = self.create_ctx().expect("create context");
        self.udp_endpoint_in(ctx, UNSPECIFIED, port, depth, 2 * depth, buf_len)
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
        // SAFETY: the mapping was made by map_shared with this size and is not used after
        // this point.
        unsafe {
            libc::munmap(self.ram.cast(), RAM_SIZE as usize);
        }
    }
}

fn map_shared(file: &File, offset: i64, len: usize) -> *mut u8 {
    // SAFETY: a fresh shared mapping of a file we hold open; checked for failure.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            offset,
        )
    };
    assert_ne!(
        p,
        libc::MAP_FAILED,
        "mmap: {}",
        std::io::Error::last_os_error()
    );
    p.cast()
}

/// An admin command with an argument body.
pub fn cmd<T: IntoBytes + Immutable>(opcode: u16, ctx: u32, handle: u32, body: &T) -> AdminCmd {
    let mut c = AdminCmd::new_zeroed();
    c.opcode = opcode;
    c.ctx = ctx;
    c.handle = handle;
    let b = body.as_bytes();
    assert_eq!(b.len(), c.body.len(), "argument bodies are 48 bytes");
    c.body.copy_from_slice(b);
    c
}

/// An admin command without arguments.
pub fn cmd0(opcode: u16, ctx: u32, handle: u32) -> AdminCmd {
    let mut c = AdminCmd::new_zeroed();
    c.opcode = opcode;
    c.ctx = ctx;
    c.handle = handle;
    c
}

#[track_caller]
fn check_admin_cqe(c: &AdminCqe, opcode: u16) {
    assert_eq!(c.opcode, opcode, "completion echoes the opcode: {c:?}");
    if c.status != ADMIN_STATUS_OK {
        assert!(
            c.result0 == 0 && c.result1 == 0 && c.result2 == 0,
            "results are 0 on error: {c:?}"
        );
    }
}

// ---- TCP queue pairs --------------------------------------------------------------------

/// A TCP QP with its own send and receive CQs and a registered (LOCAL_WRITE) buffer.
pub struct TcpEnd {
    pub ctx: u32,
    pub qp: Qp,
    pub scq: Cq,
    pub rcq: Cq,
    pub buf: Buf,
    pub mr: Mr,
}

/// A TCP send WQE gathering `sges`, with immediate data (message framing carries it).
pub fn tcp_send_wqe(wr_id: u64, imm: u32, sges: &[Sge]) -> WqeBytes {
    let mut h = wqe_hdr(WQE_OP_SEND, wr_id);
    h.num_sge = sges.len() as u8;
    h.imm_data = imm;
    wqe_bytes(&h, sges)
}

/// A TCP send WQE with inline data.
pub fn tcp_inline_wqe(wr_id: u64, imm: u32, data: &[u8]) -> WqeBytes {
    let mut h = wqe_hdr(WQE_OP_SEND, wr_id);
    h.flags = WQE_FLAG_INLINE;
    h.inline_len = data.len() as u32;
    h.imm_data = imm;
    let mut b = wqe_bytes(&h, &[]);
    let o = WQE_SGE_OFFSET as usize;
    b[o..o + data.len()].copy_from_slice(data);
    b
}

impl FakeGuest {
    /// A TCP QP in `ctx` with `framing`, queues of `depth`, CQs of twice that, and a
    /// registered buffer of `buf_len` bytes.
    pub fn tcp_endpoint_in(&mut self, ctx: u32, framing: u8, depth: u32, buf_len: u64) -> TcpEnd {
        let scq = self.create_cq(ctx, 2 * depth).expect("create send CQ");
        let rcq = self.create_cq(ctx, 2 * depth).expect("create recv CQ");
        let qp = self
            .create_qp_typed(ctx, scq.id, rcq.id, depth, depth, QP_TYPE_TCP, framing)
            .expect("create TCP QP");
        let buf = self.alloc_buf(buf_len.max(64), 0);
        let mr = self
            .reg_mr(ctx, &buf, MR_ACCESS_LOCAL_WRITE)
            .expect("register buffer");
        TcpEnd {
            ctx,
            qp,
            scq,
            rcq,
            buf,
            mr,
        }
    }

    /// Submits CLOSE (completes asynchronously); returns the cmd_id.
    pub fn submit_close(&mut self, ctx: u32, qp: u32) -> u32 {
        self.admin_submit(cmd0(ADMIN_OP_CLOSE, ctx, qp))
    }

    /// Submits an ASYNC_EVENT request (completes when the device has an event).
    pub fn submit_async_event(&mut self) -> u32 {
        self.admin_submit(cmd0(ADMIN_OP_ASYNC_EVENT, 0, 0))
    }

    /// Listens on `port` in `sctx`, accepts on a new QP there and connects a new QP of
    /// `cctx` to it over the device's own loopback. Returns (server end, client end).
    pub fn loopback_pair(
        &mut self,
        sctx: u32,
        cctx: u32,
        port: u16,
        framing: u8,
    ) -> (TcpEnd, TcpEnd) {
        let (_, server, client) = self.loopback_pair_listening(sctx, cctx, port, framing);
        (server, client)
    }

    /// [`FakeGuest::loopback_pair`], also returning the listener (to destroy it, so
    /// that the port can be listened on again).
    pub fn loopback_pair_listening(
        &mut self,
        sctx: u32,
        cctx: u32,
        port: u16,
        framing: u8,
    ) -> (u32, TcpEnd, TcpEnd) {
        let server = self.tcp_endpoint_in(sctx, framing, 8, 1 << 16);
        let client = self.tcp_endpoint_in(cctx, framing, 8, 1 << 16);
        let l = self.listen(sctx, UNSPECIFIED, port, 4).expect("listen");
        let acc = self.submit_accept(sctx, l, server.qp.id);
        let con = self.submit_connect(cctx, client.qp.id, LOOPBACK, port);
        for (what, id) in [("connect", con), ("accept", acc)] {
            let c = self.admin_wait_done(id);
            assert_eq!(
                c.status,
                ADMIN_STATUS_OK,
                "{what}: {}",
                admin_status_name(c.status)
            );
        }
        (l, server, client)
    }
}

/// An ASYNC_EVENT completion decoded: (ctx, object, kind, reason, lost).
pub fn async_event(c: &AdminCqe) -> (u32, u32, u16, u8, bool) {
    assert_eq!(c.opcode, ADMIN_OP_ASYNC_EVENT, "{c:?}");
    assert_eq!(c.status, ADMIN_STATUS_OK, "{}", admin_status_name(c.status));
    assert_eq!(
        c.result2 & 0x7f00_0000,
        0,
        "bits 24-30 of result2 are 0: {c:?}"
    );
    (
        c.result0 as u32,
        c.result1 as u32,
        c.result2 as u16,
        (c.result2 >> 16) as u8,
        c.result2 & ASYNC_FLAG_LOST != 0,
    )
}

/// The peer address of an ACCEPT or CONNECT completion (result0/result1 in memory order).
pub fn peer_addr(c: &AdminCqe) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[..8].copy_from_slice(&c.result0.to_ne_bytes());
    a[8..].copy_from_slice(&c.result1.to_ne_bytes());
    a
}

/// One direction-pair of a bulk stream transfer from the point of view of one QP: it
/// sends `out` in WRs of assorted sizes and SGE counts, keeps receive WRs of assorted
/// sizes posted, and collects what arrives.
pub struct Flow {
    pub out: Vec<u8>,
    pub posted: usize,
    pub send_sizes: VecDeque<u32>,
    pub sent: usize,
    pub slot: u64,
    pub rx_base: u64,
    pub rq_posted: u32,
    pub rq_done: u32,
    pub got: Vec<u8>,
    pub eof: bool,
    pub rng: Rng,
    /// Receives are posted only while this is true (flow control tests).
    pub post_recvs: bool,
}

pub const SIZES: [usize; 8] = [1, 100, 1000, 1440, 4096, 20_000, 65_536, 200_000];

impl Flow {
    /// `e.buf` holds `out` at 0 and the receive slots after it.
    pub fn new(g: &mut FakeGuest, e: &TcpEnd, out: Vec<u8>, seed: u64) -> Flow {
        g.buf_write(&e.buf, 0, &out);
        let rx_base = (out.len() as u64).div_ceil(4096) * 4096;
        let slot = 65_536;
        assert!(
            rx_base + slot * e.qp.rq_depth as u64 <= e.buf.len,
            "buffer too small"
        );
        Flow {
            out,
            posted: 0,
            send_sizes: VecDeque::new(),
            sent: 0,
            slot,
            rx_base,
            rq_posted: 0,
            rq_done: 0,
            got: Vec::new(),
            eof: false,
            rng: Rng::new(seed),
            post_recvs: true,
        }
    }

    pub fn buf_len(out: usize, depth: u32) -> u64 {
        (out as u64).div_ceil(4096) * 4096 + 65_536 * depth as u64
    }

    /// Posts what it can and takes completions. Returns whether anything happened.
    pub fn pump(&mut self, g: &mut FakeGuest, e: &mut TcpEnd) -> bool {
        let mut did = false;
        let mut wqes = Vec::new();
        while self.send_sizes.len() + wqes.len() < e.qp.sq_depth as usize - 1
            && self.posted < self.out.len()
        {
            let n = SIZES[self.rng.below(SIZES.len() as u64) as usize]
                .min(self.out.len() - self.posted);
            let k = (1 + self.rng.below(3) as usize).min(n);
            let mut sges = Vec::new();
            let mut at = self.posted;
            for i in 0..k {
                let len = if i == k - 1 {
                    self.posted + n - at
                } else {
                    n / k
                };
                sges.push(e.buf.sge(at as u64, len as u32, e.mr.lkey));
                at += len;
            }
            wqes.push(tcp_send_wqe(self.posted as u64, 0, &sges));
            self.send_sizes.push_back(n as u32);
            self.posted += n;
        }
        if !wqes.is_empty() {
            g.post_send(&mut e.qp, &wqes);
            did = true;
        }
        let mut rwqes = Vec::new();
        while self.post_recvs && self.rq_posted - self.rq_done < e.qp.rq_depth {
            let slot = (self.rq_posted % e.qp.rq_depth) as u64;
            let size = [self.slot, 1000, 4096, 30_000][self.rng.below(4) as usize];
            let base = self.rx_base + slot * self.slot;
            let half = size / 2;
            rwqes.push(recv_wqe(
                self.rq_posted as u64,
                &[
                    e.buf.sge(base, half as u32, e.mr.lkey),
                    e.buf.sge(base + half, (size - half) as u32, e.mr.lkey),
                ],
            ));
            self.rq_posted += 1;
        }
        if !rwqes.is_empty() {
            g.post_recv(&mut e.qp, &rwqes);
            did = true;
        }
        while let Some(c) = g.poll_cq(&mut e.scq) {
            assert_cqe(&c, CQE_STATUS_SUCCESS, 0, "send");
            let want = self.send_sizes.pop_front().expect("a send outstanding");
            assert_eq!(c.byte_len, want, "send byte_len");
            self.sent += want as usize;
            did = true;
        }
        while let Some(c) = g.poll_cq(&mut e.rcq) {
            assert_cqe(&c, CQE_STATUS_SUCCESS, 0, "receive");
            assert_eq!(c.wr_id, self.rq_done as u64, "receives complete in order");
            let slot = (self.rq_done % e.qp.rq_depth) as u64;
            if c.byte_len == 0 {
                self.eof = true;
            } else {
                let data = g.buf_read(&e.buf, self.rx_base + slot * self.slot, c.byte_len as usize);
                self.got.extend_from_slice(&data);
            }
            self.rq_done += 1;
            did = true;
        }
        did
    }
}

/// A device whose link is a cable at `cable` (the other end is another device or a relay),
/// with address `addr`/64, the link impaired by `impair` (qpipd's `--impair` form) and the
/// TCP limits given.
pub fn cabled_device(
    mac: [u8; 6],
    addr: &str,
    cable: &std::path::Path,
    impair: Option<&str>,
    tcp_limits: qpip_device::engine::tcp::TcpLimits,
) -> FakeGuest {
    use qpip_device::engine::network::NetworkConfig;
    use qpip_device::engine::EngineConfig;
    let mut network = NetworkConfig::new(qpip_device::backend::NetSpec::Cable(cable.to_path_buf()));
    network.impair = impair.map(|s| s.parse().expect("impairment"));
    let engine = EngineConfig {
        mac,
        addrs: vec![(addr.parse().expect("address"), 64)],
        network: Some(network),
        tcp_limits,
        ..EngineConfig::default()
    };
    FakeGuest::with_options(ServeOptions {
        core: qpip_device::core::CoreConfig {
            engine,
            ..Default::default()
        },
    })
}
