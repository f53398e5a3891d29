//! The connection-management unit of TCP QPs: QPs created and destroyed, LISTEN, ACCEPT,
//! CONNECT and CLOSE, the connection events (established, closed, reset, timed out) turned
//! into command completions, asynchronous events and flushed WRs, and the connections a
//! listener accepted before any QP claimed them. (A listener that holds iWARP connection
//! requests keeps its connections in `iwarp::requests` instead.)

use std::collections::VecDeque;
use std::net::Ipv6Addr;
use std::time::Instant;

use log::debug;
use qpip_abi::admin::*;
use vm_memory::GuestMemoryMmap;
use zerocopy::IntoBytes;

use crate::net::tcp::{self, ConnId, Event, FourTuple, State};

use super::*;
use crate::engine::admin::{Outcome, Results};
use crate::engine::decode;
use crate::engine::objects::{Listener, PendingCmd};
use crate::engine::ports::Proto;
use crate::engine::tcp::TcpRole;
use crate::engine::Engine;

impl Engine {
    /// Raises an asynchronous event about a TCP QP that carries a connection (an event
    /// about a connection the owner is still waiting for is its CONNECT's completion).
    pub(super) fn tcp_async_event(&mut self, qp: u32, kind: u16, reason: u8) {
        let Some(q) = self.objects.qp(qp) else {
            return;
        };
        if q.tcp().map(|t| t.role) != Some(TcpRole::Connected) || !q.is_ready() {
            return;
        }
        debug!("QP {qp}: asynchronous event {kind} (reason {reason})");
        self.events.stage(crate::engine::events::AsyncEvent {
            ctx: q.home().ctx,
            object: qp,
            kind,
            reason,
        });
    }

    /// A TCP QP has left the tables: a pending ACCEPT or CONNECT ends with it.
    pub(in crate::engine) fn tcp_qp_gone(&mut self, mem: &GuestMemoryMmap, t: &TcpQp) {
        if let TcpRole::Accepting { cmd, .. } | TcpRole::Connecting { cmd } = t.role {
            self.cancel(mem, cmd)
        }
    }

    /// A TCP QP is being destroyed: its connection becomes an orphan if it was closed
    /// gracefully and nothing would be lost, else it is aborted (RST); the WRs the QP had
    /// taken complete FLUSHED (if `flush`), a pending CLOSE is cancelled.
    pub(in crate::engine) fn tcp_qp_removed(
        &mut self,
        mem: &GuestMemoryMmap,
        id: u32,
        flush: bool,
    ) {
        for l in self.objects.listeners_mut() {
            l.accept_mut().parked.retain(|&q| q != id);
        }
        // The QP itself goes after this (admin's remove_qp): its CQs are still named.
        let Some(q) = self.objects.qp_mut(id) else {
            return;
        };
        let (send_cq, recv_cq) = (q.send_cq(), q.recv_cq());
        let Some(t) = q.tcp_mut() else {
            return;
        };
        let (conn, unread, close_cmd) = (t.conn.take(), t.rx.holds_unread(), t.close_cmd.take());
        if let Some(conn) = conn {
            let now = Instant::now();
            // Bytes received and never read would be lost without a word: a reset tells
            // the peer (as Linux's close() does with unread data).
            let orphaned = !unread && self.tcp.table.orphan(conn, now).is_ok();
            if orphaned {
                debug!("QP {id}: its closed connection finishes without it");
                // Whatever is due goes out; its events from now on concern nobody.
                self.tcp_service(mem, conn, now);
            } else {
                self.tcp_abort(conn);
            }
        }
        if let Some(cmd) = close_cmd {
            self.cancel(mem, cmd);
        }
        if flush && self.objects.tcp_qp(id).is_some_and(|t| t.is_iwarp()) {
            self.iwarp_flush(mem, id);
        } else if flush {
            let t = self.objects.tcp_qp_mut(id).expect("still there");
            let entries: Vec<TxEntry> = t.tx.entries.drain(..).collect();
            t.rx.flush();
            let done = std::mem::take(&mut t.rx.done);
            self.flush_sends(mem, id, send_cq, entries);
            for c in done {
                self.post_cqe(mem, recv_cq, c);
            }
        }
    }

