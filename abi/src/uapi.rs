//! The interface between the guest driver (`qpip.ko`) and the processes that use it: the
//! ioctls of `/dev/qpipN`, their argument structures, the events a process reads from its
//! file, and the `mmap` offsets. The verbs library uses these definitions directly; the driver
//! includes `guest-driver/include/uapi/qpip.h`, which is generated from this file alone
//! (`abi/tests/uapi_header.rs`, `abi/cbindgen-uapi.toml`) so both always agree.
//!
//! # The model
//!
//! Each `open` of `/dev/qpipN` is a *context* on the device, with a doorbell page of its own.
//! Every object a process creates through the file (completion queues, queue pairs, memory
//! regions, listeners, tripwires) belongs to that context, and closing the file (or the process dying)
//! destroys them all in the device, unpins the memory and frees the rings. Handles are the
//! device's object numbers; a handle of another context is refused with `ENOENT`, exactly
//! as if it did not exist.
//!
//! # Arguments
//!
//! Every ioctl takes a pointer to a structure whose first field, `size`, holds the size of
//! the structure as the caller knows it. The driver accepts any `size` from the first
//! version of the structure (the size in this file when it was introduced, listed by
//! `*_SIZE_V1`) up to [`MAX_ARG_SIZE`](crate::uapi::MAX_ARG_SIZE): bytes the driver does not know must be zero (else
//! `E2BIG`), fields the caller does not know read as zero, and the driver writes back at
//! most `size` bytes. So structures grow at the end without breaking old callers or old
//! drivers. Reserved fields must be zero (else `EINVAL`). The driver matches an ioctl by its
//! type and number only; the size bits of the number are those of the first version.
//!
//! # mmap
//!
//! A process maps only what its own context owns, at offsets the driver hands out:
//! [`QueryDevice::doorbell_offset`](crate::uapi::QueryDevice::doorbell_offset) (the context's doorbell page, see [`crate::doorbell`]),
//! [`QueryDevice::kick_offset`](crate::uapi::QueryDevice::kick_offset) (the kick register page, see [`crate::regs::KICK_PAGE_OFFSET`])
//! and the ring offsets returned by [`IOCTL_CREATE_CQ`](crate::uapi::IOCTL_CREATE_CQ) and [`IOCTL_CREATE_QP`](crate::uapi::IOCTL_CREATE_QP). Any other
//! offset, another context's offset, or a length other than the object's fails with `EINVAL`.
//! The rings are ordinary memory shared with the device; the mapping stays valid until it
//! is unmapped, even after the object is destroyed (the device no longer uses it then).
//!
//! # Locked memory
//!
//! Registered regions (pinned pages of the process) and rings (pages the driver allocates
//! for the process) are memory the device may access at any time: both count in the
//! process's locked memory against `RLIMIT_MEMLOCK` (`ENOMEM` beyond it), unless it has
//! `CAP_IPC_LOCK`.
//!
//! # Events
//!
//! A completion queue created with an eventfd signals it each time the device raises the
//! CQ's interrupt, which it does once per arming (see [`crate::doorbell::DB_CQ_ARM_SEQ`]), so
//! a process blocks on many CQs and other files at once with `poll`/`epoll`. Connection
//! events (accept and connect complete, a close is acknowledged) are [`Event`](crate::uapi::Event) records that
//! the process `read`s from its `/dev/qpipN` file; the file polls readable while one is
//! queued. After the device was removed or reset, every call on the file fails with
//! `ENODEV` and `poll` reports `POLLERR`.

use core::net::{Ipv6Addr, SocketAddrV6};

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Version of this interface. Grows when something is added; existing structures only ever
/// grow at the end.
pub const UAPI_VERSION: u32 = 8;

/// The `type` byte of every qpip ioctl number.
pub const IOCTL_TYPE: u32 = 0xc4;

/// Largest `size` the driver accepts in an argument structure.
pub const MAX_ARG_SIZE: u32 = 4096;

/// `_IOC` direction bits of a read-write ioctl (`_IOC_READ | _IOC_WRITE`).
pub const IOC_READ_WRITE: u32 = 3;

/// The Linux `_IOWR(IOCTL_TYPE, nr, size)` number, as the C macro computes it.
pub const fn iowr(nr: u32, size: usize) -> u32 {
    (IOC_READ_WRITE << 30) | ((size as u32) << 16) | (IOCTL_TYPE << 8) | nr
}

// ---- ioctl numbers ----------------------------------------------------------------------
// Literal numbers so the C header holds plain constants; `checks` below proves each one is
// `iowr(nr, size of the first version of its structure)`.

