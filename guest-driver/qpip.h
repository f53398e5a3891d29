/* SPDX-License-Identifier: GPL-2.0 */
/*
 * qpip: driver for the qpip Queue-Pair IP network adapter.
 *
 * Shared declarations of the driver's source files. The register map, BAR layout, admin
 * commands and queue entry formats come from qpip_abi.h, the ioctls and their arguments
 * from include/uapi/qpip.h; both are generated from the qpip-abi crate.
 */
#ifndef QPIP_H
#define QPIP_H

#include <linux/atomic.h>
#include <linux/cdev.h>
#include <linux/completion.h>
#include <linux/device.h>
#include <linux/hashtable.h>
#include <linux/io.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/pci.h>
#include <linux/rwsem.h>
#include <linux/spinlock.h>
#include <linux/types.h>
#include <linux/wait.h>
#include <linux/workqueue.h>
#include <linux/xarray.h>

#include "qpip_abi.h"
#include "include/uapi/qpip.h"

#define QPIP_DRV_NAME "qpip"

struct net_device;
struct qpip_aux_dev;
struct qpip_ctx;
struct qpip_netdev;
struct qpip_routes;

/* Number of /dev/qpipN minors the driver reserves: one per PCI function. */
#define QPIP_MAX_DEVICES 64

/* Admin queue depth: commands in flight at once (asynchronous ones do not hold a slot). */
#define QPIP_ADMIN_DEPTH 64
/*
 * How long a synchronous admin command may take. The device answers in microseconds; the
 * bound is for a wedged device, and generous because a TCG guest on a busy host is slow.
 */
#define QPIP_ADMIN_TIMEOUT_MS 10000
/* Asynchronous commands (accept, connect, close) a context may have outstanding. */
#define QPIP_MAX_PENDING_PER_CTX 256
/*
 * ASYNC_EVENT requests kept pending in the device: several, so events that come in a burst
 * complete one each while the driver re-posts the ones already used.
 */
#define QPIP_ASYNC_REQUESTS 4
/*
 * How soon an ASYNC_EVENT request is posted again after the admin ring stayed full for
 * QPIP_ADMIN_TIMEOUT_MS: the request is not given up, only postponed.
 */
#define QPIP_AER_RETRY_MS 1000
/* Asynchronous events (QP error, peer closed) a context holds unread; beyond: EVENT_LOST. */
#define QPIP_MAX_ASYNC_EVENTS_PER_CTX 128
/* mmap page offsets of the two fixed mappings; rings get offsets from here up. */
#define QPIP_MMAP_DOORBELL 0
#define QPIP_MMAP_KICK 1
#define QPIP_MMAP_FIRST_RING 2

/*
 * One admin command in flight. Synchronous commands live on the waiter's stack; an
 * asynchronous one is allocated, and becomes the event record of its context when it
 * completes (so completing never allocates in the interrupt handler).
 */
struct qpip_cmd {
	struct hlist_node node;		/* in qpip_admin.pending, by id */
	u32 id;
	u32 seq;			/* submission index: the device read up to here */
	struct qpip_admin_cqe cqe;
	bool done;			/* under the admin lock */
	int err;			/* -ENODEV if the queue went away under it */
	struct completion completion;	/* synchronous commands */
	/* Asynchronous commands. @ctx is cleared when the context goes away first. */
	bool async;
	bool async_event;		/* an ASYNC_EVENT request of qpip_admin.aer[] */
	bool posted;			/* that request is in the device (admin lock) */
	bool notice;			/* an event record made from an asynchronous event */
	struct qpip_ctx *ctx;
	struct list_head ev_node;	/* in ctx->events once completed */
	struct qpip_event event;
	/*
	 * A buffer of ours the device reads while the command is pending (an iWARP accept's
	 * or connect's private data), or NULL: mapped for the device when it is attached
	 * (qpip_cmd_data_attach), unmapped and freed as soon as the command ends, however it
	 * ends (qpip_cmd_data_free) — never kept with the unread event.
	 */
	void *data;
	dma_addr_t data_dma;
	size_t data_len;
	/*
	 * A qpip socket's command (qpip_sock.c): its completion goes to @sock_done, with the
	 * event filled in, instead of becoming an event of the context; @owner is the socket.
	 */
	void (*sock_done)(struct qpip_cmd *c);
	void *owner;
	/*
	 * A buffer of the caller's the device writes (a kernel caller's CONN_REQUEST), or
	 * NULL: mapped while the command is pending, unmapped (synced for the CPU) as it ends,
	 * before @sock_done reads it; the caller frees it.
	 */
	void *in_buf;
	dma_addr_t in_dma;
	size_t in_len;
	bool in_mapped;
};

