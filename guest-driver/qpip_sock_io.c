// SPDX-License-Identifier: GPL-2.0
/*
 * qpip: a qpip socket's data path.
 *
 * Receive: QPIP_SOCK_RX_SLOTS pages, each the buffer of one receive WR, all kept posted; the
 * device places the stream into them in order (stream framing: a WR completes when full or
 * at a pushed segment), so the RQ's WR i is slot i % QPIP_SOCK_RX_SLOTS and completions come
 * in that order. A read copies out of the completed slots and posts each slot again once it
 * is read whole: the posted space is the window the device advertises, so reading is what
 * opens it, as for a kernel socket's receive buffer.
 *
 * Send: a ring of QPIP_SOCK_TX_BYTES; a write copies into it and posts send WRs over what
 * it copied (two SGEs where it wraps). A send WR completes when the peer acknowledged its
 * last byte, and its wr_id is its end in the ring, so completions free the ring up to
 * there: the ring is the socket's send buffer, unacknowledged bytes included, and a write
 * returns once its bytes are in it, as send(2) does. TCP_CORK (and MSG_MORE) hold the
 * bytes back until a chunk is full or the cork comes off.
 *
 * Completions of both share one CQ. Nobody polls it behind the program's back: a read, a
 * write, poll or a wait takes what is there, and arms the CQ before sleeping so that the
 * next completion interrupts (qpip_sock_wait).
 */
#include <linux/sched/signal.h>
#include <linux/socket.h>
#include <linux/uio.h>
#include <net/sock.h>
#include <net/tcp.h>

#include "qpip_sock.h"

static_assert(!(QPIP_SOCK_RX_SLOTS & (QPIP_SOCK_RX_SLOTS - 1)));
static_assert(!(QPIP_SOCK_TX_BYTES & (QPIP_SOCK_TX_BYTES - 1)));
static_assert(!(QPIP_SOCK_SQ_DEPTH & (QPIP_SOCK_SQ_DEPTH - 1)));
static_assert(PAGE_SIZE <= U16_MAX);

/* ---- the doorbell page and the rings ---- */

static u32 *qpip_sock_db(struct qpip_sock *sk, u32 off)
{
	return (u32 *)page_address(sk->ctx->db->pages[0]) + off / 4;
}

/*
 * The producer side of the doorbell protocol (abi/src/doorbell.rs): stores @value at @off
 * after the entries written before it, bumps the page's change counter (a fully ordered
 * read-modify-write: the barrier before reading the sleeping flag) and, if @kick and the
 * engine sleeps, wakes it. Device entered (qpip_sock_device).
 */
void qpip_sock_ring(struct qpip_sock *sk, u32 off, u32 value, bool kick)
{
	dma_wmb();
	WRITE_ONCE(*qpip_sock_db(sk, off), value);
	atomic_add_return(1, (atomic_t *)qpip_sock_db(sk, QPIP_DB_CHANGE_COUNT));
	if (kick && READ_ONCE(*qpip_sock_db(sk, QPIP_DB_ENGINE_SLEEPING)))
		qpip_wr(sk->ctx->qdev, QPIP_KICK_PAGE_OFFSET + QPIP_KICK, 1);
}


struct qpip_wqe *qpip_sock_wqe(struct qpip_ring *r, u32 depth, u32 idx)
{
	struct qpip_wqe *w = qpip_ring_entry(r, depth, QPIP_WQE_SIZE, idx);

	memset(w, 0, QPIP_WQE_SIZE);
	return w;
}

struct qpip_sge *qpip_wqe_sge(struct qpip_wqe *w, unsigned int i)
{
	return (struct qpip_sge *)((u8 *)w + QPIP_WQE_SGE_OFFSET) + i;
}

/* ---- receive ---- */

/*
 * Tells the device the RQ's new tail (a TCP or UDP socket's receive WRs just written), with
 * a kick if it sleeps: false if the device no longer has the socket's context.
 */
