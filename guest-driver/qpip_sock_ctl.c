// SPDX-License-Identifier: GPL-2.0
/*
 * qpip: the socket calls a file lacks, as ioctls on a qpip socket's file — accept, send
 * and receive with flags, names, options, shutdown — and FIONREAD/SIOCOUTQ.
 *
 * Options live in a kernel socket: the program's own for a socket made by connect or
 * listen, a fresh unbound one for an accepted connection (given its listener's options, as
 * Linux's accepted sockets inherit them). setsockopt is applied there first, so a value is
 * checked and kept exactly as Linux does, and what the device's connection takes from it
 * (TCP_CORK, keepalive, SO_LINGER, the send and receive timeouts) is read from there when
 * used. getsockopt is answered there too, but for what only the connection knows:
 * SO_ERROR, TCP_INFO, the buffer sizes.
 */
#include <linux/file.h>
#include <linux/in.h>
#include <linux/in6.h>
#include <linux/inetdevice.h>
#include <linux/ioctl.h>
#include <linux/sockios.h>
#include <linux/termios.h>
#include <linux/tcp.h>
#include <linux/uio.h>
#include <net/addrconf.h>
#include <net/inet_sock.h>
#include <net/ipv6.h>
#include <net/sock.h>
#include <net/tcp.h>

#include "qpip_netdev.h"
#include "qpip_sock.h"

/* A struct sockaddr_in or _in6 for @addr/@port as a socket of @family gives it; its length. */
int qpip_sock_sockaddr(int family, const u8 *addr, u16 port, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (family == AF_INET) {
		struct sockaddr_in *sin = (struct sockaddr_in *)ss;

		sin->sin_family = AF_INET;
		sin->sin_port = htons(port);
		memcpy(&sin->sin_addr, addr + 12, 4);
		return sizeof(*sin);
	}
	{
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;

		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons(port);
		memcpy(&sin6->sin6_addr, addr, 16);
		return sizeof(*sin6);
	}
}

/* ---- accept ---- */

/*
 * A wake-up from the kernel socket's queue counts as one of the listener's: a blocking
 * accept sleeps on both, with one wait_woken (whose flag lives in @wq->private's entry).
 */
static int qpip_accept_wake(struct wait_queue_entry *wq, unsigned int mode, int sync, void *key)
{
	struct wait_queue_entry *main = wq->private;

	smp_mb();	/* pairs with the smp_store_mb() in wait_woken() */
	main->flags |= WQ_FLAG_WOKEN;
	return default_wake_function(main, mode, sync, key);
}

/* The address a connection from @peer came to when the listener has the wildcard. */
static void qpip_sock_accepted_local(struct qpip_sock *sk)
{
	static const u8 any[16];
	struct net_device *ndev;

	if (memcmp(sk->local_addr, any, 16))
		return;
	ndev = qpip_sock_netdev(sk->ctx->qdev);
	if (!ndev)
		return;
	/* The device's address toward the peer, as its route chooses one. */
	if (ipv6_addr_v4mapped((struct in6_addr *)sk->peer_addr)) {
		__be32 a = inet_select_addr(ndev, ((struct in6_addr *)sk->peer_addr)->s6_addr32[3],
					    RT_SCOPE_UNIVERSE);

		ipv6_addr_set_v4mapped(a, (struct in6_addr *)sk->local_addr);
	} else {
		ipv6_dev_get_saddr(&init_net, ndev, (struct in6_addr *)sk->peer_addr, 0,
				   (struct in6_addr *)sk->local_addr);
	}
	dev_put(ndev);
}

