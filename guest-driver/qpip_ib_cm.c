// SPDX-License-Identifier: GPL-2.0
/*
 * qpip_ib: the iWARP connection manager's ops (iw_cm), over the device's own TCP and MPA:
 * a connection is a CONNECT of the QP, its MPA request carrying the private data, IRD and
 * ORD rdma_cm passes down; the device runs MPA in the engine and completes the command
 * once the reply came (or the connection failed). The driver keeps no endpoint of its
 * own: a connection belongs to its QP (struct qpip_ib_qp), whose work
 * (qpip_ib_qp.c) turns the device's completions and asynchronous events into iw_cm's
 * events here, in order:
 *
 *   CONNECT completes    -> IW_CM_EVENT_CONNECT_REPLY: 0 (the QP is RTS), -ECONNREFUSED
 *                           (no listener, or the peer rejected: its private data comes
 *                           along), -ETIMEDOUT, or -ECONNRESET (anything else, also a
 *                           QP destroyed or a device reset in the middle)
 *   the peer closed      -> IW_CM_EVENT_DISCONNECT, and this side closes too (CLOSE)
 *   the connection ended -> IW_CM_EVENT_CLOSE: both sides closed (our CLOSE completed
 *                           and the peer's FIN came), a reset, a timeout, a Terminate
 *                           (also one that fails our CLOSE),
 *                           the QP moved to ERR or destroyed; the QP is then in ERR
 *                           (its device QP destroyed, the WRs still posted flushed)
 *
 * After a failed CONNECT_REPLY or a CLOSE nothing more is told, and the cm_id, held
 * (cm_id->add_ref) from iw_connect on, is let go. iw_cm holds the QP (iw_add_ref) as long
 * as it may use it; the QP's destroy waits for that.
 *
 * Disconnecting is modify_qp's (iw_cm_disconnect): SQD is the device's CLOSE, ERR the
 * QP's destruction in the device (qpip_ib_qp.c).
 *
 * Listening, accepting and rejecting (the passive side) are at the end of this file: a
 * listener of the driver's own holds each initiator's MPA request until iw_cm answers it.
 */
#include <linux/in.h>
#include <linux/in6.h>
#include <linux/kref.h>
#include <linux/moduleparam.h>
#include <linux/sched.h>
#include <net/ipv6.h>
#include <rdma/iw_cm.h>

#include "qpip_ib.h"

static bool qpip_ib_addr_any(const struct sockaddr_storage *ss)
{
	switch (ss->ss_family) {
	case AF_INET:
		return ((const struct sockaddr_in *)ss)->sin_addr.s_addr == htonl(INADDR_ANY);
	case AF_INET6:
		return ipv6_addr_any(&((const struct sockaddr_in6 *)ss)->sin6_addr);
	default:
		return false;
	}
}

/* Called by iw_cm under its spinlock: no sleeping. */
struct ib_qp *qpip_ib_iw_get_qp(struct ib_device *ibdev, int qpn)
{
	struct qpip_ib_qp *qp = xa_load(&to_qibdev(ibdev)->qps, qpn);

	return qp ? &qp->ibqp : NULL;
}

void qpip_ib_iw_add_ref(struct ib_qp *ibqp)
{
	qpip_ib_qp_get(to_qibqp(ibqp));
}

void qpip_ib_iw_rem_ref(struct ib_qp *ibqp)
{
	qpip_ib_qp_put(to_qibqp(ibqp));
}

/* A socket address as the device names it: IPv6, IPv4 mapped; the port in host order. */
static int qpip_ib_dev_addr(const struct sockaddr_storage *ss, u8 *addr, u16 *port)
{
	const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;
	const struct sockaddr_in *s4 = (const struct sockaddr_in *)ss;

	switch (ss->ss_family) {
	case AF_INET:
		ipv6_addr_set_v4mapped(s4->sin_addr.s_addr, (struct in6_addr *)addr);
		*port = ntohs(s4->sin_port);
		return 0;
	case AF_INET6:
		memcpy(addr, &s6->sin6_addr, 16);
		*port = ntohs(s6->sin6_port);
		return 0;
	default:
		return -EAFNOSUPPORT;
	}
}

/* CONNECT ended (the admin interrupt): the command's reference goes to the QP's work. */
static void qpip_ib_connect_done(struct qpip_cmd *c)
{
	struct qpip_ib_qp *qp = c->owner;
	unsigned long flags;

	spin_lock_irqsave(&qp->ev_lock, flags);
	qp->connect_status = c->event.status;
	spin_unlock_irqrestore(&qp->ev_lock, flags);
	kfree(c);
	/* qpip_ib_qp_note without taking a reference: the command's becomes the work's. */
	spin_lock_irqsave(&qp->ev_lock, flags);
	qp->events |= QPIP_IB_EV_CONNECT_DONE;
	spin_unlock_irqrestore(&qp->ev_lock, flags);
	if (!queue_work(system_wq, &qp->work))
		refcount_dec(&qp->ref);
}

