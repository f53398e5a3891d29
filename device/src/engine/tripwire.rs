//! Tripwires (as in CLAN's): an event when data placed by the network touches a chosen
//! range of registered memory while the tripwire is armed. The owner arms one by changing
//! its arm word — a u32 in a region of its own, so arming is a store, no system call —
//! and the device fires it once per arm: one completion on its CQ (`CQE_OP_TRIPWIRE`).
//!
//! The watched range and the arm word are translated to guest-physical spans when the
//! tripwire is created; their regions cannot be deregistered while it lives (`BUSY`), so
//! the spans stay theirs. A placement path reports what it wrote as spans
//! ([`hits`]); the engine then reads each touched tripwire's arm word and fires those
//! armed ([`Engine::fire_tripwires`]).

use std::collections::HashMap;

use qpip_abi::admin::*;
use qpip_abi::cqe::CQE_OP_TRIPWIRE;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use super::completion::cqe_ok;
use super::memory::Span;
use super::Engine;

/// A tripwire: where it watches, where its arm word is, where its events go. The tables
/// hold it (`objects`); only this unit looks inside.
#[derive(Debug, Clone)]
pub struct Tripwire {
    ctx: u32,
    lkey: u32,
    arm_lkey: u32,
    cq: u32,
    tag: u64,
    /// Virtual address of the watched range, and its guest-physical spans in order.
    va: u64,
    spans: Vec<Span>,
    /// Guest-physical address of the arm word.
    arm_gpa: u64,
    /// The arm word's value when the tripwire last fired (0 at creation).
    seen: u32,
}

impl Tripwire {
    /// Its context.
    #[inline]
    pub fn ctx(&self) -> u32 {
        self.ctx
    }

    /// The CQ its events go to.
    #[inline]
    pub fn cq(&self) -> u32 {
        self.cq
    }
}

/// What one placement did to one tripwire: the first virtual address it wrote in the
/// range, and how many bytes of the range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hit {
    pub tripwire: u32,
    pub va: u64,
    pub bytes: u32,
}

/// The tripwires of context `ctx` that a placement of `len` bytes at byte `off` of the
/// buffer `written` describes touches.
pub fn hits(
    tripwires: &HashMap<u32, Tripwire>,
    ctx: u32,
    written: &[Span],
    off: u64,
    len: usize,
) -> Vec<Hit> {
    let mut out = Vec::new();
    if len == 0 || tripwires.is_empty() {
        return out;
    }
    // The guest-physical pieces written.
    let mut pieces = Vec::new();
    let (mut skip, mut left) = (off, len as u64);
    for s in written {
        if left == 0 {
            break;
        }
        let n = s.len as u64;
        if skip >= n {
            skip -= n;
            continue;
        }
        let take = (n - skip).min(left);
        pieces.push((s.addr + skip, take));
        left -= take;
        skip = 0;
    }
    for (&id, t) in tripwires.iter().filter(|(_, t)| t.ctx == ctx) {
        let mut first: Option<u64> = None;
        let mut bytes = 0u64;
        let mut va = t.va;
        for ts in &t.spans {
            let (ts_start, ts_end) = (ts.addr, ts.addr + ts.len as u64);
            for &(p, n) in &pieces {
                let (s, e) = (p.max(ts_start), (p + n).min(ts_end));
                if s < e {
                    let at = va + (s - ts_start);
                    first = Some(first.map_or(at, |f| f.min(at)));
                    bytes += e - s;
                }
            }
            va += ts.len as u64;
        }
        if let Some(va) = first {
            out.push(Hit {
                tripwire: id,
                va,
                bytes: bytes.min(u32::MAX as u64) as u32,
            });
        }
    }
    out
}

