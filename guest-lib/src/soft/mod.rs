//! The software provider (the 2005 paper's): the same API over kernel sockets, for hosts
//! without the adapter. It plays the device's part: a thread per context ("the engine")
//! waits in `epoll` on the sockets that have work, moves bytes between sockets and
//! registered memory, and completes work requests into the CQs; posting a request also
//! makes progress at once in the caller's thread. The wire format is the device's: UDP
//! datagrams, TCP streams with `MsgHeader` message framing or plain stream framing.
//!
//! Differences in timing only: a send completes once its bytes are handed to the kernel
//! (the device: once acknowledged), and a CQ never stalls its QPs (completions beyond its
//! depth wait, in order, until polled).

mod net;
mod tcp;
mod udp;

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddrV6;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use crate::error::{Error, Result};
use crate::qp::{QpInit, RecvReq, SendReq};
use crate::sys;
use crate::types::{Completion, Detail, Event, EventKind, Framing, Limits, Opcode, QpKind, Status};

/// Deepest queue the soft provider accepts.
const MAX_DEPTH: u32 = 4096;

const TOKEN_WAKE: u64 = 0;
const TOKEN_QP: u64 = 1 << 32;
const TOKEN_LISTENER: u64 = 2 << 32;

pub(crate) struct Shared {
    state: Mutex<State>,
    epoll: OwnedFd,
    wake: OwnedFd,
    events: OwnedFd,
}

pub(crate) struct Ctx {
    shared: Arc<Shared>,
    worker: Option<JoinHandle<()>>,
}

impl Ctx {
    pub(crate) fn open() -> Result<(Ctx, Limits)> {
        // SAFETY: plain system call; the result is checked before it is owned.
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if ep < 0 {
            return Err(Error::last_os("epoll_create1"));
        }
        // SAFETY: a fresh descriptor nobody else owns.
        let epoll = unsafe { OwnedFd::from_raw_fd(ep) };
        let wake = sys::eventfd()?;
        let events = sys::eventfd()?;
        net::epoll_set(
            epoll.as_raw_fd(),
            libc::EPOLL_CTL_ADD,
            wake.as_raw_fd(),
            libc::EPOLLIN as u32,
            TOKEN_WAKE,
        );
        let state = State {
            epfd: epoll.as_raw_fd(),
            evfd: events.as_raw_fd(),
            next_id: 1,
            next_lkey: 1,
            stop: false,
            cqs: HashMap::new(),
            qps: HashMap::new(),
            listeners: HashMap::new(),
            events: VecDeque::new(),
        };
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            epoll,
            wake,
            events,
        });
        let s2 = shared.clone();
        let worker = std::thread::Builder::new()
            .name("qpip-soft".into())
            .spawn(move || engine(&s2))
            .map_err(|e| Error::os("spawning the soft provider's thread", e))?;
        let limits = Limits {
            max_queue_depth: MAX_DEPTH,
            max_sge: qpip_abi::wqe::MAX_SGE,
            max_inline: qpip_abi::wqe::MAX_INLINE,
            max_udp_payload: udp::MAX_PAYLOAD as u32,
            max_qps: qpip_abi::doorbell::DB_QP_SLOTS,
            max_cqs: qpip_abi::doorbell::DB_CQ_SLOTS,
            mtu: 1500,
        };
        Ok((
            Ctx {
                shared,
                worker: Some(worker),
            },
            limits,
        ))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.shared.state.lock().unwrap()
    }

    pub(crate) fn reg_mr(&self) -> u32 {
        let mut st = self.lock();
        let k = st.next_lkey;
        st.next_lkey += 1;
        k
    }

    pub(crate) fn create_cq(&self, _depth: u32, efd: RawFd) -> Result<Cq> {
        let mut st = self.lock();
        if st.cqs.len() >= qpip_abi::doorbell::DB_CQ_SLOTS as usize {
            return Err(Error::os(
                "create CQ",
                std::io::Error::from_raw_os_error(libc::ENOSPC),
            ));
        }
        let id = st.new_id();
        st.cqs.insert(
            id,
            CqState {
                queue: VecDeque::new(),
                armed: false,
                efd,
            },
        );
        Ok(Cq {
            id,
            shared: self.shared.clone(),
        })
    }

    pub(crate) fn create_qp(&self, init: &QpInit<'_>) -> Result<Qp> {
        if init.kind == QpKind::Tcp(Framing::Iwarp) {
            return Err(Error::Unsupported(
                "iWARP QPs need the qpip device (the software provider has no iWARP)",
            ));
        }
        let (scq, rcq) = (init.send_cq.id(), init.recv_cq.id());
        let mut st = self.lock();
        if st.qps.len() >= qpip_abi::doorbell::DB_QP_SLOTS as usize {
            return Err(Error::os(
                "create QP",
                std::io::Error::from_raw_os_error(libc::ENOSPC),
            ));
        }
        let id = st.new_id();
        st.qps.insert(id, QpState::new(init, scq, rcq));
        Ok(Qp {
            id,
            shared: self.shared.clone(),
        })
    }

    pub(crate) fn listen(&self, addr: &SocketAddrV6, backlog: u32) -> Result<Listener> {
        let fd = net::socket(libc::SOCK_STREAM).map_err(|e| Error::os("socket", e))?;
        net::bind(&fd, addr).map_err(|e| Error::os("listen: bind", e))?;
        net::listen(&fd, backlog).map_err(|e| Error::os("listen", e))?;
        let mut st = self.lock();
        let id = st.new_id();
        st.listeners.insert(
            id,
            ListenerState {
                fd,
                offers: VecDeque::new(),
                registered: false,
            },
        );
        Ok(Listener {
            id,
            shared: self.shared.clone(),
        })
    }

    pub(crate) fn read_event(&self) -> Option<Event> {
        self.lock().pop_event()
    }

    pub(crate) fn events_fd(&self) -> BorrowedFd<'_> {
        self.shared.events.as_fd()
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        self.lock().stop = true;
        sys::eventfd_signal(self.shared.wake.as_raw_fd());
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

