//! An in-process link between two endpoints, for tests: two bounded frame queues, each
//! with an eventfd that is readable while its queue holds frames.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
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
        },
        MemoryLink {
            rx: y,
            tx: x,
            name: "memory:b".into(),
            gso,
        },
    ))
}

impl Backend for MemoryLink {
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        let mut q = self.tx.frames.lock().expect("not poisoned");
        if q.len() >= QUEUE_LIMIT {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        q.push_back(frame.to_vec());
        if q.len() == 1 {
            self.tx.ready.write(1)?;
        }
        Ok(())
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
        let mut q = self.rx.frames.lock().expect("not poisoned");
        let Some(f) = q.pop_front() else {
            return Ok(None);
        };
        if q.is_empty() {
            let _ = self.rx.ready.read();
        }
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
}
