/* SPDX-License-Identifier: MIT */
/*
 * test_spec_daemon.c - speculative decoding in kvpoold (issue 28): two real daemons on
 * the same quantized file (rows exact: svc/engine/spec.c drafts there), one speculating
 * (scheduler.speculative = yes, the default), one not (no), get the same requests through
 * the client library: seeded prompts, repetitive (drafts found and mostly kept) and not
 * (drafts rare and mostly rejected), first past the cache, then through it, then each
 * prompt continued on its own reply (the reply's published blocks are read back: a
 * rejected draft's K/V published there would change what follows), then four at once
 * (drafts in batches, next to prefill chunks).  Every greedy reply is the same token
 * for token; the speculating daemon verified and kept drafts and rejected some; after
 * the same requests both pools hold the same blocks (used, cached, index entries,
 * evictions) and no request is left holding one.  Per request, the GENERATE flags turn it
 * off (nothing drafted) or on, with the same reply, and the DONE says what was drafted
 * and accepted; so does kvpool-http's usage for its "speculative" field.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "compute/mkmodel.h"
#include "tests/integration/httpc.h"
#include "tests/integration/httpd.h"
#include "tests/integration/jsonq.h"
#include "tests/integration/kvpd.h"

#define N_REQ 16
#define N_GEN 48
#define MAX_PROMPT 160
#define N_CONC 4

struct fix {
	struct kvpd on, off;
};

struct prompt {
	int32_t ids[MAX_PROMPT + KVPD_GEN_MAX];
	uint32_t n;
};

static uint32_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return (uint32_t)(*s >> 16);
}

/* Prompt @i: even ones repeat a short random pattern (with an edit), odd ones are random. */
static void make_prompt(struct prompt *p, uint32_t i, uint32_t n_vocab)
{
	uint64_t s = 0x9e3779b97f4a7c15ull * (i + 1);
	uint32_t len = 24 + rnd(&s) % (MAX_PROMPT - 24);
	int32_t pat[32];
	uint32_t plen = 4 + rnd(&s) % 28;

	for (uint32_t k = 0; k < plen; k++)
		pat[k] = (int32_t)(3 + rnd(&s) % (n_vocab - 3));
	for (uint32_t k = 0; k < len; k++)
		p->ids[k] = i % 2 ? (int32_t)(3 + rnd(&s) % (n_vocab - 3)) : pat[k % plen];
	if (i % 2 == 0)
		p->ids[len / 2] = (int32_t)(3 + rnd(&s) % (n_vocab - 3));
	p->n = len;
}

/*
 * kvpoold on @model, drafting or not; the step costs given, not measured, so that what
 * is drafted depends on the requests alone (the cost model then prices the draft rows
 * the same in every run: the counts below cannot move with the machine's load).
 */
static int start(struct kvpd *d, const char *model, bool spec)
{
	const char *args[] = { "--model", model, "--pool-size", "32M", "--ignore-eos",
			       "--cost-call-us=1000", "--cost-token-us=10",
			       /* speculating: the default, no flag */
			       spec ? NULL : "--speculative=no", NULL };

	if (kvpd_start(d, 120, args) < 0) {
		kvpd_dump_log(d);
		return -1;
	}
	return 0;
}

static int setup(void **state)
{
	struct fix *f = calloc(1, sizeof(*f));
	struct kvp_mkmodel_opts o;
	char model[512];

	if (!f || kvpd_init(&f->off) < 0)
		return -1;
	if (kvp_mkmodel_preset(&o, "tinyq") < 0)
		return -1;
	o.type = (uint32_t)kvp_mkmodel_type_parse("q8_0");
	snprintf(model, sizeof(model), "%s/tinyq-q8_0.gguf", f->off.dir);
	if (kvp_mkmodel_write(model, &o, NULL, 0) < 0)
		return -1;
	/* the model file lives in off's directory */
	if (kvpd_init(&f->on) < 0 || start(&f->on, model, true) < 0 ||
	    start(&f->off, model, false) < 0)
		return -1;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fix *f = *state;

	kvpd_cleanup(&f->on);
	kvpd_cleanup(&f->off);
	free(f);
	return 0;
}

