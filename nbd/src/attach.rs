//! `qpip-nbd connect`: an NBD export as a block device of this machine. A ublk device
//! (`/dev/ublkbN`, [`crate::ublk`]) whose every request goes to the server as an NBD
//! request over a TCP QP ([`crate::client`]); nothing passes through the kernel's TCP
//! stack. One thread serves the device's queue and the connection together
//! ([`QueueLoop`]); the caller's thread starts the device and, when asked to stop, stops
//! and deletes it.
//!
//! Data: the kernel copies a request's pages to or from the tag's buffer, which is
//! registered memory. A WRITE is sent from there (header and data in one send, no copy);
//! a READ's data is copied from the receive buffers into it.
//!
//! When the connection fails (the server is gone, the link is down, a request waited
//! longer than the timeout, or the server broke the protocol), the requests not answered
//! are kept and the client connects again every second. Those that wait longer than the
//! timeout since the failure end with an I/O error, and so does every new request until
//! a connection is back; then everything is served again.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddrV6;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use log::{info, warn};
use qpip::{Completion, Context, MemoryRegion, Status};

use crate::client::{Connection, Export, SEND_CONTROL};
use crate::proto::{self, cmd, cmd_flags, errno, flags, Request, SimpleReply};
use crate::stream::RECV_TAG;
use crate::ublk::{self, op, Device, DeviceConfig, IoDesc, Queue};

/// What to connect to, and how.
#[derive(Debug, Clone)]
pub struct AttachConfig {
    pub server: SocketAddrV6,
    pub name: String,
    /// How long a request may wait for its reply, and how long requests wait for a lost
    /// connection to come back, before they end with an I/O error.
    pub timeout: Duration,
    /// Requests in flight at once.
    pub depth: u16,
    /// The largest request, in bytes.
    pub max_io: u32,
}

/// Bytes of a tag's request header slot.
const HDR_SLOT: usize = 32;
/// Send queue depth of the connection: every tag's request, and a control message.
fn sq_depth(depth: u16) -> u32 {
    (u32::from(depth) + 1).next_power_of_two()
}

/// Connects, makes the block device and serves it until `stop` is set; `ready` is told
/// the device's path and the export once the device is there.
pub fn attach(
    ctx: Arc<Context>,
    config: AttachConfig,
    stop: &AtomicBool,
    ready: impl FnOnce(&str, &Export),
) -> io::Result<()> {
    let (conn, export) = Connection::open(
        &ctx,
        config.server,
        &config.name,
        sq_depth(config.depth),
        config.timeout,
    )?;
    let max_io = (config.max_io.min(export.max_payload) / 4096).max(1) * 4096;
    let depth = config.depth;
    let bufs = ctx
        .alloc(depth as usize * max_io as usize)
        .map_err(io::Error::other)?;
    let hdrs = ctx
        .alloc((depth as usize + 1) * HDR_SLOT)
        .map_err(io::Error::other)?;
    let mut device = Device::add(&DeviceConfig {
        size: export.size,
        read_only: export.has(flags::READ_ONLY),
        depth,
        max_io,
        discard: export.has(flags::SEND_TRIM),
    })?;
    let id = device.id();
    let (fetched_tx, fetched_rx) = mpsc::channel();
    let thread_ctx = ctx.clone();
    let quit = Arc::new(AtomicBool::new(false));
    let thread_quit = quit.clone();
    let worker = std::thread::Builder::new()
        .name(format!("ublk{id}"))
        .spawn(move || -> io::Result<()> {
            let base = bufs.as_ptr() as u64;
            let addrs = (0..depth as u64)
                .map(|t| base + t * u64::from(max_io))
                .collect();
            let queue = match Queue::new(id, depth, addrs) {
                Ok(q) => q,
                Err(e) => {
                    let _ = fetched_tx.send(Err(e));
                    return Ok(());
                }
            };
            let _ = fetched_tx.send(Ok(()));
            let mut l = QueueLoop::new(thread_ctx, config, export, queue, conn, bufs, hdrs, max_io);
            l.run(&thread_quit)
        })?;
    fetched_rx
        .recv()
        .map_err(|_| io::Error::other("the queue thread ended"))??;
    device.start()?;
    ready(&device.block_path(), &export);
    while !stop.load(Ordering::Relaxed) && !worker.is_finished() {
        std::thread::sleep(Duration::from_millis(100));
    }
    info!("stopping {}", device.block_path());
    quit.store(true, Ordering::Relaxed);
    let _ = device.stop();
    let r = worker
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("the queue thread panicked")));
    device.delete()?;
    r
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TagState {
    Idle,
    /// Waiting to be sent (no connection, or no room to send).
    Queued,
    /// Sent: since when, whether the send completed, the result once replied.
    Sent {
        since: Instant,
        sent_done: bool,
        result: Option<i32>,
    },
}

