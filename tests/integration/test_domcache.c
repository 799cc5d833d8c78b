/* SPDX-License-Identifier: MIT */
/*
 * test_domcache.c - the prompt cache per trust domain in a real kvpoold (groups mode),
 * with children that switch to other uids (needs root; skipped, 77, without):
 *  - policy: [domain NAME] keys override [cache] for that domain only: the same
 *    requests are below a domain's min_tokens in one domain and cached in the other,
 *    and under pressure an often hit prefix survives in an lfu domain and is evicted
 *    in an lru one;
 *  - FLUSH [--domain D]: a member of an operators' domain flushes its own; another
 *    domain only as uid 0; an unknown or malformed name is refused; a flush of another
 *    domain empties that one's cache, not the caller's;
 *  - a mixed workload (two domains, several users, hits and misses, a pin, a flush):
 *    each domain's entry of the status report is exact.  With KVP_ISSUE11_NOTE=FILE
 *    the human and JSON `kvpool status` after it are written to FILE.
 */
#include <errno.h>
#include <grp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "kvpool/kvpool.h"
#include "tests/integration/jsonq.h"
#include "tests/integration/kvpd.h"
#include "tests/lib/testlib.h"

#define MAX_OPS 96

/* One step of a visitor's script, on one connection. */
enum op_kind { OP_GEN, OP_PIN, OP_FLUSH };

struct op {
	enum op_kind kind;
	int32_t first; /* GEN, PIN: the prompt is first, first+1, ... (n tokens) */
	uint32_t n;
	const char *domain; /* FLUSH: the domain named, NULL: one's own */
};

/* What one step gave: its status, and for GEN its cache usage, for PIN/FLUSH its blocks. */
struct step {
	int rc;
	uint32_t cached;
	uint32_t miss;
	uint32_t blocks;
};

struct result {
	int rc; /* connect */
	char msg[200];
	struct step s[MAX_OPS];
};

static void prompt(int32_t *t, const struct op *o)
{
	for (uint32_t i = 0; i < o->n; i++)
		t[i] = o->first + (int32_t)i;
}

/* One GEN: greedy, 2 new tokens, its struct kvp_cache_usage kept. */
static void gen(struct kvp_client *c, const struct op *o, struct step *s)
{
	int32_t t[256];
	struct kvp_client_prompt pr = { .tokens = t, .n_tokens = o->n };
	struct kvp_cache_ctl none = { 0 };
	struct kvp_cache_usage cu;
	struct kvp_client_params p;
	struct kvp_usage u = { 0 };

	prompt(t, o);
	kvp_client_params_init(&p);
	p.max_new_tokens = 2;
	s->rc = kvp_client_set_cache(c, &none);
	if (!s->rc)
		s->rc = kvp_client_generate(c, &pr, &p, NULL, NULL, &u);
	s->cached = u.cached_tokens;
	if (!s->rc && kvp_client_event_cache(c, &cu) == 1)
		s->miss = cu.miss_reason;
}

/* Run @ops (@n of them) on one connection to @sock. */
static void visit(const char *sock, const struct op *ops, uint32_t n, struct result *out)
{
	struct kvp_client *c = NULL;

	memset(out, 0, sizeof(*out));
	out->rc = kvp_client_connect(&c, sock);
	if (out->rc) {
		snprintf(out->msg, sizeof(out->msg), "%s", kvp_client_errmsg(c));
		kvp_client_close(c);
		return;
	}
	for (uint32_t i = 0; i < n && i < MAX_OPS; i++) {
		struct step *s = &out->s[i];
		int32_t t[256];
		struct kvp_client_prompt pr = { .tokens = t, .n_tokens = ops[i].n };

		switch (ops[i].kind) {
		case OP_GEN:
			gen(c, &ops[i], s);
			break;
		case OP_PIN:
			prompt(t, &ops[i]);
			s->rc = kvp_client_pin(c, &pr, NULL, 0, false, &s->blocks);
			break;
		case OP_FLUSH:
			s->rc = kvp_client_flush_domain(c, ops[i].domain, &s->blocks);
			break;
		}
		if (s->rc && !*out->msg)
			snprintf(out->msg, sizeof(out->msg), "%s", kvp_client_errmsg(c));
	}
	kvp_client_close(c);
}

