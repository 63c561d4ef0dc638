/*
 * test_ef_large.c — Elias-Fano sequences of more than 2^32 elements.
 *
 * Registered in meson as the suite "large" (about 2 GiB of memory and a
 * minute): tools/test.sh runs it in the release build only, not under the
 * sanitizers.
 *
 * What it proves: with count = 2^32 + 1000, indices, bit positions and
 * sample numbers above 32 bits work end to end. Two sequences are built
 * with the streaming builder (kvsi_ef_builder_init, push_n of 4096 values at
 * a time and push across index 2^32, finish):
 *   "gaps"  x_i = i + floor(i / 3)  (l = 0, about 1.25 GiB of upper bits)
 *   "low1"  x_i = 2 i + 2 + (i & 1) (l = 1, 512 MiB of low bits, 1 GiB upper)
 * Each is opened and validated, then: the header and kvsi_ef_size match the
 * documented layout; select samples and upper/low bits at a few thousand
 * places (many past 2^32) hold the values the layout formula gives;
 * kvsi_ef_get, kvsi_ef_next_geq and the cursor agree with the closed form at
 * a few thousand indices, in particular across index 2^32 and at the end,
 * on both the portable and the accelerated paths; and a flipped upper bit
 * beyond bit 2^32 makes kvsi_ef_validate fail.
 *
 * Oracle: the closed forms above and a binary-search lower_bound over
 * them; the layout formula (test_ef_ref_layout, testutil.h) written from
 * the format description. The serialized bytes end against a PROT_NONE page.
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
#include <time.h>

#include <cmocka.h>

#include "kvseg/ef.h"
#include "testutil.h"

#define SEED  0x1A29Eull
#define BIG_N (((uint64_t)1 << 32) + 1000)

static test_rng g_rng = {SEED};

typedef struct big_seq {
	const char *name;
	uint64_t (*f)(uint64_t i);
	uint64_t n;
	unsigned l;
} big_seq;

static uint64_t f_gaps(uint64_t i)
{
	return i + i / 3;
}

static uint64_t f_low1(uint64_t i)
{
	return 2 * i + 2 + (i & 1);
}

static const char *g_seq = "";
static const char *g_mode = "";

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ---- the oracle ---------------------------------------------------------- */

