/*
 * codes.c — the count codes (kvseg/codes.h, docs/FORMAT.md §3): encoders,
 * and the decoders' slow paths for codes that do not fit the reservoir in
 * one piece, for truncated input, and for every malformed code.
 *
 * Every decoder snapshots the reader and restores it on error, so a failed
 * read consumes nothing. Unary runs are measured with leading-zero counts a
 * reservoir at a time; a run is cut off as soon as it is longer than any
 * valid code, so corrupt input costs at most a few words of work.
 */
#include "kvseg/codes.h"

#include <string.h>

/*
 * Undoes the puts since `saved` after a failed multi-part put. Only the
 * position is restored: a put may have moved a growable buffer, and the
 * saved pointer would then be stale.
 */
static void rollback(kvs_bitwriter *w, const kvs_bitwriter *saved)
{
	w->len = saved->len;
	w->acc = saved->acc;
	w->acc_bits = saved->acc_bits;
}

/* Length of the unary zero run at the read position, up to limit + 1. The
 * terminating one is not consumed. KVS_E_TRUNCATED if the payload ends in
 * the run, KVS_E_OVERLONG if the run is longer than limit. */
static kvs_status count_zeros(kvs_bitreader *r, uint64_t limit, uint64_t *zeros)
{
	uint64_t z = 0;
	for (;;) {
		kvs_br_refill(r);
		if (r->avail == 0)
			return KVS_E_TRUNCATED;
		uint64_t word = r->reservoir;
		if (r->avail < 64)
			word &= ~(uint64_t)0 << (64 - r->avail);
		if (word) {
			unsigned c = (unsigned)__builtin_clzll(word);
			z += c;
			if (z > limit)
				return KVS_E_OVERLONG;
			kvs_br_consume(r, c);
			*zeros = z;
			return KVS_OK;
		}
		z += r->avail;
		if (z > limit)
			return KVS_E_OVERLONG;
		kvs_br_consume(r, r->avail);
	}
}

/* ---- exponential-Golomb -------------------------------------------------- */

unsigned kvs_eg_length(uint64_t value, unsigned k)
{
	if (k > 63)
		return 0;
	uint64_t hi1 = (value >> k) + 1; /* 0 only for k = 0, value = max */
	unsigned z = hi1 == 0 ? 64 : 63 - (unsigned)__builtin_clzll(hi1);
	return 2 * z + k + 1;
}

kvs_status kvs_put_eg(kvs_bitwriter *w, uint64_t value, unsigned k)
{
	if (k > 63)
		return KVS_E_RANGE;
	unsigned len = kvs_eg_length(value, k);
	if (len <= 64) /* w = value + 2^k fits, leading zeros implicit */
		return kvs_bw_put(w, value + ((uint64_t)1 << k), len);
	unsigned z = (len - k - 1) / 2; /* zeros before the leading one */
	kvs_bitwriter saved = *w;
	/* z zeros and the leading one of w, then the z + k bits below it:
	 * the low z + k bits of value + 2^k, computed modulo 2^64. */
	kvs_status st = z >= 64 ? kvs_bw_put(w, 0, 64) : KVS_OK;
	if (st == KVS_OK)
		st = kvs_bw_put(w, 1, z >= 64 ? 1 : z + 1);
	if (st == KVS_OK)
		st = kvs_bw_put(w, value + ((uint64_t)1 << k), z + k);
	if (st != KVS_OK)
		rollback(w, &saved); /* bytes past saved.len are not output */
	return st;
}

kvs_status kvs_get_eg_slow(kvs_bitreader *r, unsigned k, uint64_t *out)
{
	if (k > 63)
		return KVS_E_RANGE;
	kvs_bitreader saved = *r;
	uint64_t z;
	uint64_t rest;
	kvs_status st = count_zeros(r, 64 - k, &z);
	if (st != KVS_OK)
		goto fail;
	/* Now 1 + z + k bits: the leading one and the bits below it. */
	if (kvs_br_remaining(r) < 1 + z + k) {
		st = KVS_E_TRUNCATED;
		goto fail;
	}
	kvs_br_refill(r);
	kvs_br_consume(r, 1);
	st = kvs_br_read(r, (unsigned)(z + k), &rest);
	if (st != KVS_OK)
		goto fail;
	if (z + k < 64) {
		*out = (((uint64_t)1 << (z + k)) | rest) - ((uint64_t)1 << k);
		return KVS_OK;
	}
	/* w = 2^64 + rest; value = w - 2^k needs rest < 2^k. */
	if (rest >> k) {
		st = KVS_E_OVERFLOW;
		goto fail;
	}
	*out = rest - ((uint64_t)1 << k); /* modulo 2^64: adds 2^64 */
	return KVS_OK;
fail:
	*r = saved;
	return st;
}

/* ---- Golomb -------------------------------------------------------------- */

uint64_t kvs_golomb_length(const kvs_golomb *g, uint64_t value)
{
	uint64_t q = value / g->m, rem = value % g->m;
	if (q > KVS_GOLOMB_MAX_QUOTIENT)
		return 0;
	unsigned bits = g->b == 0 ? 0 : rem < g->cutoff ? g->b - 1 : g->b;
	return q + 1 + bits;
}

