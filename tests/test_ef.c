/*
 * test_ef.c — Elias-Fano sequences (kvseg/ef.h) against an independent
 * oracle.
 *
 * What it proves, for the empty sequence, single elements (0, 1, 2^64-1),
 * runs of equal values, dense runs, sparse and clustered sequences, values
 * at the top of the 64-bit universe, random sequences with duplicates,
 * every low-bit width 0..63, counts and zero counts around the 256-entry
 * sample boundaries, and sizes up to 2^20 elements:
 *   - kvsi_ef_low_bits and kvsi_ef_size follow the documented formula and
 *     layout; kvsi_ef_build and the streaming builder write byte-identical
 *     output, which is exactly the documented layout (header, low array,
 *     upper array, one samples, zero samples; zero padding);
 *   - kvsi_ef_open and kvsi_ef_validate accept it; kvsi_ef_get,
 *     kvsi_ef_next_geq and the cursor (seek + next) answer as the plain
 *     sorted array does, both on the portable paths and on the
 *     accelerated ones;
 *   - the builder reports order, range, count, max and space errors;
 *   - kvsi_ef_open rejects every wrong length and every changed header
 *     field (or, for count/max changes that keep the size, validate does);
 *     kvsi_ef_validate rejects every flipped upper bit, every changed sample
 *     and any nonzero padding bit, and accepts a flipped low bit exactly
 *     when the resulting sequence is still a valid one;
 *   - random byte/bit mutations of valid serializations, placed against a
 *     PROT_NONE page (after or before), never make get / next_geq / the
 *     cursor fault or read outside the data once kvsi_ef_open has accepted
 *     them, even without kvsi_ef_validate; and whatever kvsi_ef_validate
 *     accepts is a canonical encoding whose queries agree with each other;
 *   - the serialized form works at every address alignment mod 8.
 *
 * Oracle: the plain sorted array, a binary-search lower_bound, the low-bit
 * and layout formulas of testutil.h (test_ef_ref_low_bits,
 * test_ef_ref_layout), and ref_encode(), a bit-at-a-time serializer
 * written here; all from the format description. The code under test never
 * computes an expected value.
 *
 * Assumption beyond ef.h (flagged in the report): a push that fails leaves
 * the builder as it was, so a correct push may follow.
 *
 * The PRNG seed is fixed and printed; failures print the sequence, the mode
 * (portable / accelerated) and the index or probe value.
 */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kvseg/ef.h"
#include "testutil.h"

#define SEED 0xEF5EEDull

static test_rng g_rng;
static const char *g_seq = "";  /* the sequence under test, for messages */
static const char *g_mode = ""; /* "portable" or "accelerated" */

#define EXPECT_NOT_OK(got, ...)                                                \
	do {                                                                   \
		if ((got) == KVS_OK) {                                         \
			print_error("got KVS_OK, expected an error: ");        \
			FAILF(__VA_ARGS__);                                    \
		}                                                              \
	} while (0)

/* ---- the oracle ---------------------------------------------------------- */

static void set_bit(uint8_t *base, uint64_t bit)
{
	base[bit >> 3] |= (uint8_t)(1u << (bit & 7));
}

static void put_le64(uint8_t *p, uint64_t v)
{
	for (int k = 0; k < 8; k++)
		p[k] = (uint8_t)(v >> (8 * k));
}

/* Serializes v[0..n) bit by bit into out (test_ef_ref_layout(n, max).size
 * bytes). */
static void ref_encode(const uint64_t *v, uint64_t n, uint8_t *out)
{
	uint64_t max = n ? v[n - 1] : 0;
	test_ef_layout L = test_ef_ref_layout(n, max);
	memset(out, 0, L.size);
	put_le64(out, n);
	put_le64(out + 8, max);
	out[16] = KVS_EF_VERSION;
	out[17] = (uint8_t)L.l;
	out[18] = KVS_EF_SAMPLE_SHIFT;
	uint8_t *low = out + L.low_off, *up = out + L.upper_off;
	for (uint64_t i = 0; i < n; i++) {
		for (unsigned b = 0; b < L.l; b++)
			if ((v[i] >> b) & 1)
				set_bit(low, i * L.l + b);
		set_bit(up, (v[i] >> L.l) + i);
	}
	uint64_t ones = 0, zeros = 0;
	for (uint64_t pos = 0; pos < L.upper_bits; pos++) {
		if (test_lsb_bit_at(up, pos)) {
			if (ones % 256 == 0)
				put_le64(out + L.ones_off + 8 * (ones / 256),
				         pos);
			ones++;
		} else {
			if (zeros % 256 == 0)
				put_le64(out + L.zeros_off + 8 * (zeros / 256),
				         pos);
			zeros++;
		}
	}
}