struct qpip_admin {
	spinlock_t lock;		/* everything below; taken in the interrupt handler */
	struct qpip_admin_cmd *sq;
	dma_addr_t sq_dma;
	struct qpip_admin_cqe *cq;
	dma_addr_t cq_dma;
	u32 depth;
	u32 tail;			/* commands written (free-running) */
	u32 head;			/* completions consumed (free-running) */
	u32 sq_read;			/* commands the device is known to have read */
	u32 next_id;
	bool running;
	wait_queue_head_t space;	/* a submission slot became free */
	DECLARE_HASHTABLE(pending, 6);
	/*
	 * The ASYNC_EVENT requests, re-posted by @aer_work as they complete (and retried by it
	 * every QPIP_AER_RETRY_MS while the admin ring stays full).
	 */
	struct qpip_cmd aer[QPIP_ASYNC_REQUESTS];
	bool aer_enabled;		/* ASYNC_EVENT requests may be posted */
	struct delayed_work aer_work;
};

/* A completion MSI-X vector and the CQs whose interrupts it carries. */
struct qpip_vector {
	struct qpip_dev *qdev;
	unsigned int index;		/* MSI-X vector number (1..) */
	spinlock_t lock;		/* @cqs; taken in the interrupt handler */
	struct list_head cqs;
	unsigned int ncqs;
	bool requested;
	/* The network interface's CQs interrupt here too (qpip_netdev_queue.c), or NULL. */
	struct qpip_netdev *netdev;
	atomic64_t count;
	char name[32];
};

/* IPv6 addresses configured through this driver, given back to the device after a reset. */
struct qpip_cfg_addr {
	u8 addr[16];
	u8 prefix_len;
};

/*
 * One qpip PCI function.
 *
 * Lifetime: the structure is owned by the reference count of @dev (the class device
 * /sys/class/qpip/qpipN). The PCI binding holds one reference from probe to remove; every
 * open file holds another through @cdev, whose kobject has @dev as its parent
 * (cdev_device_add). So a file opened before the function was unbound keeps this memory
 * alive; it must then not touch the hardware, which is what @unbound (under @lock) says.
 */
struct qpip_dev {
	struct device dev;
	struct cdev cdev;
	struct pci_dev *pdev;		/* referenced until this structure is freed */
	int id;				/* N in qpipN */

	void __iomem *ctrl;		/* BAR0: control registers, MSI-X table and PBA */
	resource_size_t ctrl_phys;	/* for mapping the kick page into processes */

	u32 ident;			/* REG_IDENT as read at probe */
	u32 version;			/* REG_VERSION as read at probe */
	u32 doorbell_pages;		/* REG_DOORBELL_PAGES */
	int msix_vectors;		/* vectors allocated */

	atomic64_t irq_count;		/* interrupts taken on vector 0 */
	struct completion admin_irq;	/* completed by every vector 0 interrupt */
	char admin_irq_name[32];	/* for /proc/interrupts; lives as long as the irq */

	struct qpip_admin admin;
	struct qpip_vector vectors[QPIP_MSIX_VECTORS];

	/*
	 * Taken for reading by everything that reaches the hardware (file operations, sysfs),
	 * for writing by remove and reset. Remove sets @unbound: after that the BARs are gone.
	 * A reset bumps @generation: contexts of older generations no longer exist in the
	 * device, and every call on their files fails with -ENODEV.
	 */
	struct rw_semaphore lock;
	bool unbound;
	/*
	 * Resets the device once it reported STATUS_FAILED (found by qpip_admin_exec when a
	 * command got no completion); scheduled only while the admin queue runs.
	 */
	struct work_struct fault_work;
	/*
	 * Carries a change of the device's link (ASYNC_EVENT_LINK, or events lost) to the
	 * network interface's carrier (qpip_netdev.c): the event comes in the admin
	 * interrupt, the carrier is set under rtnl.
	 */
	struct work_struct link_work;
	unsigned int generation;
	/*
	 * Serialises mmap of the doorbell and kick pages against their revocation on remove
	 * and reset. Not @lock: mmap runs under the mm's mmap lock, which ioctls take (pinning,
	 * copy_to_user) while holding @lock.
	 */
	struct mutex mmap_lock;
	/*
	 * What a revoked doorbell or kick mapping faults in: a page that goes nowhere, so a
	 * process still ringing doorbells after a reset or removal carries on until its next
	 * call fails with -ENODEV instead of dying of SIGBUS.
	 */
	struct page *dead_page;
	atomic_t next_cookie;		/* mmap offsets of rings, unique in the device */

