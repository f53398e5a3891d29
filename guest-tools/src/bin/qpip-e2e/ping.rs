//! `ping`: round trips, each echo compared byte for byte with what went out.

use std::net::SocketAddrV6;
use std::time::{Duration, Instant};

use qpip::{Completion, Context, Cq, EventKind, Framing, Opcode, SendWr};

use crate::args::{usage, Args};
use crate::data::{Gen, Tally};
use crate::qp::{any, cq_depth, errno_name, new_qp, wait_any};
use crate::{fail, Fail, DEPTH};

pub fn ping(ctx: &Context, a: &Args) -> Result<bool, Fail> {
    if !a.udp && a.framing == Framing::Stream {
        return Err(usage(
            "ping over TCP needs --message (a stream has no round trips to count)",
        ));
    }
    let peer = SocketAddrV6::new(a.addr.expect("checked"), a.port, 0, 0);
    let cq = ctx
        .create_cq(cq_depth(ctx, DEPTH * 2))
        .map_err(|e| fail("create CQ", e))?;
    let qp = new_qp(ctx, a, &cq)?;
    if a.udp {
        qp.bind(any(0)).map_err(|e| fail("bind", e))?;
    } else {
        qp.connect_wait(peer, a.wait)
            .map_err(|e| fail("connect", e))?;
    }
    let mut out = ctx
        .alloc(a.size.max(1))
        .map_err(|e| fail("register memory", e))?;
    // Larger than sent: an echo that grew would show. At least 64 KiB: on the device a
    // message-framed receive buffer not much larger than the message never completes (a
    // 100-byte message into a 101-byte buffer stalls; into 4096 bytes it arrives).
    let inb = ctx
        .alloc((a.size + 1).max(65536))
        .map_err(|e| fail("register memory", e))?;
    let mut gen = Gen::new(7);
    let (mut sent, mut got) = (Tally::new(a.framing), Tally::new(a.framing));
    let (mut lost, mut bad, mut stale) = (0u64, 0u64, 0u64);
    let mut rtts = Vec::new();
    let mut comps = [Completion::default(); 8];
    let mut recv_posted = false;
    let mut sends_out = 0u32;
    for i in 0..a.iters {
        // The message buffer is rewritten only once its send completed.
        await_sends(ctx, &cq, &mut sends_out, &mut recv_posted)?;
        gen.fill(&mut out.as_mut_slice()[..a.size]);
        // UDP: the message number leads, so an echo of an earlier try (a duplicate, or
        // one that came after its try was counted lost) is recognised and skipped.
        if a.udp && a.size >= 8 {
            out.as_mut_slice()[..8].copy_from_slice(&i.to_le_bytes());
        }
        // UDP: a try without an echo in 2 s is counted lost and the same message goes
        // again (a late echo of it is then still the right bytes).
        let answer = loop {
            if !recv_posted {
                qp.post_recv(1, &[inb.sge_all()])
                    .map_err(|e| fail("post receive", e))?;
                recv_posted = true;
            }
            let sge = [out.sge(0, a.size)];
            let wr = if a.udp {
                SendWr::new(2, &sge).to(peer)
            } else {
                SendWr::new(2, &sge).imm(i as u32)
            };
            // The message buffer is rewritten only once its send completed.
            await_sends(ctx, &cq, &mut sends_out, &mut recv_posted)?;
            let t0 = Instant::now();
            qp.post_send(&wr).map_err(|e| fail("post send", e))?;
            sends_out += 1;
            let limit = if a.udp {
                Duration::from_secs(2)
            } else {
                a.wait
            };
            let mut answer = None;
            while answer.is_none() && t0.elapsed() < limit {
                let n = wait_any(ctx, &cq, &mut comps, Duration::from_millis(200))?;
                for c in &comps[..n] {
                    if !c.is_ok() {
                        println!(
                            "@ping.error={:?}/{:?} {:?} at {i}",
                            c.status, c.detail, c.opcode
                        );
                        while let Ok(Some(ev)) = ctx.poll_event() {
                            println!("@ping.event={:?} {}", ev.kind, errno_name(ev.status));
                        }
                        return Ok(false);
                    }
                    match c.opcode {
                        Opcode::Send | Opcode::RdmaWrite | Opcode::RdmaRead => sends_out -= 1,
                        // Nothing here posts what would complete so.
                        Opcode::RecvImm | Opcode::Tripwire => {}
                        Opcode::Recv => {
                            recv_posted = false;
                            let len = c.byte_len as usize;
                            if a.udp && a.size >= 8 && len >= 8 && inb[..8] != out[..8] {
                                stale += 1;
                                qp.post_recv(1, &[inb.sge_all()])
                                    .map_err(|e| fail("post receive", e))?;
                                recv_posted = true;
                                continue;
                            }
                            answer = Some((t0.elapsed(), len));
                        }
                    }
                }
            }
            match answer {
                Some(x) => break x,
                // A datagram or its echo may be lost (the suite drops and corrupts frames on
                // purpose), and a TCG guest starved of CPU on a loaded host can miss the
                // wait for seconds: both are retried, and the budget only stops a dead peer
                // from looping forever (late echoes are recognised and skipped as stale).
                None if a.udp && lost < a.iters + 10 => lost += 1,
                None => {
                    println!(
                        "@ping.error=no echo within {} s at {i} ({lost} lost before)",
                        limit.as_secs()
                    );
                    return Ok(false);
                }
            }
        };
        let (rtt, len) = answer;
        rtts.push(rtt);
        sent.add(&out[..a.size]);
        got.add(&inb[..len]);
        if inb[..len] != out[..a.size] {
            bad += 1;
        }
    }
    if !a.udp {
        qp.close_wait(Duration::from_secs(60))
            .map_err(|e| fail("close", e))?;
        // The echo side closes once it saw our FIN; destroying the QP before its FIN came
        // would abort the connection (RST) under it.
        let _ = ctx.wait_event_for(
            qp.id(),
            EventKind::PeerClosed,
            Some(Duration::from_secs(60)),
        );
    }
    rtts.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let pick = |q: f64| {
        rtts.get(((rtts.len() as f64 - 1.0) * q) as usize)
            .map(|d| us(*d))
            .unwrap_or(0.0)
    };
    println!("@ping.count={}", rtts.len());
    println!("@ping.size={}", a.size);
    println!("@ping.lost={lost}");
    println!("@ping.mismatch={bad}");
    println!("@ping.stale={stale}");
    println!(
        "@ping.rtt_us=min {:.0} p50 {:.0} p90 {:.0} max {:.0}",
        pick(0.0),
        pick(0.5),
        pick(0.9),
        pick(1.0)
    );
    println!("@ping.sent={}", sent.summary());
    println!("@ping.got={}", got.summary());
    Ok(bad == 0)
}

/// Waits until no send is in flight (`sends_out` is 0); a receive that completes meanwhile
/// is no longer posted.
fn await_sends(
    ctx: &Context,
    cq: &Cq,
    sends_out: &mut u32,
    recv_posted: &mut bool,
) -> Result<(), Fail> {
    let mut comps = [Completion::default(); 8];
    while *sends_out > 0 {
        let n = wait_any(ctx, cq, &mut comps, Duration::from_millis(200))?;
        for c in &comps[..n] {
            match c.opcode {
                Opcode::Send | Opcode::RdmaWrite | Opcode::RdmaRead => *sends_out -= 1,
                Opcode::RecvImm | Opcode::Tripwire => {}
                Opcode::Recv => *recv_posted = false,
            }
        }
    }
    Ok(())
}
