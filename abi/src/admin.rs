//! The admin queue: privileged commands from the driver (the management state machine).
//!
//! # Rings
//!
//! Two rings in guest memory, set up through the registers in [`crate::regs`]
//! (`REG_ADMIN_*`): a submission ring of [`AdminCmd`] (64 bytes each) and a completion ring of
//! [`AdminCqe`] (32 bytes each), both `depth` entries, each physically contiguous.
//!
//! Submitting: write the command into slot `tail % depth`, release barrier, then write the new
//! `tail` (free-running) to [`crate::regs::REG_ADMIN_SQ_TAIL`]. The device reads each command
//! once, in order, and never looks at a slot again before the tail passes it anew.
//!
//! Completing: the device writes an [`AdminCqe`] into slot `n % depth` of the completion ring,
//! with its `phase` byte written last (after a release barrier). `phase` is 1 on the first pass
//! through the ring, 0 on the second, and so on: the driver knows an entry is new when its
//! phase matches the pass it expects, without reading any register. After consuming, the
//! driver writes its consumer count to [`crate::regs::REG_ADMIN_CQ_HEAD`]; the device stops
//! taking commands while the completion ring is full. Then it raises MSI-X vector 0.
//!
//! Completions may come **out of order**: most commands complete at once, but `ACCEPT`,
//! `CONNECT` and `CLOSE` complete when their network work is done (or is cancelled by the
//! destruction of the object, with [`ADMIN_STATUS_CANCELLED`]). `cmd_id` pairs a completion
//! with its command.
//!
//! # Ownership
//!
//! Every object (CQ, QP, MR, listener) belongs to one context. A command naming an object of
//! another context fails with [`ADMIN_STATUS_BAD_HANDLE`], exactly as if the object did not
//! exist. Destroying a context destroys everything in it (what a driver does when a process
//! exits). A driver fills `ctx` from its own records, never from what a process asks for.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Largest admin queue depth.
pub const ADMIN_MAX_DEPTH: u32 = 4096;

/// An admin command (64 bytes). `body` holds the command's arguments, laid out as the
/// `*Args` structure named in the opcode's documentation; unused bytes must be 0.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct AdminCmd {
    /// One of the `ADMIN_OP_*` opcodes.
    pub opcode: u16,
    /// Reserved, 0.
    pub flags: u16,
    /// Chosen by the driver, echoed in the completion.
    pub cmd_id: u32,
    /// The context the command acts in (object commands; 0 otherwise).
    pub ctx: u32,
    /// The object the command acts on (destroy, accept, ...; 0 otherwise).
    pub handle: u32,
    /// The command's arguments.
    pub body: [u8; 48],
}

/// An admin completion (32 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct AdminCqe {
    /// The `cmd_id` of the command this completes.
    pub cmd_id: u32,
    /// One of the `ADMIN_STATUS_*` codes.
    pub status: u16,
    /// The opcode of the command this completes.
    pub opcode: u16,
    /// First result (see each opcode), 0 on error.
    pub result0: u64,
    /// Second result (see each opcode), 0 on error.
    pub result1: u64,
    /// Third result (see each opcode), 0 on error.
    pub result2: u32,
    /// Reserved, 0.
    pub reserved: [u8; 3],
    /// Phase bit (bit 0), written last. See the module documentation.
    pub phase: u8,
}

// ---- opcodes ------------------------------------------------------------------------------

/// Write [`DeviceInfo`] to the guest buffer in [`QueryArgs`]. No results.
pub const ADMIN_OP_QUERY_DEVICE: u16 = 0x01;
/// Set the device's MAC address ([`SetMacArgs`]). No results.
pub const ADMIN_OP_SET_MAC: u16 = 0x02;
/// Add an IPv6 address ([`AddrArgs`]). No results.
pub const ADMIN_OP_ADD_ADDR: u16 = 0x03;
/// Remove an IPv6 address ([`AddrArgs`]). No results.
pub const ADMIN_OP_DEL_ADDR: u16 = 0x04;
/// Write [`Stats`] to the guest buffer in [`QueryArgs`]: its first `len / 8` counters, at
/// most [`STATS_COUNT`]. Result0: the number of counters written.
pub const ADMIN_OP_QUERY_STATS: u16 = 0x05;
/// Write [`AddrList`] (the link-local address and every configured address) to the guest
/// buffer in [`QueryArgs`]. Result0: the number of addresses written.
pub const ADMIN_OP_LIST_ADDRS: u16 = 0x06;
/// Ask for the next asynchronous event (the NVMe "asynchronous event request" model: events
/// need a command to complete, so they can never overrun the completion ring). No arguments;
/// `ctx` and `handle` 0. The command stays pending until the device has an event, then
/// completes with: result0 the context the event belongs to, result1 the object (a QP id),
/// result2 `ASYNC_EVENT_*` in bits 0-15, an `ASYNC_REASON_*` in bits 16-23, and
/// [`ASYNC_FLAG_LOST`] in bit 31 when events were dropped before this one. At most
/// [`MAX_ASYNC_REQUESTS`] may be pending ([`ADMIN_STATUS_NO_RESOURCES`] beyond). The device
/// queues at most [`ASYNC_EVENT_QUEUE`] events while no request is pending and drops (and
/// counts, [`STAT_ASYNC_EVENTS_LOST`]) the rest. Destroying a context discards its queued
/// events; pending requests belong to the device, not to a context: they never complete
/// without an event, and a reset (or setting up or disabling the admin queue) forgets them
/// without a completion, like every command still pending then.
pub const ADMIN_OP_ASYNC_EVENT: u16 = 0x07;

