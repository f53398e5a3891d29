// SPDX-License-Identifier: GPL-2.0
/*
 * qpip: the function's network interface — a net_device beside the engine's offloaded QPs,
 * with the function's MAC and addresses, so the guest kernel's own traffic goes through the
 * adapter too.
 *
 * One interface per function, created at probe once the admin queue runs and removed first
 * at remove. Its queues (qpip_netdev_queue.c) exist while it is up: created at ndo_open,
 * destroyed at ndo_stop, so a down interface holds no device context, no ring memory and
 * no receive buffers, and an MTU change is a rebuild.
 *
 * The carrier is on exactly while the queues are up and the device's link is up, as a real
 * NIC reports its port's link (`ethtool` "Link detected" reads the carrier). The link is
 * read from REG_STATUS (STATUS_LINK_UP) at open and again on each ASYNC_EVENT_LINK (or lost
 * events), in qpip_netdev_link_work; a device before interface 2.4 reports no link: up.
 */
#include <linux/ethtool.h>
#include <linux/etherdevice.h>
#include <linux/module.h>
#include <linux/rtnetlink.h>

#include "qpip_netdev.h"

/* ---- link and carrier ---- */

/* Whether the device's link is up: STATUS_LINK_UP, which a device before 2.4 does not have. */
static bool qpip_nd_read_link(struct qpip_dev *qdev)
{
	if (qpip_version_major(qdev->version) == 2 && qpip_version_minor(qdev->version) < 4)
		return true;
	return qpip_rd(qdev, QPIP_REG_STATUS) & QPIP_STATUS_LINK_UP;
}

/* The carrier from the queues and the link (rtnl held). */
static void qpip_nd_set_carrier(struct qpip_netdev *nd)
{
	if (nd->queues_up && nd->link_up)
		netif_carrier_on(nd->netdev);
	else
		netif_carrier_off(nd->netdev);
}

/*
 * The device's link changed, or events were lost (scheduled from the admin interrupt):
 * read it again and set the carrier. Takes rtnl, then qdev->lock, as the rtnl holders do.
 */
void qpip_netdev_link_work(struct work_struct *work)
{
	struct qpip_dev *qdev = container_of(work, struct qpip_dev, link_work);
	struct qpip_netdev *nd;
	bool up;

	rtnl_lock();
	down_read(&qdev->lock);
	nd = qdev->netdev;
	if (nd && !qdev->unbound) {
		up = qpip_nd_read_link(qdev);
		if (up != nd->link_up)
			netdev_info(nd->netdev, "link %s\n", up ? "up" : "down");
		nd->link_up = up;
		qpip_nd_set_carrier(nd);
	}
	up_read(&qdev->lock);
	rtnl_unlock();
}

/* ---- open, stop, reset ---- */

static int qpip_nd_open(struct net_device *dev)
{
	struct qpip_netdev *nd = netdev_priv(dev);
	int ret;

	netif_carrier_off(dev);
	nd->queues_up = false;
	nd->link_up = qpip_nd_read_link(nd->qdev);
	qpip_nd_addr_import(nd);
	qpip_nd_neigh_sync(nd, false);
	ret = qpip_nd_queues_up(nd);
	if (ret) {
		/*
		 * Up without a carrier, rather than failing `ip link set up`: addresses can be
		 * configured and reach the device all the same, and the reason is in the log.
		 */
		netdev_warn(dev, "no queues (%pe): carrier off\n", ERR_PTR(ret));
		return 0;
	}
	netdev_reset_queue(dev);
	netif_start_queue(dev);
	nd->queues_up = true;
	if (!nd->link_up)
		netdev_info(dev, "link down\n");
	qpip_nd_set_carrier(nd);
	return 0;
}

static int qpip_nd_stop(struct net_device *dev)
{
	struct qpip_netdev *nd = netdev_priv(dev);

	nd->queues_up = false;
	netif_carrier_off(dev);
	netif_tx_disable(dev);
	qpip_nd_queues_down(nd);
	return 0;
}

/*
 * After a reset the device has forgotten the interface's context and static neighbours
 * (and restored the MAC and addresses itself, qpip_restore_config): it gets the permanent
 * entries again, and the queues are built again if the interface is up.
 */