    /// DEREG_MR took region `key` of context `ctx` away. A region is invalid the moment
    /// it is deregistered: every TCP QP of the context that holds a WR in it, or serves an
    /// iWARP Read Response from it, fails now — its connection is reset (a byte sent once
    /// could otherwise be sent again from the freed pages), the WRs in the region complete
    /// with a protection error (`CQE_DETAIL_REGION_GONE`), the rest FLUSHED, and an
    /// `ASYNC_EVENT_QP_ERROR` says why. UDP QPs keep no WR past its completion.
    pub(in crate::engine) fn tcp_region_gone(&mut self, mem: &GuestMemoryMmap, ctx: u32, key: u32) {
        let users: Vec<u32> = self
            .objects
            .qps()
            .filter(|(_, q)| q.home().ctx == ctx && q.tcp().is_some_and(|t| t.uses_region(key)))
            .map(|(id, _)| id)
            .collect();
        for id in users {
            debug!("QP {id}: region {key:#x} deregistered under its WRs; the QP fails");
            self.tcp_async_event(id, ASYNC_EVENT_QP_ERROR, ASYNC_REASON_REGION_GONE);
            let t = self.objects.tcp_qp_mut(id).expect("listed");
            t.region_gone(key);
            if let Some(conn) = t.conn.take() {
                self.tcp_abort(conn);
            }
            self.tcp_fail(mem, id, ADMIN_STATUS_CANCELLED);
        }
    }

    /// Resets connection `conn` and forgets it: the RST goes out, nothing is read from
    /// guest memory for it again.
    pub(super) fn tcp_abort(&mut self, conn: ConnId) {
        let now = Instant::now();
        if let Some(e) = self.tcp.table.get_mut(conn) {
            e.conn.abort();
            while let Some(o) = e.conn.poll_transmit(now, &mut tcp::NoData) {
                self.tcp.outbox.push(o);
            }
        }
        self.tcp.table.remove(conn);
    }

    /// The QP's connection failed (reset, timeout): the QP moves to the error state, its
    /// WRs are flushed, pending commands complete with `status`.
    pub(super) fn tcp_fail(&mut self, mem: &GuestMemoryMmap, id: u32, status: u16) {
        let Some(qp) = self.objects.qp_mut(id) else {
            return;
        };
        let send_cq = qp.send_cq();
        qp.fail();
        let Some(t) = qp.tcp_mut() else {
            return;
        };
        if let TcpRole::Connecting { cmd } = t.role {
            t.role = TcpRole::Idle;
            self.finish_cmd(mem, cmd, status, (0, 0, 0));
        }
        let t = self.objects.tcp_qp_mut(id).expect("looked up");
        t.conn = None;
        if t.is_iwarp() {
            if let Some(cmd) = t.close_cmd.take() {
                self.finish_cmd(mem, cmd, status, (0, 0, 0));
            }
            if let Some(TcpRole::Accepting { cmd, .. }) = self.objects.tcp_qp(id).map(|t| t.role) {
                self.objects.tcp_qp_mut(id).expect("there").role = TcpRole::Idle;
                self.finish_cmd(mem, cmd, status, (0, 0, 0));
            }
            self.iwarp_error(mem, id);
            return;
        }
        let close = t.close_cmd.take();
        let entries: Vec<TxEntry> = t.tx.entries.drain(..).collect();
        t.rx.flush();
        if let Some(cmd) = close {
            self.finish_cmd(mem, cmd, status, (0, 0, 0));
        }
        self.flush_sends(mem, id, send_cq, entries);
        self.post_rx_done(mem, id);
        // What is still in the rings completes FLUSHED now too, so every completion comes
        // before the asynchronous event staged with the failure (delivered at the end of
        // the pass); what a full CQ cannot take yet, the send queue turn flushes later.
        self.read_qp_doorbell(mem, id);
        self.flush_qp(mem, id);
        self.objects.mark_busy(id);
    }