	/* What the device reported (QUERY_DEVICE) and what was configured through us. */
	struct mutex cfg_lock;
	struct qpip_device_info info;
	bool mac_set;			/* SET_MAC was used: restore it after a reset */
	struct qpip_cfg_addr addrs[QPIP_MAX_ADDRS];
	unsigned int naddrs;
	/*
	 * The network interface's routes mirrored into the device (qpip_routes.c), or NULL:
	 * set and cleared under @lock for writing, read by a reset to give them back.
	 */
	struct qpip_routes *routes;

	/*
	 * @contexts, and @live: the context of each device context id that asynchronous events
	 * may reach — set once CREATE_CTX returned, cleared before DESTROY_CTX and at reset or
	 * removal, so an event never reaches a context that does not own the id. Taken in the
	 * admin interrupt (inside the admin lock).
	 */
	spinlock_t ctx_lock;
	struct list_head contexts;
	unsigned int ncontexts;
	struct qpip_ctx *live[QPIP_DOORBELL_PAGES];

	/*
	 * The function's network interface (qpip_netdev.c), or NULL: set once it is
	 * registered, cleared under @lock for writing before it is removed.
	 */
	struct qpip_netdev *netdev;

	/* The auxiliary device qpip_ib.ko binds (qpip_aux.c), or NULL. */
	struct qpip_aux_dev *aux;

	/* uid -> struct qpip_user of each user with a context open (qpip_quota.c). */
	struct mutex users_lock;
	struct xarray users;
};

/* The completion vectors a CQ can use: MSI-X vectors 1 .. msix_vectors - 1. */
static inline unsigned int qpip_comp_vectors(struct qpip_dev *qdev)
{
	return qdev->msix_vectors > 1 ? qdev->msix_vectors - 1 : 0;
}

static inline u32 qpip_rd(struct qpip_dev *qdev, u32 reg)
{
	return readl(qdev->ctrl + reg);
}

static inline void qpip_wr(struct qpip_dev *qdev, u32 reg, u32 val)
{
	writel(val, qdev->ctrl + reg);
}

static inline unsigned int qpip_version_major(u32 v)
{
	return v >> QPIP_VERSION_MAJOR_SHIFT;
}

static inline unsigned int qpip_version_minor(u32 v)
{
	return v & QPIP_VERSION_MINOR_MASK;
}

/* qpip_main.c */
int qpip_reset(struct qpip_dev *qdev);

/* qpip_admin.c */
int qpip_admin_init(struct qpip_dev *qdev);
int qpip_admin_start(struct qpip_dev *qdev);
void qpip_admin_stop(struct qpip_dev *qdev);
void qpip_admin_free(struct qpip_dev *qdev);
void qpip_admin_process(struct qpip_dev *qdev);
int qpip_admin_exec(struct qpip_dev *qdev, struct qpip_admin_cmd *cmd,
		    struct qpip_admin_cqe *cqe);
int qpip_admin_run(struct qpip_dev *qdev, struct qpip_admin_cmd *cmd,
		   struct qpip_admin_cqe *cqe);
int qpip_admin_submit_async(struct qpip_dev *qdev, struct qpip_cmd *c,
			    struct qpip_admin_cmd *cmd);
int qpip_cmd_data_attach(struct qpip_dev *qdev, struct qpip_cmd *c, void *buf, size_t len);
void qpip_cmd_data_free(struct qpip_dev *qdev, struct qpip_cmd *c);
void qpip_admin_detach_ctx(struct qpip_dev *qdev, struct qpip_ctx *ctx);
int qpip_status_errno(u16 status);
void qpip_cmd_init(struct qpip_admin_cmd *cmd, u16 opcode, u32 ctx, u32 handle,
		   const void *body, size_t len);
void qpip_admin_start_events(struct qpip_dev *qdev);
void qpip_admin_stop_events(struct qpip_dev *qdev);

/* qpip_cmd.c: the admin commands, typed */

