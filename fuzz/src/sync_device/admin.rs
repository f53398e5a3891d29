//! The admin queue as the guest's driver drives it, and the set-up of objects (contexts,
//! CQs, QPs, regions) for the data-path targets.

use std::collections::HashMap;

use qpip_testkit::{
    bind_cmd, contiguous_pages, mr_body, Cq, GuestPages, PlannedCq, PlannedQp, Qp, Ram,
};
use zerocopy::FromBytes;

use super::*;
use crate::{check_admin_cqe, cmd, create_ctx_cmd};

impl SyncDevice {
    /// Learns from a completion which contexts exist and where their doorbell pages are.
    fn note_contexts(&mut self, cmd: &AdminCmd, c: &AdminCqe) {
        if c.status != ADMIN_STATUS_OK {
            return;
        }
        match cmd.opcode {
            ADMIN_OP_CREATE_CTX => {
                let page = create_ctx_page(cmd).expect("a CREATE_CTX");
                let ctx = c.result0 as u32;
                self.live_pages.insert(ctx, page);
                self.db_pages.insert(ctx, page);
                self.was_live.insert(page);
            }
            ADMIN_OP_DESTROY_CTX => {
                if let Some(page) = self.live_pages.remove(&cmd.ctx) {
                    self.was_live.insert(page);
                }
            }
            _ => {}
        }
    }

    // -- admin queue --

    /// Puts a command in the submission ring and tells the engine (REG_ADMIN_SQ_TAIL), without
    /// running it. The harness assigns cmd_id.
    pub fn submit(&mut self, mut cmd: AdminCmd) -> u32 {
        let id = self.next_cmd_id;
        self.next_cmd_id = self.next_cmd_id.wrapping_add(1).max(1);
        cmd.cmd_id = id;
        trace!(
            "submit #{id}: opcode {:#04x} ctx {} handle {:#x} body {:02x?}",
            cmd.opcode,
            cmd.ctx,
            cmd.handle,
            &cmd.body[..24]
        );
        let at = self.admin.push();
        self.write_obj(at, &cmd);
        if let Some(page) = create_ctx_page(&cmd) {
            self.named_pages.insert(page);
        }
        self.outstanding.insert(id, cmd);
        self.control(Control::AdminSqTail(self.admin.tail));
        id
    }

    /// Takes every completion the device has written, releasing the slots
    /// (REG_ADMIN_CQ_HEAD). Checks each against the command it completes.
    pub fn completions(&mut self) -> Vec<(AdminCmd, AdminCqe)> {
        let mut out = Vec::new();
        let start = self.admin.head;
        while let Some(c) = self.admin.take(&self.e.ram) {
            trace!(
                "  complete #{}: opcode {:#04x} status {} results {:#x} {:#x} {:#x}",
                c.cmd_id,
                c.opcode,
                c.status,
                c.result0,
                c.result1,
                c.result2
            );
            match self.outstanding.remove(&c.cmd_id) {
                // Once the driver has written over its own rings, an id may name a command
                // the device read from what was written there.
                Some(cmd) if self.hostile && c.opcode != cmd.opcode => {}
                Some(cmd) => {
                    // A query the driver aimed at its own completion ring may have written
                    // over the rest of a completion (its results and reserved bytes).
                    if !self.hostile {
                        check_admin_cqe(&c, cmd.opcode);
                    }
                    self.note_contexts(&cmd, &c);
                    out.push((cmd, c));
                }
                None if self.hostile => {}
                None if self.forgotten.contains_key(&c.cmd_id) => {
                    let cmd = self.forgotten.remove(&c.cmd_id).expect("present");
                    check_admin_cqe(&c, cmd.opcode);
                    self.note_contexts(&cmd, &c);
                }
                None => panic!("completion for a command not outstanding: {c:?}"),
            }
            if out.len() > ADMIN_DEPTH as usize || self.admin.head.wrapping_sub(start) > ADMIN_DEPTH
            {
                assert!(self.hostile, "more completions than ring slots");
                break;
            }
        }
        if !out.is_empty() {
            self.control(Control::AdminCqHead(self.admin.head));
        }
        out
    }

