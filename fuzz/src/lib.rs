//! Shared pieces of the qpip fuzz targets.
//!
//! * [`Input`] reads a fuzz input as a stream of little-endian numbers (zeros once it runs
//!   out), and [`Seed`] writes the same stream: the targets decode their operations from an
//!   `Input`, and `examples/seeds.rs` encodes the committed seed corpora with a `Seed`, so
//!   seeds and decoders cannot drift apart silently.
//! * [`SyncDevice`] is the real engine (`qpip_device::engine::Engine`) driven synchronously on
//!   the fuzzer's thread (the test kit's `SyncEngine`), over a small memfd guest RAM: admin
//!   commands go through the admin rings, doorbells through each context's doorbell page (a
//!   page of that RAM, named in `CREATE_CTX`), and every step is deterministic. What it
//!   cannot reach is the threaded run loop (sleeping and kicks), which the device tests cover.
//!   It keeps a shadow of guest RAM to catch every byte the device writes where it may not;
//!   the ABI's pieces (command builders, ring arithmetic, completion rules) are the test
//!   kit's.

pub mod frames;

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::mem::ManuallyDrop;
use std::sync::mpsc;
use std::sync::Arc;

use qpip_abi::admin::*;
use qpip_abi::cqe::CQE_SIZE;
use qpip_abi::doorbell::*;
use qpip_abi::pci::DOORBELL_PAGE_SIZE;
use qpip_abi::wqe::WQE_SIZE;
use qpip_device::dma::GuestRam;
use qpip_device::engine::{Control, EngineConfig};
use qpip_device::irq::Interrupts;
pub use qpip_testkit::{check_admin_cqe, cmd, cmd0, create_ctx_cmd};
use qpip_testkit::{
    contiguous, cq_body, mr_body, qp_body, ring_pages, AdminRing, Cq, Qp, Ram, SyncEngine,
};
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes};

/// Every admin opcode, in the order the `admin_queue` target's structured commands (and the
/// seeds that encode them) number them.
pub const ADMIN_OPCODES: [u16; 19] = [
    ADMIN_OP_QUERY_DEVICE,
    ADMIN_OP_SET_MAC,
    ADMIN_OP_ADD_ADDR,
    ADMIN_OP_DEL_ADDR,
    ADMIN_OP_QUERY_STATS,
    ADMIN_OP_CREATE_CTX,
    ADMIN_OP_DESTROY_CTX,
    ADMIN_OP_CREATE_CQ,
    ADMIN_OP_DESTROY_CQ,
    ADMIN_OP_CREATE_QP,
    ADMIN_OP_DESTROY_QP,
    ADMIN_OP_REG_MR,
    ADMIN_OP_DEREG_MR,
    ADMIN_OP_BIND,
    ADMIN_OP_LISTEN,
    ADMIN_OP_DESTROY_LISTENER,
    ADMIN_OP_ACCEPT,
    ADMIN_OP_CONNECT,
    ADMIN_OP_CLOSE,
];

/// Whether `QPIP_FUZZ_TRACE` is set: the targets then print what they do and what the device
/// answers, which is what one wants when reproducing a crash from its input.
pub fn trace() -> bool {
    static TRACE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *TRACE.get_or_init(|| std::env::var_os("QPIP_FUZZ_TRACE").is_some())
}

/// Prints a trace line when tracing is on.
#[macro_export]
macro_rules! trace {
    ($($arg:tt)*) => {
        if $crate::trace() {
            eprintln!($($arg)*);
        }
    };
}

// ---- input decoding and seed encoding -------------------------------------------------------

/// A fuzz input read front to back. Reads past the end give zeros, so every input decodes.
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Input { data }
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let take = n.min(self.data.len());
        let mut v = self.data[..take].to_vec();
        v.resize(n, 0);
        self.data = &self.data[take..];
        v
    }

    /// `N` bytes, zeros past the end. No allocation: the targets read most of an input a
    /// number at a time, and a heap allocation per number (with ASan's allocator) cost more
    /// than the reading.
    pub fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut a = [0u8; N];
        let take = N.min(self.data.len());
        a[..take].copy_from_slice(&self.data[..take]);
        self.data = &self.data[take..];
        a
    }

    pub fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.array())
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.array())
    }

    pub fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.array())
    }

    /// Everything not read yet (the input is empty afterwards).
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.data)
    }

    pub fn bool(&mut self) -> bool {
        self.u8() & 1 != 0
    }

    /// A choice among `n` alternatives.
    pub fn choose(&mut self, n: usize) -> usize {
        self.u8() as usize % n
    }

    /// One of `values` (by a choice byte), or, for the choice after the last, any u32.
    pub fn one_of(&mut self, values: &[u32]) -> u32 {
        match self.choose(values.len() + 1) {
            i if i < values.len() => values[i],
            _ => self.u32(),
        }
    }
}

/// Writes what [`Input`] reads: the encoder of the seed corpora.
#[derive(Default)]
pub struct Seed(pub Vec<u8>);

impl Seed {
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.0.extend_from_slice(v);
        self
    }
}

// ---- a synchronous device -------------------------------------------------------------------

