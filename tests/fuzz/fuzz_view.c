/*
 * fuzz_view.c — libFuzzer target for the merged view (kvseg/view.h), which
 * segfs's daemon reads untrusted segment files through: the input is a
 * segment file as in fuzz_segment (seed corpus: fuzz_segment_seeds),
 * tried as it is and with its CRC32Cs recomputed. Whatever
 * kvs_segment_open_memory accepts is viewed alone and stacked with one or
 * two small valid partners of its own mode (fuzz_stack.h) whose keys
 * collide with each other's and with the seeds' (the empty key, 0x4B 00 m
 * and longer keys it is a prefix of), every age order of the input
 * (oldest, middle, newest), with and without KVS_VIEW_TOMBSTONES, through
 * kvs_view_open and kvs_view_open_cursors.
 *
 * The oracle, computed without view.c: each segment read to its end
 * through a plain cursor, and from those lists the newest-wins sequence
 * built here. When every segment reads to its end with strictly
 * increasing keys, a full scan must be that sequence (key, kind, value
 * and the source segment); when every segment also passes
 * kvs_segment_verify (its seek structures are then sound too), seeks
 * (>= and >) and lookups for every key of the stack, keys cut from the
 * input and the empty key must land where the sequence says, and the
 * bindings after them follow it. Otherwise the view may fail, but after
 * a failure it is at the end, a scan ends within the stack's record
 * count, and, where each segment's cursor gives increasing keys until it
 * fails, the view's keys increase until its failure too. (A cursor on a
 * corrupt segment can give a key not above the last without failing,
 * and the view passes it on: view.c compares the cursors' keys with each
 * other, never with the key it showed last.)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvseg/segment.h"
#include "kvseg/view.h"

#include "fuzz_crcs.h"
#include "fuzz_stack.h"
#include "fuzz_util.h"

#define PARTNER_M   16 /* m's of a partner's 0x4B 00 m keys */
#define MAX_TARGETS 96 /* stack keys sought per view */
#define MAX_PROBE   16 /* bytes of a key cut from the input */

static kvs_segment *g_partner[2][2][2]; /* [which][bit profile][raw] */

/*
 * Partner record i (variant 1 or 2): the empty key, one short key, then
 * for m = 0, v, 2v, ... the key 0x4B 00 m (24 bits) followed by one it is
 * a prefix of (32 bits, or 25 to 32 in the bit profile), then F0 v.
 * Typed, variant 1 has a tombstone every 3rd record, variant 2 every 4th.
 */
static uint64_t view_key(unsigned v, unsigned i, bool bit, uint8_t key[4],
                         bool *tomb)
{
	*tomb = v == 1 ? i % 3 == 2 : i % 4 == 1;
	if (i == 0)
		return 0;
	if (i == 1) {
		key[0] = v == 1 ? 0x20 : 0x4B;
		return 8;
	}
	unsigned j = i - 2, m = v * (j / 2);
	if (j / 2 >= PARTNER_M) {
		key[0] = 0xF0;
		key[1] = (uint8_t)v;
		return 16;
	}
	key[0] = 0x4B;
	key[1] = 0;
	key[2] = (uint8_t)m;
	if (j % 2 == 0)
		return 24;
	key[3] = (uint8_t)(0x80 | m);
	uint64_t bits = bit ? 25 + m % 8 : 32;
	if (bits % 8)
		key[3] &= (uint8_t)(0xFF00u >> (bits % 8));
	return bits;
}

static uint64_t key_a(unsigned i, bool bit, uint8_t key[4], bool *tomb)
{
	return view_key(1, i, bit, key, tomb);
}

static uint64_t key_b(unsigned i, bool bit, uint8_t key[4], bool *tomb)
{
	return view_key(2, i, bit, key, tomb);
}

static void cleanup(void)
{
	for (int w = 0; w < 2; w++)
		for (int p = 0; p < 2; p++)
			for (int f = 0; f < 2; f++)
				kvs_segment_unref(g_partner[w][p][f]);
}

/* The partners, written to a scratch directory and opened; the files go
 * at once (the mappings stay). */
