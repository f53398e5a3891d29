// SPDX-License-Identifier: GPL-2.0
/*
 * qpip: what one user of the guest may take of a function — per-user quotas on contexts,
 * CQs, QPs, memory regions, locked pages, listeners and tripwires — and who may use the
 * privileged ports.
 *
 * The device's tables (64 contexts, 4096 regions, 256 listeners, 1024 tripwires of a
 * function) are shared by every process of the guest, and /dev/qpipN is open to all: without
 * a bound per user, one user takes them all and the others get ENOSPC. Quotas are per user
 * rather than per file, since a user can open as many files as the quota on contexts lets
 * it; per-file limits would only multiply.
 *
 * The user is the effective uid that opened the file: the file and everything created
 * through it are charged to that user until they are destroyed or the file is closed (as
 * inotify charges watches to the user who created the instance, whoever adds them). An
 * opener with CAP_SYS_RESOURCE is counted but not limited, as for Linux's own resource
 * limits. A quota of 0 is no limit. Going over one is -EDQUOT, the errno of Linux's other
 * per-user quota on kernel objects (keys, kernel.keys.maxkeys): distinct from the device's
 * own "table full" (-ENOSPC) and from RLIMIT_MEMLOCK (-ENOMEM), so a caller and an
 * administrator can tell which limit was met.
 */
#include <linux/capability.h>
#include <linux/cred.h>
#include <linux/moduleparam.h>
#include <linux/slab.h>
#include <linux/user_namespace.h>
#include <net/ip.h>
#include <net/net_namespace.h>

#include "qpip_ctx.h"

/*
 * The administrator's interface: /sys/module/qpip/parameters/max_user_*, written by root,
 * read at each charge (a lowered quota refuses new objects; it takes none away).
 */
static unsigned int qpip_quota_max[QPIP_QUOTA_COUNT] = {
	[QPIP_QUOTA_CONTEXTS] = 16,
	[QPIP_QUOTA_CQS] = 1024,
	[QPIP_QUOTA_QPS] = 1024,
	[QPIP_QUOTA_MRS] = 1024,
	[QPIP_QUOTA_PINNED] = 256, /* MiB */
	[QPIP_QUOTA_LISTENERS] = 64,
	[QPIP_QUOTA_TRIPWIRES] = 256,
};