/// Guest-physical base of the fuzzers' guest RAM (above 4 GiB, like the device tests, so the
/// high halves of addresses matter).
pub const RAM_BASE: u64 = 0x1_0000_0000;
/// Guest RAM size of [`SyncDevice::new`]: small, so checking all of it after every step stays
/// cheap ([`SyncDevice::with_ram`] makes a larger one).
pub const RAM_SIZE: u64 = 256 << 10;
pub const PAGE: u64 = 4096;
/// Admin queue depth.
pub const ADMIN_DEPTH: u32 = 16;
/// Where the admin rings and the query buffer live (pages 0, 1, 2 of RAM, the first
/// [`SyncDevice::with_ram`] allocates).
pub const ADMIN_SQ: u64 = RAM_BASE;
pub const ADMIN_CQ: u64 = RAM_BASE + PAGE;
pub const QUERY_BUF: u64 = RAM_BASE + 2 * PAGE;

/// The engine on the caller's thread with its own guest RAM.
///
/// Doorbell pages are pages of that RAM: the harness learns which context owns which page
/// from the `CREATE_CTX` and `DESTROY_CTX` completions it takes, and [`Self::check_writes`]
/// lets the device write exactly the pages it may write: those of live contexts (zeroed at
/// creation, slots zeroed for new QPs and CQs, `engine_sleeping`), of contexts that were
/// live since the last check, and of `CREATE_CTX` commands whose outcome is not known yet —
/// the latter only provisionally: if such a command fails, a write to its page is caught at
/// the next check.
pub struct SyncDevice {
    /// The engine and guest RAM (the harness's own mapping of it is what the guest's CPU
    /// would see). Taken apart on drop, to give the RAM back to [`POOL`].
    e: ManuallyDrop<SyncEngine>,
    /// Doorbell page of each live context, by context id.
    live_pages: HashMap<u32, u64>,
    /// The page each context id was last created with (live or destroyed): where the
    /// harness rings that context's doorbells.
    db_pages: HashMap<u32, u64>,
    /// Pages of contexts that were live at some point since the last check.
    was_live: HashSet<u64>,
    /// Every page a submitted `CREATE_CTX` named: a hostile run may re-run any of them.
    named_pages: HashSet<u64>,
    admin: AdminRing,
    next_cmd_id: u32,
    /// Submitted commands not yet completed, by cmd_id.
    pub outstanding: HashMap<u32, AdminCmd>,
    /// Commands that were outstanding when the admin queue was set up again or the device
    /// reset. A waiting command may still be answered later (with CANCELLED, when its object
    /// goes), so such a completion is accepted, once.
    forgotten: HashMap<u32, AdminCmd>,
    /// Set when the harness lies to the device on purpose (admin indices out of line): the
    /// device may then legitimately re-run old commands and overwrite completions, so the
    /// completion bookkeeping only checks what still holds.
    pub hostile: bool,
    /// What guest RAM should hold if the device wrote nothing: RAM as of the last
    /// [`Self::check_writes`], plus the harness's own writes since.
    shadow: Vec<u8>,
    /// Pages past those handed out that some check allowed the device to write (a query
    /// buffer or doorbell page named anywhere): compared at every check from then on. The
    /// other pages past those handed out are never the device's to write, whenever it
    /// writes them, so they are compared once, when the device is dropped.
    tracked: Vec<bool>,
    /// Pages the device must never write (see [`Self::seal`]): read-only in the engine's
    /// mapping, so that a write faults where the device makes it, and left out of the
    /// comparisons.
    sealed: Vec<bool>,
    /// Pages read-only in the engine's mapping now. Seals are applied before the engine next
    /// runs ([`Self::apply_seals`]), in as few `mprotect` calls as the runs of pages allow:
    /// a target seals its rings, page lists and regions one by one, and a call each was a
    /// good part of its set-up.
    mapped_ro: Vec<bool>,
    /// Whether `sealed` and `mapped_ro` may differ.
    seals_pending: bool,
    /// The pages [`Self::check_writes`] compares (empty: to be worked out again), and the
    /// pages handed out when it was worked out.
    compare_pages: Vec<usize>,
    compared_up_to: usize,
    /// Buffers of [`Self::check_writes`], kept from check to check.
    w_buf: Writable,
    provisional_buf: Vec<(u64, u64)>,
}

thread_local! {
    /// Guest RAM (with the engine's mapping of it, and its shadow) of devices dropped on
    /// this thread, zeroed, for the next
    /// device of the same size: a fuzz target builds a device per input, and a fresh memfd
    /// and shadow cost a page fault and a page clear for every page touched — more than
    /// most inputs' work.
    static POOL: RefCell<Vec<(Ram, GuestRam, Vec<u8>)>> = const { RefCell::new(Vec::new()) };
}

/// A zero page, to compare with.
static ZERO_PAGE: [u8; PAGE as usize] = [0; PAGE as usize];

impl SyncDevice {
    /// A fresh device with [`RAM_SIZE`] bytes of guest RAM and its admin queue enabled (as the
    /// control thread does once the driver has programmed valid rings).
    pub fn new() -> SyncDevice {
        Self::with_ram(RAM_SIZE)
    }

