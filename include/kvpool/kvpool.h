/* SPDX-License-Identifier: MIT */
/*
 * kvpool/kvpool.h - libkvpool, the C client of kvpoold.
 *
 * Needs C11 or later (static_assert of <assert.h>, used to pin the ABI); an older
 * -std= stops at an #error saying so.  Link with -lkvpool (pkg-config: kvpool).
 *
 * A struct kvp_client is one connection to the request socket.  kvp_client_connect()
 * sends HELLO and waits for WELCOME: the model's vocabulary and limits, the pool
 * layout, and (when the daemon passes it) the sealed read-only pool segment, which the
 * library maps read-only so the caller can read K/V in place.
 *
 * Two ways to generate:
 *   - kvp_client_generate(): blocking, one request, a callback per TOKEN frame;
 *   - kvp_client_submit() then kvp_client_next() until DONE or ERROR: several requests
 *     may be in flight on one connection, their events interleaved (told apart by id).
 *
 * Chat: a struct kvp_client_conv holds a conversation (messages, and the exact token
 * ids of everything the daemon has computed for it so far); kvp_client_chat() sends it
 * as a CHAT, streams the reply and appends it, so the next turn continues on exactly
 * those ids and the daemon's prefix cache covers all earlier turns.  The iterator form
 * is kvp_client_chat_submit() + kvp_client_next() + kvp_client_conv_feed().
 *
 * Tokenization through the daemon: kvp_client_tokenize(), kvp_client_detokenize().
 *
 * Return values: 0 on success; a negative -errno for a local or system failure (the
 * socket broke, out of memory, bad argument); a positive enum kvp_status when the
 * daemon refused or failed the request.  kvp_client_errmsg() describes the last
 * failure in words.  A connection-level ERROR from the daemon (req_id 0) ends the
 * connection: later calls return -ENOTCONN.
 *
 * Threads: a client is not thread-safe; use one per thread (they are cheap).  Sockets
 * are blocking.  SIGPIPE is never raised by the library (MSG_NOSIGNAL).
 */
#ifndef KVPOOL_KVPOOL_H
#define KVPOOL_KVPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvpool/proto.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVP_DEFAULT_SOCKET "/run/kvpool/kvpool.sock"
#define KVP_DEFAULT_STATUS_SOCKET "/run/kvpool/status.sock"

struct kvp_client;

/**
 * struct kvp_client_params - sampling and cache options of one request
 * @max_new_tokens: stop after this many tokens (>= 1; at most WELCOME's max_new_tokens)
 * @temperature:    0 = greedy; finite, at most 100
 * @top_k:          0 = off
 * @top_p:          in (0, 1]; 1 = off
 * @seed:           sampler seed (same seed, same prompt, same params: same tokens)
 * @salt:           cache salt (borrowed): requests with different salts never share
 *                  cached blocks; @salt_len <= KVP_SALT_MAX bytes, 0 = none
 * @no_cache:       neither read nor publish prefix-cache blocks
 * @parse_special:  a text prompt's special-token text ("<|eot_id|>") becomes those
 *                  tokens; off (the default), it is plain text.  CHAT ignores it: the
 *                  rendered conversation is always tokenized with special tokens parsed
 *                  (as the reference engines do, messages included)
 * @priority:       KVP_PRIORITY_MIN .. KVP_PRIORITY_MAX (0: normal), higher is
 *                  admitted, prefilled and kept running first when the daemon is busy; or
 *                  KVP_PRIORITY_DEFAULT: the default of the client's trust domain (0
 *                  unless the daemon configures one)
 *
 * kvp_client_params_init() sets greedy decoding of 16 tokens, no salt, caching on,
 * special tokens not parsed, priority KVP_PRIORITY_DEFAULT.  (parse_special and priority
 * were appended in 0.1: programs built against an older kvpool.h must be rebuilt.)
 */
