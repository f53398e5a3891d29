//! The two ways a test moves bytes, behind one interface: a qpip queue pair ([`QpLink`],
//! device or software provider) and a kernel socket ([`SockLink`], plain `std::net`, for
//! the baseline on the same path).
//!
//! Test data is the byte [`PATTERN`] repeated. A sender prepares it once
//! ([`Link::prepare`]) and sends it message after message ([`Link::send_pattern`]); a
//! receiver takes each piece as it arrived ([`Link::hold`], [`Link::held`]) and gives it
//! back ([`Link::release`]) or echoes it ([`Link::echo`]). What that costs is each side's
//! own way of moving bytes:
//!
//! - a socket writes from the test's buffer (the kernel copies it) and reads into its own
//!   buffer (the kernel copies into it);
//! - a zero-copy QP (the default) sends from registered buffers filled with the pattern
//!   once, and hands over received bytes where the device placed them, in its registered
//!   receive buffers; an echo is sent from the receive buffer itself;
//! - a copying QP (`--copy`) copies every message into a registered send buffer first and
//!   every received piece out into a buffer of its own, as a socket's caller would.
//!
//! Sends of at most `max_inline` bytes (control lines, 1-byte pings) go inline in the work
//! request either way: the library copies them into the request, as QP users do.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, SocketAddrV6, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use qpip::{Completion, Context, Cq, EventKind, MemoryRegion, Opcode, Qp, QpKind, SendWr, Status};

use crate::counters::{self, Counters};
use crate::sockets;

/// The byte every test message is made of.
pub const PATTERN: u8 = 0xa5;

/// A completed receive not read yet: its buffer, bytes, bytes read so far, source.
type Piece = (usize, usize, usize, Option<SocketAddrV6>);

/// What a read answers: `None` for nothing in time, else the bytes it took (0 on TCP: the
/// peer closed) and the source (UDP).
type Received = Option<(usize, Option<SocketAddrV6>)>;

/// One endpoint of a test.
pub trait Link {
    /// Sends `data`, copied: one datagram (UDP), one message (TCP message framing) or bytes
    /// of the stream. Returns once it is posted/handed over, not once it arrived.
    fn send(&mut self, data: &[u8]) -> io::Result<()>;
    /// Gets `len` bytes of [`PATTERN`] ready to send (outside a timed loop).
    fn prepare(&mut self, len: usize) -> io::Result<()>;
    /// Sends `len` bytes of [`PATTERN`] as one datagram or message ([`Link::send`]), the
    /// link's own way (see the module's documentation).
    fn send_pattern(&mut self, len: usize) -> io::Result<()>;
    /// Receives into `buf`, copied: a datagram or message, or some bytes of a stream.
    /// `Ok(None)`: nothing within `timeout`; `Ok(Some((0, _)))` on TCP: the peer closed.
    fn recv(
        &mut self,
        buf: &mut [u8],
        timeout: Option<Duration>,
    ) -> io::Result<Option<(usize, Option<SocketAddrV6>)>>;
    /// Receives the next datagram, message or piece of a stream and holds it for
    /// [`Link::held`] until [`Link::release`] or [`Link::echo`]; answers as
    /// [`Link::recv`] does. A piece still held is released first.
    fn hold(
        &mut self,
        timeout: Option<Duration>,
    ) -> io::Result<Option<(usize, Option<SocketAddrV6>)>>;
    /// The bytes [`Link::hold`] took (empty if none).
    fn held(&self) -> &[u8];
    /// Done with the held bytes.
    fn release(&mut self) -> io::Result<()>;
    /// Sends the held bytes back (UDP: to the peer set) and releases them.
    fn echo(&mut self) -> io::Result<()>;
    /// UDP: where sends go.
    fn set_peer(&mut self, peer: SocketAddrV6);
    /// TCP: ends our direction after what was sent.
    fn close_write(&mut self) -> io::Result<()>;
    /// Before the endpoint goes away: every send completed, our direction closed
    /// (so dropping it loses nothing).
    fn finish(&mut self) -> io::Result<()>;
    /// The counters a test reports per message: the library's and the device's (QPs), or
    /// the NIC's interrupts and the guest's segments or datagrams sent (sockets,
    /// `sockets.rs`); `None` if there are none.
    fn counters(&self) -> Option<Counters>;
    /// Busy-polls for what comes instead of sleeping until it comes (`--spin` keeps it
    /// on), where the link does (QPs); after [`SPIN_IDLE`] with nothing arriving it sleeps
    /// as usual.
    fn set_spin(&mut self, spin: bool);
}

