//! The objects a driver creates through the admin queue, and the tables that hold them.
//! Every object records its context; lookups that name a context refuse objects of any
//! other, so a process can never reach another process's objects through a handle.

use std::collections::{HashMap, VecDeque};
use std::net::Ipv6Addr;

use super::memory::{MemoryRegion, Ring};
use super::tcp::{AcceptQueue, TcpQp};

/// A context: one process's share of the device, with its own doorbell page.
#[derive(Debug)]
pub struct Context {
    /// The context's doorbell page, in guest RAM.
    pub doorbell: super::doorbell_page::DoorbellPage,
    /// The last `change_count` the engine saw in the context's doorbell page.
    pub seen_change_count: u32,
    /// QP id per doorbell slot.
    pub qp_slots: Vec<Option<u32>>,
    /// CQ id per doorbell slot.
    pub cq_slots: Vec<Option<u32>>,
}

#[derive(Debug)]
pub struct Cq {
    pub ctx: u32,
    pub slot: u32,
    pub ring: Ring,
    pub vector: u16,
    /// CQEs written (free-running).
    pub tail: u32,
    /// CQEs the consumer has released (from the doorbell page; trusted only as far as
    /// `tail` allows).
    pub head: u32,
    pub armed: bool,
    pub arm_seen: u32,
    /// QPs completing to this CQ.
    pub users: u32,
    /// Whether a completion is waiting for room (counted once per episode).
    pub stalled: bool,
}

impl Cq {
    pub fn free(&self) -> u32 {
        self.ring.depth() - self.tail.wrapping_sub(self.head)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpState {
    /// Working normally.
    Ready,
    /// A protocol error (bad doorbell): every outstanding and future WR is flushed.
    Error,
}

/// An asynchronous admin command waiting on a QP or listener (step 3 completes them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingCmd {
    pub cmd_id: u32,
    pub opcode: u16,
}

impl PendingCmd {
    /// What completing `cmd` later needs of it.
    pub fn of(cmd: &qpip_abi::admin::AdminCmd) -> PendingCmd {
        PendingCmd {
            cmd_id: cmd.cmd_id,
            opcode: cmd.opcode,
        }
    }
}

/// What a TCP QP is doing on the connection side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpRole {
    Idle,
    /// Offered to a listener by ACCEPT.
    Accepting {
        listener: u32,
        cmd: PendingCmd,
    },
    Connecting {
        cmd: PendingCmd,
    },
    /// Carries a connection (or carried one that has ended).
    Connected,
}

/// A queue pair: its rings, CQs and indices, whatever its transport; what the transport
/// adds is its [`QpKind`].
pub struct Qp {
    pub ctx: u32,
    pub slot: u32,
    pub send_cq: u32,
    pub recv_cq: u32,
    pub sq: Ring,
    pub rq: Ring,
    /// Send WQEs consumed (free-running).
    pub sq_head: u32,
    /// Send producer index last read from the doorbell.
    pub sq_tail: u32,
    pub rq_head: u32,
    pub rq_tail: u32,
    /// WRs taken from the send (`[0]`) and receive (`[1]`) rings whose completions are not
    /// written yet (held by the transport, or waiting for room in a full CQ). A WR keeps
    /// its ring slot until then: the engine takes no more than a ring's depth, so what a
    /// producer that never polls its CQ can make the device hold is bounded by the rings
    /// it gave (`Engine::take_wqe`).
    pub owed: [u32; 2],
    pub state: QpState,
    /// The error the next send WR completed in the error state takes instead of FLUSHED
    /// (status, detail): a peer's Terminate that came when no WR was left to take it, so
    /// the first WR the guest posts after it learns why the QP failed.
    pub unclaimed_send_error: Option<(u8, u32)>,
    pub bound: Option<(Ipv6Addr, u16)>,
    /// Whether the QP is in `Objects::busy_qps`.
    pub queued: bool,
    pub kind: QpKind,
}

/// What a QP's transport holds beyond the rings.
pub enum QpKind {
    /// Datagrams: nothing beyond the rings (each WR is one datagram).
    Udp,
    /// A byte stream: its connection, framing and the WRs it has taken
    /// ([`super::tcp::TcpQp`]).
    Tcp(Box<TcpQp>),
}

