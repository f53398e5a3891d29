// SPDX-License-Identifier: GPL-2.0
/*
 * qpip: the network interface's queues and data path.
 *
 * An open interface owns a kernel context (CTX_FLAG_KERNEL: its doorbell page is ours and
 * mapped into no process), one QP_TYPE_RAW_ETH QP and two CQs, one for send completions and
 * one for receives, both interrupting on one completion vector, where they schedule NAPI.
 * Every ring is pages of kernel memory named to the device by page lists; the WQEs name
 * packet memory by guest-physical address (PHYS_LKEY), mapped through the DMA API.
 *
 * Transmit posts one send WQE per skb (linear part and fragments as SGEs, checksum and TSO
 * offloads in the WQE) and keeps the skb until its CQE. Receive keeps the RQ full and hands
 * completed frames to GRO, in one of two modes chosen at open: with mergeable receive
 * buffers (RAW_RX_MERGEABLE, while NETIF_F_GRO_HW is on and the device takes it) the
 * buffers are pages, a frame spans as many as it needs and a TCP super-frame arrives whole,
 * as a GSO skb (virtio-net's mergeable mode, a NIC's LRO); otherwise each buffer is an skb
 * of MTU + Ethernet header bytes holding one frame. Mergeable pages come from a page pool,
 * mapped for the device once: a small frame (an ACK, a ping-pong's message) is copied into
 * its skb and its page goes straight back to the RQ, and a page the stack took as a
 * fragment returns to the pool when the stack frees it — no page allocation or DMA mapping
 * per frame. Both rings are
 * rung with the doorbell protocol of abi/src/doorbell.rs: producer index, change counter,
 * full barrier, and a kick if the engine said it sleeps.
 */
#include <linux/dma-mapping.h>
#include <linux/etherdevice.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/log2.h>
#include <linux/slab.h>
#include <linux/tcp.h>
#include <net/page_pool/helpers.h>

#include "qpip_netdev.h"

static_assert(sizeof(struct qpip_wqe) == QPIP_WQE_SGE_OFFSET);
static_assert(sizeof(struct qpip_sge) == 16);
static_assert(sizeof(struct qpip_cqe) == QPIP_CQE_SIZE);

static struct device *qpip_nd_dma(struct qpip_netdev *nd)
{
	return &nd->qdev->pdev->dev;
}

/* ---- rings ---- */

static void qpip_nd_ring_free(struct qpip_netdev *nd, struct qpip_nd_ring *r)
{
	unsigned int i;

	for (i = 0; r->va && i < r->npages; i++)
		if (r->va[i])
			dma_free_coherent(qpip_nd_dma(nd), PAGE_SIZE, r->va[i], r->dma[i]);
	kfree(r->va);
	kfree(r->dma);
	r->va = NULL;
	r->dma = NULL;
	r->npages = 0;
}

/* @depth entries of @entry_size bytes, one page at a time (zeroed: no CQE looks written). */
static int qpip_nd_ring_alloc(struct qpip_netdev *nd, struct qpip_nd_ring *r, u32 depth,
			      u32 entry_size)
{
	unsigned int i;

	r->depth = depth;
	r->entry_size = entry_size;
	r->npages = DIV_ROUND_UP(depth * entry_size, PAGE_SIZE);
	r->va = kcalloc(r->npages, sizeof(*r->va), GFP_KERNEL);
	r->dma = kcalloc(r->npages, sizeof(*r->dma), GFP_KERNEL);
	if (!r->va || !r->dma)
		goto err;
	for (i = 0; i < r->npages; i++) {
		r->va[i] = dma_alloc_coherent(qpip_nd_dma(nd), PAGE_SIZE, &r->dma[i], GFP_KERNEL);
		if (!r->va[i])
			goto err;
	}
	return 0;
err:
	qpip_nd_ring_free(nd, r);
	return -ENOMEM;
}

/* The entry of free-running index @idx. Entries never cross a page (sizes divide it). */
static void *qpip_nd_entry(struct qpip_nd_ring *r, u32 idx)
{
	u32 off = (idx & (r->depth - 1)) * r->entry_size;

	return r->va[off / PAGE_SIZE] + off % PAGE_SIZE;
}

static void qpip_nd_ring_params(struct qpip_nd_ring *r, struct qpip_ring_params *p)
{
	p->pages = r->dma;
	p->npages = r->npages;
	p->depth = r->depth;
}

/* ---- the doorbell page (producer side of abi/src/doorbell.rs) ---- */

static u32 *qpip_nd_db_word(struct qpip_nd_queues *q, u32 off)
{
	return q->db + off;
}

/*
 * Stores @value at @off after everything written before it, bumps the change counter, and
 * returns whether the engine said it sleeps. The counter's atomic read-modify-write is
 * fully ordered: it is the full barrier between the store and the read of the flag.
 */
static bool qpip_nd_db_ring(struct qpip_nd_queues *q, u32 off, u32 value)
{
	dma_wmb();
	WRITE_ONCE(*qpip_nd_db_word(q, off), value);
	atomic_add_return(1, (atomic_t *)qpip_nd_db_word(q, QPIP_DB_CHANGE_COUNT));
	return READ_ONCE(*qpip_nd_db_word(q, QPIP_DB_ENGINE_SLEEPING)) != 0;
}

static void qpip_nd_kick(struct qpip_netdev *nd)
{
	atomic64_inc(&nd->kicks);
	qpip_wr(nd->qdev, QPIP_KICK_PAGE_OFFSET + QPIP_KICK, 1);
}

