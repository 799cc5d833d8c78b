/* SPDX-License-Identifier: MIT */
/*
 * kvpool/proto.h - the kvpool wire protocol (ABI, versioned).  docs/protocol.md is the prose.
 *
 * Needs C11 or later (static_assert of <assert.h>, used to pin the ABI); an older
 * -std= stops at an #error saying so.  Link with -lkvpool (pkg-config: kvpool).
 *
 * Every frame is a 24-byte little-endian header followed by len_bytes of payload.  A
 * connection starts with HELLO; the daemon answers WELCOME (with the sealed read-only
 * pool fd attached by SCM_RIGHTS) or ERROR and closes.  Requests carry a client-chosen
 * req_id that every answer frame repeats.
 *
 * Every struct here crosses a process boundary: fixed-width fields, explicit padding,
 * zeroed reserved fields, sizes and offsets pinned by static_assert.
 */
#ifndef KVPOOL_PROTO_H
#define KVPOOL_PROTO_H

#if !defined(__cplusplus) && (!defined(__STDC_VERSION__) || __STDC_VERSION__ < 201112L)
#error "the kvpool headers need C11 or later (e.g. -std=c11 or -std=gnu17)"
#endif

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#include "kvpool/layout.h"

#define KVP_WIRE_MAGIC 0x4b56504cu /* "LPVK" in memory, 'KVPL' as a LE u32 */
/* 2: GENERATE carries a priority; DONE's usage counts preemptions and the disk tier */
#define KVP_WIRE_VERSION 2u

enum kvp_frame_type {
	KVP_FRAME_HELLO = 0,  /* client -> daemon: struct kvp_hello */
	KVP_FRAME_WELCOME,    /* daemon -> client: struct kvp_welcome (+ pool fd) */
	KVP_FRAME_GENERATE,   /* client -> daemon: struct kvp_generate + tokens or text */
	KVP_FRAME_TOKEN,      /* daemon -> client: struct kvp_token + ids + text */
	KVP_FRAME_DONE,	      /* daemon -> client: struct kvp_usage */
	KVP_FRAME_CANCEL,     /* client -> daemon: no payload; req_id names the request */
	KVP_FRAME_ERROR,      /* daemon -> client: struct kvp_error + message */
	KVP_FRAME_TOKENIZE,   /* client -> daemon: struct kvp_tokenize + text */
	KVP_FRAME_DETOKENIZE, /* client -> daemon: struct kvp_detokenize + ids */
	KVP_FRAME_CHAT,	      /* client -> daemon: struct kvp_chat + context ids + messages */
	KVP_FRAME_IDS,	      /* daemon -> client: struct kvp_ids + ids + text (not generated) */
	KVP_FRAME_LEASE,      /* client -> daemon: struct kvp_lease_req + ids */
	KVP_FRAME_LEASED,     /* daemon -> client: struct kvp_lease + kvp_lease_block[] */
	KVP_FRAME_RELEASE,    /* client -> daemon: no payload; req_id names the lease */
	KVP_FRAME_PIN,	      /* client -> daemon: struct kvp_pin + tokens or text (operators) */
	KVP_FRAME_UNPIN,      /* client -> daemon: struct kvp_pin + tokens or text (operators) */
	KVP_FRAME_FLUSH,      /* client -> daemon: drop unreferenced blocks (operators); payload:
			    none (the peer's own trust domain) or a domain's name (uid 0) */
	KVP_FRAME_LOGPROBS,   /* daemon -> client: struct kvp_logprobs + entries, right before
			       * the TOKEN whose ids they describe (requests asking logprobs) */
	KVP_FRAME__COUNT
};

/* FLUSH's optional payload: a trust domain's name, 1..31 bytes of [A-Za-z0-9_-], no NUL */
#define KVP_FLUSH_DOMAIN_MAX 31

/* Outcomes seen on the wire.  Stable values; raw errno never goes on the wire. */
enum kvp_status {
	KVP_OK = 0,
	KVP_E_PROTO,	 /* malformed frame: bad magic, type, length, field */
	KVP_E_VERSION,	 /* unsupported protocol version */
	KVP_E_LIMIT,	 /* a configured maximum was exceeded */
	KVP_E_INVALID,	 /* a well-formed request with an invalid value */
	KVP_E_NOSPACE,	 /* the request can never fit in the pool */
	KVP_E_BUSY,	 /* too many requests or connections; try later */
	KVP_E_CANCELLED, /* cancelled by the client or by shutdown */
	KVP_E_INTERNAL,	 /* the daemon failed; see its log */
	KVP_E_SHUTDOWN,	 /* the daemon is stopping */
	KVP_E_DENIED,	 /* not allowed to this peer (an operator's command: cache.pin_allowed) */
	KVP_STATUS__COUNT
};

