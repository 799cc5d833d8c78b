/* SPDX-License-Identifier: MIT */
/*
 * test_http_kv.c - every K/V type end to end through kvpool-http: for f32, f16, bf16,
 * int8 and int4 a kvpoold storing that type (the tiny model, blocks of 16 tokens) behind
 * a kvpool-http, and for each:
 *  - the pool holds the type (WELCOME's shape) and the status report gives its exact
 *    bytes per token, scales included - the block's bytes by include/kvpool/layout.h,
 *    over its tokens - beside the same model's f32 figure;
 *  - a greedy /v1/completions of token ids gives kvpool-run's tokens with the same K/V
 *    type (another process, the same kernels and numerics), with nothing cached;
 *  - the same request again, streamed, reads its prompt from the cache the first one
 *    filled (every full prompt block; int4: the blocks out of the residual window, the
 *    only ones published) and gives the same tokens (int4: a hit reads its last blocks
 *    at 4 bits where the cold run read them in f32, so it is the next hit that must
 *    equal it, bit for bit: the same blocks from the same boundary).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kvpool/kvpool.h"
#include "kvpool/layout.h"
#include "tests/integration/httpc.h"
#include "tests/integration/httpd.h"
#include "tests/integration/jsonq.h"
#include "tests/integration/kvpd.h"

#define BT 16
#define N_PROMPT 100
#define N_GEN 12
#define WINDOW 32 /* [pool] kv_window's default */

/* What one completion gave: its token ids and cached prompt tokens. */
struct answer {
	int32_t ids[N_GEN];
	uint32_t n;
	int cached;
};

/* The ids of a "token_ids" array @a, appended to @out. */
static void take_ids(const struct jsonq *a, struct answer *out)
{
	assert_non_null(a);
	assert_int_equal(a->type, JQ_ARR);
	for (const struct jsonq *e = a->child; e; e = e->next) {
		assert_true(out->n < N_GEN);
		out->ids[out->n++] = (int32_t)e->num;
	}
}

/* POST the greedy completion of @prompt (whole, or streamed with its usage) to @port. */
static void complete(int port, const int32_t *prompt, bool stream, struct answer *out)
{
	char *body = malloc(N_PROMPT * 12 + 256);
	struct httpc_resp r;
	size_t off = 0;

	assert_non_null(body);
	memset(out, 0, sizeof(*out));
	out->cached = -1;
	off += (size_t)sprintf(body, "{\"prompt\":[");
	for (uint32_t i = 0; i < N_PROMPT; i++)
		off += (size_t)sprintf(body + off, "%s%d", i ? "," : "", prompt[i]);
	sprintf(body + off, "],\"max_tokens\":%d,\"temperature\":0,\"return_token_ids\":true%s}",
		N_GEN,
		stream ? ",\"stream\":true,\"stream_options\":{\"include_usage\":true}" : "");
	assert_int_equal(httpc_request(port, "POST", "/v1/completions", NULL, body, &r), 0);
	free(body);
	if (r.status != 200)
		fail_msg("completion: HTTP %d: %s", r.status, r.body);
	if (!stream) {
		struct jsonq *j = jsonq_parse(r.body, r.body_len);

		assert_non_null(j);
		take_ids(jsonq_get(j, "choices.0.token_ids"), out);
		out->cached = (int)jsonq_num(j, "usage.prompt_tokens_details.cached_tokens", -1);
		assert_int_equal((int)jsonq_num(j, "usage.prompt_tokens", -1), N_PROMPT);
		jsonq_free(j);
	} else {
		bool done = false;

		/* "data: {...}" events, one a line: each chunk's ids, the usage last */
		for (char *line = strtok(r.body, "\n"); line; line = strtok(NULL, "\n")) {
			struct jsonq *j;

			if (!strcmp(line, "data: [DONE]"))
				done = true;
			if (strncmp(line, "data: {", 7))
				continue;
			j = jsonq_parse(line + 6, strlen(line + 6));
			assert_non_null(j);
			if (jsonq_get(j, "choices.0.token_ids"))
				take_ids(jsonq_get(j, "choices.0.token_ids"), out);
			if (jsonq_num(j, "usage.prompt_tokens", -1) >= 0)
				out->cached = (int)
					jsonq_num(j, "usage.prompt_tokens_details.cached_tokens",
						  -1);
			jsonq_free(j);
		}
		assert_true(done);
	}
	httpc_resp_free(&r);
	assert_int_equal(out->n, N_GEN);
}