/* An accepted connection's option store: a kernel socket with the listener's options. */
static int qpip_sock_accept_ksock(struct qpip_sock *l, struct qpip_sock *sk)
{
	struct sock *lk = l->ksock->sk, *nk;
	int ret;

	ret = sock_create_kern(&init_net, l->family, SOCK_STREAM, IPPROTO_TCP, &sk->ksock);
	if (ret)
		return ret;
	nk = sk->ksock->sk;
	lock_sock(lk);
	lock_sock_nested(nk, SINGLE_DEPTH_NESTING);
	sock_valbool_flag(nk, SOCK_KEEPOPEN, sock_flag(lk, SOCK_KEEPOPEN));
	sock_valbool_flag(nk, SOCK_LINGER, sock_flag(lk, SOCK_LINGER));
	nk->sk_lingertime = lk->sk_lingertime;
	nk->sk_rcvtimeo = lk->sk_rcvtimeo;
	nk->sk_sndtimeo = lk->sk_sndtimeo;
	tcp_sk(nk)->nonagle = tcp_sk(lk)->nonagle;
	WRITE_ONCE(tcp_sk(nk)->keepalive_time, READ_ONCE(tcp_sk(lk)->keepalive_time));
	WRITE_ONCE(tcp_sk(nk)->keepalive_intvl, READ_ONCE(tcp_sk(lk)->keepalive_intvl));
	WRITE_ONCE(tcp_sk(nk)->keepalive_probes, READ_ONCE(tcp_sk(lk)->keepalive_probes));
	release_sock(nk);
	release_sock(lk);
	return 0;
}

/* Takes the oldest connection established on an offer, or NULL (mutex of @l held). */
static struct qpip_sock *qpip_sock_take_ready(struct qpip_sock *l)
{
	struct qpip_sock *sk;
	unsigned long flags;

	spin_lock_irqsave(&l->qlock, flags);
	sk = list_first_entry_or_null(&l->ready, struct qpip_sock, node);
	if (sk)
		list_del_init(&sk->node);
	spin_unlock_irqrestore(&l->qlock, flags);
	return sk;
}

/* A connection of @l that came through the device: its file in a new descriptor. */
static int qpip_sock_accept_device(struct qpip_sock *l, struct qpip_sock *sk,
				   struct qpip_sock_accept *a)
{
	struct sockaddr_storage ss;
	struct file *f;
	int ret;

	/* It is no longer the listener's: the listener may go before it. */
	qpip_sock_orphan(sk);
	qpip_sock_lock(sk);
	qpip_sock_sync(sk);
	qpip_sock_accepted_local(sk);
	qpip_sock_rehome(sk);
	ret = qpip_sock_accept_ksock(l, sk);
	if (!ret)
		qpip_sock_set_keepalive(sk);
	qpip_sock_unlock(sk);
	if (ret)
		goto err;
	f = qpip_sock_file(sk, a->flags & SOCK_NONBLOCK ? O_NONBLOCK : 0);
	if (IS_ERR(f)) {
		ret = PTR_ERR(f);
		goto err;
	}
	ret = qpip_sock_install(f, a->flags);	/* on failure the file's release ended it */
	if (ret < 0)
		return ret;
	a->fd = ret;
	a->qpip = 1;
	a->addr_len = qpip_sock_sockaddr(l->family, sk->peer_addr, sk->peer_port, &ss);
	memcpy(a->addr, &ss, a->addr_len);
	return 0;
err:
	qpip_sock_lock(sk);
	qpip_sock_destroy(sk);
	qpip_sock_unlock(sk);
	qpip_sock_put(sk);
	return ret;
}

/* A connection of @l's kernel socket (loopback, another interface): a socket file of its own. */
static int qpip_sock_accept_kernel(struct qpip_sock *l, struct socket *ns,
				   struct qpip_sock_accept *a)
{
	struct file *f;
	int ret;

	f = sock_alloc_file(ns, a->flags & SOCK_NONBLOCK ? O_NONBLOCK : 0, NULL);
	if (IS_ERR(f))
		return PTR_ERR(f);	/* sock_alloc_file released @ns */
	ret = qpip_sock_install(f, a->flags);
	if (ret < 0)
		return ret;
	a->fd = ret;
	a->qpip = 0;
	ret = kernel_getpeername(ns, (struct sockaddr *)a->addr);
	a->addr_len = ret > 0 ? ret : 0;
	return 0;
}