/// How long a busy-polling link polls with nothing arriving before it sleeps: between
/// tests a receiver spinning for a stream must not hold its CPU.
pub const SPIN_IDLE: Duration = Duration::from_millis(100);

fn other(msg: String) -> io::Error {
    io::Error::other(msg)
}

fn qerr(what: &str, e: qpip::Error) -> io::Error {
    other(format!("{what}: {e}"))
}

/// How a QP's buffers are laid out and used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bufs {
    /// Sends and receives in flight at once (send and receive buffers each).
    pub depth: usize,
    /// Bytes per send buffer (data longer than this is a stream's several sends).
    pub send_size: usize,
    /// Bytes per receive buffer (a datagram or message must fit).
    pub recv_size: usize,
    /// Register the send buffers only when a send needs one (a server, whose sends are
    /// mostly inline), rather than at once (a client, before its timed loop).
    pub lazy_send: bool,
    /// Copy data into and out of the registered buffers (`--copy`).
    pub copy: bool,
}

/// In the tag of an echo sent from a receive buffer: that buffer's number is in bits
/// 32..63 (it is reposted once the send completed), the send slot's in bits 0..32 (the
/// slot only counts the send against the queue's depth).
const ECHO: u64 = 1 << 63;

/// A queue pair with registered send and receive buffers (one registered region each,
/// cut into `depth` slots): receives are completions of buffers posted in advance,
/// reposted once read.
pub struct QpLink {
    ctx: Context,
    cqs: Cqs,
    qp: Qp,
    tcp: bool,
    stream: bool,
    /// Busy-poll the CQ instead of sleeping on its descriptor (up to [`SPIN_IDLE`]).
    spin: bool,
    /// `--spin`: what [`Link::set_spin`]`(false)` goes back to.
    spin_always: bool,
    bufs: Bufs,
    send_mr: Option<MemoryRegion>,
    free: Vec<usize>,
    /// Bytes of [`PATTERN`] at the start of each send slot.
    pattern_len: Vec<usize>,
    recv_mr: MemoryRegion,
    /// Completed receives not read yet.
    ready: VecDeque<Piece>,
    /// What `hold` took: `Some(len)`, from the front of `ready` (zero-copy) or in `stage`
    /// (copying).
    held: Option<usize>,
    stage: Vec<u8>,
    /// Copying sends: the test data, copied into a send buffer for every message.
    pattern: Vec<u8>,
    peer: Option<SocketAddrV6>,
    eof: bool,
    closed: bool,
    max_inline: usize,
    /// Times a wait for completions found the CQ empty and blocked.
    waits: u64,
    /// Receive buffers read and waiting to be posted again, a batch at a time (one
    /// doorbell for all: `Qp::post_recvs`).
    repost: Vec<usize>,
    /// A [`CONTROL_SIZE`]-byte piece per send slot, registered with the link: what a
    /// control line too long to go inline (a server's `DONE` with its counters) is sent
    /// from while the data buffers are not registered. Registering those (depth times the
    /// largest message: 16 MiB for a TCP server) takes a TCG guest about 0.1 s, which the
    /// first such line would else spend inside the peer's measurement.
    control_mr: MemoryRegion,
}

/// Bytes of a control line that goes from [`QpLink::control_mr`] (longer ones need the
/// data buffers).
pub const CONTROL_SIZE: usize = 512;

/// Receive buffers reposted together; the batch goes earlier when the link is about to
/// wait for completions, so the device never waits for buffers the program holds back.
const REPOST_BATCH: usize = 16;

/// A QP's two CQs: sends complete on one, receives on the other, so waiting for a
/// receive is never woken by a send's completion.
pub struct Cqs {
    pub send: Cq,
    pub recv: Cq,
}

/// Which of a QP's CQs to take completions from.
#[derive(Clone, Copy)]
enum Side {
    Send,
    Recv,
}

/// Ring entries for `depth` requests: a power of two, at least 2.
pub fn ring(depth: usize) -> u32 {
    (depth.max(2) as u32).next_power_of_two()
}

