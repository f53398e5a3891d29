//! A queue pair: its rings, CQs, indices and state, whatever its transport. The indices and
//! the error state change only through the transitions below; what a transport adds is its
//! [`QpKind`], which its own unit owns (`super::super::tcp` for [`QpKind::Tcp`]).

use std::net::Ipv6Addr;

use vm_memory::GuestAddress;

use super::Home;
use crate::engine::memory::Ring;
use crate::engine::ports::Proto;
use crate::engine::tcp::TcpQp;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpState {
    /// Working normally.
    Ready,
    /// A protocol error (bad doorbell): every outstanding and future WR is flushed.
    Error,
}

/// What a QP's transport holds beyond the rings.
pub enum QpKind {
    /// Datagrams: nothing beyond the rings (each WR is one datagram).
    Udp,
    /// A byte stream: its connection, framing and the WRs it has taken
    /// ([`crate::engine::tcp::TcpQp`]).
    Tcp(Box<TcpQp>),
    /// The function's raw Ethernet queue (`QP_TYPE_RAW_ETH`): frames, nothing beyond the
    /// rings (`crate::engine::raw` keeps which QP it is).
    RawEth,
}

/// A producer index the doorbell page gave that lies beyond the ring: more WRs than the
/// ring holds past what the engine consumed (a broken or hostile producer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BeyondRing;

/// A queue pair.
///
/// Its rings' indices are free-running: `head` counts WQEs the engine consumed, `tail` the
/// producer's index last read from the doorbell page, never more than a ring's depth ahead
/// of `head` ([`Qp::producer_moved`]). A WQE taken ([`Qp::take_slot`]) is owed a
/// completion and keeps its ring slot until that completion is written
/// ([`Qp::completed`]); the engine takes no more than a ring's depth, so what a producer
/// that never polls its CQ can make the device hold is bounded by the rings it gave.
pub struct Qp {
    home: Home,
    send_cq: u32,
    recv_cq: u32,
    sq: Ring,
    rq: Ring,
    sq_head: u32,
    sq_tail: u32,
    rq_head: u32,
    rq_tail: u32,
    /// WRs taken from the send (`[0]`) and receive (`[1]`) rings whose completions are not
    /// written yet (held by the transport, or waiting for room in a full CQ).
    owed: [u32; 2],
    state: QpState,
    /// The error the next send WR completed in the error state takes instead of FLUSHED
    /// (status, detail): a peer's Terminate that came when no WR was left to take it, so
    /// the first WR the guest posts after it learns why the QP failed.
    unclaimed_send_error: Option<(u8, u32)>,
    /// Its address and port, once bound (the port is held in `Objects`' port table).
    pub(super) bound: Option<(Ipv6Addr, u16)>,
    /// UDP: bound with BIND_FLAG_SHARE_PORT (other sharing QPs of its context may join).
    pub(super) shares_port: bool,
    /// UDP: its connected peer (QP_OPT_UDP_PEER), which steers that peer's datagrams here.
    pub(super) udp_peer: Option<(Ipv6Addr, u16)>,
    /// Whether the QP is in `Objects`' busy queue (kept by `Objects::mark_busy` and
    /// `Objects::pop_busy`).
    pub(super) queued: bool,
    kind: QpKind,
}

impl Qp {
    /// A ready QP at `home`, at index 0 of both rings, unbound. It takes its slot and its
    /// CQs when it enters the tables (`Objects::insert_qp`).
    pub fn new(home: Home, (send_cq, recv_cq): (u32, u32), sq: Ring, rq: Ring, kind: QpKind) -> Qp {
        Qp {
            home,
            send_cq,
            recv_cq,
            sq,
            rq,
            sq_head: 0,
            sq_tail: 0,
            rq_head: 0,
            rq_tail: 0,
            owed: [0; 2],
            state: QpState::Ready,
            unclaimed_send_error: None,
            bound: None,
            shares_port: false,
            udp_peer: None,
            queued: false,
            kind,
        }
    }

    /// Its context and doorbell slot.
    #[inline]
    pub fn home(&self) -> Home {
        self.home
    }

    #[inline]
    pub fn send_cq(&self) -> u32 {
        self.send_cq
    }

    #[inline]
    pub fn recv_cq(&self) -> u32 {
        self.recv_cq
    }

    /// The CQ of its send (`sq`) or receive ring.
    #[inline]
    pub fn cq(&self, sq: bool) -> u32 {
        if sq {
            self.send_cq
        } else {
            self.recv_cq
        }
    }

    #[inline]
    pub fn state(&self) -> QpState {
        self.state
    }

    #[inline]
    pub fn is_ready(&self) -> bool {
        self.state == QpState::Ready
    }

    /// Its address and port, once bound.
    #[inline]
    pub fn bound(&self) -> Option<(Ipv6Addr, u16)> {
        self.bound
    }

    /// UDP: its connected peer, if the driver named one.
    #[inline]
    pub fn udp_peer(&self) -> Option<(Ipv6Addr, u16)> {
        self.udp_peer
    }

    /// Whether WQEs wait in its send (`sq`) or receive ring, posted and not yet taken.
    #[inline]
    pub fn posted(&self, sq: bool) -> bool {
        if sq {
            self.sq_head != self.sq_tail
        } else {
            self.rq_head != self.rq_tail
        }
    }

    /// Where the next WQE of its send ring is (whether one is posted or not).
    #[inline]
    pub fn next_send_addr(&self) -> GuestAddress {
        self.sq.entry_addr(self.sq_head)
    }