    /// LISTEN: the port is listened to in the connection table; the listener keeps the
    /// rendezvous returned.
    pub(in crate::engine) fn tcp_listen(
        &mut self,
        addr: Ipv6Addr,
        port: u16,
        backlog: u32,
        requests: bool,
    ) -> Result<AcceptQueue, u16> {
        let backlog = match backlog as usize {
            0 => MAX_BACKLOG,
            b => b.min(MAX_BACKLOG),
        };
        let cfg = self.tcp.cfg;
        self.tcp
            .table
            .listen(tcp::listener::Listener::new(
                addr,
                port,
                cfg,
                backlog,
                true,
                Instant::now(),
            ))
            .map_err(|_| ADMIN_STATUS_ADDR_IN_USE)?;
        Ok(AcceptQueue {
            backlog,
            parked: VecDeque::new(),
            ready: VecDeque::new(),
            requests: requests.then(iwarp::Requests::default),
        })
    }

    /// A listener goes away: connections waiting for an ACCEPT are reset.
    pub(in crate::engine) fn tcp_unlisten(&mut self, l: Listener) {
        self.tcp.table.unlisten(l.addr(), l.port());
        let now = Instant::now();
        for r in l.into_accept().ready {
            if let Some(e) = self.tcp.table.get_mut(r.conn) {
                e.conn.abort();
                while let Some(o) = e.conn.poll_transmit(now, &mut tcp::NoData) {
                    self.tcp.outbox.push(o);
                }
            }
            self.tcp.table.remove(r.conn);
        }
    }

    /// ACCEPT: a connection already waiting is given to the QP at once; otherwise the QP
    /// waits (oldest first) for the next one. None: pending.
    pub(in crate::engine) fn tcp_accept(
        &mut self,
        mem: &GuestMemoryMmap,
        listener: u32,
        qp: u32,
    ) -> Option<Results> {
        let l = self.objects.listener_mut(listener)?.accept_mut();
        while let Some(r) = l.ready.pop_front() {
            if self.tcp.table.get(r.conn).is_some() {
                return self.tcp_claim(mem, r.conn, qp, r.peer_closed);
            }
        }
        l.parked.push_back(qp);
        None
    }

    /// Gives connection `conn` to QP `qp`. Returns the ACCEPT results, or None for an
    /// iWARP QP, whose ACCEPT completes once the MPA request has been answered.
    pub(super) fn tcp_claim(
        &mut self,
        mem: &GuestMemoryMmap,
        conn: ConnId,
        qp: u32,
        peer_closed: bool,
    ) -> Option<Results> {
        self.tcp_claim_with(mem, conn, qp, peer_closed, &[])
    }

