//! MSI-X interrupt delivery. QEMU emulates the MSI-X table itself and hands the device one
//! eventfd per vector (VFIO_DEVICE_SET_IRQS); raising a vector is writing 1 to its eventfd.
//!
//! Shared between the control thread (which installs eventfds) and the engine thread (which
//! raises vectors): raising takes a read lock only, so the engine never waits for anything
//! but a concurrent SET_IRQS, which is rare and short.

use std::fs::File;
use std::io::{self, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;

use log::{debug, warn};

pub struct Interrupts {
    vectors: RwLock<Vec<Option<File>>>,
    count: usize,
    raised: AtomicU64,
    dropped: AtomicU64,
}

impl Interrupts {
    pub fn new(count: usize) -> Self {
        Interrupts {
            vectors: RwLock::new((0..count).map(|_| None).collect()),
            count,
            raised: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        }
    }

    pub fn count(&self) -> usize {
        self.count
    }

    /// Installs eventfds for vectors `start..start + fds.len()` (trigger action with eventfd
    /// data). Out-of-range vectors are refused as a whole.
    pub fn set(&self, start: u32, fds: Vec<File>) -> io::Result<()> {
        let start = start as usize;
        let end = start
            .checked_add(fds.len())
            .filter(|&e| e <= self.count)
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "MSI-X vectors {start}+{} exceed the {} vectors",
                        fds.len(),
                        self.count
                    ),
                )
            })?;
        let mut vectors = self.vectors.write().unwrap_or_else(|e| e.into_inner());
        for (slot, fd) in vectors[start..end].iter_mut().zip(fds) {
            *slot = Some(fd);
        }
        debug!("MSI-X eventfds set for vectors {start}..{end}");
        Ok(())
    }

    /// Removes the eventfds of `start..start + count` (count 0 means all, as in VFIO).
    pub fn clear(&self, start: u32, count: u32) {
        let (start, count) = (start as usize, count as usize);
        let mut vectors = self.vectors.write().unwrap_or_else(|e| e.into_inner());
        if count == 0 {
            vectors.iter_mut().for_each(|v| *v = None);
        } else {
            vectors
                .iter_mut()
                .skip(start)
                .take(count)
                .for_each(|v| *v = None);
        }
    }

    /// Signals `vector`. Returns whether an interrupt was actually delivered; a vector
    /// without an eventfd (the guest has not enabled it) is counted as dropped.
    pub fn raise(&self, vector: usize) -> bool {
        let vectors = self.vectors.read().unwrap_or_else(|e| e.into_inner());
        match vectors.get(vector).and_then(|v| v.as_ref()) {
            Some(mut fd) => match fd.write_all(&1u64.to_ne_bytes()) {
                Ok(()) => {
                    self.raised.fetch_add(1, Ordering::Relaxed);
                    true
                }
                Err(e) => {
                    warn!("MSI-X vector {vector}: eventfd write failed: {e}");
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                    false
                }
            },
            None => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    pub fn raised(&self) -> u64 {
        self.raised.load(Ordering::Relaxed)
    }

    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::FromRawFd;

    fn eventfd() -> File {
        // SAFETY: plain eventfd creation; the fd is owned by the File.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        assert!(fd >= 0);
        unsafe { File::from_raw_fd(fd) }
    }

    #[test]
    fn raise_writes_the_vectors_eventfd() {
        let irqs = Interrupts::new(4);
        let fd = eventfd();
        irqs.set(2, vec![fd.try_clone().unwrap()]).unwrap();
        assert!(irqs.raise(2));
        assert!(irqs.raise(2));
        let mut v = [0u8; 8];
        (&fd).read_exact(&mut v).unwrap();
        assert_eq!(u64::from_ne_bytes(v), 2);
        assert!(!irqs.raise(1), "no eventfd");
        assert!(!irqs.raise(99), "no such vector");
        assert_eq!((irqs.raised(), irqs.dropped()), (2, 2));
        irqs.clear(0, 0);
        assert!(!irqs.raise(2));
    }

    #[test]
    fn out_of_range_set_is_refused() {
        let irqs = Interrupts::new(2);
        assert!(irqs.set(1, vec![eventfd(), eventfd()]).is_err());
        assert!(irqs.set(u32::MAX, vec![eventfd()]).is_err());
    }
}
