//! What every mode uses: its QP and CQ, the wait for completions or events, and the
//! wording of an event's status.

use std::net::{Ipv6Addr, SocketAddrV6};
use std::time::Duration;

use qpip::{Completion, Context, Cq, Event, Qp, QpInit, QpKind};

use crate::args::Args;
use crate::{fail, Fail, DEPTH};

pub fn any(port: u16) -> SocketAddrV6 {
    SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, port, 0, 0)
}

/// A QP of the kind the arguments ask for (UDP, or TCP with their framing), both queues
/// DEPTH deep, on `cq`.
pub fn new_qp(ctx: &Context, a: &Args, cq: &Cq) -> Result<Qp, Fail> {
    let kind = if a.udp {
        QpKind::Udp
    } else {
        QpKind::Tcp(a.framing)
    };
    ctx.create_qp(&QpInit::new(kind, cq).depth(DEPTH as u32, DEPTH as u32))
        .map_err(|e| fail("create QP", e))
}

/// A completion queue's depth for `n` requests: a power of two within the device's limit.
pub fn cq_depth(ctx: &Context, n: usize) -> u32 {
    (n.max(2) as u32)
        .next_power_of_two()
        .min(ctx.limits().max_queue_depth)
}

/// Waits for completions or events (arm, re-poll, sleep on both descriptors), up to `t`.
pub fn wait_any(
    ctx: &Context,
    cq: &Cq,
    out: &mut [Completion],
    t: Duration,
) -> Result<usize, Fail> {
    let n = cq.poll(out);
    if n > 0 {
        return Ok(n);
    }
    cq.arm().map_err(|e| fail("arm CQ", e))?;
    let n = cq.poll(out);
    if n > 0 {
        return Ok(n);
    }
    use std::os::fd::AsRawFd;
    let mut fds = [
        libc::pollfd {
            fd: cq.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: ctx.events_fd().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    let ms = t.as_millis().clamp(1, i32::MAX as u128) as i32;
    // SAFETY: `fds` is a valid array of two pollfd entries that outlives the call.
    let r = unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
    if r < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
        return Err(fail("poll", std::io::Error::last_os_error()));
    }
    if fds[0].revents != 0 {
        cq.ack();
    }
    Ok(cq.poll(out))
}

pub fn errno_name(status: i32) -> String {
    if status == 0 {
        "ok".into()
    } else {
        format!(
            "{} ({})",
            std::io::Error::from_raw_os_error(-status),
            -status
        )
    }
}

/// One round of a loop over many connections (sink, send): waits up to 500 ms for
/// completions or events, then hands each completion, and each connection event queued, to
/// the connection whose QP it names (`qp_of`); anything else is not ours. The device writes
/// a connection's flushed completions before its error event, so after events the CQ is
/// polled again: a completion that came between the first poll and its event is handed
/// over in the same round, not left behind a loop the event ends.
pub fn serve_conns<C>(
    ctx: &Context,
    cq: &Cq,
    conns: &mut [C],
    qp_of: impl Fn(&C) -> u32,
    mut on_completion: impl FnMut(&mut C, &Completion) -> Result<(), Fail>,
    mut on_event: impl FnMut(&mut C, &Event) -> Result<(), Fail>,
) -> Result<(), Fail> {
    let mut comps = [Completion::default(); 64];
    let mut hand_over = |conns: &mut [C], comps: &[Completion]| -> Result<(), Fail> {
        for comp in comps {
            if let Some(c) = conns.iter_mut().find(|c| qp_of(c) == comp.qp) {
                on_completion(c, comp)?;
            }
        }
        Ok(())
    };
    let n = wait_any(ctx, cq, &mut comps, Duration::from_millis(500))?;
    hand_over(conns, &comps[..n])?;
    let mut events = false;
    while let Some(ev) = ctx.poll_event().map_err(|e| fail("events", e))? {
        events = true;
        if let Some(c) = conns.iter_mut().find(|c| qp_of(c) == ev.qp) {
            on_event(c, &ev)?;
        }
    }
    while events {
        let n = cq.poll(&mut comps);
        hand_over(conns, &comps[..n])?;
        events = n > 0;
    }
    Ok(())
}
