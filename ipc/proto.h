/* SPDX-License-Identifier: MIT */
/*
 * proto.h - encode and decode kvpool wire frames (include/kvpool/proto.h) through a
 * bounds-checked cursor (util/cursor.h).  Shared by the daemon's loop (ipc/server.c)
 * and the client library (ipc/client/client.c), so both sides agree on every check.
 *
 * Decoders take untrusted bytes and return an enum kvp_status: KVP_OK, or the class of
 * the fault (KVP_E_PROTO: the frame is malformed; KVP_E_VERSION; KVP_E_LIMIT: a
 * configured maximum is exceeded; KVP_E_INVALID: well-formed, but a value is out of
 * range) with *@why set to a static description.  Encoders write whole frames into a
 * caller's buffer.  No allocation, no I/O, no globals: any thread.
 */
#ifndef KVP_IPC_PROTO_H
#define KVP_IPC_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvpool/proto.h"
#include "util/cursor.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the wire format is little-endian and frames are copied as structs"
#endif

/**
 * struct kvp_proto_limits - the configured maxima a decoder enforces
 * @max_frame_bytes:   largest frame, header included
 * @max_prompt_tokens: prompt token ids, or prompt text bytes, in one GENERATE
 * @max_new_tokens:    largest max_new_tokens a GENERATE may ask for
 * @max_text_bytes:    text bytes in one request, checked before anything renders or
 *                     tokenizes it: a CHAT's messages together, the text of a GENERATE,
 *                     PIN or TOKENIZE (which max_prompt_tokens bounds as well); 0: none
 */
struct kvp_proto_limits {
	uint32_t max_frame_bytes;
	uint32_t max_prompt_tokens;
	uint32_t max_new_tokens;
	uint32_t max_text_bytes;
};

/* Largest temperature accepted; higher is indistinguishable from uniform sampling. */
#define KVP_TEMPERATURE_MAX 100.0f

/*
 * Whether a client may send @type (HELLO, GENERATE, CANCEL, TOKENIZE, DETOKENIZE, CHAT)
 * or the daemon (the rest).
 */
bool kvp_proto_from_client(uint32_t type);

/* Name of a frame type ("GENERATE"), or "?" for an unknown value. */
const char *kvp_proto_type_name(uint32_t type);

/* Short English description of an enum kvp_status ("malformed frame"). */
const char *kvp_proto_status_str(uint32_t status);

int kvp_proto_check_hdr(const void *buf, size_t len, uint32_t max_frame_bytes,
			struct kvp_frame_hdr *hdr, const char **why);

int kvp_proto_decode_hello(const void *payload, size_t len, struct kvp_hello *out,
			   const char **why);
int kvp_proto_decode_welcome(const void *payload, size_t len, struct kvp_welcome *out,
			     const char **why);
/*
 * TOKEN: its ids and text, then the trailers its request asked for, told apart by the
 * bytes left: struct kvp_token_cont (accepted with @cont non-NULL; *@cont its index, or
 * -1 without one), then struct kvp_usage (accepted with @usage non-NULL: the first
 * TOKEN of a request carries the prompt's usage so far, *@has_usage).
 */
int kvp_proto_decode_token(const void *payload, size_t len, struct kvp_token *out, const void **ids,
			   const char **text, int32_t *cont, struct kvp_usage *usage,
			   bool *has_usage, const char **why);
/*
 * DONE: struct kvp_usage, then struct kvp_cache_usage when the request carried cache
 * control (accepted with @cu non-NULL: *@has_cu says whether it came, *@cu zero if not),
 * then struct kvp_spec_usage when it set KVP_GEN_SPEC_USAGE (accepted with @su
 * non-NULL, *@has_su; accepted <= drafted).
 */
int kvp_proto_decode_done(const void *payload, size_t len, struct kvp_usage *out,
			  struct kvp_cache_usage *cu, bool *has_cu, struct kvp_spec_usage *su,
			  bool *has_su, const char **why);
