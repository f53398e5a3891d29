/* The socket calls libqpip-preload.so interposes (docs/sockets.md).
 *
 * Every call takes one of two paths:
 *  - the descriptor is marked qpip in the table: the qpip path (q_*), which uses read/write
 *    when the call is a plain one, else the socket's IOCTL_SOCK_* ioctl;
 *  - otherwise libc's own function (real.*).
 * The table is a hint (fdtable.c), so each path checks the other's answer: a qpip ioctl that
 * fails with ENOTTY means "not a qpip socket any more" (the mark is cleared, libc is called),
 * and a libc call that fails with ENOTSOCK on an unmarked descriptor makes the library look
 * whether it is a qpip socket it did not know (inherited across exec, received over a Unix
 * socket, dup'ed behind its back), and if so redo the call on the qpip path.
 *
 * connect and listen are where sockets become qpip sockets: on a kernel TCP socket of
 * AF_INET or AF_INET6 the library asks the driver (IOCTL_SOCK_CONNECT/LISTEN on the
 * context) and, when it carries the socket, moves the qpip socket's file onto the
 * program's descriptor with dup3; when it declines, the kernel does the call as always.
 * A UDP socket of those families becomes one at connect (IOCTL_SOCK_CONNECT) and after a
 * successful bind (IOCTL_SOCK_BIND); on it, the calls that carry addresses (sendto,
 * recvfrom, sendmsg and recvmsg with a name, connect again) go through the ioctls. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "qpip_preload.h"

/* A q_* function's "this is not a qpip socket after all: ask libc". Never a libc result. */
#define NOT_OURS (-2)

#define ENSURE_INIT()                    \
    do {                                 \
        if (QP_UNLIKELY(!real.close))    \
            qp_init();                   \
    } while (0)

/* Runs Q (the qpip path) if FD is marked, else K (libc); see the top of the file. T is the
 * call's return type. */
#define DISPATCH(T, fd, Q, K)                                                  \
    do {                                                                       \
        ENSURE_INIT();                                                         \
        if (!qp_disabled && (fdt_get(fd) & FD_QPIP)) {                          \
            T r_ = (Q);                                                        \
            if (r_ != NOT_OURS)                                                \
                return r_;                                                     \
        }                                                                      \
        T r_ = (K);                                                            \
        if (QP_UNLIKELY(r_ == -1 && errno == ENOTSOCK) && rediscover(fd)) {    \
            r_ = (Q);                                                          \
            if (r_ == NOT_OURS) {                                              \
                errno = ENOTSOCK;                                              \
                r_ = -1;                                                       \
            }                                                                  \
        }                                                                      \
        return r_;                                                             \
    } while (0)

/* ---- telling qpip sockets apart ------------------------------------------------------------- */

static void log_fd_event(int fd, const char *what)
{
    if (qp_log_level < 2)
        return;
    struct logbuf b;
    lb_init(&b);
    lb_str(&b, "fd ");
    lb_num(&b, fd);
    lb_str(&b, what);
    lb_emit(&b);
}

