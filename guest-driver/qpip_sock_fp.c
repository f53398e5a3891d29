// SPDX-License-Identifier: GPL-2.0
/*
 * qpip: a qpip socket's user-level fast path (docs/sockets.md, "the fast path").
 *
 * The process that made a connected TCP socket may map its state (IOCTL_SOCK_FASTPATH,
 * then mmap of the socket's file): a shared page (struct qpip_sock_shm: the layout, the
 * indices of qpip_sock_io.c and a lock word), the context's doorbell page, the CQ, the SQ,
 * the RQ, the receive slots and the send ring. The preload library then reads and writes
 * without a system call while it can: it reaps the CQ, copies out of the slots, posts them
 * again, copies into the send ring and posts send WRs itself, and makes the system call
 * only when there is nothing to do (to sleep, or for EAGAIN) or anything is unusual.
 *
 * The lock word: whoever moves the indices holds it. The process takes it with a
 * compare-and-swap and never blocks or makes a system call while it holds it; every call
 * on the socket in the driver takes it after the socket's mutex (qpip_sock_lock) — it
 * waits a bounded time for the process, then takes it over and turns the fast path off —
 * and reads the indices back (qpip_fp_import), checking each against what the rings can
 * hold: from then on it uses its own copies, so what the process writes into the page
 * while the driver holds the lock changes nothing, and an impossible index ends the
 * connection (EIO) but is never used to address memory. Letting the lock go, the driver
 * writes its indices and the flags back (qpip_fp_export).
 *
 * Who may map it: the process whose memory the socket's buffers are charged to, once at a
 * time. A fork copies the mapping into the child: the socket is shared from then on and
 * the fast path is off for good (SOCK_SHM_SHARED), both sides making system calls. The
 * mapping holds the file, so the socket is closed only once it is unmapped (the library
 * unmaps it at close; exit and exec do it too); when the last mapping goes while the
 * process held the lock (it was killed in its critical section), the lock is let go.
 *
 * The mapping's pages each hold a reference of the socket's (qpip_fp_pages), so that the
 * rings freed when the connection ends are not reused while the process maps them. The
 * mmap and the VMA's callbacks run under the process's mmap lock: they take no mutex of
 * the socket's (the data path faults on user memory with the mutex held).
 */
#include <linux/delay.h>
#include <linux/mm.h>
#include <linux/sched/signal.h>
#include <net/tcp.h>

#include "qpip_sock.h"

/* How long the driver waits for the process to let the lock go before taking it over. */
#define QPIP_FP_TAKEOVER_MS	2000
/* Spins before each short sleep while waiting for it. */
#define QPIP_FP_SPINS		50

static u32 *qpip_fp_lock_word(struct qpip_sock *sk)
{
	return &sk->shm->lock;
}

/* ---- the indices ---- */

/* @new is behind @old: a free-running index moved backwards. */
static bool qpip_fp_back(u32 new, u32 old)
{
	return (s32)(new - old) < 0;
}

/*
 * Marks the fast path off and the connection broken: the process's indices were
 * impossible. The driver's own are stale now (the process moved the rings on): nothing
 * more is read from them, the error, then the end of the stream.
 */
static void qpip_fp_bad(struct qpip_sock *sk)
{
	sk->fp_off = true;
	sk->rx_read = sk->rx_done;
	sk->rx_off = 0;
	sk->rx_avail = 0;
	if (sk->state == QPIP_SOCK_CONNECTED)
		sk->state = QPIP_SOCK_CLOSED;
	sk->err = -EIO;
}

static bool qpip_fp_ksock_corked(struct qpip_sock *sk)
{
	return sk->ksock && (tcp_sk(sk->ksock->sk)->nonagle & TCP_NAGLE_CORK);
}

/*
 * The program's TCP_CORK as the process left it: a setsockopt the library did without a
 * system call. The kernel socket keeps the option (getsockopt reads it there, the data
 * path in qpip_sock_io.c too), so a change goes there; the value the driver last wrote
 * into the page tells a change from a value nobody touched.
 */
static void qpip_fp_import_cork(struct qpip_sock *sk, bool cork)
{
	if (cork == sk->fp_cork || !sk->ksock)
		return;
	sk->fp_cork = cork;
	if (cork != qpip_fp_ksock_corked(sk))
		tcp_sock_set_cork(sk->ksock->sk, cork);
}

