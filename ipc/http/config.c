/* SPDX-License-Identifier: MIT */
/*
 * config.c - defaults, INI file (libinih), flags and checks of kvpool-http (see config.h).
 *
 * One table describes every key of section [http] once (name, type, bounds, help); the
 * file reader (util/ini.h, shared with kvpoold), --help and the docs follow it.
 *
 * Thread: main, before any other thread starts.
 */
#include "ipc/http/config.h"

#include <errno.h>
#include <getopt.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <syslog.h>

#include "util/log.h"
#include "util/errmsg.h"
#include "util/ini.h"
#include "util/keytab.h"
#include "util/parse.h"

enum key_type {
	T_STR,	  /* char[.cap] */
	T_LISTEN, /* comma-separated listen addresses */
	T_U32,	  /* [min, max] */
	T_SIZE,	  /* bytes with K/M/G/T suffix, [min, max]; .cap 8: uint64_t, else uint32_t */
	T_LEVEL,  /* log level */
	T_CACHE,  /* auto|explicit */
};

struct key_def {
	const char *key;
	enum key_type type;
	size_t off;
	size_t cap;
	uint64_t min, max;
	const char *dflt; /* the default as text, for --help */
	const char *help;
};

#define OFF(f) offsetof(struct kvp_http_config, f)
#define CAP(f) sizeof(((struct kvp_http_config *)0)->f)

static const struct key_def keys[] = {
	{ "socket", T_STR, OFF(socket_path), CAP(socket_path), 0, 0, "/run/kvpool/kvpool.sock",
	  "kvpoold's request socket (--socket)" },
	{ "status_socket", T_STR, OFF(status_path), CAP(status_path), 0, 0, "\"\"",
	  "kvpoold's status socket; empty: status.sock beside the request socket" },
	{ "listen", T_LISTEN, 0, 0, 0, 0, "127.0.0.1:8080",
	  "comma-separated HOST:PORT or unix:PATH addresses (--listen, repeatable)" },
	{ "api_keys", T_STR, OFF(api_keys), CAP(api_keys), 0, 0, "\"\"",
	  "API key file (KEY NAME [SALT] lines); empty: no keys, loopback/unix only (--api-keys)" },
	{ "log_level", T_LEVEL, OFF(log_level), 0, 0, 0, "info",
	  "err|warning|notice|info|debug (--log-level)" },
	{ "threads", T_U32, OFF(threads), 0, 1, 64, "2", "HTTP threads per listen address" },
	{ "max_body_bytes", T_SIZE, OFF(max_body_bytes), CAP(max_body_bytes), 1024, 1ull << 30,
	  "1M", "largest request body; larger ones get 413" },
	{ "max_header_bytes", T_SIZE, OFF(max_header_bytes), CAP(max_header_bytes), 2048, 1u << 20,
	  "16K", "request line plus headers of one request; more gets 431" },
	{ "max_conns", T_U32, OFF(max_conns), 0, 1, 65536, "256",
	  "open HTTP connections per listen address; a new one beyond takes the place of the "
	  "one waiting longest for its request head, or is closed at once" },
	{ "per_addr_conns", T_U32, OFF(per_addr_conns), 0, 1, 65536, "64",
	  "open connections from one client IP address; more are closed at once" },
	{ "idle_timeout_s", T_U32, OFF(idle_timeout_s), 0, 1, 86400, "60",
	  "close a connection after this many seconds without traffic" },
	{ "header_timeout_s", T_U32, OFF(header_timeout_s), 0, 1, 86400, "10",
	  "a request's line and headers must arrive within this (from the connection's start "
	  "or the previous answer's end: an idle keep-alive connection is closed after it)" },
	{ "body_timeout_s", T_U32, OFF(body_timeout_s), 0, 1, 86400, "60",
	  "a request's body must arrive within this after its headers" },
	{ "backend_conns", T_U32, OFF(backend_conns), 0, 1, 256, "4",
	  "connections to kvpoold, opened as load needs them" },
	{ "backend_reqs_per_conn", T_U32, OFF(backend_reqs_per_conn), 0, 1, 4096, "16",
	  "generations in flight per kvpoold connection (<= kvpoold's max_reqs_per_conn)" },
	{ "backend_queue", T_U32, OFF(backend_queue), 0, 0, 1u << 20, "1024",
	  "requests beyond backend_conns x backend_reqs_per_conn that wait for a slot, in "
	  "arrival order (kvpoold's scheduler.max_queued is a good value); more get 429" },
	{ "stream_buffer_bytes", T_SIZE, OFF(stream_buffer_bytes), CAP(stream_buffer_bytes), 4096,
	  1ull << 30, "1M", "unsent output one request may queue before its client is cut off" },
	{ "drain_timeout_ms", T_U32, OFF(drain_timeout_ms), 0, 0, 3600000, "10000",
	  "on SIGTERM, time running requests get to finish before they are cancelled" },
	{ "model_aliases", T_STR, OFF(model_aliases), CAP(model_aliases), 0, 0, "\"\"",
	  "comma-separated model names accepted besides the one kvpoold serves" },
	{ "anthropic_cache", T_CACHE, OFF(anthropic_cache), 0, 0, 0, "auto",
	  "auto: /v1/messages always uses the prefix cache; explicit: only with cache_control" },
};

