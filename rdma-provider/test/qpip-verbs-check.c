// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * qpip-verbs-check: the verbs objects of an rdma-core device, checked with plain
 * libibverbs calls, for the VM tests (ci/tests/rdma_core.rs). Built beside the provider by
 * images/rdma-provider.sh; the guest image carries it as /usr/bin/qpip-verbs-check.
 *
 *   qpip-verbs-check DEVICE         make and destroy a PD, a CQ on a completion channel,
 *                                   regions and QPs (their states, receives flushed by
 *                                   ERR, WRs posted in ERR flushed, the channel told);
 *                                   print "KEY VALUE" lines
 *   qpip-verbs-check DEVICE hold    the same objects, then print "holding" and wait to be
 *                                   killed (what a killed process leaves is the test's)
 *   qpip-verbs-check DEVICE reset   a QP with receives posted and its CQ armed, then print
 *                                   "armed" and wait on the completion channel (30 s at
 *                                   most) for the device to be reset; print what completed
 *                                   then (the receives, flushed), and how WRs posted to
 *                                   the dead QP afterwards complete
 *
 * Each line says what one verb did ("ok", or the errno's name), or a value; the test
 * decides what is right. The exit status is 0 unless the device could not be opened.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "say.h"

/* WRs posted in ERR (or after a reset), by wr_id; a second QP's receives. */
#define WR_RECV_DEAD	200
#define WR_SEND_DEAD	300
#define WR_RECV_QP2	400
#define WR_RECV_RESET	500
#define WR_AFTER_RESET	510
#define WR_RECV_EVENT	600


/* "ok" when @ok, else the errno's name (strerrorname_np: glibc 2.32). */
static void result(const char *key, int ok, int err)
{
	if (ok)
		say(key, "ok");
	else
		say(key, "%s", strerrorname_np(err) ? strerrorname_np(err) : "unknown");
}

static struct ibv_context *open_device(const char *name)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = NULL;
	int i;

	for (i = 0; list && list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			ctx = ibv_open_device(list[i]);
	if (list)
		ibv_free_device_list(list);
	return ctx;
}

static int qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_init_attr init;
	struct ibv_qp_attr attr;

	if (ibv_query_qp(qp, &attr, IBV_QP_STATE, &init))
		return -1;
	return attr.qp_state;
}

static int qp_move(struct ibv_qp *qp, enum ibv_qp_state to, int mask)
{
	struct ibv_qp_attr attr = { .qp_state = to, .port_num = 1,
				    .qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
						       IBV_ACCESS_REMOTE_READ };

	return ibv_modify_qp(qp, &attr, IBV_QP_STATE | mask);
}

/* RESET -> INIT -> RTR, as rdma_cm moves a QP before it connects; 0 or an errno. */
static int qp_ready(struct ibv_qp *qp)
{
	int n = qp_move(qp, IBV_QPS_INIT, IBV_QP_ACCESS_FLAGS | IBV_QP_PORT);

	return n ? n : qp_move(qp, IBV_QPS_RTR, 0);
}

static struct ibv_qp *make_qp(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr a = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1,
			 .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};

	return ibv_create_qp(pd, &a);
}

/* A receive of 4 KiB of @mr at @buf + @i pages, as @wr_id; 0 or an errno. */
static int post_recv(struct ibv_qp *qp, struct ibv_mr *mr, char *buf, int i, uint64_t wr_id)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)buf + i * 4096,
		.length = 4096,
		.lkey = mr ? mr->lkey : 0,
	};
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 }, *bad;

	return ibv_post_recv(qp, &wr, &bad);
}

/* A Send of 64 bytes of @mr, as @wr_id, signalled or not; 0 or an errno. */
static int post_send(struct ibv_qp *qp, struct ibv_mr *mr, char *buf, uint64_t wr_id,
		     int signaled)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 64, .lkey = mr ? mr->lkey : 0 };
	struct ibv_send_wr wr = {
		.wr_id = wr_id,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_SEND,
		.send_flags = signaled ? IBV_SEND_SIGNALED : 0,
	}, *bad;

	return ibv_post_send(qp, &wr, &bad);
}

