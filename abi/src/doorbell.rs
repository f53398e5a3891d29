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
pub const DB_CQ_ARM_SEQ: u32 = 4;
/// Number of CQ slots in a page, and so the most CQs a context can have.
pub const DB_CQ_SLOTS: u32 = 256;
