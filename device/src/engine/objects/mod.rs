//! The objects a driver creates through the admin queue, and the tables that hold them.
//! Every object records its context; lookups that name a context refuse objects of any
//! other, so a process can never reach another process's objects through a handle.
//!
//! This unit owns the tables and the objects' shared state: the rest of the engine reads
//! through accessors and changes an object only through the transition that names what
//! happens ([`Qp::take_slot`], [`Cq::advance_tail`], [`Objects::insert_qp`], ...). What is
//! kept here:
//! - ids are non-zero and never reused while the engine runs, so a stale handle cannot
//!   name a newer object (every `insert_*` draws the next one);
//! - a QP or CQ holds its slot in its context's doorbell page from its insertion to its
//!   removal, and the slot is free again after ([`Objects::insert_qp`],
//!   [`Objects::remove_qp`], [`Objects::insert_cq`], [`Objects::remove_cq`]);
//! - a CQ counts the QPs and tripwires completing to it and is not removed while any are
//!   left ([`Objects::remove_cq`]);
//! - a bound QP or a listener holds its port in [`Objects::ports`] until it is removed;
//! - a QP is in the busy queue at most once, and never after its removal
//!   ([`Objects::mark_busy`]).
//!
//! What a QP's transport adds ([`QpKind`]) is its unit's; memory regions are
//! [`crate::engine::memory::MemoryRegion`]s and tripwires [`crate::engine::tripwire`]'s,
//! only held here.

mod context;
mod cq;
mod qp;

use std::collections::{HashMap, VecDeque};
use std::net::Ipv6Addr;

pub use context::{Context, Home};
pub use cq::{ConsumerMoved, Cq};
pub use qp::{BeyondRing, Qp, QpKind, QpState};

use super::doorbell_page::DoorbellPage;
use super::memory::MemoryRegion;
use super::ports::{Ports, Proto};
use super::tcp::{AcceptQueue, TcpQp};
use super::tripwire::Tripwire;

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

/// A TCP listener: its address and port, and the rendezvous of accepted connections with
/// the QPs offered by ACCEPT ([`super::tcp::AcceptQueue`], the TCP unit's).
pub struct Listener {
    ctx: u32,
    addr: Ipv6Addr,
    port: u16,
    accept: AcceptQueue,
}

impl Listener {
    #[inline]
    pub fn ctx(&self) -> u32 {
        self.ctx
    }

    #[inline]
    pub fn addr(&self) -> Ipv6Addr {
        self.addr
    }

    #[inline]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its accept queue, which the TCP unit changes as it will.
    #[inline]
    pub fn accept_mut(&mut self) -> &mut AcceptQueue {
        &mut self.accept
    }

    /// Its accept queue.
    #[inline]
    pub fn accept(&self) -> &AcceptQueue {
        &self.accept
    }

    /// What is left of a removed listener: its accept queue.
    pub fn into_accept(self) -> AcceptQueue {
        self.accept
    }
}

/// Memory regions by key.
pub type Regions = HashMap<u32, MemoryRegion>;

/// Tripwires by id.
pub type Tripwires = HashMap<u32, Tripwire>;

/// All objects of the device.
#[derive(Default)]
pub struct Objects {
    contexts: HashMap<u32, Context>,
    cqs: HashMap<u32, Cq>,
    qps: HashMap<u32, Qp>,
    mrs: Regions,
    listeners: HashMap<u32, Listener>,
    tripwires: Tripwires,
    /// Which QP or listener holds each port.
    ports: Ports,
    /// QPs that may have send work (or flushes) to do, each once (`Qp::queued`).
    busy_qps: VecDeque<u32>,
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

    /// A fresh object id (every `insert_*` takes one).
    fn new_id(&mut self) -> u32 {
        let id = self.next_id;
        self.next_id = self.next_id.checked_add(1).unwrap_or(1).max(1);
        id
    }

    /// A fresh memory key ([`Objects::insert_mr`]).
    fn new_key(&mut self) -> u32 {
        let mrs = &self.mrs;
        self.keys.next(|k| mrs.contains_key(&k))
    }

