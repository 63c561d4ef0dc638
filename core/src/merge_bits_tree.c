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

/* The bit engine for merge_tree_loop.h. */
#define TL_FAST tfast
#define TL_IN   tin
#define TL_LOOP merge_tree_bits_with
#define tl_match tin_match

static SPECIALIZED kvs_status tl_setup(tfast *f, merge *m)
{
	return loop_setup(m, &f->old, &f->first);
}

static SPECIALIZED void tl_load(tin *b, const kvs_cursor *c)
{
	tin_load(b, c);
}

static SPECIALIZED kvs_status tl_emit_first(merge *m, size_t i)
{
	return emit_first_bit(m, i);
}

static SPECIALIZED kvs_status tl_out_load(tfast *f, kvs_writer *w,
                                          kvs_error *err)
{
	return tout_load(&f->o, w, err);
}

static SPECIALIZED void tl_first(tfast *f, const kvs_writer *w)
{
	f->first_len = w->first_bits;
	memcpy(f->first, w->first_key, (size_t)seg_key_bytes(f->first_len));
}

static SPECIALIZED uint64_t tl_head_lcp(const tin *a, const tin *b, int *cmp)
{
	return seg_key_lcp(a->key, a->len, b->key, b->len, cmp);
}

/* An input's end is found out of line. */
static SPECIALIZED kvs_status tl_advance(tfast *f, size_t i, bool *live,
                                         bool typed)
{
	if (!tin_next_fast(&f->in[i], typed) &&
	    !tin_next_restart(&f->in[i], typed))
		return tin_next_slow(f, i, live);
	return KVS_OK;
}

static SPECIALIZED bool tl_tomb(const tin *b)
{
	return b->tomb;
}

static SPECIALIZED kvs_status tl_put(tfast *f, tin *b, const bool *live,
                                     bool typed)
{
	return tout_put(f, b, live, typed);
}

static SPECIALIZED void tl_keep_key(kvs_writer *w, tin *b)
{
	tin_fill(b);
	memcpy(w->prev_key, b->key, (size_t)seg_key_bytes(b->len));
}

static SPECIALIZED uint64_t tl_consumed(const tfast *f, const bool *live)
{
	return tfast_consumed(f, live);
}

static SPECIALIZED void tl_sync(kvs_writer *w, const tfast *f, uint64_t out)
{
	tout_sync(w, &f->o, out);
}

static SPECIALIZED void tl_last_key(kvs_writer *w, const tfast *f, tin *b)
{
	tin_fill(b);
	memcpy(w->prev_key, b->key, (size_t)seg_key_bytes(f->o.prev_len));
}

#include "merge_tree_loop.h"

/* The framing as a constant; a strong delete (see merge_tree_loop.h) in
 * merge_tree_bits_drop. */
KVS_MULTIVERSION NO_SLP kvs_status merge_tree_bits_fast(merge *m)
{
	if (m->w->opt.framing == KVS_FRAMING_TYPED)
		return merge_tree_bits_with(m, true, false);
	return merge_tree_bits_with(m, false, false);
}

/* A strong delete in a function of its own, as merge_two_bits_drop: with
 * its loop the third in one function, GCC stopped inlining fbw_put and
 * seg_unzigzag in the other two. */
KVS_MULTIVERSION NO_SLP kvs_status merge_tree_bits_drop(merge *m)
{
	return merge_tree_bits_with(m, true, true);
}
