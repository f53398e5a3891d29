//! Work queue entries: what the library writes into a QP's send and receive rings.
//!
//! Every entry is [`WQE_SIZE`] bytes: a [`Wqe`] header followed by up to [`MAX_SGE`]
//! scatter/gather entries ([`Sge`]), or, for an inline send, up to [`MAX_INLINE`] bytes of
//! data in place of the SGEs. Data is named by (lkey, virtual address, length) inside a
//! registered memory region of the QP's own context; the device checks the lkey, the context,
//! the bounds and the access right before moving a byte, and completes the WR with
//! [`crate::cqe::CQE_STATUS_LOCAL_PROTECTION`] otherwise.
//!
//! The device reads an entry after it sees the producer index pass it (see
//! [`crate::doorbell`]) and copies it before acting on it: changing an entry after ringing
//! the doorbell has no defined effect but cannot hurt another QP.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Size of one WQE slot in a send or receive ring.
pub const WQE_SIZE: u32 = 128;
/// Most scatter/gather entries in one WQE.
pub const MAX_SGE: u32 = 5;
/// Most bytes of inline data in one send WQE (the SGE area).
pub const MAX_INLINE: u32 = 80;

/// Header of a WQE (48 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct Wqe {
    /// The caller's tag, returned unchanged in the CQE.
    pub wr_id: u64,
    /// [`WQE_OP_SEND`] in send rings, [`WQE_OP_RECV`] in receive rings.
    pub opcode: u8,
    /// `WQE_FLAG_*` bits.
    pub flags: u8,
    /// SGEs that follow (0..=[`MAX_SGE`]); 0 for inline sends.
    pub num_sge: u8,
    pub reserved0: u8,
    /// Immediate data carried to the receiver's CQE by TCP message framing. A UDP datagram
    /// has no room for it on the wire, so on UDP QPs it must be 0 (else
    /// [`crate::cqe::CQE_STATUS_BAD_WQE`]).
    pub imm_data: u32,
    /// Bytes of inline data (with [`WQE_FLAG_INLINE`]), at most [`MAX_INLINE`].
    pub inline_len: u32,
    pub reserved1: u32,
    /// UDP send: destination address, network order. RDMA Write and Read (iWARP QPs): the
    /// peer's region, as [`Wqe::remote`] reads it.
    pub dest_addr: [u8; 16],
    /// UDP send: destination port, host order.
    pub dest_port: u16,
    pub reserved2: [u8; 6],
}

/// A scatter/gather entry (16 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct Sge {
    /// Virtual address inside the memory region.
    pub addr: u64,
    /// Length in bytes (0 is allowed and moves nothing).
    pub length: u32,
    /// The region's lkey.
    pub lkey: u32,
}

/// Offset of the SGE array (or inline data) in a WQE slot.
pub const WQE_SGE_OFFSET: u32 = 48;

/// Send the gathered bytes (a UDP datagram, or a TCP message/stream chunk; on an iWARP QP
/// an RDMAP Send).
pub const WQE_OP_SEND: u8 = 0x01;
/// A receive buffer: the SGEs are filled with incoming data in order.
pub const WQE_OP_RECV: u8 = 0x02;
/// iWARP QPs: write the gathered (or inline) bytes into the peer's region at the remote
/// address and rkey of [`Wqe::remote`]. Completes when the peer acknowledged every byte.
/// With [`WQE_FLAG_IMM`], an RFC 7306 Immediate Data message carrying `imm_data` follows
/// the Write and completes the peer's next receive WR; else `imm_data` must be 0.
pub const WQE_OP_RDMA_WRITE: u8 = 0x03;
/// iWARP QPs: read the peer's region at [`Wqe::remote`] into the SGEs (their total length
/// is the read's size; never inline). Completes when the last byte has been placed.
/// `imm_data` must be 0.
pub const WQE_OP_RDMA_READ: u8 = 0x04;

