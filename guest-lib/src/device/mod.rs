//! The device provider: `/dev/qpipN` through the driver's ioctls (control path) and, on the
//! data path, the rings and the doorbell page mapped into the process — no system call per
//! work request or completion (`abi/src/uapi.rs`, `abi/src/doorbell.rs`, `docs/device.md`).

#[cfg(test)]
mod public_bench;
mod queue;
mod sys;

use std::collections::HashMap;
use std::net::SocketAddrV6;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use qpip_abi::admin::{
    CONN_INFO_CRC, CONN_INFO_IMMEDIATE, CONN_INFO_PEER_TO_PEER, CONN_INFO_REJECTED,
    CONN_INFO_TERMINATE_RECEIVED, FRAMING_IWARP, FRAMING_MESSAGE, FRAMING_STREAM, QP_TYPE_TCP,
    QP_TYPE_UDP,
};
use qpip_abi::cqe::{self, Cqe, CQE_SIZE};
use qpip_abi::doorbell::{self, Producer};
use qpip_abi::regs::KICK;
use qpip_abi::uapi::{self, *};
use qpip_abi::wqe::{
    Wqe, WQE_FLAG_IMM, WQE_FLAG_SOLICITED, WQE_OP_RDMA_READ, WQE_OP_RDMA_WRITE, WQE_OP_RECV,
    WQE_OP_SEND,
};
use zerocopy::{FromZeros, IntoBytes};

use crate::context::CtxInner;
use crate::cq::{CqImpl, CqInner};
use crate::error::{Error, Result};
use crate::iwarp::{ConnInfo, Mpa};
use crate::mr::{MrInner, Sge};
use crate::qp::{QpInit, SendData, SendOp, SendWr};
use crate::types::{Completion, Event, Framing, Limits, QpKind};
use queue::{QpState, WqeBody};
use sys::{ioctl, Mapping};

const PAGE: usize = uapi::MMAP_PAGE_SIZE as usize;

/// An open device file: one context of the adapter, its doorbell page and kick page.
pub(crate) struct Ctx {
    pub(crate) fd: OwnedFd,
    path: PathBuf,
    db: Mapping,
    kick: Mapping,
    /// Kicks written (the device was asleep when a doorbell rang).
    pub(crate) kicks: AtomicU64,
    /// The context's QPs by handle: what their CQs' polls count completions against, and
    /// what [`Ctx::region_dropped`] looks through.
    qps: Mutex<HashMap<u32, Arc<QpState>>>,
    /// Regions whose handles were dropped while requests held them, and that still exist:
    /// while there are any, polls release completed requests' regions at once
    /// (`queue`'s documentation).
    orphans: AtomicU32,
}

macro_rules! arg {
    ($t:ty) => {{
        let mut a = <$t>::new_zeroed();
        a.size = std::mem::size_of::<$t>() as u32;
        a
    }};
}

// After the macro, which it uses.
mod tripwire;
pub(crate) use tripwire::TripwireArgs;

