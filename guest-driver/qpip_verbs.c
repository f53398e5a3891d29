// SPDX-License-Identifier: GPL-2.0
/*
 * qpip: the ioctls of a context — its objects (CQs, QPs, memory regions, listeners,
 * tripwires), its connections, and the device's statistics and configuration.
 *
 * Every argument is size-versioned (include/uapi/qpip.h): qpip_ioctl copies it in, and
 * back out where the ioctl returns something, as the ioctl's entry in qpip_ioctls says; the
 * handlers see only the kernel's copy. Each object the device creates is recorded in the
 * context's tables, so that release can free it; handles are the device's object numbers,
 * looked up in those tables before anything reaches the device: another context's handle
 * is -ENOENT here already. The commands themselves are in qpip_cmd.c.
 */
#include <linux/capability.h>
#include <linux/log2.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "qpip_ctx.h"

/* The uapi's counters are the device's first ones. */
static_assert(sizeof(((struct qpip_query_stats *)0)->counters) <= sizeof(struct qpip_stats));

/* ---- objects ---- */

/* Where the context records its objects of @type. */
static struct xarray *qpip_objs(struct qpip_ctx *ctx, enum qpip_obj_type type)
{
	switch (type) {
	case QPIP_OBJ_CQ:
		return &ctx->cqs;
	case QPIP_OBJ_QP:
		return &ctx->qps;
	case QPIP_OBJ_MR:
		return &ctx->mrs;
	case QPIP_OBJ_TRIPWIRE:
		return &ctx->tripwires;
	case QPIP_OBJ_LISTENER:
		break;
	}
	return &ctx->listeners;
}

/*
 * A ring of @depth entries of @entry_size bytes into *@rp; on failure *@rp stays NULL, for
 * the object's free.
 */
static int qpip_obj_ring(struct qpip_ctx *ctx, u32 depth, size_t entry_size,
			 struct qpip_ring **rp)
{
	struct qpip_ring *r = qpip_ring_alloc(ctx, (size_t)depth * entry_size);

	if (IS_ERR(r))
		return PTR_ERR(r);
	*rp = r;
	return 0;
}

/* What the device is told of @r, a ring of @depth entries. */
static struct qpip_ring_params qpip_ring_params_of(const struct qpip_ring *r, u32 depth)
{
	return (struct qpip_ring_params){ .pages = r->dma, .npages = r->npages, .depth = depth };
}

/* Where the process maps @r: its mmap offset and length. */
static void qpip_ring_mapping(const struct qpip_ring *r, u64 *offset, u64 *size)
{
	*offset = (u64)r->cookie << PAGE_SHIFT;
	*size = (u64)r->npages << PAGE_SHIFT;
}

/*
 * Records an object the device just created: @obj under @handle in the table of @type, and
 * its @rings given mmap offsets. On failure nothing is recorded (offsets already given go
 * with the rings) and the object is destroyed in the device — the ioctl fails, so the
 * object must not live on there, holding the context's resources. The driver's part is
 * still the caller's to free.
 */
static int qpip_obj_record(struct qpip_ctx *ctx, enum qpip_obj_type type, u32 handle, void *obj,
			   struct qpip_ring *const *rings, unsigned int nrings)
{
	struct xarray *xa = qpip_objs(ctx, type);
	unsigned int i;
	int ret;

	ret = xa_insert(xa, handle, obj, GFP_KERNEL);
	for (i = 0; !ret && i < nrings; i++) {
		ret = qpip_ring_publish(ctx, rings[i]);
		if (ret)
			xa_erase(xa, handle);
	}
	if (ret)
		qpip_cmd_destroy(ctx->qdev, ctx->id, type, handle);
	return ret;
}

static void qpip_listener_free(struct qpip_ctx *ctx, struct qpip_listener *l)
{
	qpip_port_release(&l->port);
	kfree(l);
	qpip_quota_uncharge(ctx->user, QPIP_QUOTA_LISTENERS, 1);
}

/* Frees the driver's part of an object the device no longer has. */
static void qpip_obj_free(struct qpip_ctx *ctx, enum qpip_obj_type type, void *obj)
{
	switch (type) {
	case QPIP_OBJ_CQ:
		qpip_cq_free(ctx, obj, false);
		break;
	case QPIP_OBJ_QP:
		qpip_qp_free(ctx, obj, false);
		break;
	case QPIP_OBJ_MR:
		qpip_mr_free(ctx->qdev, obj, false);
		break;
	case QPIP_OBJ_LISTENER:
		qpip_listener_free(ctx, obj);
		break;
	case QPIP_OBJ_TRIPWIRE:
		/* A value entry: nothing to free but its charge. */
		qpip_quota_uncharge(ctx->user, QPIP_QUOTA_TRIPWIRES, 1);
		break;
	}
}

static bool qpip_depth_ok(struct qpip_dev *qdev, u32 depth)
{
	return depth >= 2 && depth <= qdev->info.max_queue_depth && is_power_of_2(depth);
}

static bool qpip_zero(const void *p, size_t n)
{
	return !memchr_inv(p, 0, n);
}

/*
 * ---- ioctls ----
 *
 * Each gets the kernel's copy of its argument (qpip_ioctl_run) and returns 0 or an errno;
 * qdev->lock is held for reading, the context alive, ctx->lock held.
 */

static int qpip_ioctl_query_device(struct qpip_ctx *ctx, void *arg)
{
	struct qpip_query_device *a = arg;
	struct qpip_dev *qdev = ctx->qdev;
	struct qpip_device_info *i = &qdev->info;
	u32 size = a->size;

	/* Everything but the size is the driver's to write. */
	memset(a, 0, sizeof(*a));
	a->size = size;
	a->uapi_version = QPIP_UAPI_VERSION;
	a->abi_version = qdev->version;
	a->ctx = ctx->id;
	a->doorbell_offset = (u64)QPIP_MMAP_DOORBELL << PAGE_SHIFT;
	a->kick_offset = (u64)QPIP_MMAP_KICK << PAGE_SHIFT;
	mutex_lock(&qdev->cfg_lock);
	a->max_contexts = i->max_contexts;
	a->max_qps = i->max_qps_per_context;
	a->max_cqs = i->max_cqs_per_context;
	a->max_mrs = i->max_mrs;
	a->max_mr_pages = i->max_mr_pages;
	a->max_queue_depth = i->max_queue_depth;
	a->max_sge = i->max_sge;
	a->max_inline = i->max_inline;
	a->max_udp_payload = i->max_udp_payload;
	a->max_listeners = i->max_listeners;
	a->mtu = i->mtu;
	memcpy(a->mac, i->mac, sizeof(a->mac));
	mutex_unlock(&qdev->cfg_lock);
	a->comp_vectors = qpip_comp_vectors(qdev);
	return 0;
}