    /// Submits, runs the engine and returns the command's completion (synchronous commands).
    pub fn call(&mut self, cmd: AdminCmd) -> AdminCqe {
        let id = self.submit(cmd);
        self.run();
        let done = self.completions();
        done.into_iter()
            .find(|(_, c)| c.cmd_id == id)
            .map(|(_, c)| c)
            .unwrap_or_else(|| panic!("admin command {:#x} did not complete at once", cmd.opcode))
    }

    /// As [`Self::call`], for commands the setup needs to succeed; returns result0/result1.
    /// Runs the engine only until the command completes (a synchronous command does in the
    /// pass that takes it), not until it settles: a target builds its objects afresh for
    /// every input, and the passes that would find nothing to do cost as much as the rest
    /// of the set-up.
    pub fn must(&mut self, cmd: AdminCmd) -> (u64, u64) {
        let id = self.submit(cmd);
        let mut c = None;
        for _ in 0..64 {
            self.step();
            c = self.completions().into_iter().find(|(_, c)| c.cmd_id == id);
            if c.is_some() {
                break;
            }
        }
        let (_, c) =
            c.unwrap_or_else(|| panic!("setup command {:#x} did not complete", cmd.opcode));
        assert_eq!(
            c.status, ADMIN_STATUS_OK,
            "setup command {:#x} failed: {c:?}",
            cmd.opcode
        );
        (c.result0, c.result1)
    }

    // -- object set-up helpers (for the data-path target) --
    // The layouts are the test kit's ([`PlannedCq`], [`PlannedQp`]) on this harness's guest
    // memory (its shadow knows every page list written); what is added here is the sealing.

    /// A context with a fresh page of guest RAM as its doorbell page.
    pub fn create_ctx(&mut self) -> u32 {
        let page = self.alloc_pages(1);
        self.must(create_ctx_cmd(page)).0 as u32
    }

    /// `n` fresh pages in one piece, and their page list (sealed: the object helpers are
    /// for data-path targets, whose commands never name a page list as anything else).
    fn pages(&mut self, n: u64) -> (Vec<u64>, u64) {
        let (pages, list) = contiguous_pages(self, n);
        self.seal(list, PAGE * Ram::page_list_pages(n as usize));
        (pages, list)
    }

    /// Submits `cmds` together, runs the engine until all have completed, and returns each
    /// one's (result0, result1) in order; all must succeed. A target's set-up runs its
    /// independent commands this way: one engine pass for a batch instead of one for each.
    pub fn must_all(&mut self, cmds: &[AdminCmd]) -> Vec<(u64, u64)> {
        assert!(
            cmds.len() + self.outstanding.len() <= ADMIN_DEPTH as usize,
            "a set-up batch larger than the admin queue"
        );
        let ids: Vec<u32> = cmds.iter().map(|&c| self.submit(c)).collect();
        let mut done: HashMap<u32, AdminCqe> = HashMap::new();
        for _ in 0..64 {
            self.step();
            done.extend(self.completions().into_iter().map(|(_, c)| (c.cmd_id, c)));
            if ids.iter().all(|id| done.contains_key(id)) {
                break;
            }
        }
        ids.iter()
            .zip(cmds)
            .map(|(id, cmd)| {
                let c = done
                    .get(id)
                    .unwrap_or_else(|| panic!("setup command {:#x} did not complete", cmd.opcode));
                assert_eq!(
                    c.status, ADMIN_STATUS_OK,
                    "setup command {:#x} failed: {c:?}",
                    cmd.opcode
                );
                (c.result0, c.result1)
            })
            .collect()
    }

    /// A context on a fresh page: its `CREATE_CTX`.
    pub fn plan_ctx(&mut self) -> AdminCmd {
        let page = self.alloc_pages(1);
        create_ctx_cmd(page)
    }

