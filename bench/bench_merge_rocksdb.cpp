/*
 * bench_merge_rocksdb — the RocksDB peer of bench_merge: the same two
 * inputs and merged records (bench_gen.h), as variant 'rocksdb'; and as
 * 'rocksdb-4way' the same four inputs as bench_merge's -4way variants
 * (record i of the merged records in input i % 4), merged the same way
 * with bench_mergen. It is an iterator merge into an SstFileWriter, not a
 * RocksDB compaction.
 *
 * Each input is one SST file written beforehand with rocksdb::SstFileWriter
 * (Options with kNoCompression, the default BlockBasedTableOptions: 4 KiB
 * blocks, restart interval 16, no filter); a tombstone record is a
 * Delete(). The timer covers one merge: an SstFileReader per input (Open,
 * NewIterator with the default ReadOptions, which verify block checksums),
 * their two-way merge written here (on equal keys the newer input's record
 * wins and the older one's is skipped), an SstFileWriter (Open, Put per
 * record, Finish) into a new file, and destroying the readers, iterators
 * and writer. Files are written through a FileSystem whose syncs do
 * nothing (bench_rocksdb.h), to match KVS_WRITER_NO_SYNC.
 *
 * An SstFileReader iterator is a DB iterator: it hides deletions. The merge
 * therefore never sees the tombstones and its output holds the 16 of 17
 * records that are values — it drops the tombstones, where the kvseg typed
 * modes keep them. The time is still per merge, or divided by all the
 * output records of the workload (tombstones included).
 *
 * Before timing: the inputs are written and read back record by record
 * against the generator (which also brings their pages into the page
 * cache), and one merge's output is compared record by record with the
 * expected records. Excluded from the timer: all of that, and after each
 * observation the check of the output's record count and size and its
 * removal.
 */
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <memory>
#include <string>

#include <rocksdb/env.h>
#include <rocksdb/iterator.h>
#include <rocksdb/options.h>
#include <rocksdb/sst_file_reader.h>
#include <rocksdb/sst_file_writer.h>

#include "bench_gen.h"
#include "bench_peer.h"
#include "bench_rocksdb.h"
#include "harness.h"

