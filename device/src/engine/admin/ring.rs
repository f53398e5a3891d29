//! The admin queue's two rings as `qpip_abi::admin` lays them out: commands fetched in
//! order from the driver's submission ring, completions written into the completion ring
//! with the phase byte last. Only indices, room and phase live here; what a command means
//! is the admin queue's ([`super`]).

use std::mem::{offset_of, size_of};
use std::sync::atomic::Ordering;

use log::{debug, warn};
use qpip_abi::admin::{AdminCmd, AdminCqe};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};
use zerocopy::{FromBytes, IntoBytes};

use crate::engine::memory::Ring;

const CMD_SIZE: usize = size_of::<AdminCmd>();
const CQE_SIZE: usize = size_of::<AdminCqe>();
/// The completion's phase byte: written last, after the rest of the entry.
const PHASE_AT: usize = offset_of!(AdminCqe, phase);

/// The rings as the driver set them up (none while the queue is disabled), and the
/// free-running indices of both.
#[derive(Debug, Default)]
pub struct AdminRing {
    rings: Option<(Ring, Ring)>,
    /// Commands fetched.
    sq_head: u32,
    /// The driver's producer index.
    sq_tail: u32,
    /// Completions written.
    cq_tail: u32,
    /// Completions the driver consumed.
    cq_head: u32,
}

/// What [`AdminRing::fetch`] found in the next slot.
#[derive(Debug)]
pub enum Fetched {
    Command(AdminCmd),
    /// The slot is not in guest RAM (the driver moved its ring away): skipped.
    Unreadable(u64),
}

impl AdminRing {
    /// Rings of `depth` entries at guest-physical `sq` and `cq` (the control thread has
    /// checked the depth and that both lie in guest RAM).
    pub fn new(sq: u64, cq: u64, depth: u32) -> AdminRing {
        debug!("admin queue enabled: sq {sq:#x} cq {cq:#x} depth {depth}");
        AdminRing {
            rings: Some((
                Ring::contiguous(sq, CMD_SIZE as u32, depth),
                Ring::contiguous(cq, CQE_SIZE as u32, depth),
            )),
            ..Default::default()
        }
    }

    /// The driver's new producer index (`REG_ADMIN_SQ_TAIL`).
    pub fn set_sq_tail(&mut self, tail: u32) {
        self.sq_tail = tail;
    }

    /// The driver's new consumer index (`REG_ADMIN_CQ_HEAD`).
    pub fn set_cq_head(&mut self, head: u32) {
        self.cq_head = head;
    }

    /// Whether the completion ring has a free slot.
    pub fn room(&self) -> bool {
        match &self.rings {
            Some((_, cq)) => self.cq_tail.wrapping_sub(self.cq_head) < cq.depth(),
            None => false,
        }
    }

    /// Fetches the next command, if any. A producer index more than the depth ahead is a
    /// broken driver: it is ignored (the queue waits for a sane one), never read beyond.
    pub fn fetch(&mut self, mem: &GuestMemoryMmap) -> Option<Fetched> {
        let (sq, _) = self.rings.as_ref()?;
        if self.sq_head == self.sq_tail {
            return None;
        }
        if self.sq_tail.wrapping_sub(self.sq_head) > sq.depth() {
            warn!(
                "admin doorbell {} is more than the depth ahead of {}; ignored",
                self.sq_tail, self.sq_head
            );
            self.sq_tail = self.sq_head;
            return None;
        }
        let addr = sq.entry_addr(self.sq_head);
        self.sq_head = self.sq_head.wrapping_add(1);
        let mut raw = [0u8; CMD_SIZE];
        if mem.read_slice(&mut raw, addr).is_err() {
            return Some(Fetched::Unreadable(addr.0));
        }
        Some(Fetched::Command(
            AdminCmd::read_from_bytes(&raw[..]).expect("sized"),
        ))
    }

