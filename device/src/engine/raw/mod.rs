//! The function's raw Ethernet QP (`QP_TYPE_RAW_ETH`): the guest kernel's network
//! interface on the function, beside the engine's TCP/UDP/iWARP, with the same MAC and
//! addresses.
//!
//! - Sending: a send WQE gathers one frame (inline, through the context's regions, or
//!   guest-physical memory with `PHYS_LKEY`), [`frame`] checks its length and applies its
//!   checksum and segmentation offloads, the function's identity check (the switch's,
//!   [`crate::backend::switch::sent_as`]) refuses a frame that is not the function's own,
//!   and the frame joins the stack's queue to the link, after what the engine queued
//!   before it. Refused: `BAD_WQE`, `STAT_RAW_TX_REFUSED`. A TCP or UDP frame from a port
//!   a QP or listener holds is dropped ([`port_split`]): SUCCESS, `STAT_RAW_TX_PORT_HELD`.
//! - Receiving: the stack marks what a received frame is to the raw QP
//!   (`crate::net::stack`'s steering rules) and [`Engine::raw_receive`] places each marked
//!   frame into the next posted receive buffer, one frame a buffer, at once: no receive
//!   WR is taken before a frame is there for it, and nothing of it is kept after its
//!   completion (the driver keeps the buffers of posted WRs until their completion or the
//!   QP's destruction).
//!
//! At most one per function, in a kernel context. While it exists the stack leaves to it
//! the answers that are the kernel's (RST, port unreachable); once it is destroyed the
//! engine answers as before.

pub mod frame;
pub mod port_split;

use qpip_abi::admin::*;
use qpip_abi::cqe::*;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use super::completion::{cqe, cqe_ok};
use super::decode;
use super::memory::Fault;
use super::Engine;
use crate::net::gso;
use crate::net::stack::RawRx;
use crate::net::wire::ETH_LEN;

/// Frames one raw QP may put on the link in a pass (a TSO super-segment counts its
/// segments): as many as a receiving engine takes per pass, as for UDP QPs.
const FRAME_BUDGET: usize = super::network::RX_BUDGET;

/// Which QP is the function's raw one.
#[derive(Debug, Default)]
pub struct RawPort {
    qp: Option<u32>,
    /// Created with `RAW_RX_MERGEABLE`: a frame may span receive WQEs, super-frames whole.
    mergeable: bool,
}

/// Most receive WQEs one frame may span (a 64 KiB super-frame in page-sized buffers
/// takes 17): a bound on the work one frame makes and on what the engine reads ahead.
const MAX_PIECES: usize = 32;

impl Engine {
    /// Whether a raw QP may be created in a context (`kernel`: created with
    /// `CTX_FLAG_KERNEL`): only there, and only one per function.
    pub(super) fn raw_may_create(&self, kernel: bool) -> Result<(), u16> {
        if !kernel {
            return Err(ADMIN_STATUS_BAD_PARAM);
        }
        if self.raw.qp.is_some() {
            return Err(ADMIN_STATUS_BUSY);
        }
        Ok(())
    }

    /// QP `id` is the function's raw QP from now on.
    pub(super) fn raw_created(&mut self, id: u32, mergeable: bool) {
        self.raw.qp = Some(id);
        self.raw.mergeable = mergeable;
        self.net.stack.set_raw_beside(true);
    }

    /// QP `id` is being destroyed: if it is the raw QP, the engine answers for everything
    /// again.
    pub(super) fn raw_destroying(&mut self, id: u32) {
        if self.raw.qp == Some(id) {
            self.raw.qp = None;
            self.net.stack.set_raw_beside(false);
        }
    }

    /// Whether the function has a raw QP.
    pub(super) fn has_raw_qp(&self) -> bool {
        self.raw.qp.is_some()
    }

    /// The raw QP's turn: its sends, one frame each, up to a budget of WQEs and of frames,
    /// while its send CQ has room. Returns (made progress, has more work).
    pub(super) fn raw_turn(&mut self, mem: &GuestMemoryMmap, id: u32) -> (bool, bool) {
        let mut did = false;
        let mut frames = 0;
        for _ in 0..super::send_queues::QP_BUDGET {
            if frames >= FRAME_BUDGET {
                break;
            }
            if let Err(more) = self.send_turn_open(id) {
                return (did, more);
            }
            did = true;
            frames += self.raw_send_one(mem, id);
        }
        if did {
            self.net.flush();
        }
        (did, true)
    }