static void qpip_nd_reset_work(struct work_struct *work)
{
	struct qpip_netdev *nd = container_of(work, struct qpip_netdev, reset_work);

	qpip_nd_neigh_sync(nd, true);
	rtnl_lock();
	if (netif_running(nd->netdev)) {
		qpip_nd_stop(nd->netdev);
		qpip_nd_open(nd->netdev);
	}
	rtnl_unlock();
}

/*
 * The device came back from a reset (qdev->lock held for writing). Not done here: opening
 * takes rtnl, and rtnl holders take qdev->lock.
 */
void qpip_netdev_reset_done(struct qpip_dev *qdev)
{
	if (qdev->netdev)
		schedule_work(&qdev->netdev->reset_work);
}

/* ---- MTU, MAC, statistics ---- */

static int qpip_nd_change_mtu(struct net_device *dev, int new_mtu)
{
	bool running = netif_running(dev);

	/* The core checked min_mtu..max_mtu (the device's MTU). Receive buffers follow it. */
	if (running)
		qpip_nd_stop(dev);
	WRITE_ONCE(dev->mtu, new_mtu);
	if (running)
		qpip_nd_open(dev);
	return 0;
}

/*
 * GRO_HW chooses the receive mode the QP is created with (mergeable buffers, super-frames
 * whole, or one frame per buffer): turning it on or off rebuilds the queues, as an MTU
 * change does. The core takes it away with RX checksumming (netdev_fix_features): a
 * super-frame is only handed over with its checksums checked.
 */
static int qpip_nd_set_features(struct net_device *dev, netdev_features_t features)
{
	bool rebuild = netif_running(dev) && ((dev->features ^ features) & NETIF_F_GRO_HW);

	if (rebuild)
		qpip_nd_stop(dev);
	dev->features = features;
	if (rebuild)
		qpip_nd_open(dev);
	/* dev->features is set already. */
	return 1;
}

static int qpip_nd_set_mac(struct net_device *dev, void *p)
{
	struct qpip_netdev *nd = netdev_priv(dev);
	struct sockaddr *sa = p;
	int ret;

	ret = eth_prepare_mac_addr_change(dev, p);
	if (ret)
		return ret;
	down_read(&nd->qdev->lock);
	ret = nd->qdev->unbound ? -ENODEV : qpip_set_mac(nd->qdev, sa->sa_data);
	up_read(&nd->qdev->lock);
	if (ret) {
		netdev_err(dev, "the device refused MAC %pM: %pe\n", sa->sa_data, ERR_PTR(ret));
		return ret;
	}
	eth_commit_mac_addr_change(dev, p);
	return 0;
}

static void qpip_nd_get_stats64(struct net_device *dev, struct rtnl_link_stats64 *s)
{
	struct qpip_netdev *nd = netdev_priv(dev);
	unsigned int start;

	do {
		start = u64_stats_fetch_begin(&nd->tx_stats.syncp);
		s->tx_packets = nd->tx_stats.packets;
		s->tx_bytes = nd->tx_stats.bytes;
		s->tx_errors = nd->tx_stats.errors;
	} while (u64_stats_fetch_retry(&nd->tx_stats.syncp, start));
	do {
		start = u64_stats_fetch_begin(&nd->rx_stats.syncp);
		s->rx_packets = nd->rx_stats.packets;
		s->rx_bytes = nd->rx_stats.bytes;
		s->rx_errors = nd->rx_stats.errors;
		s->rx_length_errors = nd->rx_stats.too_long + nd->rx_stats.too_many_frags;
		s->rx_dropped = nd->rx_stats.alloc_failed;
	} while (u64_stats_fetch_retry(&nd->rx_stats.syncp, start));
	s->tx_dropped = atomic64_read(&nd->tx_dropped);
}

static const struct net_device_ops qpip_nd_ops = {
	.ndo_open = qpip_nd_open,
	.ndo_stop = qpip_nd_stop,
	.ndo_start_xmit = qpip_nd_xmit,
	.ndo_features_check = qpip_nd_features_check,
	.ndo_change_mtu = qpip_nd_change_mtu,
	.ndo_set_features = qpip_nd_set_features,
	.ndo_set_mac_address = qpip_nd_set_mac,
	.ndo_validate_addr = eth_validate_addr,
	.ndo_get_stats64 = qpip_nd_get_stats64,
};

/* ---- ethtool ---- */

