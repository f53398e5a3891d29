// SPDX-License-Identifier: GPL-2.0
/*
 * qpip: contexts — what one open file of /dev/qpipN is.
 *
 * open creates a context in the device with its own doorbell page (a page of RAM the driver
 * allocates, names to the device and maps into this process only); the ioctls create the
 * context's objects (CQs, QPs, memory regions, listeners) through the admin queue and keep a
 * record of each, so that closing the file — or the process dying — destroys the context
 * in the device first (which stops every DMA into its memory) and then frees the rings and
 * unpins the registered pages. Handles are the device's object numbers, looked up in this
 * context's own tables before anything reaches the device: another context's handle is
 * -ENOENT here already.
 *
 * Ring memory is ordinary pages, mapped for the device one page at a time (the device takes
 * page lists, so nothing needs to be contiguous) and into the process with vm_insert_pages,
 * which takes a reference on each page: a process that keeps a ring mapped after destroying
 * its object keeps harmless memory, never freed memory.
 *
 * After a reset or removal of the device, the kick mapping of every context is revoked
 * (touching it then finds a page that goes nowhere; the doorbell page is the context's own
 * RAM, which the device has forgotten, so it stays) and every call fails with -ENODEV;
 * release then frees what the device has forgotten already.
 */
#include <linux/capability.h>
#include <linux/dma-mapping.h>
#include <linux/eventfd.h>
#include <linux/fs.h>
#include <linux/kref.h>
#include <linux/log2.h>
#include <linux/mm.h>
#include <linux/poll.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "qpip.h"

/* The device's pages are 4 KiB; so must ours be, for rings and page lists alike. */
static_assert(PAGE_SIZE == QPIP_DOORBELL_PAGE_SIZE);
static_assert(sizeof(struct qpip_event) == QPIP_EVENT_SIZE);
static_assert(sizeof(((struct qpip_query_stats *)0)->counters) == sizeof(struct qpip_stats));

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

static bool qpip_ctx_dead(struct qpip_ctx *ctx)
{
	struct qpip_dev *qdev = ctx->qdev;

	return READ_ONCE(qdev->unbound) || ctx->generation != READ_ONCE(qdev->generation);
}

/* ---- locked memory ---- */

/*
 * Memory the device may access at any time is locked memory: registered regions (pinned
 * user pages) and rings (pages the driver allocates for the process) alike. Both count in
 * the creating process's pinned_vm against RLIMIT_MEMLOCK, unless it has CAP_IPC_LOCK.
 */
static int qpip_lock_account(struct mm_struct **mmp, unsigned long npages)
{
	struct mm_struct *mm = current->mm;
	unsigned long limit = rlimit(RLIMIT_MEMLOCK) >> PAGE_SHIFT;

	if (!mm)
		return -EFAULT;
	if (atomic64_add_return(npages, &mm->pinned_vm) > limit && !capable(CAP_IPC_LOCK)) {
		atomic64_sub(npages, &mm->pinned_vm);
		return -ENOMEM;
	}
	mmgrab(mm);
	*mmp = mm;
	return 0;
}

static void qpip_lock_unaccount(struct mm_struct **mmp, unsigned long npages)
{
	if (!*mmp)
		return;
	atomic64_sub(npages, &(*mmp)->pinned_vm);
	mmdrop(*mmp);
	*mmp = NULL;
}

/* ---- rings ---- */

static void qpip_ring_release(struct kref *ref)
{
	struct qpip_ring *r = container_of(ref, struct qpip_ring, ref);
	unsigned int i;

	for (i = 0; r->pages && i < r->npages; i++)
		if (r->pages[i])
			put_page(r->pages[i]);
	kvfree(r->pages);
	kvfree(r->dma);
	kfree(r);
}

/*
 * Zeroed pages for @bytes of ring, mapped for the device. No IOMMU and x86 caches are
 * coherent with DMA, so the streaming mapping is the page's physical address and the
 * device and the process share the page directly.
 */
static struct qpip_ring *qpip_ring_alloc(struct qpip_dev *qdev, size_t bytes)
{
	struct qpip_ring *r;
	unsigned int i;
	int ret;

	r = kzalloc(sizeof(*r), GFP_KERNEL);
	if (!r)
		return ERR_PTR(-ENOMEM);
	kref_init(&r->ref);
	r->dma_dev = &qdev->pdev->dev;
	r->npages = DIV_ROUND_UP(bytes, PAGE_SIZE);
	ret = qpip_lock_account(&r->mm, r->npages);
	if (ret)
		goto err;
	ret = -ENOMEM;
	r->pages = kvcalloc(r->npages, sizeof(*r->pages), GFP_KERNEL);
	r->dma = kvcalloc(r->npages, sizeof(*r->dma), GFP_KERNEL);
	if (!r->pages || !r->dma)
		goto err;
	for (i = 0; i < r->npages; i++) {
		r->pages[i] = alloc_page(GFP_KERNEL_ACCOUNT | __GFP_ZERO);
		if (!r->pages[i])
			goto err;
		r->dma[i] = dma_map_page(r->dma_dev, r->pages[i], 0, PAGE_SIZE,
					 DMA_BIDIRECTIONAL);
		if (dma_mapping_error(r->dma_dev, r->dma[i]))
			goto err;
		r->mapped++;
	}
	return r;
err:
	for (i = 0; i < r->mapped; i++)
		dma_unmap_page(r->dma_dev, r->dma[i], PAGE_SIZE, DMA_BIDIRECTIONAL);
	qpip_lock_unaccount(&r->mm, r->npages);
	kref_put(&r->ref, qpip_ring_release);
	return ERR_PTR(ret);
}

/*
 * Gives @r an mmap offset in @ctx. Offsets come from one counter of the device, so an
 * offset seen in another context names nothing in this one.
 */
static int qpip_ring_publish(struct qpip_ctx *ctx, struct qpip_ring *r)
{
	int ret = 0;
	u32 id;

	do {
		id = atomic_inc_return(&ctx->qdev->next_cookie);
		if (id < QPIP_MMAP_FIRST_RING)
			continue;
		ret = xa_insert(&ctx->rings, id, r, GFP_KERNEL);
		if (!ret)
			r->cookie = id;
	} while (id < QPIP_MMAP_FIRST_RING || ret == -EBUSY);
	return ret;
}

/*
 * The device no longer uses @r (its object was destroyed, or the context): unmap it for DMA
 * and drop the object's reference. With @leak the device may still write it: keep it all.
 */
