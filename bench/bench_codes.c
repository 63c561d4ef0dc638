/*
 * bench_codes — decoding speed of the count codes, in ns per decoded count.
 *
 * Each workload is 262,144 counts from a fixed-seed splitmix64, encoded once
 * with kvs_put_eg / kvs_put_golomb (docs: bench/README.md). One observation
 * is one kvs_bitreader walking the whole stream: the timer covers
 * kvs_br_init and the 262,144 decode calls with their status checks
 * (kvs_get_eg; for Golomb kvs_get_golomb_by_table, or kvs_get_golomb in
 * g7-computed). Excluded from the timer: generating and encoding the
 * values, building the Golomb decode table, the full decode-and-compare
 * check before any timing, and the comparison of each observation's
 * checksum with the source values afterwards.
 *
 * Variants: kvseg (the decode loop compiled for baseline x86-64),
 * kvseg-mv (the same loop marked KVS_MULTIVERSION) and kvseg-wide (as
 * kvseg-mv, but EG codes through kvs_get_eg_wide; Golomb as kvseg-mv).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvseg/bits.h"
#include "kvseg/codes.h"
#include "kvseg/cpu.h"

#include "bench_gen.h"
#include "harness.h"

#define COUNT ((size_t)1 << 18)

/* Golomb codes are decoded with the decode table (kvs_get_golomb_by_table)
 * or without it (kvs_get_golomb, as the segment readers' field decoder
 * calls it, and the table's fallback). */
enum code_kind { CODE_EG, CODE_GOLOMB, CODE_GOLOMB_COMPUTED, CODE_KINDS };

typedef struct workload {
	const char *name;
	enum code_kind kind;
	unsigned param;     /* EG order k, or Golomb modulus m */
	unsigned max_width; /* values: bit width uniform in 0..max_width */
	uint64_t bound;     /* or, when nonzero: uniform in [0, bound) */
	uint64_t seed;
} workload;

static const workload workloads[] = {
    {.name = "eg0-small",
     .kind = CODE_EG,
     .param = 0,
     .bound = 16,
     .seed = 0xC0DE5000000000E0ull},
    {.name = "eg0-wide",
     .kind = CODE_EG,
     .param = 0,
     .max_width = 32,
     .seed = 0xC0DE5000000000E1ull},
    {.name = "eg3",
     .kind = CODE_EG,
     .param = 3,
     .max_width = 12,
     .seed = 0xC0DE5000000000E3ull},
    {.name = "g7",
     .kind = CODE_GOLOMB,
     .param = 7,
     .bound = 70,
     .seed = 0xC0DE500000000067ull},
    {.name = "g7-computed", /* g7's stream, decoded without the table */
     .kind = CODE_GOLOMB_COMPUTED,
     .param = 7,
     .bound = 70,
     .seed = 0xC0DE500000000067ull},
};
#define WORKLOAD_COUNT (sizeof workloads / sizeof workloads[0])

typedef struct fixture {
	const workload *w;
	kvs_golomb golomb;
	kvs_golomb_table *table; /* Golomb: the decode table, built once */
	const uint8_t *data;     /* the encoded stream */
	uint64_t bits;           /* its length in bits */
	uint64_t *values;        /* the source values */
	uint64_t sum;            /* their sum, the expected checksum */
} fixture;

/* ---- variants: a decoder returns the sum of the values it decoded ------- */

/*
 * The library's inline decoders, as a reader of a stream would call them.
 * Each code's loop is compiled into a function of its own, so that a change
 * to one decoder does not move or reallocate the other's loop.
 */
/* wide is a constant in each caller: kvs_get_eg or kvs_get_eg_wide. */
static inline __attribute__((always_inline)) uint64_t
decode_eg(const fixture *f, int *bad, bool wide)
{
	kvs_bitreader r;
	kvs_br_init(&r, f->data, 0, f->bits);
	uint64_t sum = 0;
	int failed = 0;
	unsigned k = f->w->param;
	for (size_t i = 0; i < COUNT; i++) {
		uint64_t v = 0;
		kvs_status st =
		    wide ? kvs_get_eg_wide(&r, k, &v) : kvs_get_eg(&r, k, &v);
		failed |= st != KVS_OK;
		sum += v;
	}
	*bad = failed;
	return sum;
}

