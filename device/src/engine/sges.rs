//! What a work request's scatter/gather list names, checked and turned into guest spans
//! through the context's memory regions: key, context, bounds and access rights, every SGE
//! before any byte moves. In a kernel context (`CTX_FLAG_KERNEL`) an SGE keyed
//! `PHYS_LKEY` names guest-physical memory, checked against guest RAM; elsewhere key 0 is
//! no region's (`Objects::insert_mr` never gives it).

use qpip_abi::cqe::*;
use qpip_abi::wqe::PHYS_LKEY;
use vm_memory::{Bytes, GuestAddress, GuestAddressSpace, GuestMemoryMmap};

use crate::engine::decode::Payload;

use super::memory::{Fault, Span};
use super::Engine;

impl Engine {
    /// Translates SGEs into guest spans after checking key, context, bounds and `access`.
    pub(super) fn translate(
        &self,
        ctx: u32,
        sges: &[qpip_abi::wqe::Sge],
        access: u32,
    ) -> Result<Vec<Span>, Fault> {
        let _stage = crate::stages::span(crate::stages::Stage::GetWr);
        let mut spans = Vec::new();
        let kernel = || self.objects.context(ctx).is_some_and(|c| c.is_kernel());
        for s in sges {
            if s.length == 0 {
                continue;
            }
            if s.lkey == PHYS_LKEY && kernel() {
                // Guest-physical memory, the driver's own: all of it inside guest RAM
                // (it may span pages and RAM regions), checked before any byte moves.
                let mem = self.shared.ram.memory();
                if !super::memory::in_ram(&mem, s.addr, s.length as u64) {
                    return Err(Fault::protection(CQE_DETAIL_OUT_OF_BOUNDS));
                }
                spans.push(Span {
                    addr: s.addr,
                    len: s.length as usize,
                    key: PHYS_LKEY,
                });
                continue;
            }
            let mr = self
                .objects
                .mr(s.lkey)
                .ok_or(Fault::protection(CQE_DETAIL_BAD_LKEY))?;
            if mr.ctx != ctx {
                return Err(Fault::protection(CQE_DETAIL_OTHER_CONTEXT));
            }
            if mr.access & access != access {
                return Err(Fault::protection(CQE_DETAIL_ACCESS));
            }
            mr.translate(s.lkey, s.addr, s.length as u64, &mut spans)?;
        }
        Ok(spans)
    }

    /// Collects a send's bytes, inline or through [`Engine::translate`] (local read is
    /// always allowed), into one buffer: at most `limit` bytes, else `too_long` (every SGE
    /// is checked before any byte is read, and the length before either).
    pub(super) fn gather(
        &self,
        mem: &GuestMemoryMmap,
        ctx: u32,
        payload: &Payload,
        limit: usize,
        too_long: Fault,
    ) -> Result<Vec<u8>, Fault> {
        let _stage = crate::stages::span(crate::stages::Stage::GetData);
        let sges = match payload {
            Payload::Inline(bytes) if bytes.len() <= limit => return Ok(bytes.clone()),
            Payload::Inline(_) => return Err(too_long),
            Payload::Gather(sges) => sges,
        };
        let total: u64 = sges.iter().map(|s| s.length as u64).sum();
        if total > limit as u64 {
            return Err(too_long);
        }
        let spans = self.translate(ctx, sges, 0)?;
        let mut out = vec![0u8; total as usize];
        let mut at = 0;
        for s in spans {
            mem.read_slice(&mut out[at..at + s.len], GuestAddress(s.addr))
                .map_err(|_| Fault::protection(CQE_DETAIL_OUT_OF_BOUNDS))?;
            at += s.len;
        }
        Ok(out)
    }
}
