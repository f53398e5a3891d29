#ifndef QPIP_ABI_H
#define QPIP_ABI_H

/* Generated from the qpip-abi crate by cbindgen. Do not edit: change abi/ and run
   QPIP_BLESS=1 cargo test -p qpip-abi --test c_header */

#include <linux/types.h>

/*
 Major version of this interface. See the crate docs for the rule.
 */
#define QPIP_ABI_VERSION_MAJOR 2

/*
 Minor version of this interface.
 */
#define QPIP_ABI_VERSION_MINOR 7

/*
 Largest admin queue depth.
 */
#define QPIP_ADMIN_MAX_DEPTH 4096

/*
 Write [`DeviceInfo`] to the guest buffer in [`QueryArgs`]. No results.
 */
#define QPIP_ADMIN_OP_QUERY_DEVICE 1

/*
 Set the device's MAC address ([`SetMacArgs`]). No results.
 */
#define QPIP_ADMIN_OP_SET_MAC 2

/*
 Add an IPv6 address ([`AddrArgs`]). No results.
 */
#define QPIP_ADMIN_OP_ADD_ADDR 3

/*
 Remove an IPv6 address ([`AddrArgs`]). No results.
 */
#define QPIP_ADMIN_OP_DEL_ADDR 4

/*
 Write [`Stats`] to the guest buffer in [`QueryArgs`]: its first `len / 8` counters, at
 most [`STATS_COUNT`]. Result0: the number of counters written.
 */
#define QPIP_ADMIN_OP_QUERY_STATS 5

/*
 Write [`AddrList`] (the link-local address and every configured address) to the guest
 buffer in [`QueryArgs`]. Result0: the number of addresses written.
 */
#define QPIP_ADMIN_OP_LIST_ADDRS 6

/*
 Ask for the next asynchronous event (the NVMe "asynchronous event request" model: events
 need a command to complete, so they can never overrun the completion ring). No arguments;
 `ctx` and `handle` 0. The command stays pending until the device has an event, then
 completes with: result0 the context the event belongs to, result1 the object (a QP id),
 result2 `ASYNC_EVENT_*` in bits 0-15, an `ASYNC_REASON_*` in bits 16-23, and
 [`ASYNC_FLAG_LOST`] in bit 31 when events were dropped before this one. At most
 [`MAX_ASYNC_REQUESTS`] may be pending ([`ADMIN_STATUS_NO_RESOURCES`] beyond). The device
 queues at most [`ASYNC_EVENT_QUEUE`] events while no request is pending and drops (and
 counts, [`STAT_ASYNC_EVENTS_LOST`]) the rest. Destroying a context discards its queued
 events; pending requests belong to the device, not to a context: they never complete
 without an event, and a reset (or setting up or disabling the admin queue) forgets them
 without a completion, like every command still pending then.
 */
#define QPIP_ADMIN_OP_ASYNC_EVENT 7

/*
 Create a context ([`CreateCtxArgs`]): the driver names the page of guest RAM that is to be
 the context's doorbell page (see [`crate::doorbell`]). Result0: the context id.
 */
#define QPIP_ADMIN_OP_CREATE_CTX 16

/*
 Destroy context `ctx` and every object in it. Pending commands on its objects complete
 with [`ADMIN_STATUS_CANCELLED`]; outstanding work requests are dropped without CQEs (the
 rings go away with the process).
 */
#define QPIP_ADMIN_OP_DESTROY_CTX 17

/*
 Create a completion queue in `ctx` ([`CreateCqArgs`]). Result0: CQ id. Result1: its CQ
 doorbell slot in the context's page, which the device has zeroed (`cq_head` and
 `arm_seq` start at 0).
 */
#define QPIP_ADMIN_OP_CREATE_CQ 18

/*
 Destroy CQ `handle`. Fails with [`ADMIN_STATUS_BUSY`] while a QP uses it.
 */
#define QPIP_ADMIN_OP_DESTROY_CQ 19

/*
 Create a queue pair in `ctx` ([`CreateQpArgs`]). Result0: QP id. Result1: its QP doorbell
 slot in the context's page, which the device has zeroed (both producer indices start at 0).
 */
#define QPIP_ADMIN_OP_CREATE_QP 20

/*
 Destroy QP `handle`: outstanding work requests complete with
 [`crate::cqe::CQE_STATUS_FLUSHED`]; a TCP connection is aborted (RST).
 */
#define QPIP_ADMIN_OP_DESTROY_QP 21

/*
 Register memory in `ctx` ([`RegMrArgs`]). Result0: lkey. Result1: rkey (0 without a
 remote access right).
 */
#define QPIP_ADMIN_OP_REG_MR 22

/*
 Deregister the memory region whose lkey is `handle`.
 */
#define QPIP_ADMIN_OP_DEREG_MR 23

/*
 Bind QP `handle` to a local address and port ([`BindArgs`]). Result0: the port bound
 (an ephemeral one if 0 was asked for). [`ADMIN_STATUS_ADDR_IN_USE`] when a QP or
 listener holds the port, or (since minor version 5, with `BindArgs::peer_port`) when a
 connection from it to that peer is still held and a new one could not take it over.
 */
#define QPIP_ADMIN_OP_BIND 24

/*
 Create a TCP listener in `ctx` ([`ListenArgs`]). Result0: listener id.
 */
#define QPIP_ADMIN_OP_LISTEN 25

/*
 Destroy listener `handle`; pending accepts complete with [`ADMIN_STATUS_CANCELLED`].
 */
#define QPIP_ADMIN_OP_DESTROY_LISTENER 26

/*
 Offer idle TCP QP `AcceptArgs::qp` to listener `handle`. Completes when a connection has
 been established on that QP. Result0/1: the peer's address (bytes 0-7, 8-15 in memory
 order). Result2: the peer's port.
 */
#define QPIP_ADMIN_OP_ACCEPT 27

/*
 Connect TCP QP `handle` ([`ConnectArgs`]). Completes when established (results as for
 accept) or failed ([`ADMIN_STATUS_REFUSED`], [`ADMIN_STATUS_TIMEOUT`],
 [`ADMIN_STATUS_UNREACHABLE`] when an ICMP destination unreachable answered the SYN; a
 peer that stays silent times out). A QP not bound gets an ephemeral port. After a failure (and
 after a connection is reset or times out) the QP is in the error state: its work
 requests complete [`crate::cqe::CQE_STATUS_FLUSHED`].
 */
#define QPIP_ADMIN_OP_CONNECT 28

/*
 Close TCP QP `handle` gracefully (FIN after all queued sends). Completes when the close
 has been sent and acknowledged; if the connection is reset or times out first, with
 [`ADMIN_STATUS_REFUSED`] or [`ADMIN_STATUS_TIMEOUT`]. [`ADMIN_STATUS_BAD_STATE`] if the QP
 carries no connection (never connected, already closed, or in the error state).
 Receiving continues until the peer closes: then, once every byte has been placed, each
 receive WR completes with `byte_len` 0 (end of stream).
 */
#define QPIP_ADMIN_OP_CLOSE 29

/*
 Write [`ConnInfo`] of iWARP QP `handle` to the guest buffer in [`QueryArgs`].
 [`ADMIN_STATUS_BAD_STATE`] for a QP of another framing or one whose connection is not
 set up yet. No results.
 */
#define QPIP_ADMIN_OP_QUERY_CONN 30

/*
 Set an option of TCP QP `handle` ([`SetQpOptArgs`]), as `setsockopt` does for a socket.
 An option set before the QP carries a connection applies to the one it gets (CONNECT or
 ACCEPT); on a connection it takes effect at once. [`ADMIN_STATUS_BAD_PARAM`] for a UDP
 QP, an unknown option or a value out of range. No results. Since minor version 2.
 */
#define QPIP_ADMIN_OP_SET_QP_OPT 31

/*
 Create a tripwire in `ctx` ([`CreateTripwireArgs`]): an event when data placed by the
 network touches a range of a registered region while the tripwire is armed. Result0:
 the tripwire's id. [`ADMIN_STATUS_NO_RESOURCES`] beyond [`MAX_TRIPWIRES`].
 */
#define QPIP_ADMIN_OP_CREATE_TRIPWIRE 32

/*
 Destroy tripwire `handle`.
 */
#define QPIP_ADMIN_OP_DESTROY_TRIPWIRE 33

/*
 Add a route ([`RouteArgs`]): destinations in `dest/prefix_len` that are not on-link go
 to `gateway`, whose link-layer address the device resolves (ARP, NDP) as a neighbour's.
 [`ADMIN_STATUS_BAD_PARAM`] for a malformed route (see [`RouteArgs`]);
 [`ADMIN_STATUS_ADDR_IN_USE`] when a route with the same `dest`, `prefix_len` and
 `metric` exists (delete it first to change its gateway); [`ADMIN_STATUS_NO_RESOURCES`]
 beyond [`MAX_ROUTES`]. No results. Since minor version 3.
 */
#define QPIP_ADMIN_OP_ADD_ROUTE 34

/*
 Delete the route with `dest`, `prefix_len` and `metric` of [`RouteArgs`] (`gateway` is
 not compared). [`ADMIN_STATUS_BAD_HANDLE`] when there is none. No results. Since minor
 version 3.
 */
#define QPIP_ADMIN_OP_DEL_ROUTE 35

/*
 Add a static neighbour ([`NeighborArgs`]): packets to `addr` go to `mac` without ARP or
 NDP, and the entry never ages out nor changes with what the link says, as `ip neigh add
 ... nud permanent`. An entry for `addr` already there (static or learned) is replaced.
 [`ADMIN_STATUS_BAD_PARAM`] for a malformed entry (see [`NeighborArgs`]);
 [`ADMIN_STATUS_NO_RESOURCES`] when the function holds [`MAX_NEIGHBORS`] static entries
 and `addr` is not one of them. No results. Since minor version 4.
 */
#define QPIP_ADMIN_OP_ADD_NEIGH 36

/*
 Delete the static neighbour `addr` of [`NeighborArgs`] (`mac` is not compared): the
 address is resolved again as any other (ARP, NDP). [`ADMIN_STATUS_BAD_HANDLE`] when
 `addr` has no static entry. No results. Since minor version 4.
 */
#define QPIP_ADMIN_OP_DEL_NEIGH 37

/*
 Write the next iWARP connection request held by listener `handle` (one made with
 [`LISTEN_FLAG_IWARP_REQUESTS`]) to the guest buffer in [`QueryArgs`] as a
 [`ConnRequest`] (`len` at least its size). Pending until a request is held, as an
 `ACCEPT` waits for a connection; several may be pending, served in the order they came.
 Result0: the request's id (non-zero), which an `ACCEPT` ([`AcceptArgs::request`]) or a
 [`ADMIN_OP_REJECT`] answers. [`ADMIN_STATUS_BAD_STATE`] on a listener without the
 flag; [`ADMIN_STATUS_CANCELLED`] when the listener is destroyed first. Since minor
 version 7.
 */
