//! The library's data path as an application drives it, measured without a device: a
//! [`Context`] whose doorbell page and rings are a memfd, one UDP QP with a send CQ and a
//! receive CQ, and registered buffers; the test writes the completions the engine would.
//! Each round is one message of `qpip-overhead`: `post_recv`, `post_send` (gather from a
//! registered buffer), then a poll of each CQ. Run under callgrind for the instructions
//! each call costs (`QPIP_DATA_PATH_ROUNDS` sets the rounds, default 1000):
//!
//! ```text
//! cargo test --release -p qpip --lib --no-run
//! QPIP_DATA_PATH_ROUNDS=2000 valgrind --tool=callgrind target/release/deps/qpip-HASH \
//!     --exact device::public_bench::public_data_path_rounds
//! ```
//!
//! As a plain test it checks that every completion comes back to its request, with the
//! sender's address on the receive. The other tests here use the same device-less context
//! for what the data path must keep true: what a WQE holds, when a queue is full, and how
//! long requests keep their regions alive (`super::queue`).

use std::net::{Ipv6Addr, SocketAddrV6};
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::ptr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use qpip_abi::cqe::{self, Cqe, CQE_OP_RECV, CQE_OP_SEND, CQE_SIZE};
use qpip_abi::wqe::{Wqe, WQE_FLAG_INLINE, WQE_OP_SEND, WQE_SGE_OFFSET, WQE_SIZE};
use zerocopy::FromZeros;

use super::sys::Mapping;
use super::{dev_cq, Cq as DevCq, Ctx, Qp as DevQp, PAGE};
use crate::context::CtxImpl;
use crate::cq::{Cq, CqImpl, CqInner};
use crate::mr::{MemoryRegion, MrInner};
use crate::qp::{Qp, QpImpl, QpInner};
use crate::types::{Completion, Limits, QpKind};
use crate::{Context, Opcode, SendWr};

const DEPTH: u32 = 64;
const QP: u32 = 7;

struct Fixture {
    ctx: Context,
    qp: Qp,
    scq: Cq,
    rcq: Cq,
    /// The engine's tails of the two CQ rings.
    tails: [u32; 2],
}

fn cq(ctx: &Context, handle: u32, slot: u32, ring: Mapping) -> Cq {
    Cq {
        inner: Arc::new(CqInner {
            ctx: ctx.inner.clone(),
            imp: CqImpl::Device(DevCq::new(handle, slot, DEPTH, ring)),
            efd: crate::sys::eventfd().unwrap(),
            depth: DEPTH,
            blocked: AtomicU32::new(0),
            busy_poll_us: AtomicU32::new(0),
        }),
    }
}

