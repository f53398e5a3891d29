//! Completion queue entries: what the device writes into a CQ ring.
//!
//! Each entry is [`CQE_SIZE`] bytes. The device writes the whole entry, then a release
//! barrier, then `owner` last, whose bit 0 is the phase: 1 on the first pass through the ring,
//! 0 on the second, and so on. A consumer polls `owner` of the slot it expects next; when its
//! phase bit matches the current pass, the entry is complete (read the rest after an acquire
//! barrier). After consuming, the consumer advances `cq_head` in its doorbell page (see
//! [`crate::doorbell`]); the device never writes a slot the consumer has not released.
//!
//! Every work request completes with exactly one CQE, success or error, in the order the
//! WRs were posted on their queue.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Size of one CQE slot.
pub const CQE_SIZE: u32 = 64;

/// The phase (bit 0 of `owner`) that marks the CQE of free-running index `index` as
/// written, in a ring of `depth` entries (a power of two): 1 on even passes through the
/// ring, 0 on odd ones. The device writes it; a consumer compares it. A shift, not a
/// division: under TCG a guest's division is a call into the emulator, and a consumer
/// computes this for every completion it polls.
pub const fn phase(index: u32, depth: u32) -> u8 {
    debug_assert!(depth.is_power_of_two());
    ((index >> depth.trailing_zeros()) & 1 ^ 1) as u8
}

/// A completion (64 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct Cqe {
    /// The `wr_id` of the completed work request.
    pub wr_id: u64,
    /// Bytes sent, or bytes placed into the receive buffers. For a receive that did not fit
    /// ([`CQE_STATUS_LOCAL_LENGTH`]), the size of what arrived.
    pub byte_len: u32,
    /// The QP the work request was posted on.
    pub qp: u32,
    /// Immediate data from the sender (receives).
    pub imm_data: u32,
    /// Receives on UDP QPs: the sender's port, host order.
    pub src_port: u16,
    /// [`CQE_OP_SEND`] or [`CQE_OP_RECV`].
    pub opcode: u8,
    /// One of the `CQE_STATUS_*` codes.
    pub status: u8,
    /// Receives on UDP QPs: the sender's address, network order.
    pub src_addr: [u8; 16],
    /// For errors: which check failed (a `CQE_DETAIL_*` code), to make errors explainable.
    pub detail: u32,
    pub reserved: [u8; 19],
    /// Bit 0: phase. Written last.
    pub owner: u8,
}

/// Completion of a send WR.
pub const CQE_OP_SEND: u8 = 0x01;
/// Completion of a receive WR.
pub const CQE_OP_RECV: u8 = 0x02;
/// Completion of an RDMA Write WR (iWARP QPs).
pub const CQE_OP_RDMA_WRITE: u8 = 0x03;
/// Completion of an RDMA Read WR (iWARP QPs).
pub const CQE_OP_RDMA_READ: u8 = 0x04;
/// Completion of a receive WR that an RFC 7306 Immediate Data message took (iWARP QPs):
/// `imm_data` holds it, `byte_len` is 0 (the Write before it placed its bytes itself).
pub const CQE_OP_RECV_IMM: u8 = 0x05;
/// Raw QPs, receives (in `imm_data`): the device checked the frame's IPv4 header checksum
/// (if IPv4) and its TCP or UDP checksum, and both were right (Linux's
/// `CHECKSUM_UNNECESSARY`). Without it nothing was checked.
pub const CQE_RAW_RX_CSUM_OK: u32 = 1 << 0;
/// Raw QPs with `admin::RAW_RX_MERGEABLE`, receives (in `imm_data`): the frame goes on
/// in the next receive WQE's buffer (its next CQE).
pub const CQE_RAW_RX_MORE: u32 = 1 << 1;
/// Raw QPs with `admin::RAW_RX_MERGEABLE`, a frame's last CQE (in `imm_data`): the frame
/// is a TCP over IPv4 super-frame; `src_port` holds its segment size.
pub const CQE_RAW_RX_GSO_TCPV4: u32 = 1 << 2;
/// As [`CQE_RAW_RX_GSO_TCPV4`], TCP over IPv6.
pub const CQE_RAW_RX_GSO_TCPV6: u32 = 1 << 3;
/// A tripwire fired (see `admin::CreateTripwireArgs`): not the completion of a WR.
pub const CQE_OP_TRIPWIRE: u8 = 0x10;

