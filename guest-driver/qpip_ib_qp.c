// SPDX-License-Identifier: GPL-2.0
/*
 * qpip_ib: queue pairs. A QP is one of the user context's device context's TCP QPs with
 * iWARP framing, made by the driver's CREATE_QP ioctl handler (qpip_ctx_ioctl) like the
 * CQs: the same quota, rings and teardown as a /dev/qpipN QP. Its two rings are mapped
 * into the process, which writes WQEs and rings the QP's doorbell slot itself; the kernel
 * sees the QP only for its state and its connection.
 *
 * States, with iWARP's rules: RESET, INIT and RTR are local (nothing to tell the device:
 * its QP takes receive WRs from creation on); RTS only through the connection manager
 * (qpip_ib_cm.c), when the connection is up; SQD is a graceful close (the device's
 * CLOSE: a FIN after every queued send); ERR destroys the device QP, which aborts its
 * connection and flushes both queues (every outstanding WR completes FLUSHED). The QP of
 * the RDMA core lives on until destroy_qp, for queries and for the provider's last polls.
 *
 * Protection domains: the device has none. It checks each WR's lkeys against the regions
 * of the QP's context, and each rkey a peer names against the regions of the context of
 * the QP it arrived on; a process's QPs and regions are in its one context. So a WR can
 * name any region of its process, whichever PD the region and the QP were made in: PDs
 * separate nothing within a process, and one process's WRs never reach another's memory.
 *
 * Kernel users get no QP: this device offers no kernel verbs (post_send and post_recv
 * exist because ib_core wants them before the RDMA CM attaches; the provider posts).
 */
#include <linux/log2.h>
#include <linux/sched.h>
#include <rdma/uverbs_ioctl.h>

#include "qpip_ib.h"

void qpip_ib_qp_get(struct qpip_ib_qp *qp)
{
	refcount_inc(&qp->ref);
}

void qpip_ib_qp_put(struct qpip_ib_qp *qp)
{
	if (refcount_dec_and_test(&qp->ref))
		complete(&qp->free);
}

/*
 * Notes @ev for the QP's work, handing it the reference the caller holds (a command's, an
 * event's). Any context: the reference is dropped in the work, never here — but for one
 * of two while a work is queued already, which holds its own.
 */
static void qpip_ib_qp_note_held(struct qpip_ib_qp *qp, unsigned long ev)
{
	unsigned long flags;

	spin_lock_irqsave(&qp->ev_lock, flags);
	qp->events |= ev;
	spin_unlock_irqrestore(&qp->ev_lock, flags);
	if (!queue_work(system_wq, &qp->work))
		refcount_dec(&qp->ref);
}

void qpip_ib_qp_note(struct qpip_ib_qp *qp, unsigned long ev)
{
	qpip_ib_qp_get(qp);
	qpip_ib_qp_note_held(qp, ev);
}

/* @ev for @qp's work, if @qp is @uc's and still there (qib->qps locked). */
static void qpip_ib_qp_event_one(struct qpip_ib_ucontext *uc, struct qpip_ib_qp *qp,
				 unsigned long ev, u8 reason)
{
	if (qp->ctx != uc->ctx || !refcount_inc_not_zero(&qp->ref))
		return;
	/*
	 * The device forgot the QP (a reset, a removal) and completes none of its WRs: the
	 * provider learns it at once, and its poll completes them flushed.
	 */
	if (ev & QPIP_IB_EV_DEAD)
		qpip_ib_status_dead(uc, qp->db_slot);
	spin_lock(&qp->ev_lock);
	if (ev == QPIP_IB_EV_ERROR)
		qp->error_reason = reason;
	spin_unlock(&qp->ev_lock);
	qpip_ib_qp_note_held(qp, ev);
}

/*
 * An asynchronous event of the device about QP @qpn of the user context @data (the admin
 * interrupt, qdev->ctx_lock held; or a reset's revocation, QPIP_CTX_ALL_QPS): for the
 * QP's work, if the QP is still there.
 */
