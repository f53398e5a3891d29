/* qpip-sockcheck: the socket calls a program makes, checked against what Linux's TCP
 * (and UDP) answers. The same program passes on plain kernel sockets (its reference: run it without
 * the preload) and must pass under libqpip-preload.so, over qpip sockets when the device
 * carries them.
 *
 *   qpip-sockcheck ADDR PORT     against an echo server at ADDR:PORT (it echoes what it
 *                                gets and closes at EOF; and each UDP datagram to the same
 *                                port, to its source), with nothing listening on PORT+1
 *
 *   qpip-sockcheck --unbound ADDR PORT N
 *                                N connects in a row from ports the kernel chooses (the
 *                                socket not bound), each closed by this end first (its
 *                                end of the connection stays in TIME-WAIT): each must
 *                                connect. With ip_local_port_range narrowed to N ports and
 *                                the peer without TCP timestamps, each connect must skip
 *                                the ports whose connections are still in TIME-WAIT, as
 *                                Linux's does.
 *   qpip-sockcheck --close-race ADDR PORT
 *                                a connected socket closed while another thread writes and
 *                                reads it, 100 times: no call may fault (a run of its own:
 *                                its calls on the closed descriptor are system calls,
 *                                which would blur the main run's fast-path counters)
 *   qpip-sockcheck --no-port ADDR PORT
 *                                a non-blocking connect from a port the kernel chooses when
 *                                the only one it may choose is in TIME-WAIT toward ADDR
 *                                (the range narrowed to it, the peer without timestamps):
 *                                connect itself must say EADDRNOTAVAIL, as Linux's does.
 *
 * Prints "sockcheck: ok NAME" per check, "sockcheck: FAIL NAME: why" per failure, then
 * "sockcheck: N checks, M failed"; exit status 1 if any failed. (The exec check runs this
 * program again as "qpip-sockcheck --inherited FD"; the descriptor-passing check sends the
 * socket over a Unix socket to a forked child.) */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

static int checks, failed;
static struct sockaddr_storage peer;
static socklen_t peer_len;
static const char *self;

static void ok(const char *name, int cond, const char *why)
{
    checks++;
    if (cond) {
        printf("sockcheck: ok %s\n", name);
    } else {
        failed++;
        printf("sockcheck: FAIL %s: %s (errno %s)\n", name, why, strerrorname_np(errno) ?: "0");
    }
    fflush(stdout);
}

static int tcp_socket(int flags)
{
    return socket(peer.ss_family, SOCK_STREAM | flags, 0);
}

