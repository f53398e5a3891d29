//! Regions, QPs and contexts taken away while data moves: two contexts joined by three
//! connected pairs of TCP QPs over the device's loopback — message framing, stream framing
//! and iWARP — with registered regions of every access kind in each context, driven through
//! the doorbell pages of the real engine (synchronously, a pass at a time). The input posts
//! sends and receives (iWARP also RDMA Writes and Reads between the pair) over the regions,
//! runs the engine for a few passes or until it settles, consumes completions, writes data,
//! and lands `DEREG_MR`, `DESTROY_QP`, `CLOSE` and `DESTROY_CTX` between any two passes —
//! that is, in the middle of transfers. The input's first byte says which pairs to
//! connect (bit 0 message framing, bit 1 stream, bit 2 iWARP; none: all three), so that an
//! input pays only for the connections it uses; QPs are numbered pair by pair, the
//! accepting end (context 0) first.
//!
//! What the harness owns and checks (after every engine pass it runs):
//! * nothing panics;
//! * the device writes guest RAM only in the admin completion ring, the query page, live
//!   CQ rings, live doorbell pages and the bytes of live regions a write may reach (local
//!   or remote write rights) — never a region after its `DEREG_MR` (or its context's
//!   `DESTROY_CTX`), a read-only region, a ring or a page list;
//! * **no byte of a region is read after it is gone**: every byte the harness puts into a
//!   region is below 0x80, and just before it submits a `DEREG_MR` (or `DESTROY_CTX`) it
//!   fills the region's pages with `0x80 | region number`. The engine runs the command at
//!   the start of its next pass, before it moves any data, so a byte ≥ 0x80 that the device
//!   writes into a live region can only come from a region that is gone (or from memory no
//!   region covers): the leak names the region it came from;
//! * every completion is well formed, names a QP that completes to that CQ and a WR posted
//!   on it and not completed yet (each WR completes once; none after `DESTROY_QP`);
//!   `CQE_DETAIL_REGION_GONE` comes only with `LOCAL_PROTECTION`, for a WR that named a
//!   region that is gone; completions the consumer has not taken are never overwritten.
//!
//! The harness follows the ring protocol (it never has more WRs without a written
//! completion than a ring holds), so nothing here is the doorbell target's hostility.
#![no_main]

use std::collections::{HashMap, HashSet};

use libfuzzer_sys::fuzz_target;
use qpip_abi::admin::*;
use qpip_abi::cqe::*;
use qpip_abi::doorbell::*;
use qpip_abi::wqe::*;
use qpip_fuzz::*;
use qpip_testkit::{LOOPBACK, UNSPECIFIED};
use zerocopy::{FromBytes, FromZeros, IntoBytes};

/// Bytes ≥ this never enter a live region by the harness's hand: poisoned pages hold
/// `POISON | region number`.
const POISON: u8 = 0x80;
// The leak check tests the top bit of eight bytes at a time.
const _: () = assert!(POISON == 0x80);
const QP_DEPTH: u32 = 8;
const CQ_DEPTH: u32 = 16;
/// Regions each context starts with: (pages, offset into the first page, length, access).
const REGIONS: [(u64, u32, u64, u32); 4] = [
    // Where sends, RDMA Write sources and Read Responses come from: the device never
    // writes it.
    (2, 0x100, 2 * PAGE - 0x180, MR_ACCESS_REMOTE_READ),
    // Receive buffers, RDMA Write targets, Read sinks.
    (
        2,
        0,
        2 * PAGE,
        MR_ACCESS_LOCAL_WRITE | MR_ACCESS_REMOTE_WRITE,
    ),
    (
        1,
        0x20,
        0xf00,
        MR_ACCESS_LOCAL_WRITE | MR_ACCESS_REMOTE_READ | MR_ACCESS_REMOTE_WRITE,
    ),
    (1, 0, PAGE, MR_ACCESS_LOCAL_WRITE),
];
/// Regions an input may register on top (fresh pages each time).
const MAX_EXTRA_REGIONS: usize = 4;
const PORT: u16 = 4000;
/// Guest RAM: the objects above with their rings and page lists take about 60 pages.
const RAM: u64 = 512 << 10;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Message,
    Stream,
    Iwarp,
}