    /// [`Engine::tcp_claim`], for an iWARP QP with the MPA request its listener read
    /// (`request`, the first bytes of the stream; empty if the QP reads it itself).
    fn tcp_claim_with(
        &mut self,
        mem: &GuestMemoryMmap,
        conn: ConnId,
        qp: u32,
        peer_closed: bool,
        request: &[u8],
    ) -> Option<Results> {
        let now = Instant::now();
        let e = self.tcp.table.get_mut(conn).expect("caller checked");
        e.tag = Some(qp);
        let tuple = e.conn.tuple();
        let t = self.objects.tcp_qp_mut(qp).expect("TCP QP");
        t.conn = Some(conn);
        e.conn.set_keepalive(t.keepalive, now);
        if t.is_iwarp() {
            // What the peer sent before the QP took it (the MPA request) is read now.
            self.iwarp_claimed(qp);
            let e = self.tcp.table.get_mut(conn).expect("caller checked");
            let mut sink = self.objects.iwarp_sink(mem, qp).expect("an iWARP QP");
            // The request the listener read comes first, then what followed it.
            sink.iw.receive(&sink.env, request);
            e.conn.recv_space_changed(now, &mut sink);
            self.iwarp_settle(mem, qp);
            self.tcp_service(mem, conn, now);
            debug!(
                "QP {qp}: took a connection from [{}]:{}, MPA request awaited",
                tuple.remote, tuple.remote_port
            );
            return None;
        }
        t.rx.eof |= peer_closed;
        e.conn
            .recv_space_changed(now, &mut QpSink { mem, rx: &mut t.rx });
        settle_with(Some(&mut e.conn), mem, &mut t.rx, now);
        t.role = TcpRole::Connected;
        self.post_rx_done(mem, qp);
        self.tcp_service(mem, conn, now);
        // Sends posted while the QP waited can go now.
        self.objects.mark_busy(qp);
        debug!(
            "QP {qp}: accepted a connection from [{}]:{}",
            tuple.remote, tuple.remote_port
        );
        Some(peer_results(tuple.remote, tuple.remote_port))
    }

    /// CONNECT. Err: the command fails at once; Ok: pending until established.
    pub(in crate::engine) fn tcp_connect(
        &mut self,
        mem: &GuestMemoryMmap,
        ctx: u32,
        qp: u32,
        remote: Ipv6Addr,
        remote_port: u16,
    ) -> Result<(), u16> {
        if remote_port == 0 || !decode::is_unicast(&remote) {
            return Err(ADMIN_STATUS_BAD_PARAM);
        }
        let bound = self.objects.qp(qp).expect("caller checked").bound();
        let local = match bound {
            Some((a, _)) if !a.is_unspecified() => a,
            // The device itself, or a destination the link cannot reach (treated as a
            // silent peer: the SYN is dropped and the CONNECT ends in TIMEOUT, or
            // CANCELLED if the QP goes first).
            _ => self.net.stack.select_source(&remote),
        };
        let local_port = match bound {
            Some((_, p)) => p,
            None => self.bind(ctx, qp, Ipv6Addr::UNSPECIFIED, 0, None, false)?.0 as u16,
        };
        let tuple = FourTuple {
            local,
            local_port,
            remote,
            remote_port,
        };
        let now = Instant::now();
        let mut cfg = self.tcp.cfg;
        cfg.keepalive = self.objects.tcp_qp(qp).expect("TCP QP").keepalive;
        let conn = self.tcp.table.connect(tuple, now, &cfg, qp).map_err(|_| {
            // Another connection (a closing one whose QP is gone, say) has the four-tuple.
            let held = self
                .tcp
                .table
                .lookup(&tuple)
                .and_then(|id| self.tcp.table.get(id));
            debug!(
                "QP {qp}: CONNECT [{}]:{} -> [{}]:{} refused, the four-tuple is taken ({:?})",
                tuple.local,
                tuple.local_port,
                tuple.remote,
                tuple.remote_port,
                held.map(|e| (e.conn.state(), e.tag))
            );
            ADMIN_STATUS_ADDR_IN_USE
        })?;
        let t = self.objects.tcp_qp_mut(qp).expect("TCP QP");
        t.conn = Some(conn);
        let e = self.tcp.table.get_mut(conn).expect("just made");
        if t.is_iwarp() {
            let mut sink = self.objects.iwarp_sink(mem, qp).expect("an iWARP QP");
            e.conn.recv_space_changed(now, &mut sink);
        } else {
            e.conn
                .recv_space_changed(now, &mut QpSink { mem, rx: &mut t.rx });
        }
        self.tcp_service(mem, conn, now);
        Ok(())
    }

