/* The environment, the decision log and the counters.
 *   QPIP_PRELOAD_LOG=1      one line per decision on stderr ("qpip-preload[PID]: fd 5
 *                           connect [fd51:5050::1]:5201 -> qpip"); 2: also descriptors
 *                           found or forgotten by the ENOTSOCK/ENOTTY rules, and non-TCP
 *                           connects
 *   QPIP_PRELOAD_STATS=1    the counters on stderr at exit; any other value: a file to
 *                           append them to (one line per process)
 *   QPIP_PRELOAD_DISABLE=1  pass everything to libc (for A/B comparisons)
 *   QPIP_DEVICE=PATH        the device (default /dev/qpip0)
 * Lines are written with one write(2) each, no stdio: the intercepts can run anywhere. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qpip_preload.h"

int qp_log_level;
int qp_disabled;
const char *qp_device_path = "/dev/qpip0";
static const char *stats_target;
_Atomic unsigned long qp_counters[C_COUNT];

static int env_level(const char *name)
{
    const char *v = getenv(name);
    if (!v || !*v || (v[0] == '0' && !v[1]))
        return 0;
    if (v[0] >= '1' && v[0] <= '9' && !v[1])
        return v[0] - '0';
    return 1;
}

void qp_config_init(void)
{
    qp_log_level = env_level("QPIP_PRELOAD_LOG");
    qp_disabled = env_level("QPIP_PRELOAD_DISABLE") != 0;
    const char *dev = getenv("QPIP_DEVICE");
    if (dev && *dev)
        qp_device_path = dev;
    const char *st = getenv("QPIP_PRELOAD_STATS");
    if (st && *st && strcmp(st, "0") != 0)
        stats_target = st;
}

/* ---- lines -------------------------------------------------------------------------------- */

void lb_str(struct logbuf *b, const char *s)
{
    while (*s && b->len + 1 < sizeof(b->buf))
        b->buf[b->len++] = *s++;
}