const KINDS: [Kind; 3] = [Kind::Message, Kind::Stream, Kind::Iwarp];

struct Region {
    /// Index of its context in `World::ctxs`.
    ctx: usize,
    lkey: u32,
    rkey: u32,
    iova: u64,
    /// Guest-physical address of its first byte (its pages are contiguous).
    gpa: u64,
    len: u64,
    pages: u64,
    access: u32,
    alive: bool,
}

impl Region {
    fn writable(&self) -> bool {
        self.access & (MR_ACCESS_LOCAL_WRITE | MR_ACCESS_REMOTE_WRITE) != 0
    }
    /// The first page.
    fn page0(&self) -> u64 {
        self.gpa & !(PAGE - 1)
    }
}

struct Qp {
    qp: qpip_testkit::Qp,
    ctx: usize,
    kind: Kind,
    /// Index of the QP at the other end of its connection.
    peer: usize,
    alive: bool,
    /// WRs without a completion, by wr_id: the lkeys they name (local SGEs).
    sq_out: HashMap<u64, Vec<u32>>,
    rq_out: HashMap<u64, Vec<u32>>,
}

struct Cq {
    cq: qpip_testkit::Cq,
    ctx: usize,
    alive: bool,
    /// Ready, unconsumed CQEs as first seen, by free-running index.
    seen: HashMap<u32, [u8; 64]>,
}

struct World {
    d: SyncDevice,
    ctxs: [u32; 2],
    ctx_alive: [bool; 2],
    /// Per context: (send CQ, receive CQ), indices into `cqs`.
    ctx_cqs: [(usize, usize); 2],
    cqs: Vec<Cq>,
    qps: Vec<Qp>,
    regions: Vec<Region>,
    /// lkeys of regions that are gone (what a REGION_GONE completion must have named).
    gone: HashSet<u32>,
    next_wr_id: u64,
    /// What the device may write ([`World::writable`]), worked out again only when a
    /// region or CQ comes or goes: the checks after every pass read it.
    writable: Writable,
    /// The ready CQEs of the CQ being checked (a buffer kept from check to check).
    ready_buf: Vec<(u32, [u8; 64])>,
}

/// Data bytes (all below [`POISON`]), computed once: `len` of them from `from` on (a
/// byte-by-byte loop per region and input would be a good part of an input's time).
fn data(from: usize, len: usize) -> &'static [u8] {
    static DATA: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    let d = DATA.get_or_init(|| {
        (0..4 * PAGE)
            .map(|i| (i.wrapping_mul(0x9e37_79b9) >> 13) as u8 & 0x7f)
            .collect()
    });
    let from = from % (d.len() - len);
    &d[from..from + len]
}

