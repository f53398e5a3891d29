// SPDX-License-Identifier: GPL-2.0
/*
 * qpip: the admin queue — how the driver gives the device privileged commands.
 *
 * Two DMA-coherent rings (commands, completions) programmed through the REG_ADMIN_*
 * registers. Commands are written under a spinlock and the tail is written to the trapped
 * doorbell register; completions arrive in the completion ring with a phase bit and are
 * taken in the MSI-X vector 0 handler, which pairs each with its command by cmd_id.
 * Completions come out of order: accept, connect and close complete when their network
 * work is done, so a synchronous waiter sleeps on its own completion and an asynchronous
 * command turns into an event of its context.
 *
 * Asynchronous events (a QP reset by its peer, a peer that closed) arrive the NVMe way: the
 * driver keeps QPIP_ASYNC_REQUESTS ASYNC_EVENT commands pending, each event completes one,
 * the completion is routed to the context that owns the device context id it names, and
 * a work item posts the request again.
 *
 * The device exposes no "commands read" register, but it reads commands in order, so a
 * completion of the command written at index i proves that everything up to i was read:
 * that is how the driver knows which submission slots it may reuse.
 */
#include <linux/dma-mapping.h>
#include <linux/errno.h>
#include <linux/mm.h>
#include <linux/slab.h>
#include <linux/string.h>

#include "qpip.h"

/* The phase a new completion at free-running index @n carries: 1 on the first pass. */
static u8 qpip_expected_phase(struct qpip_admin *a, u32 n)
{
	return ((n / a->depth) & 1) ? 0 : 1;
}

int qpip_status_errno(u16 status)
{
	switch (status) {
	case QPIP_ADMIN_STATUS_OK:
		return 0;
	case QPIP_ADMIN_STATUS_BAD_PARAM:
	case QPIP_ADMIN_STATUS_BAD_STATE:
		return -EINVAL;
	case QPIP_ADMIN_STATUS_BAD_HANDLE:
		return -ENOENT;
	case QPIP_ADMIN_STATUS_NO_RESOURCES:
		return -ENOSPC;
	case QPIP_ADMIN_STATUS_BAD_ADDRESS:
		return -EFAULT;
	case QPIP_ADMIN_STATUS_BUSY:
		return -EBUSY;
	case QPIP_ADMIN_STATUS_ADDR_IN_USE:
		return -EADDRINUSE;
	case QPIP_ADMIN_STATUS_CANCELLED:
		return -ECANCELED;
	case QPIP_ADMIN_STATUS_REFUSED:
		return -ECONNREFUSED;
	case QPIP_ADMIN_STATUS_TIMEOUT:
		return -ETIMEDOUT;
	case QPIP_ADMIN_STATUS_UNREACHABLE:
		return -EHOSTUNREACH;
	default:
		/* BAD_OPCODE or unknown: the driver sent something the device does not know. */
		return -EIO;
	}
}

void qpip_cmd_init(struct qpip_admin_cmd *cmd, u16 opcode, u32 ctx, u32 handle,
		   const void *body, size_t len)
{
	memset(cmd, 0, sizeof(*cmd));
	cmd->opcode = opcode;
	cmd->ctx = ctx;
	cmd->handle = handle;
	if (body)
		memcpy(cmd->body, body, min(len, sizeof(cmd->body)));
}

static struct qpip_cmd *qpip_pending_find(struct qpip_admin *a, u32 id)
{
	struct qpip_cmd *c;

	hash_for_each_possible(a->pending, c, node, id)
		if (c->id == id)
			return c;
	return NULL;
}

/*
 * Gives asynchronous command @c, before it is submitted, a buffer the device reads while
 * the command is pending: @len bytes at @buf, from kmalloc and within one page (the device
 * reads such buffers in one piece). On success it belongs to @c, whose completion frees
 * it; on failure it is freed here.
 */
int qpip_cmd_data_attach(struct qpip_dev *qdev, struct qpip_cmd *c, void *buf, size_t len)
{
	struct device *dev = &qdev->pdev->dev;

	if (WARN_ON(c->data || !len || offset_in_page(buf) + len > PAGE_SIZE)) {
		kfree(buf);
		return -EINVAL;
	}
	c->data_dma = dma_map_single(dev, buf, len, DMA_TO_DEVICE);
	if (dma_mapping_error(dev, c->data_dma)) {
		kfree(buf);
		return -ENOMEM;
	}
	c->data = buf;
	c->data_len = len;
	return 0;
}

