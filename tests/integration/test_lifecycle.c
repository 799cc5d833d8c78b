/* SPDX-License-Identifier: MIT */
/*
 * test_lifecycle.c - kvpoold start and stop, as systemd sees them:
 *  - sd_notify: READY=1 once serving (the fixture waits for it), WATCHDOG=1 at half of
 *    $WATCHDOG_USEC;
 *  - SIGTERM with requests in flight: STOPPING=1, short requests still finish, long ones
 *    end with usage.status SHUTDOWN after drain_timeout_ms, exit status 0 within the bound;
 *  - huge pages: without reserved 2 MiB pages the daemon starts on the fallback and
 *    reports the page kind it got; --huge-pages require then fails clearly (exit 1, a
 *    log line saying why); with pages reserved, require gets hugetlb pages;
 *  - configuration errors stop it before any socket exists, naming key and line;
 *  - --socket-group / --status-group give each socket (mode 0660) its own group;
 *  - without --model it generates the demo model once into its state directory and
 *    reuses it on the next start; SIGTERM while it generates is a clean stop (exit 0)
 *    that leaves no temporary file, and leftovers of a killed attempt are removed;
 *  - the weights are copied into huge-page memory by default and used in place with
 *    --weights map, the log says which and what it cost, and both give the same tokens.
 */
#include <errno.h>
#include <grp.h>
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
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include <dirent.h>

#include "kvpool/kvpool.h"
#include "shm/segment.h"
#include "tests/integration/kvpd.h"
#include "tests/lib/testlib.h"

#define DRAIN_MS 1000

struct runner {
	const char *sock;
	uint32_t max_new;
	volatile int started;
	int rc;
	struct kvp_usage usage;
	uint32_t n_got;
};

static int on_tok(void *arg, const int32_t *t, uint32_t n, const char *text, uint32_t tl)
{
	struct runner *r = arg;

	r->n_got += n;
	r->started = 1;
	return 0;
}

static void *runner_main(void *arg)
{
	struct runner *r = arg;
	struct kvp_client *k = NULL;
	struct kvp_client_params p;
	int32_t prompt[64];
	struct kvp_client_prompt pr = { .tokens = prompt, .n_tokens = 64 };

	for (int i = 0; i < 64; i++)
		prompt[i] = 3 + (int32_t)((i * 13 + r->max_new) % 256);
	r->rc = kvp_client_connect(&k, r->sock);
	if (!r->rc) {
		kvp_client_params_init(&p);
		p.max_new_tokens = r->max_new;
		r->rc = kvp_client_generate(k, &pr, &p, on_tok, r, &r->usage);
	}
	r->started = 1;
	kvp_client_close(k);
	return NULL;
}

static bool notified(struct kvpd *d, const char *what)
{
	char msg[512];
	ssize_t n;

	while ((n = recv(d->notify_fd, msg, sizeof(msg) - 1, MSG_DONTWAIT)) > 0) {
		msg[n] = '\0';
		if (strstr(msg, what))
			return true;
	}
	return false;
}