/// The world for an input: the two contexts with their CQs and regions, and the pairs
/// whose bits are set in `pairs` (bit k: `KINDS[k]`; none set means all three) — an input
/// pays only for the connections it asks for. Objects are made in batches of independent
/// commands, one engine run each.
fn world(pairs: u8) -> World {
    let pairs = if pairs & 7 == 0 { 7 } else { pairs & 7 };
    let mut d = SyncDevice::with_ram(RAM);
    let ctx_cmds = [d.plan_ctx(), d.plan_ctx()];
    let ids = d.must_all(&ctx_cmds);
    let ctxs = [ids[0].0 as u32, ids[1].0 as u32];
    let mut cmds = Vec::new();
    let mut cq_plans = Vec::new();
    for (i, &ctx) in ctxs.iter().enumerate() {
        for vector in [1, 2] {
            let (c, plan) = d.plan_cq(ctx, CQ_DEPTH, vector);
            cmds.push(c);
            cq_plans.push((i, plan));
        }
    }
    let mut regions = Vec::new();
    for ctx in 0..2 {
        for spec in REGIONS {
            let (c, r) = plan_region(&mut d, ctxs, ctx, spec);
            cmds.push(c);
            regions.push(r);
        }
    }
    let results = d.must_all(&cmds);
    let cqs: Vec<Cq> = cq_plans
        .into_iter()
        .zip(&results)
        .map(|((ctx, plan), &r)| Cq {
            cq: plan.created(r),
            ctx,
            alive: true,
            seen: HashMap::new(),
        })
        .collect();
    for (r, &(lkey, rkey)) in regions.iter_mut().zip(&results[cqs.len()..]) {
        (r.lkey, r.rkey) = (lkey as u32, rkey as u32);
    }
    let mut w = World {
        d,
        ctxs,
        ctx_alive: [true; 2],
        ctx_cqs: [(0, 1), (2, 3)],
        cqs,
        qps: Vec::new(),
        regions,
        gone: HashSet::new(),
        next_wr_id: 1,
        writable: Writable::default(),
        ready_buf: Vec::new(),
    };
    w.writable = w.writable();
    // The pairs: context 0 listens and accepts, context 1 connects.
    let kinds: Vec<(usize, Kind)> = KINDS
        .into_iter()
        .enumerate()
        .filter(|(k, _)| pairs & 1 << k != 0)
        .collect();
    let mut cmds = Vec::new();
    let mut plans = Vec::new();
    for &(k, kind) in &kinds {
        for ctx in 0..2 {
            let (c, plan) = w.plan_qp(ctx, kind);
            cmds.push(c);
            plans.push((ctx, kind, plan));
        }
        let mut l = ListenArgs::new_zeroed();
        l.addr = UNSPECIFIED;
        l.port = PORT + k as u16;
        l.backlog = 1;
        cmds.push(cmd(ADMIN_OP_LISTEN, ctxs[0], 0, &l));
    }
    let results = w.d.must_all(&cmds);
    let mut results = results.into_iter();
    let mut plans = plans.into_iter();
    let mut waiting = Vec::new();
    for &(k, kind) in &kinds {
        let mut qp = || {
            let (ctx, kind, plan) = plans.next().expect("planned");
            let r = results.next().expect("a result");
            w.qps.push(Qp {
                qp: plan.created(r),
                ctx,
                kind,
                peer: 0,
                alive: true,
                sq_out: HashMap::new(),
                rq_out: HashMap::new(),
            });
            w.qps.len() - 1
        };
        let (a, b) = (qp(), qp());
        let listener = results.next().expect("a listener").0 as u32;
        w.qps[a].peer = b;
        w.qps[b].peer = a;
        let mut iwarp = IwarpConnArgs::new_zeroed();
        if kind == Kind::Iwarp {
            (iwarp.ird, iwarp.ord) = (4, 4);
        }
        let mut acc = AcceptArgs::new_zeroed();
        acc.qp = w.qps[a].qp.id;
        acc.iwarp = iwarp;
        waiting.push(w.d.submit(cmd(ADMIN_OP_ACCEPT, ctxs[0], listener, &acc)));
        let mut con = ConnectArgs::new_zeroed();
        con.addr = LOOPBACK;
        con.port = PORT + k as u16;
        con.iwarp = iwarp;
        waiting.push(w.d.submit(cmd(ADMIN_OP_CONNECT, ctxs[1], w.qps[b].qp.id, &con)));
    }
    for _ in 0..64 {
        w.d.step();
        for (c, done) in w.d.completions() {
            assert_eq!(
                done.status, ADMIN_STATUS_OK,
                "connection set-up: {c:?} {done:?}"
            );
            waiting.retain(|&id| id != done.cmd_id);
        }
        if waiting.is_empty() {
            break;
        }
    }
    assert!(
        waiting.is_empty(),
        "the loopback connections did not come up"
    );
    w.check();
    w
}

/// A region of context `ctx` (an index) on fresh pages, filled with data bytes: its
/// `REG_MR`, and the region, whose keys come from the command's results.
fn plan_region(
    d: &mut SyncDevice,
    ctxs: [u32; 2],
    ctx: usize,
    (pages, offset, len, access): (u64, u32, u64, u32),
) -> (AdminCmd, Region) {
    let (c, iova, first) = d.plan_mr(ctxs[ctx], pages, offset, len, access);
    let gpa = first + offset as u64;
    d.write(gpa, data(gpa as usize, len as usize));
    let r = Region {
        ctx,
        lkey: 0,
        rkey: 0,
        iova,
        gpa,
        len,
        pages,
        access,
        alive: true,
    };
    (c, r)
}

