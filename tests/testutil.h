/*
 * testutil.h — helpers shared by the unit tests (every tests/test_*.c
 * includes it; none of it is built into libkvseg):
 *
 *  - a deterministic PRNG (splitmix64, so failures reproduce from the
 *    printed seed): test_rng_next / _below / _wide, and test_rng_for(seed,
 *    tag) for an independent stream per test;
 *  - guarded buffers: guarded_alloc puts the last byte of a payload against
 *    a PROT_NONE page, guarded_alloc_front its first byte right after one,
 *    so that any load outside the payload faults at once;
 *  - reporting on top of cmocka: test_status_name (a kvs_status as the
 *    name of its constant), CHECK / CHECK_ST (fail with the condition or
 *    the two statuses plus a printf-style context), FAILF (fail with the
 *    file's g_seq / g_mode in front), EXPECT_U64 / EXPECT_ST (compare two
 *    values or statuses, and FAILF with both), ULL and U64MAX;
 *  - naive bit models written from the format contracts, never from
 *    libkvseg: MSB-first bit arrays (test_msb_bit_at / _set, and
 *    test_bitvec, one byte per bit), and the Elias-Fano layout formula
 *    (test_ef_ref_low_bits, test_ef_ref_layout) with its little-endian
 *    readers (test_get_le64, test_lsb_bit_at);
 *  - the test programs' frame: the per-test timer (test_timer_start /
 *    test_timer_stop, and TEST(f) to register a timed test), the name
 *    filter from argv[1] or KVSEG_TEST_FILTER, and the seed from
 *    KVSEG_TEST_SEED.
 */
#ifndef SEGFS_TESTUTIL_H
#define SEGFS_TESTUTIL_H

#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "kvseg/ef.h"
#include "kvseg/status.h"

/* ---- PRNG ---------------------------------------------------------------- */

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

/* The generator of one test: the file's seed mixed with a per-test tag. */
static inline test_rng test_rng_for(uint64_t seed, uint64_t tag)
{
	test_rng r = {seed ^ (tag * 0x9E3779B97F4A7C15ull)};
	return r;
}

/* ---- guarded buffers ----------------------------------------------------- */

/*
 * A region of len bytes next to a PROT_NONE page: guarded_alloc places it
 * so that it ends exactly at the page, guarded_alloc_front so that it
 * starts right after it. Both return 0 (or -1 if mapping fails) and set
 * g->data to the first of the len bytes; free with guarded_free(g).
 */
typedef struct guarded {
	uint8_t *map;
	size_t map_len;
	uint8_t *data;
} guarded;

static inline int test_guarded_map(guarded *g, size_t len, bool guard_after)
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
	uint8_t *guard = guard_after ? g->map + data_pages * page : g->map;
	if (mprotect(guard, page, PROT_NONE) != 0) {
		munmap(m, g->map_len);
		return -1;
	}
	g->data = guard_after ? guard - len : guard + page;
	return 0;
}

static inline int guarded_alloc(guarded *g, size_t len)
{
	return test_guarded_map(g, len, true);
}

static inline int guarded_alloc_front(guarded *g, size_t len)
{
	return test_guarded_map(g, len, false);
}

static inline void guarded_free(guarded *g)
{
	munmap(g->map, g->map_len);
}

/* ---- reporting ----------------------------------------------------------- */

#define ULL(x) ((unsigned long long)(x))
#define U64MAX UINT64_MAX

/* The name of a status constant, e.g. "KVS_E_TRUNCATED". */
static inline const char *test_status_name(kvs_status s)
{
	switch (s) {
	case KVS_OK:
		return "KVS_OK";
	case KVS_E_TRUNCATED:
		return "KVS_E_TRUNCATED";
	case KVS_E_OVERLONG:
		return "KVS_E_OVERLONG";
	case KVS_E_OVERFLOW:
		return "KVS_E_OVERFLOW";
	case KVS_E_RANGE:
		return "KVS_E_RANGE";
	case KVS_E_NOSPACE:
		return "KVS_E_NOSPACE";
	case KVS_E_NOMEM:
		return "KVS_E_NOMEM";
	case KVS_E_CORRUPT:
		return "KVS_E_CORRUPT";
	case KVS_E_ORDER:
		return "KVS_E_ORDER";
	case KVS_E_INVAL:
		return "KVS_E_INVAL";
	case KVS_E_IO:
		return "KVS_E_IO";
	case KVS_E_UNSUPPORTED:
		return "KVS_E_UNSUPPORTED";
	case KVS_E_CANCELED:
		return "KVS_E_CANCELED";
	case KVS_E_CONFLICT:
		return "KVS_E_CONFLICT";
	case KVS_E_EXISTS:
		return "KVS_E_EXISTS";
	}
	return "(unknown status)";
}

