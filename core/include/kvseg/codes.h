/*
 * kvseg/codes.h — the count codes: exponential-Golomb of order k, Golomb
 * with any modulus, fixed widths, and LEB128 varints (docs/FORMAT.md §3).
 *
 * Counts (lengths, LCPs) of the bit profile are stored with the prefix codes;
 * the byte profile uses varints. Every code is canonical: each value has
 * exactly one code and each decoder rejects anything else as an error
 * (truncated, overlong, overflow), never with undefined behaviour. Decoders
 * find a unary run with one leading-zero count, not a loop over bits.
 *
 * Failed reads consume nothing: the reader's position is unchanged.
 */
#ifndef KVSEG_CODES_H
#define KVSEG_CODES_H

#include <stdint.h>

#include "kvseg/bits.h"
#include "kvseg/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- exponential-Golomb of order k (k = 0..63) ------------------------- */

/*
 * EGk(v): with w = v + 2^k (a 65-bit quantity) and z = bitlength(w) - k - 1,
 * z zero bits followed by the bitlength(w) bits of w. EG0(0) = "1",
 * EG0(2^64 - 1) is 64 zeros, a one and 64 zeros: 129 bits.
 */
unsigned kvs_eg_length(uint64_t value, unsigned k); /* bits, 1..129 */
kvs_status kvs_put_eg(kvs_bitwriter *w, uint64_t value, unsigned k);
kvs_status kvs_get_eg_slow(kvs_bitreader *r, unsigned k, uint64_t *out);

static inline kvs_status kvs_get_eg(kvs_bitreader *r, unsigned k,
				    uint64_t *out)
{
	if (r->avail < 56)
		kvs_br_refill(r);
	uint64_t res = r->reservoir;
	if (res != 0 && k < 64) {
		unsigned z = (unsigned)__builtin_clzll(res);
		unsigned len = 2 * z + k + 1;
		if (len <= r->avail) {
			*out = (res >> (64 - len)) - ((uint64_t)1 << k);
			kvs_br_consume(r, len);
			return KVS_OK;
		}
	}
	return kvs_get_eg_slow(r, k, out);
}

/* ---- Golomb with modulus m >= 1 ---------------------------------------- */

/*
 * Golomb(v; m): q = v / m zero bits, a one, then r = v mod m in truncated
 * binary: with b = ceil(log2 m) and u = 2^b - m, r < u takes b - 1 bits and
 * any other r is written as r + u in b bits. m = 2^j is the Rice code.
 * The quotient is at most KVS_GOLOMB_MAX_QUOTIENT: larger values cannot be
 * encoded (KVS_E_RANGE) and longer unary runs are rejected as overlong.
 */
#define KVS_GOLOMB_MAX_QUOTIENT ((uint64_t)1 << 16)

typedef struct kvs_golomb {
	uint64_t m;      /* modulus, >= 1 */
	uint64_t cutoff; /* u = 2^b - m */
	unsigned b;      /* ceil(log2 m), 0..64 */
} kvs_golomb;

kvs_status kvs_golomb_init(kvs_golomb *g, uint64_t m);
/* Code length in bits, or 0 when the value cannot be encoded. */
uint64_t kvs_golomb_length(const kvs_golomb *g, uint64_t value);
kvs_status kvs_put_golomb(kvs_bitwriter *w, const kvs_golomb *g,
			  uint64_t value);
kvs_status kvs_get_golomb_slow(kvs_bitreader *r, const kvs_golomb *g,
			       uint64_t *out);

static inline kvs_status kvs_get_golomb(kvs_bitreader *r, const kvs_golomb *g,
					uint64_t *out)
{
	if (r->avail < 56)
		kvs_br_refill(r);
	uint64_t res = r->reservoir;
	unsigned b = g->b;
	if (res != 0 && b <= 32) {
		unsigned q = (unsigned)__builtin_clzll(res);
		if (q + 1 + b <= r->avail) {
			uint64_t rem;
			unsigned len;
			if (b == 0) {
				rem = 0;
				len = q + 1;
			} else {
				uint64_t y = (res << (q + 1)) >> (64 - b);
				if ((y >> 1) < g->cutoff) {
					rem = y >> 1;
					len = q + b;
				} else {
					rem = y - g->cutoff;
					len = q + 1 + b;
				}
			}
			uint64_t v;
			if (!__builtin_mul_overflow((uint64_t)q, g->m, &v) &&
			    !__builtin_add_overflow(v, rem, &v)) {
				*out = v;
				kvs_br_consume(r, len);
				return KVS_OK;
			}
		}
	}
	return kvs_get_golomb_slow(r, g, out);
}

/* ---- fixed width (0..64 bits) ------------------------------------------ */

/* Writes value in exactly width bits; KVS_E_RANGE if it does not fit. */
kvs_status kvs_put_fixed(kvs_bitwriter *w, uint64_t value, unsigned width);

static inline kvs_status kvs_get_fixed(kvs_bitreader *r, unsigned width,
				       uint64_t *out)
{
	return kvs_br_read(r, width, out);
}

/* ---- LEB128 varints (byte profile) ------------------------------------- */

#define KVS_VARINT_MAX 10 /* bytes in the longest varint */

/* Bytes in the varint of value, 1..10. */
unsigned kvs_varint_length(uint64_t value);
/* Writes the varint of value to dst (room for KVS_VARINT_MAX bytes);
 * returns the number of bytes written. */
unsigned kvs_varint_put(uint8_t *dst, uint64_t value);

kvs_status kvs_varint_get_slow(const uint8_t **p, const uint8_t *end,
			       uint64_t *out);

/*
 * Decodes one varint from [*p, end) and advances *p past it. Errors:
 * KVS_E_TRUNCATED (end reached inside the varint), KVS_E_OVERLONG (a
 * non-minimal encoding: a final byte of zero after the first byte),
 * KVS_E_OVERFLOW (more than 64 bits). On error *p is unchanged.
 */
static inline kvs_status kvs_varint_get(const uint8_t **p, const uint8_t *end,
					uint64_t *out)
{
	if (*p < end && **p < 0x80) {
		*out = **p;
		(*p)++;
		return KVS_OK;
	}
	return kvs_varint_get_slow(p, end, out);
}

#ifdef __cplusplus
}
#endif

#endif
