//! Parsing of what the guest writes: admin commands and work queue entries. Pure functions
//! of the bytes (no device state), so they can be fuzzed on their own; every field is
//! checked here before any other part of the engine sees it.

use std::net::Ipv6Addr;

use qpip_abi::admin::*;
use qpip_abi::cqe::*;
use qpip_abi::wqe::*;
use zerocopy::FromBytes;

use super::memory::valid_depth;

/// A validated admin command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminRequest {
    QueryDevice {
        buf: u64,
        len: u32,
    },
    QueryStats {
        buf: u64,
        len: u32,
    },
    ListAddrs {
        buf: u64,
        len: u32,
    },
    /// A request for the next asynchronous event.
    AsyncEvent,
    SetMac([u8; 6]),
    AddAddr {
        addr: Ipv6Addr,
        prefix_len: u8,
    },
    DelAddr(Ipv6Addr),
    /// The guest-physical address of the context's doorbell page.
    /// The doorbell page and the `CTX_FLAG_*` bits.
    CreateCtx {
        page: u64,
        flags: u32,
    },
    DestroyCtx,
    CreateCq {
        page_list: u64,
        npages: u32,
        depth: u32,
        vector: u16,
    },
    DestroyCq,
    CreateQp(QpRequest),
    DestroyQp,
    RegMr(RegMrArgs),
    DeregMr,
    Bind {
        addr: Ipv6Addr,
        port: u16,
        /// The peer a driver-chosen port is for (BindArgs::peer_port non-zero).
        peer: Option<(Ipv6Addr, u16)>,
        /// BIND_FLAG_SHARE_PORT: a UDP port shared with the context's other sharing QPs.
        share: bool,
    },
    Listen {
        addr: Ipv6Addr,
        port: u16,
        backlog: u32,
        /// `LISTEN_FLAG_IWARP_REQUESTS`: the listener holds iWARP connection requests.
        requests: bool,
    },
    DestroyListener,
    Accept {
        qp: u32,
        /// Non-zero: the held connection request the QP answers.
        request: u32,
        iwarp: IwarpConnArgs,
    },
    /// The next connection request of the listener, written at `buf`.
    ConnRequest {
        buf: u64,
        len: u32,
    },
    Reject {
        request: u32,
        iwarp: IwarpConnArgs,
    },
    Connect {
        addr: Ipv6Addr,
        port: u16,
        iwarp: IwarpConnArgs,
    },
    Close,
    /// `SET_QP_OPT` KEEPALIVE on QP `handle`: None turns it off.
    SetKeepalive(Option<crate::net::tcp::Keepalive>),
    /// `SET_QP_OPT` UDP_PEER on QP `handle`: None, no peer.
    SetUdpPeer(Option<(Ipv6Addr, u16)>),
    CreateTripwire(CreateTripwireArgs),
    DestroyTripwire,
    /// An iWARP QP's connection parameters (`handle`), into `buf`.
    QueryConn {
        buf: u64,
        len: u32,
    },
    AddRoute(crate::net::route::Route),
    /// The route with this destination, prefix length and metric.
    DelRoute {
        dest: Ipv6Addr,
        prefix_len: u8,
        metric: u32,
    },
    /// A static neighbour, checked (unicast address and MAC).
    AddNeighbor(crate::net::config::StaticNeighbor),
    /// The static neighbour with this address.
    DelNeighbor(Ipv6Addr),
}

/// The transport a CREATE_QP asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpType {
    Udp,
    Tcp,
    /// `QP_TYPE_RAW_ETH` (kernel contexts only: the engine checks).
    RawEth,
}

/// A CREATE_QP's arguments, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpRequest {
    pub kind: QpType,
    pub framing: u8,
    pub send_cq: u32,
    pub recv_cq: u32,
    pub sq_page_list: u64,
    pub sq_npages: u16,
    pub sq_depth: u32,
    pub rq_page_list: u64,
    pub rq_npages: u16,
    pub rq_depth: u32,
}

fn zero(bytes: &[u8]) -> bool {
    bytes.iter().all(|&b| b == 0)
}

fn args<T: FromBytes>(cmd: &AdminCmd) -> T {
    T::read_from_prefix(&cmd.body)
        .expect("every argument body is 48 bytes")
        .0
}