impl Ctx {
    pub(crate) fn open(path: &Path) -> Result<(Ctx, Limits)> {
        let cpath = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| Error::InvalidArgument(format!("{}: NUL in path", path.display())))?;
        // SAFETY: a valid NUL-terminated path; the result is checked before it is owned.
        let fd = unsafe {
            libc::open(
                cpath.as_ptr(),
                libc::O_RDWR | libc::O_CLOEXEC | libc::O_NONBLOCK,
            )
        };
        if fd < 0 {
            return Err(Error::Open {
                path: path.to_path_buf(),
                source: std::io::Error::last_os_error(),
            });
        }
        // SAFETY: a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut q = arg!(QueryDevice);
        ioctl(&fd, IOCTL_QUERY_DEVICE, &mut q, "QUERY_DEVICE")?;
        let major = (q.abi_version >> 16) as u16;
        if major != qpip_abi::ABI_VERSION_MAJOR {
            return Err(Error::AbiMismatch {
                path: path.to_path_buf(),
                major,
                minor: q.abi_version as u16,
                known: qpip_abi::ABI_VERSION_MAJOR,
            });
        }
        let db = Mapping::new(&fd, q.doorbell_offset, PAGE, "mmap of the doorbell page")?;
        let kick = Mapping::new(&fd, q.kick_offset, PAGE, "mmap of the kick page")?;
        let limits = Limits {
            max_queue_depth: q.max_queue_depth,
            max_sge: q.max_sge.min(qpip_abi::wqe::MAX_SGE),
            max_inline: q.max_inline.min(qpip_abi::wqe::MAX_INLINE),
            max_udp_payload: q.max_udp_payload,
            max_qps: q.max_qps,
            max_cqs: q.max_cqs,
            mtu: q.mtu,
        };
        let ctx = Ctx {
            fd,
            path: path.to_path_buf(),
            db,
            kick,
            kicks: AtomicU64::new(0),
            qps: Mutex::new(HashMap::new()),
            orphans: AtomicU32::new(0),
        };
        Ok((ctx, limits))
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Rings a doorbell as `qpip_abi::doorbell` prescribes: entries before it are visible
    /// (release), then the producer field, the change counter, a full barrier, and a kick
    /// if the engine said it sleeps.
    fn ring(&self, off: u32, value: u32) {
        if self.ring_quietly(off, value) {
            // SAFETY: the kick register inside the mapped kick page.
            unsafe { ptr::write_volatile(self.kick.at(KICK as usize).cast::<u32>(), 1) };
            self.kicks.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// [`Ctx::ring`] without the kick: for a doorbell the engine needs only once it is
    /// awake anyway. Returns whether the engine said it sleeps (a kick would have gone).
    ///
    /// Arming a CQ is such a doorbell: a completion, the only thing an arm is for, is
    /// written by an engine that is awake (woken by a frame, a timer or another doorbell's
    /// kick), and every pass of an awake engine scans the doorbells before it takes frames,
    /// so it sees the arm before (or right after) it writes that completion and raises the
    /// interrupt then. A completion already there when the CQ is armed is found by the
    /// poll after the arm ([`crate::Cq::wait`]). Under TCG a kick is a trapped MMIO write,
    /// a round trip to the device process that the guest's CPU waits out; a blocking wait
    /// skips one per call this way.
    fn ring_quietly(&self, off: u32, value: u32) -> bool {
        self.doorbells().ring(off, value)
    }

    /// The doorbell page, for the producer side of its protocol.
    fn doorbells(&self) -> Producer<'_> {
        // SAFETY: the page is mapped, page-aligned, for the life of `self`, and this
        // library touches it only through the Producer's atomics.
        unsafe { Producer::from_ptr(self.db.at(0)) }
    }

    /// Registers `len` bytes at `addr` with `access` (`MR_ACCESS_*`): (lkey, rkey).
    pub(crate) fn reg_mr(&self, addr: *mut u8, len: usize, access: u32) -> Result<(u32, u32)> {
        let mut a = arg!(RegMr);
        a.addr = addr as u64;
        a.length = len as u64;
        a.access = access;
        ioctl(&self.fd, IOCTL_REG_MR, &mut a, "register memory (REG_MR)")?;
        Ok((a.lkey, a.rkey))
    }

    pub(crate) fn dereg_mr(&self, lkey: u32) {
        self.destroy(IOCTL_DEREG_MR, lkey);
    }

    /// The handle of `mr` was dropped while something else still holds it: requests, which
    /// may hold it past their completions (`queue`), or a tripwire. Lets go of every
    /// completed request's regions; if `mr` is still held after that, it is an orphan until
    /// it goes, and polls release as they go meanwhile.
    pub(crate) fn region_dropped(&self, mr: &Arc<MrInner>) {
        // Taken out of the table's lock: releasing may deregister regions (an ioctl).
        let qps: Vec<Arc<QpState>> = self.qps.lock().unwrap().values().cloned().collect();
        for qp in qps {
            qp.release_completed();
        }
        // Still held by outstanding requests (or a tripwire). The caller's handle holds it
        // too, so the region cannot go before it is counted.
        if Arc::strong_count(mr) > 1 {
            mr.orphaned.store(true, Ordering::Relaxed);
            self.orphans.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// An orphaned region went (see [`Ctx::region_dropped`]).
    pub(crate) fn orphan_gone(&self) {
        self.orphans.fetch_sub(1, Ordering::Relaxed);
    }

    /// Destroys an object; a failure can only mean the device is gone (which destroyed it).
    fn destroy(&self, req: u32, handle: u32) {
        let mut a = arg!(Handle);
        a.handle = handle;
        let _ = ioctl(&self.fd, req, &mut a, "destroy");
    }

    pub(crate) fn create_cq(&self, depth: u32, efd: i32) -> Result<Cq> {
        let mut a = arg!(CreateCq);
        a.depth = depth;
        a.comp_vector = ANY_VECTOR;
        a.eventfd = efd;
        ioctl(&self.fd, IOCTL_CREATE_CQ, &mut a, "create CQ (CREATE_CQ)")?;
        let ring = match Mapping::new(
            &self.fd,
            a.ring_offset,
            a.ring_size as usize,
            "mmap of a CQ ring",
        ) {
            Ok(r) => r,
            Err(e) => {
                self.destroy(IOCTL_DESTROY_CQ, a.handle);
                return Err(e);
            }
        };
        Ok(Cq::new(a.handle, a.db_slot, depth, ring))
    }

    pub(crate) fn create_qp(&self, init: &QpInit<'_>) -> Result<Qp> {
        let scq = dev_cq(&init.send_cq.inner);
        let rcq = dev_cq(&init.recv_cq.inner);
        let mut a = arg!(CreateQp);
        (a.qp_type, a.framing) = match init.kind {
            QpKind::Udp => (QP_TYPE_UDP, 0),
            QpKind::Tcp(Framing::Message) => (QP_TYPE_TCP, FRAMING_MESSAGE),
            QpKind::Tcp(Framing::Stream) => (QP_TYPE_TCP, FRAMING_STREAM),
            QpKind::Tcp(Framing::Iwarp) => (QP_TYPE_TCP, FRAMING_IWARP),
        };
        a.send_cq = scq.handle;
        a.recv_cq = rcq.handle;
        a.sq_depth = init.sq_depth;
        a.rq_depth = init.rq_depth;
        ioctl(&self.fd, IOCTL_CREATE_QP, &mut a, "create QP (CREATE_QP)")?;
        let maps = Mapping::new(
            &self.fd,
            a.sq_offset,
            a.sq_size as usize,
            "mmap of a send ring",
        )
        .and_then(|sq| {
            Mapping::new(
                &self.fd,
                a.rq_offset,
                a.rq_size as usize,
                "mmap of a receive ring",
            )
            .map(|rq| (sq, rq))
        });
        let (sq, rq) = match maps {
            Ok(m) => m,
            Err(e) => {
                self.destroy(IOCTL_DESTROY_QP, a.handle);
                return Err(e);
            }
        };
        let udp = init.kind == QpKind::Udp;
        let rings = [(sq, init.sq_depth), (rq, init.rq_depth)];
        Ok(Qp::new(self, a.handle, a.db_slot, udp, rings))
    }

    pub(crate) fn listen(&self, addr: &SocketAddrV6, backlog: u32) -> Result<Listener> {
        let mut a = arg!(Listen);
        a.local = (*addr).into();
        a.backlog = backlog;
        ioctl(&self.fd, IOCTL_LISTEN, &mut a, "listen (LISTEN)")?;
        Ok(Listener { handle: a.handle })
    }

    pub(crate) fn read_event(&self) -> Result<Option<Event>> {
        let mut e = uapi::Event::new_zeroed();
        let buf = e.as_mut_bytes();
        // SAFETY: reads at most buf.len() bytes into the event structure's own bytes.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() == std::io::ErrorKind::WouldBlock {
                return Ok(None);
            }
            return Err(Error::os("read of a connection event", err));
        }
        if n as usize != buf.len() {
            return Err(Error::InvalidArgument(format!(
                "the driver returned a {n}-byte event, expected {}",
                buf.len()
            )));
        }
        Ok(Some(Event::from_raw(&e)))
    }

    pub(crate) fn stats(&self) -> Result<Vec<u64>> {
        let mut a = arg!(QueryStats);
        ioctl(&self.fd, IOCTL_QUERY_STATS, &mut a, "QUERY_STATS")?;
        let n = (a.count as usize).min(a.counters.len());
        Ok(a.counters[..n].to_vec())
    }
}

fn dev_cq(cq: &CqInner) -> &Cq {
    match &cq.imp {
        CqImpl::Device(c) => c,
        // Context::create_qp checked that the CQ is of this (device) context.
        CqImpl::Soft(_) => unreachable!("a soft CQ in a device context"),
    }
}

struct CqState {
    head: u32,
    arm_seq: u32,
    /// The QP of the last completion polled, so that a run of completions of one QP —
    /// across polls too, the common case — finds its state without the table's lock and
    /// lookup. Cleared when that QP is destroyed.
    last: Option<(u32, Arc<QpState>)>,
}

pub(crate) struct Cq {
    pub(crate) handle: u32,
    slot: u32,
    depth: u32,
    ring: Mapping,
    st: Mutex<CqState>,
}

impl Cq {
    /// The CQ `handle` in doorbell slot `slot`, its `depth`-entry ring mapped at `ring`,
    /// nothing consumed yet.
    fn new(handle: u32, slot: u32, depth: u32, ring: Mapping) -> Cq {
        Cq {
            handle,
            slot,
            depth,
            ring,
            st: Mutex::new(CqState {
                head: 0,
                arm_seq: 0,
                last: None,
            }),
        }
    }