/**
 * struct kvp_frame_hdr - every frame starts with this
 * @magic:     KVP_WIRE_MAGIC
 * @version:   KVP_WIRE_VERSION
 * @type:      enum kvp_frame_type
 * @flags:     per-type flags, 0 unless a type defines some
 * @len_bytes: payload after this header
 * @req_id:    the client's request id (0 for HELLO/WELCOME)
 */
struct kvp_frame_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	uint32_t flags;
	uint32_t len_bytes;
	uint64_t req_id;
};
static_assert(sizeof(struct kvp_frame_hdr) == 24, "wire ABI");
static_assert(offsetof(struct kvp_frame_hdr, len_bytes) == 12, "wire ABI");
static_assert(offsetof(struct kvp_frame_hdr, req_id) == 16, "wire ABI");

/**
 * struct kvp_usage - the DONE payload: what one request cost and reused
 * @prompt_tokens:         tokens in the prompt (after tokenization)
 * @cached_tokens:         prompt tokens whose K/V came from the prefix cache in memory
 * @cache_creation_tokens: tokens of full blocks this request newly published
 * @recomputed_tokens:     prompt tokens computed (>= 1: the last is always computed)
 * @generated_tokens:      tokens sampled
 * @status:                enum kvp_status: KVP_OK, or why generation stopped early
 * @queue_ms .. decode_ms: times in milliseconds; ttft from receipt to first token
 * (version 2:)
 * @cached_tokens_disk:    prompt tokens whose K/V was read back from the disk tier
 * @preemptions:           times the request was preempted to make room for others
 * @swapped_tokens:        after a preemption, tokens whose K/V came back from the disk
 *                         tier
 * @resume_computed_tokens: after a preemption, positions (prompt or generated) computed
 *                         again
 * (remote tier:)
 * @cached_tokens_remote:  prompt tokens whose K/V was fetched from the remote tier (another
 *                         host's blocks, checked)
 * (steps:)
 * @ttft_steps:            engine steps that computed something from the request's
 *                         receipt to its first token, that step included (1: its first
 *                         token came from the first step after it arrived); 0 when
 *                         it had none, and from a daemon older than the field (it was
 *                         reserved, zero)
 */
struct kvp_usage {
	uint32_t prompt_tokens;
	uint32_t cached_tokens;
	uint32_t cache_creation_tokens;
	uint32_t recomputed_tokens;
	uint32_t generated_tokens;
	uint32_t status;
	double queue_ms;
	double ttft_ms;
	double prefill_ms;
	double decode_ms;
	uint32_t cached_tokens_disk;
	uint32_t preemptions;
	uint32_t swapped_tokens;
	uint32_t resume_computed_tokens;
	uint32_t cached_tokens_remote;
	uint32_t ttft_steps;
};
static_assert(sizeof(struct kvp_usage) == 80, "wire ABI");
static_assert(offsetof(struct kvp_usage, cached_tokens_disk) == 56, "wire ABI");
static_assert(offsetof(struct kvp_usage, cached_tokens_remote) == 72, "wire ABI");

/* HELLO flags */
#define KVP_HELLO_WANT_POOL_FD 0x1u /* pass the read-only pool segment fd */

/**
 * struct kvp_hello - HELLO payload
 * @flags:   KVP_HELLO_*
 * @reserved: zero
 * @client:  NUL-padded client name, for the daemon's log and status only
 */
struct kvp_hello {
	uint32_t flags;
	uint32_t reserved;
	char client[32];
};
static_assert(sizeof(struct kvp_hello) == 40, "wire ABI");

/**
 * struct kvp_welcome - WELCOME payload; the pool fd (if any) rides along as SCM_RIGHTS
 * @n_vocab:        vocabulary size; valid token ids are 0 .. n_vocab-1
 * @n_ctx:          longest sequence (prompt + generated) the daemon accepts
 * @bos_id, @eos_id: special token ids (UINT32_MAX when the model has none)
 * @shape:          K/V block shape of the pool (kvpool/layout.h)
 * @block_stride:   bytes between blocks in the segment
 * @data_offset:    offset of block 0 in the segment
 * @segment_bytes:  size of the segment the fd maps
 * @n_blocks:       blocks in the segment
 * @n_fds:          fds attached (0 or 1)
 * @max_new_tokens, @max_prompt_tokens: the daemon's limits
 * @fingerprint:    model fingerprint (hash of hyper-parameters and weights)
 * @model:          NUL-padded model name
 */
struct kvp_welcome {
	uint32_t n_vocab;
	uint32_t n_ctx;
	uint32_t bos_id;
	uint32_t eos_id;
	struct kvp_model_shape shape;
	uint64_t block_stride;
	uint64_t data_offset;
	uint64_t segment_bytes;
	uint32_t n_blocks;
	uint32_t n_fds;
	uint32_t max_new_tokens;
	uint32_t max_prompt_tokens;
	uint8_t fingerprint[16];
	char model[64];
};
static_assert(sizeof(struct kvp_welcome) == 160, "wire ABI");

/* GENERATE flags */
#define KVP_GEN_TEXT 0x1u	   /* the prompt is UTF-8 text (text_bytes), not token ids */
#define KVP_GEN_NO_CACHE 0x2u	   /* neither read nor publish prefix-cache blocks */
#define KVP_GEN_PARSE_SPECIAL 0x4u /* a text prompt's special-token text becomes their ids */
#define KVP_GEN_CACHE_CTL 0x8u	   /* struct kvp_cache_ctl follows struct kvp_generate */
#define KVP_GEN_SAMPLING 0x10u	   /* a sampling section (struct kvp_sampling) follows */
/* max_new_tokens is a ceiling: lowered to what the context leaves after the prompt
 * (without it, prompt + max_new_tokens beyond the context is refused: KVP_E_LIMIT) */
#define KVP_GEN_FIT_CONTEXT 0x100u
/* speculative decoding (drafts verified in the decode step; output unchanged, greedy or
 * sampled with the same seed) on / off for this request; neither: the daemon's default
 * (scheduler.speculative: on for greedy requests, not sampled ones); both: KVP_E_INVALID */
#define KVP_GEN_SPEC_ON 0x1000u
#define KVP_GEN_SPEC_OFF 0x2000u
/* the DONE carries struct kvp_spec_usage (drafted and accepted tokens) last */
#define KVP_GEN_SPEC_USAGE 0x8000u
#define KVP_GEN__ALL 0xb11fu

#define KVP_SALT_MAX 64

/* Request priorities (struct kvp_generate.priority) */
#define KVP_PRIORITY_MIN (-1000)
#define KVP_PRIORITY_MAX 1000
#define KVP_PRIORITY_DEFAULT INT32_MIN /* none named: the trust domain's default */

/**
 * struct kvp_generate - GENERATE payload, followed by n_tokens int32 ids or text_bytes
 * of UTF-8 text (exactly one of the two is non-zero, as KVP_GEN_TEXT says)
 * @flags:          KVP_GEN_*
 * @n_tokens:       prompt token ids after this struct
 * @text_bytes:     prompt text bytes after this struct
 * @max_new_tokens: stop after this many generated tokens (>= 1)
 * @top_k:          0 = off
 * @temperature:    0 = greedy
 * @top_p:          in (0, 1]; 1 = off
 * @seed:           sampler seed
 * @salt_len:       bytes used in @salt; requests with different salts never share blocks
 * @salt:           cache salt
 * @priority:       (version 2) KVP_PRIORITY_MIN .. KVP_PRIORITY_MAX, 0 = normal; higher
 *                  is admitted, prefilled and kept running (not preempted) first; or
 *                  KVP_PRIORITY_DEFAULT, none named: the peer's trust domain's default
 *                  (0 unless its [domain NAME] section sets priority)
 * @reserved:       zero
 */
struct kvp_generate {
	uint32_t flags;
	uint32_t n_tokens;
	uint32_t text_bytes;
	uint32_t max_new_tokens;
	uint32_t top_k;
	float temperature;
	float top_p;
	uint32_t salt_len;
	uint64_t seed;
	uint8_t salt[KVP_SALT_MAX];
	int32_t priority;
	uint32_t reserved;
};
static_assert(sizeof(struct kvp_generate) == 112, "wire ABI");
static_assert(offsetof(struct kvp_generate, seed) == 32, "wire ABI");
static_assert(offsetof(struct kvp_generate, priority) == 104, "wire ABI");

/**
 * struct kvp_token - TOKEN payload, followed by n_tokens int32 ids, then text_bytes of
 * UTF-8 (the text of those ids; a multi-byte character split across tokens is sent
 * when complete)
 */
struct kvp_token {
	uint32_t n_tokens;
	uint32_t text_bytes;
};
static_assert(sizeof(struct kvp_token) == 8, "wire ABI");

/* ERROR payload, followed by msg_bytes of UTF-8 (no NUL) */
struct kvp_error {
	uint32_t status; /* enum kvp_status */
	uint32_t msg_bytes;
};
static_assert(sizeof(struct kvp_error) == 8, "wire ABI");

/* TOKENIZE flags */
#define KVP_TOKENIZE_PARSE_SPECIAL 0x1u /* special-token text ("<|eot_id|>") becomes its id */
#define KVP_TOKENIZE_NO_BOS 0x2u	/* add neither BOS nor EOS, whatever the vocabulary says */
#define KVP_TOKENIZE__ALL 0x3u

/**
 * struct kvp_tokenize - TOKENIZE payload, followed by text_bytes of text (no NUL; any
 * bytes: what is not UTF-8 becomes byte tokens, as in a GENERATE).  Answered by one IDS
 * (the ids; no text) then DONE (usage.prompt_tokens = the count), or by ERROR.
 * @flags:      KVP_TOKENIZE_*
 * @text_bytes: text after this struct (0 is allowed: BOS alone, or nothing)
 */
struct kvp_tokenize {
	uint32_t flags;
	uint32_t text_bytes;
};
static_assert(sizeof(struct kvp_tokenize) == 8, "wire ABI");

/* DETOKENIZE flags */
#define KVP_DETOKENIZE_RENDER_SPECIAL 0x1u /* control tokens as their text, not nothing */
#define KVP_DETOKENIZE__ALL 0x1u

/**
 * struct kvp_detokenize - DETOKENIZE payload, followed by n_tokens int32 ids (each in
 * [0, n_vocab)).  Answered by one IDS (no ids; the text, exactly the bytes the tokens
 * stand for, which are not well-formed UTF-8 when the ids cut a character) then DONE,
 * or by ERROR.
 */
struct kvp_detokenize {
	uint32_t flags;
	uint32_t n_tokens;
};
static_assert(sizeof(struct kvp_detokenize) == 8, "wire ABI");

/**
 * struct kvp_ids - IDS payload, followed by n_tokens int32 ids, then text_bytes of text.
 * The answer of TOKENIZE (ids) and DETOKENIZE (text), and the first answer of CHAT: the
 * ids of the prompt the daemon built (what the client keeps to continue on exact ids).
 */
struct kvp_ids {
	uint32_t n_tokens;
	uint32_t text_bytes;
};
static_assert(sizeof(struct kvp_ids) == 8, "wire ABI");

/* Roles of chat messages (struct kvp_chat_message.role) */
/*
 * TOOL: a tool's result.  TOOL_CALL: a call of the assistant message before it (or of
 * the call before it, one message per call), its text "NAME\nARGUMENTS" where NAME is
 * the function's (non-empty, no newline) and ARGUMENTS JSON text (an object).  With
 * KVP_CHAT_CALL_IDS both carry the call's id after the name ("NAME\nID\nARGUMENTS") or
 * before the result ("ID\nRESULT").  Templates without tools refuse both.
 */
enum kvp_role {
	KVP_ROLE_SYSTEM = 0,
	KVP_ROLE_USER = 1,
	KVP_ROLE_ASSISTANT = 2,
	KVP_ROLE_TOOL = 3,
	KVP_ROLE_TOOL_CALL = 4,
	KVP_ROLE__COUNT
};

/* Most messages one CHAT may carry (more: ERROR KVP_E_LIMIT, the connection stays). */
#define KVP_CHAT_MESSAGES_MAX 1024u
/* Template names are NUL-padded in struct kvp_chat.template_name. */
#define KVP_CHAT_TEMPLATE_NAME_MAX 32

/* CHAT flags */
#define KVP_CHAT_NO_CACHE 0x2u /* as KVP_GEN_NO_CACHE */
/* render and tokenize only: one IDS (the prompt's ids), then DONE; nothing is generated
 * and the engine is not involved (counting a conversation's tokens) */
#define KVP_CHAT_PROMPT_ONLY 0x4u
#define KVP_CHAT_CACHE_CTL 0x8u	    /* struct kvp_cache_ctl follows struct kvp_chat */
#define KVP_CHAT_SAMPLING 0x10u	    /* as KVP_GEN_SAMPLING */
#define KVP_CHAT_FIT_CONTEXT 0x100u /* as KVP_GEN_FIT_CONTEXT */
/* struct kvp_chat_tools and the tool definitions follow the sampling section (or what
 * comes before it), before the context ids */
#define KVP_CHAT_TOOLS 0x200u
/* reasoning on: the template's reasoning section enabled (Qwen3's enable_thinking=true);
 * a template without one refuses the request (KVP_E_INVALID) */
#define KVP_CHAT_THINKING 0x400u
/* reasoning off: Qwen3's enable_thinking=false; no effect on a template without one.
 * Neither flag: the template's default.  Both: KVP_E_INVALID. */
#define KVP_CHAT_NO_THINKING 0x800u
#define KVP_CHAT_SPEC_ON 0x1000u  /* as KVP_GEN_SPEC_ON */
#define KVP_CHAT_SPEC_OFF 0x2000u /* as KVP_GEN_SPEC_OFF */
/* tool calls and results carry their call ids: a KVP_ROLE_TOOL_CALL's text is
 * "NAME\nID\nARGUMENTS" and a KVP_ROLE_TOOL's "ID\nRESULT" (ID: 1 ..
 * KVP_CHAT_CALL_ID_MAX bytes, no newline), for templates that write them (Mistral's) */
#define KVP_CHAT_CALL_IDS 0x4000u
#define KVP_CHAT_SPEC_USAGE 0x8000u /* as KVP_GEN_SPEC_USAGE */
#define KVP_CHAT__ALL 0xff1eu

/* Longest call id (KVP_CHAT_CALL_IDS), in bytes. */
#define KVP_CHAT_CALL_ID_MAX 64u

/**
 * struct kvp_chat - CHAT payload, followed by n_context int32 ids, then n_messages times
 * (struct kvp_chat_message + its bytes of UTF-8 text).
 *
 * The daemon renders the messages with the model's chat template (or @template_name),
 * tokenizes the text with special tokens parsed, and generates the assistant's reply.
 * With @n_context > 0 the conversation continues on exact ids: @context holds the ids of
 * the conversation up to and including the content of message @context_msgs - 1 (an
 * assistant message: the ids the daemon sent in the last IDS and TOKEN frames); only
 * what the template writes after that content is tokenized anew and appended.  See
 * docs/protocol.md, "CHAT".
 * @flags:          KVP_CHAT_*
 * @n_messages:     1 .. KVP_CHAT_MESSAGES_MAX
 * @n_context:      context ids after this struct (0: render and tokenize everything)
 * @context_msgs:   messages the context covers (0 exactly when @n_context is 0)
 * @max_new_tokens, @top_k, @temperature, @top_p, @seed, @salt_len, @salt, @priority:
 *                  as GENERATE
 * @template_name:  NUL-padded template family name ("chatml"), "" for the model's own
 */
struct kvp_chat {
	uint32_t flags;
	uint32_t n_messages;
	uint32_t n_context;
	uint32_t context_msgs;
	uint32_t max_new_tokens;
	uint32_t top_k;
	float temperature;
	float top_p;
	uint64_t seed;
	uint32_t salt_len;
	int32_t priority;
	uint8_t salt[KVP_SALT_MAX];
	char template_name[KVP_CHAT_TEMPLATE_NAME_MAX];
};
static_assert(sizeof(struct kvp_chat) == 144, "wire ABI");
static_assert(offsetof(struct kvp_chat, seed) == 32, "wire ABI");
static_assert(offsetof(struct kvp_chat, salt) == 48, "wire ABI");

/*
 * struct kvp_chat_tools - the tools section of a CHAT (KVP_CHAT_TOOLS): @bytes of UTF-8
 * (no NUL) after it, the tool definitions as a JSON array of OpenAI-shaped objects
 * ({"type": "function", "function": {"name", "description", "parameters"}}), which the
 * template renders into the prompt (so they are part of its cached prefix).  Counted
 * with the messages against max_text_bytes.  @reserved: 0.
 */
struct kvp_chat_tools {
	uint32_t bytes;
	uint32_t reserved;
};
static_assert(sizeof(struct kvp_chat_tools) == 8, "wire ABI");

/* One CHAT message: enum kvp_role, then @bytes of UTF-8 (no NUL) after this struct. */
struct kvp_chat_message {
	uint32_t role;
	uint32_t bytes;
};
static_assert(sizeof(struct kvp_chat_message) == 8, "wire ABI");

