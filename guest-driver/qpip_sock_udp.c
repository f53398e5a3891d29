// SPDX-License-Identifier: GPL-2.0
/*
 * qpip: UDP qpip sockets — a program's UDP socket whose datagrams through the device's
 * interface are a UDP QP's, the rest its own kernel socket's.
 *
 * Made from the program's kernel UDP socket by IOCTL_SOCK_CONNECT (a peer the guest
 * kernel routes through the device's interface) or IOCTL_SOCK_BIND (bound to the wildcard
 * or one of the device's addresses). The kernel socket stays inside, bound to the port
 * (the port's reservation in the guest kernel, qpip_ports.c), and is the socket's other
 * half, datagram by datagram:
 *  - a send goes to the QP when the destination is routed through the device's interface,
 *    else to the kernel socket (loopback, other interfaces), which answers it as Linux does;
 *  - a receive takes the QP's datagrams (those that came through the device: the device
 *    steers the port to the QP) and the kernel socket's (those that came any other way);
 *  - a port several sockets share (SO_REUSEADDR or SO_REUSEPORT on each, as Linux asks)
 *    is shared by their QPs when they are one context's (BIND_FLAG_SHARE_PORT), and
 *    connect tells the device the peer (QP_OPT_UDP_PEER): it steers a datagram to the QP
 *    connected to its source, else to the first-bound unconnected one, as Linux does;
 *  - poll reports both; the names and the options are the kernel socket's (connect
 *    connects it too, so its answers and its filtering of other sources stay Linux's).
 *
 * Receive: QPIP_UDP_RX_SLOTS slots of QPIP_UDP_SLOT_BYTES (more than the largest datagram),
 * each the buffer of one receive WR, all kept posted; RQ WR i is slot i % QPIP_UDP_RX_SLOTS
 * and completes with one datagram, its source in the CQE. A datagram not for this socket
 * (another source than a connected socket's peer, the other family than the socket's) is
 * marked dropped and skipped. A slot is posted again once its datagram is read. The device
 * drops datagrams that find no slot posted (counted as udp_rx_no_wr): UDP's own loss.
 *
 * Send: a ring of QPIP_UDP_TX_BYTES; a datagram is copied in and posted as one send WR
 * naming its destination (two SGEs where it wraps), which completes once the device sent
 * it; its wr_id is its end in the ring, so completions free the ring up to there. A full
 * ring or SQ blocks, or says EAGAIN.
 */
#include <linux/file.h>
#include <linux/in.h>
#include <linux/in6.h>
#include <linux/netdevice.h>
#include <linux/sched/signal.h>
#include <linux/socket.h>
#include <linux/sockios.h>
#include <linux/termios.h>
#include <linux/uio.h>
#include <net/ipv6.h>
#include <net/sock.h>

#include "qpip_netdev.h"
#include "qpip_sock.h"

#define QPIP_UDP_RX_BYTES	(QPIP_UDP_RX_SLOTS * QPIP_UDP_SLOT_BYTES)

static_assert(!(QPIP_UDP_RX_SLOTS & (QPIP_UDP_RX_SLOTS - 1)));
static_assert(!(QPIP_UDP_TX_BYTES & (QPIP_UDP_TX_BYTES - 1)));
static_assert(QPIP_UDP_SLOT_BYTES >= QPIP_UDP_MAX_V6);
static_assert(QPIP_UDP_TX_BYTES >= 2 * QPIP_UDP_SLOT_BYTES);

/* ---- receive ring ---- */

static void qpip_udp_rx_wqe(struct qpip_sock *sk, u32 idx)
{
	struct qpip_wqe *w = qpip_sock_wqe(sk->qp->rq, QPIP_UDP_RX_SLOTS, idx);
	u32 slot = idx % QPIP_UDP_RX_SLOTS;
	struct qpip_sge *sge = qpip_wqe_sge(w, 0);

	w->wr_id = slot;
	w->opcode = QPIP_WQE_OP_RECV;
	w->num_sge = 1;
	sge->addr = QPIP_SOCK_IOVA + (u64)slot * QPIP_UDP_SLOT_BYTES;
	sge->length = QPIP_UDP_SLOT_BYTES;
	sge->lkey = sk->lkey;
}

