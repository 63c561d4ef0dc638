/*
 * bench_ef_sdsl — the peer of bench_ef: the same sequence and the same
 * queries (bench_gen.h) on sdsl-lite 2.1.1's sd_vector<>, as variant 'sdsl'.
 *
 * The sequence is stored as a bit vector of length max + 1 with a one at each
 * position (built with sd_vector_builder). Workloads:
 *   access-random    select_1(i + 1) of sd_vector<>::select_1_type
 *   access-seq       select_1(i + 1) for i = 0 .. n-1 in order
 *   next_geq-random  i = rank_1(x) (rank_1_type: ones before x, the index of
 *                    the first element >= x), then select_1(i + 1)
 *   iterate          the fastest correct forward walk found in sdsl 2.1.1,
 *                    which has no iterator over the ones: sdsl::bits::next
 *                    over the public high bit vector plus low[i]. The plain
 *                    select_1 walk is access-seq.
 *   build            sd_vector_builder over the sequence, the sd_vector
 *                    made from it and its select_1 and rank_1 supports (as
 *                    kvsi_ef_build's output holds its select samples), per
 *                    element
 *   space            no timing: size_in_bytes of the sd_vector (low, high
 *                    and its two select supports) + select_1 + rank_1
 * The timer covers the query loop or the build only; building the fixture,
 * the checks of every answer against the plain array and the per-observation
 * checksum comparison are outside it.
 */
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <vector>

#include <sdsl/sd_vector.hpp>
#include <sdsl/util.hpp>

#include "bench_gen.h"
#include "bench_peer.h"
#include "harness.h"

