/*
 * test_codes.c — unit tests for the count codes (kvseg/codes.h):
 * exponential-Golomb of order k, Golomb with any modulus, fixed widths
 * and LEB128 varints.
 *
 * What it proves:
 *  - every encoder emits exactly the bits of the code's definition, and
 *    kvs_eg_length / kvs_golomb_length / kvs_varint_length agree, at every
 *    boundary value (0, 1, 2^j - 1, 2^j, 2^j + 1, 2^64 - 2, 2^64 - 1, the
 *    values where an EGk code grows, the largest Golomb quotient) and for
 *    random values; out-of-range arguments give KVS_E_RANGE and write
 *    nothing;
 *  - every decoder returns the encoded value and consumes exactly its
 *    code, in long mixed streams of all code kinds and raw bit fields, at
 *    any start offset;
 *  - a code cut at any bit gives KVS_E_TRUNCATED; overlong and overflowing
 *    codes give KVS_E_OVERLONG / KVS_E_OVERFLOW; every error consumes
 *    nothing and the reader goes on to decode what follows correctly;
 *  - decoders never load a byte past the payload: payloads end against a
 *    PROT_NONE page (testutil.h guarded_alloc) for every start and end
 *    alignment, including codes cut by the end and malformed codes;
 *  - region writers reject a code that does not fit without appending any
 *    of it (the writer is unchanged and later codes are unaffected);
 *  - the Golomb decoder's short-code select (a compare, a conditional move
 *    and a subtract-with-borrow, and its portable version) takes a bit
 *    off the length and picks the short bias exactly when x < y.
 *  - kvs_get_golomb_by_table decodes every code as the naive decoder does
 *    and exactly as kvs_get_golomb does (value, status, reader position):
 *    the Golomb tests above run again through it, and every entry of the
 *    table is decoded for m = 1..64 and a spread of larger moduli, whole,
 *    cut short and reaching past the bits the reader held.
 *
 * Oracle: naive encoders written here straight from the definitions in
 * codes.h, bit by bit into a bit array, and naive decoders over that bit
 * array (one bit at a time) that also say which error each malformed
 * input must give. No expected value or code length is computed with
 * libkvseg. The PRNG seed is printed; set KVSEG_TEST_SEED to change it.
 */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kvseg/bits.h"
#include "kvseg/codes.h"
#include "testutil.h"

/* The PRNG seed; test_rng_for(g_seed, tag) gives each test its stream. */
static uint64_t g_seed = 0x6b7673636f646573ull;

#define MAXQ  KVS_GOLOMB_MAX_QUOTIENT
#define P2(j) ((uint64_t)1 << (j))

/* ---- bit arrays --------------------------------------------------------- */

static void bv_zeros(test_bitvec *v, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		test_bv_push(v, 0);
}

/* n (0..64) bits of a bit array from pos, first most significant. */
static uint64_t bv_read(const test_bitvec *v, size_t pos, unsigned n)
{
	uint64_t x = 0;
	for (unsigned i = 0; i < n; i++)
		x = (x << 1) | v->bit[pos + i];
	return x;
}

static size_t bv_first_diff_bytes(const test_bitvec *v, const uint8_t *bytes,
                                  size_t nbits)
{
	for (size_t i = 0; i < nbits; i++)
		if (v->bit[i] != test_msb_bit_at(bytes, i))
			return i;
	return nbits;
}

/* Number of significant bits of x (0 for 0), by a loop. */
static unsigned naive_bitlen(uint64_t x)
{
	unsigned n = 0;
	while (n < 64 && (x >> n) != 0)
		n++;
	return n;
}

/* ---- naive encoders (straight from codes.h) ----------------------------- */

/* EGk(v): w = v + 2^k (65 bits), z = bitlength(w) - k - 1 zeros, then w. */
static void naive_eg(test_bitvec *out, uint64_t v, unsigned k)
{
	uint64_t lo = v + P2(k);
	int carry = lo < v; /* w = 2^64 + lo */
	unsigned bl = carry ? 65 : naive_bitlen(lo);
	unsigned z = bl - k - 1;
	bv_zeros(out, z);
	if (carry) {
		test_bv_push(out, 1);
		test_bv_put(out, lo, 64);
	} else {
		test_bv_put(out, lo, bl);
	}
}

/* b = ceil(log2 m): the smallest b with 2^b >= m. */
static unsigned naive_golomb_b(uint64_t m)
{
	unsigned b = 0;
	while (b < 64 && P2(b) < m)
		b++;
	return b;
}

/* u = 2^b - m, modulo 2^64 (b = 64 happens only for m > 2^63). */
static uint64_t naive_golomb_u(uint64_t m)
{
	unsigned b = naive_golomb_b(m);
	return (b == 64 ? 0 : P2(b)) - m;
}

/* Golomb(v; m). Returns 0 (and writes nothing) if q > MAXQ. */
static int naive_golomb(test_bitvec *out, uint64_t v, uint64_t m)
{
	uint64_t q = v / m, r = v % m;
	if (q > MAXQ)
		return 0;
	bv_zeros(out, q);
	test_bv_push(out, 1);
	unsigned b = naive_golomb_b(m);
	uint64_t u = naive_golomb_u(m);
	if (b == 0)
		return 1;
	if (r < u)
		test_bv_put(out, r, b - 1);
	else
		test_bv_put(out, r + u, b);
	return 1;
}

/* r (< m) in truncated binary for modulus m. */
static void naive_trunc_bin(test_bitvec *out, uint64_t r, uint64_t m)
{
	unsigned b = naive_golomb_b(m);
	uint64_t u = naive_golomb_u(m);
	if (b == 0)
		return;
	if (r < u)
		test_bv_put(out, r, b - 1);
	else
		test_bv_put(out, r + u, b);
}

/* ---- naive decoders ------------------------------------------------------ */

/*
 * The answer a decoder must give at bit pos of bits[0..end): a status
 * (or, where the input is both cut short and already certainly invalid, a
 * second acceptable status), the value and the code length.
 */
typedef struct nres {
	kvs_status st, alt;
	uint64_t v;
	size_t len;
} nres;

static nres nres_st(kvs_status st, kvs_status alt)
{
	nres r = {st, alt, 0, 0};
	return r;
}

/* Zeros from pos before the first one or end (memchr: bits are bytes). */
static size_t zero_run(const test_bitvec *b, size_t pos, size_t end)
{
	if (pos >= end)
		return 0;
	const uint8_t *one = memchr(b->bit + pos, 1, end - pos);
	return one ? (size_t)(one - (b->bit + pos)) : end - pos;
}

/* n (<= 64) bits at pos of which only `have` exist: missing bits as 0. */
static uint64_t read_padded(const test_bitvec *b, size_t pos, unsigned n,
                            size_t have)
{
	uint64_t x = 0;
	for (unsigned i = 0; i < n; i++)
		x = (x << 1) | (i < have ? b->bit[pos + i] : 0);
	return x;
}

static nres naive_get_eg(const test_bitvec *b, size_t pos, size_t end,
                         unsigned k)
{
	size_t limit = 64 - k;
	size_t z = zero_run(b, pos, end);
	if (pos + z == end) /* no terminating one before the end */
		return z > limit ? nres_st(KVS_E_OVERLONG, KVS_E_TRUNCATED)
		                 : nres_st(KVS_E_TRUNCATED, KVS_E_TRUNCATED);
	if (z > limit)
		return nres_st(KVS_E_OVERLONG, KVS_E_OVERLONG);
	size_t need = z + k; /* bits of w after its leading one, <= 64 */
	size_t at = pos + z + 1;
	size_t have = end - at;
	if (have < need) {
		/* w = 2^64 + x overflows iff x >= 2^k: certain already if
		 * the smallest completion of x does. */
		if (z == limit && read_padded(b, at, 64, have) >= P2(k))
			return nres_st(KVS_E_TRUNCATED, KVS_E_OVERFLOW);
		return nres_st(KVS_E_TRUNCATED, KVS_E_TRUNCATED);
	}
	uint64_t x = bv_read(b, at, (unsigned)need);
	nres r = {KVS_OK, KVS_OK, 0, z + 1 + need};
	if (z == limit) { /* v = 2^64 + x - 2^k */
		if (x >= P2(k))
			return nres_st(KVS_E_OVERFLOW, KVS_E_OVERFLOW);
		r.v = x - P2(k); /* wraps to 2^64 + x - 2^k */
	} else {
		r.v = (P2(need) | x) - P2(k);
	}
	return r;
}

/* Whether q * m + r >= 2^64. */
static int overflows(uint64_t q, uint64_t m, uint64_t r)
{
	uint64_t p;
	if (__builtin_mul_overflow(q, m, &p))
		return 1;
	return p > U64MAX - r;
}

static nres naive_get_golomb(const test_bitvec *b, size_t pos, size_t end,
                             uint64_t m)
{
	unsigned bb = naive_golomb_b(m);
	uint64_t u = naive_golomb_u(m);
	size_t z = zero_run(b, pos, end);
	if (pos + z == end) {
		if (z > MAXQ)
			return nres_st(KVS_E_OVERLONG, KVS_E_TRUNCATED);
		if (overflows(z, m, 0))
			return nres_st(KVS_E_TRUNCATED, KVS_E_OVERFLOW);
		return nres_st(KVS_E_TRUNCATED, KVS_E_TRUNCATED);
	}
	if (z > MAXQ)
		return nres_st(KVS_E_OVERLONG, KVS_E_OVERLONG);
	uint64_t q = z, r;
	size_t at = pos + z + 1, have = end - at, len;
	if (bb == 0) {
		r = 0;
		len = z + 1;
	} else if (have < bb - 1) { /* cut inside the first b - 1 bits */
		uint64_t y = read_padded(b, at, bb - 1, have);
		uint64_t rmin = y < u ? y : 2 * y - u;
		if (overflows(q, m, rmin))
			return nres_st(KVS_E_TRUNCATED, KVS_E_OVERFLOW);
		return nres_st(KVS_E_TRUNCATED, KVS_E_TRUNCATED);
	} else {
		uint64_t y = bv_read(b, at, bb - 1);
		if (y < u) {
			r = y;
			len = z + bb;
		} else if (have < bb) { /* cut before the last bit */
			if (overflows(q, m, 2 * y - u))
				return nres_st(KVS_E_TRUNCATED, KVS_E_OVERFLOW);
			return nres_st(KVS_E_TRUNCATED, KVS_E_TRUNCATED);
		} else {
			r = 2 * y + b->bit[at + bb - 1] - u;
			len = z + 1 + bb;
		}
	}
	if (overflows(q, m, r))
		return nres_st(KVS_E_OVERFLOW, KVS_E_OVERFLOW);
	nres res = {KVS_OK, KVS_OK, q * m + r, len};
	return res;
}

/* ---- code items: one abstraction over every kind ------------------------- */

enum { C_EG, C_GOLOMB, C_FIXED, C_RAW, C_NKINDS };

typedef struct item {
	int kind;
	unsigned k;   /* EG order, or width for C_FIXED / C_RAW */
	uint64_t m;   /* Golomb modulus */
	kvs_golomb g; /* initialised from m by the library (a parameter) */
	uint64_t v;   /* the value (C_RAW: may have junk above the width) */
} item;

static const char *kind_name(int kind)
{
	static const char *n[] = {"EG", "Golomb", "fixed", "raw"};
	return n[kind];
}

