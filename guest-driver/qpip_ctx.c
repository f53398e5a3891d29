// SPDX-License-Identifier: GPL-2.0
/*
 * qpip: contexts — what one open file of /dev/qpipN is.
 *
 * open creates a context in the device with its own doorbell page (a page of RAM the driver
 * allocates, names to the device and maps into this process only); the ioctls (qpip_verbs.c)
 * create the context's objects (CQs, QPs, memory regions, listeners, tripwires) through the
 * admin queue and keep a record of each, so that closing the file — or the process dying —
 * destroys the context in the device first (which stops every DMA into its memory) and then
 * frees the rings and unpins the registered pages.
 *
 * After a reset or removal of the device, the kick mapping of every context is revoked
 * (touching it then finds a page that goes nowhere; the doorbell page is the context's own
 * RAM, which the device has forgotten, so it stays) and every call fails with -ENODEV;
 * release then frees what the device has forgotten already.
 */
#include <linux/capability.h>
#include <linux/cred.h>
#include <linux/fs.h>
#include <linux/mm.h>
#include <linux/slab.h>

#include "qpip_ctx.h"

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

/*
 * Creates a context of @qdev in the device for the calling process, charged to its user:
 * what opening /dev/qpipN makes, and what qpip_ib.ko's user contexts are made of.
 * @mapping is where the context's mmaps live (the file's), for the kick page's revocation;
 * NULL for a context whose mappings are someone else's to revoke.
 */
struct qpip_ctx *qpip_ctx_create(struct qpip_dev *qdev, struct address_space *mapping)
{
	struct qpip_ctx *ctx;
	int ret;

	ctx = kzalloc(sizeof(*ctx), GFP_KERNEL);
	if (!ctx)
		return ERR_PTR(-ENOMEM);
	ctx->qdev = qdev;
	ctx->mapping = mapping;
	mutex_init(&ctx->lock);
	xa_init(&ctx->cqs);
	xa_init(&ctx->qps);
	xa_init(&ctx->mrs);
	xa_init(&ctx->listeners);
	xa_init(&ctx->tripwires);
	xa_init(&ctx->rings);
	xa_init_flags(&ctx->socks, XA_FLAGS_LOCK_IRQ);
	spin_lock_init(&ctx->ev_lock);
	INIT_LIST_HEAD(&ctx->events);
	INIT_LIST_HEAD(&ctx->lost.ev_node);
	init_waitqueue_head(&ctx->ev_wait);
	atomic_set(&ctx->pending, 0);
	/* The context and all it creates are charged to its creator (qpip_quota.c). */
	ctx->user = qpip_user_get(qdev, current_euid());
	if (!ctx->user) {
		kfree(ctx);
		return ERR_PTR(-ENOMEM);
	}
	ctx->quota_exempt = capable(CAP_SYS_RESOURCE);
	ret = qpip_quota_charge(ctx, QPIP_QUOTA_CONTEXTS, 1);
	if (ret)
		goto err_user;
	ctx->db = qpip_ring_alloc(ctx, PAGE_SIZE);
	if (IS_ERR(ctx->db)) {
		ret = PTR_ERR(ctx->db);
		goto err_charged;
	}

	/*
	 * The caller holds a reference on qdev (a file's cdev, or qpip_ib's auxiliary device).
	 * A creation that raced with remove finds the function gone and says so.
	 */
	down_read(&qdev->lock);
	if (qdev->unbound) {
		ret = -ENODEV;
		goto out;
	}
	ret = qpip_cmd_create_ctx(qdev, ctx->db->dma[0], 0, &ctx->id);
	if (ret)
		goto out;
	ctx->generation = qdev->generation;
	spin_lock_irq(&qdev->ctx_lock);
	list_add_tail(&ctx->node, &qdev->contexts);
	qdev->ncontexts++;
	if (ctx->id < ARRAY_SIZE(qdev->live))
		qdev->live[ctx->id] = ctx;
	spin_unlock_irq(&qdev->ctx_lock);
out:
	up_read(&qdev->lock);
	if (!ret)
		return ctx;
	/* A timed-out CREATE_CTX may still be carried out: keep the page then, charged. */
	qpip_ring_put(ctx, ctx->db, ret == -ETIMEDOUT);
	if (ret == -ETIMEDOUT) {
		kfree(ctx);
		return ERR_PTR(ret);
	}
err_charged:
	qpip_quota_uncharge(ctx->user, QPIP_QUOTA_CONTEXTS, 1);
err_user:
	qpip_user_put(qdev, ctx->user);
	kfree(ctx);
	return ERR_PTR(ret);
}
EXPORT_SYMBOL_GPL(qpip_ctx_create);

