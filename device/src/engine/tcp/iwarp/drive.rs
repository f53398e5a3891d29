//! iWARP QPs in the engine's turns: work requests taken from the rings (sends, RDMA
//! Writes and Reads become records of the stream; receives wait for their Send), the
//! connection fed and asked for bytes, and what the protocol state produced turned into
//! what the guest sees — the CONNECT or ACCEPT completed once MPA is through, CQEs in the
//! order of their queues, and after a Terminate the QP in the error state with its
//! asynchronous event.

use std::sync::Arc;
use std::time::Instant;

use log::debug;
use qpip_abi::admin::*;
use qpip_abi::cqe::Cqe;
use qpip_abi::cqe::*;
use qpip_abi::wqe::*;
use vm_memory::GuestMemoryMmap;

use crate::engine::completion::{cqe, cqe_ok, send_op};
use crate::engine::decode::{self, Payload};
use crate::engine::memory::Span;
use crate::engine::objects::{Objects, Qp};
use crate::engine::tcp::TcpRole;
use crate::engine::Engine;
use crate::net::iwarp::wire::rdmap::ReadRequest;
use crate::net::iwarp::wire::terminate::{RdmapType, TermError};
use crate::net::tcp::{ConnId, RecvSink};

use super::rx::{Env, RecvWr};
use super::tx::{Data, OutRead, Until};
use super::{IwarpQp, Local, Outcome, Phase, WINDOW};

/// An iWARP QP's receive side as its connection's [`RecvSink`].
pub(in crate::engine::tcp) struct Sink<'a> {
    pub(in crate::engine::tcp) env: Env<'a>,
    pub(in crate::engine::tcp) iw: &'a mut IwarpQp,
}

impl RecvSink for Sink<'_> {
    fn space(&self) -> usize {
        WINDOW
    }

    fn deliver(&mut self, _offset: u64, data: &[u8]) {
        let _stage = crate::stages::span(crate::stages::Stage::Place);
        self.iw.receive(&self.env, data);
    }

    fn place_at(&mut self, offset: u64, data: &[u8]) -> bool {
        let _stage = crate::stages::span(crate::stages::Stage::Place);
        self.iw.place_ahead(&self.env, offset, data)
    }

    fn placed_in_order(&mut self, upto: u64) {
        self.iw.caught_up(upto);
    }

    fn acked(&mut self, upto: u64) {
        // Read responses the ACK covers free their slots before the Read Requests that
        // follow in the same segment are counted against this end's IRD.
        self.iw.tx.acked(upto);
    }
}

impl Objects {
    /// The iWARP state of QP `id`, with what its receive side needs of the rest.
    pub(in crate::engine::tcp) fn iwarp_sink<'a>(
        &'a mut self,
        mem: &'a GuestMemoryMmap,
        id: u32,
    ) -> Option<Sink<'a>> {
        let (q, mrs, tripwires) = self.qp_with_memory(id)?;
        let ctx = q.home().ctx;
        let iw = q.tcp_mut()?.iwarp.as_deref_mut()?;
        Some(Sink {
            env: Env {
                mem,
                mrs,
                tripwires,
                ctx,
                qp: id,
            },
            iw,
        })
    }
}

/// The CQE of a send-queue WR that completes in error (`status`, `detail`).
fn failed(wr_id: u64, qp: u32, op: u8, status: u8, detail: u32) -> Cqe {
    cqe(wr_id, qp, op, status, detail)
}

impl Engine {
    fn iwarp(&mut self, id: u32) -> Option<&mut IwarpQp> {
        self.objects.tcp_qp_mut(id)?.iwarp.as_deref_mut()
    }

    /// The MSS of QP `id`'s connection (what an FPDU must fit).
    fn iwarp_mss(&self, id: u32) -> usize {
        self.objects
            .tcp_qp(id)
            .and_then(|t| t.conn)
            .and_then(|c| self.tcp.table.get(c))
            .map_or(536, |e| e.conn.smss())
    }

