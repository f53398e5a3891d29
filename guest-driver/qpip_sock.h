/* SPDX-License-Identifier: GPL-2.0 */
/*
 * qpip: qpip sockets — TCP sockets whose connections the device carries, each a file of
 * its own, shared by the files that implement them:
 *
 *   qpip_sock.c       making one (connect, listen, accept offers), its device objects,
 *                     events, poll, release and the close that outlives it
 *   qpip_sock_io.c    the data path: the send and receive buffers, read/write, send/recv
 *   qpip_sock_ctl.c   the socket calls through ioctls: accept, names, options, shutdown
 *
 * Why a file and not a socket: a qpip socket must be what a program's descriptor is, so
 * that poll/select/epoll, fork, dup and descriptor passing work through the kernel as for
 * any file (the design of OpenOnload, not of rsockets' placeholder descriptors), while its
 * TCP runs in the device, not in the guest's stack. The socket calls a file lacks (send
 * with flags, accept, getsockname, ...) are ioctls, which the preload library makes.
 *
 * What one holds: the program's own kernel socket (the port's reservation against the
 * guest kernel's sockets — the port split of qpip_ports.c —, the store of its options, and
 * for a listener its path for connections that do not come through the device), and in
 * the context of the process that made it: a TCP QP in stream framing, one CQ for its
 * sends and receives, and one memory region over the socket's buffers, which are pages of
 * the driver's: the receive slots the RQ keeps posted and the send ring the SQ's WRs point
 * into. None of these objects is in the context's tables, so the process cannot name them
 * in the context's ioctls; the socket keeps the context's file open, so the context lives
 * as long as a socket made in it (also after the process closed it, or exited).
 */
#ifndef QPIP_SOCK_H
#define QPIP_SOCK_H

#include <linux/kref.h>
#include <linux/mutex.h>
#include <linux/net.h>
#include <linux/wait.h>
#include <linux/workqueue.h>

#include "qpip_ctx.h"

/*
 * UDP sockets (qpip_sock_udp.c): a UDP QP whose RQ keeps QPIP_UDP_RX_SLOTS slots posted,
 * each as large as the largest datagram, so a datagram always fits in one; a send ring
 * and one send WR per datagram.
 */
#define QPIP_UDP_RX_SLOTS	16
#define QPIP_UDP_SLOT_BYTES	(64 * 1024)
#define QPIP_UDP_TX_BYTES	(256 * 1024)
#define QPIP_UDP_SQ_DEPTH	128
/* How long a closed UDP socket's datagrams may take to leave before it is destroyed. */
#define QPIP_UDP_LINGER_MS	1000
/* Largest payloads of one datagram: IPv6's (no jumbograms) and IPv4's, as Linux's. */
#define QPIP_UDP_MAX_V6		(65535 - 8)
#define QPIP_UDP_MAX_V4		(65535 - 20 - 8)

/* Receive slots: each a page the RQ keeps posted (a WR of one page). */
#define QPIP_SOCK_RX_SLOTS	64
/* The send ring, bytes (a power of two). */
#define QPIP_SOCK_TX_BYTES	(256 * 1024)
/* The receive slots' bytes: the send ring follows them in the buffers. */
#define QPIP_SOCK_RX_BYTES	(QPIP_SOCK_RX_SLOTS * PAGE_SIZE)
/* Send WRs in flight: the SQ's depth. */
#define QPIP_SOCK_SQ_DEPTH	256
/* The most one send WR carries: a copy this large is posted in pieces. */
#define QPIP_SOCK_TX_CHUNK	(64 * 1024)
/* Connections a listener keeps offered to the device (an idle socket each, ACCEPT pending). */
#define QPIP_SOCK_OFFERS	4
/* How soon a listener tries again to offer a connection it could not offer. */
#define QPIP_SOCK_OFFER_RETRY_MS	50
/* How long a closed socket's sends may take to be acknowledged before it is reset. */
#define QPIP_SOCK_LINGER_MS	60000
/* Where the buffers' region starts in the device's address space of the context. */
#define QPIP_SOCK_IOVA		0x10000000ULL