static void qpip_ring_put(struct qpip_ctx *ctx, struct qpip_ring *r, bool leak)
{
	unsigned int i;

	if (!r)
		return;
	if (r->cookie)
		xa_erase(&ctx->rings, r->cookie);
	if (leak)
		return;
	for (i = 0; i < r->mapped; i++)
		dma_unmap_page(r->dma_dev, r->dma[i], PAGE_SIZE, DMA_BIDIRECTIONAL);
	r->mapped = 0;
	/* Pages a process still maps are its own mapping's from here on. */
	qpip_lock_unaccount(&r->mm, r->npages);
	kref_put(&r->ref, qpip_ring_release);
}

/* A page list the device reads during one command: u64 page addresses, contiguous. */
struct qpip_page_list {
	u64 *entries;
	dma_addr_t dma;
	size_t size;
};

static int qpip_page_list_alloc(struct qpip_dev *qdev, struct qpip_page_list *pl,
				const dma_addr_t *pages, unsigned long n)
{
	unsigned long i;

	pl->size = n * sizeof(u64);
	pl->entries = dma_alloc_coherent(&qdev->pdev->dev, pl->size, &pl->dma, GFP_KERNEL);
	if (!pl->entries)
		return -ENOMEM;
	for (i = 0; i < n; i++)
		pl->entries[i] = pages[i];
	return 0;
}

static void qpip_page_list_free(struct qpip_dev *qdev, struct qpip_page_list *pl)
{
	if (pl->entries)
		dma_free_coherent(&qdev->pdev->dev, pl->size, pl->entries, pl->dma);
	pl->entries = NULL;
}

/* ---- completion vectors ---- */

static struct qpip_vector *qpip_pick_vector(struct qpip_dev *qdev, u32 want)
{
	unsigned int n = qpip_comp_vectors(qdev), i, best = 0;

	if (!n)
		return ERR_PTR(-EOPNOTSUPP);
	if (want != QPIP_ANY_VECTOR)
		return want < n ? &qdev->vectors[want + 1] : ERR_PTR(-EINVAL);
	/* More CQs than vectors: vectors are shared, each CQ on the least used one. */
	for (i = 1; i < n; i++)
		if (READ_ONCE(qdev->vectors[i + 1].ncqs) < READ_ONCE(qdev->vectors[best + 1].ncqs))
			best = i;
	return &qdev->vectors[best + 1];
}

static void qpip_vector_add(struct qpip_vector *vec, struct qpip_cq *cq)
{
	unsigned long flags;

	spin_lock_irqsave(&vec->lock, flags);
	list_add_tail(&cq->vec_node, &vec->cqs);
	WRITE_ONCE(vec->ncqs, vec->ncqs + 1);
	cq->vec = vec;
	spin_unlock_irqrestore(&vec->lock, flags);
}

static void qpip_vector_del(struct qpip_cq *cq)
{
	struct qpip_vector *vec = cq->vec;
	unsigned long flags;

	if (!vec)
		return;
	spin_lock_irqsave(&vec->lock, flags);
	list_del(&cq->vec_node);
	WRITE_ONCE(vec->ncqs, vec->ncqs - 1);
	spin_unlock_irqrestore(&vec->lock, flags);
	cq->vec = NULL;
}

/*
 * A completion vector fired: the device raised it for an armed CQ. Which one it does not
 * say, so every CQ on the vector wakes its waiters; they find out by polling their rings.
 */
irqreturn_t qpip_cq_irq(int irq, void *data)
{
	struct qpip_vector *vec = data;
	struct qpip_cq *cq;

	atomic64_inc(&vec->count);
	spin_lock(&vec->lock);
	list_for_each_entry(cq, &vec->cqs, vec_node)
		if (cq->eventfd)
			eventfd_signal(cq->eventfd);
	spin_unlock(&vec->lock);
	return IRQ_HANDLED;
}

/* ---- objects ---- */

static void qpip_cq_free(struct qpip_ctx *ctx, struct qpip_cq *cq, bool leak)
{
	qpip_vector_del(cq);
	if (cq->eventfd)
		eventfd_ctx_put(cq->eventfd);
	qpip_ring_put(ctx, cq->ring, leak);
	kfree(cq);
}

static void qpip_qp_free(struct qpip_ctx *ctx, struct qpip_qp *qp, bool leak)
{
	qpip_ring_put(ctx, qp->sq, leak);
	qpip_ring_put(ctx, qp->rq, leak);
	kfree(qp);
}

static void qpip_mr_free(struct qpip_dev *qdev, struct qpip_mr *mr, bool leak)
{
	enum dma_data_direction dir = mr->writable ? DMA_BIDIRECTIONAL : DMA_TO_DEVICE;
	unsigned long i;

	if (leak)
		return;
	for (i = 0; i < mr->mapped; i++)
		dma_unmap_page(&qdev->pdev->dev, mr->dma[i], PAGE_SIZE, dir);
	if (mr->pinned)
		unpin_user_pages_dirty_lock(mr->pages, mr->pinned, mr->writable);
	qpip_lock_unaccount(&mr->mm, mr->npages);
	kvfree(mr->pages);
	kvfree(mr->dma);
	kfree(mr);
}

/* Undoes a create whose result the driver could not record. */
static void qpip_destroy_in_device(struct qpip_ctx *ctx, u16 opcode, u32 handle)
{
	struct qpip_admin_cmd cmd;

	qpip_cmd_init(&cmd, opcode, ctx->id, handle, NULL, 0);
	qpip_admin_run(ctx->qdev, &cmd, NULL);
}

/* ---- argument handling ---- */

/*
 * Copies a size-versioned argument in (see include/uapi/qpip.h): returns the caller's
 * size, or an errno. Bytes past what the driver knows must be zero (copy_struct_from_user).
 */
static int qpip_get_arg(void *karg, size_t ksize, u32 v1size, void __user *uarg)
{
	u32 usize;
	int ret;

	if (get_user(usize, (u32 __user *)uarg))
		return -EFAULT;
	if (usize < v1size)
		return -EINVAL;
	if (usize > QPIP_MAX_ARG_SIZE)
		return -E2BIG;
	ret = copy_struct_from_user(karg, ksize, uarg, usize);
	if (ret)
		return ret;
	return usize;
}