    /// As [`Self::new`], with `ram_size` bytes of guest RAM (a multiple of [`PAGE`]).
    pub fn with_ram(ram_size: u64) -> SyncDevice {
        assert!(ram_size & (PAGE - 1) == 0 && ram_size > QUERY_BUF + PAGE - RAM_BASE);
        if trace() {
            // The engine's own log (debug level, or RUST_LOG) beside the harness's trace.
            let _ = env_logger::Builder::from_env(
                env_logger::Env::default().default_filter_or("debug"),
            )
            .is_test(false)
            .try_init();
        }
        let pooled = POOL.with(|p| {
            let mut p = p.borrow_mut();
            let i = p.iter().position(|(r, _, _)| r.size() == ram_size)?;
            Some(p.swap_remove(i))
        });
        let (e, shadow) = match pooled {
            Some((ram, mapping, shadow)) => (
                SyncEngine::on_mapping(ram, mapping, EngineConfig::default()),
                shadow,
            ),
            None => (
                SyncEngine::new(
                    Ram::new(c"fuzz-guest-ram", RAM_BASE, ram_size),
                    EngineConfig::default(),
                ),
                vec![0u8; ram_size as usize],
            ),
        };
        let mut e = ManuallyDrop::new(e);
        let ram = &mut e.ram;
        let fixed = [ram.alloc_pages(1), ram.alloc_pages(1), ram.alloc_pages(1)];
        assert_eq!(fixed, [ADMIN_SQ, ADMIN_CQ, QUERY_BUF]);
        let mut d = SyncDevice {
            e,
            live_pages: HashMap::new(),
            db_pages: HashMap::new(),
            was_live: HashSet::new(),
            named_pages: HashSet::new(),
            admin: AdminRing::new(ADMIN_SQ, ADMIN_CQ, ADMIN_DEPTH),
            next_cmd_id: 1,
            outstanding: HashMap::new(),
            forgotten: HashMap::new(),
            hostile: false,
            shadow,
            tracked: vec![false; (ram_size / PAGE) as usize],
            sealed: vec![false; (ram_size / PAGE) as usize],
            mapped_ro: vec![false; (ram_size / PAGE) as usize],
            seals_pending: false,
            compare_pages: Vec::new(),
            compared_up_to: 0,
            w_buf: Writable::default(),
            provisional_buf: Vec::new(),
        };
        d.enable_admin();
        d
    }

    /// Delivers one control message to the engine, as the control thread would.
    pub fn control(&mut self, msg: Control) {
        self.apply_seals();
        self.e.control(msg);
    }

    /// The engine's interrupt vectors.
    pub fn irqs(&self) -> &Arc<Interrupts> {
        &self.e.irqs
    }

    /// Enables the admin queue afresh (indices back to 0).
    pub fn enable_admin(&mut self) {
        self.admin = AdminRing::new(ADMIN_SQ, ADMIN_CQ, ADMIN_DEPTH);
        self.apply_seals();
        self.e.enable_admin(&self.admin);
        self.forgotten.extend(self.outstanding.drain());
        // Old completions must not look new to the next pass.
        self.write(ADMIN_CQ, &vec![0u8; self.admin.cq_bytes() as usize]);
    }

    /// Function reset through the engine (what REG_CONTROL.RESET and FLR do), then a new
    /// admin queue. Every context goes, and with it the device's right to write its
    /// doorbell page (from the next check on).
    pub fn reset(&mut self) {
        let (ack, done) = mpsc::channel();
        self.control(Control::Reset(ack));
        done.try_recv().expect("reset acknowledged synchronously");
        self.was_live
            .extend(self.live_pages.drain().map(|(_, p)| p));
        self.enable_admin();
    }

    /// Runs the engine until it has nothing left to do (bounded: a hostile doorbell must not
    /// make a step endless, and a correct engine settles in a few passes).
    pub fn run(&mut self) {
        self.apply_seals();
        for _ in 0..64 {
            if !self.e.engine.poll_once() {
                return;
            }
        }
    }

    /// One engine pass (`Engine::poll_once`): what lands between two passes lands in the
    /// middle of whatever the engine is doing. Whether the pass did anything.
    pub fn step(&mut self) -> bool {
        self.apply_seals();
        self.e.engine.poll_once()
    }

    /// Size of guest RAM in bytes (it starts at [`RAM_BASE`]).
    pub fn ram_size(&self) -> u64 {
        self.e.ram.size()
    }

    /// Guest RAM as the harness sees it. The engine may write it only while the harness
    /// calls into it (everything runs on this thread), so no access races with the device.
    pub fn ram(&self) -> &[u8] {
        let size = self.ram_size() as usize;
        // SAFETY: the whole mapping (Ram::ptr checks), which lives as long as self; the
        // engine writes it only inside run(), which cannot run while this borrow lives.
        unsafe { std::slice::from_raw_parts(self.e.ram.ptr(RAM_BASE, size), size) }
    }

    /// Writes guest RAM as the guest would, and the shadow with it (the harness's writes
    /// are not the device's).
    pub fn write(&mut self, gpa: u64, data: &[u8]) {
        self.e.ram.write(gpa, data);
        let at = (gpa - RAM_BASE) as usize;
        self.shadow[at..at + data.len()].copy_from_slice(data);
    }

