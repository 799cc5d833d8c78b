/* SPDX-License-Identifier: MIT */
/*
 * config.h - kvpool-http's configuration: defaults, then the INI file (section [http] of
 * /etc/kvpool/kvpool-http.conf unless --config names another), then the command line:
 *
 *   kvpool-http [--config FILE] [--socket PATH] [--listen HOST:PORT | --listen unix:PATH]...
 *               [--api-keys FILE] [--log-level L] [--help] [--version]
 *
 * Every key of the file is listed by kvp_http_config_usage() and in docs/http.md.  Errors
 * name the key and where it came from ("FILE:LINE: http.key: why" or "--flag: why").
 *
 * Thread: built on the main thread before any other starts; read-only afterwards.
 */
#ifndef KVP_IPC_HTTP_CONFIG_H
#define KVP_IPC_HTTP_CONFIG_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define KVP_HTTP_CONFIG_DEFAULT_PATH "/etc/kvpool/kvpool-http.conf"
#define KVP_HTTP_SOCK_MAX 108 /* sizeof(sun_path), NUL included */
#define KVP_HTTP_LISTEN_MAX 8 /* listen addresses */
#define KVP_HTTP_ADDR_MAX 256 /* one listen address, NUL included */
#define KVP_HTTP_ALIASES_MAX 1024

/* How /v1/messages uses the prefix cache (key anthropic_cache). */
enum kvp_http_anthropic_cache {
	KVP_HTTP_CACHE_AUTO = 0, /* every request reads and publishes cached prefixes */
	KVP_HTTP_CACHE_EXPLICIT, /* only requests with a cache_control block do */
};

/**
 * struct kvp_http_config - everything kvpool-http is told
 * @socket_path:       kvpoold's request socket
 * @status_path:       kvpoold's status socket ("" in the file: status.sock beside
 *                     @socket_path, filled in by kvp_http_config_check())
 * @listen:            @n_listen addresses: "HOST:PORT" or "unix:PATH"
 * @api_keys:          key file ("" = none: then only loopback and unix: listening)
 * @log_level:         syslog priority threshold
 * @threads:           HTTP threads per listen address
 * @max_body_bytes:    largest request body (413 beyond)
 * @max_header_bytes:  request line and headers of one request (431 beyond)
 * @max_conns:         open HTTP connections per listen address
 * @per_addr_conns:    open connections from one client address (IPv4/IPv6) at most
 * @idle_timeout_s:    a connection with no traffic for this long is closed
 * @header_timeout_s:  a request's line and headers must be in within this, counted
 *                     from the connection's start or the previous answer's end
 * @body_timeout_s:    a request's body must be in within this after its headers
 * @backend_conns:     connections to kvpoold at most
 * @backend_reqs_per_conn: generations in flight on one of them (kvpoold's
 *                     server.max_reqs_per_conn or less); beyond all of them requests wait
 * @backend_queue:     requests that may wait for a slot (in arrival order); beyond: 429
 * @stream_buffer_bytes: unsent output one request may queue (a slower reader is cut)
 * @drain_timeout_ms:  on SIGTERM, time running requests get to finish
 * @model_aliases:     comma-separated names also accepted as the served model
 * @anthropic_cache:   enum kvp_http_anthropic_cache
 * @config_path:       the file that was read ("" when none)
 */
struct kvp_http_config {
	char socket_path[KVP_HTTP_SOCK_MAX];
	char status_path[KVP_HTTP_SOCK_MAX];
	char listen[KVP_HTTP_LISTEN_MAX][KVP_HTTP_ADDR_MAX];
	unsigned int n_listen;
	char api_keys[PATH_MAX];
	int log_level;
	uint32_t threads;
	uint64_t max_body_bytes;
	uint32_t max_header_bytes;
	uint32_t max_conns;
	uint32_t per_addr_conns;
	uint32_t idle_timeout_s;
	uint32_t header_timeout_s;
	uint32_t body_timeout_s;
	uint32_t backend_conns;
	uint32_t backend_reqs_per_conn;
	uint32_t backend_queue;
	uint64_t stream_buffer_bytes;
	uint32_t drain_timeout_ms;
	char model_aliases[KVP_HTTP_ALIASES_MAX];
	uint32_t anthropic_cache;
	char config_path[PATH_MAX];
};

/* What main() does after kvp_http_config_parse_args(). */
enum kvp_http_config_action {
	KVP_HTTP_CONFIG_RUN = 0,
	KVP_HTTP_CONFIG_HELP,
	KVP_HTTP_CONFIG_VERSION,
};

/* Fill @c with the documented defaults. */
void kvp_http_config_defaults(struct kvp_http_config *c);

/**
 * kvp_http_config_set() - set key @key of section [http] from its text form
 * @err: out; "http.key: why"
 * Return: 0, -ENOENT for an unknown key, -EINVAL for a bad value.
 */
int kvp_http_config_set(struct kvp_http_config *c, const char *key, const char *value, char *err,
			size_t cap);

/**
 * kvp_http_config_load_file() - apply an INI file on top of @c
 * @must_exist: false lets a missing file pass silently (the default path)
 * @err:        out; "PATH:LINE: http.key: why" (or "PATH: why")
 * Return: 0, -ENOENT for a missing required file, -EINVAL for a syntax error, a key
 * outside [http], an unknown or repeated key or a bad value, other -errno.
 */
int kvp_http_config_load_file(struct kvp_http_config *c, const char *path, bool must_exist,
			      char *err, size_t cap);

/**
 * kvp_http_config_parse_args() - defaults, then the file, then the flags
 * @act: out; what main() should do
 * Return: 0 or -EINVAL (@err names the flag, file line or key).  Call
 * kvp_http_config_check() next.
 */
int kvp_http_config_parse_args(struct kvp_http_config *c, int argc, char *const *argv,
			       enum kvp_http_config_action *act, char *err, size_t cap);

/**
 * kvp_http_config_check() - cross-field rules; fills in the derived status socket path
 * Return: 0, or -EINVAL with @err naming the key.
 */
int kvp_http_config_check(struct kvp_http_config *c, char *err, size_t cap);

/* --help text, with every key of the file and its default. */
void kvp_http_config_usage(FILE *f);

#endif /* KVP_IPC_HTTP_CONFIG_H */