static uint64_t lower_bound_ref(const uint64_t *v, uint64_t n, uint64_t x)
{
	uint64_t lo = 0, hi = n;
	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;
		if (v[mid] < x)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* True when v[0..n) is a sequence the format can hold with max v[n-1]. */
static bool is_monotone(const uint64_t *v, uint64_t n)
{
	for (uint64_t i = 1; i < n; i++)
		if (v[i] < v[i - 1])
			return false;
	return true;
}

/* The first differing byte, named by section, for layout mismatches. */
static const char *section_of(const test_ef_layout *L, size_t off)
{
	if (off < 16)
		return off < 8 ? "header count" : "header max";
	if (off < KVS_EF_HEADER_BYTES)
		return "header version/low_bits/sample_shift/reserved";
	if (off < L->upper_off)
		return "low array";
	if (off < L->ones_off)
		return "upper array";
	if (off < L->zeros_off)
		return "one samples";
	return "zero samples";
}

/* A heap copy of exactly n values (ASan sees any read outside it). */
static uint64_t *heap_copy(const uint64_t *v, uint64_t n)
{
	uint64_t *c = malloc((size_t)(n ? n : 1) * sizeof *c);
	assert_non_null(c);
	if (n)
		memcpy(c, v, (size_t)n * sizeof *c);
	return c;
}

/* ---- queries against the array ------------------------------------------- */

static void probe_next_geq(const kvsi_ef *ef, const uint64_t *v, uint64_t n,
                           uint64_t x, bool null_value)
{
	uint64_t want = lower_bound_ref(v, n, x);
	uint64_t val = 0xDEADBEEFDEADBEEFull;
	uint64_t got = kvsi_ef_next_geq(ef, x, null_value ? NULL : &val);
	EXPECT_U64(got, want,
	           "kvsi_ef_next_geq(x = %" PRIu64 " / 0x%" PRIx64
	           ") index (count %" PRIu64 ")",
	           x, x, n);
	if (!null_value && want < n)
		EXPECT_U64(val, v[want],
		           "kvsi_ef_next_geq(x = %" PRIu64
		           ") value at index %" PRIu64,
		           x, want);
}

/* Walks a cursor from index start, at most max_steps steps (or to the end
 * when max_steps is U64MAX), comparing with the array. */
static void walk_cursor(const kvsi_ef *ef, const uint64_t *v, uint64_t n,
                        uint64_t start, uint64_t max_steps)
{
	kvsi_ef_cursor c;
	kvs_status st = kvsi_ef_cursor_seek(&c, ef, start);
	EXPECT_ST(st, KVS_OK,
	          "kvsi_ef_cursor_seek(%" PRIu64 "), count %" PRIu64, start, n);
	uint64_t i = start;
	for (uint64_t steps = 0; i < n && steps < max_steps; steps++, i++) {
		if (!kvsi_ef_cursor_valid(&c))
			FAILF("cursor from %" PRIu64
			      " invalid at index %" PRIu64 " of %" PRIu64,
			      start, i, n);
		EXPECT_U64(c.index, i, "cursor from %" PRIu64 ": index", start);
		EXPECT_U64(c.value, v[i],
		           "cursor from %" PRIu64 ": value at index %" PRIu64,
		           start, i);
		kvsi_ef_cursor_next(&c);
	}
	if (i == n) {
		if (kvsi_ef_cursor_valid(&c))
			FAILF("cursor from %" PRIu64 " still valid at the end"
			      " (index %" PRIu64 ", count %" PRIu64 ")",
			      start, c.index, n);
		EXPECT_U64(c.index, n, "cursor index at the end");
		kvsi_ef_cursor_next(&c); /* stays at the end */
		if (kvsi_ef_cursor_valid(&c) || c.index != n)
			FAILF("cursor moved past the end (index %" PRIu64 ")",
			      c.index);
	}
}

/* Compares every query with the array v[0..n). effort scales the number
 * of random probes and cursor seeks; effort 0 is a lighter check (no
 * seek at every index, fewer random probes) for the corruption loops. */
static void check_queries(const kvsi_ef *ef, const uint64_t *v, uint64_t n,
                          unsigned effort)
{
	bool light = effort == 0;
	if (light)
		effort = 1;
	test_rng *r = &g_rng;
	uint64_t max = n ? v[n - 1] : 0;
	unsigned l = test_ef_ref_low_bits(n, max);

	/* get */
	for (uint64_t i = 0; i < n; i++) {
		uint64_t x = ~(i ? v[i - 1] : 0);
		kvs_status st = kvsi_ef_get(ef, i, &x);
		EXPECT_ST(st, KVS_OK, "kvsi_ef_get(%" PRIu64 ")", i);
		EXPECT_U64(x, v[i], "kvsi_ef_get(%" PRIu64 ") of %" PRIu64, i,
		           n);
	}
	static const uint64_t beyond[] = {0,   1,          2,         255,
	                                  256, 1ull << 32, U64MAX / 2};
	for (size_t k = 0; k < sizeof beyond / sizeof beyond[0]; k++) {
		uint64_t x;
		uint64_t i = n + beyond[k];
		if (i < n)
			continue;
		EXPECT_ST(kvsi_ef_get(ef, i, &x), KVS_E_RANGE,
		          "kvsi_ef_get(%" PRIu64 "), count %" PRIu64, i, n);
	}
	{
		uint64_t x;
		EXPECT_ST(kvsi_ef_get(ef, U64MAX, &x), KVS_E_RANGE,
		          "kvsi_ef_get(2^64-1)");
	}

	/* next_geq: every element value, its neighbours and its bucket's
	 * edges, the extremes, random values. */
	for (uint64_t i = 0; i < n; i++) {
		if (i > 0 && v[i] == v[i - 1])
			continue;
		uint64_t x = v[i];
		probe_next_geq(ef, v, n, x, (i & 15) == 7);
		if (x > 0)
			probe_next_geq(ef, v, n, x - 1, false);
		if (x < U64MAX)
			probe_next_geq(ef, v, n, x + 1, false);
		if (l > 0) {
			uint64_t h = x >> l;
			probe_next_geq(ef, v, n, h << l, false);
			probe_next_geq(ef, v, n,
			               (h << l) | (((uint64_t)1 << l) - 1),
			               false);
			if (h + 1 <= (U64MAX >> l))
				probe_next_geq(ef, v, n, (h + 1) << l, false);
		}
	}
	probe_next_geq(ef, v, n, 0, false);
	probe_next_geq(ef, v, n, 0, true);
	probe_next_geq(ef, v, n, U64MAX, false);
	probe_next_geq(ef, v, n, U64MAX, true);
	probe_next_geq(ef, v, n, max, false);
	if (max < U64MAX)
		probe_next_geq(ef, v, n, max + 1, false);
	uint64_t span = max + max / 8 + 2;
	if (span < max)
		span = U64MAX;
	for (unsigned t = 0; t < (light ? 8u : 64u * effort); t++) {
		probe_next_geq(ef, v, n, test_rng_below(r, span), t % 5 == 0);
		probe_next_geq(ef, v, n, test_rng_wide(r), false);
	}

	/* cursor */
	walk_cursor(ef, v, n, 0, U64MAX);
	for (unsigned t = 0; t < (light ? 2u : 4u * effort) && n > 0; t++) {
		uint64_t start;
		if (t & 1)
			start = n - 1 - test_rng_below(r, n < 3000 ? n : 3000);
		else
			start = test_rng_below(r, n + 1);
		walk_cursor(ef, v, n, start, t < 4 ? U64MAX : 4096);
	}
	if (n <= 3000 && !light)
		for (uint64_t i = 0; i <= n; i++)
			walk_cursor(ef, v, n, i, 2);
	kvsi_ef_cursor c;
	EXPECT_ST(kvsi_ef_cursor_seek(&c, ef, n), KVS_OK,
	          "kvsi_ef_cursor_seek(count = %" PRIu64 ")", n);
	if (kvsi_ef_cursor_valid(&c))
		FAILF("cursor valid after kvsi_ef_cursor_seek(count)");
	EXPECT_NOT_OK(kvsi_ef_cursor_seek(&c, ef, n + 1),
	              "kvsi_ef_cursor_seek(count + 1 = %" PRIu64 ")", n + 1);
	EXPECT_NOT_OK(kvsi_ef_cursor_seek(&c, ef, U64MAX),
	              "kvsi_ef_cursor_seek(2^64-1)");
}

/* ---- the full check of one sequence ---------------------------------------
 */

static void check_sequence(const char *name, const uint64_t *v_in, uint64_t n,
                           unsigned effort)
{
	g_seq = name;
	g_mode = "build";
	uint64_t max = n ? v_in[n - 1] : 0;
	test_ef_layout L = test_ef_ref_layout(n, max);
	uint64_t *v = heap_copy(v_in, n);

	EXPECT_U64(kvsi_ef_low_bits(n, max), L.l,
	           "kvsi_ef_low_bits(%" PRIu64 ", %" PRIu64 ")", n, max);
	size_t sz = 0;
	EXPECT_ST(kvsi_ef_size(n, max, &sz), KVS_OK, "kvsi_ef_size");
	EXPECT_U64(sz, L.size,
	           "kvsi_ef_size(%" PRIu64 ", %" PRIu64 ") vs the layout", n,
	           max);

	guarded gb = {0}, gs = {0};
	assert_int_equal(guarded_alloc(&gb, sz), 0);
	assert_int_equal(guarded_alloc(&gs, sz), 0);
	memset(gb.data, 0xA5, sz);
	memset(gs.data, 0x5A, sz);

	EXPECT_ST(kvsi_ef_build(v, n, gb.data, sz), KVS_OK, "kvsi_ef_build");

	kvsi_ef_builder b;
	EXPECT_ST(kvsi_ef_builder_init(&b, n, max, gs.data, sz), KVS_OK,
	          "kvsi_ef_builder_init");
	/* one push or push_n of 0 to 300 values at a time: the words being
	 * filled end and resume anywhere */
	for (uint64_t i = 0; i < n;) {
		uint64_t k = test_rng_below(&g_rng, 302);
		if (k > n - i)
			k = n - i;
		if (k == 301)
			EXPECT_ST(kvsi_ef_builder_push(&b, v[i]), KVS_OK,
			          "kvsi_ef_builder_push(%" PRIu64
			          ") at index %" PRIu64,
			          v[i], i);
		else
			EXPECT_ST(kvsi_ef_builder_push_n(&b, v + i, (size_t)k),
			          KVS_OK,
			          "kvsi_ef_builder_push_n of %" PRIu64
			          " values at index %" PRIu64,
			          k, i);
		i += k == 301 ? 1 : k;
	}
	EXPECT_ST(kvsi_ef_builder_finish(&b), KVS_OK, "kvsi_ef_builder_finish");
	if (memcmp(gb.data, gs.data, sz) != 0) {
		size_t k = 0;
		while (gb.data[k] == gs.data[k])
			k++;
		FAILF("kvsi_ef_build and the streaming builder differ at byte "
		      "%zu (%s) of %zu: 0x%02x vs 0x%02x",
		      k, section_of(&L, k), sz, gb.data[k], gs.data[k]);
	}

	uint8_t *ref = malloc(sz);
	assert_non_null(ref);
	ref_encode(v, n, ref);
	if (memcmp(ref, gb.data, sz) != 0) {
		size_t k = 0;
		while (ref[k] == gb.data[k])
			k++;
		FAILF("output differs from the documented layout at byte %zu "
		      "(%s) of %zu: got 0x%02x, expected 0x%02x (count %" PRIu64
		      ", max %" PRIu64 ", l %u)",
		      k, section_of(&L, k), sz, gb.data[k], ref[k], n, max,
		      L.l);
	}
	free(ref);

	kvsi_ef ef;
	g_mode = "open";
	EXPECT_ST(kvsi_ef_open(&ef, gb.data, sz), KVS_OK, "kvsi_ef_open");
	EXPECT_ST(kvsi_ef_validate(&ef), KVS_OK, "kvsi_ef_validate");
	for (int mode = 0; mode < 2; mode++) {
		kvsi_ef_set_portable(&ef, mode == 0);
		g_mode = mode == 0 ? "portable" : "accelerated";
		EXPECT_ST(kvsi_ef_validate(&ef), KVS_OK, "kvsi_ef_validate");
		check_queries(&ef, v, n, effort);
	}
	guarded_free(&gs);
	guarded_free(&gb);
	free(v);
	g_mode = "";
}

/* ---- sequence generators ----------------------------------------------------
 */

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

/* n values uniform in [lo, hi], sorted. */
static uint64_t *gen_uniform(uint64_t n, uint64_t lo, uint64_t hi)
{
	uint64_t *v = malloc((size_t)(n ? n : 1) * sizeof *v);
	assert_non_null(v);
	uint64_t span = hi - lo + 1; /* 0 means the whole universe */
	for (uint64_t i = 0; i < n; i++)
		v[i] = lo + (span ? test_rng_below(&g_rng, span)
		                  : test_rng_next(&g_rng));
	qsort(v, (size_t)n, sizeof *v, cmp_u64);
	return v;
}

static uint64_t *gen_fill(uint64_t n, uint64_t first, uint64_t step)
{
	uint64_t *v = malloc((size_t)(n ? n : 1) * sizeof *v);
	assert_non_null(v);
	for (uint64_t i = 0; i < n; i++)
		v[i] = first + i * step;
	return v;
}

/* ---- tests: valid sequences
 * -------------------------------------------------- */

static void test_low_bits_formula(void **state)
{
	(void)state;
	g_seq = "kvsi_ef_low_bits";
	static const struct {
		uint64_t n, max;
		unsigned l;
	} known[] = {
	    {0, 0, 0},
	    {0, 5, 0},
	    {0, U64MAX, 0},
	    {1, 0, 0},
	    {1, 1, 0},
	    {1, 2, 1},
	    {1, 3, 1},
	    {1, 4, 2},
	    {3, 5, 0},
	    {3, 6, 1},
	    {1000, 999, 0},
	    {1000, 2000, 1},
	    {1000, 1999, 0},
	    {1, U64MAX, 63},
	    {1, 1ull << 63, 63},
	    {1, (1ull << 63) - 1, 62},
	    {2, U64MAX, 62},
	    {U64MAX, U64MAX, 0},
	    {1ull << 48, U64MAX, 15},
	    {1ull << 48, 0, 0},
	};
	for (size_t k = 0; k < sizeof known / sizeof known[0]; k++) {
		assert_int_equal(test_ef_ref_low_bits(known[k].n, known[k].max),
		                 known[k].l);
		EXPECT_U64(kvsi_ef_low_bits(known[k].n, known[k].max),
		           known[k].l,
		           "kvsi_ef_low_bits(%" PRIu64 ", %" PRIu64 ")",
		           known[k].n, known[k].max);
	}
	for (int t = 0; t < 100000; t++) {
		uint64_t n = test_rng_wide(&g_rng), max = test_rng_wide(&g_rng);
		EXPECT_U64(
		    kvsi_ef_low_bits(n, max), test_ef_ref_low_bits(n, max),
		    "kvsi_ef_low_bits(%" PRIu64 ", %" PRIu64 ")", n, max);
	}
}

static void test_size_limits(void **state)
{
	(void)state;
	g_seq = "kvsi_ef_size limits";
	size_t sz;
	static const uint64_t maxes[] = {0, 1, 1ull << 48, 1ull << 62, U64MAX};
	for (size_t k = 0; k < sizeof maxes / sizeof maxes[0]; k++) {
		uint64_t max = maxes[k];
		EXPECT_ST(kvsi_ef_size(KVS_EF_MAX_COUNT, max, &sz), KVS_OK,
		          "kvsi_ef_size(KVS_EF_MAX_COUNT, %" PRIu64 ")", max);
		EXPECT_U64(sz, test_ef_ref_layout(KVS_EF_MAX_COUNT, max).size,
		           "kvsi_ef_size(KVS_EF_MAX_COUNT, %" PRIu64 ")", max);
		EXPECT_ST(
		    kvsi_ef_size(KVS_EF_MAX_COUNT + 1, max, &sz), KVS_E_RANGE,
		    "kvsi_ef_size(KVS_EF_MAX_COUNT + 1, %" PRIu64 ")", max);
		EXPECT_ST(kvsi_ef_size(1ull << 63, max, &sz), KVS_E_RANGE,
		          "kvsi_ef_size(2^63, %" PRIu64 ")", max);
		EXPECT_ST(kvsi_ef_size(U64MAX, max, &sz), KVS_E_RANGE,
		          "kvsi_ef_size(2^64-1, %" PRIu64 ")", max);
	}
	for (int t = 0; t < 10000; t++) {
		uint64_t n = test_rng_below(&g_rng, KVS_EF_MAX_COUNT + 1);
		if (t % 3 == 0)
			n >>= test_rng_below(&g_rng, 48);
		uint64_t max = test_rng_wide(&g_rng);
		if (n == 0)
			max = 0;
		EXPECT_ST(kvsi_ef_size(n, max, &sz), KVS_OK,
		          "kvsi_ef_size(%" PRIu64 ", %" PRIu64 ")", n, max);
		EXPECT_U64(sz, test_ef_ref_layout(n, max).size,
		           "kvsi_ef_size(%" PRIu64 ", %" PRIu64 ")", n, max);
	}
}

static void test_empty(void **state)
{
	(void)state;
	check_sequence("empty", NULL, 0, 1);

	/* The builder with nothing to push. */
	g_seq = "empty builder";
	uint8_t out[KVS_EF_HEADER_BYTES];
	kvsi_ef_builder b;
	EXPECT_ST(kvsi_ef_builder_init(&b, 0, 0, out, sizeof out), KVS_OK,
	          "init(0, 0)");
	EXPECT_ST(kvsi_ef_builder_push(&b, 0), KVS_E_RANGE,
	          "push onto count 0");
	EXPECT_ST(kvsi_ef_builder_finish(&b), KVS_OK, "finish(count 0)");
	kvsi_ef ef;
	EXPECT_ST(kvsi_ef_open(&ef, out, sizeof out), KVS_OK, "open");
	EXPECT_ST(kvsi_ef_validate(&ef), KVS_OK, "validate");
	EXPECT_U64(kvsi_ef_next_geq(&ef, 0, NULL), 0, "next_geq(0)");
	EXPECT_U64(kvsi_ef_next_geq(&ef, U64MAX, NULL), 0, "next_geq(max)");
}

static void test_single_element(void **state)
{
	(void)state;
	uint64_t vals[] = {0,
	                   1,
	                   2,
	                   3,
	                   255,
	                   256,
	                   (1ull << 32) - 1,
	                   1ull << 32,
	                   (1ull << 62) + 12345,
	                   (1ull << 63) - 1,
	                   1ull << 63,
	                   U64MAX - 1,
	                   U64MAX,
	                   0,
	                   0,
	                   0,
	                   0};
	for (size_t k = 13; k < sizeof vals / sizeof vals[0]; k++)
		vals[k] = test_rng_wide(&g_rng);
	char name[64];
	for (size_t k = 0; k < sizeof vals / sizeof vals[0]; k++) {
		snprintf(name, sizeof name, "single %" PRIu64, vals[k]);
		check_sequence(name, &vals[k], 1, 2);
	}
}

static void test_all_equal(void **state)
{
	(void)state;
	static const uint64_t vals[] = {0,          1,          12345,
	                                1ull << 63, U64MAX - 1, U64MAX};
	static const uint64_t ns[] = {2, 3, 64, 255, 256, 257, 1000};
	char name[96];
	for (size_t a = 0; a < sizeof vals / sizeof vals[0]; a++)
		for (size_t b = 0; b < sizeof ns / sizeof ns[0]; b++) {
			uint64_t *v = gen_fill(ns[b], vals[a], 0);
			snprintf(name, sizeof name,
			         "%" PRIu64 " copies of %" PRIu64, ns[b],
			         vals[a]);
			check_sequence(name, v, ns[b], 1);
			free(v);
		}
}

static void test_dense_and_strided(void **state)
{
	(void)state;
	static const uint64_t ns[] = {
	    1,    2,    3,    63,    64,    65,    127,  128,  129,
	    255,  256,  257,  511,   512,   513,   1023, 1024, 1025,
	    2047, 2048, 2049, 3071,  3073,  4095,  4096, 4097, 5119,
	    5121, 8191, 8193, 65535, 65537, 100000};
	static const uint64_t steps[] = {1, 2, 3, 7, 64, 1000, 1ull << 40};
	char name[128];
	for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++) {
		uint64_t n = ns[a];
		unsigned effort = n > 10000 ? 1 : 2;
		for (size_t s = 0; s < sizeof steps / sizeof steps[0]; s++) {
			if (steps[s] > 1 && n > 5000 && s % 2 == 0)
				continue;
			if (steps[s] == (1ull << 40) && n > 1000000)
				continue;
			uint64_t *v = gen_fill(n, 0, steps[s]);
			snprintf(name, sizeof name,
			         "0, %" PRIu64 ", ... (%" PRIu64 " values)",
			         steps[s], n);
			check_sequence(name, v, n, effort);
			free(v);
		}
		/* Dense runs starting elsewhere and ending at the top. */
		uint64_t *v = gen_fill(n, 1000003, 1);
		snprintf(name, sizeof name, "dense from 1000003 (%" PRIu64 ")",
		         n);
		check_sequence(name, v, n, effort);
		free(v);
		v = gen_fill(n, U64MAX - n + 1, 1);
		snprintf(name, sizeof name,
		         "dense ending at 2^64-1 (%" PRIu64 ")", n);
		check_sequence(name, v, n, effort);
		free(v);
		v = gen_fill(n, U64MAX - n, 1);
		snprintf(name, sizeof name,
		         "dense ending at 2^64-2 (%" PRIu64 ")", n);
		check_sequence(name, v, n, effort);
		free(v);
	}
}