/*
 * Reads back what the process moved while it held the lock (lock held by the driver now),
 * each index checked against the driver's copy and the rings' sizes: the process may only
 * have consumed the completions it accounts for, posted receives for slots read whole,
 * copied into free send space and posted what it copied. All differences are unsigned
 * (the indices are free-running). What the checks guarantee is that the driver's copies
 * never address memory outside the rings; a process that lies within them only garbles
 * its own stream.
 */
static void qpip_fp_import(struct qpip_sock *sk)
{
	struct qpip_sock_shm *m = sk->shm;
	u32 cq_head = READ_ONCE(m->cq_head), arm = READ_ONCE(m->cq_arm_seq);
	u32 rq_tail = READ_ONCE(m->rq_tail), rx_done = READ_ONCE(m->rx_done);
	u32 rx_read = READ_ONCE(m->rx_read), rx_off = READ_ONCE(m->rx_off);
	u32 tx_head = READ_ONCE(m->tx_head), tx_posted = READ_ONCE(m->tx_posted);
	u32 tx_tail = READ_ONCE(m->tx_tail), sq_tail = READ_ONCE(m->sq_tail);
	u32 sq_head = READ_ONCE(m->sq_head);
	u16 len[QPIP_SOCK_RX_SLOTS];
	u32 i, avail = 0;

	if (!sk->cq || !sk->qp || !sk->bufs || sk->fp_off)
		return;
	/*
	 * The WR indices only move forward (the process may have moved them any distance
	 * since the driver last held the lock: its calls need no system call, but not 2^31
	 * WRs), and every index stays within what the rings hold of the others. The send
	 * ring's byte counters may move by more than 2^31 between two calls of the driver:
	 * only their distances from each other are checked.
	 */
	if (qpip_fp_back(sq_head, sk->sq_head) || qpip_fp_back(sq_tail, sk->sq_tail) ||
	    qpip_fp_back(rq_tail, sk->rq_tail) || qpip_fp_back(rx_done, sk->rx_done) ||
	    qpip_fp_back(rx_read, sk->rx_read))
		goto bad;
	/* Send WRs: at most the SQ posted and not completed; completed only posted ones. */
	if (sq_tail - sq_head > QPIP_SOCK_SQ_DEPTH || sq_head - sk->sq_head > sq_tail - sk->sq_head)
		goto bad;
	/* The send ring: head <= posted <= tail, at most the ring apart. */
	if (tx_tail - tx_head > QPIP_SOCK_TX_BYTES || tx_posted - tx_head > tx_tail - tx_head)
		goto bad;
	/* Receives: read <= completed <= posted <= read + the slots. */
	if (rq_tail - rx_read > QPIP_SOCK_RX_SLOTS || rx_done - rx_read > rq_tail - rx_read)
		goto bad;
	/* The process consumes only the completions it accounts for: a send or a receive each. */
	if (cq_head - sk->cq_head != (sq_head - sk->sq_head) + (rx_done - sk->rx_done))
		goto bad;
	memcpy(len, sk->rx_len, sizeof(len));
	/*
	 * The lengths of the completions the process took (never an empty one: the end of
	 * data is the driver's), of the last QPIP_SOCK_RX_SLOTS of them: each slot's latest.
	 */
	i = rx_done - sk->rx_done > QPIP_SOCK_RX_SLOTS ? rx_done - QPIP_SOCK_RX_SLOTS : sk->rx_done;
	for (; i != rx_done; i++) {
		u32 slot = i % QPIP_SOCK_RX_SLOTS;

		len[slot] = READ_ONCE(m->rx_len[slot]);
		if (!len[slot] || len[slot] > PAGE_SIZE)
			goto bad;
	}
	for (i = rx_read; i != rx_done; i++)
		avail += len[i % QPIP_SOCK_RX_SLOTS];
	/* Inside the slot being read (an empty one, the end of data, is passed at offset 0). */
	if (rx_off && (rx_read == rx_done || rx_off >= len[rx_read % QPIP_SOCK_RX_SLOTS]))
		goto bad;

	sk->cq_head = cq_head;
	sk->cq_arm_seq = arm;
	sk->sq_tail = sq_tail;
	sk->sq_head = sq_head;
	sk->tx_head = tx_head;
	sk->tx_posted = tx_posted;
	sk->tx_tail = tx_tail;
	sk->rq_tail = rq_tail;
	sk->rx_done = rx_done;
	sk->rx_read = rx_read;
	sk->rx_off = rx_off;
	sk->rx_avail = avail - rx_off;
	memcpy(sk->rx_len, len, sizeof(len));
	qpip_fp_import_cork(sk, !!READ_ONCE(m->cork));
	return;
bad:
	/* What the process wrote and what the driver had, for whoever debugs the library. */
	pr_warn_ratelimited("qpip: pid %d: impossible fast-path indices, connection ended: cq %u->%u sq %u/%u->%u/%u tx %u/%u/%u->%u/%u/%u rq %u->%u rx %u/%u/%u->%u/%u/%u\n",
			    task_pid_nr(current), sk->cq_head, cq_head, sk->sq_head, sk->sq_tail,
			    sq_head, sq_tail, sk->tx_head, sk->tx_posted, sk->tx_tail, tx_head,
			    tx_posted, tx_tail, sk->rq_tail, rq_tail, sk->rx_read, sk->rx_off,
			    sk->rx_done, rx_read, rx_off, rx_done);
	qpip_fp_bad(sk);
}

