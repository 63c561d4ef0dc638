/*
 * test_crc32c.c — CRC32C (Castagnoli) against an independent oracle.
 *
 * What it proves: kvsi_crc32c (the run-time dispatch), kvsi_crc32c_portable
 * and, when the CPU has it, kvsi_crc32c_hw all compute the standard CRC32C
 * (reflected polynomial 0x82F63B78, init ~0, final xor ~0) for every length
 * 0..2048 at every start alignment 0..15, for large lengths around every
 * block size an implementation is likely to use (8, 24, 64, 256, 768, 8 KiB,
 * 3 x 8 KiB, 1 MiB + odd) and over 1 GiB (2^30 + 1, 2^31 + 3 and
 * 2^32 + 7 bytes), from any starting crc; that checksums chain
 * (f(f(0, a), b) == f(0, a || b)) at every split point of small buffers and
 * at random points of large ones, also mixing implementations across a
 * split; and that no implementation reads a byte outside [data, data + len)
 * (buffers placed against PROT_NONE pages on either side, and exact-size
 * heap copies for AddressSanitizer).
 *
 * Oracle: a bit-at-a-time CRC written here (ref_crc), itself checked against
 * the RFC 3720 appendix B.4 vectors and the "123456789" check value; for
 * the buffers over 1 GiB (random head and tail, zeros between) the zero run
 * is applied as a GF(2) matrix power, also written here. The code under
 * test never computes an expected value.
 *
 * The PRNG seed is fixed and printed; a failure prints the implementation,
 * the length, the alignment and the split point.
 */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kvseg/crc32c.h"
#include "testutil.h"

#define SEED 0xC3C32C0FFEE1234ull

/* ---- the oracle ---------------------------------------------------------- */

/* One byte into the raw (pre-inverted) register, one bit at a time. */
static inline uint32_t ref_step(uint32_t reg, uint8_t byte)
{
	reg ^= byte;
	for (int k = 0; k < 8; k++)
		reg = (reg >> 1) ^ (0x82F63B78u & (0u - (reg & 1u)));
	return reg;
}

/* The CRC32C of data continuing from crc, bit at a time. */
static uint32_t ref_crc(uint32_t crc, const uint8_t *data, size_t len)
{
	uint32_t reg = ~crc;
	for (size_t i = 0; i < len; i++)
		reg = ref_step(reg, data[i]);
	return ~reg;
}

/* ---- the implementations under test ---------------------------------------
 */

typedef uint32_t (*crc_fn)(uint32_t crc, const void *data, size_t len);

typedef struct impl {
	const char *name;
	crc_fn fn;
} impl;

static impl impls[3];
static size_t n_impls;

static int setup_impls(void **state)
{
	(void)state;
	n_impls = 0;
	impls[n_impls++] = (impl){"kvsi_crc32c", kvsi_crc32c};
	impls[n_impls++] = (impl){"kvsi_crc32c_portable", kvsi_crc32c_portable};
	if (kvsi_crc32c_hw_available()) {
		impls[n_impls++] = (impl){"kvsi_crc32c_hw", kvsi_crc32c_hw};
		printf("[ INFO     ] hardware CRC32C available: testing "
		       "dispatch, portable and hw\n");
	} else {
		printf("[ INFO     ] hardware CRC32C NOT available on this "
		       "CPU/build: kvsi_crc32c_hw is not tested; testing "
		       "dispatch and portable only\n");
	}
#if defined(__x86_64__) || defined(__i386__)
	__builtin_cpu_init();
	if (__builtin_cpu_supports("sse4.2") && !kvsi_crc32c_hw_available())
		printf("[ NOTE     ] the CPU has SSE4.2 but "
		       "kvsi_crc32c_hw_available() is false\n");
#endif
	printf("[ INFO     ] seed 0x%016" PRIx64 "\n", (uint64_t)SEED);
	return 0;
}