static void item_desc(const item *it, char *buf, size_t n)
{
	switch (it->kind) {
	case C_EG:
		snprintf(buf, n, "EG%u(0x%llx)", it->k, ULL(it->v));
		break;
	case C_GOLOMB:
		snprintf(buf, n, "Golomb(0x%llx; m=0x%llx)", ULL(it->v),
		         ULL(it->m));
		break;
	default:
		snprintf(buf, n, "%s%u(0x%llx)", kind_name(it->kind), it->k,
		         ULL(it->v));
		break;
	}
}

static item mk_item(int kind, unsigned k, uint64_t m, uint64_t v)
{
	item it;
	memset(&it, 0, sizeof it); /* kvs_golomb's fields are private */
	it.kind = kind;
	it.k = k;
	it.m = m;
	it.v = v;
	return it;
}

static item mk_eg(uint64_t v, unsigned k)
{
	return mk_item(C_EG, k, 0, v);
}

static item mk_golomb(uint64_t v, uint64_t m)
{
	item it = mk_item(C_GOLOMB, 0, m, v);
	kvs_status st = kvs_golomb_init(&it.g, m);
	CHECK_ST(st, KVS_OK, "kvs_golomb_init(m=0x%llx)", ULL(m));
	return it;
}

static item mk_fixed(uint64_t v, unsigned width, int raw)
{
	return mk_item(raw ? C_RAW : C_FIXED, width, 0, v);
}

/* The value a decoder returns for the item. */
static uint64_t item_value(const item *it)
{
	if (it->kind == C_RAW && it->k < 64)
		return it->v & (P2(it->k) - 1);
	return it->v;
}

/* Naive code bits; 0 if the item cannot be encoded. */
static int naive_enc(test_bitvec *out, const item *it)
{
	switch (it->kind) {
	case C_EG:
		naive_eg(out, it->v, it->k);
		return 1;
	case C_GOLOMB:
		return naive_golomb(out, it->v, it->m);
	default:
		test_bv_put(out, item_value(it), it->k);
		return 1;
	}
}

static kvs_status lib_enc(kvs_bitwriter *w, const item *it)
{
	switch (it->kind) {
	case C_EG:
		return kvs_put_eg(w, it->v, it->k);
	case C_GOLOMB:
		return kvs_put_golomb(w, &it->g, it->v);
	case C_FIXED:
		return kvs_put_fixed(w, it->v, it->k);
	default:
		return kvs_bw_put(w, it->v, it->k);
	}
}

/*
 * Table mode (set by the table tests' setup): lib_dec decodes Golomb codes
 * with kvs_get_golomb_by_table. The tables come from a small direct-mapped
 * cache by modulus, so a stream of mixed moduli builds each one rarely.
 */
enum { TABLE_SLOTS = 64 };
static int g_by_table;
static kvs_golomb_table *g_tables[TABLE_SLOTS];
static uint64_t g_table_m[TABLE_SLOTS]; /* 0: empty (no modulus is 0) */

static const kvs_golomb_table *table_for(uint64_t m)
{
	size_t slot = (size_t)((m * 0x9E3779B97F4A7C15ull) >> 58);
	if (g_tables[slot] == NULL) {
		g_tables[slot] = malloc(sizeof *g_tables[slot]);
		assert_non_null(g_tables[slot]);
		g_table_m[slot] = 0;
	}
	if (g_table_m[slot] != m) {
		CHECK_ST(kvs_golomb_table_init(g_tables[slot], m), KVS_OK,
		         "kvs_golomb_table_init(m=0x%llx)", ULL(m));
		g_table_m[slot] = m;
	}
	return g_tables[slot];
}

/* A mode's setup and teardown: the test's state is the mode's flag. */
static int mode_on(void **state)
{
	*(int *)*state = 1;
	return 0;
}

static int mode_off(void **state)
{
	*(int *)*state = 0;
	return 0;
}

static int table_mode_off(void **state)
{
	mode_off(state);
	for (size_t i = 0; i < TABLE_SLOTS; i++) {
		free(g_tables[i]);
		g_tables[i] = NULL;
		g_table_m[i] = 0;
	}
	return 0;
}

/* A test run in table mode, named after it. */
/* clang-format off */
#define BY_TABLE(f) {#f "_by_table", f, mode_on, table_mode_off, &g_by_table}
/* clang-format on */

/* kvs_get_golomb_by_table, and kvs_get_golomb from a copy of the reader:
 * both must give the same status, value and reader position. */
static kvs_status golomb_by_table(kvs_bitreader *r, const item *it,
                                  uint64_t *out)
{
	kvs_bitreader plain = *r;
	uint64_t want = 0;
	kvs_status want_st = kvs_get_golomb(&plain, &it->g, &want);
	kvs_status st = kvs_get_golomb_by_table(r, table_for(it->m), out);
	CHECK(st == want_st && (st != KVS_OK || *out == want),
	      "Golomb (m=0x%llx) at bit %llu: by table %s 0x%llx, "
	      "kvs_get_golomb %s 0x%llx",
	      ULL(it->m), ULL(kvs_br_position(&plain)), test_status_name(st),
	      ULL(*out), test_status_name(want_st), ULL(want));
	CHECK(kvs_br_position(r) == kvs_br_position(&plain) &&
	          kvs_br_remaining(r) == kvs_br_remaining(&plain),
	      "Golomb (m=0x%llx): by table the reader is at %llu, "
	      "kvs_get_golomb leaves it at %llu",
	      ULL(it->m), ULL(kvs_br_position(r)),
	      ULL(kvs_br_position(&plain)));
	return st;
}

/*
 * Wide mode (set by the wide tests' setup): lib_dec decodes EG codes with
 * kvs_get_eg_wide, and kvs_get_eg from a copy of the reader must give the
 * same status, value and reader position.
 */
static int g_eg_wide;

/* A test run in wide mode, named after it. */
/* clang-format off */
#define EG_WIDE(f) {#f "_eg_wide", f, mode_on, mode_off, &g_eg_wide}
/* clang-format on */

static kvs_status eg_wide(kvs_bitreader *r, const item *it, uint64_t *out)
{
	kvs_bitreader plain = *r;
	uint64_t want = 0;
	kvs_status want_st = kvs_get_eg(&plain, it->k, &want);
	kvs_status st = kvs_get_eg_wide(r, it->k, out);
	CHECK(st == want_st && (st != KVS_OK || *out == want),
	      "EG%u at bit %llu: kvs_get_eg_wide %s 0x%llx, kvs_get_eg %s "
	      "0x%llx",
	      it->k, ULL(kvs_br_position(&plain)), test_status_name(st),
	      ULL(*out), test_status_name(want_st), ULL(want));
	CHECK(kvs_br_position(r) == kvs_br_position(&plain) &&
	          kvs_br_remaining(r) == kvs_br_remaining(&plain),
	      "EG%u: kvs_get_eg_wide leaves the reader at %llu, kvs_get_eg "
	      "at %llu",
	      it->k, ULL(kvs_br_position(r)), ULL(kvs_br_position(&plain)));
	return st;
}

static kvs_status lib_dec(kvs_bitreader *r, const item *it, uint64_t *out)
{
	switch (it->kind) {
	case C_EG:
		if (g_eg_wide)
			return eg_wide(r, it, out);
		return kvs_get_eg(r, it->k, out);
	case C_GOLOMB:
		if (g_by_table)
			return golomb_by_table(r, it, out);
		return kvs_get_golomb(r, &it->g, out);
	case C_FIXED:
		return kvs_get_fixed(r, it->k, out);
	default:
		return kvs_br_read(r, it->k, out);
	}
}

static nres naive_dec(const test_bitvec *b, size_t pos, size_t end,
                      const item *it)
{
	if (it->kind == C_EG)
		return naive_get_eg(b, pos, end, it->k);
	if (it->kind == C_GOLOMB)
		return naive_get_golomb(b, pos, end, it->m);
	if (end - pos < it->k)
		return nres_st(KVS_E_TRUNCATED, KVS_E_TRUNCATED);
	nres r = {KVS_OK, KVS_OK, bv_read(b, pos, it->k), it->k};
	return r;
}

/* ---- placing bits in front of a guard page ------------------------------- */

typedef struct arena {
	guarded g;
	uint8_t *end; /* first byte of the PROT_NONE page */
	size_t cap;
} arena;

static void arena_init(arena *a, size_t cap)
{
	memset(a, 0, sizeof *a);
	assert_int_equal(guarded_alloc(&a->g, cap), 0);
	a->cap = cap;
	a->end = a->g.data + cap;
}

static void arena_free(arena *a)
{
	guarded_free(&a->g);
}

/*
 * Copies bits[from, from + n) to bit offset s (0..7) of a buffer whose
 * last byte ceil((s + n) / 8) - 1 sits against the guard page. The other
 * bits of the first and last byte are random. Returns the base pointer.
 */
static const uint8_t *place(arena *a, test_rng *rng, const test_bitvec *bits,
                            size_t from, size_t n, unsigned s)
{
	size_t nbytes = (s + n + 7) / 8;
	CHECK(nbytes <= a->cap, "arena of %zu bytes too small for %zu", a->cap,
	      nbytes);
	uint8_t *base = a->end - nbytes;
	if (nbytes > 0) {
		base[0] = (uint8_t)test_rng_next(rng);
		base[nbytes - 1] = (uint8_t)test_rng_next(rng);
	}
	for (size_t i = 0; i < n; i++)
		test_msb_bit_set(base, s + i, bits->bit[from + i]);
	return base;
}

/*
 * The bits packed at bit offset s (0..7) of a fresh buffer whose bits
 * outside [s, s + n) are random; caller frees. place_prefix() then copies
 * the bytes holding the first t bits in front of the guard page, so that
 * the bits after the payload in its last byte are the code's own
 * continuation: a decoder that looked past the end would see a valid code.
 */
static uint8_t *pack_at(const test_bitvec *bits, unsigned s, test_rng *rng)
{
	size_t nbytes = (s + bits->n + 7) / 8 + 1;
	uint8_t *p = malloc(nbytes);
	assert_non_null(p);
	for (size_t i = 0; i < nbytes; i++)
		p[i] = (uint8_t)test_rng_next(rng);
	for (size_t i = 0; i < bits->n; i++)
		test_msb_bit_set(p, s + i, bits->bit[i]);
	return p;
}

static const uint8_t *place_prefix(arena *a, const uint8_t *packed, unsigned s,
                                   size_t t)
{
	size_t nbytes = (s + t + 7) / 8;
	CHECK(nbytes <= a->cap, "arena too small");
	uint8_t *base = a->end - nbytes;
	memcpy(base, packed, nbytes);
	return base;
}

/*
 * Decodes `it` with the library at bit pos of a reader and checks it
 * against the naive decoder over the same bits (pos is relative to the
 * payload, which is bits[from, from + plen)). On error, checks that the
 * position did not move. Returns the naive answer.
 */