/// The data is inline in the WQE, not in registered memory.
pub const WQE_FLAG_INLINE: u8 = 1 << 0;
/// iWARP QPs, `SEND` only: a Send with Solicited Event (the peer's CQE says so).
pub const WQE_FLAG_SOLICITED: u8 = 1 << 1;
/// iWARP QPs, `RDMA_WRITE` only: the Write is followed by `imm_data` in an RFC 7306
/// Immediate Data message (only on a connection both ends set up for it:
/// `admin::IWARP_CONN_IMMEDIATE`; else the WR completes `BAD_WQE`).
pub const WQE_FLAG_IMM: u8 = 1 << 2;
/// Raw QPs, `SEND` only: checksum offload as Linux's `CHECKSUM_PARTIAL`. The device sums
/// the frame from `csum_start` to its end (ones' complement, RFC 1071), adds the 16-bit
/// value already at `csum_start + csum_offset` (the pseudo-header sum the sender put there)
/// and stores the folded, complemented result there. See [`RawTxOffload`].
pub const WQE_FLAG_CSUM: u8 = 1 << 3;
/// Raw QPs, `SEND` only: the frame is a TCP super-segment (IPv4 or IPv6, no IP options or
/// extension headers) with a payload longer than one segment; the device cuts it into
/// segments of at most `mss` payload bytes, each with its own IP length, IPv4 id and
/// header checksum, TCP sequence number, flags (FIN and PSH on the last only, CWR on the
/// first only) and TCP checksum. Needs [`WQE_FLAG_CSUM`]. At most 65,535 bytes of IP
/// packet. See [`RawTxOffload`].
pub const WQE_FLAG_TSO: u8 = 1 << 4;

/// The lkey that names guest-physical memory: an SGE's `addr` is a guest-physical
/// address, checked against guest RAM, with no region. Only in WQEs of a context created
/// with [`crate::admin::CTX_FLAG_KERNEL`]; elsewhere it is an unknown lkey
/// ([`crate::cqe::CQE_DETAIL_BAD_LKEY`]). No memory region ever has this key.
pub const PHYS_LKEY: u32 = 0;

/// A raw QP's send offloads, in a send WQE's `dest_addr` (bytes 0-7, little-endian;
/// bytes 8-15 must be 0), read and set by [`Wqe::raw_offload`] and
/// [`Wqe::set_raw_offload`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RawTxOffload {
    /// [`WQE_FLAG_CSUM`]: where the checksummed part begins, from the frame's first byte
    /// (the L4 header: 14 + the IP header's length).
    pub csum_start: u16,
    /// [`WQE_FLAG_CSUM`]: where the checksum field is, from `csum_start` (16 for TCP, 6
    /// for UDP).
    pub csum_offset: u16,
    /// [`WQE_FLAG_TSO`]: payload bytes per segment (at least 88, and the segments must fit
    /// the MTU).
    pub mss: u16,
    /// [`WQE_FLAG_TSO`]: [`RAW_GSO_TCPV4`] or [`RAW_GSO_TCPV6`].
    pub gso_type: u8,
}

/// [`RawTxOffload::gso_type`]: a TCP over IPv4 super-segment.
pub const RAW_GSO_TCPV4: u8 = 1;
/// [`RawTxOffload::gso_type`]: a TCP over IPv6 super-segment.
pub const RAW_GSO_TCPV6: u8 = 2;

impl Wqe {
    /// RDMA Write and Read: the peer's region, as (remote address, rkey): bytes 0-7 and
    /// 8-11 of `dest_addr`, little-endian; bytes 12-15 must be 0.
    pub fn remote(&self) -> (u64, u32) {
        let d = &self.dest_addr;
        (
            u64::from_le_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]]),
            u32::from_le_bytes([d[8], d[9], d[10], d[11]]),
        )
    }

    /// Sets what [`Wqe::remote`] reads.
    pub fn set_remote(&mut self, addr: u64, rkey: u32) {
        self.dest_addr = [0; 16];
        self.dest_addr[..8].copy_from_slice(&addr.to_le_bytes());
        self.dest_addr[8..12].copy_from_slice(&rkey.to_le_bytes());
    }

    /// Raw QPs: the send offloads (bytes 0-6 of `dest_addr`), and whether the bytes after
    /// them are 0 as they must be.
    pub fn raw_offload(&self) -> (RawTxOffload, bool) {
        let d = &self.dest_addr;
        let o = RawTxOffload {
            csum_start: u16::from_le_bytes([d[0], d[1]]),
            csum_offset: u16::from_le_bytes([d[2], d[3]]),
            mss: u16::from_le_bytes([d[4], d[5]]),
            gso_type: d[6],
        };
        (o, d[7..].iter().all(|&b| b == 0))
    }

    /// Sets what [`Wqe::raw_offload`] reads.
    pub fn set_raw_offload(&mut self, o: RawTxOffload) {
        self.dest_addr = [0; 16];
        self.dest_addr[0..2].copy_from_slice(&o.csum_start.to_le_bytes());
        self.dest_addr[2..4].copy_from_slice(&o.csum_offset.to_le_bytes());
        self.dest_addr[4..6].copy_from_slice(&o.mss.to_le_bytes());
        self.dest_addr[6] = o.gso_type;
    }
}