/// The work request completed.
pub const CQE_STATUS_SUCCESS: u8 = 0;
/// The data did not fit: a receive buffer too small (the datagram is dropped), or a send
/// larger than the QP allows.
pub const CQE_STATUS_LOCAL_LENGTH: u8 = 1;
/// Protection: unknown lkey, a region of another context, an address outside the region,
/// or a missing access right. Nothing was read or written.
pub const CQE_STATUS_LOCAL_PROTECTION: u8 = 2;
/// Unknown opcode, or an opcode that does not belong in this ring.
pub const CQE_STATUS_BAD_OPCODE: u8 = 3;
/// A malformed WQE: too many SGEs, inline data too long, unknown flags, reserved bits set.
pub const CQE_STATUS_BAD_WQE: u8 = 4;
/// The QP was destroyed or entered the error state before the WR was processed.
pub const CQE_STATUS_FLUSHED: u8 = 5;
/// The destination is not usable (UDP: unspecified or multicast address, port 0;
/// a QP that is not bound or not connected).
pub const CQE_STATUS_BAD_DEST: u8 = 6;
/// iWARP QPs: the peer refused an access to its memory (a Terminate reporting a
/// protection error: unknown rkey, out of bounds, missing right), or this device refused
/// one of the peer's. `detail` holds the Terminate's layer, type and code
/// ([`cqe_detail_terminate`]).
pub const CQE_STATUS_REMOTE_ACCESS: u8 = 7;
/// iWARP QPs: the connection ended with a Terminate for any other error; `detail` as for
/// [`CQE_STATUS_REMOTE_ACCESS`].
pub const CQE_STATUS_REMOTE_OPERATION: u8 = 8;

/// No detail.
pub const CQE_DETAIL_NONE: u32 = 0;
/// No memory region has this lkey.
pub const CQE_DETAIL_BAD_LKEY: u32 = 1;
/// The region belongs to another context.
pub const CQE_DETAIL_OTHER_CONTEXT: u32 = 2;
/// The address range is not inside the region.
pub const CQE_DETAIL_OUT_OF_BOUNDS: u32 = 3;
/// The region lacks the access right the operation needs.
pub const CQE_DETAIL_ACCESS: u32 = 4;
/// The producer index ran more than the ring's depth ahead.
pub const CQE_DETAIL_BAD_INDEX: u32 = 5;
/// The destination is not reachable: not one of the device's own addresses, and the device
/// has no network link to send it on.
pub const CQE_DETAIL_NO_ROUTE: u32 = 6;
/// The QP is not bound to a local port (UDP), or not connected (TCP).
pub const CQE_DETAIL_NOT_BOUND: u32 = 7;
/// The destination address or port is not usable (unspecified, multicast, port 0).
pub const CQE_DETAIL_BAD_ADDRESS: u32 = 8;
/// The WR's memory region was deregistered while the WR held it: the region is invalid at
/// once, so the WR fails (and its QP moves to the error state) instead of moving a byte to
/// or from pages the guest may have given to someone else.
pub const CQE_DETAIL_REGION_GONE: u32 = 9;
/// A successful receive on an iWARP QP: the Send asked for a solicited event (Send with
/// Solicited Event).
pub const CQE_DETAIL_SOLICITED: u32 = 1 << 30;
/// Set in `detail` when it carries a Terminate ([`cqe_detail_terminate`]).
pub const CQE_DETAIL_TERMINATE: u32 = 1 << 31;

/// The `detail` of a completion that a Terminate ended: [`CQE_DETAIL_TERMINATE`], then the
/// Terminate's layer (bits 16-19), error type (8-11) and code (0-7) of RFC 5040 §7, and
/// bit 24 when the peer sent it (else this device did).
pub const fn cqe_detail_terminate(layer: u8, etype: u8, code: u8, received: bool) -> u32 {
    CQE_DETAIL_TERMINATE
        | (received as u32) << 24
        | ((layer & 0x0f) as u32) << 16
        | ((etype & 0x0f) as u32) << 8
        | code as u32
}