/// The provider's thread: waits for socket readiness and makes progress.
fn engine(shared: &Shared) {
    let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 64];
    loop {
        // SAFETY: a live array of epoll_events and its length.
        let n = unsafe {
            libc::epoll_wait(
                shared.epoll.as_raw_fd(),
                evs.as_mut_ptr(),
                evs.len() as i32,
                -1,
            )
        };
        if n < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        let mut st = shared.state.lock().unwrap();
        if st.stop {
            return;
        }
        for ev in &evs[..n as usize] {
            let token = ev.u64;
            let id = token as u32;
            match token & !0xffff_ffff {
                TOKEN_QP => st.progress(id),
                TOKEN_LISTENER => st.progress_listener(id),
                _ => {
                    sys::eventfd_drain(shared.wake.as_raw_fd());
                }
            }
        }
    }
}

struct CqState {
    queue: VecDeque<Completion>,
    armed: bool,
    efd: RawFd,
}

/// Where a QP is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Conn {
    Idle,
    /// UDP, or TCP bound before connecting.
    Bound,
    Connecting {
        user_data: u64,
    },
    Accepting {
        listener: u32,
    },
    Connected,
    /// Reset, timed out or refused: every request completes flushed.
    Error,
}

struct QpState {
    kind: QpKind,
    scq: u32,
    rcq: u32,
    sq_depth: u32,
    rq_depth: u32,
    sq: VecDeque<SendReq>,
    rq: VecDeque<RecvReq>,
    sock: Option<OwnedFd>,
    conn: Conn,
    /// The events the socket is registered for in the epoll set (0: not registered).
    interest: u32,
    /// TCP: bytes of the front send (header included) already written.
    sent: usize,
    /// TCP: a close waits for the sends before it.
    close: Option<u64>,
    /// TCP: the sending direction is shut (after a close).
    wr_shut: bool,
    accept_user_data: u64,
    rx: tcp::Rx,
    /// TCP: keepalive for the socket the QP has or gets.
    keepalive: Option<crate::Keepalive>,
}