    /// Which QP or listener holds each port.
    #[inline]
    pub fn ports(&self) -> &Ports {
        &self.ports
    }

    // ---- contexts -------------------------------------------------------------------------

    #[inline]
    pub fn context(&self, ctx: u32) -> Option<&Context> {
        self.contexts.get(&ctx)
    }

    #[inline]
    pub fn has_context(&self, ctx: u32) -> bool {
        self.contexts.contains_key(&ctx)
    }

    pub fn contexts(&self) -> impl Iterator<Item = (u32, &Context)> {
        self.contexts.iter().map(|(&id, c)| (id, c))
    }

    /// The contexts, to note their pages' change counts.
    pub fn contexts_mut(&mut self) -> impl Iterator<Item = (u32, &mut Context)> {
        self.contexts.iter_mut().map(|(&id, c)| (id, c))
    }

    /// Adds context `id` (a free doorbell page index) ringing in `doorbell`, the driver's
    /// own if `kernel` (`CTX_FLAG_KERNEL`).
    pub fn insert_context(&mut self, id: u32, doorbell: DoorbellPage, kernel: bool) {
        let old = self.contexts.insert(id, Context::new(doorbell, kernel));
        debug_assert!(old.is_none());
    }

    /// Removes context `ctx` with its CQs, regions and tripwires. Its QPs and listeners
    /// went first (what they leave behind is the engine's to settle).
    pub fn remove_context(&mut self, ctx: u32) {
        debug_assert!(!self.qps.values().any(|q| q.home().ctx == ctx));
        self.tripwires.retain(|_, t| t.ctx() != ctx);
        self.cqs.retain(|_, c| c.home().ctx != ctx);
        self.mrs.retain(|_, m| m.ctx != ctx);
        self.contexts.remove(&ctx);
    }

    // ---- CQs ------------------------------------------------------------------------------

    #[inline]
    pub fn cq(&self, id: u32) -> Option<&Cq> {
        self.cqs.get(&id)
    }

    #[inline]
    pub fn cq_mut(&mut self, id: u32) -> Option<&mut Cq> {
        self.cqs.get_mut(&id)
    }

    pub fn cq_in(&self, ctx: u32, id: u32) -> Option<&Cq> {
        self.cqs.get(&id).filter(|c| c.home().ctx == ctx)
    }

    /// Adds `cq` under a fresh id, which it returns, in its slot of its context's page
    /// (which must be free).
    pub fn insert_cq(&mut self, cq: Cq) -> u32 {
        let id = self.new_id();
        let home = cq.home();
        let c = self.contexts.get_mut(&home.ctx).expect("a live context");
        let slot = &mut c.cq_slots[home.slot as usize];
        debug_assert!(slot.is_none());
        *slot = Some(id);
        self.cqs.insert(id, cq);
        id
    }

    /// Removes CQ `id` and frees its slot. False, removing nothing, while QPs or tripwires
    /// complete to it.
    pub fn remove_cq(&mut self, id: u32) -> bool {
        if self.cqs.get(&id).is_some_and(Cq::in_use) {
            return false;
        }
        if let Some(cq) = self.cqs.remove(&id) {
            let home = cq.home();
            if let Some(c) = self.contexts.get_mut(&home.ctx) {
                c.cq_slots[home.slot as usize] = None;
            }
        }
        true
    }

    // ---- QPs ------------------------------------------------------------------------------

    #[inline]
    pub fn qp(&self, id: u32) -> Option<&Qp> {
        self.qps.get(&id)
    }

    #[inline]
    pub fn qp_mut(&mut self, id: u32) -> Option<&mut Qp> {
        self.qps.get_mut(&id)
    }

    pub fn qp_in(&self, ctx: u32, id: u32) -> Option<&Qp> {
        self.qps.get(&id).filter(|q| q.home().ctx == ctx)
    }

    pub fn qp_in_mut(&mut self, ctx: u32, id: u32) -> Option<&mut Qp> {
        self.qps.get_mut(&id).filter(|q| q.home().ctx == ctx)
    }

