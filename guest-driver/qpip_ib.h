/* SPDX-License-Identifier: GPL-2.0 */
/*
 * qpip_ib: a qpip function as an iWARP ib_device (the RDMA stack's view of it), shared by
 *   qpip_ib_main.c   the auxiliary driver: an ib_device per function, registered and removed
 *   qpip_ib_verbs.c  its verbs: queries, user contexts, protection domains, mmap
 *   qpip_ib_cq.c     CQs: the device context's own, their rings mapped, their interrupts
 *   qpip_ib_mr.c     memory regions: the device's registered regions
 *   qpip_ib_qp.c     QPs: the device context's iWARP TCP QPs, their rings mapped, states
 *   qpip_ib_cm.c     the iWARP connection manager's ops: the active side on CONNECT/CLOSE,
 *                    the passive side on listeners holding connection requests
 * qpip.ko stays the owner of the function; see qpip_aux.h for what it gives this module.
 */
#ifndef QPIP_IB_H
#define QPIP_IB_H

#include <linux/completion.h>
#include <linux/idr.h>
#include <linux/refcount.h>
#include <linux/workqueue.h>
#include <rdma/ib_verbs.h>

#include "qpip_aux.h"
#include "qpip_ctx.h"
#include "include/uapi/qpip_ib.h"

/*
 * Protection domains per function. The device has none: they are numbers of this module,
 * and this bound is ours (reported as max_pd), not the device's.
 */
#define QPIP_IB_MAX_PD 4096

struct qpip_ib_dev {
	struct ib_device ibdev;
	struct qpip_dev *qdev;
	struct net_device *netdev;	/* the function's qpipN: port 1 */
	struct ida pd_ida;
	struct xarray qps;		/* qp_num -> qpip_ib_qp, for iw_get_qp and events */
	/* qpipN's events, which become the port's (qpip_ib_main.c) */
	struct notifier_block nb;
	struct netdev_net_notifier nn;
	bool port_active;		/* as last told; under rtnl */
	/*
	 * The device context of the driver's own that holds iw_cm's listeners (qpip_ib_cm.c):
	 * made by the first listen, kept (a reference) until the device goes or a reset
	 * kills it.
	 */
	struct mutex lctx_lock;		/* @lctx, @lingering, @unregistering */
	struct qpip_ib_lctx *lctx;
	/* Listeners iw_cm let go of, kept a while for a new listen on their port. */
	struct list_head lingering;
	bool unregistering;		/* no listener lingers any more */
	struct workqueue_struct *linger_wq;	/* their expiry */
	/* A reset killed the user contexts: IB_EVENT_DEVICE_FATAL tells their processes. */
	struct work_struct fatal_work;
};

/* The listeners' device context; the device, each listener and each request hold a reference. */
struct qpip_ib_lctx {
	refcount_t ref;
	struct qpip_ib_dev *qib;
	struct qpip_ctx *ctx;
};

/* A user context: one device context, as an open /dev/qpipN is. */
struct qpip_ib_ucontext {
	struct ib_ucontext ibuc;
	struct qpip_ctx *ctx;
	struct rdma_user_mmap_entry *db_entry;	/* the doorbell page's mmap offset */
	struct rdma_user_mmap_entry *kick_entry; /* the kick register page's */
	/*
	 * The status page (QPIP_IB_STATUS_*): which QPs are dead, for the provider. Written
	 * under @status_lock, also in the admin interrupt (a reset's revocation).
	 */
	struct page *status_page;
	struct rdma_user_mmap_entry *status_entry;
	spinlock_t status_lock;
	/*
	 * Doorbell slots of dead QPs not yet destroyed (the device freed them): no new QP of
	 * the context takes one; a device QP of qpip_ib's holds it instead (@slot_holder),
	 * so a post racing with the QP's death can only ring a QP nobody uses. Under
	 * @slot_lock, which also orders every CREATE_QP and DESTROY_QP of the context.
	 */
	struct mutex slot_lock;
	DECLARE_BITMAP(slot_dead, QPIP_DB_QP_SLOTS);
	struct qpip_ib_qp *slot_qp[QPIP_DB_QP_SLOTS];	/* the dead QP of a slot_dead slot */
	u32 slot_holder[QPIP_DB_QP_SLOTS];		/* its holder's device QP, or 0 */
};

/* What an mmap offset of a user context names. */
enum qpip_ib_mmap_kind {
	QPIP_IB_MMAP_DOORBELL,
	QPIP_IB_MMAP_RING,		/* a CQ's or QP's ring */
	QPIP_IB_MMAP_KICK,		/* the kick register's page of the control BAR */
	QPIP_IB_MMAP_STATUS,		/* the status page (read-only) */
};

