//! An in-process link between two endpoints, for tests: two bounded frame queues, each
//! with an eventfd that is readable while its queue holds frames. Each endpoint's link is
//! up until a test pulls its [`Plug`]: then [`Backend::link_up`] says down and its sends
//! are refused (`NetworkDown`), as a TAP whose host side is down refuses them.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use super::Backend;

/// Frames a queue holds before `send` refuses more (a full ring).
pub const QUEUE_LIMIT: usize = 4096;

struct Queue {
    frames: Mutex<VecDeque<Vec<u8>>>,
    /// Signalled while `frames` is not empty. Written and cleared under the lock, so a
    /// wake-up cannot be lost between a push and a pop.
    ready: EventFd,
}

impl Queue {
    fn new() -> io::Result<Arc<Queue>> {
        Ok(Arc::new(Queue {
            frames: Mutex::new(VecDeque::new()),
            ready: EventFd::new(EFD_NONBLOCK)?,
        }))
    }
}

pub struct MemoryLink {
    rx: Arc<Queue>,
    tx: Arc<Queue>,
    name: String,
    gso: bool,
    plug: Plug,
}

/// A test's hold on one endpoint's link state ([`MemoryLink::plug`]).
#[derive(Clone, Debug)]
pub struct Plug(Arc<AtomicBool>);

impl Plug {
    fn new() -> Plug {
        Plug(Arc::new(AtomicBool::new(true)))
    }

    /// Takes the endpoint's link up (`true`) or down.
    pub fn set_up(&self, up: bool) {
        self.0.store(up, Ordering::Release);
    }

    pub fn is_up(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// Two endpoints joined to each other; every frame is at most the MTU.
pub fn pair() -> io::Result<(MemoryLink, MemoryLink)> {
    pair_with(false)
}

/// Two endpoints joined to each other that carry TCP super-frames whole (as a veth pair
/// between two namespaces does, or virtio-net with TSO and GRO at both ends): a
/// connection over it sends up to 64 KiB in one frame, which the other end takes as one
/// large segment.
pub fn pair_gso() -> io::Result<(MemoryLink, MemoryLink)> {
    pair_with(true)
}

fn pair_with(gso: bool) -> io::Result<(MemoryLink, MemoryLink)> {
    let (x, y) = (Queue::new()?, Queue::new()?);
    Ok((
        MemoryLink {
            rx: x.clone(),
            tx: y.clone(),
            name: "memory:a".into(),
            gso,
            plug: Plug::new(),
        },
        MemoryLink {
            rx: y,
            tx: x,
            name: "memory:b".into(),
            gso,
            plug: Plug::new(),
        },
    ))
}

impl MemoryLink {
    /// The hold on this endpoint's link state, for a test to take it down and up.
    pub fn plug(&self) -> Plug {
        self.plug.clone()
    }

    fn push(&mut self, frame: Vec<u8>) -> io::Result<()> {
        if !self.plug.is_up() {
            return Err(io::ErrorKind::NetworkDown.into());
        }
        let mut q = self.tx.frames.lock().expect("not poisoned");
        if q.len() >= QUEUE_LIMIT {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        q.push_back(frame);
        if q.len() == 1 {
            self.tx.ready.write(1)?;
        }
        Ok(())
    }

    fn pop(&mut self) -> Option<Vec<u8>> {
        let mut q = self.rx.frames.lock().expect("not poisoned");
        let f = q.pop_front()?;
        if q.is_empty() {
            let _ = self.rx.ready.read();
        }
        Some(f)
    }
}

impl Backend for MemoryLink {
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        self.push(frame.to_vec())
    }

    /// The frame's buffer itself goes into the queue.
    fn send_owned(&mut self, frame: Vec<u8>, gso: u16) -> io::Result<()> {
        if gso != 0 && !self.gso {
            return super::send_segments(self, &frame, gso);
        }
        self.push(frame)
    }

    /// The frame's buffer itself comes out of the queue.
    fn recv_owned(&mut self, buf: &mut Vec<u8>) -> io::Result<Option<usize>> {
        Ok(self.pop().map(|f| {
            *buf = f;
            buf.len()
        }))
    }

    fn gso(&self) -> bool {
        self.gso
    }

    fn send_gso(&mut self, frame: &[u8], mss: u16) -> io::Result<()> {
        if self.gso {
            return self.send(frame);
        }
        super::send_segments(self, frame, mss)
    }

    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        let Some(f) = self.pop() else {
            return Ok(None);
        };
        let n = f.len().min(buf.len());
        buf[..n].copy_from_slice(&f[..n]);
        Ok(Some(n))
    }

    fn fd(&self) -> RawFd {
        self.rx.ready.as_raw_fd()
    }

    fn describe(&self) -> String {
        self.name.clone()
    }

    fn link_up(&mut self) -> bool {
        self.plug.is_up()
    }

    fn link_watched(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A frame given up to one end comes out of the other in the same buffer, uncopied,
    /// and a super-frame on a link without offloads comes out as its segments.
    #[test]
    fn owned_frames_cross_uncopied() {
        let (mut a, mut b) = pair_gso().unwrap();
        let frame = vec![7u8; 3000];
        let at = frame.as_ptr();
        a.send_owned(frame, 0).unwrap();
        let mut buf = Vec::new();
        assert_eq!(b.recv_owned(&mut buf).unwrap(), Some(3000));
        assert_eq!(buf.as_ptr(), at);
        assert_eq!(b.recv_owned(&mut buf).unwrap(), None);
        // The plain recv copies into any buffer.
        a.send(&[1, 2, 3]).unwrap();
        let mut small = [0u8; 8];
        assert_eq!(b.recv(&mut small).unwrap(), Some(3));
    }

    /// A pulled plug takes the endpoint's link down and refuses its sends, until put back.
    #[test]
    fn a_pulled_plug_takes_the_link_down() {
        let (mut a, mut b) = pair().unwrap();
        assert!(a.link_up());
        a.plug().set_up(false);
        assert!(!a.link_up() && b.link_up());
        let e = a.send(&[1, 2, 3]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NetworkDown);
        assert_eq!(b.recv(&mut [0u8; 8]).unwrap(), None);
        a.plug().set_up(true);
        a.send(&[1, 2, 3]).unwrap();
        assert_eq!(b.recv(&mut [0u8; 8]).unwrap(), Some(3));
    }
}