/* A ring the device reads or writes: @depth entries in @npages pages. */
struct qpip_ring_params {
	const dma_addr_t *pages;	/* DMA address of each page of the ring */
	unsigned int npages;
	u32 depth;
};

/* CREATE_CQ: a ring of CQEs, interrupting on MSI-X @vector. */
struct qpip_cq_params {
	struct qpip_ring_params ring;
	u32 vector;
};

struct qpip_cq_result {
	u32 handle;
	u32 db_slot;			/* its slot in the context's doorbell page */
};

/* CREATE_QP: a send and a receive ring, the CQs their completions go to. */
struct qpip_qp_params {
	struct qpip_ring_params sq;
	struct qpip_ring_params rq;
	u32 send_cq;
	u32 recv_cq;
	u8 qp_type;
	u8 framing;
};

struct qpip_qp_result {
	u32 handle;
	u32 db_slot;
};

/* REG_MR: the pages of @length bytes at @iova of the process, @first_page_offset in. */
struct qpip_mr_params {
	const dma_addr_t *pages;
	unsigned long npages;
	u64 iova;
	u64 length;
	u32 first_page_offset;
	u32 access;			/* QPIP_MR_ACCESS_* */
};

/* ADD_ROUTE, DEL_ROUTE: a route as the device names it (IPv4 ones IPv4-mapped). */
struct qpip_route_spec {
	u8 dest[16];
	u8 prefix_len;
	u8 gateway[16];			/* ignored by DEL_ROUTE */
	u32 metric;
};

struct qpip_mr_result {
	u32 lkey;
	u32 rkey;
};

/*
 * CREATE_TRIPWIRE: @len bytes at @addr of region @lkey watched, armed by the u32 at
 * @arm_addr of region @arm_lkey, its events on CQ @cq tagged @tag.
 */
struct qpip_tripwire_params {
	u64 addr;
	u64 len;
	u64 arm_addr;
	u64 tag;
	u32 lkey;
	u32 arm_lkey;
	u32 cq;
};

/* The objects of a context that are destroyed one by one (qpip_cmd_destroy). */
enum qpip_obj_type {
	QPIP_OBJ_CQ,
	QPIP_OBJ_QP,
	QPIP_OBJ_MR,			/* named by its lkey */
	QPIP_OBJ_LISTENER,
	QPIP_OBJ_TRIPWIRE,
};

int qpip_cmd_create_ctx(struct qpip_dev *qdev, dma_addr_t doorbell_page, u32 flags, u32 *ctx);
int qpip_cmd_destroy_ctx(struct qpip_dev *qdev, u32 ctx);
int qpip_cmd_create_cq(struct qpip_dev *qdev, u32 ctx, const struct qpip_cq_params *p,
		       struct qpip_cq_result *res);
int qpip_cmd_create_qp(struct qpip_dev *qdev, u32 ctx, const struct qpip_qp_params *p,
		       struct qpip_qp_result *res);
int qpip_cmd_reg_mr(struct qpip_dev *qdev, u32 ctx, const struct qpip_mr_params *p,
		    struct qpip_mr_result *res);
int qpip_cmd_create_tripwire(struct qpip_dev *qdev, u32 ctx,
			     const struct qpip_tripwire_params *p, u32 *handle);
int qpip_cmd_destroy(struct qpip_dev *qdev, u32 ctx, enum qpip_obj_type type, u32 handle);
int qpip_cmd_bind(struct qpip_dev *qdev, u32 ctx, u32 qp, const u8 *addr, u16 *port);
int qpip_cmd_bind_udp(struct qpip_dev *qdev, u32 ctx, u32 qp, const u8 *addr, u16 port,
		      bool share);
int qpip_cmd_udp_peer(struct qpip_dev *qdev, u32 ctx, u32 qp, const u8 *addr, u16 port);
int qpip_cmd_bind_for(struct qpip_dev *qdev, u32 ctx, u32 qp, const u8 *addr, u16 *port,
		      const u8 *peer, u16 peer_port);
int qpip_cmd_listen(struct qpip_dev *qdev, u32 ctx, const u8 *addr, u16 port, u32 backlog,
		    u16 flags, u32 *handle);
int qpip_cmd_accept(struct qpip_dev *qdev, struct qpip_cmd *c, u32 ctx, u32 listener, u32 qp,
		    const struct qpip_iwarp_conn *iw);
int qpip_cmd_connect(struct qpip_dev *qdev, struct qpip_cmd *c, u32 ctx, u32 qp,
		     const u8 *addr, u16 port, const struct qpip_iwarp_conn *iw);
