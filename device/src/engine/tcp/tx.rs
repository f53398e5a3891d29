//! The transmit unit of TCP QPs: send WRs taken from the ring (`Engine::tcp_take_sends`)
//! are checked, queued on the connection by length only (`TxQueue`), read from guest
//! memory each time a segment is built (`QpSource` → `gather`), and completed when the
//! peer has acknowledged their last byte (`Engine::tcp_complete_sends`).

use std::collections::VecDeque;
use std::time::Instant;

use qpip_abi::admin::*;
use qpip_abi::cqe::*;
use qpip_abi::wqe::{MsgHeader, MSG_HEADER_SIZE, WQE_SIZE};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use crate::net::tcp::{ConnId, SendSource};

use crate::engine::completion::{cqe, cqe_ok};
use crate::engine::decode::{self, Payload};
use crate::engine::memory::{spans_use, Span};
use crate::engine::Engine;

/// A send WR taken from the ring, in the stream at `start..end` (header included).
pub(super) struct TxEntry {
    pub(super) wr_id: u64,
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) header: Option<[u8; MSG_HEADER_SIZE as usize]>,
    pub(super) data: TxData,
    /// Payload bytes (what the CQE reports).
    pub(super) len: u32,
    /// A WR that failed its checks: it holds no bytes and completes with this status in
    /// its turn (completions keep the order of the queue).
    pub(super) error: Option<(u8, u32)>,
}

pub(super) enum TxData {
    Inline(Vec<u8>),
    Spans(Vec<Span>),
}

/// The QP's send WRs that are queued on the connection and not yet acknowledged.
#[derive(Default)]
pub(super) struct TxQueue {
    pub(super) entries: VecDeque<TxEntry>,
    /// Stream bytes queued so far.
    pub(super) queued: u64,
}

impl TxQueue {
    pub(super) fn uses_region(&self, key: u32) -> bool {
        self.entries
            .iter()
            .any(|e| matches!(&e.data, TxData::Spans(s) if spans_use(s, key)))
    }

    /// Fails the entries in region `key` (they complete so when the QP flushes) and lets
    /// go of their spans.
    pub(super) fn region_gone(&mut self, key: u32) {
        for e in &mut self.entries {
            if matches!(&e.data, TxData::Spans(s) if spans_use(s, key)) {
                e.data = TxData::Inline(Vec::new());
                e.error = Some((CQE_STATUS_LOCAL_PROTECTION, CQE_DETAIL_REGION_GONE));
            }
        }
    }
}

/// Reads `buf.len()` bytes at byte `off` of the buffer described by `spans`.
pub(super) fn gather(mem: &GuestMemoryMmap, spans: &[Span], mut off: u64, buf: &mut [u8]) {
    let mut at = 0;
    for s in spans {
        if at == buf.len() {
            return;
        }
        if off >= s.len as u64 {
            off -= s.len as u64;
            continue;
        }
        let n = (s.len as u64 - off).min((buf.len() - at) as u64) as usize;
        if mem
            .read_slice(&mut buf[at..at + n], GuestAddress(s.addr + off))
            .is_err()
        {
            buf[at..at + n].fill(0);
        }
        at += n;
        off = 0;
    }
}

/// A QP's queued send WRs as the connection's [`SendSource`].
pub(super) struct QpSource<'a> {
    pub(super) mem: &'a GuestMemoryMmap,
    pub(super) tx: &'a TxQueue,
}

