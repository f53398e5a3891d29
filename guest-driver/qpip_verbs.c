// SPDX-License-Identifier: GPL-2.0
/*
 * qpip: the ioctls of a context — its objects (CQs, QPs, memory regions, listeners), its
 * connections, and the device's statistics and configuration.
 *
 * Every argument is size-versioned (include/uapi/qpip.h). Each object the device creates
 * is recorded in the context's tables, so that release can free it; handles are the
 * device's object numbers, looked up in those tables before anything reaches the device:
 * another context's handle is -ENOENT here already. The commands themselves are in
 * qpip_cmd.c.
 */
#include <linux/capability.h>
#include <linux/log2.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "qpip_ctx.h"

static_assert(sizeof(((struct qpip_query_stats *)0)->counters) == sizeof(struct qpip_stats));

/* ---- objects ---- */

/* A ring of @bytes into *@rp; on failure *@rp stays NULL, for the object's free. */
static int qpip_obj_ring(struct qpip_dev *qdev, size_t bytes, struct qpip_ring **rp)
{
	struct qpip_ring *r = qpip_ring_alloc(qdev, bytes);

	if (IS_ERR(r))
		return PTR_ERR(r);
	*rp = r;
	return 0;
}

/*
 * Records an object the device just created: @obj under @handle in @xa, and its @rings
 * given mmap offsets. On failure nothing is recorded (offsets already given go with the
 * rings) and the object is destroyed in the device with @destroy — the ioctl fails, so the
 * object must not live on there, holding the context's resources. The driver's part is
 * still the caller's to free.
 */
static int qpip_obj_record(struct qpip_ctx *ctx, struct xarray *xa, u32 handle, void *obj,
			   struct qpip_ring *const *rings, unsigned int nrings,
			   int (*destroy)(struct qpip_dev *qdev, u32 ctx, u32 handle))
{
	unsigned int i;
	int ret;

	ret = xa_insert(xa, handle, obj, GFP_KERNEL);
	for (i = 0; !ret && i < nrings; i++) {
		ret = qpip_ring_publish(ctx, rings[i]);
		if (ret)
			xa_erase(xa, handle);
	}
	if (ret)
		destroy(ctx->qdev, ctx->id, handle);
	return ret;
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
	struct qpip_cq_params p = {};
	struct qpip_cq_result res;
	struct qpip_create_cq a;
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
	ret = qpip_obj_ring(qdev, (size_t)a.depth * QPIP_CQE_SIZE, &cq->ring);
	if (ret)
		goto err_free;
	p.pages = cq->ring->dma;
	p.npages = cq->ring->npages;
	p.depth = a.depth;
	p.vector = vec->index;
	ret = qpip_cmd_create_cq(qdev, ctx->id, &p, &res);
	if (ret)
		goto err_free;
	cq->handle = res.handle;
	cq->slot = res.db_slot;
	ret = qpip_obj_record(ctx, &ctx->cqs, cq->handle, cq, &cq->ring, 1, qpip_cmd_destroy_cq);
	if (ret)
		goto err_free;
	qpip_vector_add(vec, cq);

	a.handle = cq->handle;
	a.db_slot = cq->slot;
	a.ring_offset = (u64)cq->ring->cookie << PAGE_SHIFT;
	a.ring_size = (u64)cq->ring->npages << PAGE_SHIFT;
	a.comp_vector_out = vec->index - 1;
	return qpip_put_arg(uarg, &a, sizeof(a), usize);

err_free:
	qpip_cq_free(ctx, cq, false);
	return ret;
}

static int qpip_ioctl_create_qp(struct qpip_ctx *ctx, void __user *uarg)
{
	struct qpip_dev *qdev = ctx->qdev;
	struct qpip_qp_params p = {};
	struct qpip_qp_result res;
	struct qpip_create_qp a;
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
	ret = qpip_obj_ring(qdev, (size_t)a.sq_depth * QPIP_WQE_SIZE, &qp->sq);
	if (!ret)
		ret = qpip_obj_ring(qdev, (size_t)a.rq_depth * QPIP_WQE_SIZE, &qp->rq);
	if (ret)
		goto err_free;
	p.sq_pages = qp->sq->dma;
	p.sq_npages = qp->sq->npages;
	p.sq_depth = a.sq_depth;
	p.rq_pages = qp->rq->dma;
	p.rq_npages = qp->rq->npages;
	p.rq_depth = a.rq_depth;
	p.send_cq = a.send_cq;
	p.recv_cq = a.recv_cq;
	p.qp_type = a.qp_type;
	p.framing = a.framing;
	ret = qpip_cmd_create_qp(qdev, ctx->id, &p, &res);
	if (ret)
		goto err_free;
	qp->handle = res.handle;
	ret = qpip_obj_record(ctx, &ctx->qps, qp->handle, qp,
			      (struct qpip_ring *const []){ qp->sq, qp->rq }, 2, qpip_cmd_destroy_qp);
	if (ret)
		goto err_free;

	a.handle = qp->handle;
	a.db_slot = res.db_slot;
	a.sq_offset = (u64)qp->sq->cookie << PAGE_SHIFT;
	a.sq_size = (u64)qp->sq->npages << PAGE_SHIFT;
	a.rq_offset = (u64)qp->rq->cookie << PAGE_SHIFT;
	a.rq_size = (u64)qp->rq->npages << PAGE_SHIFT;
	return qpip_put_arg(uarg, &a, sizeof(a), usize);

err_free:
	qpip_qp_free(ctx, qp, false);
	return ret;
}