int kvp_proto_decode_error(const void *payload, size_t len, struct kvp_error *out, const char **msg,
			   const char **why);

int kvp_proto_decode_tokenize(const void *payload, size_t len, const struct kvp_proto_limits *lim,
			      struct kvp_tokenize *out, const char **text, const char **why);
int kvp_proto_decode_detokenize(const void *payload, size_t len, const struct kvp_proto_limits *lim,
				struct kvp_detokenize *out, const void **ids, const char **why);
int kvp_proto_decode_ids(const void *payload, size_t len, struct kvp_ids *out, const void **ids,
			 const char **text, const char **why);

/**
 * struct kvp_proto_msg - one chat message as the codec hands it over
 * @role: enum kvp_role
 * @len:  bytes of @text (not NUL-terminated; borrowed)
 */
struct kvp_proto_msg {
	uint32_t role;
	uint32_t len;
	const char *text;
};

/**
 * struct kvp_proto_sampling - a sampling section (docs/protocol.md, "Sampling")
 * @hdr:    the fixed part
 * @bias:   @hdr.n_bias struct kvp_logit_bias (unaligned: copy before reading)
 * @schema: @hdr.schema_bytes of schema text (no NUL inside, not NUL-terminated)
 */
struct kvp_proto_sampling {
	struct kvp_sampling hdr;
	const void *bias;
	const char *schema;
};

/*
 * The flags GENERATE and CHAT share have the same bits, so that one decoder reads the
 * optional sections of both and svc/ reads one request whichever frame carried it.
 */
static_assert(KVP_CHAT_NO_CACHE == KVP_GEN_NO_CACHE && KVP_CHAT_CACHE_CTL == KVP_GEN_CACHE_CTL &&
		      KVP_CHAT_SAMPLING == KVP_GEN_SAMPLING &&
		      KVP_CHAT_FIT_CONTEXT == KVP_GEN_FIT_CONTEXT &&
		      KVP_CHAT_SPEC_ON == KVP_GEN_SPEC_ON &&
		      KVP_CHAT_SPEC_OFF == KVP_GEN_SPEC_OFF &&
		      KVP_CHAT_SPEC_USAGE == KVP_GEN_SPEC_USAGE,
	      "GENERATE and CHAT share their section flags");

/**
 * struct kvp_gen_req - one generation request: the GENERATE or CHAT one decoder fills,
 * one server callback receives and one encoder writes
 *
 * The two frames differ only in how the prompt is given: GENERATE carries token ids or
 * text, CHAT messages (and the ids of the conversation so far).  Everything else, the
 * sampling fields of the fixed struct and the optional sections that follow it (cache
 * control, sampling), is the same and read by the same code.  An optional section is
 * absent when its member says so (@has_cc false, @has_samp false, @tools NULL): none of
 * it applies.  The encoder sets the section flags (KVP_GEN_CACHE_CTL, KVP_GEN_SAMPLING,
 * KVP_CHAT_TOOLS) from the members, the decoder the members from the flags; every other
 * flag is the request's own and passes through as it is.
 *
 * Pointers are borrowed: into the payload after a decode (@ids unaligned: copy them
 * before reading int32s; @text and message texts not NUL-terminated), the caller's for
 * an encode.
 *
 * @type:           KVP_FRAME_GENERATE or KVP_FRAME_CHAT
 * @flags:          KVP_GEN_* or KVP_CHAT_* (by @type)
 * @max_new_tokens, @top_k, @temperature, @top_p, @seed, @priority, @salt_len, @salt:
 *                  as struct kvp_generate's (CHAT's are the same fields)
 * @has_cc, @cc:    cache control (struct kvp_cache_ctl)
 * @has_samp, @samp: the sampling section
 * @ids, @n_ids:    GENERATE: the prompt's token ids (none with KVP_GEN_TEXT); CHAT: the
 *                  context, the ids of the conversation so far (n_context)
 * @text, @text_bytes: GENERATE with KVP_GEN_TEXT: the prompt's text
 * CHAT only:
 * @context_msgs:   messages @ids cover (0 exactly when @n_ids is 0)
 * @template_name:  NUL-padded template family name, "" for the model's
 * @tools, @tools_len: the tools section's JSON text (KVP_CHAT_TOOLS); NULL: none
 * @msgs, @n_messages: the messages
 */
