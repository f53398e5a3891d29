//! The admin queue as a driver drives it: submitting commands, waiting for their
//! completions (and the asynchronous events among them), and one typed function per command.

use std::time::{Duration, Instant};

use crate::*;

impl FakeGuest {
    // ---- admin queue ----------------------------------------------------------------------

    /// Submits a command without waiting; returns its cmd_id (assigned here).
    pub fn admin_submit(&mut self, mut cmd: AdminCmd) -> u32 {
        let id = self.next_cmd_id;
        self.next_cmd_id = self.next_cmd_id.wrapping_add(1).max(1);
        cmd.cmd_id = id;
        let q = self.admin.as_mut().expect("admin queue not set up");
        let at = q.push();
        let tail = q.tail;
        self.write_obj(at, &cmd);
        fence(Ordering::Release);
        self.reg_write(REG_ADMIN_SQ_TAIL, tail);
        id
    }

    /// The next admin completion in ring order, if one arrives within `timeout`. Releases
    /// its slot (REG_ADMIN_CQ_HEAD) after reading it.
    pub fn admin_next(&mut self, timeout: Duration) -> Option<AdminCqe> {
        let (phase_at, phase) = self
            .admin
            .as_ref()
            .expect("admin queue not set up")
            .next_phase();
        if !self.wait_phase(phase_at, phase, timeout) {
            return None;
        }
        let q = self.admin.as_mut().unwrap();
        let cqe = q.take(&self.ram).expect("the phase said it is written");
        let head = q.head;
        self.reg_write(REG_ADMIN_CQ_HEAD, head);
        Some(cqe)
    }

