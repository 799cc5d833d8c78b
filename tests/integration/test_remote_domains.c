/* SPDX-License-Identifier: MIT */
/*
 * test_remote_domains.c - the remote tier with two trust domains, each logging in to the
 * store as its own ACL user, and the chain summaries the daemon publishes for routing.
 *
 * Two kvpoold processes (H1, H2; separate pools, the demo model) run domains.mode =
 * groups with [domain a] (users = root, this process) and [domain b] (users = nobody,
 * reached from a forked child).  One real redis-server (tests/lib/redisfix.c) holds ACL
 * users kvp-a (~kvp1:a:*) and kvp-b (~kvp1:b:*), named per domain by remote_user and
 * remote_password_file (0600 files).  Needs root (children run as nobody): skipped
 * without, as without redis-server.
 *
 *  - a prompt computed in domain a on H1 is stored under kvp1:a: only; domain b on H2
 *    never hits it, domain a on H2 fetches it; the same the other way round;
 *  - kvp-b gets NOPERM on a's keys (ACL DRYRUN from the admin connection, and GET and
 *    EXISTS on a hiredis connection logged in as kvp-b), reads its own; neither daemon
 *    ever met a denial (the store's ACL LOG is empty before the test's own, and the
 *    hosts count no error replies): each domain used its own user;
 *  - chain summaries (remote.summary_period_s = 1): kvp1:a:r:h1 exists with a TTL of
 *    three periods, decodes, and holds every chain of the prompt (recomputed from its
 *    tokens and the first block's parent hash); random chains: the false-positive rate is
 *    printed, not asserted.
 */
#include <errno.h>
#include <grp.h>
#include <hiredis/hiredis.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "kvpool/kvpool.h"
#include "shm/index.h"
#include "shm/remote/bloom.h"
#include "tests/integration/kvpd.h"
#include "tests/lib/redisfix.h"
#include "tests/lib/testlib.h"

#define BT 16
#define LEN 256 /* 16 blocks, 15 of them reusable by a lookup */
#define GEN 8
#define NOBODY 65534

struct world {
	struct redisfix rf;
	redisContext *admin;
	struct kvpd h1, h2;
	char pw_a[512], pw_b[512];
};

struct out {
	int32_t ids[GEN];
	uint32_t n;
	struct kvp_usage u;
	int rc;
};

static int32_t P[LEN], Q[LEN];
static uint64_t rng = 0x2545f4914f6cdd1dull;

static uint64_t next_rand(void)
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	return rng;
}

static void fill(int32_t *t, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		t[i] = 3 + (int32_t)(next_rand() % 250); /* the demo's byte vocabulary */
}

static int collect(void *arg, const int32_t *t, uint32_t n, const char *text, uint32_t tl)
{
	struct out *o = arg;

	(void)text, (void)tl;
	for (uint32_t i = 0; i < n && o->n < GEN; i++)
		o->ids[o->n++] = t[i];
	return 0;
}

static void gen_here(const char *sock, const int32_t *prompt, struct out *o)
{
	struct kvp_client_prompt pr = { .tokens = prompt, .n_tokens = LEN };
	struct kvp_client_params p;
	struct kvp_client *k = NULL;

	memset(o, 0, sizeof(*o));
	kvp_client_params_init(&p);
	p.max_new_tokens = GEN;
	o->rc = kvp_client_connect(&k, sock);
	if (!o->rc)
		o->rc = kvp_client_generate(k, &pr, &p, collect, o, &o->u);
	kvp_client_close(k);
}