static int qpip_put_arg(void __user *uarg, const void *karg, size_t ksize, u32 usize)
{
	return copy_to_user(uarg, karg, min_t(size_t, ksize, usize)) ? -EFAULT : 0;
}

static bool qpip_depth_ok(struct qpip_dev *qdev, u32 depth)
{
	return depth >= 2 && depth <= qdev->info.max_queue_depth && is_power_of_2(depth);
}

static bool qpip_zero(const void *p, size_t n)
{
	return !memchr_inv(p, 0, n);
}

#define QPIP_GET_ARG(ctx_arg, uarg, v1)						\
	qpip_get_arg(&(ctx_arg), sizeof(ctx_arg), (v1), (uarg))

/* ---- ioctls (qdev->lock held for reading, the context alive, ctx->lock held) ---- */

static int qpip_ioctl_query_device(struct qpip_ctx *ctx, void __user *uarg)
{
	struct qpip_dev *qdev = ctx->qdev;
	struct qpip_query_device a;
	struct qpip_device_info *i = &qdev->info;
	int usize;

	usize = QPIP_GET_ARG(a, uarg, QPIP_QUERY_DEVICE_SIZE_V1);
	if (usize < 0)
		return usize;
	memset(&a, 0, sizeof(a));
	a.size = usize;
	a.uapi_version = QPIP_UAPI_VERSION;
	a.abi_version = qdev->version;
	a.ctx = ctx->id;
	a.doorbell_offset = (u64)QPIP_MMAP_DOORBELL << PAGE_SHIFT;
	a.kick_offset = (u64)QPIP_MMAP_KICK << PAGE_SHIFT;
	mutex_lock(&qdev->cfg_lock);
	a.max_contexts = i->max_contexts;
	a.max_qps = i->max_qps_per_context;
	a.max_cqs = i->max_cqs_per_context;
	a.max_mrs = i->max_mrs;
	a.max_mr_pages = i->max_mr_pages;
	a.max_queue_depth = i->max_queue_depth;
	a.max_sge = i->max_sge;
	a.max_inline = i->max_inline;
	a.max_udp_payload = i->max_udp_payload;
	a.max_listeners = i->max_listeners;
	a.mtu = i->mtu;
	memcpy(a.mac, i->mac, sizeof(a.mac));
	mutex_unlock(&qdev->cfg_lock);
	a.comp_vectors = qpip_comp_vectors(qdev);
	return qpip_put_arg(uarg, &a, sizeof(a), usize);
}

static int qpip_ioctl_create_cq(struct qpip_ctx *ctx, void __user *uarg)
{
	struct qpip_dev *qdev = ctx->qdev;
	struct qpip_create_cq_args args = {};
	struct qpip_page_list pl = {};
	struct qpip_create_cq a;
	struct qpip_admin_cqe cqe;
	struct qpip_admin_cmd cmd;
	struct qpip_vector *vec;
	struct qpip_cq *cq;
	int usize, ret;

	usize = QPIP_GET_ARG(a, uarg, QPIP_CREATE_CQ_SIZE_V1);
	if (usize < 0)
		return usize;
	if (a.reserved || !qpip_depth_ok(qdev, a.depth))
		return -EINVAL;
	vec = qpip_pick_vector(qdev, a.comp_vector);
	if (IS_ERR(vec))
		return PTR_ERR(vec);

	cq = kzalloc(sizeof(*cq), GFP_KERNEL);
	if (!cq)
		return -ENOMEM;
	if (a.eventfd != -1) {
		cq->eventfd = eventfd_ctx_fdget(a.eventfd);
		if (IS_ERR(cq->eventfd)) {
			ret = PTR_ERR(cq->eventfd);
			cq->eventfd = NULL;
			goto err_free;
		}
	}
	cq->ring = qpip_ring_alloc(qdev, (size_t)a.depth * QPIP_CQE_SIZE);
	if (IS_ERR(cq->ring)) {
		ret = PTR_ERR(cq->ring);
		cq->ring = NULL;
		goto err_free;
	}
	ret = qpip_page_list_alloc(qdev, &pl, cq->ring->dma, cq->ring->npages);
	if (ret)
		goto err_free;
	args.page_list = pl.dma;
	args.npages = cq->ring->npages;
	args.depth = a.depth;
	args.vector = vec->index;
	qpip_cmd_init(&cmd, QPIP_ADMIN_OP_CREATE_CQ, ctx->id, 0, &args, sizeof(args));
	ret = qpip_admin_run(qdev, &cmd, &cqe);
	qpip_page_list_free(qdev, &pl);
	if (ret)
		goto err_free;
	cq->handle = cqe.result0;
	cq->slot = cqe.result1;

	ret = xa_insert(&ctx->cqs, cq->handle, cq, GFP_KERNEL);
	if (ret)
		goto err_destroy;
	ret = qpip_ring_publish(ctx, cq->ring);
	if (ret) {
		xa_erase(&ctx->cqs, cq->handle);
		goto err_destroy;
	}
	qpip_vector_add(vec, cq);

	a.handle = cq->handle;
	a.db_slot = cq->slot;
	a.ring_offset = (u64)cq->ring->cookie << PAGE_SHIFT;
	a.ring_size = (u64)cq->ring->npages << PAGE_SHIFT;
	a.comp_vector_out = vec->index - 1;
	return qpip_put_arg(uarg, &a, sizeof(a), usize);

err_destroy:
	qpip_destroy_in_device(ctx, QPIP_ADMIN_OP_DESTROY_CQ, cq->handle);
err_free:
	qpip_cq_free(ctx, cq, false);
	return ret;
}

/*
 * What the destroy ioctls (DESTROY_CQ, DESTROY_QP, DEREG_MR, DESTROY_LISTENER) share: the
 * handle must be one of this context's (in @xa); the device forgets the object first — so
 * it no longer touches the object's memory — and only then is it taken out of @xa for the
 * caller to free. Returns the object, or an ERR_PTR.
 */
static void *qpip_destroy_handle(struct qpip_ctx *ctx, void __user *uarg, struct xarray *xa,
				 u16 opcode)
{
	struct qpip_admin_cmd cmd;
	struct qpip_handle a;
	void *obj;
	int usize, ret;

	usize = QPIP_GET_ARG(a, uarg, QPIP_HANDLE_SIZE_V1);
	if (usize < 0)
		return ERR_PTR(usize);
	obj = xa_load(xa, a.handle);
	if (!obj)
		return ERR_PTR(-ENOENT);
	qpip_cmd_init(&cmd, opcode, ctx->id, a.handle, NULL, 0);
	ret = qpip_admin_run(ctx->qdev, &cmd, NULL);
	if (ret)
		return ERR_PTR(ret);
	xa_erase(xa, a.handle);
	return obj;
}