    /// Whether the send (`sq`) or receive ring's depth of WRs is taken and not completed:
    /// nothing more is taken from it until a completion is written.
    #[inline]
    pub fn ring_held(&self, sq: bool) -> bool {
        if sq {
            self.owed[0] >= self.sq.depth()
        } else {
            self.owed[1] >= self.rq.depth()
        }
    }

    /// Receive WQEs posted and not yet taken.
    #[inline]
    pub fn recv_posted(&self) -> u32 {
        self.rq_tail.wrapping_sub(self.rq_head)
    }

    /// Where the receive WQE `ahead` places after the next one to be taken is (to read
    /// ahead without taking: only below [`Qp::recv_posted`]).
    #[inline]
    pub fn recv_entry_addr(&self, ahead: u32) -> GuestAddress {
        self.rq.entry_addr(self.rq_head.wrapping_add(ahead))
    }

    /// Takes the next WQE slot of its send (`sq`) or receive ring: the WR is owed a
    /// completion from now on and keeps the slot until [`Qp::completed`]. Returns where
    /// the WQE is; None, taking nothing, while the ring's depth of WRs waits for
    /// completions. The caller checked that a WQE is posted.
    #[inline]
    pub fn take_slot(&mut self, sq: bool) -> Option<GuestAddress> {
        if self.ring_held(sq) {
            return None;
        }
        self.owed[usize::from(!sq)] += 1;
        let (ring, head) = if sq {
            (&self.sq, &mut self.sq_head)
        } else {
            (&self.rq, &mut self.rq_head)
        };
        let addr = ring.entry_addr(*head);
        *head = head.wrapping_add(1);
        Some(addr)
    }

    /// The completion of a WR taken from its send (`sq`) or receive ring was written: the
    /// WR gives its slot back. Returns whether the ring was held until then (it gives
    /// more again).
    #[inline]
    pub fn completed(&mut self, sq: bool) -> bool {
        let held = self.ring_held(sq);
        let owed = &mut self.owed[usize::from(!sq)];
        *owed = owed.saturating_sub(1);
        held
    }

    /// The producer index of its send (`sq`) or receive ring the doorbell page shows.
    /// Ok(whether it moved); [`BeyondRing`], taking nothing, if it is more than the
    /// ring's depth ahead of what was consumed.
    #[inline]
    pub fn producer_moved(&mut self, sq: bool, tail: u32) -> Result<bool, BeyondRing> {
        let (ring, head, old) = if sq {
            (&self.sq, self.sq_head, &mut self.sq_tail)
        } else {
            (&self.rq, self.rq_head, &mut self.rq_tail)
        };
        if tail == *old {
            return Ok(false);
        }
        if tail.wrapping_sub(head) > ring.depth() {
            return Err(BeyondRing);
        }
        *old = tail;
        Ok(true)
    }

    /// Moves the QP to the error state, for good: its WRs are flushed from now on.
    /// Returns whether it was ready until then.
    #[inline]
    pub fn fail(&mut self) -> bool {
        let was_ready = self.state == QpState::Ready;
        self.state = QpState::Error;
        was_ready
    }

    /// Keeps a peer's error (status, detail) for the next send WR completed in the error
    /// state, when no WR was left to take it.
    pub fn keep_unclaimed_send_error(&mut self, status: u8, detail: u32) {
        self.unclaimed_send_error = Some((status, detail));
    }

    /// The error kept for the next send WR completed in the error state, taken by it.
    pub fn take_unclaimed_send_error(&mut self) -> Option<(u8, u32)> {
        self.unclaimed_send_error.take()
    }

    #[inline]
    pub fn kind(&self) -> &QpKind {
        &self.kind
    }

    #[inline]
    pub fn is_tcp(&self) -> bool {
        matches!(self.kind, QpKind::Tcp(_))
    }

    /// Whether it is the raw Ethernet QP.
    #[inline]
    pub fn is_raw(&self) -> bool {
        matches!(self.kind, QpKind::RawEth)
    }

    /// Whose ports it binds (a raw QP binds none: BIND refuses it).
    pub fn proto(&self) -> Proto {
        match self.kind {
            QpKind::Tcp(_) => Proto::Tcp,
            QpKind::Udp | QpKind::RawEth => Proto::Udp,
        }
    }

    /// Whether CLOSE may be asked of it: a ready TCP QP, or an iWARP QP in the error state
    /// (after a Terminate its connection is closing, and the CLOSE completes once the
    /// Terminate and the FIN are acknowledged, so that an application that waits for it
    /// before destroying the QP never resets a Terminate away).
    pub fn may_close(&self) -> bool {
        match self.state {
            QpState::Ready => self.is_tcp(),
            QpState::Error => self.tcp().is_some_and(|t| t.is_iwarp()),
        }
    }

    /// Its TCP side (None: not a TCP QP).
    #[inline]
    pub fn tcp(&self) -> Option<&TcpQp> {
        match &self.kind {
            QpKind::Tcp(t) => Some(t),
            QpKind::Udp | QpKind::RawEth => None,
        }
    }

    /// Its TCP side, which the TCP unit changes as it will.
    #[inline]
    pub fn tcp_mut(&mut self) -> Option<&mut TcpQp> {
        match &mut self.kind {
            QpKind::Tcp(t) => Some(t),
            QpKind::Udp | QpKind::RawEth => None,
        }
    }
}