bool qpip_sock_rq_doorbell(struct qpip_sock *sk)
{
	if (!qpip_sock_device(sk))
		return false;
	qpip_sock_ring(sk, QPIP_DB_QP_BASE + sk->qp_slot * QPIP_DB_QP_STRIDE + QPIP_DB_QP_RQ_TAIL,
		       sk->rq_tail, true);
	qpip_sock_device_end(sk);
	return true;
}

/* Writes the receive WR of RQ index @idx (its slot's page). */
static void qpip_sock_rx_wqe(struct qpip_sock *sk, u32 idx)
{
	struct qpip_wqe *w = qpip_sock_wqe(sk->qp->rq, QPIP_SOCK_RX_SLOTS, idx);
	u32 slot = idx % QPIP_SOCK_RX_SLOTS;
	struct qpip_sge *sge = qpip_wqe_sge(w, 0);

	w->wr_id = slot;
	w->opcode = QPIP_WQE_OP_RECV;
	w->num_sge = 1;
	sge->addr = QPIP_SOCK_IOVA + (u64)slot * PAGE_SIZE;
	sge->length = PAGE_SIZE;
	sge->lkey = sk->lkey;
}

/* Posts every slot once: a new socket's receive space. */
int qpip_sock_io_init(struct qpip_sock *sk)
{
	for (sk->rq_tail = 0; sk->rq_tail < QPIP_SOCK_RX_SLOTS; sk->rq_tail++)
		qpip_sock_rx_wqe(sk, sk->rq_tail);
	return qpip_sock_rq_doorbell(sk) ? 0 : -ENODEV;
}

/* Posts the slots read whole since the last time (a TCP receive kicks: it opens the window). */
static void qpip_sock_rx_refill(struct qpip_sock *sk)
{
	u32 want = sk->rx_read + QPIP_SOCK_RX_SLOTS;

	if (sk->rx_eof || sk->rd_shut || sk->rq_tail == want || !sk->qp_made)
		return;
	while (sk->rq_tail != want)
		qpip_sock_rx_wqe(sk, sk->rq_tail++);
	qpip_sock_rq_doorbell(sk);
}

/* ---- completions ---- */

static bool qpip_sock_cqe_written(struct qpip_sock *sk, u32 idx)
{
	return qpip_cqe_written(sk->cq->ring, sk->cq_depth, idx);
}

/*
 * A completion of the QP in error: the connection is over; why comes as an event. Not
 * while connecting: a refused or timed-out connect flushes the WRs too, and its own
 * completion says which it was.
 */
static void qpip_sock_flushed(struct qpip_sock *sk)
{
	if (sk->state == QPIP_SOCK_CONNECTED) {
		sk->state = QPIP_SOCK_CLOSED;
		if (!sk->err)
			sk->err = -ECONNRESET;
	}
}

static void qpip_sock_cqe(struct qpip_sock *sk, const struct qpip_cqe *e)
{
	u32 slot;

	if (sk->udp) {
		qpip_udp_cqe(sk, e);
		return;
	}
	if (e->opcode == QPIP_CQE_OP_SEND) {
		/*
		 * In order: the wr_id of the last one acknowledged is the ring's new head. Never
		 * beyond what was posted: the CQ is mapped into the process with the fast path,
		 * and a head past the tail would make the free space larger than the ring.
		 */
		if ((u32)e->wr_id - sk->tx_head > sk->tx_posted - sk->tx_head ||
		    sk->sq_head == sk->sq_tail) {
			qpip_sock_flushed(sk);
			return;
		}
		sk->sq_head++;
		sk->tx_head = (u32)e->wr_id;
		if (e->status != QPIP_CQE_STATUS_SUCCESS)
			qpip_sock_flushed(sk);
		return;
	}
	if (e->opcode != QPIP_CQE_OP_RECV)
		return;
	slot = sk->rx_done % QPIP_SOCK_RX_SLOTS;
	if (e->status != QPIP_CQE_STATUS_SUCCESS || e->wr_id != slot ||
	    e->byte_len > PAGE_SIZE) {
		qpip_sock_flushed(sk);
		return;
	}
	/*
	 * Empty only after the peer's FIN, when every WR still posted completes: every byte
	 * came in earlier slots. The slot is read past like any other.
	 */
	if (!e->byte_len)
		sk->rx_eof = true;
	sk->rx_len[slot] = e->byte_len;
	sk->rx_done++;
	sk->rx_avail += e->byte_len;
}