static void serve_type(const char *type, uint32_t dtype)
{
	const char *args[] = { "--model",   NULL, "--pool-size", "64M", "--ignore-eos",
			       "--threads", "1",  "--kv-dtype",	 type,	NULL };
	const char *hargs[] = { "--config", "/dev/null", "--listen", "127.0.0.1:0", NULL };
	const struct kvp_welcome *w;
	struct kvp_client *k;
	struct answer cold, warm, again;
	int32_t prompt[N_PROMPT], want[N_GEN];
	uint32_t n_want = 0, l, h, dim, published;
	struct jsonq *st;
	struct kvpd d;
	struct httpd hd;

	/* both processes' f32 projections on kvpool's kernel (docs/compute.md, "Threads") */
	assert_int_equal(setenv("KVP_F32_GEMM", "kvpool", 1), 0);
	assert_int_equal(kvpd_init(&d), 0);
	assert_int_equal(kvpd_model(&d, "tiny", d.model, sizeof(d.model)), 0);
	args[1] = d.model;
	if (kvpd_start(&d, 60, args)) {
		kvpd_dump_log(&d);
		fail_msg("kvpoold --kv-dtype %s did not start", type);
	}
	if (httpd_start(&hd, d.dir, d.sock, hargs, 30) || !hd.port) {
		httpd_dump_log(&hd);
		fail_msg("kvpool-http did not start");
	}

	/* the pool's type and its exact bytes per token, beside f32's */
	assert_int_equal(kvp_client_connect(&k, d.sock), 0);
	w = kvp_client_welcome(k);
	assert_int_equal(w->shape.dtype, dtype);
	assert_int_equal(w->shape.block_tokens, BT);
	l = w->shape.n_layers;
	h = w->shape.n_kv_heads;
	dim = w->shape.head_dim;
	st = kvpd_status(&d);
	assert_non_null(st);
	assert_string_equal(jsonq_str(st, "pool.kv_dtype"), type);
	assert_true(jsonq_num(st, "pool.bytes_per_token", 0) ==
		    (double)kvp_layout_block_bytes(&w->shape) / BT);
	assert_true(jsonq_num(st, "pool.bytes_per_token_f32", 0) == 2.0 * l * h * dim * 4);
	print_message("%s: %g bytes per token (f32: %g)\n", type,
		      jsonq_num(st, "pool.bytes_per_token", 0),
		      jsonq_num(st, "pool.bytes_per_token_f32", 0));
	jsonq_free(st);
	kvp_client_close(k);

	for (uint32_t i = 0; i < N_PROMPT; i++)
		prompt[i] = (int32_t)(3 + (i * 37) % 250);
	assert_int_equal(kvpd_offline_kv(d.model, type, prompt, N_PROMPT, N_GEN, true, want,
					 &n_want),
			 0);
	assert_int_equal(n_want, N_GEN);

	complete(hd.port, prompt, false, &cold);
	assert_int_equal(cold.cached, 0);
	assert_memory_equal(cold.ids, want, sizeof(want));
	complete(hd.port, prompt, true, &warm);
	if (dtype != KVP_DTYPE_INT4) {
		/* every full prompt block (the last token is always computed) */
		assert_int_equal(warm.cached, (N_PROMPT - 1) / BT * BT);
		assert_memory_equal(warm.ids, want, sizeof(want));
	} else {
		/* the prompt's blocks out of the window once the first answer ended */
		published = (N_PROMPT + N_GEN - 1 - WINDOW) / BT * BT;
		if (published > (N_PROMPT - 1) / BT * BT)
			published = (N_PROMPT - 1) / BT * BT;
		assert_int_equal(warm.cached, published);
		complete(hd.port, prompt, false, &again);
		assert_int_equal(again.cached, published);
		assert_memory_equal(again.ids, warm.ids, sizeof(warm.ids));
	}
	assert_int_equal(httpd_stop_clean(&hd), 0);
	kvpd_cleanup(&d);
	unsetenv("KVP_F32_GEMM");
}

static void test_f32(void **state)
{
	(void)state;
	serve_type("f32", KVP_DTYPE_F32);
}

static void test_f16(void **state)
{
	(void)state;
	serve_type("f16", KVP_DTYPE_F16);
}

static void test_bf16(void **state)
{
	(void)state;
	serve_type("bf16", KVP_DTYPE_BF16);
}

static void test_int8(void **state)
{
	(void)state;
	serve_type("int8", KVP_DTYPE_INT8);
}

static void test_int4(void **state)
{
	(void)state;
	serve_type("int4", KVP_DTYPE_INT4);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_f32),  cmocka_unit_test(test_f16),
		cmocka_unit_test(test_bf16), cmocka_unit_test(test_int8),
		cmocka_unit_test(test_int4),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