/*
 * Whether @l's family can take @sk's peer: the device listens on every address of the
 * port, so an AF_INET listener may be offered an IPv6 connection, and an IPv6-only one an
 * IPv4 connection, which its kernel socket would never have seen.
 */
static bool qpip_sock_family_ok(struct qpip_sock *l, struct qpip_sock *sk)
{
	bool ok;

	qpip_sock_lock(sk);
	qpip_sock_sync(sk);
	ok = qpip_sock_takes(l, sk->peer_addr);
	qpip_sock_unlock(sk);
	return ok;
}

static int qpip_sock_accept(struct file *filp, struct qpip_sock *l, struct qpip_sock_accept *a)
{
	DEFINE_WAIT_FUNC(wait, woken_wake_function);
	struct wait_queue_entry kwait;
	long timeo;
	struct qpip_sock *sk;
	struct socket *ns;
	int ret;

	if (a->flags & ~(SOCK_NONBLOCK | SOCK_CLOEXEC) || a->reserved)
		return -EINVAL;
	if (l->udp)
		return -EOPNOTSUPP;
	if (l->state != QPIP_SOCK_LISTENING)
		return -EINVAL;
	timeo = filp->f_flags & O_NONBLOCK ? 0 : sock_rcvtimeo(l->ksock->sk, false);
	init_waitqueue_func_entry(&kwait, qpip_accept_wake);
	kwait.private = &wait;
	add_wait_queue(&l->wait, &wait);
	add_wait_queue(sk_sleep(l->ksock->sk), &kwait);
	for (;;) {
		mutex_lock(&l->lock);
		qpip_sock_sync(l);
		sk = qpip_sock_take_ready(l);
		if (sk && !l->primary)
			qpip_sock_offer(l);	/* one taken: offer another */
		mutex_unlock(&l->lock);
		if (sk && l->primary) {
			/* A sibling's connections come from its primary's offers. */
			mutex_lock(&l->primary->lock);
			qpip_sock_offer(l->primary);
			mutex_unlock(&l->primary->lock);
		}
		if (sk && !qpip_sock_family_ok(l, sk)) {
			/* A peer the listener's family cannot name: reset, as Linux never sees it. */
			qpip_sock_lock(sk);
			qpip_sock_destroy(sk);
			qpip_sock_unlock(sk);
			qpip_sock_put(sk);
			continue;
		}
		if (sk) {
			ret = qpip_sock_accept_device(l, sk, a);
			break;
		}
		ret = kernel_accept(l->ksock, &ns, O_NONBLOCK);
		if (!ret) {
			ret = qpip_sock_accept_kernel(l, ns, a);
			break;
		}
		if (ret != -EAGAIN)
			break;
		if (!timeo)
			break;
		if (signal_pending(current)) {
			ret = sock_intr_errno(timeo);
			break;
		}
		timeo = wait_woken(&wait, TASK_INTERRUPTIBLE, timeo);
	}
	remove_wait_queue(sk_sleep(l->ksock->sk), &kwait);
	remove_wait_queue(&l->wait, &wait);
	return ret;
}

/* ---- send and receive with flags ---- */

/* What the data path acts on; TCP ignores the other flags, and so does a qpip socket. */
#define QPIP_SEND_FLAGS	(MSG_DONTWAIT | MSG_NOSIGNAL | MSG_MORE)
#define QPIP_RECV_FLAGS	(MSG_DONTWAIT | MSG_PEEK | MSG_WAITALL | MSG_TRUNC)

/*
 * What a UDP socket acts on: the same, the error queue (the kernel socket's), and no
 * MSG_MORE (each send is a datagram: corking is not carried).
 */
#define QPIP_UDP_SEND_FLAGS	(MSG_DONTWAIT | MSG_NOSIGNAL)
#define QPIP_UDP_RECV_FLAGS	(MSG_DONTWAIT | MSG_PEEK | MSG_TRUNC | MSG_ERRQUEUE)

