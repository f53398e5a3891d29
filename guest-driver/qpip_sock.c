// SPDX-License-Identifier: GPL-2.0
/*
 * qpip: qpip sockets — making one, its device objects, its events, poll, and its end.
 *
 * A connecting socket is made by IOCTL_SOCK_CONNECT from a program's unconnected kernel TCP
 * socket, once the guest kernel's route to the peer is found to go out through this
 * function's network interface: the kernel socket is bound (to an ephemeral port the kernel
 * chooses, if it was not), the socket's QP is bound to the same port and connects. A
 * listening one is made by IOCTL_SOCK_LISTEN: the kernel socket listens as the program
 * asked, the device listens on its port, and the listener keeps QPIP_SOCK_OFFERS idle
 * sockets offered to the device (ACCEPT), so a connection is established on one before the
 * program accepts it and poll can say so.
 *
 * Completions of the asynchronous commands (connect, accept, close) and the device's
 * events about a socket's QP (reset, timed out, peer closed) come in the admin queue's
 * interrupt, where the socket's mutex cannot be taken: they leave their result in the
 * socket under @qlock, set a bit of @flags_ev and wake its waiters, and whoever next holds
 * the mutex applies them (qpip_sock_sync). A command holds a reference on its socket until
 * it completes, which it always does, also when the admin queue stops.
 *
 * The end: release of the file closes the connection gracefully (CLOSE: a FIN after every
 * byte written) and hands the socket to its close work, which waits until the peer has
 * acknowledged every byte (as a kernel socket's data outlives close) — at most
 * QPIP_SOCK_LINGER_MS — and then destroys the QP (the device finishes the FIN exchange on
 * its own), the CQ and the region, and frees the buffers. SO_LINGER with a zero time
 * resets the connection at once, as for a kernel socket.
 */
#include <linux/anon_inodes.h>
#include <linux/file.h>
#include <linux/in.h>
#include <linux/in6.h>
#include <linux/inetdevice.h>
#include <linux/netdevice.h>
#include <linux/seq_file.h>
#include <linux/slab.h>
#include <linux/tcp.h>
#include <linux/vmalloc.h>
#include <net/addrconf.h>
#include <net/inet_hashtables.h>
#include <net/inet_sock.h>
#include <net/ip6_route.h>
#include <net/ipv6.h>
#include <net/route.h>
#include <net/sock.h>
#include <net/tcp.h>

#include "qpip_netdev.h"
#include "qpip_sock.h"

/* Keys of ctx->socks: a QP's handle, or a listener's with this bit. */
#define QPIP_SOCK_LISTENER_KEY	BIT(31)

/* ---- life ---- */

static void qpip_sock_free_work(struct work_struct *work);
static void qpip_sock_offer_work(struct work_struct *work);

struct qpip_sock *qpip_sock_alloc(struct qpip_ctx *ctx, struct file *ctx_file, int family)
{
	struct qpip_sock *sk = kzalloc(sizeof(*sk), GFP_KERNEL);

	if (!sk)
		return NULL;
	kref_init(&sk->ref);
	sk->ctx = ctx;
	sk->ctx_file = get_file(ctx_file);
	sk->family = family;
	mutex_init(&sk->lock);
	spin_lock_init(&sk->qlock);
	init_waitqueue_head(&sk->wait);
	INIT_LIST_HEAD(&sk->ready);
	INIT_LIST_HEAD(&sk->offers);
	INIT_LIST_HEAD(&sk->node);
	INIT_DELAYED_WORK(&sk->close_work, qpip_sock_close_work);
	INIT_WORK(&sk->free_work, qpip_sock_free_work);
	INIT_DELAYED_WORK(&sk->offer_work, qpip_sock_offer_work);
	return sk;
}

/*
 * The last reference is gone: give back the files and the kernel socket. In a work item:
 * the last reference may be a command's, dropped in the admin queue's interrupt, and
 * releasing a kernel socket sleeps.
 */
static void qpip_sock_free_work(struct work_struct *work)
{
	struct qpip_sock *sk = container_of(work, struct qpip_sock, free_work);

	/* Every path that ends a socket destroyed its objects first (qpip_sock_destroy). */
	WARN_ON_ONCE(sk->qp || sk->cq || sk->bufs);
	if (sk->ksock_file)
		fput(sk->ksock_file);
	else if (sk->ksock)
		sock_release(sk->ksock);
	qpip_sock_orphan(sk);
	qpip_fp_free(sk);
	fput(sk->ctx_file);
	mutex_destroy(&sk->lock);
	kfree(sk);
}

static void qpip_sock_release_ref(struct kref *ref)
{
	struct qpip_sock *sk = container_of(ref, struct qpip_sock, ref);

	schedule_work(&sk->free_work);
}

/* @sk leaves the listener it was offered for, which no longer has to outlive it. */
void qpip_sock_orphan(struct qpip_sock *sk)
{
	struct qpip_sock *l = sk->parent;

	sk->parent = NULL;
	if (l)
		qpip_sock_put(l);
}

/* May be called in any context: the last reference frees only memory and files. */
void qpip_sock_put(struct qpip_sock *sk)
{
	kref_put(&sk->ref, qpip_sock_release_ref);
}

/*
 * Enters the device for @sk: true with qdev->lock held for reading if the device still
 * has the socket's context, false (nothing held) if it was reset or removed under it.
 */
bool qpip_sock_device(struct qpip_sock *sk)
{
	struct qpip_dev *qdev = sk->ctx->qdev;

	down_read(&qdev->lock);
	if (!qpip_ctx_dead(sk->ctx))
		return true;
	up_read(&qdev->lock);
	return false;
}

void qpip_sock_device_end(struct qpip_sock *sk)
{
	up_read(&sk->ctx->qdev->lock);
}

/* ---- the device's objects ---- */

static int qpip_sock_key(struct qpip_sock *sk, u32 *key)
{
	if (sk->qp)
		*key = sk->qp->handle;
	else if (sk->state == QPIP_SOCK_LISTENING)
		*key = sk->listener | QPIP_SOCK_LISTENER_KEY;
	else
		return -ENOENT;
	return 0;
}

/* @sk receives the device's events about its QP (and is woken at a reset) from now on. */
static int qpip_sock_publish(struct qpip_sock *sk)
{
	u32 key;
	int ret = qpip_sock_key(sk, &key);

	if (ret)
		return ret;
	return xa_insert_irq(&sk->ctx->socks, key, sk, GFP_KERNEL);
}

/* No event reaches @sk after this: the event path looks it up under qdev->ctx_lock. */
static void qpip_sock_unpublish(struct qpip_sock *sk)
{
	struct qpip_dev *qdev = sk->ctx->qdev;
	unsigned long flags;
	u32 key;

	if (qpip_sock_key(sk, &key))
		return;
	/* Interrupts are off already: xa_erase_irq would turn them on under ctx_lock. */
	spin_lock_irqsave(&qdev->ctx_lock, flags);
	xa_lock(&sk->ctx->socks);
	if (xa_load(&sk->ctx->socks, key) == sk)
		__xa_erase(&sk->ctx->socks, key);
	xa_unlock(&sk->ctx->socks);
	spin_unlock_irqrestore(&qdev->ctx_lock, flags);
}

/*
 * The socket's buffers, CQ, region and QP, made in the device (IDLE afterwards). On failure
 * whatever was made is destroyed again by qpip_sock_destroy, which the caller runs.
 */