#define N_KEYS (sizeof(keys) / sizeof(keys[0]))

void kvp_http_config_defaults(struct kvp_http_config *c)
{
	memset(c, 0, sizeof(*c));
	strcpy(c->socket_path, "/run/kvpool/kvpool.sock");
	strcpy(c->listen[0], "127.0.0.1:8080");
	c->n_listen = 1;
	c->log_level = LOG_INFO;
	c->threads = 2;
	c->max_body_bytes = 1u << 20;
	c->max_header_bytes = 16u << 10;
	c->max_conns = 256;
	c->per_addr_conns = 64;
	c->idle_timeout_s = 60;
	c->header_timeout_s = 10;
	c->body_timeout_s = 60;
	c->backend_conns = 4;
	c->backend_reqs_per_conn = 16;
	c->backend_queue = 1024;
	c->stream_buffer_bytes = 1u << 20;
	c->drain_timeout_ms = 10000;
	c->anthropic_cache = KVP_HTTP_CACHE_AUTO;
}

/*
 * Not inlined: gcc 12 -O3 propagates each option's key name into the loop and warns
 * (-Wstring-compare) about comparing it with the shorter names of other keys.
 */
static __attribute__((noinline)) const struct key_def *find_key(const char *key)
{
	for (size_t i = 0; i < N_KEYS; i++)
		if (!strcmp(keys[i].key, key))
			return &keys[i];
	return NULL;
}

/* Append one listen address.  Return: 0 or -EINVAL (@err says why). */
static int add_listen(struct kvp_http_config *c, const char *a, size_t n, char *err, size_t cap)
{
	if (!n) {
		kvp_errmsg(err, cap, "an empty address");
		return -EINVAL;
	}
	if (c->n_listen == KVP_HTTP_LISTEN_MAX) {
		kvp_errmsg(err, cap, "more than %d addresses", KVP_HTTP_LISTEN_MAX);
		return -EINVAL;
	}
	if (n >= KVP_HTTP_ADDR_MAX) {
		kvp_errmsg(err, cap, "address longer than %d bytes", KVP_HTTP_ADDR_MAX - 1);
		return -EINVAL;
	}
	memcpy(c->listen[c->n_listen], a, n);
	c->listen[c->n_listen][n] = '\0';
	c->n_listen++;
	return 0;
}

/* Parse comma-separated listen addresses into @c (replacing those it had). */
static int apply_listen(struct kvp_http_config *c, const char *value, char *err, size_t cap)
{
	c->n_listen = 0;
	for (const char *p = value;;) {
		const char *comma = strchr(p, ',');
		size_t n = comma ? (size_t)(comma - p) : strlen(p);
		int r;

		while (n && (*p == ' ' || *p == '\t'))
			p++, n--;
		while (n && (p[n - 1] == ' ' || p[n - 1] == '\t'))
			n--;
		r = add_listen(c, p, n, err, cap);
		if (r)
			return r;
		if (!comma)
			return 0;
		p = comma + 1;
	}
}

/*
 * Apply @value to @k; on error write "why" (without the key name) to @err.  Every type
 * but the listen list is util/keytab.h's, the engine kvpoold's config uses too.
 */
