//! Registered memory: a buffer owned by its registration, so it cannot be freed while the
//! device may use it, and scatter/gather entries that name ranges of it.

use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::context::{CtxImpl, CtxInner};
use crate::error::{Error, Result};

/// A buffer registered with a context: the device (or the software provider) reads the
/// bytes of sends from it and writes received bytes into it.
///
/// The region owns its memory, and every work request that names it keeps that memory
/// alive until the request completes, so dropping the region early is safe: it is
/// deregistered once its handle is dropped and the completion of every request that
/// names it has been polled.
///
/// Deregistration takes the region away at once, also from peers: an iWARP peer's RDMA
/// Write into it, or a Read Response the device is streaming from it to a peer, ends
/// there — the QP serving it is reset and moves to the error state (its requests complete
/// `Flushed`, an event says the region went), and no byte moves to or from the memory
/// afterwards. Keep a region a peer may still read or write until the peer is done.
///
/// The memory is shared with the device, like a shared file mapping with another process:
/// while a work request naming a range is outstanding, the device may read (send) or write
/// (receive) those bytes at any moment. Fill a send buffer before posting it and leave it
/// unchanged until its completion; read a receive buffer after its completion.
pub struct MemoryRegion {
    pub(crate) inner: Arc<MrInner>,
}

pub(crate) struct MrInner {
    ptr: NonNull<u8>,
    len: usize,
    cap: usize,
    pub(crate) lkey: u32,
    /// The key peers name it by (0: no remote right).
    pub(crate) rkey: u32,
    pub(crate) ctx: Arc<CtxInner>,
    /// Its handle was dropped while requests still held it (device contexts: counted in
    /// the context until the region goes, see `device::Ctx::region_dropped`).
    pub(crate) orphaned: AtomicBool,
}

// SAFETY: the region is a heap buffer with no thread affinity; the raw pointer is only
// turned into references by `MemoryRegion` under Rust's borrow rules, and by the providers
// as the device-shared memory the type's documentation describes.
unsafe impl Send for MrInner {}
// SAFETY: as above; `MrInner` itself is never mutated after construction but for an
// atomic flag.
unsafe impl Sync for MrInner {}

impl MrInner {
    /// Takes over `buf`'s allocation; `lkey` is filled in by the provider afterwards.
    pub(crate) fn new(ctx: Arc<CtxInner>, buf: Vec<u8>) -> Result<MrInner> {
        if buf.is_empty() {
            return Err(Error::InvalidArgument(
                "cannot register an empty buffer".into(),
            ));
        }
        let mut buf = std::mem::ManuallyDrop::new(buf);
        let (ptr, len, cap) = (buf.as_mut_ptr(), buf.len(), buf.capacity());
        Ok(MrInner {
            // A non-empty Vec's pointer is never null.
            ptr: NonNull::new(ptr).expect("Vec pointer"),
            len,
            cap,
            lkey: 0,
            rkey: 0,
            ctx,
            orphaned: AtomicBool::new(false),
        })
    }

    pub(crate) fn addr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for MrInner {
    fn drop(&mut self) {
        // Deregister first: after it the device no longer accepts the lkey, so no access
        // can follow the free below.
        if let CtxImpl::Device(dev) = &self.ctx.imp {
            dev.dereg_mr(self.lkey);
            if self.orphaned.load(Ordering::Relaxed) {
                dev.orphan_gone();
            }
        }
        // SAFETY: ptr/len/cap came from a Vec<u8> this region took over and never handed
        // back; no work request refers to it any more (each holds an Arc of this region).
        drop(unsafe { Vec::from_raw_parts(self.ptr.as_ptr(), self.len, self.cap) });
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        // Requests hold it beyond its handle: on the device they may hold it past their
        // completions (until their queue slots are reused), which must not keep it
        // registered now that nothing can post it again.
        if Arc::strong_count(&self.inner) > 1 {
            if let CtxImpl::Device(dev) = &self.inner.ctx.imp {
                dev.region_dropped(&self.inner);
            }
        }
    }
}

impl MemoryRegion {
    /// Its local key (what the device's work queue entries name it by).
    pub fn lkey(&self) -> u32 {
        self.inner.lkey
    }