/// Describe the device and this file's context ([`QueryDevice`]).
pub const IOCTL_QUERY_DEVICE: u32 = 0xc058c400;
/// Create a completion queue ([`CreateCq`]). Its ring counts as locked memory.
pub const IOCTL_CREATE_CQ: u32 = 0xc030c401;
/// Destroy a completion queue ([`Handle`]). `EBUSY` while a QP or a tripwire uses it.
pub const IOCTL_DESTROY_CQ: u32 = 0xc008c402;
/// Create a queue pair ([`CreateQp`]). Its rings count as locked memory.
pub const IOCTL_CREATE_QP: u32 = 0xc040c403;
/// Destroy a queue pair ([`Handle`]): outstanding work completes as flushed.
pub const IOCTL_DESTROY_QP: u32 = 0xc008c404;
/// Register memory ([`RegMr`]): pins the pages (counted against `RLIMIT_MEMLOCK`).
pub const IOCTL_REG_MR: u32 = 0xc020c405;
/// Deregister memory ([`Handle`] holding the lkey): unpins the pages. `EBUSY` while a
/// tripwire watches the region or keeps its arm word there.
pub const IOCTL_DEREG_MR: u32 = 0xc008c406;
/// Bind a QP to a local address and port ([`Bind`]).
pub const IOCTL_BIND: u32 = 0xc020c407;
/// Create a TCP listener ([`Listen`]).
pub const IOCTL_LISTEN: u32 = 0xc020c408;
/// Destroy a listener ([`Handle`]); its pending accepts complete with `ECANCELED`.
pub const IOCTL_DESTROY_LISTENER: u32 = 0xc008c409;
/// Offer an idle TCP QP to a listener ([`Accept`]). Returns at once; the outcome is an
/// [`EVENT_ACCEPT`] event.
pub const IOCTL_ACCEPT: u32 = 0xc018c40a;
/// Connect a TCP QP ([`Connect`]). Returns at once; the outcome is an [`EVENT_CONNECT`]
/// event.
pub const IOCTL_CONNECT: u32 = 0xc028c40b;
/// Close a TCP connection gracefully ([`Close`]). Returns at once; the outcome is an
/// [`EVENT_CLOSE`] event.
pub const IOCTL_CLOSE: u32 = 0xc010c40c;
/// Read the device's counters ([`QueryStats`]).
pub const IOCTL_QUERY_STATS: u32 = 0xc208c40d;
/// Add an IPv6 address to the device ([`Addr`]). Needs `CAP_NET_ADMIN`.
pub const IOCTL_ADD_ADDR: u32 = 0xc018c40e;
/// Remove an IPv6 address from the device ([`Addr`]). Needs `CAP_NET_ADMIN`.
pub const IOCTL_DEL_ADDR: u32 = 0xc018c40f;
/// Set the device's MAC address ([`SetMac`]). Needs `CAP_NET_ADMIN`.
pub const IOCTL_SET_MAC: u32 = 0xc010c410;
/// What MPA set up for an iWARP QP ([`QueryConn`]): `EINVAL` before its connection is set
/// up or on a QP of another framing.
pub const IOCTL_QUERY_CONN: u32 = 0xc228c411;
/// Create a tripwire ([`CreateTripwire`]): an event on a CQ when data placed by the
/// network touches a range of a registered region while the tripwire is armed.
/// `ENOENT` when the CQ or a region is not this context's, `EINVAL` for a range or an arm
/// word the device refuses, `ENOSPC` beyond the device's tripwires. Version 3 of this
/// interface.
pub const IOCTL_CREATE_TRIPWIRE: u32 = 0xc038c412;
/// Destroy a tripwire ([`Handle`]): no event of it follows, and its CQ and regions may go.
pub const IOCTL_DESTROY_TRIPWIRE: u32 = 0xc008c413;
/// Set an option of a TCP QP ([`SetQpOpt`]), as `setsockopt` does for a socket: `EINVAL`
/// for a UDP QP, an unknown option or a value out of range; `EOPNOTSUPP` from a device
/// that predates the command. Version 4 of this interface.
pub const IOCTL_SET_QP_OPT: u32 = 0xc018c414;

// ---- sockets (version 5 of this interface) ----------------------------------------------
//
// A *qpip socket* is a file of its own (`anon_inode:[qpip-socket]`) that stands for one TCP
// socket whose connection the device carries: a QP in stream framing, its CQ and its
// buffers, all the driver's. `read`, `write`, `readv`, `writev`, `sendfile`, `splice`,
// `poll`/`select`/`epoll`, `fcntl(O_NONBLOCK)`, `ioctl(FIONBIO, FIONREAD, SIOCOUTQ)`,
// `dup`, `fork`, descriptor passing and `close` work on it as on a socket, without any
// help. What needs the socket calls (`send`/`recv` with flags, `accept`, `shutdown`,
// `getsockname`, `getsockopt`, ...) goes through the `IOCTL_SOCK_*` ioctls below on the
// socket's file, which is what the preload library (`libqpip-preload.so`) does.
//
// A qpip socket is made from a program's own kernel TCP socket at `connect` or `listen`
// ([`IOCTL_SOCK_CONNECT`], [`IOCTL_SOCK_LISTEN`] on a context's file): the new file keeps
// the kernel socket, which holds the port in the guest kernel (the port split), carries the
// socket options (every `setsockopt` is applied to it first, so values are checked and
// reported exactly as Linux does), and for a listener keeps listening for connections
// that do not come through the device (loopback, other interfaces), which `accept` hands
// out as ordinary kernel sockets.

/// Make a connecting qpip socket of a kernel TCP socket ([`SockConnect`]), on a context's
/// file. Declines (`new_fd` -1, `declined` a `SOCK_DECLINE_*`) what the device cannot
/// carry; the caller then goes on with the kernel socket.
pub const IOCTL_SOCK_CONNECT: u32 = 0xc030c415;
/// Make a listening qpip socket of a bound kernel TCP socket ([`SockListen`]), on a
/// context's file. The kernel socket listens too.
pub const IOCTL_SOCK_LISTEN: u32 = 0xc020c416;
/// Take a connection from a listening qpip socket ([`SockAccept`]): a qpip socket for one
/// that came through the device, the kernel socket for one that did not.
pub const IOCTL_SOCK_ACCEPT: u32 = 0xc098c417;
/// `send`/`sendmsg` with flags on a qpip socket ([`SockMsg`]).
pub const IOCTL_SOCK_SEND: u32 = 0xc020c418;
/// `recv`/`recvmsg` with flags on a qpip socket ([`SockMsg`]).
pub const IOCTL_SOCK_RECV: u32 = 0xc020c419;
/// `getsockname`/`getpeername` of a qpip socket ([`SockName`]).
pub const IOCTL_SOCK_NAME: u32 = 0xc090c41a;
/// `getsockopt`/`setsockopt` on a qpip socket ([`SockOpt`]).
pub const IOCTL_SOCK_OPT: u32 = 0xc020c41b;
/// `shutdown` of a qpip socket ([`SockShutdown`]).
pub const IOCTL_SOCK_SHUTDOWN: u32 = 0xc008c41c;

// ---- UDP sockets (version 6 of this interface) --------------------------------------------
//
// A UDP qpip socket is made from a program's kernel UDP socket (`AF_INET`, `AF_INET6`,
// `SOCK_DGRAM`) by [`IOCTL_SOCK_CONNECT`] (a peer routed through the device's interface)
// or [`IOCTL_SOCK_BIND`] (bound to the wildcard or one of the device's addresses). Its
// datagrams through the device go over a UDP QP bound to the kernel socket's port; the
// kernel socket stays inside it, holds the port, the options, the local and peer names,
// and carries the datagrams the device does not: those to destinations routed elsewhere
// (loopback, another interface) and those that arrive elsewhere. `read`/`write`/`poll`
// work on the file; [`IOCTL_SOCK_SEND`]/[`IOCTL_SOCK_RECV`] carry addresses
// ([`SockMsg::addr`]), [`IOCTL_SOCK_PEER`] is `connect` on the qpip socket.

/// Make a UDP qpip socket of a bound kernel UDP socket ([`SockBind`]), on a context's file.
pub const IOCTL_SOCK_BIND: u32 = 0xc018c41d;
/// `connect` on a UDP qpip socket ([`SockPeer`]): a peer, or `AF_UNSPEC` to forget it.
pub const IOCTL_SOCK_PEER: u32 = 0xc088c41e;