/* What the process may do on its own, as the driver knows the socket now. */
static u32 qpip_fp_flags(struct qpip_sock *sk)
{
	bool up = sk->state == QPIP_SOCK_CONNECTED && !sk->dead && !sk->err && sk->qp_made &&
		  sk->cq_made;
	u32 flags = 0;

	if (sk->fp_off)
		return QPIP_SOCK_SHM_OFF;
	if (READ_ONCE(sk->fp_shared))
		return QPIP_SOCK_SHM_SHARED;
	if (up && !sk->rd_shut && !sk->rx_eof && !sk->peer_closed)
		flags |= QPIP_SOCK_SHM_RX_OK;
	/* TCP_CORK is the page's (cork); MSG_MORE's hold is the driver's alone. */
	if (up && !sk->wr_shut && !sk->fin_sent && !sk->tx_corked)
		flags |= QPIP_SOCK_SHM_TX_OK;
	if (waitqueue_active(&sk->wait))
		flags |= QPIP_SOCK_SHM_WAITERS;
	if (qpip_sock_tx_needed(sk))
		flags |= QPIP_SOCK_SHM_TX_WAITERS;
	return flags;
}

static void qpip_fp_export(struct qpip_sock *sk)
{
	struct qpip_sock_shm *m = sk->shm;

	WRITE_ONCE(m->cq_head, sk->cq_head);
	WRITE_ONCE(m->cq_arm_seq, sk->cq_arm_seq);
	WRITE_ONCE(m->sq_tail, sk->sq_tail);
	WRITE_ONCE(m->sq_head, sk->sq_head);
	WRITE_ONCE(m->tx_head, sk->tx_head);
	WRITE_ONCE(m->tx_posted, sk->tx_posted);
	WRITE_ONCE(m->tx_tail, sk->tx_tail);
	WRITE_ONCE(m->rq_tail, sk->rq_tail);
	WRITE_ONCE(m->rx_done, sk->rx_done);
	WRITE_ONCE(m->rx_read, sk->rx_read);
	WRITE_ONCE(m->rx_off, sk->rx_off);
	memcpy(m->rx_len, sk->rx_len, sizeof(m->rx_len));
	sk->fp_cork = qpip_fp_ksock_corked(sk);
	WRITE_ONCE(m->cork, sk->fp_cork);
	WRITE_ONCE(m->flags, qpip_fp_flags(sk));
}

/* ---- the lock ---- */

/*
 * Takes the lock word (mutex held): the process holds it only for a copy and a few
 * stores. Waits with short sleeps; a process that holds it for QPIP_FP_TAKEOVER_MS (stopped
 * in its critical section, or not following the protocol) loses it and its fast path. A
 * caller with a fatal signal takes it at once: its process is dying, and a thread of it
 * may be the holder.
 */
static void qpip_fp_enter(struct qpip_sock *sk)
{
	unsigned long deadline = jiffies + msecs_to_jiffies(QPIP_FP_TAKEOVER_MS);
	u32 *lock = qpip_fp_lock_word(sk);
	unsigned int spins = 0;

	while (cmpxchg(lock, QPIP_SOCK_SHM_UNLOCKED, QPIP_SOCK_SHM_LOCKED_KERNEL) !=
	       QPIP_SOCK_SHM_UNLOCKED) {
		if (time_after(jiffies, deadline)) {
			sk->fp_off = true;
			break;
		}
		if (fatal_signal_pending(current))
			break;
		if (++spins < QPIP_FP_SPINS) {
			cpu_relax();
			continue;
		}
		/*
		 * A short sleep, not a tick: the holder may be a thread preempted on this
		 * very CPU (a guest of one vCPU), which must run to let go.
		 */
		spins = 0;
		usleep_range(10, 50);
	}
	WRITE_ONCE(*lock, QPIP_SOCK_SHM_LOCKED_KERNEL);
	sk->fp_held = true;
	qpip_fp_import(sk);
}