/*
 * Takes every completion the device wrote (mutex held) and gives the ring back. Moving
 * the head kicks only if the ring was full before (abi/src/doorbell.rs).
 */
void qpip_sock_reap(struct qpip_sock *sk)
{
	u32 old = sk->cq_head;
	bool was_full;

	if (!sk->cq_made)
		return;
	while (qpip_sock_cqe_written(sk, sk->cq_head)) {
		struct qpip_cqe *e = qpip_ring_entry(sk->cq->ring, sk->cq_depth, QPIP_CQE_SIZE,
						     sk->cq_head);

		dma_rmb();	/* the entry was written before its owner byte */
		qpip_sock_cqe(sk, e);
		sk->cq_head++;
	}
	if (sk->cq_head == old)
		goto eof;
	was_full = qpip_sock_cqe_written(sk, old + sk->cq_depth - 1);
	if (qpip_sock_device(sk)) {
		qpip_sock_ring(sk, QPIP_DB_CQ_BASE + sk->cq->slot * QPIP_DB_CQ_STRIDE +
			       QPIP_DB_CQ_HEAD, sk->cq_head, was_full);
		qpip_sock_device_end(sk);
	}
eof:
	/* The device announces the peer's FIN after every completion before it. */
	if (sk->peer_closed && !sk->rx_avail)
		sk->rx_eof = true;
}

/*
 * Keeps the CQ armed while anyone listens (mutex held): an epoll set holds an entry on the
 * socket's wait queue for as long as the socket is in it, and an edge-triggered one hears
 * of new bytes only from the wake-up their interrupt brings — also after a call that
 * left bytes unread, or a write. A program that only reads and writes, blocking, has no
 * entry there between calls and takes no interrupt it does not wait for.
 */
void qpip_sock_rearm(struct qpip_sock *sk)
{
	if (sk->state == QPIP_SOCK_CONNECTED && !sk->dead && waitqueue_active(&sk->wait))
		qpip_sock_arm(sk);
}

/*
 * The next arm value: the sequence moved on, and solicited-only (the next receive or
 * error) unless someone waits for the send side (tx_waiters, tx_wanted). A reader then
 * takes no interrupt for the peer's acknowledgements of what it sent, as Linux wakes a
 * socket's writers only when it ran out of room (SOCK_NOSPACE).
 */
u32 qpip_sock_next_arm(u32 seq, bool sends)
{
	return ((seq + 1) & QPIP_CQ_ARM_SEQ_MASK) | (sends ? 0 : QPIP_CQ_ARM_SOLICITED);
}

bool qpip_sock_tx_needed(struct qpip_sock *sk)
{
	return sk->tx_waiters || sk->tx_wanted;
}

/* Arms the CQ: one interrupt for the next completion it is armed for. No kick needed. */
void qpip_sock_arm(struct qpip_sock *sk)
{
	if (!sk->cq_made || !qpip_sock_device(sk))
		return;
	sk->cq_arm_seq = qpip_sock_next_arm(sk->cq_arm_seq, qpip_sock_tx_needed(sk));
	qpip_sock_ring(sk, QPIP_DB_CQ_BASE + sk->cq->slot * QPIP_DB_CQ_STRIDE + QPIP_DB_CQ_ARM_SEQ,
		       sk->cq_arm_seq, false);
	qpip_sock_device_end(sk);
}

/* ---- send ---- */

static u32 qpip_sock_tx_free(struct qpip_sock *sk)
{
	return QPIP_SOCK_TX_BYTES - (sk->tx_tail - sk->tx_head);
}

