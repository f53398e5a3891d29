//! Doorbell values and work queue entries against a set of live objects, through the real
//! engine (driven synchronously): two contexts with CQs, UDP and TCP QPs and memory regions
//! (one read-only, one in the other context), then any sequence of WQEs written into the
//! rings, doorbells rung with sensible or wild producer indices, CQ consumer indices and arm
//! requests, arbitrary words and whole arbitrary 4 KiB doorbell pages (each context's page is
//! a page of guest RAM), engine runs, CQE consumption, object destruction and data writes.
//!
//! Checked after every engine run:
//! * nothing panics;
//! * the device writes guest RAM only in live CQ rings, the admin completion ring, the query
//!   buffer, live regions registered with LOCAL_WRITE and live contexts' doorbell pages:
//!   never a read-only region, another context's memory through a WQE, a ring page, a page
//!   list, or anything destroyed (a destroyed context's doorbell page included);
//! * every CQE is well formed (known opcode, status and detail, reserved bytes zero, a QP that
//!   completes to that CQ);
//! * while doorbells follow the protocol: completions the consumer has not released are never
//!   overwritten, and an armed CQ with a completion beyond the head has interrupted, at most
//!   once per arm.
#![no_main]

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;

use libfuzzer_sys::fuzz_target;
use qpip_abi::admin::*;
use qpip_abi::cqe::*;
use qpip_abi::doorbell::*;
use qpip_abi::pci::DOORBELL_PAGE_SIZE;
use qpip_abi::wqe::*;
use qpip_device::engine::DEFAULT_MAC;
use qpip_device::net::wire;
use qpip_fuzz::*;
use qpip_testkit::{bind_cmd, eventfd, query_cmd, LOOPBACK};
use zerocopy::{FromBytes, FromZeros, IntoBytes};

/// (context, send CQ, receive CQ, depth, type, address and port to bind).
type QpSpec = (u32, usize, usize, u32, u8, Option<([u8; 16], u16)>);

struct Qp {
    qp: qpip_testkit::Qp,
    /// Its CQs, as indices into the world's.
    send_cq: usize,
    recv_cq: usize,
}

struct Cq {
    cq: qpip_testkit::Cq,
    alive: bool,
    /// Armed by the consumer and not yet interrupted.
    armed: bool,
    interrupts: u64,
    arms: u64,
    /// Ready, unconsumed CQEs as first seen, by free-running index.
    seen: HashMap<u32, [u8; 64]>,
}

struct Mr {
    ctx: u32,
    lkey: u32,
    iova: u64,
    base: u64,
    len: u64,
    pages: u64,
    writable: bool,
    alive: bool,
}

struct World {
    d: SyncDevice,
    ctxs: Vec<u32>,
    ctx_alive: Vec<bool>,
    qps: Vec<Qp>,
    cqs: Vec<Cq>,
    mrs: Vec<Mr>,
    irqs: Vec<File>,
    /// Interrupts the engine had raised at the last check: the eventfds are read only
    /// when it raised more since (a read of each is a system call).
    raised: u64,
    /// Set once a doorbell was written outside the protocol (raw words, whole pages, a CQ
    /// head the consumer never reached): the device may then legitimately reuse CQ slots the
    /// harness has not consumed, and arm requests are not the harness's own.
    hostile: bool,
    next_wr_id: u64,
    /// What the device may write ([`World::writable`]), worked out again only when an
    /// object goes: the checks after every run read it.
    writable: Writable,
    /// The ready CQEs of the CQ being checked (a buffer kept from check to check).
    ready_buf: Vec<(u32, [u8; 64])>,
}

