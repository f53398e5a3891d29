//! The two ways a test moves bytes, behind one interface: a qpip queue pair ([`QpLink`],
//! device or software provider) and a kernel socket ([`SockLink`], plain `std::net`, for
//! the baseline on the same path).

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, SocketAddrV6, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use qpip::{Completion, Context, Cq, EventKind, MemoryRegion, Opcode, Qp, QpKind, SendWr, Status};

/// One endpoint of a test.
pub trait Link {
    /// Sends `data`: one datagram (UDP), one message (TCP message framing) or bytes of the
    /// stream. Returns once it is posted/handed over, not once it arrived.
    fn send(&mut self, data: &[u8]) -> io::Result<()>;
    /// Receives into `buf`: a datagram or message, or some bytes of a stream.
    /// `Ok(None)`: nothing within `timeout`; `Ok(Some((0, _)))` on TCP: the peer closed.
    fn recv(
        &mut self,
        buf: &mut [u8],
        timeout: Option<Duration>,
    ) -> io::Result<Option<(usize, Option<SocketAddrV6>)>>;
    /// UDP: where sends go.
    fn set_peer(&mut self, peer: SocketAddrV6);
    /// TCP: ends our direction after what was sent.
    fn close_write(&mut self) -> io::Result<()>;
    /// Before the endpoint goes away: every send completed, our direction closed
    /// (so dropping it loses nothing).
    fn finish(&mut self) -> io::Result<()>;
}

fn other(msg: String) -> io::Error {
    io::Error::other(msg)
}

fn qerr(what: &str, e: qpip::Error) -> io::Error {
    other(format!("{what}: {e}"))
}

/// A queue pair with registered send and receive buffers: a send copies into a free send
/// buffer (or inline, when small) and posts it; receives are completions of buffers
/// posted in advance, reposted once read.
pub struct QpLink {
    ctx: Context,
    cqs: Cqs,
    qp: Qp,
    tcp: bool,
    /// Busy-poll the CQ instead of sleeping on its descriptor.
    spin: bool,
    send_bufs: Vec<MemoryRegion>,
    free: Vec<usize>,
    recv_bufs: Vec<MemoryRegion>,
    /// Completed receives not read yet: buffer, bytes, read so far, source.
    ready: VecDeque<(usize, usize, usize, Option<SocketAddrV6>)>,
    peer: Option<SocketAddrV6>,
    eof: bool,
    closed: bool,
    max_inline: usize,
}

/// Send and receive buffers per QP.
pub const SLOTS: usize = 16;

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

impl QpLink {
    /// Wraps `qp` (already connected, or bound for UDP) with buffers of `size` bytes.
    pub fn new(ctx: &Context, cqs: Cqs, qp: Qp, size: usize, spin: bool) -> io::Result<QpLink> {
        let mut send_bufs = Vec::new();
        let mut recv_bufs = Vec::new();
        for _ in 0..SLOTS {
            send_bufs.push(ctx.alloc(size).map_err(|e| qerr("register memory", e))?);
            recv_bufs.push(ctx.alloc(size).map_err(|e| qerr("register memory", e))?);
        }
        for (i, b) in recv_bufs.iter().enumerate() {
            qp.post_recv(i as u64, &[b.sge_all()])
                .map_err(|e| qerr("post receive", e))?;
        }
        Ok(QpLink {
            ctx: ctx.clone(),
            tcp: matches!(qp.kind(), QpKind::Tcp(_)),
            cqs,
            qp,
            spin,
            send_bufs,
            free: (0..SLOTS).collect(),
            recv_bufs,
            ready: VecDeque::new(),
            peer: None,
            eof: false,
            closed: false,
            max_inline: ctx.limits().max_inline as usize,
        })
    }

