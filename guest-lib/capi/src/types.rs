//! The constants and plain structures of `qpip.h`.

use std::ffi::c_int;

// ---- error codes -----------------------------------------------------------------------

/// Success.
pub const QPIP_OK: c_int = 0;
/// A required pointer was NULL.
pub const QPIP_E_NULL: c_int = -1;
/// A handle of another type (or a corrupted one) was passed.
pub const QPIP_E_BAD_HANDLE: c_int = -2;
/// An argument is out of range or inconsistent.
pub const QPIP_E_INVALID: c_int = -3;
/// No qpip device (and QPIP_PROVIDER=device), or QPIP_PROVIDER holds a bad name.
pub const QPIP_E_NO_DEVICE: c_int = -4;
/// The device was reset or removed: open a new context.
pub const QPIP_E_DEVICE_GONE: c_int = -5;
/// A system call failed (qpip_last_error() says which and why).
pub const QPIP_E_OS: c_int = -6;
/// The work queue is full: poll the completion queue first.
pub const QPIP_E_QUEUE_FULL: c_int = -7;
/// Too many scatter/gather entries, inline data too long, or a range outside its region.
pub const QPIP_E_LENGTH: c_int = -8;
/// An object of another context was used.
pub const QPIP_E_FOREIGN: c_int = -9;
/// The operation does not apply to this kind of QP.
pub const QPIP_E_WRONG_KIND: c_int = -10;
/// A UDP send without a destination, or a TCP send with one.
pub const QPIP_E_DESTINATION: c_int = -11;
/// A blocking call gave up waiting.
pub const QPIP_E_TIMEDOUT: c_int = -12;
/// An accept, connect or close failed (refused, reset, cancelled ...).
pub const QPIP_E_CONNECTION: c_int = -13;
/// The device speaks an interface version this library does not know.
pub const QPIP_E_ABI: c_int = -14;
/// Not supported by this provider (iWARP and tripwires on the software provider).
pub const QPIP_E_UNSUPPORTED: c_int = -15;

/// QP kinds for qpip_qp_create().
pub const QPIP_QP_UDP: c_int = 0;
/// TCP, QP ⇄ QP: each send is one message.
pub const QPIP_QP_TCP_MESSAGE: c_int = 1;
/// TCP, QP ⇄ plain socket: the bytes are the stream.
pub const QPIP_QP_TCP_STREAM: c_int = 2;
/// TCP with iWARP (RDMA over TCP: MPA, DDP, RDMAP), with any iWARP peer: Sends, RDMA
/// Writes and Reads. Set up with qpip_qp_connect_mpa() and qpip_accept_mpa(); the device
/// only (the software provider gives QPIP_E_UNSUPPORTED).
pub const QPIP_QP_TCP_IWARP: c_int = 3;

/// Providers (qpip_provider()).
pub const QPIP_PROVIDER_DEVICE: c_int = 0;
pub const QPIP_PROVIDER_SOFT: c_int = 1;

/// Completion opcodes.
pub const QPIP_OP_SEND: u32 = 0;
pub const QPIP_OP_RECV: u32 = 1;
/// An RDMA Write (iWARP QPs).
pub const QPIP_OP_RDMA_WRITE: u32 = 2;
/// An RDMA Read (iWARP QPs).
pub const QPIP_OP_RDMA_READ: u32 = 3;
/// A receive taken by RFC 7306 Immediate Data (iWARP): `imm` holds it, `byte_len` is 0.
pub const QPIP_OP_RECV_IMM: u32 = 4;
/// A tripwire fired (not a work request's completion; see qpip_tripwire_create()).
pub const QPIP_OP_TRIPWIRE: u32 = 5;

