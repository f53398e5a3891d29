//! The copy loop: stdin to the QP, the QP to stdout, until both directions are done.

mod input;
mod output;

use std::io;
use std::net::SocketAddrV6;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use qpip::{Completion, Context, Cq, EventKind, MemoryRegion, Opcode, Qp, Status};

use crate::args::{Args, Fail};
use crate::{fmt_peer, TCP_CHUNK, TCP_FIRST_RECVS, TCP_SLOTS, UDP_CHUNK, UDP_RECV, UDP_SLOTS};
use input::{Input, Mapped, MAPPED_WR};

/// Completions taken per poll of the CQ.
const BATCH: usize = 64;

/// The copy loop: sends from stdin (mapped, or read into registered buffers), receive
/// buffers written to stdout, one poll(2) over stdin, the CQ and the context's events.
pub(crate) struct Cat<'a> {
    ctx: &'a Context,
    cq: &'a Cq,
    qp: &'a Qp,
    udp: bool,
    listen: bool,
    verbose: bool,
    wait: Option<Duration>,
    /// UDP: where stdin goes (the listener learns it from the first datagram).
    pub(crate) peer: Option<SocketAddrV6>,
    input: Input,
    map: Option<Mapped>,
    /// Copy buffers for stdin reads, registered as they are first needed.
    send_bufs: Vec<MemoryRegion>,
    free_sends: Vec<usize>,
    /// Sends posted and not completed.
    in_flight: usize,
    slots: usize,
    /// The receive buffers, `rlen` bytes each: the first `first_recvs` in one region, the
    /// rest (once data came) in a second.
    recv: Vec<MemoryRegion>,
    first_recvs: usize,
    rlen: usize,
    /// Receives completed with data, in order, to write out and post again.
    ready: Vec<(usize, usize)>,
    chunk: usize,
    stdin_done: bool,
    /// TCP: our FIN was asked for, and its Close event came.
    closing: bool,
    closed: bool,
    /// TCP: the peer's end of stream arrived.
    peer_done: bool,
    last_input: Instant,
}