static void test_sigterm_drains_within_bound(void **state)
{
	struct kvpd d;
	char model[512];
	const char *args[] = { "--model",      model,
			       "--pool-size",  "96M",
			       "--ignore-eos", "--drain-timeout-ms",
			       "1000",	       "--max-new-tokens",
			       "100000",       "--max-prompt-tokens",
			       "1024",	       NULL };
	struct runner run[3] = {
		{ .max_new = 60000 },
		{ .max_new = 60000 },
		{ .max_new = 40 },
	};
	pthread_t th[3];
	double t0, took;

	assert_int_equal(kvpd_init(&d), 0);
	assert_int_equal(kvpd_model(&d, "tiny", model, sizeof(model)), 0);
	assert_int_equal(kvpd_start(&d, 60, args), 0);
	for (int i = 0; i < 3; i++) {
		run[i].sock = d.sock;
		assert_int_equal(pthread_create(&th[i], NULL, runner_main, &run[i]), 0);
	}
	for (int i = 0; i < 3; i++)
		while (!run[i].started)
			usleep(1000);
	/* after READY=1 the daemon said what it serves */
	assert_true(notified(&d, "STATUS=serving"));
	/* all three are streaming: stop the daemon now */
	t0 = kvp_test_now_s();
	kill(d.pid, SIGTERM);
	assert_int_equal(kvpd_wait(&d, 120), 0);
	took = kvp_test_now_s() - t0;
	for (int i = 0; i < 3; i++)
		pthread_join(th[i], NULL);
	assert_true(WIFEXITED(d.exit_status));
	assert_int_equal(WEXITSTATUS(d.exit_status), 0);
	/*
	 * the bound in counts, not seconds: the long requests were cut (SHUTDOWN, fewer than
	 * their 60,000 tokens, below), the daemon said it cancelled them; the wait above is a
	 * deadline against a hang, never a bound
	 */
	print_message("drained and stopped in %.2f s (drain bound %.1f s)\n", took,
		      DRAIN_MS / 1000.0);
	assert_true(notified(&d, "STOPPING=1"));
	assert_true(notified(&d, "STATUS=draining"));
	/* the short request finished normally inside the drain */
	assert_int_equal(run[2].rc, 0);
	assert_int_equal(run[2].usage.generated_tokens, 40);
	/* the long ones were cut at the bound, and told why */
	for (int i = 0; i < 2; i++) {
		assert_int_equal(run[i].rc, KVP_E_SHUTDOWN);
		assert_int_equal(run[i].usage.status, KVP_E_SHUTDOWN);
		assert_true(run[i].usage.generated_tokens > 0);
		assert_true(run[i].usage.generated_tokens < 60000);
		assert_int_equal(run[i].usage.generated_tokens, run[i].n_got);
	}
	assert_true(kvpd_log_has(&d, "cancelling 2 request(s)"));
	/* the sockets are gone with it */
	assert_int_not_equal(access(d.sock, F_OK), 0);
	kvpd_cleanup(&d);
}

static void test_watchdog_pings(void **state)
{
	struct kvpd d;
	char model[512];
	const char *args[] = { "--model", model, "--pool-size", "16M", NULL };
	char msg[512];
	int pings = 0;
	double t_end;

	/* $WATCHDOG_USEC = 200 ms: WATCHDOG=1 arrives every ~100 ms from the event loop */
	assert_int_equal(kvpd_init(&d), 0);
	assert_int_equal(kvpd_model(&d, "tiny", model, sizeof(model)), 0);
	d.watchdog_usec = 200000;
	assert_int_equal(kvpd_start(&d, 60, args), 0);
	t_end = kvp_test_now_s() + 0.75;
	while (kvp_test_now_s() < t_end) {
		ssize_t n = recv(d.notify_fd, msg, sizeof(msg) - 1, MSG_DONTWAIT);

		if (n > 0) {
			msg[n] = '\0';
			pings += strstr(msg, "WATCHDOG=1") != NULL;
		} else {
			usleep(5000);
		}
	}
	assert_true(pings >= 4);
	assert_true(pings <= 12);
	assert_int_equal(kvpd_stop(&d), 0);
	kvpd_cleanup(&d);
}

