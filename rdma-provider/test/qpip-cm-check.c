// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * qpip-cm-check: what the RDMA connection manager carries besides a plain connect —
 * private data both ways, a reject with the server's private data, a request the server
 * drops unanswered — checked with plain librdmacm calls, client and server in this
 * process, for the VM tests (ci/tests/rdma_core.rs). Built beside the provider by
 * images/rdma-provider.sh; the guest image carries it as /usr/bin/qpip-cm-check.
 *
 *   qpip-cm-check ADDR PORT
 *
 * A listener on ADDR:PORT gets three connects, each with 200 bytes of the client's
 * private data:
 *   reject  the server rejects it with 100 bytes of its own: the client's connect ends
 *           REJECTED, with them
 *   accept  the server accepts with 100 bytes: both ends ESTABLISHED, the client with the
 *           server's bytes; the client does an RDMA Write with immediate data into a
 *           region of the server's (IBV_WR_RDMA_WRITE_WITH_IMM: both ends are qpip, so
 *           the connection agreed to it): its send completes IBV_WC_RDMA_WRITE, the
 *           server's receive IBV_WC_RECV_RDMA_WITH_IMM with the very imm_data bytes, and
 *           the region holds the written bytes; then the client disconnects:
 *           DISCONNECTED on both ends
 *   drop    the server destroys the request's id unanswered: the client's connect ends
 *           REJECTED
 * Each step prints "KEY VALUE" lines (an event's name, a length, "ok" or what differed);
 * the test decides what is right. Every wait is bounded (10 s; the whole run 60 s). The
 * exit status is 0 unless the setup failed.
 *
 *   qpip-cm-check --write-imm-to ADDR PORT
 *
 * Only a client, of a server elsewhere that accepts any connection (rping's, on siw): it
 * connects, posts one RDMA Write with immediate data and tells how it completes (towards
 * a peer that is not qpip the connection did not agree to immediate data), then
 * disconnects.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>

#include "say.h"

#define CLIENT_PD_LEN 200
#define SERVER_PD_LEN 100
#define WAIT_MS 10000
#define WRITE_LEN 3000
/* The immediate data's bytes, each different, so that a swap shows. */
static const unsigned char IMM_BYTES[4] = { 0xa1, 0xb2, 0xc3, 0xd4 };


/* What one event said, copied before it is acknowledged. */
struct seen {
	enum rdma_cm_event_type type;
	int status;
	struct rdma_cm_id *id;		/* the event's id (a request's new id) */
	unsigned char pd[256];
	unsigned int pd_len;
};

/* The next event on @ch within WAIT_MS: 0, or -1 (nothing came; "timeout" told). */
static int next_event(struct rdma_event_channel *ch, const char *key, struct seen *s)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *e;

	if (poll(&p, 1, WAIT_MS) != 1 || rdma_get_cm_event(ch, &e)) {
		say(key, "timeout");
		return -1;
	}
	s->type = e->event;
	s->status = e->status;
	s->id = e->id;
	s->pd_len = 0;
	if (e->param.conn.private_data && e->param.conn.private_data_len) {
		s->pd_len = e->param.conn.private_data_len;
		if (s->pd_len > sizeof(s->pd))
			s->pd_len = sizeof(s->pd);
		memcpy(s->pd, e->param.conn.private_data, s->pd_len);
	}
	rdma_ack_cm_event(e);
	return 0;
}

/* The next event on @ch, told as @key; 0 if it is @want. */
static int expect(struct rdma_event_channel *ch, const char *key, enum rdma_cm_event_type want,
		  struct seen *s)
{
	if (next_event(ch, key, s))
		return -1;
	say(key, "%s", rdma_event_str(s->type));
	return s->type == want ? 0 : -1;
}

/* Private data @got against @len bytes of pattern @seed: "ok", or what differed. */
static void check_pd(const char *key, const struct seen *s, unsigned char seed, unsigned int len)
{
	unsigned int i;

	if (s->pd_len < len) {
		say(key, "short %u", s->pd_len);
		return;
	}
	for (i = 0; i < len; i++)
		if (s->pd[i] != (unsigned char)(seed + i)) {
			say(key, "differs at %u", i);
			return;
		}
	say(key, "ok");
}

static void pattern(unsigned char *buf, unsigned char seed, unsigned int len)
{
	unsigned int i;

	for (i = 0; i < len; i++)
		buf[i] = seed + i;
}

static struct rdma_event_channel *server_ch, *client_ch;

/* An RC QP of a few WRs on @id (its device's default PD, CQs of librdmacm's): 0 or -1. */
static int make_qp(struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr attr = {
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
			 .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};

	return rdma_create_qp(id, NULL, &attr);
}
static struct rdma_addrinfo *dst;

/* A client id with a QP, its address and route resolved; NULL (told) on failure. */
static struct rdma_cm_id *client(const char *step)
{
	struct rdma_cm_id *id;
	struct seen s;
	char key[64];

	snprintf(key, sizeof(key), "%s.client_setup", step);
	if (rdma_create_id(client_ch, &id, NULL, RDMA_PS_TCP)) {
		say(key, "create_id %s", strerrorname_np(errno));
		return NULL;
	}
	if (rdma_resolve_addr(id, NULL, dst->ai_dst_addr, 2000) ||
	    expect(client_ch, key, RDMA_CM_EVENT_ADDR_RESOLVED, &s) ||
	    rdma_resolve_route(id, 2000) ||
	    expect(client_ch, key, RDMA_CM_EVENT_ROUTE_RESOLVED, &s)) {
		rdma_destroy_id(id);
		return NULL;
	}
	if (make_qp(id)) {
		say(key, "create_qp %s", strerrorname_np(errno));
		rdma_destroy_id(id);
		return NULL;
	}
	say(key, "ok");
	return id;
}

static void client_free(struct rdma_cm_id *id)
{
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
}

/* The client connects with its private data; the server's request is in @req. */
static int connect_and_request(const char *step, struct rdma_cm_id *id, struct seen *req)
{
	unsigned char pd[CLIENT_PD_LEN];
	struct rdma_conn_param param = {
		.private_data = pd,
		.private_data_len = sizeof(pd),
		.responder_resources = 1,
		.initiator_depth = 1,
	};
	char key[64];

	pattern(pd, 0x10, sizeof(pd));
	snprintf(key, sizeof(key), "%s.connect", step);
	if (rdma_connect(id, &param)) {
		say(key, "%s", strerrorname_np(errno));
		return -1;
	}
	say(key, "ok");
	snprintf(key, sizeof(key), "%s.request", step);
	if (expect(server_ch, key, RDMA_CM_EVENT_CONNECT_REQUEST, req))
		return -1;
	snprintf(key, sizeof(key), "%s.request_pd", step);
	check_pd(key, req, 0x10, CLIENT_PD_LEN);
	return 0;
}

static void step_reject(void)
{
	unsigned char pd[SERVER_PD_LEN];
	struct rdma_cm_id *id = client("reject");
	struct seen req, s;

	if (!id || connect_and_request("reject", id, &req))
		goto out;
	pattern(pd, 0x80, sizeof(pd));
	say("reject.reject", "%s", rdma_reject(req.id, pd, sizeof(pd)) ? strerrorname_np(errno) : "ok");
	rdma_destroy_id(req.id);
	if (next_event(client_ch, "reject.client", &s))
		goto out;
	say("reject.client", "%s", rdma_event_str(s.type));
	say("reject.client_status", "%d", s.status);
	check_pd("reject.client_pd", &s, 0x80, SERVER_PD_LEN);
out:
	if (id)
		client_free(id);
}

/* The next completion on @cq within WAIT_MS: 0, or -1 ("timeout" or the poll's error told). */
static int next_wc(struct ibv_cq *cq, const char *key, struct ibv_wc *wc)
{
	int i, n;

	for (i = 0; i < WAIT_MS; i++) {
		n = ibv_poll_cq(cq, 1, wc);
		if (n == 1)
			return 0;
		if (n < 0) {
			say(key, "poll %d", n);
			return -1;
		}
		usleep(1000);
	}
	say(key, "timeout");
	return -1;
}

/*
 * Over the connection of client @id and server @child: an RDMA Write with immediate data
 * of WRITE_LEN bytes into a region of the server's, with the server's receive posted.
 */
static void write_with_imm(struct rdma_cm_id *id, struct rdma_cm_id *child)
{
	static unsigned char src[WRITE_LEN], dst[WRITE_LEN];
	struct ibv_mr *smr = NULL, *dmr = NULL;
	struct ibv_recv_wr rwr = { .wr_id = 7 }, *bad_rwr;
	struct ibv_send_wr wr = {
		.wr_id = 8,
		.opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
		.send_flags = IBV_SEND_SIGNALED,
		.num_sge = 1,
	}, *bad_wr;
	struct ibv_sge sge;
	struct ibv_wc wc;
	int ret;

	pattern(src, 0x33, sizeof(src));
	memset(dst, 0, sizeof(dst));
	/* The QPs' PD: librdmacm's default one of the device. */
	smr = ibv_reg_mr(id->qp->pd, src, sizeof(src), 0);
	dmr = ibv_reg_mr(child->qp->pd, dst, sizeof(dst),
			 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!smr || !dmr) {
		say("accept.write_imm", "reg_mr %s", strerrorname_np(errno));
		goto out;
	}
	ret = ibv_post_recv(child->qp, &rwr, &bad_rwr);
	if (ret) {
		say("accept.write_imm", "post_recv %s", strerrorname_np(ret));
		goto out;
	}
	sge = (struct ibv_sge){ .addr = (uintptr_t)src, .length = sizeof(src), .lkey = smr->lkey };
	wr.sg_list = &sge;
	wr.wr.rdma.remote_addr = (uintptr_t)dst;
	wr.wr.rdma.rkey = dmr->rkey;
	memcpy(&wr.imm_data, IMM_BYTES, sizeof(wr.imm_data));
	ret = ibv_post_send(id->qp, &wr, &bad_wr);
	say("accept.write_imm", "%s", ret ? strerrorname_np(ret) : "ok");
	if (ret)
		goto out;
	if (next_wc(id->qp->send_cq, "accept.write_imm_send", &wc))
		goto out;
	say("accept.write_imm_send", "%s %s", ibv_wc_status_str(wc.status),
	    wc.opcode == IBV_WC_RDMA_WRITE ? "RDMA_WRITE" : "other opcode");
	if (next_wc(child->qp->recv_cq, "accept.write_imm_recv", &wc))
		goto out;
	say("accept.write_imm_recv", "%s %s%s", ibv_wc_status_str(wc.status),
	    wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM ? "RECV_RDMA_WITH_IMM" : "other opcode",
	    wc.wc_flags & IBV_WC_WITH_IMM ? " WITH_IMM" : "");
	say("accept.write_imm_value", "%s",
	    memcmp(&wc.imm_data, IMM_BYTES, sizeof(IMM_BYTES)) ? "differs" : "ok");
	say("accept.write_imm_data", "%s", memcmp(dst, src, sizeof(src)) ? "differs" : "ok");
out:
	if (smr)
		ibv_dereg_mr(smr);
	if (dmr)
		ibv_dereg_mr(dmr);
}

static void step_accept(void)
{
	unsigned char pd[SERVER_PD_LEN];
	struct rdma_conn_param param = {
		.private_data = pd,
		.private_data_len = sizeof(pd),
		.responder_resources = 1,
		.initiator_depth = 1,
	};
	struct rdma_cm_id *id = client("accept");
	struct rdma_cm_id *child = NULL;
	struct seen req, s;

	if (!id || connect_and_request("accept", id, &req))
		goto out;
	child = req.id;
	if (make_qp(child)) {
		say("accept.accept", "create_qp %s", strerrorname_np(errno));
		goto out;
	}
	pattern(pd, 0x80, sizeof(pd));
	if (rdma_accept(child, &param)) {
		say("accept.accept", "%s", strerrorname_np(errno));
		goto out;
	}
	say("accept.accept", "ok");
	if (expect(client_ch, "accept.client", RDMA_CM_EVENT_ESTABLISHED, &s))
		goto out;
	check_pd("accept.client_pd", &s, 0x80, SERVER_PD_LEN);
	if (expect(server_ch, "accept.server", RDMA_CM_EVENT_ESTABLISHED, &s))
		goto out;
	write_with_imm(id, child);
	say("accept.disconnect", "%s", rdma_disconnect(id) ? strerrorname_np(errno) : "ok");
	expect(client_ch, "accept.client_end", RDMA_CM_EVENT_DISCONNECTED, &s);
	expect(server_ch, "accept.server_end", RDMA_CM_EVENT_DISCONNECTED, &s);
out:
	if (child) {
		rdma_destroy_qp(child);
		rdma_destroy_id(child);
	}
	if (id)
		client_free(id);
}

static void step_drop(void)
{
	struct rdma_cm_id *id = client("drop");
	struct seen req, s;

	if (!id || connect_and_request("drop", id, &req))
		goto out;
	/* Unanswered: the connection manager rejects it as the id goes. */
	rdma_destroy_id(req.id);
	if (next_event(client_ch, "drop.client", &s))
		goto out;
	say("drop.client", "%s", rdma_event_str(s.type));
out:
	if (id)
		client_free(id);
}

/*
 * --write-imm-to: a Write with immediate data on a connection to @addr:@port. Nothing of
 * the Write may reach the peer (its region is not known here: remote address and rkey 0).
 */
static int write_imm_to(const char *addr, const char *port)
{
	struct rdma_addrinfo hints = { .ai_port_space = RDMA_PS_TCP };
	static unsigned char src[64];
	struct ibv_send_wr wr = {
		.wr_id = 9,
		.opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
		.send_flags = IBV_SEND_SIGNALED,
		.num_sge = 1,
	}, *bad_wr;
	struct rdma_conn_param param = { .responder_resources = 1, .initiator_depth = 1 };
	struct rdma_cm_id *id;
	struct ibv_mr *mr;
	struct ibv_sge sge;
	struct ibv_wc wc;
	struct seen s;
	int ret;

	client_ch = rdma_create_event_channel();
	if (!client_ch || rdma_getaddrinfo(addr, port, &hints, &dst)) {
		perror("qpip-cm-check: rdma_getaddrinfo");
		return 1;
	}
	id = client("wimm");
	if (!id)
		return 1;
	if (rdma_connect(id, &param)) {
		say("wimm.connect", "%s", strerrorname_np(errno));
		client_free(id);
		return 1;
	}
	if (expect(client_ch, "wimm.connect", RDMA_CM_EVENT_ESTABLISHED, &s)) {
		client_free(id);
		return 1;
	}
	mr = ibv_reg_mr(id->qp->pd, src, sizeof(src), 0);
	if (!mr) {
		say("wimm.post", "reg_mr %s", strerrorname_np(errno));
		goto out;
	}
	sge = (struct ibv_sge){ .addr = (uintptr_t)src, .length = sizeof(src), .lkey = mr->lkey };
	wr.sg_list = &sge;
	memcpy(&wr.imm_data, IMM_BYTES, sizeof(wr.imm_data));
	ret = ibv_post_send(id->qp, &wr, &bad_wr);
	say("wimm.post", "%s", ret ? strerrorname_np(ret) : "ok");
	if (!ret && !next_wc(id->qp->send_cq, "wimm.send", &wc))
		say("wimm.send", "%s %s", ibv_wc_status_str(wc.status),
		    wc.opcode == IBV_WC_RDMA_WRITE ? "RDMA_WRITE" : "other opcode");
	ibv_dereg_mr(mr);
out:
	say("wimm.disconnect", "%s", rdma_disconnect(id) ? strerrorname_np(errno) : "ok");
	client_free(id);
	return 0;
}

int main(int argc, char **argv)
{
	struct rdma_addrinfo hints = { .ai_port_space = RDMA_PS_TCP }, *src;
	struct rdma_cm_id *listener;

	alarm(60);
	if (argc == 4 && !strcmp(argv[1], "--write-imm-to"))
		return write_imm_to(argv[2], argv[3]);
	if (argc != 3) {
		fprintf(stderr, "usage: qpip-cm-check ADDR PORT | --write-imm-to ADDR PORT\n");
		return 2;
	}
	server_ch = rdma_create_event_channel();
	client_ch = rdma_create_event_channel();
	if (!server_ch || !client_ch) {
		perror("qpip-cm-check: rdma_create_event_channel");
		return 1;
	}
	if (rdma_getaddrinfo(argv[1], argv[2], &hints, &dst)) {
		perror("qpip-cm-check: rdma_getaddrinfo");
		return 1;
	}
	hints.ai_flags = RAI_PASSIVE;
	if (rdma_getaddrinfo(argv[1], argv[2], &hints, &src) ||
	    rdma_create_id(server_ch, &listener, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(listener, src->ai_src_addr) || rdma_listen(listener, 4)) {
		perror("qpip-cm-check: listen");
		return 1;
	}
	say("listen", "ok");
	step_reject();
	step_accept();
	step_drop();
	rdma_destroy_id(listener);
	rdma_freeaddrinfo(src);
	rdma_freeaddrinfo(dst);
	rdma_destroy_event_channel(client_ch);
	rdma_destroy_event_channel(server_ch);
	return 0;
}