impl World {
    /// Registers a region on fresh pages and fills it with data bytes.
    fn register(&mut self, ctx: usize, spec: (u64, u32, u64, u32)) {
        let (c, mut r) = plan_region(&mut self.d, self.ctxs, ctx, spec);
        let (lkey, rkey) = self.d.must(c);
        (r.lkey, r.rkey) = (lkey as u32, rkey as u32);
        self.regions.push(r);
        self.writable = self.writable();
    }

    /// A QP of context `ctx` (an index) of `kind`, completing to the context's CQs: its
    /// `CREATE_QP`, and what makes the QP of the command's results.
    fn plan_qp(&mut self, ctx: usize, kind: Kind) -> (AdminCmd, PlannedQp) {
        let (scq, rcq) = self.ctx_cqs[ctx];
        let framing = match kind {
            Kind::Message => FRAMING_MESSAGE,
            Kind::Stream => FRAMING_STREAM,
            Kind::Iwarp => FRAMING_IWARP,
        };
        self.d.plan_qp(
            self.ctxs[ctx],
            (self.cqs[scq].cq.id, self.cqs[rcq].cq.id),
            QP_DEPTH,
            (QP_TYPE_TCP, framing),
        )
    }

    fn writable(&self) -> Writable {
        let mut w = Writable::default();
        w.add(ADMIN_CQ, ADMIN_DEPTH as u64 * 32);
        w.add(QUERY_BUF, PAGE);
        for c in self.cqs.iter().filter(|c| c.alive) {
            for &p in &c.cq.pages {
                w.add(p, PAGE);
            }
        }
        for r in self.regions.iter().filter(|r| r.alive && r.writable()) {
            w.add(r.gpa, r.len);
        }
        w
    }

    /// `n` engine passes, each followed by the checks.
    fn step(&mut self, n: usize) {
        for _ in 0..n {
            let busy = self.d.step();
            self.check();
            if !busy {
                return;
            }
        }
    }

    /// Passes until the engine settles (bounded), checking after each.
    fn settle(&mut self) {
        self.step(64);
    }

    fn check(&mut self) {
        let changed = self.d.check_writes(&self.writable);
        self.check_leaks(&changed);
        for i in 0..self.cqs.len() {
            self.check_cq(i);
        }
    }

    /// In the pages the device wrote, the bytes of live regions hold data, never poison.
    fn check_leaks(&self, changed: &[u64]) {
        for &page in changed {
            for r in self.regions.iter().filter(|r| r.alive) {
                let start = r.gpa.max(page);
                let end = (r.gpa + r.len).min(page + PAGE);
                if start >= end {
                    continue;
                }
                let at = (start - RAM_BASE) as usize;
                let got = &self.d.ram()[at..at + (end - start) as usize];
                // Eight bytes at a time (the per-byte test, instrumented, was slow); then the
                // byte.
                let poisoned = got.chunks(8).any(|c| {
                    let mut w = [0u8; 8];
                    w[..c.len()].copy_from_slice(c);
                    u64::from_le_bytes(w) & 0x8080_8080_8080_8080 != 0
                });
                if !poisoned {
                    continue;
                }
                if let Some(i) = got.iter().position(|&b| b >= POISON) {
                    let b = got[i];
                    let from = (b & !POISON) as usize;
                    panic!(
                        "the device put byte {b:#04x} at {:#x} (region lkey {:#x}): a byte of \
                         region #{from} (lkey {:#x}), which is gone, or of memory no region covers",
                        start + i as u64,
                        r.lkey,
                        self.regions.get(from).map_or(0, |g| g.lkey),
                    );
                }
            }
        }
    }