static void qpip_nd_get_drvinfo(struct net_device *dev, struct ethtool_drvinfo *info)
{
	struct qpip_netdev *nd = netdev_priv(dev);

	strscpy(info->driver, QPIP_DRV_NAME, sizeof(info->driver));
	snprintf(info->fw_version, sizeof(info->fw_version), "interface %u.%u",
		 qpip_version_major(nd->qdev->version), qpip_version_minor(nd->qdev->version));
	strscpy(info->bus_info, pci_name(nd->qdev->pdev), sizeof(info->bus_info));
}

/* `ethtool -S`: the driver's counters, then the device's raw-QP counters (QUERY_STATS). */
struct qpip_nd_stat {
	char name[ETH_GSTRING_LEN];
	unsigned int index;
};

enum {
	QPIP_ND_TX_PACKETS, QPIP_ND_TX_BYTES, QPIP_ND_TX_ERRORS, QPIP_ND_TX_DROPPED,
	QPIP_ND_TX_STOPPED, QPIP_ND_RX_PACKETS, QPIP_ND_RX_BYTES, QPIP_ND_RX_ERRORS,
	QPIP_ND_RX_CSUM_OK, QPIP_ND_RX_TOO_LONG, QPIP_ND_RX_ALLOC_FAILED, QPIP_ND_RX_MERGED,
	QPIP_ND_RX_GSO, QPIP_ND_RX_TOO_MANY_FRAGS, QPIP_ND_RX_COPIED, QPIP_ND_IRQS, QPIP_ND_KICKS,
	QPIP_ND_DRIVER_STATS
};

static const char qpip_nd_driver_stats[QPIP_ND_DRIVER_STATS][ETH_GSTRING_LEN] = {
	"tx_packets", "tx_bytes", "tx_errors", "tx_dropped", "tx_queue_stopped",
	"rx_packets", "rx_bytes", "rx_errors", "rx_csum_ok", "rx_too_long", "rx_alloc_failed",
	"rx_merged_frames", "rx_gso_frames", "rx_too_many_frags", "rx_copied_frames", "irqs",
	"kicks",
};

static const struct qpip_nd_stat qpip_nd_device_stats[] = {
	{ "dev_raw_tx_frames", QPIP_STAT_RAW_TX_FRAMES },
	{ "dev_raw_tx_tso", QPIP_STAT_RAW_TX_TSO },
	{ "dev_raw_tx_refused", QPIP_STAT_RAW_TX_REFUSED },
	{ "dev_raw_tx_port_held", QPIP_STAT_RAW_TX_PORT_HELD },
	{ "dev_raw_rx_frames", QPIP_STAT_RAW_RX_FRAMES },
	{ "dev_raw_rx_no_wr", QPIP_STAT_RAW_RX_NO_WR },
	{ "dev_raw_rx_too_long", QPIP_STAT_RAW_RX_TOO_LONG },
	{ "dev_raw_rx_csum_ok", QPIP_STAT_RAW_RX_CSUM_OK },
	/* The whole device's (QPs' too): what the interface's traffic costs it. */
	{ "dev_kicks", QPIP_STAT_KICKS },
	{ "dev_doorbells", QPIP_STAT_DOORBELLS },
	{ "dev_sleeps", QPIP_STAT_SLEEPS },
	{ "dev_cq_interrupts", QPIP_STAT_CQ_INTERRUPTS },
};

static int qpip_nd_get_sset_count(struct net_device *dev, int sset)
{
	if (sset != ETH_SS_STATS)
		return -EOPNOTSUPP;
	return QPIP_ND_DRIVER_STATS + ARRAY_SIZE(qpip_nd_device_stats);
}

static void qpip_nd_get_strings(struct net_device *dev, u32 sset, u8 *data)
{
	unsigned int i;

	if (sset != ETH_SS_STATS)
		return;
	for (i = 0; i < QPIP_ND_DRIVER_STATS; i++)
		ethtool_puts(&data, qpip_nd_driver_stats[i]);
	for (i = 0; i < ARRAY_SIZE(qpip_nd_device_stats); i++)
		ethtool_puts(&data, qpip_nd_device_stats[i].name);
}

