//! The admin queue: the management state machine. Fetches commands from the driver's
//! submission ring, executes them against the object tables, writes completions with the
//! phase protocol of `qpip_abi::admin`, and raises MSI-X vector 0.

mod neighbors;
mod query;
mod regions;
mod resources;
mod ring;
mod routes;

use regions::Registration;
use ring::{AdminRing, Fetched};

use std::collections::VecDeque;

use log::{debug, warn};
use qpip_abi::admin::*;
use qpip_abi::pci;
use vm_memory::GuestMemoryMmap;
use zerocopy::{FromZeros, IntoBytes};

use super::decode::{self, AdminRequest};
use super::events::Raised;
use super::objects::PendingCmd;
use super::Engine;

/// The admin queue: its rings, and the commands between passes.
#[derive(Debug, Default)]
pub struct AdminQueue {
    pub(super) ring: AdminRing,
    /// Completions that could not be written yet for lack of room (async ones).
    deferred: VecDeque<AdminCqe>,
    /// A REG_MR whose page list is still being read; the commands after it wait for it.
    registering: Option<Registration>,
    /// Page-list entries this pass may still read ([`PAGE_LIST_BUDGET`]).
    page_budget: u32,
}

/// Results of a successful command.
pub(in crate::engine) type Results = (u64, u64, u32);

impl AdminQueue {
    pub fn enable(&mut self, sq: u64, cq: u64, depth: u32) {
        *self = AdminQueue {
            ring: AdminRing::new(sq, cq, depth),
            ..Default::default()
        };
    }

    pub fn disable(&mut self) {
        *self = AdminQueue::default();
    }

    /// Writes the completions kept for lack of room, oldest first, as far as the ring has
    /// room. Returns whether any went.
    fn write_deferred(&mut self, mem: &GuestMemoryMmap) -> bool {
        let mut did = false;
        while let Some(c) = self.deferred.front().copied() {
            if !self.ring.write(mem, c) {
                break;
            }
            self.deferred.pop_front();
            did = true;
        }
        did
    }

    /// Writes a completion, or keeps it (in order) until the ring has room.
    fn complete(&mut self, mem: &GuestMemoryMmap, c: AdminCqe) {
        if !self.deferred.is_empty() || !self.ring.write(mem, c) {
            self.deferred.push_back(c);
        }
    }
}

// Every drop reason of the network has its counter in QUERY_STATS.
const _: () = assert!(crate::net::stats::DropReason::ALL.len() == STAT_NET_DROP_REASONS as usize);
const _: () = assert!(STAT_NET_DROP_BASE + STAT_NET_DROP_REASONS <= STATS_COUNT);

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

pub(in crate::engine) enum Outcome {
    Done(Result<Results, u16>),
    /// Completes later (accept, connect, close).
    Pending,
}

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
        // Deferred asynchronous completions first: they are older.
        let mut did = self.admin.write_deferred(mem);
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
            && self.admin.ring.room()
            && budget > 0
        {
            let Some(fetched) = self.admin.ring.fetch(mem) else {
                break;
            };
            budget -= 1;
            did = true;
            let cmd = match fetched {
                Fetched::Command(cmd) => cmd,
                Fetched::Unreadable(gpa) => {
                    warn!("admin command at {gpa:#x} is not in guest RAM; skipped");
                    continue;
                }
            };
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
        self.admin.complete(mem, c);
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
                // The first len / 8 counters: a buffer sized for an older, shorter Stats
                // gets what fits.
                if len < 8 {
                    return Outcome::Done(Err(ADMIN_STATUS_BAD_PARAM));
                }
                let stats = Stats {
                    counters: self.counters(),
                };
                let n = (len as usize / 8).min(STATS_COUNT as usize);
                self.write_query(mem, buf, len, &stats.as_bytes()[..n * 8])
                    .map(|_| (n as u64, 0, 0))
            }
            R::ListAddrs { buf, len } => {
                let list = self.addr_list();
                self.write_query(mem, buf, len, list.as_bytes())
                    .map(|_| (list.count as u64, 0, 0))
            }
            R::AsyncEvent => match self.events.request(PendingCmd::of(cmd)) {
                Ok(Some(r)) => {
                    self.shared.stats.add(STAT_ASYNC_EVENTS, 1);
                    Ok(r)
                }
                Ok(None) => return Outcome::Pending,
                Err(s) => Err(s),
            },
            R::SetMac(mac) => self.set_mac(mac).map(|()| (0, 0, 0)),
            R::AddAddr { addr, prefix_len } => self.add_addr(addr, prefix_len),
            R::DelAddr(addr) => self.del_addr(addr),
            R::AddRoute(r) => self.add_route(r),
            R::DelRoute {
                dest,
                prefix_len,
                metric,
            } => self.del_route(dest, prefix_len, metric),
            R::AddNeighbor(n) => self.add_neighbor(n),
            R::DelNeighbor(addr) => self.del_neighbor(addr),
            R::CreateCtx { page, flags } => self.create_ctx(mem, page, flags),
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
            R::RegMr(args) => return self.reg_mr(mem, PendingCmd::of(cmd), ctx, args),
            R::DeregMr => self.dereg_mr(mem, ctx, h),
            R::CreateTripwire(a) => self.create_tripwire(ctx, &a),
            R::DestroyTripwire => match self.objects.tripwires().get(&h) {
                Some(t) if t.ctx() == ctx => {
                    self.remove_tripwire(h);
                    Ok((0, 0, 0))
                }
                _ => Err(ADMIN_STATUS_BAD_HANDLE),
            },
            R::Bind {
                addr,
                port,
                peer,
                share,
            } => self.bind(ctx, h, addr, port, peer, share),
            R::Listen {
                addr,
                port,
                backlog,
                requests,
            } => self.listen(ctx, addr, port, backlog, requests),
            R::DestroyListener => self.destroy_listener(mem, ctx, h),
            R::Accept { qp, request, iwarp } => {
                if let Err(s) = self.iwarp_args_take(mem, ctx, qp, &iwarp) {
                    return Outcome::Done(Err(s));
                }
                return self.accept(mem, ctx, h, qp, request, cmd);
            }
            R::ConnRequest { buf, len } => return self.conn_request(mem, ctx, h, buf, len, cmd),
            R::Reject { request, iwarp } => self.reject(mem, ctx, h, request, &iwarp),
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
            R::SetKeepalive(k) => match self.objects.qp_in(ctx, h) {
                None => Err(ADMIN_STATUS_BAD_HANDLE),
                Some(_) => self.tcp_set_keepalive(h, k),
            },
            R::SetUdpPeer(peer) => match self.objects.qp_in(ctx, h) {
                None => Err(ADMIN_STATUS_BAD_HANDLE),
                Some(_) => self.objects.set_udp_peer(h, peer).map(|()| (0, 0, 0)),
            },
            R::Close => match self.objects.qp_in(ctx, h) {
                None => Err(ADMIN_STATUS_BAD_HANDLE),
                Some(qp) if !qp.may_close() => Err(ADMIN_STATUS_BAD_STATE),
                Some(_) => {
                    return match self.tcp_close(mem, h, PendingCmd::of(cmd)) {
                        Ok(()) => Outcome::Pending,
                        Err(s) => Outcome::Done(Err(s)),
                    };
                }
            },
        })
    }
}