static const char *wc_opcode_name(enum ibv_wc_opcode op)
{
	switch (op) {
	case IBV_WC_SEND:
		return "SEND";
	case IBV_WC_RECV:
		return "RECV";
	case IBV_WC_RDMA_WRITE:
		return "WRITE";
	case IBV_WC_RDMA_READ:
		return "READ";
	default:
		return "OTHER";
	}
}

/*
 * Polls @cq until @want completions came or 2 s passed; prints them under @key as
 * "WR_ID:OPCODE:STATUS:QP" (QP: "qp" for @qp, "qp2" for @qp2, else the number),
 * space-separated, in the order polled ("none" for none).
 */
static void poll_say(const char *key, struct ibv_cq *cq, int want, struct ibv_qp *qp,
		     struct ibv_qp *qp2)
{
	char out[1024] = "", one[96];
	struct ibv_wc wc[8];
	int i, n, got = 0, tries;

	for (tries = 0; tries < 100 && got < want; tries++) {
		n = ibv_poll_cq(cq, 8, wc);
		for (i = 0; i < n; i++, got++) {
			snprintf(one, sizeof(one), "%s%llu:%s:%s:", got ? " " : "",
				 (unsigned long long)wc[i].wr_id, wc_opcode_name(wc[i].opcode),
				 wc[i].status == IBV_WC_WR_FLUSH_ERR ? "FLUSH_ERR" :
				 ibv_wc_status_str(wc[i].status));
			strncat(out, one, sizeof(out) - strlen(out) - 1);
			if (qp && wc[i].qp_num == qp->qp_num)
				snprintf(one, sizeof(one), "qp");
			else if (qp2 && wc[i].qp_num == qp2->qp_num)
				snprintf(one, sizeof(one), "qp2");
			else
				snprintf(one, sizeof(one), "%u", wc[i].qp_num);
			strncat(out, one, sizeof(out) - strlen(out) - 1);
		}
		if (n <= 0 && got < want)
			usleep(20000);
	}
	say(key, "%s", got ? out : "none");
}

/* Acknowledges every event the channel holds (non-blocking); returns how many. */
static int drain_events(struct ibv_comp_channel *ch)
{
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	int n = 0;

	while (ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0) {
		ibv_ack_cq_events(ev_cq, 1);
		n++;
	}
	return n;
}

/* Whether the channel's fd becomes readable within @ms (then its events are taken). */
static int channel_fires(struct ibv_comp_channel *ch, int ms)
{
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	int n = poll(&pfd, 1, ms);

	drain_events(ch);
	return n == 1;
}

/*
 * iWARP's states: RESET, INIT, RTR locally (as rdma_cm moves them), RTS refused (only a
 * connection makes it); receives posted, then ERR flushes them.
 */
static void qp_states(struct ibv_qp *qp, struct ibv_cq *cq, struct ibv_mr *mr, char *buf)
{
	struct ibv_recv_wr rwr = {}, *bad_rwr;
	struct ibv_sge sge;
	struct ibv_wc wc[8];
	int i, n, flushed = 0, tries;

	say("qp.state", "%d", qp_state(qp));
	n = qp_move(qp, IBV_QPS_INIT, IBV_QP_ACCESS_FLAGS | IBV_QP_PORT);
	result("qp.init", n == 0, n);
	n = qp_move(qp, IBV_QPS_RTR, 0);
	result("qp.rtr", n == 0, n);
	n = qp_move(qp, IBV_QPS_RTS, 0);
	result("qp.rts", n == 0, n);
	say("qp.state_rtr", "%d", qp_state(qp));
	for (i = 0; i < 4; i++) {
		sge.addr = (uintptr_t)buf + i * 4096;
		sge.length = 4096;
		sge.lkey = mr ? mr->lkey : 0;
		rwr.wr_id = 100 + i;
		rwr.sg_list = &sge;
		rwr.num_sge = 1;
		n = ibv_post_recv(qp, &rwr, &bad_rwr);
		if (n) {
			result("qp.post_recv", 0, n);
			break;
		}
	}
	if (i == 4)
		say("qp.post_recv", "ok");
	n = qp_move(qp, IBV_QPS_ERR, 0);
	result("qp.err", n == 0, n);
	say("qp.state_err", "%d", qp_state(qp));
	for (tries = 0; tries < 100 && flushed < 4; tries++) {
		n = ibv_poll_cq(cq, 8, wc);
		for (i = 0; i < n; i++)
			if (wc[i].status == IBV_WC_WR_FLUSH_ERR && wc[i].wr_id >= 100 &&
			    wc[i].wr_id < 104 && wc[i].opcode == IBV_WC_RECV &&
			    wc[i].qp_num == qp->qp_num)
				flushed++;
		if (flushed < 4)
			usleep(20000);
	}
	say("qp.flushed", "%d", flushed);
}