impl QpLink {
    /// Wraps `qp` (already connected, or bound for UDP) with buffers laid out as `bufs`.
    pub fn new(ctx: &Context, cqs: Cqs, qp: Qp, bufs: Bufs, spin: bool) -> io::Result<QpLink> {
        let recv_mr = ctx
            .alloc(bufs.depth * bufs.recv_size)
            .map_err(|e| qerr("register memory", e))?;
        for i in 0..bufs.depth {
            qp.post_recv(i as u64, &[recv_mr.sge(i * bufs.recv_size, bufs.recv_size)])
                .map_err(|e| qerr("post receive", e))?;
        }
        let control_mr = ctx
            .alloc(bufs.depth * CONTROL_SIZE)
            .map_err(|e| qerr("register memory", e))?;
        let kind = qp.kind();
        let mut l = QpLink {
            ctx: ctx.clone(),
            tcp: matches!(kind, QpKind::Tcp(_)),
            stream: matches!(kind, QpKind::Tcp(qpip::Framing::Stream)),
            cqs,
            qp,
            spin,
            spin_always: spin,
            bufs,
            send_mr: None,
            free: (0..bufs.depth).collect(),
            pattern_len: vec![0; bufs.depth],
            recv_mr,
            ready: VecDeque::new(),
            held: None,
            stage: Vec::new(),
            pattern: Vec::new(),
            peer: None,
            eof: false,
            closed: false,
            max_inline: ctx.limits().max_inline as usize,
            waits: 0,
            repost: Vec::with_capacity(REPOST_BATCH),
            control_mr,
        };
        if !bufs.lazy_send {
            l.send_bufs()?;
        }
        Ok(l)
    }

    /// The registered send buffers, registered now if they are not yet.
    fn send_bufs(&mut self) -> io::Result<&mut MemoryRegion> {
        if self.send_mr.is_none() {
            let mr = self
                .ctx
                .alloc(self.bufs.depth * self.bufs.send_size)
                .map_err(|e| qerr("register memory", e))?;
            self.send_mr = Some(mr);
        }
        Ok(self.send_mr.as_mut().unwrap())
    }

    /// Takes completions of one side (at most `timeout` waiting for the first); false if
    /// none came.
    fn pump(&mut self, side: Side, timeout: Option<Duration>) -> io::Result<bool> {
        let mut comps = [Completion::default(); 32];
        let mut n = match side {
            Side::Send => self.cqs.send.poll(&mut comps),
            Side::Recv => self.cqs.recv.poll(&mut comps),
        };
        if n == 0 && timeout != Some(Duration::ZERO) {
            self.flush_reposts()?;
        }
        let cq = match side {
            Side::Send => &self.cqs.send,
            Side::Recv => &self.cqs.recv,
        };
        let mut timeout = timeout;
        if n == 0 && timeout != Some(Duration::ZERO) && self.spin {
            let start = Instant::now();
            let cap = timeout.map_or(SPIN_IDLE, |t| t.min(SPIN_IDLE));
            loop {
                n = cq.poll(&mut comps);
                if n > 0 || start.elapsed() >= cap {
                    break;
                }
                std::hint::spin_loop();
            }
            // Nothing for SPIN_IDLE: sleep for what is left of the timeout.
            timeout = timeout.map(|t| t.saturating_sub(start.elapsed()));
        }
        if n == 0 && timeout != Some(Duration::ZERO) {
            self.waits += 1;
            n = cq
                .wait(&mut comps, timeout)
                .map_err(|e| qerr("wait for completions", e))?;
        }
        for c in &comps[..n] {
            match c.opcode {
                Opcode::Send if c.is_ok() && c.wr_id & ECHO != 0 => {
                    self.free.push(c.wr_id as u32 as usize);
                    self.post_recv(((c.wr_id & !ECHO) >> 32) as usize)?;
                }
                Opcode::Send if c.is_ok() => self.free.push(c.wr_id as usize),
                Opcode::Send => return Err(other(format!("send failed: {}", c.status))),
                Opcode::RdmaWrite | Opcode::RdmaRead | Opcode::RecvImm | Opcode::Tripwire => {
                    return Err(other(format!("unexpected RDMA completion: {c:?}")))
                }
                Opcode::Recv if c.is_ok() => {
                    if self.tcp && c.byte_len == 0 {
                        self.eof = true;
                    } else {
                        let slot = c.wr_id as usize;
                        self.ready.push_back((slot, c.byte_len as usize, 0, c.src));
                    }
                }
                Opcode::Recv if c.status == Status::LocalLength => {
                    return Err(other(format!(
                        "a {}-byte message is larger than the receive buffers",
                        c.byte_len
                    )))
                }
                Opcode::Recv if c.status == Status::Flushed && self.eof => {}
                Opcode::Recv => return Err(other(format!("receive failed: {}", c.status))),
            }
        }
        Ok(n > 0)
    }

