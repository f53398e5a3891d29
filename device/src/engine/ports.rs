//! Which QP or listener holds each local port, and the ephemeral ports BIND hands out.
//!
//! UDP and TCP have ports of their own; a TCP port is held either by a bound QP or by a
//! listener, never both. Ports are per function: the address a QP binds to is the
//! function's, so a port names at most one QP whatever the address — except a UDP port that
//! QPs share (BIND_FLAG_SHARE_PORT: `Objects::bind_qp` decides who may join), held by
//! several QPs in the order they bound it.

use std::collections::HashMap;

use qpip_abi::admin::{ADMIN_STATUS_ADDR_IN_USE, ADMIN_STATUS_NO_RESOURCES};

/// The ephemeral port range (RFC 6335's dynamic ports).
pub const EPHEMERAL_FIRST: u16 = 49152;
pub const EPHEMERAL_LAST: u16 = 65535;

/// A QP's transport, as far as ports go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    Udp,
    Tcp,
}

/// The port tables of one function.
#[derive(Debug, Default)]
pub struct Ports {
    /// The QPs on each UDP port, first bound first (several only when shared).
    udp: HashMap<u16, Vec<u32>>,
    tcp: HashMap<u16, u32>,
    listen: HashMap<u16, u32>,
    /// Where the search for the next ephemeral port starts.
    next_ephemeral: u16,
}

impl Ports {
    /// Whether a QP of `proto` could not bind `port`: a QP holds it, or (TCP) a listener.
    pub fn taken(&self, proto: Proto, port: u16) -> bool {
        match proto {
            Proto::Udp => self.udp.contains_key(&port),
            Proto::Tcp => self.tcp.contains_key(&port) || self.listen.contains_key(&port),
        }
    }

    /// Binds QP `qp` to `port`, or to a free ephemeral port if `port` is 0, and returns
    /// the port. `busy_elsewhere` names ports held outside these tables (a destroyed QP's
    /// connection still closing): an ephemeral port is never one of those, as a new
    /// connection from it to the same peer would clash.
    ///
    /// Ephemeral ports are handed out round the range from the last one, so a port just
    /// let go (a connection reset a moment ago) is not the next one taken, and a new
    /// connection does not reuse the 4-tuple its peer, or a capture, may still associate
    /// with the old one.
    pub fn bind(
        &mut self,
        proto: Proto,
        port: u16,
        qp: u32,
        busy_elsewhere: impl Fn(u16) -> bool,
    ) -> Result<u16, u16> {
        let port = if port == 0 {
            let start = self.next_ephemeral.clamp(EPHEMERAL_FIRST, EPHEMERAL_LAST);
            let span = (EPHEMERAL_LAST - EPHEMERAL_FIRST) as u32 + 1;
            let p = (0..span)
                .map(|i| {
                    EPHEMERAL_FIRST + ((start - EPHEMERAL_FIRST) as u32 + i).rem_euclid(span) as u16
                })
                .find(|&p| !self.taken(proto, p) && !busy_elsewhere(p))
                .ok_or(ADMIN_STATUS_NO_RESOURCES)?;
            self.next_ephemeral = if p == EPHEMERAL_LAST {
                EPHEMERAL_FIRST
            } else {
                p + 1
            };
            p
        } else if self.taken(proto, port) {
            return Err(ADMIN_STATUS_ADDR_IN_USE);
        } else {
            port
        };
        match proto {
            Proto::Udp => self.udp.insert(port, vec![qp]),
            Proto::Tcp => self.tcp.insert(port, qp).map(|q| vec![q]),
        };
        Ok(port)
    }

    /// Adds QP `qp` to the QPs sharing UDP `port` (the caller checked it may).
    pub fn join_udp(&mut self, port: u16, qp: u32) {
        self.udp.entry(port).or_default().push(qp);
    }

    /// Lets go of QP `qp`'s port (a shared UDP port stays the others').
    pub fn release(&mut self, proto: Proto, port: u16, qp: u32) {
        match proto {
            Proto::Udp => {
                if let Some(qps) = self.udp.get_mut(&port) {
                    qps.retain(|&q| q != qp);
                    if qps.is_empty() {
                        self.udp.remove(&port);
                    }
                }
            }
            Proto::Tcp => {
                if self.tcp.get(&port) == Some(&qp) {
                    self.tcp.remove(&port);
                }
            }
        }
    }

