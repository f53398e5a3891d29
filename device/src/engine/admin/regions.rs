//! Memory regions' admin commands: REG_MR, whose page list may take several passes to
//! read, and DEREG_MR, after which nothing moves to or from the region's pages.

use log::debug;
use qpip_abi::admin::*;
use vm_memory::GuestMemoryMmap;

use super::{Outcome, Results};
use crate::engine::memory::{self, MemoryRegion};
use crate::engine::objects::PendingCmd;
use crate::engine::Engine;

/// A REG_MR between passes.
#[derive(Debug)]
pub(super) struct Registration {
    pub(super) cmd: PendingCmd,
    ctx: u32,
    args: RegMrArgs,
    list: memory::PageListReader,
}

impl Engine {
    /// Starts a registration: checks it, then reads as much of its page list as this
    /// pass's budget allows ([`Engine::go_on_registering`]).
    pub(super) fn reg_mr(
        &mut self,
        mem: &GuestMemoryMmap,
        cmd: PendingCmd,
        ctx: u32,
        args: RegMrArgs,
    ) -> Outcome {
        if let Err(status) = self.may_register(&args, ctx) {
            return Outcome::Done(Err(status));
        }
        match memory::PageListReader::new(args.page_list, args.npages) {
            Some(list) => self.go_on_registering(
                mem,
                Registration {
                    cmd,
                    ctx,
                    args,
                    list,
                },
            ),
            None => Outcome::Done(Err(ADMIN_STATUS_BAD_ADDRESS)),
        }
    }

    /// Whether `ctx` may register the region `args` describe.
    fn may_register(&self, args: &RegMrArgs, ctx: u32) -> Result<(), u16> {
        if !self.objects.has_context(ctx) {
            return Err(ADMIN_STATUS_BAD_HANDLE);
        }
        MemoryRegion::check(args)?;
        if self.objects.mr_count() >= MAX_MRS as usize {
            return Err(ADMIN_STATUS_NO_RESOURCES);
        }
        // Page lists are the one thing a guest can make large here: bounded per function.
        let held: u64 = self.objects.mrs().map(|m| m.pages.len() as u64).sum();
        if held + args.npages as u64 > self.region_pages {
            debug!(
                "REG_MR of {} pages: {held} of the function's {} held",
                args.npages, self.region_pages
            );
            return Err(ADMIN_STATUS_NO_RESOURCES);
        }
        Ok(())
    }

    /// Reads the next part of a registration's page list; once it is whole, the region is
    /// registered. Until then the registration waits in the admin queue and the commands
    /// after it wait for it.
    pub(super) fn go_on_registering(
        &mut self,
        mem: &GuestMemoryMmap,
        mut r: Registration,
    ) -> Outcome {
        match r.list.read(mem, &mut self.admin.page_budget) {
            None => Outcome::Done(Err(ADMIN_STATUS_BAD_ADDRESS)),
            Some(false) => {
                self.admin.registering = Some(r);
                Outcome::Pending
            }
            Some(true) => Outcome::Done(self.may_register(&r.args, r.ctx).map(|()| {
                let mr = MemoryRegion::new(r.ctx, &r.args, r.list.into_pages());
                let remote = mr.access & (MR_ACCESS_REMOTE_READ | MR_ACCESS_REMOTE_WRITE) != 0;
                let lkey = self.objects.insert_mr(mr);
                // One key serves both: the rkey is only handed out when remote access is
                // allowed.
                (lkey as u64, if remote { lkey as u64 } else { 0 }, 0)
            })),
        }
    }

    pub(super) fn dereg_mr(
        &mut self,
        mem: &GuestMemoryMmap,
        ctx: u32,
        h: u32,
    ) -> Result<Results, u16> {
        match self.objects.mr(h) {
            Some(mr) if mr.ctx == ctx && self.objects.has_context(ctx) => {
                if self.region_tripwired(h) {
                    Err(ADMIN_STATUS_BUSY)
                } else {
                    self.objects.remove_mr(h);
                    // Invalid at once: nothing moves to or from its pages after this
                    // command completes (the driver unpins them then).
                    self.kinds_region_gone(mem, ctx, h);
                    Ok((0, 0, 0))
                }
            }
            _ => Err(ADMIN_STATUS_BAD_HANDLE),
        }
    }
}
