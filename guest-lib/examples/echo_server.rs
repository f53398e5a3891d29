//! A TCP echo server on queue pairs: every byte a client sends comes back. Stream framing,
//! so any TCP client works (`nc -6 ::1 7007`, `qpip-cat ::1 7007`).
//!
//! `cargo run -p qpip --example echo_server -- [PORT] [CONNECTIONS]` (default 7007, for
//! ever). One connection at a time; each receive buffer that fills is sent straight back
//! from the same registered memory (no copy), then reposted once its send completed.

use std::net::{Ipv6Addr, SocketAddrV6};
use std::time::Duration;

use qpip::{Completion, Context, EventKind, Framing, Listener, Opcode, QpInit, QpKind, SendWr};

/// Receive buffers per connection, and their size.
const BUFS: usize = 8;
const BUF_LEN: usize = 16 * 1024;

fn main() -> Result<(), qpip::Error> {
    let mut args = std::env::args().skip(1);
    let port: u16 = args
        .next()
        .map(|p| p.parse().expect("PORT"))
        .unwrap_or(7007);
    let conns: Option<usize> = args.next().map(|n| n.parse().expect("CONNECTIONS"));
    let ctx = Context::open()?;
    let listener = ctx.listen(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, port, 0, 0), 4)?;
    println!("echo server on port {port} ({:?} provider)", ctx.provider());
    serve(&ctx, &listener, conns)
}

/// Serves `conns` connections (None: for ever), one after the other.
pub fn serve(ctx: &Context, listener: &Listener, conns: Option<usize>) -> Result<(), qpip::Error> {
    let mut served = 0;
    while conns.is_none_or(|n| served < n) {
        echo_one(ctx, listener)?;
        served += 1;
    }
    Ok(())
}

/// Accepts one connection and echoes until the client closes; returns the bytes echoed.
pub fn echo_one(ctx: &Context, listener: &Listener) -> Result<u64, qpip::Error> {
    let cq = ctx.create_cq(2 * BUFS as u32)?;
    let qp = ctx.create_qp(
        &QpInit::new(QpKind::Tcp(Framing::Stream), &cq).depth(BUFS as u32, BUFS as u32),
    )?;
    listener.accept(&qp, 0)?;
    let ev = ctx
        .wait_event_for(qp.id(), EventKind::Accept, None)?
        .expect("no timeout");
    if let Some(e) = ev.error() {
        return Err(qpip::Error::Connection {
            what: "accept",
            source: e,
        });
    }
    let bufs: Vec<_> = (0..BUFS)
        .map(|_| ctx.alloc(BUF_LEN))
        .collect::<Result<_, _>>()?;
    for (i, b) in bufs.iter().enumerate() {
        qp.post_recv(i as u64, &[b.sge_all()])?;
    }
    let (mut echoed, mut in_flight, mut eof) = (0u64, 0usize, false);
    let mut comps = [Completion::default(); 16];
    // Until the client closed and every echo went out.
    while !eof || in_flight > 0 {
        let n = cq.wait(&mut comps, Some(Duration::from_secs(60)))?;
        for c in &comps[..n] {
            let i = c.wr_id as usize;
            match c.opcode {
                // The client closed: every later receive completes empty.
                Opcode::Recv if c.is_ok() && c.byte_len == 0 => eof = true,
                Opcode::Recv if c.is_ok() => {
                    // Send the bytes back from where they landed; the buffer is reposted
                    // when this send completes.
                    qp.post_send(&SendWr::new(
                        i as u64,
                        &[bufs[i].sge(0, c.byte_len as usize)],
                    ))?;
                    in_flight += 1;
                    echoed += c.byte_len as u64;
                }
                Opcode::Send if c.is_ok() => {
                    in_flight -= 1;
                    if !eof {
                        qp.post_recv(i as u64, &[bufs[i].sge_all()])?;
                    }
                }
                _ if eof => {} // flushed receives after the end
                _ => panic!("work request failed: {c:?}"),
            }
        }
    }
    qp.close_wait(Duration::from_secs(60))?;
    Ok(echoed)
}
