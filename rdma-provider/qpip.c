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
 * arm_seq, qpip_abi.h). Memory regions are the device's registered regions. QPs are the
 * device's iWARP QPs: created by the kernel, their rings mapped here, where work requests
 * are written as WQEs and the QP's doorbell rung with no system call (the kick register
 * only when the engine sleeps); their completions come back through the CQs' polls.
 *
 * A QP whose device QP is gone — moved to ERR by anyone, the device reset, qpip_ib
 * unloaded — is dead: the kernel says so in the context's status page (mapped read-only,
 * one word per QP), which a post reads before it rings. A dead QP's WRs never reach the
 * device; the polls complete them IBV_WC_WR_FLUSH_ERR after the device's own completions,
 * as verbs flush a QP in ERR.
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
DECLARE_DRV_CMD(qpip_cmd_create_qp, IB_USER_VERBS_CMD_CREATE_QP,
		empty, qpip_ib_create_qp_resp);

/* The context's QPs by their number, for the polls (a CQE names its QP by it). */
#define QPIP_QP_BUCKETS 256

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
	/*
	 * The status page (QPIP_IB_STATUS_*), or NULL from a kernel without one: then a QP is
	 * known dead only by this process's own move to ERR (@own_generation counts those).
	 */
	const void *status;
	size_t status_size;
	const _Atomic uint32_t *generation;	/* the page's, or &own_generation */
	_Atomic uint32_t own_generation;
	pthread_mutex_t qp_lock;	/* qp_table, dead_qps, seen_generation */
	struct qpip_qp *qp_table[QPIP_QP_BUCKETS];
	/* The dead QPs, whose WRs the polls complete flushed; the generation they were seen in. */
	struct qpip_qp *_Atomic dead_qps;
	_Atomic uint32_t seen_generation;
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

/* What a posted work request was, kept by its ring slot until its completion is polled. */
struct qpip_wr_slot {
	uint64_t wr_id;			/* the caller's */
	uint8_t signaled;		/* a successful completion is reported */
	uint8_t opcode;			/* enum ibv_wc_opcode */
};

/*
 * One work queue of a QP: its mapped ring of WQEs and its producer index in the doorbell
 * page. A WQE's wr_id is its free-running index: its completion finds the slot's record
 * by it. Every WR completes (the device has no unsignalled WRs), so the count of polled
 * completions tells which slots are free again.
 */
struct qpip_wq {
	pthread_spinlock_t lock;	/* tail and the ring: posts may come from threads */
	void *ring;
	size_t ring_size;
	uint32_t depth;			/* a power of two */
	uint32_t tail;			/* WRs posted (free-running) */
	_Atomic uint32_t done;		/* their completions polled */
	struct qpip_wr_slot *slots;
	_Atomic uint32_t *db;		/* the QP slot's sq_tail or rq_tail */
};

struct qpip_qp {
	struct ibv_qp ibv_qp;
	struct qpip_qp *next;		/* in the context's qp_table bucket */
	uint32_t handle;		/* the device's QP: qp_num */
	uint32_t max_inline;
	uint32_t max_sge;
	int sq_sig_all;
	/*
	 * Its word in the status page (@own_state without one): QPIP_IB_QP_DEAD once the
	 * device's QP is gone. Read once per post: a dead QP's doorbell is never rung.
	 */
	const _Atomic uint32_t *state;
	_Atomic uint32_t own_state;
	struct qpip_qp *dead_next;	/* in the context's dead_qps; under qp_lock */
	int on_dead_list;
	struct qpip_wq sq;
	struct qpip_wq rq;
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

/* The QP @handle of @ctx, or NULL (destroyed: its last completions are dropped). */
static struct qpip_qp *qpip_qp_find(struct qpip_context *ctx, uint32_t handle)
{
	struct qpip_qp *qp;