    /// Asserts the device wrote guest RAM only inside `writable` and the doorbell pages it
    /// may write (see [`SyncDevice`]) since the last check. Returns the pages (their
    /// guest-physical addresses) the device wrote since then, for checks of what it wrote.
    pub fn check_writes(&mut self, writable: &Writable) -> Vec<u64> {
        let page = |p: u64| (p, p.saturating_add(PAGE));
        // Into buffers kept from check to check (this runs after every engine run).
        let mut w = std::mem::take(&mut self.w_buf);
        w.0.clear();
        w.0.extend_from_slice(&writable.0);
        w.0.extend(self.live_pages.values().map(|&p| page(p)));
        w.0.extend(self.was_live.drain().map(page));
        if self.hostile {
            w.0.extend(self.named_pages.iter().map(|&p| page(p)));
        }
        let mut provisional = std::mem::take(&mut self.provisional_buf);
        provisional.clear();
        provisional.extend(
            self.outstanding
                .values()
                .chain(self.forgotten.values())
                .filter_map(create_ctx_page)
                .map(page),
        );
        // Pages past those handed out are compared from the first check that lets the
        // device write them on.
        let handed_out = ((self.e.ram.next_free() - RAM_BASE) / PAGE) as usize;
        let handed_out_end = RAM_BASE + handed_out as u64 * PAGE;
        for &(s, e) in w.0.iter().chain(&provisional) {
            if e <= handed_out_end {
                continue; // compared anyway
            }
            let first = (s.max(handed_out_end) - RAM_BASE) / PAGE;
            let end = (e.min(RAM_BASE + self.ram_size()).saturating_sub(RAM_BASE)).div_ceil(PAGE);
            for p in first..end {
                if !self.tracked[p as usize] {
                    self.tracked[p as usize] = true;
                    self.compare_pages.clear();
                }
            }
        }
        // The pages to compare change only with pages handed out, tracked or sealed.
        if self.compare_pages.is_empty() || self.compared_up_to != handed_out {
            self.compared_up_to = handed_out;
            self.compare_pages = (0..self.tracked.len())
                .filter(|&p| (p < handed_out || self.tracked[p]) && !self.sealed[p])
                .collect();
        }
        let mut shadow = std::mem::take(&mut self.shadow);
        let changed = w.check(self.ram(), &mut shadow, &provisional, &self.compare_pages);
        self.shadow = shadow;
        self.w_buf = w;
        self.provisional_buf = provisional;
        changed
    }

    /// Seals the pages holding `len` bytes at `gpa`: the device must never write them for
    /// the rest of this device's life, or until [`Self::unseal`] (rings, page lists, regions
    /// no write right reaches — pages a target knows no command names as anything else).
    /// They become read-only in the engine's mapping before the engine next runs (so a
    /// write is a fault, with the device's code on the stack) and [`Self::check_writes`] no
    /// longer compares them: most of a data-path target's pages are such, and comparing
    /// them after every run is much of its time.
    pub fn seal(&mut self, gpa: u64, len: u64) {
        self.set_sealed(gpa, len, true);
    }

    /// Lets the device write the pages holding `len` bytes at `gpa` again (a target that
    /// seals pages until a command names them): [`Self::check_writes`] compares them from
    /// here on. They equal the shadow: the device could not write them while sealed.
    pub fn unseal(&mut self, gpa: u64, len: u64) {
        self.set_sealed(gpa, len, false);
    }

    fn set_sealed(&mut self, gpa: u64, len: u64, seal: bool) {
        if len == 0 {
            return;
        }
        let first = (gpa - RAM_BASE) / PAGE;
        let end = (gpa + len - RAM_BASE).div_ceil(PAGE);
        assert!(end <= self.sealed.len() as u64, "sealing pages outside RAM");
        for p in first..end {
            if self.sealed[p as usize] != seal {
                self.sealed[p as usize] = seal;
                self.seals_pending = true;
                self.compare_pages.clear();
            }
        }
    }

    /// Makes the engine's mapping read-only exactly where pages are sealed, before the
    /// engine runs: each run of pages to seal (or to unseal) that holds a page to change is
    /// one `mprotect`.
    fn apply_seals(&mut self) {
        if !std::mem::take(&mut self.seals_pending) {
            return;
        }
        let n = self.sealed.len();
        let mut p = 0;
        while p < n {
            let want = self.sealed[p];
            let end = (p..n).find(|&q| self.sealed[q] != want).unwrap_or(n);
            if self.mapped_ro[p..end].iter().any(|&ro| ro != want) {
                self.protect(p as u64, end as u64, want);
            }
            p = end;
        }
    }

    /// Makes pages `first..end` read-only in the engine's mapping, or writable again.
    fn protect(&mut self, first: u64, end: u64, read_only: bool) {
        use vm_memory::{GuestAddress, GuestAddressSpace, GuestMemoryBackend};
        let mem = self.e.mapping().memory();
        let host = mem
            .memory()
            .get_host_address(GuestAddress(RAM_BASE + first * PAGE))
            .expect("sealed pages are in the engine's mapping");
        let prot = if read_only {
            libc::PROT_READ
        } else {
            libc::PROT_READ | libc::PROT_WRITE
        };
        // SAFETY: whole pages of the engine's mapping (inside RAM: `sealed` has a flag for
        // every page), which lives as long as the pool keeps it; only their protection
        // changes.
        let r = unsafe { libc::mprotect(host.cast(), ((end - first) * PAGE) as usize, prot) };
        assert_eq!(r, 0, "mprotect: {}", std::io::Error::last_os_error());
        self.mapped_ro[first as usize..end as usize].fill(read_only);
    }

