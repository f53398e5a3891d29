//! Asynchronous events: what the device tells the driver without a command having asked
//! for that particular thing — a TCP QP reset by its peer or timed out, a peer that closed
//! its direction.
//!
//! The NVMe "asynchronous event request" model (`qpip_abi::admin::ADMIN_OP_ASYNC_EVENT`):
//! the driver keeps a few `ASYNC_EVENT` commands pending, and each event completes one of
//! them. So events never need a completion slot nobody asked for, and the admin completion
//! ring cannot be overrun by a burst of them. While no request is pending, events wait in
//! a bounded queue; beyond its bound they are dropped and counted, and the next event
//! delivered carries `ASYNC_FLAG_LOST`.
//!
//! Events are staged while the engine works and handed out at the end of its pass
//! ([`super::Engine::deliver_events`]), so a command completed in the same pass (the ACCEPT
//! that gave a QP a connection whose peer had already closed) precedes the event about it.

use std::collections::VecDeque;

use qpip_abi::admin::{
    ADMIN_STATUS_NO_RESOURCES, ASYNC_EVENT_QUEUE, ASYNC_FLAG_LOST, MAX_ASYNC_REQUESTS,
};

use super::objects::PendingCmd;

/// One event, about an object of a context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AsyncEvent {
    pub ctx: u32,
    /// The object (a QP id).
    pub object: u32,
    /// `ASYNC_EVENT_*`.
    pub kind: u16,
    /// `ASYNC_REASON_*`, or 0.
    pub reason: u8,
}

/// The results of the `ASYNC_EVENT` completion that carries `ev`.
type Results = (u64, u64, u32);

fn results(ev: &AsyncEvent, lost: bool) -> Results {
    let flags = if lost { ASYNC_FLAG_LOST } else { 0 };
    (
        ev.ctx as u64,
        ev.object as u64,
        ev.kind as u32 | (ev.reason as u32) << 16 | flags,
    )
}

/// What became of an event offered to [`AsyncEvents::raise`].
#[derive(Debug, PartialEq, Eq)]
pub enum Raised {
    /// A pending request takes it: complete `cmd` with these results.
    Delivered(PendingCmd, Results),
    /// It waits for a request.
    Queued,
    /// The queue was full: dropped.
    Lost,
}

/// Pending requests and the events waiting for them.
#[derive(Debug, Default)]
pub struct AsyncEvents {
    requests: VecDeque<PendingCmd>,
    queue: VecDeque<AsyncEvent>,
    /// Events were dropped since the last one delivered.
    lost: bool,
    /// Raised during the current engine pass, not yet offered.
    staged: Vec<AsyncEvent>,
}

impl AsyncEvents {
    /// An `ASYNC_EVENT` request: Ok(Some) when a queued event answers it at once, Ok(None)
    /// when it waits, Err(NO_RESOURCES) when too many are pending already.
    pub fn request(&mut self, cmd: PendingCmd) -> Result<Option<Results>, u16> {
        if let Some(ev) = self.queue.pop_front() {
            return Ok(Some(self.take(&ev)));
        }
        if self.requests.len() >= MAX_ASYNC_REQUESTS as usize {
            return Err(ADMIN_STATUS_NO_RESOURCES);
        }
        self.requests.push_back(cmd);
        Ok(None)
    }

    /// Notes an event; it is offered at the end of the engine's pass.
    pub fn stage(&mut self, ev: AsyncEvent) {
        self.staged.push(ev);
    }

    /// The events staged since the last call.
    pub fn take_staged(&mut self) -> Vec<AsyncEvent> {
        std::mem::take(&mut self.staged)
    }

    /// Offers an event to the oldest pending request, or queues it, or drops it.
    pub fn raise(&mut self, ev: AsyncEvent) -> Raised {
        if let Some(cmd) = self.requests.pop_front() {
            return Raised::Delivered(cmd, self.take(&ev));
        }
        if self.queue.len() < ASYNC_EVENT_QUEUE as usize {
            self.queue.push_back(ev);
            return Raised::Queued;
        }
        self.lost = true;
        Raised::Lost
    }

    fn take(&mut self, ev: &AsyncEvent) -> Results {
        let r = results(ev, self.lost);
        self.lost = false;
        r
    }

    /// Context `ctx` was destroyed: its events go with it (a new context may get its id).
    pub fn forget_context(&mut self, ctx: u32) {
        self.queue.retain(|e| e.ctx != ctx);
        self.staged.retain(|e| e.ctx != ctx);
    }

    /// The admin queue was set up anew or disabled: the requests were commands of the old
    /// queue and get no completion. Queued events stay for the next requests.
    pub fn forget_requests(&mut self) {
        self.requests.clear();
    }

    /// Requests pending.
    pub fn pending_requests(&self) -> usize {
        self.requests.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use qpip_abi::admin::*;

    fn cmd(id: u32) -> PendingCmd {
        PendingCmd {
            cmd_id: id,
            opcode: ADMIN_OP_ASYNC_EVENT,
        }
    }

    fn ev(ctx: u32) -> AsyncEvent {
        AsyncEvent {
            ctx,
            object: 7,
            kind: ASYNC_EVENT_QP_ERROR,
            reason: ASYNC_REASON_TIMEOUT,
        }
    }

    #[test]
    fn a_pending_request_takes_the_event_with_its_encoding() {
        let mut e = AsyncEvents::default();
        assert_eq!(e.request(cmd(1)), Ok(None));
        let want = (
            3,
            7,
            ASYNC_EVENT_QP_ERROR as u32 | (ASYNC_REASON_TIMEOUT as u32) << 16,
        );
        assert_eq!(e.raise(ev(3)), Raised::Delivered(cmd(1), want));
        assert_eq!(e.pending_requests(), 0);
    }

    #[test]
    fn the_queue_is_bounded_and_the_next_event_says_some_were_lost() {
        let mut e = AsyncEvents::default();
        for _ in 0..ASYNC_EVENT_QUEUE {
            assert_eq!(e.raise(ev(1)), Raised::Queued);
        }
        assert_eq!(e.raise(ev(1)), Raised::Lost);
        let r = e.request(cmd(1)).unwrap().unwrap();
        assert_ne!(r.2 & ASYNC_FLAG_LOST, 0);
        let r = e.request(cmd(2)).unwrap().unwrap();
        assert_eq!(r.2 & ASYNC_FLAG_LOST, 0, "the flag is reported once");
    }

    #[test]
    fn requests_are_bounded_and_a_destroyed_context_loses_its_events() {
        let mut e = AsyncEvents::default();
        for i in 0..MAX_ASYNC_REQUESTS {
            assert_eq!(e.request(cmd(i)), Ok(None));
        }
        assert_eq!(e.request(cmd(99)), Err(ADMIN_STATUS_NO_RESOURCES));
        e.forget_requests();
        e.raise(ev(1));
        e.raise(ev(2));
        e.forget_context(1);
        assert_eq!(e.request(cmd(5)).unwrap().unwrap().0, 2);
        assert_eq!(e.request(cmd(6)), Ok(None));
    }
}