    /// SET_QP_OPT KEEPALIVE: kept for the connection the QP gets, and applied to the one
    /// it carries now.
    pub(in crate::engine) fn tcp_set_keepalive(
        &mut self,
        qp: u32,
        keepalive: Option<tcp::Keepalive>,
    ) -> Result<Results, u16> {
        let t = self.objects.tcp_qp_mut(qp).ok_or(ADMIN_STATUS_BAD_PARAM)?;
        t.keepalive = keepalive;
        if let Some(conn) = t.conn {
            if let Some(e) = self.tcp.table.get_mut(conn) {
                e.conn.set_keepalive(keepalive, Instant::now());
                self.tcp.table.update(conn);
            }
        }
        Ok((0, 0, 0))
    }

    /// CLOSE: FIN after the queued sends. Err: fails at once; Ok: pending.
    pub(in crate::engine) fn tcp_close(
        &mut self,
        mem: &GuestMemoryMmap,
        qp: u32,
        cmd: PendingCmd,
    ) -> Result<(), u16> {
        let t = self.objects.tcp_qp(qp).ok_or(ADMIN_STATUS_BAD_STATE)?;
        let (Some(conn), None, TcpRole::Connected) = (t.conn, t.close_cmd, t.role) else {
            return Err(ADMIN_STATUS_BAD_STATE);
        };
        let iwarp = t.is_iwarp();
        // Sends posted before the CLOSE go first — on an iWARP QP as records of its stream
        // (taken as plain TCP sends, their bytes would go out unframed, from no record).
        self.read_qp_doorbell(mem, qp);
        if iwarp {
            self.iwarp_take_sends(mem, qp, u32::MAX);
        } else {
            self.tcp_take_sends(mem, qp, u32::MAX);
        }
        let t = self.objects.tcp_qp_mut(qp).expect("checked");
        t.close_cmd = Some(cmd);
        if let Some(e) = self.tcp.table.get_mut(conn) {
            e.conn.close();
        }
        self.tcp_service(mem, conn, Instant::now());
        Ok(())
    }

    pub(super) fn finish_cmd(
        &mut self,
        mem: &GuestMemoryMmap,
        cmd: PendingCmd,
        status: u16,
        r: Results,
    ) {
        self.complete_async(mem, cmd, status, r);
    }

    /// A pending CLOSE completes once our FIN is acknowledged.
    pub(super) fn tcp_check_close(&mut self, mem: &GuestMemoryMmap, qp: u32, id: ConnId) {
        let Some(t) = self.objects.tcp_qp_mut(qp) else {
            return;
        };
        if t.close_cmd.is_none() {
            return;
        }
        let done = match self.tcp.table.get(id) {
            Some(e) => matches!(
                e.conn.state(),
                State::FinWait2 | State::TimeWait | State::Closed
            ),
            None => true,
        };
        if done {
            let cmd = t.close_cmd.take().expect("checked");
            self.finish_cmd(mem, cmd, ADMIN_STATUS_OK, (0, 0, 0));
        }
    }

