/* SPDX-License-Identifier: MIT */
/*
 * spmfix.h - the base of the synthetic SentencePiece vocabularies of the tokenizer
 * tests: <unk> (id 0), <s> (1), </s> (2), then the 256 byte tokens <0x00>..<0xFF>
 * (ids 3..258).  Tests append their own pieces from id SPMFIX_BASE on.
 */
#ifndef KVP_TESTS_SPMFIX_H
#define KVP_TESTS_SPMFIX_H

#include <stdint.h>

/* Pieces spmfix_base() fills: the first id a test's own pieces take. */
#define SPMFIX_BASE 259

/**
 * spmfix_base() - fill pieces[0..258] and types[0..258] (enum kvp_tok_type)
 * @bytes: storage for the byte pieces' names; must outlive @pieces
 */
void spmfix_base(char bytes[256][8], const char **pieces, int32_t *types);

#endif /* KVP_TESTS_SPMFIX_H */
