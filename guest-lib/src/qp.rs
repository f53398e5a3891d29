//! `Qp`: a queue pair (UDP socket or TCP connection) with its send and receive queues,
//! `Listener`: a TCP listener that hands connections to idle QPs, and the work requests.

use std::net::{Ipv6Addr, SocketAddrV6};
use std::sync::Arc;
use std::time::Duration;

use crate::context::CtxInner;
use crate::cq::{Cq, CqInner};
use crate::device;
use crate::error::{Error, Result};
use crate::iwarp::{ConnInfo, Mpa, RemoteAddr};
use crate::mr::{Gather, Sge};
use crate::soft;
use crate::types::{Event, EventKind, QpKind};
use crate::Context;

/// How to create a QP ([`Context::create_qp`]).
#[derive(Clone, Copy, Debug)]
pub struct QpInit<'a> {
    pub kind: QpKind,
    /// Where send requests complete.
    pub send_cq: &'a Cq,
    /// Where receive requests complete (may be `send_cq`).
    pub recv_cq: &'a Cq,
    /// Send queue entries (a power of two): the most send requests outstanding at once.
    pub sq_depth: u32,
    /// Receive queue entries (a power of two).
    pub rq_depth: u32,
}

impl<'a> QpInit<'a> {
    /// A QP of `kind` whose sends and receives complete on `cq`, 64 entries per queue.
    pub fn new(kind: QpKind, cq: &'a Cq) -> QpInit<'a> {
        QpInit {
            kind,
            send_cq: cq,
            recv_cq: cq,
            sq_depth: 64,
            rq_depth: 64,
        }
    }

    /// Sets both queue depths.
    pub fn depth(mut self, sq_depth: u32, rq_depth: u32) -> QpInit<'a> {
        self.sq_depth = sq_depth;
        self.rq_depth = rq_depth;
        self
    }

    /// Receives complete on `cq` instead.
    pub fn recv_cq(mut self, cq: &'a Cq) -> QpInit<'a> {
        self.recv_cq = cq;
        self
    }
}

/// The data of a send: ranges of registered memory, or bytes copied into the request.
#[derive(Clone, Copy, Debug)]
pub(crate) enum SendData<'a> {
    Gather(&'a [Sge<'a>]),
    Inline(&'a [u8]),
}

/// What a send-queue work request does: a send, or (iWARP) an RDMA Write or Read of the
/// peer's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SendOp {
    Send,
    Write(RemoteAddr),
    Read(RemoteAddr),
}

/// A send-queue work request: what to send (or, on iWARP QPs, to write into or read from
/// the peer's memory), the caller's tag, and for UDP where to.
#[derive(Clone, Copy, Debug)]
pub struct SendWr<'a> {
    pub(crate) wr_id: u64,
    pub(crate) data: SendData<'a>,
    pub(crate) imm: u32,
    pub(crate) dest: Option<SocketAddrV6>,
    pub(crate) op: SendOp,
    pub(crate) solicited: bool,
    /// [`SendWr::imm`] was given (an RDMA Write then carries it as RFC 7306 Immediate Data).
    pub(crate) imm_set: bool,
}