/* send/recv with flags, and addresses, on a UDP socket (mutex held). */
static ssize_t qpip_udp_msg(struct qpip_sock *sk, struct iov_iter *it, struct qpip_sock_msg *a,
			    bool send, bool nonblock)
{
	struct sockaddr_storage ss = {};
	unsigned int mflags = 0;
	int len = 0;
	ssize_t ret;

	if (send) {
		if (a->addr_len > sizeof(ss) || a->addr_len > sizeof(a->addr))
			return -EINVAL;
		memcpy(&ss, a->addr, a->addr_len);
		return qpip_udp_send(sk, it, a->flags & QPIP_UDP_SEND_FLAGS, nonblock, &ss,
				     a->addr_len);
	}
	ret = qpip_udp_recv(sk, it, a->flags & QPIP_UDP_RECV_FLAGS, nonblock, &ss, &len,
			    &mflags);
	if (ret >= 0) {
		a->msg_flags = mflags;
		a->addr_len = min_t(u32, len, sizeof(a->addr));
		memcpy(a->addr, &ss, a->addr_len);
	}
	return ret;
}

static int qpip_sock_msg(struct file *filp, struct qpip_sock *sk, struct qpip_sock_msg *a,
			 bool send)
{
	struct iovec stack[UIO_FASTIOV], *iov = stack;
	bool nonblock = filp->f_flags & O_NONBLOCK;
	struct iov_iter it;
	ssize_t ret;

	if (a->reserved)
		return -EINVAL;
	/* No urgent data; no error queue (timestamps, zerocopy notices) to read. */
	if (a->flags & MSG_OOB)
		return -EOPNOTSUPP;
	if (!send && (a->flags & MSG_ERRQUEUE) && !sk->udp)
		return -EAGAIN;
	if (!sk->udp)
		a->flags &= send ? QPIP_SEND_FLAGS : QPIP_RECV_FLAGS;
	ret = import_iovec(send ? ITER_SOURCE : ITER_DEST, u64_to_user_ptr(a->iov), a->iov_len,
			   UIO_FASTIOV, &iov, &it);
	if (ret < 0)
		return ret;
	a->msg_flags = 0;
	qpip_sock_lock(sk);
	if (sk->udp)
		ret = qpip_udp_msg(sk, &it, a, send, nonblock);
	else if (send)
		ret = qpip_sock_send(sk, &it, a->flags, nonblock);
	else
		ret = qpip_sock_recv(sk, &it, a->flags, nonblock);
	qpip_sock_unlock(sk);
	kfree(iov);
	if (ret < 0)
		return ret;
	a->bytes = ret;
	/* TCP reports no source address (and ignores a destination). */
	if (!sk->udp && !send)
		a->addr_len = 0;
	return 0;
}

/* ---- names ---- */

static int qpip_sock_name(struct qpip_sock *sk, struct qpip_sock_name *a)
{
	struct sockaddr_storage ss;
	int ret;

	if (a->peer > 1 || a->reserved)
		return -EINVAL;
	if (sk->udp) {
		/* The kernel socket's: bound and connected as the program asked. */
		ret = a->peer ? kernel_getpeername(sk->ksock, (struct sockaddr *)&ss) :
		      kernel_getsockname(sk->ksock, (struct sockaddr *)&ss);
		if (ret < 0)
			return ret;
		a->addr_len = min_t(u32, ret, sizeof(a->addr));
		memcpy(a->addr, &ss, a->addr_len);
		return 0;
	}
	qpip_sock_lock(sk);
	qpip_sock_sync(sk);
	if (a->peer && sk->state != QPIP_SOCK_CONNECTED) {
		qpip_sock_unlock(sk);
		return -ENOTCONN;
	}
	if (a->peer)
		a->addr_len = qpip_sock_sockaddr(sk->family, sk->peer_addr, sk->peer_port, &ss);
	else
		a->addr_len = qpip_sock_sockaddr(sk->family, sk->local_addr, sk->local_port, &ss);
	qpip_sock_unlock(sk);
	memcpy(a->addr, &ss, a->addr_len);
	return 0;
}

/* ---- options ---- */

