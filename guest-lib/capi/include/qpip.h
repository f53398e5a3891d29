/*
 * qpip: queue pairs over the qpip adapter (/dev/qpipN) or kernel sockets.
 *
 * Every function returns QPIP_OK (0) or a negative QPIP_E_* code unless it says
 * otherwise; qpip_strerror() names a code and qpip_last_error() gives the message of the
 * calling thread's last failure. Handles are freed with their *_free function; objects
 * keep what they were created from alive, so the order of freeing does not matter.
 * Link with -lqpip.
 */

#ifndef QPIP_H
#define QPIP_H

/* Generated from guest-lib/capi by cbindgen; do not edit. Regenerate: QPIP_BLESS=1 cargo test -p qpip-capi --test c_header */

#include <stdint.h>
#include <stddef.h>

// Success.
#define QPIP_OK 0

// A required pointer was NULL.
#define QPIP_E_NULL -1

// A handle of another type (or a corrupted one) was passed.
#define QPIP_E_BAD_HANDLE -2

// An argument is out of range or inconsistent.
#define QPIP_E_INVALID -3

// No qpip device (and QPIP_PROVIDER=device), or QPIP_PROVIDER holds a bad name.
#define QPIP_E_NO_DEVICE -4

// The device was reset or removed: open a new context.
#define QPIP_E_DEVICE_GONE -5

// A system call failed (qpip_last_error() says which and why).
#define QPIP_E_OS -6

// The work queue is full: poll the completion queue first.
#define QPIP_E_QUEUE_FULL -7

// Too many scatter/gather entries, inline data too long, or a range outside its region.
#define QPIP_E_LENGTH -8

// An object of another context was used.
#define QPIP_E_FOREIGN -9

// The operation does not apply to this kind of QP.
#define QPIP_E_WRONG_KIND -10

// A UDP send without a destination, or a TCP send with one.
#define QPIP_E_DESTINATION -11

// A blocking call gave up waiting.
#define QPIP_E_TIMEDOUT -12

// An accept, connect or close failed (refused, reset, cancelled ...).
#define QPIP_E_CONNECTION -13

// The device speaks an interface version this library does not know.
#define QPIP_E_ABI -14

// Not supported by this provider (iWARP and tripwires on the software provider).
#define QPIP_E_UNSUPPORTED -15

// QP kinds for qpip_qp_create().
#define QPIP_QP_UDP 0

// TCP, QP ⇄ QP: each send is one message.
#define QPIP_QP_TCP_MESSAGE 1

// TCP, QP ⇄ plain socket: the bytes are the stream.
#define QPIP_QP_TCP_STREAM 2

// TCP with iWARP (RDMA over TCP: MPA, DDP, RDMAP), with any iWARP peer: Sends, RDMA
// Writes and Reads. Set up with qpip_qp_connect_mpa() and qpip_accept_mpa(); the device
// only (the software provider gives QPIP_E_UNSUPPORTED).
#define QPIP_QP_TCP_IWARP 3

// Providers (qpip_provider()).
#define QPIP_PROVIDER_DEVICE 0

#define QPIP_PROVIDER_SOFT 1

// Completion opcodes.
#define QPIP_OP_SEND 0

#define QPIP_OP_RECV 1

// An RDMA Write (iWARP QPs).
#define QPIP_OP_RDMA_WRITE 2

// An RDMA Read (iWARP QPs).
#define QPIP_OP_RDMA_READ 3

// A receive taken by RFC 7306 Immediate Data (iWARP): `imm` holds it, `byte_len` is 0.
#define QPIP_OP_RECV_IMM 4

// A tripwire fired (not a work request's completion; see qpip_tripwire_create()).
#define QPIP_OP_TRIPWIRE 5

// Completion statuses (qpip_completion.status).
#define QPIP_WC_SUCCESS 0

#define QPIP_WC_LOCAL_LENGTH 1

#define QPIP_WC_LOCAL_PROTECTION 2

#define QPIP_WC_BAD_OPCODE 3

#define QPIP_WC_BAD_WQE 4

#define QPIP_WC_FLUSHED 5

#define QPIP_WC_BAD_DEST 6

