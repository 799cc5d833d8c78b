/* SPDX-License-Identifier: MIT */
/*
 * redisfix.h - a private redis-server for the remote tier's tests and benchmark: started
 * in a temporary directory on a Unix socket and a free loopback TCP port, no
 * persistence, stopped (only this process) at the end.  Also an admin connection (the
 * server's default user) to set ACL users up and to tamper with values.
 */
#ifndef KVP_TESTS_REDISFIX_H
#define KVP_TESTS_REDISFIX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct redisContext;

#define REDISFIX_MAX_ARGS 16

/**
 * struct redisfix - one server
 * @dir:   its private directory (socket, log)
 * @sock:  the Unix socket
 * @port:  the TCP port on 127.0.0.1
 * @pid:   the server process, 0 when not running
 * @url_unix, @url_tcp: the tier's URLs for it
 * @extra, @n_extra: more redis-server arguments (e.g. "--maxmemory", "2mb")
 */
struct redisfix {
	char dir[256];
	char sock[300];
	uint16_t port;
	pid_t pid;
	char url_unix[320];
	char url_tcp[64];
	const char *extra[REDISFIX_MAX_ARGS];
	int n_extra;
};

/* Is redis-server on PATH? */
bool redisfix_available(void);

/**
 * redisfix_start() - make the directory, pick a port, start the server, wait for PING
 * @extra: NULL-terminated extra arguments, or NULL (kept for restarts)
 * Return: 0; -ENOENT without redis-server; -ETIMEDOUT when it did not answer in 5 s.
 */
int redisfix_start(struct redisfix *f, const char *const *extra);

/* Start it again (same socket, port and arguments) after a kill.  0 or -errno. */
int redisfix_restart(struct redisfix *f);

/* Send @sig to the server (SIGSTOP, SIGCONT, SIGKILL...); reaps it after SIGKILL. */
void redisfix_signal(struct redisfix *f, int sig);

/* Stop the server (SIGCONT, SIGTERM, then SIGKILL after 3 s) and remove the directory. */
void redisfix_stop(struct redisfix *f);

/* A blocking admin connection over the Unix socket (the default user); NULL on failure. */
struct redisContext *redisfix_admin(const struct redisfix *f);

/*
 * Run one command line, split on spaces (no quoting: for ACL lines and simple
 * commands), on @c.  Return: 0 when the reply is not an error; -EIO with the error's
 * text in @err (if given) otherwise.
 */
int redisfix_line(struct redisContext *c, const char *line, char *err, size_t errlen);

#endif /* KVP_TESTS_REDISFIX_H */
