/*
 * lab-sockets-check: the descriptor semantics an ordinary TCP socket program relies on,
 * checked between two processes (two hosts or guests, or one over loopback). It uses
 * nothing but the C library's socket calls, so it runs unmodified over kernel sockets and
 * under an LD_PRELOAD library that moves its sockets elsewhere (qpip-run): both must pass.
 *
 *   lab-sockets-check server PORT [RUNS]   serve clients on [::]:PORT (both families), one
 *                                          at a time (a client's checks expect the server
 *                                          to itself: run clients one after another);
 *                                          exit 0 after RUNS clients (default 1) finished
 *   lab-sockets-check client ADDR PORT     run every check against the server at ADDR
 *                                          (IPv6 or IPv4); PORT+1 must be closed
 *
 * Each connection of the client starts with an 8-byte command naming the server's half
 * of one check. The checks, client side unless marked:
 *   epoll     (server) one epoll set with the listening socket, a connected socket, a
 *             pipe and a UNIX socketpair: each reported when (and only when) it becomes
 *             ready, level- and edge-triggered, EPOLLOUT on the connected socket; the
 *             client waits for the server with its own epoll set
 *   connect   non-blocking connect: EINPROGRESS, POLLOUT, SO_ERROR 0; to the closed port
 *             PORT+1: ECONNREFUSED blocking, and through SO_ERROR non-blocking
 *   fork      (both) the child writes on the inherited socket, the parent reads on its
 *             dup; a close in one process leaves the connection open in the other
 *   pass      a connected socket passed to another process with SCM_RIGHTS, which uses
 *             it: MSG_PEEK, MSG_DONTWAIT, MSG_WAITALL, then after the peer closed:
 *             MSG_NOSIGNAL gives EPIPE without SIGPIPE, write() raises SIGPIPE
 *   shutdown  SHUT_WR: the server reads EOF and still answers; a send after it is EPIPE
 *   options   getsockname/getpeername (the server reports what it sees), FIONREAD,
 *             SO_RCVBUF, SO_SNDBUF, TCP_NODELAY, SO_KEEPALIVE, SO_REUSEADDR round trips
 *   dup2      the socket dup2'd to another number, the original closed, the copy used
 *   sendfile  1 MiB by sendfile and by splice (file -> pipe -> socket) to the server,
 *             which takes them with splice (socket -> pipe); 1 MiB from the server's
 *             sendfile, taken with splice; checksums compared
 *   iovec     writev of 3 iovecs echoed back (the server: readv and writev), readv into 4
 *
 * Prints "ok CHECK: what" per check passed (the server's lines start "ok server-CHECK"),
 * or "FAIL CHECK: why" and exits 1 at the first failure. Every wait is bounded: a check
 * not done within 30 s fails ("timed out"), so nothing hangs. Exit status 2: bad arguments.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
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

#define CHECK_SECONDS 30  /* a check that takes longer has hung */
#define WAIT_MS 10000     /* the longest one wait for the peer may take */
#define BULK (1 << 20)    /* bytes of each sendfile/splice transfer */

static const char *check = "setup";  /* the check running, for messages */
static const char *role = "";        /* "" in the client, "server-" in the server */

static void fail(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
	va_list ap;

	printf("FAIL %s%s: ", role, check);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	_exit(1);
}

