//! TCP queue pairs: endpoints with their CQs and buffers, listen/accept/connect, flows
//! that move and check data, devices joined by a cable.

use std::collections::VecDeque;

use crate::*;

/// A TCP send WQE gathering `sges`, with immediate data (message framing carries it).
pub fn tcp_send_wqe(wr_id: u64, imm: u32, sges: &[Sge]) -> WqeBytes {
    let mut h = wqe_hdr(WQE_OP_SEND, wr_id);
    h.num_sge = sges.len() as u8;
    h.imm_data = imm;
    wqe_bytes(&h, sges)
}

/// A TCP send WQE with inline data.
pub fn tcp_inline_wqe(wr_id: u64, imm: u32, data: &[u8]) -> WqeBytes {
    let mut h = wqe_hdr(WQE_OP_SEND, wr_id);
    h.flags = WQE_FLAG_INLINE;
    h.inline_len = data.len() as u32;
    h.imm_data = imm;
    let mut b = wqe_bytes(&h, &[]);
    let o = WQE_SGE_OFFSET as usize;
    b[o..o + data.len()].copy_from_slice(data);
    b
}

impl FakeGuest {
    /// A TCP QP in `ctx` with `framing`, queues of `depth`, CQs of twice that, and a
    /// registered buffer of `buf_len` bytes.
    pub fn tcp_endpoint_in(&mut self, ctx: u32, framing: u8, depth: u32, buf_len: u64) -> TcpEnd {
        self.endpoint_in(ctx, (QP_TYPE_TCP, framing), depth, 2 * depth, buf_len)
    }

    /// Submits CLOSE (completes asynchronously); returns the cmd_id.
    pub fn submit_close(&mut self, ctx: u32, qp: u32) -> u32 {
        self.admin_submit(cmd0(ADMIN_OP_CLOSE, ctx, qp))
    }

    /// Submits an ASYNC_EVENT request (completes when the device has an event).
    pub fn submit_async_event(&mut self) -> u32 {
        self.admin_submit(cmd0(ADMIN_OP_ASYNC_EVENT, 0, 0))
    }

    /// Listens on `port` in `sctx`, accepts on a new QP there and connects a new QP of
    /// `cctx` to it over the device's own loopback. Returns (server end, client end).
    pub fn loopback_pair(
        &mut self,
        sctx: u32,
        cctx: u32,
        port: u16,
        framing: u8,
    ) -> (TcpEnd, TcpEnd) {
        let (_, server, client) = self.loopback_pair_listening(sctx, cctx, port, framing);
        (server, client)
    }

    /// [`FakeGuest::loopback_pair`], also returning the listener (to destroy it, so
    /// that the port can be listened on again).
    pub fn loopback_pair_listening(
        &mut self,
        sctx: u32,
        cctx: u32,
        port: u16,
        framing: u8,
    ) -> (u32, TcpEnd, TcpEnd) {
        let server = self.tcp_endpoint_in(sctx, framing, 8, 1 << 16);
        let client = self.tcp_endpoint_in(cctx, framing, 8, 1 << 16);
        let l = self.listen(sctx, UNSPECIFIED, port, 4).expect("listen");
        let acc = self.submit_accept(sctx, l, server.qp.id);
        let con = self.submit_connect(cctx, client.qp.id, LOOPBACK, port);
        for (what, id) in [("connect", con), ("accept", acc)] {
            let c = self.admin_wait_done(id);
            assert_eq!(
                c.status,
                ADMIN_STATUS_OK,
                "{what}: {}",
                admin_status_name(c.status)
            );
        }
        (l, server, client)
    }
}

/// An ASYNC_EVENT completion decoded: (ctx, object, kind, reason, lost).
pub fn async_event(c: &AdminCqe) -> (u32, u32, u16, u8, bool) {
    assert_eq!(c.opcode, ADMIN_OP_ASYNC_EVENT, "{c:?}");
    assert_eq!(c.status, ADMIN_STATUS_OK, "{}", admin_status_name(c.status));
    assert_eq!(
        c.result2 & 0x7f00_0000,
        0,
        "bits 24-30 of result2 are 0: {c:?}"
    );
    (
        c.result0 as u32,
        c.result1 as u32,
        c.result2 as u16,
        (c.result2 >> 16) as u8,
        c.result2 & ASYNC_FLAG_LOST != 0,
    )
}

/// The peer address of an ACCEPT or CONNECT completion (result0/result1 in memory order).
pub fn peer_addr(c: &AdminCqe) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[..8].copy_from_slice(&c.result0.to_ne_bytes());
    a[8..].copy_from_slice(&c.result1.to_ne_bytes());
    a
}

/// One direction-pair of a bulk stream transfer from the point of view of one QP: it
/// sends `out` in WRs of assorted sizes and SGE counts, keeps receive WRs of assorted
/// sizes posted, and collects what arrives.
pub struct Flow {
    pub out: Vec<u8>,
    pub posted: usize,
    pub send_sizes: VecDeque<u32>,
    pub sent: usize,
    pub slot: u64,
    pub rx_base: u64,
    pub rq_posted: u32,
    pub rq_done: u32,
    pub got: Vec<u8>,
    pub eof: bool,
    pub rng: Rng,
    /// Receives are posted only while this is true (flow control tests).
    pub post_recvs: bool,
}

pub const SIZES: [usize; 8] = [1, 100, 1000, 1440, 4096, 20_000, 65_536, 200_000];

