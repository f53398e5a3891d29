/* The user-level fast path of connected TCP qpip sockets (docs/sockets.md, "the fast path").
 *
 * A plain read or write of a qpip socket is one system call into the driver, which copies
 * between the program's buffer and the socket's rings. Here the library does the same in
 * the process: the driver maps the socket's state page, the context's doorbell page, the
 * CQ, the SQ, the RQ, the receive slots and the send ring (IOCTL_SOCK_FASTPATH, mmap; the
 * layout is in the state page, struct qpip_sock_shm), and a read or write takes the state
 * page's lock word, reaps the CQ, copies, posts receive or send WRs and rings the doorbell,
 * all without a system call. Anything else makes the system call as before, which is
 * always right:
 *  - the lock word is taken (another thread, or the driver): no waiting here;
 *  - the driver's flags say no (not connected, an error, end of data, shut down, MSG_MORE,
 *    the socket shared by a fork, the fast path taken away);
 *  - nothing to read, or not room for the whole write: the driver sleeps, or says EAGAIN,
 *    and arms the CQ so that poll and epoll hear of the next completion;
 *  - a completion that is not an ordinary one (an error, the end of data): left in the CQ
 *    for the driver, which knows what it means.
 * The critical section never blocks and never makes a system call (the driver waits for
 * it). When a doorbell finds the engine asleep, the library writes the device's kick
 * register after it let the lock word go: mapped from the process's context (fp_kick), or,
 * without one, through the socket's IOCTL_SOCK_FASTPATH.
 *
 * The table: one word per descriptor below FP_MAX (the socket's mapping, or "no fast path",
 * and the calls in flight on it; see "the table" below). Entries are made by the first read
 * or write of a descriptor marked qpip, dropped by close, dup2 onto it and close_range; a
 * forked child unmaps them all (its mapping makes the driver mark the socket shared, and
 * the parent sees that too). A descriptor closed while another thread is in a fast-path
 * call on it keeps its mapping until that call ends (the last call out unmaps it), and no
 * call that starts after the close uses it. A descriptor closed behind the library's back
 * (a raw system call) keeps its socket open until the process exits or execs: the mapping
 * holds it. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "qpip_preload.h"
/* The device's ring formats and doorbell page (generated from the qpip-abi crate). */
#include "qpip_abi.h"

#define FP_MAX 65536

/* A descriptor's word in the table, changed only by atomic operations (no lock: the calls
 * run in any thread and in signal handlers):
 *   bits 0-47   FP_EMPTY (not asked yet), FP_NONE (asked: no fast path), a claim (odd:
 *               another call is mapping it; the value names that call), or the mapping
 *               (a struct fp_sock *, page-aligned);
 *   bit 48      FP_CLOSING: the descriptor was closed; the mapping goes with the last call
 *               in flight on it, and no call may start on it;
 *   bits 49-63  the calls in flight (each adds FP_CALL while it uses the mapping).
 * The mapping is unmapped by whoever turns "closing, no call in flight" into FP_EMPTY
 * (fp_settle): the close if no call was in flight, else the last call. A later socket on
 * the same descriptor number finds FP_EMPTY (or FP_CLOSING: the system call until the old
 * mapping has gone), never the old mapping. */
#define FP_EMPTY 0ull
#define FP_NONE 1ull
#define FP_PTR ((1ull << 48) - 1)
#define FP_CLOSING (1ull << 48)
#define FP_CALL (1ull << 49)
#define FP_CALLS(w) ((w) >> 49)
#define FP_CALLS_MAX (1u << 14) /* beyond: the system call (the field holds 2^15 - 1) */

static inline bool fp_is_sock(uint64_t p)
{
    return p > FP_NONE && !(p & 1);
}

static inline struct fp_sock *fp_sock_of(uint64_t w)
{
    return (struct fp_sock *)(uintptr_t)(w & FP_PTR);
}

static _Atomic uint64_t *fp_tab;
static pthread_once_t fp_once = PTHREAD_ONCE_INIT;

static void fp_child(void);