    pub(crate) fn poll(&self, dev: &Ctx, out: &mut [Completion]) -> usize {
        let mut st = self.st.lock().unwrap();
        let st = &mut *st;
        let mut n = 0;
        // The context's QP table is looked at only when a completion is of another QP than
        // the last one polled (kept across calls), so a poll pays no lock for it in the
        // common case: one lock per poll, the CQ's.
        let orphans = dev.orphans.load(Ordering::Relaxed) != 0;
        while n < out.len() {
            if !self.written(st.head) {
                break;
            }
            let at = (st.head & (self.depth - 1)) as usize * CQE_SIZE as usize;
            fence(Ordering::Acquire);
            // SAFETY: a whole 64-byte slot inside the ring, 64-byte aligned in a page-aligned
            // mapping; the device finished writing it (owner seen after the acquire fence)
            // and writes it again only after the head, rung below, has moved past it. Read
            // in place, field by field, rather than copied whole first.
            let cqe = unsafe { &*self.ring.at(at).cast::<Cqe>() };
            st.head = st.head.wrapping_add(1);
            if !matches!(&st.last, Some((q, _)) if *q == cqe.qp) {
                let table = dev.qps.lock().unwrap();
                st.last = table.get(&cqe.qp).map(|p| (cqe.qp, p.clone()));
            }
            let udp = match &st.last {
                Some((q, qp)) if *q == cqe.qp => {
                    qp.completed(cqe.opcode);
                    if orphans {
                        // A dropped region may be waiting for just this completion.
                        qp.release_completed();
                    }
                    qp.udp
                }
                // A flush of a destroyed QP: its requests were released then.
                _ => false,
            };
            out[n] = Completion::from_cqe(cqe, udp);
            n += 1;
        }
        if n > 0 {
            // Give the slots back to the device (it never overwrites an unconsumed CQE).
            // The engine waits for this only when the ring is full (abi::doorbell), so a
            // sleeping engine is kicked only then: the last slot before the old head holds
            // a completion exactly when the device filled the ring.
            let old_head = st.head.wrapping_sub(n as u32);
            let db = doorbell::cq_head(self.slot);
            if was_full(old_head, self.depth, |i| self.written(i)) {
                dev.ring(db, st.head);
            } else {
                dev.ring_quietly(db, st.head);
            }
        }
        n
    }