/* CHECK(cond, fmt, ...): on failure print the condition and the context. */
#define CHECK(cond, ...)                                                       \
	do {                                                                   \
		if (!(cond)) {                                                 \
			print_error("%s:%d: check failed: %s\n    ", __FILE__, \
			            __LINE__, #cond);                          \
			print_error(__VA_ARGS__);                              \
			print_error("\n");                                     \
			fail();                                                \
		}                                                              \
	} while (0)

/* CHECK_ST(got, want, fmt, ...): on failure print both status names and
 * the context. */
#define CHECK_ST(got, want, ...)                                               \
	do {                                                                   \
		kvs_status got_ = (got), want_ = (want);                       \
		if (got_ != want_) {                                           \
			print_error("%s:%d: got %s, expected %s\n    ",        \
			            __FILE__, __LINE__,                        \
			            test_status_name(got_),                    \
			            test_status_name(want_));                  \
			print_error(__VA_ARGS__);                              \
			print_error("\n");                                     \
			fail();                                                \
		}                                                              \
	} while (0)

/* FAILF(fmt, ...): fail with "[<g_seq> / <g_mode>] " and the message. The
 * file that uses it defines const char *g_seq (the case under test) and
 * g_mode (how it is being run). */
#define FAILF(...)                                                             \
	do {                                                                   \
		print_error("[%s / %s] ", g_seq, g_mode);                      \
		print_error(__VA_ARGS__);                                      \
		print_error("\n");                                             \
		fail();                                                        \
	} while (0)

/* EXPECT_U64(got, want, fmt, ...): on failure print both values (decimal
 * and hex), then FAILF(fmt, ...). */
#define EXPECT_U64(got, want, ...)                                             \
	do {                                                                   \
		uint64_t got_ = (got), want_ = (want);                         \
		if (got_ != want_) {                                           \
			print_error("got %" PRIu64 " (0x%" PRIx64              \
			            "), expected %" PRIu64 " (0x%" PRIx64      \
			            "): ",                                     \
			            got_, got_, want_, want_);                 \
			FAILF(__VA_ARGS__);                                    \
		}                                                              \
	} while (0)

/* EXPECT_ST(got, want, fmt, ...): on failure print both status names, then
 * FAILF(fmt, ...). */
#define EXPECT_ST(got, want, ...)                                              \
	do {                                                                   \
		kvs_status got_ = (got), want_ = (want);                       \
		if (got_ != want_) {                                           \
			print_error(                                           \
			    "got %s, expected %s: ", test_status_name(got_),   \
			    test_status_name(want_));                          \
			FAILF(__VA_ARGS__);                                    \
		}                                                              \
	} while (0)

/* ---- MSB-first bit arrays ------------------------------------------------ */

/* Bit i of p, where bit i is bit 7 - i % 8 of byte i / 8. */
static inline int test_msb_bit_at(const uint8_t *p, uint64_t i)
{
	return (p[i >> 3] >> (7 - (i & 7))) & 1;
}

static inline void test_msb_bit_set(uint8_t *p, uint64_t i, int b)
{
	uint8_t m = (uint8_t)(0x80u >> (i & 7));
	if (b)
		p[i >> 3] |= m;
	else
		p[i >> 3] &= (uint8_t)~m;
}

/* A growable bit string, one byte (0 or 1) per bit; {0} is empty. */
typedef struct test_bitvec {
	uint8_t *bit;
	size_t n, cap;
} test_bitvec;

static inline void test_bv_push(test_bitvec *v, int b)
{
	if (v->n == v->cap) {
		v->cap = v->cap ? 2 * v->cap : 1024;
		v->bit = realloc(v->bit, v->cap);
		assert_non_null(v->bit);
	}
	v->bit[v->n++] = (uint8_t)(b != 0);
}

/* The low n bits of x, most significant first (bit by bit). */
static inline void test_bv_put(test_bitvec *v, uint64_t x, unsigned n)
{
	for (unsigned i = n; i-- > 0;)
		test_bv_push(v, (int)((x >> i) & 1));
}

static inline void test_bv_free(test_bitvec *v)
{
	free(v->bit);
	v->bit = NULL;
	v->n = v->cap = 0;
}

/* ---- Elias-Fano layout (from the format description) --------------------- */

static inline uint64_t test_ceil_div(uint64_t a, uint64_t b)
{
	return a / b + (a % b != 0);
}

/* The low-bit width l of n values up to max. */
static inline unsigned test_ef_ref_low_bits(uint64_t n, uint64_t max)
{
	if (n == 0)
		return 0;
	uint64_t q = max / n;
	return q == 0 ? 0 : 63u - (unsigned)__builtin_clzll(q);
}

typedef struct test_ef_layout {
	unsigned l;
	uint64_t low_words, upper_bits, upper_words, zeros;
	uint64_t one_samples, zero_samples;
	size_t low_off, upper_off, ones_off, zeros_off, size;
} test_ef_layout;

/* The documented layout; n <= 2^48 so nothing here overflows. */
static inline test_ef_layout test_ef_ref_layout(uint64_t n, uint64_t max)
{
	test_ef_layout L;
	L.l = test_ef_ref_low_bits(n, max);
	L.low_words = test_ceil_div(n * L.l, 64);
	L.zeros = max >> L.l;
	L.upper_bits = n + L.zeros;
	L.upper_words = test_ceil_div(L.upper_bits, 64);
	L.one_samples = test_ceil_div(n, 256);
	L.zero_samples = test_ceil_div(L.zeros, 256);
	L.low_off = KVS_EF_HEADER_BYTES;
	L.upper_off = L.low_off + 8 * L.low_words;
	L.ones_off = L.upper_off + 8 * L.upper_words;
	L.zeros_off = L.ones_off + 8 * L.one_samples;
	L.size = L.zeros_off + 8 * L.zero_samples;
	return L;
}

/* The little-endian 64-bit word at p. */
static inline uint64_t test_get_le64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int k = 0; k < 8; k++)
		v |= (uint64_t)p[k] << (8 * k);
	return v;
}