struct Tag {
    desc: IoDesc,
    req: Request,
    /// Bumped for every request of the tag: replies to an older one are not its.
    generation: u16,
    state: TagState,
}

/// The queue's thread: the device's requests and the connection.
struct QueueLoop {
    ctx: Arc<Context>,
    config: AttachConfig,
    export: Export,
    queue: Queue,
    conn: Option<Connection>,
    bufs: MemoryRegion,
    hdrs: MemoryRegion,
    max_io: u32,
    tags: Vec<Tag>,
    to_send: VecDeque<u16>,
    /// A READ reply's data being read: (tag, bytes done).
    reading: Option<(u16, usize)>,
    /// When the connection was lost (None: connected).
    lost_at: Option<Instant>,
    last_attempt: Option<Instant>,
    /// The lost connection stayed lost longer than the timeout: requests fail at once.
    failing: bool,
}

/// The block layer's error for an NBD error.
fn to_errno(e: u32) -> i32 {
    -(match e {
        errno::EPERM => libc::EPERM,
        errno::ENOMEM => libc::ENOMEM,
        errno::EINVAL => libc::EINVAL,
        errno::ENOSPC => libc::ENOSPC,
        errno::EOVERFLOW => libc::EOVERFLOW,
        errno::ENOTSUP => libc::EOPNOTSUPP,
        _ => libc::EIO,
    })
}

impl QueueLoop {
    #[allow(clippy::too_many_arguments)]
    fn new(
        ctx: Arc<Context>,
        config: AttachConfig,
        export: Export,
        queue: Queue,
        conn: Connection,
        bufs: MemoryRegion,
        hdrs: MemoryRegion,
        max_io: u32,
    ) -> QueueLoop {
        let idle = Request {
            flags: 0,
            kind: 0,
            cookie: 0,
            offset: 0,
            length: 0,
        };
        let tags = (0..config.depth)
            .map(|_| Tag {
                desc: IoDesc::default(),
                req: idle,
                generation: 0,
                state: TagState::Idle,
            })
            .collect();
        QueueLoop {
            ctx,
            config,
            export,
            queue,
            conn: Some(conn),
            bufs,
            hdrs,
            max_io,
            tags,
            to_send: VecDeque::new(),
            reading: None,
            lost_at: None,
            last_attempt: None,
            failing: false,
        }
    }

    fn run(&mut self, quit: &AtomicBool) -> io::Result<()> {
        let mut reqs = Vec::new();
        let mut comps = vec![Completion::default(); 64];
        loop {
            let mut aborted = false;
            reqs.clear();
            self.queue.take_requests(&mut reqs, &mut aborted);
            let mut progress = !reqs.is_empty();
            for &(tag, desc) in &reqs {
                self.request(tag, desc);
            }
            if aborted || quit.load(Ordering::Relaxed) {
                break;
            }
            if let Some(c) = self.conn.as_mut() {
                let n = c.cq.poll(&mut comps);
                progress |= n > 0;
                for c in &comps[..n] {
                    self.completion(c);
                }
            }
            progress |= self.read_replies();
            self.check_timeouts();
            self.reconnect();
            progress |= self.send_queued();
            self.queue.submit()?;
            if !progress {
                self.sleep()?;
            }
        }
        if let Some(c) = self.conn.take() {
            let at = self.config.depth as usize * HDR_SLOT;
            c.disconnect(&mut self.hdrs, at);
        }
        Ok(())
    }