/* Bits of qpip_sock.flags_ev: what the interrupt-time paths recorded (qpip_sock_sync). */
enum {
	QPIP_SOCK_EV_CONNECTED,		/* CONNECT or ACCEPT completed: @cb_status */
	QPIP_SOCK_EV_ERROR,		/* the QP went to the error state: @async_status */
	QPIP_SOCK_EV_PEER_CLOSED,	/* the peer closed its direction */
	QPIP_SOCK_EV_DEAD,		/* the device was reset or removed */
	QPIP_SOCK_EV_CLOSE_DONE,	/* CLOSE completed */
	QPIP_SOCK_EV_ACCEPT,		/* a listener has a connection ready */
};

enum qpip_sock_state {
	QPIP_SOCK_IDLE,		/* offered to a listener, not connected yet */
	QPIP_SOCK_CONNECTING,
	QPIP_SOCK_CONNECTED,
	QPIP_SOCK_LISTENING,
	QPIP_SOCK_CLOSED,	/* the connection failed or ended in error */
};

/* A UDP socket's received datagram in its slot (see qpip_sock_udp.c). */
struct qpip_sock_dgram {
	u32 len;
	u16 port;
	bool drop;			/* not for this socket (its peer or family): skipped */
	u8 addr[16];
};

struct qpip_sock {
	struct kref ref;		/* the file's, each pending command's, the closer's */
	struct qpip_ctx *ctx;
	struct file *ctx_file;		/* held: the context lives while the socket does */
	struct socket *ksock;		/* the program's kernel socket, held by @ksock_file */
	struct file *ksock_file;	/* NULL for a socket accepted from a listener */
	int family;			/* AF_INET or AF_INET6: how addresses are given back */
	/*
	 * A UDP socket: its state is CONNECTED from the start (open for datagrams); the
	 * kernel socket holds its names and carries what the device does not.
	 */
	bool udp;
	bool peer_set;			/* UDP: connected to a peer */
	bool peer_dev;			/* ... routed through the device (@peer_addr, @peer_port) */

	struct mutex lock;		/* everything below but what the comments say */
	wait_queue_head_t wait;		/* readers, writers, pollers, connect and accept */
	enum qpip_sock_state state;
	int err;			/* a pending error (SO_ERROR), -errno, or 0 */
	bool dead;			/* the device was reset or removed under it */
	bool peer_closed;		/* the device said the peer closed its direction */
	bool rx_eof;			/* ... and its last receive came back empty: end of data */
	bool rd_shut, wr_shut;		/* shutdown() */
	bool fin_sent;			/* CLOSE given to the device */
	bool tx_corked;			/* TCP_CORK or MSG_MORE held back the last bytes */
	/*
	 * Who needs the send side's completions to interrupt (qpip_sock_arm): writers asleep
	 * for room, and a poll or a non-blocking write that found none (cleared by a poll
	 * that finds room). Otherwise the CQ is armed for receives and errors only.
	 */
	unsigned int tx_waiters;
	bool tx_wanted;

	/* Written by the interrupt-time paths under @qlock, applied by qpip_sock_sync. */
	spinlock_t qlock;		/* these, and a listener's @ready, @offers, @noffers */
	unsigned long flags_ev;		/* QPIP_SOCK_EV_* */
	int cb_status;			/* CONNECT's or ACCEPT's outcome, -errno */
	u8 cb_peer[16];
	u16 cb_peer_port;
	int async_status;		/* why the QP went to the error state, -errno */
	bool closing;			/* a listener whose file is gone: no more connections */
	bool v6only;			/* a listener's kernel socket is IPV6_V6ONLY */

	u8 local_addr[16];		/* IPv4 ones IPv4-mapped, as the device names them */
	u16 local_port;
	u8 peer_addr[16];
	u16 peer_port;

	/* The device's objects (none for a listener but @listener); *_made: the device has it. */
	struct qpip_cq *cq;
	struct qpip_qp *qp;
	bool cq_made, qp_made, listener_made;
	u32 qp_slot;			/* the QP's doorbell slot */
	u32 lkey;			/* the buffers' region, 0 if none */
	u32 listener;			/* a listener's device handle */

	/* The buffers (a ring's pages: locked memory), one vmap over them: the receive slots
	 * first, then the send ring. */
	struct qpip_ring *bufs;
	void *va;

	/* Completions: the CQ's consumer side. */
	u32 cq_depth;
	u32 cq_head;
	u32 cq_arm_seq;

