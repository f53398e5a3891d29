/*
 * lab-udp: UDP over the guest kernel's sockets, for lab tests and the sockets baseline
 * (busybox's nc speaks only TCP).
 *
 *   lab-udp recv [-r FILE] PORT [COUNT]   receive COUNT datagrams (default 1) on [::]:PORT,
 *                                         print each as "from ADDR port N len L: PAYLOAD";
 *                                         -r: create FILE once the socket is bound
 *   lab-udp send ADDR PORT MESSAGE        send MESSAGE as one datagram to ADDR (IPv6)
 *
 * Exit status 0 on success, 1 on a socket error, 2 on bad arguments.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int usage(void)
{
	fprintf(stderr, "usage: lab-udp recv [-r FILE] PORT [COUNT] | lab-udp send ADDR PORT MESSAGE\n");
	return 2;
}

static int port_of(const char *s, unsigned short *port)
{
	char *end;
	long v = strtol(s, &end, 10);

	if (*s == '\0' || *end != '\0' || v < 1 || v > 65535)
		return -1;
	*port = (unsigned short)v;
	return 0;
}

static int do_recv(int argc, char **argv)
{
	const char *ready = NULL;
	unsigned short port;
	long count = 1, n;
	struct sockaddr_in6 sa = { .sin6_family = AF_INET6, .sin6_addr = IN6ADDR_ANY_INIT };
	int fd;

	if (argc >= 2 && strcmp(argv[0], "-r") == 0) {
		ready = argv[1];
		argc -= 2;
		argv += 2;
	}
	if (argc < 1 || argc > 2 || port_of(argv[0], &port) != 0)
		return usage();
	if (argc == 2) {
		char *end;

		count = strtol(argv[1], &end, 10);
		if (*end != '\0' || count < 1)
			return usage();
	}
	fd = socket(AF_INET6, SOCK_DGRAM, 0);
	sa.sin6_port = htons(port);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		fprintf(stderr, "lab-udp: cannot bind [::]:%u: %s\n", port, strerror(errno));
		return 1;
	}
	if (ready) {
		int r = open(ready, O_WRONLY | O_CREAT | O_TRUNC, 0644);

		if (r < 0) {
			fprintf(stderr, "lab-udp: cannot create %s: %s\n", ready, strerror(errno));
			return 1;
		}
		close(r);
	}
	for (n = 0; n < count; n++) {
		char buf[65536], addr[INET6_ADDRSTRLEN];
		struct sockaddr_in6 from;
		socklen_t fl = sizeof(from);
		ssize_t len = recvfrom(fd, buf, sizeof(buf), 0, (struct sockaddr *)&from, &fl);

		if (len < 0) {
			fprintf(stderr, "lab-udp: recvfrom: %s\n", strerror(errno));
			return 1;
		}
		inet_ntop(AF_INET6, &from.sin6_addr, addr, sizeof(addr));
		printf("from %s port %u len %zd: %.*s\n", addr, ntohs(from.sin6_port), len,
		       (int)len, buf);
		fflush(stdout);
	}
	return 0;
}

static int do_send(int argc, char **argv)
{
	struct sockaddr_in6 sa = { .sin6_family = AF_INET6 };
	unsigned short port;
	size_t len;
	int fd;

	if (argc != 3 || inet_pton(AF_INET6, argv[0], &sa.sin6_addr) != 1 ||
	    port_of(argv[1], &port) != 0)
		return usage();
	sa.sin6_port = htons(port);
	len = strlen(argv[2]);
	fd = socket(AF_INET6, SOCK_DGRAM, 0);
	if (fd < 0 || sendto(fd, argv[2], len, 0, (struct sockaddr *)&sa, sizeof(sa)) != (ssize_t)len) {
		fprintf(stderr, "lab-udp: cannot send to [%s]:%u: %s\n", argv[0], port, strerror(errno));
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "recv") == 0)
		return do_recv(argc - 2, argv + 2);
	if (argc >= 2 && strcmp(argv[1], "send") == 0)
		return do_send(argc - 2, argv + 2);
	return usage();
}
