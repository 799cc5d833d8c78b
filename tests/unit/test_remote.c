/* SPDX-License-Identifier: MIT */
/*
 * test_remote.c - the remote tier against a real redis-server (started here, on a Unix
 * socket and a loopback port in a temporary directory; only that process is stopped).
 * Each "host" is a tier instance with a pool of its own.
 *
 * - two hosts, one store: B fetches A's 4,096-token chain and gets A's K/V byte for byte,
 *   over a Unix socket and over TCP; the blocks publish into B's prefix index and hit;
 * - another domain, model or numerics class never hits; across prefixes the ACL users get
 *   NOPERM, SCAN and KEYS included;
 * - values corrupted, truncated, extended, misdirected or forged in the store end the
 *   prefix at that block, counted, never served;
 * - a small maxmemory with LRU leaves holes that end the prefix cleanly, and a key gone
 *   between the existence check and the fetch does too;
 * - the store SIGKILLed or SIGSTOPped mid-run: every call returns at once, every fetch by
 *   its deadline, the breaker opens within a second and closes after restart / SIGCONT;
 * - no store at start: a clear error and local-only, then the tier comes up by itself;
 * - wrong password, misconfigured user, queue bounds, selective publishing, the cost
 *   check, deadlines, TTL, and the chain summary with its read-only router user.
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
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "shm/index.h"
#include "shm/pool.h"
#include "shm/remote/acl.h"
#include "shm/remote/breaker.h"
#include "shm/remote/codec.h"
#include "shm/remote/remote.h"
#include "tests/lib/redisfix.h"
#include "tests/lib/testlib.h"

#define BT 16
#define NCHAIN 256 /* 4,096 tokens */
#define POOL_BLOCKS 640
#define MS 1000000ull

static const struct kvp_model_shape shape = {
	.n_layers = 2,
	.n_kv_heads = 2,
	.head_dim = 64,
	.dtype = KVP_DTYPE_F16,
	.block_tokens = BT,
};
static const uint8_t fp[16] = "remote-tier-mdl";

struct host {
	struct kvp_pool *pool;
	struct kvp_remote *r;
	uint32_t blocks[NCHAIN];
};

struct world {
	struct redisfix rf;
	redisContext *admin;
	struct kvp_remote_config cfg;
	struct kvp_remote_codec codec;
	struct kvp_prefix_key key;
	uint32_t tokens[NCHAIN * BT + 1];
	struct kvp_h128 hash[NCHAIN];
	struct host a, b;
};

/* ---- fixture ---- */

/* K/V contents any host can predict from the chain hash */
static void pattern(uint8_t *buf, size_t n, struct kvp_h128 h)
{
	uint64_t s = (h.lo ^ (h.hi * 0x9e3779b97f4a7c15ull)) | 1;

	for (size_t i = 0; i + 8 <= n; i += 8) {
		uint64_t v = kvp_test_xorshift(&s);

		memcpy(buf + i, &v, 8);
	}
}

static void make_key(struct kvp_prefix_key *key, const uint8_t *model, const char *salt)
{
	struct kvp_extra_keys ek = { .kv_dtype = shape.dtype, .rope_theta_bits = 0x461c4000 };

	memcpy(ek.model_fp, model, 16);
	ek.salt_len = (uint32_t)strlen(salt);
	memcpy(ek.salt, salt, ek.salt_len);
	assert_int_equal(kvp_prefix_key_init(key, &ek), 0);
}

static void cfg_make(struct kvp_remote_config *c, const char *url)
{
	char err[256];
	uint32_t id;

	kvp_remote_config_defaults(c);
	assert_int_equal(kvp_remote_config_set(c, "url", url, err, sizeof(err)), 0);
	c->connect_timeout_ms = 200;
	c->op_timeout_ms = 200;
	c->fetch_timeout_ms = 3000;
	c->breaker_probe_ms = 100;
	c->breaker_probe_max_ms = 300;
	c->ttl_s = 600;
	assert_int_equal(kvp_remote_config_add_domain(c, &id, "a", "kvp-a", "pw-a", err,
						      sizeof(err)),
			 0);
	assert_int_equal(kvp_remote_config_add_domain(c, &id, "b", "kvp-b", "pw-b", err,
						      sizeof(err)),
			 0);
}

/* The ACL users of every domain of @c, from the helper's lines. */
static void acl_setup(redisContext *admin, const struct kvp_remote_config *c)
{
	char line[512], err[256];

	for (uint32_t i = 0; i < c->n_domains; i++) {
		assert_true(kvp_remote_acl_domain(line, sizeof(line), &c->domains[i],
						  KVP_REMOTE_ACL_COMMAND) > 0);
		if (redisfix_line(admin, line, err, sizeof(err)) < 0)
			fail_msg("%s: %s", line, err);
	}
}

/* A new admin connection and the ACL users again (after a restart). */
static void readmin(struct world *w)
{
	if (w->admin)
		redisFree(w->admin);
	w->admin = redisfix_admin(&w->rf);
	assert_non_null(w->admin);
	acl_setup(w->admin, &w->cfg);
}

static int host_up(struct host *h, const struct kvp_remote_config *c, const char *numerics,
		   const uint8_t *model)
{
	struct kvp_pool_config pc = { .shape = shape,
				      .n_blocks = POOL_BLOCKS,
				      .pages = KVP_PAGES_OFF,
				      .name = "kvptest-remote" };
	char err[512];
	int r;

	memset(h, 0, sizeof(*h));
	assert_int_equal(kvp_pool_new(&h->pool, &pc), 0);
	assert_int_equal(kvp_remote_new(&h->r, c, &shape, model, numerics, err, sizeof(err)), 0);
	r = kvp_remote_wait_ready(h->r, 3000, err, sizeof(err));
	if (r < 0)
		print_message("wait_ready: %s\n", err);
	return r;
}

static void host_down(struct host *h)
{
	kvp_remote_free(h->r);
	kvp_pool_free(h->pool);
	memset(h, 0, sizeof(*h));
}

static int world_up(void **state, const char *const *extra)
{
	struct world *w = calloc(1, sizeof(*w));
	uint64_t s = 0x1234567;
	struct kvp_h128 h;
	int r;

	if (!w)
		return -1;
	r = redisfix_start(&w->rf, extra);
	if (r == -ENOENT) {
		free(w);
		print_message("redis-server not installed (tests/deps.sh): skipped\n");
		exit(KVP_TEST_SKIP);
	}
	assert_int_equal(r, 0);
	w->admin = redisfix_admin(&w->rf);
	assert_non_null(w->admin);
	cfg_make(&w->cfg, w->rf.url_unix);
	acl_setup(w->admin, &w->cfg);
	make_key(&w->key, fp, "salt");
	assert_int_equal(kvp_remote_codec_init(&w->codec, &shape, fp, "avx2"), 0);
	for (size_t i = 0; i < sizeof(w->tokens) / sizeof(w->tokens[0]); i++)
		w->tokens[i] = (uint32_t)(kvp_test_xorshift(&s) % 128000);
	h = w->key.seed;
	for (int i = 0; i < NCHAIN; i++) {
		h = kvp_chain_hash(h, w->tokens + i * BT, BT);
		w->hash[i] = h;
	}
	*state = w;
	return 0;
}