static nres check_dec(kvs_bitreader *r, const test_bitvec *bits, size_t from,
                      size_t plen, size_t pos, const item *it,
                      const char *where)
{
	char d[96];
	nres want = naive_dec(bits, from + pos, from + plen, it);
	uint64_t got = 0;
	CHECK(kvs_br_position(r) == pos, "%s: reader at %llu, expected %zu",
	      where, ULL(kvs_br_position(r)), pos);
	kvs_status st = lib_dec(r, it, &got);
	if (st != want.st && st != want.alt) {
		item_desc(it, d, sizeof d);
		print_error("%s: decoding %s-code at bit %zu of a %zu-bit "
		            "payload: got %s, expected %s",
		            where, kind_name(it->kind), pos, plen,
		            test_status_name(st), test_status_name(want.st));
		if (want.alt != want.st)
			print_error(" or %s", test_status_name(want.alt));
		print_error(" (decoder parameters of %s)\n", d);
		fail();
	}
	if (st == KVS_OK) {
		CHECK(got == want.v,
		      "%s: %s-code at bit %zu: got 0x%llx, "
		      "expected 0x%llx",
		      where, kind_name(it->kind), pos, ULL(got), ULL(want.v));
		CHECK(kvs_br_position(r) == pos + want.len,
		      "%s: %s-code at "
		      "bit %zu: consumed %llu bits, code has %zu",
		      where, kind_name(it->kind), pos,
		      ULL(kvs_br_position(r) - pos), want.len);
	} else {
		CHECK(kvs_br_position(r) == pos,
		      "%s: failed decode (%s) "
		      "moved the position %zu -> %llu",
		      where, test_status_name(st), pos,
		      ULL(kvs_br_position(r)));
		CHECK(kvs_br_remaining(r) == plen - pos,
		      "%s: failed decode "
		      "changed remaining",
		      where);
	}
	return want;
}

/* Raw reads of n bits (chunks <= 64) checked against the bit array. */
static void check_raw(kvs_bitreader *r, const test_bitvec *bits, size_t at,
                      size_t n, test_rng *rng, const char *where)
{
	while (n > 0) {
		unsigned c = 1 + (unsigned)test_rng_below(rng, 64);
		if (c > n)
			c = (unsigned)n;
		uint64_t v = 0;
		kvs_status st = kvs_br_read(r, c, &v);
		CHECK_ST(st, KVS_OK, "%s: raw read(%u) at bit %zu", where, c,
		         at);
		uint64_t want = bv_read(bits, at, c);
		CHECK(v == want,
		      "%s: raw read(%u) at bit %zu: got 0x%llx, "
		      "expected 0x%llx",
		      where, c, at, ULL(v), ULL(want));
		at += c;
		n -= c;
	}
}

/* ---- value generators ------------------------------------------------------
 */

/* 0, 1, 2, 2^j - 1, 2^j, 2^j + 1 (j = 1..63), 2^64 - 2, 2^64 - 1. */
static size_t boundary_values(uint64_t *out)
{
	size_t n = 0;
	out[n++] = 0;
	out[n++] = 1;
	out[n++] = 2;
	for (unsigned j = 1; j < 64; j++) {
		out[n++] = P2(j) - 1;
		out[n++] = P2(j);
		out[n++] = P2(j) + 1;
	}
	out[n++] = U64MAX - 1;
	out[n++] = U64MAX;
	return n;
}

/* boundary_values plus, for order k, the values where EGk grows
 * (2^j - 2^k - 1, 2^j - 2^k for j = k..64) and 2^64 - 2^k - 2 .. + 1. */
static size_t eg_values(uint64_t *out, unsigned k)
{
	size_t n = boundary_values(out);
	for (unsigned j = k; j <= 64; j++) {
		uint64_t p = (j == 64 ? 0 : P2(j)) - P2(k);
		out[n++] = p - 1;
		out[n++] = p;
		out[n++] = p + 1;
	}
	uint64_t top = (uint64_t)0 - P2(k);
	out[n++] = top - 2;
	out[n++] = top + 1;
	return n;
}

static const uint64_t golomb_ms[] = {
    1,          2,          3,          4,      5,
    7,          8,          100,        1000,   0xFFFFFFFFull,
    P2(32),     P2(32) + 1, P2(48) + 1, P2(63), P2(63) + 1,
    U64MAX - 1, U64MAX,
};
#define NGM (sizeof golomb_ms / sizeof golomb_ms[0])

/* Golomb boundary values for m: around q * m and the truncated-binary
 * cut-off u, the largest quotient, and the generic boundaries. */
static size_t golomb_values(uint64_t *out, uint64_t m)
{
	size_t n = boundary_values(out);
	uint64_t u = naive_golomb_u(m);
	static const uint64_t qs[] = {0,  1,        2,    3,        63,      64,
	                              65, MAXQ - 1, MAXQ, MAXQ + 1, MAXQ + 2};
	for (size_t i = 0; i < sizeof qs / sizeof qs[0]; i++) {
		uint64_t base;
		if (__builtin_mul_overflow(qs[i], m, &base))
			continue;
		const uint64_t offs[] = {0,     1,     u ? u - 1 : 0, u,
		                         u + 1, m - 2, m - 1};
		for (size_t j = 0; j < sizeof offs / sizeof offs[0]; j++)
			if (offs[j] < m && base <= U64MAX - offs[j])
				out[n++] = base + offs[j];
	}
	return n;
}

/* A random Golomb modulus: from the list or random wide. */
static uint64_t rand_m(test_rng *rng)
{
	if (test_rng_below(rng, 3) != 0)
		return golomb_ms[test_rng_below(rng, NGM)];
	uint64_t m = test_rng_wide(rng);
	return m ? m : 1;
}

/* A random encodable Golomb value for m: quotient mostly small. */
static uint64_t rand_golomb_value(test_rng *rng, uint64_t m)
{
	uint64_t qmax = U64MAX / m;
	if (qmax > MAXQ)
		qmax = MAXQ;
	uint64_t q;
	switch (test_rng_below(rng, 512)) {
	case 0:
		q = qmax;
		break;
	case 1:
		q = qmax - test_rng_below(rng, 2);
		break;
	case 2:
	case 3:
	case 4:
	case 5:
	case 6:
	case 7:
	case 8:
	case 9:
	case 10:
	case 11:
	case 12:
	case 13:
	case 14:
	case 15:
	case 16:
		q = test_rng_below(rng, 300);
		break;
	default:
		q = test_rng_below(rng, 12);
		break;
	}
	if (q > qmax)
		q = qmax;
	uint64_t lim = U64MAX - q * m; /* r <= lim */
	uint64_t r = lim >= m - 1 ? test_rng_below(rng, m)
	                          : test_rng_below(rng, lim + 1);
	if (test_rng_below(rng, 4) == 0) /* near the cut-off */
		r = naive_golomb_u(m) - 1 + test_rng_below(rng, 3);
	if (r >= m || r > lim)
		r = 0;
	return q * m + r;
}

static item rand_item(test_rng *rng)
{
	switch (test_rng_below(rng, C_NKINDS)) {
	case C_EG: {
		unsigned k = test_rng_below(rng, 2)
		                 ? (unsigned)test_rng_below(rng, 4)
		                 : (unsigned)test_rng_below(rng, 64);
		uint64_t v = test_rng_below(rng, 8)
		                 ? test_rng_wide(rng)
		                 : U64MAX - test_rng_below(rng, 3);
		return mk_eg(v, k);
	}
	case C_GOLOMB: {
		uint64_t m = rand_m(rng);
		return mk_golomb(rand_golomb_value(rng, m), m);
	}
	case C_FIXED: {
		unsigned w = (unsigned)test_rng_below(rng, 65);
		uint64_t v = test_rng_next(rng);
		if (w < 64)
			v &= P2(w) - 1;
		return mk_fixed(v, w, 0);
	}
	default:
		return mk_fixed(test_rng_next(rng),
		                (unsigned)test_rng_below(rng, 65), 1);
	}
}

/* ---- encoding checks ------------------------------------------------------
 */

/*
 * Encodes one item with the library into a fresh growable writer after a
 * lead of `lead` bits and compares every bit with the naive code, and the
 * length functions with the naive length.
 */
static void check_encode(const item *it, unsigned lead, const test_bitvec *code)
{
	char d[96];
	kvs_bitwriter w;
	kvs_bw_init(&w);
	CHECK_ST(kvs_bw_put(&w, 0, lead), KVS_OK, "lead");
	kvs_status st = lib_enc(&w, it);
	item_desc(it, d, sizeof d);
	CHECK_ST(st, KVS_OK, "encoding %s", d);
	uint64_t bits = kvs_bw_bit_length(&w);
	CHECK(bits == lead + code->n,
	      "encoding %s after %u bits: wrote %llu "
	      "bits, the code has %zu",
	      d, lead, ULL(bits - lead), code->n);
	const uint8_t *data;
	size_t len;
	CHECK_ST(kvs_bw_flush(&w, &data, &len), KVS_OK, "flush");
	for (size_t i = 0; i < code->n; i++) {
		int got = test_msb_bit_at(data, lead + i);
		if (got != code->bit[i]) {
			print_error("encoding %s: bit %zu of the code is %d, "
			            "expected %d (code of %zu bits)\n",
			            d, i, got, code->bit[i], code->n);
			fail();
		}
	}
	for (size_t i = 0; i < lead; i++)
		CHECK(test_msb_bit_at(data, i) == 0,
		      "encoding %s disturbed the lead", d);
	kvs_bw_free(&w);
	if (it->kind == C_EG)
		CHECK(kvs_eg_length(it->v, it->k) == code->n,
		      "kvs_eg_length"
		      "(0x%llx, %u) = %u, expected %zu",
		      ULL(it->v), it->k, kvs_eg_length(it->v, it->k), code->n);
	if (it->kind == C_GOLOMB)
		CHECK(kvs_golomb_length(&it->g, it->v) == code->n,
		      "kvs_golomb_length(m=0x%llx, 0x%llx) = %llu, expected "
		      "%zu",
		      ULL(it->m), ULL(it->v),
		      ULL(kvs_golomb_length(&it->g, it->v)), code->n);
}

/*
 * Full check of one encodable item: encoding (bits and length), decoding
 * at start offsets 0..7 with the payload against a guard page and the code
 * followed by nothing, by 64 bits of the code's complement, and truncated
 * at every length t < L (sampled for very long codes), each truncation
 * followed by raw reads of the t bits that are there.
 */
