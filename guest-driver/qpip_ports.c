// SPDX-License-Identifier: GPL-2.0
/*
 * qpip: the port split between the guest kernel's sockets and the device's QPs.
 *
 * Why: the adapter carries the guest kernel's own traffic as well as its QPs'. The device
 * steers a frame to its engine when its port is one a QP or listener holds, and to the
 * kernel otherwise, so a port must never be a kernel socket's and a QP's at once: the
 * socket would never see its traffic, or the QP would lose its to the kernel. As an RNIC's
 * port mapper does (iwpmd), the driver holds a real kernel socket on every port a QP or
 * listener takes through it — a reservation — so the kernel's own port allocation sees
 * the port as used: a kernel socket that tries it gets EADDRINUSE, and a port a kernel
 * socket already holds fails the QP's BIND, LISTEN or CONNECT with -EADDRINUSE before the
 * device is asked.
 *
 * What a reservation holds: one socket of the QP's protocol (TCP: bound, never listening,
 * so no connection is ever queued on it; UDP: bound, with the smallest receive buffer, so
 * nothing accumulates) on the port, on every address: the device's ports are per function
 * whatever address a QP names (device/src/engine/ports.rs), and a port is steered as a
 * whole, so the reservation is of the port, like net.ipv4.ip_local_reserved_ports. It is an IPv6 socket bound to ::
 * with IPV6_V6ONLY off, which also holds the port for IPv4 (the ABI carries IPv4 as
 * IPv4-mapped addresses); an IPv4 socket on 0.0.0.0 if the kernel has no IPv6. Port 0
 * lets the kernel choose one from its ephemeral range (ip_local_port_range, skipping
 * ip_local_reserved_ports), which the caller then names to the device.
 *
 * The socket is in the initial network namespace: that is where the adapter's netdev
 * lives and where the device's addresses are the guest's (qpip_port_check applies the
 * same namespace's rules). A process in a network namespace of its own still shares the
 * device's one port space, so its own namespace would be the wrong place; and a kernel
 * socket holds no reference on its namespace, which init_net never needs.
 *
 * When it is released: with the QP or listener that holds the port — destroyed by its
 * ioctl, with its context when the file is closed (a process's exit closes its files),
 * and at a reset or removal of the device, which forgets every QP (qpip_contexts_revoke).
 * Connections accepted from a listener share its port and hold no reservation of their
 * own. A context whose destruction timed out gives its ports back all the same: unlike
 * memory the device may still write, a port the kernel takes while a failing device still
 * holds it costs at most frames sent the wrong way, and a reset follows such a failure.
 * Not covered: a TCP connection the device keeps closing after its QP was destroyed no
 * longer has a reservation, so the kernel may give its port out before the device is done.
 * A connect from that port to the same peer then meets the old connection's four-tuple:
 * the device lets a new incarnation take it from TIME-WAIT when the old one used
 * timestamps (as Linux does for a bound port); otherwise a port the kernel chose is
 * refused at BIND, which names the peer, and exchanged for another (qpip_sock_bind_qp),
 * and a port the program bound fails the connect (EADDRINUSE).
 *
 * A reservation belongs to its QP or listener; their owners serialise its reserve and
 * release (the context's lock in the ioctls, the device's lock held for writing at a reset
 * or removal, and release once the context is off the device's list).
 */
#include <linux/in.h>
#include <linux/in6.h>
#include <linux/net.h>
#include <net/ipv6.h>
#include <net/net_namespace.h>
#include <net/sock.h>

#include "qpip_ctx.h"

/* The kernel socket of a reservation for @proto: IPv6 dual-stack, or IPv4 without IPv6. */
static int qpip_port_socket(int proto, struct socket **sockp, bool *v6)
{
	int type = proto == IPPROTO_TCP ? SOCK_STREAM : SOCK_DGRAM;
	struct socket *sock;
	int off = 0;
	int ret;

	ret = sock_create_kern(&init_net, AF_INET6, type, proto, &sock);
	if (ret == -EAFNOSUPPORT) {
		*v6 = false;
		return sock_create_kern(&init_net, AF_INET, type, proto, sockp);
	}
	if (ret)
		return ret;
	/* net.ipv6.bindv6only may say otherwise: the port is held for IPv4 as well. */
	ret = sock->ops->setsockopt(sock, SOL_IPV6, IPV6_V6ONLY, KERNEL_SOCKPTR(&off),
				    sizeof(off));
	if (ret) {
		sock_release(sock);
		return ret;
	}
	*v6 = true;
	*sockp = sock;
	return 0;
}

/* Binds @sock to @port (0: the kernel's choice) on every address; the port in *@port. */
static int qpip_port_bind(struct socket *sock, bool v6, u16 *port)
{
	struct sockaddr_storage ss = {};
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;
	struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
	int ret;

	if (v6) {
		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons(*port);
		ret = kernel_bind(sock, (struct sockaddr *)sin6, sizeof(*sin6));
	} else {
		sin->sin_family = AF_INET;
		sin->sin_port = htons(*port);
		ret = kernel_bind(sock, (struct sockaddr *)sin, sizeof(*sin));
	}
	if (ret)
		return ret;
	ret = kernel_getsockname(sock, (struct sockaddr *)&ss);
	if (ret < 0)
		return ret;
	*port = ntohs(v6 ? sin6->sin6_port : sin->sin_port);
	return 0;
}

/* The protocol whose ports a QP of @qp_type takes, or 0 if it takes none. */
static int qpip_port_proto(u8 qp_type)
{
	switch (qp_type) {
	case QPIP_QP_TYPE_TCP:
		return IPPROTO_TCP;
	case QPIP_QP_TYPE_UDP:
		return IPPROTO_UDP;
	}
	return 0;
}

/*
 * Whether a QP of @qp_type takes ports (UDP, TCP and so iWARP; listeners are TCP). A raw
 * QP has none, and a type the device does not know is the device's to refuse.
 */
bool qpip_port_type(u8 qp_type)
{
	return qpip_port_proto(qp_type);
}

/*
 * Reserves @port (0: one the kernel chooses) for a QP of @qp_type in the guest kernel,
 * into @p, which must hold none: -EADDRINUSE if a kernel socket has it. The port
 * reserved is then p->port.
 */
int qpip_port_reserve(struct qpip_port *p, u8 qp_type, u16 port)
{
	int proto = qpip_port_proto(qp_type);
	struct socket *sock;
	bool v6;
	int ret;

	if (WARN_ON_ONCE(p->sock || !proto))
		return -EINVAL;
	ret = qpip_port_socket(proto, &sock, &v6);
	if (ret)
		return ret;
	if (proto == IPPROTO_UDP)
		sock_set_rcvbuf(sock->sk, 0);	/* the kernel's minimum */
	ret = qpip_port_bind(sock, v6, &port);
	if (ret) {
		sock_release(sock);
		return ret;
	}
	p->sock = sock;
	p->port = port;
	return 0;
}

/* Gives the port of @p back to the kernel; nothing if it holds none. */
void qpip_port_release(struct qpip_port *p)
{
	if (!p->sock)
		return;
	sock_release(p->sock);
	p->sock = NULL;
	p->port = 0;
}