struct qpip_ib_mmap_entry {
	struct rdma_user_mmap_entry rdma;
	enum qpip_ib_mmap_kind kind;
	struct qpip_ring *ring;		/* QPIP_IB_MMAP_RING: a reference of the entry's */
};

struct qpip_ib_pd {
	struct ib_pd ibpd;
	u32 pdn;
};

struct qpip_ib_cq {
	struct ib_cq ibcq;
	struct qpip_ctx *ctx;			/* the user context's device context */
	u32 handle;				/* the device's CQ */
	struct rdma_user_mmap_entry *ring_entry;
};

struct qpip_ib_mr {
	struct ib_mr ibmr;
	struct qpip_ctx *ctx;
};

/* Where a QP's connection stands, as this driver drives it for iw_cm (qpip_ib_cm.c). */
enum qpip_ib_cm_state {
	QPIP_IB_CM_IDLE,		/* no connection, none asked for */
	QPIP_IB_CM_CONNECTING,		/* CONNECT given; CONNECT_REPLY not yet told */
	QPIP_IB_CM_CONNECTED,		/* told; the connection carries the QP */
	QPIP_IB_CM_DONE,		/* IW_CM_EVENT_CLOSE (or a failed reply) told */
};

/* What happened to a QP, from the admin interrupt, for its work (qpip_ib_qp_work). */
#define QPIP_IB_EV_CONNECT_DONE	BIT(0)	/* CONNECT completed: @connect_status */
#define QPIP_IB_EV_CLOSE_DONE	BIT(1)	/* CLOSE completed */
#define QPIP_IB_EV_PEER_CLOSED	BIT(2)	/* ASYNC_EVENT_PEER_CLOSED */
#define QPIP_IB_EV_ERROR	BIT(3)	/* ASYNC_EVENT_QP_ERROR: @error_reason */
#define QPIP_IB_EV_GONE		BIT(4)	/* the device QP was destroyed (ERR, destroy) */
#define QPIP_IB_EV_CLOSE_FAILED	BIT(5)	/* CLOSE failed: the connection reset, timed out */
#define QPIP_IB_EV_DEAD		BIT(6)	/* the device forgot it (a reset): status DEAD */

/*
 * A QP: one of the user context's device context's iWARP TCP QPs. Its memory is the RDMA
 * core's (freed after destroy_qp returns), so destroy_qp waits until every reference —
 * iw_cm's (iw_add_ref), a pending command's, a queued work's — is gone.
 */
struct qpip_ib_qp {
	struct ib_qp ibqp;
	struct qpip_ib_dev *qib;
	struct qpip_ctx *ctx;			/* the user context's device context */
	struct qpip_ib_ucontext *uc;
	u32 handle;				/* the device's QP: qp_num */
	u32 db_slot;				/* its doorbell slot: its status word too */
	struct pid *owner;			/* the creating process: only it may connect it */
	struct rdma_user_mmap_entry *sq_entry;
	struct rdma_user_mmap_entry *rq_entry;
	struct ib_qp_cap cap;
	u8 sq_sig_type;

	refcount_t ref;
	struct completion free;			/* the last reference went */

	struct mutex lock;			/* everything below */
	enum ib_qp_state state;
	bool dev_gone;				/* the device QP was destroyed */
	bool dead;				/* its status word says DEAD */
	bool closing;				/* CLOSE given */
	struct iw_cm_id *cm_id;			/* held (add_ref) while set */
	enum qpip_ib_cm_state cm_state;
	bool peer_closed;		/* the peer's FIN came */
	bool close_done;		/* our CLOSE completed */
	bool conn_failed;		/* reset, timed out, ERR, destroyed */
	bool disconnect_told;

	spinlock_t ev_lock;			/* the events, taken in the admin interrupt */
	unsigned long events;			/* QPIP_IB_EV_* */
	int connect_status;
	u8 error_reason;			/* ASYNC_REASON_* */
	struct work_struct work;
};

static inline struct qpip_ib_dev *to_qibdev(struct ib_device *ibdev)
{
	return container_of(ibdev, struct qpip_ib_dev, ibdev);
}

static inline struct qpip_ib_ucontext *to_qibuc(struct ib_ucontext *ibuc)
{
	return container_of(ibuc, struct qpip_ib_ucontext, ibuc);
}

static inline struct qpip_ib_cq *to_qibcq(struct ib_cq *ibcq)
{
	return container_of(ibcq, struct qpip_ib_cq, ibcq);
}

static inline struct qpip_ib_pd *to_qibpd(struct ib_pd *ibpd)
{
	return container_of(ibpd, struct qpip_ib_pd, ibpd);
}

/* qpip_ib_verbs.c */
int qpip_ib_query_device(struct ib_device *ibdev, struct ib_device_attr *attr,
			 struct ib_udata *udata);