static int setup(void **state)
{
	return world_up(state, NULL);
}

static int setup_lru(void **state)
{
	static const char *const extra[] = {
		"--maxmemory", "4mb", "--maxmemory-policy", "allkeys-lru", "--maxmemory-samples",
		"10",	       NULL
	};

	return world_up(state, extra);
}

static int teardown(void **state)
{
	struct world *w = *state;

	host_down(&w->a);
	host_down(&w->b);
	if (w->admin)
		redisFree(w->admin);
	redisfix_stop(&w->rf);
	free(w);
	return 0;
}

/* Wait for @n_pub publish and @n_fetch fetch completions; the last fetch's. */
static struct kvp_remote_done wait_both(struct kvp_remote *r, uint32_t n_pub, uint32_t n_fetch)
{
	struct kvp_remote_done d[64], last = { 0 };
	uint64_t end = kvp_test_now_ns() + 20000 * MS;
	uint32_t pubs = 0, fetches = 0;

	while (pubs < n_pub || fetches < n_fetch) {
		int k;

		assert_true(kvp_test_now_ns() < end);
		kvp_remote_wait(r, 100);
		k = kvp_remote_poll(r, d, 64);
		for (int i = 0; i < k; i++) {
			if (d[i].kind == KVP_REMOTE_DONE_FETCH) {
				fetches++;
				last = d[i];
			} else {
				pubs++;
			}
		}
	}
	assert_int_equal(pubs, n_pub);
	assert_int_equal(fetches, n_fetch);
	return last;
}

static struct kvp_remote_done wait_done(struct kvp_remote *r, uint32_t kind, uint32_t n)
{
	return kind == KVP_REMOTE_DONE_FETCH ? wait_both(r, 0, n) : wait_both(r, n, 0);
}

/* Host @h holds the chain's first @n blocks (filled with their pattern). */
static void fill_chain(struct world *w, struct host *h, uint32_t n)
{
	size_t bb = kvp_remote_block_bytes(h->r);

	for (uint32_t i = 0; i < n; i++) {
		if (!h->blocks[i])
			assert_int_equal(kvp_pool_alloc(h->pool, KVP_NODE_ANY, &h->blocks[i]), 0);
		pattern(kvp_pool_data(h->pool, h->blocks[i]), bb, w->hash[i]);
	}
}

static struct kvp_index_rec rec_of(const struct world *w, const struct kvp_prefix_key *key,
				   uint32_t i)
{
	return (struct kvp_index_rec){
		.hash = w->hash[i],
		.phash = i ? w->hash[i - 1] : key->seed,
		.key = *key,
		.tokens = w->tokens + i * BT,
	};
}

/* Publish blocks [@from, @to) of the chain from @h, retrying when the queue is full;
 * wait until every one was answered.  Return: how often the queue was full. */
static uint32_t publish_range(struct world *w, struct host *h, uint32_t dom, uint32_t from,
			      uint32_t to)
{
	uint32_t queued = 0, full = 0;

	for (uint32_t i = from; i < to;) {
		struct kvp_index_rec rec = rec_of(w, &w->key, i);
		int r = kvp_remote_publish(h->r, dom, KVP_REMOTE_WHY_CREATED, &rec,
					   kvp_pool_data(h->pool, h->blocks[i]), i);

		if (r == -ENOBUFS) {
			wait_done(h->r, KVP_REMOTE_DONE_PUBLISH, queued);
			queued = 0;
			full++;
			continue;
		}
		assert_int_equal(r, 0);
		queued++;
		i++;
	}
	wait_done(h->r, KVP_REMOTE_DONE_PUBLISH, queued);
	assert_int_equal(kvp_remote_drain(h->r, 10000), 0);
	return full;
}

static uint32_t publish_chain(struct world *w, struct host *h, uint32_t dom, uint32_t n)
{
	return publish_range(w, h, dom, 0, n);
}

/* Fetch blocks [0, n) of the chain into @h's blocks and wait for the answer. */
static struct kvp_remote_done fetch_chain(struct world *w, struct host *h, uint32_t dom,
					  const struct kvp_prefix_key *key, uint32_t n, double tps,
					  uint32_t timeout_ms)
{
	void *dest[NCHAIN];
	struct kvp_remote_fetch f = {
		.tag = 77,
		.domain = dom,
		.n_blocks = n,
		.key = key,
		.parent_hash = key->seed,
		.tokens = w->tokens,
		.dest = dest,
		.prefill_tps = tps,
		.timeout_ms = timeout_ms,
	};

	for (uint32_t i = 0; i < n; i++) {
		if (!h->blocks[i])
			assert_int_equal(kvp_pool_alloc(h->pool, KVP_NODE_ANY, &h->blocks[i]), 0);
		dest[i] = kvp_pool_data(h->pool, h->blocks[i]);
		memset(dest[i], 0xee, kvp_remote_block_bytes(h->r));
	}
	assert_int_equal(kvp_remote_fetch(h->r, &f), 0);
	return wait_done(h->r, KVP_REMOTE_DONE_FETCH, 1);
}

/* The first @n blocks of @h hold exactly the chain's K/V. */
static void assert_holds(struct world *w, struct host *h, uint32_t n)
{
	size_t bb = kvp_remote_block_bytes(h->r);
	uint8_t *want = malloc(bb);

	assert_non_null(want);
	for (uint32_t i = 0; i < n; i++) {
		pattern(want, bb, w->hash[i]);
		if (memcmp(want, kvp_pool_data(h->pool, h->blocks[i]), bb))
			fail_msg("block %u differs", i);
	}
	free(want);
}

static void block_key(const struct world *w, const struct kvp_remote_codec *c, const char *dom,
		      uint32_t i, char *key)
{
	assert_true(kvp_remote_block_key(key, KVP_REMOTE_KEY_MAX, dom,
					 kvp_remote_digest(c, w->hash[i], w->key.seed)) > 0);
}

static redisReply *cmd(redisContext *c, const char *fmt, ...)
{
	va_list ap;
	redisReply *r;

	va_start(ap, fmt);
	r = redisvCommand(c, fmt, ap);
	va_end(ap);
	assert_non_null(r);
	return r;
}

/* ---- tests ---- */

/* Two hosts, one store: B's fetch of A's 4,096 tokens returns every block, byte for
 * byte, over the Unix socket and then over TCP; B's index then hits all of them; a
 * second publish finds the keys there (NX); values carry the TTL. */
