//! iWARP connection requests a listener holds (`LISTEN_FLAG_IWARP_REQUESTS`): the passive
//! side of a CM such as Linux's iw_cm, which must see the initiator's MPA request (its
//! private data, IRD and ORD) before it chooses a QP — possibly of another context — and
//! answers with an ACCEPT naming the request or a REJECT.
//!
//! Once TCP is established the listener reads the MPA request itself, never a byte past
//! it (whatever follows stays in the connection for the QP that takes it). A complete
//! request waits here, counted against the listener's backlog, until `CONN_REQUEST` hands
//! it out; an ACCEPT gives its connection and its bytes to an iWARP QP, whose setup
//! answers it exactly as for a plain ACCEPT; a REJECT sends the reject reply from here
//! and closes. A request that does not come in time, or is not MPA, resets its
//! connection; so does a peer that resets or closes before the answer (the request is
//! dropped).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use log::debug;
use qpip_abi::admin::*;
use vm_memory::GuestMemoryMmap;
use zerocopy::{FromZeros, IntoBytes};

use crate::engine::admin::{Outcome, Results};
use crate::engine::objects::PendingCmd;
use crate::engine::Engine;
use crate::net::iwarp::wire::mpa::{self, Flags, Kind, Prefix};
use crate::net::tcp::{self, ConnId, RecvSink};

use super::offers_immediate;

/// How long a rejected connection may take to finish its close (the reject reply
/// acknowledged, our FIN too) before it is reset: the peer learns of the reject from the
/// reply, the close is only courtesy.
const REJECT_LINGER: Duration = Duration::from_secs(10);

/// Where a held connection stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// The MPA request is being read.
    Reading,
    /// Read; not handed out yet.
    Ready,
    /// Handed out by `CONN_REQUEST`: an ACCEPT or a REJECT answers it.
    HandedOut,
    /// The reject reply is going out, then the close.
    Rejecting,
}

/// One connection of the listener and its request.
#[derive(Debug)]
struct Held {
    id: u32,
    conn: ConnId,
    stage: Stage,
    /// The request's bytes read so far (at most one MPA frame).
    frame: Vec<u8>,
    /// Once ready: what `CONN_REQUEST` writes.
    info: Box<ConnRequest>,
    /// The reject reply: the connection's send stream.
    reply: Vec<u8>,
}

/// A `CONN_REQUEST` waiting for a request.
#[derive(Debug, Clone, Copy)]
struct Waiting {
    cmd: PendingCmd,
    buf: u64,
}

/// The requests of one listener ([`super::super::AcceptQueue::requests`]).
#[derive(Debug, Default)]
pub(in crate::engine) struct Requests {
    /// In the order their connections came (at most the listener's backlog).
    held: VecDeque<Held>,
    waiting: VecDeque<Waiting>,
    /// The last id given: ids go up and wrap past 0, so one is not seen again before
    /// 2^32 requests of this listener.
    last_id: u32,
}

impl Requests {
    fn get(&mut self, conn: ConnId) -> Option<&mut Held> {
        self.held.iter_mut().find(|h| h.conn == conn)
    }

    fn by_id(&mut self, id: u32) -> Option<&mut Held> {
        self.held.iter_mut().find(|h| h.id == id)
    }

    fn remove(&mut self, conn: ConnId) -> Option<Held> {
        let i = self.held.iter().position(|h| h.conn == conn)?;
        self.held.remove(i)
    }

    /// The reject reply of connection `conn` (its send stream), if it is held here.
    pub(in crate::engine::tcp) fn reply(&self, conn: ConnId) -> Option<&[u8]> {
        self.held
            .iter()
            .find(|h| h.conn == conn)
            .map(|h| h.reply.as_slice())
    }

    /// A receive sink reading `conn`'s request (no more than the frame's bytes).
    pub(in crate::engine::tcp) fn sink(&mut self, conn: ConnId) -> RequestSink<'_> {
        RequestSink {
            held: self.get(conn),
        }
    }
}

/// A held connection's receive side: it takes the MPA request's bytes and nothing past
/// them (what follows waits in the connection for the QP that will take it).
pub(in crate::engine::tcp) struct RequestSink<'a> {
    held: Option<&'a mut Held>,
}

