//! `tripwire`: CREATE_TRIPWIRE and DESTROY_TRIPWIRE through the driver. A tripwire names a
//! CQ and two regions of its file's context: the driver refuses another file's objects
//! before the device sees them (ENOENT), passes on what only the device can check (the
//! range inside its region, the arm word aligned inside its: EINVAL), and the objects a
//! tripwire holds cannot go while it lives (EBUSY). Closing a file destroys its tripwires:
//! one file takes every tripwire the device has and is closed without destroying them, and
//! another file then gets them all.

use crate::*;
use qpip_abi::admin::{MAX_TRIPWIRES, MR_ACCESS_REMOTE_WRITE};

/// What a tripwire of one context uses: a CQ, a watched region of two pages and a region
/// of one page for arm words.
pub(crate) struct Objects {
    pub(crate) cq: u32,
    buf: u64,
    lkey: u32,
    arm: u64,
    arm_lkey: u32,
}

impl Objects {
    pub(crate) fn new(ctx: &Ctx) -> Result<Objects, String> {
        let cq = ok(ctx.create_cq(8, -1), "CREATE_CQ")?;
        unmap(cq.ring, cq.ring_len);
        let buf = anon(2 * PAGE) as u64;
        let access = MR_ACCESS_LOCAL_WRITE | MR_ACCESS_REMOTE_WRITE;
        let lkey = ok(ctx.reg_mr(buf, 2 * PAGE as u64, access), "REG_MR")?;
        let arm = anon(PAGE) as u64;
        let arm_lkey = ok(
            ctx.reg_mr(arm, PAGE as u64, MR_ACCESS_LOCAL_WRITE),
            "REG_MR (arm words)",
        )?;
        Ok(Objects {
            cq: cq.handle,
            buf,
            lkey,
            arm,
            arm_lkey,
        })
    }

    /// Good arguments: 64 bytes from byte 100 of the watched region, the arm word at `slot`.
    pub(crate) fn args(&self, slot: u64, tag: u64) -> CreateTripwire {
        let mut a = CreateTripwire::new();
        a.lkey = self.lkey;
        a.addr = self.buf + 100;
        a.len = 64;
        a.arm_lkey = self.arm_lkey;
        a.arm_addr = self.arm + 4 * slot;
        a.cq = self.cq;
        a.tag = tag;
        a
    }

    /// Destroys the CQ and deregisters both regions: each must be free again.
    fn free(&self, ctx: &Ctx) -> Result<(), String> {
        ok(ctx.destroy(IOCTL_DEREG_MR, self.lkey), "DEREG_MR (watched)")?;
        ok(ctx.destroy(IOCTL_DEREG_MR, self.arm_lkey), "DEREG_MR (arm)")?;
        ok(ctx.destroy(IOCTL_DESTROY_CQ, self.cq), "DESTROY_CQ")
    }
}

/// CREATE_TRIPWIRE with `a`: the handle it returned.
fn create(ctx: &Ctx, a: &CreateTripwire) -> Result<u32, i32> {
    let mut a = *a;
    ctx.ioc(IOCTL_CREATE_TRIPWIRE, &mut a)?;
    Ok(a.handle)
}

pub(crate) fn cmd_tripwire() -> u32 {
    let mut c = Checks::default();
    let r = (|| -> Result<(), String> {
        let ctx = Ctx::open()?;
        let other = Ctx::open()?;
        let mine = Objects::new(&ctx)?;
        let theirs = Objects::new(&other)?;
        arguments(&mut c, &ctx, &mine, &theirs);
        lifetime(&mut c, &ctx, &other, &mine)?;
        ok(
            create(&other, &theirs.args(0, 1)),
            "CREATE_TRIPWIRE (other)",
        )
        .map(|_| println!("@tripwire.left_to_close=1"))?;
        Ok(())
    })();
    c.check("tripwire.sequence", r);
    c.check("tripwire.close_destroys", close_destroys());
    c.failed
}

/// Each argument the driver or the device refuses, and with what.
fn arguments(c: &mut Checks, ctx: &Ctx, mine: &Objects, theirs: &Objects) {
    let good = mine.args(0, 7);
    let cases: [(&str, CreateTripwire, i32); 10] = [
        (
            "reserved_nonzero",
            CreateTripwire {
                reserved: 1,
                ..good
            },
            libc::EINVAL,
        ),
        (
            "foreign_cq",
            CreateTripwire {
                cq: theirs.cq,
                ..good
            },
            libc::ENOENT,
        ),
        (
            "foreign_region",
            CreateTripwire {
                lkey: theirs.lkey,
                addr: theirs.buf,
                ..good
            },
            libc::ENOENT,
        ),
        (
            "foreign_arm_region",
            CreateTripwire {
                arm_lkey: theirs.arm_lkey,
                arm_addr: theirs.arm,
                ..good
            },
            libc::ENOENT,
        ),
        (
            "unknown_cq",
            CreateTripwire {
                cq: 0xdead_beef,
                ..good
            },
            libc::ENOENT,
        ),
        (
            "empty_range",
            CreateTripwire { len: 0, ..good },
            libc::EINVAL,
        ),
        (
            "range_outside_region",
            CreateTripwire {
                addr: mine.buf + 2 * PAGE as u64 - 10,
                ..good
            },
            libc::EINVAL,
        ),
        (
            "huge_range",
            CreateTripwire {
                len: u64::MAX,
                ..good
            },
            libc::EINVAL,
        ),
        (
            "misaligned_arm_word",
            CreateTripwire {
                arm_addr: mine.arm + 2,
                ..good
            },
            libc::EINVAL,
        ),
        (
            "arm_word_outside_region",
            CreateTripwire {
                arm_addr: mine.arm + PAGE as u64,
                ..good
            },
            libc::EINVAL,
        ),
    ];
    for (name, a, errno) in cases {
        c.check(
            &format!("tripwire.{name}"),
            fails_with(create(ctx, &a), errno),
        );
    }
    let mut short = good;
    short.size = CREATE_TRIPWIRE_SIZE_V1 - 8;
    c.check(
        "tripwire.size_short",
        fails_with(create(ctx, &short), libc::EINVAL),
    );
}