#define QPIP_ADMIN_OP_CONN_REQUEST 38

/*
 Reject iWARP connection request [`RejectArgs::request`] of listener `handle`: the MPA
 reply goes out with the reject flag and the private data of [`RejectArgs::iwarp`], then
 the connection is closed gracefully (reset if the peer does not finish the close in
 time). The initiator's `CONNECT` fails with [`ADMIN_STATUS_REFUSED`], its `QUERY_CONN`
 showing [`CONN_INFO_REJECTED`] and the private data. [`ADMIN_STATUS_BAD_HANDLE`] for a
 request the listener does not hold (never handed out, answered already, or dropped
 because its peer reset or closed the connection). No results. Since minor version 7.
 */
#define QPIP_ADMIN_OP_REJECT 39

/*
 Most `ASYNC_EVENT` requests pending at once.
 */
#define QPIP_MAX_ASYNC_REQUESTS 16

/*
 Most events the device holds while no `ASYNC_EVENT` request is pending.
 */
#define QPIP_ASYNC_EVENT_QUEUE 256

/*
 A TCP QP entered the error state on its own (not by a command): the connection was reset
 by the peer or timed out. Its outstanding work requests complete
 [`crate::cqe::CQE_STATUS_FLUSHED`]. Reason: [`ASYNC_REASON_PEER_RESET`],
 [`ASYNC_REASON_TIMEOUT`] or [`ASYNC_REASON_UNREACHABLE`].
 */
#define QPIP_ASYNC_EVENT_QP_ERROR 1

/*
 The peer of a TCP QP closed its direction (a FIN arrived and every byte before it has
 been placed). Reason 0.
 */
#define QPIP_ASYNC_EVENT_PEER_CLOSED 2

/*
 The function's link went up or down ([`crate::regs::STATUS_LINK_UP`] changed). A
 device-level event, about no context: result0 (the context) is 0, which no context
 has, and result1 is the link's state when the event was raised, 1 up or 0 down (reason
 0). It goes to whichever `ASYNC_EVENT` request is pending, like every event; a driver
 reads [`crate::regs::REG_STATUS`] for the state now (events may have been lost, and a
 link that flaps raises one per change). Since minor version 4.
 */
#define QPIP_ASYNC_EVENT_LINK 3

/*
 The peer sent a reset.
 */
#define QPIP_ASYNC_REASON_PEER_RESET 1

/*
 Retransmissions (or keepalives) went unanswered.
 */
#define QPIP_ASYNC_REASON_TIMEOUT 2

/*
 An iWARP QP sent or received a Terminate (which one and why: [`ConnInfo`]).
 */
#define QPIP_ASYNC_REASON_TERMINATE 3

/*
 A memory region the QP's WRs (or, on iWARP, a Read Response it served) lay in was
 deregistered: the connection was reset, the WRs in the region completed
 [`crate::cqe::CQE_STATUS_LOCAL_PROTECTION`] with [`crate::cqe::CQE_DETAIL_REGION_GONE`],
 the others [`crate::cqe::CQE_STATUS_FLUSHED`].
 */
#define QPIP_ASYNC_REASON_REGION_GONE 4

/*
 An ICMP destination unreachable answered the connection's SYN
 ([`ADMIN_STATUS_UNREACHABLE`]).
 */
#define QPIP_ASYNC_REASON_UNREACHABLE 5

/*
 Bit 31 of result2: events were dropped (queue full) before this one.
 */
#define QPIP_ASYNC_FLAG_LOST (1 << 31)

/*
 Success.
 */
#define QPIP_ADMIN_STATUS_OK 0

/*
 Unknown opcode, or non-zero reserved fields.
 */
#define QPIP_ADMIN_STATUS_BAD_OPCODE 1

/*
 An argument is out of range (depth not a power of two, unknown QP type, ...).
 */
#define QPIP_ADMIN_STATUS_BAD_PARAM 2

/*
 No such object in this context (including objects of other contexts).
 */
#define QPIP_ADMIN_STATUS_BAD_HANDLE 3

/*
 A device limit was reached (contexts, QPs, CQs, MRs, listeners, addresses).
 */
#define QPIP_ADMIN_STATUS_NO_RESOURCES 4

/*
 A guest address (page list, ring page, query buffer) is not in guest RAM or misaligned.
 */
#define QPIP_ADMIN_STATUS_BAD_ADDRESS 5

/*
 The object is in use (a CQ with QPs or tripwires attached, a region a tripwire watches
 or holds the arm word of).
 */
#define QPIP_ADMIN_STATUS_BUSY 6

/*
 The address or port is already bound by another QP or listener; or (SET_MAC, ADD_ADDR)
 the MAC or address is already the device's, or another function's on the same adapter.
 */
#define QPIP_ADMIN_STATUS_ADDR_IN_USE 7

/*
 The command does not apply to the object in its current state (connect on a UDP QP,
 accept on a connected QP, bind twice, ...).
 */
#define QPIP_ADMIN_STATUS_BAD_STATE 8

/*
 The object the pending command waited on was destroyed.
 */
#define QPIP_ADMIN_STATUS_CANCELLED 9

/*
 The peer refused the connection (RST in reply to SYN).
 */
#define QPIP_ADMIN_STATUS_REFUSED 10

/*
 The peer did not answer.
 */
#define QPIP_ADMIN_STATUS_TIMEOUT 11

/*
 The destination is unreachable: while the connection was being set up, an ICMP or
 ICMPv6 destination unreachable (from a router on the path, or from the peer: no route,
 host or port unreachable, administratively prohibited) quoted its SYN, as Linux ends a
 `connect` with `EHOSTUNREACH` or `ECONNREFUSED`. Since minor version 3.
 */
#define QPIP_ADMIN_STATUS_UNREACHABLE 12

/*
 The context is the driver's own, never a process's: its doorbell page is mapped into no
 process, and every address its WQEs name is one the driver owns. Only a kernel context may
 create a [`QP_TYPE_RAW_ETH`] QP, and only its WQEs may name guest-physical memory with
 [`crate::wqe::PHYS_LKEY`]. The device cannot tell who wrote a command (every command comes
 from the driver); the flag is the driver's promise, and the driver sets it only for the
 contexts it makes for itself (the network interface's queues).
 */
#define QPIP_CTX_FLAG_KERNEL (1 << 0)

/*
 A UDP queue pair: datagrams.
 */
#define QPIP_QP_TYPE_UDP 1

/*
 A TCP queue pair: a connection.
 */
#define QPIP_QP_TYPE_TCP 2

/*
 A raw Ethernet queue pair: the function's own network interface in the guest kernel
 (its netdev), beside the device's TCP/UDP/IPv6/IPv4 engine. At most one per function,
 in a context created with [`CTX_FLAG_KERNEL`] (else [`ADMIN_STATUS_BAD_PARAM`]; a
 second one: [`ADMIN_STATUS_BUSY`]). `framing` is its receive mode: 0, or
 [`RAW_RX_MERGEABLE`] (minor version 3; an older device refuses it, BAD_PARAM).

 - **Send WQEs** ([`crate::wqe::WQE_OP_SEND`]) gather one Ethernet frame (destination MAC
   first, no FCS) from their SGEs, at most the link MTU + 14 bytes, or a TCP
   super-segment with [`crate::wqe::WQE_FLAG_TSO`]; checksum offload with
   [`crate::wqe::WQE_FLAG_CSUM`] (see [`crate::wqe::RawTxOffload`]). The frame passes the
   same identity checks as the engine's own (the function's MAC and addresses) and goes to
   the link; a frame that fails them, or is malformed, completes with
   [`crate::cqe::CQE_STATUS_BAD_WQE`] and is counted in [`STAT_RAW_TX_REFUSED`].
   A TCP segment or UDP datagram from one of the function's addresses and a port a QP
   or listener of the function holds for that protocol is dropped (the port split: the
   driver keeps kernel sockets off those ports, so such a frame is stale or forged and
   would land in the QP's traffic at the peer) and counted in [`STAT_RAW_TX_PORT_HELD`];
   its WR completes with success, as a NIC's filter drops a frame without failing its
   sender. Only the first fragment of a fragmented datagram carries ports: it is the one
   dropped, and the datagram is never reassembled.
 - **Receive WQEs** name one buffer each; a received frame fills one buffer, and the
   CQE's `byte_len` is the frame's length (from the destination MAC, no FCS), its
   `imm_data` the `CQE_RAW_RX_*` bits. A frame longer than the buffer completes it with
   [`crate::cqe::CQE_STATUS_LOCAL_LENGTH`] and is dropped. A TCP super-frame (another
   function's TSO send through the switch, or what a link with receive offloads merged)
   is cut into frames of at most the MTU first, each in a buffer of its own.
 - **With [`RAW_RX_MERGEABLE`]** a frame may span several receive WQEs, taken in order
   (as virtio-net's mergeable receive buffers): each gets a CQE with the bytes it holds;
   all but the last have [`crate::cqe::CQE_RAW_RX_MORE`]. A TCP super-frame is then
   handed over whole, with [`crate::cqe::CQE_RAW_RX_GSO_TCPV4`] or
   [`crate::cqe::CQE_RAW_RX_GSO_TCPV6`] and, in `src_port`, the segment size it stands
   for (what Linux keeps as `gso_size`) on its last CQE, which also carries
   [`crate::cqe::CQE_RAW_RX_CSUM_OK`]. A frame is only started when enough WQEs are
   posted for all of it (else it is dropped, [`STAT_RAW_RX_NO_WR`]), so a frame's
   pieces are always consecutive. The driver then posts small buffers (a page each) and
   takes a 64 KiB super-frame in 17 of them instead of 45 frames, as a NIC with LRO
   hands its host one.
 - **Steering**: the engine keeps what is its own (segments of its connections and
   listeners, datagrams for its bound UDP ports, echo requests to its addresses) and gives
   the raw QP everything else addressed to the function (its MAC, broadcast, multicast),
   plus copies of ARP, NDP, ICMP errors and IP fragments, which both sides need. While a
   raw QP exists the engine sends no RST and no port unreachable for what it does not
   own: the guest kernel answers for its own ports. Without a posted buffer the frame is
   dropped and counted ([`STAT_RAW_RX_NO_WR`]).
 */
#define QPIP_QP_TYPE_RAW_ETH 3

/*
 [`QP_TYPE_RAW_ETH`]'s `framing`: frames may span receive WQEs, and TCP super-frames
 arrive whole (see there).
 */
#define QPIP_RAW_RX_MERGEABLE 1

/*
 TCP framing for QP-to-QP: each message carries a small header in the byte stream, so
 message boundaries and immediate data survive any segmentation.
 */
#define QPIP_FRAMING_MESSAGE 1

/*
 TCP framing for QP-to-socket: plain bytes; a receive WR completes when full or when a
 pushed segment ends.
 */
