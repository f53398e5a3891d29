// SPDX-License-Identifier: GPL-2.0
/*
 * qpip: memory the device reaches on its own — rings, registered regions — and the
 * completion vectors the CQ rings interrupt on.
 *
 * Ring memory is ordinary pages, mapped for the device one page at a time (the device takes
 * page lists, so nothing needs to be contiguous) and into the process with vm_insert_pages,
 * which takes a reference on each page: a process that keeps a ring mapped after destroying
 * its object keeps harmless memory, never freed memory. Registered regions are the
 * process's own pages, pinned long-term. What the driver frees of each object once the
 * device no longer uses it (on destroy, or at release) is here too.
 */
#include <linux/capability.h>
#include <linux/dma-mapping.h>
#include <linux/eventfd.h>
#include <linux/mm.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>

#include "qpip_ctx.h"

/* The device's pages are 4 KiB; so must ours be, for rings and page lists alike. */
static_assert(PAGE_SIZE == QPIP_DOORBELL_PAGE_SIZE);

/* ---- locked memory ---- */

/*
 * Memory the device may access at any time is locked memory: registered regions (pinned
 * user pages) and rings (pages the driver allocates for the process) alike. Both count in
 * the creating process's pinned_vm against RLIMIT_MEMLOCK, unless it has CAP_IPC_LOCK (as
 * ib_umem charges RDMA regions: -ENOMEM over it), and in the file's user's
 * QPIP_QUOTA_PINNED (-EDQUOT over it), which bounds what all of a user's processes lock
 * together.
 */
static int qpip_lock_account(struct qpip_ctx *ctx, struct qpip_locked *l, unsigned long npages)
{
	struct mm_struct *mm = current->mm;
	unsigned long limit = rlimit(RLIMIT_MEMLOCK) >> PAGE_SHIFT;
	int ret;

	if (!mm)
		return -EFAULT;
	if (atomic64_add_return(npages, &mm->pinned_vm) > limit && !capable(CAP_IPC_LOCK)) {
		atomic64_sub(npages, &mm->pinned_vm);
		return -ENOMEM;
	}
	ret = qpip_quota_charge(ctx, QPIP_QUOTA_PINNED, npages);
	if (ret) {
		atomic64_sub(npages, &mm->pinned_vm);
		return ret;
	}
	mmgrab(mm);
	l->mm = mm;
	l->user = ctx->user;
	return 0;
}

static void qpip_lock_unaccount(struct qpip_locked *l, unsigned long npages)
{
	if (!l->mm)
		return;
	atomic64_sub(npages, &l->mm->pinned_vm);
	mmdrop(l->mm);
	l->mm = NULL;
	qpip_quota_uncharge(l->user, QPIP_QUOTA_PINNED, npages);
	l->user = NULL;
}

/*
 * Charges @l's @npages to the calling process instead of the one that allocated them,
 * within the caller's RLIMIT_MEMLOCK (left where they are if it has no room): a prefork
 * server's worker accepting a connection that the master, or another worker, offered.
 * The user's quota is the same context's either way.
 */
static void qpip_lock_move(struct qpip_locked *l, unsigned long npages)
{
	struct mm_struct *mm = current->mm;
	unsigned long limit = rlimit(RLIMIT_MEMLOCK) >> PAGE_SHIFT;

	if (!l->mm || !mm || l->mm == mm)
		return;
	if (atomic64_add_return(npages, &mm->pinned_vm) > limit && !capable(CAP_IPC_LOCK)) {
		atomic64_sub(npages, &mm->pinned_vm);
		return;
	}
	atomic64_sub(npages, &l->mm->pinned_vm);
	mmdrop(l->mm);
	mmgrab(mm);
	l->mm = mm;
}

/* ---- rings ---- */

/* @r's pages charged to the calling process from now on (qpip_lock_move). */
void qpip_ring_rehome(struct qpip_ring *r)
{
	if (r)
		qpip_lock_move(&r->locked, r->npages);
}

void qpip_ring_release(struct kref *ref)
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
struct qpip_ring *qpip_ring_alloc(struct qpip_ctx *ctx, size_t bytes)
{
	struct qpip_dev *qdev = ctx->qdev;
	struct qpip_ring *r;
	unsigned int i;
	int ret;