impl QpState {
    fn new(init: &QpInit<'_>, scq: u32, rcq: u32) -> QpState {
        QpState {
            kind: init.kind,
            scq,
            rcq,
            sq_depth: init.sq_depth,
            rq_depth: init.rq_depth,
            sq: VecDeque::new(),
            rq: VecDeque::new(),
            sock: None,
            conn: Conn::Idle,
            interest: 0,
            sent: 0,
            close: None,
            wr_shut: false,
            accept_user_data: 0,
            rx: tcp::Rx::default(),
            keepalive: None,
        }
    }

    /// Gives the QP's TCP socket (if it has one yet) the keepalive asked for.
    fn apply_keepalive(&self) -> std::io::Result<()> {
        match (&self.sock, self.kind) {
            (Some(fd), QpKind::Tcp(_)) => net::set_keepalive(fd, self.keepalive),
            _ => Ok(()),
        }
    }

    fn framing(&self) -> Framing {
        match self.kind {
            QpKind::Tcp(f) => f,
            QpKind::Udp => Framing::Stream,
        }
    }
}

struct ListenerState {
    fd: OwnedFd,
    offers: VecDeque<(u32, u64)>,
    registered: bool,
}

/// What progress on a QP produced, applied after the QP's state is released.
#[derive(Default)]
struct Out {
    completions: Vec<(bool, Completion)>,
    events: Vec<Event>,
}

impl Out {
    fn send(&mut self, qp: u32, wr_id: u64, status: Status, detail: Detail, byte_len: usize) {
        self.completions.push((
            true,
            Completion {
                wr_id,
                qp,
                opcode: Opcode::Send,
                status,
                detail,
                byte_len: byte_len as u32,
                imm: 0,
                src: None,
                solicited: false,
                addr: 0,
            },
        ));
    }

    fn recv(&mut self, c: Completion) {
        self.completions.push((false, c));
    }

    fn event(
        &mut self,
        kind: EventKind,
        status: i32,
        qp: u32,
        user_data: u64,
        peer: Option<SocketAddrV6>,
    ) {
        self.events.push(Event {
            kind,
            status,
            qp,
            user_data,
            peer,
        });
    }
}

fn recv_completion(qp: u32, wr_id: u64, status: Status, byte_len: usize) -> Completion {
    Completion {
        wr_id,
        qp,
        opcode: Opcode::Recv,
        status,
        detail: Detail::None,
        byte_len: byte_len as u32,
        imm: 0,
        src: None,
        solicited: false,
        addr: 0,
    }
}

/// Every request of the QP completes flushed (destroy, error state).
fn flush(id: u32, qp: &mut QpState, out: &mut Out) {
    for r in qp.sq.drain(..) {
        out.send(id, r.wr_id, Status::Flushed, Detail::None, 0);
    }
    qp.sent = 0;
    for r in qp.rq.drain(..) {
        out.recv(recv_completion(id, r.wr_id, Status::Flushed, 0));
    }
}

struct State {
    epfd: RawFd,
    evfd: RawFd,
    next_id: u32,
    next_lkey: u32,
    stop: bool,
    cqs: HashMap<u32, CqState>,
    qps: HashMap<u32, QpState>,
    listeners: HashMap<u32, ListenerState>,
    events: VecDeque<Event>,
}

impl State {
    fn new_id(&mut self) -> u32 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    fn complete(&mut self, cq: u32, c: Completion) {
        if let Some(cq) = self.cqs.get_mut(&cq) {
            cq.queue.push_back(c);
            if cq.armed {
                cq.armed = false;
                sys::eventfd_signal(cq.efd);
            }
        }
    }

    fn push_event(&mut self, e: Event) {
        if self.events.is_empty() {
            sys::eventfd_signal(self.evfd);
        }
        self.events.push_back(e);
    }

