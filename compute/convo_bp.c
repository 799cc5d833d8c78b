/* SPDX-License-Identifier: MIT */
/*
 * convo_bp.c - message breakpoints onto prompt-token positions (see convo_bp.h).
 *
 * Thread: any (no state).
 */
#include "compute/convo_bp.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util/errmsg.h"

#define BPS_MAX 64 /* more than any caller's (KVP_CACHE_BREAKPOINTS_MAX is 4) */

/* The position of the prefix ending after message @k of @cv (@k < n_msgs): >= 1. */
static int position(uint32_t *out, const struct kvp_tokenizer *tok,
		    const struct kvp_chat_template *tmpl, const struct kvp_convo *cv, uint32_t k,
		    const int32_t *ids, uint32_t n_ids, uint32_t max_ids)
{
	struct kvp_convo sub = *cv;
	char why[256] = "";
	int32_t *sub_ids;
	uint32_t n_sub, lcp = 0;
	int r;

	sub.n_msgs = k;
	/* the prefix ends with message k's turn, not with a reply's header */
	sub.no_generation_prompt = true;
	/* a context covering more than the k messages says nothing of their own ids */
	if (k < cv->context_msgs) {
		sub.context = NULL;
		sub.n_context = 0;
		sub.context_msgs = 0;
	}
	r = kvp_convo_prompt(&sub_ids, &n_sub, tok, tmpl, &sub, max_ids, why, sizeof(why));
	if (r == -EINVAL) {
		/*
		 * The whole conversation rendered, so the template takes it; the first k
		 * messages it does not render on their own, or render to nothing: Llama 2
		 * writes the system prompt inside the next user turn.  They have no ids of
		 * their own to end at: the breakpoint covers only the first token.
		 */
		*out = 1;
		return 0;
	}
	if (r < 0)
		return r;
	while (lcp < n_sub && lcp < n_ids && sub_ids[lcp] == ids[lcp])
		lcp++;
	free(sub_ids);
	*out = lcp ? lcp : 1; /* a breakpoint covers at least the first token */
	return 0;
}

int kvp_convo_breakpoints(uint32_t *bps, uint32_t *weights, uint32_t *n,
			  const struct kvp_tokenizer *tok, const struct kvp_chat_template *tmpl,
			  const struct kvp_convo *cv, const int32_t *ids, uint32_t n_ids,
			  uint32_t max_ids, char *err, size_t errlen)
{
	uint32_t pos[BPS_MAX], w[BPS_MAX], m = 0;
	int r;

	if (*n > BPS_MAX || !n_ids) {
		kvp_errmsg(err, errlen, "chat: too many cache breakpoints or an empty prompt");
		return -EINVAL;
	}
	for (uint32_t i = 0; i < *n; i++) {
		uint32_t k = bps[i], p;

		if (!k || k > cv->n_msgs || (i && k <= bps[i - 1])) {
			kvp_errmsg(err, errlen,
				   "chat: cache breakpoint after message %u: must be increasing "
				   "and within the %zu messages",
				   k, cv->n_msgs);
			return -EINVAL;
		}
		if (k == cv->n_msgs) {
			p = n_ids; /* the whole conversation: the prompt itself */
		} else {
			r = position(&p, tok, tmpl, cv, k, ids, n_ids, max_ids);
			if (r < 0)
				return r;
		}
		/* a later message never ends before an earlier one */
		if (m && p < pos[m - 1])
			p = pos[m - 1];
		if (m && p == pos[m - 1]) {
			if (weights && weights[i] > w[m - 1])
				w[m - 1] = weights[i];
			continue;
		}
		pos[m] = p;
		w[m] = weights ? weights[i] : 0;
		m++;
	}
	for (uint32_t i = 0; i < *n; i++) {
		bps[i] = i < m ? pos[i] : 0;
		if (weights)
			weights[i] = i < m ? w[i] : 0;
	}
	*n = m;
	return 0;
}
