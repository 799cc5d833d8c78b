/* SPDX-License-Identifier: MIT */
/*
 * test_remote_daemon.c - the remote tier inside two real kvpoold processes (hosts A and
 * B, separate pools, the demo model) sharing one real redis-server (tests/lib/redisfix.c:
 * a temporary directory, a Unix socket; only that process is ever signalled), reached as
 * the domain's ACL user with its password in a 0600 file:
 *
 *  - B's first request for A's long prompt reports cached_tokens_remote equal to what a
 *    warm hit on A reports as cached_tokens, and gives A's tokens; B's second is a local
 *    hit;
 *  - a value modified in the store (one K/V byte of a middle block; the first block) is
 *    caught: the blocks before it are used, the rest recomputed, the tokens are A's, the
 *    failure counted;
 *  - the store SIGSTOPped, then SIGKILLed mid-run: every request finishes with A's
 *    tokens, the tier turns itself off (status remote.state) and comes back on its own
 *    after SIGCONT / a restart, and B fetches again;
 *  - the same exchange with f32, bf16, int8 and int4 K/V, and hosts of different types
 *    never sharing blocks.
 *
 * References are A's own outputs computed without the cache (no_cache), so every
 * comparison is against K/V computed from scratch.
 */
#include <errno.h>
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "kvpool/kvpool.h"
#include "tests/integration/kvpd.h"
#include "tests/lib/redisfix.h"
#include "tests/lib/testlib.h"

#define BT 16
#define LONG 1024 /* the long prompt: 64 blocks, 63 of them reusable by a lookup */
#define SHORT 128 /* the other tests' prompts */
#define GEN 8

struct world {
	struct redisfix rf;
	redisContext *admin;
	struct kvpd a, b;
	char pwfile[512];
	char domain[32]; /* the hosts' trust domain: its keys are kvp1:DOMAIN: */
	char acl[256];
	char dtype[8]; /* the hosts' --kv-dtype: empty for the default (f16) */
};

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static void fill(int32_t *t, uint32_t n)
{
	kvp_test_fill_ids(&rng, t, n, 250); /* the byte-level vocabulary: 259 ids */
}

static int gen(struct kvpd *d, const int32_t *prompt, uint32_t n, bool no_cache, struct kvpd_gen *o)
{
	return kvpd_generate(d->sock, prompt, n, GEN, no_cache, o);
}

static double status_num(struct kvpd *d, const char *path)
{
	return kvpd_status_num(d, path, -1);
}

static bool status_is(struct kvpd *d, const char *path, const char *want)
{
	struct jsonq *j = kvpd_status(d);
	const char *v = j ? jsonq_str(j, path) : NULL;
	bool eq = v && !strcmp(v, want);

	jsonq_free(j);
	return eq;
}

/* Wait up to @ms for @path of @d's status to reach @want.  Return: whether it did. */
static bool wait_num(struct kvpd *d, const char *path, double want, int ms)
{
	for (int t = 0; t < ms; t += 20) {
		if (status_num(d, path) >= want)
			return true;
		usleep(20000);
	}
	return false;
}

static bool wait_state(struct kvpd *d, const char *want, int ms)
{
	for (int t = 0; t < ms; t += 20) {
		if (status_is(d, "remote.state", want))
			return true;
		usleep(20000);
	}
	return false;
}

/* Blocks A's store holds (stored or found there): what B can fetch. */
static double a_published(struct world *w)
{
	return status_num(&w->a, "remote.stored") + status_num(&w->a, "remote.already");
}