static int qpip_open(struct inode *inode, struct file *filp)
{
	struct qpip_dev *qdev = container_of(inode->i_cdev, struct qpip_dev, cdev);
	struct qpip_ctx *ctx;
	int ret;

	ret = nonseekable_open(inode, filp);
	if (ret)
		return ret;
	/* chrdev_open took a reference on the cdev, which pins qdev until release. */
	ctx = qpip_ctx_create(qdev, filp->f_mapping);
	if (IS_ERR(ctx))
		return PTR_ERR(ctx);
	filp->private_data = ctx;
	return 0;
}

/*
 * Gives back the user's charges of @ctx that no object frees (the context itself, its
 * listeners and tripwires) and the context's reference to the user's record. Only counts
 * the entries: a listener may be freed already.
 */
static void qpip_ctx_uncharge(struct qpip_ctx *ctx)
{
	unsigned long idx;
	void *entry;

	xa_for_each(&ctx->listeners, idx, entry)
		qpip_quota_uncharge(ctx->user, QPIP_QUOTA_LISTENERS, 1);
	xa_for_each(&ctx->tripwires, idx, entry)
		qpip_quota_uncharge(ctx->user, QPIP_QUOTA_TRIPWIRES, 1);
	qpip_quota_uncharge(ctx->user, QPIP_QUOTA_CONTEXTS, 1);
	qpip_user_put(ctx->qdev, ctx->user);
}

/*
 * Destroys @ctx in the device (which stops every DMA into its memory), then frees its
 * objects' records, rings and pinned pages: what closing the file does.
 */
void qpip_ctx_destroy(struct qpip_ctx *ctx)
{
	struct qpip_dev *qdev = ctx->qdev;
	struct qpip_listener *l;
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
		/*
		 * Everything of the context goes in one command; the device stops using it all.
		 * It removes the tripwires before the CQs and regions they hold busy, which
		 * destroying them one by one would have to do in that order.
		 */
		ret = qpip_cmd_destroy_ctx(qdev, ctx->id);
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
	/* Charged to the user until qpip_ctx_uncharge; their ports go back to the kernel. */
	xa_for_each(&ctx->listeners, idx, l) {
		qpip_port_release(&l->port);
		kfree(l);
	}
	qpip_ring_put(ctx, ctx->db, leak);
	/*
	 * Memory the device may still write stays charged to its user, like the memory itself
	 * stays kept: the user's record then lives on with the charges until the function goes.
	 */
	if (!leak)
		qpip_ctx_uncharge(ctx);
	xa_destroy(&ctx->qps);
	xa_destroy(&ctx->cqs);
	xa_destroy(&ctx->mrs);
	xa_destroy(&ctx->listeners);
	xa_destroy(&ctx->tripwires);
	xa_destroy(&ctx->rings);
	/* Its sockets held the file open: none is left. */
	WARN_ON_ONCE(!xa_empty(&ctx->socks));
	xa_destroy(&ctx->socks);
	qpip_ctx_events_free(ctx);
	mutex_destroy(&ctx->lock);
	kfree(ctx);
}
EXPORT_SYMBOL_GPL(qpip_ctx_destroy);

static int qpip_release(struct inode *inode, struct file *filp)
{
	qpip_ctx_destroy(filp->private_data);
	return 0;
}

/*
 * The ports @ctx's QPs and listeners hold go back to the kernel: the device forgot them
 * at a reset or removal. Under qdev->lock held for writing, which keeps the ioctls out
 * and release from freeing the objects of a context still on qdev->contexts.
 */
static void qpip_ctx_ports_release(struct qpip_ctx *ctx)
{
	struct qpip_listener *l;
	struct qpip_qp *qp;
	unsigned long idx;

	xa_for_each(&ctx->qps, idx, qp)
		qpip_port_release(&qp->port);
	xa_for_each(&ctx->listeners, idx, l)
		qpip_port_release(&l->port);
}

/*
 * The device was reset or is being removed (qdev->lock held for writing, the generation
 * bumped or unbound set): every context is dead. Revoke their kick mappings (the BAR may
 * be gone), give the ports their objects held back to the kernel, and wake their event
 * readers. Doorbell pages are the contexts' own RAM, which the device has forgotten: they
 * stay mapped, and stores into them reach nobody.
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
		if (ctx->mapping)	/* qpip_ib's contexts map no kick page yet */
			unmap_mapping_range(ctx->mapping, (loff_t)QPIP_MMAP_KICK << PAGE_SHIFT,
					    PAGE_SIZE, 1);
	mutex_unlock(&qdev->mmap_lock);
	list_for_each_entry(ctx, &qdev->contexts, node) {
		qpip_ctx_ports_release(ctx);
		qpip_sock_revoke(ctx);
		/* qpip_ib's QPs: each is told its connection is gone, as by an error. */
		spin_lock_irq(&qdev->ctx_lock);
		if (ctx->qp_event)
			ctx->qp_event(ctx->qp_event_data, QPIP_CTX_ALL_QPS, QPIP_ASYNC_EVENT_QP_ERROR,
				      0);
		spin_unlock_irq(&qdev->ctx_lock);
		wake_up_interruptible_all(&ctx->ev_wait);
	}
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