    pub(super) fn tcp_event(&mut self, mem: &GuestMemoryMmap, qp: u32, id: ConnId, ev: Event) {
        match ev {
            Event::Established => {
                let tuple = match self.tcp.table.get(id) {
                    Some(e) => e.conn.tuple(),
                    None => return,
                };
                if self.objects.tcp_qp(qp).is_some_and(|t| t.is_iwarp()) {
                    // The CONNECT waits for the MPA reply.
                    if matches!(
                        self.objects.tcp_qp(qp).map(|t| t.role),
                        Some(TcpRole::Connecting { .. })
                    ) {
                        self.iwarp_established(mem, qp);
                    }
                    return;
                }
                if let Some(t) = self.objects.tcp_qp_mut(qp) {
                    if let TcpRole::Connecting { cmd } = t.role {
                        t.role = TcpRole::Connected;
                        self.finish_cmd(
                            mem,
                            cmd,
                            ADMIN_STATUS_OK,
                            peer_results(tuple.remote, tuple.remote_port),
                        );
                    }
                }
                self.objects.mark_busy(qp);
            }
            Event::Acked { .. } if self.objects.tcp_qp(qp).is_some_and(|t| t.is_iwarp()) => {
                self.iwarp_complete(mem, qp)
            }
            Event::Acked { upto } => self.tcp_complete_sends(mem, qp, upto),
            Event::DataArrived { .. } | Event::PeerClosed
                if self.objects.tcp_qp(qp).is_some_and(|t| t.is_iwarp()) =>
            {
                if ev == Event::PeerClosed && !self.iwarp_over(qp) {
                    self.tcp_async_event(qp, ASYNC_EVENT_PEER_CLOSED, 0);
                }
            }
            Event::DataArrived { push, .. } => {
                if let Some(t) = self.objects.tcp_qp_mut(qp) {
                    if push.is_some() {
                        t.rx.push = true;
                        let conn = self.tcp.table.get_mut(id).map(|e| &mut e.conn);
                        settle_with(conn, mem, &mut t.rx, Instant::now());
                    }
                }
                self.post_rx_done(mem, qp);
            }
            Event::PeerClosed => {
                if let Some(t) = self.objects.tcp_qp_mut(qp) {
                    t.rx.eof = true;
                    t.rx.settle();
                }
                self.post_rx_done(mem, qp);
            }
            // Raised before the QP leaves the ready state; delivered after the flush
            // completions (at the end of the engine's pass).
            Event::Reset => {
                debug!("QP {qp}: connection reset");
                self.tcp_async_event(qp, ASYNC_EVENT_QP_ERROR, ASYNC_REASON_PEER_RESET);
                self.tcp_fail(mem, qp, ADMIN_STATUS_REFUSED);
            }
            Event::TimedOut => {
                debug!("QP {qp}: connection timed out");
                self.tcp_async_event(qp, ASYNC_EVENT_QP_ERROR, ASYNC_REASON_TIMEOUT);
                self.tcp_fail(mem, qp, ADMIN_STATUS_TIMEOUT);
            }
            Event::Unreachable => {
                debug!("QP {qp}: destination unreachable");
                self.tcp_async_event(qp, ASYNC_EVENT_QP_ERROR, ASYNC_REASON_UNREACHABLE);
                self.tcp_fail(mem, qp, ADMIN_STATUS_UNREACHABLE);
            }
            Event::Closed => {
                if let Some(t) = self.objects.tcp_qp_mut(qp) {
                    if let TcpRole::Connecting { cmd } = t.role {
                        t.role = TcpRole::Idle;
                        self.finish_cmd(mem, cmd, ADMIN_STATUS_CANCELLED, (0, 0, 0));
                    }
                }
                if let Some(t) = self.objects.tcp_qp_mut(qp) {
                    if let Some(cmd) = t.close_cmd.take() {
                        self.finish_cmd(mem, cmd, ADMIN_STATUS_OK, (0, 0, 0));
                    }
                }
            }
        }
    }

    /// Events of a connection the device accepted and no QP has taken yet.
    pub(super) fn tcp_unclaimed_events(
        &mut self,
        mem: &GuestMemoryMmap,
        id: ConnId,
        events: &[Event],
    ) {
        for ev in events {
            match ev {
                Event::Established => {
                    let Some(e) = self.tcp.table.get(id) else {
                        return;
                    };
                    let port = e.conn.tuple().local_port;
                    let Some(lid) = self.objects.ports().listener(port) else {
                        self.tcp_abort_unclaimed(id);
                        continue;
                    };
                    let Some(l) = self.objects.listener_mut(lid) else {
                        self.tcp_abort_unclaimed(id);
                        continue;
                    };
                    let l = l.accept_mut();
                    if l.requests.is_some() {
                        self.iwarp_request_arrived(mem, lid, id);
                        continue;
                    }
                    if let Some(qp) = l.parked.pop_front() {
                        let cmd = match self.objects.tcp_qp(qp).map(|t| t.role) {
                            Some(TcpRole::Accepting { cmd, .. }) => cmd,
                            _ => continue,
                        };
                        if let Some(r) = self.tcp_claim(mem, id, qp, false) {
                            self.finish_cmd(mem, cmd, ADMIN_STATUS_OK, r);
                        }
                        return; // the QP's service took over
                    } else if l.ready.len() < l.backlog {
                        l.ready.push_back(Ready {
                            conn: id,
                            peer_closed: false,
                        });
                    } else {
                        self.tcp_abort_unclaimed(id);
                    }
                }
                Event::PeerClosed | Event::Acked { .. } if self.tcp.held.contains_key(&id) => {
                    let l = self.tcp.held[&id];
                    self.iwarp_request_events(l, id, *ev);
                }
                Event::PeerClosed => {
                    for l in self.objects.listeners_mut() {
                        if let Some(r) = l.accept_mut().ready.iter_mut().find(|r| r.conn == id) {
                            r.peer_closed = true;
                        }
                    }
                }
                Event::Reset | Event::TimedOut | Event::Unreachable | Event::Closed => {
                    self.forget_ready(id)
                }
                Event::Acked { .. } | Event::DataArrived { .. } => {}
            }
        }
    }

