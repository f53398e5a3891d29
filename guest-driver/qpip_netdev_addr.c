// SPDX-License-Identifier: GPL-2.0
/*
 * qpip: the network interface's addresses and MAC — one source of truth, the device's.
 *
 * The engine answers for the function's addresses (its QPs' connections), and so does the
 * guest kernel through the interface (everything else the raw QP is given): both must have
 * the same list. So:
 *
 * - When the interface is brought up it takes the device's configured addresses
 *   (LIST_ADDRS); they stay when it goes down (IPv6: keep_addr_on_down). Not at
 *   registration: an IPv4 address makes the guest kernel treat it as its own (a local
 *   route) even on a down interface, and answer ARP for it on its other NICs, which on a
 *   shared link takes the device's traffic away from it; an interface nobody brought up
 *   must change nothing. The kernel exports no call that adds an address to an interface,
 *   so the driver asks rtnetlink from inside the kernel, as `ip addr add` would
 *   (qpip_nd_rtnl_addr).
 * - From registration on, an address added to or removed from the interface (inetaddr
 *   and inet6addr notifiers, this interface only) becomes ADD_ADDR or DEL_ADDR, whoever
 *   added it: `ip addr`, SLAAC, a DHCP client's script. IPv6 link-local addresses are
 *   left out: the device derives the same fe80:: from the MAC.
 * - An IPv6 address reaches the device only once the interface's duplicate address
 *   detection is done with it (qpip_nd_dad_state). The kernel notifies an address when it
 *   is added, still tentative; were the device given it then, it would answer neighbour
 *   solicitations for it and take its traffic while DAD is still asking whether another
 *   node has it, and an address whose DAD failed would stay the device's (a permanent one
 *   stays on the interface, marked dadfailed). No notifier tells when DAD ends, so the
 *   addition waits on a list and is looked at again every QPIP_ND_DAD_POLL; one whose
 *   DAD failed, or that was removed meanwhile, is dropped. Optimistic addresses (RFC
 *   4429) wait too: they are tentative. An address DAD is not run for (accept_dad off,
 *   nodad) goes at once. The wait is only while DAD can run, on an interface up with
 *   carrier: the kernel keeps an address tentative on one that is down
 *   or has no carrier (a device without raw QPs never gives it one) until it has, and the
 *   device's QPs need not wait for that; such an address goes to the device at once.
 * - The older ways of configuring the device (sysfs `addresses` and `mac`, the ADD_ADDR,
 *   DEL_ADDR and SET_MAC ioctls) still configure the device, and the change is then
 *   mirrored onto the interface (qpip_netdev_mirror_addr, qpip_netdev_mirror_mac).
 *
 * Both directions go through one ordered list and one work item: the inet6addr notifier
 * runs in atomic context and admin commands sleep; rtnetlink takes rtnl, which the sysfs
 * and ioctl paths (holding qdev->lock) and ndo_open (holding rtnl) cannot take. A change
 * the work item makes to the interface for the device reaches the notifiers synchronously,
 * in its own task (nd->mirroring), and is not carried back.
 *
 * The device counts IPv4 addresses as IPv4-mapped IPv6 ones (::ffff:a.b.c.d) with prefix
 * lengths 97-128 (IPv4 prefix + 96).
 */
#include <linux/etherdevice.h>
#include <linux/inetdevice.h>
#include <linux/net.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/slab.h>
#include <net/addrconf.h>
#include <net/if_inet6.h>
#include <net/ipv6.h>

#include "qpip_netdev.h"

#define QPIP_IPV4_MAPPED_PREFIX 96
/* How often an IPv6 addition waiting for DAD is looked at again. */
#define QPIP_ND_DAD_POLL (HZ / 5)

/* ---- rtnetlink from inside the kernel ---- */

/*
 * Adds or removes @addr/@plen (@family AF_INET: 4 bytes, AF_INET6: 16) on @dev with an
 * RTM_NEWADDR or RTM_DELADDR request on a kernel rtnetlink socket; returns rtnetlink's
 * answer. Takes rtnl: not to be called with rtnl or qdev->lock held. The request names its
 * destination (the kernel, port 0), which is what lets rtnetlink check the capability on
 * the calling task (the work item's kworker) instead of on a file the socket has not.
 */