/* Posts every slot once (the device's objects just made). */
int qpip_udp_io_init(struct qpip_sock *sk)
{
	for (sk->rq_tail = 0; sk->rq_tail < QPIP_UDP_RX_SLOTS; sk->rq_tail++)
		qpip_udp_rx_wqe(sk, sk->rq_tail);
	return qpip_sock_rq_doorbell(sk) ? 0 : -ENODEV;
}

/* Posts the slots read (or skipped) since the last time (mutex held). */
static void qpip_udp_refill(struct qpip_sock *sk)
{
	u32 want = sk->rx_read + QPIP_UDP_RX_SLOTS;

	if (sk->rq_tail == want || !sk->qp_made || sk->dead)
		return;
	while (sk->rq_tail != want)
		qpip_udp_rx_wqe(sk, sk->rq_tail++);
	qpip_sock_rq_doorbell(sk);
}

/* Whether a datagram from @addr/@port is this socket's (mutex held). */
static bool qpip_udp_accepts(struct qpip_sock *sk, const u8 *addr, u16 port)
{
	bool v4 = qpip_addr_v4(addr);

	if (sk->family == AF_INET ? !v4 : v4 && sk->ksock->sk->sk_ipv6only)
		return false;
	/* A connected socket takes its peer's datagrams only, as Linux's does. */
	if (sk->peer_set && (!sk->peer_dev || port != sk->peer_port ||
			     memcmp(addr, sk->peer_addr, 16)))
		return false;
	return true;
}

/* A completion of the socket's QP (mutex held, in order). */
void qpip_udp_cqe(struct qpip_sock *sk, const struct qpip_cqe *e)
{
	struct qpip_sock_dgram *d;
	u32 slot;

	if (e->opcode == QPIP_CQE_OP_SEND) {
		/*
		 * Sent, or not (no route, a destination the device refuses): either way the
		 * datagram is gone and its bytes free, as a datagram lost on the way is.
		 */
		sk->sq_head++;
		sk->tx_head = (u32)e->wr_id;
		return;
	}
	if (e->opcode != QPIP_CQE_OP_RECV)
		return;
	slot = sk->rx_done % QPIP_UDP_RX_SLOTS;
	d = &sk->udp_rx[slot];
	/* A flushed WR (the QP destroyed or in error) carries nothing: skipped like a drop. */
	d->drop = e->status != QPIP_CQE_STATUS_SUCCESS || e->wr_id != slot ||
		  e->byte_len > QPIP_UDP_SLOT_BYTES;
	if (!d->drop) {
		d->len = e->byte_len;
		d->port = e->src_port;
		memcpy(d->addr, e->src_addr, 16);
		d->drop = !qpip_udp_accepts(sk, d->addr, d->port);
	}
	sk->rx_done++;
	if (!d->drop)
		sk->rx_dgrams++;
}

/* Takes the completions and skips dropped datagrams at the head (mutex held). */
static void qpip_udp_reap(struct qpip_sock *sk)
{
	u32 old = sk->rx_read;

	qpip_sock_reap(sk);
	while (sk->rx_read != sk->rx_done && sk->udp_rx[sk->rx_read % QPIP_UDP_RX_SLOTS].drop)
		sk->rx_read++;
	if (sk->rx_read != old)
		qpip_udp_refill(sk);
}

/* The next datagram the device delivered, or NULL (mutex held, reaped). */
static struct qpip_sock_dgram *qpip_udp_next(struct qpip_sock *sk)
{
	if (sk->rx_read == sk->rx_done)
		return NULL;
	return &sk->udp_rx[sk->rx_read % QPIP_UDP_RX_SLOTS];
}

/* ---- send ring ---- */

static u32 qpip_udp_tx_free(struct qpip_sock *sk)
{
	return QPIP_UDP_TX_BYTES - (sk->tx_tail - sk->tx_head);
}

/* Room for the largest datagram: what poll calls writable. */
static bool qpip_udp_writable(struct qpip_sock *sk)
{
	return sk->sq_tail - sk->sq_head < QPIP_UDP_SQ_DEPTH &&
	       qpip_udp_tx_free(sk) >= QPIP_UDP_SLOT_BYTES;
}