static void same_reply(struct kvpd *on, struct kvpd *off, const struct prompt *p, bool no_cache,
		       struct kvpd_gen *a)
{
	struct kvpd_gen b;

	assert_int_equal(kvpd_generate(on->sock, p->ids, p->n, N_GEN, no_cache, a), 0);
	assert_int_equal(kvpd_generate(off->sock, p->ids, p->n, N_GEN, no_cache, &b), 0);
	assert_int_equal(a->n, N_GEN);
	assert_int_equal(b.n, N_GEN);
	assert_memory_equal(a->ids, b.ids, sizeof(a->ids));
	assert_int_equal(a->u.generated_tokens, b.u.generated_tokens);
	assert_int_equal(a->u.cached_tokens, b.u.cached_tokens);
}

struct conc {
	const char *sock;
	const struct prompt *p;
	struct kvpd_gen g;
};

static void *conc_run(void *arg)
{
	struct conc *c = arg;

	kvpd_generate(c->sock, c->p->ids, c->p->n, N_GEN, true, &c->g);
	return NULL;
}

static void test_greedy_same(void **state)
{
	struct fix *f = *state;
	static struct prompt p[N_REQ];
	struct kvpd_gen a;
	uint32_t n_vocab = 256;
	const char *keys[] = { "pool.blocks_used", "pool.blocks_cached", "index.entries",
			       "index.evictions" };
	double drafted, accepted;

	assert_true(kvpd_log_has(&f->on, "speculative decoding on"));
	assert_false(kvpd_log_has(&f->off, "speculative decoding on"));
	for (uint32_t i = 0; i < N_REQ; i++)
		make_prompt(&p[i], i, n_vocab);
	/* past the cache, then through it (publishing prompt and reply blocks) */
	for (uint32_t i = 0; i < N_REQ; i++)
		same_reply(&f->on, &f->off, &p[i], true, &a);
	for (uint32_t i = 0; i < N_REQ; i++) {
		same_reply(&f->on, &f->off, &p[i], false, &a);
		/* continued on its own reply: the reply's full blocks are read back */
		memcpy(p[i].ids + p[i].n, a.ids, N_GEN * sizeof(int32_t));
		p[i].n += N_GEN;
	}
	for (uint32_t i = 0; i < N_REQ; i++) {
		same_reply(&f->on, &f->off, &p[i], false, &a);
		assert_true(a.u.cached_tokens >= (p[i].n - 1) / 16 * 16 - 16);
	}
	/* batches: N_CONC at once on the speculating daemon, against off's replies alone */
	for (uint32_t i = 0; i + N_CONC <= N_REQ; i += N_CONC) {
		struct conc c[N_CONC];
		pthread_t t[N_CONC];

		for (uint32_t k = 0; k < N_CONC; k++) {
			c[k] = (struct conc){ .sock = f->on.sock, .p = &p[i + k] };
			assert_int_equal(pthread_create(&t[k], NULL, conc_run, &c[k]), 0);
		}
		for (uint32_t k = 0; k < N_CONC; k++) {
			struct kvpd_gen b;

			pthread_join(t[k], NULL);
			assert_int_equal(c[k].g.rc, 0);
			assert_int_equal(kvpd_generate(f->off.sock, p[i + k].ids, p[i + k].n, N_GEN,
						       true, &b),
					 0);
			assert_memory_equal(c[k].g.ids, b.ids, sizeof(b.ids));
		}
	}
	drafted = kvpd_status_num(&f->on, "scheduler.spec_drafted", -1);
	accepted = kvpd_status_num(&f->on, "scheduler.spec_accepted", -1);
	print_message("drafted %.0f accepted %.0f\n", drafted, accepted);
	assert_true(accepted > 0);
	assert_true(drafted > accepted); /* some were rejected, and rolled back */
	assert_true(kvpd_status_num(&f->off, "scheduler.spec_drafted", -1) == 0);
	/* the same blocks held, cached and indexed after the same requests */
	for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
		double x = kvpd_status_num(&f->on, keys[k], -1),
		       y = kvpd_status_num(&f->off, keys[k], -2);

		print_message("%s: %.0f %.0f\n", keys[k], x, y);
		assert_true(x == y);
	}
	assert_true(kvpd_status_num(&f->on, "pool.blocks_used", -1) == 0);
}