struct kvp_client_params {
	uint32_t max_new_tokens;
	float temperature;
	uint32_t top_k;
	float top_p;
	uint64_t seed;
	const void *salt;
	size_t salt_len;
	bool no_cache;
	bool parse_special;
	int32_t priority;
	bool fit_context;     /* max_new_tokens is a ceiling: the daemon lowers it to what the
			     model's context leaves after the prompt (else prompt +
			     max_new_tokens beyond the context is refused, KVP_E_LIMIT) */
	uint32_t speculative; /* KVP_SPECULATIVE_*: drafts verified in the decode step
				 (greedy output unchanged); DEFAULT: the daemon's
				 (scheduler.speculative).  ON or OFF also asks the DONE
				 for the drafted and accepted tokens
				 (kvp_client_event_spec()) */
};

#define KVP_SPECULATIVE_DEFAULT 0u
#define KVP_SPECULATIVE_ON 1u
#define KVP_SPECULATIVE_OFF 2u

/**
 * struct kvp_client_prompt - exactly one of @tokens (n_tokens > 0) or @text (text_len > 0)
 * @tokens:   token ids, each in [0, n_vocab)
 * @text:     UTF-8 text, tokenized by the daemon; no NUL bytes
 */
struct kvp_client_prompt {
	const int32_t *tokens;
	size_t n_tokens;
	const char *text;
	size_t text_len;
};

enum kvp_client_event_type {
	KVP_EVENT_TOKEN = 1, /* new tokens of a request */
	KVP_EVENT_DONE,	     /* the request finished; @usage is set */
	KVP_EVENT_ERROR,     /* the request (or with req_id 0, the connection) failed */
	KVP_EVENT_IDS,	     /* ids and/or text that were not generated: a CHAT's prompt ids
			      * (before its TOKENs), a TOKENIZE's ids, a DETOKENIZE's text */
};

/**
 * struct kvp_client_event - one event from kvp_client_next()
 * @type:     enum kvp_client_event_type
 * @req_id:   the request it belongs to (0: the whole connection)
 * @tokens:   TOKEN: @n_tokens new ids (IDS: the ids); valid until the next call on the client
 * @text:     TOKEN: their text, @text_len bytes (not NUL-terminated; may be empty when
 *            a UTF-8 character is split across tokens); same lifetime
 * @usage:    DONE: what the request cost and reused (usage.status: why it stopped);
 *            TOKEN: on a request's first TOKEN, the prompt's counts so far (prompt,
 *            cached, cache-creation tokens; usage.prompt_tokens > 0), else all zero
 * @status:   ERROR: enum kvp_status; DONE: usage.status
 * @message:  ERROR: the daemon's message, NUL-terminated; same lifetime as @tokens
 */
struct kvp_client_event {
	int type;
	uint64_t req_id;
	const int32_t *tokens;
	uint32_t n_tokens;
	const char *text;
	uint32_t text_len;
	struct kvp_usage usage;
	int status;
	const char *message;
};

/* Sets @p to the defaults described at struct kvp_client_params. */
void kvp_client_params_init(struct kvp_client_params *p);

/**
 * kvp_client_connect() - connect, HELLO, WELCOME, map the pool segment read-only
 * @out:  the new client; on failure *@out is set to a client holding only the error
 *        message when memory allows (read it with kvp_client_errmsg(), then
 *        kvp_client_close()), else NULL
 * @path: request socket, or NULL for KVP_DEFAULT_SOCKET
 *
 * HELLO names the client "<program>/<pid>" (program_invocation_short_name, cut to 20
 * bytes): the daemon logs it at debug level and lists it in its status report.  The
 * pool segment's header is checked against WELCOME before the pool is used; a header
 * this library cannot read, or one describing another pool, fails with -EPROTO.
 * Return: 0, -errno (-EPROTO: the daemon sent something this library cannot use), or
 *         the daemon's enum kvp_status (KVP_E_BUSY: too many connections;
 *         KVP_E_VERSION: the daemon speaks another protocol version).
 */
int kvp_client_connect(struct kvp_client **out, const char *path);

/* Close the connection and unmap the pool; in-flight requests are cancelled by the
 * daemon.  NULL is ok. */