/// Create a context ([`CreateCtxArgs`]): the driver names the page of guest RAM that is to be
/// the context's doorbell page (see [`crate::doorbell`]). Result0: the context id.
pub const ADMIN_OP_CREATE_CTX: u16 = 0x10;
/// Destroy context `ctx` and every object in it. Pending commands on its objects complete
/// with [`ADMIN_STATUS_CANCELLED`]; outstanding work requests are dropped without CQEs (the
/// rings go away with the process).
pub const ADMIN_OP_DESTROY_CTX: u16 = 0x11;
/// Create a completion queue in `ctx` ([`CreateCqArgs`]). Result0: CQ id. Result1: its CQ
/// doorbell slot in the context's page, which the device has zeroed (`cq_head` and
/// `arm_seq` start at 0).
pub const ADMIN_OP_CREATE_CQ: u16 = 0x12;
/// Destroy CQ `handle`. Fails with [`ADMIN_STATUS_BUSY`] while a QP uses it.
pub const ADMIN_OP_DESTROY_CQ: u16 = 0x13;
/// Create a queue pair in `ctx` ([`CreateQpArgs`]). Result0: QP id. Result1: its QP doorbell
/// slot in the context's page, which the device has zeroed (both producer indices start at 0).
pub const ADMIN_OP_CREATE_QP: u16 = 0x14;
/// Destroy QP `handle`: outstanding work requests complete with
/// [`crate::cqe::CQE_STATUS_FLUSHED`]; a TCP connection is aborted (RST).
pub const ADMIN_OP_DESTROY_QP: u16 = 0x15;
/// Register memory in `ctx` ([`RegMrArgs`]). Result0: lkey. Result1: rkey (0 without a
/// remote access right).
pub const ADMIN_OP_REG_MR: u16 = 0x16;
/// Deregister the memory region whose lkey is `handle`.
pub const ADMIN_OP_DEREG_MR: u16 = 0x17;
/// Bind QP `handle` to a local address and port ([`BindArgs`]). Result0: the port bound
/// (an ephemeral one if 0 was asked for). [`ADMIN_STATUS_ADDR_IN_USE`] when a QP or
/// listener holds the port, or (since minor version 5, with `BindArgs::peer_port`) when a
/// connection from it to that peer is still held and a new one could not take it over.
pub const ADMIN_OP_BIND: u16 = 0x18;
/// Create a TCP listener in `ctx` ([`ListenArgs`]). Result0: listener id.
pub const ADMIN_OP_LISTEN: u16 = 0x19;
/// Destroy listener `handle`; pending accepts complete with [`ADMIN_STATUS_CANCELLED`].
pub const ADMIN_OP_DESTROY_LISTENER: u16 = 0x1a;
/// Offer idle TCP QP `AcceptArgs::qp` to listener `handle`. Completes when a connection has
/// been established on that QP. Result0/1: the peer's address (bytes 0-7, 8-15 in memory
/// order). Result2: the peer's port.
pub const ADMIN_OP_ACCEPT: u16 = 0x1b;
/// Connect TCP QP `handle` ([`ConnectArgs`]). Completes when established (results as for
/// accept) or failed ([`ADMIN_STATUS_REFUSED`], [`ADMIN_STATUS_TIMEOUT`],
/// [`ADMIN_STATUS_UNREACHABLE`] when an ICMP destination unreachable answered the SYN; a
/// peer that stays silent times out). A QP not bound gets an ephemeral port. After a failure (and
/// after a connection is reset or times out) the QP is in the error state: its work
/// requests complete [`crate::cqe::CQE_STATUS_FLUSHED`].
pub const ADMIN_OP_CONNECT: u16 = 0x1c;
/// Close TCP QP `handle` gracefully (FIN after all queued sends). Completes when the close
/// has been sent and acknowledged; if the connection is reset or times out first, with
/// [`ADMIN_STATUS_REFUSED`] or [`ADMIN_STATUS_TIMEOUT`]. [`ADMIN_STATUS_BAD_STATE`] if the QP
/// carries no connection (never connected, already closed, or in the error state).
/// Receiving continues until the peer closes: then, once every byte has been placed, each
/// receive WR completes with `byte_len` 0 (end of stream).
pub const ADMIN_OP_CLOSE: u16 = 0x1d;
/// Write [`ConnInfo`] of iWARP QP `handle` to the guest buffer in [`QueryArgs`].
/// [`ADMIN_STATUS_BAD_STATE`] for a QP of another framing or one whose connection is not
/// set up yet. No results.
pub const ADMIN_OP_QUERY_CONN: u16 = 0x1e;
/// Set an option of TCP QP `handle` ([`SetQpOptArgs`]), as `setsockopt` does for a socket.
/// An option set before the QP carries a connection applies to the one it gets (CONNECT or
/// ACCEPT); on a connection it takes effect at once. [`ADMIN_STATUS_BAD_PARAM`] for a UDP
/// QP, an unknown option or a value out of range. No results. Since minor version 2.
pub const ADMIN_OP_SET_QP_OPT: u16 = 0x1f;
/// Create a tripwire in `ctx` ([`CreateTripwireArgs`]): an event when data placed by the
/// network touches a range of a registered region while the tripwire is armed. Result0:
/// the tripwire's id. [`ADMIN_STATUS_NO_RESOURCES`] beyond [`MAX_TRIPWIRES`].
pub const ADMIN_OP_CREATE_TRIPWIRE: u16 = 0x20;
/// Destroy tripwire `handle`.
pub const ADMIN_OP_DESTROY_TRIPWIRE: u16 = 0x21;
/// Add a route ([`RouteArgs`]): destinations in `dest/prefix_len` that are not on-link go
/// to `gateway`, whose link-layer address the device resolves (ARP, NDP) as a neighbour's.
/// [`ADMIN_STATUS_BAD_PARAM`] for a malformed route (see [`RouteArgs`]);
/// [`ADMIN_STATUS_ADDR_IN_USE`] when a route with the same `dest`, `prefix_len` and
/// `metric` exists (delete it first to change its gateway); [`ADMIN_STATUS_NO_RESOURCES`]
/// beyond [`MAX_ROUTES`]. No results. Since minor version 3.
pub const ADMIN_OP_ADD_ROUTE: u16 = 0x22;
/// Delete the route with `dest`, `prefix_len` and `metric` of [`RouteArgs`] (`gateway` is
/// not compared). [`ADMIN_STATUS_BAD_HANDLE`] when there is none. No results. Since minor
/// version 3.
pub const ADMIN_OP_DEL_ROUTE: u16 = 0x23;
/// Add a static neighbour ([`NeighborArgs`]): packets to `addr` go to `mac` without ARP or
/// NDP, and the entry never ages out nor changes with what the link says, as `ip neigh add
/// ... nud permanent`. An entry for `addr` already there (static or learned) is replaced.
/// [`ADMIN_STATUS_BAD_PARAM`] for a malformed entry (see [`NeighborArgs`]);
/// [`ADMIN_STATUS_NO_RESOURCES`] when the function holds [`MAX_NEIGHBORS`] static entries
/// and `addr` is not one of them. No results. Since minor version 4.
pub const ADMIN_OP_ADD_NEIGH: u16 = 0x24;
/// Delete the static neighbour `addr` of [`NeighborArgs`] (`mac` is not compared): the
/// address is resolved again as any other (ARP, NDP). [`ADMIN_STATUS_BAD_HANDLE`] when
/// `addr` has no static entry. No results. Since minor version 4.
pub const ADMIN_OP_DEL_NEIGH: u16 = 0x25;
/// Write the next iWARP connection request held by listener `handle` (one made with
/// [`LISTEN_FLAG_IWARP_REQUESTS`]) to the guest buffer in [`QueryArgs`] as a
/// [`ConnRequest`] (`len` at least its size). Pending until a request is held, as an
/// `ACCEPT` waits for a connection; several may be pending, served in the order they came.
/// Result0: the request's id (non-zero), which an `ACCEPT` ([`AcceptArgs::request`]) or a
/// [`ADMIN_OP_REJECT`] answers. [`ADMIN_STATUS_BAD_STATE`] on a listener without the
/// flag; [`ADMIN_STATUS_CANCELLED`] when the listener is destroyed first. Since minor
/// version 7.
pub const ADMIN_OP_CONN_REQUEST: u16 = 0x26;
/// Reject iWARP connection request [`RejectArgs::request`] of listener `handle`: the MPA
/// reply goes out with the reject flag and the private data of [`RejectArgs::iwarp`], then
/// the connection is closed gracefully (reset if the peer does not finish the close in
/// time). The initiator's `CONNECT` fails with [`ADMIN_STATUS_REFUSED`], its `QUERY_CONN`
/// showing [`CONN_INFO_REJECTED`] and the private data. [`ADMIN_STATUS_BAD_HANDLE`] for a
/// request the listener does not hold (never handed out, answered already, or dropped
/// because its peer reset or closed the connection). No results. Since minor version 7.
pub const ADMIN_OP_REJECT: u16 = 0x27;

// ---- asynchronous events ------------------------------------------------------------------