static void qpip_fp_exit(struct qpip_sock *sk)
{
	qpip_fp_export(sk);
	sk->fp_held = false;
	smp_store_release(qpip_fp_lock_word(sk), QPIP_SOCK_SHM_UNLOCKED);
}

/* The socket's mutex, and the fast path's lock word once the socket has a shared page. */
void qpip_sock_lock(struct qpip_sock *sk)
{
	mutex_lock(&sk->lock);
	if (sk->shm)
		qpip_fp_enter(sk);
}

void qpip_sock_unlock(struct qpip_sock *sk)
{
	if (sk->fp_held)
		qpip_fp_exit(sk);
	mutex_unlock(&sk->lock);
}

/* ---- the mapping ---- */

static void qpip_fp_vm_open(struct vm_area_struct *vma)
{
	struct qpip_sock *sk = vma->vm_file->private_data;

	atomic_inc(&sk->fp_maps);
	/* Copied into a child by fork (a move by mremap stays in the same memory). */
	if (vma->vm_mm != READ_ONCE(sk->fp_mm)) {
		WRITE_ONCE(sk->fp_shared, true);
		/* Seen at once by both: the flags are rewritten whenever the driver lets go. */
		WRITE_ONCE(sk->shm->flags, QPIP_SOCK_SHM_SHARED);
	}
}

static void qpip_fp_vm_close(struct vm_area_struct *vma)
{
	struct qpip_sock *sk = vma->vm_file->private_data;

	/* The last mapping is gone: nobody in user space can hold the lock any more. */
	if (atomic_dec_and_test(&sk->fp_maps))
		cmpxchg(qpip_fp_lock_word(sk), QPIP_SOCK_SHM_LOCKED_USER, QPIP_SOCK_SHM_UNLOCKED);
}

/* Whole or nothing: a part of it would make the mapping's count meaningless. */
static int qpip_fp_vm_may_split(struct vm_area_struct *vma, unsigned long addr)
{
	return -EINVAL;
}

static const struct vm_operations_struct qpip_fp_vm_ops = {
	.open = qpip_fp_vm_open,
	.close = qpip_fp_vm_close,
	.may_split = qpip_fp_vm_may_split,
};

int qpip_sock_mmap(struct file *filp, struct vm_area_struct *vma)
{
	struct qpip_sock *sk = filp->private_data;
	/* Published by IOCTL_SOCK_FASTPATH after the page list was made. */
	struct qpip_sock_shm *m = smp_load_acquire(&sk->shm);
	unsigned long npages;
	int ret;

	if (!m || vma->vm_pgoff || vma_pages(vma) != sk->fp_npages ||
	    !(vma->vm_flags & VM_SHARED))
		return -EINVAL;
	if (vma->vm_flags & VM_EXEC)
		return -EPERM;
	if (current->mm != sk->fp_owner)
		return -EPERM;
	if (READ_ONCE(sk->fp_shared) || atomic_cmpxchg(&sk->fp_maps, 0, 1))
		return -EBUSY;
	vm_flags_clear(vma, VM_MAYEXEC);
	vm_flags_set(vma, VM_DONTEXPAND | VM_DONTDUMP);
	WRITE_ONCE(sk->fp_mm, current->mm);
	npages = sk->fp_npages;
	ret = vm_insert_pages(vma, vma->vm_start, sk->fp_pages, &npages);
	if (ret) {
		atomic_dec(&sk->fp_maps);
		return ret;
	}
	vma->vm_ops = &qpip_fp_vm_ops;
	return 0;
}

/* Appends @r's pages to the mapping's list, each with a reference of the socket's. */
static unsigned int qpip_fp_add(struct page **pages, unsigned int n, struct qpip_ring *r)
{
	unsigned int i;

	for (i = 0; i < r->npages; i++) {
		get_page(r->pages[i]);
		pages[n++] = r->pages[i];
	}
	return n;
}