static int collect(void *arg, const int32_t *t, uint32_t n, const char *text, uint32_t tl)
{
	struct kvpd_gen *o = arg;

	(void)text, (void)tl;
	for (uint32_t i = 0; i < n && o->n < KVPD_GEN_MAX; i++)
		o->ids[o->n++] = t[i];
	return 0;
}

/*
 * @p's greedy reply from @sock, asking speculative @mode (KVP_SPECULATIVE_*); *@su the
 * DONE's drafted and accepted tokens, all ones when it carried none.
 */
static int gen_sampled(const char *sock, const struct prompt *p, uint32_t mode, float temp,
		       uint64_t seed, struct kvpd_gen *o, struct kvp_spec_usage *su);

static int gen_mode(const char *sock, const struct prompt *p, uint32_t mode, struct kvpd_gen *o,
		    struct kvp_spec_usage *su)
{
	return gen_sampled(sock, p, mode, 0.0f, 0, o, su);
}

/* As gen_mode(), sampling at @temp (0: greedy) with @seed. */
static int gen_sampled(const char *sock, const struct prompt *p, uint32_t mode, float temp,
		       uint64_t seed, struct kvpd_gen *o, struct kvp_spec_usage *su)
{
	struct kvp_client_prompt pr = { .tokens = p->ids, .n_tokens = p->n };
	struct kvp_client_params cp;
	struct kvp_client *k = NULL;
	int r;

	memset(o, 0, sizeof(*o));
	kvp_client_params_init(&cp);
	cp.max_new_tokens = N_GEN;
	cp.no_cache = true;
	cp.speculative = mode;
	cp.temperature = temp;
	cp.top_p = temp > 0 ? 0.95f : 1.0f;
	cp.seed = seed;
	r = kvp_client_connect(&k, sock);
	if (!r)
		r = kvp_client_generate(k, &pr, &cp, collect, o, &o->u);
	*su = (struct kvp_spec_usage){ UINT32_MAX, UINT32_MAX };
	if (!r)
		kvp_client_event_spec(k, su);
	kvp_client_close(k);
	return r;
}

/*
 * The GENERATE flags: off drafts nothing, on and the default the same reply.  The DONE
 * of a request that named on or off says what it drafted and kept (KVP_GEN_SPEC_USAGE):
 * exactly what the daemon's counters moved by; the default's carries nothing.
 */
