/* SPDX-License-Identifier: GPL-2.0 */
/*
 * qpip: what qpip.ko gives qpip_ib.ko, the RDMA stack's view of a function.
 *
 * Each function that probed has an auxiliary device "qpip.rdma.N" (N as in qpipN);
 * qpip_ib.ko is the auxiliary driver that binds it and registers an ib_device. The
 * auxiliary device is deleted first when the function is removed, while the admin queue
 * still runs, so qpip_ib tears its ib_device (and every user context) down against a live
 * device. qpip.ko never calls into qpip_ib: loading it is optional, and unloading it
 * unbinds every function's ib_device.
 *
 * qpip_ib uses the driver's own structures (qpip.h, qpip_ctx.h, qpip_netdev.h) and calls
 * the functions qpip.ko exports: qpip_ctx_create and qpip_ctx_destroy, the same contexts
 * /dev/qpipN's files are.
 */
#ifndef QPIP_AUX_H
#define QPIP_AUX_H

#include <linux/auxiliary_bus.h>

#include "qpip.h"

/* The auxiliary device's name after "qpip.": the driver matches "qpip.rdma". */
#define QPIP_AUX_RDMA_NAME "rdma"

struct qpip_aux_dev {
	struct auxiliary_device adev;
	struct qpip_dev *qdev;		/* valid while the auxiliary device is registered */
};

static inline struct qpip_aux_dev *qpip_aux_from_adev(struct auxiliary_device *adev)
{
	return container_of(adev, struct qpip_aux_dev, adev);
}

/*
 * The function's network interface, or NULL when it has none (its probe failed). Stable
 * while the auxiliary device is bound: the interface is removed after it.
 */
struct net_device *qpip_aux_netdev(struct qpip_dev *qdev);

/* qpip_aux.c, called by probe and remove (qpip_main.c) */
void qpip_aux_add(struct qpip_dev *qdev);
void qpip_aux_del(struct qpip_dev *qdev);

#endif /* QPIP_AUX_H */
