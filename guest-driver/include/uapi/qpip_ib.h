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
 * shared, not executable), the kick register's page at @kick_mmap_offset.
 */
struct qpip_ib_alloc_ucontext_resp {
	__u32 ctx_id;			/* the device's context number */
	__u32 db_page_size;		/* bytes of the doorbell page */
	__aligned_u64 db_mmap_offset;	/* mmap offset of the doorbell page */
	__u32 max_inline;		/* bytes of inline data a send WQE carries */
	__u32 max_sge;			/* scatter/gather entries per WQE */
	__u32 max_queue_depth;		/* entries of the deepest ring */
	__u32 device_version;		/* the device interface, major << 16 | minor */
	/*
	 * mmap offset of the device's kick register page (one page, write-only, uncached): a
	 * doorbell that finds the engine asleep (DB_ENGINE_SLEEPING) writes KICK there.
	 */
	__aligned_u64 kick_mmap_offset;
	/*
	 * The context's status page (the layout of QPIP_IB_STATUS_* below), mapped
	 * read-only at @status_mmap_offset: where qpip_ib says which QPs are dead. 0 bytes
	 * from a kernel without one.
	 */
	__u32 status_page_size;
	__u32 reserved;
	__aligned_u64 status_mmap_offset;
};

/*
 * The status page: one page of the context's, written only by qpip_ib and read by the
 * provider with no system call. A QP's word (at QPIP_IB_STATUS_QP(db_slot), its doorbell
 * slot) is QPIP_IB_QP_ALIVE from creation and becomes QPIP_IB_QP_DEAD when the device's QP
 * is gone while the verbs QP lives on in ERR: moved to ERR (by the process, iw_cm or the
 * end of its connection), the device reset or removed, qpip_ib unloaded. From then on the
 * device completes none of its WRs: the provider completes them itself
 * (IBV_WC_WR_FLUSH_ERR), once the device's own completions of the QP, all written before
 * the word changed, are polled. Its slot in the doorbell page is not given to another QP
 * of the context until the dead one is destroyed. The generation word moves after any QP's
 * word became DEAD, so a poll needs one load to learn whether to look at the QPs.
 */
#define QPIP_IB_STATUS_GENERATION	0	/* __u32 */
#define QPIP_IB_STATUS_QP_BASE		64
#define QPIP_IB_STATUS_QP(slot)		(QPIP_IB_STATUS_QP_BASE + 4 * (slot))	/* __u32 */
#define QPIP_IB_QP_ALIVE		0
#define QPIP_IB_QP_DEAD			1

/*
 * The device has no protection domains of its own: a PD is a number of qpip_ib's, per
 * function, by which the driver will check that a QP and the regions it names share one.
 */
struct qpip_ib_alloc_pd_resp {
	__u32 pdn;
	__u32 reserved;
};

/*
 * A CQ is one of the device context's CQs (the device's CREATE_CQ): its ring of @depth
 * 64-byte CQEs (struct qpip_cqe of the device interface) is mapped at @ring_mmap_offset
 * (@ring_size bytes, shared, read-only is enough), and its consumer index and arm word are
 * slot @db_slot of the doorbell page (DB_CQ_BASE + db_slot * DB_CQ_STRIDE: cq_head, then
 * arm_seq). The provider polls and arms with no system call.
 */
struct qpip_ib_create_cq_resp {
	__u32 cq_handle;		/* the device's CQ number: the qp of its CQEs' QPs */
	__u32 db_slot;
	__aligned_u64 ring_mmap_offset;
	__aligned_u64 ring_size;
	__u32 depth;			/* CQEs in the ring: a power of two */
	__u32 reserved;
};

/*
 * A QP is one of the device context's iWARP TCP QPs (the device's CREATE_QP with
 * FRAMING_IWARP); @qp_handle is the device's QP number, the ib_qp's qp_num and the qp of
 * its CQEs. Its send ring (@sq_depth WQEs of 128 bytes, struct qpip_wqe of the device
 * interface) is mapped at @sq_mmap_offset, its receive ring at @rq_mmap_offset (both
 * shared, read-write); its producer indices are slot @db_slot of the doorbell page
 * (DB_QP_BASE + db_slot * DB_QP_STRIDE: sq_tail, then rq_tail). The provider writes WQEs
 * and rings with no system call. Every WR completes (the device has no unsignalled WRs):
 * the provider hides the completions of unsignalled ones.
 */
struct qpip_ib_create_qp_resp {
	__u32 qp_handle;
	__u32 db_slot;
	__aligned_u64 sq_mmap_offset;
	__aligned_u64 sq_size;
	__aligned_u64 rq_mmap_offset;
	__aligned_u64 rq_size;
	__u32 sq_depth;			/* WQEs: a power of two */
	__u32 rq_depth;
	__u32 max_inline;		/* bytes of inline data a send WQE carries */
	__u32 max_sge;			/* SGEs per WQE */
};

#endif /* QPIP_UAPI_IB_H */