    pub fn qps(&self) -> impl Iterator<Item = (u32, &Qp)> {
        self.qps.iter().map(|(&id, q)| (id, q))
    }

    /// The TCP side of QP `id` (None: no such QP, or not TCP).
    #[inline]
    pub fn tcp_qp(&self, id: u32) -> Option<&TcpQp> {
        self.qps.get(&id).and_then(Qp::tcp)
    }

    #[inline]
    pub fn tcp_qp_mut(&mut self, id: u32) -> Option<&mut TcpQp> {
        self.qps.get_mut(&id).and_then(Qp::tcp_mut)
    }

    /// QP `id` with the regions and tripwires (read-only) beside it, borrowed at once.
    pub fn qp_with_memory(&mut self, id: u32) -> Option<(&mut Qp, &Regions, &Tripwires)> {
        let q = self.qps.get_mut(&id)?;
        Some((q, &self.mrs, &self.tripwires))
    }

    /// Adds the QP `make` makes for a fresh id, and returns the id: the QP takes its slot
    /// in its context's page (which must be free) and counts as a user of its CQs (which
    /// must exist) until [`Objects::remove_qp`].
    pub fn insert_qp(&mut self, make: impl FnOnce(u32) -> Qp) -> u32 {
        let id = self.new_id();
        let qp = make(id);
        for cq in [qp.send_cq(), qp.recv_cq()] {
            self.cqs.get_mut(&cq).expect("a live CQ").users += 1;
        }
        let home = qp.home();
        let c = self.contexts.get_mut(&home.ctx).expect("a live context");
        let slot = &mut c.qp_slots[home.slot as usize];
        debug_assert!(slot.is_none());
        *slot = Some(id);
        self.qps.insert(id, qp);
        id
    }

    /// Removes QP `id` and returns it: its port, its slot and its CQs are given back, and
    /// it leaves the busy queue.
    pub fn remove_qp(&mut self, id: u32) -> Option<Qp> {
        let qp = self.qps.remove(&id)?;
        if let Some((_, port)) = qp.bound {
            self.ports.release(qp.proto(), port, id);
        }
        for cq in [qp.send_cq(), qp.recv_cq()] {
            if let Some(c) = self.cqs.get_mut(&cq) {
                c.users -= 1;
            }
        }
        let home = qp.home();
        if let Some(c) = self.contexts.get_mut(&home.ctx) {
            c.qp_slots[home.slot as usize] = None;
        }
        self.busy_qps.retain(|&q| q != id);
        Some(qp)
    }

    /// Binds QP `id` (which must exist, unbound) to `port` on `addr` (0: a free ephemeral
    /// port; `closing` says whether a closing connection still holds a port). Returns the
    /// port, or the admin status of the refusal.
    pub fn bind_qp(
        &mut self,
        id: u32,
        addr: Ipv6Addr,
        port: u16,
        share: bool,
        closing: impl Fn(u16) -> bool,
    ) -> Result<u16, u16> {
        let qp = &self.qps[&id];
        debug_assert!(qp.bound.is_none());
        let (proto, ctx) = (qp.proto(), qp.home().ctx);
        let holders = self.ports.udp_qps(port);
        let port = if share && proto == Proto::Udp && !holders.is_empty() {
            // Joins a shared port only if every QP on it asked to share, in the same
            // context: another process (or user) never takes a port it does not share.
            let may = holders.iter().all(|h| {
                self.qps
                    .get(h)
                    .is_some_and(|q| q.shares_port && q.home().ctx == ctx)
            });
            if !may {
                return Err(qpip_abi::admin::ADMIN_STATUS_ADDR_IN_USE);
            }
            self.ports.join_udp(port, id);
            port
        } else {
            self.ports.bind(proto, port, id, closing)?
        };
        let qp = self.qps.get_mut(&id).expect("a live QP");
        qp.bound = Some((addr, port));
        qp.shares_port = share;
        Ok(port)
    }

