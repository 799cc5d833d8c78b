/* SPDX-License-Identifier: MIT */
/*
 * httpd.c - the kvpool-http fixture of the integration tests (see httpd.h).
 */
#include "tests/integration/httpd.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/lib/testlib.h"

int httpd_start(struct httpd *h, const char *dir, const char *sock, const char *const *args,
		double timeout_s)
{
	static int n_started;
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	const char *argv[64];
	char bin[512];
	int argc = 0, r;
	double t_end;

	memset(h, 0, sizeof(*h));
	r = kvp_test_build_path(bin, sizeof(bin), "ipc/http/kvpool-http");
	if (r < 0)
		return r;
	n_started++;
	snprintf(h->log, sizeof(h->log), "%s/http-%d.log", dir, n_started);
	snprintf(h->notify, sizeof(h->notify), "%s/http-notify-%d.sock", dir, n_started);
	h->notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (h->notify_fd < 0)
		return -errno;
	if (strlen(h->notify) >= sizeof(a.sun_path))
		return -ENAMETOOLONG;
	strcpy(a.sun_path, h->notify);
	if (bind(h->notify_fd, (struct sockaddr *)&a, sizeof(a)) < 0)
		return -errno;
	argv[argc++] = bin;
	argv[argc++] = "--socket";
	argv[argc++] = sock;
	while (args && *args && argc < 62)
		argv[argc++] = *args++;
	argv[argc] = NULL;
	h->pid = fork();
	if (h->pid < 0)
		return -errno;
	if (h->pid == 0) {
		int fd = open(h->log, O_WRONLY | O_CREAT | O_APPEND, 0600);

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (fd >= 0) {
			dup2(fd, STDERR_FILENO);
			dup2(fd, STDOUT_FILENO);
		}
		setenv("NOTIFY_SOCKET", h->notify, 1);
		unsetenv("JOURNAL_STREAM");
		execv(bin, (char *const *)argv);
		_exit(127);
	}
	t_end = kvp_test_now_s() + timeout_s;
	while (kvp_test_now_s() < t_end) {
		struct pollfd p = { .fd = h->notify_fd, .events = POLLIN };
		char msg[512];
		int st;

		if (poll(&p, 1, 50) > 0) {
			ssize_t n = recv(h->notify_fd, msg, sizeof(msg) - 1, 0);

			if (n > 0) {
				char *log, *at;

				msg[n] = '\0';
				if (!strstr(msg, "READY=1"))
					continue;
				log = kvp_test_read_file(h->log, NULL);
				at = log ? strstr(log, "listening on http://") : NULL;
				if (at) {
					char *end = strpbrk(at + 13, " \n");
					size_t len = end ? (size_t)(end - (at + 13)) :
							   strlen(at + 13);

					if (len < sizeof(h->url)) {
						memcpy(h->url, at + 13, len);
						h->url[len] = '\0';
					}
					at = strrchr(h->url, ':');
					h->port = at ? atoi(at + 1) : 0;
				}
				free(log);
				return 0;
			}
		}
		if (waitpid(h->pid, &st, WNOHANG) == h->pid) {
			h->exit_status = st;
			h->pid = 0;
			return -ECHILD;
		}
	}
	return -ETIMEDOUT;
}

int httpd_start_conf(struct httpd *h, const char *dir, const char *sock, const char *conf,
		     const char *const *args, const char *fmt, ...)
{
	FILE *c = fopen(conf, "w");
	va_list ap;
	int bad;

	if (!c) {
		fprintf(stderr, "httpd: %s: %s\n", conf, strerror(errno));
		return -1;
	}
	va_start(ap, fmt);
	bad = vfprintf(c, fmt, ap) < 0;
	va_end(ap);
	bad |= fclose(c) != 0;
	if (bad || httpd_start(h, dir, sock, args, 30) < 0 || !h->port) {
		httpd_dump_log(h);
		return -1;
	}
	return 0;
}

int httpd_wait(struct httpd *h, double timeout_s)
{
	double t_end = kvp_test_now_s() + timeout_s;
	int st;

	if (!h->pid)
		return 0;
	while (kvp_test_now_s() < t_end) {
		if (waitpid(h->pid, &st, WNOHANG) == h->pid) {
			h->exit_status = st;
			h->pid = 0;
			if (h->notify_fd >= 0)
				close(h->notify_fd);
			h->notify_fd = -1;
			unlink(h->notify);
			return 0;
		}
		usleep(5000);
	}
	return -ETIMEDOUT;
}

int httpd_stop(struct httpd *h)
{
	if (!h->pid) {
		if (h->notify_fd > 0)
			close(h->notify_fd);
		h->notify_fd = -1;
		return h->exit_status;
	}
	kill(h->pid, SIGTERM);
	if (httpd_wait(h, 30) < 0) {
		kill(h->pid, SIGKILL);
		httpd_wait(h, 10);
	}
	return h->exit_status;
}

int httpd_stop_clean(struct httpd *h)
{
	int st = httpd_stop(h);

	if (!WIFEXITED(st) || WEXITSTATUS(st)) {
		fprintf(stderr, "kvpool-http did not stop cleanly: wait status %#x\n", st);
		httpd_dump_log(h);
		return -1;
	}
	return 0;
}

bool httpd_log_has(struct httpd *h, const char *needle)
{
	char *log = kvp_test_read_file(h->log, NULL);
	bool found = log && strstr(log, needle);

	free(log);
	return found;
}

void httpd_dump_log(struct httpd *h)
{
	char *log = kvp_test_read_file(h->log, NULL);

	fprintf(stderr, "---- kvpool-http log ----\n%s", log ? log : "(none)\n");
	free(log);
}

long httpd_rss_kib(struct httpd *h)
{
	char path[64], line[256];
	long kib = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)h->pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "VmRSS:", 6))
			kib = strtol(line + 6, NULL, 10);
	fclose(f);
	return kib;
}
