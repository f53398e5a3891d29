// SPDX-License-Identifier: GPL-2.0
/*
 * qpip_ib: queue pairs — not yet. The verbs exist because ib_core counts them as mandatory
 * before the RDMA connection manager attaches to a device (kverbs_provider); each refuses
 * with EOPNOTSUPP until the QP stage makes a QP an iWARP TCP QP of the device context.
 */
#include "qpip_ib.h"

int qpip_ib_create_qp(struct ib_qp *ibqp, struct ib_qp_init_attr *attr, struct ib_udata *udata)
{
	return -EOPNOTSUPP;
}

int qpip_ib_modify_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask,
		      struct ib_udata *udata)
{
	return -EOPNOTSUPP;
}

int qpip_ib_query_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask,
		     struct ib_qp_init_attr *init)
{
	return -EOPNOTSUPP;
}

/* No QP is ever made: nothing to destroy. */
int qpip_ib_destroy_qp(struct ib_qp *ibqp, struct ib_udata *udata)
{
	return 0;
}

int qpip_ib_post_send(struct ib_qp *ibqp, const struct ib_send_wr *wr,
		      const struct ib_send_wr **bad_wr)
{
	*bad_wr = wr;
	return -EOPNOTSUPP;
}

int qpip_ib_post_recv(struct ib_qp *ibqp, const struct ib_recv_wr *wr,
		      const struct ib_recv_wr **bad_wr)
{
	*bad_wr = wr;
	return -EOPNOTSUPP;
}