/* Makes the shared page and the mapping's page list (mutex held, objects made). */
static int qpip_fp_setup(struct qpip_sock *sk)
{
	unsigned int n = 0, npages = 2 + sk->cq->ring->npages + sk->qp->sq->npages +
				     sk->qp->rq->npages + sk->bufs->npages;
	struct qpip_sock_shm *m;
	struct page **pages, *page;
	u32 off = 0;

	pages = kcalloc(npages, sizeof(*pages), GFP_KERNEL);
	if (!pages)
		return -ENOMEM;
	page = alloc_page(GFP_KERNEL | __GFP_ZERO);
	if (!page) {
		kfree(pages);
		return -ENOMEM;
	}
	m = page_address(page);
	pages[n++] = page;
	m->off_db = PAGE_SIZE;
	n = qpip_fp_add(pages, n, sk->ctx->db);
	m->off_cq = n << PAGE_SHIFT;
	n = qpip_fp_add(pages, n, sk->cq->ring);
	m->off_sq = n << PAGE_SHIFT;
	n = qpip_fp_add(pages, n, sk->qp->sq);
	m->off_rq = n << PAGE_SHIFT;
	n = qpip_fp_add(pages, n, sk->qp->rq);
	m->off_rx = n << PAGE_SHIFT;
	m->off_tx = m->off_rx + QPIP_SOCK_RX_BYTES;
	n = qpip_fp_add(pages, n, sk->bufs);
	WARN_ON_ONCE(n != npages);

	m->map_len = npages << PAGE_SHIFT;
	m->cq_depth = sk->cq_depth;
	m->sq_depth = QPIP_SOCK_SQ_DEPTH;
	m->rx_slots = QPIP_SOCK_RX_SLOTS;
	m->rx_slot_bytes = PAGE_SIZE;
	m->tx_bytes = QPIP_SOCK_TX_BYTES;
	m->tx_chunk = QPIP_SOCK_TX_CHUNK;
	m->lkey = sk->lkey;
	off = QPIP_DB_CQ_BASE + sk->cq->slot * QPIP_DB_CQ_STRIDE;
	m->db_cq_head = off + QPIP_DB_CQ_HEAD;
	m->db_cq_arm_seq = off + QPIP_DB_CQ_ARM_SEQ;
	off = QPIP_DB_QP_BASE + sk->qp_slot * QPIP_DB_QP_STRIDE;
	m->db_sq_tail = off + QPIP_DB_QP_SQ_TAIL;
	m->db_rq_tail = off + QPIP_DB_QP_RQ_TAIL;
	m->iova_rx = QPIP_SOCK_IOVA;
	m->iova_tx = QPIP_SOCK_IOVA + QPIP_SOCK_RX_BYTES;
	/* Held: the caller's unlock writes the indices and lets it go. */
	m->lock = QPIP_SOCK_SHM_LOCKED_KERNEL;
	sk->fp_held = true;

	sk->fp_pages = pages;
	sk->fp_npages = npages;
	sk->fp_owner = sk->bufs->locked.mm;
	smp_store_release(&sk->shm, m);
	return 0;
}

/* The mapping's pages, when the socket is freed (no mapping is left: each holds the file). */
void qpip_fp_free(struct qpip_sock *sk)
{
	unsigned int i;

	if (!sk->fp_pages)
		return;
	for (i = 0; i < sk->fp_npages; i++)
		put_page(sk->fp_pages[i]);
	kfree(sk->fp_pages);
	sk->fp_pages = NULL;
	sk->shm = NULL;
}

/* IOCTL_SOCK_FASTPATH. */
int qpip_sock_fastpath(struct qpip_sock *sk, struct qpip_sock_fastpath *a)
{
	int ret = 0;

	if (a->op == QPIP_SOCK_FP_KICK) {
		if (!qpip_sock_device(sk))
			return -ENODEV;
		qpip_wr(sk->ctx->qdev, QPIP_KICK_PAGE_OFFSET + QPIP_KICK, 1);
		qpip_sock_device_end(sk);
		return 0;
	}
	if (a->op != QPIP_SOCK_FP_MAP)
		return -EINVAL;
	qpip_sock_lock(sk);
	qpip_sock_sync(sk);
	if (!sk->udp && (sk->state == QPIP_SOCK_CONNECTING || sk->state == QPIP_SOCK_IDLE))
		ret = -EAGAIN;		/* not yet: the library asks again */
	else if (sk->udp || sk->state != QPIP_SOCK_CONNECTED || sk->dead || !sk->qp_made ||
	    !sk->cq_made || !sk->bufs || !sk->bufs->locked.mm ||
	    sk->bufs->locked.mm != current->mm)
		ret = -EOPNOTSUPP;
	else if (sk->fp_off || READ_ONCE(sk->fp_shared) || atomic_read(&sk->fp_maps))
		ret = -EBUSY;
	else if (!sk->shm)
		ret = qpip_fp_setup(sk);
	if (!ret)
		a->map_len = sk->fp_npages << PAGE_SHIFT;
	qpip_sock_unlock(sk);
	return ret;
}
