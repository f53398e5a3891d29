//! `qpip-driver-test`: exercises the guest driver's whole interface from user space, the way
//! the verbs library will use it: ioctls on `/dev/qpipN`, mmap of the doorbell page, the kick
//! page and the rings, WQEs and CQEs written and read directly, doorbells rung with the
//! sleep/kick protocol, eventfds for blocking waits, events read from the file.
//!
//! It reports facts as `@key=value` lines (the VM tests in `ci/tests/driver.rs` assert on
//! them) and exits 1 when any check failed. Subcommands:
//!
//! * `ioctls`     every ioctl with good and bad arguments, mmap rules, events, limits
//! * `isolation`  two processes: handles and offsets of one are nothing to the other, and
//!   both move traffic at once, each in its own context
//! * `churn [P [R]]` P processes creating and destroying objects R times each, at once
//! * `udp [N]`    N datagrams between two UDP QPs through the rings, then a blocking wait
//! * `traffic S`  UDP traffic in a loop for up to S seconds (to be killed in the middle)
//! * `reset [pci]` resets the device under an open context (the driver's sysfs reset, or
//!   with `pci` the PCI core's function reset): its calls fail with ENODEV
//! * `remove`     removes the PCI function under an open context, then rescans
//! * `events`     asynchronous events: a TCP QP pair over the device's own address; the
//!   peer destroyed (QP error, connection reset) and a graceful close (peer closed) reach
//!   the survivor's context and no other process's
//! * `events-lost [N]` N (more than the driver's 128) QP errors queued unread on one file:
//!   it reads 128 of them and one EVENT_LOST with the rest's count; other files hear nothing
//! * `timeout`    a TCP QP whose peer vanishes (the device address it uses is deleted under
//!   it, qpipd started with a small `--tcp-retries`): EVENT_QP_ERROR with -ETIMEDOUT, its
//!   send flushed

use std::ffi::CString;
use std::fmt::Write as _;
use std::io::Write as _;
use std::ptr;
use std::sync::atomic::{fence, Ordering};
use std::time::{Duration, Instant};

use qpip_abi::admin::{
    FRAMING_MESSAGE, MR_ACCESS_LOCAL_WRITE, QP_TYPE_TCP, QP_TYPE_UDP, STATS_COUNT,
    STAT_ADMIN_COMMANDS, STAT_ASYNC_EVENTS, STAT_ASYNC_EVENTS_LOST, STAT_TCP_RTO_TIMEOUTS,
    STAT_TCP_TIMEOUTS,
};
use qpip_abi::cqe::{
    Cqe, CQE_OP_RECV, CQE_OP_SEND, CQE_SIZE, CQE_STATUS_FLUSHED, CQE_STATUS_SUCCESS,
};
use qpip_abi::doorbell::{self, DB_CHANGE_COUNT, DB_ENGINE_SLEEPING, DB_QP_BASE};
use qpip_abi::regs::KICK;
use qpip_abi::uapi::*;
use qpip_abi::wqe::{
    Sge, Wqe, WQE_FLAG_INLINE, WQE_OP_RECV, WQE_OP_SEND, WQE_SGE_OFFSET, WQE_SIZE,
};
use qpip_abi::ABI_VERSION_MAJOR;

const DEV: &str = "/dev/qpip0";
const SYSFS: &str = "/sys/class/qpip/qpip0";
const PAGE: usize = 4096;
const LOOPBACK: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
/// Longest any single wait may take (a TCG guest on a busy host is slow).
const TIMEOUT: Duration = Duration::from_secs(10);

// ---- system calls -------------------------------------------------------------------------

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn errname(e: i32) -> String {
    let name = match e {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::ENODEV => "ENODEV",
        libc::EINVAL => "EINVAL",
        libc::ENOSPC => "ENOSPC",
        libc::ENOTTY => "ENOTTY",
        libc::E2BIG => "E2BIG",
        libc::EADDRINUSE => "EADDRINUSE",
        libc::ECANCELED => "ECANCELED",
        libc::EACCES => "EACCES",
        _ => "",
    };
    format!("{name}({e})")
}

/// The ioctl argument structures: zeroed, with `size` (their first field) filled in.
trait Arg: Sized + Copy {
    fn new() -> Self {
        // SAFETY: every uapi structure is plain integers and byte arrays: all zeros is valid.
        let mut v: Self = unsafe { std::mem::zeroed() };
        // SAFETY: each structure starts with its u32 `size` field (repr(C)).
        unsafe { *(&mut v as *mut Self as *mut u32) = std::mem::size_of::<Self>() as u32 };
        v
    }
}
impl Arg for QueryDevice {}
impl Arg for CreateCq {}
impl Arg for Handle {}
impl Arg for CreateQp {}
impl Arg for RegMr {}
impl Arg for Bind {}
impl Arg for Listen {}
impl Arg for Accept {}
impl Arg for Connect {}
impl Arg for Close {}
impl Arg for QueryStats {}
impl Arg for Addr {}
impl Arg for SetMac {}

fn ioctl_ptr(fd: i32, req: u32, arg: *mut libc::c_void) -> Result<(), i32> {
    // SAFETY: the driver reads and writes at most the size the argument says it has; the
    // callers pass buffers at least that large (or deliberately bad pointers it must reject).
    let r = unsafe { libc::ioctl(fd, req as libc::Ioctl, arg) };
    if r == 0 {
        Ok(())
    } else {
        Err(errno())
    }
}

fn ioc<T>(fd: i32, req: u32, arg: &mut T) -> Result<(), i32> {
    ioctl_ptr(fd, req, arg as *mut T as *mut libc::c_void)
}

fn open_dev(flags: i32) -> Result<i32, i32> {
    let path = CString::new(DEV).unwrap();
    // SAFETY: a valid path.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC | flags) };
    if fd < 0 {
        Err(errno())
    } else {
        Ok(fd)
    }
}

fn close(fd: i32) {
    // SAFETY: closing a descriptor this program owns.
    unsafe { libc::close(fd) };
}

fn mmap_flags(fd: i32, off: u64, len: usize, prot: i32, flags: i32) -> Result<*mut u8, i32> {
    // SAFETY: a new mapping; the kernel validates everything.
    let p = unsafe { libc::mmap(ptr::null_mut(), len, prot, flags, fd, off as libc::off_t) };
    if p == libc::MAP_FAILED {
        Err(errno())
    } else {
        Ok(p.cast())
    }
}

fn map(fd: i32, off: u64, len: usize) -> Result<*mut u8, i32> {
    mmap_flags(
        fd,
        off,
        len,
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_SHARED,
    )
}

fn unmap(p: *mut u8, len: usize) {
    // SAFETY: unmapping what map() returned with its length.
    unsafe { libc::munmap(p.cast(), len) };
}

/// Anonymous memory for registered buffers.
fn anon(len: usize) -> *mut u8 {
    let p = mmap_flags(
        -1,
        0,
        len,
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
    )
    .expect("anonymous mmap");
    // Touch it so it is populated (pinning would do that too).
    // SAFETY: fresh mapping of len bytes.
    unsafe { ptr::write_bytes(p, 0, len) };
    p
}

fn eventfd() -> i32 {
    // SAFETY: plain system call.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    assert!(fd >= 0, "eventfd: {}", errname(errno()));
    fd
}

/// Waits until `fd` polls with any of `events` or `timeout`; returns revents (0 on timeout).
fn poll1(fd: i32, events: i16, timeout: Duration) -> i16 {
    let mut p = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut p, 1, timeout.as_millis() as i32) };
    if n > 0 {
        p.revents
    } else {
        0
    }
}

fn read_eventfd(fd: i32) -> u64 {
    let mut v = 0u64;
    // SAFETY: reading 8 bytes into a u64.
    let n = unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
    if n == 8 {
        v
    } else {
        0
    }
}