	r = kzalloc(sizeof(*r), GFP_KERNEL);
	if (!r)
		return ERR_PTR(-ENOMEM);
	kref_init(&r->ref);
	r->dma_dev = &qdev->pdev->dev;
	r->npages = DIV_ROUND_UP(bytes, PAGE_SIZE);
	ret = qpip_lock_account(ctx, &r->locked, r->npages);
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
	qpip_lock_unaccount(&r->locked, r->npages);
	kref_put(&r->ref, qpip_ring_release);
	return ERR_PTR(ret);
}

/*
 * Gives @r an mmap offset in @ctx. Offsets come from one counter of the device, so an
 * offset seen in another context names nothing in this one.
 */
int qpip_ring_publish(struct qpip_ctx *ctx, struct qpip_ring *r)
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
void qpip_ring_put(struct qpip_ctx *ctx, struct qpip_ring *r, bool leak)
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
	qpip_lock_unaccount(&r->locked, r->npages);
	kref_put(&r->ref, qpip_ring_release);
}

/* ---- registered regions ---- */

/*
 * Pins the region long-term: the device may write it at any time until deregistration.
 */
static int qpip_mr_pin(struct qpip_ctx *ctx, struct qpip_mr *mr, unsigned long start)
{
	unsigned int gup = FOLL_LONGTERM | (mr->writable ? FOLL_WRITE : 0);
	long n;
	int ret;

	ret = qpip_lock_account(ctx, &mr->locked, mr->npages);
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

/*
 * The pages of @length bytes of the caller's memory from @addr (checked by the caller to
 * be user addresses of at most max_mr_pages pages' worth), pinned and mapped for the
 * device. An ERR_PTR on failure.
 */
struct qpip_mr *qpip_mr_alloc(struct qpip_ctx *ctx, u64 addr, u64 length, bool writable)
{
	struct qpip_dev *qdev = ctx->qdev;
	struct device *dev = &qdev->pdev->dev;
	unsigned long offset = addr & ~PAGE_MASK, i;
	struct qpip_mr *mr;
	int ret;

	mr = kzalloc(sizeof(*mr), GFP_KERNEL);
	if (!mr)
		return ERR_PTR(-ENOMEM);
	mr->npages = DIV_ROUND_UP(offset + length, PAGE_SIZE);
	ret = -EINVAL;
	if (mr->npages > qdev->info.max_mr_pages)
		goto err;
	mr->writable = writable;
	ret = qpip_quota_charge(ctx, QPIP_QUOTA_MRS, 1);
	if (ret)
		goto err;
	mr->user = ctx->user;
	ret = -ENOMEM;
	mr->pages = kvcalloc(mr->npages, sizeof(*mr->pages), GFP_KERNEL);
	mr->dma = kvcalloc(mr->npages, sizeof(*mr->dma), GFP_KERNEL);
	if (!mr->pages || !mr->dma)
		goto err;
	ret = qpip_mr_pin(ctx, mr, addr & PAGE_MASK);
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
	return mr;
err:
	qpip_mr_free(qdev, mr, false);
	return ERR_PTR(ret);
}

/* The device no longer uses @mr: unpin it. With @leak the device may still write it. */
void qpip_mr_free(struct qpip_dev *qdev, struct qpip_mr *mr, bool leak)
{
	enum dma_data_direction dir = mr->writable ? DMA_BIDIRECTIONAL : DMA_TO_DEVICE;
	unsigned long i;

	if (leak)
		return;
	for (i = 0; i < mr->mapped; i++)
		dma_unmap_page(&qdev->pdev->dev, mr->dma[i], PAGE_SIZE, dir);
	if (mr->pinned)
		unpin_user_pages_dirty_lock(mr->pages, mr->pinned, mr->writable);
	qpip_lock_unaccount(&mr->locked, mr->npages);
	qpip_quota_uncharge(mr->user, QPIP_QUOTA_MRS, 1);
	kvfree(mr->pages);
	kvfree(mr->dma);
	kfree(mr);
}

/* ---- completion vectors ---- */

struct qpip_vector *qpip_pick_vector(struct qpip_dev *qdev, u32 want)
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

/*
 * CQ @cq of @ctx, a ring of @depth entries made on the device (its doorbell slot known),
 * interrupts on @vec from now on.
 */
void qpip_vector_add(struct qpip_ctx *ctx, struct qpip_vector *vec, struct qpip_cq *cq,
		     u32 depth)
{
	unsigned long flags;

	cq->depth = depth;
	cq->head = page_address(ctx->db->pages[0]) + QPIP_DB_CQ_BASE +
		   cq->slot * QPIP_DB_CQ_STRIDE + QPIP_DB_CQ_HEAD;
	cq->arm = page_address(ctx->db->pages[0]) + QPIP_DB_CQ_BASE +
		  cq->slot * QPIP_DB_CQ_STRIDE + QPIP_DB_CQ_ARM_SEQ;
	/* The device zeroed the slot: nothing taken, never armed. */
	cq->woken_head = 0;
	cq->woken_arm = 0;
	spin_lock_irqsave(&vec->lock, flags);
	list_add_tail(&cq->vec_node, &vec->cqs);
	WRITE_ONCE(vec->ncqs, vec->ncqs + 1);
	cq->vec = vec;
	spin_unlock_irqrestore(&vec->lock, flags);
}

void qpip_vector_del(struct qpip_cq *cq)
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
 * The network interface's CQs interrupt on @vec (@nd), or no longer (NULL: once this
 * returns, the interrupt handler no longer calls into it). They count as one more CQ on
 * the vector, so contexts' CQs go elsewhere first.
 */
