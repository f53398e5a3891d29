//! The plain values of the API: completions, connection events, QP kinds, limits.

use std::fmt;
use std::io;
use std::net::{Ipv6Addr, SocketAddrV6};

use qpip_abi::cqe;
use qpip_abi::uapi;

/// Which implementation a [`crate::Context`] runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProviderKind {
    /// The qpip adapter through `/dev/qpipN`.
    Device,
    /// Kernel sockets, same semantics and wire format.
    Soft,
}

/// TCP framing of a QP's byte stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// QP ⇄ QP: each send is one message (an 8-byte `MsgHeader`, then the bytes), so
    /// boundaries and immediate data survive any segmentation.
    Message,
    /// QP ⇄ plain socket: the bytes are the stream.
    Stream,
    /// RDMA over TCP, iWARP's MPA, DDP and RDMAP: sends, RDMA Writes and Reads, with any
    /// iWARP peer (another qpip device, Linux's soft-iWARP, an iWARP NIC). Set up with
    /// [`crate::Qp::connect_mpa`] and [`crate::Listener::accept_mpa`]; the device only.
    Iwarp,
}

/// The transport of a QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpKind {
    /// Datagrams; each send names its destination.
    Udp,
    /// One TCP connection, established by [`crate::Qp::connect`] or
    /// [`crate::Listener::accept`].
    Tcp(Framing),
}

impl QpKind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            QpKind::Udp => "UDP",
            QpKind::Tcp(_) => "TCP",
        }
    }
}

/// What a completed work request was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Opcode {
    #[default]
    Send,
    Recv,
    /// An RDMA Write (iWARP).
    RdmaWrite,
    /// An RDMA Read (iWARP).
    RdmaRead,
    /// A receive that RFC 7306 Immediate Data took (iWARP, after an RDMA Write with
    /// immediate data): [`Completion::imm`] holds it, `byte_len` is 0.
    RecvImm,
    /// Not a work request's: a tripwire fired ([`Completion::wr_id`] is its tag,
    /// [`Completion::qp`] its id, [`Completion::addr`] the first address written).
    Tripwire,
}

/// How a work request ended (the device's `CQE_STATUS_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Status {
    /// It completed.
    #[default]
    Success,
    /// The data did not fit: a receive buffer too small (the datagram or message is
    /// dropped, `byte_len` is its size), or a send larger than the QP allows.
    LocalLength,
    /// Memory protection: unknown lkey, another context's region, out of bounds, no access.
    LocalProtection,
    /// An opcode the device does not know or that does not belong in the ring.
    BadOpcode,
    /// A malformed work request (for example immediate data on a UDP QP).
    BadWqe,
    /// The QP was destroyed or entered the error state before the request was processed.
    Flushed,
    /// The destination is unusable: unspecified, multicast or port 0, not reachable, or
    /// the QP is not bound (UDP) or not connected (TCP).
    BadDest,
    /// iWARP: a remote access was refused (unknown rkey, out of bounds, no right); the
    /// connection ended with a Terminate, which [`Completion::detail`] names.
    RemoteAccess,
    /// iWARP: the connection ended with a Terminate for another error.
    RemoteOperation,
    /// A status this library does not know (a newer device).
    Other(u8),
}

impl Status {
    pub(crate) fn from_raw(s: u8) -> Status {
        match s {
            cqe::CQE_STATUS_SUCCESS => Status::Success,
            cqe::CQE_STATUS_LOCAL_LENGTH => Status::LocalLength,
            cqe::CQE_STATUS_LOCAL_PROTECTION => Status::LocalProtection,
            cqe::CQE_STATUS_BAD_OPCODE => Status::BadOpcode,
            cqe::CQE_STATUS_BAD_WQE => Status::BadWqe,
            cqe::CQE_STATUS_FLUSHED => Status::Flushed,
            cqe::CQE_STATUS_BAD_DEST => Status::BadDest,
            cqe::CQE_STATUS_REMOTE_ACCESS => Status::RemoteAccess,
            cqe::CQE_STATUS_REMOTE_OPERATION => Status::RemoteOperation,
            other => Status::Other(other),
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Status::Success => f.write_str("success"),
            Status::LocalLength => f.write_str("length error (the data did not fit)"),
            Status::LocalProtection => f.write_str("memory protection error"),
            Status::BadOpcode => f.write_str("bad opcode"),
            Status::BadWqe => f.write_str("malformed work request"),
            Status::Flushed => f.write_str("flushed (QP destroyed or in error)"),
            Status::BadDest => f.write_str("unusable destination"),
            Status::RemoteAccess => f.write_str("remote access refused (Terminate)"),
            Status::RemoteOperation => f.write_str("remote operation error (Terminate)"),
            Status::Other(s) => write!(f, "unknown status {s}"),
        }
    }
}