/* TCP_INFO of the device's connection: its state and what the driver knows. */
static void qpip_sock_tcp_info(struct qpip_sock *sk, struct tcp_info *ti)
{
	memset(ti, 0, sizeof(*ti));
	switch (sk->state) {
	case QPIP_SOCK_CONNECTING:
		ti->tcpi_state = TCP_SYN_SENT;
		break;
	case QPIP_SOCK_CONNECTED:
		ti->tcpi_state = sk->fin_sent ? TCP_FIN_WAIT1 :
				 sk->rx_eof ? TCP_CLOSE_WAIT : TCP_ESTABLISHED;
		break;
	case QPIP_SOCK_LISTENING:
		ti->tcpi_state = TCP_LISTEN;
		break;
	default:
		ti->tcpi_state = TCP_CLOSE;
	}
	ti->tcpi_snd_mss = 1440;
	ti->tcpi_rcv_mss = 1440;
	ti->tcpi_unacked = sk->sq_tail - sk->sq_head;
	ti->tcpi_snd_cwnd = 10;
	ti->tcpi_rcv_space = QPIP_SOCK_RX_SLOTS * PAGE_SIZE;
	ti->tcpi_notsent_bytes = sk->tx_tail - sk->tx_posted;
}

/* getsockopt that only the connection can answer: 1 if answered (@val, @len), else 0. */
static int qpip_sock_own_opt(struct qpip_sock *sk, int level, int name, void *val, u32 *len)
{
	int v;

	if (level == SOL_SOCKET && name == SO_ERROR) {
		qpip_sock_sync(sk);
		v = -sk->err;
		sk->err = 0;
	} else if (level == SOL_SOCKET && name == SO_RCVBUF) {
		v = QPIP_SOCK_RX_SLOTS * PAGE_SIZE;
	} else if (level == SOL_SOCKET && name == SO_SNDBUF) {
		v = QPIP_SOCK_TX_BYTES;
	} else if (level == SOL_TCP && name == TCP_INFO) {
		struct tcp_info ti;

		qpip_sock_sync(sk);
		qpip_sock_tcp_info(sk, &ti);
		*len = min_t(u32, *len, sizeof(ti));
		memcpy(val, &ti, *len);
		return 1;
	} else {
		return 0;
	}
	*len = min_t(u32, *len, sizeof(v));
	memcpy(val, &v, *len);
	return 1;
}

/*
 * @ulen is the caller's own optlen field (in its struct qpip_sock_opt): the protocols'
 * getsockopt takes the value and its length from user memory alike.
 */
static int qpip_sock_opt(struct qpip_sock *sk, struct qpip_sock_opt *a, u32 __user *ulen)
{
	void __user *uval = u64_to_user_ptr(a->optval);
	u8 val[sizeof(struct tcp_info)];
	u32 len;
	int ret;

	if (a->set > 1 || a->reserved)
		return -EINVAL;
	if (!sk->ksock)
		return -ENOPROTOOPT;
	if (a->set) {
		if (a->optlen > INT_MAX)
			return -EINVAL;
		/*
		 * A cork the library set in the shared page goes to the store first
		 * (qpip_fp_import_cork), so that this call's value is the last one.
		 */
		if (a->level == SOL_TCP && a->name == TCP_CORK && READ_ONCE(sk->shm)) {
			qpip_sock_lock(sk);
			qpip_sock_unlock(sk);
		}
		ret = do_sock_setsockopt(sk->ksock, false, a->level, a->name, USER_SOCKPTR(uval),
					 a->optlen);
		if (ret)
			return ret;
		/* What the connection takes from the store at once: the cork, keepalive. */
		qpip_sock_lock(sk);
		if (sk->state == QPIP_SOCK_CONNECTED && !sk->dead && !sk->udp) {
			if (a->level == SOL_TCP && (a->name == TCP_CORK || a->name == TCP_NODELAY))
				qpip_sock_tx_push(sk, false);
			qpip_sock_set_keepalive(sk);
		}
		qpip_sock_unlock(sk);
		return 0;
	}
	/* A UDP socket's options are all the kernel socket's, SO_ERROR too (its sends'). */
	qpip_sock_lock(sk);
	len = a->optlen;
	ret = sk->udp ? 0 : qpip_sock_own_opt(sk, a->level, a->name, val, &len);
	qpip_sock_unlock(sk);
	if (ret) {
		if (copy_to_user(uval, val, len))
			return -EFAULT;
		a->optlen = len;
		return 0;
	}
	ret = do_sock_getsockopt(sk->ksock, false, a->level, a->name, USER_SOCKPTR(uval),
				 USER_SOCKPTR(ulen));
	/* The length written back with the rest of the structure is the one it wrote. */
	if (!ret && get_user(len, ulen))
		ret = -EFAULT;
	if (!ret)
		a->optlen = len;
	return ret;
}

