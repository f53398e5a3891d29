//! The contexts the protection tests attack from and around: every buffer the device could
//! be tricked into writing is filled with a canary first and checked afterwards, and the QPs
//! around must keep working.

use crate::support::*;

pub const CANARY: u8 = 0xa5;

/// Three contexts: A with a sender and a receiver, B with a registered buffer A must not
/// use, and C with a healthy pair that must keep working whatever A does.
pub struct World {
    pub g: FakeGuest,
    pub tx: Udp,
    pub rx: Udp,
    pub b_buf: Buf,
    pub b_mr: Mr,
    pub ok_tx: Udp,
    pub ok_rx: Udp,
}

impl World {
    pub fn new() -> World {
        let mut g = FakeGuest::new();
        let a = g.create_ctx().unwrap();
        let b = g.create_ctx().unwrap();
        let c = g.create_ctx().unwrap();
        let tx = g.udp_endpoint_in(a, UNSPECIFIED, 0, 16, 32, 16 * 1024);
        let rx = g.udp_endpoint_in(a, UNSPECIFIED, 0, 16, 32, 16 * 1024);
        let b_buf = g.alloc_buf(8192, 100);
        let b_mr = g.reg_mr(b, &b_buf, MR_ACCESS_LOCAL_WRITE).unwrap();
        let ok_tx = g.udp_endpoint_in(c, UNSPECIFIED, 0, 16, 32, 1024);
        let ok_rx = g.udp_endpoint_in(c, UNSPECIFIED, 0, 16, 32, 1024);
        let w = World {
            g,
            tx,
            rx,
            b_buf,
            b_mr,
            ok_tx,
            ok_rx,
        };
        w.fill_canaries();
        w
    }

    pub fn fill_canaries(&self) {
        self.g.buf_fill(&self.rx.buf, CANARY);
        self.g.buf_fill(&self.b_buf, CANARY);
    }

    /// Nothing was written to any buffer the device could have been tricked into writing.
    #[track_caller]
    pub fn assert_canaries(&self, what: &str) {
        for (name, b) in [
            ("A's receive buffer", &self.rx.buf),
            ("B's buffer", &self.b_buf),
        ] {
            let bytes = self.g.buf_read(b, 0, b.len as usize);
            if let Some(i) = bytes.iter().position(|&x| x != CANARY) {
                panic!("{what}: byte {i} of {name} was written ({:#x})", bytes[i]);
            }
        }
    }

    /// The healthy pair in context C, and A's own pair, still exchange a datagram.
    #[track_caller]
    pub fn assert_healthy(&mut self, what: &str) {
        let g = &mut self.g;
        for (tx, rx) in [
            (&mut self.ok_tx, &mut self.ok_rx),
            (&mut self.tx, &mut self.rx),
        ] {
            g.post_recv(
                &mut rx.qp,
                &[recv_wqe(0x600d, &[rx.buf.sge(0, 64, rx.mr.lkey)])],
            );
            g.post_send(
                &mut tx.qp,
                &[inline_wqe(0x600d, LOOPBACK, rx.port, b"still fine")],
            );
            let s = g.wait_cqe(&mut tx.scq);
            assert_cqe(&s, CQE_STATUS_SUCCESS, 0, &format!("after {what}: send"));
            let r = g.wait_cqe(&mut rx.rcq);
            assert_cqe(&r, CQE_STATUS_SUCCESS, 0, &format!("after {what}: receive"));
            assert_eq!((r.wr_id, r.byte_len), (0x600d, 10));
            assert_eq!(g.buf_read(&rx.buf, 0, 10), b"still fine");
        }
        self.fill_canaries();
    }

    /// Sends one WQE from A's sender and returns its completion.
    pub fn send(&mut self, w: WqeBytes) -> Cqe {
        self.g.post_send(&mut self.tx.qp, &[w]);
        self.g.wait_cqe(&mut self.tx.scq)
    }

    /// Posts one receive WQE on A's receiver, sends it a valid datagram of `len` bytes, and
    /// returns the receive completion.
    fn recv_into(&mut self, w: WqeBytes, len: usize) -> Cqe {
        let g = &mut self.g;
        g.post_recv(&mut self.rx.qp, &[w]);
        let data = vec![0x11u8; len];
        g.buf_write(&self.tx.buf, 0, &data);
        let s = send_wqe(
            1,
            LOOPBACK,
            self.rx.port,
            &[self.tx.buf.sge(0, len as u32, self.tx.mr.lkey)],
        );
        g.post_send(&mut self.tx.qp, &[s]);
        assert_cqe(
            &g.wait_cqe(&mut self.tx.scq),
            CQE_STATUS_SUCCESS,
            0,
            "the datagram's send",
        );
        g.wait_cqe(&mut self.rx.rcq)
    }

    /// The next completion of A's receiver, which must be WR `wr_id` receiving `len` bytes
    /// at the start of A's buffer; returns those bytes. The canaries are filled again: the
    /// datagram wrote A's receive buffer, as it was meant to.
    #[track_caller]
    pub fn received(&mut self, wr_id: u64, len: u32) -> Vec<u8> {
        let c = self.g.wait_cqe(&mut self.rx.rcq);
        assert_eq!(
            (c.wr_id, c.status, c.byte_len),
            (wr_id, CQE_STATUS_SUCCESS, len),
            "{c:?}"
        );
        let got = self.g.buf_read(&self.rx.buf, 0, len as usize);
        self.fill_canaries();
        got
    }

    /// Sends `wqe` from A's sender: the send must complete (with the WQE's wr_id) with
    /// `status` and `detail`. Returns the completion.
    #[track_caller]
    pub fn refused_send(&mut self, wqe: WqeBytes, (status, detail): (u8, u32), what: &str) -> Cqe {
        let wr_id = wr_id_of(&wqe);
        let c = self.send(wqe);
        assert_eq!(
            (c.wr_id, c.qp),
            (wr_id, self.tx.qp.id),
            "{what}: wr_id echoed"
        );
        assert_cqe(&c, status, detail, what);
        c
    }

    /// Posts `wqe` on A's receiver and sends it a valid datagram of `len` bytes: the receive
    /// must complete (with the WQE's wr_id) with `status` and `detail`, and write nothing.
    #[track_caller]
    pub fn refused_receive(
        &mut self,
        wqe: WqeBytes,
        len: usize,
        (status, detail): (u8, u32),
        what: &str,
    ) {
        let wr_id = wr_id_of(&wqe);
        let c = self.recv_into(wqe, len);
        assert_eq!(c.wr_id, wr_id, "{what}: wr_id echoed");
        assert_cqe(&c, status, detail, what);
        self.assert_canaries(what);
    }

    /// A send WQE to A's receiver gathering `sges`.
    pub fn send_gather(&self, wr_id: u64, sges: &[Sge]) -> WqeBytes {
        send_wqe(wr_id, LOOPBACK, self.rx.port, sges)
    }
}

/// The wr_id a WQE carries.
fn wr_id_of(wqe: &WqeBytes) -> u64 {
    Wqe::read_from_bytes(&wqe[..WQE_SGE_OFFSET as usize])
        .unwrap()
        .wr_id
}