// ---- the user-level fast path (version 7 of this interface) --------------------------------
//
// A connected TCP qpip socket's data path can run in the process that made it, without a
// system call: [`IOCTL_SOCK_FASTPATH`] (`SOCK_FP_MAP`) says how long the socket's mapping
// is, and `mmap` of the socket's file (offset 0, `MAP_SHARED`, that length) maps, in this
// order: a [`SockShm`] page (the state the driver and the process share), the context's
// doorbell page, the CQ, the SQ, the RQ, the receive slots and the send ring. Only the
// process whose memory the socket's buffers are charged to may map it, once at a time;
// a fork (the mapping copied into a child) turns the fast path off for good
// ([`SOCK_SHM_SHARED`]). Whoever changes the indices holds [`SockShm::lock`]: the process
// takes it with a compare-and-swap from [`SOCK_SHM_UNLOCKED`] to [`SOCK_SHM_LOCKED_USER`]
// and never blocks or makes a system call while holding it; the driver takes it
// ([`SOCK_SHM_LOCKED_KERNEL`]) in every call on the socket, waits a bounded time for the
// process to let it go, and checks every index the process wrote against the rings'
// bounds (a socket whose indices are impossible fails with `EIO`).

/// The socket's fast path ([`SockFastpath`]): the mapping's length, or a kick of the engine.
pub const IOCTL_SOCK_FASTPATH: u32 = 0xc010c41f;

/// [`SockFastpath::op`]: fill in `map_len` (`EOPNOTSUPP`: not a connected TCP socket, or
/// not this process's; `EBUSY`: mapped already, or shared).
pub const SOCK_FP_MAP: u32 = 1;
/// [`SockFastpath::op`]: wake the engine (the process rang a doorbell and found
/// `engine_sleeping` set; the kick register is not mapped into processes through sockets).
pub const SOCK_FP_KICK: u32 = 2;

/// [`SockShm::lock`]: nobody holds it.
pub const SOCK_SHM_UNLOCKED: u32 = 0;
/// [`SockShm::lock`]: the process holds it.
pub const SOCK_SHM_LOCKED_USER: u32 = 1;
/// [`SockShm::lock`]: the driver holds it.
pub const SOCK_SHM_LOCKED_KERNEL: u32 = 2;

/// [`SockShm::flags`]: the process may receive in user space (connected, no error, no
/// end of data or shutdown known to the driver).
pub const SOCK_SHM_RX_OK: u32 = 1;
/// [`SockShm::flags`]: the process may send in user space (connected, no error, not shut
/// down, no `MSG_MORE` pending), holding bytes back while [`SockShm::cork`] is set.
pub const SOCK_SHM_TX_OK: u32 = 2;
/// [`SockShm::flags`]: someone waits on the socket (a blocked call, poll, an epoll set):
/// after moving the indices, the process arms the CQ ([`SockShm::cq_arm_seq`]) — for
/// solicited completions only ([`crate::doorbell::CQ_ARM_SOLICITED`]: receives and
/// errors), unless [`SOCK_SHM_TX_WAITERS`] is set too.
pub const SOCK_SHM_WAITERS: u32 = 4;
/// [`SockShm::flags`]: the mapping was copied into another process (fork): system calls
/// only, from then on.
pub const SOCK_SHM_SHARED: u32 = 8;
/// [`SockShm::flags`]: the driver turned the fast path off (it took the lock over from a
/// process that held it too long, or the indices were impossible).
pub const SOCK_SHM_OFF: u32 = 16;
/// [`SockShm::flags`] (version 8): someone waits for room to send (a blocked write, a
/// poll that found none): the process's arms are for any completion, so that the
/// acknowledgements that make room wake them.
pub const SOCK_SHM_TX_WAITERS: u32 = 32;

/// [`IOCTL_SOCK_FASTPATH`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct SockFastpath {
    pub size: u32,
    /// In: `SOCK_FP_MAP` or `SOCK_FP_KICK`.
    pub op: u32,
    /// Out (`SOCK_FP_MAP`): the length to map, bytes.
    pub map_len: u32,
    pub reserved: u32,
}
/// Size of the first version of [`SockFastpath`].
pub const SOCK_FASTPATH_SIZE_V1: u32 = 16;

/// The first page of a socket's mapping: its layout (written by the driver, never read
/// back) and its indices (the driver's while it holds `lock`, the process's while it does;
/// they mean what the driver's copies mean in `qpip_sock_io.c`). Byte offsets `off_*` are
/// from the start of the mapping, `db_*` from the start of the doorbell page.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct SockShm {
    /// `SOCK_SHM_UNLOCKED`, `SOCK_SHM_LOCKED_USER` or `SOCK_SHM_LOCKED_KERNEL`.
    pub lock: u32,
    /// `SOCK_SHM_*` flags, written by the driver when it lets the lock go.
    pub flags: u32,
    pub map_len: u32,
    pub cq_depth: u32,
    pub sq_depth: u32,
    /// Receive slots (the RQ's depth), each `rx_slot_bytes`.
    pub rx_slots: u32,
    pub rx_slot_bytes: u32,
    /// The send ring's bytes (a power of two).
    pub tx_bytes: u32,
    /// The most one send WR carries.
    pub tx_chunk: u32,
    /// The buffers' region.
    pub lkey: u32,
    pub db_cq_head: u32,
    pub db_cq_arm_seq: u32,
    pub db_sq_tail: u32,
    pub db_rq_tail: u32,
    pub off_db: u32,
    pub off_cq: u32,
    pub off_sq: u32,
    pub off_rq: u32,
    pub off_rx: u32,
    pub off_tx: u32,
    /// Where the receive slots and the send ring are in the region.
    pub iova_rx: u64,
    pub iova_tx: u64,
    /// CQEs consumed; the last arm sequence written to the doorbell.
    pub cq_head: u32,
    pub cq_arm_seq: u32,
    /// Receive WRs posted, completed with data, read whole; bytes read of slot `rx_read`.
    pub rq_tail: u32,
    pub rx_done: u32,
    pub rx_read: u32,
    pub rx_off: u32,
    /// The send ring: acknowledged, posted and copied-in ends; send WRs posted, completed.
    pub tx_head: u32,
    pub tx_posted: u32,
    pub tx_tail: u32,
    pub sq_tail: u32,
    pub sq_head: u32,
    /// The program's `TCP_CORK` (version 8), 1 or 0. The process may change it while it
    /// holds the lock (a `setsockopt` without a system call); whoever posts send WRs posts
    /// only whole `tx_chunk`s while it is 1, and everything copied in once it goes to 0.
    pub cork: u32,
    pub reserved: [u32; 12],
    /// Bytes completed into each receive slot (for WRs `rx_read..rx_done`).
    pub rx_len: [u16; 64],
}

