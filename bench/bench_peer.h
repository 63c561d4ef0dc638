/*
 * bench_peer.h — what the C++ peers (bench_ef_sdsl, bench_segment_rocksdb,
 * bench_merge_rocksdb, bench_merge_leveldb) share:
 *
 *  - bench_cxx_main(name, fn, argc, argv): the peer's main(); runs fn and
 *    turns an exception into bench_fail("<name>: <what>");
 *  - bench_merge2(older, newer, put): the two-way merge of two sorted
 *    iterators (LevelDB's or RocksDB's), the newer one's record winning on
 *    equal keys; bench_mergen(its, n, put) the same over n of them;
 *  - bench_merge_inputs(w, ways, merged, older, newer, put): the inputs
 *    each variant merges (two, or the -4way variants' four);
 *  - bench_record_is(key, value, d, i): whether a key and a value (LevelDB
 *    or RocksDB slices) are record i of d.
 */
#ifndef SEGFS_BENCH_PEER_H
#define SEGFS_BENCH_PEER_H

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <initializer_list>

#include "bench_gen.h"
#include "harness.h"

inline int bench_cxx_main(const char *name, int (*fn)(int, char **), int argc,
                          char **argv)
{
	try {
		return fn(argc, argv);
	} catch (const std::exception &e) {
		bench_fail("%s: %s", name, e.what());
	}
}

/* Merges the iterators x (older) and y (newer), both at their first record:
 * put(key, value) for each record in key order; on equal keys y's record
 * and not x's. Returns the records put. The caller checks the iterators'
 * status. */
template <class Iter, class Put>
size_t bench_merge2(Iter *x, Iter *y, Put &&put)
{
	size_t n = 0;
	while (x->Valid() && y->Valid()) {
		int c = x->key().compare(y->key());
		if (c < 0) {
			put(x->key(), x->value());
			x->Next();
		} else {
			put(y->key(), y->value());
			y->Next();
			if (c == 0)
				x->Next();
		}
		n++;
	}
	for (Iter *rest : {x, y})
		for (; rest->Valid(); rest->Next(), n++)
			put(rest->key(), rest->value());
	return n;
}

/* Merges the n iterators its[0] (oldest) .. its[n - 1] (newest), each at
 * its first record, as bench_merge2 does two: on equal keys the newest
 * one's record, and the others' are skipped. The smallest key is found by
 * comparing every live iterator's, as LevelDB's own merging iterator
 * (table/merger.cc, FindSmallest) does. Returns the records put. */
template <class Iter, class Put>
size_t bench_mergen(Iter *const *its, size_t n, Put &&put)
{
	size_t out = 0;
	for (;;) {
		Iter *min = nullptr;
		for (size_t i = 0; i < n; i++)
			if (its[i]->Valid() &&
			    (min == nullptr ||
			     its[i]->key().compare(min->key()) <= 0))
				min = its[i];
		if (min == nullptr)
			return out;
		put(min->key(), min->value());
		out++;
		for (size_t i = 0; i < n; i++)
			if (its[i] != min && its[i]->Valid() &&
			    its[i]->key().compare(min->key()) == 0)
				its[i]->Next();
		min->Next();
	}
}

/* The inputs of a peer's merge, from bench_merge_way: put(i, d) writes
 * input i (oldest first) from d. Returns the number of inputs. */
template <class Put>
size_t bench_merge_inputs(const bench_merge_workload &w, unsigned ways,
                          const bench_seg_data &merged,
                          const bench_seg_data &older,
                          const bench_seg_data &newer, Put &&put)
{
	size_t n = ways ? ways : 2;
	for (size_t i = 0; i < n; i++) {
		bench_seg_data part;
		put(i, *bench_merge_way(&w, ways, &merged, &older, &newer, i,
		                        &part));
		if (ways)
			bench_seg_free(&part);
	}
	return n;
}

template <class Slice>
bool bench_record_is(const Slice &k, const Slice &v, const bench_seg_data &d,
                     size_t i)
{
	size_t len;
	const uint8_t *want = bench_seg_value(&d, i, &len);
	return k.size() == d.key_len &&
	       std::memcmp(k.data(), bench_seg_key(&d, i), d.key_len) == 0 &&
	       v.size() == len &&
	       (len == 0 || std::memcmp(v.data(), want, len) == 0);
}

#endif