    /// Whether the device has written the completion of index `i` (its owner byte carries
    /// the phase of `i`'s pass around the ring), for an index less than a ring ahead of the
    /// consumer's head.
    fn written(&self, i: u32) -> bool {
        let at = (i & (self.depth - 1)) as usize * CQE_SIZE as usize;
        // SAFETY: the owner byte, the last of a CQE slot inside the mapped ring.
        let owner = unsafe { ptr::read_volatile(self.ring.at(at + CQE_SIZE as usize - 1)) };
        owner & 1 == cqe::phase(i, self.depth)
    }

    pub(crate) fn arm(&self, dev: &Ctx) {
        let mut st = self.st.lock().unwrap();
        // For any completion: the sequence in the low 31 bits, CQ_ARM_SOLICITED clear.
        st.arm_seq = st.arm_seq.wrapping_add(1) & doorbell::CQ_ARM_SEQ_MASK;
        dev.ring_quietly(doorbell::cq_arm_seq(self.slot), st.arm_seq);
    }

    pub(crate) fn destroy(&self, dev: &Ctx) {
        dev.destroy(IOCTL_DESTROY_CQ, self.handle);
    }
}

pub(crate) struct Qp {
    pub(crate) handle: u32,
    slot: u32,
    sq: Mapping,
    rq: Mapping,
    state: Arc<QpState>,
}

impl Qp {
    /// The QP `handle` of `dev` in doorbell slot `slot`, with its send and receive rings
    /// (mapped, and their depths), in the context's table so that its CQs' polls count its
    /// completions.
    fn new(
        dev: &Ctx,
        handle: u32,
        slot: u32,
        udp: bool,
        [(sq, sq_depth), (rq, rq_depth)]: [(Mapping, u32); 2],
    ) -> Qp {
        let state = Arc::new(QpState::new(udp, sq_depth, rq_depth));
        dev.qps.lock().unwrap().insert(handle, state.clone());
        Qp {
            handle,
            slot,
            sq,
            rq,
            state,
        }
    }

