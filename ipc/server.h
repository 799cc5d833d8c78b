/* SPDX-License-Identifier: MIT */
/*
 * server.h - what ipc/ offers svc/: the request and status sockets served by one
 * io_uring loop (multishot accept, provided-buffer receives, sends that survive short
 * writes), framing and validation of every client frame, per-connection bounded output.
 *
 * svc/ fills struct kvp_server_ops; the loop calls it on the loop thread for each
 * validated request, and svc/ answers through kvp_server_send_*() from the loop thread
 * (the engine thread hands its events over through an eventfd registered with
 * kvp_server_add_wakeup()).  ipc/ never includes svc/ or compute/ headers.
 *
 * Thread: everything here runs on the loop thread, except kvp_server_stop(), which
 * any thread or a signal handler may call.  The loop thread is the one that calls
 * kvp_server_run() and kvp_server_run_for(): always the same thread, living until
 * kvp_server_free() (io_uring cancels a thread's requests when it exits).
 * kvp_server_new() and kvp_server_add_wakeup() may run on another thread before that.
 */
#ifndef KVP_IPC_SERVER_H
#define KVP_IPC_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ipc/proto.h"
#include "kvpool/proto.h"

struct kvp_server;

/* A connection's handle: slot index and generation, so a stale handle is refused. */
typedef uint64_t kvp_conn_id;

/* Longest client name a HELLO can carry (struct kvp_hello.client without its NUL). */
#define KVP_CLIENT_NAME_MAX 31

/* Credentials of the peer, read with SO_PEERCRED on accept; never from a request. */
struct kvp_peer {
	pid_t pid;
	uid_t uid;
	gid_t gid;
};

/**
 * struct kvp_server_config - sockets and limits; all checked by kvp_server_new()
 * @socket_path:        request socket path (created 0660; a stale socket file is
 *                      replaced, a live one is -EADDRINUSE, a non-socket -EEXIST)
 * @status_path:        status socket path, or NULL for none
 * @socket_gid:         group of the request socket, or (gid_t)-1 to leave it
 * @status_gid:         group of the status socket (mode 0660), or (gid_t)-1: mode 0600,
 *                      the daemon's user (and root) only
 * @max_frame_bytes:    largest frame accepted (header included); 0: 1 MiB; 256 .. 64 MiB
 * @max_conns:          request connections at once; more are accepted, sent ERROR
 *                      KVP_E_BUSY and closed; 0: 256.  (Status connections: 16 more.)
 * @max_reqs_per_conn:  requests in flight per connection (more get ERROR KVP_E_BUSY,
 *                      the connection stays); 0: 64; at most 4096
 * @max_prompt_tokens:  tokens (or text bytes) in one GENERATE; 0: 32768
 * @max_new_tokens:     largest max_new_tokens a GENERATE may ask for; 0: 4096
 * @outq_bytes:         bound on a connection's unsent output; a client that lets it
 *                      fill is disconnected; 0: 1 MiB; 4 KiB .. 1 GiB.  Make it at
 *                      least twice the output a client may have in flight unread: the
 *                      bytes of a send stay queued until the whole send completes
 * @max_text_bytes:     text bytes in one request (a CHAT's messages together, a
 *                      GENERATE's, PIN's or TOKENIZE's text), refused before svc/ sees
 *                      it; 0: none but the frame's size
 * @max_refusals:       a connection whose requests are refused this many times in a row
 *                      (ERROR INVALID, LIMIT, NOSPACE or DENIED for a request, with no
 *                      DONE or LEASED between) is sent ERROR KVP_E_LIMIT (req_id 0) and
 *                      closed; 0: 16; UINT32_MAX: never
 *
 * Call kvp_server_new() before starting other threads: it changes the umask briefly.
 */
struct kvp_server_config {
	const char *socket_path;
	const char *status_path;
	gid_t socket_gid;
	gid_t status_gid;
	uint32_t max_frame_bytes;
	uint32_t max_conns;
	uint32_t max_reqs_per_conn;
	uint32_t max_prompt_tokens;
	uint32_t max_new_tokens;
	uint32_t outq_bytes;
	uint32_t max_conns_per_uid;
	uint32_t idle_timeout_ms;
	uint32_t max_text_bytes;
	uint32_t max_refusals;
};

