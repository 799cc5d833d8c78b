/* SPDX-License-Identifier: MIT */
/*
 * breaker.h - a circuit breaker: after repeated connection errors a domain's store is
 * treated as gone, so requests fail at once instead of each waiting out a deadline, and
 * a probe (connect, AUTH, PING) brings it back.
 *
 *	CLOSED  --@threshold consecutive failures-->  OPEN
 *	OPEN    --probe interval elapsed--------------> PROBING (one probe in flight)
 *	PROBING --probe answered----------------------> CLOSED
 *	PROBING --probe failed------------------------> OPEN, the interval doubled (capped)
 *
 * A new breaker is OPEN with a probe due at once: nothing is sent to a store before it
 * answered once ("no store at start" is the same state as "store gone").
 * Pure state and arithmetic on times the caller passes: no clock, no I/O, no locks (the
 * owner locks).
 */
#ifndef KVP_SHM_REMOTE_BREAKER_H
#define KVP_SHM_REMOTE_BREAKER_H

#include <stdbool.h>
#include <stdint.h>

enum kvp_breaker_state {
	KVP_BREAKER_CLOSED = 0,
	KVP_BREAKER_OPEN = 1,
	KVP_BREAKER_PROBING = 2,
};

/**
 * struct kvp_breaker - one breaker
 * @state:         enum kvp_breaker_state
 * @fails:         consecutive failures while CLOSED
 * @threshold:     failures that open it
 * @probe_ns:      first probe interval after opening
 * @probe_max_ns:  the interval doubles on each failed probe up to this
 * @backoff_ns:    current interval
 * @next_probe_ns: when the next probe is due (OPEN)
 * @opened_ns:     when it last opened
 * @opens:         times it opened (the initial state is not counted)
 * @probes:        probes started
 * @probes_done:   probes finished (either way)
 */
struct kvp_breaker {
	uint32_t state;
	uint32_t fails;
	uint32_t threshold;
	uint64_t probe_ns;
	uint64_t probe_max_ns;
	uint64_t backoff_ns;
	uint64_t next_probe_ns;
	uint64_t opened_ns;
	uint64_t opens;
	uint64_t probes;
	uint64_t probes_done;
};

/* OPEN, a probe due at @now_ns.  @threshold >= 1, @probe_ns <= @probe_max_ns. */
void kvp_breaker_init(struct kvp_breaker *b, uint32_t threshold, uint64_t probe_ns,
		      uint64_t probe_max_ns, uint64_t now_ns);

/* May requests use the store? (CLOSED) */
static inline bool kvp_breaker_closed(const struct kvp_breaker *b)
{
	return b->state == KVP_BREAKER_CLOSED;
}

/* An operation succeeded: the failure count starts over. */
void kvp_breaker_success(struct kvp_breaker *b);

/* A connection error (refused, reset, stalled, timed out).  Return: true when this one
 * opened the breaker. */
bool kvp_breaker_failure(struct kvp_breaker *b, uint64_t now_ns);

/* Is a probe due?  If so the breaker is PROBING from now on and true is returned: the
 * caller probes and reports with kvp_breaker_probe_done(). */
bool kvp_breaker_probe_due(struct kvp_breaker *b, uint64_t now_ns);

/* The probe answered (@ok) or failed. */
void kvp_breaker_probe_done(struct kvp_breaker *b, bool ok, uint64_t now_ns);

/* When the breaker next needs the caller (a probe due), or UINT64_MAX. */
uint64_t kvp_breaker_next_ns(const struct kvp_breaker *b);

/* "closed", "open", "probing". */
const char *kvp_breaker_state_name(uint32_t state);

#endif /* KVP_SHM_REMOTE_BREAKER_H */
