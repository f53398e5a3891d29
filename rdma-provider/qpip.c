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
 * page and kick register are mapped here — and query_device, query_port, alloc_pd and
 * dealloc_pd go to the kernel. CQs are the device's: created by the kernel, their rings
 * mapped here, polled and armed with no system call (the doorbell page's cq_head and
 * arm_seq, qpip_abi.h). Memory regions are the device's registered regions. QPs are
 * libibverbs' default, which fails with EOPNOTSUPP, until the QP stage.
 */
#include <endian.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <infiniband/driver.h>
#include <infiniband/kern-abi.h>

#include "qpip_abi.h"
#include "qpip_ib.h"
#include <kernel-abi/qpip_ib.h>

/* The function's PCI ids (abi/src: PCI_VENDOR_ID, PCI_DEVICE_ID). */
#define QPIP_PCI_VENDOR 0x1234
#define QPIP_PCI_DEVICE 0x5150

DECLARE_DRV_CMD(qpip_cmd_alloc_context, IB_USER_VERBS_CMD_GET_CONTEXT,
		empty, qpip_ib_alloc_ucontext_resp);
DECLARE_DRV_CMD(qpip_cmd_alloc_pd, IB_USER_VERBS_CMD_ALLOC_PD,
		empty, qpip_ib_alloc_pd_resp);
DECLARE_DRV_CMD(qpip_cmd_create_cq, IB_USER_VERBS_CMD_CREATE_CQ,
		empty, qpip_ib_create_cq_resp);

struct qpip_device {
	struct verbs_device ibv_dev;
};

struct qpip_context {
	struct verbs_context ibv_ctx;
	uint32_t ctx_id;		/* the device context */
	void *db_page;			/* its doorbell page, mapped */
	size_t db_page_size;
	volatile uint32_t *kick;	/* the device's kick register, mapped */
	uint32_t max_inline;
	uint32_t max_sge;
	uint32_t max_queue_depth;
};

struct qpip_pd {
	struct ibv_pd ibv_pd;
	uint32_t pdn;
};

/* A CQ of the device context: its ring mapped, its doorbell slot in the context's page. */
struct qpip_cq {
	struct ibv_cq ibv_cq;
	pthread_spinlock_t lock;	/* head and arm_seq: ibv_poll_cq may be called by threads */
	const struct qpip_cqe *ring;
	size_t ring_size;
	uint32_t depth;			/* a power of two */
	uint32_t head;			/* CQEs consumed (free-running) */
	uint32_t arm_seq;		/* the last sequence written to arm_seq */
	_Atomic uint32_t *db_head;	/* the slot's cq_head */
	_Atomic uint32_t *db_arm;	/* the slot's arm_seq */
};

static struct qpip_context *to_qctx(struct ibv_context *ctx)
{
	return container_of(ctx, struct qpip_context, ibv_ctx.context);
}

static struct qpip_cq *to_qcq(struct ibv_cq *cq)
{
	return container_of(cq, struct qpip_cq, ibv_cq);
}

/* ---- the doorbell protocol (the device interface's doorbell page) ---- */

static _Atomic uint32_t *qpip_db_word(struct qpip_context *ctx, uint32_t off)
{
	return (_Atomic uint32_t *)((char *)ctx->db_page + off);
}

/*
 * Publishes @value at @word: what was written before it first, then the page's change
 * counter (a full barrier), which the engine watches. With @kick, and the engine asleep,
 * the kick register wakes it; a doorbell the engine does not wait for is rung quietly.
 */