    /// Sets (or with None clears) bound UDP QP `id`'s connected peer.
    pub fn set_udp_peer(&mut self, id: u32, peer: Option<(Ipv6Addr, u16)>) -> Result<(), u16> {
        let qp = self.qps.get_mut(&id).expect("a live QP");
        if qp.proto() != Proto::Udp || qp.bound.is_none() {
            return Err(qpip_abi::admin::ADMIN_STATUS_BAD_STATE);
        }
        qp.udp_peer = peer;
        Ok(())
    }

    /// The QP a datagram from `src` to `dst`:`port` goes to, as Linux chooses the socket:
    /// among the QPs on the port bound to `dst` or to every address, the one connected to
    /// `src`; else the first bound with no peer. None: no QP takes it.
    pub fn udp_receiver(&self, dst: &Ipv6Addr, port: u16, src: (Ipv6Addr, u16)) -> Option<u32> {
        let candidates = self.ports.udp_qps(port).iter().filter_map(|&id| {
            let q = self.qps.get(&id)?;
            let (addr, _) = q.bound?;
            (addr.is_unspecified() || addr == *dst).then_some((id, q.udp_peer))
        });
        let mut unconnected = None;
        for (id, peer) in candidates {
            match peer {
                Some(p) if p == src => return Some(id),
                None if unconnected.is_none() => unconnected = Some(id),
                _ => {}
            }
        }
        unconnected
    }

    /// Queues QP `id` for a turn of the send scheduler, unless it is queued already.
    #[inline]
    pub fn mark_busy(&mut self, id: u32) {
        if let Some(qp) = self.qps.get_mut(&id) {
            if !qp.queued {
                qp.queued = true;
                self.busy_qps.push_back(id);
            }
        }
    }

    /// QPs queued for a turn.
    #[inline]
    pub fn busy_count(&self) -> usize {
        self.busy_qps.len()
    }

    /// The next QP queued for a turn, taken from the queue (it may be queued again).
    #[inline]
    pub fn pop_busy(&mut self) -> Option<u32> {
        let id = self.busy_qps.pop_front()?;
        if let Some(qp) = self.qps.get_mut(&id) {
            qp.queued = false;
        }
        Some(id)
    }

    // ---- memory regions -------------------------------------------------------------------

    #[inline]
    pub fn mr(&self, key: u32) -> Option<&MemoryRegion> {
        self.mrs.get(&key)
    }

    pub fn mrs(&self) -> impl Iterator<Item = &MemoryRegion> {
        self.mrs.values()
    }

    pub fn mr_count(&self) -> usize {
        self.mrs.len()
    }

    /// Adds region `mr` under a fresh key, which it returns. A key is unpredictable (a keyed
    /// hash, `secrets::KeyGen`) and never a live region's nor a recent one's, so a guessed or
    /// stale key is very unlikely to name a live region (the lookup then also checks the
    /// context).
    /// Never key 0: that is `PHYS_LKEY`, guest-physical memory in a kernel context's WQEs.
    pub fn insert_mr(&mut self, mr: MemoryRegion) -> u32 {
        let key = self.new_key();
        assert_ne!(
            key,
            qpip_abi::wqe::PHYS_LKEY,
            "no region is keyed PHYS_LKEY"
        );
        self.mrs.insert(key, mr);
        key
    }

    pub fn remove_mr(&mut self, key: u32) -> Option<MemoryRegion> {
        self.mrs.remove(&key)
    }

    // ---- listeners ------------------------------------------------------------------------

    pub fn listener(&self, id: u32) -> Option<&Listener> {
        self.listeners.get(&id)
    }

    pub fn listener_mut(&mut self, id: u32) -> Option<&mut Listener> {
        self.listeners.get_mut(&id)
    }

    pub fn listeners(&self) -> impl Iterator<Item = (u32, &Listener)> {
        self.listeners.iter().map(|(&id, l)| (id, l))
    }

    pub fn listeners_mut(&mut self) -> impl Iterator<Item = &mut Listener> {
        self.listeners.values_mut()
    }

    pub fn listener_count(&self) -> usize {
        self.listeners.len()
    }