static void test_huge_pages(void **state)
{
	long free_pages = kvp_hugetlb_free_pages();
	struct kvpd d;
	char model[512];
	const char *req[] = { "--model",      model,	 "--pool-size", "32M",
			      "--huge-pages", "require", NULL };
	const char *aut[] = { "--model", model, "--pool-size", "32M", NULL };
	struct jsonq *j;
	int r;

	assert_int_equal(kvpd_init(&d), 0);
	assert_int_equal(kvpd_model(&d, "tiny", model, sizeof(model)), 0);
	if (free_pages < 20) {
		/* no (or too few) reserved pages: require must fail, clearly */
		r = kvpd_start(&d, 60, req);
		assert_int_equal(r, -ECHILD);
		assert_true(WIFEXITED(d.exit_status));
		assert_int_equal(WEXITSTATUS(d.exit_status), 1);
		assert_true(kvpd_log_has(&d, "huge pages required"));
		assert_true(kvpd_log_has(&d, "vm.nr_hugepages"));
		/* auto still starts, and says what it got */
		assert_int_equal(kvpd_start(&d, 60, aut), 0);
		j = kvpd_status(&d);
		assert_non_null(j);
		assert_non_null(jsonq_str(j, "pool.page_kind"));
		assert_true(!strcmp(jsonq_str(j, "pool.page_kind"), "4k") ||
			    !strcmp(jsonq_str(j, "pool.page_kind"), "thp-2m"));
	} else {
		assert_int_equal(kvpd_start(&d, 60, req), 0);
		j = kvpd_status(&d);
		assert_non_null(j);
		assert_string_equal(jsonq_str(j, "pool.page_kind"), "hugetlb-2m");
	}
	assert_true(jsonq_num(j, "pool.blocks_total", 0) > 0);
	jsonq_free(j);
	assert_int_equal(kvpd_stop(&d), 0);
	kvpd_cleanup(&d);
}

static void test_config_errors_before_sockets(void **state)
{
	struct kvpd d;
	char conf[600];
	char arg[640];
	const char *bad_file[] = { arg, NULL };
	const char *bad_flag[] = { "--pool-size", "lots", NULL };
	const char *bad_cross[] = { "--max-frame-bytes", "4096", NULL };
	FILE *f;

	assert_int_equal(kvpd_init(&d), 0);
	snprintf(conf, sizeof(conf), "%s/bad.conf", d.dir);
	f = fopen(conf, "w");
	assert_non_null(f);
	fputs("[pool]\nsize = 64M\nsise = 1G\n", f);
	fclose(f);
	/* a later --config replaces the fixture's /dev/null */
	snprintf(arg, sizeof(arg), "--config=%s", conf);
	assert_int_equal(kvpd_start(&d, 30, bad_file), -ECHILD);
	assert_int_equal(WEXITSTATUS(d.exit_status), 1);
	assert_true(kvpd_log_has(&d, "bad.conf:3: pool.sise: unknown key"));
	assert_int_not_equal(access(d.sock, F_OK), 0);

	assert_int_equal(kvpd_start(&d, 30, bad_flag), -ECHILD);
	assert_int_equal(WEXITSTATUS(d.exit_status), 1);
	assert_true(kvpd_log_has(&d, "--pool-size: 'lots' is not a size"));

	assert_int_equal(kvpd_start(&d, 30, bad_cross), -ECHILD);
	assert_int_equal(WEXITSTATUS(d.exit_status), 1);
	assert_true(kvpd_log_has(&d, "server.max_frame_bytes"));
	assert_int_not_equal(access(d.sock, F_OK), 0);
	kvpd_cleanup(&d);
}

/* Names of two groups this process may give files to, other than its own; false if none. */
static bool two_groups(char *a, char *b, size_t cap)
{
	gid_t own = getegid(), mine[64];
	int n = getgroups(64, mine);
	struct group *g;
	int found = 0;

	setgrent();
	while (found < 2 && (g = getgrent())) {
		bool ok = g->gr_gid != own && geteuid() == 0;

		for (int i = 0; !ok && i < n; i++)
			ok = g->gr_gid == mine[i] && g->gr_gid != own;
		if (!ok || (found && !strcmp(a, g->gr_name)))
			continue;
		snprintf(found ? b : a, cap, "%s", g->gr_name);
		found++;
	}
	endgrent();
	return found == 2;
}

