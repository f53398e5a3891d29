//! A QP's work queues as the library keeps them: where the next request goes, how many
//! requests have had their completions polled, and which memory regions the outstanding
//! ones keep alive.
//!
//! The poll of a completion does the least it can, since under TCG every lock, atomic
//! read-modify-write and page it touches is paid in guest time, most of all when the
//! caches are cold after a sleep: it counts the completion against its queue (a load and a
//! store, [`QpState::completed`]) and releases nothing. A request's regions are held by
//! its ring slot ([`WorkQueue::push`]) and let go when a later request takes that slot —
//! usually without touching a reference count at all, since an application that posts
//! from the same buffers finds them already held there.
//!
//! That would leave a region held past its last completion until its slot is used again,
//! which matters only once its handle is gone: dropping a [`crate::MemoryRegion`] that
//! requests still hold releases every completed request's holds in the context at once
//! ([`super::Ctx::region_dropped`]), and while a dropped region is still held by
//! outstanding requests, polls release completed requests as they take them, so the region
//! is deregistered as soon as its last request's completion is polled.

use std::ptr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use qpip_abi::cqe::{
    CQE_OP_RDMA_READ, CQE_OP_RDMA_WRITE, CQE_OP_RECV, CQE_OP_RECV_IMM, CQE_OP_SEND,
};
use qpip_abi::wqe::{Sge as WqeSge, Wqe, WQE_FLAG_INLINE, WQE_SGE_OFFSET, WQE_SIZE};

use super::sys::Mapping;
use crate::context::CtxInner;
use crate::error::{Error, Result};
use crate::mr::{check_sge, check_sge_count, Keep, Sge};

/// What the library knows of one QP, shared by the QP (posting), the context's table and
/// the CQs its queues complete to (polling).
pub(crate) struct QpState {
    pub(crate) udp: bool,
    /// Send requests whose completion was polled. Written only by the polls of the send
    /// CQ, which its lock serialises; read by posts (is the queue full?).
    sq_done: AtomicU32,
    /// Receive requests whose completion was polled; as `sq_done`, for the receive CQ.
    rq_done: AtomicU32,
    pub(crate) queues: Mutex<Queues>,
}

/// The producer side of a QP's two queues (posts take the lock).
pub(crate) struct Queues {
    pub(crate) sq: WorkQueue,
    pub(crate) rq: WorkQueue,
}

impl QpState {
    pub(crate) fn new(udp: bool, sq_depth: u32, rq_depth: u32) -> QpState {
        QpState {
            udp,
            sq_done: AtomicU32::new(0),
            rq_done: AtomicU32::new(0),
            queues: Mutex::new(Queues {
                sq: WorkQueue::new("send", sq_depth),
                rq: WorkQueue::new("receive", rq_depth),
            }),
        }
    }

    /// The completion count of the queue whose requests complete with `opcode`, if it is a
    /// work request's completion (a tripwire's event is not).
    fn done_of(&self, opcode: u8) -> Option<&AtomicU32> {
        match opcode {
            CQE_OP_SEND | CQE_OP_RDMA_WRITE | CQE_OP_RDMA_READ => Some(&self.sq_done),
            CQE_OP_RECV | CQE_OP_RECV_IMM => Some(&self.rq_done),
            _ => None,
        }
    }

    /// Counts a polled completion of `opcode`: its request's slot may be used again.
    /// Called by the poll of the CQ the queue completes to, under that CQ's lock.
    #[inline]
    pub(crate) fn completed(&self, opcode: u8) {
        if let Some(done) = self.done_of(opcode) {
            // One writer (see the fields), so a load and a store rather than a locked
            // read-modify-write; release: a post that sees the count may reuse the slot.
            done.store(
                done.load(Ordering::Relaxed).wrapping_add(1),
                Ordering::Release,
            );
        }
    }

    /// Posts on the send queue see this many completions.
    pub(crate) fn sq_done(&self) -> u32 {
        self.sq_done.load(Ordering::Acquire)
    }

    /// Posts on the receive queue see this many completions.
    pub(crate) fn rq_done(&self) -> u32 {
        self.rq_done.load(Ordering::Acquire)
    }

    /// Lets go of the regions of every request whose completion was polled.
    pub(crate) fn release_completed(&self) {
        let mut q = self.queues.lock().unwrap();
        // Read under the lock: a post may have moved `released` up to the counts it saw.
        let (sq, rq) = (self.sq_done(), self.rq_done());
        q.sq.release(sq);
        q.rq.release(rq);
    }
}

