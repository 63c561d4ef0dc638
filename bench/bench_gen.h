/*
 * bench_gen.h — deterministic inputs shared by the benchmark programs, in C
 * and C++: the splitmix64 generator, the Elias-Fano fixture (positions and
 * queries), so that bench_ef and its sdsl peer measure exactly the same
 * sequence and the same queries, and the segment fixtures (records, probe
 * keys and the checksums a scan or lookup must reproduce), so that
 * bench_segment, its RocksDB and LMDB peers, bench_sizes and bench_codesel
 * all see exactly the same records; also the command line of bench_segment
 * and its peers and the check of each timed pass against those checksums.
 */
#ifndef SEGFS_BENCH_GEN_H
#define SEGFS_BENCH_GEN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

typedef struct bench_rng {
	uint64_t state;
} bench_rng;

static inline uint64_t bench_rng_next(bench_rng *r)
{
	uint64_t z = (r->state += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* next() % bound for bound >= 1; the bias, below bound / 2^64, is ignored. */
static inline uint64_t bench_rng_below(bench_rng *r, uint64_t bound)
{
	return bench_rng_next(r) % bound;
}

/* A value whose bit width is uniform in 0..max_width (max_width <= 64) and
 * uniform among the values of that width: 0, or [2^(w-1), 2^w). */
static inline uint64_t bench_rng_width(bench_rng *r, unsigned max_width)
{
	unsigned w = (unsigned)bench_rng_below(r, (uint64_t)max_width + 1);
	if (w == 0)
		return 0;
	uint64_t top = (uint64_t)1 << (w - 1);
	return top | (bench_rng_next(r) & (top - 1));
}

/* ---- the Elias-Fano fixture --------------------------------------------- */

#define BENCH_EF_COUNT          ((size_t)1 << 18) /* 262,144 positions */
#define BENCH_EF_QUERIES        ((size_t)1 << 20) /* 1,048,576 queries */
#define BENCH_EF_MAX_GAP        1024
#define BENCH_EF_SEED_POSITIONS 0x5EEDEF0000000001ull
#define BENCH_EF_SEED_INDICES   0x5EEDEF0000000002ull
#define BENCH_EF_SEED_TARGETS   0x5EEDEF0000000003ull

/* x[0] = g[0], x[i] = x[i-1] + g[i], gaps g uniform in [1, 1024]. */
static inline void bench_ef_positions(uint64_t *x, size_t n)
{
	bench_rng r = {BENCH_EF_SEED_POSITIONS};
	uint64_t v = 0;
	for (size_t i = 0; i < n; i++) {
		v += 1 + bench_rng_below(&r, BENCH_EF_MAX_GAP);
		x[i] = v;
	}
}

/* Indices uniform in [0, n). */
static inline void bench_ef_indices(uint64_t *idx, size_t q, size_t n)
{
	bench_rng r = {BENCH_EF_SEED_INDICES};
	for (size_t i = 0; i < q; i++)
		idx[i] = bench_rng_below(&r, n);
}

/* next_geq targets uniform in [0, max]. */
static inline void bench_ef_targets(uint64_t *t, size_t q, uint64_t max)
{
	bench_rng r = {BENCH_EF_SEED_TARGETS};
	for (size_t i = 0; i < q; i++)
		t[i] = bench_rng_below(&r, max + 1);
}

/* The index of the first x[i] >= target in a sorted array (n if none). */
static inline size_t bench_lower_bound(const uint64_t *x, size_t n,
                                       uint64_t target)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (x[mid] < target)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/*
 * The checksum a workload's timed loop must reproduce, computed from the
 * plain array (x[0..n), the q random indices and targets): the sum of the
 * elements read (every element, for access-seq, iterate and any other
 * name), plus for next_geq the indices found; for build and validate, n
 * (they succeeded). Both bench_ef and its sdsl peer check against it.
 */
static inline uint64_t bench_ef_expected(const char *workload,
                                         const uint64_t *x, size_t n,
                                         const uint64_t *indices,
                                         const uint64_t *targets, size_t q)
{
	uint64_t sum = 0;
	if (strcmp(workload, "access-random") == 0) {
		for (size_t j = 0; j < q; j++)
			sum += x[indices[j]];
	} else if (strcmp(workload, "next_geq-random") == 0) {
		for (size_t j = 0; j < q; j++) {
			size_t i = bench_lower_bound(x, n, targets[j]);
			sum += i + x[i];
		}
	} else if (strcmp(workload, "build") == 0 ||
	           strcmp(workload, "validate") == 0) {
		sum = n; /* the element count, when they succeed */
	} else {         /* access-seq, iterate: every element once */
		for (size_t i = 0; i < n; i++)
			sum += x[i];
	}
	return sum;
}

/* ---- the segment fixtures ---------------------------------------------- */

/*
 * A fixture is a sorted list of records: a key, a value and whether the
 * record is a tombstone. Keys are all the same length:
 *
 *   structured  prefix_len shared bytes (fixed-seed random) and an 8-byte
 *               big-endian counter, counter = stride * i. With stride 2 a
 *               fixture is one of two disjoint inputs (the other would hold
 *               the odd counters); with stride 1 it is their merge.
 *   hash-like   16 bytes from splitmix64, sorted and deduplicated.
 *
 * Value lengths are uniform in [value_min, value_max] (FF16: 16 and 16; FV:
 * 0 and 512), the bytes from splitmix64. Record i is a tombstone when
 * i % tombstone_every == tombstone_every - 1 (every 17th record); its value
 * is empty. Lengths and bytes are drawn for tombstones too, so the other
 * records' values do not depend on tombstone_every. Modes and peers that
 * cannot store a tombstone store the record with an empty value instead
 * (raw framing, LMDB); RocksDB stores a deletion (bench/README.md).
 */
#define BENCH_SEG_TOMBSTONE_EVERY 17
#define BENCH_SEG_PROBES          100000 /* lookups per observation */
#define BENCH_SEG_SEED_PREFIX     0x5EED5E6000000001ull
#define BENCH_SEG_SEED_HASH_KEYS  0x5EED5E6000000002ull
#define BENCH_SEG_SEED_LENGTHS    0x5EED5E6000000003ull
#define BENCH_SEG_SEED_CONTENT    0x5EED5E6000000004ull
#define BENCH_SEG_SEED_PRESENT    0x5EED5E6000000005ull
#define BENCH_SEG_SEED_ABSENT     0x5EED5E6000000006ull

enum { BENCH_KEYS_STRUCTURED = 0, BENCH_KEYS_HASH = 1 };

typedef struct bench_seg_spec {
	const char *name;
	int keys;            /* BENCH_KEYS_* */
	uint32_t prefix_len; /* structured: shared bytes before the counter */
	uint32_t value_min;  /* value length uniform in [min, max] */
	uint32_t value_max;
	uint64_t records;
	uint32_t stride;          /* structured: counter = stride * i */
	uint32_t tombstone_every; /* 0: no tombstones */
} bench_seg_spec;

typedef struct bench_seg_data {
	size_t n;
	size_t key_len;
	uint8_t *keys; /* n * key_len bytes, sorted */
	uint64_t
	    *value_off; /* value i is values[value_off[i] .. value_off[i+1]) */
	uint8_t *values;
	uint8_t *tombstone; /* n flags */
	size_t tombstones;
	uint64_t value_bytes;
} bench_seg_data;

/* The named fixtures of bench_segment and its peers; NULL past the end. */
static inline const bench_seg_spec *bench_seg_fixture(size_t i)
{
	static const bench_seg_spec fixtures[] = {
	    /* seed 000: two disjoint inputs of these sizes are merged */
	    {"structured-ff16-4096", BENCH_KEYS_STRUCTURED, 8, 16, 16, 4096, 2,
	     17},
	    {"structured-ff16-65536", BENCH_KEYS_STRUCTURED, 8, 16, 16, 65536,
	     2, 17},
	    {"structured-ff16-262144", BENCH_KEYS_STRUCTURED, 8, 16, 16, 262144,
	     2, 17},
	    {"structured-fv-4096", BENCH_KEYS_STRUCTURED, 8, 0, 512, 4096, 2,
	     17},
	    {"structured-fv-65536", BENCH_KEYS_STRUCTURED, 8, 0, 512, 65536, 2,
	     17},
	    {"structured-fv-131072", BENCH_KEYS_STRUCTURED, 8, 0, 512, 131072,
	     2, 17},
	    {"hash-ff16-4096", BENCH_KEYS_HASH, 0, 16, 16, 4096, 1, 17},
	    {"hash-ff16-65536", BENCH_KEYS_HASH, 0, 16, 16, 65536, 1, 17},
	    {"hash-ff16-262144", BENCH_KEYS_HASH, 0, 16, 16, 262144, 1, 17},
	    {"hash-fv-4096", BENCH_KEYS_HASH, 0, 0, 512, 4096, 1, 17},
	    {"hash-fv-65536", BENCH_KEYS_HASH, 0, 0, 512, 65536, 1, 17},
	    {"hash-fv-131072", BENCH_KEYS_HASH, 0, 0, 512, 131072, 1, 17},
	    /* seed 001's scan fixtures, approximated: 32,768 records */
	    {"prefix-6", BENCH_KEYS_STRUCTURED, 8, 0, 6, 32768, 2, 17},
	    {"prefix-512", BENCH_KEYS_STRUCTURED, 8, 0, 512, 32768, 2, 17},
	    {"hash-6", BENCH_KEYS_HASH, 0, 0, 6, 32768, 1, 17},
	    {"hash-512", BENCH_KEYS_HASH, 0, 0, 512, 32768, 1, 17},
	};
	return i < sizeof fixtures / sizeof fixtures[0] ? &fixtures[i] : NULL;
}

static inline const bench_seg_spec *bench_seg_fixture_named(const char *name)
{
	const bench_seg_spec *s;
	for (size_t i = 0; (s = bench_seg_fixture(i)) != NULL; i++)
		if (strcmp(s->name, name) == 0)
			return s;
	return NULL;
}

/* The lookup workloads run on these two 262,144-record FF16 fixtures. */
#define BENCH_SEG_LOOKUP_STRUCTURED "structured-ff16-262144"
#define BENCH_SEG_LOOKUP_HASH       "hash-ff16-262144"

/*
 * One workload of bench_segment and its peers, from its name:
 *   OP-FIXTURE              OP is frames, cursor, records or build
 *   lookup-present[-hash]   probes of keys in the structured (hash-like) set
 *   lookup-absent[-hash]    probes of keys not in it
 */
typedef struct bench_seg_workload {
	char op[16]; /* frames, cursor, records, build, lookup */
	int present; /* lookup: probes of present keys */
	const bench_seg_spec *spec;
} bench_seg_workload;

static inline int bench_seg_parse_workload(const char *name,
                                           bench_seg_workload *w)
{
	memset(w, 0, sizeof *w);
	if (strncmp(name, "lookup-", 7) == 0) {
		const char *rest = name + 7;
		const char *fixture = BENCH_SEG_LOOKUP_STRUCTURED;
		if (strncmp(rest, "present", 7) == 0) {
			w->present = 1;
			rest += 7;
		} else if (strncmp(rest, "absent", 6) == 0) {
			rest += 6;
		} else {
			return 0;
		}
		if (strcmp(rest, "-hash") == 0)
			fixture = BENCH_SEG_LOOKUP_HASH;
		else if (rest[0] != '\0')
			return 0;
		strcpy(w->op, "lookup");
		w->spec = bench_seg_fixture_named(fixture);
		return w->spec != NULL;
	}
	const char *dash = strchr(name, '-');
	if (dash == NULL || (size_t)(dash - name) >= sizeof w->op)
		return 0;
	memcpy(w->op, name, (size_t)(dash - name));
	w->op[dash - name] = '\0';
	if (strcmp(w->op, "frames") != 0 && strcmp(w->op, "cursor") != 0 &&
	    strcmp(w->op, "records") != 0 && strcmp(w->op, "build") != 0)
		return 0;
	w->spec = bench_seg_fixture_named(dash + 1);
	return w->spec != NULL;
}

/*
 * The workload names, NULL-terminated: for every fixture frames- (only when
 * with_frames: it has no peer), cursor-, records- and build-, then the four
 * lookups.
 */
static inline const char *const *bench_seg_workloads(int with_frames)
{
	enum { MAX_NAMES = 4 * 32 + 5 };
	static char storage[MAX_NAMES][48];
	static const char *list[MAX_NAMES];
	static const char *const ops[] = {"frames", "cursor", "records",
	                                  "build"};
	static const char *const lookups[] = {"lookup-present", "lookup-absent",
	                                      "lookup-present-hash",
	                                      "lookup-absent-hash"};
	size_t k = 0;
	const bench_seg_spec *s;
	for (size_t i = 0; (s = bench_seg_fixture(i)) != NULL; i++)
		for (size_t op = with_frames ? 0 : 1; op < 4; op++) {
			if (k + 1 >= MAX_NAMES)
				bench_fail("too many workloads");
			snprintf(storage[k], sizeof storage[k], "%s-%s",
			         ops[op], s->name);
			list[k] = storage[k];
			k++;
		}
	for (size_t i = 0; i < 4; i++)
		list[k++] = lookups[i];
	list[k] = NULL;
	return list;
}

/*
 * The command line of bench_segment and its peers: bench_parse with the
 * workloads of bench_seg_workloads(with_frames) and the program's variants,
 * then the workload it names in *w.
 */
static inline void bench_seg_parse(bench_opts *o, bench_seg_workload *w,
                                   int argc, char **argv, int with_frames,
                                   const char *const *variants)
{
	bench_parse(o, argc, argv, "segment", bench_seg_workloads(with_frames),
	            variants);
	if (!bench_seg_parse_workload(o->workload, w))
		bench_fail("cannot parse workload %s", o->workload);
}

/* After a timed pass of bench_segment or a peer: fails unless it gave the
 * expected checksum and count, then sinks the checksum. */
static inline void bench_seg_expect(uint64_t sum, uint64_t count,
                                    uint64_t expected, uint64_t expected_count)
{
	if (sum != expected || count != expected_count)
		bench_fail("a timed pass gave checksum %llu and count %llu, "
		           "not %llu and %llu",
		           (unsigned long long)sum, (unsigned long long)count,
		           (unsigned long long)expected,
		           (unsigned long long)expected_count);
	bench_sink(sum);
}

/*
 * The size grid of seed 000: the merged output of two disjoint inputs, so
 * 2 x the records per input: 8,192 / 131,072 / 524,288 records for FF16 and
 * 8,192 / 131,072 / 262,144 for FV. cell 0..11 in seed 000's order:
 * structured FF16, structured FV, hash-like FF16, hash-like FV, three sizes
 * each. Seed 000's inputs hold present values only; with tombstones set,
 * every 17th record is a tombstone as in the other fixtures.
 */
#define BENCH_SIZES_CELLS 12

static inline void bench_sizes_spec(size_t cell, int tombstones,
                                    bench_seg_spec *s, char name[64])
{
	static const uint64_t ff16[3] = {8192, 131072, 524288};
	static const uint64_t fv[3] = {8192, 131072, 262144};
	int hash = cell >= 6;
	int var = (cell / 3) % 2 == 1;
	size_t size = cell % 3;
	memset(s, 0, sizeof *s);
	s->keys = hash ? BENCH_KEYS_HASH : BENCH_KEYS_STRUCTURED;
	s->prefix_len = hash ? 0 : 8;
	s->value_min = var ? 0 : 16;
	s->value_max = var ? 512 : 16;
	s->records = var ? fv[size] : ff16[size];
	s->stride = 1;
	s->tombstone_every = tombstones ? BENCH_SEG_TOMBSTONE_EVERY : 0;
	snprintf(name, 64, "%s-%s-%llu", hash ? "hash" : "structured",
	         var ? "fv" : "ff16", (unsigned long long)s->records);
	s->name = name;
}

static inline void bench_seg_put_be64(uint8_t *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--) {
		p[i] = (uint8_t)v;
		v >>= 8;
	}
}

static inline int bench_seg_cmp16(const void *a, const void *b)
{
	return memcmp(a, b, 16);
}

/* n distinct 16-byte keys from splitmix64, sorted. */
static inline void bench_seg_hash_keys(uint8_t *keys, size_t n, uint64_t seed)
{
	bench_rng r = {seed};
	size_t have = 0;
	while (have < n) {
		for (size_t i = have; i < n; i++) {
			bench_seg_put_be64(keys + 16 * i, bench_rng_next(&r));
			bench_seg_put_be64(keys + 16 * i + 8,
			                   bench_rng_next(&r));
		}
		qsort(keys, n, 16, bench_seg_cmp16);
		have = n ? 1 : 0;
		for (size_t i = 1; i < n; i++)
			if (memcmp(keys + 16 * i, keys + 16 * (have - 1), 16) !=
			    0)
				memmove(keys + 16 * have++, keys + 16 * i, 16);
	}
}

static inline void bench_seg_make(bench_seg_data *d, const bench_seg_spec *s)
{
	size_t n = (size_t)s->records;
	d->n = n;
	d->key_len =
	    s->keys == BENCH_KEYS_HASH ? 16 : (size_t)s->prefix_len + 8;
	d->keys = (uint8_t *)bench_alloc(n * d->key_len);
	if (s->keys == BENCH_KEYS_HASH) {
		bench_seg_hash_keys(d->keys, n, BENCH_SEG_SEED_HASH_KEYS);
	} else {
		bench_rng r = {BENCH_SEG_SEED_PREFIX};
		uint8_t *prefix = (uint8_t *)bench_alloc(s->prefix_len + 8);
		for (size_t j = 0; j < s->prefix_len; j++)
			prefix[j] = (uint8_t)bench_rng_next(&r);
		for (size_t i = 0; i < n; i++) {
			uint8_t *k = d->keys + i * d->key_len;
			memcpy(k, prefix, s->prefix_len);
			bench_seg_put_be64(k + s->prefix_len,
			                   (uint64_t)s->stride * i);
		}
		free(prefix);
	}

	uint32_t *drawn = (uint32_t *)bench_alloc(n * sizeof *drawn + 1);
	d->tombstone = (uint8_t *)bench_alloc(n + 1);
	d->value_off = (uint64_t *)bench_alloc((n + 1) * sizeof(uint64_t));
	d->tombstones = 0;
	bench_rng lengths = {BENCH_SEG_SEED_LENGTHS};
	uint64_t total = 0;
	for (size_t i = 0; i < n; i++) {
		uint32_t span = s->value_max - s->value_min;
		drawn[i] = s->value_min +
		           (uint32_t)(span ? bench_rng_below(&lengths,
		                                             (uint64_t)span + 1)
		                           : 0);
		d->tombstone[i] =
		    s->tombstone_every != 0 &&
		    i % s->tombstone_every == s->tombstone_every - 1;
		d->tombstones += d->tombstone[i];
		d->value_off[i] = total;
		total += d->tombstone[i] ? 0 : drawn[i];
	}
	d->value_off[n] = total;
	d->value_bytes = total;
	d->values = (uint8_t *)bench_alloc(total + 8);
	bench_rng content = {BENCH_SEG_SEED_CONTENT};
	for (size_t i = 0; i < n; i++) {
		uint8_t *v = d->values + d->value_off[i];
		for (uint32_t j = 0; j < drawn[i]; j += 8) {
			uint64_t x = bench_rng_next(&content);
			if (d->tombstone[i])
				continue;
			for (uint32_t b = j; b < drawn[i] && b < j + 8; b++) {
				v[b] = (uint8_t)x;
				x >>= 8;
			}
		}
	}
	free(drawn);
}

static inline void bench_seg_free(bench_seg_data *d)
{
	free(d->keys);
	free(d->value_off);
	free(d->values);
	free(d->tombstone);
	memset(d, 0, sizeof *d);
}

static inline const uint8_t *bench_seg_key(const bench_seg_data *d, size_t i)
{
	return d->keys + i * d->key_len;
}

static inline const uint8_t *bench_seg_value(const bench_seg_data *d, size_t i,
                                             size_t *len)
{
	*len = (size_t)(d->value_off[i + 1] - d->value_off[i]);
	return d->values + d->value_off[i];
}

/* The index of the record with key (key_len bytes), or n. */
static inline size_t bench_seg_find(const bench_seg_data *d, const uint8_t *key)
{
	size_t lo = 0, hi = d->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = memcmp(bench_seg_key(d, mid), key, d->key_len);
		if (c == 0)
			return mid;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return d->n;
}

/*
 * q probe keys (q * key_len bytes, q <= n for present probes): present
 * probes are the first q records of a fixed-seed shuffle; absent probes of a
 * structured fixture (stride >= 2) are odd counters among the records,
 * those of a hash-like fixture fresh random keys checked to be absent.
 */
static inline uint8_t *bench_seg_probes(const bench_seg_data *d,
                                        const bench_seg_spec *s, int present,
                                        size_t q)
{
	uint8_t *p = (uint8_t *)bench_alloc(q * d->key_len);
	if (present) {
		if (q > d->n)
			bench_fail("%zu present probes of %zu records", q,
			           d->n);
		bench_rng r = {BENCH_SEG_SEED_PRESENT};
		size_t *idx = (size_t *)bench_alloc(d->n * sizeof *idx);
		for (size_t i = 0; i < d->n; i++)
			idx[i] = i;
		for (size_t j = 0; j < q; j++) {
			size_t k = j + (size_t)bench_rng_below(&r, d->n - j);
			size_t t = idx[j];
			idx[j] = idx[k];
			idx[k] = t;
			memcpy(p + j * d->key_len, bench_seg_key(d, idx[j]),
			       d->key_len);
		}
		free(idx);
		return p;
	}
	bench_rng r = {BENCH_SEG_SEED_ABSENT};
	for (size_t j = 0; j < q; j++) {
		uint8_t *k = p + j * d->key_len;
		if (s->keys == BENCH_KEYS_STRUCTURED) {
			if (s->stride < 2 || d->n == 0)
				bench_fail("no absent keys between the records "
				           "of %s",
				           s->name);
			memcpy(k, d->keys, s->prefix_len);
			bench_seg_put_be64(k + s->prefix_len,
			                   (uint64_t)s->stride *
			                           bench_rng_below(&r, d->n) +
			                       1);
		} else {
			do {
				bench_seg_put_be64(k, bench_rng_next(&r));
				bench_seg_put_be64(k + 8, bench_rng_next(&r));
			} while (bench_seg_find(d, k) != d->n);
		}
	}
	return p;
}

/* What a scan or a lookup adds to its checksum for a key (its last byte and
 * its length in bits) and for a value (its length and its last byte). */
static inline uint64_t bench_seg_key_term(const uint8_t *key, uint64_t bits)
{
	return (bits ? key[(bits - 1) / 8] : 0) + (bits << 8);
}

static inline uint64_t bench_seg_value_term(const uint8_t *value, size_t len)
{
	return len + (len ? (uint64_t)value[len - 1] << 32 : 0);
}

/*
 * The checksum of a full scan: the key terms of every record, plus the value
 * terms when with_values. With hide_tombstones (RocksDB, whose iterators
 * skip deletions) tombstones are left out; otherwise they count with an
 * empty value. *records gets the number of records the scan sees.
 */
static inline uint64_t bench_seg_scan_expected(const bench_seg_data *d,
                                               int with_values,
                                               int hide_tombstones,
                                               uint64_t *records)
{
	uint64_t sum = 0, seen = 0;
	for (size_t i = 0; i < d->n; i++) {
		if (hide_tombstones && d->tombstone[i])
			continue;
		seen++;
		sum += bench_seg_key_term(bench_seg_key(d, i),
		                          8 * (uint64_t)d->key_len);
		if (with_values) {
			size_t len;
			const uint8_t *v = bench_seg_value(d, i, &len);
			sum += bench_seg_value_term(v, len);
		}
	}
	*records = seen;
	return sum;
}

/* The checksum of q lookups (the value terms of the records found) and the
 * number found; with hide_tombstones a tombstone is not found. */
static inline uint64_t bench_seg_lookup_expected(const bench_seg_data *d,
                                                 const uint8_t *probes,
                                                 size_t q, int hide_tombstones,
                                                 uint64_t *found)
{
	uint64_t sum = 0, hits = 0;
	for (size_t j = 0; j < q; j++) {
		size_t i = bench_seg_find(d, probes + j * d->key_len);
		if (i == d->n || (hide_tombstones && d->tombstone[i]))
			continue;
		hits++;
		size_t len;
		const uint8_t *v = bench_seg_value(d, i, &len);
		sum += bench_seg_value_term(v, len);
	}
	*found = hits;
	return sum;
}

/* ---- the merge workloads ------------------------------------------------ */

/*
 * bench_merge and its peers merge two inputs, the older and the newer, into
 * one output. A workload names the output's records (a fixture made by
 * bench_seg_make, every 17th record a tombstone) and how its records are
 * split between the inputs:
 *
 *   grid-K-V-N        seed 000's merge grid: K structured or hash, V ff16 or
 *                     fv, N records per input (4,096, 65,536 and 262,144;
 *                     131,072 for FV). The output is seed 000's size cell
 *                     of 2N records (bench_sizes_spec, with tombstones;
 *                     structured counters 0 .. 2N-1). Record i goes to the
 *                     older input when i is even and to the newer when it
 *                     is odd: two disjoint inputs (structured: counters 2j
 *                     and 2j+1; hash-like: one sorted random set split
 *                     alternately). Timed in ms per merge.
 *   merge-disjoint-F  seed 001's native merge: the output is bench_segment's
 *                     fixture F (prefix-6, prefix-512, hash-6, hash-512;
 *                     32,768 records), split alternately as above. Timed in
 *                     ns per output record.
 *   merge-overlap-F   the same output from 1.5 input records per output
 *                     record: record i is in the older input when i % 4 is
 *                     0, 1 or 2 and in the newer when it is 0, 2 or 3, with
 *                     the same binding in both, so the newer binding wins
 *                     with the same bytes and the output is the same.
 */
typedef struct bench_merge_workload {
	int grid;           /* seed 000's grid (ms per merge) */
	int overlap;        /* merge-overlap-F */
	bench_seg_spec out; /* the output's records; out.name is out_name */
	char out_name[64];
	unsigned ways; /* bench_merge's N-input variants: output record i is
	                * in input i % ways (0: the workload's two inputs) */
} bench_merge_workload;

#define BENCH_MERGE_FIXTURES 4
static inline const char *bench_merge_fixture(size_t i)
{
	static const char *const names[BENCH_MERGE_FIXTURES] = {
	    "prefix-6", "hash-6", "prefix-512", "hash-512"};
	return i < BENCH_MERGE_FIXTURES ? names[i] : NULL;
}

/* The workload names, NULL-terminated: the grid in seed 000's order, then
 * merge-disjoint- and merge-overlap- for each fixture. */
static inline const char *const *bench_merge_workloads(void)
{
	enum { MAX_NAMES = BENCH_SIZES_CELLS + 2 * BENCH_MERGE_FIXTURES + 1 };
	static char storage[MAX_NAMES][48];
	static const char *list[MAX_NAMES];
	size_t k = 0;
	for (size_t cell = 0; cell < BENCH_SIZES_CELLS; cell++) {
		bench_seg_spec s;
		char name[64];
		bench_sizes_spec(cell, 1, &s, name);
		snprintf(storage[k], sizeof storage[k], "grid-%s-%s-%llu",
		         s.keys == BENCH_KEYS_HASH ? "hash" : "structured",
		         s.value_max == 16 ? "ff16" : "fv",
		         (unsigned long long)(s.records / 2));
		list[k] = storage[k];
		k++;
	}
	for (size_t kind = 0; kind < 2; kind++)
		for (size_t f = 0; f < BENCH_MERGE_FIXTURES; f++) {
			snprintf(storage[k], sizeof storage[k], "merge-%s-%s",
			         kind ? "overlap" : "disjoint",
			         bench_merge_fixture(f));
			list[k] = storage[k];
			k++;
		}
	list[k] = NULL;
	return list;
}

static inline int bench_merge_parse_workload(const char *name,
                                             bench_merge_workload *w)
{
	memset(w, 0, sizeof *w);
	const char *const *names = bench_merge_workloads();
	size_t k = 0;
	while (names[k] != NULL && strcmp(names[k], name) != 0)
		k++;
	if (names[k] == NULL)
		return 0;
	if (k < BENCH_SIZES_CELLS) {
		w->grid = 1;
		bench_sizes_spec(k, 1, &w->out, w->out_name);
		return 1;
	}
	k -= BENCH_SIZES_CELLS;
	w->overlap = k >= BENCH_MERGE_FIXTURES;
	const bench_seg_spec *s = bench_seg_fixture_named(
	    bench_merge_fixture(k % BENCH_MERGE_FIXTURES));
	if (s == NULL)
		return 0;
	w->out = *s;
	snprintf(w->out_name, sizeof w->out_name, "%s", s->name);
	w->out.name = w->out_name;
	return 1;
}

/* The command line of bench_merge and its peers: bench_parse with the merge
 * workloads and the program's variants, then the workload it names. */
static inline void bench_merge_parse(bench_opts *o, bench_merge_workload *w,
                                     int argc, char **argv,
                                     const char *const *variants)
{
	bench_parse(o, argc, argv, "merge", bench_merge_workloads(), variants);
	if (!bench_merge_parse_workload(o->workload, w))
		bench_fail("cannot parse workload %s", o->workload);
}

/* Whether output record i is in the newer (or the older) input; with
 * w->ways, whether it is in input `newer` of them. */
static inline int bench_merge_in_input(const bench_merge_workload *w, int newer,
                                       size_t i)
{
	if (w->ways)
		return i % w->ways == (size_t)newer;
	if (!w->overlap)
		return (int)(i & 1) == newer;
	return newer ? i % 4 != 1 : i % 4 != 3;
}

/* The records of d that are in one input, in order. */
static inline void bench_merge_input(bench_seg_data *in,
                                     const bench_seg_data *d,
                                     const bench_merge_workload *w, int newer)
{
	size_t n = 0;
	uint64_t bytes = 0;
	for (size_t i = 0; i < d->n; i++)
		if (bench_merge_in_input(w, newer, i)) {
			n++;
			bytes += d->value_off[i + 1] - d->value_off[i];
		}
	memset(in, 0, sizeof *in);
	in->n = n;
	in->key_len = d->key_len;
	in->keys = (uint8_t *)bench_alloc(n * d->key_len + 1);
	in->value_off = (uint64_t *)bench_alloc((n + 1) * sizeof(uint64_t));
	in->values = (uint8_t *)bench_alloc(bytes + 8);
	in->tombstone = (uint8_t *)bench_alloc(n + 1);
	size_t j = 0;
	uint64_t off = 0;
	for (size_t i = 0; i < d->n; i++) {
		if (!bench_merge_in_input(w, newer, i))
			continue;
		size_t len;
		const uint8_t *v = bench_seg_value(d, i, &len);
		memcpy(in->keys + j * d->key_len, bench_seg_key(d, i),
		       d->key_len);
		in->value_off[j] = off;
		memcpy(in->values + off, v, len);
		off += len;
		in->tombstone[j] = d->tombstone[i];
		in->tombstones += d->tombstone[i];
		j++;
	}
	in->value_off[n] = off;
	in->value_bytes = off;
}

/* Input i (oldest first) of a merge variant: the workload's older or
 * newer input, or with ways (the -4way variants: ways inputs instead of
 * two) the merged records in input i of them, made into *part, which the
 * caller frees with bench_seg_free. */
static inline const bench_seg_data *
bench_merge_way(const bench_merge_workload *w, unsigned ways,
                const bench_seg_data *merged, const bench_seg_data *older,
                const bench_seg_data *newer, size_t i, bench_seg_data *part)
{
	if (!ways)
		return i ? newer : older;
	bench_merge_workload split = *w;
	split.ways = ways;
	bench_merge_input(part, merged, &split, (int)i);
	return part;
}

/* The output's records and the two inputs of a merge workload. */
static inline void bench_merge_make(const bench_merge_workload *w,
                                    bench_seg_data *merged,
                                    bench_seg_data *older,
                                    bench_seg_data *newer)
{
	bench_seg_make(merged, &w->out);
	bench_merge_input(older, merged, w, 0);
	bench_merge_input(newer, merged, w, 1);
}

/* The unit of a workload and one observation's value in it: ms per merge
 * (grid), ns per output record (merge-). */
static inline const char *bench_merge_unit(const bench_merge_workload *w)
{
	return w->grid ? "ms/merge" : "ns/record";
}

static inline double bench_merge_value(const bench_merge_workload *w,
                                       uint64_t t0, uint64_t t1,
                                       size_t out_records)
{
	double ns = (double)(t1 - t0);
	return w->grid ? ns / 1e6 : ns / (double)out_records;
}

#endif