namespace
{

const char *const variant_names[] = {"rocksdb", "rocksdb-4way", nullptr};

constexpr size_t MAX_WAYS = 4; /* inputs of rocksdb-4way */

using bench_rocksdb::rcheck;

rocksdb::Slice slice(const uint8_t *p, size_t len)
{
	return rocksdb::Slice(reinterpret_cast<const char *>(p), len);
}

void write_sst(const rocksdb::Options &opt, const std::string &path,
               const bench_seg_data &d)
{
	rocksdb::SstFileWriter w(rocksdb::EnvOptions(), opt);
	rcheck(w.Open(path), "SstFileWriter::Open");
	for (size_t i = 0; i < d.n; i++) {
		rocksdb::Slice key = slice(bench_seg_key(&d, i), d.key_len);
		size_t len;
		const uint8_t *v = bench_seg_value(&d, i, &len);
		rcheck(d.tombstone[i] ? w.Delete(key)
		                      : w.Put(key, slice(v, len)),
		       "SstFileWriter::Put");
	}
	rcheck(w.Finish(), "SstFileWriter::Finish");
}

/* Compares the SST at path with d's records, which it shows without the
 * tombstones. */
void verify_sst(const rocksdb::Options &opt, const std::string &path,
                const bench_seg_data &d, const char *what)
{
	rocksdb::SstFileReader reader(opt);
	rcheck(reader.Open(path), what);
	rcheck(reader.VerifyChecksum(), what);
	std::unique_ptr<rocksdb::Iterator> it(
	    reader.NewIterator(rocksdb::ReadOptions()));
	it->SeekToFirst();
	for (size_t i = 0; i < d.n; i++) {
		if (d.tombstone[i])
			continue;
		if (!it->Valid())
			bench_fail("%s: ends before record %zu", what, i);
		if (!bench_record_is(it->key(), it->value(), d, i))
			bench_fail("%s: record %zu is wrong", what, i);
		it->Next();
	}
	if (it->Valid())
		bench_fail("%s: does not end after the last record", what);
	rcheck(it->status(), what);
}

struct run {
	const bench_merge_workload *w = nullptr;
	std::unique_ptr<rocksdb::Env> env;
	rocksdb::Options opt;
	size_t n = 2; /* inputs, oldest first */
	std::string inputs[MAX_WAYS], out;
	size_t out_records = 0; /* all the workload's output records */
	size_t written = 0;     /* what the merge writes: no tombstones */
	uint64_t out_size = 0;
};

/* The timed merge; returns the records written. */
size_t merge(const run &r, uint64_t *size)
{
	std::unique_ptr<rocksdb::SstFileReader> readers[MAX_WAYS];
	std::unique_ptr<rocksdb::Iterator> iters[MAX_WAYS];
	rocksdb::Iterator *its[MAX_WAYS];
	for (size_t i = 0; i < r.n; i++) {
		readers[i].reset(new rocksdb::SstFileReader(r.opt));
		rcheck(readers[i]->Open(r.inputs[i]), "SstFileReader::Open");
		iters[i].reset(readers[i]->NewIterator(rocksdb::ReadOptions()));
		its[i] = iters[i].get();
	}
	rocksdb::SstFileWriter w(rocksdb::EnvOptions(), r.opt);
	rcheck(w.Open(r.out), "SstFileWriter::Open");
	for (size_t i = 0; i < r.n; i++)
		its[i]->SeekToFirst();
	auto put = [&w](const rocksdb::Slice &k, const rocksdb::Slice &v) {
		rcheck(w.Put(k, v), "Put");
	};
	size_t n = r.n == 2 ? bench_merge2(its[0], its[1], put)
	                    : bench_mergen(its, r.n, put);
	for (size_t i = 0; i < r.n; i++)
		rcheck(its[i]->status(), "input iterator");
	rocksdb::ExternalSstFileInfo info;
	rcheck(w.Finish(&info), "SstFileWriter::Finish");
	*size = info.file_size;
	return n;
}

double observe(void *ctx)
{
	const run &r = *static_cast<const run *>(ctx);
	uint64_t size = 0;
	uint64_t t0 = bench_now_ns();
	size_t n = merge(r, &size);
	uint64_t t1 = bench_now_ns();
	if (n != r.written || size != r.out_size)
		bench_fail("the merge wrote %zu records in %llu bytes, not %zu "
		           "in %llu",
		           n, (unsigned long long)size, r.written,
		           (unsigned long long)r.out_size);
	if (std::remove(r.out.c_str()) != 0)
		bench_fail("cannot remove %s", r.out.c_str());
	bench_sink(n);
	return bench_merge_value(r.w, t0, t1, r.out_records);
}

int bench_main(int argc, char **argv)
{
	bench_opts o;
	bench_merge_workload w;
	bench_merge_parse(&o, &w, argc, argv, variant_names);

	bench_seg_data merged, older, newer;
	bench_merge_make(&w, &merged, &older, &newer);
	std::string tmp = bench_tmpdir();
	run r;
	r.w = &w;
	r.env = bench_rocksdb::nosync_env();
	r.opt.env = r.env.get();
	r.opt.compression = rocksdb::kNoCompression;
	r.out = tmp + "/merged.sst";
	/* rocksdb-4way: the merged records split among MAX_WAYS inputs */
	unsigned ways =
	    std::strcmp(o.variant, "rocksdb-4way") == 0 ? MAX_WAYS : 0;
	r.n = bench_merge_inputs(
	    w, ways, merged, older, newer,
	    [&r, &tmp](size_t i, const bench_seg_data &d) {
		    r.inputs[i] = tmp + "/input-" + std::to_string(i) + ".sst";
		    write_sst(r.opt, r.inputs[i], d);
		    verify_sst(r.opt, r.inputs[i], d, "input");
	    });

	r.out_records = merged.n;
	r.written = merge(r, &r.out_size);
	if (r.written != merged.n - merged.tombstones)
		bench_fail("the merge wrote %zu records, not %zu", r.written,
		           merged.n - merged.tombstones);
	verify_sst(r.opt, r.out, merged, "merged SST");
	if (std::remove(r.out.c_str()) != 0)
		bench_fail("cannot remove %s", r.out.c_str());

	bench_observe(&o, "time", bench_merge_unit(&w), observe, &r);
	bench_row(&o, 0, 0, "size", static_cast<double>(r.out_size), "bytes");
	bench_seg_free(&merged);
	bench_seg_free(&older);
	bench_seg_free(&newer);
	return 0;
}

} // namespace

int main(int argc, char **argv)
{
	return bench_cxx_main("rocksdb", bench_main, argc, argv);
}