fn sysfs(attr: &str) -> String {
    std::fs::read_to_string(format!("{SYSFS}/{attr}"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|e| format!("<{e}>"))
}

fn flush() {
    let _ = std::io::stdout().flush();
}

// ---- report ---------------------------------------------------------------------------------

/// Named checks, each reported as `@check.NAME=ok` or `@check.NAME=FAIL: why`.
#[derive(Default)]
struct Checks {
    failed: u32,
}

impl Checks {
    fn check(&mut self, name: &str, r: Result<(), String>) {
        match r {
            Ok(()) => println!("@check.{name}=ok"),
            Err(why) => {
                self.failed += 1;
                println!("@check.{name}=FAIL: {why}");
            }
        }
    }
}

/// Ok when `r` failed with exactly `want`.
fn fails_with<T: std::fmt::Debug>(r: Result<T, i32>, want: i32) -> Result<(), String> {
    match r {
        Err(e) if e == want => Ok(()),
        Err(e) => Err(format!("expected {}, got {}", errname(want), errname(e))),
        Ok(v) => Err(format!(
            "expected {}, but it succeeded ({v:?})",
            errname(want)
        )),
    }
}

fn ok<T>(r: Result<T, i32>, what: &str) -> Result<T, String> {
    r.map_err(|e| format!("{what}: {}", errname(e)))
}

fn ensure(cond: bool, msg: impl FnOnce() -> String) -> Result<(), String> {
    if cond {
        Ok(())
    } else {
        Err(msg())
    }
}

// ---- a context --------------------------------------------------------------------------------

struct Cq {
    handle: u32,
    slot: u32,
    depth: u32,
    ring: *mut u8,
    ring_len: usize,
    ring_offset: u64,
    head: u32,
    arm_seq: u32,
    vector: u32,
}

struct Qp {
    handle: u32,
    slot: u32,
    sq: *mut u8,
    rq: *mut u8,
    sq_len: usize,
    rq_len: usize,
    sq_offset: u64,
    sq_depth: u32,
    rq_depth: u32,
    sq_tail: u32,
    rq_tail: u32,
}

/// An open `/dev/qpip0` with its doorbell and kick pages mapped.
struct Ctx {
    fd: i32,
    info: QueryDevice,
    db: *mut u8,
    kick: *mut u8,
    kicks: u64,
}

impl Ctx {
    fn open() -> Result<Ctx, String> {
        let fd = ok(open_dev(0), "open /dev/qpip0")?;
        let mut info = QueryDevice::new();
        ok(ioc(fd, IOCTL_QUERY_DEVICE, &mut info), "QUERY_DEVICE")?;
        let db = ok(map(fd, info.doorbell_offset, PAGE), "mmap doorbell page")?;
        let kick = ok(map(fd, info.kick_offset, PAGE), "mmap kick page")?;
        Ok(Ctx {
            fd,
            info,
            db,
            kick,
            kicks: 0,
        })
    }

    fn ioc<T>(&self, req: u32, arg: &mut T) -> Result<(), i32> {
        ioc(self.fd, req, arg)
    }

    /// Submits CLOSE of `qp` (its completion is an EVENT_CLOSE carrying `user_data`).
    fn close(&self, qp: u32, user_data: u64) -> Result<(), i32> {
        let mut cl = Close::new();
        cl.qp = qp;
        cl.user_data = user_data;
        self.ioc(IOCTL_CLOSE, &mut cl)
    }

    fn create_cq(&self, depth: u32, efd: i32) -> Result<Cq, i32> {
        let mut a = CreateCq::new();
        a.depth = depth;
        a.comp_vector = ANY_VECTOR;
        a.eventfd = efd;
        self.ioc(IOCTL_CREATE_CQ, &mut a)?;
        let ring = map(self.fd, a.ring_offset, a.ring_size as usize)?;
        Ok(Cq {
            handle: a.handle,
            slot: a.db_slot,
            depth,
            ring,
            ring_len: a.ring_size as usize,
            ring_offset: a.ring_offset,
            head: 0,
            arm_seq: 0,
            vector: a.comp_vector_out,
        })
    }

    fn create_qp(&self, qp_type: u8, scq: u32, rcq: u32, depth: u32) -> Result<Qp, i32> {
        let mut a = CreateQp::new();
        a.qp_type = qp_type;
        a.framing = if qp_type == QP_TYPE_TCP {
            FRAMING_MESSAGE
        } else {
            0
        };
        a.send_cq = scq;
        a.recv_cq = rcq;
        a.sq_depth = depth;
        a.rq_depth = depth;
        self.ioc(IOCTL_CREATE_QP, &mut a)?;
        let sq = map(self.fd, a.sq_offset, a.sq_size as usize)?;
        let rq = map(self.fd, a.rq_offset, a.rq_size as usize)?;
        Ok(Qp {
            handle: a.handle,
            slot: a.db_slot,
            sq,
            rq,
            sq_len: a.sq_size as usize,
            rq_len: a.rq_size as usize,
            sq_offset: a.sq_offset,
            sq_depth: depth,
            rq_depth: depth,
            sq_tail: 0,
            rq_tail: 0,
        })
    }

    fn destroy(&self, req: u32, handle: u32) -> Result<(), i32> {
        let mut a = Handle::new();
        a.handle = handle;
        self.ioc(req, &mut a)
    }

    fn reg_mr(&self, addr: u64, len: u64, access: u32) -> Result<u32, i32> {
        let mut a = RegMr::new();
        a.addr = addr;
        a.length = len;
        a.access = access;
        self.ioc(IOCTL_REG_MR, &mut a)?;
        Ok(a.lkey)
    }

    fn bind(&self, qp: u32, port: u16) -> Result<u16, i32> {
        let mut a = Bind::new();
        a.qp = qp;
        a.port = port;
        self.ioc(IOCTL_BIND, &mut a)?;
        Ok(a.port)
    }

    fn listen(&self, port: u16) -> Result<u32, i32> {
        let mut a = Listen::new();
        a.port = port;
        a.backlog = 4;
        self.ioc(IOCTL_LISTEN, &mut a)?;
        Ok(a.handle)
    }

    fn stats(&self) -> Result<QueryStats, i32> {
        let mut a = QueryStats::new();
        self.ioc(IOCTL_QUERY_STATS, &mut a)?;
        Ok(a)
    }

    // ---- the data path, as the verbs library will do it ----

    fn db_u32(&self, off: u32) -> *mut u32 {
        // SAFETY: offsets inside the one mapped doorbell page.
        unsafe { self.db.add(off as usize).cast() }
    }

    /// Rings a doorbell exactly as `qpip_abi::doorbell` prescribes (its `Producer`), and
    /// kicks if the engine said it sleeps.
    fn ring(&mut self, off: u32, value: u32) {
        // SAFETY: the mapped doorbell page, page-aligned, mapped as long as `self`.
        let page = unsafe { doorbell::Producer::from_ptr(self.db) };
        if page.ring(off, value) {
            // SAFETY: the kick register at the start of the mapped kick page.
            unsafe { ptr::write_volatile(self.kick.add(KICK as usize).cast::<u32>(), 1) };
            self.kicks += 1;
        }
    }

    fn post(&mut self, qp: &mut Qp, send: bool, wqe: &[u8; WQE_SIZE as usize]) {
        let (ring, tail, depth) = if send {
            (qp.sq, &mut qp.sq_tail, qp.sq_depth)
        } else {
            (qp.rq, &mut qp.rq_tail, qp.rq_depth)
        };
        let at = (*tail % depth) as usize * WQE_SIZE as usize;
        // SAFETY: a slot inside the mapped ring.
        unsafe { ptr::copy_nonoverlapping(wqe.as_ptr(), ring.add(at), wqe.len()) };
        *tail = tail.wrapping_add(1);
        let tail = *tail;
        let off = if send {
            doorbell::qp_sq_tail(qp.slot)
        } else {
            doorbell::qp_rq_tail(qp.slot)
        };
        self.ring(off, tail);
    }

    fn poll_cq(&mut self, cq: &mut Cq) -> Option<Cqe> {
        let at = (cq.head % cq.depth) as usize * CQE_SIZE as usize;
        // SAFETY: the owner byte, the last of a slot inside the mapped ring.
        let owner = unsafe { ptr::read_volatile(cq.ring.add(at + CQE_SIZE as usize - 1)) };
        if owner & 1 != qpip_abi::cqe::phase(cq.head, cq.depth) {
            return None;
        }
        fence(Ordering::Acquire);
        // SAFETY: a whole CQE slot inside the mapped ring.
        let c = unsafe { ptr::read_volatile(cq.ring.add(at).cast::<Cqe>()) };
        cq.head = cq.head.wrapping_add(1);
        let head = cq.head;
        self.ring(doorbell::cq_head(cq.slot), head);
        Some(c)
    }

    fn wait_cq(&mut self, cq: &mut Cq) -> Option<Cqe> {
        let deadline = Instant::now() + TIMEOUT;
        let mut spins = 0u32;
        loop {
            if let Some(c) = self.poll_cq(cq) {
                return Some(c);
            }
            if Instant::now() > deadline {
                return None;
            }
            spins += 1;
            if spins > 100 {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }

    fn arm(&mut self, cq: &mut Cq) {
        cq.arm_seq = cq.arm_seq.wrapping_add(1);
        let seq = cq.arm_seq;
        self.ring(doorbell::cq_arm_seq(cq.slot), seq);
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        unmap(self.db, PAGE);
        unmap(self.kick, PAGE);
        close(self.fd);
    }
}

fn wqe_bytes(h: &Wqe, sges: &[Sge]) -> [u8; WQE_SIZE as usize] {
    let mut b = [0u8; WQE_SIZE as usize];
    // SAFETY: Wqe (48 bytes) and each Sge (16 bytes) fit in the 128-byte slot.
    unsafe {
        ptr::write_unaligned(b.as_mut_ptr().cast::<Wqe>(), *h);
        for (i, s) in sges.iter().enumerate() {
            let o = WQE_SGE_OFFSET as usize + i * std::mem::size_of::<Sge>();
            ptr::write_unaligned(b.as_mut_ptr().add(o).cast::<Sge>(), *s);
        }
    }
    b
}

fn zeroed<T>() -> T {
    // SAFETY: only used for the ABI's plain-integer structures.
    unsafe { std::mem::zeroed() }
}

fn send_wqe(wr_id: u64, port: u16, sge: Sge) -> [u8; WQE_SIZE as usize] {
    let mut h: Wqe = zeroed();
    h.wr_id = wr_id;
    h.opcode = WQE_OP_SEND;
    h.num_sge = 1;
    h.dest_addr = LOOPBACK;
    h.dest_port = port;
    wqe_bytes(&h, &[sge])
}

fn recv_wqe(wr_id: u64, sge: Sge) -> [u8; WQE_SIZE as usize] {
    let mut h: Wqe = zeroed();
    h.wr_id = wr_id;
    h.opcode = WQE_OP_RECV;
    h.num_sge = 1;
    wqe_bytes(&h, &[sge])
}

/// Deterministic payload byte `i` of datagram `n`.
fn pattern(n: u64, i: usize) -> u8 {
    (n.wrapping_mul(31).wrapping_add(i as u64 * 7) % 251) as u8
}

/// Two UDP QPs in one context, a registered buffer, and the traffic between them.
struct Pair {
    scq: Cq,
    rcq: Cq,
    a: Qp,
    b: Qp,
    port_b: u16,
    port_a: u16,
    buf: *mut u8,
    lkey: u32,
    efd: i32,
}

const SLOT: usize = 2048;
const SLOTS: usize = 16;
const BUF_LEN: usize = 2 * SLOT * SLOTS;

impl Pair {
    fn new(ctx: &mut Ctx, port_b: u16) -> Result<Pair, String> {
        let efd = eventfd();
        let scq = ok(ctx.create_cq(64, -1), "create send CQ")?;
        let rcq = ok(ctx.create_cq(64, efd), "create receive CQ")?;
        let a = ok(
            ctx.create_qp(QP_TYPE_UDP, scq.handle, scq.handle, 16),
            "create QP a",
        )?;
        let b = ok(
            ctx.create_qp(QP_TYPE_UDP, scq.handle, rcq.handle, 16),
            "create QP b",
        )?;
        let port_a = ok(ctx.bind(a.handle, 0), "bind a")?;
        let port_b = ok(ctx.bind(b.handle, port_b), "bind b")?;
        let buf = anon(BUF_LEN);
        let lkey = ok(
            ctx.reg_mr(buf as u64, BUF_LEN as u64, MR_ACCESS_LOCAL_WRITE),
            "register buffer",
        )?;
        Ok(Pair {
            scq,
            rcq,
            a,
            b,
            port_b,
            port_a,
            buf,
            lkey,
            efd,
        })
    }

    /// Unmaps the rings and the buffer (the file stays referenced while they are mapped).
    fn unmap(self) {
        for cq in [&self.scq, &self.rcq] {
            unmap(cq.ring, cq.ring_len);
        }
        for qp in [&self.a, &self.b] {
            unmap(qp.sq, qp.sq_len);
            unmap(qp.rq, qp.rq_len);
        }
        unmap(self.buf, BUF_LEN);
        close(self.efd);
    }

    fn recv_slot(&self, i: usize) -> u64 {
        self.buf as u64 + (i % SLOTS * SLOT) as u64
    }

    fn send_slot(&self, i: usize) -> u64 {
        self.buf as u64 + ((SLOTS + i % SLOTS) * SLOT) as u64
    }

    fn post_recv(&mut self, ctx: &mut Ctx, n: u64) {
        let sge = Sge {
            addr: self.recv_slot(n as usize),
            length: SLOT as u32,
            lkey: self.lkey,
        };
        ctx.post(&mut self.b, false, &recv_wqe(n, sge));
    }

    /// Sends datagram `n` (of `len` bytes) from a to b and checks it arrived intact.
    fn exchange_one(&mut self, ctx: &mut Ctx, n: u64, len: usize) -> Result<(), String> {
        let src = self.send_slot(n as usize) as *mut u8;
        for i in 0..len {
            // SAFETY: inside the registered buffer.
            unsafe { *src.add(i) = pattern(n, i) };
        }
        let sge = Sge {
            addr: src as u64,
            length: len as u32,
            lkey: self.lkey,
        };
        ctx.post(&mut self.a, true, &send_wqe(n, self.port_b, sge));
        let s = ctx
            .wait_cq(&mut self.scq)
            .ok_or_else(|| format!("datagram {n}: no send completion"))?;
        ensure(
            s.status == CQE_STATUS_SUCCESS && s.opcode == CQE_OP_SEND && s.wr_id == n,
            || format!("datagram {n}: send CQE {s:?}"),
        )?;
        let r = ctx
            .wait_cq(&mut self.rcq)
            .ok_or_else(|| format!("datagram {n}: no receive completion"))?;
        self.check_recv(&r, n, len)?;
        Ok(())
    }

    fn check_recv(&self, r: &Cqe, n: u64, len: usize) -> Result<(), String> {
        ensure(
            r.status == CQE_STATUS_SUCCESS
                && r.opcode == CQE_OP_RECV
                && r.wr_id == n
                && r.byte_len as usize == len
                && r.src_port == self.port_a
                && r.qp == self.b.handle,
            || format!("datagram {n}: receive CQE {r:?}"),
        )?;
        let dst = self.recv_slot(n as usize) as *const u8;
        for i in 0..len {
            // SAFETY: inside the registered buffer.
            let got = unsafe { *dst.add(i) };
            if got != pattern(n, i) {
                return Err(format!(
                    "datagram {n}: byte {i} is {got}, sent {}",
                    pattern(n, i)
                ));
            }
        }
        Ok(())
    }
}

/// `count` datagrams a -> b of sizes 1..1400, with receives posted ahead; then a blocking
/// wait: arm the receive CQ, send, sleep in poll() on its eventfd.
fn udp_exchange(ctx: &mut Ctx, port_b: u16, count: u64, tag: &str) -> Result<Pair, String> {
    let mut p = Pair::new(ctx, port_b)?;
    for n in 0..8 {
        p.post_recv(ctx, n);
    }
    for n in 0..count {
        let len = 1 + (n as usize * 97) % 1400;
        p.exchange_one(ctx, n, len)?;
        p.post_recv(ctx, n + 8);
    }
    println!("@{tag}.datagrams={count}");

    // Blocking: nothing is pending on the receive CQ; arm it, send, and sleep in poll().
    read_eventfd(p.efd);
    ctx.arm(&mut p.rcq);
    let n = count;
    let len = 100;
    let src = p.send_slot(n as usize) as *mut u8;
    for i in 0..len {
        // SAFETY: inside the registered buffer.
        unsafe { *src.add(i) = pattern(n, i) };
    }
    let sge = Sge {
        addr: src as u64,
        length: len as u32,
        lkey: p.lkey,
    };
    ctx.post(&mut p.a, true, &send_wqe(n, p.port_b, sge));
    let t0 = Instant::now();
    let rev = poll1(p.efd, libc::POLLIN, TIMEOUT);
    ensure(rev & libc::POLLIN != 0, || {
        format!("no eventfd wake-up within {TIMEOUT:?} after arming the receive CQ")
    })?;
    let wakes = read_eventfd(p.efd);
    let r = ctx
        .poll_cq(&mut p.rcq)
        .ok_or("eventfd woke, but the receive CQ is empty")?;
    p.check_recv(&r, n, len)?;
    let s = ctx.wait_cq(&mut p.scq);
    ensure(s.is_some(), || {
        "no send completion for the blocking datagram".into()
    })?;
    println!(
        "@{tag}.blocking_wakeup=ok ({} wake-up(s) after {} ms)",
        wakes,
        t0.elapsed().as_millis()
    );
    Ok(p)
}

// ---- subcommands ------------------------------------------------------------------------------

fn cmd_udp(count: u64) -> u32 {
    let mut checks = Checks::default();
    let r = Ctx::open().and_then(|mut ctx| {
        udp_exchange(&mut ctx, 7000, count, "udp")?;
        println!("@udp.kicks={}", ctx.kicks);
        Ok(())
    });
    checks.check("udp.exchange", r);
    checks.failed
}

fn cmd_traffic(seconds: u64) -> u32 {
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

/// Every ioctl, good and bad.
fn cmd_ioctls() -> u32 {
    let mut c = Checks::default();
    let mut ctx = match Ctx::open() {
        Ok(ctx) => ctx,
        Err(e) => {
            c.check("open", Err(e));
            return c.failed;
        }
    };
    let fd = ctx.fd;
    let info = ctx.info;
    println!("@ctx={}", info.ctx);
    println!("@comp_vectors={}", info.comp_vectors);

    // -- QUERY_DEVICE and the argument rules --
    c.check(
        "query_device",
        ensure(
            info.uapi_version == UAPI_VERSION
                && info.abi_version >> 16 == ABI_VERSION_MAJOR as u32
                && info.ctx < info.max_contexts
                && info.max_queue_depth >= 2
                && info.max_mr_pages > 0
                && info.comp_vectors >= 1
                && info.mac != [0; 6]
                && info.size == QUERY_DEVICE_SIZE_V1,
            || format!("{info:?}"),
        ),
    );
    // A larger buffer: the driver writes only what it knows and leaves the rest.
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Bigger {
        q: QueryDevice,
        extra: [u8; 16],
    }
    let mut big: Bigger = zeroed();
    big.q.size = std::mem::size_of::<Bigger>() as u32;
    c.check(
        "size.larger_with_zero_tail",
        ok(ioc(fd, IOCTL_QUERY_DEVICE, &mut big), "QUERY_DEVICE").and_then(|_| {
            ensure(big.q.ctx == info.ctx && big.extra == [0; 16], || {
                "larger argument not handled".into()
            })
        }),
    );
    big = zeroed();
    big.q.size = std::mem::size_of::<Bigger>() as u32;
    big.extra[3] = 1;
    c.check(
        "size.larger_with_nonzero_tail",
        fails_with(ioc(fd, IOCTL_QUERY_DEVICE, &mut big), libc::E2BIG),
    );
    let mut q = QueryDevice::new();
    q.size = 0;
    c.check(
        "size.zero",
        fails_with(ctx.ioc(IOCTL_QUERY_DEVICE, &mut q), libc::EINVAL),
    );
    q.size = QUERY_DEVICE_SIZE_V1 - 8;
    c.check(
        "size.short",
        fails_with(ctx.ioc(IOCTL_QUERY_DEVICE, &mut q), libc::EINVAL),
    );
    q.size = 1 << 20;
    c.check(
        "size.huge",
        fails_with(ctx.ioc(IOCTL_QUERY_DEVICE, &mut q), libc::E2BIG),
    );
    c.check(
        "arg.null_pointer",
        fails_with(
            ioctl_ptr(fd, IOCTL_QUERY_DEVICE, ptr::null_mut()),
            libc::EFAULT,
        ),
    );
    c.check(
        "arg.kernel_pointer",
        fails_with(
            ioctl_ptr(fd, IOCTL_QUERY_DEVICE, 0xffff_8880_0000_0000usize as *mut _),
            libc::EFAULT,
        ),
    );
    let mut q = QueryDevice::new();
    c.check(
        "ioctl.unknown_number",
        fails_with(ioc(fd, iowr(0x7f, 88), &mut q), libc::ENOTTY),
    );
    c.check(
        "ioctl.wrong_type",
        fails_with(ioc(fd, IOCTL_QUERY_DEVICE ^ (1 << 8), &mut q), libc::ENOTTY),
    );

    // -- CQs --
    let efd = eventfd();
    let cq = ctx.create_cq(64, efd);
    c.check(
        "cq.create",
        ok(cq.as_ref().map(|_| ()).map_err(|e| *e), "CREATE_CQ"),
    );
    let Ok(cq) = cq else { return c.failed };
    for (name, depth) in [
        ("cq.depth_zero", 0),
        ("cq.depth_not_power_of_two", 3),
        ("cq.depth_huge", 1 << 20),
    ] {
        let mut a = CreateCq::new();
        a.depth = depth;
        a.comp_vector = ANY_VECTOR;
        a.eventfd = -1;
        c.check(
            name,
            fails_with(ctx.ioc(IOCTL_CREATE_CQ, &mut a), libc::EINVAL),
        );
    }
    let mut a = CreateCq::new();
    a.depth = 8;
    a.comp_vector = info.comp_vectors;
    a.eventfd = -1;
    c.check(
        "cq.bad_vector",
        fails_with(ctx.ioc(IOCTL_CREATE_CQ, &mut a), libc::EINVAL),
    );
    a.comp_vector = ANY_VECTOR;
    a.eventfd = fd; // not an eventfd
    c.check(
        "cq.not_an_eventfd",
        fails_with(ctx.ioc(IOCTL_CREATE_CQ, &mut a), libc::EINVAL),
    );
    a.eventfd = 9999;
    c.check(
        "cq.bad_eventfd",
        fails_with(ctx.ioc(IOCTL_CREATE_CQ, &mut a), libc::EBADF),
    );
    a.eventfd = -1;
    a.reserved = 1;
    c.check(
        "cq.reserved_nonzero",
        fails_with(ctx.ioc(IOCTL_CREATE_CQ, &mut a), libc::EINVAL),
    );
    c.check(
        "cq.destroy_bad_handle",
        fails_with(ctx.destroy(IOCTL_DESTROY_CQ, 0xdead_beef), libc::ENOENT),
    );
    c.check(
        "cq.destroy_zero_handle",
        fails_with(ctx.destroy(IOCTL_DESTROY_CQ, 0), libc::ENOENT),
    );
    // More CQs than completion vectors: vectors are shared, spread evenly.
    let many: Vec<Result<Cq, i32>> = (0..(info.comp_vectors + 5))
        .map(|_| ctx.create_cq(4, efd))
        .collect();
    let mut per_vector = vec![0u32; info.comp_vectors as usize];
    for cqr in many.iter().flatten() {
        per_vector[cqr.vector as usize] += 1;
    }
    c.check(
        "cq.vectors_shared",
        ensure(
            many.iter().all(|r| r.is_ok())
                && per_vector.iter().max().unwrap_or(&0) - per_vector.iter().min().unwrap_or(&0)
                    <= 1,
            || format!("CQs per vector {per_vector:?}"),
        ),
    );
    for cqr in many.into_iter().flatten() {
        let _ = ctx.destroy(IOCTL_DESTROY_CQ, cqr.handle);
        unmap(cqr.ring, cqr.ring_len);
    }
    let cq2 = ctx.create_cq(8, -1).expect("second CQ");
    c.check(
        "cq.destroy",
        ok(ctx.destroy(IOCTL_DESTROY_CQ, cq2.handle), "DESTROY_CQ"),
    );
    c.check(
        "cq.double_destroy",
        fails_with(ctx.destroy(IOCTL_DESTROY_CQ, cq2.handle), libc::ENOENT),
    );
    // The ring mapping outlives the CQ (the pages stay until unmapped).
    // SAFETY: reading the still-mapped ring.
    let _ = unsafe { ptr::read_volatile(cq2.ring) };
    c.check(
        "mmap.destroyed_ring_offset",
        fails_with(map(fd, cq2.ring_offset, cq2.ring_len), libc::EINVAL),
    );
    unmap(cq2.ring, cq2.ring_len);

    // -- QPs --
    let qp = ctx.create_qp(QP_TYPE_UDP, cq.handle, cq.handle, 8);
    c.check(
        "qp.create",
        ok(qp.as_ref().map(|_| ()).map_err(|e| *e), "CREATE_QP"),
    );
    let Ok(qp) = qp else { return c.failed };
    c.check(
        "qp.foreign_cq",
        fails_with(
            ctx.create_qp(QP_TYPE_UDP, 0xdead_beef, cq.handle, 8)
                .map(|_| ()),
            libc::ENOENT,
        ),
    );
    c.check(
        "qp.bad_type",
        fails_with(
            ctx.create_qp(9, cq.handle, cq.handle, 8).map(|_| ()),
            libc::EINVAL,
        ),
    );
    c.check(
        "qp.bad_depth",
        fails_with(
            ctx.create_qp(QP_TYPE_UDP, cq.handle, cq.handle, 5)
                .map(|_| ()),
            libc::EINVAL,
        ),
    );
    c.check(
        "cq.destroy_while_used",
        fails_with(ctx.destroy(IOCTL_DESTROY_CQ, cq.handle), libc::EBUSY),
    );
    let qp2 = ctx
        .create_qp(QP_TYPE_UDP, cq.handle, cq.handle, 4)
        .expect("second QP");
    c.check(
        "qp.destroy",
        ok(ctx.destroy(IOCTL_DESTROY_QP, qp2.handle), "DESTROY_QP"),
    );
    c.check(
        "qp.double_destroy",
        fails_with(ctx.destroy(IOCTL_DESTROY_QP, qp2.handle), libc::ENOENT),
    );
    c.check(
        "mmap.destroyed_qp_ring",
        fails_with(map(fd, qp2.sq_offset, qp2.sq_len), libc::EINVAL),
    );
    unmap(qp2.sq, qp2.sq_len);
    unmap(qp2.rq, qp2.rq_len);

    // -- BIND --
    let port = ctx.bind(qp.handle, 0);
    c.check(
        "bind.ephemeral",
        ok(port.map(|p| ensure(p != 0, || "port 0".into())), "BIND").and_then(|r| r),
    );
    c.check(
        "bind.twice",
        fails_with(ctx.bind(qp.handle, 0), libc::EINVAL),
    );
    c.check(
        "bind.bad_qp",
        fails_with(ctx.bind(0xdead_beef, 0), libc::ENOENT),
    );
    let qp3 = ctx
        .create_qp(QP_TYPE_UDP, cq.handle, cq.handle, 4)
        .expect("third QP");
    if let Ok(p) = port {
        c.check(
            "bind.port_in_use",
            fails_with(ctx.bind(qp3.handle, p), libc::EADDRINUSE),
        );
    }
    let mut b = Bind::new();
    b.qp = qp3.handle;
    b.reserved1 = 1;
    c.check(
        "bind.reserved_nonzero",
        fails_with(ctx.ioc(IOCTL_BIND, &mut b), libc::EINVAL),
    );

    // -- memory regions --
    let buf = anon(16 * PAGE);
    let base = buf as u64;
    c.check(
        "mr.unaligned",
        ok(
            ctx.reg_mr(base + 123, 10_000, MR_ACCESS_LOCAL_WRITE),
            "REG_MR",
        )
        .map(|_| ()),
    );
    let lkey = ctx.reg_mr(base, 4 * PAGE as u64, MR_ACCESS_LOCAL_WRITE);
    c.check("mr.register", ok(lkey, "REG_MR").map(|_| ()));
    c.check(
        "mr.zero_length",
        fails_with(ctx.reg_mr(base, 0, 0), libc::EINVAL),
    );
    let huge = (info.max_mr_pages as u64 + 1) * PAGE as u64;
    c.check(
        "mr.huge",
        fails_with(ctx.reg_mr(base, huge, 0), libc::EINVAL),
    );
    c.check(
        "mr.wrapping",
        fails_with(ctx.reg_mr(u64::MAX - 100, 1000, 0), libc::EFAULT),
    );
    c.check(
        "mr.kernel_address",
        fails_with(ctx.reg_mr(0xffff_8880_0000_0000, 4096, 0), libc::EFAULT),
    );
    c.check(
        "mr.bad_access",
        fails_with(ctx.reg_mr(base, 4096, 0x80), libc::EINVAL),
    );
    let hole = anon(4 * PAGE);
    unmap(hole, 4 * PAGE);
    c.check(
        "mr.unmapped",
        fails_with(ctx.reg_mr(hole as u64, 4096, 0), libc::EFAULT),
    );
    let ro = mmap_flags(
        -1,
        0,
        PAGE,
        libc::PROT_READ,
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
    )
    .unwrap();
    c.check(
        "mr.read_only_memory_writable",
        fails_with(
            ctx.reg_mr(ro as u64, 64, MR_ACCESS_LOCAL_WRITE),
            libc::EFAULT,
        ),
    );
    c.check(
        "mr.read_only_memory_readable",
        ok(ctx.reg_mr(ro as u64, 64, 0), "REG_MR read-only").map(|_| ()),
    );
    if let Ok(l) = lkey {
        c.check(
            "mr.deregister",
            ok(ctx.destroy(IOCTL_DEREG_MR, l), "DEREG_MR"),
        );
        c.check(
            "mr.double_deregister",
            fails_with(ctx.destroy(IOCTL_DEREG_MR, l), libc::ENOENT),
        );
    }
    c.check(
        "mr.bad_lkey",
        fails_with(ctx.destroy(IOCTL_DEREG_MR, 0), libc::ENOENT),
    );

    // -- listeners, accept, connect, close: their errors and cancellation --
    let l = ctx.listen(5000);
    c.check("listen", ok(l, "LISTEN").map(|_| ()));
    c.check(
        "listen.port_in_use",
        fails_with(ctx.listen(5000), libc::EADDRINUSE),
    );
    c.check("listen.port_zero", fails_with(ctx.listen(0), libc::EINVAL));
    let tcp = ctx
        .create_qp(QP_TYPE_TCP, cq.handle, cq.handle, 4)
        .expect("TCP QP");
    // SAFETY: fcntl on our own descriptor.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    unsafe { libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) };
    let mut evbuf = [0u8; 2 * EVENT_SIZE as usize];
    c.check(
        "read.no_event_nonblocking",
        fails_with(read_fd(fd, &mut evbuf), libc::EAGAIN),
    );
    c.check(
        "read.buffer_too_small",
        fails_with(read_fd(fd, &mut evbuf[..10]), libc::EINVAL),
    );
    if let Ok(l) = l {
        let mut acc = Accept::new();
        acc.listener = l;
        acc.qp = tcp.handle;
        acc.user_data = 0xacce;
        c.check(
            "accept.submit",
            ok(ctx.ioc(IOCTL_ACCEPT, &mut acc), "ACCEPT"),
        );
        let mut bad = acc;
        bad.listener = 0xdead_beef;
        c.check(
            "accept.bad_listener",
            fails_with(ctx.ioc(IOCTL_ACCEPT, &mut bad), libc::ENOENT),
        );
        bad = acc;
        bad.qp = 0xdead_beef;
        c.check(
            "accept.bad_qp",
            fails_with(ctx.ioc(IOCTL_ACCEPT, &mut bad), libc::ENOENT),
        );
        c.check(
            "accept.pending_no_event",
            ensure(
                poll1(fd, libc::POLLIN, Duration::from_millis(200)) == 0,
                || "event before cancellation".into(),
            ),
        );
        c.check(
            "listener.destroy",
            ok(ctx.destroy(IOCTL_DESTROY_LISTENER, l), "DESTROY_LISTENER"),
        );
        c.check(
            "listener.double_destroy",
            fails_with(ctx.destroy(IOCTL_DESTROY_LISTENER, l), libc::ENOENT),
        );
        c.check(
            "accept.cancelled_event",
            expect_event(fd, EVENT_ACCEPT, -libc::ECANCELED, tcp.handle, 0xacce),
        );
    }
    let mut con = Connect::new();
    con.qp = tcp.handle;
    con.addr = LOOPBACK;
    con.port = 5001;
    con.user_data = 0xc0;
    c.check(
        "connect.submit",
        ok(ctx.ioc(IOCTL_CONNECT, &mut con), "CONNECT"),
    );
    c.check(
        "qp.destroy_with_pending_connect",
        ok(ctx.destroy(IOCTL_DESTROY_QP, tcp.handle), "DESTROY_QP"),
    );
    // Nothing listens on that port: the connect waits until the QP goes (no TCP engine yet)
    // or is refused (with one).
    c.check(
        "connect.cancelled_event",
        expect_event_of(
            fd,
            EVENT_CONNECT,
            &[-libc::ECANCELED, -libc::ECONNREFUSED],
            tcp.handle,
            0xc0,
        ),
    );
    // Connect on a UDP QP is refused by the device: the event says so.
    con.qp = qp3.handle;
    con.user_data = 0xc1;
    c.check(
        "connect.udp_qp_submit",
        ok(ctx.ioc(IOCTL_CONNECT, &mut con), "CONNECT"),
    );
    c.check(
        "connect.udp_qp_event",
        expect_event(fd, EVENT_CONNECT, -libc::EINVAL, qp3.handle, 0xc1),
    );
    con.qp = 0xdead_beef;
    c.check(
        "connect.bad_qp",
        fails_with(ctx.ioc(IOCTL_CONNECT, &mut con), libc::ENOENT),
    );
    c.check("close.submit", ok(ctx.close(qp3.handle, 0xc105e), "CLOSE"));
    c.check(
        "close.not_connected_event",
        expect_event(fd, EVENT_CLOSE, -libc::EINVAL, qp3.handle, 0xc105e),
    );
    c.check(
        "close.bad_qp",
        fails_with(ctx.close(0, 0xc105e), libc::ENOENT),
    );

    // -- counters --
    c.check(
        "stats",
        ok(ctx.stats(), "QUERY_STATS").and_then(|s| {
            ensure(
                s.count == STATS_COUNT && s.counters[STAT_ADMIN_COMMANDS as usize] > 0,
                || format!("count {} admin_commands {}", s.count, s.counters[0]),
            )
        }),
    );

    // -- addresses and MAC (root here) --
    let addr: [u8; 16] = "fd51:5050::99"
        .parse::<std::net::Ipv6Addr>()
        .unwrap()
        .octets();
    let mut a = Addr::new();
    a.addr = addr;
    a.prefix_len = 64;
    c.check("addr.add", ok(ctx.ioc(IOCTL_ADD_ADDR, &mut a), "ADD_ADDR"));
    c.check(
        "addr.sysfs_lists_it",
        ensure(sysfs("addresses").contains("fd51:5050::99/64"), || {
            sysfs("addresses")
        }),
    );
    c.check(
        "addr.add_twice",
        fails_with(ctx.ioc(IOCTL_ADD_ADDR, &mut a), libc::EADDRINUSE),
    );
    c.check(
        "addr.delete",
        ok(ctx.ioc(IOCTL_DEL_ADDR, &mut a), "DEL_ADDR"),
    );
    c.check(
        "addr.delete_missing",
        fails_with(ctx.ioc(IOCTL_DEL_ADDR, &mut a), libc::ENOENT),
    );
    a.prefix_len = 0;
    c.check(
        "addr.bad_prefix",
        fails_with(ctx.ioc(IOCTL_ADD_ADDR, &mut a), libc::EINVAL),
    );
    let old_mac = info.mac;
    let mut m = SetMac::new();
    m.mac = [0x02, 0x51, 0x50, 0x00, 0x00, 0x42];
    c.check(
        "mac.set",
        ok(ctx.ioc(IOCTL_SET_MAC, &mut m), "SET_MAC").and_then(|_| {
            let mut q = QueryDevice::new();
            ok(ctx.ioc(IOCTL_QUERY_DEVICE, &mut q), "QUERY_DEVICE")?;
            ensure(
                q.mac == m.mac && sysfs("mac") == "02:51:50:00:00:42",
                || format!("query {:02x?}, sysfs {}", q.mac, sysfs("mac")),
            )
        }),
    );
    m.mac = [0x01, 0, 0, 0, 0, 1];
    c.check(
        "mac.multicast",
        fails_with(ctx.ioc(IOCTL_SET_MAC, &mut m), libc::EINVAL),
    );
    m.mac = old_mac;
    c.check("mac.restore", ok(ctx.ioc(IOCTL_SET_MAC, &mut m), "SET_MAC"));

    // -- mmap rules --
    c.check(
        "mmap.doorbell_two_pages",
        fails_with(map(fd, info.doorbell_offset, 2 * PAGE), libc::EINVAL),
    );
    c.check(
        "mmap.private",
        fails_with(
            mmap_flags(
                fd,
                info.doorbell_offset,
                PAGE,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
            ),
            libc::EINVAL,
        ),
    );
    c.check(
        "mmap.exec",
        fails_with(
            mmap_flags(
                fd,
                info.kick_offset,
                PAGE,
                libc::PROT_READ | libc::PROT_EXEC,
                libc::MAP_SHARED,
            ),
            libc::EPERM,
        ),
    );
    c.check(
        "mmap.unknown_offset",
        fails_with(map(fd, 0x1234_5000, PAGE), libc::EINVAL),
    );
    c.check(
        "mmap.ring_wrong_length",
        fails_with(map(fd, cq.ring_offset, cq.ring_len + PAGE), libc::EINVAL),
    );

    // -- unprivileged: CAP_NET_ADMIN for configuration, RLIMIT_MEMLOCK for pinning --
    flush();
    // SAFETY: fork in a single-threaded program; the child only makes system calls and
    // prints, then _exits.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let mut cc = Checks::default();
        // Opened before dropping privileges: the guest image's root directory is not
        // searchable by other users. What is checked here is at ioctl time anyway.
        let opened = Ctx::open();
        let lim = libc::rlimit {
            rlim_cur: 64 << 10,
            rlim_max: 64 << 10,
        };
        // SAFETY: plain system calls.
        let dropped = unsafe {
            libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) == 0
                && libc::setgid(65534) == 0
                && libc::setuid(65534) == 0
        };
        cc.check("unprivileged.drop", ensure(dropped, || errname(errno())));
        match opened {
            Ok(uctx) => {
                let mut a = Addr::new();
                a.addr = addr;
                a.prefix_len = 64;
                cc.check(
                    "unprivileged.add_addr",
                    fails_with(uctx.ioc(IOCTL_ADD_ADDR, &mut a), libc::EPERM),
                );
                cc.check(
                    "unprivileged.del_addr",
                    fails_with(uctx.ioc(IOCTL_DEL_ADDR, &mut a), libc::EPERM),
                );
                let mut m = SetMac::new();
                m.mac = [0x02, 0, 0, 0, 0, 7];
                cc.check(
                    "unprivileged.set_mac",
                    fails_with(uctx.ioc(IOCTL_SET_MAC, &mut m), libc::EPERM),
                );
                // Rings are locked memory too: a 128 KiB CQ ring is over 64 KiB.
                cc.check(
                    "memlock.ring_over_limit",
                    fails_with(uctx.create_cq(2048, -1).map(|_| ()), libc::ENOMEM),
                );
                let small_cq = uctx.create_cq(64, -1);
                cc.check(
                    "memlock.ring_within_limit",
                    ok(
                        small_cq.as_ref().map(|_| ()).map_err(|e| *e),
                        "CREATE_CQ 4 KiB",
                    ),
                );
                if let Ok(cq) = small_cq {
                    let _ = uctx.destroy(IOCTL_DESTROY_CQ, cq.handle);
                }
                let big = anon(1 << 20);
                cc.check(
                    "memlock.over_limit",
                    fails_with(
                        uctx.reg_mr(big as u64, 1 << 20, MR_ACCESS_LOCAL_WRITE),
                        libc::ENOMEM,
                    ),
                );
                let small = uctx.reg_mr(big as u64, 16 << 10, MR_ACCESS_LOCAL_WRITE);
                cc.check(
                    "memlock.within_limit",
                    ok(small, "REG_MR 16 KiB").map(|_| ()),
                );
                cc.check(
                    "memlock.limit_counts_registered",
                    fails_with(
                        uctx.reg_mr(big as u64 + (16 << 10), 60 << 10, 0),
                        libc::ENOMEM,
                    ),
                );
                if let Ok(l) = small {
                    let _ = uctx.destroy(IOCTL_DEREG_MR, l);
                    cc.check(
                        "memlock.released_by_deregister",
                        ok(
                            uctx.reg_mr(big as u64, 60 << 10, 0),
                            "REG_MR after deregister",
                        )
                        .map(|_| ()),
                    );
                }
            }
            Err(e) => cc.check("unprivileged.open", Err(e)),
        }
        flush();
        // SAFETY: ending the child without running the parent's destructors.
        unsafe { libc::_exit(cc.failed.min(1) as i32) };
    }
    c.check("unprivileged.child", wait_child(pid));

    // -- as many contexts as the device has doorbell pages, then ENOSPC --
    let mut extra = Vec::new();
    let last = loop {
        match open_dev(0) {
            Ok(fd) => extra.push(fd),
            Err(e) => break e,
        }
        if extra.len() > 1000 {
            break 0;
        }
    };
    println!("@contexts.opened={}", extra.len() + 1);
    c.check(
        "contexts.limit",
        ensure(
            last == libc::ENOSPC && extra.len() as u32 + 1 == info.max_contexts,
            || format!("{} contexts, then {}", extra.len() + 1, errname(last)),
        ),
    );
    extra.drain(..).for_each(close);
    c.check(
        "contexts.reusable",
        ok(open_dev(0).map(close), "open after closing"),
    );

    // -- epoll over several CQs, one of them sharing the receive CQ's vector --
    c.check("cq.epoll_shared_vector", epoll_shared_vector(&mut ctx));

    // -- the data path through everything above --
    c.check(
        "udp.exchange",
        udp_exchange(&mut ctx, 7200, 20, "ioctls.udp").map(|_| ()),
    );
    println!("@ioctls.kicks={}", ctx.kicks);
    c.failed
}

fn read_fd(fd: i32, buf: &mut [u8]) -> Result<usize, i32> {
    // SAFETY: reading into a buffer of buf.len() bytes.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        Err(errno())
    } else {
        Ok(n as usize)
    }
}

/// Waits for the context's next event and checks it.
fn expect_event(fd: i32, kind: u32, status: i32, qp: u32, user_data: u64) -> Result<(), String> {
    expect_event_of(fd, kind, &[status], qp, user_data)
}

/// As [`expect_event`], with any of `statuses`.
fn expect_event_of(
    fd: i32,
    kind: u32,
    statuses: &[i32],
    qp: u32,
    user_data: u64,
) -> Result<(), String> {
    let rev = poll1(fd, libc::POLLIN, TIMEOUT);
    ensure(rev & libc::POLLIN != 0, || {
        format!("no event within {TIMEOUT:?} (revents {rev:#x})")
    })?;
    let mut buf = [0u8; EVENT_SIZE as usize];
    let n = ok(read_fd(fd, &mut buf), "read event")?;
    ensure(n == EVENT_SIZE as usize, || format!("read {n} bytes"))?;
    // SAFETY: EVENT_SIZE bytes of a repr(C) plain-integer structure.
    let ev: Event = unsafe { ptr::read_unaligned(buf.as_ptr().cast()) };
    ensure(
        ev.kind == kind
            && statuses.contains(&ev.status)
            && ev.qp == qp
            && ev.user_data == user_data,
        || {
            format!(
                "event {ev:?}, expected kind {kind} status {statuses:?} qp {qp} user_data {user_data:#x}"
            )
        },
    )
}

fn wait_child(pid: i32) -> Result<(), String> {
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    ensure(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        || format!("child failed (wait status {status:#x})"),
    )
}

/// A blocking wait in epoll on two CQ eventfds and the context's file, with another CQ
/// created on the receive CQ's MSI-X vector: the interrupt wakes every CQ on its vector,
/// and the one that has the completion is among them.
fn epoll_shared_vector(ctx: &mut Ctx) -> Result<(), String> {
    let mut p = Pair::new(ctx, 7250)?;
    p.post_recv(ctx, 0);
    let other_efd = eventfd();
    let mut a = CreateCq::new();
    a.depth = 4;
    a.comp_vector = p.rcq.vector;
    a.eventfd = other_efd;
    ok(
        ctx.ioc(IOCTL_CREATE_CQ, &mut a),
        "CREATE_CQ on a shared vector",
    )?;
    ensure(a.comp_vector_out == p.rcq.vector, || {
        format!(
            "asked for vector {}, got {}",
            p.rcq.vector, a.comp_vector_out
        )
    })?;
    // SAFETY: plain system calls on descriptors this process owns.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    ensure(ep >= 0, || format!("epoll_create1: {}", errname(errno())))?;
    for (fd, tag) in [(p.efd, 1u64), (other_efd, 2), (ctx.fd, 3)] {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: tag,
        };
        // SAFETY: as above.
        let r = unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev) };
        ensure(r == 0, || format!("epoll_ctl: {}", errname(errno())))?;
    }
    read_eventfd(p.efd);
    ctx.arm(&mut p.rcq);
    let src = p.send_slot(0) as *mut u8;
    for i in 0..32 {
        // SAFETY: inside the registered buffer.
        unsafe { *src.add(i) = pattern(0, i) };
    }
    let sge = Sge {
        addr: src as u64,
        length: 32,
        lkey: p.lkey,
    };
    ctx.post(&mut p.a, true, &send_wqe(0, p.port_b, sge));
    // A wake-up of the receive CQ's eventfd that finds its ring empty (an interrupt the
    // vector raised for some other CQ) arms again and goes on waiting, as a real consumer
    // does; the receive must come through a wake-up of its own eventfd.
    let deadline = Instant::now() + TIMEOUT;
    let mut woke: Vec<u64> = Vec::new();
    let received = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 3];
        // SAFETY: waiting into a three-element array.
        let n = unsafe { libc::epoll_wait(ep, events.as_mut_ptr(), 3, left.as_millis() as i32) };
        let ready: Vec<u64> = events[..n.max(0) as usize].iter().map(|e| e.u64).collect();
        woke.extend(&ready);
        if n <= 0 {
            break None;
        }
        if ready.contains(&1) {
            read_eventfd(p.efd);
            match ctx.poll_cq(&mut p.rcq) {
                Some(r) => break Some(r),
                None => ctx.arm(&mut p.rcq),
            }
        }
        // The other CQ on the vector wakes too; clear it so epoll does not spin on it.
        read_eventfd(other_efd);
    };
    close(ep);
    let r = received.ok_or_else(|| {
        format!("no receive completion after wake-ups {woke:?} (1: the receive CQ's eventfd)")
    })?;
    p.check_recv(&r, 0, 32)?;
    ctx.wait_cq(&mut p.scq).ok_or("no send completion")?;
    let _ = ctx.destroy(IOCTL_DESTROY_CQ, a.handle);
    close(other_efd);
    Ok(())
}