/// Decodes and checks one admin command (statelessly: handles are looked up later).
/// `msix_vectors` bounds the CQ vector.
pub fn admin(cmd: &AdminCmd, msix_vectors: u16) -> Result<AdminRequest, u16> {
    use AdminRequest as R;
    if cmd.flags != 0 {
        return Err(ADMIN_STATUS_BAD_OPCODE);
    }
    let param = |ok: bool| {
        if ok {
            Ok(())
        } else {
            Err(ADMIN_STATUS_BAD_PARAM)
        }
    };
    // Reserved fields must be zero: a command that uses them is one this device does not
    // know (ADMIN_STATUS_BAD_OPCODE, as the interface documents).
    let reserved = |ok: bool| {
        if ok {
            Ok(())
        } else {
            Err(ADMIN_STATUS_BAD_OPCODE)
        }
    };
    Ok(match cmd.opcode {
        ADMIN_OP_QUERY_DEVICE
        | ADMIN_OP_QUERY_STATS
        | ADMIN_OP_LIST_ADDRS
        | ADMIN_OP_QUERY_CONN
        | ADMIN_OP_CONN_REQUEST => {
            let a: QueryArgs = args(cmd);
            reserved(zero(&a.reserved))?;
            let (buf, len) = (a.buf, a.len);
            match cmd.opcode {
                ADMIN_OP_QUERY_DEVICE => R::QueryDevice { buf, len },
                ADMIN_OP_QUERY_STATS => R::QueryStats { buf, len },
                ADMIN_OP_QUERY_CONN => R::QueryConn { buf, len },
                ADMIN_OP_CONN_REQUEST => R::ConnRequest { buf, len },
                _ => R::ListAddrs { buf, len },
            }
        }
        ADMIN_OP_ASYNC_EVENT => {
            // No arguments: a request that names a context or an object, or carries a
            // body, is one this device does not know.
            reserved(zero(&cmd.body) && cmd.ctx == 0 && cmd.handle == 0)?;
            R::AsyncEvent
        }
        ADMIN_OP_SET_MAC => {
            let a: SetMacArgs = args(cmd);
            reserved(zero(&a.reserved))?;
            param(a.mac[0] & 1 == 0 && a.mac != [0; 6])?;
            R::SetMac(a.mac)
        }
        ADMIN_OP_ADD_ADDR | ADMIN_OP_DEL_ADDR => {
            let a: AddrArgs = args(cmd);
            let addr = Ipv6Addr::from(a.addr);
            reserved(zero(&a.reserved))?;
            param(is_unicast(&addr))?;
            if cmd.opcode == ADMIN_OP_ADD_ADDR {
                // An IPv4 address (mapped) counts its prefix over the 128 bits: /1../32
                // are 97..=128.
                let shortest = if addr.to_ipv4_mapped().is_some() {
                    97
                } else {
                    1
                };
                param((shortest..=128).contains(&a.prefix_len))?;
                R::AddAddr {
                    addr,
                    prefix_len: a.prefix_len,
                }
            } else {
                R::DelAddr(addr)
            }
        }
        ADMIN_OP_CREATE_CTX => {
            let a: CreateCtxArgs = args(cmd);
            reserved(zero(&a.reserved))?;
            param(a.flags & !CTX_FLAG_KERNEL == 0)?;
            R::CreateCtx {
                page: a.doorbell_page,
                flags: a.flags,
            }
        }
        ADMIN_OP_DESTROY_CTX => R::DestroyCtx,
        ADMIN_OP_CREATE_CQ => {
            let a: CreateCqArgs = args(cmd);
            reserved(zero(&a.reserved))?;
            param(valid_depth(a.depth, MAX_QUEUE_DEPTH))?;
            param(a.vector >= 1 && a.vector < msix_vectors as u32)?;
            R::CreateCq {
                page_list: a.page_list,
                npages: a.npages,
                depth: a.depth,
                vector: a.vector as u16,
            }
        }
        ADMIN_OP_DESTROY_CQ => R::DestroyCq,
        ADMIN_OP_CREATE_QP => {
            let a: CreateQpArgs = args(cmd);
            reserved(zero(&a.reserved))?;
            param(
                valid_depth(a.sq_depth, MAX_QUEUE_DEPTH)
                    && valid_depth(a.rq_depth, MAX_QUEUE_DEPTH),
            )?;
            let kind = match (a.qp_type, a.framing) {
                (QP_TYPE_UDP, 0) => QpType::Udp,
                (QP_TYPE_TCP, FRAMING_MESSAGE | FRAMING_STREAM | FRAMING_IWARP) => QpType::Tcp,
                (QP_TYPE_RAW_ETH, 0 | RAW_RX_MERGEABLE) => QpType::RawEth,
                _ => return Err(ADMIN_STATUS_BAD_PARAM),
            };
            R::CreateQp(QpRequest {
                kind,
                framing: a.framing,
                send_cq: a.send_cq,
                recv_cq: a.recv_cq,
                sq_page_list: a.sq_page_list,
                sq_npages: a.sq_npages,
                sq_depth: a.sq_depth,
                rq_page_list: a.rq_page_list,
                rq_npages: a.rq_npages,
                rq_depth: a.rq_depth,
            })
        }
        ADMIN_OP_DESTROY_QP => R::DestroyQp,
        ADMIN_OP_REG_MR => {
            let a: RegMrArgs = args(cmd);
            reserved(zero(&a.reserved))?;
            R::RegMr(a)
        }
        ADMIN_OP_DEREG_MR => R::DeregMr,
        ADMIN_OP_BIND => {
            let a: BindArgs = args(cmd);
            let addr = Ipv6Addr::from(a.addr);
            let peer_addr = Ipv6Addr::from(a.peer_addr);
            reserved(zero(&a.reserved) && a.flags & !BIND_FLAG_SHARE_PORT == 0)?;
            param(addr.is_unspecified() || is_unicast(&addr))?;
            // A peer is named whole (a unicast address and a port), or not at all.
            param(if a.peer_port == 0 {
                peer_addr.is_unspecified()
            } else {
                is_unicast(&peer_addr)
            })?;
            R::Bind {
                addr,
                port: a.port,
                peer: (a.peer_port != 0).then_some((peer_addr, a.peer_port)),
                share: a.flags & BIND_FLAG_SHARE_PORT != 0,
            }
        }
        ADMIN_OP_LISTEN => {
            let a: ListenArgs = args(cmd);
            let addr = Ipv6Addr::from(a.addr);
            reserved(zero(&a.reserved))?;
            param(a.port != 0)?;
            param(a.flags & !LISTEN_FLAGS == 0)?;
            param(addr.is_unspecified() || is_unicast(&addr))?;
            param((1..=1024).contains(&a.backlog))?;
            R::Listen {
                addr,
                port: a.port,
                backlog: a.backlog,
                requests: a.flags & LISTEN_FLAG_IWARP_REQUESTS != 0,
            }
        }
        ADMIN_OP_DESTROY_LISTENER => R::DestroyListener,
        ADMIN_OP_ACCEPT => {
            let a: AcceptArgs = args(cmd);
            reserved(zero(&a.reserved))?;
            param(iwarp_args_valid(&a.iwarp))?;
            R::Accept {
                qp: a.qp,
                request: a.request,
                iwarp: a.iwarp,
            }
        }
        ADMIN_OP_REJECT => {
            let a: RejectArgs = args(cmd);
            reserved(zero(&a.reserved) && a.reserved0 == 0)?;
            // A reject carries private data only: no IRD, ORD or flags to agree on.
            let i = &a.iwarp;
            param(iwarp_args_valid(i) && i.ird == 0 && i.ord == 0 && i.flags == 0)?;
            param(a.request != 0)?;
            R::Reject {
                request: a.request,
                iwarp: a.iwarp,
            }
        }
        ADMIN_OP_CONNECT => {
            let a: ConnectArgs = args(cmd);
            let addr = Ipv6Addr::from(a.addr);
            reserved(zero(&a.reserved) && zero(&a.reserved0))?;
            param(is_unicast(&addr) && a.port != 0)?;
            param(iwarp_args_valid(&a.iwarp))?;
            R::Connect {
                addr,
                port: a.port,
                iwarp: a.iwarp,
            }
        }
        ADMIN_OP_CLOSE => R::Close,
        ADMIN_OP_SET_QP_OPT => {
            let a: SetQpOptArgs = args(cmd);
            reserved(zero(&a.reserved))?;
            match a.option {
                QP_OPT_KEEPALIVE => {
                    param(zero(&a.peer_addr) && a.peer_port == 0)?;
                    R::SetKeepalive(keepalive(&a).ok_or(ADMIN_STATUS_BAD_PARAM)?)
                }
                QP_OPT_UDP_PEER => {
                    let (idle, interval, probes) =
                        (a.keepalive_idle, a.keepalive_interval, a.keepalive_probes);
                    param(idle == 0 && interval == 0 && probes == 0)?;
                    let peer = Ipv6Addr::from(a.peer_addr);
                    // As BIND's peer: a unicast address and a port, or nothing.
                    param(if a.peer_port == 0 {
                        peer.is_unspecified()
                    } else {
                        is_unicast(&peer)
                    })?;
                    R::SetUdpPeer((a.peer_port != 0).then_some((peer, a.peer_port)))
                }
                _ => return Err(ADMIN_STATUS_BAD_PARAM),
            }
        }
        ADMIN_OP_CREATE_TRIPWIRE => {
            let a: CreateTripwireArgs = args(cmd);
            reserved(a.reserved == 0)?;
            R::CreateTripwire(a)
        }
        ADMIN_OP_DESTROY_TRIPWIRE => R::DestroyTripwire,
        ADMIN_OP_ADD_ROUTE | ADMIN_OP_DEL_ROUTE => {
            let a: RouteArgs = args(cmd);
            reserved(zero(&a.reserved0) && zero(&a.reserved))?;
            let dest = Ipv6Addr::from(a.dest);
            if cmd.opcode == ADMIN_OP_ADD_ROUTE {
                // Its gateway's being on-link is checked when the route is used.
                let gateway = Ipv6Addr::from(a.gateway);
                crate::net::route::Route::new(dest, a.prefix_len, gateway, a.metric)
                    .map(R::AddRoute)
                    .map_err(|_| ADMIN_STATUS_BAD_PARAM)?
            } else {
                param(a.prefix_len <= 128)?;
                R::DelRoute {
                    dest,
                    prefix_len: a.prefix_len,
                    metric: a.metric,
                }
            }
        }
        ADMIN_OP_ADD_NEIGH | ADMIN_OP_DEL_NEIGH => {
            use crate::net::config::StaticNeighbor;
            let a: NeighborArgs = args(cmd);
            reserved(zero(&a.reserved))?;
            let addr = Ipv6Addr::from(a.addr);
            param(StaticNeighbor::addr_ok(&addr))?;
            if cmd.opcode == ADMIN_OP_ADD_NEIGH {
                param(StaticNeighbor::mac_ok(&a.mac))?;
                R::AddNeighbor(StaticNeighbor { addr, mac: a.mac })
            } else {
                R::DelNeighbor(addr)
            }
        }
        _ => return Err(ADMIN_STATUS_BAD_OPCODE),
    })
}