// ---- argument structures ----------------------------------------------------------------

/// [`IOCTL_QUERY_DEVICE`]: everything is written by the driver.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct QueryDevice {
    /// In: size of this structure as the caller knows it.
    pub size: u32,
    /// [`UAPI_VERSION`] of the driver.
    pub uapi_version: u32,
    /// The device interface version (major << 16 | minor).
    pub abi_version: u32,
    /// This file's context number (= the index of its doorbell page).
    pub ctx: u32,
    /// mmap offset of the context's doorbell page (one page, read-write).
    pub doorbell_offset: u64,
    /// mmap offset of the kick register page (one page, write the kick register only).
    pub kick_offset: u64,
    /// Contexts the device has (= open files at once).
    pub max_contexts: u32,
    /// QPs per context.
    pub max_qps: u32,
    /// CQs per context.
    pub max_cqs: u32,
    /// Memory regions on the device.
    pub max_mrs: u32,
    /// Pages in one memory region.
    pub max_mr_pages: u32,
    /// Deepest queue, in entries.
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
    /// Completion vectors: CQ interrupts are spread over this many MSI-X vectors.
    pub comp_vectors: u32,
    /// The device's MAC address.
    pub mac: [u8; 6],
    pub reserved: [u8; 2],
}
/// Size of the first version of [`QueryDevice`].
pub const QUERY_DEVICE_SIZE_V1: u32 = 88;

/// [`IOCTL_CREATE_CQ`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct CreateCq {
    pub size: u32,
    /// In: entries, a power of two from 2 to the device's `max_queue_depth`.
    pub depth: u32,
    /// In: completion vector (0 .. `comp_vectors`), or [`ANY_VECTOR`] to let the driver
    /// choose the least used one.
    pub comp_vector: u32,
    /// In: an eventfd to signal when the CQ's interrupt arrives, or -1 for none (the process
    /// only polls the ring).
    pub eventfd: i32,
    /// Out: the CQ's handle.
    pub handle: u32,
    /// Out: the CQ's slot in the doorbell page (`cq_head` and `arm_seq`, see
    /// [`crate::doorbell::DB_CQ_BASE`]).
    pub db_slot: u32,
    /// Out: mmap offset of the ring (`depth` CQEs of [`crate::cqe::CQE_SIZE`] bytes).
    pub ring_offset: u64,
    /// Out: bytes to map at `ring_offset` (whole pages).
    pub ring_size: u64,
    /// Out: the completion vector chosen.
    pub comp_vector_out: u32,
    pub reserved: u32,
}
/// Size of the first version of [`CreateCq`].
pub const CREATE_CQ_SIZE_V1: u32 = 48;
/// [`CreateCq::comp_vector`]: any vector.
pub const ANY_VECTOR: u32 = 0xffff_ffff;

/// [`IOCTL_DESTROY_CQ`], [`IOCTL_DESTROY_QP`], [`IOCTL_DEREG_MR`],
/// [`IOCTL_DESTROY_LISTENER`], [`IOCTL_DESTROY_TRIPWIRE`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct Handle {
    pub size: u32,
    /// In: the object's handle (the lkey for a memory region).
    pub handle: u32,
}
/// Size of the first version of [`Handle`].
pub const HANDLE_SIZE_V1: u32 = 8;

/// [`IOCTL_CREATE_QP`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct CreateQp {
    pub size: u32,
    /// In: [`crate::admin::QP_TYPE_UDP`] or [`crate::admin::QP_TYPE_TCP`].
    pub qp_type: u8,
    /// In: TCP framing ([`crate::admin::FRAMING_MESSAGE`] or
    /// [`crate::admin::FRAMING_STREAM`]); 0 for UDP.
    pub framing: u8,
    pub reserved0: u16,
    /// In: CQ handle for send completions.
    pub send_cq: u32,
    /// In: CQ handle for receive completions (may be `send_cq`).
    pub recv_cq: u32,
    /// In: send ring entries, a power of two from 2 to `max_queue_depth`.
    pub sq_depth: u32,
    /// In: receive ring entries, a power of two from 2 to `max_queue_depth`.
    pub rq_depth: u32,
    /// Out: the QP's handle (also the `qp` of its CQEs).
    pub handle: u32,
    /// Out: the QP's slot in the doorbell page (`sq_tail`, `rq_tail`, see
    /// [`crate::doorbell::DB_QP_BASE`]).
    pub db_slot: u32,
    /// Out: mmap offset of the send ring (`sq_depth` WQEs of [`crate::wqe::WQE_SIZE`]).
    pub sq_offset: u64,
    /// Out: bytes to map at `sq_offset`.
    pub sq_size: u64,
    /// Out: mmap offset of the receive ring.
    pub rq_offset: u64,
    /// Out: bytes to map at `rq_offset`.
    pub rq_size: u64,
}
/// Size of the first version of [`CreateQp`].
pub const CREATE_QP_SIZE_V1: u32 = 64;

/// [`IOCTL_REG_MR`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct RegMr {
    pub size: u32,
    /// In: [`crate::admin::MR_ACCESS_LOCAL_WRITE`] and the other `MR_ACCESS_*` bits.
    pub access: u32,
    /// In: start of the region in the caller's address space (any alignment). WQEs name
    /// its bytes by these virtual addresses.
    pub addr: u64,
    /// In: length in bytes, at least 1, at most `max_mr_pages` pages' worth.
    pub length: u64,
    /// Out: the local key WQEs use.
    pub lkey: u32,
    /// Out: the remote key (0 without a remote access right).
    pub rkey: u32,
}
/// Size of the first version of [`RegMr`].
pub const REG_MR_SIZE_V1: u32 = 32;

/// An IPv6 address and a port: the local end of a [`Bind`] or a [`Listen`], the peer of
/// a [`Connect`]. `reserved` must be zero.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct Endpoint {
    /// The address, network order.
    pub addr: [u8; 16],
    pub port: u16,
    pub reserved: u16,
}