/// Two processes: the child opens its own context and tries everything of the parent's.
fn cmd_isolation() -> u32 {
    let mut c = Checks::default();
    let ctx = match Ctx::open() {
        Ok(ctx) => ctx,
        Err(e) => {
            c.check("open", Err(e));
            return c.failed;
        }
    };
    let cq = ctx.create_cq(16, -1).expect("CQ");
    let qp = ctx
        .create_qp(QP_TYPE_UDP, cq.handle, cq.handle, 8)
        .expect("QP");
    let buf = anon(4 * PAGE);
    let lkey = ctx
        .reg_mr(buf as u64, 4 * PAGE as u64, MR_ACCESS_LOCAL_WRITE)
        .expect("MR");
    let listener = ctx.listen(5100).expect("listener");
    // SAFETY: reading our own doorbell page.
    let my_change_count = unsafe { ptr::read_volatile(ctx.db_u32(DB_CHANGE_COUNT)) };

    // The handles go to the other process by value, as a malicious one would pass them.
    let mut fds = [0i32; 2];
    // SAFETY: a pipe into a two-element array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let mut msg = String::new();
    let _ = write!(
        msg,
        "{} {} {} {} {} {} {}",
        info_ctx(&ctx),
        cq.handle,
        qp.handle,
        lkey,
        listener,
        cq.ring_offset,
        qp.sq_offset
    );
    flush();
    // SAFETY: fork in a single-threaded program.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        close(fds[1]);
        let mut line = vec![0u8; 256];
        let n = read_fd(fds[0], &mut line).unwrap_or(0);
        let v: Vec<u64> = String::from_utf8_lossy(&line[..n])
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        let mut cc = Checks::default();
        let r = (|| -> Result<(), String> {
            ensure(v.len() == 7, || format!("bad message {v:?}"))?;
            let (pctx, pcq, pqp, plkey, plist, pcq_off, psq_off) = (
                v[0] as u32,
                v[1] as u32,
                v[2] as u32,
                v[3] as u32,
                v[4] as u32,
                v[5],
                v[6],
            );
            let mut mine = Ctx::open()?;
            cc.check(
                "isolation.own_context",
                ensure(mine.info.ctx != pctx, || format!("both in context {pctx}")),
            );
            cc.check(
                "isolation.destroy_cq",
                fails_with(mine.destroy(IOCTL_DESTROY_CQ, pcq), libc::ENOENT),
            );
            cc.check(
                "isolation.destroy_qp",
                fails_with(mine.destroy(IOCTL_DESTROY_QP, pqp), libc::ENOENT),
            );
            cc.check(
                "isolation.deregister_mr",
                fails_with(mine.destroy(IOCTL_DEREG_MR, plkey), libc::ENOENT),
            );
            cc.check(
                "isolation.destroy_listener",
                fails_with(mine.destroy(IOCTL_DESTROY_LISTENER, plist), libc::ENOENT),
            );
            cc.check(
                "isolation.bind_qp",
                fails_with(mine.bind(pqp, 0), libc::ENOENT),
            );
            let mine_cq = mine.create_cq(8, -1).map_err(errname)?;
            cc.check(
                "isolation.qp_on_foreign_cq",
                fails_with(
                    mine.create_qp(QP_TYPE_UDP, pcq, mine_cq.handle, 4)
                        .map(|_| ()),
                    libc::ENOENT,
                ),
            );
            let mut acc = Accept::new();
            acc.listener = plist;
            acc.qp = pqp;
            cc.check(
                "isolation.accept",
                fails_with(mine.ioc(IOCTL_ACCEPT, &mut acc), libc::ENOENT),
            );
            cc.check(
                "isolation.mmap_foreign_cq_ring",
                fails_with(map(mine.fd, pcq_off, PAGE), libc::EINVAL),
            );
            cc.check(
                "isolation.mmap_foreign_sq_ring",
                fails_with(map(mine.fd, psq_off, PAGE), libc::EINVAL),
            );
            // Scribble over this context's whole doorbell page: the other's must not change.
            for off in (0..PAGE as u32).step_by(4) {
                if off != DB_ENGINE_SLEEPING {
                    // SAFETY: inside our mapped doorbell page.
                    unsafe { ptr::write_volatile(mine.db_u32(off), 0xffff_fff0) };
                }
            }
            // Then both move traffic at once, each in its own context.
            udp_exchange(&mut mine, 7301, 10, "isolation.child").map(|_| ())?;
            Ok(())
        })();
        cc.check("isolation.child", r);
        flush();
        // SAFETY: ending the child.
        unsafe { libc::_exit(cc.failed.min(1) as i32) };
    }
    close(fds[0]);
    // SAFETY: writing the message into the pipe.
    unsafe { libc::write(fds[1], msg.as_ptr().cast(), msg.len()) };
    close(fds[1]);
    let mut ctx = ctx;
    c.check(
        "isolation.parent_traffic",
        udp_exchange(&mut ctx, 7302, 10, "isolation.parent").map(|_| ()),
    );
    c.check("isolation.child_exit", wait_child(pid));
    // SAFETY: reading our own doorbell page.
    let cc_now = unsafe { ptr::read_volatile(ctx.db_u32(DB_CHANGE_COUNT)) };
    // Our own traffic moved our counter; the child's scribbles (0xfffffff0) must not be here.
    let mut foreign = 0;
    for off in (DB_QP_BASE..PAGE as u32).step_by(4) {
        // SAFETY: inside our mapped doorbell page.
        if unsafe { ptr::read_volatile(ctx.db_u32(off)) } == 0xffff_fff0 {
            foreign += 1;
        }
    }
    c.check(
        "isolation.doorbell_page_untouched",
        ensure(foreign == 0 && cc_now != 0xffff_fff0, || {
            format!("{foreign} slots hold the other process's value (change count {my_change_count} -> {cc_now})")
        }),
    );
    // The parent's objects are all still there.
    c.check(
        "isolation.parent_objects_intact",
        ok(
            ctx.destroy(IOCTL_DESTROY_LISTENER, listener),
            "destroy own listener",
        ),
    );
    c.failed
}

