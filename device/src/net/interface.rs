//! A stack on a backend: frames from the wire into the stack, the stack's frames onto the
//! wire, timers of both, and the link's state: while the link is down the stack's frames
//! are dropped and counted (`tx_link_down`), never held.

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
    /// The link's state as last looked at ([`Interface::check_link`]).
    link_up: bool,
}

impl Interface {
    pub fn new(stack: Stack, mut backend: Box<dyn Backend>) -> Interface {
        let link_up = backend.link_up();
        let mut i = Interface {
            stack,
            backend,
            buf: vec![0; MAX_FRAME],
            tx_error_logged: false,
            link_up,
        };
        // The link learns who the stack is before its first frame.
        if let Err(e) = i.claim_identity() {
            log::error!(
                "{}: the device's identity is refused: {e}; its frames will be dropped",
                i.backend.describe()
            );
        }
        i.flush(); // duplicate address detection probes
        i
    }

    /// Tells the link that the stack is `mac` with `addrs` (before the stack becomes it:
    /// a switch port refuses another function's MAC or address).
    pub fn claim(
        &mut self,
        mac: [u8; 6],
        addrs: &[std::net::Ipv6Addr],
    ) -> Result<(), crate::backend::IdentityTaken> {
        self.backend.claim_identity(mac, addrs)
    }

    /// Tells the link who the stack is now ([`Interface::claim`]).
    pub fn claim_identity(&mut self) -> Result<(), crate::backend::IdentityTaken> {
        let addrs: Vec<std::net::Ipv6Addr> =
            self.stack.addresses().iter().map(|&(a, _)| a).collect();
        self.backend.claim_identity(self.stack.mac(), &addrs)
    }

    pub fn backend(&self) -> &dyn Backend {
        &*self.backend
    }

    pub fn backend_mut(&mut self) -> &mut dyn Backend {
        &mut *self.backend
    }

    /// Takes the link away (leaving no link): for an engine that failed, whose link its
    /// replacement gets (`engine::thread`).
    pub fn take_backend(&mut self) -> Box<dyn Backend> {
        std::mem::replace(&mut self.backend, Box::new(crate::backend::none::NoLink))
    }

    /// The link's state as last looked at.
    pub fn link_up(&self) -> bool {
        self.link_up
    }

    /// Whether the link's state can change on its own (someone must look now and then).
    pub fn link_watched(&self) -> bool {
        self.backend.link_watched()
    }

