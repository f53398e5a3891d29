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
 * Listening, accepting and rejecting (the passive side) are not offered yet: a listen on
 * a wildcard address is accepted and listens on nothing, so a program listening on all
 * addresses still listens on the other devices (a failure would fail its listen
 * everywhere); a listen on one of qpipN's addresses, an accept or a reject fails with
 * EOPNOTSUPP.
 */
#include <linux/in.h>
#include <linux/in6.h>
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

int qpip_ib_iw_create_listen(struct iw_cm_id *cm_id, int backlog)
{
	return qpip_ib_addr_any(&cm_id->local_addr) ? 0 : -EOPNOTSUPP;
}

int qpip_ib_iw_destroy_listen(struct iw_cm_id *cm_id)
{
	return 0;
}

/* No connection request is ever delivered, so there is none to accept or reject. */
int qpip_ib_iw_accept(struct iw_cm_id *cm_id, struct iw_cm_conn_param *param)
{
	return -EOPNOTSUPP;
}

int qpip_ib_iw_reject(struct iw_cm_id *cm_id, const void *pdata, u8 pdata_len)
{
	return -EOPNOTSUPP;
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

	qp = xa_load(&to_qibdev(cm_id->device)->qps, param->qpn);
	if (!qp)
		return -EINVAL;
	/*
	 * rdma_cm takes a user's QP number from the user: only the process that made the QP
	 * may connect it (another's would carry its connection on someone else's queues).
	 */
	if (qp->owner != task_tgid(current))
		return -EINVAL;
	if (param->private_data_len > QPIP_IWARP_MAX_PRIVATE_DATA)
		return -EINVAL;
	ret = qpip_ib_dev_addr(&cm_id->m_remote_addr, addr, &port);
	if (ret)
		return ret;
	iw.pd_len = param->private_data_len;
	iw.private_data = (uintptr_t)param->private_data;
	iw.ird = min_t(u32, param->ird, QPIP_IWARP_MAX_IRD_ORD);
	iw.ord = min_t(u32, param->ord, QPIP_IWARP_MAX_IRD_ORD);

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

/* CONNECT completed with @status (lock held): CONNECT_REPLY. */
static void qpip_ib_cm_connected(struct qpip_ib_qp *qp, int status)
{
	struct qpip_query_conn *conn;

	/* What MPA agreed, and the peer's private data (also a reject's). */
	conn = kzalloc(sizeof(*conn), GFP_KERNEL);
	if (conn) {
		conn->size = sizeof(*conn);
		conn->qp = qp->handle;
		if (qp->dev_gone || qpip_ctx_ioctl(qp->ctx, QPIP_IOCTL_QUERY_CONN, conn)) {
			kfree(conn);
			conn = NULL;
		}
	}
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
void qpip_ib_cm_events(struct qpip_ib_qp *qp, unsigned long ev, int connect_status)
{
	int status = 0;

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
	if (qp->cm_state != QPIP_IB_CM_CONNECTED)
		goto out;
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
		goto out;
	/*
	 * Both sides closed, or the connection failed: the end. As on every iWARP device the
	 * QP is then in ERR: the device's QP goes, and with it the WRs still posted (a
	 * closed connection leaves receives outstanding), which complete flushed.
	 */
	qpip_ib_qp_kill(qp);
	qpip_ib_cm_tell(qp, IW_CM_EVENT_CLOSE, status, NULL);
	qpip_ib_cm_end(qp);
out:
	mutex_unlock(&qp->lock);
}