void kvp_client_close(struct kvp_client *c);

/* The last failure in words (never NULL; "" when none). */
const char *kvp_client_errmsg(const struct kvp_client *c);

/* Description of a return code of this library: -errno or enum kvp_status. */
const char *kvp_client_strerror(int code);

/* The daemon's WELCOME: vocabulary, limits, model, pool layout. */
const struct kvp_welcome *kvp_client_welcome(const struct kvp_client *c);

/*
 * The pool segment, mapped PROT_READ (a write faults; the segment is sealed so it can
 * never be mapped writable).  NULL and *@len = 0 when the daemon passed no fd.
 */
const void *kvp_client_pool(const struct kvp_client *c, size_t *len);

/* The read-only pool fd (owned by the client; -1 if none) and the socket fd (for poll). */
int kvp_client_pool_fd(const struct kvp_client *c);
int kvp_client_socket_fd(const struct kvp_client *c);

/* ---- leases: zero-copy reads of cached K/V (docs/protocol.md, LEASE) ---- */

struct kvp_client_lease;

/**
 * kvp_client_lease() - hold the cached blocks of the longest cached prefix of @ids
 * @ids, @n_ids: token ids; every full block of them is looked up
 * @salt, @salt_len: the cache salt the prefix was published under (NULL, 0: none)
 * @ttl_ms:  lifetime asked for (0: the daemon's maximum, leases.max_ms)
 * @out:     out; the lease (0 blocks when nothing is cached); end it with
 *           kvp_client_release().  The blocks are read through kvp_client_lease_kv()
 *           in this client's read-only pool mapping; they stay valid until the release,
 *           the connection's end or the granted lifetime.
 * Return: 0; KVP_E_BUSY (too many leases on this connection); another status; -errno.
 */
int kvp_client_lease(struct kvp_client *c, const int32_t *ids, size_t n_ids, const void *salt,
		     size_t salt_len, uint32_t ttl_ms, struct kvp_client_lease **out);

/* Send RELEASE (when the lease holds blocks) and free @l.  NULL is ok.  Return: 0, -errno. */
int kvp_client_release(struct kvp_client *c, struct kvp_client_lease *l);

/* Free @l without RELEASE (the daemon keeps it until close or its time limit).  NULL ok. */
void kvp_client_lease_free(struct kvp_client_lease *l);

/* The lease's header: id, block count, granted lifetime, layout. */
const struct kvp_lease *kvp_client_lease_info(const struct kvp_client_lease *l);

/* Leased block @i (prompt order): offset, block id, generation; NULL when out of range. */
const struct kvp_lease_block *kvp_client_lease_block(const struct kvp_client_lease *l, uint32_t i);

/**
 * kvp_client_lease_kv() - where the K (@v = 0) or V (@v = 1) of kv head @head of
 * layer @layer of leased block @i starts in the pool mapping: block_tokens rows of
 * head_dim elements of the pool's dtype, then for int8 and int4 the run's scales
 * (include/kvpool/layout.h, kvp_layout_run_bytes()).  NULL when anything
 * is out of range or the client has no mapping.
 */
const void *kvp_client_lease_kv(const struct kvp_client *c, const struct kvp_client_lease *l,
				uint32_t i, uint32_t layer, int v, uint32_t head);

/**
 * kvp_client_submit() - send one GENERATE; its events come from kvp_client_next()
 * @prompt: tokens or text (copied into the frame; borrowed for the call)
 * @params: NULL for the defaults
 * @req_id: out; the new request's id (never 0)
 * Return: 0; -EINVAL (bad prompt or params: see the message); KVP_E_LIMIT when the
 *         prompt or max_new_tokens exceeds the limits WELCOME announced (the daemon
 *         would refuse it with the same status, so it is not sent); or -errno.
 */
int kvp_client_submit(struct kvp_client *c, const struct kvp_client_prompt *prompt,
		      const struct kvp_client_params *params, uint64_t *req_id);