/* Output format asked of the status socket. */
enum kvp_status_fmt {
	KVP_STATUS_JSON = 0,
	KVP_STATUS_PROM,
	KVP_STATUS_FLUSH_TIER, /* an operator command: empty the disk tier; answer in JSON */
};

/**
 * struct kvp_server_ops - svc/'s side; every callback runs on the loop thread
 * @ctx:      passed back to every callback
 * @hello:    a valid HELLO from @peer, naming itself @client (what the client says,
 *            for logs and status only; NUL-terminated, at most KVP_CLIENT_NAME_MAX
 *            bytes, printable ASCII: any other byte arrives as '?').  Fill @welcome and up to *@n_fds fds to pass
 *            (borrowed: the server sends dup()s of them, never closes them); set *@n_fds
 *            to the number used.  welcome.max_new_tokens / max_prompt_tokens left 0 (or
 *            above the config) are set from the config; welcome.n_fds is set by the
 *            server; welcome.n_vocab, when not 0, makes the server refuse GENERATEs with
 *            token ids outside [0, n_vocab) (ERROR KVP_E_INVALID, connection kept).
 *            Return KVP_OK, or an enum kvp_status to refuse (the server sends ERROR and
 *            closes; @closed still follows).  A refusal may word its ERROR in @why
 *            (@why_cap bytes, "" on entry); left empty, the server words it by status.
 * @generate: a validated GENERATE or CHAT (struct kvp_gen_req in proto.h; req->type says
 *            which), all of it borrowed for the call only but a GENERATE's prompt ids,
 *            which are handed over in @prompt (struct kvp_prompt_ids; req->ids is
 *            prompt->ids until the callback takes them); its ids copied aligned and
 *            checked against n_vocab (a GENERATE's prompt, a CHAT's context); a
 *            GENERATE's text (KVP_GEN_TEXT) well-formed UTF-8, NUL-terminated,
 *            req->text_bytes long, with no NUL inside; a CHAT's messages well-formed
 *            UTF-8 with known roles; the optional sections (cache control, sampling,
 *            tools) with their lengths and values checked, absent when req says so.
 *            @req_id is unique among this connection's requests in flight.  Return
 *            KVP_OK when accepted: exactly one DONE or ERROR must follow
 *            (kvp_server_send_done/_error), also after a cancel; TOKENs may precede it,
 *            and for a CHAT an IDS with the prompt's ids comes before any TOKEN.  Or
 *            return a status for an immediate ERROR with a generic message (or send
 *            your own ERROR and return KVP_OK).
 * @cancel:   the client cancelled @req_id, which is in flight (still answer it); called
 *            once per request at most (repeated CANCELs are dropped by ipc/)
 * @closed:   the connection is gone: cancel all its requests and release all it held.
 *            Called exactly once for every connection that reached @hello (also when
 *            @hello refused it), never for others.  No kvp_server_send_*() to @conn
 *            succeeds from the moment it is called.
 * @tokenize, @detokenize: a validated TOKENIZE (@text NUL-terminated, t->text_bytes
 *            long) or DETOKENIZE (@ids checked against n_vocab), taken in flight: answer
 *            with kvp_server_send_ids() then kvp_server_send_done(), or an ERROR; or
 *            return a status for an immediate ERROR.  NULL: the frame is refused
 *            (KVP_E_INVALID, the connection stays).
 * @lease:    a validated LEASE (@ids checked against n_vocab, borrowed for the call),
 *            taken in flight: answer with kvp_server_send_lease() or an ERROR; or return
 *            a status for an immediate ERROR.  NULL: refused like @tokenize.
 * @release:  RELEASE of lease @lease_id (no answer; an unknown id is ignored: a lease
 *            may have timed out).  NULL: ignored.
 * @status:   render the status report asked by @peer (the status connection's
 *            SO_PEERCRED: svc/ decides from it what the peer may see and do) into @buf
 *            (at most @cap bytes); return the length, or -ENOSPC if it does not fit
 *            (the server retries with a larger buffer, up to 16 MiB).
 */