int qpip_ib_query_port(struct ib_device *ibdev, u32 port, struct ib_port_attr *attr);
int qpip_ib_query_gid(struct ib_device *ibdev, u32 port, int index, union ib_gid *gid);
int qpip_ib_get_port_immutable(struct ib_device *ibdev, u32 port,
			       struct ib_port_immutable *imm);
void qpip_ib_get_dev_fw_str(struct ib_device *ibdev, char *str);
int qpip_ib_alloc_ucontext(struct ib_ucontext *ibuc, struct ib_udata *udata);
void qpip_ib_dealloc_ucontext(struct ib_ucontext *ibuc);
void qpip_ib_disassociate_ucontext(struct ib_ucontext *ibuc);
int qpip_ib_mmap(struct ib_ucontext *ibuc, struct vm_area_struct *vma);
void qpip_ib_mmap_free(struct rdma_user_mmap_entry *entry);
int qpip_ib_alloc_pd(struct ib_pd *ibpd, struct ib_udata *udata);
int qpip_ib_dealloc_pd(struct ib_pd *ibpd, struct ib_udata *udata);
void qpip_ib_status_dead(struct qpip_ib_ucontext *uc, u32 slot);
void qpip_ib_status_alive(struct qpip_ib_ucontext *uc, u32 slot);

int qpip_ib_mmap_ring_insert(struct qpip_ib_ucontext *uc, u64 offset,
			     struct rdma_user_mmap_entry **entry);

/* qpip_ib_cq.c */
int qpip_ib_create_cq(struct ib_cq *ibcq, const struct ib_cq_init_attr *attr,
		      struct uverbs_attr_bundle *attrs);
int qpip_ib_destroy_cq(struct ib_cq *ibcq, struct ib_udata *udata);
int qpip_ib_poll_cq(struct ib_cq *ibcq, int num_entries, struct ib_wc *wc);
int qpip_ib_req_notify_cq(struct ib_cq *ibcq, enum ib_cq_notify_flags flags);

/* qpip_ib_mr.c */
struct ib_mr *qpip_ib_get_dma_mr(struct ib_pd *ibpd, int access);
struct ib_mr *qpip_ib_reg_user_mr(struct ib_pd *ibpd, u64 start, u64 length, u64 virt_addr,
				  int access, struct ib_udata *udata);
int qpip_ib_dereg_mr(struct ib_mr *ibmr, struct ib_udata *udata);

/* qpip_ib_qp.c */
int qpip_ib_create_qp(struct ib_qp *ibqp, struct ib_qp_init_attr *attr, struct ib_udata *udata);
int qpip_ib_modify_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask,
		      struct ib_udata *udata);
int qpip_ib_query_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask,
		     struct ib_qp_init_attr *init);
int qpip_ib_destroy_qp(struct ib_qp *ibqp, struct ib_udata *udata);
int qpip_ib_post_send(struct ib_qp *ibqp, const struct ib_send_wr *wr,
		      const struct ib_send_wr **bad_wr);
int qpip_ib_post_recv(struct ib_qp *ibqp, const struct ib_recv_wr *wr,
		      const struct ib_recv_wr **bad_wr);
void qpip_ib_qp_get(struct qpip_ib_qp *qp);
void qpip_ib_qp_put(struct qpip_ib_qp *qp);
void qpip_ib_qp_note(struct qpip_ib_qp *qp, unsigned long ev);
void qpip_ib_qp_event(void *data, u32 qpn, u16 kind, u8 reason);
int qpip_ib_qp_close(struct qpip_ib_qp *qp);
int qpip_ib_qp_kill(struct qpip_ib_qp *qp);

static inline struct qpip_ib_qp *to_qibqp(struct ib_qp *ibqp)
{
	return container_of(ibqp, struct qpip_ib_qp, ibqp);
}

/* qpip_ib_cm.c */
struct iw_cm_id;
struct iw_cm_conn_param;
int qpip_ib_iw_create_listen(struct iw_cm_id *cm_id, int backlog);
int qpip_ib_iw_destroy_listen(struct iw_cm_id *cm_id);
void qpip_ib_lctx_release(struct qpip_ib_dev *qib);
int qpip_ib_iw_connect(struct iw_cm_id *cm_id, struct iw_cm_conn_param *param);
int qpip_ib_iw_accept(struct iw_cm_id *cm_id, struct iw_cm_conn_param *param);
int qpip_ib_iw_reject(struct iw_cm_id *cm_id, const void *pdata, u8 pdata_len);
struct ib_qp *qpip_ib_iw_get_qp(struct ib_device *ibdev, int qpn);
void qpip_ib_iw_add_ref(struct ib_qp *qp);
void qpip_ib_iw_rem_ref(struct ib_qp *qp);
void qpip_ib_cm_events(struct qpip_ib_qp *qp, unsigned long ev, int connect_status);

#endif /* QPIP_IB_H */