/* by_table is a constant in each caller: one loop or the other. */
static inline __attribute__((always_inline)) uint64_t
decode_golomb(const fixture *f, int *bad, bool by_table)
{
	kvs_bitreader r;
	kvs_br_init(&r, f->data, 0, f->bits);
	uint64_t sum = 0;
	int failed = 0;
	for (size_t i = 0; i < COUNT; i++) {
		uint64_t v = 0;
		kvs_status st = by_table
		                    ? kvs_get_golomb_by_table(&r, f->table, &v)
		                    : kvs_get_golomb(&r, &f->golomb, &v);
		failed |= st != KVS_OK;
		sum += v;
	}
	*bad = failed;
	return sum;
}

/* Compiled for baseline x86-64, as any caller of the inline paths is. */
__attribute__((noinline)) static uint64_t eg_kvseg(const fixture *f, int *bad)
{
	return decode_eg(f, bad, false);
}

__attribute__((noinline)) static uint64_t golomb_kvseg(const fixture *f,
                                                       int *bad)
{
	return decode_golomb(f, bad, true);
}

__attribute__((noinline)) static uint64_t
golomb_computed_kvseg(const fixture *f, int *bad)
{
	return decode_golomb(f, bad, false);
}

/* The same loops marked KVS_MULTIVERSION (kvseg/cpu.h): also compiled for
 * x86-64-v3, picked at load time when the CPU has it. */
KVS_MULTIVERSION __attribute__((noinline)) static uint64_t
eg_kvseg_mv(const fixture *f, int *bad)
{
	return decode_eg(f, bad, false);
}

/* kvs_get_eg_wide, marked KVS_MULTIVERSION like kvseg-mv. */
KVS_MULTIVERSION __attribute__((noinline)) static uint64_t
eg_kvseg_wide(const fixture *f, int *bad)
{
	return decode_eg(f, bad, true);
}

KVS_MULTIVERSION __attribute__((noinline)) static uint64_t
golomb_kvseg_mv(const fixture *f, int *bad)
{
	return decode_golomb(f, bad, true);
}

KVS_MULTIVERSION __attribute__((noinline)) static uint64_t
golomb_computed_kvseg_mv(const fixture *f, int *bad)
{
	return decode_golomb(f, bad, false);
}

typedef struct variant {
	const char *name;
	uint64_t (*decode[CODE_KINDS])(const fixture *f, int *bad);
} variant;

/* Another decoder is one more set of functions and one more line here. */
static const variant variants[] = {
    {"kvseg", {eg_kvseg, golomb_kvseg, golomb_computed_kvseg}},
    {"kvseg-mv", {eg_kvseg_mv, golomb_kvseg_mv, golomb_computed_kvseg_mv}},
    /* Golomb has no wide decoder: the same loops as kvseg-mv. */
    {"kvseg-wide", {eg_kvseg_wide, golomb_kvseg_mv, golomb_computed_kvseg_mv}},
};
#define VARIANT_COUNT (sizeof variants / sizeof variants[0])

/* ---- fixture ------------------------------------------------------------ */

static void check(kvs_status st, const char *what)
{
	if (st != KVS_OK)
		bench_fail("%s: %s", what, kvs_strerror(st));
}

