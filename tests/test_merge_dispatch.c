/*
 * test_merge_dispatch.c — every loop of the merge's dispatch table
 * (core/src/merge.c, select_loop) against the general loop.
 *
 * The in-line engines are second implementations of the general loop
 * (kvsi_merge_tree_any), kept for speed; this holds each to it. For every cell
 * of the table — output profile byte/bit x framing typed/raw x 2, 3 and 7
 * inputs x tombstones kept/dropped x disjoint/overlapping keys x short and
 * long keys and values — the inputs are merged twice, once as kvs_merge
 * chooses and once with the general loop forced (merge_hooks), and the two
 * output files must be byte-identical; the loop that ran must be the one
 * the cell is meant for (so a change to the table, or to what a fast path
 * accepts, shows here). Mixed framings (the cursor loops) and mixed
 * profiles (the "any" loops) have cells too. test_merge.c holds the merge
 * itself to an independent oracle; this file only compares loops.
 *
 * The seed is printed (KVSEG_TEST_SEED changes it).
 */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "kvseg/merge.h"
#include "kvseg/segment.h"
#include "testutil.h"
#include "../core/src/merge_internal.h"

static const char *g_seq = "";
static const char *g_mode = "";
static char g_case[256];
static uint64_t g_seed;
static char g_tmp[PATH_MAX];

typedef struct rec {
	uint8_t *key;
	uint64_t bits;
	bool tomb;
	uint8_t *value;
	size_t vlen;
} rec;

typedef struct cell {
	kvs_profile profile; /* the output's */
	kvs_framing framing; /* the output's */
	size_t n;            /* inputs */
	bool drop;
	bool overlap;
	bool big;          /* long keys and values */
	int mix;           /* 0: inputs as the output; 1: framings; 2: profiles */
	merge_loop expect; /* the loop kvs_merge must choose */
} cell;

/* MSB-first bit-string order; a prefix comes first. */
static int key_cmp(const rec *a, const rec *b)
{
	uint64_t n = a->bits < b->bits ? a->bits : b->bits;
	size_t whole = (size_t)(n / 8);
	int c = memcmp(a->key, b->key, whole);
	if (c)
		return c;
	for (uint64_t i = 8 * (uint64_t)whole; i < n; i++) {
		int x = (a->key[i / 8] >> (7 - i % 8)) & 1;
		int y = (b->key[i / 8] >> (7 - i % 8)) & 1;
		if (x != y)
			return x - y;
	}
	return (a->bits > b->bits) - (a->bits < b->bits);
}

static int rec_qcmp(const void *a, const void *b)
{
	return key_cmp(a, b);
}

static void gen_key(rec *x, const cell *c, bool whole_bytes, test_rng *r)
{
	static const uint8_t alphabet[] = {0x00, 0x01, 0x61, 0x62, 0xff};
	size_t len = c->big ? 40 + (size_t)test_rng_below(r, 260)
	                    : 1 + (size_t)test_rng_below(r, 12);
	x->key = calloc(1, len);
	assert_non_null(x->key);
	for (size_t i = 0; i < len; i++) {
		if (c->big && i < 32)
			x->key[i] = (uint8_t)('k' + i % 3); /* a shared prefix */
		else if (test_rng_below(r, 2))
			x->key[i] = alphabet[test_rng_below(r, sizeof alphabet)];
		else
			x->key[i] = (uint8_t)test_rng_next(r);
	}
	x->bits = 8 * (uint64_t)len;
	if (!whole_bytes) { /* odd bit lengths, the bits past the end zero */
		unsigned cut = (unsigned)test_rng_below(r, 8);
		if (cut && len > 1) {
			x->bits -= cut;
			x->key[len - 1] &= (uint8_t)(0xff << cut);
		}
	}
}