/* Wait (up to 20 s) until A's store answered @want publishes in all. */
static bool wait_pub(struct world *w, double want)
{
	for (int t = 0; t < 60000; t += 20) {
		if (a_published(w) >= want)
			return true;
		usleep(20000);
	}
	print_message("A published %.0f of %.0f: offered %.0f, queued %.0f, lost %.0f, errors "
		      "%.0f, drops %.0f/%.0f/%.0f\n",
		      a_published(w), want, status_num(&w->a, "remote.offered"),
		      status_num(&w->a, "remote.publishes"),
		      status_num(&w->a, "remote.publish_lost"),
		      status_num(&w->a, "remote.publish_errors"),
		      status_num(&w->a, "remote.publish_drops"),
		      status_num(&w->a, "remote.publish_off_drops"),
		      status_num(&w->a, "remote.backlog_drops"));
	return false;
}

static int start_host(struct world *w, struct kvpd *d)
{
	/* op_timeout_ms: a loaded machine can leave the store silent for the default 250 ms,
	 * and a publish lost to that would leave a hole the test does not expect */
	const char *args[] = { "--model",
			       w->a.model,
			       "--pool-size",
			       "96M",
			       "--threads",
			       "1",
			       "--ignore-eos",
			       "--remote",
			       w->rf.url_unix,
			       "--remote-user",
			       "kvp-default",
			       "--remote-password-file",
			       w->pwfile,
			       "--set",
			       "remote.op_timeout_ms=1000",
			       "--set",
			       "remote.fetch_timeout_ms=3000",
			       w->dtype[0] ? "--kv-dtype" : NULL,
			       w->dtype,
			       NULL };
	int r = kvpd_start(d, 120, args);

	if (r)
		kvpd_dump_log(d);
	return r;
}

/*
 * The ACL user of the hosts' trust domain: each daemon runs as this process's uid, whose
 * domain (domains.mode per-uid) is "uid-N" on both hosts, so its keys are kvp1:uid-N:.
 * No other key pattern: a domain's user reaches its own keys only.
 */
static const char *acl_line(struct world *w)
{
	snprintf(w->acl, sizeof(w->acl),
		 "ACL SETUSER kvp-default reset on >pw-default-7 resetkeys ~kvp1:%s:* "
		 "resetchannels -@all +get +set +exists +ping",
		 w->domain);
	return w->acl;
}

static int setup(void **state)
{
	struct world *w = calloc(1, sizeof(*w));
	char err[256];
	FILE *f;
	int r;

	*state = w;
	if (!w)
		return -1;
	snprintf(w->domain, sizeof(w->domain), "uid-%u", (unsigned int)getuid());
	r = redisfix_start(&w->rf, NULL);
	if (r == -ENOENT) {
		free(w);
		print_message("redis-server not installed (tests/deps.sh): skipped\n");
		exit(KVP_TEST_SKIP);
	}
	if (r)
		return -1;
	w->admin = redisfix_admin(&w->rf);
	if (!w->admin || redisfix_line(w->admin, acl_line(w), err, sizeof(err)))
		return -1;
	if (kvpd_init(&w->a) || kvpd_init(&w->b) ||
	    kvpd_model(&w->a, "demo", w->a.model, sizeof(w->a.model)))
		return -1;
	snprintf(w->pwfile, sizeof(w->pwfile), "%s/pw", w->a.dir);
	f = fopen(w->pwfile, "w");
	if (!f)
		return -1;
	fputs("pw-default-7\n", f);
	fclose(f);
	chmod(w->pwfile, 0600);
	if (start_host(w, &w->a) || start_host(w, &w->b))
		return -1;
	return 0;
}

static int teardown(void **state)
{
	struct world *w = *state;

	kvpd_cleanup(&w->b);
	kvpd_cleanup(&w->a);
	if (w->admin)
		redisFree(w->admin);
	redisfix_stop(&w->rf);
	free(w);
	return 0;
}

/* ---- the store, read and changed as the admin ---- */

