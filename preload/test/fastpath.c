/* Unit test of the fast path's ring code (fastpath.c) against a simulated socket: the
 * layout the driver maps (a state page, a doorbell page, the CQ, the SQ, the RQ, the
 * receive slots and the send ring) in anonymous memory, and a "device" that writes
 * completions into the CQ and reads what the library posted. Run by `make -C preload
 * check`; prints "fastpath: N checks passed" or the first failure, exit status 1. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "qpip_preload.h"
#include "qpip_abi.h"

/* What log.c and ctx.c would define: the counters fastpath.c counts in; no context here
 * (a kick then goes through the socket's ioctl). */
_Atomic unsigned long qp_counters[C_COUNT];
int ctx_get(const char **why)
{
    *why = "unit test";
    return -1;
}

static int checks;

#define CHECK(cond)                                                             \
    do {                                                                        \
        checks++;                                                               \
        if (!(cond)) {                                                          \
            fprintf(stderr, "fastpath: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            exit(1);                                                            \
        }                                                                       \
    } while (0)

#define PG 4096u
#define CQ_DEPTH 256u
#define SQ_DEPTH 256u
#define SLOTS 64u
#define TX_BYTES (256u * 1024)
#define IOVA 0x10000000ull

static struct fp_sock sock;
static struct qpip_sock_shm *m;
static uint32_t dev_cq_tail; /* the simulated device's next CQE */

static uint32_t db(uint32_t off)
{
    return *(uint32_t *)(sock.db + off);
}

#define MAP_PAGES                                                                          \
    (2 + CQ_DEPTH * QPIP_CQE_SIZE / PG + SQ_DEPTH * QPIP_WQE_SIZE / PG + SLOTS * QPIP_WQE_SIZE / PG + \
     SLOTS + TX_BYTES / PG)

/* The driver's part of a socket's state page at BASE: the layout, every slot posted. */
static void layout(uint8_t *base)
{
    size_t pages = MAP_PAGES;
    struct qpip_sock_shm *m = (struct qpip_sock_shm *)base;
    uint32_t off = PG;
    m->off_db = off;
    off += PG;
    m->off_cq = off;
    off += CQ_DEPTH * QPIP_CQE_SIZE;
    m->off_sq = off;
    off += SQ_DEPTH * QPIP_WQE_SIZE;
    m->off_rq = off;
    off += SLOTS * QPIP_WQE_SIZE;
    m->off_rx = off;
    m->off_tx = off + SLOTS * PG;
    m->map_len = (uint32_t)(pages * PG);
    m->cq_depth = CQ_DEPTH;
    m->sq_depth = SQ_DEPTH;
    m->rx_slots = SLOTS;
    m->rx_slot_bytes = PG;
    m->tx_bytes = TX_BYTES;
    m->tx_chunk = 64 * 1024;
    m->lkey = 7;
    m->db_cq_head = QPIP_DB_CQ_BASE + 3 * QPIP_DB_CQ_STRIDE + QPIP_DB_CQ_HEAD;
    m->db_cq_arm_seq = QPIP_DB_CQ_BASE + 3 * QPIP_DB_CQ_STRIDE + QPIP_DB_CQ_ARM_SEQ;
    m->db_sq_tail = QPIP_DB_QP_BASE + 5 * QPIP_DB_QP_STRIDE + QPIP_DB_QP_SQ_TAIL;
    m->db_rq_tail = QPIP_DB_QP_BASE + 5 * QPIP_DB_QP_STRIDE + QPIP_DB_QP_RQ_TAIL;
    m->iova_rx = IOVA;
    m->iova_tx = IOVA + SLOTS * PG;
    m->rq_tail = SLOTS; /* the driver posted every slot */
    m->flags = QPIP_SOCK_SHM_RX_OK | QPIP_SOCK_SHM_TX_OK;
}

static void setup(void)
{
    uint8_t *base = mmap(NULL, MAP_PAGES * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(base != MAP_FAILED);
    layout(base);
    m = (struct qpip_sock_shm *)base;
    fp_attach(&sock, base, MAP_PAGES * PG);
}

/* The device completes a WR: a CQE, its owner byte last. */
static void complete(uint8_t opcode, uint8_t status, uint64_t wr_id, uint32_t len)
{
    struct qpip_cqe *e = (struct qpip_cqe *)(sock.cq + (dev_cq_tail % CQ_DEPTH) * QPIP_CQE_SIZE);
    memset(e, 0, sizeof(*e));
    e->wr_id = wr_id;
    e->byte_len = len;
    e->opcode = opcode;
    e->status = status;
    e->owner = (uint8_t)(((dev_cq_tail / CQ_DEPTH) & 1) ^ 1);
    dev_cq_tail++;
}

/* The device places LEN bytes of FILL into the next receive slot and completes it. */
static void receive(uint32_t wr, uint8_t fill, uint32_t len)
{
    memset(sock.rx + (wr % SLOTS) * PG, fill, len);
    complete(QPIP_CQE_OP_RECV, QPIP_CQE_STATUS_SUCCESS, wr % SLOTS, len);
}

static ssize_t recv1(void *buf, size_t len)
{
    struct iovec iov = { buf, len };
    return fp_recv_on(-1, &sock, &iov, 1);
}

static ssize_t send1(const void *buf, size_t len)
{
    struct iovec iov = { (void *)buf, len };
    return fp_send_on(-1, &sock, &iov, 1, len);
}

static struct qpip_wqe *wqe(uint8_t *ring, uint32_t depth, uint32_t idx)
{
    return (struct qpip_wqe *)(ring + (idx % depth) * QPIP_WQE_SIZE);
}

static struct qpip_sge *sge(struct qpip_wqe *w, int i)
{
    return (struct qpip_sge *)((uint8_t *)w + QPIP_WQE_SGE_OFFSET) + i;
}

static void test_receive(void)
{
    static char buf[PG * 20];
    /* Nothing there: the system call (which sleeps), the lock given back. */
    CHECK(recv1(buf, 10) == FP_SYSCALL);
    CHECK(m->lock == QPIP_SOCK_SHM_UNLOCKED);
    /* Two slots: read across them, the CQ's head moved and rung. */
    receive(0, 'a', 5);
    receive(1, 'b', PG);
    CHECK(recv1(buf, 3) == 3 && memcmp(buf, "aaa", 3) == 0);
    CHECK(m->cq_head == 2 && db(m->db_cq_head) == 2 && m->rx_done == 2);
    CHECK(m->rx_read == 0 && m->rx_off == 3);
    CHECK(recv1(buf, 100) == 100 && buf[0] == 'a' && buf[1] == 'a' && buf[2] == 'b' && buf[99] == 'b');
    CHECK(m->rx_read == 1 && m->rx_off == 98);
    /* No slot reposted yet: a quarter of them at a time. */
    CHECK(m->rq_tail == SLOTS && db(m->db_rq_tail) == 0);
    /* Fourteen more slots and the rest of slot 1: 16 slots read whole, reposted. */
    for (uint32_t i = 2; i < 16; i++)
        receive(i, (uint8_t)('c' + i), PG);
    CHECK(recv1(buf, sizeof(buf)) == (ssize_t)(PG - 98 + 14 * PG));
    CHECK(buf[PG - 98] == 'c' + 2 && buf[PG - 98 + 14 * PG - 1] == 'c' + 15);
    CHECK(m->rx_read == 16 && m->rx_off == 0);
    CHECK(m->rq_tail == SLOTS + 16 && db(m->db_rq_tail) == SLOTS + 16);
    struct qpip_wqe *w = wqe(sock.rq, SLOTS, SLOTS);
    CHECK(w->opcode == QPIP_WQE_OP_RECV && w->wr_id == 0 && w->num_sge == 1);
    CHECK(sge(w, 0)->addr == IOVA && sge(w, 0)->length == PG && sge(w, 0)->lkey == 7);
    w = wqe(sock.rq, SLOTS, SLOTS + 15);
    CHECK(w->wr_id == 15 && sge(w, 0)->addr == IOVA + 15 * PG);
    CHECK(recv1(buf, 10) == FP_SYSCALL);
}

static void test_send(void)
{
    static char data[TX_BYTES];
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (char)(i * 13);
    uint32_t changes = db(QPIP_DB_CHANGE_COUNT);
    CHECK(send1(data, 1000) == 1000);
    CHECK(memcmp(sock.tx, data, 1000) == 0);
    CHECK(m->tx_tail == 1000 && m->tx_posted == 1000 && m->sq_tail == 1 && db(m->db_sq_tail) == 1);
    CHECK(db(QPIP_DB_CHANGE_COUNT) != changes);
    struct qpip_wqe *w = wqe(sock.sq, SQ_DEPTH, 0);
    CHECK(w->opcode == QPIP_WQE_OP_SEND && w->num_sge == 1 && w->wr_id == 1000);
    CHECK(sge(w, 0)->addr == IOVA + SLOTS * PG && sge(w, 0)->length == 1000 && sge(w, 0)->lkey == 7);
    /* More than the free space: the system call (which waits for room). */
    CHECK(send1(data, TX_BYTES - 999) == FP_SYSCALL);
    CHECK(m->tx_tail == 1000 && m->lock == QPIP_SOCK_SHM_UNLOCKED);
    /* Acknowledged: the completion frees the ring on the next call. */
    complete(QPIP_CQE_OP_SEND, QPIP_CQE_STATUS_SUCCESS, 1000, 1000);
    /* Almost the whole ring: in 64 KiB WRs, 1000 bytes short of its end. */
    CHECK(send1(data, TX_BYTES - 2000) == (ssize_t)(TX_BYTES - 2000));
    CHECK(m->tx_head == 1000 && m->sq_head == 1);
    CHECK(m->sq_tail == 1 + 4 && m->tx_tail == TX_BYTES - 1000);
    w = wqe(sock.sq, SQ_DEPTH, 4);
    CHECK(w->num_sge == 1 && sge(w, 0)->addr == IOVA + SLOTS * PG + 1000 + 3 * 65536);
    CHECK(send1(data, 3000) == FP_SYSCALL); /* 2000 bytes free */
    complete(QPIP_CQE_OP_SEND, QPIP_CQE_STATUS_SUCCESS, TX_BYTES - 1000, 0);
    /* Across the ring's end: one WR of two SGEs. */
    CHECK(send1(data, 3000) == 3000);
    w = wqe(sock.sq, SQ_DEPTH, 5);
    CHECK(w->num_sge == 2 && sge(w, 0)->length == 1000 && sge(w, 1)->length == 2000);
    CHECK(sge(w, 1)->addr == IOVA + SLOTS * PG && w->wr_id == TX_BYTES + 2000);
    CHECK(memcmp(sock.tx + TX_BYTES - 1000, data, 1000) == 0 && memcmp(sock.tx, data + 1000, 2000) == 0);
}

/* TCP_CORK in the state page: writes are copied and held back (whole chunks only), the
 * uncork posts them in one WR. */
static void test_cork(void)
{
    uint32_t tail = m->tx_tail, wr = m->sq_tail;
    CHECK(fp_cork_on(-1, &sock, 1) == 0 && m->cork == 1 && m->lock == QPIP_SOCK_SHM_UNLOCKED);
    CHECK(send1("header ", 7) == 7 && send1("body", 4) == 4);
    CHECK(m->tx_tail == tail + 11 && m->tx_posted == tail && m->sq_tail == wr);
    CHECK(fp_cork_on(-1, &sock, 0) == 0 && m->cork == 0);
    CHECK(m->tx_posted == tail + 11 && m->sq_tail == wr + 1 && db(m->db_sq_tail) == wr + 1);
    struct qpip_wqe *w = wqe(sock.sq, SQ_DEPTH, wr);
    CHECK(w->wr_id == tail + 11 && sge(w, 0)->length == 11);
    /* Not while the send side is the driver's (MSG_MORE pending, an error...). */
    m->flags = QPIP_SOCK_SHM_RX_OK;
    CHECK(fp_cork_on(-1, &sock, 1) == FP_SYSCALL && m->cork == 0);
    m->flags = QPIP_SOCK_SHM_RX_OK | QPIP_SOCK_SHM_TX_OK;
}

static void test_fallbacks(void)
{
    char buf[64];
    /* The lock word held (by the driver): nothing touched. */
    receive(16, 'x', 10);
    m->lock = QPIP_SOCK_SHM_LOCKED_KERNEL;
    CHECK(recv1(buf, 10) == FP_SYSCALL && send1("y", 1) == FP_SYSCALL);
    CHECK(m->lock == QPIP_SOCK_SHM_LOCKED_KERNEL);
    m->lock = QPIP_SOCK_SHM_UNLOCKED;
    /* Flags: no receive (end of data known), no send (MSG_MORE pending), shared. */
    m->flags = QPIP_SOCK_SHM_TX_OK;
    CHECK(recv1(buf, 10) == FP_SYSCALL);
    m->flags = QPIP_SOCK_SHM_RX_OK;
    CHECK(send1("y", 1) == FP_SYSCALL);
    m->flags = QPIP_SOCK_SHM_SHARED;
    CHECK(recv1(buf, 10) == FP_SYSCALL && send1("y", 1) == FP_SYSCALL);
    /* Waiters: each call arms the CQ. */
    m->flags = QPIP_SOCK_SHM_RX_OK | QPIP_SOCK_SHM_TX_OK | QPIP_SOCK_SHM_WAITERS;
    uint32_t arm = m->cq_arm_seq;
    CHECK(recv1(buf, 10) == 10 && buf[9] == 'x');
    uint32_t want = ((arm + 1) & QPIP_CQ_ARM_SEQ_MASK) | QPIP_CQ_ARM_SOLICITED;
    CHECK(m->cq_arm_seq == want && db(m->db_cq_arm_seq) == want);
    /* Someone waits for room to send: the arm is for any completion. */
    m->flags |= QPIP_SOCK_SHM_TX_WAITERS;
    receive(17, 'w', 5);
    CHECK(recv1(buf, 10) == 5 && m->cq_arm_seq == ((want + 1) & QPIP_CQ_ARM_SEQ_MASK));
    m->flags = QPIP_SOCK_SHM_RX_OK | QPIP_SOCK_SHM_TX_OK;
    /* An error completion: left in the CQ for the driver; sends go to it too. */
    uint32_t head = m->cq_head;
    complete(QPIP_CQE_OP_RECV, 5, 17, 0);
    CHECK(recv1(buf, 10) == FP_SYSCALL && m->cq_head == head);
    CHECK(send1("y", 1) == FP_SYSCALL && m->cq_head == head);
}

static void test_kick(void)
{
    /* The engine asleep when a doorbell rings: one kick (the ioctl, here on no file). */
    sock.db[QPIP_DB_ENGINE_SLEEPING] = 1;
    unsigned long kicks = qp_counters[C_FP_KICK];
    m->cq_head = dev_cq_tail; /* past the error completion, as the driver would be */
    m->rx_done = m->rx_read = 17;
    m->rx_off = 0;
    CHECK(send1("z", 1) == 1);
    CHECK(qp_counters[C_FP_KICK] == kicks + 1);
    sock.db[QPIP_DB_ENGINE_SLEEPING] = 0;
}

/* ---- the table: descriptors, their mappings, close ------------------------------------------
 * The driver's side of the mapping is simulated with memfds: a "socket" is a memfd holding
 * a state page and the rings (the size is the mapping's length), which fp_map maps as it
 * maps the driver's file. ioctl and munmap are this program's own (the executable's
 * definitions come before libc's): the socket ioctl answers for memfds, a kick can run a
 * hook in the middle of a call, and unmaps are counted. */

static atomic_int on_kick_fd = -1;
static void (*on_kick)(int fd);
static atomic_ulong unmaps;

int ioctl(int fd, unsigned long req, ...)
{
    va_list ap;
    va_start(ap, req);
    struct qpip_sock_fastpath *a = va_arg(ap, struct qpip_sock_fastpath *);
    va_end(ap);
    struct stat st;
    if (req != QPIP_IOCTL_SOCK_FASTPATH || fstat(fd, &st) != 0 || !st.st_size) {
        errno = ENOTTY;
        return -1;
    }
    if (a->op == QPIP_SOCK_FP_KICK) {
        if (on_kick && fd == on_kick_fd)
            on_kick(fd);
        return 0;
    }
    a->map_len = (uint32_t)st.st_size;
    return 0;
}

int munmap(void *addr, size_t len)
{
    atomic_fetch_add(&unmaps, 1);
    return (int)syscall(SYS_munmap, addr, len);
}

/* A simulated socket on descriptor FD (replacing what FD was) whose receive side always
 * has 64 full slots of FILL ready (rx_done just behind rx_read: the ring never runs dry),
 * ENGINE_SLEEPING as SLEEPING. */
static void sim_socket(int fd, uint8_t fill, int sleeping)
{
    int mfd = memfd_create("qpip-sock", 0);
    CHECK(mfd >= 0 && ftruncate(mfd, MAP_PAGES * PG) == 0);
    uint8_t *base = mmap(NULL, MAP_PAGES * PG, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    CHECK(base != MAP_FAILED);
    layout(base);
    struct qpip_sock_shm *sm = (struct qpip_sock_shm *)base;
    sm->rx_done = UINT32_MAX;
    for (uint32_t i = 0; i < SLOTS; i++)
        sm->rx_len[i] = PG;
    memset(base + sm->off_rx, fill, SLOTS * PG);
    base[sm->off_db + QPIP_DB_ENGINE_SLEEPING] = (uint8_t)sleeping;
    syscall(SYS_munmap, base, MAP_PAGES * PG);
    CHECK(dup2(mfd, fd) == fd);
    close(mfd);
}

static ssize_t fd_recv(int fd, void *buf, size_t len)
{
    struct iovec iov = { buf, len };
    return fp_recv(fd, &iov, 1);
}

/* What the library's close does: the mapping first, then the descriptor. */
static void lib_close(int fd)
{
    fp_forget(fd);
    close(fd);
}

#define TFD 100

static unsigned long unmaps_in_kick;

static void close_in_kick(int fd)
{
    unsigned long before = unmaps;
    lib_close(fd);
    unmaps_in_kick = unmaps - before;
}

static void test_table(void)
{
    static char buf[SLOTS / 2 * PG]; /* enough to repost slots, which rings (and kicks) */
    unsigned long before = qp_counters[C_FP_MAPPED];
    /* First use maps; the next call uses the mapping. */
    sim_socket(TFD, 'a', 0);
    CHECK(fd_recv(TFD, buf, 10) == 10 && buf[0] == 'a' && buf[9] == 'a');
    CHECK(fd_recv(TFD, buf, 10) == 10 && qp_counters[C_FP_MAPPED] == before + 1);
    /* Closed with nothing in flight: unmapped at once (the state and the struct). */
    unsigned long u = unmaps;
    lib_close(TFD);
    CHECK(unmaps == u + 2);
    /* A new socket on the same number: its own mapping, never the old one. */
    sim_socket(TFD, 'b', 0);
    CHECK(fd_recv(TFD, buf, 10) == 10 && buf[0] == 'b' && qp_counters[C_FP_MAPPED] == before + 2);
    lib_close(TFD);

    /* Closed while a call is in the middle (another thread's close, here from the kick the
     * call makes after its copy): the mapping stays until the call ends, which unmaps it. */
    sim_socket(TFD, 'c', 1);
    on_kick_fd = TFD;
    on_kick = close_in_kick;
    u = unmaps;
    CHECK(fd_recv(TFD, buf, sizeof(buf)) == (ssize_t)sizeof(buf) && buf[0] == 'c');
    on_kick = NULL;
    CHECK(unmaps_in_kick == 0 && unmaps == u + 2);
    /* The descriptor was closed: no mapping (the ioctl fails on a closed descriptor), and
     * "no fast path" is kept until the library sees a close: not asked again. */
    CHECK(fd_recv(TFD, buf, 10) == FP_SYSCALL);
    int devnull = open("/dev/null", 0);
    CHECK(devnull >= 0 && dup2(devnull, TFD) == TFD);
    close(devnull);
    CHECK(fd_recv(TFD, buf, 10) == FP_SYSCALL && fd_recv(TFD, buf, 10) == FP_SYSCALL);
    lib_close(TFD);
    sim_socket(TFD, 'd', 0);
    CHECK(fd_recv(TFD, buf, 10) == 10 && buf[0] == 'd');
    lib_close(TFD);
}

/* Threads read and write a descriptor without pause while another closes it and opens the
 * next socket on the same number, many times: no call may touch a mapping that has gone
 * (SIGSEGV), and each read is one socket's bytes. */
static atomic_int stress_stop;
static atomic_ulong stress_reads, stress_mixed;

static void *stress_reader(void *arg)
{
    static _Thread_local char buf[SLOTS * PG];
    (void)arg;
    while (!atomic_load_explicit(&stress_stop, memory_order_relaxed)) {
        ssize_t n = fd_recv(TFD, buf, sizeof(buf));
        if (n > 0) {
            atomic_fetch_add(&stress_reads, 1);
            if (buf[0] != buf[n - 1])
                atomic_fetch_add(&stress_mixed, 1);
        }
    }
    return NULL;
}

static void *stress_writer(void *arg)
{
    static char data[16 * 1024];
    (void)arg;
    while (!atomic_load_explicit(&stress_stop, memory_order_relaxed)) {
        struct iovec iov = { data, sizeof(data) };
        fp_send(TFD, &iov, 1);
    }
    return NULL;
}

static void test_close_race(void)
{
    pthread_t t[3];
    sim_socket(TFD, 0, 0);
    CHECK(pthread_create(&t[0], NULL, stress_reader, NULL) == 0);
    CHECK(pthread_create(&t[1], NULL, stress_reader, NULL) == 0);
    CHECK(pthread_create(&t[2], NULL, stress_writer, NULL) == 0);
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    unsigned cycles = 0;
    do {
        struct timespec pause = { 0, (long)(rand() % 200) * 1000 };
        nanosleep(&pause, NULL);
        lib_close(TFD);
        sim_socket(TFD, (uint8_t)++cycles, 0);
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while (cycles < 20000 && (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 < 1500);
    atomic_store(&stress_stop, 1);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    lib_close(TFD);
    CHECK(stress_mixed == 0);
    CHECK(cycles > 100 && stress_reads > 20); /* the race ran (few reads: a busy machine) */
    printf("fastpath: %u closes under %lu reads in flight, no fault\n", cycles, (unsigned long)stress_reads);
}

int main(void)
{
    setup();
    test_receive();
    test_send();
    test_cork();
    test_fallbacks();
    test_kick();
    test_table();
    test_close_race();
    printf("fastpath: %d checks passed\n", checks);
    return 0;
}
