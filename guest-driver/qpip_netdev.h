/* SPDX-License-Identifier: GPL-2.0 */
/*
 * qpip: the function's network interface (qpipN in `ip link`), shared by the files that
 * implement it:
 *
 *   qpip_netdev.c       the net_device: probe and remove, open and stop, MTU, MAC, ethtool
 *   qpip_netdev_queue.c its queues: a kernel context with one raw Ethernet QP and two CQs,
 *                       transmit, receive (NAPI), the doorbell protocol in C
 *   qpip_netdev_addr.c  addresses: one list, the device's, mirrored onto the interface and
 *                       back (notifiers, and rtnetlink from inside the kernel)
 *   qpip_netdev_neigh.c permanent neighbour entries, mirrored into the device (netevent
 *                       notifier)
 *
 * The device is the interface's "hardware": the MAC and the addresses are the function's,
 * shared with the engine that serves the offloaded QPs, as a NIC and its RDMA function share
 * them (cxgb4 and iw_cxgb4, ice and irdma).
 */
#ifndef QPIP_NETDEV_H
#define QPIP_NETDEV_H

#include <linux/netdevice.h>
#include <linux/skbuff.h>
#include <linux/u64_stats_sync.h>

#include "qpip.h"

/* Ring depths (entries); clamped to what the device allows, powers of two. */
#define QPIP_ND_SQ_DEPTH	256
#define QPIP_ND_RQ_DEPTH	256
/* Wake a stopped transmit queue once this many send WQEs are free again. */
#define QPIP_ND_TX_WAKE		(MAX_SKB_FRAGS + 2)

/* A ring of fixed-size entries in pages the device reads or writes (page list). */
struct qpip_nd_ring {
	u32 depth;			/* entries, a power of two */
	u32 entry_size;
	unsigned int npages;
	void **va;			/* each page, coherent */
	dma_addr_t *dma;
};

/* What a send WQE holds until its CQE: the skb and its mappings. */
struct qpip_nd_tx_buf {
	struct sk_buff *skb;
	unsigned int nmaps;
	dma_addr_t dma[QPIP_MAX_SGE];
	u32 len[QPIP_MAX_SGE];
};

/*
 * A receive buffer posted in the RQ: an skb of MTU + 14 bytes (one frame each), or with
 * mergeable receive buffers a page (a piece of a frame).
 */
struct qpip_nd_rx_buf {
	struct sk_buff *skb;
	struct page *page;
	dma_addr_t dma;
};

/* A completion queue of the interface and its slot in the doorbell page. */
struct qpip_nd_cq {
	struct qpip_nd_ring ring;
	u32 handle;
	u32 slot;
	u32 head;			/* CQEs consumed (free-running) */
	u32 arm_seq;
};

struct qpip_nd_stats {
	u64 packets;
	u64 bytes;
	u64 errors;
	u64 dropped;
	u64 csum_ok;			/* RX: CQE_RAW_RX_CSUM_OK */
	u64 too_long;			/* RX: frames longer than the buffer (LOCAL_LENGTH) */
	u64 alloc_failed;		/* RX: a buffer could not be allocated */
	u64 merged;			/* RX: frames that spanned more than one buffer */
	u64 gso;			/* RX: TCP super-frames delivered whole (GSO skbs) */
	u64 too_many_frags;		/* RX: frames of more pieces than an skb holds */
	u64 copied;			/* RX: small frames copied whole, their page reused */
	struct u64_stats_sync syncp;
};

/*
 * The queues of an open interface: everything ndo_open creates and ndo_stop destroys. The
 * device knows them while @generation is qdev->generation; a reset makes it forget them.
 */
struct qpip_nd_queues {
	bool up;			/* created, NAPI enabled, vector hooked */
	unsigned int generation;
	u32 ctx;			/* device context id */
	void *db;			/* doorbell page (coherent, never mapped to a process) */
	dma_addr_t db_dma;
	struct qpip_vector *vec;
	struct qpip_nd_cq tx_cq;
	struct qpip_nd_cq rx_cq;
	u32 qp;
	u32 qp_slot;
	struct qpip_nd_ring sq;
	struct qpip_nd_ring rq;
	unsigned int max_sge;

	/* Transmit: @sq_tail under the netdev's tx lock, @sq_head in NAPI. */
	u32 sq_tail;
	u32 sq_head;
	struct qpip_nd_tx_buf *tx_bufs;

	/* Receive, NAPI only: posted buffers are [rq_head, rq_tail). */
	u32 rq_tail;
	u32 rq_head;
	u32 rx_buf_len;			/* MTU + Ethernet header, or a page if mergeable */
	struct qpip_nd_rx_buf *rx_bufs;
	/*
	 * Where mergeable buffers come from: pages mapped once and used again, those of frames
	 * copied whole at once, the others when the stack frees their skb.
	 */
	struct page_pool *rx_pool;
	/*
	 * The QP was created with RAW_RX_MERGEABLE: frames span buffers and TCP super-frames
	 * arrive whole. The frame being assembled (@rx_skb, @rx_pieces so far) may straddle
	 * NAPI polls; @rx_discard says the rest of the current frame is thrown away.
	 */
	bool rx_mergeable;
	bool rx_discard;
	unsigned int rx_pieces;
	struct sk_buff *rx_skb;
};