impl Engine {
    /// CREATE_TRIPWIRE: both regions of `ctx`, the range inside its region, the arm word
    /// aligned inside its, the CQ of `ctx`.
    pub(super) fn create_tripwire(
        &mut self,
        ctx: u32,
        a: &CreateTripwireArgs,
    ) -> Result<(u64, u64, u32), u16> {
        if !self.objects.has_context(ctx) {
            return Err(ADMIN_STATUS_BAD_HANDLE);
        }
        if self.objects.tripwires().len() >= MAX_TRIPWIRES as usize {
            return Err(ADMIN_STATUS_NO_RESOURCES);
        }
        if a.len == 0 || !a.arm_addr.is_multiple_of(4) {
            return Err(ADMIN_STATUS_BAD_PARAM);
        }
        self.objects
            .cq_in(ctx, a.cq)
            .ok_or(ADMIN_STATUS_BAD_HANDLE)?;
        let region = |lkey: u32| {
            self.objects
                .mr(lkey)
                .filter(|m| m.ctx == ctx)
                .ok_or(ADMIN_STATUS_BAD_HANDLE)
        };
        let mut spans = Vec::new();
        region(a.lkey)?
            .translate(a.lkey, a.addr, a.len, &mut spans)
            .map_err(|_| ADMIN_STATUS_BAD_PARAM)?;
        let mut arm = Vec::new();
        region(a.arm_lkey)?
            .translate(a.arm_lkey, a.arm_addr, 4, &mut arm)
            .map_err(|_| ADMIN_STATUS_BAD_PARAM)?;
        let id = self.objects.insert_tripwire(Tripwire {
            ctx,
            lkey: a.lkey,
            arm_lkey: a.arm_lkey,
            cq: a.cq,
            tag: a.tag,
            va: a.addr,
            spans,
            arm_gpa: arm[0].addr,
            seen: 0,
        });
        Ok((id as u64, 0, 0))
    }

    /// Removes tripwire `id` (its CQ may go then).
    pub(super) fn remove_tripwire(&mut self, id: u32) {
        self.objects.remove_tripwire(id);
    }

    /// Whether a tripwire watches region `lkey` or keeps its arm word there.
    pub(super) fn region_tripwired(&self, lkey: u32) -> bool {
        self.objects
            .tripwires()
            .values()
            .any(|t| t.lkey == lkey || t.arm_lkey == lkey)
    }

    /// Fires the tripwires `hits` names that are armed: one event each, then disarmed.
    pub(super) fn fire_tripwires(&mut self, mem: &GuestMemoryMmap, hits: Vec<Hit>) {
        // The data was placed before the arm words are read, and the consumer arms before
        // it looks at the data (the library's store and full fence): with a full fence on
        // both sides, either the device sees the new arm word or the consumer sees the
        // data — an armed tripwire is never missed for data that landed meanwhile.
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        for h in hits {
            let Some(t) = self.objects.tripwire_mut(h.tripwire) else {
                continue;
            };
            let Ok(arm) = mem.read_obj::<u32>(GuestAddress(t.arm_gpa)) else {
                continue;
            };
            if arm == t.seen {
                continue;
            }
            t.seen = arm;
            let mut c = cqe_ok(t.tag, h.tripwire, CQE_OP_TRIPWIRE, h.bytes);
            c.src_addr[..8].copy_from_slice(&h.va.to_le_bytes());
            let cq = t.cq;
            self.post_cqe(mem, cq, c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tw(ctx: u32, va: u64, spans: &[(u64, usize)]) -> Tripwire {
        Tripwire {
            ctx,
            lkey: 1,
            arm_lkey: 1,
            cq: 1,
            tag: 0,
            va,
            spans: spans
                .iter()
                .map(|&(addr, len)| Span { addr, len, key: 1 })
                .collect(),
            arm_gpa: 0,
            seen: 0,
        }
    }

    #[test]
    fn a_placement_hits_the_tripwires_whose_bytes_it_writes() {
        let mut t = HashMap::new();
        // Watches 0x100 bytes at VA 0x7000, physically 0x1f80..0x2000 and 0x5000..0x5080.
        t.insert(7, tw(1, 0x7000, &[(0x1f80, 0x80), (0x5000, 0x80)]));
        t.insert(8, tw(2, 0x7000, &[(0x1f80, 0x80)]));
        // Writes 0x40 bytes from byte 0x20 of a buffer at 0x5000..0x6000: the watched
        // range's second span, from its byte 0x20.
        let written = [Span {
            addr: 0x5000,
            len: 0x1000,
            key: 1,
        }];
        let h = hits(&t, 1, &written, 0x20, 0x40);
        assert_eq!(
            h,
            [Hit {
                tripwire: 7,
                va: 0x7000 + 0x80 + 0x20,
                bytes: 0x40
            }],
            "only the context's tripwire, at the virtual address written"
        );
        assert!(
            hits(&t, 1, &written, 0x80, 0x10).is_empty(),
            "past the range"
        );
        assert!(hits(&t, 1, &written, 0, 0).is_empty(), "nothing written");
        // Across both spans.
        let written = [
            Span {
                addr: 0x1f00,
                len: 0x100,
                key: 1,
            },
            Span {
                addr: 0x5000,
                len: 0x10,
                key: 1,
            },
        ];
        let h = hits(&t, 1, &written, 0, 0x110);
        assert_eq!(h[0].va, 0x7000);
        assert_eq!(h[0].bytes, 0x90);
    }
}
