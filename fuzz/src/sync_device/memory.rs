//! Guest RAM as the harness sees it, and the checks that the device wrote only what it may.

use qpip_testkit::Ram;
use zerocopy::{FromBytes, Immutable, IntoBytes};

use super::*;

impl SyncDevice {
    /// Size of guest RAM in bytes (it starts at [`RAM_BASE`]).
    pub fn ram_size(&self) -> u64 {
        self.e.ram.size()
    }

    /// Guest RAM as the harness sees it. The engine may write it only while the harness
    /// calls into it (everything runs on this thread), so no access races with the device.
    pub fn ram(&self) -> &[u8] {
        let size = self.ram_size() as usize;
        // SAFETY: the whole mapping (Ram::ptr checks), which lives as long as self; the
        // engine writes it only inside run(), which cannot run while this borrow lives.
        unsafe { std::slice::from_raw_parts(self.e.ram.ptr(RAM_BASE, size), size) }
    }

    /// Writes guest RAM as the guest would, and the shadow with it (the harness's writes
    /// are not the device's).
    pub fn write(&mut self, gpa: u64, data: &[u8]) {
        self.e.ram.write(gpa, data);
        let at = (gpa - RAM_BASE) as usize;
        self.shadow[at..at + data.len()].copy_from_slice(data);
    }

    /// Asserts the device wrote guest RAM only inside `writable` and the doorbell pages it
    /// may write (see [`SyncDevice`]) since the last check. Returns the pages (their
    /// guest-physical addresses) the device wrote since then, for checks of what it wrote.
    pub fn check_writes(&mut self, writable: &Writable) -> Vec<u64> {
        let page = |p: u64| (p, p.saturating_add(PAGE));
        // Into buffers kept from check to check (this runs after every engine run).
        let mut w = std::mem::take(&mut self.w_buf);
        w.0.clear();
        w.0.extend_from_slice(&writable.0);
        w.0.extend(self.live_pages.values().map(|&p| page(p)));
        w.0.extend(self.was_live.drain().map(page));
        if self.hostile {
            w.0.extend(self.named_pages.iter().map(|&p| page(p)));
        }
        let mut provisional = std::mem::take(&mut self.provisional_buf);
        provisional.clear();
        provisional.extend(
            self.outstanding
                .values()
                .chain(self.forgotten.values())
                .filter_map(create_ctx_page)
                .map(page),
        );
        // Pages past those handed out are compared from the first check that lets the
        // device write them on.
        let handed_out = ((self.e.ram.next_free() - RAM_BASE) / PAGE) as usize;
        let handed_out_end = RAM_BASE + handed_out as u64 * PAGE;
        for &(s, e) in w.0.iter().chain(&provisional) {
            if e <= handed_out_end {
                continue; // compared anyway
            }
            let first = (s.max(handed_out_end) - RAM_BASE) / PAGE;
            let end = (e.min(RAM_BASE + self.ram_size()).saturating_sub(RAM_BASE)).div_ceil(PAGE);
            for p in first..end {
                if !self.tracked[p as usize] {
                    self.tracked[p as usize] = true;
                    self.compare_pages.clear();
                }
            }
        }
        // The pages to compare change only with pages handed out, tracked or sealed.
        if self.compare_pages.is_empty() || self.compared_up_to != handed_out {
            self.compared_up_to = handed_out;
            self.compare_pages = (0..self.tracked.len())
                .filter(|&p| (p < handed_out || self.tracked[p]) && !self.sealed[p])
                .collect();
        }
        let mut shadow = std::mem::take(&mut self.shadow);
        let changed = w.check(self.ram(), &mut shadow, &provisional, &self.compare_pages);
        self.shadow = shadow;
        self.w_buf = w;
        self.provisional_buf = provisional;
        changed
    }

