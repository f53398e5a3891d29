#ifndef _UAPI_QPIP_H
#define _UAPI_QPIP_H

/* Generated from abi/src/uapi.rs by cbindgen. Do not edit: change abi/src/uapi.rs and run
   QPIP_BLESS=1 cargo test -p qpip-abi --test uapi_header */

#include <linux/types.h>

/*
 Version of this interface. Grows when something is added; existing structures only ever
 grow at the end.
 */
#define QPIP_UAPI_VERSION 8

/*
 The `type` byte of every qpip ioctl number.
 */
#define QPIP_IOCTL_TYPE 196

/*
 Largest `size` the driver accepts in an argument structure.
 */
#define QPIP_MAX_ARG_SIZE 4096

/*
 `_IOC` direction bits of a read-write ioctl (`_IOC_READ | _IOC_WRITE`).
 */
#define QPIP_IOC_READ_WRITE 3

/*
 Describe the device and this file's context ([`QueryDevice`]).
 */
#define QPIP_IOCTL_QUERY_DEVICE 3227042816

/*
 Create a completion queue ([`CreateCq`]). Its ring counts as locked memory.
 */
#define QPIP_IOCTL_CREATE_CQ 3224421377

/*
 Destroy a completion queue ([`Handle`]). `EBUSY` while a QP or a tripwire uses it.
 */
#define QPIP_IOCTL_DESTROY_CQ 3221799938

/*
 Create a queue pair ([`CreateQp`]). Its rings count as locked memory.
 */
#define QPIP_IOCTL_CREATE_QP 3225469955

/*
 Destroy a queue pair ([`Handle`]): outstanding work completes as flushed.
 */
#define QPIP_IOCTL_DESTROY_QP 3221799940

/*
 Register memory ([`RegMr`]): pins the pages (counted against `RLIMIT_MEMLOCK`).
 */
#define QPIP_IOCTL_REG_MR 3223372805

/*
 Deregister memory ([`Handle`] holding the lkey): unpins the pages. `EBUSY` while a
 tripwire watches the region or keeps its arm word there.
 */
#define QPIP_IOCTL_DEREG_MR 3221799942

/*
 Bind a QP to a local address and port ([`Bind`]).
 */
#define QPIP_IOCTL_BIND 3223372807

/*
 Create a TCP listener ([`Listen`]).
 */
#define QPIP_IOCTL_LISTEN 3223372808

/*
 Destroy a listener ([`Handle`]); its pending accepts complete with `ECANCELED`.
 */
#define QPIP_IOCTL_DESTROY_LISTENER 3221799945

/*
 Offer an idle TCP QP to a listener ([`Accept`]). Returns at once; the outcome is an
 [`EVENT_ACCEPT`] event.
 */
#define QPIP_IOCTL_ACCEPT 3222848522

/*
 Connect a TCP QP ([`Connect`]). Returns at once; the outcome is an [`EVENT_CONNECT`]
 event.
 */
#define QPIP_IOCTL_CONNECT 3223897099

/*
 Close a TCP connection gracefully ([`Close`]). Returns at once; the outcome is an
 [`EVENT_CLOSE`] event.
 */
#define QPIP_IOCTL_CLOSE 3222324236

/*
 Read the device's counters ([`QueryStats`]).
 */
#define QPIP_IOCTL_QUERY_STATS 3255354381

/*
 Add an IPv6 address to the device ([`Addr`]). Needs `CAP_NET_ADMIN`.
 */
#define QPIP_IOCTL_ADD_ADDR 3222848526

/*
 Remove an IPv6 address from the device ([`Addr`]). Needs `CAP_NET_ADMIN`.
 */
#define QPIP_IOCTL_DEL_ADDR 3222848527

/*
 Set the device's MAC address ([`SetMac`]). Needs `CAP_NET_ADMIN`.
 */
#define QPIP_IOCTL_SET_MAC 3222324240

/*
 What MPA set up for an iWARP QP ([`QueryConn`]): `EINVAL` before its connection is set
 up or on a QP of another framing.
 */
#define QPIP_IOCTL_QUERY_CONN 3257451537

/*
 Create a tripwire ([`CreateTripwire`]): an event on a CQ when data placed by the
 network touches a range of a registered region while the tripwire is armed.
 `ENOENT` when the CQ or a region is not this context's, `EINVAL` for a range or an arm
 word the device refuses, `ENOSPC` beyond the device's tripwires. Version 3 of this
 interface.
 */
#define QPIP_IOCTL_CREATE_TRIPWIRE 3224945682

/*
 Destroy a tripwire ([`Handle`]): no event of it follows, and its CQ and regions may go.
 */
#define QPIP_IOCTL_DESTROY_TRIPWIRE 3221799955

/*
 Set an option of a TCP QP ([`SetQpOpt`]), as `setsockopt` does for a socket: `EINVAL`
 for a UDP QP, an unknown option or a value out of range; `EOPNOTSUPP` from a device
 that predates the command. Version 4 of this interface.
 */
#define QPIP_IOCTL_SET_QP_OPT 3222848532