/* visit() in a child running as @uid (gid 65534, no supplementary groups); uid 0: here. */
static void visit_as(const char *sock, uid_t uid, const struct op *ops, uint32_t n,
		     struct result *out)
{
	int fd[2], st;
	pid_t pid;

	if (uid == 0) {
		visit(sock, ops, n, out);
		return;
	}
	assert_int_equal(pipe(fd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		static struct result r;

		close(fd[0]);
		if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(uid) < 0)
			_exit(125);
		visit(sock, ops, n, &r);
		_exit(write(fd[1], &r, sizeof(r)) == (ssize_t)sizeof(r) ? 0 : 126);
	}
	close(fd[1]);
	memset(out, 0, sizeof(*out));
	assert_int_equal(read(fd[0], out, sizeof(*out)), (ssize_t)sizeof(*out));
	close(fd[0]);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* Index of the domain named @name in the status report's list, or -1. */
static int domain_at(const struct jsonq *j, const char *name)
{
	return jsonq_index_of(j, "domains", "name", name);
}

static double dom_num(const struct jsonq *j, const char *name, const char *key)
{
	char path[96];
	int i = domain_at(j, name);

	if (i < 0)
		return -1;
	snprintf(path, sizeof(path), "domains.%d.%s", i, key);
	return jsonq_num(j, path, -1);
}

static const char *dom_str(const struct jsonq *j, const char *name, const char *key)
{
	char path[96];
	int i = domain_at(j, name);

	if (i < 0)
		return NULL;
	snprintf(path, sizeof(path), "domains.%d.%s", i, key);
	return jsonq_str(j, path);
}

/*
 * The report once domain @name's @key equals @want (an engine publishes its counters at
 * the end of a step, which may come just after the DONE a client saw); 5 s at most.
 * Return: the report (the caller frees it), whatever the value then.
 */
static struct jsonq *status_when(struct kvpd *d, const char *name, const char *key, double want)
{
	struct jsonq *j = NULL;

