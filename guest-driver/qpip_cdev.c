// SPDX-License-Identifier: GPL-2.0
/*
 * qpip: the character device /dev/qpipN, its class "qpip" and the sysfs attributes of
 * /sys/class/qpip/qpipN.
 *
 * Applications reach the adapter through this node; what an open file is (a context of
 * the device) is in qpip_ctx.c. The attributes here describe the device and configure it:
 * its MAC and addresses (written with CAP_NET_ADMIN), its link state and its counters,
 * which are read from the device at each read.
 */
#include <linux/capability.h>
#include <linux/etherdevice.h>
#include <linux/fs.h>
#include <linux/gfp.h>
#include <linux/idr.h>
#include <linux/inet.h>
#include <linux/kdev_t.h>
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/string.h>
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


/*
 * Attributes that talk to the device run with qdev->lock held for reading, like file
 * operations, so a reset or removal waits for them and they never see a stopped queue.
 */
static int qpip_sysfs_enter(struct qpip_dev *qdev)
{
	down_read(&qdev->lock);
	if (qdev->unbound) {
		up_read(&qdev->lock);
		return -ENODEV;
	}
	return 0;
}

static ssize_t mac_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	struct qpip_dev *qdev = to_qpip_dev(dev);
	ssize_t ret;

	mutex_lock(&qdev->cfg_lock);
	ret = sysfs_emit(buf, "%pM\n", qdev->info.mac);
	mutex_unlock(&qdev->cfg_lock);
	return ret;
}

static ssize_t mac_store(struct device *dev, struct device_attribute *attr, const char *buf,
			 size_t count)
{
	struct qpip_dev *qdev = to_qpip_dev(dev);
	u8 mac[ETH_ALEN];
	int ret;

	if (!capable(CAP_NET_ADMIN))
		return -EPERM;
	if (!mac_pton(buf, mac) || (count > 17 && !isspace(buf[17])))
		return -EINVAL;
	ret = qpip_sysfs_enter(qdev);
	if (ret)
		return ret;
	ret = qpip_set_mac(qdev, mac);
	up_read(&qdev->lock);
	return ret ? ret : count;
}
static DEVICE_ATTR_RW(mac);

/*
 * One address per line, ADDR/PLEN, as the device lists them (LIST_ADDRS): the link-local
 * one first, then every configured one — also those qpipd was started with.
 */
static ssize_t addresses_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	struct qpip_dev *qdev = to_qpip_dev(dev);
	struct qpip_addr_list *list;
	unsigned int i;
	int len = 0;
	int ret;

	list = kmalloc(sizeof(*list), GFP_KERNEL);
	if (!list)
		return -ENOMEM;
	ret = qpip_sysfs_enter(qdev);
	if (!ret) {
		ret = qpip_list_addrs(qdev, list);
		up_read(&qdev->lock);
	}
	for (i = 0; !ret && i < list->count; i++)
		len += sysfs_emit_at(buf, len, "%pI6c/%u\n", list->entries[i].addr,
				     list->entries[i].prefix_len);
	kfree(list);
	return ret ? ret : len;
}

/* "add ADDR/PLEN" or "del ADDR". */
static ssize_t addresses_store(struct device *dev, struct device_attribute *attr,
			       const char *buf, size_t count)
{
	struct qpip_dev *qdev = to_qpip_dev(dev);
	unsigned int plen = 128;
	const char *p, *end;
	u8 addr[16];
	bool add;
	int ret;

	if (!capable(CAP_NET_ADMIN))
		return -EPERM;
	if (!strncmp(buf, "add ", 4))
		add = true;
	else if (!strncmp(buf, "del ", 4))
		add = false;
	else
		return -EINVAL;
	p = skip_spaces(buf + 4);
	if (!in6_pton(p, buf + count - p, addr, -1, &end))
		return -EINVAL;
	if (*end == '/') {
		if (!add || kstrtouint(end + 1, 10, &plen) || plen < 1 || plen > 128) {
			/* kstrtouint accepts one trailing newline, and nothing else. */
			return -EINVAL;
		}
	} else if (*end && !isspace(*end)) {
		return -EINVAL;
	}
	ret = qpip_sysfs_enter(qdev);
	if (ret)
		return ret;
	ret = qpip_change_addr(qdev, add, addr, plen);
	up_read(&qdev->lock);
	return ret ? ret : count;
}
static DEVICE_ATTR_RW(addresses);