    /// Posts the receive buffers read since the last batch, with one doorbell.
    fn flush_reposts(&mut self) -> io::Result<()> {
        let size = self.bufs.recv_size;
        while !self.repost.is_empty() {
            let sges: Vec<[qpip::Sge<'_>; 1]> = self
                .repost
                .iter()
                .map(|&slot| [self.recv_mr.sge(slot * size, size)])
                .collect();
            let n = self
                .qp
                .post_recvs(
                    self.repost
                        .iter()
                        .zip(&sges)
                        .map(|(&slot, sge)| (slot as u64, &sge[..])),
                )
                .map_err(|e| qerr("post receives", e))?;
            drop(sges);
            self.repost.drain(..n);
        }
        Ok(())
    }

    fn post_recv(&self, slot: usize) -> io::Result<()> {
        let size = self.bufs.recv_size;
        self.qp
            .post_recv(slot as u64, &[self.recv_mr.sge(slot * size, size)])
            .map_err(|e| qerr("post receive", e))
    }

    /// Waits until every send completed (TCP on the device: acknowledged).
    pub fn drain_sends(&mut self, timeout: Duration) -> io::Result<()> {
        let deadline = Instant::now() + timeout;
        while self.free.len() < self.bufs.depth {
            if Instant::now() >= deadline {
                return Err(other(format!("sends did not complete within {timeout:?}")));
            }
            self.pump(Side::Send, Some(Duration::from_millis(100)))?;
        }
        Ok(())
    }

    /// Reads and drops the context's connection events (so a long-running server's
    /// queue does not fill), failing on a connection error of this QP.
    pub fn drain_events(&self) -> io::Result<()> {
        while let Some(e) = self.ctx.poll_event().map_err(|e| qerr("events", e))? {
            if e.qp == self.qp.id() && e.kind == EventKind::QpError {
                return Err(other(format!(
                    "connection lost: {}",
                    e.error().map(|x| x.to_string()).unwrap_or_default()
                )));
            }
        }
        Ok(())
    }

    /// A free send slot, waiting for a send to complete if there is none.
    fn free_slot(&mut self) -> io::Result<usize> {
        while self.free.is_empty() {
            self.pump(Side::Send, None)?;
        }
        Ok(self.free.pop().unwrap())
    }

    /// Posts `wr` (UDP: to the peer).
    fn post(&self, wr: SendWr<'_>) -> io::Result<()> {
        let wr = if self.tcp {
            wr
        } else {
            wr.to(self
                .peer
                .ok_or_else(|| other("UDP send without a peer".into()))?)
        };
        self.qp.post_send(&wr).map_err(|e| qerr("post send", e))
    }

    /// Posts `len` bytes of send slot `slot`.
    fn post_slot(&self, slot: usize, len: usize) -> io::Result<()> {
        let mr = self.send_mr.as_ref().expect("send buffers");
        let sge = [mr.sge(slot * self.bufs.send_size, len)];
        self.post(SendWr::new(slot as u64, &sge))
    }

    /// The pieces `len` bytes go out in: one, or a stream's buffer-sized pieces.
    fn pieces(&self, len: usize) -> io::Result<Vec<usize>> {
        let size = self.bufs.send_size;
        if len <= size.max(self.max_inline) {
            return Ok(vec![len]);
        }
        if !self.stream {
            return Err(other(format!(
                "{len} bytes do not fit a {size}-byte buffer"
            )));
        }
        let mut v = vec![size; len / size];
        if !len.is_multiple_of(size) {
            v.push(len % size);
        }
        Ok(v)
    }

    /// Waits until there is a received piece (or the end); false if `timeout` passed.
    fn await_ready(&mut self, timeout: Option<Duration>) -> io::Result<bool> {
        let deadline = timeout.map(|t| Instant::now() + t);
        while self.ready.is_empty() && !self.eof {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left == Some(Duration::ZERO) {
                return Ok(false);
            }
            self.pump(Side::Recv, left)?;
        }
        Ok(true)
    }

    /// The front received piece once there is one (a piece still held is released
    /// first); else what [`Link::recv`] and [`Link::hold`] answer: `None` when nothing came
    /// within `timeout`, `Some((0, None))` at the end of the stream.
    fn front_piece(&mut self, timeout: Option<Duration>) -> io::Result<Result<Piece, Received>> {
        self.release()?;
        if !self.await_ready(timeout)? {
            return Ok(Err(None));
        }
        Ok(self.ready.front().copied().ok_or(Some((0, None))))
    }

    /// Bytes `[from, to)` of receive slot `slot`.
    fn recv_bytes(&self, slot: usize, from: usize, to: usize) -> &[u8] {
        let base = slot * self.bufs.recv_size;
        &self.recv_mr[base + from..base + to]
    }

    /// Drops the front received piece; its buffer is reposted with the next batch.
    fn pop_ready(&mut self) -> io::Result<()> {
        if let Some((slot, ..)) = self.ready.pop_front() {
            self.repost.push(slot);
            if self.repost.len() >= REPOST_BATCH {
                self.flush_reposts()?;
            }
        }
        Ok(())
    }
}

impl Link for QpLink {
    fn send(&mut self, data: &[u8]) -> io::Result<()> {
        let mut at = 0;
        for len in self.pieces(data.len())? {
            let piece = &data[at..at + len];
            at += len;
            if len <= self.max_inline {
                // It takes a slot too: slots count the sends in flight against the depth.
                let slot = self.free_slot()?;
                self.post(SendWr::inline(slot as u64, piece))?;
                continue;
            }
            if self.send_mr.is_none() && len <= CONTROL_SIZE {
                let slot = self.free_slot()?;
                let at = slot * CONTROL_SIZE;
                self.control_mr[at..at + len].copy_from_slice(piece);
                let sge = [self.control_mr.sge(at, len)];
                self.post(SendWr::new(slot as u64, &sge))?;
                continue;
            }
            self.send_bufs()?;
            let slot = self.free_slot()?;
            let size = self.bufs.send_size;
            let mr = self.send_mr.as_mut().unwrap();
            mr[slot * size..slot * size + len].copy_from_slice(piece);
            self.pattern_len[slot] = 0;
            self.post_slot(slot, len)?;
        }
        Ok(())
    }