    /// Checks the pages [`Self::check_writes`] leaves out (never handed out, never
    /// writable): the device wrote none of them.
    fn check_untracked(&self) {
        let handed_out = ((self.e.ram.next_free() - RAM_BASE) / PAGE) as usize;
        let page = PAGE as usize;
        let now = self.ram();
        for p in handed_out..self.tracked.len() {
            let at = p * page;
            if !self.tracked[p] && now[at..at + page] != self.shadow[at..at + page] {
                let i = (0..page)
                    .find(|&i| now[at + i] != self.shadow[at + i])
                    .expect("a difference");
                panic!(
                    "the device wrote guest RAM it had no right to write (a page never handed \
                     out): byte {:#x} ({:#04x} -> {:#04x})",
                    RAM_BASE + (at + i) as u64,
                    self.shadow[at + i],
                    now[at + i]
                );
            }
        }
    }

    pub fn read(&self, gpa: u64, len: usize) -> Vec<u8> {
        self.e.ram.read(gpa, len)
    }

    pub fn write_obj<T: IntoBytes + Immutable>(&mut self, gpa: u64, v: &T) {
        self.write(gpa, v.as_bytes());
    }

    pub fn read_obj<T: FromBytes>(&self, gpa: u64) -> T {
        self.e.ram.read_obj(gpa)
    }

    /// `n` fresh zeroed pages, contiguous; their guest-physical address.
    pub fn alloc_pages(&mut self, n: u64) -> u64 {
        self.e.ram.alloc_pages(n)
    }

    /// Writes a page list for `pages` and returns its address (through [`Self::write`], so
    /// the shadow knows it).
    pub fn page_list(&mut self, pages: &[u64]) -> u64 {
        let at = self.alloc_pages(Ram::page_list_pages(pages.len()));
        self.write(at, pages.as_bytes());
        at
    }

    // -- doorbells --

    /// Guest-physical address of context `ctx`'s doorbell page: the page it was last created
    /// with (so a destroyed context's page can still be written, as a process may).
    pub fn db_page(&self, ctx: u32) -> u64 {
        *self
            .db_pages
            .get(&ctx)
            .unwrap_or_else(|| panic!("context {ctx} was never created"))
    }

    /// The live contexts' doorbell pages, by context id, as the completions taken so far
    /// tell.
    pub fn live_db_pages(&self) -> &HashMap<u32, u64> {
        &self.live_pages
    }

    /// Writes the u32 at `off` in context `ctx`'s doorbell page (guest RAM).
    pub fn db_write(&mut self, ctx: u32, off: u32, value: u32) {
        assert!(off & 3 == 0 && off < DOORBELL_PAGE_SIZE);
        let at = self.db_page(ctx) + off as u64;
        self.write(at, &value.to_le_bytes());
    }

    pub fn db_read(&self, ctx: u32, off: u32) -> u32 {
        assert!(off & 3 == 0 && off < DOORBELL_PAGE_SIZE);
        let at = self.db_page(ctx) + off as u64;
        u32::from_le_bytes(self.read(at, 4).try_into().expect("4 bytes"))
    }

    /// Rings a doorbell the way the ABI prescribes: the value, then the page's change count.
    /// Not with `abi::doorbell::Producer`: these stores go through [`Self::write`], so that the
    /// shadow knows them (a destroyed context's page is not the device's to write).
    pub fn ring(&mut self, ctx: u32, off: u32, value: u32) {
        self.db_write(ctx, off, value);
        let c = self.db_read(ctx, DB_CHANGE_COUNT);
        self.db_write(ctx, DB_CHANGE_COUNT, c.wrapping_add(1));
    }

    /// Learns from a completion which contexts exist and where their doorbell pages are.
    fn note_contexts(&mut self, cmd: &AdminCmd, c: &AdminCqe) {
        if c.status != ADMIN_STATUS_OK {
            return;
        }
        match cmd.opcode {
            ADMIN_OP_CREATE_CTX => {
                let page = create_ctx_page(cmd).expect("a CREATE_CTX");
                let ctx = c.result0 as u32;
                self.live_pages.insert(ctx, page);
                self.db_pages.insert(ctx, page);
                self.was_live.insert(page);
            }
            ADMIN_OP_DESTROY_CTX => {
                if let Some(page) = self.live_pages.remove(&cmd.ctx) {
                    self.was_live.insert(page);
                }
            }
            _ => {}
        }
    }

    // -- admin queue --

    /// Puts a command in the submission ring and tells the engine (REG_ADMIN_SQ_TAIL), without
    /// running it. The harness assigns cmd_id.
    pub fn submit(&mut self, mut cmd: AdminCmd) -> u32 {
        let id = self.next_cmd_id;
        self.next_cmd_id = self.next_cmd_id.wrapping_add(1).max(1);
        cmd.cmd_id = id;
        trace!(
            "submit #{id}: opcode {:#04x} ctx {} handle {:#x} body {:02x?}",
            cmd.opcode,
            cmd.ctx,
            cmd.handle,
            &cmd.body[..24]
        );
        let at = self.admin.push();
        self.write_obj(at, &cmd);
        if let Some(page) = create_ctx_page(&cmd) {
            self.named_pages.insert(page);
        }
        self.outstanding.insert(id, cmd);
        self.control(Control::AdminSqTail(self.admin.tail));
        id
    }