    /// Executes the next send WQE of the raw QP (its send CQ has room). Returns the frames
    /// it put on the link.
    fn raw_send_one(&mut self, mem: &GuestMemoryMmap, id: u32) -> usize {
        let qp = self.objects.qp(id).expect("caller checked");
        let (send_cq, ctx) = (qp.send_cq(), qp.home().ctx);
        self.shared.stats.add(STAT_SEND_WQES, 1);
        let Some(raw) = self.take_wqe(mem, id, true) else {
            return 0;
        };
        let stats = self.shared.stats.clone();
        let wr = match decode::raw_send_wqe(&raw) {
            Ok(wr) => wr,
            Err(e) => {
                stats.add(STAT_RAW_TX_REFUSED, 1);
                self.write_cqe(mem, send_cq, e.completion(id, CQE_OP_SEND));
                return 0;
            }
        };
        let fail = |status, detail| cqe(wr.wr_id, id, CQE_OP_SEND, status, detail);
        let limit = if wr.tso {
            frame::MAX_TSO_FRAME
        } else {
            self.net.stack.mtu() + crate::net::wire::ETH_LEN
        };
        let bytes = match self.gather(mem, ctx, &wr.frame, limit, too_long()) {
            Ok(b) => b,
            Err(f) => {
                if f.status == CQE_STATUS_LOCAL_PROTECTION {
                    stats.add(STAT_PROTECTION_ERRORS, 1);
                } else {
                    stats.add(STAT_RAW_TX_REFUSED, 1);
                }
                self.write_cqe(mem, send_cq, fail(f.status, f.detail));
                return 0;
            }
        };
        let len = bytes.len() as u32;
        let ready = match frame::prepare(bytes, wr.csum, wr.tso, &wr.offload, self.net.stack.mtu())
        {
            Ok(r) if self.raw_sent_as_itself(&r.frame) => r,
            // Malformed, or not the function's own.
            _ => {
                stats.add(STAT_RAW_TX_REFUSED, 1);
                self.write_cqe(mem, send_cq, fail(CQE_STATUS_BAD_WQE, CQE_DETAIL_NONE));
                return 0;
            }
        };
        if self.raw_from_held_port(&ready.frame) {
            // The kernel's frame from a QP's port: filtered, not the sender's error.
            stats.add(STAT_RAW_TX_PORT_HELD, 1);
            self.write_cqe(mem, send_cq, cqe_ok(wr.wr_id, id, CQE_OP_SEND, len));
            return 0;
        }
        stats.add(STAT_RAW_TX_FRAMES, 1);
        if wr.tso {
            stats.add(STAT_RAW_TX_TSO, 1);
        }
        let segments = ready.segments;
        self.net.stack.send_raw(ready.frame, ready.mss);
        self.write_cqe(mem, send_cq, cqe_ok(wr.wr_id, id, CQE_OP_SEND, len));
        segments
    }

    /// Whether a frame comes from the function's MAC and addresses, as a normal host's
    /// (`sent_as`).
    fn raw_sent_as_itself(&self, frame: &[u8]) -> bool {
        let stack = &self.net.stack;
        let mut v6 = vec![stack.link_local().octets()];
        let mut v4 = Vec::new();
        for (a, _) in stack.addresses() {
            match crate::net::wire::ipv4_of(a) {
                Some(a4) => v4.push(a4.octets()),
                None => v6.push(a.octets()),
            }
        }
        crate::backend::switch::sent_as(frame, &stack.mac(), &v6, &v4)
    }

    /// A frame from the link the stack marked for the raw QP (`rx`): placed into its next
    /// posted receive buffer, or dropped and counted. A link with receive offloads (a TAP)
    /// hands over TCP super-frames that its host merged; the raw QP takes frames of at
    /// most the MTU, so those are cut into segments first, each into a buffer of its own,
    /// as a NIC without LRO would have received them.
    pub(super) fn raw_receive(&mut self, mem: &GuestMemoryMmap, frame: &[u8], rx: RawRx) {
        if self.raw.qp.is_none() {
            return;
        }
        if self.raw.mergeable {
            return self.raw_receive_merged(mem, frame, rx);
        }
        let mtu = self.net.stack.mtu();
        if frame.len() > mtu + ETH_LEN {
            if let Some(headers) = gso::frame_headers_len(frame) {
                let ip_tcp = headers - ETH_LEN;
                if mtu > ip_tcp {
                    let mss = mtu - ip_tcp;
                    let mut pieces = Vec::new();
                    if gso::split_frame(frame, mss, |f| pieces.push(f)).is_ok() {
                        for piece in pieces {
                            self.raw_receive_one(mem, &piece, rx);
                        }
                        return;
                    }
                }
            }
        }
        self.raw_receive_one(mem, frame, rx);
    }

