// SPDX-License-Identifier: GPL-2.0
/*
 * qpip: the guest kernel's routes through the function's network interface, mirrored into
 * the device's routing table (ADD_ROUTE, DEL_ROUTE).
 *
 * `ip route` on the interface is the one source of truth for the device's routes, as
 * `ip addr` is for its addresses: the engine routes the QPs' packets, the guest kernel
 * everything else, and both must send a destination to the same gateway. So the FIB
 * notifiers (which replay the existing routes at registration) tell us every change, and
 * the device follows:
 *
 * - Only the main table (RT_TABLE_MAIN, RT6_TABLE_MAIN): the device has one table, and the
 *   local table holds no routes with a gateway. Policy routing tables are not its business.
 * - The kernel notifies one route per prefix, the one it uses (the first: lowest metric);
 *   when that one goes, the next one of the prefix is notified in its place (REPLACE), and
 *   DEL only when the prefix has no route left. So the device holds at most one route per
 *   prefix, the one the kernel uses, and a route with a higher metric behind it is not
 *   mirrored until it becomes the first.
 * - A route is mirrored when it is a unicast route through this interface with a gateway of
 *   its own family and one next hop; its metric passes through (IPv4's priority, 0 unless
 *   set; IPv6's metric, 1024 unless set). Anything else that becomes a prefix's route
 *   (another interface, no gateway — the on-link prefix routes —, a reject route, a
 *   multipath route, a route through a nexthop object) takes the prefix's mirrored route
 *   out of the device. Multipath routes are left out rather than cut to one path: the
 *   device would send everything to one gateway while the kernel spreads it. Nexthop
 *   objects (`ip nexthop`) are left out because a change to one comes as a nexthop event,
 *   not as a route event, and the device would keep the old gateway.
 * - IPv4 routes go to the device IPv4-mapped (::ffff:a.b.c.d, prefix length + 96). IPv6
 *   routes to IPv4-mapped prefixes and source-specific IPv6 routes are ignored: the device
 *   would read the first as IPv4 and has no source routing.
 *
 * The notifier runs in atomic context (under RCU, or a table's lock for IPv6) and admin
 * commands sleep: each event is copied out and carried to the device by a work item on an
 * ordered workqueue, in the order the kernel made the changes. The notifier never refuses
 * a route (a refusal would fail the `ip route add`).
 *
 * The device refuses routes beyond admin::MAX_ROUTES (NO_RESOURCES): the route is left
 * out, counted and logged (the first refusal after a success), and not tried again. A
 * route the device already has with the same prefix and metric (`qpipd --route`) is left
 * as it is and not counted as ours, so taking ours out never takes the device's own.
 *
 * The list of what was mirrored (@mirrored) is what a DEL or a REPLACE takes out, what a
 * reset gives back to the device (which forgets its routes, qpip_routes_restore), and what
 * qpip_routes_stop removes: once the interface is unregistered the kernel has none of
 * those routes, so neither does the device.
 */
#include <linux/in6.h>
#include <linux/netdevice.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/workqueue.h>
#include <net/fib_notifier.h>
#include <net/ip6_fib.h>
#include <net/ip_fib.h>
#include <net/ipv6.h>
#include <net/nexthop.h>

#include "qpip.h"

/* The device counts an IPv4 prefix over the 128 bits of its IPv4-mapped form. */
#define QPIP_ROUTE_V4_PREFIX 96

struct qpip_routes {
	struct qpip_dev *qdev;
	struct net_device *netdev;	/* the interface whose routes are mirrored */
	struct net *net;		/* its namespace when mirroring started */
	struct notifier_block fib_nb;
	bool registered;		/* @fib_nb is on the FIB notifier chain */
	struct workqueue_struct *wq;	/* ordered: the device sees the kernel's order */

	/*
	 * What the device holds for us: at most one route per prefix. Taken inside qdev->lock
	 * (for reading by the work items and qpip_routes_stop, for writing by a reset).
	 */
	struct mutex lock;
	struct qpip_route_spec mirrored[QPIP_MAX_ROUTES];
	unsigned int nmirrored;
	/* Routes the device refused for want of room (NO_RESOURCES), and whether that was said. */
	unsigned long refused;
	bool full_logged;
};

/* What a FIB event asks of the device, copied out of the notifier. */
enum qpip_route_op {
	/* The prefix's route is now @route: mirror it (in place of the prefix's old one). */
	QPIP_ROUTE_SET,
	/* The prefix has no route the device can take: remove the prefix's mirrored route. */
	QPIP_ROUTE_CLEAR,
};

