/* SPDX-License-Identifier: ((GPL-2.0 WITH Linux-syscall-note) OR MIT) */
/*
 * The uverbs ABI between qpip_ib.ko and rdma-core's qpip provider (libqpip-rdmav34.so):
 * the driver-specific data of the uverbs commands, in both directions. Written by hand
 * (not generated like qpip.h beside it); the kernel module and the provider both build
 * against this one file.
 *
 * Rules: every structure is a multiple of 8 bytes with explicit padding; a new field is
 * added at the end, and the kernel copies out only as much as the provider's buffer holds
 * (so an older provider still works); QPIP_IB_ABI_VERSION changes only when an old
 * provider could no longer work. The provider refuses a kernel of another version.
 */
#ifndef QPIP_UAPI_IB_H
#define QPIP_UAPI_IB_H

#include <linux/types.h>

/* The ib_device's uverbs_abi_ver: what the provider checks first. */
#define QPIP_IB_ABI_VERSION 1

/*
 * The ucontext is one device context of the function, the same thing an open /dev/qpipN
 * is: its doorbell page is mapped at @db_mmap_offset of the uverbs file (one page,
 * shared, not executable). The QP and CQ stages add the kick page and the rings.
 */
struct qpip_ib_alloc_ucontext_resp {
	__u32 ctx_id;			/* the device's context number */
	__u32 db_page_size;		/* bytes of the doorbell page */
	__aligned_u64 db_mmap_offset;	/* mmap offset of the doorbell page */
	__u32 max_inline;		/* bytes of inline data a send WQE carries */
	__u32 max_sge;			/* scatter/gather entries per WQE */
	__u32 max_queue_depth;		/* entries of the deepest ring */
	__u32 device_version;		/* the device interface, major << 16 | minor */
};

/*
 * The device has no protection domains of its own: a PD is a number of qpip_ib's, per
 * function, by which the driver will check that a QP and the regions it names share one.
 */
struct qpip_ib_alloc_pd_resp {
	__u32 pdn;
	__u32 reserved;
};

#endif /* QPIP_UAPI_IB_H */
