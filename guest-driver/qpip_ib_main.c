// SPDX-License-Identifier: GPL-2.0
/*
 * qpip_ib: the RDMA stack's view of qpip functions — an iWARP ib_device per function,
 * registered when this module binds the function's auxiliary device (qpip_aux.h) and
 * unregistered when it is unbound: the function removed, or this module unloaded. The
 * ib_device is an RNIC with one port, the function's network interface qpipN, whose MAC
 * is its GID (the interface's changes are the port's events); its user contexts are
 * device contexts (qpip_ib_verbs.c).
 *
 * Loaded on demand (it pulls in ib_core and ib_uverbs, which a guest that does not use
 * RDMA need not pay for). Unloading it with user contexts open disassociates them: their
 * device contexts are destroyed, and their uverbs files fail with EIO until closed.
 */
#include <linux/module.h>
#include <linux/netdevice.h>
#include <linux/rtnetlink.h>
#include <net/addrconf.h>

#include "qpip_ib.h"

static const struct ib_device_ops qpip_ib_dev_ops = {
	.owner = THIS_MODULE,
	/* Out of tree: no driver id of the kernel's is ours. The provider matches by PCI id. */
	.driver_id = RDMA_DRIVER_UNKNOWN,
	.uverbs_abi_ver = QPIP_IB_ABI_VERSION,

	.query_device = qpip_ib_query_device,
	.query_port = qpip_ib_query_port,
	.query_gid = qpip_ib_query_gid,
	.get_port_immutable = qpip_ib_get_port_immutable,
	.get_dev_fw_str = qpip_ib_get_dev_fw_str,
	.alloc_ucontext = qpip_ib_alloc_ucontext,
	.dealloc_ucontext = qpip_ib_dealloc_ucontext,
	/* Its presence lets uverbs tear user contexts down at unregistration. */
	.disassociate_ucontext = qpip_ib_disassociate_ucontext,
	.mmap = qpip_ib_mmap,
	.mmap_free = qpip_ib_mmap_free,
	.alloc_pd = qpip_ib_alloc_pd,
	.dealloc_pd = qpip_ib_dealloc_pd,
	.create_cq = qpip_ib_create_cq,
	.destroy_cq = qpip_ib_destroy_cq,
	.poll_cq = qpip_ib_poll_cq,
	.req_notify_cq = qpip_ib_req_notify_cq,
	.get_dma_mr = qpip_ib_get_dma_mr,
	.reg_user_mr = qpip_ib_reg_user_mr,
	.dereg_mr = qpip_ib_dereg_mr,
	.create_qp = qpip_ib_create_qp,
	.modify_qp = qpip_ib_modify_qp,
	.query_qp = qpip_ib_query_qp,
	.destroy_qp = qpip_ib_destroy_qp,
	.post_send = qpip_ib_post_send,
	.post_recv = qpip_ib_post_recv,

	/* iw_cm calls these unchecked: they must exist (qpip_ib_cm.c). */
	.iw_create_listen = qpip_ib_iw_create_listen,
	.iw_destroy_listen = qpip_ib_iw_destroy_listen,
	.iw_connect = qpip_ib_iw_connect,
	.iw_accept = qpip_ib_iw_accept,
	.iw_reject = qpip_ib_iw_reject,
	.iw_get_qp = qpip_ib_iw_get_qp,
	.iw_add_ref = qpip_ib_iw_add_ref,
	.iw_rem_ref = qpip_ib_iw_rem_ref,

	INIT_RDMA_OBJ_SIZE(ib_ucontext, qpip_ib_ucontext, ibuc),
	INIT_RDMA_OBJ_SIZE(ib_pd, qpip_ib_pd, ibpd),
	INIT_RDMA_OBJ_SIZE(ib_cq, qpip_ib_cq, ibcq),
	INIT_RDMA_OBJ_SIZE(ib_qp, qpip_ib_qp, ibqp),
};

static void qpip_ib_port_event(struct qpip_ib_dev *qib, enum ib_event_type type)
{
	struct ib_event ev = {
		.device = &qib->ibdev,
		.element.port_num = 1,
		.event = type,
	};

	ib_dispatch_event(&ev);
}

/*
 * The device was reset: every user context is dead (its QPs flushed, qpip_ib_qp.c), and
 * uverbs passes IB_EVENT_DEVICE_FATAL to each process's asynchronous events, as for a
 * device that went away; a process opens the device again to go on. (rdma_cm has no
 * event for it: a listener is not told.)
 */
static void qpip_ib_fatal_work(struct work_struct *work)
{
	struct qpip_ib_dev *qib = container_of(work, struct qpip_ib_dev, fatal_work);
	struct ib_event ev = {
		.device = &qib->ibdev,
		.event = IB_EVENT_DEVICE_FATAL,
	};

	dev_info(&qib->ibdev.dev, "device reset: its verbs users are told\n");
	ib_dispatch_event(&ev);
}

/*
 * The port is qpipN: its state follows the interface's (up, with carrier), and its GID
 * the interface's MAC. Users learn of a change as an asynchronous event of the port.
 */