void lb_num(struct logbuf *b, long long v)
{
    char tmp[24];
    int i = 0;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do {
        tmp[i++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        tmp[i++] = '-';
    while (i && b->len + 1 < sizeof(b->buf))
        b->buf[b->len++] = tmp[--i];
}

void lb_init(struct logbuf *b)
{
    b->len = 0;
    lb_str(b, "qpip-preload[");
    lb_num(b, getpid());
    lb_str(b, "]: ");
}

void lb_addr(struct logbuf *b, const struct sockaddr *addr, socklen_t len)
{
    b->len += addr_format(addr, len, b->buf + b->len, sizeof(b->buf) - b->len - 1);
}

const char *errno_name(int err)
{
    switch (err) {
    case EPERM: return "EPERM";
    case ENOENT: return "ENOENT";
    case EINTR: return "EINTR";
    case ENXIO: return "ENXIO";
    case EBADF: return "EBADF";
    case ENOMEM: return "ENOMEM";
    case EACCES: return "EACCES";
    case EFAULT: return "EFAULT";
    case EBUSY: return "EBUSY";
    case ENODEV: return "ENODEV";
    case EINVAL: return "EINVAL";
    case ENFILE: return "ENFILE";
    case EMFILE: return "EMFILE";
    case ENOTTY: return "ENOTTY";
    case ENOSPC: return "ENOSPC";
    case ENOTSOCK: return "ENOTSOCK";
    case EOPNOTSUPP: return "EOPNOTSUPP";
    case EAFNOSUPPORT: return "EAFNOSUPPORT";
    case EADDRINUSE: return "EADDRINUSE";
    case EADDRNOTAVAIL: return "EADDRNOTAVAIL";
    case ENETUNREACH: return "ENETUNREACH";
    case ECONNREFUSED: return "ECONNREFUSED";
    case ETIMEDOUT: return "ETIMEDOUT";
    case EISCONN: return "EISCONN";
    case EALREADY: return "EALREADY";
    case EINPROGRESS: return "EINPROGRESS";
    case ECONNABORTED: return "ECONNABORTED";
    default: return NULL;
    }
}

void lb_errno(struct logbuf *b, int err)
{
    const char *n = errno_name(err);
    if (n) {
        lb_str(b, n);
    } else {
        lb_str(b, "errno ");
        lb_num(b, err);
    }
}

void lb_emit(struct logbuf *b)
{
    b->buf[b->len++] = '\n';
    int saved = errno;
    ssize_t r = write(2, b->buf, b->len);
    (void)r;
    errno = saved;
}

const char *decline_name(unsigned reason)
{
    switch (reason) {
    case QPIP_SOCK_DECLINE_NOT_TCP: return "not-tcp";
    case QPIP_SOCK_DECLINE_ROUTE: return "route";
    case QPIP_SOCK_DECLINE_LOCAL_ADDR: return "local-addr";
    case QPIP_SOCK_DECLINE_STATE: return "state";
    case QPIP_SOCK_DECLINE_FULL: return "full";
    case QPIP_SOCK_DECLINE_PORT: return "port";
    case QPIP_SOCK_DECLINE_NAMESPACE: return "namespace";
    case QPIP_SOCK_DECLINE_NO_NETDEV: return "no-netdev";
    case DECLINE_LOCAL_SCOPE: return "scope-id";
    default: return "other";
    }
}

/* ---- counters at exit ----------------------------------------------------------------------- */

static void kv(struct logbuf *b, const char *key, enum qp_counter c, int always)
{
    unsigned long v = atomic_load_explicit(&qp_counters[c], memory_order_relaxed);
    if (!v && !always)
        return;
    lb_str(b, " ");
    lb_str(b, key);
    lb_str(b, "=");
    lb_num(b, (long long)v);
}

/* One line: "qpip-preload[PID]: stats prog=NAME connect_qpip=N listen_qpip=N accept_qpip=N
 * accept_kernel=N udp_connect_qpip=N udp_bind_qpip=N native_calls=N ioctl_calls=N" then the non-zero others
 * (fast_mapped=N, fast_reads=N, fast_writes=N, data_syscalls=N, kicks=N, kicks_mapped=N, fast_opts=N, fast_sendfiles=N, declined_REASON=N, kernel_no_device=N, kernel_error=N, rediscovered=N, unmarked=N). */
static void stats_line(struct logbuf *b)
{
    extern char *program_invocation_short_name;
    lb_init(b);
    lb_str(b, "stats prog=");
    lb_str(b, program_invocation_short_name ? program_invocation_short_name : "?");
    kv(b, "connect_qpip", C_CONNECT_QPIP, 1);
    kv(b, "listen_qpip", C_LISTEN_QPIP, 1);
    kv(b, "accept_qpip", C_ACCEPT_QPIP, 1);
    kv(b, "accept_kernel", C_ACCEPT_KERNEL, 1);
    kv(b, "udp_connect_qpip", C_UDP_CONNECT_QPIP, 1);
    kv(b, "udp_bind_qpip", C_UDP_BIND_QPIP, 1);
    kv(b, "native_calls", C_CALL_NATIVE, 1);
    kv(b, "ioctl_calls", C_CALL_IOCTL, 1);
    kv(b, "fast_mapped", C_FP_MAPPED, 0);
    kv(b, "fast_reads", C_FP_READ, 0);
    kv(b, "fast_writes", C_FP_WRITE, 0);
    kv(b, "data_syscalls", C_FP_SYSCALL, 0);
    kv(b, "kicks", C_FP_KICK, 0);
    kv(b, "kicks_mapped", C_FP_KICK_MAPPED, 0);
    kv(b, "fast_opts", C_FP_OPT, 0);
    kv(b, "fast_sendfiles", C_FP_SENDFILE, 0);
    kv(b, "kernel_no_device", C_KERNEL_NO_DEVICE, 0);
    kv(b, "kernel_error", C_KERNEL_ERROR, 0);
    kv(b, "rediscovered", C_REDISCOVERED, 0);
    kv(b, "unmarked", C_UNMARKED, 0);
    for (unsigned r = 1; r < 16; r++) {
        unsigned long v = atomic_load_explicit(&qp_counters[C_DECLINED_BASE + r], memory_order_relaxed);
        if (!v)
            continue;
        lb_str(b, " declined_");
        lb_str(b, decline_name(r));
        lb_str(b, "=");
        lb_num(b, (long long)v);
    }
}

__attribute__((destructor)) static void stats_at_exit(void)
{
    if (!stats_target || qp_disabled)
        return;
    struct logbuf b;
    stats_line(&b);
    if (strcmp(stats_target, "1") == 0) {
        lb_emit(&b);
        return;
    }
    /* A file: appended to, so that every process of a run (forks, execs) adds its line. */
    int fd = open(stats_target, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    b.buf[b.len++] = '\n';
    ssize_t r = write(fd, b.buf, b.len);
    (void)r;
    real.close ? real.close(fd) : close(fd);
}