static void set_port(struct sockaddr_storage *ss, int port)
{
    if (ss->ss_family == AF_INET)
        ((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
    else
        ((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
}

static int port_of(const struct sockaddr_storage *ss)
{
    return ntohs(ss->ss_family == AF_INET ? ((const struct sockaddr_in *)ss)->sin_port
                                          : ((const struct sockaddr_in6 *)ss)->sin6_port);
}

/* Reads exactly N bytes (read(2): the native path on a qpip socket). */
static int read_n(int fd, char *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r <= 0)
            return -1;
        got += (size_t)r;
    }
    return 0;
}

static int echo_round(int fd, const char *msg)
{
    char buf[64];
    size_t n = strlen(msg);
    return send(fd, msg, n, 0) == (ssize_t)n && recv(fd, buf, n, MSG_WAITALL) == (ssize_t)n &&
           memcmp(buf, msg, n) == 0;
}

/* Reads exactly LEN bytes (blocking), as plain reads of at most 256 bytes: 1 when all came. */
static int read_all(int fd, char *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = read(fd, buf + got, len - got < 256 ? len - got : 256);
        if (n <= 0)
            return 0;
        got += (size_t)n;
    }
    return 1;
}

/* Waits until LEN bytes are there to read (FIONREAD), at most 5 s. */
static int wait_readable(int fd, int len)
{
    for (int i = 0; i < 500; i++) {
        int v = 0;
        if (ioctl(fd, FIONREAD, &v) == 0 && v >= len)
            return 1;
        struct pollfd p = { fd, POLLIN, 0 };
        poll(&p, 1, 10);
    }
    return 0;
}

/* A stream of plain writes and reads: 200 rounds of 16 writes of 256 bytes, their echo read
 * back in reads of 256 (under the preload, the fast path takes most of them without a
 * system call: the preload test checks its counters). Then a fork: both processes read
 * the same socket, the child the first 100 bytes, the parent the next 100 (the preload
 * gives the socket to the system calls in both from then on), and 20 more echoes. */
/* A thread that writes and reads a non-blocking socket without pause (plain write and
 * read: the fast path under the preload) until told to stop. */
struct racer {
    int fd;
    atomic_int stop;
    long calls, ebadf;
};

static void *racer_run(void *arg)
{
    struct racer *r = arg;
    char buf[2048];
    memset(buf, 'r', sizeof(buf));
    while (!atomic_load(&r->stop)) {
        ssize_t w = write(r->fd, buf, sizeof(buf));
        int we = errno;
        ssize_t n = read(r->fd, buf, sizeof(buf));
        r->calls += 2;
        r->ebadf += (w < 0 && we == EBADF) + (n < 0 && errno == EBADF);
    }
    return NULL;
}

/* A socket closed while another thread is in the middle of writing and reading it, many
 * times: each call ends (its bytes, or EBADF once the descriptor is gone), none faults,
 * and the next socket works. */
static void close_race_check(void)
{
    int rounds = 0, good = 1;
    long calls = 0, ebadf = 0;
    for (; good && rounds < 100; rounds++) {
        struct racer r = { .fd = tcp_socket(0) };
        good = connect(r.fd, (struct sockaddr *)&peer, peer_len) == 0 &&
               fcntl(r.fd, F_SETFL, O_NONBLOCK) == 0;
        pthread_t t;
        if (!good || pthread_create(&t, NULL, racer_run, &r) != 0) {
            good = 0;
            close(r.fd);
            break;
        }
        usleep((useconds_t)(rand() % 3000));
        close(r.fd);
        /* Calls after the close meet a closed descriptor; nothing opens one meanwhile. */
        usleep(2000);
        atomic_store(&r.stop, 1);
        pthread_join(t, NULL);
        calls += r.calls;
        ebadf += r.ebadf;
    }
    char why[96];
    snprintf(why, sizeof(why), "round %d failed to connect", rounds);
    ok("close while another thread writes and reads, 100 times", good, why);
    printf("sockcheck: close race: %d rounds, %ld calls, %ld EBADF after the close\n", rounds, calls, ebadf);
}

static void stream_and_fork_check(void)
{
    static char out[4096], in[4096];
    int fd = tcp_socket(0);
    int good = connect(fd, (struct sockaddr *)&peer, peer_len) == 0;
    for (int round = 0; good && round < 200; round++) {
        for (int i = 0; i < 4096; i++)
            out[i] = (char)(round * 31 + i * 7);
        for (int i = 0; good && i < 16; i++)
            good = write(fd, out + i * 256, 256) == 256;
        good = good && read_all(fd, in, 4096) && memcmp(in, out, 4096) == 0;
    }
    ok("stream: 200 rounds of 16 writes and their echo", good, "short write or read, or data mismatch");

    memset(out, 'A', 100);
    memset(out + 100, 'B', 100);
    good = good && write(fd, out, 200) == 200 && wait_readable(fd, 200);
    pid_t pid = good ? fork() : -1;
    if (pid == 0)
        exit(read_all(fd, in, 100) && memcmp(in, out, 100) == 0 ? 0 : 1);
    int status = -1;
    good = pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    good = good && read_all(fd, in, 100) && memcmp(in, out + 100, 100) == 0;
    for (int i = 0; good && i < 20; i++)
        good = echo_round(fd, "after fork");
    ok("fork: the child reads the first 100 bytes, the parent the next, echoes go on", good,
       "child failed, data mismatch or echo failed");
    close(fd);
}

/* A response as HTTP servers send it (nginx's tcp_nopush): TCP_CORK on, a header written,
 * a body by sendfile from a file at an offset, TCP_CORK off; 20 times, each echoed back
 * whole. Under the preload, the cork and the sendfile are done in user space (the preload
 * test checks its counters); getsockopt sees the cork the driver took from it. */
static void cork_sendfile_check(void)
{
    static char file[3000], in[2100];
    for (size_t i = 0; i < sizeof(file); i++)
        file[i] = (char)(i * 11 + 3);
    int mfd = memfd_create("sockcheck-body", 0);
    int good = mfd >= 0 && write(mfd, file, sizeof(file)) == (ssize_t)sizeof(file);
    int fd = tcp_socket(0);
    good = good && connect(fd, (struct sockaddr *)&peer, peer_len) == 0;
    int on = 1, off_v = 0, v = -1;
    socklen_t vl = sizeof(v);
    const char *why = "setup failed";
    for (int round = 0; good && round < 20; round++) {
        off_t off = 500 + round;
        char header[100];
        memset(header, 'h' + round % 5, sizeof(header));
        why = "setsockopt/getsockopt TCP_CORK";
        good = setsockopt(fd, SOL_TCP, TCP_CORK, &on, sizeof(on)) == 0 &&
               getsockopt(fd, SOL_TCP, TCP_CORK, &v, &vl) == 0 && v == 1;
        why = "corked write";
        good = good && write(fd, header, sizeof(header)) == (ssize_t)sizeof(header);
        why = "sendfile 2000 bytes at an offset (count, offset moved)";
        good = good && sendfile(fd, mfd, &off, 2000) == 2000 && off == 2500 + round;
        why = "sendfile at the file's end: 0";
        off_t end = sizeof(file);
        good = good && sendfile(fd, mfd, &end, 10) == 0 && end == (off_t)sizeof(file);
        why = "uncork";
        good = good && setsockopt(fd, SOL_TCP, TCP_CORK, &off_v, sizeof(off_v)) == 0 &&
               getsockopt(fd, SOL_TCP, TCP_CORK, &v, &vl) == 0 && v == 0;
        why = "echo of header and body";
        good = good && read_all(fd, in, sizeof(in)) && memcmp(in, header, sizeof(header)) == 0 &&
               memcmp(in + sizeof(header), file + 500 + round, 2000) == 0;
    }
    ok("TCP_CORK, write, sendfile at an offset, uncork: 20 responses echoed", good, why);
    close(fd);
    if (mfd >= 0)
        close(mfd);
}

/* The process's descriptors open on a qpip device (the preload's context). */
static int close_contexts(void)
{
    int closed = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char path[300], link[64];
        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(path, link, sizeof(link) - 1);
        if (n > 0) {
            link[n] = 0;
            if (strncmp(link, "/dev/qpip", 9) == 0) {
                close(atoi(e->d_name));
                closed++;
            }
        }
    }
    closedir(d);
    return closed;
}

