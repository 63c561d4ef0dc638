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

/* The byte engine for merge_tree_loop.h. */
#define TL_FAST fast
#define TL_IN   bin
#define TL_LOOP merge_tree_bytes_with
#define tl_match bin_match

static SPECIALIZED kvs_status tl_setup(fast *f, merge *m)
{
	return fast_setup(f, m);
}

static SPECIALIZED void tl_load(bin *b, const kvs_cursor *c)
{
	bin_load(b, c);
}

static SPECIALIZED kvs_status tl_emit_first(merge *m, size_t i)
{
	return emit_first_byte(m, i);
}

static SPECIALIZED kvs_status tl_out_load(fast *f, kvs_writer *w,
                                          kvs_error *err)
{
	(void)err;
	bout_load(&f->o, w);
	return KVS_OK;
}

static SPECIALIZED void tl_first(fast *f, const kvs_writer *w)
{
	f->first_len = w->first_bits / 8;
	memcpy(f->first, w->first_key, (size_t)f->first_len);
}

static SPECIALIZED uint64_t tl_head_lcp(const bin *a, const bin *b, int *cmp)
{
	return key_lcp_bits(a->key, a->len, b->key, b->len, cmp) / 8;
}

static SPECIALIZED kvs_status tl_advance(fast *f, size_t i, bool *live,
                                         bool typed)
{
	return bin_advance(f, i, live, typed, false);
}

static SPECIALIZED bool tl_tomb(const bin *b)
{
	return b->vh == 0; /* typed: a tombstone */
}

static SPECIALIZED kvs_status tl_put(fast *f, bin *b, const bool *live,
                                     bool typed)
{
	return bout_put(f, b, live, typed);
}

static SPECIALIZED void tl_keep_key(kvs_writer *w, const bin *b)
{
	memcpy(w->prev_key, b->key, (size_t)b->len);
}

static SPECIALIZED uint64_t tl_consumed(const fast *f, const bool *live)
{
	return fast_consumed(f, live);
}

static SPECIALIZED void tl_sync(kvs_writer *w, const fast *f, uint64_t out)
{
	bout_sync(w, &f->o, out);
}

static SPECIALIZED void tl_last_key(kvs_writer *w, const fast *f,
                                    const bin *b)
{
	memcpy(w->prev_key, b->key, (size_t)f->o.prev_len);
}

#include "merge_tree_loop.h"

/* The framing as a constant; a strong delete as merge_tree_bits_fast. */
kvs_status merge_tree_bytes_fast(merge *m)
{
	if (m->w->opt.framing == KVS_FRAMING_TYPED)
		return m->opt->drop_tombstones
		           ? merge_tree_bytes_with(m, true, true)
		           : merge_tree_bytes_with(m, true, false);
	return merge_tree_bytes_with(m, false, false);
}
