/* SPDX-License-Identifier: MIT */
/*
 * grammar.c - JSON Schema to a pushdown automaton over bytes, and token masks.
 *
 * The schema becomes a table of nodes (object, array, string, number, integer,
 * literal set, any value, anyOf).  A position in the text is a small set of threads
 * (anyOf: one per branch still alive), each a stack of frames, one frame per value
 * being written: the frame's node, its state and one counter (items, characters,
 * digits, the next property).  A byte steps every thread; a frame that cannot take a
 * byte but may end there (a number, a literal) is popped and the byte goes to its
 * parent.  Threads are plain bytes compared with memcmp, so the set is deduplicated
 * and a state can key the matcher's mask cache.
 *
 * A mask walks the vocabulary's trie depth first: the state after a node's byte is
 * computed once for every token under it, and a byte that leads nowhere skips its
 * whole subtree.  The trie is an array in depth-first order where each node knows where
 * its subtree ends, so the walk is a loop over an array.
 */
#include "compute/grammar.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* Grammar nodes ------------------------------------------------------------------ */

enum gk {
	GK_ANY = 0, /* any JSON value */
	GK_OBJ,	    /* props: the schema's properties (0: any keys, any values) */
	GK_ARR,	    /* item node, min .. max items */
	GK_STR,	    /* min .. max characters */
	GK_NUM,
	GK_INT,
	GK_LIT, /* one of the literals lits[a .. a + n) (enum, const, boolean, null) */
	GK_ANYOF,
};

struct gnode {
	uint8_t kind;
	uint32_t a, n; /* OBJ: props[a..a+n); LIT: lits[a..a+n); ANYOF: alts[a..a+n) */
	uint64_t req;  /* OBJ: bit i = property i required */
	uint32_t min, max;
	uint32_t item; /* ARR */
};

struct glit {
	char *s; /* OBJ keys: the key's JSON with its quotes; LIT: the value's compact JSON */
	uint32_t len;
	uint32_t node; /* OBJ: the property's value node */
};

struct kvp_grammar {
	atomic_uint refs; /* holders - 1 */
	struct gnode *nodes;
	uint32_t n_nodes, cap_nodes;
	struct glit *lits; /* literals and object keys */
	uint32_t n_lits, cap_lits;
	uint32_t *alts;
	uint32_t n_alts, cap_alts;
	uint32_t root;
	uint32_t any_obj, any_arr, any_str, any_num, any_lit, any; /* for GK_ANY */
};

/* The automaton's state --------------------------------------------------------- */

/* kvp_grammar_compile() refuses a schema with more branches alive at once (fan_out()) */
#define THREADS_MAX KVP_GRAMMAR_ALTS_MAX

struct gframe {
	uint16_t node;
	uint8_t st;
	uint8_t aux;
	uint32_t n;
};

struct gthread {
	uint8_t depth;		    /* frames in use; 0 = the value is complete */
	uint8_t ws;		    /* whitespace bytes in a row */
	uint8_t u8need, u8lo, u8hi; /* UTF-8 inside a string: continuation bytes to come */
	uint8_t pad[1];
	uint16_t kpos;	/* literal/key match: bytes matched */
	uint64_t kcand; /* ... candidates still alive */
	struct gframe f[KVP_GRAMMAR_DEPTH];
};

#define THREAD_HEAD offsetof(struct gthread, f)

struct gset {
	uint32_t n;
	struct gthread t[THREADS_MAX];
};

/* frame states */
enum { O_START, O_OPEN, O_KEY, O_COLON, O_VALUE, O_AFTERVAL, O_NEXT };
enum { A_START, A_OPEN, A_AFTER, A_NEXT };
enum { S_START, S_IN, S_ESC, S_HEX };
enum { N_START, N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };
/* digits of a number's integer or fractional part: 15 keep every integer exact in any
 * parser (below 2^53) */
#define NUM_DIGITS_MAX 15

static size_t thread_bytes(const struct gthread *t)
{
	return THREAD_HEAD + (size_t)t->depth * sizeof(struct gframe);
}

static void set_add(struct gset *s, const struct gthread *t)
{
	size_t b = thread_bytes(t);

	for (uint32_t i = 0; i < s->n; i++)
		if (s->t[i].depth == t->depth && !memcmp(&s->t[i], t, b))
			return;
	/* never full: kvp_grammar_compile() bounds the threads alive at once (fan_out()) */
	if (s->n < THREADS_MAX)
		memcpy(&s->t[s->n++], t, b);
}