    /// Looks at the link's state (maybe a system call: not per frame). Some(up) when it
    /// changed since the last look.
    pub fn check_link(&mut self) -> Option<bool> {
        let up = self.backend.link_up();
        if up == self.link_up {
            return None;
        }
        self.link_up = up;
        Some(up)
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
            if !self.link_up {
                self.stack.stats_mut().tx_link_down += 1;
                continue;
            }
            match self.backend.send_owned(f, gso) {
                Ok(()) => n += 1,
                Err(e) if e.kind() == std::io::ErrorKind::NetworkDown => {
                    self.stack.stats_mut().tx_link_down += 1;
                }
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
        Interface::poll_rx_in(self, |i| i, now, budget, |_, u| deliver(u))
    }

    /// As [`Interface::poll_rx_upper`] for an interface that lives inside `owner`, whom
    /// `deliver` may change while a packet goes up (the engine: its QPs take the data).
    /// `net` finds the interface in `owner`. Packets the device sent to itself come
    /// first (they are already here), then frames from the link.
    pub fn poll_rx_in<C>(
        owner: &mut C,
        net: impl Fn(&mut C) -> &mut Interface,
        now: Instant,
        budget: usize,
        deliver: impl FnMut(&mut C, &Upper<'_>) -> Delivery,
    ) -> usize {
        Interface::poll_rx_steered(owner, net, now, budget, deliver, |_, _, _| {})
    }

    /// As [`Interface::poll_rx_in`], with every frame from the link that the stack marked
    /// for a raw QP beside it ([`Stack::raw_rx`]) handed to `raw` once the stack and
    /// `deliver` are done with it.
    pub fn poll_rx_steered<C>(
        owner: &mut C,
        net: impl Fn(&mut C) -> &mut Interface,
        now: Instant,
        budget: usize,
        mut deliver: impl FnMut(&mut C, &Upper<'_>) -> Delivery,
        mut raw: impl FnMut(&mut C, &[u8], super::stack::RawRx),
    ) -> usize {
        let refused = net(owner).backend.rx_dropped();
        let mut n = 0;
        while n < budget {
            let Some((packet, len, looped)) = net(owner).next_packet() else {
                break;
            };
            n += 1;
            let up = if looped {
                net(owner).stack.receive_looped(&packet[..len], now)
            } else {
                net(owner).stack.receive_upper(&packet[..len], now)
            };
            if let Some(u) = up {
                let d = deliver(owner, &u);
                net(owner).stack.delivered(&u, d, now);
            }
            if !looped {
                let rx = net(owner).stack.raw_rx();
                if rx.give {
                    raw(owner, &packet[..len], rx);
                }
                net(owner).buf = packet; // the receive buffer, for the next frame
            }
        }
        let i = net(owner);
        // Frames the backend refused count as malformed, like those the stack refuses.
        for _ in refused..i.backend.rx_dropped() {
            i.stack
                .stats_mut()
                .drop(super::stats::DropReason::Malformed);
        }
        i.flush();
        n
    }

    /// The next packet for the device, and whether it is one it sent itself: from the
    /// loopback, else a frame from the link (in the interface's receive buffer, which the
    /// caller gives back). The packet is the buffer's first `len` bytes.
    fn next_packet(&mut self) -> Option<(Vec<u8>, usize, bool)> {
        if let Some(p) = self.stack.pop_loopback() {
            let len = p.len();
            return Some((p, len, true));
        }
        let mut buf = std::mem::take(&mut self.buf);
        let received = {
            let _stage = crate::stages::span(crate::stages::Stage::Receive);
            self.backend.recv_owned(&mut buf)
        };
        match received {
            Ok(Some(len)) => Some((buf, len, false)),
            Ok(None) => {
                self.buf = buf;
                None
            }
            Err(e) => {
                self.buf = buf;
                log::warn!("{}: receive failed: {e}", self.backend.describe());
                None
            }
        }
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
        [self.stack.next_deadline(), self.backend.next_deadline()]
            .into_iter()
            .flatten()
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::memory;
    use crate::net::config::NetConfig;

    fn frames(far: &mut memory::MemoryLink) -> usize {
        let mut buf = vec![0u8; MAX_FRAME];
        let mut n = 0;
        while far.recv(&mut buf).unwrap().is_some() {
            n += 1;
        }
        n
    }

    /// While the link is down the stack's frames are dropped and counted, not held: none
    /// of them goes out once it is back; what the stack sends then does.
    #[test]
    fn frames_are_dropped_while_the_link_is_down() {
        let (near, mut far) = memory::pair().unwrap();
        let plug = near.plug();
        plug.set_up(false);
        let mut c = NetConfig::new([2, 0, 0, 0, 0, 1]);
        c.seed = Some(1);
        let mut i = Interface::new(Stack::new(&c, Instant::now()), Box::new(near));
        assert!(!i.link_up());
        let dropped = i.stack.stats().tx_link_down;
        assert!(dropped > 0, "the link-local address's probe, dropped");
        assert_eq!(frames(&mut far), 0);

        plug.set_up(true);
        assert_eq!(i.check_link(), Some(true));
        assert_eq!(i.check_link(), None, "a change is reported once");
        i.flush();
        assert_eq!(frames(&mut far), 0, "nothing was held for the link");
        i.stack.set_addresses(&[("fd00::1".parse().unwrap(), 64)]);
        i.flush();
        assert!(frames(&mut far) > 0, "the new address's probe goes out");
        assert_eq!(i.stack.stats().tx_link_down, dropped);
        assert_eq!(i.stack.stats().tx_errors, 0);
    }
}
