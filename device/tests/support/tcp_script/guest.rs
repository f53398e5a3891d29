//! The guest's side of the script's connection: receives posted and completed, the
//! bytes that arrived checked against the test's stream, sends of its own stream.

use super::*;

impl Peer {
    /// The guest posts a receive of `n` bytes.
    pub fn post_recv(&mut self, n: u64) {
        self.post_recvs(&[n]);
    }

    /// The guest posts receives of these sizes, in order, with one doorbell.
    pub fn post_recvs(&mut self, sizes: &[u64]) {
        let mut ws = Vec::new();
        for &n in sizes {
            assert!(self.next_rx + n <= BUF_LEN, "receive area used up");
            let id = self.next_wr;
            self.next_wr += 1;
            ws.push(recv_wqe(
                id,
                &[self.end.buf.sge(self.next_rx, n as u32, self.end.mr.lkey)],
            ));
            self.posted.push_back(Posted {
                wr_id: id,
                at: self.next_rx,
            });
            self.next_rx += n;
        }
        let (g, qp) = (&mut self.g, &mut self.end.qp);
        g.post_recv(qp, &ws);
    }

    /// The guest sends the next `n` bytes of its stream.
    pub fn send(&mut self, n: u64) {
        assert!(self.sent + n <= SEND_AREA, "send area used up");
        let id = self.next_wr;
        self.next_wr += 1;
        let w = tcp_send_wqe(
            id,
            0,
            &[self.end.buf.sge(self.sent, n as u32, self.end.mr.lkey)],
        );
        self.sent += n;
        let (g, qp) = (&mut self.g, &mut self.end.qp);
        g.post_send(qp, &[w]);
    }

    /// Waits for the next receive completion and takes its bytes (a completion of 0
    /// bytes is the end of the stream). Returns its status.
    pub fn recv_done(&mut self) -> u8 {
        let c = self.g.wait_cqe(&mut self.end.rcq);
        let p = self.posted.pop_front().expect("a receive was posted");
        assert_eq!(c.wr_id, p.wr_id, "receives complete in order");
        if c.status == CQE_STATUS_SUCCESS {
            if c.byte_len == 0 {
                self.eof = true;
            } else {
                let b = self.g.buf_read(&self.end.buf, p.at, c.byte_len as usize);
                self.received.extend_from_slice(&b);
            }
        }
        c.status
    }

    /// Receives complete, each in success, until `len` bytes have arrived; they are the
    /// test's stream from its start.
    #[track_caller]
    pub fn received(&mut self, len: usize) {
        while self.received.len() < len {
            assert_eq!(self.recv_done(), CQE_STATUS_SUCCESS, "a receive");
        }
        self.check_received(len);
    }

    /// The bytes received so far are the test's stream from its start.
    #[track_caller]
    pub fn check_received(&self, len: usize) {
        assert_eq!(self.received.len(), len, "bytes received");
        for (k, &b) in self.received.iter().enumerate() {
            assert_eq!(b, peer_byte(k as u64), "received byte {k}");
        }
    }

    /// Waits for the next send completion; returns its status.
    pub fn send_done(&mut self) -> u8 {
        self.g.wait_cqe(&mut self.end.scq).status
    }

    /// Waits for the guest's pending command (CONNECT, ACCEPT, CLOSE) to complete;
    /// returns its status.
    pub fn cmd_done(&mut self) -> u16 {
        let id = self.pending_cmd.take().expect("a command to wait for");
        self.g.admin_wait_done(id).status
    }

    /// A device counter.
    pub fn stat(&mut self, i: u32) -> u64 {
        self.g.stat(i)
    }
}
