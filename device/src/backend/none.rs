//! No link at all: the backend of a device without `--net`. Its stack reaches only the
//! device's own addresses (the loopback, [`crate::net::stack`]) and never sends a frame
//! here; one that came anyway would be dropped. Nothing arrives, and there is nothing to
//! sleep on (no fd: poll(2) skips a negative one). Its link is down
//! ([`Backend::link_up`]), as a NIC with no cable: a driver shows no carrier.

use std::io;
use std::os::fd::RawFd;

use super::Backend;

pub struct NoLink;

impl Backend for NoLink {
    fn send(&mut self, _frame: &[u8]) -> io::Result<()> {
        Ok(())
    }

    fn recv(&mut self, _buf: &mut [u8]) -> io::Result<Option<usize>> {
        Ok(None)
    }

    fn fd(&self) -> RawFd {
        -1
    }

    fn describe(&self) -> String {
        "no link (loopback only)".into()
    }

    fn link_up(&mut self) -> bool {
        false
    }
}
