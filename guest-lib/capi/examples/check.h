/*
 * What the C examples share: checks that end the program with the failed call, its line
 * and the library's message, and the waits for one successful completion or connection
 * event.
 * Included by each example (the quotes find it beside the example's source).
 */
#ifndef QPIP_EXAMPLE_CHECK_H
#define QPIP_EXAMPLE_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include "qpip.h"

#define CHECK(call)                                                                   \
	do {                                                                          \
		int rc_ = (call);                                                     \
		if (rc_ < 0) {                                                        \
			fprintf(stderr, "%s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call, \
				qpip_strerror(rc_), qpip_last_error());               \
			exit(1);                                                      \
		}                                                                     \
	} while (0)

#define EXPECT(cond)                                                                  \
	do {                                                                          \
		if (!(cond)) {                                                        \
			fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond); \
			exit(1);                                                      \
		}                                                                     \
	} while (0)

/* The next completion of cq, which must be a successful `opcode`. */
static struct qpip_completion next(struct qpip_cq *cq, uint32_t opcode)
{
	struct qpip_completion c;
	int n = qpip_cq_wait(cq, &c, 1, 20000);
	CHECK(n);
	EXPECT(n == 1);
	if (c.status != QPIP_WC_SUCCESS || c.opcode != opcode) {
		fprintf(stderr, "completion wr_id %llu: opcode %u status %u detail %#x\n",
			(unsigned long long)c.wr_id, c.opcode, c.status, c.detail);
		exit(1);
	}
	return c;
}

/* The next connection event of `kind`, which must have succeeded. */
static struct qpip_event event(struct qpip_context *ctx, uint32_t kind)
{
	struct qpip_event ev;
	int got;
	do {
		got = qpip_wait_event(ctx, &ev, 20000);
		CHECK(got);
		EXPECT(got == 1);
	} while (ev.kind != kind);
	EXPECT(ev.status == 0);
	return ev;
}

#endif