    fn sleep(&mut self) -> io::Result<()> {
        let timeout = Some(Duration::from_millis(if self.conn.is_some() {
            500
        } else {
            100
        }));
        match self.conn.as_ref() {
            Some(c) => {
                c.cq.arm().map_err(io::Error::other)?;
                let mut one = [Completion::default()];
                if c.cq.poll(&mut one) == 1 {
                    self.completion(&one[0]);
                    return Ok(());
                }
                let woke = qpip::wait_any_readable(&[c.cq.as_fd(), self.queue.event_fd()], timeout)
                    .map_err(io::Error::other)?;
                if woke {
                    c.cq.ack();
                }
            }
            None => {
                qpip::wait_any_readable(&[self.queue.event_fd()], timeout)
                    .map_err(io::Error::other)?;
            }
        }
        Ok(())
    }

    /// A request from the block layer.
    fn request(&mut self, tag: u16, desc: IoDesc) {
        let e = self.export;
        let offset = desc.start_sector << 9;
        let len = u64::from(desc.nr_sectors) << 9;
        let fua = desc.flags() & op::F_FUA != 0 && e.has(flags::SEND_FUA);
        let (kind, flags) = match desc.op() {
            ublk::op::READ => (cmd::READ, 0),
            ublk::op::WRITE => (cmd::WRITE, if fua { cmd_flags::FUA } else { 0 }),
            ublk::op::FLUSH if e.has(flags::SEND_FLUSH) => (cmd::FLUSH, 0),
            // A server without FLUSH writes through: nothing to flush.
            ublk::op::FLUSH => return self.queue.commit(tag, 0),
            ublk::op::DISCARD if e.has(flags::SEND_TRIM) => (cmd::TRIM, 0),
            ublk::op::WRITE_ZEROES if e.has(flags::SEND_WRITE_ZEROES) => {
                let no_hole = desc.flags() & op::F_NOUNMAP != 0;
                (
                    cmd::WRITE_ZEROES,
                    if no_hole { cmd_flags::NO_HOLE } else { 0 },
                )
            }
            _ => return self.queue.commit(tag, -libc::EOPNOTSUPP),
        };
        if matches!(kind, cmd::READ | cmd::WRITE) && len > u64::from(self.max_io) {
            return self.queue.commit(tag, -libc::EINVAL);
        }
        if self.failing {
            return self.queue.commit(tag, -libc::EIO);
        }
        let t = &mut self.tags[tag as usize];
        t.generation = t.generation.wrapping_add(1);
        t.desc = desc;
        t.req = Request {
            flags,
            kind,
            cookie: u64::from(t.generation) << 16 | u64::from(tag),
            offset,
            length: len as u32,
        };
        t.state = TagState::Queued;
        self.to_send.push_back(tag);
    }

    /// Sends queued requests while the connection has room. Returns whether any went.
    fn send_queued(&mut self) -> bool {
        let mut sent = false;
        while let Some(c) = self.conn.as_mut().filter(|c| c.has_room()) {
            let Some(tag) = self.to_send.pop_front() else {
                break;
            };
            let t = &mut self.tags[tag as usize];
            if t.state != TagState::Queued {
                continue;
            }
            let at = tag as usize * HDR_SLOT;
            self.hdrs[at..at + proto::REQUEST_LEN].copy_from_slice(&t.req.encode());
            let hdr = self.hdrs.sge(at, proto::REQUEST_LEN);
            let data = (t.req.kind == cmd::WRITE).then(|| {
                self.bufs
                    .sge(tag as usize * self.max_io as usize, t.req.length as usize)
            });
            match c.send_request(t.req.cookie, hdr, data) {
                Ok(()) => {
                    t.state = TagState::Sent {
                        since: Instant::now(),
                        sent_done: false,
                        result: None,
                    };
                    sent = true;
                }
                Err(e) => {
                    self.to_send.push_front(tag);
                    self.lost(&format!("sending a request: {e}"));
                    break;
                }
            }
        }
        sent
    }