/* The key of the block holding @tokens (BT of them): GETRANGE of each block's tokens. */
static bool find_key(struct world *w, const int32_t *tokens, char *key, size_t cap)
{
	redisReply *keys = redisCommand(w->admin, "KEYS kvp1:%s:b:*", w->domain);
	bool found = false;

	assert_non_null(keys);
	assert_int_equal(keys->type, REDIS_REPLY_ARRAY);
	for (size_t i = 0; i < keys->elements && !found; i++) {
		/* the record: a 256-byte block header, then the tokens (docs/tier.md) */
		redisReply *t = redisCommand(w->admin, "GETRANGE %s 256 %d", keys->element[i]->str,
					     256 + 4 * BT - 1);

		if (t && t->type == REDIS_REPLY_STRING && t->len == 4 * BT &&
		    !memcmp(t->str, tokens, 4 * BT)) {
			snprintf(key, cap, "%s", keys->element[i]->str);
			found = true;
		}
		freeReplyObject(t);
	}
	freeReplyObject(keys);
	return found;
}

/* Change one byte of @key's value at @off (to a different one). */
static void flip(struct world *w, const char *key, long off)
{
	redisReply *r = redisCommand(w->admin, "GETRANGE %s %ld %ld", key, off, off);
	char c;

	assert_non_null(r);
	assert_int_equal(r->len, 1);
	c = (char)(r->str[0] ^ 0x20);
	freeReplyObject(r);
	r = redisCommand(w->admin, "SETRANGE %s %ld %b", key, off, &c, (size_t)1);
	assert_non_null(r);
	assert_int_equal(r->type, REDIS_REPLY_INTEGER);
	freeReplyObject(r);
}

/* ---- tests ---- */

static void two_hosts(struct world *w);

static void test_two_hosts(void **state)
{
	two_hosts(*state);
}

/* Restart both hosts with K/V type @dtype ("": the default). */
static void restart_hosts(struct world *w, const char *dtype)
{
	kvpd_stop(&w->a);
	kvpd_stop(&w->b);
	snprintf(w->dtype, sizeof(w->dtype), "%s", dtype);
	assert_int_equal(start_host(w, &w->a), 0);
	assert_int_equal(start_host(w, &w->b), 0);
}

/*
 * int8 hosts exchange int8 blocks as f16 ones do (bit for bit: the tokens equal A's
 * cold ones); then B in f16 never gets A's int8 blocks (another block shape, another
 * key): it recomputes, with its own cold tokens.
 */
static void test_int8_and_other_type(void **state)
{
	struct world *w = *state;
	static int32_t p[SHORT * 2];
	struct kvpd_gen a_cold, b_cold, rb;

	restart_hosts(w, "int8");
	two_hosts(w);
	kvpd_stop(&w->b);
	w->dtype[0] = '\0';
	assert_int_equal(start_host(w, &w->b), 0);
	fill(p, SHORT * 2);
	assert_int_equal(gen(&w->b, p, SHORT * 2, true, &b_cold), 0);
	assert_int_equal(gen(&w->a, p, SHORT * 2, false, &a_cold), 0);
	usleep(500000); /* A publishes meanwhile (wait_pub needs a count from before) */
	assert_int_equal(gen(&w->b, p, SHORT * 2, false, &rb), 0);
	assert_int_equal(rb.u.cached_tokens_remote, 0);
	assert_memory_equal(rb.ids, b_cold.ids, sizeof(rb.ids));
	assert_int_equal(status_num(&w->b, "remote.verify_failures"), 0);
	restart_hosts(w, "");
}

/*
 * f32 and bf16 hosts exchange their blocks as f16 ones do: two_hosts() under each type
 * (B's fetched blocks give A's tokens bit for bit, then a local hit).
 */
static void test_f32_and_bf16(void **state)
{
	struct world *w = *state;

	restart_hosts(w, "f32");
	two_hosts(w);
	restart_hosts(w, "bf16");
	two_hosts(w);
	restart_hosts(w, "");
}

/*
 * int4 hosts: A publishes its sealed blocks (those out of the residual window) to the
 * store; B fetches them and reads the same bytes from the same boundary as A's own
 * warm hit, so its tokens are A's warm ones; then the blocks are B's own, a local hit.
 * An f16 B never gets A's int4 blocks.
 */