impl SendSource for QpSource<'_> {
    fn read(&mut self, offset: u64, buf: &mut [u8]) {
        let _stage = crate::stages::span(crate::stages::Stage::GetData);
        let entries = &self.tx.entries;
        let mut i = entries.partition_point(|e| e.end <= offset);
        let mut at = 0;
        let mut off = offset;
        while at < buf.len() {
            let Some(e) = entries.get(i) else {
                buf[at..].fill(0);
                debug_assert!(false, "read beyond the queued bytes");
                return;
            };
            i += 1;
            if e.end <= off {
                continue;
            }
            let mut rel = off - e.start;
            if let Some(h) = &e.header {
                if rel < h.len() as u64 {
                    let n = (h.len() - rel as usize).min(buf.len() - at);
                    buf[at..at + n].copy_from_slice(&h[rel as usize..rel as usize + n]);
                    at += n;
                    off += n as u64;
                    rel += n as u64;
                    // A segment may end inside a header (a small window, a probe): then
                    // the rest of the header is for the next one.
                    if at == buf.len() {
                        return;
                    }
                }
                rel -= h.len() as u64;
            }
            let left = (e.end - off) as usize;
            let n = left.min(buf.len() - at);
            match &e.data {
                TxData::Inline(b) => {
                    buf[at..at + n].copy_from_slice(&b[rel as usize..rel as usize + n])
                }
                TxData::Spans(s) => gather(self.mem, s, rel, &mut buf[at..at + n]),
            }
            at += n;
            off += n as u64;
        }
    }
}

impl Engine {
    /// Takes up to `budget` send WRs and queues their bytes on the connection. Returns
    /// (taken, more waiting).
    pub(super) fn tcp_take_sends(
        &mut self,
        mem: &GuestMemoryMmap,
        id: u32,
        budget: u32,
    ) -> (u32, bool) {
        let mut conn_touched = None;
        let n = self.take_sends(
            mem,
            id,
            budget,
            |_, _| true,
            |e, ctx, raw| {
                if let Some(c) = e.tcp_queue_send(mem, id, ctx, raw) {
                    conn_touched = Some(c);
                }
            },
        );
        if let Some(c) = conn_touched {
            self.tcp_service(mem, c, Instant::now());
        }
        (n, self.sends_left(id))
    }

    /// Queues the bytes of send WQE `raw` of TCP QP `id` (of context `ctx`) on its
    /// connection, which it returns; a WR that fails its checks completes in its turn
    /// instead (None).
    fn tcp_queue_send(
        &mut self,
        mem: &GuestMemoryMmap,
        id: u32,
        ctx: u32,
        raw: &[u8; WQE_SIZE as usize],
    ) -> Option<ConnId> {
        let t = self.objects.tcp_qp(id).expect("TCP QP");
        let (conn, message) = (t.conn, t.message);
        let live = conn.and_then(|c| self.tcp.table.get(c));
        let (status, detail, wr) = match decode::send_wqe(raw) {
            Err(e) => {
                self.tcp_push_failed(mem, id, e.wr_id, e.status, e.detail);
                return None;
            }
            Ok(wr) if wr.plain().is_err() => {
                let status = wr.plain().expect_err("refused");
                (status, CQE_DETAIL_NONE, wr)
            }
            Ok(wr) if live.is_none() => (CQE_STATUS_BAD_DEST, CQE_DETAIL_NOT_BOUND, wr),
            Ok(wr) => (CQE_STATUS_SUCCESS, CQE_DETAIL_NONE, wr),
        };
        if status != CQE_STATUS_SUCCESS {
            self.tcp_push_failed(mem, id, wr.wr_id, status, detail);
            return None;
        }
        let (data, len) = match &wr.payload {
            Payload::Inline(b) => (TxData::Inline(b.clone()), b.len() as u64),
            Payload::Gather(sges) => {
                let len: u64 = sges.iter().map(|s| s.length as u64).sum();
                if len > u32::MAX as u64 {
                    self.tcp_push_failed(mem, id, wr.wr_id, CQE_STATUS_LOCAL_LENGTH, 0);
                    return None;
                }
                match self.translate(ctx, sges, 0) {
                    Ok(s) => (TxData::Spans(s), len),
                    Err(f) => {
                        self.shared.stats.add(STAT_PROTECTION_ERRORS, 1);
                        self.tcp_push_failed(mem, id, wr.wr_id, f.status, f.detail);
                        return None;
                    }
                }
            }
        };
        let t = self.objects.tcp_qp_mut(id).expect("TCP QP");
        let header = message.then(|| MsgHeader::new(len as u32, wr.imm_data).encode());
        let stream_len = len + header.map_or(0, |h| h.len() as u64);
        let c = conn.expect("live");
        let e = self.tcp.table.get_mut(c).expect("live");
        if e.conn.queue_send(stream_len).is_err() {
            // Closing: nothing more may be sent.
            self.tcp_push_failed(mem, id, wr.wr_id, CQE_STATUS_BAD_DEST, CQE_DETAIL_NOT_BOUND);
            return None;
        }
        let start = t.tx.queued;
        t.tx.queued += stream_len;
        t.tx.entries.push_back(TxEntry {
            wr_id: wr.wr_id,
            start,
            end: start + stream_len,
            header,
            data,
            len: len as u32,
            error: None,
        });
        Some(c)
    }