#define CHECK_CRC(got, want, ...)                                              \
	do {                                                                   \
		uint32_t got_ = (got), want_ = (want);                         \
		if (got_ != want_) {                                           \
			print_error("CRC mismatch: got 0x%08" PRIx32           \
			            " expected 0x%08" PRIx32 ": ",             \
			            got_, want_);                              \
			print_error(__VA_ARGS__);                              \
			print_error("\n");                                     \
			fail();                                                \
		}                                                              \
	} while (0)

/* 64-byte aligned heap memory of at least n bytes (aligned_alloc needs a
 * multiple of the alignment). */
static uint8_t *alloc64(size_t n)
{
	uint8_t *p = aligned_alloc(64, (n + 63) / 64 * 64);
	assert_non_null(p);
	return p;
}

static void fill_random(test_rng *r, uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(test_rng_next(r) >> 56);
}

/* prefix[k] = ref_crc(0, p, k) for k = 0..n. */
static void ref_prefixes(const uint8_t *p, size_t n, uint32_t *prefix)
{
	uint32_t reg = ~0u;
	prefix[0] = 0;
	for (size_t i = 0; i < n; i++) {
		reg = ref_step(reg, p[i]);
		prefix[i + 1] = ~reg;
	}
}

/* ---- known answers ------------------------------------------------------- */

/* RFC 3720 appendix B.4: an iSCSI SCSI Read (10) command PDU. */
static const uint8_t iscsi_read10[48] = {
    0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* 0..7 */
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* 8..15 */
    0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00, /* 16..23 */
    0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18, /* 24..31 */
    0x28, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* 32..39 */
    0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* 40..47 */
};

typedef struct vector {
	const char *name;
	uint8_t bytes[48];
	size_t len;
	uint32_t crc;
} vector;

static size_t known_vectors(vector *v)
{
	size_t n = 0;
	v[n] = (vector){.name = "32 x 0x00", .len = 32, .crc = 0x8A9136AAu};
	memset(v[n++].bytes, 0x00, 32);
	v[n] = (vector){.name = "32 x 0xFF", .len = 32, .crc = 0x62A8AB43u};
	memset(v[n++].bytes, 0xFF, 32);
	v[n] = (vector){.name = "0x00..0x1F", .len = 32, .crc = 0x46DD794Eu};
	for (int i = 0; i < 32; i++)
		v[n].bytes[i] = (uint8_t)i;
	n++;
	v[n] = (vector){.name = "0x1F..0x00", .len = 32, .crc = 0x113FDB5Cu};
	for (int i = 0; i < 32; i++)
		v[n].bytes[i] = (uint8_t)(31 - i);
	n++;
	v[n] = (vector){
	    .name = "iSCSI Read(10) PDU", .len = 48, .crc = 0xD9963A56u};
	memcpy(v[n++].bytes, iscsi_read10, 48);
	v[n] = (vector){.name = "\"123456789\"", .len = 9, .crc = 0xE3069283u};
	memcpy(v[n++].bytes, "123456789", 9);
	return n;
}

/* The oracle itself reproduces the published values. */
static void test_reference_is_crc32c(void **state)
{
	(void)state;
	vector v[8];
	size_t n = known_vectors(v);
	for (size_t i = 0; i < n; i++)
		CHECK_CRC(ref_crc(0, v[i].bytes, v[i].len), v[i].crc,
		          "reference on %s", v[i].name);
	/* The empty message and the chaining law of the reference. */
	CHECK_CRC(ref_crc(0, v[0].bytes, 0), 0, "reference on empty");
	CHECK_CRC(ref_crc(ref_crc(0, iscsi_read10, 17), iscsi_read10 + 17, 31),
	          0xD9963A56u, "reference chained");
}