/*
 * Peer-to-peer mode on connects (MPA's enhanced setup, as siw's initiator asks for too):
 * after the reply the device sends the responder's ready-to-receive message. Without it an
 * MPA responder sends nothing until this end's first FPDU, and a program whose server
 * speaks first (ucmatose, perftest's ib_write_lat) waits forever on both ends. It can be
 * turned off (/sys/module/qpip_ib/parameters/peer_to_peer) for a responder that mishandles
 * it: in the lab, a siw server killed while siw's responder had left the message unread
 * (its responder stall, ci/tests/common/rping.sh) hit a BUG in its kernel's iw_cm
 * (cm_work_handler, iwcm.c:964).
 */
static bool peer_to_peer = true;
module_param(peer_to_peer, bool, 0644);
MODULE_PARM_DESC(peer_to_peer, "rdma_connect asks for MPA peer-to-peer mode (the server may send first)");

/*
 * The QP iw_cm names for a connection (@param->qpn), checked, and the MPA parameters the
 * device gets for it in @iw: the private data, IRD and ORD, and RDMA Write with
 * immediate data, offered always (a connect's offer is a reserved bit of the MPA
 * request's header that a peer which is not qpip ignores; an accept agrees to a qpip
 * initiator's offer), so it costs nothing.
 */
static struct qpip_ib_qp *qpip_ib_conn_qp(struct iw_cm_id *cm_id,
					  const struct iw_cm_conn_param *param,
					  struct qpip_iwarp_conn *iw)
{
	struct qpip_ib_qp *qp = xa_load(&to_qibdev(cm_id->device)->qps, param->qpn);

	/*
	 * rdma_cm takes a user's QP number from the user: only the process that made the QP
	 * may give it a connection (another's would carry its connection on someone else's
	 * queues).
	 */
	if (!qp || qp->owner != task_tgid(current))
		return ERR_PTR(-EINVAL);
	if (param->private_data_len > QPIP_IWARP_MAX_PRIVATE_DATA)
		return ERR_PTR(-EINVAL);
	iw->pd_len = param->private_data_len;
	iw->private_data = (uintptr_t)param->private_data;
	iw->ird = min_t(u32, param->ird, QPIP_IWARP_MAX_IRD_ORD);
	iw->ord = min_t(u32, param->ord, QPIP_IWARP_MAX_IRD_ORD);
	iw->flags = QPIP_IWARP_CONN_IMMEDIATE;
	return qp;
}

/*
 * Active side: the QP (in INIT or RTR, of the calling process, with no connection yet)
 * connects to cm_id's remote address. Returns at once; the result comes as
 * CONNECT_REPLY.
 */
int qpip_ib_iw_connect(struct iw_cm_id *cm_id, struct iw_cm_conn_param *param)
{
	struct qpip_ib_qp *qp;
	struct qpip_iwarp_conn iw = {};
	u8 addr[16];
	u16 port;
	int ret;

	qp = qpip_ib_conn_qp(cm_id, param, &iw);
	if (IS_ERR(qp))
		return PTR_ERR(qp);
	ret = qpip_ib_dev_addr(&cm_id->m_remote_addr, addr, &port);
	if (ret)
		return ret;
	if (READ_ONCE(peer_to_peer))
		iw.flags |= QPIP_IWARP_CONN_PEER_TO_PEER;

	mutex_lock(&qp->lock);
	if (qp->cm_id || qp->cm_state != QPIP_IB_CM_IDLE || qp->dev_gone ||
	    (qp->state != IB_QPS_INIT && qp->state != IB_QPS_RTR)) {
		ret = -EINVAL;
		goto out;
	}
	qpip_ib_qp_get(qp);		/* the command's */
	ret = qpip_ctx_connect_kernel(qp->ctx, qp->handle, addr, port, &iw,
				      param->private_data, qpip_ib_connect_done, qp);
	if (ret) {
		qpip_ib_qp_put(qp);
		goto out;
	}
	cm_id->add_ref(cm_id);
	cm_id->provider_data = qp;
	qp->cm_id = cm_id;
	qp->cm_state = QPIP_IB_CM_CONNECTING;
out:
	mutex_unlock(&qp->lock);
	return ret;
}

