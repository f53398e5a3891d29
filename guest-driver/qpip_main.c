// SPDX-License-Identifier: GPL-2.0
/*
 * qpip: driver for the qpip Queue-Pair IP network adapter — PCI binding.
 *
 * Probe brings a function up in the order the device interface asks for: map the BARs,
 * check the identity and the interface version, reset, enable, interrupts, the admin
 * queue, then the /dev/qpipN node. Remove undoes it in reverse. A reset (PCI function
 * reset, or the driver's own through sysfs) kills every open context: their files fail
 * with -ENODEV from then on. The register map is in qpip_abi.h.
 */
#include <linux/dma-mapping.h>
#include <linux/interrupt.h>
#include <linux/iopoll.h>
#include <linux/minmax.h>
#include <linux/module.h>
#include <linux/pci.h>

#include "qpip.h"
#include "qpip_aux.h"

/*
 * The device completes a reset before the register write returns; the bound is only there
 * so a wedged or absent device fails probe instead of hanging it.
 */
#define QPIP_RESET_TIMEOUT_US	100000
#define QPIP_READY_TIMEOUT_US	100000
#define QPIP_POLL_INTERVAL_US	10
/* Interrupt delivery goes device -> eventfd -> QEMU -> guest; generous for a TCG guest. */
#define QPIP_IRQ_TEST_TIMEOUT_MS 2000

static irqreturn_t qpip_admin_irq(int irq, void *data)
{
	struct qpip_dev *qdev = data;

	/*
	 * Vector 0 carries admin completions (including those of accept, connect, close, and
	 * the asynchronous events).
	 */
	atomic64_inc(&qdev->irq_count);
	complete(&qdev->admin_irq);
	qpip_admin_process(qdev);
	return IRQ_HANDLED;
}

/* Checks @bar is a memory BAR of at least @min_len bytes. */
static int qpip_check_bar(struct pci_dev *pdev, int bar, resource_size_t min_len,
			  const char *what)
{
	resource_size_t len = pci_resource_len(pdev, bar);

	if (!len) {
		dev_err(&pdev->dev, "BAR%d (%s) is absent; not binding\n", bar, what);
		return -ENODEV;
	}
	if (!(pci_resource_flags(pdev, bar) & IORESOURCE_MEM)) {
		dev_err(&pdev->dev, "BAR%d (%s) is not a memory BAR; not binding\n", bar, what);
		return -ENODEV;
	}
	if (len < min_len) {
		dev_err(&pdev->dev,
			"BAR%d (%s) is %llu bytes, needs at least %llu; not binding\n",
			bar, what, (unsigned long long)len, (unsigned long long)min_len);
		return -ENODEV;
	}
	return 0;
}

/* Maps @bar after checking it. */
static void __iomem *qpip_map_bar(struct pci_dev *pdev, int bar, resource_size_t min_len,
				  const char *what)
{
	void __iomem *p;
	int ret;

	ret = qpip_check_bar(pdev, bar, min_len, what);
	if (ret)
		return IOMEM_ERR_PTR(ret);
	p = pcim_iomap_region(pdev, bar, QPIP_DRV_NAME);
	if (IS_ERR(p))
		dev_err(&pdev->dev, "cannot map BAR%d (%s): %pe\n", bar, what, p);
	return p;
}

/* Identity and interface version: refuse anything this driver was not written for. */
static int qpip_check_identity(struct qpip_dev *qdev)
{
	struct device *dev = &qdev->pdev->dev;
	u32 v;

	qdev->ident = qpip_rd(qdev, QPIP_REG_IDENT);
	if (qdev->ident != QPIP_IDENT_MAGIC) {
		dev_err(dev,
			"unexpected identity register 0x%08x (expected 0x%08x \"QPIP\"); not a qpip function, not binding\n",
			qdev->ident, (u32)QPIP_IDENT_MAGIC);
		return -ENODEV;
	}

	v = qpip_rd(qdev, QPIP_REG_VERSION);
	if (qpip_version_major(v) != QPIP_ABI_VERSION_MAJOR) {
		dev_err(dev,
			"device interface version %u.%u is not supported by this driver (needs %u.x); not binding\n",
			qpip_version_major(v), qpip_version_minor(v), QPIP_ABI_VERSION_MAJOR);
		return -ENODEV;
	}
	qdev->version = v;
	return 0;
}