    /// Takes every completion the device has written, releasing the slots
    /// (REG_ADMIN_CQ_HEAD). Checks each against the command it completes.
    pub fn completions(&mut self) -> Vec<(AdminCmd, AdminCqe)> {
        let mut out = Vec::new();
        let start = self.admin.head;
        while let Some(c) = self.admin.take(&self.e.ram) {
            trace!(
                "  complete #{}: opcode {:#04x} status {} results {:#x} {:#x} {:#x}",
                c.cmd_id,
                c.opcode,
                c.status,
                c.result0,
                c.result1,
                c.result2
            );
            match self.outstanding.remove(&c.cmd_id) {
                Some(cmd) => {
                    check_admin_cqe(&c, cmd.opcode);
                    self.note_contexts(&cmd, &c);
                    out.push((cmd, c));
                }
                None if self.hostile => {}
                None if self.forgotten.contains_key(&c.cmd_id) => {
                    let cmd = self.forgotten.remove(&c.cmd_id).expect("present");
                    check_admin_cqe(&c, cmd.opcode);
                    self.note_contexts(&cmd, &c);
                }
                None => panic!("completion for a command not outstanding: {c:?}"),
            }
            if out.len() > ADMIN_DEPTH as usize || self.admin.head.wrapping_sub(start) > ADMIN_DEPTH
            {
                assert!(self.hostile, "more completions than ring slots");
                break;
            }
        }
        if !out.is_empty() {
            self.control(Control::AdminCqHead(self.admin.head));
        }
        out
    }

    /// Submits, runs the engine and returns the command's completion (synchronous commands).
    pub fn call(&mut self, cmd: AdminCmd) -> AdminCqe {
        let id = self.submit(cmd);
        self.run();
        let done = self.completions();
        done.into_iter()
            .find(|(_, c)| c.cmd_id == id)
            .map(|(_, c)| c)
            .unwrap_or_else(|| panic!("admin command {:#x} did not complete at once", cmd.opcode))
    }

    /// As [`Self::call`], for commands the setup needs to succeed; returns result0/result1.
    /// Runs the engine only until the command completes (a synchronous command does in the
    /// pass that takes it), not until it settles: a target builds its objects afresh for
    /// every input, and the passes that would find nothing to do cost as much as the rest
    /// of the set-up.
    pub fn must(&mut self, cmd: AdminCmd) -> (u64, u64) {
        let id = self.submit(cmd);
        let mut c = None;
        for _ in 0..64 {
            self.step();
            c = self.completions().into_iter().find(|(_, c)| c.cmd_id == id);
            if c.is_some() {
                break;
            }
        }
        let (_, c) =
            c.unwrap_or_else(|| panic!("setup command {:#x} did not complete", cmd.opcode));
        assert_eq!(
            c.status, ADMIN_STATUS_OK,
            "setup command {:#x} failed: {c:?}",
            cmd.opcode
        );
        (c.result0, c.result1)
    }

    // -- object set-up helpers (for the data-path target) --

    /// A context with a fresh page of guest RAM as its doorbell page.
    pub fn create_ctx(&mut self) -> u32 {
        let page = self.alloc_pages(1);
        self.must(create_ctx_cmd(page)).0 as u32
    }

    /// `n` fresh pages in one piece, and their page list (sealed: the object helpers are
    /// for data-path targets, whose commands never name a page list as anything else).
    fn pages(&mut self, n: u64) -> (Vec<u64>, u64) {
        let pages = contiguous(self.alloc_pages(n), n);
        let list = self.page_list(&pages);
        self.seal(list, PAGE * Ram::page_list_pages(n as usize));
        (pages, list)
    }

    /// Submits `cmds` together, runs the engine until all have completed, and returns each
    /// one's (result0, result1) in order; all must succeed. A target's set-up runs its
    /// independent commands this way: one engine pass for a batch instead of one for each.
    pub fn must_all(&mut self, cmds: &[AdminCmd]) -> Vec<(u64, u64)> {
        assert!(
            cmds.len() + self.outstanding.len() <= ADMIN_DEPTH as usize,
            "a set-up batch larger than the admin queue"
        );
        let ids: Vec<u32> = cmds.iter().map(|&c| self.submit(c)).collect();
        let mut done: HashMap<u32, AdminCqe> = HashMap::new();
        for _ in 0..64 {
            self.step();
            done.extend(self.completions().into_iter().map(|(_, c)| (c.cmd_id, c)));
            if ids.iter().all(|id| done.contains_key(id)) {
                break;
            }
        }
        ids.iter()
            .zip(cmds)
            .map(|(id, cmd)| {
                let c = done
                    .get(id)
                    .unwrap_or_else(|| panic!("setup command {:#x} did not complete", cmd.opcode));
                assert_eq!(
                    c.status, ADMIN_STATUS_OK,
                    "setup command {:#x} failed: {c:?}",
                    cmd.opcode
                );
                (c.result0, c.result1)
            })
            .collect()
    }

    /// A context on a fresh page: its `CREATE_CTX`.
    pub fn plan_ctx(&mut self) -> AdminCmd {
        let page = self.alloc_pages(1);
        create_ctx_cmd(page)
    }