void qpip_ib_qp_event(void *data, u32 qpn, u16 kind, u8 reason)
{
	struct qpip_ib_ucontext *uc = data;
	struct qpip_ib_dev *qib = to_qibdev(uc->ibuc.device);
	struct qpip_ib_qp *qp;
	unsigned long flags, ev, i;

	switch (kind) {
	case QPIP_ASYNC_EVENT_QP_ERROR:
		ev = QPIP_IB_EV_ERROR;
		break;
	case QPIP_ASYNC_EVENT_PEER_CLOSED:
		ev = QPIP_IB_EV_PEER_CLOSED;
		break;
	default:
		return;
	}
	xa_lock_irqsave(&qib->qps, flags);
	if (qpn == QPIP_CTX_ALL_QPS) {
		/*
		 * The device was reset or removed: every QP of the context lost its connection,
		 * and the device its WRs.
		 */
		xa_for_each(&qib->qps, i, qp)
			qpip_ib_qp_event_one(uc, qp, ev | QPIP_IB_EV_DEAD, reason);
		/* Once for all the contexts a reset killed (a pending work is not queued again). */
		queue_work(system_wq, &qib->fatal_work);
	} else {
		qp = xa_load(&qib->qps, qpn);
		dev_dbg(&qib->ibdev.dev, "QP %u: event %u reason %u%s\n", qpn, kind, reason,
			qp ? "" : " (no such QP)");
		if (qp)
			qpip_ib_qp_event_one(uc, qp, ev, reason);
	}
	xa_unlock_irqrestore(&qib->qps, flags);
}

/* The QP entered the error state on its own: the RDMA core's asynchronous event. */
static void qpip_ib_qp_fatal(struct qpip_ib_qp *qp, u8 reason)
{
	struct ib_event e = {
		.device = qp->ibqp.device,
		.element.qp = &qp->ibqp,
		.event = reason == QPIP_ASYNC_REASON_REGION_GONE ? IB_EVENT_QP_ACCESS_ERR :
			 IB_EVENT_QP_FATAL,
	};
	bool tell;

	mutex_lock(&qp->lock);
	tell = qp->state != IB_QPS_ERR;
	qp->state = IB_QPS_ERR;
	mutex_unlock(&qp->lock);
	if (tell && qp->ibqp.event_handler)
		qp->ibqp.event_handler(&e, qp->ibqp.qp_context);
}

/*
 * The QP's WRs will be completed by the provider, not the device (its status word says
 * DEAD): its CQs' completion channels are told, as the device's interrupt would, so a
 * waiter on either polls them. (A CQ not armed gets an event too: a consumer polls after
 * each event anyway, as for a vector shared by several CQs.)
 */
static void qpip_ib_qp_cq_events(struct qpip_ib_qp *qp)
{
	struct ib_cq *send = qp->ibqp.send_cq, *recv = qp->ibqp.recv_cq;

	if (send && send->comp_handler)
		send->comp_handler(send, send->cq_context);
	if (recv && recv != send && recv->comp_handler)
		recv->comp_handler(recv, recv->cq_context);
}

/* What the admin interrupt noted, in process context; drops the reference it was given. */
static void qpip_ib_qp_work(struct work_struct *w)
{
	struct qpip_ib_qp *qp = container_of(w, struct qpip_ib_qp, work);
	unsigned long ev;
	int status;
	u8 reason;

	spin_lock_irq(&qp->ev_lock);
	ev = qp->events;
	qp->events = 0;
	status = qp->connect_status;
	reason = qp->error_reason;
	spin_unlock_irq(&qp->ev_lock);

	dev_dbg(&qp->qib->ibdev.dev, "QP %u: events %#lx\n", qp->handle, ev);
	if (ev & QPIP_IB_EV_ERROR)
		qpip_ib_qp_fatal(qp, reason);
	if (ev & QPIP_IB_EV_DEAD) {
		mutex_lock(&qp->lock);
		qp->dead = true;
		mutex_unlock(&qp->lock);
		qpip_ib_qp_cq_events(qp);
	}
	qpip_ib_cm_events(qp, ev, status);
	qpip_ib_qp_put(qp);
}

/*
 * CLOSE ended (the admin interrupt): the command's reference goes to the work. It fails
 * when the connection was reset or timed out first — which the device then reports by
 * this failure alone, not by an asynchronous event.
 */
static void qpip_ib_close_done(struct qpip_cmd *c)
{
	struct qpip_ib_qp *qp = c->owner;
	unsigned long ev = QPIP_IB_EV_CLOSE_DONE;

	if (c->event.status)
		ev |= QPIP_IB_EV_CLOSE_FAILED;
	kfree(c);
	qpip_ib_qp_note_held(qp, ev);
}