/*
 * @c ended (completed, failed, cancelled, or never submitted): the device no longer reads
 * its buffer. May run in the interrupt handler with the admin lock held.
 */
void qpip_cmd_data_free(struct qpip_dev *qdev, struct qpip_cmd *c)
{
	if (c->in_mapped) {
		/* The caller's in-buffer stays: what the device wrote is read after this. */
		dma_unmap_single(&qdev->pdev->dev, c->in_dma, c->in_len, DMA_FROM_DEVICE);
		c->in_mapped = false;
	}
	if (!c->data)
		return;
	dma_unmap_single(&qdev->pdev->dev, c->data_dma, c->data_len, DMA_TO_DEVICE);
	kfree(c->data);
	c->data = NULL;
}

/*
 * Turns a completed asynchronous command into its context's event (every asynchronous
 * command ends here, also when the queue stops under it). Admin lock held.
 */
static void qpip_async_done(struct qpip_dev *qdev, struct qpip_cmd *c)
{
	struct qpip_event *ev = &c->event;
	struct qpip_ctx *ctx = c->ctx;

	qpip_cmd_data_free(qdev, c);
	if (c->sock_done) {
		/* A socket's: it holds the socket, which holds its context. */
		ev->status = c->err ? c->err : qpip_status_errno(c->cqe.status);
		if (!ev->status) {
			memcpy(ev->peer_addr, &c->cqe.result0, 8);
			memcpy(ev->peer_addr + 8, &c->cqe.result1, 8);
			ev->peer_port = c->cqe.result2;
		}
		c->sock_done(c);
		return;
	}
	if (!ctx) {
		/* Its context was closed while the command was pending. */
		kfree(c);
		return;
	}
	ev->status = c->err ? c->err : qpip_status_errno(c->cqe.status);
	if (!ev->status && (ev->kind == QPIP_EVENT_ACCEPT || ev->kind == QPIP_EVENT_CONNECT)) {
		/* The peer's address is result0/result1 in memory order, its port result2. */
		memcpy(ev->peer_addr, &c->cqe.result0, 8);
		memcpy(ev->peer_addr + 8, &c->cqe.result1, 8);
		ev->peer_port = c->cqe.result2;
	}
	qpip_ctx_post_event(ctx, c);
}

/*
 * An ASYNC_EVENT request completed (admin lock held): hand its event to its context and
 * have the request posted again — unless the queue stopped under it, or the device does
 * not know the command (then asking again would only repeat the error).
 */
static void qpip_aer_done(struct qpip_dev *qdev, struct qpip_cmd *c)
{
	struct qpip_admin *a = &qdev->admin;

	c->posted = false;
	if (c->err)
		return;
	if (c->cqe.status != QPIP_ADMIN_STATUS_OK) {
		dev_warn_ratelimited(&qdev->pdev->dev,
				     "ASYNC_EVENT request failed with status %u; no more asynchronous events\n",
				     c->cqe.status);
		a->aer_enabled = false;
		return;
	}
	qpip_ctx_async_event(qdev, &c->cqe);
	/* At once, even if a retry after a full ring was planned for later. */
	mod_delayed_work(system_wq, &a->aer_work, 0);
}

/*
 * @c completed (its completion or error recorded, the admin lock held): wake its waiter,
 * or turn it into its context's event, or hand on the asynchronous event it brought.
 */
static void qpip_cmd_done(struct qpip_dev *qdev, struct qpip_cmd *c)
{
	c->done = true;
	if (c->async_event)
		qpip_aer_done(qdev, c);
	else if (c->async)
		qpip_async_done(qdev, c);
	else
		complete(&c->completion);
}

/* Takes every new completion off the ring. Admin lock held. */
static void qpip_admin_reap(struct qpip_dev *qdev)
{
	struct qpip_admin *a = &qdev->admin;
	u32 start = a->head;

	if (!a->running)
		return;
	for (;;) {
		struct qpip_admin_cqe *e = &a->cq[a->head & (a->depth - 1)];
		struct qpip_admin_cqe cqe;
		struct qpip_cmd *c;

		if ((READ_ONCE(e->phase) & 1) != qpip_expected_phase(a, a->head))
			break;
		/* The phase byte is written last: read the rest only after it. */
		dma_rmb();
		cqe = *e;
		a->head++;

		c = qpip_pending_find(a, cqe.cmd_id);
		if (!c) {
			dev_warn_ratelimited(&qdev->pdev->dev,
					     "admin completion for unknown command %u (opcode 0x%x, status %u)\n",
					     cqe.cmd_id, cqe.opcode, cqe.status);
			continue;
		}
		hash_del(&c->node);
		if ((s32)(c->seq + 1 - a->sq_read) > 0)
			a->sq_read = c->seq + 1;
		c->cqe = cqe;
		qpip_cmd_done(qdev, c);
	}
	if (a->head != start) {
		/* Release the slots: the device stops taking commands while the ring is full. */
		qpip_wr(qdev, QPIP_REG_ADMIN_CQ_HEAD, a->head);
		wake_up(&a->space);
	}
}