fn world() -> World {
    let mut d = SyncDevice::new();
    let irqs: Vec<File> = (0..4).map(|_| eventfd()).collect();
    d.irqs()
        .set(0, irqs.iter().map(|f| f.try_clone().unwrap()).collect())
        .expect("install eventfds");
    // The objects are made in batches of independent commands, one engine run each.
    let ctx_cmds = [d.plan_ctx(), d.plan_ctx()];
    let ids = d.must_all(&ctx_cmds);
    let (a, b) = (ids[0].0 as u32, ids[1].0 as u32);
    let mut cmds = Vec::new();
    let mut planned_cqs = Vec::new();
    for (ctx, depth, vector) in [(a, 8, 1), (a, 4, 2), (b, 4, 3)] {
        let (c, plan) = d.plan_cq(ctx, depth, vector);
        cmds.push(c);
        planned_cqs.push(plan);
    }
    let mut planned_mrs = Vec::new();
    // (ctx, pages, offset, len, access)
    for (ctx, pages, offset, len, access) in [
        (
            a,
            2u64,
            0x80u32,
            2 * PAGE - 0x80 - 0x40,
            MR_ACCESS_LOCAL_WRITE,
        ),
        (a, 1, 0, PAGE, 0),
        (b, 1, 0x10, PAGE - 0x10, MR_ACCESS_LOCAL_WRITE),
    ] {
        let (c, iova, base) = d.plan_mr(ctx, pages, offset, len, access);
        cmds.push(c);
        planned_mrs.push((ctx, pages, len, access, iova, base));
    }
    let results = d.must_all(&cmds);
    let cqs: Vec<Cq> = planned_cqs
        .into_iter()
        .zip(&results)
        .map(|(plan, &r)| Cq {
            cq: plan.created(r),
            alive: true,
            armed: false,
            interrupts: 0,
            arms: 0,
            seen: HashMap::new(),
        })
        .collect();
    let mrs: Vec<Mr> = planned_mrs
        .into_iter()
        .zip(&results[cqs.len()..])
        .map(|((ctx, pages, len, access, iova, base), &(lkey, _))| Mr {
            ctx,
            lkey: lkey as u32,
            iova,
            base,
            len,
            pages,
            writable: access & MR_ACCESS_LOCAL_WRITE != 0,
            alive: true,
        })
        .collect();
    // (ctx, send CQ, recv CQ, depth, type, bind)
    let specs: [QpSpec; 4] = [
        (a, 0, 1, 8, QP_TYPE_UDP, Some(([0; 16], 7))),
        (a, 0, 0, 8, QP_TYPE_UDP, Some((LOOPBACK, 9))),
        (a, 1, 1, 4, QP_TYPE_TCP, None),
        (b, 2, 2, 4, QP_TYPE_UDP, Some(([0; 16], 11))),
    ];
    let (cmds, plans): (Vec<_>, Vec<_>) = specs
        .iter()
        .map(|&(ctx, s, r, depth, ty, _)| {
            let framing = if ty == QP_TYPE_TCP {
                FRAMING_MESSAGE
            } else {
                0
            };
            d.plan_qp(ctx, (cqs[s].cq.id, cqs[r].cq.id), depth, (ty, framing))
        })
        .unzip();
    let results = d.must_all(&cmds);
    let qps: Vec<Qp> = plans
        .into_iter()
        .zip(results)
        .zip(specs)
        .map(|((plan, r), (_, s, r_cq, ..))| Qp {
            qp: plan.created(r),
            send_cq: s,
            recv_cq: r_cq,
        })
        .collect();
    let binds: Vec<AdminCmd> = specs
        .iter()
        .zip(&qps)
        .filter_map(|(&(ctx, .., bind), q)| {
            bind.map(|(addr, port)| bind_cmd(ctx, q.qp.id, addr, port))
        })
        .collect();
    d.must_all(&binds);
    let mut w = World {
        d,
        ctxs: vec![a, b],
        ctx_alive: vec![true, true],
        qps,
        cqs,
        mrs,
        irqs,
        raised: 0,
        hostile: false,
        next_wr_id: 1,
        writable: Writable::default(),
        ready_buf: Vec::new(),
    };
    w.writable = w.writable();
    w.check();
    w
}

impl World {
    fn writable(&self) -> Writable {
        let mut w = Writable(Vec::with_capacity(16));
        w.add(ADMIN_CQ, ADMIN_DEPTH as u64 * 32);
        w.add(QUERY_BUF, PAGE);
        for c in self.cqs.iter().filter(|c| c.alive) {
            for &p in &c.cq.pages {
                w.add(p, PAGE);
            }
        }
        for m in self.mrs.iter().filter(|m| m.alive && m.writable) {
            w.add(m.base, m.pages * PAGE);
        }
        w
    }

    fn run(&mut self) {
        self.d.run();
        self.check();
    }

    fn check(&mut self) {
        self.d.check_writes(&self.writable);
        let raised = self.d.irqs().raised();
        let irqs = raised != self.raised;
        self.raised = raised;
        for i in 0..self.cqs.len() {
            self.check_cq(i, irqs);
        }
    }

