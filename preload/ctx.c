/* libc's real functions, and the process's context: one open file of /dev/qpip0 that the
 * connect and listen ioctls go to.
 *
 * The context is opened on the first TCP connect or listen, not at load: a program that
 * never makes one (most programs a shell starts) does not take one of the device's
 * contexts. It is moved to a high descriptor (>= 1000, below RLIMIT_NOFILE) so that
 * programs that close or dup2 over low descriptors do not hit it, close-on-exec. If the
 * program closes it anyway (close, dup2 onto it, close_range), it is forgotten and opened
 * again on the next need. A forked child shares its parent's; an exec'd image opens its
 * own. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "qpip_preload.h"

struct real_fns real;

/* The context's state. Only UNTRIED moves (to OPEN or to one of the "none" states); OPEN
 * goes back to UNTRIED when the program closes the file. */
enum { CTX_UNTRIED, CTX_OPEN, CTX_NO_DEVICE, CTX_OLD_DRIVER };
static _Atomic int ctx_state = CTX_UNTRIED;
static _Atomic int ctx_fd = -1;
static _Atomic unsigned ctx_number = ~0u; /* QUERY_DEVICE's ctx: tells our file from others */
static const char *ctx_why = "not opened yet";
_Atomic unsigned ctx_uapi_version;

#define RESOLVE(name) real.name = (__typeof__(real.name))dlsym(RTLD_NEXT, #name)

static void reset_counters_in_child(void)
{
    /* The child's counters count what the child does: the parent prints its own. */
    for (int i = 0; i < C_COUNT; i++)
        atomic_store_explicit(&qp_counters[i], 0, memory_order_relaxed);
}

/* Runs as the library's constructor, and from any intercept called before it (another
 * library's constructor may make sockets first). Idempotent: two threads running it at
 * once store the same values. */
void qp_init(void)
{
    static _Atomic int done;
    if (atomic_load_explicit(&done, memory_order_acquire))
        return;
    RESOLVE(socket);
    RESOLVE(socketpair);
    RESOLVE(connect);
    RESOLVE(bind);
    RESOLVE(listen);
    RESOLVE(accept);
    RESOLVE(accept4);
    RESOLVE(send);
    RESOLVE(sendto);
    RESOLVE(sendmsg);
    RESOLVE(sendmmsg);
    RESOLVE(recvmmsg);
    RESOLVE(recv);
    RESOLVE(recvfrom);
    RESOLVE(recvmsg);
    RESOLVE(getsockname);
    RESOLVE(getpeername);
    RESOLVE(getsockopt);
    RESOLVE(setsockopt);
    RESOLVE(shutdown);
    RESOLVE(close);
    RESOLVE(close_range);
    RESOLVE(closefrom);
    RESOLVE(dup);
    RESOLVE(dup2);
    RESOLVE(dup3);
    RESOLVE(fcntl);
    RESOLVE(fcntl64);
    RESOLVE(read);
    RESOLVE(write);
    RESOLVE(readv);
    RESOLVE(writev);
    RESOLVE(sendfile);
    if (!real.fcntl64)
        real.fcntl64 = real.fcntl;
    qp_config_init();
    if (!atomic_exchange(&done, 1))
        pthread_atfork(NULL, NULL, reset_counters_in_child);
    if (qp_log_level >= 2) {
        struct logbuf b;
        lb_init(&b);
        lb_str(&b, qp_disabled ? "loaded, disabled (QPIP_PRELOAD_DISABLE)" : "loaded, device ");
        if (!qp_disabled)
            lb_str(&b, qp_device_path);
        lb_emit(&b);
    }
}

__attribute__((constructor)) static void qp_constructor(void)
{
    qp_init();
}

/* Where the context goes: at 1000 or above, but well below the descriptor limit, so that a
 * program that counts on its limit still has room. */
static int high_fd_floor(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return 1000;
    if (rl.rlim_cur >= 2048)
        return 1000;
    /* Small limits (1024 is common): the top eighth. */
    return (int)(rl.rlim_cur - rl.rlim_cur / 8);
}

static int query_ctx(int fd, struct qpip_query_device *q)
{
    *q = (struct qpip_query_device){ .size = sizeof(*q) };
    return ioctl(fd, QPIP_IOCTL_QUERY_DEVICE, q);
}

static int ctx_open(const char **why)
{
    int fd = open(qp_device_path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        /* No device file, or not one this process may open: no device for the process's
         * lifetime. Anything else (out of descriptors, the device's contexts all taken,
         * a signal) is the moment's: the next connect or listen tries again. */
        if (err == ENOENT || err == ENOTDIR || err == ENODEV || err == ENXIO || err == EACCES ||
            err == EPERM) {
            ctx_why = err == ENOENT ? "no device" : "cannot open the device";
            atomic_store(&ctx_state, CTX_NO_DEVICE);
            *why = ctx_why;
        } else {
            *why = "cannot open the device now (out of descriptors or contexts)";
        }
        return -1;
    }
    struct qpip_query_device q;
    if (query_ctx(fd, &q) != 0 || q.uapi_version < 5) {
        /* Not a qpip device, or a driver from before the sockets interface. */
        real.close(fd);
        ctx_why = "the driver has no sockets interface (uapi < 5)";
        atomic_store(&ctx_state, CTX_OLD_DRIVER);
        *why = ctx_why;
        return -1;
    }
    int floor = high_fd_floor();
    if (fd < floor) {
        int high = real.fcntl(fd, F_DUPFD_CLOEXEC, floor);
        if (high >= 0) {
            real.close(fd);
            fd = high;
        }
    }
    int expected = -1;
    if (!atomic_compare_exchange_strong(&ctx_fd, &expected, fd)) {
        /* Another thread opened one at the same time: use it. */
        real.close(fd);
        return expected;
    }
    atomic_store(&ctx_number, q.ctx);
    atomic_store(&ctx_uapi_version, q.uapi_version);
    atomic_store(&ctx_state, CTX_OPEN);
    if (qp_log_level >= 2) {
        struct logbuf b;
        lb_init(&b);
        lb_str(&b, "context ");
        lb_str(&b, qp_device_path);
        lb_str(&b, " on fd ");
        lb_num(&b, fd);
        lb_emit(&b);
    }
    return fd;
}

int ctx_get(const char **why)
{
    switch (atomic_load(&ctx_state)) {
    case CTX_OPEN: {
        int fd = atomic_load(&ctx_fd);
        if (fd >= 0)
            return fd;
        break;
    }
    case CTX_NO_DEVICE:
    case CTX_OLD_DRIVER:
        *why = ctx_why;
        return -1;
    default:
        break;
    }
    return ctx_open(why);
}

void ctx_forget_fd(int fd)
{
    int expected = fd;
    if (fd >= 0 && atomic_compare_exchange_strong(&ctx_fd, &expected, -1))
        atomic_store(&ctx_state, CTX_UNTRIED);
}

void ctx_forget_range(unsigned first, unsigned last)
{
    int fd = atomic_load(&ctx_fd);
    if (fd >= 0 && (unsigned)fd >= first && (unsigned)fd <= last)
        ctx_forget_fd(fd);
}

int ctx_check_stale(int fd)
{
    struct qpip_query_device q;
    if (query_ctx(fd, &q) == 0 && q.ctx == atomic_load(&ctx_number)) {
        ctx_why = "the driver refused the sockets ioctls (ENOTTY)";
        atomic_store(&ctx_state, CTX_OLD_DRIVER);
        return 0;
    }
    ctx_forget_fd(fd);
    return 1;
}