int fd_probe_qpip(int fd)
{
    /* A qpip socket is an anonymous-inode file: when /proc says the descriptor is anything
     * else, no ioctl is tried on it (a device file of another driver might take the number
     * for something of its own). */
    char path[32] = "/proc/self/fd/", link[64];
    size_t n = strlen(path);
    char digits[12];
    int i = 0;
    unsigned v = (unsigned)fd;
    do {
        digits[i++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (i)
        path[n++] = digits[--i];
    path[n] = 0;
    ssize_t len = readlink(path, link, sizeof(link) - 1);
    if (len >= 0) {
        link[len] = 0;
        if (strncmp(link, "anon_inode:", 11) != 0)
            return 0;
    }
    int saved = errno;
    struct qpip_sock_name nm = { .size = sizeof(nm), .peer = 0 };
    int r = ioctl(fd, QPIP_IOCTL_SOCK_NAME, &nm);
    int err = errno;
    errno = saved;
    /* Understood (even if refused for a reason of its own): a qpip socket. ENOTTY, EINVAL:
     * a file that does not know the ioctl; EBADF: no file. */
    return r == 0 || (err != ENOTTY && err != EINVAL && err != EBADF && err != EFAULT);
}

/* A libc call refused FD with ENOTSOCK: is it a qpip socket the table did not know? */
static int rediscover(int fd)
{
    if (qp_disabled || !fd_probe_qpip(fd))
        return 0;
    /* A UDP one takes the address-carrying calls its own way. */
    int type = 0, saved = errno;
    struct qpip_sock_opt o = {
        .size = sizeof(o), .level = SOL_SOCKET, .name = SO_TYPE, .optval = (uintptr_t)&type, .optlen = sizeof(type)
    };
    unsigned bits = FD_QPIP;
    if (ioctl(fd, QPIP_IOCTL_SOCK_OPT, &o) == 0 && type == SOCK_DGRAM)
        bits |= FD_UDP;
    errno = saved;
    fdt_set(fd, bits);
    count(C_REDISCOVERED);
    log_fd_event(fd, " is a qpip socket (found by ENOTSOCK)");
    return 1;
}

/* An IOCTL_SOCK_* ioctl on a marked descriptor: 0, -1 with errno as the socket call would
 * set it, or NOT_OURS when the file does not know the ioctl (the mark was stale). */
static int sock_ioctl(int fd, unsigned long req, void *arg)
{
    count(C_CALL_IOCTL);
    if (ioctl(fd, req, arg) == 0)
        return 0;
    if (errno == ENOTTY) {
        fdt_set(fd, 0);
        count(C_UNMARKED);
        log_fd_event(fd, " is not a qpip socket any more (ENOTTY)");
        return NOT_OURS;
    }
    return -1;
}

/* Linux's EFAULT for an address out-argument: a length pointer is needed, and a buffer
 * when the length is not 0. */
static int bad_addr_out(const void *addr, const socklen_t *len)
{
    return !len || (!addr && *len);
}

/* ---- the qpip path --------------------------------------------------------------------------- */

/* A TCP qpip socket's plain read or write may take the fast path (fastpath.c). */
static int fast_candidate(int fd, size_t iovcnt)
{
    return !qp_disabled && iovcnt <= IOV_MAX && (fdt_get(fd) & (FD_QPIP | FD_UDP)) == FD_QPIP;
}

/* The fast path, else the system call (counted). */
static ssize_t fast_send(int fd, const struct iovec *iov, size_t iovcnt)
{
    if (fast_candidate(fd, iovcnt)) {
        ssize_t r = fp_send(fd, iov, (int)iovcnt);
        if (r != FP_SYSCALL)
            return r;
        count(C_FP_SYSCALL);
    }
    return iovcnt == 1 ? real.write(fd, iov[0].iov_base, iov[0].iov_len) : real.writev(fd, iov, (int)iovcnt);
}

static ssize_t fast_recv(int fd, const struct iovec *iov, size_t iovcnt)
{
    if (fast_candidate(fd, iovcnt)) {
        ssize_t r = fp_recv(fd, iov, (int)iovcnt);
        if (r != FP_SYSCALL)
            return r;
        count(C_FP_SYSCALL);
    }
    return iovcnt == 1 ? real.read(fd, iov[0].iov_base, iov[0].iov_len) : real.readv(fd, iov, (int)iovcnt);
}

static ssize_t q_send(int fd, const struct iovec *iov, size_t iovcnt, int flags)
{
    if (flags == 0) {
        /* A plain send is a write: the fast path, or one system call, the file's own. */
        count(C_CALL_NATIVE);
        return fast_send(fd, iov, iovcnt);
    }
    /* Flags that change nothing when the fast path succeeds (it neither blocks nor fails);
     * when it cannot, the ioctl below applies them. */
    if (!(flags & ~(MSG_NOSIGNAL | MSG_DONTWAIT)) && fast_candidate(fd, iovcnt)) {
        ssize_t r = fp_send(fd, iov, (int)iovcnt);
        if (r != FP_SYSCALL)
            return r;
        count(C_FP_SYSCALL);
    }
    struct qpip_sock_msg m = {
        .size = sizeof(m), .flags = (__u32)flags, .iov = (uintptr_t)iov, .iov_len = (__u32)iovcnt
    };
    int r = sock_ioctl(fd, QPIP_IOCTL_SOCK_SEND, &m);
    return r ? r : (ssize_t)m.bytes;
}

static ssize_t q_recv(int fd, const struct iovec *iov, size_t iovcnt, int flags, int *msg_flags)
{
    /* Flags TCP's receive ignores on Linux, which the ioctl would refuse. */
    flags &= ~(MSG_NOSIGNAL | MSG_CMSG_CLOEXEC);
    if (msg_flags)
        *msg_flags = 0;
    if (flags == 0) {
        count(C_CALL_NATIVE);
        return fast_recv(fd, iov, iovcnt);
    }
    if (flags == MSG_DONTWAIT && fast_candidate(fd, iovcnt)) {
        ssize_t r = fp_recv(fd, iov, (int)iovcnt);
        if (r != FP_SYSCALL)
            return r;
        count(C_FP_SYSCALL);
    }
    struct qpip_sock_msg m = {
        .size = sizeof(m), .flags = (__u32)flags, .iov = (uintptr_t)iov, .iov_len = (__u32)iovcnt
    };
    int r = sock_ioctl(fd, QPIP_IOCTL_SOCK_RECV, &m);
    if (r)
        return r;
    if (msg_flags)
        *msg_flags = (int)m.msg_flags;
    return (ssize_t)m.bytes;
}

/* A UDP qpip socket's send to ADDR, or its receive with the source asked for (ADDR then the
 * out-buffer of *ADDRLEN bytes, set as Linux does): one IOCTL_SOCK_SEND/RECV, whose
 * structure carries the address. */
static ssize_t q_send_to(int fd, const struct iovec *iov, size_t iovcnt, int flags,
                         const struct sockaddr *addr, socklen_t addrlen)
{
    struct qpip_sock_msg m = {
        .size = sizeof(m), .flags = (__u32)flags, .iov = (uintptr_t)iov, .iov_len = (__u32)iovcnt
    };
    if (addr && addrlen) {
        if (addrlen > sizeof(m.addr)) {
            errno = EINVAL;
            return -1;
        }
        memcpy(m.addr, addr, addrlen);
        m.addr_len = addrlen;
    }
    int r = sock_ioctl(fd, QPIP_IOCTL_SOCK_SEND, &m);
    return r ? r : (ssize_t)m.bytes;
}

static ssize_t q_recv_from(int fd, const struct iovec *iov, size_t iovcnt, int flags, void *addr,
                           socklen_t *addrlen, int *msg_flags)
{
    flags &= ~(MSG_NOSIGNAL | MSG_CMSG_CLOEXEC);
    struct qpip_sock_msg m = {
        .size = sizeof(m), .flags = (__u32)flags, .iov = (uintptr_t)iov, .iov_len = (__u32)iovcnt, .addr_len = 1
    };
    int r = sock_ioctl(fd, QPIP_IOCTL_SOCK_RECV, &m);
    if (r)
        return r;
    if (addr && addrlen)
        addr_copy_out(addr, addrlen, m.addr, m.addr_len < sizeof(m.addr) ? m.addr_len : sizeof(m.addr));
    if (msg_flags)
        *msg_flags = (int)m.msg_flags;
    return (ssize_t)m.bytes;
}

static ssize_t q_sendmsg(int fd, const struct msghdr *msg, int flags)
{
    /* TCP ignores the destination of a connected socket, and the device carries no
     * ancillary data: msg_name and msg_control are ignored, as Linux's TCP does. */
    if (msg->msg_iovlen > IOV_MAX) {
        errno = EMSGSIZE;
        return -1;
    }
    if ((fdt_get(fd) & FD_UDP) && msg->msg_name && msg->msg_namelen)
        return q_send_to(fd, msg->msg_iov, msg->msg_iovlen, flags, msg->msg_name, msg->msg_namelen);
    return q_send(fd, msg->msg_iov, msg->msg_iovlen, flags);
}

static ssize_t q_recvmsg(int fd, struct msghdr *msg, int flags)
{
    if (msg->msg_iovlen > IOV_MAX) {
        errno = EMSGSIZE;
        return -1;
    }
    int mflags;
    if (fdt_get(fd) & FD_UDP) {
        /* A datagram's source, and MSG_TRUNC when it was cut: the ioctl says both. */
        ssize_t r = q_recv_from(fd, msg->msg_iov, msg->msg_iovlen, flags, msg->msg_name,
                                msg->msg_name ? &msg->msg_namelen : NULL, &mflags);
        if (r >= 0) {
            msg->msg_controllen = 0;
            msg->msg_flags = mflags;
        }
        return r;
    }
    ssize_t r = q_recv(fd, msg->msg_iov, msg->msg_iovlen, flags, &mflags);
    if (r >= 0) {
        /* TCP reports no source address and no ancillary data. */
        if (msg->msg_name)
            msg->msg_namelen = 0;
        msg->msg_controllen = 0;
        msg->msg_flags = mflags;
    }
    return r;
}

static ssize_t q_recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *addr, socklen_t *addrlen)
{
    struct iovec iov = { buf, len };
    if ((fdt_get(fd) & FD_UDP) && addr) {
        if (bad_addr_out(addr, addrlen)) {
            errno = EFAULT;
            return -1;
        }
        return q_recv_from(fd, &iov, 1, flags, addr, addrlen, NULL);
    }
    ssize_t r = q_recv(fd, &iov, 1, flags, NULL);
    /* Linux's recvfrom on TCP: no address, *addrlen set to 0. */
    if (r >= 0 && addr && addrlen)
        *addrlen = 0;
    return r;
}

static int q_name(int fd, int peer, struct sockaddr *addr, socklen_t *addrlen)
{
    if (bad_addr_out(addr, addrlen)) {
        errno = EFAULT;
        return -1;
    }
    struct qpip_sock_name nm = { .size = sizeof(nm), .peer = (__u32)peer };
    int r = sock_ioctl(fd, QPIP_IOCTL_SOCK_NAME, &nm);
    if (r)
        return r;
    socklen_t full = nm.addr_len < sizeof(nm.addr) ? nm.addr_len : sizeof(nm.addr);
    addr_copy_out(addr, addrlen, nm.addr, full);
    return 0;
}

static int q_getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
    if (!len) {
        errno = EFAULT;
        return -1;
    }
    struct qpip_sock_opt o = {
        .size = sizeof(o), .set = 0, .level = level, .name = name, .optval = (uintptr_t)val, .optlen = *len
    };
    int r = sock_ioctl(fd, QPIP_IOCTL_SOCK_OPT, &o);
    if (r)
        return r;
    *len = o.optlen;
    return 0;
}