static void test_sparse(void **state)
{
	(void)state;
	static const uint64_t ns[] = {2,   3,   10,   100,  255,
	                              256, 257, 1000, 4097, 20000};
	char name[128];
	for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++) {
		uint64_t n = ns[a];
		/* Uniform over the whole universe. */
		uint64_t *v = gen_uniform(n, 0, U64MAX);
		snprintf(name, sizeof name, "uniform 64-bit (%" PRIu64 ")", n);
		check_sequence(name, v, n, 2);
		free(v);
		/* Values of random bit widths: huge relative gaps. */
		v = malloc((size_t)n * sizeof *v);
		assert_non_null(v);
		for (uint64_t i = 0; i < n; i++)
			v[i] = test_rng_wide(&g_rng);
		qsort(v, (size_t)n, sizeof *v, cmp_u64);
		snprintf(name, sizeof name, "random widths (%" PRIu64 ")", n);
		check_sequence(name, v, n, 2);
		free(v);
		/* Dense clusters separated by gaps of about 2^40. */
		v = malloc((size_t)n * sizeof *v);
		assert_non_null(v);
		uint64_t x = test_rng_below(&g_rng, 1000);
		for (uint64_t i = 0; i < n; i++) {
			if (test_rng_below(&g_rng, 50) == 0)
				x += (1ull << 40) +
				     test_rng_below(&g_rng, 1u << 20);
			else
				x += test_rng_below(&g_rng, 3);
			v[i] = x;
		}
		snprintf(name, sizeof name, "clusters (%" PRIu64 ")", n);
		check_sequence(name, v, n, 2);
		free(v);
	}
}

