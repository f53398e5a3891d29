//! Layout of a context's doorbell page: a 4 KiB page of guest RAM that the driver allocates,
//! zeroes and names in [`crate::admin::CreateCtxArgs`], and maps into the owning process
//! only. Guest stores land in it as in any memory (no trap, no exit); the engine polls it
//! through its DMA mapping of guest RAM, as it reads the rings. The kick register is the
//! one doorbell that traps, and since the function has no mmappable region, QEMU sends it
//! as a posted write: the vCPU does not wait for the device.
//!
//! # Who writes what
//!
//! * `change_count`, the QP doorbells and the CQ doorbells: the producer (the library, or
//!   whoever owns the context). The device never writes them, except that context creation
//!   zeroes the whole page and QP and CQ creation zero their slot.
//! * `engine_sleeping`: the device only.
//!
//! # Ringing a doorbell (producer side)
//!
//! 1. Write the work queue entries, then a release barrier (`smp_wmb`/`Release`).
//! 2. Store the new producer index in the QP's `sq_tail` or `rq_tail` (or, for a CQ, the
//!    consumer index and/or arm sequence).
//! 3. Increment `change_count` (wrapping). The engine compares it with the value it saw
//!    last to find pages with news without reading every slot.
//! 4. Full barrier (`smp_mb`/`SeqCst` fence), then read `engine_sleeping`. If it is non-zero,
//!    write the kick register ([`crate::regs::KICK_PAGE_OFFSET`] + [`crate::regs::KICK`]).
//!
//! Arming a CQ (its `arm_seq`) may skip step 4's kick: only an awake engine writes
//! completions, and an awake engine scans the doorbells before it takes work that completes
//! (admin commands aside, which have their own queue), so it sees the arm in time to raise
//! the interrupt for the completion it is about to write. The consumer polls once more after
//! arming for a completion written before the arm was seen.
//!
//! A UDP QP's `rq_tail` may skip the kick as well: receive WQEs of a UDP QP are used only
//! when a datagram arrives, a datagram is never held for a receive posted later (one that
//! finds none is dropped and counted), and whatever brings a datagram wakes a sleeping
//! engine before it is taken — a frame on the link, or a local send that rang (and kicked)
//! its own doorbell — and that pass scans the doorbells first. (A TCP QP's receives are
//! different: they open the window a peer may be waiting for, so they kick.)
//!
//! Moving a CQ's `head` may skip the kick too, unless the ring was full before the move
//! (the slot of index `old head + depth - 1` held a completion): the engine waits for a
//! CQ's head only when the ring is full (it never overwrites an unconsumed completion), an
//! awake engine reads the heads at every scan, and its last scan before sleeping sees every
//! head stored before then — so a sleeping engine can be waiting for room only in a ring
//! that the next head move finds full, and that move kicks. A consumer stores `head`
//! before it arms, and the engine reads `arm_seq` before `head`, so an arm never meets a
//! stale head.
//!
//! # Going to sleep (engine side)
//!
//! The engine polls while there is work and for a short while after. To sleep it stores 1 in
//! `engine_sleeping` of every active page, issues a full barrier, then scans all doorbells once
//! more; only if nothing changed does it block until a kick (or a timer). On waking it clears
//! `engine_sleeping` first. With a full barrier on both sides, either the engine's final scan
//! sees the producer's doorbell or the producer sees `engine_sleeping` and kicks: no wake-up is
//! lost (the eventidx idea of virtio).
//!
//! # Indices
//!
//! Producer indices are free-running 32-bit counters (they wrap at 2^32, not at the queue
//! depth); the slot of index `i` is `i % depth`. A producer index more than `depth` ahead of
//! the device's consumer index is a protocol error: the QP goes to the error state and its
//! outstanding work requests complete with [`crate::cqe::CQE_STATUS_FLUSHED`].

use core::sync::atomic::{fence, AtomicU32, Ordering};

/// Offset of the page's change counter (u32, producer-written).
pub const DB_CHANGE_COUNT: u32 = 0x000;
/// Offset of the engine's sleeping flag (u32, device-written; non-zero = asleep, kick me).
pub const DB_ENGINE_SLEEPING: u32 = 0x004;

/// Offset of the first QP doorbell slot. QP slot `s` is at `DB_QP_BASE + s * DB_QP_STRIDE`.
pub const DB_QP_BASE: u32 = 0x040;
/// Size of one QP doorbell slot: `sq_tail` (u32) then `rq_tail` (u32).
pub const DB_QP_STRIDE: u32 = 8;
/// Offset of `sq_tail` inside a QP slot: the send queue producer index.
pub const DB_QP_SQ_TAIL: u32 = 0;
/// Offset of `rq_tail` inside a QP slot: the receive queue producer index.
pub const DB_QP_RQ_TAIL: u32 = 4;
/// Number of QP slots in a page, and so the most QPs a context can have.
pub const DB_QP_SLOTS: u32 = 248;