    /// Seals the pages holding `len` bytes at `gpa`: the device must never write them for
    /// the rest of this device's life, or until [`Self::unseal`] (rings, page lists, regions
    /// no write right reaches — pages a target knows no command names as anything else).
    /// They become read-only in the engine's mapping before the engine next runs (so a
    /// write is a fault, with the device's code on the stack) and [`Self::check_writes`] no
    /// longer compares them: most of a data-path target's pages are such, and comparing
    /// them after every run is much of its time.
    pub fn seal(&mut self, gpa: u64, len: u64) {
        self.set_sealed(gpa, len, true);
    }

    /// Lets the device write the pages holding `len` bytes at `gpa` again (a target that
    /// seals pages until a command names them): [`Self::check_writes`] compares them from
    /// here on. They equal the shadow: the device could not write them while sealed.
    pub fn unseal(&mut self, gpa: u64, len: u64) {
        self.set_sealed(gpa, len, false);
    }

    fn set_sealed(&mut self, gpa: u64, len: u64, seal: bool) {
        if len == 0 {
            return;
        }
        let first = (gpa - RAM_BASE) / PAGE;
        let end = (gpa + len - RAM_BASE).div_ceil(PAGE);
        assert!(end <= self.sealed.len() as u64, "sealing pages outside RAM");
        for p in first..end {
            if self.sealed[p as usize] != seal {
                self.sealed[p as usize] = seal;
                self.seals_pending = true;
                self.compare_pages.clear();
            }
        }
    }

    /// Makes the engine's mapping read-only exactly where pages are sealed, before the
    /// engine runs: each run of pages to seal (or to unseal) that holds a page to change is
    /// one `mprotect`.
    pub(super) fn apply_seals(&mut self) {
        if !std::mem::take(&mut self.seals_pending) {
            return;
        }
        let n = self.sealed.len();
        let mut p = 0;
        while p < n {
            let want = self.sealed[p];
            let end = (p..n).find(|&q| self.sealed[q] != want).unwrap_or(n);
            if self.mapped_ro[p..end].iter().any(|&ro| ro != want) {
                self.protect(p as u64, end as u64, want);
            }
            p = end;
        }
    }

    /// Makes pages `first..end` read-only in the engine's mapping, or writable again.
    pub(super) fn protect(&mut self, first: u64, end: u64, read_only: bool) {
        use vm_memory::{GuestAddress, GuestAddressSpace, GuestMemoryBackend};
        let mem = self.e.mapping().memory();
        let host = mem
            .memory()
            .get_host_address(GuestAddress(RAM_BASE + first * PAGE))
            .expect("sealed pages are in the engine's mapping");
        let prot = if read_only {
            libc::PROT_READ
        } else {
            libc::PROT_READ | libc::PROT_WRITE
        };
        // SAFETY: whole pages of the engine's mapping (inside RAM: `sealed` has a flag for
        // every page), which lives as long as the pool keeps it; only their protection
        // changes.
        let r = unsafe { libc::mprotect(host.cast(), ((end - first) * PAGE) as usize, prot) };
        assert_eq!(r, 0, "mprotect: {}", std::io::Error::last_os_error());
        self.mapped_ro[first as usize..end as usize].fill(read_only);
    }

    /// Checks the pages [`Self::check_writes`] leaves out (never handed out, never
    /// writable): the device wrote none of them.
    pub(super) fn check_untracked(&self) {
        let handed_out = ((self.e.ram.next_free() - RAM_BASE) / PAGE) as usize;
        let page = PAGE as usize;
        let now = self.ram();
        for p in handed_out..self.tracked.len() {
            let at = p * page;
            if !self.tracked[p] && now[at..at + page] != self.shadow[at..at + page] {
                let i = (0..page)
                    .find(|&i| now[at + i] != self.shadow[at + i])
                    .expect("a difference");
                panic!(
                    "the device wrote guest RAM it had no right to write (a page never handed \
                     out): byte {:#x} ({:#04x} -> {:#04x})",
                    RAM_BASE + (at + i) as u64,
                    self.shadow[at + i],
                    now[at + i]
                );
            }
        }
    }

    pub fn read(&self, gpa: u64, len: usize) -> Vec<u8> {
        self.e.ram.read(gpa, len)
    }