static void gen_value(rec *x, const cell *c, test_rng *r)
{
	size_t len;
	if (!c->big)
		len = (size_t)test_rng_below(r, 17);
	else if (test_rng_below(r, 4) == 0)
		len = 4000 + (size_t)test_rng_below(r, 1200); /* past the loops'
		                                              * in-line records */
	else
		len = (size_t)test_rng_below(r, 600);
	x->vlen = len;
	x->value = malloc(len + 1);
	assert_non_null(x->value);
	for (size_t i = 0; i < len; i++)
		x->value[i] = (uint8_t)test_rng_next(r);
}

/* Sorts v and removes keys that repeat (keeping the first). */
static size_t sort_unique(rec *v, size_t n)
{
	qsort(v, n, sizeof *v, rec_qcmp);
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		if (k && key_cmp(&v[k - 1], &v[i]) == 0) {
			free(v[i].key);
			continue;
		}
		v[k++] = v[i];
	}
	return k;
}

static kvs_profile input_profile(const cell *c, size_t i)
{
	if (c->mix == 2)
		return i % 2 ? KVS_PROFILE_BIT : KVS_PROFILE_BYTE;
	return c->profile;
}

static kvs_framing input_framing(const cell *c, size_t i)
{
	if (c->mix == 1)
		return i % 2 ? KVS_FRAMING_RAW : KVS_FRAMING_TYPED;
	return c->framing;
}

static kvs_writer_options out_opts(kvs_profile p, kvs_framing f, uint64_t seq)
{
	kvs_writer_options o;
	memset(&o, 0, sizeof o);
	o.profile = p;
	o.framing = f;
	o.sequence = seq;
	o.flags = KVS_WRITER_NO_SYNC;
	return o;
}

/* Writes input i of the cell: records drawn from keys (nk of them, sorted,
 * unique), each with probability 1/share when the keys overlap, else the
 * ones assigned to it. */
static kvs_segment *write_input(const char *path, const cell *c, size_t i,
                                const rec *keys, size_t nk,
                                const size_t *owner, test_rng *r)
{
	kvs_writer_options o =
	    out_opts(input_profile(c, i), input_framing(c, i), i + 1);
	kvs_writer *w = NULL;
	kvs_error err;
	kvs_status st = kvs_writer_open(&w, path, &o, &err);
	assert_int_equal(st, KVS_OK);
	bool typed = o.framing == KVS_FRAMING_TYPED;
	size_t written = 0;
	for (size_t k = 0; k < nk; k++) {
		bool mine = c->overlap ? test_rng_below(r, c->n) < 2
		                       : owner[k] == i;
		if (!mine)
			continue;
		rec x = keys[k];
		/* a tombstone now and then, never an input's first record
		 * (the in-line loops of a strong delete start from a value) */
		x.tomb = typed && written > 0 && test_rng_below(r, 5) == 0;
		if (x.tomb)
			x.vlen = 0;
		else
			gen_value(&x, c, r);
		st = kvs_writer_add(w, x.key, x.bits,
		                    x.tomb ? KVS_KIND_TOMBSTONE : KVS_KIND_VALUE,
		                    x.value, x.vlen, &err);
		if (st != KVS_OK)
			fail_msg("%s: input %zu: add: %s", g_case, i, err.message);
		if (!x.tomb)
			free(x.value);
		written++;
	}
	st = kvs_writer_finish(w, &err);
	if (st != KVS_OK)
		fail_msg("%s: input %zu: finish: %s", g_case, i, err.message);
	kvs_writer_free(w);
	kvs_segment *s = NULL;
	assert_int_equal(kvs_segment_open(&s, path, &err), KVS_OK);
	return s;
}

static uint8_t *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	uint8_t *b = malloc((size_t)n + 1);
	assert_non_null(b);
	assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	*len = (size_t)n;
	return b;
}