static void test_two_hosts(void **state)
{
	struct world *w = *state;
	struct kvp_remote_stats st;
	struct kvp_remote_done d;
	struct kvp_index *idx;
	uint32_t hits[NCHAIN], parent = KVP_BLOCK_NONE, out, full;
	char key[KVP_REMOTE_KEY_MAX];
	redisReply *rep;

	assert_int_equal(host_up(&w->a, &w->cfg, "avx2", fp), 0);
	fill_chain(w, &w->a, NCHAIN);
	full = publish_chain(w, &w->a, 0, NCHAIN);
	kvp_remote_stats(w->a.r, 0, &st);
	assert_int_equal(st.publishes, NCHAIN);
	assert_int_equal(st.stored, NCHAIN);
	assert_int_equal(st.publish_drops, full); /* each refusal counted, then retried */

	assert_int_equal(host_up(&w->b, &w->cfg, "avx2", fp), 0);
	d = fetch_chain(w, &w->b, 0, &w->key, NCHAIN, 0, 0);
	assert_int_equal(d.result, NCHAIN);
	assert_int_equal(d.n_found, NCHAIN);
	assert_int_equal(d.stop, KVP_REMOTE_STOP_END);
	assert_holds(w, &w->b, NCHAIN);
	kvp_remote_stats(w->b.r, 0, &st);
	assert_int_equal(st.hit_blocks, NCHAIN);
	assert_int_equal(st.hit_bytes, (uint64_t)NCHAIN * kvp_remote_block_bytes(w->b.r));
	assert_int_equal(st.verify_failures, 0);
	assert_false(st.fetch_p99_ms != st.fetch_p99_ms); /* a figure, not NaN */

	/* what B fetched goes into its index like a prefill would, and hits */
	assert_int_equal(kvp_index_new(&idx, w->b.pool), 0);
	for (uint32_t i = 0; i < NCHAIN; i++) {
		assert_int_equal(kvp_index_publish(idx, &w->key, parent, w->tokens + i * BT,
						   w->b.blocks[i], &out),
				 0);
		parent = out;
	}
	assert_int_equal(kvp_index_lookup(idx, &w->key, w->tokens, NCHAIN * BT + 1, hits, NCHAIN),
			 NCHAIN);
	for (uint32_t i = 0; i < NCHAIN; i++)
		kvp_pool_unref(w->b.pool, hits[i]);
	kvp_index_free(idx);

	/* published again: already there (SET NX), nothing overwritten */
	publish_chain(w, &w->a, 0, 8);
	kvp_remote_stats(w->a.r, 0, &st);
	assert_int_equal(st.already, 8);
	block_key(w, &w->codec, "a", 3, key);
	rep = cmd(w->admin, "TTL %s", key);
	assert_int_equal(rep->type, REDIS_REPLY_INTEGER);
	assert_true(rep->integer > 0 && rep->integer <= (long long)w->cfg.ttl_s);
	freeReplyObject(rep);

	/* the same over TCP loopback, from a third host */
	host_down(&w->b);
	cfg_make(&w->cfg, w->rf.url_tcp);
	assert_int_equal(host_up(&w->b, &w->cfg, "avx2", fp), 0);
	d = fetch_chain(w, &w->b, 0, &w->key, NCHAIN, 0, 0);
	assert_int_equal(d.result, NCHAIN);
	assert_holds(w, &w->b, NCHAIN);
}

/* Another domain, model, salt or numerics class never hits A's blocks; the ACL users
 * cannot reach across prefixes (NOPERM), nor list keys (SCAN, KEYS), nor delete. */
static void test_isolation(void **state)
{
	static const uint8_t fp2[16] = "another-model!!";
	struct world *w = *state;
	struct kvp_prefix_key other;
	struct kvp_remote_done d;
	char akey[KVP_REMOTE_KEY_MAX], bkey[KVP_REMOTE_KEY_MAX];
	const char *lines[] = { "GET %s", "EXISTS %s", "SET %s x", "DEL %s" };
	redisContext *ub;
	redisReply *rep;

	assert_int_equal(host_up(&w->a, &w->cfg, "avx2", fp), 0);
	fill_chain(w, &w->a, 16);
	publish_chain(w, &w->a, 0, 16);

	assert_int_equal(host_up(&w->b, &w->cfg, "avx2", fp), 0);
	d = fetch_chain(w, &w->b, 1, &w->key, 16, 0, 0); /* domain b */
	assert_int_equal(d.result, 0);
	assert_int_equal(d.n_found, 0);
	assert_int_equal(d.stop, KVP_REMOTE_STOP_MISS);
	make_key(&other, fp, "pepper"); /* another cache salt */
	d = fetch_chain(w, &w->b, 0, &other, 16, 0, 0);
	assert_int_equal(d.n_found, 0);
	host_down(&w->b);

	assert_int_equal(host_up(&w->b, &w->cfg, "avx512", fp), 0); /* other kernels */
	d = fetch_chain(w, &w->b, 0, &w->key, 16, 0, 0);
	assert_int_equal(d.n_found, 0);
	host_down(&w->b);
	assert_int_equal(host_up(&w->b, &w->cfg, "avx2", fp2), 0); /* another model */
	make_key(&other, fp2, "salt");
	d = fetch_chain(w, &w->b, 0, &other, 16, 0, 0);
	assert_int_equal(d.n_found, 0);

	/* kvp-b, by hand, against domain a's keys */
	block_key(w, &w->codec, "a", 0, akey);
	block_key(w, &w->codec, "b", 0, bkey);
	ub = redisfix_admin(&w->rf);
	assert_non_null(ub);
	rep = cmd(ub, "AUTH kvp-b pw-b");
	assert_int_equal(rep->type, REDIS_REPLY_STATUS);
	freeReplyObject(rep);
	for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
		rep = cmd(ub, lines[i], akey);
		assert_int_equal(rep->type, REDIS_REPLY_ERROR);
		if (strncmp(rep->str, "NOPERM", 6))
			fail_msg("%s: %s", lines[i], rep->str);
		freeReplyObject(rep);
	}
	rep = cmd(ub, "DEL %s", bkey); /* not even its own */
	assert_int_equal(rep->type, REDIS_REPLY_ERROR);
	freeReplyObject(rep);
	rep = cmd(ub, "SCAN 0");
	assert_int_equal(rep->type, REDIS_REPLY_ERROR);
	assert_int_equal(strncmp(rep->str, "NOPERM", 6), 0);
	freeReplyObject(rep);
	rep = cmd(ub, "KEYS *");
	assert_int_equal(rep->type, REDIS_REPLY_ERROR);
	freeReplyObject(rep);
	rep = cmd(ub, "FLUSHALL");
	assert_int_equal(rep->type, REDIS_REPLY_ERROR);
	freeReplyObject(rep);
	rep = cmd(ub, "GET %s", bkey); /* its own prefix: allowed, empty */
	assert_int_equal(rep->type, REDIS_REPLY_NIL);
	freeReplyObject(rep);
	redisFree(ub);
}

/* Domain a configured with domain b's credentials: every command is refused (NOPERM),
 * counted as error replies, and the breaker stays closed (the store is fine). */
