//! The transmit side of an iWARP QP: what its connection's byte stream carries, as
//! records — the MPA request or reply (bytes the device owns), then FPDUs — each built
//! when the connection asks for its bytes: length, DDP/RDMAP header, the payload read
//! from guest memory through the WR's translated spans, pad and CRC. A record never
//! outgrows a segment (payloads are cut to the connection's MULPDU), and the connection
//! starts every segment with one ([`crate::net::tcp::SendSource::segment_end`]), so a
//! receiver can place each segment's data on its own (RFC 5044 §8).
//!
//! The send queue's WRs complete in the order they were posted: a Send or Write once the
//! peer acknowledged its last byte, a Read once its response has been placed.

use std::collections::VecDeque;
use std::sync::Arc;

use vm_memory::GuestMemoryMmap;

use crate::engine::memory::{spans_use, Span};
use crate::engine::tcp::tx::gather;
use crate::net::iwarp::wire::ddp::Header;
use crate::net::iwarp::wire::fpdu::{self, CRC_LEN, LENGTH_LEN};
use crate::net::iwarp::wire::rdmap::{self, Opcode, ReadRequest};
use crate::net::iwarp::wire::terminate::Terminate;
use crate::net::tcp::{record_segment_end, SendSource};

/// Most header bytes an FPDU's ULPDU carries before its payload: an untagged DDP header
/// and a Terminate with a copied untagged header and Read Request (18 + 4 + 2 + 18 + 28).
const MAX_HEADER: usize = 70;

/// Where a record's payload comes from.
#[derive(Debug, Clone)]
pub(super) enum Data {
    None,
    /// `len` bytes at byte `off` of the buffer the spans describe (guest memory).
    Guest {
        spans: Arc<[Span]>,
        off: u64,
        len: usize,
    },
    /// Bytes the WR carried inline.
    Inline {
        bytes: Arc<[u8]>,
        off: usize,
        len: usize,
    },
}

impl Data {
    fn len(&self) -> usize {
        match self {
            Data::None => 0,
            Data::Guest { len, .. } | Data::Inline { len, .. } => *len,
        }
    }

    fn read(&self, mem: &GuestMemoryMmap, buf: &mut [u8]) {
        match self {
            Data::None => {}
            Data::Guest { spans, off, .. } => gather(mem, spans, *off, buf),
            Data::Inline { bytes, off, len } => buf.copy_from_slice(&bytes[*off..*off + *len]),
        }
    }

    /// The piece `[at, at + len)` of this payload.
    fn piece(&self, at: usize, len: usize) -> Data {
        match self {
            Data::None => Data::None,
            Data::Guest { spans, off, .. } => Data::Guest {
                spans: spans.clone(),
                off: off + at as u64,
                len,
            },
            Data::Inline { bytes, off, .. } => Data::Inline {
                bytes: bytes.clone(),
                off: off + at,
                len,
            },
        }
    }
}

/// What a record is.
#[derive(Debug, Clone)]
enum Body {
    /// Bytes sent as they are (an MPA request or reply).
    Raw(Arc<[u8]>),
    /// An FPDU: the ULPDU's header bytes, then its payload.
    Fpdu {
        header: [u8; MAX_HEADER],
        header_len: u8,
        data: Data,
    },
}

/// A record of the stream, at `start`.
#[derive(Debug, Clone)]
struct Record {
    start: u64,
    len: u32,
    body: Body,
}

/// An RDMA Read this end asked for and whose response has not all come: the response
/// must name `stag` and offsets from `to` up to `to + size`, and its bytes land at the
/// same offsets of `sink`.
#[derive(Debug, Clone)]
pub(super) struct OutRead {
    pub(super) stag: u32,
    pub(super) to: u64,
    pub(super) size: u32,
    pub(super) sink: Arc<[Span]>,
    /// Bytes of the response placed so far.
    pub(super) placed: u64,
    /// Whether a WR waits for it (the ready-to-receive Read of peer-to-peer setup has
    /// none).
    pub(super) for_wr: bool,
}