    /// Whether CQE `idx` (free-running) of CQ `c` is there for the consumer.
    fn check_cq(&mut self, i: usize) {
        if !self.cqs[i].alive {
            return;
        }
        let c = &self.cqs[i];
        let mut ready = std::mem::take(&mut self.ready_buf);
        self.d.ready_cqes(&c.cq, &mut ready);
        for &(idx, raw) in &ready {
            if let Some(first) = self.cqs[i].seen.get(&idx) {
                assert_eq!(
                    first, &raw,
                    "CQ {}: unconsumed CQE {idx} was overwritten",
                    self.cqs[i].cq.id
                );
                continue;
            }
            self.new_cqe(i, &raw);
            self.cqs[i].seen.insert(idx, raw);
        }
        let c = &self.cqs[i];
        for idx in c.seen.keys() {
            assert!(
                ready.iter().any(|(r, _)| r == idx),
                "CQ {}: unconsumed CQE {idx} disappeared",
                c.cq.id
            );
        }
        self.ready_buf = ready;
    }

    /// A completion seen for the first time: well formed, for a WR outstanding on a QP
    /// that completes to this CQ.
    fn new_cqe(&mut self, cq: usize, raw: &[u8; 64]) {
        let c = Cqe::read_from_bytes(&raw[..]).unwrap();
        qpip_fuzz::trace!(
            "  CQ {} CQE: qp {} op {} status {} detail {:#x} len {} wr_id {}",
            self.cqs[cq].cq.id,
            c.qp,
            c.opcode,
            c.status,
            c.detail,
            c.byte_len,
            c.wr_id
        );
        let send = match c.opcode {
            CQE_OP_SEND | CQE_OP_RDMA_WRITE | CQE_OP_RDMA_READ => true,
            CQE_OP_RECV | CQE_OP_RECV_IMM => false,
            _ => panic!("CQE opcode: {c:?}"),
        };
        assert!(c.status <= CQE_STATUS_REMOTE_OPERATION, "CQE status: {c:?}");
        // A Terminate's layer, type and code, or one of the detail codes.
        let terminate = c.detail & CQE_DETAIL_TERMINATE != 0;
        let detail = c.detail & !CQE_DETAIL_SOLICITED;
        if terminate {
            assert!(
                matches!(
                    c.status,
                    CQE_STATUS_REMOTE_ACCESS | CQE_STATUS_REMOTE_OPERATION
                ),
                "a Terminate's detail on a completion of another status: {c:?}"
            );
        } else {
            assert!(detail <= CQE_DETAIL_REGION_GONE, "CQE detail: {c:?}");
        }
        assert_eq!(c.reserved, [0; 19], "CQE reserved bytes: {c:?}");
        assert_eq!(c.owner & !1, 0, "CQE owner has only the phase bit: {c:?}");
        if c.status != CQE_STATUS_SUCCESS && c.status != CQE_STATUS_LOCAL_LENGTH {
            assert_eq!(c.byte_len, 0, "error CQE with a length: {c:?}");
        }
        let want_ctx = self.cqs[cq].ctx;
        let q = self
            .qps
            .iter_mut()
            .find(|q| q.qp.id == c.qp)
            .unwrap_or_else(|| panic!("CQE for a QP that is not ours: {c:?}"));
        assert!(
            q.alive,
            "CQE for QP {} after DESTROY_QP completed: {c:?}",
            c.qp
        );
        let cq_id = if send { q.qp.send_cq } else { q.qp.recv_cq };
        assert!(
            cq_id == self.cqs[cq].cq.id && q.ctx == want_ctx,
            "CQE on CQ {} for QP {} which does not complete there: {c:?}",
            self.cqs[cq].cq.id,
            c.qp
        );
        let out = if send { &mut q.sq_out } else { &mut q.rq_out };
        let lkeys = out.remove(&c.wr_id).unwrap_or_else(|| {
            panic!(
                "CQE for wr_id {} which QP {} does not have outstanding: {c:?}",
                c.wr_id, c.qp
            )
        });
        if detail == CQE_DETAIL_REGION_GONE {
            assert_eq!(c.status, CQE_STATUS_LOCAL_PROTECTION, "REGION_GONE: {c:?}");
            assert!(
                lkeys.iter().any(|k| self.gone.contains(k)),
                "REGION_GONE for a WR naming only live regions {lkeys:x?}: {c:?}"
            );
        }
    }