static int q_setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
    /* TCP_CORK on and off around each response (nginx's tcp_nopush, HTTP servers'
     * header-then-body) is the state page's, without a system call, when mapped. */
    if (level == SOL_TCP && name == TCP_CORK && val && len >= (socklen_t)sizeof(int) &&
        fast_candidate(fd, 1) && fp_cork(fd, *(const int *)val != 0) == 0)
        return 0;
    struct qpip_sock_opt o = {
        .size = sizeof(o), .set = 1, .level = level, .name = name, .optval = (uintptr_t)val, .optlen = len
    };
    return sock_ioctl(fd, QPIP_IOCTL_SOCK_OPT, &o);
}

static int q_shutdown(int fd, int how)
{
    struct qpip_sock_shutdown s = { .size = sizeof(s), .how = (__u32)how };
    return sock_ioctl(fd, QPIP_IOCTL_SOCK_SHUTDOWN, &s);
}

static int q_accept(int fd, struct sockaddr *addr, socklen_t *addrlen, int flags)
{
    if (addr && bad_addr_out(addr, addrlen)) {
        errno = EFAULT;
        return -1;
    }
    struct qpip_sock_accept a = { .size = sizeof(a), .flags = (__u32)flags };
    int r = sock_ioctl(fd, QPIP_IOCTL_SOCK_ACCEPT, &a);
    if (r)
        return r;
    fdt_set(a.fd, a.qpip ? FD_QPIP : FD_KERNEL_TCP);
    count(a.qpip ? C_ACCEPT_QPIP : C_ACCEPT_KERNEL);
    socklen_t full = a.addr_len < sizeof(a.addr) ? a.addr_len : sizeof(a.addr);
    if (qp_log_level >= 1) {
        struct logbuf b;
        lb_init(&b);
        lb_str(&b, "fd ");
        lb_num(&b, a.fd);
        lb_str(&b, " accept ");
        lb_addr(&b, (const struct sockaddr *)a.addr, full);
        lb_str(&b, " on fd ");
        lb_num(&b, fd);
        lb_str(&b, a.qpip ? " -> qpip" : " -> kernel (not through the device)");
        lb_emit(&b);
    }
    if (addr)
        addr_copy_out(addr, addrlen, a.addr, full);
    return a.fd;
}

static int is_nonblocking(int fd)
{
    int fl = real.fcntl(fd, F_GETFL);
    return fl >= 0 && (fl & O_NONBLOCK);
}

/* connect on a descriptor that is a qpip socket already: what Linux answers for a socket
 * that is connecting (EALREADY, or for a blocking one: wait), connected (0 the first time
 * after an EINPROGRESS, then EISCONN), failed (the error), or listening (EISCONN). */
static int q_reconnect(int fd)
{
    int v = 0;
    socklen_t vl = sizeof(v);
    int r = q_getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &vl);
    if (r == NOT_OURS)
        return NOT_OURS;
    if (r == 0 && v) {
        errno = EISCONN;
        return -1;
    }
    struct pollfd p = { .fd = fd, .events = POLLOUT };
    if (poll(&p, 1, 0) == 0) {
        if (is_nonblocking(fd)) {
            errno = EALREADY;
            return -1;
        }
        if (poll(&p, 1, -1) < 0)
            return -1; /* EINTR: a signal, as Linux's connect would say */
    }
    v = 0;
    vl = sizeof(v);
    if (q_getsockopt(fd, SOL_SOCKET, SO_ERROR, &v, &vl) == 0 && v) {
        fdt_set(fd, fdt_get(fd) & ~FD_CONNECTING);
        errno = v;
        return -1;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (q_name(fd, 1, (struct sockaddr *)&ss, &sl) == 0) {
        unsigned st = fdt_get(fd);
        if (st & FD_CONNECTING) {
            fdt_set(fd, st & ~FD_CONNECTING);
            return 0;
        }
        errno = EISCONN;
        return -1;
    }
    errno = ECONNABORTED;
    return -1;
}

/* ---- connect and listen: where sockets become qpip sockets ---------------------------------- */

#define KIND_TCP 1
#define KIND_UDP 2