impl RecvSink for RequestSink<'_> {
    fn space(&self) -> usize {
        match &self.held {
            Some(h) if h.stage == Stage::Reading => {
                match mpa::parse_prefix(&h.frame, Kind::Request) {
                    Ok(Prefix::Incomplete { needed }) => needed,
                    _ => 0,
                }
            }
            _ => 0,
        }
    }

    fn deliver(&mut self, _offset: u64, data: &[u8]) {
        if let Some(h) = &mut self.held {
            h.frame.extend_from_slice(data);
        }
    }
}

/// What a complete (or impossible) request leads to.
enum Verdict {
    /// More bytes must come.
    Incomplete,
    /// Held for the host.
    Ready,
    /// An MPA request this end cannot take (markers, revision 0): a reject reply.
    Refused(Vec<u8>),
    /// Not an MPA request.
    Malformed,
}

/// Reads held request `h` (its connection's `tuple`) as far as it has come.
fn examine(h: &mut Held, tuple: &tcp::FourTuple) -> Verdict {
    let frame = match mpa::parse_prefix(&h.frame, Kind::Request) {
        Ok(Prefix::Incomplete { .. }) => return Verdict::Incomplete,
        Ok(Prefix::Complete { frame, .. }) => frame,
        Err(_) => return Verdict::Malformed,
    };
    if frame.flags.markers || frame.revision < mpa::REVISION_1 {
        // Markers are never used here (as a QP's own setup refuses them).
        let reject = Flags {
            reject: true,
            ..Flags::default()
        };
        let revision = frame.revision.min(mpa::REVISION_2);
        let reply = mpa::build(Kind::Reply, reject, revision, None, &[]).expect("no private data");
        return Verdict::Refused(reply);
    }
    let Ok((block, pd)) = frame.split_enhanced() else {
        return Verdict::Malformed;
    };
    let i = &mut h.info;
    i.request = h.id;
    i.peer_addr = tuple.remote.octets();
    i.peer_port = tuple.remote_port;
    i.local_addr = tuple.local.octets();
    i.local_port = tuple.local_port;
    if let Some(b) = block {
        i.ird = b.ird;
        i.ord = b.ord;
        if b.peer_to_peer {
            i.flags |= CONN_REQUEST_PEER_TO_PEER;
        }
    }
    if frame.flags.crc {
        i.flags |= CONN_REQUEST_CRC;
    }
    // A qpip initiator's offer, for the host to answer in its ACCEPT.
    if offers_immediate(&frame) {
        i.flags |= CONN_REQUEST_IMMEDIATE;
    }
    i.mpa_revision = frame.revision.min(mpa::REVISION_2);
    // parse_prefix bounds the private data by MPA's limit, the size of the field.
    let n = pd.len().min(i.private_data.len());
    i.private_data[..n].copy_from_slice(&pd[..n]);
    i.pd_len = n as u16;
    Verdict::Ready
}

impl Engine {
    fn requests(&mut self, listener: u32) -> Option<&mut Requests> {
        self.objects
            .listener_mut(listener)?
            .accept_mut()
            .requests
            .as_mut()
    }

    /// A connection to requests listener `listener` is established: it is held (its
    /// request read) if the backlog has room, else reset.
    pub(in crate::engine::tcp) fn iwarp_request_arrived(
        &mut self,
        mem: &GuestMemoryMmap,
        listener: u32,
        conn: ConnId,
    ) {
        let Some(l) = self.objects.listener_mut(listener) else {
            return;
        };
        let backlog = l.accept_mut().backlog;
        let Some(r) = l.accept_mut().requests.as_mut() else {
            return;
        };
        if r.held.len() >= backlog {
            debug!("listener {listener}: backlog of requests full, connection reset");
            self.shared.stats.add(STAT_IWARP_REQUESTS_OVERFLOW, 1);
            self.tcp_abort_unclaimed(conn);
            return;
        }
        r.last_id = r.last_id.wrapping_add(1).max(1);
        let id = r.last_id;
        r.held.push_back(Held {
            id,
            conn,
            stage: Stage::Reading,
            frame: Vec::new(),
            info: ConnRequest::new_zeroed().into(),
            reply: Vec::new(),
        });
        self.tcp.held.insert(conn, listener);
        let now = Instant::now();
        self.tcp
            .request_due
            .insert((now + self.tcp.limits.mpa_request, listener, id));
        // The request may have come with the handshake's last segment (staged till now).
        if let Some(e) = self.tcp.table.get_mut(conn) {
            let r = self.objects.listener_mut(listener).expect("there");
            let mut sink = r.accept_mut().requests.as_mut().expect("there").sink(conn);
            e.conn.recv_space_changed(now, &mut sink);
        }
        self.iwarp_request_read(mem, listener, conn);
    }