static void test_misconfigured_user(void **state)
{
	struct world *w = *state;
	struct kvp_remote_config c = w->cfg;
	struct kvp_remote_stats st;
	struct kvp_remote_done d;
	struct kvp_index_rec rec = rec_of(w, &w->key, 0);

	strcpy(c.domains[0].user, "kvp-b");
	strcpy(c.domains[0].password, "pw-b");
	assert_int_equal(host_up(&w->a, &c, "avx2", fp), 0);
	fill_chain(w, &w->a, 4);
	d = fetch_chain(w, &w->a, 0, &w->key, 4, 0, 0);
	assert_int_equal(d.result, 0);
	assert_int_equal(d.stop, KVP_REMOTE_STOP_ERROR);
	assert_int_equal(kvp_remote_publish(w->a.r, 0, KVP_REMOTE_WHY_CREATED, &rec,
					    kvp_pool_data(w->a.pool, w->a.blocks[0]), 1),
			 0);
	wait_done(w->a.r, KVP_REMOTE_DONE_PUBLISH, 1);
	assert_int_equal(kvp_remote_drain(w->a.r, 5000), 0);
	kvp_remote_stats(w->a.r, 0, &st);
	assert_true(st.error_replies >= 5);
	assert_int_equal(st.publish_errors, 1);
	assert_int_equal(st.state, KVP_BREAKER_CLOSED);
	assert_non_null(strstr(st.last_error, "NOPERM"));
}

/* A wrong password: the first probe fails with the store's words, local-only. */
static void test_wrong_password(void **state)
{
	struct world *w = *state;
	struct kvp_remote_config c = w->cfg;
	struct kvp_pool_config pc = {
		.shape = shape, .n_blocks = 4, .pages = KVP_PAGES_OFF, .name = "kvptest-remote"
	};
	char err[512];

	strcpy(c.domains[1].password, "wrong");
	assert_int_equal(kvp_pool_new(&w->a.pool, &pc), 0);
	assert_int_equal(kvp_remote_new(&w->a.r, &c, &shape, fp, "avx2", err, sizeof(err)), 0);
	assert_int_equal(kvp_remote_wait_ready(w->a.r, 3000, err, sizeof(err)), -EACCES);
	assert_non_null(strstr(err, "domain b"));
	assert_non_null(strstr(err, "WRONGPASS"));
	assert_non_null(strstr(err, "local-only"));
}

/* Tamper with block 5's value in the store, one way at a time: B's fetch stops at
 * block 5 (blocks 0..4 served bit-exact), the failure is counted, nothing wrong served. */
static void test_tampered(void **state)
{
	enum {
		FLIP_KV,
		FLIP_TOKEN,
		FLIP_HDR,
		TRUNCATE,
		EXTEND,
		EMPTY,
		JUNK,
		MISDIRECT,
		FORGE_TOKENS,
		FORGE_SALT,
		FORGE_NUMERICS,
		N_CASES
	};
	struct world *w = *state;
	struct kvp_remote_codec scalar;
	struct kvp_remote_stats st;
	struct kvp_remote_done d;
	struct kvp_prefix_key other;
	char key5[KVP_REMOTE_KEY_MAX], key6[KVP_REMOTE_KEY_MAX];
	size_t vb = w->codec.value_bytes, len;
	uint8_t *orig, *v6, *v;
	uint32_t tok[BT];
	redisReply *rep;

	assert_int_equal(host_up(&w->a, &w->cfg, "avx2", fp), 0);
	fill_chain(w, &w->a, 16);
	publish_chain(w, &w->a, 0, 16);
	assert_int_equal(host_up(&w->b, &w->cfg, "avx2", fp), 0);
	block_key(w, &w->codec, "a", 5, key5);
	block_key(w, &w->codec, "a", 6, key6);
	orig = malloc(vb);
	v6 = malloc(vb);
	v = malloc(vb + 1);
	assert_true(orig && v6 && v);
	rep = cmd(w->admin, "GET %s", key5);
	assert_int_equal(rep->len, vb);
	memcpy(orig, rep->str, vb);
	freeReplyObject(rep);
	rep = cmd(w->admin, "GET %s", key6);
	memcpy(v6, rep->str, vb);
	freeReplyObject(rep);
	assert_int_equal(kvp_remote_codec_init(&scalar, &shape, fp, "scalar"), 0);

	for (int k = 0; k < N_CASES; k++) {
		struct kvp_index_rec rec = rec_of(w, &w->key, 5);
		struct kvp_h128 dig = kvp_remote_digest(&w->codec, w->hash[5], w->key.seed);

		memcpy(v, orig, vb);
		len = vb;
		switch (k) {
		case FLIP_KV:
			v[vb - 100] ^= 0x01;
			break;
		case FLIP_TOKEN:
			v[256] ^= 0x01;
			break;
		case FLIP_HDR:
			v[60] ^= 0x80; /* in the chain hash */
			break;
		case TRUNCATE:
			len = vb - 1;
			break;
		case EXTEND:
			v[vb] = 'x';
			len = vb + 1;
			break;
		case EMPTY:
			len = 0;
			break;
		case JUNK:
			memcpy(v, "hello", 5);
			len = 5;
			break;
		case MISDIRECT:
			memcpy(v, v6, vb);
			break;
		case FORGE_TOKENS: /* sound record, right key, other tokens */
			memcpy(tok, w->tokens + 5 * BT, sizeof(tok));
			tok[3] ^= 1;
			rec.tokens = tok;
			rec.hash = kvp_chain_hash(rec.phash, tok, BT);
			kvp_remote_value_encode(v, &w->codec, dig, &rec,
						kvp_pool_data(w->a.pool, w->a.blocks[5]));
			break;
		case FORGE_SALT: /* sound record, right key, other extra keys */
			make_key(&other, fp, "other-salt");
			rec.key = other;
			kvp_remote_value_encode(v, &w->codec, dig, &rec,
						kvp_pool_data(w->a.pool, w->a.blocks[5]));
			break;
		case FORGE_NUMERICS: /* another numerics class's record under this key */
			kvp_remote_value_encode(v, &scalar,
						kvp_remote_digest(&scalar, w->hash[5], w->key.seed),
						&rec, kvp_pool_data(w->a.pool, w->a.blocks[5]));
			break;
		}
		rep = cmd(w->admin, "SET %s %b KEEPTTL", key5, v, len);
		assert_int_equal(rep->type, REDIS_REPLY_STATUS);
		freeReplyObject(rep);
		d = fetch_chain(w, &w->b, 0, &w->key, 16, 0, 0);
		if (d.result != 5 || d.stop != KVP_REMOTE_STOP_VERIFY)
			fail_msg("case %d: %d blocks, stop %s", k, d.result,
				 kvp_remote_stop_name(d.stop));
		assert_holds(w, &w->b, 5);
	}
	kvp_remote_stats(w->b.r, 0, &st);
	assert_int_equal(st.verify_failures, N_CASES);
	assert_int_equal(st.state, KVP_BREAKER_CLOSED);

	rep = cmd(w->admin, "SET %s %b KEEPTTL", key5, orig, vb);
	freeReplyObject(rep);
	d = fetch_chain(w, &w->b, 0, &w->key, 16, 0, 0);
	assert_int_equal(d.result, 16);
	assert_holds(w, &w->b, 16);
	free(orig);
	free(v6);
	free(v);
}