	pthread_mutex_lock(&ctx->qp_lock);
	for (qp = ctx->qp_table[handle % QPIP_QP_BUCKETS]; qp; qp = qp->next)
		if (qp->handle == handle)
			break;
	pthread_mutex_unlock(&ctx->qp_lock);
	return qp;
}

/*
 * Turns CQE @c into @wc; returns 0 if it is not to be reported: the completion of an
 * unsignalled WR that succeeded, or one of a QP destroyed since. Either way its slot in
 * its queue is free again.
 */
static int qpip_wc_from_cqe(struct qpip_context *ctx, struct ibv_wc *wc,
			    const struct qpip_cqe *c)
{
	struct qpip_wr_slot *slot;
	struct qpip_qp *qp;
	struct qpip_wq *wq;
	int send;

	qp = qpip_qp_find(ctx, c->qp);
	if (!qp)
		return 0;
	send = c->opcode == QPIP_CQE_OP_SEND || c->opcode == QPIP_CQE_OP_RDMA_WRITE ||
	       c->opcode == QPIP_CQE_OP_RDMA_READ;
	wq = send ? &qp->sq : &qp->rq;
	/*
	 * A WR this poll already completed flushed (the device's completion came after the QP
	 * was seen dead, which the kernel's order rules out): not twice.
	 */
	if ((int32_t)((uint32_t)c->wr_id - atomic_load_explicit(&wq->done, memory_order_relaxed)) < 0)
		return 0;
	slot = &wq->slots[c->wr_id & (wq->depth - 1)];
	/* One writer: the poll of the queue's CQ (its lock held). */
	atomic_store_explicit(&wq->done, atomic_load_explicit(&wq->done, memory_order_relaxed) + 1,
			      memory_order_release);
	if (send && !slot->signaled && c->status == QPIP_CQE_STATUS_SUCCESS)
		return 0;

	memset(wc, 0, sizeof(*wc));
	wc->wr_id = slot->wr_id;
	wc->status = qpip_wc_status(c->status);
	wc->vendor_err = c->status == QPIP_CQE_STATUS_SUCCESS ? 0 : c->detail;
	wc->byte_len = c->byte_len;
	wc->qp_num = c->qp;
	if (send) {
		wc->opcode = slot->opcode;
		return 1;
	}
	if (c->opcode == QPIP_CQE_OP_RECV_IMM) {
		wc->opcode = IBV_WC_RECV_RDMA_WITH_IMM;
		wc->wc_flags = IBV_WC_WITH_IMM;
		/* The sender's bytes in the sender's order (see IBV_WR_RDMA_WRITE_WITH_IMM). */
		wc->imm_data = htobe32(le32toh(c->imm_data));
	} else {
		wc->opcode = IBV_WC_RECV;
	}
	return 1;
}

/* Puts @qp on the context's dead list once (qp_lock held). */
static void qpip_dead_add_locked(struct qpip_context *ctx, struct qpip_qp *qp)
{
	if (qp->on_dead_list)
		return;
	qp->on_dead_list = 1;
	qp->dead_next = atomic_load_explicit(&ctx->dead_qps, memory_order_relaxed);
	atomic_store_explicit(&ctx->dead_qps, qp, memory_order_release);
}

/*
 * The status page's generation moved to @gen: some QP died since the last look. Every QP
 * whose word says DEAD goes on the dead list.
 */
static void qpip_dead_scan(struct qpip_context *ctx, uint32_t gen)
{
	struct qpip_qp *qp;
	int i;

	pthread_mutex_lock(&ctx->qp_lock);
	atomic_store_explicit(&ctx->seen_generation, gen, memory_order_relaxed);
	for (i = 0; i < QPIP_QP_BUCKETS; i++)
		for (qp = ctx->qp_table[i]; qp; qp = qp->next)
			if (atomic_load_explicit(qp->state, memory_order_acquire) == QPIP_IB_QP_DEAD)
				qpip_dead_add_locked(ctx, qp);
	pthread_mutex_unlock(&ctx->qp_lock);
}

/*
 * Completes @wq's outstanding WRs IBV_WC_WR_FLUSH_ERR into @wc (at most @max), oldest
 * first; returns how many. Flushed WRs are reported signalled or not, as errors are.
 */
static int qpip_wq_flush(struct qpip_qp *qp, struct qpip_wq *wq, struct ibv_wc *wc, int max)
{
	uint32_t done;
	int n = 0;

	pthread_spin_lock(&wq->lock);
	done = atomic_load_explicit(&wq->done, memory_order_relaxed);
	for (; n < max && done != wq->tail; n++, done++) {
		memset(&wc[n], 0, sizeof(wc[n]));
		wc[n].wr_id = wq->slots[done & (wq->depth - 1)].wr_id;
		wc[n].status = IBV_WC_WR_FLUSH_ERR;
		wc[n].opcode = wq->slots[done & (wq->depth - 1)].opcode;
		wc[n].qp_num = qp->handle;
	}
	atomic_store_explicit(&wq->done, done, memory_order_release);
	pthread_spin_unlock(&wq->lock);
	return n;
}

/*
 * The software half of a poll (cq->lock held): the WRs of dead QPs on @cq that the device
 * will never complete, flushed — only once the device's ring has nothing more, so the
 * device's own completions of a QP (all written before its word said DEAD) come first.
 */
static int qpip_poll_dead(struct qpip_context *ctx, struct qpip_cq *cq, struct ibv_wc *wc,
			  int max)
{
	struct qpip_qp *qp;
	int n = 0;

	pthread_mutex_lock(&ctx->qp_lock);
	if (!qpip_cqe_written(cq, cq->head)) {
		for (qp = atomic_load_explicit(&ctx->dead_qps, memory_order_relaxed); qp && n < max;
		     qp = qp->dead_next) {
			if (qp->ibv_qp.send_cq == &cq->ibv_cq)
				n += qpip_wq_flush(qp, &qp->sq, wc + n, max - n);
			if (qp->ibv_qp.recv_cq == &cq->ibv_cq && n < max)
				n += qpip_wq_flush(qp, &qp->rq, wc + n, max - n);
		}
	}
	pthread_mutex_unlock(&ctx->qp_lock);
	return n;
}

/*
 * Reads completions from the mapped ring and gives their slots back through cq_head, with
 * no system call. The engine waits for cq_head only when it filled the ring, so only then
 * is a sleeping engine kicked: the slot before the old head holds a completion exactly
 * when the ring was full. Then the dead QPs' WRs, flushed; whether a QP died since the
 * last poll is one load (the status page's generation), made before the ring is read.
 */
static int qpip_poll_cq(struct ibv_cq *ibv_cq, int num_entries, struct ibv_wc *wc)
{
	struct qpip_context *ctx = to_qctx(ibv_cq->context);
	struct qpip_cq *cq = to_qcq(ibv_cq);
	uint32_t old_head, gen;
	int n = 0, was_full;

	pthread_spin_lock(&cq->lock);
	gen = atomic_load_explicit(ctx->generation, memory_order_acquire);
	if (gen != atomic_load_explicit(&ctx->seen_generation, memory_order_relaxed))
		qpip_dead_scan(ctx, gen);
	old_head = cq->head;
	while (n < num_entries && qpip_cqe_written(cq, cq->head)) {
		n += qpip_wc_from_cqe(ctx, &wc[n], &cq->ring[cq->head & (cq->depth - 1)]);
		cq->head++;
	}
	if (cq->head != old_head) {
		was_full = qpip_cqe_written(cq, old_head - 1 + cq->depth);
		qpip_ring(ctx, cq->db_head, cq->head, was_full);
	}
	if (n < num_entries && atomic_load_explicit(&ctx->dead_qps, memory_order_relaxed))
		n += qpip_poll_dead(ctx, cq, wc + n, num_entries - n);
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

/* ---- queue pairs ---- */

static struct qpip_qp *to_qqp(struct ibv_qp *qp)
{
	return container_of(qp, struct qpip_qp, ibv_qp);
}

/* Maps work queue @wq's ring (@size bytes at @offset) and sets it up; errno on failure. */
static int qpip_wq_init(struct qpip_wq *wq, struct ibv_context *ibv_ctx, uint64_t offset,
			uint64_t size, uint32_t depth, _Atomic uint32_t *db)
{
	if (!depth || (depth & (depth - 1)) || size < (uint64_t)depth * QPIP_WQE_SIZE)
		return EPROTO;
	if (pthread_spin_init(&wq->lock, PTHREAD_PROCESS_PRIVATE))
		return ENOMEM;
	wq->slots = calloc(depth, sizeof(*wq->slots));
	if (!wq->slots)
		goto err_lock;
	wq->ring = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, ibv_ctx->cmd_fd, offset);
	if (wq->ring == MAP_FAILED)
		goto err_slots;
	wq->ring_size = size;
	wq->depth = depth;
	wq->db = db;
	return 0;

err_slots:
	free(wq->slots);
	wq->slots = NULL;
err_lock:
	pthread_spin_destroy(&wq->lock);
	wq->ring = NULL;
	return errno ? errno : ENOMEM;
}

static void qpip_wq_fini(struct qpip_wq *wq)
{
	if (!wq->ring)
		return;
	munmap(wq->ring, wq->ring_size);
	free(wq->slots);
	pthread_spin_destroy(&wq->lock);
}

static void qpip_qp_table_add(struct qpip_context *ctx, struct qpip_qp *qp)
{
	struct qpip_qp **b = &ctx->qp_table[qp->handle % QPIP_QP_BUCKETS];

	pthread_mutex_lock(&ctx->qp_lock);
	qp->next = *b;
	*b = qp;
	pthread_mutex_unlock(&ctx->qp_lock);
}

static void qpip_qp_table_del(struct qpip_context *ctx, struct qpip_qp *qp)
{
	struct qpip_qp **p;

	struct qpip_qp *prev = NULL, *q;

	pthread_mutex_lock(&ctx->qp_lock);
	for (p = &ctx->qp_table[qp->handle % QPIP_QP_BUCKETS]; *p; p = &(*p)->next) {
		if (*p == qp) {
			*p = qp->next;
			break;
		}
	}
	if (qp->on_dead_list) {
		for (q = atomic_load_explicit(&ctx->dead_qps, memory_order_relaxed); q;
		     prev = q, q = q->dead_next) {
			if (q != qp)
				continue;
			if (prev)
				prev->dead_next = qp->dead_next;
			else
				atomic_store_explicit(&ctx->dead_qps, qp->dead_next,
						      memory_order_relaxed);
			break;
		}
	}
	pthread_mutex_unlock(&ctx->qp_lock);
}

static struct ibv_qp *qpip_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct qpip_context *ctx = to_qctx(pd->context);
	struct qpip_cmd_create_qp cmd = {};
	struct qpip_cmd_create_qp_resp resp = {};
	struct qpip_qp *qp;
	uint32_t slot_off;
	int ret;