/// A WQE slot as bytes: `h` as given (its `num_sge`, flags and lengths are not checked or
/// completed, so a test can build a malformed one), then `sges` at [`WQE_SGE_OFFSET`].
/// For tools and tests that build WQEs whole; the library writes them in place.
/// Panics if the SGEs do not fit the slot.
pub fn slot(h: &Wqe, sges: &[Sge]) -> [u8; WQE_SIZE as usize] {
    slot_with(h, sges.as_bytes())
}

/// As [`slot`], with `data` at [`WQE_SGE_OFFSET`] (an inline WQE's bytes). Panics if the
/// data does not fit the slot.
pub fn slot_with(h: &Wqe, data: &[u8]) -> [u8; WQE_SIZE as usize] {
    let mut b = [0u8; WQE_SIZE as usize];
    let hdr = h.as_bytes();
    b[..hdr.len()].copy_from_slice(hdr);
    let o = WQE_SGE_OFFSET as usize;
    b[o..o + data.len()].copy_from_slice(data);
    b
}

/// The header of one message in a TCP byte stream with [`crate::admin::FRAMING_MESSAGE`]
/// (8 bytes, both fields **little-endian** on the wire whatever the hosts' byte order).
///
/// Each send WR on a message-framed QP becomes exactly one message: this header, then the
/// WR's `length` bytes. The receiving device (or the software provider) parses the headers
/// out of the stream, so message boundaries and `imm_data` survive any segmentation:
/// - each message completes exactly one receive WR, with `byte_len` = `length` and the
///   CQE's `imm_data` = `imm_data` (a zero-length message completes a WR with 0 bytes);
/// - a message longer than the receive WR it lands in completes that WR with
///   [`crate::cqe::CQE_STATUS_LOCAL_LENGTH`] (`byte_len` = the message's length) and the
///   message's bytes are discarded; the stream stays in step and the next message goes to
///   the next WR.
///
/// Stream framing ([`crate::admin::FRAMING_STREAM`]) has no header: the bytes are the
/// stream, for peers that are plain sockets.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct MsgHeader {
    /// Bytes of the message that follow the header (little-endian).
    pub length: u32,
    /// The sender's `Wqe::imm_data` (little-endian).
    pub imm_data: u32,
}

/// Size of [`MsgHeader`] in the stream.
pub const MSG_HEADER_SIZE: u32 = 8;

const _: () = assert!(core::mem::size_of::<MsgHeader>() == MSG_HEADER_SIZE as usize);

impl MsgHeader {
    /// The header of a message of `length` bytes carrying `imm_data`.
    pub const fn new(length: u32, imm_data: u32) -> MsgHeader {
        MsgHeader { length, imm_data }
    }

    /// The header's bytes in the stream (little-endian, whatever this host's order).
    pub fn encode(&self) -> [u8; MSG_HEADER_SIZE as usize] {
        let mut b = [0u8; MSG_HEADER_SIZE as usize];
        b[..4].copy_from_slice(&self.length.to_le_bytes());
        b[4..].copy_from_slice(&self.imm_data.to_le_bytes());
        b
    }

    /// The header these stream bytes hold.
    pub fn decode(b: &[u8; MSG_HEADER_SIZE as usize]) -> MsgHeader {
        let [l0, l1, l2, l3, i0, i1, i2, i3] = *b;
        MsgHeader {
            length: u32::from_le_bytes([l0, l1, l2, l3]),
            imm_data: u32::from_le_bytes([i0, i1, i2, i3]),
        }
    }
}

/// Gathers a message header from a byte stream that arrives in pieces of any size (a
/// segment may end inside a header): the one deframing step every receiver of message
/// framing shares.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeaderReader {
    bytes: [u8; MSG_HEADER_SIZE as usize],
    have: usize,
}

impl HeaderReader {
    /// Takes header bytes from the front of `data`: returns how many it took and, once the
    /// header is whole, the header (the reader is then empty again, ready for the next).
    pub fn take(&mut self, data: &[u8]) -> (usize, Option<MsgHeader>) {
        let n = (self.bytes.len() - self.have).min(data.len());
        self.bytes[self.have..self.have + n].copy_from_slice(&data[..n]);
        self.have += n;
        if self.have < self.bytes.len() {
            return (n, None);
        }
        self.have = 0;
        (n, Some(MsgHeader::decode(&self.bytes)))
    }

    /// Bytes still missing from the header being read (all of it when none has begun).
    pub fn missing(&self) -> usize {
        self.bytes.len() - self.have
    }

    /// Whether part of a header has been read.
    pub fn partial(&self) -> bool {
        self.have > 0
    }
}
