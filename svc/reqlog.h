/* SPDX-License-Identifier: MIT */
/*
 * reqlog.h - what the daemon records about each request that ends: one `info` log line
 * in plain key=value form (journald and grep read it alike) and the latency histograms
 * of the status report (TTFT, queue, prefill, decode time).
 *
 *	request: id=7 conn=0x100000002 client="kvpool/4242" uid=1000 status=ok prompt=12
 *	cached=0 created=0 recomputed=12 generated=32 queue_ms=0.120 ttft_ms=45.211
 *	total_ms=301.090
 *
 * (one line).  The receipt time of every request in flight is kept here, keyed by
 * connection and request id, so total_ms is receipt to the end as the loop thread saw
 * it.  daemon.request_log = no turns the lines off; the histograms are always kept.
 *
 * Thread: the loop thread.
 */
#ifndef KVP_SVC_REQLOG_H
#define KVP_SVC_REQLOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kvpool/proto.h"
#include "util/hist.h"

/* The histograms of the status report, by what they measure. */
enum kvp_lat {
	KVP_LAT_TTFT = 0, /* receipt to first token (requests that generated one) */
	KVP_LAT_QUEUE,	  /* receipt to admission */
	KVP_LAT_PREFILL,  /* the request's prefill compute */
	KVP_LAT_DECODE,	  /* first token to last */
	KVP_LAT__COUNT,
};

struct kvp_reqlog_slot;

/**
 * struct kvp_reqlog - log switch, histograms, receipt times of requests in flight
 * @enabled: write the log lines (daemon.request_log)
 * @lat:     one histogram per enum kvp_lat, over requests that ended with DONE
 * @slots, @cap, @n: open-addressing table of (connection, request id) -> receipt time
 */
struct kvp_reqlog {
	bool enabled;
	struct kvp_hist lat[KVP_LAT__COUNT];
	struct kvp_reqlog_slot *slots;
	size_t cap;
	size_t n;
};

/* Who sent a request, for its log line. */
struct kvp_reqlog_who {
	const char *client; /* HELLO's name, printable ASCII */
	uid_t uid;
};

/* Empty, logging on; nothing allocated yet. */
void kvp_reqlog_init(struct kvp_reqlog *rl);
void kvp_reqlog_deinit(struct kvp_reqlog *rl);

/*
 * Request (@conn, @req_id) was taken at @t_recv_ns.  Return: 0 or -ENOMEM (then its
 * line gives total_ms from the usage times instead).
 */
int kvp_reqlog_start(struct kvp_reqlog *rl, uint64_t conn, uint64_t req_id, uint64_t t_recv_ns);

/**
 * kvp_reqlog_end() - the request ended
 * @status: KVP_OK with @u for a DONE (@u->status says how it stopped); otherwise the
 *          ERROR's status, and @u NULL
 * @now_ns: when (CLOCK_MONOTONIC)
 * Forgets its receipt time, adds a DONE's times to the histograms, logs its line.
 */
void kvp_reqlog_end(struct kvp_reqlog *rl, uint64_t conn, uint64_t req_id,
		    const struct kvp_reqlog_who *who, enum kvp_status status,
		    const struct kvp_usage *u, uint64_t now_ns);

/*
 * The connection closed with requests in flight: each ends now, logged with
 * status=disconnected.
 */
void kvp_reqlog_conn_closed(struct kvp_reqlog *rl, uint64_t conn, const struct kvp_reqlog_who *who,
			    uint64_t now_ns);

/**
 * kvp_reqlog_format() - the line of one request, without the subsystem prefix
 * @total_ms: receipt to end; negative: unknown (taken from the usage times)
 * Return: the length snprintf() gives.
 */
int kvp_reqlog_format(char *buf, size_t cap, uint64_t conn, uint64_t req_id,
		      const struct kvp_reqlog_who *who, const char *status,
		      const struct kvp_usage *u, double total_ms);

/* The lower-case word of a wire status in the log ("ok", "cancelled", "busy" ...). */
const char *kvp_reqlog_status_word(uint32_t status);

#endif /* KVP_SVC_REQLOG_H */