/* Tells iw_cm @type with @status (lock held); the peer's private data and IRD/ORD maybe. */
static void qpip_ib_cm_tell(struct qpip_ib_qp *qp, enum iw_cm_event_type type, int status,
			    const struct qpip_query_conn *conn)
{
	struct iw_cm_id *cm_id = qp->cm_id;
	struct iw_cm_event e = {
		.event = type,
		.status = status,
		.local_addr = cm_id->m_local_addr,
		.remote_addr = cm_id->m_remote_addr,
		.provider_data = qp,
	};

	dev_dbg(&qp->qib->ibdev.dev, "QP %u: iw_cm event %d status %d\n", qp->handle, type,
		status);
	if (conn) {
		e.ird = conn->ird;
		e.ord = conn->ord;
		/* iw_cm copies it at once; it carries at most 255 bytes. */
		e.private_data_len = min_t(u16, conn->pd_len, U8_MAX);
		e.private_data = e.private_data_len ? (void *)conn->private_data : NULL;
	}
	cm_id->event_handler(cm_id, &e);
}

/* The connection is over (lock held): nothing more is told, the cm_id let go. */
static void qpip_ib_cm_end(struct qpip_ib_qp *qp)
{
	struct iw_cm_id *cm_id = qp->cm_id;

	qp->cm_state = QPIP_IB_CM_DONE;
	qp->cm_id = NULL;
	cm_id->provider_data = NULL;
	cm_id->rem_ref(cm_id);
}

/* What MPA agreed, and the peer's private data (also a reject's); NULL if not known. */
static struct qpip_query_conn *qpip_ib_query_conn(struct qpip_ib_qp *qp)
{
	struct qpip_query_conn *conn = kzalloc(sizeof(*conn), GFP_KERNEL);

	if (!conn)
		return NULL;
	conn->size = sizeof(*conn);
	conn->qp = qp->handle;
	if (qp->dev_gone || qpip_ctx_ioctl(qp->ctx, QPIP_IOCTL_QUERY_CONN, conn)) {
		kfree(conn);
		return NULL;
	}
	return conn;
}

/* CONNECT completed with @status (lock held): CONNECT_REPLY. */
static void qpip_ib_cm_connected(struct qpip_ib_qp *qp, int status)
{
	struct qpip_query_conn *conn = qpip_ib_query_conn(qp);

	switch (status) {
	case 0:
		/* The QP was destroyed, or moved to ERR, as the reply came: too late. */
		if (qp->dev_gone)
			status = -ECONNRESET;
		break;
	case -ECONNREFUSED:
	case -ETIMEDOUT:
		break;
	default:
		status = -ECONNRESET;
	}
	if (status) {
		qpip_ib_cm_tell(qp, IW_CM_EVENT_CONNECT_REPLY, status,
				conn && (conn->flags & QPIP_CONN_INFO_REJECTED) ? conn : NULL);
		qpip_ib_cm_end(qp);
		/* The device's QP is in its error state: every WR completes FLUSHED. */
		qp->state = IB_QPS_ERR;
	} else {
		qp->state = IB_QPS_RTS;
		qp->cm_state = QPIP_IB_CM_CONNECTED;
		qpip_ib_cm_tell(qp, IW_CM_EVENT_CONNECT_REPLY, 0, conn);
	}
	kfree(conn);
}

/*
 * What happened to @qp's connection (QPIP_IB_EV_* in @ev, from its work): iw_cm's events,
 * in the order above. Process context.
 */
static void qpip_ib_cm_advance(struct qpip_ib_qp *qp);

void qpip_ib_cm_events(struct qpip_ib_qp *qp, unsigned long ev, int connect_status)
{
	mutex_lock(&qp->lock);
	/* Recorded whatever the state: a connect in progress tells them once it is done. */
	if (ev & QPIP_IB_EV_PEER_CLOSED)
		qp->peer_closed = true;
	if (ev & QPIP_IB_EV_CLOSE_DONE)
		qp->close_done = true;
	if (ev & (QPIP_IB_EV_ERROR | QPIP_IB_EV_GONE | QPIP_IB_EV_CLOSE_FAILED))
		qp->conn_failed = true;
	if (!qp->cm_id)
		goto out;
	if (qp->cm_state == QPIP_IB_CM_CONNECTING) {
		/* Anything else waits for the CONNECT's end, which always comes. */
		if (!(ev & QPIP_IB_EV_CONNECT_DONE))
			goto out;
		qpip_ib_cm_connected(qp, connect_status);
	}
	qpip_ib_cm_advance(qp);
out:
	mutex_unlock(&qp->lock);
}

/*
 * What the connection of @qp (lock held), told CONNECT_REPLY or ESTABLISHED, has come to:
 * DISCONNECT, then CLOSE.
 */