impl<'a> SendWr<'a> {
    /// Sends the bytes of `sges` (gathered in order), tagged `wr_id`.
    pub fn new(wr_id: u64, sges: &'a [Sge<'a>]) -> SendWr<'a> {
        SendWr {
            wr_id,
            data: SendData::Gather(sges),
            imm: 0,
            dest: None,
            op: SendOp::Send,
            solicited: false,
            imm_set: false,
        }
    }

    /// iWARP: writes the bytes of `sges` into the peer's memory at `to` (an address in a
    /// region the peer registered with remote write, and its rkey). Completes when the
    /// peer has every byte; nothing completes on the peer's side.
    pub fn rdma_write(wr_id: u64, sges: &'a [Sge<'a>], to: RemoteAddr) -> SendWr<'a> {
        SendWr {
            op: SendOp::Write(to),
            ..SendWr::new(wr_id, sges)
        }
    }

    /// iWARP: reads the peer's memory at `from` (a region it registered with remote read)
    /// into `sges`, as many bytes as they hold. Completes when every byte is here.
    pub fn rdma_read(wr_id: u64, sges: &'a [Sge<'a>], from: RemoteAddr) -> SendWr<'a> {
        SendWr {
            op: SendOp::Read(from),
            ..SendWr::new(wr_id, sges)
        }
    }

    /// iWARP: a Send with Solicited Event (the peer's receive completion says so).
    pub fn solicited(mut self) -> SendWr<'a> {
        self.solicited = true;
        self
    }

    /// Sends `data`, copied into the request at post time (at most
    /// [`crate::Limits::max_inline`] bytes; needs no registered memory).
    pub fn inline(wr_id: u64, data: &'a [u8]) -> SendWr<'a> {
        SendWr {
            wr_id,
            data: SendData::Inline(data),
            imm: 0,
            dest: None,
            op: SendOp::Send,
            solicited: false,
            imm_set: false,
        }
    }

    /// Immediate data for the receiver's completion: on TCP message framing with any
    /// send; on iWARP with an RDMA Write, which then completes the peer's next receive
    /// ([`crate::Opcode::RecvImm`], RFC 7306) — only on a connection both ends set up with
    /// [`crate::Mpa::immediate`], else the Write completes `BadWqe`. UDP has no room for
    /// it on the wire (`BadWqe`).
    pub fn imm(mut self, imm: u32) -> SendWr<'a> {
        self.imm = imm;
        self.imm_set = true;
        self
    }

    /// The destination of a UDP datagram.
    pub fn to(mut self, dest: SocketAddrV6) -> SendWr<'a> {
        self.dest = Some(dest);
        self
    }
}

/// A send the software provider keeps until its bytes are written.
pub(crate) struct SendReq {
    pub wr_id: u64,
    pub gather: Gather,
    pub inline: Option<Vec<u8>>,
    pub imm: u32,
    pub dest: Option<SocketAddrV6>,
}

impl SendReq {
    pub(crate) fn len(&self) -> usize {
        match &self.inline {
            Some(d) => d.len(),
            None => self.gather.total,
        }
    }
}

/// The checked form of a receive.
pub(crate) struct RecvReq {
    pub wr_id: u64,
    pub gather: Gather,
}

/// A queue pair: a UDP endpoint or one TCP connection, with a send and a receive queue.
/// Posting never blocks; every request completes on the QP's CQs. Dropping the QP
/// destroys it: outstanding requests complete flushed, a connection is reset.
pub struct Qp {
    pub(crate) inner: Arc<QpInner>,
}

pub(crate) struct QpInner {
    pub(crate) ctx: Arc<CtxInner>,
    pub(crate) kind: QpKind,
    pub(crate) imp: QpImpl,
    // The CQs outlive the QPs that report to them.
    pub(crate) send_cq: Arc<CqInner>,
    pub(crate) recv_cq: Arc<CqInner>,
}

pub(crate) enum QpImpl {
    Device(device::Qp),
    Soft(soft::Qp),
}

impl Qp {
    /// The QP's number (the `qp` of its completions and events).
    pub fn id(&self) -> u32 {
        match &self.inner.imp {
            QpImpl::Device(q) => q.handle,
            QpImpl::Soft(q) => q.id,
        }
    }

    /// UDP or TCP, and the framing.
    pub fn kind(&self) -> QpKind {
        self.inner.kind
    }

    /// Binds to a local address and port (port 0: an ephemeral one; the unspecified
    /// address: every address). Returns the address bound. A UDP QP must be bound to send
    /// or receive; a TCP QP may be bound before [`Qp::connect`].
    pub fn bind(&self, addr: SocketAddrV6) -> Result<SocketAddrV6> {
        match &self.inner.imp {
            QpImpl::Device(q) => q.bind(self.inner.ctx.dev(), &addr),
            QpImpl::Soft(q) => q.bind(&addr),
        }
    }

    /// Starts connecting a TCP QP to `peer`. Returns at once; the outcome is an
    /// [`EventKind::Connect`] event carrying `user_data`. Sends posted meanwhile wait for
    /// the connection.
    pub fn connect(&self, peer: SocketAddrV6, user_data: u64) -> Result<()> {
        self.need_tcp("connect needs a TCP QP")?;
        if self.is_iwarp() {
            return self.connect_mpa(peer, &Mpa::new(), user_data);
        }
        match &self.inner.imp {
            QpImpl::Device(q) => q.connect(self.inner.ctx.dev(), &peer, None, user_data),
            QpImpl::Soft(q) => q.connect(&peer, user_data),
        }
    }