/* A request from @uid (root: this process, domain a; nobody: a child, domain b). */
static void gen(struct kvpd *d, uid_t uid, const int32_t *prompt, struct out *o)
{
	int fd[2], st;
	pid_t pid;

	if (uid == 0) {
		gen_here(d->sock, prompt, o);
		assert_int_equal(o->rc, 0);
		return;
	}
	assert_int_equal(pipe(fd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct out c;

		close(fd[0]);
		if (setgroups(0, NULL) < 0 || setgid(NOBODY) < 0 || setuid(uid) < 0)
			_exit(125);
		gen_here(d->sock, prompt, &c);
		_exit(write(fd[1], &c, sizeof(c)) == (ssize_t)sizeof(c) ? 0 : 126);
	}
	close(fd[1]);
	assert_int_equal(read(fd[0], o, sizeof(*o)), (ssize_t)sizeof(*o));
	close(fd[0]);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_int_equal(o->rc, 0);
}

static double status_num(struct kvpd *d, const char *path)
{
	struct jsonq *j = kvpd_status(d);
	double v = j ? jsonq_num(j, path, -1) : -1;

	jsonq_free(j);
	return v;
}

/* Keys matching @pattern (admin KEYS: the test's own small store). */
static size_t n_keys(struct world *w, const char *pattern)
{
	redisReply *r = redisCommand(w->admin, "KEYS %s", pattern);
	size_t n;

	assert_non_null(r);
	assert_int_equal(r->type, REDIS_REPLY_ARRAY);
	n = r->elements;
	freeReplyObject(r);
	return n;
}

/* Wait (up to 60 s: a loaded machine) until @pattern matches at least @want keys. */
static bool wait_keys(struct world *w, const char *pattern, size_t want)
{
	for (int t = 0; t < 60000; t += 50) {
		if (n_keys(w, pattern) >= want)
			return true;
		usleep(50000);
	}
	print_message("%s: %zu keys, wanted %zu\n", pattern, n_keys(w, pattern), want);
	return false;
}

/* One key of @domain's block holding @tokens (BT of them), or "" (record: docs/tier.md). */
static void find_key(struct world *w, const char *domain, const int32_t *tokens, char *key,
		     size_t cap)
{
	redisReply *keys = redisCommand(w->admin, "KEYS kvp1:%s:b:*", domain);

	*key = '\0';
	assert_non_null(keys);
	for (size_t i = 0; i < keys->elements && !*key; i++) {
		redisReply *t = redisCommand(w->admin, "GETRANGE %s 256 %d", keys->element[i]->str,
					     256 + 4 * BT - 1);

		if (t && t->type == REDIS_REPLY_STRING && t->len == 4 * BT &&
		    !memcmp(t->str, tokens, 4 * BT))
			snprintf(key, cap, "%s", keys->element[i]->str);
		freeReplyObject(t);
	}
	freeReplyObject(keys);
}

static int write_pw(const char *path, const char *pw)
{
	FILE *f = fopen(path, "w");

	if (!f)
		return -1;
	fprintf(f, "%s\n", pw);
	fclose(f);
	return chmod(path, 0600);
}

static int start_host(struct world *w, struct kvpd *d, const char *host)
{
	char a_pw[600], b_pw[600], hid[64];
	const char *args[] = { "--model",
			       w->h1.model,
			       "--pool-size",
			       "128M",
			       "--threads",
			       "1",
			       "--ignore-eos",
			       "--domains-mode",
			       "groups",
			       "--set",
			       "domain a.users=0",
			       "--set",
			       "domain a.remote_user=kvp-a",
			       "--set",
			       a_pw,
			       "--set",
			       "domain b.users=65534",
			       "--set",
			       "domain b.remote_user=kvp-b",
			       "--set",
			       b_pw,
			       "--remote",
			       w->rf.url_unix,
			       "--set",
			       "remote.op_timeout_ms=1000",
			       "--set",
			       "remote.fetch_timeout_ms=3000",
			       "--set",
			       "remote.summary_period_s=1",
			       "--set",
			       hid,
			       NULL };
	int r;

	snprintf(a_pw, sizeof(a_pw), "domain a.remote_password_file=%s", w->pw_a);
	snprintf(b_pw, sizeof(b_pw), "domain b.remote_password_file=%s", w->pw_b);
	snprintf(hid, sizeof(hid), "remote.host_id=%s", host);
	r = kvpd_start(d, 120, args);
	if (r) {
		kvpd_dump_log(d);
		return r;
	}
	/* nobody's children reach the socket (the test's directory is private otherwise) */
	if (chmod(d->dir, 0711) || chmod(d->sock, 0666))
		return -1;
	return 0;
}

static const char *const acl_lines[] = {
	"ACL SETUSER kvp-a reset on >pw-a-31 resetkeys ~kvp1:a:* resetchannels -@all +get +set "
	"+exists +ping",
	"ACL SETUSER kvp-b reset on >pw-b-47 resetkeys ~kvp1:b:* resetchannels -@all +get +set "
	"+exists +ping",
};

static int setup(void **state)
{
	struct world *w = calloc(1, sizeof(*w));
	int r;

	*state = w;
	if (!w)
		return -1;
	if (geteuid() != 0) {
		free(w);
		print_message("needs root (requests from another uid): skipped\n");
		exit(KVP_TEST_SKIP);
	}
	r = redisfix_start(&w->rf, NULL);
	if (r == -ENOENT) {
		free(w);
		print_message("redis-server not installed (tests/deps.sh): skipped\n");
		exit(KVP_TEST_SKIP);
	}
	if (r)
		return -1;
	w->admin = redisfix_admin(&w->rf);
	if (!w->admin)
		return -1;
	for (size_t i = 0; i < sizeof(acl_lines) / sizeof(acl_lines[0]); i++)
		if (redisfix_line(w->admin, acl_lines[i], NULL, 0))
			return -1;
	if (kvpd_init(&w->h1) || kvpd_init(&w->h2) ||
	    kvpd_model(&w->h1, "demo", w->h1.model, sizeof(w->h1.model)))
		return -1;
	snprintf(w->pw_a, sizeof(w->pw_a), "%s/pw-a", w->h1.dir);
	snprintf(w->pw_b, sizeof(w->pw_b), "%s/pw-b", w->h1.dir);
	if (write_pw(w->pw_a, "pw-a-31") || write_pw(w->pw_b, "pw-b-47"))
		return -1;
	if (start_host(w, &w->h1, "h1") || start_host(w, &w->h2, "h2"))
		return -1;
	return 0;
}

static int teardown(void **state)
{
	struct world *w = *state;

	kvpd_cleanup(&w->h2);
	kvpd_cleanup(&w->h1);
	if (w->admin)
		redisFree(w->admin);
	redisfix_stop(&w->rf);
	free(w);
	return 0;
}

/* Print the store's ACL LOG (after a failure). */
static void print_acl_log(struct world *w)
{
	redisReply *r = redisCommand(w->admin, "ACL LOG");

	for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
		const redisReply *e = r->element[i];

		for (size_t k = 0; k + 1 < e->elements; k += 2)
			if (e->element[k + 1]->type == REDIS_REPLY_STRING)
				print_message("acl log %zu: %s = %s\n", i, e->element[k]->str,
					      e->element[k + 1]->str);
	}
	freeReplyObject(r);
}