static int inherited(int fd)
{
    /* A new image (exec), a descriptor it did not make: socket calls must work on it. */
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    int tp = 0;
    socklen_t tl = sizeof(tp);
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) != 0)
        return 2;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &tp, &tl) != 0 || tp != SOCK_STREAM)
        return 3;
    return echo_round(fd, "from the exec'd image") ? 0 : 4;
}

/* Sends FD over the Unix socket U (SCM_RIGHTS). */
static int send_fd(int u, int fd)
{
    char c = 'f';
    struct iovec iov = { &c, 1 };
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf) };
    struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof(int));
    return sendmsg(u, &m, 0) == 1 ? 0 : -1;
}

/* Receives a descriptor sent by send_fd, or -1. */
static int recv_fd(int u)
{
    char c;
    struct iovec iov = { &c, 1 };
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf) };
    if (recvmsg(u, &m, 0) != 1)
        return -1;
    struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
    if (!cm || cm->cmsg_type != SCM_RIGHTS)
        return -1;
    int fd;
    memcpy(&fd, CMSG_DATA(cm), sizeof(int));
    return fd;
}

/* Whether SS names the echo server (its address and port). */
static int is_peer(const struct sockaddr_storage *ss, socklen_t sl)
{
    if (sl != peer_len || ss->ss_family != peer.ss_family || port_of(ss) != port_of(&peer))
        return 0;
    if (ss->ss_family == AF_INET)
        return ((const struct sockaddr_in *)ss)->sin_addr.s_addr == ((struct sockaddr_in *)&peer)->sin_addr.s_addr;
    return memcmp(&((const struct sockaddr_in6 *)ss)->sin6_addr, &((struct sockaddr_in6 *)&peer)->sin6_addr, 16) == 0;
}

/* Waits up to 5 s for FD to be readable (the echo's round trip). */
static int readable(int fd)
{
    struct pollfd p = { fd, POLLIN, 0 };
    return poll(&p, 1, 5000) == 1 && (p.revents & POLLIN);
}

/* UDP against the echo server's datagram port: a connected socket (connect: the device's
 * when the server is routed through it), then one bound to the wildcard (bind: likewise),
 * whose datagrams to itself over loopback stay the kernel's. Datagram boundaries, the
 * source address, MSG_PEEK, MSG_TRUNC, FIONREAD, poll, EMSGSIZE, as Linux's UDP answers. */