/// Most `ASYNC_EVENT` requests pending at once.
pub const MAX_ASYNC_REQUESTS: u32 = 16;
/// Most events the device holds while no `ASYNC_EVENT` request is pending.
pub const ASYNC_EVENT_QUEUE: u32 = 256;
/// A TCP QP entered the error state on its own (not by a command): the connection was reset
/// by the peer or timed out. Its outstanding work requests complete
/// [`crate::cqe::CQE_STATUS_FLUSHED`]. Reason: [`ASYNC_REASON_PEER_RESET`],
/// [`ASYNC_REASON_TIMEOUT`] or [`ASYNC_REASON_UNREACHABLE`].
pub const ASYNC_EVENT_QP_ERROR: u16 = 1;
/// The peer of a TCP QP closed its direction (a FIN arrived and every byte before it has
/// been placed). Reason 0.
pub const ASYNC_EVENT_PEER_CLOSED: u16 = 2;
/// The function's link went up or down ([`crate::regs::STATUS_LINK_UP`] changed). A
/// device-level event, about no context: result0 (the context) is 0, which no context
/// has, and result1 is the link's state when the event was raised, 1 up or 0 down (reason
/// 0). It goes to whichever `ASYNC_EVENT` request is pending, like every event; a driver
/// reads [`crate::regs::REG_STATUS`] for the state now (events may have been lost, and a
/// link that flaps raises one per change). Since minor version 4.
pub const ASYNC_EVENT_LINK: u16 = 3;
/// The peer sent a reset.
pub const ASYNC_REASON_PEER_RESET: u8 = 1;
/// Retransmissions (or keepalives) went unanswered.
pub const ASYNC_REASON_TIMEOUT: u8 = 2;
/// An iWARP QP sent or received a Terminate (which one and why: [`ConnInfo`]).
pub const ASYNC_REASON_TERMINATE: u8 = 3;
/// A memory region the QP's WRs (or, on iWARP, a Read Response it served) lay in was
/// deregistered: the connection was reset, the WRs in the region completed
/// [`crate::cqe::CQE_STATUS_LOCAL_PROTECTION`] with [`crate::cqe::CQE_DETAIL_REGION_GONE`],
/// the others [`crate::cqe::CQE_STATUS_FLUSHED`].
pub const ASYNC_REASON_REGION_GONE: u8 = 4;
/// An ICMP destination unreachable answered the connection's SYN
/// ([`ADMIN_STATUS_UNREACHABLE`]).
pub const ASYNC_REASON_UNREACHABLE: u8 = 5;
/// Bit 31 of result2: events were dropped (queue full) before this one.
pub const ASYNC_FLAG_LOST: u32 = 1 << 31;

// ---- status codes -------------------------------------------------------------------------

/// Success.
pub const ADMIN_STATUS_OK: u16 = 0;
/// Unknown opcode, or non-zero reserved fields.
pub const ADMIN_STATUS_BAD_OPCODE: u16 = 1;
/// An argument is out of range (depth not a power of two, unknown QP type, ...).
pub const ADMIN_STATUS_BAD_PARAM: u16 = 2;
/// No such object in this context (including objects of other contexts).
pub const ADMIN_STATUS_BAD_HANDLE: u16 = 3;
/// A device limit was reached (contexts, QPs, CQs, MRs, listeners, addresses).
pub const ADMIN_STATUS_NO_RESOURCES: u16 = 4;
/// A guest address (page list, ring page, query buffer) is not in guest RAM or misaligned.
pub const ADMIN_STATUS_BAD_ADDRESS: u16 = 5;
/// The object is in use (a CQ with QPs or tripwires attached, a region a tripwire watches
/// or holds the arm word of).
pub const ADMIN_STATUS_BUSY: u16 = 6;
/// The address or port is already bound by another QP or listener; or (SET_MAC, ADD_ADDR)
/// the MAC or address is already the device's, or another function's on the same adapter.
pub const ADMIN_STATUS_ADDR_IN_USE: u16 = 7;
/// The command does not apply to the object in its current state (connect on a UDP QP,
/// accept on a connected QP, bind twice, ...).
pub const ADMIN_STATUS_BAD_STATE: u16 = 8;
/// The object the pending command waited on was destroyed.
pub const ADMIN_STATUS_CANCELLED: u16 = 9;
/// The peer refused the connection (RST in reply to SYN).
pub const ADMIN_STATUS_REFUSED: u16 = 10;
/// The peer did not answer.
pub const ADMIN_STATUS_TIMEOUT: u16 = 11;
/// The destination is unreachable: while the connection was being set up, an ICMP or
/// ICMPv6 destination unreachable (from a router on the path, or from the peer: no route,
/// host or port unreachable, administratively prohibited) quoted its SYN, as Linux ends a
/// `connect` with `EHOSTUNREACH` or `ECONNREFUSED`. Since minor version 3.
pub const ADMIN_STATUS_UNREACHABLE: u16 = 12;

// ---- argument bodies (each exactly 48 bytes) -----------------------------------------------

/// Arguments of `QUERY_DEVICE` and `QUERY_STATS`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct QueryArgs {
    /// Guest-physical address of the buffer the device writes (8-byte aligned, must not
    /// cross a page boundary).
    pub buf: u64,
    /// Size of the buffer; at least the size of the structure written (`QUERY_STATS`: at
    /// least 8, and it writes what fits).
    pub len: u32,
    pub reserved: [u8; 36],
}

/// Arguments of `CREATE_CTX`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct CreateCtxArgs {
    /// Guest-physical address of the context's doorbell page: 4 KiB, 4 KiB aligned, in
    /// guest RAM, zeroed by the driver, and the context's alone (the driver maps it into the
    /// owning process and nowhere else). The device polls it and writes only its
    /// `engine_sleeping` word, until the context is destroyed or the device reset; the
    /// driver must not free the page before then. A page that is not aligned or not in RAM
    /// fails the command with [`ADMIN_STATUS_BAD_ADDRESS`].
    pub doorbell_page: u64,
    /// `CTX_FLAG_*` bits; unknown bits fail the command with [`ADMIN_STATUS_BAD_PARAM`].
    pub flags: u32,
    pub reserved: [u8; 36],
}

/// The context is the driver's own, never a process's: its doorbell page is mapped into no
/// process, and every address its WQEs name is one the driver owns. Only a kernel context may
/// create a [`QP_TYPE_RAW_ETH`] QP, and only its WQEs may name guest-physical memory with
/// [`crate::wqe::PHYS_LKEY`]. The device cannot tell who wrote a command (every command comes
/// from the driver); the flag is the driver's promise, and the driver sets it only for the
/// contexts it makes for itself (the network interface's queues).
pub const CTX_FLAG_KERNEL: u32 = 1 << 0;

/// Arguments of `SET_MAC`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct SetMacArgs {
    /// A unicast MAC (the group bit must be clear).
    pub mac: [u8; 6],
    pub reserved: [u8; 42],
}

/// Arguments of `ADD_ADDR` and `DEL_ADDR`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct AddrArgs {
    /// A unicast IPv6 address, network byte order; an IPv4 address in its IPv4-mapped form
    /// `::ffff:a.b.c.d`.
    pub addr: [u8; 16],
    /// Prefix length, 1..=128 (ignored by `DEL_ADDR`); counted over the 128 bits for an
    /// IPv4-mapped address, so 97..=128 (an IPv4 /24 is 120).
    pub prefix_len: u8,
    pub reserved: [u8; 31],
}

/// Arguments of `CREATE_CQ`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct CreateCqArgs {
    /// Guest-physical address of the ring's page list: `npages` u64 page addresses, each
    /// 4 KiB aligned and in guest RAM. The list itself is contiguous and 8-byte aligned.
    pub page_list: u64,
    /// Number of pages: exactly enough for `depth` CQEs of [`crate::cqe::CQE_SIZE`] bytes.
    pub npages: u32,
    /// Ring depth in CQEs: a power of two, 2..=[`MAX_QUEUE_DEPTH`].
    pub depth: u32,
    /// MSI-X vector raised when the armed CQ gets a completion (1..vectors; 0 is the admin
    /// vector and is refused).
    pub vector: u32,
    pub reserved: [u8; 28],
}