/**
 * kvp_client_next() - wait for the next event of any request of this client
 * @ev: out; pointers inside stay valid until the next call on @c
 * Return: 0, -ENOTCONN once the connection has ended, -EPROTO if the daemon sent
 *         garbage, or -errno.
 */
int kvp_client_next(struct kvp_client *c, struct kvp_client_event *ev);

/* Ask the daemon to stop @req_id; a DONE or ERROR (KVP_E_CANCELLED) still follows. */
int kvp_client_cancel(struct kvp_client *c, uint64_t req_id);

/* Called for each TOKEN frame; return non-zero to cancel the request. */
typedef int (*kvp_client_token_fn)(void *arg, const int32_t *tokens, uint32_t n_tokens,
				   const char *text, uint32_t text_len);

/**
 * kvp_client_generate() - one blocking request, @fn called per TOKEN frame
 * @fn:    may be NULL; @arg is passed to it
 * @usage: out, may be NULL; filled from DONE
 * Needs no other request of @c in flight (-EBUSY otherwise).
 * Return: 0 when DONE says KVP_OK; KVP_E_CANCELLED when @fn stopped it; the daemon's
 *         enum kvp_status from ERROR or DONE; or -errno.
 */
int kvp_client_generate(struct kvp_client *c, const struct kvp_client_prompt *prompt,
			const struct kvp_client_params *params, kvp_client_token_fn fn, void *arg,
			struct kvp_usage *usage);

/**
 * kvp_client_tokenize() - the daemon's tokenizer: text to ids
 * @text, @len:  text (no NUL bytes; bytes that are not UTF-8 become byte tokens)
 * @flags:       KVP_TOKENIZE_PARSE_SPECIAL, KVP_TOKENIZE_NO_BOS (kvpool/proto.h)
 * @ids, @n_ids: out; malloc()ed ids (free() them), set on success
 * Needs no other request of @c in flight (-EBUSY).
 * Return: 0, the daemon's enum kvp_status, or -errno.
 */
int kvp_client_tokenize(struct kvp_client *c, const char *text, size_t len, unsigned int flags,
			int32_t **ids, size_t *n_ids);

/*
 * The iterator forms of the two above (several may be in flight on @c, beside
 * generations): one KVP_EVENT_IDS with the answer, then DONE (or ERROR) from
 * kvp_client_next().  Same checks and return values as the blocking forms, minus -EBUSY.
 */
int kvp_client_tokenize_submit(struct kvp_client *c, const char *text, size_t len,
			       unsigned int flags, uint64_t *req_id);
int kvp_client_detokenize_submit(struct kvp_client *c, const int32_t *ids, size_t n_ids,
				 unsigned int flags, uint64_t *req_id);

/**
 * kvp_client_detokenize() - the daemon's tokenizer: ids to text
 * @flags:     KVP_DETOKENIZE_RENDER_SPECIAL: control tokens as their text
 * @text, @len: out; malloc()ed, NUL-terminated (free() it): exactly the bytes the ids
 *             stand for, which are not UTF-8 when the ids cut a character
 * Return: 0, the daemon's enum kvp_status, or -errno.
 */
int kvp_client_detokenize(struct kvp_client *c, const int32_t *ids, size_t n_ids,
			  unsigned int flags, char **text, size_t *len);

/* A conversation: messages and the exact token ids of what the daemon computed of it. */
struct kvp_client_conv;

/* An empty conversation.  Return: 0 or -ENOMEM. */
int kvp_client_conv_new(struct kvp_client_conv **out);

/* NULL is ok. */
void kvp_client_conv_free(struct kvp_client_conv *cv);

/**
 * kvp_client_conv_set_template() - render with chat template family @name ("chatml",
 * "llama3", ...) instead of the model's; NULL or "" for the model's.  An unknown name
 * is refused by the daemon, with the known names.  Return: 0, -EINVAL (too long).
 */
int kvp_client_conv_set_template(struct kvp_client_conv *cv, const char *name);

