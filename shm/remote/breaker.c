/* SPDX-License-Identifier: MIT */
/*
 * breaker.c - the circuit breaker's state machine (see breaker.h).
 */
#include "shm/remote/breaker.h"

#include <string.h>

void kvp_breaker_init(struct kvp_breaker *b, uint32_t threshold, uint64_t probe_ns,
		      uint64_t probe_max_ns, uint64_t now_ns)
{
	memset(b, 0, sizeof(*b));
	b->state = KVP_BREAKER_OPEN;
	b->threshold = threshold ? threshold : 1;
	b->probe_ns = probe_ns;
	b->probe_max_ns = probe_max_ns < probe_ns ? probe_ns : probe_max_ns;
	b->backoff_ns = probe_ns;
	b->next_probe_ns = now_ns;
	b->opened_ns = now_ns;
}

void kvp_breaker_success(struct kvp_breaker *b)
{
	if (b->state == KVP_BREAKER_CLOSED)
		b->fails = 0;
}

static void open_at(struct kvp_breaker *b, uint64_t now_ns)
{
	b->state = KVP_BREAKER_OPEN;
	b->fails = 0;
	b->opened_ns = now_ns;
	b->opens++;
	b->backoff_ns = b->probe_ns;
	b->next_probe_ns = now_ns + b->backoff_ns;
}

bool kvp_breaker_failure(struct kvp_breaker *b, uint64_t now_ns)
{
	if (b->state != KVP_BREAKER_CLOSED)
		return false;
	if (++b->fails < b->threshold)
		return false;
	open_at(b, now_ns);
	return true;
}

bool kvp_breaker_probe_due(struct kvp_breaker *b, uint64_t now_ns)
{
	if (b->state != KVP_BREAKER_OPEN || now_ns < b->next_probe_ns)
		return false;
	b->state = KVP_BREAKER_PROBING;
	b->probes++;
	return true;
}

void kvp_breaker_probe_done(struct kvp_breaker *b, bool ok, uint64_t now_ns)
{
	if (b->state != KVP_BREAKER_PROBING)
		return;
	b->probes_done++;
	if (ok) {
		b->state = KVP_BREAKER_CLOSED;
		b->fails = 0;
		b->backoff_ns = b->probe_ns;
		return;
	}
	/* wait the current interval, then double it for the time after (capped) */
	b->state = KVP_BREAKER_OPEN;
	b->next_probe_ns = now_ns + b->backoff_ns;
	b->backoff_ns = b->backoff_ns > b->probe_max_ns / 2 ? b->probe_max_ns : b->backoff_ns * 2;
}

uint64_t kvp_breaker_next_ns(const struct kvp_breaker *b)
{
	return b->state == KVP_BREAKER_OPEN ? b->next_probe_ns : UINT64_MAX;
}

const char *kvp_breaker_state_name(uint32_t state)
{
	switch (state) {
	case KVP_BREAKER_CLOSED:
		return "closed";
	case KVP_BREAKER_OPEN:
		return "open";
	case KVP_BREAKER_PROBING:
		return "probing";
	}
	return "?";
}