static void test_int4_and_other_type(void **state)
{
	struct world *w = *state;
	static int32_t p[LONG];
	struct kvpd_gen cold, warm, rb, rb2;
	double before;

	restart_hosts(w, "int4");
	before = a_published(w);
	fill(p, LONG);
	assert_int_equal(gen(&w->a, p, LONG, false, &cold), 0);
	assert_true(wait_pub(w, before + (LONG + GEN - 1 - 32) / BT));
	assert_int_equal(gen(&w->a, p, LONG, false, &warm), 0);
	assert_true(warm.u.cached_tokens >= (LONG - 32) / BT * BT);
	assert_int_equal(gen(&w->b, p, LONG, false, &rb), 0);
	assert_int_equal(rb.u.cached_tokens_remote, warm.u.cached_tokens);
	assert_memory_equal(rb.ids, warm.ids, sizeof(warm.ids));
	assert_int_equal(status_num(&w->b, "remote.verify_failures"), 0);
	assert_int_equal(gen(&w->b, p, LONG, false, &rb2), 0);
	assert_int_equal(rb2.u.cached_tokens, warm.u.cached_tokens);
	assert_int_equal(rb2.u.cached_tokens_remote, 0);
	assert_memory_equal(rb2.ids, warm.ids, sizeof(warm.ids));

	kvpd_stop(&w->b);
	w->dtype[0] = '\0';
	assert_int_equal(start_host(w, &w->b), 0);
	assert_int_equal(gen(&w->b, p, LONG, true, &cold), 0);
	assert_int_equal(gen(&w->b, p, LONG, false, &rb), 0);
	assert_int_equal(rb.u.cached_tokens_remote, 0);
	assert_memory_equal(rb.ids, cold.ids, sizeof(rb.ids));
	assert_int_equal(status_num(&w->b, "remote.verify_failures"), 0);
	restart_hosts(w, "");
}

static void two_hosts(struct world *w)
{
	static int32_t p[LONG];
	struct kvpd_gen ref, cold, warm, rb, rb2;
	double before = a_published(w);

	fill(p, LONG);
	assert_int_equal(gen(&w->a, p, LONG, true, &ref), 0);
	assert_int_equal(gen(&w->a, p, LONG, false, &cold), 0);
	assert_int_equal(cold.u.cached_tokens_remote, 0);
	assert_memory_equal(cold.ids, ref.ids, sizeof(ref.ids));
	/* every full block of the prompt and of what it generated: 64 */
	assert_true(wait_pub(w, before + LONG / BT));
	assert_int_equal(gen(&w->a, p, LONG, false, &warm), 0);
	assert_int_equal(warm.u.cached_tokens, (LONG - 1) / BT * BT);

	assert_int_equal(gen(&w->b, p, LONG, false, &rb), 0);
	assert_int_equal(rb.u.cached_tokens, 0);
	assert_int_equal(rb.u.cached_tokens_remote, warm.u.cached_tokens);
	assert_int_equal(rb.u.recomputed_tokens, LONG - warm.u.cached_tokens);
	assert_int_equal(rb.n, GEN);
	assert_memory_equal(rb.ids, ref.ids, sizeof(ref.ids));
	assert_true(status_num(&w->b, "remote.loaded_blocks") >= (LONG - 1) / BT);
	assert_int_equal(status_num(&w->b, "remote.verify_failures"), 0);
	assert_true(status_num(&w->b, "usage.cached_tokens_remote") >= warm.u.cached_tokens);

	/* fetched blocks are B's own now: a local hit, nothing fetched */
	assert_int_equal(gen(&w->b, p, LONG, false, &rb2), 0);
	assert_int_equal(rb2.u.cached_tokens, warm.u.cached_tokens);
	assert_int_equal(rb2.u.cached_tokens_remote, 0);
	assert_memory_equal(rb2.ids, ref.ids, sizeof(ref.ids));
	assert_true(kvpd_log_has(&w->b, "remote: unix:"));
}