static void qpip_ib_cm_advance(struct qpip_ib_qp *qp)
{
	int status = 0;

	if (!qp->cm_id || qp->cm_state != QPIP_IB_CM_CONNECTED)
		return;
	if (qp->peer_closed && !qp->disconnect_told) {
		qp->disconnect_told = true;
		qpip_ib_cm_tell(qp, IW_CM_EVENT_DISCONNECT, 0, NULL);
		/*
		 * The peer closed first: this side closes too, as siw does (rdma_cm tells its
		 * user only of the CLOSE that follows, and a program may wait for that before
		 * it disconnects). No CLOSE to give: the connection has failed.
		 */
		if (qpip_ib_qp_close(qp))
			qp->conn_failed = true;
	}
	if (qp->conn_failed)
		status = -ECONNRESET;
	else if (!(qp->peer_closed && qp->close_done))
		return;
	/*
	 * Both sides closed, or the connection failed: the end. As on every iWARP device the
	 * QP is then in ERR: the device's QP goes, and with it the WRs still posted (a
	 * closed connection leaves receives outstanding), which complete flushed.
	 */
	qpip_ib_qp_kill(qp);
	qpip_ib_cm_tell(qp, IW_CM_EVENT_CLOSE, status, NULL);
	qpip_ib_cm_end(qp);
}

/*
 * ---- The passive side ----
 *
 * iw_cm listens once per address and port for every process, and chooses the QP only
 * after it has seen the initiator's MPA request. So a listener is the device's
 * LISTEN_FLAG_IWARP_REQUESTS listener in a device context of the driver's own (struct
 * qpip_ib_lctx), with one CONN_REQUEST pending at a time; each request it gets becomes
 * IW_CM_EVENT_CONNECT_REQUEST on the listening cm_id, its provider_data a struct
 * qpip_ib_conn_req. iw_cm answers every request it was given exactly once: iw_accept (an
 * ACCEPT naming the request by the chosen QP, of the caller's context), or iw_reject
 * (also its own, when the child cm_id is destroyed unanswered); both free the request.
 * An accepted connection is its QP's from then on, as a connected one (the active side's
 * DISCONNECT and CLOSE).
 *
 * A listener iw_cm lets go of lingers a few seconds (QPIP_IB_LINGER) for a new listen on
 * its address and port, which takes it back with any request that came meanwhile.
 *
 * A reset kills the driver's context and with it the listeners: they get no more
 * requests (the next listen makes a new context).
 */
struct qpip_ib_listener {
	struct kref ref;		/* iw_cm's listen (or the linger), the pending
					 * command, each request */
	struct qpip_ib_dev *qib;
	struct qpip_ib_lctx *lctx;	/* a reference of the listener's */
	u32 handle;			/* the device's listener, in lctx's context */
	u8 addr[16];			/* what it listens on, for a new listen to match */
	u16 port;
	struct work_struct work;	/* a CONN_REQUEST ended */
	struct completion idle;		/* no CONN_REQUEST pending */
	struct list_head lingering;	/* in qib->lingering, under qib->lctx_lock */
	struct delayed_work expire;	/* the linger's end */

	struct mutex lock;		/* @cm_id, @closing, @buf, @held */
	struct iw_cm_id *cm_id;		/* held (add_ref) while set; NULL while lingering */
	bool closing;			/* being destroyed */
	struct qpip_conn_request *buf;	/* the pending CONN_REQUEST's */
	struct qpip_conn_request *held;	/* a request that came while lingering */
	u32 held_id;

	spinlock_t done_lock;
	struct qpip_cmd *done;		/* the ended CONN_REQUEST, for the work */
};

/* A request handed to iw_cm, until it is accepted or rejected. */
struct qpip_ib_conn_req {
	struct qpip_ib_listener *l;	/* a reference of the request's */
	u32 id;
};

/* A reference let go: the last (the device's, a listener's or a request's) destroys it. */
static void qpip_ib_lctx_put(struct qpip_ib_lctx *lctx)
{
	if (!refcount_dec_and_test(&lctx->ref))
		return;
	qpip_ctx_destroy(lctx->ctx);
	kfree(lctx);
}

/*
 * The listeners' context, a reference for the caller. The device keeps the context it
 * made, from the first listen to its removal: a listen is then one LISTEN command, not a
 * context's creation first. rdma_cm listens on every device for a wildcard address, and
 * programs that tell their client the port before they listen (qperf 0.4.11) lose the
 * race to the client's connect far less often: on qpip's own device, and on a siw or
 * rxe device listed after it. A context a reset killed is replaced by the next listen
 * (its last users let go of it).
 */
static struct qpip_ib_lctx *qpip_ib_lctx_get(struct qpip_ib_dev *qib)
{
	struct qpip_ib_lctx *lctx, *dead = NULL;