/* ---- shutdown ---- */

static int qpip_sock_shutdown(struct qpip_sock *sk, struct qpip_sock_shutdown *a)
{
	int ret = 0;

	if (a->how > SHUT_RDWR)
		return -EINVAL;
	if (sk->udp) {
		/* The kernel socket's answer (ENOTCONN unless connected), then ours. */
		ret = kernel_sock_shutdown(sk->ksock, a->how);
		if (ret)
			return ret;
		qpip_sock_lock(sk);
		sk->rd_shut |= a->how != SHUT_WR;
		sk->wr_shut |= a->how != SHUT_RD;
		qpip_sock_unlock(sk);
		wake_up_interruptible_all(&sk->wait);
		return 0;
	}
	qpip_sock_lock(sk);
	qpip_sock_sync(sk);
	if (sk->state != QPIP_SOCK_CONNECTED && sk->state != QPIP_SOCK_CLOSED) {
		ret = -ENOTCONN;
		goto out;
	}
	if (a->how != SHUT_WR)
		sk->rd_shut = true;
	if (a->how != SHUT_RD && !sk->wr_shut) {
		sk->wr_shut = true;
		if (sk->state == QPIP_SOCK_CONNECTED && !sk->dead)
			ret = qpip_sock_fin(sk);
	}
	wake_up_interruptible_all(&sk->wait);
out:
	qpip_sock_unlock(sk);
	return ret;
}

/* ---- the file's ioctls ---- */

/* Runs @fn on the size-versioned argument at @uarg of @size (first version @v1). */
static long qpip_sock_arg(struct file *filp, void __user *uarg, size_t size, u32 v1,
			  int (*fn)(struct file *filp, struct qpip_sock *sk, void *arg,
				    void __user *uarg))
{
	u8 karg[sizeof(struct qpip_sock_msg)] __aligned(8);
	int usize, ret;

	BUILD_BUG_ON(sizeof(struct qpip_sock_name) > sizeof(karg));
	BUILD_BUG_ON(sizeof(struct qpip_sock_accept) > sizeof(karg));
	BUILD_BUG_ON(sizeof(struct qpip_sock_peer) > sizeof(karg));
	if (WARN_ON_ONCE(size > sizeof(karg)))
		return -EINVAL;
	usize = qpip_get_arg(karg, size, v1, uarg);
	if (usize < 0)
		return usize;
	ret = fn(filp, filp->private_data, karg, uarg);
	if (!ret && copy_to_user(uarg, karg, min_t(size_t, size, usize)))
		ret = -EFAULT;
	return ret;
}

static int qpip_sock_do_accept(struct file *filp, struct qpip_sock *sk, void *arg,
			     void __user *uarg)
{
	return qpip_sock_accept(filp, sk, arg);
}

static int qpip_sock_do_send(struct file *filp, struct qpip_sock *sk, void *arg,
			     void __user *uarg)
{
	return qpip_sock_msg(filp, sk, arg, true);
}

static int qpip_sock_do_recv(struct file *filp, struct qpip_sock *sk, void *arg,
			     void __user *uarg)
{
	return qpip_sock_msg(filp, sk, arg, false);
}

