// SPDX-License-Identifier: GPL-2.0
/*
 * qpip: events — what a process reads from its file.
 *
 * Accept, connect and close complete later, out of order on the admin queue: their
 * completions become event records of the context that gave them. Asynchronous events of
 * the device (a QP reset by its peer or timed out, a peer that closed) arrive through the
 * admin queue's ASYNC_EVENT requests and go to the one context that owns the QP; a change of
 * the device's link (ASYNC_EVENT_LINK, about no context) goes to the network interface
 * (qpip_netdev_link_work), as does a loss, which may have hidden one. A context
 * holds at most QPIP_MAX_ASYNC_EVENTS_PER_CTX of those unread; losses beyond, or ones the
 * device reports, are read as one EVENT_LOST. The file polls readable while a record waits.
 */
#include <linux/poll.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "qpip_ctx.h"

static_assert(sizeof(struct qpip_event) == QPIP_EVENT_SIZE);


/* An asynchronous command completed (admin lock held, maybe in the interrupt handler). */
void qpip_ctx_post_event(struct qpip_ctx *ctx, struct qpip_cmd *c)
{
	unsigned long flags;

	spin_lock_irqsave(&ctx->ev_lock, flags);
	list_add_tail(&c->ev_node, &ctx->events);
	spin_unlock_irqrestore(&ctx->ev_lock, flags);
	atomic_dec(&ctx->pending);
	wake_up_interruptible_poll(&ctx->ev_wait, EPOLLIN | EPOLLRDNORM);
}

/* Notes lost events in @ctx (ev_lock held): one EVENT_LOST where the loss happened. */
static void qpip_ctx_lost(struct qpip_ctx *ctx, bool unknown)
{
	if (unknown)
		ctx->lost_unknown = true;
	else
		ctx->lost_count++;
	if (!ctx->lost_queued) {
		ctx->lost_queued = true;
		list_add_tail(&ctx->lost.ev_node, &ctx->events);
	}
}

/*
 * An ASYNC_EVENT request completed (admin lock held, maybe in the interrupt handler): the
 * event goes to the context that owns the device context id it names, and to no other.
 * When the device dropped events before this one, which contexts they were for is not
 * known: every context is told.
 */
void qpip_ctx_async_event(struct qpip_dev *qdev, const struct qpip_admin_cqe *cqe)
{
	u16 kind = cqe->result2 & 0xffff;
	u8 reason = (cqe->result2 >> 16) & 0xff;
	struct qpip_ctx *ctx = NULL;
	struct qpip_event ev = {};
	struct qpip_cmd *c;
	unsigned int i;

	if (kind == QPIP_ASYNC_EVENT_LINK || (cqe->result2 & QPIP_ASYNC_FLAG_LOST))
		schedule_work(&qdev->link_work);
	spin_lock(&qdev->ctx_lock);
	if (cqe->result2 & QPIP_ASYNC_FLAG_LOST) {
		for (i = 0; i < ARRAY_SIZE(qdev->live); i++) {
			if (!qdev->live[i])
				continue;
			spin_lock(&qdev->live[i]->ev_lock);
			qpip_ctx_lost(qdev->live[i], true);
			spin_unlock(&qdev->live[i]->ev_lock);
			wake_up_interruptible_poll(&qdev->live[i]->ev_wait, EPOLLIN | EPOLLRDNORM);
		}
	}
	switch (kind) {
	case QPIP_ASYNC_EVENT_QP_ERROR:
		ev.kind = QPIP_EVENT_QP_ERROR;
		ev.status = reason == QPIP_ASYNC_REASON_PEER_RESET ? -ECONNRESET :
			    reason == QPIP_ASYNC_REASON_TIMEOUT ? -ETIMEDOUT :
			    reason == QPIP_ASYNC_REASON_UNREACHABLE ? -EHOSTUNREACH : -EIO;
		break;
	case QPIP_ASYNC_EVENT_PEER_CLOSED:
		ev.kind = QPIP_EVENT_PEER_CLOSED;
		break;
	case QPIP_ASYNC_EVENT_LINK:
		goto out;	/* the interface's, above */
	default:
		dev_warn_ratelimited(&qdev->pdev->dev,
				     "unknown asynchronous event %u (reason %u) ignored\n",
				     kind, reason);
		goto out;
	}
	ev.qp = cqe->result1;
	if (cqe->result0 < ARRAY_SIZE(qdev->live))
		ctx = qdev->live[cqe->result0];
	if (!ctx)
		goto out;	/* the context is gone (closed, or reset away) */
	if (qpip_sock_async_event(ctx, ev.qp, kind, ev.status))
		goto out;	/* a qpip socket's QP: the socket takes it */
	if (ctx->qp_event) {
		ctx->qp_event(ctx->qp_event_data, ev.qp, kind, reason);
		goto out;	/* an RDMA device's context: qpip_ib takes it */
	}

	spin_lock(&ctx->ev_lock);
	c = ctx->notices < QPIP_MAX_ASYNC_EVENTS_PER_CTX ? kzalloc(sizeof(*c), GFP_ATOMIC) : NULL;
	if (c) {
		c->notice = true;
		c->event = ev;
		ctx->notices++;
		list_add_tail(&c->ev_node, &ctx->events);
	} else {
		qpip_ctx_lost(ctx, false);
	}
	spin_unlock(&ctx->ev_lock);
	wake_up_interruptible_poll(&ctx->ev_wait, EPOLLIN | EPOLLRDNORM);
out:
	spin_unlock(&qdev->ctx_lock);
}

