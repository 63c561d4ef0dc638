/*
 * test_view.c — the merged newest-wins view (kvseg/view.h) against an
 * oracle built here: each stack's records kept as a sorted array of
 * (key, kind, value, source, ordinal) with newest-wins applied by hand
 * (ref_key_cmp's order, never libkvseg's).
 *
 * Random stacks of 1 to 6 segments in each of the four modes (typed and
 * raw framing, byte and bit profile) and in mixed modes, drawing their keys
 * from one small pool so that segments overlap, with tombstones where the
 * framing holds them; each read with and without KVS_VIEW_TOMBSTONES,
 * through the view's own cursors and through the caller's
 * (kvs_view_open_cursors). Checked: the full scan (key, kind, value,
 * source, ordinal), seek before the first key, on every key, between keys
 * and after the last, with after false and true, then a few steps on;
 * lookup; seek_ordinal on every record of one-segment views (and its
 * refusal on others); the empty view; argument errors.
 */
#include <inttypes.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kvseg/segment.h"
#include "kvseg/view.h"
#include "testutil.h"

#define SEED 0x71E3ull

static uint64_t g_seed;
static const char *g_seq = "";  /* the stack under test */
static const char *g_mode = ""; /* flags and how it is opened */
static char g_tmp[PATH_MAX];
static char g_seq_buf[200];

#include "segutil.h" /* after g_seq, g_mode and g_tmp */

#define MAX_SEGS 6
#define POOL_MAX 48

typedef struct mode {
	kvs_profile profile;
	kvs_framing framing;
	const char *name;
} mode;

static const mode MODES[] = {
    {KVS_PROFILE_BYTE, KVS_FRAMING_TYPED, "typed-byte"},
    {KVS_PROFILE_BYTE, KVS_FRAMING_RAW, "raw-byte"},
    {KVS_PROFILE_BIT, KVS_FRAMING_TYPED, "typed-bit"},
    {KVS_PROFILE_BIT, KVS_FRAMING_RAW, "raw-bit"},
};
#define N_MODES (sizeof MODES / sizeof MODES[0])

/* A key of the pool. */
typedef struct pkey {
	uint8_t bytes[4];
	uint64_t bits;
} pkey;

/* One record of the oracle: a binding, the segment and ordinal in it. */
typedef struct rec {
	const pkey *key;
	kvs_kind kind;
	uint8_t value[8];
	size_t value_len;
	size_t source;
	uint64_t ordinal;
} rec;

/* A stack: its segments and every record of each, by segment. */
typedef struct stack {
	size_t n;
	kvs_segment *segs[MAX_SEGS];
	rec *recs[MAX_SEGS];
	size_t counts[MAX_SEGS];
	/* the newest binding of each pool key that has one, in key order */
	rec *merged;
	size_t n_merged;
} stack;

static int pkey_cmp(const void *a, const void *b)
{
	const pkey *x = a, *y = b;
	return ref_key_cmp(x->bytes, x->bits, y->bytes, y->bits);
}

/* A pool of distinct keys in order: 1-3 bytes from a small alphabet
 * (byte keys), or 1-20 bits (bit keys, prefixes of one another often). */
static size_t make_pool(test_rng *r, bool bit_keys, pkey *pool)
{
	size_t n = 0, want = 8 + (size_t)test_rng_below(r, POOL_MAX - 8);

	for (size_t i = 0; i < want; i++) {
		pkey k = {{0}, 0};
		if (bit_keys) {
			k.bits = 1 + test_rng_below(r, 20);
			uint32_t x = (uint32_t)test_rng_next(r);
			for (uint64_t b = 0; b < k.bits; b++)
				test_msb_bit_set(k.bytes, b, (x >> b) & 1);
		} else {
			size_t len = 1 + (size_t)test_rng_below(r, 3);
			for (size_t b = 0; b < len; b++)
				k.bytes[b] =
				    (uint8_t)("abcz\xff"[test_rng_below(r, 5)]);
			k.bits = 8 * len;
		}
		pool[n++] = k;
	}
	qsort(pool, n, sizeof *pool, pkey_cmp);
	size_t out = 0;
	for (size_t i = 0; i < n; i++)
		if (out == 0 || pkey_cmp(&pool[out - 1], &pool[i]) != 0)
			pool[out++] = pool[i];
	return out;
}

/* Writes segment i of the stack in mode m from a random subset of the
 * pool (in pool order, so sorted), recording it in the oracle. */