/* The datagram being sent: its length, waited for by qpip_udp_room. */
static bool qpip_udp_room(struct qpip_sock *sk)
{
	return sk->sq_tail - sk->sq_head < QPIP_UDP_SQ_DEPTH &&
	       qpip_udp_tx_free(sk) >= sk->tx_want;
}

/*
 * Copies a datagram of @len bytes from @from into the ring and posts it to @addr/@port
 * (mutex held, room checked): 0 or -errno.
 */
static int qpip_udp_post(struct qpip_sock *sk, struct iov_iter *from, u32 len,
			 const u8 *addr, u16 port)
{
	u32 off = sk->tx_tail % QPIP_UDP_TX_BYTES;
	u32 first = min_t(u32, len, QPIP_UDP_TX_BYTES - off);
	u8 *ring = sk->va + QPIP_UDP_RX_BYTES;
	struct qpip_wqe *w;
	struct qpip_sge *sge;

	if (copy_from_iter(ring + off, first, from) != first)
		return -EFAULT;
	if (first < len && copy_from_iter(ring, len - first, from) != len - first)
		return -EFAULT;
	w = qpip_sock_wqe(sk->qp->sq, QPIP_UDP_SQ_DEPTH, sk->sq_tail);
	w->opcode = QPIP_WQE_OP_SEND;
	w->num_sge = !len ? 0 : first < len ? 2 : 1;
	memcpy(w->dest_addr, addr, 16);
	w->dest_port = port;
	sge = qpip_wqe_sge(w, 0);
	sge->addr = QPIP_SOCK_IOVA + QPIP_UDP_RX_BYTES + off;
	sge->length = first;
	sge->lkey = sk->lkey;
	if (first < len) {
		sge = qpip_wqe_sge(w, 1);
		sge->addr = QPIP_SOCK_IOVA + QPIP_UDP_RX_BYTES;
		sge->length = len - first;
		sge->lkey = sk->lkey;
	}
	sk->tx_tail += len;
	w->wr_id = sk->tx_tail;
	sk->sq_tail++;
	if (!qpip_sock_device(sk))
		return -ENETDOWN;
	qpip_sock_ring(sk, QPIP_DB_QP_BASE + sk->qp_slot * QPIP_DB_QP_STRIDE + QPIP_DB_QP_SQ_TAIL,
		       sk->sq_tail, true);
	qpip_sock_device_end(sk);
	return 0;
}

/* ---- the kernel socket's half ---- */

/*
 * A send through the kernel socket (mutex held): the mutex is let go meanwhile, as the
 * kernel socket may block (its buffer full) and has its own lock.
 */
static ssize_t qpip_udp_kernel_send(struct qpip_sock *sk, struct iov_iter *from,
				    unsigned int flags, bool nonblock,
				    struct sockaddr_storage *dst, int dst_len)
{
	struct msghdr msg = {
		.msg_name = dst_len ? dst : NULL,
		.msg_namelen = dst_len,
		.msg_flags = flags | (nonblock ? MSG_DONTWAIT : 0),
		.msg_iter = *from,
	};
	ssize_t ret;

	mutex_unlock(&sk->lock);
	ret = sock_sendmsg(sk->ksock, &msg);
	mutex_lock(&sk->lock);
	return ret;
}

static ssize_t qpip_udp_kernel_recv(struct qpip_sock *sk, struct iov_iter *to,
				    unsigned int flags, struct sockaddr_storage *src,
				    int *src_len, unsigned int *msg_flags)
{
	struct msghdr msg = {
		.msg_name = src,
		.msg_iter = *to,
	};
	int ret;

	ret = sock_recvmsg(sk->ksock, &msg, flags | MSG_DONTWAIT);
	if (ret >= 0) {
		*src_len = msg.msg_namelen;
		*msg_flags = msg.msg_flags & MSG_TRUNC;
		*to = msg.msg_iter;
	}
	return ret;
}

/* ---- send ---- */

/*
 * Where a destination goes: the device's when the guest kernel routes it through the
 * device's interface (true, @addr/@port as the device names them), the kernel socket's
 * otherwise. @dst is a sockaddr of @dst_len bytes the program gave.
 */