	/* RC only (iWARP has no other), no SRQ: the kernel refuses them too. */
	if (attr->qp_type != IBV_QPT_RC || attr->srq) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	qp = calloc(1, sizeof(*qp));
	if (!qp) {
		errno = ENOMEM;
		return NULL;
	}
	ret = ibv_cmd_create_qp(pd, &qp->ibv_qp, attr, &cmd.ibv_cmd, sizeof(cmd),
				&resp.ibv_resp, sizeof(resp));
	if (ret) {
		free(qp);
		errno = ret;
		return NULL;
	}
	if (resp.db_slot >= QPIP_DB_QP_SLOTS) {
		ret = EPROTO;
		goto err_destroy;
	}
	qp->handle = resp.qp_handle;
	qp->max_inline = resp.max_inline;
	qp->max_sge = resp.max_sge;
	qp->sq_sig_all = attr->sq_sig_all;
	/* The kernel made the word ALIVE before it answered. */
	if (ctx->status && QPIP_IB_STATUS_QP(resp.db_slot) + 4 <= ctx->status_size)
		qp->state = (const _Atomic uint32_t *)((const char *)ctx->status +
						      QPIP_IB_STATUS_QP(resp.db_slot));
	else
		qp->state = &qp->own_state;
	slot_off = QPIP_DB_QP_BASE + resp.db_slot * QPIP_DB_QP_STRIDE;
	ret = qpip_wq_init(&qp->sq, pd->context, resp.sq_mmap_offset, resp.sq_size,
			   resp.sq_depth, qpip_db_word(ctx, slot_off + QPIP_DB_QP_SQ_TAIL));
	if (ret)
		goto err_destroy;
	ret = qpip_wq_init(&qp->rq, pd->context, resp.rq_mmap_offset, resp.rq_size,
			   resp.rq_depth, qpip_db_word(ctx, slot_off + QPIP_DB_QP_RQ_TAIL));
	if (ret)
		goto err_sq;
	/* What the QP can take, as the kernel answered it (depths rounded up). */
	attr->cap.max_send_wr = resp.sq_depth;
	attr->cap.max_recv_wr = resp.rq_depth;
	attr->cap.max_send_sge = resp.max_sge;
	attr->cap.max_recv_sge = resp.max_sge;
	attr->cap.max_inline_data = resp.max_inline;
	qpip_qp_table_add(ctx, qp);
	return &qp->ibv_qp;

err_sq:
	qpip_wq_fini(&qp->sq);
err_destroy:
	ibv_cmd_destroy_qp(&qp->ibv_qp);
	free(qp);
	errno = ret;
	return NULL;
}