    /// The parameters a CONNECT or ACCEPT brings, with its private data read from guest
    /// memory (`BAD_ADDRESS` if it is not all in one page of RAM).
    pub(in crate::engine) fn iwarp_local(
        mem: &GuestMemoryMmap,
        a: &IwarpConnArgs,
    ) -> Result<Local, u16> {
        let len = a.pd_len as u64;
        let mut private_data = vec![0u8; a.pd_len as usize];
        if len > 0 {
            let page = crate::engine::memory::PAGE_SIZE;
            if a.pd_addr / page != (a.pd_addr + len - 1) / page {
                return Err(ADMIN_STATUS_BAD_ADDRESS);
            }
            use vm_memory::{Bytes, GuestAddress};
            mem.read_slice(&mut private_data, GuestAddress(a.pd_addr))
                .map_err(|_| ADMIN_STATUS_BAD_ADDRESS)?;
        }
        Ok(Local {
            private_data,
            ird: a.ird,
            ord: a.ord,
            crc: a.flags & IWARP_CONN_CRC != 0,
            peer_to_peer: a.flags & IWARP_CONN_PEER_TO_PEER != 0,
            immediate: a.flags & IWARP_CONN_IMMEDIATE != 0,
        })
    }

    /// Keeps a CONNECT's or ACCEPT's parameters on iWARP QP `id` for its setup.
    pub(in crate::engine) fn iwarp_prepare(&mut self, id: u32, local: Local) {
        if let Some(iw) = self.iwarp(id) {
            iw.set_local(local);
        }
    }

    /// `QUERY_CONN`: what the setup of iWARP QP `id` agreed.
    pub(in crate::engine) fn iwarp_conn_info(&self, ctx: u32, id: u32) -> Result<ConnInfo, u16> {
        let qp = self.objects.qp_in(ctx, id).ok_or(ADMIN_STATUS_BAD_HANDLE)?;
        match qp.tcp().and_then(|t| t.iwarp.as_deref()) {
            Some(iw) if iw.set_up() || iw.info.flags & CONN_INFO_REJECTED != 0 => Ok(iw.info),
            _ => Err(ADMIN_STATUS_BAD_STATE),
        }
    }

    /// The TCP connection of initiator `id` is established: the MPA request goes out; the
    /// CONNECT completes with the reply.
    pub(in crate::engine::tcp) fn iwarp_established(&mut self, mem: &GuestMemoryMmap, id: u32) {
        let mss = self.iwarp_mss(id);
        if let Some(iw) = self.iwarp(id) {
            iw.start_initiator(mss);
        }
        let due = Instant::now() + self.tcp.limits.mpa_reply;
        self.tcp.mpa_due.insert((due, id));
        self.iwarp_settle(mem, id);
    }

    /// Responder `id` took its connection: the MPA request is awaited; the ACCEPT
    /// completes once it is answered.
    pub(in crate::engine::tcp) fn iwarp_claimed(&mut self, id: u32) {
        let mss = self.iwarp_mss(id);
        if let Some(iw) = self.iwarp(id) {
            iw.start_responder(mss);
        }
        let due = Instant::now() + self.tcp.limits.mpa_request;
        self.tcp.mpa_due.insert((due, id));
    }

    /// QP `id`'s MPA deadline passed: if it still waits for the peer's frame, its CONNECT
    /// or ACCEPT fails with `TIMEOUT` and the connection is reset. Returns whether it did.
    pub(in crate::engine::tcp) fn iwarp_setup_expired(
        &mut self,
        mem: &GuestMemoryMmap,
        id: u32,
    ) -> bool {
        let Some(t) = self.objects.tcp_qp_mut(id) else {
            return false;
        };
        let conn = t.conn;
        let waiting = t
            .iwarp
            .as_deref()
            .is_some_and(|iw| matches!(iw.phase(), Phase::AwaitReply | Phase::AwaitRequest));
        let cmd = match t.role {
            TcpRole::Connecting { cmd } | TcpRole::Accepting { cmd, .. } if waiting => cmd,
            _ => return false,
        };
        debug!("QP {id}: no MPA frame from the peer in time");
        t.role = TcpRole::Idle;
        t.conn = None;
        if let Some(iw) = t.iwarp.as_deref_mut() {
            iw.expire();
        }
        self.finish_cmd(mem, cmd, ADMIN_STATUS_TIMEOUT, (0, 0, 0));
        if let Some(c) = conn {
            let now = Instant::now();
            if let Some(e) = self.tcp.table.get_mut(c) {
                e.conn.abort();
                while let Some(o) = e.conn.poll_transmit(now, &mut crate::net::tcp::NoData) {
                    self.tcp.outbox.push(o);
                }
            }
            self.tcp.table.remove(c);
        }
        self.iwarp_error(mem, id);
        true
    }