namespace
{

const size_t N = BENCH_EF_COUNT;
const size_t Q = BENCH_EF_QUERIES;

const char *const workload_names[] = {
    "access-random", "access-seq", "next_geq-random", "iterate",
    "build",         "space",      nullptr,
};
const char *const variant_names[] = {"sdsl", nullptr};

struct fixture {
	std::vector<uint64_t> x, indices, targets;
	sdsl::sd_vector<> sd;
	sdsl::sd_vector<>::select_1_type select1;
	sdsl::sd_vector<>::rank_1_type rank1;
};

uint64_t run_access_random(const fixture &f)
{
	uint64_t sum = 0;
	for (size_t j = 0; j < Q; j++)
		sum += f.select1(f.indices[j] + 1);
	return sum;
}

uint64_t run_access_seq(const fixture &f)
{
	uint64_t sum = 0;
	for (size_t i = 0; i < N; i++)
		sum += f.select1(i + 1);
	return sum;
}

uint64_t run_next_geq(const fixture &f)
{
	uint64_t sum = 0;
	for (size_t j = 0; j < Q; j++) {
		uint64_t i = f.rank1(f.targets[j]);
		sum += i + f.select1(i + 1); /* i < n: every target <= max */
	}
	return sum;
}

/* Element i sets bit (x_i >> wl) + i of high and keeps its low wl bits in
 * low[i]; bits::next finds the next one from a bit position onwards. */
uint64_t run_iterate(const fixture &f)
{
	const uint64_t *high = f.sd.high.data();
	const sdsl::int_vector<> &low = f.sd.low;
	const unsigned wl = f.sd.wl;
	uint64_t sum = 0, pos = 0;
	for (size_t i = 0; i < N; i++) {
		pos = sdsl::bits::next(high, pos);
		sum += ((pos - i) << wl) | low[i];
		pos++;
	}
	return sum;
}

void verify(const fixture &f)
{
	for (size_t i = 0; i < N; i++)
		if (f.select1(i + 1) != f.x[i])
			bench_fail("select_1(%zu) is wrong", i + 1);
	for (size_t j = 0; j < Q; j++) {
		uint64_t t = f.targets[j];
		size_t want = bench_lower_bound(f.x.data(), N, t);
		uint64_t i = f.rank1(t);
		if (i != want || f.select1(i + 1) != f.x[want])
			bench_fail("rank_1(%llu) = %llu, not %zu",
			           (unsigned long long)t, (unsigned long long)i,
			           want);
	}
	const uint64_t *high = f.sd.high.data();
	uint64_t pos = 0;
	for (size_t i = 0; i < N; i++) {
		pos = sdsl::bits::next(high, pos);
		if ((((pos - i) << f.sd.wl) | f.sd.low[i]) != f.x[i])
			bench_fail("the forward walk is wrong at index %zu", i);
		pos++;
	}
}

/* The sequence as bench_main's fixture holds it, from scratch; the
 * element count when it came out whole (rank_1 at the end). */
uint64_t run_build(const fixture &f)
{
	sdsl::sd_vector_builder builder(f.x[N - 1] + 1, N);
	for (uint64_t v : f.x)
		builder.set(v);
	sdsl::sd_vector<> sd(builder);
	sdsl::sd_vector<>::select_1_type select1;
	sdsl::sd_vector<>::rank_1_type rank1;
	sdsl::util::init_support(select1, &sd);
	sdsl::util::init_support(rank1, &sd);
	return rank1(f.x[N - 1] + 1) == N && select1(N) == f.x[N - 1] ? N : 0;
}

struct run {
	const fixture *f;
	uint64_t (*loop)(const fixture &f);
	uint64_t ops;
	uint64_t expected;
};

double observe(void *ctx)
{
	const run *r = static_cast<const run *>(ctx);
	uint64_t t0 = bench_now_ns();
	uint64_t sum = r->loop(*r->f);
	uint64_t t1 = bench_now_ns();
	if (sum != r->expected)
		bench_fail("a timed pass gave checksum %llu, not %llu",
		           (unsigned long long)sum,
		           (unsigned long long)r->expected);
	bench_sink(sum);
	return static_cast<double>(t1 - t0) / static_cast<double>(r->ops);
}

int bench_main(int argc, char **argv)
{
	bench_opts o;
	bench_parse(&o, argc, argv, "ef", workload_names, variant_names);

	fixture f;
	f.x.resize(N);
	f.indices.resize(Q);
	f.targets.resize(Q);
	bench_ef_positions(f.x.data(), N);
	bench_ef_indices(f.indices.data(), Q, N);
	bench_ef_targets(f.targets.data(), Q, f.x[N - 1]);

	sdsl::sd_vector_builder builder(f.x[N - 1] + 1, N);
	for (uint64_t v : f.x)
		builder.set(v);
	f.sd = sdsl::sd_vector<>(builder);
	sdsl::util::init_support(f.select1, &f.sd);
	sdsl::util::init_support(f.rank1, &f.sd);
	verify(f);

	if (std::strcmp(o.workload, "space") == 0) {
		double bytes = static_cast<double>(
		    sdsl::size_in_bytes(f.sd) + sdsl::size_in_bytes(f.select1) +
		    sdsl::size_in_bytes(f.rank1));
		bench_row(&o, 0, 0, "size", bytes, "bytes");
		bench_row(&o, 0, 0, "bits",
		          8.0 * bytes / static_cast<double>(N), "bits/element");
		return 0;
	}

	run r = {&f, nullptr, Q, 0};
	if (std::strcmp(o.workload, "access-random") == 0)
		r.loop = run_access_random;
	else if (std::strcmp(o.workload, "access-seq") == 0)
		r.loop = run_access_seq;
	else if (std::strcmp(o.workload, "next_geq-random") == 0)
		r.loop = run_next_geq;
	else if (std::strcmp(o.workload, "build") == 0)
		r.loop = run_build;
	else /* iterate */
		r.loop = run_iterate;
	if (r.loop != run_access_random && r.loop != run_next_geq)
		r.ops = N;
	r.expected = bench_ef_expected(o.workload, f.x.data(), N,
	                               f.indices.data(), f.targets.data(), Q);
	bench_observe(&o, "time", "ns/op", observe, &r);
	return 0;
}

} // namespace

int main(int argc, char **argv)
{
	return bench_cxx_main("sdsl", bench_main, argc, argv);
}