    pub(crate) fn bind(&self, dev: &Ctx, addr: &SocketAddrV6) -> Result<SocketAddrV6> {
        let mut a = arg!(Bind);
        a.qp = self.handle;
        a.local = (*addr).into();
        ioctl(&dev.fd, IOCTL_BIND, &mut a, "bind (BIND)")?;
        Ok(a.local.into())
    }

    pub(crate) fn connect(
        &self,
        dev: &Ctx,
        peer: &SocketAddrV6,
        mpa: Option<&Mpa>,
        user_data: u64,
    ) -> Result<()> {
        let mut a = arg!(Connect);
        a.qp = self.handle;
        a.peer = (*peer).into();
        a.user_data = user_data;
        if let Some(m) = mpa {
            a.iwarp = iwarp_conn(m);
        }
        // The driver copies the private data during the call: `mpa` outlives it.
        ioctl(&dev.fd, IOCTL_CONNECT, &mut a, "connect (CONNECT)")
    }

    /// QUERY_CONN: what MPA agreed for this iWARP QP.
    pub(crate) fn conn_info(&self, dev: &Ctx) -> Result<ConnInfo> {
        let mut a = arg!(QueryConn);
        a.qp = self.handle;
        ioctl(
            &dev.fd,
            IOCTL_QUERY_CONN,
            &mut a,
            "connection parameters (QUERY_CONN)",
        )?;
        let pd = (a.pd_len as usize).min(a.private_data.len());
        let t = a.terminate;
        Ok(ConnInfo {
            crc: a.flags & CONN_INFO_CRC != 0,
            peer_to_peer: a.flags & CONN_INFO_PEER_TO_PEER != 0,
            immediate: a.flags & CONN_INFO_IMMEDIATE != 0,
            rejected: a.flags & CONN_INFO_REJECTED != 0,
            ird: a.ird,
            ord: a.ord,
            revision: a.mpa_revision,
            private_data: a.private_data[..pd].to_vec(),
            terminate: (t != 0).then_some(crate::iwarp::Terminate {
                layer: (t >> 12 & 0xf) as u8,
                etype: (t >> 8 & 0xf) as u8,
                code: t as u8,
                received: a.flags & CONN_INFO_TERMINATE_RECEIVED != 0,
            }),
        })
    }

    pub(crate) fn close(&self, dev: &Ctx, user_data: u64) -> Result<()> {
        let mut a = arg!(Close);
        a.qp = self.handle;
        a.user_data = user_data;
        ioctl(&dev.fd, IOCTL_CLOSE, &mut a, "close (CLOSE)")
    }