    /// [`Qp::connect`] for an iWARP QP, with what this end brings to the setup (private
    /// data, IRD and ORD, CRC, peer-to-peer mode). The connect completes once the peer's
    /// MPA reply has come ([`Qp::conn_info`] then tells what was agreed).
    pub fn connect_mpa(&self, peer: SocketAddrV6, mpa: &Mpa, user_data: u64) -> Result<()> {
        self.need_iwarp("connect_mpa needs an iWARP QP")?;
        check_mpa(mpa)?;
        match &self.inner.imp {
            QpImpl::Device(q) => q.connect(self.inner.ctx.dev(), &peer, Some(mpa), user_data),
            QpImpl::Soft(_) => Err(Error::Unsupported("iWARP needs the qpip device")),
        }
    }

    /// [`Qp::connect_mpa`] and wait for the outcome (at most `timeout`); returns the peer.
    pub fn connect_mpa_wait(
        &self,
        peer: SocketAddrV6,
        mpa: &Mpa,
        timeout: Duration,
    ) -> Result<SocketAddrV6> {
        self.connect_mpa(peer, mpa, 0)?;
        self.wait_outcome(EventKind::Connect, "connect", timeout)
            .map(|p| p.unwrap_or(peer))
    }

    /// What the setup of an iWARP QP's connection agreed, the peer's private data, and
    /// the Terminate that ended it, if one did.
    pub fn conn_info(&self) -> Result<ConnInfo> {
        self.need_iwarp("conn_info needs an iWARP QP")?;
        match &self.inner.imp {
            QpImpl::Device(q) => q.conn_info(self.inner.ctx.dev()),
            QpImpl::Soft(_) => Err(Error::Unsupported("iWARP needs the qpip device")),
        }
    }

    pub(crate) fn is_iwarp(&self) -> bool {
        self.inner.kind == QpKind::Tcp(crate::Framing::Iwarp)
    }

    pub(crate) fn need_iwarp(&self, what: &'static str) -> Result<()> {
        if self.is_iwarp() {
            return Ok(());
        }
        Err(Error::WrongQpKind {
            qp: self.id(),
            kind: self.inner.kind.name(),
            what,
        })
    }

    /// Connects and waits for the outcome (at most `timeout`); returns the peer.
    pub fn connect_wait(&self, peer: SocketAddrV6, timeout: Duration) -> Result<SocketAddrV6> {
        self.connect(peer, 0)?;
        self.wait_outcome(EventKind::Connect, "connect", timeout)
            .map(|p| p.unwrap_or(peer))
    }

    /// Closes the sending direction of a TCP connection gracefully, after every send posted
    /// before. Returns at once; the outcome is an [`EventKind::Close`] event. Receiving
    /// goes on until the peer closes too (receives then complete with 0 bytes).
    pub fn close(&self, user_data: u64) -> Result<()> {
        self.need_tcp("close needs a TCP QP")?;
        match &self.inner.imp {
            QpImpl::Device(q) => q.close(self.inner.ctx.dev(), user_data),
            QpImpl::Soft(q) => q.close(user_data),
        }
    }

    /// TCP keepalive on this QP's connection (`None`: off, the default), as `SO_KEEPALIVE`
    /// with `TCP_KEEPIDLE`/`TCP_KEEPINTVL`/`TCP_KEEPCNT` on a socket: set before
    /// connecting or accepting, it applies to the connection the QP gets; on a connection,
    /// at once. A server turns it on so that a client which vanished (its machine died,
    /// the link was cut) does not hold the QP and its buffers forever: the QP fails, its
    /// work requests complete flushed, and the server frees it.
    pub fn set_keepalive(&self, keepalive: Option<crate::Keepalive>) -> Result<()> {
        self.need_tcp("keepalive needs a TCP QP")?;
        let k = keepalive.map(|k| k.checked()).transpose()?;
        match &self.inner.imp {
            QpImpl::Device(q) => q.set_keepalive(self.inner.ctx.dev(), k),
            QpImpl::Soft(q) => q.set_keepalive(keepalive),
        }
    }

    /// [`Qp::close`] and wait for its outcome (at most `timeout`).
    pub fn close_wait(&self, timeout: Duration) -> Result<()> {
        self.close(0)?;
        self.wait_outcome(EventKind::Close, "close", timeout)
            .map(|_| ())
    }

    fn wait_outcome(
        &self,
        kind: EventKind,
        what: &'static str,
        timeout: Duration,
    ) -> Result<Option<SocketAddrV6>> {
        let ctx = Context {
            inner: self.inner.ctx.clone(),
        };
        match ctx.wait_event_for(self.id(), kind, Some(timeout))? {
            None => Err(Error::TimedOut {
                what,
                after: timeout,
            }),
            Some(e) => outcome(&e, what),
        }
    }