static int qpip_ioctl_destroy_cq(struct qpip_ctx *ctx, void __user *uarg)
{
	struct qpip_cq *cq = qpip_destroy_handle(ctx, uarg, &ctx->cqs, QPIP_ADMIN_OP_DESTROY_CQ);

	if (IS_ERR(cq))
		return PTR_ERR(cq);
	qpip_cq_free(ctx, cq, false);
	return 0;
}

static int qpip_ioctl_create_qp(struct qpip_ctx *ctx, void __user *uarg)
{
	struct qpip_dev *qdev = ctx->qdev;
	struct qpip_create_qp_args args = {};
	struct qpip_page_list sq_pl = {}, rq_pl = {};
	struct qpip_create_qp a;
	struct qpip_admin_cqe cqe;
	struct qpip_admin_cmd cmd;
	struct qpip_qp *qp;
	int usize, ret;

	usize = QPIP_GET_ARG(a, uarg, QPIP_CREATE_QP_SIZE_V1);
	if (usize < 0)
		return usize;
	if (a.reserved0 || !qpip_depth_ok(qdev, a.sq_depth) || !qpip_depth_ok(qdev, a.rq_depth))
		return -EINVAL;
	if (!xa_load(&ctx->cqs, a.send_cq) || !xa_load(&ctx->cqs, a.recv_cq))
		return -ENOENT;

	qp = kzalloc(sizeof(*qp), GFP_KERNEL);
	if (!qp)
		return -ENOMEM;
	qp->sq = qpip_ring_alloc(qdev, (size_t)a.sq_depth * QPIP_WQE_SIZE);
	if (IS_ERR(qp->sq)) {
		ret = PTR_ERR(qp->sq);
		qp->sq = NULL;
		goto err_free;
	}
	qp->rq = qpip_ring_alloc(qdev, (size_t)a.rq_depth * QPIP_WQE_SIZE);
	if (IS_ERR(qp->rq)) {
		ret = PTR_ERR(qp->rq);
		qp->rq = NULL;
		goto err_free;
	}
	ret = qpip_page_list_alloc(qdev, &sq_pl, qp->sq->dma, qp->sq->npages);
	if (!ret)
		ret = qpip_page_list_alloc(qdev, &rq_pl, qp->rq->dma, qp->rq->npages);
	if (ret)
		goto err_lists;
	args.sq_page_list = sq_pl.dma;
	args.rq_page_list = rq_pl.dma;
	args.send_cq = a.send_cq;
	args.recv_cq = a.recv_cq;
	args.sq_depth = a.sq_depth;
	args.rq_depth = a.rq_depth;
	args.sq_npages = qp->sq->npages;
	args.rq_npages = qp->rq->npages;
	args.qp_type = a.qp_type;
	args.framing = a.framing;
	qpip_cmd_init(&cmd, QPIP_ADMIN_OP_CREATE_QP, ctx->id, 0, &args, sizeof(args));
	ret = qpip_admin_run(qdev, &cmd, &cqe);
err_lists:
	qpip_page_list_free(qdev, &sq_pl);
	qpip_page_list_free(qdev, &rq_pl);
	if (ret)
		goto err_free;
	qp->handle = cqe.result0;

	ret = xa_insert(&ctx->qps, qp->handle, qp, GFP_KERNEL);
	if (ret)
		goto err_destroy;
	ret = qpip_ring_publish(ctx, qp->sq);
	if (!ret)
		ret = qpip_ring_publish(ctx, qp->rq);
	if (ret) {
		xa_erase(&ctx->qps, qp->handle);
		goto err_destroy;
	}

	a.handle = qp->handle;
	a.db_slot = cqe.result1;
	a.sq_offset = (u64)qp->sq->cookie << PAGE_SHIFT;
	a.sq_size = (u64)qp->sq->npages << PAGE_SHIFT;
	a.rq_offset = (u64)qp->rq->cookie << PAGE_SHIFT;
	a.rq_size = (u64)qp->rq->npages << PAGE_SHIFT;
	return qpip_put_arg(uarg, &a, sizeof(a), usize);

err_destroy:
	qpip_destroy_in_device(ctx, QPIP_ADMIN_OP_DESTROY_QP, qp->handle);
err_free:
	qpip_qp_free(ctx, qp, false);
	return ret;
}

static int qpip_ioctl_destroy_qp(struct qpip_ctx *ctx, void __user *uarg)
{
	struct qpip_qp *qp = qpip_destroy_handle(ctx, uarg, &ctx->qps, QPIP_ADMIN_OP_DESTROY_QP);

	if (IS_ERR(qp))
		return PTR_ERR(qp);
	qpip_qp_free(ctx, qp, false);
	return 0;
}

#define QPIP_MR_ACCESS_ALL (QPIP_MR_ACCESS_LOCAL_WRITE | QPIP_MR_ACCESS_REMOTE_WRITE | \
			    QPIP_MR_ACCESS_REMOTE_READ)

/*
 * Pins the region long-term: the device may write it at any time until deregistration.
 */
static int qpip_mr_pin(struct qpip_mr *mr, unsigned long start)
{
	unsigned int gup = FOLL_LONGTERM | (mr->writable ? FOLL_WRITE : 0);
	long n;
	int ret;

	ret = qpip_lock_account(&mr->mm, mr->npages);
	if (ret)
		return ret;
	while (mr->pinned < mr->npages) {
		n = pin_user_pages_fast(start + (mr->pinned << PAGE_SHIFT),
					min_t(unsigned long, mr->npages - mr->pinned, INT_MAX),
					gup, mr->pages + mr->pinned);
		if (n <= 0)
			return n ? n : -EFAULT;
		mr->pinned += n;
	}
	return 0;
}