/*
 * The device's graceful close of the QP's connection (lock held): a FIN once every queued
 * send is out. Once only; nothing to do without a connection.
 */
int qpip_ib_qp_close(struct qpip_ib_qp *qp)
{
	int ret;

	lockdep_assert_held(&qp->lock);
	if (qp->dev_gone || qp->closing)
		return 0;
	qpip_ib_qp_get(qp);
	ret = qpip_ctx_close_kernel(qp->ctx, qp->handle, qpip_ib_close_done, qp);
	if (ret) {
		qpip_ib_qp_put(qp);
		return ret;
	}
	qp->closing = true;
	return 0;
}

/*
 * The device QP goes (lock held): its connection aborted, a pending CONNECT or CLOSE
 * cancelled, every outstanding WR completed FLUSHED — the device writes those completions
 * before the command ends. Its doorbell slot is the dead QP's until it is destroyed
 * (uc->slot_dead), whatever the process still posts there. Then the QP's status word says
 * DEAD: the provider posts nothing more to the device, and completes what it posts (and
 * whatever the device did not) flushed. On a context the device already forgot (a reset)
 * there is nothing left to destroy. With @notify, its CQs' channels are told.
 */
static int qpip_ib_qp_kill_notify(struct qpip_ib_qp *qp, bool notify)
{
	struct qpip_handle h = { .size = sizeof(h), .handle = qp->handle };
	struct qpip_ib_ucontext *uc = qp->uc;
	int ret;

	lockdep_assert_held(&qp->lock);
	qp->state = IB_QPS_ERR;
	if (!qp->dev_gone) {
		mutex_lock(&uc->slot_lock);
		ret = qpip_ctx_ioctl(qp->ctx, QPIP_IOCTL_DESTROY_QP, &h);
		if (ret && ret != -ENODEV) {
			mutex_unlock(&uc->slot_lock);
			return ret;
		}
		if (!ret) {
			__set_bit(qp->db_slot, uc->slot_dead);
			uc->slot_qp[qp->db_slot] = qp;
		}
		mutex_unlock(&uc->slot_lock);
		qp->dev_gone = true;
		qpip_ib_qp_note(qp, QPIP_IB_EV_GONE);
	}
	if (!qp->dead) {
		qp->dead = true;
		qpip_ib_status_dead(uc, qp->db_slot);
	}
	if (notify)
		qpip_ib_qp_cq_events(qp);
	return 0;
}

/* The error state (lock held): see qpip_ib_qp_kill_notify; its CQs' channels are told. */
int qpip_ib_qp_kill(struct qpip_ib_qp *qp)
{
	return qpip_ib_qp_kill_notify(qp, true);
}

/*
 * Slot @a->db_slot, where the device just made QP @a->handle, is a dead QP's (slot_lock
 * held): that QP goes, and a holder takes the slot — a device QP of qpip_ib's on the dead
 * QP's CQs (they live as long as it does), which no process posts to (a late post of the
 * dead QP's only makes its own completions, of a QP the provider does not know, which it
 * drops). The device gives the first free slot, and nothing else makes or destroys a QP
 * of the context meanwhile: the holder gets the slot just freed.
 */
static int qpip_ib_hold_slot(struct qpip_ib_ucontext *uc, struct qpip_create_qp *a)
{
	struct qpip_ib_qp *dead = uc->slot_qp[a->db_slot];
	struct qpip_create_qp hold = {
		.size = sizeof(hold),
		.qp_type = QPIP_QP_TYPE_TCP,
		.framing = QPIP_FRAMING_IWARP,
		.send_cq = to_qibcq(dead->ibqp.send_cq)->handle,
		.recv_cq = to_qibcq(dead->ibqp.recv_cq)->handle,
		.sq_depth = 2,
		.rq_depth = 2,
	};
	struct qpip_handle h = { .size = sizeof(h), .handle = a->handle };
	int ret;

	lockdep_assert_held(&uc->slot_lock);
	ret = qpip_ctx_ioctl(uc->ctx, QPIP_IOCTL_DESTROY_QP, &h);
	if (ret)
		return ret;
	ret = qpip_ctx_ioctl(uc->ctx, QPIP_IOCTL_CREATE_QP, &hold);
	if (ret)
		return ret;
	if (WARN_ON_ONCE(hold.db_slot != a->db_slot)) {
		h.handle = hold.handle;
		qpip_ctx_ioctl(uc->ctx, QPIP_IOCTL_DESTROY_QP, &h);
		return -EBUSY;
	}
	uc->slot_holder[a->db_slot] = hold.handle;
	dev_dbg(&uc->ibuc.device->dev, "doorbell slot %u of dead QP %u: held by device QP %u\n",
		a->db_slot, dead->handle, hold.handle);
	return 0;
}

