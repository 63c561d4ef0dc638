/*
 * bench_kvseg.h — what the benchmark programs that write segments with
 * libkvseg (bench_segment, bench_sizes, bench_codesel) share: failing on a
 * libkvseg status, the writer options of a mode, writing a fixture's
 * records, and the checks of a written segment against the fixture. C only:
 * the peer programs do not link libkvseg.
 */
#ifndef SEGFS_BENCH_KVSEG_H
#define SEGFS_BENCH_KVSEG_H

#include <stdint.h>
#include <string.h>

#include "kvseg/segment.h"

#include "bench_gen.h"
#include "harness.h"

/* Fails the benchmark with what and the status (and err's message, if
 * any) unless st is KVS_OK. */
static inline void bench_kvs_check(kvs_status st, const kvs_error *err,
                                   const char *what)
{
	if (st == KVS_OK)
		return;
	if (err != NULL && err->message[0] != '\0')
		bench_fail("%s: %s (%s)", what, err->message, kvs_strerror(st));
	bench_fail("%s: %s", what, kvs_strerror(st));
}

/* The writer options of a mode named typed-byte, raw-byte, typed-bit or
 * raw-bit, with KVS_WRITER_NO_SYNC. */
static inline kvs_writer_options bench_kvs_mode_options(const char *mode)
{
	kvs_writer_options opt;
	memset(&opt, 0, sizeof opt);
	opt.profile = strstr(mode, "-bit") ? KVS_PROFILE_BIT : KVS_PROFILE_BYTE;
	opt.framing =
	    strncmp(mode, "raw-", 4) == 0 ? KVS_FRAMING_RAW : KVS_FRAMING_TYPED;
	opt.flags = KVS_WRITER_NO_SYNC;
	return opt;
}

/* Writes every record of d to a segment at path; returns the status of the
 * first failure. Raw framing has no tombstones: there a tombstone record is
 * written as a value record with an empty value. */
static inline kvs_status bench_kvs_write(const char *path,
                                         const bench_seg_data *d,
                                         const kvs_writer_options *opt,
                                         kvs_error *err)
{
	int typed = opt->framing == KVS_FRAMING_TYPED;
	kvs_writer *w = NULL;
	kvs_status st = kvs_writer_open(&w, path, opt, err);
	for (size_t i = 0; st == KVS_OK && i < d->n; i++) {
		size_t len;
		const uint8_t *v = bench_seg_value(d, i, &len);
		kvs_kind kind = typed && d->tombstone[i] ? KVS_KIND_TOMBSTONE
		                                         : KVS_KIND_VALUE;
		st = kvs_writer_add_bytes(w, bench_seg_key(d, i), d->key_len,
		                          kind, v, len, err);
	}
	if (st == KVS_OK)
		st = kvs_writer_finish(w, err);
	kvs_writer_free(w);
	return st;
}

/* Opens the segment at path, verifies it (kvs_segment_verify) and gets its
 * info; fails the benchmark if it cannot. */
static inline void bench_kvs_verified_info(const char *path,
                                           kvs_segment_info *info)
{
	kvs_error err;
	memset(&err, 0, sizeof err);
	kvs_segment *seg = NULL;
	bench_kvs_check(kvs_segment_open(&seg, path, &err), &err,
	                "kvs_segment_open");
	bench_kvs_check(kvs_segment_verify(seg, &err), &err,
	                "kvs_segment_verify");
	kvs_segment_info_get(seg, info);
	kvs_segment_unref(seg);
}

/* Fails the benchmark (naming what) unless info holds d's totals (its
 * tombstones only when typed) and its space components sum to the file's
 * size. */
static inline void bench_kvs_check_info(const kvs_segment_info *info,
                                        const bench_seg_data *d, int typed,
                                        const char *what)
{
	uint64_t tombstones = typed ? d->tombstones : 0;
	uint64_t key_bits = 8 * (uint64_t)d->key_len * d->n;
	if (info->records != d->n || info->tombstones != tombstones ||
	    info->key_bits != key_bits || info->value_bytes != d->value_bytes)
		bench_fail("%s: %llu records, %llu tombstones, %llu key bits, "
		           "%llu value bytes; expected %zu, %llu, %llu, %llu",
		           what, (unsigned long long)info->records,
		           (unsigned long long)info->tombstones,
		           (unsigned long long)info->key_bits,
		           (unsigned long long)info->value_bytes, d->n,
		           (unsigned long long)tombstones,
		           (unsigned long long)key_bits,
		           (unsigned long long)d->value_bytes);
	if (info->stream_bytes + info->ef_bytes + info->fence_bytes +
	        info->other_bytes !=
	    info->file_bytes)
		bench_fail("%s: the space components do not sum to the file "
		           "size",
		           what);
}

#endif