static void test_per_request(void **state)
{
	struct fix *f = *state;
	struct prompt p;
	struct kvpd_gen a, b, c;
	struct kvp_spec_usage sa, sb, sc;
	double d0, d1, d2, k1, k2;

	make_prompt(&p, 2, 256);
	d0 = kvpd_status_num(&f->on, "scheduler.spec_drafted", -1);
	assert_int_equal(gen_mode(f->on.sock, &p, KVP_SPECULATIVE_OFF, &a, &sa), 0);
	d1 = kvpd_status_num(&f->on, "scheduler.spec_drafted", -1);
	k1 = kvpd_status_num(&f->on, "scheduler.spec_accepted", -1);
	assert_true(d1 == d0);
	assert_int_equal(sa.drafted, 0);
	assert_int_equal(sa.accepted, 0);
	assert_int_equal(gen_mode(f->on.sock, &p, KVP_SPECULATIVE_ON, &b, &sb), 0);
	d2 = kvpd_status_num(&f->on, "scheduler.spec_drafted", -1);
	k2 = kvpd_status_num(&f->on, "scheduler.spec_accepted", -1);
	assert_true(d2 > d1);
	print_message("repetitive prompt, on: drafted %u accepted %u\n", sb.drafted, sb.accepted);
	/* a repetitive prompt: drafts found and some kept, never more kept than drafted */
	assert_true(sb.drafted > 0);
	assert_true(sb.accepted > 0);
	assert_true(sb.accepted <= sb.drafted);
	assert_true(sb.drafted == d2 - d1);
	assert_true(sb.accepted == k2 - k1);
	/* every token is either a step's own or an accepted draft: fewer steps than tokens */
	assert_true(sb.accepted < N_GEN);
	assert_int_equal(gen_mode(f->on.sock, &p, KVP_SPECULATIVE_DEFAULT, &c, &sc), 0);
	assert_true(kvpd_status_num(&f->on, "scheduler.spec_drafted", -1) > d2);
	assert_int_equal(sc.drafted, UINT32_MAX); /* not asked: not sent */
	assert_int_equal(a.n, N_GEN);
	assert_memory_equal(a.ids, b.ids, sizeof(a.ids));
	assert_memory_equal(a.ids, c.ids, sizeof(a.ids));
	/* a daemon configured off never drafts, whatever the request asks, and says so */
	d0 = kvpd_status_num(&f->off, "scheduler.spec_drafted", -1);
	assert_int_equal(gen_mode(f->off.sock, &p, KVP_SPECULATIVE_ON, &b, &sb), 0);
	assert_memory_equal(a.ids, b.ids, sizeof(a.ids));
	assert_true(kvpd_status_num(&f->off, "scheduler.spec_drafted", -1) == d0);
	assert_int_equal(sb.drafted, 0);
	assert_int_equal(sb.accepted, 0);
	/*
	 * n = 2 continuations (greedy: both the same reply): the group's one DONE carries
	 * the figures, summed over both, which the daemon's counters moved by
	 */
	{
		struct kvp_client_prompt pr = { .tokens = p.ids, .n_tokens = p.n };
		struct kvp_cache_ctl cc = { .n = 2 };
		struct kvp_client_params cp;
		struct kvp_client *k = NULL;
		struct kvpd_gen g = { 0 };
		struct kvp_spec_usage su = { UINT32_MAX, UINT32_MAX };

		d1 = kvpd_status_num(&f->on, "scheduler.spec_drafted", -1);
		k1 = kvpd_status_num(&f->on, "scheduler.spec_accepted", -1);
		kvp_client_params_init(&cp);
		cp.max_new_tokens = N_GEN;
		cp.no_cache = true;
		cp.speculative = KVP_SPECULATIVE_ON;
		assert_int_equal(kvp_client_connect(&k, f->on.sock), 0);
		assert_int_equal(kvp_client_set_cache(k, &cc), 0);
		assert_int_equal(kvp_client_generate(k, &pr, &cp, collect, &g, &g.u), 0);
		assert_int_equal(kvp_client_event_spec(k, &su), 1);
		kvp_client_close(k);
		d2 = kvpd_status_num(&f->on, "scheduler.spec_drafted", -1);
		k2 = kvpd_status_num(&f->on, "scheduler.spec_accepted", -1);
		print_message("n = 2: drafted %u accepted %u\n", su.drafted, su.accepted);
		assert_int_equal(g.u.generated_tokens, 2 * N_GEN);
		assert_true(su.drafted == d2 - d1);
		assert_true(su.accepted == k2 - k1);
		assert_true(su.accepted <= su.drafted);
	}
}

#define N_SEEDS 24
#define CHI_BUCKETS 16

/*
 * Sampling (temperature 0.7, top_p 0.95) with speculation asked for: drafts are
 * verified by the sequence's own draws (svc/engine/spec.c), kept where the draw equals
 * the draft; over seeded requests on a repetitive and a random prompt some drafts are
 * kept and some rejected, every reply is the same tokens as without speculation with
 * that seed, and so the tokens' distribution is the same: a chi-square homogeneity test
 * of their ids (16 buckets) on and off stays below the 0.999 quantile.  The daemon's
 * default does not draft for sampled requests.
 */