	mutex_lock(&qib->lctx_lock);
	lctx = qib->lctx;
	if (lctx && qpip_ctx_dead(lctx->ctx)) {
		dead = lctx;
		qib->lctx = lctx = NULL;
	}
	if (lctx) {
		refcount_inc(&lctx->ref);
		goto out;
	}
	lctx = kzalloc(sizeof(*lctx), GFP_KERNEL);
	if (!lctx) {
		lctx = ERR_PTR(-ENOMEM);
		goto out;
	}
	refcount_set(&lctx->ref, 2);	/* the device's and the caller's */
	lctx->qib = qib;
	lctx->ctx = qpip_ctx_create(qib->qdev, NULL);
	if (IS_ERR(lctx->ctx)) {
		void *err = lctx->ctx;

		kfree(lctx);
		lctx = err;
		goto out;
	}
	qib->lctx = lctx;
out:
	mutex_unlock(&qib->lctx_lock);
	if (dead)
		qpip_ib_lctx_put(dead);
	return lctx;
}

static void qpip_ib_listener_release(struct kref *ref)
{
	struct qpip_ib_listener *l = container_of(ref, struct qpip_ib_listener, ref);

	qpip_ib_lctx_put(l->lctx);
	kfree(l);
}

static void qpip_ib_listener_put(struct qpip_ib_listener *l)
{
	kref_put(&l->ref, qpip_ib_listener_release);
}

/* A CONN_REQUEST ended (the admin interrupt): its reference goes to the work. */
static void qpip_ib_conn_request_done(struct qpip_cmd *c)
{
	struct qpip_ib_listener *l = c->owner;
	unsigned long flags;

	spin_lock_irqsave(&l->done_lock, flags);
	l->done = c;
	spin_unlock_irqrestore(&l->done_lock, flags);
	queue_work(system_wq, &l->work);
}

/* The next CONN_REQUEST (lock held); false if none could be given. */
static bool qpip_ib_conn_request(struct qpip_ib_listener *l)
{
	int ret;

	l->buf = kzalloc(sizeof(*l->buf), GFP_KERNEL);
	if (!l->buf)
		return false;
	kref_get(&l->ref);		/* the command's */
	ret = qpip_ctx_conn_request_kernel(l->lctx->ctx, l->handle, l->buf,
					   qpip_ib_conn_request_done, l);
	if (ret) {
		dev_dbg(&l->qib->ibdev.dev, "listener %u: CONN_REQUEST failed: %d\n",
			l->handle, ret);
		kfree(l->buf);
		l->buf = NULL;
		kref_put(&l->ref, qpip_ib_listener_release);	/* not the last: iw_cm's */
		return false;
	}
	return true;
}

/* The device's address and port as a socket address: IPv4 mapped is IPv4. */
static void qpip_ib_sockaddr(struct sockaddr_storage *ss, const u8 *addr, u16 port)
{
	memset(ss, 0, sizeof(*ss));
	if (ipv6_addr_v4mapped((const struct in6_addr *)addr)) {
		struct sockaddr_in *s4 = (struct sockaddr_in *)ss;

		s4->sin_family = AF_INET;
		s4->sin_addr.s_addr = ((const struct in6_addr *)addr)->s6_addr32[3];
		s4->sin_port = htons(port);
	} else {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;

		s6->sin6_family = AF_INET6;
		memcpy(&s6->sin6_addr, addr, 16);
		s6->sin6_port = htons(port);
	}
}

/* Request @r (with @l's lock held, iw_cm still listening) told to iw_cm. */
static void qpip_ib_conn_req_tell(struct qpip_ib_listener *l, const struct qpip_conn_request *r,
				  u32 id)
{
	struct qpip_ib_conn_req *req = kzalloc(sizeof(*req), GFP_KERNEL);
	struct iw_cm_event e = {
		.event = IW_CM_EVENT_CONNECT_REQUEST,
		.ird = r->ird,
		.ord = r->ord,
	};

	if (req) {
		kref_get(&l->ref);
		req->l = l;
		req->id = id;
		qpip_ib_sockaddr(&e.local_addr, r->local_addr, r->local_port);
		qpip_ib_sockaddr(&e.remote_addr, r->peer_addr, r->peer_port);
		/* iw_cm copies it; it carries at most 255 bytes. */
		e.private_data_len = min_t(u16, r->pd_len, U8_MAX);
		e.private_data = e.private_data_len ? (void *)r->private_data : NULL;
		e.provider_data = req;
		dev_dbg(&l->qib->ibdev.dev, "listener %u: connection request %u\n", l->handle, id);
		if (!l->cm_id->event_handler(l->cm_id, &e))
			return;
		kref_put(&l->ref, qpip_ib_listener_release);	/* not the last: iw_cm's */
		kfree(req);
	}
	/* Not told: answered at once, so that the initiator does not wait for its timer. */
	qpip_ctx_reject_kernel(l->lctx->ctx, l->handle, id, NULL, 0);
}