static merge_loop merge_once(kvs_segment **segs, const cell *c,
                             const char *out, bool general,
                             kvs_merge_stats *stats)
{
	kvs_merge_options mo;
	memset(&mo, 0, sizeof mo);
	mo.output = out_opts(c->profile, c->framing, 100);
	mo.drop_tombstones = c->drop;
	mo.includes_oldest = true;
	merge_hooks h = {.force_general = general};
	kvs_error err;
	kvs_status st =
	    kvsi_merge_hooked(segs, c->n, out, &mo, stats, &err, &h);
	if (st != KVS_OK)
		fail_msg("%s: %s merge: %s", g_case,
		         general ? "general" : "chosen", err.message);
	return h.loop;
}

static void run_cell(const cell *c, test_rng *r)
{
	snprintf(g_case, sizeof g_case, "%s-%s n=%zu %s %s %s%s expecting %s",
	         c->profile == KVS_PROFILE_BYTE ? "byte" : "bit",
	         c->framing == KVS_FRAMING_TYPED ? "typed" : "raw", c->n,
	         c->drop ? "drop" : "keep",
	         c->overlap ? "overlapping" : "disjoint",
	         c->big ? "long" : "short",
	         c->mix == 1   ? " mixed-framing"
	         : c->mix == 2 ? " mixed-profile"
	                       : "",
	         kvsi_merge_loop_name(c->expect));
	size_t per = c->big ? 120 : 500;
	size_t nk = per * c->n;
	rec *keys = calloc(nk, sizeof *keys);
	size_t *owner = calloc(nk, sizeof *owner);
	assert_non_null(keys);
	assert_non_null(owner);
	bool whole = c->profile == KVS_PROFILE_BYTE || c->mix == 2;
	for (size_t k = 0; k < nk; k++)
		gen_key(&keys[k], c, whole, r);
	nk = sort_unique(keys, nk);
	for (size_t k = 0; k < nk; k++)
		owner[k] = (size_t)test_rng_below(r, c->n);
	kvs_segment *segs[8];
	char path[PATH_MAX + 32];
	for (size_t i = 0; i < c->n; i++) {
		snprintf(path, sizeof path, "%s/in%zu", g_tmp, i);
		segs[i] = write_input(path, c, i, keys, nk, owner, r);
	}
	char chosen[PATH_MAX + 32], general[PATH_MAX + 32];
	snprintf(chosen, sizeof chosen, "%s/chosen", g_tmp);
	snprintf(general, sizeof general, "%s/general", g_tmp);
	kvs_merge_stats s1, s2;
	merge_loop ran = merge_once(segs, c, chosen, false, &s1);
	merge_loop gen = merge_once(segs, c, general, true, &s2);
	if (ran != c->expect)
		fail_msg("%s: ran %s", g_case, kvsi_merge_loop_name(ran));
	if (gen != MERGE_LOOP_TREE_ANY)
		fail_msg("%s: forced general ran %s", g_case,
		         kvsi_merge_loop_name(gen));
	if (memcmp(&s1, &s2, sizeof s1) != 0)
		fail_msg("%s: stats differ: in %llu/%llu out %llu/%llu "
		         "replaced %llu/%llu dropped %llu/%llu",
		         g_case, (unsigned long long)s1.input_records,
		         (unsigned long long)s2.input_records,
		         (unsigned long long)s1.output_records,
		         (unsigned long long)s2.output_records,
		         (unsigned long long)s1.replaced,
		         (unsigned long long)s2.replaced,
		         (unsigned long long)s1.dropped,
		         (unsigned long long)s2.dropped);
	if (c->overlap && s1.replaced == 0)
		fail_msg("%s: no key overlapped", g_case);
	if (c->drop && c->framing == KVS_FRAMING_TYPED && c->mix != 1 &&
	    s1.dropped == 0)
		fail_msg("%s: no tombstone dropped", g_case);
	size_t la, lb;
	uint8_t *a = slurp(chosen, &la), *b = slurp(general, &lb);
	if (la != lb)
		fail_msg("%s: %zu bytes, the general loop's %zu", g_case, la,
		         lb);
	for (size_t i = 0; i < la; i++)
		if (a[i] != b[i])
			fail_msg("%s: byte %zu differs from the general loop's",
			         g_case, i);
	free(a);
	free(b);
	unlink(chosen);
	unlink(general);
	for (size_t i = 0; i < c->n; i++) {
		kvs_segment_unref(segs[i]);
		snprintf(path, sizeof path, "%s/in%zu", g_tmp, i);
		unlink(path);
	}
	for (size_t k = 0; k < nk; k++)
		free(keys[k].key);
	free(keys);
	free(owner);
}