static int apply(struct kvp_http_config *c, const struct key_def *k, const char *value, char *err,
		 size_t cap)
{
	static const char *const cache_names[] = {
		[KVP_HTTP_CACHE_AUTO] = "auto",
		[KVP_HTTP_CACHE_EXPLICIT] = "explicit",
	};
	struct kvp_key t = { .cap = k->cap, .min = k->min, .max = k->max };

	switch (k->type) {
	case T_LISTEN:
		return apply_listen(c, value, err, cap);
	case T_STR:
		t.type = KVP_KEY_STR;
		break;
	case T_U32:
		t.type = KVP_KEY_U32;
		break;
	case T_SIZE:
		t.type = KVP_KEY_SIZE;
		break;
	case T_LEVEL:
		t.type = KVP_KEY_LEVEL;
		break;
	case T_CACHE:
		t = (struct kvp_key){ KVP_KEY_ENUM, .names = cache_names, .n_names = 2 };
		break;
	}
	return kvp_key_parse(&t, (char *)c + k->off, value, err, cap);
}

int kvp_http_config_set(struct kvp_http_config *c, const char *key, const char *value, char *err,
			size_t cap)
{
	const struct key_def *k = find_key(key);
	char why[256];
	int r;

	if (!k) {
		kvp_errmsg(err, cap, "http.%s: unknown key", key);
		return -ENOENT;
	}
	r = apply(c, k, value, why, sizeof(why));
	if (r < 0)
		kvp_errmsg(err, cap, "http.%s: %s", key, why);
	return r;
}

/* One file's parse: which keys it has set, so a second setting is an error. */
struct load_ctx {
	struct kvp_http_config *c;
	unsigned char seen[N_KEYS];
};

static int load_key(void *user, const char *section, const char *name, const char *value, char *err,
		    size_t cap)
{
	struct load_ctx *x = user;
	const struct key_def *k = find_key(name);
	char why[256];

	if (strcmp(section, "http")) {
		kvp_errmsg(err, cap, "%s%s%s: kvpool-http reads only section [http]", section,
			   *section ? "." : "", name);
		return -EINVAL;
	}
	if (!k) {
		kvp_errmsg(err, cap, "http.%s: unknown key", name);
		return -ENOENT;
	}
	if (x->seen[k - keys]++) {
		kvp_errmsg(err, cap, "http.%s: set twice", name);
		return -EINVAL;
	}
	if (apply(x->c, k, value, why, sizeof(why)) < 0) {
		kvp_errmsg(err, cap, "http.%s: %s", name, why);
		return -EINVAL;
	}
	return 0;
}

int kvp_http_config_load_file(struct kvp_http_config *c, const char *path, bool must_exist,
			      char *err, size_t cap)
{
	struct load_ctx x = { .c = c };
	int r;

	r = kvp_ini_load(path, "[http] or key = value", load_key, &x, err, cap);
	if (r == -ENOENT && !must_exist)
		return 0;
	if (r == 0)
		snprintf(c->config_path, sizeof(c->config_path), "%s", path);
	return r;
}