/* A producer index: the engine must see it, so a sleeping one is woken. */
static void qpip_nd_db_produce(struct qpip_netdev *nd, u32 off, u32 value)
{
	if (qpip_nd_db_ring(&nd->q, off, value))
		qpip_nd_kick(nd);
}

/* ---- completions ---- */

/* Whether the device wrote the CQE of free-running index @idx (its phase is that pass's). */
static bool qpip_nd_cqe_written(struct qpip_nd_cq *cq, u32 idx)
{
	struct qpip_cqe *cqe = qpip_nd_entry(&cq->ring, idx);
	u8 phase = ((idx >> ilog2(cq->ring.depth)) & 1) ^ 1;

	return (READ_ONCE(cqe->owner) & 1) == phase;
}

/* The CQE at the consumer's head if the device wrote it, else NULL. */
static struct qpip_cqe *qpip_nd_cq_peek(struct qpip_nd_cq *cq)
{
	if (!qpip_nd_cqe_written(cq, cq->head))
		return NULL;
	/* The rest of the entry was written before its owner byte. */
	dma_rmb();
	return qpip_nd_entry(&cq->ring, cq->head);
}

/*
 * Gives the consumed CQEs back. Moving the head kicks only if the ring was full before the
 * move, the slot of index old head + depth - 1 written (the engine may sleep waiting for
 * room); our CQs are as deep as the queue feeding them, so that is rare, but the rule is
 * the protocol's.
 */
static void qpip_nd_cq_release(struct qpip_netdev *nd, struct qpip_nd_cq *cq, u32 old_head)
{
	bool was_full;

	if (cq->head == old_head)
		return;
	was_full = qpip_nd_cqe_written(cq, old_head + cq->ring.depth - 1);
	if (qpip_nd_db_ring(&nd->q, QPIP_DB_CQ_BASE + cq->slot * QPIP_DB_CQ_STRIDE + QPIP_DB_CQ_HEAD,
			    cq->head) && was_full)
		qpip_nd_kick(nd);
}

/* Arms @cq: one interrupt for the next CQE beyond the head. Arming needs no kick. */
static void qpip_nd_cq_arm(struct qpip_netdev *nd, struct qpip_nd_cq *cq)
{
	cq->arm_seq = (cq->arm_seq + 1) & QPIP_CQ_ARM_SEQ_MASK;	/* any completion */
	qpip_nd_db_ring(&nd->q, QPIP_DB_CQ_BASE + cq->slot * QPIP_DB_CQ_STRIDE + QPIP_DB_CQ_ARM_SEQ,
			cq->arm_seq);
}

/* ---- transmit ---- */

static u32 qpip_nd_sq_free(struct qpip_nd_queues *q)
{
	return q->sq.depth - (q->sq_tail - READ_ONCE(q->sq_head));
}

/* Free send WQEs that wake a stopped queue (fewer in a shallow SQ, so it ever wakes). */
static u32 qpip_nd_tx_wake(struct qpip_nd_queues *q)
{
	return min_t(u32, QPIP_ND_TX_WAKE, q->sq.depth / 2);
}

static void qpip_nd_tx_unmap(struct qpip_netdev *nd, struct qpip_nd_tx_buf *b)
{
	unsigned int i;

	for (i = 0; i < b->nmaps; i++) {
		if (i == 0)
			dma_unmap_single(qpip_nd_dma(nd), b->dma[i], b->len[i], DMA_TO_DEVICE);
		else
			dma_unmap_page(qpip_nd_dma(nd), b->dma[i], b->len[i], DMA_TO_DEVICE);
	}
	b->nmaps = 0;
}

/* Maps the linear part and the fragments of @skb into @b; -ENOMEM if one did not map. */
static int qpip_nd_tx_map(struct qpip_netdev *nd, struct sk_buff *skb, struct qpip_nd_tx_buf *b)
{
	struct device *dma = qpip_nd_dma(nd);
	unsigned int i;

	b->nmaps = 0;
	b->len[0] = skb_headlen(skb);
	b->dma[0] = dma_map_single(dma, skb->data, b->len[0], DMA_TO_DEVICE);
	if (dma_mapping_error(dma, b->dma[0]))
		return -ENOMEM;
	b->nmaps = 1;
	for (i = 0; i < skb_shinfo(skb)->nr_frags; i++) {
		const skb_frag_t *frag = &skb_shinfo(skb)->frags[i];

		b->len[b->nmaps] = skb_frag_size(frag);
		b->dma[b->nmaps] = skb_frag_dma_map(dma, frag, 0, b->len[b->nmaps], DMA_TO_DEVICE);
		if (dma_mapping_error(dma, b->dma[b->nmaps])) {
			qpip_nd_tx_unmap(nd, b);
			return -ENOMEM;
		}
		b->nmaps++;
	}
	return 0;
}

/* The offload fields of a send WQE (RawTxOffload, little-endian in dest_addr). */
static void qpip_nd_set_offload(struct qpip_wqe *w, u16 csum_start, u16 csum_offset, u16 mss,
				u8 gso_type)
{
	__le16 v;

	memset(w->dest_addr, 0, sizeof(w->dest_addr));
	v = cpu_to_le16(csum_start);
	memcpy(&w->dest_addr[0], &v, 2);
	v = cpu_to_le16(csum_offset);
	memcpy(&w->dest_addr[2], &v, 2);
	v = cpu_to_le16(mss);
	memcpy(&w->dest_addr[4], &v, 2);
	w->dest_addr[6] = gso_type;
}

static void qpip_nd_tx_drop(struct qpip_netdev *nd, struct sk_buff *skb)
{
	atomic64_inc(&nd->tx_dropped);
	dev_kfree_skb_any(skb);
}