/// Arguments of `CREATE_QP`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct CreateQpArgs {
    /// Page list of the send ring (as in [`CreateCqArgs`]), `sq_depth` WQEs of
    /// [`crate::wqe::WQE_SIZE`] bytes.
    pub sq_page_list: u64,
    /// Page list of the receive ring, `rq_depth` WQEs.
    pub rq_page_list: u64,
    /// CQ (of the same context) for send completions.
    pub send_cq: u32,
    /// CQ (of the same context) for receive completions; may be the same as `send_cq`.
    pub recv_cq: u32,
    /// Send ring depth: a power of two, 2..=[`MAX_QUEUE_DEPTH`].
    pub sq_depth: u32,
    /// Receive ring depth: a power of two, 2..=[`MAX_QUEUE_DEPTH`].
    pub rq_depth: u32,
    /// Pages in `sq_page_list`.
    pub sq_npages: u16,
    /// Pages in `rq_page_list`.
    pub rq_npages: u16,
    /// [`QP_TYPE_UDP`], [`QP_TYPE_TCP`] or (kernel contexts only) [`QP_TYPE_RAW_ETH`].
    pub qp_type: u8,
    /// [`FRAMING_MESSAGE`], [`FRAMING_STREAM`] or [`FRAMING_IWARP`] (TCP only; 0 for UDP
    /// and raw QPs).
    pub framing: u8,
    pub reserved: [u8; 10],
}

/// A UDP queue pair: datagrams.
pub const QP_TYPE_UDP: u8 = 1;
/// A TCP queue pair: a connection.
pub const QP_TYPE_TCP: u8 = 2;
/// A raw Ethernet queue pair: the function's own network interface in the guest kernel
/// (its netdev), beside the device's TCP/UDP/IPv6/IPv4 engine. At most one per function,
/// in a context created with [`CTX_FLAG_KERNEL`] (else [`ADMIN_STATUS_BAD_PARAM`]; a
/// second one: [`ADMIN_STATUS_BUSY`]). `framing` is its receive mode: 0, or
/// [`RAW_RX_MERGEABLE`] (minor version 3; an older device refuses it, BAD_PARAM).
///
/// - **Send WQEs** ([`crate::wqe::WQE_OP_SEND`]) gather one Ethernet frame (destination MAC
///   first, no FCS) from their SGEs, at most the link MTU + 14 bytes, or a TCP
///   super-segment with [`crate::wqe::WQE_FLAG_TSO`]; checksum offload with
///   [`crate::wqe::WQE_FLAG_CSUM`] (see [`crate::wqe::RawTxOffload`]). The frame passes the
///   same identity checks as the engine's own (the function's MAC and addresses) and goes to
///   the link; a frame that fails them, or is malformed, completes with
///   [`crate::cqe::CQE_STATUS_BAD_WQE`] and is counted in [`STAT_RAW_TX_REFUSED`].
///   A TCP segment or UDP datagram from one of the function's addresses and a port a QP
///   or listener of the function holds for that protocol is dropped (the port split: the
///   driver keeps kernel sockets off those ports, so such a frame is stale or forged and
///   would land in the QP's traffic at the peer) and counted in [`STAT_RAW_TX_PORT_HELD`];
///   its WR completes with success, as a NIC's filter drops a frame without failing its
///   sender. Only the first fragment of a fragmented datagram carries ports: it is the one
///   dropped, and the datagram is never reassembled.
/// - **Receive WQEs** name one buffer each; a received frame fills one buffer, and the
///   CQE's `byte_len` is the frame's length (from the destination MAC, no FCS), its
///   `imm_data` the `CQE_RAW_RX_*` bits. A frame longer than the buffer completes it with
///   [`crate::cqe::CQE_STATUS_LOCAL_LENGTH`] and is dropped. A TCP super-frame (another
///   function's TSO send through the switch, or what a link with receive offloads merged)
///   is cut into frames of at most the MTU first, each in a buffer of its own.
/// - **With [`RAW_RX_MERGEABLE`]** a frame may span several receive WQEs, taken in order
///   (as virtio-net's mergeable receive buffers): each gets a CQE with the bytes it holds;
///   all but the last have [`crate::cqe::CQE_RAW_RX_MORE`]. A TCP super-frame is then
///   handed over whole, with [`crate::cqe::CQE_RAW_RX_GSO_TCPV4`] or
///   [`crate::cqe::CQE_RAW_RX_GSO_TCPV6`] and, in `src_port`, the segment size it stands
///   for (what Linux keeps as `gso_size`) on its last CQE, which also carries
///   [`crate::cqe::CQE_RAW_RX_CSUM_OK`]. A frame is only started when enough WQEs are
///   posted for all of it (else it is dropped, [`STAT_RAW_RX_NO_WR`]), so a frame's
///   pieces are always consecutive. The driver then posts small buffers (a page each) and
///   takes a 64 KiB super-frame in 17 of them instead of 45 frames, as a NIC with LRO
///   hands its host one.
/// - **Steering**: the engine keeps what is its own (segments of its connections and
///   listeners, datagrams for its bound UDP ports, echo requests to its addresses) and gives
///   the raw QP everything else addressed to the function (its MAC, broadcast, multicast),
///   plus copies of ARP, NDP, ICMP errors and IP fragments, which both sides need. While a
///   raw QP exists the engine sends no RST and no port unreachable for what it does not
///   own: the guest kernel answers for its own ports. Without a posted buffer the frame is
///   dropped and counted ([`STAT_RAW_RX_NO_WR`]).
pub const QP_TYPE_RAW_ETH: u8 = 3;
/// [`QP_TYPE_RAW_ETH`]'s `framing`: frames may span receive WQEs, and TCP super-frames
/// arrive whole (see there).
pub const RAW_RX_MERGEABLE: u8 = 1;
/// TCP framing for QP-to-QP: each message carries a small header in the byte stream, so
/// message boundaries and immediate data survive any segmentation.
pub const FRAMING_MESSAGE: u8 = 1;
/// TCP framing for QP-to-socket: plain bytes; a receive WR completes when full or when a
/// pushed segment ends.
pub const FRAMING_STREAM: u8 = 2;
/// TCP framing for RDMA over TCP: iWARP (MPA, DDP and RDMAP; see the device documentation),
/// wire-compatible with other iWARP implementations.
pub const FRAMING_IWARP: u8 = 3;

/// Arguments of `SET_QP_OPT`: one option and its value.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct SetQpOptArgs {
    /// Which option: [`QP_OPT_KEEPALIVE`], [`QP_OPT_UDP_PEER`].
    pub option: u32,
    /// KEEPALIVE: seconds the connection may be idle before the first probe,
    /// 1..=[`KEEPALIVE_MAX_SECS`]; 0 turns keepalive off (then the other two are 0 too).
    pub keepalive_idle: u32,
    /// KEEPALIVE: seconds between unanswered probes, 1..=[`KEEPALIVE_MAX_SECS`].
    pub keepalive_interval: u32,
    /// KEEPALIVE: unanswered probes after which the connection times out (its QP goes to
    /// the error state with [`ASYNC_REASON_TIMEOUT`]), 1..=[`KEEPALIVE_MAX_PROBES`].
    pub keepalive_probes: u32,
    /// UDP_PEER: the peer's address (network order; all zero with port 0: no peer).
    pub peer_addr: [u8; 16],
    /// UDP_PEER: the peer's port (host order), 0 with no peer.
    pub peer_port: u16,
    pub reserved: [u8; 14],
}