#define QPIP_MR_ACCESS_ALL (QPIP_MR_ACCESS_LOCAL_WRITE | QPIP_MR_ACCESS_REMOTE_WRITE | \
			    QPIP_MR_ACCESS_REMOTE_READ)

static int qpip_ioctl_reg_mr(struct qpip_ctx *ctx, void __user *uarg)
{
	struct qpip_dev *qdev = ctx->qdev;
	struct qpip_mr_params p = {};
	struct qpip_mr_result res;
	struct qpip_reg_mr a;
	struct qpip_mr *mr;
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

	mr = qpip_mr_alloc(qdev, a.addr, a.length,
			   a.access & (QPIP_MR_ACCESS_LOCAL_WRITE | QPIP_MR_ACCESS_REMOTE_WRITE));
	if (IS_ERR(mr))
		return PTR_ERR(mr);
	p.pages = mr->dma;
	p.npages = mr->npages;
	p.iova = a.addr;
	p.length = a.length;
	p.first_page_offset = a.addr & ~PAGE_MASK;
	p.access = a.access;
	ret = qpip_cmd_reg_mr(qdev, ctx->id, &p, &res);
	if (ret)
		goto err_free;
	mr->lkey = res.lkey;
	ret = qpip_obj_record(ctx, &ctx->mrs, mr->lkey, mr, NULL, 0, qpip_cmd_dereg_mr);
	if (ret)
		goto err_free;
	a.lkey = res.lkey;
	a.rkey = res.rkey;
	return qpip_put_arg(uarg, &a, sizeof(a), usize);

err_free:
	qpip_mr_free(qdev, mr, false);
	return ret;
}

/*
 * What the destroy ioctls (DESTROY_CQ, DESTROY_QP, DEREG_MR, DESTROY_LISTENER) share: the
 * handle must be one of this context's (in @xa); the device forgets the object first — so
 * it no longer touches the object's memory — and only then is it taken out of @xa for the
 * caller to free. Returns the object, or an ERR_PTR.
 */
static void *qpip_destroy_handle(struct qpip_ctx *ctx, void __user *uarg, struct xarray *xa,
				 int (*destroy)(struct qpip_dev *qdev, u32 ctx, u32 handle))
{
	struct qpip_handle a;
	void *obj;
	int usize, ret;

	usize = QPIP_GET_ARG(a, uarg, QPIP_HANDLE_SIZE_V1);
	if (usize < 0)
		return ERR_PTR(usize);
	obj = xa_load(xa, a.handle);
	if (!obj)
		return ERR_PTR(-ENOENT);
	ret = destroy(ctx->qdev, ctx->id, a.handle);
	if (ret)
		return ERR_PTR(ret);
	xa_erase(xa, a.handle);
	return obj;
}

static int qpip_ioctl_destroy_cq(struct qpip_ctx *ctx, void __user *uarg)
{
	struct qpip_cq *cq = qpip_destroy_handle(ctx, uarg, &ctx->cqs, qpip_cmd_destroy_cq);

	if (IS_ERR(cq))
		return PTR_ERR(cq);
	qpip_cq_free(ctx, cq, false);
	return 0;
}

static int qpip_ioctl_destroy_qp(struct qpip_ctx *ctx, void __user *uarg)
{
	struct qpip_qp *qp = qpip_destroy_handle(ctx, uarg, &ctx->qps, qpip_cmd_destroy_qp);

	if (IS_ERR(qp))
		return PTR_ERR(qp);
	qpip_qp_free(ctx, qp, false);
	return 0;
}

static int qpip_ioctl_dereg_mr(struct qpip_ctx *ctx, void __user *uarg)
{
	struct qpip_mr *mr = qpip_destroy_handle(ctx, uarg, &ctx->mrs, qpip_cmd_dereg_mr);

	if (IS_ERR(mr))
		return PTR_ERR(mr);
	qpip_mr_free(ctx->qdev, mr, false);
	return 0;
}

/* A listener is only a value entry: nothing to free. */
static int qpip_ioctl_destroy_listener(struct qpip_ctx *ctx, void __user *uarg)
{
	return PTR_ERR_OR_ZERO(qpip_destroy_handle(ctx, uarg, &ctx->listeners,
						   qpip_cmd_destroy_listener));
}

/* ---- connections ---- */