netdev_tx_t qpip_nd_xmit(struct sk_buff *skb, struct net_device *dev)
{
	struct qpip_netdev *nd = netdev_priv(dev);
	struct qpip_nd_queues *q = &nd->q;
	struct netdev_queue *txq = netdev_get_tx_queue(dev, 0);
	struct qpip_nd_tx_buf *b;
	struct qpip_wqe *w;
	struct qpip_sge *sge;
	u8 flags = 0, gso_type = 0;
	u16 mss = 0;
	unsigned int i;

	if (unlikely(!READ_ONCE(q->up))) {
		qpip_nd_tx_drop(nd, skb);
		return NETDEV_TX_OK;
	}
	if (unlikely(!qpip_nd_sq_free(q))) {
		/* The queue is stopped when the last slot is taken; this is a race lost. */
		netif_stop_queue(dev);
		return NETDEV_TX_BUSY;
	}
	/* The device refuses runts: pad to the Ethernet minimum (frees the skb on failure). */
	if (skb_put_padto(skb, ETH_ZLEN)) {
		atomic64_inc(&nd->tx_dropped);
		return NETDEV_TX_OK;
	}
	if (skb_shinfo(skb)->nr_frags + 1 > q->max_sge && skb_linearize(skb)) {
		qpip_nd_tx_drop(nd, skb);
		return NETDEV_TX_OK;
	}
	if (skb->ip_summed == CHECKSUM_PARTIAL)
		flags |= QPIP_WQE_FLAG_CSUM;
	if (skb_is_gso(skb)) {
		if (skb_shinfo(skb)->gso_type & SKB_GSO_TCPV4)
			gso_type = QPIP_RAW_GSO_TCPV4;
		else if (skb_shinfo(skb)->gso_type & SKB_GSO_TCPV6)
			gso_type = QPIP_RAW_GSO_TCPV6;
		if (!gso_type || !(flags & QPIP_WQE_FLAG_CSUM)) {
			/* Only TCP TSO is advertised, and it always comes with CHECKSUM_PARTIAL. */
			qpip_nd_tx_drop(nd, skb);
			return NETDEV_TX_OK;
		}
		flags |= QPIP_WQE_FLAG_TSO;
		mss = skb_shinfo(skb)->gso_size;
	}

	b = &q->tx_bufs[q->sq_tail & (q->sq.depth - 1)];
	if (qpip_nd_tx_map(nd, skb, b)) {
		qpip_nd_tx_drop(nd, skb);
		return NETDEV_TX_OK;
	}
	b->skb = skb;

	w = qpip_nd_entry(&q->sq, q->sq_tail);
	memset(w, 0, QPIP_WQE_SIZE);
	w->wr_id = q->sq_tail;
	w->opcode = QPIP_WQE_OP_SEND;
	w->flags = flags;
	w->num_sge = b->nmaps;
	if (flags & QPIP_WQE_FLAG_CSUM)
		qpip_nd_set_offload(w, skb_checksum_start_offset(skb), skb->csum_offset, mss,
				    gso_type);
	sge = (void *)w + QPIP_WQE_SGE_OFFSET;
	for (i = 0; i < b->nmaps; i++) {
		sge[i].addr = b->dma[i];
		sge[i].length = b->len[i];
		sge[i].lkey = QPIP_PHYS_LKEY;
	}
	netdev_tx_sent_queue(txq, skb->len);
	skb_tx_timestamp(skb);
	q->sq_tail++;

	if (unlikely(qpip_nd_sq_free(q) < 1)) {
		atomic64_inc(&nd->tx_stopped);
		netif_stop_queue(dev);
		/* Completions may have freed slots before the stop was visible to NAPI. */
		smp_mb();
		if (qpip_nd_sq_free(q) >= qpip_nd_tx_wake(q))
			netif_start_queue(dev);
	}
	if (!netdev_xmit_more() || netif_xmit_stopped(txq))
		qpip_nd_db_produce(nd, QPIP_DB_QP_BASE + q->qp_slot * QPIP_DB_QP_STRIDE +
				   QPIP_DB_QP_SQ_TAIL, q->sq_tail);
	return NETDEV_TX_OK;
}

/*
 * What the device's TSO cannot do goes back to the stack's software GSO: IP options or
 * IPv6 extension headers, segments under its minimum MSS, or more than 65,535 bytes of IP
 * packet.
 */
netdev_features_t qpip_nd_features_check(struct sk_buff *skb, struct net_device *dev,
					 netdev_features_t features)
{
	if (!skb_is_gso(skb))
		return features;
	if (skb_shinfo(skb)->gso_size < 88 || skb->len - skb_network_offset(skb) > 65535)
		return features & ~NETIF_F_GSO_MASK;
	if (skb->protocol == htons(ETH_P_IP)) {
		if (ip_hdr(skb)->ihl != 5)
			return features & ~NETIF_F_GSO_MASK;
	} else if (skb->protocol == htons(ETH_P_IPV6)) {
		if (ipv6_hdr(skb)->nexthdr != IPPROTO_TCP)
			return features & ~NETIF_F_GSO_MASK;
	} else {
		return features & ~NETIF_F_GSO_MASK;
	}
	return features;
}