/// How a send-queue WR completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Until {
    /// When the peer acknowledged the stream up to this offset.
    Acked(u64),
    /// When its Read Response has been placed (then [`Until::Done`]).
    ReadResponse,
    Done,
}

/// A send-queue WR taken from the ring, until it completes.
#[derive(Debug, Clone)]
pub(super) struct TxWr {
    pub(super) wr_id: u64,
    /// `CQE_OP_*`.
    pub(super) op: u8,
    pub(super) len: u32,
    pub(super) until: Until,
    /// A WR that failed its checks, or whose operation failed: its status and detail.
    pub(super) error: Option<(u8, u32)>,
    /// The guest memory it reads (a Send, a Write) or its response lands in (a Read).
    pub(super) spans: Option<Arc<[Span]>>,
}

/// The transmit side of an iWARP QP.
#[derive(Debug)]
pub(super) struct Tx {
    records: VecDeque<Record>,
    /// End of the last record (stream offset).
    pub(super) end: u64,
    /// Of those bytes, how many the connection has been given (`queue_send`).
    pub(super) given: u64,
    pub(super) wrs: VecDeque<TxWr>,
    /// Reads asked for and not yet answered, oldest first (the responses come in order).
    pub(super) reads: VecDeque<OutRead>,
    /// The stream end of each Read Response queued for the peer and not yet acknowledged:
    /// the peer's reads this end is still serving (at most its IRD).
    pub(super) serving: VecDeque<u64>,
    /// Next MSN of the untagged queues: Send, Read Request, Terminate (each from 1).
    pub(super) msn: [u32; 3],
    /// Whether FPDUs carry a CRC.
    pub(super) crc: bool,
    /// Largest ULPDU: what fits a segment of the connection's MSS.
    pub(super) mulpdu: usize,
}

impl Tx {
    pub(super) fn new() -> Tx {
        Tx {
            records: VecDeque::new(),
            end: 0,
            given: 0,
            wrs: VecDeque::new(),
            reads: VecDeque::new(),
            serving: VecDeque::new(),
            msn: [1; 3],
            crc: false,
            mulpdu: fpdu::mulpdu(536),
        }
    }

    fn push(&mut self, len: usize, body: Body) {
        self.records.push_back(Record {
            start: self.end,
            len: len as u32,
            body,
        });
        self.end += len as u64;
    }

    /// Appends bytes sent as they are (an MPA frame).
    pub(super) fn push_raw(&mut self, bytes: Vec<u8>) {
        let len = bytes.len();
        self.push(len, Body::Raw(bytes.into()));
    }

    /// Appends one FPDU: the ULPDU `header` (a DDP header, with the RDMAP body of a
    /// message that has one), then `data`.
    fn push_fpdu(&mut self, header: &[u8], data: Data) {
        let mut h = [0u8; MAX_HEADER];
        h[..header.len()].copy_from_slice(header);
        let len = fpdu::fpdu_len(header.len() + data.len());
        self.push(
            len,
            Body::Fpdu {
                header: h,
                header_len: header.len() as u8,
                data,
            },
        );
    }

    /// Payload bytes an FPDU with a `header`-byte header may carry.
    fn room(&self, header: usize) -> usize {
        self.mulpdu.saturating_sub(header).max(1)
    }

    /// Appends a Send (`solicited`: with Solicited Event) of `data`, cut into FPDUs.
    pub(super) fn push_send(&mut self, data: Data, solicited: bool) {
        let op = if solicited {
            Opcode::SendSe
        } else {
            Opcode::Send
        };
        let msn = self.msn[0];
        self.msn[0] = msn.wrapping_add(1);
        self.push_message(data, |mo, last| {
            rdmap::untagged_header(op, 0, msn, mo as u32, last)
        });
    }

    /// Appends a Write of `data` to the peer's `stag` at `to`.
    pub(super) fn push_write(&mut self, data: Data, stag: u32, to: u64) {
        self.push_message(data, |off, last| {
            rdmap::tagged_header(Opcode::Write, stag, to.wrapping_add(off as u64), last)
        });
    }