    pub(crate) fn wait_phase(&self, gpa: u64, phase: u8, timeout: Duration) -> bool {
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            if self.ram.atomic_u8(gpa).load(Ordering::Acquire) & 1 == phase {
                return true;
            }
            if start.elapsed() > timeout {
                return false;
            }
            spins += 1;
            if spins < 200 {
                std::hint::spin_loop();
            } else {
                // Two cores shared with the device's threads: do not starve them.
                std::thread::sleep(Duration::from_micros(20));
            }
        }
    }

    /// Waits for the completion of `cmd_id` (completions of other commands that arrive
    /// first are kept for their own waiters).
    pub fn admin_wait(&mut self, cmd_id: u32, timeout: Duration) -> Option<AdminCqe> {
        if let Some(i) = self.stash.iter().position(|c| c.cmd_id == cmd_id) {
            return self.stash.remove(i);
        }
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let c = self.admin_next(left)?;
            if c.cmd_id == cmd_id {
                return Some(c);
            }
            self.stash.push_back(c);
        }
    }

    /// Waits for a command of this guest's device and one of `peer`'s, two devices whose
    /// commands may each need the other's turn (a connect and its accept over a cable):
    /// their completions, this one's first. Panics if they do not complete within
    /// [`TIMEOUT`].
    pub fn admin_wait_both(
        &mut self,
        cmd_id: u32,
        peer: &mut FakeGuest,
        peer_cmd_id: u32,
    ) -> (AdminCqe, AdminCqe) {
        let deadline = Instant::now() + TIMEOUT;
        let (mut ours, mut theirs) = (None, None);
        while ours.is_none() || theirs.is_none() {
            assert!(Instant::now() < deadline, "commands did not complete");
            if ours.is_none() {
                ours = self.admin_wait(cmd_id, Duration::from_millis(5));
            }
            if theirs.is_none() {
                theirs = peer.admin_wait(peer_cmd_id, Duration::from_millis(5));
            }
        }
        (ours.unwrap(), theirs.unwrap())
    }

    /// Runs one command to completion; panics if it does not complete within [`TIMEOUT`].
    /// Checks the completion echoes the opcode and carries no results on error.
    pub fn admin(&mut self, cmd: AdminCmd) -> AdminCqe {
        let op = cmd.opcode;
        let id = self.admin_submit(cmd);
        let c = self.admin_wait(id, TIMEOUT).unwrap_or_else(|| {
            panic!("admin command {op:#x} (cmd_id {id}) got no completion within {TIMEOUT:?}")
        });
        check_admin_cqe(&c, op);
        c
    }

    /// Runs a command; Ok(completion) or Err(status).
    pub fn admin_result(&mut self, cmd: AdminCmd) -> Result<AdminCqe, u16> {
        let c = self.admin(cmd);
        if c.status == ADMIN_STATUS_OK {
            Ok(c)
        } else {
            Err(c.status)
        }
    }

    // ---- typed admin commands -------------------------------------------------------------

    /// A query (`QUERY_DEVICE`, `QUERY_STATS`, `LIST_ADDRS`) answering into `len` bytes at
    /// `buf`: its result0.
    pub fn query_at(&mut self, opcode: u16, buf: u64, len: u32) -> Result<u64, u16> {
        self.admin_result(query_cmd(opcode, buf, len))
            .map(|c| c.result0)
    }

    /// A query answering into a fresh page, which must succeed: (what it wrote, result0).
    fn query<T: FromBytes>(&mut self, opcode: u16, what: &str) -> (T, u64) {
        let buf = self.alloc_pages(1);
        let r = self
            .query_at(opcode, buf, std::mem::size_of::<T>() as u32)
            .unwrap_or_else(|s| panic!("{what} failed: {}", admin_status_name(s)));
        (self.read_obj(buf), r)
    }

    pub fn query_device_at(&mut self, buf: u64, len: u32) -> Result<(), u16> {
        self.query_at(ADMIN_OP_QUERY_DEVICE, buf, len).map(|_| ())
    }

    pub fn query_device(&mut self) -> DeviceInfo {
        self.query(ADMIN_OP_QUERY_DEVICE, "QUERY_DEVICE").0
    }

    pub fn query_stats_at(&mut self, buf: u64, len: u32) -> Result<(), u16> {
        self.query_at(ADMIN_OP_QUERY_STATS, buf, len).map(|_| ())
    }

    pub fn query_stats(&mut self) -> Stats {
        self.query(ADMIN_OP_QUERY_STATS, "QUERY_STATS").0
    }

    pub fn list_addrs_at(&mut self, buf: u64, len: u32) -> Result<u64, u16> {
        self.query_at(ADMIN_OP_LIST_ADDRS, buf, len)
    }

    /// LIST_ADDRS: (address, prefix length, flags) of each valid entry; checks the count
    /// result matches the list and the entries past it are zero.
    pub fn list_addrs(&mut self) -> Vec<([u8; 16], u8, u8)> {
        let (l, n): (AddrList, u64) = self.query(ADMIN_OP_LIST_ADDRS, "LIST_ADDRS");
        assert_eq!(l.count as u64, n, "LIST_ADDRS result0 is the count written");
        assert_eq!(l.reserved, 0);
        for e in &l.entries[l.count as usize..] {
            assert_eq!(
                *e,
                AddrEntry::new_zeroed(),
                "entries past the count are zero"
            );
        }
        l.entries[..l.count as usize]
            .iter()
            .map(|e| {
                assert_eq!(e.reserved, [0; 6]);
                (e.addr, e.prefix_len, e.flags)
            })
            .collect()
    }

    /// One counter of QUERY_STATS.
    pub fn stat(&mut self, index: u32) -> u64 {
        self.query_stats().counters[index as usize]
    }

    /// The device's MAC and link-local address.
    pub fn mac(&mut self) -> [u8; 6] {
        self.query_device().mac
    }
    pub fn link_local(&mut self) -> [u8; 16] {
        let mac = self.mac();
        link_local(mac)
    }

    pub fn set_mac(&mut self, mac: [u8; 6]) -> Result<(), u16> {
        let mut a = SetMacArgs::new_zeroed();
        a.mac = mac;
        self.admin_result(cmd(ADMIN_OP_SET_MAC, 0, 0, &a))
            .map(|_| ())
    }

    pub fn add_addr(&mut self, addr: [u8; 16], prefix_len: u8) -> Result<(), u16> {
        let mut a = AddrArgs::new_zeroed();
        a.addr = addr;
        a.prefix_len = prefix_len;
        self.admin_result(cmd(ADMIN_OP_ADD_ADDR, 0, 0, &a))
            .map(|_| ())
    }

    pub fn del_addr(&mut self, addr: [u8; 16]) -> Result<(), u16> {
        let mut a = AddrArgs::new_zeroed();
        a.addr = addr;
        self.admin_result(cmd(ADMIN_OP_DEL_ADDR, 0, 0, &a))
            .map(|_| ())
    }

    /// ADD_ROUTE `dest/prefix_len` via `gateway` with `metric`.
    pub fn add_route(
        &mut self,
        dest: [u8; 16],
        prefix_len: u8,
        gateway: [u8; 16],
        metric: u32,
    ) -> Result<(), u16> {
        let a = route_args(dest, prefix_len, gateway, metric);
        self.admin_result(cmd(ADMIN_OP_ADD_ROUTE, 0, 0, &a))
            .map(|_| ())
    }

    /// DEL_ROUTE of the route `dest/prefix_len` with `metric`.
    pub fn del_route(&mut self, dest: [u8; 16], prefix_len: u8, metric: u32) -> Result<(), u16> {
        let a = route_args(dest, prefix_len, [0; 16], metric);
        self.admin_result(cmd(ADMIN_OP_DEL_ROUTE, 0, 0, &a))
            .map(|_| ())
    }

    /// ADD_NEIGH: `addr` at `mac`, static.
    pub fn add_neigh(&mut self, addr: [u8; 16], mac: [u8; 6]) -> Result<(), u16> {
        let a = neighbor_args(addr, mac);
        self.admin_result(cmd(ADMIN_OP_ADD_NEIGH, 0, 0, &a))
            .map(|_| ())
    }

    /// DEL_NEIGH of the static neighbour `addr`.
    pub fn del_neigh(&mut self, addr: [u8; 16]) -> Result<(), u16> {
        let a = neighbor_args(addr, [0; 6]);
        self.admin_result(cmd(ADMIN_OP_DEL_NEIGH, 0, 0, &a))
            .map(|_| ())
    }

    /// CREATE_CTX with a fresh page of guest RAM as its doorbell page.
    pub fn create_ctx(&mut self) -> Result<u32, u16> {
        let page = self.alloc_pages(1);
        self.create_ctx_at(page)
    }

    /// CREATE_CTX naming `doorbell_page` (any address: tests of the device's checks).
    pub fn create_ctx_at(&mut self, doorbell_page: u64) -> Result<u32, u16> {
        let ctx = self
            .admin_result(create_ctx_cmd(doorbell_page))
            .map(|c| c.result0 as u32)?;
        self.db_pages[ctx as usize] = doorbell_page;
        Ok(ctx)
    }

    pub fn destroy_ctx(&mut self, ctx: u32) -> Result<(), u16> {
        self.admin_result(cmd0(ADMIN_OP_DESTROY_CTX, ctx, 0))
            .map(|_| ())
    }

    /// Raw CREATE_CQ: (CQ id, doorbell slot).
    pub fn create_cq_args(&mut self, ctx: u32, a: &CreateCqArgs) -> Result<(u32, u32), u16> {
        self.admin_result(cmd(ADMIN_OP_CREATE_CQ, ctx, 0, a))
            .map(|c| (c.result0 as u32, c.result1 as u32))
    }

    /// A CQ of `depth` entries on a scattered ring, raising `vector` when armed.
    pub fn create_cq_on(&mut self, ctx: u32, depth: u32, vector: u32) -> Result<Cq, u16> {
        let pages = self.alloc_scattered(ring_pages(depth, CQE_SIZE) as usize);
        let a = cq_body(self.page_list(&pages), depth, vector);
        let (id, slot) = self.create_cq_args(ctx, &a)?;
        assert_ne!(id, 0, "object handles are non-zero");
        assert!(slot < DB_CQ_SLOTS, "CQ doorbell slot {slot} out of range");
        Ok(Cq::created(ctx, &a, pages, (id, slot)))
    }

    /// A CQ on the next completion vector (1..16 in turn).
    pub fn create_cq(&mut self, ctx: u32, depth: u32) -> Result<Cq, u16> {
        let v = self.next_vector;
        self.next_vector = self.next_vector % (MSIX_VECTORS as u32 - 1) + 1;
        self.create_cq_on(ctx, depth, v)
    }

    pub fn destroy_cq(&mut self, ctx: u32, cq: u32) -> Result<(), u16> {
        self.admin_result(cmd0(ADMIN_OP_DESTROY_CQ, ctx, cq))
            .map(|_| ())
    }

    /// Raw CREATE_QP: (QP id, doorbell slot).
    pub fn create_qp_args(&mut self, ctx: u32, a: &CreateQpArgs) -> Result<(u32, u32), u16> {
        self.admin_result(cmd(ADMIN_OP_CREATE_QP, ctx, 0, a))
            .map(|c| (c.result0 as u32, c.result1 as u32))
    }

    /// Fills CreateQpArgs with fresh scattered rings; returns the args and the ring pages.
    /// `cqs`: (send CQ, receive CQ); `depths`: (SQ, RQ).
    pub fn qp_args(
        &mut self,
        cqs: (u32, u32),
        depths: (u32, u32),
        qp_type: u8,
        framing: u8,
    ) -> (CreateQpArgs, Vec<u64>, Vec<u64>) {
        let sq_pages = self.alloc_scattered(ring_pages(depths.0, WQE_SIZE) as usize);
        let rq_pages = self.alloc_scattered(ring_pages(depths.1, WQE_SIZE) as usize);
        let lists = (self.page_list(&sq_pages), self.page_list(&rq_pages));
        let a = qp_body(lists, cqs, depths, qp_type, framing);
        (a, sq_pages, rq_pages)
    }

    /// A QP of `qp_type` and `framing`; `cqs`: (send CQ, receive CQ); `depths`: (SQ, RQ).
    pub fn create_qp_typed(
        &mut self,
        ctx: u32,
        cqs: (u32, u32),
        depths: (u32, u32),
        qp_type: u8,
        framing: u8,
    ) -> Result<Qp, u16> {
        let (a, sq_pages, rq_pages) = self.qp_args(cqs, depths, qp_type, framing);
        let (id, slot) = self.create_qp_args(ctx, &a)?;
        assert_ne!(id, 0, "object handles are non-zero");
        assert!(slot < DB_QP_SLOTS, "QP doorbell slot {slot} out of range");
        Ok(Qp::created(ctx, &a, (sq_pages, rq_pages), (id, slot)))
    }

    /// A UDP QP.
    pub fn create_qp(
        &mut self,
        ctx: u32,
        send_cq: u32,
        recv_cq: u32,
        sq_depth: u32,
        rq_depth: u32,
    ) -> Result<Qp, u16> {
        self.create_qp_typed(
            ctx,
            (send_cq, recv_cq),
            (sq_depth, rq_depth),
            QP_TYPE_UDP,
            0,
        )
    }

    pub fn destroy_qp(&mut self, ctx: u32, qp: u32) -> Result<(), u16> {
        self.admin_result(cmd0(ADMIN_OP_DESTROY_QP, ctx, qp))
            .map(|_| ())
    }

    pub fn reg_mr_args(&mut self, ctx: u32, a: &RegMrArgs) -> Result<Mr, u16> {
        self.admin_result(cmd(ADMIN_OP_REG_MR, ctx, 0, a))
            .map(|c| Mr {
                lkey: c.result0 as u32,
                rkey: c.result1 as u32,
            })
    }

    /// Registers `b` with `access` rights.
    pub fn reg_mr(&mut self, ctx: u32, b: &Buf, access: u32) -> Result<Mr, u16> {
        let list = self.page_list(&b.pages);
        let a = mr_body(list, b.pages.len() as u32, b.offset, b.iova, b.len, access);
        let mr = self.reg_mr_args(ctx, &a)?;
        assert_ne!(mr.lkey, 0, "lkeys are non-zero handles");
        Ok(mr)
    }

    pub fn dereg_mr(&mut self, ctx: u32, lkey: u32) -> Result<(), u16> {
        self.admin_result(cmd0(ADMIN_OP_DEREG_MR, ctx, lkey))
            .map(|_| ())
    }

    /// BIND: the port bound.
    pub fn bind(&mut self, ctx: u32, qp: u32, addr: [u8; 16], port: u16) -> Result<u16, u16> {
        self.admin_result(bind_cmd(ctx, qp, addr, port))
            .map(|c| c.result0 as u16)
    }

    /// BIND sharing the port (see [`bind_shared_cmd`]).
    pub fn bind_shared(
        &mut self,
        ctx: u32,
        qp: u32,
        addr: [u8; 16],
        port: u16,
    ) -> Result<u16, u16> {
        self.admin_result(bind_shared_cmd(ctx, qp, addr, port))
            .map(|c| c.result0 as u16)
    }

    /// SET_QP_OPT UDP_PEER (see [`udp_peer_cmd`]).
    pub fn set_udp_peer(
        &mut self,
        ctx: u32,
        qp: u32,
        peer: [u8; 16],
        port: u16,
    ) -> Result<(), u16> {
        self.admin_result(udp_peer_cmd(ctx, qp, peer, port))
            .map(|_| ())
    }

    /// BIND on every address for a connect to `peer`/`peer_port` (see [`bind_for_cmd`]).
    pub fn bind_for(
        &mut self,
        ctx: u32,
        qp: u32,
        port: u16,
        peer: [u8; 16],
        peer_port: u16,
    ) -> Result<u16, u16> {
        self.admin_result(bind_for_cmd(ctx, qp, port, peer, peer_port))
            .map(|c| c.result0 as u16)
    }

    pub fn listen(
        &mut self,
        ctx: u32,
        addr: [u8; 16],
        port: u16,
        backlog: u32,
    ) -> Result<u32, u16> {
        self.admin_result(listen_cmd(ctx, addr, port, backlog))
            .map(|c| c.result0 as u32)
    }

    pub fn destroy_listener(&mut self, ctx: u32, listener: u32) -> Result<(), u16> {
        self.admin_result(cmd0(ADMIN_OP_DESTROY_LISTENER, ctx, listener))
            .map(|_| ())
    }

    /// Submits ACCEPT (completes asynchronously); returns the cmd_id.
    pub fn submit_accept(&mut self, ctx: u32, listener: u32, qp: u32) -> u32 {
        self.admin_submit(accept_cmd(ctx, listener, qp))
    }

    /// Submits CONNECT (completes asynchronously); returns the cmd_id.
    pub fn submit_connect(&mut self, ctx: u32, qp: u32, addr: [u8; 16], port: u16) -> u32 {
        self.admin_submit(connect_cmd(ctx, qp, addr, port))
    }

    /// Waits for an asynchronous command's completion; panics after [`TIMEOUT`].
    pub fn admin_wait_done(&mut self, cmd_id: u32) -> AdminCqe {
        self.admin_wait(cmd_id, TIMEOUT)
            .unwrap_or_else(|| panic!("cmd_id {cmd_id} got no completion within {TIMEOUT:?}"))
    }
}
