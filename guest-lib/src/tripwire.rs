//! Tripwires (CLAN's): an event when data placed by the network touches a chosen range of
//! registered memory while the tripwire is armed — a consumer sleeps until the next record
//! of a ring a peer fills with RDMA Writes, without a receive per record or a busy poll.
//!
//! A [`Tripwire`] watches `len` bytes of a [`MemoryRegion`]. Each [`Tripwire::arm`] allows
//! one event: the first placement by an iWARP QP of the context (an RDMA Write, a Read
//! Response, a Send into a receive buffer) that writes any byte of the range while it is
//! armed puts one [`Completion`](crate::Completion) on the tripwire's CQ —
//! [`Opcode::Tripwire`](crate::Opcode::Tripwire), `wr_id` = its tag, `qp` = its
//! [`Tripwire::id`], `byte_len` = the bytes of the range that placement wrote, `addr` = the
//! address of the first of them — and disarms it. Wait for it as for any completion: poll,
//! or [`Cq::arm`] and sleep on the CQ's descriptor ([`Cq::wait`], `poll`, `epoll`).
//!
//! **Arm, then look.** Data placed before the device saw the arm fires nothing, so after
//! arming check whether what you wait for is there already, and wait only if it is not:
//!
//! ```no_run
//! # use qpip::{Access, Context};
//! # fn main() -> qpip::Result<()> {
//! let ctx = Context::open_device(std::path::Path::new("/dev/qpip0"))?;
//! let ring = ctx.alloc_with(64 * 256, Access::WRITE)?; // peers RDMA-Write records here
//! let events = ctx.create_cq(16)?;
//! // The last 8 bytes of record 0: an in-order writer fills them last.
//! let tw = ctx.create_tripwire(&ring, 256 - 8, 8, &events, 0)?;
//! tw.arm();
//! if ring[248..256] == [0; 8] {
//!     events.wait_one(None)?; // the event: record 0 is there
//! }
//! # Ok(())
//! # }
//! ```
//!
//! **Arm words.** The device reads a tripwire's arm state from a u32 in registered memory:
//! armed while the word differs from its value when the tripwire last fired. So arming is a
//! store — no system call. The library keeps these words for the application: the
//! tripwires of a context share pages of arm words (one registered page holds about a
//! thousand, the device's limit of tripwires), taken as needed and deregistered when their
//! last tripwire is dropped. A tripwire keeps its watched region, its CQ and its page of
//! arm words alive (the device refuses to let them go while it lives); dropping it destroys
//! it in the device.
//!
//! Tripwires need the device; the software provider gives [`Error::Unsupported`].

use std::sync::atomic::{fence, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::context::{Context, CtxImpl, CtxInner};
use crate::cq::{Cq, CqInner};
use crate::device::TripwireArgs;
use crate::error::{Error, Result};
use crate::mr::{MemoryRegion, MrInner};

/// Bytes of one page of arm words.
const ARM_PAGE: usize = 4096;

/// A tripwire on a range of a memory region (see the [module documentation](self)).
/// `Send + Sync`; dropping it destroys it.
pub struct Tripwire {
    id: u32,
    tag: u64,
    ctx: Arc<CtxInner>,
    page: Arc<ArmPage>,
    slot: usize,
    // Held for the device, which refuses to let them go while the tripwire lives.
    _watched: Arc<MrInner>,
    _cq: Arc<CqInner>,
}

impl Tripwire {
    /// The tripwire's id: the `qp` of its events.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Its tag: the `wr_id` of its events.
    pub fn tag(&self) -> u64 {
        self.tag
    }

    /// Arms it: the next placement into the range fires it (once). A store to its arm
    /// word, no system call. Arming an armed tripwire changes nothing; arming from several
    /// threads at once arms it once.
    pub fn arm(&self) {
        let word = self.page.word(self.slot);
        // The device only reads the word and only this tripwire writes it: an increment
        // without a locked instruction. Release: what the caller did before arming (say,
        // handing the previous record's slot back) is done before the device can see it.
        word.store(
            word.load(Ordering::Relaxed).wrapping_add(1),
            Ordering::Release,
        );
        // Arm, then look: the caller reads the watched bytes next. A store and a later
        // load of another address may pass each other (x86's store buffer does it), and
        // then the device could place the data after that read and still find the word
        // unchanged — each side missing the other, the caller waiting for an event that
        // never comes. A full fence keeps the load after the store.
        fence(Ordering::SeqCst);
    }
}

impl Drop for Tripwire {
    fn drop(&mut self) {
        // After DESTROY_TRIPWIRE the device reads the word no more and lets go of the
        // regions and the CQ (held by this value's fields, dropped after this).
        self.ctx.dev().destroy_tripwire(self.id);
        self.page.release(self.slot);
    }
}

impl std::fmt::Debug for Tripwire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tripwire")
            .field("id", &self.id)
            .field("tag", &self.tag)
            .finish()
    }
}

