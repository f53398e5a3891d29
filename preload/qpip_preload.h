/* libqpip-preload.so: runs unmodified socket programs over qpip sockets (docs/sockets.md).
 * Declarations shared by its parts:
 *   fdtable.c    which descriptors are qpip sockets (a hint, see below)
 *   addr.c       socket addresses: to the driver's endpoints, and as text for the log
 *   log.c        the environment, the decision log and the per-process counters
 *   ctx.c        libc's real functions and the process's context file (/dev/qpip0)
 *   intercept.c  the socket calls the library interposes
 * Nothing here allocates with malloc or uses stdio: the intercepts run in any thread, in
 * signal handlers and between fork and exec. */
#ifndef QPIP_PRELOAD_H
#define QPIP_PRELOAD_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "uapi/qpip.h"

#define QP_EXPORT __attribute__((visibility("default")))
#define QP_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* ---- fdtable.c -------------------------------------------------------------------------
 * One byte per descriptor, bits below. It is a hint: the intercepts keep it up to date
 * (socket, accept, connect, listen, dup*, fcntl, close), but a descriptor can change behind
 * them (closed by libc internally, passed over a Unix socket, inherited across exec). The
 * intercepts treat a wrong hint as a miss, never as a fault: a kernel call that fails with
 * ENOTSOCK on a descriptor not marked qpip makes them look (fd_probe_qpip), and a qpip ioctl
 * that fails with ENOTTY on a marked one clears the mark. Reads are two atomic loads, no lock,
 * async-signal-safe; the table grows a page at a time with mmap. */
#define FD_QPIP        0x01u /* a qpip socket (the driver's file) */
#define FD_KERNEL_TCP  0x02u /* made by socket(AF_INET/AF_INET6, SOCK_STREAM, TCP) */
#define FD_CONNECTING  0x04u /* qpip: connect said EINPROGRESS/EINTR; the next connect that
                                finds it connected returns 0 (as Linux), later ones EISCONN */
#define FD_INET6       0x08u /* with FD_KERNEL_TCP/UDP: the socket is AF_INET6 (else AF_INET) */
#define FD_KERNEL_UDP  0x10u /* made by socket(AF_INET/AF_INET6, SOCK_DGRAM, UDP) */
#define FD_UDP         0x20u /* with FD_QPIP: a UDP qpip socket (datagrams, addresses) */

unsigned fdt_get(int fd);
void fdt_set(int fd, unsigned bits);
/* dup, dup2, dup3, fcntl(F_DUPFD): NEWFD now stands for OLDFD's file. */
void fdt_copy(int oldfd, int newfd);
/* close_range, closefrom: forget FIRST..LAST (inclusive). */
void fdt_clear_range(unsigned first, unsigned last);
/* Descriptors the table can hold (higher ones are always "unknown"). */
#define FD_TABLE_MAX (1024 * 4096)

/* ---- addr.c ------------------------------------------------------------------------------ */
/* The peer of a connect as the driver wants it (IPv4 as ::ffff:a.b.c.d, port in host
 * order). Returns 0, or -1 when ADDR is not a usable AF_INET/AF_INET6 address of LEN bytes
 * (the kernel then gives connect's error itself). */
int addr_to_endpoint(const struct sockaddr *addr, socklen_t len, struct qpip_endpoint *ep);
/* Writes ADDR as "a.b.c.d:port", "[v6]:port" or "family N" into BUF (at most SIZE bytes,
 * NUL-terminated), returns the length. IPv6 as RFC 5952 writes it (longest zero run as ::,
 * IPv4-mapped with a dotted tail). */
size_t addr_format(const struct sockaddr *addr, socklen_t len, char *buf, size_t size);
/* Linux's rule for an address a call returns: copy min(*LEN, FULL) bytes of SRC to DST,
 * then *LEN = FULL. DST or LEN NULL: nothing. */
void addr_copy_out(void *dst, socklen_t *len, const void *src, socklen_t full);

/* ---- log.c ------------------------------------------------------------------------------- */
extern int qp_log_level;     /* QPIP_PRELOAD_LOG: 0 quiet, 1 decisions, 2 also rediscoveries */
extern int qp_disabled;      /* QPIP_PRELOAD_DISABLE=1: pure pass-through */
extern const char *qp_device_path; /* QPIP_DEVICE, default /dev/qpip0 */
void qp_config_init(void);

