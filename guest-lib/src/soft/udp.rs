//! UDP QPs over a UDP socket: each send is one datagram, each datagram fills one receive.
//! The checks and their order are the device's (docs/device.md §11).

use crate::mr::Seg;
use crate::types::{Completion, Detail, Opcode, Status};

use super::{net, Out, QpState};

/// Largest UDP payload (65535 less the UDP header), as the device allows.
pub(crate) const MAX_PAYLOAD: usize = 65527;

pub(crate) fn iovecs(segs: &[Seg]) -> Vec<libc::iovec> {
    segs.iter()
        .map(|s| libc::iovec {
            iov_base: s.addr.cast(),
            iov_len: s.len,
        })
        .collect()
}

pub(super) fn progress(id: u32, qp: &mut QpState, out: &mut Out) {
    // Sends, in order; one that would block waits (and the ones after it).
    while let Some(req) = qp.sq.front() {
        let len = req.len();
        let verdict = if req.imm != 0 {
            Some((Status::BadWqe, Detail::None))
        } else if qp.sock.is_none() {
            Some((Status::BadDest, Detail::NotBound))
        } else if len > MAX_PAYLOAD {
            Some((Status::LocalLength, Detail::None))
        } else {
            let dest = req.dest.expect("checked at post");
            let ip = dest.ip();
            if dest.port() == 0 || ip.is_unspecified() || ip.is_multicast() {
                Some((Status::BadDest, Detail::BadAddress))
            } else {
                let iov = match &req.inline {
                    Some(d) => vec![libc::iovec {
                        iov_base: d.as_ptr() as *mut libc::c_void,
                        iov_len: d.len(),
                    }],
                    None => iovecs(&req.gather.segs),
                };
                match net::send(qp.sock.as_ref().unwrap(), &iov, Some(&dest)) {
                    Ok(_) => Some((Status::Success, Detail::None)),
                    Err(e) => match e.raw_os_error().unwrap_or(0) {
                        libc::EAGAIN | libc::ENOBUFS => None,
                        libc::EMSGSIZE => Some((Status::LocalLength, Detail::None)),
                        libc::ENETUNREACH
                        | libc::EHOSTUNREACH
                        | libc::EADDRNOTAVAIL
                        | libc::ENETDOWN => Some((Status::BadDest, Detail::NoRoute)),
                        // ICMP errors of earlier datagrams reported on this one: the
                        // datagram itself was not sent; try it again.
                        libc::ECONNREFUSED => continue,
                        _ => Some((Status::BadDest, Detail::None)),
                    },
                }
            }
        };
        let Some((status, detail)) = verdict else {
            break;
        };
        let req = qp.sq.pop_front().unwrap();
        let byte_len = if status == Status::Success { len } else { 0 };
        out.send(id, req.wr_id, status, detail, byte_len);
    }

    // Receives: each datagram consumes the next receive request.
    let Some(sock) = qp.sock.as_ref() else {
        return;
    };
    while let Some(req) = qp.rq.front() {
        let size = match net::peek_len(sock) {
            Ok(n) => n,
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => break,
            // A pending socket error (an ICMP error): reading it cleared it.
            Err(_) => continue,
        };
        let mut c = Completion {
            wr_id: req.wr_id,
            qp: id,
            opcode: Opcode::Recv,
            ..Completion::default()
        };
        if size > req.gather.total {
            // Too big for the buffer: dropped, nothing placed, the request says how big.
            let _ = net::discard(sock);
            c.status = Status::LocalLength;
            c.byte_len = size as u32;
        } else {
            match net::recv(sock, &iovecs(&req.gather.segs)) {
                Ok((n, src)) => {
                    c.byte_len = n as u32;
                    c.src = src;
                }
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => break,
                Err(_) => continue,
            }
        }
        qp.rq.pop_front();
        out.recv(c);
    }
}
