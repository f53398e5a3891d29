//! The server: one export, served to each client that connects, over TCP QPs in stream
//! framing (the wire is plain NBD over TCP, so any NBD client can use it). Each
//! connection has its own thread, CQ, receive buffers and io_uring ring ([`Conn`]):
//!
//! - Requests are read from the received bytes as they come, and each goes to the disk
//!   at once: up to [`MAX_IN_FLIGHT`] requests and [`crate::backing::RING_ENTRIES`] disk
//!   operations in flight. Replies go out as their operations complete, in any order
//!   (the protocol matches them by cookie).
//! - A WRITE's data is written to the disk from the receive buffers it arrived in, piece
//!   by piece as it arrives, with no copy; the buffers are posted again once written.
//! - A READ's data is read into a registered buffer behind room for the reply header,
//!   and header and data go out as one send, with no copy.
//! - What the client gets wrong gets the protocol's error reply (a range beyond the
//!   export, a write to a read-only export, an unknown command or flag, a payload beyond
//!   the maximum — its data is read and dropped); a request that does not start with the
//!   request magic ends the connection (nothing after it can be trusted to be a request).

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::SocketAddrV6;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;
use std::time::Duration;

use log::{debug, info, warn};
use qpip::{
    Completion, Context, Cq, Framing, Keepalive, Listener, MemoryRegion, Qp, QpInit, QpKind,
    SendWr, Status,
};

use crate::backing::{Backing, Disk, OpKind};
use crate::negotiate::{End, ExportInfo, Negotiation};
use crate::proto::{self, cmd, cmd_flags, errno, Request, SimpleReply, REQUEST_LEN};
use crate::stream::{Chunk, RecvStream, RECV_TAG};

/// Requests in flight on one connection at most; more wait in the receive buffers (and
/// then in the client, as the TCP window closes).
pub const MAX_IN_FLIGHT: usize = 128;
/// Receive buffers of a connection: slots and their size.
const RECV_SLOTS: usize = 64;
const RECV_SLOT_LEN: usize = 64 * 1024;
/// Send queue depth: replies in flight at most (more wait in the server).
const SQ_DEPTH: u32 = 256;
/// The smallest READ buffer (buffers come in powers of two from here).
const MIN_READ_BUF: usize = 64 * 1024;
/// READ buffers kept for reuse at most, in bytes, beyond those in use.
const READ_BUF_CACHE: usize = 32 << 20;
/// READ buffers in use at most, in bytes: a READ that would pass it waits for replies to
/// go out (one READ alone may, whatever its size), so that a client asking for many
/// large READs at once cannot make the server pin more than this.
const READ_BUF_IN_USE: usize = 64 << 20;

/// Send tags: bit 62 marks a READ reply (the rest: its buffer), bit 61 a handshake
/// message (the rest: its buffer); 0 is a header-only reply.
const SEND_READ: u64 = 1 << 62;
const SEND_HANDSHAKE: u64 = 1 << 61;

/// What `qpip-nbd serve` was asked to export.
pub struct ServeConfig {
    /// The export's name.
    pub name: String,
    /// TCP keepalive on every client's connection: a client that vanished without a word
    /// (its machine died, the link was cut) is found by unanswered probes and dropped with
    /// what its connection held. None: a silent client is kept for ever.
    pub keepalive: Option<Keepalive>,
}

impl ServeConfig {
    /// The keepalive that drops a silent client after about `secs` seconds (at least 2):
    /// idle for half of it, then 4 probes an eighth of it apart.
    pub fn keepalive_for(secs: u32) -> Keepalive {
        let secs = secs.max(2);
        Keepalive {
            idle: Duration::from_secs((secs / 2).into()),
            interval: Duration::from_secs((secs / 8).max(1).into()),
            probes: 4,
        }
    }
}

/// A listening server: one export, bound to its address.
pub struct Server {
    ctx: Arc<Context>,
    backing: Arc<Backing>,
    listener: Listener,
    export: ExportInfo,
    keepalive: Option<Keepalive>,
}