static void check_item_full(const item *it, arena *a, test_rng *rng,
                            int all_offsets)
{
	test_bitvec code = {0};
	CHECK(naive_enc(&code, it), "item not encodable");
	check_encode(it, (unsigned)test_rng_below(rng, 64), &code);
	size_t L = code.n;
	/* Decode as the whole payload, and with trailing complement bits. */
	unsigned s_rand = 1 + (unsigned)test_rng_below(rng, 7);
	for (unsigned s = 0; s < 8; s++) {
		if (!all_offsets && s != 0 && s != s_rand)
			continue;
		for (int tail = 0; tail < 2; tail++) {
			test_bitvec b = {0};
			for (size_t i = 0; i < L; i++)
				test_bv_push(&b, code.bit[i]);
			if (tail)
				for (int i = 0; i < 64; i++)
					test_bv_push(&b,
					             !code.bit[(size_t)i % L]);
			const uint8_t *base = place(a, rng, &b, 0, b.n, s);
			kvs_bitreader r;
			kvs_br_init(&r, base, s, b.n);
			check_dec(&r, &b, 0, b.n, 0, it, "whole code");
			check_raw(&r, &b, L, b.n - L, rng, "after code");
			test_bv_free(&b);
		}
	}
	/* Truncated at every bit (sampled in the middle of long codes). */
	uint8_t *packed[8];
	for (unsigned s = 0; s < 8; s++)
		packed[s] = pack_at(&code, s, rng);
	for (size_t t = 0; t < L; t++) {
		if (L > 600 && t > 300 && t + 300 < L &&
		    test_rng_below(rng, 200) != 0)
			continue;
		unsigned s = (unsigned)test_rng_below(rng, 8);
		const uint8_t *base = place_prefix(a, packed[s], s, t);
		kvs_bitreader r;
		kvs_br_init(&r, base, s, t);
		uint64_t v;
		char d[96];
		kvs_status st = lib_dec(&r, it, &v);
		if (st != KVS_E_TRUNCATED) {
			item_desc(it, d, sizeof d);
			print_error("%s (%zu bits) cut to its first %zu bits "
			            "(start bit %u): got %s, expected "
			            "KVS_E_TRUNCATED\n",
			            d, L, t, s, test_status_name(st));
			fail();
		}
		CHECK(kvs_br_position(&r) == 0 && kvs_br_remaining(&r) == t,
		      "truncated decode moved the reader to %llu",
		      ULL(kvs_br_position(&r)));
		/* The reader stays usable: the t bits read back raw (for
		 * long prefixes, a skip and the last 128 bits). */
		size_t sk = t <= 300 ? 0 : t - 128;
		CHECK_ST(kvs_br_skip(&r, sk), KVS_OK, "skip(%zu)", sk);
		check_raw(&r, &code, sk, t - sk, rng, "after truncation");
		CHECK_ST(lib_dec(&r, it, &v), KVS_E_TRUNCATED, "at the end");
	}
	for (unsigned s = 0; s < 8; s++)
		free(packed[s]);
	test_bv_free(&code);
}

/* ---- EG tests --------------------------------------------------------------
 */

static void expect_code(const item *it, const char *bits)
{
	test_bitvec want = {0};
	for (const char *p = bits; *p; p++)
		if (*p == '0' || *p == '1')
			test_bv_push(&want, *p == '1');
	test_bitvec naive = {0};
	CHECK(naive_enc(&naive, it), "not encodable");
	/* The naive encoder itself must match the hand-written vector. */
	CHECK(naive.n == want.n && memcmp(naive.bit, want.bit, want.n) == 0,
	      "naive encoder disagrees with hand vector %s", bits);
	check_encode(it, 0, &want);
	check_encode(it, 5, &want);
	test_bv_free(&want);
	test_bv_free(&naive);
}

static void test_eg_known_vectors(void **state)
{
	(void)state;
	item it;
	it = mk_eg(0, 0), expect_code(&it, "1");
	it = mk_eg(1, 0), expect_code(&it, "010");
	it = mk_eg(2, 0), expect_code(&it, "011");
	it = mk_eg(3, 0), expect_code(&it, "00100");
	it = mk_eg(6, 0), expect_code(&it, "00111");
	it = mk_eg(7, 0), expect_code(&it, "0001000");
	it = mk_eg(0, 1), expect_code(&it, "10");
	it = mk_eg(1, 1), expect_code(&it, "11");
	it = mk_eg(2, 1), expect_code(&it, "0100");
	it = mk_eg(5, 1), expect_code(&it, "0111");
	it = mk_eg(6, 1), expect_code(&it, "001000");
	it = mk_eg(0, 3), expect_code(&it, "1000");
	it = mk_eg(8, 3), expect_code(&it, "0 10000");
	/* EG0(2^64 - 1): 64 zeros, a one, 64 zeros. */
	it = mk_eg(U64MAX, 0);
	expect_code(
	    &it,
	    "0000000000000000000000000000000000000000000000000000000000000000"
	    "1"
	    "0000000000000000000000000000000000000000000000000000000000000000");
	CHECK(kvs_eg_length(U64MAX, 0) == 129, "EG0(2^64-1) length %u",
	      kvs_eg_length(U64MAX, 0));
	/* EG0(2^64 - 2): 63 zeros then 2^64 - 1 in 64 bits. */
	it = mk_eg(U64MAX - 1, 0);
	expect_code(
	    &it,
	    "000000000000000000000000000000000000000000000000000000000000000"
	    "1111111111111111111111111111111111111111111111111111111111111111");
	/* EG63(0) = 1 and 63 zeros; EG63(2^64-1): w = 2^64 + 2^63 - 1. */
	it = mk_eg(0, 63);
	expect_code(
	    &it,
	    "1000000000000000000000000000000000000000000000000000000000000000");
	it = mk_eg(U64MAX, 63);
	expect_code(
	    &it,
	    "0 1 "
	    "0111111111111111111111111111111111111111111111111111111111111111");
	it = mk_eg(P2(63), 63);
	expect_code(
	    &it,
	    "0 1 "
	    "0000000000000000000000000000000000000000000000000000000000000000");
	it = mk_eg(P2(63) - 1, 63);
	expect_code(
	    &it,
	    "1111111111111111111111111111111111111111111111111111111111111111");

	/* k > 63: KVS_E_RANGE, nothing written; the decoder refuses too. */
	kvs_bitwriter w;
	kvs_bw_init(&w);
	CHECK_ST(kvs_bw_put(&w, 1, 3), KVS_OK, "lead");
	CHECK_ST(kvs_put_eg(&w, 0, 64), KVS_E_RANGE, "EG64");
	CHECK_ST(kvs_put_eg(&w, 5, 1000), KVS_E_RANGE, "EG1000");
	CHECK(kvs_bw_bit_length(&w) == 3, "failed put_eg wrote bits");
	kvs_bw_free(&w);
	/* The decoder's fast path has no test of k: its code length
	 * 2z + k + 1 must not wrap for any k, whatever the reservoir holds
	 * (ones: z = 0; zeros then ones: the run past the first refill). */
	static const unsigned bad_k[] = {
	    64, 65, 127, 1000, UINT_MAX - 64, UINT_MAX - 1, UINT_MAX};
	uint8_t buf[32];
	for (int fill = 0; fill < 3; fill++) {
		memset(buf, fill == 1 ? 0x00 : 0xFF, sizeof buf);
		if (fill == 2)
			memset(buf, 0x00, 5);
		for (size_t i = 0; i < sizeof bad_k / sizeof bad_k[0]; i++) {
			kvs_bitreader r;
			uint64_t v = 7;
			kvs_br_init(&r, buf, fill == 2 ? 3 : 0,
			            8 * sizeof buf - 8);
			uint64_t at = kvs_br_position(&r);
			kvs_status st = g_eg_wide
			                    ? kvs_get_eg_wide(&r, bad_k[i], &v)
			                    : kvs_get_eg(&r, bad_k[i], &v);
			CHECK_ST(st, KVS_E_RANGE, "EG%u decode (fill %d)",
			         bad_k[i], fill);
			CHECK(kvs_br_position(&r) == at,
			      "failed EG%u decode moved", bad_k[i]);
		}
	}
}

/* Every k 0..63, every boundary value: encoding, lengths, decoding,
 * truncation at every bit. */
static void test_eg_boundaries(void **state)
{
	(void)state;
	test_rng rng = test_rng_for(g_seed, 10);
	arena a;
	arena_init(&a, 64);
	uint64_t vals[512];
	for (unsigned k = 0; k < 64; k++) {
		size_t n = eg_values(vals, k);
		for (size_t i = 0; i < n; i++) {
			item it = mk_eg(vals[i], k);
			check_item_full(&it, &a, &rng,
			                k == 0 || vals[i] > U64MAX - 4);
		}
	}
	arena_free(&a);
}

/* Random values and orders: one long stream per order class, library bytes
 * vs naive bits, then decoded back. */
static void check_stream(const item *items, size_t n, test_rng *rng, arena *a,
                         const char *what);

static void test_eg_random(void **state)
{
	(void)state;
	test_rng rng = test_rng_for(g_seed, 11);
	arena a;
	arena_init(&a, 1 << 20);
	enum { N = 4000 };
	item *items = malloc(N * sizeof *items);
	assert_non_null(items);
	for (int rep = 0; rep < 20; rep++) {
		for (size_t i = 0; i < N; i++) {
			unsigned k = rep < 10
			                 ? (unsigned)rep
			                 : (unsigned)test_rng_below(&rng, 64);
			items[i] = mk_eg(rep % 3 ? test_rng_wide(&rng)
			                         : test_rng_next(&rng),
			                 k);
		}
		check_stream(items, N, &rng, &a, "EG random");
	}
	free(items);
	arena_free(&a);
}

/* Crafted malformed EG codes: overlong (zero run 65 - k), overflow (run
 * 64 - k with x >= 2^k) and the largest valid, each followed by a valid
 * code that must decode after the error. */
static void test_eg_errors(void **state)
{
	(void)state;
	test_rng rng = test_rng_for(g_seed, 12);
	arena a;
	arena_init(&a, 256);
	for (unsigned k = 0; k < 64; k++) {
		for (int c = 0; c < 8; c++) {
			test_bitvec b = {0};
			kvs_status want;
			uint64_t x = 0;
			switch (c) {
			case 0: /* run of 65 - k zeros, one, 64 bits */
				bv_zeros(&b, 65 - k);
				test_bv_push(&b, 1);
				test_bv_put(&b, test_rng_next(&rng), 64);
				want = KVS_E_OVERLONG;
				break;
			case 1: /* a much longer run, then ones */
				bv_zeros(&b, 65 - k + test_rng_below(&rng, 70));
				test_bv_put(&b, U64MAX, 64);
				want = KVS_E_OVERLONG;
				break;
			case 2: /* run 64 - k, x = 2^k: v = 2^64 */
			case 3: /* run 64 - k, x = 2^64 - 1 */
			case 4: /* run 64 - k, random x >= 2^k */
				x = c == 2   ? P2(k)
				    : c == 3 ? U64MAX
				             : P2(k) | test_rng_next(&rng);
				bv_zeros(&b, 64 - k);
				test_bv_push(&b, 1);
				test_bv_put(&b, x, 64);
				want = KVS_E_OVERFLOW;
				break;
			case 5: /* run 64 - k, x = 2^k - 1: v = 2^64 - 1 */
				bv_zeros(&b, 64 - k);
				test_bv_push(&b, 1);
				test_bv_put(&b, P2(k) - 1, 64);
				want = KVS_OK;
				break;
			case 6: /* run 64 - k, x = 0: v = 2^64 - 2^k */
				bv_zeros(&b, 64 - k);
				test_bv_push(&b, 1);
				test_bv_put(&b, 0, 64);
				want = KVS_OK;
				break;
			default: /* run 64 - k, a one, then only 63 bits */
				bv_zeros(&b, 64 - k);
				test_bv_push(&b, 1);
				test_bv_put(&b, 0, 63);
				want = KVS_E_TRUNCATED;
				break;
			}
			size_t bad = b.n;
			item next = mk_eg(test_rng_wide(&rng), k);
			if (want != KVS_E_TRUNCATED)
				naive_enc(&b, &next);
			unsigned s = (unsigned)test_rng_below(&rng, 8);
			const uint8_t *base = place(&a, &rng, &b, 0, b.n, s);
			kvs_bitreader r;
			kvs_br_init(&r, base, s, b.n);
			item it = mk_eg(0, k);
			nres nr = check_dec(&r, &b, 0, b.n, 0, &it, "EG error");
			CHECK_ST(nr.st, want, "naive oracle, case %d k %u", c,
			         k);
			if (nr.st != KVS_OK) {
				/* Read the bad code raw, then decode on. */
				check_raw(&r, &b, 0, bad, &rng, "after error");
				if (want != KVS_E_TRUNCATED)
					check_dec(&r, &b, 0, b.n, bad, &next,
					          "code after the error");
			}
			test_bv_free(&b);
		}
	}
	arena_free(&a);
}