#define QPIP_FRAMING_STREAM 2

/*
 TCP framing for RDMA over TCP: iWARP (MPA, DDP and RDMAP; see the device documentation),
 wire-compatible with other iWARP implementations.
 */
#define QPIP_FRAMING_IWARP 3

/*
 TCP keepalive (RFC 9293 §3.8.4): probes sent on an idle connection find a peer that is
 gone, and the connection times out instead of waiting forever. Off until set.
 */
#define QPIP_QP_OPT_KEEPALIVE 1

/*
 A bound UDP QP's connected peer (since minor version 6; `peer_addr`, `peer_port`, the
 keepalive fields 0): datagrams for its port from that peer come to this QP rather than
 to another QP sharing the port ([`BIND_FLAG_SHARE_PORT`]), and while it has a peer it
 gets no other source's datagrams (Linux's connected UDP socket). No peer (all zero)
 undoes it. A TCP or unbound QP: BAD_STATE.
 */
#define QPIP_QP_OPT_UDP_PEER 2

/*
 Largest keepalive idle time and interval, in seconds (Linux's `TCP_KEEPIDLE` bound).
 */
#define QPIP_KEEPALIVE_MAX_SECS 32767

/*
 Most keepalive probes (Linux's `TCP_KEEPCNT` bound).
 */
#define QPIP_KEEPALIVE_MAX_PROBES 127

/*
 The device may write the region (receive buffers need this).
 */
#define QPIP_MR_ACCESS_LOCAL_WRITE (1 << 0)

/*
 A peer may write the region with RDMA Write (iWARP QPs of the same context).
 */
#define QPIP_MR_ACCESS_REMOTE_WRITE (1 << 1)

/*
 A peer may read the region with RDMA Read (iWARP QPs of the same context).
 */
#define QPIP_MR_ACCESS_REMOTE_READ (1 << 2)

/*
 Most tripwires on the device.
 */
#define QPIP_MAX_TRIPWIRES 1024

/*
 `BindArgs::flags`: the UDP QP may share its port with other UDP QPs of the same context
 that were bound with this flag too (a socket's `SO_REUSEADDR` or `SO_REUSEPORT`, which
 Linux asks of every socket on a shared port). A port held by a QP without it, or by
 another context's QP, stays refused (ADDR_IN_USE); so does a port 0 (an ephemeral port
 is never shared) and a TCP QP (BAD_PARAM). Datagrams for a shared port go to the QP
 whose connected peer ([`QP_OPT_UDP_PEER`]) sent them, else to the first-bound QP that
 has no peer.
 */
#define QPIP_BIND_FLAG_SHARE_PORT 1

/*
 `ListenArgs::flags`: the listener serves iWARP the way a CM's passive side does. Once
 TCP is established the device reads each connection's MPA request itself (revision 1
 or 2, RFC 6581's IRD/ORD block; markers are refused with a reject reply) and holds it;
 [`ADMIN_OP_CONN_REQUEST`] hands the requests out, and each is answered by an `ACCEPT`
 naming it ([`AcceptArgs::request`]) or by [`ADMIN_OP_REJECT`]. A plain `ACCEPT` on such
 a listener is [`ADMIN_STATUS_BAD_STATE`]. A request that does not come within the
 responder's MPA request timer, or is malformed, resets its connection
 ([`STAT_IWARP_REQUESTS_DROPPED`]); beyond the backlog a new connection is reset
 ([`STAT_IWARP_REQUESTS_OVERFLOW`]). Its requests may be accepted onto an iWARP QP of any
 context of the function: which one is the driver's decision (it names the QP's context
 in the `ACCEPT`). Since minor version 7.
 */
#define QPIP_LISTEN_FLAG_IWARP_REQUESTS 1

/*
 Every `LISTEN_FLAG_*` bit.
 */
#define QPIP_LISTEN_FLAGS QPIP_LISTEN_FLAG_IWARP_REQUESTS

/*
 Ask for CRC32c on every FPDU (it is on when either end asks).
 */
#define QPIP_IWARP_CONN_CRC (1 << 0)

/*
 Initiator: ask for peer-to-peer mode, so the responder may send first: after the reply
 the device sends the ready-to-receive message the responder chose.
 */
#define QPIP_IWARP_CONN_PEER_TO_PEER (1 << 1)

/*
 Offer RFC 7306 Immediate Data (RDMA Write with immediate) to a qpip peer: an
 initiator's device sets a reserved bit of the MPA request's header (0x01 of its flags
 byte), a responder's device whose end offers too answers with another in its reply
 (0x02). A peer that is not qpip ignores reserved bits (siw sends the request's back,
 which is why the answer is another bit); the private data is the applications' either
 way, and the connection goes on without immediate data (`ConnInfo` says which).
 */
#define QPIP_IWARP_CONN_IMMEDIATE (1 << 2)

/*
 Every `IWARP_CONN_*` bit.
 */
#define QPIP_IWARP_CONN_FLAGS ((QPIP_IWARP_CONN_CRC | QPIP_IWARP_CONN_PEER_TO_PEER) | QPIP_IWARP_CONN_IMMEDIATE)

/*
 Most private data an application sends (256 bytes with the 4-byte IRD/ORD block: the
 most Linux's soft-iWARP accepts).
 */
#define QPIP_IWARP_MAX_PRIVATE_DATA 252

/*
 Most private data a peer may send (MPA's limit); what [`ConnInfo`] holds.
 */
#define QPIP_IWARP_MAX_PEER_PRIVATE_DATA 512

/*
 Largest IRD and ORD a connection may ask for.
 */
#define QPIP_IWARP_MAX_IRD_ORD 32

/*
 Most routes a function holds.
 */
#define QPIP_MAX_ROUTES 32

/*
 Most static neighbours a function holds (those the device started with count too).
 */
#define QPIP_MAX_NEIGHBORS 64

/*
 The initiator asked for CRC32c.
 */
#define QPIP_CONN_REQUEST_CRC (1 << 0)

/*
 The initiator asked for peer-to-peer mode.
 */
#define QPIP_CONN_REQUEST_PEER_TO_PEER (1 << 1)

/*
 The initiator is a qpip device offering RFC 7306 Immediate Data (its request's reserved
 bit; an `ACCEPT` with [`IWARP_CONN_IMMEDIATE`] agrees to it).
 */
#define QPIP_CONN_REQUEST_IMMEDIATE (1 << 2)

/*
 CRC32c is on for the connection's FPDUs.
 */
#define QPIP_CONN_INFO_CRC (1 << 0)

/*
 Peer-to-peer mode was negotiated (a ready-to-receive message was exchanged).
 */
#define QPIP_CONN_INFO_PEER_TO_PEER (1 << 1)

/*
 Both ends are qpip devices that agreed to RFC 7306 Immediate Data.
 */
#define QPIP_CONN_INFO_IMMEDIATE (1 << 2)

/*
 The responder rejected the connection (the `CONNECT` failed with
 [`ADMIN_STATUS_REFUSED`]).
 */
#define QPIP_CONN_INFO_REJECTED (1 << 3)

/*
 `terminate` is one the peer sent (else one this device sent).
 */
#define QPIP_CONN_INFO_TERMINATE_RECEIVED (1 << 4)

/*
 Deepest work or completion queue.
 */
#define QPIP_MAX_QUEUE_DEPTH 32768

/*
 Most pages in one memory region's page list (256 MiB).
 */
#define QPIP_MAX_MR_PAGES 65536

/*
 Most memory regions on the device.
 */
#define QPIP_MAX_MRS 4096

/*
 Most listeners on the device.
 */
#define QPIP_MAX_LISTENERS 256

/*
 Most IPv6 addresses configured on the device (besides the link-local one).
 */
#define QPIP_MAX_ADDRS 8

/*
 The address is the link-local one derived from the MAC.
 */
#define QPIP_ADDR_FLAG_LINK_LOCAL (1 << 0)

/*
 Number of counters in [`Stats`]. `QUERY_STATS` writes the first `len / 8` of them (at
 most this many) and returns the number written in result0, so a buffer sized for an
 older, shorter [`Stats`] still works.
 */
#define QPIP_STATS_COUNT 96

/*
 Admin commands completed.
 */
#define QPIP_STAT_ADMIN_COMMANDS 0

/*
 Admin commands completed with an error status.
 */
#define QPIP_STAT_ADMIN_ERRORS 1

/*
 Doorbell pages found changed by the engine's scan.
 */
#define QPIP_STAT_DOORBELLS 2

/*
 Kick register writes.
 */
#define QPIP_STAT_KICKS 3

/*
 Times the engine went to sleep.
 */
#define QPIP_STAT_SLEEPS 4

/*
 Send WQEs processed.
 */
#define QPIP_STAT_SEND_WQES 5

/*
 Receive WQEs consumed.
 */
#define QPIP_STAT_RECV_WQES 6

/*
 CQEs written.
 */
#define QPIP_STAT_CQES 7

/*
 CQEs with an error status.
 */
#define QPIP_STAT_CQE_ERRORS 8

/*
 Times a CQ was full and completions had to wait.
 */
#define QPIP_STAT_CQ_FULL 9

/*
 CQ interrupts raised.
 */
#define QPIP_STAT_CQ_INTERRUPTS 10

/*
 Protection failures (bad lkey, wrong context, bounds, access rights).
 */
#define QPIP_STAT_PROTECTION_ERRORS 11

/*
 Doorbell values that were out of range (ring index more than depth ahead).
 */
#define QPIP_STAT_BAD_DOORBELLS 12

/*
 UDP datagrams sent.
 */
#define QPIP_STAT_UDP_TX 13

/*
 UDP datagrams delivered to a QP.
 */
#define QPIP_STAT_UDP_RX 14

/*
 UDP datagrams dropped because the bound QP had no receive WR posted.
 */
#define QPIP_STAT_UDP_RX_NO_WR 15

/*
 UDP datagrams dropped because no QP was bound to the destination port.
 */
#define QPIP_STAT_UDP_RX_NO_PORT 16

/*
 UDP datagrams dropped because the bound QP's receive CQ was full.
 */
#define QPIP_STAT_UDP_RX_CQ_FULL 17

/*
 Frames received from the link.
 */
#define QPIP_STAT_NET_RX_FRAMES 18

/*
 Frames sent on the link.
 */
#define QPIP_STAT_NET_TX_FRAMES 19

/*
 Received frames dropped, for any reason (each reason is counted at
 [`STAT_NET_DROP_BASE`] + its index).
 */
#define QPIP_STAT_NET_RX_DROPPED 20

/*
 ICMPv6 echo requests answered.
 */
#define QPIP_STAT_NET_ECHO_REQUESTS 21

/*
 ICMPv6 errors sent (port unreachable, parameter problem ...).
 */
#define QPIP_STAT_NET_ICMP_ERRORS_TX 22

/*
 Sends refused for want of a route (the destination is not on-link).
 */
