/*
 * bench_segment_rocksdb — the RocksDB peer of bench_segment: the same
 * records and probe keys (bench_gen.h) in one SST file, as variant
 * 'rocksdb'.
 *
 * The records are written with rocksdb::SstFileWriter, Options with
 * kNoCompression and the default BlockBasedTableOptions (4 KiB blocks,
 * restart interval 16, binary-search index, no filter). A tombstone record
 * is a Delete(), so the file holds the same logical records. The file is
 * ingested (IngestExternalFile, move_files) into a new DB in the process's
 * temporary directory, which reads it through the default block-based table
 * reader with one change: a 1 GiB block cache instead of the default 8 MiB
 * one, so every block stays cached once read ("warm caches"). Workloads
 * (frames has no peer):
 *   cursor-F   one Iterator: SeekToFirst, then Next to the end, adding each
 *              key's last byte and bit length to a checksum
 *   records-F  the same, also adding each value's length and last byte
 *   build-F    SstFileWriter Open, Put/Delete for every record, Finish
 *   lookup-*   100,000 DB::Get (default ReadOptions, into a PinnableSlice)
 * Deletions are invisible to reads: an iterator skips them and Get answers
 * NotFound, so RocksDB scans see 16 of 17 records and finds 16 of 17 present
 * probes; the value is still ns per record of the fixture (tombstones
 * included) and ns per lookup. The files are written through a FileSystem
 * whose Sync, Fsync and RangeSync do nothing, to match KVS_WRITER_NO_SYNC
 * and MDB_NOSYNC.
 *
 * The iterator is made once per process, outside the timer. Excluded from
 * the timer: generating the records and probes, writing and ingesting the
 * file, comparing every record and every probe's answer with the
 * generator's records (which also warms the block cache), the
 * per-observation checksum comparison, and for build removing the file.
 *
 * With --sizes [--tombstones] it prints the SST file size for each cell of
 * seed 000's size grid instead (bench_sizes runs it).
 */
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>

#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/options.h>
#include <rocksdb/sst_file_writer.h>
#include <rocksdb/table.h>
#include <rocksdb/table_properties.h>

#include "bench_gen.h"
#include "bench_peer.h"
#include "bench_rocksdb.h"
#include "harness.h"

namespace
{

const char *const variant_names[] = {"rocksdb", nullptr};

using bench_rocksdb::rcheck;

struct peer {
	std::unique_ptr<rocksdb::Env> env;
	rocksdb::Options options; /* the writer's: no compression */
	std::unique_ptr<rocksdb::DB> db;