static void ok(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void ok(const char *fmt, ...)
{
	va_list ap;

	printf("ok %s%s: ", role, check);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

/* A hung check (a lost wakeup, a connect that never ends) fails with its name. */
static void on_alarm(int sig)
{
	char msg[128];
	int n = snprintf(msg, sizeof(msg), "FAIL %s%s: timed out after %d s\n", role, check,
			 CHECK_SECONDS);

	(void)sig;
	if (write(1, msg, (size_t)n) < 0)
		_exit(1);
	_exit(1);
}

static void begin(const char *name)
{
	check = name;
	alarm(CHECK_SECONDS);
}

#define SYS(call) sys_ok((call), #call)
static long sys_ok(long r, const char *what)
{
	if (r < 0)
		fail("%s: %s", what, strerror(errno));
	return r;
}

/* Waits up to ms for events on fd; returns revents (0 on timeout). */
static short wait_fd(int fd, short events, int ms)
{
	struct pollfd p = { .fd = fd, .events = events };
	int r;

	do
		r = poll(&p, 1, ms);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		fail("poll: %s", strerror(errno));
	return r == 0 ? 0 : p.revents;
}

/* Reads exactly n bytes (plain read, each wait bounded); EOF or an error fails. */
static void read_full(int fd, void *buf, size_t n, const char *what)
{
	size_t got = 0;

	while (got < n) {
		ssize_t r;

		if (!wait_fd(fd, POLLIN, WAIT_MS))
			fail("%s: nothing to read for %d ms (%zu of %zu bytes)", what, WAIT_MS, got, n);
		r = read(fd, (char *)buf + got, n - got);
		if (r == 0)
			fail("%s: EOF after %zu of %zu bytes", what, got, n);
		if (r < 0 && errno != EINTR && errno != EAGAIN)
			fail("%s: read: %s", what, strerror(errno));
		if (r > 0)
			got += (size_t)r;
	}
}

static void write_full(int fd, const void *buf, size_t n, const char *what)
{
	size_t put = 0;

	while (put < n) {
		ssize_t r;

		if (!wait_fd(fd, POLLOUT, WAIT_MS))
			fail("%s: cannot write for %d ms", what, WAIT_MS);
		r = write(fd, (const char *)buf + put, n - put);
		if (r < 0 && errno != EINTR && errno != EAGAIN)
			fail("%s: write: %s", what, strerror(errno));
		if (r > 0)
			put += (size_t)r;
	}
}

/* Waits for EOF on fd (any data before it fails). */
static void expect_eof(int fd, const char *what)
{
	char c;
	ssize_t r;

	if (!wait_fd(fd, POLLIN, WAIT_MS))
		fail("%s: no EOF within %d ms", what, WAIT_MS);
	r = read(fd, &c, 1);
	if (r != 0)
		fail("%s: expected EOF, read returned %zd (%s)", what, r, r < 0 ? strerror(errno) : "data");
}

/* Deterministic bytes (xorshift) and a checksum (FNV-1a 64) both sides compute alike. */
static void pattern(unsigned char *buf, size_t n, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ULL + 1;

	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		buf[i] = (unsigned char)(x >> 32);
	}
}

static uint64_t fnv(uint64_t h, const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 0x100000001b3ULL;
	return h;
}
#define FNV0 0xcbf29ce484222325ULL

/* A memfd holding n pattern bytes (sendfile's and splice's source). */
static int pattern_file(size_t n, uint64_t seed, uint64_t *sum)
{
	unsigned char *buf = malloc(n);
	int fd = (int)SYS(memfd_create("lab-sockets-check", 0));

	if (!buf)
		fail("out of memory");
	pattern(buf, n, seed);
	*sum = fnv(FNV0, buf, n);
	write_full(fd, buf, n, "pattern file");
	free(buf);
	return fd;
}

/* ---- addresses ----------------------------------------------------------------------------- */

static struct sockaddr_storage peer;  /* the server (client side) */
static socklen_t peer_len;

static int parse_addr(const char *s, unsigned short port, struct sockaddr_storage *ss, socklen_t *len)
{
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
	struct sockaddr_in *s4 = (struct sockaddr_in *)ss;

	memset(ss, 0, sizeof(*ss));
	if (inet_pton(AF_INET6, s, &s6->sin6_addr) == 1) {
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(port);
		*len = sizeof(*s6);
		return 0;
	}
	if (inet_pton(AF_INET, s, &s4->sin_addr) == 1) {
		s4->sin_family = AF_INET;
		s4->sin_port = htons(port);
		*len = sizeof(*s4);
		return 0;
	}
	return -1;
}

/* "ADDR PORT", an IPv4-mapped IPv6 address written as IPv4 (what a dual-stack server sees
 * of an IPv4 client). */
static void addr_text(const struct sockaddr_storage *ss, char *out, size_t n)
{
	char a[INET6_ADDRSTRLEN] = "?";
	unsigned port = 0;

	if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;

		if (IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr))
			inet_ntop(AF_INET, &s6->sin6_addr.s6_addr[12], a, sizeof(a));
		else
			inet_ntop(AF_INET6, &s6->sin6_addr, a, sizeof(a));
		port = ntohs(s6->sin6_port);
	} else if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)ss;

		inet_ntop(AF_INET, &s4->sin_addr, a, sizeof(a));
		port = ntohs(s4->sin_port);
	}
	snprintf(out, n, "%s %u", a, port);
}

static void set_port(struct sockaddr_storage *ss, unsigned short port)
{
	if (ss->ss_family == AF_INET6)
		((struct sockaddr_in6 *)ss)->sin6_port = htons(port);
	else
		((struct sockaddr_in *)ss)->sin_port = htons(port);
}

static unsigned short port_of(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
	return ntohs(((const struct sockaddr_in *)ss)->sin_port);
}

/* ---- the client's connections ---------------------------------------------------------------- */

static int tcp_socket(void)
{
	return (int)SYS(socket(peer.ss_family, SOCK_STREAM, 0));
}

/* A blocking connect to the server, then the 8-byte command cmd. */
static int dial(const char *cmd)
{
	char word[8] = { 0 };
	int fd = tcp_socket();

	if (connect(fd, (struct sockaddr *)&peer, peer_len) < 0)
		fail("connect for %s: %s", cmd, strerror(errno));
	memcpy(word, cmd, strnlen(cmd, sizeof(word) - 1));
	write_full(fd, word, sizeof(word), "command");
	return fd;
}

static void send_u64(int fd, uint64_t v, const char *what)
{
	write_full(fd, &v, sizeof(v), what);
}

static uint64_t recv_u64(int fd, const char *what)
{
	uint64_t v;

	read_full(fd, &v, sizeof(v), what);
	return v;
}

/* ---- client checks ---------------------------------------------------------------------------- */

/* The server's epoll check; here: wait for its go with an epoll set of our own, in which
 * only the socket may become ready. */
static void client_epoll(void)
{
	int c, c2, p[2], sp[2], ep;
	struct epoll_event ev, got[4];
	char buf[8];
	int n;

	begin("epoll");
	c = dial("EPOLL");
	SYS(pipe(p));
	SYS(socketpair(AF_UNIX, SOCK_STREAM, 0, sp));
	ep = (int)SYS(epoll_create1(EPOLL_CLOEXEC));
	ev = (struct epoll_event){ .events = EPOLLIN, .data.fd = c };
	SYS(epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev));
	ev.data.fd = p[0];
	SYS(epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &ev));
	ev.data.fd = sp[0];
	SYS(epoll_ctl(ep, EPOLL_CTL_ADD, sp[0], &ev));
	n = (int)SYS(epoll_wait(ep, got, 4, WAIT_MS));
	if (n != 1 || got[0].data.fd != c || !(got[0].events & EPOLLIN))
		fail("epoll_wait for the server's go: %d events (first fd %d, socket %d)", n,
		     n > 0 ? got[0].data.fd : -1, c);
	read_full(c, buf, 4, "go");
	/* Data on the connected socket and a connection to the listening one. */
	write_full(c, "data-one", 8, "data-one");
	c2 = tcp_socket();
	if (connect(c2, (struct sockaddr *)&peer, peer_len) < 0)
		fail("second connect: %s", strerror(errno));
	read_full(c, buf, 4, "more");
	write_full(c, "data-two", 8, "data-two");
	read_full(c, buf, 4, "done");
	if (memcmp(buf, "DONE", 4) != 0)
		fail("the server's epoll check did not end with DONE");
	close(c2);
	close(c);
	close(ep);
	close(p[0]);
	close(p[1]);
	close(sp[0]);
	close(sp[1]);
	ok("an epoll set of the socket, a pipe and a socketpair reported the socket alone");
}