/*
 * "up" while the device is enabled and runs its admin queue, else "down". The device
 * interface has no carrier signal of its own yet.
 */
static ssize_t link_state_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	struct qpip_dev *qdev = to_qpip_dev(dev);
	bool up = false;
	u32 status;

	if (!qpip_sysfs_enter(qdev)) {
		status = qpip_rd(qdev, QPIP_REG_STATUS);
		up = (status & QPIP_STATUS_READY) && (status & QPIP_STATUS_ADMIN_ENABLED);
		up_read(&qdev->lock);
	}
	return sysfs_emit(buf, "%s\n", up ? "up" : "down");
}
static DEVICE_ATTR_RO(link_state);

static ssize_t mtu_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%u\n", to_qpip_dev(dev)->info.mtu);
}
static DEVICE_ATTR_RO(mtu);

/* Open files of the node, i.e. contexts in the device. */
static ssize_t contexts_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%u\n", READ_ONCE(to_qpip_dev(dev)->ncontexts));
}
static DEVICE_ATTR_RO(contexts);

/* Write 1 to reset the device: every open context is closed under its owner. */
static ssize_t reset_store(struct device *dev, struct device_attribute *attr, const char *buf,
			   size_t count)
{
	bool yes;
	int ret;

	if (kstrtobool(buf, &yes) || !yes)
		return -EINVAL;
	ret = qpip_reset(to_qpip_dev(dev));
	return ret ? ret : count;
}
static DEVICE_ATTR_WO(reset);

static struct attribute *qpip_attrs[] = {
	&dev_attr_abi_version.attr,
	&dev_attr_ident.attr,
	&dev_attr_doorbell_pages.attr,
	&dev_attr_msix_vectors.attr,
	&dev_attr_reset_count.attr,
	&dev_attr_irq_count.attr,
	&dev_attr_mac.attr,
	&dev_attr_addresses.attr,
	&dev_attr_link_state.attr,
	&dev_attr_mtu.attr,
	&dev_attr_contexts.attr,
	&dev_attr_reset.attr,
	NULL,
};

static const struct attribute_group qpip_group = {
	.attrs = qpip_attrs,
};

/* ---- counters/: one file per device counter, read with QUERY_STATS ---- */

struct qpip_counter_attr {
	struct device_attribute attr;
	unsigned int index;
};

static ssize_t counter_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	struct qpip_counter_attr *ca = container_of(attr, struct qpip_counter_attr, attr);
	struct qpip_dev *qdev = to_qpip_dev(dev);
	u64 *counters;
	ssize_t ret;

	counters = kmalloc(sizeof(struct qpip_stats), GFP_KERNEL);
	if (!counters)
		return -ENOMEM;
	ret = qpip_sysfs_enter(qdev);
	if (!ret) {
		ret = qpip_query_stats(qdev, counters, QPIP_STATS_COUNT);
		up_read(&qdev->lock);
	}
	if (!ret)
		ret = sysfs_emit(buf, "%llu\n", (unsigned long long)counters[ca->index]);
	kfree(counters);
	return ret;
}

#define QPIP_COUNTER(_name, _index)						\
	static struct qpip_counter_attr qpip_counter_##_name = {		\
		.attr = __ATTR(_name, 0444, counter_show, NULL),		\
		.index = (_index),						\
	}