/* ---- Golomb tests
 * ------------------------------------------------------------ */

static void test_golomb_known_vectors(void **state)
{
	(void)state;
	kvs_golomb g;
	CHECK_ST(kvs_golomb_init(&g, 0), KVS_E_RANGE, "m = 0");
	item it;
	/* m = 7: b = 3, u = 1: r = 0 -> 00, r = 1..6 -> r + 1 in 3 bits. */
	static const char *m7[] = {"1 00",  "1 010", "1 011", "1 100",
	                           "1 101", "1 110", "1 111"};
	for (unsigned r = 0; r < 7; r++) {
		it = mk_golomb(r, 7), expect_code(&it, m7[r]);
		char buf[16];
		snprintf(buf, sizeof buf, "001 %s", m7[r] + 2);
		it = mk_golomb(14 + r, 7), expect_code(&it, buf);
	}
	/* m = 1: unary. */
	it = mk_golomb(0, 1), expect_code(&it, "1");
	it = mk_golomb(3, 1), expect_code(&it, "0001");
	/* m = 3: b = 2, u = 1: 0 -> 0, 1 -> 10, 2 -> 11. */
	it = mk_golomb(0, 3), expect_code(&it, "1 0");
	it = mk_golomb(1, 3), expect_code(&it, "1 10");
	it = mk_golomb(2, 3), expect_code(&it, "1 11");
	it = mk_golomb(5, 3), expect_code(&it, "01 11");
	/* m = 5: b = 3, u = 3: 0..2 in 2 bits, 3 -> 110, 4 -> 111. */
	it = mk_golomb(2, 5), expect_code(&it, "1 10");
	it = mk_golomb(3, 5), expect_code(&it, "1 110");
	it = mk_golomb(9, 5), expect_code(&it, "01 111");
	/* m = 4 (Rice): 2 bits. */
	it = mk_golomb(6, 4), expect_code(&it, "01 10");
	/* m = 2^64 - 1: b = 64, u = 1: 0 -> 1 + 63 zeros; 1 -> 1 + 0..010. */
	it = mk_golomb(0, U64MAX);
	expect_code(
	    &it,
	    "1 "
	    "000000000000000000000000000000000000000000000000000000000000000");
	it = mk_golomb(1, U64MAX);
	expect_code(
	    &it,
	    "1 "
	    "0000000000000000000000000000000000000000000000000000000000000010");
	it = mk_golomb(U64MAX, U64MAX);
	expect_code(
	    &it,
	    "01 "
	    "000000000000000000000000000000000000000000000000000000000000000");
	/* m = 2^63: b = 63, u = 2^63: 63 bits. */
	it = mk_golomb(U64MAX, P2(63));
	expect_code(
	    &it,
	    "01 "
	    "111111111111111111111111111111111111111111111111111111111111111");

	/* Quotient limit: m = 1, 2^16 is the largest value. */
	kvs_bitwriter w;
	kvs_golomb g1;
	CHECK_ST(kvs_golomb_init(&g1, 1), KVS_OK, "m = 1");
	CHECK(kvs_golomb_length(&g1, MAXQ) == MAXQ + 1, "length of 2^16");
	CHECK(kvs_golomb_length(&g1, MAXQ + 1) == 0, "length of 2^16 + 1");
	CHECK(kvs_golomb_length(&g1, U64MAX) == 0, "length of 2^64 - 1");
	kvs_bw_init(&w);
	CHECK_ST(kvs_bw_put(&w, 1, 5), KVS_OK, "lead");
	CHECK_ST(kvs_put_golomb(&w, &g1, MAXQ + 1), KVS_E_RANGE, "q = 2^16+1");
	CHECK_ST(kvs_put_golomb(&w, &g1, U64MAX), KVS_E_RANGE, "q = 2^64-1");
	CHECK(kvs_bw_bit_length(&w) == 5, "failed put_golomb wrote bits");
	CHECK_ST(kvs_put_golomb(&w, &g1, MAXQ), KVS_OK, "q = 2^16");
	CHECK(kvs_bw_bit_length(&w) == 5 + MAXQ + 1, "length after 2^16");
	kvs_bw_free(&w);
}

static void test_golomb_boundaries(void **state)
{
	(void)state;
	test_rng rng = test_rng_for(g_seed, 20);
	arena a;
	arena_init(&a, (MAXQ + 200) / 8 + 16);
	uint64_t vals[512];
	for (size_t mi = 0; mi < NGM + 24; mi++) {
		uint64_t m = mi < NGM ? golomb_ms[mi] : rand_m(&rng);
		if (mi >= NGM && mi < NGM + 12)
			m = test_rng_wide(&rng) | 1;
		size_t n = golomb_values(vals, m);
		for (size_t i = 0; i < n; i++) {
			item it = mk_golomb(vals[i], m);
			if (vals[i] / m > MAXQ) {
				kvs_bitwriter w;
				kvs_bw_init(&w);
				CHECK_ST(kvs_bw_put(&w, 3, 2), KVS_OK, "lead");
				CHECK_ST(kvs_put_golomb(&w, &it.g, vals[i]),
				         KVS_E_RANGE,
				         "Golomb(0x%llx; m=0x%llx),"
				         " quotient over 2^16",
				         ULL(vals[i]), ULL(m));
				CHECK(kvs_bw_bit_length(&w) == 2,
				      "failed "
				      "put_golomb wrote bits");
				CHECK(kvs_golomb_length(&it.g, vals[i]) == 0,
				      "length of unencodable 0x%llx (m 0x%llx)"
				      " is %llu",
				      ULL(vals[i]), ULL(m),
				      ULL(kvs_golomb_length(&it.g, vals[i])));
				kvs_bw_free(&w);
				continue;
			}
			check_item_full(&it, &a, &rng, 0);
		}
	}
	arena_free(&a);
}

static void test_golomb_random(void **state)
{
	(void)state;
	test_rng rng = test_rng_for(g_seed, 21);
	arena a;
	arena_init(&a, 1 << 21);
	enum { N = 3000 };
	item *items = malloc(N * sizeof *items);
	assert_non_null(items);
	for (int rep = 0; rep < 30; rep++) {
		uint64_t m = rep < (int)NGM ? golomb_ms[rep] : rand_m(&rng);
		for (size_t i = 0; i < N; i++) {
			uint64_t mm = rep % 2 ? m : rand_m(&rng);
			items[i] = mk_golomb(rand_golomb_value(&rng, mm), mm);
		}
		check_stream(items, N, &rng, &a, "Golomb random");
	}
	free(items);
	arena_free(&a);
}

/* Crafted malformed Golomb codes, each followed by a valid one. */
static void test_golomb_errors(void **state)
{
	(void)state;
	test_rng rng = test_rng_for(g_seed, 22);
	arena a;
	arena_init(&a, (MAXQ + 1000) / 8);
	for (size_t mi = 0; mi < NGM; mi++) {
		uint64_t m = golomb_ms[mi];
		unsigned b = naive_golomb_b(m);
		for (int c = 0; c < 6; c++) {
			test_bitvec bits = {0};
			kvs_status want;
			switch (c) {
			case 0: /* a run of 2^16 + 1 zeros: overlong */
				bv_zeros(&bits, MAXQ + 1);
				test_bv_push(&bits, 1);
				test_bv_put(&bits, test_rng_next(&rng), b);
				want = KVS_E_OVERLONG;
				break;
			case 1: /* a run of 2^16 zeros, r = 0: valid unless
			         * 2^16 * m overflows */
				bv_zeros(&bits, MAXQ);
				test_bv_push(&bits, 1);
				naive_trunc_bin(&bits, 0, m);
				want = overflows(MAXQ, m, 0) ? KVS_E_OVERFLOW
				                             : KVS_OK;
				break;
			case 2: { /* q = 2^64 / m exactly: q * m >= 2^64 */
				uint64_t q = U64MAX / m + 1;
				if (q > MAXQ || q == 0)
					q = MAXQ;
				bv_zeros(&bits, q);
				test_bv_push(&bits, 1);
				naive_trunc_bin(&bits, 0, m);
				want = overflows(q, m, 0) ? KVS_E_OVERFLOW
				                          : KVS_OK;
				break;
			}
			case 3: { /* q = floor((2^64 - 1) / m), r = m - 1 */
				uint64_t q = U64MAX / m;
				if (q > MAXQ)
					q = MAXQ;
				bv_zeros(&bits, q);
				test_bv_push(&bits, 1);
				naive_trunc_bin(&bits, m - 1, m);
				want = overflows(q, m, m - 1) ? KVS_E_OVERFLOW
				                              : KVS_OK;
				break;
			}
			case 4: { /* q = floor((2^64 - 1) / m), smallest r
				   * that overflows, if any */
				uint64_t q = U64MAX / m;
				if (q > MAXQ)
					q = MAXQ;
				uint64_t r = U64MAX - q * m + 1; /* may be m */
				bv_zeros(&bits, q);
				test_bv_push(&bits, 1);
				if (r >= m)
					r = 0;
				naive_trunc_bin(&bits, r, m);
				want = overflows(q, m, r) ? KVS_E_OVERFLOW
				                          : KVS_OK;
				break;
			}
			default: /* unary run reaches the end */
				bv_zeros(&bits, 1 + test_rng_below(&rng, 200));
				want = KVS_E_TRUNCATED;
				break;
			}
			size_t bad = bits.n;
			item next = mk_golomb(rand_golomb_value(&rng, m), m);
			if (next.v / m > 400)
				next.v = m - 1;
			if (want != KVS_E_TRUNCATED)
				naive_enc(&bits, &next);
			unsigned s = (unsigned)test_rng_below(&rng, 8);
			const uint8_t *base =
			    place(&a, &rng, &bits, 0, bits.n, s);
			kvs_bitreader r;
			kvs_br_init(&r, base, s, bits.n);
			item it = mk_golomb(0, m);
			nres nr = check_dec(&r, &bits, 0, bits.n, 0, &it,
			                    "Golomb error");
			CHECK_ST(nr.st, want, "naive oracle, case %d", c);
			if (nr.st != KVS_OK) {
				check_raw(&r, &bits, 0, bad, &rng,
				          "after error");
				if (want != KVS_E_TRUNCATED)
					check_dec(&r, &bits, 0, bits.n, bad,
					          &next,
					          "code after the error");
			}
			test_bv_free(&bits);
		}
	}
	arena_free(&a);
}

/*
 * Every entry of the decode table, through the decoder (in table mode):
 * for m = 1..64 and a spread of larger moduli, every
 * KVS_GOLOMB_TABLE_BITS-bit string followed by random bits, after a lead
 * read raw so that the reader holds bits before the refill, at a random
 * start offset; mostly as a 64-bit payload, else cut after 0..16 bits of
 * the string (the code may then end past the payload). Against the naive
 * decoder, and against kvs_get_golomb (lib_dec).
 */