/*
 * The device's QP for @a, at a doorbell slot no dead QP of the context still has: the
 * device gives the first free slot, which may be one whose QP died (see uc->slot_dead);
 * each such slot is given to a holder, and the QP made again.
 */
static int qpip_ib_create_dev_qp(struct qpip_ib_ucontext *uc, struct qpip_create_qp *a)
{
	const struct qpip_create_qp want = *a;
	int ret;

	mutex_lock(&uc->slot_lock);
	for (;;) {
		*a = want;
		ret = qpip_ctx_ioctl(uc->ctx, QPIP_IOCTL_CREATE_QP, a);
		if (ret)
			break;
		if (WARN_ON_ONCE(a->db_slot >= QPIP_DB_QP_SLOTS)) {
			struct qpip_handle h = { .size = sizeof(h), .handle = a->handle };

			qpip_ctx_ioctl(uc->ctx, QPIP_IOCTL_DESTROY_QP, &h);
			ret = -EPROTO;
			break;
		}
		if (!test_bit(a->db_slot, uc->slot_dead))
			break;
		ret = qpip_ib_hold_slot(uc, a);
		if (ret)
			break;
	}
	if (!ret)
		qpip_ib_status_alive(uc, a->db_slot);
	mutex_unlock(&uc->slot_lock);
	return ret;
}

/*
 * A dead QP is destroyed: its slot is free for a new QP again (the holder, if one took
 * it, goes).
 */
static void qpip_ib_free_slot(struct qpip_ib_qp *qp)
{
	struct qpip_ib_ucontext *uc = qp->uc;
	u32 s = qp->db_slot;

	mutex_lock(&uc->slot_lock);
	if (uc->slot_qp[s] == qp) {
		if (uc->slot_holder[s]) {
			struct qpip_handle h = { .size = sizeof(h), .handle = uc->slot_holder[s] };

			qpip_ctx_ioctl(uc->ctx, QPIP_IOCTL_DESTROY_QP, &h);
			uc->slot_holder[s] = 0;
		}
		uc->slot_qp[s] = NULL;
		__clear_bit(s, uc->slot_dead);
	}
	mutex_unlock(&uc->slot_lock);
}

/* A ring's depth for @wr requests: a power of two, at least two. */
static u32 qpip_ib_depth(u32 wr)
{
	return roundup_pow_of_two(max(wr, 2U));
}