/* The first index whose value is >= x (n if none). */
static uint64_t lower_bound_f(const big_seq *s, uint64_t x)
{
	uint64_t lo = 0, hi = s->n;
	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;
		if (s->f(mid) < x)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* ---- the indices checked --------------------------------------------------
 */

static size_t pick_indices(uint64_t n, uint64_t *out, size_t cap)
{
	size_t k = 0;
	const uint64_t two32 = (uint64_t)1 << 32;
	for (uint64_t i = 0; i < 700 && k < cap; i++)
		out[k++] = i;
	for (uint64_t i = two32 - 700; i < two32 + 700 && k < cap; i++)
		out[k++] = i;
	for (uint64_t i = ((uint64_t)1 << 31) - 300;
	     i < ((uint64_t)1 << 31) + 300 && k < cap; i++)
		out[k++] = i;
	for (uint64_t i = n - 700; i < n && k < cap; i++)
		out[k++] = i;
	while (k < cap)
		out[k++] = test_rng_below(&g_rng, n);
	return k;
}

/* ---- the run ------------------------------------------------------------- */

static void run_big(const big_seq *s)
{
	g_seq = s->name;
	g_mode = "build";
	const uint64_t n = s->n, max = s->f(n - 1);
	test_ef_layout L = test_ef_ref_layout(n, max);
	assert_int_equal(L.l, s->l);
	EXPECT_U64(kvsi_ef_low_bits(n, max), L.l, "kvsi_ef_low_bits");
	size_t sz = 0;
	EXPECT_U64(kvsi_ef_size(n, max, &sz), KVS_OK, "kvsi_ef_size status");
	EXPECT_U64(sz, L.size, "kvsi_ef_size vs the layout");
	printf("[ INFO     ] %s: count %" PRIu64 ", max %" PRIu64
	       ", l %u, %zu bytes (%.2f GiB)\n",
	       s->name, n, max, L.l, sz, (double)sz / (1u << 30));

	guarded g = {0};
	if (guarded_alloc(&g, sz) != 0) {
		printf("[ INFO     ] cannot map %zu bytes: skipped\n", sz);
		skip();
	}
	uint8_t *data = g.data;

	double t0 = now();
	kvsi_ef_builder b;
	EXPECT_U64(kvsi_ef_builder_init(&b, n, max, data, sz), KVS_OK,
	           "kvsi_ef_builder_init");
	/* push_n of 4096 values at a time, and single pushes across index
	 * 2^32 */
	const uint64_t two32 = (uint64_t)1 << 32;
	static uint64_t chunk[4096];
	for (uint64_t i = 0; i < n;) {
		if (i >= two32 - 5000 && i < two32 + 5000) {
			kvs_status st = kvsi_ef_builder_push(&b, s->f(i));
			if (st != KVS_OK)
				FAILF("push of element %" PRIu64 " (%" PRIu64
				      ") returned %d",
				      i, s->f(i), (int)st);
			i++;
			continue;
		}
		uint64_t k = n - i < 4096 ? n - i : 4096;
		if (i < two32 - 5000 && k > two32 - 5000 - i)
			k = two32 - 5000 - i;
		for (uint64_t j = 0; j < k; j++)
			chunk[j] = s->f(i + j);
		kvs_status st = kvsi_ef_builder_push_n(&b, chunk, (size_t)k);
		if (st != KVS_OK)
			FAILF("push_n of elements %" PRIu64 "..%" PRIu64
			      " returned %d (%" PRIu64 " pushed)",
			      i, i + k - 1, (int)st, b.pushed);
		i += k;
	}
	EXPECT_U64(kvsi_ef_builder_push(&b, max), KVS_E_RANGE,
	           "push past count");
	EXPECT_U64(kvsi_ef_builder_finish(&b), KVS_OK, "finish");
	double t1 = now();

	/* The header and, at many places, the layout. */
	g_mode = "layout";
	EXPECT_U64(test_get_le64(data), n, "header count");
	EXPECT_U64(test_get_le64(data + 8), max, "header max");
	EXPECT_U64(data[16], KVS_EF_VERSION, "header version");
	EXPECT_U64(data[17], L.l, "header low_bits");
	EXPECT_U64(data[18], KVS_EF_SAMPLE_SHIFT, "header sample_shift");
	uint64_t idx[6000];
	size_t nidx = pick_indices(n, idx, 6000);
	for (size_t k = 0; k < nidx; k++) {
		uint64_t i = idx[k], x = s->f(i);
		if (!test_lsb_bit_at(data + L.upper_off, (x >> L.l) + i))
			FAILF("upper bit %" PRIu64 " of element %" PRIu64
			      " not set",
			      (x >> L.l) + i, i);
		if (i + 1 < n && (s->f(i + 1) >> L.l) > (x >> L.l) &&
		    test_lsb_bit_at(data + L.upper_off, (x >> L.l) + i + 1))
			FAILF("upper bit after element %" PRIu64 " set", i);
		for (unsigned bit = 0; bit < L.l; bit++)
			if (test_lsb_bit_at(data + L.low_off, i * L.l + bit) !=
			    ((x >> bit) & 1))
				FAILF("low bit %u of element %" PRIu64, bit, i);
		/* The one sample and the zero sample around here. */
		uint64_t j = i / 256;
		EXPECT_U64(test_get_le64(data + L.ones_off + 8 * j),
		           (s->f(256 * j) >> L.l) + 256 * j,
		           "one sample %" PRIu64, j);
		uint64_t zj = (x >> L.l) / 256;
		if (zj < L.zero_samples) {
			uint64_t z =
			    256 * zj; /* zero number z sits after the
			               * elements whose high part <= z */
			EXPECT_U64(test_get_le64(data + L.zeros_off + 8 * zj),
			           z + lower_bound_f(s, (z + 1) << L.l),
			           "zero sample %" PRIu64, zj);
		}
	}

	g_mode = "open";
	kvsi_ef ef;
	EXPECT_U64(kvsi_ef_open(&ef, data, sz), KVS_OK, "kvsi_ef_open");
	double t2 = now();
	EXPECT_U64(kvsi_ef_validate(&ef), KVS_OK, "kvsi_ef_validate");
	double t3 = now();

	for (int mode = 0; mode < 2; mode++) {
		kvsi_ef_set_portable(&ef, mode == 0);
		g_mode = mode == 0 ? "portable" : "accelerated";
		for (size_t k = 0; k < nidx; k++) {
			uint64_t i = idx[k], x = s->f(i), v = 0;
			EXPECT_U64(kvsi_ef_get(&ef, i, &v), KVS_OK,
			           "get(%" PRIu64 ") status", i);
			EXPECT_U64(v, x, "get(%" PRIu64 ")", i);
			uint64_t probes[3] = {x, x - 1, x + 1};
			for (int p = 0; p < 3; p++) {
				if (p == 1 && x == 0)
					continue;
				uint64_t want = lower_bound_f(s, probes[p]);
				uint64_t got =
				    kvsi_ef_next_geq(&ef, probes[p], &v);
				EXPECT_U64(got, want, "next_geq(%" PRIu64 ")",
				           probes[p]);
				if (want < n)
					EXPECT_U64(v, s->f(want),
					           "next_geq(%" PRIu64
					           ") value",
					           probes[p]);
			}
		}
		for (int t = 0; t < 2000; t++) {
			uint64_t x = test_rng_below(&g_rng, max + 2);
			uint64_t want = lower_bound_f(s, x), v = 0;
			EXPECT_U64(kvsi_ef_next_geq(&ef, x, &v), want,
			           "next_geq(%" PRIu64 ")", x);
			if (want < n)
				EXPECT_U64(v, s->f(want),
				           "next_geq(%" PRIu64 ") value", x);
		}
		EXPECT_U64(kvsi_ef_next_geq(&ef, max + 1, NULL), n,
		           "next_geq(max + 1)");
		EXPECT_U64(kvsi_ef_next_geq(&ef, U64MAX, NULL), n,
		           "next_geq(2^64-1)");
		EXPECT_U64(kvsi_ef_next_geq(&ef, 0, NULL), 0, "next_geq(0)");
		uint64_t v;
		EXPECT_U64(kvsi_ef_get(&ef, n, &v), KVS_E_RANGE, "get(count)");

		/* Cursor walks across 2^31, 2^32 and to the end. */
		const uint64_t starts[] = {0,
		                           ((uint64_t)1 << 31) - 1000,
		                           ((uint64_t)1 << 32) - 1500,
		                           ((uint64_t)1 << 32),
		                           n - 1500,
		                           test_rng_below(&g_rng, n - 3000),
		                           test_rng_below(&g_rng, n - 3000)};
		for (size_t k = 0; k < sizeof starts / sizeof starts[0]; k++) {
			kvsi_ef_cursor c;
			EXPECT_U64(kvsi_ef_cursor_seek(&c, &ef, starts[k]),
			           KVS_OK, "cursor_seek(%" PRIu64 ")",
			           starts[k]);
			uint64_t i = starts[k];
			for (; i < n && i < starts[k] + 3000; i++) {
				if (!kvsi_ef_cursor_valid(&c))
					FAILF("cursor invalid at %" PRIu64, i);
				EXPECT_U64(c.index, i, "cursor index");
				EXPECT_U64(c.value, s->f(i),
				           "cursor value at %" PRIu64, i);
				kvsi_ef_cursor_next(&c);
			}
			if (i == n && kvsi_ef_cursor_valid(&c))
				FAILF("cursor valid past the end");
		}
		kvsi_ef_cursor c;
		EXPECT_U64(kvsi_ef_cursor_seek(&c, &ef, n), KVS_OK,
		           "cursor_seek(count)");
		if (kvsi_ef_cursor_valid(&c))
			FAILF("cursor valid at count");
		if (kvsi_ef_cursor_seek(&c, &ef, n + 1) == KVS_OK)
			FAILF("cursor_seek(count + 1) accepted");
	}
	double t4 = now();

	/* One upper bit flipped beyond bit 2^32: validate must fail. */
	g_mode = "corrupt";
	uint64_t i = ((uint64_t)1 << 32) + 17;
	uint64_t bit = (s->f(i) >> L.l) + i + 1;
	data[L.upper_off + bit / 8] ^= (uint8_t)(1u << (bit % 8));
	if (kvsi_ef_open(&ef, data, sz) == KVS_OK &&
	    kvsi_ef_validate(&ef) == KVS_OK)
		FAILF("upper bit %" PRIu64 " flipped and still valid", bit);
	data[L.upper_off + bit / 8] ^= (uint8_t)(1u << (bit % 8));
	double t5 = now();

	printf("[ INFO     ] %s: build %.1f s, validate %.1f s, queries "
	       "%.1f s, corrupt validate %.1f s\n",
	       s->name, t1 - t0, t3 - t2, t4 - t3, t5 - t4);
	guarded_free(&g);
	g_mode = "";
}

static void test_gaps_l0(void **state)
{
	(void)state;
	big_seq s = {"gaps (l 0)", f_gaps, BIG_N, 0};
	run_big(&s);
}

static void test_low1(void **state)
{
	(void)state;
	big_seq s = {"low1 (l 1)", f_low1, BIG_N, 1};
	run_big(&s);
}

int main(int argc, char **argv)
{
	if (sizeof(size_t) < 8) {
		printf("needs a 64-bit size_t\n");
		return 0;
	}
	test_filter_from_argv(argc, argv);
	printf("[ INFO     ] seed 0x%016" PRIx64 "\n", (uint64_t)SEED);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_gaps_l0),
	    cmocka_unit_test(test_low1),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