int qpip_sock_objects(struct qpip_sock *sk)
{
	struct qpip_ctx *ctx = sk->ctx;
	struct qpip_dev *qdev = ctx->qdev;
	/* A UDP socket's slots hold a datagram each; a TCP socket's a page of the stream. */
	u32 sq_depth = sk->udp ? QPIP_UDP_SQ_DEPTH : QPIP_SOCK_SQ_DEPTH;
	u32 rx_slots = sk->udp ? QPIP_UDP_RX_SLOTS : QPIP_SOCK_RX_SLOTS;
	u32 cq_depth = roundup_pow_of_two(sq_depth + rx_slots);
	size_t bytes = sk->udp ? QPIP_UDP_RX_SLOTS * QPIP_UDP_SLOT_BYTES + QPIP_UDP_TX_BYTES :
		       QPIP_SOCK_RX_SLOTS * PAGE_SIZE + QPIP_SOCK_TX_BYTES;
	struct qpip_mr_params mp = {};
	struct qpip_qp_params qp = {};
	struct qpip_cq_params cp = {};
	struct qpip_cq_result cres;
	struct qpip_qp_result qres;
	struct qpip_mr_result mres;
	struct qpip_vector *vec;
	int ret;

	if (cq_depth > qdev->info.max_queue_depth)
		return -EINVAL;
	vec = qpip_pick_vector(qdev, QPIP_ANY_VECTOR);
	if (IS_ERR(vec))
		return PTR_ERR(vec);

	/* The buffers: locked memory of the process, as a ring is. */
	sk->bufs = qpip_ring_alloc(ctx, bytes);
	if (IS_ERR(sk->bufs)) {
		ret = PTR_ERR(sk->bufs);
		sk->bufs = NULL;
		return ret;
	}
	sk->va = vmap(sk->bufs->pages, sk->bufs->npages, VM_MAP, PAGE_KERNEL);
	if (!sk->va)
		return -ENOMEM;

	sk->cq = kzalloc(sizeof(*sk->cq), GFP_KERNEL);
	if (!sk->cq)
		return -ENOMEM;
	ret = qpip_quota_charge(ctx, QPIP_QUOTA_CQS, 1);
	if (ret) {
		kfree(sk->cq);
		sk->cq = NULL;
		return ret;
	}
	sk->cq->user = ctx->user;
	sk->cq->wake = &sk->wait;
	sk->cq->ring = qpip_ring_alloc(ctx, (size_t)cq_depth * QPIP_CQE_SIZE);
	if (IS_ERR(sk->cq->ring)) {
		ret = PTR_ERR(sk->cq->ring);
		sk->cq->ring = NULL;
		return ret;
	}
	sk->cq_depth = cq_depth;

	sk->qp = kzalloc(sizeof(*sk->qp), GFP_KERNEL);
	if (!sk->qp)
		return -ENOMEM;
	ret = qpip_quota_charge(ctx, QPIP_QUOTA_QPS, 1);
	if (ret) {
		kfree(sk->qp);
		sk->qp = NULL;
		return ret;
	}
	sk->qp->user = ctx->user;
	sk->qp->type = sk->udp ? QPIP_QP_TYPE_UDP : QPIP_QP_TYPE_TCP;
	sk->qp->sq = qpip_ring_alloc(ctx, (size_t)sq_depth * QPIP_WQE_SIZE);
	if (IS_ERR(sk->qp->sq)) {
		ret = PTR_ERR(sk->qp->sq);
		sk->qp->sq = NULL;
		return ret;
	}
	sk->qp->rq = qpip_ring_alloc(ctx, (size_t)rx_slots * QPIP_WQE_SIZE);
	if (IS_ERR(sk->qp->rq)) {
		ret = PTR_ERR(sk->qp->rq);
		sk->qp->rq = NULL;
		return ret;
	}

	if (!qpip_sock_device(sk))
		return -ENODEV;
	mp.pages = sk->bufs->dma;
	mp.npages = sk->bufs->npages;
	mp.iova = QPIP_SOCK_IOVA;
	mp.length = bytes;
	mp.access = QPIP_MR_ACCESS_LOCAL_WRITE;
	ret = qpip_cmd_reg_mr(qdev, ctx->id, &mp, &mres);
	if (ret)
		goto out;
	sk->lkey = mres.lkey;

	cp.ring.pages = sk->cq->ring->dma;
	cp.ring.npages = sk->cq->ring->npages;
	cp.ring.depth = cq_depth;
	cp.vector = vec->index;
	ret = qpip_cmd_create_cq(qdev, ctx->id, &cp, &cres);
	if (ret)
		goto out;
	sk->cq->handle = cres.handle;
	sk->cq->slot = cres.db_slot;
	sk->cq_made = true;
	qpip_vector_add(ctx, vec, sk->cq, cq_depth);

	qp.sq.pages = sk->qp->sq->dma;
	qp.sq.npages = sk->qp->sq->npages;
	qp.sq.depth = sq_depth;
	qp.rq.pages = sk->qp->rq->dma;
	qp.rq.npages = sk->qp->rq->npages;
	qp.rq.depth = rx_slots;
	qp.send_cq = sk->cq->handle;
	qp.recv_cq = sk->cq->handle;
	qp.qp_type = sk->qp->type;
	qp.framing = sk->udp ? 0 : QPIP_FRAMING_STREAM;
	ret = qpip_cmd_create_qp(qdev, ctx->id, &qp, &qres);
	if (ret)
		goto out;
	sk->qp->handle = qres.handle;
	sk->qp_slot = qres.db_slot;
	sk->qp_made = true;
out:
	qpip_sock_device_end(sk);
	if (!ret)
		ret = qpip_sock_publish(sk);
	if (!ret)
		ret = sk->udp ? qpip_udp_io_init(sk) : qpip_sock_io_init(sk);
	return ret;
}

/*
 * Destroys @sk's objects in the device (the device then no longer touches its memory) and
 * frees them; idempotent. Process context. A device that did not answer keeps the memory
 * it may still write: better leaked than reused.
 */
void qpip_sock_destroy(struct qpip_sock *sk)
{
	struct qpip_ctx *ctx = sk->ctx;
	struct qpip_dev *qdev = ctx->qdev;
	bool leak = false;
	int ret;

	qpip_sock_unpublish(sk);
	if (qpip_sock_device(sk)) {
		if (sk->qp_made) {
			ret = qpip_cmd_destroy(qdev, ctx->id, QPIP_OBJ_QP, sk->qp->handle);
			leak |= ret == -ETIMEDOUT;
		}
		if (sk->cq_made) {
			ret = qpip_cmd_destroy(qdev, ctx->id, QPIP_OBJ_CQ, sk->cq->handle);
			leak |= ret == -ETIMEDOUT;
		}
		if (sk->lkey) {
			ret = qpip_cmd_destroy(qdev, ctx->id, QPIP_OBJ_MR, sk->lkey);
			leak |= ret == -ETIMEDOUT;
		}
		if (sk->state == QPIP_SOCK_LISTENING && sk->listener_made)
			qpip_cmd_destroy(qdev, ctx->id, QPIP_OBJ_LISTENER, sk->listener);
		qpip_sock_device_end(sk);
	}
	if (leak)
		dev_err(&qdev->pdev->dev, "a qpip socket's objects were not destroyed in the device; keeping their memory\n");
	if (sk->listener_made) {
		qpip_quota_uncharge(ctx->user, QPIP_QUOTA_LISTENERS, 1);
		sk->listener_made = false;
	}
	sk->qp_made = false;
	sk->cq_made = false;
	sk->lkey = 0;
	if (sk->qp) {
		qpip_qp_free(ctx, sk->qp, leak);
		sk->qp = NULL;
	}
	if (sk->cq) {
		qpip_cq_free(ctx, sk->cq, leak);
		sk->cq = NULL;
	}
	if (sk->va) {
		vunmap(sk->va);
		sk->va = NULL;
	}
	if (sk->bufs) {
		qpip_ring_put(ctx, sk->bufs, leak);
		sk->bufs = NULL;
	}
}

/*
 * An accepted connection's rings and buffers charged to the process that accepts it (mutex
 * held): whoever made the offer (the listener's maker, another worker), the connection is
 * the accepting process's, which may then map it (qpip_sock_fp.c).
 */
void qpip_sock_rehome(struct qpip_sock *sk)
{
	qpip_ring_rehome(sk->bufs);
	if (sk->cq)
		qpip_ring_rehome(sk->cq->ring);
	if (sk->qp) {
		qpip_ring_rehome(sk->qp->sq);
		qpip_ring_rehome(sk->qp->rq);
	}
}

