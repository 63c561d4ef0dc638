/*
 * fuzz_util.h — what the libFuzzer targets share: the entry point's
 * prototype, check() (abort, so that the fuzzer keeps the input, when a
 * property does not hold) and fuzz_copy(), the exact-size heap copy that
 * lets AddressSanitizer catch any read past the end of an input.
 */
#ifndef SEGFS_FUZZ_UTIL_H
#define SEGFS_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static inline void check(int ok)
{
	if (!ok)
		abort();
}

/* A malloc'ed copy of data[0..size) (one byte for size 0), or NULL. */
static inline uint8_t *fuzz_copy(const uint8_t *data, size_t size)
{
	uint8_t *buf = malloc(size ? size : 1);
	if (buf != NULL)
		memcpy(buf, data, size);
	return buf;
}

#endif