kvs_status kvs_put_golomb(kvs_bitwriter *w, const kvs_golomb *g, uint64_t value)
{
	uint64_t q = value / g->m, rem = value % g->m;
	if (q > KVS_GOLOMB_MAX_QUOTIENT)
		return KVS_E_RANGE;
	kvs_bitwriter saved = *w;
	kvs_status st = KVS_OK;
	for (uint64_t zeros = q; zeros > 0 && st == KVS_OK;) {
		unsigned n = zeros > 64 ? 64 : (unsigned)zeros;
		st = kvs_bw_put(w, 0, n);
		zeros -= n;
	}
	if (st == KVS_OK)
		st = kvs_bw_put(w, 1, 1);
	if (st == KVS_OK && g->b > 0) {
		if (rem < g->cutoff)
			st = kvs_bw_put(w, rem, g->b - 1);
		else
			st = kvs_bw_put(w, rem + g->cutoff, g->b);
	}
	if (st != KVS_OK)
		rollback(w, &saved);
	return st;
}

kvs_status kvs_get_golomb_slow(kvs_bitreader *r, kvs_golomb params,
                               uint64_t *out)
{
	const kvs_golomb *g = &params;
	kvs_bitreader saved = *r;
	uint64_t q, rem = 0, v;
	kvs_status st = count_zeros(r, KVS_GOLOMB_MAX_QUOTIENT, &q);
	if (st != KVS_OK)
		goto fail;
	if (kvs_br_remaining(r) < 1 + (g->b ? g->b - 1 : 0)) {
		st = KVS_E_TRUNCATED;
		goto fail;
	}
	kvs_br_refill(r);
	kvs_br_consume(r, 1);
	if (g->b > 0) {
		uint64_t x, bit;
		st = kvs_br_read(r, g->b - 1, &x);
		if (st != KVS_OK)
			goto fail;
		if (x < g->cutoff) {
			rem = x;
		} else {
			st = kvs_br_read(r, 1, &bit);
			if (st != KVS_OK)
				goto fail;
			/* 2x + bit - u <= m - 1, without forming 2x */
			rem = x - g->cutoff + x + bit;
		}
	}
	if (__builtin_mul_overflow(q, g->m, &v) ||
	    __builtin_add_overflow(v, rem, &v)) {
		st = KVS_E_OVERFLOW;
		goto fail;
	}
	*out = v;
	return KVS_OK;
fail:
	*r = saved;
	return st;
}

/* ---- Golomb decode tables ------------------------------------------------ */

/*
 * Each value below 256 whose code has at most KVS_GOLOMB_TABLE_BITS bits
 * fills the entries whose index starts with its code. The codes are a
 * prefix code, so no entry is filled twice.
 */
kvs_status kvs_golomb_table_init(kvs_golomb_table *t, uint64_t m)
{
	const unsigned bits = KVS_GOLOMB_TABLE_BITS;
	kvs_status st = kvs_golomb_init(&t->code, m);
	if (st != KVS_OK)
		return st;
	const kvs_golomb *g = &t->code;
	memset(t->length, 0, sizeof t->length);
	memset(t->value, 0, sizeof t->value);
	for (uint64_t v = 0; v < 256 && v / m < bits; v++) {
		uint64_t len = kvs_golomb_length(g, v);
		if (len == 0 || len > bits)
			continue;
		/* The code read as an integer: the unary one, then the
		 * remainder in b - 1 or b bits (see kvs_put_golomb). */
		uint64_t q = v / m, rem = v % m;
		uint64_t code = (uint64_t)1 << (len - q - 1);
		if (g->b > 0)
			code |= rem < g->cutoff ? rem : rem + g->cutoff;
		size_t first = (size_t)(code << (bits - len));
		size_t n = (size_t)1 << (bits - len);
		memset(t->length + first, (int)len, n);
		memset(t->value + first, (int)v, n);
	}
	return KVS_OK;
}

kvs_status kvs_golomb_table_miss_(kvs_bitreader *r, const kvs_golomb *g,
                                  uint64_t *out)
{
	return kvs_get_golomb(r, g, out);
}

/* ---- fixed width --------------------------------------------------------- */

kvs_status kvs_put_fixed(kvs_bitwriter *w, uint64_t value, unsigned width)
{
	if (width > 64 || (width < 64 && (value >> width) != 0))
		return KVS_E_RANGE;
	return kvs_bw_put(w, value, width);
}

/* ---- LEB128 varints ------------------------------------------------------ */

unsigned kvs_varint_length(uint64_t value)
{
	unsigned n = 1;
	while (value >= 0x80) {
		value >>= 7;
		n++;
	}
	return n;
}

kvs_status kvs_varint_get_slow(const uint8_t **p, const uint8_t *end,
                               uint64_t *out)
{
	const uint8_t *s = *p;
	uint64_t v = 0;
	for (unsigned i = 0; i < KVS_VARINT_MAX; i++) {
		if (s + i >= end)
			return KVS_E_TRUNCATED;
		uint8_t byte = s[i];
		if (i == KVS_VARINT_MAX - 1 && byte > 1)
			return KVS_E_OVERFLOW; /* bits beyond 2^63 */
		v |= (uint64_t)(byte & 0x7F) << (7 * i);
		if (!(byte & 0x80)) {
			if (byte == 0 && i > 0)
				return KVS_E_OVERLONG;
			*out = v;
			*p = s + i + 1;
			return KVS_OK;
		}
	}
	return KVS_E_OVERFLOW; /* unreachable: byte 10 is <= 1 */
}
