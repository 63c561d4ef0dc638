/*
 * fuzz_codes.c — libFuzzer target for the count decoders: the first byte
 * picks a code and its parameter, the rest is a bit payload as it could
 * sit in a corrupt file (any start bit 0..7).
 *
 * Decoding runs until the first error. Checked: no load outside the
 * payload (ASan), an error never moves the position, a success advances it
 * by exactly the length of the value's canonical code, and re-encoding the
 * value gives back the very bits that were read. Golomb codes are also
 * decoded with the decode table, in step on a second reader: same status,
 * value and position; EG codes with kvs_get_eg_wide the same way.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvseg/codes.h"

#include "fuzz_util.h"

static const uint64_t moduli[] = {
    1,         2, 3, 7, 8, 100, (1u << 20) + 1, 1ull << 32, (1ull << 63) + 1,
    UINT64_MAX};
#define NMODULI (sizeof moduli / sizeof moduli[0])

/* The decode table of each modulus, built on first use (16 KiB each). */
static kvs_golomb_table *table_of(size_t i)
{
	static kvs_golomb_table tables[NMODULI];
	static int built[NMODULI];
	if (!built[i]) {
		check(kvs_golomb_table_init(&tables[i], moduli[i]) == KVS_OK);
		built[i] = 1;
	}
	return &tables[i];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	unsigned sel = data[0], start = data[1] & 7;
	const uint8_t *payload = data + 2;
	size_t len = size - 2;
	uint8_t *buf = fuzz_copy(payload, len);
	if (!buf)
		return 0;
	if (len * 8 < start) {
		free(buf);
		return 0;
	}
	uint64_t bits = len * 8 - start;
	int kind = sel >> 6; /* 0, 1: EG; 2: Golomb; 3: fixed */
	unsigned k = sel & 63;
	kvs_golomb g;
	kvs_golomb_init(&g, moduli[k % NMODULI]);
	const kvs_golomb_table *table =
	    kind == 2 ? table_of(k % NMODULI) : NULL;

	kvs_bitreader r, rt; /* rt: the table's or the wide decoder's reader */
	kvs_br_init(&r, buf, start, bits);
	kvs_br_init(&rt, buf, start, bits);
	for (;;) {
		uint64_t before = kvs_br_position(&r), v = 0;
		kvs_status st;
		uint64_t expect_len;
		if (kind <= 1) {
			uint64_t wv = 0;
			kvs_status wst = kvs_get_eg_wide(&rt, k, &wv);
			st = kvs_get_eg(&r, k, &v);
			check(wst == st && (st != KVS_OK || wv == v));
			check(kvs_br_position(&rt) == kvs_br_position(&r));
			expect_len = kvs_eg_length(v, k);
		} else if (kind == 2) {
			uint64_t tv = 0;
			kvs_status tst =
			    kvs_get_golomb_by_table(&rt, table, &tv);
			st = kvs_get_golomb(&r, &g, &v);
			check(tst == st && (st != KVS_OK || tv == v));
			check(kvs_br_position(&rt) == kvs_br_position(&r));
			expect_len = kvs_golomb_length(&g, v);
		} else {
			st = kvs_get_fixed(&r, k + 1, &v);
			expect_len = k + 1;
		}
		if (st != KVS_OK) {
			check(kvs_br_position(&r) == before);
			break;
		}
		check(kvs_br_position(&r) - before == expect_len);
		/* re-encode and compare with the bits just read */
		kvs_bitwriter w;
		kvs_bw_init(&w);
		if (kind <= 1)
			check(kvs_put_eg(&w, v, k) == KVS_OK);
		else if (kind == 2)
			check(kvs_put_golomb(&w, &g, v) == KVS_OK);
		else
			check(kvs_put_fixed(&w, v, k + 1) == KVS_OK);
		const uint8_t *enc;
		size_t enc_len;
		check(kvs_bw_flush(&w, &enc, &enc_len) == KVS_OK);
		kvs_bitreader a, b;
		kvs_br_init(&a, buf, start, bits);
		check(kvs_br_seek(&a, before) == KVS_OK);
		kvs_br_init(&b, enc, 0, expect_len);
		for (uint64_t left = expect_len; left > 0;) {
			unsigned n = left > 64 ? 64 : (unsigned)left;
			uint64_t x, y;
			check(kvs_br_read(&a, n, &x) == KVS_OK);
			check(kvs_br_read(&b, n, &y) == KVS_OK);
			check(x == y);
			left -= n;
		}
		kvs_bw_free(&w);
	}
	free(buf);
	return 0;
}