/**
 * struct kvp_prompt_ids - a GENERATE's prompt ids (not KVP_GEN_TEXT), handed to svc/
 * rather than lent, so the one copy between the socket and the engine is the one out of
 * the frame (docs/architecture.md, "One request path")
 * @ids: malloc'd, checked against n_vocab; NULL for a CHAT or a text prompt.  The
 *       @generate callback takes them by setting @ids to NULL (then frees them itself,
 *       on every path); whatever it leaves is freed by ipc/ when it returns
 * @n:   the prompt's ids (req->n_ids)
 * @cap: the ids the buffer has room for: @n + req->max_new_tokens, so the engine keeps
 *       it as the sequence's history and generates into it
 */
struct kvp_prompt_ids {
	int32_t *ids;
	uint32_t n;
	uint32_t cap;
};

struct kvp_server_ops {
	void *ctx;
	int (*hello)(void *ctx, kvp_conn_id conn, const struct kvp_peer *peer, const char *client,
		     struct kvp_welcome *welcome, int *fds, unsigned int *n_fds, char *why,
		     size_t why_cap);
	int (*generate)(void *ctx, kvp_conn_id conn, const struct kvp_peer *peer, uint64_t req_id,
			const struct kvp_gen_req *req, struct kvp_prompt_ids *prompt);
	void (*cancel)(void *ctx, kvp_conn_id conn, uint64_t req_id);
	void (*closed)(void *ctx, kvp_conn_id conn);
	int (*tokenize)(void *ctx, kvp_conn_id conn, uint64_t req_id, const struct kvp_tokenize *t,
			const char *text);
	int (*detokenize)(void *ctx, kvp_conn_id conn, uint64_t req_id,
			  const struct kvp_detokenize *d, const int32_t *ids);
	int (*status)(void *ctx, const struct kvp_peer *peer, enum kvp_status_fmt fmt, char *buf,
		      size_t cap);
	int (*lease)(void *ctx, kvp_conn_id conn, uint64_t req_id, const struct kvp_lease_req *req,
		     const int32_t *ids);
	void (*release)(void *ctx, kvp_conn_id conn, uint64_t lease_id);
	/*
	 * Operators' cache commands (optional; docs/protocol.md "Cache control"): @pin
	 * (PIN and UNPIN: @type says which) and @flush answer like @generate; @flush's
	 * @domain is the trust domain the FLUSH names (checked: 1..31 bytes of
	 * [A-Za-z0-9_-]), or NULL for the peer's own.  NULL: refused like @tokenize.
	 */
	int (*pin)(void *ctx, kvp_conn_id conn, const struct kvp_peer *peer, uint64_t req_id,
		   uint32_t type, const struct kvp_pin *req, const int32_t *tokens,
		   const char *text);
	int (*flush)(void *ctx, kvp_conn_id conn, const struct kvp_peer *peer, uint64_t req_id,
		     const char *domain);
};

/**
 * kvp_server_new() - bind both sockets and set up the ring
 * @out:  out; the new server, set only on success
 * @cfg:  sockets and limits (copied)
 * @ops:  svc/'s callbacks (copied)
 * Return: 0, or -errno (the socket path is logged by the caller).
 */
int kvp_server_new(struct kvp_server **out, const struct kvp_server_config *cfg,
		   const struct kvp_server_ops *ops);

/* Closes every connection (calling @closed for each), both sockets and the ring. NULL ok. */
void kvp_server_free(struct kvp_server *srv);

/**
 * kvp_server_add_wakeup() - call @fn on the loop thread whenever @efd (an eventfd) fires
 *
 * The engine thread writes @efd after queueing events; @fn drains its queue and answers
 * through kvp_server_send_*().  @efd stays owned by the caller.
 * Return: 0, or -errno.
 */
int kvp_server_add_wakeup(struct kvp_server *srv, int efd, void (*fn)(void *arg), void *arg);

