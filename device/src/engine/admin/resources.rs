//! The queue objects' admin commands: CREATE and DESTROY of contexts, CQs and QPs, and
//! what a QP leaves behind when it goes.

use std::net::Ipv6Addr;

use qpip_abi::admin::*;
use qpip_abi::{cqe, doorbell, pci, wqe};
use vm_memory::GuestMemoryMmap;

use super::Results;
use crate::engine::decode::{QpRequest, QpType};
use crate::engine::doorbell_page::DoorbellPage;
use crate::engine::memory::{self, Ring};
use crate::engine::objects::{Context, Cq, Home, Qp, QpKind};
use crate::engine::ports::Proto;
use crate::engine::tcp::TcpQp;
use crate::engine::Engine;
use crate::net::tcp;

/// A ring of `depth` entries of `entry_size` bytes over the `npages` pages of the page list
/// at `list`, which must be exactly as many as the ring needs.
fn ring_from_list(
    mem: &GuestMemoryMmap,
    list: u64,
    npages: u32,
    entry_size: u32,
    depth: u32,
) -> Result<Ring, u16> {
    if npages as u64 != (depth as u64 * entry_size as u64).div_ceil(memory::PAGE_SIZE) {
        return Err(ADMIN_STATUS_BAD_PARAM);
    }
    let pages = memory::read_page_list(mem, list, npages).ok_or(ADMIN_STATUS_BAD_ADDRESS)?;
    Ring::paged(pages, entry_size, depth).ok_or(ADMIN_STATUS_BAD_PARAM)
}

impl Engine {
    /// Context `ctx`, or BAD_HANDLE.
    fn context(&self, ctx: u32) -> Result<&Context, u16> {
        self.objects.context(ctx).ok_or(ADMIN_STATUS_BAD_HANDLE)
    }

    pub(super) fn create_ctx(
        &mut self,
        mem: &GuestMemoryMmap,
        gpa: u64,
        flags: u32,
    ) -> Result<Results, u16> {
        let id = (0..pci::DOORBELL_PAGES).find(|&p| !self.objects.has_context(p));
        let id = id.ok_or(ADMIN_STATUS_NO_RESOURCES)?;
        let doorbell = DoorbellPage::new(mem, gpa).ok_or(ADMIN_STATUS_BAD_ADDRESS)?;
        // Two live contexts on one page would let one process ring the other's QPs.
        if self
            .objects
            .contexts()
            .any(|(_, c)| c.doorbell() == doorbell)
        {
            return Err(ADMIN_STATUS_BAD_ADDRESS);
        }
        doorbell.clear(mem);
        doorbell.store(mem, doorbell::DB_ENGINE_SLEEPING, self.sleeping as u32);
        self.objects
            .insert_context(id, doorbell, flags & CTX_FLAG_KERNEL != 0);
        Ok((id as u64, 0, 0))
    }

    pub(super) fn destroy_ctx(&mut self, mem: &GuestMemoryMmap, ctx: u32) -> Result<Results, u16> {
        if !self.objects.has_context(ctx) {
            return Err(ADMIN_STATUS_BAD_HANDLE);
        }
        // The process is gone: its rings go with it, so no flush CQEs, but pending admin
        // commands still get their (cancelled) completions.
        let qps: Vec<u32> = self
            .objects
            .qps()
            .filter(|(_, q)| q.home().ctx == ctx)
            .map(|(id, _)| id)
            .collect();
        for id in qps {
            self.remove_qp(mem, id, false);
        }
        let listeners: Vec<u32> = self
            .objects
            .listeners()
            .filter(|(_, l)| l.ctx() == ctx)
            .map(|(id, _)| id)
            .collect();
        for id in listeners {
            self.remove_listener(mem, id);
        }
        self.objects.remove_context(ctx);
        self.events.forget_context(ctx);
        Ok((0, 0, 0))
    }

    pub(super) fn create_cq(
        &mut self,
        mem: &GuestMemoryMmap,
        ctx: u32,
        list: u64,
        npages: u32,
        depth: u32,
        vector: u16,
    ) -> Result<Results, u16> {
        let c = self.context(ctx)?;
        let slot = c.free_cq_slot().ok_or(ADMIN_STATUS_NO_RESOURCES)?;
        let page = c.doorbell();
        let ring = ring_from_list(mem, list, npages, cqe::CQE_SIZE, depth)?;
        // A new CQ starts in a zeroed slot (a reused slot may hold old values).
        page.store(mem, doorbell::cq_head(slot), 0);
        page.store(mem, doorbell::cq_arm_seq(slot), 0);
        let id = self
            .objects
            .insert_cq(Cq::new(Home { ctx, slot }, ring, vector));
        Ok((id as u64, slot as u64, 0))
    }

    pub(super) fn destroy_cq(&mut self, ctx: u32, id: u32) -> Result<Results, u16> {
        self.objects.cq_in(ctx, id).ok_or(ADMIN_STATUS_BAD_HANDLE)?;
        if !self.objects.remove_cq(id) {
            return Err(ADMIN_STATUS_BUSY);
        }
        Ok((0, 0, 0))
    }