/*
 * WRs posted to a QP in ERR complete flushed, as verbs flush them, with their own wr_ids
 * and opcodes (an unsignalled Send's too: a flush is an error). A second QP made meanwhile
 * keeps its own WRs: the dead QP's posts never reach it.
 */
static void qp_dead_posts(struct ibv_qp *qp, struct ibv_pd *pd, struct ibv_cq *cq,
			  struct ibv_comp_channel *ch, struct ibv_mr *mr, char *buf)
{
	struct ibv_qp *qp2;
	int n;

	n = post_recv(qp, mr, buf, 0, WR_RECV_DEAD);
	result("qp.post_after_err", n == 0, n);
	n = post_send(qp, mr, buf, WR_SEND_DEAD, 1);
	result("qp.post_send_after_err", n == 0, n);
	n = post_send(qp, mr, buf, WR_SEND_DEAD + 1, 0);
	result("qp.post_send_unsignaled_after_err", n == 0, n);
	poll_say("dead.flushed", cq, 3, qp, NULL);

	qp2 = make_qp(pd, cq);
	result("qp2", qp2 != NULL, errno);
	if (!qp2)
		return;
	n = qp_ready(qp2);
	result("qp2.rtr", n == 0, n);
	n = post_recv(qp2, mr, buf, 1, WR_RECV_QP2);
	n = n ? n : post_recv(qp2, mr, buf, 2, WR_RECV_QP2 + 1);
	result("qp2.post_recv", n == 0, n);
	n = post_recv(qp, mr, buf, 3, WR_RECV_DEAD + 1);
	result("qp.post_beside_qp2", n == 0, n);
	/* The dead QP's receive only: qp2's stay posted until its own ERR. */
	poll_say("dead.flushed_beside_qp2", cq, 2, qp, qp2);
	n = qp_move(qp2, IBV_QPS_ERR, 0);
	result("qp2.err", n == 0, n);
	poll_say("qp2.flushed", cq, 2, qp, qp2);
	result("qp2.destroy", ibv_destroy_qp(qp2) == 0, errno);
	drain_events(ch);
}

/*
 * A waiter on a CQ's completion channel hears of WRs posted to a dead QP. The CQ is a
 * fresh one that never held a completion of the device's, so nothing but those WRs can
 * raise its channel (the kernel wakes a CQ whose consumer took entries since its last
 * wake-up on any interrupt of its vector, which qpip0's traffic shares).
 */
static void dead_event(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_mr *mr,
		       char *buf)
{
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq = NULL;
	struct ibv_qp *qp = NULL;
	int n;

	ch = ibv_create_comp_channel(ctx);
	if (ch) {
		fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
		cq = ibv_create_cq(ctx, 16, NULL, ch, 0);
	}
	qp = cq ? make_qp(pd, cq) : NULL;
	n = qp ? qp_ready(qp) : errno;
	n = n ? n : qp_move(qp, IBV_QPS_ERR, 0);
	result("dead.setup", n == 0, n);
	if (!n) {
		usleep(200000);
		drain_events(ch);	/* the move to ERR told the channel */
		result("dead.arm", ibv_req_notify_cq(cq, 0) == 0, errno);
		n = post_recv(qp, mr, buf, 0, WR_RECV_EVENT);
		result("dead.post_recv", n == 0, n);
		say("dead.event", "%s", channel_fires(ch, 2000) ? "yes" : "no");
		poll_say("dead.event_flushed", cq, 1, qp, NULL);
	}
	if (qp)
		ibv_destroy_qp(qp);
	if (cq) {
		drain_events(ch);
		ibv_destroy_cq(cq);
	}
	if (ch)
		ibv_destroy_comp_channel(ch);
}

