//! TCP QPs over a TCP socket, with the device's framing: message framing puts a
//! `MsgHeader` (8 bytes, little-endian length and immediate data) before each send's
//! bytes and completes one receive per message; stream framing is the bare byte stream,
//! a receive completing with what one read brought (the socket's view of a pushed segment).

use std::net::SocketAddrV6;

use qpip_abi::wqe::{HeaderReader, MsgHeader, MSG_HEADER_SIZE};

use crate::mr::Seg;
use crate::types::{Completion, Detail, EventKind, Framing, Opcode, Status};

use super::udp::iovecs;
use super::{drop_socket, flush, net, recv_completion, Conn, Out, QpState};

const HDR: usize = MSG_HEADER_SIZE as usize;
/// Bytes read from the socket ahead of parsing (message framing).
const STAGING: usize = 64 * 1024;

/// The receive side of a TCP QP.
#[derive(Default)]
pub(super) struct Rx {
    /// The peer closed its direction and every byte before was placed.
    pub eof: bool,
    /// Stream framing: bytes already placed in the front receive request.
    filled: usize,
    // Message framing:
    staging: Vec<u8>,
    start: usize,
    end: usize,
    hdr: HeaderReader,
    body: Option<Body>,
}

/// The message being received.
#[derive(Clone, Copy)]
struct Body {
    len: usize,
    imm: u32,
    done: usize,
}

pub(super) fn connect(
    id: u32,
    qp: &mut QpState,
    peer: &SocketAddrV6,
    user_data: u64,
    out: &mut Out,
) {
    if !matches!(qp.conn, super::Conn::Idle | super::Conn::Bound) {
        out.event(EventKind::Connect, -libc::EINVAL, id, user_data, None);
        return;
    }
    let sock = match qp.sock.take() {
        Some(s) => s,
        None => match net::socket(libc::SOCK_STREAM) {
            Ok(s) => s,
            Err(e) => {
                connect_failed(out, id, user_data, &e);
                return;
            }
        },
    };
    qp.sock = Some(sock);
    let r = qp
        .apply_keepalive()
        .and_then(|()| net::connect(qp.sock.as_ref().expect("just set"), peer));
    match r {
        Ok(()) => qp.conn = Conn::Connecting { user_data },
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {
            qp.conn = Conn::Connecting { user_data }
        }
        Err(e) => {
            connect_failed(out, id, user_data, &e);
            fail(id, qp, out, None);
        }
    }
}

/// A CONNECT that failed at once: its event carries the error.
fn connect_failed(out: &mut Out, id: u32, user_data: u64, e: &std::io::Error) {
    let errno = e.raw_os_error().unwrap_or(libc::EIO);
    out.event(EventKind::Connect, -errno, id, user_data, None);
}

/// The QP enters the error state: every request flushed, the socket gone. `event`: the
/// errno to report as a QP error (none when an event already told).
fn fail(id: u32, qp: &mut QpState, out: &mut Out, event: Option<i32>) {
    qp.conn = Conn::Error;
    if let Some(errno) = event {
        out.event(EventKind::QpError, -errno, id, 0, None);
    }
    flush(id, qp, out);
    drop_socket(qp, false);
}

pub(super) fn progress(id: u32, qp: &mut QpState, out: &mut Out) {
    if let Conn::Connecting { user_data } = qp.conn {
        let sock = qp.sock.as_ref().expect("a connecting QP has a socket");
        if !net::writable_now(sock) {
            return;
        }
        match net::so_error(sock) {
            0 => {
                let peer = net::peer_addr(sock).ok();
                qp.conn = Conn::Connected;
                out.event(EventKind::Connect, 0, id, user_data, peer);
            }
            err => {
                out.event(EventKind::Connect, -err, id, user_data, None);
                fail(id, qp, out, None);
                return;
            }
        }
    }
    match qp.conn {
        Conn::Error => flush(id, qp, out),
        // Requests posted while an accept or connect is pending wait for the connection.
        Conn::Accepting { .. } | Conn::Connecting { .. } => {}
        Conn::Idle | Conn::Bound => not_connected_sends(id, qp, out),
        Conn::Connected => {
            if qp.wr_shut {
                not_connected_sends(id, qp, out);
            } else if let Err(errno) = send(id, qp, out) {
                return fail(id, qp, out, Some(errno));
            }
            if let Err(errno) = receive(id, qp, out) {
                fail(id, qp, out, Some(errno));
            }
        }
    }
}