/* Is FD a kernel TCP or UDP socket of FAMILY (0: either family)? KIND_TCP, KIND_UDP, 0 for
 * anything else, -1 with errno when it is no socket at all. */
static int kernel_kind(int fd, int family)
{
    int dom = 0, proto = 0;
    socklen_t l1 = sizeof(dom), l2 = sizeof(proto);
    if (real.getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &l1) != 0)
        return -1;
    if (real.getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &l2) != 0)
        return -1;
    if ((dom != AF_INET && dom != AF_INET6) || (family != 0 && family != dom))
        return 0;
    return proto == IPPROTO_TCP ? KIND_TCP : proto == IPPROTO_UDP ? KIND_UDP : 0;
}

static int kernel_tcp(int fd, int family)
{
    int k = kernel_kind(fd, family);
    return k < 0 ? k : k == KIND_TCP;
}

/* Moves the driver's new file NEW_FD onto the program's descriptor FD, keeping FD's
 * close-on-exec flag, and marks it. */
static int install(int new_fd, int fd, unsigned bits)
{
    int fdflags = real.fcntl(fd, F_GETFD);
    int r = real.dup3(new_fd, fd, fdflags > 0 && (fdflags & FD_CLOEXEC) ? O_CLOEXEC : 0);
    int err = errno;
    real.close(new_fd);
    if (r < 0) {
        errno = err;
        return -1;
    }
    fdt_set(fd, FD_QPIP | bits);
    return 0;
}

static void log_decision(int fd, const char *call, const struct sockaddr *addr, socklen_t len,
                         const char *result, const char *detail, int err)
{
    if (qp_log_level < 1)
        return;
    struct logbuf b;
    lb_init(&b);
    lb_str(&b, "fd ");
    lb_num(&b, fd);
    lb_str(&b, " ");
    lb_str(&b, call);
    lb_str(&b, " ");
    lb_addr(&b, addr, len);
    lb_str(&b, " -> ");
    lb_str(&b, result);
    if (detail || err) {
        lb_str(&b, " (");
        if (detail)
            lb_str(&b, detail);
        if (detail && err)
            lb_str(&b, ": ");
        if (err)
            lb_errno(&b, err);
        lb_str(&b, ")");
    }
    lb_emit(&b);
}

/* Which errors of the context's ioctls mean "not here, let the kernel do it" rather than
 * being the call's own answer: a driver without the ioctl, a device that went away. */
static int ioctl_means_kernel(int err)
{
    return err == ENOTTY || err == EINVAL || err == ENODEV || err == ENXIO || err == EBADF;
}

/* connect on a UDP qpip socket: the driver connects its kernel socket (Linux's answers,
 * AF_UNSPEC too) and sends to the peer over the device if it is routed through it. */
static int q_udp_peer(int fd, const struct sockaddr *addr, socklen_t len)
{
    struct qpip_sock_peer p = { .size = sizeof(p) };
    if (len > sizeof(p.addr)) {
        errno = EINVAL;
        return -1;
    }
    if (len && !addr) {
        errno = EFAULT;
        return -1;
    }
    if (len)
        memcpy(p.addr, addr, len);
    p.addr_len = len;
    int r = sock_ioctl(fd, QPIP_IOCTL_SOCK_PEER, &p);
    if (r == 0 && qp_log_level >= 2)
        log_decision(fd, "udp connect", addr, len, "qpip (connected again)", NULL, 0);
    return r;
}

/* A qpip socket's connect: a UDP one's, or a TCP one's again. */
static int q_connect(int fd, const struct sockaddr *addr, socklen_t len)
{
    return (fdt_get(fd) & FD_UDP) ? q_udp_peer(fd, addr, len) : q_reconnect(fd);
}

/* Asks the driver for a UDP socket (REQ with ARG on the context): 0 when it answered, 1 when
 * the kernel keeps the socket (*WHY says why: no device, a driver without UDP sockets, an
 * ioctl refused as "not here"), -1 with errno for the driver's own error. */
static int udp_ask(unsigned long req, void *arg, const char **why)
{
    for (int attempt = 0;; attempt++) {
        int ctx = ctx_get(why);
        if (ctx < 0)
            return 1;
        if (atomic_load(&ctx_uapi_version) < 6) {
            *why = "the driver has no UDP sockets (uapi < 6)";
            return 1;
        }
        if (ioctl(ctx, req, arg) == 0)
            return 0;
        int err = errno;
        if ((err == ENOTTY || err == EBADF) && attempt == 0 && ctx_check_stale(ctx))
            continue;
        if (ioctl_means_kernel(err)) {
            count(C_KERNEL_ERROR);
            *why = "ioctl failed";
            errno = err;
            return 1;
        }
        errno = err;
        return -1;
    }
}

static void log_declined(int fd, const char *call, const struct sockaddr *addr, socklen_t len, unsigned declined)
{
    unsigned d = declined < 16 ? declined : 0;
    count(C_DECLINED_BASE + d);
    if (qp_log_level >= 1) {
        char detail[40] = "declined: ";
        strncat(detail, decline_name(d), sizeof(detail) - strlen(detail) - 1);
        log_decision(fd, call, addr, len, "kernel", detail, 0);
    }
}

/* connect on a kernel UDP socket: the device carries it when the peer is routed through its
 * interface. */
static int udp_connect(int fd, const struct sockaddr *addr, socklen_t len)
{
    struct qpip_endpoint ep;
    if (addr_to_endpoint(addr, len, &ep) != 0)
        return real.connect(fd, addr, len);
    if (addr->sa_family == AF_INET6 && ((const struct sockaddr_in6 *)addr)->sin6_scope_id) {
        log_declined(fd, "udp connect", addr, len, DECLINE_LOCAL_SCOPE);
        return real.connect(fd, addr, len);
    }
    struct qpip_sock_connect c = { .size = sizeof(c), .fd = fd, .peer = ep, .new_fd = -1 };
    const char *why = NULL;
    int r = udp_ask(QPIP_IOCTL_SOCK_CONNECT, &c, &why);
    if (r < 0) {
        int err = errno;
        log_decision(fd, "udp connect", addr, len, "error", NULL, err);
        errno = err;
        return -1;
    }
    if (r > 0) {
        if (qp_log_level >= 2)
            log_decision(fd, "udp connect", addr, len, "kernel", why, 0);
        return real.connect(fd, addr, len);
    }
    if (c.new_fd < 0) {
        log_declined(fd, "udp connect", addr, len, c.declined);
        return real.connect(fd, addr, len);
    }
    if (install(c.new_fd, fd, FD_UDP) != 0) {
        /* The kernel socket is bound and connected already: it stays the program's. */
        log_decision(fd, "udp connect", addr, len, "kernel", "dup3 of the qpip socket failed", errno);
        return 0;
    }
    count(C_UDP_CONNECT_QPIP);
    log_decision(fd, "udp connect", addr, len, "qpip", NULL, 0);
    return 0;
}