fn info_ctx(ctx: &Ctx) -> u32 {
    ctx.info.ctx
}

/// Leaves an accept pending in `ctx` (the TCP engine completes it only when cancelled).
fn pending_accept(ctx: &Ctx, port: u16, user_data: u64) -> Result<u32, String> {
    let cq = ok(ctx.create_cq(4, -1), "CREATE_CQ for accept")?;
    let qp = ok(
        ctx.create_qp(QP_TYPE_TCP, cq.handle, cq.handle, 4),
        "CREATE_QP for accept",
    )?;
    let l = ok(ctx.listen(port), "LISTEN")?;
    let mut acc = Accept::new();
    acc.listener = l;
    acc.qp = qp.handle;
    acc.user_data = user_data;
    ok(ctx.ioc(IOCTL_ACCEPT, &mut acc), "ACCEPT")?;
    // The objects stay; their rings need not be mapped (a mapping keeps the file open).
    unmap(cq.ring, cq.ring_len);
    unmap(qp.sq, qp.sq_len);
    unmap(qp.rq, qp.rq_len);
    Ok(qp.handle)
}

/// Resets the device under an open context: through the driver's sysfs `reset`, or (`pci`)
/// through the PCI core's (`/sys/bus/pci/devices/ADDR/reset`, a function-level reset).
fn cmd_reset(pci: bool) -> u32 {
    let mut c = Checks::default();
    let r = (|| -> Result<(), String> {
        let mut ctx = Ctx::open()?;
        let p = udp_exchange(&mut ctx, 7400, 3, "reset.before")?;
        let qp = pending_accept(&ctx, 5400, 0x7e5e7)?;
        let resets = sysfs("reset_count");
        let path = if pci {
            format!("{SYSFS}/device/reset")
        } else {
            format!("{SYSFS}/reset")
        };
        std::fs::write(&path, "1").map_err(|e| format!("write {path}: {e}"))?;
        println!("@reset.count={resets}->{}", sysfs("reset_count"));
        let mut q = QueryDevice::new();
        c.check(
            "reset.query_fails",
            fails_with(ctx.ioc(IOCTL_QUERY_DEVICE, &mut q), libc::ENODEV),
        );
        c.check(
            "reset.create_cq_fails",
            fails_with(ctx.create_cq(8, -1).map(|_| ()), libc::ENODEV),
        );
        c.check(
            "reset.destroy_fails",
            fails_with(ctx.destroy(IOCTL_DESTROY_QP, p.a.handle), libc::ENODEV),
        );
        c.check(
            "reset.mmap_fails",
            fails_with(map(ctx.fd, ctx.info.doorbell_offset, PAGE), libc::ENODEV),
        );
        let rev = poll1(ctx.fd, libc::POLLIN, Duration::from_millis(100));
        c.check(
            "reset.poll_err",
            ensure(rev & libc::POLLERR != 0, || format!("revents {rev:#x}")),
        );
        // A process still on the data path rings doorbells into a revoked mapping: it
        // carries on (until its next call), and nothing reaches another context.
        for n in 0..3 {
            let head = p.rcq.head.wrapping_add(n);
            ctx.ring(doorbell::cq_head(p.rcq.slot), head);
        }
        c.check("reset.revoked_doorbells_harmless", Ok(()));
        // The accept that was pending ends with the device's reset, then the file is dead.
        c.check(
            "reset.pending_accept_event",
            expect_event(ctx.fd, EVENT_ACCEPT, -libc::ENODEV, qp, 0x7e5e7),
        );
        let mut evbuf = [0u8; EVENT_SIZE as usize];
        c.check(
            "reset.read_fails",
            fails_with(read_fd(ctx.fd, &mut evbuf), libc::ENODEV),
        );
        // The rings stay readable (nothing freed under the process).
        // SAFETY: the ring is still mapped.
        let _ = unsafe { ptr::read_volatile(p.rcq.ring) };
        drop(ctx);
        let mut again = Ctx::open()?;
        udp_exchange(&mut again, 7401, 3, "reset.after")?;
        Ok(())
    })();
    c.check("reset.sequence", r);
    c.failed
}