struct kvp_gen_req {
	uint32_t type;
	uint32_t flags;
	uint32_t max_new_tokens;
	uint32_t top_k;
	float temperature;
	float top_p;
	uint64_t seed;
	int32_t priority;
	uint32_t salt_len;
	uint8_t salt[KVP_SALT_MAX];
	bool has_cc;
	bool has_samp;
	struct kvp_cache_ctl cc;
	struct kvp_proto_sampling samp;
	const void *ids;
	uint32_t n_ids;
	uint32_t text_bytes;
	const char *text;
	uint32_t context_msgs;
	uint32_t n_messages;
	const struct kvp_proto_msg *msgs;
	const char *tools;
	uint32_t tools_len;
	char template_name[KVP_CHAT_TEMPLATE_NAME_MAX];
};

/**
 * kvp_proto_decode_request() - validate a GENERATE or CHAT payload into @out
 * @type:       the frame's type: KVP_FRAME_GENERATE or KVP_FRAME_CHAT
 * @lim:        configured maxima
 * @out:        out; the request (pointers into @payload), filled as far as the checks went
 * @msgs:       CHAT: room for KVP_CHAT_MESSAGES_MAX messages, which @out->msgs points
 *              to (NULL is fine for GENERATE)
 * @conn_fault: out, on a fault; true when it ends the connection (a malformed frame,
 *              KVP_E_PROTO; a GENERATE over the limits WELCOME announces, prompt or
 *              max_new_tokens, KVP_E_LIMIT), false when it refuses the request alone
 *              (any value, KVP_E_INVALID; a CHAT over a limit, or more continuations
 *              than KVP_PARALLEL_MAX, KVP_E_LIMIT)
 *
 * In the order of proto.c's invariant, for both frames: structure (the fixed struct's
 * flags, salt and reserved fields; each section's lengths, flags and reserved fields;
 * the prompt or the messages filling the rest of the frame exactly), then limits, then
 * values: the sampling fields, cache control (breakpoints increasing and above 0,
 * message breakpoints CHAT's only and within its messages, retain <= 100), the sampling
 * section's values (bias ids are not compared with the vocabulary, nor GENERATE's token
 * ids: the codec does not know it), a GENERATE's text without NUL, a CHAT's messages
 * well-formed UTF-8 with known roles, its template name NUL-padded printable ASCII.
 * Return: KVP_OK, KVP_E_PROTO, KVP_E_LIMIT or KVP_E_INVALID (*@why says which check).
 */
int kvp_proto_decode_request(uint32_t type, const void *payload, size_t len,
			     const struct kvp_proto_limits *lim, struct kvp_gen_req *out,
			     struct kvp_proto_msg *msgs, bool *conn_fault, const char **why);

/*
 * kvp_proto_encode_request() - @r as one GENERATE or CHAT frame: the fixed struct, then
 * whichever sections @r holds (cache control, sampling, tools), then the prompt (ids or
 * text; CHAT: the context ids, then the messages).  It does not validate: the peer's
 * decoder is the judge.  Return: as every encoder.
 */
size_t kvp_proto_encode_request(void *buf, size_t cap, uint64_t req_id,
				const struct kvp_gen_req *r);

void kvp_proto_hdr_init(struct kvp_frame_hdr *hdr, uint32_t type, uint64_t req_id,
			uint32_t len_bytes);