static bool is_ws(uint8_t c)
{
	return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

static uint64_t low_bits(uint32_t n)
{
	return n >= 64 ? ~0ull : (1ull << n) - 1;
}

/* Push @node's frame on @t (anyOf: one thread per branch) into @out. */
static void expand(const struct kvp_grammar *g, const struct gthread *t, uint32_t node,
		   struct gthread *out, uint32_t *n_out)
{
	const struct gnode *nd = &g->nodes[node];

	if (nd->kind == GK_ANYOF) {
		for (uint32_t i = 0; i < nd->n; i++)
			expand(g, t, g->alts[nd->a + i], out, n_out);
		return;
	}
	if (*n_out >= THREADS_MAX || t->depth >= KVP_GRAMMAR_DEPTH)
		return;
	struct gthread *c = &out[(*n_out)++];

	memcpy(c, t, thread_bytes(t));
	c->f[c->depth++] = (struct gframe){ .node = (uint16_t)node };
	if (nd->kind == GK_LIT) {
		c->kpos = 0;
		c->kcand = low_bits(nd->n);
	}
}

/* The top frame of @t ended (its value is complete): tell its parent. */
static void child_done(const struct kvp_grammar *g, struct gthread *t)
{
	t->depth--;
	if (!t->depth)
		return;
	struct gframe *f = &t->f[t->depth - 1];

	if (g->nodes[f->node].kind == GK_OBJ)
		f->st = f->st == O_KEY ? O_COLON : O_AFTERVAL;
	/* GK_ARR: already A_AFTER */
}

/*
 * What a frame did with a byte: took it, took it and ended (its value is complete),
 * refused it, ended without it (the byte goes to the parent), wants a child pushed (the
 * byte goes to the child), or changed itself (an "any value" that now knows its type:
 * the byte goes to it again).
 */
enum step { ST_TAKEN, ST_END, ST_REJECT, ST_POP, ST_PUSH, ST_AGAIN };

/* may the top frame end without another byte? */
static bool frame_can_end(const struct kvp_grammar *g, const struct gthread *t)
{
	const struct gframe *f = &t->f[t->depth - 1];
	const struct gnode *nd = &g->nodes[f->node];

	if (nd->kind == GK_NUM || nd->kind == GK_INT)
		return f->st == N_ZERO || f->st == N_INT || f->st == N_FRAC || f->st == N_EXP;
	if (nd->kind == GK_LIT) {
		for (uint32_t i = 0; i < nd->n; i++)
			if ((t->kcand >> i & 1) && g->lits[nd->a + i].len == t->kpos)
				return true;
	}
	return false;
}

static bool ws_ok(struct gthread *t, uint8_t c)
{
	if (!is_ws(c) || t->ws >= KVP_GRAMMAR_WS_MAX)
		return false;
	t->ws++;
	return true;
}

/* A number's part (integer, fraction, exponent) holds at most this many digits. */
#define EXP_DIGITS_MAX 2

static enum step step_num(struct gframe *f, bool integer, uint8_t c)
{
	bool digit = c >= '0' && c <= '9';

	switch (f->st) {
	case N_START:
		if (c == '-') {
			f->st = N_MINUS;
			return ST_TAKEN;
		}
		/* fall through */
	case N_MINUS:
		if (!digit)
			return ST_REJECT;
		f->st = c == '0' ? N_ZERO : N_INT;
		f->n = 1;
		return ST_TAKEN;
	case N_INT:
		if (digit) {
			if (f->n >= NUM_DIGITS_MAX)
				return ST_POP;
			f->n++;
			return ST_TAKEN;
		}
		/* fall through */
	case N_ZERO:
		if (!integer && c == '.') {
			f->st = N_DOT;
			return ST_TAKEN;
		}
		if (!integer && (c == 'e' || c == 'E')) {
			f->st = N_E;
			return ST_TAKEN;
		}
		return ST_POP;
	case N_DOT:
		if (!digit)
			return ST_REJECT;
		f->st = N_FRAC;
		f->n = 1;
		return ST_TAKEN;
	case N_FRAC:
		if (digit) {
			if (f->n >= NUM_DIGITS_MAX)
				return ST_POP;
			f->n++;
			return ST_TAKEN;
		}
		if (c == 'e' || c == 'E') {
			f->st = N_E;
			return ST_TAKEN;
		}
		return ST_POP;
	case N_E:
		if (c == '+' || c == '-') {
			f->st = N_ESIGN;
			return ST_TAKEN;
		}
		/* fall through */
	case N_ESIGN:
		if (!digit)
			return ST_REJECT;
		f->st = N_EXP;
		f->n = 1;
		return ST_TAKEN;
	case N_EXP: /* at most e99: a larger exponent parses as Infinity, not a number */
		if (digit && f->n < EXP_DIGITS_MAX) {
			f->n++;
			return ST_TAKEN;
		}
		return ST_POP;
	}
	return ST_REJECT;
}

static bool is_hex(uint8_t c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/*
 * A string; @f->n counts its characters (code points, as JSON Schema's lengths do) when
 * it has a length limit.  Without one the count stays 0, so every position inside the
 * string is the same state and the matcher's mask cache answers it.
 */
static void str_count(const struct gnode *nd, struct gframe *f)
{
	if (nd->min || nd->max != UINT32_MAX)
		f->n++;
}

static enum step step_str(const struct gnode *nd, struct gthread *t, struct gframe *f, uint8_t c)
{
	switch (f->st) {
	case S_START:
		if (c != '"')
			return ST_REJECT;
		f->st = S_IN;
		f->n = 0;
		t->u8need = 0;
		return ST_TAKEN;
	case S_IN:
		if (t->u8need) {
			if (c < t->u8lo || c > t->u8hi)
				return ST_REJECT;
			t->u8lo = 0x80;
			t->u8hi = 0xbf;
			if (!--t->u8need)
				str_count(nd, f);
			return ST_TAKEN;
		}
		if (c == '"')
			return f->n >= nd->min ? ST_END : ST_REJECT;
		if (c < 0x20 || f->n >= nd->max)
			return ST_REJECT;
		if (c == '\\') {
			f->st = S_ESC;
			return ST_TAKEN;
		}
		if (c < 0x80) {
			str_count(nd, f);
			return ST_TAKEN;
		}
		/* a UTF-8 lead byte: the well-formed ranges of the Unicode standard, table 3-7 */
		t->u8lo = 0x80;
		t->u8hi = 0xbf;
		if (c >= 0xc2 && c <= 0xdf)
			t->u8need = 1;
		else if (c >= 0xe0 && c <= 0xef)
			t->u8need = 2;
		else if (c >= 0xf0 && c <= 0xf4)
			t->u8need = 3;
		else
			return ST_REJECT;
		if (c == 0xe0)
			t->u8lo = 0xa0;
		else if (c == 0xed)
			t->u8hi = 0x9f;
		else if (c == 0xf0)
			t->u8lo = 0x90;
		else if (c == 0xf4)
			t->u8hi = 0x8f;
		return ST_TAKEN;
	case S_ESC:
		if (c == 'u') {
			f->st = S_HEX;
			f->aux = 0;
			return ST_TAKEN;
		}
		if (!strchr("\"\\/bfnrt", c) || !c)
			return ST_REJECT;
		f->st = S_IN;
		str_count(nd, f);
		return ST_TAKEN;
	case S_HEX:
		/* no \uDxxx: a surrogate half would count as one character here, half of one
		 * in a validator's count */
		if (!is_hex(c) || (!f->aux && (c == 'd' || c == 'D')))
			return ST_REJECT;
		if (++f->aux == 4) {
			f->st = S_IN;
			str_count(nd, f);
		}
		return ST_TAKEN;
	}
	return ST_REJECT;
}

/* Match @c against the candidates t->kcand of lits[a ..] at t->kpos. */
static uint64_t match_lits(const struct kvp_grammar *g, uint32_t a, const struct gthread *t,
			   uint8_t c)
{
	uint64_t cand = t->kcand, out = 0;

	while (cand) {
		int i = __builtin_ctzll(cand);
		const struct glit *l = &g->lits[a + (uint32_t)i];

		cand &= cand - 1;
		if (l->len > t->kpos && (uint8_t)l->s[t->kpos] == c)
			out |= 1ull << i;
	}
	return out;
}

static enum step step_lit(const struct kvp_grammar *g, const struct gnode *nd, struct gthread *t,
			  uint8_t c)
{
	uint64_t m = match_lits(g, nd->a, t, c), longer = 0;

	if (!m)
		return frame_can_end(g, t) ? ST_POP : ST_REJECT;
	t->kcand = m;
	t->kpos++;
	for (uint64_t x = m; x; x &= x - 1)
		if (g->lits[nd->a + (uint32_t)__builtin_ctzll(x)].len > t->kpos)
			longer = 1;
	return longer ? ST_TAKEN : ST_END;
}

/* the properties that may come next: from the cursor up to the first required one */
static uint64_t next_props(const struct gnode *nd, uint32_t cursor)
{
	uint64_t m = low_bits(nd->n) & ~low_bits(cursor), r = nd->req & m;

	if (r)
		m &= ((r & -r) << 1) - 1;
	return m;
}

static bool obj_may_close(const struct gnode *nd, uint32_t cursor)
{
	return !(nd->req & ~low_bits(cursor));
}

static enum step step_obj(const struct kvp_grammar *g, const struct gnode *nd, struct gthread *t,
			  struct gframe *f, uint8_t c, uint32_t *push)
{
	bool generic = nd->min;

	switch (f->st) {
	case O_START:
		if (c != '{')
			return ST_REJECT;
		f->st = O_OPEN;
		f->n = 0;
		return ST_TAKEN;
	case O_OPEN:
	case O_NEXT:
		if (ws_ok(t, c))
			return ST_TAKEN;
		if (c == '}' && f->st == O_OPEN && obj_may_close(nd, f->n))
			return ST_END;
		if (c != '"')
			return ST_REJECT;
		if (generic) {
			f->st = O_KEY;
			*push = g->any_str;
			return ST_PUSH;
		}
		t->kcand = next_props(nd, f->n);
		t->kpos = 0;
		if (!t->kcand)
			return ST_REJECT;
		f->st = O_KEY;
		/* the quote is the key's first byte */
		__attribute__((fallthrough));
	case O_KEY: {
		uint64_t m = match_lits(g, nd->a, t, c);

		if (!m)
			return ST_REJECT;
		t->kcand = m;
		t->kpos++;
		for (uint64_t x = m; x; x &= x - 1) {
			uint32_t i = (uint32_t)__builtin_ctzll(x);

			if (g->lits[nd->a + i].len == t->kpos) { /* the closing quote: unique */
				f->n = i + 1;
				f->st = O_COLON;
			}
		}
		return ST_TAKEN;
	}
	case O_COLON:
		if (ws_ok(t, c))
			return ST_TAKEN;
		if (c != ':')
			return ST_REJECT;
		f->st = O_VALUE;
		return ST_TAKEN;
	case O_VALUE:
		if (ws_ok(t, c))
			return ST_TAKEN;
		*push = generic ? g->any : g->lits[nd->a + f->n - 1].node;
		return ST_PUSH;
	case O_AFTERVAL:
		if (ws_ok(t, c))
			return ST_TAKEN;
		if (c == '}')
			return obj_may_close(nd, f->n) ? ST_END : ST_REJECT;
		if (c != ',' || (!generic && !next_props(nd, f->n)))
			return ST_REJECT;
		f->st = O_NEXT;
		return ST_TAKEN;
	}
	return ST_REJECT;
}

static enum step step_arr(const struct gnode *nd, struct gthread *t, struct gframe *f, uint8_t c,
			  uint32_t *push)
{
	switch (f->st) {
	case A_START:
		if (c != '[')
			return ST_REJECT;
		f->st = A_OPEN;
		f->n = 0;
		return ST_TAKEN;
	case A_OPEN:
	case A_NEXT:
		if (ws_ok(t, c))
			return ST_TAKEN;
		if (f->st == A_OPEN && c == ']')
			return nd->min ? ST_REJECT : ST_END;
		if (f->n >= nd->max)
			return ST_REJECT;
		f->st = A_AFTER;
		if (nd->min || nd->max != UINT32_MAX) /* no limit: no count, one state (above) */
			f->n++;
		*push = nd->item;
		return ST_PUSH;
	case A_AFTER:
		if (ws_ok(t, c))
			return ST_TAKEN;
		if (c == ']')
			return f->n >= nd->min ? ST_END : ST_REJECT;
		if (c != ',' || f->n >= nd->max)
			return ST_REJECT;
		f->st = A_NEXT;
		return ST_TAKEN;
	}
	return ST_REJECT;
}

/* An "any value" frame becomes the value its first byte starts. */
static enum step step_any(const struct kvp_grammar *g, struct gthread *t, struct gframe *f,
			  uint8_t c)
{
	uint32_t node;

	if (c == '{' || c == '[') {
		if (t->depth >= KVP_GRAMMAR_DEPTH) /* no room for its values: not here */
			return ST_REJECT;
		node = c == '{' ? g->any_obj : g->any_arr;
	} else if (c == '"') {
		node = g->any_str;
	} else if (c == '-' || (c >= '0' && c <= '9')) {
		node = g->any_num;
	} else if (c == 't' || c == 'f' || c == 'n') {
		node = g->any_lit;
		t->kpos = 0;
		t->kcand = low_bits(g->nodes[node].n);
	} else {
		return ST_REJECT;
	}
	*f = (struct gframe){ .node = (uint16_t)node };
	return ST_AGAIN;
}

/* Step thread @t (modified) by @c; what survives goes into @out. */
static void feed(const struct kvp_grammar *g, struct gthread *t, uint8_t c, struct gset *out)
{
	for (;;) {
		struct gframe *f;
		const struct gnode *nd;
		uint8_t ws0 = t->ws;
		uint32_t push = 0;
		enum step r = ST_REJECT;

		if (!t->depth)
			return; /* the value is complete: nothing may follow */
		f = &t->f[t->depth - 1];
		nd = &g->nodes[f->node];
		switch (nd->kind) {
		case GK_ANY:
			r = step_any(g, t, f, c);
			break;
		case GK_OBJ:
			r = step_obj(g, nd, t, f, c, &push);
			break;
		case GK_ARR:
			r = step_arr(nd, t, f, c, &push);
			break;
		case GK_STR:
			r = step_str(nd, t, f, c);
			break;
		case GK_NUM:
		case GK_INT:
			r = step_num(f, nd->kind == GK_INT, c);
			break;
		case GK_LIT:
			r = step_lit(g, nd, t, c);
			break;
		}
		switch (r) {
		case ST_AGAIN:
			continue;
		case ST_REJECT:
			return;
		case ST_POP:
			child_done(g, t);
			continue;
		case ST_END:
			child_done(g, t);
			/* fall through */
		case ST_TAKEN:
			if (t->ws == ws0)
				t->ws = 0;
			set_add(out, t);
			return;
		case ST_PUSH: {
			struct gthread kids[THREADS_MAX];
			uint32_t n = 0;

			t->ws = 0;
			expand(g, t, push, kids, &n);
			for (uint32_t i = 0; i < n; i++)
				feed(g, &kids[i], c, out);
			return;
		}
		}
	}
}

static void set_step(const struct kvp_grammar *g, const struct gset *in, uint8_t c,
		     struct gset *out)
{
	struct gthread t;

	out->n = 0;
	for (uint32_t i = 0; i < in->n; i++) {
		memcpy(&t, &in->t[i], thread_bytes(&in->t[i]));
		feed(g, &t, c, out);
	}
}

static bool set_accepting(const struct kvp_grammar *g, const struct gset *s)
{
	for (uint32_t i = 0; i < s->n; i++)
		if (!s->t[i].depth || (s->t[i].depth == 1 && frame_can_end(g, &s->t[i])))
			return true;
	return false;
}

/* Compilation ---------------------------------------------------------------------- */

#define NODES_MAX 4096u
#define ANYOF_MAX KVP_GRAMMAR_ALTS_MAX

struct cctx {
	struct kvp_grammar *g;
	char *err;
	size_t errlen;
};

__attribute__((format(printf, 2, 3))) static int fail(struct cctx *c, const char *fmt, ...)
{
	va_list ap;

	if (c->err && c->errlen) {
		va_start(ap, fmt);
		vsnprintf(c->err, c->errlen, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

static int grow(void **p, uint32_t *cap, uint32_t need, size_t size)
{
	uint32_t nc = *cap ? *cap : 16;
	void *q;

	if (need <= *cap)
		return 0;
	while (nc < need)
		nc *= 2;
	q = realloc(*p, (size_t)nc * size);
	if (!q)
		return -ENOMEM;
	*p = q;
	*cap = nc;
	return 0;
}

static int new_node(struct cctx *c, uint8_t kind, uint32_t *id)
{
	struct kvp_grammar *g = c->g;

	if (g->n_nodes >= NODES_MAX)
		return fail(c, "schema: more than %u nodes", NODES_MAX);
	if (grow((void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof(*g->nodes)))
		return -ENOMEM;
	*id = g->n_nodes++;
	g->nodes[*id] = (struct gnode){ .kind = kind, .max = UINT32_MAX };
	return 0;
}

/* Reserve @n consecutive literals; returns the first index in @a. */
static int new_lits(struct kvp_grammar *g, uint32_t n, uint32_t *a)
{
	if (grow((void **)&g->lits, &g->cap_lits, g->n_lits + n, sizeof(*g->lits)))
		return -ENOMEM;
	*a = g->n_lits;
	memset(&g->lits[*a], 0, n * sizeof(*g->lits));
	g->n_lits += n;
	return 0;
}

static int set_lit(struct glit *l, json_t *v)
{
	l->s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
	if (!l->s)
		return -ENOMEM;
	l->len = (uint32_t)strlen(l->s);
	return 0;
}

static int compile_node(struct cctx *c, json_t *s, int depth, uint32_t *id);

static const char *const annotations[] = { "title",    "description", "$schema", "$id",
					   "$comment", "default",     "examples" };
static const char *const keywords[] = {
	"type",	    "properties", "required",  "additionalProperties",
	"items",    "enum",	  "const",     "anyOf",
	"minItems", "maxItems",	  "minLength", "maxLength"
};

static bool in_list(const char *k, const char *const *list, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(k, list[i]))
			return true;
	return false;
}

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

static int get_count(struct cctx *c, json_t *s, const char *key, uint32_t *out)
{
	json_t *v = json_object_get(s, key);

	if (!v)
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < 0 ||
	    json_integer_value(v) > (json_int_t)UINT32_MAX - 1)
		return fail(c, "%s: must be a non-negative integer", key);
	*out = (uint32_t)json_integer_value(v);
	return 0;
}

static bool type_matches(const char *type, json_t *v)
{
	if (!type)
		return true;
	if (!strcmp(type, "object"))
		return json_is_object(v);
	if (!strcmp(type, "array"))
		return json_is_array(v);
	if (!strcmp(type, "string"))
		return json_is_string(v);
	if (!strcmp(type, "integer"))
		return json_is_integer(v);
	if (!strcmp(type, "number"))
		return json_is_number(v);
	if (!strcmp(type, "boolean"))
		return json_is_boolean(v);
	return !strcmp(type, "null") && json_is_null(v);
}

/* enum / const: the values (of @type, when given) as literals */
static int compile_lits(struct cctx *c, json_t *s, const char *type, uint32_t *id)
{
	json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const"), *v;
	json_t *vals = en ? en : NULL;
	uint32_t a, n = 0;
	size_t i;
	int r;

	if (en && cn)
		return fail(c, "enum and const together are not supported");
	if (en && (!json_is_array(en) || !json_array_size(en)))
		return fail(c, "enum: must be a non-empty array");
	if (en && json_array_size(en) > KVP_GRAMMAR_ENUM_MAX)
		return fail(c, "enum: more than %d values", KVP_GRAMMAR_ENUM_MAX);
	if ((r = new_node(c, GK_LIT, id)))
		return r;
	if ((r = new_lits(c->g, en ? (uint32_t)json_array_size(en) : 1, &a)))
		return r;
	if (!vals) {
		if (!type_matches(type, cn))
			return fail(c, "const: not of the schema's type \"%s\"", type);
		if ((r = set_lit(&c->g->lits[a], cn)))
			return r;
		n = 1;
	} else {
		json_array_foreach(vals, i, v)
		{
			if (!type_matches(type, v))
				continue;
			if ((r = set_lit(&c->g->lits[a + n], v)))
				return r;
			n++;
		}
		if (!n)
			return fail(c, "enum: no value of the schema's type \"%s\"", type);
	}
	c->g->nodes[*id].a = a;
	c->g->nodes[*id].n = n;
	return 0;
}

static int compile_object(struct cctx *c, json_t *s, int depth, uint32_t *id)
{
	json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
	json_t *add = json_object_get(s, "additionalProperties"), *v;
	struct kvp_grammar *g = c->g;
	const char *k;
	uint32_t a = 0, n = 0, me;
	size_t i;
	int r;

	if (add && !json_is_boolean(add))
		return fail(c, "additionalProperties: only true or false is supported");
	if (props && !json_is_object(props))
		return fail(c, "properties: must be an object");
	if (props && json_object_size(props) > KVP_GRAMMAR_PROPS_MAX)
		return fail(c, "properties: more than %d", KVP_GRAMMAR_PROPS_MAX);
	if (req && !json_is_array(req))
		return fail(c, "required: must be an array");
	if ((r = new_node(c, GK_OBJ, &me)))
		return r;
	if (!props || !json_object_size(props)) {
		if (req && json_array_size(req))
			return fail(c, "required: names a property not in properties");
		g->nodes[me].min = !json_is_false(add); /* any keys, any values */
		*id = me;
		return 0;
	}
	n = (uint32_t)json_object_size(props);
	if ((r = new_lits(g, n, &a)))
		return r;
	n = 0;
	json_object_foreach(props, k, v)
	{
		json_t *ks = json_string(k);
		uint32_t vn;

		if (!ks)
			return -ENOMEM;
		r = set_lit(&g->lits[a + n], ks);
		json_decref(ks);
		if (r)
			return r;
		if ((r = compile_node(c, v, depth + 1, &vn)))
			return r;
		g->lits[a + n].node = vn;
		n++;
	}
	g->nodes[me].a = a;
	g->nodes[me].n = n;
	json_array_foreach(req, i, v)
	{
		const char *name = json_string_value(v), *pk;
		json_t *pv;
		uint32_t j = 0;
		bool found = false;

		if (!name)
			return fail(c, "required: must be an array of strings");
		json_object_foreach(props, pk, pv)
		{
			(void)pv;
			if (!strcmp(pk, name)) {
				found = true;
				break;
			}
			j++;
		}
		if (!found)
			return fail(c, "required: \"%s\" is not in properties", name);
		g->nodes[me].req |= 1ull << j;
	}
	*id = me;
	return 0;
}

static int compile_typed(struct cctx *c, json_t *s, const char *type, int depth, uint32_t *id)
{
	struct kvp_grammar *g = c->g;
	uint32_t min = 0, max = UINT32_MAX, item;
	int r;

	if (json_object_get(s, "enum") || json_object_get(s, "const"))
		return compile_lits(c, s, type, id);
	if (!strcmp(type, "object"))
		return compile_object(c, s, depth, id);
	if (!strcmp(type, "array")) {
		json_t *items = json_object_get(s, "items");

		if ((r = get_count(c, s, "minItems", &min)) ||
		    (r = get_count(c, s, "maxItems", &max)))
			return r;
		if (min > max)
			return fail(c, "minItems: greater than maxItems");
		if (items && json_is_array(items))
			return fail(c, "items: an array of schemas (a tuple) is not supported");
		if (items) {
			if ((r = compile_node(c, items, depth + 1, &item)))
				return r;
		} else {
			item = g->any;
		}
		if ((r = new_node(c, GK_ARR, id)))
			return r;
		g->nodes[*id].item = item;
	} else if (!strcmp(type, "string")) {
		if ((r = get_count(c, s, "minLength", &min)) ||
		    (r = get_count(c, s, "maxLength", &max)))
			return r;
		if (min > max)
			return fail(c, "minLength: greater than maxLength");
		if ((r = new_node(c, GK_STR, id)))
			return r;
	} else if (!strcmp(type, "number") || !strcmp(type, "integer")) {
		if ((r = new_node(c, type[0] == 'n' ? GK_NUM : GK_INT, id)))
			return r;
	} else if (!strcmp(type, "boolean") || !strcmp(type, "null")) {
		uint32_t a;

		if ((r = new_node(c, GK_LIT, id)) || (r = new_lits(g, type[0] == 'b' ? 2 : 1, &a)))
			return r;
		if (type[0] == 'b') {
			if ((r = set_lit(&g->lits[a], json_true())) ||
			    (r = set_lit(&g->lits[a + 1], json_false())))
				return r;
		} else if ((r = set_lit(&g->lits[a], json_null()))) {
			return r;
		}
		g->nodes[*id].a = a;
		g->nodes[*id].n = type[0] == 'b' ? 2 : 1;
		return 0;
	} else {
		return fail(c, "type: \"%s\" is not a JSON Schema type", type);
	}
	g->nodes[*id].min = min;
	g->nodes[*id].max = max;
	return 0;
}

static int compile_node(struct cctx *c, json_t *s, int depth, uint32_t *id)
{
	json_t *type, *any, *v;
	const char *k;
	int r;

	if (depth >= KVP_GRAMMAR_DEPTH - 1)
		return fail(c, "schema: nested deeper than %d", KVP_GRAMMAR_DEPTH - 2);
	if (json_is_true(s)) {
		*id = c->g->any;
		return 0;
	}
	if (!json_is_object(s))
		return fail(c, "schema: must be an object (or true)");
	json_object_foreach(s, k, v)
	{
		(void)v;
		if (!in_list(k, keywords, N_OF(keywords)) &&
		    !in_list(k, annotations, N_OF(annotations)))
			return fail(c, "keyword \"%s\" is not supported", k);
	}
	type = json_object_get(s, "type");
	any = json_object_get(s, "anyOf");
	if (any) {
		uint32_t n, me, a;
		size_t i;

		if (!json_is_array(any) || !json_array_size(any) ||
		    json_array_size(any) > ANYOF_MAX)
			return fail(c, "anyOf: must be an array of 1 to %u schemas", ANYOF_MAX);
		json_object_foreach(s, k, v)
		{
			(void)v;
			if (strcmp(k, "anyOf") && !in_list(k, annotations, N_OF(annotations)))
				return fail(c, "anyOf: beside \"%s\" is not supported", k);
		}
		n = (uint32_t)json_array_size(any);
		if ((r = new_node(c, GK_ANYOF, &me)))
			return r;
		if (grow((void **)&c->g->alts, &c->g->cap_alts, c->g->n_alts + n, sizeof(uint32_t)))
			return -ENOMEM;
		a = c->g->n_alts;
		c->g->n_alts += n;
		json_array_foreach(any, i, v)
		{
			uint32_t alt;

			if ((r = compile_node(c, v, depth, &alt)))
				return r;
			c->g->alts[a + i] = alt;
		}
		c->g->nodes[me].a = a;
		c->g->nodes[me].n = n;
		*id = me;
		return 0;
	}
	if (json_is_string(type))
		return compile_typed(c, s, json_string_value(type), depth, id);
	if (json_is_array(type)) {
		uint32_t n = (uint32_t)json_array_size(type), me, a;
		size_t i;

		if (!n || n > 7)
			return fail(c, "type: must list 1 to 7 types");
		if (n == 1) {
			if (!json_is_string(json_array_get(type, 0)))
				return fail(c, "type: must be a string or an array of strings");
			return compile_typed(c, s, json_string_value(json_array_get(type, 0)),
					     depth, id);
		}
		if ((r = new_node(c, GK_ANYOF, &me)))
			return r;
		if (grow((void **)&c->g->alts, &c->g->cap_alts, c->g->n_alts + n, sizeof(uint32_t)))
			return -ENOMEM;
		a = c->g->n_alts;
		c->g->n_alts += n;
		json_array_foreach(type, i, v)
		{
			uint32_t alt;

			if (!json_is_string(v))
				return fail(c, "type: must be a string or an array of strings");
			if ((r = compile_typed(c, s, json_string_value(v), depth, &alt)))
				return r;
			c->g->alts[a + i] = alt;
		}
		c->g->nodes[me].a = a;
		c->g->nodes[me].n = n;
		*id = me;
		return 0;
	}
	if (type)
		return fail(c, "type: must be a string or an array of strings");
	if (json_object_get(s, "enum") || json_object_get(s, "const"))
		return compile_lits(c, s, NULL, id);
	if (json_object_get(s, "properties") || json_object_get(s, "required") ||
	    json_object_get(s, "additionalProperties"))
		return compile_typed(c, s, "object", depth, id);
	if (json_object_get(s, "items") || json_object_get(s, "minItems") ||
	    json_object_get(s, "maxItems"))
		return compile_typed(c, s, "array", depth, id);
	if (json_object_get(s, "minLength") || json_object_get(s, "maxLength"))
		return compile_typed(c, s, "string", depth, id);
	*id = c->g->any;
	return 0;
}

/* The nodes every grammar has: an "any value" and what it becomes. */
static int grammar_base(struct cctx *c)
{
	struct kvp_grammar *g = c->g;
	uint32_t a;
	int r;

	if ((r = new_node(c, GK_ANY, &g->any)) || (r = new_node(c, GK_OBJ, &g->any_obj)) ||
	    (r = new_node(c, GK_ARR, &g->any_arr)) || (r = new_node(c, GK_STR, &g->any_str)) ||
	    (r = new_node(c, GK_NUM, &g->any_num)) || (r = new_node(c, GK_LIT, &g->any_lit)) ||
	    (r = new_lits(g, 3, &a)))
		return r;
	g->nodes[g->any_obj].min = 1;
	g->nodes[g->any_arr].item = g->any;
	if ((r = set_lit(&g->lits[a], json_true())) ||
	    (r = set_lit(&g->lits[a + 1], json_false())) ||
	    (r = set_lit(&g->lits[a + 2], json_null())))
		return r;
	g->nodes[g->any_lit].a = a;
	g->nodes[g->any_lit].n = 3;
	return 0;
}

struct kvp_grammar *kvp_grammar_ref(struct kvp_grammar *g)
{
	atomic_fetch_add(&g->refs, 1);
	return g;
}

void kvp_grammar_free(struct kvp_grammar *g)
{
	if (!g || atomic_fetch_sub(&g->refs, 1) > 0)
		return;
	for (uint32_t i = 0; i < g->n_lits; i++)
		free(g->lits[i].s);
	free(g->lits);
	free(g->nodes);
	free(g->alts);
	free(g);
}

/*
 * The most threads @node's value can hold at once: an anyOf's branches are alive side by
 * side (their own nested branches with them), a container writes one member at a time.
 * Saturates past THREADS_MAX.
 */
static uint32_t fan_out(const struct kvp_grammar *g, uint32_t node)
{
	const struct gnode *nd = &g->nodes[node];
	uint32_t f = 1;

	switch (nd->kind) {
	case GK_ANYOF:
		f = 0;
		for (uint32_t i = 0; i < nd->n && f <= THREADS_MAX; i++)
			f += fan_out(g, g->alts[nd->a + i]);
		break;
	case GK_OBJ:
		for (uint32_t i = 0; i < nd->n && f <= THREADS_MAX; i++) {
			uint32_t p = fan_out(g, g->lits[nd->a + i].node);

			f = p > f ? p : f;
		}
		break;
	case GK_ARR:
		f = fan_out(g, nd->item);
		break;
	}
	return f;
}

int kvp_grammar_compile(struct kvp_grammar **out, const char *schema, size_t len, char *err,
			size_t errlen)
{
	struct cctx c = { .err = err, .errlen = errlen };
	json_error_t je;
	json_t *s;
	int r;

	*out = NULL;
	if (err && errlen)
		err[0] = 0;
	if (len > KVP_GRAMMAR_SCHEMA_MAX)
		return fail(&c, "schema: more than %u bytes", KVP_GRAMMAR_SCHEMA_MAX);
	s = json_loadb(schema, len, JSON_REJECT_DUPLICATES, &je);
	if (!s)
		return fail(&c, "schema: not JSON (%s)", je.text);
	c.g = calloc(1, sizeof(*c.g));
	if (!c.g) {
		json_decref(s);
		return -ENOMEM;
	}
	r = grammar_base(&c);
	if (!r)
		r = compile_node(&c, s, 0, &c.g->root);
	/* a thread past the set's room would be dropped, and with it what its branch allows */
	if (!r && fan_out(c.g, c.g->root) > THREADS_MAX)
		r = fail(&c,
			 "anyOf: more than %u alternatives can be open at once (nested anyOf "
			 "branches count together)",
			 THREADS_MAX);
	json_decref(s);
	if (r) {
		if (r == -ENOMEM)
			fail(&c, "schema: out of memory");
		kvp_grammar_free(c.g);
		return r;
	}
	*out = c.g;
	return 0;
}

int kvp_grammar_any_object(struct kvp_grammar **out)
{
	struct cctx c = { 0 };
	int r;

	*out = NULL;
	c.g = calloc(1, sizeof(*c.g));
	if (!c.g)
		return -ENOMEM;
	r = grammar_base(&c);
	if (r) {
		kvp_grammar_free(c.g);
		return r;
	}
	c.g->root = c.g->any_obj;
	*out = c.g;
	return 0;
}

/* The vocabulary trie ------------------------------------------------------------ */

struct tnode {
	uint8_t c;
	uint16_t depth; /* bytes before this one */
	uint32_t skip;	/* the next node outside this one's subtree */
	uint32_t tok0;	/* toks[tok0 .. tok0 + ntok) end here */
	uint32_t ntok;
};

struct kvp_grammar_vocab {
	uint32_t n_vocab;
	struct tnode *nodes;
	uint32_t n_nodes;
	uint32_t *toks;
	uint32_t max_len;
	char *bytes; /* every token's piece */
	size_t *off; /* token i: bytes[off[i] .. off[i] + len[i]) */
	uint32_t *len;
};

static const struct kvp_grammar_vocab *sort_vocab;

static int cmp_piece(const void *a, const void *b)
{
	const struct kvp_grammar_vocab *v = sort_vocab;
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	uint32_t lx = v->len[x], ly = v->len[y], l = lx < ly ? lx : ly;
	int r = memcmp(v->bytes + v->off[x], v->bytes + v->off[y], l);

	if (r)
		return r;
	if (lx != ly)
		return lx < ly ? -1 : 1;
	return x < y ? -1 : 1;
}

void kvp_grammar_vocab_free(struct kvp_grammar_vocab *v)
{
	if (!v)
		return;
	free(v->nodes);
	free(v->toks);
	free(v->bytes);
	free(v->off);
	free(v->len);
	free(v);
}

uint32_t kvp_grammar_vocab_size(const struct kvp_grammar_vocab *v)
{
	return v->n_vocab;
}

int kvp_grammar_vocab_new(struct kvp_grammar_vocab **out, uint32_t n, const char *const *pieces,
			  const size_t *lens)
{
	static pthread_mutex_t sort_lock = PTHREAD_MUTEX_INITIALIZER;
	struct kvp_grammar_vocab *v;
	uint32_t nt = 0, *path = NULL, *stack = NULL, sp = 0;
	size_t total = 0;

	*out = NULL;
	if (!n)
		return -EINVAL;
	v = calloc(1, sizeof(*v));
	if (!v)
		return -ENOMEM;
	v->n_vocab = n;
	v->off = calloc(n, sizeof(*v->off));
	v->len = calloc(n, sizeof(*v->len));
	v->toks = calloc(n, sizeof(*v->toks));
	if (!v->off || !v->len || !v->toks)
		goto nomem;
	for (uint32_t i = 0; i < n; i++) {
		size_t l = pieces[i] ? lens[i] : 0;

		if (l > UINT16_MAX)
			l = 0; /* never a JSON token */
		v->off[i] = total;
		v->len[i] = (uint32_t)l;
		total += l;
		if (l) {
			v->toks[nt++] = i;
			if (l > v->max_len)
				v->max_len = (uint32_t)l;
		}
	}
	v->bytes = malloc(total + 1);
	if (!v->bytes)
		goto nomem;
	for (uint32_t i = 0; i < n; i++)
		if (v->len[i])
			memcpy(v->bytes + v->off[i], pieces[i], v->len[i]);
	/* qsort has no context argument: one sort at a time (built once per vocabulary) */
	pthread_mutex_lock(&sort_lock);
	sort_vocab = v;
	qsort(v->toks, nt, sizeof(*v->toks), cmp_piece);
	pthread_mutex_unlock(&sort_lock);
	/* at most one node per byte of every piece */
	v->nodes = malloc((total + 1) * sizeof(*v->nodes));
	path = malloc(((size_t)v->max_len + 1) * sizeof(*path));
	stack = malloc(((size_t)v->max_len + 1) * sizeof(*stack));
	if (!v->nodes || !path || !stack)
		goto nomem;
	for (uint32_t k = 0; k < nt; k++) {
		uint32_t t = v->toks[k], l = v->len[t], lcp = 0;
		const char *p = v->bytes + v->off[t];

		if (k) {
			uint32_t u = v->toks[k - 1], lu = v->len[u];
			const char *q = v->bytes + v->off[u];

			while (lcp < l && lcp < lu && p[lcp] == q[lcp])
				lcp++;
		}
		for (uint32_t d = lcp; d < l; d++) {
			struct tnode *nd = &v->nodes[v->n_nodes];

			*nd = (struct tnode){ .c = (uint8_t)p[d], .depth = (uint16_t)d, .tok0 = k };
			/* close the subtrees this node leaves */
			while (sp && v->nodes[stack[sp - 1]].depth >= d)
				v->nodes[stack[--sp]].skip = v->n_nodes;
			stack[sp++] = v->n_nodes;
			path[d] = v->n_nodes++;
		}
		if (!v->nodes[path[l - 1]].ntok)
			v->nodes[path[l - 1]].tok0 = k;
		v->nodes[path[l - 1]].ntok++;
	}
	while (sp)
		v->nodes[stack[--sp]].skip = v->n_nodes;
	free(path);
	free(stack);
	*out = v;
	return 0;
nomem:
	free(path);
	free(stack);
	kvp_grammar_vocab_free(v);
	return -ENOMEM;
}

/* The matcher -------------------------------------------------------------------- */

#define CACHE_N 32 /* masks kept per matcher, direct-mapped by the state's hash */

struct centry {
	uint64_t h;
	uint32_t klen;
	uint32_t count;
	uint8_t *key;
	uint32_t *mask;
};

struct kvp_grammar_matcher {
	const struct kvp_grammar *g;
	const struct kvp_grammar_vocab *v;
	struct gset cur;
	struct gset *st; /* max_len + 1: the walk's state after each depth */
	uint32_t words;
	uint8_t *key; /* the current state as bytes */
	struct centry cache[CACHE_N];
};

void kvp_grammar_matcher_free(struct kvp_grammar_matcher *m)
{
	if (!m)
		return;
	for (int i = 0; i < CACHE_N; i++) {
		free(m->cache[i].key);
		free(m->cache[i].mask);
	}
	free(m->key);
	free(m->st);
	free(m);
}

int kvp_grammar_matcher_new(struct kvp_grammar_matcher **out, const struct kvp_grammar *g,
			    const struct kvp_grammar_vocab *v)
{
	struct kvp_grammar_matcher *m = calloc(1, sizeof(*m));
	struct gthread zero;

	*out = NULL;
	if (!m)
		return -ENOMEM;
	m->g = g;
	m->v = v;
	m->words = (v->n_vocab + 31) / 32;
	m->st = malloc(((size_t)v->max_len + 2) * sizeof(*m->st));
	m->key = malloc(sizeof(struct gset));
	if (!m->st || !m->key) {
		kvp_grammar_matcher_free(m);
		return -ENOMEM;
	}
	memset(&zero, 0, sizeof(zero));
	expand(g, &zero, g->root, m->cur.t, &m->cur.n);
	*out = m;
	return 0;
}

static uint32_t state_key(const struct kvp_grammar_matcher *m, uint8_t *key)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < m->cur.n; i++) {
		size_t b = thread_bytes(&m->cur.t[i]);

		memcpy(key + n, &m->cur.t[i], b);
		n += (uint32_t)b;
	}
	return n;
}

uint32_t kvp_grammar_mask(struct kvp_grammar_matcher *m, uint32_t *bits)
{
	const struct kvp_grammar_vocab *v = m->v;
	uint32_t klen = state_key(m, m->key), count = 0;
	uint64_t h = XXH3_64bits(m->key, klen);
	struct centry *ce = &m->cache[h % CACHE_N];

	if (ce->mask && ce->h == h && ce->klen == klen && !memcmp(ce->key, m->key, klen)) {
		memcpy(bits, ce->mask, (size_t)m->words * sizeof(uint32_t));
		return ce->count;
	}
	memset(bits, 0, (size_t)m->words * sizeof(uint32_t));
	memcpy(&m->st[0], &m->cur, sizeof(m->cur));
	for (uint32_t i = 0; i < v->n_nodes;) {
		const struct tnode *nd = &v->nodes[i];

		set_step(m->g, &m->st[nd->depth], nd->c, &m->st[nd->depth + 1]);
		if (!m->st[nd->depth + 1].n) {
			i = nd->skip;
			continue;
		}
		for (uint32_t k = 0; k < nd->ntok; k++) {
			uint32_t t = v->toks[nd->tok0 + k];

			bits[t / 32] |= 1u << (t % 32);
		}
		count += nd->ntok;
		i++;
	}
	/* keep it: the slot's previous mask is replaced */
	if (!ce->mask) {
		ce->mask = malloc((size_t)m->words * sizeof(uint32_t));
		ce->key = malloc(sizeof(struct gset));
		if (!ce->mask || !ce->key) {
			free(ce->mask);
			free(ce->key);
			ce->mask = NULL;
			ce->key = NULL;
			return count;
		}
	}
	memcpy(ce->mask, bits, (size_t)m->words * sizeof(uint32_t));
	memcpy(ce->key, m->key, klen);
	ce->klen = klen;
	ce->h = h;
	ce->count = count;
	return count;
}

int kvp_grammar_accept_bytes(struct kvp_grammar_matcher *m, const void *bytes, size_t n)
{
	const uint8_t *p = bytes;
	struct gset *a = &m->st[0], *b = &m->st[1], *t;

	memcpy(a, &m->cur, sizeof(m->cur));
	for (size_t i = 0; i < n; i++) {
		set_step(m->g, a, p[i], b);
		if (!b->n)
			return -EINVAL;
		t = a;
		a = b;
		b = t;
	}
	memcpy(&m->cur, a, sizeof(*a));
	return 0;
}

int kvp_grammar_accept(struct kvp_grammar_matcher *m, int32_t id)
{
	const struct kvp_grammar_vocab *v = m->v;

	if (id < 0 || (uint32_t)id >= v->n_vocab || !v->len[id])
		return -EINVAL;
	return kvp_grammar_accept_bytes(m, v->bytes + v->off[id], v->len[id]);
}

bool kvp_grammar_accepting(const struct kvp_grammar_matcher *m)
{
	return set_accepting(m->g, &m->cur);
}