impl Server {
    /// Listens on `listen` (port 0: any free port) for clients of `backing`.
    pub fn bind(
        ctx: Arc<Context>,
        backing: Arc<Backing>,
        config: &ServeConfig,
        listen: SocketAddrV6,
    ) -> io::Result<Server> {
        let listener = ctx.listen(listen, 16).map_err(io::Error::other)?;
        let export = ExportInfo {
            name: config.name.clone(),
            size: backing.size(),
            flags: backing.transmission_flags(),
            min_block: 1,
            preferred_block: 4096,
            max_payload: proto::MAX_PAYLOAD,
        };
        Ok(Server {
            ctx,
            backing,
            listener,
            export,
            keepalive: config.keepalive,
        })
    }

    /// Where it listens.
    pub fn local_addr(&self) -> SocketAddrV6 {
        self.listener.local_addr()
    }

    /// Serves every client that connects, each in a thread of its own, until the process
    /// ends.
    pub fn run(self) -> io::Result<()> {
        let Server {
            ctx,
            backing,
            listener,
            export,
            keepalive,
        } = self;
        info!(
            "serving '{}' ({} bytes{}) on [{}]:{}",
            export.name,
            backing.size(),
            if backing.read_only() {
                ", read-only"
            } else {
                ""
            },
            listener.local_addr().ip(),
            listener.local_addr().port()
        );
        loop {
            let cq = ctx
                .create_cq((RECV_SLOTS as u32 + SQ_DEPTH).next_power_of_two())
                .map_err(io::Error::other)?;
            let qp = ctx
                .create_qp(
                    &QpInit::new(QpKind::Tcp(Framing::Stream), &cq)
                        .depth(SQ_DEPTH, RECV_SLOTS as u32),
                )
                .map_err(io::Error::other)?;
            // Set before the ACCEPT: the connection has it from its first moment.
            qp.set_keepalive(keepalive).map_err(io::Error::other)?;
            let stream =
                RecvStream::new(&ctx, RECV_SLOTS, RECV_SLOT_LEN).map_err(io::Error::other)?;
            // Posted before the connection exists, so the first bytes have somewhere to go.
            stream.post_all(&qp).map_err(io::Error::other)?;
            let peer = match listener.accept_wait(&qp, Duration::from_secs(u32::MAX.into())) {
                Ok(p) => p,
                Err(e) => {
                    warn!("accept: {e}");
                    continue;
                }
            };
            info!("client [{}]:{} connected", peer.ip(), peer.port());
            let (ctx, backing, export) = (ctx.clone(), backing.clone(), export.clone());
            std::thread::spawn(move || {
                let r = Conn::new(&ctx, cq, qp, stream, &backing, export).and_then(|c| c.run());
                match r {
                    Ok(why) => info!("client [{}]:{}: {why}", peer.ip(), peer.port()),
                    Err(e) => warn!("client [{}]:{}: {e}", peer.ip(), peer.port()),
                }
            });
        }
    }
}

/// A request the disk is working on.
struct InFlight {
    req: Request,
    /// The first error met (0: none).
    error: u32,
    /// Disk operations not completed.
    ops: u32,
    /// WRITE: data bytes still to arrive, and where the next goes.
    payload_left: u32,
    next_offset: u64,
    /// WRITE: the chunks the disk is writing from, by operation.
    chunks: HashMap<u32, Chunk>,
    next_op: u32,
    /// READ: the buffer (header room, then the data).
    buf: Option<usize>,
    /// WRITE_ZEROES the file system cannot do by `fallocate`: the range still to be
    /// written with zeroes (next, end).
    zeroing: Option<(u64, u64)>,
    /// FUA on a TRIM or WRITE_ZEROES: a flush once its other operations are done.
    flush_after: bool,
}

/// What a WRITE_ZEROES writes from when the file system cannot zero a range itself. Only
/// ever read.
static ZEROES: [u8; ZERO_CHUNK] = [0; ZERO_CHUNK];
const ZERO_CHUNK: usize = 1 << 20;
/// Zero writes in flight at most for one WRITE_ZEROES.
const ZERO_WRITES: u32 = 8;