    /// A send WR that failed its checks: it completes in its turn, after the WRs before it.
    pub(super) fn tcp_push_failed(
        &mut self,
        mem: &GuestMemoryMmap,
        id: u32,
        wr_id: u64,
        status: u8,
        detail: u32,
    ) {
        let t = self.objects.tcp_qp_mut(id).expect("TCP QP");
        let at = t.tx.queued;
        t.tx.entries.push_back(TxEntry {
            wr_id,
            start: at,
            end: at,
            header: None,
            data: TxData::Inline(Vec::new()),
            len: 0,
            error: Some((status, detail)),
        });
        let acked = match t.conn.and_then(|c| self.tcp.table.get(c)) {
            Some(e) => e.conn.acked(),
            None => u64::MAX,
        };
        self.tcp_complete_sends(mem, id, acked);
    }

    /// Completes the send WRs whose last byte is below `upto`.
    pub(super) fn tcp_complete_sends(&mut self, mem: &GuestMemoryMmap, id: u32, upto: u64) {
        let Some(q) = self.objects.qp_mut(id) else {
            return;
        };
        let cq = q.send_cq();
        let Some(t) = q.tcp_mut() else {
            return;
        };
        let mut done = Vec::new();
        while t.tx.entries.front().is_some_and(|e| e.end <= upto) {
            let e = t.tx.entries.pop_front().expect("front");
            let c = match e.error {
                Some((status, detail)) => cqe(e.wr_id, id, CQE_OP_SEND, status, detail),
                None => cqe_ok(e.wr_id, id, CQE_OP_SEND, e.len),
            };
            done.push(c);
        }
        for c in done {
            self.post_cqe(mem, cq, c);
        }
    }

    /// Completes the send WRs a QP had taken (`entries`) as FLUSHED, in order (a WR that
    /// failed already, with its own status).
    pub(super) fn flush_sends(
        &mut self,
        mem: &GuestMemoryMmap,
        id: u32,
        send_cq: u32,
        entries: Vec<TxEntry>,
    ) {
        for e in entries {
            let (status, detail) = e.error.unwrap_or((CQE_STATUS_FLUSHED, CQE_DETAIL_NONE));
            let c = cqe(e.wr_id, id, CQE_OP_SEND, status, detail);
            self.post_cqe(mem, send_cq, c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two inline messages of 5 bytes behind their 8-byte headers, read in pieces of every
    /// size from every offset: each piece is the stream's bytes there, also when it starts
    /// or ends inside a header.
    #[test]
    fn a_source_reads_any_piece_of_the_stream_headers_included() {
        let mut tx = TxQueue::default();
        let mut stream = Vec::new();
        for (i, body) in [b"hello", b"world"].iter().enumerate() {
            let h = MsgHeader::new(5, i as u32).encode();
            let start = tx.queued;
            tx.queued += 13;
            tx.entries.push_back(TxEntry {
                wr_id: i as u64,
                start,
                end: start + 13,
                header: Some(h),
                data: TxData::Inline(body.to_vec()),
                len: 5,
                error: None,
            });
            stream.extend_from_slice(&h);
            stream.extend_from_slice(*body);
        }
        let mem = GuestMemoryMmap::default();
        let mut src = QpSource { mem: &mem, tx: &tx };
        for off in 0..stream.len() {
            for len in 1..=stream.len() - off {
                let mut buf = vec![0xeeu8; len];
                src.read(off as u64, &mut buf);
                assert_eq!(buf, &stream[off..off + len], "{len} bytes at {off}");
            }
        }
    }
}