/* Send completions: free the skbs, wake the queue. Returns how many were reaped. */
static int qpip_nd_tx_reap(struct qpip_netdev *nd, int budget)
{
	struct qpip_nd_queues *q = &nd->q;
	struct qpip_nd_cq *cq = &q->tx_cq;
	struct netdev_queue *txq = netdev_get_tx_queue(nd->netdev, 0);
	u32 old_head = cq->head, head = q->sq_head;
	unsigned int pkts = 0, bytes = 0, errors = 0;
	u64 ok_bytes = 0, ok_pkts = 0;
	struct qpip_cqe *cqe;

	while ((cqe = qpip_nd_cq_peek(cq))) {
		struct qpip_nd_tx_buf *b = &q->tx_bufs[head & (q->sq.depth - 1)];

		/* Send WQEs complete in order: this CQE is the oldest outstanding one's. */
		if (b->skb) {
			qpip_nd_tx_unmap(nd, b);
			pkts++;
			bytes += b->skb->len;
			if (cqe->status == QPIP_CQE_STATUS_SUCCESS) {
				ok_pkts++;
				ok_bytes += b->skb->len;
			} else {
				errors++;
				net_dbg_ratelimited("%s: send completed with status %u detail %u\n",
						    nd->netdev->name, cqe->status, cqe->detail);
			}
			napi_consume_skb(b->skb, budget);
			b->skb = NULL;
		}
		head++;
		cq->head++;
	}
	qpip_nd_cq_release(nd, cq, old_head);
	if (!pkts)
		return 0;

	u64_stats_update_begin(&nd->tx_stats.syncp);
	nd->tx_stats.packets += ok_pkts;
	nd->tx_stats.bytes += ok_bytes;
	nd->tx_stats.errors += errors;
	u64_stats_update_end(&nd->tx_stats.syncp);

	netdev_tx_completed_queue(txq, pkts, bytes);
	/* Publish the head before looking at the queue state xmit may have just set. */
	smp_store_release(&q->sq_head, head);
	smp_mb();
	if (netif_queue_stopped(nd->netdev) && qpip_nd_sq_free(q) >= qpip_nd_tx_wake(q))
		netif_wake_queue(nd->netdev);
	return pkts;
}

/* ---- receive ---- */

/* A buffer for one frame: an skb of @q->rx_buf_len bytes, mapped. */
static int qpip_nd_rx_alloc_skb(struct qpip_netdev *nd, struct qpip_nd_rx_buf *b, bool in_napi)
{
	struct qpip_nd_queues *q = &nd->q;
	struct device *dma = qpip_nd_dma(nd);
	struct sk_buff *skb;

	skb = in_napi ? napi_alloc_skb(&nd->napi, q->rx_buf_len) :
			netdev_alloc_skb_ip_align(nd->netdev, q->rx_buf_len);
	if (!skb)
		return -ENOMEM;
	b->dma = dma_map_single(dma, skb->data, q->rx_buf_len, DMA_FROM_DEVICE);
	if (dma_mapping_error(dma, b->dma)) {
		dev_kfree_skb_any(skb);
		return -ENOMEM;
	}
	b->skb = skb;
	return 0;
}

/* A mergeable buffer: a page of the pool, mapped whole (by the pool, once). */
static int qpip_nd_rx_alloc_page(struct qpip_netdev *nd, struct qpip_nd_rx_buf *b)
{
	struct page *page = page_pool_dev_alloc_pages(nd->q.rx_pool);

	if (!page)
		return -ENOMEM;
	b->dma = page_pool_get_dma_addr(page);
	b->page = page;
	return 0;
}

/* A mergeable buffer's page back to its pool (@direct: from the NAPI poll). */
static void qpip_nd_rx_put_page(struct qpip_nd_queues *q, struct page *page, bool direct)
{
	page_pool_put_full_page(q->rx_pool, page, direct);
}

/* Posts receive buffers until the RQ is full; false if an allocation failed. */
static bool qpip_nd_rx_refill(struct qpip_netdev *nd, bool in_napi)
{
	struct qpip_nd_queues *q = &nd->q;
	u32 old_tail = q->rq_tail;
	bool ok = true;

	while (q->rq_tail - q->rq_head < q->rq.depth) {
		struct qpip_nd_rx_buf *b = &q->rx_bufs[q->rq_tail & (q->rq.depth - 1)];
		struct qpip_wqe *w;
		struct qpip_sge *sge;
		int ret;

		ret = q->rx_mergeable ? qpip_nd_rx_alloc_page(nd, b) :
					qpip_nd_rx_alloc_skb(nd, b, in_napi);
		if (ret) {
			ok = false;
			break;
		}

		w = qpip_nd_entry(&q->rq, q->rq_tail);
		memset(w, 0, QPIP_WQE_SIZE);
		w->wr_id = q->rq_tail;
		w->opcode = QPIP_WQE_OP_RECV;
		w->num_sge = 1;
		sge = (void *)w + QPIP_WQE_SGE_OFFSET;
		sge->addr = b->dma;
		sge->length = q->rx_buf_len;
		sge->lkey = QPIP_PHYS_LKEY;
		q->rq_tail++;
	}
	if (!ok) {
		u64_stats_update_begin(&nd->rx_stats.syncp);
		nd->rx_stats.alloc_failed++;
		u64_stats_update_end(&nd->rx_stats.syncp);
	}
	if (q->rq_tail != old_tail)
		qpip_nd_db_produce(nd, QPIP_DB_QP_BASE + q->qp_slot * QPIP_DB_QP_STRIDE +
				   QPIP_DB_QP_RQ_TAIL, q->rq_tail);
	return ok;
}

