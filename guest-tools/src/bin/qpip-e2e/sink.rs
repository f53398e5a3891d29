//! `sink`: accepts connections and receives on each until its peer closes.

use std::net::SocketAddrV6;
use std::time::{Duration, Instant};

use qpip::{Completion, Context, Event, EventKind, MemoryRegion, Qp, Status};

use crate::args::Args;
use crate::data::Tally;
use crate::qp::{any, cq_depth, errno_name, new_qp, serve_conns};
use crate::{fail, Fail, DEPTH};

#[derive(PartialEq)]
enum State {
    Waiting,
    Open,
    Clean,
    Failed,
}

struct SinkConn {
    qp: Qp,
    mr: MemoryRegion,
    state: State,
    tally: Tally,
    peer: Option<SocketAddrV6>,
    /// The first failed completion and the QP error event, as reported.
    error_cqe: Option<String>,
    error_event: Option<String>,
    flushed: u32,
    /// Our close completed (our FIN was acknowledged).
    close_done: bool,
}

impl SinkConn {
    /// Posts receive buffer `slot` (of `max_msg` bytes) again.
    fn post_slot(&self, slot: usize, max_msg: usize) -> Result<(), Fail> {
        let sge = [self.mr.sge(slot * max_msg, max_msg)];
        self.qp
            .post_recv(slot as u64, &sge)
            .map_err(|e| fail("post receive", e))
    }

    fn completion(&mut self, c: &Completion, max_msg: usize) -> Result<(), Fail> {
        let slot = c.wr_id as usize;
        if c.status == Status::Flushed {
            self.flushed += 1;
        }
        if self.state != State::Open {
            // After the end: the other receives complete empty or flushed; after a
            // failure, the first failed completion is what counts.
            if !c.is_ok() && self.state == State::Failed {
                self.error_cqe
                    .get_or_insert_with(|| format!("{:?}/{:?}", c.status, c.detail));
            }
            return Ok(());
        }
        if !c.is_ok() {
            self.error_cqe = Some(format!("{:?}/{:?}", c.status, c.detail));
            self.state = State::Failed;
            return Ok(());
        }
        if c.byte_len == 0 {
            // The peer's FIN: every receive from now on completes empty.
            self.state = State::Clean;
            return self.qp.close(0).map_err(|e| fail("close", e));
        }
        let off = slot * max_msg;
        self.tally.add(&self.mr[off..off + c.byte_len as usize]);
        self.post_slot(slot, max_msg)
    }

    fn event(&mut self, ev: &Event, max_msg: usize) -> Result<(), Fail> {
        match ev.kind {
            EventKind::Accept if ev.status == 0 => {
                self.state = State::Open;
                self.peer = ev.peer;
                for s in 0..DEPTH {
                    self.post_slot(s, max_msg)?;
                }
            }
            EventKind::Accept => {
                self.state = State::Failed;
                self.error_event = Some(format!("accept {}", errno_name(ev.status)));
            }
            EventKind::QpError => {
                self.error_event = Some(format!("QpError {}", errno_name(ev.status)));
                if self.state == State::Open {
                    self.state = State::Failed;
                }
            }
            // Read here, a close's event is not there for the wait below.
            EventKind::Close => self.close_done = true,
            _ => {}
        }
        Ok(())
    }
}

pub fn sink(ctx: &Context, a: &Args) -> Result<bool, Fail> {
    let cq = ctx
        .create_cq(cq_depth(ctx, a.conns * DEPTH * 2))
        .map_err(|e| fail("create CQ", e))?;
    let listener = ctx
        .listen(any(a.port), a.conns as u32)
        .map_err(|e| fail("listen", e))?;
    let mut conns = Vec::new();
    for i in 0..a.conns {
        let qp = new_qp(ctx, a, &cq)?;
        let mr = ctx
            .alloc(a.max_msg * DEPTH)
            .map_err(|e| fail("register memory", e))?;
        listener
            .accept(&qp, i as u64)
            .map_err(|e| fail("accept", e))?;
        conns.push(SinkConn {
            qp,
            mr,
            state: State::Waiting,
            tally: Tally::new(a.framing),
            peer: None,
            error_cqe: None,
            error_event: None,
            flushed: 0,
            close_done: false,
        });
    }
    println!("@sink.listening={}", a.port);
    let clean_goal = a.clean.unwrap_or(a.conns);
    let deadline = Instant::now() + a.wait;
    loop {
        let clean = conns.iter().filter(|c| c.state == State::Clean).count();
        let ended = conns
            .iter()
            .filter(|c| matches!(c.state, State::Clean | State::Failed))
            .count();
        if ended == conns.len() || (clean >= clean_goal && clean_goal < conns.len()) {
            break;
        }
        if Instant::now() >= deadline {
            println!("@sink.timeout={}", a.wait.as_secs());
            break;
        }
        serve_conns(
            ctx,
            &cq,
            &mut conns,
            |c| c.qp.id(),
            |conn, c| conn.completion(c, a.max_msg),
            |conn, ev| conn.event(ev, a.max_msg),
        )?;
    }
    // A connection that failed by its completions has its QP error event still to come:
    // the device delivers the event after the flushed completions, and a loop that ends on
    // the completions may not have read it yet.
    let until = Instant::now() + Duration::from_secs(10);
    for c in conns
        .iter_mut()
        .filter(|c| c.state == State::Failed && c.error_event.is_none())
    {
        let left = until.saturating_duration_since(Instant::now());
        if let Some(ev) = ctx
            .wait_event_for(c.qp.id(), EventKind::QpError, Some(left))
            .map_err(|e| fail("events", e))?
        {
            c.error_event = Some(format!("QpError {}", errno_name(ev.status)));
        }
    }
    // Our FINs acknowledged before the QPs go (destroying one aborts its connection, and
    // under loss the peer may still be waiting for the acknowledgement of its own FIN).
    let clean_qps: Vec<u32> = conns
        .iter()
        .filter(|c| c.state == State::Clean && !c.close_done)
        .map(|c| c.qp.id())
        .collect();
    let until = Instant::now() + Duration::from_secs(30);
    for id in clean_qps {
        let left = until.saturating_duration_since(Instant::now());
        let _ = ctx.wait_event_for(id, EventKind::Close, Some(left));
    }
    let mut ok = true;
    for c in &conns {
        let st = match c.state {
            State::Waiting => "waiting",
            State::Open => "open",
            State::Clean => "clean",
            State::Failed => "failed",
        };
        ok &= c.state == State::Clean || (a.clean.is_some() && c.state != State::Failed);
        let peer = c.peer.map(|p| p.to_string()).unwrap_or_else(|| "-".into());
        println!(
            "@sink.conn={st} {} peer={peer} cqe={} event={} flushed={}",
            c.tally.summary(),
            c.error_cqe.as_deref().unwrap_or("-"),
            c.error_event.as_deref().unwrap_or("-"),
            c.flushed
        );
    }
    let clean = conns.iter().filter(|c| c.state == State::Clean).count();
    println!("@sink.clean={clean}");
    if a.clean.is_some() {
        ok = clean >= clean_goal;
    }
    Ok(ok)
}