static void client_connect(void)
{
	struct sockaddr_storage closed = peer;
	int fd, err;
	socklen_t len = sizeof(err);
	short re;

	begin("connect");
	fd = tcp_socket();
	SYS(fcntl(fd, F_SETFL, O_NONBLOCK));
	if (connect(fd, (struct sockaddr *)&peer, peer_len) == 0)
		fail("a non-blocking connect returned 0 at once, expected EINPROGRESS");
	if (errno != EINPROGRESS)
		fail("non-blocking connect: %s, expected EINPROGRESS", strerror(errno));
	re = wait_fd(fd, POLLOUT, WAIT_MS);
	if (!(re & POLLOUT) || (re & (POLLERR | POLLHUP)))
		fail("poll after a non-blocking connect: revents %#x, expected POLLOUT", re);
	SYS(getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len));
	if (err != 0)
		fail("SO_ERROR after connecting: %s", strerror(err));
	SYS(fcntl(fd, F_SETFL, 0));
	write_full(fd, "NOOP\0\0\0\0", 8, "command");
	close(fd);
	ok("non-blocking connect: EINPROGRESS, POLLOUT, SO_ERROR 0");

	set_port(&closed, (unsigned short)(port_of(&peer) + 1));
	fd = tcp_socket();
	if (connect(fd, (struct sockaddr *)&closed, peer_len) == 0)
		fail("connect to the closed port %u succeeded", port_of(&closed));
	if (errno != ECONNREFUSED)
		fail("blocking connect to the closed port: %s, expected ECONNREFUSED", strerror(errno));
	close(fd);
	fd = tcp_socket();
	SYS(fcntl(fd, F_SETFL, O_NONBLOCK));
	if (connect(fd, (struct sockaddr *)&closed, peer_len) == 0)
		fail("a non-blocking connect to the closed port %u succeeded", port_of(&closed));
	if (errno != EINPROGRESS) {
		if (errno != ECONNREFUSED)
			fail("non-blocking connect to the closed port: %s", strerror(errno));
		/* Refused at once (loopback may answer before connect returns): still the
		 * right error, but the SO_ERROR path is not exercised. */
		ok("connect to the closed port: ECONNREFUSED blocking and at once non-blocking");
		close(fd);
		return;
	}
	re = wait_fd(fd, POLLOUT, WAIT_MS);
	if (!(re & (POLLOUT | POLLERR)))
		fail("poll after a non-blocking connect to the closed port: revents %#x", re);
	len = sizeof(err);
	SYS(getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len));
	if (err != ECONNREFUSED)
		fail("SO_ERROR after a refused non-blocking connect: %s, expected ECONNREFUSED",
		     err ? strerror(err) : "0");
	close(fd);
	ok("connect to the closed port: ECONNREFUSED blocking, and by SO_ERROR non-blocking (revents %#x)", re);
}

static void client_fork(void)
{
	int c;
	char buf[8];
	pid_t pid;
	int st;

	begin("fork");
	c = dial("FORK");
	read_full(c, buf, 8, "the server child's bytes");
	if (memcmp(buf, "fromkid!", 8) != 0)
		fail("the server's child sent %.8s", buf);
	fflush(stdout);
	pid = (pid_t)SYS(fork());
	if (pid == 0) {
		alarm(CHECK_SECONDS);
		write_full(c, "kidreply", 8, "child's reply");
		close(c);
		_exit(0);
	}
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fail("the child that writes on the inherited socket failed (status %#x)", st);
	/* The child closed its copy; ours still works. */
	read_full(c, buf, 8, "the server parent's bytes");
	if (memcmp(buf, "fromdad!", 8) != 0)
		fail("the server's parent sent %.8s", buf);
	expect_eof(c, "the server's close");
	close(c);
	ok("a child wrote on the inherited socket and closed it; the parent read on");
}

static volatile sig_atomic_t sigpipes;
static void on_sigpipe(int sig)
{
	(void)sig;
	sigpipes++;
}