    /// Takes the receive WRs posted since the last look: each waits for its Send.
    pub(in crate::engine::tcp) fn iwarp_take_recvs(
        &mut self,
        mem: &GuestMemoryMmap,
        id: u32,
    ) -> bool {
        let mut did = false;
        while let Some(super::super::rx::TakenRecv { wr_id, spans, cap }) =
            self.take_recv_wr(mem, id)
        {
            did = true;
            self.shared.stats.add(STAT_RECV_WQES, 1);
            if let Some(iw) = self.iwarp(id) {
                iw.recv_wrs.push_back(RecvWr {
                    wr_id,
                    spans,
                    cap,
                    filled: 0,
                });
            }
        }
        did
    }

    /// Takes up to `budget` send WRs as records of the stream (while the setup allows
    /// sending and, for Reads, the ORD has room). Returns (taken, more waiting).
    pub(in crate::engine::tcp) fn iwarp_take_sends(
        &mut self,
        mem: &GuestMemoryMmap,
        id: u32,
        budget: u32,
    ) -> (u32, bool) {
        let may_take = |e: &Self, qp: &Qp| {
            let Some(iw) = qp.tcp().and_then(|t| t.iwarp.as_deref()) else {
                return false;
            };
            // A Read beyond the ORD waits in the ring, and what follows it with it.
            let ord_full = iw.tx.reads.len() >= iw.conn_ord as usize;
            iw.may_send() && !(ord_full && e.next_is_read(mem, id))
        };
        let n = self.take_sends(mem, id, budget, may_take, |e, ctx, raw| {
            e.iwarp_queue_send(id, ctx, raw)
        });
        self.iwarp_settle(mem, id);
        (n, self.sends_left(id))
    }

    /// Queues send WQE `raw` of iWARP QP `id` (of context `ctx`) as records of the stream;
    /// a WR that fails its checks completes in its turn instead.
    fn iwarp_queue_send(&mut self, id: u32, ctx: u32, raw: &[u8; WQE_SIZE as usize]) {
        let wr = match decode::send_wqe(raw) {
            Ok(wr) => wr,
            Err(e) => {
                self.iwarp_push_failed(id, e.wr_id, CQE_OP_SEND, e.status, e.detail);
                return;
            }
        };
        let op = send_op(wr.opcode);
        // Immediate data only after a Write (WQE_FLAG_IMM) on a connection that agreed
        // to RFC 7306; a Read on a connection that allows none cannot go.
        let (ord, immediate) = self
            .iwarp(id)
            .map_or((0, false), |iw| (iw.conn_ord, iw.immediate()));
        let bad_imm = if wr.with_imm {
            !immediate
        } else {
            wr.imm_data != 0
        };
        if bad_imm || op == CQE_OP_RDMA_READ && ord == 0 {
            self.iwarp_push_failed(id, wr.wr_id, op, CQE_STATUS_BAD_WQE, CQE_DETAIL_NONE);
            return;
        }
        let access = if op == CQE_OP_RDMA_READ {
            MR_ACCESS_LOCAL_WRITE
        } else {
            0
        };
        let (data, len, sink, spans) = match &wr.payload {
            Payload::Inline(b) => (
                Data::Inline {
                    bytes: b.as_slice().into(),
                    off: 0,
                    len: b.len(),
                },
                b.len() as u64,
                None,
                None,
            ),
            Payload::Gather(sges) => {
                let len: u64 = sges.iter().map(|s| s.length as u64).sum();
                if len > u32::MAX as u64 {
                    self.iwarp_push_failed(id, wr.wr_id, op, CQE_STATUS_LOCAL_LENGTH, 0);
                    return;
                }
                match self.translate(ctx, sges, access) {
                    Ok(s) if op == CQE_OP_RDMA_READ => {
                        let first = sges.iter().find(|s| s.length > 0);
                        let (stag, to) = first.map_or((0, 0), |s| (s.lkey, s.addr));
                        let sink: Arc<[Span]> = s.into();
                        (Data::None, len, Some((stag, to, sink.clone())), Some(sink))
                    }
                    Ok(s) => {
                        let spans: Arc<[Span]> = s.into();
                        (
                            Data::Guest {
                                spans: spans.clone(),
                                off: 0,
                                len: len as usize,
                            },
                            len,
                            None,
                            Some(spans),
                        )
                    }
                    Err(f) => {
                        self.shared.stats.add(STAT_PROTECTION_ERRORS, 1);
                        self.iwarp_push_failed(id, wr.wr_id, op, f.status, f.detail);
                        return;
                    }
                }
            }
        };
        let iw = self.iwarp(id).expect("iWARP QP");
        let until = match op {
            CQE_OP_RDMA_READ => {
                let (stag, to, sink) = sink.expect("a Read gathers");
                iw.tx.reads.push_back(OutRead {
                    stag,
                    to,
                    size: len as u32,
                    sink,
                    placed: 0,
                    for_wr: true,
                });
                let (source_to, source_stag) = wr.remote;
                iw.tx.push_read_request(ReadRequest {
                    sink_stag: stag,
                    sink_to: to,
                    size: len as u32,
                    source_stag,
                    source_to,
                });
                Until::ReadResponse
            }
            CQE_OP_RDMA_WRITE => {
                let (to, stag) = wr.remote;
                iw.tx.push_write(data, stag, to);
                if wr.with_imm {
                    iw.tx.push_immediate(wr.imm_data);
                }
                Until::Acked(iw.tx.end)
            }
            _ => {
                iw.tx.push_send(data, wr.solicited);
                Until::Acked(iw.tx.end)
            }
        };
        iw.tx.wrs.push_back(super::tx::TxWr {
            wr_id: wr.wr_id,
            op,
            len: len as u32,
            until,
            error: None,
            spans,
        });
    }