/*
 * The next event record, copied into @ev (ev_lock held while taking it). The EVENT_LOST
 * record stays queued until it has been read (qpip_ctx_event_read).
 */
static struct qpip_cmd *qpip_ctx_take_event(struct qpip_ctx *ctx, struct qpip_event *ev)
{
	struct qpip_cmd *c;

	spin_lock_irq(&ctx->ev_lock);
	c = list_first_entry_or_null(&ctx->events, struct qpip_cmd, ev_node);
	if (c == &ctx->lost) {
		memset(ev, 0, sizeof(*ev));
		ev->kind = QPIP_EVENT_LOST;
		ev->user_data = ctx->lost_unknown ? 0 : ctx->lost_count;
	} else if (c) {
		list_del(&c->ev_node);
		*ev = c->event;
	}
	spin_unlock_irq(&ctx->ev_lock);
	return c;
}

/* @c (taken by qpip_ctx_take_event) was read: free it, or reset the loss count. */
static void qpip_ctx_event_read(struct qpip_ctx *ctx, struct qpip_cmd *c,
				const struct qpip_event *ev)
{
	spin_lock_irq(&ctx->ev_lock);
	if (c == &ctx->lost) {
		list_del(&c->ev_node);
		ctx->lost_queued = false;
		if (ev->user_data) {
			ctx->lost_count -= ev->user_data;
		} else {
			/* Reported as "unknown": that covers every loss noted until then. */
			ctx->lost_unknown = false;
			ctx->lost_count = 0;
		}
		/* Losses noted while it was being read are reported by the next one. */
		if (ctx->lost_count || ctx->lost_unknown) {
			ctx->lost_queued = true;
			list_add_tail(&c->ev_node, &ctx->events);
		}
		c = NULL;
	} else if (c->notice) {
		ctx->notices--;
	}
	spin_unlock_irq(&ctx->ev_lock);
	kfree(c);
}

static bool qpip_ctx_has_event(struct qpip_ctx *ctx)
{
	bool ret;

	spin_lock_irq(&ctx->ev_lock);
	ret = !list_empty(&ctx->events);
	spin_unlock_irq(&ctx->ev_lock);
	return ret;
}

ssize_t qpip_read(struct file *filp, char __user *buf, size_t count, loff_t *ppos)
{
	struct qpip_ctx *ctx = filp->private_data;
	struct qpip_event ev;
	struct qpip_cmd *c;
	size_t done = 0;
	int ret;

	if (count < sizeof(struct qpip_event))
		return -EINVAL;
	while (done + sizeof(struct qpip_event) <= count) {
		c = qpip_ctx_take_event(ctx, &ev);
		if (!c) {
			if (done)
				break;
			if (qpip_ctx_dead(ctx))
				return -ENODEV;
			if (filp->f_flags & O_NONBLOCK)
				return -EAGAIN;
			ret = wait_event_interruptible(ctx->ev_wait, qpip_ctx_has_event(ctx) ||
							     qpip_ctx_dead(ctx));
			if (ret)
				return ret;
			continue;
		}
		if (copy_to_user(buf + done, &ev, sizeof(ev))) {
			/* Put it back: the event is not lost to a bad buffer. */
			if (c != &ctx->lost) {
				spin_lock_irq(&ctx->ev_lock);
				list_add(&c->ev_node, &ctx->events);
				spin_unlock_irq(&ctx->ev_lock);
			}
			return done ? done : -EFAULT;
		}
		qpip_ctx_event_read(ctx, c, &ev);
		done += sizeof(struct qpip_event);
	}
	return done;
}

__poll_t qpip_poll(struct file *filp, struct poll_table_struct *wait)
{
	struct qpip_ctx *ctx = filp->private_data;
	__poll_t mask = 0;

	poll_wait(filp, &ctx->ev_wait, wait);
	if (qpip_ctx_has_event(ctx))
		mask |= EPOLLIN | EPOLLRDNORM;
	if (qpip_ctx_dead(ctx))
		mask |= EPOLLERR | EPOLLHUP;
	return mask;
}

/* At release: the records nobody read. */
void qpip_ctx_events_free(struct qpip_ctx *ctx)
{
	struct qpip_cmd *c, *tmp;

	list_for_each_entry_safe(c, tmp, &ctx->events, ev_node)
		if (c != &ctx->lost)
			kfree(c);
}

/*
 * qpip_ib.ko: @fn takes the asynchronous events about @ctx's QPs from now on (NULL: no
 * longer). Under ctx_lock, so no event is being handed to the old one when this returns.
 */
void qpip_ctx_set_qp_event(struct qpip_ctx *ctx, void (*fn)(void *data, u32 qp, u16 kind,
							    u8 reason), void *data)
{
	struct qpip_dev *qdev = ctx->qdev;

	spin_lock_irq(&qdev->ctx_lock);
	ctx->qp_event = fn;
	ctx->qp_event_data = data;
	spin_unlock_irq(&qdev->ctx_lock);
}
EXPORT_SYMBOL_GPL(qpip_ctx_set_qp_event);