/* ---- events ---- */

/* Records event @bit of @sk (any context) and wakes whoever waits on it. */
static void qpip_sock_note(struct qpip_sock *sk, unsigned int bit)
{
	set_bit(bit, &sk->flags_ev);
	wake_up_interruptible_all(&sk->wait);
}

/*
 * Applies what the interrupt-time paths recorded (mutex held): connection results, the
 * peer's close, errors. Returns whether anything changed.
 */
bool qpip_sock_sync(struct qpip_sock *sk)
{
	unsigned long flags;
	bool changed = false;

	if (!READ_ONCE(sk->flags_ev))
		return false;
	spin_lock_irqsave(&sk->qlock, flags);
	if (test_and_clear_bit(QPIP_SOCK_EV_CONNECTED, &sk->flags_ev)) {
		changed = true;
		if (sk->cb_status) {
			sk->state = QPIP_SOCK_CLOSED;
			if (!sk->err)
				sk->err = sk->cb_status;
		} else if (sk->state == QPIP_SOCK_CONNECTING || sk->state == QPIP_SOCK_IDLE) {
			sk->state = QPIP_SOCK_CONNECTED;
			memcpy(sk->peer_addr, sk->cb_peer, sizeof(sk->peer_addr));
			sk->peer_port = sk->cb_peer_port;
		}
	}
	/*
	 * While connecting, the QP's error is the connection's failure, which the CONNECT's
	 * completion reports with its reason (refused, timed out): that one says it.
	 */
	if (sk->state != QPIP_SOCK_CONNECTING &&
	    test_and_clear_bit(QPIP_SOCK_EV_ERROR, &sk->flags_ev)) {
		changed = true;
		if (!sk->err)
			sk->err = sk->async_status;
		sk->state = QPIP_SOCK_CLOSED;
	}
	if (test_and_clear_bit(QPIP_SOCK_EV_PEER_CLOSED, &sk->flags_ev)) {
		changed = true;
		sk->peer_closed = true;
	}
	if (test_and_clear_bit(QPIP_SOCK_EV_DEAD, &sk->flags_ev)) {
		changed = true;
		sk->dead = true;
		if (sk->state != QPIP_SOCK_LISTENING)
			sk->state = QPIP_SOCK_CLOSED;
		if (!sk->err)
			sk->err = -ECONNRESET;
	}
	clear_bit(QPIP_SOCK_EV_CLOSE_DONE, &sk->flags_ev);
	spin_unlock_irqrestore(&sk->qlock, flags);
	return changed;
}

/*
 * An asynchronous event of the device about QP @qp of @ctx (qdev->ctx_lock held, maybe in
 * the interrupt handler): ASYNC_EVENT_QP_ERROR with @status, or PEER_CLOSED. Returns
 * whether a socket took it (the context's readers then never see it).
 */
bool qpip_sock_async_event(struct qpip_ctx *ctx, u32 qp, u16 kind, int status)
{
	struct qpip_sock *sk = xa_load(&ctx->socks, qp);
	unsigned long flags;

	if (!sk || qp & QPIP_SOCK_LISTENER_KEY)
		return false;
	if (kind == QPIP_ASYNC_EVENT_PEER_CLOSED) {
		qpip_sock_note(sk, QPIP_SOCK_EV_PEER_CLOSED);
	} else {
		spin_lock_irqsave(&sk->qlock, flags);
		sk->async_status = status;
		spin_unlock_irqrestore(&sk->qlock, flags);
		qpip_sock_note(sk, QPIP_SOCK_EV_ERROR);
	}
	return true;
}

/*
 * The device was reset or is being removed (qdev->lock held for writing): every socket of
 * @ctx is gone in the device. Their waiters wake and find the connection reset.
 */
void qpip_sock_revoke(struct qpip_ctx *ctx)
{
	struct qpip_sock *sk;
	unsigned long idx;

	xa_lock_irq(&ctx->socks);
	xa_for_each(&ctx->socks, idx, sk)
		qpip_sock_note(sk, QPIP_SOCK_EV_DEAD);
	xa_unlock_irq(&ctx->socks);
}

/* ---- asynchronous commands ---- */

/* A command of @sk whose completion @done handles; it holds a reference on @sk. */
static struct qpip_cmd *qpip_sock_cmd(struct qpip_sock *sk, u32 kind,
				      void (*done)(struct qpip_cmd *c))
{
	struct qpip_cmd *c = kzalloc(sizeof(*c), GFP_KERNEL);

	if (!c)
		return NULL;
	c->ctx = sk->ctx;
	c->event.kind = kind;
	c->event.qp = sk->qp ? sk->qp->handle : 0;
	c->sock_done = done;
	c->owner = sk;
	kref_get(&sk->ref);
	return c;
}

/* @c was not submitted (@ret): it is ours to free, with its reference. */
static int qpip_sock_cmd_failed(struct qpip_cmd *c, int ret)
{
	struct qpip_sock *sk = c->owner;

	kfree(c);
	qpip_sock_put(sk);
	return ret;
}

/* CONNECT completed (admin lock held, maybe in the interrupt handler). */
static void qpip_sock_connect_done(struct qpip_cmd *c)
{
	struct qpip_sock *sk = c->owner;
	unsigned long flags;

	spin_lock_irqsave(&sk->qlock, flags);
	sk->cb_status = c->event.status;
	memcpy(sk->cb_peer, c->event.peer_addr, sizeof(sk->cb_peer));
	sk->cb_peer_port = c->event.peer_port;
	spin_unlock_irqrestore(&sk->qlock, flags);
	qpip_sock_note(sk, QPIP_SOCK_EV_CONNECTED);
	kfree(c);
	qpip_sock_put(sk);
}

/*
 * An offered socket's ACCEPT completed (admin lock held, maybe in the interrupt handler):
 * a connection for the listener to hand out, or the end of the offer (the listener was
 * destroyed, the device reset), after which the socket is destroyed by its close work.
 */
static void qpip_sock_accept_done(struct qpip_cmd *c)
{
	struct qpip_sock *sk = c->owner, *l = sk->parent, *to = NULL, *s;
	unsigned long flags;

	spin_lock_irqsave(&l->qlock, flags);
	list_del_init(&sk->node);
	l->noffers--;
	if (!c->event.status && !l->closing) {
		memcpy(sk->cb_peer, c->event.peer_addr, sizeof(sk->cb_peer));
		sk->cb_peer_port = c->event.peer_port;
		set_bit(QPIP_SOCK_EV_CONNECTED, &sk->flags_ev);
		/* The sibling's family goes to the sibling (who unlinks under our lock). */
		to = l;
		s = l->sibling;
		if (s && !qpip_sock_takes(l, sk->cb_peer) && qpip_sock_takes(s, sk->cb_peer)) {
			spin_lock_nested(&s->qlock, SINGLE_DEPTH_NESTING);
			if (!s->closing) {
				list_add_tail(&sk->node, &s->ready);
				to = s;
			}
			spin_unlock(&s->qlock);
		}
		if (to == l)
			list_add_tail(&sk->node, &l->ready);
	}
	spin_unlock_irqrestore(&l->qlock, flags);
	if (to) {
		qpip_sock_note(to, QPIP_SOCK_EV_ACCEPT);
	} else {
		/* The offer's reference goes to the close work, which destroys it. */
		sk->close_deadline = jiffies;
		queue_delayed_work(system_wq, &sk->close_work, 0);
		wake_up_interruptible_all(&l->wait);
	}
	kfree(c);
	qpip_sock_put(sk);
}

/*
 * Whether listener @l can take a connection from @peer (any context: reads only what is
 * set before the listener is): an AF_INET one only IPv4 peers, an IPv6-only one only
 * IPv6 peers. The device listens on every address of the port, for both families.
 */