    // -- what the input drives --

    /// A region of context `ctx`: mostly one that may do `access`.
    fn pick_region(&self, input: &mut Input, ctx: usize, access: u32) -> Option<&Region> {
        let mine: Vec<&Region> = self.regions.iter().filter(|r| r.ctx == ctx).collect();
        let fit: Vec<&Region> = mine
            .iter()
            .copied()
            .filter(|r| r.access & access == access)
            .collect();
        let from = if fit.is_empty() || input.choose(8) == 0 {
            mine
        } else {
            fit
        };
        (!from.is_empty()).then(|| from[input.choose(from.len())])
    }

    /// An (address, length) inside `r`, mostly; sometimes past its end.
    fn range(input: &mut Input, r: &Region) -> (u64, u32) {
        let off = input.u16() as u64 % r.len;
        let len = match input.choose(8) {
            0 => 0,
            1 => input.u16() as u32,
            _ => (input.u16() as u64 % (r.len - off + 1)) as u32,
        };
        (r.iova + off, len)
    }

    fn sges(&self, input: &mut Input, ctx: usize, access: u32) -> Vec<Sge> {
        let n = 1 + input.choose(3);
        let mut sges = Vec::new();
        for _ in 0..n {
            let Some(r) = self.pick_region(input, ctx, access) else {
                break;
            };
            let (addr, length) = Self::range(input, r);
            let lkey = if input.choose(16) == 0 {
                input.u32()
            } else {
                r.lkey
            };
            sges.push(Sge { addr, length, lkey });
        }
        sges
    }

    fn post(&mut self, input: &mut Input, send: bool) {
        let q = input.choose(self.qps.len());
        let (ctx, kind) = (self.qps[q].ctx, self.qps[q].kind);
        let out = if send {
            self.qps[q].sq_out.len()
        } else {
            self.qps[q].rq_out.len()
        };
        if !self.qps[q].alive || !self.ctx_alive[ctx] || out >= QP_DEPTH as usize {
            return;
        }
        let mut h = Wqe::new_zeroed();
        h.wr_id = self.next_wr_id;
        self.next_wr_id += 1;
        let mut slot = [0u8; WQE_SIZE as usize];
        let sges = if !send {
            h.opcode = WQE_OP_RECV;
            self.sges(input, ctx, MR_ACCESS_LOCAL_WRITE)
        } else {
            let op = if kind == Kind::Iwarp {
                input.choose(3)
            } else {
                0
            };
            if kind == Kind::Message {
                h.imm_data = input.u8() as u32;
            }
            match op {
                0 if input.choose(4) == 0 => {
                    // Inline data: out of the WQE, never out of a region.
                    h.opcode = WQE_OP_SEND;
                    h.flags = WQE_FLAG_INLINE;
                    let n = input.u8() as usize % (MAX_INLINE as usize + 1);
                    h.inline_len = n as u32;
                    let o = WQE_SGE_OFFSET as usize;
                    for (b, x) in slot[o..o + n].iter_mut().zip(input.bytes(n)) {
                        *b = x & !POISON;
                    }
                    Vec::new()
                }
                0 => {
                    h.opcode = WQE_OP_SEND;
                    self.sges(input, ctx, 0)
                }
                _ => {
                    // An RDMA Write (from local regions) or Read (into them) of a region of
                    // the peer's context, mostly one that allows it.
                    let write = op == 1;
                    h.opcode = if write {
                        WQE_OP_RDMA_WRITE
                    } else {
                        WQE_OP_RDMA_READ
                    };
                    let local = if write { 0 } else { MR_ACCESS_LOCAL_WRITE };
                    let remote = if write {
                        MR_ACCESS_REMOTE_WRITE
                    } else {
                        MR_ACCESS_REMOTE_READ
                    };
                    let sges = self.sges(input, ctx, local);
                    let total: u64 = sges.iter().map(|s| s.length as u64).sum();
                    let peer_ctx = self.qps[self.qps[q].peer].ctx;
                    let target = if input.choose(8) == 0 { ctx } else { peer_ctx };
                    if let Some(r) = self.pick_region(input, target, remote) {
                        let off = input.u16() as u64 % r.len.saturating_sub(total).max(1);
                        let rkey = if input.choose(16) == 0 {
                            r.lkey
                        } else {
                            r.rkey
                        };
                        h.set_remote(r.iova + off, rkey);
                    }
                    sges
                }
            }
        };
        h.num_sge = sges.len() as u8;
        let o = WQE_SGE_OFFSET as usize;
        slot[o..o + sges.as_bytes().len()].copy_from_slice(sges.as_bytes());
        slot[..48].copy_from_slice(h.as_bytes());
        let lkeys = sges.iter().map(|s| s.lkey).collect();
        let qp = &mut self.qps[q];
        let (at, tail) = if send {
            qp.sq_out.insert(h.wr_id, lkeys);
            (qp.qp.push_sq(), qp.qp.sq_tail)
        } else {
            qp.rq_out.insert(h.wr_id, lkeys);
            (qp.qp.push_rq(), qp.qp.rq_tail)
        };
        let (c, off) = (
            qp.qp.ctx,
            if send {
                qp_sq_tail(qp.qp.slot)
            } else {
                qp_rq_tail(qp.qp.slot)
            },
        );
        qpip_fuzz::trace!(
            "  post {} op {} on QP {} wr_id {}: {sges:x?} remote {:x?}",
            if send { "send" } else { "recv" },
            h.opcode,
            qp.qp.id,
            h.wr_id,
            &h.dest_addr[..12]
        );
        self.d.write(at, &slot);
        self.d.ring(c, off, tail);
    }

