/*
 * kvseg/merge.h — the native merge: N segments in, one segment out, in one
 * pass (docs/FORMAT.md is unchanged by it: the output is exactly what the
 * writer makes of the merged records).
 *
 * Inputs are given oldest first. For a key held by several inputs the
 * newest input's binding wins and the older bindings are consumed
 * (replacement). Tombstones are kept unless the caller asks for a strong
 * delete, which is allowed only when the inputs include the oldest live
 * segment (older segments outside the merge could otherwise still hold the
 * deleted keys); then tombstones, and the older values they hide, vanish.
 *
 * Every input's body CRC32C is checked before any record is read: a
 * damaged input fails the merge (KVS_E_CORRUPT, naming it), since the
 * output's own CRC would otherwise certify whatever was read. Messages
 * name an input by its position and path (kvs_segment_path).
 *
 * The output is written like kvs_writer's: a temporary file in the target
 * directory, CRCs, clipping, fsync, rename. Any failure — no space, an I/O
 * error, a corrupt input, a cancel — removes the temporary file; inputs are
 * never modified.
 */
#ifndef KVSEG_MERGE_H
#define KVSEG_MERGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvseg/segment.h"
#include "kvseg/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Called now and then with the input records consumed so far and the
 * total; a non-zero return cancels the merge (KVS_E_CANCELED).
 */
typedef int (*kvs_merge_progress)(void *ctx, uint64_t done, uint64_t total);

typedef struct kvs_merge_options {
	kvs_writer_options output; /* mode, K, sequence, flags of the output */
	bool drop_tombstones;      /* strong delete; needs includes_oldest */
	bool includes_oldest;      /* inputs include the oldest live segment */
	kvs_merge_progress progress; /* may be NULL */
	void *progress_ctx;
} kvs_merge_options;

typedef struct kvs_merge_stats {
	uint64_t input_records;  /* consumed from all inputs */
	uint64_t output_records; /* written */
	uint64_t replaced;       /* older bindings hidden by newer ones */
	uint64_t dropped;        /* tombstones removed by a strong delete */
} kvs_merge_stats;

/*
 * Merges inputs[0 .. n) (oldest first, n >= 1) into a new segment at
 * out_path. Checked before any work: a raw-framed output when tombstones
 * would remain, a strong delete without includes_oldest, and an invalid
 * output mode are errors (KVS_E_INVAL) naming the problem. stats may be
 * NULL.
 */
KVS_API kvs_status kvs_merge(kvs_segment *const *inputs, size_t n,
                             const char *out_path, const kvs_merge_options *opt,
                             kvs_merge_stats *stats, kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif
