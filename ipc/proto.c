/* SPDX-License-Identifier: MIT */
/*
 * proto.c - kvpool frame encoders and validating decoders (see proto.h).
 *
 * Invariant: a decoder reads the payload only through a struct kvp_cur and checks,
 * in this order, structure (KVP_E_PROTO: sizes, reserved bytes, flags, the payload's
 * own lengths against what the frame holds), configured maxima (KVP_E_LIMIT), then
 * values (KVP_E_INVALID).  A frame passes only if every byte is accounted for:
 * trailing bytes are as malformed as missing ones.
 *
 * Thread: none of its own; pure functions.  Linked into the daemon and libkvpool.
 */
#include "ipc/proto.h"

#include <math.h>
#include <string.h>

#include "util/utf8.h"

static const char *const type_names[KVP_FRAME__COUNT] = {
	[KVP_FRAME_HELLO] = "HELLO",
	[KVP_FRAME_WELCOME] = "WELCOME",
	[KVP_FRAME_GENERATE] = "GENERATE",
	[KVP_FRAME_TOKEN] = "TOKEN",
	[KVP_FRAME_DONE] = "DONE",
	[KVP_FRAME_CANCEL] = "CANCEL",
	[KVP_FRAME_ERROR] = "ERROR",
	[KVP_FRAME_TOKENIZE] = "TOKENIZE",
	[KVP_FRAME_DETOKENIZE] = "DETOKENIZE",
	[KVP_FRAME_CHAT] = "CHAT",
	[KVP_FRAME_IDS] = "IDS",
	[KVP_FRAME_LEASE] = "LEASE",
	[KVP_FRAME_LEASED] = "LEASED",
	[KVP_FRAME_RELEASE] = "RELEASE",
	[KVP_FRAME_PIN] = "PIN",
	[KVP_FRAME_UNPIN] = "UNPIN",
	[KVP_FRAME_FLUSH] = "FLUSH",
	[KVP_FRAME_LOGPROBS] = "LOGPROBS",
};

static const char *const status_strs[KVP_STATUS__COUNT] = {
	[KVP_OK] = "ok",
	[KVP_E_PROTO] = "malformed frame",
	[KVP_E_VERSION] = "unsupported protocol version",
	[KVP_E_LIMIT] = "a configured limit was exceeded",
	[KVP_E_INVALID] = "invalid request",
	[KVP_E_NOSPACE] = "request can never fit in the pool",
	[KVP_E_BUSY] = "busy: too many requests or connections",
	[KVP_E_CANCELLED] = "cancelled",
	[KVP_E_INTERNAL] = "internal daemon error",
	[KVP_E_SHUTDOWN] = "daemon shutting down",
	[KVP_E_DENIED] = "not allowed",
};

static const char *const miss_names[KVP_MISS__COUNT] = {
	[KVP_MISS_NONE] = "none",
	[KVP_MISS_NO_PREFIX] = "no_prefix",
	[KVP_MISS_BELOW_BLOCK] = "below_block",
	[KVP_MISS_BELOW_MINIMUM] = "below_minimum",
	[KVP_MISS_EVICTED] = "evicted",
	[KVP_MISS_SALT_MISMATCH] = "salt_mismatch",
	[KVP_MISS_MODEL_MISMATCH] = "model_mismatch",
	[KVP_MISS_DISABLED] = "disabled",
	[KVP_MISS_IO_ERROR] = "io_error",
};

const char *kvp_proto_miss_reason_name(uint32_t reason)
{
	return reason < KVP_MISS__COUNT ? miss_names[reason] : "?";
}

bool kvp_proto_from_client(uint32_t type)
{
	return type == KVP_FRAME_HELLO || type == KVP_FRAME_GENERATE || type == KVP_FRAME_CANCEL ||
	       type == KVP_FRAME_TOKENIZE || type == KVP_FRAME_DETOKENIZE ||
	       type == KVP_FRAME_CHAT || type == KVP_FRAME_LEASE || type == KVP_FRAME_RELEASE ||
	       type == KVP_FRAME_PIN || type == KVP_FRAME_UNPIN || type == KVP_FRAME_FLUSH;
}

const char *kvp_proto_type_name(uint32_t type)
{
	return type < KVP_FRAME__COUNT ? type_names[type] : "?";
}

const char *kvp_proto_status_str(uint32_t status)
{
	return status < KVP_STATUS__COUNT ? status_strs[status] : "unknown status";
}

static int fail(const char **why, const char *msg, int status)
{
	if (why)
		*why = msg;
	return status;
}

/* All-zero check for reserved and padding bytes. */
static bool all_zero(const void *p, size_t n)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
		if (b[i])
			return false;
	return true;
}

/* A salt's bytes past @salt_len must be zero (they would change no hash, silently). */
static int check_salt(const uint8_t *salt, uint32_t salt_len, const char **why)
{
	if (salt_len > KVP_SALT_MAX)
		return fail(why, "salt longer than 64 bytes", KVP_E_PROTO);
	if (!all_zero(salt + salt_len, KVP_SALT_MAX - salt_len))
		return fail(why, "salt padding must be zero", KVP_E_PROTO);
	return KVP_OK;
}

/* More text bytes than the configured cap (0: none)?  Checked before any tokenizing. */
static bool text_too_long(const struct kvp_proto_limits *lim, uint64_t bytes)
{
	return lim->max_text_bytes && bytes > lim->max_text_bytes;
}

/*
 * The prompt of GENERATE and PIN, the rest of the frame: @n_tokens int32 ids, or
 * @text_bytes of text with KVP_GEN_TEXT in @flags (exactly one of them non-zero): ids
 * within max_prompt_tokens, text within max_text_bytes (a memory guard: its tokens are
 * counted against max_prompt_tokens once it is tokenized).  The NUL check of text is the
 * caller's, after its other checks.
 */
static int take_prompt(struct kvp_cur *c, uint32_t flags, uint32_t n_tokens, uint32_t text_bytes,
		       const struct kvp_proto_limits *lim, const void **body, const char **why)
{
	size_t need;

	if (flags & KVP_GEN_TEXT) {
		if (n_tokens || !text_bytes)
			return fail(why, "text prompt must have text_bytes > 0 and n_tokens 0",
				    KVP_E_PROTO);
		need = text_bytes;
	} else {
		if (text_bytes || !n_tokens)
			return fail(why, "token prompt must have n_tokens > 0 and text_bytes 0",
				    KVP_E_PROTO);
		need = (size_t)n_tokens * sizeof(int32_t);
	}
	*body = kvp_cur_take(c, need);
	if (!*body)
		return fail(why, "prompt length beyond the frame", KVP_E_PROTO);
	if (kvp_cur_left(c))
		return fail(why, "trailing bytes after the prompt", KVP_E_PROTO);
	if (n_tokens > lim->max_prompt_tokens)
		return fail(why, "prompt longer than the maximum", KVP_E_LIMIT);
	if (text_too_long(lim, text_bytes))
		return fail(why, "prompt text longer than max_text_bytes", KVP_E_LIMIT);
	return KVP_OK;
}