static int qpip_ioctl_create_cq(struct qpip_ctx *ctx, void *arg)
{
	struct qpip_create_cq *a = arg;
	struct qpip_dev *qdev = ctx->qdev;
	struct qpip_cq_params p = {};
	struct qpip_cq_result res;
	struct qpip_vector *vec;
	struct qpip_cq *cq;
	int ret;

	if (a->reserved || !qpip_depth_ok(qdev, a->depth))
		return -EINVAL;
	vec = qpip_pick_vector(qdev, a->comp_vector);
	if (IS_ERR(vec))
		return PTR_ERR(vec);

	cq = kzalloc(sizeof(*cq), GFP_KERNEL);
	if (!cq)
		return -ENOMEM;
	ret = qpip_quota_charge(ctx, QPIP_QUOTA_CQS, 1);
	if (ret)
		goto err_free;
	cq->user = ctx->user;
	if (a->eventfd != -1) {
		cq->eventfd = eventfd_ctx_fdget(a->eventfd);
		if (IS_ERR(cq->eventfd)) {
			ret = PTR_ERR(cq->eventfd);
			cq->eventfd = NULL;
			goto err_free;
		}
	}
	ret = qpip_obj_ring(ctx, a->depth, QPIP_CQE_SIZE, &cq->ring);
	if (ret)
		goto err_free;
	p.ring = qpip_ring_params_of(cq->ring, a->depth);
	p.vector = vec->index;
	ret = qpip_cmd_create_cq(qdev, ctx->id, &p, &res);
	if (ret)
		goto err_free;
	cq->handle = res.handle;
	cq->slot = res.db_slot;
	ret = qpip_obj_record(ctx, QPIP_OBJ_CQ, cq->handle, cq, &cq->ring, 1);
	if (ret)
		goto err_free;
	qpip_vector_add(ctx, vec, cq, a->depth);

	a->handle = cq->handle;
	a->db_slot = cq->slot;
	qpip_ring_mapping(cq->ring, &a->ring_offset, &a->ring_size);
	a->comp_vector_out = vec->index - 1;
	return 0;

err_free:
	qpip_cq_free(ctx, cq, false);
	return ret;
}

static int qpip_ioctl_create_qp(struct qpip_ctx *ctx, void *arg)
{
	struct qpip_create_qp *a = arg;
	struct qpip_dev *qdev = ctx->qdev;
	struct qpip_qp_params p = {};
	struct qpip_qp_result res;
	struct qpip_qp *qp;
	int ret;

	if (a->reserved0 || !qpip_depth_ok(qdev, a->sq_depth) || !qpip_depth_ok(qdev, a->rq_depth))
		return -EINVAL;
	if (!xa_load(&ctx->cqs, a->send_cq) || !xa_load(&ctx->cqs, a->recv_cq))
		return -ENOENT;

	qp = kzalloc(sizeof(*qp), GFP_KERNEL);
	if (!qp)
		return -ENOMEM;
	ret = qpip_quota_charge(ctx, QPIP_QUOTA_QPS, 1);
	if (ret)
		goto err_free;
	qp->user = ctx->user;
	qp->type = a->qp_type;
	ret = qpip_obj_ring(ctx, a->sq_depth, QPIP_WQE_SIZE, &qp->sq);
	if (!ret)
		ret = qpip_obj_ring(ctx, a->rq_depth, QPIP_WQE_SIZE, &qp->rq);
	if (ret)
		goto err_free;
	p.sq = qpip_ring_params_of(qp->sq, a->sq_depth);
	p.rq = qpip_ring_params_of(qp->rq, a->rq_depth);
	p.send_cq = a->send_cq;
	p.recv_cq = a->recv_cq;
	p.qp_type = a->qp_type;
	p.framing = a->framing;
	ret = qpip_cmd_create_qp(qdev, ctx->id, &p, &res);
	if (ret)
		goto err_free;
	qp->handle = res.handle;
	ret = qpip_obj_record(ctx, QPIP_OBJ_QP, qp->handle, qp,
			      (struct qpip_ring *const []){ qp->sq, qp->rq }, 2);
	if (ret)
		goto err_free;

	a->handle = qp->handle;
	a->db_slot = res.db_slot;
	qpip_ring_mapping(qp->sq, &a->sq_offset, &a->sq_size);
	qpip_ring_mapping(qp->rq, &a->rq_offset, &a->rq_size);
	return 0;

err_free:
	qpip_qp_free(ctx, qp, false);
	return ret;
}

#define QPIP_MR_ACCESS_ALL (QPIP_MR_ACCESS_LOCAL_WRITE | QPIP_MR_ACCESS_REMOTE_WRITE | \
			    QPIP_MR_ACCESS_REMOTE_READ)

