/* SPDX-License-Identifier: MIT */
/*
 * test_fault_daemon.c - allocation failures inside a real kvpoold (a -Dfault_injection
 * build only: util/fault.h; the daemon arms $KVP_FAULT at start).  Each case fails the
 * allocations made while the daemon handles one public operation ("OP/alloc": only inside
 * that frame's handling), once (transient) or always (persistent), and checks what a
 * client sees: a clean error for that request (a daemon status, the connection kept),
 * every other operation still served, the next try served once the fault is spent, the
 * daemon alive, and a clean stop (exit 0; the ASan pass checks its leaks at exit).
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "kvpool/kvpool.h"
#include "tests/integration/kvpd.h"

struct fixture {
	struct kvpd d;
};

/* kvpoold on the tiny model with @fault in its environment (only for its start). */
static struct fixture *start_with(const char *fault)
{
	struct fixture *f = calloc(1, sizeof(*f));
	const char *args[] = { "--pool-size", "16M", NULL };
	int r;

	assert_non_null(f);
	assert_int_equal(setenv("KVP_FAULT", fault, 1), 0);
	r = kvpd_setup(&f->d, "tiny", args);
	unsetenv("KVP_FAULT");
	assert_int_equal(r, 0);
	assert_true(kvpd_log_has(&f->d, "fault injection armed"));
	return f;
}

static void stop(struct fixture *f)
{
	/* alive until now, and a clean stop */
	assert_int_equal(kill(f->d.pid, 0), 0);
	assert_int_equal(kvpd_stop(&f->d), 0);
	assert_true(WIFEXITED(f->d.exit_status));
	assert_int_equal(WEXITSTATUS(f->d.exit_status), 0);
	kvpd_cleanup(&f->d);
	free(f);
}

static int tokenize(struct kvp_client *k, size_t *n)
{
	int32_t *ids = NULL;
	int r = kvp_client_tokenize(k, "Hello there", 11, 0, &ids, n);

	free(ids);
	return r;
}

static int generate(struct kvp_client *k, struct kvp_usage *u)
{
	static const int32_t prompt[] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	struct kvp_client_prompt pr = { .tokens = prompt, .n_tokens = 8 };
	struct kvp_client_params p;

	kvp_client_params_init(&p);
	p.max_new_tokens = 4;
	return kvp_client_generate(k, &pr, &p, NULL, NULL, u);
}

/* A daemon status, not a broken connection or a local failure. */
static void assert_refused(int r, const char *what)
{
	if (r <= 0)
		fail_msg("%s: %d (%s), want an ERROR frame's status", what, r,
			 kvp_client_strerror(r));
}

static void test_tokenize_alloc_transient(void **state)
{
	struct fixture *f = start_with("TOKENIZE/alloc:1:1:ENOMEM");
	struct kvp_client *k = NULL;
	struct kvp_usage u;
	size_t n = 0;

	(void)state;
	assert_int_equal(kvp_client_connect(&k, f->d.sock), 0);
	/* the first allocation of a TOKENIZE fails: that request is refused, cleanly */
	assert_refused(tokenize(k, &n), "TOKENIZE under ENOMEM");
	print_message("refused: %s\n", kvp_client_errmsg(k));
	/* the same connection goes on: the fault was transient */
	assert_int_equal(tokenize(k, &n), 0);
	assert_true(n > 0);
	assert_int_equal(generate(k, &u), 0);
	assert_int_equal(u.generated_tokens, 4);
	kvp_client_close(k);
	assert_true(kvpd_status_num(&f->d, "connections.total", 0) >= 1);
	stop(f);
}

static void test_generate_alloc_persistent(void **state)
{
	struct fixture *f = start_with("GENERATE/alloc:1:0:ENOMEM");
	struct kvp_client *k = NULL, *k2 = NULL;
	struct kvp_usage u;
	size_t n = 0;

	(void)state;
	assert_int_equal(kvp_client_connect(&k, f->d.sock), 0);
	/* every GENERATE fails its first allocation: each is refused, none kills anything */
	for (int i = 0; i < 3; i++)
		assert_refused(generate(k, &u), "GENERATE under ENOMEM");
	print_message("refused: %s\n", kvp_client_errmsg(k));
	/* other operations are untouched, on this connection and a new one */
	assert_int_equal(tokenize(k, &n), 0);
	assert_int_equal(kvp_client_connect(&k2, f->d.sock), 0);
	assert_int_equal(tokenize(k2, &n), 0);
	assert_refused(generate(k2, &u), "GENERATE under ENOMEM (second connection)");
	kvp_client_close(k);
	kvp_client_close(k2);
	/* the engine saw no request, and the pool is as it was */
	assert_true(kvpd_status_num(&f->d, "scheduler.requests_done", -1) == 0);
	assert_true(kvpd_status_num(&f->d, "pool.blocks_used", -1) == 0);
	stop(f);
}

static void test_generate_alloc_sweep(void **state)
{
	(void)state;
	/*
	 * the n-th allocation of a GENERATE's handling fails, once, for n = 1 .. 8 (the
	 * request table, the prompt's copy, the engine's request, its events ...): the
	 * request is answered (refused with a status, or served when the fault fell where a
	 * failure is absorbed), never a hang, a crash or a dropped connection; the next one
	 * is served on the same connection
	 */
	for (int nth = 1; nth <= 8; nth++) {
		struct fixture *f;
		struct kvp_client *k = NULL;
		struct kvp_usage u;
		char spec[64];
		int r;

		snprintf(spec, sizeof(spec), "GENERATE/alloc:%d:1:ENOMEM", nth);
		f = start_with(spec);
		assert_int_equal(kvp_client_connect(&k, f->d.sock), 0);
		r = generate(k, &u);
		print_message("%s: %d %s\n", spec, r, r ? kvp_client_errmsg(k) : "served");
		if (r)
			assert_refused(r, spec);
		else
			assert_int_equal(u.generated_tokens, 4);
		assert_int_equal(generate(k, &u), 0);
		assert_int_equal(u.generated_tokens, 4);
		kvp_client_close(k);
		stop(f);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tokenize_alloc_transient),
		cmocka_unit_test(test_generate_alloc_persistent),
		cmocka_unit_test(test_generate_alloc_sweep),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
