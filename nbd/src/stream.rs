//! The receive side of a TCP QP in stream framing as a byte stream: receive buffers
//! (slots of one registered region) are posted, fill with whatever the connection
//! carried, and are read in order. Bytes can be copied out (headers) or handed out in
//! place ([`Chunk`]s, a WRITE's data on its way to the disk without a copy); a slot is
//! posted again once all its bytes are consumed and no chunk of it is held.

use std::collections::VecDeque;

use qpip::{Context, MemoryRegion, Qp, Result};

/// Tags of receive WRs: this bit and the slot. Sends use tags without it.
pub const RECV_TAG: u64 = 1 << 63;

/// Bytes of one slot, in place: a slot and a range of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    pub slot: usize,
    pub start: usize,
    pub end: usize,
}

impl Chunk {
    pub fn len(&self) -> usize {
        self.end - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }
}

/// The receive side of one connection.
pub struct RecvStream {
    region: MemoryRegion,
    slot_len: usize,
    /// Received bytes not consumed yet, in stream order.
    ready: VecDeque<Chunk>,
    available: usize,
    /// Per slot: chunks handed out and not released.
    holds: Vec<u32>,
    /// Per slot: whether it holds received bytes not consumed yet.
    unread: Vec<bool>,
    /// The peer ended its direction (a receive completed empty).
    eof: bool,
}

impl RecvStream {
    /// `slots` receive buffers of `slot_len` bytes in one region of `ctx`.
    pub fn new(ctx: &Context, slots: usize, slot_len: usize) -> Result<RecvStream> {
        Ok(RecvStream {
            region: ctx.alloc(slots * slot_len)?,
            slot_len,
            ready: VecDeque::new(),
            available: 0,
            holds: vec![0; slots],
            unread: vec![false; slots],
            eof: false,
        })
    }

    /// Posts every slot on `qp` (once, before the connection carries data).
    pub fn post_all(&self, qp: &Qp) -> Result<()> {
        for slot in 0..self.holds.len() {
            self.post(qp, slot)?;
        }
        Ok(())
    }

    fn post(&self, qp: &Qp, slot: usize) -> Result<()> {
        let sge = self.region.sge(slot * self.slot_len, self.slot_len);
        qp.post_recv(RECV_TAG | slot as u64, &[sge])
    }

    /// A receive completed (tag `wr_id`, `byte_len` bytes; 0: end of stream).
    pub fn received(&mut self, wr_id: u64, byte_len: u32) {
        let slot = (wr_id & !RECV_TAG) as usize;
        if slot >= self.holds.len() {
            return;
        }
        if byte_len == 0 {
            self.eof = true;
            // Every later receive completes empty too: keep the slot out of the ring.
            return;
        }
        let len = (byte_len as usize).min(self.slot_len);
        self.ready.push_back(Chunk {
            slot,
            start: 0,
            end: len,
        });
        self.available += len;
        self.unread[slot] = true;
    }

    /// Bytes received and not consumed.
    pub fn available(&self) -> usize {
        self.available
    }

    /// Whether the peer ended its direction.
    pub fn eof(&self) -> bool {
        self.eof
    }

    /// The bytes of a chunk.
    pub fn bytes(&self, c: &Chunk) -> &[u8] {
        let base = c.slot * self.slot_len;
        &self.region[base + c.start..base + c.end]
    }

    /// The address of a chunk's first byte (for I/O that reads it in place).
    pub fn ptr(&self, c: &Chunk) -> *const u8 {
        self.bytes(c).as_ptr()
    }

    /// Copies `out.len()` bytes out and consumes them, if that many are there.
    pub fn copy_out(&mut self, qp: &Qp, out: &mut [u8]) -> Result<bool> {
        if self.available < out.len() {
            return Ok(false);
        }
        let mut at = 0;
        while at < out.len() {
            let c = self.take_front(out.len() - at);
            out[at..at + c.len()].copy_from_slice(self.bytes(&c));
            at += c.len();
            self.release(qp, c)?;
        }
        Ok(true)
    }

    /// Consumes up to `max` bytes from the front, in place: the caller reads them and
    /// gives each chunk back with [`RecvStream::release`]. At most one chunk (the bytes
    /// of one slot) per call; None if nothing is there.
    pub fn take(&mut self, max: usize) -> Option<Chunk> {
        (self.available > 0 && max > 0).then(|| self.take_front(max))
    }

    fn take_front(&mut self, max: usize) -> Chunk {
        let front = self.ready.front_mut().expect("bytes available");
        let n = front.len().min(max);
        let c = Chunk {
            slot: front.slot,
            start: front.start,
            end: front.start + n,
        };
        front.start += n;
        if front.is_empty() {
            self.ready.pop_front();
            self.unread[c.slot] = false;
        }
        self.available -= n;
        self.holds[c.slot] += 1;
        c
    }

    /// The bytes at the front, in place (those of one slot); empty if none.
    pub fn front(&self) -> &[u8] {
        self.ready.front().map_or(&[], |c| self.bytes(c))
    }

    /// Consumes `n` bytes from the front (at most [`RecvStream::front`]'s).
    pub fn consume(&mut self, qp: &Qp, n: usize) -> Result<()> {
        if n > 0 {
            let c = self.take_front(n);
            self.release(qp, c)?;
        }
        Ok(())
    }

    /// Gives a chunk back; its slot is posted again once nothing of it is held or unread.
    pub fn release(&mut self, qp: &Qp, c: Chunk) -> Result<()> {
        let h = &mut self.holds[c.slot];
        *h = h.saturating_sub(1);
        if *h == 0 && !self.unread[c.slot] && !self.eof {
            self.post(qp, c.slot)?;
        }
        Ok(())
    }
}