impl<'a> Cat<'a> {
    pub(crate) fn new(
        ctx: &'a Context,
        cq: &'a Cq,
        qp: &'a Qp,
        args: &Args,
    ) -> Result<Cat<'a>, Fail> {
        let (chunk, rlen, slots, first_recvs) = if args.udp {
            let max = ctx.limits().max_udp_payload as usize;
            (
                UDP_CHUNK.min(max),
                UDP_RECV.min(max.max(1)),
                UDP_SLOTS,
                UDP_SLOTS,
            )
        } else {
            (TCP_CHUNK, TCP_CHUNK, TCP_SLOTS, TCP_FIRST_RECVS)
        };
        let recv = ctx
            .alloc(rlen * first_recvs)
            .map_err(|e| ("register memory", e))?;
        Ok(Cat {
            ctx,
            cq,
            qp,
            udp: args.udp,
            listen: args.listen,
            verbose: args.verbose,
            wait: args.wait,
            peer: None,
            input: Input::Poll,
            map: None,
            send_bufs: Vec::new(),
            free_sends: Vec::new(),
            in_flight: 0,
            slots,
            recv: vec![recv],
            first_recvs,
            rlen,
            ready: Vec::with_capacity(slots),
            chunk,
            stdin_done: false,
            closing: false,
            closed: false,
            peer_done: false,
            last_input: Instant::now(),
        })
    }

    fn say(&self, msg: impl std::fmt::Display) {
        if self.verbose {
            eprintln!("qpip-cat: {msg}");
        }
    }

    fn finished(&self) -> bool {
        if !self.udp {
            return self.closed && self.peer_done;
        }
        let sent = self.in_flight == 0;
        let quiet = self.wait.is_some_and(|w| self.last_input.elapsed() >= w);
        if self.listen {
            // Only -w ends a UDP listener: quiet for that long after the first datagram.
            sent && quiet && self.peer.is_some()
        } else {
            sent && self.stdin_done && (self.wait.is_none() || quiet)
        }
    }

    /// Stdin is wanted: not at its end, a send may be posted and (UDP) someone to send to.
    fn want_stdin(&self) -> bool {
        !self.stdin_done
            && !self.closing
            && self.in_flight < self.slots
            && (!self.udp || self.peer.is_some())
    }

    pub(crate) fn run(&mut self) -> Result<(), Fail> {
        let mut comps = [Completion::default(); BATCH];
        let mut armed = false;
        loop {
            // Completions first, without a system call.
            let n = self.cq.poll(&mut comps);
            for c in &comps[..n] {
                self.complete(c)?;
            }
            self.write_out()?;
            while let Some(ev) = self.ctx.poll_event().map_err(|e| ("events", e))? {
                self.event(ev)?;
            }
            if self.finished() {
                return Ok(());
            }
            // Stdin that never waits (a mapped or regular file) goes out at once, while
            // the sends before it are in flight.
            let mut busy = n > 0;
            if self.input == Input::File && self.want_stdin() {
                busy |= self.feed()?;
            }
            if busy {
                continue;
            }
            if !armed {
                // Poll once more after arming, so a completion that came in between is
                // not slept through.
                self.cq.arm().map_err(|e| ("arm CQ", e))?;
                armed = true;
                continue;
            }
            armed = false;
            let want_stdin = self.input == Input::Poll && self.want_stdin();
            let mut fds = [
                libc::pollfd {
                    fd: self.cq.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: self.ctx.events_fd().as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: 0,
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            let nfds = if want_stdin { 3 } else { 2 };
            let timeout_ms = match self.wait {
                Some(w) if self.udp => {
                    let left = w.saturating_sub(self.last_input.elapsed());
                    (left.as_millis().min(i32::MAX as u128) as i32).max(1)
                }
                _ => -1,
            };
            // SAFETY: `fds` is a valid array of at least `nfds` pollfd entries that
            // outlives the call.
            let r = unsafe { libc::poll(fds.as_mut_ptr(), nfds as libc::nfds_t, timeout_ms) };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(("poll", e).into());
            }
            if fds[0].revents != 0 {
                self.cq.ack();
            }
            if want_stdin && fds[2].revents != 0 {
                self.read_stdin()?;
            }
        }
    }

    /// Posts what a file stdin has, up to the sends allowed in flight. Whether anything
    /// happened.
    fn feed(&mut self) -> Result<bool, Fail> {
        let mut any = false;
        while self.want_stdin() {
            if self.map.is_some() {
                self.send_mapped()?;
            } else {
                self.read_stdin()?;
            }
            any = true;
        }
        Ok(any)
    }

    fn start_close(&mut self) -> Result<(), Fail> {
        if !self.closing {
            self.closing = true;
            self.qp.close(0).map_err(|e| ("close", e))?;
        }
        Ok(())
    }

    fn complete(&mut self, c: &Completion) -> Result<(), Fail> {
        match c.opcode {
            // qpip-cat posts no RDMA operation.
            Opcode::RdmaWrite | Opcode::RdmaRead | Opcode::RecvImm | Opcode::Tripwire => {
                return Err(Fail(1, format!("unexpected RDMA completion: {c:?}")))
            }
            Opcode::Send => {
                if !c.is_ok() {
                    return Err(Fail(1, format!("send failed: {}", c.status)));
                }
                self.in_flight -= 1;
                if c.wr_id & MAPPED_WR == 0 {
                    self.free_sends.push(c.wr_id as usize);
                }
            }
            Opcode::Recv => {
                let slot = c.wr_id as usize;
                if c.status == Status::Flushed && self.peer_done {
                    return Ok(());
                }
                if !c.is_ok() {
                    let what = if c.status == Status::LocalLength {
                        format!(
                            "a message of {} bytes is larger than the receive buffers",
                            c.byte_len
                        )
                    } else {
                        format!("receive failed: {}", c.status)
                    };
                    return Err(Fail(1, what));
                }
                if self.udp {
                    self.last_input = Instant::now();
                    let src = c.src;
                    if self.peer.is_none() {
                        self.peer = src;
                        self.say(format!("datagram from {}", fmt_peer(src)));
                    } else if src != self.peer {
                        // One peer, like `nc -u -l`: others are not ours.
                        return self.repost(slot);
                    }
                } else if c.byte_len == 0 {
                    // End of stream: every later receive completes empty too. A
                    // terminal session ends here; otherwise the rest of stdin still goes
                    // out (half-close), so `qpip-cat -l P > file &` — stdin at its end
                    // at once — still receives everything the other side sends.
                    self.peer_done = true;
                    // SAFETY: isatty only inspects descriptor 0.
                    if self.stdin_done || unsafe { libc::isatty(0) } == 1 {
                        return self.start_close();
                    }
                    return Ok(());
                }
                self.ready.push((slot, c.byte_len as usize));
                if self.recv.len() == 1 && self.first_recvs < self.slots && !self.peer_done {
                    self.more_receives()?;
                }
            }
        }
        Ok(())
    }

    fn event(&mut self, ev: qpip::Event) -> Result<(), Fail> {
        if ev.qp != self.qp.id() {
            return Ok(());
        }
        match ev.kind {
            EventKind::Close => {
                if let Some(e) = ev.error() {
                    return Err(Fail(1, format!("close: {e}")));
                }
                self.closed = true;
            }
            EventKind::PeerClosed if self.verbose => eprintln!("qpip-cat: the peer closed"),
            EventKind::QpError => {
                let why = ev
                    .error()
                    .map(|e| e.to_string())
                    .unwrap_or_else(|| "failed".into());
                return Err(Fail(1, format!("connection lost: {why}")));
            }
            _ => {}
        }
        Ok(())
    }
}