static void make_segment(test_rng *r, stack *s, size_t i, const mode *m,
                         const pkey *pool, size_t n_pool)
{
	char path[PATH_MAX], name[64];
	kvs_writer_options o = {0};
	kvs_writer *w = NULL;
	kvs_error err = {0};
	uint64_t density = 1 + test_rng_below(r, 4); /* in 4 */

	snprintf(name, sizeof name, "seg-%zu.kvs", i);
	path_join(path, g_tmp, name);
	o.profile = m->profile;
	o.framing = m->framing;
	o.restart_interval = (uint32_t)(1 + test_rng_below(r, 4));
	o.sequence = i;
	o.flags = KVS_WRITER_NO_SYNC;
	CHECK_ST(kvs_writer_open(&w, path, &o, &err), KVS_OK, "%s",
	         err.message);
	s->recs[i] = calloc(n_pool + 1, sizeof(rec));
	assert_non_null(s->recs[i]);
	s->counts[i] = 0;
	for (size_t k = 0; k < n_pool; k++) {
		if (test_rng_below(r, 4) >= density)
			continue;
		rec *x = &s->recs[i][s->counts[i]];
		x->key = &pool[k];
		x->kind =
		    m->framing == KVS_FRAMING_TYPED && test_rng_below(r, 4) == 0
		        ? KVS_KIND_TOMBSTONE
		        : KVS_KIND_VALUE;
		x->value_len =
		    x->kind == KVS_KIND_VALUE
		        ? (size_t)test_rng_below(r, sizeof x->value + 1)
		        : 0;
		rand_bytes(r, x->value, x->value_len);
		x->source = i;
		x->ordinal = s->counts[i]++;
		CHECK_ST(kvs_writer_add(w, x->key->bytes, x->key->bits, x->kind,
		                        x->value, x->value_len, &err),
		         KVS_OK, "%s", err.message);
	}
	CHECK_ST(kvs_writer_finish(w, &err), KVS_OK, "%s", err.message);
	kvs_writer_free(w);
	CHECK_ST(kvs_segment_open(&s->segs[i], path, &err), KVS_OK, "%s",
	         err.message);
	unlink(path); /* the mapping stays */
}

/* The oracle's merge: for each pool key, the newest segment's record. */
static void merge_by_hand(stack *s, const pkey *pool, size_t n_pool)
{
	s->merged = calloc(n_pool + 1, sizeof(rec));
	assert_non_null(s->merged);
	s->n_merged = 0;
	for (size_t k = 0; k < n_pool; k++) {
		const rec *newest = NULL;
		for (size_t i = 0; i < s->n; i++)
			for (size_t j = 0; j < s->counts[i]; j++)
				if (s->recs[i][j].key == &pool[k])
					newest = &s->recs[i][j];
		if (newest)
			s->merged[s->n_merged++] = *newest;
	}
}

static void stack_free(stack *s)
{
	for (size_t i = 0; i < s->n; i++) {
		kvs_segment_unref(s->segs[i]);
		free(s->recs[i]);
	}
	free(s->merged);
	memset(s, 0, sizeof *s);
}

/* What the view should show: recs[0 .. n) less the hidden tombstones. */
static size_t visible(const rec *recs, size_t n, bool tombstones, rec *out)
{
	size_t m = 0;
	for (size_t i = 0; i < n; i++)
		if (tombstones || recs[i].kind != KVS_KIND_TOMBSTONE)
			out[m++] = recs[i];
	return m;
}

/* The view is on want (NULL: at the end). */
static void expect_at(kvs_view *v, const rec *want, const char *what)
{
	if (!want) {
		if (kvs_view_valid(v) || kvs_view_cursor(v) != NULL)
			FAILF("%s: a binding where the oracle has none", what);
		EXPECT_U64(kvs_view_source(v), kvs_view_count(v),
		           "%s: source at the end", what);
		return;
	}
	if (!kvs_view_valid(v))
		FAILF("%s: at the end, the oracle has a binding", what);
	kvs_cursor *c = kvs_view_cursor(v);
	assert_non_null(c);
	uint64_t bits;
	const uint8_t *key = kvs_cursor_key(c, &bits);
	if (ref_key_cmp(key, bits, want->key->bytes, want->key->bits) != 0)
		FAILF("%s: another key (%" PRIu64 " bits, oracle %" PRIu64 ")",
		      what, bits, want->key->bits);
	EXPECT_U64(kvs_view_source(v), want->source, "%s: source", what);
	EXPECT_U64(kvs_cursor_ordinal(c), want->ordinal, "%s: ordinal", what);
	EXPECT_U64(kvs_cursor_kind(c), want->kind, "%s: kind", what);
	const uint8_t *value;
	size_t value_len;
	CHECK_ST(kvs_cursor_value(c, &value, &value_len), KVS_OK, "%s", what);
	EXPECT_U64(value_len, want->value_len, "%s: value length", what);
	if (value_len && memcmp(value, want->value, value_len) != 0)
		FAILF("%s: another value", what);
}