/// Removes the PCI function under an open context, closes, rescans.
fn cmd_remove() -> u32 {
    let mut c = Checks::default();
    let r = (|| -> Result<(), String> {
        let slot = std::fs::read_link(format!("{SYSFS}/device"))
            .map_err(|e| format!("{SYSFS}/device: {e}"))?;
        let slot = slot.file_name().unwrap().to_string_lossy().to_string();
        println!("@remove.slot={slot}");
        let mut ctx = Ctx::open()?;
        let p = udp_exchange(&mut ctx, 7500, 3, "remove.before")?;
        let qp = pending_accept(&ctx, 5500, 0x4e40)?;
        std::fs::write(format!("/sys/bus/pci/devices/{slot}/remove"), "1")
            .map_err(|e| format!("remove: {e}"))?;
        let mut q = QueryDevice::new();
        c.check(
            "remove.query_fails",
            fails_with(ctx.ioc(IOCTL_QUERY_DEVICE, &mut q), libc::ENODEV),
        );
        c.check(
            "remove.reg_mr_fails",
            fails_with(ctx.reg_mr(p.buf as u64, 4096, 0), libc::ENODEV),
        );
        c.check(
            "remove.mmap_fails",
            fails_with(map(ctx.fd, ctx.info.kick_offset, PAGE), libc::ENODEV),
        );
        let rev = poll1(ctx.fd, libc::POLLIN, Duration::from_millis(100));
        c.check(
            "remove.poll_err",
            ensure(rev & libc::POLLERR != 0, || format!("revents {rev:#x}")),
        );
        c.check(
            "remove.pending_accept_event",
            expect_event(ctx.fd, EVENT_ACCEPT, -libc::ENODEV, qp, 0x4e40),
        );
        c.check(
            "remove.node_gone",
            ensure(open_dev(0) == Err(libc::ENOENT), || {
                "open still works".into()
            }),
        );
        // SAFETY: the ring is still mapped.
        let _ = unsafe { ptr::read_volatile(p.rcq.ring) };
        // Closing the file and unmapping everything frees the removed device's last
        // memory, its number included: the rescanned function is qpip0 again.
        drop(ctx);
        p.unmap();
        std::fs::write("/sys/bus/pci/rescan", "1").map_err(|e| format!("rescan: {e}"))?;
        let deadline = Instant::now() + TIMEOUT;
        while open_dev(0).map(close).is_err() {
            if Instant::now() > deadline {
                return Err("no /dev/qpip0 after rescan".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut again = Ctx::open()?;
        udp_exchange(&mut again, 7501, 3, "remove.after")?;
        Ok(())
    })();
    c.check("remove.sequence", r);
    c.failed
}

/// `procs` processes at once, each creating and destroying every kind of object `rounds`
/// times with an accept cancelled each round: the admin queue wraps many times with
/// commands of several contexts in flight and completions out of order.
fn cmd_churn(procs: u64, rounds: u64) -> u32 {
    let mut c = Checks::default();
    let mut pids = Vec::new();
    flush();
    for k in 0..procs {
        // SAFETY: fork in a single-threaded program; the child _exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let r = (|| -> Result<(), String> {
                let ctx = Ctx::open()?;
                let buf = anon(8 * PAGE);
                for i in 0..rounds {
                    let what = |s: &str| format!("process {k} round {i}: {s}");
                    let cq = ok(ctx.create_cq(16, -1), &what("CREATE_CQ"))?;
                    let qp = ok(
                        ctx.create_qp(QP_TYPE_TCP, cq.handle, cq.handle, 4),
                        &what("CREATE_QP"),
                    )?;
                    let lkey = ok(
                        ctx.reg_mr(buf as u64 + 100, 5 * PAGE as u64, MR_ACCESS_LOCAL_WRITE),
                        &what("REG_MR"),
                    )?;
                    let port = 20000 + (k * 1000 + i) as u16;
                    let l = ok(ctx.listen(port), &what("LISTEN"))?;
                    let mut acc = Accept::new();
                    acc.listener = l;
                    acc.qp = qp.handle;
                    acc.user_data = i;
                    ok(ctx.ioc(IOCTL_ACCEPT, &mut acc), &what("ACCEPT"))?;
                    ok(
                        ctx.destroy(IOCTL_DESTROY_LISTENER, l),
                        &what("DESTROY_LISTENER"),
                    )?;
                    expect_event(ctx.fd, EVENT_ACCEPT, -libc::ECANCELED, qp.handle, i)
                        .map_err(|e| what(&e))?;
                    ok(ctx.destroy(IOCTL_DEREG_MR, lkey), &what("DEREG_MR"))?;
                    ok(
                        ctx.destroy(IOCTL_DESTROY_QP, qp.handle),
                        &what("DESTROY_QP"),
                    )?;
                    ok(
                        ctx.destroy(IOCTL_DESTROY_CQ, cq.handle),
                        &what("DESTROY_CQ"),
                    )?;
                    unmap(cq.ring, cq.ring_len);
                    unmap(qp.sq, qp.sq_len);
                    unmap(qp.rq, qp.rq_len);
                }
                Ok(())
            })();
            let failed = r.is_err();
            if let Err(e) = r {
                println!("@churn.error={e}");
            }
            flush();
            // SAFETY: ending the child.
            unsafe { libc::_exit(failed as i32) };
        }
        pids.push(pid);
    }
    // Meanwhile, traffic in a context of its own.
    let traffic =
        Ctx::open().and_then(|mut ctx| udp_exchange(&mut ctx, 7600, 50, "churn.udp").map(|_| ()));
    c.check("churn.traffic", traffic);
    for (k, pid) in pids.into_iter().enumerate() {
        c.check(&format!("churn.process{k}"), wait_child(pid));
    }
    println!("@churn.commands={}", procs * rounds * 10);
    c.failed
}