static int do_connect(int fd, const struct sockaddr *addr, socklen_t len)
{
    unsigned st = fdt_get(fd);
    if (st & FD_QPIP) {
        int r = q_connect(fd, addr, len);
        if (r != NOT_OURS)
            return r;
        st = 0;
    }
    if (!addr || len < sizeof(sa_family_t) || (addr->sa_family != AF_INET && addr->sa_family != AF_INET6))
        return real.connect(fd, addr, len);
    /* A UDP socket of either family takes an address of either (IPv6 ones IPv4 too). */
    if (st & FD_KERNEL_UDP)
        return udp_connect(fd, addr, len);
    /* The hint from socket() saves two getsockopt calls when the address is of the
     * socket's family (else the kernel's answer, EAFNOSUPPORT or not, is what counts). */
    if (!(st & FD_KERNEL_TCP) || !(st & FD_INET6) != (addr->sa_family == AF_INET)) {
        int t = kernel_kind(fd, addr->sa_family);
        if (t < 0 && errno == ENOTSOCK && rediscover(fd)) {
            int r = q_connect(fd, addr, len);
            if (r != NOT_OURS)
                return r;
        }
        if (t == KIND_UDP)
            return udp_connect(fd, addr, len);
        if (t != KIND_TCP) {
            if (qp_log_level >= 2 && t == 0)
                log_decision(fd, "connect", addr, len, "kernel", "not a TCP socket of this family", 0);
            return real.connect(fd, addr, len);
        }
    }
    struct qpip_endpoint ep;
    if (addr_to_endpoint(addr, len, &ep) != 0)
        return real.connect(fd, addr, len); /* a short address: the kernel says EINVAL */
    if (addr->sa_family == AF_INET6 && ((const struct sockaddr_in6 *)addr)->sin6_scope_id) {
        count(C_DECLINED_BASE + DECLINE_LOCAL_SCOPE);
        log_decision(fd, "connect", addr, len, "kernel", "declined: scope-id", 0);
        return real.connect(fd, addr, len);
    }
    for (int attempt = 0;; attempt++) {
        const char *why = NULL;
        int ctx = ctx_get(&why);
        if (ctx < 0) {
            count(C_KERNEL_NO_DEVICE);
            log_decision(fd, "connect", addr, len, "kernel", why, 0);
            return real.connect(fd, addr, len);
        }
        struct qpip_sock_connect c = { .size = sizeof(c), .fd = fd, .peer = ep, .new_fd = -1 };
        if (ioctl(ctx, QPIP_IOCTL_SOCK_CONNECT, &c) != 0) {
            int err = errno;
            if ((err == ENOTTY || err == EBADF) && attempt == 0 && ctx_check_stale(ctx))
                continue; /* the program had closed our context: open it again */
            if (ioctl_means_kernel(err)) {
                count(C_KERNEL_ERROR);
                log_decision(fd, "connect", addr, len, "kernel", "ioctl failed", err);
                return real.connect(fd, addr, len);
            }
            log_decision(fd, "connect", addr, len, "error", NULL, err);
            errno = err;
            return -1;
        }
        if (c.new_fd < 0) {
            unsigned d = c.declined < 16 ? c.declined : 0;
            count(C_DECLINED_BASE + d);
            if (qp_log_level >= 1) {
                char detail[40] = "declined: ";
                strncat(detail, decline_name(d), sizeof(detail) - strlen(detail) - 1);
                log_decision(fd, "connect", addr, len, "kernel", detail, 0);
            }
            return real.connect(fd, addr, len);
        }
        if (install(c.new_fd, fd, c.status ? FD_CONNECTING : 0) != 0) {
            int err = errno;
            log_decision(fd, "connect", addr, len, "error", "dup3 of the qpip socket failed", err);
            errno = err;
            return -1;
        }
        count(C_CONNECT_QPIP);
        log_decision(fd, "connect", addr, len, "qpip", c.status ? "in progress" : NULL, 0);
        if (c.status == 0)
            return 0;
        /* The driver's status is the errno connect returns (EINPROGRESS). */
        errno = c.status;
        return -1;
    }
}

/* The local address of kernel socket or qpip socket FD, for the log. */
static socklen_t local_name(int fd, struct sockaddr_storage *ss)
{
    socklen_t sl = sizeof(*ss);
    int r = (fdt_get(fd) & FD_QPIP) ? q_name(fd, 0, (struct sockaddr *)ss, &sl)
                                   : real.getsockname(fd, (struct sockaddr *)ss, &sl);
    return r == 0 ? sl : 0;
}

static int q_listen(int fd, int backlog)
{
    /* Linux lets a listening socket listen again (a new backlog); a connected one: EINVAL.
     * The qpip listener keeps the backlog it was made with. */
    (void)backlog;
    if (fdt_get(fd) & FD_UDP) {
        errno = EOPNOTSUPP; /* as Linux's UDP answers */
        return -1;
    }
    int v = 0;
    socklen_t vl = sizeof(v);
    int r = q_getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &vl);
    if (r)
        return r;
    if (!v) {
        errno = EINVAL;
        return -1;
    }
    return 0;
}

static void log_listen(int fd, const char *result, const char *detail, int err)
{
    if (qp_log_level < 1)
        return;
    struct sockaddr_storage ss;
    socklen_t sl = local_name(fd, &ss);
    log_decision(fd, "listen", (struct sockaddr *)&ss, sl, result, detail, err);
}