static void test_tampered(void **state)
{
	struct world *w = *state;
	static int32_t p[SHORT], q[SHORT];
	struct kvpd_gen ref, o;
	char key[128];
	double fails;

	/* a K/V byte of block 5: blocks 0..4 are used, the rest computed */
	fill(p, SHORT);
	assert_int_equal(gen(&w->a, p, SHORT, true, &ref), 0);
	double before = a_published(w);
	assert_int_equal(gen(&w->a, p, SHORT, false, &o), 0);
	assert_true(wait_pub(w, before + SHORT / BT));
	assert_true(find_key(w, p + 5 * BT, key, sizeof(key)));
	flip(w, key, 4096 + 1000);
	fails = status_num(&w->b, "remote.verify_failures");
	assert_int_equal(gen(&w->b, p, SHORT, false, &o), 0);
	assert_int_equal(o.u.cached_tokens_remote, 5 * BT);
	assert_memory_equal(o.ids, ref.ids, sizeof(ref.ids));
	assert_true(wait_num(&w->b, "remote.verify_failures", fails + 1, 2000));

	/* a token of the first block's record: nothing is used */
	fill(q, SHORT);
	assert_int_equal(gen(&w->a, q, SHORT, true, &ref), 0);
	before = a_published(w);
	assert_int_equal(gen(&w->a, q, SHORT, false, &o), 0);
	assert_true(wait_pub(w, before + SHORT / BT));
	assert_true(find_key(w, q, key, sizeof(key)));
	flip(w, key, 256 + 4 * 3);
	assert_int_equal(gen(&w->b, q, SHORT, false, &o), 0);
	assert_int_equal(o.u.cached_tokens_remote, 0);
	assert_int_equal(o.u.cached_tokens, 0);
	assert_memory_equal(o.ids, ref.ids, sizeof(ref.ids));
	assert_true(wait_num(&w->b, "remote.verify_failures", fails + 2, 2000));
}

struct runner {
	struct world *w;
	int32_t (*p)[SHORT];
	struct kvpd_gen *o;
	uint32_t n;
};

static void *run_b(void *arg)
{
	struct runner *r = arg;

	for (uint32_t i = 0; i < r->n; i++)
		gen(&r->w->b, r->p[i], SHORT, false, &r->o[i]);
	return NULL;
}

#define N_RUN 4