bool qpip_sock_takes(struct qpip_sock *l, const u8 *peer)
{
	bool v4 = ipv6_addr_v4mapped((const struct in6_addr *)peer);

	if (l->family == AF_INET)
		return v4;
	return !v4 || !l->v6only;
}

/* CLOSE completed: nothing waits for it (the close work waits for the sends). */
static void qpip_sock_close_done(struct qpip_cmd *c)
{
	struct qpip_sock *sk = c->owner;

	qpip_sock_note(sk, QPIP_SOCK_EV_CLOSE_DONE);
	kfree(c);
	qpip_sock_put(sk);
}

/* Gives the device CLOSE for @sk's connection (mutex held): a FIN after every byte. */
int qpip_sock_fin(struct qpip_sock *sk)
{
	struct qpip_cmd *c;
	int ret;

	if (sk->fin_sent || sk->state != QPIP_SOCK_CONNECTED)
		return 0;
	ret = qpip_sock_tx_push(sk, true);
	if (ret)
		return ret;
	c = qpip_sock_cmd(sk, QPIP_EVENT_CLOSE, qpip_sock_close_done);
	if (!c)
		return -ENOMEM;
	if (!qpip_sock_device(sk))
		return qpip_sock_cmd_failed(c, -ECONNRESET);
	ret = qpip_cmd_close(sk->ctx->qdev, c, sk->ctx->id, sk->qp->handle);
	qpip_sock_device_end(sk);
	if (ret)
		return qpip_sock_cmd_failed(c, ret);
	sk->fin_sent = true;
	return 0;
}

/* ---- waiting ---- */

/*
 * Waits (mutex held, released while asleep) until @ready(sk), an error, or *@timeo runs
 * out: 0, -EAGAIN at the timeout (*@timeo 0), -ERESTARTSYS on a signal. Arms the CQ before
 * sleeping, so a completion wakes it.
 */
int qpip_sock_wait(struct qpip_sock *sk, bool (*ready)(struct qpip_sock *sk), long *timeo)
{
	DEFINE_WAIT_FUNC(wait, woken_wake_function);
	int ret = 0;

	add_wait_queue(&sk->wait, &wait);
	for (;;) {
		qpip_sock_sync(sk);
		qpip_sock_reap(sk);
		if (ready(sk) || sk->err || sk->dead)
			break;
		if (!*timeo) {
			/*
			 * Not ready and not waiting: the caller comes back when poll says so,
			 * and an edge-triggered epoll learns it only from a wake-up, so the
			 * next completion must interrupt.
			 */
			qpip_sock_arm(sk);
			qpip_sock_reap(sk);
			if (ready(sk))
				continue;
			ret = -EAGAIN;
			break;
		}
		if (signal_pending(current)) {
			ret = sock_intr_errno(*timeo);
			break;
		}
		qpip_sock_arm(sk);
		/* A completion written before the arm was seen raises no interrupt. */
		qpip_sock_reap(sk);
		if (ready(sk) || qpip_sock_sync(sk))
			continue;
		qpip_sock_unlock(sk);
		*timeo = wait_woken(&wait, TASK_INTERRUPTIBLE, *timeo);
		qpip_sock_lock(sk);
	}
	remove_wait_queue(&sk->wait, &wait);
	return ret;
}

/* ---- the file ---- */

static __poll_t qpip_sock_poll(struct file *filp, struct poll_table_struct *pt)
{
	struct qpip_sock *sk = filp->private_data;
	__poll_t mask = 0;

	poll_wait(filp, &sk->wait, pt);
	if (sk->udp)
		return qpip_udp_poll(sk, filp, pt);
	if (sk->state == QPIP_SOCK_LISTENING) {
		/* The kernel socket's connections too: its queue wakes this poll as well. */
		mask = vfs_poll(sk->ksock_file, pt) & (EPOLLIN | EPOLLRDNORM);
		qpip_sock_lock(sk);
		qpip_sock_sync(sk);
		if (!list_empty_careful(&sk->ready))
			mask |= EPOLLIN | EPOLLRDNORM;
		if (sk->dead)
			mask |= EPOLLERR;
		qpip_sock_unlock(sk);
		return mask;
	}
	qpip_sock_lock(sk);
	qpip_sock_sync(sk);
	qpip_sock_reap(sk);
	mask = qpip_sock_data_mask(sk);
	/* poll_wait put the caller on the queue: the next completion must wake it. */
	qpip_sock_rearm(sk);
	qpip_sock_unlock(sk);
	return mask;
}

/* Ends a connected socket whose file is gone: gracefully, unless SO_LINGER says reset. */
static void qpip_sock_close(struct qpip_sock *sk)
{
	struct sock *ksk = sk->ksock ? sk->ksock->sk : NULL;
	bool reset = ksk && sock_flag(ksk, SOCK_LINGER) && !ksk->sk_lingertime;

	qpip_sock_sync(sk);
	if (sk->state != QPIP_SOCK_CONNECTED || sk->dead || sk->err || reset) {
		qpip_sock_destroy(sk);
		return;
	}
	sk->rd_shut = true;
	if (sk->udp) {
		/* Datagrams written before close still go out, as a kernel socket's do. */
		qpip_sock_reap(sk);
		if (qpip_sock_tx_idle(sk)) {
			qpip_sock_destroy(sk);
			return;
		}
	} else if (qpip_sock_fin(sk)) {
		qpip_sock_destroy(sk);
		return;
	}
	/* The close work holds the file's reference now. */
	sk->close_deadline = jiffies + msecs_to_jiffies(sk->udp ? QPIP_UDP_LINGER_MS :
							  QPIP_SOCK_LINGER_MS);
	sk->close_poll_ms = 1;
	kref_get(&sk->ref);
	queue_delayed_work(system_wq, &sk->close_work, 0);
}

/*
 * A closed socket's last work: once every byte sent was acknowledged (or the connection
 * failed, or the time is up), destroy it. Polls its CQ with a growing interval: closing
 * sockets are few and short-lived, and an interrupt per ACK would buy nothing.
 */
void qpip_sock_close_work(struct work_struct *work)
{
	struct qpip_sock *sk = container_of(to_delayed_work(work), struct qpip_sock, close_work);
	bool done;

	qpip_sock_lock(sk);
	qpip_sock_sync(sk);
	if (sk->qp_made && !sk->dead)
		qpip_sock_reap(sk);
	done = !sk->qp_made || sk->dead || sk->err || qpip_sock_tx_idle(sk) ||
	       time_after_eq(jiffies, sk->close_deadline);
	if (done)
		qpip_sock_destroy(sk);
	qpip_sock_unlock(sk);
	if (done) {
		qpip_sock_put(sk);
		return;
	}
	sk->close_poll_ms = min(sk->close_poll_ms * 2, 200U);
	queue_delayed_work(system_wq, &sk->close_work, msecs_to_jiffies(sk->close_poll_ms));
}

/* A listener whose file is gone: no more offers; the connections not accepted are reset. */
static void qpip_sock_close_listener(struct qpip_sock *l)
{
	struct qpip_sock *sk, *tmp;
	unsigned long flags;
	LIST_HEAD(ready);

	if (l->primary) {
		/* No more connections come our way once the primary's lock is let go. */
		spin_lock_irqsave(&l->primary->qlock, flags);
		l->primary->sibling = NULL;
		spin_unlock_irqrestore(&l->primary->qlock, flags);
	}
	spin_lock_irqsave(&l->qlock, flags);
	l->closing = true;
	list_splice_init(&l->ready, &ready);
	spin_unlock_irqrestore(&l->qlock, flags);
	if (cancel_delayed_work_sync(&l->offer_work))
		qpip_sock_put(l);
	/* Destroying the listener cancels the offers: each ends in qpip_sock_accept_done. */
	qpip_sock_destroy(l);
	/*
	 * The port is free again at once, as when a kernel socket stops listening (a server
	 * restarting on it must not find it taken): the offers still ending need none of it.
	 */
	if (l->ksock_file) {
		fput(l->ksock_file);
		l->ksock_file = NULL;
		l->ksock = NULL;
	}
	list_for_each_entry_safe(sk, tmp, &ready, node) {
		list_del_init(&sk->node);
		qpip_sock_lock(sk);
		qpip_sock_destroy(sk);
		qpip_sock_unlock(sk);
		qpip_sock_put(sk);
	}
	if (l->primary) {
		qpip_sock_put(l->primary);
		l->primary = NULL;
	}
}

