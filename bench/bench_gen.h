/*
 * bench_gen.h — deterministic inputs shared by the benchmark programs, in C
 * and C++: the splitmix64 generator and the Elias-Fano fixture (positions and
 * queries), so that bench_ef and its sdsl peer measure exactly the same
 * sequence and the same queries.
 */
#ifndef SEGFS_BENCH_GEN_H
#define SEGFS_BENCH_GEN_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

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
 * elements read, plus for next_geq the indices found. Both bench_ef and its
 * sdsl peer check against it. Returns 0 for an unknown workload.
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
	} else { /* access-seq, iterate: every element once */
		for (size_t i = 0; i < n; i++)
			sum += x[i];
	}
	return sum;
}

#endif
