// SPDX-License-Identifier: GPL-2.0
/*
 * qpip_ib: the verbs of the ib_device — what the device is (queries), user contexts and
 * their mmap, protection domains. CQs, memory regions and QPs are in qpip_ib_cq.c,
 * qpip_ib_mr.c and qpip_ib_qp.c; SRQs, memory windows and AHs have no op: uverbs answers
 * EOPNOTSUPP.
 *
 * The limits reported are the device's own (QUERY_DEVICE at probe, qdev->info) where the
 * device has one; where a limit is this module's (protection domains) it says so.
 */
#include <linux/etherdevice.h>
#include <linux/mm.h>
#include <linux/netdevice.h>
#include <linux/pci.h>
#include <linux/slab.h>
#include <net/addrconf.h>
#include <rdma/ib_mad.h>

#include "qpip_ib.h"

/* ---- what the device is ---- */

int qpip_ib_query_device(struct ib_device *ibdev, struct ib_device_attr *attr,
			 struct ib_udata *udata)
{
	struct qpip_ib_dev *qib = to_qibdev(ibdev);
	const struct qpip_device_info *info = &qib->qdev->info;
	struct pci_dev *pdev = qib->qdev->pdev;

	if (udata->inlen || udata->outlen)
		return -EINVAL;
	memset(attr, 0, sizeof(*attr));
	attr->fw_ver = ((u64)qpip_version_major(info->version) << 32) |
		       qpip_version_minor(info->version);
	attr->sys_image_guid = ibdev->node_guid;
	attr->vendor_id = pdev->vendor;
	attr->vendor_part_id = pdev->device;
	attr->hw_ver = pdev->revision;
	/* A region is at most max_mr_pages pages of the process. */
	attr->max_mr_size = (u64)info->max_mr_pages << PAGE_SHIFT;
	attr->page_size_cap = PAGE_SIZE;
	/*
	 * QPs and CQs are the device's per context, and a user context is one device context:
	 * these are what one process's context can create.
	 */
	attr->max_qp = info->max_qps_per_context;
	attr->max_cq = info->max_cqs_per_context;
	attr->max_qp_wr = info->max_queue_depth;
	attr->max_cqe = info->max_queue_depth;
	attr->max_send_sge = info->max_sge;
	attr->max_recv_sge = info->max_sge;
	attr->max_sge_rd = info->max_sge;
	attr->max_mr = info->max_mrs;
	attr->max_pd = QPIP_IB_MAX_PD;
	/* MPA's IRD and ORD: the most Read Requests in flight each way, per QP. */
	attr->max_qp_rd_atom = QPIP_IWARP_MAX_IRD_ORD;
	attr->max_qp_init_rd_atom = QPIP_IWARP_MAX_IRD_ORD;
	attr->max_res_rd_atom = info->max_qps_per_context * QPIP_IWARP_MAX_IRD_ORD;
	attr->atomic_cap = IB_ATOMIC_NONE;
	attr->max_pkeys = 0;
	return 0;
}

void qpip_ib_get_dev_fw_str(struct ib_device *ibdev, char *str)
{
	u32 v = to_qibdev(ibdev)->qdev->info.version;

	/* The device interface's version: the closest thing the device has to firmware. */
	snprintf(str, IB_FW_VERSION_NAME_MAX, "%u.%u", qpip_version_major(v),
		 qpip_version_minor(v));
}

/*
 * The core filled in the port from the network interface (iw_query_port) before calling
 * this; the state is set again here from the interface alone: iWARP over qpip needs no
 * IPv4 address (the core's rule for ACTIVE), an IPv6 one does as well.
 */
int qpip_ib_query_port(struct ib_device *ibdev, u32 port, struct ib_port_attr *attr)
{
	struct qpip_ib_dev *qib = to_qibdev(ibdev);
	struct net_device *nd = qib->netdev;

	attr->gid_tbl_len = 1;
	attr->pkey_tbl_len = 0;
	attr->port_cap_flags = IB_PORT_CM_SUP | IB_PORT_DEVICE_MGMT_SUP;
	/* One SGE's length is 32 bits in a WQE. */
	attr->max_msg_sz = U32_MAX;
	attr->max_mtu = ib_mtu_int_to_enum(qib->qdev->info.mtu);
	attr->active_mtu = ib_mtu_int_to_enum(READ_ONCE(nd->mtu));
	ib_get_eth_speed(ibdev, port, &attr->active_speed, &attr->active_width);
	if (netif_running(nd) && netif_carrier_ok(nd)) {
		attr->state = IB_PORT_ACTIVE;
		attr->phys_state = IB_PORT_PHYS_STATE_LINK_UP;
	} else {
		attr->state = IB_PORT_DOWN;
		attr->phys_state = IB_PORT_PHYS_STATE_DISABLED;
	}
	return 0;
}

