//! A context of the device as the checks drive it: the file, its doorbell and kick pages,
//! CQs and QPs with their mapped rings, WQEs written and CQEs read directly, and a pair of
//! UDP QPs moving datagrams between them.

use crate::*;

pub(crate) struct Cq {
    pub(crate) handle: u32,
    pub(crate) slot: u32,
    pub(crate) depth: u32,
    pub(crate) ring: *mut u8,
    pub(crate) ring_len: usize,
    pub(crate) ring_offset: u64,
    pub(crate) head: u32,
    pub(crate) arm_seq: u32,
    pub(crate) vector: u32,
}

pub(crate) struct Qp {
    pub(crate) handle: u32,
    pub(crate) slot: u32,
    pub(crate) sq: *mut u8,
    pub(crate) rq: *mut u8,
    pub(crate) sq_len: usize,
    pub(crate) rq_len: usize,
    pub(crate) sq_offset: u64,
    pub(crate) sq_depth: u32,
    pub(crate) rq_depth: u32,
    pub(crate) sq_tail: u32,
    pub(crate) rq_tail: u32,
}

/// An open `/dev/qpip0` with its doorbell and kick pages mapped.
pub(crate) struct Ctx {
    pub(crate) fd: i32,
    pub(crate) info: QueryDevice,
    pub(crate) db: *mut u8,
    pub(crate) kick: *mut u8,
    pub(crate) kicks: u64,
}

impl Ctx {
    pub(crate) fn open() -> Result<Ctx, String> {
        Ctx::from_fd(ok(open_dev(0), "open /dev/qpip0")?)
    }

