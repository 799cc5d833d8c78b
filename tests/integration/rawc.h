/* SPDX-License-Identifier: MIT */
/*
 * rawc.h - raw TCP for the HTTP framing and slow-client tests: connect from a chosen
 * loopback source address (127.0.0.0/8 is all this host's, so one test can play many
 * clients), send bytes, read until the server closes, count the responses in what came.
 */
#ifndef KVP_TESTS_RAWC_H
#define KVP_TESTS_RAWC_H

#include <stdbool.h>
#include <stddef.h>

/* Connect to 127.0.0.1:@port from @src (an IPv4 loopback address, or NULL: any).
 * Return: the socket (non-blocking when @nonblock), or -errno. */
int rawc_connect(int port, const char *src, bool nonblock);

/* Write all of @n bytes of @p (a blocking socket).  Return 0 or -errno. */
int rawc_send(int fd, const void *p, size_t n);

/*
 * rawc_read_all() - read until EOF, a reset or @timeout_s, into @buf (NUL-terminated,
 * at most @cap - 1 bytes kept; more is read and dropped)
 * @closed: out; the server closed (EOF or reset) before the timeout
 * Return: bytes kept.
 */
size_t rawc_read_all(int fd, char *buf, size_t cap, double timeout_s, bool *closed);

/* Responses in @p: status lines "HTTP/1.x NNN " anywhere (a body need not end in a
 * newline, so the next response may follow it on the same line). */
int rawc_count_status(const char *p);

/* The status code of the first response in @p, or 0. */
int rawc_first_status(const char *p);

/* Whether the server closed @fd within @timeout_s (EOF or reset; data is read and dropped). */
bool rawc_closed_within(int fd, double timeout_s);

#endif /* KVP_TESTS_RAWC_H */