/// The first address of the device that is not link-local (sysfs `addresses`), else ::1.
fn device_addr() -> ([u8; 16], String) {
    for line in sysfs("addresses").lines() {
        let a = line.split('/').next().unwrap_or("");
        if let Ok(ip) = a.parse::<std::net::Ipv6Addr>() {
            if ip.segments()[0] & 0xffc0 != 0xfe80 {
                return (ip.octets(), a.to_string());
            }
        }
    }
    (LOOPBACK, "::1".into())
}

/// A TCP QP of `ctx` with one CQ for both directions, its rings mapped.
fn tcp_qp(ctx: &Ctx, what: &str) -> Result<(Qp, Cq), String> {
    let cq = ok(ctx.create_cq(8, -1), &format!("CREATE_CQ ({what})"))?;
    let qp = ok(
        ctx.create_qp(QP_TYPE_TCP, cq.handle, cq.handle, 4),
        &format!("CREATE_QP ({what})"),
    )?;
    Ok((qp, cq))
}

fn unmap_tcp_qp(qp: &Qp, cq: &Cq) {
    unmap(cq.ring, cq.ring_len);
    unmap(qp.sq, qp.sq_len);
    unmap(qp.rq, qp.rq_len);
}

/// Connects QP `cqp` of `client` through `addr` to QP `sqp` of `server`, accepted on a
/// listener on `port` that is gone again afterwards.
fn tcp_connect(
    server: &Ctx,
    client: &Ctx,
    sqp: u32,
    cqp: u32,
    addr: [u8; 16],
    port: u16,
) -> Result<(), String> {
    let l = ok(server.listen(port), "LISTEN")?;
    let mut acc = Accept::new();
    acc.listener = l;
    acc.qp = sqp;
    acc.user_data = 0xacc;
    ok(server.ioc(IOCTL_ACCEPT, &mut acc), "ACCEPT")?;
    let mut con = Connect::new();
    con.qp = cqp;
    con.addr = addr;
    con.port = port;
    con.user_data = 0xc0;
    ok(client.ioc(IOCTL_CONNECT, &mut con), "CONNECT")?;
    expect_event(client.fd, EVENT_CONNECT, 0, cqp, 0xc0).map_err(|e| format!("connect: {e}"))?;
    expect_event(server.fd, EVENT_ACCEPT, 0, sqp, 0xacc).map_err(|e| format!("accept: {e}"))?;
    ok(
        server.destroy(IOCTL_DESTROY_LISTENER, l),
        "DESTROY_LISTENER",
    )
}