/* Every byte written was acknowledged. */
bool qpip_sock_tx_idle(struct qpip_sock *sk)
{
	return sk->tx_head == sk->tx_tail;
}

static bool qpip_sock_corked(struct qpip_sock *sk)
{
	return sk->tx_corked ||
	       (sk->ksock && (tcp_sk(sk->ksock->sk)->nonagle & TCP_NAGLE_CORK));
}

/*
 * Posts send WRs over the bytes copied and not posted yet (mutex held), in chunks of at
 * most QPIP_SOCK_TX_CHUNK, while the SQ has room. Corked, only whole chunks go, unless
 * @force.
 */
int qpip_sock_tx_push(struct qpip_sock *sk, bool force)
{
	bool corked = !force && qpip_sock_corked(sk);
	u32 first = sk->sq_tail;

	while (sk->tx_posted != sk->tx_tail &&
	       sk->sq_tail - sk->sq_head < QPIP_SOCK_SQ_DEPTH) {
		u32 len = min_t(u32, sk->tx_tail - sk->tx_posted, QPIP_SOCK_TX_CHUNK);
		u32 off = sk->tx_posted % QPIP_SOCK_TX_BYTES;
		u32 first_len = min_t(u32, len, QPIP_SOCK_TX_BYTES - off);
		struct qpip_wqe *w;
		struct qpip_sge *sge;

		if (corked && len < QPIP_SOCK_TX_CHUNK)
			break;
		w = qpip_sock_wqe(sk->qp->sq, QPIP_SOCK_SQ_DEPTH, sk->sq_tail);
		w->opcode = QPIP_WQE_OP_SEND;
		w->num_sge = first_len < len ? 2 : 1;
		sge = qpip_wqe_sge(w, 0);
		sge->addr = QPIP_SOCK_IOVA + QPIP_SOCK_RX_BYTES + off;
		sge->length = first_len;
		sge->lkey = sk->lkey;
		if (first_len < len) {
			sge = qpip_wqe_sge(w, 1);
			sge->addr = QPIP_SOCK_IOVA + QPIP_SOCK_RX_BYTES;
			sge->length = len - first_len;
			sge->lkey = sk->lkey;
		}
		sk->tx_posted += len;
		w->wr_id = sk->tx_posted;
		sk->sq_tail++;
	}
	if (sk->sq_tail == first)
		return 0;
	if (!qpip_sock_device(sk))
		return -ECONNRESET;
	qpip_sock_ring(sk, QPIP_DB_QP_BASE + sk->qp_slot * QPIP_DB_QP_STRIDE + QPIP_DB_QP_SQ_TAIL,
		       sk->sq_tail, true);
	qpip_sock_device_end(sk);
	return 0;
}

static bool qpip_sock_writable(struct qpip_sock *sk)
{
	return sk->state != QPIP_SOCK_CONNECTING && qpip_sock_tx_free(sk) > 0;
}

/* A send error as send(2) gives it: a pending error first, then EPIPE (with SIGPIPE). */
static ssize_t qpip_sock_send_error(struct qpip_sock *sk, unsigned int flags)
{
	int err = sk->err;

	if (err && err != -EPIPE) {
		sk->err = 0;
		return err;
	}
	if (!(flags & MSG_NOSIGNAL))
		send_sig(SIGPIPE, current, 0);
	return -EPIPE;
}

