/* SPDX-License-Identifier: MIT */
/*
 * reqlog.c - one log line and the latency histograms per ended request (see reqlog.h).
 *
 * The receipt times live in an open-addressing table with linear probing and
 * backward-shift deletion (no tombstones), grown at 1/2 load; it holds one entry per
 * request in flight, which the engine's queue bounds.
 *
 * Thread: the loop thread.
 */
#include "svc/reqlog.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

struct kvp_reqlog_slot {
	uint64_t conn;
	uint64_t req_id; /* 0: empty (ipc/ never passes request id 0) */
	uint64_t t_recv_ns;
};

static const char *const status_words[] = {
	[KVP_OK] = "ok",
	[KVP_E_PROTO] = "proto",
	[KVP_E_VERSION] = "version",
	[KVP_E_LIMIT] = "limit",
	[KVP_E_INVALID] = "invalid",
	[KVP_E_NOSPACE] = "nospace",
	[KVP_E_BUSY] = "busy",
	[KVP_E_CANCELLED] = "cancelled",
	[KVP_E_INTERNAL] = "internal",
	[KVP_E_SHUTDOWN] = "shutdown",
};

const char *kvp_reqlog_status_word(uint32_t status)
{
	if (status < sizeof(status_words) / sizeof(status_words[0]) && status_words[status])
		return status_words[status];
	return "unknown";
}

void kvp_reqlog_init(struct kvp_reqlog *rl)
{
	memset(rl, 0, sizeof(*rl));
	rl->enabled = true;
}

void kvp_reqlog_deinit(struct kvp_reqlog *rl)
{
	free(rl->slots);
	rl->slots = NULL;
	rl->cap = rl->n = 0;
}

static size_t slot_of(uint64_t conn, uint64_t req_id, size_t cap)
{
	uint64_t h = conn * 0x9e3779b97f4a7c15ull ^ req_id * 0xc2b2ae3d27d4eb4full;

	h ^= h >> 29;
	return (size_t)(h & (cap - 1));
}

static int grow(struct kvp_reqlog *rl)
{
	size_t cap = rl->cap ? rl->cap * 2 : 64;
	struct kvp_reqlog_slot *s = calloc(cap, sizeof(*s));

	if (!s)
		return -ENOMEM;
	for (size_t i = 0; i < rl->cap; i++) {
		const struct kvp_reqlog_slot *o = &rl->slots[i];
		size_t j;

		if (!o->req_id)
			continue;
		for (j = slot_of(o->conn, o->req_id, cap); s[j].req_id; j = (j + 1) & (cap - 1))
			;
		s[j] = *o;
	}
	free(rl->slots);
	rl->slots = s;
	rl->cap = cap;
	return 0;
}

int kvp_reqlog_start(struct kvp_reqlog *rl, uint64_t conn, uint64_t req_id, uint64_t t_recv_ns)
{
	size_t i;

	if (!req_id)
		return -EINVAL;
	if ((rl->n + 1) * 2 > rl->cap && grow(rl) < 0)
		return -ENOMEM;
	for (i = slot_of(conn, req_id, rl->cap); rl->slots[i].req_id; i = (i + 1) & (rl->cap - 1))
		if (rl->slots[i].conn == conn && rl->slots[i].req_id == req_id)
			break;
	if (!rl->slots[i].req_id)
		rl->n++;
	rl->slots[i] = (struct kvp_reqlog_slot){ conn, req_id, t_recv_ns };
	return 0;
}

/* Remove slot @i, shifting back the entries of its probe run.  */
static void remove_at(struct kvp_reqlog *rl, size_t i)
{
	size_t mask = rl->cap - 1, j = i;

	for (;;) {
		size_t home;

		j = (j + 1) & mask;
		if (!rl->slots[j].req_id)
			break;
		home = slot_of(rl->slots[j].conn, rl->slots[j].req_id, rl->cap);
		/* move j back to i unless its home lies cyclically in (i, j] */
		if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) {
			rl->slots[i] = rl->slots[j];
			i = j;
		}
	}
	rl->slots[i].req_id = 0;
	rl->n--;
}