static bool qpip_udp_dest(struct qpip_sock *sk, const struct sockaddr_storage *dst, int dst_len,
			  u8 *addr, u16 *port)
{
	struct net_device *ndev;
	u8 src[16];
	bool ok;

	if (dst->ss_family == AF_INET6 && dst_len >= (int)sizeof(struct sockaddr_in6)) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)dst;

		/* A scope id names an interface the route would not: the kernel's. */
		if (s6->sin6_scope_id)
			return false;
		memcpy(addr, &s6->sin6_addr, 16);
		*port = ntohs(s6->sin6_port);
		if (qpip_addr_v4(addr) && sk->ksock->sk->sk_ipv6only)
			return false;
	} else if (dst->ss_family == AF_INET && dst_len >= (int)sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)dst;

		/* An IPv6-only socket refuses it: the kernel says how. */
		if (sk->family == AF_INET6 && sk->ksock->sk->sk_ipv6only)
			return false;
		ipv6_addr_set_v4mapped(s4->sin_addr.s_addr, (struct in6_addr *)addr);
		*port = ntohs(s4->sin_port);
	} else {
		return false;
	}
	if (sk->family == AF_INET && !qpip_addr_v4(addr))
		return false;
	if (!*port || sk->dead)
		return false;
	ndev = qpip_sock_netdev(sk->ctx->qdev);
	if (!ndev)
		return false;
	memcpy(src, sk->local_addr, 16);
	ok = netif_running(ndev) && qpip_route_via(sk->ksock->sk, ndev, src, addr);
	dev_put(ndev);
	return ok;
}

/*
 * Sends one datagram of @from (mutex held) to @dst (@dst_len bytes; 0: the peer): its
 * length, or -errno as Linux's UDP gives it.
 */
ssize_t qpip_udp_send(struct qpip_sock *sk, struct iov_iter *from, unsigned int flags,
		      bool nonblock, struct sockaddr_storage *dst, int dst_len)
{
	size_t len = iov_iter_count(from);
	long timeo;
	u8 addr[16];
	u16 port;
	int ret;

	qpip_sock_sync(sk);
	if (dst_len) {
		if (!qpip_udp_dest(sk, dst, dst_len, addr, &port))
			return qpip_udp_kernel_send(sk, from, flags, nonblock, dst, dst_len);
	} else {
		if (!sk->peer_dev || sk->dead)
			return qpip_udp_kernel_send(sk, from, flags, nonblock, NULL, 0);
		memcpy(addr, sk->peer_addr, 16);
		port = sk->peer_port;
	}
	if (sk->wr_shut) {
		if (!(flags & MSG_NOSIGNAL))
			send_sig(SIGPIPE, current, 0);
		return -EPIPE;
	}
	if (len > (qpip_addr_v4(addr) ? QPIP_UDP_MAX_V4 : QPIP_UDP_MAX_V6) ||
	    len > sk->ctx->qdev->info.max_udp_payload)
		return -EMSGSIZE;
	timeo = nonblock || (flags & MSG_DONTWAIT) ? 0 : sock_sndtimeo(sk->ksock->sk, false);
	sk->tx_want = len;
	qpip_sock_reap(sk);
	while (!qpip_udp_room(sk)) {
		sk->tx_waiters++;
		ret = qpip_sock_wait(sk, qpip_udp_room, &timeo);
		sk->tx_waiters--;
		if (ret == -EAGAIN)
			sk->tx_wanted = true;	/* the caller waits for POLLOUT */
		if (ret)
			return ret;
		/* The QP failed or the device went: nothing frees the ring any more. */
		if (sk->dead || sk->err)
			return -ENETDOWN;
	}
	ret = qpip_udp_post(sk, from, len, addr, port);
	qpip_sock_rearm(sk);
	return ret ? ret : len;
}

/* ---- receive ---- */

/* A wake-up of the kernel socket counts as one of the socket's own (as accept's). */
static int qpip_udp_kwake(struct wait_queue_entry *wq, unsigned int mode, int sync, void *key)
{
	struct wait_queue_entry *main = wq->private;

	smp_mb();	/* pairs with the smp_store_mb() in wait_woken() */
	main->flags |= WQ_FLAG_WOKEN;
	return default_wake_function(main, mode, sync, key);
}