    /// Whether CQE `idx` (free-running) is there for the consumer.
    fn check_cq(&mut self, i: usize, irqs: bool) {
        let c = &self.cqs[i];
        if !c.alive {
            return;
        }
        // Interrupts since the last look.
        let mut v = [0u8; 8];
        let fired = match irqs.then(|| (&self.irqs[c.cq.vector as usize]).read(&mut v)) {
            Some(Ok(8)) => u64::from_ne_bytes(v),
            _ => 0,
        };
        let mut ready = std::mem::take(&mut self.ready_buf);
        self.d.ready_cqes(&c.cq, &mut ready);
        for (idx, raw) in &ready {
            let first = self.cqs[i].seen.get(idx);
            // A CQE as first seen passed check_cqe then, whose verdict depends only on its
            // bytes and on objects that never change: checked once, not at every check it
            // stays unconsumed.
            if first == Some(raw) {
                continue;
            }
            self.check_cqe(i, raw);
            if !self.hostile {
                if let Some(first) = first {
                    assert_eq!(
                        first, raw,
                        "CQ {}: unconsumed CQE {idx} was overwritten",
                        self.cqs[i].cq.id
                    );
                }
            }
        }
        let c = &mut self.cqs[i];
        if !self.hostile {
            for (idx, _) in c.seen.iter() {
                assert!(
                    ready.iter().any(|(r, _)| r == idx),
                    "CQ {}: unconsumed CQE {idx} disappeared",
                    c.cq.id
                );
            }
        }
        for (idx, raw) in ready.iter() {
            c.seen.entry(*idx).or_insert_with(|| {
                let e = Cqe::read_from_bytes(&raw[..]).unwrap();
                qpip_fuzz::trace!(
                    "  CQ {} CQE {idx}: qp {} op {} status {} detail {} len {} wr_id {}",
                    c.cq.id,
                    e.qp,
                    e.opcode,
                    e.status,
                    e.detail,
                    e.byte_len,
                    e.wr_id
                );
                *raw
            });
        }
        c.interrupts += fired;
        if fired > 0 {
            c.armed = false;
        }
        if !self.hostile {
            assert!(
                c.interrupts <= c.arms,
                "CQ {}: {} interrupts for {} arms",
                c.cq.id,
                c.interrupts,
                c.arms
            );
            assert!(
                !c.armed || ready.is_empty(),
                "CQ {}: armed with a completion beyond the head, but no interrupt",
                c.cq.id
            );
        }
        self.ready_buf = ready;
    }

    fn check_cqe(&self, cq: usize, raw: &[u8; 64]) {
        let c = Cqe::read_from_bytes(&raw[..]).unwrap();
        assert!(
            c.opcode == CQE_OP_SEND || c.opcode == CQE_OP_RECV,
            "CQE opcode: {c:?}"
        );
        assert!(c.status <= CQE_STATUS_BAD_DEST, "CQE status: {c:?}");
        assert!(c.detail <= CQE_DETAIL_REGION_GONE, "CQE detail: {c:?}");
        // A TCP QP's receive in a region deregistered under it.
        if c.detail == CQE_DETAIL_REGION_GONE {
            assert_eq!(c.status, CQE_STATUS_LOCAL_PROTECTION, "REGION_GONE: {c:?}");
        }
        assert_eq!(c.reserved, [0; 19], "CQE reserved bytes: {c:?}");
        assert_eq!(c.owner & !1, 0, "CQE owner has only the phase bit: {c:?}");
        let owner_ok = self.qps.iter().any(|q| {
            q.qp.id == c.qp
                && if c.opcode == CQE_OP_SEND {
                    q.send_cq == cq
                } else {
                    q.recv_cq == cq
                }
        });
        assert!(
            owner_ok,
            "CQE on CQ {} names QP {} which does not complete there: {c:?}",
            self.cqs[cq].cq.id, c.qp
        );
        if c.status == CQE_STATUS_SUCCESS && c.opcode == CQE_OP_RECV {
            assert!(
                c.byte_len as usize <= 65535 - 8,
                "received more than a datagram: {c:?}"
            );
        }
        if c.status != CQE_STATUS_SUCCESS && c.status != CQE_STATUS_LOCAL_LENGTH {
            assert_eq!(c.byte_len, 0, "error CQE with a length: {c:?}");
        }
    }

    // -- what the input drives --

    fn ip(&self, input: &mut Input) -> [u8; 16] {
        match input.choose(7) {
            0 | 1 => LOOPBACK,
            2 => wire::link_local(&DEFAULT_MAC).octets(),
            3 => [0; 16],
            4 => {
                let mut a = [0u8; 16];
                a[..4].copy_from_slice(&[0xfd, 0x51, 0x50, 0x50]);
                a[15] = 1;
                a
            }
            5 => {
                let mut a = [0u8; 16];
                a[0] = 0xff;
                a[1] = 0x02;
                a[15] = 1;
                a
            }
            _ => input.array(),
        }
    }