static void test_known_vectors(void **state)
{
	(void)state;
	vector v[8];
	size_t n = known_vectors(v);
	uint8_t buf[48 + 64];
	for (size_t k = 0; k < n_impls; k++) {
		for (size_t i = 0; i < n; i++) {
			CHECK_CRC(impls[k].fn(0, v[i].bytes, v[i].len),
			          v[i].crc, "%s on %s", impls[k].name,
			          v[i].name);
			/* The same bytes at every alignment. */
			for (size_t a = 0; a < 64; a++) {
				memset(buf, 0xA5, sizeof buf);
				memcpy(buf + a, v[i].bytes, v[i].len);
				CHECK_CRC(impls[k].fn(0, buf + a, v[i].len),
				          v[i].crc, "%s on %s at offset %zu",
				          impls[k].name, v[i].name, a);
			}
			/* Against the guard page. */
			guarded g = {0};
			assert_int_equal(guarded_alloc(&g, v[i].len), 0);
			memcpy(g.data, v[i].bytes, v[i].len);
			CHECK_CRC(impls[k].fn(0, g.data, v[i].len), v[i].crc,
			          "%s on %s against a guard page",
			          impls[k].name, v[i].name);
			guarded_free(&g);
		}
	}
}

/* A zero-length update leaves any crc unchanged. */
static void test_empty(void **state)
{
	(void)state;
	test_rng r = {SEED ^ 1};
	uint8_t byte = 0x5A;
	uint32_t crcs[8] = {0, 1, 0xFFFFFFFFu, 0x80000000u, 0xE3069283u};
	for (size_t i = 5; i < 8; i++)
		crcs[i] = (uint32_t)test_rng_next(&r);
	for (size_t k = 0; k < n_impls; k++)
		for (size_t i = 0; i < 8; i++)
			CHECK_CRC(impls[k].fn(crcs[i], &byte, 0), crcs[i],
			          "%s, length 0, crc 0x%08" PRIx32,
			          impls[k].name, crcs[i]);
}

/* ---- random buffers ------------------------------------------------------ */

#define SMALL_MAX 2048
#define ALIGNS    16

/* Every length 0..2048 at every start alignment 0..15, from crc 0. */
static void test_all_small_lengths_and_alignments(void **state)
{
	(void)state;
	test_rng r = {SEED ^ 2};
	uint8_t *base = alloc64(SMALL_MAX + 128);
	uint32_t *prefix = malloc((SMALL_MAX + 1) * sizeof *prefix);
	assert_non_null(base);
	assert_non_null(prefix);
	fill_random(&r, base, SMALL_MAX + 128);
	for (size_t a = 0; a < ALIGNS; a++) {
		const uint8_t *p = base + a;
		ref_prefixes(p, SMALL_MAX, prefix);
		for (size_t len = 0; len <= SMALL_MAX; len++)
			for (size_t k = 0; k < n_impls; k++)
				CHECK_CRC(impls[k].fn(0, p, len), prefix[len],
				          "%s, length %zu, alignment %zu",
				          impls[k].name, len, a);
	}
	free(prefix);
	free(base);
}

/* Every length 0..2048 from a random nonzero crc, the alignment varying. */
static void test_small_lengths_nonzero_crc(void **state)
{
	(void)state;
	test_rng r = {SEED ^ 3};
	uint8_t *base = alloc64(SMALL_MAX + 128);
	assert_non_null(base);
	fill_random(&r, base, SMALL_MAX + 128);
	for (size_t len = 0; len <= SMALL_MAX; len++) {
		size_t a = (len * 7) % ALIGNS;
		uint32_t crc = (uint32_t)test_rng_next(&r);
		uint32_t want = ref_crc(crc, base + a, len);
		for (size_t k = 0; k < n_impls; k++)
			CHECK_CRC(
			    impls[k].fn(crc, base + a, len), want,
			    "%s, length %zu, alignment %zu, crc 0x%08" PRIx32,
			    impls[k].name, len, a, crc);
	}
	free(base);
}