/**
 * kvp_proto_check_hdr() - validate a frame header
 * @buf:             at least @len bytes from the start of the frame
 * @len:             bytes available (a header needs sizeof(struct kvp_frame_hdr))
 * @max_frame_bytes: largest whole frame allowed
 * @hdr:             out; the decoded header (filled even on error, when @len allows)
 * @why:             out; static description of the fault, or untouched on success
 *
 * Checks magic, version, that @type is a known frame type, that header flags are 0 (no
 * type defines any yet) and that the whole frame fits @max_frame_bytes.
 * Return: KVP_OK, KVP_E_PROTO, KVP_E_VERSION or KVP_E_LIMIT.
 */
int kvp_proto_check_hdr(const void *buf, size_t len, uint32_t max_frame_bytes,
			struct kvp_frame_hdr *hdr, const char **why)
{
	struct kvp_cur c;
	const void *p;

	kvp_cur_init(&c, buf, len);
	p = kvp_cur_take(&c, sizeof(*hdr));
	if (!p)
		return fail(why, "truncated frame header", KVP_E_PROTO);
	memcpy(hdr, p, sizeof(*hdr));
	if (hdr->magic != KVP_WIRE_MAGIC)
		return fail(why, "bad magic", KVP_E_PROTO);
	if (hdr->version != KVP_WIRE_VERSION)
		return fail(why, "protocol version not supported (this daemon speaks 2)",
			    KVP_E_VERSION);
	if (hdr->type >= KVP_FRAME__COUNT)
		return fail(why, "unknown frame type", KVP_E_PROTO);
	if (hdr->flags)
		return fail(why, "header flags must be zero", KVP_E_PROTO);
	if (hdr->len_bytes > max_frame_bytes || max_frame_bytes - hdr->len_bytes < sizeof(*hdr))
		return fail(why, "frame larger than the maximum frame size", KVP_E_LIMIT);
	return KVP_OK;
}

/* Take a fixed-size struct out of a payload that must be exactly that size. */
static int take_exact(const void *payload, size_t len, void *out, size_t size, const char **why)
{
	struct kvp_cur c;
	const void *p;

	kvp_cur_init(&c, payload, len);
	p = kvp_cur_take(&c, size);
	if (!p)
		return fail(why, "payload shorter than its struct", KVP_E_PROTO);
	if (kvp_cur_left(&c))
		return fail(why, "trailing bytes after the payload", KVP_E_PROTO);
	memcpy(out, p, size);
	return KVP_OK;
}

int kvp_proto_decode_hello(const void *payload, size_t len, struct kvp_hello *out, const char **why)
{
	int r = take_exact(payload, len, out, sizeof(*out), why);

	if (r)
		return r;
	if (out->reserved)
		return fail(why, "HELLO reserved field must be zero", KVP_E_PROTO);
	if (out->flags & ~KVP_HELLO_WANT_POOL_FD)
		return fail(why, "unknown HELLO flags", KVP_E_PROTO);
	return KVP_OK;
}

/**
 * kvp_proto_decode_tokenize() - validate a TOKENIZE payload
 * @text: out; the text_bytes of text after the struct (not NUL-terminated)
 * Return: KVP_OK, KVP_E_PROTO, KVP_E_LIMIT (more text bytes than max_text_bytes) or
 *         KVP_E_INVALID (a NUL in the text).
 */
int kvp_proto_decode_tokenize(const void *payload, size_t len, const struct kvp_proto_limits *lim,
			      struct kvp_tokenize *out, const char **text, const char **why)
{
	struct kvp_cur c;
	const void *p;

	kvp_cur_init(&c, payload, len);
	p = kvp_cur_take(&c, sizeof(*out));
	if (!p)
		return fail(why, "TOKENIZE payload shorter than its struct", KVP_E_PROTO);
	memcpy(out, p, sizeof(*out));
	if (out->flags & ~KVP_TOKENIZE__ALL)
		return fail(why, "unknown TOKENIZE flags", KVP_E_PROTO);
	*text = kvp_cur_take(&c, out->text_bytes);
	if (!*text)
		return fail(why, "text length beyond the frame", KVP_E_PROTO);
	if (kvp_cur_left(&c))
		return fail(why, "trailing bytes after the text", KVP_E_PROTO);
	if (text_too_long(lim, out->text_bytes))
		return fail(why, "text longer than max_text_bytes", KVP_E_LIMIT);
	if (memchr(*text, 0, out->text_bytes))
		return fail(why, "text contains a NUL byte", KVP_E_INVALID);
	return KVP_OK;
}

/**
 * kvp_proto_decode_detokenize() - validate a DETOKENIZE payload
 * @ids: out; the n_tokens int32 ids (unaligned; not compared with the vocabulary)
 * Return: KVP_OK, KVP_E_PROTO or KVP_E_LIMIT (more ids than max_prompt_tokens).
 */
int kvp_proto_decode_detokenize(const void *payload, size_t len, const struct kvp_proto_limits *lim,
				struct kvp_detokenize *out, const void **ids, const char **why)
{
	struct kvp_cur c;
	const void *p;

	kvp_cur_init(&c, payload, len);
	p = kvp_cur_take(&c, sizeof(*out));
	if (!p)
		return fail(why, "DETOKENIZE payload shorter than its struct", KVP_E_PROTO);
	memcpy(out, p, sizeof(*out));
	if (out->flags & ~KVP_DETOKENIZE__ALL)
		return fail(why, "unknown DETOKENIZE flags", KVP_E_PROTO);
	*ids = kvp_cur_take(&c, (uint64_t)out->n_tokens * sizeof(int32_t));
	if (!*ids)
		return fail(why, "ids beyond the frame", KVP_E_PROTO);
	if (kvp_cur_left(&c))
		return fail(why, "trailing bytes after the ids", KVP_E_PROTO);
	if (out->n_tokens > lim->max_prompt_tokens)
		return fail(why, "more ids than the maximum prompt", KVP_E_LIMIT);
	return KVP_OK;
}

int kvp_proto_decode_welcome(const void *payload, size_t len, struct kvp_welcome *out,
			     const char **why)
{
	int r = take_exact(payload, len, out, sizeof(*out), why);

	if (r)
		return r;
	if (out->n_fds > 1)
		return fail(why, "WELCOME announces more than one fd", KVP_E_PROTO);
	if (out->shape.reserved0)
		return fail(why, "WELCOME reserved field must be zero", KVP_E_PROTO);
	return KVP_OK;
}

