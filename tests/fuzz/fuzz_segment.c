/*
 * fuzz_segment.c — libFuzzer target for the segment reader: the input is a
 * whole segment file as it could sit on a corrupt disk (seed corpus:
 * fuzz_segment_seeds).
 *
 * Whatever kvs_segment_open_memory accepts must be safe to read through
 * cursors without verification (the input is an exact-size heap copy, so
 * AddressSanitizer sees any load outside it): a full walk, seeks and
 * lookups with keys cut from the input and from the walk, seek_ordinal and
 * the frames scan, all of which must terminate. Whatever
 * kvs_segment_verify also accepts must be a consistent segment: strictly
 * increasing keys, the header's totals, seeks that land on lower bounds
 * and lookups that find every key where the walk saw it.
 *
 * Each input is also tried with both CRC32Cs recomputed (FORMAT.md §5.1),
 * so that mutations reach the checks and decoders behind the checksums.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvseg/frames.h"
#include "kvseg/segment.h"

#include "fuzz_crcs.h"
#include "fuzz_util.h"

#define MAX_WALK  (1u << 20) /* records walked per input */
#define MAX_SAVED 8          /* keys kept from the walk */
#define MAX_PROBE 64         /* bytes of a key cut from the input */

static volatile unsigned sink;

/* Reads every byte of the current record. */
static void touch(kvs_cursor *c)
{
	uint64_t bits;
	const uint8_t *k = kvs_cursor_key(c, &bits);
	check(bits <= KVS_MAX_KEY_BITS);
	unsigned sum = 0;
	for (uint64_t i = 0; i < (bits + 7) / 8; i++)
		sum += k[i];
	size_t vlen = kvs_cursor_value_len(c);
	const uint8_t *v;
	size_t vl;
	if (kvs_cursor_value(c, &v, &vl) == KVS_OK) {
		check(vl == vlen);
		for (size_t i = 0; i < vl; i++)
			sum += v[i];
	}
	sink += sum + (unsigned)kvs_cursor_kind(c);
}

typedef struct saved_key {
	uint8_t *key;
	uint64_t bits, ordinal;
} saved_key;

/* A heap copy of the cursor's key (at least one byte). */
static uint8_t *copy_key(kvs_cursor *c, uint64_t *bits)
{
	const uint8_t *k = kvs_cursor_key(c, bits);
	size_t n = (size_t)((*bits + 7) / 8);
	uint8_t *p = malloc(n ? n : 1);
	if (p && n)
		memcpy(p, k, n);
	return p;
}

/* After a seek for key on a verified segment: the cursor is on the first
 * record >= key. */
static void check_lower_bound(kvs_cursor *c, const kvs_segment_info *in,
                              const uint8_t *key, uint64_t bits)
{
	uint64_t pos = kvs_cursor_ordinal(c);
	check(pos <= in->records);
	check(kvs_cursor_valid(c) == (pos < in->records));
	if (pos < in->records) {
		uint64_t kb;
		const uint8_t *k = kvs_cursor_key(c, &kb);
		check(kvs_key_compare(k, kb, key, bits) >= 0);
	}
	if (pos > 0) {
		check(kvs_cursor_seek_ordinal(c, pos - 1) == KVS_OK);
		uint64_t kb;
		const uint8_t *k = kvs_cursor_key(c, &kb);
		check(kvs_key_compare(k, kb, key, bits) < 0);
	}
}

/* Keys cut from the input: a few lengths at a few places, with the
 * padding bits cleared. */
static void probe_input_keys(kvs_cursor *c, const kvs_segment_info *in,
                             bool verified, const uint8_t *data, size_t size)
{
	uint8_t key[MAX_PROBE];
	for (unsigned t = 0; t < 6; t++) {
		size_t at = size ? (size_t)((t * 2654435761u) % size) : 0;
		size_t n = size - at < MAX_PROBE ? size - at : MAX_PROBE;
		if (n > 0 && t > 0)
			n = 1 + data[at] % n;
		memcpy(key, data + at, n);
		uint64_t bits = 8 * (uint64_t)n;
		if (in->profile == KVS_PROFILE_BIT && n > 0 && (t & 1)) {
			bits -= data[at] % 8;
			if (bits % 8)
				key[bits / 8] &=
				    (uint8_t)(0xFF00u >> (bits % 8));
		}
		bool found;
		kvs_status st = kvs_cursor_seek(c, key, bits);
		if (verified) {
			check(st == KVS_OK);
			check_lower_bound(c, in, key, bits);
		}
		st = kvs_cursor_lookup(c, key, bits, &found);
		if (verified) {
			check(st == KVS_OK);
			if (found) {
				uint64_t kb;
				const uint8_t *k = kvs_cursor_key(c, &kb);
				check(kvs_cursor_valid(c) &&
				      kvs_key_compare(k, kb, key, bits) == 0);
			}
		}
		if (bits % 8 == 0) {
			st = kvs_cursor_seek_bytes(c, key, (size_t)(bits / 8));
			if (verified)
				check(st == KVS_OK);
		}
		if (st == KVS_OK && kvs_cursor_valid(c)) {
			touch(c);
			if (kvs_cursor_next(c) == KVS_OK && kvs_cursor_valid(c))
				touch(c);
		}
	}
}