/* Function reset through REG_CONTROL, then enable; the device reports READY. */
static int qpip_reset_and_enable(struct qpip_dev *qdev)
{
	struct device *dev = &qdev->pdev->dev;
	u32 v;
	int ret;

	qpip_wr(qdev, QPIP_REG_CONTROL, QPIP_CONTROL_RESET);
	ret = readl_poll_timeout(qdev->ctrl + QPIP_REG_CONTROL, v, !(v & QPIP_CONTROL_RESET),
				 QPIP_POLL_INTERVAL_US, QPIP_RESET_TIMEOUT_US);
	if (ret) {
		dev_err(dev, "device did not finish reset within %d ms (control 0x%08x)\n",
			QPIP_RESET_TIMEOUT_US / 1000, v);
		return ret;
	}

	qpip_wr(qdev, QPIP_REG_CONTROL, QPIP_CONTROL_ENABLE);
	ret = readl_poll_timeout(qdev->ctrl + QPIP_REG_STATUS, v, v & QPIP_STATUS_READY,
				 QPIP_POLL_INTERVAL_US, QPIP_READY_TIMEOUT_US);
	if (ret) {
		dev_err(dev, "device not ready within %d ms of enable (status 0x%08x)\n",
			QPIP_READY_TIMEOUT_US / 1000, v);
		return ret;
	}
	return 0;
}

/* Clears ENABLE: the device stops working for us (and, later, stops DMA). */
static void qpip_disable(struct qpip_dev *qdev)
{
	qpip_wr(qdev, QPIP_REG_CONTROL, 0);
	/* Read back so the write has reached the device before we go on. */
	qpip_rd(qdev, QPIP_REG_CONTROL);
}

static int qpip_setup_irqs(struct qpip_dev *qdev)
{
	struct pci_dev *pdev = qdev->pdev;
	u32 advertised = qpip_rd(qdev, QPIP_REG_MSIX_VECTORS);
	unsigned int want = min_t(u32, advertised, QPIP_MSIX_VECTORS);
	int nvec, ret;

	if (want < 1) {
		dev_err(&pdev->dev, "device advertises no MSI-X vectors; not binding\n");
		return -ENODEV;
	}
	nvec = pci_alloc_irq_vectors(pdev, 1, want, PCI_IRQ_MSIX);
	if (nvec < 0) {
		dev_err(&pdev->dev, "cannot enable MSI-X (%d vectors): %pe\n", want,
			ERR_PTR(nvec));
		return nvec;
	}
	qdev->msix_vectors = nvec;

	snprintf(qdev->admin_irq_name, sizeof(qdev->admin_irq_name), "%s-admin",
		 dev_name(&qdev->dev));
	ret = request_irq(pci_irq_vector(pdev, 0), qpip_admin_irq, 0, qdev->admin_irq_name,
			  qdev);
	if (ret) {
		dev_err(&pdev->dev, "cannot request the admin interrupt: %pe\n", ERR_PTR(ret));
		pci_free_irq_vectors(pdev);
		qdev->msix_vectors = 0;
		return ret;
	}
	return 0;
}

/*
 * Has the device raise vector 0 once through REG_IRQ_TEST and waits for it: a function
 * whose interrupts do not arrive would later hang every admin command, so find out now.
 */
static int qpip_test_irq(struct qpip_dev *qdev)
{
	reinit_completion(&qdev->admin_irq);
	qpip_wr(qdev, QPIP_REG_IRQ_TEST, 0);
	if (!wait_for_completion_timeout(&qdev->admin_irq,
					 msecs_to_jiffies(QPIP_IRQ_TEST_TIMEOUT_MS))) {
		dev_err(&qdev->pdev->dev,
			"test interrupt on MSI-X vector 0 did not arrive within %d ms; not binding\n",
			QPIP_IRQ_TEST_TIMEOUT_MS);
		return -EIO;
	}
	return 0;
}