    /// Bytes of held connection `conn` came: a complete request is held for the host (or
    /// refused, or the connection reset if it is not MPA).
    pub(in crate::engine::tcp) fn iwarp_request_read(
        &mut self,
        mem: &GuestMemoryMmap,
        listener: u32,
        conn: ConnId,
    ) {
        let Some(tuple) = self.tcp.table.get(conn).map(|e| e.conn.tuple()) else {
            return;
        };
        let Some(h) = self.requests(listener).and_then(|r| r.get(conn)) else {
            return;
        };
        if h.stage != Stage::Reading {
            return;
        }
        match examine(h, &tuple) {
            Verdict::Incomplete => {
                let had = h.frame.len();
                if self.iwarp_request_pull(listener, conn) > had {
                    self.iwarp_request_read(mem, listener, conn);
                }
            }
            Verdict::Ready => {
                h.stage = Stage::Ready;
                debug!(
                    "listener {listener}: request {} from [{}]:{} held",
                    h.id, tuple.remote, tuple.remote_port
                );
                self.iwarp_serve_requests(mem, listener);
            }
            Verdict::Refused(reply) => {
                debug!("listener {listener}: request with markers refused");
                h.frame = Vec::new();
                self.iwarp_request_reject(listener, conn, reply);
            }
            Verdict::Malformed => {
                debug!("listener {listener}: not an MPA request, connection reset");
                self.shared.stats.add(STAT_IWARP_REQUESTS_DROPPED, 1);
                self.iwarp_request_drop(listener, conn);
            }
        }
    }

    /// Offers held connection `conn`'s sink again, so that bytes its connection staged
    /// move into it; returns the request's bytes read since. The sink takes only what it
    /// knows it needs (the frame's header first, then the private data the header
    /// announces), and a segment that brings the whole request at once — as a Linux
    /// initiator (siw) sends it — leaves what follows the header staged.
    fn iwarp_request_pull(&mut self, listener: u32, conn: ConnId) -> usize {
        let Some(e) = self.tcp.table.get_mut(conn) else {
            return 0;
        };
        let Some(r) = self
            .objects
            .listener_mut(listener)
            .and_then(|l| l.accept_mut().requests.as_mut())
        else {
            return 0;
        };
        let mut sink = r.sink(conn);
        e.conn.recv_space_changed(Instant::now(), &mut sink);
        r.get(conn).map_or(0, |h| h.frame.len())
    }

    /// Sends `reply` (a reject) on held connection `conn`, then closes it; the request
    /// stays held (its connection's send stream is the reply) until the close is done.
    fn iwarp_request_reject(&mut self, listener: u32, conn: ConnId, reply: Vec<u8>) {
        let len = reply.len() as u64;
        let Some(h) = self.requests(listener).and_then(|r| r.get(conn)) else {
            return;
        };
        h.stage = Stage::Rejecting;
        h.reply = reply;
        let id = h.id;
        if let Some(e) = self.tcp.table.get_mut(conn) {
            // A fresh connection has room for one frame: refused only if it is going away.
            let _ = e.conn.queue_send(len);
            e.conn.close();
        }
        self.tcp
            .request_due
            .insert((Instant::now() + REJECT_LINGER, listener, id));
    }

    /// Forgets held connection `conn` and resets it.
    fn iwarp_request_drop(&mut self, listener: u32, conn: ConnId) {
        if let Some(r) = self.requests(listener) {
            r.remove(conn);
        }
        self.tcp.held.remove(&conn);
        self.tcp_abort(conn);
    }