static void test_golomb_table_entries(void **state)
{
	(void)state;
	test_rng rng = test_rng_for(g_seed, 23);
	arena a;
	arena_init(&a, 64);
	const unsigned kb = KVS_GOLOMB_TABLE_BITS;
	for (size_t mi = 0; mi < 64 + 40 + NGM; mi++) {
		uint64_t m = mi < 64    ? mi + 1
		             : mi < 104 ? 65 + (mi - 64) * 7
		                        : golomb_ms[mi - 104];
		item it = mk_golomb(0, m);
		for (uint64_t p = 0; p < P2(kb); p++) {
			size_t lead = (size_t)test_rng_below(&rng, 40);
			test_bitvec b = {0};
			test_bv_put(&b, test_rng_next(&rng), (unsigned)lead);
			test_bv_put(&b, p, kb);
			test_bv_put(&b, test_rng_next(&rng), 64 - kb);
			size_t plen = b.n;
			if (test_rng_below(&rng, 4) == 0)
				plen = lead + (size_t)test_rng_below(&rng, 17);
			unsigned s = (unsigned)test_rng_below(&rng, 8);
			const uint8_t *base = place(&a, &rng, &b, 0, plen, s);
			kvs_bitreader r;
			kvs_br_init(&r, base, s, plen);
			check_raw(&r, &b, 0, lead, &rng, "lead");
			check_dec(&r, &b, 0, plen, lead, &it, "table entry");
			test_bv_free(&b);
		}
	}
	arena_free(&a);
}

/* ---- fixed widths
 * ------------------------------------------------------------ */

static void test_fixed(void **state)
{
	(void)state;
	test_rng rng = test_rng_for(g_seed, 30);
	arena a;
	arena_init(&a, 64);
	kvs_bitwriter w;
	kvs_bw_init(&w);
	uint64_t expect_bits = 0;
	for (unsigned width = 0; width <= 64; width++) {
		uint64_t max = width == 64 ? U64MAX : P2(width) - 1;
		CHECK_ST(kvs_put_fixed(&w, max, width), KVS_OK,
		         "2^%u - 1 in "
		         "%u bits",
		         width, width);
		CHECK_ST(kvs_put_fixed(&w, 0, width), KVS_OK, "0 in %u bits",
		         width);
		expect_bits += 2 * width;
		if (width < 64) {
			CHECK_ST(kvs_put_fixed(&w, max + 1, width), KVS_E_RANGE,
			         "2^%u in %u bits", width, width);
			CHECK_ST(kvs_put_fixed(&w, U64MAX, width), KVS_E_RANGE,
			         "2^64 - 1 in %u bits", width);
			CHECK_ST(kvs_put_fixed(&w, max | P2(63), width),
			         KVS_E_RANGE, "high bit in %u bits", width);
		}
		CHECK(kvs_bw_bit_length(&w) == expect_bits,
		      "width %u: "
		      "bit length %llu, expected %llu",
		      width, ULL(kvs_bw_bit_length(&w)), ULL(expect_bits));
	}
	CHECK_ST(kvs_put_fixed(&w, 0, 65), KVS_E_RANGE, "width 65");
	CHECK_ST(kvs_put_fixed(&w, 0, 1u << 31), KVS_E_RANGE, "width 2^31");
	CHECK(kvs_bw_bit_length(&w) == expect_bits, "bad width wrote bits");
	kvs_bw_free(&w);

	for (unsigned width = 0; width <= 64; width++) {
		uint64_t vs[] = {0, 1, width ? P2(width - 1) : 0,
		                 width == 64 ? U64MAX : P2(width) - 1,
		                 test_rng_next(&rng)};
		for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++) {
			uint64_t v =
			    width == 64 ? vs[i] : vs[i] & (P2(width) - 1);
			item it = mk_fixed(v, width, 0);
			if (width == 0)
				continue; /* a 0-bit code cannot be cut */
			check_item_full(&it, &a, &rng, 1);
		}
	}
	arena_free(&a);
}

/* ---- streams
 * ------------------------------------------------------------------- */

/*
 * Encodes items with the library (growable writer), compares with the
 * naive bits, then decodes them back at a random start offset with the
 * payload against a guard page, checking each value and position; finally
 * the last code cut short and reads past the end.
 */
static void check_stream(const item *items, size_t n, test_rng *rng, arena *a,
                         const char *what)
{
	test_bitvec nb = {0};
	size_t *off = malloc((n + 1) * sizeof *off);
	assert_non_null(off);
	kvs_bitwriter w;
	kvs_bw_init(&w);
	for (size_t i = 0; i < n; i++) {
		char d[96];
		off[i] = nb.n;
		item_desc(&items[i], d, sizeof d);
		CHECK(naive_enc(&nb, &items[i]), "%s: item %zu not encodable",
		      what, i);
		CHECK_ST(lib_enc(&w, &items[i]), KVS_OK, "%s: item %zu: %s",
		         what, i, d);
		CHECK(kvs_bw_bit_length(&w) == nb.n,
		      "%s: after item %zu (%s)"
		      " the writer has %llu bits, expected %zu",
		      what, i, d, ULL(kvs_bw_bit_length(&w)), nb.n);
	}
	off[n] = nb.n;
	const uint8_t *data;
	size_t len;
	CHECK_ST(kvs_bw_flush(&w, &data, &len), KVS_OK, "flush");
	CHECK(len == (nb.n + 7) / 8, "%s: flushed %zu bytes for %zu bits", what,
	      len, nb.n);
	size_t diff = bv_first_diff_bytes(&nb, data, nb.n);
	if (diff != nb.n) {
		size_t i = 0;
		while (off[i + 1] <= diff)
			i++;
		char d[96];
		item_desc(&items[i], d, sizeof d);
		print_error("%s: stream bit %zu differs, in item %zu (%s) at "
		            "its bit %zu\n",
		            what, diff, i, d, diff - off[i]);
		fail();
	}
	for (size_t i = (nb.n + 7) / 8 * 8 - 1; i >= nb.n && i != (size_t)-1;
	     i--)
		CHECK(test_msb_bit_at(data, i) == 0, "%s: padding bit not zero",
		      what);
	kvs_bw_free(&w);

	/* Decode the whole stream at a random offset, against the guard. */
	unsigned s = (unsigned)test_rng_below(rng, 8);
	const uint8_t *base = place(a, rng, &nb, 0, nb.n, s);
	kvs_bitreader r;
	kvs_br_init(&r, base, s, nb.n);
	for (size_t i = 0; i < n; i++) {
		nres got = check_dec(&r, &nb, 0, nb.n, off[i], &items[i], what);
		CHECK(got.st == KVS_OK && got.v == item_value(&items[i]),
		      "%s: naive oracle disagrees with item %zu", what, i);
	}
	uint64_t v;
	CHECK_ST(kvs_br_read(&r, 1, &v), KVS_E_TRUNCATED, "read past end");
	for (size_t i = 0; i < n && i < 8; i++) {
		int empty = items[i].kind >= C_FIXED && items[i].k == 0;
		CHECK_ST(lib_dec(&r, &items[i], &v),
		         empty ? KVS_OK : KVS_E_TRUNCATED,
		         "%s: %s decode at the end", what,
		         kind_name(items[i].kind));
		CHECK(kvs_br_remaining(&r) == 0, "moved at the end");
	}

	/* The last code cut at a random bit, then seeks back to items. */
	if (n > 0 && off[n] - off[n - 1] > 1) {
		size_t cut =
		    off[n - 1] + 1 +
		    (size_t)test_rng_below(rng, off[n] - off[n - 1] - 1);
		base = place(a, rng, &nb, 0, cut, s);
		kvs_br_init(&r, base, s, cut);
		CHECK_ST(kvs_br_seek(&r, off[n - 1]), KVS_OK, "seek");
		check_dec(&r, &nb, 0, cut, off[n - 1], &items[n - 1], what);
		for (int j = 0; j < 16; j++) {
			size_t i = (size_t)test_rng_below(rng, n - 1 + 1);
			CHECK_ST(kvs_br_seek(&r, off[i]), KVS_OK, "seek");
			check_dec(&r, &nb, 0, cut, off[i], &items[i], what);
		}
	}
	free(off);
	test_bv_free(&nb);
}

static void test_mixed_streams(void **state)
{
	(void)state;
	test_rng rng = test_rng_for(g_seed, 40);
	arena a;
	arena_init(&a, 1 << 21);
	enum { N = 2000 };
	item *items = malloc(N * sizeof *items);
	assert_non_null(items);
	for (int rep = 0; rep < 60; rep++) {
		size_t n = rep < 30 ? (size_t)test_rng_below(&rng, 40) : N;
		for (size_t i = 0; i < n; i++)
			items[i] = rand_item(&rng);
		check_stream(items, n, &rng, &a, "mixed");
	}
	free(items);
	arena_free(&a);
}

/*
 * The guard-page proof for the decoders. For start offsets 0..7 and
 * payload lengths 0..320 plus longer ones around the 64-bit refill
 * boundaries (so every end alignment), a payload made of whole codes
 * written by the library and then the beginning of one more code sits with
 * its last byte against a PROT_NONE page. Every code decodes, the cut one
 * gives KVS_E_TRUNCATED, every decoder past the end gives
 * KVS_E_TRUNCATED, and seeks back to each code decode it again.
 */
static void test_guard_codes(void **state)
{
	(void)state;
	test_rng rng = test_rng_for(g_seed, 41);
	arena a;
	arena_init(&a, 4096);
	static const size_t extra[] = {447,  448,  449,  511,  512, 513,
	                               1000, 1023, 1024, 1025, 4000};
	size_t nlens = 321 + sizeof extra / sizeof extra[0];
	item items[4096];
	size_t off[4097];
	for (unsigned s = 0; s < 8; s++) {
		for (size_t li = 0; li < nlens; li++) {
			size_t plen = li < 321 ? li : extra[li - 321];
			for (int rep = 0; rep < 3; rep++) {
				/* Library-written codes while they fit. */
				kvs_bitwriter w;
				kvs_bw_init(&w);
				size_t n = 0;
				while (kvs_bw_bit_length(&w) <= plen) {
					item it = rand_item(&rng);
					if (rep == 1 && it.kind >= C_FIXED)
						it = mk_eg(
						    test_rng_wide(&rng),
						    (unsigned)test_rng_below(
						        &rng, 3));
					CHECK(n + 1 < sizeof items /
					                  sizeof items[0],
					      "too many items");
					items[n] = it;
					off[n] = (size_t)kvs_bw_bit_length(&w);
					CHECK_ST(lib_enc(&w, &it), KVS_OK,
					         "enc");
					n++;
				}
				off[n] = (size_t)kvs_bw_bit_length(&w);
				const uint8_t *data;
				size_t len;
				CHECK_ST(kvs_bw_flush(&w, &data, &len), KVS_OK,
				         "flush");
				test_bitvec b = {0};
				for (size_t i = 0; i < plen; i++)
					test_bv_push(&b,
					             test_msb_bit_at(data, i));
				kvs_bw_free(&w);
				const uint8_t *base =
				    place(&a, &rng, &b, 0, plen, s);
				kvs_bitreader r;
				kvs_br_init(&r, base, s, plen);
				/* Items 0..n-2 are whole, n-1 is cut. */
				for (size_t i = 0; i < n; i++) {
					nres nr =
					    check_dec(&r, &b, 0, plen, off[i],
					              &items[i], "guard");
					if (i + 1 < n)
						CHECK(nr.st == KVS_OK &&
						          nr.v ==
						              item_value(
						                  &items[i]),
						      "guard: item %zu", i);
					else
						CHECK(nr.st == KVS_E_TRUNCATED,
						      "guard: last item");
				}
				check_raw(&r, &b, off[n - 1], plen - off[n - 1],
				          &rng, "guard tail");
				for (int j = 0; j < 4; j++) {
					item it = rand_item(&rng);
					uint64_t v;
					kvs_status st = lib_dec(&r, &it, &v);
					CHECK(st == (it.kind >= C_FIXED &&
					                     it.k == 0
					                 ? KVS_OK
					                 : KVS_E_TRUNCATED),
					      "decode at the end: %s",
					      test_status_name(st));
					CHECK(kvs_br_position(&r) == plen,
					      "moved at the end");
				}
				for (int j = 0; j < 8 && n > 1; j++) {
					size_t i =
					    (size_t)test_rng_below(&rng, n);
					CHECK_ST(kvs_br_seek(&r, off[i]),
					         KVS_OK, "seek");
					check_dec(&r, &b, 0, plen, off[i],
					          &items[i], "guard seek");
				}
				test_bv_free(&b);
			}
		}
	}
	arena_free(&a);
}