static void qpip_ring(struct qpip_context *ctx, _Atomic uint32_t *word, uint32_t value,
		      int kick)
{
	atomic_thread_fence(memory_order_release);
	atomic_store_explicit(word, value, memory_order_relaxed);
	atomic_fetch_add_explicit(qpip_db_word(ctx, QPIP_DB_CHANGE_COUNT), 1,
				  memory_order_seq_cst);
	if (kick && ctx->kick &&
	    atomic_load_explicit(qpip_db_word(ctx, QPIP_DB_ENGINE_SLEEPING), memory_order_relaxed))
		ctx->kick[QPIP_KICK / 4] = 1;
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

/* ---- completion queues ---- */

static struct ibv_cq *qpip_create_cq(struct ibv_context *ibv_ctx, int cqe,
				     struct ibv_comp_channel *channel, int comp_vector)
{
	struct qpip_context *ctx = to_qctx(ibv_ctx);
	struct qpip_cmd_create_cq cmd = {};
	struct qpip_cmd_create_cq_resp resp = {};
	struct qpip_cq *cq;
	uint32_t slot_off;
	int ret;

	cq = calloc(1, sizeof(*cq));
	if (!cq) {
		errno = ENOMEM;
		return NULL;
	}
	if (pthread_spin_init(&cq->lock, PTHREAD_PROCESS_PRIVATE)) {
		free(cq);
		errno = ENOMEM;
		return NULL;
	}
	ret = ibv_cmd_create_cq(ibv_ctx, cqe, channel, comp_vector, &cq->ibv_cq,
				&cmd.ibv_cmd, sizeof(cmd), &resp.ibv_resp, sizeof(resp));
	if (ret) {
		errno = ret;
		goto err_free;
	}
	if (resp.db_slot >= QPIP_DB_CQ_SLOTS || !resp.depth || (resp.depth & (resp.depth - 1)) ||
	    resp.ring_size < (uint64_t)resp.depth * QPIP_CQE_SIZE) {
		errno = EPROTO;
		goto err_destroy;
	}
	cq->depth = resp.depth;
	cq->ring_size = resp.ring_size;
	cq->ring = mmap(NULL, cq->ring_size, PROT_READ, MAP_SHARED, ibv_ctx->cmd_fd,
			resp.ring_mmap_offset);
	if (cq->ring == MAP_FAILED)
		goto err_destroy;
	slot_off = QPIP_DB_CQ_BASE + resp.db_slot * QPIP_DB_CQ_STRIDE;
	cq->db_head = qpip_db_word(ctx, slot_off + QPIP_DB_CQ_HEAD);
	cq->db_arm = qpip_db_word(ctx, slot_off + QPIP_DB_CQ_ARM_SEQ);
	return &cq->ibv_cq;

err_destroy:
	ret = errno;
	ibv_cmd_destroy_cq(&cq->ibv_cq);
	errno = ret;
err_free:
	pthread_spin_destroy(&cq->lock);
	free(cq);
	return NULL;
}

static int qpip_destroy_cq(struct ibv_cq *ibv_cq)
{
	struct qpip_cq *cq = to_qcq(ibv_cq);
	int ret;

	ret = ibv_cmd_destroy_cq(ibv_cq);
	if (ret)
		return ret;
	munmap((void *)cq->ring, cq->ring_size);
	pthread_spin_destroy(&cq->lock);
	free(cq);
	return 0;
}

/*
 * Whether the device has written completion @i: the owner byte, written last, carries the
 * phase of @i's pass around the ring (1 on the first pass, 0 on the second, ...).
 */
static int qpip_cqe_written(const struct qpip_cq *cq, uint32_t i)
{
	const struct qpip_cqe *c = &cq->ring[i & (cq->depth - 1)];
	uint8_t phase = ((i / cq->depth) & 1) ^ 1;

	return (atomic_load_explicit((const _Atomic uint8_t *)&c->owner, memory_order_acquire) &
		1) == phase;
}

static enum ibv_wc_status qpip_wc_status(uint8_t status)
{
	switch (status) {
	case QPIP_CQE_STATUS_SUCCESS:
		return IBV_WC_SUCCESS;
	case QPIP_CQE_STATUS_LOCAL_LENGTH:
		return IBV_WC_LOC_LEN_ERR;
	case QPIP_CQE_STATUS_LOCAL_PROTECTION:
		return IBV_WC_LOC_PROT_ERR;
	case QPIP_CQE_STATUS_BAD_OPCODE:
	case QPIP_CQE_STATUS_BAD_WQE:
		return IBV_WC_LOC_QP_OP_ERR;
	case QPIP_CQE_STATUS_FLUSHED:
		return IBV_WC_WR_FLUSH_ERR;
	case QPIP_CQE_STATUS_REMOTE_ACCESS:
		return IBV_WC_REM_ACCESS_ERR;
	case QPIP_CQE_STATUS_REMOTE_OPERATION:
		return IBV_WC_REM_OP_ERR;
	default:
		return IBV_WC_GENERAL_ERR;
	}
}

static void qpip_wc_from_cqe(struct ibv_wc *wc, const struct qpip_cqe *c)
{
	memset(wc, 0, sizeof(*wc));
	wc->wr_id = c->wr_id;
	wc->status = qpip_wc_status(c->status);
	wc->vendor_err = c->status == QPIP_CQE_STATUS_SUCCESS ? 0 : c->detail;
	wc->byte_len = c->byte_len;
	wc->qp_num = c->qp;
	switch (c->opcode) {
	case QPIP_CQE_OP_SEND:
		wc->opcode = IBV_WC_SEND;
		break;
	case QPIP_CQE_OP_RDMA_WRITE:
		wc->opcode = IBV_WC_RDMA_WRITE;
		break;
	case QPIP_CQE_OP_RDMA_READ:
		wc->opcode = IBV_WC_RDMA_READ;
		break;
	case QPIP_CQE_OP_RECV_IMM:
		wc->opcode = IBV_WC_RECV_RDMA_WITH_IMM;
		wc->wc_flags = IBV_WC_WITH_IMM;
		wc->imm_data = htobe32(c->imm_data);
		break;
	case QPIP_CQE_OP_RECV:
	default:
		wc->opcode = IBV_WC_RECV;
		break;
	}
}

/*
 * Reads completions from the mapped ring and gives their slots back through cq_head, with
 * no system call. The engine waits for cq_head only when it filled the ring, so only then
 * is a sleeping engine kicked: the slot before the old head holds a completion exactly
 * when the ring was full.
 */
static int qpip_poll_cq(struct ibv_cq *ibv_cq, int num_entries, struct ibv_wc *wc)
{
	struct qpip_cq *cq = to_qcq(ibv_cq);
	uint32_t old_head;
	int n = 0, was_full;

	pthread_spin_lock(&cq->lock);
	old_head = cq->head;
	while (n < num_entries && qpip_cqe_written(cq, cq->head)) {
		qpip_wc_from_cqe(&wc[n], &cq->ring[cq->head & (cq->depth - 1)]);
		cq->head++;
		n++;
	}
	if (n) {
		was_full = qpip_cqe_written(cq, old_head - 1 + cq->depth);
		qpip_ring(to_qctx(ibv_cq->context), cq->db_head, cq->head, was_full);
	}
	pthread_spin_unlock(&cq->lock);
	return n;
}

/*
 * Arms the CQ: a new sequence in arm_seq (its low 31 bits), with CQ_ARM_SOLICITED for
 * solicited completions only (receives and errors). The device interrupts once, at once
 * if a completion is already there; the kernel turns it into the completion channel's
 * event. The engine reads arm words when it runs, and is not kicked for them.
 */
static int qpip_req_notify_cq(struct ibv_cq *ibv_cq, int solicited_only)
{
	struct qpip_cq *cq = to_qcq(ibv_cq);
	uint32_t v;

	pthread_spin_lock(&cq->lock);
	cq->arm_seq = (cq->arm_seq + 1) & QPIP_CQ_ARM_SEQ_MASK;
	v = cq->arm_seq | (solicited_only ? QPIP_CQ_ARM_SOLICITED : 0);
	qpip_ring(to_qctx(ibv_cq->context), cq->db_arm, v, 0);
	pthread_spin_unlock(&cq->lock);
	return 0;
}

/* ---- memory regions ---- */

static struct ibv_mr *qpip_reg_mr(struct ibv_pd *pd, void *addr, size_t length,
				  uint64_t hca_va, int access)
{
	struct ib_uverbs_reg_mr_resp resp;
	struct ibv_reg_mr cmd;
	struct verbs_mr *vmr;
	int ret;

	vmr = calloc(1, sizeof(*vmr));
	if (!vmr) {
		errno = ENOMEM;
		return NULL;
	}
	ret = ibv_cmd_reg_mr(pd, addr, length, hca_va, access, vmr, &cmd, sizeof(cmd),
			     &resp, sizeof(resp));
	if (ret) {
		free(vmr);
		errno = ret;
		return NULL;
	}
	return &vmr->ibv_mr;
}

static int qpip_dereg_mr(struct verbs_mr *vmr)
{
	int ret;

	ret = ibv_cmd_dereg_mr(vmr);
	if (ret)
		return ret;
	free(vmr);
	return 0;
}

/* ---- contexts and the device ---- */

static void qpip_free_context(struct ibv_context *ibv_ctx)
{
	struct qpip_context *ctx = to_qctx(ibv_ctx);

	if (ctx->kick)
		munmap((void *)ctx->kick, 4096);
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
	.create_cq = qpip_create_cq,
	.destroy_cq = qpip_destroy_cq,
	.poll_cq = qpip_poll_cq,
	.req_notify_cq = qpip_req_notify_cq,
	.reg_mr = qpip_reg_mr,
	.dereg_mr = qpip_dereg_mr,
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
	/* The kick register: written only when a doorbell finds the engine asleep. */
	ctx->kick = mmap(NULL, 4096, PROT_WRITE, MAP_SHARED, cmd_fd, resp.kick_mmap_offset);
	if (ctx->kick == MAP_FAILED) {
		ctx->kick = NULL;
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