impl Context {
    /// Creates a tripwire on `len` bytes at `offset` of `watched`, whose events go to `cq`
    /// tagged `tag`. It starts disarmed: call [`Tripwire::arm`]. The device only
    /// ([`Error::Unsupported`] on the software provider); the region and the CQ must be
    /// this context's.
    pub fn create_tripwire(
        &self,
        watched: &MemoryRegion,
        offset: usize,
        len: usize,
        cq: &Cq,
        tag: u64,
    ) -> Result<Tripwire> {
        let mr = &watched.inner;
        if !Arc::ptr_eq(&mr.ctx, &self.inner) {
            return Err(Error::ForeignObject("the memory region"));
        }
        if !Arc::ptr_eq(&cq.inner.ctx, &self.inner) {
            return Err(Error::ForeignObject("the completion queue"));
        }
        if len == 0 {
            return Err(Error::InvalidArgument(
                "a tripwire watches at least one byte".into(),
            ));
        }
        if offset.checked_add(len).is_none_or(|end| end > mr.len()) {
            return Err(Error::OutOfBounds {
                lkey: mr.lkey,
                offset,
                end: offset.saturating_add(len),
                size: mr.len(),
            });
        }
        let dev = match &self.inner.imp {
            CtxImpl::Device(d) => d,
            CtxImpl::Soft(_) => {
                return Err(Error::Unsupported(
                    "tripwires watch what the device places, which the software provider lacks",
                ))
            }
        };
        let (page, slot) = self.inner.arm_words.take(self)?;
        let args = TripwireArgs {
            lkey: mr.lkey,
            addr: mr.addr() as u64 + offset as u64,
            len: len as u64,
            arm_lkey: page.mr.lkey(),
            arm_addr: page.word(slot) as *const AtomicU32 as u64,
            cq: cq.id(),
            tag,
        };
        let id = match dev.create_tripwire(&args) {
            Ok(id) => id,
            Err(e) => {
                page.release(slot);
                return Err(e);
            }
        };
        Ok(Tripwire {
            id,
            tag,
            ctx: self.inner.clone(),
            page,
            slot,
            _watched: mr.clone(),
            _cq: cq.inner.clone(),
        })
    }
}

/// The arm words of a context's tripwires: pages of them, each alive while a tripwire
/// uses one of its words (the context holds them weakly: a page holds the context).
#[derive(Default)]
pub(crate) struct ArmWords {
    pages: Mutex<Vec<Weak<ArmPage>>>,
}

impl ArmWords {
    /// A free word: of a page that has one, else of a new page.
    fn take(&self, ctx: &Context) -> Result<(Arc<ArmPage>, usize)> {
        let mut pages = self.pages.lock().unwrap();
        pages.retain(|p| p.strong_count() > 0);
        for p in pages.iter().filter_map(Weak::upgrade) {
            let slot = p.free.lock().unwrap().pop();
            if let Some(slot) = slot {
                return Ok((p, slot));
            }
        }
        let page = Arc::new(ArmPage::new(ctx)?);
        let slot = page.free.lock().unwrap().pop().expect("a new page's words");
        pages.push(Arc::downgrade(&page));
        Ok((page, slot))
    }
}

/// One registered page of arm words (u32s, 4-byte aligned), and which are free.
struct ArmPage {
    /// Private to the page: its bytes are touched only as the atomics of `word`.
    mr: MemoryRegion,
    /// Offset of the first word in the region (its buffer need not be 4-byte aligned).
    base: usize,
    free: Mutex<Vec<usize>>,
}

impl ArmPage {
    fn new(ctx: &Context) -> Result<ArmPage> {
        // Registered for local writes like every region (Access's bits), so the driver
        // pins the pages writable: a read-only pin of untouched memory could hold the
        // shared zero page, which this process's stores would never reach.
        let mr = ctx.alloc(ARM_PAGE)?;
        let addr = mr.inner.addr() as usize;
        let base = addr.next_multiple_of(4) - addr;
        let words = (ARM_PAGE - base) / 4;
        Ok(ArmPage {
            mr,
            base,
            // Handed out from the start of the page.
            free: Mutex::new((0..words).rev().collect()),
        })
    }

    /// Arm word `slot`.
    fn word(&self, slot: usize) -> &AtomicU32 {
        let at = self.base + 4 * slot;
        assert!(at + 4 <= self.mr.len(), "arm word {slot} outside its page");
        // SAFETY: 4 bytes inside the page's live region, 4-byte aligned (`base`); the
        // region is never borrowed as bytes (it is private to this page), so its words are
        // accessed only as atomics here — and read by the device, which is what atomics
        // of memory shared with another agent are for.
        unsafe { AtomicU32::from_ptr(self.mr.inner.addr().add(at).cast()) }
    }

    /// Word `slot` is free again (its tripwire destroyed, or never created). Zeroed for
    /// the next tripwire, whose count the device starts at 0.
    fn release(&self, slot: usize) {
        self.word(slot).store(0, Ordering::Relaxed);
        self.free.lock().unwrap().push(slot);
    }
}
