// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * qpip-verbs-check: the verbs objects of an rdma-core device, checked with plain
 * libibverbs calls, for the VM tests (ci/tests/rdma_core.rs). Built beside the provider by
 * images/rdma-provider.sh; the guest image carries it as /usr/bin/qpip-verbs-check.
 *
 *   qpip-verbs-check DEVICE         make and destroy a PD, a CQ on a completion channel,
 *                                   regions and a QP (its states, receives flushed by
 *                                   ERR); print "KEY VALUE" lines
 *   qpip-verbs-check DEVICE hold    the same objects, then print "holding" and wait to be
 *                                   killed (what a killed process leaves is the test's)
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

static void say(const char *key, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void say(const char *key, const char *fmt, ...)
{
	va_list ap;

	printf("%s ", key);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

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
	n = ibv_post_recv(qp, &rwr, &bad_rwr);
	result("qp.post_after_err", n == 0, n);
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
	if (qp && !(argc > 2 && !strcmp(argv[2], "hold")))
		qp_states(qp, cq, mr, buf);

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
