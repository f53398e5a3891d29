// SPDX-License-Identifier: GPL-2.0
/*
 * qpip: the network interface's static neighbours (`ip neigh add ... nud permanent`),
 * mirrored into the device's neighbour cache (ADD_NEIGH, DEL_NEIGH).
 *
 * The engine resolves the neighbours of the QPs' traffic itself, with ARP and NDP, as the
 * guest kernel does for its own: a dynamic (learned) entry of the kernel is not mirrored,
 * since the engine learns the same from the same link. A permanent entry is configuration,
 * not something either side can learn, so the device is told of it: the QPs' packets to
 * that address go to that MAC without resolution, as the kernel's do. So:
 *
 * - A netevent notifier (NETEVENT_NEIGH_UPDATE, every neighbour table change of every
 *   interface) picks this interface's ARP and NDP entries. One that is NUD_PERMANENT (and
 *   not dead) is ADD_NEIGH'ed — when it becomes permanent, and again when its link-layer
 *   address changes (`ip neigh replace`); one that was mirrored and is no longer permanent
 *   (`ip neigh del`, `nud reachable`, a flush: the interface going down or changing its
 *   MAC removes even permanent entries) is DEL_NEIGH'ed. The device replaces any entry it
 *   had for the address, its own from `qpipd --neighbor` included.
 * - The interface coming up, and a device reset (after which the device has forgotten
 *   what it was given), walk the kernel's tables and give the device the permanent entries
 *   there are, as the addresses are carried at those times (qpip_nd_addr_import).
 * - Removing the interface (rmmod) takes every mirrored entry out of the device: the
 *   kernel's entries go with the interface.
 *
 * The notifier runs in atomic context and admin commands sleep: an event is copied out and
 * carried by the interface's one ordered list of changes and its work item
 * (qpip_nd_sync_queue, shared with the addresses). Until a permanent entry was seen, the
 * notifier drops the interface's other updates without allocating anything: nothing can
 * be mirrored that would need removing.
 *
 * The device holds admin::MAX_NEIGHBORS static entries (NO_RESOURCES beyond, its own from
 * qpipd counted): an entry refused is left to resolution, counted and logged (the first
 * refusal after a success), and not tried again until the interface comes up again.
 */
#include <linux/etherdevice.h>
#include <linux/slab.h>
#include <net/arp.h>
#include <net/ipv6.h>
#include <net/ndisc.h>
#include <net/neighbour.h>
#include <net/netevent.h>

#include "qpip_netdev.h"

/* The device's form of neighbour @n's address: IPv6, or IPv4-mapped. */
static void qpip_nd_neigh_addr(const struct neighbour *n, u8 *addr)
{
	if (n->tbl->family == AF_INET)
		ipv6_addr_set_v4mapped(*(const __be32 *)n->primary_key, (struct in6_addr *)addr);
	else
		memcpy(addr, n->primary_key, 16);
}

/* Whether @n is an entry of @dev the device is to hold. */
static bool qpip_nd_neigh_permanent(const struct neighbour *n)
{
	return (READ_ONCE(n->nud_state) & NUD_PERMANENT) && !READ_ONCE(n->dead);
}

static bool qpip_nd_neigh_ours(const struct qpip_netdev *nd, const struct neighbour *n)
{
	return n->dev == nd->netdev &&
	       (n->tbl->family == AF_INET || n->tbl->family == AF_INET6);
}

/* ---- the device's side: the work item (qpip_nd_sync_work) ---- */

static int qpip_nd_neigh_find(const struct qpip_netdev *nd, const u8 *addr)
{
	unsigned int i;

	for (i = 0; i < nd->nneigh; i++)
		if (!memcmp(nd->neigh[i].addr, addr, 16))
			return i;
	return -1;
}

/* ADD_NEIGH or DEL_NEIGH, while the device is there. */
static int qpip_nd_neigh_cmd(struct qpip_netdev *nd, bool add, const u8 *addr, const u8 *mac)
{
	struct qpip_dev *qdev = nd->qdev;
	int ret;

	down_read(&qdev->lock);
	ret = qdev->unbound ? -ENODEV : qpip_cmd_neigh(qdev, add, addr, mac);
	up_read(&qdev->lock);
	return ret;
}

/* Takes mirrored entry @i out of the device and out of the list. */
static void qpip_nd_neigh_remove(struct qpip_netdev *nd, unsigned int i)
{
	const struct qpip_nd_neigh *e = &nd->neigh[i];
	int ret;

	ret = qpip_nd_neigh_cmd(nd, false, e->addr, NULL);
	/* BAD_HANDLE: the device lost it already (a reset, before the entries came back). */
	if (ret && ret != -ENOENT && ret != -ENODEV)
		net_ratelimited_function(netdev_warn, nd->netdev, "cannot remove static neighbour %pI6c from the device: %pe\n",
					 e->addr, ERR_PTR(ret));
	nd->neigh[i] = nd->neigh[--nd->nneigh];
	/* Room again: the next refusal is news. */
	nd->neigh_full_logged = false;
}