QPIP_COUNTER(admin_commands, QPIP_STAT_ADMIN_COMMANDS);
QPIP_COUNTER(admin_errors, QPIP_STAT_ADMIN_ERRORS);
QPIP_COUNTER(doorbells, QPIP_STAT_DOORBELLS);
QPIP_COUNTER(kicks, QPIP_STAT_KICKS);
QPIP_COUNTER(sleeps, QPIP_STAT_SLEEPS);
QPIP_COUNTER(send_wqes, QPIP_STAT_SEND_WQES);
QPIP_COUNTER(recv_wqes, QPIP_STAT_RECV_WQES);
QPIP_COUNTER(cqes, QPIP_STAT_CQES);
QPIP_COUNTER(cqe_errors, QPIP_STAT_CQE_ERRORS);
QPIP_COUNTER(cq_full, QPIP_STAT_CQ_FULL);
QPIP_COUNTER(cq_interrupts, QPIP_STAT_CQ_INTERRUPTS);
QPIP_COUNTER(protection_errors, QPIP_STAT_PROTECTION_ERRORS);
QPIP_COUNTER(bad_doorbells, QPIP_STAT_BAD_DOORBELLS);
QPIP_COUNTER(udp_tx, QPIP_STAT_UDP_TX);
QPIP_COUNTER(udp_rx, QPIP_STAT_UDP_RX);
QPIP_COUNTER(udp_rx_no_wr, QPIP_STAT_UDP_RX_NO_WR);
QPIP_COUNTER(udp_rx_no_port, QPIP_STAT_UDP_RX_NO_PORT);
QPIP_COUNTER(udp_rx_cq_full, QPIP_STAT_UDP_RX_CQ_FULL);
QPIP_COUNTER(net_rx_frames, QPIP_STAT_NET_RX_FRAMES);
QPIP_COUNTER(net_tx_frames, QPIP_STAT_NET_TX_FRAMES);
QPIP_COUNTER(net_rx_dropped, QPIP_STAT_NET_RX_DROPPED);
QPIP_COUNTER(net_echo_requests, QPIP_STAT_NET_ECHO_REQUESTS);
QPIP_COUNTER(net_icmp_errors_tx, QPIP_STAT_NET_ICMP_ERRORS_TX);
QPIP_COUNTER(net_no_route, QPIP_STAT_NET_NO_ROUTE);
QPIP_COUNTER(net_fragments_rx, QPIP_STAT_NET_FRAGMENTS_RX);
QPIP_COUNTER(net_reassembled, QPIP_STAT_NET_REASSEMBLED);
QPIP_COUNTER(net_resolution_failed, QPIP_STAT_NET_RESOLUTION_FAILED);
QPIP_COUNTER(async_events, QPIP_STAT_ASYNC_EVENTS);
QPIP_COUNTER(async_events_lost, QPIP_STAT_ASYNC_EVENTS_LOST);
QPIP_COUNTER(tcp_orphans, QPIP_STAT_TCP_ORPHANS);
QPIP_COUNTER(tcp_orphan_aborts, QPIP_STAT_TCP_ORPHAN_ABORTS);
/* One file per drop reason, named in the order abi/src/admin.rs lists them. */
static_assert(QPIP_STAT_NET_DROP_REASONS == 16);
QPIP_COUNTER(net_drop_malformed, QPIP_STAT_NET_DROP_BASE + 0);
QPIP_COUNTER(net_drop_bad_checksum, QPIP_STAT_NET_DROP_BASE + 1);
QPIP_COUNTER(net_drop_not_for_us, QPIP_STAT_NET_DROP_BASE + 2);
QPIP_COUNTER(net_drop_not_ipv6, QPIP_STAT_NET_DROP_BASE + 3);
QPIP_COUNTER(net_drop_unsupported_next_header, QPIP_STAT_NET_DROP_BASE + 4);
QPIP_COUNTER(net_drop_unknown_option, QPIP_STAT_NET_DROP_BASE + 5);
QPIP_COUNTER(net_drop_routing_header, QPIP_STAT_NET_DROP_BASE + 6);
QPIP_COUNTER(net_drop_bad_source, QPIP_STAT_NET_DROP_BASE + 7);
QPIP_COUNTER(net_drop_bad_ndp, QPIP_STAT_NET_DROP_BASE + 8);
QPIP_COUNTER(net_drop_hop_limit, QPIP_STAT_NET_DROP_BASE + 9);
QPIP_COUNTER(net_drop_looped, QPIP_STAT_NET_DROP_BASE + 10);
QPIP_COUNTER(net_drop_fragment_overlap, QPIP_STAT_NET_DROP_BASE + 11);
QPIP_COUNTER(net_drop_bad_fragment, QPIP_STAT_NET_DROP_BASE + 12);
QPIP_COUNTER(net_drop_reassembly_failed, QPIP_STAT_NET_DROP_BASE + 13);
QPIP_COUNTER(net_drop_ignored, QPIP_STAT_NET_DROP_BASE + 14);
QPIP_COUNTER(net_drop_no_next_header, QPIP_STAT_NET_DROP_BASE + 15);
QPIP_COUNTER(tcp_active_opens, QPIP_STAT_TCP_ACTIVE_OPENS);
QPIP_COUNTER(tcp_passive_opens, QPIP_STAT_TCP_PASSIVE_OPENS);
QPIP_COUNTER(tcp_attempt_fails, QPIP_STAT_TCP_ATTEMPT_FAILS);
QPIP_COUNTER(tcp_estab_resets, QPIP_STAT_TCP_ESTAB_RESETS);
QPIP_COUNTER(tcp_segs_in, QPIP_STAT_TCP_SEGS_IN);
QPIP_COUNTER(tcp_segs_out, QPIP_STAT_TCP_SEGS_OUT);
QPIP_COUNTER(tcp_retrans_segs, QPIP_STAT_TCP_RETRANS_SEGS);
QPIP_COUNTER(tcp_rsts_out, QPIP_STAT_TCP_RSTS_OUT);
QPIP_COUNTER(tcp_fast_retransmits, QPIP_STAT_TCP_FAST_RETRANSMITS);
QPIP_COUNTER(tcp_rto_timeouts, QPIP_STAT_TCP_RTO_TIMEOUTS);
QPIP_COUNTER(tcp_ooo_segs, QPIP_STAT_TCP_OOO_SEGS);
QPIP_COUNTER(tcp_dup_segs, QPIP_STAT_TCP_DUP_SEGS);
QPIP_COUNTER(tcp_challenge_acks, QPIP_STAT_TCP_CHALLENGE_ACKS);
QPIP_COUNTER(tcp_syn_cookies, QPIP_STAT_TCP_SYN_COOKIES);
QPIP_COUNTER(tcp_listen_drops, QPIP_STAT_TCP_LISTEN_DROPS);
QPIP_COUNTER(tcp_timeouts, QPIP_STAT_TCP_TIMEOUTS);