/* Lengths around the block sizes of the usual fast paths. */
static size_t large_lengths(size_t *out, size_t cap, size_t limit)
{
	static const size_t blocks[] = {
	    8,    16,   24,   32,   64,    128,   256,   512,   768,
	    1024, 3072, 4096, 8192, 16384, 24576, 32768, 65536, 3 * 65536};
	size_t n = 0;
	for (size_t b = 0; b < sizeof blocks / sizeof blocks[0]; b++) {
		for (size_t mult = 1; mult <= 4; mult++) {
			size_t c = blocks[b] * mult;
			if (c < SMALL_MAX && blocks[b] < 256)
				continue; /* covered by the exhaustive test */
			for (int d = -9; d <= 9; d++) {
				size_t len = (size_t)((long)c + d);
				if (len <= limit && n < cap)
					out[n++] = len;
			}
		}
	}
	static const size_t extra[] = {
	    1u << 20,        (1u << 20) + 1,    (1u << 20) + 3,  (1u << 20) + 7,
	    (1u << 20) + 13, (1u << 20) + 4095, (1u << 20) - 1,  3 * 8192 - 1,
	    3 * 8192 + 1,    2 * 3 * 8192 + 1,  3 * 256 * 5 + 3, 100003,
	    999999};
	for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++)
		if (extra[i] <= limit && n < cap)
			out[n++] = extra[i];
	return n;
}

#define BIG ((1u << 20) + 4096)

static void test_large_lengths(void **state)
{
	(void)state;
	test_rng r = {SEED ^ 4};
	uint8_t *base = alloc64(BIG + 64);
	uint32_t *prefix = malloc(((size_t)BIG + 1) * sizeof *prefix);
	size_t lens[1024];
	size_t nl = large_lengths(lens, 1024, BIG);
	assert_non_null(base);
	assert_non_null(prefix);
	fill_random(&r, base, BIG + 64);
	printf("[ INFO     ] %zu large lengths x %d alignments\n", nl, ALIGNS);
	for (size_t a = 0; a < ALIGNS; a++) {
		const uint8_t *p = base + a;
		ref_prefixes(p, BIG, prefix);
		for (size_t i = 0; i < nl; i++) {
			/* The long lengths at a few alignments only. */
			if (lens[i] > 200000 && a % 5 != 0)
				continue;
			for (size_t k = 0; k < n_impls; k++)
				CHECK_CRC(impls[k].fn(0, p, lens[i]),
				          prefix[lens[i]],
				          "%s, length %zu, alignment %zu",
				          impls[k].name, lens[i], a);
		}
	}
	/* Nonzero starting crc on large lengths. */
	for (size_t i = 0; i < nl; i += 7) {
		size_t a = i % ALIGNS;
		uint32_t crc = (uint32_t)test_rng_next(&r);
		uint32_t want = ref_crc(crc, base + a, lens[i]);
		for (size_t k = 0; k < n_impls; k++)
			CHECK_CRC(
			    impls[k].fn(crc, base + a, lens[i]), want,
			    "%s, length %zu, alignment %zu, crc 0x%08" PRIx32,
			    impls[k].name, lens[i], a, crc);
	}
	free(prefix);
	free(base);
}

/* Special contents: all zero, all ones, a CRC-cancelling pattern. */
static void test_special_contents(void **state)
{
	(void)state;
	static const size_t lens[] = {1,    7,     8,     9,     63,   64,
	                              65,   255,   256,   769,   8191, 8192,
	                              8193, 24575, 24576, 24577, 65537};
	uint8_t *buf = malloc(65537 + 16);
	assert_non_null(buf);
	static const uint8_t fills[] = {0x00, 0xFF, 0x80, 0x01};
	for (size_t f = 0; f < sizeof fills; f++) {
		memset(buf, fills[f], 65537 + 16);
		for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
			for (size_t a = 0; a < 16; a += 5) {
				uint32_t want = ref_crc(0, buf + a, lens[i]);
				for (size_t k = 0; k < n_impls; k++)
					CHECK_CRC(
					    impls[k].fn(0, buf + a, lens[i]),
					    want,
					    "%s, fill 0x%02x, length %zu,"
					    " alignment %zu",
					    impls[k].name, fills[f], lens[i],
					    a);
			}
		}
	}
	free(buf);
}

/* ---- chaining ------------------------------------------------------------ */