/* The first of want[0 .. n) at or after key (after: past it). */
static size_t oracle_seek(const rec *want, size_t n, const uint8_t *key,
                          uint64_t bits, bool after)
{
	size_t i = 0;
	while (i < n) {
		int cmp = ref_key_cmp(want[i].key->bytes, want[i].key->bits,
		                      key, bits);
		if (cmp > 0 || (cmp == 0 && !after))
			break;
		i++;
	}
	return i;
}

/* Seeks key both ways, steps up to 3 on, and looks it up. */
static void check_seek(kvs_view *v, const rec *want, size_t n,
                       const uint8_t *key, uint64_t bits, const char *what)
{
	char step[96];

	for (int after = 0; after < 2; after++) {
		size_t at = oracle_seek(want, n, key, bits, after);
		CHECK_ST(kvs_view_seek(v, key, bits, after), KVS_OK, "%s",
		         what);
		for (size_t k = 0; k < 4; k++) {
			snprintf(step, sizeof step, "%s, after=%d, +%zu", what,
			         after, k);
			expect_at(v, at + k < n ? &want[at + k] : NULL, step);
			CHECK_ST(kvs_view_next(v), KVS_OK, "%s", step);
		}
	}
	size_t at = oracle_seek(want, n, key, bits, false);
	bool found = true,
	     exact = at < n && ref_key_cmp(want[at].key->bytes,
	                                   want[at].key->bits, key, bits) == 0;
	CHECK_ST(kvs_view_lookup(v, key, bits, &found), KVS_OK, "%s", what);
	if (found != exact)
		FAILF("%s: lookup found %d, the oracle %d", what, found, exact);
	expect_at(v, at < n ? &want[at] : NULL, what);
}

/* Every check of one view against want[0 .. n). */
static void check_view(test_rng *r, kvs_view *v, const stack *s,
                       const rec *want, size_t n)
{
	char what[96];
	size_t i = 0;

	/* the full scan, and next at the end stays there */
	CHECK_ST(kvs_view_first(v), KVS_OK, "first");
	for (; i <= n; i++) {
		snprintf(what, sizeof what, "scan %zu of %zu", i, n);
		expect_at(v, i < n ? &want[i] : NULL, what);
		CHECK_ST(kvs_view_next(v), KVS_OK, "%s", what);
	}
	expect_at(v, NULL, "next at the end");

	/* seeks: before the first (the empty key), on and just past each
	 * key, between keys (random keys), after the last */
	check_seek(v, want, n, NULL, 0, "the empty key");
	for (i = 0; i < n; i++) {
		const pkey *k = want[i].key;
		uint8_t longer[5] = {0};
		snprintf(what, sizeof what, "key %zu", i);
		check_seek(v, want, n, k->bytes, k->bits, what);
		/* the key and one more bit (or byte): just past it */
		memcpy(longer, k->bytes, sizeof k->bytes);
		test_msb_bit_set(longer, k->bits, 1);
		snprintf(what, sizeof what, "key %zu + 1 bit", i);
		check_seek(v, want, n, longer, k->bits + 1, what);
	}
	for (i = 0; i < 16; i++) {
		uint8_t key[3];
		uint64_t bits = 1 + test_rng_below(r, 24);
		rand_bytes(r, key, sizeof key);
		snprintf(what, sizeof what, "random key %zu", i);
		check_seek(v, want, n, key, bits, what);
	}
	const uint8_t last[6] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
	check_seek(v, want, n, last, 48, "after the last key");

	/* seek_ordinal: one-segment views only */
	if (s->n != 1) {
		CHECK_ST(kvs_view_seek_ordinal(v, 0), KVS_E_INVAL,
		         "seek_ordinal over %zu segments", s->n);
		expect_at(v, NULL, "after a refused seek_ordinal");
		return;
	}
	for (uint64_t o = 0; o <= s->counts[0] + 1; o++) {
		size_t at = 0;
		while (at < n && want[at].ordinal < o)
			at++;
		snprintf(what, sizeof what, "seek_ordinal %" PRIu64, o);
		CHECK_ST(kvs_view_seek_ordinal(v, o), KVS_OK, "%s", what);
		expect_at(v, at < n ? &want[at] : NULL, what);
		if (at < n) {
			CHECK_ST(kvs_view_next(v), KVS_OK, "%s", what);
			expect_at(v, at + 1 < n ? &want[at + 1] : NULL, what);
		}
	}
}