/* Receive completions, one frame per buffer: at most @budget frames to the stack. */
static int qpip_nd_rx_reap_frames(struct qpip_netdev *nd, int budget)
{
	struct qpip_nd_queues *q = &nd->q;
	struct qpip_nd_cq *cq = &q->rx_cq;
	u32 old_head = cq->head;
	u64 pkts = 0, bytes = 0, errors = 0, csum_ok = 0, too_long = 0;
	struct qpip_cqe *cqe;

	while (pkts + errors < budget && (cqe = qpip_nd_cq_peek(cq))) {
		struct qpip_nd_rx_buf *b = &q->rx_bufs[q->rq_head & (q->rq.depth - 1)];
		struct sk_buff *skb = b->skb;
		u32 len = cqe->byte_len;

		/* Receive WQEs complete in order too. */
		dma_unmap_single(qpip_nd_dma(nd), b->dma, q->rx_buf_len, DMA_FROM_DEVICE);
		b->skb = NULL;
		q->rq_head++;
		cq->head++;
		if (cqe->status != QPIP_CQE_STATUS_SUCCESS || len < ETH_HLEN ||
		    len > q->rx_buf_len) {
			errors++;
			if (cqe->status == QPIP_CQE_STATUS_LOCAL_LENGTH)
				too_long++;
			dev_kfree_skb_any(skb);
			continue;
		}
		skb_put(skb, len);
		skb->protocol = eth_type_trans(skb, nd->netdev);
		if ((cqe->imm_data & QPIP_CQE_RAW_RX_CSUM_OK) &&
		    (nd->netdev->features & NETIF_F_RXCSUM)) {
			skb->ip_summed = CHECKSUM_UNNECESSARY;
			csum_ok++;
		}
		pkts++;
		bytes += len;
		napi_gro_receive(&nd->napi, skb);
	}
	qpip_nd_cq_release(nd, cq, old_head);
	if (pkts || errors) {
		u64_stats_update_begin(&nd->rx_stats.syncp);
		nd->rx_stats.packets += pkts;
		nd->rx_stats.bytes += bytes;
		nd->rx_stats.errors += errors;
		nd->rx_stats.csum_ok += csum_ok;
		nd->rx_stats.too_long += too_long;
		u64_stats_update_end(&nd->rx_stats.syncp);
	}
	return pkts + errors;
}

/* ---- receive, mergeable buffers ---- */

/*
 * Bytes of a frame's first piece copied into the skb's linear part: the Ethernet, IP and
 * TCP headers of the usual frame (virtio-net's GOOD_COPY_LEN); the rest stays in the page.
 */
#define QPIP_ND_RX_COPY		128

/* What one NAPI poll of the mergeable receive path counted, added to rx_stats at its end. */
struct qpip_nd_rx_counts {
	u64 frames, bytes, errors, csum_ok, too_long, alloc_failed, merged, gso, too_many_frags,
	    copied;
};

/* The frame being assembled is dropped; the rest of its pieces will be too. */
static void qpip_nd_rx_discard(struct qpip_nd_queues *q)
{
	if (q->rx_skb)
		dev_kfree_skb_any(q->rx_skb);
	q->rx_skb = NULL;
	q->rx_discard = true;
}

/*
 * Adds a piece of @len bytes in @page to the frame being assembled, or starts it: the
 * first piece's headers are copied into a new skb, every other byte stays in its page as a
 * fragment. Takes the page reference either way.
 */
static void qpip_nd_rx_add_piece(struct qpip_netdev *nd, struct page *page, u32 len,
				 struct qpip_nd_rx_counts *c)
{
	struct qpip_nd_queues *q = &nd->q;
	struct sk_buff *skb = q->rx_skb;
	u32 copy = 0;

	if (!skb) {
		skb = napi_alloc_skb(&nd->napi, QPIP_ND_RX_COPY);
		if (!skb) {
			c->alloc_failed++;
			c->errors++;
			qpip_nd_rx_discard(q);
			qpip_nd_rx_put_page(q, page, true);
			return;
		}
		/* Its fragments' pages go back to the pool when the stack frees it. */
		skb_mark_for_recycle(skb);
		copy = min_t(u32, len, QPIP_ND_RX_COPY);
		skb_put_data(skb, page_address(page), copy);
		q->rx_skb = skb;
	}
	if (copy == len) {
		c->copied++;
		qpip_nd_rx_put_page(q, page, true);
		return;
	}
	if (skb_shinfo(skb)->nr_frags >= MAX_SKB_FRAGS) {
		c->too_many_frags++;
		c->errors++;
		qpip_nd_rx_discard(q);
		qpip_nd_rx_put_page(q, page, true);
		return;
	}
	skb_add_rx_frag(skb, skb_shinfo(skb)->nr_frags, page, copy, len - copy, PAGE_SIZE);
}

/*
 * The frame's last piece arrived (@cqe): checksum state and, for a TCP super-frame, the
 * GSO fields the stack needs to treat it as the segments it stands for (set as
 * virtio_net_hdr_to_skb does: SKB_GSO_DODGY, gso_segs left to the stack).
 */
static void qpip_nd_rx_deliver(struct qpip_netdev *nd, struct sk_buff *skb,
			       const struct qpip_cqe *cqe, struct qpip_nd_rx_counts *c)
{
	u32 gso = cqe->imm_data & (QPIP_CQE_RAW_RX_GSO_TCPV4 | QPIP_CQE_RAW_RX_GSO_TCPV6);
	bool csum_ok = (cqe->imm_data & QPIP_CQE_RAW_RX_CSUM_OK) &&
		       (nd->netdev->features & NETIF_F_RXCSUM);
	u32 len = skb->len;

	/*
	 * Too short for Ethernet, or a super-frame the stack could not trust: its checksums
	 * are the device's to check (a segment size of 0 or an unchecked one is the device's
	 * mistake, and RX checksumming off takes GRO_HW and this mode with it).
	 */
	if (!pskb_may_pull(skb, ETH_HLEN) || (gso && (!cqe->src_port || !csum_ok))) {
		c->errors++;
		dev_kfree_skb_any(skb);
		return;
	}
	skb->protocol = eth_type_trans(skb, nd->netdev);
	if (csum_ok) {
		skb->ip_summed = CHECKSUM_UNNECESSARY;
		c->csum_ok++;
	}
	if (gso) {
		skb_shinfo(skb)->gso_size = cqe->src_port;
		skb_shinfo(skb)->gso_type = (gso & QPIP_CQE_RAW_RX_GSO_TCPV4) ? SKB_GSO_TCPV4 :
										SKB_GSO_TCPV6;
		skb_shinfo(skb)->gso_type |= SKB_GSO_DODGY;
		skb_shinfo(skb)->gso_segs = 0;
		c->gso++;
	}
	c->frames++;
	c->bytes += len;
	napi_gro_receive(&nd->napi, skb);
}

