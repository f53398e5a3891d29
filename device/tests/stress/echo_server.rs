//! A guest's TCP echo server for Linux sockets in a namespace of the test's, which reach it
//! through the adapter's uplink (a TAP in that namespace), and the Linux clients.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use qpip_device::backend::{open_link, NetSpec};
use qpip_testkit::*;

use crate::fixture::*;
use crate::netns::{self, Netns};
use crate::PER_CTX;

/// An adapter of two functions whose uplink is the TAP `tap` of a namespace `ns` made for
/// the case (the lab host's address on its side), the descriptor limit raised for many
/// sockets; None, said, without root or the tools.
pub(crate) fn adapter_on_a_tap(case: &str, ns: &str, tap: &str) -> Option<(Netns, Adapter)> {
    if !netns::root_and_tools(case) {
        return None;
    }
    raise_fd_limit();
    let ns = Netns::new(ns);
    ns.add_tap(tap, "fd51:5050::1");
    let up = ns
        .within(|| open_link(&NetSpec::Tap(tap.into()), None, None))
        .expect("the TAP");
    Some((ns, adapter_on(2, 1, Some(up))))
}

/// Many sockets and a fake guest's descriptors: lift the soft limit to the hard one.
fn raise_fd_limit() {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid struct.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut l), 0);
        l.rlim_cur = l.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &l);
    }
}

/// Bytes each echo QP receives into at once (its slot of its context's buffer).
pub(crate) const SLOT: u64 = 4096;

/// A guest's TCP echo server for the lab host's sockets: stream QPs in contexts of
/// [`PER_CTX`], a listener each (context k's on port `port + k`); each QP receives into its
/// slot, sends the bytes back from there, and takes its next receive once the echo is sent.
pub(crate) struct EchoServer {
    pub(crate) ctxs: Vec<EchoCtx>,
}

pub(crate) struct EchoCtx {
    pub(crate) ctx: u32,
    pub(crate) scq: Cq,
    pub(crate) rcq: Cq,
    buf: Buf,
    mr: Mr,
    pub(crate) listener: u32,
    port: u16,
    /// QP i receives into slot i of `buf`.
    qps: Vec<Qp>,
}

/// What one [`EchoServer::pump`] did.
pub(crate) struct Pumped {
    pub(crate) any: bool,
    pub(crate) echoed: u64,
    pub(crate) closed: usize,
}

impl EchoServer {
    pub(crate) fn new(g: &mut FakeGuest, n: usize, port: u16, backlog: u32) -> EchoServer {
        let ctxs = (0..n.div_ceil(PER_CTX))
            .map(|k| {
                let n = (n - k * PER_CTX).min(PER_CTX);
                let ctx = g.create_ctx().unwrap();
                let depth = (2 * n as u32).next_power_of_two();
                let (scq, rcq) = (
                    g.create_cq(ctx, depth).unwrap(),
                    g.create_cq(ctx, depth).unwrap(),
                );
                let buf = g.alloc_buf(n as u64 * SLOT, 0);
                let mr = g.reg_mr(ctx, &buf, MR_ACCESS_LOCAL_WRITE).unwrap();
                let port = port + k as u16;
                let listener = g.listen(ctx, UNSPECIFIED, port, backlog).unwrap();
                let qps = (0..n)
                    .map(|_| {
                        g.create_qp_typed(
                            ctx,
                            (scq.id, rcq.id),
                            (2, 2),
                            QP_TYPE_TCP,
                            FRAMING_STREAM,
                        )
                        .unwrap()
                    })
                    .collect();
                EchoCtx {
                    ctx,
                    scq,
                    rcq,
                    buf,
                    mr,
                    listener,
                    port,
                    qps,
                }
            })
            .collect();
        EchoServer { ctxs }
    }