    /// A CQ of `depth` entries in fresh pages, raising `vector`: its `CREATE_CQ`, and what
    /// makes the [`Cq`] of the command's results.
    pub fn plan_cq(&mut self, ctx: u32, depth: u32, vector: u32) -> (AdminCmd, PlannedCq) {
        let (pages, list) = self.pages(ring_pages(depth, CQE_SIZE));
        let args = cq_body(list, depth, vector);
        (
            cmd(ADMIN_OP_CREATE_CQ, ctx, 0, &args),
            PlannedCq { ctx, args, pages },
        )
    }

    /// A CQ of `depth` entries in fresh pages, raising `vector`.
    pub fn create_cq(&mut self, ctx: u32, depth: u32, vector: u32) -> Cq {
        let (c, plan) = self.plan_cq(ctx, depth, vector);
        plan.created(self.must(c))
    }

    /// A QP with both rings `depth` deep in fresh pages, completing to CQs `cqs` (ids):
    /// its `CREATE_QP`, and what makes the [`Qp`] of the command's results.
    pub fn plan_qp(
        &mut self,
        ctx: u32,
        cqs: (u32, u32),
        depth: u32,
        (qp_type, framing): (u8, u8),
    ) -> (AdminCmd, PlannedQp) {
        let n = ring_pages(depth, WQE_SIZE);
        let sq = contiguous(self.alloc_pages(n), n);
        let rq = contiguous(self.alloc_pages(n), n);
        let lists = (self.page_list(&sq), self.page_list(&rq));
        // The device reads rings and page lists, never writes them.
        for at in [sq[0], rq[0]] {
            self.seal(at, n * PAGE);
        }
        for at in [lists.0, lists.1] {
            self.seal(at, PAGE * Ram::page_list_pages(n as usize));
        }
        let args = qp_body(lists, cqs, (depth, depth), qp_type, framing);
        (
            cmd(ADMIN_OP_CREATE_QP, ctx, 0, &args),
            PlannedQp {
                ctx,
                args,
                rings: (sq, rq),
            },
        )
    }

    /// A QP with both rings `depth` deep in fresh pages (message framing if TCP).
    pub fn create_qp(&mut self, ctx: u32, scq: u32, rcq: u32, depth: u32, qp_type: u8) -> Qp {
        let framing = if qp_type == QP_TYPE_TCP {
            FRAMING_MESSAGE
        } else {
            0
        };
        let (c, plan) = self.plan_qp(ctx, (scq, rcq), depth, (qp_type, framing));
        plan.created(self.must(c))
    }

    /// A region of `len` bytes at `offset` into `npages` fresh pages: its `REG_MR` (which
    /// must succeed: pages without a write right are sealed at once), its iova and first
    /// page. The command's results are the lkey and the rkey.
    pub fn plan_mr(
        &mut self,
        ctx: u32,
        npages: u64,
        offset: u32,
        len: u64,
        access: u32,
    ) -> (AdminCmd, u64, u64) {
        let (pages, list) = self.pages(npages);
        let base = pages[0];
        let iova = 0x7f00_0000_0000 + base - RAM_BASE + offset as u64;
        let a = mr_body(list, npages as u32, offset, iova, len, access);
        if access & (MR_ACCESS_LOCAL_WRITE | MR_ACCESS_REMOTE_WRITE) == 0 {
            self.seal(base, npages * PAGE); // nothing may write it
        }
        (cmd(ADMIN_OP_REG_MR, ctx, 0, &a), iova, base)
    }

    /// Registers `len` bytes at `offset` into `npages` fresh pages; (lkey, iova, first page).
    pub fn reg_mr(
        &mut self,
        ctx: u32,
        npages: u64,
        offset: u32,
        len: u64,
        access: u32,
    ) -> (u32, u64, u64) {
        let (c, iova, base) = self.plan_mr(ctx, npages, offset, len, access);
        (self.must(c).0 as u32, iova, base)
    }

    /// `BIND` of QP `qp` to `addr`/`port`.
    pub fn bind_cmd(ctx: u32, qp: u32, addr: [u8; 16], port: u16) -> AdminCmd {
        let mut a = BindArgs::new_zeroed();
        a.addr = addr;
        a.port = port;
        cmd(ADMIN_OP_BIND, ctx, qp, &a)
    }

    pub fn bind(&mut self, ctx: u32, qp: u32, addr: [u8; 16], port: u16) -> u16 {
        self.must(Self::bind_cmd(ctx, qp, addr, port)).0 as u16
    }
}

impl Drop for SyncDevice {
    /// Checks the pages no check looked at, then gives guest RAM back to [`POOL`], zeroed.
    fn drop(&mut self) {
        if std::thread::panicking() {
            return; // RAM and engine leak: the process is going down
        }
        self.check_untracked();
        // The pool's mapping goes back writable, all of it in one call.
        if self.mapped_ro.contains(&true) {
            self.protect(0, self.mapped_ro.len() as u64, false);
        }
        // SAFETY: `self.e` is not used again: this is the end of `self`.
        let e = unsafe { ManuallyDrop::take(&mut self.e) };
        let (mut ram, mapping) = e.into_parts();
        let mut shadow = std::mem::take(&mut self.shadow);
        let page = PAGE as usize;
        let handed_out = ((ram.next_free() - RAM_BASE) / PAGE) as usize;
        // Past the pages handed out, what anyone wrote (the harness's writes, or the device's
        // where a check allowed them; elsewhere RAM equals the shadow, as checked above).
        for p in handed_out..self.tracked.len() {
            let at = p * page;
            if self.tracked[p] || shadow[at..at + page] != ZERO_PAGE {
                ram.fill(RAM_BASE + at as u64, page, 0);
                shadow[at..at + page].fill(0);
            }
        }
        shadow[..handed_out * page].fill(0);
        ram.recycle();
        POOL.with(|p| p.borrow_mut().push((ram, mapping, shadow)));
    }
}