    /// Appends a Read Response of `data` to the requester's sink `stag` at `to`.
    pub(super) fn push_read_response(&mut self, data: Data, stag: u32, to: u64) {
        self.push_message(data, |off, last| {
            rdmap::tagged_header(
                Opcode::ReadResponse,
                stag,
                to.wrapping_add(off as u64),
                last,
            )
        });
    }

    /// Appends an RFC 7306 Immediate Data message carrying `imm` (first 4 of its 8 bytes,
    /// big-endian), on the Send queue.
    pub(super) fn push_immediate(&mut self, imm: u32) {
        let msn = self.msn[0];
        self.msn[0] = msn.wrapping_add(1);
        let mut body = [0u8; rdmap::IMMEDIATE_DATA_LEN];
        body[..4].copy_from_slice(&imm.to_be_bytes());
        let m = rdmap::Message {
            opcode: Opcode::ImmediateData,
            header: rdmap::untagged_header(Opcode::ImmediateData, 0, msn, 0, true),
            body: rdmap::Body::Immediate(body),
        };
        let mut b = Vec::with_capacity(MAX_HEADER);
        m.write(&mut b);
        self.push_fpdu(&b, Data::None);
    }

    /// Appends a Read Request.
    pub(super) fn push_read_request(&mut self, request: ReadRequest) {
        let msn = self.msn[1];
        self.msn[1] = msn.wrapping_add(1);
        let mut b = Vec::with_capacity(MAX_HEADER);
        rdmap::read_request(msn, request).write(&mut b);
        self.push_fpdu(&b, Data::None);
    }

    /// Appends a Terminate.
    pub(super) fn push_terminate(&mut self, body: Terminate<'_>) {
        let msn = self.msn[2];
        self.msn[2] = msn.wrapping_add(1);
        let mut b = Vec::with_capacity(MAX_HEADER);
        rdmap::terminate(msn, body).write(&mut b);
        self.push_fpdu(&b, Data::None);
    }

    /// Cuts a message of `data` into FPDUs, each with the header `header(offset, last)`
    /// makes; a message of no bytes is one FPDU.
    fn push_message(&mut self, data: Data, header: impl Fn(usize, bool) -> Header) {
        let total = data.len();
        let hlen = header(0, true).wire_len();
        let room = self.room(hlen);
        let mut at = 0;
        loop {
            let n = (total - at).min(room);
            let last = at + n == total;
            let mut h = [0u8; MAX_HEADER];
            let k = header(at, last).write_into(&mut h);
            self.push_fpdu(&h[..k], data.piece(at, n));
            at += n;
            if last {
                return;
            }
        }
    }

    /// Records up to `upto` were acknowledged: they are dropped, and so are the reads
    /// served by them.
    pub(super) fn acked(&mut self, upto: u64) {
        while self
            .records
            .front()
            .is_some_and(|r| r.start + r.len as u64 <= upto)
        {
            self.records.pop_front();
        }
        while self.serving.front().is_some_and(|&e| e <= upto) {
            self.serving.pop_front();
        }
    }

    /// Whether a WR, a Read's sink or a record not yet acknowledged (a Read Response this
    /// end serves, a Send's or Write's payload) lies in region `key`.
    pub(super) fn uses_region(&self, key: u32) -> bool {
        self.wrs
            .iter()
            .any(|w| w.spans.as_deref().is_some_and(|s| spans_use(s, key)))
            || self.reads.iter().any(|r| spans_use(&r.sink, key))
            || self.records.iter().any(|r| match &r.body {
                Body::Fpdu {
                    data: Data::Guest { spans, .. },
                    ..
                } => spans_use(spans, key),
                _ => false,
            })
    }