// iWARP: the peer refused a remote access (a Terminate; `detail` holds it, see
// QPIP_DETAIL_TERMINATE).
#define QPIP_WC_REMOTE_ACCESS 7

// iWARP: the connection ended with a Terminate for another error.
#define QPIP_WC_REMOTE_OPERATION 8

#define QPIP_WC_OTHER 255

// Set in a completion's `detail` when it carries the Terminate that ended an iWARP
// connection: then bit 24 says the peer sent it, bits 16-19 hold its layer, 8-11 its error
// type and 0-7 its code (RFC 5040 section 7).
#define QPIP_DETAIL_TERMINATE (1 << 31)

// A completion's `detail` (with QPIP_WC_LOCAL_PROTECTION): the memory region the work
// request lay in was deregistered while the device held the request; the QP is in error.
#define QPIP_DETAIL_REGION_GONE 9

// Event kinds (qpip_event.kind).
#define QPIP_EVENT_ACCEPT 1

#define QPIP_EVENT_CONNECT 2

#define QPIP_EVENT_CLOSE 3

#define QPIP_EVENT_QP_ERROR 4

#define QPIP_EVENT_PEER_CLOSED 5

#define QPIP_EVENT_LOST 6

#define QPIP_EVENT_OTHER 255

// qpip_post_send() flags: carry `imm` (TCP message framing only).
#define QPIP_SEND_IMM 1

// qpip_post_send() flags: a Send with Solicited Event (iWARP only): the peer's receive
// completion has `solicited` set.
#define QPIP_SEND_SOLICITED 2

// qpip_mr_alloc_remote() rights: peers of iWARP QPs may RDMA Read the region.
#define QPIP_ACCESS_REMOTE_READ 1

// qpip_mr_alloc_remote() rights: peers of iWARP QPs may RDMA Write the region.
#define QPIP_ACCESS_REMOTE_WRITE 2

// qpip_mpa.flags: ask for a CRC on every FPDU (it is on when either end asks).
#define QPIP_MPA_CRC 1

// qpip_mpa.flags, initiator: ask for peer-to-peer mode, so the responder may send first.
#define QPIP_MPA_PEER_TO_PEER 2

// Offer RFC 7306 Immediate Data to a qpip peer (see the library's `Mpa::immediate`).
#define QPIP_MPA_IMMEDIATE 4

// Most private data this end sends in the MPA exchange (qpip_mpa.pd_len): 256 bytes
// with MPA's 4-byte IRD/ORD block, the most Linux's soft-iWARP accepts.
#define QPIP_MPA_MAX_PRIVATE_DATA 252

// Largest IRD and ORD (qpip_mpa.ird, .ord).
#define QPIP_MPA_MAX_IRD_ORD 32

// Most private data a peer may send (MPA's limit): the room in qpip_conn_info.
#define QPIP_MPA_MAX_PEER_PRIVATE_DATA 512

// Opaque handles.
typedef struct qpip_context qpip_context;

typedef struct qpip_cq qpip_cq;

typedef struct qpip_listener qpip_listener;

typedef struct qpip_mr qpip_mr;

typedef struct qpip_qp qpip_qp;

typedef struct qpip_tripwire qpip_tripwire;

// An IPv6 address and port (host byte order).
typedef struct qpip_addr {
  uint8_t addr[16];
  uint16_t port;
} qpip_addr;

// Where an RDMA Write or Read goes in the peer's memory: an address inside one of its
// regions and that region's rkey (qpip_mr_remote() on the peer's side, sent over by the
// application).
typedef struct qpip_remote {
  uint64_t addr;
  uint32_t rkey;
} qpip_remote;

// One completed work request.
typedef struct qpip_completion {
  uint64_t wr_id;
  // The QP (qpip_qp_id()).
  uint32_t qp;
  // QPIP_OP_*.
  uint32_t opcode;
  // QPIP_WC_*.
  uint32_t status;
  // Which check failed, for error completions (the device's detail code).
  uint32_t detail;
  uint32_t byte_len;
  // TCP message framing: the sender's immediate data.
  uint32_t imm;
  // UDP receives: 1 and the sender in `src`.
  uint32_t has_src;
  struct qpip_addr src;
  // iWARP receives: 1 when the Send asked for a solicited event (QPIP_SEND_SOLICITED).
  uint32_t solicited;
  // QPIP_OP_TRIPWIRE: the address of the first byte of the watched range written.
  uint64_t addr;
} qpip_completion;