    pub(super) fn create_qp(
        &mut self,
        mem: &GuestMemoryMmap,
        ctx: u32,
        q: QpRequest,
    ) -> Result<Results, u16> {
        let c = self.context(ctx)?;
        let slot = c.free_qp_slot().ok_or(ADMIN_STATUS_NO_RESOURCES)?;
        let page = c.doorbell();
        if q.kind == QpType::RawEth {
            self.raw_may_create(c.is_kernel())?;
        }
        if self.objects.cq_in(ctx, q.send_cq).is_none()
            || self.objects.cq_in(ctx, q.recv_cq).is_none()
        {
            return Err(ADMIN_STATUS_BAD_HANDLE);
        }
        let ring = |list, npages: u16, depth| {
            ring_from_list(mem, list, npages.into(), wqe::WQE_SIZE, depth)
        };
        let sq = ring(q.sq_page_list, q.sq_npages, q.sq_depth)?;
        let rq = ring(q.rq_page_list, q.rq_npages, q.rq_depth)?;
        // A new QP starts at index 0 in a zeroed slot (a reused slot may hold old indices).
        page.store(mem, doorbell::qp_sq_tail(slot), 0);
        page.store(mem, doorbell::qp_rq_tail(slot), 0);
        let id = self.objects.insert_qp(|id| {
            let kind = match q.kind {
                QpType::Tcp => QpKind::Tcp(TcpQp::new(id, q.framing)),
                QpType::Udp => QpKind::Udp,
                QpType::RawEth => QpKind::RawEth,
            };
            Qp::new(Home { ctx, slot }, (q.send_cq, q.recv_cq), sq, rq, kind)
        });
        if q.kind == QpType::RawEth {
            self.raw_created(id, q.framing == RAW_RX_MERGEABLE);
        }
        Ok((id as u64, slot as u64, 0))
    }

    pub(super) fn destroy_qp(
        &mut self,
        mem: &GuestMemoryMmap,
        ctx: u32,
        id: u32,
    ) -> Result<Results, u16> {
        self.objects.qp_in(ctx, id).ok_or(ADMIN_STATUS_BAD_HANDLE)?;
        self.remove_qp(mem, id, true);
        Ok((0, 0, 0))
    }

    /// Removes a QP: unbinds it, cancels its pending commands and (if `flush`) completes
    /// its outstanding work requests with FLUSHED.
    fn remove_qp(&mut self, mem: &GuestMemoryMmap, id: u32, flush: bool) {
        if self.objects.qp(id).is_none() {
            return;
        }
        // What its kind holds first (a TCP connection aborted, or left to finish a
        // graceful close as an orphan; the WRs it had taken flushed): they are older than
        // what is still in the rings.
        self.kind_destroying(mem, id, flush);
        if flush {
            // The producer may have posted after the last scan of its page (the admin queue
            // runs before the doorbell scan): flush up to its latest indices.
            self.read_qp_doorbell(mem, id);
            self.flush_qp(mem, id);
        }
        // Its port, its slot and its CQs are free again.
        let Some(qp) = self.objects.remove_qp(id) else {
            return;
        };
        self.kind_destroyed(mem, &qp);
        // Its completions still waiting for room go with it, as its flushes beyond the
        // CQs' room do.
        self.forget_waiting_completions(id, [qp.send_cq(), qp.recv_cq()]);
    }

    /// BIND: QP `id` takes `port` (0: a free ephemeral port) on `addr` (unspecified, or
    /// one of the function's). With `peer` (a TCP QP's connect from a port its driver
    /// chose), a port from which CONNECT to that peer would meet a connection it cannot
    /// take over is refused, so the driver chooses another before the connect fails.
    pub(in crate::engine) fn bind(
        &mut self,
        ctx: u32,
        id: u32,
        addr: Ipv6Addr,
        port: u16,
        peer: Option<(Ipv6Addr, u16)>,
        share: bool,
    ) -> Result<Results, u16> {
        let qp = self.objects.qp_in(ctx, id).ok_or(ADMIN_STATUS_BAD_HANDLE)?;
        if qp.bound().is_some() || qp.is_raw() {
            return Err(ADMIN_STATUS_BAD_STATE);
        }
        // Only a named UDP port is shared: TCP's four-tuples have their own rules, and an
        // ephemeral port is the QP's own.
        if share && (qp.proto() != Proto::Udp || port == 0) {
            return Err(ADMIN_STATUS_BAD_PARAM);
        }
        if !addr.is_unspecified() && !self.net.stack.is_local(&addr) {
            return Err(ADMIN_STATUS_BAD_PARAM);
        }
        let proto = qp.proto();
        if let (Some((remote, remote_port)), Proto::Tcp, 1..) = (peer, proto, port) {
            // The four-tuple CONNECT will use: its source as tcp_connect chooses it.
            let local = if addr.is_unspecified() {
                self.net.stack.select_source(&remote)
            } else {
                addr
            };
            let tuple = tcp::FourTuple {
                local,
                local_port: port,
                remote,
                remote_port,
            };
            if !self.tcp.can_connect(&tuple) {
                return Err(ADMIN_STATUS_ADDR_IN_USE);
            }
        }
        let tcp = &self.tcp;
        let closing = |p| proto == Proto::Tcp && tcp.orphan_holds_port(p);
        let port = self.objects.bind_qp(id, addr, port, share, closing)?;
        Ok((port as u64, 0, 0))
    }
}