/**
 * kvp_client_conv_set_tools() - the tool definitions the template renders into the
 * prompt (@json: a JSON array of {"type": "function", "function": {...}}, copied; NULL:
 * none), sent with every CHAT of the conversation.  A template without tools refuses
 * them (the daemon's ERROR names it).  Return: 0, -EINVAL (too long), -ENOMEM.
 */
int kvp_client_conv_set_tools(struct kvp_client_conv *cv, const char *json, size_t len);

/* kvp_client_conv_set_thinking() modes */
enum kvp_client_thinking {
	KVP_THINKING_DEFAULT = 0, /* the template's own default */
	KVP_THINKING_ON,	  /* reasoning on; a template without a reasoning section
				     refuses the CHAT (the daemon's ERROR names it) */
	KVP_THINKING_OFF,	  /* reasoning off (Qwen3's enable_thinking=false) */
};

/**
 * kvp_client_conv_set_thinking() - the reasoning section of the template (Qwen3's
 * <think>) on, off or as the template has it (enum kvp_client_thinking), sent with every
 * CHAT of the conversation (KVP_CHAT_THINKING / KVP_CHAT_NO_THINKING).  Return: 0, -EINVAL.
 */
int kvp_client_conv_set_thinking(struct kvp_client_conv *cv, int mode);

/*
 * kvp_client_conv_set_call_ids() - whether the conversation's tool calls and results
 * carry their call ids (KVP_CHAT_CALL_IDS, sent with every CHAT of it): a call's text is
 * then "NAME\nID\nARGUMENTS-JSON" and a result's "ID\nRESULT".  Mistral's templates
 * write the ids (and refuse calls and results without 9-character ones); the others
 * leave them out.
 */
void kvp_client_conv_set_call_ids(struct kvp_client_conv *cv, bool on);

/* Append a message (@role: enum kvp_role; @text copied, UTF-8; KVP_ROLE_TOOL_CALL's
 * text "NAME\nARGUMENTS-JSON", with call ids as kvp_client_conv_set_call_ids() says).
 * Return: 0, -EINVAL, -ENOMEM. */
int kvp_client_conv_add(struct kvp_client_conv *cv, int role, const char *text, size_t len);

/* Remove the last message (e.g. a user turn whose CHAT failed).  Return: 0, -ENOENT. */
int kvp_client_conv_pop(struct kvp_client_conv *cv);

/* Messages so far; message @i's role and text (borrowed, NUL-terminated).  -ENOENT. */
size_t kvp_client_conv_n_messages(const struct kvp_client_conv *cv);
int kvp_client_conv_message(const struct kvp_client_conv *cv, size_t i, int *role,
			    const char **text, size_t *len);

/*
 * The exact token ids of the conversation so far (borrowed; valid until the conversation
 * changes): the last prompt the daemon built plus the reply it generated; they cover
 * the first *@n_msgs messages.  NULL and 0 before the first reply.
 */
const int32_t *kvp_client_conv_context(const struct kvp_client_conv *cv, size_t *n, size_t *n_msgs);

/**
 * kvp_client_chat_submit() - send @cv as one CHAT: every message, the context ids
 * @req_id: out; its events come from kvp_client_next(); hand each to
 *          kvp_client_conv_feed() so the reply and its ids join the conversation
 * Return: 0, -EINVAL (no messages, another CHAT of @cv pending), KVP_E_LIMIT (beyond
 *         WELCOME's limits), or -errno.
 */
int kvp_client_chat_submit(struct kvp_client *c, struct kvp_client_conv *cv,
			   const struct kvp_client_params *params, uint64_t *req_id);

/**
 * kvp_client_chat_prompt() - the prompt ids a CHAT of @cv would be given, nothing
 * generated (counting a conversation's tokens): the daemon renders and tokenizes the
 * messages exactly as for kvp_client_chat() (context ids included) and answers with them
 * (CHAT with KVP_CHAT_PROMPT_ONLY).  @cv is not changed.
 * @ids, @n_ids: out; malloc()ed ids (free() them), set on success
 * Needs no other request of @c in flight (-EBUSY).
 * Return: 0, -EINVAL (no messages), KVP_E_LIMIT, the daemon's enum kvp_status, or -errno.
 */
