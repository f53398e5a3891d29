// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * libqpip-rdmav34.so: rdma-core's verbs provider for qpip's iWARP ib_device (qpip_ib.ko),
 * so unmodified libibverbs programs open it.
 *
 * Built out of rdma-core's tree against its private provider interface (driver.h,
 * IBVERBS_PRIVATE_34: libibverbs 56.x) by images/rdma-provider.sh; libibverbs loads it
 * for each device /etc/libibverbs.d/qpip.driver's "driver qpip" matches.
 *
 * What works: the device is matched (by its PCI ids, or an ib_device named qpipN), a
 * context is the kernel's user context — a device context of the function, whose doorbell
 * page is mapped here, where the queue pairs' fast path will ring — and query_device,
 * query_port, alloc_pd and dealloc_pd go to the kernel. Every other verb is libibverbs'
 * default, which fails with EOPNOTSUPP: CQs, QPs, memory regions and the connection
 * manager's QPs come with the next stages.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <infiniband/driver.h>
#include <infiniband/kern-abi.h>

#include "qpip_ib.h"
#include <kernel-abi/qpip_ib.h>

/* The function's PCI ids (abi/src: PCI_VENDOR_ID, PCI_DEVICE_ID). */
#define QPIP_PCI_VENDOR 0x1234
#define QPIP_PCI_DEVICE 0x5150

DECLARE_DRV_CMD(qpip_cmd_alloc_context, IB_USER_VERBS_CMD_GET_CONTEXT,
		empty, qpip_ib_alloc_ucontext_resp);
DECLARE_DRV_CMD(qpip_cmd_alloc_pd, IB_USER_VERBS_CMD_ALLOC_PD,
		empty, qpip_ib_alloc_pd_resp);

struct qpip_device {
	struct verbs_device ibv_dev;
};

struct qpip_context {
	struct verbs_context ibv_ctx;
	uint32_t ctx_id;		/* the device context */
	void *db_page;			/* its doorbell page, mapped */
	size_t db_page_size;
	uint32_t max_inline;
	uint32_t max_sge;
	uint32_t max_queue_depth;
};

struct qpip_pd {
	struct ibv_pd ibv_pd;
	uint32_t pdn;
};

static struct qpip_context *to_qctx(struct ibv_context *ctx)
{
	return container_of(ctx, struct qpip_context, ibv_ctx.context);
}

/* ---- queries ---- */

static int qpip_query_device(struct ibv_context *ctx,
			     const struct ibv_query_device_ex_input *input,
			     struct ibv_device_attr_ex *attr, size_t attr_size)
{
	struct ib_uverbs_ex_query_device_resp resp;
	size_t resp_size = sizeof(resp);
	uint64_t fw;
	int ret;

	ret = ibv_cmd_query_device_any(ctx, input, attr, attr_size, &resp, &resp_size);
	if (ret)
		return ret;
	/* The kernel gives the device interface's version: major in the high 32 bits. */
	fw = resp.base.fw_ver;
	snprintf(attr->orig_attr.fw_ver, sizeof(attr->orig_attr.fw_ver), "%u.%u",
		 (unsigned int)(fw >> 32), (unsigned int)(fw & 0xffffffff));
	return 0;
}

static int qpip_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr)
{
	struct ibv_query_port cmd;

	return ibv_cmd_query_port(ctx, port, attr, &cmd, sizeof(cmd));
}

/* ---- protection domains ---- */

static struct ibv_pd *qpip_alloc_pd(struct ibv_context *ctx)
{
	struct qpip_cmd_alloc_pd cmd = {};
	struct qpip_cmd_alloc_pd_resp resp = {};
	struct qpip_pd *pd;
	int ret;

	pd = calloc(1, sizeof(*pd));
	if (!pd) {
		errno = ENOMEM;
		return NULL;
	}
	ret = ibv_cmd_alloc_pd(ctx, &pd->ibv_pd, &cmd.ibv_cmd, sizeof(cmd),
			       &resp.ibv_resp, sizeof(resp));
	if (ret) {
		free(pd);
		errno = ret;
		return NULL;
	}
	pd->pdn = resp.pdn;
	return &pd->ibv_pd;
}