    fn pop_event(&mut self) -> Option<Event> {
        let e = self.events.pop_front();
        if e.is_some() && self.events.is_empty() {
            sys::eventfd_drain(self.evfd);
        }
        e
    }

    fn apply(&mut self, scq: u32, rcq: u32, out: Out) {
        for (is_send, c) in out.completions {
            self.complete(if is_send { scq } else { rcq }, c);
        }
        for e in out.events {
            self.push_event(e);
        }
    }

    /// Moves whatever can move on QP `id`, then registers for what it waits on.
    fn progress(&mut self, id: u32) {
        let epfd = self.epfd;
        let Some(qp) = self.qps.get_mut(&id) else {
            return;
        };
        let mut out = Out::default();
        match qp.kind {
            QpKind::Udp => udp::progress(id, qp, &mut out),
            QpKind::Tcp(_) => tcp::progress(id, qp, &mut out),
        }
        update_interest(epfd, id, qp);
        let (scq, rcq) = (qp.scq, qp.rcq);
        self.apply(scq, rcq, out);
    }

    /// Hands waiting connections to the QPs offered to listener `id`.
    fn progress_listener(&mut self, id: u32) {
        let epfd = self.epfd;
        let mut accepted = Vec::new();
        if let Some(l) = self.listeners.get_mut(&id) {
            while let Some(&(qp, _)) = l.offers.front() {
                match net::accept(&l.fd) {
                    Ok((fd, peer)) => {
                        l.offers.pop_front();
                        accepted.push((qp, fd, peer));
                    }
                    Err(_) => break, // EAGAIN: none waiting; others: the next try will tell
                }
            }
            let want = !l.offers.is_empty();
            if want != l.registered {
                let op = if want {
                    libc::EPOLL_CTL_ADD
                } else {
                    libc::EPOLL_CTL_DEL
                };
                net::epoll_set(
                    epfd,
                    op,
                    l.fd.as_raw_fd(),
                    libc::EPOLLIN as u32,
                    TOKEN_LISTENER | id as u64,
                );
                l.registered = want;
            }
        }
        for (qid, fd, peer) in accepted {
            let Some(qp) = self.qps.get_mut(&qid) else {
                continue; // destroyed meanwhile: the connection is dropped
            };
            qp.sock = Some(fd);
            qp.conn = Conn::Connected;
            // Checked values on a connected TCP socket: setsockopt has no cause to fail.
            let _ = qp.apply_keepalive();
            let ud = qp.accept_user_data;
            self.push_event(Event {
                kind: EventKind::Accept,
                status: 0,
                qp: qid,
                user_data: ud,
                peer: Some(peer),
            });
            self.progress(qid);
        }
    }
}

/// Registers the QP's socket for exactly what it waits on (nothing: not registered, so a
/// closed or reset socket cannot make the engine spin on HUP).
fn update_interest(epfd: RawFd, id: u32, qp: &mut QpState) {
    let want = match (&qp.sock, qp.kind) {
        (None, _) => 0,
        (Some(_), QpKind::Udp) => {
            (if qp.rq.is_empty() {
                0
            } else {
                libc::EPOLLIN as u32
            }) | (if qp.sq.is_empty() {
                0
            } else {
                libc::EPOLLOUT as u32
            })
        }
        (Some(_), QpKind::Tcp(_)) => match qp.conn {
            Conn::Connecting { .. } => libc::EPOLLOUT as u32,
            Conn::Connected => {
                (if qp.rq.is_empty() || qp.rx.eof {
                    0
                } else {
                    libc::EPOLLIN as u32
                }) | (if qp.sq.is_empty() || qp.wr_shut {
                    0
                } else {
                    libc::EPOLLOUT as u32
                })
            }
            _ => 0,
        },
    };
    if want == qp.interest {
        return;
    }
    let fd = qp.sock.as_ref().map(|s| s.as_raw_fd());
    if let Some(fd) = fd {
        let op = match (qp.interest, want) {
            (0, _) => libc::EPOLL_CTL_ADD,
            (_, 0) => libc::EPOLL_CTL_DEL,
            _ => libc::EPOLL_CTL_MOD,
        };
        net::epoll_set(epfd, op, fd, want, TOKEN_QP | id as u64);
    }
    qp.interest = want;
}