/// One work queue of a QP: its producer index and, per ring slot, the regions the request
/// last posted there keeps alive.
pub(crate) struct WorkQueue {
    name: &'static str,
    tail: u32,
    depth: u32,
    holds: Box<[Keep]>,
    /// Requests before this index hold nothing any more (released, or their slots taken
    /// by later requests): at most `depth` behind `tail`, never ahead of the completions.
    released: u32,
}

/// What follows a WQE's header: its scatter/gather entries or its inline bytes.
pub(crate) enum WqeBody<'a> {
    Sges(&'a [Sge<'a>]),
    Inline(&'a [u8]),
}

impl WorkQueue {
    fn new(name: &'static str, depth: u32) -> WorkQueue {
        WorkQueue {
            name,
            tail: 0,
            depth,
            // Allocated whole now, so posting never allocates.
            holds: (0..depth).map(|_| Keep::default()).collect(),
            released: 0,
        }
    }

    /// Writes the request's WQE into the next slot of `ring` — its entries checked against
    /// `ctx` and written straight into the slot, or its inline bytes, then `h`, its header
    /// — and has the slot hold its regions; returns the new producer index for the
    /// doorbell. `done` is the queue's count of polled completions. Fails with nothing
    /// posted when the queue is full or an entry is bad (the slot is not the device's
    /// until the doorbell). Nothing is built twice or copied on the way: under TCG every
    /// instruction of this path is a guest's.
    pub(crate) fn push(
        &mut self,
        qp: u32,
        ring: &Mapping,
        ctx: &Arc<CtxInner>,
        mut h: Wqe,
        body: WqeBody<'_>,
        done: u32,
    ) -> Result<u32> {
        // Full while `depth` requests are not completed: the slot of the oldest of them is
        // the next one, and its regions must stay held.
        if self.tail.wrapping_sub(done) >= self.depth {
            return Err(Error::QueueFull {
                qp,
                queue: self.name,
                depth: self.depth,
            });
        }
        // Depths are powers of two (the driver refuses others): a mask, not a division.
        let slot = (self.tail & (self.depth - 1)) as usize;
        let at = slot * WQE_SIZE as usize;
        let dst = ring.at(at);
        // The last byte of the slot must be inside the ring too.
        let _ = ring.at(at + WQE_SIZE as usize - 1);
        let o = WQE_SGE_OFFSET as usize;
        let sges: &[Sge<'_>] = match body {
            WqeBody::Sges(sges) => {
                check_sge_count(sges, ctx.limits.max_sge)?;
                for (i, s) in sges.iter().enumerate() {
                    let seg = check_sge(ctx, s)?;
                    let e = WqeSge {
                        addr: seg.addr as u64,
                        length: seg.len as u32,
                        lkey: seg.lkey,
                    };
                    // SAFETY: entry i (< MAX_SGE, checked above) of a whole WQE slot inside
                    // the mapped ring (both ends checked), 128-byte aligned; the device reads
                    // the slot only after the doorbell that follows (release in Ctx::ring).
                    unsafe {
                        let at = o + i * std::mem::size_of::<WqeSge>();
                        ptr::write(dst.add(at).cast::<WqeSge>(), e);
                    }
                }
                h.num_sge = sges.len() as u8;
                sges
            }
            WqeBody::Inline(data) => {
                // Checked by the caller against the device's limit, at most the slot's room.
                h.flags |= WQE_FLAG_INLINE;
                h.inline_len = data.len() as u32;
                // SAFETY: as above; MAX_INLINE bytes fit after the header.
                unsafe { ptr::copy_nonoverlapping(data.as_ptr(), dst.add(o), data.len()) };
                &[]
            }
        };
        // SAFETY: the header at the start of the same slot.
        unsafe { ptr::write(dst.cast::<Wqe>(), h) };
        // The slot's previous request completed (the check above), so what it held may go.
        self.holds[slot].hold(sges);
        self.tail = self.tail.wrapping_add(1);
        if self.tail.wrapping_sub(self.released) > self.depth {
            // That request's slot is now this one's.
            self.released = self.tail.wrapping_sub(self.depth);
        }
        Ok(self.tail)
    }

    /// Lets go of the regions held for requests before `done`, the queue's count of
    /// polled completions.
    fn release(&mut self, done: u32) {
        // `released` is at most `depth` behind the tail and never past `done` (read under
        // the same lock as the posts that move it), and every request between them holds
        // its own slot: it completed, its slot not yet reused.
        let n = done.wrapping_sub(self.released);
        debug_assert!(
            n <= self.depth,
            "{n} requests to release, depth {}",
            self.depth
        );
        for _ in 0..n.min(self.depth) {
            let slot = (self.released & (self.depth - 1)) as usize;
            self.holds[slot] = Keep::default();
            self.released = self.released.wrapping_add(1);
        }
    }
}