impl From<SocketAddrV6> for Endpoint {
    fn from(a: SocketAddrV6) -> Endpoint {
        Endpoint {
            addr: a.ip().octets(),
            port: a.port(),
            reserved: 0,
        }
    }
}

impl From<Endpoint> for SocketAddrV6 {
    fn from(e: Endpoint) -> SocketAddrV6 {
        SocketAddrV6::new(Ipv6Addr::from(e.addr), e.port, 0, 0)
    }
}

/// [`IOCTL_BIND`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct Bind {
    pub size: u32,
    /// In: the QP.
    pub qp: u32,
    /// In: local address (all zeros binds every address of the device) and port (0: an
    /// ephemeral one). Out: the port bound.
    pub local: Endpoint,
    pub reserved: u32,
}
/// Size of the first version of [`Bind`].
pub const BIND_SIZE_V1: u32 = 32;

/// [`IOCTL_LISTEN`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct Listen {
    pub size: u32,
    /// In: connections the device completes the handshake for before an accept takes them.
    pub backlog: u32,
    /// In: local address (all zeros listens on every address) and port, non-zero.
    pub local: Endpoint,
    /// Out: the listener's handle.
    pub handle: u32,
}
/// Size of the first version of [`Listen`].
pub const LISTEN_SIZE_V1: u32 = 32;

/// [`IOCTL_ACCEPT`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct Accept {
    pub size: u32,
    /// In: the listener.
    pub listener: u32,
    /// In: an idle TCP QP of the same context to carry the connection.
    pub qp: u32,
    pub reserved: u32,
    /// In: returned unchanged in the [`Event`].
    pub user_data: u64,
    /// In (iWARP QPs): what this end brings to the MPA exchange; all zero on other QPs.
    pub iwarp: IwarpConn,
}
/// Size of the first version of [`Accept`].
pub const ACCEPT_SIZE_V1: u32 = 24;

/// [`IOCTL_CONNECT`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct Connect {
    pub size: u32,
    /// In: the TCP QP.
    pub qp: u32,
    /// In: the peer's address and port.
    pub peer: Endpoint,
    pub reserved: u32,
    /// In: returned unchanged in the [`Event`].
    pub user_data: u64,
    /// In (iWARP QPs): what this end brings to the MPA exchange; all zero on other QPs.
    pub iwarp: IwarpConn,
}
/// Size of the first version of [`Connect`].
pub const CONNECT_SIZE_V1: u32 = 40;

/// What an iWARP QP's [`IOCTL_CONNECT`] or [`IOCTL_ACCEPT`] brings to the MPA exchange
/// (the device's `IwarpConnArgs`, with the private data in the caller's memory). The
/// driver copies the private data when the ioctl is made.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct IwarpConn {
    /// In: the private data, in the caller's address space (0 when `pd_len` is 0).
    pub private_data: u64,
    /// In: its length, at most [`crate::admin::IWARP_MAX_PRIVATE_DATA`].
    pub pd_len: u16,
    /// In: RDMA Reads this end serves at once (IRD), at most
    /// [`crate::admin::IWARP_MAX_IRD_ORD`].
    pub ird: u8,
    /// In: RDMA Reads this end keeps outstanding (ORD), at most the same.
    pub ord: u8,
    /// In: [`crate::admin::IWARP_CONN_CRC`], [`crate::admin::IWARP_CONN_PEER_TO_PEER`].
    pub flags: u32,
}

/// [`IOCTL_QUERY_CONN`]: an iWARP QP's connection as MPA set it up (the device's
/// `ConnInfo`, field for field after `qp`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct QueryConn {
    pub size: u32,
    /// In: the iWARP QP.
    pub qp: u32,
    /// Out: `CONN_INFO_*` bits of [`crate::admin`].
    pub flags: u32,
    /// Out: the connection's IRD.
    pub ird: u16,
    /// Out: the connection's ORD.
    pub ord: u16,
    /// Out: the MPA revision (1 or 2).
    pub mpa_revision: u8,
    pub reserved0: u8,
    /// Out: bytes of the peer's private data.
    pub pd_len: u16,
    /// Out: the Terminate that ended the connection, as layer (bits 12-15), type (8-11)
    /// and code (0-7); 0 if none.
    pub terminate: u32,
    pub reserved1: [u8; 16],
    /// Out: the peer's private data.
    pub private_data: [u8; 512],
}
/// Size of the first version of [`QueryConn`].
pub const QUERY_CONN_SIZE_V1: u32 = 552;

/// [`IOCTL_CREATE_TRIPWIRE`] (the device's `CreateTripwireArgs`, which describes the
/// semantics): watches `len` bytes at virtual address `addr` of region `lkey`. It is armed
/// while the u32 **arm word** at virtual address `arm_addr` of region `arm_lkey` differs
/// from the value it held when the tripwire last fired (0 at creation, so a new tripwire is
/// disarmed until its owner changes the word, typically by incrementing it: a store, no
/// system call). When data an iWARP QP of the context places (an RDMA Write, a Read
/// Response, a Send into a receive buffer) touches the range while it is armed, one
/// completion goes to CQ `cq`: opcode [`crate::cqe::CQE_OP_TRIPWIRE`], `wr_id` = `tag`,
/// `qp` = the tripwire's handle, `byte_len` = the bytes of the range that placement wrote,
/// `src_addr` bytes 0-7 (little-endian) = the virtual address of the first of them; then
/// it is disarmed. Arm, then look: data already there when the word changed fires nothing.
/// While the tripwire lives its CQ cannot be destroyed and its regions cannot be
/// deregistered (`EBUSY`); closing the file destroys it with everything else.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct CreateTripwire {
    pub size: u32,
    /// In: the region watched (its lkey).
    pub lkey: u32,
    /// In: the first byte watched, a virtual address inside region `lkey`.
    pub addr: u64,
    /// In: bytes watched, at least 1, all inside the region.
    pub len: u64,
    /// In: the arm word's virtual address: 4-byte aligned, inside region `arm_lkey`.
    pub arm_addr: u64,
    /// In: the region holding the arm word (may be `lkey`).
    pub arm_lkey: u32,
    /// In: the CQ of the events.
    pub cq: u32,
    /// In: returned as the events' `wr_id`.
    pub tag: u64,
    /// Out: the tripwire's handle (the `qp` of its events).
    pub handle: u32,
    pub reserved: u32,
}
/// Size of the first version of [`CreateTripwire`].
pub const CREATE_TRIPWIRE_SIZE_V1: u32 = 56;