/// Which check failed, for error completions (the device's `CQE_DETAIL_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Detail {
    #[default]
    None,
    BadLkey,
    OtherContext,
    OutOfBounds,
    Access,
    BadIndex,
    NoRoute,
    NotBound,
    BadAddress,
    /// The region the WR lay in was deregistered while the device held the WR.
    RegionGone,
    /// The Terminate that ended an iWARP connection.
    Terminate(crate::iwarp::Terminate),
    Other(u32),
}

impl Detail {
    pub(crate) fn from_raw(d: u32) -> Detail {
        match d {
            cqe::CQE_DETAIL_NONE => Detail::None,
            cqe::CQE_DETAIL_BAD_LKEY => Detail::BadLkey,
            cqe::CQE_DETAIL_OTHER_CONTEXT => Detail::OtherContext,
            cqe::CQE_DETAIL_OUT_OF_BOUNDS => Detail::OutOfBounds,
            cqe::CQE_DETAIL_ACCESS => Detail::Access,
            cqe::CQE_DETAIL_BAD_INDEX => Detail::BadIndex,
            cqe::CQE_DETAIL_NO_ROUTE => Detail::NoRoute,
            cqe::CQE_DETAIL_NOT_BOUND => Detail::NotBound,
            cqe::CQE_DETAIL_BAD_ADDRESS => Detail::BadAddress,
            cqe::CQE_DETAIL_REGION_GONE => Detail::RegionGone,
            t if t & cqe::CQE_DETAIL_TERMINATE != 0 => Detail::Terminate(crate::iwarp::Terminate {
                layer: (t >> 16 & 0xf) as u8,
                etype: (t >> 8 & 0xf) as u8,
                code: t as u8,
                received: t & 1 << 24 != 0,
            }),
            other => Detail::Other(other),
        }
    }
}

/// One completed work request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The caller's tag of the work request.
    pub wr_id: u64,
    /// The QP it was posted on ([`crate::Qp::id`]).
    pub qp: u32,
    pub opcode: Opcode,
    pub status: Status,
    pub detail: Detail,
    /// Bytes sent or received (for a receive that did not fit: the size that arrived).
    pub byte_len: u32,
    /// Receives on TCP message-framed QPs: the sender's immediate data.
    pub imm: u32,
    /// Receives on UDP QPs: the sender.
    pub src: Option<SocketAddrV6>,
    /// Receives on iWARP QPs: the Send asked for a solicited event.
    pub solicited: bool,
    /// Tripwire events: the first address of the watched range written.
    pub addr: u64,
}

impl Default for Completion {
    fn default() -> Completion {
        Completion {
            wr_id: 0,
            qp: 0,
            opcode: Opcode::Send,
            status: Status::Success,
            detail: Detail::None,
            byte_len: 0,
            imm: 0,
            src: None,
            solicited: false,
            addr: 0,
        }
    }
}

impl Completion {
    /// True when the work request succeeded.
    pub fn is_ok(&self) -> bool {
        self.status == Status::Success
    }

    pub(crate) fn from_cqe(c: &cqe::Cqe, udp_src: bool) -> Completion {
        let opcode = match c.opcode {
            cqe::CQE_OP_RECV => Opcode::Recv,
            cqe::CQE_OP_RDMA_WRITE => Opcode::RdmaWrite,
            cqe::CQE_OP_RDMA_READ => Opcode::RdmaRead,
            cqe::CQE_OP_RECV_IMM => Opcode::RecvImm,
            cqe::CQE_OP_TRIPWIRE => Opcode::Tripwire,
            _ => Opcode::Send,
        };
        let mut out = Completion {
            wr_id: c.wr_id,
            qp: c.qp,
            opcode,
            status: Status::Success,
            detail: Detail::None,
            byte_len: c.byte_len,
            imm: c.imm_data,
            src: None,
            solicited: false,
            addr: 0,
        };
        // The common case, a success with nothing to add, is done: what follows is for the
        // rest (polled for every completion, so the plain case decodes nothing more).
        if c.status == cqe::CQE_STATUS_SUCCESS {
            if udp_src && opcode == Opcode::Recv {
                out.src = Some(SocketAddrV6::new(
                    Ipv6Addr::from(c.src_addr),
                    c.src_port,
                    0,
                    0,
                ));
            }
            if c.detail == cqe::CQE_DETAIL_SOLICITED {
                out.solicited = true;
            } else if c.detail != cqe::CQE_DETAIL_NONE {
                out.detail = Detail::from_raw(c.detail);
            }
        } else {
            out.status = Status::from_raw(c.status);
            out.detail = Detail::from_raw(c.detail);
        }
        if opcode == Opcode::Tripwire {
            out.addr = u64::from_le_bytes(c.src_addr[..8].try_into().expect("8 bytes"));
        }
        out
    }
}