static void test_socket_groups(void **state)
{
	struct kvpd d;
	char model[512], g1[64], g2[64];
	const char *args[] = { "--model",	 model, "--pool-size", "16M", "--socket-group", g1,
			       "--status-group", g2,	NULL };
	struct kvp_client *k = NULL;
	struct stat st;

	/* each socket is 0660 and owned by the group its key names */
	if (!two_groups(g1, g2, sizeof(g1)))
		skip(); /* not root, and in fewer than two other groups */
	assert_int_equal(kvpd_init(&d), 0);
	assert_int_equal(kvpd_model(&d, "tiny", model, sizeof(model)), 0);
	assert_int_equal(kvpd_start(&d, 60, args), 0);
	assert_int_equal(stat(d.sock, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0660);
	assert_int_equal(st.st_gid, getgrnam(g1)->gr_gid);
	assert_int_equal(stat(d.status, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0660);
	assert_int_equal(st.st_gid, getgrnam(g2)->gr_gid);
	assert_int_equal(kvp_client_connect(&k, d.sock), 0);
	kvp_client_close(k);
	assert_int_equal(kvpd_stop(&d), 0);
	kvpd_cleanup(&d);
}

struct tokens {
	int32_t ids[16];
	uint32_t n;
};

static int keep_tok(void *arg, const int32_t *t, uint32_t n, const char *text, uint32_t tl)
{
	struct tokens *k = arg;

	for (uint32_t i = 0; i < n && k->n < 16; i++)
		k->ids[k->n++] = t[i];
	return 0;
}

/* 8 greedy tokens of a fixed text prompt from the daemon at @sock. */
static void greedy8(const char *sock, struct tokens *out)
{
	struct kvp_client_prompt pr = { .text = "Weights in huge pages.", .text_len = 22 };
	struct kvp_client *k = NULL;
	struct kvp_client_params p;
	struct kvp_usage u;

	memset(out, 0, sizeof(*out));
	assert_int_equal(kvp_client_connect(&k, sock), 0);
	kvp_client_params_init(&p);
	p.max_new_tokens = 8;
	assert_int_equal(kvp_client_generate(k, &pr, &p, keep_tok, out, &u), 0);
	assert_int_equal(out->n, u.generated_tokens);
	kvp_client_close(k);
}

static void test_demo_model_generated_once(void **state)
{
	struct kvpd d;
	const char *args[] = { "--pool-size", "64M", NULL };
	char path[600];
	struct stat st1, st2;
	struct kvp_client *k = NULL;
	struct kvp_client_params p;
	struct kvp_client_prompt pr = { .text = "The cache remembers.", .text_len = 20 };
	struct kvp_usage u;
	const char *map_args[] = { "--pool-size", "64M", "--weights", "map", NULL };
	struct tokens copied, mapped;

	/* no --model: the demo model appears in the state directory and serves */
	assert_int_equal(kvpd_init(&d), 0);
	if (kvpd_start(&d, 300, args) < 0)
		kvpd_dump_log(&d);
	assert_true(d.pid > 0);
	assert_true(kvpd_log_has(&d, "generating the built-in demo model"));
	snprintf(path, sizeof(path), "%s/demo.gguf", d.dir);
	assert_int_equal(stat(path, &st1), 0);
	assert_int_equal(kvp_client_connect(&k, d.sock), 0);
	assert_string_equal(kvp_client_welcome(k)->model, "kvpool-demo");
	kvp_client_params_init(&p);
	p.max_new_tokens = 4;
	assert_int_equal(kvp_client_generate(k, &pr, &p, NULL, NULL, &u), 0);
	assert_int_equal(u.prompt_tokens, 21); /* BOS + 20 bytes */
	kvp_client_close(k);
	/* the default placement: copied, with its cost logged (demo: ~398 MiB of f32) */
	assert_true(kvpd_log_has(&d, "weights copied into huge-page memory"));
	assert_true(kvpd_log_has(&d, "(daemon.weights = copy)"));
	assert_false(kvpd_log_has(&d, " copied, arena 0.0 MiB"));
	greedy8(d.sock, &copied);
	assert_int_equal(kvpd_stop(&d), 0);

	/* the next start reuses the same file */
	assert_int_equal(truncate(d.log, 0), 0);
	assert_int_equal(kvpd_start(&d, 300, args), 0);
	assert_false(kvpd_log_has(&d, "generating the built-in demo model"));
	assert_int_equal(stat(path, &st2), 0);
	assert_int_equal(st1.st_ino, st2.st_ino);
	assert_int_equal(st1.st_mtime, st2.st_mtime);
	assert_int_equal(kvpd_stop(&d), 0);

	/* --weights map: used in place (no arena for an all-f32 model), the same tokens */
	assert_int_equal(truncate(d.log, 0), 0);
	assert_int_equal(kvpd_start(&d, 300, map_args), 0);
	assert_true(kvpd_log_has(&d, "weights used in place from the file mapping, arena 0.0 MiB"
				     " (daemon.weights = map)"));
	greedy8(d.sock, &mapped);
	assert_true(copied.n > 0);
	assert_int_equal(mapped.n, copied.n);
	assert_memory_equal(mapped.ids, copied.ids, copied.n * sizeof(int32_t));
	assert_int_equal(kvpd_stop(&d), 0);
	kvpd_cleanup(&d);
}

/* Entries of @dir whose name holds ".tmp" (a demo.tmp/ directory counts); 0 when none. */
static int count_tmp_entries(const char *dir)
{
	struct dirent *e;
	DIR *dp = opendir(dir);
	int n = 0;

	assert_non_null(dp);
	while ((e = readdir(dp)))
		if (strstr(e->d_name, ".tmp")) {
			fprintf(stderr, "left behind: %s/%s\n", dir, e->d_name);
			n++;
		}
	closedir(dp);
	return n;
}

static void test_sigterm_while_generating_demo(void **state)
{
	/* SIGTERM while the demo model is written: exit 0, no socket, no temporary file */
	struct kvpd d;
	const char *args[] = { "--pool-size", "64M", NULL };
	char stale[600], path[600];
	double t_end;
	FILE *f;

	assert_int_equal(kvpd_init(&d), 0);
	/* what a SIGKILLed earlier attempt left behind */
	snprintf(stale, sizeof(stale), "%s/demo.tmp", d.dir);
	assert_int_equal(mkdir(stale, 0750), 0);
	snprintf(stale, sizeof(stale), "%s/demo.tmp/demo.gguf.tmp.Xy12Ab", d.dir);
	f = fopen(stale, "w");
	assert_non_null(f);
	fputs("half a model", f);
	fclose(f);

	assert_int_equal(kvpd_start(&d, 0, args), -ETIMEDOUT); /* started, not ready */
	t_end = kvp_test_now_s() + 120;
	while (!kvpd_log_has(&d, "generating the built-in demo model") &&
	       kvp_test_now_s() < t_end && kvpd_wait(&d, 0.001) == -ETIMEDOUT)
		;
	assert_true(d.pid > 0);
	kill(d.pid, SIGTERM);
	assert_int_equal(kvpd_wait(&d, 120), 0);
	if (!WIFEXITED(d.exit_status) || WEXITSTATUS(d.exit_status) != 0)
		kvpd_dump_log(&d);
	assert_true(WIFEXITED(d.exit_status));
	assert_int_equal(WEXITSTATUS(d.exit_status), 0);
	/* it stopped while starting: never served, no socket left */
	assert_true(kvpd_log_has(&d, "stop requested during startup"));
	assert_false(kvpd_log_has(&d, "serving on"));
	assert_int_not_equal(access(d.sock, F_OK), 0);
	assert_int_not_equal(access(d.status, F_OK), 0);
	/* no temporary file: neither the stale one nor one of this run */
	assert_int_equal(count_tmp_entries(d.dir), 0);
	/* the model it finished is whole: the next start uses it without regenerating */
	snprintf(path, sizeof(path), "%s/demo.gguf", d.dir);
	assert_int_equal(access(path, R_OK), 0);
	assert_int_equal(truncate(d.log, 0), 0);
	assert_int_equal(kvpd_start(&d, 300, args), 0);
	assert_false(kvpd_log_has(&d, "generating the built-in demo model"));
	assert_int_equal(kvpd_stop(&d), 0);
	kvpd_cleanup(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_config_errors_before_sockets),
		cmocka_unit_test(test_sigterm_drains_within_bound),
		cmocka_unit_test(test_watchdog_pings),
		cmocka_unit_test(test_huge_pages),
		cmocka_unit_test(test_socket_groups),
		cmocka_unit_test(test_demo_model_generated_once),
		cmocka_unit_test(test_sigterm_while_generating_demo),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
