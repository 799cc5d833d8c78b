/* SPDX-License-Identifier: MIT */
/*
 * test_domains.c - trust domains in a real kvpoold, with children that switch to other
 * uids and gids (needs root; skipped, 77, without):
 *  - per-uid (the default): a peer of another uid never hits root's cached prompt, its
 *    WELCOME fd is another segment (another inode), a LEASE of that prompt holds
 *    nothing, and its traffic leaves root's
 *    segment bytes and root's domain counters unchanged; paired control: its own second
 *    request does hit, in its own domain;
 *  - groups: two uids of one group share a domain (the second hits the first's prompt);
 *    a uid listed in another section does not; a uid in no section (and root) is
 *    refused with a message naming trust domains;
 *  - single: peers of different uids share, as before domains existed;
 *  - a [domain NAME]'s priority: a request naming none runs at it (no root needed:
 *    the test's own uid is the section's user);
 *  - per-uid resources as a trust boundary: a new uid's domain passes the memory guard
 *    first (BUSY with the figures when its pool does not fit, the others unharmed),
 *    against daemon.memory_limit and in a real memory cgroup (where, with the guard
 *    off, the same uid gets the daemon OOM-killed);
 *    idle domains are reclaimed, their slot reused and their tier file kept (the uid
 *    back hits from disk), but never while a connection is open or a block pinned;
 *    a symlink planted as a uid's tier file is never followed, and an unsafe tier
 *    directory stops the start.
 */
#include <errno.h>
#include <grp.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "kvpool/kvpool.h"
#include "tests/integration/jsonq.h"
#include "tests/integration/kvpd.h"
#include "tests/lib/testlib.h"

/* Three full blocks of 16 tokens at least, with the tiny model's byte tokens. */
#define PROMPT \
	"The quick brown fox jumps over the lazy dog; the five boxing wizards jump quickly. " \
	"Pack my box with five dozen liquor jugs."

/*
 * What a child (or the parent) saw: connect status, message, pool inode, the
 * cached_tokens of each of its requests.
 */
struct seen {
	int rc;
	char msg[200];
	unsigned long ino;
	uint32_t cached[2];
	uint32_t disk[2]; /* ... of them reloaded from the disk tier */
	uint32_t leased;  /* blocks a LEASE of the prompt held before its requests */
};

/* Connect to @sock and run @n greedy requests of PROMPT (2 new tokens each). */
static void visit(const char *sock, int n, struct seen *out)
{
	struct kvp_client_prompt pr = { .text = PROMPT, .text_len = strlen(PROMPT) };
	struct kvp_client_params p;
	struct kvp_client *k = NULL;
	struct stat st;

	memset(out, 0, sizeof(*out));
	out->rc = kvp_client_connect(&k, sock);
	if (out->rc) {
		snprintf(out->msg, sizeof(out->msg), "%s", kvp_client_errmsg(k));
		kvp_client_close(k);
		return;
	}
	if (fstat(kvp_client_pool_fd(k), &st) == 0)
		out->ino = (unsigned long)st.st_ino;
	{
		struct kvp_client_lease *l = NULL;
		int32_t *ids = NULL;
		size_t n_ids = 0;

		out->rc = kvp_client_tokenize(k, PROMPT, strlen(PROMPT), 0, &ids, &n_ids);
		if (!out->rc)
			out->rc = kvp_client_lease(k, ids, n_ids, NULL, 0, 0, &l);
		free(ids);
		if (out->rc) {
			snprintf(out->msg, sizeof(out->msg), "lease: %s", kvp_client_errmsg(k));
			kvp_client_close(k);
			return;
		}
		out->leased = kvp_client_lease_info(l)->n_blocks;
		kvp_client_release(k, l);
	}
	kvp_client_params_init(&p);
	p.max_new_tokens = 2;
	for (int i = 0; i < n && i < 2; i++) {
		struct kvp_usage u = { 0 };

		out->rc = kvp_client_generate(k, &pr, &p, NULL, NULL, &u);
		if (out->rc) {
			snprintf(out->msg, sizeof(out->msg), "%s", kvp_client_errmsg(k));
			break;
		}
		out->cached[i] = u.cached_tokens;
		out->disk[i] = u.cached_tokens_disk;
	}
	kvp_client_close(k);
}

