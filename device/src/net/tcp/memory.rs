//! What TCP may hold of data its applications have not taken yet — bytes staged ahead of
//! posted receive space and bytes that arrived out of order — bounded for a function and
//! for the whole adapter, as Linux's `tcp_mem` bounds the host's sockets. Each connection
//! is bounded by itself too (`Config::staging`, `Config::ooo_limit`); the pools bound what
//! many connections hold together.
//!
//! Under pressure a connection takes no new bytes it would have to hold: a segment that
//! would be staged or buffered out of order is dropped and counted (the peer sends it again
//! when there is room), nothing already held is given up, and bytes the receive sink takes
//! directly never count.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// A budget of bytes shared by connections, within its parent's, if it has one (a
/// function's pool within the adapter's).
#[derive(Debug)]
pub struct MemoryPool {
    limit: usize,
    used: AtomicUsize,
    /// Bytes refused for want of room.
    refused: AtomicU64,
    parent: Option<Arc<MemoryPool>>,
}

impl MemoryPool {
    pub fn new(limit: usize, parent: Option<Arc<MemoryPool>>) -> Arc<MemoryPool> {
        Arc::new(MemoryPool {
            limit,
            used: AtomicUsize::new(0),
            refused: AtomicU64::new(0),
            parent,
        })
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes held now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// Bytes refused so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Takes `n` bytes from this pool and its parents, or nothing (false, counted).
    pub fn try_take(&self, n: usize) -> bool {
        if n == 0 {
            return true;
        }
        let mut cur = self.used.load(Ordering::Relaxed);
        loop {
            let Some(next) = cur.checked_add(n).filter(|&u| u <= self.limit) else {
                self.refused.fetch_add(n as u64, Ordering::Relaxed);
                return false;
            };
            match self
                .used
                .compare_exchange_weak(cur, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(now) => cur = now,
            }
        }
        if let Some(p) = &self.parent {
            if !p.try_take(n) {
                self.used.fetch_sub(n, Ordering::Relaxed);
                self.refused.fetch_add(n as u64, Ordering::Relaxed);
                return false;
            }
        }
        true
    }

    /// Gives back `n` bytes taken before.
    pub fn give(&self, n: usize) {
        if n == 0 {
            return;
        }
        let before = self.used.fetch_sub(n, Ordering::Relaxed);
        debug_assert!(before >= n, "gave back more than was taken");
        if let Some(p) = &self.parent {
            p.give(n);
        }
    }
}

/// What one connection holds of a pool: taken before its buffers grow, given back as
/// they shrink and when it goes.
#[derive(Debug, Default)]
pub struct Charge {
    pool: Option<Arc<MemoryPool>>,
    held: usize,
}

impl Charge {
    pub fn new(pool: Option<Arc<MemoryPool>>) -> Charge {
        Charge { pool, held: 0 }
    }

    /// Bytes charged now.
    pub fn held(&self) -> usize {
        self.held
    }

    /// Whether `n` more bytes may be held (and takes them if so).
    pub fn grow(&mut self, n: usize) -> bool {
        if self.pool.as_ref().is_none_or(|p| p.try_take(n)) {
            self.held += n;
            true
        } else {
            false
        }
    }

    /// `n` bytes are no longer held.
    pub fn shrink(&mut self, n: usize) {
        let n = n.min(self.held);
        self.held -= n;
        if let Some(p) = &self.pool {
            p.give(n);
        }
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        let n = self.held;
        self.shrink(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_refuses_beyond_its_limit_and_its_parents() {
        let adapter = MemoryPool::new(100, None);
        let a = MemoryPool::new(80, Some(adapter.clone()));
        let b = MemoryPool::new(80, Some(adapter.clone()));
        assert!(a.try_take(60));
        assert!(!a.try_take(30), "beyond the function's own limit");
        assert!(b.try_take(40));
        assert!(!b.try_take(1), "beyond the adapter's");
        assert_eq!((a.used(), b.used(), adapter.used()), (60, 40, 100));
        assert_eq!(b.refused(), 1);
        a.give(60);
        assert!(b.try_take(40));
        assert_eq!(adapter.used(), 80);
    }

    #[test]
    fn a_charge_gives_everything_back_when_it_goes() {
        let pool = MemoryPool::new(10, None);
        let mut c = Charge::new(Some(pool.clone()));
        assert!(c.grow(6));
        assert!(!c.grow(5));
        c.shrink(2);
        assert!(c.grow(5));
        assert_eq!(pool.used(), 9);
        drop(c);
        assert_eq!(pool.used(), 0);
    }
}
