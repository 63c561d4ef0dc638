/*
 * bench_ef — Elias-Fano queries of libkvseg, in ns per operation, and the
 * size of the serialized sequence. bench_ef_sdsl.cpp runs the same
 * workloads on sdsl-lite's sd_vector as the peer variant.
 *
 * The sequence is 262,144 strictly increasing positions with gaps uniform in
 * [1, 1024] (bench_gen.h). Workloads (bench/README.md):
 *   access-random    kvsi_ef_get at 1,048,576 precomputed random indices
 *   access-seq       kvsi_ef_get for i = 0 .. n-1 in order
 *   next_geq-random  kvsi_ef_next_geq at 1,048,576 random targets in [0, max]
 *   iterate          one kvsi_ef_cursor from index 0 to the end
 *   build            kvsi_ef_build of the sequence into a buffer of its size
 *                    (allocated and touched before), per element
 *   validate         kvsi_ef_validate of the built sequence, per element
 *   space            no timing: bytes of the serialized form (kvsi_ef_size)
 * The timer covers the query loop, the build or the validation only.
 * Excluded: generating the sequence and the queries, building, opening and
 * validating the fixture's sequence, checking every answer of every
 * workload against the plain array (and that a build gives the fixture's
 * bytes) before timing, and comparing each observation's checksum with the
 * expected one afterwards.
 *
 * Variants: kvseg (the best paths the CPU has), kvseg-portable
 * (kvsi_ef_set_portable).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvseg/ef.h"

#include "bench_gen.h"
#include "harness.h"

#define N BENCH_EF_COUNT
#define Q BENCH_EF_QUERIES

static const char *const workload_names[] = {
    "access-random", "access-seq", "next_geq-random", "iterate",
    "build",         "validate",   "space",           NULL,
};
static const char *const variant_names[] = {"kvseg", "kvseg-portable", NULL};

typedef struct fixture {
	uint64_t *x;       /* the plain array */
	uint64_t *indices; /* access-random queries */
	uint64_t *targets; /* next_geq-random queries */
	void *data;        /* the serialized sequence */
	void *scratch;     /* build's output, as large */
	size_t size;
	kvsi_ef ef;
} fixture;

static void check(kvs_status st, const char *what)
{
	if (st != KVS_OK)
		bench_fail("%s: %s", what, kvs_strerror(st));
}

/* ---- the timed loops: each returns a checksum of its answers ------------ */

static uint64_t run_access_random(const fixture *f)
{
	uint64_t sum = 0;
	for (size_t j = 0; j < Q; j++) {
		uint64_t v = 0;
		kvsi_ef_get(&f->ef, f->indices[j], &v);
		sum += v;
	}
	return sum;
}

static uint64_t run_access_seq(const fixture *f)
{
	uint64_t sum = 0;
	for (size_t i = 0; i < N; i++) {
		uint64_t v = 0;
		kvsi_ef_get(&f->ef, i, &v);
		sum += v;
	}
	return sum;
}

static uint64_t run_next_geq(const fixture *f)
{
	uint64_t sum = 0;
	for (size_t j = 0; j < Q; j++) {
		uint64_t v = 0;
		uint64_t i = kvsi_ef_next_geq(&f->ef, f->targets[j], &v);
		sum += i + v;
	}
	return sum;
}

static uint64_t run_iterate(const fixture *f)
{
	uint64_t sum = 0;
	kvsi_ef_cursor c;
	kvsi_ef_cursor_seek(&c, &f->ef, 0);
	for (; kvsi_ef_cursor_valid(&c); kvsi_ef_cursor_next(&c))
		sum += c.value;
	return sum;
}

/* build and validate: the element count when they succeed */
static uint64_t run_build(const fixture *f)
{
	return kvsi_ef_build(f->x, N, f->scratch, f->size) == KVS_OK ? N : 0;
}

static uint64_t run_validate(const fixture *f)
{
	return kvsi_ef_validate(&f->ef) == KVS_OK ? N : 0;
}

/* ---- checks against the plain array, before any timing ------------------ */