    /// Connection `id` is gone: no listener offers it any more.
    pub(super) fn forget_ready(&mut self, id: ConnId) {
        for l in self.objects.listeners_mut() {
            l.accept_mut().ready.retain(|r| r.conn != id);
        }
        self.iwarp_request_gone(id);
    }

    pub(super) fn tcp_abort_unclaimed(&mut self, id: ConnId) {
        if let Some(e) = self.tcp.table.get_mut(id) {
            e.conn.abort();
        }
    }
}

/// The connection-management admin commands (the admin queue decodes and dispatches them).
impl Engine {
    pub(in crate::engine) fn listen(
        &mut self,
        ctx: u32,
        addr: Ipv6Addr,
        port: u16,
        backlog: u32,
        requests: bool,
    ) -> Result<Results, u16> {
        if !self.objects.has_context(ctx) {
            return Err(ADMIN_STATUS_BAD_HANDLE);
        }
        if !addr.is_unspecified() && !self.net.stack.is_local(&addr) {
            return Err(ADMIN_STATUS_BAD_PARAM);
        }
        if self.objects.ports().taken(Proto::Tcp, port) {
            return Err(ADMIN_STATUS_ADDR_IN_USE);
        }
        if self.objects.listener_count() >= MAX_LISTENERS as usize {
            return Err(ADMIN_STATUS_NO_RESOURCES);
        }
        let accept = self.tcp_listen(addr, port, backlog, requests)?;
        // Checked above: no QP or listener holds the port.
        let id = self.objects.insert_listener(ctx, addr, port, accept);
        Ok((id as u64, 0, 0))
    }

    pub(in crate::engine) fn destroy_listener(
        &mut self,
        mem: &GuestMemoryMmap,
        ctx: u32,
        id: u32,
    ) -> Result<Results, u16> {
        match self.objects.listener(id) {
            Some(l) if l.ctx() == ctx => {
                self.remove_listener(mem, id);
                Ok((0, 0, 0))
            }
            _ => Err(ADMIN_STATUS_BAD_HANDLE),
        }
    }

    pub(in crate::engine) fn remove_listener(&mut self, mem: &GuestMemoryMmap, id: u32) {
        // Its port is free again.
        let Some(mut l) = self.objects.remove_listener(id) else {
            return;
        };
        if let Some(r) = l.accept_mut().requests.take() {
            self.iwarp_requests_end(mem, r);
        }
        self.tcp_unlisten(l);
        // QPs offered to it go back to idle; their accepts are cancelled.
        let waiting: Vec<(u32, PendingCmd)> = self
            .objects
            .qps()
            .filter_map(|(q, qp)| match qp.tcp()?.role {
                TcpRole::Accepting { listener, cmd } if listener == Some(id) => Some((q, cmd)),
                _ => None,
            })
            .collect();
        for (q, cmd) in waiting {
            self.objects.tcp_qp_mut(q).expect("listed").role = TcpRole::Idle;
            self.cancel(mem, cmd);
        }
    }

