/* SPDX-License-Identifier: GPL-2.0 */
/*
 * qpip: driver for the qpip Queue-Pair IP network adapter.
 *
 * Shared declarations of the driver's source files. The register map, BAR layout and PCI
 * identity come from qpip_abi.h, which is generated from the qpip-abi crate.
 */
#ifndef QPIP_H
#define QPIP_H

#include <linux/atomic.h>
#include <linux/cdev.h>
#include <linux/completion.h>
#include <linux/device.h>
#include <linux/io.h>
#include <linux/pci.h>
#include <linux/rwsem.h>
#include <linux/types.h>

#include "qpip_abi.h"

#define QPIP_DRV_NAME "qpip"

/* Number of /dev/qpipN minors the driver reserves: one per PCI function. */
#define QPIP_MAX_DEVICES 64

/*
 * One qpip PCI function.
 *
 * Lifetime: the structure is owned by the reference count of @dev (the class device
 * /sys/class/qpip/qpipN). The PCI binding holds one reference from probe to remove; every
 * open file holds another through @cdev, whose kobject has @dev as its parent
 * (cdev_device_add). So a file opened before the function was unbound keeps this memory
 * alive; it must then not touch the hardware, which is what @unbound (under @lock) says.
 */
struct qpip_dev {
	struct device dev;
	struct cdev cdev;
	struct pci_dev *pdev;
	int id;				/* N in qpipN */

	void __iomem *ctrl;		/* BAR0: control registers, MSI-X table and PBA */
	void __iomem *doorbells;	/* BAR2: doorbell pages */

	u32 ident;			/* REG_IDENT as read at probe */
	u32 version;			/* REG_VERSION as read at probe */
	u32 doorbell_pages;		/* REG_DOORBELL_PAGES */
	int msix_vectors;		/* vectors allocated */

	atomic64_t irq_count;		/* interrupts taken on vector 0 */
	struct completion admin_irq;	/* completed by every vector 0 interrupt */
	char admin_irq_name[32];	/* for /proc/interrupts; lives as long as the irq */

	/*
	 * Taken for reading by file operations that reach the hardware, for writing by
	 * remove when it sets @unbound: after that, the BARs are gone.
	 */
	struct rw_semaphore lock;
	bool unbound;
};

static inline u32 qpip_rd(struct qpip_dev *qdev, u32 reg)
{
	return readl(qdev->ctrl + reg);
}

static inline void qpip_wr(struct qpip_dev *qdev, u32 reg, u32 val)
{
	writel(val, qdev->ctrl + reg);
}

static inline unsigned int qpip_version_major(u32 v)
{
	return v >> QPIP_VERSION_MAJOR_SHIFT;
}

static inline unsigned int qpip_version_minor(u32 v)
{
	return v & QPIP_VERSION_MINOR_MASK;
}

/* qpip_cdev.c */
int qpip_cdev_init(void);
void qpip_cdev_exit(void);
struct qpip_dev *qpip_dev_alloc(struct pci_dev *pdev);
int qpip_cdev_add(struct qpip_dev *qdev);
void qpip_cdev_del(struct qpip_dev *qdev);

#endif /* QPIP_H */