    fn prepare(&mut self, len: usize) -> io::Result<()> {
        if len <= self.max_inline {
            return Ok(());
        }
        if self.bufs.copy {
            if self.pattern.len() < len {
                self.pattern = vec![PATTERN; len];
            }
            return Ok(());
        }
        let size = self.bufs.send_size;
        let fill = len.min(size);
        self.send_bufs()?;
        // Only free buffers: one in flight is the device's to read until it completes.
        let free = self.free.clone();
        let mr = self.send_mr.as_mut().unwrap();
        for slot in free {
            if self.pattern_len[slot] < fill {
                mr[slot * size..slot * size + fill].fill(PATTERN);
                self.pattern_len[slot] = fill;
            }
        }
        Ok(())
    }

    fn send_pattern(&mut self, len: usize) -> io::Result<()> {
        if len <= self.max_inline {
            const INLINE: [u8; 256] = [PATTERN; 256];
            if len <= INLINE.len() {
                return self.send(&INLINE[..len]);
            }
        }
        if self.bufs.copy {
            self.prepare(len)?;
            let pattern = std::mem::take(&mut self.pattern);
            let r = self.send(&pattern[..len]);
            self.pattern = pattern;
            return r;
        }
        self.send_bufs()?;
        for piece in self.pieces(len)? {
            let slot = self.free_slot()?;
            if self.pattern_len[slot] < piece {
                // Not prepared (or overwritten by a copied send): fill it now.
                let size = self.bufs.send_size;
                let mr = self.send_mr.as_mut().unwrap();
                mr[slot * size..slot * size + piece].fill(PATTERN);
                self.pattern_len[slot] = piece;
            }
            self.post_slot(slot, piece)?;
        }
        Ok(())
    }