/* Every split point of every length 0..300, each half by every impl. */
static void test_chaining_every_split(void **state)
{
	(void)state;
	test_rng r = {SEED ^ 5};
	enum { N = 300 };
	uint8_t *base = alloc64(N + 64);
	uint32_t prefix[N + 1];
	assert_non_null(base);
	fill_random(&r, base, N + 64);
	for (size_t len = 0; len <= N; len++) {
		size_t a = len % ALIGNS;
		const uint8_t *p = base + a;
		ref_prefixes(p, len, prefix);
		for (size_t cut = 0; cut <= len; cut++) {
			for (size_t k1 = 0; k1 < n_impls; k1++) {
				uint32_t c1 = impls[k1].fn(0, p, cut);
				CHECK_CRC(c1, prefix[cut],
				          "%s first part, length %zu, "
				          "alignment %zu",
				          impls[k1].name, cut, a);
				for (size_t k2 = 0; k2 < n_impls; k2++)
					CHECK_CRC(impls[k2].fn(c1, p + cut,
					                       len - cut),
					          prefix[len],
					          "%s then %s, length %zu, "
					          "split at %zu, alignment %zu",
					          impls[k1].name,
					          impls[k2].name, len, cut, a);
			}
		}
	}
	free(base);
}

/* Random split points of larger buffers, and many-piece chains. */
static void test_chaining_random_splits(void **state)
{
	(void)state;
	test_rng r = {SEED ^ 6};
	uint8_t *base = alloc64(BIG + 64);
	uint32_t *prefix = malloc(((size_t)BIG + 1) * sizeof *prefix);
	size_t lens[1024];
	size_t nl = large_lengths(lens, 1024, BIG);
	assert_non_null(base);
	assert_non_null(prefix);
	fill_random(&r, base, BIG + 64);
	const size_t a = 3;
	const uint8_t *p = base + a;
	ref_prefixes(p, BIG, prefix);

	/* Two pieces: random cuts of every small length and large length. */
	for (size_t len = 301; len <= SMALL_MAX + nl; len++) {
		size_t L = len <= SMALL_MAX ? len : lens[len - SMALL_MAX - 1];
		int cuts = L > 200000 ? 2 : 4;
		for (int t = 0; t < cuts; t++) {
			size_t cut = (size_t)test_rng_below(&r, L + 1);
			for (size_t k1 = 0; k1 < n_impls; k1++) {
				uint32_t c1 = impls[k1].fn(0, p, cut);
				size_t k2 = (k1 + (size_t)t) % n_impls;
				CHECK_CRC(impls[k2].fn(c1, p + cut, L - cut),
				          prefix[L],
				          "%s then %s, length %zu, split at "
				          "%zu, alignment %zu",
				          impls[k1].name, impls[k2].name, L,
				          cut, a);
			}
		}
	}

	/* Many pieces of random (often tiny) sizes over the whole buffer. */
	for (int round = 0; round < 12; round++) {
		for (size_t k = 0; k < n_impls; k++) {
			uint32_t c = 0;
			size_t pos = 0, pieces = 0;
			size_t total =
			    round % 3 == 0
			        ? BIG
			        : (size_t)test_rng_below(&r, BIG + 1);
			while (pos < total) {
				size_t max_piece = round % 2 ? 40 : 30000;
				size_t piece =
				    (size_t)test_rng_below(&r, max_piece + 1);
				if (piece > total - pos)
					piece = total - pos;
				size_t kk = (k + pieces) % n_impls;
				c = impls[kk].fn(c, p + pos, piece);
				pos += piece;
				pieces++;
				CHECK_CRC(c, prefix[pos],
				          "chain of %zu pieces ending at %zu "
				          "(last by %s)",
				          pieces, pos, impls[kk].name);
			}
		}
	}
	free(prefix);
	free(base);
}

/* ---- buffers of 1 GiB and more ------------------------------------------ */

/*
 * The oracle for long buffers: random head and tail bytes around a run of
 * zeros. Feeding a zero byte is linear on the raw register, so a run of z
 * zeros is a 32 x 32 matrix over GF(2), raised to the power z by squaring
 * (written here, independently of the library's own shift tables). The
 * zeros are untouched anonymous memory, so 4 GiB costs no RAM.
 */