/*
 Make a connecting qpip socket of a kernel TCP socket ([`SockConnect`]), on a context's
 file. Declines (`new_fd` -1, `declined` a `SOCK_DECLINE_*`) what the device cannot
 carry; the caller then goes on with the kernel socket.
 */
#define QPIP_IOCTL_SOCK_CONNECT 3224421397

/*
 Make a listening qpip socket of a bound kernel TCP socket ([`SockListen`]), on a
 context's file. The kernel socket listens too.
 */
#define QPIP_IOCTL_SOCK_LISTEN 3223372822

/*
 Take a connection from a listening qpip socket ([`SockAccept`]): a qpip socket for one
 that came through the device, the kernel socket for one that did not.
 */
#define QPIP_IOCTL_SOCK_ACCEPT 3231237143

/*
 `send`/`sendmsg` with flags on a qpip socket ([`SockMsg`]).
 */
#define QPIP_IOCTL_SOCK_SEND 3223372824

/*
 `recv`/`recvmsg` with flags on a qpip socket ([`SockMsg`]).
 */
#define QPIP_IOCTL_SOCK_RECV 3223372825

/*
 `getsockname`/`getpeername` of a qpip socket ([`SockName`]).
 */
#define QPIP_IOCTL_SOCK_NAME 3230712858

/*
 `getsockopt`/`setsockopt` on a qpip socket ([`SockOpt`]).
 */
#define QPIP_IOCTL_SOCK_OPT 3223372827

/*
 `shutdown` of a qpip socket ([`SockShutdown`]).
 */
#define QPIP_IOCTL_SOCK_SHUTDOWN 3221799964

/*
 Make a UDP qpip socket of a bound kernel UDP socket ([`SockBind`]), on a context's file.
 */
#define QPIP_IOCTL_SOCK_BIND 3222848541

/*
 `connect` on a UDP qpip socket ([`SockPeer`]): a peer, or `AF_UNSPEC` to forget it.
 */
#define QPIP_IOCTL_SOCK_PEER 3230188574

/*
 The socket's fast path ([`SockFastpath`]): the mapping's length, or a kick of the engine.
 */
#define QPIP_IOCTL_SOCK_FASTPATH 3222324255

/*
 [`SockFastpath::op`]: fill in `map_len` (`EOPNOTSUPP`: not a connected TCP socket, or
 not this process's; `EBUSY`: mapped already, or shared).
 */
#define QPIP_SOCK_FP_MAP 1

/*
 [`SockFastpath::op`]: wake the engine (the process rang a doorbell and found
 `engine_sleeping` set; the kick register is not mapped into processes through sockets).
 */
#define QPIP_SOCK_FP_KICK 2

/*
 [`SockShm::lock`]: nobody holds it.
 */
#define QPIP_SOCK_SHM_UNLOCKED 0

/*
 [`SockShm::lock`]: the process holds it.
 */
#define QPIP_SOCK_SHM_LOCKED_USER 1

/*
 [`SockShm::lock`]: the driver holds it.
 */
#define QPIP_SOCK_SHM_LOCKED_KERNEL 2

/*
 [`SockShm::flags`]: the process may receive in user space (connected, no error, no
 end of data or shutdown known to the driver).
 */
#define QPIP_SOCK_SHM_RX_OK 1

/*
 [`SockShm::flags`]: the process may send in user space (connected, no error, not shut
 down, no `MSG_MORE` pending), holding bytes back while [`SockShm::cork`] is set.
 */
#define QPIP_SOCK_SHM_TX_OK 2

/*
 [`SockShm::flags`]: someone waits on the socket (a blocked call, poll, an epoll set):
 after moving the indices, the process arms the CQ ([`SockShm::cq_arm_seq`]) — for
 solicited completions only ([`crate::doorbell::CQ_ARM_SOLICITED`]: receives and
 errors), unless [`SOCK_SHM_TX_WAITERS`] is set too.
 */
#define QPIP_SOCK_SHM_WAITERS 4

/*
 [`SockShm::flags`]: the mapping was copied into another process (fork): system calls
 only, from then on.
 */
#define QPIP_SOCK_SHM_SHARED 8

/*
 [`SockShm::flags`]: the driver turned the fast path off (it took the lock over from a
 process that held it too long, or the indices were impossible).
 */
#define QPIP_SOCK_SHM_OFF 16

/*
 [`SockShm::flags`] (version 8): someone waits for room to send (a blocked write, a
 poll that found none): the process's arms are for any completion, so that the
 acknowledgements that make room wake them.
 */
#define QPIP_SOCK_SHM_TX_WAITERS 32

/*
 Size of the first version of [`SockFastpath`].
 */
#define QPIP_SOCK_FASTPATH_SIZE_V1 16

/*
 Size of the first version of [`QueryDevice`].
 */
#define QPIP_QUERY_DEVICE_SIZE_V1 88

/*
 Size of the first version of [`CreateCq`].
 */
#define QPIP_CREATE_CQ_SIZE_V1 48

/*
 [`CreateCq::comp_vector`]: any vector.
 */
#define QPIP_ANY_VECTOR 4294967295