/*
 * A QP with receives posted waits on its CQ's completion channel while the device is
 * reset (the test resets it once "armed" is printed): the device forgets the QP and its
 * WRs, the provider completes them flushed, and the waiter is woken. WRs posted to the QP
 * afterwards complete flushed too.
 */
static int reset_wait(struct ibv_context *ctx, struct ibv_pd *pd)
{
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char *buf;
	int i, n;

	ch = ibv_create_comp_channel(ctx);
	cq = ch ? ibv_create_cq(ctx, 16, NULL, ch, 0) : NULL;
	buf = aligned_alloc(4096, 8 * 4096);
	mr = buf ? ibv_reg_mr(pd, buf, 8 * 4096, IBV_ACCESS_LOCAL_WRITE) : NULL;
	qp = cq && mr ? make_qp(pd, cq) : NULL;
	result("reset.setup", qp != NULL, errno);
	if (!qp)
		return 1;
	n = qp_ready(qp);
	for (i = 0; !n && i < 4; i++)
		n = post_recv(qp, mr, buf, i, WR_RECV_RESET + i);
	result("reset.post_recv", n == 0, n);
	result("reset.arm", ibv_req_notify_cq(cq, 0) == 0, errno);
	say("armed", "yes");
	/* Blocking, as a program waiting for a completion does: the reset must wake it. */
	{
		struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
		struct ibv_cq *ev_cq;
		void *ev_ctx;

		n = poll(&pfd, 1, 30000);
		say("reset.event", "%s", n == 1 ? "yes" : "no");
		if (n == 1 && ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0)
			ibv_ack_cq_events(ev_cq, 1);
	}
	poll_say("reset.flushed", cq, 4, qp, NULL);
	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
	drain_events(ch);
	result("reset.arm_again", ibv_req_notify_cq(cq, 0) == 0, errno);
	n = post_recv(qp, mr, buf, 4, WR_AFTER_RESET);
	result("reset.post_recv_after", n == 0, n);
	n = post_send(qp, mr, buf, WR_AFTER_RESET + 1, 1);
	result("reset.post_send_after", n == 0, n);
	say("reset.event_after", "%s", channel_fires(ch, 2000) ? "yes" : "no");
	poll_say("reset.flushed_after", cq, 2, qp, NULL);
	result("reset.qp.destroy", ibv_destroy_qp(qp) == 0, errno);
	ibv_dereg_mr(mr);
	drain_events(ch);
	result("reset.cq.destroy", ibv_destroy_cq(cq) == 0, errno);
	ibv_destroy_comp_channel(ch);
	free(buf);
	return 0;
}