typedef struct gf2_matrix {
	uint32_t col[32]; /* the image of each register bit */
} gf2_matrix;

static uint32_t gf2_apply(const gf2_matrix *m, uint32_t v)
{
	uint32_t r = 0;
	for (int i = 0; v; i++, v >>= 1)
		if (v & 1)
			r ^= m->col[i];
	return r;
}

/* powers[k] feeds 2^k zero bytes. */
static gf2_matrix zero_powers[64];

static void init_zero_powers(void)
{
	for (int i = 0; i < 32; i++)
		zero_powers[0].col[i] = ref_step((uint32_t)1 << i, 0);
	for (int k = 1; k < 64; k++)
		for (int i = 0; i < 32; i++)
			zero_powers[k].col[i] = gf2_apply(
			    &zero_powers[k - 1], zero_powers[k - 1].col[i]);
}

static uint32_t ref_zeros(uint32_t reg, uint64_t z)
{
	for (int k = 0; z; k++, z >>= 1)
		if (z & 1)
			reg = gf2_apply(&zero_powers[k], reg);
	return reg;
}

static void test_huge_lengths(void **state)
{
	(void)state;
	test_rng r = {SEED ^ 8};
	init_zero_powers();
	/* The zero-run oracle agrees with feeding zeros one by one. */
	uint32_t reg = 0x12345678u, slow = reg;
	for (uint64_t z = 0; z < 3000; z++) {
		CHECK_CRC(ref_zeros(reg, z), slow,
		          "zero-run oracle, %" PRIu64 " zeros", z);
		slow = ref_step(slow, 0);
	}
	if (sizeof(size_t) < 8) {
		printf("[ INFO     ] 32-bit size_t: no buffers over 1 GiB\n");
		return;
	}
	static const struct {
		uint64_t len;
		bool portable;
	} cases[] = {
	    {(1ull << 30) + 1, true},
	    {(1ull << 31) + 3, false},
	    {(1ull << 32) + 7, true},
	};
	const size_t head = 4096 + 5, tail = 4096 + 3;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		size_t len = (size_t)cases[c].len;
		size_t data_pages = (len + page - 1) / page;
		size_t map_len = (data_pages + 1) * page;
		uint8_t *m =
		    mmap(NULL, map_len, PROT_READ | PROT_WRITE,
		         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (m == MAP_FAILED) {
			printf("[ INFO     ] cannot map %zu bytes: skipping\n",
			       map_len);
			continue;
		}
		assert_int_equal(
		    mprotect(m + data_pages * page, page, PROT_NONE), 0);
		uint8_t *d =
		    m + data_pages * page - len; /* ends at the guard */
		fill_random(&r, d, head);
		fill_random(&r, d + len - tail, tail);
		uint32_t reg = ~0u;
		for (size_t i = 0; i < head; i++)
			reg = ref_step(reg, d[i]);
		reg = ref_zeros(reg, len - head - tail);
		for (size_t i = len - tail; i < len; i++)
			reg = ref_step(reg, d[i]);
		uint32_t want = ~reg;
		for (size_t k = 0; k < n_impls; k++) {
			if (impls[k].fn == kvsi_crc32c_portable &&
			    !cases[c].portable)
				continue;
			CHECK_CRC(impls[k].fn(0, d, len), want,
			          "%s, length %zu (head and tail random, zeros "
			          "between)",
			          impls[k].name, len);
		}
		/* Chained across a cut above 2^31 (dispatch only). */
		size_t cut = len / 2 + 1;
		uint32_t c1 = kvsi_crc32c(0, d, cut);
		CHECK_CRC(kvsi_crc32c(c1, d + cut, len - cut), want,
		          "kvsi_crc32c, length %zu chained at %zu", len, cut);
		munmap(m, map_len);
	}
}

/* ---- no reads outside the buffer ----------------------------------------- */