/// TCP keepalive (RFC 9293 §3.8.4): probes sent on an idle connection find a peer that is
/// gone, and the connection times out instead of waiting forever. Off until set.
pub const QP_OPT_KEEPALIVE: u32 = 1;
/// A bound UDP QP's connected peer (since minor version 6; `peer_addr`, `peer_port`, the
/// keepalive fields 0): datagrams for its port from that peer come to this QP rather than
/// to another QP sharing the port ([`BIND_FLAG_SHARE_PORT`]), and while it has a peer it
/// gets no other source's datagrams (Linux's connected UDP socket). No peer (all zero)
/// undoes it. A TCP or unbound QP: BAD_STATE.
pub const QP_OPT_UDP_PEER: u32 = 2;
/// Largest keepalive idle time and interval, in seconds (Linux's `TCP_KEEPIDLE` bound).
pub const KEEPALIVE_MAX_SECS: u32 = 32767;
/// Most keepalive probes (Linux's `TCP_KEEPCNT` bound).
pub const KEEPALIVE_MAX_PROBES: u32 = 127;

/// Arguments of `REG_MR`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct RegMrArgs {
    /// Guest-physical address of the page list (u64 page addresses, 4 KiB aligned).
    pub page_list: u64,
    /// The virtual address the region starts at in the owning process: WQEs address the
    /// region's bytes as `iova .. iova + length`.
    pub iova: u64,
    /// Length in bytes, 1..=[`MAX_MR_PAGES`] pages' worth.
    pub length: u64,
    /// Pages in the list: exactly those covering `first_page_offset .. + length`.
    pub npages: u32,
    /// Offset of `iova` within the first page (`iova % 4096`).
    pub first_page_offset: u32,
    /// `MR_ACCESS_*` bits. Local read (the device gathering send data) is always allowed.
    pub access: u32,
    pub reserved: [u8; 12],
}

/// The device may write the region (receive buffers need this).
pub const MR_ACCESS_LOCAL_WRITE: u32 = 1 << 0;
/// A peer may write the region with RDMA Write (iWARP QPs of the same context).
pub const MR_ACCESS_REMOTE_WRITE: u32 = 1 << 1;
/// A peer may read the region with RDMA Read (iWARP QPs of the same context).
pub const MR_ACCESS_REMOTE_READ: u32 = 1 << 2;

/// Arguments of `CREATE_TRIPWIRE`.
///
/// The tripwire watches `len` bytes at virtual address `addr` of region `lkey`. It is armed
/// while the u32 **arm word** at virtual address `arm_addr` of region `arm_lkey` (4-byte
/// aligned; the owner writes it, the device only reads it) differs from the value it held
/// when the tripwire last fired (0 at creation: a new tripwire is disarmed until its owner
/// changes the word, typically by incrementing it). When data placed by the network — an
/// RDMA Write, a Read Response, a Send into a receive buffer, on an iWARP QP of the same
/// context — touches the range while it is armed, the device writes one completion to CQ
/// `cq`: opcode [`crate::cqe::CQE_OP_TRIPWIRE`], `wr_id` = `tag`, `qp` = the tripwire's
/// id, `byte_len` = the bytes of the range that placement wrote, and `src_addr` bytes 0-7
/// (little-endian) = the virtual address of the first of them; then it is disarmed. A
/// consumer that arms and then finds the data already there must not wait for the event
/// (arm, then look — as with a CQ).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct CreateTripwireArgs {
    pub addr: u64,
    pub len: u64,
    pub arm_addr: u64,
    pub lkey: u32,
    pub arm_lkey: u32,
    /// A CQ of the same context for the events (it cannot be destroyed while the tripwire
    /// lives).
    pub cq: u32,
    pub reserved: u32,
    /// Returned as the events' `wr_id`.
    pub tag: u64,
}

/// Most tripwires on the device.
pub const MAX_TRIPWIRES: u32 = 1024;

/// Arguments of `BIND`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct BindArgs {
    /// Local address (network order); all zeros binds every address of the device.
    pub addr: [u8; 16],
    /// Local port (host order); 0 asks for an ephemeral port.
    pub port: u16,
    /// A TCP QP about to CONNECT from a port its driver chose (the guest kernel's ephemeral
    /// port, not the program's): the peer (network order) and its port (host order), else
    /// all zero. The device then refuses (ADDR_IN_USE) a non-zero `port` from which it
    /// still holds a connection to this peer that CONNECT could not take over (TIME-WAIT
    /// without timestamps, or not closed yet), so that the driver can choose another port
    /// before anything fails, as Linux's connect does for an unbound socket. Since minor
    /// version 5 (an older device refuses them as reserved bytes: BAD_OPCODE); a peer
    /// address without a port, or not unicast, is BAD_PARAM.
    pub peer_addr: [u8; 16],
    pub peer_port: u16,
    /// [`BIND_FLAG_SHARE_PORT`] (since minor version 6), else 0.
    pub flags: u16,
    pub reserved: [u8; 10],
}

/// `BindArgs::flags`: the UDP QP may share its port with other UDP QPs of the same context
/// that were bound with this flag too (a socket's `SO_REUSEADDR` or `SO_REUSEPORT`, which
/// Linux asks of every socket on a shared port). A port held by a QP without it, or by
/// another context's QP, stays refused (ADDR_IN_USE); so does a port 0 (an ephemeral port
/// is never shared) and a TCP QP (BAD_PARAM). Datagrams for a shared port go to the QP
/// whose connected peer ([`QP_OPT_UDP_PEER`]) sent them, else to the first-bound QP that
/// has no peer.
pub const BIND_FLAG_SHARE_PORT: u16 = 1;

/// Arguments of `LISTEN`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ListenArgs {
    /// Local address (network order); all zeros listens on every address.
    pub addr: [u8; 16],
    /// Local port (host order), non-zero.
    pub port: u16,
    /// `LISTEN_FLAG_*` bits (since minor version 7; an unknown bit is
    /// [`ADMIN_STATUS_BAD_PARAM`]).
    pub flags: u16,
    /// Connections the device completes the handshake for before an accept takes them
    /// (with [`LISTEN_FLAG_IWARP_REQUESTS`]: connection requests it holds, read or being
    /// read, before they are answered).
    pub backlog: u32,
    pub reserved: [u8; 24],
}

/// `ListenArgs::flags`: the listener serves iWARP the way a CM's passive side does. Once
/// TCP is established the device reads each connection's MPA request itself (revision 1
/// or 2, RFC 6581's IRD/ORD block; markers are refused with a reject reply) and holds it;
/// [`ADMIN_OP_CONN_REQUEST`] hands the requests out, and each is answered by an `ACCEPT`
/// naming it ([`AcceptArgs::request`]) or by [`ADMIN_OP_REJECT`]. A plain `ACCEPT` on such
/// a listener is [`ADMIN_STATUS_BAD_STATE`]. A request that does not come within the
/// responder's MPA request timer, or is malformed, resets its connection
/// ([`STAT_IWARP_REQUESTS_DROPPED`]); beyond the backlog a new connection is reset
/// ([`STAT_IWARP_REQUESTS_OVERFLOW`]). Its requests may be accepted onto an iWARP QP of any
/// context of the function: which one is the driver's decision (it names the QP's context
/// in the `ACCEPT`). Since minor version 7.
pub const LISTEN_FLAG_IWARP_REQUESTS: u16 = 1;
/// Every `LISTEN_FLAG_*` bit.
pub const LISTEN_FLAGS: u16 = LISTEN_FLAG_IWARP_REQUESTS;