/*
 * maxmemory 4 MB with allkeys-lru: the store evicts what it chooses, and a fetch serves
 * exactly the leading blocks still there, all bit-exact, stopping cleanly at the first
 * hole wherever it is.  Which keys Redis evicts is not ours to assert: its LRU is
 * sampled (maxmemory-samples), so under load it may evict blocks that were read again;
 * the test finds the holes with EXISTS after evictions are switched off and asserts the
 * fetch against them.  A hole at a known place (DEL) is asserted first, so the stop at
 * a hole is shown even when the store's choice leaves the chain whole.
 */
static uint32_t leading_present(struct world *w, uint32_t n, uint32_t *present)
{
	char key[KVP_REMOTE_KEY_MAX];
	uint32_t lead = 0;

	*present = 0;
	for (uint32_t i = 0; i < n; i++) {
		redisReply *rep;

		block_key(w, &w->codec, "a", i, key);
		rep = cmd(w->admin, "EXISTS %s", key);
		*present += rep->integer == 1;
		lead += rep->integer == 1 && lead == i;
		freeReplyObject(rep);
	}
	return lead;
}

static void test_lru_holes(void **state)
{
	struct world *w = *state;
	struct kvp_remote_stats st;
	struct kvp_remote_done d;
	char key[KVP_REMOTE_KEY_MAX];
	uint32_t present = 0, lead, filler = 0;
	redisReply *rep;
	bool evicted = false;

	assert_int_equal(host_up(&w->a, &w->cfg, "avx2", fp), 0);
	fill_chain(w, &w->a, NCHAIN);
	publish_chain(w, &w->a, 0, 60);

	/* a hole the test makes: block 37 deleted, the fetch stops there */
	block_key(w, &w->codec, "a", 37, key);
	freeReplyObject(cmd(w->admin, "DEL %s", key));
	assert_int_equal(host_up(&w->b, &w->cfg, "avx2", fp), 0);
	d = fetch_chain(w, &w->b, 0, &w->key, 60, 0, 0);
	assert_int_equal(d.result, 37);
	assert_int_equal(d.n_found, 37);
	assert_int_equal(d.stop, KVP_REMOTE_STOP_MISS);
	assert_holds(w, &w->b, 37);
	host_down(&w->b);
	publish_range(w, &w->a, 0, 37, 38); /* whole again */
	assert_int_equal(leading_present(w, 60, &present), 60);

	/* holes the store makes: other blocks (domain b) until it evicted something */
	usleep(1100 * 1000);		    /* Redis's LRU clock ticks once a second */
	for (uint32_t i = 0; i < 30; i++) { /* the first half used again */
		block_key(w, &w->codec, "a", i, key);
		freeReplyObject(cmd(w->admin, "GET %s", key));
	}
	while (!evicted && filler < NCHAIN) {
		publish_range(w, &w->a, 1, filler, filler + 10);
		filler += 10;
		rep = cmd(w->admin, "INFO stats");
		evicted = strstr(rep->str, "evicted_keys:") &&
			  !strstr(rep->str, "evicted_keys:0\r");
		freeReplyObject(rep);
	}
	assert_true(evicted); /* over 5 MB written into 4: the store had to evict */
	/* no more evictions from here on (big replies in flight count as used memory) */
	freeReplyObject(cmd(w->admin, "CONFIG SET maxmemory 0"));
	lead = leading_present(w, 60, &present);
	print_message("lru: %u of 60 blocks left after %u more, leading run %u\n", present, filler,
		      lead);

	assert_int_equal(host_up(&w->b, &w->cfg, "avx2", fp), 0);
	d = fetch_chain(w, &w->b, 0, &w->key, 60, 0, 0);
	assert_int_equal(d.result, lead);
	assert_int_equal(d.n_found, lead);
	assert_int_equal(d.stop, lead < 60 ? KVP_REMOTE_STOP_MISS : KVP_REMOTE_STOP_END);
	assert_holds(w, &w->b, lead);
	kvp_remote_stats(w->b.r, 0, &st);
	assert_int_equal(st.verify_failures, 0);
	assert_int_equal(st.errors, 0);
	assert_int_equal(st.holes, lead < 60);
}

/* A key evicted between the existence check and its GET (a test hook deletes it):
 * the fetch stops there, cleanly. */
static void delete_block7(void *ctx, uint32_t domain, uint32_t n_found)
{
	struct world *w = ctx;
	char key[KVP_REMOTE_KEY_MAX];

	block_key(w, &w->codec, "a", 7, key);
	freeReplyObject(cmd(w->admin, "DEL %s", key));
	(void)domain;
	(void)n_found;
}

static void test_hole_after_exists(void **state)
{
	struct world *w = *state;
	struct kvp_remote_stats st;
	struct kvp_remote_done d;

	assert_int_equal(host_up(&w->a, &w->cfg, "avx2", fp), 0);
	fill_chain(w, &w->a, 16);
	publish_chain(w, &w->a, 0, 16);
	assert_int_equal(host_up(&w->b, &w->cfg, "avx2", fp), 0);
	kvp_remote_debug_set_hook(w->b.r, delete_block7, w);
	d = fetch_chain(w, &w->b, 0, &w->key, 16, 0, 0);
	kvp_remote_debug_set_hook(w->b.r, NULL, NULL);
	assert_int_equal(d.n_found, 16);
	assert_int_equal(d.result, 7);
	assert_int_equal(d.stop, KVP_REMOTE_STOP_MISS);
	assert_holds(w, &w->b, 7);
	/* the lane is usable right after */
	d = fetch_chain(w, &w->b, 0, &w->key, 16, 0, 0);
	assert_int_equal(d.result, 7);
	assert_int_equal(d.n_found, 7);
	kvp_remote_stats(w->b.r, 0, &st);
	assert_int_equal(st.errors, 0);
}

/*
 * The store killed (@sig SIGKILL) or stopped (SIGSTOP) while one host publishes and
 * fetches non-stop: no call waits (each returns in well under an operation timeout),
 * each fetch completes by its deadline, the breaker opens within a second; after a
 * restart (or SIGCONT) it closes again and the chain is served in full.
 */