/* Copies the device's next datagram @d out (mutex held): as udp_recvmsg does. */
static ssize_t qpip_udp_take(struct qpip_sock *sk, struct qpip_sock_dgram *d,
			     struct iov_iter *to, unsigned int flags,
			     struct sockaddr_storage *src, int *src_len, unsigned int *msg_flags)
{
	u32 slot = sk->rx_read % QPIP_UDP_RX_SLOTS;
	size_t n = min_t(size_t, d->len, iov_iter_count(to));

	if (copy_to_iter(sk->va + (size_t)slot * QPIP_UDP_SLOT_BYTES, n, to) != n)
		return -EFAULT;
	*msg_flags = n < d->len ? MSG_TRUNC : 0;
	*src_len = qpip_sock_sockaddr(sk->family, d->addr, d->port, src);
	n = flags & MSG_TRUNC ? d->len : n;
	if (!(flags & MSG_PEEK)) {
		sk->rx_read++;
		sk->rx_dgrams--;
		qpip_udp_refill(sk);
	}
	return n;
}

/*
 * Receives one datagram into @to (mutex held, released while asleep): the device's first,
 * then the kernel socket's. Its length (the whole datagram's with MSG_TRUNC), its source
 * in @src (@src_len bytes) and MSG_TRUNC in @msg_flags if it was cut; or -errno.
 */
ssize_t qpip_udp_recv(struct qpip_sock *sk, struct iov_iter *to, unsigned int flags,
		      bool nonblock, struct sockaddr_storage *src, int *src_len,
		      unsigned int *msg_flags)
{
	DEFINE_WAIT_FUNC(wait, woken_wake_function);
	struct wait_queue_entry kwait;
	struct qpip_sock_dgram *d;
	long timeo;
	ssize_t ret;

	*src_len = 0;
	*msg_flags = 0;
	/* The error queue is the kernel socket's (ICMP errors of its sends). */
	if (flags & MSG_ERRQUEUE)
		return qpip_udp_kernel_recv(sk, to, flags, src, src_len, msg_flags);
	timeo = nonblock || (flags & MSG_DONTWAIT) ? 0 : sock_rcvtimeo(sk->ksock->sk, false);
	init_waitqueue_func_entry(&kwait, qpip_udp_kwake);
	kwait.private = &wait;
	add_wait_queue(&sk->wait, &wait);
	add_wait_queue(sk_sleep(sk->ksock->sk), &kwait);
	for (;;) {
		qpip_sock_sync(sk);
		qpip_udp_reap(sk);
		d = qpip_udp_next(sk);
		if (d) {
			ret = qpip_udp_take(sk, d, to, flags, src, src_len, msg_flags);
			break;
		}
		ret = qpip_udp_kernel_recv(sk, to, flags, src, src_len, msg_flags);
		if (ret != -EAGAIN)
			break;
		if (sk->rd_shut) {
			ret = 0;
			break;
		}
		if (!timeo)
			break;
		if (signal_pending(current)) {
			ret = sock_intr_errno(timeo);
			break;
		}
		/* A completion written before the arm raises no interrupt: look once more. */
		qpip_sock_arm(sk);
		qpip_udp_reap(sk);
		if (qpip_udp_next(sk))
			continue;
		mutex_unlock(&sk->lock);
		timeo = wait_woken(&wait, TASK_INTERRUPTIBLE, timeo);
		mutex_lock(&sk->lock);
	}
	remove_wait_queue(sk_sleep(sk->ksock->sk), &kwait);
	remove_wait_queue(&sk->wait, &wait);
	qpip_sock_rearm(sk);
	return ret;
}

/* ---- poll, FIONREAD ---- */

__poll_t qpip_udp_poll(struct qpip_sock *sk, struct file *filp, struct poll_table_struct *pt)
{
	/* The kernel socket's datagrams and errors; its queue wakes this poll too. */
	__poll_t mask = vfs_poll(sk->ksock_file, pt) &
			(EPOLLIN | EPOLLRDNORM | EPOLLERR | EPOLLHUP | EPOLLRDHUP);

	mutex_lock(&sk->lock);
	qpip_sock_sync(sk);
	qpip_udp_reap(sk);
	if (qpip_udp_next(sk))
		mask |= EPOLLIN | EPOLLRDNORM;
	if (sk->dead || qpip_udp_writable(sk))
		mask |= EPOLLOUT | EPOLLWRNORM | EPOLLWRBAND;
	sk->tx_wanted = !(mask & EPOLLOUT);
	qpip_sock_rearm(sk);
	mutex_unlock(&sk->lock);
	return mask;
}