/* A line for the log, built on the stack: lb_init, lb_* pieces, lb_emit (one write(2)). */
struct logbuf {
    char buf[320];
    size_t len;
};
void lb_init(struct logbuf *b);
void lb_str(struct logbuf *b, const char *s);
void lb_num(struct logbuf *b, long long v);
void lb_addr(struct logbuf *b, const struct sockaddr *addr, socklen_t len);
void lb_errno(struct logbuf *b, int err);
void lb_emit(struct logbuf *b);
/* A name for a SOCK_DECLINE_* reason ("route", ...). */
const char *decline_name(unsigned reason);
const char *errno_name(int err);

/* Counters, printed at exit with QPIP_PRELOAD_STATS (relaxed atomics: they are statistics). */
enum qp_counter {
    C_CONNECT_QPIP,     /* connects the device carries */
    C_LISTEN_QPIP,      /* listeners the device listens for too */
    C_ACCEPT_QPIP,      /* accepted connections that are qpip sockets */
    C_ACCEPT_KERNEL,    /* accepted from a qpip listener, but kernel sockets (loopback...) */
    C_UDP_CONNECT_QPIP, /* UDP sockets the device carries, made by connect */
    C_UDP_BIND_QPIP,    /* ... made by bind */
    C_KERNEL_NO_DEVICE, /* TCP connect/listen left to the kernel: no usable device */
    C_KERNEL_ERROR,     /* ... the ioctl failed in a way that means "not here" (ENOTTY...) */
    C_CALL_NATIVE,      /* send/recv done as read/write/readv/writev on a qpip socket */
    C_CALL_IOCTL,       /* calls on qpip sockets through the IOCTL_SOCK_* ioctls */
    C_REDISCOVERED,     /* unknown descriptors found to be qpip sockets (ENOTSOCK rule) */
    C_UNMARKED,         /* marks cleared: the descriptor was not a qpip socket any more */
    C_FP_MAPPED,        /* sockets whose state the fast path mapped (fastpath.c) */
    C_FP_READ,          /* reads and recvs done in user space, without a system call */
    C_FP_WRITE,         /* writes and sends done in user space */
    C_FP_SYSCALL,       /* reads, writes, sends and recvs of TCP qpip sockets that were
                           system calls (nothing to read, no room, no fast path...) */
    C_FP_KICK,          /* system calls made only to wake the device's engine */
    C_FP_KICK_MAPPED,   /* ... wake-ups through the mapped kick register instead */
    C_FP_OPT,           /* setsockopt(TCP_CORK) done in user space */
    C_FP_SENDFILE,      /* sendfile calls done with a pread and a user-space write */
    C_DECLINED_BASE,    /* + reason (1..15), declines by the driver or by the library */
    C_COUNT = C_DECLINED_BASE + 16
};
/* Declines the library makes itself (the driver's are 1..8, qpip.h). */
#define DECLINE_LOCAL_SCOPE 15 /* an IPv6 address with a scope id: the driver takes none */
extern _Atomic unsigned long qp_counters[C_COUNT];
static inline void count(enum qp_counter c)
{
    atomic_fetch_add_explicit(&qp_counters[c], 1, memory_order_relaxed);
}

/* ---- ctx.c ------------------------------------------------------------------------------- */
struct mmsghdr;  /* <sys/socket.h> defines it under _GNU_SOURCE only */
struct timespec;
/* libc's own functions, found with dlsym(RTLD_NEXT) by the constructor (qp_init). */
struct real_fns {
    int (*socket)(int, int, int);
    int (*socketpair)(int, int, int, int[2]);
    int (*connect)(int, const struct sockaddr *, socklen_t);
    int (*bind)(int, const struct sockaddr *, socklen_t);
    int (*listen)(int, int);
    int (*accept)(int, struct sockaddr *, socklen_t *);
    int (*accept4)(int, struct sockaddr *, socklen_t *, int);
    ssize_t (*send)(int, const void *, size_t, int);
    ssize_t (*sendto)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
    ssize_t (*sendmsg)(int, const struct msghdr *, int);
    int (*sendmmsg)(int, struct mmsghdr *, unsigned, int);
    int (*recvmmsg)(int, struct mmsghdr *, unsigned, int, struct timespec *);
    ssize_t (*recv)(int, void *, size_t, int);
    ssize_t (*recvfrom)(int, void *, size_t, int, struct sockaddr *, socklen_t *);
    ssize_t (*recvmsg)(int, struct msghdr *, int);
    int (*getsockname)(int, struct sockaddr *, socklen_t *);
    int (*getpeername)(int, struct sockaddr *, socklen_t *);
    int (*getsockopt)(int, int, int, void *, socklen_t *);
    int (*setsockopt)(int, int, int, const void *, socklen_t);
    int (*shutdown)(int, int);
    int (*close)(int);
    int (*close_range)(unsigned, unsigned, int);
    void (*closefrom)(int);
    int (*dup)(int);
    int (*dup2)(int, int);
    int (*dup3)(int, int, int);
    int (*fcntl)(int, int, ...);
    int (*fcntl64)(int, int, ...);
    ssize_t (*read)(int, void *, size_t);
    ssize_t (*write)(int, const void *, size_t);
    ssize_t (*readv)(int, const struct iovec *, int);
    ssize_t (*writev)(int, const struct iovec *, int);
    ssize_t (*sendfile)(int, int, off_t *, size_t);
};
extern struct real_fns real;
void qp_init(void);

