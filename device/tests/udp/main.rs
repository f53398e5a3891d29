//! UDP queue pairs end to end: over the device's own addresses (loopback inside the
//! device) — datagrams of every size, scatter/gather and inline data, what a receive CQE
//! reports, addressing, length errors, drops, full and armed CQs, a long stream through ring
//! wrap-around, teardown — and between two devices on a cable, or to static neighbours.

use qpip_testkit as support;

use std::time::{Duration, Instant};

use support::*;

mod addressing;
mod cable;
mod errors;
mod payloads;
mod rings;
mod shared_port;
mod static_neighbors;
mod teardown;

/// Largest UDP payload in one send (the 65535-byte UDP length minus its 8-byte header).
const MAX_UDP: u64 = 65527;

/// Two bound endpoints, in one context or in two.
fn pair(g: &mut FakeGuest, same_ctx: bool, buf_len: u64) -> (Udp, Udp) {
    let c1 = g.create_ctx().unwrap();
    let c2 = if same_ctx {
        c1
    } else {
        g.create_ctx().unwrap()
    };
    let a = g.udp_endpoint_in(c1, UNSPECIFIED, 0, 16, 32, buf_len);
    let b = g.udp_endpoint_in(c2, UNSPECIFIED, 0, 16, 32, buf_len);
    (a, b)
}

/// Waits until a stats counter reaches `want` (the receive side may lag the send CQE), and
/// checks it does not go beyond.
fn wait_stat(g: &mut FakeGuest, index: u32, want: u64) {
    let v = wait_stat_at_least(g, index, want);
    assert_eq!(v, want, "counter {index} overshot");
}

/// Waits until a stats counter reaches at least `want`; returns its value.
fn wait_stat_at_least(g: &mut FakeGuest, index: u32, want: u64) -> u64 {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let v = g.stat(index);
        if v >= want {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "counter {index} stuck at {v}, expected {want}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A UDP QP in `cq`'s context with `cq` for both its queues, bound to an ephemeral port on
/// `::`.
fn bound_qp(g: &mut FakeGuest, cq: &Cq, sq_depth: u32, rq_depth: u32) -> Qp {
    let qp = g
        .create_qp(cq.ctx, cq.id, cq.id, sq_depth, rq_depth)
        .unwrap();
    g.bind(cq.ctx, qp.id, UNSPECIFIED, 0).unwrap();
    qp
}