static int qpip_ioctl_reg_mr(struct qpip_ctx *ctx, void __user *uarg)
{
	struct qpip_dev *qdev = ctx->qdev;
	struct device *dev = &qdev->pdev->dev;
	struct qpip_reg_mr_args args = {};
	struct qpip_page_list pl = {};
	struct qpip_admin_cqe cqe;
	struct qpip_admin_cmd cmd;
	struct qpip_reg_mr a;
	struct qpip_mr *mr;
	unsigned long offset, i;
	u64 end;
	int usize, ret;

	usize = QPIP_GET_ARG(a, uarg, QPIP_REG_MR_SIZE_V1);
	if (usize < 0)
		return usize;
	if ((a.access & ~QPIP_MR_ACCESS_ALL) || !a.length)
		return -EINVAL;
	/* Bound the length before any arithmetic with it. */
	if (a.length > ((u64)qdev->info.max_mr_pages << PAGE_SHIFT))
		return -EINVAL;
	if (check_add_overflow(a.addr, a.length, &end) ||
	    !access_ok(u64_to_user_ptr(a.addr), a.length))
		return -EFAULT;
	offset = a.addr & ~PAGE_MASK;

	mr = kzalloc(sizeof(*mr), GFP_KERNEL);
	if (!mr)
		return -ENOMEM;
	mr->npages = DIV_ROUND_UP(offset + a.length, PAGE_SIZE);
	ret = -EINVAL;
	if (mr->npages > qdev->info.max_mr_pages)
		goto err;
	mr->writable = a.access & (QPIP_MR_ACCESS_LOCAL_WRITE | QPIP_MR_ACCESS_REMOTE_WRITE);
	ret = -ENOMEM;
	mr->pages = kvcalloc(mr->npages, sizeof(*mr->pages), GFP_KERNEL);
	mr->dma = kvcalloc(mr->npages, sizeof(*mr->dma), GFP_KERNEL);
	if (!mr->pages || !mr->dma)
		goto err;
	ret = qpip_mr_pin(mr, a.addr & PAGE_MASK);
	if (ret)
		goto err;
	for (i = 0; i < mr->npages; i++) {
		mr->dma[i] = dma_map_page(dev, mr->pages[i], 0, PAGE_SIZE,
					  mr->writable ? DMA_BIDIRECTIONAL : DMA_TO_DEVICE);
		if (dma_mapping_error(dev, mr->dma[i])) {
			ret = -ENOMEM;
			goto err;
		}
		mr->mapped++;
	}
	ret = qpip_page_list_alloc(qdev, &pl, mr->dma, mr->npages);
	if (ret)
		goto err;
	args.page_list = pl.dma;
	args.iova = a.addr;
	args.length = a.length;
	args.npages = mr->npages;
	args.first_page_offset = offset;
	args.access = a.access;
	qpip_cmd_init(&cmd, QPIP_ADMIN_OP_REG_MR, ctx->id, 0, &args, sizeof(args));
	ret = qpip_admin_run(qdev, &cmd, &cqe);
	qpip_page_list_free(qdev, &pl);
	if (ret)
		goto err;
	mr->lkey = cqe.result0;
	ret = xa_insert(&ctx->mrs, mr->lkey, mr, GFP_KERNEL);
	if (ret) {
		qpip_destroy_in_device(ctx, QPIP_ADMIN_OP_DEREG_MR, mr->lkey);
		goto err;
	}
	a.lkey = cqe.result0;
	a.rkey = cqe.result1;
	return qpip_put_arg(uarg, &a, sizeof(a), usize);
err:
	qpip_mr_free(qdev, mr, false);
	return ret;
}

static int qpip_ioctl_dereg_mr(struct qpip_ctx *ctx, void __user *uarg)
{
	struct qpip_mr *mr = qpip_destroy_handle(ctx, uarg, &ctx->mrs, QPIP_ADMIN_OP_DEREG_MR);

	if (IS_ERR(mr))
		return PTR_ERR(mr);
	qpip_mr_free(ctx->qdev, mr, false);
	return 0;
}

static int qpip_ioctl_bind(struct qpip_ctx *ctx, void __user *uarg)
{
	struct qpip_bind_args args = {};
	struct qpip_admin_cqe cqe;
	struct qpip_admin_cmd cmd;
	struct qpip_bind a;
	int usize, ret;

	usize = QPIP_GET_ARG(a, uarg, QPIP_BIND_SIZE_V1);
	if (usize < 0)
		return usize;
	if (a.reserved0 || a.reserved1)
		return -EINVAL;
	if (!xa_load(&ctx->qps, a.qp))
		return -ENOENT;
	memcpy(args.addr, a.addr, sizeof(args.addr));
	args.port = a.port;
	qpip_cmd_init(&cmd, QPIP_ADMIN_OP_BIND, ctx->id, a.qp, &args, sizeof(args));
	ret = qpip_admin_run(ctx->qdev, &cmd, &cqe);
	if (ret)
		return ret;
	a.port = cqe.result0;
	return qpip_put_arg(uarg, &a, sizeof(a), usize);
}

static int qpip_ioctl_listen(struct qpip_ctx *ctx, void __user *uarg)
{
	struct qpip_listen_args args = {};
	struct qpip_admin_cqe cqe;
	struct qpip_admin_cmd cmd;
	struct qpip_listen a;
	int usize, ret;

	usize = QPIP_GET_ARG(a, uarg, QPIP_LISTEN_SIZE_V1);
	if (usize < 0)
		return usize;
	if (a.reserved0)
		return -EINVAL;
	memcpy(args.addr, a.addr, sizeof(args.addr));
	args.port = a.port;
	args.backlog = a.backlog;
	qpip_cmd_init(&cmd, QPIP_ADMIN_OP_LISTEN, ctx->id, 0, &args, sizeof(args));
	ret = qpip_admin_run(ctx->qdev, &cmd, &cqe);
	if (ret)
		return ret;
	a.handle = cqe.result0;
	ret = xa_insert(&ctx->listeners, a.handle, xa_mk_value(0), GFP_KERNEL);
	if (ret) {
		qpip_destroy_in_device(ctx, QPIP_ADMIN_OP_DESTROY_LISTENER, a.handle);
		return ret;
	}
	return qpip_put_arg(uarg, &a, sizeof(a), usize);
}

/* A listener is only a value entry: nothing to free. */
static int qpip_ioctl_destroy_listener(struct qpip_ctx *ctx, void __user *uarg)
{
	return PTR_ERR_OR_ZERO(qpip_destroy_handle(ctx, uarg, &ctx->listeners,
						   QPIP_ADMIN_OP_DESTROY_LISTENER));
}

