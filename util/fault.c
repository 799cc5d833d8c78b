/* SPDX-License-Identifier: MIT */
/*
 * fault.c - the sites of util/fault.h: a small table of armed sites, counted under a
 * lock (util/fault_wrap.c holds the library calls' wrappers).  Compiled only with
 * -Dfault_injection=true.
 */
#include "util/fault.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARMED_MAX 16

struct armed {
	char scope[32]; /* "" or the scope its calls must be made in */
	char site[32];
	uint64_t nth;
	uint64_t count;
	int how;
	uint64_t calls;
	uint64_t hits;
	bool on;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static __thread const char *cur_scope;
static struct armed armed[ARMED_MAX];
static unsigned int n_armed;
/* Read without the lock first: a call with nothing armed costs one load. */
static volatile unsigned int n_on;

static const char *const sites[] = {
	"alloc",     "malloc",		"calloc",
	"realloc",   "aligned_alloc",	"posix_memalign",
	"strdup",    "strndup",		"memfd_create",
	"ftruncate", "fallocate",	"mmap",
	"read",	     "write",		"pread",
	"pwrite",    "io_uring_submit", "io_uring_submit_and_wait",
	"tier.cqe",
};

static bool site_known(const char *site)
{
	for (size_t i = 0; i < sizeof(sites) / sizeof(sites[0]); i++)
		if (!strcmp(site, sites[i]))
			return true;
	return false;
}

/* "SCOPE/SITE" or "SITE" into its parts; false when either does not fit. */
static bool split(const char *spec, char scope[32], char site[32])
{
	const char *slash = strchr(spec, '/');
	size_t n = slash ? (size_t)(slash - spec) : 0;

	if (n >= 32 || strlen(slash ? slash + 1 : spec) >= 32 || (slash && !n))
		return false;
	memcpy(scope, spec, n);
	scope[n] = '\0';
	strcpy(site, slash ? slash + 1 : spec);
	return true;
}

static struct armed *find(const char *scope, const char *site)
{
	for (unsigned int i = 0; i < n_armed; i++)
		if (!strcmp(armed[i].site, site) && !strcmp(armed[i].scope, scope))
			return &armed[i];
	return NULL;
}

void kvp_fault_scope(const char *name)
{
	cur_scope = name;
}

int kvp_fault_arm(const char *spec, uint64_t nth, uint64_t count, int how)
{
	char scope[32], site[32];
	struct armed *a;

	if (!spec || !split(spec, scope, site) || !site_known(site) || !nth || !count ||
	    (how >= 0 && how != KVP_FAULT_SHORT))
		return -EINVAL;
	pthread_mutex_lock(&lock);
	a = find(scope, site);
	if (!a) {
		if (n_armed == ARMED_MAX) {
			pthread_mutex_unlock(&lock);
			return -ENOSPC;
		}
		a = &armed[n_armed++];
		snprintf(a->site, sizeof(a->site), "%s", site);
	}
	if (!a->on)
		n_on++;
	*a = (struct armed){ .nth = nth, .count = count, .how = how, .on = true };
	strcpy(a->scope, scope);
	strcpy(a->site, site);
	pthread_mutex_unlock(&lock);
	return 0;
}

void kvp_fault_disarm(void)
{
	pthread_mutex_lock(&lock);
	for (unsigned int i = 0; i < n_armed; i++)
		armed[i].on = false;
	n_on = 0;
	pthread_mutex_unlock(&lock);
}

static uint64_t counter(const char *spec, bool hits)
{
	char scope[32], site[32];
	struct armed *a = NULL;
	uint64_t v = 0;

	pthread_mutex_lock(&lock);
	if (split(spec, scope, site))
		a = find(scope, site);
	if (a)
		v = hits ? a->hits : a->calls;
	pthread_mutex_unlock(&lock);
	return v;
}

uint64_t kvp_fault_calls(const char *site)
{
	return counter(site, false);
}

uint64_t kvp_fault_hits(const char *site)
{
	return counter(site, true);
}

int kvp_fault_take(const char *site, const char *group)
{
	int how = 0;

	if (!n_on)
		return 0;
	pthread_mutex_lock(&lock);
	for (unsigned int i = 0; i < n_armed; i++) {
		struct armed *a = &armed[i];

		if (!a->on || (strcmp(a->site, site) && (!group || strcmp(a->site, group))))
			continue;
		if (a->scope[0] && (!cur_scope || strcmp(a->scope, cur_scope)))
			continue; /* armed for calls made inside another scope */
		a->calls++;
		if (!how && a->calls >= a->nth && a->calls - a->nth < a->count) {
			a->hits++;
			how = a->how;
		}
	}
	pthread_mutex_unlock(&lock);
	return how;
}

int kvp_fault_res(const char *site, int res)
{
	int how = kvp_fault_take(site, NULL);

	if (!how)
		return res;
	if (how == KVP_FAULT_SHORT)
		return res > 1 ? res / 2 : res;
	return how;
}

static int errno_named(const char *s)
{
	static const struct {
		const char *name;
		int e;
	} names[] = { { "EIO", EIO },	    { "ENOMEM", ENOMEM }, { "ENOSPC", ENOSPC },
		      { "EAGAIN", EAGAIN }, { "EINTR", EINTR },	  { "EBUSY", EBUSY },
		      { "EFAULT", EFAULT }, { "ENFILE", ENFILE }, { "EMFILE", EMFILE } };

	if (!strcmp(s, "short"))
		return KVP_FAULT_SHORT;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcmp(s, names[i].name))
			return -names[i].e;
	return 0;
}

int kvp_fault_arm_env(void)
{
	const char *env = getenv("KVP_FAULT");
	char buf[512], *save = NULL;

	if (!env || !*env)
		return 0;
	if (strlen(env) >= sizeof(buf))
		return -EINVAL;
	strcpy(buf, env);
	for (char *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
		char site[64], how[16];
		unsigned long long nth, count;
		int h;

		if (sscanf(item, "%63[^:]:%llu:%llu:%15s", site, &nth, &count, how) != 4 ||
		    !(h = errno_named(how)) ||
		    kvp_fault_arm(site, nth, count ? count : KVP_FAULT_ALWAYS, h))
			return -EINVAL;
	}
	return 0;
}