    fn sges(&self, input: &mut Input, n: usize) -> Vec<Sge> {
        (0..n)
            .map(|_| {
                let m = &self.mrs[input.choose(self.mrs.len())];
                let lkey = match input.choose(6) {
                    0..=3 => m.lkey,
                    4 => 0,
                    _ => input.u32(),
                };
                let addr = match input.choose(5) {
                    0..=2 => m.iova + input.u16() as u64 % (m.len + 16),
                    3 => m.iova.wrapping_sub(input.u8() as u64),
                    _ => input.u64(),
                };
                let length = match input.choose(5) {
                    0..=2 => input.u16() as u32 % 600,
                    3 => 0,
                    _ => input.u32(),
                };
                Sge { addr, length, lkey }
            })
            .collect()
    }

    /// A WQE for a send or receive ring: structured (with noise) or raw.
    fn wqe(&mut self, input: &mut Input, send: bool) -> [u8; 128] {
        if input.choose(6) == 0 {
            return input.array();
        }
        let mut h = Wqe::new_zeroed();
        h.wr_id = self.next_wr_id;
        self.next_wr_id += 1;
        h.opcode = match input.choose(8) {
            0 => input.u8(),
            1 => {
                if send {
                    WQE_OP_RECV
                } else {
                    WQE_OP_SEND
                }
            }
            _ => {
                if send {
                    WQE_OP_SEND
                } else {
                    WQE_OP_RECV
                }
            }
        };
        let mut slot = [0u8; 128];
        if send {
            h.imm_data = input.u8() as u32;
            h.dest_addr = self.ip(input);
            h.dest_port = [7, 9, 11, 0, 12][input.choose(5)];
            if input.choose(3) == 0 {
                h.flags = WQE_FLAG_INLINE;
                h.inline_len = input.u8() as u32 % 96;
                let n = h.inline_len.min(MAX_INLINE) as usize;
                slot[48..48 + n].copy_from_slice(&input.bytes(n));
            }
        }
        if h.flags == 0 {
            let n = input.u8() as usize % 7;
            h.num_sge = n as u8;
            let sges = self.sges(input, n.min(5));
            slot[48..48 + sges.as_bytes().len()].copy_from_slice(sges.as_bytes());
        }
        slot[..48].copy_from_slice(h.as_bytes());
        if input.choose(10) == 0 {
            let at = input.u8() as usize % 48;
            slot[at] = input.u8();
        }
        slot
    }

    fn post(&mut self, input: &mut Input, send: bool) {
        let q = input.choose(self.qps.len());
        let slot = self.wqe(input, send);
        let qp = &mut self.qps[q].qp;
        let (at, value) = if send {
            (qp.push_sq(), qp.sq_tail)
        } else {
            (qp.push_rq(), qp.rq_tail)
        };
        let (ctx, off) = (qp.ctx, qp_db(qp.slot, send));
        qpip_fuzz::trace!(
            "  {} WQE on QP {} (index {}): {:02x?}",
            if send { "send" } else { "recv" },
            qp.id,
            value - 1,
            &slot[..64]
        );
        self.d.write(at, &slot);
        if input.bool() {
            self.d.ring(ctx, off, value);
        }
    }

    fn ring_qp(&mut self, input: &mut Input) {
        let qp = &self.qps[input.choose(self.qps.len())].qp;
        let send = input.bool();
        let tail = if send { qp.sq_tail } else { qp.rq_tail };
        let value = match input.choose(4) {
            0 | 1 => tail,
            2 => tail.wrapping_add(input.u8() as u32),
            _ => input.u32(),
        };
        self.d.ring(qp.ctx, qp_db(qp.slot, send), value);
    }

    fn ring_cq(&mut self, input: &mut Input) {
        let i = input.choose(self.cqs.len());
        let c = &mut self.cqs[i];
        let (ctx, slot) = (c.cq.ctx, c.cq.slot);
        match input.choose(3) {
            0 => {
                c.cq.arm_seq = c.cq.arm_seq.wrapping_add(1);
                c.arms += 1;
                c.armed = true;
                let v = c.cq.arm_seq;
                self.d.ring(ctx, cq_arm_seq(slot), v);
            }
            1 => {
                let v = c.cq.head;
                self.d.ring(ctx, cq_head(slot), v);
            }
            _ => {
                self.hostile = true;
                self.d.ring(ctx, cq_head(slot), input.u32());
            }
        }
    }