static void setup(void)
{
	char dir[64], path[96];
	const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
	snprintf(dir, sizeof dir, "%s/fuzz_view.XXXXXX", base);
	check(mkdtemp(dir) != NULL);
	for (int w = 0; w < 2; w++)
		for (int p = 0; p < 2; p++)
			for (int f = 0; f < 2; f++) {
				snprintf(path, sizeof path,
				         "%s/partner-%d-%d-%d.kvseg", dir, w, p,
				         f);
				g_partner[w][p][f] = fuzz_make_partner(
				    path, p, f, 2 + 2 * PARTNER_M + 1,
				    w ? key_b : key_a, (uint8_t)(0x40 << w));
				check(unlink(path) == 0);
			}
	check(rmdir(dir) == 0);
	atexit(cleanup);
}

/* A binding of the expected view: a record and the index of its segment. */
typedef struct want {
	const rec *r;
	size_t src;
} want;

/* The newest-wins sequence of the n lists (oldest first) into w (room for
 * all their records), without tombstones unless tombs; its length. */
static size_t expect(const recs *l, size_t n, bool tombs, want *w)
{
	size_t at[3] = {0, 0, 0}, k = 0;
	for (;;) {
		const rec *best = NULL;
		size_t src = 0;
		for (size_t i = 0; i < n; i++) /* the newest of the smallest */
			if (at[i] < l[i].n &&
			    (!best || kvs_key_compare(
			                  l[i].r[at[i]].key, l[i].r[at[i]].bits,
			                  best->key, best->bits) <= 0)) {
				best = &l[i].r[at[i]];
				src = i;
			}
		if (!best)
			return k;
		if (tombs || best->kind != KVS_KIND_TOMBSTONE)
			w[k++] = (want){best, src};
		const rec b = *best;
		for (size_t i = 0; i < n; i++)
			if (at[i] < l[i].n &&
			    kvs_key_compare(l[i].r[at[i]].key,
			                    l[i].r[at[i]].bits, b.key,
			                    b.bits) == 0)
				at[i]++;
	}
}

