/* SPDX-License-Identifier: MIT */
/*
 * grammar.h - constrained sampling: a JSON Schema (a strict subset) or "any JSON object"
 * compiled to a character-level pushdown automaton, and the mask of the vocabulary's
 * tokens that keep the text inside it, computed per step.
 *
 * Three objects:
 *  - struct kvp_grammar_vocab: every token's bytes in a trie (one per vocabulary, built
 *    once, immutable, shared by any number of matchers and threads);
 *  - struct kvp_grammar: one compiled schema (immutable, shareable);
 *  - struct kvp_grammar_matcher: one sequence's position in the grammar, with a cache of
 *    the masks of the states it has been in (a string's inside, an object's next key: a
 *    JSON text comes back to the same states all the time).  One per sequence, owned by
 *    the thread that samples for it.
 *
 * The text a matcher accepts is one JSON value valid against the schema, in compact or
 * lightly spaced form (at most KVP_GRAMMAR_WS_MAX whitespace bytes in a row between
 * tokens, none before the value nor after it): an object's properties come in the
 * schema's order, each required one present, an optional one present or not; enum and
 * const values are written as their compact JSON; a number has at most 15 digits before
 * and after its point and an exponent of at most 2 digits (exact in every parser).  Supported keywords: type (one or a
 * list), properties, required, additionalProperties (false, true or absent: only the
 * listed properties are written either way), items (one schema), enum, const, anyOf,
 * minItems, maxItems, minLength, maxLength; annotations (title, description,
 * $schema, $id, $comment, default, examples) are ignored.  Any other keyword is refused
 * with its name.
 */
#ifndef KVP_COMPUTE_GRAMMAR_H
#define KVP_COMPUTE_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KVP_GRAMMAR_WS_MAX 20		  /* whitespace bytes in a row */
#define KVP_GRAMMAR_DEPTH 24		  /* nesting of objects and arrays in the text */
#define KVP_GRAMMAR_PROPS_MAX 64	  /* properties of one object schema */
#define KVP_GRAMMAR_ENUM_MAX 64		  /* values of one enum */
#define KVP_GRAMMAR_ALTS_MAX 16		  /* anyOf branches alive at once, nested ones too */
#define KVP_GRAMMAR_SCHEMA_MAX (1u << 20) /* bytes of schema text */

struct kvp_grammar_vocab;
struct kvp_grammar;
struct kvp_grammar_matcher;

/**
 * kvp_grammar_vocab_new() - the trie of a vocabulary's token bytes
 * @pieces, @lens: token i's bytes; pieces[i] NULL or lens[i] 0 for a token the grammar
 *                 never allows (control tokens, EOS: the caller decides those)
 * Return: 0, -EINVAL (n 0), -ENOMEM.
 */
int kvp_grammar_vocab_new(struct kvp_grammar_vocab **out, uint32_t n, const char *const *pieces,
			  const size_t *lens);
void kvp_grammar_vocab_free(struct kvp_grammar_vocab *v);
uint32_t kvp_grammar_vocab_size(const struct kvp_grammar_vocab *v);

/**
 * kvp_grammar_compile() - compile a JSON Schema
 * @schema, @len: the schema's JSON text
 * @err, @errlen: why not (names the keyword refused), may be NULL
 * Return: 0; -EINVAL (not JSON, not a schema, an unsupported keyword, a limit above
 * exceeded); -ENOMEM.
 */
int kvp_grammar_compile(struct kvp_grammar **out, const char *schema, size_t len, char *err,
			size_t errlen);

/* kvp_grammar_any_object() - the grammar of any JSON object (response_format json_object). */
int kvp_grammar_any_object(struct kvp_grammar **out);

/*
 * kvp_grammar_ref() - one more holder of @g (the samplers of n > 1 continuations share
 * a grammar); kvp_grammar_free() drops one and frees @g with the last.  Return: @g.
 */
struct kvp_grammar *kvp_grammar_ref(struct kvp_grammar *g);
void kvp_grammar_free(struct kvp_grammar *g);

/**
 * kvp_grammar_matcher_new() - a sequence's matcher at the start of @g over @v (both
 * borrowed: they outlive the matcher)
 * Return: 0, -ENOMEM.
 */
int kvp_grammar_matcher_new(struct kvp_grammar_matcher **out, const struct kvp_grammar *g,
			    const struct kvp_grammar_vocab *v);
void kvp_grammar_matcher_free(struct kvp_grammar_matcher *m);

/**
 * kvp_grammar_mask() - the tokens allowed next
 * @bits: out; (n + 31) / 32 words, bit i of word i / 32 set when token i may come next
 * Return: how many tokens are allowed (0: only the end, see kvp_grammar_accepting()).
 */
uint32_t kvp_grammar_mask(struct kvp_grammar_matcher *m, uint32_t *bits);

/**
 * kvp_grammar_accept() - @id was chosen: advance past its bytes
 * Return: 0, or -EINVAL when the token is not allowed (the matcher is unchanged).
 */
int kvp_grammar_accept(struct kvp_grammar_matcher *m, int32_t id);

/* kvp_grammar_accept_bytes() - as kvp_grammar_accept() for raw text (tests, tools). */
int kvp_grammar_accept_bytes(struct kvp_grammar_matcher *m, const void *bytes, size_t n);

/* kvp_grammar_accepting() - is the text so far one whole valid value (may it end here)? */
bool kvp_grammar_accepting(const struct kvp_grammar_matcher *m);

#endif /* KVP_COMPUTE_GRAMMAR_H */
