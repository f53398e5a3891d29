/*
 * iWARP (RDMA over TCP) from C, between two QPs of one context over ::1: a listener
 * answers the MPA request with its private data, the initiator connects with its own and
 * asks for CRCs; each end sends the other where its region is (a qpip_remote, the
 * responder's in a solicited Send); then the initiator RDMA-Writes into the responder's
 * region, where a tripwire on the last bytes written fires once, and RDMA-Reads another
 * part of it back.
 *
 * iWARP needs the qpip device. On the software provider the example checks instead that
 * an iWARP QP, a region with remote rights and a tripwire are refused (QPIP_E_UNSUPPORTED).
 * On either, it first checks the error codes of misused iWARP and tripwire calls. Exits 0 when every check held.
 *
 *   cc -I guest-lib/capi/include iwarp.c -L target/debug -lqpip -o iwarp
 *   ./iwarp [PORT]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qpip.h"
#include "check.h"

/* `call` fails with `code` and leaves a message. */
#define FAILS(call, code)                                                             \
	do {                                                                          \
		int rc_ = (call);                                                     \
		if (rc_ != (code) || strlen(qpip_last_error()) == 0) {                \
			fprintf(stderr, "%s:%d: %s gave %d (%s), expected %s\n", __FILE__, \
				__LINE__, #call, rc_, qpip_last_error(), #code);      \
			exit(1);                                                      \
		}                                                                     \
	} while (0)

static const char INITIATOR_PD[] = "initiator says hello";
static const char RESPONDER_PD[] = "responder says hello";

/* The error codes of iWARP calls on QPs of other kinds and of bad arguments: the same on
 * either provider. */
static void misuse(struct qpip_context *ctx, const struct qpip_addr *here)
{
	struct qpip_cq *cq;
	CHECK(qpip_cq_create(ctx, 16, &cq));
	struct qpip_mr *buf;
	CHECK(qpip_mr_alloc(ctx, 4096, &buf));
	struct qpip_qp *udp, *tcp, *idle;
	CHECK(qpip_qp_create(ctx, QPIP_QP_UDP, cq, cq, 0, 0, &udp));
	CHECK(qpip_qp_create(ctx, QPIP_QP_TCP_MESSAGE, cq, cq, 0, 0, &tcp));
	CHECK(qpip_qp_create(ctx, QPIP_QP_TCP_MESSAGE, cq, cq, 0, 0, &idle));
	struct qpip_addr lo, udp_addr;
	CHECK(qpip_addr_parse("::1", 0, &lo));
	CHECK(qpip_qp_bind(udp, &lo, &udp_addr));
	struct qpip_listener *l;
	CHECK(qpip_listen(ctx, here, 4, &l));

	/* Regions: rights, keys and remote addresses. */
	struct qpip_mr *mr = NULL;
	FAILS(qpip_mr_alloc_remote(NULL, 4096, QPIP_ACCESS_REMOTE_READ, &mr), QPIP_E_NULL);
	FAILS(qpip_mr_alloc_remote(ctx, 4096, QPIP_ACCESS_REMOTE_READ, NULL), QPIP_E_NULL);
	FAILS(qpip_mr_alloc_remote(ctx, 4096, 0x80, &mr), QPIP_E_INVALID);
	FAILS(qpip_mr_alloc_remote(ctx, 0, QPIP_ACCESS_REMOTE_WRITE, &mr), QPIP_E_INVALID);
	EXPECT(mr == NULL);
	EXPECT(qpip_mr_rkey(buf) == 0);
	EXPECT(qpip_mr_rkey(NULL) == 0);
	EXPECT(qpip_mr_rkey((struct qpip_mr *)cq) == 0);
	struct qpip_remote r;
	FAILS(qpip_mr_remote(buf, 0, &r), QPIP_E_INVALID); /* no remote right */
	FAILS(qpip_mr_remote(buf, 4097, &r), QPIP_E_LENGTH);
	FAILS(qpip_mr_remote(buf, 0, NULL), QPIP_E_NULL);
	FAILS(qpip_mr_remote(NULL, 0, &r), QPIP_E_NULL);

	/* RDMA Writes, Reads and solicited Sends need an iWARP QP. */
	struct qpip_remote to = { 0x1000, 0x1234 };
	struct qpip_sge sge = { buf, 0, 64 };
	FAILS(qpip_post_rdma_write(udp, 1, &sge, 1, &to), QPIP_E_WRONG_KIND);
	FAILS(qpip_post_rdma_write(tcp, 1, &sge, 1, &to), QPIP_E_WRONG_KIND);
	FAILS(qpip_post_rdma_read(udp, 2, &sge, 1, &to), QPIP_E_WRONG_KIND);
	FAILS(qpip_post_rdma_read(tcp, 2, &sge, 1, &to), QPIP_E_WRONG_KIND);
	FAILS(qpip_post_rdma_write(tcp, 1, &sge, 1, NULL), QPIP_E_NULL);
	FAILS(qpip_post_rdma_read(tcp, 2, &sge, 1, NULL), QPIP_E_NULL);
	FAILS(qpip_post_rdma_write(NULL, 1, &sge, 1, &to), QPIP_E_NULL);
	FAILS(qpip_post_rdma_read((struct qpip_qp *)buf, 2, &sge, 1, &to), QPIP_E_BAD_HANDLE);
	FAILS(qpip_post_send(tcp, 3, &sge, 1, NULL, 0, QPIP_SEND_SOLICITED), QPIP_E_WRONG_KIND);
	FAILS(qpip_post_send_inline(udp, 3, "x", 1, &udp_addr, 0, QPIP_SEND_SOLICITED),
	      QPIP_E_WRONG_KIND);
	FAILS(qpip_post_send(tcp, 3, &sge, 1, NULL, 0, 0x80), QPIP_E_INVALID);

	/* MPA parameters are checked before anything happens. */
	struct qpip_mpa mpa;
	FAILS(qpip_mpa_init(NULL), QPIP_E_NULL);
	CHECK(qpip_mpa_init(&mpa));
	EXPECT(mpa.private_data == NULL && mpa.pd_len == 0 && mpa.flags == 0);
	EXPECT(mpa.ird == 8 && mpa.ord == 8);
	static uint8_t too_much[QPIP_MPA_MAX_PRIVATE_DATA + 1];
	struct qpip_mpa bad = mpa;
	bad.private_data = too_much;
	bad.pd_len = sizeof too_much;
	FAILS(qpip_qp_connect_mpa(tcp, here, &bad, 0), QPIP_E_INVALID);
	FAILS(qpip_accept_mpa(l, idle, &bad, 0), QPIP_E_INVALID);
	bad.private_data = NULL;
	bad.pd_len = 4;
	FAILS(qpip_qp_connect_mpa_wait(tcp, here, &bad, 1000), QPIP_E_NULL);
	bad = mpa;
	bad.ord = QPIP_MPA_MAX_IRD_ORD + 1;
	FAILS(qpip_accept_mpa_wait(l, idle, &bad, 1000, NULL), QPIP_E_INVALID);
	bad = mpa;
	bad.flags = 0x100;
	FAILS(qpip_qp_connect_mpa(tcp, here, &bad, 0), QPIP_E_INVALID);
	FAILS(qpip_qp_connect_mpa(tcp, here, NULL, 0), QPIP_E_NULL);
	FAILS(qpip_qp_connect_mpa(tcp, NULL, &mpa, 0), QPIP_E_NULL);
	FAILS(qpip_accept_mpa(NULL, idle, &mpa, 0), QPIP_E_NULL);
	FAILS(qpip_accept_mpa(l, NULL, &mpa, 0), QPIP_E_NULL);
	FAILS(qpip_accept_mpa_wait((struct qpip_listener *)cq, idle, &mpa, 1000, NULL),
	      QPIP_E_BAD_HANDLE);

	/* ... and then only an iWARP QP gets an MPA setup or has what it agreed. */
	mpa.private_data = (const uint8_t *)INITIATOR_PD;
	mpa.pd_len = sizeof INITIATOR_PD;
	mpa.flags = QPIP_MPA_CRC;
	FAILS(qpip_qp_connect_mpa(tcp, here, &mpa, 0), QPIP_E_WRONG_KIND);
	FAILS(qpip_qp_connect_mpa(udp, here, &mpa, 0), QPIP_E_WRONG_KIND);
	FAILS(qpip_qp_connect_mpa_wait(tcp, here, &mpa, 1000), QPIP_E_WRONG_KIND);
	FAILS(qpip_accept_mpa(l, idle, &mpa, 0), QPIP_E_WRONG_KIND);
	FAILS(qpip_accept_mpa_wait(l, idle, &mpa, 1000, NULL), QPIP_E_WRONG_KIND);
	struct qpip_conn_info info;
	FAILS(qpip_qp_conn_info(tcp, &info), QPIP_E_WRONG_KIND);
	FAILS(qpip_qp_conn_info(tcp, NULL), QPIP_E_NULL);
	FAILS(qpip_qp_conn_info(NULL, &info), QPIP_E_NULL);

	/* Tripwires: handles and the range are checked before the provider is asked. */
	struct qpip_context *other;
	CHECK(qpip_open(&other));
	struct qpip_cq *ocq;
	CHECK(qpip_cq_create(other, 4, &ocq));
	struct qpip_mr *omr;
	CHECK(qpip_mr_alloc(other, 4096, &omr));
	struct qpip_tripwire *tw = NULL;
	FAILS(qpip_tripwire_create(NULL, buf, 0, 8, cq, 1, &tw), QPIP_E_NULL);
	FAILS(qpip_tripwire_create(ctx, NULL, 0, 8, cq, 1, &tw), QPIP_E_NULL);
	FAILS(qpip_tripwire_create(ctx, buf, 0, 8, NULL, 1, &tw), QPIP_E_NULL);
	FAILS(qpip_tripwire_create(ctx, buf, 0, 8, cq, 1, NULL), QPIP_E_NULL);
	FAILS(qpip_tripwire_create(ctx, (struct qpip_mr *)cq, 0, 8, cq, 1, &tw),
	      QPIP_E_BAD_HANDLE);
	FAILS(qpip_tripwire_create(ctx, buf, 0, 8, (struct qpip_cq *)buf, 1, &tw),
	      QPIP_E_BAD_HANDLE);
	FAILS(qpip_tripwire_create(ctx, omr, 0, 8, cq, 1, &tw), QPIP_E_FOREIGN);
	FAILS(qpip_tripwire_create(ctx, buf, 0, 8, ocq, 1, &tw), QPIP_E_FOREIGN);
	FAILS(qpip_tripwire_create(ctx, buf, 0, 0, cq, 1, &tw), QPIP_E_INVALID);
	FAILS(qpip_tripwire_create(ctx, buf, 4090, 8, cq, 1, &tw), QPIP_E_LENGTH);
	FAILS(qpip_tripwire_create(ctx, buf, SIZE_MAX, 2, cq, 1, &tw), QPIP_E_LENGTH);
	EXPECT(tw == NULL);
	FAILS(qpip_tripwire_arm(NULL), QPIP_E_NULL);
	FAILS(qpip_tripwire_arm((struct qpip_tripwire *)cq), QPIP_E_BAD_HANDLE);
	FAILS(qpip_tripwire_id(NULL), QPIP_E_NULL);
	FAILS(qpip_tripwire_id((struct qpip_tripwire *)buf), QPIP_E_BAD_HANDLE);
	FAILS(qpip_tripwire_free((struct qpip_tripwire *)l), QPIP_E_BAD_HANDLE);
	CHECK(qpip_tripwire_free(NULL));
	CHECK(qpip_mr_free(omr));
	CHECK(qpip_cq_free(ocq));
	CHECK(qpip_context_free(other));

	/* Nothing of the above queued work or events. */
	struct qpip_completion c;
	EXPECT(qpip_cq_poll(cq, &c, 1) == 0);
	struct qpip_event ev;
	EXPECT(qpip_wait_event(ctx, &ev, 0) == 0);

	CHECK(qpip_listener_free(l));
	CHECK(qpip_qp_free(udp));
	CHECK(qpip_qp_free(tcp));
	CHECK(qpip_qp_free(idle));
	CHECK(qpip_mr_free(buf));
	CHECK(qpip_cq_free(cq));
	printf("iwarp misuse: error codes ok\n");
}

/* The software provider has no iWARP: it refuses plainly. */
static void refused(struct qpip_context *ctx)
{
	struct qpip_cq *cq;
	CHECK(qpip_cq_create(ctx, 16, &cq));
	struct qpip_qp *qp = NULL;
	FAILS(qpip_qp_create(ctx, QPIP_QP_TCP_IWARP, cq, cq, 0, 0, &qp), QPIP_E_UNSUPPORTED);
	EXPECT(qp == NULL);
	struct qpip_mr *mr = NULL;
	FAILS(qpip_mr_alloc_remote(ctx, 4096, QPIP_ACCESS_REMOTE_READ, &mr), QPIP_E_UNSUPPORTED);
	FAILS(qpip_mr_alloc_remote(ctx, 4096, QPIP_ACCESS_REMOTE_WRITE, &mr), QPIP_E_UNSUPPORTED);
	FAILS(qpip_mr_alloc_remote(ctx, 4096, QPIP_ACCESS_REMOTE_READ | QPIP_ACCESS_REMOTE_WRITE,
				   &mr),
	      QPIP_E_UNSUPPORTED);
	EXPECT(mr == NULL);
	/* No rights asked: a plain region, as qpip_mr_alloc() makes. */
	CHECK(qpip_mr_alloc_remote(ctx, 4096, 0, &mr));
	EXPECT(qpip_mr_len(mr) == 4096 && qpip_mr_rkey(mr) == 0);
	/* Good arguments for a tripwire: nothing places data here to watch. */
	struct qpip_tripwire *tw = NULL;
	FAILS(qpip_tripwire_create(ctx, mr, 0, 8, cq, 1, &tw), QPIP_E_UNSUPPORTED);
	EXPECT(tw == NULL);
	CHECK(qpip_mr_free(mr));
	CHECK(qpip_cq_free(cq));
	printf("iwarp on the software provider: refused ok\n");
}

/* Sends where `mr` is, from a region peers may reach, as one inline Send. */
static void send_remote(struct qpip_qp *qp, struct qpip_mr *mr, uint32_t flags)
{
	struct qpip_remote r;
	memset(&r, 0, sizeof r); /* no uninitialised padding on the wire */
	CHECK(qpip_mr_remote(mr, 0, &r));
	EXPECT(r.rkey == qpip_mr_rkey(mr) && r.rkey != 0);
	CHECK(qpip_post_send_inline(qp, 10, &r, sizeof r, NULL, 0, flags));
}

/* The qpip_remote a receive completion `c` brought into `msg`. */
static struct qpip_remote got_remote(struct qpip_mr *msg, const struct qpip_completion *c)
{
	struct qpip_remote r;
	EXPECT(c->byte_len == sizeof r);
	memcpy(&r, qpip_mr_data(msg), sizeof r);
	return r;
}

/* The exchange on the device (see the top of the file). */
static void exchange(struct qpip_context *ctx, const struct qpip_addr *here)
{
	/* a's receives complete on a CQ of their own, so that its send-queue completions
	 * (Sends, RDMA Writes and Reads) come in the order posted on cqa. */
	struct qpip_cq *cqa, *cqar, *cqb;
	CHECK(qpip_cq_create(ctx, 16, &cqa));
	CHECK(qpip_cq_create(ctx, 16, &cqar));
	CHECK(qpip_cq_create(ctx, 16, &cqb));
	struct qpip_mr *ra, *rb, *msga, *msgb;
	uint32_t rw = QPIP_ACCESS_REMOTE_READ | QPIP_ACCESS_REMOTE_WRITE;
	CHECK(qpip_mr_alloc_remote(ctx, 4096, rw, &ra));
	CHECK(qpip_mr_alloc_remote(ctx, 4096, rw, &rb));
	CHECK(qpip_mr_alloc(ctx, 256, &msga));
	CHECK(qpip_mr_alloc(ctx, 256, &msgb));
	struct qpip_qp *a, *b;
	CHECK(qpip_qp_create(ctx, QPIP_QP_TCP_IWARP, cqa, cqar, 16, 16, &a));
	CHECK(qpip_qp_create(ctx, QPIP_QP_TCP_IWARP, cqb, cqb, 16, 16, &b));

	/* Setup: each end's private data reaches the other; CRC is on when one asks. */
	struct qpip_listener *l;
	CHECK(qpip_listen(ctx, here, 4, &l));
	struct qpip_mpa mb, ma;
	CHECK(qpip_mpa_init(&mb));
	mb.private_data = (const uint8_t *)RESPONDER_PD;
	mb.pd_len = sizeof RESPONDER_PD;
	CHECK(qpip_accept_mpa(l, b, &mb, 0xacce));
	CHECK(qpip_mpa_init(&ma));
	ma.private_data = (const uint8_t *)INITIATOR_PD;
	ma.pd_len = sizeof INITIATOR_PD;
	ma.flags = QPIP_MPA_CRC;
	ma.ird = ma.ord = 4;
	CHECK(qpip_qp_connect_mpa_wait(a, here, &ma, 20000));
	struct qpip_event ev = event(ctx, QPIP_EVENT_ACCEPT);
	EXPECT(ev.user_data == 0xacce && ev.qp == (uint32_t)qpip_qp_id(b));
	struct qpip_conn_info ia, ib;
	CHECK(qpip_qp_conn_info(a, &ia));
	CHECK(qpip_qp_conn_info(b, &ib));
	EXPECT(ia.pd_len == sizeof RESPONDER_PD && memcmp(ia.private_data, RESPONDER_PD, ia.pd_len) == 0);
	EXPECT(ib.pd_len == sizeof INITIATOR_PD && memcmp(ib.private_data, INITIATOR_PD, ib.pd_len) == 0);
	EXPECT(ia.crc == 1 && ib.crc == 1 && ia.rejected == 0 && ia.has_terminate == 0);
	EXPECT(ia.ord >= 1 && ia.ord <= 4 && ib.ird >= 1);
	printf("iwarp setup: MPA revision %u, IRD/ORD %u/%u, private data both ways ok\n",
	       ia.revision, ia.ird, ia.ord);

	/* Where each region is: the initiator speaks first (MPA's rule), the responder
	 * answers with a solicited Send. */
	struct qpip_sge sa = { msga, 0, 256 }, sb = { msgb, 0, 256 };
	CHECK(qpip_post_recv(a, 1, &sa, 1));
	CHECK(qpip_post_recv(b, 2, &sb, 1));
	send_remote(a, ra, 0);
	struct qpip_completion c = next(cqb, QPIP_OP_RECV);
	EXPECT(c.solicited == 0);
	struct qpip_remote at_a = got_remote(msgb, &c);
	send_remote(b, rb, QPIP_SEND_SOLICITED);
	next(cqb, QPIP_OP_SEND);
	next(cqa, QPIP_OP_SEND);
	c = next(cqar, QPIP_OP_RECV);
	EXPECT(c.solicited == 1);
	struct qpip_remote at_b = got_remote(msga, &c);
	EXPECT(at_a.rkey == qpip_mr_rkey(ra));

	/* RDMA Write: 1000 bytes of a's region into b's at offset 0; nothing completes on b
	 * but the armed tripwire on the last 8 bytes written, once. */
	uint8_t *pa = qpip_mr_data(ra), *pb = qpip_mr_data(rb);
	struct qpip_cq *cqt;
	CHECK(qpip_cq_create(ctx, 4, &cqt));
	struct qpip_tripwire *tw;
	CHECK(qpip_tripwire_create(ctx, rb, 992, 8, cqt, 0x7e, &tw));
	CHECK(qpip_tripwire_arm(tw));
	for (int i = 0; i < 1000; i++)
		pa[i] = (uint8_t)(i * 7 + 1);
	struct qpip_sge wsg = { ra, 0, 1000 };
	CHECK(qpip_post_rdma_write(a, 20, &wsg, 1, &at_b));
	c = next(cqa, QPIP_OP_RDMA_WRITE);
	EXPECT(c.wr_id == 20);
	EXPECT(memcmp(pb, pa, 1000) == 0);
	EXPECT(qpip_cq_poll(cqb, &c, 1) == 0);
	c = next(cqt, QPIP_OP_TRIPWIRE);
	EXPECT(c.wr_id == 0x7e && c.qp == (uint32_t)qpip_tripwire_id(tw) && c.byte_len == 8);
	EXPECT(c.addr == (uint64_t)(uintptr_t)(pb + 992));
	/* Not armed again: the same write once more fires nothing. */
	CHECK(qpip_post_rdma_write(a, 22, &wsg, 1, &at_b));
	next(cqa, QPIP_OP_RDMA_WRITE);
	EXPECT(qpip_cq_poll(cqt, &c, 1) == 0);
	CHECK(qpip_tripwire_free(tw));
	CHECK(qpip_cq_free(cqt));
	printf("iwarp tripwire: one event per arm ok\n");

	/* RDMA Read: 500 bytes at offset 2000 of b's region into a's at offset 3000. */
	for (int i = 0; i < 500; i++)
		pb[2000 + i] = (uint8_t)(i * 13 + 5);
	struct qpip_remote from = at_b;
	from.addr += 2000;
	struct qpip_sge rsg = { ra, 3000, 500 };
	CHECK(qpip_post_rdma_read(a, 21, &rsg, 1, &from));
	c = next(cqa, QPIP_OP_RDMA_READ);
	EXPECT(c.wr_id == 21 && c.byte_len == 500);
	EXPECT(memcmp(pa + 3000, pb + 2000, 500) == 0);
	printf("iwarp rdma: write and read ok\n");

	CHECK(qpip_qp_close_wait(a, 20000));
	CHECK(qpip_qp_free(a));
	CHECK(qpip_qp_free(b));
	CHECK(qpip_listener_free(l));
	CHECK(qpip_mr_free(ra));
	CHECK(qpip_mr_free(rb));
	CHECK(qpip_mr_free(msga));
	CHECK(qpip_mr_free(msgb));
	CHECK(qpip_cq_free(cqa));
	CHECK(qpip_cq_free(cqar));
	CHECK(qpip_cq_free(cqb));
}

int main(int argc, char **argv)
{
	int port = argc > 1 ? atoi(argv[1]) : 7101;
	struct qpip_context *ctx;
	CHECK(qpip_open(&ctx));
	int soft = qpip_provider(ctx) == QPIP_PROVIDER_SOFT;
	printf("provider %s\n", soft ? "soft" : "device");
	struct qpip_addr here;
	CHECK(qpip_addr_parse("::1", (uint16_t)port, &here));

	misuse(ctx, &here);
	if (soft)
		refused(ctx);
	else
		exchange(ctx, &here);

	CHECK(qpip_context_free(ctx));
	printf("iwarp: all ok\n");
	return 0;
}
