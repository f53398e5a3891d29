//! The kinds of QP and the hooks the engine's passes call on them. A kind's unit implements
//! them: UDP in [`super::udp`]; TCP in [`super::tcp`], in stream or message framing, with
//! iWARP as a framing of TCP (`tcp::iwarp`). The matches below are the only places outside
//! a kind's own unit where the engine looks at what kind a QP is, so a new kind (a raw
//! Ethernet queue, a kernel-owned queue) is a new unit, a variant of
//! [`QpKind`] and an arm in each hook here.
//!
//! What every kind shares stays with the engine: the rings and their indices, taking WQEs
//! ([`super::send_queues`]), flushing an errored QP's WRs, writing completions.

use vm_memory::GuestMemoryMmap;

use super::objects::{Qp, QpKind};
use super::Engine;

impl Engine {
    /// A ready QP's turn in the send scheduler: its kind takes what was posted (sends,
    /// and receives where they are more than buffers waiting for data), up to its budget.
    /// Returns (made progress, has more work).
    pub(super) fn kind_turn(&mut self, mem: &GuestMemoryMmap, id: u32) -> (bool, bool) {
        match self.objects.qp(id).expect("caller checked").kind() {
            QpKind::Udp => self.udp_turn(mem, id),
            QpKind::RawEth => self.raw_turn(mem, id),
            // Sends complete when acknowledged; receives become the connection's window.
            QpKind::Tcp(_) => self.tcp_qp_work(mem, id),
        }
    }

    /// Whether receives newly posted on a ready QP are work for its turn at once: a TCP
    /// QP's open its connection's window; a UDP QP's wait for datagrams.
    pub(super) fn receives_are_work(qp: &Qp) -> bool {
        match qp.kind() {
            QpKind::Udp | QpKind::RawEth => false,
            QpKind::Tcp(_) => true,
        }
    }

    /// QP `id` is being destroyed: its kind lets go of what it holds (a connection, the
    /// WRs it had taken, flushed if `flush`) before the QP's remaining WRs are flushed and
    /// it leaves the tables.
    pub(super) fn kind_destroying(&mut self, mem: &GuestMemoryMmap, id: u32, flush: bool) {
        match self.objects.qp(id).expect("caller checked").kind() {
            QpKind::Udp => {}
            QpKind::RawEth => self.raw_destroying(id),
            QpKind::Tcp(_) => self.tcp_qp_removed(mem, id, flush),
        }
    }

    /// QP `qp` has left the tables: its kind ends what waited on it (a pending ACCEPT or
    /// CONNECT).
    pub(super) fn kind_destroyed(&mut self, mem: &GuestMemoryMmap, qp: &Qp) {
        match qp.kind() {
            QpKind::Udp | QpKind::RawEth => {}
            QpKind::Tcp(t) => self.tcp_qp_gone(mem, t),
        }
    }

    /// Region `key` of context `ctx` was deregistered: every kind that keeps spans of
    /// regions beyond a WR's execution fails what references it. UDP and raw QPs keep none
    /// (a send completes when its frame leaves; a receive is resolved per frame).
    pub(super) fn kinds_region_gone(&mut self, mem: &GuestMemoryMmap, ctx: u32, key: u32) {
        self.tcp_region_gone(mem, ctx, key);
    }
}