/// Drops a QP's socket (its epoll registration goes with it).
fn drop_socket(qp: &mut QpState, reset: bool) {
    if let Some(s) = qp.sock.take() {
        if reset {
            net::set_linger_zero(&s);
        }
    }
    qp.interest = 0;
}

// ---- handles ------------------------------------------------------------------------------

pub(crate) struct Cq {
    pub(crate) id: u32,
    shared: Arc<Shared>,
}

impl Cq {
    pub(crate) fn poll(&self, out: &mut [Completion]) -> usize {
        let mut st = self.shared.state.lock().unwrap();
        let Some(cq) = st.cqs.get_mut(&self.id) else {
            return 0;
        };
        let n = out.len().min(cq.queue.len());
        for (slot, c) in out.iter_mut().zip(cq.queue.drain(..n)) {
            *slot = c;
        }
        n
    }

    pub(crate) fn arm(&self) {
        let mut st = self.shared.state.lock().unwrap();
        if let Some(cq) = st.cqs.get_mut(&self.id) {
            if cq.queue.is_empty() {
                cq.armed = true;
            } else {
                cq.armed = false;
                sys::eventfd_signal(cq.efd);
            }
        }
    }

    pub(crate) fn destroy(&self) {
        self.shared.state.lock().unwrap().cqs.remove(&self.id);
    }
}

pub(crate) struct Qp {
    pub(crate) id: u32,
    shared: Arc<Shared>,
}

fn no_qp() -> Error {
    Error::InvalidArgument("the QP no longer exists".into())
}

impl Qp {
    fn with<R>(&self, f: impl FnOnce(&mut State, u32) -> Result<R>) -> Result<R> {
        let mut st = self.shared.state.lock().unwrap();
        f(&mut st, self.id)
    }

    pub(crate) fn bind(&self, addr: &SocketAddrV6) -> Result<SocketAddrV6> {
        self.with(|st, id| {
            let qp = st.qps.get_mut(&id).ok_or_else(no_qp)?;
            if qp.conn != Conn::Idle {
                return Err(Error::os(
                    "bind: the QP is already bound or connected",
                    std::io::Error::from_raw_os_error(libc::EINVAL),
                ));
            }
            let ty = match qp.kind {
                QpKind::Udp => libc::SOCK_DGRAM,
                QpKind::Tcp(_) => libc::SOCK_STREAM,
            };
            let fd = net::socket(ty).map_err(|e| Error::os("socket", e))?;
            net::bind(&fd, addr).map_err(|e| Error::os("bind", e))?;
            let local = net::local_addr(&fd).map_err(|e| Error::os("getsockname", e))?;
            qp.sock = Some(fd);
            qp.conn = Conn::Bound;
            st.progress(id);
            Ok(local)
        })
    }

    pub(crate) fn connect(&self, peer: &SocketAddrV6, user_data: u64) -> Result<()> {
        self.with(|st, id| {
            let qp = st.qps.get_mut(&id).ok_or_else(no_qp)?;
            let mut out = Out::default();
            tcp::connect(id, qp, peer, user_data, &mut out);
            let (scq, rcq) = (qp.scq, qp.rcq);
            st.apply(scq, rcq, out);
            st.progress(id);
            Ok(())
        })
    }

    pub(crate) fn set_keepalive(&self, k: Option<crate::Keepalive>) -> Result<()> {
        self.with(|st, id| {
            let qp = st.qps.get_mut(&id).ok_or_else(no_qp)?;
            qp.keepalive = k;
            qp.apply_keepalive()
                .map_err(|e| Error::os("setsockopt (keepalive)", e))
        })
    }