/* iWARP's one GID: the port's MAC, as every iWARP device has it. */
int qpip_ib_query_gid(struct ib_device *ibdev, u32 port, int index, union ib_gid *gid)
{
	struct qpip_ib_dev *qib = to_qibdev(ibdev);

	if (index != 0)
		return -EINVAL;
	memset(gid, 0, sizeof(*gid));
	ether_addr_copy(gid->raw, qib->netdev->dev_addr);
	return 0;
}

int qpip_ib_get_port_immutable(struct ib_device *ibdev, u32 port,
			       struct ib_port_immutable *imm)
{
	imm->core_cap_flags = RDMA_CORE_PORT_IWARP;
	imm->gid_tbl_len = 1;
	imm->pkey_tbl_len = 0;
	return 0;
}

/* ---- user contexts ---- */

int qpip_ib_alloc_ucontext(struct ib_ucontext *ibuc, struct ib_udata *udata)
{
	struct qpip_ib_dev *qib = to_qibdev(ibuc->device);
	struct qpip_ib_ucontext *uc = to_qibuc(ibuc);
	const struct qpip_device_info *info = &qib->qdev->info;
	struct qpip_ib_alloc_ucontext_resp resp = {};
	struct qpip_ib_mmap_entry *e;
	int ret;

	/* A provider that would not learn where its doorbell page is cannot use the context. */
	if (udata->outlen < offsetofend(typeof(resp), db_mmap_offset))
		return -EINVAL;
	uc->ctx = qpip_ctx_create(qib->qdev, NULL);
	if (IS_ERR(uc->ctx))
		return PTR_ERR(uc->ctx);
	spin_lock_init(&uc->status_lock);
	mutex_init(&uc->slot_lock);
	/* Every QP's word starts ALIVE (0); a mapping keeps the page past the context. */
	uc->status_page = alloc_page(GFP_KERNEL | __GFP_ZERO);
	if (!uc->status_page) {
		ret = -ENOMEM;
		goto err_ctx;
	}

	e = kzalloc(sizeof(*e), GFP_KERNEL);
	if (!e) {
		ret = -ENOMEM;
		goto err_ctx;
	}
	e->kind = QPIP_IB_MMAP_DOORBELL;
	ret = rdma_user_mmap_entry_insert(ibuc, &e->rdma, PAGE_SIZE);
	if (ret) {
		kfree(e);
		goto err_ctx;
	}
	uc->db_entry = &e->rdma;

	e = kzalloc(sizeof(*e), GFP_KERNEL);
	if (!e) {
		ret = -ENOMEM;
		goto err_entry;
	}
	e->kind = QPIP_IB_MMAP_KICK;
	ret = rdma_user_mmap_entry_insert(ibuc, &e->rdma, PAGE_SIZE);
	if (ret) {
		kfree(e);
		goto err_entry;
	}
	uc->kick_entry = &e->rdma;

	e = kzalloc(sizeof(*e), GFP_KERNEL);
	if (!e) {
		ret = -ENOMEM;
		goto err_entry;
	}
	e->kind = QPIP_IB_MMAP_STATUS;
	ret = rdma_user_mmap_entry_insert(ibuc, &e->rdma, PAGE_SIZE);
	if (ret) {
		kfree(e);
		goto err_entry;
	}
	uc->status_entry = &e->rdma;

	resp.ctx_id = uc->ctx->id;
	resp.db_page_size = PAGE_SIZE;
	resp.db_mmap_offset = rdma_user_mmap_get_offset(uc->db_entry);
	resp.max_inline = info->max_inline;
	resp.max_sge = info->max_sge;
	resp.max_queue_depth = info->max_queue_depth;
	resp.device_version = info->version;
	resp.kick_mmap_offset = rdma_user_mmap_get_offset(uc->kick_entry);
	resp.status_page_size = PAGE_SIZE;
	resp.status_mmap_offset = rdma_user_mmap_get_offset(uc->status_entry);
	ret = ib_copy_to_udata(udata, &resp, min(udata->outlen, sizeof(resp)));
	if (ret)
		goto err_entry;
	/* The device's events about its QPs: to them (qpip_ib_qp.c), not to a file's reader. */
	qpip_ctx_set_qp_event(uc->ctx, qpip_ib_qp_event, uc);
	return 0;

err_entry:
	if (uc->status_entry)
		rdma_user_mmap_entry_remove(uc->status_entry);
	if (uc->kick_entry)
		rdma_user_mmap_entry_remove(uc->kick_entry);
	rdma_user_mmap_entry_remove(uc->db_entry);
err_ctx:
	if (uc->status_page)
		__free_page(uc->status_page);
	qpip_ctx_destroy(uc->ctx);
	return ret;
}

