/* SPDX-License-Identifier: GPL-2.0 */
/*
 * qpip: what one open file of /dev/qpipN is — a device context and the records of its
 * objects — shared by the files that implement it:
 *
 *   qpip_ctx.c     open, mmap, release; revocation at a reset or removal
 *   qpip_verbs.c   the ioctls: arguments in and out, the context's objects
 *   qpip_mem.c     locked memory: rings, registered regions; completion vectors
 *   qpip_event.c   events read from the file: asynchronous completions and device events
 *   qpip_quota.c   what one user may take of the function: quotas; privileged ports
 *   qpip_ports.c   the ports QPs take, reserved in the guest kernel against its sockets
 *
 * The commands they give the device are in qpip_cmd.c (declared in qpip.h).
 */
#ifndef QPIP_CTX_H
#define QPIP_CTX_H

#include <linux/eventfd.h>
#include <linux/fs.h>
#include <linux/kref.h>
#include <linux/mm_types.h>
#include <linux/poll.h>
#include <linux/uidgid.h>

#include "qpip.h"

struct socket;

/* The per-user quotas (qpip_quota.c); each counts objects, QPIP_QUOTA_PINNED pages. */
enum qpip_quota {
	QPIP_QUOTA_CONTEXTS,
	QPIP_QUOTA_CQS,
	QPIP_QUOTA_QPS,
	QPIP_QUOTA_MRS,
	QPIP_QUOTA_PINNED,
	QPIP_QUOTA_LISTENERS,
	QPIP_QUOTA_TRIPWIRES,
	QPIP_QUOTA_COUNT
};

/*
 * A user of the function (by effective uid in the initial user namespace) and what its
 * contexts hold, in qdev->users while one of its contexts is open.
 */
struct qpip_user {
	u32 uid;
	unsigned int refs;		/* contexts; under qdev->users_lock */
	atomic_long_t used[QPIP_QUOTA_COUNT];
};

/*
 * Locked memory: charged to a process's pinned_vm (RLIMIT_MEMLOCK) and to a user's
 * QPIP_QUOTA_PINNED; both recorded to be given back.
 */
struct qpip_locked {
	struct mm_struct *mm;		/* whose pinned_vm counts the pages */
	struct qpip_user *user;		/* whose quota counts them */
};

/* A ring of CQEs or WQEs shared by the device and the process. */
struct qpip_ring {
	struct kref ref;		/* the object's, and each mmap in progress */
	struct device *dma_dev;
	unsigned int npages;
	unsigned int mapped;		/* pages mapped for DMA */
	struct page **pages;
	dma_addr_t *dma;
	unsigned long cookie;		/* mmap page offset */
	struct qpip_locked locked;	/* who is charged for the pages */
};

struct qpip_cq {
	u32 handle;
	struct qpip_user *user;		/* whose QPIP_QUOTA_CQS counts it, once charged */
	u32 slot;
	struct qpip_vector *vec;
	struct qpip_ring *ring;
	u32 depth;			/* entries of @ring: a power of two */
	/* the consumer's index in the context's doorbell page, where the device reads it */
	const u32 *head;
	const u32 *arm;			/* its arm word there */
	/* head and arm word when its waiters were last woken (under vec->lock) */
	u32 woken_head;
	u32 woken_arm;
	struct eventfd_ctx *eventfd;	/* signalled on the CQ's interrupt, or NULL */
	wait_queue_head_t *wake;	/* a qpip socket's CQ: woken on its interrupt, or NULL */
	struct list_head vec_node;	/* in vec->cqs */
	/* qpip_ib's CQ: called on its interrupt, under vec->lock (qpip_ctx_cq_notify) */
	void (*notify)(void *data);
	void *notify_data;
};

/*
 * A port a QP or listener holds, reserved in the guest kernel (qpip_ports.c): a kernel
 * socket bound to it, or none.
 */
struct qpip_port {
	struct socket *sock;
	u16 port;
};

struct qpip_qp {
	u32 handle;
	u8 type;			/* QPIP_QP_TYPE_* */
	/*
	 * Given to an ACCEPT: the connection it may carry shares its listener's port, which
	 * the listener reserved, so a CONNECT does not bind it first.
	 */
	bool accepting;
	struct qpip_user *user;		/* whose QPIP_QUOTA_QPS counts it, once charged */
	struct qpip_ring *sq;
	struct qpip_ring *rq;
	struct qpip_port port;		/* what BIND (or CONNECT) took for it */
};