static void qpip_nd_get_ethtool_stats(struct net_device *dev, struct ethtool_stats *stats,
				      u64 *data)
{
	struct qpip_netdev *nd = netdev_priv(dev);
	struct qpip_stats *dev_stats;
	unsigned int start, i;
	int ret = -ENODEV;

	do {
		start = u64_stats_fetch_begin(&nd->tx_stats.syncp);
		data[QPIP_ND_TX_PACKETS] = nd->tx_stats.packets;
		data[QPIP_ND_TX_BYTES] = nd->tx_stats.bytes;
		data[QPIP_ND_TX_ERRORS] = nd->tx_stats.errors;
	} while (u64_stats_fetch_retry(&nd->tx_stats.syncp, start));
	data[QPIP_ND_TX_DROPPED] = atomic64_read(&nd->tx_dropped);
	data[QPIP_ND_TX_STOPPED] = atomic64_read(&nd->tx_stopped);
	do {
		start = u64_stats_fetch_begin(&nd->rx_stats.syncp);
		data[QPIP_ND_RX_PACKETS] = nd->rx_stats.packets;
		data[QPIP_ND_RX_BYTES] = nd->rx_stats.bytes;
		data[QPIP_ND_RX_ERRORS] = nd->rx_stats.errors;
		data[QPIP_ND_RX_CSUM_OK] = nd->rx_stats.csum_ok;
		data[QPIP_ND_RX_TOO_LONG] = nd->rx_stats.too_long;
		data[QPIP_ND_RX_ALLOC_FAILED] = nd->rx_stats.alloc_failed;
		data[QPIP_ND_RX_MERGED] = nd->rx_stats.merged;
		data[QPIP_ND_RX_GSO] = nd->rx_stats.gso;
		data[QPIP_ND_RX_TOO_MANY_FRAGS] = nd->rx_stats.too_many_frags;
		data[QPIP_ND_RX_COPIED] = nd->rx_stats.copied;
	} while (u64_stats_fetch_retry(&nd->rx_stats.syncp, start));
	data[QPIP_ND_IRQS] = atomic64_read(&nd->irqs);
	data[QPIP_ND_KICKS] = atomic64_read(&nd->kicks);

	data += QPIP_ND_DRIVER_STATS;
	memset(data, 0, sizeof(*data) * ARRAY_SIZE(qpip_nd_device_stats));
	dev_stats = kzalloc(sizeof(*dev_stats), GFP_KERNEL);
	if (!dev_stats)
		return;
	down_read(&nd->qdev->lock);
	if (!nd->qdev->unbound)
		ret = qpip_query_stats(nd->qdev, dev_stats->counters, QPIP_STATS_COUNT);
	up_read(&nd->qdev->lock);
	/* A device with fewer counters writes fewer: the others read 0. */
	for (i = 0; ret >= 0 && i < ARRAY_SIZE(qpip_nd_device_stats); i++)
		data[i] = dev_stats->counters[qpip_nd_device_stats[i].index];
	kfree(dev_stats);
}

/*
 * The device reports no link speed (an emulated link has none): said as unknown, like
 * virtio-net without one, rather than not at all — the RDMA core (qpip_ib's port) warns
 * at every port query on an interface without link settings.
 */
static int qpip_nd_get_link_ksettings(struct net_device *dev,
				      struct ethtool_link_ksettings *cmd)
{
	cmd->base.speed = SPEED_UNKNOWN;
	cmd->base.duplex = DUPLEX_UNKNOWN;
	cmd->base.port = PORT_OTHER;
	return 0;
}

const struct ethtool_ops qpip_nd_ethtool_ops = {
	.get_drvinfo = qpip_nd_get_drvinfo,
	.get_link = ethtool_op_get_link,
	.get_link_ksettings = qpip_nd_get_link_ksettings,
	.get_sset_count = qpip_nd_get_sset_count,
	.get_strings = qpip_nd_get_strings,
	.get_ethtool_stats = qpip_nd_get_ethtool_stats,
};

/* ---- probe and remove ---- */

/*
 * Creates and registers the function's interface (after the admin queue runs and the
 * device was queried), imports the device's addresses onto it and starts keeping the two in
 * step. A function without an interface still serves its QPs: failure here is logged, and
 * probe goes on.
 */