/* SIOCINQ (FIONREAD): the next datagram's length, as Linux's UDP says; 0 if none. */
int qpip_udp_inq(struct qpip_sock *sk, int __user *uarg)
{
	struct qpip_sock_dgram *d;
	int v = -1;

	mutex_lock(&sk->lock);
	qpip_udp_reap(sk);
	d = qpip_udp_next(sk);
	if (d)
		v = d->len;
	mutex_unlock(&sk->lock);
	if (v < 0)
		return sk->ksock->ops->ioctl(sk->ksock, SIOCINQ, (unsigned long)uarg);
	return put_user(v, uarg);
}

/* ---- connect ---- */

/*
 * Whether @ksk's port may be shared in the device: Linux lets UDP sockets share a port when
 * each asked with SO_REUSEADDR or SO_REUSEPORT (the device checks the others on the port
 * asked too, and that they are this context's).
 */
static bool qpip_udp_shares(const struct sock *ksk)
{
	return ksk->sk_reuse != SK_NO_REUSE || ksk->sk_reuseport;
}

/*
 * Tells the device @sk's peer (mutex held, or before the socket is shared): a connected
 * socket on a shared port gets its peer's datagrams there. The socket still filters what
 * it receives (qpip_udp_accepts): a device before interface 2.6 steers the port to one
 * QP, and a peer not routed through the device is told as none.
 */
static void qpip_udp_tell_peer(struct qpip_sock *sk)
{
	bool peer = sk->peer_set && sk->peer_dev;

	if (!sk->qp_made || sk->dead || !qpip_sock_device(sk))
		return;
	qpip_cmd_udp_peer(sk->ctx->qdev, sk->ctx->id, sk->qp->handle, peer ? sk->peer_addr : NULL,
			  sk->peer_port);
	qpip_sock_device_end(sk);
}

/*
 * IOCTL_SOCK_PEER: connect (or with AF_UNSPEC disconnect) a UDP qpip socket. The kernel
 * socket connects first, and answers as Linux does; then datagrams to the peer go over
 * the device if it is routed through it, and the device's datagrams from others are
 * dropped.
 */
int qpip_udp_peer(struct qpip_sock *sk, struct qpip_sock_peer *a)
{
	struct sockaddr_storage ss = {};
	u8 addr[16];
	u16 port;
	bool dev;
	int ret;

	if (!sk->udp)
		return -EOPNOTSUPP;
	if (a->addr_len > sizeof(ss) || a->addr_len > sizeof(a->addr))
		return -EINVAL;
	memcpy(&ss, a->addr, a->addr_len);
	ret = kernel_connect(sk->ksock, (struct sockaddr *)&ss, a->addr_len, 0);
	if (ret)
		return ret;
	mutex_lock(&sk->lock);
	dev = ss.ss_family != AF_UNSPEC && qpip_udp_dest(sk, &ss, a->addr_len, addr, &port);
	sk->peer_set = ss.ss_family != AF_UNSPEC;
	sk->peer_dev = dev;
	if (dev) {
		memcpy(sk->peer_addr, addr, 16);
		sk->peer_port = port;
	}
	qpip_udp_tell_peer(sk);
	mutex_unlock(&sk->lock);
	return 0;
}

/* ---- making one ---- */

/*
 * Ends @sk, made for @sock but not handed out: its device objects go, and the kernel
 * socket goes back to the program as it was (only our reference on it is put).
 */
static void qpip_udp_abandon(struct qpip_sock *sk, struct socket *sock)
{
	mutex_lock(&sk->lock);
	qpip_sock_destroy(sk);
	mutex_unlock(&sk->lock);
	sk->ksock = NULL;
	sk->ksock_file = NULL;
	sockfd_put(sock);
	qpip_sock_put(sk);
}