static int do_listen(int fd, int backlog)
{
    unsigned st = fdt_get(fd);
    if (st & FD_QPIP) {
        int r = q_listen(fd, backlog);
        if (r != NOT_OURS)
            return r;
        st = 0;
    }
    if (!(st & FD_KERNEL_TCP)) {
        int t = kernel_tcp(fd, 0);
        if (t < 0 && errno == ENOTSOCK && rediscover(fd)) {
            int r = q_listen(fd, backlog);
            if (r != NOT_OURS)
                return r;
        }
        if (t <= 0)
            return real.listen(fd, backlog);
    }
    for (int attempt = 0;; attempt++) {
        const char *why = NULL;
        int ctx = ctx_get(&why);
        if (ctx < 0) {
            count(C_KERNEL_NO_DEVICE);
            int r = real.listen(fd, backlog);
            log_listen(fd, "kernel", why, 0);
            return r;
        }
        struct qpip_sock_listen l = { .size = sizeof(l), .fd = fd, .backlog = backlog, .new_fd = -1 };
        if (ioctl(ctx, QPIP_IOCTL_SOCK_LISTEN, &l) != 0) {
            int err = errno;
            if ((err == ENOTTY || err == EBADF) && attempt == 0 && ctx_check_stale(ctx))
                continue;
            if (ioctl_means_kernel(err)) {
                count(C_KERNEL_ERROR);
                int r = real.listen(fd, backlog);
                log_listen(fd, "kernel", "ioctl failed", err);
                return r;
            }
            log_listen(fd, "error", NULL, err);
            errno = err;
            return -1;
        }
        if (l.new_fd < 0) {
            unsigned d = l.declined < 16 ? l.declined : 0;
            count(C_DECLINED_BASE + d);
            /* The kernel socket listens already when the driver declines after making it
             * listen; listening again is harmless, and needed when it declined before. */
            int r = real.listen(fd, backlog);
            if (qp_log_level >= 1) {
                char detail[40] = "declined: ";
                strncat(detail, decline_name(d), sizeof(detail) - strlen(detail) - 1);
                log_listen(fd, "kernel", detail, 0);
            }
            return r;
        }
        if (install(l.new_fd, fd, 0) != 0) {
            int err = errno;
            log_listen(fd, "error", "dup3 of the qpip socket failed", err);
            errno = err;
            return -1;
        }
        count(C_LISTEN_QPIP);
        log_listen(fd, "qpip", NULL, 0);
        return 0;
    }
}

/* ---- the interposed functions ------------------------------------------------------------------ */

QP_EXPORT int socket(int domain, int type, int protocol)
{
    ENSURE_INIT();
    int fd = real.socket(domain, type, protocol);
    if (fd >= 0) {
        int inet = domain == AF_INET || domain == AF_INET6;
        int tcp = inet && (type & 0xf) == SOCK_STREAM && (protocol == 0 || protocol == IPPROTO_TCP);
        int udp = inet && (type & 0xf) == SOCK_DGRAM && (protocol == 0 || protocol == IPPROTO_UDP);
        unsigned bits = tcp ? FD_KERNEL_TCP : udp ? FD_KERNEL_UDP : 0;
        /* A new descriptor: whatever the table said about its number is stale. */
        fdt_set(fd, bits ? bits | (domain == AF_INET6 ? FD_INET6 : 0) : 0);
    }
    return fd;
}

/* bind: the kernel binds as always; then a UDP socket bound to the wildcard or one of the
 * device's addresses becomes a qpip socket (its datagrams through the device the device's,
 * the others its kernel socket's). A decline or a failure leaves the kernel socket as it is:
 * bind's own answer was the kernel's. */
QP_EXPORT int bind(int fd, const struct sockaddr *addr, socklen_t len)
{
    ENSURE_INIT();
    int r = real.bind(fd, addr, len);
    if (r != 0 || qp_disabled)
        return r;
    unsigned st = fdt_get(fd);
    if (st & (FD_QPIP | FD_KERNEL_TCP))
        return r;
    if (!(st & FD_KERNEL_UDP) && kernel_kind(fd, 0) != KIND_UDP)
        return r;
    int saved = errno;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (real.getsockname(fd, (struct sockaddr *)&ss, &sl) != 0)
        sl = 0;
    if (sl && ss.ss_family == AF_INET6 && ((struct sockaddr_in6 *)&ss)->sin6_scope_id) {
        log_declined(fd, "udp bind", (struct sockaddr *)&ss, sl, DECLINE_LOCAL_SCOPE);
        errno = saved;
        return r;
    }
    struct qpip_sock_bind b = { .size = sizeof(b), .fd = fd, .new_fd = -1 };
    const char *why = NULL;
    int q = udp_ask(QPIP_IOCTL_SOCK_BIND, &b, &why);
    if (q < 0)
        log_decision(fd, "udp bind", (struct sockaddr *)&ss, sl, "kernel", "ioctl failed", errno);
    else if (q > 0 && qp_log_level >= 2)
        log_decision(fd, "udp bind", (struct sockaddr *)&ss, sl, "kernel", why, 0);
    else if (q == 0 && b.new_fd < 0)
        log_declined(fd, "udp bind", (struct sockaddr *)&ss, sl, b.declined);
    else if (q == 0 && install(b.new_fd, fd, FD_UDP) != 0)
        log_decision(fd, "udp bind", (struct sockaddr *)&ss, sl, "kernel", "dup3 of the qpip socket failed", errno);
    else if (q == 0) {
        count(C_UDP_BIND_QPIP);
        log_decision(fd, "udp bind", (struct sockaddr *)&ss, sl, "qpip", NULL, 0);
    }
    errno = saved;
    return r;
}

QP_EXPORT int socketpair(int domain, int type, int protocol, int sv[2])
{
    ENSURE_INIT();
    int r = real.socketpair(domain, type, protocol, sv);
    if (r == 0) {
        fdt_set(sv[0], 0);
        fdt_set(sv[1], 0);
    }
    return r;
}

QP_EXPORT int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
    ENSURE_INIT();
    if (qp_disabled)
        return real.connect(fd, addr, len);
    return do_connect(fd, addr, len);
}

QP_EXPORT int listen(int fd, int backlog)
{
    ENSURE_INIT();
    if (qp_disabled)
        return real.listen(fd, backlog);
    return do_listen(fd, backlog);
}

static int kernel_accept(int fd, struct sockaddr *addr, socklen_t *addrlen, int flags)
{
    int r = real.accept4(fd, addr, addrlen, flags);
    if (r >= 0)
        fdt_set(r, 0);
    return r;
}

QP_EXPORT int accept(int fd, struct sockaddr *addr, socklen_t *addrlen)
{
    DISPATCH(int, fd, q_accept(fd, addr, addrlen, 0), kernel_accept(fd, addr, addrlen, 0));
}