static void test_universe_edges(void **state)
{
	(void)state;
	char name[128];
	static const uint64_t fixed0[] = {0, U64MAX};
	static const uint64_t fixed1[] = {U64MAX - 1, U64MAX};
	static const uint64_t fixed2[] = {0, 1ull << 63, U64MAX};
	static const uint64_t fixed3[] = {U64MAX, U64MAX};
	static const uint64_t fixed4[] = {0, 0, U64MAX - 1};
	static const uint64_t fixed5[] = {1, (1ull << 63) - 1, 1ull << 63,
	                                  U64MAX};
	check_sequence("{0, 2^64-1}", fixed0, 2, 4);
	check_sequence("{2^64-2, 2^64-1}", fixed1, 2, 4);
	check_sequence("{0, 2^63, 2^64-1}", fixed2, 3, 4);
	check_sequence("{2^64-1, 2^64-1}", fixed3, 2, 4);
	check_sequence("{0, 0, 2^64-2}", fixed4, 3, 4);
	check_sequence("{1, 2^63-1, 2^63, 2^64-1}", fixed5, 4, 4);
	static const uint64_t ns[] = {2, 5, 100, 256, 257, 1000, 5000};
	for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++) {
		uint64_t n = ns[a];
		/* Random values (with duplicates) in the top 5000, ending at
		 * 2^64-1 and at 2^64-2. */
		for (int top = 0; top < 2; top++) {
			uint64_t hi = U64MAX - (uint64_t)top;
			uint64_t *v = gen_uniform(n, hi - 4999, hi);
			v[n - 1] = hi;
			snprintf(name, sizeof name,
			         "top 5000 ending at 2^64-%d (%" PRIu64 ")",
			         1 + top, n);
			check_sequence(name, v, n, 2);
			free(v);
		}
		/* Uniform in the top half, and 0 followed by the top. */
		uint64_t *v = gen_uniform(n, 1ull << 63, U64MAX);
		v[n - 1] = U64MAX;
		snprintf(name, sizeof name, "upper half (%" PRIu64 ")", n);
		check_sequence(name, v, n, 2);
		v[0] = 0;
		snprintf(name, sizeof name, "0 then upper half (%" PRIu64 ")",
		         n);
		check_sequence(name, v, n, 2);
		free(v);
	}
}

/* For every l in 0..63, sequences whose max/count puts them at that l,
 * at both ends of its range and in between. */
static void test_every_low_width(void **state)
{
	(void)state;
	static const uint64_t ns[] = {1, 2, 3, 5, 64, 257, 1000};
	char name[128];
	int seen[64] = {0};
	for (unsigned l = 0; l < 64; l++) {
		for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++) {
			uint64_t n = ns[a];
			if (l > 0 && n > ((uint64_t)1 << (63 - l)))
				continue;
			uint64_t lo = l == 0 ? 0 : n << l;
			uint64_t hi = (n == ((uint64_t)1 << (63 - l)))
			                  ? U64MAX
			                  : (n << (l + 1)) - 1;
			if (l == 0)
				hi = 2 * n - 1; /* max/n <= 1: l is 0 */
			for (int variant = 0; variant < 3; variant++) {
				uint64_t max =
				    variant == 0 ? lo
				    : variant == 1
				        ? hi
				        : lo + test_rng_below(&g_rng,
				                              hi - lo + 1);
				uint64_t *v = gen_uniform(n, 0, max);
				v[n - 1] = max;
				assert_int_equal(test_ef_ref_low_bits(n, max),
				                 l);
				seen[l]++;
				snprintf(name, sizeof name,
				         "l = %u, count %" PRIu64
				         ", max %" PRIu64,
				         l, n, max);
				check_sequence(name, v, n, 1);
				free(v);
			}
		}
	}
	for (unsigned l = 0; l < 64; l++)
		assert_true(seen[l] > 0);
}

static void test_duplicates(void **state)
{
	(void)state;
	static const uint64_t ns[] = {10, 255, 256, 257, 600, 2000, 10000};
	char name[128];
	for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++) {
		uint64_t n = ns[a];
		/* Values from a small range: many duplicates. */
		uint64_t *v = gen_uniform(n, 0, n / 4 + 1);
		snprintf(name, sizeof name, "small range (%" PRIu64 ")", n);
		check_sequence(name, v, n, 2);
		free(v);
		v = gen_uniform(n, 0, 50 * n);
		for (uint64_t i = 1; i < n; i++)
			if (test_rng_below(&g_rng, 3) == 0)
				v[i] = v[i - 1];
		snprintf(name, sizeof name,
		         "random, 1/3 repeated (%" PRIu64 ")", n);
		check_sequence(name, v, n, 2);
		free(v);
		/* Long runs of one value (up to 600 long, crossing sample
		 * boundaries) separated by random gaps. */
		v = malloc((size_t)n * sizeof *v);
		assert_non_null(v);
		uint64_t x = 0;
		for (uint64_t i = 0; i < n;) {
			uint64_t run = 1 + test_rng_below(&g_rng, 600);
			for (uint64_t k = 0; k < run && i < n; k++)
				v[i++] = x;
			x += 1 + test_rng_below(&g_rng, 5000);
		}
		snprintf(name, sizeof name, "long runs (%" PRIu64 ")", n);
		check_sequence(name, v, n, 2);
		free(v);
		/* Two clumps: half at 0, half at max (a long zero run). */
		v = malloc((size_t)n * sizeof *v);
		assert_non_null(v);
		for (uint64_t i = 0; i < n; i++)
			v[i] = i < n / 2 ? 0 : 3 * n / 2 + 1;
		snprintf(name, sizeof name, "two clumps (%" PRIu64 ")", n);
		check_sequence(name, v, n, 2);
		free(v);
	}
}

/* Counts of ones and of zeros around multiples of the sample interval. */
static void test_sample_boundaries(void **state)
{
	(void)state;
	static const uint64_t ns[] = {
	    255,  256,  257,  511,  512,  513,  767,   768,   769,   1023,
	    1024, 1025, 2047, 2049, 4095, 4097, 16383, 16385, 65535, 65537};
	char name[128];
	for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++) {
		uint64_t n = ns[a];
		unsigned effort = n > 10000 ? 1 : 2;
		uint64_t *v = gen_uniform(n, 0, 10 * n);
		snprintf(name, sizeof name, "count %" PRIu64 ", max ~10n", n);
		check_sequence(name, v, n, effort);
		free(v);
		/* Zero count exactly ns[a], l = 0 (max < 2 * count). */
		uint64_t z = ns[a];
		uint64_t cnt = z / 2 + 1 + test_rng_below(&g_rng, z / 2 + 1);
		v = gen_uniform(cnt, 0, z);
		v[cnt - 1] = z;
		assert_int_equal(test_ef_ref_low_bits(cnt, z), 0);
		snprintf(name, sizeof name,
		         "zero count %" PRIu64 ", count %" PRIu64 ", l 0", z,
		         cnt);
		check_sequence(name, v, cnt, effort);
		free(v);
		/* Zero count exactly z with l = 4: max >> 4 == z. */
		uint64_t max = (z << 4) | test_rng_below(&g_rng, 16);
		cnt = max / 24;
		if (cnt > 0 && test_ef_ref_low_bits(cnt, max) == 4) {
			v = gen_uniform(cnt, 0, max);
			v[cnt - 1] = max;
			snprintf(name, sizeof name,
			         "zero count %" PRIu64 ", count %" PRIu64
			         ", l 4",
			         z, cnt);
			check_sequence(name, v, cnt, effort);
			free(v);
		}
	}
	/* 1024 k +- 1 elements. */
	for (uint64_t k = 1; k <= 64; k *= 4) {
		for (int d = -1; d <= 1; d += 2) {
			uint64_t n = 1024 * k + (uint64_t)(int64_t)d;
			uint64_t *v = gen_uniform(n, 0, 3 * n);
			snprintf(name, sizeof name, "1024*%" PRIu64 "%+d", k,
			         d);
			check_sequence(name, v, n, 1);
			free(v);
		}
	}
}

static void test_large(void **state)
{
	(void)state;
	const uint64_t n = (1u << 20) + 3;
	uint64_t *v = gen_fill(n, 0, 1);
	check_sequence("dense 2^20+3", v, n, 1);
	free(v);
	v = gen_uniform(n, 0, 200 * n);
	check_sequence("random 2^20+3, max ~200n", v, n, 1);
	free(v);
	v = gen_uniform(n, 0, U64MAX);
	check_sequence("random 64-bit 2^20+3", v, n, 1);
	free(v);
	v = malloc((size_t)n * sizeof *v);
	assert_non_null(v);
	for (uint64_t i = 0; i < n; i++)
		v[i] = i < n / 2 ? i / 1000 : 3 * n / 2 + i / 1000;
	check_sequence("two clumps 2^20+3", v, n, 1);
	free(v);
}

/* ---- tests: the builder's errors
 * --------------------------------------------- */

