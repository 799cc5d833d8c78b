/* SPDX-License-Identifier: MIT */
/*
 * bench_textloop.c - the loop's latency for one connection while another sends long
 * texts: a small request (DETOKENIZE of 2 ids: loop work only) due every millisecond,
 * timed from when it was due (so a stall counts for every probe it delays), p50/p99/max,
 * alone and while another thread, on connections of its own,
 *   - sends 1 MB CHAT frames back to back (each refused: far beyond max_prompt_tokens;
 *     it reconnects whenever the daemon closes its connection), or
 *   - tokenizes a 16k-token text prompt (TOKENIZE of 16,000 bytes, the tiny model's byte
 *     vocabulary: an id a byte) back to back,
 * each printed beside the lone figure of the same run, with the ratio.
 *
 * Against another kvpoold (KVP_BUILD_DIR=<its build>) it measures that one: the flags
 * used are those every version takes.  Tiny model; about 20 s.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvpool/kvpool.h"
#include "tests/integration/kvpd.h"
#include "tests/lib/testlib.h"

#define PHASE_S 4.0
#define PROBE_US 1000 /* one probe due every millisecond */
#define MAX_SAMPLES 400000
#define CHAT_BYTES 1000000
#define TOK_BYTES 16000

enum load { LOAD_NONE, LOAD_CHAT, LOAD_TOKENIZE };

struct loader {
	const char *sock;
	enum load load;
	atomic_bool stop;
	unsigned long frames, reconnects, answered;
};

static char *filled(size_t n)
{
	char *t = malloc(n + 1);

	if (!t)
		return NULL;
	for (size_t i = 0; i < n; i++)
		t[i] = (char)('a' + i % 26);
	t[n] = 0;
	return t;
}

static void *load_thread(void *arg)
{
	struct loader *l = arg;
	char *text = filled(l->load == LOAD_CHAT ? CHAT_BYTES : TOK_BYTES);
	struct kvp_client_conv *cv = NULL;
	struct kvp_client *c = NULL;

	if (!text)
		return NULL;
	if (l->load == LOAD_CHAT &&
	    (kvp_client_conv_new(&cv) || kvp_client_conv_set_template(cv, "chatml") ||
	     kvp_client_conv_add(cv, KVP_ROLE_USER, text, CHAT_BYTES)))
		goto out;
	while (!atomic_load(&l->stop)) {
		int32_t *ids = NULL;
		size_t n = 0;
		int r;

		if (!c && kvp_client_connect(&c, l->sock)) {
			kvp_client_close(c);
			c = NULL;
			break;
		}
		r = l->load == LOAD_CHAT ? kvp_client_chat_prompt(c, cv, &ids, &n) :
					   kvp_client_tokenize(c, text, TOK_BYTES, 0, &ids, &n);
		free(ids);
		l->frames++;
		if (r >= 0)
			l->answered++;
		if (r < 0 || r == KVP_E_PROTO) { /* closed: a new connection, as a flood would */
			kvp_client_close(c);
			c = NULL;
			l->reconnects++;
		}
	}
out:
	kvp_client_close(c);
	kvp_client_conv_free(cv);
	free(text);
	return NULL;
}

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/*
 * A 2-id DETOKENIZE every PROBE_US for PHASE_S seconds, each timed from when it was due,
 * not from when it could be sent: a stall of the loop delays every probe due during it
 * (as it delays every client), not just the one in flight.  p50, p99 and the largest
 * in µs.
 */
static int probe(struct kvp_client *c, double *samples, double *p50, double *p99, double *max,
		 int *n_out)
{
	const int32_t ids[2] = { 'h' + 3, 'i' + 3 };
	uint64_t t0 = kvp_test_now_ns();
	int n = 0;

	while (n < MAX_SAMPLES) {
		uint64_t due = t0 + (uint64_t)n * PROBE_US * 1000, now = kvp_test_now_ns();
		char *text = NULL;
		size_t len = 0;
		int r;

		if (due > t0 + (uint64_t)(PHASE_S * 1e9))
			break;
		if (now < due)
			nanosleep(&(struct timespec){ .tv_nsec = (long)(due - now) }, NULL);
		r = kvp_client_detokenize(c, ids, 2, 0, &text, &len);
		free(text);
		if (r)
			return -1;
		samples[n++] = (double)(kvp_test_now_ns() - due) / 1e3;
	}
	qsort(samples, (size_t)n, sizeof(*samples), cmp_dbl);
	*p50 = kvp_test_percentile_sorted(samples, n, 50);
	*p99 = kvp_test_percentile_sorted(samples, n, 99);
	*max = samples[n - 1];
	*n_out = n;
	return 0;
}

int main(void)
{
	const char *args[] = { "--pool-size", "4608K", "--log-level", "warning", NULL };
	static const char *const names[] = { "alone", "1 MB CHAT frames", "16k-token TOKENIZE" };
	double *samples = malloc(MAX_SAMPLES * sizeof(double));
	double p50[3], p99[3], mx[3];
	struct kvp_client *c = NULL;
	struct kvpd d;
	int n;

	kvp_bench_cpu_regime(1000);
	if (!samples || kvpd_setup(&d, "tiny", args) < 0)
		return 1;
	if (kvp_client_connect(&c, d.sock)) {
		fprintf(stderr, "bench_textloop: connect: %s\n", c ? kvp_client_errmsg(c) : "?");
		return 1;
	}
	for (int load = LOAD_NONE; load <= LOAD_TOKENIZE; load++) {
		struct loader l = { .sock = d.sock, .load = (enum load)load };
		pthread_t th;

		if (load != LOAD_NONE && pthread_create(&th, NULL, load_thread, &l))
			return 1;
		if (load != LOAD_NONE)
			nanosleep(&(struct timespec){ .tv_nsec = 300000000 }, NULL); /* under way */
		if (probe(c, samples, &p50[load], &p99[load], &mx[load], &n) < 0) {
			fprintf(stderr, "bench_textloop: probe: %s\n", kvp_client_errmsg(c));
			return 1;
		}
		if (load != LOAD_NONE) {
			atomic_store(&l.stop, true);
			pthread_join(th, NULL);
		}
		printf("%s: %d probes, p50 %.1f us, p99 %.1f us, max %.1f us", names[load], n,
		       p50[load], p99[load], mx[load]);
		if (load != LOAD_NONE)
			printf("; the other client: %lu frames, %lu answered, %lu reconnects",
			       l.frames, l.answered, l.reconnects);
		printf("\n");
	}
	for (int load = LOAD_CHAT; load <= LOAD_TOKENIZE; load++) {
		char name[96];

		snprintf(name, sizeof(name), "DETOKENIZE round trip p99 during %s", names[load]);
		kvp_bench_report(name, p99[load], "us", "alone", p99[LOAD_NONE], "us");
		snprintf(name, sizeof(name), "DETOKENIZE round trip p50 during %s", names[load]);
		kvp_bench_report(name, p50[load], "us", "alone", p50[LOAD_NONE], "us");
	}
	kvp_bench_cpu_regime(1000);
	kvp_client_close(c);
	kvpd_cleanup(&d);
	free(samples);
	return 0;
}