static int qpip_nd_rtnl_addr(struct net_device *dev, bool add, int family, const void *addr,
			     u8 plen)
{
	struct sockaddr_nl sa = { .nl_family = AF_NETLINK };
	int alen = family == AF_INET ? 4 : 16;
	struct msghdr msg = { .msg_name = &sa, .msg_namelen = sizeof(sa) };
	struct nlmsghdr *nh;
	struct ifaddrmsg *ifa;
	struct rtattr *rta;
	struct socket *sock;
	struct kvec iov;
	size_t size = NLMSG_SPACE(sizeof(*ifa) + 2 * RTA_SPACE(16)) + 512;
	void *buf;
	int ret, i;

	buf = kzalloc(size, GFP_KERNEL);
	if (!buf)
		return -ENOMEM;
	ret = sock_create_kern(dev_net(dev), AF_NETLINK, SOCK_RAW, NETLINK_ROUTE, &sock);
	if (ret)
		goto out_free;

	nh = buf;
	nh->nlmsg_len = NLMSG_LENGTH(sizeof(*ifa));
	nh->nlmsg_type = add ? RTM_NEWADDR : RTM_DELADDR;
	nh->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | (add ? NLM_F_CREATE | NLM_F_EXCL : 0);
	nh->nlmsg_seq = 1;
	ifa = NLMSG_DATA(nh);
	ifa->ifa_family = family;
	ifa->ifa_prefixlen = plen;
	ifa->ifa_scope = RT_SCOPE_UNIVERSE;
	ifa->ifa_index = dev->ifindex;
	/*
	 * IFA_LOCAL and IFA_ADDRESS: the same address, as `ip addr add` sends them. An IPv4
	 * removal names IFA_LOCAL only, which matches the address whatever its prefix length.
	 */
	for (i = 0; i < (add || family != AF_INET ? 2 : 1); i++) {
		rta = (void *)nh + NLMSG_ALIGN(nh->nlmsg_len);
		rta->rta_type = i ? IFA_ADDRESS : IFA_LOCAL;
		rta->rta_len = RTA_LENGTH(alen);
		memcpy(RTA_DATA(rta), addr, alen);
		nh->nlmsg_len = NLMSG_ALIGN(nh->nlmsg_len) + RTA_ALIGN(rta->rta_len);
	}
	iov.iov_base = nh;
	iov.iov_len = nh->nlmsg_len;
	ret = kernel_sendmsg(sock, &msg, &iov, 1, iov.iov_len);
	if (ret < 0)
		goto out_sock;

	/* rtnetlink handled the request in sendmsg: its answer is already queued. */
	memset(&msg, 0, sizeof(msg));
	iov.iov_base = buf;
	iov.iov_len = size;
	ret = kernel_recvmsg(sock, &msg, &iov, 1, size, MSG_DONTWAIT);
	if (ret < 0)
		goto out_sock;
	nh = buf;
	if (ret >= NLMSG_LENGTH(sizeof(struct nlmsgerr)) && nh->nlmsg_type == NLMSG_ERROR)
		ret = ((struct nlmsgerr *)NLMSG_DATA(nh))->error;
	else
		ret = -EPROTO;
out_sock:
	sock_release(sock);
out_free:
	kfree(buf);
	return ret;
}

/* The device's form of an IPv4 address and prefix. */
static void qpip_nd_map_v4(__be32 a, u8 plen, u8 *addr, u8 *dev_plen)
{
	ipv6_addr_set_v4mapped(a, (struct in6_addr *)addr);
	*dev_plen = QPIP_IPV4_MAPPED_PREFIX + (plen ? plen : 32);
}

/*
 * What @dev's IPv6 address @a is (under rtnl and the interface's address lock): its prefix
 * length, its flags and whether the kernel runs DAD for it (qpip_nd_dad_runs). False if
 * @dev has not that address. Takes rtnl.
 */
static bool qpip_nd_addr6(struct net_device *dev, const struct in6_addr *a, u8 *plen,
			  u32 *flags, bool *dad_runs);

/*
 * The prefix length of IPv6 address @a on @dev, 0 if it has not that address: RTM_DELADDR
 * of an IPv6 address must name the prefix length it has (the device's DEL_ADDR takes
 * none). Takes rtnl.
 */
static u8 qpip_nd_prefix6(struct net_device *dev, const struct in6_addr *a)
{
	bool dad = false;
	u32 flags = 0;
	u8 plen = 0;

	return qpip_nd_addr6(dev, a, &plen, &flags, &dad) ? plen : 0;
}