/* What a queued change carries (qpip_netdev_addr.c, qpip_netdev_neigh.c). */
enum qpip_nd_sync_kind {
	QPIP_ND_ADDR_TO_DEVICE,		/* an address of the interface changed */
	QPIP_ND_ADDR_TO_NETDEV,		/* sysfs or an ioctl changed one of the device's */
	QPIP_ND_MAC_TO_NETDEV,		/* sysfs or an ioctl changed the device's MAC */
	QPIP_ND_IMPORT,			/* the interface came up: take the device's addresses */
	QPIP_ND_NEIGH,			/* a neighbour entry of the interface changed */
	QPIP_ND_NEIGH_RESYNC,		/* up, or reset: the device takes the permanent entries */
};

/* A change to carry from one side to the other, in order. */
struct qpip_nd_sync {
	struct list_head node;
	enum qpip_nd_sync_kind kind;
	bool add;			/* NEIGH: permanent; NEIGH_RESYNC: after a reset */
	u8 addr[16];			/* IPv6, or IPv4-mapped */
	u8 prefix_len;			/* as the device counts it (IPv4: 96 + prefix) */
	u8 mac[ETH_ALEN];
};

/* A permanent neighbour entry as the device holds it. */
struct qpip_nd_neigh {
	u8 addr[16];			/* IPv6, or IPv4-mapped */
	u8 mac[ETH_ALEN];
};

struct qpip_netdev {
	struct net_device *netdev;
	struct qpip_dev *qdev;
	struct napi_struct napi;
	struct qpip_nd_queues q;	/* under rtnl */
	/* Under rtnl: the carrier is on exactly while both are true. */
	bool queues_up;			/* opened with its queues */
	bool link_up;			/* the device's link, as last read (STATUS_LINK_UP) */
	/* One writer each: NAPI (send completions; receives, and refills at open). */
	struct qpip_nd_stats tx_stats;
	struct qpip_nd_stats rx_stats;
	/* Counted in xmit, beside NAPI's writers. */
	atomic64_t tx_dropped;
	atomic64_t tx_stopped;		/* the queue was stopped, SQ full */
	atomic64_t irqs;
	atomic64_t kicks;		/* doorbells that found the engine asleep */

	/* Rebuilds the queues after a device reset made the device forget them. */
	struct work_struct reset_work;

	/* Address and MAC changes to carry over, in order; @sync_lock may be taken in atomic context. */
	spinlock_t sync_lock;
	struct list_head sync_list;
	struct work_struct sync_work;
	/*
	 * The task that is changing the interface's addresses on the device's behalf (the
	 * work item): the notifiers, called synchronously from its rtnetlink request, know
	 * the change came from the device and do not carry it back.
	 */
	struct task_struct *mirroring;
	/*
	 * IPv6 additions whose address is still under duplicate address detection on the
	 * interface (tentative): @dad_work puts them back on @sync_list a moment later, to be
	 * looked at again. Under @sync_lock; @dad_stopped: the interface is going away.
	 */
	struct list_head dad_list;
	struct delayed_work dad_work;
	bool dad_stopped;
	bool notifiers;			/* inetaddr/inet6addr notifiers registered */
	struct notifier_block inet_nb;
	struct notifier_block inet6_nb;

	/*
	 * Permanent neighbour entries mirrored into the device (qpip_netdev_neigh.c). @neigh,
	 * @nneigh and what goes with them are the sync work item's alone (and
	 * qpip_nd_neigh_stop's once it is flushed).
	 */
	bool neigh_notifier;		/* netevent notifier registered */
	bool neigh_seen;		/* a permanent entry was notified: removals matter */
	struct notifier_block neigh_nb;
	struct qpip_nd_neigh neigh[QPIP_MAX_NEIGHBORS];
	unsigned int nneigh;
	unsigned long neigh_refused;	/* refused for want of room (NO_RESOURCES) */
	bool neigh_full_logged;
};

/* qpip_netdev_queue.c */
int qpip_nd_queues_up(struct qpip_netdev *nd);
void qpip_nd_queues_down(struct qpip_netdev *nd);
netdev_tx_t qpip_nd_xmit(struct sk_buff *skb, struct net_device *dev);
netdev_features_t qpip_nd_features_check(struct sk_buff *skb, struct net_device *dev,
					 netdev_features_t features);
int qpip_nd_poll(struct napi_struct *napi, int budget);

/* qpip_netdev_addr.c */
void qpip_nd_addr_init(struct qpip_netdev *nd);
void qpip_nd_addr_import(struct qpip_netdev *nd);
int qpip_nd_addr_start(struct qpip_netdev *nd);
void qpip_nd_addr_stop(struct qpip_netdev *nd);
void qpip_nd_sync_queue(struct qpip_netdev *nd, struct qpip_nd_sync *s);

/* qpip_netdev_neigh.c */
void qpip_nd_neigh_start(struct qpip_netdev *nd);
void qpip_nd_neigh_stop(struct qpip_netdev *nd);
void qpip_nd_neigh_sync(struct qpip_netdev *nd, bool forgotten);
void qpip_nd_neigh_apply(struct qpip_netdev *nd, const struct qpip_nd_sync *s);
void qpip_nd_neigh_resync(struct qpip_netdev *nd, const struct qpip_nd_sync *s);

/* qpip_netdev.c */
extern const struct ethtool_ops qpip_nd_ethtool_ops;

#endif /* QPIP_NETDEV_H */