    pub(in crate::engine) fn accept(
        &mut self,
        mem: &GuestMemoryMmap,
        ctx: u32,
        listener: u32,
        qp_id: u32,
        request: u32,
        cmd: &AdminCmd,
    ) -> Outcome {
        // A requests listener hands its connections out with their requests only, to a
        // QP of any context (the driver, which owns them all, decides); any other
        // listener to a QP of its own context.
        let requests = match self.objects.listener(listener) {
            Some(l) if request != 0 || l.ctx() == ctx => l.accept().requests.is_some(),
            _ => return Outcome::Done(Err(ADMIN_STATUS_BAD_HANDLE)),
        };
        if requests != (request != 0) {
            return Outcome::Done(Err(ADMIN_STATUS_BAD_STATE));
        }
        let Some(qp) = self.objects.qp_in_mut(ctx, qp_id) else {
            return Outcome::Done(Err(ADMIN_STATUS_BAD_HANDLE));
        };
        let (bound, ready) = (qp.bound().is_some(), qp.is_ready());
        let Some(t) = qp
            .tcp_mut()
            .filter(|t| t.role == TcpRole::Idle && !bound && ready)
            .filter(|t| request == 0 || t.is_iwarp())
        else {
            return Outcome::Done(Err(ADMIN_STATUS_BAD_STATE));
        };
        if request != 0 {
            return self.accept_request(mem, listener, request, qp_id, cmd);
        }
        t.role = TcpRole::Accepting {
            listener: Some(listener),
            cmd: PendingCmd::of(cmd),
        };
        // A connection the device already accepted is taken at once; otherwise the QP
        // waits for the next one.
        match self.tcp_accept(mem, listener, qp_id) {
            Some(r) => Outcome::Done(Ok(r)),
            None => Outcome::Pending,
        }
    }

    /// ACCEPT of held iWARP request `request` of `listener` by idle iWARP QP `qp`: the QP
    /// takes the connection and answers the request as its own setup would have; the
    /// ACCEPT completes once the reply is out.
    fn accept_request(
        &mut self,
        mem: &GuestMemoryMmap,
        listener: u32,
        request: u32,
        qp: u32,
        cmd: &AdminCmd,
    ) -> Outcome {
        let (conn, frame) = match self.iwarp_request_take(listener, request) {
            Ok(r) => r,
            Err(s) => return Outcome::Done(Err(s)),
        };
        if self.tcp.table.get(conn).is_none() {
            return Outcome::Done(Err(ADMIN_STATUS_BAD_HANDLE));
        }
        let t = self.objects.tcp_qp_mut(qp).expect("checked");
        t.role = TcpRole::Accepting {
            listener: None,
            cmd: PendingCmd::of(cmd),
        };
        match self.tcp_claim_with(mem, conn, qp, false, &frame) {
            Some(r) => Outcome::Done(Ok(r)),
            None => Outcome::Pending,
        }
    }

    pub(in crate::engine) fn connect(
        &mut self,
        mem: &GuestMemoryMmap,
        ctx: u32,
        qp_id: u32,
        addr: Ipv6Addr,
        port: u16,
        cmd: &AdminCmd,
    ) -> Outcome {
        let Some(qp) = self.objects.qp_in_mut(ctx, qp_id) else {
            return Outcome::Done(Err(ADMIN_STATUS_BAD_HANDLE));
        };
        let ready = qp.is_ready();
        let Some(t) = qp.tcp_mut().filter(|t| t.role == TcpRole::Idle && ready) else {
            return Outcome::Done(Err(ADMIN_STATUS_BAD_STATE));
        };
        // The command waits for the handshake (or its failure), or until the QP is
        // destroyed (CANCELLED).
        t.role = TcpRole::Connecting {
            cmd: PendingCmd::of(cmd),
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
    pub(in crate::engine) fn iwarp_args_take(
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
}