/// [`IOCTL_CLOSE`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct Close {
    pub size: u32,
    /// In: the TCP QP.
    pub qp: u32,
    /// In: returned unchanged in the [`Event`].
    pub user_data: u64,
}
/// Size of the first version of [`Close`].
pub const CLOSE_SIZE_V1: u32 = 16;

/// [`IOCTL_QUERY_STATS`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct QueryStats {
    pub size: u32,
    /// Out: counters written (64: the device's first; the raw QP's, from
    /// `crate::admin::STAT_RAW_TX_FRAMES` on, are the netdev's, read with `ethtool -S`).
    pub count: u32,
    /// Out: the device's counters, indexed by the `crate::admin::STAT_*` constants.
    pub counters: [u64; 64],
}
/// Size of the first version of [`QueryStats`].
pub const QUERY_STATS_SIZE_V1: u32 = 520;

/// [`IOCTL_ADD_ADDR`] and [`IOCTL_DEL_ADDR`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct Addr {
    pub size: u32,
    /// In: prefix length, 1..=128 (ignored when removing).
    pub prefix_len: u8,
    pub reserved: [u8; 3],
    /// In: a unicast IPv6 address, network order.
    pub addr: [u8; 16],
}
/// Size of the first version of [`Addr`].
pub const ADDR_SIZE_V1: u32 = 24;

/// [`IOCTL_SET_MAC`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct SetMac {
    pub size: u32,
    /// In: a unicast MAC address.
    pub mac: [u8; 6],
    pub reserved: [u8; 6],
}
/// Size of the first version of [`SetMac`].
pub const SET_MAC_SIZE_V1: u32 = 16;

// ---- events -------------------------------------------------------------------------------

/// What `read` on a `/dev/qpipN` file returns: whole records, as many as fit in the buffer
/// (a buffer smaller than one record is `EINVAL`). `read` blocks until one is queued unless
/// the file is non-blocking (`EAGAIN`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct Event {
    /// One of the `EVENT_*` types.
    pub kind: u32,
    /// 0, or a negative errno: `ECANCELED` (the QP or listener was destroyed),
    /// `ECONNREFUSED`, `ETIMEDOUT`, `EINVAL` (the QP was in the wrong state), ...
    pub status: i32,
    /// The QP the event is about.
    pub qp: u32,
    pub reserved0: u32,
    /// The `user_data` of the ioctl that started the operation.
    pub user_data: u64,
    /// Accept and connect: the peer's address, network order.
    pub peer_addr: [u8; 16],
    /// Accept and connect: the peer's port.
    pub peer_port: u16,
    pub reserved1: [u8; 6],
}
/// Size of an [`Event`] record.
pub const EVENT_SIZE: u32 = 48;

/// An [`IOCTL_ACCEPT`] finished: a connection was established on the QP, or failed.
pub const EVENT_ACCEPT: u32 = 1;
/// An [`IOCTL_CONNECT`] finished.
pub const EVENT_CONNECT: u32 = 2;
/// An [`IOCTL_CLOSE`] finished.
pub const EVENT_CLOSE: u32 = 3;
/// A TCP QP entered the error state on its own: `status` is `-ECONNRESET` (the peer reset
/// the connection) or `-ETIMEDOUT` (it stopped answering). Its outstanding work requests
/// complete [`crate::cqe::CQE_STATUS_FLUSHED`]. `user_data` is 0.
pub const EVENT_QP_ERROR: u32 = 4;
/// The peer of a TCP QP closed its direction: every byte it sent has been placed, and
/// receive WRs now complete with `byte_len` 0. `status` 0, `user_data` 0.
pub const EVENT_PEER_CLOSED: u32 = 5;
/// Events were dropped because a queue was full (the device's or this file's): `user_data`
/// holds how many, when known (else 0); `qp` is 0.
pub const EVENT_LOST: u32 = 6;

/// [`IOCTL_SET_QP_OPT`]: the fields of [`crate::admin::SetQpOptArgs`] for one QP.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct SetQpOpt {
    pub size: u32,
    /// In: the TCP QP.
    pub qp: u32,
    /// In: [`crate::admin::QP_OPT_KEEPALIVE`].
    pub option: u32,
    /// In: keepalive idle seconds before the first probe; 0 turns keepalive off.
    pub keepalive_idle: u32,
    /// In: keepalive seconds between probes.
    pub keepalive_interval: u32,
    /// In: unanswered keepalive probes before the connection times out.
    pub keepalive_probes: u32,
}
/// Size of the first version of [`SetQpOpt`].
pub const SET_QP_OPT_SIZE_V1: u32 = 24;

// ---- sockets ---------------------------------------------------------------------------

/// [`IOCTL_SOCK_CONNECT`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct SockConnect {
    pub size: u32,
    /// In: the kernel socket (`AF_INET` or `AF_INET6`, `SOCK_STREAM`, TCP; from version 6
    /// also `SOCK_DGRAM`, UDP), unconnected. It may be bound (to one of the device's
    /// addresses or the wildcard); an unbound one is bound to an ephemeral port the kernel
    /// chooses. A UDP one is connected to the peer too (it carries what the device does
    /// not), and `status` is always 0.
    pub fd: i32,
    /// In: the peer (an IPv4 one IPv4-mapped).
    pub peer: Endpoint,
    pub reserved0: u32,
    /// Out: the new file's descriptor, close-on-exec (the caller moves it onto `fd` with
    /// `dup3`), or -1 when declined.
    pub new_fd: i32,
    /// Out: 0 when connected; else the errno `connect` gives while the connection is still
    /// being set up: `EINPROGRESS` (the kernel socket was non-blocking, or `SO_SNDTIMEO`
    /// ran out), `EINTR` (a signal came). `poll` says when it is, `SO_ERROR` how. A
    /// blocking connect that fails returns its errno from the ioctl and no file.
    pub status: i32,
    /// Out: 0, or why the device does not carry this connection (`SOCK_DECLINE_*`).
    pub declined: u32,
    pub reserved1: u32,
}
/// Size of the first version of [`SockConnect`].
pub const SOCK_CONNECT_SIZE_V1: u32 = 48;

