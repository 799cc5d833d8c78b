/* SPDX-License-Identifier: MIT */
/*
 * fuzz.h - what every fuzz harness in tests/fuzz/ offers and may use.
 *
 * A harness is one file defining LLVMFuzzerTestOneInput() over one decoder of untrusted
 * bytes.  It is linked twice: with libFuzzer (clang, -Dfuzz=true: tests/fuzz/run.sh) to
 * search for inputs, and with replay.c (any compiler, every build) into a test that feeds
 * it each file of its committed corpus, tests/fuzz/corpus/<target>/.  A harness aborts
 * (assert, abort(), a sanitizer report) only on a defect: a decoder may refuse anything,
 * but must not crash, leak or break a property stated in its header.
 */
#ifndef KVP_TESTS_FUZZ_H
#define KVP_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>

/* Bytes a harness reads only to show they are there (ASan checks each read). */
extern volatile uint8_t fuzz_sink;

/* The entry point libFuzzer calls; replay.c calls it once per corpus file.  Returns 0. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/**
 * fuzz_file() - @size bytes of @data as a file the decoders that take a path can open
 * @path: out; "/proc/self/fd/N" of a memfd holding the bytes, @cap bytes
 * Return: the memfd (close it when done), or -1 (the harness then skips the input).
 */
int fuzz_file(const uint8_t *data, size_t size, char *path, size_t cap);

#endif /* KVP_TESTS_FUZZ_H */