/*
 * Also what unregistration does to a context still open (after disassociate): the device
 * context is destroyed. A doorbell page still mapped stays the process's page (it holds a
 * reference), which the device no longer reads.
 */
void qpip_ib_dealloc_ucontext(struct ib_ucontext *ibuc)
{
	struct qpip_ib_ucontext *uc = to_qibuc(ibuc);

	qpip_ctx_set_qp_event(uc->ctx, NULL, NULL);
	rdma_user_mmap_entry_remove(uc->status_entry);
	rdma_user_mmap_entry_remove(uc->kick_entry);
	rdma_user_mmap_entry_remove(uc->db_entry);
	qpip_ctx_destroy(uc->ctx);
	/* Its QPs were destroyed first, each marked DEAD: a mapping still reads that. */
	put_page(uc->status_page);
}

static u32 *qpip_ib_status_word(struct qpip_ib_ucontext *uc, u32 off)
{
	return (u32 *)((char *)page_address(uc->status_page) + off);
}

/*
 * The QP of doorbell slot @slot is dead: its word says so, then the generation moves (the
 * provider's poll looks at the words when it does). Any context, also the admin interrupt.
 */
void qpip_ib_status_dead(struct qpip_ib_ucontext *uc, u32 slot)
{
	u32 *gen = qpip_ib_status_word(uc, QPIP_IB_STATUS_GENERATION);
	unsigned long flags;

	if (WARN_ON_ONCE(slot >= QPIP_DB_QP_SLOTS))
		return;
	spin_lock_irqsave(&uc->status_lock, flags);
	/* Whatever the device wrote for the QP before is visible once DEAD is. */
	smp_store_release(qpip_ib_status_word(uc, QPIP_IB_STATUS_QP(slot)), QPIP_IB_QP_DEAD);
	smp_store_release(gen, *gen + 1);
	spin_unlock_irqrestore(&uc->status_lock, flags);
}

/* A new QP at @slot: ALIVE (the slot's last QP, if any, is destroyed). */
void qpip_ib_status_alive(struct qpip_ib_ucontext *uc, u32 slot)
{
	unsigned long flags;

	spin_lock_irqsave(&uc->status_lock, flags);
	WRITE_ONCE(*qpip_ib_status_word(uc, QPIP_IB_STATUS_QP(slot)), QPIP_IB_QP_ALIVE);
	spin_unlock_irqrestore(&uc->status_lock, flags);
}

/*
 * Nothing to do before the context's objects are destroyed: the uverbs core zaps the
 * mappings it tracks (the kick page, mapped by rdma_user_mmap_io), and the doorbell page
 * and rings are RAM. Having the op lets the device be
 * unregistered (and this module unloaded) while contexts are open.
 */
void qpip_ib_disassociate_ucontext(struct ib_ucontext *ibuc)
{
}