/* The process that receives the socket over the UNIX socket u and uses it. */
static void pass_receiver(int u)
{
	char cbuf[CMSG_SPACE(sizeof(int))], data[16], big[4096];
	struct iovec iov = { .iov_base = data, .iov_len = 1 };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			    .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *cm;
	struct sigaction sa = { .sa_handler = on_sigpipe };
	unsigned char want[4096];
	int s, avail = 0, i;
	ssize_t r;

	alarm(CHECK_SECONDS);
	if (!wait_fd(u, POLLIN, WAIT_MS))
		fail("no descriptor came over the UNIX socket");
	if (recvmsg(u, &m, 0) != 1)
		fail("recvmsg: %s", strerror(errno));
	cm = CMSG_FIRSTHDR(&m);
	if (!cm || cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
		fail("no SCM_RIGHTS in the message");
	memcpy(&s, CMSG_DATA(cm), sizeof(s));
	/* MSG_PEEK: the 16 bytes the server sends, twice, then read for real. */
	for (i = 0; i < 1000 && avail < 16; i++) {
		wait_fd(s, POLLIN, WAIT_MS);
		SYS(ioctl(s, FIONREAD, &avail));
		if (avail < 16)
			usleep(10000);
	}
	if (avail < 16)
		fail("FIONREAD %d on the passed socket, expected 16", avail);
	for (i = 0; i < 2; i++) {
		memset(data, 0, sizeof(data));
		r = recv(s, data, sizeof(data), MSG_PEEK);
		if (r != 16 || memcmp(data, "passed-socket-ok", 16) != 0)
			fail("recv MSG_PEEK #%d: %zd (%s)", i + 1, r, r < 0 ? strerror(errno) : "wrong bytes");
	}
	memset(data, 0, sizeof(data));
	r = recv(s, data, sizeof(data), 0);
	if (r != 16 || memcmp(data, "passed-socket-ok", 16) != 0)
		fail("recv after MSG_PEEK: %zd", r);
	r = recv(s, data, sizeof(data), MSG_DONTWAIT);
	if (r != -1 || (errno != EAGAIN && errno != EWOULDBLOCK))
		fail("recv MSG_DONTWAIT with nothing queued: %zd (%s), expected EAGAIN", r,
		     r < 0 ? strerror(errno) : "data");
	/* MSG_WAITALL: the server sends 4 KiB in 4 pieces 50 ms apart. */
	if (send(s, "SEND4K\0\0", 8, 0) != 8)
		fail("send: %s", strerror(errno));
	r = recv(s, big, sizeof(big), MSG_WAITALL);
	pattern(want, sizeof(want), 4);
	if (r != (ssize_t)sizeof(big) || memcmp(big, want, sizeof(big)) != 0)
		fail("recv MSG_WAITALL of 4096 bytes sent in 4 pieces: %zd (%s)", r,
		     r < 0 ? strerror(errno) : "short or wrong bytes");
	/* The server closes; sends then fail with EPIPE, with SIGPIPE only without
	 * MSG_NOSIGNAL. */
	sigaction(SIGPIPE, &sa, NULL);
	if (send(s, "CLOSE\0\0\0", 8, MSG_NOSIGNAL) != 8)
		fail("send: %s", strerror(errno));
	expect_eof(s, "the server's close");
	for (i = 0; i < 200; i++) {
		r = send(s, "x", 1, MSG_NOSIGNAL);
		if (r < 0 && errno != ECONNRESET)
			break;
		usleep(20000);
	}
	if (r >= 0 || errno != EPIPE)
		fail("send MSG_NOSIGNAL after the peer closed: %zd (%s), expected EPIPE", r,
		     r < 0 ? strerror(errno) : "sent");
	if (sigpipes)
		fail("SIGPIPE raised by a send with MSG_NOSIGNAL");
	r = write(s, "x", 1);
	if (r >= 0 || errno != EPIPE)
		fail("write after the peer closed: %zd (%s), expected EPIPE", r, r < 0 ? strerror(errno) : "written");
	if (sigpipes != 1)
		fail("write after the peer closed raised %d SIGPIPEs, expected 1", (int)sigpipes);
	close(s);
	ok("the receiver: MSG_PEEK, MSG_DONTWAIT, MSG_WAITALL, EPIPE without SIGPIPE (MSG_NOSIGNAL), SIGPIPE by write");
	_exit(0);
}

static void client_pass(void)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { .iov_base = "S", .iov_len = 1 };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			    .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *cm;
	int u[2], c, st;
	pid_t pid;

	begin("pass");
	SYS(socketpair(AF_UNIX, SOCK_STREAM, 0, u));
	fflush(stdout);
	/* The receiver exists before the connection does: it gets it only as a message. */
	pid = (pid_t)SYS(fork());
	if (pid == 0) {
		close(u[0]);
		pass_receiver(u[1]);
	}
	close(u[1]);
	c = dial("PASS");
	memset(cbuf, 0, sizeof(cbuf));
	cm = CMSG_FIRSTHDR(&m);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &c, sizeof(c));
	if (sendmsg(u[0], &m, 0) != 1)
		fail("sendmsg SCM_RIGHTS: %s", strerror(errno));
	close(c);
	close(u[0]);
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fail("the receiving process failed (status %#x)", st);
	begin("pass");
	ok("a connected socket passed with SCM_RIGHTS to another process, which used it");
}

static void client_shutdown(void)
{
	int c;
	unsigned char buf[1000];
	char reply[8];
	struct sigaction sa = { .sa_handler = SIG_IGN };

	begin("shutdown");
	c = dial("HALF");
	pattern(buf, sizeof(buf), 5);
	write_full(c, buf, sizeof(buf), "data before the half-close");
	SYS(shutdown(c, SHUT_WR));
	read_full(c, reply, 8, "the server's answer after our FIN");
	if (memcmp(reply, "got1000!", 8) != 0)
		fail("the server answered %.8s, expected got1000!", reply);
	expect_eof(c, "the server's close");
	sigaction(SIGPIPE, &sa, NULL);
	if (send(c, "x", 1, MSG_NOSIGNAL) != -1 || errno != EPIPE)
		fail("send after SHUT_WR: expected EPIPE, got %s", strerror(errno));
	close(c);
	ok("SHUT_WR: the server read EOF and still answered; a send after it is EPIPE");
}

static void opt_round_trip(int fd, int level, int name, const char *what, int set, int at_least)
{
	int v = -1;
	socklen_t len = sizeof(v);

	if (setsockopt(fd, level, name, &set, sizeof(set)) < 0)
		fail("setsockopt %s %d: %s", what, set, strerror(errno));
	if (getsockopt(fd, level, name, &v, &len) < 0)
		fail("getsockopt %s: %s", what, strerror(errno));
	if (len != sizeof(v) || (at_least ? v < set : (v != 0) != (set != 0)))
		fail("%s set to %d reads back %d", what, set, v);
}

