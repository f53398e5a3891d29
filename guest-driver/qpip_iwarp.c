// SPDX-License-Identifier: GPL-2.0
/*
 * qpip: what an iWARP QP's ACCEPT or CONNECT brings to the MPA exchange — struct
 * qpip_iwarp_conn of the ioctl: its private data, IRD, ORD and flags.
 *
 * The private data lies in the caller's memory; the device reads guest-physical memory
 * (it has no IOMMU), in one piece within one page. So the driver copies it when the ioctl
 * is made into a buffer of its own that crosses no page, and hands the device that
 * buffer's address: the caller may reuse its memory at once. The buffer belongs to the
 * command and is freed when the command ends (qpip_cmd_data_free). On QPs of other
 * framings the member is all zero (callers of the first version of the arguments never
 * set it); the device refuses anything else there, in the command's event.
 */
#include <linux/errno.h>
#include <linux/log2.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "qpip.h"

/* The largest private data fits one power-of-two kmalloc bucket (see qpip_iwarp_conn_take). */
static_assert(QPIP_IWARP_MAX_PRIVATE_DATA <= 256);

/* The member's own rules, before anything is allocated: -EINVAL if broken. */
int qpip_iwarp_conn_check(const struct qpip_iwarp_conn *iw)
{
	if (iw->pd_len > QPIP_IWARP_MAX_PRIVATE_DATA ||
	    (iw->flags & ~QPIP_IWARP_CONN_FLAGS) ||
	    iw->ird > QPIP_IWARP_MAX_IRD_ORD || iw->ord > QPIP_IWARP_MAX_IRD_ORD)
		return -EINVAL;
	/* Some bytes, but nowhere to take them from. (Without bytes the pointer is unused.) */
	if (iw->pd_len && !iw->private_data)
		return -EINVAL;
	return 0;
}

/*
 * Copies @iw's private data (checked by qpip_iwarp_conn_check) from the caller into a
 * buffer attached to @c, before @c is submitted. -EFAULT if the caller's memory faults.
 */
int qpip_iwarp_conn_take(struct qpip_dev *qdev, struct qpip_cmd *c,
			 const struct qpip_iwarp_conn *iw)
{
	void *buf;

	if (!iw->pd_len)
		return 0;
	/*
	 * kmalloc of a power of two is aligned to that size, so at most 256 bytes never
	 * straddle a page boundary (qpip_cmd_data_attach checks it).
	 */
	buf = kmalloc(roundup_pow_of_two(iw->pd_len), GFP_KERNEL);
	if (!buf)
		return -ENOMEM;
	if (copy_from_user(buf, u64_to_user_ptr(iw->private_data), iw->pd_len)) {
		kfree(buf);
		return -EFAULT;
	}
	return qpip_cmd_data_attach(qdev, c, buf, iw->pd_len);
}