static int qpip_destroy_qp(struct ibv_qp *ibv_qp)
{
	struct qpip_qp *qp = to_qqp(ibv_qp);
	int ret;

	ret = ibv_cmd_destroy_qp(ibv_qp);
	if (ret)
		return ret;
	qpip_qp_table_del(to_qctx(ibv_qp->context), qp);
	qpip_wq_fini(&qp->rq);
	qpip_wq_fini(&qp->sq);
	free(qp);
	return 0;
}

static int qpip_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask,
			 struct ibv_qp_init_attr *init_attr)
{
	struct ibv_query_qp cmd;

	return ibv_cmd_query_qp(qp, attr, attr_mask, init_attr, &cmd, sizeof(cmd));
}

/*
 * The kernel applies iWARP's rules (RTS only through the connection manager; ERR flushes
 * both queues, SQD closes gracefully). After ERR the device's QP is gone: the kernel has
 * made its status word DEAD before it answers (without a status page, this process marks
 * it itself).
 */
static int qpip_modify_qp(struct ibv_qp *ibv_qp, struct ibv_qp_attr *attr, int attr_mask)
{
	struct qpip_context *ctx = to_qctx(ibv_qp->context);
	struct qpip_qp *qp = to_qqp(ibv_qp);
	struct ibv_modify_qp cmd = {};
	int ret;

	ret = ibv_cmd_modify_qp(ibv_qp, attr, attr_mask, &cmd, sizeof(cmd));
	if (!ret && (attr_mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_ERR &&
	    qp->state == &qp->own_state) {
		atomic_store_explicit(&qp->own_state, QPIP_IB_QP_DEAD, memory_order_release);
		atomic_fetch_add_explicit(&ctx->own_generation, 1, memory_order_release);
	}
	return ret;
}

/*
 * WRs were just posted to dead QP @qp, for @cq: the polls will complete them flushed. A
 * waiter on @cq's completion channel must hear of it, and only the kernel can raise the
 * channel's event: moving the dead QP to ERR again asks it to (one system call, on this
 * path only — a dead QP's posts are not the fast path).
 */
static void qpip_posted_dead(struct qpip_qp *qp, struct ibv_cq *cq)
{
	struct qpip_context *ctx = to_qctx(qp->ibv_qp.context);
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_ERR };
	struct ibv_modify_qp cmd = {};

	pthread_mutex_lock(&ctx->qp_lock);
	qpip_dead_add_locked(ctx, qp);
	pthread_mutex_unlock(&ctx->qp_lock);
	if (cq->channel && qp->state != &qp->own_state)
		ibv_cmd_modify_qp(&qp->ibv_qp, &attr, IBV_QP_STATE, &cmd, sizeof(cmd));
}