/* Puts device address @addr/@plen on the interface, or takes it off. */
static int qpip_nd_apply(struct qpip_netdev *nd, bool add, const u8 *addr, u8 plen)
{
	const struct in6_addr *a = (const struct in6_addr *)addr;
	int ret;

	if (ipv6_addr_v4mapped(a)) {
		if (add && plen <= QPIP_IPV4_MAPPED_PREFIX)
			return -EINVAL;
		ret = qpip_nd_rtnl_addr(nd->netdev, add, AF_INET, &a->s6_addr32[3],
					add ? plen - QPIP_IPV4_MAPPED_PREFIX : 32);
	} else {
		if (!add) {
			plen = qpip_nd_prefix6(nd->netdev, a);
			if (!plen)
				return 0;
		}
		ret = qpip_nd_rtnl_addr(nd->netdev, add, AF_INET6, a, plen);
	}
	/* Already so on the interface: nothing to do. */
	if ((add && ret == -EEXIST) || (!add && ret == -EADDRNOTAVAIL))
		ret = 0;
	if (ret)
		netdev_warn(nd->netdev, "cannot %s %pI6c/%u %s the interface: %pe\n",
			    add ? "put" : "take", addr, plen, add ? "on" : "off", ERR_PTR(ret));
	return ret;
}

/* The device's configured addresses onto the interface (the work item, at ndo_open). */
static void qpip_nd_import(struct qpip_netdev *nd)
{
	struct qpip_dev *qdev = nd->qdev;
	struct qpip_addr_list *list;
	unsigned int i;
	int ret;

	list = kzalloc(sizeof(*list), GFP_KERNEL);
	if (!list)
		return;
	down_read(&qdev->lock);
	ret = qdev->unbound ? -ENODEV : qpip_list_addrs(qdev, list);
	up_read(&qdev->lock);
	if (ret) {
		netdev_warn(nd->netdev, "cannot list the device's addresses: %pe\n", ERR_PTR(ret));
		list->count = 0;
	}
	for (i = 0; i < list->count; i++) {
		const struct qpip_addr_entry *e = &list->entries[i];

		if (e->flags & QPIP_ADDR_FLAG_LINK_LOCAL)
			continue;
		qpip_nd_apply(nd, true, e->addr, e->prefix_len);
	}
	kfree(list);
}

/* The interface came up (rtnl held): it takes the device's addresses, a moment later. */
void qpip_nd_addr_import(struct qpip_netdev *nd)
{
	struct qpip_nd_sync *s = kzalloc(sizeof(*s), GFP_KERNEL);

	if (!s) {
		netdev_err(nd->netdev, "out of memory: the device's addresses not imported\n");
		return;
	}
	s->kind = QPIP_ND_IMPORT;
	qpip_nd_sync_queue(nd, s);
}

/* ---- the list of changes and its work item (the neighbour entries' too) ---- */

void qpip_nd_sync_queue(struct qpip_netdev *nd, struct qpip_nd_sync *s)
{
	unsigned long flags;

	spin_lock_irqsave(&nd->sync_lock, flags);
	list_add_tail(&s->node, &nd->sync_list);
	spin_unlock_irqrestore(&nd->sync_lock, flags);
	schedule_work(&nd->sync_work);
}

/* Where the interface's duplicate address detection is with an IPv6 address. */
enum qpip_nd_dad {
	QPIP_ND_DAD_DONE,	/* not tentative: the address is usable */
	QPIP_ND_DAD_PENDING,	/* tentative, DAD under way */
	QPIP_ND_DAD_FAILED,	/* another node has it */
	QPIP_ND_DAD_GONE,	/* no longer on the interface */
};

#if IS_ENABLED(CONFIG_IPV6)
/*
 * Whether the kernel runs DAD for @flags's address on @idev: not with accept_dad off both
 * for the interface and for all (the lab's setting), nor for an address added with nodad
 * (addrconf_dad_begin's own conditions). Such an address is tentative only until the
 * kernel's DAD work item has looked at it, and need not wait for that.
 */
static bool qpip_nd_dad_runs(struct inet6_dev *idev, u32 flags)
{
	struct net_device *dev = idev->dev;

	if (flags & IFA_F_NODAD || dev->flags & (IFF_NOARP | IFF_LOOPBACK))
		return false;
	return READ_ONCE(idev->cnf.accept_dad) > 0 ||
	       READ_ONCE(dev_net(dev)->ipv6.devconf_all->accept_dad) > 0;
}
#endif