impl Default for SyncDevice {
    fn default() -> Self {
        Self::new()
    }
}

/// A CQ whose `CREATE_CQ` is built ([`SyncDevice::plan_cq`]).
pub struct PlannedCq {
    ctx: u32,
    args: CreateCqArgs,
    pages: Vec<u64>,
}

impl PlannedCq {
    /// The CQ, from its command's (result0, result1).
    pub fn created(self, (id, slot): (u64, u64)) -> Cq {
        Cq::created(self.ctx, &self.args, self.pages, (id as u32, slot as u32))
    }
}

/// A QP whose `CREATE_QP` is built ([`SyncDevice::plan_qp`]).
pub struct PlannedQp {
    ctx: u32,
    args: CreateQpArgs,
    rings: (Vec<u64>, Vec<u64>),
}

impl PlannedQp {
    /// The QP, from its command's (result0, result1).
    pub fn created(self, (id, slot): (u64, u64)) -> Qp {
        Qp::created(self.ctx, &self.args, self.rings, (id as u32, slot as u32))
    }
}

/// The doorbell page a `CREATE_CTX` command names (`None` for other commands).
pub fn create_ctx_page(c: &AdminCmd) -> Option<u64> {
    (c.opcode == ADMIN_OP_CREATE_CTX)
        .then(|| {
            CreateCtxArgs::read_from_prefix(&c.body[..])
                .expect("48 bytes")
                .0
        })
        .map(|a| a.doorbell_page)
}

/// Byte ranges (guest-physical, half-open) the device may write.
#[derive(Default, Clone)]
pub struct Writable(pub Vec<(u64, u64)>);

impl Writable {
    pub fn add(&mut self, start: u64, len: u64) {
        self.0.push((start, start.saturating_add(len)));
    }

    /// Asserts that RAM (`now`) differs from `shadow` only inside the writable ranges or the
    /// `provisional` ones, then brings `shadow` up to date, except for bytes that changed only
    /// inside a provisional range: those are judged again at the next check (by then the
    /// range is writable, or the change is caught). Looks only at `pages` (indices).
    /// Returns the pages that changed.
    fn check(
        &self,
        now: &[u8],
        shadow: &mut [u8],
        provisional: &[(u64, u64)],
        pages: &[usize],
    ) -> Vec<u64> {
        let mut changed = Vec::new();
        let inside =
            |ranges: &[(u64, u64)], gpa: u64| ranges.iter().any(|&(s, e)| gpa >= s && gpa < e);
        // Page by page: almost every page is unchanged, and slice equality is fast.
        let page = PAGE as usize;
        for &p in pages {
            let np = &now[p * page..(p + 1) * page];
            let sp = &mut shadow[p * page..(p + 1) * page];
            if np == sp {
                continue;
            }
            // Whole pages first: doorbell pages are written (zeroed) whole.
            let start = RAM_BASE + (p * page) as u64;
            changed.push(start);
            let end = start + np.len() as u64;
            let covers = |&(s, e): &(u64, u64)| s <= start && end <= e;
            if self.0.iter().any(covers) {
                sp.copy_from_slice(np);
                continue;
            }
            if provisional.iter().any(covers) {
                // A wholly provisional page: its changes wait for the next check (unless
                // part of the page is writable as well).
                let overlaps = |&(s, e): &(u64, u64)| s < end && start < e;
                if !self.0.iter().any(overlaps) {
                    continue;
                }
            }
            // Then 64-byte lines (a line inside one writable range is taken whole: most
            // changed lines are in a region or a ring), and bytes only in the lines left.
            for (l, (nl, sl)) in np.chunks(64).zip(sp.chunks_mut(64)).enumerate() {
                if nl == sl {
                    continue;
                }
                let line_start = start + (l * 64) as u64;
                if self.0.iter().any(|&(s, e)| s <= line_start && line_start + 64 <= e) {
                    sl.copy_from_slice(nl);
                    continue;
                }
                for (j, (a, b)) in nl.iter().zip(sl.iter_mut()).enumerate() {
                    if a == b {
                        continue;
                    }
                    let at = p * page + l * 64 + j;
                    let gpa = RAM_BASE + at as u64;
                    if inside(&self.0, gpa) {
                        *b = *a;
                    } else if !inside(provisional, gpa) {
                        let line = at & !63;
                        panic!(
                            "the device wrote guest RAM it had no right to write: byte {gpa:#x} \
                             ({b:#04x} -> {a:#04x}); the 64 bytes at {:#x} now: {:02x?}",
                            RAM_BASE + line as u64,
                            &now[line..line + 64]
                        );
                    }
                }
            }
        }
        changed
    }
}