/// What a connection event is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// A [`crate::Listener::accept`] finished.
    Accept,
    /// A [`crate::Qp::connect`] finished.
    Connect,
    /// A [`crate::Qp::close`] finished.
    Close,
    /// A connection failed on its own (reset, timeout): its work requests are flushed.
    QpError,
    /// The peer closed its direction: receives now complete with 0 bytes.
    PeerClosed,
    /// Events were dropped because a queue was full (`user_data`: how many, if known).
    Lost,
    /// A kind this library does not know.
    Other(u32),
}

impl EventKind {
    pub(crate) fn from_raw(k: u32) -> EventKind {
        match k {
            uapi::EVENT_ACCEPT => EventKind::Accept,
            uapi::EVENT_CONNECT => EventKind::Connect,
            uapi::EVENT_CLOSE => EventKind::Close,
            uapi::EVENT_QP_ERROR => EventKind::QpError,
            uapi::EVENT_PEER_CLOSED => EventKind::PeerClosed,
            uapi::EVENT_LOST => EventKind::Lost,
            other => EventKind::Other(other),
        }
    }
}

/// A connection event of a context (the outcome of accept, connect, close, or news about a
/// connection).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    pub kind: EventKind,
    /// 0, or a negative errno (`-ECANCELED`, `-ECONNREFUSED`, `-ETIMEDOUT`, `-EINVAL`, ...).
    pub status: i32,
    /// The QP it is about.
    pub qp: u32,
    /// The `user_data` given to the call that started it.
    pub user_data: u64,
    /// Accept and connect: the peer.
    pub peer: Option<SocketAddrV6>,
}

impl Event {
    /// The failure, if the event reports one.
    pub fn error(&self) -> Option<io::Error> {
        (self.status != 0).then(|| io::Error::from_raw_os_error(-self.status))
    }

    pub(crate) fn from_raw(e: &uapi::Event) -> Event {
        let kind = EventKind::from_raw(e.kind);
        let peer = (matches!(kind, EventKind::Accept | EventKind::Connect) && e.status == 0)
            .then(|| SocketAddrV6::new(Ipv6Addr::from(e.peer_addr), e.peer_port, 0, 0));
        Event {
            kind,
            status: e.status,
            qp: e.qp,
            user_data: e.user_data,
            peer,
        }
    }
}

/// TCP keepalive on a QP's connection ([`crate::Qp::set_keepalive`]): after `idle` with
/// nothing received, a probe every `interval`; after `probes` unanswered ones the
/// connection times out and the QP fails (its WRs complete flushed), as when
/// retransmissions go unanswered. Whole seconds, 1 s to 32767 s; 1 to 127 probes
/// (Linux's `TCP_KEEPIDLE`, `TCP_KEEPINTVL` and `TCP_KEEPCNT` bounds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keepalive {
    pub idle: std::time::Duration,
    pub interval: std::time::Duration,
    pub probes: u32,
}

impl Keepalive {
    /// Most seconds of `idle` and `interval`.
    pub const MAX_SECS: u32 = qpip_abi::admin::KEEPALIVE_MAX_SECS;
    /// Most `probes`.
    pub const MAX_PROBES: u32 = qpip_abi::admin::KEEPALIVE_MAX_PROBES;

    /// `(idle, interval, probes)` in whole seconds, checked against the bounds.
    pub(crate) fn checked(&self) -> crate::Result<(u32, u32, u32)> {
        let secs = |d: std::time::Duration, what: &str| {
            let s = d.as_secs();
            if d.subsec_nanos() != 0 || s == 0 || s > u64::from(Self::MAX_SECS) {
                Err(crate::Error::InvalidArgument(format!(
                    "keepalive {what} must be whole seconds from 1 to {} (got {d:?})",
                    Self::MAX_SECS
                )))
            } else {
                Ok(s as u32)
            }
        };
        let (idle, interval) = (secs(self.idle, "idle")?, secs(self.interval, "interval")?);
        if !(1..=Self::MAX_PROBES).contains(&self.probes) {
            return Err(crate::Error::InvalidArgument(format!(
                "keepalive probes must be from 1 to {} (got {})",
                Self::MAX_PROBES,
                self.probes
            )));
        }
        Ok((idle, interval, self.probes))
    }
}

/// What a context can do: queue depths, SGEs, inline bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Deepest work or completion queue, in entries.
    pub max_queue_depth: u32,
    /// Scatter/gather entries per work request.
    pub max_sge: u32,
    /// Bytes of inline data per send.
    pub max_inline: u32,
    /// Largest UDP payload.
    pub max_udp_payload: u32,
    /// QPs and CQs per context.
    pub max_qps: u32,
    pub max_cqs: u32,
    /// MTU of the link (the soft provider reports 1500).
    pub mtu: u32,
}