static void test_builder_errors(void **state)
{
	(void)state;
	g_seq = "builder errors";
	g_mode = "build";
	kvsi_ef_builder b;
	size_t sz;
	const uint64_t want[] = {10, 10, 50, 60, 100};
	EXPECT_ST(kvsi_ef_size(5, 100, &sz), KVS_OK, "size");
	uint8_t *out = calloc(1, sz + 64), *ref = calloc(1, sz);
	assert_non_null(out);
	assert_non_null(ref);
	ref_encode(want, 5, ref);

	/* Order and range errors leave the builder usable. */
	EXPECT_ST(kvsi_ef_builder_init(&b, 5, 100, out, sz), KVS_OK, "init");
	EXPECT_ST(kvsi_ef_builder_push(&b, 101), KVS_E_ORDER,
	          "first push above max");
	EXPECT_ST(kvsi_ef_builder_push(&b, U64MAX), KVS_E_ORDER,
	          "first push 2^64-1 above max");
	EXPECT_ST(kvsi_ef_builder_push(&b, 10), KVS_OK, "push 10");
	EXPECT_ST(kvsi_ef_builder_push(&b, 9), KVS_E_ORDER, "push 9 after 10");
	EXPECT_ST(kvsi_ef_builder_push(&b, 0), KVS_E_ORDER, "push 0 after 10");
	EXPECT_ST(kvsi_ef_builder_push(&b, 10), KVS_OK, "push 10 again");
	EXPECT_ST(kvsi_ef_builder_push(&b, 50), KVS_OK, "push 50");
	EXPECT_ST(kvsi_ef_builder_push(&b, 101), KVS_E_ORDER, "push above max");
	EXPECT_ST(kvsi_ef_builder_push(&b, 60), KVS_OK, "push 60");
	EXPECT_ST(kvsi_ef_builder_push(&b, 100), KVS_OK, "push 100");
	EXPECT_ST(kvsi_ef_builder_push(&b, 100), KVS_E_RANGE, "sixth push");
	EXPECT_ST(kvsi_ef_builder_push(&b, 101), KVS_E_RANGE,
	          "sixth push, above max");
	EXPECT_ST(kvsi_ef_builder_finish(&b), KVS_OK, "finish");
	if (memcmp(out, ref, sz) != 0)
		FAILF("a builder that saw failed pushes wrote other bytes "
		      "than for {10, 10, 50, 60, 100}");

	/* push_n stops at the first value push would refuse, the values
	 * before it appended */
	const uint64_t bad_order[] = {10, 10, 9, 50}, bad_max[] = {50, 101},
	               tail[] = {60, 100, 100};
	EXPECT_ST(kvsi_ef_builder_init(&b, 5, 100, out, sz), KVS_OK, "init");
	EXPECT_ST(kvsi_ef_builder_push_n(&b, bad_order, 4), KVS_E_ORDER,
	          "push_n of 10, 10, 9, 50");
	EXPECT_U64(b.pushed, 2, "values pushed before the 9");
	EXPECT_ST(kvsi_ef_builder_push_n(&b, bad_max, 2), KVS_E_ORDER,
	          "push_n of 50, 101");
	EXPECT_U64(b.pushed, 3, "values pushed before the 101");
	EXPECT_ST(kvsi_ef_builder_push_n(&b, tail, 0), KVS_OK,
	          "push_n of none");
	EXPECT_ST(kvsi_ef_builder_push_n(&b, tail, 3), KVS_E_RANGE,
	          "push_n of 60, 100, 100 with two left");
	EXPECT_U64(b.pushed, 5, "values pushed before the sixth");
	EXPECT_ST(kvsi_ef_builder_finish(&b), KVS_OK, "finish");
	if (memcmp(out, ref, sz) != 0)
		FAILF("a builder that saw failed push_n calls wrote other "
		      "bytes than for {10, 10, 50, 60, 100}");

	/* Fewer pushes than count. */
	EXPECT_ST(kvsi_ef_builder_init(&b, 5, 100, out, sz), KVS_OK, "init");
	EXPECT_ST(kvsi_ef_builder_finish(&b), KVS_E_INVAL, "finish after 0");
	EXPECT_ST(kvsi_ef_builder_init(&b, 5, 100, out, sz), KVS_OK, "init");
	for (int i = 0; i < 4; i++)
		EXPECT_ST(kvsi_ef_builder_push(&b, want[i]), KVS_OK, "push");
	EXPECT_ST(kvsi_ef_builder_finish(&b), KVS_E_INVAL, "finish after 4");
	/* count values, the last below max. */
	EXPECT_ST(kvsi_ef_builder_init(&b, 5, 100, out, sz), KVS_OK, "init");
	for (int i = 0; i < 4; i++)
		EXPECT_ST(kvsi_ef_builder_push(&b, want[i]), KVS_OK, "push");
	EXPECT_ST(kvsi_ef_builder_push(&b, 99), KVS_OK, "push 99");
	EXPECT_ST(kvsi_ef_builder_finish(&b), KVS_E_INVAL,
	          "finish, last 99 "
	          "!= max 100");

	/* Space. */
	for (size_t len = 0; len < sz; len++)
		EXPECT_ST(kvsi_ef_builder_init(&b, 5, 100, out, len),
		          KVS_E_NOSPACE, "init with out_len %zu < %zu", len,
		          sz);
	for (size_t len = 0; len < sz; len += 7)
		EXPECT_ST(kvsi_ef_build(want, 5, out, len), KVS_E_NOSPACE,
		          "kvsi_ef_build with out_len %zu < %zu", len, sz);
	/* A larger region is fine and the first sz bytes are the same. */
	memset(out, 0xEE, sz + 64);
	EXPECT_ST(kvsi_ef_builder_init(&b, 5, 100, out, sz + 64), KVS_OK,
	          "init with a larger region");
	for (int i = 0; i < 5; i++)
		EXPECT_ST(kvsi_ef_builder_push(&b, want[i]), KVS_OK, "push");
	EXPECT_ST(kvsi_ef_builder_finish(&b), KVS_OK, "finish");
	if (memcmp(out, ref, sz) != 0)
		FAILF("builder output in a larger region differs");
	memset(out, 0xEE, sz + 64);
	EXPECT_ST(kvsi_ef_build(want, 5, out, sz + 64), KVS_OK,
	          "kvsi_ef_build into a larger region");
	if (memcmp(out, ref, sz) != 0)
		FAILF("kvsi_ef_build output in a larger region differs");

	/* Count limit. */
	EXPECT_NOT_OK(
	    kvsi_ef_builder_init(&b, KVS_EF_MAX_COUNT + 1, U64MAX, out, sz),
	    "init with count KVS_EF_MAX_COUNT + 1");
	EXPECT_NOT_OK(kvsi_ef_builder_init(&b, U64MAX, U64MAX, out, sz),
	              "init with count 2^64-1");

	/* kvsi_ef_build with an unsorted array. */
	static const uint64_t bad1[] = {1, 3, 2, 4};
	static const uint64_t bad2[] = {5, 5, 4, 5};
	static const uint64_t bad3[] = {U64MAX, 0, U64MAX};
	size_t big = 4096;
	uint8_t *o2 = calloc(1, big);
	assert_non_null(o2);
	EXPECT_ST(kvsi_ef_build(bad1, 4, o2, big), KVS_E_ORDER,
	          "kvsi_ef_build {1, 3, 2, 4}");
	EXPECT_ST(kvsi_ef_build(bad2, 4, o2, big), KVS_E_ORDER,
	          "kvsi_ef_build {5, 5, 4, 5}");
	EXPECT_ST(kvsi_ef_build(bad3, 3, o2, big), KVS_E_ORDER,
	          "kvsi_ef_build {2^64-1, 0, 2^64-1}");

	/* count 1, max 0 and max 2^64-1. */
	EXPECT_ST(kvsi_ef_size(1, 0, &sz), KVS_OK, "size(1, 0)");
	EXPECT_ST(kvsi_ef_builder_init(&b, 1, 0, o2, sz), KVS_OK, "init(1, 0)");
	EXPECT_ST(kvsi_ef_builder_push(&b, 1), KVS_E_ORDER, "push 1 > max 0");
	EXPECT_ST(kvsi_ef_builder_push(&b, 0), KVS_OK, "push 0");
	EXPECT_ST(kvsi_ef_builder_finish(&b), KVS_OK, "finish");
	EXPECT_ST(kvsi_ef_size(1, U64MAX, &sz), KVS_OK, "size(1, 2^64-1)");
	EXPECT_ST(kvsi_ef_builder_init(&b, 1, U64MAX, o2, sz), KVS_OK,
	          "init(1, 2^64-1)");
	EXPECT_ST(kvsi_ef_builder_push(&b, U64MAX - 1), KVS_OK, "push 2^64-2");
	EXPECT_ST(kvsi_ef_builder_finish(&b), KVS_E_INVAL,
	          "finish, last 2^64-2 != max");
	free(o2);
	free(out);
	free(ref);
	g_mode = "";
}

/* ---- untrusted input
 * ----------------------------------------------------------- */

/* Runs every query over an opened (maybe corrupt, maybe unvalidated)
 * sequence of len bytes: none may fault or read outside the data, get(i)
 * for i >= count is KVS_E_RANGE, next_geq returns an index <= count and
 * the cursor moves forward and ends. */