struct qpip_route_event {
	struct work_struct work;
	struct qpip_routes *routes;
	enum qpip_route_op op;
	struct qpip_route_spec route;	/* CLEAR: @dest and @prefix_len only */
};

/* ---- the device's side: work items, with qdev->lock held for reading ---- */

static int qpip_routes_find(struct qpip_routes *r, const struct qpip_route_spec *s)
{
	unsigned int i;

	for (i = 0; i < r->nmirrored; i++)
		if (r->mirrored[i].prefix_len == s->prefix_len &&
		    !memcmp(r->mirrored[i].dest, s->dest, sizeof(s->dest)))
			return i;
	return -1;
}

/* Takes mirrored route @i out of the device and out of the list. */
static void qpip_routes_remove(struct qpip_routes *r, unsigned int i)
{
	struct qpip_route_spec *s = &r->mirrored[i];
	int ret;

	ret = qpip_cmd_route(r->qdev, false, s);
	/* BAD_HANDLE: the device lost it already (a reset that could not give it back). */
	if (ret && ret != -ENOENT)
		net_ratelimited_function(netdev_warn, r->netdev, "cannot remove route %pI6c/%u metric %u from the device: %pe\n",
					s->dest, s->prefix_len, s->metric, ERR_PTR(ret));
	r->mirrored[i] = r->mirrored[--r->nmirrored];
	/* Room again: the next refusal is news. */
	r->full_logged = false;
}

static void qpip_routes_add(struct qpip_routes *r, const struct qpip_route_spec *s)
{
	int ret = -ENOSPC;

	if (r->nmirrored < ARRAY_SIZE(r->mirrored))
		ret = qpip_cmd_route(r->qdev, true, s);
	switch (ret) {
	case 0:
		r->mirrored[r->nmirrored++] = *s;
		break;
	case -ENOSPC:
		r->refused++;
		if (!r->full_logged && net_ratelimit())
			netdev_warn(r->netdev, "the device holds no more routes (at most %u): route %pI6c/%u via %pI6c not mirrored (%lu refused so far); QPs to it follow the device's other routes\n",
				    QPIP_MAX_ROUTES, s->dest, s->prefix_len, s->gateway, r->refused);
		r->full_logged = true;
		break;
	case -EADDRINUSE:
		/* The device's own (qpipd --route): it stays, and it is not ours to remove. */
		netdev_info(r->netdev, "the device has a route to %pI6c/%u metric %u already: it keeps its own\n",
			    s->dest, s->prefix_len, s->metric);
		break;
	default:
		net_ratelimited_function(netdev_warn, r->netdev, "the device refused route %pI6c/%u via %pI6c metric %u: %pe\n",
					s->dest, s->prefix_len, s->gateway, s->metric, ERR_PTR(ret));
		break;
	}
}

static void qpip_routes_apply(struct qpip_routes *r, const struct qpip_route_event *ev)
{
	const struct qpip_route_spec *s = &ev->route;
	int i = qpip_routes_find(r, s);

	if (i >= 0) {
		const struct qpip_route_spec *old = &r->mirrored[i];

		/* The same route notified again (a replay, a replace by an equal one). */
		if (ev->op == QPIP_ROUTE_SET && old->metric == s->metric &&
		    !memcmp(old->gateway, s->gateway, sizeof(s->gateway)))
			return;
		/* The device names a route by its metric: the old one goes first. */
		qpip_routes_remove(r, i);
	}
	if (ev->op == QPIP_ROUTE_SET)
		qpip_routes_add(r, s);
}

static void qpip_routes_work(struct work_struct *work)
{
	struct qpip_route_event *ev = container_of(work, struct qpip_route_event, work);
	struct qpip_routes *r = ev->routes;
	struct qpip_dev *qdev = r->qdev;

	down_read(&qdev->lock);
	mutex_lock(&r->lock);
	if (!qdev->unbound)
		qpip_routes_apply(r, ev);
	mutex_unlock(&r->lock);
	up_read(&qdev->lock);
	kfree(ev);
}

/* Every mirrored route out of the device. The workqueue is idle (flushed or destroyed). */
static void qpip_routes_purge(struct qpip_routes *r)
{
	struct qpip_dev *qdev = r->qdev;

	down_read(&qdev->lock);
	mutex_lock(&r->lock);
	while (r->nmirrored) {
		if (qdev->unbound)
			r->nmirrored = 0;
		else
			qpip_routes_remove(r, r->nmirrored - 1);
	}
	mutex_unlock(&r->lock);
	up_read(&qdev->lock);
}

