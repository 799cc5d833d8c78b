/* SPDX-License-Identifier: MIT */
/*
 * redisfix.c - a private redis-server for tests (see redisfix.h).
 */
#include "tests/lib/redisfix.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/lib/testlib.h"

bool redisfix_available(void)
{
	return system("command -v redis-server >/dev/null 2>&1") == 0;
}

/* A port nobody listens on right now (the kernel's pick; a race we retry). */
static uint16_t free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	uint16_t port = 0;

	if (fd < 0)
		return 0;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	close(fd);
	return port;
}

static void sleep_ms(unsigned int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

static int spawn(struct redisfix *f)
{
	char port[8], log[320];
	const char *argv[32 + REDISFIX_MAX_ARGS];
	int argc = 0;
	pid_t pid;

	snprintf(port, sizeof(port), "%u", f->port);
	snprintf(log, sizeof(log), "%s/redis.log", f->dir);
	argv[argc++] = "redis-server";
	argv[argc++] = "--port";
	argv[argc++] = port;
	argv[argc++] = "--bind";
	argv[argc++] = "127.0.0.1";
	argv[argc++] = "--unixsocket";
	argv[argc++] = f->sock;
	argv[argc++] = "--unixsocketperm";
	argv[argc++] = "700";
	argv[argc++] = "--dir";
	argv[argc++] = f->dir;
	argv[argc++] = "--logfile";
	argv[argc++] = log;
	argv[argc++] = "--save";
	argv[argc++] = "";
	argv[argc++] = "--appendonly";
	argv[argc++] = "no";
	argv[argc++] = "--daemonize";
	argv[argc++] = "no";
	for (int i = 0; i < f->n_extra; i++)
		argv[argc++] = f->extra[i];
	argv[argc] = NULL;

	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		int null = open("/dev/null", O_RDWR);

		if (null >= 0) {
			dup2(null, 0);
			dup2(null, 1);
			dup2(null, 2);
		}
		execvp("redis-server", (char *const *)argv);
		_exit(127);
	}
	f->pid = pid;
	return 0;
}

/* PING over the Unix socket until it answers, the server exits, or 5 s pass. */
static int wait_up(struct redisfix *f)
{
	for (int i = 0; i < 500; i++) {
		struct timeval tv = { 0, 200000 };
		redisContext *c = redisConnectUnixWithTimeout(f->sock, tv);
		int status;

		if (c && !c->err) {
			redisReply *rep = redisCommand(c, "PING");
			bool ok = rep && rep->type == REDIS_REPLY_STATUS;

			if (rep)
				freeReplyObject(rep);
			redisFree(c);
			if (ok)
				return 0;
		} else if (c) {
			redisFree(c);
		}
		if (waitpid(f->pid, &status, WNOHANG) == f->pid) {
			f->pid = 0;
			return -ECHILD;
		}
		sleep_ms(10);
	}
	return -ETIMEDOUT;
}

int redisfix_start(struct redisfix *f, const char *const *extra)
{
	int r;

	memset(f, 0, sizeof(*f));
	if (!redisfix_available())
		return -ENOENT;
	if (extra)
		for (; extra[f->n_extra] && f->n_extra < REDISFIX_MAX_ARGS; f->n_extra++)
			f->extra[f->n_extra] = extra[f->n_extra];
	r = kvp_test_tmpdir(f->dir, sizeof(f->dir));
	if (r < 0)
		return r;
	snprintf(f->sock, sizeof(f->sock), "%s/redis.sock", f->dir);
	snprintf(f->url_unix, sizeof(f->url_unix), "unix:%s", f->sock);
	for (int attempt = 0; attempt < 5; attempt++) {
		f->port = free_port();
		snprintf(f->url_tcp, sizeof(f->url_tcp), "redis://127.0.0.1:%u", f->port);
		r = spawn(f);
		if (r < 0)
			return r;
		r = wait_up(f);
		if (r == 0)
			return 0;
		redisfix_signal(f, SIGKILL); /* the port was taken meanwhile: another one */
	}
	return r;
}

int redisfix_restart(struct redisfix *f)
{
	int r;

	if (f->pid)
		return -EBUSY;
	r = spawn(f);
	return r < 0 ? r : wait_up(f);
}

void redisfix_signal(struct redisfix *f, int sig)
{
	if (!f->pid)
		return;
	kill(f->pid, sig);
	if (sig == SIGKILL) {
		waitpid(f->pid, NULL, 0);
		f->pid = 0;
	}
}

void redisfix_stop(struct redisfix *f)
{
	if (f->pid) {
		kill(f->pid, SIGCONT);
		kill(f->pid, SIGTERM);
		for (int i = 0; i < 300; i++) {
			if (waitpid(f->pid, NULL, WNOHANG) == f->pid) {
				f->pid = 0;
				break;
			}
			sleep_ms(10);
		}
		redisfix_signal(f, SIGKILL);
	}
	if (f->dir[0])
		kvp_test_rmtree(f->dir);
	f->dir[0] = '\0';
}

struct redisContext *redisfix_admin(const struct redisfix *f)
{
	struct timeval tv = { 2, 0 };
	redisContext *c = redisConnectUnixWithTimeout(f->sock, tv);

	if (c && c->err) {
		redisFree(c);
		return NULL;
	}
	if (c)
		redisSetTimeout(c, tv);
	return c;
}

int redisfix_line(struct redisContext *c, const char *line, char *err, size_t errlen)
{
	char buf[1024], *save = NULL;
	const char *argv[64];
	int argc = 0, ret = 0;
	redisReply *rep;

	snprintf(buf, sizeof(buf), "%s", line);
	for (char *t = strtok_r(buf, " ", &save); t && argc < 64; t = strtok_r(NULL, " ", &save))
		argv[argc++] = t;
	rep = redisCommandArgv(c, argc, argv, NULL);
	if (!rep) {
		if (err)
			snprintf(err, errlen, "%s", c->errstr);
		return -EIO;
	}
	if (rep->type == REDIS_REPLY_ERROR) {
		if (err)
			snprintf(err, errlen, "%s", rep->str);
		ret = -EIO;
	}
	freeReplyObject(rep);
	return ret;
}