    /// Whether the next WQE in QP `id`'s send ring is an RDMA Read.
    fn next_is_read(&self, mem: &GuestMemoryMmap, id: u32) -> bool {
        use vm_memory::Bytes;
        let at = self
            .objects
            .qp(id)
            .expect("caller checked")
            .next_send_addr();
        let mut op = [0u8; 1];
        mem.read_slice(&mut op, vm_memory::GuestAddress(at.0 + 8))
            .is_ok()
            && op[0] == WQE_OP_RDMA_READ
    }

    /// A send WR that failed its checks: it completes in its turn.
    fn iwarp_push_failed(&mut self, id: u32, wr_id: u64, op: u8, status: u8, detail: u32) {
        if let Some(iw) = self.iwarp(id) {
            iw.tx.wrs.push_back(super::tx::TxWr {
                wr_id,
                op,
                len: 0,
                until: Until::Done,
                error: Some((status, detail)),
                spans: None,
            });
        }
    }

    /// After anything happened to iWARP QP `id`: new records go to the connection, a
    /// finished setup completes its command, completions are written, a Terminate ends
    /// the QP.
    pub(in crate::engine::tcp) fn iwarp_settle(&mut self, mem: &GuestMemoryMmap, id: u32) {
        let Some(t) = self.objects.tcp_qp_mut(id) else {
            return;
        };
        let conn = t.conn;
        let Some(iw) = t.iwarp.as_deref_mut() else {
            return;
        };
        let more = iw.tx.end - iw.tx.given;
        let mut sent = false;
        if more > 0 {
            if let Some(e) = conn.and_then(|c| self.tcp.table.get_mut(c)) {
                if e.conn.queue_send(more).is_ok() {
                    sent = true;
                }
            }
            iw.tx.given = iw.tx.end;
        }
        let outcome = iw.outcome.take();
        let failure = iw.failure.take();
        let trips = std::mem::take(&mut iw.trips);
        let ahead = iw.take_placed_ahead();
        if ahead > 0 {
            self.shared.stats.add(STAT_IWARP_OOO_PLACED, ahead);
        }
        let done = std::mem::take(&mut iw.recv_done);
        let recv_cq = self.objects.qp(id).expect("there").recv_cq();
        if !done.is_empty() {
            if let Some(e) = conn.and_then(|c| self.tcp.table.get_mut(c)) {
                e.conn.ack_delivery(Instant::now());
            }
            for c in done {
                self.post_cqe(mem, recv_cq, c);
            }
        }
        if !trips.is_empty() {
            self.fire_tripwires(mem, trips);
        }
        if let Some(o) = outcome {
            self.iwarp_setup_done(mem, id, o);
        }
        self.iwarp_complete(mem, id);
        if let Some(f) = failure {
            self.iwarp_terminated(mem, id, f.error, f.received);
        }
        if sent {
            if let Some(c) = conn {
                self.tcp_service(mem, c, Instant::now());
            }
        }
    }