    /// SET_QP_OPT KEEPALIVE: `(idle, interval, probes)` in checked seconds, or off.
    pub(crate) fn set_keepalive(&self, dev: &Ctx, k: Option<(u32, u32, u32)>) -> Result<()> {
        let mut a = arg!(SetQpOpt);
        a.qp = self.handle;
        a.option = qpip_abi::admin::QP_OPT_KEEPALIVE;
        (a.keepalive_idle, a.keepalive_interval, a.keepalive_probes) = k.unwrap_or_default();
        ioctl(&dev.fd, IOCTL_SET_QP_OPT, &mut a, "keepalive (SET_QP_OPT)")
    }

    /// Posts a send that [`crate::Qp::post_send`] checked (kind, destination, inline
    /// length); its entries are checked here as they are written.
    pub(crate) fn post_send(&self, ctx: &Arc<CtxInner>, wr: &SendWr<'_>) -> Result<()> {
        let mut h = Wqe::new_zeroed();
        h.wr_id = wr.wr_id;
        h.opcode = match wr.op {
            SendOp::Send => WQE_OP_SEND,
            SendOp::Write(to) => {
                h.set_remote(to.addr, to.rkey);
                WQE_OP_RDMA_WRITE
            }
            SendOp::Read(from) => {
                h.set_remote(from.addr, from.rkey);
                WQE_OP_RDMA_READ
            }
        };
        if wr.solicited {
            h.flags |= WQE_FLAG_SOLICITED;
        }
        if wr.imm_set && matches!(wr.op, SendOp::Write(_)) {
            h.flags |= WQE_FLAG_IMM;
        }
        h.imm_data = wr.imm;
        if let Some(d) = wr.dest {
            h.dest_addr = d.ip().octets();
            h.dest_port = d.port();
        }
        let body = match wr.data {
            SendData::Inline(data) => WqeBody::Inline(data),
            SendData::Gather(sges) => WqeBody::Sges(sges),
        };
        let dev = ctx.dev();
        let mut q = self.state.queues.lock().unwrap();
        let done = self.state.sq_done();
        let tail = q.sq.push(self.handle, &self.sq, ctx, h, body, done)?;
        dev.ring(doorbell::qp_sq_tail(self.slot), tail);
        Ok(())
    }