/*
 * After a reset (qdev->lock held for writing, from qpip_restore_config): the device forgot
 * the routes it was given; it gets the mirrored ones back. One it refuses now is dropped
 * from the list and logged; the reset goes on.
 */
void qpip_routes_restore(struct qpip_dev *qdev)
{
	struct qpip_routes *r = qdev->routes;
	unsigned int i = 0;
	int ret;

	if (!r)
		return;
	mutex_lock(&r->lock);
	while (i < r->nmirrored) {
		struct qpip_route_spec *s = &r->mirrored[i];

		ret = qpip_cmd_route(qdev, true, s);
		if (!ret) {
			i++;
			continue;
		}
		netdev_warn(r->netdev, "route %pI6c/%u via %pI6c not given back to the device after its reset: %pe\n",
			    s->dest, s->prefix_len, s->gateway, ERR_PTR(ret));
		r->mirrored[i] = r->mirrored[--r->nmirrored];
	}
	mutex_unlock(&r->lock);
}

/* ---- the kernel's side: the FIB notifier, atomic context ---- */

static void qpip_routes_queue(struct qpip_routes *r, enum qpip_route_op op,
			      const struct qpip_route_spec *s)
{
	struct qpip_route_event *ev = kzalloc(sizeof(*ev), GFP_ATOMIC);

	if (!ev) {
		net_ratelimited_function(netdev_err, r->netdev, "out of memory: a change of route %pI6c/%u not carried to the device\n",
				       s->dest, s->prefix_len);
		return;
	}
	INIT_WORK(&ev->work, qpip_routes_work);
	ev->routes = r;
	ev->op = op;
	ev->route = *s;
	queue_work(r->wq, &ev->work);
}

static void qpip_routes_fib4(struct qpip_routes *r, unsigned long event,
			     const struct fib_entry_notifier_info *fen)
{
	struct qpip_route_spec s = {};
	struct fib_info *fi = fen->fi;
	struct fib_nh_common *nhc;

	if (fen->tb_id != RT_TABLE_MAIN)
		return;
	/* fen->dst is in host order. */
	ipv6_addr_set_v4mapped(htonl(fen->dst), (struct in6_addr *)s.dest);
	s.prefix_len = QPIP_ROUTE_V4_PREFIX + fen->dst_len;
	if (event != FIB_EVENT_ENTRY_REPLACE || fen->type != RTN_UNICAST || fi->nh ||
	    fi->fib_nhs != 1)
		goto clear;
	nhc = fib_info_nhc(fi, 0);
	if (nhc->nhc_dev != r->netdev || nhc->nhc_gw_family != AF_INET)
		goto clear;
	ipv6_addr_set_v4mapped(nhc->nhc_gw.ipv4, (struct in6_addr *)s.gateway);
	s.metric = fi->fib_priority;
	qpip_routes_queue(r, QPIP_ROUTE_SET, &s);
	return;
clear:
	qpip_routes_queue(r, QPIP_ROUTE_CLEAR, &s);
}

static void qpip_routes_fib6(struct qpip_routes *r, unsigned long event,
			     const struct fib6_entry_notifier_info *fen6)
{
#if IS_ENABLED(CONFIG_IPV6)
	struct fib6_info *rt = fen6->rt;
	struct qpip_route_spec s = {};
	struct fib6_nh *nh;

	if (!rt->fib6_table || rt->fib6_table->tb6_id != RT6_TABLE_MAIN || rt->fib6_src.plen)
		return;
	if (ipv6_addr_v4mapped(&rt->fib6_dst.addr) && rt->fib6_dst.plen >= QPIP_ROUTE_V4_PREFIX)
		return;
	memcpy(s.dest, &rt->fib6_dst.addr, sizeof(s.dest));
	s.prefix_len = rt->fib6_dst.plen;
	/* APPEND: a sibling joined the prefix's route, which is multipath from now on. */
	if (event != FIB_EVENT_ENTRY_REPLACE || fen6->nsiblings ||
	    READ_ONCE(rt->fib6_nsiblings) || rt->nh || rt->fib6_type != RTN_UNICAST ||
	    (rt->fib6_flags & RTF_REJECT))
		goto clear;
	nh = rt->fib6_nh;
	if (nh->fib_nh_dev != r->netdev || nh->fib_nh_gw_family != AF_INET6)
		goto clear;
	memcpy(s.gateway, &nh->fib_nh_gw6, sizeof(s.gateway));
	s.metric = rt->fib6_metric;
	qpip_routes_queue(r, QPIP_ROUTE_SET, &s);
	return;
clear:
	qpip_routes_queue(r, QPIP_ROUTE_CLEAR, &s);
#endif
}