/* The receipt time of (@conn, @req_id), forgotten; 0 when unknown. */
static uint64_t take(struct kvp_reqlog *rl, uint64_t conn, uint64_t req_id)
{
	uint64_t t;

	if (!rl->cap || !req_id)
		return 0;
	for (size_t i = slot_of(conn, req_id, rl->cap); rl->slots[i].req_id;
	     i = (i + 1) & (rl->cap - 1)) {
		if (rl->slots[i].conn == conn && rl->slots[i].req_id == req_id) {
			t = rl->slots[i].t_recv_ns;
			remove_at(rl, i);
			return t;
		}
	}
	return 0;
}

int kvp_reqlog_format(char *buf, size_t cap, uint64_t conn, uint64_t req_id,
		      const struct kvp_reqlog_who *who, const char *status,
		      const struct kvp_usage *u, double total_ms)
{
	static const struct kvp_usage none = { 0 };
	char client[2 * 32 + 1];
	size_t k = 0;

	/* logfmt quoting: the name is printable ASCII, but may hold spaces and quotes */
	for (const char *p = who && who->client ? who->client : ""; *p && k + 2 < sizeof(client);
	     p++) {
		if (*p == '"' || *p == '\\')
			client[k++] = '\\';
		client[k++] = *p;
	}
	client[k] = '\0';
	if (!u)
		u = &none;
	if (total_ms < 0)
		total_ms = u->generated_tokens ? (double)u->ttft_ms + u->decode_ms :
						 (double)u->queue_ms + u->prefill_ms;
	return snprintf(buf, cap,
			"id=%llu conn=%#llx client=\"%s\" uid=%ld status=%s prompt=%u cached=%u "
			"created=%u recomputed=%u generated=%u queue_ms=%.3f ttft_ms=%.3f "
			"total_ms=%.3f",
			(unsigned long long)req_id, (unsigned long long)conn, client,
			who ? (long)who->uid : -1L, status, u->prompt_tokens, u->cached_tokens,
			u->cache_creation_tokens, u->recomputed_tokens, u->generated_tokens,
			(double)u->queue_ms, (double)u->ttft_ms, total_ms);
}

static void log_line(struct kvp_reqlog *rl, uint64_t conn, uint64_t req_id,
		     const struct kvp_reqlog_who *who, const char *status,
		     const struct kvp_usage *u, uint64_t t_recv_ns, uint64_t now_ns)
{
	char line[512];

	if (!rl->enabled)
		return;
	kvp_reqlog_format(line, sizeof(line), conn, req_id, who, status, u,
			  t_recv_ns && now_ns >= t_recv_ns ? (double)(now_ns - t_recv_ns) / 1e6 :
							     -1.0);
	kvp_log(LOG_INFO, "request: %s", line);
}

void kvp_reqlog_end(struct kvp_reqlog *rl, uint64_t conn, uint64_t req_id,
		    const struct kvp_reqlog_who *who, enum kvp_status status,
		    const struct kvp_usage *u, uint64_t now_ns)
{
	uint64_t t = take(rl, conn, req_id);

	if (status == KVP_OK && u) {
		if (u->generated_tokens)
			kvp_hist_observe_ms(&rl->lat[KVP_LAT_TTFT], u->ttft_ms);
		kvp_hist_observe_ms(&rl->lat[KVP_LAT_QUEUE], u->queue_ms);
		kvp_hist_observe_ms(&rl->lat[KVP_LAT_PREFILL], u->prefill_ms);
		kvp_hist_observe_ms(&rl->lat[KVP_LAT_DECODE], u->decode_ms);
		log_line(rl, conn, req_id, who, kvp_reqlog_status_word(u->status), u, t, now_ns);
		return;
	}
	log_line(rl, conn, req_id, who, kvp_reqlog_status_word(status), NULL, t, now_ns);
}

void kvp_reqlog_conn_closed(struct kvp_reqlog *rl, uint64_t conn, const struct kvp_reqlog_who *who,
			    uint64_t now_ns)
{
	size_t i = 0;

	while (i < rl->cap) {
		struct kvp_reqlog_slot s = rl->slots[i];

		if (s.req_id && s.conn == conn) {
			remove_at(rl, i); /* may shift another entry into slot i: look again */
			log_line(rl, conn, s.req_id, who, "disconnected", NULL, s.t_recv_ns,
				 now_ns);
			continue;
		}
		i++;
	}
}