/* Completion vectors 1..n-1: each wakes the CQs that were given it at creation. */
static int qpip_setup_cq_irqs(struct qpip_dev *qdev)
{
	struct qpip_vector *vec;
	int i, ret;

	for (i = 1; i < qdev->msix_vectors; i++) {
		vec = &qdev->vectors[i];
		snprintf(vec->name, sizeof(vec->name), "%s-cq%d", dev_name(&qdev->dev), i);
		ret = request_irq(pci_irq_vector(qdev->pdev, i), qpip_cq_irq, 0, vec->name, vec);
		if (ret) {
			dev_err(&qdev->pdev->dev, "cannot request completion interrupt %d: %pe\n",
				i, ERR_PTR(ret));
			return ret;
		}
		vec->requested = true;
	}
	return 0;
}

static void qpip_teardown_irqs(struct qpip_dev *qdev)
{
	int i;

	for (i = 1; i < qdev->msix_vectors; i++) {
		if (qdev->vectors[i].requested)
			free_irq(pci_irq_vector(qdev->pdev, i), &qdev->vectors[i]);
		qdev->vectors[i].requested = false;
	}
	free_irq(pci_irq_vector(qdev->pdev, 0), qdev);
	pci_free_irq_vectors(qdev->pdev);
}

/* ---- reset ---- */

/*
 * First half of a reset (qdev->lock held for writing): every context dies and loses its
 * doorbell mapping, the admin queue stops and its pending commands fail.
 */
static void qpip_reset_prepare_locked(struct qpip_dev *qdev)
{
	WRITE_ONCE(qdev->generation, qdev->generation + 1);
	qpip_contexts_revoke(qdev);
	qpip_admin_stop(qdev);
}

/* Second half: the device is reset; enable it again and give it back its configuration. */
static int qpip_reset_done_locked(struct qpip_dev *qdev)
{
	int ret;

	ret = qpip_reset_and_enable(qdev);
	if (!ret)
		ret = qpip_admin_start(qdev);
	if (!ret)
		ret = qpip_restore_config(qdev);
	if (!ret)
		qpip_admin_start_events(qdev);
	/* The interface's queues are gone with its context: rebuilt, or left without carrier. */
	qpip_netdev_reset_done(qdev);
	if (ret)
		dev_err(&qdev->pdev->dev, "device did not come back from reset: %pe\n",
			ERR_PTR(ret));
	else
		dev_info(&qdev->pdev->dev, "%s: reset; open contexts were closed\n",
			 dev_name(&qdev->dev));
	return ret;
}

/* The driver's own reset (sysfs "reset"): the same as a PCI function reset. */
int qpip_reset(struct qpip_dev *qdev)
{
	int ret;

	down_write(&qdev->lock);
	if (qdev->unbound) {
		up_write(&qdev->lock);
		return -ENODEV;
	}
	qpip_reset_prepare_locked(qdev);
	ret = qpip_reset_done_locked(qdev);
	up_write(&qdev->lock);
	return ret;
}

/* The device reported STATUS_FAILED: reset it, which gives it a fresh start. */
static void qpip_fault_work(struct work_struct *work)
{
	struct qpip_dev *qdev = container_of(work, struct qpip_dev, fault_work);

	qpip_reset(qdev);
}

/* PCI core resets (FLR through sysfs "reset", ...): prepare and done bracket the reset. */
static void qpip_pci_reset_prepare(struct pci_dev *pdev)
{
	struct qpip_dev *qdev = pci_get_drvdata(pdev);

	down_write(&qdev->lock);
	qpip_reset_prepare_locked(qdev);
}

