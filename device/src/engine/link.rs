//! The link's state as the driver sees it: `STATUS_LINK_UP` in the function's status
//! register and an `ASYNC_EVENT_LINK` whenever it changes (`qpip_abi::regs`).
//!
//! The engine looks at its link ([`crate::backend::Backend::link_up`], a system call for
//! a TAP) at most every [`LINK_CHECK`]: on a pass that looks at the link anyway, and, for
//! a link whose state can change on its own, on a timer while it sleeps
//! ([`LinkWatch::deadline`]). A change is published to the control thread (the status
//! register) and staged as a device-level event (context 0, which no context has; the
//! object is the new state, 1 up or 0 down).

use std::time::Instant;

use log::info;
use qpip_abi::admin::ASYNC_EVENT_LINK;

use super::events::AsyncEvent;
use super::Engine;
use crate::backend::LINK_CHECK;

/// When the engine looks at its link next.
#[derive(Debug, Default)]
pub struct LinkWatch {
    next: Option<Instant>,
}

impl LinkWatch {
    /// Whether a look is due at `now`; if so, the next one is a [`LINK_CHECK`] later.
    pub fn due(&mut self, now: Instant) -> bool {
        if self.next.is_some_and(|t| now < t) {
            return false;
        }
        self.next = Some(now + LINK_CHECK);
        true
    }

    /// When the next look is due (None before the first).
    pub fn deadline(&self) -> Option<Instant> {
        self.next
    }
}

/// The event that tells the driver the link is now `up`.
pub fn link_event(up: bool) -> AsyncEvent {
    AsyncEvent {
        ctx: 0,
        object: up as u32,
        kind: ASYNC_EVENT_LINK,
        reason: 0,
    }
}

impl Engine {
    /// Looks at the link if a look is due; a change goes to the status register and, as
    /// an event, to the driver.
    pub(super) fn watch_link(&mut self, now: Instant) {
        if !self.link_watch.due(now) {
            return;
        }
        let Some(up) = self.net.check_link() else {
            return;
        };
        info!(
            "{}: link {}",
            self.net.backend().describe(),
            if up { "up" } else { "down" }
        );
        self.shared.set_link_up(up);
        self.events.stage(link_event(up));
    }

    /// When a sleeping engine must wake to look at its link (None: its link cannot change
    /// on its own).
    pub(super) fn link_deadline(&self) -> Option<Instant> {
        if !self.net.link_watched() {
            return None;
        }
        Some(self.link_watch.deadline().unwrap_or_else(Instant::now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_look_is_due_once_per_interval() {
        let mut w = LinkWatch::default();
        let t = Instant::now();
        assert_eq!(w.deadline(), None);
        assert!(w.due(t), "the first look is due at once");
        assert!(!w.due(t + Duration::from_millis(1)));
        assert_eq!(w.deadline(), Some(t + LINK_CHECK));
        assert!(w.due(t + LINK_CHECK));
    }
}