/*
 Size of the first version of [`Handle`].
 */
#define QPIP_HANDLE_SIZE_V1 8

/*
 Size of the first version of [`CreateQp`].
 */
#define QPIP_CREATE_QP_SIZE_V1 64

/*
 Size of the first version of [`RegMr`].
 */
#define QPIP_REG_MR_SIZE_V1 32

/*
 Size of the first version of [`Bind`].
 */
#define QPIP_BIND_SIZE_V1 32

/*
 Size of the first version of [`Listen`].
 */
#define QPIP_LISTEN_SIZE_V1 32

/*
 Size of the first version of [`Accept`].
 */
#define QPIP_ACCEPT_SIZE_V1 24

/*
 Size of the first version of [`Connect`].
 */
#define QPIP_CONNECT_SIZE_V1 40

/*
 Size of the first version of [`QueryConn`].
 */
#define QPIP_QUERY_CONN_SIZE_V1 552

/*
 Size of the first version of [`CreateTripwire`].
 */
#define QPIP_CREATE_TRIPWIRE_SIZE_V1 56

/*
 Size of the first version of [`Close`].
 */
#define QPIP_CLOSE_SIZE_V1 16

/*
 Size of the first version of [`QueryStats`].
 */
#define QPIP_QUERY_STATS_SIZE_V1 520

/*
 Size of the first version of [`Addr`].
 */
#define QPIP_ADDR_SIZE_V1 24

/*
 Size of the first version of [`SetMac`].
 */
#define QPIP_SET_MAC_SIZE_V1 16

/*
 Size of an [`Event`] record.
 */
#define QPIP_EVENT_SIZE 48

/*
 An [`IOCTL_ACCEPT`] finished: a connection was established on the QP, or failed.
 */
#define QPIP_EVENT_ACCEPT 1

/*
 An [`IOCTL_CONNECT`] finished.
 */
#define QPIP_EVENT_CONNECT 2

/*
 An [`IOCTL_CLOSE`] finished.
 */
#define QPIP_EVENT_CLOSE 3

/*
 A TCP QP entered the error state on its own: `status` is `-ECONNRESET` (the peer reset
 the connection) or `-ETIMEDOUT` (it stopped answering). Its outstanding work requests
 complete [`crate::cqe::CQE_STATUS_FLUSHED`]. `user_data` is 0.
 */
#define QPIP_EVENT_QP_ERROR 4

/*
 The peer of a TCP QP closed its direction: every byte it sent has been placed, and
 receive WRs now complete with `byte_len` 0. `status` 0, `user_data` 0.
 */
#define QPIP_EVENT_PEER_CLOSED 5

/*
 Events were dropped because a queue was full (the device's or this file's): `user_data`
 holds how many, when known (else 0); `qp` is 0.
 */
#define QPIP_EVENT_LOST 6

/*
 Size of the first version of [`SetQpOpt`].
 */
#define QPIP_SET_QP_OPT_SIZE_V1 24

/*
 Size of the first version of [`SockConnect`].
 */
#define QPIP_SOCK_CONNECT_SIZE_V1 48

/*
 Size of the first version of [`SockListen`].
 */
#define QPIP_SOCK_LISTEN_SIZE_V1 32

/*
 Size of the first version of [`SockAccept`].
 */
#define QPIP_SOCK_ACCEPT_SIZE_V1 152

/*
 Size of the first version of [`SockMsg`].
 */
#define QPIP_SOCK_MSG_SIZE_V1 32

/*
 Size of the first version of [`SockName`].
 */
#define QPIP_SOCK_NAME_SIZE_V1 144

/*
 Size of the first version of [`SockOpt`].
 */
#define QPIP_SOCK_OPT_SIZE_V1 32

/*
 Size of the first version of [`SockShutdown`].
 */
#define QPIP_SOCK_SHUTDOWN_SIZE_V1 8

/*
 Size of the first version of [`SockBind`].
 */
#define QPIP_SOCK_BIND_SIZE_V1 24

/*
 Size of the first version of [`SockPeer`].
 */
#define QPIP_SOCK_PEER_SIZE_V1 136

/*
 Not a TCP or UDP socket of `AF_INET` or `AF_INET6` (before version 6: not TCP).
 */
#define QPIP_SOCK_DECLINE_NOT_TCP 1

/*
 The destination is not reached through this device's network interface (the guest
 kernel's route to it goes elsewhere), or is not one the device serves (multicast, ...).
 */
#define QPIP_SOCK_DECLINE_ROUTE 2

/*
 The socket is bound to an address that is not the device's.
 */
#define QPIP_SOCK_DECLINE_LOCAL_ADDR 3

/*
 The socket is connected, connecting or listening already.
 */
#define QPIP_SOCK_DECLINE_STATE 4

/*
 The context or the device has no room for another QP, CQ or listener.
 */
#define QPIP_SOCK_DECLINE_FULL 5

/*
 The device refused the port (another of its listeners has it).
 */
#define QPIP_SOCK_DECLINE_PORT 6

/*
 The process is not in the network namespace the device's interface is in.
 */