static int qpip_sock_release(struct inode *inode, struct file *filp)
{
	struct qpip_sock *sk = filp->private_data;

	qpip_sock_lock(sk);
	if (sk->state == QPIP_SOCK_LISTENING) {
		qpip_sock_unlock(sk);
		qpip_sock_close_listener(sk);
	} else {
		qpip_sock_close(sk);
		qpip_sock_unlock(sk);
	}
	qpip_sock_put(sk);
	return 0;
}

/*
 * /proc/PID/fdinfo/FD: the socket's state as the driver sees it — what an administrator
 * (or a bug report) needs to tell a stalled connection from an idle one.
 */
static void qpip_sock_show_fdinfo(struct seq_file *m, struct file *filp)
{
	static const char *const states[] = { "idle", "connecting", "connected", "listening",
					      "closed" };
	struct qpip_sock *sk = filp->private_data;

	qpip_sock_lock(sk);
	seq_printf(m, "qpip-state:\t%s\nqpip-err:\t%d\n", states[sk->state], sk->err);
	if (sk->udp && sk->qp) {
		seq_printf(m, "qpip-udp:\tqp %u cq %u head %u peer-dev %d\n", sk->qp->handle,
			   sk->cq->handle, sk->cq_head, sk->peer_dev);
		seq_printf(m, "qpip-rx:\tposted %u done %u read %u datagrams %u\n", sk->rq_tail,
			   sk->rx_done, sk->rx_read, sk->rx_dgrams);
		seq_printf(m, "qpip-tx:\thead %u tail %u sq %u/%u\n", sk->tx_head, sk->tx_tail,
			   sk->sq_head, sk->sq_tail);
	} else if (sk->state == QPIP_SOCK_LISTENING) {
		struct qpip_sock *r;
		unsigned long flags;
		unsigned int ready = 0;

		spin_lock_irqsave(&sk->qlock, flags);
		list_for_each_entry(r, &sk->ready, node)
			ready++;
		spin_unlock_irqrestore(&sk->qlock, flags);
		seq_printf(m, "qpip-listener:\t%u%s\nqpip-offers:\t%u\nqpip-ready:\t%u\n",
			   sk->listener, sk->primary ? " (shared)" : "", READ_ONCE(sk->noffers),
			   ready);
	} else if (sk->qp) {
		seq_printf(m, "qpip-qp:\t%u\nqpip-cq:\t%u head %u arm %u\n", sk->qp->handle,
			   sk->cq->handle, sk->cq_head, sk->cq_arm_seq);
		seq_printf(m, "qpip-rx:\tposted %u done %u read %u avail %u eof %d peer-closed %d\n",
			   sk->rq_tail, sk->rx_done, sk->rx_read, sk->rx_avail, sk->rx_eof,
			   sk->peer_closed);
		seq_printf(m, "qpip-tx:\thead %u posted %u tail %u sq %u/%u fin %d\n",
			   sk->tx_head, sk->tx_posted, sk->tx_tail, sk->sq_head, sk->sq_tail,
			   sk->fin_sent);
	}
	seq_printf(m, "qpip-events:\t%#lx\n", READ_ONCE(sk->flags_ev));
	qpip_sock_unlock(sk);
}

const struct file_operations qpip_sock_fops = {
	.show_fdinfo = qpip_sock_show_fdinfo,
	.owner = THIS_MODULE,
	.release = qpip_sock_release,
	.read_iter = qpip_sock_read_iter,
	.write_iter = qpip_sock_write_iter,
	.poll = qpip_sock_poll,
	.mmap = qpip_sock_mmap,
	.unlocked_ioctl = qpip_sock_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.splice_write = iter_file_splice_write,
	.splice_read = copy_splice_read,
};

/*
 * @sk's file, holding the file's reference to it, with O_NONBLOCK from @flags; the caller
 * installs it in a descriptor.
 */
struct file *qpip_sock_file(struct qpip_sock *sk, unsigned int flags)
{
	struct file *f;

	f = anon_inode_getfile("[qpip-socket]", &qpip_sock_fops, sk,
			       O_RDWR | (flags & O_NONBLOCK));
	if (IS_ERR(f))
		return f;
	/* A stream, as a socket: no position, pread and pwrite fail with ESPIPE. */
	f->f_mode &= ~(FMODE_LSEEK | FMODE_PREAD | FMODE_PWRITE);
	f->f_mode |= FMODE_STREAM | FMODE_NOWAIT;
	return f;
}

/*
 * Installs @f in a new descriptor of the caller, close-on-exec if @flags has SOCK_CLOEXEC:
 * the descriptor, or -errno (@f put).
 */
int qpip_sock_install(struct file *f, unsigned int flags)
{
	int fd = get_unused_fd_flags(flags & SOCK_CLOEXEC ? O_CLOEXEC : 0);

	if (fd < 0) {
		fput(f);
		return fd;
	}
	fd_install(fd, f);
	return fd;
}

/* ---- routes and addresses: what the device can carry ---- */

/* The function's network interface, referenced (dev_put it), or NULL. */
struct net_device *qpip_sock_netdev(struct qpip_dev *qdev)
{
	struct net_device *ndev = NULL;

	down_read(&qdev->lock);
	if (qdev->netdev) {
		ndev = qdev->netdev->netdev;
		dev_hold(ndev);
	}
	up_read(&qdev->lock);
	return ndev;
}

bool qpip_addr_any(const u8 *a)
{
	static const u8 any[16];
	static const u8 any4[16] = { [10] = 0xff, [11] = 0xff };

	return !memcmp(a, any, 16) || !memcmp(a, any4, 16);
}

bool qpip_addr_v4(const u8 *a)
{
	return ipv6_addr_v4mapped((const struct in6_addr *)a);
}

/* The kernel socket's bound address, as the device names it, and port (0 if unbound). */
void qpip_ksock_local(struct sock *ksk, u8 *addr, u16 *port)
{
	if (ksk->sk_family == AF_INET6) {
		memcpy(addr, &ksk->sk_v6_rcv_saddr, 16);
	} else {
		ipv6_addr_set_v4mapped(inet_sk(ksk)->inet_rcv_saddr, (struct in6_addr *)addr);
	}
	*port = inet_sk(ksk)->inet_num;
}

/* Whether @addr (a bound local address, not the wildcard) is one of @ndev's. */
bool qpip_addr_on(struct net *net, struct net_device *ndev, const u8 *addr)
{
	struct net_device *found;

	if (!qpip_addr_v4(addr))
		return ipv6_chk_addr(net, (const struct in6_addr *)addr, ndev, 0);
	rcu_read_lock();
	found = __ip_dev_find(net, ((const struct in6_addr *)addr)->s6_addr32[3], false);
	rcu_read_unlock();
	return found == ndev;
}

/*
 * Whether the guest kernel's route from @src (the wildcard: any) to @dst goes out through
 * @ndev as unicast; the source address it would use in @src.
 */