	for (int i = 0; i < 500; i++) {
		jsonq_free(j);
		j = kvpd_status(d);
		assert_non_null(j);
		if (dom_num(j, name, key) == want)
			break;
		usleep(10000);
	}
	return j;
}

static void need_root(void)
{
	if (geteuid() != 0) {
		fprintf(stderr, "needs root to run children as other uids\n");
		skip();
	}
}

/* The socket reachable by every uid (the test's directory is private otherwise). */
static void open_up(struct kvpd *d)
{
	assert_int_equal(chmod(d->dir, 0711), 0);
	assert_int_equal(chmod(d->sock, 0666), 0);
}

/*
 * Domains "strict" (60010, 60011: min_tokens 48, lfu, operators) and "loose" (60020,
 * 60021: [cache]'s), both without TTLs (a block inside its TTL outlives the eviction
 * order) and 1 MiB pools; root in "ops".
 */
static const char *const policy_args[] = { "--pool-size",
					   "4M",
					   "--domains-mode",
					   "groups",
					   "--set",
					   "cache.pin_allowed=yes",
					   "--set",
					   "domain ops.users=0",
					   "--set",
					   "domain ops.operators=yes",
					   "--set",
					   "domain strict.users=60010,60011",
					   "--set",
					   "domain strict.pool_size=1M",
					   "--set",
					   "domain strict.min_tokens=48",
					   "--set",
					   "domain strict.eviction=lfu",
					   "--set",
					   "domain strict.operators=yes",
					   "--set",
					   "domain strict.ttl_default_s=0",
					   "--set",
					   "domain loose.users=60020,60021",
					   "--set",
					   "domain loose.pool_size=1M",
					   "--set",
					   "domain loose.ttl_default_s=0",
					   NULL };

static void test_policy_per_domain(void **state)
{
	static const struct op short_gen[] = { { OP_GEN, 10, 32, NULL } };
	static struct op pressure[MAX_OPS];
	static struct result r;
	struct jsonq *j;
	struct kvpd d;
	uint32_t n = 0, blocks;

	(void)state;
	need_root();
	assert_int_equal(kvpd_setup(&d, "tiny", policy_args), 0);
	open_up(&d);

	/* min_tokens: a 32-token prompt, twice by two members of each domain */
	visit_as(d.sock, 60010, short_gen, 1, &r);
	assert_int_equal(r.s[0].rc, 0);
	assert_int_equal(r.s[0].miss, KVP_MISS_BELOW_MINIMUM);
	visit_as(d.sock, 60011, short_gen, 1, &r);
	assert_int_equal(r.s[0].rc, 0);
	assert_int_equal(r.s[0].cached, 0); /* strict: never cached */
	assert_int_equal(r.s[0].miss, KVP_MISS_BELOW_MINIMUM);
	visit_as(d.sock, 60020, short_gen, 1, &r);
	assert_int_equal(r.s[0].miss, KVP_MISS_NO_PREFIX);
	visit_as(d.sock, 60021, short_gen, 1, &r);
	assert_int_equal(r.s[0].rc, 0);
	assert_true(r.s[0].cached > 0); /* loose: the first member's blocks */

	j = status_when(&d, "loose", "cache.miss_none", 1);
	assert_string_equal(dom_str(j, "strict", "cache.eviction"), "lfu");
	assert_string_equal(dom_str(j, "loose", "cache.eviction"), "lru");
	assert_true(dom_num(j, "strict", "cache.min_tokens") == 48);
	assert_true(dom_num(j, "loose", "cache.min_tokens") == 0);
	assert_true(dom_num(j, "strict", "cache.miss_below_minimum") == 2);
	assert_true(dom_num(j, "loose", "cache.miss_below_minimum") == 0);
	assert_true(dom_num(j, "strict", "cache.request_hit_rate") == 0);
	assert_true(dom_num(j, "loose", "cache.request_hit_rate") == 0.5); /* 1 of 2 */
	/* the daemon-wide section shows [cache] itself */
	assert_string_equal(jsonq_str(j, "cache.eviction"), "lru");
	assert_true(jsonq_num(j, "cache.min_tokens", -1) == 0);
	blocks = (uint32_t)dom_num(j, "loose", "blocks_total");
	assert_true(blocks == (uint32_t)dom_num(j, "strict", "blocks_total"));
	jsonq_free(j);

	/*
	 * eviction: prompt A (64 tokens) hit twice, then more distinct 64-token prompts
	 * than the pool holds, then A again.  lfu evicts the never-hit ones first and A
	 * survives; lru evicts A, the least recently used.
	 */
	for (int k = 0; k < 3; k++)
		pressure[n++] = (struct op){ OP_GEN, 100, 64, NULL };
	for (uint32_t k = 0; k < blocks / 4 + 4 && n < MAX_OPS - 1; k++)
		pressure[n++] = (struct op){ OP_GEN, (int32_t)(1 + k), 64, NULL };
	assert_true(n < MAX_OPS - 1);
	pressure[n++] = (struct op){ OP_GEN, 100, 64, NULL };
	visit_as(d.sock, 60010, pressure, n, &r);
	for (uint32_t k = 0; k < n; k++)
		assert_int_equal(r.s[k].rc, 0);
	assert_int_equal(r.s[1].miss, KVP_MISS_NONE); /* hit twice */
	assert_true(r.s[n - 1].cached >= 48);	      /* lfu: A kept */
	visit_as(d.sock, 60020, pressure, n, &r);
	for (uint32_t k = 0; k < n; k++)
		assert_int_equal(r.s[k].rc, 0);
	assert_int_equal(r.s[1].miss, KVP_MISS_NONE);
	assert_int_equal(r.s[n - 1].cached, 0); /* lru: A evicted */
	assert_int_equal(r.s[n - 1].miss, KVP_MISS_EVICTED);
	j = kvpd_status(&d);
	assert_non_null(j);
	assert_true(dom_num(j, "strict", "cache.evictions") > 0);
	assert_true(dom_num(j, "loose", "cache.evictions") > 0);
	assert_true(dom_num(j, "loose", "cache.recomputed_tokens") >= 48);
	assert_true(dom_num(j, "strict", "cache.recomputed_tokens") == 0);
	jsonq_free(j);
	kvpd_cleanup(&d);
}

static void test_flush_domain(void **state)
{
	static const struct op warm[] = { { OP_GEN, 10, 64, NULL } };
	static const struct op again[] = { { OP_GEN, 10, 64, NULL } };
	static const struct op member[] = {
		{ OP_FLUSH, 0, 0, "loose" },  /* another domain: not as uid 60010 */
		{ OP_FLUSH, 0, 0, "strict" }, /* its own, by name */
		{ OP_FLUSH, 0, 0, NULL },     /* its own */
	};
	static const struct op plain[] = { { OP_FLUSH, 0, 0, NULL } };
	static const struct op root[] = {
		{ OP_FLUSH, 0, 0, "nosuch" },
		{ OP_FLUSH, 0, 0, "a b" },
		{ OP_FLUSH, 0, 0, "loose" },
	};
	static struct result r;
	struct jsonq *j;
	struct kvpd d;

	(void)state;
	need_root();
	assert_int_equal(kvpd_setup(&d, "tiny", policy_args), 0);
	open_up(&d);
	visit_as(d.sock, 60010, warm, 1, &r); /* strict: 4 blocks cached */
	assert_int_equal(r.s[0].rc, 0);
	visit_as(d.sock, 60020, warm, 1, &r); /* loose: 4 blocks cached */
	assert_int_equal(r.s[0].rc, 0);

	/* a member of an operators' domain: its own only */
	visit_as(d.sock, 60010, member, 3, &r);
	assert_int_equal(r.rc, 0);
	assert_int_equal(r.s[0].rc, KVP_E_DENIED);
	assert_non_null(strstr(r.msg, "only uid 0 may flush another"));
	assert_int_equal(r.s[1].rc, 0);
	assert_int_equal(r.s[1].blocks, 4);
	assert_int_equal(r.s[2].rc, 0);
	assert_int_equal(r.s[2].blocks, 0); /* nothing left */
	/* loose has no operators: refused, whatever it names */
	visit_as(d.sock, 60021, plain, 1, &r);
	assert_int_equal(r.s[0].rc, KVP_E_DENIED);
	/* uid 0: an unknown or malformed name is refused; another domain is flushed */
	visit_as(d.sock, 0, root, 3, &r);
	assert_int_equal(r.rc, 0);
	assert_int_equal(r.s[0].rc, KVP_E_INVALID);
	assert_non_null(strstr(r.msg, "no trust domain named 'nosuch'"));
	assert_int_equal(r.s[1].rc, KVP_E_INVALID);
	assert_int_equal(r.s[2].rc, 0);
	assert_int_equal(r.s[2].blocks, 4);
	/* loose's prompt is gone (evicted from memory: its flush), ops's counters untouched */
	visit_as(d.sock, 60021, again, 1, &r);
	assert_int_equal(r.s[0].rc, 0);
	assert_int_equal(r.s[0].cached, 0);
	assert_int_equal(r.s[0].miss, KVP_MISS_EVICTED);
	j = status_when(&d, "loose", "cache.miss_evicted", 1);
	assert_true(dom_num(j, "loose", "cache.flushes") == 1);
	assert_true(dom_num(j, "loose", "cache.flushed_blocks") == 4);
	assert_true(dom_num(j, "strict", "cache.flushes") == 2);
	assert_true(dom_num(j, "strict", "cache.flushed_blocks") == 4);
	assert_true(dom_num(j, "ops", "cache.flushes") == 0);
	jsonq_free(j);
	kvpd_cleanup(&d);
}

/* Run `kvpool --status-socket S status [ARG]` and append its output to @f. */
static void note_status(FILE *f, struct kvpd *d, const char *arg)
{
	char bin[1024], cmd[2048], buf[4096];
	FILE *p;
	size_t n;

	assert_int_equal(kvp_test_build_path(bin, sizeof(bin), "ipc/kvpool"), 0);
	snprintf(cmd, sizeof(cmd), "'%s' --status-socket '%s' status %s", bin, d->status,
		 arg ? arg : "");
	fprintf(f, "$ kvpool status%s%s\n", arg ? " " : "", arg ? arg : "");
	p = popen(cmd, "r");
	assert_non_null(p);
	while ((n = fread(buf, 1, sizeof(buf), p)) > 0)
		fwrite(buf, 1, n, f);
	assert_int_equal(pclose(p), 0);
	fputc('\n', f);
}

static void test_mixed_workload(void **state)
{
	/* research (60030, 60031; operators, min_tokens 32, lfu); support (60040, 60041) */
	static const char *const args[] = { "--pool-size",
					    "8M",
					    "--domains-mode",
					    "groups",
					    "--set",
					    "cache.pin_allowed=yes",
					    "--set",
					    "domain research.users=60030,60031",
					    "--set",
					    "domain research.operators=yes",
					    "--set",
					    "domain research.min_tokens=32",
					    "--set",
					    "domain research.eviction=lfu",
					    "--set",
					    "domain support.users=60040,60041",
					    NULL };
	/* research, user 1: P (64 tokens) miss, Q (16) below the minimum */
	static const struct op r1[] = { { OP_GEN, 10, 64, NULL }, { OP_GEN, 90, 16, NULL } };
	/* research, user 2: P hit (48 of 64), R (48) miss, P hit */
	static const struct op r2[] = { { OP_GEN, 10, 64, NULL },
					{ OP_GEN, 120, 48, NULL },
					{ OP_GEN, 10, 64, NULL } };
	/* research, user 1: pin P, then flush (R's 3 blocks go; P's 4 are pinned) */
	static const struct op r3[] = { { OP_PIN, 10, 64, NULL }, { OP_FLUSH, 0, 0, NULL } };
	/* research, user 2: R again: evicted by the flush, P still a hit */
	static const struct op r4[] = { { OP_GEN, 120, 48, NULL }, { OP_GEN, 10, 64, NULL } };
	/* support, two users: P miss then hit (a domain of its own: nothing of research's) */
	static const struct op s1[] = { { OP_GEN, 10, 64, NULL } };
	static const struct op s2[] = { { OP_GEN, 10, 64, NULL }, { OP_GEN, 10, 32, NULL } };
	static struct result r;
	const char *note = getenv("KVP_ISSUE11_NOTE");
	struct jsonq *j;
	struct kvpd d;

	(void)state;
	need_root();
	assert_int_equal(kvpd_setup(&d, "tiny", args), 0);
	open_up(&d);

	visit_as(d.sock, 60030, r1, 2, &r);
	assert_int_equal(r.s[0].miss, KVP_MISS_NO_PREFIX);
	assert_int_equal(r.s[1].miss, KVP_MISS_BELOW_MINIMUM);
	visit_as(d.sock, 60031, r2, 3, &r);
	assert_int_equal(r.s[0].miss, KVP_MISS_NONE);
	assert_int_equal(r.s[0].cached, 48);
	assert_int_equal(r.s[1].miss, KVP_MISS_NO_PREFIX);
	assert_int_equal(r.s[2].cached, 48);
	visit_as(d.sock, 60030, r3, 2, &r);
	assert_int_equal(r.s[0].rc, 0);
	assert_int_equal(r.s[0].blocks, 4);
	assert_int_equal(r.s[1].rc, 0);
	assert_int_equal(r.s[1].blocks, 3);
	visit_as(d.sock, 60031, r4, 2, &r);
	assert_int_equal(r.s[0].miss, KVP_MISS_EVICTED);
	assert_int_equal(r.s[0].cached, 0);
	assert_int_equal(r.s[1].cached, 48);
	visit_as(d.sock, 60040, s1, 1, &r);
	assert_int_equal(r.s[0].miss, KVP_MISS_NO_PREFIX);
	visit_as(d.sock, 60041, s2, 2, &r);
	assert_int_equal(r.s[0].cached, 48);
	assert_int_equal(r.s[1].cached, 16); /* a prefix of P: its first block */

	j = status_when(&d, "support", "cache.miss_none", 2);
	/*
	 * research: 7 GENERATEs and a PIN (which looks P up, and hits, as a request does)
	 * looked up, 4 of them hit 48 tokens each (a lookup leaves the last token to compute,
	 * so 3 of P's 4 blocks); Q below the minimum was not; the flush dropped R's 3 blocks
	 * (never read: written_never_read), so R's next run recomputed the 2 a lookup covers
	 */
	assert_true(dom_num(j, "research", "requests") == 8);
	assert_true(dom_num(j, "research", "lookups") == 7);
	assert_true(dom_num(j, "research", "cache.miss_none") == 4);
	assert_true(dom_num(j, "research", "cache.miss_no_prefix") == 2);
	assert_true(dom_num(j, "research", "cache.miss_below_minimum") == 1);
	assert_true(dom_num(j, "research", "cache.miss_evicted") == 1);
	assert_float_equal(dom_num(j, "research", "cache.request_hit_rate"), 4.0 / 7, 1e-6);
	assert_true(dom_num(j, "research", "cache.tokens_saved") == 4 * 48);
	assert_true(dom_num(j, "research", "cache.recomputed_tokens") == 32);
	assert_true(dom_num(j, "research", "cache.pins") == 1);
	assert_true(dom_num(j, "research", "cache.pinned_blocks") == 4);
	assert_true(dom_num(j, "research", "cache.flushes") == 1);
	assert_true(dom_num(j, "research", "cache.flushed_blocks") == 3);
	assert_true(dom_num(j, "research", "cache.evictions") == 3);
	assert_true(dom_num(j, "research", "cache.written_never_read") == 3);
	assert_true(dom_num(j, "research", "cache.min_tokens") == 32);
	assert_string_equal(dom_str(j, "research", "cache.eviction"), "lfu");
	/* prompt tokens 64+16+64+48+64+64+48+64; cost: computed 1, written 1.25, read 0.1 */
	assert_true(dom_num(j, "research", "cache.cost_uncached") == 432);
	assert_float_equal(dom_num(j, "research", "cache.cost_cached"), 299.2, 1e-6);
	assert_true(dom_num(j, "research", "cache.top_prefixes.0.hits") == 4);
	assert_true(dom_num(j, "research", "cache.top_prefixes.0.tokens") == 48);
	/* support: 3 GENERATEs, 2 hits of 48 and 16 tokens, no eviction */
	assert_true(dom_num(j, "support", "requests") == 3);
	assert_float_equal(dom_num(j, "support", "cache.request_hit_rate"), 2.0 / 3, 1e-6);
	assert_true(dom_num(j, "support", "cache.recomputed_tokens") == 0);
	assert_true(dom_num(j, "support", "cache.cost_uncached") == 160);
	assert_true(dom_num(j, "support", "cache.miss_none") == 2);
	assert_true(dom_num(j, "support", "cache.miss_no_prefix") == 1);
	assert_true(dom_num(j, "support", "cache.tokens_saved") == 48 + 16);
	assert_true(dom_num(j, "support", "cache.evictions") == 0);
	assert_true(dom_num(j, "support", "cache.pins") == 0);
	assert_true(dom_num(j, "support", "cache.flushes") == 0);
	assert_string_equal(dom_str(j, "support", "cache.eviction"), "lru");
	/* the daemon-wide section is the sum of the two */
	assert_true(jsonq_num(j, "cache.tokens_saved", -1) == 4 * 48 + 48 + 16);
	assert_true(jsonq_num(j, "cache.miss_none", -1) == 6);
	jsonq_free(j);

	if (note && *note) {
		FILE *f = fopen(note, "w");

		assert_non_null(f);
		fprintf(f, "kvpool status after test_domcache's mixed workload (groups mode: "
			   "research = uids 60030, 60031, operators, min_tokens 32, lfu; support "
			   "= uids 60040, 60041, [cache] defaults); written by "
			   "KVP_ISSUE11_NOTE=FILE build/tests/itest-domcache (as root)\n\n");
		note_status(f, &d, NULL);
		note_status(f, &d, "--json");
		fclose(f);
	}
	kvpd_cleanup(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_policy_per_domain),
		cmocka_unit_test(test_flush_domain),
		cmocka_unit_test(test_mixed_workload),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