    fn recv(
        &mut self,
        buf: &mut [u8],
        timeout: Option<Duration>,
    ) -> io::Result<Option<(usize, Option<SocketAddrV6>)>> {
        let (slot, len, done, src) = match self.front_piece(timeout)? {
            Ok(piece) => piece,
            Err(answer) => return Ok(answer),
        };
        let n = (len - done).min(buf.len());
        buf[..n].copy_from_slice(self.recv_bytes(slot, done, done + n));
        self.ready.front_mut().unwrap().2 += n;
        // A datagram or message is one read (the rest of it is cut, like a socket's).
        if done + n == len || !self.stream {
            self.pop_ready()?;
        }
        Ok(Some((n, src)))
    }

    fn hold(
        &mut self,
        timeout: Option<Duration>,
    ) -> io::Result<Option<(usize, Option<SocketAddrV6>)>> {
        let (slot, len, done, src) = match self.front_piece(timeout)? {
            Ok(piece) => piece,
            Err(answer) => return Ok(answer),
        };
        let n = len - done;
        if self.bufs.copy {
            let mut stage = std::mem::take(&mut self.stage);
            if stage.len() < n {
                stage.resize(n, 0);
            }
            stage[..n].copy_from_slice(self.recv_bytes(slot, done, len));
            self.stage = stage;
            self.pop_ready()?;
        }
        self.held = Some(n);
        Ok(Some((n, src)))
    }

    fn held(&self) -> &[u8] {
        match self.held {
            None => &[],
            Some(n) if self.bufs.copy => &self.stage[..n],
            Some(_) => {
                let (slot, len, done, _) = *self.ready.front().expect("a held piece");
                self.recv_bytes(slot, done, len)
            }
        }
    }

    fn release(&mut self) -> io::Result<()> {
        if self.held.take().is_some() && !self.bufs.copy {
            self.pop_ready()?;
        }
        Ok(())
    }

    fn echo(&mut self) -> io::Result<()> {
        let Some(n) = self.held else {
            return Ok(());
        };
        if self.bufs.copy {
            let stage = std::mem::take(&mut self.stage);
            let r = self.send(&stage[..n]);
            self.stage = stage;
            r?;
            return self.release();
        }
        let send_slot = self.free_slot()?;
        let (slot, len, done, _) = *self.ready.front().expect("a held piece");
        if n <= self.max_inline {
            // Copied into the request at once: the receive buffer is free again.
            self.post(SendWr::inline(
                send_slot as u64,
                self.recv_bytes(slot, done, len),
            ))?;
            return self.release();
        }
        // From the receive buffer itself, which is reposted when the send completed.
        self.held = None;
        self.ready.pop_front();
        let base = slot * self.bufs.recv_size;
        let sge = [self.recv_mr.sge(base + done, len - done)];
        self.post(SendWr::new(
            ECHO | (slot as u64) << 32 | send_slot as u64,
            &sge,
        ))?;
        Ok(())
    }

    fn set_peer(&mut self, peer: SocketAddrV6) {
        self.peer = Some(peer);
    }

    fn close_write(&mut self) -> io::Result<()> {
        self.closed = true;
        self.qp.close(0).map_err(|e| qerr("close", e))
    }

    fn finish(&mut self) -> io::Result<()> {
        self.release()?;
        self.drain_sends(crate::T)?;
        if !self.tcp {
            return Ok(());
        }
        if !self.closed {
            self.close_write()?;
        }
        let ev = self
            .ctx
            .wait_event_for(self.qp.id(), EventKind::Close, Some(crate::T))
            .map_err(|e| qerr("close", e))?;
        match ev.and_then(|e| e.error().map(Err).or(Some(Ok(())))) {
            Some(Ok(())) => self.drain_events(),
            Some(Err(e)) => Err(other(format!("close: {e}"))),
            None => Err(other(format!(
                "close did not complete within {:?}",
                crate::T
            ))),
        }
    }

    fn counters(&self) -> Option<Counters> {
        Some(counters::take(&self.ctx, self.waits))
    }

    fn set_spin(&mut self, spin: bool) {
        self.spin = spin || self.spin_always;
    }
}

/// A kernel socket: a UDP socket or a TCP connection.
pub struct SockLink {
    sock: Sock,
    /// The read timeout set on the socket.
    timeout: Option<Duration>,
    /// What [`Link::hold`] reads into, and how much of it is held.
    buf: Vec<u8>,
    held: usize,
    /// The test data [`Link::send_pattern`] writes.
    pattern: Vec<u8>,
}

enum Sock {
    Udp {
        sock: UdpSocket,
        peer: Option<SocketAddrV6>,
        /// The source of the last datagram received: whom a server's socket bound to any
        /// address talks to in the test under way (its counters' NIC is the one that
        /// reaches it).
        from: Option<SocketAddrV6>,
    },
    Tcp(TcpStream),
}

impl SockLink {
    /// A TCP connection; [`Link::hold`] reads up to `buf` bytes at a time.
    pub fn tcp(stream: TcpStream, buf: usize) -> io::Result<SockLink> {
        stream.set_nodelay(true)?;
        Ok(SockLink::new(Sock::Tcp(stream), buf))
    }