/* Reply to @cmd on @c (one key argument) is a NOPERM error. */
static bool noperm(redisContext *c, const char *cmd, const char *key)
{
	redisReply *r = redisCommand(c, "%s %s", cmd, key);
	bool yes = r && r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "NOPERM", 6);

	if (!yes)
		print_message("%s %s: %s\n", cmd, key, r && r->str ? r->str : "(no text)");
	freeReplyObject(r);
	return yes;
}

static void test_domain_users(void **state)
{
	struct world *w = *state;
	struct out ref, o;
	char akey[128], bkey[128];
	redisContext *b;
	redisReply *r;
	const uint32_t reuse = (LEN - 1) / BT * BT;

	/* domain a on H1: stored under kvp1:a: only */
	fill(P, LEN);
	gen(&w->h1, 0, P, &ref);
	assert_int_equal(ref.u.cached_tokens_remote, 0);
	assert_true(wait_keys(w, "kvp1:a:b:*", LEN / BT));
	assert_int_equal(n_keys(w, "kvp1:b:b:*"), 0); /* no block of b's */

	/* domain b on H2 never hits a's blocks; domain a on H2 does */
	gen(&w->h2, NOBODY, P, &o);
	assert_int_equal(o.u.cached_tokens_remote, 0);
	assert_int_equal(o.u.cached_tokens, 0);
	assert_memory_equal(o.ids, ref.ids, sizeof(ref.ids));
	gen(&w->h2, 0, P, &o);
	assert_int_equal(o.u.cached_tokens_remote, reuse);
	assert_memory_equal(o.ids, ref.ids, sizeof(ref.ids));

	/* the other way: domain b on H1 stores Q under kvp1:b: (H2's b stored P there) */
	fill(Q, LEN);
	gen(&w->h1, NOBODY, Q, &ref);
	assert_true(wait_keys(w, "kvp1:b:b:*", 2 * (LEN / BT)));
	gen(&w->h2, 0, Q, &o);
	assert_int_equal(o.u.cached_tokens_remote, 0);
	assert_memory_equal(o.ids, ref.ids, sizeof(ref.ids));
	gen(&w->h2, NOBODY, Q, &o);
	assert_int_equal(o.u.cached_tokens_remote, reuse);
	assert_memory_equal(o.ids, ref.ids, sizeof(ref.ids));

	/* neither daemon met a denial: each domain logged in as its own user */
	r = redisCommand(w->admin, "ACL LOG");
	assert_non_null(r);
	assert_int_equal(r->type, REDIS_REPLY_ARRAY);
	if (r->elements)
		print_acl_log(w);
	assert_int_equal(r->elements, 0);
	freeReplyObject(r);
	assert_int_equal(status_num(&w->h1, "remote.error_replies"), 0);
	assert_int_equal(status_num(&w->h2, "remote.error_replies"), 0);

	/* kvp-b and a's keys: the admin asks the ACL, then kvp-b itself tries */
	find_key(w, "a", P, akey, sizeof(akey));
	find_key(w, "b", Q, bkey, sizeof(bkey));
	assert_true(*akey && *bkey);
	r = redisCommand(w->admin, "ACL DRYRUN kvp-b GET %s", akey);
	assert_non_null(r);
	assert_true(r->type == REDIS_REPLY_ERROR ||
		    (r->type == REDIS_REPLY_STRING && strstr(r->str, "no permissions")));
	freeReplyObject(r);
	r = redisCommand(w->admin, "ACL DRYRUN kvp-a GET %s", akey);
	assert_non_null(r);
	assert_int_equal(r->type, REDIS_REPLY_STATUS);
	assert_string_equal(r->str, "OK");
	freeReplyObject(r);

	b = redisConnectUnix(w->rf.sock);
	assert_non_null(b);
	assert_int_equal(b->err, 0);
	r = redisCommand(b, "AUTH kvp-b pw-b-47");
	assert_non_null(r);
	assert_int_equal(r->type, REDIS_REPLY_STATUS);
	freeReplyObject(r);
	assert_true(noperm(b, "GET", akey));
	assert_true(noperm(b, "EXISTS", akey));
	r = redisCommand(b, "GET %s", bkey); /* its own */
	assert_non_null(r);
	assert_int_equal(r->type, REDIS_REPLY_STRING);
	assert_true(r->len > 4096);
	freeReplyObject(r);
	redisFree(b);
	r = redisCommand(w->admin, "ACL LOG");
	assert_non_null(r);
	assert_true(r->elements >= 1); /* the denials just seen, no others */
	freeReplyObject(r);
}