#define QPIP_SOCK_DECLINE_NAMESPACE 7

/*
 The device has no network interface to route through (no raw QPs), or it is down.
 */
#define QPIP_SOCK_DECLINE_NO_NETDEV 8

/*
 Size of a page of every mapping (the ring pages are handed to the device in units of
 [`crate::pci::DOORBELL_PAGE_SIZE`], which is also the guest's page size).
 */
#define QPIP_MMAP_PAGE_SIZE 4096

/*
 [`IOCTL_QUERY_DEVICE`]: everything is written by the driver.
 */
struct qpip_query_device {
  /*
   In: size of this structure as the caller knows it.
   */
  __u32 size;
  /*
   [`UAPI_VERSION`] of the driver.
   */
  __u32 uapi_version;
  /*
   The device interface version (major << 16 | minor).
   */
  __u32 abi_version;
  /*
   This file's context number (= the index of its doorbell page).
   */
  __u32 ctx;
  /*
   mmap offset of the context's doorbell page (one page, read-write).
   */
  __u64 doorbell_offset;
  /*
   mmap offset of the kick register page (one page, write the kick register only).
   */
  __u64 kick_offset;
  /*
   Contexts the device has (= open files at once).
   */
  __u32 max_contexts;
  /*
   QPs per context.
   */
  __u32 max_qps;
  /*
   CQs per context.
   */
  __u32 max_cqs;
  /*
   Memory regions on the device.
   */
  __u32 max_mrs;
  /*
   Pages in one memory region.
   */
  __u32 max_mr_pages;
  /*
   Deepest queue, in entries.
   */
  __u32 max_queue_depth;
  /*
   Scatter/gather entries per WQE.
   */
  __u32 max_sge;
  /*
   Bytes of inline data per send WQE.
   */
  __u32 max_inline;
  /*
   Largest UDP payload in one send.
   */
  __u32 max_udp_payload;
  /*
   Listeners on the device.
   */
  __u32 max_listeners;
  /*
   MTU of the link.
   */
  __u32 mtu;
  /*
   Completion vectors: CQ interrupts are spread over this many MSI-X vectors.
   */
  __u32 comp_vectors;
  /*
   The device's MAC address.
   */
  __u8 mac[6];
  __u8 reserved[2];
};

/*
 [`IOCTL_CREATE_CQ`].
 */
struct qpip_create_cq {
  __u32 size;
  /*
   In: entries, a power of two from 2 to the device's `max_queue_depth`.
   */
  __u32 depth;
  /*
   In: completion vector (0 .. `comp_vectors`), or [`ANY_VECTOR`] to let the driver
   choose the least used one.
   */
  __u32 comp_vector;
  /*
   In: an eventfd to signal when the CQ's interrupt arrives, or -1 for none (the process
   only polls the ring).
   */
  __s32 eventfd;
  /*
   Out: the CQ's handle.
   */
  __u32 handle;
  /*
   Out: the CQ's slot in the doorbell page (`cq_head` and `arm_seq`, see
   [`crate::doorbell::DB_CQ_BASE`]).
   */
  __u32 db_slot;
  /*
   Out: mmap offset of the ring (`depth` CQEs of [`crate::cqe::CQE_SIZE`] bytes).
   */
  __u64 ring_offset;
  /*
   Out: bytes to map at `ring_offset` (whole pages).
   */
  __u64 ring_size;
  /*
   Out: the completion vector chosen.
   */
  __u32 comp_vector_out;
  __u32 reserved;
};

/*
 [`IOCTL_DESTROY_CQ`], [`IOCTL_DESTROY_QP`], [`IOCTL_DEREG_MR`],
 [`IOCTL_DESTROY_LISTENER`], [`IOCTL_DESTROY_TRIPWIRE`].
 */
struct qpip_handle {
  __u32 size;
  /*
   In: the object's handle (the lkey for a memory region).
   */
  __u32 handle;
};

/*
 [`IOCTL_CREATE_QP`].
 */
struct qpip_create_qp {
  __u32 size;
  /*
   In: [`crate::admin::QP_TYPE_UDP`] or [`crate::admin::QP_TYPE_TCP`].
   */
  __u8 qp_type;
  /*
   In: TCP framing ([`crate::admin::FRAMING_MESSAGE`] or
   [`crate::admin::FRAMING_STREAM`]); 0 for UDP.
   */
  __u8 framing;
  __u16 reserved0;
  /*
   In: CQ handle for send completions.
   */
  __u32 send_cq;
  /*
   In: CQ handle for receive completions (may be `send_cq`).
   */
  __u32 recv_cq;
  /*
   In: send ring entries, a power of two from 2 to `max_queue_depth`.
   */
  __u32 sq_depth;
  /*
   In: receive ring entries, a power of two from 2 to `max_queue_depth`.
   */
  __u32 rq_depth;
  /*
   Out: the QP's handle (also the `qp` of its CQEs).
   */
  __u32 handle;
  /*
   Out: the QP's slot in the doorbell page (`sq_tail`, `rq_tail`, see
   [`crate::doorbell::DB_QP_BASE`]).
   */
  __u32 db_slot;
  /*
   Out: mmap offset of the send ring (`sq_depth` WQEs of [`crate::wqe::WQE_SIZE`]).
   */
  __u64 sq_offset;
  /*
   Out: bytes to map at `sq_offset`.
   */
  __u64 sq_size;
  /*
   Out: mmap offset of the receive ring.
   */
  __u64 rq_offset;
  /*
   Out: bytes to map at `rq_offset`.
   */
  __u64 rq_size;
};

