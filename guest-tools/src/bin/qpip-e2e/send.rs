//! `send`: connects, sends the planned messages on every connection, closes gracefully.

use std::collections::VecDeque;
use std::fs;
use std::net::SocketAddrV6;
use std::time::Instant;

use qpip::{Completion, Context, Event, EventKind, MemoryRegion, Opcode, Qp, SendWr};

use crate::args::{usage, Args};
use crate::data::{Gen, Tally};
use crate::qp::{cq_depth, errno_name, new_qp, serve_conns};
use crate::{fail, Fail, DEPTH};

struct SendConn {
    qp: Qp,
    mr: MemoryRegion,
    gen: Gen,
    plan: VecDeque<usize>,
    free: Vec<usize>,
    slot: usize,
    tally: Tally,
    acked: u64,
    connected: bool,
    closing: bool,
    closed: bool,
    peer_closed: bool,
    /// Receives the peer's end of stream.
    eof: MemoryRegion,
    done: bool,
    error: Option<String>,
}

impl SendConn {
    /// Fills every free send slot with the next messages of the plan; once the plan is
    /// sent and acknowledged, closes gracefully.
    fn fill(&mut self) -> Result<(), Fail> {
        while let (Some(&len), Some(&s)) = (self.plan.front(), self.free.last()) {
            self.plan.pop_front();
            self.free.pop();
            let at = s * self.slot;
            self.gen.fill(&mut self.mr.as_mut_slice()[at..at + len]);
            self.tally.add(&self.mr[at..at + len]);
            let sge = [self.mr.sge(at, len)];
            self.qp
                .post_send(&SendWr::new(s as u64, &sge))
                .map_err(|e| fail("post send", e))?;
        }
        if self.plan.is_empty() && self.free.len() == DEPTH {
            self.closing = true;
            self.qp.close(1).map_err(|e| fail("close", e))?;
        }
        Ok(())
    }

    /// Takes a completion; whether it acknowledged a send.
    fn completion(&mut self, comp: &Completion) -> bool {
        if comp.opcode != Opcode::Send {
            if comp.is_ok() && comp.byte_len == 0 {
                self.peer_closed = true;
                self.done = self.closed;
            }
            return false;
        }
        if !comp.is_ok() {
            self.error
                .get_or_insert_with(|| format!("send {:?}/{:?}", comp.status, comp.detail));
            self.done = true;
            return false;
        }
        self.free.push(comp.wr_id as usize);
        self.acked += u64::from(comp.byte_len);
        true
    }

    fn event(&mut self, ev: &Event) -> Result<(), Fail> {
        match ev.kind {
            EventKind::Connect if ev.status == 0 => {
                self.connected = true;
                // A receive, so the peer's end of stream is read (it completes empty).
                let sge = [self.eof.sge_all()];
                self.qp
                    .post_recv(u64::MAX, &sge)
                    .map_err(|e| fail("post receive", e))?;
            }
            // Done once our FIN is acknowledged and the peer's came: destroying the QP
            // earlier would abort the connection (RST) before the peer saw our end.
            EventKind::Close if ev.status == 0 => {
                self.closed = true;
                self.done = self.peer_closed;
            }
            EventKind::PeerClosed => {
                self.peer_closed = true;
                self.done = self.closed;
            }
            EventKind::Connect | EventKind::Close | EventKind::QpError => {
                self.error
                    .get_or_insert_with(|| format!("{:?} {}", ev.kind, errno_name(ev.status)));
                self.done = true;
            }
            _ => {}
        }
        Ok(())
    }
}

/// `--mark BYTES:FILE`: creates FILE the first time a connection has BYTES acknowledged.
fn mark_once(mark: &Option<(u64, String)>, marked: &mut bool, acked: u64) -> Result<(), Fail> {
    if let Some((at, file)) = mark {
        if !*marked && acked >= *at {
            *marked = true;
            fs::write(file, b"").map_err(|e| fail(file, e))?;
            println!("@send.marked={acked}");
        }
    }
    Ok(())
}

pub fn send(ctx: &Context, a: &Args) -> Result<bool, Fail> {
    let peer = SocketAddrV6::new(a.addr.expect("checked"), a.port, 0, 0);
    let plan: VecDeque<usize> = match a.bytes {
        Some(total) => {
            let mut p = VecDeque::new();
            let mut left = total;
            while left > 0 {
                let n = left.min(a.chunk as u64);
                p.push_back(n as usize);
                left -= n;
            }
            p
        }
        None if !a.sizes.is_empty() => a.sizes.iter().copied().collect(),
        None => return Err(usage("send needs --sizes or --bytes")),
    };
    let slot = plan.iter().copied().max().unwrap_or(1).max(1);
    let cq = ctx
        .create_cq(cq_depth(ctx, a.conns * DEPTH * 2))
        .map_err(|e| fail("create CQ", e))?;
    let mut conns = Vec::new();
    for i in 0..a.conns {
        let qp = new_qp(ctx, a, &cq)?;
        let mr = ctx
            .alloc(slot * DEPTH)
            .map_err(|e| fail("register memory", e))?;
        qp.connect(peer, i as u64).map_err(|e| fail("connect", e))?;
        conns.push(SendConn {
            qp,
            mr,
            gen: Gen::new(i as u64 + 1),
            plan: plan.clone(),
            free: (0..DEPTH).collect(),
            slot,
            tally: Tally::new(a.framing),
            acked: 0,
            connected: false,
            closing: false,
            closed: false,
            peer_closed: false,
            eof: ctx.alloc(64).map_err(|e| fail("register memory", e))?,
            done: false,
            error: None,
        });
    }
    let started = Instant::now();
    let deadline = started + a.wait;
    let mut marked = false;
    while conns.iter().any(|c| !c.done) {
        if Instant::now() >= deadline {
            println!("@send.timeout={}", a.wait.as_secs());
            break;
        }
        for c in conns
            .iter_mut()
            .filter(|c| c.connected && !c.done && !c.closing)
        {
            c.fill()?;
        }
        serve_conns(
            ctx,
            &cq,
            &mut conns,
            |c| c.qp.id(),
            |c, comp| {
                if c.completion(comp) {
                    mark_once(&a.mark, &mut marked, c.acked)?;
                }
                Ok(())
            },
            |c, ev| c.event(ev),
        )?;
    }
    let secs = started.elapsed().as_secs_f64();
    let mut ok = true;
    let mut total = 0;
    for c in &conns {
        let clean = c.done && c.error.is_none();
        ok &= clean;
        total += c.acked;
        println!(
            "@send.conn={} {} error={}",
            if clean { "clean" } else { "failed" },
            c.tally.summary(),
            c.error.as_deref().unwrap_or("-")
        );
    }
    println!("@send.bytes={total}");
    println!("@send.seconds={secs:.3}");
    println!("@send.mb_per_s={:.3}", total as f64 / secs / 1e6);
    Ok(ok)
}
