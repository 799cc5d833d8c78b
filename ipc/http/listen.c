/* SPDX-License-Identifier: MIT */
/*
 * listen.c - listen addresses: parse, loopback check, bind (see listen.h).
 */
#include "ipc/http/listen.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "util/errmsg.h"
#include "util/parse.h"

int kvp_http_listen_parse(const char *spec, struct sockaddr_storage *ss, socklen_t *len, char *err,
			  size_t cap)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	struct addrinfo *res = NULL;
	char host[256];
	const char *port, *end;
	uint64_t pv;
	int r;

	memset(ss, 0, sizeof(*ss));
	if (!strncmp(spec, "unix:", 5)) {
		struct sockaddr_un *un = (struct sockaddr_un *)ss;
		const char *path = spec + 5;

		if (path[0] != '/') {
			kvp_errmsg(err, cap, "%s: want unix:/absolute/path", spec);
			return -EINVAL;
		}
		if (strlen(path) >= sizeof(un->sun_path)) {
			kvp_errmsg(err, cap, "%s: path longer than %zu bytes", spec,
				   sizeof(un->sun_path) - 1);
			return -EINVAL;
		}
		un->sun_family = AF_UNIX;
		strcpy(un->sun_path, path);
		*len = sizeof(*un);
		return 0;
	}
	if (spec[0] == '[') {
		end = strchr(spec, ']');
		if (!end || end[1] != ':') {
			kvp_errmsg(err, cap, "%s: want [IPV6]:PORT", spec);
			return -EINVAL;
		}
		spec++;
		port = end + 2;
		hints.ai_family = AF_INET6;
		hints.ai_flags |= AI_NUMERICHOST;
	} else {
		end = strrchr(spec, ':');
		if (!end || end == spec) {
			kvp_errmsg(err, cap, "%s: want HOST:PORT, [IPV6]:PORT or unix:PATH", spec);
			return -EINVAL;
		}
		if (memchr(spec, ':', (size_t)(end - spec))) {
			kvp_errmsg(err, cap, "%s: put an IPv6 address in brackets: [ADDR]:PORT",
				   spec);
			return -EINVAL;
		}
		port = end + 1;
	}
	if ((size_t)(end - spec) >= sizeof(host)) {
		kvp_errmsg(err, cap, "%s: host name too long", spec);
		return -EINVAL;
	}
	if (kvp_parse_u64(port, 0, 65535, &pv) < 0) {
		kvp_errmsg(err, cap, "%s: '%s' is not a port (0..65535)", spec, port);
		return -EINVAL;
	}
	memcpy(host, spec, (size_t)(end - spec));
	host[end - spec] = '\0';
	r = getaddrinfo(host, port, &hints, &res);
	if (r || !res) {
		kvp_errmsg(err, cap, "%s: %s", spec, r ? gai_strerror(r) : "no address");
		if (res)
			freeaddrinfo(res);
		return -EINVAL;
	}
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	*len = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

bool kvp_http_addr_is_local(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_UNIX)
		return true;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;

		return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
	}
	if (sa->sa_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;

		if (IN6_IS_ADDR_LOOPBACK(a))
			return true;
		return IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127;
	}
	return false;
}

/* Remove a unix socket file nobody accepts on any more.  Return: 0 or -errno. */
static int clear_stale(const struct sockaddr_un *un)
{
	struct stat st;
	int fd, r;

	if (lstat(un->sun_path, &st) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISSOCK(st.st_mode))
		return -EEXIST;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	r = connect(fd, (const struct sockaddr *)un, sizeof(*un));
	close(fd);
	if (r == 0)
		return -EADDRINUSE; /* someone serves it */
	return unlink(un->sun_path) < 0 ? -errno : 0;
}

/* @l->name from the bound address (the port the kernel chose for :0 included). */
static void describe(struct kvp_http_listener *l)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	char ip[INET6_ADDRSTRLEN];

	if (l->family == AF_UNIX) {
		snprintf(l->name, sizeof(l->name), "unix:%s", l->unix_path);
		return;
	}
	if (getsockname(l->fd, (struct sockaddr *)&ss, &len) < 0) {
		snprintf(l->name, sizeof(l->name), "?");
		return;
	}
	if (ss.ss_family == AF_INET6) {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;

		inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof(ip));
		snprintf(l->name, sizeof(l->name), "http://[%s]:%u", ip, ntohs(in6->sin6_port));
	} else {
		struct sockaddr_in *in = (struct sockaddr_in *)&ss;

		inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
		snprintf(l->name, sizeof(l->name), "http://%s:%u", ip, ntohs(in->sin_port));
	}
}

int kvp_http_listen_open(struct kvp_http_listener *l, const char *spec, bool have_keys, int backlog,
			 char *err, size_t cap)
{
	struct sockaddr_storage ss;
	socklen_t len;
	char why[256];
	int one = 1;
	int r;

	*l = (struct kvp_http_listener){ .fd = -1 };
	r = kvp_http_listen_parse(spec, &ss, &len, why, sizeof(why));
	if (r) {
		kvp_errmsg(err, cap, "listen %s", why);
		return r;
	}
	if (!have_keys && !kvp_http_addr_is_local((struct sockaddr *)&ss)) {
		kvp_errmsg(err, cap,
			   "listen %s: not a loopback address; listening beyond this host needs "
			   "API keys (--api-keys)",
			   spec);
		return -EPERM;
	}
	l->family = ss.ss_family;
	if (l->family == AF_UNIX) {
		r = clear_stale((struct sockaddr_un *)&ss);
		if (r) {
			kvp_errmsg(err, cap, "listen %s: %s", spec,
				   r == -EADDRINUSE ? "another server accepts on it" :
				   r == -EEXIST	    ? "the path exists and is not a socket" :
						      strerror(-r));
			return r;
		}
	}
	l->fd = socket(l->family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (l->fd < 0) {
		r = -errno;
		kvp_errmsg(err, cap, "listen %s: socket: %s", spec, strerror(-r));
		return r;
	}
	if (l->family != AF_UNIX)
		setsockopt(l->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (l->family == AF_INET6)
		setsockopt(l->fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	if (bind(l->fd, (struct sockaddr *)&ss, len) < 0) {
		r = -errno;
		kvp_errmsg(err, cap, "listen %s: bind: %s", spec, strerror(-r));
		goto err_close;
	}
	if (l->family == AF_UNIX) {
		strcpy(l->unix_path, ((struct sockaddr_un *)&ss)->sun_path);
		if (chmod(l->unix_path, 0660) < 0) {
			r = -errno;
			kvp_errmsg(err, cap, "listen %s: chmod: %s", spec, strerror(-r));
			goto err_close;
		}
	}
	if (listen(l->fd, backlog) < 0) {
		r = -errno;
		kvp_errmsg(err, cap, "listen %s: %s", spec, strerror(-r));
		goto err_close;
	}
	describe(l);
	return 0;

err_close:
	kvp_http_listen_close(l);
	return r;
}

void kvp_http_listen_close(struct kvp_http_listener *l)
{
	if (l->fd >= 0)
		close(l->fd);
	l->fd = -1;
	if (l->unix_path[0])
		unlink(l->unix_path);
	l->unix_path[0] = '\0';
}