static void udp_checks(int port)
{
    char buf[128];
    struct sockaddr_storage ss;
    socklen_t sl;
    int u = socket(peer.ss_family, SOCK_DGRAM, 0);
    ok("udp connect", connect(u, (struct sockaddr *)&peer, peer_len) == 0, "connect failed");
    sl = sizeof(ss);
    ok("udp getpeername", getpeername(u, (struct sockaddr *)&ss, &sl) == 0 && port_of(&ss) == port,
       "not the peer");
    sl = sizeof(ss);
    ok("udp getsockname", getsockname(u, (struct sockaddr *)&ss, &sl) == 0 && port_of(&ss) != 0, "no port");
    int n = -1;
    ok("udp FIONREAD, nothing queued: 0", ioctl(u, FIONREAD, &n) == 0 && n == 0, "expected 0");
    ok("udp recv MSG_DONTWAIT, nothing queued: EAGAIN", recv(u, buf, sizeof(buf), MSG_DONTWAIT) == -1 &&
       errno == EAGAIN, "expected EAGAIN");
    struct pollfd pw = { u, POLLOUT, 0 };
    ok("udp poll: writable", poll(&pw, 1, 0) == 1 && (pw.revents & POLLOUT), "not writable");
    ok("udp send", send(u, "hello", 5, 0) == 5, "send failed");
    ok("udp poll: the echo", readable(u), "not readable in 5 s");
    n = -1;
    ok("udp FIONREAD: the next datagram's size", ioctl(u, FIONREAD, &n) == 0 && n == 5, "expected 5");
    struct iovec iov = { buf, 2 };
    struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
    ok("udp recvmsg MSG_PEEK, short buffer: 2 bytes, MSG_TRUNC",
       recvmsg(u, &m, MSG_PEEK) == 2 && (m.msg_flags & MSG_TRUNC) && memcmp(buf, "he", 2) == 0, "wrong");
    ok("udp recv MSG_TRUNC, short buffer: the whole length", recv(u, buf, 2, MSG_TRUNC) == 5, "expected 5");
    n = -1;
    ok("udp the truncated datagram is gone", ioctl(u, FIONREAD, &n) == 0 && n == 0, "still queued");
    ok("udp two datagrams", send(u, "ab", 2, 0) == 2 && send(u, "cdef", 4, 0) == 4, "send failed");
    sl = sizeof(ss);
    ok("udp recvfrom: one datagram, the server's address", readable(u) &&
       recvfrom(u, buf, sizeof(buf), 0, (struct sockaddr *)&ss, &sl) == 2 && memcmp(buf, "ab", 2) == 0 &&
       is_peer(&ss, sl), "wrong datagram or source");
    ok("udp read: the next datagram", readable(u) && read(u, buf, sizeof(buf)) == 4 && memcmp(buf, "cdef", 4) == 0,
       "wrong datagram");
    ok("udp an empty datagram", send(u, "", 0, 0) == 0 && readable(u) && recv(u, buf, sizeof(buf), 0) == 0,
       "not echoed as an empty datagram");
    struct sockaddr_storage huge[2];
    memcpy(huge, &peer, peer_len);
    ok("udp sendto, address too long: EINVAL",
       sendto(u, "x", 1, 0, (struct sockaddr *)huge, sizeof(huge)) == -1 && errno == EINVAL, "expected EINVAL");
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = { .events = EPOLLIN | EPOLLET, .data.fd = u }, got;
    ok("udp epoll, edge-triggered: the echo wakes it", ep >= 0 && epoll_ctl(ep, EPOLL_CTL_ADD, u, &ev) == 0 &&
       send(u, "ep", 2, 0) == 2 && epoll_wait(ep, &got, 1, 5000) == 1 && (got.events & EPOLLIN) &&
       recv(u, buf, sizeof(buf), 0) == 2, "no wake-up in 5 s");
    if (ep >= 0)
        close(ep);
    static char big[70000];
    ok("udp send too large: EMSGSIZE", send(u, big, sizeof(big), 0) == -1 && errno == EMSGSIZE,
       "expected EMSGSIZE");
    struct sockaddr unspec = { .sa_family = AF_UNSPEC };
    sl = sizeof(ss);
    ok("udp connect AF_UNSPEC: no peer", connect(u, &unspec, sizeof(unspec)) == 0 &&
       getpeername(u, (struct sockaddr *)&ss, &sl) == -1 && errno == ENOTCONN, "expected ENOTCONN");
    ok("udp send without a peer: EDESTADDRREQ", send(u, "x", 1, 0) == -1 && errno == EDESTADDRREQ,
       "expected EDESTADDRREQ");
    close(u);

    u = socket(peer.ss_family, SOCK_DGRAM, 0);
    struct sockaddr_storage any = { .ss_family = peer.ss_family };
    ok("udp bind to the wildcard", bind(u, (struct sockaddr *)&any, peer_len) == 0, "bind failed");
    sl = sizeof(ss);
    ok("udp sendto the server", sendto(u, "xyz", 3, 0, (struct sockaddr *)&peer, peer_len) == 3, "failed");
    ok("udp recvfrom: the server's address", readable(u) &&
       recvfrom(u, buf, sizeof(buf), 0, (struct sockaddr *)&ss, &sl) == 3 && memcmp(buf, "xyz", 3) == 0 &&
       is_peer(&ss, sl), "wrong datagram or source");
    sl = sizeof(ss);
    getsockname(u, (struct sockaddr *)&ss, &sl);
    struct sockaddr_storage loop = { .ss_family = peer.ss_family };
    if (peer.ss_family == AF_INET)
        ((struct sockaddr_in *)&loop)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    else
        ((struct sockaddr_in6 *)&loop)->sin6_addr = in6addr_loopback;
    set_port(&loop, port_of(&ss));
    ok("udp sendto itself over loopback", sendto(u, "self", 4, 0, (struct sockaddr *)&loop, peer_len) == 4,
       "failed");
    struct sockaddr_storage from;
    sl = sizeof(from);
    ok("udp recvfrom: its own datagram, from loopback", readable(u) &&
       recvfrom(u, buf, sizeof(buf), 0, (struct sockaddr *)&from, &sl) == 4 && memcmp(buf, "self", 4) == 0 &&
       port_of(&from) == port_of(&ss), "wrong datagram or source");
    close(u);
}

