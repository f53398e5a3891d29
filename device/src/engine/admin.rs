//! The admin queue: the management state machine. Fetches commands from the driver's
//! submission ring, executes them against the object tables, writes completions with the
//! phase protocol of `qpip_abi::admin`, and raises MSI-X vector 0.

use std::collections::VecDeque;
use std::net::Ipv6Addr;
use std::sync::atomic::Ordering;

use log::{debug, warn};
use qpip_abi::admin::*;
use qpip_abi::{cqe, doorbell, pci, wqe};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};
use zerocopy::{FromBytes, FromZeros, IntoBytes};

use super::decode::{self, AdminRequest, QpRequest};
use super::events::Raised;
use super::memory::{self, MemoryRegion, Ring};
use super::objects::{Context, Cq, PendingCmd, Qp, QpKind, QpState, TcpRole};
use super::tcp::TcpQp;
use super::Engine;
use crate::doorbell::DoorbellPage;

/// The admin rings as the driver set them up.
#[derive(Debug, Default)]
pub struct AdminQueue {
    rings: Option<(Ring, Ring)>,
    /// Commands fetched (free-running).
    pub sq_head: u32,
    /// The driver's producer index.
    pub sq_tail: u32,
    /// Completions written (free-running).
    cq_tail: u32,
    /// Completions the driver consumed.
    pub cq_head: u32,
    /// Completions that could not be written yet for lack of room (async ones).
    deferred: VecDeque<AdminCqe>,
    /// A REG_MR whose page list is still being read; the commands after it wait for it.
    registering: Option<Registration>,
    /// Page-list entries this pass may still read ([`PAGE_LIST_BUDGET`]).
    page_budget: u32,
}

/// A REG_MR between passes.
#[derive(Debug)]
struct Registration {
    cmd: PendingCmd,
    ctx: u32,
    args: RegMrArgs,
    list: memory::PageListReader,
}

/// Results of a successful command.
type Results = (u64, u64, u32);

impl AdminQueue {
    pub fn enable(&mut self, sq: u64, cq: u64, depth: u32) {
        *self = AdminQueue {
            rings: Some((
                Ring::contiguous(sq, 64, depth),
                Ring::contiguous(cq, 32, depth),
            )),
            ..Default::default()
        };
        debug!("admin queue enabled: sq {sq:#x} cq {cq:#x} depth {depth}");
    }

    pub fn disable(&mut self) {
        *self = AdminQueue::default();
    }

    fn room(&self) -> bool {
        match &self.rings {
            Some((_, cq)) => self.cq_tail.wrapping_sub(self.cq_head) < cq.depth(),
            None => false,
        }
    }