static int qpip_routes_event(struct notifier_block *nb, unsigned long event, void *ptr)
{
	struct qpip_routes *r = container_of(nb, struct qpip_routes, fib_nb);
	struct fib_notifier_info *info = ptr;

	switch (event) {
	case FIB_EVENT_ENTRY_REPLACE:
	case FIB_EVENT_ENTRY_APPEND:
	case FIB_EVENT_ENTRY_DEL:
		break;
	default:
		return NOTIFY_DONE;
	}
	if (info->family == AF_INET)
		qpip_routes_fib4(r, event, container_of(info, struct fib_entry_notifier_info, info));
	else if (info->family == AF_INET6)
		qpip_routes_fib6(r, event, container_of(info, struct fib6_entry_notifier_info, info));
	return NOTIFY_DONE;
}

/*
 * The replay of the existing routes raced with a change (register_fib_notifier tries
 * again, with the notifier off the chain): forget what it brought, from the device too.
 */
static void qpip_routes_replay_flush(struct notifier_block *nb)
{
	struct qpip_routes *r = container_of(nb, struct qpip_routes, fib_nb);

	flush_workqueue(r->wq);
	qpip_routes_purge(r);
}

/* ---- start and stop, with the interface ---- */

/*
 * Starts mirroring the routes through @nd, the function's registered network interface,
 * into the device: the existing ones at once (the notifier's replay), the changes from
 * then on. Called by qpip_netdev_probe once register_netdev succeeded, without rtnl or
 * qdev->lock held (it sleeps). A failure is logged here and leaves the function as it
 * was: the caller may go on without routes, and qpip_routes_stop is still safe to call.
 */
int qpip_routes_start(struct qpip_dev *qdev, struct net_device *nd)
{
	struct qpip_routes *r;
	int ret;

	if (qpip_version_minor(qdev->version) < 3) {
		netdev_info(nd, "device interface %u.%u has no routing table: the interface's routes are not mirrored\n",
			    qpip_version_major(qdev->version), qpip_version_minor(qdev->version));
		return -EOPNOTSUPP;
	}
	if (qdev->routes)
		return -EBUSY;
	r = kzalloc(sizeof(*r), GFP_KERNEL);
	if (!r)
		return -ENOMEM;
	r->qdev = qdev;
	r->netdev = nd;
	r->net = dev_net(nd);
	mutex_init(&r->lock);
	r->wq = alloc_ordered_workqueue("%s-routes", 0, dev_name(&qdev->dev));
	if (!r->wq) {
		kfree(r);
		return -ENOMEM;
	}
	/* Before the replay: a reset from now on gives the device back what was mirrored. */
	down_write(&qdev->lock);
	qdev->routes = r;
	up_write(&qdev->lock);

	r->fib_nb.notifier_call = qpip_routes_event;
	ret = register_fib_notifier(r->net, &r->fib_nb, qpip_routes_replay_flush, NULL);
	if (ret) {
		netdev_err(nd, "cannot follow the kernel's routes (FIB notifier): %pe; the device's routes are not mirrored\n",
			   ERR_PTR(ret));
		qpip_routes_stop(qdev);
		return ret;
	}
	r->registered = true;
	return 0;
}

/*
 * Stops mirroring and removes every mirrored route from the device: the interface is
 * about to be unregistered, and with it the kernel's routes through it. Called by
 * qpip_netdev_remove before unregister_netdev, without rtnl or qdev->lock held (it sleeps);
 * does nothing if mirroring was not started.
 */
void qpip_routes_stop(struct qpip_dev *qdev)
{
	struct qpip_routes *r;

	down_write(&qdev->lock);
	r = qdev->routes;
	qdev->routes = NULL;
	up_write(&qdev->lock);
	if (!r)
		return;
	if (r->registered)
		unregister_fib_notifier(r->net, &r->fib_nb);
	/* Carries out the events still queued, then no work item is left. */
	destroy_workqueue(r->wq);
	qpip_routes_purge(r);
	if (r->refused)
		netdev_info(r->netdev, "%lu routes were not mirrored: the device had no room for them\n",
			    r->refused);
	mutex_destroy(&r->lock);
	kfree(r);
}