/* Copies @from into the send ring and posts it (mutex held): bytes taken, or -errno. */
ssize_t qpip_sock_send(struct qpip_sock *sk, struct iov_iter *from, unsigned int flags,
		       bool nonblock)
{
	long timeo = nonblock || (flags & MSG_DONTWAIT) ? 0 :
		     (sk->ksock ? sock_sndtimeo(sk->ksock->sk, false) : MAX_SCHEDULE_TIMEOUT);
	size_t total = iov_iter_count(from);
	size_t done = 0;
	int ret;

	qpip_sock_sync(sk);
	while (done < total || !total) {
		u32 n, off, first;

		qpip_sock_reap(sk);
		if (sk->wr_shut || sk->dead || sk->err || sk->state == QPIP_SOCK_CLOSED ||
		    sk->state == QPIP_SOCK_LISTENING)
			goto error;
		if (sk->state == QPIP_SOCK_IDLE)
			return done ? done : -ENOTCONN;
		if (!qpip_sock_writable(sk)) {
			qpip_sock_tx_push(sk, true);
			sk->tx_waiters++;
			ret = qpip_sock_wait(sk, qpip_sock_writable, &timeo);
			sk->tx_waiters--;
			if (ret == -EAGAIN)
				sk->tx_wanted = true;	/* the caller waits for POLLOUT */
			if (ret) {
				if (done)
					break;
				return ret;
			}
			continue;
		}
		if (!total)
			break;
		n = min_t(size_t, qpip_sock_tx_free(sk), total - done);
		off = sk->tx_tail % QPIP_SOCK_TX_BYTES;
		first = min_t(u32, n, QPIP_SOCK_TX_BYTES - off);
		if (copy_from_iter(sk->va + QPIP_SOCK_RX_BYTES + off, first, from) != first)
			goto fault;
		if (first < n &&
		    copy_from_iter(sk->va + QPIP_SOCK_RX_BYTES, n - first, from) != n - first)
			goto fault;
		sk->tx_tail += n;
		done += n;
		sk->tx_corked = !!(flags & MSG_MORE);
		ret = qpip_sock_tx_push(sk, false);
		if (ret)
			return done ? done : ret;
	}
	qpip_sock_rearm(sk);
	return done;

fault:
	return done ? done : -EFAULT;
error:
	if (done)
		return done;
	return qpip_sock_send_error(sk, flags);
}

/* ---- receive, copied out ---- */

static bool qpip_sock_readable(struct qpip_sock *sk)
{
	return sk->rx_avail || sk->rx_eof || sk->rd_shut || sk->state == QPIP_SOCK_CLOSED;
}

/*
 * Copies up to what @to holds out of the completed slots (mutex held): consumed unless
 * MSG_PEEK; with MSG_TRUNC the bytes are dropped, not copied. Returns the bytes.
 */
static size_t qpip_sock_copy_out(struct qpip_sock *sk, struct iov_iter *to, size_t want,
				 unsigned int flags)
{
	u32 read = sk->rx_read, off = sk->rx_off;
	size_t done = 0;

	while (done < want && read != sk->rx_done) {
		u32 slot = read % QPIP_SOCK_RX_SLOTS;
		u32 n = min_t(size_t, sk->rx_len[slot] - off, want - done);

		if (!(flags & MSG_TRUNC) &&
		    copy_to_iter(sk->va + (size_t)slot * PAGE_SIZE + off, n, to) != n)
			break;
		done += n;
		off += n;
		if (off == sk->rx_len[slot]) {
			read++;
			off = 0;
		}
	}
	if (!(flags & MSG_PEEK)) {
		sk->rx_read = read;
		sk->rx_off = off;
		sk->rx_avail -= done;
		qpip_sock_rx_refill(sk);
	}
	return done;
}

static ssize_t qpip_sock_recv_once(struct qpip_sock *sk, struct iov_iter *to,
				   unsigned int flags, bool nonblock);

/* Receives into @to (mutex held): bytes received, 0 at the end of the stream, or -errno. */
ssize_t qpip_sock_recv(struct qpip_sock *sk, struct iov_iter *to, unsigned int flags,
		       bool nonblock)
{
	ssize_t ret = qpip_sock_recv_once(sk, to, flags, nonblock);

	qpip_sock_rearm(sk);
	return ret;
}