/* The WQE in slot @i of @wq's ring, cleared. */
static struct qpip_wqe *qpip_wqe_at(struct qpip_wq *wq, uint32_t i)
{
	struct qpip_wqe *w = (struct qpip_wqe *)((char *)wq->ring +
						 (size_t)(i & (wq->depth - 1)) * QPIP_WQE_SIZE);

	memset(w, 0, QPIP_WQE_SGE_OFFSET);
	return w;
}

/* Copies @n SGEs into @w's SGE area; EINVAL beyond the QP's limit. */
static int qpip_wqe_sges(struct qpip_qp *qp, struct qpip_wqe *w, const struct ibv_sge *sg,
			 int n)
{
	struct qpip_sge *d = (struct qpip_sge *)((char *)w + QPIP_WQE_SGE_OFFSET);
	int i;

	if (n < 0 || (uint32_t)n > qp->max_sge)
		return EINVAL;
	for (i = 0; i < n; i++) {
		d[i].addr = sg[i].addr;
		d[i].length = sg[i].length;
		d[i].lkey = sg[i].lkey;
	}
	w->num_sge = n;
	return 0;
}

/* Copies the bytes @n SGEs name into @w as inline data; EINVAL beyond max_inline. */
static int qpip_wqe_inline(struct qpip_qp *qp, struct qpip_wqe *w, const struct ibv_sge *sg,
			   int n)
{
	char *d = (char *)w + QPIP_WQE_SGE_OFFSET;
	uint32_t len = 0;
	int i;

	for (i = 0; i < n; i++) {
		if (sg[i].length > qp->max_inline - len)
			return EINVAL;
		memcpy(d + len, (void *)(uintptr_t)sg[i].addr, sg[i].length);
		len += sg[i].length;
	}
	w->flags |= QPIP_WQE_FLAG_INLINE;
	w->inline_len = len;
	return 0;
}