static struct attribute *qpip_counter_attrs[] = {
	&qpip_counter_admin_commands.attr.attr,
	&qpip_counter_admin_errors.attr.attr,
	&qpip_counter_doorbells.attr.attr,
	&qpip_counter_kicks.attr.attr,
	&qpip_counter_sleeps.attr.attr,
	&qpip_counter_send_wqes.attr.attr,
	&qpip_counter_recv_wqes.attr.attr,
	&qpip_counter_cqes.attr.attr,
	&qpip_counter_cqe_errors.attr.attr,
	&qpip_counter_cq_full.attr.attr,
	&qpip_counter_cq_interrupts.attr.attr,
	&qpip_counter_protection_errors.attr.attr,
	&qpip_counter_bad_doorbells.attr.attr,
	&qpip_counter_udp_tx.attr.attr,
	&qpip_counter_udp_rx.attr.attr,
	&qpip_counter_udp_rx_no_wr.attr.attr,
	&qpip_counter_udp_rx_no_port.attr.attr,
	&qpip_counter_udp_rx_cq_full.attr.attr,
	&qpip_counter_net_rx_frames.attr.attr,
	&qpip_counter_net_tx_frames.attr.attr,
	&qpip_counter_net_rx_dropped.attr.attr,
	&qpip_counter_net_echo_requests.attr.attr,
	&qpip_counter_net_icmp_errors_tx.attr.attr,
	&qpip_counter_net_no_route.attr.attr,
	&qpip_counter_net_fragments_rx.attr.attr,
	&qpip_counter_net_reassembled.attr.attr,
	&qpip_counter_net_resolution_failed.attr.attr,
	&qpip_counter_async_events.attr.attr,
	&qpip_counter_async_events_lost.attr.attr,
	&qpip_counter_tcp_orphans.attr.attr,
	&qpip_counter_tcp_orphan_aborts.attr.attr,
	&qpip_counter_net_drop_malformed.attr.attr,
	&qpip_counter_net_drop_bad_checksum.attr.attr,
	&qpip_counter_net_drop_not_for_us.attr.attr,
	&qpip_counter_net_drop_not_ipv6.attr.attr,
	&qpip_counter_net_drop_unsupported_next_header.attr.attr,
	&qpip_counter_net_drop_unknown_option.attr.attr,
	&qpip_counter_net_drop_routing_header.attr.attr,
	&qpip_counter_net_drop_bad_source.attr.attr,
	&qpip_counter_net_drop_bad_ndp.attr.attr,
	&qpip_counter_net_drop_hop_limit.attr.attr,
	&qpip_counter_net_drop_looped.attr.attr,
	&qpip_counter_net_drop_fragment_overlap.attr.attr,
	&qpip_counter_net_drop_bad_fragment.attr.attr,
	&qpip_counter_net_drop_reassembly_failed.attr.attr,
	&qpip_counter_net_drop_ignored.attr.attr,
	&qpip_counter_net_drop_no_next_header.attr.attr,
	&qpip_counter_tcp_active_opens.attr.attr,
	&qpip_counter_tcp_passive_opens.attr.attr,
	&qpip_counter_tcp_attempt_fails.attr.attr,
	&qpip_counter_tcp_estab_resets.attr.attr,
	&qpip_counter_tcp_segs_in.attr.attr,
	&qpip_counter_tcp_segs_out.attr.attr,
	&qpip_counter_tcp_retrans_segs.attr.attr,
	&qpip_counter_tcp_rsts_out.attr.attr,
	&qpip_counter_tcp_fast_retransmits.attr.attr,
	&qpip_counter_tcp_rto_timeouts.attr.attr,
	&qpip_counter_tcp_ooo_segs.attr.attr,
	&qpip_counter_tcp_dup_segs.attr.attr,
	&qpip_counter_tcp_challenge_acks.attr.attr,
	&qpip_counter_tcp_syn_cookies.attr.attr,
	&qpip_counter_tcp_listen_drops.attr.attr,
	&qpip_counter_tcp_timeouts.attr.attr,
	NULL,
};