    fn consume(&mut self, input: &mut Input) {
        let i = input.choose(self.cqs.len());
        let n = 1 + input.u8() % CQ_DEPTH as u8;
        if !self.cqs[i].alive {
            return;
        }
        let mut head = self.cqs[i].cq.head;
        for _ in 0..n {
            if !self.cqs[i].seen.contains_key(&head) {
                break;
            }
            head = head.wrapping_add(1);
        }
        let c = &mut self.cqs[i];
        self.d.consume_cq(&mut c.cq, &mut c.seen, head);
    }

    /// Fills region `r`'s pages with its poison: from here on nothing may read them.
    fn poison(&mut self, r: usize) {
        let g = &self.regions[r];
        let fill = vec![POISON | r as u8; (g.pages * PAGE) as usize];
        let at = g.page0();
        self.gone.insert(g.lkey);
        self.regions[r].alive = false;
        self.writable = self.writable();
        self.d.write(at, &fill);
    }

    /// Submits `c` and runs one pass (the engine takes admin commands first in a pass, so
    /// the command lands before any data moves in it); its completion.
    fn admin(&mut self, c: AdminCmd) -> AdminCqe {
        let id = self.d.submit(c);
        self.d.step();
        let done = self.d.completions();
        let c = done
            .into_iter()
            .find(|(_, c)| c.cmd_id == id)
            .map(|(_, c)| c)
            .unwrap_or_else(|| {
                panic!("admin command {:#x} did not complete in its pass", c.opcode)
            });
        self.check();
        c
    }

    fn dereg(&mut self, input: &mut Input) {
        let r = input.choose(self.regions.len());
        let (ctx, lkey, alive) = {
            let g = &self.regions[r];
            (g.ctx, g.lkey, g.alive)
        };
        let expect_ok = alive && self.ctx_alive[ctx];
        if expect_ok {
            self.poison(r);
        }
        let done = self.admin(cmd0(ADMIN_OP_DEREG_MR, self.ctxs[ctx], lkey));
        assert_eq!(
            done.status == ADMIN_STATUS_OK,
            expect_ok,
            "DEREG_MR of region #{r} (alive {alive}): {done:?}"
        );
    }