static void qpip_pci_reset_done(struct pci_dev *pdev)
{
	struct qpip_dev *qdev = pci_get_drvdata(pdev);

	qpip_reset_done_locked(qdev);
	up_write(&qdev->lock);
}

static const struct pci_error_handlers qpip_err_handlers = {
	.reset_prepare = qpip_pci_reset_prepare,
	.reset_done = qpip_pci_reset_done,
};

/* ---- probe and remove ---- */

static int qpip_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	struct qpip_dev *qdev;
	u32 pages;
	int ret;

	/* Enabling, regions and mappings are device-managed: undone after remove/failure. */
	ret = pcim_enable_device(pdev);
	if (ret) {
		dev_err(&pdev->dev, "cannot enable PCI device: %pe\n", ERR_PTR(ret));
		return ret;
	}

	qdev = qpip_dev_alloc(pdev);
	if (IS_ERR(qdev))
		return PTR_ERR(qdev);
	INIT_WORK(&qdev->fault_work, qpip_fault_work);
	INIT_WORK(&qdev->link_work, qpip_netdev_link_work);

	qdev->ctrl = qpip_map_bar(pdev, QPIP_CTRL_BAR, QPIP_CTRL_BAR_SIZE, "control");
	if (IS_ERR(qdev->ctrl)) {
		ret = PTR_ERR(qdev->ctrl);
		goto err_put;
	}
	qdev->ctrl_phys = pci_resource_start(pdev, QPIP_CTRL_BAR);

	ret = qpip_check_identity(qdev);
	if (ret)
		goto err_put;

	/* The most contexts the device serves; each gets a doorbell page of our RAM. */
	pages = qpip_rd(qdev, QPIP_REG_DOORBELL_PAGES);
	if (pages < 1 || pages > QPIP_DOORBELL_PAGES) {
		dev_err(&pdev->dev,
			"device advertises %u contexts, this driver handles 1 to %u; not binding\n",
			pages, QPIP_DOORBELL_PAGES);
		ret = -ENODEV;
		goto err_put;
	}
	qdev->doorbell_pages = pages;

	/* No vIOMMU: the device addresses guest-physical memory directly. */
	ret = dma_set_mask_and_coherent(&pdev->dev, DMA_BIT_MASK(64));
	if (ret) {
		dev_err(&pdev->dev, "no usable 64-bit DMA configuration: %pe\n", ERR_PTR(ret));
		goto err_put;
	}

	/* Reset before bus mastering so no state left by a previous driver can DMA. */
	ret = qpip_reset_and_enable(qdev);
	if (ret)
		goto err_disable;
	pci_set_master(pdev);

	ret = qpip_setup_irqs(qdev);
	if (ret)
		goto err_disable;
	ret = qpip_test_irq(qdev);
	if (ret)
		goto err_irqs;
	ret = qpip_setup_cq_irqs(qdev);
	if (ret)
		goto err_irqs;

	ret = qpip_admin_init(qdev);
	if (ret)
		goto err_irqs;
	ret = qpip_query_device(qdev, &qdev->info);
	if (ret) {
		dev_err(&pdev->dev, "QUERY_DEVICE failed: %pe\n", ERR_PTR(ret));
		goto err_admin;
	}

	pci_set_drvdata(pdev, qdev);
	ret = qpip_cdev_add(qdev);
	if (ret) {
		dev_err(&pdev->dev, "cannot create /dev/%s: %pe\n", dev_name(&qdev->dev),
			ERR_PTR(ret));
		pci_set_drvdata(pdev, NULL);
		goto err_admin;
	}
	qpip_admin_start_events(qdev);
	/* Without it the function still serves its QPs: the reason is logged, probe goes on. */
	qpip_netdev_probe(qdev);
	/* For qpip_ib.ko, if it is loaded: likewise optional. */
	qpip_aux_add(qdev);

	dev_info(&pdev->dev, "%s: qpip device interface %u.%u, %u doorbell pages, %d MSI-X vectors, MAC %pM\n",
		 dev_name(&qdev->dev), qpip_version_major(qdev->version),
		 qpip_version_minor(qdev->version), qdev->doorbell_pages, qdev->msix_vectors,
		 qdev->info.mac);
	return 0;