/**
 * struct kvp_lease_req - LEASE payload, followed by @n_tokens int32 ids.  Answered by
 * one LEASED (possibly of 0 blocks) or by ERROR (BUSY: the connection holds
 * leases.max_per_conn leases already; INVALID: leases are off, or @n_tokens is 0; LIMIT:
 * @n_tokens above max_prompt_tokens; PROTO, closing the connection: flags, a salt
 * longer than KVP_SALT_MAX or salt padding not zero).
 * @n_tokens: ids after this struct (>= 1); every full block of them is looked up
 * @ttl_ms:   how long the lease may live; 0 or more than leases.max_ms: leases.max_ms
 * @salt_len, @salt: the cache salt the prefix was published under (as GENERATE's: the
 *            bytes past @salt_len zero)
 * @flags:    0
 */
struct kvp_lease_req {
	uint32_t n_tokens;
	uint32_t ttl_ms;
	uint32_t salt_len;
	uint32_t flags;
	uint8_t salt[KVP_SALT_MAX];
};
static_assert(sizeof(struct kvp_lease_req) == 80, "wire ABI");

/**
 * struct kvp_lease_block - one leased block
 * @offset:     its first byte in the domain's pool fd (WELCOME's), = data_offset +
 *              block * block_stride; K/V inside as include/kvpool/layout.h says
 * @block:      block id
 * @generation: the block's generation when leased: bumped each time the daemon hands
 *              the block out again, so a (block, generation) pair seen earlier that
 *              differs from a later lease's means the block was reused
 */
struct kvp_lease_block {
	uint64_t offset;
	uint32_t block;
	uint32_t generation;
};
static_assert(sizeof(struct kvp_lease_block) == 16, "wire ABI");

/**
 * struct kvp_lease - LEASED payload, followed by @n_blocks struct kvp_lease_block in
 * prompt order.  The blocks stay referenced (never evicted or reused) until RELEASE
 * with req_id = @lease_id, the connection's end, or @ttl_ms, whichever comes first.
 * @lease_id:     names the lease in RELEASE (0 when @n_blocks is 0: nothing is held)
 * @n_blocks:     blocks matched, from the first; @n_blocks * shape.block_tokens tokens
 * @ttl_ms:       granted lifetime
 * @block_stride, @data_offset, @shape: the pool's layout (as WELCOME's)
 */
struct kvp_lease {
	uint64_t lease_id;
	uint32_t n_blocks;
	uint32_t ttl_ms;
	uint64_t block_stride;
	uint64_t data_offset;
	struct kvp_model_shape shape;
};
static_assert(sizeof(struct kvp_lease) == 56, "wire ABI");
/* ---- prompt-cache control (docs/protocol.md, "Cache control") ---- */

#define KVP_CACHE_BREAKPOINTS_MAX 4
#define KVP_PARALLEL_MAX 16 /* most continuations one GENERATE may ask for */

/* struct kvp_cache_ctl flags */
#define KVP_CC_RETAIN 0x1u /* @retain is set (else the daemon's cache.retain_default) */
/*
 * CHAT only: @breakpoints count messages, not tokens: breakpoint k is the prefix that
 * ends after the k-th message (1 .. n_messages); the daemon maps it onto the prompt's
 * ids (docs/protocol.md, "Message breakpoints")
 */
#define KVP_CC_BP_MESSAGES 0x2u
#define KVP_CC__ALL 0x3u

/**
 * struct kvp_cache_ctl - cache control of one GENERATE (KVP_GEN_CACHE_CTL) or CHAT
 * (KVP_CHAT_CACHE_CTL); sits right after struct kvp_generate / kvp_chat, before the
 * prompt.  A request that carries it gets struct kvp_cache_usage after its DONE's usage.
 * @flags:         KVP_CC_*
 * @n_breakpoints: 0 = automatic (every full prompt block is published); 1 ..
 *                 KVP_CACHE_BREAKPOINTS_MAX: only the prefix up to the last breakpoint is
 *                 published (its full blocks), and nothing generated
 * @breakpoints:   prefix lengths in prompt tokens, strictly increasing, each in
 *                 [1, prompt length]
 * @bp_ttl_s:      TTL of the blocks up to each breakpoint (seconds; 0 = @ttl_s); a block
 *                 takes the longest TTL of the breakpoints covering it
 * @ttl_s:         TTL of the blocks this request publishes or hits (0 = cache.ttl_default);
 *                 at most cache.ttl_max
 * @retain:        retention priority 0..100 (cache.eviction = priority), with KVP_CC_RETAIN
 * @n:             continuations to sample (parallel sampling; 0 or 1 = one); continuation
 *                 i samples with seed + i; GENERATE only
 * @reserved:      zero
 */