/* A CONN_REQUEST ended: its request told, and the next one asked for. */
static void qpip_ib_listener_work(struct work_struct *work)
{
	struct qpip_ib_listener *l = container_of(work, struct qpip_ib_listener, work);
	struct qpip_conn_request *buf;
	struct qpip_cmd *c;
	bool again = false;
	int status;
	u32 id;

	spin_lock_irq(&l->done_lock);
	c = l->done;
	l->done = NULL;
	spin_unlock_irq(&l->done_lock);
	if (!c)
		return;
	status = c->event.status;
	id = c->cqe.result0;
	kfree(c);

	mutex_lock(&l->lock);
	buf = l->buf;
	l->buf = NULL;
	if (status) {
		/* Cancelled by iw_destroy_listen, or the device went: no more requests. */
		dev_dbg(&l->qib->ibdev.dev, "listener %u: CONN_REQUEST ended: %d\n", l->handle,
			status);
	} else if (l->closing) {
		/* Taken as the listener went: the listener's destruction resets it. */
	} else if (!l->cm_id) {
		/* Lingering: kept for the next listen (or reset with the listener). */
		l->held = buf;
		l->held_id = id;
		buf = NULL;
	} else {
		qpip_ib_conn_req_tell(l, buf, id);
		again = qpip_ib_conn_request(l);
	}
	if (!again)
		complete(&l->idle);
	mutex_unlock(&l->lock);
	kfree(buf);
	qpip_ib_listener_put(l);	/* the command's */
}

/*
 * The listener destroyed in the device: its pending CONN_REQUEST completes CANCELLED, the
 * requests it holds unanswered are reset (the one held while lingering too); the ones
 * iw_cm has are answered by iw_cm (their ACCEPT then fails). The caller's reference goes.
 */
static void qpip_ib_listener_destroy(struct qpip_ib_listener *l)
{
	struct qpip_handle h = { .size = sizeof(h) };

	mutex_lock(&l->lock);
	l->closing = true;
	mutex_unlock(&l->lock);
	h.handle = l->handle;
	/* Fails only if the context is dead: then the device has no listener any more. */
	qpip_ctx_ioctl(l->lctx->ctx, QPIP_IOCTL_DESTROY_LISTENER, &h);
	wait_for_completion(&l->idle);
	flush_work(&l->work);
	mutex_lock(&l->lock);
	kfree(l->held);
	l->held = NULL;
	mutex_unlock(&l->lock);
	qpip_ib_listener_put(l);
}

/*
 * How long a listener iw_cm let go of lingers in the device before it is destroyed. A
 * program that destroys its listener and listens again on the same port (perftest does,
 * between its own exchange and its test's connection, while its client connects) gets
 * the same device listener back: a connection that came in between is held, not refused.
 * Without it, such a client races a LISTEN command to the adapter, and a siw client,
 * whose connect is a kernel socket's, loses. perftest's ib_write_bw server takes about a
 * second to listen again on an idle TCG guest (its client as long to connect again): a
 * few seconds leave room for a loaded host.
 */
#define QPIP_IB_LINGER	msecs_to_jiffies(5000)

static void qpip_ib_listeners_end_lingering(struct qpip_ib_dev *qib, u16 port);

/* The linger's end: nobody listened again. */
static void qpip_ib_listener_expire(struct work_struct *work)
{
	struct qpip_ib_listener *l = container_of(to_delayed_work(work),
						  struct qpip_ib_listener, expire);
	struct qpip_ib_dev *qib = l->qib;
	bool mine;

	mutex_lock(&qib->lctx_lock);
	mine = !list_empty(&l->lingering);
	list_del_init(&l->lingering);
	mutex_unlock(&qib->lctx_lock);
	if (mine)	/* else a new listen took it */
		qpip_ib_listener_destroy(l);
}

/* A lingering listener on @addr and @port, taken off the list (the caller's), or NULL. */
static struct qpip_ib_listener *qpip_ib_listener_unlinger(struct qpip_ib_dev *qib,
							   const u8 *addr, u16 port)
{
	struct qpip_ib_listener *l, *found = NULL;

	mutex_lock(&qib->lctx_lock);
	list_for_each_entry(l, &qib->lingering, lingering) {
		if (l->port == port && !memcmp(l->addr, addr, sizeof(l->addr)) &&
		    !qpip_ctx_dead(l->lctx->ctx)) {
			found = l;
			list_del_init(&l->lingering);
			break;
		}
	}
	mutex_unlock(&qib->lctx_lock);
	/* Its expiry may be running: it finds the listener off the list and leaves it. */
	if (found)
		cancel_delayed_work(&found->expire);
	return found;
}