    /// Writes every request's WQE, then rings the receive doorbell once for them all.
    /// `posted` counts those written; the first that does not fit or is malformed ends the
    /// batch with its error (the ones before it are rung).
    pub(crate) fn post_recvs<'s>(
        &self,
        ctx: &Arc<CtxInner>,
        reqs: impl IntoIterator<Item = (u64, &'s [Sge<'s>])>,
        posted: &mut usize,
    ) -> Result<()> {
        let dev = ctx.dev();
        let mut q = self.state.queues.lock().unwrap();
        let mut tail = None;
        let mut result = Ok(());
        for (wr_id, sges) in reqs {
            let mut h = Wqe::new_zeroed();
            h.wr_id = wr_id;
            h.opcode = WQE_OP_RECV;
            let done = self.state.rq_done();
            match q
                .rq
                .push(self.handle, &self.rq, ctx, h, WqeBody::Sges(sges), done)
            {
                Ok(t) => {
                    tail = Some(t);
                    *posted += 1;
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        if let Some(tail) = tail {
            let db = doorbell::qp_rq_tail(self.slot);
            if self.state.udp {
                // A UDP QP's receives are needed only when a datagram comes, and whatever
                // brings one wakes a sleeping engine first (a frame on the link, or a send
                // that kicked): no kick (qpip_abi::doorbell).
                dev.ring_quietly(db, tail);
            } else {
                dev.ring(db, tail);
            }
        }
        result
    }

    pub(crate) fn destroy(&self, dev: &Ctx, scq: &CqInner, rcq: &CqInner) {
        // After DESTROY_QP returns the device no longer touches the QP's requests, so the
        // regions they kept alive may go (they do when `state` is dropped with this QP).
        dev.destroy(IOCTL_DESTROY_QP, self.handle);
        dev.qps.lock().unwrap().remove(&self.handle);
        for cq in [scq, rcq] {
            let cq = dev_cq(cq);
            let mut st = cq.st.lock().unwrap();
            if matches!(&st.last, Some((q, _)) if *q == self.handle) {
                st.last = None;
            }
        }
    }
}

pub(crate) struct Listener {
    handle: u32,
}

impl Listener {
    pub(crate) fn accept(
        &self,
        dev: &Ctx,
        qp: &Qp,
        mpa: Option<&Mpa>,
        user_data: u64,
    ) -> Result<()> {
        let mut a = arg!(Accept);
        a.listener = self.handle;
        a.qp = qp.handle;
        a.user_data = user_data;
        if let Some(m) = mpa {
            a.iwarp = iwarp_conn(m);
        }
        ioctl(&dev.fd, IOCTL_ACCEPT, &mut a, "accept (ACCEPT)")
    }

    pub(crate) fn destroy(&self, dev: &Ctx) {
        dev.destroy(IOCTL_DESTROY_LISTENER, self.handle);
    }
}

/// The uapi form of MPA parameters; the private data stays in the caller's memory (the
/// driver copies it during the ioctl).
fn iwarp_conn(m: &Mpa) -> uapi::IwarpConn {
    let mut c = uapi::IwarpConn::new_zeroed();
    if !m.private_data.is_empty() {
        c.private_data = m.private_data.as_ptr() as u64;
    }
    c.pd_len = m.private_data.len() as u16;
    c.ird = m.ird;
    c.ord = m.ord;
    c.flags = m.flags();
    c
}

/// Whether a CQ ring of `depth` entries was full while its consumer's head was at `head`:
/// the last slot before the head, that of index `head + depth - 1`, held a completion
/// (`written` reads a slot's owner byte). Then the engine may be waiting for this head
/// move, so it is rung with a kick (abi::doorbell).
fn was_full(head: u32, depth: u32, written: impl Fn(u32) -> bool) -> bool {
    written(head.wrapping_add(depth - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ring the way the engine fills it: owner bytes only, written with
    /// [`cqe::phase`] of the engine's tail.
    struct Ring {
        owners: Vec<u8>,
        tail: u32,
    }

    impl Ring {
        fn new(depth: u32, start: u32) -> Ring {
            // Never written: the phase of the pass before the first.
            let owners = (0..depth)
                .map(|s| cqe::phase(start.wrapping_sub(depth).wrapping_add(s), depth))
                .collect();
            Ring {
                owners,
                tail: start,
            }
        }
        fn write(&mut self) {
            let depth = self.owners.len() as u32;
            self.owners[(self.tail % depth) as usize] = cqe::phase(self.tail, depth);
            self.tail = self.tail.wrapping_add(1);
        }
        fn written(&self, i: u32) -> bool {
            let depth = self.owners.len() as u32;
            self.owners[(i % depth) as usize] == cqe::phase(i, depth)
        }
    }

    /// Full exactly when the engine wrote `depth` completions past the head, on every
    /// pass through the ring and across the wrap of the 32-bit indices.
    #[test]
    fn a_ring_is_full_exactly_when_depth_completions_wait() {
        for depth in [2u32, 4, 64] {
            for start in [
                0u32,
                5 * depth,
                u32::MAX - depth - 1,
                u32::MAX - 2 * depth + 1,
            ] {
                // `start` in whole rings, as indices run from 0 in whole passes.
                let start = start - start % depth;
                let mut ring = Ring::new(depth, start);
                let mut head = start;
                for _ in 0..3 * depth {
                    for k in 0..=depth {
                        let waiting = ring.tail.wrapping_sub(head);
                        assert_eq!(
                            was_full(head, depth, |i| ring.written(i)),
                            waiting == depth,
                            "depth {depth}, head {head}, {waiting} waiting (step {k})"
                        );
                        if waiting == depth {
                            break;
                        }
                        ring.write();
                    }
                    // The consumer takes one to three of the `depth` waiting.
                    head = head.wrapping_add(1 + head % depth.min(3));
                }
            }
        }
    }
}