/* Bit `bit` of base, where bit i is bit i % 8 of byte i / 8. */
static inline bool test_lsb_bit_at(const uint8_t *base, uint64_t bit)
{
	return (base[bit >> 3] >> (bit & 7)) & 1;
}

/* ---- test program frame -------------------------------------------------- */

/* Per-test wall time: TEST(f) registers f to print it after running. */
static inline struct timespec *test_timer_origin(void)
{
	static struct timespec t_start;
	return &t_start;
}

static inline int test_timer_start(void **state)
{
	(void)state;
	clock_gettime(CLOCK_MONOTONIC, test_timer_origin());
	return 0;
}

static inline int test_timer_stop(void **state)
{
	(void)state;
	const struct timespec *t_start = test_timer_origin();
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	printf("[ TIME     ] %.3f s\n",
	       (double)(t.tv_sec - t_start->tv_sec) +
	           (double)(t.tv_nsec - t_start->tv_nsec) * 1e-9);
	return 0;
}

#define TEST(f)                                                                \
	cmocka_unit_test_setup_teardown(f, test_timer_start, test_timer_stop)

/* An optional argument selects tests by name (cmocka glob pattern). */
static inline void test_filter_from_argv(int argc, char **argv)
{
	if (argc > 1)
		cmocka_set_test_filter(argv[1]);
}

/* So does KVSEG_TEST_FILTER, e.g. KVSEG_TEST_FILTER='*guard*'. */
static inline void test_filter_from_env(void)
{
	const char *filter = getenv("KVSEG_TEST_FILTER");
	if (filter != NULL && *filter != '\0')
		cmocka_set_test_filter(filter);
}

/* KVSEG_TEST_SEED if set, else seed; printed as "<prog>: seed 0x...". */
static inline uint64_t test_seed_from_env(const char *prog, uint64_t seed)
{
	const char *s = getenv("KVSEG_TEST_SEED");
	if (s != NULL && *s != '\0')
		seed = strtoull(s, NULL, 0);
	printf("%s: seed 0x%llx (set KVSEG_TEST_SEED to change)\n", prog,
	       ULL(seed));
	fflush(stdout);
	return seed;
}

#endif
