/*
 * bench_rocksdb.h — what the RocksDB peers (bench_segment_rocksdb,
 * bench_merge_rocksdb) share: failing on a RocksDB status, and an Env whose
 * files' Sync, Fsync and RangeSync do nothing, to match libkvseg's
 * KVS_WRITER_NO_SYNC (an SstFileWriter fsyncs in Finish).
 */
#ifndef SEGFS_BENCH_ROCKSDB_H
#define SEGFS_BENCH_ROCKSDB_H

#include <memory>
#include <string>

#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/status.h>

#include "harness.h"

namespace bench_rocksdb
{

inline void rcheck(const rocksdb::Status &s, const char *what)
{
	if (!s.ok())
		bench_fail("%s: %s", what, s.ToString().c_str());
}

/* A writable file whose syncs do nothing. */
class NoSyncFile : public rocksdb::FSWritableFileOwnerWrapper
{
      public:
	explicit NoSyncFile(std::unique_ptr<rocksdb::FSWritableFile> &&t)
	    : FSWritableFileOwnerWrapper(std::move(t))
	{
	}
	rocksdb::IOStatus Sync(const rocksdb::IOOptions &,
	                       rocksdb::IODebugContext *) override
	{
		return rocksdb::IOStatus::OK();
	}
	rocksdb::IOStatus Fsync(const rocksdb::IOOptions &,
	                        rocksdb::IODebugContext *) override
	{
		return rocksdb::IOStatus::OK();
	}
	rocksdb::IOStatus RangeSync(uint64_t, uint64_t,
	                            const rocksdb::IOOptions &,
	                            rocksdb::IODebugContext *) override
	{
		return rocksdb::IOStatus::OK();
	}
};

class NoSyncFileSystem : public rocksdb::FileSystemWrapper
{
      public:
	explicit NoSyncFileSystem(
	    const std::shared_ptr<rocksdb::FileSystem> &target)
	    : FileSystemWrapper(target)
	{
	}
	const char *Name() const override
	{
		return "NoSyncFileSystem";
	}
	rocksdb::IOStatus
	NewWritableFile(const std::string &name,
	                const rocksdb::FileOptions &options,
	                std::unique_ptr<rocksdb::FSWritableFile> *result,
	                rocksdb::IODebugContext *dbg) override
	{
		std::unique_ptr<rocksdb::FSWritableFile> file;
		rocksdb::IOStatus s =
		    target()->NewWritableFile(name, options, &file, dbg);
		if (s.ok())
			result->reset(new NoSyncFile(std::move(file)));
		return s;
	}
};

/* The default Env with syncs that do nothing. */
inline std::unique_ptr<rocksdb::Env> nosync_env()
{
	return rocksdb::NewCompositeEnv(
	    std::make_shared<NoSyncFileSystem>(rocksdb::FileSystem::Default()));
}

} // namespace bench_rocksdb

#endif
