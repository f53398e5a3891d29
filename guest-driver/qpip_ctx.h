/* SPDX-License-Identifier: GPL-2.0 */
/*
 * qpip: what one open file of /dev/qpipN is — a device context and the records of its
 * objects — shared by the files that implement it:
 *
 *   qpip_ctx.c     open, mmap, release; revocation at a reset or removal
 *   qpip_verbs.c   the ioctls: arguments in and out, the context's objects
 *   qpip_mem.c     locked memory: rings, registered regions; completion vectors
 *   qpip_event.c   events read from the file: asynchronous completions and device events
 *
 * The commands they give the device are in qpip_cmd.c (declared in qpip.h).
 */
#ifndef QPIP_CTX_H
#define QPIP_CTX_H

#include <linux/eventfd.h>
#include <linux/fs.h>
#include <linux/kref.h>
#include <linux/mm_types.h>
#include <linux/poll.h>

#include "qpip.h"

/* A ring of CQEs or WQEs shared by the device and the process. */
struct qpip_ring {
	struct kref ref;		/* the object's, and each mmap in progress */
	struct device *dma_dev;
	unsigned int npages;
	unsigned int mapped;		/* pages mapped for DMA */
	struct page **pages;
	dma_addr_t *dma;
	unsigned long cookie;		/* mmap page offset */
	struct mm_struct *mm;		/* whose pinned_vm counts the pages */
};

struct qpip_cq {
	u32 handle;
	u32 slot;
	struct qpip_vector *vec;
	struct qpip_ring *ring;
	struct eventfd_ctx *eventfd;	/* signalled on the CQ's interrupt, or NULL */
	struct list_head vec_node;	/* in vec->cqs */
};

struct qpip_qp {
	u32 handle;
	struct qpip_ring *sq;
	struct qpip_ring *rq;
};

struct qpip_mr {
	u32 lkey;
	unsigned long npages;
	unsigned long pinned;
	unsigned long mapped;
	struct page **pages;
	dma_addr_t *dma;
	struct mm_struct *mm;		/* whose pinned_vm holds the pages */
	bool writable;
};

struct qpip_ctx {
	struct qpip_dev *qdev;
	u32 id;				/* device context id */
	struct qpip_ring *db;		/* the doorbell page (one page of RAM) */
	unsigned int generation;	/* qdev->generation it was created in */
	struct address_space *mapping;	/* of the file: where its mmaps are */
	struct list_head node;		/* in qdev->contexts, under qdev->lock */

	struct mutex lock;		/* the object tables */
	struct xarray cqs;		/* handle -> qpip_cq */
	struct xarray qps;		/* handle -> qpip_qp */
	struct xarray mrs;		/* lkey -> qpip_mr */
	struct xarray listeners;	/* handle -> value entry */
	struct xarray tripwires;	/* handle -> value entry */
	struct xarray rings;		/* mmap page offset -> qpip_ring */

	spinlock_t ev_lock;		/* @events to @lost_unknown; taken in the admin interrupt */
	struct list_head events;	/* completed qpip_cmds */
	unsigned int notices;		/* records in @events made from asynchronous events */
	/*
	 * Events dropped (this file's queue full, or the device said it dropped some): @lost
	 * is queued in @events where the loss happened and read as one EVENT_LOST.
	 */
	struct qpip_cmd lost;
	bool lost_queued;
	u64 lost_count;
	bool lost_unknown;		/* the device dropped some: how many is not known */
	wait_queue_head_t ev_wait;
	atomic_t pending;		/* asynchronous commands outstanding */
};

/* The device was reset or removed since the context was created: it no longer exists. */
static inline bool qpip_ctx_dead(struct qpip_ctx *ctx)
{
	struct qpip_dev *qdev = ctx->qdev;

	return READ_ONCE(qdev->unbound) || ctx->generation != READ_ONCE(qdev->generation);
}

/* qpip_mem.c */
struct qpip_ring *qpip_ring_alloc(struct qpip_dev *qdev, size_t bytes);
void qpip_ring_release(struct kref *ref);
int qpip_ring_publish(struct qpip_ctx *ctx, struct qpip_ring *r);
void qpip_ring_put(struct qpip_ctx *ctx, struct qpip_ring *r, bool leak);
struct qpip_mr *qpip_mr_alloc(struct qpip_dev *qdev, u64 addr, u64 length, bool writable);
void qpip_mr_free(struct qpip_dev *qdev, struct qpip_mr *mr, bool leak);
void qpip_cq_free(struct qpip_ctx *ctx, struct qpip_cq *cq, bool leak);
void qpip_qp_free(struct qpip_ctx *ctx, struct qpip_qp *qp, bool leak);
struct qpip_vector *qpip_pick_vector(struct qpip_dev *qdev, u32 want);
void qpip_vector_add(struct qpip_vector *vec, struct qpip_cq *cq);
void qpip_vector_del(struct qpip_cq *cq);

/* qpip_verbs.c */
long qpip_ioctl(struct file *filp, unsigned int cmd, unsigned long arg);

/* qpip_event.c */
ssize_t qpip_read(struct file *filp, char __user *buf, size_t count, loff_t *ppos);
__poll_t qpip_poll(struct file *filp, struct poll_table_struct *wait);
void qpip_ctx_events_free(struct qpip_ctx *ctx);

#endif /* QPIP_CTX_H */
