//! File mappings as registered buffers.
//!
//! `Context::register` takes over a `Vec<u8>` and gives its memory back to the global
//! allocator once the last work request naming the region has completed. To register a
//! file mapping, the program's allocator (the system's otherwise) hands the mapping out as
//! the one allocation a `Vec` asks for right then on this thread, remembers it, and unmaps
//! it when it is given back, instead of freeing it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

struct CatAlloc;

#[global_allocator]
static ALLOC: CatAlloc = CatAlloc;

/// Live file mappings handed out: address and length (0 for a free entry).
const MAPS: usize = 8;
static MAP_ADDR: [AtomicUsize; MAPS] = [const { AtomicUsize::new(0) }; MAPS];
static MAP_LEN: [AtomicUsize; MAPS] = [const { AtomicUsize::new(0) }; MAPS];

thread_local! {
    /// A mapping and its length that this thread's next allocation of exactly that many
    /// bytes (alignment 1) returns.
    static ADOPT: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
}

/// The entry of the live mapping at `p`, if it is one.
fn mapping_at(p: *mut u8) -> Option<usize> {
    (0..MAPS).find(|&i| MAP_ADDR[i].load(Ordering::Acquire) == p as usize)
}

/// The mapping of `len` bytes at `p` as a `Vec` that owns it (None when too many are live;
/// the mapping is then unmapped).
///
/// # Safety
/// `p` must be a mapping of `len` bytes (readable) that nothing else refers to.
pub(crate) unsafe fn adopt_mapping(p: *mut u8, len: usize) -> Option<Vec<u8>> {
    let Some(i) = (0..MAPS).find(|&i| {
        MAP_ADDR[i]
            .compare_exchange(0, p as usize, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }) else {
        // SAFETY: the caller's mapping, referred to by nothing.
        unsafe { libc::munmap(p.cast(), len) };
        return None;
    };
    MAP_LEN[i].store(len, Ordering::Release);
    ADOPT.with(|a| a.set((p as usize, len)));
    let mut v = Vec::<u8>::with_capacity(len);
    let taken = ADOPT.with(|a| a.replace((0, 0))).0 == 0;
    if !taken || v.as_ptr() != p.cast_const() || v.capacity() != len {
        // Not the mapping (an allocator that asked otherwise): dropping `v` gives back
        // whatever it holds, the mapping included.
        drop(v);
        if !taken {
            // SAFETY: the caller's mapping, never handed out.
            unsafe { libc::munmap(p.cast(), len) };
            MAP_ADDR[i].store(0, Ordering::Release);
        }
        return None;
    }
    // SAFETY: the mapping's bytes are the file's, all readable and initialised.
    unsafe { v.set_len(len) };
    Some(v)
}

// SAFETY: every block comes from `System` and goes back to it, except the mappings
// `adopt_mapping` hands out (each to one allocation of exactly its size and alignment 1),
// which are unmapped when given back and copied out when grown.
unsafe impl GlobalAlloc for CatAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.align() == 1 {
            let adopted = ADOPT
                .try_with(|a| {
                    let (p, len) = a.get();
                    (p != 0 && len == layout.size()).then(|| {
                        a.set((0, 0));
                        p as *mut u8
                    })
                })
                .ok()
                .flatten();
            if let Some(p) = adopted {
                return p;
            }
        }
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        match mapping_at(p) {
            Some(i) => {
                let len = MAP_LEN[i].load(Ordering::Acquire);
                // SAFETY: the mapping handed out for this block, now given back.
                unsafe { libc::munmap(p.cast(), len) };
                MAP_ADDR[i].store(0, Ordering::Release);
            }
            // SAFETY: a block System allocated, with the caller's guarantees.
            None => unsafe { System.dealloc(p, layout) },
        }
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if mapping_at(p).is_none() {
            // SAFETY: a block System allocated, with the caller's guarantees.
            return unsafe { System.realloc(p, layout, new_size) };
        }
        // SAFETY: the caller guarantees new_size forms a valid layout with this alignment.
        let new = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: a fresh block from System; the mapping stays valid until unmapped below.
        unsafe {
            let q = System.alloc(new);
            if !q.is_null() {
                std::ptr::copy_nonoverlapping(p, q, layout.size().min(new_size));
                self.dealloc(p, layout);
            }
            q
        }
    }
}