    fn destroy_qp(&mut self, input: &mut Input) {
        let q = input.choose(self.qps.len());
        let (ctx, id, alive) = (self.qps[q].ctx, self.qps[q].qp.id, self.qps[q].alive);
        let done = self.admin(cmd0(ADMIN_OP_DESTROY_QP, self.ctxs[ctx], id));
        let expect_ok = alive && self.ctx_alive[ctx];
        assert_eq!(
            done.status == ADMIN_STATUS_OK,
            expect_ok,
            "DESTROY_QP: {done:?}"
        );
        // Its flushes were written in that pass (and checked); none may follow.
        self.qps[q].alive = false;
    }

    fn destroy_ctx(&mut self, input: &mut Input) {
        let ctx = input.choose(2);
        let alive = self.ctx_alive[ctx];
        if alive {
            for r in 0..self.regions.len() {
                if self.regions[r].ctx == ctx && self.regions[r].alive {
                    self.poison(r);
                }
            }
            self.ctx_alive[ctx] = false;
            // Its WRs go without completions, and its CQs with them.
            for c in self.cqs.iter_mut().filter(|c| c.ctx == ctx) {
                c.alive = false;
            }
            for q in self.qps.iter_mut().filter(|q| q.ctx == ctx) {
                q.alive = false;
            }
            self.writable = self.writable();
        }
        let done = self.admin(cmd0(ADMIN_OP_DESTROY_CTX, self.ctxs[ctx], 0));
        assert_eq!(
            done.status == ADMIN_STATUS_OK,
            alive,
            "DESTROY_CTX: {done:?}"
        );
    }

    /// CLOSE (a graceful end: the QP may then be destroyed without a reset, and the
    /// connection finishes on its own — without reading guest memory).
    fn close(&mut self, input: &mut Input) {
        let q = input.choose(self.qps.len());
        let (ctx, id) = (self.qps[q].ctx, self.qps[q].qp.id);
        if self.d.outstanding.len() >= ADMIN_DEPTH as usize / 2 {
            return; // the admin ring keeps room for the commands that complete at once
        }
        // Completes when the close is done (or at once with an error); either way later.
        // Taken in a pass of its own: a command that poisons regions must be the first
        // thing in its pass (a CLOSE taken before it may read the regions its sends name).
        self.d.submit(cmd0(ADMIN_OP_CLOSE, self.ctxs[ctx], id));
        self.step(1);
    }

    /// New data in a live region (as the process writes its buffers).
    fn write_data(&mut self, input: &mut Input) {
        let live: Vec<usize> = (0..self.regions.len())
            .filter(|&r| self.regions[r].alive)
            .collect();
        if live.is_empty() {
            return;
        }
        let r = &self.regions[live[input.choose(live.len())]];
        let off = input.u16() as u64 % r.len;
        let n = (input.u16() as u64 % 2048).min(r.len - off) as usize;
        let from = input.u16() as usize;
        let gpa = r.gpa + off;
        self.d.write(gpa, data(from, n));
    }

    fn reg_extra(&mut self, input: &mut Input, extra: &mut usize) {
        let ctx = input.choose(2);
        if *extra >= MAX_EXTRA_REGIONS || !self.ctx_alive[ctx] {
            return;
        }
        *extra += 1;
        let spec = REGIONS[1 + input.choose(REGIONS.len() - 1)];
        self.register(ctx, spec);
        self.check();
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let mut w = world(input.u8());
    let mut extra = 0;
    for _ in 0..400 {
        if input.is_empty() {
            break;
        }
        let op = input.choose(16);
        qpip_fuzz::trace!("op {op}");
        match op {
            0..=2 => w.post(&mut input, true),
            3 | 4 => w.post(&mut input, false),
            5..=7 => {
                let n = 1 + input.choose(4);
                w.step(n);
            }
            8 => w.settle(),
            9 => w.consume(&mut input),
            10 | 11 => w.dereg(&mut input),
            12 => w.destroy_qp(&mut input),
            13 => {
                if input.choose(4) == 0 {
                    w.destroy_ctx(&mut input)
                } else {
                    w.close(&mut input)
                }
            }
            14 => w.write_data(&mut input),
            _ => w.reg_extra(&mut input, &mut extra),
        }
    }
    w.settle();
    // Whatever is left completes to the harness's satisfaction (take what was written).
    for i in 0..w.cqs.len() {
        w.check_cq(i);
    }
});