int kvp_proto_decode_token(const void *payload, size_t len, struct kvp_token *out, const void **ids,
			   const char **text, int32_t *cont, struct kvp_usage *usage,
			   bool *has_usage, const char **why)
{
	struct kvp_cur c;
	const void *p;

	kvp_cur_init(&c, payload, len);
	p = kvp_cur_take(&c, sizeof(*out));
	if (!p)
		return fail(why, "TOKEN payload shorter than its struct", KVP_E_PROTO);
	memcpy(out, p, sizeof(*out));
	*ids = kvp_cur_take(&c, (size_t)out->n_tokens * sizeof(int32_t));
	*text = kvp_cur_take(&c, out->text_bytes);
	if (!*ids || !*text)
		return fail(why, "TOKEN lengths beyond the frame", KVP_E_PROTO);
	if (cont)
		*cont = -1;
	if (has_usage)
		*has_usage = false;
	if (cont && (kvp_cur_left(&c) == sizeof(struct kvp_token_cont) ||
		     (usage && kvp_cur_left(&c) ==
				       sizeof(struct kvp_token_cont) + sizeof(struct kvp_usage)))) {
		struct kvp_token_cont tc;

		memcpy(&tc, kvp_cur_take(&c, sizeof(tc)), sizeof(tc));
		if (tc.reserved || tc.index >= KVP_PARALLEL_MAX)
			return fail(why, "TOKEN continuation out of range", KVP_E_PROTO);
		*cont = (int32_t)tc.index;
	}
	if (usage && kvp_cur_left(&c) == sizeof(*usage)) {
		memcpy(usage, kvp_cur_take(&c, sizeof(*usage)), sizeof(*usage));
		*has_usage = true;
	}
	if (kvp_cur_left(&c))
		return fail(why, "trailing bytes after TOKEN", KVP_E_PROTO);
	return KVP_OK;
}

int kvp_proto_decode_ids(const void *payload, size_t len, struct kvp_ids *out, const void **ids,
			 const char **text, const char **why)
{
	struct kvp_cur c;
	const void *p;

	kvp_cur_init(&c, payload, len);
	p = kvp_cur_take(&c, sizeof(*out));
	if (!p)
		return fail(why, "IDS payload shorter than its struct", KVP_E_PROTO);
	memcpy(out, p, sizeof(*out));
	*ids = kvp_cur_take(&c, (uint64_t)out->n_tokens * sizeof(int32_t));
	*text = kvp_cur_take(&c, out->text_bytes);
	if (!*ids || !*text)
		return fail(why, "IDS lengths beyond the frame", KVP_E_PROTO);
	if (kvp_cur_left(&c))
		return fail(why, "trailing bytes after IDS", KVP_E_PROTO);
	return KVP_OK;
}

int kvp_proto_decode_done(const void *payload, size_t len, struct kvp_usage *out,
			  struct kvp_cache_usage *cu, bool *has_cu, struct kvp_spec_usage *su,
			  bool *has_su, const char **why)
{
	const uint8_t *p = payload;
	bool with_cu, with_su;
	size_t rest;

	if (cu) {
		memset(cu, 0, sizeof(*cu));
		*has_cu = false;
	}
	if (su) {
		memset(su, 0, sizeof(*su));
		*has_su = false;
	}
	if (len < sizeof(*out))
		return fail(why, "payload shorter than its struct", KVP_E_PROTO);
	/* the trailers are told apart by the bytes left: 32 (cache), 8 (speculation), 40 */
	rest = len - sizeof(*out);
	with_su = su && (rest == sizeof(*su) || (cu && rest == sizeof(*cu) + sizeof(*su)));
	rest -= with_su ? sizeof(*su) : 0;
	with_cu = cu && rest == sizeof(*cu);
	rest -= with_cu ? sizeof(*cu) : 0;
	if (rest)
		return fail(why, "trailing bytes after the payload", KVP_E_PROTO);
	memcpy(out, p, sizeof(*out));
	p += sizeof(*out);
	if (with_cu) {
		*has_cu = true;
		memcpy(cu, p, sizeof(*cu));
		p += sizeof(*cu);
		if (cu->miss_reason >= KVP_MISS__COUNT || cu->miss_tier > KVP_MISS_TIER_DISK ||
		    cu->reserved)
			return fail(why, "DONE cache usage out of range", KVP_E_PROTO);
	}
	if (with_su) {
		*has_su = true;
		memcpy(su, p, sizeof(*su));
		if (su->accepted > su->drafted)
			return fail(why, "DONE accepted more draft tokens than it drafted",
				    KVP_E_PROTO);
	}
	return KVP_OK;
}

int kvp_proto_decode_pin(const void *payload, size_t len, const struct kvp_proto_limits *lim,
			 struct kvp_pin *out, const void **body, const char **why)
{
	struct kvp_cur c;
	const void *p;
	int r;

	kvp_cur_init(&c, payload, len);
	p = kvp_cur_take(&c, sizeof(*out));
	if (!p)
		return fail(why, "PIN payload shorter than its struct", KVP_E_PROTO);
	memcpy(out, p, sizeof(*out));
	if (out->flags & ~(KVP_GEN_TEXT | KVP_GEN_PARSE_SPECIAL))
		return fail(why, "unknown PIN flags", KVP_E_PROTO);
	r = check_salt(out->salt, out->salt_len, why);
	if (r)
		return r;
	r = take_prompt(&c, out->flags, out->n_tokens, out->text_bytes, lim, body, why);
	if (r)
		return r;
	if ((out->flags & KVP_GEN_TEXT) && memchr(*body, 0, out->text_bytes))
		return fail(why, "prompt text contains a NUL byte", KVP_E_INVALID);
	return KVP_OK;
}

int kvp_proto_decode_error(const void *payload, size_t len, struct kvp_error *out, const char **msg,
			   const char **why)
{
	struct kvp_cur c;
	const void *p;

	kvp_cur_init(&c, payload, len);
	p = kvp_cur_take(&c, sizeof(*out));
	if (!p)
		return fail(why, "ERROR payload shorter than its struct", KVP_E_PROTO);
	memcpy(out, p, sizeof(*out));
	*msg = kvp_cur_take(&c, out->msg_bytes);
	if (!*msg)
		return fail(why, "ERROR message beyond the frame", KVP_E_PROTO);
	if (kvp_cur_left(&c))
		return fail(why, "trailing bytes after ERROR", KVP_E_PROTO);
	return KVP_OK;
}

/* kvp_proto_hdr_init() - a header for a frame of @type with @len_bytes of payload */
void kvp_proto_hdr_init(struct kvp_frame_hdr *hdr, uint32_t type, uint64_t req_id,
			uint32_t len_bytes)
{
	*hdr = (struct kvp_frame_hdr){
		.magic = KVP_WIRE_MAGIC,
		.version = KVP_WIRE_VERSION,
		.type = (uint16_t)type,
		.len_bytes = len_bytes,
		.req_id = req_id,
	};
}

/*
 * Frame writer: header, then up to three payload pieces.  Like snprintf it returns the
 * length the frame needs and writes nothing when @cap is too small; a payload that
 * does not fit a u32 length yields 0 (never a valid frame length).
 */