/// Arguments of `ACCEPT`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct AcceptArgs {
    /// An idle TCP QP of the command's context, to carry the accepted connection.
    pub qp: u32,
    /// Non-zero: the id of a connection request ([`ADMIN_OP_CONN_REQUEST`]) of listener
    /// `handle` (a [`LISTEN_FLAG_IWARP_REQUESTS`] one, of any context) that `qp`, an idle
    /// iWARP QP, answers. The ACCEPT completes once the MPA reply is out, as any iWARP
    /// ACCEPT. [`ADMIN_STATUS_BAD_HANDLE`] for a request the listener does not hold
    /// (answered already, or dropped: its peer reset or closed the connection);
    /// [`ADMIN_STATUS_BAD_STATE`] for a QP that is not an idle iWARP QP. Zero: a plain
    /// ACCEPT (the listener's context only). Since minor version 7.
    pub request: u32,
    /// iWARP QPs: the connection parameters of the MPA reply; all zero on other QPs.
    pub iwarp: IwarpConnArgs,
    pub reserved: [u8; 24],
}

/// Arguments of `CONNECT`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ConnectArgs {
    /// Remote address, network order.
    pub addr: [u8; 16],
    /// Remote port, host order.
    pub port: u16,
    pub reserved0: [u8; 6],
    /// iWARP QPs: the connection parameters of the MPA request; all zero on other QPs.
    pub iwarp: IwarpConnArgs,
    pub reserved: [u8; 8],
}

/// What an iWARP QP's `CONNECT` or `ACCEPT` brings to the MPA exchange (16 bytes; all zero
/// on QPs of other framings, else [`ADMIN_STATUS_BAD_PARAM`]).
///
/// The device reads the private data when it takes the command (the buffer may be freed
/// once the command completes), sends it after the enhanced IRD/ORD block of MPA revision
/// 2, and keeps the peer's for [`ADMIN_OP_QUERY_CONN`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct IwarpConnArgs {
    /// Guest-physical address of the private data (must not cross a page boundary); 0 when
    /// `pd_len` is 0.
    pub pd_addr: u64,
    /// Bytes of private data, 0..=[`IWARP_MAX_PRIVATE_DATA`].
    pub pd_len: u16,
    /// RDMA Read Requests this end serves at once (its IRD), 0..=[`IWARP_MAX_IRD_ORD`]; the
    /// connection gets the smaller of this and the peer's ORD.
    pub ird: u8,
    /// RDMA Reads this end keeps outstanding (its ORD), 0..=[`IWARP_MAX_IRD_ORD`]; the
    /// connection gets the smaller of this and the peer's IRD.
    pub ord: u8,
    /// `IWARP_CONN_*` bits.
    pub flags: u32,
}

/// Ask for CRC32c on every FPDU (it is on when either end asks).
pub const IWARP_CONN_CRC: u32 = 1 << 0;
/// Initiator: ask for peer-to-peer mode, so the responder may send first: after the reply
/// the device sends the ready-to-receive message the responder chose.
pub const IWARP_CONN_PEER_TO_PEER: u32 = 1 << 1;
/// Offer RFC 7306 Immediate Data (RDMA Write with immediate) to a qpip peer: an
/// initiator's device sets a reserved bit of the MPA request's header (0x01 of its flags
/// byte), a responder's device whose end offers too answers with another in its reply
/// (0x02). A peer that is not qpip ignores reserved bits (siw sends the request's back,
/// which is why the answer is another bit); the private data is the applications' either
/// way, and the connection goes on without immediate data (`ConnInfo` says which).
pub const IWARP_CONN_IMMEDIATE: u32 = 1 << 2;
/// Every `IWARP_CONN_*` bit.
pub const IWARP_CONN_FLAGS: u32 = IWARP_CONN_CRC | IWARP_CONN_PEER_TO_PEER | IWARP_CONN_IMMEDIATE;
/// Most private data an application sends (256 bytes with the 4-byte IRD/ORD block: the
/// most Linux's soft-iWARP accepts).
pub const IWARP_MAX_PRIVATE_DATA: u32 = 252;
/// Most private data a peer may send (MPA's limit); what [`ConnInfo`] holds.
pub const IWARP_MAX_PEER_PRIVATE_DATA: u32 = 512;
/// Largest IRD and ORD a connection may ask for.
pub const IWARP_MAX_IRD_ORD: u8 = 32;

/// Arguments of `ADD_ROUTE` and `DEL_ROUTE`.
///
/// A route is IPv4 when `dest` is IPv4-mapped (`::ffff:a.b.c.d`) with `prefix_len`
/// 96..=128 (counted over the 128 bits: an IPv4 /24 is 120, the IPv4 default route is
/// `::ffff:0.0.0.0`/96), else IPv6 (0..=128; the IPv6 default route is `::`/0); an IPv6
/// route never covers IPv4-mapped destinations. `dest` has no bits set beyond
/// `prefix_len`; `gateway` is a unicast address of the route's family (an IPv6 gateway
/// may be link-local).
///
/// The device chooses the next hop toward a destination as follows: the destination
/// itself when it is on-link (link-local, inside the prefix of one of the function's
/// addresses of its family, or a static neighbour); else the gateway of the route with the
/// longest prefix holding it, the lowest `metric` among equally long ones. Whether the
/// gateway is on-link is checked when the route is used, not when it is added (addresses
/// and routes may come in any order): a route whose gateway is not on-link at that moment
/// is passed over as if absent. No route: the send fails as before
/// ([`crate::cqe::CQE_DETAIL_NO_ROUTE`], [`STAT_NET_NO_ROUTE`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct RouteArgs {
    /// The destination prefix, network order.
    pub dest: [u8; 16],
    /// Its length, 0..=128 (96..=128 for an IPv4 route).
    pub prefix_len: u8,
    pub reserved0: [u8; 3],
    /// The next hop toward the prefix, network order (ignored by `DEL_ROUTE`).
    pub gateway: [u8; 16],
    /// Preference among routes of the same prefix length: lower wins.
    pub metric: u32,
    pub reserved: [u8; 8],
}

/// Most routes a function holds.
pub const MAX_ROUTES: u32 = 32;

/// Arguments of `ADD_NEIGH` and `DEL_NEIGH`.
///
/// `addr` is a unicast address: IPv6, or IPv4 in its mapped form (`::ffff:a.b.c.d`), not
/// unspecified, multicast, loopback or (IPv4) broadcast. `mac` is a unicast MAC, not all
/// zeros (checked by `ADD_NEIGH` only).
///
/// A static neighbour is on-link whatever its address (see [`RouteArgs`]; an IPv4 one only
/// while the function has an IPv4 address to send from). Static entries belong to the
/// function's network configuration like its routes: kept across `SET_MAC`, back to
/// those the device started with (`qpipd --neighbor`) after a reset.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct NeighborArgs {
    /// The neighbour's address, network order.
    pub addr: [u8; 16],
    /// Its link-layer address (ignored by `DEL_NEIGH`).
    pub mac: [u8; 6],
    pub reserved: [u8; 26],
}

/// Most static neighbours a function holds (those the device started with count too).
pub const MAX_NEIGHBORS: u32 = 64;