    pub(crate) fn close(&self, user_data: u64) -> Result<()> {
        self.with(|st, id| {
            let qp = st.qps.get_mut(&id).ok_or_else(no_qp)?;
            let ok = qp.conn == Conn::Connected && qp.close.is_none() && !qp.wr_shut;
            if ok {
                qp.close = Some(user_data);
                st.progress(id);
            } else {
                st.push_event(Event {
                    kind: EventKind::Close,
                    status: -libc::EINVAL,
                    qp: id,
                    user_data,
                    peer: None,
                });
            }
            Ok(())
        })
    }

    pub(crate) fn post_send(&self, req: SendReq) -> Result<()> {
        self.with(|st, id| {
            let qp = st.qps.get_mut(&id).ok_or_else(no_qp)?;
            if qp.sq.len() >= qp.sq_depth as usize {
                return Err(Error::QueueFull {
                    qp: id,
                    queue: "send",
                    depth: qp.sq_depth,
                });
            }
            qp.sq.push_back(req);
            st.progress(id);
            Ok(())
        })
    }

    pub(crate) fn post_recv(&self, req: RecvReq) -> Result<()> {
        self.with(|st, id| {
            let qp = st.qps.get_mut(&id).ok_or_else(no_qp)?;
            if qp.rq.len() >= qp.rq_depth as usize {
                return Err(Error::QueueFull {
                    qp: id,
                    queue: "receive",
                    depth: qp.rq_depth,
                });
            }
            qp.rq.push_back(req);
            st.progress(id);
            Ok(())
        })
    }

    pub(crate) fn destroy(&self) {
        let mut st = self.shared.state.lock().unwrap();
        let Some(mut qp) = st.qps.remove(&self.id) else {
            return;
        };
        let mut out = Out::default();
        match qp.conn {
            Conn::Connecting { user_data } => out.event(
                EventKind::Connect,
                -libc::ECANCELED,
                self.id,
                user_data,
                None,
            ),
            Conn::Accepting { listener } => {
                if let Some(l) = st.listeners.get_mut(&listener) {
                    l.offers.retain(|&(q, _)| q != self.id);
                }
                out.event(
                    EventKind::Accept,
                    -libc::ECANCELED,
                    self.id,
                    qp.accept_user_data,
                    None,
                );
            }
            _ => {}
        }
        flush(self.id, &mut qp, &mut out);
        // After a graceful close the socket closes like close(2), so the bytes its sends
        // handed to the kernel still go out (on the device those sends completed only once
        // acknowledged); otherwise destroying resets the connection, as on the device.
        let reset = matches!(qp.kind, QpKind::Tcp(_)) && !qp.wr_shut;
        drop_socket(&mut qp, reset);
        st.apply(qp.scq, qp.rcq, out);
    }
}

pub(crate) struct Listener {
    id: u32,
    shared: Arc<Shared>,
}

impl Listener {
    pub(crate) fn accept(&self, qp: &Qp, user_data: u64) -> Result<()> {
        let mut st = self.shared.state.lock().unwrap();
        let q = st.qps.get_mut(&qp.id).ok_or_else(no_qp)?;
        if q.conn != Conn::Idle {
            st.push_event(Event {
                kind: EventKind::Accept,
                status: -libc::EINVAL,
                qp: qp.id,
                user_data,
                peer: None,
            });
            return Ok(());
        }
        q.conn = Conn::Accepting { listener: self.id };
        q.accept_user_data = user_data;
        if let Some(l) = st.listeners.get_mut(&self.id) {
            l.offers.push_back((qp.id, user_data));
        }
        st.progress_listener(self.id);
        Ok(())
    }

    pub(crate) fn destroy(&self) {
        let mut st = self.shared.state.lock().unwrap();
        let Some(l) = st.listeners.remove(&self.id) else {
            return;
        };
        for (qid, ud) in l.offers {
            if let Some(q) = st.qps.get_mut(&qid) {
                q.conn = Conn::Idle;
            }
            st.push_event(Event {
                kind: EventKind::Accept,
                status: -libc::ECANCELED,
                qp: qid,
                user_data: ud,
                peer: None,
            });
        }
    }
}