void qpip_vector_set_netdev(struct qpip_vector *vec, struct qpip_netdev *nd)
{
	unsigned long flags;

	spin_lock_irqsave(&vec->lock, flags);
	if (nd && !vec->netdev)
		WRITE_ONCE(vec->ncqs, vec->ncqs + 1);
	else if (!nd && vec->netdev)
		WRITE_ONCE(vec->ncqs, vec->ncqs - 1);
	vec->netdev = nd;
	spin_unlock_irqrestore(&vec->lock, flags);
}

/* Entry @idx of @r, a ring of @depth entries of @size bytes (entries never cross a page). */
void *qpip_ring_entry(struct qpip_ring *r, u32 depth, u32 size, u32 idx)
{
	u32 off = (idx & (depth - 1)) * size;

	return page_address(r->pages[off >> PAGE_SHIFT]) + (off & ~PAGE_MASK);
}

/*
 * Has the device written CQE @idx of CQ ring @r (@depth entries): does its owner bit
 * match the pass around the ring @idx is in? The consumers' test, shared.
 */
bool qpip_cqe_written(struct qpip_ring *r, u32 depth, u32 idx)
{
	const struct qpip_cqe *e = qpip_ring_entry(r, depth, QPIP_CQE_SIZE, idx);

	return (READ_ONCE(e->owner) & 1) == (((idx / depth) & 1) ^ 1);
}

/*
 * Does @cq hold a completion its consumer has not taken: is the entry at the head the
 * doorbell page holds written in the current pass (its owner bit, as the consumers read
 * it)? The device writes an entry before it raises the vector, so an entry it raised the
 * vector for is seen here, unless its consumer took it already (below). A consumer that
 * takes entries before it stores its head only makes this say yes when the answer is no,
 * which costs a wake-up, never loses one. Called under vec->lock.
 */
static bool qpip_cq_pending(struct qpip_cq *cq)
{
	u32 idx = READ_ONCE(*cq->head);
	u32 arm = READ_ONCE(*cq->arm);
	bool pending = qpip_cqe_written(cq->ring, cq->depth, idx);

	/*
	 * Or armed since its waiters were last woken, and entries taken since: the usual
	 * consumer arms, then polls what came meanwhile — the device raised the vector for
	 * that arm, but the entry it raised it for may be taken before this looks. Its waiter
	 * must still wake (the arm is spent: nothing else would wake it). At most one
	 * wake-up per arm, and none for a CQ armed with nothing taken since.
	 */
	if (!pending && arm != cq->woken_arm && idx != cq->woken_head)
		pending = true;
	if (pending) {
		cq->woken_head = idx;
		cq->woken_arm = arm;
	}
	return pending;
}