/* A listener: the device's object, and the port it holds. */
struct qpip_listener {
	struct qpip_port port;
};

struct qpip_mr {
	u32 lkey;
	unsigned long npages;
	unsigned long pinned;
	unsigned long mapped;
	struct page **pages;
	dma_addr_t *dma;
	struct qpip_locked locked;	/* who is charged for the pages */
	struct qpip_user *user;		/* whose QPIP_QUOTA_MRS counts it, once charged */
	bool writable;
};

struct qpip_ctx {
	struct qpip_dev *qdev;
	u32 id;				/* device context id */
	struct qpip_ring *db;		/* the doorbell page (one page of RAM) */
	unsigned int generation;	/* qdev->generation it was created in */
	struct address_space *mapping;	/* of the file: where its mmaps are */
	struct list_head node;		/* in qdev->contexts, under qdev->lock */
	/*
	 * The user who opened the file, charged for it and everything created through it;
	 * not limited with CAP_SYS_RESOURCE at open.
	 */
	struct qpip_user *user;
	bool quota_exempt;

	struct mutex lock;		/* the object tables */
	struct xarray cqs;		/* handle -> qpip_cq */
	struct xarray qps;		/* handle -> qpip_qp */
	struct xarray mrs;		/* lkey -> qpip_mr */
	struct xarray listeners;	/* handle -> qpip_listener */
	struct xarray tripwires;	/* handle -> value entry */
	struct xarray rings;		/* mmap page offset -> qpip_ring */

	spinlock_t ev_lock;		/* @events to @lost_unknown; taken in the admin interrupt */
	struct list_head events;	/* completed qpip_cmds */
	unsigned int notices;		/* records in @events made from asynchronous events */
	/*
	 * Events dropped (this file's queue full, or the device said it dropped some): @lost
	 * is queued in @events where the loss happened and read as one EVENT_LOST.
	 */
	struct qpip_cmd lost;
	bool lost_queued;
	u64 lost_count;
	bool lost_unknown;		/* the device dropped some: how many is not known */
	wait_queue_head_t ev_wait;
	atomic_t pending;		/* asynchronous commands outstanding */
	/*
	 * The qpip sockets made in this context (qpip_sock.c), by QP handle (listeners with
	 * bit 31): where the device's events about their QPs go. Changed under its own lock
	 * and qdev->ctx_lock; read under qdev->ctx_lock.
	 */
	struct xarray socks;
	/*
	 * qpip_ib's user context: the device's asynchronous events about this context's QPs
	 * go to @qp_event instead of the event records nobody reads (called in the admin
	 * interrupt, qdev->ctx_lock held; set by qpip_ctx_set_qp_event).
	 */
	void (*qp_event)(void *data, u32 qp, u16 kind, u8 reason);
	void *qp_event_data;
};

/* @qp_event's qp for every QP of the context: the device was reset or removed. */
#define QPIP_CTX_ALL_QPS U32_MAX

/* The device was reset or removed since the context was created: it no longer exists. */
static inline bool qpip_ctx_dead(struct qpip_ctx *ctx)
{
	struct qpip_dev *qdev = ctx->qdev;

	return READ_ONCE(qdev->unbound) || ctx->generation != READ_ONCE(qdev->generation);
}

/* qpip_ctx.c: a context for the caller (exported: qpip_ib.ko's user contexts are ones) */
struct qpip_ctx *qpip_ctx_create(struct qpip_dev *qdev, struct address_space *mapping);
void qpip_ctx_destroy(struct qpip_ctx *ctx);

/* qpip_mem.c */
struct qpip_ring *qpip_ring_alloc(struct qpip_ctx *ctx, size_t bytes);
void qpip_ring_release(struct kref *ref);
int qpip_ring_publish(struct qpip_ctx *ctx, struct qpip_ring *r);
void qpip_ring_put(struct qpip_ctx *ctx, struct qpip_ring *r, bool leak);
void qpip_ring_rehome(struct qpip_ring *r);
struct qpip_mr *qpip_mr_alloc(struct qpip_ctx *ctx, u64 addr, u64 length, bool writable);
void qpip_mr_free(struct qpip_dev *qdev, struct qpip_mr *mr, bool leak);
void qpip_cq_free(struct qpip_ctx *ctx, struct qpip_cq *cq, bool leak);
void qpip_qp_free(struct qpip_ctx *ctx, struct qpip_qp *qp, bool leak);
void *qpip_ring_entry(struct qpip_ring *r, u32 depth, u32 size, u32 idx);
bool qpip_cqe_written(struct qpip_ring *r, u32 depth, u32 idx);
void qpip_vector_add(struct qpip_ctx *ctx, struct qpip_vector *vec, struct qpip_cq *cq, u32 depth);
void qpip_vector_del(struct qpip_cq *cq);
/* exported for qpip_ib.ko */
int qpip_ctx_cq_notify(struct qpip_ctx *ctx, u32 handle, void (*fn)(void *data), void *data);
struct qpip_ring *qpip_ctx_ring_get(struct qpip_ctx *ctx, u64 offset);
void qpip_ring_unref(struct qpip_ring *r);

