/* SPDX-License-Identifier: MIT */
/*
 * test_quant_daemon.c - kvpoold serving quantized files (issue 8: the daemon runs the
 * types people download, from mixed-type files): the demo preset written as Q4_K_M (a
 * mixed recipe: q4_k with q6_k tensors) and as Q8_0, each served by a real kvpoold with
 * its weights copied (the daemon's default).  For each: the greedy tokens equal
 * kvpool-run's offline run on the same file (same kernels, other process, weights
 * mapped), a cold request past the cache and two cached ones give the same tokens, the
 * second and third read every full prompt block from the cache, and the load line names
 * the file's types.
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

#include "compute/mkmodel.h"
#include "kvpd.h"

#define N_PROMPT 100
#define N_GEN 12
#define BT 16

static void serve_type(const char *type, const char *log_type)
{
	struct kvpd d;
	struct kvp_mkmodel_opts o;
	const char *args[] = { "--model", d.model, "--pool-size", "64M", "--ignore-eos", NULL };
	struct kvpd_gen cold, warm1, warm2;
	int32_t prompt[N_PROMPT], want[N_GEN];
	uint32_t n_want = 0;
	int t;

	assert_int_equal(kvpd_init(&d), 0);
	assert_int_equal(kvp_mkmodel_preset(&o, "demo"), 0);
	t = kvp_mkmodel_type_parse(type);
	assert_true(t >= 0);
	o.type = (uint32_t)t;
	snprintf(d.model, sizeof(d.model), "%s/demo-%s.gguf", d.dir, type);
	assert_int_equal(kvp_mkmodel_write(d.model, &o, NULL, 0), 0);
	if (kvpd_start(&d, 120, args) < 0) {
		kvpd_dump_log(&d);
		fail_msg("kvpoold did not start on a %s file", type);
	}
	assert_true(kvpd_log_has(&d, log_type));
	for (uint32_t i = 0; i < N_PROMPT; i++)
		prompt[i] = (int32_t)(3 + (i * 37) % 250);
	assert_int_equal(kvpd_offline(d.model, prompt, N_PROMPT, N_GEN, true, want, &n_want), 0);
	assert_int_equal(n_want, N_GEN);

	assert_int_equal(kvpd_generate(d.sock, prompt, N_PROMPT, N_GEN, true, &cold), 0);
	assert_int_equal(kvpd_generate(d.sock, prompt, N_PROMPT, N_GEN, false, &warm1), 0);
	assert_int_equal(kvpd_generate(d.sock, prompt, N_PROMPT, N_GEN, false, &warm2), 0);
	assert_int_equal(cold.n, N_GEN);
	assert_memory_equal(cold.ids, want, sizeof(want));
	assert_memory_equal(warm1.ids, cold.ids, sizeof(cold.ids));
	assert_memory_equal(warm2.ids, cold.ids, sizeof(cold.ids));
	assert_int_equal(cold.u.cached_tokens, 0);
	/* the first cached request published the prompt's full blocks; the next reads them */
	assert_int_equal(warm2.u.cached_tokens, (N_PROMPT - 1) / BT * BT);
	kvpd_cleanup(&d);
}

static void test_q4_k_m(void **state)
{
	(void)state;
	serve_type("q4_k_m", "q4_k");
}

static void test_q8_0(void **state)
{
	(void)state;
	serve_type("q8_0", "q8_0");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_q4_k_m),
		cmocka_unit_test(test_q8_0),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