    fn completion(&mut self, c: &Completion) {
        if c.status != Status::Success {
            return self.lost(&format!("the connection failed ({:?})", c.status));
        }
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        if c.wr_id & RECV_TAG != 0 {
            // The end of the stream is acted on once the replies before it are read
            // (`read_replies`).
            conn.stream.received(c.wr_id, c.byte_len);
            return;
        }
        conn.sends = conn.sends.saturating_sub(1);
        if c.wr_id & SEND_CONTROL != 0 {
            return;
        }
        let tag = (c.wr_id & 0xffff) as u16;
        let generation = (c.wr_id >> 16) as u16;
        if let Some(t) = self.tags.get_mut(tag as usize) {
            if let TagState::Sent { sent_done, .. } = &mut t.state {
                if t.generation == generation {
                    *sent_done = true;
                }
            }
        }
        self.maybe_commit(tag);
    }

    /// Commits tag `tag` once its reply came and its send completed (the device may read
    /// a WRITE's data until then, to send it again).
    fn maybe_commit(&mut self, tag: u16) {
        let Some(t) = self.tags.get_mut(tag as usize) else {
            return;
        };
        if let TagState::Sent {
            sent_done: true,
            result: Some(r),
            ..
        } = t.state
        {
            t.state = TagState::Idle;
            self.queue.commit(tag, r);
        }
    }

    /// Reads replies from the stream. Returns whether any bytes were read.
    fn read_replies(&mut self) -> bool {
        let mut progress = false;
        loop {
            let Some(conn) = self.conn.as_mut() else {
                return progress;
            };
            if let Some((tag, done)) = self.reading {
                let t = &self.tags[tag as usize];
                let len = t.req.length as usize;
                let base = tag as usize * self.max_io as usize;
                let mut done = done;
                while done < len {
                    let Some(c) = conn.stream.take(len - done) else {
                        break;
                    };
                    let n = c.len();
                    self.bufs[base + done..base + done + n].copy_from_slice(conn.stream.bytes(&c));
                    done += n;
                    progress = true;
                    if let Err(e) = conn.stream.release(&conn.qp, c) {
                        self.lost(&format!("receive buffers: {e}"));
                        return progress;
                    }
                }
                if done < len {
                    self.reading = Some((tag, done));
                    if self.conn.as_ref().is_some_and(|c| c.stream.eof()) {
                        self.lost("the server closed the connection in a reply's data");
                    }
                    return progress;
                }
                self.reading = None;
                self.replied(tag, len as i32);
                continue;
            }
            let mut h = [0u8; proto::SIMPLE_REPLY_LEN];
            match conn.stream.copy_out(&conn.qp, &mut h) {
                Ok(true) => {}
                Ok(false) if conn.stream.eof() => {
                    self.lost("the server closed the connection");
                    return progress;
                }
                Ok(false) => return progress,
                Err(e) => {
                    self.lost(&format!("receive buffers: {e}"));
                    return progress;
                }
            }
            progress = true;
            let r = match SimpleReply::parse(&h) {
                Ok(r) => r,
                Err(e) => {
                    self.lost(&format!("a malformed reply ({e})"));
                    return progress;
                }
            };
            let tag = (r.cookie & 0xffff) as u16;
            let generation = (r.cookie >> 16) as u16;
            let ours = self.tags.get(tag as usize).is_some_and(|t| {
                t.generation == generation
                    && r.cookie >> 32 == 0
                    && matches!(t.state, TagState::Sent { result: None, .. })
            });
            if !ours {
                self.lost(&format!(
                    "a reply to no request in flight (cookie {:#x})",
                    r.cookie
                ));
                return progress;
            }
            let t = &self.tags[tag as usize];
            if r.error != 0 {
                warn!("the server failed {:?}: error {}", t.req, r.error);
                if r.error == errno::ESHUTDOWN {
                    self.replied(tag, -libc::EIO);
                    self.lost("the server is shutting down");
                    return progress;
                }
                self.replied(tag, to_errno(r.error));
            } else if t.req.kind == cmd::READ {
                self.reading = Some((tag, 0));
            } else {
                let bytes = if t.req.kind == cmd::WRITE {
                    t.req.length as i32
                } else {
                    0
                };
                self.replied(tag, bytes);
            }
        }
    }

