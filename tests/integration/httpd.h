/* SPDX-License-Identifier: MIT */
/*
 * httpd.h - integration-test fixture: a real kvpool-http (the built binary) in front of a
 * kvpd fixture's kvpoold, started as systemd would (READY=1 on $NOTIFY_SOCKET) with its
 * log in the test's directory; the URL is read from its "listening on" line (tests ask
 * for port 0, so parallel runs never collide).
 */
#ifndef KVP_TESTS_HTTPD_H
#define KVP_TESTS_HTTPD_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct httpd {
	pid_t pid;	 /* 0 when not running */
	int exit_status; /* wait status once reaped */
	int notify_fd;
	char log[320];
	char notify[320];
	char url[128]; /* http://127.0.0.1:PORT */
	int port;
};

/**
 * httpd_start() - exec kvpool-http --socket @sock, then the NULL-terminated @args, with
 * its log in @dir; wait (up to @timeout_s) for READY=1
 * Return: 0 when ready (@h->url set when it listens on TCP); -ECHILD when it exited
 * first (see exit_status); -ETIMEDOUT; -errno.
 */
int httpd_start(struct httpd *h, const char *dir, const char *sock, const char *const *args,
		double timeout_s);

/**
 * httpd_start_conf() - write the printf-style @fmt to the config file @conf, then
 * httpd_start() with @args (which name @conf) and a 30 s limit; kvpool-http must listen
 * on TCP.  The fixtures' common start.
 * Return: 0 when ready; -1 after printing the log (a failed write, start or no port).
 */
int httpd_start_conf(struct httpd *h, const char *dir, const char *sock, const char *conf,
		     const char *const *args, const char *fmt, ...)
	__attribute__((format(printf, 6, 7)));

/* Wait for exit; 0 (exit_status set) or -ETIMEDOUT. */
int httpd_wait(struct httpd *h, double timeout_s);

/* SIGTERM and wait (SIGKILL after 30 s).  Return the wait status. */
int httpd_stop(struct httpd *h);

/*
 * httpd_stop_clean() - httpd_stop(), and say so when kvpool-http did not exit 0 (under
 * ASan: a leak makes it exit non-zero): the wait status and the log go to stderr.
 * Return: 0 after a clean exit, else -1.
 */
int httpd_stop_clean(struct httpd *h);

/* Whether the log contains @needle. */
bool httpd_log_has(struct httpd *h, const char *needle);

/* Print the log to stderr (after a failure). */
void httpd_dump_log(struct httpd *h);

/* VmRSS of the running process in KiB, or -1. */
long httpd_rss_kib(struct httpd *h);

#endif /* KVP_TESTS_HTTPD_H */