// `len` bytes at `offset` in a memory region.
typedef struct qpip_sge {
  const struct qpip_mr *mr;
  size_t offset;
  size_t len;
} qpip_sge;

// A connection event.
typedef struct qpip_event {
  // QPIP_EVENT_*.
  uint32_t kind;
  // 0 or a negative errno.
  int32_t status;
  uint32_t qp;
  // 1 and the peer in `peer` for a successful accept or connect.
  uint32_t has_peer;
  uint64_t user_data;
  struct qpip_addr peer;
} qpip_event;

// What this end brings to an iWARP connection's setup (MPA); qpip_mpa_init() fills in
// the defaults.
typedef struct qpip_mpa {
  // `pd_len` bytes for the peer's application (NULL when `pd_len` is 0); copied by the
  // call that takes this.
  const uint8_t *private_data;
  // At most QPIP_MPA_MAX_PRIVATE_DATA.
  uint16_t pd_len;
  // RDMA Read Requests this end serves at once (at most QPIP_MPA_MAX_IRD_ORD).
  uint8_t ird;
  // RDMA Reads this end keeps outstanding (at most QPIP_MPA_MAX_IRD_ORD).
  uint8_t ord;
  // QPIP_MPA_* bits.
  uint32_t flags;
} qpip_mpa;

// A Terminate message that ended an iWARP connection (RFC 5040 section 7).
typedef struct qpip_terminate {
  // The layer that found the error: 0 RDMAP, 1 DDP, 2 MPA (LLP).
  uint8_t layer;
  // The error type within that layer.
  uint8_t etype;
  // The error code.
  uint8_t code;
  // 1: the peer sent it; 0: this end sent it, about the peer's error.
  uint8_t received;
} qpip_terminate;

// What an iWARP connection's setup agreed (qpip_qp_conn_info()).
typedef struct qpip_conn_info {
  // 1 when FPDUs carry a CRC.
  uint32_t crc;
  // 1 in peer-to-peer mode.
  uint32_t peer_to_peer;
  // 1 when the peer rejected the connection (its private data may say why).
  uint32_t rejected;
  // 1 when both ends agreed to RFC 7306 Immediate Data (QPIP_MPA_IMMEDIATE).
  uint32_t immediate;
  // RDMA Read Requests this end serves at once.
  uint16_t ird;
  // RDMA Reads this end keeps outstanding.
  uint16_t ord;
  // The MPA revision (1 or 2).
  uint32_t revision;
  // 1 when a Terminate ended the connection: then `terminate` holds it.
  uint32_t has_terminate;
  struct qpip_terminate terminate;
  // Bytes of the peer's private data in `private_data`.
  uint16_t pd_len;
  uint8_t private_data[QPIP_MPA_MAX_PEER_PRIVATE_DATA];
} qpip_conn_info;