int kvp_client_chat_prompt(struct kvp_client *c, struct kvp_client_conv *cv, int32_t **ids,
			   size_t *n_ids);

/* Its iterator form: one KVP_EVENT_IDS (the ids), then DONE (or ERROR); not for
 * kvp_client_conv_feed(). */
int kvp_client_chat_prompt_submit(struct kvp_client *c, struct kvp_client_conv *cv,
				  uint64_t *req_id);

/**
 * kvp_client_conv_feed() - an event of @cv's pending CHAT (others are ignored)
 *
 * IDS: the prompt's ids; TOKEN: reply ids and text; DONE (any status, a cancel too):
 * the reply so far becomes an assistant message and prompt + reply the context; ERROR:
 * the conversation stays as it was (the caller may kvp_client_conv_pop() its turn).
 * Return: 1 when the CHAT ended (DONE or ERROR), 0 when it goes on, -ENOMEM.
 */
int kvp_client_conv_feed(struct kvp_client_conv *cv, const struct kvp_client_event *ev);

/**
 * kvp_client_chat() - one blocking chat turn: the assistant's reply to @cv
 * @fn:    called per TOKEN (may be NULL); non-zero cancels the reply (what came so far
 *         stays in the conversation)
 * @usage: out, may be NULL
 * Needs no other request of @c in flight (-EBUSY).
 * Return: 0 (the reply is @cv's last message), KVP_E_CANCELLED, the daemon's enum
 *         kvp_status (an ERROR leaves @cv unchanged), or -errno.
 */
int kvp_client_chat(struct kvp_client *c, struct kvp_client_conv *cv,
		    const struct kvp_client_params *params, kvp_client_token_fn fn, void *arg,
		    struct kvp_usage *usage);

/* ---- prompt-cache control (docs/protocol.md, "Cache control") ---- */

/**
 * kvp_client_set_cache() - send @cc (breakpoints, TTL, retention priority, n) with every
 * GENERATE and CHAT of @c from now on; NULL stops.  With it set, each DONE carries the
 * request's struct kvp_cache_usage (kvp_client_event_cache()).  An all-zero @cc asks for
 * nothing but that: automatic caching with the daemon's defaults.
 * Return: 0, -EINVAL (breakpoints not increasing, retain > 100, n > KVP_PARALLEL_MAX).
 */
int kvp_client_set_cache(struct kvp_client *c, const struct kvp_cache_ctl *cc);

/* The cache usage of the last DONE event: 1 and *@cu when it carried one, else 0. */
int kvp_client_event_cache(const struct kvp_client *c, struct kvp_cache_usage *cu);

/* Name of an enum kvp_miss_reason ("no_prefix"), "?" when out of range. */
const char *kvp_client_miss_reason_name(uint32_t reason);

/*
 * The speculative decoding of the last DONE event's request (struct kvp_spec_usage:
 * draft tokens verified, and accepted): 1 and *@su when the DONE carried it (requests
 * whose params.speculative was KVP_SPECULATIVE_ON or _OFF), else 0.
 */
int kvp_client_event_spec(const struct kvp_client *c, struct kvp_spec_usage *su);

/* ---- sampling: bias, penalties, logprobs, structured output (docs/protocol.md) ---- */

/**
 * struct kvp_client_sampling - the sampling section of GENERATE and CHAT
 * @logprobs:      LOGPROBS for each generated id (kvp_client_event_logprob())
 * @top_logprobs:  with them, the 0 .. KVP_TOP_LOGPROBS_MAX most likely ids per position
 * @presence_penalty, @frequency_penalty: in [-2, 2] (OpenAI's)
 * @bias_ids, @bias, @n_bias: logit bias, [-100, 100] each, at most KVP_LOGIT_BIAS_MAX
 * @grammar:       enum kvp_grammar_kind: none, any JSON object, @schema (JSON Schema)
 * @schema, @schema_len: the schema's JSON text (copied)
 * @think_budget:  0, or the reasoning section's budget: once the model has written
 *                 <think> and that many tokens after it, </think> comes next, forced
 *                 (KVP_SAMP_THINK_BUDGET; a vocabulary without the two tokens refuses it)
 */