    fn consume(&mut self, input: &mut Input) {
        let i = input.choose(self.cqs.len());
        let n = input.u8() % 9;
        let c = &self.cqs[i];
        if !c.alive {
            return;
        }
        let mut head = c.cq.head;
        for _ in 0..n {
            if self.d.ready_cqe(&self.cqs[i].cq, head).is_none() {
                break;
            }
            head = head.wrapping_add(1);
        }
        let c = &mut self.cqs[i];
        self.d.consume_cq(&mut c.cq, &mut c.seen, head);
    }

    /// Whose doorbell page (context A's or B's, live or destroyed) a raw write goes to.
    fn page(&self, input: &mut Input) -> u32 {
        match input.choose(3) {
            0 | 1 => self.ctxs[0],
            _ => self.ctxs[1],
        }
    }

    fn admin(&mut self, input: &mut Input) {
        let c = match input.choose(5) {
            0 => {
                let q = &self.qps[input.choose(self.qps.len())].qp;
                cmd0(ADMIN_OP_DESTROY_QP, q.ctx, q.id)
            }
            1 => {
                let c = &self.cqs[input.choose(self.cqs.len())].cq;
                cmd0(ADMIN_OP_DESTROY_CQ, c.ctx, c.id)
            }
            2 => {
                let m = &self.mrs[input.choose(self.mrs.len())];
                cmd0(ADMIN_OP_DEREG_MR, m.ctx, m.lkey)
            }
            3 => cmd0(ADMIN_OP_DESTROY_CTX, self.ctxs[1], 0),
            _ => query_cmd(ADMIN_OP_QUERY_STATS, QUERY_BUF, PAGE as u32),
        };
        // Let the engine finish what the doorbells gave it first (and check it), so that what
        // happens in the command's own run is the command's doing.
        self.run();
        let done = self.d.call(c);
        if done.status != ADMIN_STATUS_OK {
            self.check();
            return;
        }
        match c.opcode {
            ADMIN_OP_DESTROY_CQ => {
                self.cqs
                    .iter_mut()
                    .filter(|x| x.cq.id == c.handle)
                    .for_each(|x| x.alive = false);
            }
            ADMIN_OP_DEREG_MR => {
                self.mrs
                    .iter_mut()
                    .filter(|m| m.lkey == c.handle)
                    .for_each(|m| m.alive = false);
            }
            ADMIN_OP_DESTROY_CTX => {
                let ctx = c.ctx;
                self.ctx_alive[1] = false;
                self.cqs
                    .iter_mut()
                    .filter(|x| x.cq.ctx == ctx)
                    .for_each(|x| x.alive = false);
                self.mrs
                    .iter_mut()
                    .filter(|m| m.ctx == ctx)
                    .for_each(|m| m.alive = false);
            }
            _ => {}
        }
        self.writable = self.writable();
        self.check();
    }
}

fn qp_db(slot: u32, send: bool) -> u32 {
    if send {
        qp_sq_tail(slot)
    } else {
        qp_rq_tail(slot)
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let mut w = world();
    for _ in 0..300 {
        if input.is_empty() {
            break;
        }
        let kind = input.choose(13);
        qpip_fuzz::trace!("op {kind}");
        match kind {
            0 | 1 => w.post(&mut input, true),
            2 => w.post(&mut input, false),
            3 => w.ring_qp(&mut input),
            4 => w.ring_cq(&mut input),
            5 => {
                // Any word of a doorbell page (change count, sleeping flag, slots of objects
                // that do not exist), with or without a change-count bump.
                w.hostile = true;
                let page = w.page(&mut input);
                let off = (input.u16() as u32 % DOORBELL_PAGE_SIZE) & !3;
                let v = input.u32();
                if input.bool() {
                    w.d.ring(page, off, v);
                } else {
                    w.d.db_write(page, off, v);
                }
            }
            6 => {
                // A whole doorbell page of arbitrary bytes (guest RAM: the process's stores).
                w.hostile = true;
                let page = w.page(&mut input);
                let len = input.u16() as usize % (DOORBELL_PAGE_SIZE as usize + 1);
                let bytes = input.bytes(len);
                let at = w.d.db_page(page);
                w.d.write(at, &bytes);
            }
            7 | 8 => w.run(),
            9 | 10 => w.consume(&mut input),
            11 => w.admin(&mut input),
            _ => {
                // Data for sends: bytes into a region (through guest RAM, as the process
                // would write its buffer).
                let m = &w.mrs[input.choose(w.mrs.len())];
                let off = input.u16() as u64 % m.len;
                let n = (input.u8() as u64).min(m.len - off) as usize;
                let first = m.iova % PAGE;
                let gpa = m.base + first + off;
                let bytes = input.bytes(n);
                w.d.write(gpa, &bytes);
            }
        }
    }
    w.run();
});
