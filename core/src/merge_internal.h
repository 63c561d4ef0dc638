/*
 * merge_internal.h — what the files of the merge share (kvseg/merge.h is
 * the API): the merge's state, the attributes that specialize its loops,
 * the loops themselves as entries of merge.c's dispatch table, and the
 * hooks the tests use to force the general loop and see which one ran.
 *
 *   merge.c           the API: validation, setup, the dispatch table
 *   merge_general.c   the general loops, through the cursors and the writer
 *   merge_tree.h      the loser tree every N-input loop replays
 *   merge_tree_loop.h the engines' N-input loop, one template compiled twice
 *   merge_two_loop.h  their two-input loop, likewise
 *   merge_bytes.h     the byte engine: inputs (bin) and output (bout) in line
 *   merge_bytes_two.c, merge_bytes_tree.c   its two-input and N-input loops
 *   merge_bits_in.h, merge_bits_out.h       the bit engine (tin, tout)
 *   merge_bits_two.c, merge_bits_tree.c     its two-input and N-input loops
 *   merge_bits_gen.c  writes the bit engine's code tables at build time
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
 * them are 60-200 KB of code, and the merge's files take most of the
 * library's compile time, several times as much under AddressSanitizer.
 * Builds with a sanitizer test the code, not its speed: there both
 * attributes are left out, which keeps the same source and the same checks
 * and compiles the merge in seconds. GCC says that AddressSanitizer or ThreadSanitizer is on
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

/* merge.c: how messages name an input's failure. */
kvs_status kvsi_input_failed(merge *m, size_t i, kvs_status st);

/*
 * Progress and the in-line loops' setup, static in every file that uses
 * them: GCC then knows what they touch and which registers they clobber
 * where the loops call them, and keeps more of the loops' state in
 * registers (bench/README.md).
 */
/*
 * Before a flush of the fast loops, `consumed` input records done: when
 * kvs_merge gave the output's size hint (the inputs' total size), the
 * hint becomes the output's size projected from the share of the input
 * records so far that went out, 1/16 less where some did not. The
 * writer's reservation of space (reserve_ahead) then ends short of the
 * output's end for overlapping inputs too, which write much less than
 * the inputs' total: on ext4, releasing reserved blocks past the end
 * costs far more than writing a few blocks unreserved (bench/README.md,
 * "Measurements behind the merge's code"), hence a projection on the low
 * side.
 */
static inline void project_hint(merge *m, uint64_t consumed)
{
	uint64_t out = consumed - m->st.replaced - m->st.dropped;
	if (m->hint == 0 || consumed == 0 || out >= consumed)
		return;
	/* an estimate: a double's 53 bits are enough */
	double share = (double)out / (double)consumed;
	uint64_t p = (uint64_t)((double)m->hint * share);
	m->w->opt.size_hint = p - p / 16;
}

/* Calls the progress callback with `consumed` input records done, and
 * sets when it is next due; a cancel by the callback is an error. */
static __attribute__((noinline, unused)) kvs_status
report_progress(merge *m, uint64_t consumed)
{
	m->next_progress = consumed + PROGRESS_EVERY;
	if (m->opt->progress(m->opt->progress_ctx, consumed, m->total))
		return kvs_error_set(m->err, KVS_E_CANCELED,
		                     "merge canceled after %" PRIu64
		                     " of %" PRIu64 " input records",
		                     consumed, m->total);
	return KVS_OK;
}

/* The input whose first record the first round writes (all inputs on a
 * record): the smallest key, the newest input's on ties. */
static inline size_t first_top(const merge *m)
{
	size_t top = 0;
	for (size_t i = 1; i < m->n; i++) {
		const kvs_cursor *a = m->cur[i], *b = m->cur[top];
		int cmp;
		seg_key_lcp(a->key, a->key_bits, b->key, b->key_bits, &cmp);
		if (cmp <= 0)
			top = i;
	}
	return top;
}

/* With a strong delete, the in-line loops drop tombstones in line, but
 * their first round must write a record (the loop starts from the
 * writer's first key): is the first round's winner no tombstone? */
static inline bool first_kept(const merge *m)
{
	return m->cur[first_top(m)]->kind != KVS_KIND_TOMBSTONE;
}

/*
 * What the in-line loops need before they start: room for every restart
 * of the output, and for keys as long as the inputs' longest (16 bytes
 * more): *old, *first (zeroed: a key in words, zero after it) and the
 * writer's previous key. The caller frees *old and *first.
 */
static inline kvs_status loop_setup(merge *m, uint8_t **old, uint8_t **first)
{
	kvs_writer *w = m->w;
	uint64_t max_len = 0;
	for (size_t i = 0; i < m->n; i++) {
		uint64_t l = seg_key_bytes(m->cur[i]->seg->max_key_bits);
		if (l > max_len)
			max_len = l;
	}
	*old = malloc((size_t)max_len + 16);
	*first = calloc(1, (size_t)max_len + 16);
	uint8_t *pk = realloc(w->prev_key, (size_t)max_len + 8);
	if (pk) {
		w->prev_key = pk;
		w->prev_cap = (size_t)max_len + 8;
	}
	if (!kvsi_writer_grow_restarts(
	        w, (size_t)(m->total / w->opt.restart_interval + 2)))
		pk = NULL;
	if (!*old || !*first || !pk)
		return kvsi_writer_fail(w, m->err, KVS_E_NOMEM, "%s: %s",
		                        "out of memory");
	return KVS_OK;
}

/* merge_general.c: the first record of an in-line loop, through the
 * writer's general path (which keeps the key). */
kvs_status kvsi_emit_first_byte(merge *m, size_t i);
kvs_status kvsi_emit_first_bit(merge *m, size_t i);

/* The loops (the entries of merge.c's dispatch table). */
kvs_status kvsi_merge_two_byte(merge *m);
kvs_status kvsi_merge_two_bit(merge *m);
kvs_status kvsi_merge_two_any(merge *m);
kvs_status kvsi_merge_tree_byte(merge *m);
kvs_status kvsi_merge_tree_bit(merge *m);
kvs_status kvsi_merge_tree_any(merge *m);
kvs_status kvsi_merge_two_bytes_fast(merge *m);
kvs_status kvsi_merge_tree_bytes_fast(merge *m);
kvs_status kvsi_merge_two_bits_fast(merge *m);
kvs_status kvsi_merge_two_bits_drop(merge *m);
kvs_status kvsi_merge_tree_bits_fast(merge *m);
kvs_status kvsi_merge_tree_bits_drop(merge *m);

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
const char *kvsi_merge_loop_name(merge_loop loop);

/* The tests' hooks into a merge. */
typedef struct merge_hooks {
	bool force_general; /* in: merge with MERGE_LOOP_TREE_ANY */
	merge_loop loop;    /* out: the loop that ran */
} merge_hooks;

/* kvs_merge, with hooks (may be NULL). */
kvs_status kvsi_merge_hooked(kvs_segment *const *inputs, size_t n,
                             const char *out_path, const kvs_merge_options *opt,
                             kvs_merge_stats *stats, kvs_error *err,
                             merge_hooks *hooks);

#endif