    /// The MPA exchange of QP `id` ended: its CONNECT or ACCEPT completes.
    fn iwarp_setup_done(&mut self, mem: &GuestMemoryMmap, id: u32, o: Outcome) {
        let Some(t) = self.objects.tcp_qp_mut(id) else {
            return;
        };
        let cmd = match t.role {
            TcpRole::Connecting { cmd } | TcpRole::Accepting { cmd, .. } => cmd,
            _ => return,
        };
        let conn = t.conn;
        let peer = conn
            .and_then(|c| self.tcp.table.get(c))
            .map(|e| e.conn.tuple());
        match (o, peer) {
            (Outcome::Up, Some(tuple)) => {
                let t = self.objects.tcp_qp_mut(id).expect("there");
                t.role = TcpRole::Connected;
                debug!(
                    "QP {id}: iWARP connection with [{}]:{} set up",
                    tuple.remote, tuple.remote_port
                );
                self.finish_cmd(
                    mem,
                    cmd,
                    ADMIN_STATUS_OK,
                    super::super::peer_results(tuple.remote, tuple.remote_port),
                );
                // Sends posted while the setup ran may go (once the peer's first FPDU
                // came, for a responder).
                self.objects.mark_busy(id);
            }
            _ => {
                debug!("QP {id}: MPA setup refused");
                let t = self.objects.tcp_qp_mut(id).expect("there");
                t.role = TcpRole::Idle;
                self.finish_cmd(mem, cmd, ADMIN_STATUS_REFUSED, (0, 0, 0));
                self.iwarp_close(id, conn);
                self.iwarp_error(mem, id);
            }
        }
    }

    /// Completes the send-queue WRs that are done, in their order: a Send or Write once
    /// acknowledged, a Read once answered, a refused one in its turn.
    pub(in crate::engine::tcp) fn iwarp_complete(&mut self, mem: &GuestMemoryMmap, id: u32) {
        let Some(q) = self.objects.qp_mut(id) else {
            return;
        };
        let cq = q.send_cq();
        let Some(t) = q.tcp_mut() else {
            return;
        };
        let acked = t
            .conn
            .and_then(|c| self.tcp.table.get(c))
            .map_or(0, |e| e.conn.acked());
        let Some(iw) = t.iwarp.as_deref_mut() else {
            return;
        };
        iw.tx.acked(acked);
        let mut done = Vec::new();
        while let Some(w) = iw.tx.wrs.front() {
            let ready = match w.until {
                Until::Acked(e) => e <= acked,
                Until::ReadResponse => false,
                Until::Done => true,
            };
            if !ready {
                break;
            }
            let w = iw.tx.wrs.pop_front().expect("front");
            done.push(match w.error {
                Some((status, detail)) => failed(w.wr_id, id, w.op, status, detail),
                None => cqe_ok(w.wr_id, id, w.op, w.len),
            });
        }
        let freed_ord = !done.is_empty();
        for c in done {
            self.post_cqe(mem, cq, c);
        }
        if freed_ord {
            // A Read that waited for the ORD may go now.
            self.objects.mark_busy(id);
        }
    }

    /// A Terminate was sent (`received` false: the peer's error) or received: the QP goes
    /// to the error state. The WR at the head of the send queue completes with the
    /// Terminate's error when the peer sent it (what failed there was that WR's), the
    /// others FLUSHED; the connection closes after the Terminate.
    fn iwarp_terminated(
        &mut self,
        mem: &GuestMemoryMmap,
        id: u32,
        error: TermError,
        received: bool,
    ) {
        let (layer, etype, code) = error.raw();
        debug!(
            "QP {id}: Terminate {} (layer {layer}, type {etype}, code {code:#x})",
            if received { "received" } else { "sent" }
        );
        self.tcp_async_event(id, ASYNC_EVENT_QP_ERROR, ASYNC_REASON_TERMINATE);
        let Some(q) = self.objects.qp(id) else {
            return;
        };
        let send_cq = q.send_cq();
        let conn = q.tcp().and_then(|t| t.conn);
        if received {
            let status = match error {
                TermError::Rdmap(RdmapType::RemoteProtection, _) | TermError::DdpTagged(_) => {
                    CQE_STATUS_REMOTE_ACCESS
                }
                _ => CQE_STATUS_REMOTE_OPERATION,
            };
            let detail = cqe_detail_terminate(layer, etype, code, true);
            let head = self.iwarp(id).and_then(|iw| iw.tx.wrs.pop_front());
            if let Some(w) = head {
                self.post_cqe(mem, send_cq, failed(w.wr_id, id, w.op, status, detail));
            } else if let Some((wr_id, op)) = self.take_next_send(mem, id) {
                // Every WR taken is complete (a Write completes once acknowledged, which
                // may be before its verdict): the next one still in the ring takes the
                // error, so that it is always the first WR not completed, however far the
                // engine had got through the ring when the Terminate came.
                self.post_cqe(mem, send_cq, failed(wr_id, id, op, status, detail));
            } else if let Some(q) = self.objects.qp_mut(id) {
                // No WR is left to take it (the refused one had completed, the next is not
                // posted yet): the next one the guest posts takes it when it is flushed.
                q.keep_unclaimed_send_error(status, detail);
            }
        }
        self.iwarp_close(id, conn);
        self.iwarp_error(mem, id);
    }