/*
 [`IOCTL_REG_MR`].
 */
struct qpip_reg_mr {
  __u32 size;
  /*
   In: [`crate::admin::MR_ACCESS_LOCAL_WRITE`] and the other `MR_ACCESS_*` bits.
   */
  __u32 access;
  /*
   In: start of the region in the caller's address space (any alignment). WQEs name
   its bytes by these virtual addresses.
   */
  __u64 addr;
  /*
   In: length in bytes, at least 1, at most `max_mr_pages` pages' worth.
   */
  __u64 length;
  /*
   Out: the local key WQEs use.
   */
  __u32 lkey;
  /*
   Out: the remote key (0 without a remote access right).
   */
  __u32 rkey;
};

/*
 An IPv6 address and a port: the local end of a [`Bind`] or a [`Listen`], the peer of
 a [`Connect`]. `reserved` must be zero.
 */
struct qpip_endpoint {
  /*
   The address, network order.
   */
  __u8 addr[16];
  __u16 port;
  __u16 reserved;
};

/*
 [`IOCTL_BIND`].
 */
struct qpip_bind {
  __u32 size;
  /*
   In: the QP.
   */
  __u32 qp;
  /*
   In: local address (all zeros binds every address of the device) and port (0: an
   ephemeral one). Out: the port bound.
   */
  struct qpip_endpoint local;
  __u32 reserved;
};

/*
 [`IOCTL_LISTEN`].
 */
struct qpip_listen {
  __u32 size;
  /*
   In: connections the device completes the handshake for before an accept takes them.
   */
  __u32 backlog;
  /*
   In: local address (all zeros listens on every address) and port, non-zero.
   */
  struct qpip_endpoint local;
  /*
   Out: the listener's handle.
   */
  __u32 handle;
};

/*
 What an iWARP QP's [`IOCTL_CONNECT`] or [`IOCTL_ACCEPT`] brings to the MPA exchange
 (the device's `IwarpConnArgs`, with the private data in the caller's memory). The
 driver copies the private data when the ioctl is made.
 */
struct qpip_iwarp_conn {
  /*
   In: the private data, in the caller's address space (0 when `pd_len` is 0).
   */
  __u64 private_data;
  /*
   In: its length, at most [`crate::admin::IWARP_MAX_PRIVATE_DATA`].
   */
  __u16 pd_len;
  /*
   In: RDMA Reads this end serves at once (IRD), at most
   [`crate::admin::IWARP_MAX_IRD_ORD`].
   */
  __u8 ird;
  /*
   In: RDMA Reads this end keeps outstanding (ORD), at most the same.
   */
  __u8 ord;
  /*
   In: [`crate::admin::IWARP_CONN_CRC`], [`crate::admin::IWARP_CONN_PEER_TO_PEER`].
   */
  __u32 flags;
};

/*
 [`IOCTL_ACCEPT`].
 */
struct qpip_accept {
  __u32 size;
  /*
   In: the listener.
   */
  __u32 listener;
  /*
   In: an idle TCP QP of the same context to carry the connection.
   */
  __u32 qp;
  __u32 reserved;
  /*
   In: returned unchanged in the [`Event`].
   */
  __u64 user_data;
  /*
   In (iWARP QPs): what this end brings to the MPA exchange; all zero on other QPs.
   */
  struct qpip_iwarp_conn iwarp;
};

/*
 [`IOCTL_CONNECT`].
 */
struct qpip_connect {
  __u32 size;
  /*
   In: the TCP QP.
   */
  __u32 qp;
  /*
   In: the peer's address and port.
   */
  struct qpip_endpoint peer;
  __u32 reserved;
  /*
   In: returned unchanged in the [`Event`].
   */
  __u64 user_data;
  /*
   In (iWARP QPs): what this end brings to the MPA exchange; all zero on other QPs.
   */
  struct qpip_iwarp_conn iwarp;
};

/*
 [`IOCTL_QUERY_CONN`]: an iWARP QP's connection as MPA set it up (the device's
 `ConnInfo`, field for field after `qp`).
 */
struct qpip_query_conn {
  __u32 size;
  /*
   In: the iWARP QP.
   */
  __u32 qp;
  /*
   Out: `CONN_INFO_*` bits of [`crate::admin`].
   */
  __u32 flags;
  /*
   Out: the connection's IRD.
   */
  __u16 ird;
  /*
   Out: the connection's ORD.
   */
  __u16 ord;
  /*
   Out: the MPA revision (1 or 2).
   */
  __u8 mpa_revision;
  __u8 reserved0;
  /*
   Out: bytes of the peer's private data.
   */
  __u16 pd_len;
  /*
   Out: the Terminate that ended the connection, as layer (bits 12-15), type (8-11)
   and code (0-7); 0 if none.
   */
  __u32 terminate;
  __u8 reserved1[16];
  /*
   Out: the peer's private data.
   */
  __u8 private_data[512];
};