/*
 * Random, mostly malformed bit strings built from runs of zeros around
 * the critical lengths, ones and random bits, placed against a guard page.
 * At each step a random decoder runs; library and naive decoders must give
 * the same status and value; after an error the position is unchanged and
 * raw reads go on (which also steps over the bad code).
 */
static void test_fuzz_decoders(void **state)
{
	(void)state;
	test_rng rng = test_rng_for(g_seed, 42);
	arena a;
	arena_init(&a, (3 * MAXQ) / 8 + 4096);
	for (int iter = 0; iter < 20000; iter++) {
		test_bitvec b = {0};
		unsigned k = (unsigned)test_rng_below(&rng, 64);
		uint64_t m = rand_m(&rng);
		int allow_long = iter % 50 == 0; /* one run near 2^16 */
		size_t nseg = 1 + (size_t)test_rng_below(&rng, 12);
		for (size_t sgi = 0; sgi < nseg; sgi++) {
			switch (test_rng_below(&rng, 8)) {
			case 0:
			case 1: { /* zeros around 64 - k */
				uint64_t z = 64 - k;
				bv_zeros(&b, z - 1 + test_rng_below(&rng, 3));
				break;
			}
			case 2:
				bv_zeros(&b, test_rng_below(&rng, 70));
				break;
			case 3:
				if (allow_long) {
					bv_zeros(&b,
					         MAXQ - 1 +
					             test_rng_below(&rng, 3));
					allow_long = 0;
				} else
					bv_zeros(&b, test_rng_below(&rng, 4));
				break;
			case 4:
				test_bv_push(&b, 1);
				break;
			case 5:
				test_bv_put(&b, test_rng_next(&rng),
				            (unsigned)test_rng_below(&rng, 65));
				break;
			case 6: { /* x near 2^k after a one */
				test_bv_push(&b, 1);
				uint64_t x =
				    P2(k) - 1 + test_rng_below(&rng, 2);
				test_bv_put(&b, x, 64);
				break;
			}
			default: { /* a valid code */
				item it =
				    test_rng_below(&rng, 2)
				        ? mk_eg(test_rng_wide(&rng), k)
				        : mk_golomb(rand_golomb_value(&rng, m),
				                    m);
				if (it.kind == C_GOLOMB && it.v / m > 300)
					it.v = m - 1;
				naive_enc(&b, &it);
				break;
			}
			}
		}
		unsigned s = (unsigned)test_rng_below(&rng, 8);
		const uint8_t *base = place(&a, &rng, &b, 0, b.n, s);
		kvs_bitreader r;
		kvs_br_init(&r, base, s, b.n);
		size_t pos = 0;
		item eg = mk_eg(0, k), gl = mk_golomb(0, m);
		for (int steps = 0; steps < 200; steps++) {
			unsigned c = (unsigned)test_rng_below(&rng, 5);
			if (c == 4 || pos == b.n) {
				size_t left = b.n - pos;
				size_t n =
				    left < 8 ? left
				             : (size_t)test_rng_below(&rng, 66);
				if (n > left)
					n = left;
				check_raw(&r, &b, pos, n, &rng, "fuzz");
				pos += n;
				if (pos == b.n)
					break;
				continue;
			}
			item *it = c < 2 ? &eg : &gl;
			nres nr = check_dec(&r, &b, 0, b.n, pos, it, "fuzz");
			if (nr.st == KVS_OK)
				pos += nr.len;
		}
		test_bv_free(&b);
	}
	arena_free(&a);
}

/* ---- region writers: a code that does not fit is not written at all
 * ---------- */

static void test_region_codes_atomic(void **state)
{
	(void)state;
	test_rng rng = test_rng_for(g_seed, 50);
	for (int iter = 0; iter < 3000; iter++) {
		size_t cap = (size_t)test_rng_below(&rng, 40);
		guarded g = {0};
		assert_int_equal(guarded_alloc(&g, cap + 1), 0);
		uint8_t *region = g.data + 1; /* guard right after the region */
		g.data[0] = 0xA5;
		kvs_bitwriter w;
		kvs_bw_init_region(&w, region, cap);
		test_bitvec acc = {0};
		size_t rejected = 0;
		for (int i = 0; i < 60; i++) {
			item it;
			if (test_rng_below(&rng, 3) == 0)
				it = mk_eg(U64MAX - test_rng_below(&rng, 4),
				           (unsigned)test_rng_below(&rng, 3));
			else
				it = rand_item(&rng);
			if (it.kind == C_GOLOMB && it.v / it.m > 500)
				it.v %= it.m;
			test_bitvec code = {0};
			naive_enc(&code, &it);
			uint64_t before = kvs_bw_bit_length(&w);
			kvs_status st = lib_enc(&w, &it);
			if (st == KVS_E_NOSPACE) {
				char d[96];
				item_desc(&it, d, sizeof d);
				rejected++;
				CHECK(acc.n + code.n > cap * 8,
				      "region of %zu "
				      "bytes holding %zu bits rejected %s "
				      "(%zu bits) that fits",
				      cap, acc.n, d, code.n);
				CHECK(kvs_bw_bit_length(&w) == before,
				      "region "
				      "of %zu bytes holding %llu bits: failed "
				      "%s (%zu bits) changed the length to "
				      "%llu",
				      cap, ULL(before), d, code.n,
				      ULL(kvs_bw_bit_length(&w)));
			} else {
				CHECK_ST(st, KVS_OK, "region encode");
				for (size_t j = 0; j < code.n; j++)
					test_bv_push(&acc, code.bit[j]);
				CHECK(kvs_bw_bit_length(&w) == acc.n,
				      "length %llu, expected %zu",
				      ULL(kvs_bw_bit_length(&w)), acc.n);
			}
			test_bv_free(&code);
		}
		const uint8_t *data;
		size_t len;
		kvs_status st = kvs_bw_flush(&w, &data, &len);
		if (st == KVS_OK) {
			CHECK(len == (acc.n + 7) / 8 && len <= cap, "len %zu",
			      len);
			size_t d = bv_first_diff_bytes(&acc, data, acc.n);
			CHECK(d == acc.n,
			      "region stream differs at bit %zu "
			      "of %zu after %zu rejected codes",
			      d, acc.n, rejected);
		} else {
			CHECK_ST(st, KVS_E_NOSPACE, "flush");
			CHECK((acc.n + 7) / 8 > cap,
			      "flush of %zu bits into "
			      "%zu bytes failed",
			      acc.n, cap);
		}
		CHECK(g.data[0] == 0xA5, "wrote before the region");
		test_bv_free(&acc);
		guarded_free(&g);
	}
}

/* ---- varints
 * ---------------------------------------------------------------------- */

static unsigned naive_varint(uint8_t *out, uint64_t v)
{
	unsigned n = 0;
	do {
		uint8_t byte = v & 0x7F;
		v >>= 7;
		if (v != 0)
			byte |= 0x80;
		out[n++] = byte;
	} while (v != 0);
	return n;
}

/* The status a varint decoder must give for p[0..n) (nlen = bytes used). */
static kvs_status naive_varint_get(const uint8_t *p, size_t n, uint64_t *out,
                                   size_t *nlen)
{
	uint64_t v = 0;
	for (size_t i = 0; i < 10; i++) {
		if (i == n)
			return KVS_E_TRUNCATED;
		uint8_t byte = p[i];
		if (i == 9 && byte > 1)
			return KVS_E_OVERFLOW;
		v |= (uint64_t)(byte & 0x7F) << (7 * i);
		if (!(byte & 0x80)) {
			if (i > 0 && byte == 0)
				return KVS_E_OVERLONG;
			*out = v;
			*nlen = i + 1;
			return KVS_OK;
		}
	}
	return KVS_E_OVERFLOW; /* unreachable: i == 9 returns above */
}

/* Decodes bytes[0..n) placed against the guard page, from *p; checks the
 * status, value and pointer against the naive decoder. */
static kvs_status check_varint_at(arena *a, const uint8_t *bytes, size_t n,
                                  const char *what)
{
	uint8_t *p0 = a->end - n;
	memcpy(p0, bytes, n);
	const uint8_t *p = p0;
	uint64_t got = 0, want = 0;
	size_t wl = 0;
	kvs_status ws = naive_varint_get(bytes, n, &want, &wl);
	kvs_status st = kvs_varint_get(&p, a->end, &got);
	if (st != ws) {
		print_error("%s: varint bytes", what);
		for (size_t i = 0; i < n && i < 12; i++)
			print_error(" %02x", bytes[i]);
		print_error(" (%zu bytes, end after them): got %s, expected "
		            "%s\n",
		            n, test_status_name(st), test_status_name(ws));
		fail();
	}
	if (st == KVS_OK) {
		CHECK(got == want, "%s: value 0x%llx, expected 0x%llx", what,
		      ULL(got), ULL(want));
		CHECK(p == p0 + wl, "%s: advanced %td bytes, expected %zu",
		      what, p - p0, wl);
	} else {
		CHECK(p == p0, "%s: failed varint decode moved *p by %td", what,
		      p - p0);
	}
	return st;
}