	/* Receive: the RQ's WR i is slot i % QPIP_SOCK_RX_SLOTS, completed in order. */
	u32 rq_tail;			/* WRs posted */
	u32 rx_done;			/* WRs completed with data */
	u32 rx_read;			/* of those, read whole */
	u32 rx_off;			/* bytes read of slot rx_read */
	u32 rx_avail;			/* bytes completed, not yet read */
	u16 rx_len[QPIP_SOCK_RX_SLOTS];

	/* Send: the ring's bytes [tx_head, tx_tail) are not acknowledged yet. */
	u32 tx_head;			/* acknowledged (a send WR's wr_id is its end) */
	u32 tx_posted;			/* given to the device */
	u32 tx_tail;			/* copied in */
	u32 sq_tail;			/* WRs posted */
	u32 sq_head;			/* WRs completed */
	u32 keepalive[3];		/* what the device was last told: idle, interval, probes */

	/*
	 * The user-level fast path (qpip_sock_fp.c): the shared page once made (then every
	 * holder of @lock holds its lock word too: qpip_sock_lock), the mapping's pages.
	 * @fp_maps, @fp_mm and @fp_shared are the mapping's, changed under the process's
	 * mmap lock, not @lock.
	 */
	struct qpip_sock_shm *shm;
	struct page **fp_pages;
	unsigned int fp_npages;
	struct mm_struct *fp_owner;	/* who may map it (compared only) */
	struct mm_struct *fp_mm;	/* who maps it (compared only) */
	atomic_t fp_maps;		/* mappings (VMAs) of it */
	bool fp_held;			/* the lock word is held by this mutex holder */
	bool fp_off;			/* the process lost the fast path */
	bool fp_shared;			/* the mapping was copied by fork */
	bool fp_cork;			/* the page's cork as the driver last wrote it */

	/* UDP: the slots' datagrams; rx_done/rx_read count them, rx_dgrams those not dropped. */
	struct qpip_sock_dgram udp_rx[QPIP_UDP_RX_SLOTS];
	u32 rx_dgrams;
	u32 tx_want;			/* UDP: the datagram a send waits for room for */

	/* A listener's: connections established on offered sockets, not accepted yet. */
	struct list_head ready;
	struct list_head node;		/* in the listener's @ready, or its offers */
	struct list_head offers;	/* sockets offered to the device (ACCEPT pending) */
	unsigned int noffers;
	struct qpip_sock *parent;	/* the listener an offered socket was made for */
	/*
	 * Two listeners on one port, one per family (an IPv6-only socket beside an IPv4 one,
	 * as nginx's "listen 80; listen [::]:80" makes): the device has one listener per
	 * port, the first's; the second is its @sibling (a weak pointer, under @qlock) and
	 * takes the connections of its family. The sibling holds its @primary.
	 */
	struct qpip_sock *sibling;
	struct qpip_sock *primary;

	/* Closing after the file is gone: waits for the sends, then frees the objects. */
	struct delayed_work close_work;
	unsigned long close_deadline;
	unsigned int close_poll_ms;
	struct work_struct free_work;	/* the last reference's frees, in process context */
	/*
	 * A listener's offers made again later when they could not be made (the context's
	 * QPs all taken, memory short): connections wait in the device meanwhile, and no
	 * accept would come to offer more.
	 */
	struct delayed_work offer_work;
};

/* qpip_sock.c */
long qpip_sock_ctx_ioctl(struct qpip_ctx *ctx, struct file *ctx_file, unsigned int cmd,
			 void __user *uarg);
struct qpip_sock *qpip_sock_alloc(struct qpip_ctx *ctx, struct file *ctx_file, int family);
int qpip_sock_objects(struct qpip_sock *sk);
void qpip_sock_rehome(struct qpip_sock *sk);
struct file *qpip_sock_file(struct qpip_sock *sk, unsigned int flags);
int qpip_sock_install(struct file *f, unsigned int flags);
struct net_device *qpip_sock_netdev(struct qpip_dev *qdev);
void qpip_sock_put(struct qpip_sock *sk);
void qpip_sock_orphan(struct qpip_sock *sk);
void qpip_sock_offer(struct qpip_sock *l);
bool qpip_sock_takes(struct qpip_sock *l, const u8 *peer);
void qpip_sock_destroy(struct qpip_sock *sk);
bool qpip_sock_device(struct qpip_sock *sk);
void qpip_sock_device_end(struct qpip_sock *sk);
bool qpip_sock_sync(struct qpip_sock *sk);
int qpip_sock_fin(struct qpip_sock *sk);
void qpip_sock_close_work(struct work_struct *work);
void qpip_sock_set_keepalive(struct qpip_sock *sk);
int qpip_sock_wait(struct qpip_sock *sk, bool (*ready)(struct qpip_sock *sk), long *timeo);
extern const struct file_operations qpip_sock_fops;