static bool qpip_nd_addr6(struct net_device *dev, const struct in6_addr *a, u8 *plen,
			  u32 *flags, bool *dad_runs)
{
	bool found = false;
#if IS_ENABLED(CONFIG_IPV6)
	struct inet6_ifaddr *ifp;
	struct inet6_dev *idev;

	rtnl_lock();
	idev = __in6_dev_get(dev);
	if (idev) {
		read_lock_bh(&idev->lock);
		list_for_each_entry(ifp, &idev->addr_list, if_list) {
			if (!ipv6_addr_equal(&ifp->addr, a))
				continue;
			found = true;
			*plen = ifp->prefix_len;
			*flags = READ_ONCE(ifp->flags);
			*dad_runs = qpip_nd_dad_runs(idev, *flags);
		}
		read_unlock_bh(&idev->lock);
	}
	rtnl_unlock();
#endif
	return found;
}

static enum qpip_nd_dad qpip_nd_dad_state(struct net_device *dev, const struct in6_addr *a)
{
	bool dad_runs = false;
	u32 flags = 0;
	u8 plen = 0;

	if (!qpip_nd_addr6(dev, a, &plen, &flags, &dad_runs))
		return QPIP_ND_DAD_GONE;
	if (flags & IFA_F_DADFAILED)
		return QPIP_ND_DAD_FAILED;
	if ((flags & IFA_F_TENTATIVE) && dad_runs && netif_running(dev) && netif_carrier_ok(dev))
		return QPIP_ND_DAD_PENDING;
	return QPIP_ND_DAD_DONE;
}

/*
 * An IPv6 addition whose address is still tentative waits (it is @nd's now). The poll is
 * armed under @sync_lock, so qpip_nd_addr_stop, which sets @dad_stopped under it before
 * cancelling the poll, leaves none armed.
 */
static void qpip_nd_dad_wait(struct qpip_netdev *nd, struct qpip_nd_sync *s)
{
	unsigned long flags;
	bool stopped;

	spin_lock_irqsave(&nd->sync_lock, flags);
	stopped = nd->dad_stopped;
	if (!stopped) {
		list_add_tail(&s->node, &nd->dad_list);
		schedule_delayed_work(&nd->dad_work, QPIP_ND_DAD_POLL);
	}
	spin_unlock_irqrestore(&nd->sync_lock, flags);
	if (stopped)
		kfree(s);
}

/* The additions that waited for DAD go through the work item again, in order. */
static void qpip_nd_dad_work(struct work_struct *work)
{
	struct qpip_netdev *nd = container_of(to_delayed_work(work), struct qpip_netdev,
					      dad_work);
	unsigned long flags;

	spin_lock_irqsave(&nd->sync_lock, flags);
	list_splice_tail_init(&nd->dad_list, &nd->sync_list);
	spin_unlock_irqrestore(&nd->sync_lock, flags);
	schedule_work(&nd->sync_work);
}

/*
 * Whether addition @s goes to the device now: IPv4 ones and IPv6 ones done with DAD do;
 * a tentative one waits (true: @s is taken); one whose DAD failed or that is gone is
 * dropped.
 */
static bool qpip_nd_dad_holds(struct qpip_netdev *nd, struct qpip_nd_sync *s)
{
	const struct in6_addr *a = (const struct in6_addr *)s->addr;

	if (!s->add || ipv6_addr_v4mapped(a))
		return false;
	switch (qpip_nd_dad_state(nd->netdev, a)) {
	case QPIP_ND_DAD_DONE:
		return false;
	case QPIP_ND_DAD_PENDING:
		qpip_nd_dad_wait(nd, s);
		return true;
	case QPIP_ND_DAD_FAILED:
		netdev_warn(nd->netdev, "duplicate address detection failed for %pI6c: not given to the device\n",
			    s->addr);
		break;
	case QPIP_ND_DAD_GONE:
		break;
	}
	kfree(s);
	return true;
}

/* An address of the interface changed: the device follows. */
static void qpip_nd_to_device(struct qpip_netdev *nd, const struct qpip_nd_sync *s)
{
	struct qpip_dev *qdev = nd->qdev;
	int ret;

	down_read(&qdev->lock);
	ret = qdev->unbound ? -ENODEV : qpip_change_addr(qdev, s->add, s->addr, s->prefix_len);
	up_read(&qdev->lock);
	/* ADDR_IN_USE: the device has it already (its own, or a change coming back). */
	if (!ret || ret == -EADDRINUSE)
		return;
	if (s->add)
		netdev_warn(nd->netdev, "the device refused address %pI6c/%u (%pe): the adapter does not answer for it\n",
			    s->addr, s->prefix_len, ERR_PTR(ret));
	else
		netdev_dbg(nd->netdev, "DEL_ADDR %pI6c: %pe\n", s->addr, ERR_PTR(ret));
}