/* The decoded summary at @key, or NULL (absent, or refused: then a failure). */
static struct kvp_bloom *read_summary(struct world *w, const char *key)
{
	redisReply *r = redisCommand(w->admin, "GET %s", key);
	struct kvp_bloom *b = NULL;

	assert_non_null(r);
	if (r->type == REDIS_REPLY_STRING)
		assert_int_equal(kvp_bloom_decode(&b, (const uint8_t *)r->str, r->len,
						  (uint64_t)time(NULL)),
				 0);
	freeReplyObject(r);
	return b;
}

static void test_summaries(void **state)
{
	struct world *w = *state;
	struct kvp_h128 h[LEN / BT];
	struct kvp_bloom *b = NULL;
	char key[128];
	redisReply *r;
	uint32_t held = 0, fp = 0;
	const uint32_t n_rand = 100000;

	/* A's chains for P: block 0's parent hash (the extra keys' digest) from its record,
	 * then the unseeded chain over the prompt's tokens */
	find_key(w, "a", P, key, sizeof(key));
	assert_true(*key);
	r = redisCommand(w->admin, "GETRANGE %s 72 87", key);
	assert_non_null(r);
	assert_int_equal(r->len, sizeof(struct kvp_h128));
	memcpy(&h[0], r->str, sizeof(h[0]));
	freeReplyObject(r);
	h[0] = kvp_chain_hash(h[0], (const uint32_t *)P, BT);
	for (uint32_t i = 1; i < LEN / BT; i++)
		h[i] = kvp_chain_hash(h[i - 1], (const uint32_t *)P + i * BT, BT);
	r = redisCommand(w->admin, "GETRANGE %s 56 71", key);
	assert_int_equal(r->len, sizeof(struct kvp_h128));
	assert_memory_equal(r->str, &h[0], sizeof(h[0])); /* the record's own hash */
	freeReplyObject(r);

	/* H1's summary of domain a holds them all (a period is 1 s: wait for one after P) */
	for (int t = 0; t < 20000; t += 100) {
		kvp_bloom_free(b);
		b = read_summary(w, "kvp1:a:r:h1");
		held = b ? kvp_bloom_prefix(b, h, LEN / BT) : 0;
		if (held == LEN / BT)
			break;
		usleep(100000);
	}
	assert_non_null(b);
	assert_int_equal(held, LEN / BT);
	assert_true(b->n_items >= LEN / BT);
	for (uint32_t i = 0; i < n_rand; i++) {
		struct kvp_h128 x = { .lo = next_rand(), .hi = next_rand() };

		fp += kvp_bloom_test(b, x);
	}
	print_message("summary kvp1:a:r:h1: %llu chains, %llu bits, k %u; random chains "
		      "present: %u of %u (%.3f%%, sized for %.1f%%)\n",
		      (unsigned long long)b->n_items, (unsigned long long)b->n_bits, b->k, fp,
		      n_rand, 100.0 * fp / n_rand, 100.0 * 0.01);
	kvp_bloom_free(b);

	/* it expires three periods after its last refresh */
	r = redisCommand(w->admin, "TTL kvp1:a:r:h1");
	assert_non_null(r);
	assert_int_equal(r->type, REDIS_REPLY_INTEGER);
	assert_true(r->integer >= 1 && r->integer <= 3);
	freeReplyObject(r);
	/* every host publishes every domain it knows, idle or not */
	static const char *const others[] = { "kvp1:b:r:h1", "kvp1:a:r:h2", "kvp1:b:r:h2" };
	for (size_t i = 0; i < 3; i++) {
		b = read_summary(w, others[i]);
		assert_non_null(b);
		kvp_bloom_free(b);
	}
	assert_true(status_num(&w->h1, "remote.route_published") >= 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_domain_users),
		cmocka_unit_test(test_summaries),
	};

	signal(SIGPIPE, SIG_IGN);
	if (getenv("KVP_TEST_FILTER"))
		cmocka_set_test_filter(getenv("KVP_TEST_FILTER"));
	return cmocka_run_group_tests(tests, setup, teardown);
}
