/*
 * bench_crc32c — CRC32C throughput in GB/s (10^9 bytes per second).
 *
 * Workloads: buf-16MiB is one pass over a 16 MiB buffer of random bytes
 * (larger than most caches); buf-64KiB, buf-4KiB, buf-256B and buf-64B
 * checksum the first 64 KiB ... 64 bytes of that buffer again and again,
 * 16 MiB in all per observation, so the data stays in cache and the
 * per-call cost shows (kvsi_crc32c switches paths at 128 bytes).
 * Variants:
 *   memcpy          copies the same bytes to a second buffer (a bandwidth
 *                   reference, not a checksum)
 *   kvseg           kvsi_crc32c (the run-time choice)
 *   kvseg-portable  kvsi_crc32c_portable
 *   kvseg-hw        kvsi_crc32c_hw (only when the CPU has it)
 *   isal            ISA-L crc32_iscsi (only when built with peers)
 * Each call checksums one buffer from scratch (initial value 0). The timer
 * covers the calls only. Excluded: filling the buffers (so every page is
 * mapped before timing), the check that every implementation gives the
 * standard check value 0xE3069283 for "123456789" and the same CRC as the
 * portable one on the whole buffer, and the comparison of each
 * observation's result with the expected one afterwards.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvseg/bits.h"
#include "kvseg/crc32c.h"

#include "bench_gen.h"
#include "harness.h"

#ifdef BENCH_HAVE_ISAL
#include <isa-l/crc.h>
#endif

#define BIG ((size_t)16 << 20)

static const struct workload {
	const char *name;
	size_t len; /* bytes per call; BIG / len calls per observation */
} workloads[] = {
    {"buf-16MiB", BIG},
    {"buf-64KiB", (size_t)64 << 10},
    {"buf-4KiB", (size_t)4 << 10},
    {"buf-256B", 256},
    {"buf-64B", 64},
};
#define WORKLOAD_COUNT (sizeof workloads / sizeof workloads[0])

/* ---- implementations under a common signature --------------------------- */

typedef uint32_t (*crc_fn)(uint32_t crc, const void *data, size_t len);

#ifdef BENCH_HAVE_ISAL
/* ISA-L keeps the register inverted and takes an int length:
 * crc32c(crc, d) = ~crc32_iscsi(d, len, ~crc); chunks chain the same way. */
static uint32_t crc_isal(uint32_t crc, const void *data, size_t len)
{
	unsigned char *p = (unsigned char *)(uintptr_t)data;
	unsigned state = ~crc;
	while (len > 0) {
		size_t n = len < (size_t)1 << 30 ? len : (size_t)1 << 30;
		state = crc32_iscsi(p, (int)n, state);
		p += n;
		len -= n;
	}
	return ~state;
}
#endif

typedef struct variant {
	const char *name;
	crc_fn crc; /* NULL for memcpy */
} variant;

static variant variants[8];
static size_t variant_count;

static void offer(const char *name, crc_fn crc)
{
	variants[variant_count].name = name;
	variants[variant_count].crc = crc;
	variant_count++;
}

/* ---- observations ------------------------------------------------------- */

typedef struct run {
	const variant *v;
	const uint8_t *src;
	uint8_t *dst;
	size_t len;
	uint64_t expected; /* the sum of the CRCs of one observation */
} run;

static double observe(void *ctx)
{
	const run *r = ctx;
	size_t calls = BIG / r->len;
	uint64_t acc = 0;
	uint64_t t0, t1;
	if (r->v->crc == NULL) {
		t0 = bench_now_ns();
		for (size_t i = 0; i < calls; i++) {
			memcpy(r->dst, r->src, r->len);
			/* The copies count: none may be merged or dropped. */
			__asm__ volatile("" : : "r"(r->dst) : "memory");
		}
		t1 = bench_now_ns();
	} else {
		crc_fn crc = r->v->crc;
		t0 = bench_now_ns();
		for (size_t i = 0; i < calls; i++)
			acc += crc(0, r->src, r->len);
		t1 = bench_now_ns();
		if (acc != r->expected)
			bench_fail("%s: a timed pass summed to %llx, not %llx",
			           r->v->name, (unsigned long long)acc,
			           (unsigned long long)r->expected);
	}
	bench_sink(acc);
	return (double)BIG / (double)(t1 - t0);
}

static void verify(const uint8_t *buf)
{
	static const char check_string[] = "123456789";
	uint32_t want = kvsi_crc32c_portable(0, buf, BIG);
	for (size_t i = 0; i < variant_count; i++) {
		crc_fn crc = variants[i].crc;
		if (crc == NULL)
			continue;
		uint32_t c = crc(0, check_string, 9);
		if (c != 0xE3069283u)
			bench_fail("%s: CRC32C(\"123456789\") = %08x, not "
			           "e3069283",
			           variants[i].name, (unsigned)c);
		c = crc(0, buf, BIG);
		if (c != want)
			bench_fail("%s: CRC of the buffer is %08x, the "
			           "portable one says %08x",
			           variants[i].name, (unsigned)c,
			           (unsigned)want);
		/* Chaining: the CRC of a then b continues from that of a. */
		c = crc(crc(0, buf, 1000003), buf + 1000003, BIG - 1000003);
		if (c != want)
			bench_fail("%s: chained CRC is %08x, not %08x",
			           variants[i].name, (unsigned)c,
			           (unsigned)want);
	}
}

int main(int argc, char **argv)
{
	offer("memcpy", NULL);
	offer("kvseg", kvsi_crc32c);
	offer("kvseg-portable", kvsi_crc32c_portable);
	if (kvsi_crc32c_hw_available())
		offer("kvseg-hw", kvsi_crc32c_hw);
#ifdef BENCH_HAVE_ISAL
	offer("isal", crc_isal);
#endif
	const char *vnames[sizeof variants / sizeof variants[0] + 1];
	for (size_t i = 0; i < variant_count; i++)
		vnames[i] = variants[i].name;
	vnames[variant_count] = NULL;
	const char *wnames[WORKLOAD_COUNT + 1];
	for (size_t i = 0; i < WORKLOAD_COUNT; i++)
		wnames[i] = workloads[i].name;
	wnames[WORKLOAD_COUNT] = NULL;

	bench_opts o;
	bench_parse(&o, argc, argv, "crc32c", wnames, vnames);

	uint8_t *src = bench_alloc(BIG);
	uint8_t *dst = bench_alloc(BIG);
	bench_rng rng = {0xC4C32C0000000001ull};
	for (size_t i = 0; i < BIG; i += 8)
		kvs_store_le64(src + i, bench_rng_next(&rng));
	memset(dst, 0, BIG);
	verify(src);

	run r = {NULL, src, dst, 0, 0};
	for (size_t i = 0; i < variant_count; i++)
		if (strcmp(variants[i].name, o.variant) == 0)
			r.v = &variants[i];
	for (size_t i = 0; i < WORKLOAD_COUNT; i++)
		if (strcmp(workloads[i].name, o.workload) == 0)
			r.len = workloads[i].len;
	r.expected =
	    (uint64_t)(BIG / r.len) * kvsi_crc32c_portable(0, src, r.len);

	bench_observe(&o, "throughput", "GB/s", observe, &r);

	if (r.v->crc == NULL && memcmp(src, dst, r.len) != 0)
		bench_fail("memcpy: the copy differs from the source");
	free(src);
	free(dst);
	return 0;
}