static void exercise_untrusted(const kvsi_ef *ef, const uint8_t *data,
                               size_t len, unsigned seeks)
{
	uint64_t n = test_get_le64(data);
	test_rng *r = &g_rng;
	if (n > 8 * (uint64_t)len)
		FAILF("kvsi_ef_open accepted count %" PRIu64 " in %zu bytes", n,
		      len);
	uint64_t x = 0, prev = 0;
	for (uint64_t i = 0; i < n; i++) {
		kvs_status st = kvsi_ef_get(ef, i, &x);
		uint64_t probes[2] = {(i & 1) ? x + 1 : x, prev - 1};
		for (int k = 0; k < 2; k++) {
			uint64_t y;
			uint64_t idx = kvsi_ef_next_geq(ef, probes[k], &y);
			if (idx > n)
				FAILF("next_geq(%" PRIu64 ") returned %" PRIu64
				      " > count %" PRIu64,
				      probes[k], idx, n);
		}
		if (st == KVS_OK)
			prev = x;
	}
	EXPECT_ST(kvsi_ef_get(ef, n, &x), KVS_E_RANGE, "get(count)");
	/* Probes in every part of [0, max], the last buckets above all
	 * (their zeros are the last ones of the upper array). */
	uint64_t max = test_get_le64(data + 8);
	unsigned l = test_ef_ref_low_bits(n, max);
	uint64_t zeros = max >> l;
	for (int k = 0; k < 40; k++) {
		uint64_t probe;
		if (k < 4)
			probe = k == 0   ? 0
			        : k == 1 ? U64MAX
			                 : max - (uint64_t)(k - 2);
		else if (k < 20)
			probe = (zeros - (uint64_t)(k - 4)) << l;
		else if (k < 28)
			probe = test_rng_wide(r);
		else
			probe = max ? test_rng_below(r, max) : 0;
		uint64_t y;
		uint64_t idx = kvsi_ef_next_geq(ef, probe, (k & 1) ? NULL : &y);
		if (idx > n)
			FAILF("next_geq(%" PRIu64 ") returned %" PRIu64
			      " > count %" PRIu64,
			      probe, idx, n);
	}
	kvsi_ef_cursor c;
	for (unsigned s = 0; s <= seeks; s++) {
		uint64_t start = s == 0 ? 0 : test_rng_below(r, n + 1);
		if (kvsi_ef_cursor_seek(&c, ef, start) != KVS_OK)
			continue;
		uint64_t steps = 0, last = c.index;
		while (kvsi_ef_cursor_valid(&c)) {
			kvsi_ef_cursor_next(&c);
			if (c.index <= last && kvsi_ef_cursor_valid(&c))
				FAILF("cursor did not advance");
			last = c.index;
			if (++steps > n + 1)
				FAILF("cursor walked more than count steps");
		}
	}
	if (kvsi_ef_cursor_seek(&c, ef, n + 1) == KVS_OK)
		FAILF("cursor_seek(count + 1) accepted on opened data");
}

/* When validate accepted data: the decoded sequence is sorted, ends at
 * max, re-encodes to the same bytes, and every query agrees with it. */
static void check_validated(const kvsi_ef *ef, const uint8_t *data, size_t len)
{
	uint64_t n = test_get_le64(data), max = test_get_le64(data + 8);
	uint64_t *d = malloc((size_t)(n ? n : 1) * sizeof *d);
	assert_non_null(d);
	for (uint64_t i = 0; i < n; i++)
		EXPECT_ST(kvsi_ef_get(ef, i, &d[i]), KVS_OK,
		          "get(%" PRIu64 ") on validated data", i);
	if (!is_monotone(d, n))
		FAILF("validated data decodes to a non-monotone sequence");
	if (n > 0 && d[n - 1] != max)
		FAILF("validated data: last element %" PRIu64
		      " != header max %" PRIu64,
		      d[n - 1], max);
	if (n == 0 && max != 0)
		FAILF("validated data: empty with max %" PRIu64, max);
	test_ef_layout L = test_ef_ref_layout(n, max);
	if (L.size != len)
		FAILF("validated data of %zu bytes, layout says %zu", len,
		      L.size);
	uint8_t *re = malloc(len);
	assert_non_null(re);
	ref_encode(d, n, re);
	if (memcmp(re, data, len) != 0) {
		size_t k = 0;
		while (re[k] == data[k])
			k++;
		FAILF("validated data is not the canonical encoding of what "
		      "it decodes to: byte %zu (%s): 0x%02x, canonical 0x%02x",
		      k, section_of(&L, k), data[k], re[k]);
	}
	free(re);
	check_queries(ef, d, n, 0);
	free(d);
}

/* Opens data (len bytes); when open accepts, exercises it, then validates;
 * returns 0 if open rejected, 1 if only open accepted, 2 if validate
 * accepted too. Successive calls alternate between the portable and the
 * accelerated query paths (both run for every_mode); validate runs on
 * both paths every time, and they must agree. */
static int try_untrusted_modes(const uint8_t *data, size_t len, unsigned seeks,
                               bool every_mode)
{
	static unsigned counter;
	kvsi_ef ef;
	if (kvsi_ef_open(&ef, data, len) != KVS_OK)
		return 0;
	const char *saved = g_mode;
	unsigned first = every_mode ? 0 : (counter++ & 1);
	unsigned last = every_mode ? 1 : first;
	for (unsigned mode = first; mode <= last; mode++) {
		kvsi_ef_set_portable(&ef, mode == 0);
		g_mode = mode == 0 ? "unvalidated, portable"
		                   : "unvalidated, accelerated";
		exercise_untrusted(&ef, data, len, seeks);
	}
	g_mode = saved;
	/* validate's two paths must agree on every input */
	kvsi_ef_set_portable(&ef, true);
	kvs_status portable = kvsi_ef_validate(&ef);
	kvsi_ef_set_portable(&ef, false);
	kvs_status accel = kvsi_ef_validate(&ef);
	if (portable != accel)
		FAILF("kvsi_ef_validate: portable path %s, accelerated path %s",
		      kvs_strerror(portable), kvs_strerror(accel));
	if (accel != KVS_OK)
		return 1;
	for (unsigned mode = first; mode <= last; mode++) {
		kvsi_ef_set_portable(&ef, mode == 0);
		g_mode = mode == 0 ? "validated, portable"
		                   : "validated, accelerated";
		check_validated(&ef, data, len);
	}
	g_mode = saved;
	return 2;
}

static int try_untrusted(const uint8_t *data, size_t len, unsigned seeks)
{
	return try_untrusted_modes(data, len, seeks, false);
}

/* A set of small valid sequences for the corruption tests. */
typedef struct sample_seq {
	const char *name;
	uint64_t *v;
	uint64_t n;
} sample_seq;

static size_t make_samples(sample_seq *s)
{
	size_t k = 0;
	s[k++] = (sample_seq){"empty", gen_fill(0, 0, 0), 0};
	s[k++] = (sample_seq){"{2^64-1} (l 63)", gen_fill(1, U64MAX, 0), 1};
	s[k++] = (sample_seq){"{0}", gen_fill(1, 0, 0), 1};
	s[k++] = (sample_seq){"5 small", gen_uniform(5, 0, 40), 5};
	s[k++] = (sample_seq){"300 random, max ~30n", gen_uniform(300, 0, 9000),
	                      300};
	s[k++] = (sample_seq){"600 with duplicates, l 0",
	                      gen_uniform(600, 0, 700), 600};
	s[k++] = (sample_seq){"dense 513", gen_fill(513, 0, 1), 513};
	s[k++] = (sample_seq){"40 wide", gen_uniform(40, 0, U64MAX), 40};
	s[k++] = (sample_seq){"1100, l 2", gen_uniform(1100, 0, 5000), 1100};
	uint64_t *v = malloc(700 * sizeof *v);
	assert_non_null(v);
	for (uint64_t i = 0; i < 700; i++)
		v[i] = i < 350 ? 3 : 1000;
	s[k++] = (sample_seq){"two clumps 700", v, 700};
	return k;
}

static void free_samples(sample_seq *s, size_t k)
{
	for (size_t i = 0; i < k; i++)
		free(s[i].v);
}

static uint8_t *encode_copy(const uint64_t *v, uint64_t n, size_t *len)
{
	test_ef_layout L = test_ef_ref_layout(n, n ? v[n - 1] : 0);
	uint8_t *p = malloc(L.size);
	assert_non_null(p);
	ref_encode(v, n, p);
	*len = L.size;
	return p;
}

/* Every wrong length is rejected; a buffer of exactly the given length is
 * placed against the guard page so open cannot peek past it. */
static void test_open_rejects_lengths(void **state)
{
	(void)state;
	sample_seq s[16];
	size_t ns = make_samples(s);
	for (size_t k = 0; k < ns; k++) {
		g_seq = s[k].name;
		g_mode = "open lengths";
		size_t sz;
		uint8_t *enc = encode_copy(s[k].v, s[k].n, &sz);
		for (size_t len = 0; len < sz; len++) {
			guarded g = {0};
			assert_int_equal(guarded_alloc(&g, len), 0);
			memcpy(g.data, enc, len);
			kvsi_ef ef;
			EXPECT_NOT_OK(kvsi_ef_open(&ef, g.data, len),
			              "kvsi_ef_open with %zu of %zu bytes", len,
			              sz);
			guarded_free(&g);
		}
		for (size_t extra = 1; extra <= 4096;
		     extra += extra < 64 ? 1 : 509) {
			size_t len = sz + extra;
			for (int fill = 0; fill < 2; fill++) {
				guarded g = {0};
				assert_int_equal(guarded_alloc(&g, len), 0);
				memset(g.data, fill ? 0xFF : 0, len);
				memcpy(g.data, enc, sz);
				kvsi_ef ef;
				EXPECT_NOT_OK(kvsi_ef_open(&ef, g.data, len),
				              "kvsi_ef_open with %zu bytes, "
				              "true size %zu",
				              len, sz);
				guarded_free(&g);
			}
		}
		/* And the true length is accepted at the guard page. */
		guarded g = {0};
		assert_int_equal(guarded_alloc(&g, sz), 0);
		memcpy(g.data, enc, sz);
		assert_int_equal(try_untrusted_modes(g.data, sz, 4, true), 2);
		guarded_free(&g);
		free(enc);
	}
	free_samples(s, ns);
	g_mode = "";
}

/* Changed header fields: the constant fields make open fail; count and max
 * changes make open or validate fail. */