impl Qp {
    /// Whether the send (`sq`) or receive ring's depth of WRs is taken and not completed:
    /// nothing more is taken from it until a completion is written.
    pub fn ring_held(&self, sq: bool) -> bool {
        if sq {
            self.owed[0] >= self.sq.depth()
        } else {
            self.owed[1] >= self.rq.depth()
        }
    }

    pub fn is_tcp(&self) -> bool {
        matches!(self.kind, QpKind::Tcp(_))
    }

    /// Whose ports it binds.
    pub fn proto(&self) -> super::ports::Proto {
        match self.kind {
            QpKind::Tcp(_) => super::ports::Proto::Tcp,
            QpKind::Udp => super::ports::Proto::Udp,
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

    pub fn tcp(&self) -> Option<&TcpQp> {
        match &self.kind {
            QpKind::Tcp(t) => Some(t),
            QpKind::Udp => None,
        }
    }

    pub fn tcp_mut(&mut self) -> Option<&mut TcpQp> {
        match &mut self.kind {
            QpKind::Tcp(t) => Some(t),
            QpKind::Udp => None,
        }
    }
}

/// A TCP listener: its address and port, and the rendezvous of accepted connections with
/// the QPs offered by ACCEPT ([`super::tcp::AcceptQueue`]).
pub struct Listener {
    pub ctx: u32,
    pub addr: Ipv6Addr,
    pub port: u16,
    pub accept: AcceptQueue,
}

/// All objects of the device. Ids are non-zero and never reused while the engine runs
/// (a stale handle cannot name a newer object).
#[derive(Default)]
pub struct Objects {
    pub contexts: HashMap<u32, Context>,
    pub cqs: HashMap<u32, Cq>,
    pub qps: HashMap<u32, Qp>,
    pub mrs: HashMap<u32, MemoryRegion>,
    pub listeners: HashMap<u32, Listener>,
    pub tripwires: HashMap<u32, super::tripwire::Tripwire>,
    /// Which QP or listener holds each port.
    pub ports: super::ports::Ports,
    /// QPs that may have send work (or flushes) to do.
    pub busy_qps: VecDeque<u32>,
    next_id: u32,
    keys: super::secrets::KeyGen,
}

impl Objects {
    /// Tables with memory keys from `keys`.
    pub fn new(keys: super::secrets::KeyGen) -> Objects {
        Objects {
            next_id: 1,
            keys,
            ..Default::default()
        }
    }

    /// A fresh object id.
    pub fn new_id(&mut self) -> u32 {
        let id = self.next_id;
        self.next_id = self.next_id.checked_add(1).unwrap_or(1).max(1);
        id
    }

    /// A fresh memory key: unpredictable (a keyed hash, `secrets::KeyGen`), never a live
    /// region's nor a recent one's, so a guessed or stale key is very unlikely to name a
    /// live region (the lookup then also checks the context).
    pub fn new_key(&mut self) -> u32 {
        let mrs = &self.mrs;
        self.keys.next(|k| mrs.contains_key(&k))
    }

    pub fn cq_in(&self, ctx: u32, id: u32) -> Option<&Cq> {
        self.cqs.get(&id).filter(|c| c.ctx == ctx)
    }

    pub fn qp_in(&self, ctx: u32, id: u32) -> Option<&Qp> {
        self.qps.get(&id).filter(|q| q.ctx == ctx)
    }

    /// The TCP side of QP `id` (None: no such QP, or not TCP).
    pub fn tcp_qp(&self, id: u32) -> Option<&TcpQp> {
        self.qps.get(&id).and_then(Qp::tcp)
    }

    pub fn tcp_qp_mut(&mut self, id: u32) -> Option<&mut TcpQp> {
        self.qps.get_mut(&id).and_then(Qp::tcp_mut)
    }

    pub fn mark_busy(&mut self, id: u32) {
        if let Some(qp) = self.qps.get_mut(&id) {
            if !qp.queued {
                qp.queued = true;
                self.busy_qps.push_back(id);
            }
        }
    }
}