/* Both flags, both ways of opening, on stack s. */
static void check_stack(test_rng *r, const stack *s)
{
	rec *want = calloc(s->n_merged + 1, sizeof *want);
	kvs_cursor *cur[MAX_SEGS];
	assert_non_null(want);
	for (int t = 0; t < 2; t++) {
		unsigned flags = t ? KVS_VIEW_TOMBSTONES : 0;
		size_t n = visible(s->merged, s->n_merged, t, want);
		kvs_view *v = NULL;

		g_mode = t ? "tombstones, own cursors" : "own cursors";
		CHECK_ST(kvs_view_open(&v, s->segs, s->n, flags), KVS_OK,
		         "open");
		EXPECT_U64(kvs_view_count(v), s->n, "count");
		expect_at(v, NULL, "a new view");
		check_view(r, v, s, want, n);
		kvs_view_close(v);

		g_mode =
		    t ? "tombstones, caller's cursors" : "caller's cursors";
		for (size_t i = 0; i < s->n; i++)
			CHECK_ST(kvs_cursor_open(&cur[i], s->segs[i]), KVS_OK,
			         "cursor %zu", i);
		CHECK_ST(kvs_view_open_cursors(&v, cur, s->n, flags), KVS_OK,
		         "open_cursors");
		check_view(r, v, s, want, n);
		kvs_view_close(v);
		/* still the caller's: open, and usable */
		for (size_t i = 0; i < s->n; i++) {
			CHECK_ST(kvs_cursor_first(cur[i]), KVS_OK,
			         "cursor %zu after close", i);
			CHECK(kvs_cursor_valid(cur[i]) == (s->counts[i] > 0),
			      "cursor %zu after close", i);
			kvs_cursor_close(cur[i]);
		}
	}
	free(want);
}

/* Random stacks; mode_of picks each segment's mode (MODES index). */
static void run_stacks(uint64_t tag, int rounds, bool bit_keys,
                       unsigned (*mode_of)(test_rng *r, unsigned fixed),
                       unsigned fixed)
{
	test_rng r = test_rng_for(g_seed, tag);
	pkey pool[POOL_MAX];

	for (int round = 0; round < rounds; round++) {
		stack s = {0};
		size_t n_pool = make_pool(&r, bit_keys, pool);
		int o;

		s.n = 1 + (size_t)test_rng_below(&r, MAX_SEGS);
		o = snprintf(g_seq_buf, sizeof g_seq_buf,
		             "round %d: %zu segments", round, s.n);
		for (size_t i = 0; i < s.n; i++) {
			const mode *m = &MODES[mode_of(&r, fixed)];
			o += snprintf(g_seq_buf + o,
			              sizeof g_seq_buf - (size_t)o, " %s",
			              m->name);
			g_seq = g_seq_buf;
			make_segment(&r, &s, i, m, pool, n_pool);
		}
		merge_by_hand(&s, pool, n_pool);
		check_stack(&r, &s);
		stack_free(&s);
	}
	g_seq = "";
	g_mode = "";
}

static unsigned mode_fixed(test_rng *r, unsigned fixed)
{
	(void)r;
	return fixed;
}

/* Byte keys fit every mode. */
static unsigned mode_any(test_rng *r, unsigned fixed)
{
	(void)fixed;
	return (unsigned)test_rng_below(r, N_MODES);
}

/* Bit keys need the bit profile; either framing. */
static unsigned mode_bit(test_rng *r, unsigned fixed)
{
	(void)fixed;
	return 2 + (unsigned)test_rng_below(r, 2);
}

static void test_each_mode(void **state)
{
	(void)state;
	for (unsigned m = 0; m < N_MODES; m++)
		run_stacks(1 + m, 12, MODES[m].profile == KVS_PROFILE_BIT,
		           mode_fixed, m);
}

static void test_mixed_modes(void **state)
{
	(void)state;
	run_stacks(10, 16, false, mode_any, 0);
	run_stacks(11, 16, true, mode_bit, 0);
}

static void test_empty(void **state)
{
	kvs_view *v = NULL;
	(void)state;

	CHECK_ST(kvs_view_open(&v, NULL, 0, 0), KVS_OK, "no segments");
	EXPECT_U64(kvs_view_count(v), 0, "count");
	CHECK_ST(kvs_view_first(v), KVS_OK, "first");
	expect_at(v, NULL, "first");
	CHECK_ST(kvs_view_seek(v, "a", 8, false), KVS_OK, "seek");
	expect_at(v, NULL, "seek");
	CHECK_ST(kvs_view_next(v), KVS_OK, "next");
	CHECK_ST(kvs_view_seek_ordinal(v, 0), KVS_E_INVAL, "seek_ordinal");
	kvs_view_close(v);
	CHECK_ST(kvs_view_open_cursors(&v, NULL, 0, KVS_VIEW_TOMBSTONES),
	         KVS_OK, "no cursors");
	CHECK_ST(kvs_view_first(v), KVS_OK, "first");
	expect_at(v, NULL, "first");
	kvs_view_close(v);
}

