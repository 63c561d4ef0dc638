/*
 * testutil.h — small helpers shared by the unit tests: a deterministic
 * PRNG (splitmix64, so failures reproduce from the printed seed) and a
 * buffer whose last byte sits against a PROT_NONE guard page, so that any
 * load past the end of a payload faults at once.
 */
#ifndef SEGFS_TESTUTIL_H
#define SEGFS_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct test_rng {
	uint64_t state;
} test_rng;

static inline uint64_t test_rng_next(test_rng *r)
{
	uint64_t z = (r->state += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* Uniform in [0, bound) for bound >= 1 (slight bias is fine for tests). */
static inline uint64_t test_rng_below(test_rng *r, uint64_t bound)
{
	return test_rng_next(r) % bound;
}

/* A value whose bit width is uniform in 0..64. */
static inline uint64_t test_rng_wide(test_rng *r)
{
	unsigned width = (unsigned)test_rng_below(r, 65);
	if (width == 0)
		return 0;
	uint64_t v = test_rng_next(r);
	if (width < 64)
		v = (v & ((1ull << (width - 1)) - 1)) | (1ull << (width - 1));
	else
		v |= 1ull << 63;
	return v;
}

/*
 * A region of len bytes that ends exactly at a PROT_NONE page. Returns the
 * pointer to the first of the len bytes; free with guarded_free(p, len).
 */
typedef struct guarded {
	uint8_t *map;
	size_t map_len;
	uint8_t *data;
} guarded;

static inline int guarded_alloc(guarded *g, size_t len)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t data_pages = (len + page - 1) / page;
	if (data_pages == 0)
		data_pages = 1;
	g->map_len = (data_pages + 1) * page;
	void *m = mmap(NULL, g->map_len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return -1;
	g->map = m;
	if (mprotect(g->map + data_pages * page, page, PROT_NONE) != 0) {
		munmap(m, g->map_len);
		return -1;
	}
	g->data = g->map + data_pages * page - len;
	return 0;
}

static inline void guarded_free(guarded *g)
{
	munmap(g->map, g->map_len);
}

#endif
