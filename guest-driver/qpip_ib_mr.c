// SPDX-License-Identifier: GPL-2.0
/*
 * qpip_ib: memory regions. A region is one of the device context's registered regions,
 * made by the driver's REG_MR ioctl handler (qpip_ctx_ioctl): the same pinning (long-term,
 * charged to RLIMIT_MEMLOCK and the user's quota), the same keys, as a /dev/qpipN region.
 * The device addresses a region by the process's virtual addresses, so its iova is its
 * start: a region registered at another iova (ibv_reg_mr_iova) is refused.
 */
#include <rdma/uverbs_ioctl.h>

#include "qpip_ib.h"

/*
 * What a region may ask for; IB_ACCESS_RELAXED_ORDERING and the like are only hints.
 * IB_ACCESS_REMOTE_ATOMIC is accepted and grants nothing, as on siw: the device has no
 * atomics (atomic_cap NONE, an atomic WR is refused by the provider, a peer's RFC 7306
 * atomic request is an invalid opcode the device answers with a Terminate), and programs
 * such as qperf ask for it on every region whatever the device.
 */
#define QPIP_IB_MR_ACCESS (IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE | \
			   IB_ACCESS_REMOTE_READ | IB_ACCESS_REMOTE_ATOMIC)

static struct qpip_ib_mr *to_qibmr(struct ib_mr *ibmr)
{
	return container_of(ibmr, struct qpip_ib_mr, ibmr);
}

/* Kernel users get no region: this device offers no kernel verbs. */
struct ib_mr *qpip_ib_get_dma_mr(struct ib_pd *ibpd, int access)
{
	return ERR_PTR(-EOPNOTSUPP);
}

struct ib_mr *qpip_ib_reg_user_mr(struct ib_pd *ibpd, u64 start, u64 length, u64 virt_addr,
				  int access, struct ib_udata *udata)
{
	struct qpip_ib_ucontext *uc;
	struct qpip_reg_mr a = { .size = sizeof(a) };
	struct qpip_ib_mr *mr;
	int ret;

	if (!udata)
		return ERR_PTR(-EOPNOTSUPP);
	access &= ~IB_ACCESS_OPTIONAL;
	/* Memory windows, zero-based and on-demand regions: the device has none. */
	if (access & ~QPIP_IB_MR_ACCESS)
		return ERR_PTR(-EOPNOTSUPP);
	if (virt_addr != start)
		return ERR_PTR(-EOPNOTSUPP);
	uc = rdma_udata_to_drv_context(udata, struct qpip_ib_ucontext, ibuc);

	a.addr = start;
	a.length = length;
	if (access & IB_ACCESS_LOCAL_WRITE)
		a.access |= QPIP_MR_ACCESS_LOCAL_WRITE;
	if (access & IB_ACCESS_REMOTE_WRITE)
		a.access |= QPIP_MR_ACCESS_REMOTE_WRITE;
	if (access & IB_ACCESS_REMOTE_READ)
		a.access |= QPIP_MR_ACCESS_REMOTE_READ;

	mr = kzalloc(sizeof(*mr), GFP_KERNEL);
	if (!mr)
		return ERR_PTR(-ENOMEM);
	ret = qpip_ctx_ioctl(uc->ctx, QPIP_IOCTL_REG_MR, &a);
	if (ret) {
		kfree(mr);
		return ERR_PTR(ret);
	}
	mr->ctx = uc->ctx;
	mr->ibmr.lkey = a.lkey;
	mr->ibmr.rkey = a.rkey;
	mr->ibmr.length = length;
	mr->ibmr.iova = virt_addr;
	return &mr->ibmr;
}

/*
 * The device lets go of the region first, then the driver unpins it. On a context the
 * device forgot, the driver unpins it with the context.
 */
int qpip_ib_dereg_mr(struct ib_mr *ibmr, struct ib_udata *udata)
{
	struct qpip_ib_mr *mr = to_qibmr(ibmr);
	struct qpip_handle h = { .size = sizeof(h), .handle = ibmr->lkey };
	int ret;

	ret = qpip_ctx_ioctl(mr->ctx, QPIP_IOCTL_DEREG_MR, &h);
	if (ret && ret != -ENODEV)
		return ret;
	kfree(mr);
	return 0;
}