/*
 * A completion vector fired: the device raised it for an armed CQ. Which one it does not
 * say, so each CQ on the vector that holds a completion not yet taken wakes its waiters.
 * The others are left alone: a vector is shared by many CQs (a process's sockets, several
 * processes, qpip_ib's CQs), and waking them all would wake processes for nothing, and
 * give an RDMA completion channel events with nothing to poll. The network interface's
 * NAPI is scheduled on each interrupt of its vector: it polls its own rings.
 */
irqreturn_t qpip_cq_irq(int irq, void *data)
{
	struct qpip_vector *vec = data;
	struct qpip_cq *cq;

	atomic64_inc(&vec->count);
	spin_lock(&vec->lock);
	list_for_each_entry(cq, &vec->cqs, vec_node) {
		if (!qpip_cq_pending(cq))
			continue;
		if (cq->eventfd)
			eventfd_signal(cq->eventfd);
		if (cq->wake)
			wake_up_interruptible_all(cq->wake);
		if (cq->notify)
			cq->notify(cq->notify_data);
	}
	if (vec->netdev)
		qpip_netdev_irq(vec->netdev);
	spin_unlock(&vec->lock);
	return IRQ_HANDLED;
}

/*
 * Has @fn(@data) called on each interrupt of CQ @handle of @ctx (from the interrupt
 * handler), or no longer (NULL: once this returns, it is not called any more): how
 * qpip_ib.ko's CQs reach the RDMA core's completion handler. Works on a context the device
 * forgot, whose CQs are still recorded until it is destroyed.
 */
int qpip_ctx_cq_notify(struct qpip_ctx *ctx, u32 handle, void (*fn)(void *data), void *data)
{
	struct qpip_cq *cq;
	unsigned long flags;
	int ret = -ENOENT;

	mutex_lock(&ctx->lock);
	cq = xa_load(&ctx->cqs, handle);
	if (cq && cq->vec) {
		spin_lock_irqsave(&cq->vec->lock, flags);
		cq->notify = fn;
		cq->notify_data = data;
		spin_unlock_irqrestore(&cq->vec->lock, flags);
		ret = 0;
	}
	mutex_unlock(&ctx->lock);
	return ret;
}
EXPORT_SYMBOL_GPL(qpip_ctx_cq_notify);

/*
 * The ring of @ctx whose mmap offset (as CREATE_CQ and CREATE_QP return it) is @offset,
 * with a reference the caller drops with qpip_ring_unref; NULL if there is none.
 */
struct qpip_ring *qpip_ctx_ring_get(struct qpip_ctx *ctx, u64 offset)
{
	struct qpip_ring *r = NULL;
	u64 pgoff = offset >> PAGE_SHIFT;

	xa_lock(&ctx->rings);
	if (pgoff <= UINT_MAX && !(offset & ~PAGE_MASK))
		r = xa_load(&ctx->rings, pgoff);
	if (r)
		kref_get(&r->ref);
	xa_unlock(&ctx->rings);
	return r;
}
EXPORT_SYMBOL_GPL(qpip_ctx_ring_get);

void qpip_ring_unref(struct qpip_ring *r)
{
	kref_put(&r->ref, qpip_ring_release);
}
EXPORT_SYMBOL_GPL(qpip_ring_unref);

/* ---- objects: what the driver frees once the device no longer uses them ---- */

/*
 * With @leak the device may still use the object: its quota stays charged, as its memory
 * stays kept (the user's record then outlives the file; see qpip_release).
 */
void qpip_cq_free(struct qpip_ctx *ctx, struct qpip_cq *cq, bool leak)
{
	qpip_vector_del(cq);
	if (cq->eventfd)
		eventfd_ctx_put(cq->eventfd);
	qpip_ring_put(ctx, cq->ring, leak);
	if (!leak)
		qpip_quota_uncharge(cq->user, QPIP_QUOTA_CQS, 1);
	kfree(cq);
}

void qpip_qp_free(struct qpip_ctx *ctx, struct qpip_qp *qp, bool leak)
{
	/* Even with @leak: a port held too long by nobody is harmless (qpip_ports.c). */
	qpip_port_release(&qp->port);
	qpip_ring_put(ctx, qp->sq, leak);
	qpip_ring_put(ctx, qp->rq, leak);
	if (!leak)
		qpip_quota_uncharge(qp->user, QPIP_QUOTA_QPS, 1);
	kfree(qp);
}