/* Accept, connect and close complete later: their completion becomes an event. */
static int qpip_submit_event_cmd(struct qpip_ctx *ctx, struct qpip_admin_cmd *cmd, u32 kind,
				 u32 qp, u64 user_data)
{
	struct qpip_cmd *c;
	int ret;

	if (atomic_inc_return(&ctx->pending) > QPIP_MAX_PENDING_PER_CTX) {
		atomic_dec(&ctx->pending);
		return -EAGAIN;
	}
	c = kzalloc(sizeof(*c), GFP_KERNEL);
	if (!c) {
		atomic_dec(&ctx->pending);
		return -ENOMEM;
	}
	c->ctx = ctx;
	c->event.kind = kind;
	c->event.qp = qp;
	c->event.user_data = user_data;
	ret = qpip_admin_submit_async(ctx->qdev, c, cmd);
	if (ret) {
		kfree(c);
		atomic_dec(&ctx->pending);
	}
	return ret;
}

static int qpip_ioctl_accept(struct qpip_ctx *ctx, void __user *uarg)
{
	struct qpip_accept_args args = {};
	struct qpip_admin_cmd cmd;
	struct qpip_accept a;
	int usize;

	usize = QPIP_GET_ARG(a, uarg, QPIP_ACCEPT_SIZE_V1);
	if (usize < 0)
		return usize;
	if (a.reserved)
		return -EINVAL;
	if (!xa_load(&ctx->listeners, a.listener) || !xa_load(&ctx->qps, a.qp))
		return -ENOENT;
	args.qp = a.qp;
	qpip_cmd_init(&cmd, QPIP_ADMIN_OP_ACCEPT, ctx->id, a.listener, &args, sizeof(args));
	return qpip_submit_event_cmd(ctx, &cmd, QPIP_EVENT_ACCEPT, a.qp, a.user_data);
}

static int qpip_ioctl_connect(struct qpip_ctx *ctx, void __user *uarg)
{
	struct qpip_connect_args args = {};
	struct qpip_admin_cmd cmd;
	struct qpip_connect a;
	int usize;

	usize = QPIP_GET_ARG(a, uarg, QPIP_CONNECT_SIZE_V1);
	if (usize < 0)
		return usize;
	if (a.reserved0 || a.reserved1)
		return -EINVAL;
	if (!xa_load(&ctx->qps, a.qp))
		return -ENOENT;
	memcpy(args.addr, a.addr, sizeof(args.addr));
	args.port = a.port;
	qpip_cmd_init(&cmd, QPIP_ADMIN_OP_CONNECT, ctx->id, a.qp, &args, sizeof(args));
	return qpip_submit_event_cmd(ctx, &cmd, QPIP_EVENT_CONNECT, a.qp, a.user_data);
}

static int qpip_ioctl_close(struct qpip_ctx *ctx, void __user *uarg)
{
	struct qpip_admin_cmd cmd;
	struct qpip_close a;
	int usize;

	usize = QPIP_GET_ARG(a, uarg, QPIP_CLOSE_SIZE_V1);
	if (usize < 0)
		return usize;
	if (!xa_load(&ctx->qps, a.qp))
		return -ENOENT;
	qpip_cmd_init(&cmd, QPIP_ADMIN_OP_CLOSE, ctx->id, a.qp, NULL, 0);
	return qpip_submit_event_cmd(ctx, &cmd, QPIP_EVENT_CLOSE, a.qp, a.user_data);
}

static int qpip_ioctl_query_stats(struct qpip_ctx *ctx, void __user *uarg)
{
	struct qpip_query_stats *a;
	int usize, ret;

	/* 520 bytes: not on the stack. */
	a = kzalloc(sizeof(*a), GFP_KERNEL);
	if (!a)
		return -ENOMEM;
	usize = qpip_get_arg(a, sizeof(*a), QPIP_QUERY_STATS_SIZE_V1, uarg);
	if (usize < 0) {
		ret = usize;
		goto out;
	}
	ret = qpip_query_stats(ctx->qdev, a->counters);
	if (ret)
		goto out;
	a->count = QPIP_STATS_COUNT;
	ret = qpip_put_arg(uarg, a, sizeof(*a), usize);
out:
	kfree(a);
	return ret;
}

static int qpip_ioctl_addr(struct qpip_ctx *ctx, void __user *uarg, bool add)
{
	struct qpip_addr a;
	int usize;

	usize = QPIP_GET_ARG(a, uarg, QPIP_ADDR_SIZE_V1);
	if (usize < 0)
		return usize;
	if (!capable(CAP_NET_ADMIN))
		return -EPERM;
	if (!qpip_zero(a.reserved, sizeof(a.reserved)))
		return -EINVAL;
	return qpip_change_addr(ctx->qdev, add, a.addr, a.prefix_len);
}

static int qpip_ioctl_add_addr(struct qpip_ctx *ctx, void __user *uarg)
{
	return qpip_ioctl_addr(ctx, uarg, true);
}

static int qpip_ioctl_del_addr(struct qpip_ctx *ctx, void __user *uarg)
{
	return qpip_ioctl_addr(ctx, uarg, false);
}

static int qpip_ioctl_set_mac(struct qpip_ctx *ctx, void __user *uarg)
{
	struct qpip_set_mac a;
	int usize;

	usize = QPIP_GET_ARG(a, uarg, QPIP_SET_MAC_SIZE_V1);
	if (usize < 0)
		return usize;
	if (!capable(CAP_NET_ADMIN))
		return -EPERM;
	if (!qpip_zero(a.reserved, sizeof(a.reserved)))
		return -EINVAL;
	return qpip_set_mac(ctx->qdev, a.mac);
}

typedef int (*qpip_ioctl_fn)(struct qpip_ctx *ctx, void __user *uarg);