static size_t put_frame(void *buf, size_t cap, uint32_t type, uint64_t req_id, const void *a,
			size_t na, const void *b, size_t nb, const void *c, size_t nc)
{
	struct kvp_frame_hdr hdr;
	size_t payload = na + nb + nc;
	uint8_t *o = buf;

	if (payload > UINT32_MAX - sizeof(hdr))
		return 0;
	if (sizeof(hdr) + payload > cap)
		return sizeof(hdr) + payload;
	kvp_proto_hdr_init(&hdr, type, req_id, (uint32_t)payload);
	memcpy(o, &hdr, sizeof(hdr));
	o += sizeof(hdr);
	if (na)
		memcpy(o, a, na);
	if (nb)
		memcpy(o + na, b, nb);
	if (nc)
		memcpy(o + na + nb, c, nc);
	return sizeof(hdr) + payload;
}

/*
 * Encoders.  Each returns the frame length; when it exceeds @cap nothing was written.
 * They do not validate: the caller builds the payload structs (zeroing reserved
 * fields), and the peer's decoder is the judge.
 */
size_t kvp_proto_encode_hello(void *buf, size_t cap, const struct kvp_hello *h)
{
	return put_frame(buf, cap, KVP_FRAME_HELLO, 0, h, sizeof(*h), NULL, 0, NULL, 0);
}

size_t kvp_proto_encode_logprobs(void *buf, size_t cap, uint64_t req_id,
				 const struct kvp_logprobs *h, const struct kvp_logprob *entries)
{
	return put_frame(buf, cap, KVP_FRAME_LOGPROBS, req_id, h, sizeof(*h), entries,
			 (size_t)h->n_tokens * (1 + h->n_top) * sizeof(*entries), NULL, 0);
}

int kvp_proto_decode_logprobs(const void *payload, size_t len, struct kvp_logprobs *out,
			      const void **entries, const char **why)
{
	struct kvp_cur c;
	const void *p;

	kvp_cur_init(&c, payload, len);
	p = kvp_cur_take(&c, sizeof(*out));
	if (!p)
		return fail(why, "LOGPROBS payload shorter than its struct", KVP_E_PROTO);
	memcpy(out, p, sizeof(*out));
	if (!out->n_tokens || out->n_tokens > KVP_LOGPROBS_TOKENS_MAX ||
	    out->n_top > KVP_TOP_LOGPROBS_MAX)
		return fail(why, "LOGPROBS counts out of range", KVP_E_PROTO);
	*entries = kvp_cur_take(&c, (size_t)out->n_tokens * (1 + out->n_top) *
					    sizeof(struct kvp_logprob));
	if (!*entries || kvp_cur_left(&c))
		return fail(why, "LOGPROBS entries do not fill the frame", KVP_E_PROTO);
	return KVP_OK;
}

size_t kvp_proto_encode_pin(void *buf, size_t cap, uint32_t type, uint64_t req_id,
			    const struct kvp_pin *pin, const void *body)
{
	size_t nbody = (pin->flags & KVP_GEN_TEXT) ? pin->text_bytes :
						     (size_t)pin->n_tokens * sizeof(int32_t);

	return put_frame(buf, cap, type, req_id, pin, sizeof(*pin), body, nbody, NULL, 0);
}

size_t kvp_proto_encode_flush(void *buf, size_t cap, uint64_t req_id)
{
	return put_frame(buf, cap, KVP_FRAME_FLUSH, req_id, NULL, 0, NULL, 0, NULL, 0);
}

size_t kvp_proto_encode_flush_domain(void *buf, size_t cap, uint64_t req_id, const char *domain)
{
	size_t n = domain ? strlen(domain) : 0;

	return put_frame(buf, cap, KVP_FRAME_FLUSH, req_id, domain, n, NULL, 0, NULL, 0);
}

size_t kvp_proto_encode_token(void *buf, size_t cap, uint64_t req_id, const int32_t *ids,
			      uint32_t n_ids, const char *text, uint32_t text_bytes, int32_t cont,
			      const struct kvp_usage *usage)
{
	struct kvp_frame_hdr hdr;
	struct kvp_token t = { .n_tokens = n_ids, .text_bytes = text_bytes };
	struct kvp_token_cont tc = { .index = (uint32_t)cont };
	size_t ni = (size_t)n_ids * sizeof(int32_t);
	size_t n = put_frame(buf, cap, KVP_FRAME_TOKEN, req_id, &t, sizeof(t), ids, ni, text,
			     text_bytes);
	size_t extra = (cont >= 0 ? sizeof(tc) : 0) + (usage ? sizeof(*usage) : 0);

	/* the frame with room for the trailers: patch the length and append them */
	if (!n || !extra)
		return n;
	if (n + extra > cap)
		return n + extra;
	if (cont >= 0)
		memcpy((uint8_t *)buf + n, &tc, sizeof(tc));
	if (usage)
		memcpy((uint8_t *)buf + n + (cont >= 0 ? sizeof(tc) : 0), usage, sizeof(*usage));
	kvp_proto_hdr_init(&hdr, KVP_FRAME_TOKEN, req_id, (uint32_t)(n - sizeof(hdr) + extra));
	memcpy(buf, &hdr, sizeof(hdr));
	return n + extra;
}

size_t kvp_proto_encode_cancel(void *buf, size_t cap, uint64_t req_id)
{
	return put_frame(buf, cap, KVP_FRAME_CANCEL, req_id, NULL, 0, NULL, 0, NULL, 0);
}

size_t kvp_proto_encode_welcome(void *buf, size_t cap, const struct kvp_welcome *w)
{
	return put_frame(buf, cap, KVP_FRAME_WELCOME, 0, w, sizeof(*w), NULL, 0, NULL, 0);
}

size_t kvp_proto_encode_done(void *buf, size_t cap, uint64_t req_id, const struct kvp_usage *u,
			     const struct kvp_cache_usage *cu, const struct kvp_spec_usage *su)
{
	return put_frame(buf, cap, KVP_FRAME_DONE, req_id, u, sizeof(*u), cu, cu ? sizeof(*cu) : 0,
			 su, su ? sizeof(*su) : 0);
}

size_t kvp_proto_encode_tokenize(void *buf, size_t cap, uint64_t req_id,
				 const struct kvp_tokenize *t, const char *text)
{
	return put_frame(buf, cap, KVP_FRAME_TOKENIZE, req_id, t, sizeof(*t), text, t->text_bytes,
			 NULL, 0);
}

size_t kvp_proto_encode_detokenize(void *buf, size_t cap, uint64_t req_id,
				   const struct kvp_detokenize *d, const int32_t *ids)
{
	return put_frame(buf, cap, KVP_FRAME_DETOKENIZE, req_id, d, sizeof(*d), ids,
			 (size_t)d->n_tokens * sizeof(int32_t), NULL, 0);
}

size_t kvp_proto_encode_ids(void *buf, size_t cap, uint64_t req_id, const int32_t *ids,
			    uint32_t n_ids, const char *text, uint32_t text_bytes)
{
	struct kvp_ids h = { .n_tokens = n_ids, .text_bytes = text_bytes };

	return put_frame(buf, cap, KVP_FRAME_IDS, req_id, &h, sizeof(h), ids,
			 (size_t)n_ids * sizeof(int32_t), text, text_bytes);
}