    /// Takes completions of one side (at most `timeout` waiting for the first); false if
    /// none came.
    fn pump(&mut self, side: Side, timeout: Option<Duration>) -> io::Result<bool> {
        let mut comps = [Completion::default(); 32];
        let cq = match side {
            Side::Send => &self.cqs.send,
            Side::Recv => &self.cqs.recv,
        };
        let n = if self.spin {
            let deadline = timeout.map(|t| Instant::now() + t);
            loop {
                let n = cq.poll(&mut comps);
                if n > 0 || deadline.is_some_and(|d| Instant::now() >= d) {
                    break n;
                }
                std::hint::spin_loop();
            }
        } else {
            cq.wait(&mut comps, timeout)
                .map_err(|e| qerr("wait for completions", e))?
        };
        for c in &comps[..n] {
            let slot = c.wr_id as usize;
            match c.opcode {
                Opcode::Send if c.is_ok() => self.free.push(slot),
                Opcode::Send => return Err(other(format!("send failed: {}", c.status))),
                Opcode::Recv if c.is_ok() => {
                    if self.tcp && c.byte_len == 0 {
                        self.eof = true;
                    } else {
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

    /// Waits until every send completed (TCP on the device: acknowledged).
    pub fn drain_sends(&mut self, timeout: Duration) -> io::Result<()> {
        let deadline = Instant::now() + timeout;
        while self.free.len() < SLOTS {
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
}

impl Link for QpLink {
    fn send(&mut self, data: &[u8]) -> io::Result<()> {
        let size = self.send_bufs[0].len();
        // Stream framing may split; messages and datagrams must fit one buffer.
        let pieces: Vec<&[u8]> = if data.is_empty() {
            vec![data]
        } else {
            data.chunks(size).collect()
        };
        if pieces.len() > 1 && !matches!(self.qp.kind(), QpKind::Tcp(qpip::Framing::Stream)) {
            return Err(other(format!(
                "{} bytes do not fit a {size}-byte buffer",
                data.len()
            )));
        }
        for piece in pieces {
            while self.free.is_empty() {
                self.pump(Side::Send, None)?;
            }
            let slot = self.free.pop().unwrap();
            let sge;
            let mut wr = if piece.len() <= self.max_inline {
                SendWr::inline(slot as u64, piece)
            } else {
                self.send_bufs[slot].as_mut_slice()[..piece.len()].copy_from_slice(piece);
                sge = [self.send_bufs[slot].sge(0, piece.len())];
                SendWr::new(slot as u64, &sge)
            };
            if !self.tcp {
                wr = wr.to(self
                    .peer
                    .ok_or_else(|| other("UDP send without a peer".into()))?);
            }
            self.qp.post_send(&wr).map_err(|e| qerr("post send", e))?;
        }
        Ok(())
    }

    fn recv(
        &mut self,
        buf: &mut [u8],
        timeout: Option<Duration>,
    ) -> io::Result<Option<(usize, Option<SocketAddrV6>)>> {
        let deadline = timeout.map(|t| Instant::now() + t);
        while self.ready.is_empty() {
            if self.eof {
                return Ok(Some((0, None)));
            }
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left == Some(Duration::ZERO) {
                return Ok(None);
            }
            self.pump(Side::Recv, left)?;
        }
        let (slot, len, done, src) = self.ready.front_mut().unwrap();
        let n = (*len - *done).min(buf.len());
        buf[..n].copy_from_slice(&self.recv_bufs[*slot][*done..*done + n]);
        *done += n;
        let src = *src;
        // A datagram or message is one read (the rest of it is cut, like a socket's).
        if *done == *len || !matches!(self.qp.kind(), QpKind::Tcp(qpip::Framing::Stream)) {
            let slot = *slot;
            self.ready.pop_front();
            let sge = [self.recv_bufs[slot].sge_all()];
            self.qp
                .post_recv(slot as u64, &sge)
                .map_err(|e| qerr("post receive", e))?;
        }
        Ok(Some((n, src)))
    }

    fn set_peer(&mut self, peer: SocketAddrV6) {
        self.peer = Some(peer);
    }

    fn close_write(&mut self) -> io::Result<()> {
        self.closed = true;
        self.qp.close(0).map_err(|e| qerr("close", e))
    }

    fn finish(&mut self) -> io::Result<()> {
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
}

/// A kernel socket: a UDP socket or a TCP connection.
pub enum SockLink {
    Udp {
        sock: UdpSocket,
        peer: Option<SocketAddrV6>,
        timeout: Option<Duration>,
    },
    Tcp {
        stream: TcpStream,
        timeout: Option<Duration>,
    },
}

impl SockLink {
    pub fn tcp(stream: TcpStream) -> io::Result<SockLink> {
        stream.set_nodelay(true)?;
        Ok(SockLink::Tcp {
            stream,
            timeout: None,
        })
    }

    pub fn udp(sock: UdpSocket) -> SockLink {
        SockLink::Udp {
            sock,
            peer: None,
            timeout: None,
        }
    }
}

/// Sets a socket's read timeout only when it changes (a system call each time).
fn timeout_to(
    cur: &mut Option<Duration>,
    want: Option<Duration>,
    set: impl FnOnce(Option<Duration>) -> io::Result<()>,
) -> io::Result<()> {
    let want = want.map(|t| t.max(Duration::from_micros(1)));
    if *cur != want {
        set(want)?;
        *cur = want;
    }
    Ok(())
}

fn timed_out(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

impl Link for SockLink {
    fn send(&mut self, data: &[u8]) -> io::Result<()> {
        match self {
            SockLink::Udp { sock, peer, .. } => {
                let to = peer.ok_or_else(|| other("UDP send without a peer".into()))?;
                sock.send_to(data, to).map(|_| ())
            }
            SockLink::Tcp { stream, .. } => stream.write_all(data),
        }
    }

    fn recv(
        &mut self,
        buf: &mut [u8],
        timeout: Option<Duration>,
    ) -> io::Result<Option<(usize, Option<SocketAddrV6>)>> {
        let r = match self {
            SockLink::Udp {
                sock, timeout: cur, ..
            } => {
                timeout_to(cur, timeout, |t| sock.set_read_timeout(t))?;
                sock.recv_from(buf).map(|(n, from)| {
                    let src = match from {
                        SocketAddr::V6(a) => a,
                        SocketAddr::V4(a) => {
                            SocketAddrV6::new(a.ip().to_ipv6_mapped(), a.port(), 0, 0)
                        }
                    };
                    (n, Some(src))
                })
            }
            SockLink::Tcp {
                stream,
                timeout: cur,
            } => {
                timeout_to(cur, timeout, |t| stream.set_read_timeout(t))?;
                stream.read(buf).map(|n| (n, None))
            }
        };
        match r {
            Ok(x) => Ok(Some(x)),
            Err(e) if timed_out(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn set_peer(&mut self, to: SocketAddrV6) {
        if let SockLink::Udp { peer, .. } = self {
            *peer = Some(to);
        }
    }

    fn close_write(&mut self) -> io::Result<()> {
        match self {
            SockLink::Tcp { stream, .. } => stream.shutdown(Shutdown::Write),
            SockLink::Udp { .. } => Ok(()),
        }
    }

    fn finish(&mut self) -> io::Result<()> {
        match self.close_write() {
            Err(e) if e.kind() != io::ErrorKind::NotConnected => Err(e),
            _ => Ok(()),
        }
    }
}