    /// With mergeable buffers: the whole frame (a TCP super-frame too, with its segment
    /// size) across as many consecutive receive WQEs as it needs, or dropped and counted
    /// when fewer are posted (a frame is never left half-placed).
    fn raw_receive_merged(&mut self, mem: &GuestMemoryMmap, frame: &[u8], rx: RawRx) {
        let Some(id) = self.raw.qp else {
            return;
        };
        let stats = self.shared.stats.clone();
        let mtu = self.net.stack.mtu();
        let gso = if frame.len() > mtu + ETH_LEN {
            gso::frame_headers_len(frame).map(|h| {
                let mss = mtu.saturating_sub(h - ETH_LEN).max(1) as u16;
                let kind = if gso::is_ipv4_frame(frame) {
                    CQE_RAW_RX_GSO_TCPV4
                } else {
                    CQE_RAW_RX_GSO_TCPV6
                };
                (kind, mss)
            })
        } else {
            None
        };
        let recv_cq = self.objects.qp(id).expect("the raw QP is live").recv_cq();
        self.read_qp_doorbell(mem, id);
        self.read_cq_doorbell(mem, recv_cq);
        // Plan: the WRs the frame takes, read ahead without taking them.
        let qp = self.objects.qp(id).expect("exists");
        if !qp.is_ready() || qp.ring_held(false) {
            stats.add(STAT_RAW_RX_NO_WR, 1);
            return;
        }
        let mut wrs = Vec::new();
        let mut room = 0u64;
        for ahead in 0..qp.recv_posted().min(MAX_PIECES as u32) {
            let Some(raw) = Self::read_slot(mem, qp.recv_entry_addr(ahead)) else {
                break;
            };
            let Ok(wr) = decode::recv_wqe(&raw) else {
                break; // taken (and failed) when it comes first
            };
            room += wr.sges.iter().map(|s| s.length as u64).sum::<u64>();
            wrs.push(wr);
            if room >= frame.len() as u64 {
                break;
            }
        }
        let n = wrs.len();
        let cq_room = self.objects.cq(recv_cq).map_or(0, |c| c.free());
        if room < frame.len() as u64 || (cq_room as usize) < n {
            if n == 0 && self.objects.qp(id).is_some_and(|q| q.posted(false)) {
                // A malformed WQE first in line: taken and failed as any receive's.
                return self.raw_receive_one(mem, frame, rx);
            }
            stats.add(STAT_RAW_RX_NO_WR, 1);
            return;
        }
        let ctx = qp.home().ctx;
        let mut at = 0;
        for (i, wr) in wrs.iter().enumerate() {
            stats.add(STAT_RECV_WQES, 1);
            if self.take_wqe(mem, id, false).is_none() {
                return; // the ring left guest RAM: the QP failed
            }
            let last = i + 1 == n;
            // A piece that cannot be placed completes in error, still with MORE when more
            // pieces follow, so the driver knows where the (lost) frame ends.
            let fail = |status, detail| {
                let mut c = cqe(wr.wr_id, id, CQE_OP_RECV, status, detail);
                if !last {
                    c.imm_data = CQE_RAW_RX_MORE;
                }
                c
            };
            let spans = match self.translate(ctx, &wr.sges, MR_ACCESS_LOCAL_WRITE) {
                Ok(s) => s,
                Err(f) => {
                    stats.add(STAT_PROTECTION_ERRORS, 1);
                    at += wr.sges.iter().map(|s| s.length as usize).sum::<usize>();
                    at = at.min(frame.len());
                    self.write_cqe(mem, recv_cq, fail(f.status, f.detail));
                    continue;
                }
            };
            let start = at;
            let mut placed = true;
            for s in spans {
                if at == frame.len() {
                    break;
                }
                let k = s.len.min(frame.len() - at);
                if mem
                    .write_slice(&frame[at..at + k], GuestAddress(s.addr))
                    .is_err()
                {
                    placed = false;
                    break;
                }
                at += k;
            }
            if !placed {
                let c = fail(CQE_STATUS_LOCAL_PROTECTION, CQE_DETAIL_OUT_OF_BOUNDS);
                self.write_cqe(mem, recv_cq, c);
                continue;
            }
            let mut c = cqe_ok(wr.wr_id, id, CQE_OP_RECV, (at - start) as u32);
            if !last {
                c.imm_data = CQE_RAW_RX_MORE;
            } else {
                stats.add(STAT_RAW_RX_FRAMES, 1);
                if rx.csum_ok {
                    stats.add(STAT_RAW_RX_CSUM_OK, 1);
                    c.imm_data |= CQE_RAW_RX_CSUM_OK;
                }
                if let Some((kind, mss)) = gso {
                    c.imm_data |= kind;
                    c.src_port = mss;
                }
            }
            self.write_cqe(mem, recv_cq, c);
        }
    }