static void verify(const fixture *f)
{
	uint64_t v;
	for (size_t i = 0; i < N; i++) {
		check(kvsi_ef_get(&f->ef, i, &v), "kvsi_ef_get");
		if (v != f->x[i])
			bench_fail("kvsi_ef_get(%zu) = %llu, not %llu", i,
			           (unsigned long long)v,
			           (unsigned long long)f->x[i]);
	}
	for (size_t j = 0; j < Q; j++) {
		uint64_t t = f->targets[j];
		size_t want = bench_lower_bound(f->x, N, t);
		v = 0;
		uint64_t got = kvsi_ef_next_geq(&f->ef, t, &v);
		if (got != want || v != f->x[want])
			bench_fail(
			    "kvsi_ef_next_geq(%llu) = %llu (value %llu), "
			    "not %zu (value %llu)",
			    (unsigned long long)t, (unsigned long long)got,
			    (unsigned long long)v, want,
			    (unsigned long long)f->x[want]);
	}
	/* Past the end and at the ends. */
	if (kvsi_ef_next_geq(&f->ef, f->x[N - 1] + 1, NULL) != N ||
	    kvsi_ef_next_geq(&f->ef, 0, NULL) != 0 ||
	    kvsi_ef_get(&f->ef, N, &v) != KVS_E_RANGE)
		bench_fail("kvsi_ef_next_geq / kvsi_ef_get wrong at the ends");

	kvsi_ef_cursor c;
	check(kvsi_ef_cursor_seek(&c, &f->ef, 0), "kvsi_ef_cursor_seek");
	size_t i = 0;
	for (; kvsi_ef_cursor_valid(&c); kvsi_ef_cursor_next(&c), i++)
		if (i >= N || c.index != i || c.value != f->x[i])
			bench_fail("the cursor is wrong at index %zu", i);
	if (i != N)
		bench_fail("the cursor stopped after %zu elements", i);

	if (run_build(f) != N || memcmp(f->scratch, f->data, f->size) != 0)
		bench_fail("a second kvsi_ef_build gave other bytes");
	if (run_validate(f) != N)
		bench_fail("kvsi_ef_validate refused the sequence");
}

/* ---- observations ------------------------------------------------------- */

typedef struct run {
	const fixture *f;
	uint64_t (*loop)(const fixture *f);
	uint64_t ops;
	uint64_t expected;
} run;

static double observe(void *ctx)
{
	const run *r = ctx;
	uint64_t t0 = bench_now_ns();
	uint64_t sum = r->loop(r->f);
	uint64_t t1 = bench_now_ns();
	if (sum != r->expected)
		bench_fail("a timed pass gave checksum %llu, not %llu",
		           (unsigned long long)sum,
		           (unsigned long long)r->expected);
	bench_sink(sum);
	return (double)(t1 - t0) / (double)r->ops;
}

int main(int argc, char **argv)
{
	bench_opts o;
	bench_parse(&o, argc, argv, "ef", workload_names, variant_names);

	fixture f;
	f.x = bench_alloc(N * sizeof *f.x);
	f.indices = bench_alloc(Q * sizeof *f.indices);
	f.targets = bench_alloc(Q * sizeof *f.targets);
	bench_ef_positions(f.x, N);
	bench_ef_indices(f.indices, Q, N);
	bench_ef_targets(f.targets, Q, f.x[N - 1]);

	check(kvsi_ef_size(N, f.x[N - 1], &f.size), "kvsi_ef_size");
	f.data = bench_alloc(f.size);
	f.scratch = bench_alloc(f.size);
	memset(f.scratch, 0, f.size);
	check(kvsi_ef_build(f.x, N, f.data, f.size), "kvsi_ef_build");
	check(kvsi_ef_open(&f.ef, f.data, f.size), "kvsi_ef_open");
	check(kvsi_ef_validate(&f.ef), "kvsi_ef_validate");
	kvsi_ef_set_portable(&f.ef, strcmp(o.variant, "kvseg-portable") == 0);
	verify(&f);

	if (strcmp(o.workload, "space") == 0) {
		bench_row(&o, 0, 0, "size", (double)f.size, "bytes");
		bench_row(&o, 0, 0, "bits", 8.0 * (double)f.size / (double)N,
		          "bits/element");
	} else {
		run r = {&f, NULL, Q, 0};
		if (strcmp(o.workload, "access-random") == 0)
			r.loop = run_access_random;
		else if (strcmp(o.workload, "access-seq") == 0)
			r.loop = run_access_seq;
		else if (strcmp(o.workload, "next_geq-random") == 0)
			r.loop = run_next_geq;
		else if (strcmp(o.workload, "build") == 0)
			r.loop = run_build;
		else if (strcmp(o.workload, "validate") == 0)
			r.loop = run_validate;
		else /* iterate */
			r.loop = run_iterate;
		if (r.loop != run_access_random && r.loop != run_next_geq)
			r.ops = N;
		r.expected = bench_ef_expected(o.workload, f.x, N, f.indices,
		                               f.targets, Q);
		bench_observe(&o, "time", "ns/op", observe, &r);
	}

	free(f.data);
	free(f.scratch);
	free(f.x);
	free(f.indices);
	free(f.targets);
	return 0;
}