static int qpip_dealloc_pd(struct ibv_pd *ibv_pd)
{
	int ret;

	ret = ibv_cmd_dealloc_pd(ibv_pd);
	if (ret)
		return ret;
	free(container_of(ibv_pd, struct qpip_pd, ibv_pd));
	return 0;
}

/* ---- contexts and the device ---- */

static void qpip_free_context(struct ibv_context *ibv_ctx)
{
	struct qpip_context *ctx = to_qctx(ibv_ctx);

	if (ctx->db_page)
		munmap(ctx->db_page, ctx->db_page_size);
	verbs_uninit_context(&ctx->ibv_ctx);
	free(ctx);
}

static const struct verbs_context_ops qpip_context_ops = {
	.query_device_ex = qpip_query_device,
	.query_port = qpip_query_port,
	.alloc_pd = qpip_alloc_pd,
	.dealloc_pd = qpip_dealloc_pd,
	.free_context = qpip_free_context,
};

static struct verbs_context *qpip_alloc_context(struct ibv_device *ibdev, int cmd_fd,
						void *private_data)
{
	struct qpip_cmd_alloc_context cmd = {};
	struct qpip_cmd_alloc_context_resp resp = {};
	struct qpip_context *ctx;
	int ret;

	ctx = verbs_init_and_alloc_context(ibdev, cmd_fd, ctx, ibv_ctx, RDMA_DRIVER_UNKNOWN);
	if (!ctx)
		return NULL;
	ret = ibv_cmd_get_context(&ctx->ibv_ctx, &cmd.ibv_cmd, sizeof(cmd),
				  &resp.ibv_resp, sizeof(resp));
	if (ret) {
		errno = ret;
		goto err;
	}
	ctx->ctx_id = resp.ctx_id;
	ctx->db_page_size = resp.db_page_size;
	ctx->max_inline = resp.max_inline;
	ctx->max_sge = resp.max_sge;
	ctx->max_queue_depth = resp.max_queue_depth;
	/* The doorbell page: where the queues' doorbells will be rung without a system call. */
	ctx->db_page = mmap(NULL, ctx->db_page_size, PROT_READ | PROT_WRITE, MAP_SHARED,
			    cmd_fd, resp.db_mmap_offset);
	if (ctx->db_page == MAP_FAILED) {
		ctx->db_page = NULL;
		goto err;
	}
	verbs_set_ops(&ctx->ibv_ctx, &qpip_context_ops);
	return &ctx->ibv_ctx;

err:
	ret = errno;
	verbs_uninit_context(&ctx->ibv_ctx);
	free(ctx);
	errno = ret;
	return NULL;
}

static struct verbs_device *qpip_device_alloc(struct verbs_sysfs_dev *sysfs_dev)
{
	struct qpip_device *dev;

	dev = calloc(1, sizeof(*dev));
	if (!dev)
		return NULL;
	return &dev->ibv_dev;
}

static void qpip_device_free(struct verbs_device *vdev)
{
	free(container_of(vdev, struct qpip_device, ibv_dev));
}

/*
 * The kernel registers the device with no driver id of rdma-core's (an out-of-tree driver
 * may not take one): it is found by the function's PCI ids, or by the ib_device's name.
 */
static const struct verbs_match_ent qpip_match_table[] = {
	VERBS_PCI_MATCH(QPIP_PCI_VENDOR, QPIP_PCI_DEVICE, NULL),
	VERBS_NAME_MATCH("qpip", NULL),
	{},
};

static const struct verbs_device_ops qpip_dev_ops = {
	.name = "qpip",
	/* A kernel module of another uverbs ABI is not matched (libibverbs says so on stderr). */
	.match_min_abi_version = QPIP_IB_ABI_VERSION,
	.match_max_abi_version = QPIP_IB_ABI_VERSION,
	.match_table = qpip_match_table,
	.alloc_device = qpip_device_alloc,
	.uninit_device = qpip_device_free,
	.alloc_context = qpip_alloc_context,
};

PROVIDER_DRIVER(qpip, qpip_dev_ops);
