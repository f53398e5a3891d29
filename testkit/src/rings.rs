//! The ABI's ring arithmetic as a driver does it, written once for the fake guest, the engine
//! bench and the fuzz harness: how many pages a ring takes, where entry `n` of a ring on a page
//! list lives, the work queues' and completion queues' indices, and the admin queue's producer
//! and consumer indices with the phase a new completion carries.

use qpip_abi::admin::{AdminCmd, AdminCqe, CreateCqArgs, CreateQpArgs};
use qpip_abi::cqe::{phase, Cqe, CQE_SIZE};
use qpip_abi::wqe::WQE_SIZE;

use crate::{Cq, Qp, Ram, PAGE};

/// Pages a ring of `depth` entries of `entry` bytes takes.
pub fn ring_pages(depth: u32, entry: u32) -> u64 {
    (depth as u64 * entry as u64).div_ceil(PAGE)
}

/// The page list of `n` pages allocated in one piece from `first`.
pub fn contiguous(first: u64, n: u64) -> Vec<u64> {
    (0..n).map(|i| first + i * PAGE).collect()
}

/// Guest-physical address of entry `idx` (free-running) of a ring of `depth` entries of
/// `entry` bytes laid on `pages`.
pub fn ring_slot(pages: &[u64], entry: u32, idx: u32, depth: u32) -> u64 {
    let off = (idx % depth) as u64 * entry as u64;
    pages[(off / PAGE) as usize] + off % PAGE
}

impl Cq {
    /// The CQ a successful `CREATE_CQ` with `a` made in `ctx`, on the ring `pages` that
    /// `a` lists, with the id and doorbell slot the completion gave.
    pub fn created(ctx: u32, a: &CreateCqArgs, pages: Vec<u64>, (id, slot): (u32, u32)) -> Cq {
        Cq {
            ctx,
            id,
            slot,
            depth: a.depth,
            vector: a.vector,
            pages,
            head: 0,
            arm_seq: 0,
        }
    }

    /// Guest-physical address of CQE `idx` (free-running).
    pub fn slot_gpa(&self, idx: u32) -> u64 {
        ring_slot(&self.pages, CQE_SIZE, idx, self.depth)
    }

    /// Guest-physical address of CQE `idx`'s `owner` byte, whose bit 0 is its phase.
    pub fn owner_gpa(&self, idx: u32) -> u64 {
        self.slot_gpa(idx) + std::mem::offset_of!(Cqe, owner) as u64
    }
}

impl Qp {
    /// The QP a successful `CREATE_QP` with `a` made in `ctx`, on the rings (send, receive)
    /// that `a` lists, with the id and doorbell slot the completion gave.
    pub fn created(
        ctx: u32,
        a: &CreateQpArgs,
        (sq_pages, rq_pages): (Vec<u64>, Vec<u64>),
        (id, slot): (u32, u32),
    ) -> Qp {
        Qp {
            ctx,
            id,
            slot,
            sq_pages,
            rq_pages,
            sq_depth: a.sq_depth,
            rq_depth: a.rq_depth,
            sq_tail: 0,
            rq_tail: 0,
            send_cq: a.send_cq,
            recv_cq: a.recv_cq,
        }
    }

    /// The send queue slot the next WQE goes to; advances `sq_tail` past it (the caller
    /// writes the WQE there, then rings `sq_tail`).
    pub fn push_sq(&mut self) -> u64 {
        let at = ring_slot(&self.sq_pages, WQE_SIZE, self.sq_tail, self.sq_depth);
        self.sq_tail = self.sq_tail.wrapping_add(1);
        at
    }

    /// As [`Qp::push_sq`], for the receive queue.
    pub fn push_rq(&mut self) -> u64 {
        let at = ring_slot(&self.rq_pages, WQE_SIZE, self.rq_tail, self.rq_depth);
        self.rq_tail = self.rq_tail.wrapping_add(1);
        at
    }
}

impl Ram {
    /// Whether CQE `idx` (free-running) of `cq` has been written in its current pass.
    pub fn cqe_ready(&self, cq: &Cq, idx: u32) -> bool {
        use std::sync::atomic::Ordering;
        self.atomic_u8(cq.owner_gpa(idx)).load(Ordering::Acquire) & 1 == phase(idx, cq.depth)
    }

    /// Takes the CQE at `cq.head` if the device has written it and advances the head,
    /// without publishing it: the caller rings `cq_head` when it chooses to.
    pub fn take_cqe(&self, cq: &mut Cq) -> Option<Cqe> {
        if !self.cqe_ready(cq, cq.head) {
            return None;
        }
        let c = self.read_obj(cq.slot_gpa(cq.head));
        cq.head = cq.head.wrapping_add(1);
        Some(c)
    }
}

/// The driver's side of the admin queue: the rings' addresses and depth, and the free-running
/// indices it writes to REG_ADMIN_SQ_TAIL and REG_ADMIN_CQ_HEAD.
#[derive(Clone, Debug)]
pub struct AdminRing {
    pub sq: u64,
    pub cq: u64,
    pub depth: u32,
    /// Commands submitted.
    pub tail: u32,
    /// Completions consumed.
    pub head: u32,
}

impl AdminRing {
    pub fn new(sq: u64, cq: u64, depth: u32) -> AdminRing {
        AdminRing {
            sq,
            cq,
            depth,
            tail: 0,
            head: 0,
        }
    }

    /// Bytes of the completion ring.
    pub fn cq_bytes(&self) -> u64 {
        self.depth as u64 * std::mem::size_of::<AdminCqe>() as u64
    }

    /// The slot the next command goes to; advances `tail` past it (the caller writes the
    /// command there, then publishes `tail`).
    pub fn push(&mut self) -> u64 {
        let at = self.sq + (self.tail % self.depth) as u64 * std::mem::size_of::<AdminCmd>() as u64;
        self.tail = self.tail.wrapping_add(1);
        at
    }

    /// Where the next completion will be written, and the phase that marks it written.
    pub fn next_completion(&self) -> (u64, u8) {
        let at = self.cq + (self.head % self.depth) as u64 * std::mem::size_of::<AdminCqe>() as u64;
        (at, phase(self.head, self.depth))
    }

    /// Guest-physical address of the next completion's `phase` byte, and the phase that
    /// marks it written.
    pub fn next_phase(&self) -> (u64, u8) {
        let (at, phase) = self.next_completion();
        (at + std::mem::offset_of!(AdminCqe, phase) as u64, phase)
    }

    /// The next completion, if the device has written it, advancing `head` past it (the
    /// caller publishes `head`).
    pub fn take(&mut self, ram: &Ram) -> Option<AdminCqe> {
        use std::sync::atomic::Ordering;
        let (phase_at, phase) = self.next_phase();
        if ram.atomic_u8(phase_at).load(Ordering::Acquire) & 1 != phase {
            return None;
        }
        let c = ram.read_obj(self.next_completion().0);
        self.head = self.head.wrapping_add(1);
        Some(c)
    }
}