bool qpip_route_via(struct sock *ksk, struct net_device *ndev, u8 *src, const u8 *dst)
{
	struct net *net = sock_net(ksk);
	bool ok = false;

	if (qpip_addr_v4(dst)) {
		__be32 s = qpip_addr_any(src) ? 0 : ((struct in6_addr *)src)->s6_addr32[3];
		struct flowi4 fl4 = {
			.daddr = ((const struct in6_addr *)dst)->s6_addr32[3],
			.saddr = s,
			.flowi4_proto = IPPROTO_TCP,
			.flowi4_oif = ksk->sk_bound_dev_if,
		};
		struct rtable *rt = ip_route_output_flow(net, &fl4, NULL);

		if (IS_ERR(rt))
			return false;
		ok = rt->dst.dev == ndev && rt->rt_type == RTN_UNICAST;
		if (ok)
			ipv6_addr_set_v4mapped(fl4.saddr, (struct in6_addr *)src);
		ip_rt_put(rt);
		return ok;
	}
	if (ipv6_addr_type((const struct in6_addr *)dst) & (IPV6_ADDR_MULTICAST | IPV6_ADDR_LOOPBACK))
		return false;
	{
		struct flowi6 fl6 = {
			.daddr = *(const struct in6_addr *)dst,
			.flowi6_proto = IPPROTO_TCP,
			.flowi6_oif = ksk->sk_bound_dev_if,
		};
		struct dst_entry *d;

		if (!qpip_addr_any(src))
			fl6.saddr = *(struct in6_addr *)src;
		d = ip6_route_output(net, ksk, &fl6);
		if (!d->error && d->dev == ndev) {
			ok = true;
			if (qpip_addr_any(src))
				ok = !ipv6_dev_get_saddr(net, ndev, &fl6.daddr, 0,
							 (struct in6_addr *)src);
		}
		dst_release(d);
	}
	return ok;
}

/*
 * The kernel socket of descriptor @fd if it is a TCP socket of INET or INET6 (or, if @udp,
 * a UDP one), else NULL.
 */
static struct socket *qpip_inet_socket(int fd, bool udp, int *err, u32 *declined)
{
	struct socket *sock = sockfd_lookup(fd, err);
	bool tcp;

	if (!sock)
		return NULL;
	tcp = sock->type == SOCK_STREAM && sock->sk->sk_protocol == IPPROTO_TCP;
	if (udp)
		udp = sock->type == SOCK_DGRAM && sock->sk->sk_protocol == IPPROTO_UDP;
	if ((!tcp && !udp) ||
	    (sock->sk->sk_family != AF_INET && sock->sk->sk_family != AF_INET6)) {
		*declined = QPIP_SOCK_DECLINE_NOT_TCP;
		sockfd_put(sock);
		return NULL;
	}
	return sock;
}

/* ---- IOCTL_SOCK_CONNECT ---- */

/* Binds the unbound kernel socket @sock to a port the kernel chooses, on every address. */
static int qpip_ksock_bind_any(struct socket *sock, u16 *port)
{
	struct sock *ksk = sock->sk;
	struct sockaddr_storage ss = { .ss_family = ksk->sk_family };
	int len = ksk->sk_family == AF_INET6 ? sizeof(struct sockaddr_in6) :
		  sizeof(struct sockaddr_in);
	int ret = kernel_bind(sock, (struct sockaddr *)&ss, len);

	if (ret)
		return ret;
	lock_sock(ksk);
	*port = inet_sk(ksk)->inet_num;
	release_sock(ksk);
	return 0;
}

/* Ports a connect tries before it gives up on the device (declined: port). */
#define QPIP_SOCK_PORT_TRIES	8

/*
 * Binds @sk's QP to its port, the kernel socket's, for a connect to @peer. A port the
 * driver chose (@chosen: the program did not bind one) from which the device still holds
 * a connection to that peer that the connect could not take over (its TIME-WAIT without
 * timestamps: the guest kernel, which chose the port, knows nothing of the device's
 * connections) is exchanged for another before anything fails, as Linux's connect skips
 * such a port: the kernel socket lets it go and the kernel chooses again, each refused
 * port held meanwhile by a reservation so that the next choice is another one. A port the
 * program bound is the program's: the connect then fails as on Linux (EADDRINUSE).
 */
static int qpip_sock_bind_qp(struct qpip_sock *sk, bool chosen, const struct qpip_endpoint *peer)
{
	static const u8 any[16];
	struct qpip_port held[QPIP_SOCK_PORT_TRIES] = {};
	struct qpip_dev *qdev = sk->ctx->qdev;
	struct socket *sock = sk->ksock;
	int i, tries = 0, nheld = 0;
	int ret;

	for (;;) {
		u16 bound = sk->local_port;

		ret = -ENODEV;
		if (qpip_sock_device(sk)) {
			ret = qpip_cmd_bind_for(qdev, sk->ctx->id, sk->qp->handle, any, &bound,
						chosen ? peer->addr : NULL, peer->port);
			qpip_sock_device_end(sk);
		}
		if (ret != -EADDRINUSE || !chosen || ++tries == QPIP_SOCK_PORT_TRIES)
			break;
		/* Another port, this one held (if no one took it the moment it was free). */
		lock_sock(sock->sk);
		inet_put_port(sock->sk);
		release_sock(sock->sk);
		if (!qpip_port_reserve(&held[nheld], QPIP_QP_TYPE_TCP, sk->local_port))
			nheld++;
		ret = qpip_ksock_bind_any(sock, &sk->local_port);
		if (ret) {
			/* No ephemeral port left: what Linux's connect says then. */
			ret = ret == -EADDRINUSE ? -EADDRNOTAVAIL : ret;
			break;
		}
	}
	for (i = 0; i < nheld; i++)
		qpip_port_release(&held[i]);
	return ret;
}

static bool qpip_sock_connected(struct qpip_sock *sk)
{
	return sk->state != QPIP_SOCK_CONNECTING;
}

/*
 * Makes a connecting socket of @sock, taking the caller's reference to it (the new
 * socket's from then on, or put here). Returns 0 with a->new_fd, or with a->declined set,
 * or -errno.
 */
static int qpip_sock_connect(struct qpip_ctx *ctx, struct file *ctx_file, struct socket *sock,
			     struct qpip_sock_connect *a)
{
	static const struct qpip_iwarp_conn none;
	struct qpip_dev *qdev = ctx->qdev;
	struct sock *ksk = sock->sk;
	struct net_device *ndev = NULL;
	struct qpip_sock *sk;
	struct qpip_cmd *c;
	struct file *f;
	u8 local[16];
	bool chosen;
	u16 port;
	long timeo;
	int ret = 0;

	if (ksk->sk_state != TCP_CLOSE || sock->state != SS_UNCONNECTED)
		a->declined = QPIP_SOCK_DECLINE_STATE;
	else if (sock_net(ksk) != &init_net)
		a->declined = QPIP_SOCK_DECLINE_NAMESPACE;
	else if (qpip_addr_v4(a->peer.addr) ? ksk->sk_family == AF_INET6 && ksk->sk_ipv6only :
		 ksk->sk_family == AF_INET)
		a->declined = QPIP_SOCK_DECLINE_ROUTE;
	if (a->declined)
		goto out_sock;

	ndev = qpip_sock_netdev(qdev);
	if (!ndev || !netif_running(ndev)) {
		a->declined = QPIP_SOCK_DECLINE_NO_NETDEV;
		goto out_sock;
	}
	lock_sock(ksk);
	qpip_ksock_local(ksk, local, &port);
	release_sock(ksk);
	if (!qpip_addr_any(local) && !qpip_addr_on(&init_net, ndev, local))
		a->declined = QPIP_SOCK_DECLINE_LOCAL_ADDR;
	else if (!qpip_route_via(ksk, ndev, local, a->peer.addr))
		a->declined = QPIP_SOCK_DECLINE_ROUTE;
	if (a->declined)
		goto out_sock;
	/* The port: the kernel socket's, bound now if it was not (its reservation). */
	chosen = !port;
	if (chosen) {
		ret = qpip_ksock_bind_any(sock, &port);
		if (ret)
			goto out_sock;
	}