static void client_options(void)
{
	int c, avail = 0, i, type = -1;
	struct sockaddr_storage me, them;
	socklen_t len = sizeof(me);
	char seen[64], mine[64], theirs[64], want[64], data[100];

	begin("options");
	c = dial("NAME");
	SYS(getsockname(c, (struct sockaddr *)&me, &len));
	len = sizeof(them);
	SYS(getpeername(c, (struct sockaddr *)&them, &len));
	addr_text(&me, mine, sizeof(mine));
	addr_text(&them, theirs, sizeof(theirs));
	addr_text(&peer, want, sizeof(want));
	if (me.ss_family != peer.ss_family || strcmp(theirs, want) != 0)
		fail("getpeername %s (family %d), expected %s", theirs, them.ss_family, want);
	read_full(c, seen, sizeof(seen), "the server's view of us");
	seen[sizeof(seen) - 1] = 0;
	if (strcmp(seen, mine) != 0)
		fail("getsockname says %s, the server's getpeername %s", mine, seen);
	/* FIONREAD: the 100 bytes the server sends next, once all are here. */
	for (i = 0; i < 1000 && avail < 100; i++) {
		wait_fd(c, POLLIN, WAIT_MS);
		SYS(ioctl(c, FIONREAD, &avail));
		if (avail < 100)
			usleep(10000);
	}
	if (avail != 100)
		fail("FIONREAD %d, expected 100", avail);
	read_full(c, data, sizeof(data), "100 bytes");
	SYS(ioctl(c, FIONREAD, &avail));
	if (avail != 0)
		fail("FIONREAD %d after reading everything", avail);
	opt_round_trip(c, SOL_SOCKET, SO_RCVBUF, "SO_RCVBUF", 65536, 1);
	opt_round_trip(c, SOL_SOCKET, SO_SNDBUF, "SO_SNDBUF", 65536, 1);
	opt_round_trip(c, IPPROTO_TCP, TCP_NODELAY, "TCP_NODELAY", 1, 0);
	opt_round_trip(c, IPPROTO_TCP, TCP_NODELAY, "TCP_NODELAY", 0, 0);
	opt_round_trip(c, SOL_SOCKET, SO_KEEPALIVE, "SO_KEEPALIVE", 1, 0);
	opt_round_trip(c, SOL_SOCKET, SO_KEEPALIVE, "SO_KEEPALIVE", 0, 0);
	opt_round_trip(c, SOL_SOCKET, SO_REUSEADDR, "SO_REUSEADDR", 1, 0);
	opt_round_trip(c, SOL_SOCKET, SO_REUSEADDR, "SO_REUSEADDR", 0, 0);
	len = sizeof(type);
	SYS(getsockopt(c, SOL_SOCKET, SO_TYPE, &type, &len));
	if (type != SOCK_STREAM)
		fail("SO_TYPE %d, expected SOCK_STREAM", type);
	close(c);
	ok("getsockname %s and getpeername %s agree with the server; FIONREAD; SO_RCVBUF, SO_SNDBUF, TCP_NODELAY, SO_KEEPALIVE, SO_REUSEADDR round trips",
	   mine, theirs);
}

static void client_dup2(void)
{
	int c, target = 100, flags;
	char buf[16];

	begin("dup2");
	c = dial("ECHO");
	while (fcntl(target, F_GETFD) >= 0)  /* a number nothing uses */
		target++;
	SYS(fcntl(c, F_SETFD, FD_CLOEXEC));
	SYS(dup2(c, target));
	SYS(close(c));
	flags = (int)SYS(fcntl(target, F_GETFD));
	if (flags & FD_CLOEXEC)
		fail("dup2's copy has FD_CLOEXEC");
	write_full(target, "dup2-echo-bytes!", 16, "echo");
	SYS(shutdown(target, SHUT_WR));
	read_full(target, buf, 16, "echo");
	if (memcmp(buf, "dup2-echo-bytes!", 16) != 0)
		fail("the echo differs");
	expect_eof(target, "the server's close");
	close(target);
	ok("dup2 onto fd %d, the original closed: the copy (without FD_CLOEXEC) still talks", target);
}

/* Sends BULK bytes to the server's SINK with sendfile or splice; compares checksums. */
static void client_sink(int use_splice)
{
	uint64_t sum, theirs;
	int f = pattern_file(BULK, use_splice ? 7 : 6, &sum), c = dial("SINK"), p[2];
	off_t off = 0;
	loff_t loff = 0;

	send_u64(c, BULK, "length");
	if (!use_splice) {
		while (off < BULK) {
			if (!wait_fd(c, POLLOUT, WAIT_MS))
				fail("sendfile: cannot write for %d ms", WAIT_MS);
			if (sendfile(c, f, &off, BULK - (size_t)off) < 0 && errno != EINTR)
				fail("sendfile: %s", strerror(errno));
		}
	} else {
		SYS(pipe(p));
		while (loff < BULK) {
			ssize_t n = splice(f, &loff, p[1], NULL, 65536, 0), m = 0;

			if (n <= 0)
				fail("splice file -> pipe: %s", n ? strerror(errno) : "nothing");
			while (m < n) {
				ssize_t r;

				if (!wait_fd(c, POLLOUT, WAIT_MS))
					fail("splice: cannot write for %d ms", WAIT_MS);
				r = splice(p[0], NULL, c, NULL, (size_t)(n - m), 0);
				if (r < 0 && errno != EINTR && errno != EAGAIN)
					fail("splice pipe -> socket: %s", strerror(errno));
				if (r > 0)
					m += r;
			}
		}
		close(p[0]);
		close(p[1]);
	}
	theirs = recv_u64(c, "the server's checksum");
	if (theirs != sum)
		fail("%s: the server's checksum %016llx, ours %016llx", use_splice ? "splice" : "sendfile",
		     (unsigned long long)theirs, (unsigned long long)sum);
	close(c);
	close(f);
}