/// [`IOCTL_SOCK_LISTEN`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct SockListen {
    pub size: u32,
    /// In: the kernel socket (`AF_INET` or `AF_INET6`, `SOCK_STREAM`, TCP), bound or not
    /// (listen binds an unbound one to an ephemeral port, as Linux does), not connected.
    pub fd: i32,
    /// In: the backlog `listen` was given.
    pub backlog: i32,
    pub reserved0: u32,
    /// Out: the new file's descriptor, close-on-exec, or -1 when declined.
    pub new_fd: i32,
    /// Out: 0, or why the device does not listen for it (`SOCK_DECLINE_*`); the kernel
    /// socket listens all the same.
    pub declined: u32,
    pub reserved1: [u32; 2],
}
/// Size of the first version of [`SockListen`].
pub const SOCK_LISTEN_SIZE_V1: u32 = 32;

/// [`IOCTL_SOCK_ACCEPT`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct SockAccept {
    pub size: u32,
    /// In: `accept4`'s flags (`SOCK_NONBLOCK`, `SOCK_CLOEXEC`); others are `EINVAL`.
    pub flags: u32,
    /// Out: the new connection's descriptor.
    pub fd: i32,
    /// Out: the length of `addr`.
    pub addr_len: u32,
    /// Out: the peer, a `struct sockaddr_in` or `sockaddr_in6` as the listening socket's
    /// family gives it.
    pub addr: [u8; 128],
    /// Out: 1 when the connection is a qpip socket, 0 when it is a kernel socket.
    pub qpip: u32,
    pub reserved: u32,
}
/// Size of the first version of [`SockAccept`].
pub const SOCK_ACCEPT_SIZE_V1: u32 = 152;

/// [`IOCTL_SOCK_SEND`], [`IOCTL_SOCK_RECV`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct SockMsg {
    pub size: u32,
    /// In: the `MSG_*` flags. Send: `MSG_DONTWAIT`, `MSG_NOSIGNAL`, `MSG_MORE`,
    /// `MSG_EOR`, `MSG_WAITALL` (ignored, as Linux does); receive: `MSG_DONTWAIT`,
    /// `MSG_PEEK`, `MSG_WAITALL`, `MSG_TRUNC` (the bytes are dropped, not copied). Others
    /// are `EOPNOTSUPP` (`MSG_OOB`) or `EINVAL`.
    pub flags: u32,
    /// In: the address of an array of `struct iovec`.
    pub iov: u64,
    /// In: its length, at most `UIO_MAXIOV`.
    pub iov_len: u32,
    /// Out: receive: the `msg_flags` of `recvmsg` (0 for TCP; `MSG_TRUNC` for a datagram
    /// longer than the buffers).
    pub msg_flags: u32,
    /// Out: the bytes sent or received (a datagram's whole length with `MSG_TRUNC`).
    pub bytes: u64,
    /// Version 6. Send: the length of `addr`, the destination (`sendto`), or 0 for the
    /// socket's peer. Receive, in: non-zero to ask for the source; out: the length of the
    /// source address written to `addr` (0 on TCP, which reports none).
    pub addr_len: u32,
    pub reserved: u32,
    /// Version 6: a `struct sockaddr_in` or `sockaddr_in6`.
    pub addr: [u8; 128],
}
/// Size of the first version of [`SockMsg`].
pub const SOCK_MSG_SIZE_V1: u32 = 32;

/// [`IOCTL_SOCK_NAME`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct SockName {
    pub size: u32,
    /// In: 0 for the local address (`getsockname`), 1 for the peer's (`getpeername`:
    /// `ENOTCONN` before the connection is set up).
    pub peer: u32,
    /// Out: the length of `addr`.
    pub addr_len: u32,
    pub reserved: u32,
    /// Out: a `struct sockaddr_in` or `sockaddr_in6`, as the socket's family gives it.
    pub addr: [u8; 128],
}
/// Size of the first version of [`SockName`].
pub const SOCK_NAME_SIZE_V1: u32 = 144;

/// [`IOCTL_SOCK_OPT`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct SockOpt {
    pub size: u32,
    /// In: 0 for `getsockopt`, 1 for `setsockopt`.
    pub set: u32,
    /// In: the level (`SOL_SOCKET`, `IPPROTO_TCP`, ...).
    pub level: i32,
    /// In: the option.
    pub name: i32,
    /// In: the address of the option's value.
    pub optval: u64,
    /// In: the value's length; out (get): the length written.
    pub optlen: u32,
    pub reserved: u32,
}
/// Size of the first version of [`SockOpt`].
pub const SOCK_OPT_SIZE_V1: u32 = 32;

/// [`IOCTL_SOCK_SHUTDOWN`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct SockShutdown {
    pub size: u32,
    /// In: `SHUT_RD`, `SHUT_WR` or `SHUT_RDWR`.
    pub how: u32,
}
/// Size of the first version of [`SockShutdown`].
pub const SOCK_SHUTDOWN_SIZE_V1: u32 = 8;

/// [`IOCTL_SOCK_BIND`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct SockBind {
    pub size: u32,
    /// In: the kernel socket (`AF_INET` or `AF_INET6`, `SOCK_DGRAM`, UDP), bound to a port,
    /// not connected.
    pub fd: i32,
    /// Out: the new file's descriptor, close-on-exec, or -1 when declined.
    pub new_fd: i32,
    /// Out: 0, or why the device does not carry it (`SOCK_DECLINE_*`).
    pub declined: u32,
    pub reserved: [u32; 2],
}
/// Size of the first version of [`SockBind`].
pub const SOCK_BIND_SIZE_V1: u32 = 24;

/// [`IOCTL_SOCK_PEER`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct SockPeer {
    pub size: u32,
    /// In: the length of `addr`.
    pub addr_len: u32,
    /// In: the peer as `connect` takes it (`AF_UNSPEC`: forget the peer).
    pub addr: [u8; 128],
}
/// Size of the first version of [`SockPeer`].
pub const SOCK_PEER_SIZE_V1: u32 = 136;

/// Not a TCP or UDP socket of `AF_INET` or `AF_INET6` (before version 6: not TCP).
pub const SOCK_DECLINE_NOT_TCP: u32 = 1;
/// The destination is not reached through this device's network interface (the guest
/// kernel's route to it goes elsewhere), or is not one the device serves (multicast, ...).
pub const SOCK_DECLINE_ROUTE: u32 = 2;
/// The socket is bound to an address that is not the device's.
pub const SOCK_DECLINE_LOCAL_ADDR: u32 = 3;
/// The socket is connected, connecting or listening already.
pub const SOCK_DECLINE_STATE: u32 = 4;
/// The context or the device has no room for another QP, CQ or listener.
pub const SOCK_DECLINE_FULL: u32 = 5;
/// The device refused the port (another of its listeners has it).
pub const SOCK_DECLINE_PORT: u32 = 6;
/// The process is not in the network namespace the device's interface is in.
pub const SOCK_DECLINE_NAMESPACE: u32 = 7;
/// The device has no network interface to route through (no raw QPs), or it is down.
pub const SOCK_DECLINE_NO_NETDEV: u32 = 8;