/* qpip_verbs.c */
long qpip_ioctl(struct file *filp, unsigned int cmd, unsigned long arg);
int qpip_get_arg(void *karg, size_t ksize, u32 v1size, void __user *uarg);
int qpip_ctx_ioctl(struct qpip_ctx *ctx, unsigned int cmd, void *karg);	/* exported */
/*
 * exported for qpip_ib.ko: CONNECT and CLOSE of one of @ctx's QPs for a kernel caller,
 * whose @done gets the command when it ends (in the admin interrupt, the admin lock held;
 * c->event.status says how, c->owner is @owner) and frees it. @pdata is kernel memory.
 */
int qpip_ctx_connect_kernel(struct qpip_ctx *ctx, u32 qp, const u8 *addr, u16 port,
			    const struct qpip_iwarp_conn *iw, const void *pdata,
			    void (*done)(struct qpip_cmd *c), void *owner);
int qpip_ctx_close_kernel(struct qpip_ctx *ctx, u32 qp, void (*done)(struct qpip_cmd *c),
			  void *owner);
/*
 * exported for qpip_ib.ko, its passive side (qpip_verbs.c): a listener holding iWARP
 * connection requests, CONN_REQUEST (completing to @done as above; the request in @buf),
 * ACCEPT of a request by one of @ctx's QPs (the listener of any context), REJECT.
 */
int qpip_ctx_listen_kernel(struct qpip_ctx *ctx, const u8 *addr, u16 port, u32 backlog,
			   u16 flags, u32 *handle);
int qpip_ctx_conn_request_kernel(struct qpip_ctx *ctx, u32 listener, void *buf,
				 void (*done)(struct qpip_cmd *c), void *owner);
int qpip_ctx_accept_kernel(struct qpip_ctx *ctx, u32 listener, u32 request, u32 qp,
			   const struct qpip_iwarp_conn *iw, const void *pdata,
			   void (*done)(struct qpip_cmd *c), void *owner);
int qpip_ctx_reject_kernel(struct qpip_ctx *ctx, u32 listener, u32 request, const void *pdata,
			   u16 len);
void qpip_ctx_set_qp_event(struct qpip_ctx *ctx, void (*fn)(void *data, u32 qp, u16 kind,
							    u8 reason), void *data);

/* qpip_sock.c: qpip sockets (their own declarations: qpip_sock.h) */
bool qpip_sock_async_event(struct qpip_ctx *ctx, u32 qp, u16 kind, int status);
void qpip_sock_revoke(struct qpip_ctx *ctx);
long qpip_sock_ctx_ioctl(struct qpip_ctx *ctx, struct file *ctx_file, unsigned int cmd,
			 void __user *uarg);

/* qpip_quota.c */
struct qpip_user *qpip_user_get(struct qpip_dev *qdev, kuid_t uid);
void qpip_user_put(struct qpip_dev *qdev, struct qpip_user *u);
int qpip_quota_charge(struct qpip_ctx *ctx, enum qpip_quota q, unsigned long n);
void qpip_quota_uncharge(struct qpip_user *u, enum qpip_quota q, unsigned long n);
int qpip_port_check(u16 port);

/* qpip_ports.c */
bool qpip_port_type(u8 qp_type);
int qpip_port_reserve(struct qpip_port *p, u8 qp_type, u16 port);
void qpip_port_release(struct qpip_port *p);

static inline bool qpip_port_held(const struct qpip_port *p)
{
	return p->sock;
}

/* qpip_event.c */
ssize_t qpip_read(struct file *filp, char __user *buf, size_t count, loff_t *ppos);
__poll_t qpip_poll(struct file *filp, struct poll_table_struct *wait);
void qpip_ctx_events_free(struct qpip_ctx *ctx);

#endif /* QPIP_CTX_H */