int qpip_cmd_close(struct qpip_dev *qdev, struct qpip_cmd *c, u32 ctx, u32 qp);
int qpip_cmd_accept_request(struct qpip_dev *qdev, struct qpip_cmd *c, u32 ctx, u32 listener,
			    u32 request, u32 qp, const struct qpip_iwarp_conn *iw);
int qpip_cmd_conn_request(struct qpip_dev *qdev, struct qpip_cmd *c, u32 ctx, u32 listener);
int qpip_cmd_reject(struct qpip_dev *qdev, u32 ctx, u32 listener, u32 request,
		    dma_addr_t pd_dma, u16 pd_len);
int qpip_cmd_set_qp_opt(struct qpip_dev *qdev, u32 ctx, u32 qp, const struct qpip_set_qp_opt *o);
int qpip_query_device(struct qpip_dev *qdev, struct qpip_device_info *info);
int qpip_query_stats(struct qpip_dev *qdev, u64 *counters, unsigned int n);
int qpip_query_conn(struct qpip_dev *qdev, u32 ctx, u32 qp, struct qpip_query_conn *out);
int qpip_list_addrs(struct qpip_dev *qdev, struct qpip_addr_list *list);
int qpip_set_mac(struct qpip_dev *qdev, const u8 *mac);
int qpip_change_addr(struct qpip_dev *qdev, bool add, const u8 *addr, u8 prefix_len);
int qpip_restore_config(struct qpip_dev *qdev);
int qpip_cmd_route(struct qpip_dev *qdev, bool add, const struct qpip_route_spec *s);
int qpip_cmd_neigh(struct qpip_dev *qdev, bool add, const u8 *addr, const u8 *mac);

/*
 * qpip_routes.c: the routes of the function's network interface, mirrored into the device.
 * The interface's code calls start once the interface is registered and stop before it is
 * unregistered (both sleep; neither with rtnl or qdev->lock held).
 */
int qpip_routes_start(struct qpip_dev *qdev, struct net_device *nd);
void qpip_routes_stop(struct qpip_dev *qdev);
void qpip_routes_restore(struct qpip_dev *qdev);

/* qpip_iwarp.c: what an iWARP QP's accept or connect brings to MPA */
int qpip_iwarp_conn_check(const struct qpip_iwarp_conn *iw);
int qpip_iwarp_conn_take(struct qpip_dev *qdev, struct qpip_cmd *c,
			 const struct qpip_iwarp_conn *iw);

/* Contexts: qpip_ctx.c, qpip_event.c, qpip_mem.c (their own declarations: qpip_ctx.h) */
extern const struct file_operations qpip_fops;
void qpip_contexts_revoke(struct qpip_dev *qdev);
void qpip_ctx_post_event(struct qpip_ctx *ctx, struct qpip_cmd *c);
void qpip_ctx_async_event(struct qpip_dev *qdev, const struct qpip_admin_cqe *cqe);
irqreturn_t qpip_cq_irq(int irq, void *data);

/* qpip_quota.c (the rest in qpip_ctx.h) */
void qpip_users_free(struct qpip_dev *qdev);

/* qpip_mem.c: the completion vectors */
struct qpip_vector *qpip_pick_vector(struct qpip_dev *qdev, u32 want);
void qpip_vector_set_netdev(struct qpip_vector *vec, struct qpip_netdev *nd);

/* The network interface: qpip_netdev*.c (their own declarations: qpip_netdev.h) */
int qpip_netdev_probe(struct qpip_dev *qdev);
void qpip_netdev_remove(struct qpip_dev *qdev);
void qpip_netdev_reset_done(struct qpip_dev *qdev);
void qpip_netdev_link_work(struct work_struct *work);
void qpip_netdev_irq(struct qpip_netdev *nd);
void qpip_netdev_mirror_addr(struct qpip_dev *qdev, bool add, const u8 *addr, u8 prefix_len);
void qpip_netdev_mirror_mac(struct qpip_dev *qdev, const u8 *mac);

/* qpip_cdev.c */
int qpip_cdev_init(void);
void qpip_cdev_exit(void);
struct qpip_dev *qpip_dev_alloc(struct pci_dev *pdev);
int qpip_cdev_add(struct qpip_dev *qdev);
void qpip_cdev_del(struct qpip_dev *qdev);

#endif /* QPIP_H */