/*
 * The device takes @addr at @mac (in place of what it had for @addr); @i is its place in
 * the list, or -1 for an address not mirrored yet.
 */
static void qpip_nd_neigh_add(struct qpip_netdev *nd, int i, const u8 *addr, const u8 *mac)
{
	int ret = -ENOSPC;

	if (i >= 0 || nd->nneigh < ARRAY_SIZE(nd->neigh))
		ret = qpip_nd_neigh_cmd(nd, true, addr, mac);
	if (!ret) {
		if (i < 0)
			i = nd->nneigh++;
		memcpy(nd->neigh[i].addr, addr, 16);
		ether_addr_copy(nd->neigh[i].mac, mac);
		return;
	}
	/* The device's entry for it is no longer what the kernel has. */
	if (i >= 0)
		qpip_nd_neigh_remove(nd, i);
	if (ret == -ENOSPC) {
		nd->neigh_refused++;
		if (!nd->neigh_full_logged && net_ratelimit())
			netdev_warn(nd->netdev, "the device holds no more static neighbours (at most %u): %pI6c lladdr %pM not mirrored (%lu refused so far); QPs resolve it\n",
				    QPIP_MAX_NEIGHBORS, addr, mac, nd->neigh_refused);
		nd->neigh_full_logged = true;
	} else if (ret != -ENODEV) {
		net_ratelimited_function(netdev_warn, nd->netdev, "the device refused static neighbour %pI6c lladdr %pM: %pe\n",
					 addr, mac, ERR_PTR(ret));
	}
}

/* A neighbour entry of the interface changed (@s->add: it is permanent, at @s->mac). */
void qpip_nd_neigh_apply(struct qpip_netdev *nd, const struct qpip_nd_sync *s)
{
	int i = qpip_nd_neigh_find(nd, s->addr);

	if (s->add) {
		/* The same notified again (a replay, a change of state only). */
		if (i >= 0 && ether_addr_equal(nd->neigh[i].mac, s->mac))
			return;
		qpip_nd_neigh_add(nd, i, s->addr, s->mac);
	} else if (i >= 0) {
		qpip_nd_neigh_remove(nd, i);
	}
}

/* The permanent entries of the interface found in the kernel's tables. */
struct qpip_nd_neigh_walk {
	const struct qpip_netdev *nd;
	struct qpip_nd_neigh *found;
	unsigned int nfound;
	unsigned int more;		/* beyond what the device could hold */
};

/* Atomic context (the table's lock). */
static void qpip_nd_neigh_collect(struct neighbour *n, void *cookie)
{
	struct qpip_nd_neigh_walk *w = cookie;
	struct qpip_nd_neigh *e;

	if (!qpip_nd_neigh_ours(w->nd, n) || !qpip_nd_neigh_permanent(n))
		return;
	if (w->nfound == QPIP_MAX_NEIGHBORS) {
		w->more++;
		return;
	}
	e = &w->found[w->nfound++];
	qpip_nd_neigh_addr(n, e->addr);
	neigh_ha_snapshot(e->mac, n, n->dev);
}

/*
 * The device takes the interface's permanent entries as they are now, and loses those
 * mirrored that are gone; @s->add: the device was reset and forgot them all.
 */
void qpip_nd_neigh_resync(struct qpip_netdev *nd, const struct qpip_nd_sync *s)
{
	struct qpip_nd_neigh_walk w = { .nd = nd };
	unsigned int i, j;
	int k;

	w.found = kcalloc(QPIP_MAX_NEIGHBORS, sizeof(*w.found), GFP_KERNEL);
	if (!w.found) {
		netdev_err(nd->netdev, "out of memory: static neighbours not given to the device\n");
		return;
	}
	neigh_for_each(&arp_tbl, qpip_nd_neigh_collect, &w);
#if IS_ENABLED(CONFIG_IPV6)
	neigh_for_each(&nd_tbl, qpip_nd_neigh_collect, &w);
#endif
	if (w.nfound)
		WRITE_ONCE(nd->neigh_seen, true);
	i = 0;
	while (i < nd->nneigh) {
		for (j = 0; j < w.nfound; j++)
			if (!memcmp(w.found[j].addr, nd->neigh[i].addr, 16))
				break;
		if (j == w.nfound)
			qpip_nd_neigh_remove(nd, i);
		else
			i++;
	}
	/* A new start: what the device refuses now is news. */
	nd->neigh_full_logged = false;
	for (j = 0; j < w.nfound; j++) {
		const struct qpip_nd_neigh *e = &w.found[j];

		k = qpip_nd_neigh_find(nd, e->addr);
		if (!s->add && k >= 0 && ether_addr_equal(nd->neigh[k].mac, e->mac))
			continue;
		qpip_nd_neigh_add(nd, k, e->addr, e->mac);
	}
	if (w.more)
		netdev_warn(nd->netdev, "%u more static neighbours than the device holds (%u): not mirrored\n",
			    w.more, QPIP_MAX_NEIGHBORS);
	kfree(w.found);
}