	peer()
	{
		env = bench_rocksdb::nosync_env();
		options.env = env.get();
		options.compression = rocksdb::kNoCompression;
	}
};

/* Writes every record of d to an SST file at path; returns its size. Used
 * untimed and timed (build). */
uint64_t write_sst(const peer &p, const std::string &path,
                   const bench_seg_data &d)
{
	rocksdb::SstFileWriter w(rocksdb::EnvOptions(), p.options);
	rcheck(w.Open(path), "SstFileWriter::Open");
	for (size_t i = 0; i < d.n; i++) {
		rocksdb::Slice key(
		    reinterpret_cast<const char *>(bench_seg_key(&d, i)),
		    d.key_len);
		rocksdb::Status s;
		if (d.tombstone[i]) {
			s = w.Delete(key);
		} else {
			size_t len;
			const uint8_t *v = bench_seg_value(&d, i, &len);
			s = w.Put(key,
			          rocksdb::Slice(
			              reinterpret_cast<const char *>(v), len));
		}
		if (!s.ok())
			bench_fail("SstFileWriter: record %zu: %s", i,
			           s.ToString().c_str());
	}
	rocksdb::ExternalSstFileInfo info;
	rcheck(w.Finish(&info), "SstFileWriter::Finish");
	return info.file_size;
}

void open_db(peer &p, const std::string &dir, const std::string &sst)
{
	rocksdb::Options options = p.options;
	options.create_if_missing = true;
	rocksdb::BlockBasedTableOptions table;
	table.block_cache = rocksdb::NewLRUCache(size_t(1) << 30);
	options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
	rocksdb::DB *db = nullptr;
	rcheck(rocksdb::DB::Open(options, dir, &db), "DB::Open");
	p.db.reset(db);
	rocksdb::IngestExternalFileOptions ingest;
	ingest.move_files = true;
	rcheck(p.db->IngestExternalFile({sst}, ingest), "IngestExternalFile");

	rocksdb::TablePropertiesCollection props;
	rcheck(p.db->GetPropertiesOfAllTables(&props),
	       "GetPropertiesOfAllTables");
	if (props.size() != 1)
		bench_fail("the DB has %zu tables, not 1", props.size());
	for (const auto &t : props)
		if (t.second->compression_name != "NoCompression")
			bench_fail("the SST is compressed with %s",
			           t.second->compression_name.c_str());
}

const uint8_t *bytes(const rocksdb::Slice &s)
{
	return reinterpret_cast<const uint8_t *>(s.data());
}

/* ---- checks against the generator's records, before any timing ---------- */

void verify(rocksdb::DB *db, const bench_seg_data &d, const uint8_t *probes,
            size_t q)
{
	std::unique_ptr<rocksdb::Iterator> it(
	    db->NewIterator(rocksdb::ReadOptions()));
	it->SeekToFirst();
	for (size_t i = 0; i < d.n; i++) {
		if (d.tombstone[i])
			continue;
		size_t len;
		const uint8_t *want = bench_seg_value(&d, i, &len);
		if (!it->Valid())
			bench_fail("the iterator stopped before record %zu", i);
		if (it->key().size() != d.key_len ||
		    std::memcmp(it->key().data(), bench_seg_key(&d, i),
		                d.key_len) != 0 ||
		    it->value().size() != len ||
		    (len && std::memcmp(it->value().data(), want, len) != 0))
			bench_fail("record %zu is wrong", i);
		it->Next();
	}
	if (it->Valid())
		bench_fail("the iterator did not end after the last record");
	rcheck(it->status(), "iterator");

	rocksdb::PinnableSlice v;
	for (size_t j = 0; j < q; j++) {
		const uint8_t *p = probes + j * d.key_len;
		size_t i = bench_seg_find(&d, p);
		bool visible = i != d.n && !d.tombstone[i];
		v.Reset();
		rocksdb::Status s =
		    db->Get(rocksdb::ReadOptions(), db->DefaultColumnFamily(),
		            rocksdb::Slice(reinterpret_cast<const char *>(p),
		                           d.key_len),
		            &v);
		if (visible ? !s.ok() : !s.IsNotFound())
			bench_fail("probe %zu: %s", j, s.ToString().c_str());
		if (visible) {
			size_t len;
			const uint8_t *want = bench_seg_value(&d, i, &len);
			if (v.size() != len ||
			    (len && std::memcmp(v.data(), want, len) != 0))
				bench_fail("probe %zu: wrong value", j);
		}
	}
}

/* ---- observations ------------------------------------------------------- */

struct run {
	const bench_seg_data *d = nullptr;
	peer *p = nullptr;
	rocksdb::Iterator *it = nullptr;
	std::string build_path;
	uint64_t build_size = 0;
	const uint8_t *probes = nullptr;
	size_t q = 0;
	uint64_t expected = 0;
	uint64_t count = 0;
};

double scan(const run &r, bool values)
{
	rocksdb::Iterator *it = r.it;
	uint64_t sum = 0, count = 0;
	uint64_t t0 = bench_now_ns();
	for (it->SeekToFirst(); it->Valid(); it->Next()) {
		rocksdb::Slice k = it->key();
		sum += bench_seg_key_term(bytes(k), 8 * (uint64_t)k.size());
		if (values) {
			rocksdb::Slice v = it->value();
			sum += bench_seg_value_term(bytes(v), v.size());
		}
		count++;
	}
	uint64_t t1 = bench_now_ns();
	rcheck(it->status(), "iterator");
	bench_seg_expect(sum, count, r.expected, r.count);
	return static_cast<double>(t1 - t0) / static_cast<double>(r.d->n);
}

double observe_cursor(void *ctx)
{
	return scan(*static_cast<const run *>(ctx), false);
}

double observe_records(void *ctx)
{
	return scan(*static_cast<const run *>(ctx), true);
}

double observe_lookup(void *ctx)
{
	const run &r = *static_cast<const run *>(ctx);
	rocksdb::DB *db = r.p->db.get();
	rocksdb::ColumnFamilyHandle *cf = db->DefaultColumnFamily();
	const rocksdb::ReadOptions ro;
	const size_t klen = r.d->key_len;
	rocksdb::PinnableSlice v;
	uint64_t sum = 0, found = 0;
	rocksdb::Status bad;
	uint64_t t0 = bench_now_ns();
	for (size_t j = 0; j < r.q; j++) {
		v.Reset();
		rocksdb::Status s =
		    db->Get(ro, cf,
		            rocksdb::Slice(reinterpret_cast<const char *>(
		                               r.probes + j * klen),
		                           klen),
		            &v);
		if (s.ok()) {
			sum += bench_seg_value_term(bytes(v), v.size());
			found++;
		} else if (!s.IsNotFound()) {
			bad = s;
			break;
		}
	}
	uint64_t t1 = bench_now_ns();
	rcheck(bad, "DB::Get");
	bench_seg_expect(sum, found, r.expected, r.count);
	return static_cast<double>(t1 - t0) / static_cast<double>(r.q);
}

double observe_build(void *ctx)
{
	const run &r = *static_cast<const run *>(ctx);
	uint64_t t0 = bench_now_ns();
	uint64_t size = write_sst(*r.p, r.build_path, *r.d);
	uint64_t t1 = bench_now_ns();
	if (size != r.build_size)
		bench_fail("the new SST is %llu bytes, not %llu",
		           (unsigned long long)size,
		           (unsigned long long)r.build_size);
	if (std::remove(r.build_path.c_str()) != 0)
		bench_fail("cannot remove %s", r.build_path.c_str());
	return static_cast<double>(t1 - t0) / static_cast<double>(r.d->n);
}

/* --sizes: SST bytes for each cell of seed 000's grid, as CSV. */
int sizes(bool tombstones)
{
	peer p;
	std::string path = std::string(bench_tmpdir()) + "/sizes.sst";
	std::printf("cell,records,tombstones,bytes\n");
	for (size_t cell = 0; cell < BENCH_SIZES_CELLS; cell++) {
		bench_seg_spec spec;
		char name[64];
		bench_seg_data d;
		bench_sizes_spec(cell, tombstones, &spec, name);
		bench_seg_make(&d, &spec);
		uint64_t size = write_sst(p, path, d);
		std::printf("%s,%zu,%zu,%llu\n", name, d.n, d.tombstones,
		            (unsigned long long)size);
		std::remove(path.c_str());
		bench_seg_free(&d);
	}
	return std::fflush(stdout) == 0 ? 0 : 1;
}

int bench_main(int argc, char **argv)
{
	if (argc >= 2 && std::strcmp(argv[1], "--sizes") == 0)
		return sizes(argc >= 3 &&
		             std::strcmp(argv[2], "--tombstones") == 0);

	bench_opts o;
	bench_seg_workload w;
	bench_seg_parse(&o, &w, argc, argv, 0, variant_names);

	bench_seg_data d;
	bench_seg_make(&d, w.spec);
	std::string tmp = bench_tmpdir();
	peer p;
	std::string sst = tmp + "/fixture.sst";
	uint64_t fixture_size = write_sst(p, sst, d);
	open_db(p, tmp + "/db", sst);

	run r;
	r.d = &d;
	r.p = &p;
	if (std::strcmp(w.op, "lookup") == 0) {
		r.q = BENCH_SEG_PROBES;
		r.probes = bench_seg_probes(&d, w.spec, w.present, r.q);
	}
	verify(p.db.get(), d, r.probes, r.q);
	std::unique_ptr<rocksdb::Iterator> it(
	    p.db->NewIterator(rocksdb::ReadOptions()));
	r.it = it.get();

	double (*fn)(void *) = nullptr;
	if (std::strcmp(w.op, "cursor") == 0 ||
	    std::strcmp(w.op, "records") == 0) {
		bool values = std::strcmp(w.op, "records") == 0;
		fn = values ? observe_records : observe_cursor;
		r.expected = bench_seg_scan_expected(&d, values, 1, &r.count);
	} else if (std::strcmp(w.op, "build") == 0) {
		fn = observe_build;
		r.build_path = tmp + "/build.sst";
		r.build_size = fixture_size;
	} else if (std::strcmp(w.op, "lookup") == 0) {
		r.expected =
		    bench_seg_lookup_expected(&d, r.probes, r.q, 1, &r.count);
		fn = observe_lookup;
	} else {
		bench_fail("RocksDB has no workload %s", o.workload);
	}
	bench_observe(&o, "time",
	              std::strcmp(w.op, "lookup") == 0 ? "ns/lookup"
	                                               : "ns/record",
	              fn, &r);

	it.reset();
	rcheck(p.db->Close(), "DB::Close");
	p.db.reset();
	std::free(const_cast<uint8_t *>(r.probes));
	bench_seg_free(&d);
	return 0;
}

} // namespace

int main(int argc, char **argv)
{
	return bench_cxx_main("rocksdb", bench_main, argc, argv);
}