/*
 * Receive completions of mergeable buffers: at most @budget frames, however many pieces.
 * A frame whose pieces are not all in yet stays in @q->rx_skb for the next poll.
 */
static int qpip_nd_rx_reap_mergeable(struct qpip_netdev *nd, int budget)
{
	struct qpip_nd_queues *q = &nd->q;
	struct qpip_nd_cq *cq = &q->rx_cq;
	struct qpip_nd_rx_counts c = {};
	u32 old_head = cq->head;
	struct qpip_cqe *cqe;
	int done = 0;

	while (done < budget && (cqe = qpip_nd_cq_peek(cq))) {
		struct qpip_nd_rx_buf *b = &q->rx_bufs[q->rq_head & (q->rq.depth - 1)];
		struct page *page = b->page;
		u32 len = cqe->byte_len;

		b->page = NULL;
		q->rq_head++;
		cq->head++;
		q->rx_pieces++;
		if (cqe->status != QPIP_CQE_STATUS_SUCCESS || len > PAGE_SIZE) {
			/* A frame with a piece lost is lost (FLUSHED at stop, LOCAL_LENGTH). */
			if (!q->rx_discard) {
				c.errors++;
				if (cqe->status == QPIP_CQE_STATUS_LOCAL_LENGTH)
					c.too_long++;
				qpip_nd_rx_discard(q);
			}
			qpip_nd_rx_put_page(q, page, true);
		} else if (q->rx_discard) {
			qpip_nd_rx_put_page(q, page, true);
		} else {
			dma_sync_single_for_cpu(qpip_nd_dma(nd), b->dma, len, DMA_FROM_DEVICE);
			qpip_nd_rx_add_piece(nd, page, len, &c);
		}
		if (cqe->imm_data & QPIP_CQE_RAW_RX_MORE)
			continue;

		/* The frame's last piece. */
		done++;
		if (!q->rx_discard) {
			if (q->rx_pieces > 1)
				c.merged++;
			qpip_nd_rx_deliver(nd, q->rx_skb, cqe, &c);
		}
		q->rx_skb = NULL;
		q->rx_discard = false;
		q->rx_pieces = 0;
	}
	qpip_nd_cq_release(nd, cq, old_head);
	if (cq->head != old_head) {
		u64_stats_update_begin(&nd->rx_stats.syncp);
		nd->rx_stats.packets += c.frames;
		nd->rx_stats.bytes += c.bytes;
		nd->rx_stats.errors += c.errors;
		nd->rx_stats.csum_ok += c.csum_ok;
		nd->rx_stats.too_long += c.too_long;
		nd->rx_stats.alloc_failed += c.alloc_failed;
		nd->rx_stats.merged += c.merged;
		nd->rx_stats.gso += c.gso;
		nd->rx_stats.too_many_frags += c.too_many_frags;
		nd->rx_stats.copied += c.copied;
		u64_stats_update_end(&nd->rx_stats.syncp);
	}
	return done;
}

int qpip_nd_poll(struct napi_struct *napi, int budget)
{
	struct qpip_netdev *nd = container_of(napi, struct qpip_netdev, napi);
	struct qpip_nd_queues *q = &nd->q;
	int done;

	qpip_nd_tx_reap(nd, budget);
	done = q->rx_mergeable ? qpip_nd_rx_reap_mergeable(nd, budget) :
				 qpip_nd_rx_reap_frames(nd, budget);
	/* Out of memory: stay in polling and try again rather than leave the RQ empty. */
	if (!qpip_nd_rx_refill(nd, true) && q->rq_tail == q->rq_head)
		return budget;
	if (done < budget && napi_complete_done(napi, done)) {
		qpip_nd_cq_arm(nd, &q->tx_cq);
		qpip_nd_cq_arm(nd, &q->rx_cq);
		/* A CQE written before the device saw the arm raises nothing: look once more. */
		if (qpip_nd_cq_peek(&q->tx_cq) || qpip_nd_cq_peek(&q->rx_cq))
			napi_schedule(napi);
	}
	return min(done, budget);
}

/* The completion vector fired (interrupt context): the CQs are disarmed until NAPI re-arms. */
void qpip_netdev_irq(struct qpip_netdev *nd)
{
	atomic64_inc(&nd->irqs);
	napi_schedule_irqoff(&nd->napi);
}

/* ---- creating and destroying the queues ---- */