/*
 [`IOCTL_CREATE_TRIPWIRE`] (the device's `CreateTripwireArgs`, which describes the
 semantics): watches `len` bytes at virtual address `addr` of region `lkey`. It is armed
 while the u32 **arm word** at virtual address `arm_addr` of region `arm_lkey` differs
 from the value it held when the tripwire last fired (0 at creation, so a new tripwire is
 disarmed until its owner changes the word, typically by incrementing it: a store, no
 system call). When data an iWARP QP of the context places (an RDMA Write, a Read
 Response, a Send into a receive buffer) touches the range while it is armed, one
 completion goes to CQ `cq`: opcode [`crate::cqe::CQE_OP_TRIPWIRE`], `wr_id` = `tag`,
 `qp` = the tripwire's handle, `byte_len` = the bytes of the range that placement wrote,
 `src_addr` bytes 0-7 (little-endian) = the virtual address of the first of them; then
 it is disarmed. Arm, then look: data already there when the word changed fires nothing.
 While the tripwire lives its CQ cannot be destroyed and its regions cannot be
 deregistered (`EBUSY`); closing the file destroys it with everything else.
 */
struct qpip_create_tripwire {
  __u32 size;
  /*
   In: the region watched (its lkey).
   */
  __u32 lkey;
  /*
   In: the first byte watched, a virtual address inside region `lkey`.
   */
  __u64 addr;
  /*
   In: bytes watched, at least 1, all inside the region.
   */
  __u64 len;
  /*
   In: the arm word's virtual address: 4-byte aligned, inside region `arm_lkey`.
   */
  __u64 arm_addr;
  /*
   In: the region holding the arm word (may be `lkey`).
   */
  __u32 arm_lkey;
  /*
   In: the CQ of the events.
   */
  __u32 cq;
  /*
   In: returned as the events' `wr_id`.
   */
  __u64 tag;
  /*
   Out: the tripwire's handle (the `qp` of its events).
   */
  __u32 handle;
  __u32 reserved;
};

/*
 [`IOCTL_CLOSE`].
 */
struct qpip_close {
  __u32 size;
  /*
   In: the TCP QP.
   */
  __u32 qp;
  /*
   In: returned unchanged in the [`Event`].
   */
  __u64 user_data;
};

/*
 [`IOCTL_QUERY_STATS`].
 */
struct qpip_query_stats {
  __u32 size;
  /*
   Out: counters written (64: the device's first; the raw QP's, from
   `crate::admin::STAT_RAW_TX_FRAMES` on, are the netdev's, read with `ethtool -S`).
   */
  __u32 count;
  /*
   Out: the device's counters, indexed by the `crate::admin::STAT_*` constants.
   */
  __u64 counters[64];
};

/*
 [`IOCTL_ADD_ADDR`] and [`IOCTL_DEL_ADDR`].
 */
struct qpip_addr {
  __u32 size;
  /*
   In: prefix length, 1..=128 (ignored when removing).
   */
  __u8 prefix_len;
  __u8 reserved[3];
  /*
   In: a unicast IPv6 address, network order.
   */
  __u8 addr[16];
};

/*
 [`IOCTL_SET_MAC`].
 */
struct qpip_set_mac {
  __u32 size;
  /*
   In: a unicast MAC address.
   */
  __u8 mac[6];
  __u8 reserved[6];
};

/*
 What `read` on a `/dev/qpipN` file returns: whole records, as many as fit in the buffer
 (a buffer smaller than one record is `EINVAL`). `read` blocks until one is queued unless
 the file is non-blocking (`EAGAIN`).
 */
struct qpip_event {
  /*
   One of the `EVENT_*` types.
   */
  __u32 kind;
  /*
   0, or a negative errno: `ECANCELED` (the QP or listener was destroyed),
   `ECONNREFUSED`, `ETIMEDOUT`, `EINVAL` (the QP was in the wrong state), ...
   */
  __s32 status;
  /*
   The QP the event is about.
   */
  __u32 qp;
  __u32 reserved0;
  /*
   The `user_data` of the ioctl that started the operation.
   */
  __u64 user_data;
  /*
   Accept and connect: the peer's address, network order.
   */
  __u8 peer_addr[16];
  /*
   Accept and connect: the peer's port.
   */
  __u16 peer_port;
  __u8 reserved1[6];
};

/*
 [`IOCTL_SET_QP_OPT`]: the fields of [`crate::admin::SetQpOptArgs`] for one QP.
 */
struct qpip_set_qp_opt {
  __u32 size;
  /*
   In: the TCP QP.
   */
  __u32 qp;
  /*
   In: [`crate::admin::QP_OPT_KEEPALIVE`].
   */
  __u32 option;
  /*
   In: keepalive idle seconds before the first probe; 0 turns keepalive off.
   */
  __u32 keepalive_idle;
  /*
   In: keepalive seconds between probes.
   */
  __u32 keepalive_interval;
  /*
   In: unanswered keepalive probes before the connection times out.
   */
  __u32 keepalive_probes;
};