size_t kvp_proto_encode_error(void *buf, size_t cap, uint64_t req_id, uint32_t status,
			      const char *msg, uint32_t msg_bytes)
{
	struct kvp_error e = { .status = status, .msg_bytes = msg_bytes };

	return put_frame(buf, cap, KVP_FRAME_ERROR, req_id, &e, sizeof(e), msg, msg_bytes, NULL, 0);
}

/* ---- GENERATE and CHAT: one request, one decoder (proto.h, struct kvp_gen_req) ---- */

/*
 * The sampling values and the priority GENERATE and CHAT share.
 * Return: KVP_OK or KVP_E_INVALID.
 */
static int check_sampling(const struct kvp_gen_req *r, const char **why)
{
	if (!r->max_new_tokens)
		return fail(why, "max_new_tokens must be at least 1", KVP_E_INVALID);
	if (!isfinite(r->temperature) || r->temperature < 0.0f ||
	    r->temperature > KVP_TEMPERATURE_MAX)
		return fail(why, "temperature must be finite and in [0, 100]", KVP_E_INVALID);
	if (!isfinite(r->top_p) || !(r->top_p > 0.0f) || r->top_p > 1.0f)
		return fail(why, "top_p must be in (0, 1]", KVP_E_INVALID);
	if ((r->priority < KVP_PRIORITY_MIN || r->priority > KVP_PRIORITY_MAX) &&
	    r->priority != KVP_PRIORITY_DEFAULT)
		return fail(why, "priority must be in [-1000, 1000]", KVP_E_INVALID);
	return KVP_OK;
}

/* The fixed struct of @type at @c into @r: its own fields, and the structure checks. */
static int take_fixed(struct kvp_cur *c, uint32_t type, struct kvp_gen_req *r, const char **why)
{
	struct kvp_generate g;
	struct kvp_chat ch;
	const void *p;

	*r = (struct kvp_gen_req){ .type = type };
	if (type == KVP_FRAME_GENERATE) {
		p = kvp_cur_take(c, sizeof(g));
		if (!p)
			return fail(why, "GENERATE payload shorter than its struct", KVP_E_PROTO);
		memcpy(&g, p, sizeof(g));
		if (g.flags & ~KVP_GEN__ALL)
			return fail(why, "unknown GENERATE flags", KVP_E_PROTO);
		if (g.reserved)
			return fail(why, "GENERATE reserved field must be zero", KVP_E_PROTO);
		if ((g.flags & KVP_GEN_SPEC_ON) && (g.flags & KVP_GEN_SPEC_OFF))
			return fail(why, "KVP_GEN_SPEC_ON and KVP_GEN_SPEC_OFF together",
				    KVP_E_PROTO);
		*r = (struct kvp_gen_req){ .type = type,
					   .flags = g.flags,
					   .max_new_tokens = g.max_new_tokens,
					   .top_k = g.top_k,
					   .temperature = g.temperature,
					   .top_p = g.top_p,
					   .seed = g.seed,
					   .priority = g.priority,
					   .salt_len = g.salt_len,
					   .n_ids = g.n_tokens,
					   .text_bytes = g.text_bytes };
		memcpy(r->salt, g.salt, sizeof(r->salt));
		return check_salt(g.salt, g.salt_len, why);
	}
	p = kvp_cur_take(c, sizeof(ch));
	if (!p)
		return fail(why, "CHAT payload shorter than its struct", KVP_E_PROTO);
	memcpy(&ch, p, sizeof(ch));
	if (ch.flags & ~KVP_CHAT__ALL)
		return fail(why, "unknown CHAT flags", KVP_E_PROTO);
	*r = (struct kvp_gen_req){ .type = type,
				   .flags = ch.flags,
				   .max_new_tokens = ch.max_new_tokens,
				   .top_k = ch.top_k,
				   .temperature = ch.temperature,
				   .top_p = ch.top_p,
				   .seed = ch.seed,
				   .priority = ch.priority,
				   .salt_len = ch.salt_len,
				   .n_ids = ch.n_context,
				   .context_msgs = ch.context_msgs,
				   .n_messages = ch.n_messages };
	memcpy(r->salt, ch.salt, sizeof(r->salt));
	memcpy(r->template_name, ch.template_name, sizeof(r->template_name));
	if (check_salt(ch.salt, ch.salt_len, why))
		return KVP_E_PROTO; /* check_salt() said why */
	if (!ch.n_messages)
		return fail(why, "CHAT without messages", KVP_E_PROTO);
	if (!ch.n_context != !ch.context_msgs || ch.context_msgs > ch.n_messages)
		return fail(why,
			    "context_msgs must be 0 exactly without context ids, and at most "
			    "n_messages",
			    KVP_E_PROTO);
	return KVP_OK;
}

/* struct kvp_cache_ctl at @c: what makes it malformed (its values come later). */
static int take_cache_ctl(struct kvp_cur *c, struct kvp_cache_ctl *cc, const char **why)
{
	const void *p = kvp_cur_take(c, sizeof(*cc));

	if (!p)
		return fail(why, "cache control beyond the frame", KVP_E_PROTO);
	memcpy(cc, p, sizeof(*cc));
	if (cc->flags & ~KVP_CC__ALL)
		return fail(why, "unknown cache control flags", KVP_E_PROTO);
	if (!all_zero(cc->reserved, sizeof(cc->reserved)))
		return fail(why, "cache control reserved fields must be zero", KVP_E_PROTO);
	for (uint32_t i = cc->n_breakpoints; i < KVP_CACHE_BREAKPOINTS_MAX; i++)
		if (cc->breakpoints[i] || cc->bp_ttl_s[i])
			return fail(why, "unused cache breakpoints must be zero", KVP_E_PROTO);
	if (!(cc->flags & KVP_CC_RETAIN) && cc->retain)
		return fail(why, "retain set without KVP_CC_RETAIN", KVP_E_PROTO);
	return KVP_OK;
}

/*
 * The values of @r's cache control: breakpoints (at most 4, increasing, above 0; their
 * lengths against the prompt are the daemon's to check, after tokenization), message
 * breakpoints CHAT's only and within its messages, retain, n.
 * Return: KVP_OK, KVP_E_INVALID or KVP_E_LIMIT (n).
 */
static int check_cache_ctl(const struct kvp_gen_req *r, const char **why)
{
	const struct kvp_cache_ctl *cc = &r->cc;
	bool msgs = cc->flags & KVP_CC_BP_MESSAGES;

	if (cc->n_breakpoints > KVP_CACHE_BREAKPOINTS_MAX)
		return fail(why, "more than 4 cache breakpoints", KVP_E_INVALID);
	for (uint32_t i = 0; i < cc->n_breakpoints; i++) {
		if (!cc->breakpoints[i] && msgs)
			return fail(why, "a message breakpoint counts at least one message",
				    KVP_E_INVALID);
		if (!cc->breakpoints[i] || (i && cc->breakpoints[i] <= cc->breakpoints[i - 1]))
			return fail(why, "cache breakpoints must be increasing and above 0",
				    KVP_E_INVALID);
	}
	if (cc->retain > 100)
		return fail(why, "retention priority must be in [0, 100]", KVP_E_INVALID);
	if (cc->n > KVP_PARALLEL_MAX)
		return fail(why, "more continuations than the maximum (16)", KVP_E_LIMIT);
	/* a GENERATE's prompt has no messages to count */
	if (msgs && r->type != KVP_FRAME_CHAT)
		return fail(why, "message breakpoints (KVP_CC_BP_MESSAGES) are for CHAT only",
			    KVP_E_INVALID);
	if (msgs && cc->n_breakpoints && cc->breakpoints[cc->n_breakpoints - 1] > r->n_messages)
		return fail(why, "a cache breakpoint counts more messages than the chat has",
			    KVP_E_INVALID);
	return KVP_OK;
}