    /// Its remote key: what a peer names it by in RDMA Writes and Reads (0 when it was
    /// registered without a remote right).
    pub fn rkey(&self) -> u32 {
        self.inner.rkey
    }

    /// Where a peer's RDMA Write or Read reaches byte `offset` of this region: give it to
    /// the peer (it goes in [`crate::SendWr::rdma_write`] and
    /// [`crate::SendWr::rdma_read`] there).
    pub fn remote(&self, offset: usize) -> crate::RemoteAddr {
        crate::RemoteAddr {
            addr: self.inner.addr() as u64 + offset as u64,
            rkey: self.inner.rkey,
        }
    }

    /// Its size in bytes.
    pub fn len(&self) -> usize {
        self.inner.len
    }

    /// Never true: empty buffers cannot be registered.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The bytes (see the type's documentation about outstanding requests).
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is a live allocation of len initialised bytes owned by this region;
        // the shared borrow of self keeps Rust code from writing it meanwhile.
        unsafe { std::slice::from_raw_parts(self.inner.ptr.as_ptr(), self.inner.len) }
    }

    /// The bytes, to fill (see the type's documentation about outstanding requests).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in as_slice; the exclusive borrow of self keeps other Rust references
        // to the bytes away for the slice's life.
        unsafe { std::slice::from_raw_parts_mut(self.inner.ptr.as_ptr(), self.inner.len) }
    }

    /// A scatter/gather entry for `len` bytes at `offset`. The range is checked when the
    /// work request is posted ([`Error::OutOfBounds`]).
    pub fn sge(&self, offset: usize, len: usize) -> Sge<'_> {
        Sge {
            mr: self,
            offset,
            len,
        }
    }

    /// A scatter/gather entry for the whole region.
    pub fn sge_all(&self) -> Sge<'_> {
        self.sge(0, self.len())
    }
}

impl Deref for MemoryRegion {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl DerefMut for MemoryRegion {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

impl std::fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("lkey", &self.inner.lkey)
            .field("len", &self.inner.len)
            .finish()
    }
}

/// `len` bytes at `offset` in a memory region: one piece of a work request's data.
#[derive(Clone, Copy, Debug)]
pub struct Sge<'a> {
    pub(crate) mr: &'a MemoryRegion,
    pub(crate) offset: usize,
    pub(crate) len: usize,
}

/// A checked scatter/gather entry, as providers use it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Seg {
    pub addr: *mut u8,
    pub len: usize,
    pub lkey: u32,
}

// SAFETY: a Seg names memory of a region kept alive by the `keep` list of the request that
// holds it; moving that description between threads is what a device does too.
unsafe impl Send for Seg {}

/// Most scatter/gather entries of a work request (the WQE's room).
const MAX_SGE: usize = qpip_abi::wqe::MAX_SGE as usize;

/// A work request's checked entries, held in place: posting allocates nothing.
#[derive(Clone, Copy)]
pub(crate) struct Segs {
    items: [Seg; MAX_SGE],
    len: usize,
}

impl Default for Segs {
    fn default() -> Segs {
        let none = Seg {
            addr: std::ptr::null_mut(),
            len: 0,
            lkey: 0,
        };
        Segs {
            items: [none; MAX_SGE],
            len: 0,
        }
    }
}

impl Deref for Segs {
    type Target = [Seg];
    fn deref(&self) -> &[Seg] {
        &self.items[..self.len]
    }
}

/// The regions a work request keeps alive until it completes (each once), held in place
/// like its entries.
#[derive(Default)]
pub(crate) struct Keep {
    regions: [Option<Arc<MrInner>>; MAX_SGE],
}

impl Keep {
    pub(crate) fn add(&mut self, mr: &Arc<MrInner>) {
        for slot in &mut self.regions {
            match slot {
                Some(k) if Arc::ptr_eq(k, mr) => return,
                Some(_) => {}
                None => {
                    *slot = Some(mr.clone());
                    return;
                }
            }
        }
        // Not reached: a request has at most MAX_SGE entries (checked by resolve), so at
        // most as many regions.
        unreachable!("more regions than scatter/gather entries");
    }