    /// Region `key` is gone: the WRs in it fail (`CQE_DETAIL_REGION_GONE`, reported when
    /// the QP flushes) and no Read's response is placed into it. The records that read it
    /// stay as they are: the engine resets the connection with them, so nothing builds
    /// them again.
    pub(super) fn region_gone(&mut self, key: u32) {
        for w in &mut self.wrs {
            if w.spans.as_deref().is_some_and(|s| spans_use(s, key)) {
                w.spans = None;
                w.until = Until::Done;
                w.error = Some((
                    qpip_abi::cqe::CQE_STATUS_LOCAL_PROTECTION,
                    qpip_abi::cqe::CQE_DETAIL_REGION_GONE,
                ));
            }
        }
        self.reads.retain(|r| !spans_use(&r.sink, key));
    }

    /// The index of the record holding stream offset `off`.
    fn find(&self, off: u64) -> Option<usize> {
        let i = self
            .records
            .partition_point(|r| r.start + r.len as u64 <= off);
        (i < self.records.len()).then_some(i)
    }
}

/// Writes record `r` whole into `out` (exactly `r.len` bytes).
fn build(mem: &GuestMemoryMmap, r: &Record, crc: bool, out: &mut [u8]) {
    match &r.body {
        Body::Raw(b) => out.copy_from_slice(b),
        Body::Fpdu {
            header,
            header_len,
            data,
        } => {
            let h = *header_len as usize;
            let ulpdu = h + data.len();
            out[..LENGTH_LEN].copy_from_slice(&(ulpdu as u16).to_be_bytes());
            out[LENGTH_LEN..LENGTH_LEN + h].copy_from_slice(&header[..h]);
            data.read(mem, &mut out[LENGTH_LEN + h..LENGTH_LEN + ulpdu]);
            let covered = out.len() - CRC_LEN;
            out[LENGTH_LEN + ulpdu..covered].fill(0);
            let field = if crc {
                fpdu::crc_field(&out[..covered])
            } else {
                [0; CRC_LEN]
            };
            out[covered..].copy_from_slice(&field);
        }
    }
}

/// An iWARP QP's records as its connection's [`SendSource`].
pub(super) struct Source<'a> {
    pub(super) mem: &'a GuestMemoryMmap,
    pub(super) tx: &'a Tx,
}