static const struct option opts[] = {
	{ "config", required_argument, NULL, 'c' },    { "socket", required_argument, NULL, 's' },
	{ "listen", required_argument, NULL, 'l' },    { "api-keys", required_argument, NULL, 'k' },
	{ "log-level", required_argument, NULL, 'L' }, { "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },	       { 0 },
};

int kvp_http_config_parse_args(struct kvp_http_config *c, int argc, char *const *argv,
			       enum kvp_http_config_action *act, char *err, size_t cap)
{
	const char *config = NULL;
	bool listen_flag = false;
	char why[256];
	int opt, r;

	*act = KVP_HTTP_CONFIG_RUN;
	kvp_http_config_defaults(c);
	/* pass 1: --config, --help, --version and the syntax of the rest */
	optind = 1;
	opterr = 0;
	while ((opt = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (opt) {
		case 'c':
			config = optarg;
			break;
		case 'h':
			*act = KVP_HTTP_CONFIG_HELP;
			return 0;
		case 'V':
			*act = KVP_HTTP_CONFIG_VERSION;
			return 0;
		case ':':
			kvp_errmsg(err, cap, "%s: needs a value", argv[optind - 1]);
			return -EINVAL;
		case '?':
			kvp_errmsg(err, cap, "%s: unknown flag (try --help)", argv[optind - 1]);
			return -EINVAL;
		}
	}
	if (optind < argc) {
		kvp_errmsg(err, cap, "%s: unexpected argument (try --help)", argv[optind]);
		return -EINVAL;
	}
	if (config && !*config) {
		kvp_errmsg(err, cap, "--config: empty path");
		return -EINVAL;
	}
	r = kvp_http_config_load_file(c, config ? config : KVP_HTTP_CONFIG_DEFAULT_PATH,
				      config != NULL, err, cap);
	if (r < 0)
		return r;
	/* pass 2: flags override the file; the first --listen replaces the file's list */
	optind = 1;
	while ((opt = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		const char *key = NULL, *flag = NULL;

		switch (opt) {
		case 's':
			key = "socket", flag = "--socket";
			break;
		case 'k':
			key = "api_keys", flag = "--api-keys";
			break;
		case 'L':
			key = "log_level", flag = "--log-level";
			break;
		case 'l':
			if (!listen_flag)
				c->n_listen = 0;
			listen_flag = true;
			r = add_listen(c, optarg, strlen(optarg), why, sizeof(why));
			if (r) {
				kvp_errmsg(err, cap, "--listen %s: %s", optarg, why);
				return r;
			}
			continue;
		default:
			continue;
		}
		r = apply(c, find_key(key), optarg, why, sizeof(why));
		if (r) {
			kvp_errmsg(err, cap, "%s: %s", flag, why);
			return r;
		}
	}
	return 0;
}

int kvp_http_config_check(struct kvp_http_config *c, char *err, size_t cap)
{
	if (!*c->socket_path) {
		kvp_errmsg(err, cap, "http.socket: must not be empty");
		return -EINVAL;
	}
	if (!c->n_listen) {
		kvp_errmsg(err, cap, "http.listen: no address to listen on");
		return -EINVAL;
	}
	if (!*c->status_path) {
		const char *slash = strrchr(c->socket_path, '/');
		size_t dir = slash ? (size_t)(slash - c->socket_path) + 1 : 0;

		if (dir + sizeof("status.sock") > sizeof(c->status_path)) {
			kvp_errmsg(err, cap, "http.status_socket: the derived path is too long");
			return -EINVAL;
		}
		memcpy(c->status_path, c->socket_path, dir);
		strcpy(c->status_path + dir, "status.sock");
	}
	if (!strcmp(c->status_path, c->socket_path)) {
		kvp_errmsg(err, cap, "http.status_socket: same path as http.socket");
		return -EINVAL;
	}
	if (c->stream_buffer_bytes < 4096) {
		kvp_errmsg(err, cap, "http.stream_buffer_bytes: at least 4096");
		return -EINVAL;
	}
	return 0;
}

void kvp_http_config_usage(FILE *f)
{
	fputs("usage: kvpool-http [--config FILE] [--socket PATH]\n"
	      "                   [--listen HOST:PORT | --listen unix:PATH]... [--api-keys FILE]\n"
	      "                   [--log-level L] [--help] [--version]\n"
	      "\n"
	      "OpenAI- and Anthropic-compatible HTTP front of kvpoold (docs/http.md).\n"
	      "Settings: defaults, then section [http] of the config file (" KVP_HTTP_CONFIG_DEFAULT_PATH
	      "\nwhen it exists, or --config FILE), then the flags.  Without --api-keys only\n"
	      "loopback addresses and unix: sockets may be listened on.\n"
	      "\n"
	      "  --config FILE     INI file with a section [http]\n"
	      "  --socket PATH     kvpoold's request socket\n"
	      "  --listen ADDR     HOST:PORT ([::1]:PORT for IPv6) or unix:PATH; repeatable\n"
	      "  --api-keys FILE   API key file: lines 'KEY NAME [SALT]'\n"
	      "  --log-level L     err, warning, notice, info, debug\n"
	      "\n"
	      "Keys of [http] (default):\n",
	      f);
	for (size_t i = 0; i < N_KEYS; i++)
		fprintf(f, "  %-22s %s (%s)\n", keys[i].key, keys[i].help, keys[i].dflt);
}