/// Completion statuses (qpip_completion.status).
pub const QPIP_WC_SUCCESS: u32 = 0;
pub const QPIP_WC_LOCAL_LENGTH: u32 = 1;
pub const QPIP_WC_LOCAL_PROTECTION: u32 = 2;
pub const QPIP_WC_BAD_OPCODE: u32 = 3;
pub const QPIP_WC_BAD_WQE: u32 = 4;
pub const QPIP_WC_FLUSHED: u32 = 5;
pub const QPIP_WC_BAD_DEST: u32 = 6;
/// iWARP: the peer refused a remote access (a Terminate; `detail` holds it, see
/// QPIP_DETAIL_TERMINATE).
pub const QPIP_WC_REMOTE_ACCESS: u32 = 7;
/// iWARP: the connection ended with a Terminate for another error.
pub const QPIP_WC_REMOTE_OPERATION: u32 = 8;
pub const QPIP_WC_OTHER: u32 = 255;
/// Set in a completion's `detail` when it carries the Terminate that ended an iWARP
/// connection: then bit 24 says the peer sent it, bits 16-19 hold its layer, 8-11 its error
/// type and 0-7 its code (RFC 5040 section 7).
pub const QPIP_DETAIL_TERMINATE: u32 = 1 << 31;
/// A completion's `detail` (with QPIP_WC_LOCAL_PROTECTION): the memory region the work
/// request lay in was deregistered while the device held the request; the QP is in error.
pub const QPIP_DETAIL_REGION_GONE: u32 = 9;

/// Event kinds (qpip_event.kind).
pub const QPIP_EVENT_ACCEPT: u32 = 1;
pub const QPIP_EVENT_CONNECT: u32 = 2;
pub const QPIP_EVENT_CLOSE: u32 = 3;
pub const QPIP_EVENT_QP_ERROR: u32 = 4;
pub const QPIP_EVENT_PEER_CLOSED: u32 = 5;
pub const QPIP_EVENT_LOST: u32 = 6;
pub const QPIP_EVENT_OTHER: u32 = 255;

/// qpip_post_send() flags: carry `imm` (TCP message framing only).
pub const QPIP_SEND_IMM: u32 = 1;
/// qpip_post_send() flags: a Send with Solicited Event (iWARP only): the peer's receive
/// completion has `solicited` set.
pub const QPIP_SEND_SOLICITED: u32 = 2;

/// qpip_mr_alloc_remote() rights: peers of iWARP QPs may RDMA Read the region.
pub const QPIP_ACCESS_REMOTE_READ: u32 = 1;
/// qpip_mr_alloc_remote() rights: peers of iWARP QPs may RDMA Write the region.
pub const QPIP_ACCESS_REMOTE_WRITE: u32 = 2;

/// qpip_mpa.flags: ask for a CRC on every FPDU (it is on when either end asks).
pub const QPIP_MPA_CRC: u32 = 1;
/// qpip_mpa.flags, initiator: ask for peer-to-peer mode, so the responder may send first.
pub const QPIP_MPA_PEER_TO_PEER: u32 = 2;
/// Offer RFC 7306 Immediate Data to a qpip peer (see the library's `Mpa::immediate`).
pub const QPIP_MPA_IMMEDIATE: u32 = 4;
/// Most private data this end sends in the MPA exchange (qpip_mpa.pd_len): 256 bytes
/// with MPA's 4-byte IRD/ORD block, the most Linux's soft-iWARP accepts.
pub const QPIP_MPA_MAX_PRIVATE_DATA: u16 = 252;
/// Largest IRD and ORD (qpip_mpa.ird, .ord).
pub const QPIP_MPA_MAX_IRD_ORD: u8 = 32;
/// Most private data a peer may send (MPA's limit): the room in qpip_conn_info.
pub const QPIP_MPA_MAX_PEER_PRIVATE_DATA: usize = 512;

// ---- plain C types -------------------------------------------------------------------------

/// An IPv6 address and port (host byte order).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct qpip_addr {
    pub addr: [u8; 16],
    pub port: u16,
}

/// `len` bytes at `offset` in a memory region.
#[repr(C)]
pub struct qpip_sge {
    pub mr: *const qpip_mr,
    pub offset: usize,
    pub len: usize,
}