static void client_sendfile(void)
{
	int c, p[2];
	unsigned char *buf = malloc(BULK);
	size_t got = 0;
	uint64_t sum = FNV0, want;

	begin("sendfile");
	if (!buf)
		fail("out of memory");
	client_sink(0);
	client_sink(1);
	/* From the server's sendfile, through a pipe by splice. */
	pattern(buf, BULK, 8);
	want = fnv(FNV0, buf, BULK);
	c = dial("SOURCE");
	SYS(pipe(p));
	for (;;) {
		ssize_t n;

		if (!wait_fd(c, POLLIN, WAIT_MS))
			fail("splice socket -> pipe: nothing for %d ms after %zu bytes", WAIT_MS, got);
		n = splice(c, NULL, p[1], NULL, 65536, 0);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n < 0)
			fail("splice socket -> pipe: %s", strerror(errno));
		if (n == 0)
			break;
		if (got + (size_t)n > BULK)
			fail("more than %d bytes", BULK);
		read_full(p[0], buf + got, (size_t)n, "the pipe");
		got += (size_t)n;
	}
	sum = fnv(sum, buf, got);
	if (got != BULK || sum != want)
		fail("splice from the server's sendfile: %zu bytes, checksum %s", got,
		     sum == want ? "right" : "wrong");
	close(p[0]);
	close(p[1]);
	close(c);
	free(buf);
	ok("1 MiB each by sendfile and splice to the server, and from its sendfile by splice: checksums agree");
}

static void client_iovec(void)
{
	int c;
	unsigned char out[1020], back[1020];
	char a[10], b[500], d[500], e[10];
	struct iovec wv[3] = { { out, 7 }, { out + 7, 1000 }, { out + 1007, 13 } };
	struct iovec rv[4] = { { a, 10 }, { b, 500 }, { d, 500 }, { e, 10 } };
	size_t got = 0;
	ssize_t n;

	begin("iovec");
	c = dial("ECHO");
	pattern(out, sizeof(out), 9);
	n = writev(c, wv, 3);
	if (n != (ssize_t)sizeof(out))
		fail("writev of 3 iovecs: %zd (%s)", n, n < 0 ? strerror(errno) : "short");
	SYS(shutdown(c, SHUT_WR));
	/* readv until the 1020 bytes are back, the iovecs advanced past what came. */
	while (got < sizeof(back)) {
		struct iovec left[4];
		size_t skip = got, k = 0;

		for (int i = 0; i < 4; i++) {
			if (skip >= rv[i].iov_len) {
				skip -= rv[i].iov_len;
				continue;
			}
			left[k].iov_base = (char *)rv[i].iov_base + skip;
			left[k].iov_len = rv[i].iov_len - skip;
			skip = 0;
			k++;
		}
		if (!wait_fd(c, POLLIN, WAIT_MS))
			fail("readv: nothing for %d ms after %zu bytes", WAIT_MS, got);
		n = readv(c, left, (int)k);
		if (n <= 0)
			fail("readv: %s", n ? strerror(errno) : "EOF");
		got += (size_t)n;
	}
	memcpy(back, a, 10);
	memcpy(back + 10, b, 500);
	memcpy(back + 510, d, 500);
	memcpy(back + 1010, e, 10);
	if (memcmp(out, back, sizeof(out)) != 0)
		fail("the echo through readv differs from what writev sent");
	expect_eof(c, "the server's close");
	close(c);
	ok("writev of 3 iovecs echoed back intact into readv of 4");
}

static int client(const char *addr, const char *port_s)
{
	char *end;
	long port = strtol(port_s, &end, 10);
	int c;

	if (*end || port < 1 || port > 65534 || parse_addr(addr, (unsigned short)port, &peer, &peer_len))
		return 2;
	client_epoll();
	client_connect();
	client_fork();
	client_pass();
	client_shutdown();
	client_options();
	client_dup2();
	client_sendfile();
	client_iovec();
	begin("end");
	c = dial("BYE");
	expect_eof(c, "the server's goodbye");
	close(c);
	alarm(0);
	printf("all checks passed against %s port %ld\n", addr, port);
	return 0;
}

/* ---- the server's halves ------------------------------------------------------------------------ */

static int epoll_events(int ep, struct epoll_event *got, int ms)
{
	int n;

	do
		n = epoll_wait(ep, got, 8, ms);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		fail("epoll_wait: %s", strerror(errno));
	return n;
}

/* Exactly the fds of `want` (a bit per index of fds[]) reported, each with `bit`. */
static void expect_ready(int ep, const int *fds, unsigned want, uint32_t bit, int ms, const char *what)
{
	struct epoll_event got[8];
	unsigned seen = 0;
	int n = epoll_events(ep, got, ms);

	for (int i = 0; i < n; i++) {
		unsigned j;

		for (j = 0; j < 4 && fds[j] != got[i].data.fd; j++)
			;
		if (j == 4 || !(want & (1u << j)) || !(got[i].events & bit))
			fail("%s: fd %d reported (events %#x), expected only %#x", what, got[i].data.fd,
			     got[i].events, want);
		seen |= 1u << j;
	}
	if (seen != want)
		fail("%s: reported %#x of %#x (0 listener, 1 socket, 2 pipe, 3 socketpair)", what, seen, want);
}