/// KEEPALIVE's value: off (all zero), or every field within its range.
fn keepalive(a: &SetQpOptArgs) -> Option<Option<crate::net::tcp::Keepalive>> {
    use std::time::Duration;
    let (idle, interval, probes) = (a.keepalive_idle, a.keepalive_interval, a.keepalive_probes);
    if idle == 0 {
        return (interval == 0 && probes == 0).then_some(None);
    }
    let secs = 1..=KEEPALIVE_MAX_SECS;
    (secs.contains(&idle)
        && secs.contains(&interval)
        && (1..=KEEPALIVE_MAX_PROBES).contains(&probes))
    .then_some(Some(crate::net::tcp::Keepalive {
        idle: Duration::from_secs(idle.into()),
        interval: Duration::from_secs(interval.into()),
        probes,
    }))
}

/// The ranges of [`IwarpConnArgs`] (whether the QP is an iWARP one is the engine's to
/// check): private data within its limit and named by an address when there is some, known
/// flags, IRD and ORD within the device's limit. Where the private data lies is checked
/// when it is read.
fn iwarp_args_valid(a: &IwarpConnArgs) -> bool {
    a.pd_len as u32 <= IWARP_MAX_PRIVATE_DATA
        && (a.pd_len == 0 || a.pd_addr != 0)
        && a.flags & !IWARP_CONN_FLAGS == 0
        && a.ird <= IWARP_MAX_IRD_ORD
        && a.ord <= IWARP_MAX_IRD_ORD
}