static void test_store_stopped_and_killed(void **state)
{
	struct world *w = *state;
	static int32_t p[N_RUN][SHORT];
	struct kvpd_gen ref[N_RUN], o[N_RUN];
	struct runner rn = { .w = w, .p = p, .o = o, .n = N_RUN };
	pthread_t th;
	double before, conn_b;

	for (int i = 0; i < N_RUN; i++) {
		fill(p[i], SHORT);
		assert_int_equal(gen(&w->a, p[i], SHORT, true, &ref[i]), 0);
	}
	/* A publishes the first two; the others only B will see */
	before = a_published(w);
	for (int i = 0; i < 2; i++)
		assert_int_equal(gen(&w->a, p[i], SHORT, false, &o[i]), 0);
	assert_true(wait_pub(w, before + 2 * SHORT / BT));

	/* stopped: B's fetches stall (op_timeout_ms), each request computes what it needs;
	 * a few connection errors open the breaker, then nothing waits for the store */
	redisfix_signal(&w->rf, SIGSTOP);
	for (int i = 0; i < 3 && !status_is(&w->b, "remote.state", "open"); i++) {
		int k = i == 0 ? 0 : i + 1; /* p[0] (A published it), p[2], p[3] */

		assert_int_equal(gen(&w->b, p[k], SHORT, false, &o[k]), 0);
		assert_memory_equal(o[k].ids, ref[k].ids, sizeof(ref[k].ids));
		assert_int_equal(o[k].u.cached_tokens_remote, 0);
	}
	assert_true(wait_state(&w->b, "open", 5000) || status_is(&w->b, "remote.state", "probing"));
	assert_true(status_num(&w->b, "remote.breaker_opens") >= 1);
	assert_int_equal(gen(&w->b, p[2], SHORT, false, &o[2]), 0);
	assert_memory_equal(o[2].ids, ref[2].ids, sizeof(ref[2].ids));
	redisfix_signal(&w->rf, SIGCONT);
	assert_true(wait_state(&w->b, "on", 10000));
	/* back: A's second prompt comes from the store */
	assert_int_equal(gen(&w->b, p[1], SHORT, false, &o[1]), 0);
	assert_memory_equal(o[1].ids, ref[1].ids, sizeof(ref[1].ids));
	assert_int_equal(o[1].u.cached_tokens_remote, (SHORT - 1) / BT * BT);

	/* killed while B runs requests that fetch and publish */
	for (int i = 0; i < N_RUN; i++)
		fill(p[i], SHORT);
	for (int i = 0; i < N_RUN; i++)
		assert_int_equal(gen(&w->a, p[i], SHORT, true, &ref[i]), 0);
	before = a_published(w);
	for (int i = 0; i < N_RUN; i += 2)
		assert_int_equal(gen(&w->a, p[i], SHORT, false, &o[i]), 0);
	assert_true(wait_pub(w, before + N_RUN / 2 * SHORT / BT));
	conn_b = status_num(&w->b, "remote.connects");
	assert_int_equal(pthread_create(&th, NULL, run_b, &rn), 0);
	usleep(150000);
	redisfix_signal(&w->rf, SIGKILL);
	pthread_join(th, NULL);
	for (int i = 0; i < N_RUN; i++) {
		assert_int_equal(o[i].rc, 0);
		assert_int_equal(o[i].n, GEN);
		assert_memory_equal(o[i].ids, ref[i].ids, sizeof(ref[i].ids));
	}
	assert_true(wait_state(&w->b, "open", 5000) || status_is(&w->b, "remote.state", "probing"));
	/* restarted (empty, no ACL user yet: the probes fail until it exists) */
	assert_int_equal(redisfix_restart(&w->rf), 0);
	redisFree(w->admin);
	w->admin = redisfix_admin(&w->rf);
	assert_non_null(w->admin);
	assert_int_equal(redisfix_line(w->admin, acl_line(w), NULL, 0), 0);
	/* B's probes find it (A, idle, saw its connections end at the kill: it connects
	 * again when it next has something to send) */
	assert_true(wait_num(&w->b, "remote.connects", conn_b + 1, 15000));
	assert_true(wait_state(&w->b, "on", 15000));
	fill(p[0], SHORT);
	assert_int_equal(gen(&w->a, p[0], SHORT, true, &ref[0]), 0);
	before = a_published(w);
	assert_int_equal(gen(&w->a, p[0], SHORT, false, &o[0]), 0);
	assert_true(wait_pub(w, before + SHORT / BT));
	assert_int_equal(gen(&w->b, p[0], SHORT, false, &o[0]), 0);
	assert_int_equal(o[0].u.cached_tokens_remote, (SHORT - 1) / BT * BT);
	assert_memory_equal(o[0].ids, ref[0].ids, sizeof(ref[0].ids));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_two_hosts),
		cmocka_unit_test(test_tampered),
		cmocka_unit_test(test_store_stopped_and_killed),
		cmocka_unit_test(test_int8_and_other_type),
		cmocka_unit_test(test_f32_and_bf16),
		cmocka_unit_test(test_int4_and_other_type),
	};

	signal(SIGPIPE, SIG_IGN);
	if (getenv("KVP_TEST_FILTER")) /* one test while working on it */
		cmocka_set_test_filter(getenv("KVP_TEST_FILTER"));
	return cmocka_run_group_tests(tests, setup, teardown);
}
