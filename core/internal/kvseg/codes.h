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
 * Decides one code from the reservoir as the refill left it; called only
 * right after kvs_br_refill. Most codes lie within `avail`. A code of up to
 * 64 bits that ends past `avail` is still whole in the reservoir when the
 * refill was an 8-byte load (next <= fast_limit): such a load leaves all 64
 * bits true payload bits, `avail` only counting those up to a whole byte.
 * Its value comes from the reservoir, and the reader moves on with the next
 * 8 bytes, skipping the code's last `over` bits (1..8) among them. A longer
 * code takes its zeros, a refill and the rest; anything else (a run past the
 * reservoir, the payload's tail, an order above 63) the slow path.
 */
/* The value of the EGk code of len bits (1..64) at the top of w: the shift
 * 64 - len taken as -len modulo 64, one negation. */
static inline uint64_t kvs_eg_value_(uint64_t w, uint64_t len, unsigned k)
{
	return (w >> ((0 - len) & 63)) - ((uint64_t)1 << k);
}

static inline kvs_status kvs_eg_refilled_(kvs_bitreader *r, unsigned k,
                                          uint64_t *out)
{
	uint64_t res = r->reservoir;
	if (__builtin_expect(res != 0 && k <= 63, 1)) {
		unsigned z = (unsigned)__builtin_clzll(res);
		uint64_t len = 2 * (uint64_t)z + k + 1;
		if (__builtin_expect(len <= r->avail, 1)) {
			*out = kvs_eg_value_(res, len, k);
			kvs_br_consume(r, (unsigned)len);
			return KVS_OK;
		}
		if (len <= 64 && (uintptr_t)r->next <= r->fast_limit) {
			unsigned over = (unsigned)len - r->avail;
			*out = kvs_eg_value_(res, len, k);
			r->reservoir = kvs_load_be64(r->next) << over;
			r->next += 8;
			r->avail = 64 - over;
			return KVS_OK;
		}
		unsigned n = z + k + 1; /* bits from the leading one on */
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

/*
 * kvs_get_eg takes the unary run from the reservoir as it was before the
 * refill: its first one bit, if it has one, is already a payload bit (bits
 * after `avail` are either zero or the true next bits), so the leading-zero
 * count runs in parallel with the refill instead of after it. That is the
 * fastest decoder for short codes, the segments' counts among them. A code
 * whose run goes past the old bits, or that ends past `avail`, branches off
 * to kvs_eg_refilled_: in a stream of long codes (over about 28 bits) one
 * code in five or so does, and the branch is then mispredicted.
 *
 * kvs_get_eg_wide decides every code from the refilled reservoir. It has no
 * such branch for codes of up to 64 bits, but waits for each refill: in
 * bench_codes it decodes short codes about 37% slower than kvs_get_eg and
 * wide ones (bit widths 0..32) about 25% faster. Both read the same codes
 * with the same results, errors and positions.
 *
 * An order k above 63 makes len above 64, so kvs_get_eg takes the slow
 * path, which refuses it: the fast path spends no instruction on it.
 */
static inline kvs_status kvs_get_eg(kvs_bitreader *r, unsigned k, uint64_t *out)
{
	uint64_t head = r->reservoir;
	kvs_br_refill(r); /* branch-free in the payload's body */
	if (__builtin_expect(head != 0, 1)) {
		unsigned z = (unsigned)__builtin_clzll(head);
		uint64_t len = 2 * (uint64_t)z + k + 1;
		if (__builtin_expect(len <= r->avail, 1)) {
			*out = kvs_eg_value_(r->reservoir, len, k);
			kvs_br_consume(r, (unsigned)len);
			return KVS_OK;
		}
	}
	return kvs_eg_refilled_(r, k, out);
}

static inline kvs_status kvs_get_eg_wide(kvs_bitreader *r, unsigned k,
                                         uint64_t *out)
{
	kvs_br_refill(r);
	return kvs_eg_refilled_(r, k, out);
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
	uint64_t m;          /* modulus, >= 1 */
	uint64_t cutoff;     /* u = 2^b - m */
	uint64_t short_mark; /* 2^63 | u << (64 - b): see kvs_get_golomb */
	uint64_t long_bias;  /* 2^b + u */
	uint64_t short_bias; /* 2^(b-1) */
	unsigned b;          /* ceil(log2 m), 0..64 */
} kvs_golomb;

/* Inline so that a constant modulus folds into the decoder. */
static inline kvs_status kvs_golomb_init(kvs_golomb *g, uint64_t m)
{
	if (m == 0)
		return KVS_E_RANGE;
	unsigned b = m == 1 ? 0 : 64 - (unsigned)__builtin_clzll(m - 1);
	g->m = m;
	g->b = b;
	/* u = 2^b - m, modulo 2^64 (2^64 - m for b = 64) */
	g->cutoff = (b == 64 ? 0 : (uint64_t)1 << b) - m;
	/* u < 2^(b-1) because m > 2^(b-1): nothing below overflows */
	g->short_mark =
	    ((uint64_t)1 << 63) | (b >= 2 ? g->cutoff << (64 - b) : 0);
	g->long_bias = b >= 1 && b <= 32 ? ((uint64_t)1 << b) + g->cutoff : 0;
	g->short_bias = b >= 1 && b <= 32 ? (uint64_t)1 << (b - 1) : 0;
	return KVS_OK;
}

/* Code length in bits, or 0 when the value cannot be encoded. */
uint64_t kvs_golomb_length(const kvs_golomb *g, uint64_t value);
kvs_status kvs_put_golomb(kvs_bitwriter *w, const kvs_golomb *g,
                          uint64_t value);
/* By value, so that a caller's kvs_golomb is never address-taken. */
kvs_status kvs_get_golomb_slow(kvs_bitreader *r, kvs_golomb g, uint64_t *out);

/*
 * Where x < y (a short code), takes one bit off *len and replaces *bias by
 * short_bias. kvs_golomb_short_ does it with one compare, a conditional move
 * and a subtract-with-borrow on x86-64: a compiler turns a pair of selects
 * on one condition into a branch, which the short-or-long choice of a
 * Golomb code (data, not a pattern) would mispredict. Elsewhere it is the
 * portable version.
 */
static inline void kvs_golomb_short_portable_(uint64_t x, uint64_t y,
                                              uint64_t *len, uint64_t *bias,
                                              uint64_t short_bias)
{
	if (x < y) {
		*len -= 1;
		*bias = short_bias;
	}
}

static inline void kvs_golomb_short_(uint64_t x, uint64_t y, uint64_t *len,
                                     uint64_t *bias, uint64_t short_bias)
{
#if defined(__x86_64__) && defined(__GNUC__)
	uint64_t n = *len, b = *bias;
	/* Early-clobber: no input may share the outputs' registers. */
	__asm__("cmp %[y], %[x]\n\t"
	        "cmovb %[short_bias], %[b]\n\t"
	        "sbb $0, %[n]"
	        : [n] "+&r"(n), [b] "+&r"(b)
	        : [x] "r"(x), [y] "r"(y), [short_bias] "rm"(short_bias)
	        : "cc");
	*len = n;
	*bias = b;
#else
	kvs_golomb_short_portable_(x, y, len, bias, short_bias);
#endif
}

/*
 * Decodes the code whose unary run of q zeros is known, from `bits`, a
 * reservoir that holds at least its long length len = q + 1 + b (see
 * kvs_get_golomb), and consumes it.
 */
static inline void kvs_golomb_take_(kvs_bitreader *r, const kvs_golomb *g,
                                    unsigned q, unsigned len, uint64_t bits,
                                    uint64_t *out)
{
	uint64_t n = len, bias = g->long_bias;
	kvs_golomb_short_(bits, g->short_mark >> q, &n, &bias, g->short_bias);
	*out = (uint64_t)q * g->m + (bits >> (64 - n)) - bias;
	kvs_br_consume(r, (unsigned)n);
}

/*
 * The fast paths cover 1 <= b <= 32 (2 <= m <= 2^32), where q * m + r cannot
 * overflow for any run that fits the reservoir. A code that lies wholly in
 * the reservoir as it was before the refill (`head`, see kvs_get_eg), as
 * nearly every code of a stream of short codes does, is decided from head
 * alone: the refill only feeds the codes after it and stays off this code's
 * critical path. head starts with q zeros and a one, so "the b - 1 bits
 * after the one are below u" is one compare of head with short_mark >> q;
 * the compare's borrow takes one bit off the long code's length q + 1 + b
 * and a conditional move on it picks the short code's bias. The n leading
 * bits of the code (n = q + b or q + 1 + b), read as an integer, are
 * 2^(b-1) + r (or 2^b + r + u): one shift and the bias give the remainder.
 * A code that reaches into the refilled bits is decided the same way from
 * the refilled reservoir.
 */
static inline kvs_status kvs_get_golomb(kvs_bitreader *r, const kvs_golomb *g,
                                        uint64_t *out)
{
	uint64_t head = r->reservoir;
	unsigned held = r->avail;
	kvs_br_refill(r);
	unsigned b = g->b;
	if (__builtin_expect(head != 0 && b - 1 < 32, 1)) {
		unsigned q = (unsigned)__builtin_clzll(head);
		unsigned len = q + 1 + b; /* of a long code */
		if (__builtin_expect(len <= held, 1)) {
			kvs_golomb_take_(r, g, q, len, head, out);
			return KVS_OK;
		}
		if (len <= r->avail) { /* the code reaches into the refill */
			kvs_golomb_take_(r, g, q, len, r->reservoir, out);
			return KVS_OK;
		}
	}
	kvs_bitreader tmp = *r; /* see kvs_br_read; also m = 1 (b = 0) */
	uint64_t v = 0;
	kvs_status st = kvs_get_golomb_slow(&tmp, *g, &v);
	*r = tmp;
	*out = v;
	return st;
}

/* ---- Golomb with a decode table ----------------------------------------- */

/*
 * A decode table for one modulus: for each value of the next
 * KVS_GOLOMB_TABLE_BITS bits of a stream, the length of the Golomb code
 * those bits start with and its value, when the code lies within them and
 * its value is below 256 (the length is 0 otherwise): for m <= 32 every
 * code of up to 13 bits, for m = 7 the values 0..70.
 *
 * kvs_get_golomb_by_table decodes what kvs_get_golomb decodes, with the
 * same values, reader positions and errors, but a code the table holds
 * costs one index shift and two loads instead of a leading-zero count, a
 * compare, a multiply and the selects: about half the instructions, and
 * the chain from one code to the next is a shift, a load and a shift.
 * Anything else (a longer code or a larger value, a code that reaches past
 * the bits held before the refill, the end of the payload, malformed
 * input) goes to kvs_get_golomb out of line.
 *
 * The table is 16 KiB: build it once per modulus, outside any hot loop,
 * and share it; decoding only reads it.
 */
#define KVS_GOLOMB_TABLE_BITS 13

typedef struct kvs_golomb_table {
	kvs_golomb code; /* for the codes the table does not hold */
	uint8_t length[(size_t)1 << KVS_GOLOMB_TABLE_BITS]; /* bits, or 0 */
	uint8_t value[(size_t)1 << KVS_GOLOMB_TABLE_BITS];
} kvs_golomb_table;

/* KVS_E_RANGE for m = 0. */
kvs_status kvs_golomb_table_init(kvs_golomb_table *t, uint64_t m);
/* kvs_get_golomb, out of line: the codes the table does not hold. */
kvs_status kvs_golomb_table_miss_(kvs_bitreader *r, const kvs_golomb *g,
                                  uint64_t *out);

/*
 * The index is the top bits of the reservoir as it was before the refill
 * (`head`, see kvs_get_eg), so the load does not wait for the refill. Only
 * the first `held` bits of head are the stream's; an entry's length and
 * value depend only on the first `length` bits of its index, so an entry
 * of at most `held` bits describes the stream's next code.
 */
static inline kvs_status kvs_get_golomb_by_table(kvs_bitreader *r,
                                                 const kvs_golomb_table *t,
                                                 uint64_t *out)
{
	uint64_t head = r->reservoir;
	unsigned held = r->avail;
	kvs_br_refill(r);
	size_t i = (size_t)(head >> (64 - KVS_GOLOMB_TABLE_BITS));
	unsigned len = t->length[i];
	if (__builtin_expect(len - 1 < held, 1)) { /* 1 <= len <= held */
		*out = t->value[i];
		kvs_br_consume(r, len);
		return KVS_OK;
	}
	kvs_bitreader tmp = *r; /* see kvs_br_read */
	uint64_t v = 0;
	kvs_status st = kvs_golomb_table_miss_(&tmp, &t->code, &v);
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
static inline unsigned kvs_varint_put(uint8_t *dst, uint64_t value)
{
	unsigned n = 0;
	while (value >= 0x80) {
		dst[n++] = (uint8_t)(value | 0x80);
		value >>= 7;
	}
	dst[n++] = (uint8_t)value;
	return n;
}

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
