/* SPDX-License-Identifier: MIT */
/*
 * main.c - kvpool-http: argv -> config -> keys -> backend -> server -> listen -> READY,
 * then wait for SIGTERM/SIGINT and drain.
 *
 * Log lines go to stderr: with journald's "<N>" priority prefixes when stderr is the
 * journal ($JOURNAL_STREAM, set by systemd), else as "kvpool-http: ..." for a terminal.
 * On SIGTERM: the listen sockets close, running requests get drain_timeout_ms to finish,
 * then the rest are cancelled in kvpoold; STOPPING=1 tells systemd.
 * Exit status: 0 clean stop (also --help, --version), 1 usage, configuration or start-up
 * failure (the message names the flag, key, file or address).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ipc/http/backend.h"
#include "ipc/http/config.h"
#include "ipc/http/keys.h"
#include "ipc/http/listen.h"
#include "ipc/http/server.h"
#include "util/log.h"
#include "util/notify.h"
#include "util/time.h"

#ifndef KVP_VERSION
#define KVP_VERSION "unknown"
#endif

/* Requests received and not yet answered: generations and those not yet at the backend. */
static unsigned int in_flight(struct kvp_http_server *srv, struct kvp_http_backend *be)
{
	unsigned int open = kvp_http_server_open(srv), busy = kvp_http_backend_busy(be);

	return open > busy ? open : busy;
}

/* Wait until no request is left or @ms passed.  Return: how many are left. */
static unsigned int wait_idle(struct kvp_http_server *srv, struct kvp_http_backend *be,
			      unsigned int ms)
{
	uint64_t end = kvp_now_ns() + (uint64_t)ms * 1000000u;

	while (in_flight(srv, be) && kvp_now_ns() < end)
		usleep(10000);
	return in_flight(srv, be);
}

/* Wait for SIGTERM/SIGINT, pinging systemd's watchdog meanwhile when it asks for that. */
static int wait_signal(const sigset_t *set, const struct kvp_notify *notify)
{
	uint64_t usec = kvp_notify_watchdog_interval_usec(notify);

	for (;;) {
		struct timespec ts = { .tv_sec = (time_t)(usec / 1000000),
				       .tv_nsec = (long)(usec % 1000000) * 1000 };
		int sig = sigtimedwait(set, NULL, usec ? &ts : NULL);

		if (sig > 0)
			return sig;
		if (errno == EAGAIN)
			kvp_notify_send(notify, "WATCHDOG=1");
	}
}

int main(int argc, char **argv)
{
	static struct kvp_http_config cfg; /* paths: keep it off the stack */
	static struct kvp_http_listener ls[KVP_HTTP_LISTEN_MAX];
	struct kvp_notify notify = KVP_NOTIFY_INIT;
	struct kvp_http_keys keys = { 0 };
	struct kvp_http_backend *be = NULL;
	struct kvp_http_server *srv = NULL;
	enum kvp_http_config_action act;
	unsigned int n_ls = 0, left;
	char err[1024];
	sigset_t set;
	int r, sig, status = 1;

	r = kvp_http_config_parse_args(&cfg, argc, argv, &act, err, sizeof(err));
	if (r < 0) {
		fprintf(stderr, "kvpool-http: config: %s\n", err);
		return 1;
	}
	if (act == KVP_HTTP_CONFIG_HELP) {
		kvp_http_config_usage(stdout);
		return 0;
	}
	if (act == KVP_HTTP_CONFIG_VERSION) {
		printf("kvpool-http %s\n", KVP_VERSION);
		return 0;
	}
	/* before any thread starts: the one global setting */
	kvp_log_set_name("kvpool-http");
	kvp_log_init(cfg.log_level, getenv("JOURNAL_STREAM") != NULL);
	r = kvp_http_config_check(&cfg, err, sizeof(err));
	if (r < 0) {
		kvp_log(LOG_ERR, "config: %s", err);
		return 1;
	}
	if (cfg.api_keys[0]) {
		r = kvp_http_keys_load(&keys, cfg.api_keys, err, sizeof(err));
		if (r < 0) {
			kvp_log(LOG_ERR, "api keys: %s", err);
			return 1;
		}
		kvp_log(LOG_INFO, "api keys: %zu keys of %zu tenants from %s", keys.n_keys,
			keys.n_tenants, cfg.api_keys);
	}
	/* signals are taken by sigtimedwait() on this thread; every thread inherits the mask */
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
	r = kvp_notify_open(&notify);
	if (r < 0)
		kvp_log(LOG_WARNING, "notify: $NOTIFY_SOCKET unusable: %s", strerror(-r));

	for (unsigned int i = 0; i < cfg.n_listen; i++) {
		r = kvp_http_listen_open(&ls[i], cfg.listen[i], keys.n_keys > 0, 511, err,
					 sizeof(err));
		if (r < 0) {
			kvp_log(LOG_ERR, "%s", err);
			goto out;
		}
		n_ls++;
	}
	r = kvp_http_backend_new(&be, cfg.socket_path, cfg.backend_conns, cfg.backend_reqs_per_conn,
				 cfg.backend_queue);
	if (r < 0) {
		kvp_log(LOG_ERR, "backend: start: %s", strerror(-r));
		goto out;
	}
	r = kvp_http_server_new(&srv, &cfg, &keys, be, err, sizeof(err));
	if (r < 0) {
		kvp_log(LOG_ERR, "http: %s", err);
		goto out;
	}
	for (unsigned int i = 0; i < n_ls; i++) {
		char name[sizeof(ls[i].name)];

		memcpy(name, ls[i].name, sizeof(name));
		r = kvp_http_server_listen(srv, &ls[i], err, sizeof(err));
		if (r < 0) {
			kvp_log(LOG_ERR, "http: %s", err);
			goto out;
		}
		kvp_log(LOG_INFO, "listening on %s", name);
	}
	kvp_log(LOG_INFO, "kvpool-http %s ready: kvpoold at %s, %s", KVP_VERSION, cfg.socket_path,
		keys.n_keys ? "API keys required" : "no API keys (local clients only)");
	kvp_notify_send(&notify, "READY=1\nSTATUS=serving");

	sig = wait_signal(&set, &notify);
	kvp_log(LOG_INFO, "%s: stopping; %u requests in flight get %u ms to finish", strsignal(sig),
		in_flight(srv, be), cfg.drain_timeout_ms);
	kvp_notify_send(&notify, "STOPPING=1\nSTATUS=draining");
	kvp_http_server_stop_accepting(srv);
	left = wait_idle(srv, be, cfg.drain_timeout_ms);
	if (left) {
		kvp_log(LOG_NOTICE, "drain: cancelling %u requests", left);
		kvp_http_backend_cancel_all(be);
		wait_idle(srv, be, 2000);
	}
	status = 0;
out:
	/* the backend first: every generation ends, and resumes its connection */
	kvp_http_backend_free(be);
	kvp_http_server_free(srv);
	for (unsigned int i = 0; i < n_ls; i++)
		kvp_http_listen_close(&ls[i]);
	kvp_http_keys_deinit(&keys);
	kvp_notify_close(&notify);
	if (!status)
		kvp_log(LOG_INFO, "stopped");
	return status;
}
