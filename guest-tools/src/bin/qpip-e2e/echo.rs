//! `echo`: sends every message (TCP) or datagram (UDP) back.

use std::time::{Duration, Instant};

use qpip::{Completion, Context, EventKind, Framing, Opcode, SendWr, Status};

use crate::args::Args;
use crate::qp::{any, cq_depth, errno_name, new_qp, wait_any};
use crate::{fail, Fail, DEPTH};

pub fn echo(ctx: &Context, a: &Args) -> Result<bool, Fail> {
    let cq = ctx
        .create_cq(cq_depth(ctx, DEPTH * 2))
        .map_err(|e| fail("create CQ", e))?;
    let qp = new_qp(ctx, a, &cq)?;
    let mr = ctx
        .alloc(a.max_msg * DEPTH)
        .map_err(|e| fail("register memory", e))?;
    let listener = if a.udp {
        qp.bind(any(a.port)).map_err(|e| fail("bind", e))?;
        None
    } else {
        Some(ctx.listen(any(a.port), 1).map_err(|e| fail("listen", e))?)
    };
    // Receives go up before the peer can connect, so its first bytes have somewhere to go:
    // on a TCP QP, receives posted before ACCEPT become the connection's receive space.
    for s in 0..DEPTH {
        qp.post_recv(s as u64, &[mr.sge(s * a.max_msg, a.max_msg)])
            .map_err(|e| fail("post receive", e))?;
    }
    println!("@echo.listening={}", a.port);
    if let Some(l) = &listener {
        let peer = l.accept_wait(&qp, a.wait).map_err(|e| fail("accept", e))?;
        println!("@echo.peer={peer}");
    }
    const UDP_QUIET: Duration = Duration::from_secs(30);
    let mut echoed = 0u64;
    // UDP ends after --count datagrams, or UDP_QUIET of quiet after the first one, or -w
    // without any. The quiet time is long because a TCG guest on a loaded host can go
    // many seconds without CPU: the pinging side's retries must still find this echo.
    let started = Instant::now();
    let mut last: Option<Instant> = None;
    let mut comps = [Completion::default(); 16];
    let mut peer_closed = false;
    loop {
        if a.udp && a.count > 0 && echoed >= a.count {
            break;
        }
        let quiet = match last {
            Some(t) if a.udp => t.elapsed() >= UDP_QUIET,
            _ => started.elapsed() >= a.wait,
        };
        if quiet {
            break;
        }
        let n = wait_any(ctx, &cq, &mut comps, Duration::from_millis(500))?;
        for c in &comps[..n] {
            let s = c.wr_id as usize;
            if !c.is_ok() {
                if peer_closed && c.status == Status::Flushed {
                    continue;
                }
                println!("@echo.error={:?}/{:?}", c.status, c.detail);
                return Ok(false);
            }
            match c.opcode {
                Opcode::Recv if c.byte_len == 0 && !a.udp => peer_closed = true,
                Opcode::Recv => {
                    last = Some(Instant::now());
                    // The receive buffer goes back out; it is reposted once the send is done.
                    let sge = [mr.sge(s * a.max_msg, c.byte_len as usize)];
                    let mut wr = SendWr::new(s as u64, &sge);
                    if let Some(src) = c.src {
                        wr = wr.to(src);
                    } else if a.framing == Framing::Message {
                        wr = wr.imm(c.imm);
                    }
                    qp.post_send(&wr).map_err(|e| fail("post send", e))?;
                }
                // This echo posts nothing but sends.
                Opcode::Send
                | Opcode::RdmaWrite
                | Opcode::RdmaRead
                | Opcode::RecvImm
                | Opcode::Tripwire => {
                    echoed += 1;
                    if !peer_closed {
                        qp.post_recv(c.wr_id, &[mr.sge(s * a.max_msg, a.max_msg)])
                            .map_err(|e| fail("post receive", e))?;
                    }
                }
            }
        }
        while let Some(ev) = ctx.poll_event().map_err(|e| fail("events", e))? {
            if ev.kind == EventKind::QpError {
                println!("@echo.error=QpError {}", errno_name(ev.status));
                return Ok(false);
            }
        }
        if peer_closed {
            // Graceful: our FIN goes after the echoes still queued.
            qp.close_wait(Duration::from_secs(60))
                .map_err(|e| fail("close", e))?;
            break;
        }
    }
    println!("@echo.count={echoed}");
    Ok(a.udp || peer_closed)
}