static void outage(struct world *w, int sig)
{
	struct kvp_remote_config c = w->cfg;
	uint64_t t_fail = 0, t_open = 0, t_back = 0, t_closed = 0, worst_call = 0, worst_late = 0;
	uint32_t fetches_done = 0, refused = 0, inflight = 0, nth = 0;
	struct kvp_remote_stats st;
	struct kvp_remote_done d[64];
	void *dest[16];
	const uint32_t fetch_ms = 400;

	c.op_timeout_ms = 150;
	c.connect_timeout_ms = 100;
	c.breaker_probe_ms = 100;
	c.breaker_probe_max_ms = 200;
	assert_int_equal(host_up(&w->a, &c, "avx2", fp), 0);
	fill_chain(w, &w->a, 32);
	for (int i = 0; i < 16; i++)
		dest[i] = kvp_pool_data(w->a.pool, w->a.blocks[16 + i]);
	publish_chain(w, &w->a, 0, 16);

	for (uint64_t t0 = kvp_test_now_ns(), now = t0; now - t0 < 6000 * MS;
	     now = kvp_test_now_ns()) {
		struct kvp_index_rec rec = rec_of(w, &w->key, nth % 16);
		struct kvp_remote_fetch f = { .tag = nth,
					      .domain = 0,
					      .n_blocks = 16,
					      .key = &w->key,
					      .parent_hash = w->key.seed,
					      .tokens = w->tokens,
					      .dest = dest,
					      .timeout_ms = fetch_ms };
		uint64_t c0;
		int n, r;

		if (!t_fail && now - t0 > 1000 * MS) {
			redisfix_signal(&w->rf, sig);
			t_fail = kvp_test_now_ns();
		}
		if (t_open && !t_back && now - t_open > 800 * MS) {
			if (sig == SIGKILL) {
				assert_int_equal(redisfix_restart(&w->rf), 0);
				readmin(w); /* a restarted store has lost its users */
			} else {
				redisfix_signal(&w->rf, SIGCONT);
			}
			t_back = kvp_test_now_ns();
		}
		c0 = kvp_test_now_ns();
		if (!inflight) {
			r = kvp_remote_fetch(w->a.r, &f);
			assert_true(r == 0 || r == -ENODEV);
			inflight = r == 0;
			refused += r == -ENODEV;
		}
		r = kvp_remote_publish(w->a.r, 0, KVP_REMOTE_WHY_CREATED, &rec,
				       kvp_pool_data(w->a.pool, w->a.blocks[nth % 16]), nth);
		assert_true(r == 0 || r == -ENODEV || r == -ENOBUFS);
		n = kvp_remote_poll(w->a.r, d, 64);
		c0 = kvp_test_now_ns() - c0;
		worst_call = c0 > worst_call ? c0 : worst_call;
		for (int i = 0; i < n; i++) {
			uint64_t late;

			if (d[i].kind != KVP_REMOTE_DONE_FETCH)
				continue;
			inflight = 0;
			fetches_done++;
			late = d[i].elapsed_ns > fetch_ms * MS ? d[i].elapsed_ns - fetch_ms * MS :
								 0;
			worst_late = late > worst_late ? late : worst_late;
		}
		kvp_remote_stats(w->a.r, 0, &st);
		if (t_fail && !t_open && st.state != KVP_BREAKER_CLOSED)
			t_open = kvp_test_now_ns();
		if (t_back && !t_closed && st.state == KVP_BREAKER_CLOSED)
			t_closed = kvp_test_now_ns();
		if (t_closed && kvp_test_now_ns() - t_closed > 300 * MS)
			break;
		nth++;
		usleep(2000);
	}
	print_message("%s: open after %.0f ms, closed %.0f ms after recovery; worst call %.2f "
		      "ms, worst fetch past its deadline %.1f ms; %u fetches, %u refused\n",
		      sig == SIGKILL ? "SIGKILL" : "SIGSTOP", (double)(t_open - t_fail) / 1e6,
		      (double)(t_closed - t_back) / 1e6, (double)worst_call / 1e6,
		      (double)worst_late / 1e6, fetches_done, refused);
	assert_true(t_open && t_open - t_fail <= 1000 * MS);
	assert_true(t_closed);
	assert_true(t_closed - t_back <= 2000 * MS);
	assert_true(refused > 0);
	/* nobody waited on the network: far below one operation timeout (150 ms) */
	assert_true(worst_call < 50 * MS);
	/* fetches end by their deadline, give or take a scheduling slice */
	assert_true(worst_late < 100 * MS);
	/* take every completion still due (the fetch in flight, publishes) */
	assert_int_equal(kvp_remote_drain(w->a.r, 5000), 0);
	while (kvp_remote_poll(w->a.r, d, 64) > 0)
		;
	kvp_remote_stats(w->a.r, 0, &st);
	assert_true(st.breaker_opens >= 1);
	assert_true(st.errors >= c.breaker_errors);

	/* back: after a restart the store is empty; either way, publish and fetch again */
	publish_chain(w, &w->a, 0, 16);
	assert_int_equal(host_up(&w->b, &w->cfg, "avx2", fp), 0);
	assert_int_equal(fetch_chain(w, &w->b, 0, &w->key, 16, 0, 0).result, 16);
	assert_holds(w, &w->b, 16);
}

static void test_store_killed(void **state)
{
	outage(*state, SIGKILL);
}

static void test_store_stopped(void **state)
{
	outage(*state, SIGSTOP);
}

/* No store at start: a clear error naming the store and local-only; fetches are refused
 * and publishes dropped at once; when the store appears, the tier comes up by itself. */
static void test_no_store(void **state)
{
	struct world *w = *state;
	struct kvp_remote_config c;
	struct kvp_remote_stats st;
	struct kvp_remote_done d;
	struct kvp_index_rec rec = rec_of(w, &w->key, 0);
	struct kvp_pool_config pc = { .shape = shape,
				      .n_blocks = POOL_BLOCKS,
				      .pages = KVP_PAGES_OFF,
				      .name = "kvptest-remote" };
	uint32_t blk;
	void *dest[1];
	struct kvp_remote_fetch f = { .n_blocks = 1,
				      .key = &w->key,
				      .parent_hash = w->key.seed,
				      .tokens = w->tokens,
				      .dest = dest };
	char err[512];
	uint64_t t;
	int r;

	redisfix_signal(&w->rf, SIGKILL);
	cfg_make(&c, w->rf.url_unix);
	assert_int_equal(kvp_pool_new(&w->a.pool, &pc), 0);
	assert_int_equal(kvp_pool_alloc(w->a.pool, KVP_NODE_ANY, &blk), 0);
	dest[0] = kvp_pool_data(w->a.pool, blk);
	assert_int_equal(kvp_remote_new(&w->a.r, &c, &shape, fp, "avx2", err, sizeof(err)), 0);
	r = kvp_remote_wait_ready(w->a.r, 3000, err, sizeof(err));
	print_message("no store: %s\n", err);
	assert_true(r == -ECONNREFUSED || r == -ENOENT);
	assert_non_null(strstr(err, "local-only"));
	assert_non_null(strstr(err, w->rf.sock));
	kvp_remote_stats(w->a.r, 0, &st);
	t = st.errors;
	assert_int_equal(kvp_remote_fetch(w->a.r, &f), -ENODEV);
	assert_int_equal(kvp_remote_publish(w->a.r, 0, KVP_REMOTE_WHY_CREATED, &rec, dest[0], 1),
			 -ENODEV);
	/* refused at once: neither one went near the store (no fetch taken, no new error) */
	kvp_remote_stats(w->a.r, 0, &st);
	assert_int_equal(st.fetches, 0);
	assert_int_equal(st.errors, t);
	assert_int_equal(st.connects, 0);
	assert_int_equal(st.fetch_refused, 1);
	assert_int_equal(st.publish_off_drops, 1);
	assert_int_equal(st.state, KVP_BREAKER_OPEN);

	/* and no listener at all on a TCP port */
	{
		struct host h2;
		struct kvp_remote_config c2;
		char url[64];

		snprintf(url, sizeof(url), "redis://127.0.0.1:%u", w->rf.port);
		cfg_make(&c2, url);
		memset(&h2, 0, sizeof(h2));
		assert_int_equal(kvp_remote_new(&h2.r, &c2, &shape, fp, "avx2", err, sizeof(err)),
				 0);
		assert_int_equal(kvp_remote_wait_ready(h2.r, 3000, err, sizeof(err)),
				 -ECONNREFUSED);
		kvp_remote_free(h2.r);
	}

	assert_int_equal(redisfix_restart(&w->rf), 0);
	readmin(w);
	for (t = kvp_test_now_ns(); kvp_test_now_ns() - t < 3000 * MS; usleep(10000)) {
		kvp_remote_stats(w->a.r, 0, &st);
		if (st.state == KVP_BREAKER_CLOSED)
			break;
	}
	assert_int_equal(st.state, KVP_BREAKER_CLOSED);
	assert_int_equal(kvp_remote_publish(w->a.r, 0, KVP_REMOTE_WHY_CREATED, &rec, dest[0], 1),
			 0);
	wait_done(w->a.r, KVP_REMOTE_DONE_PUBLISH, 1);
	/* the completion says the K/V was taken; drain waits for the store's answer */
	assert_int_equal(kvp_remote_drain(w->a.r, 5000), 0);
	assert_int_equal(kvp_remote_fetch(w->a.r, &f), 0);
	d = wait_done(w->a.r, KVP_REMOTE_DONE_FETCH, 1);
	assert_int_equal(d.result, 1);
}