/* visit() in a child running as @uid / @gid (no supplementary groups). */
static void visit_as(const char *sock, uid_t uid, gid_t gid, int n, struct seen *out)
{
	int fd[2], st;
	pid_t pid;

	assert_int_equal(pipe(fd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct seen s;

		close(fd[0]);
		if (setgroups(0, NULL) < 0 || setgid(gid) < 0 || setuid(uid) < 0)
			_exit(125);
		visit(sock, n, &s);
		_exit(write(fd[1], &s, sizeof(s)) == (ssize_t)sizeof(s) ? 0 : 126);
	}
	close(fd[1]);
	memset(out, 0, sizeof(*out));
	assert_int_equal(read(fd[0], out, sizeof(*out)), (ssize_t)sizeof(*out));
	close(fd[0]);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* FNV-1a over a client's whole pool mapping: a change anywhere changes it. */
static uint64_t pool_hash(const struct kvp_client *k)
{
	size_t len = 0;
	const unsigned char *p = kvp_client_pool(k, &len);
	uint64_t h = 1469598103934665603ull;

	for (size_t i = 0; i < len; i++)
		h = (h ^ p[i]) * 1099511628211ull;
	return h;
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

static void test_per_uid(void **state)
{
	const char *args[] = { "--pool-size", "32M", NULL };
	static const char *const keys[] = { "requests",	     "lookups",	      "hit_requests",
					    "prompt_tokens", "cached_tokens", "blocks_used",
					    "blocks_cached" };
	struct kvp_client *root = NULL;
	struct seen a, b;
	struct jsonq *j0, *j1;
	struct kvpd d;
	uint64_t h0, h1;
	char me[32];

	(void)state;
	need_root();
	assert_int_equal(kvpd_setup(&d, "tiny", args), 0);
	open_up(&d);
	snprintf(me, sizeof(me), "uid-%u", (unsigned int)geteuid());

	/* domain A (root): the prompt cached, the second request hits */
	visit(d.sock, 2, &a);
	assert_int_equal(a.rc, 0);
	assert_int_equal(a.cached[0], 0);
	assert_true(a.cached[1] > 0);
	assert_int_equal(kvp_client_connect(&root, d.sock), 0);
	h0 = pool_hash(root);
	j0 = kvpd_status(&d);
	assert_non_null(j0);
	assert_true(dom_num(j0, me, "hit_requests") >= 1);
	assert_int_equal(domain_at(j0, "uid-65534"), -1); /* made on its first HELLO */

	/* domain B (nobody): never hits A's prompt, maps another segment */
	visit_as(d.sock, 65534, 65534, 2, &b);
	assert_int_equal(b.rc, 0);
	assert_int_equal(b.cached[0], 0);
	assert_int_equal(b.leased, 0); /* A's blocks cannot be leased either */
	assert_true(b.ino != 0 && a.ino != 0);
	assert_true(b.ino != a.ino);
	/* paired control: the same prompt does hit inside B's own domain */
	assert_true(b.cached[1] > 0);

	/* A's segment and A's counters are what they were */
	h1 = pool_hash(root);
	assert_true(h0 == h1);
	j1 = kvpd_status(&d);
	assert_non_null(j1);
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		if (dom_num(j0, me, keys[i]) != dom_num(j1, me, keys[i]))
			fail_msg("domain %s: %s changed from %g to %g by another uid", me, keys[i],
				 dom_num(j0, me, keys[i]), dom_num(j1, me, keys[i]));
	}
	assert_true(dom_num(j1, "uid-65534", "requests") == 2);
	assert_true(dom_num(j1, "uid-65534", "hit_requests") == 1);
	assert_true(dom_num(j1, "uid-65534", "blocks_total") > 0);
	jsonq_free(j0);
	jsonq_free(j1);
	kvp_client_close(root);
	kvpd_cleanup(&d);
}

static void test_per_uid_max(void **state)
{
	/* domains.max = 2: root's and one more; a third uid is refused BUSY, saying why */
	const char *args[] = { "--pool-size", "16M", "--domains-max", "2", NULL };
	struct seen s;
	struct kvpd d;

	(void)state;
	need_root();
	assert_int_equal(kvpd_setup(&d, "tiny", args), 0);
	open_up(&d);
	visit_as(d.sock, 60021, 65534, 1, &s);
	assert_int_equal(s.rc, 0);
	visit_as(d.sock, 60022, 65534, 1, &s);
	assert_int_equal(s.rc, KVP_E_BUSY);
	assert_non_null(strstr(s.msg, "domains.max"));
	visit_as(d.sock, 60021, 65534, 1, &s); /* its domain stays */
	assert_int_equal(s.rc, 0);
	assert_true(kvpd_log_has(&d, "no room for another domain"));
	kvpd_cleanup(&d);
}

static void test_groups(void **state)
{
	const char *args[] = { "--pool-size",
			       "32M",
			       "--domains-mode",
			       "groups",
			       "--set",
			       "domain team.groups=60100",
			       "--set",
			       "domain team.pool_size=16M",
			       "--set",
			       "domain solo.users=60011",
			       NULL };
	struct seen x, y, z, w, r;
	struct jsonq *j;
	struct kvpd d;

	(void)state;
	need_root();
	assert_int_equal(kvpd_setup(&d, "tiny", args), 0);
	open_up(&d);
	/* two uids of group 60100: one domain, so the second hits the first's prompt */
	visit_as(d.sock, 60010, 60100, 1, &x);
	assert_int_equal(x.rc, 0);
	assert_int_equal(x.cached[0], 0);
	visit_as(d.sock, 60012, 60100, 1, &y);
	assert_int_equal(y.rc, 0);
	assert_true(y.leased > 0); /* the other member's blocks, leased */
	assert_true(y.cached[0] > 0);
	assert_true(x.ino == y.ino);
	/* a listed user of another domain: nothing of the team's */
	visit_as(d.sock, 60011, 65534, 1, &z);
	assert_int_equal(z.rc, 0);
	assert_int_equal(z.leased, 0);
	assert_int_equal(z.cached[0], 0);
	assert_true(z.ino != x.ino);
	/* in no domain: refused, saying so; root too */
	visit_as(d.sock, 60013, 65534, 1, &w);
	assert_int_equal(w.rc, KVP_E_INVALID);
	assert_non_null(strstr(w.msg, "no trust domain"));
	visit(d.sock, 1, &r);
	assert_int_equal(r.rc, KVP_E_INVALID);
	j = kvpd_status(&d);
	assert_non_null(j);
	assert_true(dom_num(j, "team", "requests") == 2);
	assert_true(dom_num(j, "team", "hit_requests") == 1);
	assert_true(dom_num(j, "team", "pool_bytes") <= 16 << 20);
	assert_true(dom_num(j, "solo", "requests") == 1);
	assert_true(dom_num(j, "solo", "hit_requests") == 0);
	jsonq_free(j);
	kvpd_cleanup(&d);
}

static void test_single(void **state)
{
	/* everyone in one domain: another uid hits root's prompt, one segment */
	const char *args[] = { "--pool-size", "32M", "--domains-mode", "single", NULL };
	struct seen a, b;
	struct kvpd d;

	(void)state;
	need_root();
	assert_int_equal(kvpd_setup(&d, "tiny", args), 0);
	open_up(&d);
	visit(d.sock, 1, &a);
	assert_int_equal(a.rc, 0);
	visit_as(d.sock, 65534, 65534, 1, &b);
	assert_int_equal(b.rc, 0);
	assert_true(b.cached[0] > 0);
	assert_true(a.ino == b.ino);
	kvpd_cleanup(&d);
}

/* Poll the status until @path is @want (10 s at most); the last report in *@out. */
static bool status_reaches(struct kvpd *d, const char *path, double want, struct jsonq **out)
{
	double t_end = kvp_test_now_s() + 10;

	do {
		struct jsonq *j = kvpd_status(d);

		if (j && jsonq_num(j, path, -1) == want) {
			*out = j;
			return true;
		}
		jsonq_free(j);
		usleep(20000);
	} while (kvp_test_now_s() < t_end);
	return false;
}

static void test_groups_priority(void **state)
{
	/*
	 * [domain fg] priority = 5, one request at a time (scheduler.max_running = 1): a long
	 * request of priority 1000 runs (it is never preempted); one asking for priority 1,
	 * one naming none and one asking for exactly 0 wait.  The one naming none waits at
	 * its domain's 5: two count as high, the 0 as normal, and once the long one is
	 * cancelled the one naming none is served first, whole, then the 1, then the 0,
	 * although it came second.  The model decodes in
	 * milliseconds (n_embd 512, 4 layers), so the long one still runs when the two wait.
	 */
	char uid[48];
	const char *args[] = { "--model",	 NULL,
			       "--pool-size",	 "32M",
			       "--domains-mode", "groups",
			       "--set",		 uid,
			       "--set",		 "domain fg.priority=5",
			       "--max-running",	 "1",
			       "--ignore-eos",	 NULL };
	struct kvp_client *k = NULL;
	struct kvp_client_event ev;
	struct kvp_client_params p;
	struct jsonq *j = NULL;
	uint64_t rng = 77, id_long, id_one, id_none, id_zero;
	int32_t t_long[16], t_one[16], t_none[16], t_zero[16];
	struct kvp_client_prompt pr_long = { .tokens = t_long, .n_tokens = 16 };
	struct kvp_client_prompt pr_one = { .tokens = t_one, .n_tokens = 16 };
	struct kvp_client_prompt pr_none = { .tokens = t_none, .n_tokens = 16 };
	struct kvp_client_prompt pr_zero = { .tokens = t_zero, .n_tokens = 16 };
	int seq = 0, first_one = 0, first_none = 0, first_zero = 0, none_done = 0, one_done = 0;
	int done = 0;
	struct kvpd d;
	bool long_done = false;

	(void)state;
	snprintf(uid, sizeof(uid), "domain fg.users=%u", (unsigned int)geteuid());
	assert_int_equal(kvpd_init(&d), 0);
	assert_int_equal(kvpd_model_mid(&d, 4096), 0);
	args[1] = d.model;
	if (kvpd_start(&d, 120, args)) {
		kvpd_dump_log(&d);
		fail_msg("kvpoold did not start");
	}
	kvp_test_fill_ids(&rng, t_long, 16, 256);
	kvp_test_fill_ids(&rng, t_one, 16, 256);
	kvp_test_fill_ids(&rng, t_none, 16, 256);
	kvp_test_fill_ids(&rng, t_zero, 16, 256);
	assert_int_equal(kvp_client_connect(&k, d.sock), 0);

	/* the long one, until its first token */
	kvp_client_params_init(&p);
	p.max_new_tokens = 2000;
	p.priority = 1000;
	assert_int_equal(kvp_client_submit(k, &pr_long, &p, &id_long), 0);
	do
		assert_int_equal(kvp_client_next(k, &ev), 0);
	while (!(ev.req_id == id_long && ev.type == KVP_EVENT_TOKEN));

	/* priority 1, none, exactly 0: all wait */
	p.max_new_tokens = 2;
	p.priority = 1;
	assert_int_equal(kvp_client_submit(k, &pr_one, &p, &id_one), 0);
	p.priority = KVP_PRIORITY_DEFAULT;
	assert_int_equal(kvp_client_submit(k, &pr_none, &p, &id_none), 0);
	p.priority = 0;
	assert_int_equal(kvp_client_submit(k, &pr_zero, &p, &id_zero), 0);
	if (!status_reaches(&d, "scheduler.queued", 3, &j))
		fail_msg("the three requests never waited together behind the long one");
	assert_int_equal(jsonq_num(j, "scheduler.running", -1), 1);
	assert_int_equal(jsonq_num(j, "scheduler.queued_high", -1), 2);
	assert_int_equal(jsonq_num(j, "scheduler.queued_normal", -1), 1);
	assert_int_equal(dom_num(j, "fg", "priority"), 5);
	jsonq_free(j);

	/* the long one goes: the one naming none is served first, whole, then 1, then 0 */
	assert_int_equal(kvp_client_cancel(k, id_long), 0);
	while (done < 4) {
		assert_int_equal(kvp_client_next(k, &ev), 0);
		seq++;
		if (ev.req_id == id_one && !first_one)
			first_one = seq;
		if (ev.req_id == id_none && !first_none)
			first_none = seq;
		if (ev.req_id == id_zero && !first_zero)
			first_zero = seq;
		if (ev.type == KVP_EVENT_ERROR && ev.req_id != id_long)
			fail_msg("request %llu: %s", (unsigned long long)ev.req_id, ev.message);
		if (ev.type == KVP_EVENT_DONE || ev.type == KVP_EVENT_ERROR) {
			done++;
			if (ev.req_id == id_long)
				long_done = true;
			else
				assert_int_equal(ev.usage.generated_tokens, 2);
			if (ev.req_id == id_none)
				none_done = seq;
			if (ev.req_id == id_one)
				one_done = seq;
		}
	}
	assert_true(long_done);
	assert_true(first_none > 0 && first_one > 0 && first_zero > 0);
	assert_true(first_none < none_done);
	assert_true(none_done < first_one);
	assert_true(one_done < first_zero);
	kvp_client_close(k);
	kvpd_cleanup(&d);
}

/* Poll the status until @path is @want (30 s at most: a loaded sanitizer build). */
static bool status_is(struct kvpd *d, const char *path, double want)
{
	double t_end = kvp_test_now_s() + 30;

	do {
		if (kvpd_status_num(d, path, -1) == want)
			return true;
		usleep(20000);
	} while (kvp_test_now_s() < t_end);
	return false;
}

/* kvpoold on d->model (written already) with @args; the test fails if it does not start. */
static void start_with_model(struct kvpd *d, const char *const *args)
{
	const char *full[40] = { "--model", d->model };
	size_t n = 2;

	while (*args && n < 39)
		full[n++] = *args++;
	full[n] = NULL;
	if (kvpd_start(d, 60, full)) {
		kvpd_dump_log(d);
		fail_msg("kvpoold did not start");
	}
}

/* The daemon's open fds now. */
static int fd_count(pid_t pid)
{
	char path[64];
	struct dirent *e;
	DIR *dir;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	dir = opendir(path);
	assert_non_null(dir);
	while ((e = readdir(dir)))
		n += e->d_name[0] != '.';
	closedir(dir);
	return n;
}

static void test_per_uid_memory_guard(void **state)
{
	/*
	 * daemon.memory_limit admits the model and three 16 MiB pools: root's (made at
	 * start) and two uids'.  A third uid's HELLO is refused BUSY naming the figures,
	 * nothing of it stays (no domain, no fd), and the first two keep being served
	 */
	char limit[32];
	const char *args[] = { "--pool-size", "16M", "--huge-pages", "off", "--memory-limit",
			       limit,	      NULL };
	struct seen a, b, c;
	struct stat st;
	struct jsonq *j;
	struct kvpd d;
	int fds0, fds1 = -1;

	(void)state;
	need_root();
	assert_int_equal(kvpd_init(&d), 0);
	assert_int_equal(kvpd_model(&d, "tiny", d.model, sizeof(d.model)), 0);
	assert_int_equal(stat(d.model, &st), 0);
	snprintf(limit, sizeof(limit), "%llu",
		 (unsigned long long)st.st_size + 3 * (16ull << 20) + (8ull << 20));
	start_with_model(&d, args);
	open_up(&d);
	visit_as(d.sock, 60051, 65534, 1, &a);
	assert_int_equal(a.rc, 0);
	visit_as(d.sock, 60052, 65534, 1, &b);
	assert_int_equal(b.rc, 0);
	assert_true(status_is(&d, "connections.open", 0));
	/* the least of a few looks: a status connection may still be closing */
	fds0 = fd_count(d.pid);
	for (int i = 0; i < 10; i++) {
		int n = fd_count(d.pid);

		fds0 = n < fds0 ? n : fds0;
		usleep(20000);
	}

	visit_as(d.sock, 60053, 65534, 1, &c);
	assert_int_equal(c.rc, KVP_E_BUSY);
	if (!strstr(c.msg, "no memory for a new trust domain") ||
	    !strstr(c.msg, "daemon.memory_limit") || !strstr(c.msg, "16.0 MiB"))
		fail_msg("refusal without the figures: %s", c.msg);
	assert_true(kvpd_log_has(&d, "no memory for another domain"));
	/* nothing of it stays: its fds come back (the connection closes a moment later) */
	for (int i = 0; i < 250 && (fds1 = fd_count(d.pid)) > fds0; i++)
		usleep(20000);
	if (fds1 > fds0)
		fail_msg("%d fds open after the refusal, %d before", fds1, fds0);

	/* the two admitted keep working, in their own domains (their prompt hits) */
	visit_as(d.sock, 60051, 65534, 1, &a);
	assert_int_equal(a.rc, 0);
	assert_true(a.cached[0] > 0);
	visit_as(d.sock, 60052, 65534, 1, &b);
	assert_int_equal(b.rc, 0);
	assert_true(b.cached[0] > 0);
	j = kvpd_status(&d);
	assert_non_null(j);
	assert_int_equal(jsonq_num(j, "domain_slots.refused_memory", -1), 1);
	assert_int_equal(jsonq_num(j, "domain_slots.open", -1), 3);
	assert_int_equal(domain_at(j, "uid-60053"), -1);
	jsonq_free(j);
	kvpd_cleanup(&d);
}

/*
 * One round of test_per_uid_oom_in_cgroup(): kvpoold (32 MiB pools, @guard or not) in
 * memory cgroup @cg, limited once the first uid's domain is open to room for one more
 * such domain and half a pool, then uids 60061..60064 one after another (what each saw
 * in @s).  Return: the first uid's charge to the cgroup (its pool and what its visit
 * allocated); @dom2: the second's.
 */
static uint64_t oom_round(struct kvpd *d, const char *cg, bool guard, struct seen s[4],
			  uint64_t *dom2)
{
	const char *on[] = { "--pool-size", "32M", "--huge-pages", "off", NULL };
	const char *off[] = {
		"--pool-size", "32M", "--huge-pages", "off", "--memory-guard=no", NULL
	};
	uint64_t u0, u1, dom;

	assert_int_equal(kvpd_memcg_limit(cg, UINT64_MAX), 0);
	start_with_model(d, guard ? on : off);
	open_up(d);
	u0 = kvpd_memcg_usage(cg);
	visit_as(d->sock, 60061, 65534, 1, &s[0]);
	assert_int_equal(s[0].rc, 0);
	u1 = kvpd_memcg_usage(cg);
	dom = u1 > u0 ? u1 - u0 : 0;
	/* the pool is charged here (else the limit below proves nothing) */
	if (dom < (32ull << 20))
		fail_msg("the first uid's domain charged %llu bytes to %s, less than its pool",
			 (unsigned long long)dom, cg);
	assert_int_equal(kvpd_memcg_limit(cg, u1 + dom + (16ull << 20)), 0);
	for (int i = 1; i < 4 && !kill(d->pid, 0); i++) {
		visit_as(d->sock, (uid_t)(60061 + i), 65534, 1, &s[i]);
		if (i == 1)
			*dom2 = kvpd_memcg_usage(cg) - u1;
	}
	return dom;
}

static void test_per_uid_oom_in_cgroup(void **state)
{
	/*
	 * Issue 24: each new uid's domain faulted a whole pool with no check, and 15 uids in
	 * a 1 GiB cgroup got kvpoold OOM-killed at the 10th.  Here a real memory cgroup has
	 * room for two uids' domains: the third and fourth are refused BUSY naming the
	 * cgroup, the daemon serves on (the first uids and root hit their prompts) and exits
	 * cleanly, and the OOM killer never ran.  Paired control, the same with
	 * --memory-guard=no: the third uid's pool gets the daemon killed (so the limit is
	 * real).
	 */
	struct seen s[4], r;
	struct kvpd d;
	struct jsonq *j;
	char cg[500];
	uint64_t kills0, dom, dom2 = 0;
	int st;

	(void)state;
	need_root();
	assert_int_equal(kvpd_init(&d), 0);
	if (kvpd_memcg_make(cg, sizeof(cg), UINT64_MAX) < 0) {
		kvpd_cleanup(&d);
		fprintf(stderr, "no memory cgroup (v1 or v2) can be made here\n");
		skip();
	}
	snprintf(d.cgroup, sizeof(d.cgroup), "%s", cg);
	assert_int_equal(kvpd_model(&d, "tiny", d.model, sizeof(d.model)), 0);
	kills0 = kvpd_memcg_oom_kills(cg);

	memset(s, 0, sizeof(s));
	dom = oom_round(&d, cg, true, s, &dom2);
	fprintf(stderr, "the first domain charged %.1f MiB, the second %.1f MiB\n",
		(double)dom / (1 << 20), (double)dom2 / (1 << 20));
	assert_int_equal(s[1].rc, 0);
	for (int i = 2; i < 4; i++) {
		assert_int_equal(s[i].rc, KVP_E_BUSY);
		if (!strstr(s[i].msg, "no memory for a new trust domain") ||
		    !strstr(s[i].msg, "memory cgroup") || !strstr(s[i].msg, "32.0 MiB"))
			fail_msg("uid %d refused without the cgroup's figures: %s", 60061 + i,
				 s[i].msg);
	}
	assert_int_equal(kill(d.pid, 0), 0);
	visit_as(d.sock, 60061, 65534, 1, &s[0]);
	assert_int_equal(s[0].rc, 0);
	assert_true(s[0].cached[0] > 0);
	visit(d.sock, 2, &r);
	assert_int_equal(r.rc, 0);
	assert_true(r.cached[1] > 0);
	j = kvpd_status(&d);
	assert_non_null(j);
	assert_int_equal(jsonq_num(j, "domain_slots.refused_memory", -1), 2);
	assert_int_equal(domain_at(j, "uid-60063"), -1);
	assert_int_equal(domain_at(j, "uid-60064"), -1);
	jsonq_free(j);
	st = kvpd_stop(&d);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	if (kills0 != UINT64_MAX)
		assert_int_equal(kvpd_memcg_oom_kills(cg), kills0);

	memset(s, 0, sizeof(s));
	oom_round(&d, cg, false, s, &dom2);
	assert_int_equal(s[1].rc, 0);
	assert_int_not_equal(s[2].rc, 0);
	if (kvpd_wait(&d, 30) != 0) {
		kvpd_dump_log(&d);
		fail_msg("with the guard off the third uid's pool did not end the daemon");
	}
	assert_true(WIFSIGNALED(d.exit_status) && WTERMSIG(d.exit_status) == SIGKILL);
	if (kills0 != UINT64_MAX)
		assert_true(kvpd_memcg_oom_kills(cg) > kills0);
	kvpd_cleanup(&d);
	rmdir(cg);
}

/* A child of @uid holding a connection to @sock until *@pipe_w is closed. */
static pid_t hold_as(const char *sock, uid_t uid, int *pipe_w)
{
	int up[2], down[2];
	char ok = 0;
	pid_t pid;

	assert_int_equal(pipe(up), 0);
	assert_int_equal(pipe(down), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct kvp_client *k = NULL;
		char c;

		close(up[0]);
		close(down[1]);
		if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(uid) < 0)
			_exit(125);
		c = kvp_client_connect(&k, sock) == 0 ? 1 : 2;
		if (write(up[1], &c, 1) != 1)
			_exit(126);
		(void)!read(down[0], &c, 1); /* EOF: the parent is done */
		kvp_client_close(k);
		_exit(0);
	}
	close(up[1]);
	close(down[0]);
	assert_int_equal(read(up[0], &ok, 1), 1);
	close(up[0]);
	assert_int_equal(ok, 1);
	*pipe_w = down[1];
	return pid;
}

static void release_hold(pid_t pid, int pipe_w)
{
	int st;

	close(pipe_w);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void test_per_uid_reclaim(void **state)
{
	/*
	 * domains.max = 2 (root's and one more), idle_reclaim_ms = 200, a disk tier: three
	 * uids one after the other, each leaving, are all served, each idle domain being
	 * reclaimed for the next; the first uid back gets its prompt from its kept tier
	 * file.  A domain with a connection open is not reclaimed (and its slot not given).
	 */
	char tier[400], kept[420];
	const char *args[] = { "--pool-size",
			       "16M",
			       "--domains-max",
			       "2",
			       "--domains-idle-reclaim-ms",
			       "200",
			       "--cache-ttl",
			       "0",
			       "--tier-path",
			       tier,
			       "--tier-size",
			       "32M",
			       NULL };
	struct seen s;
	struct kvpd d;
	pid_t holder;
	int hold_w;

	(void)state;
	need_root();
	assert_int_equal(kvpd_init(&d), 0);
	assert_int_equal(kvpd_model(&d, "tiny", d.model, sizeof(d.model)), 0);
	snprintf(tier, sizeof(tier), "%s/tier", d.dir);
	snprintf(kept, sizeof(kept), "%s.uid-60031", tier);
	start_with_model(&d, args);
	open_up(&d);

	visit_as(d.sock, 60031, 65534, 2, &s);
	assert_int_equal(s.rc, 0);
	assert_true(s.cached[1] > 0);
	if (!status_is(&d, "domain_slots.reclaimed", 1))
		fail_msg("the idle domain of uid 60031 was never reclaimed");
	assert_int_equal(access(kept, F_OK), 0); /* its tier file stays */
	visit_as(d.sock, 60032, 65534, 1, &s);
	if (s.rc)
		fail_msg("uid 60032 refused after uid 60031 left: %s", s.msg);
	assert_true(status_is(&d, "domain_slots.reclaimed", 2));
	visit_as(d.sock, 60033, 65534, 1, &s);
	assert_int_equal(s.rc, 0);
	assert_true(status_is(&d, "domain_slots.reclaimed", 3));

	/* uid 60031 again: a new domain, rebuilt from its tier file, hits from disk */
	visit_as(d.sock, 60031, 65534, 1, &s);
	assert_int_equal(s.rc, 0);
	if (!s.disk[0])
		fail_msg("uid 60031 back: nothing from disk (%u cached in memory)", s.cached[0]);
	assert_true(status_is(&d, "domain_slots.reclaimed", 4));

	/* an open connection holds its domain: never reclaimed, the slot never given */
	holder = hold_as(d.sock, 60034, &hold_w);
	usleep(1000000); /* five times idle_reclaim_ms, twenty checks */
	assert_int_equal(kvpd_status_num(&d, "domain_slots.reclaimed", -1), 4);
	visit_as(d.sock, 60035, 65534, 1, &s);
	assert_int_equal(s.rc, KVP_E_BUSY);
	release_hold(holder, hold_w);
	assert_true(status_is(&d, "domain_slots.reclaimed", 5));
	visit_as(d.sock, 60035, 65534, 1, &s);
	assert_int_equal(s.rc, 0);
	assert_true(kvpd_log_has(&d, "reclaimed after"));
	kvpd_cleanup(&d);
}

static void test_per_uid_reclaim_pinned(void **state)
{
	/*
	 * the daemon runs as uid 60060, so root's domain is made on its HELLO (and has
	 * operators: it may pin).  A prefix pinned there holds the domain however long it
	 * is idle; unpinned, the domain is reclaimed
	 */
	const char *args[] = { "--pool-size", "16M", "--domains-idle-reclaim-ms", "200",
			       "--cache-ttl", "0",   "--cache-pin-allowed=yes",	  NULL };
	struct kvp_client_prompt pr = { .text = PROMPT, .text_len = strlen(PROMPT) };
	struct kvp_client *k = NULL;
	struct kvpd d;

	(void)state;
	need_root();
	assert_int_equal(kvpd_init(&d), 0);
	assert_int_equal(kvpd_model(&d, "tiny", d.model, sizeof(d.model)), 0);
	d.run_uid = 60060;
	start_with_model(&d, args);
	assert_int_equal(kvp_client_connect(&k, d.sock), 0);
	if (kvp_client_pin(k, &pr, NULL, 0, false, NULL)) {
		kvpd_dump_log(&d);
		fail_msg("pin: %s", kvp_client_errmsg(k));
	}
	kvp_client_close(k);
	k = NULL;
	assert_true(status_is(&d, "connections.open", 0));
	usleep(1000000); /* five times idle_reclaim_ms */
	assert_int_equal(kvpd_status_num(&d, "domain_slots.reclaimed", -1), 0);
	assert_int_equal(kvpd_status_num(&d, "domain_slots.open", -1), 2);

	assert_int_equal(kvp_client_connect(&k, d.sock), 0);
	assert_int_equal(kvp_client_pin(k, &pr, NULL, 0, true, NULL), 0);
	kvp_client_close(k);
	assert_true(status_is(&d, "domain_slots.reclaimed", 1));
	assert_int_equal(kvpd_status_num(&d, "domain_slots.open", -1), 1);
	kvpd_cleanup(&d);
}

static void test_tier_symlink_refused(void **state)
{
	/*
	 * a per-uid tier file planted as a symlink (to an empty file, and dangling) is never
	 * followed: the uid is served from memory, the target stays empty, the dangling
	 * one is not created
	 */
	char tiers[400], base[420], link1[440], link2[440], victim[420], made[420];
	const char *args[] = {
		"--pool-size", "16M", "--tier-path", base, "--tier-size", "32M", NULL
	};
	struct seen s;
	struct stat st;
	struct kvpd d;
	int fd;

	(void)state;
	need_root();
	assert_int_equal(kvpd_init(&d), 0);
	snprintf(tiers, sizeof(tiers), "%s/tiers", d.dir);
	snprintf(base, sizeof(base), "%s/t", tiers);
	snprintf(link1, sizeof(link1), "%s.uid-60041", base);
	snprintf(link2, sizeof(link2), "%s.uid-60042", base);
	snprintf(victim, sizeof(victim), "%s/victim", d.dir);
	snprintf(made, sizeof(made), "%s/made", d.dir);
	assert_int_equal(mkdir(tiers, 0700), 0);
	fd = open(victim, O_RDWR | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(symlink(victim, link1), 0);
	assert_int_equal(symlink(made, link2), 0);
	assert_int_equal(kvpd_model(&d, "tiny", d.model, sizeof(d.model)), 0);
	start_with_model(&d, args);
	open_up(&d);
	visit_as(d.sock, 60041, 65534, 1, &s);
	assert_int_equal(s.rc, 0);
	visit_as(d.sock, 60042, 65534, 1, &s);
	assert_int_equal(s.rc, 0);
	assert_int_equal(stat(victim, &st), 0);
	if (st.st_size != 0)
		fail_msg("the symlink's target grew to %lld bytes", (long long)st.st_size);
	assert_int_equal(access(made, F_OK), -1);
	assert_int_equal(lstat(link1, &st), 0);
	assert_true(S_ISLNK(st.st_mode));
	assert_true(kvpd_log_has(&d, "is a symbolic link: refused"));
	kvpd_cleanup(&d);
}

static void test_tier_dir_unsafe(void **state)
{
	/*
	 * a tier directory others may write, or another user's, stops the start naming
	 * path, mode and owner; the daemon's own 0700 one starts
	 */
	static const struct {
		mode_t mode;
		uid_t owner;
		const char *says;
	} bad[] = {
		{ 0777, 0, "(mode 0777, owner uid 0)" },
		{ 0770, 0, "(mode 0770, owner uid 0)" },
		{ 01733, 0, "(mode 1733, owner uid 0)" },
		{ 0700, 60001, "(mode 0700, owner uid 60001)" },
	};
	char tiers[400], base[420];
	const char *args[] = {
		"--pool-size", "16M", "--tier-path", base, "--tier-size", "32M", NULL
	};
	struct kvpd d;

	(void)state;
	need_root();
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(kvpd_init(&d), 0);
		snprintf(tiers, sizeof(tiers), "%s/tiers", d.dir);
		snprintf(base, sizeof(base), "%s/t", tiers);
		assert_int_equal(mkdir(tiers, 0700), 0);
		assert_int_equal(chmod(tiers, bad[i].mode), 0);
		assert_int_equal(chown(tiers, bad[i].owner, 0), 0);
		assert_int_equal(kvpd_start(&d, 60, args), -ECHILD);
		if (!kvpd_log_has(&d, tiers) || !kvpd_log_has(&d, bad[i].says) ||
		    !kvpd_log_has(&d, "refused")) {
			kvpd_dump_log(&d);
			fail_msg("case %zu: no refusal naming %s %s", i, tiers, bad[i].says);
		}
		assert_int_equal(access(base, F_OK), -1); /* nothing made in it */
		kvpd_cleanup(&d);
	}
	assert_int_equal(kvpd_init(&d), 0);
	snprintf(tiers, sizeof(tiers), "%s/tiers", d.dir);
	snprintf(base, sizeof(base), "%s/t", tiers);
	assert_int_equal(mkdir(tiers, 0700), 0);
	assert_int_equal(kvpd_model(&d, "tiny", d.model, sizeof(d.model)), 0);
	start_with_model(&d, args);
	assert_int_equal(access(base, F_OK), 0);
	kvpd_cleanup(&d);
}

static void test_config_errors(void **state)
{
	/* groups without a section, a section outside groups mode, an unknown user */
	static const char *const bad[][8] = {
		{ "--domains-mode", "groups", NULL },
		{ "--set", "domain x.users=0", NULL },
		{ "--domains-mode", "groups", "--set", "domain x.users=no-such-user-kvp", NULL },
		/* a remote user without its password file */
		{ "--domains-mode", "groups", "--set", "domain x.users=0", "--set",
		  "domain x.remote_user=kvp-x", NULL },
		{ "--domains-mode", "groups", "--set", "domain x.users=0", "--set",
		  "domain x.remote_user=no:colons", NULL },
		{ "--domains-mode", "groups", "--set", "domain x.users=0", "--set",
		  "domain x.priority=1001", NULL },
	};
	static const char *const why[] = {
		"needs at least one [domain NAME]",
		"only with domains.mode = groups",
		"no user named 'no-such-user-kvp'",
		"remote_user and remote_password_file go together",
		"domain x.remote_user: user name 'no:colons'",
		"domain x.priority: '1001' is out of range [-1000, 1000]"
	};
	struct kvpd d;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(kvpd_init(&d), 0);
		assert_int_equal(kvpd_start(&d, 60, bad[i]), -ECHILD);
		if (!kvpd_log_has(&d, why[i])) {
			kvpd_dump_log(&d);
			fail_msg("case %zu: no '%s' in the log", i, why[i]);
		}
		kvpd_cleanup(&d);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_per_uid),
		cmocka_unit_test(test_per_uid_max),
		cmocka_unit_test(test_groups),
		cmocka_unit_test(test_single),
		cmocka_unit_test(test_groups_priority),
		cmocka_unit_test(test_config_errors),
		cmocka_unit_test(test_per_uid_memory_guard),
		cmocka_unit_test(test_per_uid_oom_in_cgroup),
		cmocka_unit_test(test_per_uid_reclaim),
		cmocka_unit_test(test_per_uid_reclaim_pinned),
		cmocka_unit_test(test_tier_symlink_refused),
		cmocka_unit_test(test_tier_dir_unsafe),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