static const struct attribute_group qpip_counter_group = {
	.name = "counters",
	.attrs = qpip_counter_attrs,
};

static const struct attribute_group *qpip_groups[] = {
	&qpip_group,
	&qpip_counter_group,
	NULL,
};

/* ---- device lifetime ---- */

/* Runs when the last reference goes: after remove and after the last file is closed. */
static void qpip_dev_release(struct device *dev)
{
	struct qpip_dev *qdev = to_qpip_dev(dev);

	if (qdev->id >= 0)
		ida_free(&qpip_ida, qdev->id);
	mutex_destroy(&qdev->mmap_lock);
	mutex_destroy(&qdev->cfg_lock);
	qpip_users_free(qdev);
	pci_dev_put(qdev->pdev);
	__free_page(qdev->dead_page);
	kfree(qdev);
}

/*
 * Allocates a qpip_dev with its minor and an initialised (not yet added) class device.
 * On success the caller owns one reference: drop it with put_device(&qdev->dev).
 */
struct qpip_dev *qpip_dev_alloc(struct pci_dev *pdev)
{
	struct qpip_dev *qdev;
	unsigned int i;
	int ret;

	qdev = kzalloc(sizeof(*qdev), GFP_KERNEL);
	if (!qdev)
		return ERR_PTR(-ENOMEM);
	qdev->dead_page = alloc_page(GFP_KERNEL | __GFP_ZERO);
	if (!qdev->dead_page) {
		kfree(qdev);
		return ERR_PTR(-ENOMEM);
	}
	qdev->pdev = pci_dev_get(pdev);
	atomic64_set(&qdev->irq_count, 0);
	init_completion(&qdev->admin_irq);
	init_rwsem(&qdev->lock);
	mutex_init(&qdev->mmap_lock);
	mutex_init(&qdev->cfg_lock);
	spin_lock_init(&qdev->ctx_lock);
	INIT_LIST_HEAD(&qdev->contexts);
	mutex_init(&qdev->users_lock);
	xa_init(&qdev->users);
	atomic_set(&qdev->next_cookie, QPIP_MMAP_FIRST_RING - 1);
	for (i = 0; i < ARRAY_SIZE(qdev->vectors); i++) {
		qdev->vectors[i].qdev = qdev;
		qdev->vectors[i].index = i;
		spin_lock_init(&qdev->vectors[i].lock);
		INIT_LIST_HEAD(&qdev->vectors[i].cqs);
		atomic64_set(&qdev->vectors[i].count, 0);
	}

	qdev->id = ida_alloc_max(&qpip_ida, QPIP_MAX_DEVICES - 1, GFP_KERNEL);
	if (qdev->id < 0) {
		ret = qdev->id;
		pci_dev_put(qdev->pdev);
		__free_page(qdev->dead_page);
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
 * Removes the node and the sysfs directory (waiting for attribute readers to leave). Open
 * files stay open (and qdev allocated) until their holders close them; remove has cut
 * them off from the hardware before.
 */
void qpip_cdev_del(struct qpip_dev *qdev)
{
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
