/* SPDX-License-Identifier: MIT */
/*
 * stop.c - stop strings over streamed text (see stop.h).
 *
 * Invariant: @held never contains a whole stop string, and when @hit is false it is the
 * longest tail of the text so far that is a proper prefix of some stop string (so it is
 * shorter than the longest stop string).  Each feed therefore scans at most the new
 * bytes plus that tail.
 */
#include "ipc/http/stop.h"

#include <string.h>

void kvp_http_stop_init(struct kvp_http_stop *s, char *const *stops, const size_t *lens, size_t n)
{
	*s = (struct kvp_http_stop){ .stops = stops, .lens = lens, .n = n, .held = KVP_BUF_INIT };
}

void kvp_http_stop_deinit(struct kvp_http_stop *s)
{
	kvp_buf_deinit(&s->held);
}

/* The longest k < lens[i] such that @p (@n bytes) ends with the first k bytes of stop i. */
static size_t partial_tail(const struct kvp_http_stop *s, const char *p, size_t n)
{
	size_t best = 0;

	for (size_t i = 0; i < s->n; i++) {
		size_t k = s->lens[i] - 1 < n ? s->lens[i] - 1 : n;

		for (; k > best; k--)
			if (!memcmp(p + n - k, s->stops[i], k))
				break;
		if (k > best)
			best = k;
	}
	return best;
}

bool kvp_http_stop_feed(struct kvp_http_stop *s, const char *text, size_t len, struct kvp_buf *out)
{
	const char *p;
	size_t n, first = (size_t)-1, keep;

	if (s->hit)
		return true;
	if (!len)
		return false;
	if (!s->n) {
		kvp_buf_add(out, text, len);
		return false;
	}
	kvp_buf_add(&s->held, text, len);
	if (s->held.err) {
		kvp_buf_fail(out, s->held.err);
		return false;
	}
	p = s->held.p;
	n = s->held.len;
	for (size_t i = 0; i < s->n; i++) {
		const char *m = memmem(p, n, s->stops[i], s->lens[i]);

		if (m && (size_t)(m - p) < first) {
			first = (size_t)(m - p);
			s->which = i;
		}
	}
	if (first != (size_t)-1) {
		kvp_buf_add(out, p, first);
		s->hit = true;
		s->held.len = 0;
		s->held.p[0] = '\0';
		return true;
	}
	keep = partial_tail(s, p, n);
	kvp_buf_add(out, p, n - keep);
	memmove(s->held.p, p + n - keep, keep);
	s->held.len = keep;
	s->held.p[keep] = '\0'; /* kvp_buf's invariant: NUL-terminated */
	return false;
}

void kvp_http_stop_flush(struct kvp_http_stop *s, struct kvp_buf *out)
{
	if (!s->hit && s->held.len)
		kvp_buf_add(out, s->held.p, s->held.len);
	if (s->held.p)
		s->held.p[0] = '\0';
	s->held.len = 0;
}