/* Quota QPIP_QUOTA_@q as the module parameter @name (qpip_quota_names names it in the log). */
#define QPIP_QUOTA_PARAM(q, name, desc)                                       \
	module_param_named(name, qpip_quota_max[QPIP_QUOTA_##q], uint, 0644); \
	MODULE_PARM_DESC(name, desc)

QPIP_QUOTA_PARAM(CONTEXTS, max_user_contexts,
		 "Open files (device contexts) of one function per user; 0: no limit "
		 "(default 16 of the function's 64)");
QPIP_QUOTA_PARAM(CQS, max_user_cqs, "CQs of one function per user; 0: no limit (default 1024)");
QPIP_QUOTA_PARAM(QPS, max_user_qps, "QPs of one function per user; 0: no limit (default 1024)");
QPIP_QUOTA_PARAM(MRS, max_user_mrs,
		 "Registered regions of one function per user; 0: no limit "
		 "(default 1024 of the function's 4096)");
QPIP_QUOTA_PARAM(PINNED, max_user_pinned_mb,
		 "MiB of locked memory (registered regions and rings) of one function per user, "
		 "besides each process's RLIMIT_MEMLOCK; 0: no limit (default 256)");
QPIP_QUOTA_PARAM(LISTENERS, max_user_listeners,
		 "Listeners of one function per user; 0: no limit (default 64 of the function's 256)");
QPIP_QUOTA_PARAM(TRIPWIRES, max_user_tripwires,
		 "Tripwires of one function per user; 0: no limit "
		 "(default 256 of the function's 1024)");

/* What each quota is called in the log: its parameter, and the unit it counts. */
static const struct {
	const char *param;
	const char *unit;
} qpip_quota_names[QPIP_QUOTA_COUNT] = {
	[QPIP_QUOTA_CONTEXTS] = { "max_user_contexts", "contexts" },
	[QPIP_QUOTA_CQS] = { "max_user_cqs", "CQs" },
	[QPIP_QUOTA_QPS] = { "max_user_qps", "QPs" },
	[QPIP_QUOTA_MRS] = { "max_user_mrs", "regions" },
	[QPIP_QUOTA_PINNED] = { "max_user_pinned_mb", "locked pages" },
	[QPIP_QUOTA_LISTENERS] = { "max_user_listeners", "listeners" },
	[QPIP_QUOTA_TRIPWIRES] = { "max_user_tripwires", "tripwires" },
};

/* Quota @q now, in its unit (pages for locked memory); 0: no limit. */
static unsigned long qpip_quota_limit(enum qpip_quota q)
{
	unsigned long max;

	if (q >= QPIP_QUOTA_COUNT)
		return 0;
	max = READ_ONCE(qpip_quota_max[q]);
	return q == QPIP_QUOTA_PINNED ? max << (20 - PAGE_SHIFT) : max;
}

/* ---- users of a function ---- */

/*
 * The record of the user @uid in @qdev, created on first use; a reference for the caller
 * (a context, at open). NULL without memory.
 */
struct qpip_user *qpip_user_get(struct qpip_dev *qdev, kuid_t uid)
{
	u32 key = from_kuid(&init_user_ns, uid);
	struct qpip_user *u;

	mutex_lock(&qdev->users_lock);
	u = xa_load(&qdev->users, key);
	if (u) {
		u->refs++;
		goto out;
	}
	u = kzalloc(sizeof(*u), GFP_KERNEL);
	if (!u)
		goto out;
	u->uid = key;
	u->refs = 1;
	if (xa_err(xa_store(&qdev->users, key, u, GFP_KERNEL))) {
		kfree(u);
		u = NULL;
	}
out:
	mutex_unlock(&qdev->users_lock);
	return u;
}

/* Drops a context's reference; the last one frees the record, every charge returned. */
void qpip_user_put(struct qpip_dev *qdev, struct qpip_user *u)
{
	mutex_lock(&qdev->users_lock);
	if (--u->refs == 0) {
		xa_erase(&qdev->users, u->uid);
		kfree(u);
	}
	mutex_unlock(&qdev->users_lock);
}

/*
 * At the function's end: records still there are those of contexts whose memory was kept
 * because the device never confirmed their destruction. Nothing refers to them any more.
 */
void qpip_users_free(struct qpip_dev *qdev)
{
	struct qpip_user *u;
	unsigned long key;

	xa_for_each(&qdev->users, key, u)
		kfree(u);
	xa_destroy(&qdev->users);
	mutex_destroy(&qdev->users_lock);
}

/* ---- charging ---- */

/*
 * Charges @n of quota @q to the user of @ctx: -EDQUOT, with a rate-limited line in the
 * kernel log, if that takes the user over it (unless the opener had CAP_SYS_RESOURCE).
 */
int qpip_quota_charge(struct qpip_ctx *ctx, enum qpip_quota q, unsigned long n)
{
	struct qpip_user *u = ctx->user;
	unsigned long limit = qpip_quota_limit(q);
	unsigned long used = atomic_long_add_return(n, &u->used[q]);

	if (!limit || used <= limit || ctx->quota_exempt)
		return 0;
	atomic_long_sub(n, &u->used[q]);
	dev_warn_ratelimited(&ctx->qdev->dev, "user %u over its quota of %lu %s (%s)\n",
			     u->uid, limit, qpip_quota_names[q].unit, qpip_quota_names[q].param);
	return -EDQUOT;
}

void qpip_quota_uncharge(struct qpip_user *u, enum qpip_quota q, unsigned long n)
{
	if (u)
		atomic_long_sub(n, &u->used[q]);
}

/* ---- privileged ports ---- */

/*
 * Binding or listening on @port (0: an ephemeral one, which the guest kernel chooses from
 * its ephemeral range: qpip_ports.c) needs what a socket of the guest's own network
 * needs: below net.ipv4.ip_unprivileged_port_start (1024 by default),
 * CAP_NET_BIND_SERVICE. The
 * device's addresses are the guest's, not those of a network namespace a process may have
 * made for itself, so the rule is the initial namespace's, and the capability is checked in
 * the initial user namespace — a user namespace of one's own gives nothing here. -EACCES,
 * as bind(2) says.
 */
int qpip_port_check(u16 port)
{
	if (port && inet_port_requires_bind_service(&init_net, port) &&
	    !ns_capable(init_net.user_ns, CAP_NET_BIND_SERVICE))
		return -EACCES;
	return 0;
}