/* A lingering listener becomes @cm_id's: a request held meanwhile is told first. */
static void qpip_ib_listener_adopt(struct qpip_ib_listener *l, struct iw_cm_id *cm_id)
{
	struct qpip_conn_request *held;

	cm_id->add_ref(cm_id);
	cm_id->provider_data = l;
	mutex_lock(&l->lock);
	l->cm_id = cm_id;
	held = l->held;
	l->held = NULL;
	if (held) {
		/* No CONN_REQUEST is pending while one is held: ask for the next. */
		qpip_ib_conn_req_tell(l, held, l->held_id);
		reinit_completion(&l->idle);
		if (!qpip_ib_conn_request(l))
			complete(&l->idle);
	}
	mutex_unlock(&l->lock);
	kfree(held);
	dev_dbg(&l->qib->ibdev.dev, "listener %u: listened on again%s\n", l->handle,
		held ? ", a request held" : "");
}

/*
 * A listener on cm_id's address and port: one of qpipN's addresses, or the wildcard of
 * either family (the device's all-zero address: every address of qpipN).
 */
int qpip_ib_iw_create_listen(struct iw_cm_id *cm_id, int backlog)
{
	struct qpip_ib_dev *qib = to_qibdev(cm_id->device);
	bool any = qpip_ib_addr_any(&cm_id->m_local_addr);
	struct qpip_ib_listener *l;
	u8 addr[16];
	u16 port;
	int ret;

	ret = qpip_ib_dev_addr(&cm_id->m_local_addr, addr, &port);
	if (ret)
		return ret;
	if (any)
		memset(addr, 0, sizeof(addr));
	l = qpip_ib_listener_unlinger(qib, addr, port);
	if (l) {
		qpip_ib_listener_adopt(l, cm_id);
		return 0;
	}
	qpip_ib_listeners_end_lingering(qib, port);
	l = kzalloc(sizeof(*l), GFP_KERNEL);
	if (!l)
		return -ENOMEM;
	kref_init(&l->ref);
	l->qib = qib;
	memcpy(l->addr, addr, sizeof(l->addr));
	l->port = port;
	INIT_WORK(&l->work, qpip_ib_listener_work);
	INIT_LIST_HEAD(&l->lingering);
	INIT_DELAYED_WORK(&l->expire, qpip_ib_listener_expire);
	init_completion(&l->idle);
	mutex_init(&l->lock);
	spin_lock_init(&l->done_lock);
	l->lctx = qpip_ib_lctx_get(qib);
	if (IS_ERR(l->lctx)) {
		ret = PTR_ERR(l->lctx);
		kfree(l);
		return ret;
	}
	ret = qpip_ctx_listen_kernel(l->lctx->ctx, addr, port, clamp(backlog, 1, 1024),
				     QPIP_LISTEN_FLAG_IWARP_REQUESTS, &l->handle);
	if (ret) {
		dev_dbg(&qib->ibdev.dev, "listen on port %u: %d\n", port, ret);
		qpip_ib_listener_put(l);
		/*
		 * A wildcard listen is every device's: a failure here would fail it on the
		 * others too. It listens on nothing here (e.g. the other family's wildcard
		 * has the port: the device's listens on both).
		 */
		return any ? 0 : ret;
	}
	cm_id->add_ref(cm_id);
	cm_id->provider_data = l;
	mutex_lock(&l->lock);
	l->cm_id = cm_id;
	if (!qpip_ib_conn_request(l))
		complete(&l->idle);
	mutex_unlock(&l->lock);
	return 0;
}

/*
 * iw_cm lets the listener go: it lingers (QPIP_IB_LINGER) for a new listen on its address
 * and port, unless its context is dead. Nothing is told to @cm_id once this returns.
 */
int qpip_ib_iw_destroy_listen(struct iw_cm_id *cm_id)
{
	struct qpip_ib_listener *l = cm_id->provider_data;
	struct qpip_ib_dev *qib;

	if (!l)
		return 0;	/* a wildcard listen that listens on nothing here */
	qib = l->qib;
	mutex_lock(&l->lock);
	l->cm_id = NULL;
	mutex_unlock(&l->lock);
	cm_id->provider_data = NULL;
	cm_id->rem_ref(cm_id);
	/* iw_cm's reference is the linger's now. */
	mutex_lock(&qib->lctx_lock);
	if (!qib->unregistering && !qpip_ctx_dead(l->lctx->ctx)) {
		list_add_tail(&l->lingering, &qib->lingering);
		queue_delayed_work(qib->linger_wq, &l->expire, QPIP_IB_LINGER);
		l = NULL;
	}
	mutex_unlock(&qib->lctx_lock);
	if (l)
		qpip_ib_listener_destroy(l);
	return 0;
}

/*
 * Lingering listeners destroyed now: those on @port (another address's would refuse a
 * new listen on it: the device's wildcard listens cover both families), or all of them
 * (@port 0: the device goes; none lingers from then on).
 */