/*
 * The sampling section at @c: struct kvp_sampling, its bias entries, its schema text;
 * lengths and counts only (KVP_E_PROTO: the frame is malformed).
 */
static int take_sampling(struct kvp_cur *c, struct kvp_proto_sampling *out, const char **why)
{
	const void *p = kvp_cur_take(c, sizeof(out->hdr));
	struct kvp_sampling *h = &out->hdr;

	if (!p)
		return fail(why, "sampling section beyond the frame", KVP_E_PROTO);
	memcpy(h, p, sizeof(*h));
	if ((h->flags & ~KVP_SAMP__ALL) || (h->think_budget && !(h->flags & KVP_SAMP_THINK_BUDGET)))
		return fail(why, "unknown sampling flags, or a think_budget without its flag",
			    KVP_E_PROTO);
	if (h->n_bias > KVP_LOGIT_BIAS_MAX || h->schema_bytes > KVP_SCHEMA_BYTES_MAX)
		return fail(why,
			    "sampling section: more bias entries or schema bytes than the maximum",
			    KVP_E_PROTO);
	out->bias = kvp_cur_take(c, (size_t)h->n_bias * sizeof(struct kvp_logit_bias));
	out->schema = kvp_cur_take(c, h->schema_bytes);
	if (!out->bias || !out->schema)
		return fail(why, "sampling section: bias entries or schema beyond the frame",
			    KVP_E_PROTO);
	return KVP_OK;
}

/* The sampling section's values (KVP_E_INVALID: the request alone is refused). */
static int check_sampling_section(const struct kvp_proto_sampling *s, const char **why)
{
	const struct kvp_sampling *h = &s->hdr;

	if (h->grammar >= KVP_GRAMMAR__COUNT)
		return fail(why, "sampling: unknown grammar kind", KVP_E_INVALID);
	if ((h->flags & KVP_SAMP_THINK_BUDGET) && !h->think_budget)
		return fail(why, "sampling: think_budget must be at least 1", KVP_E_INVALID);
	if ((h->grammar == KVP_GRAMMAR_JSON_SCHEMA) != (h->schema_bytes > 0))
		return fail(why, "sampling: a schema comes exactly with a json_schema grammar",
			    KVP_E_INVALID);
	if (h->top_logprobs > KVP_TOP_LOGPROBS_MAX ||
	    (h->top_logprobs && !(h->flags & KVP_SAMP_LOGPROBS)))
		return fail(why, "sampling: top_logprobs must be 0 .. 20, with logprobs",
			    KVP_E_INVALID);
	if (!(h->presence_penalty >= -2.0f && h->presence_penalty <= 2.0f) ||
	    !(h->frequency_penalty >= -2.0f && h->frequency_penalty <= 2.0f))
		return fail(why, "sampling: penalties must be in [-2, 2]", KVP_E_INVALID);
	for (uint32_t i = 0; i < h->n_bias; i++) {
		struct kvp_logit_bias b;

		memcpy(&b, (const uint8_t *)s->bias + i * sizeof(b), sizeof(b));
		if (b.id < 0 || !(b.bias >= -100.0f && b.bias <= 100.0f))
			return fail(why,
				    "sampling: a logit bias id below 0 or bias outside [-100, 100]",
				    KVP_E_INVALID);
	}
	if (memchr(s->schema, 0, h->schema_bytes))
		return fail(why, "sampling: the schema contains a NUL byte", KVP_E_INVALID);
	return KVP_OK;
}

/* The optional sections after the fixed struct, as its flags say, in wire order. */
static int take_sections(struct kvp_cur *c, struct kvp_gen_req *r, const char **why)
{
	int st;

	r->has_cc = r->flags & KVP_GEN_CACHE_CTL;
	if (r->has_cc && (st = take_cache_ctl(c, &r->cc, why)))
		return st;
	r->has_samp = r->flags & KVP_GEN_SAMPLING;
	if (r->has_samp && (st = take_sampling(c, &r->samp, why)))
		return st;
	if (r->type == KVP_FRAME_CHAT && (r->flags & KVP_CHAT_TOOLS)) {
		struct kvp_chat_tools t;
		const void *p = kvp_cur_take(c, sizeof(t));

		if (!p)
			return fail(why, "CHAT tools section beyond the frame", KVP_E_PROTO);
		memcpy(&t, p, sizeof(t));
		if (t.reserved)
			return fail(why, "CHAT tools reserved field must be zero", KVP_E_PROTO);
		r->tools = kvp_cur_take(c, t.bytes);
		if (!r->tools)
			return fail(why, "CHAT tools beyond the frame", KVP_E_PROTO);
		r->tools_len = t.bytes;
	}
	return KVP_OK;
}

/*
 * Walk the messages of a CHAT: each header and its text inside the frame, nothing left
 * over.  Values are checked by check_messages(), after every structural check.
 */
static int walk_messages(struct kvp_cur *c, uint32_t n, uint64_t *text_bytes, const char **why)
{
	*text_bytes = 0;
	for (uint32_t i = 0; i < n; i++) {
		struct kvp_chat_message m;
		const void *p = kvp_cur_take(c, sizeof(m));

		if (!p)
			return fail(why, "chat message header beyond the frame", KVP_E_PROTO);
		memcpy(&m, p, sizeof(m));
		if (!kvp_cur_take(c, m.bytes))
			return fail(why, "chat message text beyond the frame", KVP_E_PROTO);
		*text_bytes += m.bytes;
	}
	if (kvp_cur_left(c))
		return fail(why, "trailing bytes after the messages", KVP_E_PROTO);
	return KVP_OK;
}

/* Is @name (a NUL-padded field) printable ASCII up to its first NUL, and zero after? */
static bool name_ok(const char *name, size_t cap)
{
	size_t i = 0;

	while (i < cap && name[i]) {
		if ((unsigned char)name[i] < 0x20 || (unsigned char)name[i] >= 0x7f)
			return false;
		i++;
	}
	return i < cap && all_zero(name + i, cap - i);
}

/*
 * The messages section at @c (walked already, at most KVP_CHAT_MESSAGES_MAX) into
 * @msgs, each message's values checked.  Return: KVP_OK or KVP_E_INVALID.
 */