static void fp_init(void)
{
    void *p = mmap(NULL, FP_MAX * sizeof(*fp_tab), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return;
    pthread_atfork(NULL, NULL, fp_child);
    atomic_store(&fp_tab, p);
}

/* ---- the lock word, the doorbells ---------------------------------------------------------- */

static inline _Atomic uint32_t *a32(void *p)
{
    return (_Atomic uint32_t *)p;
}

static inline bool fp_trylock(struct qpip_sock_shm *m)
{
    uint32_t want = QPIP_SOCK_SHM_UNLOCKED;
    return atomic_compare_exchange_strong_explicit(a32(&m->lock), &want, QPIP_SOCK_SHM_LOCKED_USER,
                                                   memory_order_acquire, memory_order_relaxed);
}

static inline void fp_unlock(struct qpip_sock_shm *m)
{
    atomic_store_explicit(a32(&m->lock), QPIP_SOCK_SHM_UNLOCKED, memory_order_release);
}

/* The producer side of the doorbell protocol (abi/src/doorbell.rs): the entries written
 * before, the index, the page's change counter (a full barrier), then whether the engine
 * sleeps. Returns true if it must be kicked (and KICK asked for it). */
static bool fp_ring(struct fp_sock *s, uint32_t off, uint32_t value, bool kick)
{
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(a32(s->db + off), value, memory_order_relaxed);
    atomic_fetch_add_explicit(a32(s->db + QPIP_DB_CHANGE_COUNT), 1, memory_order_seq_cst);
    return kick && atomic_load_explicit(a32(s->db + QPIP_DB_ENGINE_SLEEPING), memory_order_relaxed);
}

/* The device's kick register, mapped from the process's context as the verbs library maps
 * it (QUERY_DEVICE says where; one register for the whole function, whichever context
 * maps it): a doorbell that finds the engine asleep writes it without a system call.
 * NULL: not mapped yet; FP_KICK_NONE: it cannot be (no context now): the socket's ioctl.
 * Not copied into a forked child (the driver maps it VM_DONTCOPY): the child forgets it. */
#define FP_KICK_NONE ((uint32_t *)1)
static _Atomic(uint32_t *) fp_kick_reg;

static uint32_t *fp_kick_map(void)
{
    const char *why;
    int cfd = ctx_get(&why);
    if (cfd < 0)
        return FP_KICK_NONE;
    struct qpip_query_device q = { .size = sizeof(q) };
    if (ioctl(cfd, QPIP_IOCTL_QUERY_DEVICE, &q) != 0)
        return FP_KICK_NONE;
    void *p = mmap(NULL, 4096, PROT_WRITE, MAP_SHARED, cfd, (off_t)q.kick_offset);
    return p == MAP_FAILED ? FP_KICK_NONE : (uint32_t *)p;
}

static void fp_kick(int fd)
{
    uint32_t *k = atomic_load_explicit(&fp_kick_reg, memory_order_acquire);
    if (QP_UNLIKELY(!k)) {
        uint32_t *none = NULL;
        k = fp_kick_map();
        if (!atomic_compare_exchange_strong(&fp_kick_reg, &none, k)) {
            if (k != FP_KICK_NONE)
                munmap(k, 4096);
            k = none;
        }
    }
    if (k != FP_KICK_NONE) {
        count(C_FP_KICK_MAPPED);
        *(volatile uint32_t *)((uint8_t *)k + QPIP_KICK) = 1;
        return;
    }
    struct qpip_sock_fastpath a = { .size = sizeof(a), .op = QPIP_SOCK_FP_KICK };
    count(C_FP_KICK);
    ioctl(fd, QPIP_IOCTL_SOCK_FASTPATH, &a);
}

/* ---- the CQ -------------------------------------------------------------------------------- */

static inline struct qpip_cqe *fp_cqe(struct fp_sock *s, uint32_t idx)
{
    return (struct qpip_cqe *)(s->cq + (size_t)(idx & (s->cq_depth - 1)) * QPIP_CQE_SIZE);
}

static inline bool fp_cqe_written(struct fp_sock *s, uint32_t idx)
{
    uint8_t phase = ((idx / s->cq_depth) & 1) ^ 1;
    return (atomic_load_explicit((_Atomic uint8_t *)&fp_cqe(s, idx)->owner, memory_order_acquire) & 1) ==
           phase;
}

/* Takes the ordinary completions (lock held): acknowledged sends, receives with data in
 * the expected slot. Stops at anything else (an error, a flushed WR, the end of data),
 * which the driver takes: *ODD says one is waiting. Returns true if the engine must be
 * kicked (the ring was full). */
static bool fp_reap(struct fp_sock *s, struct qpip_sock_shm *m, bool *odd)
{
    uint32_t old = m->cq_head, head = old;

    *odd = false;
    while (fp_cqe_written(s, head)) {
        const struct qpip_cqe *e = fp_cqe(s, head);
        *odd = true;
        if (e->status != QPIP_CQE_STATUS_SUCCESS)
            break;
        if (e->opcode == QPIP_CQE_OP_SEND) {
            uint32_t id = (uint32_t)e->wr_id;
            if (id - m->tx_head > m->tx_posted - m->tx_head || m->sq_head == m->sq_tail)
                break;
            m->sq_head++;
            m->tx_head = id;
        } else if (e->opcode == QPIP_CQE_OP_RECV) {
            uint32_t slot = m->rx_done % s->rx_slots;
            if (e->wr_id != slot || !e->byte_len || e->byte_len > s->slot_bytes)
                break;
            m->rx_len[slot] = (uint16_t)e->byte_len;
            m->rx_done++;
        } else {
            break;
        }
        *odd = false;
        head++;
    }
    if (head == old)
        return false;
    bool was_full = fp_cqe_written(s, old + s->cq_depth - 1);
    m->cq_head = head;
    return fp_ring(s, m->db_cq_head, head, was_full);
}

/* Arms the CQ if someone waits on the socket (lock held): what the driver's
 * qpip_sock_rearm does after each call, so that an epoll set hears of the next
 * completion — a receive or an error only, unless someone waits for room to send (the
 * peer's acknowledgements would else wake a reader for nothing). No kick needed. */
static void fp_rearm(struct fp_sock *s, struct qpip_sock_shm *m, uint32_t flags)
{
    if (!(flags & QPIP_SOCK_SHM_WAITERS))
        return;
    uint32_t kind = flags & QPIP_SOCK_SHM_TX_WAITERS ? 0 : QPIP_CQ_ARM_SOLICITED;
    m->cq_arm_seq = ((m->cq_arm_seq + 1) & QPIP_CQ_ARM_SEQ_MASK) | kind;
    fp_ring(s, m->db_cq_arm_seq, m->cq_arm_seq, false);
}

/* ---- receive ------------------------------------------------------------------------------- */

static void fp_rx_wqe(struct fp_sock *s, uint32_t idx)
{
    uint32_t slot = idx % s->rx_slots;
    struct qpip_wqe *w = (struct qpip_wqe *)(s->rq + (size_t)slot * QPIP_WQE_SIZE);
    struct qpip_sge *sge = (struct qpip_sge *)((uint8_t *)w + QPIP_WQE_SGE_OFFSET);

    memset(w, 0, QPIP_WQE_SIZE);
    w->wr_id = slot;
    w->opcode = QPIP_WQE_OP_RECV;
    w->num_sge = 1;
    sge->addr = s->iova_rx + (uint64_t)slot * s->slot_bytes;
    sge->length = s->slot_bytes;
    sge->lkey = s->lkey;
}

/* Posts the slots read whole (lock held), a quarter of them at a time: each post is a
 * doorbell, and a TCP receive post kicks a sleeping engine (it opens the window). */
static bool fp_rx_refill(struct fp_sock *s, struct qpip_sock_shm *m)
{
    uint32_t want = m->rx_read + s->rx_slots;
    if (want - m->rq_tail < s->rx_slots / 4)
        return false;
    while (m->rq_tail != want)
        fp_rx_wqe(s, m->rq_tail++);
    return fp_ring(s, m->db_rq_tail, m->rq_tail, true);
}

/* Copies out of the completed slots into IOV (lock held): the bytes. */
static size_t fp_copy_out(struct fp_sock *s, struct qpip_sock_shm *m, const struct iovec *iov, int iovcnt)
{
    uint32_t read = m->rx_read, off = m->rx_off;
    size_t done = 0;

    for (int i = 0; i < iovcnt && read != m->rx_done; i++) {
        uint8_t *dst = iov[i].iov_base;
        size_t want = iov[i].iov_len, got = 0;
        while (got < want && read != m->rx_done) {
            uint32_t slot = read % s->rx_slots;
            size_t n = m->rx_len[slot] - off;
            if (n > want - got)
                n = want - got;
            memcpy(dst + got, s->rx + (size_t)slot * s->slot_bytes + off, n);
            got += n;
            off += (uint32_t)n;
            if (off == m->rx_len[slot]) {
                read++;
                off = 0;
            }
        }
        done += got;
    }
    m->rx_read = read;
    m->rx_off = off;
    return done;
}

/* ---- send ---------------------------------------------------------------------------------- */

/* Posts send WRs over the bytes copied in and not posted (lock held); the caller made sure
 * the SQ has room for all of them. Corked (the program's TCP_CORK, in the state page),
 * only whole chunks go, as in the driver: the rest waits for more bytes or the uncork. */
static bool fp_tx_push(struct fp_sock *s, struct qpip_sock_shm *m)
{
    uint32_t first_wr = m->sq_tail;
    uint32_t least = m->cork ? s->tx_chunk : 1;

    while (m->tx_tail - m->tx_posted >= least) {
        uint32_t len = m->tx_tail - m->tx_posted;
        if (len > s->tx_chunk)
            len = s->tx_chunk;
        uint32_t off = m->tx_posted & (s->tx_bytes - 1);
        uint32_t first = len < s->tx_bytes - off ? len : s->tx_bytes - off;
        struct qpip_wqe *w =
            (struct qpip_wqe *)(s->sq + (size_t)(m->sq_tail & (s->sq_depth - 1)) * QPIP_WQE_SIZE);
        struct qpip_sge *sge = (struct qpip_sge *)((uint8_t *)w + QPIP_WQE_SGE_OFFSET);

        memset(w, 0, QPIP_WQE_SIZE);
        w->opcode = QPIP_WQE_OP_SEND;
        w->num_sge = first < len ? 2 : 1;
        sge[0].addr = s->iova_tx + off;
        sge[0].length = first;
        sge[0].lkey = s->lkey;
        if (first < len) {
            sge[1].addr = s->iova_tx;
            sge[1].length = len - first;
            sge[1].lkey = s->lkey;
        }
        m->tx_posted += len;
        w->wr_id = m->tx_posted;
        m->sq_tail++;
    }
    if (m->sq_tail == first_wr)
        return false;
    return fp_ring(s, m->db_sq_tail, m->sq_tail, true);
}

/* ---- the table ----------------------------------------------------------------------------- */

#define FP_NONE_SOCK ((struct fp_sock *)1) /* fp_map: not a socket that has one */

/* Maps FD's socket: its entry, or FP_NONE_SOCK (not a socket that has one, for now or ever). */
static struct fp_sock *fp_map(int fd)
{
    struct qpip_sock_fastpath a = { .size = sizeof(a), .op = QPIP_SOCK_FP_MAP };
    struct fp_sock *s;
    uint8_t *p;

    /* EAGAIN: not connected yet, ask again later; anything else is for good (not this
     * process's, shared, an old driver without the ioctl: ENOTTY). */
    if (ioctl(fd, QPIP_IOCTL_SOCK_FASTPATH, &a) != 0)
        return errno == EAGAIN ? NULL : FP_NONE_SOCK;
    p = mmap(NULL, a.map_len + sizeof(*s), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return FP_NONE_SOCK;
    s = (struct fp_sock *)p;
    void *base = mmap(NULL, a.map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        munmap(p, a.map_len + sizeof(*s));
        return FP_NONE_SOCK;
    }
    fp_attach(s, base, a.map_len);
    count(C_FP_MAPPED);
    return s;
}

/* Fills S in from the layout in the state page at BASE (LEN bytes mapped). */
void fp_attach(struct fp_sock *s, void *base, size_t len)
{
    s->base = base;
    s->len = len;
    s->m = (struct qpip_sock_shm *)s->base;
    const struct qpip_sock_shm *m = s->m;
    s->db = s->base + m->off_db;
    s->cq = s->base + m->off_cq;
    s->sq = s->base + m->off_sq;
    s->rq = s->base + m->off_rq;
    s->rx = s->base + m->off_rx;
    s->tx = s->base + m->off_tx;
    s->cq_depth = m->cq_depth;
    s->sq_depth = m->sq_depth;
    s->rx_slots = m->rx_slots;
    s->slot_bytes = m->rx_slot_bytes;
    s->tx_bytes = m->tx_bytes;
    s->tx_chunk = m->tx_chunk;
    s->lkey = m->lkey;
    s->iova_rx = m->iova_rx;
    s->iova_tx = m->iova_tx;
}

static void fp_unmap(struct fp_sock *s)
{
    munmap(s->base, s->len);
    munmap(s, s->len + sizeof(*s));
}

/* SLOT was seen closing with no call in flight (W): the one that empties it unmaps. */
static void fp_settle(_Atomic uint64_t *slot, uint64_t w)
{
    if (atomic_compare_exchange_strong_explicit(slot, &w, FP_EMPTY, memory_order_acq_rel,
                                                memory_order_relaxed))
        fp_unmap(fp_sock_of(w));
}

/* A call is done with SLOT's mapping (taken by fp_get): the last one out of a closed
 * descriptor unmaps it. */
static inline void fp_put(_Atomic uint64_t *slot)
{
    uint64_t w = atomic_fetch_sub_explicit(slot, FP_CALL, memory_order_release);
    if (QP_UNLIKELY(w & FP_CLOSING) && FP_CALLS(w) == 1)
        fp_settle(slot, w - FP_CALL);
}

/* FD's first call: claims its empty SLOT, maps the socket and puts the mapping in, unless
 * the descriptor was closed meanwhile (the claim is gone: the mapping too, at once). The
 * mapping, with this call in flight on it, or NULL. */
static struct fp_sock *fp_first(int fd, _Atomic uint64_t *slot)
{
    /* Odd, and no other call's while this one runs: its address on this thread's stack. */
    uint64_t claim = (uint64_t)(uintptr_t)&claim | 1;
    uint64_t w = FP_EMPTY;
    if ((claim & ~FP_PTR) || !atomic_compare_exchange_strong(slot, &w, claim))
        return NULL;
    struct fp_sock *s = fp_map(fd);
    uint64_t want = FP_EMPTY; /* NULL: ask again later */
    if (s && s != FP_NONE_SOCK && ((uint64_t)(uintptr_t)s & ~FP_PTR)) {
        /* Beyond what the word can name (no such address space today). */
        fp_unmap(s);
        s = FP_NONE_SOCK;
    }
    if (s == FP_NONE_SOCK)
        want = FP_NONE;
    else if (s)
        want = (uint64_t)(uintptr_t)s + FP_CALL;
    w = atomic_load_explicit(slot, memory_order_relaxed);
    do {
        if ((w & FP_PTR) != claim) {
            if (fp_is_sock((uint64_t)(uintptr_t)s))
                fp_unmap(s);
            return NULL;
        }
        /* Calls that came and went keep their counts (see fp_get). */
    } while (!atomic_compare_exchange_weak_explicit(slot, &w, (w & ~FP_PTR) + want,
                                                    memory_order_acq_rel, memory_order_relaxed));
    return fp_is_sock(want & FP_PTR) ? s : NULL;
}

/* FD's mapping, made on first use, with this call in flight on it (give it back with
 * fp_put); NULL when the call must be the system call. *SLOTP: FD's word. */
static inline struct fp_sock *fp_get(int fd, _Atomic uint64_t **slotp)
{
    _Atomic uint64_t *tab = atomic_load_explicit(&fp_tab, memory_order_acquire);
    if (QP_UNLIKELY(!tab)) {
        pthread_once(&fp_once, fp_init);
        tab = atomic_load(&fp_tab);
        if (!tab)
            return NULL;
    }
    if (fd < 0 || fd >= FP_MAX)
        return NULL;
    _Atomic uint64_t *slot = *slotp = &tab[fd];
    uint64_t w = atomic_load_explicit(slot, memory_order_relaxed);
    if (QP_UNLIKELY(!fp_is_sock(w & FP_PTR) || (w & FP_CLOSING)))
        return w == FP_EMPTY ? fp_first(fd, slot) : NULL;
    /* Counted in, then checked: a close after this sees the call and leaves the unmap to
     * it; one before it made the word closing (or empty, or another socket's: whatever
     * mapping is there now is the descriptor's). */
    w = atomic_fetch_add_explicit(slot, FP_CALL, memory_order_acquire);
    if (QP_UNLIKELY(!fp_is_sock(w & FP_PTR) || (w & FP_CLOSING) || FP_CALLS(w) >= FP_CALLS_MAX)) {
        fp_put(slot);
        return NULL;
    }
    return fp_sock_of(w);
}

void fp_forget(int fd)
{
    _Atomic uint64_t *tab = atomic_load(&fp_tab);
    if (fd < 0 || fd >= FP_MAX || !tab)
        return;
    _Atomic uint64_t *slot = &tab[fd];
    uint64_t w = atomic_load(slot), next;
    do {
        uint64_t p = w & FP_PTR;
        if (p == FP_EMPTY || (w & FP_CLOSING))
            return;
        /* A mapping: closing (unmapped below, or by the last call in flight). No fast path,
         * or a claim (the claiming call sees it gone): empty, for the next socket on FD.
         * The counts of calls passing through stay theirs. */
        next = fp_is_sock(p) ? w | FP_CLOSING : w & ~FP_PTR;
    } while (!atomic_compare_exchange_weak(slot, &w, next));
    if ((next & FP_CLOSING) && FP_CALLS(next) == 0)
        fp_settle(slot, next);
}

void fp_forget_range(unsigned first, unsigned last)
{
    _Atomic uint64_t *tab = atomic_load(&fp_tab);
    if (!tab)
        return;
    for (unsigned fd = first; fd < FP_MAX && fd <= last; fd++)
        if (atomic_load_explicit(&tab[fd], memory_order_relaxed))
            fp_forget((int)fd);
}

/* A forked child: the mappings came along (and told the driver the sockets are shared
 * now); the child makes system calls on them, and gives its copies back. Only this
 * thread came along: calls in flight in the parent are not the child's. */
static void fp_child(void)
{
    atomic_store_explicit(&fp_kick_reg, NULL, memory_order_relaxed);
    for (int fd = 0; fd < FP_MAX; fd++) {
        uint64_t w = atomic_load_explicit(&fp_tab[fd], memory_order_relaxed);
        if (fp_is_sock(w & FP_PTR))
            fp_unmap(fp_sock_of(w));
        if (w)
            atomic_store_explicit(&fp_tab[fd], FP_NONE, memory_order_relaxed);
    }
}

/* ---- the calls ----------------------------------------------------------------------------- */

ssize_t fp_recv(int fd, const struct iovec *iov, int iovcnt)
{
    _Atomic uint64_t *slot;
    struct fp_sock *s = fp_get(fd, &slot);
    if (!s)
        return FP_SYSCALL;
    ssize_t r = fp_recv_on(fd, s, iov, iovcnt);
    fp_put(slot);
    return r;
}

ssize_t fp_recv_on(int fd, struct fp_sock *s, const struct iovec *iov, int iovcnt)
{
    struct qpip_sock_shm *m = s->m;
    if (!fp_trylock(m))
        return FP_SYSCALL;
    uint32_t flags = atomic_load_explicit(a32(&m->flags), memory_order_relaxed);
    if (!(flags & QPIP_SOCK_SHM_RX_OK)) {
        fp_unlock(m);
        return FP_SYSCALL;
    }
    bool odd;
    bool kick = fp_reap(s, m, &odd);
    size_t n = 0;
    /* The bytes before an unusual completion are the stream's as much as ever: read. */
    if (m->rx_read != m->rx_done) {
        n = fp_copy_out(s, m, iov, iovcnt);
        kick |= fp_rx_refill(s, m);
    }
    fp_rearm(s, m, flags);
    fp_unlock(m);
    if (kick)
        fp_kick(fd);
    if (!n) {
        /* Nothing (or a zero-length read): the driver sleeps, or says EAGAIN or 0. */
        return FP_SYSCALL;
    }
    count(C_FP_READ);
    return (ssize_t)n;
}

ssize_t fp_send(int fd, const struct iovec *iov, int iovcnt)
{
    size_t total = 0;
    for (int i = 0; i < iovcnt; i++) {
        if (iov[i].iov_len > SIZE_MAX / 2 - total)
            return FP_SYSCALL;
        total += iov[i].iov_len;
    }
    if (!total)
        return FP_SYSCALL;
    _Atomic uint64_t *slot;
    struct fp_sock *s = fp_get(fd, &slot);
    if (!s)
        return FP_SYSCALL;
    ssize_t r = fp_send_on(fd, s, iov, iovcnt, total);
    fp_put(slot);
    return r;
}

ssize_t fp_send_on(int fd, struct fp_sock *s, const struct iovec *iov, int iovcnt, size_t total)
{
    if (total > s->tx_bytes)
        return FP_SYSCALL;
    struct qpip_sock_shm *m = s->m;
    if (!fp_trylock(m))
        return FP_SYSCALL;
    uint32_t flags = atomic_load_explicit(a32(&m->flags), memory_order_relaxed);
    if (!(flags & QPIP_SOCK_SHM_TX_OK)) {
        fp_unlock(m);
        return FP_SYSCALL;
    }
    bool odd;
    bool kick = fp_reap(s, m, &odd);
    uint32_t free_bytes = s->tx_bytes - (m->tx_tail - m->tx_head);
    uint32_t wrs = (uint32_t)((m->tx_tail - m->tx_posted + total + s->tx_chunk - 1) / s->tx_chunk);
    if (odd || total > free_bytes || wrs > s->sq_depth - (m->sq_tail - m->sq_head)) {
        /* The whole write does not fit (the driver waits for room, or takes part), or the
         * connection may have ended (the driver says how: EPIPE, ECONNRESET...). */
        fp_rearm(s, m, flags);
        fp_unlock(m);
        if (kick)
            fp_kick(fd);
        return FP_SYSCALL;
    }
    for (int i = 0; i < iovcnt; i++) {
        const uint8_t *src = iov[i].iov_base;
        size_t len = iov[i].iov_len;
        while (len) {
            uint32_t off = m->tx_tail & (s->tx_bytes - 1);
            size_t n = s->tx_bytes - off < len ? s->tx_bytes - off : len;
            memcpy(s->tx + off, src, n);
            m->tx_tail += (uint32_t)n;
            src += n;
            len -= n;
        }
    }
    kick |= fp_tx_push(s, m);
    fp_rearm(s, m, flags);
    fp_unlock(m);
    if (kick)
        fp_kick(fd);
    count(C_FP_WRITE);
    return (ssize_t)total;
}

/* ---- TCP_CORK and sendfile ----------------------------------------------------------------- */

int fp_cork(int fd, int on)
{
    _Atomic uint64_t *slot;
    struct fp_sock *s = fp_get(fd, &slot);
    if (!s)
        return FP_SYSCALL;
    int r = fp_cork_on(fd, s, on);
    fp_put(slot);
    return r;
}

/* setsockopt(TCP_CORK) in user space: the state page's cork, which the driver takes into
 * the socket's options the next time it holds the lock. Uncorking posts what was held
 * back, unless the SQ lacks room for it (then the driver's setsockopt waits for room). */
int fp_cork_on(int fd, struct fp_sock *s, int on)
{
    struct qpip_sock_shm *m = s->m;
    if (!fp_trylock(m))
        return FP_SYSCALL;
    uint32_t flags = atomic_load_explicit(a32(&m->flags), memory_order_relaxed);
    bool odd, kick = false;
    int r = FP_SYSCALL;
    if (flags & QPIP_SOCK_SHM_TX_OK) {
        kick = fp_reap(s, m, &odd);
        uint32_t wrs = (m->tx_tail - m->tx_posted + s->tx_chunk - 1) / s->tx_chunk;
        if (on) {
            m->cork = 1;
            r = 0;
        } else if (!odd && wrs <= s->sq_depth - (m->sq_tail - m->sq_head)) {
            m->cork = 0;
            kick |= fp_tx_push(s, m);
            r = 0;
        }
        fp_rearm(s, m, flags);
    }
    fp_unlock(m);
    if (kick)
        fp_kick(fd);
    if (!r)
        count(C_FP_OPT);
    return r;
}

static ssize_t fp_sendfile_on(int out, int in, off_t *off, size_t want, struct fp_sock *s);

/* The most one sendfile call copies through the process, and what it keeps on the stack. */
#define FP_SENDFILE_MAX (256 * 1024)
#define FP_SENDFILE_STACK 4096

/* The send ring's free bytes as last seen (no lock: a hint, fp_send_on checks again). */
static uint32_t fp_tx_room(struct fp_sock *s)
{
    struct qpip_sock_shm *m = s->m;
    uint32_t head = atomic_load_explicit(a32(&m->tx_head), memory_order_relaxed);
    uint32_t tail = atomic_load_explicit(a32(&m->tx_tail), memory_order_relaxed);
    uint32_t used = tail - head;
    return used < s->tx_bytes ? s->tx_bytes - used : 0;
}

/* sendfile from a file at *OFF into a mapped socket: the file read into a buffer of ours
 * (one pread, the page cache's copy) and written as a write would be, in user space, in
 * place of the driver's splice through a pipe. Returns the bytes sent (*OFF moved on by
 * them), 0 at the file's end, -1 with errno for the file's error after nothing was sent,
 * or FP_SYSCALL: nothing done, the caller makes the system call (no offset given, no
 * fast path, no room, a file pread refuses). */
ssize_t fp_sendfile(int out, int in, off_t *off, size_t want)
{
    if (!off || !want || *off < 0)
        return FP_SYSCALL;
    _Atomic uint64_t *slot;
    struct fp_sock *s = fp_get(out, &slot);
    if (!s)
        return FP_SYSCALL;
    /* The mapping stays while this call uses it, a close meanwhile or not. */
    ssize_t r = fp_sendfile_on(out, in, off, want, s);
    fp_put(slot);
    return r;
}

static ssize_t fp_sendfile_on(int out, int in, off_t *off, size_t want, struct fp_sock *s)
{
    size_t n = fp_tx_room(s);
    if (n > want)
        n = want;
    if (n > FP_SENDFILE_MAX)
        n = FP_SENDFILE_MAX;
    if (!n)
        return FP_SYSCALL;
    uint8_t stack[FP_SENDFILE_STACK];
    uint8_t *buf = n <= sizeof(stack) ? stack : malloc(n);
    if (!buf)
        return FP_SYSCALL;
    ssize_t got = pread(in, buf, n, *off), r;
    if (got <= 0) {
        /* The end of the file is sendfile's 0; an error is the system call's to give. */
        r = got == 0 ? 0 : FP_SYSCALL;
    } else {
        struct iovec iov = { buf, (size_t)got };
        r = fp_send_on(out, s, &iov, 1, (size_t)got);
        if (r == FP_SYSCALL) {
            /* The room went (another thread, the driver): the bytes read go through the
             * system call, which may take fewer; the offset moves by what it took. */
            count(C_FP_SYSCALL);
            r = syscall(SYS_write, out, buf, (size_t)got);
        } else {
            count(C_FP_SENDFILE);
        }
        if (r > 0)
            *off += r;
    }
    if (buf != stack)
        free(buf);
    return r;
}
