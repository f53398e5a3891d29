//! Stress cases of one adapter (`./qpip stress`): long or large runs, bounded in time and
//! stopping by themselves, each printing one result line (`stress: ...`; docs/testing.md).
//! They are `#[ignore]`d so that `./qpip test` does not run them; `./qpip stress` runs them
//! in a release build, one at a time.
//!
//! The process counts its live heap bytes (a counting allocator around the system's), so
//! the device's memory per connection is measured, not estimated: the adapter runs in this
//! process, and the test's own bookkeeping per QP is a few small vectors (said beside the
//! figure).

// The adapter in this process, and namespaces for the cases against Linux sockets.
#[path = "../support/adapter_fixture.rs"]
mod fixture;
#[path = "../support/netns.rs"]
mod netns;

mod abuse;
mod echo_server;
mod held_connections;
mod many_qps;
mod syn_flood;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, Ordering};

use qpip_testkit::DB_QP_SLOTS;

/// The system allocator, counting the bytes live.
struct Counting;

static LIVE: AtomicI64 = AtomicI64::new(0);

// SAFETY: every call is passed to the system allocator unchanged; only a counter is kept
// beside it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as i64, Ordering::Relaxed);
        // SAFETY: the caller's layout, as GlobalAlloc::alloc requires.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as i64, Ordering::Relaxed);
        // SAFETY: `p` came from System with layout `l`.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as i64, Ordering::Relaxed);
        // SAFETY: as alloc.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as i64 - l.size() as i64, Ordering::Relaxed);
        // SAFETY: `p` came from System with layout `l`; `new` as the caller gives it.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// The bytes live on the heap of this process now.
fn live() -> i64 {
    LIVE.load(Ordering::Relaxed)
}

/// QPs per context: the doorbell page's slots.
const PER_CTX: usize = DB_QP_SLOTS as usize;