struct kvp_cache_ctl {
	uint32_t flags;
	uint32_t n_breakpoints;
	uint32_t breakpoints[KVP_CACHE_BREAKPOINTS_MAX];
	uint32_t bp_ttl_s[KVP_CACHE_BREAKPOINTS_MAX];
	uint32_t ttl_s;
	uint32_t retain;
	uint32_t n;
	uint32_t reserved[3];
};
static_assert(sizeof(struct kvp_cache_ctl) == 64, "wire ABI");
static_assert(offsetof(struct kvp_cache_ctl, ttl_s) == 40, "wire ABI");

/* Why a request's prompt was not (entirely) served from the cache. */
enum kvp_miss_reason {
	KVP_MISS_NONE = 0,	/* every block a lookup can cover was hit */
	KVP_MISS_NO_PREFIX,	/* the next block was never cached (or forgotten long ago) */
	KVP_MISS_BELOW_BLOCK,	/* the prompt has no full block before its last token */
	KVP_MISS_BELOW_MINIMUM, /* shorter than cache.min_tokens: not looked up, not published */
	KVP_MISS_EVICTED,	/* the next block was cached and evicted (@miss_tier: from where) */
	KVP_MISS_SALT_MISMATCH, /* the prefix is cached under another salt */
	KVP_MISS_MODEL_MISMATCH, /* ... under other model keys (fingerprint, RoPE, dtype) */
	KVP_MISS_DISABLED,	 /* no-cache */
	KVP_MISS_IO_ERROR,	 /* the disk tier failed to read a block back */
	KVP_MISS__COUNT
};

/* struct kvp_cache_usage.miss_tier */
enum kvp_miss_tier { KVP_MISS_TIER_NONE = 0, KVP_MISS_TIER_MEMORY = 1, KVP_MISS_TIER_DISK = 2 };

/**
 * struct kvp_cache_usage - after struct kvp_usage in the DONE of a request that carried
 * struct kvp_cache_ctl, and of PIN, UNPIN and FLUSH
 * @miss_reason:    enum kvp_miss_reason (at the request's first admission)
 * @miss_tier:      enum kvp_miss_tier: for KVP_MISS_EVICTED, where the block was evicted
 *                  from
 * @matched_blocks: full prompt blocks served from the cache (memory and disk)
 * @evicted_tokens: prompt tokens computed again because their blocks had been evicted
 * @ttl_s:          TTL given to the blocks it published or hit (0: none, no-cache)
 * @n:              continuations sampled
 * @blocks:         PIN: blocks pinned; UNPIN: unpinned; FLUSH: dropped; else 0
 * @reserved:       zero
 */
struct kvp_cache_usage {
	uint32_t miss_reason;
	uint32_t miss_tier;
	uint32_t matched_blocks;
	uint32_t evicted_tokens;
	uint32_t ttl_s;
	uint32_t n;
	uint32_t blocks;
	uint32_t reserved;
};
static_assert(sizeof(struct kvp_cache_usage) == 32, "wire ABI");

/**
 * struct kvp_spec_usage - last in the DONE of a request that set KVP_GEN_SPEC_USAGE
 * (KVP_CHAT_SPEC_USAGE): its speculative decoding, summed over its continuations
 * @drafted:  draft tokens verified as extra rows of its decode steps (0: it never drafted)
 * @accepted: those the model's own pick agreed with, kept (<= @drafted): tokens no decode
 *            step of their own gave
 */
struct kvp_spec_usage {
	uint32_t drafted;
	uint32_t accepted;
};
static_assert(sizeof(struct kvp_spec_usage) == 8, "wire ABI");

/*
 * struct kvp_token_cont - after a TOKEN's text when its request asked for n > 1
 * continuations: which one the tokens belong to (0 .. n-1)
 */
struct kvp_token_cont {
	uint32_t index;
	uint32_t reserved;
};
static_assert(sizeof(struct kvp_token_cont) == 8, "wire ABI");

/* ---- the sampling section (docs/protocol.md, "Sampling") ---- */

/* struct kvp_sampling flags */
#define KVP_SAMP_LOGPROBS 0x1u /* LOGPROBS frames: each generated id's log-probability */
/* a budget for the reasoning section: struct kvp_sampling.think_budget */
#define KVP_SAMP_THINK_BUDGET 0x2u
#define KVP_SAMP__ALL 0x3u

