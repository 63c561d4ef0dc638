/*
 * merge_internal.h — what the files of the merge share (kvseg/merge.h is
 * the API): the merge's state, the attributes that specialize its loops,
 * the loops themselves as entries of merge.c's dispatch table, and the
 * hooks the tests use to force the general loop and see which one ran.
 *
 *   merge.c           the API: validation, setup, the dispatch table
 *   merge_general.c   the general loops, through the cursors and the writer
 *   merge_tree.h      the loser tree every N-input loop replays
 *   merge_bytes.h     the byte engine: inputs (bin) and output (bout) in line
 *   merge_bytes_two.c, merge_bytes_tree.c   its two-input and N-input loops
 *   merge_bits_in.h, merge_bits_out.h       the bit engine (tin, tout)
 *   merge_bits_two.c, merge_bits_tree.c     its two-input and N-input loops
 */
#ifndef KVSEG_MERGE_INTERNAL_H
#define KVSEG_MERGE_INTERNAL_H

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvseg/cpu.h"
#include "kvseg/merge.h"
#include "cursor_internal.h"
#include "writer_internal.h"

/*
 * GCC's SLP vectorizer pairs adjacent 8-byte fields of the loop's state
 * into 16-byte loads, which the CPU cannot forward from the two 8-byte
 * stores that wrote them, and waits (perf showed the bit loop waiting
 * on two such loads). Its loop vectorizer only adds checks to the copies
 * of a few words.
 */
#if defined(__GNUC__) && !defined(__clang__)
#define NO_SLP                                                               \
	__attribute__((optimize("no-tree-slp-vectorize",                     \
	                        "no-tree-loop-vectorize")))
#else
#define NO_SLP
#endif

/*
 * The merge loops are specialized for each mode by inlining the readers and
 * the writer into them (SPECIALIZED functions, FLATTEN loops): several of
 * them are 60-100 KB of code, and merge.c takes half a minute to compile at
 * -O3 and two and a half minutes under AddressSanitizer. Builds with a
 * sanitizer test the code, not its speed: there both attributes are left
 * out, which keeps the same source and the same checks and compiles merge.c
 * in seconds. GCC says that AddressSanitizer or ThreadSanitizer is on
 * with __SANITIZE_*__, clang with __has_feature.
 */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define KVS_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define KVS_SANITIZED 1
#endif
#endif
#ifdef KVS_SANITIZED
#define SPECIALIZED inline
#define FLATTEN
#else
#define SPECIALIZED inline __attribute__((always_inline))
#define FLATTEN     __attribute__((flatten))
#endif

#define PROGRESS_EVERY 65536 /* input records between progress calls */

typedef struct merge {
	kvs_cursor **cur;
	size_t n;
	size_t *tree; /* tree[0]: winner; tree[1 .. n): losers */
	const kvs_merge_options *opt;
	kvs_writer *w;
	kvs_merge_stats st;
	uint64_t total, next_progress;
	uint64_t hint; /* the output's size hint kvs_merge gave, else 0 */
	uint8_t *last; /* the key of the last round */
	uint64_t last_bits;
	uint64_t *lcp; /* the tree's: per input, see match */
	kvs_error *err;
} merge;

/* A cursor is on a record (kvs_cursor_valid, without the call). */
static inline bool on_record(const kvs_cursor *c)
{
	return c->ordinal < c->seg->records;
}

#define EMPTY SIZE_MAX

/* The in-line loops flush their output once this much is pending. */
#define FAST_CHUNK ((size_t)256 << 10) /* flush once this much is pending */

/* merge.c: messages, progress and the in-line loops' setup. */
kvs_status input_failed(merge *m, size_t i, kvs_status st);
void project_hint(merge *m, uint64_t consumed);
__attribute__((noinline)) kvs_status report_progress(merge *m,
                                                     uint64_t consumed);
size_t first_top(const merge *m);
bool first_kept(const merge *m);
kvs_status loop_setup(merge *m, uint8_t **old, uint8_t **first);

/* merge_general.c: the first record of an in-line loop, through the
 * writer's general path (which keeps the key). */
kvs_status emit_first_byte(merge *m, size_t i);
kvs_status emit_first_bit(merge *m, size_t i);

/* The loops (the entries of merge.c's dispatch table). */
kvs_status merge_two_byte(merge *m);
kvs_status merge_two_bit(merge *m);
kvs_status merge_two_any(merge *m);
kvs_status merge_tree_byte(merge *m);
kvs_status merge_tree_bit(merge *m);
kvs_status merge_tree_any(merge *m);
kvs_status merge_two_bytes_fast(merge *m);
kvs_status merge_tree_bytes_fast(merge *m);
kvs_status merge_two_bits_fast(merge *m);
kvs_status merge_two_bits_drop(merge *m);
kvs_status merge_tree_bits_fast(merge *m);
kvs_status merge_tree_bits_drop(merge *m);

/* Which loop merged (see merge.c's select_loop). */
typedef enum merge_loop {
	MERGE_LOOP_TREE_ANY, /* the general loop: any modes, any n */
	MERGE_LOOP_TWO_ANY,
	MERGE_LOOP_TWO_BYTE, /* through the cursors, usual modes */
	MERGE_LOOP_TREE_BYTE,
	MERGE_LOOP_TWO_BIT,
	MERGE_LOOP_TREE_BIT,
	MERGE_LOOP_TWO_BYTES_INLINE, /* the byte engine */
	MERGE_LOOP_TREE_BYTES_INLINE,
	MERGE_LOOP_TWO_BITS_INLINE, /* the bit engine */
	MERGE_LOOP_TWO_BITS_DROP,
	MERGE_LOOP_TREE_BITS_INLINE,
	MERGE_LOOP_TREE_BITS_DROP,
	MERGE_LOOPS /* none ran (the merge failed before its loop) */
} merge_loop;

/* The loop's name, for messages: "tree-any", "two-bits-drop", ... */
const char *merge_loop_name(merge_loop loop);

/* The tests' hooks into a merge. */
typedef struct merge_hooks {
	bool force_general; /* in: merge with MERGE_LOOP_TREE_ANY */
	merge_loop loop;    /* out: the loop that ran */
} merge_hooks;

/* kvs_merge, with hooks (may be NULL). */
kvs_status seg_merge_hooked(kvs_segment *const *inputs, size_t n,
                            const char *out_path,
                            const kvs_merge_options *opt,
                            kvs_merge_stats *stats, kvs_error *err,
                            merge_hooks *hooks);

#endif