static void build(fixture *f, const workload *w, kvs_bitwriter *bw)
{
	f->w = w;
	f->table = NULL;
	if (w->kind != CODE_EG)
		check(kvs_golomb_init(&f->golomb, w->param), "kvs_golomb_init");
	if (w->kind == CODE_GOLOMB) {
		f->table = bench_alloc(sizeof *f->table);
		check(kvs_golomb_table_init(f->table, w->param),
		      "kvs_golomb_table_init");
	}
	f->values = bench_alloc(COUNT * sizeof *f->values);
	bench_rng rng = {w->seed};
	f->sum = 0;
	for (size_t i = 0; i < COUNT; i++) {
		uint64_t v = w->bound ? bench_rng_below(&rng, w->bound)
		                      : bench_rng_width(&rng, w->max_width);
		f->values[i] = v;
		f->sum += v;
	}

	kvs_bw_init(bw);
	for (size_t i = 0; i < COUNT; i++) {
		if (w->kind == CODE_EG)
			check(kvs_put_eg(bw, f->values[i], w->param),
			      "kvs_put_eg");
		else
			check(kvs_put_golomb(bw, &f->golomb, f->values[i]),
			      "kvs_put_golomb");
	}
	f->bits = kvs_bw_bit_length(bw);
	check(kvs_bw_flush(bw, &f->data, NULL), "kvs_bw_flush");
}

/* Decodes every value once, outside any timer, and compares it with the
 * source; also checks that the stream ends exactly after the last code. */
static void verify(const fixture *f)
{
	kvs_bitreader r;
	kvs_br_init(&r, f->data, 0, f->bits);
	for (size_t i = 0; i < COUNT; i++) {
		uint64_t v = 0;
		kvs_status st =
		    f->w->kind == CODE_EG ? kvs_get_eg(&r, f->w->param, &v)
		    : f->table ? kvs_get_golomb_by_table(&r, f->table, &v)
		               : kvs_get_golomb(&r, &f->golomb, &v);
		if (st != KVS_OK)
			bench_fail("%s: decoding count %zu failed: %s",
			           f->w->name, i, kvs_strerror(st));
		if (v != f->values[i])
			bench_fail("%s: count %zu decoded as %llu, not %llu",
			           f->w->name, i, (unsigned long long)v,
			           (unsigned long long)f->values[i]);
	}
	if (kvs_br_remaining(&r) != 0)
		bench_fail("%s: %llu bits left after the last count",
		           f->w->name,
		           (unsigned long long)kvs_br_remaining(&r));
}

typedef struct run {
	const fixture *f;
	const variant *v;
} run;

static double observe(void *ctx)
{
	const run *r = ctx;
	int bad;
	uint64_t t0 = bench_now_ns();
	uint64_t sum = r->v->decode[r->f->w->kind](r->f, &bad);
	uint64_t t1 = bench_now_ns();
	if (bad || sum != r->f->sum)
		bench_fail("%s/%s: a timed pass decoded wrong values",
		           r->f->w->name, r->v->name);
	bench_sink(sum);
	return (double)(t1 - t0) / (double)COUNT;
}

int main(int argc, char **argv)
{
	const char *wnames[WORKLOAD_COUNT + 1];
	const char *vnames[VARIANT_COUNT + 1];
	for (size_t i = 0; i < WORKLOAD_COUNT; i++)
		wnames[i] = workloads[i].name;
	wnames[WORKLOAD_COUNT] = NULL;
	for (size_t i = 0; i < VARIANT_COUNT; i++)
		vnames[i] = variants[i].name;
	vnames[VARIANT_COUNT] = NULL;

	bench_opts o;
	bench_parse(&o, argc, argv, "codes", wnames, vnames);

	const workload *w = NULL;
	for (size_t i = 0; i < WORKLOAD_COUNT; i++)
		if (strcmp(workloads[i].name, o.workload) == 0)
			w = &workloads[i];
	const variant *v = NULL;
	for (size_t i = 0; i < VARIANT_COUNT; i++)
		if (strcmp(variants[i].name, o.variant) == 0)
			v = &variants[i];

	fixture f;
	kvs_bitwriter bw;
	build(&f, w, &bw);
	verify(&f);

	run r = {&f, v};
	bench_observe(&o, "decode", "ns/count", observe, &r);

	kvs_bw_free(&bw);
	free(f.table);
	free(f.values);
	return 0;
}