/// A tripwire holds its CQ and both regions until it is destroyed, only by its own file.
fn lifetime(c: &mut Checks, ctx: &Ctx, other: &Ctx, o: &Objects) -> Result<(), String> {
    let t1 = ok(create(ctx, &o.args(0, 1)), "CREATE_TRIPWIRE")?;
    // A second one on the same objects; its arm word in the watched region itself.
    let mut a = o.args(1, 2);
    (a.arm_lkey, a.arm_addr) = (o.lkey, o.buf + PAGE as u64);
    let t2 = ok(
        create(ctx, &a),
        "CREATE_TRIPWIRE (arm word in the watched region)",
    )?;
    println!("@tripwire.handles={t1} {t2}");
    c.check(
        "tripwire.create",
        ensure(t1 != 0 && t2 != 0 && t1 != t2, || {
            format!("handles {t1} and {t2}")
        }),
    );
    c.check(
        "tripwire.watched_region_busy",
        fails_with(ctx.destroy(IOCTL_DEREG_MR, o.lkey), libc::EBUSY),
    );
    c.check(
        "tripwire.arm_region_busy",
        fails_with(ctx.destroy(IOCTL_DEREG_MR, o.arm_lkey), libc::EBUSY),
    );
    c.check(
        "tripwire.cq_busy",
        fails_with(ctx.destroy(IOCTL_DESTROY_CQ, o.cq), libc::EBUSY),
    );
    c.check(
        "tripwire.destroy_from_other_file",
        fails_with(other.destroy(IOCTL_DESTROY_TRIPWIRE, t1), libc::ENOENT),
    );
    c.check(
        "tripwire.destroy_unknown",
        fails_with(
            ctx.destroy(IOCTL_DESTROY_TRIPWIRE, 0xdead_beef),
            libc::ENOENT,
        ),
    );
    c.check(
        "tripwire.destroy_a_cq_handle",
        fails_with(ctx.destroy(IOCTL_DESTROY_TRIPWIRE, o.cq), libc::ENOENT),
    );
    c.check(
        "tripwire.destroy",
        ok(ctx.destroy(IOCTL_DESTROY_TRIPWIRE, t1), "DESTROY_TRIPWIRE"),
    );
    c.check(
        "tripwire.double_destroy",
        fails_with(ctx.destroy(IOCTL_DESTROY_TRIPWIRE, t1), libc::ENOENT),
    );
    // The other still holds the watched region (both) and the CQ, not the arm region.
    c.check(
        "tripwire.still_held_by_the_other",
        fails_with(ctx.destroy(IOCTL_DEREG_MR, o.lkey), libc::EBUSY),
    );
    ok(ctx.destroy(IOCTL_DESTROY_TRIPWIRE, t2), "DESTROY_TRIPWIRE")?;
    c.check("tripwire.objects_free_after_destroy", o.free(ctx));
    Ok(())
}

/// Tripwires created until the device has no more; how many, or an error if the refusal
/// was not ENOSPC.
fn fill(ctx: &Ctx, o: &Objects) -> Result<u64, String> {
    for n in 0..=MAX_TRIPWIRES as u64 {
        match create(ctx, &o.args(n % (PAGE as u64 / 4), n)) {
            Ok(_) => {}
            Err(libc::ENOSPC) => return Ok(n),
            Err(e) => return Err(format!("tripwire {n}: {}", errname(e))),
        }
    }
    Err(format!(
        "more than MAX_TRIPWIRES ({MAX_TRIPWIRES}) tripwires"
    ))
}

/// A file that holds every tripwire of the device (with its CQ and regions busy) is closed
/// without destroying them: another file then gets as many, which it could not before.
fn close_destroys() -> Result<(), String> {
    let waiting = Ctx::open()?;
    let wo = Objects::new(&waiting)?;
    {
        let full = Ctx::open()?;
        let fo = Objects::new(&full)?;
        let n = fill(&full, &fo)?;
        println!("@tripwire.limit={n}");
        ensure(n > 0, || "not one tripwire".into())?;
        ensure(
            create(&waiting, &wo.args(0, 0)) == Err(libc::ENOSPC),
            || "another file got a tripwire while the device had none left".into(),
        )?;
    }
    let n = fill(&waiting, &wo)?;
    println!("@tripwire.after_close={n}");
    // The full file's were the only ones (the earlier check leaves one to its file's close,
    // and that file is closed too).
    ensure(n == MAX_TRIPWIRES as u64, || {
        format!("{n} tripwires after the file holding them was closed, expected {MAX_TRIPWIRES}")
    })
}
