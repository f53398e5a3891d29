//! A completion queue: its ring, its indices and its interrupt arming. The engine writes
//! CQEs at `tail`; the consumer releases them up to `head`, which the doorbell page
//! reports and which is trusted only as far as `tail` allows. Both change only through the
//! transitions below.

use vm_memory::GuestAddress;

use super::Home;
use crate::engine::memory::Ring;

#[derive(Debug)]
pub struct Cq {
    home: Home,
    ring: Ring,
    vector: u16,
    /// CQEs written (free-running).
    tail: u32,
    /// CQEs the consumer has released.
    head: u32,
    /// Whether the next CQE (or one written and not released) raises `vector`, and which.
    armed: Option<Arm>,
    /// `tail` just after the latest solicited CQE (one that fires a solicited-only arm).
    solicited_end: u32,
    /// The consumer's arm sequence last seen: a new value arms the CQ.
    arm_seen: u32,
    /// QPs and tripwires completing to this CQ (counted by `Objects`, which refuses to
    /// remove the CQ while any are left).
    pub(super) users: u32,
    /// Whether a completion is waiting for room (counted once per episode).
    stalled: bool,
}

impl Cq {
    /// An empty, unarmed CQ at `home`, raising `vector`.
    pub fn new(home: Home, ring: Ring, vector: u16) -> Cq {
        Cq {
            home,
            ring,
            vector,
            tail: 0,
            head: 0,
            armed: None,
            solicited_end: 0,
            arm_seen: 0,
            users: 0,
            stalled: false,
        }
    }

    /// Its context and doorbell slot.
    #[inline]
    pub fn home(&self) -> Home {
        self.home
    }

    /// Whether QPs or tripwires complete to it.
    #[inline]
    pub fn in_use(&self) -> bool {
        self.users > 0
    }

    /// Room for this many CQEs.
    #[inline]
    pub fn free(&self) -> u32 {
        self.ring.depth() - self.tail.wrapping_sub(self.head)
    }

    /// Where the next CQE goes, and the phase byte it carries. The caller made sure there
    /// is room.
    #[inline]
    pub fn next_entry(&self) -> (GuestAddress, u8) {
        debug_assert!(self.free() > 0);
        (
            self.ring.entry_addr(self.tail),
            qpip_abi::cqe::phase(self.tail, self.ring.depth()),
        )
    }

    /// The CQE at [`Cq::next_entry`] is written; `solicited`: it fires a solicited-only
    /// arm too ([`qpip_abi::doorbell::CQ_ARM_SOLICITED`]). Returns the vector to raise if
    /// the CQ was armed for it (it is disarmed: one interrupt per arm).
    #[inline]
    pub fn advance_tail(&mut self, solicited: bool) -> Option<u16> {
        self.tail = self.tail.wrapping_add(1);
        if solicited {
            self.solicited_end = self.tail;
        }
        match self.armed {
            Some(Arm::Solicited) if !solicited => None,
            _ => self.fire(),
        }
    }

    /// A completion found no room: the CQ is stalled until the consumer releases some.
    /// Returns whether it was not stalled yet (a new episode, counted once).
    #[inline]
    pub fn stall(&mut self) -> bool {
        !std::mem::replace(&mut self.stalled, true)
    }

    /// The consumer's index and arm sequence from the doorbell page (the arm read first).
    /// A head beyond what was written is refused (`head_ok` false) and the rest still
    /// applies; a new arm sequence arms the CQ, and an armed CQ holding unreleased CQEs
    /// fires at once.
    pub fn consumer_moved(&mut self, head: u32, arm: u32) -> ConsumerMoved {
        let mut moved = ConsumerMoved {
            head_ok: true,
            unstalled: false,
            raise: None,
        };
        let mut freed = false;
        if head != self.head {
            // The consumer cannot release more than has been written.
            if head.wrapping_sub(self.head) <= self.tail.wrapping_sub(self.head) {
                self.head = head;
                freed = true;
            } else {
                moved.head_ok = false;
            }
        }
        if arm != self.arm_seen {
            self.arm_seen = arm;
            self.armed = Some(if arm & qpip_abi::doorbell::CQ_ARM_SOLICITED != 0 {
                Arm::Solicited
            } else {
                Arm::Any
            });
        }
        let pending = self.tail.wrapping_sub(self.head);
        let solicited = self.solicited_end.wrapping_sub(self.head);
        let fires = match self.armed {
            Some(Arm::Solicited) => solicited != 0 && solicited <= pending,
            _ => pending != 0,
        };
        if fires {
            moved.raise = self.fire();
        }
        if freed && self.stalled {
            self.stalled = false;
            moved.unstalled = true;
        }
        moved
    }

    /// Disarms an armed CQ and returns its vector.
    #[inline]
    fn fire(&mut self) -> Option<u16> {
        self.armed.take().map(|_| self.vector)
    }
}

/// What an arm waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arm {
    /// Any CQE.
    Any,
    /// A solicited one: anything but a send-queue WR's successful completion.
    Solicited,
}

/// What the consumer's doorbell did to a CQ ([`Cq::consumer_moved`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumerMoved {
    /// False: the head lay beyond what was written, and was ignored.
    pub head_ok: bool,
    /// Room was made in a CQ that completions waited on: the QPs completing to it go on.
    pub unstalled: bool,
    /// The vector to raise: the CQ was armed and holds CQEs not released.
    pub raise: Option<u16>,
}
