/*
 * merge_bits_tree.c — N bit-profile inputs with the default codes, in line
 * (merge_bits_in.h, merge_bits_out.h), under the loser tree (merge_tree.h).
 */
#include "merge_bits_out.h"
#include "merge_tree.h"

/*
 * The bit engine's inputs (tin) and output (tout) under the LCP-aware
 * loser tree, in the loop of merge_tree_loop.h.
 */
static SPECIALIZED bool tin_match(void *inputs, const bool *live, size_t x,
                                  size_t y)
{
	tin *in = inputs;
	/* the key sharing more with the last is the smaller (see
	 * tree_replay for an input that has ended) */
	if (in[x].lcp != in[y].lcp)
		return in[x].lcp > in[y].lcp;
	if (!live[x])
		return false;
	if (!live[y])
		return true;
	int cmp;
	uint64_t l = tin_heads_lcp(&in[x], &in[y], &cmp);
	bool first = cmp < 0 || (cmp == 0 && x > y);
	tin *loser = &in[first ? y : x];
	loser->lcp = l;
	if (cmp == 0) /* an older binding may wait in the tree */
		tin_fill(loser);
	return first;
}

/* The bit engine for merge_tree_loop.h (its tl_ operations are in
 * merge_bits_out.h). */
#define TL_FAST tfast
#define TL_IN   tin
#define TL_LOOP merge_tree_bits_with
#define tl_match tin_match

#include "merge_tree_loop.h"

/* The framing as a constant; a strong delete (see merge_tree_loop.h) in
 * kvsi_merge_tree_bits_drop. */
KVS_MULTIVERSION NO_SLP kvs_status kvsi_merge_tree_bits_fast(merge *m)
{
	if (m->w->opt.framing == KVS_FRAMING_TYPED)
		return merge_tree_bits_with(m, true, false);
	return merge_tree_bits_with(m, false, false);
}

/* A strong delete in a function of its own, as kvsi_merge_two_bits_drop: with
 * its loop the third in one function, GCC stopped inlining fbw_put and
 * seg_unzigzag in the other two. */
KVS_MULTIVERSION NO_SLP kvs_status kvsi_merge_tree_bits_drop(merge *m)
{
	return merge_tree_bits_with(m, true, true);
}
