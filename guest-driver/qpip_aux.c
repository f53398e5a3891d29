// SPDX-License-Identifier: GPL-2.0
/*
 * qpip: the auxiliary device of a function, which qpip_ib.ko binds to give the RDMA stack
 * an ib_device (see qpip_aux.h).
 */
#include <linux/slab.h>

#include "qpip_aux.h"
#include "qpip_netdev.h"

static void qpip_aux_release(struct device *dev)
{
	kfree(qpip_aux_from_adev(to_auxiliary_dev(dev)));
}

/*
 * Called by probe once the function works (its network interface made or not). Without
 * the auxiliary device the function still serves /dev/qpipN: a failure is logged only.
 */
void qpip_aux_add(struct qpip_dev *qdev)
{
	struct qpip_aux_dev *aux;
	int ret;

	aux = kzalloc(sizeof(*aux), GFP_KERNEL);
	if (!aux)
		return;
	aux->qdev = qdev;
	aux->adev.name = QPIP_AUX_RDMA_NAME;
	aux->adev.id = qdev->id;
	aux->adev.dev.parent = &qdev->pdev->dev;
	aux->adev.dev.release = qpip_aux_release;
	ret = auxiliary_device_init(&aux->adev);
	if (ret) {
		kfree(aux);
		goto fail;
	}
	ret = auxiliary_device_add(&aux->adev);
	if (ret) {
		auxiliary_device_uninit(&aux->adev);	/* frees aux */
		goto fail;
	}
	qdev->aux = aux;
	return;
fail:
	dev_warn(&qdev->pdev->dev, "%s: no auxiliary device for the RDMA stack: %pe\n",
		 dev_name(&qdev->dev), ERR_PTR(ret));
}

/*
 * Called first by remove: unbinding qpip_ib destroys its user contexts while the admin
 * queue still runs.
 */
void qpip_aux_del(struct qpip_dev *qdev)
{
	struct qpip_aux_dev *aux = qdev->aux;

	if (!aux)
		return;
	qdev->aux = NULL;
	auxiliary_device_delete(&aux->adev);
	auxiliary_device_uninit(&aux->adev);
}

struct net_device *qpip_aux_netdev(struct qpip_dev *qdev)
{
	return qdev->netdev ? qdev->netdev->netdev : NULL;
}
EXPORT_SYMBOL_GPL(qpip_aux_netdev);