static int check_messages(struct kvp_cur *c, struct kvp_gen_req *r, struct kvp_proto_msg *msgs,
			  const char **why)
{
	if ((r->flags & KVP_CHAT_SPEC_ON) && (r->flags & KVP_CHAT_SPEC_OFF))
		return fail(why, "KVP_CHAT_SPEC_ON and KVP_CHAT_SPEC_OFF together", KVP_E_INVALID);
	if ((r->flags & KVP_CHAT_THINKING) && (r->flags & KVP_CHAT_NO_THINKING))
		return fail(why, "KVP_CHAT_THINKING and KVP_CHAT_NO_THINKING together",
			    KVP_E_INVALID);
	for (uint32_t i = 0; i < r->n_messages; i++) {
		struct kvp_chat_message m;
		const char *text;

		memcpy(&m, kvp_cur_take(c, sizeof(m)), sizeof(m));
		text = kvp_cur_take(c, m.bytes);
		if (m.role >= KVP_ROLE__COUNT)
			return fail(why, "unknown chat role", KVP_E_INVALID);
		if (memchr(text, 0, m.bytes))
			return fail(why, "chat message contains a NUL byte", KVP_E_INVALID);
		if (!kvp_utf8_valid(text, m.bytes))
			return fail(why, "chat message is not well-formed UTF-8", KVP_E_INVALID);
		if (m.role == KVP_ROLE_TOOL_CALL) {
			const char *nl = memchr(text, '\n', m.bytes);

			if (!nl || nl == text)
				return fail(why, "a tool call's text must be NAME\\nARGUMENTS",
					    KVP_E_INVALID);
		}
		if ((r->flags & KVP_CHAT_CALL_IDS) &&
		    (m.role == KVP_ROLE_TOOL_CALL || m.role == KVP_ROLE_TOOL)) {
			/* the id: after the name of a call, first in a result */
			const char *id = m.role == KVP_ROLE_TOOL ?
						 text :
						 (const char *)memchr(text, '\n', m.bytes) + 1;
			size_t left = m.bytes - (size_t)(id - text);
			const char *nl = memchr(id, '\n', left);

			if (!nl || nl == id || (size_t)(nl - id) > KVP_CHAT_CALL_ID_MAX)
				return fail(
					why,
					m.role == KVP_ROLE_TOOL ?
						"with KVP_CHAT_CALL_IDS a tool result's text must be "
						"ID\\nRESULT, the id 1 to 64 bytes" :
						"with KVP_CHAT_CALL_IDS a tool call's text must be "
						"NAME\\nID\\nARGUMENTS, the id 1 to 64 bytes",
					KVP_E_INVALID);
		}
		/* the context ends inside an assistant message: the reply it continues */
		if (i + 1 == r->context_msgs && m.role != KVP_ROLE_ASSISTANT)
			return fail(why, "the context must end with an assistant message",
				    KVP_E_INVALID);
		if (msgs)
			msgs[i] = (struct kvp_proto_msg){ .role = m.role,
							  .len = m.bytes,
							  .text = text };
	}
	r->msgs = msgs;
	return KVP_OK;
}

/*
 * What follows the sections: GENERATE's prompt, or CHAT's context ids and messages,
 * the structure (*@conn_fault: any fault here ends the connection) and the limits (a
 * CHAT's are the request's alone).
 */
static int take_prompt_of(struct kvp_cur *c, struct kvp_gen_req *r,
			  const struct kvp_proto_limits *lim, bool *conn_fault, const char **why)
{
	uint64_t text_bytes;
	const void *body;
	int st;

	*conn_fault = true;
	if (r->type == KVP_FRAME_GENERATE) {
		st = take_prompt(c, r->flags, r->n_ids, r->text_bytes, lim, &body, why);
		if (st)
			return st;
		if (r->flags & KVP_GEN_TEXT)
			r->text = body;
		else
			r->ids = body;
		if (r->max_new_tokens > lim->max_new_tokens)
			return fail(why, "max_new_tokens above the maximum", KVP_E_LIMIT);
		return KVP_OK;
	}
	r->ids = kvp_cur_take(c, (uint64_t)r->n_ids * sizeof(int32_t));
	if (!r->ids)
		return fail(why, "context ids beyond the frame", KVP_E_PROTO);
	st = walk_messages(c, r->n_messages, &text_bytes, why);
	if (st)
		return st;
	if (!r->n_ids)
		r->ids = NULL;
	/* a conversation grows turn by turn, and WELCOME announces no message limit */
	*conn_fault = false;
	if (r->n_messages > KVP_CHAT_MESSAGES_MAX)
		return fail(why, "more chat messages than the maximum (1024)", KVP_E_LIMIT);
	if (r->n_ids > lim->max_prompt_tokens)
		return fail(why, "context longer than the maximum prompt", KVP_E_LIMIT);
	/* before the template renders a byte: the messages are of the frame's size */
	if (text_too_long(lim, text_bytes + r->tools_len))
		return fail(why, "chat messages longer than max_text_bytes together", KVP_E_LIMIT);
	if (r->max_new_tokens > lim->max_new_tokens)
		return fail(why, "max_new_tokens above the maximum", KVP_E_LIMIT);
	return KVP_OK;
}

int kvp_proto_decode_request(uint32_t type, const void *payload, size_t len,
			     const struct kvp_proto_limits *lim, struct kvp_gen_req *out,
			     struct kvp_proto_msg *msgs, bool *conn_fault, const char **why)
{
	struct kvp_cur c, m;
	int st;

	*conn_fault = true;
	if (type != KVP_FRAME_GENERATE && type != KVP_FRAME_CHAT)
		return fail(why, "not a GENERATE or CHAT", KVP_E_PROTO);
	kvp_cur_init(&c, payload, len);
	st = take_fixed(&c, type, out, why);
	if (!st)
		st = take_sections(&c, out, why);
	if (st)
		return st;
	m = c; /* CHAT: the messages are read again below, once their values are checked */
	st = take_prompt_of(&c, out, lim, conn_fault, why);
	if (st)
		return st;

	*conn_fault = false;
	st = check_sampling(out, why);
	if (!st && out->has_cc)
		st = check_cache_ctl(out, why);
	if (!st && out->has_samp)
		st = check_sampling_section(&out->samp, why);
	if (st)
		return st;
	if (type == KVP_FRAME_GENERATE) {
		if ((out->flags & KVP_GEN_TEXT) && memchr(out->text, 0, out->text_bytes))
			return fail(why, "prompt text contains a NUL byte", KVP_E_INVALID);
		return KVP_OK;
	}
	if (!name_ok(out->template_name, sizeof(out->template_name)))
		return fail(why, "template name must be NUL-padded printable ASCII", KVP_E_INVALID);
	if (out->tools &&
	    (memchr(out->tools, 0, out->tools_len) || !kvp_utf8_valid(out->tools, out->tools_len)))
		return fail(why, "CHAT tools must be well-formed UTF-8 without NUL", KVP_E_INVALID);
	kvp_cur_take(&m, (size_t)out->n_ids * sizeof(int32_t));
	return check_messages(&m, out, msgs, why);
}

/* An encoder's output: counts every byte, writes them only on its second pass. */
struct wr {
	uint8_t *o;
	size_t len;
};