/* Interrupt path and polling fallback. */
void qpip_admin_process(struct qpip_dev *qdev)
{
	unsigned long flags;

	spin_lock_irqsave(&qdev->admin.lock, flags);
	qpip_admin_reap(qdev);
	spin_unlock_irqrestore(&qdev->admin.lock, flags);
}

static bool qpip_admin_has_room(struct qpip_admin *a)
{
	return !a->running || a->tail - a->sq_read < a->depth;
}

/*
 * Writes @c's command into the submission ring and rings the doorbell. Sleeps while the
 * ring is full. Returns -ENODEV if the queue is not running (removed, resetting).
 */
static int qpip_admin_post(struct qpip_dev *qdev, struct qpip_cmd *c, struct qpip_admin_cmd *cmd)
{
	struct qpip_admin *a = &qdev->admin;
	unsigned long flags;
	long left;

	for (;;) {
		spin_lock_irqsave(&a->lock, flags);
		if (!a->running) {
			spin_unlock_irqrestore(&a->lock, flags);
			return -ENODEV;
		}
		if (qpip_admin_has_room(a))
			break;
		spin_unlock_irqrestore(&a->lock, flags);
		left = wait_event_timeout(a->space, qpip_admin_has_room(a),
					  msecs_to_jiffies(QPIP_ADMIN_TIMEOUT_MS));
		if (!left) {
			/* Maybe an interrupt was lost: look at the ring once before giving up. */
			qpip_admin_process(qdev);
			if (!qpip_admin_has_room(a)) {
				dev_err(&qdev->pdev->dev,
					"admin queue full for %d ms; the device is not answering\n",
					QPIP_ADMIN_TIMEOUT_MS);
				return -ETIMEDOUT;
			}
		}
	}

	/* cmd_id 0 is never used, so a zeroed completion can never match. */
	do {
		c->id = a->next_id++;
	} while (!c->id || qpip_pending_find(a, c->id));
	cmd->cmd_id = c->id;
	c->seq = a->tail;
	c->done = false;
	c->err = 0;
	hash_add(a->pending, &c->node, c->id);
	a->sq[a->tail & (a->depth - 1)] = *cmd;
	a->tail++;
	/* The command must be in memory before the device learns of it. */
	dma_wmb();
	qpip_wr(qdev, QPIP_REG_ADMIN_SQ_TAIL, a->tail);
	spin_unlock_irqrestore(&a->lock, flags);
	return 0;
}

/*
 * Runs one command to completion. Returns 0 with the completion in @cqe (whatever its
 * status), -ENODEV if the queue went away, -ETIMEDOUT if the device did not answer.
 */
int qpip_admin_exec(struct qpip_dev *qdev, struct qpip_admin_cmd *cmd, struct qpip_admin_cqe *cqe)
{
	struct qpip_admin *a = &qdev->admin;
	struct qpip_cmd c = { .async = false };
	unsigned long flags;
	int ret;

	init_completion(&c.completion);
	ret = qpip_admin_post(qdev, &c, cmd);
	if (ret)
		return ret;
	if (!wait_for_completion_timeout(&c.completion, msecs_to_jiffies(QPIP_ADMIN_TIMEOUT_MS))) {
		/* Maybe only the interrupt was lost: look at the ring before giving up. */
		spin_lock_irqsave(&a->lock, flags);
		qpip_admin_reap(qdev);
		if (!c.done) {
			/*
			 * A device that failed (STATUS_FAILED) answers nothing until it is reset;
			 * the reset runs in a work item, as it waits for every caller to leave.
			 */
			bool failed = a->running &&
				      (qpip_rd(qdev, QPIP_REG_STATUS) & QPIP_STATUS_FAILED);

			hash_del(&c.node);
			if (failed)
				schedule_work(&qdev->fault_work);
			spin_unlock_irqrestore(&a->lock, flags);
			if (failed) {
				dev_err(&qdev->pdev->dev,
					"admin command 0x%x got no completion: the device reports a failure (STATUS_FAILED); resetting it\n",
					cmd->opcode);
				return -EIO;
			}
			dev_err(&qdev->pdev->dev,
				"admin command 0x%x got no completion within %d ms\n",
				cmd->opcode, QPIP_ADMIN_TIMEOUT_MS);
			return -ETIMEDOUT;
		}
		spin_unlock_irqrestore(&a->lock, flags);
		dev_warn_ratelimited(&qdev->pdev->dev,
				     "admin completion found without its interrupt\n");
	}
	if (c.err)
		return c.err;
	*cqe = c.cqe;
	return 0;
}