    /// Hands ready requests to waiting `CONN_REQUEST`s, oldest to oldest.
    fn iwarp_serve_requests(&mut self, mem: &GuestMemoryMmap, listener: u32) {
        loop {
            let Some(r) = self.requests(listener) else {
                return;
            };
            let Some(w) = r.waiting.front().copied() else {
                return;
            };
            let Some(h) = r.held.iter_mut().find(|h| h.stage == Stage::Ready) else {
                return;
            };
            r.waiting.pop_front();
            let info = *h.info;
            let result = self.write_query(mem, w.buf, u32::MAX, info.as_bytes());
            if result.is_ok() {
                let h = self.requests(listener).and_then(|r| r.by_id(info.request));
                h.expect("just found").stage = Stage::HandedOut;
            }
            let (status, results) = match result {
                Ok(_) => (ADMIN_STATUS_OK, (info.request as u64, 0, 0)),
                Err(s) => (s, (0, 0, 0)),
            };
            self.complete_async(mem, w.cmd, status, results);
        }
    }

    /// Events of held connection `conn` (no QP has it).
    pub(in crate::engine::tcp) fn iwarp_request_events(
        &mut self,
        listener: u32,
        conn: ConnId,
        ev: tcp::Event,
    ) {
        use tcp::Event as E;
        let Some(stage) = self
            .requests(listener)
            .and_then(|r| r.get(conn))
            .map(|h| h.stage)
        else {
            return;
        };
        match ev {
            // The initiator went away before the answer: the request is dropped (an ACCEPT
            // or REJECT of it later finds no request).
            E::PeerClosed if stage != Stage::Rejecting => {
                debug!("listener {listener}: the initiator closed, its request dropped");
                self.iwarp_request_drop(listener, conn);
            }
            E::Acked { .. } if stage == Stage::Rejecting => {
                let done = self
                    .tcp
                    .table
                    .get(conn)
                    .is_some_and(|e| e.conn.may_orphan());
                if done {
                    // The reply is through: the connection finishes its close alone.
                    if let Some(r) = self.requests(listener) {
                        r.remove(conn);
                    }
                    self.tcp.held.remove(&conn);
                    if self.tcp.table.orphan(conn, Instant::now()).is_err() {
                        self.tcp_abort_unclaimed(conn);
                    }
                }
            }
            E::Reset | E::TimedOut | E::Unreachable | E::Closed => self.iwarp_request_gone(conn),
            _ => {}
        }
    }

    /// Connection `conn` is gone: a request it held is dropped.
    pub(in crate::engine::tcp) fn iwarp_request_gone(&mut self, conn: ConnId) {
        if let Some(listener) = self.tcp.held.remove(&conn) {
            if let Some(r) = self.requests(listener) {
                r.remove(conn);
            }
        }
    }

    /// A request timer of `listener` is due: a request still being read (or a reject
    /// still closing) resets its connection.
    pub(in crate::engine::tcp) fn iwarp_request_expired(&mut self, listener: u32, id: u32) {
        let Some(h) = self.requests(listener).and_then(|r| r.by_id(id)) else {
            return;
        };
        let (conn, stage) = (h.conn, h.stage);
        match stage {
            Stage::Reading => {
                debug!("listener {listener}: no MPA request in time, connection reset");
                self.shared.stats.add(STAT_IWARP_REQUESTS_DROPPED, 1);
                self.iwarp_request_drop(listener, conn);
            }
            Stage::Rejecting => self.iwarp_request_drop(listener, conn),
            Stage::Ready | Stage::HandedOut => {}
        }
    }

    /// The listener is going away: its waiting `CONN_REQUEST`s are cancelled, its held
    /// connections reset.
    pub(in crate::engine::tcp) fn iwarp_requests_end(
        &mut self,
        mem: &GuestMemoryMmap,
        r: Requests,
    ) {
        for w in r.waiting {
            self.cancel(mem, w.cmd);
        }
        for h in r.held {
            self.tcp.held.remove(&h.conn);
            self.tcp_abort(h.conn);
        }
    }