static const qpip_ioctl_fn qpip_ioctls[] = {
	[_IOC_NR(QPIP_IOCTL_QUERY_DEVICE)] = qpip_ioctl_query_device,
	[_IOC_NR(QPIP_IOCTL_CREATE_CQ)] = qpip_ioctl_create_cq,
	[_IOC_NR(QPIP_IOCTL_DESTROY_CQ)] = qpip_ioctl_destroy_cq,
	[_IOC_NR(QPIP_IOCTL_CREATE_QP)] = qpip_ioctl_create_qp,
	[_IOC_NR(QPIP_IOCTL_DESTROY_QP)] = qpip_ioctl_destroy_qp,
	[_IOC_NR(QPIP_IOCTL_REG_MR)] = qpip_ioctl_reg_mr,
	[_IOC_NR(QPIP_IOCTL_DEREG_MR)] = qpip_ioctl_dereg_mr,
	[_IOC_NR(QPIP_IOCTL_BIND)] = qpip_ioctl_bind,
	[_IOC_NR(QPIP_IOCTL_LISTEN)] = qpip_ioctl_listen,
	[_IOC_NR(QPIP_IOCTL_DESTROY_LISTENER)] = qpip_ioctl_destroy_listener,
	[_IOC_NR(QPIP_IOCTL_ACCEPT)] = qpip_ioctl_accept,
	[_IOC_NR(QPIP_IOCTL_CONNECT)] = qpip_ioctl_connect,
	[_IOC_NR(QPIP_IOCTL_CLOSE)] = qpip_ioctl_close,
	[_IOC_NR(QPIP_IOCTL_QUERY_STATS)] = qpip_ioctl_query_stats,
	[_IOC_NR(QPIP_IOCTL_ADD_ADDR)] = qpip_ioctl_add_addr,
	[_IOC_NR(QPIP_IOCTL_DEL_ADDR)] = qpip_ioctl_del_addr,
	[_IOC_NR(QPIP_IOCTL_SET_MAC)] = qpip_ioctl_set_mac,
};

static long qpip_ioctl(struct file *filp, unsigned int cmd, unsigned long arg)
{
	struct qpip_ctx *ctx = filp->private_data;
	struct qpip_dev *qdev = ctx->qdev;
	unsigned int nr = _IOC_NR(cmd);
	long ret;

	/* Matched by type and number: the size bits are those of the first version. */
	if (_IOC_TYPE(cmd) != QPIP_IOCTL_TYPE || _IOC_DIR(cmd) != (_IOC_READ | _IOC_WRITE) ||
	    nr >= ARRAY_SIZE(qpip_ioctls) || !qpip_ioctls[nr])
		return -ENOTTY;

	down_read(&qdev->lock);
	if (qpip_ctx_dead(ctx)) {
		ret = -ENODEV;
	} else {
		mutex_lock(&ctx->lock);
		ret = qpip_ioctls[nr](ctx, (void __user *)arg);
		mutex_unlock(&ctx->lock);
	}
	up_read(&qdev->lock);
	return ret;
}

/* ---- events ---- */

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
			    reason == QPIP_ASYNC_REASON_TIMEOUT ? -ETIMEDOUT : -EIO;
		break;
	case QPIP_ASYNC_EVENT_PEER_CLOSED:
		ev.kind = QPIP_EVENT_PEER_CLOSED;
		break;
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

static ssize_t qpip_read(struct file *filp, char __user *buf, size_t count, loff_t *ppos)
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

static __poll_t qpip_poll(struct file *filp, struct poll_table_struct *wait)
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

/* ---- mmap ---- */

/*
 * Only a revoked kick mapping faults (mmap maps the page at once): give it the device's
 * dead page. The file holds qdev, and the mapping holds the file.
 */
static vm_fault_t qpip_io_fault(struct vm_fault *vmf)
{
	struct qpip_ctx *ctx = vmf->vma->vm_file->private_data;

	return vmf_insert_pfn(vmf->vma, vmf->address, page_to_pfn(ctx->qdev->dead_page));
}

static const struct vm_operations_struct qpip_io_vm_ops = {
	.fault = qpip_io_fault,
};

/* The kick register's page of the control BAR: a trapped register, mapped uncached. */
static int qpip_mmap_kick(struct qpip_ctx *ctx, struct vm_area_struct *vma)
{
	struct qpip_dev *qdev = ctx->qdev;
	unsigned long pfn;
	int ret;

	if (vma_pages(vma) != 1)
		return -EINVAL;
	vm_flags_set(vma, VM_IO | VM_DONTCOPY);
	vma->vm_ops = &qpip_io_vm_ops;
	pfn = PHYS_PFN(qdev->ctrl_phys + QPIP_KICK_PAGE_OFFSET);
	/* Against revocation: a reset or removal zaps this mapping after marking us dead. */
	mutex_lock(&qdev->mmap_lock);
	if (qpip_ctx_dead(ctx))
		ret = -ENODEV;
	else
		ret = io_remap_pfn_range(vma, vma->vm_start, pfn, PAGE_SIZE,
					 pgprot_noncached(vma->vm_page_prot));
	mutex_unlock(&qdev->mmap_lock);
	return ret;
}

static int qpip_mmap(struct file *filp, struct vm_area_struct *vma)
{
	struct qpip_ctx *ctx = filp->private_data;
	unsigned long npages;
	struct qpip_ring *r;
	int ret;

	if (!(vma->vm_flags & VM_SHARED))
		return -EINVAL;
	if (vma->vm_flags & VM_EXEC)
		return -EPERM;
	vm_flags_clear(vma, VM_MAYEXEC);
	vm_flags_set(vma, VM_DONTEXPAND | VM_DONTDUMP);

	if (vma->vm_pgoff == QPIP_MMAP_KICK)
		return qpip_mmap_kick(ctx, vma);

	/*
	 * The doorbell page (RAM, like a ring, and not copied into a child: a forked process
	 * must not ring its parent's queues), or a ring: only one of this context's, whole.
	 */
	if (vma->vm_pgoff == QPIP_MMAP_DOORBELL && qpip_ctx_dead(ctx))
		return -ENODEV;		/* the device has forgotten this context's page */
	xa_lock(&ctx->rings);
	if (vma->vm_pgoff == QPIP_MMAP_DOORBELL) {
		r = ctx->db;
		vm_flags_set(vma, VM_DONTCOPY);
	} else {
		r = vma->vm_pgoff <= UINT_MAX ? xa_load(&ctx->rings, vma->vm_pgoff) : NULL;
	}
	if (r)
		kref_get(&r->ref);
	xa_unlock(&ctx->rings);
	if (!r)
		return -EINVAL;
	npages = r->npages;
	if (vma_pages(vma) != npages)
		ret = -EINVAL;
	else
		ret = vm_insert_pages(vma, vma->vm_start, r->pages, &npages);
	kref_put(&r->ref, qpip_ring_release);
	return ret;
}

/* ---- open and release ---- */