// ---- mmap ---------------------------------------------------------------------------------

/// Size of a page of every mapping (the ring pages are handed to the device in units of
/// [`crate::pci::DOORBELL_PAGE_SIZE`], which is also the guest's page size).
pub const MMAP_PAGE_SIZE: u32 = 4096;

/// Proof that every ioctl number is `_IOWR(IOCTL_TYPE, nr, size)` with the size of the
/// first version of its structure, and that those sizes are the structures' sizes.
/// cbindgen:ignore
mod checks {
    use super::*;
    use core::mem::{offset_of, size_of};

    macro_rules! check {
        ($num:ident, $nr:expr, $ty:ty, $v1:ident) => {
            const _: () = assert!($num == iowr($nr, size_of::<$ty>()));
            const _: () = assert!($v1 as usize == size_of::<$ty>());
        };
    }
    check!(IOCTL_QUERY_DEVICE, 0x00, QueryDevice, QUERY_DEVICE_SIZE_V1);
    check!(IOCTL_CREATE_CQ, 0x01, CreateCq, CREATE_CQ_SIZE_V1);
    check!(IOCTL_DESTROY_CQ, 0x02, Handle, HANDLE_SIZE_V1);
    check!(IOCTL_CREATE_QP, 0x03, CreateQp, CREATE_QP_SIZE_V1);
    check!(IOCTL_DESTROY_QP, 0x04, Handle, HANDLE_SIZE_V1);
    check!(IOCTL_REG_MR, 0x05, RegMr, REG_MR_SIZE_V1);
    check!(IOCTL_DEREG_MR, 0x06, Handle, HANDLE_SIZE_V1);
    check!(IOCTL_BIND, 0x07, Bind, BIND_SIZE_V1);
    check!(IOCTL_LISTEN, 0x08, Listen, LISTEN_SIZE_V1);
    check!(IOCTL_DESTROY_LISTENER, 0x09, Handle, HANDLE_SIZE_V1);
    // Grown at the end since their first version: the number keeps the first size.
    macro_rules! grown {
        ($num:ident, $nr:expr, $ty:ty, $v1:ident) => {
            const _: () = assert!($num == iowr($nr, $v1 as usize));
            const _: () = assert!(($v1 as usize) < size_of::<$ty>());
        };
    }
    grown!(IOCTL_ACCEPT, 0x0a, Accept, ACCEPT_SIZE_V1);
    grown!(IOCTL_CONNECT, 0x0b, Connect, CONNECT_SIZE_V1);
    check!(IOCTL_CLOSE, 0x0c, Close, CLOSE_SIZE_V1);
    check!(IOCTL_QUERY_STATS, 0x0d, QueryStats, QUERY_STATS_SIZE_V1);
    check!(IOCTL_ADD_ADDR, 0x0e, Addr, ADDR_SIZE_V1);
    check!(IOCTL_DEL_ADDR, 0x0f, Addr, ADDR_SIZE_V1);
    check!(IOCTL_SET_MAC, 0x10, SetMac, SET_MAC_SIZE_V1);
    check!(IOCTL_QUERY_CONN, 0x11, QueryConn, QUERY_CONN_SIZE_V1);
    check!(
        IOCTL_CREATE_TRIPWIRE,
        0x12,
        CreateTripwire,
        CREATE_TRIPWIRE_SIZE_V1
    );
    check!(IOCTL_DESTROY_TRIPWIRE, 0x13, Handle, HANDLE_SIZE_V1);
    check!(IOCTL_SET_QP_OPT, 0x14, SetQpOpt, SET_QP_OPT_SIZE_V1);
    check!(IOCTL_SOCK_CONNECT, 0x15, SockConnect, SOCK_CONNECT_SIZE_V1);
    check!(IOCTL_SOCK_LISTEN, 0x16, SockListen, SOCK_LISTEN_SIZE_V1);
    check!(IOCTL_SOCK_ACCEPT, 0x17, SockAccept, SOCK_ACCEPT_SIZE_V1);
    grown!(IOCTL_SOCK_SEND, 0x18, SockMsg, SOCK_MSG_SIZE_V1);
    grown!(IOCTL_SOCK_RECV, 0x19, SockMsg, SOCK_MSG_SIZE_V1);
    check!(IOCTL_SOCK_NAME, 0x1a, SockName, SOCK_NAME_SIZE_V1);
    check!(IOCTL_SOCK_OPT, 0x1b, SockOpt, SOCK_OPT_SIZE_V1);
    check!(
        IOCTL_SOCK_SHUTDOWN,
        0x1c,
        SockShutdown,
        SOCK_SHUTDOWN_SIZE_V1
    );
    check!(IOCTL_SOCK_BIND, 0x1d, SockBind, SOCK_BIND_SIZE_V1);
    check!(IOCTL_SOCK_PEER, 0x1e, SockPeer, SOCK_PEER_SIZE_V1);
    check!(
        IOCTL_SOCK_FASTPATH,
        0x1f,
        SockFastpath,
        SOCK_FASTPATH_SIZE_V1
    );
    const _: () = assert!(size_of::<SockShm>() == 320);
    const _: () = assert!(size_of::<IwarpConn>() == 16);
    // Where the fields an Endpoint holds were before it held them.
    const _: () = assert!(size_of::<Endpoint>() == 20);
    const _: () = assert!(offset_of!(Bind, local) == 8 && offset_of!(Bind, reserved) == 28);
    const _: () = assert!(offset_of!(Listen, local) == 8 && offset_of!(Listen, handle) == 28);
    const _: () = assert!(offset_of!(Connect, peer) == 8 && offset_of!(Connect, reserved) == 28);
    const _: () = assert!(EVENT_SIZE as usize == size_of::<Event>());
    // The largest structure must fit in the size bits of an ioctl number and in MAX_ARG_SIZE.
    const _: () = assert!(size_of::<QueryStats>() < (1 << 14));
    const _: () = assert!(size_of::<QueryStats>() <= MAX_ARG_SIZE as usize);
}