static int qpip_ioctl_bind(struct qpip_ctx *ctx, void __user *uarg)
{
	struct qpip_bind a;
	int usize, ret;

	usize = QPIP_GET_ARG(a, uarg, QPIP_BIND_SIZE_V1);
	if (usize < 0)
		return usize;
	if (a.reserved0 || a.reserved1)
		return -EINVAL;
	if (!xa_load(&ctx->qps, a.qp))
		return -ENOENT;
	ret = qpip_cmd_bind(ctx->qdev, ctx->id, a.qp, a.addr, &a.port);
	if (ret)
		return ret;
	return qpip_put_arg(uarg, &a, sizeof(a), usize);
}

static int qpip_ioctl_listen(struct qpip_ctx *ctx, void __user *uarg)
{
	struct qpip_listen a;
	int usize, ret;

	usize = QPIP_GET_ARG(a, uarg, QPIP_LISTEN_SIZE_V1);
	if (usize < 0)
		return usize;
	if (a.reserved0)
		return -EINVAL;
	ret = qpip_cmd_listen(ctx->qdev, ctx->id, a.addr, a.port, a.backlog, &a.handle);
	if (ret)
		return ret;
	ret = qpip_obj_record(ctx, &ctx->listeners, a.handle, xa_mk_value(0), NULL, 0,
			      qpip_cmd_destroy_listener);
	if (ret)
		return ret;
	return qpip_put_arg(uarg, &a, sizeof(a), usize);
}

/*
 * Accept, connect and close complete later: the record their completion becomes, counted
 * against the context's limit of commands outstanding. An ERR_PTR when over it.
 */
static struct qpip_cmd *qpip_event_cmd_alloc(struct qpip_ctx *ctx, u32 kind, u32 qp,
					     u64 user_data)
{
	struct qpip_cmd *c;

	if (atomic_inc_return(&ctx->pending) > QPIP_MAX_PENDING_PER_CTX) {
		atomic_dec(&ctx->pending);
		return ERR_PTR(-EAGAIN);
	}
	c = kzalloc(sizeof(*c), GFP_KERNEL);
	if (!c) {
		atomic_dec(&ctx->pending);
		return ERR_PTR(-ENOMEM);
	}
	c->ctx = ctx;
	c->event.kind = kind;
	c->event.qp = qp;
	c->event.user_data = user_data;
	return c;
}

/*
 * @c was submitted with the result @ret, which it returns. On success @c belongs to the
 * admin queue; on failure it is still ours, and freed.
 */
static int qpip_event_cmd_sent(struct qpip_ctx *ctx, struct qpip_cmd *c, int ret)
{
	if (ret) {
		kfree(c);
		atomic_dec(&ctx->pending);
	}
	return ret;
}

static int qpip_ioctl_accept(struct qpip_ctx *ctx, void __user *uarg)
{
	struct qpip_accept a;
	struct qpip_cmd *c;
	int usize;

	usize = QPIP_GET_ARG(a, uarg, QPIP_ACCEPT_SIZE_V1);
	if (usize < 0)
		return usize;
	if (a.reserved)
		return -EINVAL;
	if (!xa_load(&ctx->listeners, a.listener) || !xa_load(&ctx->qps, a.qp))
		return -ENOENT;
	c = qpip_event_cmd_alloc(ctx, QPIP_EVENT_ACCEPT, a.qp, a.user_data);
	if (IS_ERR(c))
		return PTR_ERR(c);
	return qpip_event_cmd_sent(ctx, c, qpip_cmd_accept(ctx->qdev, c, ctx->id, a.listener,
							    a.qp));
}

static int qpip_ioctl_connect(struct qpip_ctx *ctx, void __user *uarg)
{
	struct qpip_connect a;
	struct qpip_cmd *c;
	int usize;

	usize = QPIP_GET_ARG(a, uarg, QPIP_CONNECT_SIZE_V1);
	if (usize < 0)
		return usize;
	if (a.reserved0 || a.reserved1)
		return -EINVAL;
	if (!xa_load(&ctx->qps, a.qp))
		return -ENOENT;
	c = qpip_event_cmd_alloc(ctx, QPIP_EVENT_CONNECT, a.qp, a.user_data);
	if (IS_ERR(c))
		return PTR_ERR(c);
	return qpip_event_cmd_sent(ctx, c, qpip_cmd_connect(ctx->qdev, c, ctx->id, a.qp,
							     a.addr, a.port));
}

static int qpip_ioctl_close(struct qpip_ctx *ctx, void __user *uarg)
{
	struct qpip_close a;
	struct qpip_cmd *c;
	int usize;

	usize = QPIP_GET_ARG(a, uarg, QPIP_CLOSE_SIZE_V1);
	if (usize < 0)
		return usize;
	if (!xa_load(&ctx->qps, a.qp))
		return -ENOENT;
	c = qpip_event_cmd_alloc(ctx, QPIP_EVENT_CLOSE, a.qp, a.user_data);
	if (IS_ERR(c))
		return PTR_ERR(c);
	return qpip_event_cmd_sent(ctx, c, qpip_cmd_close(ctx->qdev, c, ctx->id, a.qp));
}

/* ---- the device ---- */

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

long qpip_ioctl(struct file *filp, unsigned int cmd, unsigned long arg)
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