static int qpip_open(struct inode *inode, struct file *filp)
{
	struct qpip_dev *qdev = container_of(inode->i_cdev, struct qpip_dev, cdev);
	struct qpip_create_ctx_args args = {};
	struct qpip_admin_cqe cqe;
	struct qpip_admin_cmd cmd;
	struct qpip_ctx *ctx;
	int ret;

	ret = nonseekable_open(inode, filp);
	if (ret)
		return ret;
	ctx = kzalloc(sizeof(*ctx), GFP_KERNEL);
	if (!ctx)
		return -ENOMEM;
	ctx->qdev = qdev;
	ctx->mapping = filp->f_mapping;
	mutex_init(&ctx->lock);
	xa_init(&ctx->cqs);
	xa_init(&ctx->qps);
	xa_init(&ctx->mrs);
	xa_init(&ctx->listeners);
	xa_init(&ctx->rings);
	spin_lock_init(&ctx->ev_lock);
	INIT_LIST_HEAD(&ctx->events);
	INIT_LIST_HEAD(&ctx->lost.ev_node);
	init_waitqueue_head(&ctx->ev_wait);
	atomic_set(&ctx->pending, 0);
	ctx->db = qpip_ring_alloc(qdev, PAGE_SIZE);
	if (IS_ERR(ctx->db)) {
		ret = PTR_ERR(ctx->db);
		kfree(ctx);
		return ret;
	}

	/*
	 * chrdev_open took a reference on the cdev, which pins qdev until release. An open
	 * that raced with remove finds the function gone and says so.
	 */
	down_read(&qdev->lock);
	if (qdev->unbound) {
		ret = -ENODEV;
		goto out;
	}
	args.doorbell_page = ctx->db->dma[0];
	qpip_cmd_init(&cmd, QPIP_ADMIN_OP_CREATE_CTX, 0, 0, &args, sizeof(args));
	ret = qpip_admin_run(qdev, &cmd, &cqe);
	if (ret)
		goto out;
	ctx->id = cqe.result0;
	ctx->generation = qdev->generation;
	spin_lock_irq(&qdev->ctx_lock);
	list_add_tail(&ctx->node, &qdev->contexts);
	qdev->ncontexts++;
	if (ctx->id < ARRAY_SIZE(qdev->live))
		qdev->live[ctx->id] = ctx;
	spin_unlock_irq(&qdev->ctx_lock);
	filp->private_data = ctx;
out:
	up_read(&qdev->lock);
	if (ret) {
		/* A timed-out CREATE_CTX may still be carried out: keep the page then. */
		qpip_ring_put(ctx, ctx->db, ret == -ETIMEDOUT);
		kfree(ctx);
	}
	return ret;
}

static int qpip_release(struct inode *inode, struct file *filp)
{
	struct qpip_ctx *ctx = filp->private_data;
	struct qpip_dev *qdev = ctx->qdev;
	struct qpip_admin_cmd cmd;
	struct qpip_cmd *c, *tmp;
	unsigned long idx;
	struct qpip_cq *cq;
	struct qpip_qp *qp;
	struct qpip_mr *mr;
	bool leak = false;
	int ret;

	down_read(&qdev->lock);
	/* No asynchronous event reaches it any more: the id is about to be free for others. */
	spin_lock_irq(&qdev->ctx_lock);
	if (ctx->id < ARRAY_SIZE(qdev->live) && qdev->live[ctx->id] == ctx)
		qdev->live[ctx->id] = NULL;
	spin_unlock_irq(&qdev->ctx_lock);
	if (!qpip_ctx_dead(ctx)) {
		/* Everything of the context goes in one command; the device stops using it all. */
		qpip_cmd_init(&cmd, QPIP_ADMIN_OP_DESTROY_CTX, ctx->id, 0, NULL, 0);
		ret = qpip_admin_run(qdev, &cmd, NULL);
		if (ret == -ETIMEDOUT) {
			/* The device may still write the memory: better leaked than reused. */
			dev_err(&qdev->pdev->dev,
				"context %u not destroyed in the device; keeping its memory\n",
				ctx->id);
			leak = true;
		}
	}
	spin_lock_irq(&qdev->ctx_lock);
	list_del(&ctx->node);
	qdev->ncontexts--;
	spin_unlock_irq(&qdev->ctx_lock);
	up_read(&qdev->lock);

	qpip_admin_detach_ctx(qdev, ctx);

	xa_for_each(&ctx->qps, idx, qp)
		qpip_qp_free(ctx, qp, leak);
	xa_for_each(&ctx->cqs, idx, cq)
		qpip_cq_free(ctx, cq, leak);
	xa_for_each(&ctx->mrs, idx, mr)
		qpip_mr_free(qdev, mr, leak);
	qpip_ring_put(ctx, ctx->db, leak);
	xa_destroy(&ctx->qps);
	xa_destroy(&ctx->cqs);
	xa_destroy(&ctx->mrs);
	xa_destroy(&ctx->listeners);
	xa_destroy(&ctx->rings);
	list_for_each_entry_safe(c, tmp, &ctx->events, ev_node)
		if (c != &ctx->lost)
			kfree(c);
	mutex_destroy(&ctx->lock);
	kfree(ctx);
	return 0;
}

/*
 * The device was reset or is being removed (qdev->lock held for writing, the generation
 * bumped or unbound set): every context is dead. Revoke their kick mappings (the BAR may
 * be gone) and wake their event readers. Doorbell pages are the contexts' own RAM, which
 * the device has forgotten: they stay mapped, and stores into them reach nobody.
 */
void qpip_contexts_revoke(struct qpip_dev *qdev)
{
	struct qpip_ctx *ctx;

	/* Context ids of the device start afresh: no event may reach the old contexts. */
	spin_lock_irq(&qdev->ctx_lock);
	memset(qdev->live, 0, sizeof(qdev->live));
	spin_unlock_irq(&qdev->ctx_lock);

	mutex_lock(&qdev->mmap_lock);
	list_for_each_entry(ctx, &qdev->contexts, node)
		unmap_mapping_range(ctx->mapping, (loff_t)QPIP_MMAP_KICK << PAGE_SHIFT,
				    PAGE_SIZE, 1);
	mutex_unlock(&qdev->mmap_lock);
	list_for_each_entry(ctx, &qdev->contexts, node)
		wake_up_interruptible_all(&ctx->ev_wait);
}

const struct file_operations qpip_fops = {
	.owner = THIS_MODULE,
	.open = qpip_open,
	.release = qpip_release,
	.read = qpip_read,
	.poll = qpip_poll,
	.mmap = qpip_mmap,
	.unlocked_ioctl = qpip_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
};
