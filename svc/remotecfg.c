/* SPDX-License-Identifier: MIT */
/*
 * remotecfg.c - the daemon's remote tier: settings, domains, start-up (see remotecfg.h).
 */
#include "svc/remotecfg.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shm/pool.h"
#include "shm/remote/codec.h"
#include "shm/remote/remote.h"
#include "svc/config.h"
#include "svc/domain.h"
#include "util/log.h"
#include "util/errmsg.h"
#include "util/time.h"

/* The tier's own keys: [remote] names them as kvp_remote_config_set() does. */
static const char *const tier_keys[] = {
	"ttl_s",
	"publish",
	"connect_timeout_ms",
	"op_timeout_ms",
	"fetch_timeout_ms",
	"max_fetch_blocks",
	"queue_blocks",
	"fetch_queue",
	"breaker_errors",
	"breaker_probe_ms",
	"breaker_probe_max_ms",
	"bandwidth_mbps",
	"allow_plaintext",
};

void kvp_remotecfg_domain(const struct kvp_config *c, const char *domain_name,
			  struct kvp_remotecfg_domain *out)
{
	out->name = domain_name;
	out->user = c->remote.user;
	out->password_file = c->remote.password_file;
	out->key = "remote.password_file";
	/* a [domain NAME] with its own user (groups mode): both its keys, never mixed */
	for (uint32_t i = 0; i < c->n_domcfg; i++) {
		const struct kvp_domcfg *d = &c->domcfg[i];

		if (strcmp(d->name, domain_name) || !*d->remote_user)
			continue;
		out->user = d->remote_user;
		out->password_file = d->remote_password_file;
		snprintf(out->keybuf, sizeof(out->keybuf), "domain %s.remote_password_file",
			 d->name);
		out->key = out->keybuf;
	}
}

int kvp_remotecfg_host(const struct kvp_config *c, char *buf, size_t cap, char *err, size_t errcap)
{
	char name[256];

	if (*c->remote.host_id) {
		snprintf(name, sizeof(name), "%s", c->remote.host_id);
	} else if (gethostname(name, sizeof(name)) < 0) {
		kvp_errmsg(err, errcap, "remote.host_id: empty, and no host name: %s",
			   strerror(errno));
		return -EINVAL;
	}
	name[sizeof(name) - 1] = '\0';
	if (!kvp_remote_host_ok(name) || strlen(name) >= cap) {
		kvp_errmsg(
			err, errcap,
			"remote.host_id: '%s'%s is not 1..64 of A-Za-z0-9_.-; set remote.host_id",
			name, *c->remote.host_id ? "" : " (the host name)");
		return -EINVAL;
	}
	strcpy(buf, name);
	return 0;
}

/*
 * Read a password: one line of a regular file no other user may read (a password in a
 * world-readable file is no secret); a final newline is not part of it.
 */
static int read_password(const char *key, const char *path, char *buf, size_t cap, char *err,
			 size_t errcap)
{
	struct stat st;
	ssize_t n;
	int fd, r = 0;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		r = -errno;
		kvp_errmsg(err, errcap, "%s: %s: %s", key, path, strerror(-r));
		return r;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		kvp_errmsg(err, errcap, "%s: %s: not a regular file", key, path);
		r = -EINVAL;
		goto out;
	}
	if (st.st_mode & (S_IROTH | S_IWOTH)) {
		kvp_errmsg(err, errcap, "%s: %s: other users may read it (mode %04o); chmod o-rw",
			   key, path, (unsigned int)(st.st_mode & 07777));
		r = -EPERM;
		goto out;
	}
	n = read(fd, buf, cap);
	if (n < 0) {
		r = -errno;
		kvp_errmsg(err, errcap, "%s: %s: %s", key, path, strerror(-r));
		goto out;
	}
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
		n--;
	if (n == 0 || (size_t)n >= cap) {
		kvp_errmsg(err, errcap, "%s: %s: %s", key, path,
			   n ? "longer than a password may be" : "empty");
		r = -EINVAL;
		goto out;
	}
	buf[n] = '\0';