static void test_sampled(void **state)
{
	struct fix *f = *state;
	static uint32_t cnt[2][CHI_BUCKETS];
	uint64_t drafted = 0, accepted = 0;
	double chi = 0, d0;

	memset(cnt, 0, sizeof(cnt));
	for (uint32_t s = 0; s < N_SEEDS; s++) {
		struct prompt p;
		struct kvpd_gen a, b;
		struct kvp_spec_usage sa, sb;

		make_prompt(&p, s % 4, 256); /* 0, 2: repetitive; 1, 3: random */
		assert_int_equal(gen_sampled(f->on.sock, &p, KVP_SPECULATIVE_OFF, 0.7f, 1000 + s,
					     &a, &sa),
				 0);
		assert_int_equal(gen_sampled(f->on.sock, &p, KVP_SPECULATIVE_ON, 0.7f, 1000 + s, &b,
					     &sb),
				 0);
		assert_int_equal(a.n, N_GEN);
		assert_int_equal(b.n, N_GEN);
		assert_memory_equal(a.ids, b.ids, sizeof(a.ids));
		assert_int_equal(sa.drafted, 0);
		assert_true(sb.accepted <= sb.drafted);
		drafted += sb.drafted;
		accepted += sb.accepted;
		for (uint32_t i = 0; i < N_GEN; i++) {
			cnt[0][a.ids[i] % CHI_BUCKETS]++;
			cnt[1][b.ids[i] % CHI_BUCKETS]++;
		}
	}
	/* two samples of equal size: sum over buckets of (x - y)^2 / (x + y) */
	for (uint32_t k = 0; k < CHI_BUCKETS; k++)
		if (cnt[0][k] + cnt[1][k])
			chi += ((double)cnt[0][k] - cnt[1][k]) * ((double)cnt[0][k] - cnt[1][k]) /
			       ((double)cnt[0][k] + cnt[1][k]);
	print_message("sampled: drafted %llu accepted %llu, chi-square %.3f (15 df)\n",
		      (unsigned long long)drafted, (unsigned long long)accepted, chi);
	assert_true(accepted > 0);	 /* draws that equalled their draft */
	assert_true(drafted > accepted); /* and ones that did not: the rejection path ran */
	assert_true(chi < 37.70);	 /* chi-square(15) 0.999 quantile */
	/* without asking, a sampled request does not draft (the default is for greedy) */
	{
		struct prompt p;
		struct kvpd_gen c;
		struct kvp_spec_usage sc;

		make_prompt(&p, 0, 256);
		d0 = kvpd_status_num(&f->on, "scheduler.spec_drafted", -1);
		assert_int_equal(gen_sampled(f->on.sock, &p, KVP_SPECULATIVE_DEFAULT, 0.7f, 7, &c,
					     &sc),
				 0);
		assert_true(kvpd_status_num(&f->on, "scheduler.spec_drafted", -1) == d0);
	}
}

/*
 * POST @p's greedy completion with @spec ("true", "false" or NULL: no field) to @port:
 * its token ids into @o, the usage's kvpool.drafted_tokens / accepted_tokens into
 * @drafted / @accepted (-1: absent).
 */
static void http_complete(int port, const struct prompt *p, const char *spec, struct kvpd_gen *o,
			  double *drafted, double *accepted)
{
	char body[MAX_PROMPT * 12 + 256];
	struct httpc_resp r;
	struct jsonq *j;
	const struct jsonq *a;
	size_t off;

	memset(o, 0, sizeof(*o));
	off = (size_t)sprintf(body, "{\"prompt\":[");
	for (uint32_t i = 0; i < p->n; i++)
		off += (size_t)sprintf(body + off, "%s%d", i ? "," : "", p->ids[i]);
	off += (size_t)sprintf(body + off,
			       "],\"max_tokens\":%d,\"temperature\":0,\"return_token_ids\":true",
			       N_GEN);
	if (spec)
		off += (size_t)sprintf(body + off, ",\"speculative\":%s", spec);
	sprintf(body + off, "}");
	assert_int_equal(httpc_request(port, "POST", "/v1/completions", NULL, body, &r), 0);
	if (r.status != 200)
		fail_msg("completion: HTTP %d: %s", r.status, r.body);
	j = jsonq_parse(r.body, r.body_len);
	assert_non_null(j);
	a = jsonq_get(j, "choices.0.token_ids");
	assert_non_null(a);
	for (const struct jsonq *e = a->child; e && o->n < KVPD_GEN_MAX; e = e->next)
		o->ids[o->n++] = (int32_t)e->num;
	*drafted = jsonq_num(j, "usage.kvpool.drafted_tokens", -1);
	*accepted = jsonq_num(j, "usage.kvpool.accepted_tokens", -1);
	jsonq_free(j);
	httpc_resp_free(&r);
}