/* The index in w[0..nw) of the first binding >= key (> key when after). */
static size_t oracle_seek(const want *w, size_t nw, const uint8_t *key,
                          uint64_t bits, bool after)
{
	size_t lo = 0, hi = nw;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c =
		    kvs_key_compare(w[mid].r->key, w[mid].r->bits, key, bits);
		if (c < 0 || (after && c == 0))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* The view shows w[k] (the end when k == nw). */
static void check_at(kvs_view *v, const want *w, size_t nw, size_t k)
{
	if (k == nw) {
		check(!kvs_view_valid(v) && kvs_view_cursor(v) == NULL &&
		      kvs_view_source(v) == kvs_view_count(v));
		return;
	}
	check(kvs_view_valid(v) && kvs_view_source(v) == w[k].src);
	kvs_cursor *c = kvs_view_cursor(v);
	check(c != NULL);
	rec got;
	got.key = (uint8_t *)kvs_cursor_key(c, &got.bits);
	got.kind = kvs_cursor_kind(c);
	const uint8_t *val = NULL;
	got.len = 0;
	if (got.kind == KVS_KIND_VALUE)
		check(kvs_cursor_value(c, &val, &got.len) == KVS_OK);
	static uint8_t none[1]; /* for memcmp, never given NULL */
	got.value = val ? (uint8_t *)val : none;
	if (!got.key)
		got.key = none;
	check(same_rec(&got, w[k].r));
}

/* A seek, a lookup and the binding after each, for key: where w says. */
static void check_seeks(kvs_view *v, const want *w, size_t nw,
                        const uint8_t *key, uint64_t bits)
{
	for (int after = 0; after <= 1; after++) {
		size_t k = oracle_seek(w, nw, key, bits, after);
		check(kvs_view_seek(v, key, bits, after) == KVS_OK);
		check_at(v, w, nw, k);
		check(kvs_view_next(v) == KVS_OK);
		check_at(v, w, nw, k < nw ? k + 1 : nw);
	}
	size_t k = oracle_seek(w, nw, key, bits, false);
	bool found = !(k < nw);
	check(kvs_view_lookup(v, key, bits, &found) == KVS_OK);
	check(found == (k < nw && kvs_key_compare(w[k].r->key, w[k].r->bits,
	                                          key, bits) == 0));
	check_at(v, w, nw, k);
}

/* Key t of the ones cut from the input: up to MAX_PROBE bytes at a few
 * places, a whole number of bytes unless bit, padding bits cleared. */
static uint64_t probe_key(unsigned t, bool bit, const uint8_t *data,
                          size_t size, uint8_t key[MAX_PROBE])
{
	size_t at = size ? (size_t)((t * 2654435761u) % size) : 0;
	size_t n = size - at < MAX_PROBE ? size - at : MAX_PROBE;
	if (n > 0)
		n = 1 + data[at] % n;
	memcpy(key, data + at, n);
	uint64_t bits = 8 * (uint64_t)n;
	if (bit && n > 0 && (t & 1)) {
		bits -= data[at] % 8;
		if (bits % 8)
			key[bits / 8] &= (uint8_t)(0xFF00u >> (bits % 8));
	}
	return bits;
}

typedef struct stack {
	kvs_segment *seg[3];
	const recs *l[3];
	size_t n;
	bool read;        /* every segment read to its end, keys increasing */
	bool verified;    /* and passes kvs_segment_verify */
	bool ordered;     /* every segment's cursor gave increasing keys */
	uint64_t records; /* the segments' header record counts, summed */
	bool bit;
} stack;

/* Checks one view of st against the oracle (w, nw: its bindings when
 * st->read). */
static void check_view(kvs_view *v, const stack *st, const want *w, size_t nw,
                       const uint8_t *data, size_t size)
{
	check(kvs_view_count(v) == st->n && !kvs_view_valid(v));
	uint8_t key[MAX_PROBE];
	if (!st->read) {
		/* a scan that may fail, bounded, in order before it does */
		uint8_t *prev = NULL;
		uint64_t prev_bits = 0, steps = 0;
		kvs_status s = kvs_view_first(v);
		while (s == KVS_OK && kvs_view_valid(v)) {
			check(++steps <= st->records);
			uint64_t bits;
			const uint8_t *k =
			    kvs_cursor_key(kvs_view_cursor(v), &bits);
			check(kvs_view_source(v) < st->n);
			if (prev && st->ordered)
				check(kvs_key_compare(prev, prev_bits, k,
				                      bits) < 0);
			free(prev);
			prev = dup_bytes(k, (size_t)((bits + 7) / 8));
			prev_bits = bits;
			s = kvs_view_next(v);
		}
		free(prev);
		check(s == KVS_OK || !kvs_view_valid(v));
		for (unsigned t = 0; t < 4; t++) {
			uint64_t bits = probe_key(t, st->bit, data, size, key);
			bool found;
			s = kvs_view_lookup(v, key, bits, &found);
			check(s == KVS_OK || !kvs_view_valid(v));
			s = kvs_view_seek(v, key, bits, t & 1);
			if (s == KVS_OK)
				s = kvs_view_next(v);
			check(s == KVS_OK || !kvs_view_valid(v));
		}
		return;
	}
	/* the full scan */
	check(kvs_view_first(v) == KVS_OK);
	for (size_t k = 0; k < nw; k++) {
		check_at(v, w, nw, k);
		check(kvs_view_next(v) == KVS_OK);
	}
	check_at(v, w, nw, nw);
	check(kvs_view_next(v) == KVS_OK);
	check_at(v, w, nw, nw);
	if (st->n == 1) {
		if (!st->verified)
			return;
		/* seek_ordinal: the first binding at or after record i */
		const recs *l = st->l[0];
		for (uint64_t i = 0; i <= l->n + 1; i += 1 + l->n / 8) {
			size_t k = 0;
			while (k < nw && (uint64_t)(w[k].r - l->r) < i)
				k++;
			check(kvs_view_seek_ordinal(v, i) == KVS_OK);
			check_at(v, w, nw, k);
		}
	} else {
		check(kvs_view_seek_ordinal(v, 0) == KVS_E_INVAL &&
		      !kvs_view_valid(v));
	}
	if (!st->verified)
		return;
	/* seeks for the stack's keys (hidden ones too), the input's and the
	 * empty key */
	size_t all = 0;
	for (size_t i = 0; i < st->n; i++)
		all += st->l[i]->n;
	size_t every = all / MAX_TARGETS + 1, j = 0;
	for (size_t i = 0; i < st->n; i++)
		for (size_t r = 0; r < st->l[i]->n; r++, j++)
			if (j % every == 0)
				check_seeks(v, w, nw, st->l[i]->r[r].key,
				            st->l[i]->r[r].bits);
	for (unsigned t = 0; t < 6; t++) {
		uint64_t bits = probe_key(t, st->bit, data, size, key);
		check_seeks(v, w, nw, key, bits);
	}
	check_seeks(v, w, nw, NULL, 0);
}

/* Every view of the stack: both flags, both opens. */
static void view_stack(const stack *st, const uint8_t *data, size_t size)
{
	size_t all = 0;
	for (size_t i = 0; i < st->n; i++)
		all += st->l[i]->n;
	want *w = malloc((all ? all : 1) * sizeof *w);
	check(w != NULL);
	recs lists[3];
	for (size_t i = 0; i < st->n; i++)
		lists[i] = *st->l[i];
	for (unsigned flags = 0; flags <= KVS_VIEW_TOMBSTONES; flags++) {
		bool tombs = flags & KVS_VIEW_TOMBSTONES;
		size_t nw = st->read ? expect(lists, st->n, tombs, w) : 0;
		kvs_view *v = NULL;
		check(kvs_view_open(&v, st->seg, st->n, flags) == KVS_OK);
		check_view(v, st, w, nw, data, size);
		kvs_view_close(v);
		kvs_cursor *cur[3] = {NULL, NULL, NULL};
		for (size_t i = 0; i < st->n; i++)
			check(kvs_cursor_open(&cur[i], st->seg[i]) == KVS_OK);
		check(kvs_view_open_cursors(&v, cur, st->n, flags) == KVS_OK);
		check_view(v, st, w, nw, data, size);
		kvs_view_close(v);
		for (size_t i = 0; i < st->n; i++)
			kvs_cursor_close(cur[i]);
	}
	free(w);
}

static void exercise(const uint8_t *buf, size_t size, const uint8_t *data)
{
	kvs_segment *s = NULL;
	kvs_error err;
	if (kvs_segment_open_memory(&s, buf, size, &err) != KVS_OK)
		return;
	kvs_segment_info in;
	kvs_segment_info_get(s, &in);
	int p = in.profile == KVS_PROFILE_BIT,
	    f = in.framing == KVS_FRAMING_RAW;
	kvs_segment *a = g_partner[0][p][f], *b = g_partner[1][p][f];
	recs ls = {0}, la = {0}, lb = {0};
	bool read = walk(s, &ls);
	bool verified = read && kvs_segment_verify(s, &err) == KVS_OK;
	check(walk(a, &la) && walk(b, &lb));
	kvs_segment_info ia, ib;
	kvs_segment_info_get(a, &ia);
	kvs_segment_info_get(b, &ib);
	/* the input alone, oldest, in the middle, newest */
	static const char *const orders[] = {"s",   "sa",  "as",
	                                     "sab", "asb", "abs"};
	for (size_t o = 0; o < sizeof orders / sizeof orders[0]; o++) {
		stack st = {.n = strlen(orders[o]),
		            .read = read,
		            .verified = verified,
		            .ordered = !ls.unordered,
		            .records = in.records,
		            .bit = p};
		for (size_t i = 0; i < st.n; i++) {
			char c = orders[o][i];
			st.seg[i] = c == 's' ? s : c == 'a' ? a : b;
			st.l[i] = c == 's' ? &ls : c == 'a' ? &la : &lb;
			st.records += c == 's'   ? 0
			              : c == 'a' ? ia.records
			                         : ib.records;
		}
		view_stack(&st, data, size);
	}
	recs_free(&ls);
	recs_free(&la);
	recs_free(&lb);
	kvs_segment_unref(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool ready;
	if (!ready) {
		setup();
		ready = true;
	}
	fuzz_with_crcs(data, size, exercise);
	return 0;
}
