//! The engine on the fuzzer's thread over its own guest RAM, every byte the device writes
//! checked: the device itself here (creation, control, engine passes, giving the RAM back),
//! guest RAM and the write checks in `memory`, doorbells and completion queues in
//! `doorbells`, the admin queue and object set-up in `admin`.

mod admin;
mod doorbells;
mod memory;

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::mem::ManuallyDrop;
use std::sync::mpsc;
use std::sync::Arc;

use qpip_abi::admin::*;
use qpip_device::dma::GuestRam;
use qpip_device::engine::{Control, EngineConfig};
use qpip_device::irq::Interrupts;
use qpip_testkit::{AdminRing, Ram, SyncEngine};

pub use admin::create_ctx_page;
pub use memory::Writable;
pub use qpip_testkit::{PlannedCq, PlannedQp};

use crate::trace;

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