/* The peer's echo server closes once it reads our FIN: our end closes first, so its
 * connection from PORT waits in TIME-WAIT; a second socket binds PORT again and connects
 * to the same peer, a four-tuple the old incarnation still has. Prints a note when the new
 * connection is a qpip socket (the preload test wants the device to have carried it). */
static void port_reuse_check(void)
{
    int one = 1, fd = tcp_socket(0), p1 = 0;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    char buf[8];

    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (connect(fd, (struct sockaddr *)&peer, peer_len) == 0 && echo_round(fd, "tw") &&
        getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
        p1 = port_of(&ss);
        shutdown(fd, SHUT_WR);
        while (read(fd, buf, sizeof(buf)) > 0)
            ;
    }
    close(fd);
    ok("TIME-WAIT: the first connection", p1 != 0, "connect, echo or getsockname failed");
    if (!p1)
        return;
    /* Time for the old socket's graceful end to finish (its last ACK). */
    usleep(500 * 1000);
    fd = tcp_socket(0);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    memset(&ss, 0, sizeof(ss));
    ss.ss_family = peer.ss_family;
    set_port(&ss, p1);
    int b = bind(fd, (struct sockaddr *)&ss, peer_len);
    ok("TIME-WAIT: bind the port again (SO_REUSEADDR)", b == 0, "bind failed");
    ok("TIME-WAIT: connect from it to the same peer",
       b == 0 && connect(fd, (struct sockaddr *)&peer, peer_len) == 0 && echo_round(fd, "again"),
       "connect or echo failed");
    char path[64], link[64] = "";
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, link, sizeof(link) - 1);
    if (n > 0 && (link[n] = 0, strstr(link, "qpip-socket")))
        printf("sockcheck: note port reused over qpip\n");
    close(fd);
}

