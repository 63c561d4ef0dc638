/*
 * fuzz_ef.c — libFuzzer target for the Elias-Fano reader: the input is a
 * serialized sequence as it could sit in a corrupt file.
 *
 * Whatever kvsi_ef_open accepts must be safe to query without validation
 * (ASan catches any load outside the input). Whatever kvsi_ef_validate also
 * accepts must be a consistent sequence: non-decreasing, its last element
 * max, and get, next_geq and the cursor must agree.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvseg/ef.h"

#include "fuzz_util.h"

#define MAX_WALK 100000 /* elements walked per input */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* An exact-size heap copy, so reading past the end is caught. */
	uint8_t *buf = fuzz_copy(data, size);
	if (!buf)
		return 0;
	kvsi_ef ef;
	if (kvsi_ef_open(&ef, buf, size) != KVS_OK) {
		free(buf);
		return 0;
	}
	bool valid = kvsi_ef_validate(&ef) == KVS_OK;
	for (int portable = 0; portable < 2; portable++) {
		kvsi_ef_set_portable(&ef, portable);
		uint64_t n = ef.count < MAX_WALK ? ef.count : MAX_WALK;
		kvsi_ef_cursor c;
		kvs_status st = kvsi_ef_cursor_seek(&c, &ef, 0);
		uint64_t prev = 0;
		for (uint64_t i = 0; i < n; i++) {
			uint64_t v = 0, w = 0;
			kvs_status gs = kvsi_ef_get(&ef, i, &v);
			uint64_t j = kvsi_ef_next_geq(&ef, v, &w);
			if (valid) {
				check(gs == KVS_OK && st == KVS_OK);
				check(kvsi_ef_cursor_valid(&c) && c.value == v);
				check(i == 0 || v >= prev);
				/* first element >= v is at or before i */
				check(j <= i && w == v);
				prev = v;
			}
			if (st == KVS_OK)
				kvsi_ef_cursor_next(&c);
		}
		if (valid && ef.count > 0 && n == ef.count)
			check(prev == ef.max);
		uint64_t x = ef.max + 1;
		if (valid && x != 0)
			check(kvsi_ef_next_geq(&ef, x, NULL) == ef.count);
	}
	free(buf);
	return 0;
}