/*
 * Answers to a request.  Each returns 0, -ENOTCONN when @conn is gone (the @closed
 * callback has run or is about to), -ENOENT when @req_id is not in flight on it (DONE
 * or ERROR already sent), or -errno.  DONE and ERROR end the request.  A connection
 * whose output queue would exceed outq_bytes is closed (@closed runs, the slow
 * disconnect is counted) and -ENOTCONN returned.  send_error with @req_id 0 is a
 * connection-level ERROR: it is sent, then the connection closes.
 */
int kvp_server_send_tokens(struct kvp_server *srv, kvp_conn_id conn, uint64_t req_id,
			   const int32_t *tokens, uint32_t n_tokens, const char *text,
			   uint32_t text_len);
/* IDS: ids and/or text that were not generated (TOKENIZE, DETOKENIZE, a CHAT's prompt). */
int kvp_server_send_ids(struct kvp_server *srv, kvp_conn_id conn, uint64_t req_id,
			const int32_t *ids, uint32_t n_ids, const char *text, uint32_t text_len);
/*
 * DONE, with struct kvp_cache_usage @cu (non-NULL: requests that carried cache control),
 * then struct kvp_spec_usage @su (non-NULL: requests that set KVP_GEN_SPEC_USAGE)
 */
int kvp_server_send_done(struct kvp_server *srv, kvp_conn_id conn, uint64_t req_id,
			 const struct kvp_usage *usage, const struct kvp_cache_usage *cu,
			 const struct kvp_spec_usage *su);
/* LEASED for @req_id (a LEASE in flight, which it ends): @l and its @l->n_blocks blocks. */
int kvp_server_send_lease(struct kvp_server *srv, kvp_conn_id conn, uint64_t req_id,
			  const struct kvp_lease *l, const struct kvp_lease_block *blocks);

/* LOGPROBS for @req_id: @h and its entries; the TOKEN frame they describe goes next. */
int kvp_server_send_logprobs(struct kvp_server *srv, kvp_conn_id conn, uint64_t req_id,
			     const struct kvp_logprobs *h, const struct kvp_logprob *entries);

/*
 * TOKEN with the trailers its request needs: continuation @cont (>= 0; n > 1 requests)
 * and @usage (non-NULL: the prompt's counts, on a request's first TOKEN).
 */
int kvp_server_send_tokens_usage(struct kvp_server *srv, kvp_conn_id conn, uint64_t req_id,
				 const int32_t *tokens, uint32_t n_tokens, const char *text,
				 uint32_t text_len, int32_t cont, const struct kvp_usage *usage);
int kvp_server_send_error(struct kvp_server *srv, kvp_conn_id conn, uint64_t req_id,
			  enum kvp_status status, const char *msg);

/**
 * kvp_server_run() - serve until kvp_server_stop()
 * Return: 0 after a stop, or -errno if the ring failed.
 */
int kvp_server_run(struct kvp_server *srv);

/*
 * Stop accepting and make kvp_server_run() return at the next turn.  Async-signal-safe
 * (writes an eventfd).  Open connections stay until kvp_server_free(), so svc/ can
 * drain running requests first by calling kvp_server_run_for().  A stop during
 * kvp_server_run_for() ends it early too (e.g. call it once draining is complete).
 */
void kvp_server_stop(struct kvp_server *srv);

/* Serve for at most @timeout_ms more (used to drain after a stop). Return: 0 or -errno. */
int kvp_server_run_for(struct kvp_server *srv, unsigned int timeout_ms);

/* Counters for the status report. */
struct kvp_server_stats {
	uint64_t conns_open;
	uint64_t conns_total;
	uint64_t conns_refused;	    /* all refusals at accept, the two below included */
	uint64_t conns_refused_uid; /* the peer's uid held max_conns_per_uid */
	uint64_t conns_refused_fds; /* the daemon was out of file descriptors */
	uint64_t idle_closes;	    /* closed by idle_timeout_ms */
	uint64_t frames_in;
	uint64_t frames_out;
	uint64_t proto_errors;
	uint64_t slow_disconnects;
	uint64_t refusal_closes; /* closed after max_refusals refused requests in a row */
};
void kvp_server_get_stats(const struct kvp_server *srv, struct kvp_server_stats *st);

#endif /* KVP_IPC_SERVER_H */