    /// Adds a listener of context `ctx` on `addr` and TCP `port` (which no QP or listener
    /// may hold), with its accept queue; it holds the port until [`Objects::remove_listener`].
    /// Returns its id.
    pub fn insert_listener(
        &mut self,
        ctx: u32,
        addr: Ipv6Addr,
        port: u16,
        accept: AcceptQueue,
    ) -> u32 {
        let id = self.new_id();
        self.ports
            .listen(port, id)
            .expect("the caller checked: no QP or listener holds the port");
        self.listeners.insert(
            id,
            Listener {
                ctx,
                addr,
                port,
                accept,
            },
        );
        id
    }

    /// Removes listener `id` and returns it; its port is free again.
    pub fn remove_listener(&mut self, id: u32) -> Option<Listener> {
        let l = self.listeners.remove(&id)?;
        self.ports.unlisten(l.port);
        Some(l)
    }

    // ---- tripwires ------------------------------------------------------------------------

    #[inline]
    pub fn tripwires(&self) -> &Tripwires {
        &self.tripwires
    }

    pub fn tripwire_mut(&mut self, id: u32) -> Option<&mut Tripwire> {
        self.tripwires.get_mut(&id)
    }

    /// Adds tripwire `t` (its CQ must exist, and counts it as a user until
    /// [`Objects::remove_tripwire`]). Returns its id.
    pub fn insert_tripwire(&mut self, t: Tripwire) -> u32 {
        let id = self.new_id();
        if let Some(c) = self.cqs.get_mut(&t.cq()) {
            c.users += 1;
        }
        self.tripwires.insert(id, t);
        id
    }