    /// The lab host (namespace `ns`) connects to every QP, in batches: the QPs of a batch
    /// accept, the host connects as many, the accepts complete (the admin queue holds a
    /// batch's commands at once), and each QP takes its first receive.
    pub(crate) fn connect_all(&mut self, g: &mut FakeGuest, ns: &netns::Netns) -> Vec<TcpStream> {
        let mut streams = Vec::new();
        for c in &mut self.ctxs {
            for (b, batch) in c.qps.chunks_mut(32).enumerate() {
                let cmds: Vec<u32> = batch
                    .iter()
                    .map(|qp| g.submit_accept(c.ctx, c.listener, qp.id))
                    .collect();
                ns.within(|| {
                    for _ in 0..batch.len() {
                        let s = TcpStream::connect(format!("[{}]:{}", ADDRS[0], c.port))
                            .expect("connect to the QP server");
                        streams.push(s);
                    }
                });
                for cmd in cmds {
                    g.admin_wait_ok(cmd, "accept");
                }
                for (j, qp) in batch.iter_mut().enumerate() {
                    let slot = (b * 32 + j) as u64 * SLOT;
                    g.post_recv(
                        qp,
                        &[recv_wqe(0, &[c.buf.sge(slot, SLOT as u32, c.mr.lkey)])],
                    );
                }
            }
        }
        streams
    }

    /// One pass: echoes what arrived and gives each QP whose echo was sent its next
    /// receive. A client's end of its stream (a 0-byte receive) is counted in `closed`;
    /// one before `until`, when the clients stop, fails the test.
    pub(crate) fn pump(&mut self, g: &mut FakeGuest, until: Instant) -> Pumped {
        let mut p = Pumped {
            any: false,
            echoed: 0,
            closed: 0,
        };
        for c in &mut self.ctxs {
            let slot = |qps: &[Qp], id: u32| {
                let i = qps
                    .iter()
                    .position(|q| q.id == id)
                    .expect("a QP of this context");
                (i, i as u64 * SLOT)
            };
            while let Some(cqe) = g.poll_cq(&mut c.rcq) {
                assert_cqe(&cqe, CQE_STATUS_SUCCESS, 0, "receive");
                p.any = true;
                if cqe.byte_len == 0 {
                    assert!(Instant::now() >= until, "a client closed early");
                    p.closed += 1;
                    continue;
                }
                let (i, at) = slot(&c.qps, cqe.qp);
                let sge = c.buf.sge(at, cqe.byte_len, c.mr.lkey);
                g.post_send(&mut c.qps[i], &[tcp_send_wqe(0, 0, &[sge])]);
                p.echoed += cqe.byte_len as u64;
            }
            while let Some(cqe) = g.poll_cq(&mut c.scq) {
                assert_cqe(&cqe, CQE_STATUS_SUCCESS, 0, "echo");
                p.any = true;
                let (i, at) = slot(&c.qps, cqe.qp);
                let sge = c.buf.sge(at, SLOT as u32, c.mr.lkey);
                g.post_recv(&mut c.qps[i], &[recv_wqe(0, &[sge])]);
            }
        }
        p
    }
}

/// The lab host's side: `streams`, each writing chunks of its own pattern and reading them
/// back, until `until`; returns the bytes each verified.
pub(crate) fn linux_clients(
    streams: Vec<TcpStream>,
    until: Instant,
) -> Vec<std::thread::JoinHandle<u64>> {
    streams
        .into_iter()
        .enumerate()
        .map(|(j, mut s)| {
            std::thread::spawn(move || {
                let mut rng = Rng::new(j as u64 + 1);
                let mut verified = 0u64;
                s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                while Instant::now() < until {
                    let len = 1 + rng.below(2048) as usize;
                    let chunk = rng.bytes(len);
                    s.write_all(&chunk).expect("write to the QP server");
                    let mut back = vec![0; chunk.len()];
                    s.read_exact(&mut back).expect("the echo");
                    assert!(back == chunk, "stream {j}: the echo differs");
                    verified += chunk.len() as u64;
                    std::thread::sleep(Duration::from_millis(rng.below(200)));
                }
                verified
            })
        })
        .collect()
}
