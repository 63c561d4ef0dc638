/*
 * fuzz_segment_seeds.c — writes the seed corpus of fuzz_segment: small
 * valid segments of all four modes (byte/bit profile x typed/raw framing)
 * with empty and tiny segments, restart intervals 1 to 16, tombstones,
 * empty keys and values, keys that are prefixes of each other and custom
 * bit-profile codes, so the fuzzer starts from files that reach every
 * decoder.
 *
 *   fuzz_segment_seeds DIR
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvseg/segment.h"

typedef struct seed_spec {
	const char *name;
	kvs_profile profile;
	kvs_framing framing;
	uint32_t restart_interval;
	unsigned records;
	const char *codes[KVS_FIELD_COUNT]; /* NULL: the defaults */
} seed_spec;

static const seed_spec SEEDS[] = {
    {"byte-typed-empty", KVS_PROFILE_BYTE, KVS_FRAMING_TYPED, 15, 0, {0}},
    {"byte-typed-1", KVS_PROFILE_BYTE, KVS_FRAMING_TYPED, 15, 1, {0}},
    {"byte-typed-40-k4", KVS_PROFILE_BYTE, KVS_FRAMING_TYPED, 4, 40, {0}},
    {"byte-raw-30-k1", KVS_PROFILE_BYTE, KVS_FRAMING_RAW, 1, 30, {0}},
    {"byte-raw-60-k16", KVS_PROFILE_BYTE, KVS_FRAMING_RAW, 16, 60, {0}},
    {"bit-typed-empty", KVS_PROFILE_BIT, KVS_FRAMING_TYPED, 15, 0, {0}},
    {"bit-typed-1", KVS_PROFILE_BIT, KVS_FRAMING_TYPED, 2, 1, {0}},
    {"bit-typed-50-k7", KVS_PROFILE_BIT, KVS_FRAMING_TYPED, 7, 50, {0}},
    {"bit-typed-40-golomb",
     KVS_PROFILE_BIT,
     KVS_FRAMING_TYPED,
     5,
     40,
     {"g7", "dg3", "g255"}},
    {"bit-raw-40-k3", KVS_PROFILE_BIT, KVS_FRAMING_RAW, 3, 40, {0}},
    {"bit-raw-40-fixed",
     KVS_PROFILE_BIT,
     KVS_FRAMING_RAW,
     16,
     40,
     {"fixed16", "dfixed16", "eg3"}},
    {"bit-raw-empty", KVS_PROFILE_BIT, KVS_FRAMING_RAW, 1, 0, {0}},
};

static uint64_t rng_state = 0x5EED5EEDull;

static uint64_t rng(void)
{
	uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* Record i's key: the empty key first, then pairs: m as 3 big-endian
 * bytes, then the same with a few more bits (of which it is a prefix). */
static uint64_t make_key(const seed_spec *sp, unsigned i, uint8_t key[8])
{
	memset(key, 0, 8);
	if (i == 0)
		return 0;
	unsigned m = i / 2;
	key[0] = 0x4B;
	key[1] = (uint8_t)(m >> 8);
	key[2] = (uint8_t)m;
	if (i % 2 == 0)
		return 24;
	key[3] = (uint8_t)rng();
	if (sp->profile == KVS_PROFILE_BYTE)
		return 32;
	uint64_t bits = 25 + m % 8; /* 25..32 bits */
	if (bits % 8)
		key[bits / 8] &= (uint8_t)(0xFF00u >> (bits % 8));
	return bits;
}

static int write_seed(const char *dir, const seed_spec *sp)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%s.kvseg", dir, sp->name);
	kvs_writer_options o;
	memset(&o, 0, sizeof o);
	o.profile = sp->profile;
	o.framing = sp->framing;
	o.restart_interval = sp->restart_interval;
	o.sequence = 7;
	o.flags = KVS_WRITER_NO_SYNC;
	if (sp->codes[0]) {
		o.custom_codes = true;
		for (int f = 0; f < KVS_FIELD_COUNT; f++)
			if (kvs_code_spec_parse(sp->codes[f], &o.codes[f]) !=
			    KVS_OK)
				return -1;
	}
	kvs_error err;
	kvs_writer *w = NULL;
	if (kvs_writer_open(&w, path, &o, &err) != KVS_OK) {
		fprintf(stderr, "%s: %s\n", path, err.message);
		return -1;
	}
	uint8_t val[40];
	for (unsigned i = 0; i < sp->records; i++) {
		uint8_t key[8];
		uint64_t bits = make_key(sp, i, key);
		kvs_kind kind = KVS_KIND_VALUE;
		if (sp->framing == KVS_FRAMING_TYPED && i % 5 == 4)
			kind = KVS_KIND_TOMBSTONE;
		size_t vlen = (size_t)(rng() % sizeof val);
		if (i % 7 == 3)
			vlen = 0;
		for (size_t b = 0; b < vlen; b++)
			val[b] = (uint8_t)rng();
		if (kvs_writer_add(w, key, bits, kind, val, vlen, &err) !=
		    KVS_OK) {
			fprintf(stderr, "%s: record %u: %s\n", path, i,
			        err.message);
			kvs_writer_free(w);
			return -1;
		}
	}
	kvs_status st = kvs_writer_finish(w, &err);
	kvs_writer_free(w);
	if (st != KVS_OK) {
		fprintf(stderr, "%s: %s\n", path, err.message);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s DIR\n", argv[0]);
		return 2;
	}
	for (size_t k = 0; k < sizeof SEEDS / sizeof SEEDS[0]; k++)
		if (write_seed(argv[1], &SEEDS[k]) != 0)
			return 1;
	return 0;
}
