/*
 * Ping-pong over qpip queue pairs from C: UDP between two QPs, then TCP (message
 * framing) through a listener, ROUNDS round trips each over ::1; then the error codes a
 * misused call gets. Exits 0 when every check held.
 *
 *   cc -I guest-lib/capi/include pingpong.c -L target/debug -lqpip -o pingpong
 *   QPIP_PROVIDER=soft ./pingpong [ROUNDS] [PORT]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qpip.h"
#include "check.h"

/*
 * The next two completions of cq, a successful send and a successful receive, in either
 * order (a QP's send and receive queues complete independently: over TCP the answer may
 * arrive with the ACK of the ping, and its receive complete first); returns the receive's.
 */
static struct qpip_completion send_and_recv(struct qpip_cq *cq)
{
	struct qpip_completion recv = { 0 };
	int sends = 0, recvs = 0;
	while (sends + recvs < 2) {
		struct qpip_completion c;
		int n = qpip_cq_wait(cq, &c, 1, 20000);
		CHECK(n);
		EXPECT(n == 1);
		if (c.status != QPIP_WC_SUCCESS ||
		    (c.opcode != QPIP_OP_SEND && c.opcode != QPIP_OP_RECV)) {
			fprintf(stderr, "completion wr_id %llu: opcode %u status %u detail %u\n",
				(unsigned long long)c.wr_id, c.opcode, c.status, c.detail);
			exit(1);
		}
		if (c.opcode == QPIP_OP_SEND) {
			sends++;
		} else {
			recvs++;
			recv = c;
		}
	}
	EXPECT(sends == 1 && recvs == 1);
	return recv;
}

/* ROUNDS round trips between a and b: a sends `i`, b answers from its receive buffer. */
static void pingpong(struct qpip_qp *a, struct qpip_cq *cqa, struct qpip_mr *bufa,
		     const struct qpip_addr *to_b, struct qpip_qp *b, struct qpip_cq *cqb,
		     struct qpip_mr *bufb, const struct qpip_addr *to_a, int rounds, int tcp)
{
	struct qpip_sge sa = { bufa, 0, 64 }, sb = { bufb, 0, 64 };
	for (int i = 0; i < rounds; i++) {
		uint32_t ping = (uint32_t)i * 2654435761u;
		CHECK(qpip_post_recv(b, 1, &sb, 1));
		CHECK(qpip_post_recv(a, 2, &sa, 1));
		CHECK(qpip_post_send_inline(a, 3, &ping, sizeof ping, tcp ? NULL : to_b, (uint32_t)i,
					    tcp ? QPIP_SEND_IMM : 0));
		struct qpip_completion r = next(cqb, QPIP_OP_RECV);
		EXPECT(r.byte_len == sizeof ping);
		if (tcp)
			EXPECT(r.imm == (uint32_t)i);
		else
			EXPECT(r.has_src == 1);
		/* Answer with the same bytes, straight from registered memory. */
		struct qpip_sge back = { bufb, 0, r.byte_len };
		CHECK(qpip_post_send(b, 4, &back, 1, tcp ? NULL : to_a, 0, 0));
		next(cqb, QPIP_OP_SEND);
		struct qpip_completion p = send_and_recv(cqa);
		EXPECT(p.byte_len == sizeof ping);
		EXPECT(memcmp(qpip_mr_data(bufa), &ping, sizeof ping) == 0);
	}
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 100;
	int port = argc > 2 ? atoi(argv[2]) : 7100;
	struct qpip_context *ctx;
	CHECK(qpip_open(&ctx));
	printf("provider %s\n", qpip_provider(ctx) == QPIP_PROVIDER_SOFT ? "soft" : "device");

	struct qpip_cq *cqa, *cqb;
	CHECK(qpip_cq_create(ctx, 16, &cqa));
	CHECK(qpip_cq_create(ctx, 16, &cqb));
	struct qpip_mr *bufa, *bufb;
	CHECK(qpip_mr_alloc(ctx, 4096, &bufa));
	CHECK(qpip_mr_alloc(ctx, 4096, &bufb));
	EXPECT(qpip_mr_len(bufa) == 4096);