out:
	close(fd);
	return r;
}

int kvp_remotecfg_build(struct kvp_remote_config *rc, const struct kvp_config *c,
			const struct kvp_domains *doms, char *err, size_t cap)
{
	char why[512], val[64];
	char pass[KVP_REMOTE_PASS_MAX];
	int r;

	kvp_remote_config_defaults(rc);
	if (!*c->remote.url)
		return 0;
	r = kvp_remote_config_set(rc, "url", c->remote.url, why, sizeof(why));
	if (r < 0) {
		kvp_errmsg(err, cap, "%s", why); /* the tier's sentences name the key */
		return r;
	}
	for (size_t i = 0; i < sizeof(tier_keys) / sizeof(tier_keys[0]); i++) {
		if (kvp_config_get(c, "remote", tier_keys[i], val, sizeof(val)) < 0 || !*val)
			continue; /* "": the tier's default */
		r = kvp_remote_config_set(rc, tier_keys[i], val, why, sizeof(why));
		if (r < 0) {
			kvp_errmsg(err, cap, "%s", why);
			return r;
		}
	}
	for (uint32_t i = 0; i < doms->n_domains; i++) {
		struct kvp_remotecfg_domain rd;
		uint32_t id;

		kvp_remotecfg_domain(c, doms->dom[i].name, &rd);
		pass[0] = '\0';
		if (*rd.password_file) {
			r = read_password(rd.key, rd.password_file, pass, sizeof(pass), err, cap);
			if (r < 0)
				return r;
		}
		r = kvp_remote_config_add_domain(rc, &id, rd.name, rd.user, pass, why, sizeof(why));
		memset(pass, 0, sizeof(pass));
		if (r < 0 || id != i) {
			kvp_errmsg(err, cap, "%s", r < 0 ? why : "remote: domain ids out of order");
			return r < 0 ? r : -EINVAL;
		}
	}
	r = kvp_remote_config_check(rc, why, sizeof(why));
	if (r < 0) {
		kvp_errmsg(err, cap, "%s", why);
		return r;
	}
	if (c->remote.summary_period_s) {
		char host[KVP_REMOTE_HOST_ID_MAX];

		r = kvp_remotecfg_host(c, host, sizeof(host), err, cap);
	}
	return r;
}

int kvp_remotecfg_start(struct kvp_remote **out, const struct kvp_config *c,
			const struct kvp_domains *doms, const struct kvp_pool *pool,
			const uint8_t model_fp[16], const char *numerics)
{
	static struct kvp_remote_config rc; /* main thread, once; passwords wiped below */
	char err[768];
	uint64_t t0;
	int r;

	*out = NULL;
	r = kvp_remotecfg_build(&rc, c, doms, err, sizeof(err));
	if (r < 0) {
		kvp_log(LOG_ERR, "config: %s", err);
		goto out;
	}
	if (!*rc.url)
		goto out;
	/* hiredis's ~0.5 MiB command and reply buffers from the heap, not a mmap each */
	kvp_remote_tune_malloc();
	r = kvp_remote_new(out, &rc, &kvp_pool_geom(pool)->shape, model_fp, numerics, err,
			   sizeof(err));
	if (r < 0) {
		kvp_log(LOG_ERR, "remote: %s: %s", rc.url, *err ? err : strerror(-r));
		goto out;
	}
	t0 = kvp_now_ns();
	r = kvp_remote_wait_ready(*out, c->remote.start_wait_ms, err, sizeof(err));
	if (r == 0)
		kvp_log(LOG_INFO,
			"remote: %s: store answered in %.1f ms; domain %s, numerics %s, publish "
			"%s, ttl %u s",
			rc.url, (double)(kvp_now_ns() - t0) / 1e6, rc.domains[0].name, numerics,
			kvp_remote_publish_name(rc.publish), rc.ttl_s);
	else
		kvp_log(LOG_WARNING, "%s", err); /* "...; local-only until it answers" */
	r = 0;
out:
	memset(&rc, 0, sizeof(rc)); /* the passwords: the tier has its copy */
	return r;
}