/// Sends on a QP without a connection (or after its close) complete `BadDest`/`NotBound`.
fn not_connected_sends(id: u32, qp: &mut QpState, out: &mut Out) {
    for r in qp.sq.drain(..) {
        out.send(id, r.wr_id, Status::BadDest, Detail::NotBound, 0);
    }
}

/// Writes the front sends as far as the socket takes them, then a pending close.
fn send(id: u32, qp: &mut QpState, out: &mut Out) -> Result<(), i32> {
    let framing = qp.framing();
    while let Some(req) = qp.sq.front() {
        let len = req.len();
        let hdr = MsgHeader::new(len as u32, req.imm).encode();
        let hdr_len = if framing == Framing::Message { HDR } else { 0 };
        let total = hdr_len + len;
        if qp.sent < total {
            let mut iov = Vec::with_capacity(1 + req.gather.segs.len());
            if hdr_len > 0 {
                iov.push(libc::iovec {
                    iov_base: hdr.as_ptr() as *mut libc::c_void,
                    iov_len: HDR,
                });
            }
            match &req.inline {
                Some(d) => iov.push(libc::iovec {
                    iov_base: d.as_ptr() as *mut libc::c_void,
                    iov_len: d.len(),
                }),
                None => iov.extend(iovecs(&req.gather.segs)),
            }
            let iov = skip(iov, qp.sent);
            match net::send(qp.sock.as_ref().unwrap(), &iov, None) {
                Ok(n) => qp.sent += n,
                Err(e) => match e.raw_os_error().unwrap_or(libc::EIO) {
                    libc::EAGAIN | libc::ENOBUFS => break,
                    libc::EINTR => continue,
                    errno => return Err(errno),
                },
            }
        }
        if qp.sent >= total {
            let req = qp.sq.pop_front().unwrap();
            qp.sent = 0;
            out.send(id, req.wr_id, Status::Success, Detail::None, len);
        }
    }
    if qp.sq.is_empty() {
        if let Some(user_data) = qp.close.take() {
            let status = match net::shutdown_write(qp.sock.as_ref().unwrap()) {
                Ok(()) => 0,
                Err(e) => -e.raw_os_error().unwrap_or(libc::EIO),
            };
            qp.wr_shut = true;
            out.event(EventKind::Close, status, id, user_data, None);
        }
    }
    Ok(())
}

/// The iovecs less their first `n` bytes.
fn skip(iov: Vec<libc::iovec>, mut n: usize) -> Vec<libc::iovec> {
    let mut rest = Vec::with_capacity(iov.len());
    for v in iov {
        if n >= v.iov_len {
            n -= v.iov_len;
            continue;
        }
        rest.push(libc::iovec {
            // SAFETY: n < iov_len, so the pointer stays inside the same buffer.
            iov_base: unsafe { v.iov_base.cast::<u8>().add(n) }.cast(),
            iov_len: v.iov_len - n,
        });
        n = 0;
    }
    rest
}

fn receive(id: u32, qp: &mut QpState, out: &mut Out) -> Result<(), i32> {
    match qp.framing() {
        Framing::Stream => receive_stream(id, qp, out),
        Framing::Message => receive_messages(id, qp, out),
        Framing::Iwarp => unreachable!("the software provider makes no iWARP QP"),
    }
}

/// End of stream: every receive request left completes with 0 bytes, as `read` returns 0.
fn drain_at_eof(id: u32, qp: &mut QpState, out: &mut Out) {
    for r in qp.rq.drain(..) {
        out.recv(recv_completion(id, r.wr_id, Status::Success, 0));
    }
}