#define QPIP_STAT_NET_NO_ROUTE 23

/*
 IPv6 fragments received.
 */
#define QPIP_STAT_NET_FRAGMENTS_RX 24

/*
 IPv6 packets reassembled from fragments.
 */
#define QPIP_STAT_NET_REASSEMBLED 25

/*
 Next-hop address resolutions (NDP) that failed.
 */
#define QPIP_STAT_NET_RESOLUTION_FAILED 26

/*
 Asynchronous events delivered (completed `ASYNC_EVENT` requests).
 */
#define QPIP_STAT_ASYNC_EVENTS 27

/*
 Asynchronous events dropped because the device's event queue was full.
 */
#define QPIP_STAT_ASYNC_EVENTS_LOST 28

/*
 TCP connections orphaned: their QP was destroyed after a graceful close and nothing
 was left to lose, so they finish the close without it.
 */
#define QPIP_STAT_TCP_ORPHANS 29

/*
 TCP connections that were to be orphaned, or were, and were reset instead: the device
 held its maximum of orphans already, or new data arrived for an orphan.
 */
#define QPIP_STAT_TCP_ORPHAN_ABORTS 30

/*
 iWARP: tagged FPDUs (RDMA Write and Read Response segments) placed into their region
 before the bytes ahead of them in the stream had come (direct placement out of order).
 */
#define QPIP_STAT_IWARP_OOO_PLACED 31

/*
 First of the per-reason drop counters, in this order: malformed, bad checksum, not for
 us, not IPv6, unsupported next header, unknown option, routing header, bad source, bad
 NDP, hop limit, looped, fragment overlap, bad fragment, reassembly failed, ignored, no
 next header.
 */
#define QPIP_STAT_NET_DROP_BASE 32

/*
 Number of per-reason drop counters.
 */
#define QPIP_STAT_NET_DROP_REASONS 16

/*
 Connections opened by CONNECT (SYN sent).
 */
#define QPIP_STAT_TCP_ACTIVE_OPENS 48

/*
 Connections opened by a listener (SYN received and answered).
 */
#define QPIP_STAT_TCP_PASSIVE_OPENS 49

/*
 Connection attempts that failed (refused, timed out, reset before established).
 */
#define QPIP_STAT_TCP_ATTEMPT_FAILS 50

/*
 Established (or closing) connections reset by the peer.
 */
#define QPIP_STAT_TCP_ESTAB_RESETS 51

/*
 Segments received (valid checksum, for a local address).
 */
#define QPIP_STAT_TCP_SEGS_IN 52

/*
 Segments sent, retransmissions included.
 */
#define QPIP_STAT_TCP_SEGS_OUT 53

/*
 Segments retransmitted.
 */
#define QPIP_STAT_TCP_RETRANS_SEGS 54

/*
 Resets sent.
 */
#define QPIP_STAT_TCP_RSTS_OUT 55

/*
 Fast retransmits / recovery episodes entered (duplicate ACKs or SACK).
 */
#define QPIP_STAT_TCP_FAST_RETRANSMITS 56

/*
 Retransmission timeouts that fired.
 */
#define QPIP_STAT_TCP_RTO_TIMEOUTS 57

/*
 Segments that arrived out of order (placed or buffered ahead of the next expected byte).
 */
#define QPIP_STAT_TCP_OOO_SEGS 58

/*
 Segments that carried only data already received.
 */
#define QPIP_STAT_TCP_DUP_SEGS 59

/*
 Challenge ACKs sent (RFC 5961).
 */
#define QPIP_STAT_TCP_CHALLENGE_ACKS 60

/*
 SYN cookies sent (the SYN backlog was full).
 */
#define QPIP_STAT_TCP_SYN_COOKIES 61

/*
 SYNs or completed handshakes dropped by a listener (backlog full, bad cookie).
 */
#define QPIP_STAT_TCP_LISTEN_DROPS 62

/*
 Connections dropped because retransmissions or keepalives went unanswered.
 */
#define QPIP_STAT_TCP_TIMEOUTS 63

/*
 Frames the raw QP sent (a TSO super-segment counts once).
 */
#define QPIP_STAT_RAW_TX_FRAMES 64

/*
 TSO super-segments the raw QP sent.
 */
#define QPIP_STAT_RAW_TX_TSO 65

/*
 Raw send WQEs refused: a frame too long or too short, bad offload fields, or one that
 failed the identity checks.
 */
#define QPIP_STAT_RAW_TX_REFUSED 66

/*
 Frames given to the raw QP.
 */
#define QPIP_STAT_RAW_RX_FRAMES 67

/*
 Frames for the raw QP dropped because no receive WQE was posted (or its CQ was full).
 */
#define QPIP_STAT_RAW_RX_NO_WR 68

/*
 Frames for the raw QP dropped because they did not fit the posted buffer.
 */
#define QPIP_STAT_RAW_RX_TOO_LONG 69

/*
 Frames given to the raw QP with [`crate::cqe::CQE_RAW_RX_CSUM_OK`].
 */
#define QPIP_STAT_RAW_RX_CSUM_OK 70

/*
 Frames the raw QP sent that the device dropped: TCP or UDP from one of the function's
 addresses and a port a QP or listener of the function holds for that protocol (the port
 split, see [`QP_TYPE_RAW_ETH`]). Their WRs complete with success.
 */
#define QPIP_STAT_RAW_TX_PORT_HELD 71

/*
 iWARP connection requests a [`LISTEN_FLAG_IWARP_REQUESTS`] listener dropped, resetting
 the connection: no request within the MPA request timer, or one that is not a valid
 MPA request. Since minor version 7.
 */
#define QPIP_STAT_IWARP_REQUESTS_DROPPED 72

/*
 Connections such a listener reset because it held its backlog of requests already.
 Since minor version 7.
 */
#define QPIP_STAT_IWARP_REQUESTS_OVERFLOW 73

/*
 Size of one CQE slot.
 */
#define QPIP_CQE_SIZE 64

/*
 Completion of a send WR.
 */
#define QPIP_CQE_OP_SEND 1

/*
 Completion of a receive WR.
 */
#define QPIP_CQE_OP_RECV 2

/*
 Completion of an RDMA Write WR (iWARP QPs).
 */
#define QPIP_CQE_OP_RDMA_WRITE 3

/*
 Completion of an RDMA Read WR (iWARP QPs).
 */
#define QPIP_CQE_OP_RDMA_READ 4

/*
 Completion of a receive WR that an RFC 7306 Immediate Data message took (iWARP QPs):
 `imm_data` holds it, `byte_len` is 0 (the Write before it placed its bytes itself).
 */
#define QPIP_CQE_OP_RECV_IMM 5

/*
 Raw QPs, receives (in `imm_data`): the device checked the frame's IPv4 header checksum
 (if IPv4) and its TCP or UDP checksum, and both were right (Linux's
 `CHECKSUM_UNNECESSARY`). Without it nothing was checked.
 */
#define QPIP_CQE_RAW_RX_CSUM_OK (1 << 0)

/*
 Raw QPs with `admin::RAW_RX_MERGEABLE`, receives (in `imm_data`): the frame goes on
 in the next receive WQE's buffer (its next CQE).
 */
#define QPIP_CQE_RAW_RX_MORE (1 << 1)

/*
 Raw QPs with `admin::RAW_RX_MERGEABLE`, a frame's last CQE (in `imm_data`): the frame
 is a TCP over IPv4 super-frame; `src_port` holds its segment size.
 */
#define QPIP_CQE_RAW_RX_GSO_TCPV4 (1 << 2)

/*
 As [`CQE_RAW_RX_GSO_TCPV4`], TCP over IPv6.
 */
#define QPIP_CQE_RAW_RX_GSO_TCPV6 (1 << 3)

/*
 A tripwire fired (see `admin::CreateTripwireArgs`): not the completion of a WR.
 */
#define QPIP_CQE_OP_TRIPWIRE 16

/*
 The work request completed.
 */
#define QPIP_CQE_STATUS_SUCCESS 0

/*
 The data did not fit: a receive buffer too small (the datagram is dropped), or a send
 larger than the QP allows.
 */
#define QPIP_CQE_STATUS_LOCAL_LENGTH 1

/*
 Protection: unknown lkey, a region of another context, an address outside the region,
 or a missing access right. Nothing was read or written.
 */
#define QPIP_CQE_STATUS_LOCAL_PROTECTION 2

/*
 Unknown opcode, or an opcode that does not belong in this ring.
 */
#define QPIP_CQE_STATUS_BAD_OPCODE 3

/*
 A malformed WQE: too many SGEs, inline data too long, unknown flags, reserved bits set.
 */
#define QPIP_CQE_STATUS_BAD_WQE 4

/*
 The QP was destroyed or entered the error state before the WR was processed.
 */
#define QPIP_CQE_STATUS_FLUSHED 5

/*
 The destination is not usable (UDP: unspecified or multicast address, port 0;
 a QP that is not bound or not connected).
 */
#define QPIP_CQE_STATUS_BAD_DEST 6

/*
 iWARP QPs: the peer refused an access to its memory (a Terminate reporting a
 protection error: unknown rkey, out of bounds, missing right), or this device refused
 one of the peer's. `detail` holds the Terminate's layer, type and code
 ([`cqe_detail_terminate`]).
 */
#define QPIP_CQE_STATUS_REMOTE_ACCESS 7

/*
 iWARP QPs: the connection ended with a Terminate for any other error; `detail` as for
 [`CQE_STATUS_REMOTE_ACCESS`].
 */
#define QPIP_CQE_STATUS_REMOTE_OPERATION 8

/*
 No detail.
 */
#define QPIP_CQE_DETAIL_NONE 0

/*
 No memory region has this lkey.
 */
#define QPIP_CQE_DETAIL_BAD_LKEY 1

/*
 The region belongs to another context.
 */
#define QPIP_CQE_DETAIL_OTHER_CONTEXT 2

/*
 The address range is not inside the region.
 */
#define QPIP_CQE_DETAIL_OUT_OF_BOUNDS 3

/*
 The region lacks the access right the operation needs.
 */
#define QPIP_CQE_DETAIL_ACCESS 4

/*
 The producer index ran more than the ring's depth ahead.
 */
#define QPIP_CQE_DETAIL_BAD_INDEX 5

/*
 The destination is not reachable: not one of the device's own addresses, and the device
 has no network link to send it on.
 */
#define QPIP_CQE_DETAIL_NO_ROUTE 6

/*
 The QP is not bound to a local port (UDP), or not connected (TCP).
 */
#define QPIP_CQE_DETAIL_NOT_BOUND 7

/*
 The destination address or port is not usable (unspecified, multicast, port 0).
 */
#define QPIP_CQE_DETAIL_BAD_ADDRESS 8

/*
 The WR's memory region was deregistered while the WR held it: the region is invalid at
 once, so the WR fails (and its QP moves to the error state) instead of moving a byte to
 or from pages the guest may have given to someone else.
 */