/// Registered buffers for READ replies, by power-of-two size.
struct ReadBufs {
    bufs: Vec<Option<MemoryRegion>>,
    free: HashMap<usize, Vec<usize>>,
    cached: usize,
    in_use: usize,
}

impl ReadBufs {
    /// The size of the buffer for `len` bytes.
    fn class(len: usize) -> usize {
        len.next_power_of_two().max(MIN_READ_BUF)
    }

    /// Whether a buffer for `len` bytes may be taken now ([`READ_BUF_IN_USE`]).
    fn may_take(&self, len: usize) -> bool {
        self.in_use == 0 || self.in_use + Self::class(len) <= READ_BUF_IN_USE
    }

    fn get(&mut self, ctx: &Context, len: usize) -> qpip::Result<usize> {
        let size = Self::class(len);
        let i = match self.free.get_mut(&size).and_then(Vec::pop) {
            Some(i) => {
                self.cached -= size;
                i
            }
            None => {
                self.bufs.push(Some(ctx.alloc(size)?));
                self.bufs.len() - 1
            }
        };
        self.in_use += size;
        Ok(i)
    }

    fn put(&mut self, i: usize) {
        let Some(size) = self.bufs.get(i).and_then(|b| b.as_ref()).map(|b| b.len()) else {
            return;
        };
        self.in_use -= size;
        if self.cached + size > READ_BUF_CACHE {
            self.bufs[i] = None; // deregistered
        } else {
            self.cached += size;
            self.free.entry(size).or_default().push(i);
        }
    }

    fn buf(&mut self, i: usize) -> &mut MemoryRegion {
        self.bufs[i].as_mut().expect("a live buffer")
    }
}

/// One client's connection.
pub struct Conn<'a> {
    ctx: &'a Context,
    cq: Cq,
    qp: Qp,
    stream: RecvStream,
    backing: &'a Backing,
    disk: Disk,
    negotiation: Option<Negotiation>,
    requests: Vec<Option<InFlight>>,
    free_requests: Vec<usize>,
    /// The WRITE whose data is arriving.
    writing: Option<usize>,
    /// A READ waiting for buffer room before it goes to the disk.
    deferred: Option<Request>,
    read_bufs: ReadBufs,
    handshake_bufs: HashMap<u64, MemoryRegion>,
    next_handshake: u64,
    /// Replies waiting for room in the send queue: (tag, bytes or READ buffer).
    backlog: VecDeque<Reply>,
    sends: u32,
    /// The client asked to disconnect: no more requests are read.
    disconnecting: bool,
    ended: Option<String>,
}

enum Reply {
    Header([u8; proto::SIMPLE_REPLY_LEN]),
    Read { buf: usize, len: usize },
}

