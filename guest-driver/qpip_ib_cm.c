// SPDX-License-Identifier: GPL-2.0
/*
 * qpip_ib: the iWARP connection manager's ops — not offered yet, but present, because the
 * kernel's iw_cm calls them without looking whether a driver has them.
 *
 * Today they are not reached: rdma_cm attaches only to devices that have every verb
 * ib_core counts as mandatory for kernel users (create_qp, create_cq, reg_user_mr,
 * get_dma_mr...; device.c's kverbs_provider), which this device does not have yet, so an
 * rdma_cm program (rping) finds no RDMA device for qpipN's addresses (rdma_bind_addr or
 * address resolution fails with ENODEV). Once the QP, CQ and MR stages add those ops,
 * rdma_cm attaches, and until the CM stage replaces these, they keep it from calling NULL:
 *
 * A listen on a wildcard address reaches every iWARP device; it is accepted here and
 * listens on nothing, so a program listening on all addresses still listens on the other
 * devices (a failure would fail its listen everywhere). Connections to qpipN's addresses
 * meet the device's own TCP, where no one listens. A listen on one of qpipN's addresses,
 * a connect or an accept fails with EOPNOTSUPP; no QP of this device exists for the CM to
 * name (iw_get_qp finds none), so a connect or accept fails before it reaches a driver op.
 */
#include <linux/in.h>
#include <linux/in6.h>
#include <net/ipv6.h>
#include <rdma/iw_cm.h>

#include "qpip_ib.h"

static bool qpip_ib_addr_any(const struct sockaddr_storage *ss)
{
	switch (ss->ss_family) {
	case AF_INET:
		return ((const struct sockaddr_in *)ss)->sin_addr.s_addr == htonl(INADDR_ANY);
	case AF_INET6:
		return ipv6_addr_any(&((const struct sockaddr_in6 *)ss)->sin6_addr);
	default:
		return false;
	}
}

int qpip_ib_iw_create_listen(struct iw_cm_id *cm_id, int backlog)
{
	return qpip_ib_addr_any(&cm_id->local_addr) ? 0 : -EOPNOTSUPP;
}

int qpip_ib_iw_destroy_listen(struct iw_cm_id *cm_id)
{
	return 0;
}

int qpip_ib_iw_connect(struct iw_cm_id *cm_id, struct iw_cm_conn_param *param)
{
	return -EOPNOTSUPP;
}

int qpip_ib_iw_accept(struct iw_cm_id *cm_id, struct iw_cm_conn_param *param)
{
	return -EOPNOTSUPP;
}

/* No connection request is ever delivered, so there is none to reject. */
int qpip_ib_iw_reject(struct iw_cm_id *cm_id, const void *pdata, u8 pdata_len)
{
	return -EOPNOTSUPP;
}

struct ib_qp *qpip_ib_iw_get_qp(struct ib_device *ibdev, int qpn)
{
	return NULL;
}

/* Called only on a QP iw_get_qp found: never, for now. */
void qpip_ib_iw_add_ref(struct ib_qp *qp)
{
}

void qpip_ib_iw_rem_ref(struct ib_qp *qp)
{
}
