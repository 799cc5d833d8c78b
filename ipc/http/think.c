/* SPDX-License-Identifier: MIT */
/*
 * think.c - a reasoning block split off the front of generated text (see think.h).
 *
 * Invariant: @held is the text not released yet, and is what a later byte may still
 * change the meaning of: in START the whole text so far (whitespace, then a proper prefix
 * of "<think>"); in REASON a run of newlines followed by a proper prefix of "</think>"
 * (either may be empty); empty in every other state.  Each feed appends the new bytes to
 * @held and walks it once.
 */
#include "ipc/http/think.h"

#include <string.h>

#define OPEN_LEN (sizeof(KVP_HTTP_THINK_OPEN) - 1)
#define CLOSE_LEN (sizeof(KVP_HTTP_THINK_CLOSE) - 1)

void kvp_http_think_init(struct kvp_http_think *t)
{
	*t = (struct kvp_http_think){ .state = KVP_HTTP_THINK_START, .held = KVP_BUF_INIT };
}

void kvp_http_think_deinit(struct kvp_http_think *t)
{
	kvp_buf_deinit(&t->held);
}

static bool is_space(char c)
{
	return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

/* Bytes at the end of @p (@n) that may grow into "</think>", with the newlines before them. */
static size_t reason_tail(const char *p, size_t n)
{
	size_t k = n < CLOSE_LEN - 1 ? n : CLOSE_LEN - 1;

	for (; k; k--)
		if (!memcmp(p + n - k, KVP_HTTP_THINK_CLOSE, k))
			break;
	while (k < n && p[n - k - 1] == '\n')
		k++;
	return k;
}

/* Moves *@i past a run of newlines (the template's trim); false when that ends the piece. */
static bool skip_newlines(const char *p, size_t n, size_t *i)
{
	while (*i < n && p[*i] == '\n')
		(*i)++;
	return *i < n;
}

/* Walk @p (@n bytes, the held text and the new) from the current state. */
static void walk(struct kvp_http_think *t, const char *p, size_t n, struct kvp_buf *reason,
		 struct kvp_buf *answer, struct kvp_buf *keep)
{
	size_t i = 0;

	if (t->state == KVP_HTTP_THINK_START) {
		size_t w = 0, m;

		while (w < n && is_space(p[w]))
			w++;
		m = n - w < OPEN_LEN ? n - w : OPEN_LEN;
		if (memcmp(p + w, KVP_HTTP_THINK_OPEN, m)) {
			t->state = KVP_HTTP_THINK_ANSWER; /* no block: all of it is the answer */
		} else if (m < OPEN_LEN) {
			kvp_buf_add(keep, p, n); /* still may be "<think>" */
			return;
		} else {
			t->state = KVP_HTTP_THINK_LEAD;
			t->opened = true;
			i = w + OPEN_LEN;
		}
	}
	if (t->state == KVP_HTTP_THINK_LEAD) {
		if (!skip_newlines(p, n, &i))
			return;
		t->state = KVP_HTTP_THINK_REASON;
	}
	if (t->state == KVP_HTTP_THINK_REASON) {
		const char *end = memmem(p + i, n - i, KVP_HTTP_THINK_CLOSE, CLOSE_LEN);

		if (!end) {
			size_t tail = reason_tail(p + i, n - i);

			kvp_buf_add(reason, p + i, n - i - tail);
			kvp_buf_add(keep, p + n - tail, tail);
			return;
		}
		{
			size_t r = (size_t)(end - p);

			while (r > i && p[r - 1] == '\n')
				r--;
			kvp_buf_add(reason, p + i, r - i);
		}
		i = (size_t)(end - p) + CLOSE_LEN;
		t->state = KVP_HTTP_THINK_AFTER;
	}
	if (t->state == KVP_HTTP_THINK_AFTER) {
		if (!skip_newlines(p, n, &i))
			return;
		t->state = KVP_HTTP_THINK_ANSWER;
	}
	kvp_buf_add(answer, p + i, n - i);
}

void kvp_http_think_feed(struct kvp_http_think *t, const char *text, size_t len,
			 struct kvp_buf *reason, struct kvp_buf *answer)
{
	struct kvp_buf keep = KVP_BUF_INIT;

	if (!len)
		return;
	if (t->state == KVP_HTTP_THINK_ANSWER) { /* the common case: nothing to look at */
		kvp_buf_add(answer, text, len);
		return;
	}
	kvp_buf_add(&t->held, text, len);
	if (t->held.err) { /* out of memory: the answer says so */
		kvp_buf_fail(answer, t->held.err);
		return;
	}
	walk(t, t->held.p, t->held.len, reason, answer, &keep);
	kvp_buf_deinit(&t->held);
	t->held = keep;
}

void kvp_http_think_flush(struct kvp_http_think *t, struct kvp_buf *reason, struct kvp_buf *answer)
{
	const char *p = t->held.p;
	size_t n = t->held.len;

	if (t->state == KVP_HTTP_THINK_START) {
		if (n)
			kvp_buf_add(answer, p, n);
		t->state = KVP_HTTP_THINK_ANSWER;
	} else if (t->state == KVP_HTTP_THINK_REASON) {
		while (n && p[n - 1] == '\n')
			n--;
		if (n)
			kvp_buf_add(reason, p, n);
	}
	t->held.len = 0;
}