    /// Makes this hold exactly the regions of `sges` (checked entries), in place of what it
    /// held. When those are the same regions — a queue slot reused by a request from the
    /// same buffers, the usual case — no reference count is touched.
    #[inline]
    pub(crate) fn hold(&mut self, sges: &[Sge<'_>]) {
        // The most common request, one entry, checked in line; the rest in full.
        if let ([s], [Some(k), None, ..]) = (sges, &self.regions) {
            if Arc::ptr_eq(k, &s.mr.inner) {
                return;
            }
        }
        if !self.holds_exactly(sges) {
            let mut k = Keep::default();
            for s in sges {
                k.add(&s.mr.inner);
            }
            *self = k;
        }
    }

    /// Whether this holds the regions of `sges`, each once in their first-use order, and
    /// nothing else (what [`Keep::add`] of each would have built).
    fn holds_exactly(&self, sges: &[Sge<'_>]) -> bool {
        let mut n = 0;
        for s in sges {
            let mr = &s.mr.inner;
            let held = |k: &Option<Arc<MrInner>>| k.as_ref().is_some_and(|k| Arc::ptr_eq(k, mr));
            if self.regions[..n].iter().any(held) {
                continue;
            }
            if n == MAX_SGE || !held(&self.regions[n]) {
                return false;
            }
            n += 1;
        }
        self.regions[n..].iter().all(Option::is_none)
    }
}

/// The checked data of a work request and the regions it keeps alive.
#[derive(Default)]
pub(crate) struct Gather {
    pub segs: Segs,
    pub keep: Keep,
    pub total: usize,
}

/// Checks the number of entries of a request against `max_sge` (the device's, at most the
/// WQE's room).
pub(crate) fn check_sge_count(sges: &[Sge<'_>], max_sge: u32) -> Result<()> {
    let max_sge = max_sge.min(MAX_SGE as u32);
    if sges.len() > max_sge as usize {
        return Err(Error::TooManySges {
            given: sges.len(),
            max: max_sge,
        });
    }
    Ok(())
}

/// Checks one entry against `ctx` (its region is of this context, its range inside the
/// region and describable in a WQE): the entry as providers use it.
#[inline]
pub(crate) fn check_sge(ctx: &Arc<CtxInner>, s: &Sge<'_>) -> Result<Seg> {
    let mr = &s.mr.inner;
    if !Arc::ptr_eq(&mr.ctx, ctx) {
        return Err(Error::ForeignObject("the memory region"));
    }
    let end = s.offset.checked_add(s.len).filter(|&e| e <= mr.len);
    let Some(_) = end else {
        return Err(Error::OutOfBounds {
            lkey: mr.lkey,
            offset: s.offset,
            end: s.offset.saturating_add(s.len),
            size: mr.len,
        });
    };
    // A length beyond u32 cannot be described in a WQE.
    if s.len > u32::MAX as usize {
        return Err(Error::InvalidArgument(format!(
            "a scatter/gather entry of {} bytes (at most 4 GiB - 1)",
            s.len
        )));
    }
    Ok(Seg {
        // SAFETY: offset <= len was checked just above, so the pointer stays inside (or
        // one past the end of) the allocation.
        addr: unsafe { mr.addr().add(s.offset) },
        len: s.len,
        lkey: mr.lkey,
    })
}

impl Gather {
    /// Checks `sges` against `ctx` and `max_sge` and resolves them.
    pub(crate) fn resolve(ctx: &Arc<CtxInner>, sges: &[Sge<'_>], max_sge: u32) -> Result<Gather> {
        check_sge_count(sges, max_sge)?;
        let mut g = Gather::default();
        for s in sges {
            let seg = check_sge(ctx, s)?;
            g.segs.items[g.segs.len] = seg;
            g.segs.len += 1;
            g.total += s.len;
            g.keep.add(&s.mr.inner);
        }
        Ok(g)
    }
}