static void qpip_nd_bufs_free(struct qpip_netdev *nd)
{
	struct qpip_nd_queues *q = &nd->q;
	struct device *dma = qpip_nd_dma(nd);
	unsigned int i;

	for (i = 0; q->tx_bufs && i < q->sq.depth; i++) {
		if (q->tx_bufs[i].skb) {
			qpip_nd_tx_unmap(nd, &q->tx_bufs[i]);
			dev_kfree_skb_any(q->tx_bufs[i].skb);
			q->tx_bufs[i].skb = NULL;
		}
	}
	for (i = 0; q->rx_bufs && i < q->rq.depth; i++) {
		if (q->rx_bufs[i].skb) {
			dma_unmap_single(dma, q->rx_bufs[i].dma, q->rx_buf_len, DMA_FROM_DEVICE);
			dev_kfree_skb_any(q->rx_bufs[i].skb);
			q->rx_bufs[i].skb = NULL;
		}
		if (q->rx_bufs[i].page) {
			qpip_nd_rx_put_page(q, q->rx_bufs[i].page, false);
			q->rx_bufs[i].page = NULL;
		}
	}
	if (q->rx_skb)
		dev_kfree_skb_any(q->rx_skb);
	q->rx_skb = NULL;
	kfree(q->tx_bufs);
	kfree(q->rx_bufs);
	q->tx_bufs = NULL;
	q->rx_bufs = NULL;
}

/*
 * The pool of mergeable receive pages: as many as the RQ holds, mapped for the device by
 * the pool and synced for it when given out again. Not tied to the NAPI instance: pages the
 * stack frees elsewhere come back through the pool's ring, the receive path's own directly.
 */
static struct page_pool *qpip_nd_pool_create(struct qpip_netdev *nd, u32 rq_depth)
{
	struct page_pool_params pp = {
		.flags = PP_FLAG_DMA_MAP | PP_FLAG_DMA_SYNC_DEV,
		.order = 0,
		.pool_size = rq_depth,
		.nid = NUMA_NO_NODE,
		.dev = qpip_nd_dma(nd),
		.dma_dir = DMA_FROM_DEVICE,
		.offset = 0,
		.max_len = PAGE_SIZE,
	};

	return page_pool_create(&pp);
}

/* Frees the memory of the queues; the device no longer uses it. */
static void qpip_nd_mem_free(struct qpip_netdev *nd)
{
	struct qpip_nd_queues *q = &nd->q;

	qpip_nd_bufs_free(nd);
	/* Pages the stack still holds come back to the pool and are freed with it then. */
	if (q->rx_pool)
		page_pool_destroy(q->rx_pool);
	q->rx_pool = NULL;
	qpip_nd_ring_free(nd, &q->sq);
	qpip_nd_ring_free(nd, &q->rq);
	qpip_nd_ring_free(nd, &q->tx_cq.ring);
	qpip_nd_ring_free(nd, &q->rx_cq.ring);
	if (q->db)
		dma_free_coherent(qpip_nd_dma(nd), PAGE_SIZE, q->db, q->db_dma);
	q->db = NULL;
}

/*
 * The memory the device may use: the doorbell page, the four rings, the buffer records.
 * Depths are the defaults clamped to the device's deepest queue.
 */
static int qpip_nd_mem_alloc(struct qpip_netdev *nd)
{
	struct qpip_nd_queues *q = &nd->q;
	u32 max = rounddown_pow_of_two(max_t(u32, nd->qdev->info.max_queue_depth, 2));
	u32 sq_depth = min_t(u32, QPIP_ND_SQ_DEPTH, max);
	u32 rq_depth = min_t(u32, QPIP_ND_RQ_DEPTH, max);

	memset(q, 0, sizeof(*q));
	q->db = dma_alloc_coherent(qpip_nd_dma(nd), PAGE_SIZE, &q->db_dma, GFP_KERNEL);
	if (!q->db)
		goto err;
	/* Each CQ as deep as the queue feeding it: it can never be full. */
	if (qpip_nd_ring_alloc(nd, &q->sq, sq_depth, QPIP_WQE_SIZE) ||
	    qpip_nd_ring_alloc(nd, &q->rq, rq_depth, QPIP_WQE_SIZE) ||
	    qpip_nd_ring_alloc(nd, &q->tx_cq.ring, sq_depth, QPIP_CQE_SIZE) ||
	    qpip_nd_ring_alloc(nd, &q->rx_cq.ring, rq_depth, QPIP_CQE_SIZE))
		goto err;
	q->tx_bufs = kcalloc(sq_depth, sizeof(*q->tx_bufs), GFP_KERNEL);
	q->rx_bufs = kcalloc(rq_depth, sizeof(*q->rx_bufs), GFP_KERNEL);
	if (!q->tx_bufs || !q->rx_bufs)
		goto err;
	q->rx_pool = qpip_nd_pool_create(nd, rq_depth);
	if (IS_ERR(q->rx_pool)) {
		q->rx_pool = NULL;
		goto err;
	}
	q->max_sge = clamp_t(u32, nd->qdev->info.max_sge, 1, QPIP_MAX_SGE);
	return 0;
err:
	qpip_nd_mem_free(nd);
	return -ENOMEM;
}

