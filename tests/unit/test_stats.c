/* SPDX-License-Identifier: MIT */
/*
 * test_stats.c - who sees what on the status socket (svc/stats.h): the view a peer's
 * credentials give it (operators: uid 0, the daemon's own uid, a member of
 * server.status_operators; anyone else: its own domain or none, never one made for the
 * asking), and
 * the chain hashes the report shows (keyed per daemon and per domain, never the hash).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "svc/domain.h"
#include "svc/domcfg.h"
#include "svc/stats.h"

static void add_domain(struct kvp_domains *d, const char *name, uint32_t uid, bool operators)
{
	struct kvp_domain *dom = &d->dom[d->n_domains++];

	snprintf(dom->name, sizeof(dom->name), "%s", name);
	dom->ro_fd = -1;
	dom->uid = uid;
	dom->operators = operators;
	if (d->mode == KVP_DOMAINS_GROUPS)
		dom->uids[dom->n_uids++] = uid;
}

static struct kvp_stats_view view(struct kvp_stats *st, uid_t uid, gid_t gid)
{
	struct kvp_peer p = { .pid = 1, .uid = uid, .gid = gid };
	struct kvp_stats_view v;

	memset(&v, 0x55, sizeof(v));
	kvp_stats_view_of(st, &p, &v);
	return v;
}

static void test_view_per_uid(void **state)
{
	/* per-uid: root and the daemon's uid see all; others their own domain, or none */
	static struct kvp_domains d;
	struct kvp_stats st;
	struct kvp_stats_view v;

	(void)state;
	assert_int_equal(kvp_stats_init(&st), 0);
	memset(&d, 0, sizeof(d));
	d.mode = KVP_DOMAINS_PER_UID;
	d.max = 8;
	add_domain(&d, "uid-0", 0, true);
	add_domain(&d, "uid-65534", 65534, false);
	st.domains = &d;
	st.self_uid = 4321;

	v = view(&st, 0, 0);
	assert_true(v.all);
	v = view(&st, 4321, 4321);
	assert_true(v.all);
	v = view(&st, 65534, 65534);
	assert_false(v.all);
	assert_int_equal(v.domain, 1);
	/* a uid that never said HELLO has no domain, and asking makes none */
	v = view(&st, 1234, 1234);
	assert_false(v.all);
	assert_int_equal(v.domain, -1);
	assert_int_equal(d.n_domains, 2);
	kvp_stats_deinit(&st);
}

static void test_view_operators_group(void **state)
{
	/*
	 * groups: the members of server.status_operators (its gid, or a uid listed in it)
	 * see all; a domain's own operators flag (PIN, FLUSH of its cache) is not that
	 */
	static struct kvp_domains d;
	struct kvp_stats st;
	struct kvp_stats_view v;

	(void)state;
	assert_int_equal(kvp_stats_init(&st), 0);
	memset(&d, 0, sizeof(d));
	d.mode = KVP_DOMAINS_GROUPS;
	add_domain(&d, "apps", 60001, false);
	add_domain(&d, "admins", 60002, true);
	st.domains = &d;
	st.self_uid = 4321;
	st.op_gid = 700;
	st.op_uids[st.n_op_uids++] = 60004;

	v = view(&st, 60001, 100);
	assert_false(v.all);
	assert_int_equal(v.domain, 0);
	v = view(&st, 60002, 100);
	assert_false(v.all);
	assert_int_equal(v.domain, 1);
	v = view(&st, 60001, 700); /* primary gid: the operators' group */
	assert_true(v.all);
	v = view(&st, 60004, 100); /* listed in it */
	assert_true(v.all);
	v = view(&st, 60003, 100); /* in no domain */
	assert_false(v.all);
	assert_int_equal(v.domain, -1);

	/* a group that does not exist sets none */
	assert_int_equal(kvp_stats_set_operators(&st, "no-such-group-kvp"), -ENOENT);
	v = view(&st, 60004, 700);
	assert_false(v.all);
	assert_int_equal(kvp_stats_set_operators(&st, ""), 0);
	assert_int_equal(kvp_stats_set_operators(&st, "root"), 0);
	v = view(&st, 60004, 0);
	assert_true(v.all);
	kvp_stats_deinit(&st);
}

static void test_shown_hash_keyed(void **state)
{
	/*
	 * The shown value is not the chain hash, is stable within a daemon, and differs
	 * between domains and between daemons (another key) for the same chain hash.
	 */
	const struct kvp_h128 h = { .lo = 0x0123456789abcdefull, .hi = 0xfedcba9876543210ull };
	struct kvp_stats a, b;
	struct kvp_h128 a1, a2, a_other, b1;

	(void)state;
	assert_int_equal(kvp_stats_init(&a), 0);
	assert_int_equal(kvp_stats_init(&b), 0);
	a1 = kvp_stats_shown_hash(&a, "uid-0", h);
	a2 = kvp_stats_shown_hash(&a, "uid-0", h);
	a_other = kvp_stats_shown_hash(&a, "uid-65534", h);
	b1 = kvp_stats_shown_hash(&b, "uid-0", h);
	assert_true(a1.lo != h.lo && a1.hi != h.hi);
	assert_true(a1.lo == a2.lo && a1.hi == a2.hi);
	assert_true(a1.lo != a_other.lo || a1.hi != a_other.hi);
	assert_true(a1.lo != b1.lo || a1.hi != b1.hi);
	kvp_stats_deinit(&a);
	kvp_stats_deinit(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_view_per_uid),
		cmocka_unit_test(test_view_operators_group),
		cmocka_unit_test(test_shown_hash_keyed),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