/// A unicast address a host can use (not unspecified, not multicast; for an IPv4-mapped
/// address, not IPv4's unspecified, broadcast or multicast either).
pub fn is_unicast(a: &Ipv6Addr) -> bool {
    match a.to_ipv4_mapped() {
        Some(v4) => !(v4.is_unspecified() || v4.is_broadcast() || v4.is_multicast()),
        None => !a.is_unspecified() && !a.is_multicast(),
    }
}

/// Where the data of a send comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    Inline(Vec<u8>),
    Gather(Vec<Sge>),
}

/// A validated send WQE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendWr {
    pub wr_id: u64,
    /// `WQE_OP_SEND`, `WQE_OP_RDMA_WRITE` or `WQE_OP_RDMA_READ` (the last two for iWARP
    /// QPs only: the QP's kind checks).
    pub opcode: u8,
    /// `WQE_FLAG_SOLICITED` on a send (iWARP QPs only: the QP's kind checks).
    pub solicited: bool,
    /// RDMA Write and Read: the peer's region (remote address, rkey).
    pub remote: (u64, u32),
    /// An RDMA Write followed by Immediate Data (`WQE_FLAG_IMM`).
    pub with_imm: bool,
    pub imm_data: u32,
    pub dest_addr: Ipv6Addr,
    pub dest_port: u16,
    pub payload: Payload,
}

/// A validated receive WQE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvWr {
    pub wr_id: u64,
    pub sges: Vec<Sge>,
}

/// Why a WQE was refused: the CQE status and detail, with the wr_id (always recoverable:
/// it is the first 8 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WqeError {
    pub wr_id: u64,
    pub status: u8,
    pub detail: u32,
}

