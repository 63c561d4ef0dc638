/*
 * bench_merge_leveldb — the LevelDB peer of bench_merge: the same two
 * inputs and merged records (bench_gen.h), as variant 'leveldb'; and as
 * 'leveldb-4way' the same four inputs as bench_merge's -4way variants
 * (record i of the merged records in input i % 4), merged the same way
 * with bench_mergen.
 *
 * Each input is one LevelDB table file written beforehand with
 * leveldb::TableBuilder: Options with kNoCompression and otherwise the
 * defaults (4 KiB blocks, restart interval 16, bytewise comparator, no
 * filter). TableBuilder has no deletions (a tombstone is a DB-level
 * concept), so a tombstone record is stored as a value record with an
 * empty value, as in the raw modes. The timer covers one merge:
 * Env::NewRandomAccessFile (mmap) and leveldb::Table::Open for both inputs,
 * an iterator over each (default ReadOptions: no checksum verification; no
 * block cache), their two-way merge written here (on equal keys the newer
 * input's record wins and the older one's is skipped), a TableBuilder into
 * a new file (Env::NewWritableFile), Finish and Close (no Sync, as
 * KVS_WRITER_NO_SYNC), and deleting the iterators, tables and files. Table
 * opening reads each input's footer and index block, which the kvseg
 * variants do before their timer (kvs_segment_open).
 *
 * Before timing: the inputs are written, opened and compared record by
 * record with the generator (which also brings their pages into the page
 * cache), and one merge's output is compared record by record with the
 * expected merged records. Excluded from the timer: all of that, and after
 * each observation the check of the output's record count and file size
 * and its removal.
 */
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <string>

#include <leveldb/env.h>
#include <leveldb/iterator.h>
#include <leveldb/options.h>
#include <leveldb/table.h>
#include <leveldb/table_builder.h>

#include "bench_gen.h"
#include "bench_peer.h"
#include "harness.h"

namespace
{

const char *const variant_names[] = {"leveldb", "leveldb-4way", nullptr};

constexpr size_t MAX_WAYS = 4; /* inputs of leveldb-4way */

void lcheck(const leveldb::Status &s, const char *what)
{
	if (!s.ok())
		bench_fail("%s: %s", what, s.ToString().c_str());
}

leveldb::Options table_options()
{
	leveldb::Options o;
	o.compression = leveldb::kNoCompression;
	return o;
}

leveldb::Slice slice(const uint8_t *p, size_t len)
{
	return leveldb::Slice(reinterpret_cast<const char *>(p), len);
}

/* Writes d's records (tombstones as empty values) to a table at path;
 * returns its size. */
uint64_t write_table(const leveldb::Options &opt, const std::string &path,
                     const bench_seg_data &d)
{
	leveldb::WritableFile *file = nullptr;
	lcheck(opt.env->NewWritableFile(path, &file), "NewWritableFile");
	leveldb::TableBuilder tb(opt, file);
	for (size_t i = 0; i < d.n; i++) {
		size_t len;
		const uint8_t *v = bench_seg_value(&d, i, &len);
		tb.Add(slice(bench_seg_key(&d, i), d.key_len), slice(v, len));
	}
	lcheck(tb.Finish(), "TableBuilder::Finish");
	lcheck(file->Close(), "WritableFile::Close");
	delete file;
	return tb.FileSize();
}

struct table {
	leveldb::RandomAccessFile *file = nullptr;
	leveldb::Table *t = nullptr;
	leveldb::Iterator *it = nullptr;

	void open(const leveldb::Options &opt, const std::string &path)
	{
		uint64_t size = 0;
		lcheck(opt.env->GetFileSize(path, &size), "GetFileSize");
		lcheck(opt.env->NewRandomAccessFile(path, &file),
		       "NewRandomAccessFile");
		lcheck(leveldb::Table::Open(opt, file, size, &t),
		       "Table::Open");
		it = t->NewIterator(leveldb::ReadOptions());
		it->SeekToFirst();
	}
	~table()
	{
		delete it;
		delete t;
		delete file;
	}
};

/* Compares the table at path with d's records (tombstones as empty
 * values). */
void verify_table(const leveldb::Options &opt, const std::string &path,
                  const bench_seg_data &d, const char *what)
{
	table t;
	t.open(opt, path);
	for (size_t i = 0; i < d.n; i++, t.it->Next()) {
		if (!t.it->Valid())
			bench_fail("%s: ends before record %zu", what, i);
		if (!bench_record_is(t.it->key(), t.it->value(), d, i))
			bench_fail("%s: record %zu is wrong", what, i);
	}
	if (t.it->Valid())
		bench_fail("%s: does not end after %zu records", what, d.n);
	lcheck(t.it->status(), what);
}

struct run {
	const bench_merge_workload *w = nullptr;
	leveldb::Options opt;
	size_t n = 2; /* inputs, oldest first */
	std::string inputs[MAX_WAYS], out;
	size_t out_records = 0;
	uint64_t out_size = 0;
};

/* The timed merge; returns the records written. */
size_t merge(const run &r, uint64_t *size)
{
	table t[MAX_WAYS];
	leveldb::Iterator *its[MAX_WAYS];
	for (size_t i = 0; i < r.n; i++) {
		t[i].open(r.opt, r.inputs[i]);
		its[i] = t[i].it;
	}
	leveldb::WritableFile *file = nullptr;
	lcheck(r.opt.env->NewWritableFile(r.out, &file), "NewWritableFile");
	leveldb::TableBuilder tb(r.opt, file);
	auto put = [&tb](const leveldb::Slice &k, const leveldb::Slice &v) {
		tb.Add(k, v);
	};
	size_t n = r.n == 2 ? bench_merge2(its[0], its[1], put)
	                    : bench_mergen(its, r.n, put);
	for (size_t i = 0; i < r.n; i++)
		lcheck(its[i]->status(), "input iterator");
	lcheck(tb.Finish(), "TableBuilder::Finish");
	lcheck(file->Close(), "WritableFile::Close");
	delete file;
	*size = tb.FileSize();
	return n;
}

double observe(void *ctx)
{
	const run &r = *static_cast<const run *>(ctx);
	uint64_t size = 0;
	uint64_t t0 = bench_now_ns();
	size_t n = merge(r, &size);
	uint64_t t1 = bench_now_ns();
	if (n != r.out_records || size != r.out_size)
		bench_fail("the merge wrote %zu records in %llu bytes, not %zu "
		           "in %llu",
		           n, (unsigned long long)size, r.out_records,
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
	r.opt = table_options();
	r.out = tmp + "/merged.ldb";
	/* leveldb-4way: the merged records split among MAX_WAYS inputs */
	unsigned ways =
	    std::strcmp(o.variant, "leveldb-4way") == 0 ? MAX_WAYS : 0;
	r.n = bench_merge_inputs(
	    w, ways, merged, older, newer,
	    [&r, &tmp](size_t i, const bench_seg_data &d) {
		    r.inputs[i] = tmp + "/input-" + std::to_string(i) + ".ldb";
		    write_table(r.opt, r.inputs[i], d);
		    verify_table(r.opt, r.inputs[i], d, "input");
	    });

	r.out_records = merge(r, &r.out_size);
	if (r.out_records != merged.n)
		bench_fail("the merge wrote %zu records, not %zu",
		           r.out_records, merged.n);
	verify_table(r.opt, r.out, merged, "merged table");
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
	return bench_cxx_main("leveldb", bench_main, argc, argv);
}