err_admin:
	/*
	 * A reset QUERY_DEVICE's failure scheduled: done or cancelled before the queue it
	 * restarts is torn down (no other command runs before the events start).
	 */
	cancel_work_sync(&qdev->fault_work);
	qpip_admin_stop(qdev);
	qpip_admin_stop_events(qdev);
	/* No event schedules it any more. */
	cancel_work_sync(&qdev->link_work);
	qpip_admin_free(qdev);
err_irqs:
	qpip_teardown_irqs(qdev);
err_disable:
	pci_clear_master(pdev);
	qpip_disable(qdev);
err_put:
	put_device(&qdev->dev);
	return ret;
}

static void qpip_remove(struct pci_dev *pdev)
{
	struct qpip_dev *qdev = pci_get_drvdata(pdev);

	/*
	 * The RDMA stack's device, then the network interface, while the admin queue runs:
	 * unbinding qpip_ib destroys its user contexts in the device, closing the interface
	 * its own context. qpip_ib uses the interface until it is unbound.
	 */
	qpip_aux_del(qdev);
	qpip_netdev_remove(qdev);
	/*
	 * Cut off open files first (they fail with -ENODEV from now on and lose their doorbell
	 * mappings), then the node and sysfs: after that no user is inside.
	 */
	down_write(&qdev->lock);
	qdev->unbound = true;
	qpip_contexts_revoke(qdev);
	qpip_admin_stop(qdev);
	/*
	 * A reset makes the device forget every context, so it no longer touches their memory,
	 * which open files free when they are closed — and they may be closed as soon as the
	 * lock is dropped.
	 */
	qpip_wr(qdev, QPIP_REG_CONTROL, QPIP_CONTROL_RESET);
	qpip_disable(qdev);
	up_write(&qdev->lock);
	/* Not under @lock, which the reset takes; it finds @unbound and does nothing. */
	cancel_work_sync(&qdev->fault_work);
	qpip_cdev_del(qdev);
	qpip_teardown_irqs(qdev);
	pci_clear_master(pdev);
	qpip_admin_stop_events(qdev);
	/* No event schedules it any more; it finds no interface. */
	cancel_work_sync(&qdev->link_work);
	qpip_admin_free(qdev);
	dev_info(&pdev->dev, "%s: removed\n", dev_name(&qdev->dev));
	pci_set_drvdata(pdev, NULL);
	/* Frees qdev now, or when the last open file of it is closed. */
	put_device(&qdev->dev);
}

/* Reboot, kexec or poweroff: leave the device disabled so it does nothing behind us. */
static void qpip_shutdown(struct pci_dev *pdev)
{
	struct qpip_dev *qdev = pci_get_drvdata(pdev);

	if (qdev)
		qpip_disable(qdev);
}

static const struct pci_device_id qpip_pci_ids[] = {
	{ PCI_DEVICE(QPIP_PCI_VENDOR_ID, QPIP_PCI_DEVICE_ID) },
	{ }
};
MODULE_DEVICE_TABLE(pci, qpip_pci_ids);

static struct pci_driver qpip_pci_driver = {
	.name = QPIP_DRV_NAME,
	.id_table = qpip_pci_ids,
	.probe = qpip_probe,
	.remove = qpip_remove,
	.shutdown = qpip_shutdown,
	.err_handler = &qpip_err_handlers,
};

static int __init qpip_init(void)
{
	int ret;

	ret = qpip_cdev_init();
	if (ret)
		return ret;
	ret = pci_register_driver(&qpip_pci_driver);
	if (ret)
		qpip_cdev_exit();
	return ret;
}

static void __exit qpip_exit(void)
{
	pci_unregister_driver(&qpip_pci_driver);
	qpip_cdev_exit();
}

module_init(qpip_init);
module_exit(qpip_exit);

MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("qpip Queue-Pair IP network adapter");
