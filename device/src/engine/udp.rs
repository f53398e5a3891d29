//! UDP QPs: a send WQE becomes one datagram (its data gathered through the QP's memory
//! regions), and a received datagram is placed into the next posted receive buffer of the
//! QP bound to its port; both sides complete with CQEs.
//!
//! A datagram to one of the device's own addresses stays inside the device (delivered to
//! the QP bound to its port through the receive path); any other destination goes to the
//! network ([`super::network`]), whose received datagrams come back through the same
//! receive path.

use std::net::Ipv6Addr;

use qpip_abi::admin::*;
use qpip_abi::cqe::*;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use super::completion::{cqe, cqe_ok};
use super::decode;
use super::memory::Fault;
use super::Engine;

/// Largest UDP payload: the IPv6 payload length field (65535) less the UDP header.
pub const MAX_UDP_PAYLOAD: usize = 65535 - 8;

/// Frames one QP's datagrams may put on the link in a pass: as many as a receiving engine
/// takes from its link per pass. Counting WQEs alone let a sender of 8 KiB datagrams (six
/// fragments each) put three times what a receiver on the same engine thread takes into
/// its switch port per pass, and the port's queue dropped the rest.
const QP_FRAME_BUDGET: u64 = super::network::RX_BUDGET as u64;

/// A datagram on its way to a receive queue.
pub struct Datagram<'a> {
    pub src: Ipv6Addr,
    pub src_port: u16,
    pub dst: Ipv6Addr,
    pub dst_port: u16,
    pub payload: &'a [u8],
}

impl Engine {
    /// A ready UDP QP's turn: its sends, one datagram each, up to a budget of WQEs and of
    /// frames, while its send CQ has room. Returns (made progress, has more work).
    pub(super) fn udp_turn(&mut self, mem: &GuestMemoryMmap, id: u32) -> (bool, bool) {
        let mut did = false;
        let frames = |e: &Engine| {
            let s = e.net.stack.stats();
            s.tx_frames + s.looped
        };
        let frames0 = frames(self);
        for _ in 0..super::send_queues::QP_BUDGET {
            if frames(self) - frames0 >= QP_FRAME_BUDGET {
                break;
            }
            if let Err(more) = self.send_turn_open(id) {
                return (did, more);
            }
            did = true;
            self.udp_send_one(mem, id);
        }
        (did, true)
    }

    /// Executes the next send WQE of a ready UDP QP (its send CQ has room).
    fn udp_send_one(&mut self, mem: &GuestMemoryMmap, id: u32) {
        let qp = self.objects.qp(id).expect("caller checked");
        let (send_cq, ctx, bound) = (qp.send_cq(), qp.home().ctx, qp.bound());
        self.shared.stats.add(STAT_SEND_WQES, 1);
        let Some(raw) = self.take_wqe(mem, id, true) else {
            return;
        };
        let wr = match decode::send_wqe(&raw) {
            Ok(wr) => wr,
            Err(e) => return self.write_cqe(mem, send_cq, e.completion(id, CQE_OP_SEND)),
        };
        let fail = |status, detail| cqe(wr.wr_id, id, CQE_OP_SEND, status, detail);
        if let Err(status) = wr.plain() {
            self.write_cqe(mem, send_cq, fail(status, CQE_DETAIL_NONE));
            return;
        }
        if wr.imm_data != 0 {
            // A UDP datagram has no room for immediate data on the wire.
            self.write_cqe(mem, send_cq, fail(CQE_STATUS_BAD_WQE, CQE_DETAIL_NONE));
            return;
        }
        let Some((bound_addr, src_port)) = bound else {
            self.write_cqe(
                mem,
                send_cq,
                fail(CQE_STATUS_BAD_DEST, CQE_DETAIL_NOT_BOUND),
            );
            return;
        };
        let payload = match self.gather(
            mem,
            ctx,
            &wr.payload,
            MAX_UDP_PAYLOAD,
            Fault {
                status: CQE_STATUS_LOCAL_LENGTH,
                detail: CQE_DETAIL_NONE,
            },
        ) {
            Ok(p) => p,
            Err(f) => {
                if f.status == CQE_STATUS_LOCAL_PROTECTION {
                    self.shared.stats.add(STAT_PROTECTION_ERRORS, 1);
                }
                self.write_cqe(mem, send_cq, fail(f.status, f.detail));
                return;
            }
        };
        if wr.dest_port == 0 || !decode::is_unicast(&wr.dest_addr) {
            self.write_cqe(
                mem,
                send_cq,
                fail(CQE_STATUS_BAD_DEST, CQE_DETAIL_BAD_ADDRESS),
            );
            return;
        }
        if payload.len() > crate::net::Stack::max_udp_payload(&wr.dest_addr) {
            // Within the largest payload over IPv6, past IPv4's (20 bytes less).
            self.write_cqe(mem, send_cq, fail(CQE_STATUS_LOCAL_LENGTH, CQE_DETAIL_NONE));
            return;
        }
        let src = (!bound_addr.is_unspecified()).then_some(bound_addr);
        // The send completes once the datagram is on its way: to the link, or on the
        // stack's loopback for the device itself (delivered on the next pass).
        match self.send_udp(src, src_port, wr.dest_addr, wr.dest_port, &payload) {
            Ok(()) => {
                self.shared.stats.add(STAT_UDP_TX, 1);
                let done = cqe_ok(wr.wr_id, id, CQE_OP_SEND, payload.len() as u32);
                self.write_cqe(mem, send_cq, done);
            }
            Err(detail) => self.write_cqe(mem, send_cq, fail(CQE_STATUS_BAD_DEST, detail)),
        }
    }