/// A TCP connection between a QP of `server` and a QP of `client` through `addr`.
fn tcp_pair(server: &Ctx, client: &Ctx, addr: [u8; 16], port: u16) -> Result<(u32, u32), String> {
    let (sqp, scq) = tcp_qp(server, "server")?;
    unmap_tcp_qp(&sqp, &scq);
    let (cqp, ccq) = tcp_qp(client, "client")?;
    unmap_tcp_qp(&cqp, &ccq);
    tcp_connect(server, client, sqp.handle, cqp.handle, addr, port)?;
    Ok((sqp.handle, cqp.handle))
}

/// No event queued on `fd` (non-blocking read: EAGAIN).
fn no_event(fd: i32) -> Result<(), String> {
    let rev = poll1(fd, libc::POLLIN, Duration::from_millis(500));
    ensure(rev & libc::POLLIN == 0, || {
        let mut buf = [0u8; EVENT_SIZE as usize];
        let _ = read_fd(fd, &mut buf);
        // SAFETY: EVENT_SIZE bytes of a repr(C) plain-integer structure.
        let ev: Event = unsafe { ptr::read_unaligned(buf.as_ptr().cast()) };
        format!("an unexpected event: {ev:?}")
    })
}

/// Asynchronous events reach the owning context, and only it.
fn cmd_events() -> u32 {
    let mut c = Checks::default();
    let (addr, text) = device_addr();
    println!("@events.addr={text}");
    // Another process with a context of its own watches its file the whole time.
    let mut go = [0i32; 2];
    let mut done = [0i32; 2];
    // SAFETY: pipe(2) into arrays of two fds.
    unsafe {
        libc::pipe(go.as_mut_ptr());
        libc::pipe(done.as_mut_ptr());
    }
    // SAFETY: fork in a single-threaded program.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let r = (|| -> Result<(), String> {
            let other = Ctx::open()?;
            // SAFETY: writing one byte to our pipe.
            unsafe { libc::write(go[1], b"r".as_ptr().cast(), 1) };
            let mut fds = [
                libc::pollfd {
                    fd: other.fd,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: done[0],
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: two valid pollfds; wait until the parent is done (or 2 minutes).
            unsafe { libc::poll(fds.as_mut_ptr(), 2, 120_000) };
            ensure(fds[1].revents & libc::POLLIN != 0, || {
                "parent never finished".into()
            })?;
            no_event(other.fd)
        })();
        let mut ch = Checks::default();
        ch.check("events.other_process_sees_nothing", r);
        flush();
        std::process::exit(if ch.failed == 0 { 0 } else { 1 });
    }
    let mut b = [0u8; 1];
    // SAFETY: reading one byte from our pipe: the child's context exists.
    unsafe { libc::read(go[0], b.as_mut_ptr().cast(), 1) };

    let r = (|| -> Result<(), String> {
        let server = Ctx::open()?;
        let client = Ctx::open()?;
        // The peer goes away abruptly: the survivor's QP is reset.
        let (sqp, cqp) = tcp_pair(&server, &client, addr, 5600)?;
        ok(client.destroy(IOCTL_DESTROY_QP, cqp), "DESTROY_QP (client)")?;
        c.check(
            "events.qp_error_reset",
            expect_event(server.fd, EVENT_QP_ERROR, -libc::ECONNRESET, sqp, 0),
        );
        c.check("events.destroyer_hears_nothing", no_event(client.fd));
        // A graceful close: the other side hears the peer closed, the closer its CLOSE.
        let (sqp, cqp) = tcp_pair(&server, &client, addr, 5601)?;
        ok(client.close(cqp, 0xc105e), "CLOSE")?;
        c.check(
            "events.close_completes",
            expect_event(client.fd, EVENT_CLOSE, 0, cqp, 0xc105e),
        );
        c.check(
            "events.peer_closed",
            expect_event(server.fd, EVENT_PEER_CLOSED, 0, sqp, 0),
        );
        c.check("events.closer_hears_no_peer_close", no_event(client.fd));
        // Now the server closes too: the client hears of it.
        ok(server.close(sqp, 0x5c), "CLOSE (server)")?;
        c.check(
            "events.second_close_completes",
            expect_event(server.fd, EVENT_CLOSE, 0, sqp, 0x5c),
        );
        c.check(
            "events.peer_closed_both_ways",
            expect_event(client.fd, EVENT_PEER_CLOSED, 0, cqp, 0),
        );
        let st = ok(server.stats(), "QUERY_STATS")?;
        println!(
            "@events.device_events={} lost={}",
            st.counters[STAT_ASYNC_EVENTS as usize], st.counters[STAT_ASYNC_EVENTS_LOST as usize]
        );
        Ok(())
    })();
    c.check("events.sequence", r);
    // SAFETY: one byte to the child: we are done.
    unsafe { libc::write(done[1], b"d".as_ptr().cast(), 1) };
    c.check("events.child", wait_child(pid));
    c.failed
}