/*
 * A UDP qpip socket of @sock (the caller's reference, the new socket's from then on),
 * bound in the device to @port on @local (the wildcard: every address of the device).
 * Returns it, NULL with *@declined set (@sock put), or an ERR_PTR (@sock put).
 */
static struct qpip_sock *qpip_udp_make(struct qpip_ctx *ctx, struct file *ctx_file,
				       struct socket *sock, const u8 *local, u16 port,
				       u32 *declined)
{
	static const u8 any[16];
	struct qpip_sock *sk;
	int ret;

	sk = qpip_sock_alloc(ctx, ctx_file, sock->sk->sk_family);
	if (!sk) {
		sockfd_put(sock);
		return ERR_PTR(-ENOMEM);
	}
	sk->udp = true;
	sk->ksock = sock;
	sk->ksock_file = sock->file;
	memcpy(sk->local_addr, qpip_addr_any(local) ? any : local, 16);
	sk->local_port = port;
	ret = qpip_sock_objects(sk);
	if (ret == -ENOSPC || ret == -EDQUOT || ret == -ENOMEM) {
		*declined = QPIP_SOCK_DECLINE_FULL;
		ret = 0;
	}
	if (!ret && !*declined) {
		ret = -ENODEV;
		if (qpip_sock_device(sk)) {
			ret = qpip_cmd_bind_udp(ctx->qdev, ctx->id, sk->qp->handle,
						sk->local_addr, port, qpip_udp_shares(sock->sk));
			qpip_sock_device_end(sk);
		}
		if (ret == -EADDRINUSE) {
			*declined = QPIP_SOCK_DECLINE_PORT;
			ret = 0;
		}
	}
	if (ret || *declined) {
		qpip_udp_abandon(sk, sock);
		return ret ? ERR_PTR(ret) : NULL;
	}
	/*
	 * The port is the QP's too: a connect to AF_UNSPEC must not give it back to the kernel,
	 * as it would a port the kernel chose (udp_disconnect unhashes those).
	 */
	lock_sock(sock->sk);
	sock->sk->sk_userlocks |= SOCK_BINDPORT_LOCK;
	release_sock(sock->sk);
	sk->state = QPIP_SOCK_CONNECTED;
	return sk;
}

/* @sk's file in a temporary descriptor of the caller (moved onto the program's by dup3). */
static int qpip_udp_install(struct qpip_sock *sk, int *new_fd)
{
	struct file *f = qpip_sock_file(sk, sk->ksock_file->f_flags);
	int ret;

	if (IS_ERR(f)) {
		mutex_lock(&sk->lock);
		qpip_sock_destroy(sk);
		mutex_unlock(&sk->lock);
		qpip_sock_put(sk);
		return PTR_ERR(f);
	}
	ret = qpip_sock_install(f, SOCK_CLOEXEC);	/* on failure the release ended it */
	if (ret < 0)
		return ret;
	*new_fd = ret;
	return 0;
}

/*
 * The checks of both ways in (the socket's reference held): whether the device can serve
 * @sock bound to @local. 0 or a QPIP_SOCK_DECLINE_*.
 */
static u32 qpip_udp_check(struct qpip_ctx *ctx, struct socket *sock, const u8 *local)
{
	struct net_device *ndev;
	u32 declined = 0;

	if (sock_net(sock->sk) != &init_net)
		return QPIP_SOCK_DECLINE_NAMESPACE;
	ndev = qpip_sock_netdev(ctx->qdev);
	if (!ndev || !netif_running(ndev))
		declined = QPIP_SOCK_DECLINE_NO_NETDEV;
	else if (!qpip_addr_any(local) && !qpip_addr_on(&init_net, ndev, local))
		declined = QPIP_SOCK_DECLINE_LOCAL_ADDR;
	else if (sock->sk->sk_bound_dev_if && sock->sk->sk_bound_dev_if != ndev->ifindex)
		declined = QPIP_SOCK_DECLINE_ROUTE;	/* SO_BINDTODEVICE: another interface */
	if (ndev)
		dev_put(ndev);
	return declined;
}