/* The loop the table is meant to choose for inputs in the output's mode. */
static merge_loop inline_loop(kvs_profile p, kvs_framing f, size_t n,
                              bool drop)
{
	bool two = n == 2, d = drop && f == KVS_FRAMING_TYPED;
	if (p == KVS_PROFILE_BYTE)
		return two ? MERGE_LOOP_TWO_BYTES_INLINE
		           : MERGE_LOOP_TREE_BYTES_INLINE;
	if (two)
		return d ? MERGE_LOOP_TWO_BITS_DROP : MERGE_LOOP_TWO_BITS_INLINE;
	return d ? MERGE_LOOP_TREE_BITS_DROP : MERGE_LOOP_TREE_BITS_INLINE;
}

static const size_t WAYS[] = {2, 3, 7};

static void walk(int mix)
{
	test_rng r = test_rng_for(g_seed, 0x6d657267u + (uint64_t)mix);
	unsigned cells = 0;
	for (int p = 0; p < 2; p++)
		for (int f = 0; f < 2; f++)
			for (size_t w = 0; w < 3; w++)
				for (int drop = 0; drop < 2; drop++)
					for (int ov = 0; ov < 2; ov++)
						for (int big = 0; big < 2; big++) {
		cell c = {
		    .profile = p ? KVS_PROFILE_BIT : KVS_PROFILE_BYTE,
		    .framing = f ? KVS_FRAMING_RAW : KVS_FRAMING_TYPED,
		    .n = WAYS[w],
		    .drop = drop,
		    .overlap = ov,
		    .big = big,
		    .mix = mix,
		};
		if (mix && c.framing == KVS_FRAMING_RAW)
			continue; /* typed inputs' tombstones need typed output */
		bool two = c.n == 2;
		if (mix == 0)
			c.expect = inline_loop(c.profile, c.framing, c.n, drop);
		else if (mix == 1)
			c.expect = c.profile == KVS_PROFILE_BYTE
			               ? (two ? MERGE_LOOP_TWO_BYTE
			                      : MERGE_LOOP_TREE_BYTE)
			               : (two ? MERGE_LOOP_TWO_BIT
			                      : MERGE_LOOP_TREE_BIT);
		else
			c.expect = two ? MERGE_LOOP_TWO_ANY : MERGE_LOOP_TREE_ANY;
		run_cell(&c, &r);
		cells++;
	}
	printf("# %u cells\n", cells);
}

static void test_same_modes(void **state)
{
	(void)state;
	walk(0);
}

static void test_mixed_framing(void **state)
{
	(void)state;
	walk(1);
}

static void test_mixed_profile(void **state)
{
	(void)state;
	walk(2);
}

static int group_setup(void **state)
{
	(void)state;
	const char *base = getenv("TMPDIR");
	snprintf(g_tmp, sizeof g_tmp, "%s/test_merge_dispatch-XXXXXX",
	         base ? base : "/tmp");
	return mkdtemp(g_tmp) ? 0 : -1;
}

static int group_teardown(void **state)
{
	(void)state;
	return rmdir(g_tmp);
}

int main(int argc, char **argv)
{
	g_seed = test_seed_from_env("test_merge_dispatch", 0x6469737061746368u);
	(void)g_seq;
	(void)g_mode;
	test_filter_from_env();
	test_filter_from_argv(argc, argv);
	const struct CMUnitTest tests[] = {
	    TEST(test_same_modes),
	    TEST(test_mixed_framing),
	    TEST(test_mixed_profile),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