/* The process's context file: opened on first need, kept at a high descriptor. Returns it,
 * or -1 with *WHY saying why there is none (no device, old driver, ...). */
int ctx_get(const char **why);
/* The driver's interface version, once a context was opened (UDP sockets need 6). */
extern _Atomic unsigned ctx_uapi_version;
/* The program closed or replaced descriptor FD (close, dup2 onto it, close_range): if it
 * was the context, forget it (it is reopened on the next need). */
void ctx_forget_fd(int fd);
void ctx_forget_range(unsigned first, unsigned last);
/* An ioctl on the context failed with ENOTTY: the descriptor may be someone else's file
 * now. Returns 1 if the context was stale (forgotten: the caller may retry), 0 if it is
 * the context, whose driver then lacks the sockets interface (ctx_get says so from now). */
int ctx_check_stale(int fd);

/* ---- fastpath.c ------------------------------------------------------------------------------
 * The user-level data path of connected TCP qpip sockets (see the top of fastpath.c).
 * fp_recv/fp_send return the bytes, or FP_SYSCALL: the caller makes the system call
 * instead (nothing was consumed or sent). Only for plain calls (recv flags 0 or
 * MSG_DONTWAIT, send flags 0, MSG_NOSIGNAL or MSG_DONTWAIT): the fast path never blocks
 * and never fails, so the flags change nothing when it succeeds. */
#define FP_SYSCALL (-3)
struct iovec;
ssize_t fp_recv(int fd, const struct iovec *iov, int iovcnt);
ssize_t fp_send(int fd, const struct iovec *iov, int iovcnt);
/* A socket's mapping, and the layout read once from its state page. */
struct fp_sock {
    uint8_t *base;
    size_t len;
    struct qpip_sock_shm *m;
    uint8_t *db, *cq, *sq, *rq, *rx, *tx;
    uint32_t cq_depth, sq_depth, rx_slots, slot_bytes, tx_bytes, tx_chunk, lkey;
    uint64_t iova_rx, iova_tx;
};
/* The parts below fp_recv/fp_send, on a mapping made by the caller (the unit test's, a
 * simulated device's): fp_attach reads the layout from the state page at BASE. FD is only
 * for the engine's kick. TOTAL is the iovec's bytes. */
void fp_attach(struct fp_sock *s, void *base, size_t len);
ssize_t fp_recv_on(int fd, struct fp_sock *s, const struct iovec *iov, int iovcnt);
ssize_t fp_send_on(int fd, struct fp_sock *s, const struct iovec *iov, int iovcnt, size_t total);
/* setsockopt(FD, SOL_TCP, TCP_CORK, ON) in user space: 0, or FP_SYSCALL. */
int fp_cork(int fd, int on);
int fp_cork_on(int fd, struct fp_sock *s, int on);
/* sendfile(OUT, IN, OFF, WANT) into a mapped socket: the bytes, 0 at the file's end, -1
 * with errno, or FP_SYSCALL (nothing done). */
ssize_t fp_sendfile(int out, int in, off_t *off, size_t want);
/* FD is closed or replaced (close, dup2/dup3 onto it, close_range): unmap its socket, now
 * or when the last fast-path call in flight on it (another thread's) ends. */
void fp_forget(int fd);
void fp_forget_range(unsigned first, unsigned last);

/* ---- intercept.c helpers used elsewhere ---------------------------------------------------- */
/* Is FD a qpip socket? For a descriptor that a kernel socket call refused with ENOTSOCK. */
int fd_probe_qpip(int fd);

#endif