/*
 * kvpool-http in front of the speculating daemon: "speculative": true drafts (a
 * repetitive prompt: some kept, never more than drafted), false drafts nothing, both
 * say so in usage.kvpool; without the field nothing is said; the tokens are the same.
 */
static void test_http(void **state)
{
	struct fix *f = *state;
	const char *hargs[] = { "--config", "/dev/null", "--listen", "127.0.0.1:0", NULL };
	struct httpd hd = { 0 };
	struct prompt p;
	struct kvpd_gen a, b, c;
	double da, ka, db, kb, dc, kc;

	if (httpd_start(&hd, f->on.dir, f->on.sock, hargs, 30) || !hd.port) {
		httpd_dump_log(&hd);
		fail_msg("kvpool-http did not start");
	}
	make_prompt(&p, 4, 256);
	http_complete(hd.port, &p, "false", &a, &da, &ka);
	http_complete(hd.port, &p, "true", &b, &db, &kb);
	http_complete(hd.port, &p, NULL, &c, &dc, &kc);
	print_message("http: off %.0f/%.0f, on %.0f/%.0f\n", ka, da, kb, db);
	assert_int_equal(a.n, N_GEN);
	assert_int_equal(b.n, N_GEN);
	assert_memory_equal(a.ids, b.ids, sizeof(a.ids));
	assert_memory_equal(a.ids, c.ids, sizeof(a.ids));
	assert_true(da == 0 && ka == 0);
	assert_true(db > 0 && kb > 0 && kb <= db);
	assert_true(dc == -1 && kc == -1);
	assert_int_equal(httpd_stop_clean(&hd), 0);
}

/*
 * scheduler.speculative_draft_max: a daemon that may draft one token a step verifies at
 * most one draft row next to each decode row, and gives the same tokens; the default (8)
 * drafts more rows than decode rows on the repeating prompts
 */
static void test_draft_max(void **state)
{
	struct fix *f = *state;
	struct kvpd one;
	char model[512];
	const char *args[] = { "--model",
			       model,
			       "--pool-size",
			       "32M",
			       "--ignore-eos",
			       "--cost-call-us=1000",
			       "--cost-token-us=10",
			       "--speculative-draft-max=1",
			       "--speculative-ngram=2",
			       NULL };
	double d_one, rows_one, d_on, rows_on;

	snprintf(model, sizeof(model), "%s/tinyq-q8_0.gguf", f->off.dir);
	assert_int_equal(kvpd_init(&one), 0);
	if (kvpd_start(&one, 120, args) < 0) {
		kvpd_dump_log(&one);
		fail_msg("kvpoold with --speculative-draft-max=1 did not start");
	}
	d_on = kvpd_status_num(&f->on, "scheduler.spec_drafted", -1);
	rows_on = kvpd_status_num(&f->on, "scheduler.decode_rows", -1);
	for (uint32_t i = 0; i < 8; i += 2) {
		struct prompt p;
		struct kvpd_gen a, b;

		make_prompt(&p, i, 256);
		assert_int_equal(kvpd_generate(one.sock, p.ids, p.n, N_GEN, true, &a), 0);
		assert_int_equal(kvpd_generate(f->on.sock, p.ids, p.n, N_GEN, true, &b), 0);
		assert_int_equal(a.n, N_GEN);
		assert_memory_equal(a.ids, b.ids, sizeof(a.ids));
	}
	d_one = kvpd_status_num(&one, "scheduler.spec_drafted", -1);
	rows_one = kvpd_status_num(&one, "scheduler.decode_rows", -1);
	d_on = kvpd_status_num(&f->on, "scheduler.spec_drafted", -1) - d_on;
	rows_on = kvpd_status_num(&f->on, "scheduler.decode_rows", -1) - rows_on;
	print_message("draft_max 1: %.0f draft rows next to %.0f decode rows; 8: %.0f next to "
		      "%.0f\n",
		      d_one, rows_one, d_on, rows_on);
	assert_true(d_one > 0);
	assert_true(d_one <= rows_one);
	assert_true(d_on > rows_on);
	kvpd_cleanup(&one);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_greedy_same), cmocka_unit_test(test_per_request),
		cmocka_unit_test(test_http),	    cmocka_unit_test(test_sampled),
		cmocka_unit_test(test_draft_max),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