impl SendSource for Source<'_> {
    fn read(&mut self, offset: u64, buf: &mut [u8]) {
        let _stage = crate::stages::span(crate::stages::Stage::GetData);
        let mut at = 0;
        let mut off = offset;
        let mut scratch = Vec::new();
        while at < buf.len() {
            let Some(i) = self.tx.find(off) else {
                buf[at..].fill(0);
                debug_assert!(false, "read beyond the records");
                return;
            };
            let r = &self.tx.records[i];
            let rel = (off - r.start) as usize;
            let n = (r.len as usize - rel).min(buf.len() - at);
            if rel == 0 && n == r.len as usize {
                // The whole record: built in place.
                build(self.mem, r, self.tx.crc, &mut buf[at..at + n]);
            } else {
                scratch.resize(r.len as usize, 0);
                build(self.mem, r, self.tx.crc, &mut scratch);
                buf[at..at + n].copy_from_slice(&scratch[rel..rel + n]);
            }
            at += n;
            off += n as u64;
        }
    }

    fn segment_end(&self, offset: u64, len: u64, mss: u64) -> u64 {
        let Some(first) = self.tx.find(offset) else {
            return offset + len;
        };
        let ends = self
            .tx
            .records
            .range(first..)
            .map(|r| r.start + r.len as u64);
        record_segment_end(ends, offset, len, mss)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::iwarp::wire::fpdu::{Deframer, Prefix};
    use crate::net::iwarp::wire::rdmap::Body as MsgBody;

    fn inline(bytes: &[u8]) -> Data {
        Data::Inline {
            bytes: bytes.into(),
            off: 0,
            len: bytes.len(),
        }
    }

    fn stream(tx: &Tx) -> Vec<u8> {
        let mem = GuestMemoryMmap::default();
        let mut b = vec![0u8; tx.end as usize];
        Source { mem: &mem, tx }.read(0, &mut b);
        b
    }

    /// A Send longer than an FPDU is cut into FPDUs that the wire's deframer and parser
    /// read back as one message at increasing offsets, the last one marked; with CRC on
    /// every FPDU's CRC checks out.
    #[test]
    fn a_long_send_is_cut_into_fpdus_that_parse_back() {
        for crc in [false, true] {
            let mut tx = Tx::new();
            tx.crc = crc;
            tx.mulpdu = 100;
            let msg: Vec<u8> = (0..250u32).map(|i| i as u8).collect();
            tx.push_send(inline(&msg), false);
            tx.push_send(inline(b""), true);
            let s = stream(&tx);
            let mut d = Deframer::new(crc, 100);
            let mut got = Vec::new();
            let mut seen = Vec::new();
            for f in d.feed(&s) {
                let f = f.unwrap();
                assert!(f.ulpdu().len() <= 100);
                let m = rdmap::parse(f.ulpdu()).unwrap();
                let crate::net::iwarp::wire::ddp::Buffer::Untagged { msn, mo, .. } =
                    m.header.buffer
                else {
                    panic!("untagged")
                };
                let MsgBody::Data(p) = m.body else {
                    panic!("data")
                };
                if msn == 1 {
                    assert_eq!(mo as usize, got.len());
                    got.extend_from_slice(p);
                }
                seen.push((m.opcode, msn, m.header.last));
            }
            assert_eq!(got, msg);
            assert_eq!(
                seen,
                [
                    // 82 bytes an FPDU after the 18-byte header: 82 + 82 + 82 + 4.
                    (Opcode::Send, 1, false),
                    (Opcode::Send, 1, false),
                    (Opcode::Send, 1, false),
                    (Opcode::Send, 1, true),
                    (Opcode::SendSe, 2, true)
                ]
            );
        }
    }

    /// Any piece of the stream reads as the same bytes as the whole, and a segment ends
    /// at a record's end.
    #[test]
    fn pieces_read_as_the_whole_and_segments_end_with_records() {
        let mut tx = Tx::new();
        tx.crc = true;
        tx.mulpdu = 64;
        tx.push_raw(b"MPA ID Req Frame\x50\x02\x00\x00".to_vec());
        tx.push_write(inline(&[7u8; 130]), 0x11, 0x1000);
        tx.push_read_request(ReadRequest {
            sink_stag: 1,
            sink_to: 2,
            size: 3,
            source_stag: 4,
            source_to: 5,
        });
        let whole = stream(&tx);
        let mem = GuestMemoryMmap::default();
        let mut src = Source { mem: &mem, tx: &tx };
        for off in 0..whole.len() {
            for len in [1, 3, 17, whole.len() - off] {
                let len = len.min(whole.len() - off);
                let mut b = vec![0u8; len];
                src.read(off as u64, &mut b);
                assert_eq!(b, &whole[off..off + len], "{len} at {off}");
            }
        }
        // The MPA frame (20 bytes) then FPDUs of 2 + 64 + 2 + 4 = 72 bytes at most.
        assert_eq!(src.segment_end(0, 1000, 1000), 20, "a short record ends it");
        assert_eq!(
            src.segment_end(20, 10, 72),
            30,
            "a record longer than allowed"
        );
        // The Write's 130 bytes: 50 + 50 + 30 after its 14-byte headers, in FPDUs of 72,
        // 72 and 52 bytes; the short one ends a super-segment.
        assert_eq!(src.segment_end(20, 200, 72), 20 + 72 + 72 + 52);
        assert_eq!(src.segment_end(20, 150, 72), 20 + 72 + 72);
        assert!(matches!(
            fpdu::parse_prefix(&whole[20..], true, 64),
            Ok(Prefix::Complete { len: 72, .. })
        ));
    }

    #[test]
    fn acknowledged_records_and_served_reads_go() {
        let mut tx = Tx::new();
        tx.push_raw(vec![0; 10]);
        tx.push_send(inline(b"abc"), false);
        tx.serving.push_back(tx.end);
        tx.acked(10);
        assert_eq!(tx.records.len(), 1);
        assert_eq!(tx.serving.len(), 1);
        tx.acked(tx.end);
        assert!(tx.records.is_empty() && tx.serving.is_empty());
    }
}