fn receive_stream(id: u32, qp: &mut QpState, out: &mut Out) -> Result<(), i32> {
    while let Some(req) = qp.rq.front() {
        if qp.rx.eof {
            drain_at_eof(id, qp, out);
            break;
        }
        if req.gather.total == 0 {
            let r = qp.rq.pop_front().unwrap();
            out.recv(recv_completion(id, r.wr_id, Status::Success, 0));
            continue;
        }
        let iov = skip(iovecs(&req.gather.segs), qp.rx.filled);
        match net::recv(qp.sock.as_ref().unwrap(), &iov) {
            Ok((0, _)) => {
                qp.rx.eof = true;
                if qp.rx.filled > 0 {
                    let r = qp.rq.pop_front().unwrap();
                    out.recv(recv_completion(id, r.wr_id, Status::Success, qp.rx.filled));
                    qp.rx.filled = 0;
                }
                out.event(EventKind::PeerClosed, 0, id, 0, None);
            }
            Ok((n, _)) => {
                let r = qp.rq.pop_front().unwrap();
                out.recv(recv_completion(
                    id,
                    r.wr_id,
                    Status::Success,
                    qp.rx.filled + n,
                ));
                qp.rx.filled = 0;
            }
            Err(e) => match e.raw_os_error().unwrap_or(libc::EIO) {
                libc::EAGAIN => break,
                libc::EINTR => continue,
                errno => return Err(errno),
            },
        }
    }
    Ok(())
}

fn receive_messages(id: u32, qp: &mut QpState, out: &mut Out) -> Result<(), i32> {
    if qp.rx.staging.is_empty() {
        qp.rx.staging = vec![0; STAGING];
    }
    loop {
        parse(id, qp, out);
        if qp.rq.is_empty() {
            return Ok(());
        }
        if qp.rx.eof {
            // A message cut short by the end of the stream completes with what arrived.
            if let Some(b) = qp.rx.body.take() {
                let r = qp.rq.pop_front().unwrap();
                let mut c = recv_completion(id, r.wr_id, Status::Success, b.done);
                c.imm = b.imm;
                out.recv(c);
            }
            drain_at_eof(id, qp, out);
            return Ok(());
        }
        let rx = &mut qp.rx;
        if rx.start > 0 {
            rx.staging.copy_within(rx.start..rx.end, 0);
            rx.end -= rx.start;
            rx.start = 0;
        }
        let end = rx.end;
        match net::read(qp.sock.as_ref().unwrap(), &mut rx.staging[end..]) {
            Ok(0) => {
                rx.eof = true;
                out.event(EventKind::PeerClosed, 0, id, 0, None);
            }
            Ok(n) => rx.end += n,
            Err(e) => match e.raw_os_error().unwrap_or(libc::EIO) {
                libc::EAGAIN => return Ok(()),
                libc::EINTR => {}
                errno => return Err(errno),
            },
        }
    }
}

/// Takes messages out of the staged bytes into receive requests, as far as both go.
fn parse(id: u32, qp: &mut QpState, out: &mut Out) {
    let rx = &mut qp.rx;
    loop {
        let avail = rx.end - rx.start;
        let Some(mut body) = rx.body else {
            let (take, header) = rx.hdr.take(&rx.staging[rx.start..rx.start + avail]);
            rx.start += take;
            let Some(h) = header else {
                return;
            };
            rx.body = Some(Body {
                len: h.length as usize,
                imm: h.imm_data,
                done: 0,
            });
            continue;
        };
        let Some(req) = qp.rq.front() else {
            return;
        };
        let fits = body.len <= req.gather.total;
        let take = (body.len - body.done).min(avail);
        if fits {
            scatter(
                &req.gather.segs,
                body.done,
                &rx.staging[rx.start..rx.start + take],
            );
        }
        rx.start += take;
        body.done += take;
        if body.done < body.len {
            rx.body = Some(body);
            return;
        }
        rx.body = None;
        let r = qp.rq.pop_front().unwrap();
        out.recv(Completion {
            wr_id: r.wr_id,
            qp: id,
            opcode: Opcode::Recv,
            status: if fits {
                Status::Success
            } else {
                Status::LocalLength
            },
            detail: Detail::None,
            byte_len: body.len as u32,
            imm: body.imm,
            src: None,
            solicited: false,
            addr: 0,
        });
    }
}

/// Copies `data` into the bytes the segments describe, starting `offset` bytes in.
fn scatter(segs: &[Seg], mut offset: usize, mut data: &[u8]) {
    for s in segs {
        if data.is_empty() {
            return;
        }
        if offset >= s.len {
            offset -= s.len;
            continue;
        }
        let n = (s.len - offset).min(data.len());
        // SAFETY: offset + n <= s.len, inside a registered region kept alive by the
        // request; the region's bytes under an outstanding receive are the provider's to
        // write (MemoryRegion's contract), and `data` is the provider's own staging buffer.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), s.addr.add(offset), n) };
        data = &data[n..];
        offset = 0;
    }
}