/// Reads one event without waiting.
fn read_event_now(fd: i32) -> Result<Event, String> {
    let mut buf = [0u8; EVENT_SIZE as usize];
    let n = ok(read_fd(fd, &mut buf), "read event")?;
    ensure(n == EVENT_SIZE as usize, || format!("read {n} bytes"))?;
    // SAFETY: EVENT_SIZE bytes of a repr(C) plain-integer structure.
    Ok(unsafe { ptr::read_unaligned(buf.as_ptr().cast()) })
}

/// Waits until the device has delivered `n` asynchronous events in all, then a little for
/// the driver to route the last ones.
fn wait_device_events(ctx: &Ctx, n: u64) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let st = ok(ctx.stats(), "QUERY_STATS")?;
        if st.counters[STAT_ASYNC_EVENTS as usize] >= n {
            break;
        }
        ensure(Instant::now() < deadline, || {
            format!(
                "the device delivered {} of {n} events",
                st.counters[STAT_ASYNC_EVENTS as usize]
            )
        })?;
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    Ok(())
}

/// More asynchronous events than a file holds unread: the first 128 are kept, the rest are
/// counted in one EVENT_LOST; other files are not touched; the file takes events again
/// once read.
fn cmd_events_lost(pairs: u64) -> u32 {
    const BOUND: u64 = 128;
    let mut c = Checks::default();
    let (addr, text) = device_addr();
    println!("@lost.addr={text}");
    println!("@lost.pairs={pairs}");
    let r = (|| -> Result<(), String> {
        let server = Ctx::open()?;
        let client = Ctx::open()?;
        let bystander = Ctx::open()?;
        let base = ok(server.stats(), "QUERY_STATS")?.counters[STAT_ASYNC_EVENTS as usize];
        let mut qps = Vec::new();
        for i in 0..pairs {
            qps.push(tcp_pair(&server, &client, addr, 5700 + i as u16)?);
        }
        // Every peer goes away: each survivor's QP is reset, and nobody reads yet.
        for &(_, cqp) in &qps {
            ok(client.destroy(IOCTL_DESTROY_QP, cqp), "DESTROY_QP (client)")?;
        }
        wait_device_events(&server, base + pairs)?;
        let mut got = Vec::new();
        let mut lost = Vec::new();
        // Read in batches of up to 16 records a call, without blocking.
        // SAFETY: fcntl on our own fd.
        unsafe { libc::fcntl(server.fd, libc::F_SETFL, libc::O_NONBLOCK) };
        let mut buf = vec![0u8; 16 * EVENT_SIZE as usize];
        loop {
            match read_fd(server.fd, &mut buf) {
                Ok(n) => {
                    ensure(n > 0 && n % EVENT_SIZE as usize == 0, || {
                        format!("read {n} bytes")
                    })?;
                    for rec in buf[..n].chunks(EVENT_SIZE as usize) {
                        // SAFETY: EVENT_SIZE bytes of a repr(C) plain-integer structure.
                        let ev: Event = unsafe { ptr::read_unaligned(rec.as_ptr().cast()) };
                        if ev.kind == EVENT_LOST {
                            lost.push(ev);
                        } else {
                            ensure(lost.is_empty(), || {
                                format!("an event after EVENT_LOST: {ev:?}")
                            })?;
                            got.push(ev);
                        }
                    }
                }
                Err(e) if e == libc::EAGAIN => break,
                Err(e) => return Err(format!("read: {}", errname(e))),
            }
        }
        println!("@lost.read={}", got.len());
        println!("@lost.lost_records={}", lost.len());
        c.check(
            "lost.bound_kept",
            ensure(got.len() as u64 == BOUND, || {
                format!(
                    "{} events read before EVENT_LOST, expected {BOUND}",
                    got.len()
                )
            }),
        );
        c.check(
            "lost.events_are_the_resets",
            ensure(
                got.iter().all(|e| {
                    e.kind == EVENT_QP_ERROR
                        && e.status == -libc::ECONNRESET
                        && qps.iter().any(|&(s, _)| s == e.qp)
                }) && {
                    let mut q: Vec<u32> = got.iter().map(|e| e.qp).collect();
                    q.sort();
                    q.dedup();
                    q.len() == got.len()
                },
                || {
                    format!(
                        "not 128 distinct resets of the server's QPs: {:?}",
                        got.first()
                    )
                },
            ),
        );
        c.check(
            "lost.one_record_with_the_count",
            ensure(
                lost.len() == 1 && lost[0].user_data == pairs - BOUND && lost[0].status == 0,
                || {
                    format!(
                        "EVENT_LOST records {lost:?}, expected one counting {}",
                        pairs - BOUND
                    )
                },
            ),
        );
        c.check("lost.destroyer_hears_nothing", no_event(client.fd));
        c.check("lost.bystander_hears_nothing", no_event(bystander.fd));
        let st = ok(server.stats(), "QUERY_STATS")?;
        println!(
            "@lost.device_events={} device_lost={}",
            st.counters[STAT_ASYNC_EVENTS as usize] - base,
            st.counters[STAT_ASYNC_EVENTS_LOST as usize]
        );
        c.check(
            "lost.not_the_device",
            ensure(st.counters[STAT_ASYNC_EVENTS_LOST as usize] == 0, || {
                "the device dropped events: the loss was to be the file's".into()
            }),
        );
        // Read: the file takes events again.
        // SAFETY: fcntl on our own fd.
        unsafe { libc::fcntl(server.fd, libc::F_SETFL, 0) };
        let (sqp, cqp) = tcp_pair(&server, &client, addr, 5699)?;
        ok(client.destroy(IOCTL_DESTROY_QP, cqp), "DESTROY_QP (client)")?;
        c.check(
            "lost.events_again_after_reading",
            expect_event(server.fd, EVENT_QP_ERROR, -libc::ECONNRESET, sqp, 0),
        );
        Ok(())
    })();
    c.check("lost.sequence", r);
    c.failed
}

/// Deletes (`del`) or adds back (`add`) a device address through sysfs.
fn sysfs_addr(op: &str, addr: &str) -> Result<(), String> {
    let line = if op == "add" {
        format!("add {addr}/64")
    } else {
        format!("del {addr}")
    };
    std::fs::write(format!("{SYSFS}/addresses"), line)
        .map_err(|e| format!("{op} {addr} in sysfs addresses: {e}"))
}

/// A connection whose peer vanishes: the address both ends use is deleted from the device,
/// so the client's data goes out to a network where nobody has it and is never
/// acknowledged; after `--tcp-retries` retransmissions the QP fails with a timeout.
fn cmd_timeout() -> u32 {
    let mut c = Checks::default();
    let (addr, text) = device_addr();
    println!("@timeout.addr={text}");
    let r = (|| -> Result<(), String> {
        ensure(addr != LOOPBACK, || {
            "the device has no address but ::1".into()
        })?;
        let server = Ctx::open()?;
        let mut client = Ctx::open()?;
        let (sqp, scq) = tcp_qp(&server, "server")?;
        let (mut cqp, mut ccq) = tcp_qp(&client, "client")?;
        tcp_connect(&server, &client, sqp.handle, cqp.handle, addr, 5800)?;
        let before = ok(client.stats(), "QUERY_STATS")?.counters;
        sysfs_addr("del", &text)?;
        let mut h: Wqe = zeroed();
        h.wr_id = 0x5e4d;
        h.opcode = WQE_OP_SEND;
        h.flags = WQE_FLAG_INLINE;
        let msg = b"is anybody there?";
        h.inline_len = msg.len() as u32;
        let mut w = wqe_bytes(&h, &[]);
        w[WQE_SGE_OFFSET as usize..WQE_SGE_OFFSET as usize + msg.len()].copy_from_slice(msg);
        client.post(&mut cqp, true, &w);
        let started = Instant::now();
        let rev = poll1(client.fd, libc::POLLIN, Duration::from_secs(120));
        println!("@timeout.after_ms={}", started.elapsed().as_millis());
        let r = (|| {
            ensure(rev & libc::POLLIN != 0, || "no event within 120 s".into())?;
            let ev = read_event_now(client.fd)?;
            ensure(
                ev.kind == EVENT_QP_ERROR && ev.status == -libc::ETIMEDOUT && ev.qp == cqp.handle,
                || {
                    format!(
                        "event {ev:?}, expected QP_ERROR -ETIMEDOUT on {}",
                        cqp.handle
                    )
                },
            )
        })();
        c.check("timeout.qp_error_etimedout", r);
        c.check(
            "timeout.send_flushed",
            match client.wait_cq(&mut ccq) {
                Some(e) => ensure(e.status == CQE_STATUS_FLUSHED && e.wr_id == 0x5e4d, || {
                    format!("completion {e:?}, expected the send flushed")
                }),
                None => Err("no completion for the send".into()),
            },
        );
        let after = ok(client.stats(), "QUERY_STATS")?.counters;
        let d = |i: u32| after[i as usize] - before[i as usize];
        println!(
            "@timeout.tcp_timeouts={} rto_timeouts={}",
            d(STAT_TCP_TIMEOUTS),
            d(STAT_TCP_RTO_TIMEOUTS)
        );
        c.check(
            "timeout.counted",
            ensure(d(STAT_TCP_TIMEOUTS) == 1, || {
                format!("STAT_TCP_TIMEOUTS grew by {}", d(STAT_TCP_TIMEOUTS))
            }),
        );
        c.check("timeout.server_hears_nothing", no_event(server.fd));
        sysfs_addr("add", &text)?;
        unmap_tcp_qp(&sqp, &scq);
        unmap_tcp_qp(&cqp, &ccq);
        Ok(())
    })();
    c.check("timeout.sequence", r);
    c.failed
}

/// Writes the kick register `n` times (after `/lab/go` appears, if `wait` says so) and
/// reports the guest time per write: over the whole loop, and the median of single writes
/// made `gap_us` apart (`--gap-us`, default 0: back to back). Under TCG every write is a
/// trapped MMIO access; whether the vCPU also waits for the device (a synchronous vfio-user
/// message) is what the VM test looks at from the host.
fn cmd_kicks(n: u64, wait: bool, gap_us: u64) -> u32 {
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

const USAGE: &str = "usage: qpip-driver-test ioctls | isolation | udp [N] | traffic SECONDS | reset [pci] | remove | events | events-lost [N] | timeout | kicks N [--wait] [--gap-us US]";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, d: u64| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let failed = match args.first().map(String::as_str) {
        Some("ioctls") => cmd_ioctls(),
        Some("isolation") => cmd_isolation(),
        Some("churn") => cmd_churn(num(1, 6), num(2, 30)),
        Some("udp") => cmd_udp(num(1, 20)),
        Some("traffic") => cmd_traffic(num(1, 60)),
        Some("reset") => cmd_reset(args.get(1).is_some_and(|a| a == "pci")),
        Some("remove") => cmd_remove(),
        Some("events") => cmd_events(),
        Some("events-lost") => cmd_events_lost(num(1, 140)),
        Some("timeout") => cmd_timeout(),
        Some("kicks") => cmd_kicks(
            num(1, 1000),
            args.iter().any(|a| a == "--wait"),
            args.iter()
                .position(|a| a == "--gap-us")
                .map_or(0, |i| num(i + 1, 0)),
        ),
        _ => {
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    };
    println!("@failed={failed}");
    flush();
    std::process::exit(if failed == 0 { 0 } else { 1 });
}
