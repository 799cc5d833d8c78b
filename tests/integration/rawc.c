/* SPDX-License-Identifier: MIT */
/*
 * rawc.c - raw TCP for the HTTP framing and slow-client tests (see rawc.h).
 */
#include "tests/integration/rawc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int rawc_connect(int port, const char *src, bool nonblock)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int one = 1;
	int fd, r;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (src) {
		struct sockaddr_in s = { .sin_family = AF_INET };

		if (inet_pton(AF_INET, src, &s.sin_addr) != 1) {
			close(fd);
			return -EINVAL;
		}
		if (bind(fd, (struct sockaddr *)&s, sizeof(s)) < 0) {
			r = -errno;
			close(fd);
			return r;
		}
	}
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		r = -errno;
		close(fd);
		return r;
	}
	if (nonblock)
		fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	return fd;
}

int rawc_send(int fd, const void *p, size_t n)
{
	const char *b = p;

	while (n) {
		ssize_t w = send(fd, b, n, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

size_t rawc_read_all(int fd, char *buf, size_t cap, double timeout_s, bool *closed)
{
	double end = now_s() + timeout_s;
	size_t len = 0;

	*closed = false;
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		double left = end - now_s();
		char drop[4096];
		ssize_t n;

		if (left <= 0)
			break;
		if (poll(&p, 1, (int)(left * 1000) + 1) <= 0)
			continue;
		if (len + 1 < cap)
			n = recv(fd, buf + len, cap - 1 - len, MSG_DONTWAIT);
		else
			n = recv(fd, drop, sizeof(drop), MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
			*closed = true;
			break;
		}
		if (n > 0 && len + 1 < cap)
			len += (size_t)n;
	}
	if (cap)
		buf[len] = '\0';
	return len;
}

/* "HTTP/1.x NNN " at @s */
static bool is_status_line(const char *s)
{
	return !strncmp(s, "HTTP/1.", 7) && s[7] && s[8] == ' ' && s[9] >= '1' && s[9] <= '5' &&
	       s[10] >= '0' && s[10] <= '9' && s[11] >= '0' && s[11] <= '9' && s[12] == ' ';
}

int rawc_count_status(const char *p)
{
	int n = 0;

	for (const char *s = strstr(p, "HTTP/1."); s; s = strstr(s + 1, "HTTP/1."))
		n += is_status_line(s);
	return n;
}

int rawc_first_status(const char *p)
{
	for (const char *s = strstr(p, "HTTP/1."); s; s = strstr(s + 1, "HTTP/1."))
		if (is_status_line(s))
			return atoi(s + 9);
	return 0;
}

bool rawc_closed_within(int fd, double timeout_s)
{
	char b[4096];
	bool closed;

	rawc_read_all(fd, b, sizeof(b), timeout_s, &closed);
	return closed;
}
