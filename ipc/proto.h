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
int kvp_proto_decode_generate(const void *payload, size_t len, const struct kvp_proto_limits *lim,
			      struct kvp_generate *out, const void **body, const char **why);
int kvp_proto_decode_welcome(const void *payload, size_t len, struct kvp_welcome *out,
			     const char **why);
int kvp_proto_decode_token(const void *payload, size_t len, struct kvp_token *out, const void **ids,
			   const char **text, const char **why);
int kvp_proto_decode_done(const void *payload, size_t len, struct kvp_usage *out, const char **why);
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
 * @len:  bytes of @text (not NUL-terminated; borrowed from the frame)
 */
struct kvp_proto_msg {
	uint32_t role;
	uint32_t len;
	const char *text;
};

/**
 * kvp_proto_decode_chat() - validate a CHAT payload
 * @out:      out; the fixed part
 * @context:  out; the n_context int32 ids (unaligned: copy before reading)
 * @msgs:     out; the messages section, @msgs_len bytes, for kvp_proto_chat_messages()
 *
 * Every message must have a known role and be well-formed UTF-8 with no NUL; the
 * template name NUL-padded printable ASCII.
 * Return: KVP_OK, KVP_E_PROTO, KVP_E_LIMIT (too many messages or context ids, more
 * message bytes than max_text_bytes, max_new_tokens) or KVP_E_INVALID (a value).
 */
int kvp_proto_decode_chat(const void *payload, size_t len, const struct kvp_proto_limits *lim,
			  struct kvp_chat *out, const void **context, const uint8_t **msgs,
			  size_t *msgs_len, const char **why);

/* The tools section of a CHAT that kvp_proto_decode_chat() accepted (NULL, 0: none). */
void kvp_proto_chat_tools(const void *payload, size_t len, const struct kvp_chat *ch,
			  const char **tools, uint32_t *bytes);

/* The messages of a CHAT that kvp_proto_decode_chat() accepted: @n of them into @out. */
void kvp_proto_chat_messages(const uint8_t *msgs, size_t len, uint32_t n,
			     struct kvp_proto_msg *out);

void kvp_proto_hdr_init(struct kvp_frame_hdr *hdr, uint32_t type, uint64_t req_id,
			uint32_t len_bytes);

size_t kvp_proto_encode_hello(void *buf, size_t cap, const struct kvp_hello *h);
size_t kvp_proto_encode_generate(void *buf, size_t cap, uint64_t req_id,
				 const struct kvp_generate *g, const void *body);
size_t kvp_proto_encode_cancel(void *buf, size_t cap, uint64_t req_id);
size_t kvp_proto_encode_welcome(void *buf, size_t cap, const struct kvp_welcome *w);
size_t kvp_proto_encode_token(void *buf, size_t cap, uint64_t req_id, const int32_t *ids,
			      uint32_t n_ids, const char *text, uint32_t text_bytes);
size_t kvp_proto_encode_done(void *buf, size_t cap, uint64_t req_id, const struct kvp_usage *u);
size_t kvp_proto_encode_tokenize(void *buf, size_t cap, uint64_t req_id,
				 const struct kvp_tokenize *t, const char *text);
size_t kvp_proto_encode_detokenize(void *buf, size_t cap, uint64_t req_id,
				   const struct kvp_detokenize *d, const int32_t *ids);
size_t kvp_proto_encode_ids(void *buf, size_t cap, uint64_t req_id, const int32_t *ids,
			    uint32_t n_ids, const char *text, uint32_t text_bytes);
/* CHAT: @c's n_context ids at @context, then @c->n_messages messages from @msgs. */
size_t kvp_proto_encode_chat(void *buf, size_t cap, uint64_t req_id, const struct kvp_chat *c,
			     const int32_t *context, const struct kvp_proto_msg *msgs);
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

/*
 * As kvp_proto_decode_token(), and a trailing struct kvp_token_cont is accepted: *@cont
 * is its index, or -1 without one.
 */
int kvp_proto_decode_token_cc(const void *payload, size_t len, struct kvp_token *out,
			      const void **ids, const char **text, int32_t *cont, const char **why);
/*
 * As kvp_proto_decode_token_cc(), and a trailing struct kvp_usage (after the
 * continuation, when there is one) is accepted: the first TOKEN of a request carries the
 * prompt's usage so far (*@has_usage).
 */
int kvp_proto_decode_token_u(const void *payload, size_t len, struct kvp_token *out,
			     const void **ids, const char **text, int32_t *cont,
			     struct kvp_usage *usage, bool *has_usage, const char **why);

/* A DONE with or without struct kvp_cache_usage after the usage (*@has_cu says which). */
int kvp_proto_decode_done_cc(const void *payload, size_t len, struct kvp_usage *out,
			     struct kvp_cache_usage *cu, bool *has_cu, const char **why);

