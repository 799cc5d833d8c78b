/* SPDX-License-Identifier: MIT */
/*
 * spmfix.c - the base of the tokenizer tests' SentencePiece vocabularies (see spmfix.h).
 */
#include "tests/lib/spmfix.h"

#include <stdio.h>

#include "compute/text/tokenizer.h"

void spmfix_base(char bytes[256][8], const char **pieces, int32_t *types)
{
	pieces[0] = "<unk>";
	pieces[1] = "<s>";
	pieces[2] = "</s>";
	types[0] = KVP_TOK_UNKNOWN;
	types[1] = KVP_TOK_CONTROL;
	types[2] = KVP_TOK_CONTROL;
	for (int b = 0; b < 256; b++) {
		snprintf(bytes[b], sizeof(bytes[b]), "<0x%02X>", b);
		pieces[3 + b] = bytes[b];
		types[3 + b] = KVP_TOK_BYTE;
	}
}