/*
 [`IOCTL_SOCK_CONNECT`].
 */
struct qpip_sock_connect {
  __u32 size;
  /*
   In: the kernel socket (`AF_INET` or `AF_INET6`, `SOCK_STREAM`, TCP; from version 6
   also `SOCK_DGRAM`, UDP), unconnected. It may be bound (to one of the device's
   addresses or the wildcard); an unbound one is bound to an ephemeral port the kernel
   chooses. A UDP one is connected to the peer too (it carries what the device does
   not), and `status` is always 0.
   */
  __s32 fd;
  /*
   In: the peer (an IPv4 one IPv4-mapped).
   */
  struct qpip_endpoint peer;
  __u32 reserved0;
  /*
   Out: the new file's descriptor, close-on-exec (the caller moves it onto `fd` with
   `dup3`), or -1 when declined.
   */
  __s32 new_fd;
  /*
   Out: 0 when connected; else the errno `connect` gives while the connection is still
   being set up: `EINPROGRESS` (the kernel socket was non-blocking, or `SO_SNDTIMEO`
   ran out), `EINTR` (a signal came). `poll` says when it is, `SO_ERROR` how. A
   blocking connect that fails returns its errno from the ioctl and no file.
   */
  __s32 status;
  /*
   Out: 0, or why the device does not carry this connection (`SOCK_DECLINE_*`).
   */
  __u32 declined;
  __u32 reserved1;
};

/*
 [`IOCTL_SOCK_LISTEN`].
 */
struct qpip_sock_listen {
  __u32 size;
  /*
   In: the kernel socket (`AF_INET` or `AF_INET6`, `SOCK_STREAM`, TCP), bound or not
   (listen binds an unbound one to an ephemeral port, as Linux does), not connected.
   */
  __s32 fd;
  /*
   In: the backlog `listen` was given.
   */
  __s32 backlog;
  __u32 reserved0;
  /*
   Out: the new file's descriptor, close-on-exec, or -1 when declined.
   */
  __s32 new_fd;
  /*
   Out: 0, or why the device does not listen for it (`SOCK_DECLINE_*`); the kernel
   socket listens all the same.
   */
  __u32 declined;
  __u32 reserved1[2];
};

/*
 [`IOCTL_SOCK_ACCEPT`].
 */
struct qpip_sock_accept {
  __u32 size;
  /*
   In: `accept4`'s flags (`SOCK_NONBLOCK`, `SOCK_CLOEXEC`); others are `EINVAL`.
   */
  __u32 flags;
  /*
   Out: the new connection's descriptor.
   */
  __s32 fd;
  /*
   Out: the length of `addr`.
   */
  __u32 addr_len;
  /*
   Out: the peer, a `struct sockaddr_in` or `sockaddr_in6` as the listening socket's
   family gives it.
   */
  __u8 addr[128];
  /*
   Out: 1 when the connection is a qpip socket, 0 when it is a kernel socket.
   */
  __u32 qpip;
  __u32 reserved;
};

/*
 [`IOCTL_SOCK_SEND`], [`IOCTL_SOCK_RECV`].
 */
struct qpip_sock_msg {
  __u32 size;
  /*
   In: the `MSG_*` flags. Send: `MSG_DONTWAIT`, `MSG_NOSIGNAL`, `MSG_MORE`,
   `MSG_EOR`, `MSG_WAITALL` (ignored, as Linux does); receive: `MSG_DONTWAIT`,
   `MSG_PEEK`, `MSG_WAITALL`, `MSG_TRUNC` (the bytes are dropped, not copied). Others
   are `EOPNOTSUPP` (`MSG_OOB`) or `EINVAL`.
   */
  __u32 flags;
  /*
   In: the address of an array of `struct iovec`.
   */
  __u64 iov;
  /*
   In: its length, at most `UIO_MAXIOV`.
   */
  __u32 iov_len;
  /*
   Out: receive: the `msg_flags` of `recvmsg` (0 for TCP; `MSG_TRUNC` for a datagram
   longer than the buffers).
   */
  __u32 msg_flags;
  /*
   Out: the bytes sent or received (a datagram's whole length with `MSG_TRUNC`).
   */
  __u64 bytes;
  /*
   Version 6. Send: the length of `addr`, the destination (`sendto`), or 0 for the
   socket's peer. Receive, in: non-zero to ask for the source; out: the length of the
   source address written to `addr` (0 on TCP, which reports none).
   */
  __u32 addr_len;
  __u32 reserved;
  /*
   Version 6: a `struct sockaddr_in` or `sockaddr_in6`.
   */
  __u8 addr[128];
};

/*
 [`IOCTL_SOCK_NAME`].
 */
struct qpip_sock_name {
  __u32 size;
  /*
   In: 0 for the local address (`getsockname`), 1 for the peer's (`getpeername`:
   `ENOTCONN` before the connection is set up).
   */
  __u32 peer;
  /*
   Out: the length of `addr`.
   */
  __u32 addr_len;
  __u32 reserved;
  /*
   Out: a `struct sockaddr_in` or `sockaddr_in6`, as the socket's family gives it.
   */
  __u8 addr[128];
};