int qpip_netdev_probe(struct qpip_dev *qdev)
{
	struct net_device *dev;
	struct qpip_netdev *nd;
	int ret;

	if (qpip_comp_vectors(qdev) < 1) {
		dev_warn(&qdev->pdev->dev, "%s: no completion vector: no network interface\n",
			 dev_name(&qdev->dev));
		return -EOPNOTSUPP;
	}
	dev = alloc_etherdev(sizeof(*nd));
	if (!dev)
		return -ENOMEM;
	SET_NETDEV_DEV(dev, &qdev->pdev->dev);
	strscpy(dev->name, "qpip%d", sizeof(dev->name));
	nd = netdev_priv(dev);
	nd->netdev = dev;
	nd->qdev = qdev;
	u64_stats_init(&nd->tx_stats.syncp);
	u64_stats_init(&nd->rx_stats.syncp);
	INIT_WORK(&nd->reset_work, qpip_nd_reset_work);
	qpip_nd_addr_init(nd);

	dev->netdev_ops = &qpip_nd_ops;
	dev->ethtool_ops = &qpip_nd_ethtool_ops;
	/*
	 * GRO_HW: TCP super-frames received whole (mergeable receive buffers, where the
	 * device has them), as virtio-net's guest TSO offloads.
	 */
	dev->hw_features = NETIF_F_SG | NETIF_F_HW_CSUM | NETIF_F_TSO | NETIF_F_TSO6 |
			   NETIF_F_RXCSUM | NETIF_F_GRO_HW;
	/*
	 * A frame is at most MTU + 14 bytes on this link: no room for a VLAN tag. The MAC may
	 * change while up (SET_MAC takes effect at once in the device).
	 */
	dev->features = dev->hw_features | NETIF_F_VLAN_CHALLENGED;
	dev->priv_flags |= IFF_LIVE_ADDR_CHANGE;
	dev->min_mtu = ETH_MIN_MTU;
	dev->max_mtu = qdev->info.mtu;
	dev->mtu = qdev->info.mtu;
	/* The device's TSO takes at most 65,535 bytes of IP packet. */
	netif_set_tso_max_size(dev, 65535);
	eth_hw_addr_set(dev, qdev->info.mac);
	netif_napi_add(dev, &nd->napi, qpip_nd_poll);
	netif_carrier_off(dev);

	if (!is_valid_ether_addr(dev->dev_addr)) {
		dev_err(&qdev->pdev->dev, "%s: the device's MAC %pM is not valid: no network interface\n",
			dev_name(&qdev->dev), dev->dev_addr);
		ret = -EINVAL;
		goto err_free;
	}
	ret = register_netdev(dev);
	if (ret) {
		dev_err(&qdev->pdev->dev, "%s: cannot register the network interface: %pe\n",
			dev_name(&qdev->dev), ERR_PTR(ret));
		goto err_free;
	}
	ret = qpip_nd_addr_start(nd);
	if (ret) {
		unregister_netdev(dev);
		goto err_free;
	}
	down_write(&qdev->lock);
	qdev->netdev = nd;
	up_write(&qdev->lock);
	/* Without them the interface still works: the device keeps only its own. */
	qpip_routes_start(qdev, dev);
	qpip_nd_neigh_start(nd);
	dev_info(&qdev->pdev->dev, "%s: network interface %s, MAC %pM, MTU %u\n",
		 dev_name(&qdev->dev), dev->name, dev->dev_addr, dev->mtu);
	return 0;

err_free:
	netif_napi_del(&nd->napi);
	free_netdev(dev);
	return ret;
}

/*
 * Removes the interface (before remove takes the function down: closing it destroys its
 * context through the admin queue). The device keeps its addresses and MAC, not the
 * routes it took from the interface.
 */
void qpip_netdev_remove(struct qpip_dev *qdev)
{
	struct qpip_netdev *nd = qdev->netdev;

	if (!nd)
		return;
	/* No reset and no sysfs or ioctl change finds the interface from here on. */
	down_write(&qdev->lock);
	qdev->netdev = NULL;
	up_write(&qdev->lock);
	/* The kernel's neighbour entries of the interface go with it: so do the device's. */
	qpip_nd_neigh_stop(nd);
	qpip_nd_addr_stop(nd);
	/* The kernel's routes through the interface go with it: so do the device's copies. */
	qpip_routes_stop(qdev);
	cancel_work_sync(&nd->reset_work);
	unregister_netdev(nd->netdev);
	netif_napi_del(&nd->napi);
	free_netdev(nd->netdev);
}