    /// One frame of at most the MTU into the raw QP's next posted receive buffer.
    fn raw_receive_one(&mut self, mem: &GuestMemoryMmap, frame: &[u8], rx: RawRx) {
        let Some(id) = self.raw.qp else {
            return;
        };
        let stats = self.shared.stats.clone();
        let qp = self.objects.qp(id).expect("the raw QP is live");
        let recv_cq = qp.recv_cq();
        // As for UDP: the driver may have posted since the last scan of its page.
        if !qp.posted(false) {
            self.read_qp_doorbell(mem, id);
        }
        if self.objects.cq(recv_cq).is_some_and(|c| c.free() == 0) {
            self.read_cq_doorbell(mem, recv_cq);
        }
        let qp = self.objects.qp(id).expect("exists");
        let ctx = qp.home().ctx;
        if !qp.is_ready() || !qp.posted(false) || qp.ring_held(false) || !self.cq_has_room(recv_cq)
        {
            stats.add(STAT_RAW_RX_NO_WR, 1);
            return;
        }
        stats.add(STAT_RECV_WQES, 1);
        let Some(raw) = self.take_wqe(mem, id, false) else {
            return;
        };
        let wr = match decode::recv_wqe(&raw) {
            Ok(wr) => wr,
            Err(e) => {
                self.write_cqe(mem, recv_cq, e.completion(id, CQE_OP_RECV));
                return;
            }
        };
        let fail = |status, detail| cqe(wr.wr_id, id, CQE_OP_RECV, status, detail);
        let capacity: u64 = wr.sges.iter().map(|s| s.length as u64).sum();
        if frame.len() as u64 > capacity {
            stats.add(STAT_RAW_RX_TOO_LONG, 1);
            let mut c = fail(CQE_STATUS_LOCAL_LENGTH, CQE_DETAIL_NONE);
            c.byte_len = frame.len() as u32;
            self.write_cqe(mem, recv_cq, c);
            return;
        }
        let spans = match self.translate(ctx, &wr.sges, MR_ACCESS_LOCAL_WRITE) {
            Ok(s) => s,
            Err(f) => {
                stats.add(STAT_PROTECTION_ERRORS, 1);
                self.write_cqe(mem, recv_cq, fail(f.status, f.detail));
                return;
            }
        };
        let mut at = 0;
        for s in spans {
            if at == frame.len() {
                break;
            }
            let n = s.len.min(frame.len() - at);
            if mem
                .write_slice(&frame[at..at + n], GuestAddress(s.addr))
                .is_err()
            {
                let c = fail(CQE_STATUS_LOCAL_PROTECTION, CQE_DETAIL_OUT_OF_BOUNDS);
                self.write_cqe(mem, recv_cq, c);
                return;
            }
            at += n;
        }
        stats.add(STAT_RAW_RX_FRAMES, 1);
        let mut c = cqe_ok(wr.wr_id, id, CQE_OP_RECV, frame.len() as u32);
        if rx.csum_ok {
            stats.add(STAT_RAW_RX_CSUM_OK, 1);
            c.imm_data = CQE_RAW_RX_CSUM_OK;
        }
        self.write_cqe(mem, recv_cq, c);
    }
}

/// A frame longer than a raw QP sends: refused as any other frame it will not send.
fn too_long() -> Fault {
    Fault {
        status: CQE_STATUS_BAD_WQE,
        detail: CQE_DETAIL_NONE,
    }
}