/* --unbound: see the top. */
static int unbound_connects(int n)
{
    for (int i = 0; i < n; i++) {
        char name[64], buf[1];
        int fd = tcp_socket(SOCK_NONBLOCK), err = 0;
        socklen_t el = sizeof(err);
        struct pollfd p = { fd, POLLOUT, 0 };
        int r = connect(fd, (struct sockaddr *)&peer, peer_len);
        if (r != 0 && errno == EINPROGRESS && poll(&p, 1, 10000) == 1)
            r = getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0 ? 0 : -1;
        if (err)
            errno = err;
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        getsockname(fd, (struct sockaddr *)&ss, &sl);
        snprintf(name, sizeof(name), "unbound connect %d (port %d)", i + 1, port_of(&ss));
        ok(name, r == 0, "connect failed");
        if (r == 0) {
            p.events = POLLIN;
            ok("its echo", write(fd, "u", 1) == 1 && poll(&p, 1, 10000) == 1 && read(fd, buf, 1) == 1,
               "no echo");
        }
        close(fd);
        /* The connection closes (the peer's FIN acknowledged) and gives its port back to
         * the kernel, which then may choose it again: wait for that (a bind to it works;
         * SO_REUSEADDR: a kernel socket's own TIME-WAIT on it does not count). */
        int probe = tcp_socket(0), waited = 0, one = 1;
        setsockopt(probe, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        ss.ss_family = peer.ss_family;
        if (ss.ss_family == AF_INET)
            ((struct sockaddr_in *)&ss)->sin_addr.s_addr = htonl(INADDR_ANY);
        else
            ((struct sockaddr_in6 *)&ss)->sin6_addr = in6addr_any;
        while (bind(probe, (struct sockaddr *)&ss, sl) != 0 && waited < 200) {
            usleep(100000);
            waited++;
        }
        close(probe);
        snprintf(name, sizeof(name), "port %d free again (%d ms)", port_of(&ss), waited * 100);
        ok(name, waited < 200, "still taken after 20 s");
    }
    printf("sockcheck: %d checks, %d failed\n", checks, failed);
    return failed ? 1 : 0;
}

/* --no-port: see the top. */
static int no_port(void)
{
    int fd = tcp_socket(SOCK_NONBLOCK), err = 0;
    socklen_t el = sizeof(err);
    struct pollfd p = { fd, POLLOUT, 0 };
    int r = connect(fd, (struct sockaddr *)&peer, peer_len);
    int e = errno;
    if (r != 0 && e == EINPROGRESS && poll(&p, 1, 10000) == 1)
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
    errno = r ? e : 0;
    char why[96];
    snprintf(why, sizeof(why), "connect said %s, then %s", r ? strerrorname_np(e) : "0",
             err ? strerrorname_np(err) : "0");
    ok("no port left: EADDRNOTAVAIL", r == -1 && e == EADDRNOTAVAIL, why);
    close(fd);
    printf("sockcheck: %d checks, %d failed\n", checks, failed);
    return failed ? 1 : 0;
}

int main(int argc, char **argv)
{
    self = argv[0];
    if (argc == 3 && strcmp(argv[1], "--inherited") == 0)
        return inherited(atoi(argv[2]));
    int unbound = 0;
    if (argc == 5 && strcmp(argv[1], "--unbound") == 0) {
        unbound = atoi(argv[4]);
        argv++;
        argc -= 2;
    } else if (argc == 4 && strcmp(argv[1], "--no-port") == 0) {
        unbound = -1;
        argv++;
        argc--;
    } else if (argc == 4 && strcmp(argv[1], "--close-race") == 0) {
        unbound = -2;
        argv++;
        argc--;
    }
    if (argc != 3) {
        fprintf(stderr, "usage: qpip-sockcheck ADDR PORT\n");
        return 2;
    }
    struct addrinfo hints = { .ai_flags = AI_NUMERICHOST, .ai_socktype = SOCK_STREAM }, *ai;
    if (getaddrinfo(argv[1], argv[2], &hints, &ai) != 0) {
        fprintf(stderr, "sockcheck: bad address %s port %s\n", argv[1], argv[2]);
        return 2;
    }
    memcpy(&peer, ai->ai_addr, ai->ai_addrlen);
    peer_len = ai->ai_addrlen;
    freeaddrinfo(ai);
    if (unbound == -2) {
        close_race_check();
        printf("sockcheck: %d checks, %d failed\n", checks, failed);
        return failed ? 1 : 0;
    }
    if (unbound)
        return unbound < 0 ? no_port() : unbound_connects(unbound);
    int port = atoi(argv[2]);

    /* --- a blocking connect, names --- */
    int fd = tcp_socket(0);
    ok("connect", connect(fd, (struct sockaddr *)&peer, peer_len) == 0, "connect failed");
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    ok("getpeername", getpeername(fd, (struct sockaddr *)&ss, &sl) == 0 && sl == peer_len &&
       port_of(&ss) == port, "not the peer");
    sl = 2;
    memset(&ss, 0, sizeof(ss));
    ok("getsockname truncated", getsockname(fd, (struct sockaddr *)&ss, &sl) == 0 && sl == peer_len &&
       ss.ss_family == peer.ss_family && port_of(&ss) == 0, "expected 2 bytes copied, the full length");
    ok("connect again: EISCONN", connect(fd, (struct sockaddr *)&peer, peer_len) == -1 && errno == EISCONN,
       "expected EISCONN");

    /* --- data: plain, with flags, vectors --- */
    char buf[256];
    ok("send and recv", echo_round(fd, "hello"), "echo mismatch");
    ok("send MSG_NOSIGNAL", send(fd, "peek!", 5, MSG_NOSIGNAL) == 5, "send failed");
    struct pollfd p = { fd, POLLIN, 0 };
    poll(&p, 1, 5000);
    ssize_t r = recv(fd, buf, 5, MSG_PEEK | MSG_WAITALL);
    ok("recv MSG_PEEK", r == 5 && memcmp(buf, "peek!", 5) == 0, "peek mismatch");
    sl = sizeof(ss);
    ss.ss_family = 12345;
    r = recvfrom(fd, buf, 5, 0, (struct sockaddr *)&ss, &sl);
    ok("recvfrom: no address", r == 5 && sl == 0 && memcmp(buf, "peek!", 5) == 0, "expected the data, addrlen 0");
    ok("recv MSG_DONTWAIT: EAGAIN", recv(fd, buf, sizeof(buf), MSG_DONTWAIT) == -1 && errno == EAGAIN,
       "expected EAGAIN");
    struct iovec out[3] = { { "one ", 4 }, { "two ", 4 }, { "three", 5 } };
    struct msghdr m = { .msg_iov = out, .msg_iovlen = 3 };
    ok("sendmsg (3 iovecs)", sendmsg(fd, &m, 0) == 13, "sendmsg failed");
    m.msg_name = &peer; /* ignored on a connected TCP socket */
    m.msg_namelen = peer_len;
    ok("sendmsg MSG_NOSIGNAL with an address", sendmsg(fd, &m, MSG_NOSIGNAL) == 13, "sendmsg failed");
    char a[10], b[16];
    struct iovec in[2] = { { a, sizeof(a) }, { b, sizeof(b) } };
    char ctl[64];
    struct msghdr mi = { .msg_name = &ss, .msg_namelen = sizeof(ss), .msg_iov = in, .msg_iovlen = 2,
                         .msg_control = ctl, .msg_controllen = sizeof(ctl), .msg_flags = -1 };
    r = recvmsg(fd, &mi, MSG_WAITALL);
    ok("recvmsg MSG_WAITALL (2 iovecs)", r == 26 && memcmp(a, "one two th", 10) == 0 &&
       memcmp(b, "reeone two three", 16) == 0 && mi.msg_namelen == 0 && mi.msg_controllen == 0 &&
       mi.msg_flags == 0, "wrong data or msghdr");
    ok("sendto with an address", sendto(fd, "xy", 2, 0, (struct sockaddr *)&peer, peer_len) == 2, "sendto failed");
    ok("read the echo", read_n(fd, buf, 2) == 0 && memcmp(buf, "xy", 2) == 0, "echo mismatch");

    /* --- options --- */
    int one = 1, v = 0;
    socklen_t vl = sizeof(v);
    ok("setsockopt TCP_NODELAY", setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) == 0, "failed");
    ok("getsockopt TCP_NODELAY", getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &v, &vl) == 0 && v == 1 &&
       vl == sizeof(v), "not 1");
    v = 0;
    vl = sizeof(v);
    ok("getsockopt TCP_MAXSEG", getsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &v, &vl) == 0 && v > 0, "failed");
    vl = sizeof(v);
    ok("getsockopt SO_TYPE", getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &vl) == 0 && v == SOCK_STREAM, "not stream");
    vl = sizeof(v);
    ok("getsockopt SO_ERROR", getsockopt(fd, SOL_SOCKET, SO_ERROR, &v, &vl) == 0 && v == 0, "not 0");
    int sz = 262144;
    ok("setsockopt SO_SNDBUF", setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz)) == 0, "failed");

    /* --- descriptors: dup2, fcntl, fork and exec --- */
    ok("dup2 and send", dup2(fd, 100) == 100 && echo_round(100, "dup"), "failed");
    close(100);
    int d = fcntl(fd, F_DUPFD_CLOEXEC, 200);
    ok("F_DUPFD_CLOEXEC and getpeername", d >= 200 && getpeername(d, (struct sockaddr *)&ss, &(socklen_t){ sizeof(ss) }) == 0,
       "failed");
    close(d);
    pid_t pid = fork();
    if (pid == 0) {
        char fdtext[16];
        snprintf(fdtext, sizeof(fdtext), "%d", fd);
        execl("/proc/self/exe", self, "--inherited", fdtext, (char *)NULL);
        _exit(9);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    ok("exec'd image uses the inherited socket", WIFEXITED(st) && WEXITSTATUS(st) == 0, "child failed");
    /* Passed over a Unix socket to a child, which gets it as a new descriptor number. */
    int sv[2];
    socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
    pid = fork();
    if (pid == 0) {
        close(sv[0]);
        int got = recv_fd(sv[1]);
        _exit(got < 0 ? 5 : inherited(got));
    }
    close(sv[1]);
    int sent = send_fd(sv[0], fd);
    waitpid(pid, &st, 0);
    close(sv[0]);
    ok("descriptor passed over a Unix socket", sent == 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
       "child failed");
    ok("shutdown SHUT_WR, then EOF", shutdown(fd, SHUT_WR) == 0 && recv(fd, buf, sizeof(buf), 0) == 0,
       "no EOF");
    ok("close", close(fd) == 0, "close failed");

    /* --- a non-blocking connect --- */
    fd = tcp_socket(SOCK_NONBLOCK);
    r = connect(fd, (struct sockaddr *)&peer, peer_len);
    ok("non-blocking connect", r == 0 || errno == EINPROGRESS, "neither 0 nor EINPROGRESS");
    p = (struct pollfd){ fd, POLLOUT, 0 };
    vl = sizeof(v);
    ok("poll POLLOUT, SO_ERROR 0", poll(&p, 1, 10000) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &v, &vl) == 0 &&
       v == 0, "not connected");
    r = connect(fd, (struct sockaddr *)&peer, peer_len);
    ok("connect after EINPROGRESS: 0 or EISCONN", r == 0 || errno == EISCONN, "failed");
    ok("connect once more: EISCONN", connect(fd, (struct sockaddr *)&peer, peer_len) == -1 && errno == EISCONN,
       "expected EISCONN");
    p = (struct pollfd){ fd, POLLOUT, 0 };
    poll(&p, 1, 5000);
    ok("non-blocking echo", send(fd, "nb", 2, 0) == 2, "send failed");
    p = (struct pollfd){ fd, POLLIN, 0 };
    ok("poll POLLIN and read", poll(&p, 1, 5000) == 1 && read_n(fd, buf, 2) == 0, "no echo");
    close(fd);

    /* --- a port used again while its last connection is in TIME-WAIT (ours closed
     * first): with SO_REUSEADDR, bind and connect succeed (the peer's timestamps tell the
     * incarnations apart), as Linux lets them. --- */
    port_reuse_check();

    /* --- many plain writes and reads; a socket shared by a fork --- */
    stream_and_fork_check();

    /* --- a corked header and a sendfile body, as HTTP servers answer --- */
    cork_sendfile_check();

    /* --- refused --- */
    struct sockaddr_storage closed = peer;
    set_port(&closed, port + 1);
    fd = tcp_socket(0);
    ok("connect refused", connect(fd, (struct sockaddr *)&closed, peer_len) == -1 && errno == ECONNREFUSED,
       "expected ECONNREFUSED");
    close(fd);
    fd = tcp_socket(SOCK_NONBLOCK);
    r = connect(fd, (struct sockaddr *)&closed, peer_len);
    int cerr = r == 0 ? 0 : errno;
    p = (struct pollfd){ fd, POLLOUT, 0 };
    int pr = poll(&p, 1, 10000);
    vl = sizeof(v);
    v = 0;
    int gr = getsockopt(fd, SOL_SOCKET, SO_ERROR, &v, &vl);
    char why[160];
    snprintf(why, sizeof(why), "connect %s, poll %d (revents %#x), SO_ERROR %s (getsockopt %d); expected ECONNREFUSED",
             cerr ? strerrorname_np(cerr) : "0", pr, (unsigned)p.revents, v ? strerrorname_np(v) : "0", gr);
    ok("non-blocking connect refused: SO_ERROR", (r == 0 || cerr == EINPROGRESS) && gr == 0 && v == ECONNREFUSED, why);
    close(fd);

    /* --- the program closes the preload's context: the next connect still works --- */
    int n = close_contexts();
    fd = tcp_socket(0);
    ok("connect after closing the context", connect(fd, (struct sockaddr *)&peer, peer_len) == 0 &&
       echo_round(fd, "again"), "failed");
    close(fd);
    printf("sockcheck: closed %d context descriptor(s)\n", n);

    /* --- a listener: accept with a short address buffer (a connection to itself) --- */
    int l = tcp_socket(0);
    struct sockaddr_storage any = { .ss_family = peer.ss_family };
    ok("bind and listen", bind(l, (struct sockaddr *)&any, peer_len) == 0 && listen(l, 4) == 0, "failed");
    sl = sizeof(ss);
    ok("getsockname of the listener", getsockname(l, (struct sockaddr *)&ss, &sl) == 0 && port_of(&ss) != 0,
       "no port");
    int lport = port_of(&ss);
    struct sockaddr_storage loop = { .ss_family = peer.ss_family };
    if (peer.ss_family == AF_INET)
        ((struct sockaddr_in *)&loop)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    else
        ((struct sockaddr_in6 *)&loop)->sin6_addr = in6addr_loopback;
    set_port(&loop, lport);
    fd = tcp_socket(0);
    ok("connect over loopback", connect(fd, (struct sockaddr *)&loop, peer_len) == 0, "failed");
    sl = 2;
    memset(&ss, 0, sizeof(ss));
    int c = accept4(l, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC);
    ok("accept4 truncated address", c >= 0 && sl == peer_len && ss.ss_family == peer.ss_family &&
       port_of(&ss) == 0 && (fcntl(c, F_GETFD) & FD_CLOEXEC), "expected 2 bytes copied, the full length, cloexec");
    ok("accepted connection carries data", send(fd, "loop", 4, 0) == 4 && read_n(c, buf, 4) == 0 &&
       memcmp(buf, "loop", 4) == 0, "failed");
    close(c);
    close(fd);
    close(l);

    udp_checks(port);

    printf("sockcheck: %d checks, %d failed\n", checks, failed);
    return failed ? 1 : 0;
}