static void put(struct wr *w, const void *p, size_t n)
{
	if (w->o && n)
		memcpy(w->o + w->len, p, n);
	w->len += n;
}

/* The payload of @r (section flags from its members) through @w. */
static void put_request(struct wr *w, const struct kvp_gen_req *r)
{
	uint32_t sect = KVP_GEN_CACHE_CTL | KVP_GEN_SAMPLING;
	uint32_t flags = r->flags & ~sect;

	flags |= (r->has_cc ? KVP_GEN_CACHE_CTL : 0) | (r->has_samp ? KVP_GEN_SAMPLING : 0);
	if (r->type == KVP_FRAME_GENERATE) {
		struct kvp_generate g = { .flags = flags,
					  .n_tokens = r->n_ids,
					  .text_bytes = r->text_bytes,
					  .max_new_tokens = r->max_new_tokens,
					  .top_k = r->top_k,
					  .temperature = r->temperature,
					  .top_p = r->top_p,
					  .salt_len = r->salt_len,
					  .seed = r->seed,
					  .priority = r->priority };

		memcpy(g.salt, r->salt, sizeof(g.salt));
		put(w, &g, sizeof(g));
	} else {
		struct kvp_chat ch = { .flags = (flags & ~KVP_CHAT_TOOLS) |
						(r->tools ? KVP_CHAT_TOOLS : 0),
				       .n_messages = r->n_messages,
				       .n_context = r->n_ids,
				       .context_msgs = r->context_msgs,
				       .max_new_tokens = r->max_new_tokens,
				       .top_k = r->top_k,
				       .temperature = r->temperature,
				       .top_p = r->top_p,
				       .seed = r->seed,
				       .salt_len = r->salt_len,
				       .priority = r->priority };

		memcpy(ch.salt, r->salt, sizeof(ch.salt));
		memcpy(ch.template_name, r->template_name, sizeof(ch.template_name));
		put(w, &ch, sizeof(ch));
	}
	if (r->has_cc)
		put(w, &r->cc, sizeof(r->cc));
	if (r->has_samp) {
		put(w, &r->samp.hdr, sizeof(r->samp.hdr));
		put(w, r->samp.bias, (size_t)r->samp.hdr.n_bias * sizeof(struct kvp_logit_bias));
		put(w, r->samp.schema, r->samp.hdr.schema_bytes);
	}
	if (r->type == KVP_FRAME_GENERATE) {
		if (r->flags & KVP_GEN_TEXT)
			put(w, r->text, r->text_bytes);
		else
			put(w, r->ids, (size_t)r->n_ids * sizeof(int32_t));
		return;
	}
	if (r->tools) {
		struct kvp_chat_tools t = { .bytes = r->tools_len };

		put(w, &t, sizeof(t));
		put(w, r->tools, r->tools_len);
	}
	put(w, r->ids, (size_t)r->n_ids * sizeof(int32_t));
	for (uint32_t i = 0; i < r->n_messages; i++) {
		struct kvp_chat_message m = { .role = r->msgs[i].role, .bytes = r->msgs[i].len };

		put(w, &m, sizeof(m));
		put(w, r->msgs[i].text, m.bytes);
	}
}

size_t kvp_proto_encode_request(void *buf, size_t cap, uint64_t req_id, const struct kvp_gen_req *r)
{
	struct kvp_frame_hdr hdr;
	struct wr w = { 0 };

	put_request(&w, r); /* the length first: nothing is written unless it all fits */
	if (w.len > UINT32_MAX - sizeof(hdr))
		return 0;
	if (sizeof(hdr) + w.len > cap)
		return sizeof(hdr) + w.len;
	kvp_proto_hdr_init(&hdr, r->type, req_id, (uint32_t)w.len);
	memcpy(buf, &hdr, sizeof(hdr));
	w = (struct wr){ .o = (uint8_t *)buf + sizeof(hdr) };
	put_request(&w, r);
	return sizeof(hdr) + w.len;
}

/* ---- leases ---- */

int kvp_proto_decode_lease_req(const void *payload, size_t len, const struct kvp_proto_limits *lim,
			       struct kvp_lease_req *out, const void **ids, const char **why)
{
	struct kvp_cur c;
	const void *p;
	int r;

	kvp_cur_init(&c, payload, len);
	p = kvp_cur_take(&c, sizeof(*out));
	if (!p)
		return fail(why, "LEASE payload shorter than its struct", KVP_E_PROTO);
	memcpy(out, p, sizeof(*out));
	if (out->flags)
		return fail(why, "unknown LEASE flags", KVP_E_PROTO);
	r = check_salt(out->salt, out->salt_len, why); /* as GENERATE's and PIN's */
	if (r)
		return r;
	if (!out->n_tokens)
		return fail(why, "LEASE of no tokens", KVP_E_INVALID);
	if (out->n_tokens > lim->max_prompt_tokens)
		return fail(why, "LEASE longer than the maximum prompt", KVP_E_LIMIT);
	*ids = kvp_cur_take(&c, (size_t)out->n_tokens * sizeof(int32_t));
	if (!*ids)
		return fail(why, "LEASE ids beyond the frame", KVP_E_PROTO);
	if (kvp_cur_left(&c))
		return fail(why, "trailing bytes after the LEASE ids", KVP_E_PROTO);
	return KVP_OK;
}

int kvp_proto_decode_lease(const void *payload, size_t len, struct kvp_lease *out,
			   const void **blocks, const char **why)
{
	struct kvp_cur c;
	const void *p;

	kvp_cur_init(&c, payload, len);
	p = kvp_cur_take(&c, sizeof(*out));
	if (!p)
		return fail(why, "LEASED payload shorter than its struct", KVP_E_PROTO);
	memcpy(out, p, sizeof(*out));
	*blocks = kvp_cur_take(&c, (size_t)out->n_blocks * sizeof(struct kvp_lease_block));
	if (!*blocks || kvp_cur_left(&c))
		return fail(why, "LEASED blocks do not match the frame", KVP_E_PROTO);
	return KVP_OK;
}

size_t kvp_proto_encode_lease_req(void *buf, size_t cap, uint64_t req_id,
				  const struct kvp_lease_req *l, const int32_t *ids)
{
	return put_frame(buf, cap, KVP_FRAME_LEASE, req_id, l, sizeof(*l), ids,
			 (size_t)l->n_tokens * sizeof(int32_t), NULL, 0);
}

size_t kvp_proto_encode_lease(void *buf, size_t cap, uint64_t req_id, const struct kvp_lease *l,
			      const struct kvp_lease_block *blocks)
{
	return put_frame(buf, cap, KVP_FRAME_LEASED, req_id, l, sizeof(*l), blocks,
			 (size_t)l->n_blocks * sizeof(*blocks), NULL, 0);
}

size_t kvp_proto_encode_release(void *buf, size_t cap, uint64_t lease_id)
{
	return put_frame(buf, cap, KVP_FRAME_RELEASE, lease_id, NULL, 0, NULL, 0, NULL, 0);
}