/* As qpip_admin_exec, with the device's status turned into an errno. */
int qpip_admin_run(struct qpip_dev *qdev, struct qpip_admin_cmd *cmd, struct qpip_admin_cqe *cqe)
{
	struct qpip_admin_cqe local;
	int ret;

	if (!cqe)
		cqe = &local;
	ret = qpip_admin_exec(qdev, cmd, cqe);
	if (ret)
		return ret;
	return qpip_status_errno(cqe->status);
}

/*
 * Submits an asynchronous command whose completion becomes an event of c->ctx. The caller
 * has filled c->ctx and c->event and counted the command in the context. On success the
 * command belongs to the queue.
 */
int qpip_admin_submit_async(struct qpip_dev *qdev, struct qpip_cmd *c, struct qpip_admin_cmd *cmd)
{
	c->async = true;
	return qpip_admin_post(qdev, c, cmd);
}

/* @ctx is going away: its pending commands complete into nothing. */
void qpip_admin_detach_ctx(struct qpip_dev *qdev, struct qpip_ctx *ctx)
{
	struct qpip_admin *a = &qdev->admin;
	struct qpip_cmd *c;
	unsigned long flags;
	int bkt;

	spin_lock_irqsave(&a->lock, flags);
	hash_for_each(a->pending, bkt, c, node)
		if (c->async && c->ctx == ctx)
			c->ctx = NULL;
	spin_unlock_irqrestore(&a->lock, flags);
}

/*
 * Stops the queue (before a reset or removal): the device is told to forget the rings, and
 * every pending command fails with -ENODEV.
 */
void qpip_admin_stop(struct qpip_dev *qdev)
{
	struct qpip_admin *a = &qdev->admin;
	struct hlist_node *tmp;
	struct qpip_cmd *c;
	unsigned long flags;
	int bkt;

	spin_lock_irqsave(&a->lock, flags);
	if (a->running)
		qpip_wr(qdev, QPIP_REG_ADMIN_DEPTH, 0);
	a->running = false;
	hash_for_each_safe(a->pending, bkt, tmp, c, node) {
		hash_del(&c->node);
		c->err = -ENODEV;
		qpip_cmd_done(qdev, c);
	}
	spin_unlock_irqrestore(&a->lock, flags);
	wake_up_all(&a->space);
}

/* Programs the rings into the device (at probe and after a reset). */
int qpip_admin_start(struct qpip_dev *qdev)
{
	struct qpip_admin *a = &qdev->admin;
	unsigned long flags;
	u32 status;

	spin_lock_irqsave(&a->lock, flags);
	memset(a->sq, 0, a->depth * sizeof(*a->sq));
	memset(a->cq, 0, a->depth * sizeof(*a->cq));
	a->tail = 0;
	a->head = 0;
	a->sq_read = 0;
	qpip_wr(qdev, QPIP_REG_ADMIN_SQ_BASE_LO, lower_32_bits(a->sq_dma));
	qpip_wr(qdev, QPIP_REG_ADMIN_SQ_BASE_HI, upper_32_bits(a->sq_dma));
	qpip_wr(qdev, QPIP_REG_ADMIN_CQ_BASE_LO, lower_32_bits(a->cq_dma));
	qpip_wr(qdev, QPIP_REG_ADMIN_CQ_BASE_HI, upper_32_bits(a->cq_dma));
	qpip_wr(qdev, QPIP_REG_ADMIN_DEPTH, a->depth);
	status = qpip_rd(qdev, QPIP_REG_STATUS);
	a->running = (status & QPIP_STATUS_ADMIN_ENABLED) && !(status & QPIP_STATUS_ADMIN_ERROR);
	spin_unlock_irqrestore(&a->lock, flags);
	if (!a->running) {
		dev_err(&qdev->pdev->dev,
			"device refused the admin queue (status 0x%08x)\n", status);
		return -EIO;
	}
	return 0;
}

