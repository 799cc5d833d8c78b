/* SPDX-License-Identifier: MIT */
/*
 * listen.h - kvpool-http's listen addresses: "HOST:PORT" ("[v6]:PORT" for IPv6; a host
 * name takes the first address it resolves to) or "unix:PATH", parsed, checked and
 * bound into a non-blocking listening socket that the HTTP library then serves.
 *
 * Without API keys only loopback addresses (127.0.0.0/8, ::1) and unix: sockets are
 * allowed: the front would otherwise serve anyone who can reach the port.
 *
 * Thread: main, before the server starts and after it stops.
 */
#ifndef KVP_IPC_HTTP_LISTEN_H
#define KVP_IPC_HTTP_LISTEN_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

/**
 * struct kvp_http_listener - one bound listening socket
 * @fd:        the socket (-1 when closed)
 * @family:    AF_INET, AF_INET6 or AF_UNIX
 * @name:      how to reach it, for the log: "http://127.0.0.1:8080" or "unix:/path"
 * @unix_path: the socket file to remove on close ("" for TCP)
 */
struct kvp_http_listener {
	int fd;
	int family;
	char name[320];
	char unix_path[108];
};

/**
 * kvp_http_listen_parse() - @spec as a socket address
 * @ss, @len: out; the address
 * Return: 0, or -EINVAL (@err says why, e.g. a host that does not resolve).
 */
int kvp_http_listen_parse(const char *spec, struct sockaddr_storage *ss, socklen_t *len, char *err,
			  size_t cap);

/* Whether @sa is a loopback address (127.0.0.0/8, ::1, ::ffff:127.0.0.0/104) or AF_UNIX. */
bool kvp_http_addr_is_local(const struct sockaddr *sa);

/**
 * kvp_http_listen_open() - parse @spec, check it, bind and listen
 * @l:         out; set up on success (@l->fd >= 0), closed (-1) on failure
 * @have_keys: API keys are configured: any address is allowed
 * @backlog:   listen(2) backlog
 *
 * A unix: path left by a dead process (nothing accepts on it) is replaced; a live one
 * is an error.  Unix sockets get mode 0660.
 * Return: 0, or -errno (@err names the address and says why).
 */
int kvp_http_listen_open(struct kvp_http_listener *l, const char *spec, bool have_keys, int backlog,
			 char *err, size_t cap);

/* Close the socket and remove its unix: path; safe on a closed listener. */
void kvp_http_listen_close(struct kvp_http_listener *l);

#endif /* KVP_IPC_HTTP_LISTEN_H */