/* The peer's region of an RDMA Write or Read: dest_addr bytes 0-7 and 8-11, little-endian. */
static void qpip_wqe_remote(struct qpip_wqe *w, uint64_t addr, uint32_t rkey)
{
	uint64_t a = htole64(addr);
	uint32_t k = htole32(rkey);

	memcpy(w->dest_addr, &a, 8);
	memcpy(w->dest_addr + 8, &k, 4);
}

/* Writes send WR @wr into slot @i of the send ring; errno if it cannot be posted. */
static int qpip_write_send(struct qpip_qp *qp, const struct ibv_send_wr *wr, uint32_t i)
{
	struct qpip_wr_slot *slot = &qp->sq.slots[i & (qp->sq.depth - 1)];
	struct qpip_wqe *w = qpip_wqe_at(&qp->sq, i);
	uint8_t wc_opcode;
	int ret;

	switch (wr->opcode) {
	case IBV_WR_SEND:
		w->opcode = QPIP_WQE_OP_SEND;
		wc_opcode = IBV_WC_SEND;
		if (wr->send_flags & IBV_SEND_SOLICITED)
			w->flags |= QPIP_WQE_FLAG_SOLICITED;
		break;
	case IBV_WR_RDMA_WRITE:
		w->opcode = QPIP_WQE_OP_RDMA_WRITE;
		wc_opcode = IBV_WC_RDMA_WRITE;
		qpip_wqe_remote(w, wr->wr.rdma.remote_addr, wr->wr.rdma.rkey);
		break;
	case IBV_WR_RDMA_READ:
		/* The response lands in the SGEs: never inline. */
		if (wr->send_flags & IBV_SEND_INLINE)
			return EINVAL;
		w->opcode = QPIP_WQE_OP_RDMA_READ;
		wc_opcode = IBV_WC_RDMA_READ;
		qpip_wqe_remote(w, wr->wr.rdma.remote_addr, wr->wr.rdma.rkey);
		break;
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		/*
		 * An RDMA Write followed by an RFC 7306 Immediate Data message, which completes
		 * the peer's next receive with imm_data. The device carries the value's first
		 * byte first, as verbs' big-endian imm_data lies in memory: the peer's wc.imm_data
		 * is these bytes. Only on a connection both qpip ends agreed to it (qpip_ib offers
		 * it always); towards another peer the WR completes IBV_WC_LOC_QP_OP_ERR and the
		 * QP goes on.
		 */
		w->opcode = QPIP_WQE_OP_RDMA_WRITE;
		w->flags |= QPIP_WQE_FLAG_IMM;
		w->imm_data = htole32(be32toh(wr->imm_data));
		wc_opcode = IBV_WC_RDMA_WRITE;
		qpip_wqe_remote(w, wr->wr.rdma.remote_addr, wr->wr.rdma.rkey);
		break;
	default:
		/*
		 * Send with immediate: the device attaches immediate data to Writes only. RFC
		 * 7306's Immediate Data message takes a receive of its own, so a Send followed by
		 * one would complete two receives at the peer, where verbs complete one. Atomics,
		 * memory windows, invalidation: none on iWARP here.
		 */
		return EINVAL;
	}
	if (wr->send_flags & IBV_SEND_INLINE)
		ret = qpip_wqe_inline(qp, w, wr->sg_list, wr->num_sge);
	else
		ret = qpip_wqe_sges(qp, w, wr->sg_list, wr->num_sge);
	if (ret)
		return ret;
	w->wr_id = i;
	slot->wr_id = wr->wr_id;
	slot->signaled = qp->sq_sig_all || (wr->send_flags & IBV_SEND_SIGNALED);
	slot->opcode = wc_opcode;
	return 0;
}

/*
 * Writes each WR into the send ring, then rings the QP's sq_tail once (kicking the engine
 * only if it sleeps): no system call. Stops at the first WR that cannot be posted.
 */
static int qpip_post_send(struct ibv_qp *ibv_qp, struct ibv_send_wr *wr,
			  struct ibv_send_wr **bad_wr)
{
	struct qpip_qp *qp = to_qqp(ibv_qp);
	struct qpip_wq *sq = &qp->sq;
	uint32_t start, dead;
	int ret = 0;