    /// `CONN_REQUEST` on listener `listener` of `ctx`: the next request not handed out,
    /// written at `buf`; or pending until one comes.
    pub(in crate::engine) fn conn_request(
        &mut self,
        mem: &GuestMemoryMmap,
        ctx: u32,
        listener: u32,
        buf: u64,
        len: u32,
        cmd: &AdminCmd,
    ) -> Outcome {
        let backlog = match self.objects.listener_mut(listener) {
            Some(l) if l.ctx() == ctx => l.accept_mut().backlog,
            _ => return Outcome::Done(Err(ADMIN_STATUS_BAD_HANDLE)),
        };
        let Some(r) = self.requests(listener) else {
            return Outcome::Done(Err(ADMIN_STATUS_BAD_STATE));
        };
        // As many may wait as requests may be held: more could never all be served.
        if r.waiting.len() >= backlog {
            return Outcome::Done(Err(ADMIN_STATUS_NO_RESOURCES));
        }
        // Nobody waits before it: the first ready request is its at once.
        let ready = match r.waiting.is_empty() {
            true => r.held.iter().find(|h| h.stage == Stage::Ready),
            false => None,
        };
        if let Some(h) = ready {
            let info = *h.info;
            return Outcome::Done(self.write_query(mem, buf, len, info.as_bytes()).map(|_| {
                let h = self.requests(listener).and_then(|r| r.by_id(info.request));
                h.expect("just found").stage = Stage::HandedOut;
                (info.request as u64, 0, 0)
            }));
        }
        // The buffer is checked now (a command that could never complete fails at once).
        let blank = ConnRequest::new_zeroed();
        if let Err(s) = self.write_query(mem, buf, len, blank.as_bytes()) {
            return Outcome::Done(Err(s));
        }
        let r = self.requests(listener).expect("checked");
        r.waiting.push_back(Waiting {
            cmd: PendingCmd::of(cmd),
            buf,
        });
        Outcome::Pending
    }

    /// `REJECT` of request `request` of listener `listener` of `ctx`, with the private
    /// data of `iwarp`.
    pub(in crate::engine) fn reject(
        &mut self,
        mem: &GuestMemoryMmap,
        ctx: u32,
        listener: u32,
        request: u32,
        iwarp: &IwarpConnArgs,
    ) -> Result<Results, u16> {
        match self.objects.listener(listener) {
            Some(l) if l.ctx() == ctx => {}
            _ => return Err(ADMIN_STATUS_BAD_HANDLE),
        }
        let local = Self::iwarp_local(mem, iwarp)?;
        let r = self.requests(listener).ok_or(ADMIN_STATUS_BAD_STATE)?;
        let h = r
            .by_id(request)
            .filter(|h| h.stage == Stage::HandedOut)
            .ok_or(ADMIN_STATUS_BAD_HANDLE)?;
        let reject = Flags {
            reject: true,
            ..Flags::default()
        };
        let reply = mpa::build(
            Kind::Reply,
            reject,
            h.info.mpa_revision,
            None,
            &local.private_data,
        )
        .map_err(|_| ADMIN_STATUS_BAD_PARAM)?;
        let conn = h.conn;
        debug!("listener {listener}: request {request} rejected");
        self.iwarp_request_reject(listener, conn, reply);
        self.tcp_service(mem, conn, Instant::now());
        Ok((0, 0, 0))
    }

    /// An ACCEPT naming request `request` of `listener`: its connection, with the
    /// request's bytes, taken out of the listener for a QP. `BAD_HANDLE` if the listener
    /// does not hold it (handed out and not answered).
    pub(in crate::engine::tcp) fn iwarp_request_take(
        &mut self,
        listener: u32,
        request: u32,
    ) -> Result<(ConnId, Vec<u8>), u16> {
        let r = self.requests(listener).ok_or(ADMIN_STATUS_BAD_STATE)?;
        let conn = r
            .by_id(request)
            .filter(|h| h.stage == Stage::HandedOut)
            .ok_or(ADMIN_STATUS_BAD_HANDLE)?
            .conn;
        let h = r.remove(conn).expect("found");
        self.tcp.held.remove(&conn);
        Ok((conn, h.frame))
    }
}