#define QPIP_CQE_DETAIL_REGION_GONE 9

/*
 A successful receive on an iWARP QP: the Send asked for a solicited event (Send with
 Solicited Event).
 */
#define QPIP_CQE_DETAIL_SOLICITED (1 << 30)

/*
 Set in `detail` when it carries a Terminate ([`cqe_detail_terminate`]).
 */
#define QPIP_CQE_DETAIL_TERMINATE (1 << 31)

/*
 Offset of the page's change counter (u32, producer-written).
 */
#define QPIP_DB_CHANGE_COUNT 0

/*
 Offset of the engine's sleeping flag (u32, device-written; non-zero = asleep, kick me).
 */
#define QPIP_DB_ENGINE_SLEEPING 4

/*
 Offset of the first QP doorbell slot. QP slot `s` is at `DB_QP_BASE + s * DB_QP_STRIDE`.
 */
#define QPIP_DB_QP_BASE 64

/*
 Size of one QP doorbell slot: `sq_tail` (u32) then `rq_tail` (u32).
 */
#define QPIP_DB_QP_STRIDE 8

/*
 Offset of `sq_tail` inside a QP slot: the send queue producer index.
 */
#define QPIP_DB_QP_SQ_TAIL 0

/*
 Offset of `rq_tail` inside a QP slot: the receive queue producer index.
 */
#define QPIP_DB_QP_RQ_TAIL 4

/*
 Number of QP slots in a page, and so the most QPs a context can have.
 */
#define QPIP_DB_QP_SLOTS 248

/*
 Offset of the first CQ doorbell slot. CQ slot `s` is at `DB_CQ_BASE + s * DB_CQ_STRIDE`.
 */
#define QPIP_DB_CQ_BASE 2048

/*
 Size of one CQ doorbell slot: `cq_head` (u32) then `arm_seq` (u32).
 */
#define QPIP_DB_CQ_STRIDE 8

/*
 Offset of `cq_head` inside a CQ slot: how many CQEs the consumer has consumed
 (free-running). The device never overwrites an unconsumed CQE: when the ring is full it
 stops completing to that CQ, and the QPs feeding it stall (it counts the event) until the
 consumer makes room.
 */
#define QPIP_DB_CQ_HEAD 0

/*
 Offset of `arm_seq` inside a CQ slot. To arm a CQ the consumer increments `arm_seq` (any
 change arms it). The device then raises the CQ's MSI-X vector exactly once: as soon as
 there is a CQE beyond `cq_head` (immediately, if there already is one). Further CQEs do not
 interrupt until the CQ is armed again.

 With [`CQ_ARM_SOLICITED`] set in the value written, only a *solicited* CQE raises it: a
 receive completion, a completion with an error status, or a tripwire event — anything
 but the successful completion of a send-queue WR (`ibv_req_notify_cq` with
 `solicited_only`, in spirit: a socket's reader waits for bytes, not for the peer's
 acknowledgements of what it sent). The sequence is then the other 31 bits: a consumer
 counts in those and sets or clears the flag per arm.
 */
#define QPIP_DB_CQ_ARM_SEQ 4

/*
 In a value written to `arm_seq`: this arm is for solicited CQEs only.
 */
#define QPIP_CQ_ARM_SOLICITED 2147483648

/*
 The sequence bits of `arm_seq`.
 */
#define QPIP_CQ_ARM_SEQ_MASK 2147483647

/*
 Number of CQ slots in a page, and so the most CQs a context can have.
 */
#define QPIP_DB_CQ_SLOTS 256

/*
 PCI vendor ID (config offset 0x00).
 */
#define QPIP_PCI_VENDOR_ID 4660

/*
 PCI device ID (config offset 0x02).
 */
#define QPIP_PCI_DEVICE_ID 20816

/*
 Subsystem vendor ID (config offset 0x2c).
 */
#define QPIP_PCI_SUBSYSTEM_VENDOR_ID 4660

/*
 Subsystem ID (config offset 0x2e).
 */
#define QPIP_PCI_SUBSYSTEM_ID 1

/*
 Class code, 24 bits: base class 0x02 (network), subclass 0x80 (other), prog-if 0.
 */
#define QPIP_PCI_CLASS_CODE 163840

/*
 Revision ID (config offset 0x08). Bumped with hardware-visible changes of the function
 itself; the interface version is in the [`crate::regs::REG_VERSION`] register.
 Revision 2 added the Advanced Features capability ([`PCI_CAP_AF_OFFSET`]); revision 3
 dropped the doorbell BAR (BAR2/3): the function has one BAR, [`CTRL_BAR`].
 */
#define QPIP_PCI_REVISION_ID 3

/*
 BAR holding the control registers and the MSI-X table and PBA. Every access to it traps
 to the device (it is never mmapped), so writes here are synchronous but slow: use it for
 bring-up, the admin doorbell and the kick register, never on the fast path.
 */
#define QPIP_CTRL_BAR 0

/*
 Size of [`CTRL_BAR`] in bytes (32-bit, non-prefetchable memory BAR).
 */
#define QPIP_CTRL_BAR_SIZE 16384

/*
 Size of one doorbell page. A context's doorbell page is a page of guest RAM that the
 driver allocates and names when it creates the context (see [`crate::doorbell`]), so a
 process can be mapped its own page and nothing else.

 Why not a BAR: QEMU's vfio-user client sends BAR writes as posted messages (the vCPU
 does not wait for the device) only while no region of the device is mmappable; one
 mmappable BAR makes every trapped write, the kick among them, a synchronous round trip
 with the vCPU held. With the doorbells in guest RAM the function has no mmappable
 region at all, and a kick costs the guest one posted write.
 */
#define QPIP_DOORBELL_PAGE_SIZE 4096

/*
 The most contexts (and so doorbell pages) the device serves at once.
 */
#define QPIP_DOORBELL_PAGES 64

/*
 Number of MSI-X vectors. Vector 0 is for the admin queue and asynchronous events; the
 others are for completion queues.
 */
#define QPIP_MSIX_VECTORS 16

/*
 Offset of the MSI-X table inside [`CTRL_BAR`] (16 bytes per vector).
 */
#define QPIP_MSIX_TABLE_OFFSET 8192

/*
 Offset of the MSI-X pending bit array inside [`CTRL_BAR`].
 */
#define QPIP_MSIX_PBA_OFFSET 12288

/*
 Offset of the MSI-X capability in PCI config space.
 */
#define QPIP_PCI_CAP_MSIX_OFFSET 64

/*
 Offset of the PCI Advanced Features capability (ID 0x13) in config space: the
 function-level reset of conventional PCI. Its capabilities byte advertises FLR and
 "transactions pending"; writing 1 to the initiate-FLR bit of its control byte resets the
 function (as `regs::CONTROL_RESET` does, and config space too) before the write
 completes. The MSI-X capability's next pointer leads here; this is the last one.
 */
#define QPIP_PCI_CAP_AF_OFFSET 80

/*
 Identity (RO): [`IDENT_MAGIC`]. The first thing a driver reads: anything else means this
 is not a qpip function or the BAR is not mapped.
 */
#define QPIP_REG_IDENT 0

/*
 The value of [`REG_IDENT`]: the bytes "QPIP" in memory order.
 */
#define QPIP_IDENT_MAGIC 1346981969

/*
 Interface version (RO): major in bits 31..16, minor in bits 15..0.
 See [`crate::ABI_VERSION_MAJOR`].
 */
#define QPIP_REG_VERSION 4

/*
 Shift of the major number in [`REG_VERSION`].
 */
#define QPIP_VERSION_MAJOR_SHIFT 16

/*
 Mask of the minor number in [`REG_VERSION`].
 */
#define QPIP_VERSION_MINOR_MASK 65535

/*
 The most contexts the device serves at once ([`crate::pci::DOORBELL_PAGES`]) (RO).
 */
#define QPIP_REG_DOORBELL_PAGES 8

/*
 Number of MSI-X vectors (RO).
 */
#define QPIP_REG_MSIX_VECTORS 12

/*
 Device control (RW).
 */
#define QPIP_REG_CONTROL 16

/*
 [`REG_CONTROL`] bit: the driver enables the device. Cleared by reset.
 */
#define QPIP_CONTROL_ENABLE (1 << 0)

/*
 [`REG_CONTROL`] bit: write 1 to reset the device (same effect as a function-level reset).
 Self-clearing: reads back as 0 once the reset is complete, which it is by the time the
 write returns.
 */
#define QPIP_CONTROL_RESET (1 << 1)

/*
 Device status (RO).
 */
#define QPIP_REG_STATUS 20

/*
 [`REG_STATUS`] bit: the device is enabled and ready (mirrors [`CONTROL_ENABLE`]).
 */
#define QPIP_STATUS_READY (1 << 0)

/*
 Scratch register (RW): no effect on the device. Lets a driver or test prove that
 trapped writes reach the device and read back.
 */
#define QPIP_REG_SCRATCH 24

/*
 Number of resets the device has performed since it started (RO, wraps). Lets a driver
 and tests observe that a reset really happened.
 */
#define QPIP_REG_RESET_COUNT 28

/*
 Interrupt test (WO): writing a vector number `n` makes the device raise MSI-X vector `n`
 once (if MSI-X is enabled and the vector is set up). Lets a driver prove at bring-up
 that interrupts really arrive, like the "interrupt cause set" registers of real NICs.
 A write of a number >= the vector count is ignored and counted.
 */
#define QPIP_REG_IRQ_TEST 32

/*
 Admin submission queue base, guest-physical, low 32 bits (RW). Must be 64-byte aligned.
 Written while the admin queue is disabled ([`REG_ADMIN_DEPTH`] = 0); see [`REG_ADMIN_DEPTH`].
 */
#define QPIP_REG_ADMIN_SQ_BASE_LO 64

/*
 Admin submission queue base, high 32 bits (RW).
 */
#define QPIP_REG_ADMIN_SQ_BASE_HI 68

/*
 Admin completion queue base, guest-physical, low 32 bits (RW). Must be 64-byte aligned.
 */
#define QPIP_REG_ADMIN_CQ_BASE_LO 72

/*
 Admin completion queue base, high 32 bits (RW).
 */
#define QPIP_REG_ADMIN_CQ_BASE_HI 76

/*
 Admin queue depth in entries (RW), the same for both rings: a power of two from 2 to
 [`crate::admin::ADMIN_MAX_DEPTH`]. Writing a valid depth enables the admin queue with the
 bases written before (both rings must lie in guest RAM, or [`STATUS_ADMIN_ERROR`] is set
 and the queue stays disabled); writing 0 disables it. Enabling resets both indices to 0.
 */
#define QPIP_REG_ADMIN_DEPTH 80

/*
 Admin submission doorbell (WO): the driver writes its producer index (free-running,
 wraps at 2^32) after writing the commands. Reads as 0.
 */
#define QPIP_REG_ADMIN_SQ_TAIL 84