	pthread_spin_lock(&sq->lock);
	/* A dead QP's WRs are kept, not rung: the polls complete them flushed. */
	dead = atomic_load_explicit(qp->state, memory_order_acquire);
	start = sq->tail;
	for (; wr; wr = wr->next) {
		if (sq->tail - atomic_load_explicit(&sq->done, memory_order_acquire) >=
		    sq->depth) {
			ret = ENOMEM;
		} else {
			ret = qpip_write_send(qp, wr, sq->tail);
		}
		if (ret) {
			*bad_wr = wr;
			break;
		}
		sq->tail++;
	}
	if (sq->tail != start && !dead)
		qpip_ring(to_qctx(ibv_qp->context), sq->db, sq->tail, 1);
	pthread_spin_unlock(&sq->lock);
	if (sq->tail != start && dead)
		qpip_posted_dead(qp, ibv_qp->send_cq);
	return ret;
}

static int qpip_post_recv(struct ibv_qp *ibv_qp, struct ibv_recv_wr *wr,
			  struct ibv_recv_wr **bad_wr)
{
	struct qpip_qp *qp = to_qqp(ibv_qp);
	struct qpip_wq *rq = &qp->rq;
	struct qpip_wqe *w;
	uint32_t start, dead;
	int ret = 0;

	pthread_spin_lock(&rq->lock);
	dead = atomic_load_explicit(qp->state, memory_order_acquire);
	start = rq->tail;
	for (; wr; wr = wr->next) {
		if (rq->tail - atomic_load_explicit(&rq->done, memory_order_acquire) >=
		    rq->depth) {
			ret = ENOMEM;
		} else {
			w = qpip_wqe_at(rq, rq->tail);
			w->opcode = QPIP_WQE_OP_RECV;
			ret = qpip_wqe_sges(qp, w, wr->sg_list, wr->num_sge);
			w->wr_id = rq->tail;
			rq->slots[rq->tail & (rq->depth - 1)].wr_id = wr->wr_id;
			rq->slots[rq->tail & (rq->depth - 1)].opcode = IBV_WC_RECV;
		}
		if (ret) {
			*bad_wr = wr;
			break;
		}
		rq->tail++;
	}
	if (rq->tail != start && !dead)
		qpip_ring(to_qctx(ibv_qp->context), rq->db, rq->tail, 1);
	pthread_spin_unlock(&rq->lock);
	if (rq->tail != start && dead)
		qpip_posted_dead(qp, ibv_qp->recv_cq);
	return ret;
}

/* ---- contexts and the device ---- */

static void qpip_free_context(struct ibv_context *ibv_ctx)
{
	struct qpip_context *ctx = to_qctx(ibv_ctx);

	if (ctx->status)
		munmap((void *)ctx->status, ctx->status_size);
	if (ctx->kick)
		munmap((void *)ctx->kick, 4096);
	if (ctx->db_page)
		munmap(ctx->db_page, ctx->db_page_size);
	pthread_mutex_destroy(&ctx->qp_lock);
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
	.create_qp = qpip_create_qp,
	.destroy_qp = qpip_destroy_qp,
	.query_qp = qpip_query_qp,
	.modify_qp = qpip_modify_qp,
	.post_send = qpip_post_send,
	.post_recv = qpip_post_recv,
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
	pthread_mutex_init(&ctx->qp_lock, NULL);
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
	/* The status page: which QPs are dead. An older kernel has none (then 0 bytes). */
	ctx->generation = &ctx->own_generation;
	if (resp.status_page_size) {
		ctx->status = mmap(NULL, resp.status_page_size, PROT_READ, MAP_SHARED, cmd_fd,
				   resp.status_mmap_offset);
		if (ctx->status == MAP_FAILED) {
			ctx->status = NULL;
			goto err;
		}
		ctx->status_size = resp.status_page_size;
		ctx->generation = (const _Atomic uint32_t *)((const char *)ctx->status +
							     QPIP_IB_STATUS_GENERATION);
		atomic_store_explicit(&ctx->seen_generation,
				      atomic_load_explicit(ctx->generation, memory_order_relaxed),
				      memory_order_relaxed);
	}
	verbs_set_ops(&ctx->ibv_ctx, &qpip_context_ops);
	return &ctx->ibv_ctx;

err:
	ret = errno;
	if (ctx->kick)
		munmap((void *)ctx->kick, 4096);
	if (ctx->db_page)
		munmap(ctx->db_page, ctx->db_page_size);
	pthread_mutex_destroy(&ctx->qp_lock);
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