static void test_open_rejects_header(void **state)
{
	(void)state;
	sample_seq s[16];
	size_t ns = make_samples(s);
	unsigned open_accepted = 0;
	for (size_t k = 0; k < ns; k++) {
		g_seq = s[k].name;
		g_mode = "header";
		size_t sz;
		uint8_t *enc = encode_copy(s[k].v, s[k].n, &sz);
		uint64_t n = s[k].n, max = n ? s[k].v[n - 1] : 0;
		unsigned l = test_ef_ref_low_bits(n, max);
		guarded g = {0};
		assert_int_equal(guarded_alloc(&g, sz), 0);
		kvsi_ef ef;

		/* version, low_bits, sample_shift, reserved bytes */
		static const uint8_t versions[] = {0, 2, 3, 0x81, 0xFF};
		for (size_t i = 0; i < sizeof versions; i++) {
			memcpy(g.data, enc, sz);
			g.data[16] = versions[i];
			EXPECT_NOT_OK(kvsi_ef_open(&ef, g.data, sz),
			              "version %u", versions[i]);
		}
		const unsigned lows[] = {l + 1, l - 1, 0,  1,   56, 57,
		                         63,    64,    65, 128, 255};
		for (size_t i = 0; i < sizeof lows / sizeof lows[0]; i++) {
			unsigned bad = lows[i] & 0xFF;
			if (bad == l)
				continue;
			memcpy(g.data, enc, sz);
			g.data[17] = (uint8_t)bad;
			EXPECT_NOT_OK(kvsi_ef_open(&ef, g.data, sz),
			              "low_bits %u instead of %u", bad, l);
		}
		static const uint8_t shifts[] = {0, 1, 7, 9, 16, 255};
		for (size_t i = 0; i < sizeof shifts; i++) {
			memcpy(g.data, enc, sz);
			g.data[18] = shifts[i];
			EXPECT_NOT_OK(kvsi_ef_open(&ef, g.data, sz),
			              "sample_shift %u", shifts[i]);
		}
		for (size_t off = 19; off < 24; off++) {
			static const uint8_t vals[] = {1, 0x80, 0xFF};
			for (size_t i = 0; i < sizeof vals; i++) {
				memcpy(g.data, enc, sz);
				g.data[off] = vals[i];
				EXPECT_NOT_OK(kvsi_ef_open(&ef, g.data, sz),
				              "reserved byte %zu = 0x%02x", off,
				              vals[i]);
			}
		}

		/* count and max */
		const uint64_t counts[] = {n + 1,
		                           n - 1,
		                           0,
		                           2 * n,
		                           n + 63,
		                           n + 64,
		                           n + 256,
		                           n - 256,
		                           (1ull << 32) + n,
		                           KVS_EF_MAX_COUNT,
		                           KVS_EF_MAX_COUNT + 1,
		                           1ull << 60,
		                           1ull << 63,
		                           U64MAX};
		for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
			if (counts[i] == n)
				continue;
			memcpy(g.data, enc, sz);
			put_le64(g.data, counts[i]);
			int res = try_untrusted(g.data, sz, 2);
			if (res == 2)
				FAILF("count %" PRIu64 " instead of %" PRIu64
				      " accepted by open and validate",
				      counts[i], n);
			open_accepted += res == 1;
		}
		const uint64_t maxes[] = {max + 1,
		                          max - 1,
		                          0,
		                          1,
		                          max ^ (1ull << 63),
		                          max * 2,
		                          max + ((uint64_t)1 << l),
		                          max - ((uint64_t)1 << l),
		                          max + 256 * ((uint64_t)1 << l),
		                          U64MAX,
		                          U64MAX - 1};
		for (size_t i = 0; i < sizeof maxes / sizeof maxes[0]; i++) {
			if (maxes[i] == max)
				continue;
			memcpy(g.data, enc, sz);
			put_le64(g.data + 8, maxes[i]);
			int res = try_untrusted(g.data, sz, 2);
			if (res == 2)
				FAILF("max %" PRIu64 " instead of %" PRIu64
				      " accepted by open and validate",
				      maxes[i], max);
			open_accepted += res == 1;
		}
		/* Both, keeping l: count + 1 and max raised in proportion. */
		memcpy(g.data, enc, sz);
		put_le64(g.data, n + 1);
		put_le64(g.data + 8, max + (max / (n ? n : 1)));
		if (try_untrusted(g.data, sz, 2) == 2)
			FAILF("count + 1 and max + max/count accepted");
		guarded_free(&g);
		free(enc);
	}
	printf("[ INFO     ] %u count/max header changes passed kvsi_ef_open "
	       "(size unchanged) and were rejected by kvsi_ef_validate\n",
	       open_accepted);
	free_samples(s, ns);
	g_mode = "";
}

/* Headers crafted with a length consistent with a naive size computation:
 * an empty sequence with max != 0, and huge counts. */
static void test_open_rejects_crafted(void **state)
{
	(void)state;
	g_seq = "crafted headers";
	g_mode = "open";
	struct {
		uint64_t n, max;
	} cases[] = {
	    {0, 5},
	    {0, 300},
	    {0, U64MAX},
	    {1ull << 40, U64MAX},
	    {1ull << 60, U64MAX},
	    {1ull << 63, U64MAX},
	    {U64MAX, U64MAX},
	    {U64MAX, 0},
	    {KVS_EF_MAX_COUNT + 1, 0},
	};
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
		uint64_t n = cases[k].n, max = cases[k].max;
		unsigned l = test_ef_ref_low_bits(n, max);
		/* The layout's length where it is small, else a few. */
		size_t lens[4] = {24, 64, 4096, 0};
		size_t nl = 3;
		if (n < 1000000) {
			test_ef_layout L = test_ef_ref_layout(n, max);
			if (L.size < (1u << 20))
				lens[nl++] = L.size;
		}
		for (size_t j = 0; j < nl; j++) {
			guarded g = {0};
			assert_int_equal(guarded_alloc(&g, lens[j]), 0);
			memset(g.data, 0, lens[j]);
			put_le64(g.data, n);
			put_le64(g.data + 8, max);
			g.data[16] = KVS_EF_VERSION;
			g.data[17] = (uint8_t)l;
			g.data[18] = KVS_EF_SAMPLE_SHIFT;
			if (try_untrusted(g.data, lens[j], 2) == 2)
				FAILF("crafted count %" PRIu64 ", max %" PRIu64
				      " in %zu bytes accepted by open and "
				      "validate",
				      n, max, lens[j]);
			guarded_free(&g);
		}
	}
	g_mode = "";
}

/* Targeted corruptions of the bit vectors, samples and padding. */
static void test_validate_rejects(void **state)
{
	(void)state;
	sample_seq s[16];
	size_t ns = make_samples(s);
	uint64_t low_flips = 0, low_flips_valid = 0;
	for (size_t k = 0; k < ns; k++) {
		g_seq = s[k].name;
		g_mode = "validate";
		uint64_t n = s[k].n, max = n ? s[k].v[n - 1] : 0;
		test_ef_layout L = test_ef_ref_layout(n, max);
		size_t sz;
		uint8_t *enc = encode_copy(s[k].v, n, &sz);
		guarded g = {0};
		assert_int_equal(guarded_alloc(&g, sz), 0);
		uint64_t *w = heap_copy(s[k].v, n);

		/* Every bit of the upper array, padding included. */
		for (uint64_t bit = 0; bit < 64 * L.upper_words; bit++) {
			memcpy(g.data, enc, sz);
			g.data[L.upper_off + bit / 8] ^=
			    (uint8_t)(1u << (bit % 8));
			if (try_untrusted(g.data, sz, 1) == 2)
				FAILF("flipped upper bit %" PRIu64
				      " of %" PRIu64 " (%s) accepted",
				      bit, L.upper_bits,
				      bit < L.upper_bits ? "data" : "padding");
		}
		/* Low array padding bits. */
		for (uint64_t bit = n * L.l; bit < 64 * L.low_words; bit++) {
			memcpy(g.data, enc, sz);
			g.data[L.low_off + bit / 8] |=
			    (uint8_t)(1u << (bit % 8));
			if (try_untrusted(g.data, sz, 1) == 2)
				FAILF("low padding bit %" PRIu64 " set "
				      "(count * l = %" PRIu64 ") accepted",
				      bit, n * L.l);
		}
		/* Low array data bits: accepted exactly when the changed
		 * sequence is still valid. Every bit of the first and last
		 * elements and of small arrays, else 400 random bits. */
		uint64_t low_total = n * L.l;
		uint64_t trials = low_total <= 600 ? low_total : 400 + 2 * L.l;
		for (uint64_t t = 0; t < trials; t++) {
			uint64_t bit;
			if (low_total <= 600)
				bit = t;
			else if (t < L.l)
				bit = t; /* the first element */
			else if (t < 2 * L.l)
				bit = low_total - 2 * L.l + t; /* the last */
			else
				bit = test_rng_below(&g_rng, low_total);
			uint64_t i = bit / L.l;
			unsigned b = (unsigned)(bit % L.l);
			memcpy(g.data, enc, sz);
			g.data[L.low_off + bit / 8] ^=
			    (uint8_t)(1u << (bit % 8));
			w[i] ^= (uint64_t)1 << b;
			bool valid = is_monotone(w, n) && w[n - 1] == max;
			int res = try_untrusted(g.data, sz, 1);
			if ((res == 2) != valid)
				FAILF("low bit %u of element %" PRIu64
				      " flipped (%" PRIu64 " -> %" PRIu64
				      "): the sequence is %s but open/validate "
				      "%s it",
				      b, i, s[k].v[i], w[i],
				      valid ? "valid" : "invalid",
				      res == 2 ? "accepted" : "rejected");
			w[i] ^= (uint64_t)1 << b;
			low_flips++;
			low_flips_valid += valid;
		}
		/* Every sample changed in several ways. */
		uint64_t nsamples = L.one_samples + L.zero_samples;
		for (uint64_t j = 0; j < nsamples; j++) {
			size_t off = L.ones_off + 8 * j;
			uint64_t orig = test_get_le64(enc + off);
			uint64_t news[] = {orig + 1,
			                   orig - 1,
			                   0,
			                   U64MAX,
			                   orig ^ (1ull << 63),
			                   orig ^ (1ull << 32),
			                   orig + 64,
			                   orig - 64,
			                   orig + 256,
			                   orig ^ 2,
			                   L.upper_bits,
			                   L.upper_bits - 1};
			for (size_t t = 0; t < sizeof news / sizeof news[0];
			     t++) {
				if (news[t] == orig)
					continue;
				memcpy(g.data, enc, sz);
				put_le64(g.data + off, news[t]);
				if (try_untrusted(g.data, sz, 1) == 2)
					FAILF("%s sample %" PRIu64 " changed "
					      "from %" PRIu64 " to %" PRIu64
					      " accepted",
					      j < L.one_samples ? "one"
					                        : "zero",
					      j < L.one_samples
					          ? j
					          : j - L.one_samples,
					      orig, news[t]);
			}
		}
		/* Adjacent samples swapped. */
		for (uint64_t j = 0; j + 1 < nsamples; j++) {
			size_t off = L.ones_off + 8 * j;
			if (test_get_le64(enc + off) ==
			    test_get_le64(enc + off + 8))
				continue;
			memcpy(g.data, enc, sz);
			memcpy(g.data + off, enc + off + 8, 8);
			memcpy(g.data + off + 8, enc + off, 8);
			if (try_untrusted(g.data, sz, 1) == 2)
				FAILF("samples %" PRIu64 " and %" PRIu64
				      " swapped and accepted",
				      j, j + 1);
		}
		/* Two upper bits swapped (popcount kept): a one moved. */
		for (uint64_t t = 0; t < 300 && L.upper_bits > 1; t++) {
			uint64_t a = test_rng_below(&g_rng, L.upper_bits);
			uint64_t c = test_rng_below(&g_rng, L.upper_bits);
			bool ba = test_lsb_bit_at(enc + L.upper_off, a);
			bool bc = test_lsb_bit_at(enc + L.upper_off, c);
			if (ba == bc)
				continue;
			memcpy(g.data, enc, sz);
			g.data[L.upper_off + a / 8] ^= (uint8_t)(1u << (a % 8));
			g.data[L.upper_off + c / 8] ^= (uint8_t)(1u << (c % 8));
			/* The result is some valid sequence only if the
			 * samples and the last element still match; whatever
			 * validate accepts must be canonical (checked). */
			(void)try_untrusted(g.data, sz, 1);
		}
		free(w);
		guarded_free(&g);
		free(enc);
	}
	printf("[ INFO     ] %" PRIu64 " low-bit flips, %" PRIu64
	       " of them still valid sequences\n",
	       low_flips, low_flips_valid);
	free_samples(s, ns);
	g_mode = "";
}