    /// Writes a completion, its phase byte last. False if there is no room or no queue.
    pub fn write(&mut self, mem: &GuestMemoryMmap, mut cqe: AdminCqe) -> bool {
        if !self.room() {
            return false;
        }
        let Some((_, ring)) = &self.rings else {
            return false;
        };
        let addr = ring.entry_addr(self.cq_tail);
        cqe.phase = qpip_abi::cqe::phase(self.cq_tail, ring.depth());
        let bytes = cqe.as_bytes();
        let ok = mem.write_slice(&bytes[..PHASE_AT], addr).is_ok() && {
            std::sync::atomic::fence(Ordering::Release);
            mem.store(
                cqe.phase,
                GuestAddress(addr.0 + PHASE_AT as u64),
                Ordering::Release,
            )
            .is_ok()
        };
        if !ok {
            warn!(
                "admin completion ring at {:#x} is no longer in guest RAM",
                addr.0
            );
        }
        self.cq_tail = self.cq_tail.wrapping_add(1);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zerocopy::FromZeros;

    const SQ: u64 = 0x1000;
    const CQ: u64 = 0x2000;

    fn ram() -> GuestMemoryMmap {
        GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x4000)]).unwrap()
    }

    fn cmd(id: u32) -> AdminCmd {
        let mut c = AdminCmd::new_zeroed();
        c.cmd_id = id;
        c
    }

    #[test]
    fn commands_come_in_order_and_only_up_to_the_producer_index() {
        let mem = ram();
        let mut r = AdminRing::new(SQ, CQ, 4);
        for i in 0..4u32 {
            mem.write_slice(
                cmd(10 + i).as_bytes(),
                GuestAddress(SQ + i as u64 * CMD_SIZE as u64),
            )
            .unwrap();
        }
        assert!(r.fetch(&mem).is_none(), "nothing posted yet");
        r.set_sq_tail(3);
        let ids: Vec<u32> = std::iter::from_fn(|| match r.fetch(&mem)? {
            Fetched::Command(c) => Some(c.cmd_id),
            Fetched::Unreadable(_) => None,
        })
        .collect();
        assert_eq!(ids, [10, 11, 12]);
        assert!(r.fetch(&mem).is_none());
    }

    #[test]
    fn a_producer_index_beyond_the_depth_is_ignored() {
        let mem = ram();
        let mut r = AdminRing::new(SQ, CQ, 4);
        r.set_sq_tail(5);
        assert!(r.fetch(&mem).is_none());
        assert!(r.fetch(&mem).is_none(), "the queue waits for a sane index");
        r.set_sq_tail(1);
        assert!(matches!(r.fetch(&mem), Some(Fetched::Command(_))));
    }

    #[test]
    fn completions_carry_the_abi_phase_and_stop_when_the_ring_is_full() {
        let mem = ram();
        let mut r = AdminRing::new(SQ, CQ, 2);
        let phase_of = |slot: u64| {
            let mut c = AdminCqe::new_zeroed();
            mem.read_slice(c.as_mut_bytes(), GuestAddress(CQ + slot * CQE_SIZE as u64))
                .unwrap();
            c.phase
        };
        assert!(r.write(&mem, AdminCqe::new_zeroed()));
        assert!(r.write(&mem, AdminCqe::new_zeroed()));
        assert_eq!((phase_of(0), phase_of(1)), (1, 1), "first pass: 1");
        assert!(
            !r.write(&mem, AdminCqe::new_zeroed()),
            "full until consumed"
        );
        r.set_cq_head(1);
        assert!(r.write(&mem, AdminCqe::new_zeroed()));
        assert_eq!(phase_of(0), 0, "second pass: 0");
        assert_eq!(phase_of(0), qpip_abi::cqe::phase(2, 2));
    }

    #[test]
    fn a_disabled_queue_fetches_and_writes_nothing() {
        let mem = ram();
        let mut r = AdminRing::default();
        r.set_sq_tail(1);
        assert!(r.fetch(&mem).is_none());
        assert!(!r.write(&mem, AdminCqe::new_zeroed()));
    }
}