impl WqeError {
    /// The completion of the refused WR: QP `qp`, opcode `op` (`CQE_OP_*`).
    pub fn completion(&self, qp: u32, op: u8) -> qpip_abi::cqe::Cqe {
        super::completion::cqe(self.wr_id, qp, op, self.status, self.detail)
    }
}

fn header(bytes: &[u8; WQE_SIZE as usize]) -> Wqe {
    Wqe::read_from_prefix(bytes)
        .expect("a WQE slot holds a header")
        .0
}

fn sges(bytes: &[u8; WQE_SIZE as usize], n: u8) -> Vec<Sge> {
    let area = &bytes[WQE_SGE_OFFSET as usize..];
    (0..n as usize)
        .map(|i| {
            Sge::read_from_prefix(&area[i * 16..])
                .expect("SGE in slot")
                .0
        })
        .collect()
}

fn bad(wr_id: u64, status: u8) -> WqeError {
    WqeError {
        wr_id,
        status,
        detail: CQE_DETAIL_NONE,
    }
}

/// Decodes a send-ring WQE: an opcode of the send ring, flags that opcode takes, reserved
/// fields zero; an RDMA Write or Read names its remote region in `dest_addr` (its last 4
/// bytes zero), has no port and no immediate data, and a Read is never inline.
pub fn send_wqe(bytes: &[u8; WQE_SIZE as usize]) -> Result<SendWr, WqeError> {
    let _stage = crate::stages::span(crate::stages::Stage::GetWr);
    let h = header(bytes);
    let flags = match h.opcode {
        WQE_OP_SEND => WQE_FLAG_INLINE | WQE_FLAG_SOLICITED,
        WQE_OP_RDMA_WRITE => WQE_FLAG_INLINE | WQE_FLAG_IMM,
        WQE_OP_RDMA_READ => 0,
        _ => return Err(bad(h.wr_id, CQE_STATUS_BAD_OPCODE)),
    };
    let rdma = h.opcode != WQE_OP_SEND;
    if h.flags & !flags != 0
        || h.reserved0 != 0
        || h.reserved1 != 0
        || h.reserved2 != [0; 6]
        || rdma && (h.dest_port != 0 || h.dest_addr[12..] != [0; 4])
        || rdma && h.flags & WQE_FLAG_IMM == 0 && h.imm_data != 0
    {
        return Err(bad(h.wr_id, CQE_STATUS_BAD_WQE));
    }
    let payload = payload(bytes, &h)?;
    Ok(SendWr {
        wr_id: h.wr_id,
        opcode: h.opcode,
        solicited: h.flags & WQE_FLAG_SOLICITED != 0,
        remote: if rdma { h.remote() } else { (0, 0) },
        with_imm: h.flags & WQE_FLAG_IMM != 0,
        imm_data: h.imm_data,
        dest_addr: Ipv6Addr::from(h.dest_addr),
        dest_port: h.dest_port,
        payload,
    })
}

/// A send WQE's data: inline (no SGEs, at most `MAX_INLINE` bytes) or gathered (at most
/// `MAX_SGE` SGEs, no inline length), as its INLINE flag says.
fn payload(bytes: &[u8; WQE_SIZE as usize], h: &Wqe) -> Result<Payload, WqeError> {
    if h.flags & WQE_FLAG_INLINE != 0 {
        if h.num_sge != 0 || h.inline_len > MAX_INLINE {
            return Err(bad(h.wr_id, CQE_STATUS_BAD_WQE));
        }
        let start = WQE_SGE_OFFSET as usize;
        Ok(Payload::Inline(
            bytes[start..start + h.inline_len as usize].to_vec(),
        ))
    } else {
        if h.num_sge as u32 > MAX_SGE || h.inline_len != 0 {
            return Err(bad(h.wr_id, CQE_STATUS_BAD_WQE));
        }
        Ok(Payload::Gather(sges(bytes, h.num_sge)))
    }
}

/// A validated send WQE of a raw Ethernet QP: a frame (inline or gathered) and its
/// offloads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawSendWr {
    pub wr_id: u64,
    /// `WQE_FLAG_CSUM`: fill in the checksum at `offload.csum_start + csum_offset`.
    pub csum: bool,
    /// `WQE_FLAG_TSO`: cut the TCP super-segment into segments of `offload.mss`.
    pub tso: bool,
    pub offload: RawTxOffload,
    pub frame: Payload,
}