    /// The receive path: demultiplex by port, take the next posted receive WR, check and
    /// place the data, complete. Datagrams that cannot be placed are dropped and counted.
    /// Returns false when no QP is bound to the destination (the network then answers
    /// "port unreachable").
    pub fn deliver_udp(&mut self, mem: &GuestMemoryMmap, d: &Datagram) -> bool {
        let stats = self.shared.stats.clone();
        // Steered as Linux's UDP: the QP connected to the source, else one with no peer.
        let src = (d.src, d.src_port);
        let Some(id) = self.objects.udp_receiver(&d.dst, d.dst_port, src) else {
            stats.add(STAT_UDP_RX_NO_PORT, 1);
            return false;
        };
        let qp = self.objects.qp(id).expect("bound ports name live QPs");
        let recv_cq = qp.recv_cq();
        // The receiver's doorbell page may have been scanned before its latest receive was
        // posted (a producer may post a receive and then, elsewhere, the send that fills
        // it): look at its slots again before deciding there is no buffer or no room.
        if !qp.posted(false) {
            self.read_qp_doorbell(mem, id);
        }
        if self.objects.cq(recv_cq).is_some_and(|c| c.free() == 0) {
            self.read_cq_doorbell(mem, recv_cq);
        }
        let qp = self.objects.qp(id).expect("exists");
        if !qp.is_ready() || !qp.posted(false) {
            stats.add(STAT_UDP_RX_NO_WR, 1);
            return true;
        }
        let ctx = qp.home().ctx;
        if !self.cq_has_room(recv_cq) {
            stats.add(STAT_UDP_RX_CQ_FULL, 1);
            return true;
        }
        stats.add(STAT_RECV_WQES, 1);
        let Some(raw) = self.take_wqe(mem, id, false) else {
            return true;
        };
        let wr = match decode::recv_wqe(&raw) {
            Ok(wr) => wr,
            Err(e) => {
                self.write_cqe(mem, recv_cq, e.completion(id, CQE_OP_RECV));
                return true;
            }
        };
        let capacity: u64 = wr.sges.iter().map(|s| s.length as u64).sum();
        if (d.payload.len() as u64) > capacity {
            let mut c = cqe(
                wr.wr_id,
                id,
                CQE_OP_RECV,
                CQE_STATUS_LOCAL_LENGTH,
                CQE_DETAIL_NONE,
            );
            c.byte_len = d.payload.len() as u32;
            self.write_cqe(mem, recv_cq, c);
            return true;
        }
        let spans = match self.translate(ctx, &wr.sges, MR_ACCESS_LOCAL_WRITE) {
            Ok(s) => s,
            Err(f) => {
                stats.add(STAT_PROTECTION_ERRORS, 1);
                self.write_cqe(
                    mem,
                    recv_cq,
                    cqe(wr.wr_id, id, CQE_OP_RECV, f.status, f.detail),
                );
                return true;
            }
        };
        let mut at = 0;
        for s in spans {
            if at == d.payload.len() {
                break;
            }
            let n = s.len.min(d.payload.len() - at);
            if mem
                .write_slice(&d.payload[at..at + n], GuestAddress(s.addr))
                .is_err()
            {
                self.write_cqe(
                    mem,
                    recv_cq,
                    cqe(
                        wr.wr_id,
                        id,
                        CQE_OP_RECV,
                        CQE_STATUS_LOCAL_PROTECTION,
                        CQE_DETAIL_OUT_OF_BOUNDS,
                    ),
                );
                return true;
            }
            at += n;
        }
        stats.add(STAT_UDP_RX, 1);
        let mut c = cqe_ok(wr.wr_id, id, CQE_OP_RECV, d.payload.len() as u32);
        c.src_addr = d.src.octets();
        c.src_port = d.src_port;
        self.write_cqe(mem, recv_cq, c);
        true
    }
}