/*
 * Posts every ASYNC_EVENT request that is not in the device; sleeps while the ring is full.
 * If it stayed full (a device slow to answer), the requests not posted are tried again
 * later rather than lost until the next reset: without them no event would arrive.
 */
static void qpip_aer_work(struct work_struct *work)
{
	struct qpip_admin *a = container_of(to_delayed_work(work), struct qpip_admin, aer_work);
	struct qpip_dev *qdev = container_of(a, struct qpip_dev, admin);
	struct qpip_admin_cmd cmd;
	unsigned long flags;
	unsigned int i;
	bool post;
	int ret;

	for (i = 0; i < ARRAY_SIZE(a->aer); i++) {
		struct qpip_cmd *c = &a->aer[i];

		spin_lock_irqsave(&a->lock, flags);
		post = a->running && a->aer_enabled && !c->posted;
		c->posted |= post;
		spin_unlock_irqrestore(&a->lock, flags);
		if (!post)
			continue;
		qpip_cmd_init(&cmd, QPIP_ADMIN_OP_ASYNC_EVENT, 0, 0, NULL, 0);
		ret = qpip_admin_post(qdev, c, &cmd);
		if (ret) {
			spin_lock_irqsave(&a->lock, flags);
			c->posted = false;
			spin_unlock_irqrestore(&a->lock, flags);
			/* -ENODEV: the queue stopped; qpip_admin_start_events starts again. */
			if (ret == -ETIMEDOUT) {
				dev_warn_ratelimited(&qdev->pdev->dev,
						     "ASYNC_EVENT request not posted (admin queue full); trying again in %d ms\n",
						     QPIP_AER_RETRY_MS);
				schedule_delayed_work(&a->aer_work,
						      msecs_to_jiffies(QPIP_AER_RETRY_MS));
			}
			return;
		}
	}
}

/*
 * Starts asking for asynchronous events (after probe and after each reset). Every device
 * of the interface's major version knows the command.
 */
void qpip_admin_start_events(struct qpip_dev *qdev)
{
	struct qpip_admin *a = &qdev->admin;
	unsigned long flags;

	spin_lock_irqsave(&a->lock, flags);
	a->aer_enabled = true;
	spin_unlock_irqrestore(&a->lock, flags);
	mod_delayed_work(system_wq, &a->aer_work, 0);
}

/* After qpip_admin_stop: no request is posted again. */
void qpip_admin_stop_events(struct qpip_dev *qdev)
{
	cancel_delayed_work_sync(&qdev->admin.aer_work);
}

int qpip_admin_init(struct qpip_dev *qdev)
{
	struct qpip_admin *a = &qdev->admin;
	struct device *dev = &qdev->pdev->dev;
	unsigned int i;
	int ret;

	spin_lock_init(&a->lock);
	INIT_DELAYED_WORK(&a->aer_work, qpip_aer_work);
	for (i = 0; i < ARRAY_SIZE(a->aer); i++) {
		a->aer[i].async_event = true;
		init_completion(&a->aer[i].completion);
	}
	init_waitqueue_head(&a->space);
	hash_init(a->pending);
	a->depth = QPIP_ADMIN_DEPTH;
	a->next_id = 1;
	/* The device wants 64-byte aligned rings; coherent allocations are page aligned. */
	a->sq = dma_alloc_coherent(dev, a->depth * sizeof(*a->sq), &a->sq_dma, GFP_KERNEL);
	a->cq = dma_alloc_coherent(dev, a->depth * sizeof(*a->cq), &a->cq_dma, GFP_KERNEL);
	if (!a->sq || !a->cq) {
		qpip_admin_free(qdev);
		return -ENOMEM;
	}
	ret = qpip_admin_start(qdev);
	if (ret)
		qpip_admin_free(qdev);
	return ret;
}

/* After qpip_admin_stop: the device no longer knows the rings. */
void qpip_admin_free(struct qpip_dev *qdev)
{
	struct qpip_admin *a = &qdev->admin;
	struct device *dev = &qdev->pdev->dev;

	if (a->sq)
		dma_free_coherent(dev, a->depth * sizeof(*a->sq), a->sq, a->sq_dma);
	if (a->cq)
		dma_free_coherent(dev, a->depth * sizeof(*a->cq), a->cq, a->cq_dma);
	a->sq = NULL;
	a->cq = NULL;
}