    /// Writes a completion (phase byte last). False if there is no room or no queue.
    fn write(&mut self, mem: &GuestMemoryMmap, mut cqe: AdminCqe) -> bool {
        if !self.room() {
            return false;
        }
        let Some((_, ring)) = &self.rings else {
            return false;
        };
        let addr = ring.entry_addr(self.cq_tail);
        cqe.phase = ((self.cq_tail / ring.depth()) & 1 ^ 1) as u8;
        let bytes = cqe.as_bytes();
        let ok = mem.write_slice(&bytes[..31], addr).is_ok() && {
            std::sync::atomic::fence(Ordering::Release);
            mem.store(cqe.phase, GuestAddress(addr.0 + 31), Ordering::Release)
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

// Every drop reason of the network has its counter in QUERY_STATS.
const _: () = assert!(crate::net::stats::DropReason::ALL.len() == STAT_NET_DROP_REASONS as usize);
const _: () = assert!(STAT_NET_DROP_BASE + STAT_NET_DROP_REASONS <= STATS_COUNT);

/// The first free doorbell slot, or NO_RESOURCES.
fn free_slot(slots: &[Option<u32>]) -> Result<u32, u16> {
    slots
        .iter()
        .position(|s| s.is_none())
        .map(|p| p as u32)
        .ok_or(ADMIN_STATUS_NO_RESOURCES)
}

fn completion(cmd_id: u32, opcode: u16, status: u16, r: Results) -> AdminCqe {
    let mut c = AdminCqe::new_zeroed();
    c.cmd_id = cmd_id;
    c.opcode = opcode;
    c.status = status;
    if status == ADMIN_STATUS_OK {
        (c.result0, c.result1, c.result2) = r;
    }
    c
}

enum Outcome {
    Done(Result<Results, u16>),
    /// Completes later (accept, connect, close).
    Pending,
}

/// The ephemeral port range (RFC 6335's dynamic ports).
const EPHEMERAL_FIRST: u16 = 49152;
const EPHEMERAL_LAST: u16 = 65535;

/// Admin commands one pass executes at most ([`Engine::process_admin`]).
pub const ADMIN_BUDGET: u32 = 32;

/// Page-list entries one pass reads at most for REG_MR (a few microseconds' work): a list
/// of `MAX_MR_PAGES` takes several passes, and the functions on the same engine thread
/// are served between them.
pub const PAGE_LIST_BUDGET: u32 = 2048;

impl Engine {
    /// Fetches and executes admin commands while there are some, room for their
    /// completions and budget left in this pass. Returns whether anything happened.
    pub(super) fn process_admin(&mut self, mem: &GuestMemoryMmap) -> bool {
        let mut did = false;
        // Deferred asynchronous completions first: they are older.
        while let Some(c) = self.admin.deferred.front().copied() {
            if !self.admin.write(mem, c) {
                break;
            }
            self.admin.deferred.pop_front();
            did = true;
        }
        // A budget per pass: one function's burst of commands (each may walk its tables,
        // a registration reads its page list) must not hold the engine thread from the
        // other functions on it for long; the rest wait for the next pass.
        self.admin.page_budget = PAGE_LIST_BUDGET;
        if let Some(r) = self.admin.registering.take() {
            did = true;
            let (cmd_id, opcode) = (r.cmd.cmd_id, r.cmd.opcode);
            if let Outcome::Done(result) = self.go_on_registering(mem, r) {
                self.conclude(mem, cmd_id, opcode, result);
            }
        }
        let mut budget = ADMIN_BUDGET;
        while self.admin.deferred.is_empty()
            && self.admin.registering.is_none()
            && self.admin.room()
            && self.admin.sq_head != self.admin.sq_tail
            && budget > 0
        {
            budget -= 1;
            let Some((sq, _)) = &self.admin.rings else {
                break;
            };
            if self.admin.sq_tail.wrapping_sub(self.admin.sq_head) > sq.depth() {
                warn!(
                    "admin doorbell {} is more than the depth ahead of {}; ignored",
                    self.admin.sq_tail, self.admin.sq_head
                );
                self.admin.sq_tail = self.admin.sq_head;
                break;
            }
            let mut raw = [0u8; 64];
            let addr = sq.entry_addr(self.admin.sq_head);
            self.admin.sq_head = self.admin.sq_head.wrapping_add(1);
            did = true;
            if mem.read_slice(&mut raw, addr).is_err() {
                warn!(
                    "admin command at {:#x} is not in guest RAM; skipped",
                    addr.0
                );
                continue;
            }
            let cmd = AdminCmd::read_from_bytes(&raw[..]).expect("64 bytes");
            let outcome = match decode::admin(&cmd, pci::MSIX_VECTORS) {
                Ok(req) => self.execute(mem, &cmd, req),
                Err(status) => Outcome::Done(Err(status)),
            };
            if let Outcome::Done(result) = outcome {
                self.conclude(mem, cmd.cmd_id, cmd.opcode, result);
            }
        }
        if did {
            self.shared.irqs.raise(0);
        }
        did
    }

    /// Completes a command executed in this pass.
    fn conclude(
        &mut self,
        mem: &GuestMemoryMmap,
        cmd_id: u32,
        opcode: u16,
        result: Result<Results, u16>,
    ) {
        let (status, r) = match result {
            Ok(r) => (ADMIN_STATUS_OK, r),
            Err(s) => (s, (0, 0, 0)),
        };
        debug!("admin {opcode:#04x} id {cmd_id} -> status {status}");
        self.complete_admin(mem, completion(cmd_id, opcode, status, r));
    }

    /// Writes (or defers) one completion and counts it.
    fn complete_admin(&mut self, mem: &GuestMemoryMmap, c: AdminCqe) {
        self.shared.stats.add(STAT_ADMIN_COMMANDS, 1);
        if c.status != ADMIN_STATUS_OK {
            self.shared.stats.add(STAT_ADMIN_ERRORS, 1);
        }
        if !self.admin.deferred.is_empty() || !self.admin.write(mem, c) {
            self.admin.deferred.push_back(c);
        }
    }

    /// Offers the events raised during this pass to the pending `ASYNC_EVENT` requests.
    /// Returns whether there were any.
    pub(super) fn deliver_events(&mut self, mem: &GuestMemoryMmap) -> bool {
        let staged = self.events.take_staged();
        let any = !staged.is_empty();
        for ev in staged {
            match self.events.raise(ev) {
                Raised::Delivered(cmd, r) => {
                    self.shared.stats.add(STAT_ASYNC_EVENTS, 1);
                    self.complete_async(mem, cmd, ADMIN_STATUS_OK, r);
                }
                Raised::Queued => {}
                Raised::Lost => {
                    warn!("asynchronous event {ev:?} dropped: the event queue is full");
                    self.shared.stats.add(STAT_ASYNC_EVENTS_LOST, 1);
                }
            }
        }
        any
    }

    /// Completes a pending command with CANCELLED (its object is going away).
    pub(super) fn cancel(&mut self, mem: &GuestMemoryMmap, cmd: PendingCmd) {
        self.complete_async(mem, cmd, ADMIN_STATUS_CANCELLED, (0, 0, 0));
    }

    /// Completes a pending (asynchronous) command.
    pub(super) fn complete_async(
        &mut self,
        mem: &GuestMemoryMmap,
        cmd: PendingCmd,
        status: u16,
        r: Results,
    ) {
        debug!(
            "admin {:#04x} id {} -> status {status} (asynchronous)",
            cmd.opcode, cmd.cmd_id
        );
        self.complete_admin(mem, completion(cmd.cmd_id, cmd.opcode, status, r));
        self.shared.irqs.raise(0);
    }

    fn execute(&mut self, mem: &GuestMemoryMmap, cmd: &AdminCmd, req: AdminRequest) -> Outcome {
        use AdminRequest as R;
        let ctx = cmd.ctx;
        let h = cmd.handle;
        Outcome::Done(match req {
            R::QueryDevice { buf, len } => {
                self.write_query(mem, buf, len, self.device_info().as_bytes())
            }
            R::QueryStats { buf, len } => {
                let stats = Stats {
                    counters: self.counters(),
                };
                self.write_query(mem, buf, len, stats.as_bytes())
            }
            R::ListAddrs { buf, len } => {
                let list = self.addr_list();
                self.write_query(mem, buf, len, list.as_bytes())
                    .map(|_| (list.count as u64, 0, 0))
            }
            R::AsyncEvent => {
                let pending = PendingCmd {
                    cmd_id: cmd.cmd_id,
                    opcode: cmd.opcode,
                };
                match self.events.request(pending) {
                    Ok(Some(r)) => {
                        self.shared.stats.add(STAT_ASYNC_EVENTS, 1);
                        Ok(r)
                    }
                    Ok(None) => return Outcome::Pending,
                    Err(s) => Err(s),
                }
            }
            R::SetMac(mac) => self.set_mac(mac).map(|()| (0, 0, 0)),
            R::AddAddr { addr, prefix_len } => self.add_addr(addr, prefix_len),
            R::DelAddr(addr) => {
                let stack = &mut self.net.stack;
                if stack.addresses().iter().any(|(a, _)| *a == addr) {
                    stack.remove_address(&addr);
                    // Fewer addresses: never refused.
                    let _ = self.claim_identity(None, None);
                    Ok((0, 0, 0))
                } else {
                    Err(ADMIN_STATUS_BAD_HANDLE)
                }
            }
            R::CreateCtx(page) => self.create_ctx(mem, page),
            R::DestroyCtx => self.destroy_ctx(mem, ctx),
            R::CreateCq {
                page_list,
                npages,
                depth,
                vector,
            } => self.create_cq(mem, ctx, page_list, npages, depth, vector),
            R::DestroyCq => self.destroy_cq(ctx, h),
            R::CreateQp(q) => self.create_qp(mem, ctx, q),
            R::DestroyQp => self.destroy_qp(mem, ctx, h),
            R::RegMr(args) => {
                let cmd = PendingCmd {
                    cmd_id: cmd.cmd_id,
                    opcode: cmd.opcode,
                };
                return self.reg_mr(mem, cmd, ctx, args);
            }
            R::DeregMr => match self.objects.mrs.get(&h) {
                Some(mr) if mr.ctx == ctx && self.objects.contexts.contains_key(&ctx) => {
                    if self.region_tripwired(h) {
                        Err(ADMIN_STATUS_BUSY)
                    } else {
                        self.objects.mrs.remove(&h);
                        // Invalid at once: nothing moves to or from its pages after this
                        // command completes (the driver unpins them then).
                        self.tcp_region_gone(mem, ctx, h);
                        Ok((0, 0, 0))
                    }
                }
                _ => Err(ADMIN_STATUS_BAD_HANDLE),
            },
            R::CreateTripwire(a) => self.create_tripwire(ctx, &a),
            R::DestroyTripwire => match self.objects.tripwires.get(&h) {
                Some(t) if t.ctx == ctx => {
                    self.remove_tripwire(h);
                    Ok((0, 0, 0))
                }
                _ => Err(ADMIN_STATUS_BAD_HANDLE),
            },
            R::Bind { addr, port } => self.bind(ctx, h, addr, port),
            R::Listen {
                addr,
                port,
                backlog,
            } => self.listen(ctx, addr, port, backlog),
            R::DestroyListener => self.destroy_listener(mem, ctx, h),
            R::Accept { qp, iwarp } => {
                if let Err(s) = self.iwarp_args_take(mem, ctx, qp, &iwarp) {
                    return Outcome::Done(Err(s));
                }
                return self.accept(mem, ctx, h, qp, cmd);
            }
            R::Connect { addr, port, iwarp } => {
                if let Err(s) = self.iwarp_args_take(mem, ctx, h, &iwarp) {
                    return Outcome::Done(Err(s));
                }
                return self.connect(mem, ctx, h, addr, port, cmd);
            }
            R::QueryConn { buf, len } => match self.iwarp_conn_info(ctx, h) {
                Ok(info) => self.write_query(mem, buf, len, info.as_bytes()),
                Err(s) => Err(s),
            },
            R::Close => match self.objects.qp_in(ctx, h) {
                None => Err(ADMIN_STATUS_BAD_HANDLE),
                Some(qp) if !qp.may_close() => Err(ADMIN_STATUS_BAD_STATE),
                Some(_) => {
                    let pending = PendingCmd {
                        cmd_id: cmd.cmd_id,
                        opcode: cmd.opcode,
                    };
                    return match self.tcp_close(mem, h, pending) {
                        Ok(()) => Outcome::Pending,
                        Err(s) => Outcome::Done(Err(s)),
                    };
                }
            },
        })
    }

    fn write_query(
        &self,
        mem: &GuestMemoryMmap,
        buf: u64,
        len: u32,
        data: &[u8],
    ) -> Result<Results, u16> {
        if (len as usize) < data.len() {
            return Err(ADMIN_STATUS_BAD_PARAM);
        }
        // A buffer at the very top of the address space must not wrap the arithmetic.
        let Some(last) = buf.checked_add(data.len() as u64 - 1) else {
            return Err(ADMIN_STATUS_BAD_ADDRESS);
        };
        let crosses_page = buf / memory::PAGE_SIZE != last / memory::PAGE_SIZE;
        if !buf.is_multiple_of(8) || crosses_page || !memory::in_ram(mem, buf, data.len() as u64) {
            return Err(ADMIN_STATUS_BAD_ADDRESS);
        }
        mem.write_slice(data, GuestAddress(buf))
            .map_err(|_| ADMIN_STATUS_BAD_ADDRESS)?;
        Ok((0, 0, 0))
    }

    /// The device counters, with the network's (if there is a link) and TCP's in their
    /// places.
    fn counters(&self) -> [u64; STATS_COUNT as usize] {
        let mut c = self.shared.stats.snapshot();
        let t = self.tcp.stats();
        for (i, v) in [
            (STAT_TCP_ACTIVE_OPENS, t.active_opens),
            (STAT_TCP_PASSIVE_OPENS, t.passive_opens),
            (STAT_TCP_ATTEMPT_FAILS, t.attempt_fails),
            (STAT_TCP_ESTAB_RESETS, t.estab_resets),
            (STAT_TCP_SEGS_IN, t.segs_in),
            (STAT_TCP_SEGS_OUT, t.segs_out),
            (STAT_TCP_RETRANS_SEGS, t.retrans_segs),
            (STAT_TCP_RSTS_OUT, t.rsts_out),
            (STAT_TCP_FAST_RETRANSMITS, t.fast_retransmits),
            (STAT_TCP_RTO_TIMEOUTS, t.rto_timeouts),
            (STAT_TCP_OOO_SEGS, t.ooo_segs),
            (STAT_TCP_DUP_SEGS, t.dup_segs),
            (STAT_TCP_CHALLENGE_ACKS, t.challenge_acks),
            (STAT_TCP_SYN_COOKIES, t.syn_cookies),
            (STAT_TCP_LISTEN_DROPS, t.listen_drops),
            (STAT_TCP_TIMEOUTS, t.timeouts),
            (STAT_TCP_ORPHANS, t.orphans),
            (STAT_TCP_ORPHAN_ABORTS, t.orphan_aborts),
        ] {
            c[i as usize] = v;
        }
        {
            let n = self.net.stack.stats();
            for (i, v) in [
                (STAT_NET_RX_FRAMES, n.rx_frames),
                (STAT_NET_TX_FRAMES, n.tx_frames),
                (STAT_NET_RX_DROPPED, n.total_dropped()),
                (STAT_NET_ECHO_REQUESTS, n.echo_requests),
                (STAT_NET_ICMP_ERRORS_TX, n.icmp_errors_tx),
                (STAT_NET_NO_ROUTE, n.no_route),
                (STAT_NET_FRAGMENTS_RX, n.fragments_rx),
                (STAT_NET_REASSEMBLED, n.reassembled),
                (STAT_NET_RESOLUTION_FAILED, n.resolution_failed),
            ] {
                c[i as usize] = v;
            }
            for (k, why) in crate::net::stats::DropReason::ALL.iter().enumerate() {
                c[STAT_NET_DROP_BASE as usize + k] = n.dropped(*why);
            }
        }
        c
    }

    fn device_info(&self) -> DeviceInfo {
        let mut d = DeviceInfo::new_zeroed();
        d.version = (qpip_abi::ABI_VERSION_MAJOR as u32) << qpip_abi::regs::VERSION_MAJOR_SHIFT
            | qpip_abi::ABI_VERSION_MINOR as u32;
        d.max_contexts = pci::DOORBELL_PAGES;
        d.max_qps_per_context = doorbell::DB_QP_SLOTS;
        d.max_cqs_per_context = doorbell::DB_CQ_SLOTS;
        d.max_mrs = MAX_MRS;
        d.max_mr_pages = MAX_MR_PAGES;
        d.max_queue_depth = MAX_QUEUE_DEPTH;
        d.max_sge = wqe::MAX_SGE;
        d.max_inline = wqe::MAX_INLINE;
        d.max_udp_payload = super::datapath::MAX_UDP_PAYLOAD as u32;
        d.max_listeners = MAX_LISTENERS;
        d.mtu = self.net.stack.mtu() as u32;
        d.mac = self.net.stack.mac();
        d
    }

    /// The device's addresses as LIST_ADDRS reports them: the link-local one first.
    fn addr_list(&self) -> AddrList {
        let mut l = AddrList::new_zeroed();
        let stack = &self.net.stack;
        let ll = (stack.link_local(), 64u8, ADDR_FLAG_LINK_LOCAL);
        let configured = stack.addresses().iter().map(|&(a, p)| (a, p, 0));
        for (e, (addr, prefix_len, flags)) in l
            .entries
            .iter_mut()
            .zip(std::iter::once(ll).chain(configured))
        {
            e.addr = addr.octets();
            e.prefix_len = prefix_len;
            e.flags = flags;
            l.count += 1;
        }
        l
    }

    fn add_addr(&mut self, addr: Ipv6Addr, prefix_len: u8) -> Result<Results, u16> {
        let net = &mut self.net;
        if net.stack.is_local(&addr) {
            return Err(ADMIN_STATUS_ADDR_IN_USE);
        }
        if net.stack.addresses().len() >= MAX_ADDRS as usize {
            return Err(ADMIN_STATUS_NO_RESOURCES);
        }
        // Another function's address on the same adapter: ADDR_IN_USE.
        self.claim_identity(None, Some(addr))?;
        let net = &mut self.net;
        net.stack.add_address(addr, prefix_len);
        net.flush(); // its duplicate address detection probe
        Ok((0, 0, 0))
    }

    fn create_ctx(&mut self, mem: &GuestMemoryMmap, gpa: u64) -> Result<Results, u16> {
        let id = (0..pci::DOORBELL_PAGES).find(|p| !self.objects.contexts.contains_key(p));
        let id = id.ok_or(ADMIN_STATUS_NO_RESOURCES)?;
        let doorbell = DoorbellPage::new(mem, gpa).ok_or(ADMIN_STATUS_BAD_ADDRESS)?;
        // Two live contexts on one page would let one process ring the other's QPs.
        if self
            .objects
            .contexts
            .values()
            .any(|c| c.doorbell == doorbell)
        {
            return Err(ADMIN_STATUS_BAD_ADDRESS);
        }
        doorbell.clear(mem);
        doorbell.store(mem, doorbell::DB_ENGINE_SLEEPING, self.sleeping as u32);
        self.objects.contexts.insert(
            id,
            Context {
                doorbell,
                seen_change_count: 0,
                qp_slots: vec![None; doorbell::DB_QP_SLOTS as usize],
                cq_slots: vec![None; doorbell::DB_CQ_SLOTS as usize],
            },
        );
        Ok((id as u64, 0, 0))
    }

    fn destroy_ctx(&mut self, mem: &GuestMemoryMmap, ctx: u32) -> Result<Results, u16> {
        if !self.objects.contexts.contains_key(&ctx) {
            return Err(ADMIN_STATUS_BAD_HANDLE);
        }
        // The process is gone: its rings go with it, so no flush CQEs, but pending admin
        // commands still get their (cancelled) completions.
        let qps: Vec<u32> = self
            .objects
            .qps
            .iter()
            .filter(|(_, q)| q.ctx == ctx)
            .map(|(&id, _)| id)
            .collect();
        for id in qps {
            self.remove_qp(mem, id, false);
        }
        let listeners: Vec<u32> = self
            .objects
            .listeners
            .iter()
            .filter(|(_, l)| l.ctx == ctx)
            .map(|(&id, _)| id)
            .collect();
        for id in listeners {
            self.remove_listener(mem, id);
        }
        self.objects.tripwires.retain(|_, t| t.ctx != ctx);
        self.objects.cqs.retain(|_, c| c.ctx != ctx);
        self.objects.mrs.retain(|_, m| m.ctx != ctx);
        self.objects.contexts.remove(&ctx);
        self.events.forget_context(ctx);
        Ok((0, 0, 0))
    }

    fn create_cq(
        &mut self,
        mem: &GuestMemoryMmap,
        ctx: u32,
        list: u64,
        npages: u32,
        depth: u32,
        vector: u16,
    ) -> Result<Results, u16> {
        let c = self
            .objects
            .contexts
            .get(&ctx)
            .ok_or(ADMIN_STATUS_BAD_HANDLE)?;
        let slot = free_slot(&c.cq_slots)?;
        if npages as u64 != (depth as u64 * cqe::CQE_SIZE as u64).div_ceil(memory::PAGE_SIZE) {
            return Err(ADMIN_STATUS_BAD_PARAM);
        }
        let pages = memory::read_page_list(mem, list, npages).ok_or(ADMIN_STATUS_BAD_ADDRESS)?;
        let ring = Ring::paged(pages, cqe::CQE_SIZE, depth).ok_or(ADMIN_STATUS_BAD_PARAM)?;
        let id = self.objects.new_id();
        let db = Self::cq_db(slot);
        let page = self.objects.contexts[&ctx].doorbell;
        self.objects.cqs.insert(
            id,
            Cq {
                ctx,
                slot,
                ring,
                vector,
                tail: 0,
                head: 0,
                armed: false,
                arm_seen: 0,
                users: 0,
                stalled: false,
            },
        );
        // A new CQ starts in a zeroed slot (a reused slot may hold old values).
        page.store(mem, db + doorbell::DB_CQ_HEAD, 0);
        page.store(mem, db + doorbell::DB_CQ_ARM_SEQ, 0);
        self.objects
            .contexts
            .get_mut(&ctx)
            .expect("checked")
            .cq_slots[slot as usize] = Some(id);
        Ok((id as u64, slot as u64, 0))
    }

    fn destroy_cq(&mut self, ctx: u32, id: u32) -> Result<Results, u16> {
        let cq = self.objects.cq_in(ctx, id).ok_or(ADMIN_STATUS_BAD_HANDLE)?;
        if cq.users > 0 {
            return Err(ADMIN_STATUS_BUSY);
        }
        let slot = cq.slot;
        self.objects.cqs.remove(&id);
        if let Some(c) = self.objects.contexts.get_mut(&ctx) {
            c.cq_slots[slot as usize] = None;
        }
        Ok((0, 0, 0))
    }

    fn create_qp(&mut self, mem: &GuestMemoryMmap, ctx: u32, q: QpRequest) -> Result<Results, u16> {
        let c = self
            .objects
            .contexts
            .get(&ctx)
            .ok_or(ADMIN_STATUS_BAD_HANDLE)?;
        let slot = free_slot(&c.qp_slots)?;
        if self.objects.cq_in(ctx, q.send_cq).is_none()
            || self.objects.cq_in(ctx, q.recv_cq).is_none()
        {
            return Err(ADMIN_STATUS_BAD_HANDLE);
        }
        let ring = |mem, list, npages: u16, depth: u32| -> Result<Ring, u16> {
            if npages as u64 != (depth as u64 * wqe::WQE_SIZE as u64).div_ceil(memory::PAGE_SIZE) {
                return Err(ADMIN_STATUS_BAD_PARAM);
            }
            let pages =
                memory::read_page_list(mem, list, npages as u32).ok_or(ADMIN_STATUS_BAD_ADDRESS)?;
            Ring::paged(pages, wqe::WQE_SIZE, depth).ok_or(ADMIN_STATUS_BAD_PARAM)
        };
        let sq = ring(mem, q.sq_page_list, q.sq_npages, q.sq_depth)?;
        let rq = ring(mem, q.rq_page_list, q.rq_npages, q.rq_depth)?;
        let id = self.objects.new_id();
        // A new QP starts at index 0 in a zeroed slot (a reused slot may hold old indices).
        let db = Self::qp_db(slot);
        let page = self.objects.contexts[&ctx].doorbell;
        page.store(mem, db + doorbell::DB_QP_SQ_TAIL, 0);
        page.store(mem, db + doorbell::DB_QP_RQ_TAIL, 0);
        let (sq_tail, rq_tail) = (0, 0);
        self.objects.qps.insert(
            id,
            Qp {
                ctx,
                slot,
                send_cq: q.send_cq,
                recv_cq: q.recv_cq,
                sq,
                rq,
                sq_head: sq_tail,
                sq_tail,
                rq_head: rq_tail,
                rq_tail,
                owed: [0; 2],
                state: QpState::Ready,
                bound: None,
                queued: false,
                kind: if q.tcp {
                    QpKind::Tcp(TcpQp::new(id, q.framing))
                } else {
                    QpKind::Udp
                },
            },
        );
        for cq in [q.send_cq, q.recv_cq] {
            self.objects.cqs.get_mut(&cq).expect("checked").users += 1;
        }
        self.objects
            .contexts
            .get_mut(&ctx)
            .expect("checked")
            .qp_slots[slot as usize] = Some(id);
        Ok((id as u64, slot as u64, 0))
    }

    fn destroy_qp(&mut self, mem: &GuestMemoryMmap, ctx: u32, id: u32) -> Result<Results, u16> {
        self.objects.qp_in(ctx, id).ok_or(ADMIN_STATUS_BAD_HANDLE)?;
        self.remove_qp(mem, id, true);
        Ok((0, 0, 0))
    }

    /// Removes a QP: unbinds it, cancels its pending commands and (if `flush`) completes
    /// its outstanding work requests with FLUSHED.
    fn remove_qp(&mut self, mem: &GuestMemoryMmap, id: u32, flush: bool) {
        if self.objects.qps.get(&id).is_some_and(Qp::is_tcp) {
            // Abort (RST) the connection, or leave it to finish a graceful close as an
            // orphan; flush the WRs it had taken: they are older than what is still in the
            // rings.
            self.tcp_qp_removed(mem, id, flush);
        }
        if flush {
            // The producer may have posted after the last scan of its page (the admin queue
            // runs before the doorbell scan): flush up to its latest indices.
            self.read_qp_doorbell(mem, id);
            self.flush_qp(mem, id);
        }
        let Some(qp) = self.objects.qps.remove(&id) else {
            return;
        };
        if let Some((_, port)) = qp.bound {
            let ports = if qp.is_tcp() {
                &mut self.objects.tcp_ports
            } else {
                &mut self.objects.udp_ports
            };
            ports.remove(&port);
        }
        // A pending ACCEPT or CONNECT ends with its QP.
        if let Some(TcpRole::Accepting { cmd, .. } | TcpRole::Connecting { cmd }) =
            qp.tcp().map(|t| t.role)
        {
            self.cancel(mem, cmd)
        }
        for cq in [qp.send_cq, qp.recv_cq] {
            if let Some(c) = self.objects.cqs.get_mut(&cq) {
                c.users -= 1;
            }
        }
        if let Some(c) = self.objects.contexts.get_mut(&qp.ctx) {
            c.qp_slots[qp.slot as usize] = None;
        }
        self.objects.busy_qps.retain(|&q| q != id);
    }

    /// Starts a registration: checks it, then reads as much of its page list as this
    /// pass's budget allows ([`Engine::go_on_registering`]).
    fn reg_mr(
        &mut self,
        mem: &GuestMemoryMmap,
        cmd: PendingCmd,
        ctx: u32,
        args: RegMrArgs,
    ) -> Outcome {
        if let Err(status) = self.may_register(&args, ctx) {
            return Outcome::Done(Err(status));
        }
        match memory::PageListReader::new(args.page_list, args.npages) {
            Some(list) => self.go_on_registering(
                mem,
                Registration {
                    cmd,
                    ctx,
                    args,
                    list,
                },
            ),
            None => Outcome::Done(Err(ADMIN_STATUS_BAD_ADDRESS)),
        }
    }

    /// Whether `ctx` may register the region `args` describe.
    fn may_register(&self, args: &RegMrArgs, ctx: u32) -> Result<(), u16> {
        if !self.objects.contexts.contains_key(&ctx) {
            return Err(ADMIN_STATUS_BAD_HANDLE);
        }
        MemoryRegion::check(args)?;
        if self.objects.mrs.len() >= MAX_MRS as usize {
            return Err(ADMIN_STATUS_NO_RESOURCES);
        }
        // Page lists are the one thing a guest can make large here: bounded per function.
        let held: u64 = self
            .objects
            .mrs
            .values()
            .map(|m| m.pages.len() as u64)
            .sum();
        if held + args.npages as u64 > self.region_pages {
            debug!(
                "REG_MR of {} pages: {held} of the function's {} held",
                args.npages, self.region_pages
            );
            return Err(ADMIN_STATUS_NO_RESOURCES);
        }
        Ok(())
    }

    /// Reads the next part of a registration's page list; once it is whole, the region is
    /// registered. Until then the registration waits in the admin queue and the commands
    /// after it wait for it.
    fn go_on_registering(&mut self, mem: &GuestMemoryMmap, mut r: Registration) -> Outcome {
        match r.list.read(mem, &mut self.admin.page_budget) {
            None => Outcome::Done(Err(ADMIN_STATUS_BAD_ADDRESS)),
            Some(false) => {
                self.admin.registering = Some(r);
                Outcome::Pending
            }
            Some(true) => Outcome::Done(self.may_register(&r.args, r.ctx).map(|()| {
                let mr = MemoryRegion::new(r.ctx, &r.args, r.list.into_pages());
                let remote = mr.access & (MR_ACCESS_REMOTE_READ | MR_ACCESS_REMOTE_WRITE) != 0;
                let lkey = self.objects.new_key();
                self.objects.mrs.insert(lkey, mr);
                // One key serves both: the rkey is only handed out when remote access is
                // allowed.
                (lkey as u64, if remote { lkey as u64 } else { 0 }, 0)
            })),
        }
    }

    pub(super) fn bind(
        &mut self,
        ctx: u32,
        id: u32,
        addr: Ipv6Addr,
        port: u16,
    ) -> Result<Results, u16> {
        let qp = self.objects.qp_in(ctx, id).ok_or(ADMIN_STATUS_BAD_HANDLE)?;
        if qp.bound.is_some() {
            return Err(ADMIN_STATUS_BAD_STATE);
        }
        if !addr.is_unspecified() && !self.net.stack.is_local(&addr) {
            return Err(ADMIN_STATUS_BAD_PARAM);
        }
        let tcp = qp.is_tcp();
        let taken = |objects: &super::objects::Objects, p: u16| {
            if tcp {
                objects.tcp_ports.contains_key(&p) || objects.listen_ports.contains_key(&p)
            } else {
                objects.udp_ports.contains_key(&p)
            }
        };
        // An ephemeral port is not one an orphan (a destroyed QP's connection finishing
        // its close) still uses: a connection from it to the same peer would clash.
        let held = |p| taken(&self.objects, p) || (tcp && self.tcp.orphan_holds_port(p));
        let port = if port == 0 {
            // The next free port after the last one handed out, round the range: a port
            // just let go (a connection reset a moment ago) is not the next one taken, so
            // a new connection does not reuse the 4-tuple its peer, or a capture, may
            // still associate with the old one.
            let start = self
                .objects
                .next_ephemeral
                .clamp(EPHEMERAL_FIRST, EPHEMERAL_LAST);
            let span = (EPHEMERAL_LAST - EPHEMERAL_FIRST) as u32 + 1;
            let p = (0..span)
                .map(|i| {
                    EPHEMERAL_FIRST + ((start - EPHEMERAL_FIRST) as u32 + i).rem_euclid(span) as u16
                })
                .find(|&p| !held(p))
                .ok_or(ADMIN_STATUS_NO_RESOURCES)?;
            self.objects.next_ephemeral = if p == EPHEMERAL_LAST {
                EPHEMERAL_FIRST
            } else {
                p + 1
            };
            p
        } else if taken(&self.objects, port) {
            return Err(ADMIN_STATUS_ADDR_IN_USE);
        } else {
            port
        };
        let ports = if tcp {
            &mut self.objects.tcp_ports
        } else {
            &mut self.objects.udp_ports
        };
        ports.insert(port, id);
        self.objects.qps.get_mut(&id).expect("checked").bound = Some((addr, port));
        Ok((port as u64, 0, 0))
    }

    fn listen(
        &mut self,
        ctx: u32,
        addr: Ipv6Addr,
        port: u16,
        backlog: u32,
    ) -> Result<Results, u16> {
        if !self.objects.contexts.contains_key(&ctx) {
            return Err(ADMIN_STATUS_BAD_HANDLE);
        }
        if !addr.is_unspecified() && !self.net.stack.is_local(&addr) {
            return Err(ADMIN_STATUS_BAD_PARAM);
        }
        if self.objects.listen_ports.contains_key(&port)
            || self.objects.tcp_ports.contains_key(&port)
        {
            return Err(ADMIN_STATUS_ADDR_IN_USE);
        }
        if self.objects.listeners.len() >= MAX_LISTENERS as usize {
            return Err(ADMIN_STATUS_NO_RESOURCES);
        }
        let accept = self.tcp_listen(addr, port, backlog)?;
        let id = self.objects.new_id();
        self.objects.listeners.insert(
            id,
            super::objects::Listener {
                ctx,
                addr,
                port,
                accept,
            },
        );
        self.objects.listen_ports.insert(port, id);
        Ok((id as u64, 0, 0))
    }

    fn destroy_listener(
        &mut self,
        mem: &GuestMemoryMmap,
        ctx: u32,
        id: u32,
    ) -> Result<Results, u16> {
        match self.objects.listeners.get(&id) {
            Some(l) if l.ctx == ctx => {
                self.remove_listener(mem, id);
                Ok((0, 0, 0))
            }
            _ => Err(ADMIN_STATUS_BAD_HANDLE),
        }
    }

    fn remove_listener(&mut self, mem: &GuestMemoryMmap, id: u32) {
        let Some(l) = self.objects.listeners.remove(&id) else {
            return;
        };
        self.objects.listen_ports.remove(&l.port);
        self.tcp_unlisten(l);
        // QPs offered to it go back to idle; their accepts are cancelled.
        let waiting: Vec<(u32, PendingCmd)> = self
            .objects
            .qps
            .iter()
            .filter_map(|(&q, qp)| match qp.tcp()?.role {
                TcpRole::Accepting { listener, cmd } if listener == id => Some((q, cmd)),
                _ => None,
            })
            .collect();
        for (q, cmd) in waiting {
            self.objects.tcp_qp_mut(q).expect("listed").role = TcpRole::Idle;
            self.cancel(mem, cmd);
        }
    }

    fn accept(
        &mut self,
        mem: &GuestMemoryMmap,
        ctx: u32,
        listener: u32,
        qp_id: u32,
        cmd: &AdminCmd,
    ) -> Outcome {
        if self
            .objects
            .listeners
            .get(&listener)
            .is_none_or(|l| l.ctx != ctx)
        {
            return Outcome::Done(Err(ADMIN_STATUS_BAD_HANDLE));
        }
        let Some(qp) = self.objects.qps.get_mut(&qp_id).filter(|q| q.ctx == ctx) else {
            return Outcome::Done(Err(ADMIN_STATUS_BAD_HANDLE));
        };
        let (bound, ready) = (qp.bound.is_some(), qp.state == QpState::Ready);
        let Some(t) = qp
            .tcp_mut()
            .filter(|t| t.role == TcpRole::Idle && !bound && ready)
        else {
            return Outcome::Done(Err(ADMIN_STATUS_BAD_STATE));
        };
        t.role = TcpRole::Accepting {
            listener,
            cmd: PendingCmd {
                cmd_id: cmd.cmd_id,
                opcode: cmd.opcode,
            },
        };
        // A connection the device already accepted is taken at once; otherwise the QP
        // waits for the next one.
        match self.tcp_accept(mem, listener, qp_id) {
            Some(r) => Outcome::Done(Ok(r)),
            None => Outcome::Pending,
        }
    }

    fn connect(
        &mut self,
        mem: &GuestMemoryMmap,
        ctx: u32,
        qp_id: u32,
        addr: Ipv6Addr,
        port: u16,
        cmd: &AdminCmd,
    ) -> Outcome {
        let Some(qp) = self.objects.qps.get_mut(&qp_id).filter(|q| q.ctx == ctx) else {
            return Outcome::Done(Err(ADMIN_STATUS_BAD_HANDLE));
        };
        let ready = qp.state == QpState::Ready;
        let Some(t) = qp.tcp_mut().filter(|t| t.role == TcpRole::Idle && ready) else {
            return Outcome::Done(Err(ADMIN_STATUS_BAD_STATE));
        };
        // The command waits for the handshake (or its failure), or until the QP is
        // destroyed (CANCELLED).
        t.role = TcpRole::Connecting {
            cmd: PendingCmd {
                cmd_id: cmd.cmd_id,
                opcode: cmd.opcode,
            },
        };
        match self.tcp_connect(mem, ctx, qp_id, addr, port) {
            Ok(()) => Outcome::Pending,
            Err(s) => {
                if let Some(t) = self.objects.tcp_qp_mut(qp_id) {
                    t.role = TcpRole::Idle;
                }
                Outcome::Done(Err(s))
            }
        }
    }

    /// A CONNECT's or ACCEPT's iWARP parameters for QP `qp` of `ctx`: kept on an iWARP QP
    /// (its private data read now), all zero on any other (else `BAD_PARAM`). An unknown
    /// QP is left to the command to refuse.
    fn iwarp_args_take(
        &mut self,
        mem: &GuestMemoryMmap,
        ctx: u32,
        qp: u32,
        iwarp: &IwarpConnArgs,
    ) -> Result<(), u16> {
        let Some(q) = self.objects.qp_in(ctx, qp) else {
            return Ok(());
        };
        if !q.tcp().is_some_and(|t| t.is_iwarp()) {
            return match iwarp.as_bytes().iter().all(|&b| b == 0) {
                true => Ok(()),
                false => Err(ADMIN_STATUS_BAD_PARAM),
            };
        }
        let local = Self::iwarp_local(mem, iwarp)?;
        self.iwarp_prepare(qp, local);
        Ok(())
    }

    /// Byte offset of a QP's doorbell slot in its context's doorbell page.
    pub(super) fn qp_db(slot: u32) -> u32 {
        doorbell::DB_QP_BASE + slot * doorbell::DB_QP_STRIDE
    }

    /// Byte offset of a CQ's doorbell slot in its context's doorbell page.
    pub(super) fn cq_db(slot: u32) -> u32 {
        doorbell::DB_CQ_BASE + slot * doorbell::DB_CQ_STRIDE
    }
}