	sk = qpip_sock_alloc(ctx, ctx_file, ksk->sk_family);
	if (!sk) {
		ret = -ENOMEM;
		goto out_sock;
	}
	/* From here on the socket holds @sock: its end puts it. */
	sk->ksock = sock;
	sk->ksock_file = sock->file;
	memcpy(sk->local_addr, local, 16);
	sk->local_port = port;
	ret = qpip_sock_objects(sk);
	if (ret == -ENOSPC || ret == -EDQUOT || ret == -ENOMEM) {
		a->declined = QPIP_SOCK_DECLINE_FULL;
		ret = 0;
	}
	if (ret || a->declined)
		goto err_sock;
	/* The QP takes the port on every address; the source is the device's route's. */
	ret = qpip_sock_bind_qp(sk, chosen, &a->peer);
	if (ret == -EADDRINUSE) {
		a->declined = QPIP_SOCK_DECLINE_PORT;
		ret = 0;
	}
	if (ret || a->declined)
		goto err_sock;
	qpip_sock_set_keepalive(sk);

	qpip_sock_lock(sk);
	sk->state = QPIP_SOCK_CONNECTING;
	c = qpip_sock_cmd(sk, QPIP_EVENT_CONNECT, qpip_sock_connect_done);
	ret = -ENOMEM;
	if (c) {
		ret = -ENODEV;
		if (qpip_sock_device(sk)) {
			ret = qpip_cmd_connect(qdev, c, ctx->id, sk->qp->handle, a->peer.addr,
					       a->peer.port, &none);
			qpip_sock_device_end(sk);
		}
		if (ret)
			qpip_sock_cmd_failed(c, ret);
	}
	if (ret)
		goto err_locked;

	/* Blocking: wait as connect(2) does, for SO_SNDTIMEO at most. */
	a->status = sk->state == QPIP_SOCK_CONNECTED ? 0 : EINPROGRESS;
	if (!(sock->file->f_flags & O_NONBLOCK)) {
		timeo = sock_sndtimeo(ksk, false);
		ret = qpip_sock_wait(sk, qpip_sock_connected, &timeo);
		if (!ret && sk->state != QPIP_SOCK_CONNECTED) {
			ret = sk->err ? sk->err : -ECONNREFUSED;
			goto err_locked;
		}
		a->status = !ret ? 0 : ret == -EAGAIN ? EINPROGRESS : EINTR;
		ret = 0;
	}
	qpip_sock_unlock(sk);

	f = qpip_sock_file(sk, sock->file->f_flags);
	if (IS_ERR(f)) {
		ret = PTR_ERR(f);
		goto err_sock;
	}
	/* A temporary descriptor the caller moves onto the program's own with dup3. */
	ret = qpip_sock_install(f, SOCK_CLOEXEC);	/* on failure the release ended it */
	if (ret >= 0) {
		a->new_fd = ret;
		ret = 0;
	}
	dev_put(ndev);
	return ret;

err_locked:
	qpip_sock_unlock(sk);
err_sock:
	qpip_sock_lock(sk);
	qpip_sock_destroy(sk);
	qpip_sock_unlock(sk);
	qpip_sock_put(sk);
	if (ndev)
		dev_put(ndev);
	return ret;
out_sock:
	sockfd_put(sock);
	if (ndev)
		dev_put(ndev);
	return ret;
}

/* ---- IOCTL_SOCK_LISTEN ---- */

/*
 * Keeps @l's offers up (mutex of @l held): idle sockets with an ACCEPT pending in the
 * device, on which its connections are established before the program accepts them.
 * Failing to make one is not an error: connections then wait in the device's backlog.
 */
void qpip_sock_offer(struct qpip_sock *l)
{
	struct qpip_ctx *ctx = l->ctx;
	unsigned long flags;
	struct qpip_sock *sk;
	struct qpip_cmd *c;
	int ret;

	while (READ_ONCE(l->noffers) < QPIP_SOCK_OFFERS && !l->dead && !l->closing) {
		sk = qpip_sock_alloc(ctx, l->ctx_file, l->family);
		if (!sk)
			return;
		/* The listener outlives the offer: a connection on it is the listener's. */
		sk->parent = l;
		kref_get(&l->ref);
		memcpy(sk->local_addr, l->local_addr, 16);
		sk->local_port = l->local_port;
		ret = qpip_sock_objects(sk);
		c = ret ? NULL : qpip_sock_cmd(sk, QPIP_EVENT_ACCEPT, qpip_sock_accept_done);
		if (!c)
			goto fail;
		spin_lock_irqsave(&l->qlock, flags);
		list_add_tail(&sk->node, &l->offers);
		l->noffers++;
		spin_unlock_irqrestore(&l->qlock, flags);
		ret = -ENODEV;
		if (qpip_sock_device(sk)) {
			static const struct qpip_iwarp_conn none;

			ret = qpip_cmd_accept(ctx->qdev, c, ctx->id, l->listener, sk->qp->handle,
					      &none);
			qpip_sock_device_end(sk);
		}
		if (!ret)
			continue;
		spin_lock_irqsave(&l->qlock, flags);
		list_del_init(&sk->node);
		l->noffers--;
		spin_unlock_irqrestore(&l->qlock, flags);
		qpip_sock_cmd_failed(c, ret);
fail:
		qpip_sock_destroy(sk);
		qpip_sock_put(sk);
		/* Try again soon: closing connections give their QPs back in the meantime. */
		if (!l->closing && !l->dead) {
			kref_get(&l->ref);
			if (!queue_delayed_work(system_wq, &l->offer_work,
						msecs_to_jiffies(QPIP_SOCK_OFFER_RETRY_MS)))
				qpip_sock_put(l);
		}
		return;
	}
}

static void qpip_sock_offer_work(struct work_struct *work)
{
	struct qpip_sock *l = container_of(to_delayed_work(work), struct qpip_sock, offer_work);

	mutex_lock(&l->lock);
	if (!l->closing)
		qpip_sock_offer(l);
	mutex_unlock(&l->lock);
	qpip_sock_put(l);
}

/*
 * Makes @l the sibling of a listener of the same context on its port whose family is the
 * other one (neither takes what the other does): true if there is one without a sibling.
 */
static bool qpip_sock_pair(struct qpip_sock *l)
{
	static const u8 v4[16] = { [10] = 0xff, [11] = 0xff, [12] = 1 };
	static const u8 v6[16] = { 0xfd };
	struct qpip_sock *p, *found = NULL;
	unsigned long idx, flags;

	xa_lock_irqsave(&l->ctx->socks, flags);
	xa_for_each(&l->ctx->socks, idx, p) {
		if (!(idx & QPIP_SOCK_LISTENER_KEY) || p->local_port != l->local_port ||
		    p->closing || p->sibling || p->primary)
			continue;
		if (qpip_sock_takes(p, v4) != qpip_sock_takes(l, v4) &&
		    qpip_sock_takes(p, v6) != qpip_sock_takes(l, v6)) {
			found = p;
			break;
		}
	}
	if (found) {
		kref_get(&found->ref);
		spin_lock(&found->qlock);
		found->sibling = l;
		spin_unlock(&found->qlock);
		l->primary = found;
	}
	xa_unlock_irqrestore(&l->ctx->socks, flags);
	return found;
}

/* As qpip_sock_connect, for a listener: takes the caller's reference to @sock. */
static int qpip_sock_listen(struct qpip_ctx *ctx, struct file *ctx_file, struct socket *sock,
			    struct qpip_sock_listen *a)
{
	static const u8 any[16];
	struct qpip_dev *qdev = ctx->qdev;
	struct sock *ksk = sock->sk;
	struct net_device *ndev;
	struct qpip_sock *l;
	struct file *f;
	u8 local[16];
	u16 port;
	int ret;

	if (ksk->sk_state != TCP_CLOSE || sock->state != SS_UNCONNECTED) {
		a->declined = QPIP_SOCK_DECLINE_STATE;
		ret = 0;
		goto out_sock;
	}
	/* The kernel socket listens as the program asked (and gets a port if it had none). */
	ret = kernel_listen(sock, a->backlog);
	if (ret)
		goto out_sock;
	if (sock_net(ksk) != &init_net) {
		a->declined = QPIP_SOCK_DECLINE_NAMESPACE;
		goto out_sock;
	}
	ndev = qpip_sock_netdev(qdev);
	if (!ndev) {
		a->declined = QPIP_SOCK_DECLINE_NO_NETDEV;
		goto out_sock;
	}
	lock_sock(ksk);
	qpip_ksock_local(ksk, local, &port);
	release_sock(ksk);
	if (!qpip_addr_any(local) && !qpip_addr_on(&init_net, ndev, local))
		a->declined = QPIP_SOCK_DECLINE_LOCAL_ADDR;
	dev_put(ndev);
	if (a->declined)
		goto out_sock;