/*
 Admin completion consumer index (RW): the driver writes how many completions it has
 consumed (free-running). The device never overwrites a completion the driver has not
 consumed: it stops taking commands while the completion ring is full.
 */
#define QPIP_REG_ADMIN_CQ_HEAD 88

/*
 [`REG_STATUS`] bit: the admin queue is enabled.
 */
#define QPIP_STATUS_ADMIN_ENABLED (1 << 1)

/*
 [`REG_STATUS`] bit: the last write to [`REG_ADMIN_DEPTH`] was refused (bad depth, or a
 ring outside guest RAM or misaligned). Cleared by the next write of a valid setup.
 */
#define QPIP_STATUS_ADMIN_ERROR (1 << 2)

/*
 [`REG_STATUS`] bit: the function has failed. The device met a fault of its own while
 serving this function (in qpipd, a panic in its engine: a bug, which an arithmetic
 overflow also becomes) and dropped the function's state: every object is gone, the device
 no longer reads or writes the guest's memory, and admin commands get no completions.
 Other functions of the adapter are not affected. A function reset ([`CONTROL_RESET`], an
 FLR) brings the function back with no objects, as after start, and clears the bit; so
 does clearing [`CONTROL_ENABLE`]. A driver that sees it should log it and reset.
 */
#define QPIP_STATUS_FAILED (1 << 3)

/*
 [`REG_STATUS`] bit: the function's link is up — frames can go out of the adapter and
 come in, as a NIC's port reports its carrier. What "up" means depends on the device's
 network: a host TAP that is administratively up and running; a port of the adapter's
 embedded switch whose uplink is up (or a switch with no uplink: its functions still
 reach each other), as SR-IOV VFs in "auto" link mode; no network at all is down. The
 device samples its link a few times a second, so a change shows here within a
 fraction of a second; each change also raises [`crate::admin::ASYNC_EVENT_LINK`].
 While the link is down, frames for it are dropped and counted, never queued. Not
 changed by enable or reset (the link is not the function's state). Since minor
 version 4: an older device never sets it, and a driver should take its link as up.
 */
#define QPIP_STATUS_LINK_UP (1 << 4)

/*
 End of the register file: offsets from here up to [`KICK_PAGE_OFFSET`] are reserved
 (read as 0, writes ignored).
 */
#define QPIP_REGS_END 96

/*
 Offset in [`crate::pci::CTRL_BAR`] of the kick page. Unlike the registers above it holds
 nothing privileged, so a driver may map this one page into every process that owns a
 context. Any 32-bit write to [`KICK_PAGE_OFFSET`] + [`KICK`] wakes a sleeping engine
 (see [`crate::doorbell`] for when a producer must kick). The value written is ignored.
 */
#define QPIP_KICK_PAGE_OFFSET 4096

/*
 Offset of the kick register inside the kick page.
 */
#define QPIP_KICK 0

/*
 Size of one WQE slot in a send or receive ring.
 */
#define QPIP_WQE_SIZE 128

/*
 Most scatter/gather entries in one WQE.
 */
#define QPIP_MAX_SGE 5

/*
 Most bytes of inline data in one send WQE (the SGE area).
 */
#define QPIP_MAX_INLINE 80

/*
 Offset of the SGE array (or inline data) in a WQE slot.
 */
#define QPIP_WQE_SGE_OFFSET 48

/*
 Send the gathered bytes (a UDP datagram, or a TCP message/stream chunk; on an iWARP QP
 an RDMAP Send).
 */
#define QPIP_WQE_OP_SEND 1

/*
 A receive buffer: the SGEs are filled with incoming data in order.
 */
#define QPIP_WQE_OP_RECV 2

/*
 iWARP QPs: write the gathered (or inline) bytes into the peer's region at the remote
 address and rkey of [`Wqe::remote`]. Completes when the peer acknowledged every byte.
 With [`WQE_FLAG_IMM`], an RFC 7306 Immediate Data message carrying `imm_data` follows
 the Write and completes the peer's next receive WR; else `imm_data` must be 0.
 */
#define QPIP_WQE_OP_RDMA_WRITE 3

/*
 iWARP QPs: read the peer's region at [`Wqe::remote`] into the SGEs (their total length
 is the read's size; never inline). Completes when the last byte has been placed.
 `imm_data` must be 0.
 */
#define QPIP_WQE_OP_RDMA_READ 4

/*
 The data is inline in the WQE, not in registered memory.
 */
#define QPIP_WQE_FLAG_INLINE (1 << 0)

/*
 iWARP QPs, `SEND` only: a Send with Solicited Event (the peer's CQE says so).
 */
#define QPIP_WQE_FLAG_SOLICITED (1 << 1)

/*
 iWARP QPs, `RDMA_WRITE` only: the Write is followed by `imm_data` in an RFC 7306
 Immediate Data message (only on a connection both ends set up for it:
 `admin::IWARP_CONN_IMMEDIATE`; else the WR completes `BAD_WQE`).
 */
#define QPIP_WQE_FLAG_IMM (1 << 2)

/*
 Raw QPs, `SEND` only: checksum offload as Linux's `CHECKSUM_PARTIAL`. The device sums
 the frame from `csum_start` to its end (ones' complement, RFC 1071), adds the 16-bit
 value already at `csum_start + csum_offset` (the pseudo-header sum the sender put there)
 and stores the folded, complemented result there. See [`RawTxOffload`].
 */
#define QPIP_WQE_FLAG_CSUM (1 << 3)

/*
 Raw QPs, `SEND` only: the frame is a TCP super-segment (IPv4 or IPv6, no IP options or
 extension headers) with a payload longer than one segment; the device cuts it into
 segments of at most `mss` payload bytes, each with its own IP length, IPv4 id and
 header checksum, TCP sequence number, flags (FIN and PSH on the last only, CWR on the
 first only) and TCP checksum. Needs [`WQE_FLAG_CSUM`]. At most 65,535 bytes of IP
 packet. See [`RawTxOffload`].
 */
#define QPIP_WQE_FLAG_TSO (1 << 4)

/*
 The lkey that names guest-physical memory: an SGE's `addr` is a guest-physical
 address, checked against guest RAM, with no region. Only in WQEs of a context created
 with [`crate::admin::CTX_FLAG_KERNEL`]; elsewhere it is an unknown lkey
 ([`crate::cqe::CQE_DETAIL_BAD_LKEY`]). No memory region ever has this key.
 */
#define QPIP_PHYS_LKEY 0

/*
 [`RawTxOffload::gso_type`]: a TCP over IPv4 super-segment.
 */
#define QPIP_RAW_GSO_TCPV4 1

/*
 [`RawTxOffload::gso_type`]: a TCP over IPv6 super-segment.
 */
#define QPIP_RAW_GSO_TCPV6 2

/*
 Size of [`MsgHeader`] in the stream.
 */
#define QPIP_MSG_HEADER_SIZE 8

/*
 An admin command (64 bytes). `body` holds the command's arguments, laid out as the
 `*Args` structure named in the opcode's documentation; unused bytes must be 0.
 */
struct qpip_admin_cmd {
  /*
   One of the `ADMIN_OP_*` opcodes.
   */
  uint16_t opcode;
  /*
   Reserved, 0.
   */
  uint16_t flags;
  /*
   Chosen by the driver, echoed in the completion.
   */
  uint32_t cmd_id;
  /*
   The context the command acts in (object commands; 0 otherwise).
   */
  uint32_t ctx;
  /*
   The object the command acts on (destroy, accept, ...; 0 otherwise).
   */
  uint32_t handle;
  /*
   The command's arguments.
   */
  uint8_t body[48];
};

/*
 An admin completion (32 bytes).
 */
struct qpip_admin_cqe {
  /*
   The `cmd_id` of the command this completes.
   */
  uint32_t cmd_id;
  /*
   One of the `ADMIN_STATUS_*` codes.
   */
  uint16_t status;
  /*
   The opcode of the command this completes.
   */
  uint16_t opcode;
  /*
   First result (see each opcode), 0 on error.
   */
  uint64_t result0;
  /*
   Second result (see each opcode), 0 on error.
   */
  uint64_t result1;
  /*
   Third result (see each opcode), 0 on error.
   */
  uint32_t result2;
  /*
   Reserved, 0.
   */
  uint8_t reserved[3];
  /*
   Phase bit (bit 0), written last. See the module documentation.
   */
  uint8_t phase;
};

/*
 Arguments of `QUERY_DEVICE` and `QUERY_STATS`.
 */
struct qpip_query_args {
  /*
   Guest-physical address of the buffer the device writes (8-byte aligned, must not
   cross a page boundary).
   */
  uint64_t buf;
  /*
   Size of the buffer; at least the size of the structure written (`QUERY_STATS`: at
   least 8, and it writes what fits).
   */
  uint32_t len;
  uint8_t reserved[36];
};

/*
 Arguments of `CREATE_CTX`.
 */
struct qpip_create_ctx_args {
  /*
   Guest-physical address of the context's doorbell page: 4 KiB, 4 KiB aligned, in
   guest RAM, zeroed by the driver, and the context's alone (the driver maps it into the
   owning process and nowhere else). The device polls it and writes only its
   `engine_sleeping` word, until the context is destroyed or the device reset; the
   driver must not free the page before then. A page that is not aligned or not in RAM
   fails the command with [`ADMIN_STATUS_BAD_ADDRESS`].
   */
  uint64_t doorbell_page;
  /*
   `CTX_FLAG_*` bits; unknown bits fail the command with [`ADMIN_STATUS_BAD_PARAM`].
   */
  uint32_t flags;
  uint8_t reserved[36];
};

/*
 Arguments of `SET_MAC`.
 */
struct qpip_set_mac_args {
  /*
   A unicast MAC (the group bit must be clear).
   */
  uint8_t mac[6];
  uint8_t reserved[42];
};

/*
 Arguments of `ADD_ADDR` and `DEL_ADDR`.
 */
struct qpip_addr_args {
  /*
   A unicast IPv6 address, network byte order; an IPv4 address in its IPv4-mapped form
   `::ffff:a.b.c.d`.
   */
  uint8_t addr[16];
  /*
   Prefix length, 1..=128 (ignored by `DEL_ADDR`); counted over the 128 bits for an
   IPv4-mapped address, so 97..=128 (an IPv4 /24 is 120).
   */
  uint8_t prefix_len;
  uint8_t reserved[31];
};

/*
 Arguments of `CREATE_CQ`.
 */
struct qpip_create_cq_args {
  /*
   Guest-physical address of the ring's page list: `npages` u64 page addresses, each
   4 KiB aligned and in guest RAM. The list itself is contiguous and 8-byte aligned.
   */
  uint64_t page_list;
  /*
   Number of pages: exactly enough for `depth` CQEs of [`crate::cqe::CQE_SIZE`] bytes.
   */
  uint32_t npages;
  /*
   Ring depth in CQEs: a power of two, 2..=[`MAX_QUEUE_DEPTH`].
   */
  uint32_t depth;
  /*
   MSI-X vector raised when the armed CQ gets a completion (1..vectors; 0 is the admin
   vector and is refused).
   */
  uint32_t vector;
  uint8_t reserved[28];
};