/* Bounded queues: publishes beyond queue_blocks are dropped and counted, fetches beyond
 * fetch_queue refused, none waits; the queued ones complete. */
static void test_queue_bounds(void **state)
{
	struct world *w = *state;
	struct kvp_remote_config c = w->cfg;
	struct kvp_remote_stats st;
	void *dest[16];
	struct kvp_remote_fetch f = { .n_blocks = 16,
				      .key = &w->key,
				      .parent_hash = w->key.seed,
				      .tokens = w->tokens,
				      .dest = dest };
	int ok = 0, drop = 0;

	c.queue_blocks = 4;
	c.fetch_queue = 2;
	assert_int_equal(host_up(&w->a, &c, "avx2", fp), 0);
	fill_chain(w, &w->a, 32);
	for (int i = 0; i < 16; i++)
		dest[i] = kvp_pool_data(w->a.pool, w->a.blocks[16 + i]);
	for (uint32_t i = 0; i < 50; i++) {
		struct kvp_index_rec rec = rec_of(w, &w->key, i % 16);
		int r = kvp_remote_publish(w->a.r, 0, KVP_REMOTE_WHY_CREATED, &rec,
					   kvp_pool_data(w->a.pool, w->a.blocks[i % 16]), i);

		ok += r == 0;
		drop += r == -ENOBUFS;
	}
	assert_int_equal(ok, 4);
	assert_int_equal(drop, 46);
	assert_int_equal(kvp_remote_fetch(w->a.r, &f), 0);
	assert_int_equal(kvp_remote_fetch(w->a.r, &f), 0);
	assert_int_equal(kvp_remote_fetch(w->a.r, &f), -EBUSY);
	wait_both(w->a.r, 4, 2);
	assert_int_equal(kvp_remote_drain(w->a.r, 5000), 0);
	kvp_remote_stats(w->a.r, 0, &st);
	assert_int_equal(st.publish_drops, 46);
	assert_int_equal(st.fetch_busy, 1);
	assert_int_equal(st.stored, 4);
}

/* Selective mode publishes blocks reused or evicted, not every created one. */
static void test_selective(void **state)
{
	struct world *w = *state;
	struct kvp_remote_config c = w->cfg;
	struct kvp_remote_stats st;
	struct kvp_index_rec r0 = rec_of(w, &w->key, 0), r1 = rec_of(w, &w->key, 1);

	c.publish = KVP_REMOTE_PUBLISH_SELECTIVE;
	assert_int_equal(host_up(&w->a, &c, "avx2", fp), 0);
	fill_chain(w, &w->a, 2);
	assert_int_equal(kvp_remote_publish(w->a.r, 0, KVP_REMOTE_WHY_CREATED, &r0,
					    kvp_pool_data(w->a.pool, w->a.blocks[0]), 0),
			 1);
	assert_int_equal(kvp_remote_publish(w->a.r, 0, KVP_REMOTE_WHY_REUSED, &r0,
					    kvp_pool_data(w->a.pool, w->a.blocks[0]), 0),
			 0);
	assert_int_equal(kvp_remote_publish(w->a.r, 0, KVP_REMOTE_WHY_EVICTED, &r1,
					    kvp_pool_data(w->a.pool, w->a.blocks[1]), 1),
			 0);
	wait_done(w->a.r, KVP_REMOTE_DONE_PUBLISH, 2);
	assert_int_equal(kvp_remote_drain(w->a.r, 5000), 0);
	kvp_remote_stats(w->a.r, 0, &st);
	assert_int_equal(st.publish_skipped, 1);
	assert_int_equal(st.stored, 2);
}

/* The cost check: with a prefill faster than the transfer, nothing is fetched; with a
 * slow one, everything.  A deadline too short cuts the fetch without counting an error. */
static void test_cost_and_deadline(void **state)
{
	struct world *w = *state;
	struct kvp_remote_stats st;
	struct kvp_remote_done d;

	assert_int_equal(host_up(&w->a, &w->cfg, "avx2", fp), 0);
	fill_chain(w, &w->a, 64);
	publish_chain(w, &w->a, 0, 64);
	assert_int_equal(host_up(&w->b, &w->cfg, "avx2", fp), 0);
	d = fetch_chain(w, &w->b, 0, &w->key, 64, 1e12, 0);
	assert_int_equal(d.result, 0);
	assert_int_equal(d.n_found, 64);
	assert_int_equal(d.stop, KVP_REMOTE_STOP_COST);
	d = fetch_chain(w, &w->b, 0, &w->key, 64, 10, 0);
	assert_int_equal(d.result, 64);
	assert_holds(w, &w->b, 64);
	d = fetch_chain(w, &w->b, 0, &w->key, 64, 0, 1);
	assert_true(d.result < 64);
	assert_int_equal(d.stop, KVP_REMOTE_STOP_DEADLINE);
	assert_holds(w, &w->b, (uint32_t)d.result);
	kvp_remote_stats(w->b.r, 0, &st);
	assert_int_equal(st.cost_skips, 1);
	assert_true(st.deadline_cuts >= 1);
	assert_int_equal(st.errors, 0);
	assert_int_equal(st.state, KVP_BREAKER_CLOSED);
	/* and the next fetch is whole */
	d = fetch_chain(w, &w->b, 0, &w->key, 64, 0, 0);
	assert_int_equal(d.result, 64);
}

/* The chain summary: stored under the domain with its TTL, read back and asked for the
 * longest prefix; the router user may read summaries and nothing else. */