/* Opens buf (size bytes, a heap block of exactly that size) and uses
 * everything; data is the fuzzer's input, for probe keys. */
static void exercise(const uint8_t *buf, size_t size, const uint8_t *data)
{
	kvs_segment *s = NULL;
	kvs_error err;
	memset(&err, 0, sizeof err);
	if (kvs_segment_open_memory(&s, buf, size, &err) != KVS_OK) {
		check(err.status != KVS_OK && err.message[0] != '\0');
		return;
	}
	kvs_segment_info in;
	kvs_segment_info_get(s, &in);
	memset(&err, 0, sizeof err);
	bool verified = kvs_segment_verify(s, &err) == KVS_OK;
	check(verified || (err.status != KVS_OK && err.message[0] != '\0'));
	uint64_t frames = 0;
	kvs_status fst = kvsi_segment_scan_frames(s, &frames);
	if (verified)
		check(fst == KVS_OK && frames == in.records);

	kvs_cursor *c = NULL;
	if (kvs_cursor_open(&c, s) != KVS_OK) {
		kvs_segment_unref(s);
		return;
	}
	check(!kvs_cursor_valid(c));

	/* The walk: ordinals count up and stay below the record count. */
	saved_key saved[MAX_SAVED];
	unsigned nsaved = 0;
	uint64_t every = in.records / MAX_SAVED + 1;
	uint64_t n = 0, tombs = 0, kbits = 0, vbytes = 0;
	uint8_t *prev = NULL;
	uint64_t prev_bits = 0;
	kvs_status st = kvs_cursor_first(c);
	while (st == KVS_OK && kvs_cursor_valid(c) && n < MAX_WALK) {
		check(kvs_cursor_ordinal(c) == n && n < in.records);
		touch(c);
		uint64_t bits;
		uint8_t *k = copy_key(c, &bits);
		if (!k)
			break;
		if (verified && n > 0)
			check(kvs_key_compare(prev, prev_bits, k, bits) < 0);
		if (n % every == 0 && nsaved < MAX_SAVED) {
			saved[nsaved].key = copy_key(c, &saved[nsaved].bits);
			saved[nsaved].ordinal = n;
			if (saved[nsaved].key)
				nsaved++;
		}
		free(prev);
		prev = k;
		prev_bits = bits;
		tombs += kvs_cursor_kind(c) == KVS_KIND_TOMBSTONE;
		kbits += bits;
		vbytes += kvs_cursor_value_len(c);
		n++;
		st = kvs_cursor_next(c);
	}
	free(prev);
	if (st != KVS_OK)
		check(!kvs_cursor_valid(c));
	if (verified && in.records <= MAX_WALK) {
		check(st == KVS_OK && n == in.records);
		check(tombs == in.tombstones && kbits == in.key_bits &&
		      vbytes == in.value_bytes);
		check(kvs_cursor_ordinal(c) == in.records);
	}

	/* The walk's own keys: found where they were seen. */
	for (unsigned j = 0; j < nsaved; j++) {
		bool found = false;
		st = kvs_cursor_lookup(c, saved[j].key, saved[j].bits, &found);
		if (verified)
			check(st == KVS_OK && found &&
			      kvs_cursor_ordinal(c) == saved[j].ordinal);
		st = kvs_cursor_seek_ordinal(c, saved[j].ordinal);
		if (verified) {
			uint64_t kb;
			check(st == KVS_OK && kvs_cursor_valid(c));
			const uint8_t *k = kvs_cursor_key(c, &kb);
			check(kvs_key_compare(k, kb, saved[j].key,
			                      saved[j].bits) == 0);
		}
		if (st == KVS_OK && kvs_cursor_valid(c))
			touch(c);
		free(saved[j].key);
	}

	probe_input_keys(c, &in, verified, data, size);

	/* Ordinals at the edges. */
	const uint64_t ords[] = {0,          in.records / 2, in.records - 1,
	                         in.records, in.records + 1, UINT64_MAX};
	for (size_t j = 0; j < sizeof ords / sizeof ords[0]; j++) {
		st = kvs_cursor_seek_ordinal(c, ords[j]);
		if (st == KVS_OK && kvs_cursor_valid(c)) {
			check(kvs_cursor_ordinal(c) == ords[j]);
			touch(c);
		}
	}
	kvs_cursor_close(c);
	kvs_segment_unref(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_with_crcs(data, size, exercise);
	return 0;
}
