//! Subcommands that move data: `udp`, `traffic` and `kicks`.

use crate::*;

pub(crate) fn cmd_udp(count: u64) -> u32 {
    let mut checks = Checks::default();
    let r = Ctx::open().and_then(|mut ctx| {
        udp_exchange(&mut ctx, 7000, count, "udp")?;
        println!("@udp.kicks={}", ctx.kicks);
        Ok(())
    });
    checks.check("udp.exchange", r);
    checks.failed
}

pub(crate) fn cmd_traffic(seconds: u64) -> u32 {
    let mut checks = Checks::default();
    let r = Ctx::open().and_then(|mut ctx| {
        let mut p = Pair::new(&mut ctx, 7100)?;
        for n in 0..8 {
            p.post_recv(&mut ctx, n);
        }
        // Killed with an admin command outstanding too.
        pending_accept(&ctx, 5100, 1)?;
        let end = Instant::now() + Duration::from_secs(seconds);
        let mut n = 0u64;
        while Instant::now() < end {
            p.exchange_one(&mut ctx, n, 64 + (n as usize % 1000))?;
            p.post_recv(&mut ctx, n + 8);
            n += 1;
            if n == 10 {
                println!("@traffic.running=1");
                flush();
            }
        }
        println!("@traffic.datagrams={n}");
        Ok(())
    });
    checks.check("traffic", r);
    checks.failed
}

/// Writes the kick register `n` times (after `/lab/go` appears, if `wait` says so) and
/// reports the guest time per write: over the whole loop, and the median of single writes
/// made `gap_us` apart (`--gap-us`, default 0: back to back). Under TCG every write is a
/// trapped MMIO access; whether the vCPU also waits for the device (a synchronous vfio-user
/// message) is what the VM test looks at from the host.
pub(crate) fn cmd_kicks(n: u64, wait: bool, gap_us: u64) -> u32 {
    let mut c = Checks::default();
    let r = (|| -> Result<(), String> {
        let ctx = Ctx::open()?;
        if wait {
            let deadline = Instant::now() + Duration::from_secs(120);
            while !std::path::Path::new("/lab/go").exists() {
                ensure(Instant::now() < deadline, || {
                    "no /lab/go within 120 s".into()
                })?;
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let mut each = Vec::with_capacity(n as usize);
        let t0 = Instant::now();
        for _ in 0..n {
            if gap_us > 0 {
                std::thread::sleep(Duration::from_micros(gap_us));
            }
            let t = Instant::now();
            // SAFETY: the kick register at the start of the mapped kick page.
            unsafe { ptr::write_volatile(ctx.kick.add(KICK as usize).cast::<u32>(), 1) };
            each.push(t.elapsed().as_nanos());
        }
        let t = t0.elapsed();
        each.sort_unstable();
        println!("@kicks.count={n}");
        println!("@kicks.ns_per_kick={}", t.as_nanos() / n.max(1) as u128);
        println!(
            "@kicks.median_ns={}",
            each.get(each.len() / 2).copied().unwrap_or(0)
        );
        flush();
        if wait {
            std::fs::write("/lab/kicked", b"").map_err(|e| format!("/lab/kicked: {e}"))?;
        }
        Ok(())
    })();
    c.check("kicks", r);
    c.failed
}