static void test_route_summary(void **state)
{
	struct world *w = *state;
	struct kvp_bloom *b, *got;
	struct kvp_remote_stats st;
	struct kvp_h128 prompt[40];
	char line[256], err[256], key[KVP_REMOTE_KEY_MAX];
	redisContext *router;
	redisReply *rep;

	assert_int_equal(host_up(&w->a, &w->cfg, "avx2", fp), 0);
	assert_int_equal(kvp_bloom_new(&b, 1000, 0.001), 0);
	for (int i = 0; i < 30; i++)
		kvp_bloom_add(b, w->hash[i]);
	assert_int_equal(kvp_remote_route_publish(w->a.r, 0, "host-a", b, 60), 0);
	assert_int_equal(kvp_remote_route_publish(w->a.r, 0, "bad:host", b, 60), -EINVAL);
	assert_int_equal(kvp_remote_drain(w->a.r, 5000), 0);
	kvp_remote_stats(w->a.r, 0, &st);
	assert_int_equal(st.route_published, 1);

	assert_true(kvp_remote_acl_router(line, sizeof(line), "router", "pw-r",
					  KVP_REMOTE_ACL_COMMAND) > 0);
	assert_int_equal(redisfix_line(w->admin, line, err, sizeof(err)), 0);
	router = redisfix_admin(&w->rf);
	rep = cmd(router, "AUTH router pw-r");
	assert_int_equal(rep->type, REDIS_REPLY_STATUS);
	freeReplyObject(rep);
	rep = cmd(router, "GET kvp1:a:r:host-a");
	assert_int_equal(rep->type, REDIS_REPLY_STRING);
	assert_int_equal(kvp_bloom_decode(&got, (const uint8_t *)rep->str, rep->len,
					  (uint64_t)time(NULL)),
			 0);
	freeReplyObject(rep);
	for (int i = 0; i < 40; i++)
		prompt[i] = w->hash[i];
	assert_int_equal(kvp_bloom_prefix(got, prompt, 40), 30);
	kvp_bloom_free(got);
	rep = cmd(w->admin, "TTL kvp1:a:r:host-a");
	assert_true(rep->integer > 0 && rep->integer <= 60);
	freeReplyObject(rep);
	block_key(w, &w->codec, "a", 0, key);
	rep = cmd(router, "GET %s", key);
	assert_int_equal(rep->type, REDIS_REPLY_ERROR);
	freeReplyObject(rep);
	rep = cmd(router, "SET kvp1:a:r:host-a x");
	assert_int_equal(rep->type, REDIS_REPLY_ERROR);
	freeReplyObject(rep);
	redisFree(router);
	kvp_bloom_free(b);
}

/* ---- a store that misbehaves on purpose (raw RESP written by hand: it is the
 * hostile peer here, not the client) ---- */

struct fake {
	char path[108];
	int lfd;
	int array; /* answer EXISTS with a huge array header, else GET with a huge bulk */
	pthread_t thread;
};

static void send_all(int fd, const void *p, size_t n)
{
	(void)!send(fd, p, n, MSG_NOSIGNAL);
}

static void *fake_main(void *arg)
{
	struct fake *fk = arg;
	static char zeros[65536];
	char buf[65536];
	int c = accept(fk->lfd, NULL, NULL);
	bool hs = false;

	while (c >= 0) {
		ssize_t n = read(c, buf, sizeof(buf));

		if (n <= 0)
			break;
		if (!hs && memmem(buf, (size_t)n, "PING", 4)) {
			send_all(c, "+OK\r\n+PONG\r\n", 12);
			hs = true;
		} else if (memmem(buf, (size_t)n, "EXISTS", 6)) {
			if (fk->array)
				send_all(c, "*2000000000\r\n", 13);
			else
				send_all(c, ":1\r\n:1\r\n", 8);
		} else if (memmem(buf, (size_t)n, "GET", 3)) {
			send_all(c, "$400000000\r\n", 12);
			for (int i = 0; i < 1024; i++) /* 64 MB at most, until the tier hangs up */
				if (send(c, zeros, sizeof(zeros), MSG_NOSIGNAL) < 0)
					break;
		}
	}
	if (c >= 0)
		close(c);
	return NULL;
}

static void fake_start(struct fake *fk, const char *dir, int array)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };

	assert_true(snprintf(fk->path, sizeof(fk->path), "%s/fake.sock", dir) < 100);
	unlink(fk->path);
	strcpy(a.sun_path, fk->path);
	fk->array = array;
	fk->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fk->lfd >= 0);
	assert_int_equal(bind(fk->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(fk->lfd, 4), 0);
	assert_int_equal(pthread_create(&fk->thread, NULL, fake_main, fk), 0);
}

/* A store that answers with a bulk string far larger than any record, or with an array
 * header of two billion elements: the connection is dropped (bounded memory, no huge
 * allocation), the fetch ends with an error, nothing is served. */
static void test_hostile_store(void **state)
{
	struct world *w = *state;

	for (int array = 0; array < 2; array++) {
		struct kvp_remote_config c;
		struct kvp_remote_stats st;
		struct kvp_remote_done d;
		struct fake fk;
		char url[128], err[256];
		uint32_t id;

		fake_start(&fk, w->rf.dir, array);
		snprintf(url, sizeof(url), "unix:%s", fk.path);
		kvp_remote_config_defaults(&c);
		assert_int_equal(kvp_remote_config_set(&c, "url", url, err, sizeof(err)), 0);
		assert_int_equal(kvp_remote_config_add_domain(&c, &id, "a", "kvp-a", "pw-a", err,
							      sizeof(err)),
				 0);
		assert_int_equal(host_up(&w->b, &c, "avx2", fp), 0);
		d = fetch_chain(w, &w->b, 0, &w->key, 2, 0, 0);
		assert_int_equal(d.result, 0);
		assert_int_equal(d.stop, KVP_REMOTE_STOP_ERROR);
		kvp_remote_stats(w->b.r, 0, &st);
		print_message("%s: %s\n", array ? "array" : "bulk", st.last_error);
		assert_non_null(strstr(st.last_error, array ? "protocol error" : "larger than"));
		assert_int_equal(st.hit_blocks, 0);
		host_down(&w->b);
		pthread_join(fk.thread, NULL);
		close(fk.lfd);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_two_hosts, setup, teardown),
		cmocka_unit_test_setup_teardown(test_isolation, setup, teardown),
		cmocka_unit_test_setup_teardown(test_misconfigured_user, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wrong_password, setup, teardown),
		cmocka_unit_test_setup_teardown(test_tampered, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lru_holes, setup_lru, teardown),
		cmocka_unit_test_setup_teardown(test_hole_after_exists, setup, teardown),
		cmocka_unit_test_setup_teardown(test_store_killed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_store_stopped, setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_store, setup, teardown),
		cmocka_unit_test_setup_teardown(test_queue_bounds, setup, teardown),
		cmocka_unit_test_setup_teardown(test_selective, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cost_and_deadline, setup, teardown),
		cmocka_unit_test_setup_teardown(test_route_summary, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hostile_store, setup, teardown),
	};

	kvp_remote_tune_malloc(); /* as kvpoold does at start-up */
	signal(SIGPIPE, SIG_IGN); /* the admin connection writes with write(2) too */
	return cmocka_run_group_tests(tests, NULL, NULL);
}