/* qpip_sock_io.c */
void qpip_sock_ring(struct qpip_sock *sk, u32 off, u32 value, bool kick);
bool qpip_sock_rq_doorbell(struct qpip_sock *sk);
struct qpip_wqe *qpip_sock_wqe(struct qpip_ring *r, u32 depth, u32 idx);
struct qpip_sge *qpip_wqe_sge(struct qpip_wqe *w, unsigned int i);
int qpip_sock_io_init(struct qpip_sock *sk);
void qpip_sock_reap(struct qpip_sock *sk);
void qpip_sock_arm(struct qpip_sock *sk);
u32 qpip_sock_next_arm(u32 seq, bool sends);
bool qpip_sock_tx_needed(struct qpip_sock *sk);
void qpip_sock_rearm(struct qpip_sock *sk);
__poll_t qpip_sock_data_mask(struct qpip_sock *sk);
ssize_t qpip_sock_send(struct qpip_sock *sk, struct iov_iter *from, unsigned int flags,
		       bool nonblock);
ssize_t qpip_sock_recv(struct qpip_sock *sk, struct iov_iter *to, unsigned int flags,
		       bool nonblock);
int qpip_sock_tx_push(struct qpip_sock *sk, bool force);
bool qpip_sock_tx_idle(struct qpip_sock *sk);
ssize_t qpip_sock_read_iter(struct kiocb *iocb, struct iov_iter *to);
ssize_t qpip_sock_write_iter(struct kiocb *iocb, struct iov_iter *from);

/* qpip_sock.c: what the device can carry */
bool qpip_addr_any(const u8 *a);
bool qpip_addr_v4(const u8 *a);
void qpip_ksock_local(struct sock *ksk, u8 *addr, u16 *port);
bool qpip_addr_on(struct net *net, struct net_device *ndev, const u8 *addr);
bool qpip_route_via(struct sock *ksk, struct net_device *ndev, u8 *src, const u8 *dst);

/* qpip_sock_udp.c */
int qpip_udp_connect(struct qpip_ctx *ctx, struct file *ctx_file, struct socket *sock,
		     struct qpip_sock_connect *a);
int qpip_udp_bind(struct qpip_ctx *ctx, struct file *ctx_file, struct socket *sock,
		  struct qpip_sock_bind *a);
int qpip_udp_io_init(struct qpip_sock *sk);
void qpip_udp_cqe(struct qpip_sock *sk, const struct qpip_cqe *e);
ssize_t qpip_udp_send(struct qpip_sock *sk, struct iov_iter *from, unsigned int flags,
		      bool nonblock, struct sockaddr_storage *dst, int dst_len);
ssize_t qpip_udp_recv(struct qpip_sock *sk, struct iov_iter *to, unsigned int flags,
		      bool nonblock, struct sockaddr_storage *src, int *src_len,
		      unsigned int *msg_flags);
__poll_t qpip_udp_poll(struct qpip_sock *sk, struct file *filp, struct poll_table_struct *pt);
int qpip_udp_peer(struct qpip_sock *sk, struct qpip_sock_peer *a);
int qpip_udp_inq(struct qpip_sock *sk, int __user *uarg);

/* qpip_sock_fp.c */
void qpip_sock_lock(struct qpip_sock *sk);
void qpip_sock_unlock(struct qpip_sock *sk);
int qpip_sock_mmap(struct file *filp, struct vm_area_struct *vma);
int qpip_sock_fastpath(struct qpip_sock *sk, struct qpip_sock_fastpath *a);
void qpip_fp_free(struct qpip_sock *sk);

/* qpip_sock_ctl.c */
long qpip_sock_ioctl(struct file *filp, unsigned int cmd, unsigned long arg);
int qpip_sock_sockaddr(int family, const u8 *addr, u16 port, struct sockaddr_storage *ss);

#endif /* QPIP_SOCK_H */