    /// A UDP socket; [`Link::hold`] takes datagrams of up to `buf` bytes.
    pub fn udp(sock: UdpSocket, buf: usize) -> SockLink {
        SockLink::new(
            Sock::Udp {
                sock,
                peer: None,
                from: None,
            },
            buf,
        )
    }

    fn new(sock: Sock, buf: usize) -> SockLink {
        SockLink {
            sock,
            timeout: None,
            buf: vec![0; buf],
            held: 0,
            pattern: Vec::new(),
        }
    }

    /// Sets the socket's read timeout only when it changes (a system call each time).
    fn timeout_to(&mut self, want: Option<Duration>) -> io::Result<()> {
        let want = want.map(|t| t.max(Duration::from_micros(1)));
        if self.timeout != want {
            match &self.sock {
                Sock::Udp { sock, .. } => sock.set_read_timeout(want)?,
                Sock::Tcp(s) => s.set_read_timeout(want)?,
            }
            self.timeout = want;
        }
        Ok(())
    }

    fn read(
        &mut self,
        into: Option<&mut [u8]>,
        timeout: Option<Duration>,
    ) -> io::Result<Option<(usize, Option<SocketAddrV6>)>> {
        self.timeout_to(timeout)?;
        let buf = match into {
            Some(b) => b,
            None => &mut self.buf[..],
        };
        let r = match &mut self.sock {
            Sock::Udp { sock, from, .. } => sock.recv_from(buf).map(|(n, src)| {
                let src = match src {
                    SocketAddr::V6(a) => a,
                    SocketAddr::V4(a) => SocketAddrV6::new(a.ip().to_ipv6_mapped(), a.port(), 0, 0),
                };
                *from = Some(src);
                (n, Some(src))
            }),
            Sock::Tcp(s) => s.read(buf).map(|n| (n, None)),
        };
        match r {
            Ok(x) => Ok(Some(x)),
            Err(e) if timed_out(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

fn timed_out(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

impl Link for SockLink {
    fn send(&mut self, data: &[u8]) -> io::Result<()> {
        match &mut self.sock {
            Sock::Udp { sock, peer, .. } => {
                let to = peer.ok_or_else(|| other("UDP send without a peer".into()))?;
                sock.send_to(data, to).map(|_| ())
            }
            Sock::Tcp(s) => s.write_all(data),
        }
    }

    fn prepare(&mut self, len: usize) -> io::Result<()> {
        if self.pattern.len() < len {
            self.pattern = vec![PATTERN; len];
        }
        Ok(())
    }

    fn send_pattern(&mut self, len: usize) -> io::Result<()> {
        self.prepare(len)?;
        let pattern = std::mem::take(&mut self.pattern);
        let r = self.send(&pattern[..len]);
        self.pattern = pattern;
        r
    }

    fn recv(
        &mut self,
        buf: &mut [u8],
        timeout: Option<Duration>,
    ) -> io::Result<Option<(usize, Option<SocketAddrV6>)>> {
        self.held = 0;
        self.read(Some(buf), timeout)
    }

    fn hold(
        &mut self,
        timeout: Option<Duration>,
    ) -> io::Result<Option<(usize, Option<SocketAddrV6>)>> {
        self.held = 0;
        let r = self.read(None, timeout)?;
        if let Some((n, _)) = r {
            self.held = n;
        }
        Ok(r)
    }

    fn held(&self) -> &[u8] {
        &self.buf[..self.held]
    }

    fn release(&mut self) -> io::Result<()> {
        self.held = 0;
        Ok(())
    }

    fn echo(&mut self) -> io::Result<()> {
        let buf = std::mem::take(&mut self.buf);
        let r = self.send(&buf[..self.held]);
        self.buf = buf;
        self.held = 0;
        r
    }

    fn set_peer(&mut self, to: SocketAddrV6) {
        if let Sock::Udp { peer, .. } = &mut self.sock {
            *peer = Some(to);
        }
    }

    fn close_write(&mut self) -> io::Result<()> {
        match &self.sock {
            Sock::Tcp(s) => s.shutdown(Shutdown::Write),
            Sock::Udp { .. } => Ok(()),
        }
    }

    fn finish(&mut self) -> io::Result<()> {
        match self.close_write() {
            Err(e) if e.kind() != io::ErrorKind::NotConnected => Err(e),
            _ => Ok(()),
        }
    }

    fn counters(&self) -> Option<Counters> {
        match &self.sock {
            Sock::Tcp(s) => sockets::take(s.local_addr().ok(), true),
            Sock::Udp { sock, peer, from } => {
                // The last datagram's source first: a server's peer is still the previous
                // test's client when the next one's hello arrives, perhaps over another NIC.
                let local = sock.local_addr().ok();
                sockets::take(
                    local.and_then(|l| sockets::udp_local(l, from.or(*peer))),
                    false,
                )
            }
        }
    }

    /// Sockets always block, as socket programs do. A receiver busy-polling `recv` on the
    /// guest's one vCPU takes it from the softirq that does the socket's receive work:
    /// tried on 16 MiB streams, 8 KiB datagrams were lost 45-93 % (median 63) against
    /// 41-70 % blocking; 1 KiB 14-22 % against 9-38 %, no better for the rate.
    fn set_spin(&mut self, _spin: bool) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::T;
    use qpip::{Context, Framing, QpInit};
    use std::net::Ipv6Addr;

    fn tcp_qp(ctx: &Context, depth: usize) -> (Cqs, Qp) {
        let cqs = Cqs {
            send: ctx.create_cq(ring(depth)).unwrap(),
            recv: ctx.create_cq(ring(depth)).unwrap(),
        };
        let qp = ctx
            .create_qp(
                &QpInit::new(QpKind::Tcp(Framing::Message), &cqs.send)
                    .recv_cq(&cqs.recv)
                    .depth(ring(depth), ring(depth)),
            )
            .unwrap();
        (cqs, qp)
    }

    /// A server's control line longer than a send's inline room (its `DONE`) goes out
    /// without registering the data buffers, which a peer's measurement would wait for,
    /// and arrives whole; data beyond the control room still registers them.
    #[test]
    fn a_control_line_does_not_register_the_data_buffers() {
        let ctx = Context::open_soft().unwrap();
        let lo = |port| SocketAddrV6::new(Ipv6Addr::LOCALHOST, port, 0, 0);
        // A listener names its port: the first free one of a range.
        let (port, listener) = (47300..47364)
            .find_map(|p| ctx.listen(lo(p), 1).ok().map(|l| (p, l)))
            .expect("a free port in 47300..47364");
        let (scqs, sqp) = tcp_qp(&ctx, 4);
        let (ccqs, cqp) = tcp_qp(&ctx, 4);
        listener.accept(&sqp, 0).unwrap();
        cqp.connect_wait(lo(port), T).unwrap();
        ctx.wait_event_for(sqp.id(), EventKind::Accept, Some(T))
            .unwrap();
        let bufs = |lazy_send| Bufs {
            depth: 4,
            send_size: 65536,
            recv_size: 65536,
            lazy_send,
            copy: false,
        };
        let mut server = QpLink::new(&ctx, scqs, sqp, bufs(true), false).unwrap();
        let mut client = QpLink::new(&ctx, ccqs, cqp, bufs(false), false).unwrap();
        let line = format!("QPIPPERF DONE {}\n", "7 ".repeat(100));
        assert!(line.len() > server.max_inline && line.len() <= CONTROL_SIZE);
        server.send(line.as_bytes()).unwrap();
        assert!(
            server.send_mr.is_none(),
            "the data buffers stay unregistered"
        );
        let mut buf = vec![0u8; 1024];
        let (n, _) = client.recv(&mut buf, Some(T)).unwrap().unwrap();
        assert_eq!(&buf[..n], line.as_bytes());
        server.send(&vec![1u8; CONTROL_SIZE + 1]).unwrap();
        assert!(server.send_mr.is_some(), "larger data registers them");
        let (n, _) = client.recv(&mut buf, Some(T)).unwrap().unwrap();
        assert_eq!(n, CONTROL_SIZE + 1);
    }
}