int qpip_ib_create_qp(struct ib_qp *ibqp, struct ib_qp_init_attr *attr, struct ib_udata *udata)
{
	struct qpip_ib_dev *qib = to_qibdev(ibqp->device);
	const struct qpip_device_info *info = &qib->qdev->info;
	struct qpip_ib_qp *qp = to_qibqp(ibqp);
	struct qpip_ib_create_qp_resp resp = {};
	struct qpip_create_qp a = { .size = sizeof(a) };
	struct qpip_handle h = { .size = sizeof(h) };
	struct qpip_ib_ucontext *uc;
	int ret;

	if (!udata)
		return -EOPNOTSUPP;
	/* RC only: iWARP has no other; no SRQ, no special QPs, no creation flags. */
	if (attr->qp_type != IB_QPT_RC || attr->srq || attr->create_flags)
		return -EOPNOTSUPP;
	if (udata->outlen < offsetofend(typeof(resp), max_sge))
		return -EINVAL;
	if (attr->cap.max_send_wr > info->max_queue_depth ||
	    attr->cap.max_recv_wr > info->max_queue_depth ||
	    attr->cap.max_send_sge > info->max_sge || attr->cap.max_recv_sge > info->max_sge ||
	    attr->cap.max_inline_data > info->max_inline)
		return -EINVAL;
	uc = rdma_udata_to_drv_context(udata, struct qpip_ib_ucontext, ibuc);

	a.qp_type = QPIP_QP_TYPE_TCP;
	a.framing = QPIP_FRAMING_IWARP;
	a.send_cq = to_qibcq(attr->send_cq)->handle;
	a.recv_cq = to_qibcq(attr->recv_cq)->handle;
	a.sq_depth = qpip_ib_depth(attr->cap.max_send_wr);
	a.rq_depth = qpip_ib_depth(attr->cap.max_recv_wr);
	ret = qpip_ib_create_dev_qp(uc, &a);
	if (ret)
		return ret;
	h.handle = a.handle;

	qp->qib = qib;
	qp->ctx = uc->ctx;
	qp->uc = uc;
	qp->handle = a.handle;
	qp->db_slot = a.db_slot;
	refcount_set(&qp->ref, 1);
	init_completion(&qp->free);
	mutex_init(&qp->lock);
	spin_lock_init(&qp->ev_lock);
	INIT_WORK(&qp->work, qpip_ib_qp_work);
	qp->state = IB_QPS_RESET;
	qp->sq_sig_type = attr->sq_sig_type;

	ret = qpip_ib_mmap_ring_insert(uc, a.sq_offset, &qp->sq_entry);
	if (ret)
		goto err_qp;
	ret = qpip_ib_mmap_ring_insert(uc, a.rq_offset, &qp->rq_entry);
	if (ret)
		goto err_sq;

	attr->cap.max_send_wr = a.sq_depth;
	attr->cap.max_recv_wr = a.rq_depth;
	attr->cap.max_send_sge = info->max_sge;
	attr->cap.max_recv_sge = info->max_sge;
	attr->cap.max_inline_data = info->max_inline;
	qp->cap = attr->cap;
	ibqp->qp_num = a.handle;

	resp.qp_handle = a.handle;
	resp.db_slot = a.db_slot;
	resp.sq_mmap_offset = rdma_user_mmap_get_offset(qp->sq_entry);
	resp.sq_size = a.sq_size;
	resp.rq_mmap_offset = rdma_user_mmap_get_offset(qp->rq_entry);
	resp.rq_size = a.rq_size;
	resp.sq_depth = a.sq_depth;
	resp.rq_depth = a.rq_depth;
	resp.max_inline = info->max_inline;
	resp.max_sge = info->max_sge;
	ret = ib_copy_to_udata(udata, &resp, min(udata->outlen, sizeof(resp)));
	if (ret)
		goto err_rq;
	/* Last: from here on iw_cm (iw_get_qp) and the device's events find it. */
	ret = xa_insert_irq(&qib->qps, a.handle, qp, GFP_KERNEL);
	if (ret)
		goto err_rq;
	qp->owner = get_pid(task_tgid(current));
	return 0;

err_rq:
	rdma_user_mmap_entry_remove(qp->rq_entry);
err_sq:
	rdma_user_mmap_entry_remove(qp->sq_entry);
err_qp:
	/* Under slot_lock: a holder being made meanwhile must get the slot it expects. */
	mutex_lock(&uc->slot_lock);
	qpip_ctx_ioctl(uc->ctx, QPIP_IOCTL_DESTROY_QP, &h);
	mutex_unlock(&uc->slot_lock);
	return ret;
}

/* What modify_qp takes: a state, and what rdma_cm sets along (accepted, ignored). */
#define QPIP_IB_QP_MASK (IB_QP_STATE | IB_QP_CUR_STATE | IB_QP_ACCESS_FLAGS | IB_QP_PORT | \
			 IB_QP_PKEY_INDEX | IB_QP_MAX_QP_RD_ATOMIC | \
			 IB_QP_MAX_DEST_RD_ATOMIC | IB_QP_EN_SQD_ASYNC_NOTIFY)

/* A move to @to (lock held), by the process (user) or by iw_cm. */
static int qpip_ib_qp_move(struct qpip_ib_qp *qp, enum ib_qp_state to)
{
	enum ib_qp_state from = qp->state;
	int ret;

	switch (to) {
	case IB_QPS_RESET:
		return from == IB_QPS_RESET ? 0 : -EINVAL;
	case IB_QPS_INIT:
		if (from != IB_QPS_RESET && from != IB_QPS_INIT)
			return -EINVAL;
		break;
	case IB_QPS_RTR:
		if (from != IB_QPS_INIT && from != IB_QPS_RTR)
			return -EINVAL;
		break;
	case IB_QPS_RTS:
		/* Only the connection manager makes an iWARP QP RTS: already so, or refused. */
		return from == IB_QPS_RTS ? 0 : -EINVAL;
	case IB_QPS_SQD:
		/* The graceful close. Asked again (the process, then iw_cm): nothing more. */
		if (from == IB_QPS_SQD || from == IB_QPS_ERR)
			return 0;
		if (from != IB_QPS_RTS)
			return -EINVAL;
		ret = qpip_ib_qp_close(qp);
		if (ret)
			return ret;
		break;
	case IB_QPS_ERR:
		/*
		 * Again on a dead QP: the provider asks for it when it completed WRs posted
		 * there itself, so that a waiter on a completion channel hears of them.
		 */
		return qpip_ib_qp_kill(qp);
	default:
		return -EINVAL;
	}
	qp->state = to;
	return 0;
}

