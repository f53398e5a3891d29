// SPDX-License-Identifier: GPL-2.0
/*
 * qpip: the character device /dev/qpipN, its class "qpip" and the sysfs attributes of
 * /sys/class/qpip/qpipN.
 *
 * Applications reach the adapter through this node: later the object model (contexts,
 * queues, registered memory) hangs off an open file. For now the node exists, opens and
 * closes, and answers every ioctl with -ENOTTY.
 */
#include <linux/fs.h>
#include <linux/idr.h>
#include <linux/kdev_t.h>
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/sysfs.h>

#include "qpip.h"

static dev_t qpip_devt;
static DEFINE_IDA(qpip_ida);

/*
 * Any user may open the node, like /dev/infiniband/uverbs*: what a process can reach is
 * confined by the device to the objects of its own context, not by file permissions.
 */
static char *qpip_devnode(const struct device *dev, umode_t *mode)
{
	if (mode)
		*mode = 0666;
	return NULL;
}

static const struct class qpip_class = {
	.name = QPIP_DRV_NAME,
	.devnode = qpip_devnode,
};

static inline struct qpip_dev *to_qpip_dev(struct device *dev)
{
	return container_of(dev, struct qpip_dev, dev);
}

/* ---- sysfs: /sys/class/qpip/qpipN/... (all read-only) ---- */

static ssize_t abi_version_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	struct qpip_dev *qdev = to_qpip_dev(dev);

	return sysfs_emit(buf, "%u.%u\n", qpip_version_major(qdev->version),
			  qpip_version_minor(qdev->version));
}
static DEVICE_ATTR_RO(abi_version);

static ssize_t ident_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "0x%08x\n", to_qpip_dev(dev)->ident);
}
static DEVICE_ATTR_RO(ident);

static ssize_t doorbell_pages_show(struct device *dev, struct device_attribute *attr,
				   char *buf)
{
	return sysfs_emit(buf, "%u\n", to_qpip_dev(dev)->doorbell_pages);
}
static DEVICE_ATTR_RO(doorbell_pages);

static ssize_t msix_vectors_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%d\n", to_qpip_dev(dev)->msix_vectors);
}
static DEVICE_ATTR_RO(msix_vectors);

/*
 * Read from the device each time, so tests can watch resets happen. Safe against remove:
 * the attributes are deleted (and running readers drained) before the BARs are unmapped.
 */
static ssize_t reset_count_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%u\n", qpip_rd(to_qpip_dev(dev), QPIP_REG_RESET_COUNT));
}
static DEVICE_ATTR_RO(reset_count);

static ssize_t irq_count_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%lld\n", (long long)atomic64_read(&to_qpip_dev(dev)->irq_count));
}
static DEVICE_ATTR_RO(irq_count);

static struct attribute *qpip_attrs[] = {
	&dev_attr_abi_version.attr,
	&dev_attr_ident.attr,
	&dev_attr_doorbell_pages.attr,
	&dev_attr_msix_vectors.attr,
	&dev_attr_reset_count.attr,
	&dev_attr_irq_count.attr,
	NULL,
};
ATTRIBUTE_GROUPS(qpip);

/* ---- file operations ---- */

static int qpip_open(struct inode *inode, struct file *filp)
{
	struct qpip_dev *qdev = container_of(inode->i_cdev, struct qpip_dev, cdev);
	int ret = 0;

	/*
	 * chrdev_open took a reference on the cdev, which pins qdev until release. An open
	 * that raced with remove finds the function gone and says so.
	 */
	down_read(&qdev->lock);
	if (qdev->unbound)
		ret = -ENODEV;
	up_read(&qdev->lock);
	if (ret)
		return ret;

	filp->private_data = qdev;
	return nonseekable_open(inode, filp);
}

static int qpip_release(struct inode *inode, struct file *filp)
{
	return 0;
}

static long qpip_ioctl(struct file *filp, unsigned int cmd, unsigned long arg)
{
	/* No ioctls are defined yet. */
	return -ENOTTY;
}

static const struct file_operations qpip_fops = {
	.owner = THIS_MODULE,
	.open = qpip_open,
	.release = qpip_release,
	.unlocked_ioctl = qpip_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
};

/* ---- device lifetime ---- */

/* Runs when the last reference goes: after remove and after the last file is closed. */
static void qpip_dev_release(struct device *dev)
{
	struct qpip_dev *qdev = to_qpip_dev(dev);

	if (qdev->id >= 0)
		ida_free(&qpip_ida, qdev->id);
	kfree(qdev);
}

/*
 * Allocates a qpip_dev with its minor and an initialised (not yet added) class device.
 * On success the caller owns one reference: drop it with put_device(&qdev->dev).
 */
struct qpip_dev *qpip_dev_alloc(struct pci_dev *pdev)
{
	struct qpip_dev *qdev;
	int ret;

	qdev = kzalloc(sizeof(*qdev), GFP_KERNEL);
	if (!qdev)
		return ERR_PTR(-ENOMEM);
	qdev->pdev = pdev;
	atomic64_set(&qdev->irq_count, 0);
	init_completion(&qdev->admin_irq);
	init_rwsem(&qdev->lock);

	qdev->id = ida_alloc_max(&qpip_ida, QPIP_MAX_DEVICES - 1, GFP_KERNEL);
	if (qdev->id < 0) {
		ret = qdev->id;
		kfree(qdev);
		if (ret == -ENOSPC)
			dev_err(&pdev->dev, "more than %d qpip functions; not binding\n",
				QPIP_MAX_DEVICES);
		return ERR_PTR(ret);
	}

	device_initialize(&qdev->dev);
	qdev->dev.class = &qpip_class;
	qdev->dev.parent = &pdev->dev;
	qdev->dev.devt = MKDEV(MAJOR(qpip_devt), qdev->id);
	qdev->dev.groups = qpip_groups;
	qdev->dev.release = qpip_dev_release;
	cdev_init(&qdev->cdev, &qpip_fops);
	qdev->cdev.owner = THIS_MODULE;

	/* From here on put_device() frees everything, including the minor. */
	ret = dev_set_name(&qdev->dev, QPIP_DRV_NAME "%d", qdev->id);
	if (ret) {
		put_device(&qdev->dev);
		return ERR_PTR(ret);
	}
	return qdev;
}

/* Makes /dev/qpipN and /sys/class/qpip/qpipN appear. */
int qpip_cdev_add(struct qpip_dev *qdev)
{
	return cdev_device_add(&qdev->cdev, &qdev->dev);
}

/*
 * Removes the node and the sysfs directory and cuts off open files from the hardware.
 * Files stay open (and qdev allocated) until their holders close them.
 */
void qpip_cdev_del(struct qpip_dev *qdev)
{
	down_write(&qdev->lock);
	qdev->unbound = true;
	up_write(&qdev->lock);
	cdev_device_del(&qdev->cdev, &qdev->dev);
}

int qpip_cdev_init(void)
{
	int ret;

	ret = alloc_chrdev_region(&qpip_devt, 0, QPIP_MAX_DEVICES, QPIP_DRV_NAME);
	if (ret)
		return ret;
	ret = class_register(&qpip_class);
	if (ret) {
		unregister_chrdev_region(qpip_devt, QPIP_MAX_DEVICES);
		return ret;
	}
	return 0;
}

void qpip_cdev_exit(void)
{
	class_unregister(&qpip_class);
	unregister_chrdev_region(qpip_devt, QPIP_MAX_DEVICES);
	ida_destroy(&qpip_ida);
}