static void server_epoll(int l, int s)
{
	int p[2], sp[2], ep, et, fds[4];
	unsigned seen = 0;
	struct epoll_event ev, got[8];
	char buf[16];
	int c2;

	begin("epoll");
	SYS(pipe(p));
	SYS(socketpair(AF_UNIX, SOCK_STREAM, 0, sp));
	fds[0] = l, fds[1] = s, fds[2] = p[0], fds[3] = sp[0];
	ep = (int)SYS(epoll_create1(EPOLL_CLOEXEC));
	for (int i = 0; i < 4; i++) {
		ev = (struct epoll_event){ .events = EPOLLIN, .data.fd = fds[i] };
		SYS(epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &ev));
	}
	if (epoll_events(ep, got, 0) != 0)
		fail("an fd reported ready before anything happened (fd %d, events %#x)", got[0].data.fd,
		     got[0].events);
	write_full(s, "GO!!", 4, "go");
	/* The client sends data and connects: the socket and the listener, nothing else. */
	while (seen != 3) {
		int n = epoll_events(ep, got, WAIT_MS);

		if (n == 0)
			fail("level-triggered: only %#x of the listener (1) and socket (2) became ready", seen);
		for (int i = 0; i < n; i++) {
			if (got[i].data.fd == l && (got[i].events & EPOLLIN))
				seen |= 1;
			else if (got[i].data.fd == s && (got[i].events & EPOLLIN))
				seen |= 2;
			else
				fail("fd %d reported (events %#x) before it was ready", got[i].data.fd,
				     got[i].events);
		}
	}
	write_full(p[1], "p", 1, "pipe");
	write_full(sp[1], "u", 1, "socketpair");
	expect_ready(ep, fds, 0xf, EPOLLIN, WAIT_MS, "level-triggered, all four ready");
	expect_ready(ep, fds, 0xf, EPOLLIN, 0, "level-triggered, again without reading");
	/* Edge-triggered: what is ready shows once, then only what changes. */
	et = (int)SYS(epoll_create1(EPOLL_CLOEXEC));
	for (int i = 0; i < 4; i++) {
		ev = (struct epoll_event){ .events = EPOLLIN | EPOLLET, .data.fd = fds[i] };
		SYS(epoll_ctl(et, EPOLL_CTL_ADD, fds[i], &ev));
	}
	expect_ready(et, fds, 0xf, EPOLLIN, WAIT_MS, "edge-triggered, first wait");
	if (epoll_events(et, got, 200) != 0)
		fail("edge-triggered: fd %d reported again with nothing new", got[0].data.fd);
	write_full(p[1], "q", 1, "pipe");
	expect_ready(et, fds, 0x4, EPOLLIN, WAIT_MS, "edge-triggered, new bytes in the pipe");
	write_full(s, "MORE", 4, "more");
	expect_ready(et, fds, 0x2, EPOLLIN, WAIT_MS, "edge-triggered, new bytes on the socket");
	ev = (struct epoll_event){ .events = EPOLLOUT, .data.fd = s };
	SYS(epoll_ctl(ep, EPOLL_CTL_MOD, s, &ev));
	seen = 0;
	for (int i = 0, n = epoll_events(ep, got, WAIT_MS); i < n; i++)
		if (got[i].data.fd == s && (got[i].events & EPOLLOUT))
			seen = 1;
	if (!seen)
		fail("EPOLLOUT not reported for the connected socket");
	c2 = (int)SYS(accept(l, NULL, NULL));
	read_full(s, buf, 16, "the client's data");
	if (memcmp(buf, "data-onedata-two", 16) != 0)
		fail("the client's data: %.16s", buf);
	write_full(s, "DONE", 4, "done");
	close(c2);
	close(ep);
	close(et);
	close(p[0]);
	close(p[1]);
	close(sp[0]);
	close(sp[1]);
	ok("listener, socket, pipe and socketpair in one epoll set: level- and edge-triggered, EPOLLOUT");
}

static void server_fork(int s)
{
	int d = (int)SYS(dup(s)), st;
	char buf[8];
	pid_t pid;

	begin("fork");
	fflush(stdout);
	pid = (pid_t)SYS(fork());
	if (pid == 0) {
		alarm(CHECK_SECONDS);
		write_full(s, "fromkid!", 8, "child");
		close(s);
		close(d);
		_exit(0);
	}
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fail("the child writing on the inherited socket failed (status %#x)", st);
	close(s);  /* the parent keeps only its dup */
	read_full(d, buf, 8, "the client's reply on the dup");
	if (memcmp(buf, "kidreply", 8) != 0)
		fail("the client replied %.8s", buf);
	write_full(d, "fromdad!", 8, "parent");
	close(d);
	ok("the child wrote on the inherited socket; the parent, its original closed, read on its dup");
}

static void server_pass(int s)
{
	unsigned char big[4096];
	char cmd[8];

	begin("pass");
	write_full(s, "passed-socket-ok", 16, "greeting");
	read_full(s, cmd, 8, "SEND4K");
	pattern(big, sizeof(big), 4);
	for (int i = 0; i < 4; i++) {
		write_full(s, big + i * 1024, 1024, "4 KiB in pieces");
		usleep(50000);
	}
	read_full(s, cmd, 8, "CLOSE");
	close(s);
	ok("the passed socket's peer: greeting, 4 KiB in 4 pieces, close");
}

static void server_half(int s)
{
	unsigned char buf[1000], want[1000];

	begin("shutdown");
	read_full(s, buf, sizeof(buf), "data before the half-close");
	pattern(want, sizeof(want), 5);
	if (memcmp(buf, want, sizeof(buf)) != 0)
		fail("the data before the half-close differs");
	expect_eof(s, "the client's SHUT_WR");
	write_full(s, "got1000!", 8, "answer after EOF");
	close(s);
	ok("read EOF after the client's SHUT_WR, answered after it");
}

static void server_name(int s, unsigned short port)
{
	struct sockaddr_storage them, me;
	socklen_t len = sizeof(them);
	char text[64] = { 0 }, data[100];

	begin("options");
	SYS(getpeername(s, (struct sockaddr *)&them, &len));
	len = sizeof(me);
	SYS(getsockname(s, (struct sockaddr *)&me, &len));
	if (port_of(&me) != port)
		fail("getsockname of an accepted socket: port %u, expected %u", port_of(&me), port);
	addr_text(&them, text, sizeof(text));
	write_full(s, text, sizeof(text), "the peer's address");
	memset(data, 'n', sizeof(data));
	write_full(s, data, sizeof(data), "100 bytes");
	expect_eof(s, "the client's close");
	close(s);
	ok("getpeername %s sent to the client, getsockname port %u", text, port);
}