    fn replied(&mut self, tag: u16, result: i32) {
        if let TagState::Sent { result: r, .. } = &mut self.tags[tag as usize].state {
            *r = Some(result);
        }
        self.maybe_commit(tag);
    }

    /// A request waiting longer than the timeout for its reply means the server or the
    /// path to it is gone.
    fn check_timeouts(&mut self) {
        let late = self.tags.iter().any(|t| match t.state {
            TagState::Sent {
                since,
                result: None,
                ..
            } => since.elapsed() > self.config.timeout,
            _ => false,
        });
        if late {
            self.lost(&format!("no reply within {:?}", self.config.timeout));
        }
    }

    /// The connection is gone: what was sent is sent again on the next one.
    fn lost(&mut self, why: &str) {
        if self.conn.take().is_none() {
            return;
        }
        warn!("connection to the server lost: {why}; connecting again");
        self.reading = None;
        self.lost_at = Some(Instant::now());
        self.last_attempt = None;
        let mut resend: Vec<u16> = Vec::new();
        for (i, t) in self.tags.iter_mut().enumerate() {
            match t.state {
                // Answered but its send not completed: the answer stands.
                TagState::Sent {
                    result: Some(r), ..
                } => {
                    t.state = TagState::Idle;
                    self.queue.commit(i as u16, r);
                }
                TagState::Sent { .. } => {
                    t.state = TagState::Queued;
                    resend.push(i as u16);
                }
                _ => {}
            }
        }
        // Sent ones first, in their order of tags, then those never sent.
        for tag in resend.into_iter().rev() {
            self.to_send.push_front(tag);
        }
    }

    /// While disconnected: a new connection every second; past the timeout, requests fail.
    fn reconnect(&mut self) {
        let Some(lost_at) = self.lost_at else {
            return;
        };
        if !self.failing && lost_at.elapsed() > self.config.timeout {
            warn!(
                "no connection for {:?}: requests fail with I/O errors until it is back",
                self.config.timeout
            );
            self.failing = true;
            while let Some(tag) = self.to_send.pop_front() {
                let t = &mut self.tags[tag as usize];
                if t.state == TagState::Queued {
                    t.state = TagState::Idle;
                    self.queue.commit(tag, -libc::EIO);
                }
            }
        }
        if self
            .last_attempt
            .is_some_and(|t| t.elapsed() < Duration::from_secs(1))
        {
            return;
        }
        self.last_attempt = Some(Instant::now());
        let attempt = Connection::open(
            &self.ctx,
            self.config.server,
            &self.config.name,
            sq_depth(self.config.depth),
            Duration::from_secs(1),
        );
        match attempt {
            Ok((c, e)) if e.size == self.export.size => {
                info!("connected to the server again");
                self.conn = Some(c);
                self.lost_at = None;
                self.failing = false;
            }
            Ok((_, e)) => warn!(
                "the export is now {} bytes, not {}: not using it",
                e.size, self.export.size
            ),
            Err(e) => log::debug!("connecting again: {e}"),
        }
    }
}