static void test_guard_pages(void **state)
{
	(void)state;
	test_rng r = {SEED ^ 7};
	uint8_t tmp[601];
	for (size_t len = 0; len <= 600; len++) {
		fill_random(&r, tmp, len);
		uint32_t want = ref_crc(0, tmp, len);
		uint32_t seed = (uint32_t)test_rng_next(&r);
		uint32_t want_seeded = ref_crc(seed, tmp, len);

		guarded g = {0}; /* the last byte against PROT_NONE */
		assert_int_equal(guarded_alloc(&g, len), 0);
		memcpy(g.data, tmp, len);
		guarded f = {0}; /* the first byte right after PROT_NONE */
		assert_int_equal(guarded_alloc_front(&f, len), 0);
		memcpy(f.data, tmp, len);
		for (size_t k = 0; k < n_impls; k++) {
			CHECK_CRC(impls[k].fn(0, g.data, len), want,
			          "%s, length %zu ending at a guard page",
			          impls[k].name, len);
			CHECK_CRC(impls[k].fn(seed, g.data, len), want_seeded,
			          "%s, length %zu ending at a guard page, "
			          "seeded",
			          impls[k].name, len);
			CHECK_CRC(impls[k].fn(0, f.data, len), want,
			          "%s, length %zu starting after a guard page",
			          impls[k].name, len);
			/* Chained at every point against the guard. */
			if (len <= 80) {
				for (size_t cut = 0; cut <= len; cut++) {
					uint32_t c =
					    impls[k].fn(0, g.data, cut);
					CHECK_CRC(impls[k].fn(c, g.data + cut,
					                      len - cut),
					          want,
					          "%s, length %zu at a guard "
					          "page, split at %zu",
					          impls[k].name, len, cut);
				}
			}
		}
		guarded_free(&f);
		guarded_free(&g);
	}

	/* Exact-size heap copies (AddressSanitizer flags any byte read
	 * past the end or before the start). */
	for (size_t len = 0; len <= SMALL_MAX; len++) {
		uint8_t *h = malloc(len ? len : 1);
		assert_non_null(h);
		fill_random(&r, h, len);
		uint32_t want = ref_crc(0, h, len);
		for (size_t k = 0; k < n_impls; k++)
			CHECK_CRC(impls[k].fn(0, h, len), want,
			          "%s, exact heap buffer of %zu bytes",
			          impls[k].name, len);
		free(h);
	}

	/* A whole page, guarded on both sides, and larger multi-page runs. */
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	static const size_t pages_lens[] = {1, 2, 3, 17};
	for (size_t i = 0; i < sizeof pages_lens / sizeof pages_lens[0]; i++) {
		size_t len = pages_lens[i] * page;
		uint8_t *m = mmap(NULL, len + 2 * page, PROT_READ | PROT_WRITE,
		                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		assert_true(m != MAP_FAILED);
		assert_int_equal(mprotect(m, page, PROT_NONE), 0);
		assert_int_equal(mprotect(m + page + len, page, PROT_NONE), 0);
		uint8_t *d = m + page;
		fill_random(&r, d, len);
		for (size_t off = 0; off < 24; off += 1) {
			size_t l2 = len - 2 * off;
			uint32_t want = ref_crc(0, d + off, l2);
			for (size_t k = 0; k < n_impls; k++)
				CHECK_CRC(impls[k].fn(0, d + off, l2), want,
				          "%s, %zu bytes inside a region "
				          "guarded on both sides, offset %zu",
				          impls[k].name, l2, off);
		}
		munmap(m, len + 2 * page);
	}
}

/* An optional argument selects tests by name (cmocka glob pattern). */
int main(int argc, char **argv)
{
	test_filter_from_argv(argc, argv);
	const struct CMUnitTest tests[] = {
	    TEST(test_reference_is_crc32c),
	    TEST(test_known_vectors),
	    TEST(test_empty),
	    TEST(test_all_small_lengths_and_alignments),
	    TEST(test_small_lengths_nonzero_crc),
	    TEST(test_large_lengths),
	    TEST(test_special_contents),
	    TEST(test_chaining_every_split),
	    TEST(test_chaining_random_splits),
	    TEST(test_guard_pages),
	    TEST(test_huge_lengths),
	};
	return cmocka_run_group_tests(tests, setup_impls, NULL);
}