int main(int argc, char **argv)
{
	const size_t len = 1 << 20;
	struct ibv_comp_channel *ch;
	struct ibv_mr *mr, *ro, *bad;
	struct ibv_context *ctx;
	struct ibv_qp *qp = NULL;
	struct epoll_event ev = { .events = EPOLLIN };
	struct ibv_wc wc[4];
	struct ibv_cq *cq;
	struct ibv_pd *pd;
	struct pollfd pfd;
	void *ev_ctx;
	char *buf;
	int ep, n;

	if (argc < 2) {
		fprintf(stderr, "usage: qpip-verbs-check DEVICE [hold]\n");
		return 2;
	}
	ctx = open_device(argv[1]);
	if (!ctx) {
		fprintf(stderr, "qpip-verbs-check: cannot open %s\n", argv[1]);
		return 1;
	}
	pd = ibv_alloc_pd(ctx);
	result("pd", pd != NULL, errno);
	if (!pd)
		return 1;
	if (argc > 2 && !strcmp(argv[2], "reset")) {
		n = reset_wait(ctx, pd);
		ibv_dealloc_pd(pd);
		ibv_close_device(ctx);
		return n;
	}

	/* A CQ on a completion channel: its fd is pollable, quiet until a completion. */
	ch = ibv_create_comp_channel(ctx);
	result("channel", ch != NULL, errno);
	if (!ch)
		return 1;
	cq = ibv_create_cq(ctx, 100, NULL, ch, 0);
	result("cq", cq != NULL, errno);
	if (!cq)
		return 1;
	say("cq.cqe", "%d", cq->cqe);
	n = ibv_poll_cq(cq, 4, wc);
	say("cq.poll", "%d", n);
	result("cq.arm", ibv_req_notify_cq(cq, 0) == 0, errno);
	result("cq.arm_solicited", ibv_req_notify_cq(cq, 1) == 0, errno);
	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
	pfd.fd = ch->fd;
	pfd.events = POLLIN;
	say("channel.poll", "%d", poll(&pfd, 1, 200));
	ep = epoll_create1(0);
	result("channel.epoll_add", epoll_ctl(ep, EPOLL_CTL_ADD, ch->fd, &ev) == 0, errno);
	say("channel.epoll_wait", "%d", epoll_wait(ep, &ev, 1, 200));
	/*
	 * Nothing completed, so no event: the driver raises one only for a CQ with a new
	 * entry, whatever else shares its vector. One that came anyway is acknowledged, or
	 * destroying the CQ would wait.
	 */
	n = ibv_get_cq_event(ch, &cq, &ev_ctx);
	result("channel.get_event", n == 0, errno);
	if (n == 0)
		ibv_ack_cq_events(cq, 1);

	/*
	 * Regions: read-write with remote access, local read-only; the remote atomic right
	 * accepted, granting nothing (the device has no atomics).
	 */
	buf = aligned_alloc(4096, len);
	memset(buf, 0x5a, len);
	mr = ibv_reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			IBV_ACCESS_REMOTE_READ);
	result("mr", mr != NULL, errno);
	if (mr)
		say("mr.keys", "%s", mr->lkey == mr->rkey || mr->rkey ? "set" : "none");
	ro = ibv_reg_mr(pd, buf + 4096, 8192, 0);
	result("mr.readonly", ro != NULL, errno);
	bad = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
	result("mr.atomic", bad != NULL, errno);
	if (bad)
		ibv_dereg_mr(bad);

	/* An RC QP on the CQ. */
	{
		struct ibv_qp_init_attr a = {
			.send_cq = cq,
			.recv_cq = cq,
			.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1,
				 .max_recv_sge = 1 },
			.qp_type = IBV_QPT_RC,
		};

		qp = ibv_create_qp(pd, &a);
		result("qp", qp != NULL, errno);
		if (qp)
			say("qp.cap", "%u %u %u", a.cap.max_send_wr, a.cap.max_recv_wr,
			    a.cap.max_inline_data);
	}
	if (qp && !(argc > 2 && !strcmp(argv[2], "hold"))) {
		qp_states(qp, cq, mr, buf);
		qp_dead_posts(qp, pd, cq, ch, mr, buf);
		dead_event(ctx, pd, mr, buf);
	}

	if (argc > 2 && !strcmp(argv[2], "hold")) {
		say("holding", "yes");
		for (;;)
			pause();
	}

	if (qp)
		result("qp.destroy", ibv_destroy_qp(qp) == 0, errno);
	if (ro)
		result("mr.readonly.dereg", ibv_dereg_mr(ro) == 0, errno);
	if (mr)
		result("mr.dereg", ibv_dereg_mr(mr) == 0, errno);
	result("cq.destroy", ibv_destroy_cq(cq) == 0, errno);
	result("channel.destroy", ibv_destroy_comp_channel(ch) == 0, errno);
	result("pd.dealloc", ibv_dealloc_pd(pd) == 0, errno);
	result("close", ibv_close_device(ctx) == 0, errno);
	close(ep);
	free(buf);
	return 0;
}
