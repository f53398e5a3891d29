//! Objects laid out in guest memory before they exist: the rings and page lists of a CQ or
//! a QP in fresh pages, the `CREATE_CQ` or `CREATE_QP` that names them, and what makes the
//! [`Cq`] or [`Qp`] of the command's results. Harnesses that drive an engine themselves
//! (the sync guest, the fuzz harness) lay out their objects this way, each on its own guest
//! memory ([`GuestPages`]): the fuzz harness's keeps a shadow of every byte it writes.

use crate::*;

/// Guest memory as a harness hands it out: fresh pages, and page lists written into them.
pub trait GuestPages {
    /// `n` fresh pages in one piece: the first one's address.
    fn alloc_pages(&mut self, n: u64) -> u64;
    /// Writes a page list for `pages` into fresh pages and returns its address.
    fn page_list(&mut self, pages: &[u64]) -> u64;
}

impl GuestPages for Ram {
    fn alloc_pages(&mut self, n: u64) -> u64 {
        Ram::alloc_pages(self, n)
    }

    fn page_list(&mut self, pages: &[u64]) -> u64 {
        Ram::page_list(self, pages)
    }
}

/// `n` fresh pages in one piece, and their page list.
pub fn contiguous_pages(m: &mut impl GuestPages, n: u64) -> (Vec<u64>, u64) {
    let pages = contiguous(m.alloc_pages(n), n);
    let list = m.page_list(&pages);
    (pages, list)
}

/// A CQ whose `CREATE_CQ` is built.
pub struct PlannedCq {
    ctx: u32,
    /// The command's arguments (`page_list` is where the ring's page list is).
    pub args: CreateCqArgs,
    /// The ring's pages.
    pub pages: Vec<u64>,
}

impl PlannedCq {
    /// A CQ of `depth` entries in `ctx` in fresh pages of `m`, raising `vector`: its
    /// `CREATE_CQ`, and the plan.
    pub fn new(
        m: &mut impl GuestPages,
        ctx: u32,
        depth: u32,
        vector: u32,
    ) -> (AdminCmd, PlannedCq) {
        let (pages, list) = contiguous_pages(m, ring_pages(depth, CQE_SIZE));
        let args = cq_body(list, depth, vector);
        (
            cmd(ADMIN_OP_CREATE_CQ, ctx, 0, &args),
            PlannedCq { ctx, args, pages },
        )
    }

    /// The CQ, from its command's (result0, result1).
    pub fn created(self, (id, slot): (u64, u64)) -> Cq {
        Cq::created(self.ctx, &self.args, self.pages, (id as u32, slot as u32))
    }
}

/// A QP whose `CREATE_QP` is built.
pub struct PlannedQp {
    ctx: u32,
    /// The command's arguments (`sq_page_list`, `rq_page_list`: where the rings' page
    /// lists are).
    pub args: CreateQpArgs,
    /// The pages of the (send, receive) rings, each ring in one piece.
    pub rings: (Vec<u64>, Vec<u64>),
}

impl PlannedQp {
    /// A QP of `qp_type` with `framing` in `ctx`, both rings `depth` deep in fresh pages of
    /// `m`, completing to the CQs `cqs` (send, receive): its `CREATE_QP`, and the plan.
    pub fn new(
        m: &mut impl GuestPages,
        ctx: u32,
        cqs: (u32, u32),
        depth: u32,
        (qp_type, framing): (u8, u8),
    ) -> (AdminCmd, PlannedQp) {
        let n = ring_pages(depth, WQE_SIZE);
        let sq = contiguous(m.alloc_pages(n), n);
        let rq = contiguous(m.alloc_pages(n), n);
        let lists = (m.page_list(&sq), m.page_list(&rq));
        let args = qp_body(lists, cqs, (depth, depth), qp_type, framing);
        (
            cmd(ADMIN_OP_CREATE_QP, ctx, 0, &args),
            PlannedQp {
                ctx,
                args,
                rings: (sq, rq),
            },
        )
    }

    /// The QP, from its command's (result0, result1).
    pub fn created(self, (id, slot): (u64, u64)) -> Qp {
        Qp::created(self.ctx, &self.args, self.rings, (id as u32, slot as u32))
    }
}