/* ---- the kernel's side ---- */

/* Atomic context: copies the change out for the work item. */
static int qpip_nd_neigh_event(struct notifier_block *nb, unsigned long event, void *ptr)
{
	struct qpip_netdev *nd = container_of(nb, struct qpip_netdev, neigh_nb);
	struct neighbour *n = ptr;
	struct qpip_nd_sync *s;
	bool permanent;

	if (event != NETEVENT_NEIGH_UPDATE || !qpip_nd_neigh_ours(nd, n))
		return NOTIFY_DONE;
	permanent = qpip_nd_neigh_permanent(n);
	if (permanent)
		WRITE_ONCE(nd->neigh_seen, true);
	else if (!READ_ONCE(nd->neigh_seen))
		return NOTIFY_DONE;
	s = kzalloc(sizeof(*s), GFP_ATOMIC);
	if (!s) {
		net_ratelimited_function(netdev_err, nd->netdev, "out of memory: a change of a neighbour entry not carried to the device\n");
		return NOTIFY_DONE;
	}
	s->kind = QPIP_ND_NEIGH;
	s->add = permanent;
	qpip_nd_neigh_addr(n, s->addr);
	if (permanent)
		neigh_ha_snapshot(s->mac, n, n->dev);
	qpip_nd_sync_queue(nd, s);
	return NOTIFY_DONE;
}

/*
 * The interface came up (@forgotten false), or the device was reset (true): the device
 * takes the kernel's permanent entries, a moment later. Any context that may sleep.
 */
void qpip_nd_neigh_sync(struct qpip_netdev *nd, bool forgotten)
{
	struct qpip_nd_sync *s;

	if (!READ_ONCE(nd->neigh_notifier))
		return;
	s = kzalloc(sizeof(*s), GFP_KERNEL);
	if (!s) {
		netdev_err(nd->netdev, "out of memory: static neighbours not given to the device\n");
		return;
	}
	s->kind = QPIP_ND_NEIGH_RESYNC;
	s->add = forgotten;
	qpip_nd_sync_queue(nd, s);
}

/*
 * After registration (the interface has no neighbours yet): from now on its permanent
 * entries reach the device. A device without static neighbours (interface < 2.4) is left
 * to resolve every address; that is no failure of the interface.
 */
void qpip_nd_neigh_start(struct qpip_netdev *nd)
{
	struct qpip_dev *qdev = nd->qdev;
	int ret;

	if (qpip_version_minor(qdev->version) < 4) {
		netdev_info(nd->netdev, "device interface %u.%u has no static neighbours: permanent neighbour entries are not mirrored\n",
			    qpip_version_major(qdev->version), qpip_version_minor(qdev->version));
		return;
	}
	nd->neigh_nb.notifier_call = qpip_nd_neigh_event;
	ret = register_netevent_notifier(&nd->neigh_nb);
	if (ret) {
		netdev_err(nd->netdev, "cannot follow the neighbour tables (netevent notifier): %pe; permanent entries are not mirrored\n",
			   ERR_PTR(ret));
		return;
	}
	WRITE_ONCE(nd->neigh_notifier, true);
}

/*
 * Stops mirroring and takes every mirrored entry out of the device (before the interface
 * is unregistered, which removes its entries from the kernel). Changes still queued are
 * carried out first. Without rtnl or qdev->lock held.
 */
void qpip_nd_neigh_stop(struct qpip_netdev *nd)
{
	if (!READ_ONCE(nd->neigh_notifier))
		return;
	unregister_netevent_notifier(&nd->neigh_nb);
	WRITE_ONCE(nd->neigh_notifier, false);
	flush_work(&nd->sync_work);
	while (nd->nneigh)
		qpip_nd_neigh_remove(nd, nd->nneigh - 1);
	if (nd->neigh_refused)
		netdev_info(nd->netdev, "%lu static neighbours were not mirrored: the device had no room for them\n",
			    nd->neigh_refused);
}