    pub fn write_obj<T: IntoBytes + Immutable>(&mut self, gpa: u64, v: &T) {
        self.write(gpa, v.as_bytes());
    }

    pub fn read_obj<T: FromBytes>(&self, gpa: u64) -> T {
        self.e.ram.read_obj(gpa)
    }

    /// `n` fresh zeroed pages, contiguous; their guest-physical address.
    pub fn alloc_pages(&mut self, n: u64) -> u64 {
        self.e.ram.alloc_pages(n)
    }

    /// Writes a page list for `pages` and returns its address (through [`Self::write`], so
    /// the shadow knows it).
    pub fn page_list(&mut self, pages: &[u64]) -> u64 {
        let at = self.alloc_pages(Ram::page_list_pages(pages.len()));
        self.write(at, pages.as_bytes());
        at
    }
}

/// Byte ranges (guest-physical, half-open) the device may write.
#[derive(Default, Clone)]
pub struct Writable(pub Vec<(u64, u64)>);

impl Writable {
    pub fn add(&mut self, start: u64, len: u64) {
        self.0.push((start, start.saturating_add(len)));
    }

    /// Asserts that RAM (`now`) differs from `shadow` only inside the writable ranges or the
    /// `provisional` ones, then brings `shadow` up to date, except for bytes that changed only
    /// inside a provisional range: those are judged again at the next check (by then the
    /// range is writable, or the change is caught). Looks only at `pages` (indices).
    /// Returns the pages that changed.
    fn check(
        &self,
        now: &[u8],
        shadow: &mut [u8],
        provisional: &[(u64, u64)],
        pages: &[usize],
    ) -> Vec<u64> {
        let mut changed = Vec::new();
        let inside =
            |ranges: &[(u64, u64)], gpa: u64| ranges.iter().any(|&(s, e)| gpa >= s && gpa < e);
        // Page by page: almost every page is unchanged, and slice equality is fast.
        let page = PAGE as usize;
        for &p in pages {
            let np = &now[p * page..(p + 1) * page];
            let sp = &mut shadow[p * page..(p + 1) * page];
            if np == sp {
                continue;
            }
            // Whole pages first: doorbell pages are written (zeroed) whole.
            let start = RAM_BASE + (p * page) as u64;
            changed.push(start);
            let end = start + np.len() as u64;
            let covers = |&(s, e): &(u64, u64)| s <= start && end <= e;
            if self.0.iter().any(covers) {
                sp.copy_from_slice(np);
                continue;
            }
            if provisional.iter().any(covers) {
                // A wholly provisional page: its changes wait for the next check (unless
                // part of the page is writable as well).
                let overlaps = |&(s, e): &(u64, u64)| s < end && start < e;
                if !self.0.iter().any(overlaps) {
                    continue;
                }
            }
            // Then 64-byte lines (a line inside one writable range is taken whole: most
            // changed lines are in a region or a ring), and bytes only in the lines left.
            for (l, (nl, sl)) in np.chunks(64).zip(sp.chunks_mut(64)).enumerate() {
                if nl == sl {
                    continue;
                }
                let line_start = start + (l * 64) as u64;
                if self
                    .0
                    .iter()
                    .any(|&(s, e)| s <= line_start && line_start + 64 <= e)
                {
                    sl.copy_from_slice(nl);
                    continue;
                }
                for (j, (a, b)) in nl.iter().zip(sl.iter_mut()).enumerate() {
                    if a == b {
                        continue;
                    }
                    let at = p * page + l * 64 + j;
                    let gpa = RAM_BASE + at as u64;
                    if inside(&self.0, gpa) {
                        *b = *a;
                    } else if !inside(provisional, gpa) {
                        let line = at & !63;
                        panic!(
                            "the device wrote guest RAM it had no right to write: byte {gpa:#x} \
                             ({b:#04x} -> {a:#04x}); the 64 bytes at {:#x} now: {:02x?}",
                            RAM_BASE + line as u64,
                            &now[line..line + 64]
                        );
                    }
                }
            }
        }
        changed
    }
}