/*
 * IOCTL_SOCK_CONNECT of a UDP socket: the peer must be routed through the device's
 * interface. The kernel socket is bound (an ephemeral port if it had none) and connected
 * to the peer as well. Takes the caller's reference to @sock.
 */
int qpip_udp_connect(struct qpip_ctx *ctx, struct file *ctx_file, struct socket *sock,
		     struct qpip_sock_connect *a)
{
	struct sock *ksk = sock->sk;
	struct sockaddr_storage ss;
	struct net_device *ndev;
	struct qpip_sock *sk;
	u8 local[16], src[16];
	int len, ret;
	u16 port;

	if (ksk->sk_state != TCP_CLOSE || sock->state != SS_UNCONNECTED)
		a->declined = QPIP_SOCK_DECLINE_STATE;
	else if (qpip_addr_v4(a->peer.addr) ? ksk->sk_family == AF_INET6 && ksk->sk_ipv6only :
		 ksk->sk_family == AF_INET)
		a->declined = QPIP_SOCK_DECLINE_ROUTE;
	if (a->declined)
		goto out_sock;
	lock_sock(ksk);
	qpip_ksock_local(ksk, local, &port);
	release_sock(ksk);
	a->declined = qpip_udp_check(ctx, sock, local);
	if (a->declined)
		goto out_sock;
	ndev = qpip_sock_netdev(ctx->qdev);
	memcpy(src, local, 16);
	if (!ndev || !qpip_route_via(ksk, ndev, src, a->peer.addr))
		a->declined = QPIP_SOCK_DECLINE_ROUTE;
	if (ndev)
		dev_put(ndev);
	if (a->declined)
		goto out_sock;
	if (!port) {
		struct sockaddr_storage any = { .ss_family = ksk->sk_family };

		len = ksk->sk_family == AF_INET6 ? sizeof(struct sockaddr_in6) :
		      sizeof(struct sockaddr_in);
		ret = kernel_bind(sock, (struct sockaddr *)&any, len);
		if (ret)
			goto err_sock;
		lock_sock(ksk);
		port = inet_sk(ksk)->inet_num;
		release_sock(ksk);
	}
	sk = qpip_udp_make(ctx, ctx_file, sock, local, port, &a->declined);
	if (IS_ERR_OR_NULL(sk))
		return PTR_ERR_OR_ZERO(sk);
	/* The kernel socket's half: its answers (getpeername) and its filter are Linux's. */
	len = qpip_sock_sockaddr(ksk->sk_family, a->peer.addr, a->peer.port, &ss);
	ret = kernel_connect(sock, (struct sockaddr *)&ss, len, 0);
	if (ret) {
		qpip_udp_abandon(sk, sock);
		return ret;
	}
	memcpy(sk->peer_addr, a->peer.addr, 16);
	sk->peer_port = a->peer.port;
	sk->peer_set = true;
	sk->peer_dev = true;
	qpip_udp_tell_peer(sk);
	a->status = 0;
	return qpip_udp_install(sk, &a->new_fd);

err_sock:
	sockfd_put(sock);
	return ret;
out_sock:
	sockfd_put(sock);
	return 0;
}

/*
 * IOCTL_SOCK_BIND: a bound, unconnected kernel UDP socket whose address is the wildcard
 * or one of the device's. Takes the caller's reference to @sock.
 */
int qpip_udp_bind(struct qpip_ctx *ctx, struct file *ctx_file, struct socket *sock,
		  struct qpip_sock_bind *a)
{
	struct sock *ksk = sock->sk;
	struct qpip_sock *sk;
	u8 local[16];
	u16 port;

	lock_sock(ksk);
	qpip_ksock_local(ksk, local, &port);
	release_sock(ksk);
	if (ksk->sk_state != TCP_CLOSE || sock->state != SS_UNCONNECTED || !port)
		a->declined = QPIP_SOCK_DECLINE_STATE;
	else
		a->declined = qpip_udp_check(ctx, sock, local);
	if (a->declined) {
		sockfd_put(sock);
		return 0;
	}
	sk = qpip_udp_make(ctx, ctx_file, sock, local, port, &a->declined);
	if (IS_ERR_OR_NULL(sk))
		return PTR_ERR_OR_ZERO(sk);
	return qpip_udp_install(sk, &a->new_fd);
}