int qpip_ib_modify_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask,
		      struct ib_udata *udata)
{
	struct qpip_ib_qp *qp = to_qibqp(ibqp);
	int ret = 0;

	if (mask & ~QPIP_IB_QP_MASK)
		return -EOPNOTSUPP;
	if ((mask & IB_QP_PORT) && attr->port_num != 1)
		return -EINVAL;
	if ((mask & (IB_QP_MAX_QP_RD_ATOMIC | IB_QP_MAX_DEST_RD_ATOMIC)) &&
	    ((mask & IB_QP_MAX_QP_RD_ATOMIC && attr->max_rd_atomic > QPIP_IWARP_MAX_IRD_ORD) ||
	     (mask & IB_QP_MAX_DEST_RD_ATOMIC &&
	      attr->max_dest_rd_atomic > QPIP_IWARP_MAX_IRD_ORD)))
		return -EINVAL;
	mutex_lock(&qp->lock);
	if ((mask & IB_QP_CUR_STATE) && attr->cur_qp_state != qp->state)
		ret = -EINVAL;
	else if (mask & IB_QP_STATE)
		ret = qpip_ib_qp_move(qp, attr->qp_state);
	mutex_unlock(&qp->lock);
	return ret;
}

int qpip_ib_query_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask,
		     struct ib_qp_init_attr *init)
{
	struct qpip_ib_qp *qp = to_qibqp(ibqp);

	memset(attr, 0, sizeof(*attr));
	memset(init, 0, sizeof(*init));
	mutex_lock(&qp->lock);
	attr->qp_state = qp->state;
	mutex_unlock(&qp->lock);
	attr->cur_qp_state = attr->qp_state;
	attr->path_mtu = IB_MTU_1024;
	attr->qp_access_flags = IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE |
				IB_ACCESS_REMOTE_READ;
	attr->cap = qp->cap;
	attr->port_num = 1;
	attr->max_rd_atomic = QPIP_IWARP_MAX_IRD_ORD;
	attr->max_dest_rd_atomic = QPIP_IWARP_MAX_IRD_ORD;
	init->qp_type = IB_QPT_RC;
	init->send_cq = ibqp->send_cq;
	init->recv_cq = ibqp->recv_cq;
	init->cap = qp->cap;
	init->sq_sig_type = qp->sq_sig_type;
	return 0;
}

/*
 * The device QP goes first (its connection aborted, its WRs flushed, a pending CONNECT
 * cancelled: iw_cm is told and lets go); then this waits for every reference — iw_cm's,
 * the commands', the work's — because the RDMA core frees the QP's memory on return.
 */
int qpip_ib_destroy_qp(struct ib_qp *ibqp, struct ib_udata *udata)
{
	struct qpip_ib_qp *qp = to_qibqp(ibqp);

	xa_erase_irq(&qp->qib->qps, qp->handle);
	mutex_lock(&qp->lock);
	qpip_ib_qp_kill_notify(qp, false);
	mutex_unlock(&qp->lock);
	qpip_ib_free_slot(qp);
	qpip_ib_qp_put(qp);
	wait_for_completion(&qp->free);
	flush_work(&qp->work);
	rdma_user_mmap_entry_remove(qp->rq_entry);
	rdma_user_mmap_entry_remove(qp->sq_entry);
	put_pid(qp->owner);
	return 0;
}

int qpip_ib_post_send(struct ib_qp *ibqp, const struct ib_send_wr *wr,
		      const struct ib_send_wr **bad_wr)
{
	*bad_wr = wr;
	return -EOPNOTSUPP;	/* the provider posts into the mapped ring */
}

int qpip_ib_post_recv(struct ib_qp *ibqp, const struct ib_recv_wr *wr,
		      const struct ib_recv_wr **bad_wr)
{
	*bad_wr = wr;
	return -EOPNOTSUPP;
}