/*
 [`IOCTL_SOCK_OPT`].
 */
struct qpip_sock_opt {
  __u32 size;
  /*
   In: 0 for `getsockopt`, 1 for `setsockopt`.
   */
  __u32 set;
  /*
   In: the level (`SOL_SOCKET`, `IPPROTO_TCP`, ...).
   */
  __s32 level;
  /*
   In: the option.
   */
  __s32 name;
  /*
   In: the address of the option's value.
   */
  __u64 optval;
  /*
   In: the value's length; out (get): the length written.
   */
  __u32 optlen;
  __u32 reserved;
};

/*
 [`IOCTL_SOCK_SHUTDOWN`].
 */
struct qpip_sock_shutdown {
  __u32 size;
  /*
   In: `SHUT_RD`, `SHUT_WR` or `SHUT_RDWR`.
   */
  __u32 how;
};

/*
 [`IOCTL_SOCK_BIND`].
 */
struct qpip_sock_bind {
  __u32 size;
  /*
   In: the kernel socket (`AF_INET` or `AF_INET6`, `SOCK_DGRAM`, UDP), bound to a port,
   not connected.
   */
  __s32 fd;
  /*
   Out: the new file's descriptor, close-on-exec, or -1 when declined.
   */
  __s32 new_fd;
  /*
   Out: 0, or why the device does not carry it (`SOCK_DECLINE_*`).
   */
  __u32 declined;
  __u32 reserved[2];
};

/*
 [`IOCTL_SOCK_PEER`].
 */
struct qpip_sock_peer {
  __u32 size;
  /*
   In: the length of `addr`.
   */
  __u32 addr_len;
  /*
   In: the peer as `connect` takes it (`AF_UNSPEC`: forget the peer).
   */
  __u8 addr[128];
};

/*
 [`IOCTL_SOCK_FASTPATH`].
 */
struct qpip_sock_fastpath {
  __u32 size;
  /*
   In: `SOCK_FP_MAP` or `SOCK_FP_KICK`.
   */
  __u32 op;
  /*
   Out (`SOCK_FP_MAP`): the length to map, bytes.
   */
  __u32 map_len;
  __u32 reserved;
};

/*
 The first page of a socket's mapping: its layout (written by the driver, never read
 back) and its indices (the driver's while it holds `lock`, the process's while it does;
 they mean what the driver's copies mean in `qpip_sock_io.c`). Byte offsets `off_*` are
 from the start of the mapping, `db_*` from the start of the doorbell page.
 */
struct qpip_sock_shm {
  /*
   `SOCK_SHM_UNLOCKED`, `SOCK_SHM_LOCKED_USER` or `SOCK_SHM_LOCKED_KERNEL`.
   */
  __u32 lock;
  /*
   `SOCK_SHM_*` flags, written by the driver when it lets the lock go.
   */
  __u32 flags;
  __u32 map_len;
  __u32 cq_depth;
  __u32 sq_depth;
  /*
   Receive slots (the RQ's depth), each `rx_slot_bytes`.
   */
  __u32 rx_slots;
  __u32 rx_slot_bytes;
  /*
   The send ring's bytes (a power of two).
   */
  __u32 tx_bytes;
  /*
   The most one send WR carries.
   */
  __u32 tx_chunk;
  /*
   The buffers' region.
   */
  __u32 lkey;
  __u32 db_cq_head;
  __u32 db_cq_arm_seq;
  __u32 db_sq_tail;
  __u32 db_rq_tail;
  __u32 off_db;
  __u32 off_cq;
  __u32 off_sq;
  __u32 off_rq;
  __u32 off_rx;
  __u32 off_tx;
  /*
   Where the receive slots and the send ring are in the region.
   */
  __u64 iova_rx;
  __u64 iova_tx;
  /*
   CQEs consumed; the last arm sequence written to the doorbell.
   */
  __u32 cq_head;
  __u32 cq_arm_seq;
  /*
   Receive WRs posted, completed with data, read whole; bytes read of slot `rx_read`.
   */
  __u32 rq_tail;
  __u32 rx_done;
  __u32 rx_read;
  __u32 rx_off;
  /*
   The send ring: acknowledged, posted and copied-in ends; send WRs posted, completed.
   */
  __u32 tx_head;
  __u32 tx_posted;
  __u32 tx_tail;
  __u32 sq_tail;
  __u32 sq_head;
  /*
   The program's `TCP_CORK` (version 8), 1 or 0. The process may change it while it
   holds the lock (a `setsockopt` without a system call); whoever posts send WRs posts
   only whole `tx_chunk`s while it is 1, and everything copied in once it goes to 0.
   */
  __u32 cork;
  __u32 reserved[12];
  /*
   Bytes completed into each receive slot (for WRs `rx_read..rx_done`).
   */
  __u16 rx_len[64];
};

#endif  /* _UAPI_QPIP_H */