    /// Takes the next WR of QP `id`'s send ring, if the guest has posted one: its tag and
    /// completion opcode (a malformed WQE's tag, as a Send).
    fn take_next_send(&mut self, mem: &GuestMemoryMmap, id: u32) -> Option<(u64, u8)> {
        self.read_qp_doorbell(mem, id);
        let qp = self.objects.qp(id)?;
        if !qp.posted(true) {
            return None;
        }
        let raw = self.take_wqe(mem, id, true)?;
        Some(match decode::send_wqe(&raw) {
            Ok(wr) => (wr.wr_id, send_op(wr.opcode)),
            Err(e) => (e.wr_id, CQE_OP_SEND),
        })
    }

    /// Ends our direction of an iWARP QP's connection after what is queued (a reject
    /// reply, a Terminate).
    fn iwarp_close(&mut self, _id: u32, conn: Option<ConnId>) {
        if let Some(e) = conn.and_then(|c| self.tcp.table.get_mut(c)) {
            e.conn.close();
        }
    }

    /// QP `id` enters the error state: every WR it holds, and every WR still in its rings,
    /// completes FLUSHED (in queue order).
    pub(in crate::engine::tcp) fn iwarp_error(&mut self, mem: &GuestMemoryMmap, id: u32) {
        let Some(q) = self.objects.qp_mut(id) else {
            return;
        };
        q.fail();
        self.iwarp_flush(mem, id);
        self.read_qp_doorbell(mem, id);
        self.flush_qp(mem, id);
        self.objects.mark_busy(id);
    }

    /// Every WR an iWARP QP holds completes FLUSHED: send-queue WRs in order (those done
    /// already with their own status), then receive WRs.
    pub(in crate::engine::tcp) fn iwarp_flush(&mut self, mem: &GuestMemoryMmap, id: u32) {
        let Some(q) = self.objects.qp_mut(id) else {
            return;
        };
        let (send_cq, recv_cq) = (q.send_cq(), q.recv_cq());
        let Some(iw) = q.tcp_mut().and_then(|t| t.iwarp.as_deref_mut()) else {
            return;
        };
        let sends: Vec<Cqe> = iw
            .tx
            .wrs
            .drain(..)
            .map(|w| match (w.until, w.error) {
                (Until::Done, Some((status, detail))) => failed(w.wr_id, id, w.op, status, detail),
                _ => failed(w.wr_id, id, w.op, CQE_STATUS_FLUSHED, CQE_DETAIL_NONE),
            })
            .collect();
        iw.tx.reads.clear();
        let recvs: Vec<Cqe> = iw
            .recv_wrs
            .drain(..)
            .map(|w| {
                // A WR that lost its region says so; the others are flushed.
                let (status, detail) = match w.spans {
                    Err(e @ (_, CQE_DETAIL_REGION_GONE)) => e,
                    _ => (CQE_STATUS_FLUSHED, CQE_DETAIL_NONE),
                };
                failed(w.wr_id, id, CQE_OP_RECV, status, detail)
            })
            .chain(std::mem::take(&mut iw.recv_done))
            .collect();
        for c in sends {
            self.post_cqe(mem, send_cq, c);
        }
        for c in recvs {
            self.post_cqe(mem, recv_cq, c);
        }
    }

    /// Whether iWARP QP `id` is past its setup and failed (nothing more to place).
    pub(in crate::engine::tcp) fn iwarp_over(&self, id: u32) -> bool {
        self.objects
            .tcp_qp(id)
            .and_then(|t| t.iwarp.as_deref())
            .is_some_and(|iw| iw.phase() == Phase::Over)
    }
}