/* Echoes to EOF: readv into 2 iovecs, writev back in 2. */
static void server_echo(int s)
{
	char a[300], b[800];
	size_t total = 0;

	begin("echo");
	for (;;) {
		struct iovec v[2] = { { a, sizeof(a) }, { b, sizeof(b) } };
		ssize_t n, m;

		if (!wait_fd(s, POLLIN, WAIT_MS))
			fail("nothing to echo for %d ms", WAIT_MS);
		n = readv(s, v, 2);
		if (n < 0)
			fail("readv: %s", strerror(errno));
		if (n == 0)
			break;
		if ((size_t)n <= sizeof(a))
			v[0].iov_len = (size_t)n, v[1].iov_len = 0;
		else
			v[1].iov_len = (size_t)n - sizeof(a);
		m = writev(s, v, 2);
		if (m != n)
			fail("writev of the echo: %zd of %zd", m, n);
		total += (size_t)n;
	}
	close(s);
	ok("echoed %zu bytes (readv/writev)", total);
}

static void server_sink(int s)
{
	uint64_t len = recv_u64(s, "length"), sum = FNV0, got = 0;
	unsigned char buf[65536];
	int p[2];

	begin("sendfile");
	SYS(pipe(p));
	while (got < len) {
		ssize_t n;

		if (!wait_fd(s, POLLIN, WAIT_MS))
			fail("splice socket -> pipe: nothing for %d ms after %llu bytes", WAIT_MS,
			     (unsigned long long)got);
		n = splice(s, NULL, p[1], NULL, len - got < sizeof(buf) ? len - got : sizeof(buf), 0);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n <= 0)
			fail("splice socket -> pipe: %s", n ? strerror(errno) : "EOF");
		read_full(p[0], buf, (size_t)n, "the pipe");
		sum = fnv(sum, buf, (size_t)n);
		got += (uint64_t)n;
	}
	send_u64(s, sum, "checksum");
	close(p[0]);
	close(p[1]);
	close(s);
	ok("took %llu bytes by splice (socket -> pipe)", (unsigned long long)len);
}

static void server_source(int s)
{
	uint64_t sum;
	int f = pattern_file(BULK, 8, &sum);
	off_t off = 0;

	begin("sendfile");
	while (off < BULK) {
		if (!wait_fd(s, POLLOUT, WAIT_MS))
			fail("sendfile: cannot write for %d ms", WAIT_MS);
		if (sendfile(s, f, &off, BULK - (size_t)off) < 0 && errno != EINTR && errno != EAGAIN)
			fail("sendfile: %s", strerror(errno));
	}
	close(f);
	close(s);
	ok("sent %d bytes by sendfile", BULK);
}

static int server(const char *port_s, const char *runs_s)
{
	struct sockaddr_in6 any = { .sin6_family = AF_INET6, .sin6_addr = IN6ADDR_ANY_INIT };
	char *end;
	long port = strtol(port_s, &end, 10), runs = 1, done = 0;
	int l, zero = 0, one = 1;

	if (*end || port < 1 || port > 65535)
		return 2;
	if (runs_s && ((runs = strtol(runs_s, &end, 10)) < 1 || *end))
		return 2;
	role = "server-";
	l = (int)SYS(socket(AF_INET6, SOCK_STREAM, 0));
	SYS(setsockopt(l, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero)));
	SYS(setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)));
	any.sin6_port = htons((unsigned short)port);
	SYS(bind(l, (struct sockaddr *)&any, sizeof(any)));
	SYS(listen(l, 16));
	printf("listening on [::]:%ld\n", port);
	fflush(stdout);
	while (done < runs) {
		char cmd[8];
		int s;

		check = "accept";
		alarm(0);
		/* A client may take long to come (a guest booting), but not forever. */
		if (!wait_fd(l, POLLIN, 300000))
			fail("no client for 300 s");
		s = (int)SYS(accept(l, NULL, NULL));
		begin("command");
		read_full(s, cmd, 8, "command");
		cmd[7] = 0;
		if (!strcmp(cmd, "EPOLL"))
			server_epoll(l, s);
		else if (!strcmp(cmd, "NOOP"))
			check = "noop";
		else if (!strcmp(cmd, "FORK"))
			server_fork(s), s = -1;
		else if (!strcmp(cmd, "PASS"))
			server_pass(s), s = -1;
		else if (!strcmp(cmd, "HALF"))
			server_half(s), s = -1;
		else if (!strcmp(cmd, "NAME"))
			server_name(s, (unsigned short)port), s = -1;
		else if (!strcmp(cmd, "ECHO"))
			server_echo(s), s = -1;
		else if (!strcmp(cmd, "SINK"))
			server_sink(s), s = -1;
		else if (!strcmp(cmd, "SOURCE"))
			server_source(s), s = -1;
		else if (!strcmp(cmd, "BYE"))
			done++;
		else
			fail("unknown command %.8s", cmd);
		if (s >= 0)
			close(s);
	}
	printf("served %ld client%s\n", runs, runs == 1 ? "" : "s");
	return 0;
}

int main(int argc, char **argv)
{
	struct sigaction sa = { .sa_handler = on_alarm };
	int r = 2;

	setvbuf(stdout, NULL, _IOLBF, 0);
	sigaction(SIGALRM, &sa, NULL);
	if (argc >= 3 && argc <= 4 && !strcmp(argv[1], "server"))
		r = server(argv[2], argc == 4 ? argv[3] : NULL);
	else if (argc == 4 && !strcmp(argv[1], "client"))
		r = client(argv[2], argv[3]);
	if (r == 2)
		fprintf(stderr, "usage: lab-sockets-check server PORT [RUNS] | lab-sockets-check client ADDR PORT\n");
	return r;
}