/* The device's MAC changed through sysfs or an ioctl: so does the interface's. */
static void qpip_nd_mac_to_netdev(struct qpip_netdev *nd, const u8 *mac)
{
	rtnl_lock();
	if (!ether_addr_equal(nd->netdev->dev_addr, mac)) {
		eth_hw_addr_set(nd->netdev, mac);
		call_netdevice_notifiers(NETDEV_CHANGEADDR, nd->netdev);
	}
	rtnl_unlock();
}

static void qpip_nd_sync_work(struct work_struct *work)
{
	struct qpip_netdev *nd = container_of(work, struct qpip_netdev, sync_work);
	struct qpip_nd_sync *s;
	unsigned long flags;

	for (;;) {
		spin_lock_irqsave(&nd->sync_lock, flags);
		s = list_first_entry_or_null(&nd->sync_list, struct qpip_nd_sync, node);
		if (s)
			list_del(&s->node);
		spin_unlock_irqrestore(&nd->sync_lock, flags);
		if (!s)
			return;
		if (s->kind == QPIP_ND_ADDR_TO_DEVICE && qpip_nd_dad_holds(nd, s))
			continue;
		WRITE_ONCE(nd->mirroring, current);
		switch (s->kind) {
		case QPIP_ND_ADDR_TO_DEVICE:
			qpip_nd_to_device(nd, s);
			break;
		case QPIP_ND_ADDR_TO_NETDEV:
			/* A down interface gets the device's additions when it comes up. */
			if (!s->add || netif_running(nd->netdev))
				qpip_nd_apply(nd, s->add, s->addr, s->prefix_len);
			break;
		case QPIP_ND_MAC_TO_NETDEV:
			qpip_nd_mac_to_netdev(nd, s->mac);
			break;
		case QPIP_ND_IMPORT:
			qpip_nd_import(nd);
			break;
		case QPIP_ND_NEIGH:
			qpip_nd_neigh_apply(nd, s);
			break;
		case QPIP_ND_NEIGH_RESYNC:
			qpip_nd_neigh_resync(nd, s);
			break;
		}
		WRITE_ONCE(nd->mirroring, NULL);
		kfree(s);
	}
}

/* ---- notifiers: the interface's addresses to the device ---- */

static void qpip_nd_addr_event(struct qpip_netdev *nd, unsigned long event, const u8 *addr,
			       u8 prefix_len, gfp_t gfp)
{
	struct qpip_nd_sync *s;

	if (event != NETDEV_UP && event != NETDEV_DOWN)
		return;
	/* The work item putting the device's own change on the interface. */
	if (READ_ONCE(nd->mirroring) == current)
		return;
	s = kzalloc(sizeof(*s), gfp);
	if (!s) {
		netdev_err(nd->netdev, "out of memory: address %pI6c not carried to the device\n",
			   addr);
		return;
	}
	s->kind = QPIP_ND_ADDR_TO_DEVICE;
	s->add = event == NETDEV_UP;
	memcpy(s->addr, addr, 16);
	s->prefix_len = prefix_len;
	qpip_nd_sync_queue(nd, s);
}

/* Process context, rtnl held. */
static int qpip_nd_inet_event(struct notifier_block *nb, unsigned long event, void *ptr)
{
	struct qpip_netdev *nd = container_of(nb, struct qpip_netdev, inet_nb);
	struct in_ifaddr *ifa = ptr;
	u8 addr[16], plen;

	if (ifa->ifa_dev->dev != nd->netdev)
		return NOTIFY_DONE;
	qpip_nd_map_v4(ifa->ifa_local, ifa->ifa_prefixlen, addr, &plen);
	qpip_nd_addr_event(nd, event, addr, plen, GFP_KERNEL);
	return NOTIFY_DONE;
}

/* Atomic context. */
static int qpip_nd_inet6_event(struct notifier_block *nb, unsigned long event, void *ptr)
{
	struct qpip_netdev *nd = container_of(nb, struct qpip_netdev, inet6_nb);
	struct inet6_ifaddr *ifa = ptr;

	if (ifa->idev->dev != nd->netdev)
		return NOTIFY_DONE;
	/* The device has its own link-local address, from the same MAC. */
	if (ipv6_addr_type(&ifa->addr) & IPV6_ADDR_LINKLOCAL)
		return NOTIFY_DONE;
	qpip_nd_addr_event(nd, event, ifa->addr.s6_addr, ifa->prefix_len, GFP_ATOMIC);
	return NOTIFY_DONE;
}