static int qpip_sock_do_name(struct file *filp, struct qpip_sock *sk, void *arg,
			     void __user *uarg)
{
	return qpip_sock_name(sk, arg);
}

static int qpip_sock_do_opt(struct file *filp, struct qpip_sock *sk, void *arg,
			    void __user *uarg)
{
	return qpip_sock_opt(sk, arg, &((struct qpip_sock_opt __user *)uarg)->optlen);
}

static int qpip_sock_do_shutdown(struct file *filp, struct qpip_sock *sk, void *arg,
			     void __user *uarg)
{
	return qpip_sock_shutdown(sk, arg);
}

static int qpip_sock_do_peer(struct file *filp, struct qpip_sock *sk, void *arg,
			     void __user *uarg)
{
	return qpip_udp_peer(sk, arg);
}

static int qpip_sock_do_fastpath(struct file *filp, struct qpip_sock *sk, void *arg,
				 void __user *uarg)
{
	return qpip_sock_fastpath(sk, arg);
}

long qpip_sock_ioctl(struct file *filp, unsigned int cmd, unsigned long arg)
{
	struct qpip_sock *sk = filp->private_data;
	void __user *uarg = (void __user *)arg;
	int v;

	switch (cmd) {
	case QPIP_IOCTL_SOCK_ACCEPT:
		return qpip_sock_arg(filp, uarg, sizeof(struct qpip_sock_accept),
				     QPIP_SOCK_ACCEPT_SIZE_V1, qpip_sock_do_accept);
	case QPIP_IOCTL_SOCK_SEND:
		return qpip_sock_arg(filp, uarg, sizeof(struct qpip_sock_msg),
				     QPIP_SOCK_MSG_SIZE_V1, qpip_sock_do_send);
	case QPIP_IOCTL_SOCK_RECV:
		return qpip_sock_arg(filp, uarg, sizeof(struct qpip_sock_msg),
				     QPIP_SOCK_MSG_SIZE_V1, qpip_sock_do_recv);
	case QPIP_IOCTL_SOCK_NAME:
		return qpip_sock_arg(filp, uarg, sizeof(struct qpip_sock_name),
				     QPIP_SOCK_NAME_SIZE_V1, qpip_sock_do_name);
	case QPIP_IOCTL_SOCK_OPT:
		return qpip_sock_arg(filp, uarg, sizeof(struct qpip_sock_opt),
				     QPIP_SOCK_OPT_SIZE_V1, qpip_sock_do_opt);
	case QPIP_IOCTL_SOCK_SHUTDOWN:
		return qpip_sock_arg(filp, uarg, sizeof(struct qpip_sock_shutdown),
				     QPIP_SOCK_SHUTDOWN_SIZE_V1, qpip_sock_do_shutdown);
	case QPIP_IOCTL_SOCK_PEER:
		return qpip_sock_arg(filp, uarg, sizeof(struct qpip_sock_peer),
				     QPIP_SOCK_PEER_SIZE_V1, qpip_sock_do_peer);
	case QPIP_IOCTL_SOCK_FASTPATH:
		return qpip_sock_arg(filp, uarg, sizeof(struct qpip_sock_fastpath),
				     QPIP_SOCK_FASTPATH_SIZE_V1, qpip_sock_do_fastpath);
	case SIOCINQ:
	case SIOCOUTQ:
	case SIOCOUTQNSD:
		if (sk->state == QPIP_SOCK_LISTENING)
			return -EINVAL;
		if (sk->udp && cmd == SIOCINQ)
			return qpip_udp_inq(sk, uarg);
		qpip_sock_lock(sk);
		qpip_sock_reap(sk);
		/* A UDP socket posts each datagram as it is written: none is held back. */
		v = cmd == SIOCINQ ? sk->rx_avail :
		    cmd == SIOCOUTQ ? sk->tx_tail - sk->tx_head :
		    sk->udp ? 0 : sk->tx_tail - sk->tx_posted;
		qpip_sock_unlock(sk);
		return put_user(v, (int __user *)uarg);
	}
	return -ENOTTY;
}