QP_EXPORT int accept4(int fd, struct sockaddr *addr, socklen_t *addrlen, int flags)
{
    DISPATCH(int, fd, q_accept(fd, addr, addrlen, flags), kernel_accept(fd, addr, addrlen, flags));
}

QP_EXPORT ssize_t send(int fd, const void *buf, size_t len, int flags)
{
    struct iovec iov = { (void *)buf, len };
    DISPATCH(ssize_t, fd, q_send(fd, &iov, 1, flags), real.send(fd, buf, len, flags));
}

QP_EXPORT ssize_t sendto(int fd, const void *buf, size_t len, int flags, const struct sockaddr *addr,
                         socklen_t addrlen)
{
    /* The address: a UDP socket's destination; ignored on a connected TCP socket, as Linux
     * does. */
    struct iovec iov = { (void *)buf, len };
    DISPATCH(ssize_t, fd,
             (fdt_get(fd) & FD_UDP) && addr && addrlen ? q_send_to(fd, &iov, 1, flags, addr, addrlen)
                                                       : q_send(fd, &iov, 1, flags),
             real.sendto(fd, buf, len, flags, addr, addrlen));
}

/* sendmmsg and recvmmsg on a qpip socket: one sendmsg or recvmsg each, as many as go
 * (glibc's resolver sends its two queries with sendmmsg). recvmmsg's timeout is not
 * applied: it waits for the first datagram as recvmsg does, then takes what is there. */
static int q_sendmmsg(int fd, struct mmsghdr *vec, unsigned vlen, int flags)
{
    unsigned i;
    for (i = 0; i < vlen; i++) {
        ssize_t r = q_sendmsg(fd, &vec[i].msg_hdr, flags);
        if (r == NOT_OURS)
            return i ? (int)i : NOT_OURS;
        if (r < 0)
            return i ? (int)i : -1;
        vec[i].msg_len = (unsigned)r;
    }
    return (int)i;
}

static int q_recvmmsg(int fd, struct mmsghdr *vec, unsigned vlen, int flags)
{
    unsigned i;
    int waitforone = flags & MSG_WAITFORONE;
    flags &= ~MSG_WAITFORONE;
    for (i = 0; i < vlen; i++) {
        ssize_t r = q_recvmsg(fd, &vec[i].msg_hdr, i && waitforone ? flags | MSG_DONTWAIT : flags);
        if (r == NOT_OURS)
            return i ? (int)i : NOT_OURS;
        if (r < 0)
            return i ? (int)i : -1;
        vec[i].msg_len = (unsigned)r;
    }
    return (int)i;
}

QP_EXPORT int sendmmsg(int fd, struct mmsghdr *vec, unsigned vlen, int flags)
{
    DISPATCH(int, fd, q_sendmmsg(fd, vec, vlen, flags), real.sendmmsg(fd, vec, vlen, flags));
}

QP_EXPORT int recvmmsg(int fd, struct mmsghdr *vec, unsigned vlen, int flags, struct timespec *timeout)
{
    DISPATCH(int, fd, q_recvmmsg(fd, vec, vlen, flags), real.recvmmsg(fd, vec, vlen, flags, timeout));
}

QP_EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
    DISPATCH(ssize_t, fd, q_sendmsg(fd, msg, flags), real.sendmsg(fd, msg, flags));
}

static ssize_t do_recv(int fd, void *buf, size_t len, int flags)
{
    struct iovec iov = { buf, len };
    DISPATCH(ssize_t, fd, q_recv(fd, &iov, 1, flags, NULL), real.recv(fd, buf, len, flags));
}

QP_EXPORT ssize_t recv(int fd, void *buf, size_t len, int flags)
{
    return do_recv(fd, buf, len, flags);
}

static ssize_t do_recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *addr, socklen_t *addrlen)
{
    DISPATCH(ssize_t, fd, q_recvfrom(fd, buf, len, flags, addr, addrlen),
             real.recvfrom(fd, buf, len, flags, addr, addrlen));
}

QP_EXPORT ssize_t recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *addr, socklen_t *addrlen)
{
    return do_recvfrom(fd, buf, len, flags, addr, addrlen);
}

/* libc's recvmsg, and the descriptors it received: their numbers are new files, whatever
 * the table said (they may be qpip sockets: the ENOTSOCK rule finds them). */
static ssize_t kernel_recvmsg(int fd, struct msghdr *msg, int flags)
{
    ssize_t r = real.recvmsg(fd, msg, flags);
    if (r >= 0 && msg->msg_control && msg->msg_controllen) {
        for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c)) {
            if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                continue;
            size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < n; i++) {
                int rfd;
                memcpy(&rfd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
                fdt_set(rfd, 0);
            }
        }
    }
    return r;
}

QP_EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
    DISPATCH(ssize_t, fd, q_recvmsg(fd, msg, flags), kernel_recvmsg(fd, msg, flags));
}

/* _FORTIFY_SOURCE's versions (glibc's checks: a receive longer than the buffer aborts). */
extern void __chk_fail(void) __attribute__((noreturn));

QP_EXPORT ssize_t __recv_chk(int fd, void *buf, size_t len, size_t buflen, int flags)
{
    if (len > buflen)
        __chk_fail();
    return do_recv(fd, buf, len, flags);
}

QP_EXPORT ssize_t __recvfrom_chk(int fd, void *buf, size_t len, size_t buflen, int flags, struct sockaddr *addr,
                                 socklen_t *addrlen)
{
    if (len > buflen)
        __chk_fail();
    return do_recvfrom(fd, buf, len, flags, addr, addrlen);
}

QP_EXPORT int getsockname(int fd, struct sockaddr *addr, socklen_t *addrlen)
{
    DISPATCH(int, fd, q_name(fd, 0, addr, addrlen), real.getsockname(fd, addr, addrlen));
}

QP_EXPORT int getpeername(int fd, struct sockaddr *addr, socklen_t *addrlen)
{
    DISPATCH(int, fd, q_name(fd, 1, addr, addrlen), real.getpeername(fd, addr, addrlen));
}

QP_EXPORT int getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
    DISPATCH(int, fd, q_getsockopt(fd, level, name, val, len), real.getsockopt(fd, level, name, val, len));
}

QP_EXPORT int setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
    DISPATCH(int, fd, q_setsockopt(fd, level, name, val, len), real.setsockopt(fd, level, name, val, len));
}

