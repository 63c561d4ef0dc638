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

/*
 * The fast path takes the unary run from the reservoir as it was before the
 * refill: its first one bit, if it has one, is already a payload bit (bits
 * after `avail` are either zero or the true next bits), so the leading-zero
 * count runs in parallel with the refill instead of after it. When the run
 * goes past the old bits, the refilled reservoir decides (kvs_eg_long_).
 */
static inline kvs_status kvs_eg_long_(kvs_bitreader *r, unsigned k,
                                      uint64_t *out)
{
	uint64_t res = r->reservoir;
	if (res != 0) {
		unsigned z = (unsigned)__builtin_clzll(res);
		unsigned n = z + k + 1; /* bits from the leading one on */
		if (z + n <= r->avail) {
			*out = (res >> (64 - (z + n))) - ((uint64_t)1 << k);
			kvs_br_consume(r, z + n);
			return KVS_OK;
		}
		if (n <= 56 &&
		    z < r->avail) { /* the zeros, a refill, the rest */
			kvs_bitreader saved = *r;
			kvs_br_consume(r, z);
			kvs_br_refill(r);
			if (n <= r->avail) {
				*out = (r->reservoir >> (64 - n)) -
				       ((uint64_t)1 << k);
				kvs_br_consume(r, n);
				return KVS_OK;
			}
			*r = saved;
		}
	}
	kvs_bitreader tmp = *r; /* see kvs_br_read */
	uint64_t v = 0;
	kvs_status st = kvs_get_eg_slow(&tmp, k, &v);
	*r = tmp;
	*out = v;
	return st;
}

static inline kvs_status kvs_get_eg(kvs_bitreader *r, unsigned k, uint64_t *out)
{
	if (__builtin_expect(k > 63, 0))
		return KVS_E_RANGE;
	uint64_t head = r->reservoir;
	kvs_br_refill(r); /* branch-free in the payload's body */
	if (__builtin_expect(head != 0, 1)) {
		unsigned z = (unsigned)__builtin_clzll(head);
		unsigned len = 2 * z + k + 1;
		if (__builtin_expect(len <= r->avail, 1)) {
			*out =
			    (r->reservoir >> (64 - len)) - ((uint64_t)1 << k);
			kvs_br_consume(r, len);
			return KVS_OK;
		}
	}
	return kvs_eg_long_(r, k, out);
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
	uint64_t m;           /* modulus, >= 1 */
	uint64_t cutoff;      /* u = 2^b - m */
	uint64_t short_below; /* u << (65 - b): bits after the one that are
	                         below it start a (b-1)-bit remainder */
	unsigned b;           /* ceil(log2 m), 0..64 */
} kvs_golomb;

kvs_status kvs_golomb_init(kvs_golomb *g, uint64_t m);
/* Code length in bits, or 0 when the value cannot be encoded. */
uint64_t kvs_golomb_length(const kvs_golomb *g, uint64_t value);
kvs_status kvs_put_golomb(kvs_bitwriter *w, const kvs_golomb *g,
                          uint64_t value);
kvs_status kvs_get_golomb_slow(kvs_bitreader *r, const kvs_golomb *g,
                               uint64_t *out);

/*
 * The fast path covers 1 <= b <= 32 (2 <= m <= 2^32), where q * m + r cannot
 * overflow for any run that fits the reservoir; see kvs_get_eg for `head`.
 * Whether the remainder takes b - 1 or b bits is one compare of the bits
 * after the one against short_below; both possible next reservoirs are
 * computed and the compare picks one, keeping the length off the chain.
 */
static inline kvs_status kvs_get_golomb(kvs_bitreader *r, const kvs_golomb *g,
                                        uint64_t *out)
{
	uint64_t head = r->reservoir;
	kvs_br_refill(r);
	unsigned b = g->b;
	if (__builtin_expect(head != 0 && b - 1 < 32, 1)) {
		unsigned q = (unsigned)__builtin_clzll(head);
		if (__builtin_expect(q + 1 + b <= r->avail, 1)) {
			uint64_t t = r->reservoir
			             << (q + 1); /* after the one */
			bool is_short = t < g->short_below;
			uint64_t after_short = t << (b - 1);
			uint64_t after_long = after_short << 1;
			/* the top b - is_short bits of t */
			uint64_t rem = ((t >> 1) >> (63 - b + is_short)) -
			               (g->cutoff & ((uint64_t)is_short - 1));
			*out = (uint64_t)q * g->m + rem;
			r->reservoir = is_short ? after_short : after_long;
			r->avail -= q + 1 + b - is_short;
			return KVS_OK;
		}
	}
	kvs_bitreader tmp = *r; /* see kvs_br_read; also m = 1 (b = 0) */
	uint64_t v = 0;
	kvs_status st = kvs_get_golomb_slow(&tmp, g, &v);
	*r = tmp;
	*out = v;
	return st;
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
