//! A stack on a backend: frames from the wire into the stack, the stack's frames onto the
//! wire, timers of both.

use std::os::fd::RawFd;
use std::time::Instant;

use crate::backend::{Backend, MAX_FRAME};

use super::stack::{Delivery, Stack, UdpIn, Upper};

pub struct Interface {
    pub stack: Stack,
    backend: Box<dyn Backend>,
    buf: Vec<u8>,
    /// The last backend error was logged; further ones are only counted.
    tx_error_logged: bool,
}

impl Interface {
    pub fn new(stack: Stack, backend: Box<dyn Backend>) -> Interface {
        let mut i = Interface {
            stack,
            backend,
            buf: vec![0; MAX_FRAME],
            tx_error_logged: false,
        };
        i.flush(); // duplicate address detection probes
        i
    }

    pub fn backend(&self) -> &dyn Backend {
        &*self.backend
    }

    pub fn backend_mut(&mut self) -> &mut dyn Backend {
        &mut *self.backend
    }

    /// Readable when a frame may be waiting (sleep in poll(2) on it, with
    /// [`Interface::next_deadline`] as the timeout).
    pub fn fd(&self) -> RawFd {
        self.backend.fd()
    }

    /// Puts the frames the stack produced on the wire. Returns how many went.
    pub fn flush(&mut self) -> usize {
        let _stage = crate::stages::span(crate::stages::Stage::Send);
        let mut n = 0;
        while let Some((f, gso)) = self.stack.pop_tx_gso() {
            match self.backend.send_owned(f, gso) {
                Ok(()) => n += 1,
                Err(e) => {
                    self.stack.stats_mut().tx_errors += 1;
                    if !self.tx_error_logged && e.kind() != std::io::ErrorKind::WouldBlock {
                        log::warn!(
                            "{}: cannot send: {e} (counted from now on)",
                            self.backend.describe()
                        );
                        self.tx_error_logged = true;
                    }
                }
            }
        }
        n
    }

    /// Receives up to `budget` frames. Each UDP datagram for the device goes to `deliver`;
    /// if it answers [`Delivery::NoPort`] the sender gets "port unreachable". Replies the
    /// stack makes (neighbour advertisements, echo replies ...) go out before it returns.
    /// Returns how many frames came in.
    pub fn poll_rx(
        &mut self,
        now: Instant,
        budget: usize,
        mut deliver: impl FnMut(&UdpIn<'_>) -> Delivery,
    ) -> usize {
        self.poll_rx_upper(now, budget, |u| match u {
            Upper::Udp(d) => deliver(d),
            Upper::Tcp(_) => Delivery::Delivered,
        })
    }

    /// As [`Interface::poll_rx`], for every upper layer the stack delivers (TCP segments
    /// too, once [`Stack::set_tcp`] is on). [`Delivery::NoPort`] only matters for UDP: TCP
    /// answers a segment for no connection with a reset of its own.
    pub fn poll_rx_upper(
        &mut self,
        now: Instant,
        budget: usize,
        mut deliver: impl FnMut(&Upper<'_>) -> Delivery,
    ) -> usize {
        let mut n = 0;
        let refused = self.backend.rx_dropped();
        while n < budget {
            let received = {
                let _stage = crate::stages::span(crate::stages::Stage::Receive);
                self.backend.recv_owned(&mut self.buf)
            };
            let len = match received {
                Ok(Some(len)) => len,
                Ok(None) => break,
                Err(e) => {
                    log::warn!("{}: receive failed: {e}", self.backend.describe());
                    break;
                }
            };
            n += 1;
            if let Some(u) = self.stack.receive_upper(&self.buf[..len], now) {
                match deliver(&u) {
                    Delivery::Delivered => {}
                    Delivery::NoPort => {
                        if let Upper::Udp(d) = &u {
                            self.stack.port_unreachable(d, now);
                        }
                    }
                    Delivery::Dropped(why) => self.stack.stats_mut().drop(why),
                }
            }
        }
        // Frames the backend refused count as malformed, like those the stack refuses.
        for _ in refused..self.backend.rx_dropped() {
            self.stack
                .stats_mut()
                .drop(super::stats::DropReason::Malformed);
        }
        self.flush();
        n
    }

    /// Runs the stack's and the backend's timers.
    pub fn poll_timers(&mut self, now: Instant) {
        self.stack.poll(now);
        if let Err(e) = self.backend.poll(now) {
            log::warn!("{}: {e}", self.backend.describe());
        }
        self.flush();
    }

    /// The earliest of the stack's and the backend's deadlines.
    pub fn next_deadline(&mut self) -> Option<Instant> {
        match (self.stack.next_deadline(), self.backend.next_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}
