// SPDX-License-Identifier: GPL-2.0
/*
 * qpip_ib: completion queues. A CQ is one of the user context's device context's CQs, made
 * by the driver's CREATE_CQ ioctl handler (qpip_ctx_ioctl), so a verbs CQ and a /dev/qpipN
 * CQ are the same object with the same quota, ring and vector. The ring is mapped into the
 * process, where the provider polls CQEs and moves cq_head in the doorbell page; arming is
 * a store to the CQ's arm_seq there too. The kernel sees only the interrupt, which it
 * hands to the RDMA core's completion handler (a completion channel's event).
 *
 * Kernel users get no CQ: this device offers no kernel verbs (poll_cq and req_notify_cq
 * exist because ib_core wants them before the RDMA CM attaches; they refuse).
 */
#include <linux/log2.h>
#include <rdma/uverbs_ioctl.h>

#include "qpip_ib.h"

/*
 * The CQ's vector fired. The device does not say for which of the vector's CQs, so a CQ
 * sharing its vector may see an event it was not armed for: harmless to a verbs consumer,
 * which polls after each event and arms again.
 */
static void qpip_ib_cq_event(void *data)
{
	struct ib_cq *ibcq = data;

	if (ibcq->comp_handler)
		ibcq->comp_handler(ibcq, ibcq->cq_context);
}

int qpip_ib_create_cq(struct ib_cq *ibcq, const struct ib_cq_init_attr *attr,
		      struct uverbs_attr_bundle *attrs)
{
	struct qpip_ib_dev *qib = to_qibdev(ibcq->device);
	struct ib_udata *udata = attrs ? &attrs->driver_udata : NULL;
	struct qpip_ib_cq *cq = to_qibcq(ibcq);
	struct qpip_ib_create_cq_resp resp = {};
	struct qpip_ib_ucontext *uc;
	struct qpip_create_cq a = {
		.size = sizeof(a),
		.eventfd = -1,
	};
	struct qpip_handle h = { .size = sizeof(h) };
	int ret;

	if (!udata)
		return -EOPNOTSUPP;
	if (attr->flags)
		return -EOPNOTSUPP;
	if (udata->outlen < offsetofend(typeof(resp), depth))
		return -EINVAL;
	/* The device's rings are powers of two of at least two entries. */
	if (attr->cqe < 1 || attr->cqe > qib->qdev->info.max_queue_depth)
		return -EINVAL;
	if (attr->comp_vector >= ibcq->device->num_comp_vectors)
		return -EINVAL;
	uc = rdma_udata_to_drv_context(udata, struct qpip_ib_ucontext, ibuc);
	a.depth = roundup_pow_of_two(max(attr->cqe, 2U));
	a.comp_vector = attr->comp_vector;
	ret = qpip_ctx_ioctl(uc->ctx, QPIP_IOCTL_CREATE_CQ, &a);
	if (ret)
		return ret;
	cq->ctx = uc->ctx;
	cq->handle = a.handle;
	h.handle = a.handle;

	ret = qpip_ib_mmap_ring_insert(uc, a.ring_offset, &cq->ring_entry);
	if (ret)
		goto err_cq;
	ret = qpip_ctx_cq_notify(uc->ctx, cq->handle, qpip_ib_cq_event, ibcq);
	if (ret)
		goto err_entry;
	ibcq->cqe = a.depth;

	resp.cq_handle = a.handle;
	resp.db_slot = a.db_slot;
	resp.ring_mmap_offset = rdma_user_mmap_get_offset(cq->ring_entry);
	resp.ring_size = a.ring_size;
	resp.depth = a.depth;
	ret = ib_copy_to_udata(udata, &resp, min(udata->outlen, sizeof(resp)));
	if (ret)
		goto err_notify;
	return 0;

err_notify:
	qpip_ctx_cq_notify(uc->ctx, cq->handle, NULL, NULL);
err_entry:
	rdma_user_mmap_entry_remove(cq->ring_entry);
err_cq:
	qpip_ctx_ioctl(uc->ctx, QPIP_IOCTL_DESTROY_CQ, &h);
	return ret;
}

/*
 * The device forgets the CQ first (it no longer writes the ring), then the driver frees
 * it. On a context the device already forgot (a reset, the function's removal) there is
 * nothing to tell the device: the CQ only stops reaching this ib_cq, and the driver frees
 * it with the context.
 */
int qpip_ib_destroy_cq(struct ib_cq *ibcq, struct ib_udata *udata)
{
	struct qpip_ib_cq *cq = to_qibcq(ibcq);
	struct qpip_handle h = { .size = sizeof(h), .handle = cq->handle };
	int ret;

	ret = qpip_ctx_ioctl(cq->ctx, QPIP_IOCTL_DESTROY_CQ, &h);
	if (ret == -ENODEV)
		ret = qpip_ctx_cq_notify(cq->ctx, cq->handle, NULL, NULL);
	if (ret)
		return ret;
	rdma_user_mmap_entry_remove(cq->ring_entry);
	return 0;
}

int qpip_ib_poll_cq(struct ib_cq *ibcq, int num_entries, struct ib_wc *wc)
{
	return -EOPNOTSUPP;	/* the provider polls the mapped ring */
}

int qpip_ib_req_notify_cq(struct ib_cq *ibcq, enum ib_cq_notify_flags flags)
{
	return -EOPNOTSUPP;	/* the provider arms through the doorbell page */
}