    /// The QP bound to `port` (on a shared UDP port, the first bound).
    pub fn qp(&self, proto: Proto, port: u16) -> Option<u32> {
        match proto {
            Proto::Udp => self.udp.get(&port).and_then(|q| q.first()),
            Proto::Tcp => self.tcp.get(&port),
        }
        .copied()
    }

    /// The QPs on UDP `port`, first bound first.
    pub fn udp_qps(&self, port: u16) -> &[u32] {
        self.udp.get(&port).map_or(&[], Vec::as_slice)
    }

    /// Gives TCP `port` to listener `id`, unless a QP or listener holds it.
    pub fn listen(&mut self, port: u16, id: u32) -> Result<(), u16> {
        if self.taken(Proto::Tcp, port) {
            return Err(ADMIN_STATUS_ADDR_IN_USE);
        }
        self.listen.insert(port, id);
        Ok(())
    }

    pub fn unlisten(&mut self, port: u16) {
        self.listen.remove(&port);
    }

    /// The listener on TCP `port`.
    pub fn listener(&self, port: u16) -> Option<u32> {
        self.listen.get(&port).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FREE: fn(u16) -> bool = |_| false;

    #[test]
    fn a_named_port_is_had_once_per_protocol_and_a_listener_holds_its_tcp_port() {
        let mut p = Ports::default();
        assert_eq!(p.bind(Proto::Udp, 7, 1, FREE), Ok(7));
        assert_eq!(
            p.bind(Proto::Udp, 7, 2, FREE),
            Err(ADMIN_STATUS_ADDR_IN_USE)
        );
        assert_eq!(
            p.bind(Proto::Tcp, 7, 2, FREE),
            Ok(7),
            "TCP's ports are its own"
        );
        assert_eq!(p.listen(7, 9), Err(ADMIN_STATUS_ADDR_IN_USE));
        assert_eq!(p.listen(80, 9), Ok(()));
        assert_eq!(
            p.bind(Proto::Tcp, 80, 3, FREE),
            Err(ADMIN_STATUS_ADDR_IN_USE)
        );
        assert_eq!(
            (p.qp(Proto::Udp, 7), p.qp(Proto::Tcp, 7)),
            (Some(1), Some(2))
        );
        assert_eq!(p.listener(80), Some(9));
        p.release(Proto::Udp, 7, 1);
        p.unlisten(80);
        assert_eq!(p.bind(Proto::Udp, 7, 4, FREE), Ok(7));
        p.join_udp(7, 6);
        assert_eq!(p.udp_qps(7), &[4, 6]);
        p.release(Proto::Udp, 7, 4);
        assert_eq!(
            p.qp(Proto::Udp, 7),
            Some(6),
            "a shared port stays the others'"
        );
        p.release(Proto::Udp, 7, 6);
        assert!(!p.taken(Proto::Udp, 7));
        assert_eq!(p.bind(Proto::Tcp, 80, 5, FREE), Ok(80));
    }

    #[test]
    fn ephemeral_ports_go_round_the_range_and_skip_ports_busy_elsewhere() {
        let mut p = Ports::default();
        assert_eq!(p.bind(Proto::Tcp, 0, 1, FREE), Ok(EPHEMERAL_FIRST));
        p.release(Proto::Tcp, EPHEMERAL_FIRST, 1);
        assert_eq!(
            p.bind(Proto::Tcp, 0, 2, FREE),
            Ok(EPHEMERAL_FIRST + 1),
            "a port just let go is not the next one"
        );
        let closing = |port| port == EPHEMERAL_FIRST + 2;
        assert_eq!(p.bind(Proto::Tcp, 0, 3, closing), Ok(EPHEMERAL_FIRST + 3));
        p.next_ephemeral = EPHEMERAL_LAST;
        assert_eq!(p.bind(Proto::Udp, 0, 4, FREE), Ok(EPHEMERAL_LAST));
        assert_eq!(p.bind(Proto::Udp, 0, 5, FREE), Ok(EPHEMERAL_FIRST), "wraps");
    }

    #[test]
    fn a_full_range_refuses_with_no_resources() {
        let mut p = Ports::default();
        let span = (EPHEMERAL_LAST - EPHEMERAL_FIRST) as u32 + 1;
        for i in 0..span {
            assert!(p.bind(Proto::Udp, 0, i + 1, FREE).is_ok());
        }
        assert_eq!(
            p.bind(Proto::Udp, 0, 0, FREE),
            Err(ADMIN_STATUS_NO_RESOURCES)
        );
        assert_eq!(
            p.bind(Proto::Tcp, 0, 0, FREE),
            Ok(EPHEMERAL_FIRST),
            "TCP unaffected"
        );
    }
}