/// Offset of the first CQ doorbell slot. CQ slot `s` is at `DB_CQ_BASE + s * DB_CQ_STRIDE`.
pub const DB_CQ_BASE: u32 = 0x800;
/// Size of one CQ doorbell slot: `cq_head` (u32) then `arm_seq` (u32).
pub const DB_CQ_STRIDE: u32 = 8;
/// Offset of `cq_head` inside a CQ slot: how many CQEs the consumer has consumed
/// (free-running). The device never overwrites an unconsumed CQE: when the ring is full it
/// stops completing to that CQ, and the QPs feeding it stall (it counts the event) until the
/// consumer makes room.
pub const DB_CQ_HEAD: u32 = 0;
/// Offset of `arm_seq` inside a CQ slot. To arm a CQ the consumer increments `arm_seq` (any
/// change arms it). The device then raises the CQ's MSI-X vector exactly once: as soon as
/// there is a CQE beyond `cq_head` (immediately, if there already is one). Further CQEs do not
/// interrupt until the CQ is armed again.
///
/// With [`CQ_ARM_SOLICITED`] set in the value written, only a *solicited* CQE raises it: a
/// receive completion, a completion with an error status, or a tripwire event — anything
/// but the successful completion of a send-queue WR (`ibv_req_notify_cq` with
/// `solicited_only`, in spirit: a socket's reader waits for bytes, not for the peer's
/// acknowledgements of what it sent). The sequence is then the other 31 bits: a consumer
/// counts in those and sets or clears the flag per arm.
pub const DB_CQ_ARM_SEQ: u32 = 4;
/// In a value written to `arm_seq`: this arm is for solicited CQEs only.
pub const CQ_ARM_SOLICITED: u32 = 0x8000_0000;
/// The sequence bits of `arm_seq`.
pub const CQ_ARM_SEQ_MASK: u32 = 0x7fff_ffff;
/// Number of CQ slots in a page, and so the most CQs a context can have.
pub const DB_CQ_SLOTS: u32 = 256;

/// Offset of QP slot `slot`'s `sq_tail` in the page.
pub const fn qp_sq_tail(slot: u32) -> u32 {
    DB_QP_BASE + slot * DB_QP_STRIDE + DB_QP_SQ_TAIL
}

/// Offset of QP slot `slot`'s `rq_tail` in the page.
pub const fn qp_rq_tail(slot: u32) -> u32 {
    DB_QP_BASE + slot * DB_QP_STRIDE + DB_QP_RQ_TAIL
}

/// Offset of CQ slot `slot`'s `cq_head` in the page.
pub const fn cq_head(slot: u32) -> u32 {
    DB_CQ_BASE + slot * DB_CQ_STRIDE + DB_CQ_HEAD
}

/// Offset of CQ slot `slot`'s `arm_seq` in the page.
pub const fn cq_arm_seq(slot: u32) -> u32 {
    DB_CQ_BASE + slot * DB_CQ_STRIDE + DB_CQ_ARM_SEQ
}

/// A context's doorbell page as its producer uses it: the producer side of the protocol
/// above, written once for the library, the tools and the tests. Every field is accessed
/// as an atomic, so the threads of one process may share a page without a lock.
#[derive(Clone, Copy)]
pub struct Producer<'a> {
    words: &'a [AtomicU32],
}

impl<'a> Producer<'a> {
    /// The page at `page`.
    ///
    /// # Safety
    ///
    /// `page` points to [`crate::pci::DOORBELL_PAGE_SIZE`] bytes, 4-byte aligned, that stay
    /// mapped for `'a` and that this process accesses only through atomics while they are
    /// (the device, another process, reads and writes them as the hardware's loads and
    /// stores).
    pub unsafe fn from_ptr(page: *mut u8) -> Producer<'a> {
        let n = crate::pci::DOORBELL_PAGE_SIZE as usize / 4;
        // SAFETY: the caller's promise; AtomicU32 has the size and alignment of u32.
        Producer {
            words: unsafe { core::slice::from_raw_parts(page.cast::<AtomicU32>(), n) },
        }
    }

    fn word(&self, off: u32) -> &AtomicU32 {
        assert!(off & 3 == 0, "doorbell offset {off:#x} is not a u32 field");
        &self.words[off as usize / 4]
    }

    /// Rings a doorbell: stores `value` at `off` (a producer index, a CQ head or arm
    /// sequence), after everything the caller wrote before (release), bumps the change
    /// counter, and — after a full barrier — reads the sleeping flag. Returns whether the
    /// engine said it sleeps: then the caller writes the kick register, unless the doorbell
    /// is one of those that need no kick (see above).
    ///
    /// The counter is bumped with one atomic read-modify-write (no increment lost between
    /// threads); sequentially consistent, it is also the full barrier step 4 asks for (on
    /// x86 a locked add drains the store buffer), so no separate fence follows it.
    pub fn ring(&self, off: u32, value: u32) -> bool {
        fence(Ordering::Release);
        self.word(off).store(value, Ordering::Release);
        self.word(DB_CHANGE_COUNT).fetch_add(1, Ordering::SeqCst);
        self.engine_sleeping()
    }

    /// Whether the engine said it sleeps (a doorbell rung now would have to kick).
    pub fn engine_sleeping(&self) -> bool {
        self.word(DB_ENGINE_SLEEPING).load(Ordering::SeqCst) != 0
    }

    /// The field at `off` as it is now.
    pub fn load(&self, off: u32) -> u32 {
        self.word(off).load(Ordering::SeqCst)
    }
}