/* The device objects: a kernel context, two CQs on @q->vec, the raw QP. Under qdev->lock. */
static int qpip_nd_create(struct qpip_netdev *nd)
{
	struct qpip_nd_queues *q = &nd->q;
	struct qpip_dev *qdev = nd->qdev;
	struct qpip_cq_params cqp = { .vector = q->vec->index };
	struct qpip_qp_params qpp = { .qp_type = QPIP_QP_TYPE_RAW_ETH };
	struct qpip_cq_result cqr;
	struct qpip_qp_result qpr;
	int ret;

	ret = qpip_cmd_create_ctx(qdev, q->db_dma, QPIP_CTX_FLAG_KERNEL, &q->ctx);
	if (ret) {
		netdev_err(nd->netdev, "the device refused a kernel context: %pe\n",
			   ERR_PTR(ret));
		return ret;
	}
	q->generation = qdev->generation;

	qpip_nd_ring_params(&q->tx_cq.ring, &cqp.ring);
	ret = qpip_cmd_create_cq(qdev, q->ctx, &cqp, &cqr);
	if (ret)
		goto err;
	q->tx_cq.handle = cqr.handle;
	q->tx_cq.slot = cqr.db_slot;
	qpip_nd_ring_params(&q->rx_cq.ring, &cqp.ring);
	ret = qpip_cmd_create_cq(qdev, q->ctx, &cqp, &cqr);
	if (ret)
		goto err;
	q->rx_cq.handle = cqr.handle;
	q->rx_cq.slot = cqr.db_slot;

	qpip_nd_ring_params(&q->sq, &qpp.sq);
	qpip_nd_ring_params(&q->rq, &qpp.rq);
	qpp.send_cq = q->tx_cq.handle;
	qpp.recv_cq = q->rx_cq.handle;
	/*
	 * Mergeable receive buffers while GRO_HW is on (it is what lets super-frames through
	 * whole). A device older than them refuses the framing (BAD_PARAM): one frame per
	 * buffer then, super-frames cut to the MTU by the device.
	 */
	q->rx_mergeable = nd->netdev->features & NETIF_F_GRO_HW;
	if (q->rx_mergeable) {
		qpp.framing = QPIP_RAW_RX_MERGEABLE;
		ret = qpip_cmd_create_qp(qdev, q->ctx, &qpp, &qpr);
		if (ret == -EINVAL) {
			netdev_info(nd->netdev, "the device has no mergeable receive buffers: one frame per buffer\n");
			q->rx_mergeable = false;
		}
	}
	if (!q->rx_mergeable) {
		qpp.framing = 0;
		ret = qpip_cmd_create_qp(qdev, q->ctx, &qpp, &qpr);
	}
	if (ret) {
		netdev_err(nd->netdev,
			   "the device refused a raw Ethernet QP (%pe; device interface %u.%u): the link stays down\n",
			   ERR_PTR(ret), qpip_version_major(qdev->version),
			   qpip_version_minor(qdev->version));
		goto err;
	}
	q->qp = qpr.handle;
	q->qp_slot = qpr.db_slot;
	q->rx_buf_len = q->rx_mergeable ? PAGE_SIZE : nd->netdev->mtu + ETH_HLEN;
	if (q->qp_slot >= QPIP_DB_QP_SLOTS || q->tx_cq.slot >= QPIP_DB_CQ_SLOTS ||
	    q->rx_cq.slot >= QPIP_DB_CQ_SLOTS) {
		ret = -EIO;
		goto err;
	}
	return 0;
err:
	/* Everything created so far goes with the context. */
	if (qpip_cmd_destroy_ctx(qdev, q->ctx))
		return -ETIMEDOUT;	/* the device may still use the memory */
	return ret;
}

/*
 * Brings the queues up (rtnl held): memory, device objects, NAPI and the vector, a full
 * RQ, armed CQs. On failure nothing is left, but memory the device may still use.
 */
int qpip_nd_queues_up(struct qpip_netdev *nd)
{
	struct qpip_nd_queues *q = &nd->q;
	struct qpip_dev *qdev = nd->qdev;
	struct qpip_vector *vec;
	int ret;

	ret = qpip_nd_mem_alloc(nd);
	if (ret)
		return ret;
	down_read(&qdev->lock);
	if (qdev->unbound) {
		ret = -ENODEV;
	} else {
		vec = qpip_pick_vector(qdev, QPIP_ANY_VECTOR);
		ret = IS_ERR(vec) ? PTR_ERR(vec) : 0;
		if (ret)
			netdev_err(nd->netdev, "no completion vector for the interface: %pe\n",
				   vec);
	}
	if (!ret) {
		q->vec = vec;
		ret = qpip_nd_create(nd);
	}
	up_read(&qdev->lock);
	if (ret) {
		if (ret == -ETIMEDOUT)
			netdev_err(nd->netdev, "device did not destroy the interface's queues; keeping their memory\n");
		else
			qpip_nd_mem_free(nd);
		memset(q, 0, sizeof(*q));
		return ret;
	}

	/*
	 * Fill the RQ before NAPI can run: once the vector is hooked, an interrupt of another
	 * CQ on it schedules NAPI too. The first poll arms the CQs; only NAPI touches the
	 * receive ring and the CQ doorbells from then on.
	 */
	qpip_nd_rx_refill(nd, false);
	napi_enable(&nd->napi);
	WRITE_ONCE(q->up, true);
	qpip_vector_set_netdev(q->vec, nd);
	local_bh_disable();
	napi_schedule(&nd->napi);
	local_bh_enable();
	return 0;
}

/*
 * Takes the queues down (rtnl held, transmit stopped): no interrupt, no NAPI, the device
 * objects destroyed (unless a reset already made the device forget them), the memory freed.
 */
void qpip_nd_queues_down(struct qpip_netdev *nd)
{
	struct qpip_nd_queues *q = &nd->q;
	struct qpip_dev *qdev = nd->qdev;
	bool leak = false;
	int ret;

	if (!q->up)
		return;
	WRITE_ONCE(q->up, false);
	qpip_vector_set_netdev(q->vec, NULL);
	napi_disable(&nd->napi);

	down_read(&qdev->lock);
	if (!qdev->unbound && q->generation == qdev->generation) {
		ret = qpip_cmd_destroy_ctx(qdev, q->ctx);
		if (ret) {
			netdev_err(nd->netdev, "the device did not destroy the interface's context (%pe); keeping its memory\n",
				   ERR_PTR(ret));
			leak = true;
		}
	}
	up_read(&qdev->lock);
	if (!leak)
		qpip_nd_mem_free(nd);
	netdev_reset_queue(nd->netdev);
	memset(q, 0, sizeof(*q));
}