    /// A CQ of `depth` entries in fresh pages, raising `vector`: its `CREATE_CQ`, and what
    /// makes the [`Cq`] of the command's results.
    pub fn plan_cq(&mut self, ctx: u32, depth: u32, vector: u32) -> (AdminCmd, PlannedCq) {
        let (c, plan) = PlannedCq::new(self, ctx, depth, vector);
        let list = plan.args.page_list;
        self.seal(list, PAGE * Ram::page_list_pages(plan.pages.len()));
        (c, plan)
    }

    /// A CQ of `depth` entries in fresh pages, raising `vector`.
    pub fn create_cq(&mut self, ctx: u32, depth: u32, vector: u32) -> Cq {
        let (c, plan) = self.plan_cq(ctx, depth, vector);
        plan.created(self.must(c))
    }

    /// A QP with both rings `depth` deep in fresh pages, completing to CQs `cqs` (ids):
    /// its `CREATE_QP`, and what makes the [`Qp`] of the command's results.
    pub fn plan_qp(
        &mut self,
        ctx: u32,
        cqs: (u32, u32),
        depth: u32,
        types: (u8, u8),
    ) -> (AdminCmd, PlannedQp) {
        let (c, plan) = PlannedQp::new(self, ctx, cqs, depth, types);
        let n = plan.rings.0.len();
        // The device reads rings and page lists, never writes them.
        for at in [plan.rings.0[0], plan.rings.1[0]] {
            self.seal(at, n as u64 * PAGE);
        }
        for at in [plan.args.sq_page_list, plan.args.rq_page_list] {
            self.seal(at, PAGE * Ram::page_list_pages(n));
        }
        (c, plan)
    }

    /// A QP with both rings `depth` deep in fresh pages (message framing if TCP).
    pub fn create_qp(&mut self, ctx: u32, scq: u32, rcq: u32, depth: u32, qp_type: u8) -> Qp {
        let framing = if qp_type == QP_TYPE_TCP {
            FRAMING_MESSAGE
        } else {
            0
        };
        let (c, plan) = self.plan_qp(ctx, (scq, rcq), depth, (qp_type, framing));
        plan.created(self.must(c))
    }

    /// A region of `len` bytes at `offset` into `npages` fresh pages: its `REG_MR` (which
    /// must succeed: pages without a write right are sealed at once), its iova and first
    /// page. The command's results are the lkey and the rkey.
    pub fn plan_mr(
        &mut self,
        ctx: u32,
        npages: u64,
        offset: u32,
        len: u64,
        access: u32,
    ) -> (AdminCmd, u64, u64) {
        let (pages, list) = self.pages(npages);
        let base = pages[0];
        let iova = 0x7f00_0000_0000 + base - RAM_BASE + offset as u64;
        let a = mr_body(list, npages as u32, offset, iova, len, access);
        if access & (MR_ACCESS_LOCAL_WRITE | MR_ACCESS_REMOTE_WRITE) == 0 {
            self.seal(base, npages * PAGE); // nothing may write it
        }
        (cmd(ADMIN_OP_REG_MR, ctx, 0, &a), iova, base)
    }

    pub fn bind(&mut self, ctx: u32, qp: u32, addr: [u8; 16], port: u16) -> u16 {
        self.must(bind_cmd(ctx, qp, addr, port)).0 as u16
    }
}

/// The doorbell page a `CREATE_CTX` command names (`None` for other commands).
pub fn create_ctx_page(c: &AdminCmd) -> Option<u64> {
    (c.opcode == ADMIN_OP_CREATE_CTX)
        .then(|| {
            CreateCtxArgs::read_from_prefix(&c.body[..])
                .expect("48 bytes")
                .0
        })
        .map(|a| a.doorbell_page)
}

/// Fresh pages and page lists as the harness hands them out: through its own RAM accessors,
/// so that the shadow knows every byte written.
impl GuestPages for SyncDevice {
    fn alloc_pages(&mut self, n: u64) -> u64 {
        SyncDevice::alloc_pages(self, n)
    }

    fn page_list(&mut self, pages: &[u64]) -> u64 {
        SyncDevice::page_list(self, pages)
    }
}