impl<'a> Conn<'a> {
    pub fn new(
        ctx: &'a Context,
        cq: Cq,
        qp: Qp,
        stream: RecvStream,
        backing: &'a Backing,
        export: ExportInfo,
    ) -> io::Result<Conn<'a>> {
        Ok(Conn {
            ctx,
            cq,
            qp,
            stream,
            backing,
            disk: Disk::new(backing)?,
            negotiation: Some(Negotiation::new(export)),
            requests: Vec::new(),
            free_requests: Vec::new(),
            writing: None,
            read_bufs: ReadBufs {
                bufs: Vec::new(),
                free: HashMap::new(),
                cached: 0,
                in_use: 0,
            },
            deferred: None,
            handshake_bufs: HashMap::new(),
            next_handshake: 0,
            backlog: VecDeque::new(),
            sends: 0,
            disconnecting: false,
            ended: None,
        })
    }

    /// Serves the connection until it ends; returns why it ended.
    pub fn run(mut self) -> io::Result<String> {
        self.flush_handshake()?;
        let mut done = Vec::new();
        let mut comps = vec![Completion::default(); 64];
        loop {
            let mut progress = false;
            let n = self.cq.poll(&mut comps);
            for c in &comps[..n] {
                self.completion(c)?;
            }
            progress |= n > 0;
            progress |= self.read_input()?;
            done.clear();
            self.disk.complete(&mut done);
            progress |= !done.is_empty();
            for &(tag, res) in &done {
                self.disk_done(tag, res)?;
            }
            self.disk.submit()?;
            self.send_backlog()?;
            if let Some(why) = &self.ended {
                if self.quiet() {
                    let why = why.clone();
                    let _ = self.qp.close_wait(Duration::from_secs(5));
                    return Ok(why);
                }
            }
            if !progress {
                self.sleep()?;
            }
        }
    }

    /// Nothing in flight: no request at the disk, no reply unsent or unacknowledged.
    fn quiet(&self) -> bool {
        self.disk.in_flight() == 0 && self.sends == 0 && self.backlog.is_empty()
    }

    /// Waits for a completion on the CQ or the disk.
    fn sleep(&mut self) -> io::Result<()> {
        self.cq.arm().map_err(io::Error::other)?;
        let mut c = [Completion::default()];
        if self.cq.poll(&mut c) == 1 {
            return self.completion(&c[0]);
        }
        // SAFETY: the disk's eventfd lives as long as the disk, beyond this call.
        let disk = unsafe { BorrowedFd::borrow_raw(self.disk.event_fd()) };
        // A second's limit: nothing is lost if it passes, the loop just looks again.
        let woke = qpip::wait_any_readable(&[self.cq.as_fd(), disk], Some(Duration::from_secs(1)))
            .map_err(io::Error::other)?;
        if woke {
            self.cq.ack();
        }
        Ok(())
    }

    fn completion(&mut self, c: &Completion) -> io::Result<()> {
        if c.wr_id & RECV_TAG != 0 {
            if c.status != Status::Success {
                self.end("the connection failed");
                return Ok(());
            }
            self.stream.received(c.wr_id, c.byte_len);
            if self.stream.eof() {
                self.end("the client closed the connection");
            }
            return Ok(());
        }
        self.sends = self.sends.saturating_sub(1);
        if c.status != Status::Success {
            self.end(&format!("a reply failed: {:?}", c.status));
        }
        if c.wr_id & SEND_READ != 0 {
            self.read_bufs.put((c.wr_id & !SEND_READ) as usize);
        } else if c.wr_id & SEND_HANDSHAKE != 0 {
            self.handshake_bufs.remove(&c.wr_id);
        }
        Ok(())
    }

    fn end(&mut self, why: &str) {
        if self.ended.is_none() {
            debug!("connection ends: {why}");
            self.ended = Some(why.into());
            self.disconnecting = true;
        }
    }

    /// Sends what the negotiation has to say.
    fn flush_handshake(&mut self) -> io::Result<()> {
        let Some(n) = self.negotiation.as_mut() else {
            return Ok(());
        };
        let out = n.take_output();
        if out.is_empty() {
            return Ok(());
        }
        let len = out.len();
        let mr = self.ctx.register(out).map_err(io::Error::other)?;
        let tag = SEND_HANDSHAKE | self.next_handshake;
        self.next_handshake += 1;
        self.qp
            .post_send(&SendWr::new(tag, &[mr.sge(0, len)]))
            .map_err(io::Error::other)?;
        self.sends += 1;
        self.handshake_bufs.insert(tag, mr);
        Ok(())
    }

    /// Reads what arrived: the handshake, then request headers and WRITE data. Returns
    /// whether anything was consumed.
    fn read_input(&mut self) -> io::Result<bool> {
        let mut progress = false;
        while let Some(n) = self.negotiation.as_mut() {
            // One reply at a time: the client sends its next option only after it.
            if !self.handshake_bufs.is_empty() {
                return Ok(progress);
            }
            let front = self.stream.front();
            if front.is_empty() {
                return Ok(progress);
            }
            let used = n.input(front);
            self.stream
                .consume(&self.qp, used)
                .map_err(io::Error::other)?;
            progress = true;
            let end = n.end().cloned();
            self.flush_handshake()?;
            match end {
                None => {}
                Some(End::Transmission) => {
                    debug!("negotiation done: transmission phase");
                    self.negotiation = None;
                }
                Some(End::Disconnect(why)) => {
                    self.negotiation = None;
                    self.end(&format!("negotiation ended: {why}"));
                    return Ok(true);
                }
            }
        }
        loop {
            if let Some(i) = self.writing {
                if !self.write_data(i)? {
                    return Ok(progress);
                }
                progress = true;
                continue;
            }
            if self.disconnecting
                || self.requests.len() - self.free_requests.len() >= MAX_IN_FLIGHT
                || !self.disk.has_room()
            {
                return Ok(progress);
            }
            if let Some(req) = self.deferred.take() {
                self.request(req)?;
                if self.deferred.is_some() {
                    return Ok(progress); // still no room for its buffer
                }
                progress = true;
                continue;
            }
            let mut hdr = [0u8; REQUEST_LEN];
            if !self
                .stream
                .copy_out(&self.qp, &mut hdr)
                .map_err(io::Error::other)?
            {
                return Ok(progress);
            }
            progress = true;
            match Request::parse(&hdr) {
                Ok(req) => self.request(req)?,
                Err(e) => {
                    warn!("request: {e}; closing the connection");
                    self.end(&format!("a malformed request ({e})"));
                }
            }
        }
    }

    fn new_request(&mut self, req: Request, error: u32) -> usize {
        let r = InFlight {
            req,
            error,
            ops: 0,
            payload_left: req.payload_len(),
            next_offset: req.offset,
            chunks: HashMap::new(),
            next_op: 0,
            buf: None,
            zeroing: None,
            flush_after: false,
        };
        match self.free_requests.pop() {
            Some(i) => {
                self.requests[i] = Some(r);
                i
            }
            None => {
                self.requests.push(Some(r));
                self.requests.len() - 1
            }
        }
    }

    /// What is wrong with a request, as the protocol's error (0: nothing).
    fn check(&self, req: &Request) -> u32 {
        let size = self.backing.size();
        let end = req.offset.checked_add(req.length.into());
        let in_range = end.is_some_and(|e| e <= size);
        let writes = matches!(req.kind, cmd::WRITE | cmd::TRIM | cmd::WRITE_ZEROES);
        let allowed_flags = match req.kind {
            cmd::WRITE => cmd_flags::FUA,
            cmd::WRITE_ZEROES => cmd_flags::FUA | cmd_flags::NO_HOLE,
            cmd::TRIM => cmd_flags::FUA,
            _ => 0,
        };
        match req.kind {
            cmd::READ | cmd::WRITE | cmd::FLUSH | cmd::TRIM | cmd::WRITE_ZEROES => {}
            _ => return errno::EINVAL,
        }
        if req.flags & !allowed_flags != 0 {
            return errno::EINVAL;
        }
        if writes && self.backing.read_only() {
            return errno::EPERM;
        }
        if matches!(req.kind, cmd::READ | cmd::WRITE) && req.length > proto::MAX_PAYLOAD {
            return errno::EINVAL;
        }
        if req.kind != cmd::FLUSH && !in_range {
            return if req.kind == cmd::WRITE {
                errno::ENOSPC
            } else {
                errno::EINVAL
            };
        }
        0
    }

    /// A request header arrived.
    fn request(&mut self, req: Request) -> io::Result<()> {
        if req.kind == cmd::DISC {
            self.end("the client disconnected");
            return Ok(());
        }
        let error = self.check(&req);
        let buf_len = proto::SIMPLE_REPLY_LEN + req.length as usize;
        if error == 0 && req.kind == cmd::READ && !self.read_bufs.may_take(buf_len) {
            // Its buffer would pass the bound: it waits until replies have gone out.
            self.deferred = Some(req);
            return Ok(());
        }
        let i = self.new_request(req, error);
        if error != 0 {
            debug!("request {req:?}: error {error}");
            if req.payload_len() > 0 {
                self.writing = Some(i); // its data is read and dropped
            } else {
                self.finish(i)?;
            }
            return Ok(());
        }
        let fua = req.flags & cmd_flags::FUA != 0;
        match req.kind {
            cmd::READ => {
                let len = req.length as usize;
                let b = match self.read_bufs.get(self.ctx, buf_len) {
                    Ok(b) => b,
                    Err(e) => {
                        warn!("request {req:?}: no buffer for the data ({e})");
                        self.req_mut(i).error = errno::EIO;
                        return self.finish(i);
                    }
                };
                let ptr = self.read_bufs.buf(b)[proto::SIMPLE_REPLY_LEN..].as_mut_ptr();
                self.req_mut(i).buf = Some(b);
                self.start(i, OpKind::Read, ptr, len, req.offset);
            }
            cmd::WRITE => {
                if req.length == 0 {
                    self.finish(i)?;
                } else {
                    self.writing = Some(i);
                }
            }
            cmd::FLUSH => {
                self.start(i, OpKind::Flush, std::ptr::null_mut(), 0, 0);
            }
            cmd::TRIM | cmd::WRITE_ZEROES => {
                let mode = if req.kind == cmd::WRITE_ZEROES && req.flags & cmd_flags::NO_HOLE != 0 {
                    libc::FALLOC_FL_ZERO_RANGE
                } else {
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE
                };
                if req.length == 0 {
                    self.finish(i)?;
                } else {
                    self.req_mut(i).flush_after = fua;
                    self.start(
                        i,
                        OpKind::Fallocate(mode),
                        std::ptr::null_mut(),
                        req.length as usize,
                        req.offset,
                    );
                }
            }
            _ => unreachable!("checked"),
        }
        Ok(())
    }

    fn req_mut(&mut self, i: usize) -> &mut InFlight {
        self.requests[i].as_mut().expect("a request in flight")
    }

    /// Starts a disk operation for request `i`; returns its number within the request.
    fn start(&mut self, i: usize, kind: OpKind, buf: *mut u8, len: usize, offset: u64) -> u32 {
        let r = self.req_mut(i);
        r.ops += 1;
        let op = r.next_op;
        r.next_op += 1;
        // SAFETY: READ buffers and received chunks stay registered and untouched until
        // their operation completes (`disk_done` releases them); ZEROES is static and
        // only written from.
        unsafe {
            self.disk
                .start((i as u64) << 32 | u64::from(op), kind, buf, len, offset)
        };
        op
    }

    /// Moves arrived data of WRITE `i` to the disk (or drops it, if the request failed).
    /// Returns whether all its data has arrived.
    fn write_data(&mut self, i: usize) -> io::Result<bool> {
        loop {
            let r = self.requests[i].as_ref().expect("a request in flight");
            let (left, error, fua) = (r.payload_left, r.error, r.req.flags & cmd_flags::FUA != 0);
            if left == 0 {
                self.writing = None;
                self.advance(i)?;
                return Ok(true);
            }
            if error == 0 && !self.disk.has_room() {
                return Ok(false);
            }
            let Some(c) = self.stream.take(left as usize) else {
                return Ok(false);
            };
            let r = self.req_mut(i);
            r.payload_left -= c.len() as u32;
            let at = r.next_offset;
            r.next_offset += c.len() as u64;
            if error != 0 {
                self.stream.release(&self.qp, c).map_err(io::Error::other)?;
                continue;
            }
            let ptr = self.stream.ptr(&c).cast_mut();
            let op = self.start(i, OpKind::Write { fua }, ptr, c.len(), at);
            self.req_mut(i).chunks.insert(op, c);
        }
    }

    /// A disk operation completed.
    fn disk_done(&mut self, tag: u64, res: i32) -> io::Result<()> {
        let (i, op) = ((tag >> 32) as usize, tag as u32);
        let Some(r) = self.requests.get_mut(i).and_then(Option::as_mut) else {
            return Ok(());
        };
        r.ops -= 1;
        let want = match r.req.kind {
            cmd::READ => Some(r.req.length as i32),
            cmd::WRITE => r.chunks.get(&op).map(|c| c.len() as i32),
            _ => None,
        };
        let unsupported = res == -libc::EOPNOTSUPP && r.zeroing.is_none();
        if unsupported && r.req.kind == cmd::TRIM {
            // Trimming is advice: a file system that cannot punch holes keeps the data.
        } else if unsupported && r.req.kind == cmd::WRITE_ZEROES {
            // It cannot zero the range itself: write zeroes instead.
            r.zeroing = Some((r.req.offset, r.req.offset + u64::from(r.req.length)));
        } else if (res < 0 || want.is_some_and(|w| res != w)) && r.error == 0 {
            warn!("request {:?}: the disk answered {res}", r.req);
            r.error = match -res {
                libc::ENOSPC | libc::EDQUOT | libc::EFBIG => errno::ENOSPC,
                _ => errno::EIO,
            };
        }
        if let Some(c) = r.chunks.remove(&op) {
            self.stream.release(&self.qp, c).map_err(io::Error::other)?;
        }
        self.advance(i)
    }

    /// Moves request `i` on after one of its operations completed: more zeroes to write,
    /// the flush a FUA asked for, or its reply.
    fn advance(&mut self, i: usize) -> io::Result<()> {
        loop {
            let r = self.requests[i].as_ref().expect("a request in flight");
            let Some((at, end)) = r.zeroing.filter(|&(at, end)| at < end && r.error == 0) else {
                break;
            };
            if r.ops >= ZERO_WRITES || !self.disk.has_room() {
                break;
            }
            let n = (end - at).min(ZERO_CHUNK as u64) as usize;
            self.req_mut(i).zeroing = Some((at + n as u64, end));
            let kind = OpKind::Write { fua: false };
            self.start(i, kind, ZEROES.as_ptr().cast_mut(), n, at);
        }
        let r = self.requests[i].as_mut().expect("a request in flight");
        let zeroes_left = r.zeroing.is_some_and(|(next, end)| next < end) && r.error == 0;
        if r.ops > 0 || r.payload_left > 0 || self.writing == Some(i) || zeroes_left {
            return Ok(());
        }
        if r.flush_after && r.error == 0 {
            r.flush_after = false;
            self.start(i, OpKind::Flush, std::ptr::null_mut(), 0, 0);
            return Ok(());
        }
        self.finish(i)
    }

    /// Request `i` is done: its reply is queued and the request forgotten.
    fn finish(&mut self, i: usize) -> io::Result<()> {
        let r = self.requests[i].take().expect("a request in flight");
        self.free_requests.push(i);
        let hdr = SimpleReply {
            error: r.error,
            cookie: r.req.cookie,
        }
        .encode();
        match r.buf {
            Some(b) if r.error == 0 => {
                self.read_bufs.buf(b)[..hdr.len()].copy_from_slice(&hdr);
                self.backlog.push_back(Reply::Read {
                    buf: b,
                    len: hdr.len() + r.req.length as usize,
                });
            }
            b => {
                if let Some(b) = b {
                    self.read_bufs.put(b);
                }
                self.backlog.push_back(Reply::Header(hdr));
            }
        }
        self.send_backlog()
    }

    /// Posts queued replies while the send queue has room.
    fn send_backlog(&mut self) -> io::Result<()> {
        while self.sends < SQ_DEPTH {
            let Some(reply) = self.backlog.pop_front() else {
                return Ok(());
            };
            let r = match &reply {
                Reply::Header(h) => self.qp.post_send(&SendWr::inline(0, h)),
                Reply::Read { buf, len } => {
                    let tag = SEND_READ | *buf as u64;
                    let mr = self.read_bufs.buf(*buf);
                    self.qp.post_send(&SendWr::new(tag, &[mr.sge(0, *len)]))
                }
            };
            if let Err(e) = r {
                if self.ended.is_some() {
                    // The connection is gone: replies can no longer go out.
                    self.backlog.clear();
                    return Ok(());
                }
                self.backlog.push_front(reply);
                return Err(io::Error::other(e));
            }
            self.sends += 1;
        }
        Ok(())
    }
}