/**
 * kvp_proto_decode_cache_ctl() - the struct kvp_cache_ctl at @offset of a GENERATE or CHAT
 * payload that kvp_proto_decode_generate()/_chat() accepted with the flag set
 * Checks flags, reserved fields, breakpoints (at most 4, increasing, above 0; lengths
 * against the prompt are the daemon's to check), retain <= 100, n <= KVP_PARALLEL_MAX.
 * Return: KVP_OK, KVP_E_PROTO, KVP_E_INVALID or KVP_E_LIMIT.
 */
int kvp_proto_decode_cache_ctl(const void *payload, size_t len, size_t offset,
			       struct kvp_cache_ctl *out, const char **why);

/**
 * kvp_proto_cache_ctl_for() - may @cc come with a request of frame @type?
 * @n_messages: CHAT: its messages (message breakpoints must lie within them)
 * KVP_CC_BP_MESSAGES is CHAT's only, and its breakpoints count at most @n_messages.
 * Return: KVP_OK or KVP_E_INVALID (*@why says why).
 */
int kvp_proto_cache_ctl_for(const struct kvp_cache_ctl *cc, uint32_t type, uint32_t n_messages,
			    const char **why);

/* PIN / UNPIN: struct kvp_pin and the prompt after it (*@body: ids, unaligned, or text). */
int kvp_proto_decode_pin(const void *payload, size_t len, const struct kvp_proto_limits *lim,
			 struct kvp_pin *out, const void **body, const char **why);

/* GENERATE with @cc after @g when @g->flags has KVP_GEN_CACHE_CTL. */
size_t kvp_proto_encode_generate_cc(void *buf, size_t cap, uint64_t req_id,
				    const struct kvp_generate *g, const struct kvp_cache_ctl *cc,
				    const void *body);
/**
 * struct kvp_proto_sampling - a decoded sampling section (pointers into the frame)
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
 * kvp_proto_decode_sampling() - the sampling section at @offset of a GENERATE or CHAT
 * payload (after the struct and the cache control, when there is one).  Bias ids are
 * not compared with the vocabulary here.  Return: KVP_OK, KVP_E_PROTO (lengths),
 * KVP_E_INVALID (values; *@why says which).
 */
int kvp_proto_decode_sampling(const void *payload, size_t len, size_t offset,
			      struct kvp_proto_sampling *out, const char **why);

/* GENERATE with @cc (KVP_GEN_CACHE_CTL) and the sampling section @samp (KVP_GEN_SAMPLING:
 * struct kvp_sampling, its bias entries and schema, @samp_len bytes) before the prompt */
size_t kvp_proto_encode_generate_s(void *buf, size_t cap, uint64_t req_id,
				   const struct kvp_generate *g, const struct kvp_cache_ctl *cc,
				   const void *samp, size_t samp_len, const void *body);

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
/* TOKEN tagged with continuation @cont (struct kvp_token_cont after the text) */
size_t kvp_proto_encode_token_cc(void *buf, size_t cap, uint64_t req_id, const int32_t *ids,
				 uint32_t n_ids, const char *text, uint32_t text_bytes,
				 uint32_t cont);
/* TOKEN with a continuation (@cont >= 0) and/or the prompt's @usage (non-NULL) after the text */
size_t kvp_proto_encode_token_u(void *buf, size_t cap, uint64_t req_id, const int32_t *ids,
				uint32_t n_ids, const char *text, uint32_t text_bytes, int32_t cont,
				const struct kvp_usage *usage);
/* DONE with struct kvp_cache_usage after the usage */
size_t kvp_proto_encode_done_cc(void *buf, size_t cap, uint64_t req_id, const struct kvp_usage *u,
				const struct kvp_cache_usage *cu);
/* CHAT with @cc after @c when @c->flags has KVP_CHAT_CACHE_CTL */
size_t kvp_proto_encode_chat_cc(void *buf, size_t cap, uint64_t req_id, const struct kvp_chat *c,
				const struct kvp_cache_ctl *cc, const int32_t *context,
				const struct kvp_proto_msg *msgs);
/* CHAT as kvp_proto_encode_chat_s(), and with KVP_CHAT_TOOLS the tools section of
 * @tools_len bytes at @tools */
size_t kvp_proto_encode_chat_t(void *buf, size_t cap, uint64_t req_id, const struct kvp_chat *c,
			       const struct kvp_cache_ctl *cc, const void *samp, size_t samp_len,
			       const char *tools, uint32_t tools_len, const int32_t *context,
			       const struct kvp_proto_msg *msgs);

/* CHAT with @cc and, with KVP_CHAT_SAMPLING, the sampling section @samp (@samp_len bytes) */
size_t kvp_proto_encode_chat_s(void *buf, size_t cap, uint64_t req_id, const struct kvp_chat *c,
			       const struct kvp_cache_ctl *cc, const void *samp, size_t samp_len,
			       const int32_t *context, const struct kvp_proto_msg *msgs);

#endif /* KVP_IPC_PROTO_H */