    /// Posts a send. Fails without posting when the request is malformed (too many SGEs,
    /// inline data too long, a range outside its region, a destination missing on UDP or
    /// given on TCP) or the send queue is full; errors the device finds complete the
    /// request with an error status instead.
    pub fn post_send(&self, wr: &SendWr<'_>) -> Result<()> {
        let lim = &self.inner.ctx.limits;
        if wr.op != SendOp::Send || wr.solicited {
            self.need_iwarp("RDMA Writes, Reads and solicited Sends need an iWARP QP")?;
        }
        match (self.inner.kind, wr.dest) {
            (QpKind::Udp, None) => {
                return Err(Error::Destination(
                    "a UDP send needs a destination (SendWr::to)",
                ))
            }
            (QpKind::Tcp(_), Some(_)) => {
                return Err(Error::Destination(
                    "a TCP send goes to the connected peer: no destination (SendWr::to)",
                ))
            }
            _ => {}
        }
        if let SendData::Inline(data) = wr.data {
            if data.len() > lim.max_inline as usize {
                return Err(Error::InlineTooLong {
                    len: data.len(),
                    max: lim.max_inline,
                });
            }
        }
        let q = match &self.inner.imp {
            // The device provider checks the entries as it writes them into the ring.
            QpImpl::Device(q) => return q.post_send(&self.inner.ctx, wr),
            QpImpl::Soft(q) => q,
        };
        // The software provider queues the request, so it owns a copy of inline bytes.
        let (gather, inline) = match wr.data {
            SendData::Gather(sges) => (Gather::resolve(&self.inner.ctx, sges, lim.max_sge)?, None),
            SendData::Inline(data) => (Gather::default(), Some(data.to_vec())),
        };
        q.post_send(SendReq {
            wr_id: wr.wr_id,
            gather,
            inline,
            imm: wr.imm,
            dest: wr.dest,
        })
    }

    /// Posts a receive buffer made of `sges` (filled in order), tagged `wr_id`.
    pub fn post_recv(&self, wr_id: u64, sges: &[Sge<'_>]) -> Result<()> {
        self.post_recvs(std::iter::once((wr_id, sges))).map(|_| ())
    }

    /// Posts several receive buffers, each `(wr_id, sges)`, in order, as
    /// [`Qp::post_recv`] would one by one — but on the device with one doorbell for them
    /// all (one barrier, one check whether the device sleeps, at most one kick), which is
    /// what a receiver that reposts many buffers at a time wants. Stops at the first
    /// request that cannot be posted (its error is returned; the ones before it are
    /// posted); returns how many were posted.
    pub fn post_recvs<'s, I>(&self, wrs: I) -> Result<usize>
    where
        I: IntoIterator<Item = (u64, &'s [Sge<'s>])>,
    {
        let max_sge = self.inner.ctx.limits.max_sge;
        let mut posted = 0;
        let r = match &self.inner.imp {
            QpImpl::Device(q) => q.post_recvs(&self.inner.ctx, wrs, &mut posted),
            QpImpl::Soft(q) => wrs.into_iter().try_for_each(|(wr_id, sges)| {
                let gather = Gather::resolve(&self.inner.ctx, sges, max_sge)?;
                q.post_recv(RecvReq { wr_id, gather })?;
                posted += 1;
                Ok(())
            }),
        };
        match r.err() {
            Some(e) if posted == 0 => Err(e),
            // Some went: say how many; the caller posts the rest again later.
            _ => Ok(posted),
        }
    }

    pub(crate) fn need_tcp(&self, what: &'static str) -> Result<()> {
        match self.inner.kind {
            QpKind::Tcp(_) => Ok(()),
            k => Err(Error::WrongQpKind {
                qp: self.id(),
                kind: k.name(),
                what,
            }),
        }
    }
}

impl std::fmt::Debug for Qp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Qp")
            .field("id", &self.id())
            .field("kind", &self.kind())
            .finish()
    }
}

impl Drop for QpInner {
    fn drop(&mut self) {
        match &self.imp {
            QpImpl::Device(q) => q.destroy(self.ctx.dev(), &self.send_cq, &self.recv_cq),
            QpImpl::Soft(q) => q.destroy(),
        }
    }
}