int qpip_ib_mmap(struct ib_ucontext *ibuc, struct vm_area_struct *vma)
{
	struct qpip_ib_ucontext *uc = to_qibuc(ibuc);
	struct rdma_user_mmap_entry *re;
	struct qpip_ib_mmap_entry *e;
	int ret;

	if (!(vma->vm_flags & VM_SHARED))
		return -EINVAL;
	if (vma->vm_flags & VM_EXEC)
		return -EPERM;
	re = rdma_user_mmap_entry_get(ibuc, vma);
	if (!re)
		return -EINVAL;
	e = container_of(re, struct qpip_ib_mmap_entry, rdma);
	switch (e->kind) {
	case QPIP_IB_MMAP_DOORBELL:
		if (vma_pages(vma) != 1) {
			ret = -EINVAL;
			break;
		}
		if (qpip_ctx_dead(uc->ctx)) {
			ret = -ENODEV;	/* the device has forgotten this context's page */
			break;
		}
		/* As /dev/qpipN's: a forked child must not ring its parent's queues. */
		vm_flags_clear(vma, VM_MAYEXEC);
		vm_flags_set(vma, VM_DONTCOPY | VM_DONTEXPAND | VM_DONTDUMP);
		ret = vm_insert_page(vma, vma->vm_start, uc->ctx->db->pages[0]);
		break;
	case QPIP_IB_MMAP_KICK:
		/*
		 * A trapped register, uncached; through the core, which zaps the mapping when the
		 * context is disassociated. A write there only wakes the engine, whichever
		 * context makes it: a mapping outliving a device reset is harmless.
		 */
		if (vma_pages(vma) != 1) {
			ret = -EINVAL;
			break;
		}
		if (qpip_ctx_dead(uc->ctx)) {
			ret = -ENODEV;
			break;
		}
		vm_flags_clear(vma, VM_MAYEXEC);
		vm_flags_set(vma, VM_DONTCOPY);
		ret = rdma_user_mmap_io(ibuc, vma,
					PHYS_PFN(uc->ctx->qdev->ctrl_phys + QPIP_KICK_PAGE_OFFSET),
					PAGE_SIZE, pgprot_noncached(vma->vm_page_prot), re);
		break;
	case QPIP_IB_MMAP_STATUS:
		/* RAM only qpip_ib writes: the process reads it, and may never write it. */
		if (vma_pages(vma) != 1) {
			ret = -EINVAL;
			break;
		}
		if (vma->vm_flags & VM_WRITE) {
			ret = -EPERM;
			break;
		}
		vm_flags_clear(vma, VM_MAYWRITE | VM_MAYEXEC);
		vm_flags_set(vma, VM_DONTCOPY | VM_DONTEXPAND | VM_DONTDUMP);
		ret = vm_insert_page(vma, vma->vm_start, uc->status_page);
		break;
	case QPIP_IB_MMAP_RING: {
		unsigned long npages = e->ring->npages;

		/* Whole, as /dev/qpipN maps it: RAM the device writes, kept by the mapping. */
		if (vma_pages(vma) != npages) {
			ret = -EINVAL;
			break;
		}
		vm_flags_clear(vma, VM_MAYEXEC);
		vm_flags_set(vma, VM_DONTEXPAND | VM_DONTDUMP);
		ret = vm_insert_pages(vma, vma->vm_start, e->ring->pages, &npages);
		break;
	}
	default:
		ret = -EINVAL;
	}
	rdma_user_mmap_entry_put(re);
	return ret;
}

void qpip_ib_mmap_free(struct rdma_user_mmap_entry *re)
{
	struct qpip_ib_mmap_entry *e = container_of(re, struct qpip_ib_mmap_entry, rdma);

	if (e->ring)
		qpip_ring_unref(e->ring);
	kfree(e);
}

/*
 * An mmap entry of @uc for the ring its device context published at @offset (CREATE_CQ's
 * or CREATE_QP's ring_offset): the entry holds the ring until it is freed, so a mapping
 * made while the object lives keeps its pages after the object is destroyed.
 */
int qpip_ib_mmap_ring_insert(struct qpip_ib_ucontext *uc, u64 offset,
			     struct rdma_user_mmap_entry **entry)
{
	struct qpip_ib_mmap_entry *e;
	int ret;

	e = kzalloc(sizeof(*e), GFP_KERNEL);
	if (!e)
		return -ENOMEM;
	e->kind = QPIP_IB_MMAP_RING;
	e->ring = qpip_ctx_ring_get(uc->ctx, offset);
	if (!e->ring) {
		kfree(e);
		return -EINVAL;
	}
	ret = rdma_user_mmap_entry_insert(&uc->ibuc, &e->rdma,
					  (size_t)e->ring->npages << PAGE_SHIFT);
	if (ret) {
		qpip_ring_unref(e->ring);
		kfree(e);
		return ret;
	}
	*entry = &e->rdma;
	return 0;
}

/* ---- protection domains ---- */

int qpip_ib_alloc_pd(struct ib_pd *ibpd, struct ib_udata *udata)
{
	struct qpip_ib_dev *qib = to_qibdev(ibpd->device);
	struct qpip_ib_pd *pd = to_qibpd(ibpd);
	struct qpip_ib_alloc_pd_resp resp = {};
	int id, ret;

	/* Kernel users get no PD: this device offers no kernel verbs. */
	if (!udata)
		return -EOPNOTSUPP;
	id = ida_alloc_max(&qib->pd_ida, QPIP_IB_MAX_PD - 1, GFP_KERNEL);
	if (id < 0)
		return id;
	pd->pdn = id;
	resp.pdn = id;
	ret = ib_copy_to_udata(udata, &resp, min(udata->outlen, sizeof(resp)));
	if (ret) {
		ida_free(&qib->pd_ida, id);
		return ret;
	}
	return 0;
}

int qpip_ib_dealloc_pd(struct ib_pd *ibpd, struct ib_udata *udata)
{
	ida_free(&to_qibdev(ibpd->device)->pd_ida, to_qibpd(ibpd)->pdn);
	return 0;
}