#ifdef __cplusplus
extern "C" {
#endif // __cplusplus

// A short description of a QPIP_E_* code (a static string).
const char *qpip_strerror(int code);

// The message of the calling thread's last failure ("" if none); valid until the
// thread's next failing call.
const char *qpip_last_error(void);

// Fills `out` from a textual IPv6 address (IPv4 becomes IPv4-mapped) and `port`.
//
// # Safety
// `ip` is null or a NUL-terminated string; `out` is null or writable.
int qpip_addr_parse(const char *ip, uint16_t port, struct qpip_addr *out);

// Opens the provider QPIP_PROVIDER names (soft or device); unset: the first device if
// there is one, else the software provider.
//
// # Safety
// `out` is null or writable.
int qpip_open(struct qpip_context **out);

// Opens the software provider (kernel sockets).
//
// # Safety
// `out` is null or writable.
int qpip_open_soft(struct qpip_context **out);

// Opens the device at `path` (/dev/qpipN).
//
// # Safety
// `path` is null or NUL-terminated; `out` is null or writable.
int qpip_open_device(const char *path, struct qpip_context **out);

// Frees a context (its objects keep it open while they exist). NULL is allowed.
//
// # Safety
// `ctx` is null or a live context handle.
int qpip_context_free(struct qpip_context *ctx);

// QPIP_PROVIDER_DEVICE or QPIP_PROVIDER_SOFT, or an error code.
//
// # Safety
// `ctx` is null or a live handle.
int qpip_provider(const struct qpip_context *ctx);

// Largest inline send, in bytes, or an error code.
//
// # Safety
// `ctx` is null or a live handle.
int qpip_max_inline(const struct qpip_context *ctx);

// Allocates and registers `len` zeroed bytes; qpip_mr_data() is where they are.
//
// # Safety
// `ctx` is null or a live handle; `out` is null or writable.
int qpip_mr_alloc(const struct qpip_context *ctx, size_t len, struct qpip_mr **out);

// qpip_mr_alloc() whose region peers of this context's iWARP QPs may also reach with
// `access` (QPIP_ACCESS_* bits; 0: none, as qpip_mr_alloc()) by its qpip_mr_rkey().
// Remote rights need the device: the software provider gives QPIP_E_UNSUPPORTED.
//
// # Safety
// `ctx` is null or a live handle; `out` is null or writable.
int qpip_mr_alloc_remote(const struct qpip_context *ctx,
                         size_t len,
                         uint32_t access,
                         struct qpip_mr **out);

// The key peers name the region by in RDMA Writes and Reads: 0 when it grants no remote
// right (or `mr` is a bad handle).
//
// # Safety
// `mr` is null or a live handle.
uint32_t qpip_mr_rkey(const struct qpip_mr *mr);

// Fills `out` with where a peer's RDMA Write or Read reaches byte `offset` of the region
// (`offset` at most its length), for the application to send to the peer. A region
// without remote rights gives QPIP_E_INVALID.
//
// # Safety
// `mr` is null or a live handle; `out` is null or writable.
int qpip_mr_remote(const struct qpip_mr *mr, size_t offset, struct qpip_remote *out);

// The region's bytes (NULL for a bad handle). Fill a send buffer before posting it and
// leave it until its completion; read a receive buffer after its completion. The
// pointer is valid until qpip_mr_free().
//
// # Safety
// `mr` is null or a live handle.
uint8_t *qpip_mr_data(struct qpip_mr *mr);

// The region's size in bytes (0 for a bad handle).
//
// # Safety
// `mr` is null or a live handle.
size_t qpip_mr_len(const struct qpip_mr *mr);

// Frees a region: it stays registered until the work requests naming it completed, but
// qpip_mr_data()'s pointer must not be used any more. NULL is allowed. Peers lose it
// when it is deregistered: an RDMA Read or Write of it still under way then resets the
// iWARP QP serving it (QPIP_EVENT_QP_ERROR; its requests complete QPIP_WC_FLUSHED).
//
// # Safety
// `mr` is null or a live handle.
int qpip_mr_free(struct qpip_mr *mr);

// Creates a CQ of `depth` entries (a power of two).
//
// # Safety
// `ctx` is null or a live handle; `out` is null or writable.
int qpip_cq_create(const struct qpip_context *ctx, uint32_t depth, struct qpip_cq **out);

// Frees a CQ (after the QPs that use it). NULL is allowed.
//
// # Safety
// `cq` is null or a live handle.
int qpip_cq_free(struct qpip_cq *cq);

// Moves up to `n` completions to `out` (never blocks); returns how many, or an error.
//
// # Safety
// `cq` is null or a live handle; `out` is null or valid for `n` writes.
int qpip_cq_poll(const struct qpip_cq *cq, struct qpip_completion *out, size_t n);

// Waits up to `timeout_ms` (negative: for ever) for a completion, then as qpip_cq_poll;
// returns 0 when the time ran out.
//
// # Safety
// As qpip_cq_poll.
int qpip_cq_wait(const struct qpip_cq *cq, struct qpip_completion *out, size_t n, int timeout_ms);

// Asks for one wake-up of qpip_cq_fd() at the next completion.
//
// # Safety
// `cq` is null or a live handle.
int qpip_cq_arm(const struct qpip_cq *cq);

// Clears the descriptor's readiness after a wake-up; returns how many it gathered.
//
// # Safety
// `cq` is null or a live handle.
int qpip_cq_ack(const struct qpip_cq *cq);

// The CQ's descriptor for poll/epoll (readable after qpip_cq_arm once a completion is
// there), or an error code.
//
// # Safety
// `cq` is null or a live handle.
int qpip_cq_fd(const struct qpip_cq *cq);

// Creates a QP of `kind` (QPIP_QP_*); sends complete on `send_cq`, receives on
// `recv_cq` (may be the same); queue depths are powers of two (0: 64).
//
// # Safety
// Handles are null or live; `out` is null or writable.
int qpip_qp_create(const struct qpip_context *ctx,
                   int kind,
                   const struct qpip_cq *send_cq,
                   const struct qpip_cq *recv_cq,
                   uint32_t sq_depth,
                   uint32_t rq_depth,
                   struct qpip_qp **out);

// Destroys a QP: outstanding requests complete flushed, a connection is reset (unless
// it was closed gracefully). NULL is allowed.
//
// # Safety
// `qp` is null or a live handle.
int qpip_qp_free(struct qpip_qp *qp);

// The QP's number (the `qp` of its completions and events), or an error code.
//
// # Safety
// `qp` is null or a live handle.
int qpip_qp_id(const struct qpip_qp *qp);

// Binds to `addr` (port 0: an ephemeral one); the bound address goes to `bound` if not
// NULL.
//
// # Safety
// `qp` is null or live; `addr` null or readable; `bound` null or writable.
int qpip_qp_bind(const struct qpip_qp *qp, const struct qpip_addr *addr, struct qpip_addr *bound);

// Starts connecting a TCP QP; the outcome is a QPIP_EVENT_CONNECT event with `user_data`.
//
// # Safety
// `qp` is null or live; `peer` null or readable.
int qpip_qp_connect(const struct qpip_qp *qp, const struct qpip_addr *peer, uint64_t user_data);

// Connects and waits up to `timeout_ms` (negative: for ever).
//
// # Safety
// `qp` is null or live; `peer` null or readable.
int qpip_qp_connect_wait(const struct qpip_qp *qp, const struct qpip_addr *peer, int timeout_ms);

// Closes the sending direction gracefully after the sends posted before; the outcome is
// a QPIP_EVENT_CLOSE event.
//
// # Safety
// `qp` is null or a live handle.
int qpip_qp_close(const struct qpip_qp *qp, uint64_t user_data);

// TCP keepalive on the QP's connection (the one it has, or the one connect or accept
// gives it): after `idle_s` seconds with nothing received a probe every `interval_s`
// seconds, and after `probes` unanswered ones the connection times out and the QP fails.
// `idle_s` 0 (with the others 0) turns it off. Whole seconds 1..=32767, probes 1..=127.
//
// # Safety
// `qp` is null or a live handle.
int qpip_qp_set_keepalive(const struct qpip_qp *qp,
                          uint32_t idle_s,
                          uint32_t interval_s,
                          uint32_t probes);

// qpip_qp_close and wait up to `timeout_ms` (negative: for ever).
//
// # Safety
// `qp` is null or a live handle.
int qpip_qp_close_wait(const struct qpip_qp *qp, int timeout_ms);

// Posts a send of the bytes named by `sges` (gathered in order), tagged `wr_id`; `dest`
// for UDP (NULL for TCP); `imm` goes with it when `flags` has QPIP_SEND_IMM; on iWARP
// QPs, QPIP_SEND_SOLICITED in `flags` asks for a solicited event.
//
// # Safety
// `qp` null or live; `sg` null or valid for `n` reads; `dest` null or readable.
int qpip_post_send(const struct qpip_qp *qp,
                   uint64_t wr_id,
                   const struct qpip_sge *sg,
                   size_t n,
                   const struct qpip_addr *dest,
                   uint32_t imm,
                   uint32_t flags);

// Posts a send of `len` bytes at `data`, copied now (at most qpip_max_inline() bytes;
// no registered memory needed); the other arguments as qpip_post_send()'s.
//
// # Safety
// `qp` null or live; `data` null (then `len` 0) or valid for `len` reads; `dest` null or
// readable.
int qpip_post_send_inline(const struct qpip_qp *qp,
                          uint64_t wr_id,
                          const void *data,
                          size_t len,
                          const struct qpip_addr *dest,
                          uint32_t imm,
                          uint32_t flags);

// Posts a receive buffer made of `sges` (filled in order), tagged `wr_id`.
//
// # Safety
// `qp` null or live; `sg` null or valid for `n` reads.
int qpip_post_recv(const struct qpip_qp *qp, uint64_t wr_id, const struct qpip_sge *sg, size_t n);

// Listens for TCP connections on `addr` (port non-zero).
//
// # Safety
// `ctx` null or live; `addr` null or readable; `out` null or writable.
int qpip_listen(const struct qpip_context *ctx,
                const struct qpip_addr *addr,
                uint32_t backlog,
                struct qpip_listener **out);

// Frees a listener (pending accepts end with -ECANCELED). NULL is allowed.
//
// # Safety
// `l` is null or a live handle.
int qpip_listener_free(struct qpip_listener *l);

// Offers the idle TCP QP `qp` for the next connection; the outcome is a
// QPIP_EVENT_ACCEPT event with `user_data`.
//
// # Safety
// Handles null or live.
int qpip_accept(const struct qpip_listener *l, const struct qpip_qp *qp, uint64_t user_data);

// Accepts a connection on `qp`, waiting up to `timeout_ms` (negative: for ever); the peer
// goes to `peer` if not NULL.
//
// # Safety
// Handles null or live; `peer` null or writable.
int qpip_accept_wait(const struct qpip_listener *l,
                     const struct qpip_qp *qp,
                     int timeout_ms,
                     struct qpip_addr *peer);

// The next connection event, waiting up to `timeout_ms` (0: just look; negative: for
// ever). Returns 1 with `*out` filled, 0 if none came, or an error code.
//
// # Safety
// `ctx` null or live; `out` null or writable.
int qpip_wait_event(const struct qpip_context *ctx, struct qpip_event *out, int timeout_ms);

// The descriptor that polls readable while a connection event is queued.
//
// # Safety
// `ctx` is null or a live handle.
int qpip_events_fd(const struct qpip_context *ctx);

// Fills `mpa` with the defaults: no private data, IRD and ORD 8, no flags.
//
// # Safety
// `mpa` is null or writable.
int qpip_mpa_init(struct qpip_mpa *mpa);

// Starts connecting an iWARP QP to `peer`, bringing `mpa` to the setup; the outcome is a
// QPIP_EVENT_CONNECT event with `user_data` once the peer's MPA reply came (then
// qpip_qp_conn_info() tells what was agreed). qpip_qp_connect() on an iWARP QP is this
// with qpip_mpa_init()'s defaults.
//
// # Safety
// `qp` null or live; `peer` null or readable; `mpa` null or readable (and its private
// data as qpip_mpa says).
int qpip_qp_connect_mpa(const struct qpip_qp *qp,
                        const struct qpip_addr *peer,
                        const struct qpip_mpa *mpa,
                        uint64_t user_data);

// qpip_qp_connect_mpa() and wait up to `timeout_ms` (negative: for ever).
//
// # Safety
// As qpip_qp_connect_mpa().
int qpip_qp_connect_mpa_wait(const struct qpip_qp *qp,
                             const struct qpip_addr *peer,
                             const struct qpip_mpa *mpa,
                             int timeout_ms);

// Offers the idle iWARP QP `qp` for the next connection, answering the initiator's MPA
// request with `mpa`; the outcome is a QPIP_EVENT_ACCEPT event with `user_data` (then
// qpip_qp_conn_info() holds the initiator's private data).
//
// # Safety
// Handles null or live; `mpa` null or readable (and its private data as qpip_mpa says).
int qpip_accept_mpa(const struct qpip_listener *l,
                    const struct qpip_qp *qp,
                    const struct qpip_mpa *mpa,
                    uint64_t user_data);

// qpip_accept_mpa() and wait up to `timeout_ms` (negative: for ever); the peer goes to
// `peer` if not NULL.
//
// # Safety
// As qpip_accept_mpa(); `peer` null or writable.
int qpip_accept_mpa_wait(const struct qpip_listener *l,
                         const struct qpip_qp *qp,
                         const struct qpip_mpa *mpa,
                         int timeout_ms,
                         struct qpip_addr *peer);

// Fills `out` with what the setup of the iWARP QP's connection agreed, the peer's
// private data, and the Terminate that ended it, if one did (valid once the connect or
// accept completed, also when the peer rejected it).
//
// # Safety
// `qp` null or live; `out` null or writable.
int qpip_qp_conn_info(const struct qpip_qp *qp, struct qpip_conn_info *out);

// Posts an RDMA Write of the bytes named by `sges` (gathered in order) into the peer's
// memory at `to` (a region it allocated with QPIP_ACCESS_REMOTE_WRITE), tagged `wr_id`.
// It completes (QPIP_OP_RDMA_WRITE) when the peer has every byte; nothing completes on
// the peer's side. A refused access ends the connection: QPIP_WC_REMOTE_ACCESS.
//
// # Safety
// `qp` null or live; `sg` null or valid for `n` reads; `to` null or readable.
int qpip_post_rdma_write(const struct qpip_qp *qp,
                         uint64_t wr_id,
                         const struct qpip_sge *sg,
                         size_t n,
                         const struct qpip_remote *to);

// Posts an RDMA Read of the peer's memory at `from` (a region it allocated with
// QPIP_ACCESS_REMOTE_READ) into `sges` (filled in order, as many bytes as they hold),
// tagged `wr_id`. It completes (QPIP_OP_RDMA_READ) when every byte is here; at most the
// connection's ORD are outstanding at once.
//
// # Safety
// `qp` null or live; `sg` null or valid for `n` reads; `from` null or readable.
int qpip_post_rdma_read(const struct qpip_qp *qp,
                        uint64_t wr_id,
                        const struct qpip_sge *sg,
                        size_t n,
                        const struct qpip_remote *from);

// Creates a tripwire on `len` bytes at `offset` of `mr`, whose events go to `cq` tagged
// `tag`, disarmed. Each qpip_tripwire_arm() allows one event: the first time data an iWARP
// QP of the context places (an RDMA Write, a Read Response, a Send into a receive buffer)
// writes a byte of the range while it is armed, a completion with opcode QPIP_OP_TRIPWIRE
// comes to `cq` — `wr_id` = `tag`, `qp` = qpip_tripwire_id(), `byte_len` = the bytes of
// the range written, `addr` = the address of the first — and the tripwire is disarmed.
// Arm, then look: data placed before the arm fires nothing. The tripwire keeps `mr` and
// `cq` alive until qpip_tripwire_free(). Errors: QPIP_E_FOREIGN (`mr` or `cq` of another
// context), QPIP_E_INVALID (`len` 0), QPIP_E_LENGTH (the range leaves the region),
// QPIP_E_UNSUPPORTED (the software provider, after those checks).
//
// # Safety
// Handles null or live; `out` null or writable.
int qpip_tripwire_create(const struct qpip_context *ctx,
                         const struct qpip_mr *mr,
                         size_t offset,
                         size_t len,
                         const struct qpip_cq *cq,
                         uint64_t tag,
                         struct qpip_tripwire **out);

// Arms the tripwire: the next placement into its range fires it, once. A store to memory
// shared with the device (no system call), ordered before the caller's next reads.
//
// # Safety
// `tw` null or live.
int qpip_tripwire_arm(const struct qpip_tripwire *tw);

// The tripwire's id (the `qp` of its events), or an error code.
//
// # Safety
// `tw` null or live.
int qpip_tripwire_id(const struct qpip_tripwire *tw);

// Destroys a tripwire: no event of it follows. NULL is allowed.
//
// # Safety
// `tw` null or live.
int qpip_tripwire_free(struct qpip_tripwire *tw);

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* QPIP_H */