QP_EXPORT int shutdown(int fd, int how)
{
    DISPATCH(int, fd, q_shutdown(fd, how), real.shutdown(fd, how));
}

/* ---- read and write: a TCP qpip socket's fast path (fastpath.c) ---------------------------------
 * Every other descriptor costs a table lookup. Before the constructor resolved libc's
 * functions (another library's constructor reading a file), the system call itself. */

QP_EXPORT ssize_t read(int fd, void *buf, size_t len)
{
    if (QP_UNLIKELY(!real.read))
        return syscall(SYS_read, fd, buf, len);
    struct iovec iov = { buf, len };
    return fast_recv(fd, &iov, 1);
}

QP_EXPORT ssize_t write(int fd, const void *buf, size_t len)
{
    if (QP_UNLIKELY(!real.write))
        return syscall(SYS_write, fd, buf, len);
    struct iovec iov = { (void *)buf, len };
    return fast_send(fd, &iov, 1);
}

QP_EXPORT ssize_t readv(int fd, const struct iovec *iov, int iovcnt)
{
    if (QP_UNLIKELY(!real.readv))
        return syscall(SYS_readv, fd, iov, iovcnt);
    if (iovcnt < 0)
        return real.readv(fd, iov, iovcnt);
    return fast_recv(fd, iov, (size_t)iovcnt);
}

QP_EXPORT ssize_t writev(int fd, const struct iovec *iov, int iovcnt)
{
    if (QP_UNLIKELY(!real.writev))
        return syscall(SYS_writev, fd, iov, iovcnt);
    if (iovcnt < 0)
        return real.writev(fd, iov, iovcnt);
    return fast_send(fd, iov, (size_t)iovcnt);
}

/* sendfile into a TCP qpip socket: in user space (fp_sendfile) while the send ring has
 * room, the system call for the rest. A blocking socket gets all COUNT bytes, as from
 * Linux's sendfile; a non-blocking one what went. */
static ssize_t q_sendfile(int out, int in, off_t *off, size_t count)
{
    size_t done = 0;
    ssize_t r = 0;

    if (fast_candidate(out, 1)) {
        while (done < count) {
            r = fp_sendfile(out, in, off, count - done);
            if (r <= 0)
                break;
            done += (size_t)r;
        }
        if (done == count || (done && (r != FP_SYSCALL || is_nonblocking(out))))
            return (ssize_t)done;
        if (!done && r != FP_SYSCALL)
            return r;
    }
    r = real.sendfile(out, in, off, count - done);
    if (!done)
        return r;
    return r > 0 ? (ssize_t)done + r : (ssize_t)done;
}

QP_EXPORT ssize_t sendfile(int out, int in, off_t *off, size_t count)
{
    if (QP_UNLIKELY(!real.sendfile))
        return syscall(SYS_sendfile, out, in, off, count);
    if (qp_disabled || (fdt_get(out) & (FD_QPIP | FD_UDP)) != FD_QPIP)
        return real.sendfile(out, in, off, count);
    return q_sendfile(out, in, off, count);
}

/* glibc's 64-bit name, the same function on 64-bit systems. */
QP_EXPORT ssize_t sendfile64(int out, int in, off_t *off, size_t count)
{
    return sendfile(out, in, off, count);
}

/* ---- descriptor upkeep: never changes what the call does ---------------------------------------- */

QP_EXPORT int close(int fd)
{
    ENSURE_INIT();
    /* The mapping holds the socket's file: let go of first, or the close would not end
     * it (unmapped now, or by another thread's fast-path call still using it when that
     * call ends), and before the descriptor number can be another file's. */
    fp_forget(fd);
    fdt_set(fd, 0);
    ctx_forget_fd(fd);
    return real.close(fd);
}

QP_EXPORT int close_range(unsigned first, unsigned last, int flags)
{
    ENSURE_INIT();
    /* CLOSE_RANGE_CLOEXEC only sets the flag: nothing is closed. */
    if (!(flags & 4 /* CLOSE_RANGE_CLOEXEC */)) {
        fp_forget_range(first, last);
        fdt_clear_range(first, last);
        ctx_forget_range(first, last);
    }
    if (!real.close_range) {
        errno = ENOSYS;
        return -1;
    }
    return real.close_range(first, last, flags);
}

QP_EXPORT void closefrom(int lowfd)
{
    ENSURE_INIT();
    unsigned first = lowfd < 0 ? 0 : (unsigned)lowfd;
    fp_forget_range(first, ~0u);
    fdt_clear_range(first, ~0u);
    ctx_forget_range(first, ~0u);
    if (real.closefrom)
        real.closefrom(lowfd);
}

QP_EXPORT int dup(int fd)
{
    ENSURE_INIT();
    int r = real.dup(fd);
    if (r >= 0)
        fdt_copy(fd, r);
    return r;
}

static void before_replace(int oldfd, int newfd)
{
    /* dup2 onto the context closes it: the library opens another when it needs one. */
    if (oldfd != newfd) {
        ctx_forget_fd(newfd);
        fp_forget(newfd);
    }
}

QP_EXPORT int dup2(int oldfd, int newfd)
{
    ENSURE_INIT();
    before_replace(oldfd, newfd);
    int r = real.dup2(oldfd, newfd);
    if (r >= 0 && oldfd != newfd)
        fdt_copy(oldfd, newfd);
    return r;
}

QP_EXPORT int dup3(int oldfd, int newfd, int flags)
{
    ENSURE_INIT();
    before_replace(oldfd, newfd);
    int r = real.dup3(oldfd, newfd, flags);
    if (r >= 0)
        fdt_copy(oldfd, newfd);
    return r;
}

/* fcntl's third argument is an int, a long or a pointer by command: passed on as a pointer-
 * sized value, as glibc's own wrapper reads it. */
static int do_fcntl(int (*fn)(int, int, ...), int fd, int cmd, void *arg)
{
    int r = fn(fd, cmd, arg);
    if (r >= 0 && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC))
        fdt_copy(fd, r);
    return r;
}

QP_EXPORT int fcntl(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    ENSURE_INIT();
    return do_fcntl(real.fcntl, fd, cmd, arg);
}

QP_EXPORT int fcntl64(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    ENSURE_INIT();
    return do_fcntl(real.fcntl64, fd, cmd, arg);
}