impl Flow {
    /// `e.buf` holds `out` at 0 and the receive slots after it.
    pub fn new(g: &mut FakeGuest, e: &TcpEnd, out: Vec<u8>, seed: u64) -> Flow {
        g.buf_write(&e.buf, 0, &out);
        let rx_base = (out.len() as u64).div_ceil(4096) * 4096;
        let slot = 65_536;
        assert!(
            rx_base + slot * e.qp.rq_depth as u64 <= e.buf.len,
            "buffer too small"
        );
        Flow {
            out,
            posted: 0,
            send_sizes: VecDeque::new(),
            sent: 0,
            slot,
            rx_base,
            rq_posted: 0,
            rq_done: 0,
            got: Vec::new(),
            eof: false,
            rng: Rng::new(seed),
            post_recvs: true,
        }
    }

    pub fn buf_len(out: usize, depth: u32) -> u64 {
        (out as u64).div_ceil(4096) * 4096 + 65_536 * depth as u64
    }

    /// Posts what it can and takes completions. Returns whether anything happened.
    pub fn pump(&mut self, g: &mut FakeGuest, e: &mut TcpEnd) -> bool {
        let mut did = false;
        let mut wqes = Vec::new();
        while self.send_sizes.len() + wqes.len() < e.qp.sq_depth as usize - 1
            && self.posted < self.out.len()
        {
            let n = SIZES[self.rng.below(SIZES.len() as u64) as usize]
                .min(self.out.len() - self.posted);
            let k = (1 + self.rng.below(3) as usize).min(n);
            let mut sges = Vec::new();
            let mut at = self.posted;
            for i in 0..k {
                let len = if i == k - 1 {
                    self.posted + n - at
                } else {
                    n / k
                };
                sges.push(e.buf.sge(at as u64, len as u32, e.mr.lkey));
                at += len;
            }
            wqes.push(tcp_send_wqe(self.posted as u64, 0, &sges));
            self.send_sizes.push_back(n as u32);
            self.posted += n;
        }
        if !wqes.is_empty() {
            g.post_send(&mut e.qp, &wqes);
            did = true;
        }
        let mut rwqes = Vec::new();
        while self.post_recvs && self.rq_posted - self.rq_done < e.qp.rq_depth {
            let slot = (self.rq_posted % e.qp.rq_depth) as u64;
            let size = [self.slot, 1000, 4096, 30_000][self.rng.below(4) as usize];
            let base = self.rx_base + slot * self.slot;
            let half = size / 2;
            rwqes.push(recv_wqe(
                self.rq_posted as u64,
                &[
                    e.buf.sge(base, half as u32, e.mr.lkey),
                    e.buf.sge(base + half, (size - half) as u32, e.mr.lkey),
                ],
            ));
            self.rq_posted += 1;
        }
        if !rwqes.is_empty() {
            g.post_recv(&mut e.qp, &rwqes);
            did = true;
        }
        while let Some(c) = g.poll_cq(&mut e.scq) {
            assert_cqe(&c, CQE_STATUS_SUCCESS, 0, "send");
            let want = self.send_sizes.pop_front().expect("a send outstanding");
            assert_eq!(c.byte_len, want, "send byte_len");
            self.sent += want as usize;
            did = true;
        }
        while let Some(c) = g.poll_cq(&mut e.rcq) {
            assert_cqe(&c, CQE_STATUS_SUCCESS, 0, "receive");
            assert_eq!(c.wr_id, self.rq_done as u64, "receives complete in order");
            let slot = (self.rq_done % e.qp.rq_depth) as u64;
            if c.byte_len == 0 {
                self.eof = true;
            } else {
                let data = g.buf_read(&e.buf, self.rx_base + slot * self.slot, c.byte_len as usize);
                self.got.extend_from_slice(&data);
            }
            self.rq_done += 1;
            did = true;
        }
        did
    }
}

/// An address for a device under test with its prefix length as the device keeps it: an
/// IPv6 literal is a /64, an IPv4 one a /24 (mapped: /120).
pub fn device_address(addr: &str) -> (std::net::Ipv6Addr, u8) {
    match addr.parse::<std::net::IpAddr>().expect("address") {
        std::net::IpAddr::V6(a) => (a, 64),
        std::net::IpAddr::V4(a) => (a.to_ipv6_mapped(), 120),
    }
}

/// A device whose link is a cable at `cable` (the other end is another device or a relay),
/// with address `addr`/64, the link impaired by `impair` (qpipd's `--impair` form) and the
/// TCP limits given.
pub fn cabled_device(
    mac: [u8; 6],
    addr: &str,
    cable: &std::path::Path,
    impair: Option<&str>,
    tcp_limits: qpip_device::engine::tcp::TcpLimits,
) -> FakeGuest {
    use qpip_device::engine::network::NetworkConfig;
    use qpip_device::engine::EngineConfig;
    let mut network = NetworkConfig::new(qpip_device::backend::NetSpec::Cable(cable.to_path_buf()));
    network.impair = impair.map(|s| s.parse().expect("impairment"));
    let engine = EngineConfig {
        mac,
        addrs: vec![device_address(addr)],
        network: Some(network),
        tcp_limits,
        ..EngineConfig::default()
    };
    FakeGuest::with_options(ServeOptions {
        core: qpip_device::function::FunctionConfig {
            engine,
            ..Default::default()
        },
    })
}
