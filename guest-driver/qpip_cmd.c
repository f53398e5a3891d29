// SPDX-License-Identifier: GPL-2.0
/*
 * qpip: the admin commands as typed functions — typed arguments in, typed results out,
 * the device's status as an errno — so that no other part of the driver builds a raw
 * command or reads a completion's result words. One function per command, but for the
 * destroys of a context's objects: one, by object type.
 *
 * Object commands act in a device context (@ctx, its id) and name their object by its
 * handle. Commands that complete later (accept, connect, close) are submitted with the
 * qpip_cmd whose completion becomes the context's event. Every command here runs with
 * qdev->lock held for reading (or for writing, during a reset).
 */
#include <linux/dma-mapping.h>
#include <linux/errno.h>
#include <linux/etherdevice.h>
#include <linux/string.h>

#include "qpip.h"

/* A command without arguments or results: the destroys. */
static int qpip_cmd_simple(struct qpip_dev *qdev, u16 opcode, u32 ctx, u32 handle)
{
	struct qpip_admin_cmd cmd;

	qpip_cmd_init(&cmd, opcode, ctx, handle, NULL, 0);
	return qpip_admin_run(qdev, &cmd, NULL);
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

/* A page list argument: the pages it lists, and the field of the arguments that names it. */
struct qpip_list_arg {
	u64 *field;
	const dma_addr_t *pages;
	unsigned long npages;
};

#define QPIP_MAX_LIST_ARGS 2

/*
 * Runs a command that takes page lists (CREATE_CQ, CREATE_QP, REG_MR): the lists exist
 * only while the device reads them, during the command. Each of these commands has two
 * results, the object's name and how to reach it: result0 in *@res0, result1 in *@res1.
 */
static int qpip_run_with_lists(struct qpip_dev *qdev, u16 opcode, u32 ctx, void *args,
			       size_t len, const struct qpip_list_arg *lists, unsigned int n,
			       u32 *res0, u32 *res1)
{
	struct qpip_page_list pl[QPIP_MAX_LIST_ARGS] = {};
	struct qpip_admin_cqe cqe;
	struct qpip_admin_cmd cmd;
	unsigned int i;
	int ret = 0;

	if (WARN_ON(n > ARRAY_SIZE(pl)))
		return -EINVAL;
	for (i = 0; !ret && i < n; i++) {
		ret = qpip_page_list_alloc(qdev, &pl[i], lists[i].pages, lists[i].npages);
		if (!ret)
			*lists[i].field = pl[i].dma;
	}
	if (!ret) {
		qpip_cmd_init(&cmd, opcode, ctx, 0, args, len);
		ret = qpip_admin_run(qdev, &cmd, &cqe);
	}
	if (!ret) {
		*res0 = cqe.result0;
		*res1 = cqe.result1;
	}
	for (i = 0; i < n; i++)
		qpip_page_list_free(qdev, &pl[i]);
	return ret;
}

/* ---- contexts ---- */

/*
 * A context whose doorbell page is @doorbell_page, with CTX_FLAG_* @flags (KERNEL only for
 * the driver's own); its id in @ctx.
 */
int qpip_cmd_create_ctx(struct qpip_dev *qdev, dma_addr_t doorbell_page, u32 flags, u32 *ctx)
{
	struct qpip_create_ctx_args args = {};
	struct qpip_admin_cqe cqe;
	struct qpip_admin_cmd cmd;
	int ret;

	args.doorbell_page = doorbell_page;
	args.flags = flags;
	qpip_cmd_init(&cmd, QPIP_ADMIN_OP_CREATE_CTX, 0, 0, &args, sizeof(args));
	ret = qpip_admin_run(qdev, &cmd, &cqe);
	if (!ret)
		*ctx = cqe.result0;
	return ret;
}

/* The context and every object in it: the device stops using all of its memory. */
int qpip_cmd_destroy_ctx(struct qpip_dev *qdev, u32 ctx)
{
	return qpip_cmd_simple(qdev, QPIP_ADMIN_OP_DESTROY_CTX, ctx, 0);
}

/* ---- objects ---- */

int qpip_cmd_create_cq(struct qpip_dev *qdev, u32 ctx, const struct qpip_cq_params *p,
		       struct qpip_cq_result *res)
{
	struct qpip_create_cq_args args = {
		.npages = p->ring.npages,
		.depth = p->ring.depth,
		.vector = p->vector,
	};
	const struct qpip_list_arg list = { &args.page_list, p->ring.pages, p->ring.npages };

	return qpip_run_with_lists(qdev, QPIP_ADMIN_OP_CREATE_CQ, ctx, &args, sizeof(args),
				   &list, 1, &res->handle, &res->db_slot);
}

int qpip_cmd_create_qp(struct qpip_dev *qdev, u32 ctx, const struct qpip_qp_params *p,
		       struct qpip_qp_result *res)
{
	struct qpip_create_qp_args args = {
		.send_cq = p->send_cq,
		.recv_cq = p->recv_cq,
		.sq_depth = p->sq.depth,
		.rq_depth = p->rq.depth,
		.sq_npages = p->sq.npages,
		.rq_npages = p->rq.npages,
		.qp_type = p->qp_type,
		.framing = p->framing,
	};
	const struct qpip_list_arg lists[] = {
		{ &args.sq_page_list, p->sq.pages, p->sq.npages },
		{ &args.rq_page_list, p->rq.pages, p->rq.npages },
	};

	return qpip_run_with_lists(qdev, QPIP_ADMIN_OP_CREATE_QP, ctx, &args, sizeof(args),
				   lists, ARRAY_SIZE(lists), &res->handle, &res->db_slot);
}

int qpip_cmd_reg_mr(struct qpip_dev *qdev, u32 ctx, const struct qpip_mr_params *p,
		    struct qpip_mr_result *res)
{
	struct qpip_reg_mr_args args = {
		.iova = p->iova,
		.length = p->length,
		.npages = p->npages,
		.first_page_offset = p->first_page_offset,
		.access = p->access,
	};
	const struct qpip_list_arg list = { &args.page_list, p->pages, p->npages };

	return qpip_run_with_lists(qdev, QPIP_ADMIN_OP_REG_MR, ctx, &args, sizeof(args),
				   &list, 1, &res->lkey, &res->rkey);
}

/*
 * A tripwire in context @ctx; its handle in *@handle. While it lives the device refuses to
 * destroy its CQ or deregister its regions (BUSY).
 */
int qpip_cmd_create_tripwire(struct qpip_dev *qdev, u32 ctx,
			     const struct qpip_tripwire_params *p, u32 *handle)
{
	struct qpip_create_tripwire_args args = {
		.addr = p->addr,
		.len = p->len,
		.arm_addr = p->arm_addr,
		.lkey = p->lkey,
		.arm_lkey = p->arm_lkey,
		.cq = p->cq,
		.tag = p->tag,
	};
	struct qpip_admin_cqe cqe;
	struct qpip_admin_cmd cmd;
	int ret;

	qpip_cmd_init(&cmd, QPIP_ADMIN_OP_CREATE_TRIPWIRE, ctx, 0, &args, sizeof(args));
	ret = qpip_admin_run(qdev, &cmd, &cqe);
	if (!ret)
		*handle = cqe.result0;
	return ret;
}

/* Destroys object @handle of @type (a memory region: its lkey) in context @ctx. */
int qpip_cmd_destroy(struct qpip_dev *qdev, u32 ctx, enum qpip_obj_type type, u32 handle)
{
	static const u16 ops[] = {
		[QPIP_OBJ_CQ] = QPIP_ADMIN_OP_DESTROY_CQ,
		[QPIP_OBJ_QP] = QPIP_ADMIN_OP_DESTROY_QP,
		[QPIP_OBJ_MR] = QPIP_ADMIN_OP_DEREG_MR,
		[QPIP_OBJ_LISTENER] = QPIP_ADMIN_OP_DESTROY_LISTENER,
		[QPIP_OBJ_TRIPWIRE] = QPIP_ADMIN_OP_DESTROY_TRIPWIRE,
	};

	return qpip_cmd_simple(qdev, ops[type], ctx, handle);
}

/* ---- connections ---- */

/* Binds @qp to @addr and *@port (0: an ephemeral one); the port bound in *@port. */
int qpip_cmd_bind(struct qpip_dev *qdev, u32 ctx, u32 qp, const u8 *addr, u16 *port)
{
	return qpip_cmd_bind_for(qdev, ctx, qp, addr, port, NULL, 0);
}

/*
 * BIND for a TCP connect to @peer port @peer_port from a port the driver chose: the device
 * refuses (-EADDRINUSE) a port from which it holds a connection to that peer that the
 * connect could not take over. @peer NULL: a plain BIND (and so on a device older than
 * interface 2.5, which does not know the peer fields).
 */
int qpip_cmd_bind_for(struct qpip_dev *qdev, u32 ctx, u32 qp, const u8 *addr, u16 *port,
		      const u8 *peer, u16 peer_port)
{
	struct qpip_bind_args args = {};
	struct qpip_admin_cqe cqe;
	struct qpip_admin_cmd cmd;
	int ret;

	memcpy(args.addr, addr, sizeof(args.addr));
	args.port = *port;
	if (peer && peer_port && qpip_version_minor(qdev->version) >= 5) {
		memcpy(args.peer_addr, peer, sizeof(args.peer_addr));
		args.peer_port = peer_port;
	}
	qpip_cmd_init(&cmd, QPIP_ADMIN_OP_BIND, ctx, qp, &args, sizeof(args));
	ret = qpip_admin_run(qdev, &cmd, &cqe);
	if (!ret)
		*port = cqe.result0;
	return ret;
}

/*
 * BIND of a UDP QP to @addr and @port (non-zero), sharing the port with the context's other
 * sharing QPs when @share (the socket's SO_REUSEADDR or SO_REUSEPORT) and the device knows
 * how (interface 2.6; an older device then binds it alone, as before).
 */
int qpip_cmd_bind_udp(struct qpip_dev *qdev, u32 ctx, u32 qp, const u8 *addr, u16 port,
		      bool share)
{
	struct qpip_bind_args args = {};
	struct qpip_admin_cmd cmd;

	memcpy(args.addr, addr, sizeof(args.addr));
	args.port = port;
	if (share && port && qpip_version_minor(qdev->version) >= 6)
		args.flags = QPIP_BIND_FLAG_SHARE_PORT;
	qpip_cmd_init(&cmd, QPIP_ADMIN_OP_BIND, ctx, qp, &args, sizeof(args));
	return qpip_admin_run(qdev, &cmd, NULL);
}

/*
 * Tells the device UDP QP @qp's connected peer (@addr NULL: none), which steers that peer's
 * datagrams to it on a shared port (interface 2.6; -EOPNOTSUPP before).
 */
int qpip_cmd_udp_peer(struct qpip_dev *qdev, u32 ctx, u32 qp, const u8 *addr, u16 port)
{
	struct qpip_set_qp_opt_args args = { .option = QPIP_QP_OPT_UDP_PEER };
	struct qpip_admin_cmd cmd;

	if (qpip_version_minor(qdev->version) < 6)
		return -EOPNOTSUPP;
	if (addr) {
		memcpy(args.peer_addr, addr, sizeof(args.peer_addr));
		args.peer_port = port;
	}
	qpip_cmd_init(&cmd, QPIP_ADMIN_OP_SET_QP_OPT, ctx, qp, &args, sizeof(args));
	return qpip_admin_run(qdev, &cmd, NULL);
}

/* A listener on @addr and @port (LISTEN_FLAG_* @flags); its handle in @handle. */
int qpip_cmd_listen(struct qpip_dev *qdev, u32 ctx, const u8 *addr, u16 port, u32 backlog,
		    u16 flags, u32 *handle)
{
	struct qpip_listen_args args = {};
	struct qpip_admin_cqe cqe;
	struct qpip_admin_cmd cmd;
	int ret;

	memcpy(args.addr, addr, sizeof(args.addr));
	args.port = port;
	args.backlog = backlog;
	args.flags = flags;
	qpip_cmd_init(&cmd, QPIP_ADMIN_OP_LISTEN, ctx, 0, &args, sizeof(args));
	ret = qpip_admin_run(qdev, &cmd, &cqe);
	if (!ret)
		*handle = cqe.result0;
	return ret;
}

/*
 * The iWARP member of ACCEPT's and CONNECT's arguments is the device's IwarpConnArgs, one
 * structure in both. It is named through the member: qpip_abi.h has the structure only
 * as a member type, under its Rust name.
 */
static_assert(__same_type(typeof_member(struct qpip_accept_args, iwarp),
			  typeof_member(struct qpip_connect_args, iwarp)));
static_assert(sizeof(typeof_member(struct qpip_accept_args, iwarp)) == 16);

/*
 * What an iWARP QP's accept or connect brings to MPA (all zero for other QPs): @iw as
 * qpip_iwarp_conn_check passed it, its private data the buffer attached to @c.
 */
static void qpip_iwarp_args(typeof_member(struct qpip_accept_args, iwarp) *args,
			    const struct qpip_cmd *c, const struct qpip_iwarp_conn *iw)
{
	if (c->data) {
		args->pd_addr = c->data_dma;
		args->pd_len = c->data_len;
	}
	args->ird = iw->ird;
	args->ord = iw->ord;
	args->flags = iw->flags;
}

/*
 * Accept, connect and close complete when their network work is done: @c (see
 * qpip_admin_submit_async) becomes the context's event then. On success @c belongs to the
 * admin queue.
 */
int qpip_cmd_accept(struct qpip_dev *qdev, struct qpip_cmd *c, u32 ctx, u32 listener, u32 qp,
		    const struct qpip_iwarp_conn *iw)
{
	struct qpip_accept_args args = {};
	struct qpip_admin_cmd cmd;

	args.qp = qp;
	qpip_iwarp_args(&args.iwarp, c, iw);
	qpip_cmd_init(&cmd, QPIP_ADMIN_OP_ACCEPT, ctx, listener, &args, sizeof(args));
	return qpip_admin_submit_async(qdev, c, &cmd);
}

/* ACCEPT of iWARP connection request @request of @listener (of any context) by @qp of @ctx. */
int qpip_cmd_accept_request(struct qpip_dev *qdev, struct qpip_cmd *c, u32 ctx, u32 listener,
			    u32 request, u32 qp, const struct qpip_iwarp_conn *iw)
{
	struct qpip_accept_args args = {};
	struct qpip_admin_cmd cmd;

	args.qp = qp;
	args.request = request;
	qpip_iwarp_args(&args.iwarp, c, iw);
	qpip_cmd_init(&cmd, QPIP_ADMIN_OP_ACCEPT, ctx, listener, &args, sizeof(args));
	return qpip_admin_submit_async(qdev, c, &cmd);
}

/* CONN_REQUEST on @listener: the request is written to @c's in-buffer when one is held. */
int qpip_cmd_conn_request(struct qpip_dev *qdev, struct qpip_cmd *c, u32 ctx, u32 listener)
{
	struct qpip_query_args args = {};
	struct qpip_admin_cmd cmd;

	args.buf = c->in_dma;
	args.len = c->in_len;
	qpip_cmd_init(&cmd, QPIP_ADMIN_OP_CONN_REQUEST, ctx, listener, &args, sizeof(args));
	return qpip_admin_submit_async(qdev, c, &cmd);
}

/*
 * REJECT of iWARP connection request @request of @listener, with the private data at
 * @pd_dma (@pd_len bytes, a DMA buffer of the caller's). Completes when the reply is sent.
 */
int qpip_cmd_reject(struct qpip_dev *qdev, u32 ctx, u32 listener, u32 request,
		    dma_addr_t pd_dma, u16 pd_len)
{
	struct qpip_reject_args args = {};
	struct qpip_admin_cmd cmd;

	args.request = request;
	if (pd_len) {
		args.iwarp.pd_addr = pd_dma;
		args.iwarp.pd_len = pd_len;
	}
	qpip_cmd_init(&cmd, QPIP_ADMIN_OP_REJECT, ctx, listener, &args, sizeof(args));
	return qpip_admin_run(qdev, &cmd, NULL);
}

int qpip_cmd_connect(struct qpip_dev *qdev, struct qpip_cmd *c, u32 ctx, u32 qp,
		     const u8 *addr, u16 port, const struct qpip_iwarp_conn *iw)
{
	struct qpip_connect_args args = {};
	struct qpip_admin_cmd cmd;

	memcpy(args.addr, addr, sizeof(args.addr));
	args.port = port;
	qpip_iwarp_args(&args.iwarp, c, iw);
	qpip_cmd_init(&cmd, QPIP_ADMIN_OP_CONNECT, ctx, qp, &args, sizeof(args));
	return qpip_admin_submit_async(qdev, c, &cmd);
}

int qpip_cmd_close(struct qpip_dev *qdev, struct qpip_cmd *c, u32 ctx, u32 qp)
{
	struct qpip_admin_cmd cmd;

	qpip_cmd_init(&cmd, QPIP_ADMIN_OP_CLOSE, ctx, qp, NULL, 0);
	return qpip_admin_submit_async(qdev, c, &cmd);
}

/*
 * An option of TCP QP @qp (the ioctl's fields, checked by the device). A device older than
 * interface 2.2 does not know the command: -EOPNOTSUPP rather than its BAD_OPCODE's -EIO.
 */
int qpip_cmd_set_qp_opt(struct qpip_dev *qdev, u32 ctx, u32 qp, const struct qpip_set_qp_opt *o)
{
	struct qpip_set_qp_opt_args args = {};
	struct qpip_admin_cmd cmd;

	if (qpip_version_minor(qdev->version) < 2)
		return -EOPNOTSUPP;
	args.option = o->option;
	args.keepalive_idle = o->keepalive_idle;
	args.keepalive_interval = o->keepalive_interval;
	args.keepalive_probes = o->keepalive_probes;
	qpip_cmd_init(&cmd, QPIP_ADMIN_OP_SET_QP_OPT, ctx, qp, &args, sizeof(args));
	return qpip_admin_run(qdev, &cmd, NULL);
}

/* ---- the device as a whole ---- */

/* A QUERY_* command writing @len bytes at @dma, a DMA buffer of ours. */
static int qpip_query_run(struct qpip_dev *qdev, u16 opcode, u32 ctx, u32 handle,
			  dma_addr_t dma, size_t len)
{
	struct qpip_query_args args = {};
	struct qpip_admin_cmd cmd;

	args.buf = dma;
	args.len = len;
	qpip_cmd_init(&cmd, opcode, ctx, handle, &args, sizeof(args));
	return qpip_admin_run(qdev, &cmd, NULL);
}

/* QUERY_DEVICE, QUERY_STATS and LIST_ADDRS write into a DMA buffer of ours. */
static int qpip_query(struct qpip_dev *qdev, u16 opcode, void *out, size_t len)
{
	struct device *dev = &qdev->pdev->dev;
	dma_addr_t dma;
	void *buf;
	int ret;

	/* A coherent buffer is page aligned, so it is 8-byte aligned and crosses no page. */
	buf = dma_alloc_coherent(dev, len, &dma, GFP_KERNEL);
	if (!buf)
		return -ENOMEM;
	ret = qpip_query_run(qdev, opcode, 0, 0, dma, len);
	if (!ret)
		memcpy(out, buf, len);
	dma_free_coherent(dev, len, buf, dma);
	return ret;
}

int qpip_query_device(struct qpip_dev *qdev, struct qpip_device_info *info)
{
	return qpip_query(qdev, QPIP_ADMIN_OP_QUERY_DEVICE, info, sizeof(*info));
}

/*
 * QUERY_STATS: the first @n counters. A device writes what fits the buffer (interface 2.3)
 * or, older, exactly its 64; the coherent buffer starts zeroed, so counters an older device
 * does not have read as 0.
 */
int qpip_query_stats(struct qpip_dev *qdev, u64 *counters, unsigned int n)
{
	return qpip_query(qdev, QPIP_ADMIN_OP_QUERY_STATS, counters, n * sizeof(u64));
}

/*
 * What the device's ConnInfo is: struct qpip_query_conn after its qp member, field for
 * field (the uapi mirrors it), so the device writes into such a structure from there.
 */
#define QPIP_CONN_INFO_OFFSET offsetof(struct qpip_query_conn, flags)
#define QPIP_CONN_INFO_SIZE (sizeof(struct qpip_query_conn) - QPIP_CONN_INFO_OFFSET)
static_assert(QPIP_CONN_INFO_OFFSET == 8);
static_assert(QPIP_CONN_INFO_SIZE == 32 + QPIP_IWARP_MAX_PEER_PRIVATE_DATA);
static_assert(offsetof(struct qpip_query_conn, private_data) == QPIP_CONN_INFO_OFFSET + 32);

/*
 * QUERY_CONN: what MPA set up for iWARP QP @qp of context @ctx, into @out's fields after
 * qp (the others are left alone).
 */
int qpip_query_conn(struct qpip_dev *qdev, u32 ctx, u32 qp, struct qpip_query_conn *out)
{
	struct device *dev = &qdev->pdev->dev;
	struct qpip_query_conn *r;
	dma_addr_t dma;
	u16 pd_len;
	int ret;

	/* Page aligned: the 544 bytes from offset 8 are 8-byte aligned and cross no page. */
	r = dma_alloc_coherent(dev, sizeof(*r), &dma, GFP_KERNEL);
	if (!r)
		return -ENOMEM;
	ret = qpip_query_run(qdev, QPIP_ADMIN_OP_QUERY_CONN, ctx, qp,
			     dma + QPIP_CONN_INFO_OFFSET, QPIP_CONN_INFO_SIZE);
	/* Read once: the length bounds the copy below. */
	pd_len = READ_ONCE(r->pd_len);
	if (!ret && pd_len > sizeof(r->private_data))
		ret = -EIO;
	if (!ret) {
		out->flags = r->flags;
		out->ird = r->ird;
		out->ord = r->ord;
		out->mpa_revision = r->mpa_revision;
		out->reserved0 = 0;
		out->pd_len = pd_len;
		out->terminate = r->terminate;
		memset(out->reserved1, 0, sizeof(out->reserved1));
		/* Only the peer's bytes: nothing else of the buffer reaches the caller. */
		memcpy(out->private_data, r->private_data, pd_len);
		memset(out->private_data + pd_len, 0, sizeof(out->private_data) - pd_len);
	}
	dma_free_coherent(dev, sizeof(*r), r, dma);
	return ret;
}

/* The device's addresses: the link-local one first, then the configured ones. */
int qpip_list_addrs(struct qpip_dev *qdev, struct qpip_addr_list *list)
{
	int ret;

	ret = qpip_query(qdev, QPIP_ADMIN_OP_LIST_ADDRS, list, sizeof(*list));
	if (!ret && list->count > ARRAY_SIZE(list->entries))
		ret = -EIO;
	return ret;
}

static int qpip_cmd_set_mac(struct qpip_dev *qdev, const u8 *mac)
{
	struct qpip_set_mac_args args = {};
	struct qpip_admin_cmd cmd;

	memcpy(args.mac, mac, ETH_ALEN);
	qpip_cmd_init(&cmd, QPIP_ADMIN_OP_SET_MAC, 0, 0, &args, sizeof(args));
	return qpip_admin_run(qdev, &cmd, NULL);
}

/* ADD_ADDR, or DEL_ADDR (which takes no prefix length). */
static int qpip_cmd_addr(struct qpip_dev *qdev, bool add, const u8 *addr, u8 prefix_len)
{
	struct qpip_addr_args args = {};
	struct qpip_admin_cmd cmd;

	memcpy(args.addr, addr, 16);
	args.prefix_len = add ? prefix_len : 0;
	qpip_cmd_init(&cmd, add ? QPIP_ADMIN_OP_ADD_ADDR : QPIP_ADMIN_OP_DEL_ADDR, 0, 0,
		      &args, sizeof(args));
	return qpip_admin_run(qdev, &cmd, NULL);
}

/* ADD_ROUTE, or DEL_ROUTE (which names the route by dest, prefix_len and metric). */
int qpip_cmd_route(struct qpip_dev *qdev, bool add, const struct qpip_route_spec *s)
{
	struct qpip_route_args args = {};
	struct qpip_admin_cmd cmd;

	if (qpip_version_minor(qdev->version) < 3)
		return -EOPNOTSUPP;
	memcpy(args.dest, s->dest, sizeof(args.dest));
	args.prefix_len = s->prefix_len;
	if (add)
		memcpy(args.gateway, s->gateway, sizeof(args.gateway));
	args.metric = s->metric;
	qpip_cmd_init(&cmd, add ? QPIP_ADMIN_OP_ADD_ROUTE : QPIP_ADMIN_OP_DEL_ROUTE, 0, 0,
		      &args, sizeof(args));
	return qpip_admin_run(qdev, &cmd, NULL);
}

/* ADD_NEIGH (@addr static at @mac), or DEL_NEIGH (which takes no MAC). */
int qpip_cmd_neigh(struct qpip_dev *qdev, bool add, const u8 *addr, const u8 *mac)
{
	struct qpip_neighbor_args args = {};
	struct qpip_admin_cmd cmd;

	if (qpip_version_minor(qdev->version) < 4)
		return -EOPNOTSUPP;
	memcpy(args.addr, addr, sizeof(args.addr));
	if (add)
		memcpy(args.mac, mac, sizeof(args.mac));
	qpip_cmd_init(&cmd, add ? QPIP_ADMIN_OP_ADD_NEIGH : QPIP_ADMIN_OP_DEL_NEIGH, 0, 0,
		      &args, sizeof(args));
	return qpip_admin_run(qdev, &cmd, NULL);
}

/* Caller holds qdev->lock for reading (or writing, during a reset). */
int qpip_set_mac(struct qpip_dev *qdev, const u8 *mac)
{
	int ret;

	if (!is_valid_ether_addr(mac))
		return -EINVAL;
	mutex_lock(&qdev->cfg_lock);
	ret = qpip_cmd_set_mac(qdev, mac);
	if (!ret) {
		memcpy(qdev->info.mac, mac, ETH_ALEN);
		qdev->mac_set = true;
	}
	mutex_unlock(&qdev->cfg_lock);
	return ret;
}

static int qpip_find_addr(struct qpip_dev *qdev, const u8 *addr)
{
	unsigned int i;

	for (i = 0; i < qdev->naddrs; i++)
		if (!memcmp(qdev->addrs[i].addr, addr, 16))
			return i;
	return -1;
}

/* ADD_ADDR / DEL_ADDR, keeping the driver's list of addresses (for sysfs and resets). */
int qpip_change_addr(struct qpip_dev *qdev, bool add, const u8 *addr, u8 prefix_len)
{
	int ret, i;

	if (add && (prefix_len < 1 || prefix_len > 128))
		return -EINVAL;
	mutex_lock(&qdev->cfg_lock);
	ret = qpip_cmd_addr(qdev, add, addr, prefix_len);
	if (!ret) {
		i = qpip_find_addr(qdev, addr);
		if (add && i < 0 && qdev->naddrs < ARRAY_SIZE(qdev->addrs)) {
			memcpy(qdev->addrs[qdev->naddrs].addr, addr, 16);
			qdev->addrs[qdev->naddrs].prefix_len = prefix_len;
			qdev->naddrs++;
		} else if (!add && i >= 0) {
			qdev->addrs[i] = qdev->addrs[--qdev->naddrs];
		}
	}
	mutex_unlock(&qdev->cfg_lock);
	return ret;
}

/*
 * After a reset the device has forgotten what was configured through the driver: give it
 * back the MAC, the addresses and the mirrored routes, and read what it reports now.
 */
int qpip_restore_config(struct qpip_dev *qdev)
{
	struct qpip_device_info info;
	unsigned int i;
	int ret = 0;

	mutex_lock(&qdev->cfg_lock);
	if (qdev->mac_set)
		ret = qpip_cmd_set_mac(qdev, qdev->info.mac);
	for (i = 0; !ret && i < qdev->naddrs; i++) {
		ret = qpip_cmd_addr(qdev, true, qdev->addrs[i].addr, qdev->addrs[i].prefix_len);
		/* Addresses the device was started with are there again already. */
		if (ret == -EADDRINUSE)
			ret = 0;
	}
	/* A route refused now is logged and dropped; the reset goes on. */
	if (!ret)
		qpip_routes_restore(qdev);
	if (!ret)
		ret = qpip_query_device(qdev, &info);
	if (!ret)
		qdev->info = info;
	mutex_unlock(&qdev->cfg_lock);
	return ret;
}