	/* UDP */
	struct qpip_qp *ua, *ub;
	CHECK(qpip_qp_create(ctx, QPIP_QP_UDP, cqa, cqa, 0, 0, &ua));
	CHECK(qpip_qp_create(ctx, QPIP_QP_UDP, cqb, cqb, 0, 0, &ub));
	struct qpip_addr lo, to_a, to_b;
	CHECK(qpip_addr_parse("::1", 0, &lo));
	CHECK(qpip_qp_bind(ua, &lo, &to_a));
	CHECK(qpip_qp_bind(ub, &lo, &to_b));
	EXPECT(to_a.port != 0 && to_b.port != 0);
	pingpong(ua, cqa, bufa, &to_b, ub, cqb, bufb, &to_a, rounds, 0);
	printf("udp ping-pong: %d round trips ok\n", rounds);

	/* TCP, message framing: a listener, an accepted QP and a connected one. */
	struct qpip_addr here;
	CHECK(qpip_addr_parse("::1", (uint16_t)port, &here));
	struct qpip_listener *l;
	CHECK(qpip_listen(ctx, &here, 4, &l));
	struct qpip_qp *ta, *tb;
	CHECK(qpip_qp_create(ctx, QPIP_QP_TCP_MESSAGE, cqa, cqa, 16, 16, &ta));
	CHECK(qpip_qp_create(ctx, QPIP_QP_TCP_MESSAGE, cqb, cqb, 16, 16, &tb));
	CHECK(qpip_accept(l, tb, 0xacce));
	CHECK(qpip_qp_connect_wait(ta, &here, 20000));
	struct qpip_event ev = event(ctx, QPIP_EVENT_ACCEPT);
	EXPECT(ev.user_data == 0xacce && ev.has_peer == 1);
	EXPECT(ev.qp == (uint32_t)qpip_qp_id(tb));
	pingpong(ta, cqa, bufa, NULL, tb, cqb, bufb, NULL, rounds, 1);
	printf("tcp ping-pong: %d round trips ok\n", rounds);
	CHECK(qpip_qp_close_wait(ta, 20000));

	/* Misuse gets error codes, not crashes. */
	EXPECT(qpip_cq_create(NULL, 16, &cqa) == QPIP_E_NULL);
	EXPECT(qpip_qp_bind((struct qpip_qp *)cqa, &lo, NULL) == QPIP_E_BAD_HANDLE);
	EXPECT(qpip_cq_create(ctx, 3, &cqa) == QPIP_E_INVALID);
	EXPECT(strlen(qpip_last_error()) > 0);
	EXPECT(qpip_post_send_inline(ua, 9, "x", 1, NULL, 0, 0) == QPIP_E_DESTINATION);
	EXPECT(qpip_qp_connect(ua, &here, 0) == QPIP_E_WRONG_KIND);
	struct qpip_sge big = { bufa, 4000, 200 };
	EXPECT(qpip_post_recv(ua, 9, &big, 1) == QPIP_E_LENGTH);
	EXPECT(qpip_mr_data(NULL) == NULL);
	EXPECT(qpip_qp_create(ctx, 77, cqa, cqa, 0, 0, &ua) == QPIP_E_INVALID);
	EXPECT(strcmp(qpip_strerror(QPIP_E_TIMEDOUT), "timed out") == 0);
	printf("errors ok\n");

	CHECK(qpip_qp_free(ta));
	CHECK(qpip_qp_free(tb));
	CHECK(qpip_listener_free(l));
	CHECK(qpip_qp_free(ua));
	CHECK(qpip_qp_free(ub));
	CHECK(qpip_mr_free(bufa));
	CHECK(qpip_mr_free(bufb));
	CHECK(qpip_cq_free(cqa));
	CHECK(qpip_cq_free(cqb));
	CHECK(qpip_context_free(ctx));
	EXPECT(qpip_context_free(NULL) == QPIP_OK);
	printf("pingpong: all ok\n");
	return 0;
}