impl Fixture {
    fn new() -> Fixture {
        // SAFETY: memfd_create with a valid name; the result is checked.
        let fd = unsafe { libc::memfd_create(c"qpip-bench".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0, "memfd_create");
        // SAFETY: a fresh descriptor nobody else owns.
        let mem = unsafe { OwnedFd::from_raw_fd(fd) };
        let wq = DEPTH as usize * WQE_SIZE as usize;
        let cqr = DEPTH as usize * CQE_SIZE as usize;
        let total = 2 * PAGE + 2 * cqr + 2 * wq;
        // SAFETY: sizing the memfd this test owns.
        assert_eq!(unsafe { libc::ftruncate(fd, total as libc::off_t) }, 0);
        let map = |off: usize, len: usize| Mapping::new(&mem, off as u64, len, "map").unwrap();
        let (db, kick) = (map(0, PAGE), map(PAGE, PAGE));
        let (sring, rring) = (map(2 * PAGE, cqr), map(2 * PAGE + cqr, cqr));
        let (sq, rq) = (
            map(2 * PAGE + 2 * cqr, wq),
            map(2 * PAGE + 2 * cqr + wq, wq),
        );
        let dev = Ctx {
            fd: mem,
            path: PathBuf::from("memfd"),
            db,
            kick,
            kicks: AtomicU64::new(0),
            qps: Default::default(),
            orphans: AtomicU32::new(0),
        };
        let limits = Limits {
            max_queue_depth: DEPTH,
            max_sge: 5,
            max_inline: 64,
            max_udp_payload: 65000,
            max_qps: 16,
            max_cqs: 16,
            mtu: 1500,
        };
        let ctx = Context::new(CtxImpl::Device(dev), limits).unwrap();
        let (scq, rcq) = (cq(&ctx, 3, 0, sring), cq(&ctx, 4, 1, rring));
        let qp = Qp {
            inner: Arc::new(QpInner {
                ctx: ctx.inner.clone(),
                kind: QpKind::Udp,
                imp: QpImpl::Device(DevQp::new(
                    ctx.inner.dev(),
                    QP,
                    0,
                    true,
                    [(sq, DEPTH), (rq, DEPTH)],
                )),
                send_cq: scq.inner.clone(),
                recv_cq: rcq.inner.clone(),
            }),
        };
        Fixture {
            ctx,
            qp,
            scq,
            rcq,
            tails: [0, 0],
        }
    }

    fn region(&self, lkey: u32) -> MemoryRegion {
        let mut mr = MrInner::new(self.ctx.inner.clone(), vec![0u8; 64]).unwrap();
        mr.lkey = lkey;
        MemoryRegion {
            inner: Arc::new(mr),
        }
    }

    /// The engine's part: a completion of `opcode` for request `wr_id` in CQ `which`.
    fn complete(&mut self, which: usize, opcode: u8, wr_id: u64) {
        let (cq, tail) = ([&self.scq, &self.rcq][which], &mut self.tails[which]);
        let d = dev_cq(&cq.inner);
        let mut c = Cqe::new_zeroed();
        c.wr_id = wr_id;
        c.qp = QP;
        c.opcode = opcode;
        c.byte_len = 64;
        c.src_addr = Ipv6Addr::LOCALHOST.octets();
        c.src_port = 9;
        c.owner = cqe::phase(*tail, DEPTH);
        let at = (*tail % DEPTH) as usize * CQE_SIZE as usize;
        // SAFETY: a whole CQE slot inside the mapped ring.
        unsafe { ptr::write_volatile(d.ring.at(at).cast::<Cqe>(), c) };
        *tail = tail.wrapping_add(1);
    }
}

#[test]
fn public_data_path_rounds() {
    let rounds: u64 = std::env::var("QPIP_DATA_PATH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let mut f = Fixture::new();
    let (sbuf, rbuf) = (f.region(1), f.region(2));
    let to = SocketAddrV6::new(Ipv6Addr::LOCALHOST, 9, 0, 0);
    let mut c = [Completion::default()];
    for i in 0..rounds {
        f.qp.post_recv(i, &[rbuf.sge_all()]).unwrap();
        let sges = [sbuf.sge_all()];
        f.qp.post_send(&SendWr::new(i, &sges).to(to)).unwrap();
        f.complete(0, CQE_OP_SEND, i);
        f.complete(1, CQE_OP_RECV, i);
        assert_eq!(f.scq.poll(&mut c), 1, "round {i}");
        assert_eq!((c[0].wr_id, c[0].opcode), (i, Opcode::Send));
        assert_eq!(f.rcq.poll(&mut c), 1, "round {i}");
        assert_eq!(
            (c[0].wr_id, c[0].opcode, c[0].src),
            (i, Opcode::Recv, Some(to))
        );
    }
    assert_eq!(f.ctx.kicks(), 0, "the engine never said it slept");
}

/// Sends with inline data (how a ping-pong's small messages go), each polled: the bytes,
/// their length and the destination are in the WQE the device reads.
#[test]
fn inline_sends_are_written_into_the_ring() {
    let mut f = Fixture::new();
    let to = SocketAddrV6::new(Ipv6Addr::LOCALHOST, 4242, 0, 0);
    let mut c = [Completion::default()];
    for i in 0..2 * DEPTH as u64 {
        let data = format!("message {i}");
        f.qp.post_send(&SendWr::inline(i, data.as_bytes()).to(to))
            .unwrap();
        let QpImpl::Device(q) = &f.qp.inner.imp else {
            unreachable!()
        };
        let slot = q.sq.at((i % DEPTH as u64) as usize * WQE_SIZE as usize);
        // SAFETY: a whole WQE slot inside the mapped ring, written by the post above.
        let w = unsafe { ptr::read(slot.cast::<Wqe>()) };
        assert_eq!((w.wr_id, w.opcode, w.num_sge), (i, WQE_OP_SEND, 0));
        assert_eq!(w.flags & WQE_FLAG_INLINE, WQE_FLAG_INLINE);
        assert_eq!((w.dest_addr, w.dest_port), (to.ip().octets(), 4242));
        let len = w.inline_len as usize;
        // SAFETY: the inline bytes follow the header inside the same slot.
        let bytes = unsafe { std::slice::from_raw_parts(slot.add(WQE_SGE_OFFSET as usize), len) };
        assert_eq!(bytes, data.as_bytes());
        f.complete(0, CQE_OP_SEND, i);
        assert_eq!(f.scq.poll(&mut c), 1);
        assert_eq!(c[0].wr_id, i);
    }
}

/// A request with a bad entry (out of its region) posts nothing: the ring's producer
/// index does not move and the next good request takes the slot.
#[test]
fn a_bad_entry_posts_nothing() {
    let f = Fixture::new();
    let buf = f.region(1);
    let bad = [buf.sge_all(), buf.sge(60, 8)];
    let err = f.qp.post_recv(1, &bad).unwrap_err();
    assert!(matches!(err, crate::Error::OutOfBounds { .. }), "{err}");
    let err = f.qp.post_send(&SendWr::new(1, &bad)).unwrap_err();
    assert!(matches!(err, crate::Error::Destination(_)), "{err}");
    let to = SocketAddrV6::new(Ipv6Addr::LOCALHOST, 9, 0, 0);
    let err = f.qp.post_send(&SendWr::new(1, &bad).to(to)).unwrap_err();
    assert!(matches!(err, crate::Error::OutOfBounds { .. }), "{err}");
    let page = f.ctx.inner.dev().doorbells();
    assert_eq!(page.load(qpip_abi::doorbell::qp_rq_tail(0)), 0);
    assert_eq!(page.load(qpip_abi::doorbell::qp_sq_tail(0)), 0);
    f.qp.post_recv(2, &[buf.sge(8, 16)]).unwrap();
    assert_eq!(page.load(qpip_abi::doorbell::qp_rq_tail(0)), 1);
    // Both regions of the failed requests were let go: only the good receive keeps one.
    assert_eq!(Arc::strong_count(&buf.inner), 2);
}

/// Whether the region behind `w` still exists (held by its handle or by requests).
fn alive(w: &std::sync::Weak<MrInner>) -> bool {
    w.strong_count() > 0
}

/// A receive queue slot keeps its request's region past the completion (polls release
/// nothing), and a later request from the same region in that slot leaves the reference
/// count alone; one from another region lets the first go.
#[test]
fn a_slot_holds_its_region_until_reused() {
    let mut f = Fixture::new();
    let (a, b) = (f.region(1), f.region(2));
    let mut c = [Completion::default()];
    for i in 0..3 * DEPTH as u64 {
        f.qp.post_recv(i, &[a.sge_all()]).unwrap();
        f.complete(1, CQE_OP_RECV, i);
        assert_eq!(f.rcq.poll(&mut c), 1);
        // The handle and one slot per request posted, up to the depth.
        let held = (i + 1).min(DEPTH as u64) as usize;
        assert_eq!(Arc::strong_count(&a.inner), 1 + held, "after request {i}");
    }
    for i in 0..DEPTH as u64 {
        f.qp.post_recv(i, &[b.sge(0, 8), b.sge(8, 8)]).unwrap();
        f.complete(1, CQE_OP_RECV, i);
        assert_eq!(f.rcq.poll(&mut c), 1);
    }
    assert_eq!(Arc::strong_count(&a.inner), 1, "every slot taken by b");
    assert_eq!(
        Arc::strong_count(&b.inner),
        1 + DEPTH as usize,
        "once per request"
    );
}

/// The queue is full while `depth` requests have no polled completion — a completion the
/// engine wrote but nobody polled does not free a slot — and one poll frees one slot.
#[test]
fn a_queue_is_full_until_a_completion_is_polled() {
    let mut f = Fixture::new();
    let buf = f.region(1);
    for i in 0..DEPTH as u64 {
        f.qp.post_recv(i, &[buf.sge_all()]).unwrap();
    }
    let full = |f: &Fixture| {
        matches!(
            f.qp.post_recv(99, &[buf.sge_all()]),
            Err(crate::Error::QueueFull { .. })
        )
    };
    assert!(full(&f));
    f.complete(1, CQE_OP_RECV, 0);
    assert!(full(&f), "written but not polled");
    let mut c = [Completion::default()];
    assert_eq!(f.rcq.poll(&mut c), 1);
    f.qp.post_recv(DEPTH as u64, &[buf.sge_all()]).unwrap();
    assert!(full(&f));
}

/// Dropping a region's handle after its requests completed deregisters it at once, though
/// their slots were not reused; the QP keeps working with its other regions.
#[test]
fn a_region_dropped_after_its_completions_goes_at_once() {
    let mut f = Fixture::new();
    let (keep, drop_me) = (f.region(1), f.region(2));
    let mut c = [Completion::default()];
    let to = SocketAddrV6::new(Ipv6Addr::LOCALHOST, 9, 0, 0);
    for i in 0..3 {
        f.qp.post_recv(i, &[drop_me.sge_all()]).unwrap();
        let sges = [drop_me.sge_all(), keep.sge(0, 4)];
        f.qp.post_send(&SendWr::new(i, &sges).to(to)).unwrap();
        f.complete(0, CQE_OP_SEND, i);
        f.complete(1, CQE_OP_RECV, i);
        assert_eq!(f.scq.poll(&mut c), 1);
        assert_eq!(f.rcq.poll(&mut c), 1);
    }
    let w = Arc::downgrade(&drop_me.inner);
    drop(drop_me);
    assert!(!alive(&w), "released by the drop of its handle");
    assert_eq!(f.ctx.inner.dev().orphans.load(Ordering::Relaxed), 0);
    // Sends from the other region's slots were let go too, and it is still usable.
    assert_eq!(Arc::strong_count(&keep.inner), 1);
    let sges = [keep.sge_all()];
    f.qp.post_send(&SendWr::new(9, &sges).to(to)).unwrap();
    f.complete(0, CQE_OP_SEND, 9);
    assert_eq!(f.scq.poll(&mut c), 1);
    assert_eq!(c[0].wr_id, 9);
}

/// A region whose handle is dropped while a request holds it stays (the device may still
/// write it) until that request's completion is polled, and goes with that poll; polls
/// then go back to releasing nothing.
#[test]
fn a_region_dropped_while_in_use_goes_with_its_last_completion() {
    let mut f = Fixture::new();
    let other = f.region(1);
    let r = f.region(2);
    let mut c = [Completion::default()];
    f.qp.post_recv(0, &[r.sge_all()]).unwrap();
    f.qp.post_recv(1, &[r.sge_all()]).unwrap();
    f.qp.post_recv(2, &[other.sge_all()]).unwrap();
    let w = Arc::downgrade(&r.inner);
    drop(r);
    assert!(alive(&w), "two receives still name it");
    let ctx = f.ctx.clone();
    let orphans = || ctx.inner.dev().orphans.load(Ordering::Relaxed);
    assert_eq!(orphans(), 1);
    f.complete(1, CQE_OP_RECV, 0);
    assert_eq!(f.rcq.poll(&mut c), 1);
    assert!(alive(&w), "one receive still names it");
    f.complete(1, CQE_OP_RECV, 1);
    // Written by the engine, not yet polled: the device is done, the library does not
    // know it yet.
    assert!(alive(&w));
    assert_eq!(f.rcq.poll(&mut c), 1);
    assert!(!alive(&w), "went with the poll of its last completion");
    assert_eq!(orphans(), 0);
    // Back to the lazy path: the completed receive of `other` stays held by its slot.
    f.complete(1, CQE_OP_RECV, 2);
    assert_eq!(f.rcq.poll(&mut c), 1);
    assert_eq!(Arc::strong_count(&other.inner), 2);
}