static void test_arguments(void **state)
{
	test_rng r = test_rng_for(g_seed, 20);
	pkey pool[POOL_MAX];
	size_t n_pool = make_pool(&r, false, pool);
	stack s = {.n = 1};
	kvs_segment *segs[2];
	kvs_cursor *cur[2] = {NULL, NULL};
	kvs_view *v = (kvs_view *)&s; /* not NULL: open must clear it */
	bool found;
	(void)state;

	g_seq = "arguments";
	make_segment(&r, &s, 0, &MODES[0], pool, n_pool);
	segs[0] = s.segs[0];
	segs[1] = NULL;
	CHECK_ST(kvs_view_open(NULL, segs, 1, 0), KVS_E_INVAL, "out NULL");
	CHECK_ST(kvs_view_open(&v, NULL, 1, 0), KVS_E_INVAL, "segs NULL");
	CHECK(v == NULL, "out cleared on failure");
	CHECK_ST(kvs_view_open(&v, segs, 2, 0), KVS_E_INVAL, "segs[1] NULL");
	CHECK_ST(kvs_view_open(&v, segs, 1, 2), KVS_E_INVAL, "unknown flag");
	CHECK_ST(kvs_view_open(&v, segs, SIZE_MAX, 0), KVS_E_RANGE,
	         "n too large");
	CHECK_ST(kvs_view_open(&v, segs, SIZE_MAX / sizeof(void *), 0),
	         KVS_E_RANGE, "n * pointer overflows");
	CHECK_ST(kvs_view_open_cursors(NULL, cur, 1, 0), KVS_E_INVAL,
	         "out NULL");
	CHECK_ST(kvs_view_open_cursors(&v, NULL, 1, 0), KVS_E_INVAL,
	         "cur NULL");
	CHECK_ST(kvs_view_open_cursors(&v, cur, 1, 0), KVS_E_INVAL,
	         "cur[0] NULL");
	CHECK_ST(kvs_view_open_cursors(&v, cur, 1, ~0u), KVS_E_INVAL,
	         "unknown flags");
	CHECK(v == NULL, "out cleared on failure");

	/* a NULL view */
	CHECK_ST(kvs_view_first(NULL), KVS_E_INVAL, "first(NULL)");
	CHECK_ST(kvs_view_seek(NULL, "a", 8, false), KVS_E_INVAL, "seek(NULL)");
	CHECK_ST(kvs_view_lookup(NULL, "a", 8, &found), KVS_E_INVAL,
	         "lookup(NULL)");
	CHECK_ST(kvs_view_seek_ordinal(NULL, 0), KVS_E_INVAL,
	         "seek_ordinal(NULL)");
	CHECK_ST(kvs_view_next(NULL), KVS_E_INVAL, "next(NULL)");
	CHECK(!kvs_view_valid(NULL), "valid(NULL)");
	CHECK(kvs_view_cursor(NULL) == NULL, "cursor(NULL)");
	EXPECT_U64(kvs_view_source(NULL), 0, "source(NULL)");
	EXPECT_U64(kvs_view_count(NULL), 0, "count(NULL)");
	kvs_view_close(NULL);

	/* a key pointer missing, a found pointer missing */
	CHECK_ST(kvs_view_open(&v, segs, 1, 0), KVS_OK, "open");
	CHECK_ST(kvs_view_seek(v, NULL, 8, false), KVS_E_INVAL, "key NULL");
	CHECK_ST(kvs_view_lookup(v, "a", 8, NULL), KVS_E_INVAL, "found NULL");
	kvs_view_close(v);
	stack_free(&s);
	g_seq = "";
}

static int group_setup(void **state)
{
	(void)state;
	return tmpdir_setup("test_view");
}

static int group_teardown(void **state)
{
	(void)state;
	return tmpdir_teardown();
}

int main(int argc, char **argv)
{
	test_filter_from_env();
	test_filter_from_argv(argc, argv);
	g_seed = test_seed_from_env("test_view", SEED);
	const struct CMUnitTest tests[] = {
	    TEST(test_each_mode),
	    TEST(test_mixed_modes),
	    TEST(test_empty),
	    TEST(test_arguments),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