static int qpip_ioctl_reg_mr(struct qpip_ctx *ctx, void *arg)
{
	struct qpip_reg_mr *a = arg;
	struct qpip_dev *qdev = ctx->qdev;
	struct qpip_mr_params p = {};
	struct qpip_mr_result res;
	struct qpip_mr *mr;
	u64 end;
	int ret;

	if ((a->access & ~QPIP_MR_ACCESS_ALL) || !a->length)
		return -EINVAL;
	/* Bound the length before any arithmetic with it. */
	if (a->length > ((u64)qdev->info.max_mr_pages << PAGE_SHIFT))
		return -EINVAL;
	if (check_add_overflow(a->addr, a->length, &end) ||
	    !access_ok(u64_to_user_ptr(a->addr), a->length))
		return -EFAULT;

	mr = qpip_mr_alloc(ctx, a->addr, a->length,
			   a->access & (QPIP_MR_ACCESS_LOCAL_WRITE | QPIP_MR_ACCESS_REMOTE_WRITE));
	if (IS_ERR(mr))
		return PTR_ERR(mr);
	p.pages = mr->dma;
	p.npages = mr->npages;
	p.iova = a->addr;
	p.length = a->length;
	p.first_page_offset = a->addr & ~PAGE_MASK;
	p.access = a->access;
	ret = qpip_cmd_reg_mr(qdev, ctx->id, &p, &res);
	if (ret)
		goto err_free;
	mr->lkey = res.lkey;
	ret = qpip_obj_record(ctx, QPIP_OBJ_MR, mr->lkey, mr, NULL, 0);
	if (ret)
		goto err_free;
	a->lkey = res.lkey;
	a->rkey = res.rkey;
	return 0;

err_free:
	qpip_mr_free(qdev, mr, false);
	return ret;
}

/*
 * A tripwire on this context's CQ and regions: each is looked up here first, so a process
 * never names another's objects to the device (which would refuse them too). What the
 * device checks alone — the range inside its region, the arm word aligned inside its —
 * fails with BAD_PARAM: -EINVAL. The driver keeps no memory of its own for it: the
 * watched range and the arm word are in regions the device holds busy while it lives.
 */
static int qpip_ioctl_create_tripwire(struct qpip_ctx *ctx, void *arg)
{
	struct qpip_create_tripwire *a = arg;
	struct qpip_tripwire_params p = {
		.addr = a->addr,
		.len = a->len,
		.arm_addr = a->arm_addr,
		.tag = a->tag,
		.lkey = a->lkey,
		.arm_lkey = a->arm_lkey,
		.cq = a->cq,
	};
	int ret;

	if (a->reserved)
		return -EINVAL;
	if (!xa_load(&ctx->cqs, a->cq) || !xa_load(&ctx->mrs, a->lkey) ||
	    !xa_load(&ctx->mrs, a->arm_lkey))
		return -ENOENT;
	/* A value entry, charged to the file's user. */
	ret = qpip_quota_charge(ctx, QPIP_QUOTA_TRIPWIRES, 1);
	if (ret)
		return ret;
	ret = qpip_cmd_create_tripwire(ctx->qdev, ctx->id, &p, &a->handle);
	if (!ret)
		ret = qpip_obj_record(ctx, QPIP_OBJ_TRIPWIRE, a->handle, xa_mk_value(0), NULL, 0);
	if (ret)
		qpip_quota_uncharge(ctx->user, QPIP_QUOTA_TRIPWIRES, 1);
	return ret;
}

/*
 * The destroy ioctls (DESTROY_CQ, DESTROY_QP, DEREG_MR, DESTROY_LISTENER,
 * DESTROY_TRIPWIRE): the handle must
 * be one of this context's; the device forgets the object first — so it no longer touches
 * the object's memory — and only then is it taken out of the context's table and freed.
 */
static int qpip_destroy_obj(struct qpip_ctx *ctx, const struct qpip_handle *a,
			    enum qpip_obj_type type)
{
	struct xarray *xa = qpip_objs(ctx, type);
	void *obj;
	int ret;

	obj = xa_load(xa, a->handle);
	if (!obj)
		return -ENOENT;
	ret = qpip_cmd_destroy(ctx->qdev, ctx->id, type, a->handle);
	if (ret)
		return ret;
	xa_erase(xa, a->handle);
	qpip_obj_free(ctx, type, obj);
	return 0;
}

static int qpip_ioctl_destroy_cq(struct qpip_ctx *ctx, void *arg)
{
	return qpip_destroy_obj(ctx, arg, QPIP_OBJ_CQ);
}

static int qpip_ioctl_destroy_qp(struct qpip_ctx *ctx, void *arg)
{
	return qpip_destroy_obj(ctx, arg, QPIP_OBJ_QP);
}

static int qpip_ioctl_dereg_mr(struct qpip_ctx *ctx, void *arg)
{
	return qpip_destroy_obj(ctx, arg, QPIP_OBJ_MR);
}

static int qpip_ioctl_destroy_listener(struct qpip_ctx *ctx, void *arg)
{
	return qpip_destroy_obj(ctx, arg, QPIP_OBJ_LISTENER);
}

static int qpip_ioctl_destroy_tripwire(struct qpip_ctx *ctx, void *arg)
{
	return qpip_destroy_obj(ctx, arg, QPIP_OBJ_TRIPWIRE);
}

/* ---- connections ---- */

/*
 * BIND and LISTEN name a local port: below net.ipv4.ip_unprivileged_port_start only with
 * CAP_NET_BIND_SERVICE (qpip_port_check), as for sockets. CONNECT takes no local port: a
 * QP gets one from BIND, or an ephemeral one.
 *
 * Every port a QP or listener takes is first reserved in the guest kernel (qpip_ports.c),
 * so it is never a kernel socket's too: one a socket holds fails with -EADDRINUSE before
 * the device is asked. For port 0 the kernel chooses and the device is given its choice.
 */

/*
 * Binds @qp to @addr and *@port (0: an ephemeral one), reserving the port first; the port
 * bound in *@port. A QP bound already is refused as the device would (BAD_STATE).
 */
static int qpip_qp_bind(struct qpip_ctx *ctx, struct qpip_qp *qp, const u8 *addr, u16 *port)
{
	u16 bound;
	int ret;

	if (!qpip_port_type(qp->type))	/* no ports: the device answers */
		return qpip_cmd_bind(ctx->qdev, ctx->id, qp->handle, addr, port);
	if (qpip_port_held(&qp->port))
		return -EINVAL;
	ret = qpip_port_reserve(&qp->port, qp->type, *port);
	if (ret)
		return ret;
	bound = qp->port.port;
	ret = qpip_cmd_bind(ctx->qdev, ctx->id, qp->handle, addr, &bound);
	if (ret) {
		qpip_port_release(&qp->port);
		return ret;
	}
	*port = bound;
	return 0;
}