/// Arguments of `REJECT`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct RejectArgs {
    /// The id of the request ([`ADMIN_OP_CONN_REQUEST`]'s result0).
    pub request: u32,
    pub reserved0: u32,
    /// The reject reply's private data (`pd_addr`, `pd_len`); `ird`, `ord` and `flags`
    /// must be zero.
    pub iwarp: IwarpConnArgs,
    pub reserved: [u8; 24],
}

/// What `CONN_REQUEST` writes (64 + 512 = 576 bytes): an iWARP connection request a
/// listener holds, as the initiator's MPA request made it. Addresses in network order
/// (IPv4 in its mapped form), ports in host order.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ConnRequest {
    /// The request's id (result0 of the command), for `ACCEPT` or `REJECT`.
    pub request: u32,
    /// `CONN_REQUEST_*` bits.
    pub flags: u32,
    /// The initiator's address and port.
    pub peer_addr: [u8; 16],
    /// The address and port the initiator connected to.
    pub local_addr: [u8; 16],
    pub peer_port: u16,
    pub local_port: u16,
    /// The initiator's IRD and ORD (from RFC 6581's block; 0 without one).
    pub ird: u16,
    pub ord: u16,
    /// The request's MPA revision (1 or 2).
    pub mpa_revision: u8,
    pub reserved0: u8,
    /// Bytes of the initiator's private data in `private_data` (the IRD/ORD block not
    /// counted).
    pub pd_len: u16,
    pub reserved: [u8; 12],
    /// The initiator's private data.
    pub private_data: [u8; 512],
}

/// The initiator asked for CRC32c.
pub const CONN_REQUEST_CRC: u32 = 1 << 0;
/// The initiator asked for peer-to-peer mode.
pub const CONN_REQUEST_PEER_TO_PEER: u32 = 1 << 1;
/// The initiator is a qpip device offering RFC 7306 Immediate Data (its request's reserved
/// bit; an `ACCEPT` with [`IWARP_CONN_IMMEDIATE`] agrees to it).
pub const CONN_REQUEST_IMMEDIATE: u32 = 1 << 2;

/// What `QUERY_CONN` writes (32 + 512 = 544 bytes): an iWARP QP's connection as MPA set it
/// up. Valid once its `CONNECT` or `ACCEPT` has completed (successfully, or refused by a
/// reject reply: then `flags` has [`CONN_INFO_REJECTED`] and the peer's private data is
/// here), and kept until the QP is destroyed.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ConnInfo {
    /// `CONN_INFO_*` bits.
    pub flags: u32,
    /// The connection's IRD (Read Requests this end serves at once).
    pub ird: u16,
    /// The connection's ORD (Reads this end keeps outstanding).
    pub ord: u16,
    /// The MPA revision both ends use (1 or 2).
    pub mpa_revision: u8,
    pub reserved0: u8,
    /// Bytes of the peer's private data in `private_data` (the IRD/ORD block not counted).
    pub pd_len: u16,
    /// Why the QP left the connection: a Terminate sent or received, as layer (bits
    /// 12-15), error type (8-11) and error code (0-7) of RFC 5040; 0 if none.
    pub terminate: u32,
    pub reserved: [u8; 16],
    /// The peer's private data.
    pub private_data: [u8; 512],
}

/// CRC32c is on for the connection's FPDUs.
pub const CONN_INFO_CRC: u32 = 1 << 0;
/// Peer-to-peer mode was negotiated (a ready-to-receive message was exchanged).
pub const CONN_INFO_PEER_TO_PEER: u32 = 1 << 1;
/// Both ends are qpip devices that agreed to RFC 7306 Immediate Data.
pub const CONN_INFO_IMMEDIATE: u32 = 1 << 2;
/// The responder rejected the connection (the `CONNECT` failed with
/// [`ADMIN_STATUS_REFUSED`]).
pub const CONN_INFO_REJECTED: u32 = 1 << 3;
/// `terminate` is one the peer sent (else one this device sent).
pub const CONN_INFO_TERMINATE_RECEIVED: u32 = 1 << 4;

// ---- query results ------------------------------------------------------------------------

/// Deepest work or completion queue.
pub const MAX_QUEUE_DEPTH: u32 = 32768;
/// Most pages in one memory region's page list (256 MiB).
pub const MAX_MR_PAGES: u32 = 65536;
/// Most memory regions on the device.
pub const MAX_MRS: u32 = 4096;
/// Most listeners on the device.
pub const MAX_LISTENERS: u32 = 256;
/// Most IPv6 addresses configured on the device (besides the link-local one).
pub const MAX_ADDRS: u32 = 8;

/// One address in [`AddrList`] (24 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct AddrEntry {
    /// The address, network order.
    pub addr: [u8; 16],
    /// Its prefix length.
    pub prefix_len: u8,
    /// `ADDR_FLAG_*` bits.
    pub flags: u8,
    pub reserved: [u8; 6],
}

/// The address is the link-local one derived from the MAC.
pub const ADDR_FLAG_LINK_LOCAL: u8 = 1 << 0;

/// What `LIST_ADDRS` writes (8 + 24 × ([`MAX_ADDRS`] + 1) = 224 bytes): `count` entries
/// are valid, the link-local address first; the rest are zero.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct AddrList {
    pub count: u32,
    pub reserved: u32,
    pub entries: [AddrEntry; 9],
}

/// What `QUERY_DEVICE` writes (128 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct DeviceInfo {
    /// Interface version, as [`crate::regs::REG_VERSION`].
    pub version: u32,
    /// Contexts (= doorbell pages).
    pub max_contexts: u32,
    /// QPs per context.
    pub max_qps_per_context: u32,
    /// CQs per context.
    pub max_cqs_per_context: u32,
    /// Memory regions on the device.
    pub max_mrs: u32,
    /// Pages per memory region.
    pub max_mr_pages: u32,
    /// Deepest queue.
    pub max_queue_depth: u32,
    /// Scatter/gather entries per WQE.
    pub max_sge: u32,
    /// Bytes of inline data per send WQE.
    pub max_inline: u32,
    /// Largest UDP payload in one send.
    pub max_udp_payload: u32,
    /// Listeners on the device.
    pub max_listeners: u32,
    /// MTU of the link.
    pub mtu: u32,
    /// The current MAC.
    pub mac: [u8; 6],
    pub reserved0: [u8; 2],
    /// Reserved, 0.
    pub reserved1: [u8; 72],
}

/// What `QUERY_STATS` writes: [`STATS_COUNT`] u64 counters, each at the index named by a
/// `STAT_*` constant. Counters only grow (until reset).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct Stats {
    pub counters: [u64; 96],
}