size_t kvp_proto_encode_hello(void *buf, size_t cap, const struct kvp_hello *h);
size_t kvp_proto_encode_cancel(void *buf, size_t cap, uint64_t req_id);
size_t kvp_proto_encode_welcome(void *buf, size_t cap, const struct kvp_welcome *w);
/* TOKEN with a continuation (@cont >= 0) and/or the prompt's @usage (non-NULL) after the text */
size_t kvp_proto_encode_token(void *buf, size_t cap, uint64_t req_id, const int32_t *ids,
			      uint32_t n_ids, const char *text, uint32_t text_bytes, int32_t cont,
			      const struct kvp_usage *usage);
/* DONE, with struct kvp_cache_usage @cu, then struct kvp_spec_usage @su (each non-NULL) */
size_t kvp_proto_encode_done(void *buf, size_t cap, uint64_t req_id, const struct kvp_usage *u,
			     const struct kvp_cache_usage *cu, const struct kvp_spec_usage *su);
size_t kvp_proto_encode_tokenize(void *buf, size_t cap, uint64_t req_id,
				 const struct kvp_tokenize *t, const char *text);
size_t kvp_proto_encode_detokenize(void *buf, size_t cap, uint64_t req_id,
				   const struct kvp_detokenize *d, const int32_t *ids);
size_t kvp_proto_encode_ids(void *buf, size_t cap, uint64_t req_id, const int32_t *ids,
			    uint32_t n_ids, const char *text, uint32_t text_bytes);
size_t kvp_proto_encode_error(void *buf, size_t cap, uint64_t req_id, uint32_t status,
			      const char *msg, uint32_t msg_bytes);

/* Leases (include/kvpool/proto.h): LEASE and LEASED payloads, RELEASE. */
int kvp_proto_decode_lease_req(const void *payload, size_t len, const struct kvp_proto_limits *lim,
			       struct kvp_lease_req *out, const void **ids, const char **why);
int kvp_proto_decode_lease(const void *payload, size_t len, struct kvp_lease *out,
			   const void **blocks, const char **why);
size_t kvp_proto_encode_lease_req(void *buf, size_t cap, uint64_t req_id,
				  const struct kvp_lease_req *l, const int32_t *ids);
size_t kvp_proto_encode_lease(void *buf, size_t cap, uint64_t req_id, const struct kvp_lease *l,
			      const struct kvp_lease_block *blocks);
size_t kvp_proto_encode_release(void *buf, size_t cap, uint64_t lease_id);
/* ---- prompt-cache control (additive; docs/protocol.md "Cache control") ---- */

/* Name of an enum kvp_miss_reason ("no_prefix"), "?" when out of range. */
const char *kvp_proto_miss_reason_name(uint32_t reason);

/* PIN / UNPIN: struct kvp_pin and the prompt after it (*@body: ids, unaligned, or text). */
int kvp_proto_decode_pin(const void *payload, size_t len, const struct kvp_proto_limits *lim,
			 struct kvp_pin *out, const void **body, const char **why);

/* Most ids one LOGPROBS describes (the TOKEN frames it goes before carry no more). */
#define KVP_LOGPROBS_TOKENS_MAX 1024u

/* LOGPROBS: @h, then @h->n_tokens * (1 + @h->n_top) entries */
size_t kvp_proto_encode_logprobs(void *buf, size_t cap, uint64_t req_id,
				 const struct kvp_logprobs *h, const struct kvp_logprob *entries);
/* *@entries: unaligned, @out->n_tokens * (1 + @out->n_top) struct kvp_logprob */
int kvp_proto_decode_logprobs(const void *payload, size_t len, struct kvp_logprobs *out,
			      const void **entries, const char **why);

/* PIN or UNPIN (@type) */
size_t kvp_proto_encode_pin(void *buf, size_t cap, uint32_t type, uint64_t req_id,
			    const struct kvp_pin *pin, const void *body);
size_t kvp_proto_encode_flush(void *buf, size_t cap, uint64_t req_id);
/* FLUSH naming trust domain @domain (NULL or "": none, the peer's own) */
size_t kvp_proto_encode_flush_domain(void *buf, size_t cap, uint64_t req_id, const char *domain);
#endif /* KVP_IPC_PROTO_H */