/// Checks MPA parameters before they reach the driver.
fn check_mpa(m: &Mpa) -> Result<()> {
    if m.private_data.len() > Mpa::MAX_PRIVATE_DATA {
        return Err(Error::InvalidArgument(format!(
            "{} bytes of private data, at most {}",
            m.private_data.len(),
            Mpa::MAX_PRIVATE_DATA
        )));
    }
    if m.ird > Mpa::MAX_IRD_ORD || m.ord > Mpa::MAX_IRD_ORD {
        return Err(Error::InvalidArgument(format!(
            "IRD {} and ORD {}: at most {} each",
            m.ird,
            m.ord,
            Mpa::MAX_IRD_ORD
        )));
    }
    Ok(())
}

/// The result an accept, connect or close event reports: the peer, or the failure.
pub(crate) fn outcome(e: &Event, what: &'static str) -> Result<Option<SocketAddrV6>> {
    match e.error() {
        Some(source) => Err(Error::Connection { what, source }),
        None => Ok(e.peer),
    }
}

/// A TCP listener. Dropping it cancels the accepts still pending
/// ([`EventKind::Accept`] with `-ECANCELED`).
pub struct Listener {
    pub(crate) inner: Arc<ListenerInner>,
}

pub(crate) struct ListenerInner {
    pub(crate) ctx: Arc<CtxInner>,
    pub(crate) imp: ListenerImpl,
    pub(crate) addr: SocketAddrV6,
}

pub(crate) enum ListenerImpl {
    Device(device::Listener),
    Soft(soft::Listener),
}

impl Listener {
    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddrV6 {
        self.inner.addr
    }

    /// Offers the idle TCP QP `qp` for the next connection. Returns at once; the outcome
    /// is an [`EventKind::Accept`] event about `qp`, carrying `user_data` and the peer.
    pub fn accept(&self, qp: &Qp, user_data: u64) -> Result<()> {
        if qp.is_iwarp() {
            return self.accept_mpa(qp, &Mpa::new(), user_data);
        }
        self.accept_with(qp, None, user_data)
    }

    /// [`Listener::accept`] for an iWARP QP, with what this end brings to the setup: the
    /// accept completes once the initiator's MPA request has been answered
    /// ([`Qp::conn_info`] then holds its private data).
    pub fn accept_mpa(&self, qp: &Qp, mpa: &Mpa, user_data: u64) -> Result<()> {
        qp.need_iwarp("accept_mpa needs an iWARP QP")?;
        check_mpa(mpa)?;
        self.accept_with(qp, Some(mpa), user_data)
    }

    /// [`Listener::accept_mpa`] and wait for it (at most `timeout`); returns the peer.
    pub fn accept_mpa_wait(&self, qp: &Qp, mpa: &Mpa, timeout: Duration) -> Result<SocketAddrV6> {
        self.accept_mpa(qp, mpa, 0)?;
        qp.wait_outcome(EventKind::Accept, "accept", timeout)
            .map(|p| p.unwrap_or(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 0, 0, 0)))
    }

    fn accept_with(&self, qp: &Qp, mpa: Option<&Mpa>, user_data: u64) -> Result<()> {
        qp.need_tcp("accept needs a TCP QP")?;
        if !Arc::ptr_eq(&qp.inner.ctx, &self.inner.ctx) {
            return Err(Error::ForeignObject("the QP"));
        }
        match (&self.inner.imp, &qp.inner.imp) {
            (ListenerImpl::Device(l), QpImpl::Device(q)) => {
                l.accept(self.inner.ctx.dev(), q, mpa, user_data)
            }
            (ListenerImpl::Soft(l), QpImpl::Soft(q)) => l.accept(q, user_data),
            _ => Err(Error::ForeignObject("the QP")),
        }
    }

    /// Accepts a connection on `qp` and waits for it (at most `timeout`); returns the peer.
    pub fn accept_wait(&self, qp: &Qp, timeout: Duration) -> Result<SocketAddrV6> {
        self.accept(qp, 0)?;
        qp.wait_outcome(EventKind::Accept, "accept", timeout)
            .map(|p| p.unwrap_or(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 0, 0, 0)))
    }
}

impl Drop for ListenerInner {
    fn drop(&mut self) {
        match &self.imp {
            ListenerImpl::Device(l) => l.destroy(self.ctx.dev()),
            ListenerImpl::Soft(l) => l.destroy(),
        }
    }
}