/// One completed work request.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct qpip_completion {
    pub wr_id: u64,
    /// The QP (qpip_qp_id()).
    pub qp: u32,
    /// QPIP_OP_*.
    pub opcode: u32,
    /// QPIP_WC_*.
    pub status: u32,
    /// Which check failed, for error completions (the device's detail code).
    pub detail: u32,
    pub byte_len: u32,
    /// TCP message framing: the sender's immediate data.
    pub imm: u32,
    /// UDP receives: 1 and the sender in `src`.
    pub has_src: u32,
    pub src: qpip_addr,
    /// iWARP receives: 1 when the Send asked for a solicited event (QPIP_SEND_SOLICITED).
    pub solicited: u32,
    /// QPIP_OP_TRIPWIRE: the address of the first byte of the watched range written.
    pub addr: u64,
}

/// A connection event.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct qpip_event {
    /// QPIP_EVENT_*.
    pub kind: u32,
    /// 0 or a negative errno.
    pub status: i32,
    pub qp: u32,
    /// 1 and the peer in `peer` for a successful accept or connect.
    pub has_peer: u32,
    pub user_data: u64,
    pub peer: qpip_addr,
}

/// Where an RDMA Write or Read goes in the peer's memory: an address inside one of its
/// regions and that region's rkey (qpip_mr_remote() on the peer's side, sent over by the
/// application).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct qpip_remote {
    pub addr: u64,
    pub rkey: u32,
}

/// What this end brings to an iWARP connection's setup (MPA); qpip_mpa_init() fills in
/// the defaults.
#[repr(C)]
pub struct qpip_mpa {
    /// `pd_len` bytes for the peer's application (NULL when `pd_len` is 0); copied by the
    /// call that takes this.
    pub private_data: *const u8,
    /// At most QPIP_MPA_MAX_PRIVATE_DATA.
    pub pd_len: u16,
    /// RDMA Read Requests this end serves at once (at most QPIP_MPA_MAX_IRD_ORD).
    pub ird: u8,
    /// RDMA Reads this end keeps outstanding (at most QPIP_MPA_MAX_IRD_ORD).
    pub ord: u8,
    /// QPIP_MPA_* bits.
    pub flags: u32,
}

/// A Terminate message that ended an iWARP connection (RFC 5040 section 7).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct qpip_terminate {
    /// The layer that found the error: 0 RDMAP, 1 DDP, 2 MPA (LLP).
    pub layer: u8,
    /// The error type within that layer.
    pub etype: u8,
    /// The error code.
    pub code: u8,
    /// 1: the peer sent it; 0: this end sent it, about the peer's error.
    pub received: u8,
}

/// What an iWARP connection's setup agreed (qpip_qp_conn_info()).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct qpip_conn_info {
    /// 1 when FPDUs carry a CRC.
    pub crc: u32,
    /// 1 in peer-to-peer mode.
    pub peer_to_peer: u32,
    /// 1 when the peer rejected the connection (its private data may say why).
    pub rejected: u32,
    /// 1 when both ends agreed to RFC 7306 Immediate Data (QPIP_MPA_IMMEDIATE).
    pub immediate: u32,
    /// RDMA Read Requests this end serves at once.
    pub ird: u16,
    /// RDMA Reads this end keeps outstanding.
    pub ord: u16,
    /// The MPA revision (1 or 2).
    pub revision: u32,
    /// 1 when a Terminate ended the connection: then `terminate` holds it.
    pub has_terminate: u32,
    pub terminate: qpip_terminate,
    /// Bytes of the peer's private data in `private_data`.
    pub pd_len: u16,
    pub private_data: [u8; QPIP_MPA_MAX_PEER_PRIVATE_DATA],
}

/// Opaque handles.
pub struct qpip_context {
    _private: [u8; 0],
}
pub struct qpip_mr {
    _private: [u8; 0],
}
pub struct qpip_cq {
    _private: [u8; 0],
}
pub struct qpip_qp {
    _private: [u8; 0],
}
pub struct qpip_listener {
    _private: [u8; 0],
}
pub struct qpip_tripwire {
    _private: [u8; 0],
}
