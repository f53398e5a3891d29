//! One-to-many UDP: one QP sends each message to many receiver QPs, all of which complete
//! on one shared CQ; the tally says who got what.
//!
//! `cargo run -p qpip --example udp_fanout -- [RECEIVERS] [MESSAGES]` (default 8 and 16).

use std::net::{Ipv6Addr, SocketAddrV6};
use std::time::Duration;

use qpip::{Completion, Context, Opcode, QpInit, QpKind, SendWr};

fn main() -> Result<(), qpip::Error> {
    let mut args = std::env::args().skip(1);
    let receivers = args
        .next()
        .map(|n| n.parse().expect("RECEIVERS"))
        .unwrap_or(8);
    let messages = args
        .next()
        .map(|n| n.parse().expect("MESSAGES"))
        .unwrap_or(16);
    let ctx = Context::open()?;
    let got = fan_out(&ctx, receivers, messages)?;
    for (i, n) in got.iter().enumerate() {
        println!("receiver {i}: {n} of {messages} messages");
    }
    Ok(())
}

/// Sends `messages` datagrams to each of `receivers` QPs; returns how many each received
/// (every one checked byte for byte).
pub fn fan_out(
    ctx: &Context,
    receivers: usize,
    messages: usize,
) -> Result<Vec<usize>, qpip::Error> {
    let lo = |port| SocketAddrV6::new(Ipv6Addr::LOCALHOST, port, 0, 0);
    let depth = (messages as u32).next_power_of_two().max(2);
    // One CQ for all receivers: completions say which QP by `qp`.
    let rcq = ctx.create_cq((receivers as u32 * depth).next_power_of_two())?;
    let scq = ctx.create_cq(depth)?;
    let sender = ctx.create_qp(&QpInit::new(QpKind::Udp, &scq).depth(depth, 2))?;
    sender.bind(lo(0))?;
    let mut rx = Vec::new();
    for _ in 0..receivers {
        let qp = ctx.create_qp(&QpInit::new(QpKind::Udp, &rcq).depth(2, depth))?;
        let addr = lo(qp.bind(lo(0))?.port());
        let buf = ctx.alloc(64 * messages)?;
        for m in 0..messages {
            qp.post_recv(m as u64, &[buf.sge(m * 64, 64)])?;
        }
        rx.push((qp, addr, buf));
    }
    let t = Some(Duration::from_secs(20));
    let mut comps = [Completion::default(); 32];
    for m in 0..messages {
        for (r, (_, addr, _)) in rx.iter().enumerate() {
            let text = format!("message {m} to receiver {r}");
            sender.post_send(&SendWr::inline(m as u64, text.as_bytes()).to(*addr))?;
        }
        // The send queue holds `depth`: take this round's send completions.
        let mut done = 0;
        while done < receivers {
            let n = scq.wait(&mut comps, t)?;
            assert!(n > 0, "sends did not complete");
            assert!(comps[..n].iter().all(|c| c.is_ok()), "{:?}", &comps[..n]);
            done += n;
        }
    }
    let mut got = vec![0; receivers];
    let total = receivers * messages;
    let mut seen = 0;
    while seen < total {
        let n = rcq.wait(&mut comps, t)?;
        if n == 0 {
            break; // a datagram lost: the tally shows it
        }
        for c in &comps[..n] {
            assert!(c.is_ok() && c.opcode == Opcode::Recv, "{c:?}");
            let r = rx
                .iter()
                .position(|(qp, _, _)| qp.id() == c.qp)
                .expect("one of ours");
            let m = c.wr_id as usize;
            let want = format!("message {m} to receiver {r}");
            assert_eq!(
                &rx[r].2[m * 64..m * 64 + c.byte_len as usize],
                want.as_bytes()
            );
            got[r] += 1;
        }
        seen += n;
    }
    Ok(got)
}