	l = qpip_sock_alloc(ctx, ctx_file, ksk->sk_family);
	if (!l) {
		ret = -ENOMEM;
		goto out_sock;
	}
	l->ksock = sock;
	l->ksock_file = sock->file;
	memcpy(l->local_addr, local, 16);
	l->local_port = port;
	l->v6only = ksk->sk_family == AF_INET6 && ksk->sk_ipv6only;
	ret = qpip_quota_charge(ctx, QPIP_QUOTA_LISTENERS, 1);
	if (!ret) {
		ret = -ENODEV;
		if (qpip_sock_device(l)) {
			/* The wildcard of either family: every address of the device. */
			ret = qpip_cmd_listen(qdev, ctx->id, qpip_addr_any(local) ? any : local,
					      port, clamp(a->backlog, 1, 1024), 0, &l->listener);
			qpip_sock_device_end(l);
		}
		if (ret)
			qpip_quota_uncharge(ctx->user, QPIP_QUOTA_LISTENERS, 1);
	}
	if (ret == -EADDRINUSE && qpip_sock_pair(l)) {
		/* The other family's listener on the port has the device's: share it. */
		l->state = QPIP_SOCK_LISTENING;
		goto file;
	}
	if (ret == -EADDRINUSE)
		a->declined = QPIP_SOCK_DECLINE_PORT;
	else if (ret == -ENOSPC || ret == -EDQUOT)
		a->declined = QPIP_SOCK_DECLINE_FULL;
	if (a->declined)
		ret = 0;
	if (ret || a->declined)
		goto err;
	l->listener_made = true;
	l->state = QPIP_SOCK_LISTENING;
	ret = qpip_sock_publish(l);
	if (ret)
		goto err;
	mutex_lock(&l->lock);
	qpip_sock_offer(l);
	mutex_unlock(&l->lock);
file:
	f = qpip_sock_file(l, sock->file->f_flags);
	if (IS_ERR(f)) {
		ret = PTR_ERR(f);
		goto err;
	}
	ret = qpip_sock_install(f, SOCK_CLOEXEC);	/* on failure the release ended it */
	if (ret >= 0) {
		a->new_fd = ret;
		ret = 0;
	}
	return ret;

err:
	qpip_sock_close_listener(l);
	qpip_sock_put(l);
	return ret;
out_sock:
	sockfd_put(sock);
	return ret;
}

/* ---- the context's socket ioctls ---- */

long qpip_sock_ctx_ioctl(struct qpip_ctx *ctx, struct file *ctx_file, unsigned int cmd,
			 void __user *uarg)
{
	union {
		struct qpip_sock_connect c;
		struct qpip_sock_listen l;
		struct qpip_sock_bind b;
	} a = {};
	struct socket *sock;
	u32 declined = 0;
	int usize, ret, err;

	if (cmd == QPIP_IOCTL_SOCK_CONNECT)
		usize = qpip_get_arg(&a.c, sizeof(a.c), QPIP_SOCK_CONNECT_SIZE_V1, uarg);
	else if (cmd == QPIP_IOCTL_SOCK_BIND)
		usize = qpip_get_arg(&a.b, sizeof(a.b), QPIP_SOCK_BIND_SIZE_V1, uarg);
	else
		usize = qpip_get_arg(&a.l, sizeof(a.l), QPIP_SOCK_LISTEN_SIZE_V1, uarg);
	if (usize < 0)
		return usize;
	if (qpip_ctx_dead(ctx))
		return -ENODEV;

	if (cmd == QPIP_IOCTL_SOCK_BIND) {
		if (a.b.reserved[0] || a.b.reserved[1])
			return -EINVAL;
		a.b.new_fd = -1;
		a.b.declined = 0;
		sock = qpip_inet_socket(a.b.fd, true, &err, &declined);
		if (!sock && !declined)
			return err;
		ret = 0;
		if (sock && sock->type != SOCK_DGRAM) {
			sockfd_put(sock);
			sock = NULL;
			declined = QPIP_SOCK_DECLINE_NOT_TCP;
		}
		if (sock)
			ret = qpip_udp_bind(ctx, ctx_file, sock, &a.b);
		else
			a.b.declined = declined;
		if (ret)
			return ret;
		return copy_to_user(uarg, &a.b, min_t(size_t, sizeof(a.b), usize)) ? -EFAULT : 0;
	}

	if (cmd == QPIP_IOCTL_SOCK_CONNECT) {
		if (a.c.reserved0 || a.c.reserved1 || a.c.peer.reserved || !a.c.peer.port)
			return -EINVAL;
		a.c.new_fd = -1;
		a.c.declined = 0;
		a.c.status = 0;
		sock = qpip_inet_socket(a.c.fd, true, &err, &declined);
		if (!sock && !declined)
			return err;
		ret = 0;
		if (sock && sock->type == SOCK_DGRAM)
			ret = qpip_udp_connect(ctx, ctx_file, sock, &a.c);
		else if (sock)
			ret = qpip_sock_connect(ctx, ctx_file, sock, &a.c);
		else
			a.c.declined = declined;
		if (ret)
			return ret;
		return copy_to_user(uarg, &a.c, min_t(size_t, sizeof(a.c), usize)) ? -EFAULT : 0;
	}

	if (a.l.reserved0 || a.l.reserved1[0] || a.l.reserved1[1])
		return -EINVAL;
	a.l.new_fd = -1;
	a.l.declined = 0;
	sock = qpip_inet_socket(a.l.fd, false, &err, &declined);
	if (!sock && !declined)
		return err;
	ret = 0;
	if (sock)
		ret = qpip_sock_listen(ctx, ctx_file, sock, &a.l);
	else
		a.l.declined = declined;
	if (ret)
		return ret;
	return copy_to_user(uarg, &a.l, min_t(size_t, sizeof(a.l), usize)) ? -EFAULT : 0;
}

/* ---- options the device keeps ---- */

/*
 * Tells the device the kernel socket's keepalive settings when they changed (mutex held,
 * or before the socket is shared): SO_KEEPALIVE and TCP_KEEPIDLE/INTVL/CNT are set on the
 * kernel socket, the one store of the options.
 */
void qpip_sock_set_keepalive(struct qpip_sock *sk)
{
	struct qpip_set_qp_opt o = { .option = QPIP_QP_OPT_KEEPALIVE };
	struct sock *ksk;
	u32 want[3] = {};

	if (!sk->ksock || !sk->qp_made)
		return;
	ksk = sk->ksock->sk;
	if (sock_flag(ksk, SOCK_KEEPOPEN)) {
		const struct tcp_sock *tp = tcp_sk(ksk);

		want[0] = clamp_t(u32, keepalive_time_when(tp) / HZ, 1, QPIP_KEEPALIVE_MAX_SECS);
		want[1] = clamp_t(u32, keepalive_intvl_when(tp) / HZ, 1, QPIP_KEEPALIVE_MAX_SECS);
		want[2] = clamp_t(u32, keepalive_probes(tp), 1, QPIP_KEEPALIVE_MAX_PROBES);
	}
	if (!memcmp(want, sk->keepalive, sizeof(want)))
		return;
	o.keepalive_idle = want[0];
	o.keepalive_interval = want[1];
	o.keepalive_probes = want[2];
	if (!qpip_sock_device(sk))
		return;
	if (!qpip_cmd_set_qp_opt(sk->ctx->qdev, sk->ctx->id, sk->qp->handle, &o))
		memcpy(sk->keepalive, want, sizeof(want));
	qpip_sock_device_end(sk);
}
