//! What a work request's scatter/gather list names, checked and turned into guest spans
//! through the context's memory regions: key, context, bounds and access rights, every SGE
//! before any byte moves.

use qpip_abi::cqe::*;

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
        for s in sges {
            if s.length == 0 {
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
}