/// Decodes a raw QP's send WQE: `SEND` only, flags among INLINE, CSUM and TSO (TSO only
/// with CSUM), no port, no immediate data, reserved fields and the bytes of `dest_addr`
/// after the offloads zero. The offloads' values are the raw unit's to check against the
/// frame.
pub fn raw_send_wqe(bytes: &[u8; WQE_SIZE as usize]) -> Result<RawSendWr, WqeError> {
    let h = header(bytes);
    if h.opcode != WQE_OP_SEND {
        return Err(bad(h.wr_id, CQE_STATUS_BAD_OPCODE));
    }
    let (offload, rest_zero) = h.raw_offload();
    let tso = h.flags & WQE_FLAG_TSO != 0;
    let csum = h.flags & WQE_FLAG_CSUM != 0;
    if h.flags & !(WQE_FLAG_INLINE | WQE_FLAG_CSUM | WQE_FLAG_TSO) != 0
        || tso && !csum
        || !rest_zero
        || h.dest_port != 0
        || h.imm_data != 0
        || h.reserved0 != 0
        || h.reserved1 != 0
        || h.reserved2 != [0; 6]
    {
        return Err(bad(h.wr_id, CQE_STATUS_BAD_WQE));
    }
    let frame = payload(bytes, &h)?;
    Ok(RawSendWr {
        wr_id: h.wr_id,
        csum,
        tso,
        offload,
        frame,
    })
}

impl SendWr {
    /// For QPs that are not iWARP ones: a plain send, or the completion status that
    /// refuses it (an RDMA opcode: `BAD_OPCODE`; the solicited flag: `BAD_WQE`).
    pub fn plain(&self) -> Result<(), u8> {
        if self.opcode != WQE_OP_SEND {
            Err(CQE_STATUS_BAD_OPCODE)
        } else if self.solicited {
            Err(CQE_STATUS_BAD_WQE)
        } else {
            Ok(())
        }
    }
}