struct kvp_client_sampling {
	bool logprobs;
	uint32_t top_logprobs;
	float presence_penalty;
	float frequency_penalty;
	const int32_t *bias_ids;
	const float *bias;
	uint32_t n_bias;
	uint32_t grammar;
	const char *schema;
	size_t schema_len;
	uint32_t think_budget;
};

/**
 * kvp_client_set_sampling() - send @s (copied) with every GENERATE and CHAT of @c from
 * now on; NULL stops.  The daemon checks it: a bias id outside the vocabulary or a
 * schema keyword it does not support is an ERROR (KVP_E_INVALID) naming it.
 * Return: 0, -EINVAL (counts above the maxima), -ENOMEM.
 */
int kvp_client_set_sampling(struct kvp_client *c, const struct kvp_client_sampling *s);

/**
 * kvp_client_event_logprob() - log-probability of id @i of the last TOKEN event (its
 * request asked logprobs): *@logprob, and *@n_top (id, logprob) pairs at *@top, most
 * likely first (valid until the next call on @c).  The model's log-softmax after bias,
 * penalties and grammar, before temperature and top-k/top-p.
 * Return: 0, -ENOENT (no logprobs for it).
 */
int kvp_client_event_logprob(const struct kvp_client *c, uint32_t i, float *logprob,
			     const struct kvp_logprob **top, uint32_t *n_top);

/*
 * The continuation the last TOKEN event belongs to (0 .. n-1) when its request asked for
 * n > 1 continuations, else -1.  Continuation i samples with seed + i.
 */
int kvp_client_event_cont(const struct kvp_client *c);

/**
 * kvp_client_pin() - PIN (or with @unpin, UNPIN) the full blocks of @prompt under @salt
 * PIN computes what is not cached and keeps every full block of the prompt in memory
 * until an UNPIN of the same prompt and salt (pins nest); operators only: the daemon
 * answers KVP_E_DENIED unless cache.pin_allowed, KVP_E_LIMIT past cache.pin_max.
 * @blocks: out, may be NULL; blocks pinned or unpinned
 * Needs no other request of @c in flight (-EBUSY).
 * Return: 0, the daemon's enum kvp_status, or -errno.
 */
int kvp_client_pin(struct kvp_client *c, const struct kvp_client_prompt *prompt, const void *salt,
		   size_t salt_len, bool unpin, uint32_t *blocks);

/* FLUSH: drop every unreferenced, unpinned cached block (operators; as kvp_client_pin()). */
int kvp_client_flush(struct kvp_client *c, uint32_t *blocks);

/*
 * kvp_client_flush_domain() - FLUSH the trust domain named @domain (NULL: this client's
 * own, as kvp_client_flush()); another domain than one's own needs uid 0.  Return: as
 * kvp_client_pin(); -EINVAL for a name the daemon could not take (1..31 of [A-Za-z0-9_-]).
 */
int kvp_client_flush_domain(struct kvp_client *c, const char *domain, uint32_t *blocks);

/**
 * kvp_client_status() - fetch a status report from the status socket
 * @path:  status socket, or NULL for KVP_DEFAULT_STATUS_SOCKET
 * @fmt:   "json" or "prom" (NULL: "json"); or the operator command "flush-tier" (empty
 *         the disk tier: the daemon answers at once, and its report's tier.flushes
 *         grows when the engine has done it)
 * @out:   out; the report, NUL-terminated, malloc()ed: free() it
 * @len:   out, may be NULL; its length
 * Return: 0 or -errno (-EPROTO if the daemon closed without a report).
 */
int kvp_client_status(const char *path, const char *fmt, char **out, size_t *len);

#ifdef __cplusplus
}
#endif

#endif /* KVPOOL_KVPOOL_H */