    /// Removes tripwire `id`; its CQ has one user fewer.
    pub fn remove_tripwire(&mut self, id: u32) -> Option<Tripwire> {
        let t = self.tripwires.remove(&id)?;
        if let Some(c) = self.cqs.get_mut(&t.cq()) {
            c.users -= 1;
        }
        Some(t)
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv6Addr;

    use vm_memory::{GuestAddress, GuestMemoryMmap};

    use super::*;
    use crate::engine::memory::{Ring, PAGE_SIZE};
    use crate::engine::ports::Proto;

    const DEPTH: u32 = 4;

    fn ring(entry_size: u32) -> Ring {
        Ring::paged(vec![0x1000], entry_size, DEPTH).expect("one page")
    }

    /// Tables with context 0 (its doorbell page at 0) and one CQ in it.
    fn tables() -> (Objects, u32) {
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 2 * PAGE_SIZE as usize)])
            .expect("RAM");
        let mut o = Objects::new(crate::engine::secrets::KeyGen::new([7; 16]));
        o.insert_context(0, DoorbellPage::new(&mem, 0).expect("a page of RAM"), false);
        let slot = o.context(0).and_then(Context::free_cq_slot).expect("free");
        let cq = o.insert_cq(Cq::new(
            Home { ctx: 0, slot },
            ring(qpip_abi::cqe::CQE_SIZE),
            1,
        ));
        (o, cq)
    }

    fn udp_qp(o: &Objects, cq: u32) -> Qp {
        let slot = o.context(0).and_then(Context::free_qp_slot).expect("free");
        let wqe = qpip_abi::wqe::WQE_SIZE;
        Qp::new(
            Home { ctx: 0, slot },
            (cq, cq),
            ring(wqe),
            ring(wqe),
            QpKind::Udp,
        )
    }

    #[test]
    fn a_qp_holds_its_slot_cqs_and_port_until_removed() {
        let (mut o, cq) = tables();
        let qp = udp_qp(&o, cq);
        let slot = qp.home().slot;
        let id = o.insert_qp(|_| qp);
        assert_eq!(o.context(0).map(|c| c.qps().collect()), Some(vec![id]));
        assert_ne!(o.context(0).and_then(Context::free_qp_slot), Some(slot));
        assert!(!o.remove_cq(cq), "a CQ in use stays");
        let port = o.bind_qp(id, Ipv6Addr::UNSPECIFIED, 7, false, |_| false);
        assert_eq!(port, Ok(7));
        assert_eq!(o.ports().qp(Proto::Udp, 7), Some(id));
        o.mark_busy(id);
        o.mark_busy(id);
        assert_eq!(o.busy_count(), 1, "queued once");

        assert!(o.remove_qp(id).is_some());
        assert_eq!(o.busy_count(), 0);
        assert_eq!(o.ports().qp(Proto::Udp, 7), None);
        assert_eq!(o.context(0).and_then(Context::free_qp_slot), Some(slot));
        assert!(o.remove_cq(cq), "no users left");
        assert_eq!(o.context(0).map(|c| c.cqs().count()), Some(0));
        assert!(o.new_id() > id, "ids are not reused");
    }

    #[test]
    fn a_ring_gives_no_more_than_its_depth_until_completions() {
        let (o, cq) = tables();
        let mut qp = udp_qp(&o, cq);
        assert_eq!(qp.producer_moved(true, DEPTH + 1), Err(BeyondRing));
        assert_eq!(qp.producer_moved(true, DEPTH), Ok(true));
        assert_eq!(qp.producer_moved(true, DEPTH), Ok(false));
        for _ in 0..DEPTH {
            assert!(qp.take_slot(true).is_some());
        }
        assert!(!qp.posted(true));
        assert_eq!(qp.producer_moved(true, 2 * DEPTH), Ok(true));
        assert!(qp.ring_held(true));
        assert_eq!(qp.take_slot(true), None, "held until a completion");
        assert!(qp.completed(true), "the ring was held");
        assert!(qp.take_slot(true).is_some());
        assert!(qp.fail());
        assert!(!qp.fail(), "already failed");
    }

    #[test]
    fn a_cq_trusts_its_consumer_only_as_far_as_written_and_fires_once_per_arm() {
        let (mut o, cq) = tables();
        let c = o.cq_mut(cq).expect("there");
        assert_eq!(c.advance_tail(true), None, "not armed");
        let m = c.consumer_moved(2, 0);
        assert!(!m.head_ok, "beyond what was written");
        assert_eq!(c.free(), DEPTH - 1);
        let m = c.consumer_moved(0, 1);
        assert_eq!(m.raise, Some(1), "armed with a CQE unreleased");
        assert_eq!(c.consumer_moved(0, 1).raise, None, "once per arm");
        assert!(c.stall());
        assert!(!c.stall(), "counted once");
        let m = c.consumer_moved(1, 1);
        assert!(m.head_ok && m.unstalled);
        assert_eq!(c.free(), DEPTH);
    }

    #[test]
    fn a_solicited_only_arm_fires_for_receives_and_errors_not_for_sends() {
        use qpip_abi::doorbell::CQ_ARM_SOLICITED;
        let (mut o, cq) = tables();
        let c = o.cq_mut(cq).expect("there");
        assert_eq!(
            c.consumer_moved(0, 1 | CQ_ARM_SOLICITED).raise,
            None,
            "empty"
        );
        assert_eq!(
            c.advance_tail(false),
            None,
            "a send's completion does not fire it"
        );
        assert_eq!(c.advance_tail(true), Some(1), "a receive's does");
        assert_eq!(c.advance_tail(true), None, "once per arm");
        // Armed again with a send's completion the only one unreleased: nothing; with a
        // receive's among them: at once.
        c.consumer_moved(3, 1);
        assert_eq!(
            c.advance_tail(false),
            Some(1),
            "an ordinary arm fires for a send"
        );
        assert_eq!(c.consumer_moved(4, 2 | CQ_ARM_SOLICITED).raise, None);
        assert_eq!(c.advance_tail(false), None);
        assert_eq!(
            c.consumer_moved(4, 3 | CQ_ARM_SOLICITED).raise,
            None,
            "only a send's pending"
        );
        assert_eq!(c.advance_tail(true), Some(1));
        assert_eq!(
            c.consumer_moved(4, 4 | CQ_ARM_SOLICITED).raise,
            Some(1),
            "a receive's pending"
        );
        // The sequence bits alone changing arms too, and an ordinary arm fires for anything.
        assert_eq!(c.consumer_moved(6, 4).raise, None, "all released");
        assert_eq!(c.advance_tail(false), Some(1));
    }
}