/// Decodes a receive-ring WQE.
pub fn recv_wqe(bytes: &[u8; WQE_SIZE as usize]) -> Result<RecvWr, WqeError> {
    let _stage = crate::stages::span(crate::stages::Stage::GetWr);
    let h = header(bytes);
    if h.opcode != WQE_OP_RECV {
        return Err(bad(h.wr_id, CQE_STATUS_BAD_OPCODE));
    }
    if h.flags != 0
        || h.num_sge as u32 > MAX_SGE
        || h.inline_len != 0
        || h.reserved0 != 0
        || h.reserved1 != 0
    {
        return Err(bad(h.wr_id, CQE_STATUS_BAD_WQE));
    }
    Ok(RecvWr {
        wr_id: h.wr_id,
        sges: sges(bytes, h.num_sge),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use zerocopy::{FromZeros, IntoBytes};

    fn slot(h: Wqe, tail: &[u8]) -> [u8; 128] {
        let mut b = [0u8; 128];
        b[..48].copy_from_slice(h.as_bytes());
        b[48..48 + tail.len()].copy_from_slice(tail);
        b
    }

    fn hdr(opcode: u8) -> Wqe {
        Wqe::read_from_bytes(&[0u8; 48][..])
            .map(|mut w: Wqe| {
                w.opcode = opcode;
                w.wr_id = 42;
                w
            })
            .unwrap()
    }

    #[test]
    fn inline_send() {
        let mut h = hdr(WQE_OP_SEND);
        h.flags = WQE_FLAG_INLINE;
        h.inline_len = 3;
        h.dest_port = 7;
        let wr = send_wqe(&slot(h, b"abc")).unwrap();
        assert_eq!(wr.payload, Payload::Inline(b"abc".to_vec()));
        assert_eq!(wr.dest_port, 7);
        h.inline_len = MAX_INLINE + 1;
        assert_eq!(
            send_wqe(&slot(h, b"")).unwrap_err().status,
            CQE_STATUS_BAD_WQE
        );
    }

    #[test]
    fn garbage_is_refused_with_the_wr_id() {
        let h = hdr(0x77);
        let e = send_wqe(&slot(h, b"")).unwrap_err();
        assert_eq!((e.wr_id, e.status), (42, CQE_STATUS_BAD_OPCODE));
        let mut h = hdr(WQE_OP_SEND);
        h.num_sge = 6;
        assert_eq!(
            send_wqe(&slot(h, b"")).unwrap_err().status,
            CQE_STATUS_BAD_WQE
        );
        let mut h = hdr(WQE_OP_RECV);
        h.flags = WQE_FLAG_INLINE;
        assert_eq!(
            recv_wqe(&slot(h, b"")).unwrap_err().status,
            CQE_STATUS_BAD_WQE
        );
        assert_eq!(
            recv_wqe(&slot(hdr(WQE_OP_SEND), b"")).unwrap_err().status,
            CQE_STATUS_BAD_OPCODE
        );
    }

    #[test]
    fn rdma_wqes_name_their_remote_region_and_take_only_their_flags() {
        let mut h = hdr(WQE_OP_RDMA_WRITE);
        h.set_remote(0x7f00_1234_5000, 0xdead_beef);
        h.flags = WQE_FLAG_INLINE;
        h.inline_len = 3;
        let wr = send_wqe(&slot(h, b"abc")).unwrap();
        assert_eq!(
            (wr.opcode, wr.remote, wr.solicited),
            (WQE_OP_RDMA_WRITE, (0x7f00_1234_5000, 0xdead_beef), false)
        );
        assert_eq!(wr.plain(), Err(CQE_STATUS_BAD_OPCODE), "not on other QPs");
        let mut r = hdr(WQE_OP_RDMA_READ);
        r.set_remote(0x1000, 7);
        r.num_sge = 1;
        let wr = send_wqe(&slot(r, &[0u8; 16])).unwrap();
        assert_eq!((wr.opcode, wr.remote), (WQE_OP_RDMA_READ, (0x1000, 7)));
        let mut s = hdr(WQE_OP_SEND);
        s.flags = WQE_FLAG_SOLICITED;
        let wr = send_wqe(&slot(s, b"")).unwrap();
        assert!(wr.solicited);
        assert_eq!(wr.remote, (0, 0), "a send names no remote region");
        assert_eq!(wr.plain(), Err(CQE_STATUS_BAD_WQE), "not on other QPs");
        // Refused: a read inline or solicited, a write solicited or with immediate data,
        // a remote region with its last bytes set, a port.
        let mut bad = vec![];
        for f in [WQE_FLAG_INLINE, WQE_FLAG_SOLICITED] {
            let mut b = r;
            b.flags = f;
            bad.push(b);
        }
        let mut b = h;
        b.flags = WQE_FLAG_SOLICITED;
        bad.push(b);
        let mut b = h;
        b.imm_data = 1;
        bad.push(b);
        let mut b = r;
        b.dest_addr[15] = 1;
        bad.push(b);
        let mut b = r;
        b.dest_port = 80;
        bad.push(b);
        for b in bad {
            assert_eq!(
                send_wqe(&slot(b, b"abc")).unwrap_err().status,
                CQE_STATUS_BAD_WQE,
                "{b:?}"
            );
        }
    }

    #[test]
    fn sges_are_read_in_order() {
        let mut h = hdr(WQE_OP_RECV);
        h.num_sge = 2;
        let s = [
            Sge {
                addr: 1,
                length: 2,
                lkey: 3,
            },
            Sge {
                addr: 4,
                length: 5,
                lkey: 6,
            },
        ];
        let wr = recv_wqe(&slot(h, s.as_bytes())).unwrap();
        assert_eq!(wr.sges, s);
    }

    #[test]
    fn admin_parameters_are_checked() {
        let mut cmd = AdminCmd::read_from_bytes(&[0u8; 64][..]).unwrap();
        cmd.opcode = ADMIN_OP_CREATE_CQ;
        let mut a = CreateCqArgs::read_from_bytes(&[0u8; 48][..]).unwrap();
        a.depth = 64;
        a.vector = 1;
        a.npages = 1;
        cmd.body.copy_from_slice(a.as_bytes());
        assert!(matches!(
            admin(&cmd, 16),
            Ok(AdminRequest::CreateCq {
                depth: 64,
                vector: 1,
                ..
            })
        ));
        a.vector = 0;
        cmd.body.copy_from_slice(a.as_bytes());
        assert_eq!(
            admin(&cmd, 16),
            Err(ADMIN_STATUS_BAD_PARAM),
            "vector 0 is the admin's"
        );
        a.vector = 1;
        a.depth = 48;
        cmd.body.copy_from_slice(a.as_bytes());
        assert_eq!(admin(&cmd, 16), Err(ADMIN_STATUS_BAD_PARAM));
        cmd.opcode = 0xffff;
        assert_eq!(admin(&cmd, 16), Err(ADMIN_STATUS_BAD_OPCODE));
    }

    #[test]
    fn listen_flags_accept_requests_and_reject_are_checked() {
        let run = |opcode: u16, body: &[u8]| {
            let mut cmd = AdminCmd::new_zeroed();
            cmd.opcode = opcode;
            cmd.body.copy_from_slice(body);
            admin(&cmd, 16)
        };
        let mut l = ListenArgs::new_zeroed();
        l.port = 80;
        l.backlog = 4;
        l.flags = LISTEN_FLAG_IWARP_REQUESTS;
        assert!(matches!(
            run(ADMIN_OP_LISTEN, l.as_bytes()),
            Ok(AdminRequest::Listen { requests: true, .. })
        ));
        l.flags = 2;
        assert_eq!(
            run(ADMIN_OP_LISTEN, l.as_bytes()),
            Err(ADMIN_STATUS_BAD_PARAM),
            "an unknown flag"
        );
        let mut a = AcceptArgs::new_zeroed();
        a.qp = 3;
        a.request = 9;
        assert!(matches!(
            run(ADMIN_OP_ACCEPT, a.as_bytes()),
            Ok(AdminRequest::Accept { request: 9, .. })
        ));
        let mut r = RejectArgs::new_zeroed();
        r.request = 9;
        r.iwarp.pd_addr = 0x1000;
        r.iwarp.pd_len = 5;
        assert!(matches!(
            run(ADMIN_OP_REJECT, r.as_bytes()),
            Ok(AdminRequest::Reject { request: 9, .. })
        ));
        for bad in [
            |r: &mut RejectArgs| r.request = 0,
            |r: &mut RejectArgs| r.iwarp.ird = 1,
            |r: &mut RejectArgs| r.iwarp.ord = 1,
            |r: &mut RejectArgs| r.iwarp.flags = IWARP_CONN_CRC,
            |r: &mut RejectArgs| r.iwarp.pd_len = IWARP_MAX_PRIVATE_DATA as u16 + 1,
        ] {
            let mut b = r;
            bad(&mut b);
            assert_eq!(
                run(ADMIN_OP_REJECT, b.as_bytes()),
                Err(ADMIN_STATUS_BAD_PARAM),
                "{b:?}"
            );
        }
        let mut b = r;
        b.reserved0 = 1;
        assert_eq!(
            run(ADMIN_OP_REJECT, b.as_bytes()),
            Err(ADMIN_STATUS_BAD_OPCODE)
        );
        let mut q = QueryArgs::new_zeroed();
        q.buf = 0x2000;
        q.len = 4096;
        assert_eq!(
            run(ADMIN_OP_CONN_REQUEST, q.as_bytes()),
            Ok(AdminRequest::ConnRequest {
                buf: 0x2000,
                len: 4096
            })
        );
    }

    #[test]
    fn iwarp_connection_parameters_are_checked_on_connect_and_accept() {
        let connect = |iwarp: IwarpConnArgs, reserved0: u8| {
            let mut cmd = AdminCmd::new_zeroed();
            cmd.opcode = ADMIN_OP_CONNECT;
            let mut a = ConnectArgs::new_zeroed();
            a.addr = Ipv6Addr::LOCALHOST.octets();
            a.port = 7174;
            a.reserved0[5] = reserved0;
            a.iwarp = iwarp;
            cmd.body.copy_from_slice(a.as_bytes());
            admin(&cmd, 16)
        };
        let accept = |iwarp: IwarpConnArgs| {
            let mut cmd = AdminCmd::new_zeroed();
            cmd.opcode = ADMIN_OP_ACCEPT;
            let mut a = AcceptArgs::new_zeroed();
            a.qp = 3;
            a.iwarp = iwarp;
            cmd.body.copy_from_slice(a.as_bytes());
            admin(&cmd, 16)
        };
        let good = IwarpConnArgs {
            pd_addr: 0x1000,
            pd_len: IWARP_MAX_PRIVATE_DATA as u16,
            ird: IWARP_MAX_IRD_ORD,
            ord: 1,
            flags: IWARP_CONN_CRC | IWARP_CONN_PEER_TO_PEER,
        };
        assert_eq!(
            connect(good, 0),
            Ok(AdminRequest::Connect {
                addr: Ipv6Addr::LOCALHOST,
                port: 7174,
                iwarp: good,
            })
        );
        assert_eq!(
            accept(good),
            Ok(AdminRequest::Accept {
                qp: 3,
                request: 0,
                iwarp: good
            })
        );
        assert_eq!(connect(good, 1), Err(ADMIN_STATUS_BAD_OPCODE), "reserved");
        let bad = [
            IwarpConnArgs {
                pd_len: IWARP_MAX_PRIVATE_DATA as u16 + 1,
                ..good
            },
            IwarpConnArgs { pd_addr: 0, ..good },
            IwarpConnArgs {
                ird: IWARP_MAX_IRD_ORD + 1,
                ..good
            },
            IwarpConnArgs {
                ord: IWARP_MAX_IRD_ORD + 1,
                ..good
            },
            IwarpConnArgs {
                flags: IWARP_CONN_FLAGS + 1,
                ..good
            },
        ];
        for b in bad {
            assert_eq!(connect(b, 0), Err(ADMIN_STATUS_BAD_PARAM), "{b:?}");
            assert_eq!(accept(b), Err(ADMIN_STATUS_BAD_PARAM), "{b:?}");
        }
        // No private data needs no address.
        let none = IwarpConnArgs {
            pd_addr: 0,
            pd_len: 0,
            ..good
        };
        assert!(connect(none, 0).is_ok());
    }
}