/* Random mutations of valid serializations. */
static void test_mutation_fuzz(void **state)
{
	(void)state;
	sample_seq s[16];
	size_t ns = make_samples(s);
	const unsigned iters = 3000;
	for (size_t k = 0; k < ns; k++) {
		g_seq = s[k].name;
		g_mode = "fuzz";
		uint64_t n = s[k].n, max = n ? s[k].v[n - 1] : 0;
		test_ef_layout L = test_ef_ref_layout(n, max);
		size_t sz;
		uint8_t *enc = encode_copy(s[k].v, n, &sz);
		guarded g = {0};
		guarded f = {0};
		assert_int_equal(guarded_alloc(&g, sz), 0);
		assert_int_equal(guarded_alloc_front(&f, sz), 0);
		unsigned opened = 0, validated = 0;
		for (unsigned it = 0; it < iters; it++) {
			uint8_t *p = (it & 1) ? f.data : g.data;
			size_t len = sz;
			memcpy(p, enc, sz);
			unsigned muts = 1 + (unsigned)test_rng_below(&g_rng, 4);
			for (unsigned m = 0; m < muts; m++) {
				uint64_t kind = test_rng_below(&g_rng, 9);
				uint64_t rnd = test_rng_next(&g_rng);
				size_t at;
				switch (kind) {
				case 0: /* flip any bit */
				case 1:
					at = (size_t)test_rng_below(&g_rng, sz);
					p[at] ^= (uint8_t)(1u << (rnd & 7));
					break;
				case 2: /* any byte */
					at = (size_t)test_rng_below(&g_rng, sz);
					p[at] = (uint8_t)rnd;
					break;
				case 3: /* a bit of the header */
					at = (size_t)test_rng_below(&g_rng, 24);
					p[at] ^= (uint8_t)(1u << (rnd & 7));
					break;
				case 4: /* count or max moved a little */
					at = (rnd & 1) ? 8 : 0;
					put_le64(p + at,
					         test_get_le64(p + at) +
					             (uint64_t)((int64_t)(rnd >>
					                                  56) -
					                        128));
					break;
				case 5: /* a whole word of the body */
					if (sz > 24) {
						at = 24 +
						     8 * (size_t)test_rng_below(
						             &g_rng,
						             (sz - 24) / 8);
						put_le64(p + at,
						         (rnd & 3) == 0 ? 0
						         : (rnd & 3) == 1
						             ? U64MAX
						             : test_rng_next(
						                   &g_rng));
					}
					break;
				case 6: /* a bit of the samples or the tail */
					at = sz - 1 -
					     (size_t)test_rng_below(
					         &g_rng,
					         sz - L.ones_off + 1 < sz
					             ? sz - L.ones_off + 1
					             : sz);
					p[at] ^= (uint8_t)(1u << (rnd & 7));
					break;
				case 8: /* every word from one on: 0 or ~0 */
					if (sz > 24) {
						at = 24 +
						     8 * (size_t)test_rng_below(
						             &g_rng,
						             (sz - 24) / 8);
						memset(p + at,
						       (rnd & 1) ? 0xFF : 0,
						       sz - at);
					}
					break;
				default: /* a bit of the upper array */
					if (L.upper_words) {
						at = L.upper_off +
						     (size_t)test_rng_below(
						         &g_rng,
						         8 * L.upper_words);
						p[at] ^=
						    (uint8_t)(1u << (rnd & 7));
					}
					break;
				}
			}
			/* Now and then a truncated copy, still ending at the
			 * guard page. */
			if (it % 64 == 5 && sz > 0) {
				len = (size_t)test_rng_below(&g_rng, sz);
				memmove(g.data + (sz - len), p, len);
				p = g.data + (sz - len);
			}
			int res = try_untrusted(p, len, 2);
			opened += res >= 1;
			validated += res == 2;
		}
		printf("[ INFO     ] fuzz %-26s %u mutations: %u opened, %u "
		       "validated\n",
		       s[k].name, iters, opened, validated);
		guarded_free(&f);
		guarded_free(&g);
		free(enc);
	}
	free_samples(s, ns);
	g_mode = "";
}

/* The serialized form at addresses with every alignment mod 8. */
static void test_misaligned(void **state)
{
	(void)state;
	sample_seq s[16];
	size_t ns = make_samples(s);
	for (size_t k = 0; k < ns; k++) {
		g_seq = s[k].name;
		size_t sz;
		uint8_t *enc = encode_copy(s[k].v, s[k].n, &sz);
		uint8_t *buf = malloc(sz + 8);
		assert_non_null(buf);
		for (size_t a = 1; a < 8; a++) {
			memcpy(buf + a, enc, sz);
			kvsi_ef ef;
			g_mode = "misaligned";
			EXPECT_ST(kvsi_ef_open(&ef, buf + a, sz), KVS_OK,
			          "open at address offset %zu", a);
			EXPECT_ST(kvsi_ef_validate(&ef), KVS_OK,
			          "validate at address offset %zu", a);
			for (int mode = 0; mode < 2; mode++) {
				kvsi_ef_set_portable(&ef, mode == 0);
				g_mode = mode ? "misaligned, accelerated"
				              : "misaligned, portable";
				check_queries(&ef, s[k].v, s[k].n, 1);
			}
		}
		free(buf);
		free(enc);
	}
	free_samples(s, ns);
	g_mode = "";
}

static int setup(void **state)
{
	(void)state;
	g_rng.state = SEED;
	printf("[ INFO     ] seed 0x%016" PRIx64 "\n", (uint64_t)SEED);
	return 0;
}

/* An optional argument selects tests by name (cmocka glob pattern). */
int main(int argc, char **argv)
{
	test_filter_from_argv(argc, argv);
	const struct CMUnitTest tests[] = {
	    TEST(test_low_bits_formula),
	    TEST(test_size_limits),
	    TEST(test_empty),
	    TEST(test_single_element),
	    TEST(test_all_equal),
	    TEST(test_dense_and_strided),
	    TEST(test_sparse),
	    TEST(test_universe_edges),
	    TEST(test_every_low_width),
	    TEST(test_duplicates),
	    TEST(test_sample_boundaries),
	    TEST(test_large),
	    TEST(test_builder_errors),
	    TEST(test_open_rejects_lengths),
	    TEST(test_open_rejects_header),
	    TEST(test_open_rejects_crafted),
	    TEST(test_validate_rejects),
	    TEST(test_mutation_fuzz),
	    TEST(test_misaligned),
	};
	return cmocka_run_group_tests(tests, setup, NULL);
}
