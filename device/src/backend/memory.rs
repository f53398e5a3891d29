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
}

/// Two endpoints joined to each other.
pub fn pair() -> io::Result<(MemoryLink, MemoryLink)> {
    let (x, y) = (Queue::new()?, Queue::new()?);
    Ok((
        MemoryLink {
            rx: x.clone(),
            tx: y.clone(),
            name: "memory:a".into(),
        },
        MemoryLink {
            rx: y,
            tx: x,
            name: "memory:b".into(),
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