/* Before the interface is registered: it may be opened at once. */
void qpip_nd_addr_init(struct qpip_netdev *nd)
{
	spin_lock_init(&nd->sync_lock);
	INIT_LIST_HEAD(&nd->sync_list);
	INIT_WORK(&nd->sync_work, qpip_nd_sync_work);
	INIT_LIST_HEAD(&nd->dad_list);
	INIT_DELAYED_WORK(&nd->dad_work, qpip_nd_dad_work);
}

/*
 * After registration: IPv6 addresses stay when the interface goes down (keep_addr_on_down),
 * as IPv4 ones do, since down is not removal and must not take them from the device; and
 * from now on the interface's address changes reach the device.
 */
int qpip_nd_addr_start(struct qpip_netdev *nd)
{
#if IS_ENABLED(CONFIG_IPV6)
	struct inet6_dev *idev;
#endif
	int ret;

#if IS_ENABLED(CONFIG_IPV6)
	rtnl_lock();
	idev = __in6_dev_get(nd->netdev);
	if (idev)
		WRITE_ONCE(idev->cnf.keep_addr_on_down, 1);
	rtnl_unlock();
#endif
	nd->inet_nb.notifier_call = qpip_nd_inet_event;
	nd->inet6_nb.notifier_call = qpip_nd_inet6_event;
	ret = register_inetaddr_notifier(&nd->inet_nb);
	if (ret)
		return ret;
	ret = register_inet6addr_notifier(&nd->inet6_nb);
	if (ret) {
		unregister_inetaddr_notifier(&nd->inet_nb);
		return ret;
	}
	nd->notifiers = true;
	return 0;
}

/*
 * Stops carrying changes (before the interface is unregistered, which removes its
 * addresses: that must not remove them from the device). Changes still queued are
 * carried out first, so a sysfs change made just before is not lost on either side.
 */
void qpip_nd_addr_stop(struct qpip_netdev *nd)
{
	struct qpip_nd_sync *s, *tmp;
	unsigned long flags;

	if (!nd->notifiers)
		return;
	unregister_inet6addr_notifier(&nd->inet6_nb);
	unregister_inetaddr_notifier(&nd->inet_nb);
	nd->notifiers = false;
	/* Additions still waiting for DAD are dropped: the interface goes, and DAD with it. */
	spin_lock_irqsave(&nd->sync_lock, flags);
	nd->dad_stopped = true;
	spin_unlock_irqrestore(&nd->sync_lock, flags);
	cancel_delayed_work_sync(&nd->dad_work);
	flush_work(&nd->sync_work);
	list_for_each_entry_safe(s, tmp, &nd->dad_list, node) {
		list_del(&s->node);
		kfree(s);
	}
}

/* ---- the device's older configuration paths, mirrored onto the interface ---- */

/*
 * Sysfs or an ioctl changed the device's addresses (qdev->lock held for reading): the
 * interface follows, a moment later, from the work item (a down one takes removals only;
 * it imports the device's list when it comes up).
 */
void qpip_netdev_mirror_addr(struct qpip_dev *qdev, bool add, const u8 *addr, u8 prefix_len)
{
	struct qpip_netdev *nd = qdev->netdev;
	struct qpip_nd_sync *s;

	if (!nd)
		return;
	s = kzalloc(sizeof(*s), GFP_KERNEL);
	if (!s)
		return;
	s->kind = QPIP_ND_ADDR_TO_NETDEV;
	s->add = add;
	memcpy(s->addr, addr, 16);
	s->prefix_len = prefix_len;
	qpip_nd_sync_queue(nd, s);
}

void qpip_netdev_mirror_mac(struct qpip_dev *qdev, const u8 *mac)
{
	struct qpip_netdev *nd = qdev->netdev;
	struct qpip_nd_sync *s;

	if (!nd)
		return;
	s = kzalloc(sizeof(*s), GFP_KERNEL);
	if (!s)
		return;
	s->kind = QPIP_ND_MAC_TO_NETDEV;
	ether_addr_copy(s->mac, mac);
	qpip_nd_sync_queue(nd, s);
}
