/*
 * merge_bytes_tree.c — N byte-profile inputs into their own framing, in
 * line (merge_bytes.h), under the loser tree (merge_tree.h).
 */
#include "merge_bytes.h"
#include "merge_tree.h"

/*
 * The byte engine's inputs (bin) and output (bout) under the loser tree,
 * in the loop of merge_tree_loop.h. Its matches may meet an
 * older binding of the last output key P, which heads_lcp does not take
 * (its keys are above P): of two keys that share their LCPs with P, one
 * that ends there is a prefix of the other.
 */
static SPECIALIZED bool bin_match(void *inputs, const bool *live, size_t x,
                                  size_t y)
{
	bin *in = inputs;
	bin *a = &in[x], *b = &in[y];
	uint64_t l = a->lcp;
	if (l != b->lcp) /* as in tin_match */
		return l > b->lcp;
	if (!live[x])
		return false;
	if (!live[y])
		return true;
	int cmp;
	if (l == a->len || l == b->len)
		cmp = a->len < b->len ? -1 : a->len > b->len;
	else
		l = heads_lcp(a, b, &cmp);
	bool first = cmp < 0 || (cmp == 0 && x > y);
	in[first ? y : x].lcp = l;
	return first;
}

/* The byte engine for merge_tree_loop.h (its tl_ operations are in
 * merge_bytes.h). */
#define TL_FAST fast
#define TL_IN   bin
#define TL_LOOP merge_tree_bytes_with
#define tl_match bin_match

#include "merge_tree_loop.h"

/* The framing as a constant; a strong delete as kvsi_merge_tree_bits_fast. */
kvs_status kvsi_merge_tree_bytes_fast(merge *m)
{
	if (m->w->opt.framing == KVS_FRAMING_TYPED)
		return m->opt->drop_tombstones
		           ? merge_tree_bytes_with(m, true, true)
		           : merge_tree_bytes_with(m, true, false);
	return merge_tree_bytes_with(m, false, false);
}