/*
 Arguments of `CREATE_QP`.
 */
struct qpip_create_qp_args {
  /*
   Page list of the send ring (as in [`CreateCqArgs`]), `sq_depth` WQEs of
   [`crate::wqe::WQE_SIZE`] bytes.
   */
  uint64_t sq_page_list;
  /*
   Page list of the receive ring, `rq_depth` WQEs.
   */
  uint64_t rq_page_list;
  /*
   CQ (of the same context) for send completions.
   */
  uint32_t send_cq;
  /*
   CQ (of the same context) for receive completions; may be the same as `send_cq`.
   */
  uint32_t recv_cq;
  /*
   Send ring depth: a power of two, 2..=[`MAX_QUEUE_DEPTH`].
   */
  uint32_t sq_depth;
  /*
   Receive ring depth: a power of two, 2..=[`MAX_QUEUE_DEPTH`].
   */
  uint32_t rq_depth;
  /*
   Pages in `sq_page_list`.
   */
  uint16_t sq_npages;
  /*
   Pages in `rq_page_list`.
   */
  uint16_t rq_npages;
  /*
   [`QP_TYPE_UDP`], [`QP_TYPE_TCP`] or (kernel contexts only) [`QP_TYPE_RAW_ETH`].
   */
  uint8_t qp_type;
  /*
   [`FRAMING_MESSAGE`], [`FRAMING_STREAM`] or [`FRAMING_IWARP`] (TCP only; 0 for UDP
   and raw QPs).
   */
  uint8_t framing;
  uint8_t reserved[10];
};

/*
 Arguments of `REG_MR`.
 */
struct qpip_reg_mr_args {
  /*
   Guest-physical address of the page list (u64 page addresses, 4 KiB aligned).
   */
  uint64_t page_list;
  /*
   The virtual address the region starts at in the owning process: WQEs address the
   region's bytes as `iova .. iova + length`.
   */
  uint64_t iova;
  /*
   Length in bytes, 1..=[`MAX_MR_PAGES`] pages' worth.
   */
  uint64_t length;
  /*
   Pages in the list: exactly those covering `first_page_offset .. + length`.
   */
  uint32_t npages;
  /*
   Offset of `iova` within the first page (`iova % 4096`).
   */
  uint32_t first_page_offset;
  /*
   `MR_ACCESS_*` bits. Local read (the device gathering send data) is always allowed.
   */
  uint32_t access;
  uint8_t reserved[12];
};

/*
 Arguments of `BIND`.
 */
struct qpip_bind_args {
  /*
   Local address (network order); all zeros binds every address of the device.
   */
  uint8_t addr[16];
  /*
   Local port (host order); 0 asks for an ephemeral port.
   */
  uint16_t port;
  /*
   A TCP QP about to CONNECT from a port its driver chose (the guest kernel's ephemeral
   port, not the program's): the peer (network order) and its port (host order), else
   all zero. The device then refuses (ADDR_IN_USE) a non-zero `port` from which it
   still holds a connection to this peer that CONNECT could not take over (TIME-WAIT
   without timestamps, or not closed yet), so that the driver can choose another port
   before anything fails, as Linux's connect does for an unbound socket. Since minor
   version 5 (an older device refuses them as reserved bytes: BAD_OPCODE); a peer
   address without a port, or not unicast, is BAD_PARAM.
   */
  uint8_t peer_addr[16];
  uint16_t peer_port;
  /*
   [`BIND_FLAG_SHARE_PORT`] (since minor version 6), else 0.
   */
  uint16_t flags;
  uint8_t reserved[10];
};

/*
 Arguments of `LISTEN`.
 */
struct qpip_listen_args {
  /*
   Local address (network order); all zeros listens on every address.
   */
  uint8_t addr[16];
  /*
   Local port (host order), non-zero.
   */
  uint16_t port;
  /*
   `LISTEN_FLAG_*` bits (since minor version 7; an unknown bit is
   [`ADMIN_STATUS_BAD_PARAM`]).
   */
  uint16_t flags;
  /*
   Connections the device completes the handshake for before an accept takes them
   (with [`LISTEN_FLAG_IWARP_REQUESTS`]: connection requests it holds, read or being
   read, before they are answered).
   */
  uint32_t backlog;
  uint8_t reserved[24];
};

/*
 What an iWARP QP's `CONNECT` or `ACCEPT` brings to the MPA exchange (16 bytes; all zero
 on QPs of other framings, else [`ADMIN_STATUS_BAD_PARAM`]).

 The device reads the private data when it takes the command (the buffer may be freed
 once the command completes), sends it after the enhanced IRD/ORD block of MPA revision
 2, and keeps the peer's for [`ADMIN_OP_QUERY_CONN`].
 */
struct qpip_iwarp_conn_args {
  /*
   Guest-physical address of the private data (must not cross a page boundary); 0 when
   `pd_len` is 0.
   */
  uint64_t pd_addr;
  /*
   Bytes of private data, 0..=[`IWARP_MAX_PRIVATE_DATA`].
   */
  uint16_t pd_len;
  /*
   RDMA Read Requests this end serves at once (its IRD), 0..=[`IWARP_MAX_IRD_ORD`]; the
   connection gets the smaller of this and the peer's ORD.
   */
  uint8_t ird;
  /*
   RDMA Reads this end keeps outstanding (its ORD), 0..=[`IWARP_MAX_IRD_ORD`]; the
   connection gets the smaller of this and the peer's IRD.
   */
  uint8_t ord;
  /*
   `IWARP_CONN_*` bits.
   */
  uint32_t flags;
};

/*
 Arguments of `ACCEPT`.
 */
struct qpip_accept_args {
  /*
   An idle TCP QP of the command's context, to carry the accepted connection.
   */
  uint32_t qp;
  /*
   Non-zero: the id of a connection request ([`ADMIN_OP_CONN_REQUEST`]) of listener
   `handle` (a [`LISTEN_FLAG_IWARP_REQUESTS`] one, of any context) that `qp`, an idle
   iWARP QP, answers. The ACCEPT completes once the MPA reply is out, as any iWARP
   ACCEPT. [`ADMIN_STATUS_BAD_HANDLE`] for a request the listener does not hold
   (answered already, or dropped: its peer reset or closed the connection);
   [`ADMIN_STATUS_BAD_STATE`] for a QP that is not an idle iWARP QP. Zero: a plain
   ACCEPT (the listener's context only). Since minor version 7.
   */
  uint32_t request;
  /*
   iWARP QPs: the connection parameters of the MPA reply; all zero on other QPs.
   */
  struct qpip_iwarp_conn_args iwarp;
  uint8_t reserved[24];
};

/*
 Arguments of `CONNECT`.
 */
struct qpip_connect_args {
  /*
   Remote address, network order.
   */
  uint8_t addr[16];
  /*
   Remote port, host order.
   */
  uint16_t port;
  uint8_t reserved0[6];
  /*
   iWARP QPs: the connection parameters of the MPA request; all zero on other QPs.
   */
  struct qpip_iwarp_conn_args iwarp;
  uint8_t reserved[8];
};

/*
 What `QUERY_CONN` writes (32 + 512 = 544 bytes): an iWARP QP's connection as MPA set it
 up. Valid once its `CONNECT` or `ACCEPT` has completed (successfully, or refused by a
 reject reply: then `flags` has [`CONN_INFO_REJECTED`] and the peer's private data is
 here), and kept until the QP is destroyed.
 */
struct qpip_conn_info {
  /*
   `CONN_INFO_*` bits.
   */
  uint32_t flags;
  /*
   The connection's IRD (Read Requests this end serves at once).
   */
  uint16_t ird;
  /*
   The connection's ORD (Reads this end keeps outstanding).
   */
  uint16_t ord;
  /*
   The MPA revision both ends use (1 or 2).
   */
  uint8_t mpa_revision;
  uint8_t reserved0;
  /*
   Bytes of the peer's private data in `private_data` (the IRD/ORD block not counted).
   */
  uint16_t pd_len;
  /*
   Why the QP left the connection: a Terminate sent or received, as layer (bits
   12-15), error type (8-11) and error code (0-7) of RFC 5040; 0 if none.
   */
  uint32_t terminate;
  uint8_t reserved[16];
  /*
   The peer's private data.
   */
  uint8_t private_data[512];
};

/*
 Arguments of `CREATE_TRIPWIRE`.

 The tripwire watches `len` bytes at virtual address `addr` of region `lkey`. It is armed
 while the u32 **arm word** at virtual address `arm_addr` of region `arm_lkey` (4-byte
 aligned; the owner writes it, the device only reads it) differs from the value it held
 when the tripwire last fired (0 at creation: a new tripwire is disarmed until its owner
 changes the word, typically by incrementing it). When data placed by the network — an
 RDMA Write, a Read Response, a Send into a receive buffer, on an iWARP QP of the same
 context — touches the range while it is armed, the device writes one completion to CQ
 `cq`: opcode [`crate::cqe::CQE_OP_TRIPWIRE`], `wr_id` = `tag`, `qp` = the tripwire's
 id, `byte_len` = the bytes of the range that placement wrote, and `src_addr` bytes 0-7
 (little-endian) = the virtual address of the first of them; then it is disarmed. A
 consumer that arms and then finds the data already there must not wait for the event
 (arm, then look — as with a CQ).
 */
struct qpip_create_tripwire_args {
  uint64_t addr;
  uint64_t len;
  uint64_t arm_addr;
  uint32_t lkey;
  uint32_t arm_lkey;
  /*
   A CQ of the same context for the events (it cannot be destroyed while the tripwire
   lives).
   */
  uint32_t cq;
  uint32_t reserved;
  /*
   Returned as the events' `wr_id`.
   */
  uint64_t tag;
};

/*
 What `QUERY_DEVICE` writes (128 bytes).
 */
struct qpip_device_info {
  /*
   Interface version, as [`crate::regs::REG_VERSION`].
   */
  uint32_t version;
  /*
   Contexts (= doorbell pages).
   */
  uint32_t max_contexts;
  /*
   QPs per context.
   */
  uint32_t max_qps_per_context;
  /*
   CQs per context.
   */
  uint32_t max_cqs_per_context;
  /*
   Memory regions on the device.
   */
  uint32_t max_mrs;
  /*
   Pages per memory region.
   */
  uint32_t max_mr_pages;
  /*
   Deepest queue.
   */
  uint32_t max_queue_depth;
  /*
   Scatter/gather entries per WQE.
   */
  uint32_t max_sge;
  /*
   Bytes of inline data per send WQE.
   */
  uint32_t max_inline;
  /*
   Largest UDP payload in one send.
   */
  uint32_t max_udp_payload;
  /*
   Listeners on the device.
   */
  uint32_t max_listeners;
  /*
   MTU of the link.
   */
  uint32_t mtu;
  /*
   The current MAC.
   */
  uint8_t mac[6];
  uint8_t reserved0[2];
  /*
   Reserved, 0.
   */
  uint8_t reserved1[72];
};