static int qpip_ioctl_bind(struct qpip_ctx *ctx, void *arg)
{
	struct qpip_bind *a = arg;
	struct qpip_qp *qp;
	int ret;

	if (a->local.reserved || a->reserved)
		return -EINVAL;
	qp = xa_load(&ctx->qps, a->qp);
	if (!qp)
		return -ENOENT;
	ret = qpip_port_check(a->local.port);
	if (ret)
		return ret;
	return qpip_qp_bind(ctx, qp, a->local.addr, &a->local.port);
}

/*
 * A listener holds its TCP port, reserved first; the connections it accepts share it.
 * Port 0 is the device's to refuse (a listener names its port).
 */
static int qpip_ioctl_listen(struct qpip_ctx *ctx, void *arg)
{
	struct qpip_listen *a = arg;
	struct qpip_listener *l;
	int ret;

	if (a->local.reserved)
		return -EINVAL;
	ret = qpip_port_check(a->local.port);
	if (ret)
		return ret;
	ret = qpip_quota_charge(ctx, QPIP_QUOTA_LISTENERS, 1);
	if (ret)
		return ret;
	l = kzalloc(sizeof(*l), GFP_KERNEL);
	if (!l) {
		qpip_quota_uncharge(ctx->user, QPIP_QUOTA_LISTENERS, 1);
		return -ENOMEM;
	}
	if (a->local.port)
		ret = qpip_port_reserve(&l->port, QPIP_QP_TYPE_TCP, a->local.port);
	if (!ret)
		ret = qpip_cmd_listen(ctx->qdev, ctx->id, a->local.addr, a->local.port,
				      a->backlog, 0, &a->handle);
	if (!ret)
		ret = qpip_obj_record(ctx, QPIP_OBJ_LISTENER, a->handle, l, NULL, 0);
	if (ret)
		qpip_listener_free(ctx, l);
	return ret;
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
 * @c was submitted with the result @ret, which it returns (or was not, failing with @ret
 * before). On success @c belongs to the admin queue; on failure it is still ours, and
 * freed with the buffer it may carry.
 */
static int qpip_event_cmd_sent(struct qpip_ctx *ctx, struct qpip_cmd *c, int ret)
{
	if (ret) {
		qpip_cmd_data_free(ctx->qdev, c);
		kfree(c);
		atomic_dec(&ctx->pending);
	}
	return ret;
}

/*
 * Accept and connect carry struct qpip_iwarp_conn (zero from callers of the first
 * version): checked before anything else, its private data copied when the ioctl is made.
 */
static int qpip_ioctl_accept(struct qpip_ctx *ctx, void *arg)
{
	struct qpip_accept *a = arg;
	struct qpip_qp *qp;
	struct qpip_cmd *c;
	int ret;

	if (a->reserved || qpip_iwarp_conn_check(&a->iwarp))
		return -EINVAL;
	qp = xa_load(&ctx->qps, a->qp);
	if (!xa_load(&ctx->listeners, a->listener) || !qp)
		return -ENOENT;
	c = qpip_event_cmd_alloc(ctx, QPIP_EVENT_ACCEPT, a->qp, a->user_data);
	if (IS_ERR(c))
		return PTR_ERR(c);
	ret = qpip_iwarp_conn_take(ctx->qdev, c, &a->iwarp);
	if (!ret)
		ret = qpip_cmd_accept(ctx->qdev, c, ctx->id, a->listener, a->qp, &a->iwarp);
	if (!ret)
		qp->accepting = true;
	return qpip_event_cmd_sent(ctx, c, ret);
}

/*
 * The device gives a TCP QP that CONNECT finds unbound an ephemeral port of its own. Bind
 * it first instead, to a port the kernel chooses and keeps reserved (qpip_qp_bind). Not a
 * QP given to an ACCEPT: it is the device's to refuse, and an accepted connection has its
 * listener's port. A QP that is bound already without the driver's knowing is refused by
 * BIND with BAD_STATE (-EINVAL): the CONNECT goes on as before, for the device to answer.
 */
static int qpip_connect_port(struct qpip_ctx *ctx, struct qpip_qp *qp)
{
	static const u8 any[16];
	u16 port = 0;
	int ret;

	if (qp->type != QPIP_QP_TYPE_TCP || qp->accepting || qpip_port_held(&qp->port))
		return 0;
	ret = qpip_qp_bind(ctx, qp, any, &port);
	return ret == -EINVAL ? 0 : ret;
}

static int qpip_ioctl_connect(struct qpip_ctx *ctx, void *arg)
{
	struct qpip_connect *a = arg;
	struct qpip_qp *qp;
	struct qpip_cmd *c;
	int ret;

	if (a->peer.reserved || a->reserved || qpip_iwarp_conn_check(&a->iwarp))
		return -EINVAL;
	qp = xa_load(&ctx->qps, a->qp);
	if (!qp)
		return -ENOENT;
	c = qpip_event_cmd_alloc(ctx, QPIP_EVENT_CONNECT, a->qp, a->user_data);
	if (IS_ERR(c))
		return PTR_ERR(c);
	ret = qpip_connect_port(ctx, qp);
	if (!ret)
		ret = qpip_iwarp_conn_take(ctx->qdev, c, &a->iwarp);
	if (!ret)
		ret = qpip_cmd_connect(ctx->qdev, c, ctx->id, a->qp, a->peer.addr, a->peer.port,
				       &a->iwarp);
	return qpip_event_cmd_sent(ctx, c, ret);
}

/*
 * What MPA set up for an iWARP QP of this context. The device refuses a QP of another
 * framing, or one whose connection is not set up yet, with BAD_STATE: -EINVAL.
 */
static int qpip_ioctl_query_conn(struct qpip_ctx *ctx, void *arg)
{
	struct qpip_query_conn *a = arg;

	if (!xa_load(&ctx->qps, a->qp))
		return -ENOENT;
	return qpip_query_conn(ctx->qdev, ctx->id, a->qp, a);
}

static int qpip_ioctl_close(struct qpip_ctx *ctx, void *arg)
{
	struct qpip_close *a = arg;
	struct qpip_cmd *c;

	if (!xa_load(&ctx->qps, a->qp))
		return -ENOENT;
	c = qpip_event_cmd_alloc(ctx, QPIP_EVENT_CLOSE, a->qp, a->user_data);
	if (IS_ERR(c))
		return PTR_ERR(c);
	return qpip_event_cmd_sent(ctx, c, qpip_cmd_close(ctx->qdev, c, ctx->id, a->qp));
}

static int qpip_ioctl_set_qp_opt(struct qpip_ctx *ctx, void *arg)
{
	struct qpip_set_qp_opt *a = arg;

	if (!xa_load(&ctx->qps, a->qp))
		return -ENOENT;
	return qpip_cmd_set_qp_opt(ctx->qdev, ctx->id, a->qp, a);
}

/* ---- the device ---- */

static int qpip_ioctl_query_stats(struct qpip_ctx *ctx, void *arg)
{
	struct qpip_query_stats *a = arg;
	int ret;

	ret = qpip_query_stats(ctx->qdev, a->counters, ARRAY_SIZE(a->counters));
	if (!ret)
		a->count = ARRAY_SIZE(a->counters);
	return ret;
}

/* ADD_ADDR and DEL_ADDR. */
static int qpip_ioctl_addr(struct qpip_ctx *ctx, const struct qpip_addr *a, bool add)
{
	int ret;

	if (!qpip_zero(a->reserved, sizeof(a->reserved)))
		return -EINVAL;
	ret = qpip_change_addr(ctx->qdev, add, a->addr, a->prefix_len);
	/* The function's network interface carries the same addresses. */
	if (!ret)
		qpip_netdev_mirror_addr(ctx->qdev, add, a->addr, a->prefix_len);
	return ret;
}

static int qpip_ioctl_add_addr(struct qpip_ctx *ctx, void *arg)
{
	return qpip_ioctl_addr(ctx, arg, true);
}

static int qpip_ioctl_del_addr(struct qpip_ctx *ctx, void *arg)
{
	return qpip_ioctl_addr(ctx, arg, false);
}

static int qpip_ioctl_set_mac(struct qpip_ctx *ctx, void *arg)
{
	struct qpip_set_mac *a = arg;
	int ret;

	if (!qpip_zero(a->reserved, sizeof(a->reserved)))
		return -EINVAL;
	ret = qpip_set_mac(ctx->qdev, a->mac);
	if (!ret)
		qpip_netdev_mirror_mac(ctx->qdev, a->mac);
	return ret;
}

/* ---- dispatch ---- */

/* What qpip_ioctl_run does around an ioctl besides copying its argument in. */
#define QPIP_ARG_OUT		BIT(0)	/* copy the argument back out on success */
#define QPIP_NET_ADMIN		BIT(1)	/* the caller needs CAP_NET_ADMIN */

/* An ioctl: its handler and what its argument is. */
struct qpip_ioctl_desc {
	int (*fn)(struct qpip_ctx *ctx, void *arg);
	unsigned int cmd;		/* QPIP_IOCTL_*: its size bits are the first version's */
	size_t size;			/* of the argument as this driver knows it */
	unsigned int flags;		/* QPIP_ARG_OUT, QPIP_NET_ADMIN */
};

#define QPIP_IOCTL_DEF(name, func, arg, fl)					\
	[_IOC_NR(QPIP_IOCTL_##name)] = {					\
		.fn = func,							\
		.cmd = QPIP_IOCTL_##name,					\
		.size = sizeof(struct arg),					\
		.flags = fl,							\
	}

static const struct qpip_ioctl_desc qpip_ioctls[] = {
	QPIP_IOCTL_DEF(QUERY_DEVICE, qpip_ioctl_query_device, qpip_query_device, QPIP_ARG_OUT),
	QPIP_IOCTL_DEF(CREATE_CQ, qpip_ioctl_create_cq, qpip_create_cq, QPIP_ARG_OUT),
	QPIP_IOCTL_DEF(DESTROY_CQ, qpip_ioctl_destroy_cq, qpip_handle, 0),
	QPIP_IOCTL_DEF(CREATE_QP, qpip_ioctl_create_qp, qpip_create_qp, QPIP_ARG_OUT),
	QPIP_IOCTL_DEF(DESTROY_QP, qpip_ioctl_destroy_qp, qpip_handle, 0),
	QPIP_IOCTL_DEF(REG_MR, qpip_ioctl_reg_mr, qpip_reg_mr, QPIP_ARG_OUT),
	QPIP_IOCTL_DEF(DEREG_MR, qpip_ioctl_dereg_mr, qpip_handle, 0),
	QPIP_IOCTL_DEF(BIND, qpip_ioctl_bind, qpip_bind, QPIP_ARG_OUT),
	QPIP_IOCTL_DEF(LISTEN, qpip_ioctl_listen, qpip_listen, QPIP_ARG_OUT),
	QPIP_IOCTL_DEF(DESTROY_LISTENER, qpip_ioctl_destroy_listener, qpip_handle, 0),
	QPIP_IOCTL_DEF(ACCEPT, qpip_ioctl_accept, qpip_accept, 0),
	QPIP_IOCTL_DEF(CONNECT, qpip_ioctl_connect, qpip_connect, 0),
	QPIP_IOCTL_DEF(CLOSE, qpip_ioctl_close, qpip_close, 0),
	QPIP_IOCTL_DEF(QUERY_STATS, qpip_ioctl_query_stats, qpip_query_stats, QPIP_ARG_OUT),
	QPIP_IOCTL_DEF(ADD_ADDR, qpip_ioctl_add_addr, qpip_addr, QPIP_NET_ADMIN),
	QPIP_IOCTL_DEF(DEL_ADDR, qpip_ioctl_del_addr, qpip_addr, QPIP_NET_ADMIN),
	QPIP_IOCTL_DEF(SET_MAC, qpip_ioctl_set_mac, qpip_set_mac, QPIP_NET_ADMIN),
	QPIP_IOCTL_DEF(QUERY_CONN, qpip_ioctl_query_conn, qpip_query_conn, QPIP_ARG_OUT),
	QPIP_IOCTL_DEF(CREATE_TRIPWIRE, qpip_ioctl_create_tripwire, qpip_create_tripwire,
		       QPIP_ARG_OUT),
	QPIP_IOCTL_DEF(DESTROY_TRIPWIRE, qpip_ioctl_destroy_tripwire, qpip_handle, 0),
	QPIP_IOCTL_DEF(SET_QP_OPT, qpip_ioctl_set_qp_opt, qpip_set_qp_opt, 0),
};

/*
 * Copies a size-versioned argument in (see include/uapi/qpip.h): returns the caller's
 * size, or an errno. Bytes past what the driver knows must be zero (copy_struct_from_user).
 */
int qpip_get_arg(void *karg, size_t ksize, u32 v1size, void __user *uarg)
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

/*
 * Arguments up to this size are copied to the stack; larger ones (QUERY_STATS, QUERY_CONN)
 * to the heap.
 */
#define QPIP_ARG_STACK_SIZE 128

/*
 * Runs ioctl @d on the kernel's copy of its argument: copied in first, then written back
 * (at most the caller's size of it) if @d says so and the ioctl succeeded.
 */
static int qpip_ioctl_run(struct qpip_ctx *ctx, const struct qpip_ioctl_desc *d,
			  void __user *uarg)
{
	u64 stack_arg[QPIP_ARG_STACK_SIZE / sizeof(u64)];
	void *karg = stack_arg;
	int usize, ret;

	if (d->size > sizeof(stack_arg)) {
		karg = kzalloc(d->size, GFP_KERNEL);
		if (!karg)
			return -ENOMEM;
	}
	usize = qpip_get_arg(karg, d->size, _IOC_SIZE(d->cmd), uarg);
	if (usize < 0) {
		ret = usize;
		goto out;
	}
	if ((d->flags & QPIP_NET_ADMIN) && !capable(CAP_NET_ADMIN)) {
		ret = -EPERM;
		goto out;
	}
	ret = d->fn(ctx, karg);
	if (!ret && (d->flags & QPIP_ARG_OUT) &&
	    copy_to_user(uarg, karg, min_t(size_t, d->size, usize)))
		ret = -EFAULT;
out:
	if (karg != stack_arg)
		kfree(karg);
	return ret;
}

long qpip_ioctl(struct file *filp, unsigned int cmd, unsigned long arg)
{
	struct qpip_ctx *ctx = filp->private_data;
	struct qpip_dev *qdev = ctx->qdev;
	unsigned int nr = _IOC_NR(cmd);
	long ret;

	/* Sockets take their own locks: a blocking connect must not hold the context's. */
	if (cmd == QPIP_IOCTL_SOCK_CONNECT || cmd == QPIP_IOCTL_SOCK_LISTEN ||
	    cmd == QPIP_IOCTL_SOCK_BIND)
		return qpip_sock_ctx_ioctl(ctx, filp, cmd, (void __user *)arg);

	/* Matched by type and number: the size bits are those of the first version. */
	if (_IOC_TYPE(cmd) != QPIP_IOCTL_TYPE || _IOC_DIR(cmd) != (_IOC_READ | _IOC_WRITE) ||
	    nr >= ARRAY_SIZE(qpip_ioctls) || !qpip_ioctls[nr].fn)
		return -ENOTTY;

	down_read(&qdev->lock);
	if (qpip_ctx_dead(ctx)) {
		ret = -ENODEV;
	} else {
		mutex_lock(&ctx->lock);
		ret = qpip_ioctl_run(ctx, &qpip_ioctls[nr], (void __user *)arg);
		mutex_unlock(&ctx->lock);
	}
	up_read(&qdev->lock);
	return ret;
}

/*
 * ---- for qpip_ib.ko ----
 *
 * Runs the ioctl @cmd of @ctx on @karg, an argument of the kernel's (of this driver's size
 * of it, zeroed where unused): the same handler, checks and locks as a /dev/qpipN file's
 * ioctl, so the RDMA device's CQs, regions and QPs are made by the code that makes the
 * files'. Ioctls that need CAP_NET_ADMIN are not for it.
 */
int qpip_ctx_ioctl(struct qpip_ctx *ctx, unsigned int cmd, void *karg)
{
	struct qpip_dev *qdev = ctx->qdev;
	unsigned int nr = _IOC_NR(cmd);
	const struct qpip_ioctl_desc *d;
	int ret;

	if (nr >= ARRAY_SIZE(qpip_ioctls))
		return -ENOTTY;
	d = &qpip_ioctls[nr];
	if (!d->fn || d->cmd != cmd || (d->flags & QPIP_NET_ADMIN))
		return -ENOTTY;
	down_read(&qdev->lock);
	if (qpip_ctx_dead(ctx)) {
		ret = -ENODEV;
	} else {
		mutex_lock(&ctx->lock);
		ret = d->fn(ctx, karg);
		mutex_unlock(&ctx->lock);
	}
	up_read(&qdev->lock);
	return ret;
}
EXPORT_SYMBOL_GPL(qpip_ctx_ioctl);

/*
 * Runs @fn on @ctx as qpip_ctx_ioctl runs an ioctl's handler: the device's lock for
 * reading, the context alive, its lock held.
 */
static int qpip_ctx_run(struct qpip_ctx *ctx, int (*fn)(struct qpip_ctx *ctx, void *arg),
			void *arg)
{
	struct qpip_dev *qdev = ctx->qdev;
	int ret;

	down_read(&qdev->lock);
	if (qpip_ctx_dead(ctx)) {
		ret = -ENODEV;
	} else {
		mutex_lock(&ctx->lock);
		ret = fn(ctx, arg);
		mutex_unlock(&ctx->lock);
	}
	up_read(&qdev->lock);
	return ret;
}

/* A kernel caller's CONNECT or CLOSE: what qpip_ctx_run hands its handler. */
struct qpip_kernel_cmd {
	u32 qp;
	const u8 *addr;
	u16 port;
	const struct qpip_iwarp_conn *iw;
	const void *pdata;
	void (*done)(struct qpip_cmd *c);
	void *owner;
};

/*
 * The command record of a kernel caller: its completion goes to k->done, like a qpip
 * socket's (qpip_async_done), and is not counted against the context's pending events.
 */
static struct qpip_cmd *qpip_kernel_cmd_alloc(struct qpip_ctx *ctx,
					      const struct qpip_kernel_cmd *k, u32 kind)
{
	struct qpip_cmd *c = kzalloc(sizeof(*c), GFP_KERNEL);

	if (!c)
		return NULL;
	c->ctx = ctx;
	c->event.kind = kind;
	c->event.qp = k->qp;
	c->sock_done = k->done;
	c->owner = k->owner;
	return c;
}

/* The private data copied into a buffer of the command's, as qpip_iwarp_conn_take does. */
static int qpip_kernel_pdata_take(struct qpip_dev *qdev, struct qpip_cmd *c,
				  const void *pdata, u16 len)
{
	void *buf;

	if (!len)
		return 0;
	buf = kmalloc(roundup_pow_of_two(len), GFP_KERNEL);
	if (!buf)
		return -ENOMEM;
	memcpy(buf, pdata, len);
	return qpip_cmd_data_attach(qdev, c, buf, len);
}

static int qpip_kernel_connect(struct qpip_ctx *ctx, void *arg)
{
	const struct qpip_kernel_cmd *k = arg;
	struct qpip_qp *qp;
	struct qpip_cmd *c;
	int ret;

	if (qpip_iwarp_conn_check(k->iw))
		return -EINVAL;
	qp = xa_load(&ctx->qps, k->qp);
	if (!qp)
		return -ENOENT;
	c = qpip_kernel_cmd_alloc(ctx, k, QPIP_EVENT_CONNECT);
	if (!c)
		return -ENOMEM;
	ret = qpip_connect_port(ctx, qp);
	if (!ret)
		ret = qpip_kernel_pdata_take(ctx->qdev, c, k->pdata, k->iw->pd_len);
	if (!ret)
		ret = qpip_cmd_connect(ctx->qdev, c, ctx->id, k->qp, k->addr, k->port, k->iw);
	if (ret) {
		qpip_cmd_data_free(ctx->qdev, c);
		kfree(c);
	}
	return ret;
}

int qpip_ctx_connect_kernel(struct qpip_ctx *ctx, u32 qp, const u8 *addr, u16 port,
			    const struct qpip_iwarp_conn *iw, const void *pdata,
			    void (*done)(struct qpip_cmd *c), void *owner)
{
	struct qpip_kernel_cmd k = {
		.qp = qp, .addr = addr, .port = port, .iw = iw, .pdata = pdata,
		.done = done, .owner = owner,
	};

	return qpip_ctx_run(ctx, qpip_kernel_connect, &k);
}
EXPORT_SYMBOL_GPL(qpip_ctx_connect_kernel);

static int qpip_kernel_close(struct qpip_ctx *ctx, void *arg)
{
	const struct qpip_kernel_cmd *k = arg;
	struct qpip_cmd *c;
	int ret;

	if (!xa_load(&ctx->qps, k->qp))
		return -ENOENT;
	c = qpip_kernel_cmd_alloc(ctx, k, QPIP_EVENT_CLOSE);
	if (!c)
		return -ENOMEM;
	ret = qpip_cmd_close(ctx->qdev, c, ctx->id, k->qp);
	if (ret)
		kfree(c);
	return ret;
}

int qpip_ctx_close_kernel(struct qpip_ctx *ctx, u32 qp, void (*done)(struct qpip_cmd *c),
			  void *owner)
{
	struct qpip_kernel_cmd k = { .qp = qp, .done = done, .owner = owner };

	return qpip_ctx_run(ctx, qpip_kernel_close, &k);
}
EXPORT_SYMBOL_GPL(qpip_ctx_close_kernel);

/*
 * The passive side of qpip_ib's iWARP connection manager: a listener holding connection
 * requests (LISTEN_FLAG_IWARP_REQUESTS), its requests handed out one CONN_REQUEST at a
 * time, and their answers. The listener is recorded in the context as an ioctl's is, so
 * that DESTROY_LISTENER and the context's end take it; it reserves no port in the guest
 * kernel: its caller (rdma_cm) owns the port in its own port space.
 */
struct qpip_kernel_listen {
	const u8 *addr;
	u16 port;
	u32 backlog;
	u16 flags;
	u32 handle;
};

static int qpip_kernel_listen(struct qpip_ctx *ctx, void *arg)
{
	struct qpip_kernel_listen *k = arg;
	struct qpip_listener *l;
	int ret;

	ret = qpip_quota_charge(ctx, QPIP_QUOTA_LISTENERS, 1);
	if (ret)
		return ret;
	l = kzalloc(sizeof(*l), GFP_KERNEL);
	if (!l) {
		qpip_quota_uncharge(ctx->user, QPIP_QUOTA_LISTENERS, 1);
		return -ENOMEM;
	}
	ret = qpip_cmd_listen(ctx->qdev, ctx->id, k->addr, k->port, k->backlog, k->flags,
			      &k->handle);
	if (!ret)
		ret = qpip_obj_record(ctx, QPIP_OBJ_LISTENER, k->handle, l, NULL, 0);
	if (ret)
		qpip_listener_free(ctx, l);
	return ret;
}

int qpip_ctx_listen_kernel(struct qpip_ctx *ctx, const u8 *addr, u16 port, u32 backlog,
			   u16 flags, u32 *handle)
{
	struct qpip_kernel_listen k = {
		.addr = addr, .port = port, .backlog = backlog, .flags = flags,
	};
	int ret;

	ret = qpip_ctx_run(ctx, qpip_kernel_listen, &k);
	if (!ret)
		*handle = k.handle;
	return ret;
}
EXPORT_SYMBOL_GPL(qpip_ctx_listen_kernel);

struct qpip_kernel_req {
	u32 listener;
	u32 request;
	u32 qp;
	const struct qpip_iwarp_conn *iw;
	const void *pdata;
	void (*done)(struct qpip_cmd *c);
	void *owner;
	void *buf;
};

static int qpip_kernel_conn_request(struct qpip_ctx *ctx, void *arg)
{
	const struct qpip_kernel_req *k = arg;
	struct device *dev = &ctx->qdev->pdev->dev;
	struct qpip_cmd *c;
	int ret;

	if (!xa_load(&ctx->listeners, k->listener))
		return -ENOENT;
	c = kzalloc(sizeof(*c), GFP_KERNEL);
	if (!c)
		return -ENOMEM;
	c->ctx = ctx;
	c->event.kind = QPIP_EVENT_ACCEPT;
	c->sock_done = k->done;
	c->owner = k->owner;
	c->in_buf = k->buf;
	c->in_len = sizeof(struct qpip_conn_request);
	c->in_dma = dma_map_single(dev, k->buf, c->in_len, DMA_FROM_DEVICE);
	if (dma_mapping_error(dev, c->in_dma)) {
		kfree(c);
		return -ENOMEM;
	}
	c->in_mapped = true;
	ret = qpip_cmd_conn_request(ctx->qdev, c, ctx->id, k->listener);
	if (ret) {
		qpip_cmd_data_free(ctx->qdev, c);
		kfree(c);
	}
	return ret;
}

/*
 * CONN_REQUEST on @listener of @ctx: @done gets the command when a request is held (its
 * id in c->cqe.result0, the request in @buf, sizeof(struct qpip_conn_request) bytes of
 * the caller's, kmalloc'd so that it does not cross a page) or the command failed
 * (c->event.status), as for qpip_ctx_connect_kernel.
 */
int qpip_ctx_conn_request_kernel(struct qpip_ctx *ctx, u32 listener, void *buf,
				 void (*done)(struct qpip_cmd *c), void *owner)
{
	struct qpip_kernel_req k = {
		.listener = listener, .buf = buf, .done = done, .owner = owner,
	};

	return qpip_ctx_run(ctx, qpip_kernel_conn_request, &k);
}
EXPORT_SYMBOL_GPL(qpip_ctx_conn_request_kernel);

static int qpip_kernel_accept(struct qpip_ctx *ctx, void *arg)
{
	const struct qpip_kernel_req *k = arg;
	struct qpip_kernel_cmd kc = { .qp = k->qp, .done = k->done, .owner = k->owner };
	struct qpip_cmd *c;
	int ret;

	if (qpip_iwarp_conn_check(k->iw))
		return -EINVAL;
	if (!xa_load(&ctx->qps, k->qp))
		return -ENOENT;
	c = qpip_kernel_cmd_alloc(ctx, &kc, QPIP_EVENT_ACCEPT);
	if (!c)
		return -ENOMEM;
	ret = qpip_kernel_pdata_take(ctx->qdev, c, k->pdata, k->iw->pd_len);
	if (!ret)
		ret = qpip_cmd_accept_request(ctx->qdev, c, ctx->id, k->listener, k->request,
					      k->qp, k->iw);
	if (ret) {
		qpip_cmd_data_free(ctx->qdev, c);
		kfree(c);
	}
	return ret;
}

/*
 * ACCEPT of connection request @request of @listener (a listener of any context of the
 * function) by QP @qp of @ctx; @done as for qpip_ctx_connect_kernel.
 */
int qpip_ctx_accept_kernel(struct qpip_ctx *ctx, u32 listener, u32 request, u32 qp,
			   const struct qpip_iwarp_conn *iw, const void *pdata,
			   void (*done)(struct qpip_cmd *c), void *owner)
{
	struct qpip_kernel_req k = {
		.listener = listener, .request = request, .qp = qp, .iw = iw, .pdata = pdata,
		.done = done, .owner = owner,
	};

	return qpip_ctx_run(ctx, qpip_kernel_accept, &k);
}
EXPORT_SYMBOL_GPL(qpip_ctx_accept_kernel);

static int qpip_kernel_reject(struct qpip_ctx *ctx, void *arg)
{
	const struct qpip_kernel_req *k = arg;
	struct device *dev = &ctx->qdev->pdev->dev;
	u16 len = k->iw->pd_len;
	dma_addr_t dma = 0;
	void *buf = NULL;
	int ret;

	if (len > QPIP_IWARP_MAX_PRIVATE_DATA)
		return -EINVAL;
	if (!xa_load(&ctx->listeners, k->listener))
		return -ENOENT;
	if (len) {
		/* A power-of-two bucket: the buffer does not cross a page. */
		buf = kmalloc(roundup_pow_of_two(len), GFP_KERNEL);
		if (!buf)
			return -ENOMEM;
		memcpy(buf, k->pdata, len);
		dma = dma_map_single(dev, buf, len, DMA_TO_DEVICE);
		if (dma_mapping_error(dev, dma)) {
			kfree(buf);
			return -ENOMEM;
		}
	}
	ret = qpip_cmd_reject(ctx->qdev, ctx->id, k->listener, k->request, dma, len);
	if (len) {
		dma_unmap_single(dev, dma, len, DMA_TO_DEVICE);
		kfree(buf);
	}
	return ret;
}

/* REJECT of connection request @request of @listener of @ctx, with @len bytes of @pdata. */
int qpip_ctx_reject_kernel(struct qpip_ctx *ctx, u32 listener, u32 request, const void *pdata,
			   u16 len)
{
	struct qpip_iwarp_conn iw = { .pd_len = len };
	struct qpip_kernel_req k = {
		.listener = listener, .request = request, .iw = &iw, .pdata = pdata,
	};

	return qpip_ctx_run(ctx, qpip_kernel_reject, &k);
}
EXPORT_SYMBOL_GPL(qpip_ctx_reject_kernel);