/* struct kvp_sampling.grammar */
enum kvp_grammar_kind {
	KVP_GRAMMAR_NONE = 0,
	KVP_GRAMMAR_JSON_OBJECT, /* any JSON object */
	KVP_GRAMMAR_JSON_SCHEMA, /* @schema_bytes of JSON Schema text (compute/grammar.h) */
	KVP_GRAMMAR__COUNT
};

#define KVP_TOP_LOGPROBS_MAX 20
#define KVP_LOGIT_BIAS_MAX 300
#define KVP_SCHEMA_BYTES_MAX (1u << 20)

/**
 * struct kvp_sampling - the sampling section of a GENERATE (KVP_GEN_SAMPLING) or CHAT
 * (KVP_CHAT_SAMPLING): after struct kvp_cache_ctl when there is one (else right after
 * struct kvp_generate / kvp_chat), before the prompt; followed by @n_bias struct
 * kvp_logit_bias, then @schema_bytes of schema text.  Absent: none of it applies.
 * @flags:             KVP_SAMP_*
 * @top_logprobs:      with KVP_SAMP_LOGPROBS: the most likely ids listed per position,
 *                     0 .. KVP_TOP_LOGPROBS_MAX
 * @presence_penalty, @frequency_penalty: in [-2, 2]: subtracted from the logit of every
 *                     id generated so far, once / times its count
 * @n_bias:            0 .. KVP_LOGIT_BIAS_MAX entries, ids < n_vocab, bias in [-100, 100]
 * @grammar:           enum kvp_grammar_kind
 * @schema_bytes:      KVP_GRAMMAR_JSON_SCHEMA: 1 .. KVP_SCHEMA_BYTES_MAX; else 0
 * @think_budget:      with KVP_SAMP_THINK_BUDGET (else zero): once a reasoning section
 *                     the model opened ("<think>") holds this many tokens (>= 1) and is
 *                     still open, its end ("</think>") is the next token, forced; a
 *                     vocabulary without both tokens refuses the request
 */
struct kvp_sampling {
	uint32_t flags;
	uint32_t top_logprobs;
	float presence_penalty;
	float frequency_penalty;
	uint32_t n_bias;
	uint32_t grammar;
	uint32_t schema_bytes;
	uint32_t think_budget;
};
static_assert(sizeof(struct kvp_sampling) == 32, "wire ABI");

struct kvp_logit_bias {
	int32_t id;
	float bias;
};
static_assert(sizeof(struct kvp_logit_bias) == 8, "wire ABI");

/**
 * struct kvp_logprobs - LOGPROBS payload: for each of the next TOKEN's @n_tokens ids,
 * one struct kvp_logprob then @n_top struct kvp_logprob (the most likely ids, most likely
 * first).  The log-probabilities are the model's (log-softmax of the logits after the
 * bias, penalties and grammar; before temperature, top-k and top-p).
 * @n_tokens: 1 .. the TOKEN's ids
 * @n_top:    top_logprobs asked (fewer only when the vocabulary is smaller)
 */
struct kvp_logprobs {
	uint32_t n_tokens;
	uint32_t n_top;
};
static_assert(sizeof(struct kvp_logprobs) == 8, "wire ABI");

struct kvp_logprob {
	int32_t id;
	float logprob;
};
static_assert(sizeof(struct kvp_logprob) == 8, "wire ABI");

/**
 * struct kvp_pin - PIN / UNPIN payload, followed by n_tokens int32 ids or text_bytes of
 * text (exactly one non-zero, as KVP_GEN_TEXT says).  PIN computes the prompt's full
 * blocks if they are not cached and keeps them until UNPIN of the same prompt and salt;
 * answered by DONE (usage + struct kvp_cache_usage: @blocks pinned) or ERROR
 * (KVP_E_DENIED unless cache.pin_allowed; KVP_E_LIMIT past cache.pin_max).
 * @flags: KVP_GEN_TEXT, KVP_GEN_PARSE_SPECIAL
 */
struct kvp_pin {
	uint32_t flags;
	uint32_t n_tokens;
	uint32_t text_bytes;
	uint32_t salt_len;
	uint8_t salt[KVP_SALT_MAX];
};
static_assert(sizeof(struct kvp_pin) == 80, "wire ABI");

#endif /* KVPOOL_PROTO_H */