static ssize_t qpip_sock_recv_once(struct qpip_sock *sk, struct iov_iter *to,
				   unsigned int flags, bool nonblock)
{
	long timeo = nonblock || (flags & MSG_DONTWAIT) ? 0 :
		     (sk->ksock ? sock_rcvtimeo(sk->ksock->sk, false) : MAX_SCHEDULE_TIMEOUT);
	size_t want = iov_iter_count(to);
	size_t done = 0;
	int ret, err;

	if (flags & MSG_OOB)
		return -EOPNOTSUPP;
	if (sk->state == QPIP_SOCK_LISTENING || sk->state == QPIP_SOCK_IDLE)
		return -ENOTCONN;
	qpip_sock_sync(sk);
	for (;;) {
		qpip_sock_reap(sk);
		if (sk->rx_avail) {
			done += qpip_sock_copy_out(sk, to, want - done, flags);
			if (done == want || !(flags & MSG_WAITALL) || (flags & MSG_PEEK))
				return done;
			continue;
		}
		if (done && !(flags & MSG_WAITALL))
			return done;
		if (sk->rx_eof || sk->rd_shut)
			return done;
		if (sk->err || sk->dead || sk->state == QPIP_SOCK_CLOSED) {
			if (done)
				return done;
			err = sk->err;
			sk->err = 0;
			return err ? err : 0;
		}
		if (!want)
			return 0;
		ret = qpip_sock_wait(sk, qpip_sock_readable, &timeo);
		if (ret)
			return done ? done : ret;
	}
}

/* ---- the file's read and write ---- */

ssize_t qpip_sock_read_iter(struct kiocb *iocb, struct iov_iter *to)
{
	struct qpip_sock *sk = iocb->ki_filp->private_data;
	bool nonblock = (iocb->ki_filp->f_flags & O_NONBLOCK) || (iocb->ki_flags & IOCB_NOWAIT);
	ssize_t ret;

	qpip_sock_lock(sk);
	if (sk->udp) {
		struct sockaddr_storage src;
		unsigned int mflags;
		int src_len;

		ret = qpip_udp_recv(sk, to, 0, nonblock, &src, &src_len, &mflags);
	} else {
		ret = qpip_sock_recv(sk, to, 0, nonblock);
	}
	qpip_sock_unlock(sk);
	return ret;
}

ssize_t qpip_sock_write_iter(struct kiocb *iocb, struct iov_iter *from)
{
	struct qpip_sock *sk = iocb->ki_filp->private_data;
	bool nonblock = (iocb->ki_filp->f_flags & O_NONBLOCK) || (iocb->ki_flags & IOCB_NOWAIT);
	ssize_t ret;

	qpip_sock_lock(sk);
	if (sk->udp)
		ret = qpip_udp_send(sk, from, 0, nonblock, NULL, 0);
	else
		ret = qpip_sock_send(sk, from, 0, nonblock);
	qpip_sock_unlock(sk);
	return ret;
}

/* ---- readiness ---- */

/* What poll reports for a connection (mutex held, completions taken). */
__poll_t qpip_sock_data_mask(struct qpip_sock *sk)
{
	__poll_t mask = 0;

	if (sk->err)
		mask |= EPOLLERR;
	if (sk->state == QPIP_SOCK_IDLE || sk->state == QPIP_SOCK_CONNECTING)
		return mask;
	if (sk->state == QPIP_SOCK_CLOSED || sk->dead)
		return mask | EPOLLIN | EPOLLRDNORM | EPOLLOUT | EPOLLWRNORM | EPOLLHUP;
	if (sk->rx_avail || sk->rx_eof || sk->rd_shut)
		mask |= EPOLLIN | EPOLLRDNORM;
	if (sk->rx_eof)
		mask |= EPOLLRDHUP;
	/* Writable while a third of the send buffer is free, as a TCP socket is. */
	if (sk->wr_shut || qpip_sock_tx_free(sk) >= QPIP_SOCK_TX_BYTES / 3)
		mask |= EPOLLOUT | EPOLLWRNORM;
	/* Not writable: a poller waits for the acknowledgements that make room. */
	sk->tx_wanted = !(mask & EPOLLOUT);
	if (sk->wr_shut && (sk->rx_eof || sk->rd_shut))
		mask |= EPOLLHUP;
	return mask;
}