    /// A context of a file already open on the device.
    pub(crate) fn from_fd(fd: i32) -> Result<Ctx, String> {
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

    pub(crate) fn ioc<T>(&self, req: u32, arg: &mut T) -> Result<(), i32> {
        ioc(self.fd, req, arg)
    }

    /// Submits CLOSE of `qp` (its completion is an EVENT_CLOSE carrying `user_data`).
    pub(crate) fn close(&self, qp: u32, user_data: u64) -> Result<(), i32> {
        let mut cl = Close::new();
        cl.qp = qp;
        cl.user_data = user_data;
        self.ioc(IOCTL_CLOSE, &mut cl)
    }

    pub(crate) fn create_cq(&self, depth: u32, efd: i32) -> Result<Cq, i32> {
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

    /// A QP of `qp_type`; a TCP one with message framing.
    pub(crate) fn create_qp(&self, qp_type: u8, scq: u32, rcq: u32, depth: u32) -> Result<Qp, i32> {
        let framing = if qp_type == QP_TYPE_TCP {
            FRAMING_MESSAGE
        } else {
            0
        };
        self.create_qp_framed(qp_type, framing, scq, rcq, depth)
    }

    pub(crate) fn create_qp_framed(
        &self,
        qp_type: u8,
        framing: u8,
        scq: u32,
        rcq: u32,
        depth: u32,
    ) -> Result<Qp, i32> {
        let mut a = CreateQp {
            qp_type,
            framing,
            send_cq: scq,
            recv_cq: rcq,
            sq_depth: depth,
            rq_depth: depth,
            ..CreateQp::new()
        };
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

    pub(crate) fn destroy(&self, req: u32, handle: u32) -> Result<(), i32> {
        let mut a = Handle::new();
        a.handle = handle;
        self.ioc(req, &mut a)
    }

    pub(crate) fn reg_mr(&self, addr: u64, len: u64, access: u32) -> Result<u32, i32> {
        self.reg_mr_keys(addr, len, access).map(|(lkey, _)| lkey)
    }

    /// Registers memory; its lkey and rkey.
    pub(crate) fn reg_mr_keys(&self, addr: u64, len: u64, access: u32) -> Result<(u32, u32), i32> {
        let mut a = RegMr::new();
        a.addr = addr;
        a.length = len;
        a.access = access;
        self.ioc(IOCTL_REG_MR, &mut a)?;
        Ok((a.lkey, a.rkey))
    }

    pub(crate) fn bind(&self, qp: u32, port: u16) -> Result<u16, i32> {
        let mut a = Bind::new();
        a.qp = qp;
        a.local.port = port;
        self.ioc(IOCTL_BIND, &mut a)?;
        Ok(a.local.port)
    }

    pub(crate) fn listen(&self, port: u16) -> Result<u32, i32> {
        let mut a = Listen::new();
        a.local.port = port;
        a.backlog = 4;
        self.ioc(IOCTL_LISTEN, &mut a)?;
        Ok(a.handle)
    }

    /// ACCEPT: `qp` (a TCP QP) takes the next connection of `listener`; its event carries
    /// `user_data`.
    pub(crate) fn accept(&self, listener: u32, qp: u32, user_data: u64) -> Result<(), i32> {
        self.accept_iwarp(listener, qp, user_data, zeroed())
    }

    /// ACCEPT on an iWARP QP, which brings `iwarp` to the MPA exchange.
    pub(crate) fn accept_iwarp(
        &self,
        listener: u32,
        qp: u32,
        user_data: u64,
        iwarp: IwarpConn,
    ) -> Result<(), i32> {
        let mut a = Accept {
            listener,
            qp,
            user_data,
            iwarp,
            ..Accept::new()
        };
        self.ioc(IOCTL_ACCEPT, &mut a)
    }

    /// CONNECT of `qp` (a TCP QP) to `addr` port `port`; its event carries `user_data`.
    pub(crate) fn connect(
        &self,
        qp: u32,
        addr: [u8; 16],
        port: u16,
        user_data: u64,
    ) -> Result<(), i32> {
        self.connect_iwarp(qp, addr, port, user_data, zeroed())
    }

    /// CONNECT of an iWARP QP, which brings `iwarp` to the MPA exchange.
    pub(crate) fn connect_iwarp(
        &self,
        qp: u32,
        addr: [u8; 16],
        port: u16,
        user_data: u64,
        iwarp: IwarpConn,
    ) -> Result<(), i32> {
        let mut a = Connect {
            qp,
            peer: Endpoint {
                addr,
                port,
                reserved: 0,
            },
            user_data,
            iwarp,
            ..Connect::new()
        };
        self.ioc(IOCTL_CONNECT, &mut a)
    }

    pub(crate) fn stats(&self) -> Result<QueryStats, i32> {
        let mut a = QueryStats::new();
        self.ioc(IOCTL_QUERY_STATS, &mut a)?;
        Ok(a)
    }

    // ---- the data path, as the verbs library will do it ----

    pub(crate) fn db_u32(&self, off: u32) -> *mut u32 {
        // SAFETY: offsets inside the one mapped doorbell page.
        unsafe { self.db.add(off as usize).cast() }
    }

    /// Rings a doorbell exactly as `qpip_abi::doorbell` prescribes (its `Producer`), and
    /// kicks if the engine said it sleeps.
    pub(crate) fn ring(&mut self, off: u32, value: u32) {
        // SAFETY: the mapped doorbell page, page-aligned, mapped as long as `self`.
        let page = unsafe { doorbell::Producer::from_ptr(self.db) };
        if page.ring(off, value) {
            // SAFETY: the kick register at the start of the mapped kick page.
            unsafe { ptr::write_volatile(self.kick.add(KICK as usize).cast::<u32>(), 1) };
            self.kicks += 1;
        }
    }

    pub(crate) fn post(&mut self, qp: &mut Qp, send: bool, wqe: &[u8; WQE_SIZE as usize]) {
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

    pub(crate) fn poll_cq(&mut self, cq: &mut Cq) -> Option<Cqe> {
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

    pub(crate) fn wait_cq(&mut self, cq: &mut Cq) -> Option<Cqe> {
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

    pub(crate) fn arm(&mut self, cq: &mut Cq) {
        cq.arm_seq = cq.arm_seq.wrapping_add(1) & doorbell::CQ_ARM_SEQ_MASK;
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

pub(crate) fn wqe_bytes(h: &Wqe, sges: &[Sge]) -> [u8; WQE_SIZE as usize] {
    qpip_abi::wqe::slot(h, sges)
}

pub(crate) fn zeroed<T>() -> T {
    // SAFETY: only used for the ABI's plain-integer structures.
    unsafe { std::mem::zeroed() }
}

pub(crate) fn send_wqe(wr_id: u64, port: u16, sge: Sge) -> [u8; WQE_SIZE as usize] {
    let mut h: Wqe = zeroed();
    h.wr_id = wr_id;
    h.opcode = WQE_OP_SEND;
    h.num_sge = 1;
    h.dest_addr = LOOPBACK;
    h.dest_port = port;
    wqe_bytes(&h, &[sge])
}

pub(crate) fn recv_wqe(wr_id: u64, sge: Sge) -> [u8; WQE_SIZE as usize] {
    let mut h: Wqe = zeroed();
    h.wr_id = wr_id;
    h.opcode = WQE_OP_RECV;
    h.num_sge = 1;
    wqe_bytes(&h, &[sge])
}

/// Deterministic payload byte `i` of datagram `n`.
pub(crate) fn pattern(n: u64, i: usize) -> u8 {
    (n.wrapping_mul(31).wrapping_add(i as u64 * 7) % 251) as u8
}

/// Two UDP QPs in one context, a registered buffer, and the traffic between them.
pub(crate) struct Pair {
    pub(crate) scq: Cq,
    pub(crate) rcq: Cq,
    pub(crate) a: Qp,
    pub(crate) b: Qp,
    pub(crate) port_b: u16,
    pub(crate) port_a: u16,
    pub(crate) buf: *mut u8,
    pub(crate) lkey: u32,
    pub(crate) efd: i32,
}

pub(crate) const SLOT: usize = 2048;
pub(crate) const SLOTS: usize = 16;
pub(crate) const BUF_LEN: usize = 2 * SLOT * SLOTS;

impl Pair {
    pub(crate) fn new(ctx: &mut Ctx, port_b: u16) -> Result<Pair, String> {
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
    pub(crate) fn unmap(self) {
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

    pub(crate) fn recv_slot(&self, i: usize) -> u64 {
        self.buf as u64 + (i % SLOTS * SLOT) as u64
    }

    pub(crate) fn send_slot(&self, i: usize) -> u64 {
        self.buf as u64 + ((SLOTS + i % SLOTS) * SLOT) as u64
    }

    pub(crate) fn post_recv(&mut self, ctx: &mut Ctx, n: u64) {
        let sge = Sge {
            addr: self.recv_slot(n as usize),
            length: SLOT as u32,
            lkey: self.lkey,
        };
        ctx.post(&mut self.b, false, &recv_wqe(n, sge));
    }

    /// Sends datagram `n` (of `len` bytes) from a to b and checks it arrived intact.
    pub(crate) fn exchange_one(&mut self, ctx: &mut Ctx, n: u64, len: usize) -> Result<(), String> {
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

    pub(crate) fn check_recv(&self, r: &Cqe, n: u64, len: usize) -> Result<(), String> {
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
pub(crate) fn udp_exchange(
    ctx: &mut Ctx,
    port_b: u16,
    count: u64,
    tag: &str,
) -> Result<Pair, String> {
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