static void qpip_ib_listeners_end_lingering(struct qpip_ib_dev *qib, u16 port)
{
	struct qpip_ib_listener *l, *found;

	for (;;) {
		found = NULL;
		mutex_lock(&qib->lctx_lock);
		if (!port)
			qib->unregistering = true;
		list_for_each_entry(l, &qib->lingering, lingering) {
			if (!port || l->port == port) {
				found = l;
				list_del_init(&l->lingering);
				break;
			}
		}
		mutex_unlock(&qib->lctx_lock);
		if (!found)
			return;
		/* Off the list: its expiry, if it runs, leaves it to us. */
		cancel_delayed_work_sync(&found->expire);
		qpip_ib_listener_destroy(found);
	}
}

/*
 * The device goes, after its unregistration (iw_cm has let go of every listener): the
 * lingering listeners are destroyed, then the context.
 */
void qpip_ib_lctx_release(struct qpip_ib_dev *qib)
{
	qpip_ib_listeners_end_lingering(qib, 0);
	if (qib->lctx)
		qpip_ib_lctx_put(qib->lctx);
	qib->lctx = NULL;
}

static void qpip_ib_conn_req_free(struct qpip_ib_conn_req *req)
{
	qpip_ib_listener_put(req->l);
	kfree(req);
}

/* An ACCEPT the caller waits for. */
struct qpip_ib_accept_wait {
	struct completion done;
	int status;
};

/* ACCEPT ended (the admin interrupt). */
static void qpip_ib_accept_done(struct qpip_cmd *c)
{
	struct qpip_ib_accept_wait *w = c->owner;

	w->status = c->event.status;
	kfree(c);
	complete(&w->done);
}

/*
 * Request @req answered by @qp (INIT or RTR, of the calling process, with no connection):
 * the ACCEPT is waited for, as siw sends its MPA reply before it returns, so that a
 * failure is the caller's error (iw_cm has no asynchronous one for an accept). Then the
 * connection is established: ESTABLISHED, and the QP's as a connected one.
 */
static int qpip_ib_accept(struct iw_cm_id *cm_id, struct qpip_ib_conn_req *req,
			  struct iw_cm_conn_param *param)
{
	struct qpip_ib_accept_wait w = { .status = 0 };
	struct qpip_iwarp_conn iw = {};
	struct qpip_query_conn *conn;
	struct qpip_ib_qp *qp;
	int ret;

	qp = qpip_ib_conn_qp(cm_id, param, &iw);
	if (IS_ERR(qp))
		return PTR_ERR(qp);
	init_completion(&w.done);

	mutex_lock(&qp->lock);
	if (qp->cm_id || qp->cm_state != QPIP_IB_CM_IDLE || qp->dev_gone ||
	    (qp->state != IB_QPS_INIT && qp->state != IB_QPS_RTR)) {
		ret = -EINVAL;
		goto out;
	}
	ret = qpip_ctx_accept_kernel(qp->ctx, req->l->handle, req->id, qp->handle, &iw,
				     param->private_data, qpip_ib_accept_done, &w);
	if (ret)
		goto out;
	/* It always ends: the reply is out, or it failed, or the device went. */
	wait_for_completion(&w.done);
	ret = w.status;
	if (ret) {
		dev_dbg(&qp->qib->ibdev.dev, "QP %u: ACCEPT failed: %d\n", qp->handle, ret);
		goto out;
	}
	cm_id->add_ref(cm_id);
	cm_id->provider_data = qp;
	qp->cm_id = cm_id;
	qp->state = IB_QPS_RTS;
	qp->cm_state = QPIP_IB_CM_CONNECTED;
	conn = qpip_ib_query_conn(qp);
	qpip_ib_cm_tell(qp, IW_CM_EVENT_ESTABLISHED, 0, conn);
	kfree(conn);
	/* What the QP's work recorded meanwhile (a peer that closed at once). */
	qpip_ib_cm_advance(qp);
out:
	mutex_unlock(&qp->lock);
	return ret;
}

int qpip_ib_iw_accept(struct iw_cm_id *cm_id, struct iw_cm_conn_param *param)
{
	struct qpip_ib_conn_req *req = cm_id->provider_data;
	int ret;

	if (!req)
		return -EINVAL;
	cm_id->provider_data = NULL;
	ret = qpip_ib_accept(cm_id, req, param);
	qpip_ib_conn_req_free(req);
	return ret;
}

int qpip_ib_iw_reject(struct iw_cm_id *cm_id, const void *pdata, u8 pdata_len)
{
	struct qpip_ib_conn_req *req = cm_id->provider_data;
	int ret;

	if (!req)
		return -EINVAL;
	cm_id->provider_data = NULL;
	if (pdata_len > QPIP_IWARP_MAX_PRIVATE_DATA)
		pdata_len = QPIP_IWARP_MAX_PRIVATE_DATA;
	ret = qpip_ctx_reject_kernel(req->l->lctx->ctx, req->l->handle, req->id, pdata,
				     pdata_len);
	qpip_ib_conn_req_free(req);
	return ret;
}