/*
 What `QUERY_STATS` writes: [`STATS_COUNT`] u64 counters, each at the index named by a
 `STAT_*` constant. Counters only grow (until reset).
 */
struct qpip_stats {
  uint64_t counters[96];
};

/*
 One address in [`AddrList`] (24 bytes).
 */
struct qpip_addr_entry {
  /*
   The address, network order.
   */
  uint8_t addr[16];
  /*
   Its prefix length.
   */
  uint8_t prefix_len;
  /*
   `ADDR_FLAG_*` bits.
   */
  uint8_t flags;
  uint8_t reserved[6];
};

/*
 What `LIST_ADDRS` writes (8 + 24 × ([`MAX_ADDRS`] + 1) = 224 bytes): `count` entries
 are valid, the link-local address first; the rest are zero.
 */
struct qpip_addr_list {
  uint32_t count;
  uint32_t reserved;
  struct qpip_addr_entry entries[9];
};

/*
 Header of a WQE (48 bytes).
 */
struct qpip_wqe {
  /*
   The caller's tag, returned unchanged in the CQE.
   */
  uint64_t wr_id;
  /*
   [`WQE_OP_SEND`] in send rings, [`WQE_OP_RECV`] in receive rings.
   */
  uint8_t opcode;
  /*
   `WQE_FLAG_*` bits.
   */
  uint8_t flags;
  /*
   SGEs that follow (0..=[`MAX_SGE`]); 0 for inline sends.
   */
  uint8_t num_sge;
  uint8_t reserved0;
  /*
   Immediate data carried to the receiver's CQE by TCP message framing. A UDP datagram
   has no room for it on the wire, so on UDP QPs it must be 0 (else
   [`crate::cqe::CQE_STATUS_BAD_WQE`]).
   */
  uint32_t imm_data;
  /*
   Bytes of inline data (with [`WQE_FLAG_INLINE`]), at most [`MAX_INLINE`].
   */
  uint32_t inline_len;
  uint32_t reserved1;
  /*
   UDP send: destination address, network order. RDMA Write and Read (iWARP QPs): the
   peer's region, as [`Wqe::remote`] reads it.
   */
  uint8_t dest_addr[16];
  /*
   UDP send: destination port, host order.
   */
  uint16_t dest_port;
  uint8_t reserved2[6];
};

/*
 A scatter/gather entry (16 bytes).
 */
struct qpip_sge {
  /*
   Virtual address inside the memory region.
   */
  uint64_t addr;
  /*
   Length in bytes (0 is allowed and moves nothing).
   */
  uint32_t length;
  /*
   The region's lkey.
   */
  uint32_t lkey;
};

/*
 A completion (64 bytes).
 */
struct qpip_cqe {
  /*
   The `wr_id` of the completed work request.
   */
  uint64_t wr_id;
  /*
   Bytes sent, or bytes placed into the receive buffers. For a receive that did not fit
   ([`CQE_STATUS_LOCAL_LENGTH`]), the size of what arrived.
   */
  uint32_t byte_len;
  /*
   The QP the work request was posted on.
   */
  uint32_t qp;
  /*
   Immediate data from the sender (receives).
   */
  uint32_t imm_data;
  /*
   Receives on UDP QPs: the sender's port, host order.
   */
  uint16_t src_port;
  /*
   [`CQE_OP_SEND`] or [`CQE_OP_RECV`].
   */
  uint8_t opcode;
  /*
   One of the `CQE_STATUS_*` codes.
   */
  uint8_t status;
  /*
   Receives on UDP QPs: the sender's address, network order.
   */
  uint8_t src_addr[16];
  /*
   For errors: which check failed (a `CQE_DETAIL_*` code), to make errors explainable.
   */
  uint32_t detail;
  uint8_t reserved[19];
  /*
   Bit 0: phase. Written last.
   */
  uint8_t owner;
};

/*
 The header of one message in a TCP byte stream with [`crate::admin::FRAMING_MESSAGE`]
 (8 bytes, both fields **little-endian** on the wire whatever the hosts' byte order).

 Each send WR on a message-framed QP becomes exactly one message: this header, then the
 WR's `length` bytes. The receiving device (or the software provider) parses the headers
 out of the stream, so message boundaries and `imm_data` survive any segmentation:
 - each message completes exactly one receive WR, with `byte_len` = `length` and the
   CQE's `imm_data` = `imm_data` (a zero-length message completes a WR with 0 bytes);
 - a message longer than the receive WR it lands in completes that WR with
   [`crate::cqe::CQE_STATUS_LOCAL_LENGTH`] (`byte_len` = the message's length) and the
   message's bytes are discarded; the stream stays in step and the next message goes to
   the next WR.

 Stream framing ([`crate::admin::FRAMING_STREAM`]) has no header: the bytes are the
 stream, for peers that are plain sockets.
 */
struct qpip_msg_header {
  /*
   Bytes of the message that follow the header (little-endian).
   */
  uint32_t length;
  /*
   The sender's `Wqe::imm_data` (little-endian).
   */
  uint32_t imm_data;
};

/*
 Arguments of `SET_QP_OPT`: one option and its value.
 */
struct qpip_set_qp_opt_args {
  /*
   Which option: [`QP_OPT_KEEPALIVE`], [`QP_OPT_UDP_PEER`].
   */
  uint32_t option;
  /*
   KEEPALIVE: seconds the connection may be idle before the first probe,
   1..=[`KEEPALIVE_MAX_SECS`]; 0 turns keepalive off (then the other two are 0 too).
   */
  uint32_t keepalive_idle;
  /*
   KEEPALIVE: seconds between unanswered probes, 1..=[`KEEPALIVE_MAX_SECS`].
   */
  uint32_t keepalive_interval;
  /*
   KEEPALIVE: unanswered probes after which the connection times out (its QP goes to
   the error state with [`ASYNC_REASON_TIMEOUT`]), 1..=[`KEEPALIVE_MAX_PROBES`].
   */
  uint32_t keepalive_probes;
  /*
   UDP_PEER: the peer's address (network order; all zero with port 0: no peer).
   */
  uint8_t peer_addr[16];
  /*
   UDP_PEER: the peer's port (host order), 0 with no peer.
   */
  uint16_t peer_port;
  uint8_t reserved[14];
};

/*
 Arguments of `ADD_ROUTE` and `DEL_ROUTE`.

 A route is IPv4 when `dest` is IPv4-mapped (`::ffff:a.b.c.d`) with `prefix_len`
 96..=128 (counted over the 128 bits: an IPv4 /24 is 120, the IPv4 default route is
 `::ffff:0.0.0.0`/96), else IPv6 (0..=128; the IPv6 default route is `::`/0); an IPv6
 route never covers IPv4-mapped destinations. `dest` has no bits set beyond
 `prefix_len`; `gateway` is a unicast address of the route's family (an IPv6 gateway
 may be link-local).

 The device chooses the next hop toward a destination as follows: the destination
 itself when it is on-link (link-local, inside the prefix of one of the function's
 addresses of its family, or a static neighbour); else the gateway of the route with the
 longest prefix holding it, the lowest `metric` among equally long ones. Whether the
 gateway is on-link is checked when the route is used, not when it is added (addresses
 and routes may come in any order): a route whose gateway is not on-link at that moment
 is passed over as if absent. No route: the send fails as before
 ([`crate::cqe::CQE_DETAIL_NO_ROUTE`], [`STAT_NET_NO_ROUTE`]).
 */
struct qpip_route_args {
  /*
   The destination prefix, network order.
   */
  uint8_t dest[16];
  /*
   Its length, 0..=128 (96..=128 for an IPv4 route).
   */
  uint8_t prefix_len;
  uint8_t reserved0[3];
  /*
   The next hop toward the prefix, network order (ignored by `DEL_ROUTE`).
   */
  uint8_t gateway[16];
  /*
   Preference among routes of the same prefix length: lower wins.
   */
  uint32_t metric;
  uint8_t reserved[8];
};

/*
 Arguments of `ADD_NEIGH` and `DEL_NEIGH`.

 `addr` is a unicast address: IPv6, or IPv4 in its mapped form (`::ffff:a.b.c.d`), not
 unspecified, multicast, loopback or (IPv4) broadcast. `mac` is a unicast MAC, not all
 zeros (checked by `ADD_NEIGH` only).

 A static neighbour is on-link whatever its address (see [`RouteArgs`]; an IPv4 one only
 while the function has an IPv4 address to send from). Static entries belong to the
 function's network configuration like its routes: kept across `SET_MAC`, back to
 those the device started with (`qpipd --neighbor`) after a reset.
 */
struct qpip_neighbor_args {
  /*
   The neighbour's address, network order.
   */
  uint8_t addr[16];
  /*
   Its link-layer address (ignored by `DEL_NEIGH`).
   */
  uint8_t mac[6];
  uint8_t reserved[26];
};

/*
 Arguments of `REJECT`.
 */
struct qpip_reject_args {
  /*
   The id of the request ([`ADMIN_OP_CONN_REQUEST`]'s result0).
   */
  uint32_t request;
  uint32_t reserved0;
  /*
   The reject reply's private data (`pd_addr`, `pd_len`); `ird`, `ord` and `flags`
   must be zero.
   */
  struct qpip_iwarp_conn_args iwarp;
  uint8_t reserved[24];
};

/*
 What `CONN_REQUEST` writes (64 + 512 = 576 bytes): an iWARP connection request a
 listener holds, as the initiator's MPA request made it. Addresses in network order
 (IPv4 in its mapped form), ports in host order.
 */
struct qpip_conn_request {
  /*
   The request's id (result0 of the command), for `ACCEPT` or `REJECT`.
   */
  uint32_t request;
  /*
   `CONN_REQUEST_*` bits.
   */
  uint32_t flags;
  /*
   The initiator's address and port.
   */
  uint8_t peer_addr[16];
  /*
   The address and port the initiator connected to.
   */
  uint8_t local_addr[16];
  uint16_t peer_port;
  uint16_t local_port;
  /*
   The initiator's IRD and ORD (from RFC 6581's block; 0 without one).
   */
  uint16_t ird;
  uint16_t ord;
  /*
   The request's MPA revision (1 or 2).
   */
  uint8_t mpa_revision;
  uint8_t reserved0;
  /*
   Bytes of the initiator's private data in `private_data` (the IRD/ORD block not
   counted).
   */
  uint16_t pd_len;
  uint8_t reserved[12];
  /*
   The initiator's private data.
   */
  uint8_t private_data[512];
};

#endif  /* QPIP_ABI_H */