/// Number of counters in [`Stats`]. `QUERY_STATS` writes the first `len / 8` of them (at
/// most this many) and returns the number written in result0, so a buffer sized for an
/// older, shorter [`Stats`] still works.
pub const STATS_COUNT: u32 = 96;
/// Admin commands completed.
pub const STAT_ADMIN_COMMANDS: u32 = 0;
/// Admin commands completed with an error status.
pub const STAT_ADMIN_ERRORS: u32 = 1;
/// Doorbell pages found changed by the engine's scan.
pub const STAT_DOORBELLS: u32 = 2;
/// Kick register writes.
pub const STAT_KICKS: u32 = 3;
/// Times the engine went to sleep.
pub const STAT_SLEEPS: u32 = 4;
/// Send WQEs processed.
pub const STAT_SEND_WQES: u32 = 5;
/// Receive WQEs consumed.
pub const STAT_RECV_WQES: u32 = 6;
/// CQEs written.
pub const STAT_CQES: u32 = 7;
/// CQEs with an error status.
pub const STAT_CQE_ERRORS: u32 = 8;
/// Times a CQ was full and completions had to wait.
pub const STAT_CQ_FULL: u32 = 9;
/// CQ interrupts raised.
pub const STAT_CQ_INTERRUPTS: u32 = 10;
/// Protection failures (bad lkey, wrong context, bounds, access rights).
pub const STAT_PROTECTION_ERRORS: u32 = 11;
/// Doorbell values that were out of range (ring index more than depth ahead).
pub const STAT_BAD_DOORBELLS: u32 = 12;
/// UDP datagrams sent.
pub const STAT_UDP_TX: u32 = 13;
/// UDP datagrams delivered to a QP.
pub const STAT_UDP_RX: u32 = 14;
/// UDP datagrams dropped because the bound QP had no receive WR posted.
pub const STAT_UDP_RX_NO_WR: u32 = 15;
/// UDP datagrams dropped because no QP was bound to the destination port.
pub const STAT_UDP_RX_NO_PORT: u32 = 16;
/// UDP datagrams dropped because the bound QP's receive CQ was full.
pub const STAT_UDP_RX_CQ_FULL: u32 = 17;
/// Frames received from the link.
pub const STAT_NET_RX_FRAMES: u32 = 18;
/// Frames sent on the link.
pub const STAT_NET_TX_FRAMES: u32 = 19;
/// Received frames dropped, for any reason (each reason is counted at
/// [`STAT_NET_DROP_BASE`] + its index).
pub const STAT_NET_RX_DROPPED: u32 = 20;
/// ICMPv6 echo requests answered.
pub const STAT_NET_ECHO_REQUESTS: u32 = 21;
/// ICMPv6 errors sent (port unreachable, parameter problem ...).
pub const STAT_NET_ICMP_ERRORS_TX: u32 = 22;
/// Sends refused for want of a route (the destination is not on-link).
pub const STAT_NET_NO_ROUTE: u32 = 23;
/// IPv6 fragments received.
pub const STAT_NET_FRAGMENTS_RX: u32 = 24;
/// IPv6 packets reassembled from fragments.
pub const STAT_NET_REASSEMBLED: u32 = 25;
/// Next-hop address resolutions (NDP) that failed.
pub const STAT_NET_RESOLUTION_FAILED: u32 = 26;
/// Asynchronous events delivered (completed `ASYNC_EVENT` requests).
pub const STAT_ASYNC_EVENTS: u32 = 27;
/// Asynchronous events dropped because the device's event queue was full.
pub const STAT_ASYNC_EVENTS_LOST: u32 = 28;
// TCP counters outside 48..63 (that range is full).
/// TCP connections orphaned: their QP was destroyed after a graceful close and nothing
/// was left to lose, so they finish the close without it.
pub const STAT_TCP_ORPHANS: u32 = 29;
/// TCP connections that were to be orphaned, or were, and were reset instead: the device
/// held its maximum of orphans already, or new data arrived for an orphan.
pub const STAT_TCP_ORPHAN_ABORTS: u32 = 30;
/// iWARP: tagged FPDUs (RDMA Write and Read Response segments) placed into their region
/// before the bytes ahead of them in the stream had come (direct placement out of order).
pub const STAT_IWARP_OOO_PLACED: u32 = 31;
/// First of the per-reason drop counters, in this order: malformed, bad checksum, not for
/// us, not IPv6, unsupported next header, unknown option, routing header, bad source, bad
/// NDP, hop limit, looped, fragment overlap, bad fragment, reassembly failed, ignored, no
/// next header.
pub const STAT_NET_DROP_BASE: u32 = 32;
/// Number of per-reason drop counters.
pub const STAT_NET_DROP_REASONS: u32 = 16;

// TCP counters (the names follow RFC 4022's tcp group where one exists).
/// Connections opened by CONNECT (SYN sent).
pub const STAT_TCP_ACTIVE_OPENS: u32 = 48;
/// Connections opened by a listener (SYN received and answered).
pub const STAT_TCP_PASSIVE_OPENS: u32 = 49;
/// Connection attempts that failed (refused, timed out, reset before established).
pub const STAT_TCP_ATTEMPT_FAILS: u32 = 50;
/// Established (or closing) connections reset by the peer.
pub const STAT_TCP_ESTAB_RESETS: u32 = 51;
/// Segments received (valid checksum, for a local address).
pub const STAT_TCP_SEGS_IN: u32 = 52;
/// Segments sent, retransmissions included.
pub const STAT_TCP_SEGS_OUT: u32 = 53;
/// Segments retransmitted.
pub const STAT_TCP_RETRANS_SEGS: u32 = 54;
/// Resets sent.
pub const STAT_TCP_RSTS_OUT: u32 = 55;
/// Fast retransmits / recovery episodes entered (duplicate ACKs or SACK).
pub const STAT_TCP_FAST_RETRANSMITS: u32 = 56;
/// Retransmission timeouts that fired.
pub const STAT_TCP_RTO_TIMEOUTS: u32 = 57;
/// Segments that arrived out of order (placed or buffered ahead of the next expected byte).
pub const STAT_TCP_OOO_SEGS: u32 = 58;
/// Segments that carried only data already received.
pub const STAT_TCP_DUP_SEGS: u32 = 59;
/// Challenge ACKs sent (RFC 5961).
pub const STAT_TCP_CHALLENGE_ACKS: u32 = 60;
/// SYN cookies sent (the SYN backlog was full).
pub const STAT_TCP_SYN_COOKIES: u32 = 61;
/// SYNs or completed handshakes dropped by a listener (backlog full, bad cookie).
pub const STAT_TCP_LISTEN_DROPS: u32 = 62;
/// Connections dropped because retransmissions or keepalives went unanswered.
pub const STAT_TCP_TIMEOUTS: u32 = 63;
/// Frames the raw QP sent (a TSO super-segment counts once).
pub const STAT_RAW_TX_FRAMES: u32 = 64;
/// TSO super-segments the raw QP sent.
pub const STAT_RAW_TX_TSO: u32 = 65;
/// Raw send WQEs refused: a frame too long or too short, bad offload fields, or one that
/// failed the identity checks.
pub const STAT_RAW_TX_REFUSED: u32 = 66;
/// Frames given to the raw QP.
pub const STAT_RAW_RX_FRAMES: u32 = 67;
/// Frames for the raw QP dropped because no receive WQE was posted (or its CQ was full).
pub const STAT_RAW_RX_NO_WR: u32 = 68;
/// Frames for the raw QP dropped because they did not fit the posted buffer.
pub const STAT_RAW_RX_TOO_LONG: u32 = 69;
/// Frames given to the raw QP with [`crate::cqe::CQE_RAW_RX_CSUM_OK`].
pub const STAT_RAW_RX_CSUM_OK: u32 = 70;
/// Frames the raw QP sent that the device dropped: TCP or UDP from one of the function's
/// addresses and a port a QP or listener of the function holds for that protocol (the port
/// split, see [`QP_TYPE_RAW_ETH`]). Their WRs complete with success.
pub const STAT_RAW_TX_PORT_HELD: u32 = 71;
/// iWARP connection requests a [`LISTEN_FLAG_IWARP_REQUESTS`] listener dropped, resetting
/// the connection: no request within the MPA request timer, or one that is not a valid
/// MPA request. Since minor version 7.
pub const STAT_IWARP_REQUESTS_DROPPED: u32 = 72;
/// Connections such a listener reset because it held its backlog of requests already.
/// Since minor version 7.
pub const STAT_IWARP_REQUESTS_OVERFLOW: u32 = 73;