static int qpip_ib_netdev_event(struct notifier_block *nb, unsigned long event, void *ptr)
{
	struct qpip_ib_dev *qib = container_of(nb, struct qpip_ib_dev, nb);
	struct net_device *nd = netdev_notifier_info_to_dev(ptr);
	bool active;

	if (nd != qib->netdev)
		return NOTIFY_DONE;
	switch (event) {
	case NETDEV_UP:
	case NETDEV_DOWN:
	case NETDEV_CHANGE:
		active = netif_running(nd) && netif_carrier_ok(nd);
		if (active != qib->port_active) {
			qib->port_active = active;
			qpip_ib_port_event(qib, active ? IB_EVENT_PORT_ACTIVE : IB_EVENT_PORT_ERR);
		}
		break;
	case NETDEV_CHANGEADDR:
		qpip_ib_port_event(qib, IB_EVENT_GID_CHANGE);
		break;
	}
	return NOTIFY_DONE;
}

static int qpip_ib_probe(struct auxiliary_device *adev, const struct auxiliary_device_id *id)
{
	struct qpip_dev *qdev = qpip_aux_from_adev(adev)->qdev;
	struct net_device *netdev = qpip_aux_netdev(qdev);
	struct qpip_ib_dev *qib;
	int ret;

	/* iWARP's connection manager and GID need the function's network interface. */
	if (!netdev) {
		dev_info(&adev->dev, "%s has no network interface; no RDMA device\n",
			 dev_name(&qdev->dev));
		return -ENODEV;
	}
	qib = ib_alloc_device(qpip_ib_dev, ibdev);
	if (!qib)
		return -ENOMEM;
	qib->qdev = qdev;
	qib->netdev = netdev;
	ida_init(&qib->pd_ida);
	mutex_init(&qib->lctx_lock);
	INIT_LIST_HEAD(&qib->lingering);
	INIT_WORK(&qib->fatal_work, qpip_ib_fatal_work);
	qib->linger_wq = alloc_workqueue("qpip_ib_linger", 0, 0);
	if (!qib->linger_wq) {
		ret = -ENOMEM;
		goto err_dealloc;
	}
	xa_init_flags(&qib->qps, XA_FLAGS_LOCK_IRQ);

	qib->ibdev.node_type = RDMA_NODE_RNIC;
	qib->ibdev.phys_port_cnt = 1;
	qib->ibdev.num_comp_vectors = max(qpip_comp_vectors(qdev), 1U);
	/* The PCI function: its modalias is what the provider matches. */
	qib->ibdev.dev.parent = &qdev->pdev->dev;
	strscpy(qib->ibdev.node_desc, "qpip iWARP adapter", sizeof(qib->ibdev.node_desc));
	/* iWARP has no GUIDs of its own: the usual one made from the MAC. */
	addrconf_addr_eui48((u8 *)&qib->ibdev.node_guid, qdev->info.mac);
	ib_set_device_ops(&qib->ibdev, &qpip_ib_dev_ops);

	ret = ib_device_set_netdev(&qib->ibdev, netdev, 1);
	if (ret)
		goto err_dealloc;
	ret = ib_register_device(&qib->ibdev, "qpip%d", &qdev->pdev->dev);
	if (ret)
		goto err_dealloc;
	rtnl_lock();
	qib->port_active = netif_running(netdev) && netif_carrier_ok(netdev);
	rtnl_unlock();
	qib->nb.notifier_call = qpip_ib_netdev_event;
	ret = register_netdevice_notifier_dev_net(netdev, &qib->nb, &qib->nn);
	if (ret)
		goto err_unregister;
	auxiliary_set_drvdata(adev, qib);
	dev_info(&adev->dev, "%s: RDMA device %s over %s\n", dev_name(&qdev->dev),
		 dev_name(&qib->ibdev.dev), netdev_name(netdev));
	return 0;

err_unregister:
	ib_unregister_device(&qib->ibdev);
	qpip_ib_lctx_release(qib);
err_dealloc:
	if (qib->linger_wq)
		destroy_workqueue(qib->linger_wq);
	ida_destroy(&qib->pd_ida);
	ib_dealloc_device(&qib->ibdev);
	return ret;
}

/*
 * Unregistration disassociates every user context (their device contexts destroyed while
 * the function still runs: qpip.ko removes this device before anything else) and waits
 * for the kernel's users of the ib_device (rdma_cm, uverbs) to let go.
 */
static void qpip_ib_remove(struct auxiliary_device *adev)
{
	struct qpip_ib_dev *qib = auxiliary_get_drvdata(adev);

	unregister_netdevice_notifier_dev_net(qib->netdev, &qib->nb, &qib->nn);
	/* Every cm_id goes with it, the listeners too; then their device context. */
	ib_unregister_device(&qib->ibdev);
	cancel_work_sync(&qib->fatal_work);
	qpip_ib_lctx_release(qib);
	destroy_workqueue(qib->linger_wq);	/* an expiry still running ends */
	ida_destroy(&qib->pd_ida);
	xa_destroy(&qib->qps);
	ib_dealloc_device(&qib->ibdev);
}

static const struct auxiliary_device_id qpip_ib_id_table[] = {
	{ .name = QPIP_DRV_NAME "." QPIP_AUX_RDMA_NAME },
	{ }
};
MODULE_DEVICE_TABLE(auxiliary, qpip_ib_id_table);

static struct auxiliary_driver qpip_ib_driver = {
	.name = "ib",
	.probe = qpip_ib_probe,
	.remove = qpip_ib_remove,
	.id_table = qpip_ib_id_table,
};
module_auxiliary_driver(qpip_ib_driver);

MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("qpip Queue-Pair IP network adapter: iWARP RDMA device");
