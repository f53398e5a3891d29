//! Ping-pong between two UDP queue pairs of one context (over `::1`, the device's own
//! loopback or kernel sockets): one byte each way, round-trip times printed.
//!
//! `cargo run -p qpip --example ping_pong -- [ROUNDS]` (default 1000).

use std::net::{Ipv6Addr, SocketAddrV6};
use std::time::{Duration, Instant};

use qpip::{Context, Opcode, QpInit, QpKind, SendWr};

fn main() -> Result<(), qpip::Error> {
    let rounds = std::env::args()
        .nth(1)
        .map(|n| n.parse().expect("ROUNDS"))
        .unwrap_or(1000);
    let ctx = Context::open()?;
    let mut rtts = ping_pong(&ctx, rounds)?;
    rtts.sort();
    let at = |q: f64| rtts[((rtts.len() - 1) as f64 * q) as usize];
    println!(
        "{rounds} round trips ({:?} provider): median {:?}, 99% {:?}, max {:?}",
        ctx.provider(),
        at(0.5),
        at(0.99),
        at(1.0)
    );
    Ok(())
}

/// `rounds` one-byte round trips between two QPs; the time of each.
pub fn ping_pong(ctx: &Context, rounds: usize) -> Result<Vec<Duration>, qpip::Error> {
    let t = Some(Duration::from_secs(20));
    let (cq_a, cq_b) = (ctx.create_cq(8)?, ctx.create_cq(8)?);
    let a = ctx.create_qp(&QpInit::new(QpKind::Udp, &cq_a))?;
    let b = ctx.create_qp(&QpInit::new(QpKind::Udp, &cq_b))?;
    let lo = |port| SocketAddrV6::new(Ipv6Addr::LOCALHOST, port, 0, 0);
    let pa = lo(a.bind(lo(0))?.port());
    let pb = lo(b.bind(lo(0))?.port());
    let (buf_a, buf_b) = (ctx.alloc(64)?, ctx.alloc(64)?);
    let mut rtts = Vec::with_capacity(rounds);
    for i in 0..rounds {
        let start = Instant::now();
        // Receives are posted before the datagram that fills them can arrive.
        b.post_recv(1, &[buf_b.sge_all()])?;
        a.post_recv(1, &[buf_a.sge_all()])?;
        a.post_send(&SendWr::inline(2, &[i as u8]).to(pb))?;
        // b: its receive (the ping), then it answers; a: its send and the pong.
        wait_for(&cq_b, Opcode::Recv, t)?;
        b.post_send(&SendWr::inline(2, &buf_b[..1]).to(pa))?;
        wait_for(&cq_b, Opcode::Send, t)?;
        wait_for(&cq_a, Opcode::Send, t)?;
        wait_for(&cq_a, Opcode::Recv, t)?;
        assert_eq!(buf_a[0], i as u8, "the pong carries the ping's byte");
        rtts.push(start.elapsed());
    }
    Ok(rtts)
}

/// The next completion of `cq`, which must be a successful `op`.
fn wait_for(cq: &qpip::Cq, op: Opcode, t: Option<Duration>) -> Result<(), qpip::Error> {
    let c = cq.wait_one(t)?.ok_or(qpip::Error::TimedOut {
        what: "ping-pong",
        after: t.unwrap(),
    })?;
    assert!(c.is_ok() && c.opcode == op, "expected a {op:?}, got {c:?}");
    Ok(())
}