static void test_varint_values(void **state)
{
	(void)state;
	test_rng rng = test_rng_for(g_seed, 60);
	arena a;
	arena_init(&a, 64);
	uint64_t vals[512];
	size_t n = boundary_values(vals);
	for (unsigned j = 1; j <= 9; j++) { /* 2^(7j) - 1, 2^(7j) */
		vals[n++] = P2(7 * j) - 1;
		vals[n++] = P2(7 * j);
		vals[n++] = P2(7 * j) + 1;
	}
	for (int i = 0; i < 200; i++)
		vals[n++] = test_rng_wide(&rng);
	for (size_t i = 0; i < n; i++) {
		uint64_t v = vals[i];
		uint8_t want[16], got[16];
		memset(got, 0xCC, sizeof got);
		unsigned wl = naive_varint(want, v);
		unsigned expected_len = v == 0 ? 1 : (naive_bitlen(v) + 6) / 7;
		CHECK(wl == expected_len, "naive varint length");
		CHECK(kvs_varint_length(v) == wl,
		      "kvs_varint_length(0x%llx) = "
		      "%u, expected %u",
		      ULL(v), kvs_varint_length(v), wl);
		unsigned gl = kvs_varint_put(got, v);
		CHECK(gl == wl,
		      "kvs_varint_put(0x%llx) wrote %u bytes, "
		      "expected %u",
		      ULL(v), gl, wl);
		CHECK(memcmp(got, want, wl) == 0,
		      "kvs_varint_put(0x%llx): "
		      "wrong bytes",
		      ULL(v));
		CHECK(got[wl] == 0xCC,
		      "kvs_varint_put(0x%llx) wrote past its "
		      "length",
		      ULL(v));
		/* Decode whole, and cut at every byte. */
		CHECK_ST(check_varint_at(&a, want, wl, "whole"), KVS_OK,
		         "0x%llx", ULL(v));
		for (unsigned t = 0; t < wl; t++)
			CHECK_ST(check_varint_at(&a, want, t, "cut"),
			         KVS_E_TRUNCATED, "0x%llx cut to %u bytes",
			         ULL(v), t);
	}
	/* Every length 1..10 and the extremes by hand. */
	static const struct {
		uint64_t v;
		unsigned len;
	} lens[] = {{0, 1},       {0x7F, 1},   {0x80, 2},   {0x3FFF, 2},
	            {0x4000, 3},  {P2(21), 4}, {P2(28), 5}, {P2(35), 6},
	            {P2(42), 7},  {P2(49), 8}, {P2(56), 9}, {P2(63) - 1, 9},
	            {P2(63), 10}, {U64MAX, 10}};
	for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
		CHECK(kvs_varint_length(lens[i].v) == lens[i].len,
		      "kvs_varint_length(0x%llx) = %u, expected %u",
		      ULL(lens[i].v), kvs_varint_length(lens[i].v),
		      lens[i].len);
	uint8_t buf[16];
	CHECK(kvs_varint_put(buf, U64MAX) == 10, "2^64 - 1 length");
	static const uint8_t max[10] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
	                                0xFF, 0xFF, 0xFF, 0xFF, 0x01};
	assert_memory_equal(buf, max, 10);
	static const uint8_t v300[2] = {0xAC, 0x02};
	CHECK(kvs_varint_put(buf, 300) == 2, "300 length");
	assert_memory_equal(buf, v300, 2);
	/* Empty input. */
	const uint8_t *p = a.end;
	uint64_t v;
	CHECK_ST(kvs_varint_get(&p, a.end, &v), KVS_E_TRUNCATED, "empty");
	CHECK(p == a.end, "moved");
	arena_free(&a);
}

static void test_varint_errors(void **state)
{
	(void)state;
	arena a;
	arena_init(&a, 64);
	uint8_t b[16];
	/* Overlong: a final 0x00 after 1..9 bytes with continuation. */
	for (unsigned n = 2; n <= 10; n++) {
		for (int variant = 0; variant < 2; variant++) {
			for (unsigned i = 0; i + 1 < n; i++)
				b[i] = variant ? 0xFF : 0x80;
			b[n - 1] = 0x00;
			CHECK_ST(check_varint_at(&a, b, n, "overlong"),
			         KVS_E_OVERLONG, "final zero after %u bytes",
			         n - 1);
			b[n] = 0x05; /* more bytes after do not matter */
			CHECK_ST(check_varint_at(&a, b, n + 1, "overlong+"),
			         KVS_E_OVERLONG, "final zero, %u bytes", n);
		}
	}
	/* Overflow: 10th byte > 1, or with continuation. */
	static const uint8_t tenth[] = {0x02, 0x03, 0x40, 0x7F,
	                                0x80, 0x81, 0xFF};
	for (size_t t = 0; t < sizeof tenth; t++) {
		for (int variant = 0; variant < 2; variant++) {
			for (unsigned i = 0; i < 9; i++)
				b[i] = variant ? 0xFF : 0x80;
			b[9] = tenth[t];
			b[10] = 0x01;
			b[11] = 0x00;
			CHECK_ST(check_varint_at(&a, b, 10, "overflow"),
			         KVS_E_OVERFLOW, "10th byte %02x", tenth[t]);
			CHECK_ST(check_varint_at(&a, b, 12, "overflow+"),
			         KVS_E_OVERFLOW, "10th byte %02x", tenth[t]);
		}
	}
	/* Largest values that fit: 10th byte 0x01. */
	for (unsigned i = 0; i < 9; i++)
		b[i] = 0x80;
	b[9] = 0x01;
	CHECK_ST(check_varint_at(&a, b, 10, "2^63"), KVS_OK, "2^63");
	/* Truncated: every prefix of 9 and 10 continuation bytes. */
	memset(b, 0xFF, sizeof b);
	for (unsigned n = 0; n <= 9; n++)
		CHECK_ST(check_varint_at(&a, b, n, "cut"), KVS_E_TRUNCATED,
		         "%u continuation bytes", n);
	CHECK_ST(check_varint_at(&a, b, 10, "10 cont"), KVS_E_OVERFLOW,
	         "10 continuation bytes");
	/* A valid single zero byte is fine; 0x80 0x01 is 128. */
	b[0] = 0x00;
	CHECK_ST(check_varint_at(&a, b, 1, "zero"), KVS_OK, "0x00");
	b[0] = 0x80;
	b[1] = 0x01;
	CHECK_ST(check_varint_at(&a, b, 2, "128"), KVS_OK, "80 01");
	arena_free(&a);
}

/* A buffer of random and valid varints decoded in sequence vs the naive
 * decoder, against the guard; on error step one byte and go on. */
static void test_varint_fuzz(void **state)
{
	(void)state;
	test_rng rng = test_rng_for(g_seed, 61);
	arena a;
	arena_init(&a, 4096);
	for (int iter = 0; iter < 3000; iter++) {
		uint8_t buf[512];
		size_t n = 0;
		size_t target = (size_t)test_rng_below(&rng, 400);
		while (n < target) {
			switch (test_rng_below(&rng, 5)) {
			case 0:
				n += naive_varint(buf + n, test_rng_wide(&rng));
				break;
			case 1: { /* continuation bytes */
				size_t c = (size_t)test_rng_below(&rng, 12);
				for (size_t i = 0; i < c; i++)
					buf[n++] =
					    (uint8_t)(0x80 |
					              test_rng_below(&rng, 2) *
					                  0x7F);
				break;
			}
			case 2:
				buf[n++] = (uint8_t)test_rng_below(&rng, 3);
				break;
			default:
				buf[n++] = (uint8_t)test_rng_next(&rng);
				break;
			}
		}
		uint8_t *p0 = a.end - n;
		memcpy(p0, buf, n);
		const uint8_t *p = p0;
		while (p < a.end) {
			size_t at = (size_t)(p - p0);
			uint64_t got = 0, want = 0;
			size_t wl = 0;
			kvs_status ws =
			    naive_varint_get(buf + at, n - at, &want, &wl);
			kvs_status st = kvs_varint_get(&p, a.end, &got);
			CHECK_ST(st, ws,
			         "varint at byte %zu of %zu (first "
			         "byte %02x)",
			         at, n, buf[at]);
			if (st == KVS_OK) {
				CHECK(got == want && p == p0 + at + wl,
				      "varint at %zu: value/advance", at);
			} else {
				CHECK(p == p0 + at, "failed varint moved *p");
				p++;
			}
		}
	}
	arena_free(&a);
}

/* ---- the Golomb decoder's short-code select ------------------------------ */

/*
 * kvs_golomb_short_ (a compare, a conditional move and a subtract-with-
 * borrow on x86-64) and its portable version, against the definition:
 * where x < y the length loses one and the bias is the short one, otherwise
 * both are unchanged. Operands equal, adjacent, at the edges of the range
 * and random; lengths and biases random.
 */
static void test_golomb_short(void **state)
{
	(void)state;
	test_rng rng = test_rng_for(g_seed, 60);
	static const uint64_t edges[] = {0,      1,          P2(63) - 1,
	                                 P2(63), U64MAX - 1, U64MAX};
	size_t nedges = sizeof edges / sizeof edges[0];
	for (int iter = 0; iter < 200000; iter++) {
		uint64_t x = iter % 3 ? test_rng_wide(&rng)
		                      : edges[test_rng_below(&rng, nedges)];
		uint64_t y;
		switch (iter % 4) {
		case 0:
			y = x;
			break;
		case 1:
			y = x + 1;
			break;
		case 2:
			y = x - 1;
			break;
		default:
			y = iter % 3 ? test_rng_wide(&rng)
			             : edges[test_rng_below(&rng, nedges)];
		}
		uint64_t len = 1 + test_rng_below(&rng, 64);
		uint64_t bias = test_rng_next(&rng), alt = test_rng_next(&rng);
		uint64_t fast_len = len, fast_bias = bias;
		uint64_t port_len = len, port_bias = bias;
		kvs_golomb_short_(x, y, &fast_len, &fast_bias, alt);
		kvs_golomb_short_portable_(x, y, &port_len, &port_bias, alt);
		uint64_t want_len = x < y ? len - 1 : len;
		uint64_t want_bias = x < y ? alt : bias;
		CHECK(fast_len == want_len && fast_bias == want_bias &&
		          port_len == want_len && port_bias == want_bias,
		      "short select for x = 0x%llx, y = 0x%llx, length %llu: "
		      "got %llu, 0x%llx (portable %llu, 0x%llx), expected "
		      "%llu, 0x%llx",
		      ULL(x), ULL(y), ULL(len), ULL(fast_len), ULL(fast_bias),
		      ULL(port_len), ULL(port_bias), ULL(want_len),
		      ULL(want_bias));
	}
}

int main(void)
{
	g_seed = test_seed_from_env("test_codes", g_seed);
	test_filter_from_env();
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_eg_known_vectors),
	    cmocka_unit_test(test_eg_boundaries),
	    cmocka_unit_test(test_eg_random),
	    cmocka_unit_test(test_eg_errors),
	    EG_WIDE(test_eg_known_vectors),
	    EG_WIDE(test_eg_boundaries),
	    EG_WIDE(test_eg_random),
	    EG_WIDE(test_eg_errors),
	    EG_WIDE(test_guard_codes),
	    EG_WIDE(test_mixed_streams),
	    EG_WIDE(test_fuzz_decoders),
	    cmocka_unit_test(test_golomb_known_vectors),
	    cmocka_unit_test(test_golomb_boundaries),
	    cmocka_unit_test(test_golomb_random),
	    cmocka_unit_test(test_golomb_errors),
	    BY_TABLE(test_golomb_table_entries),
	    BY_TABLE(test_golomb_known_vectors),
	    BY_TABLE(test_golomb_boundaries),
	    BY_TABLE(test_golomb_random),
	    BY_TABLE(test_golomb_errors),
	    BY_TABLE(test_guard_codes),
	    cmocka_unit_test(test_golomb_short),
	    cmocka_unit_test(test_fixed),
	    cmocka_unit_test(test_mixed_streams),
	    cmocka_unit_test(test_guard_codes),
	    cmocka_unit_test(test_fuzz_decoders),
	    cmocka_unit_test(test_region_codes_atomic),
	    cmocka_unit_test(test_varint_values),
	    cmocka_unit_test(test_varint_errors),
	    cmocka_unit_test(test_varint_fuzz),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
