/*
 * merge_bytes_two.c — two byte-profile inputs into their own framing, in
 * line (merge_bytes.h), in the loop of merge_two_loop.h.
 */
#include "merge_bytes.h"

/* The byte engine for merge_two_loop.h (its tl_ operations are in
 * merge_bytes.h). The inputs live in the loop's state (fast.two), their
 * order comes from ranks (heads_cmp), and an input's records are decoded
 * ranked. */
#define TL_FAST fast
#define TL_IN   bin
#define TW_LOOP merge_two_bytes_with

static SPECIALIZED bin *tw_inputs(fast *f, bin *local)
{
	(void)local;
	return f->two;
}

static SPECIALIZED void tw_first_lcps(bin *a, bin *b, int cmp, uint64_t l)
{
	if (cmp < 0)
		bin_set_lcp(b, l);
	else if (cmp > 0)
		bin_set_lcp(a, l);
}

/* heads_cmp gives the loser its LCP and rank: nothing for tw_lose. */
static SPECIALIZED uint64_t tw_heads(bin *a, bin *b, int *cmp)
{
	*cmp = heads_cmp(a, b);
	return 0;
}

static SPECIALIZED void tw_lose(bin *b, uint64_t l)
{
	(void)b;
	(void)l;
}

static SPECIALIZED void tw_keep_p(bin *loser, const bin *winner)
{
	heads_keep_p(loser, winner);
}

static SPECIALIZED uint64_t tw_rank(const bin *b)
{
	return b->rank;
}

static SPECIALIZED void tw_unskip(bin *b, uint64_t lcp, uint64_t rank)
{
	if (b->lcp > lcp) {
		b->lcp = lcp;
		b->rank = rank;
	}
}

static SPECIALIZED bool tw_next_fast(bin *b, bool typed)
{
	return bin_next_fast(b, typed, true);
}

static SPECIALIZED bool tw_next_restart(bin *b, bool typed)
{
	(void)typed;
	return bin_next_restart(b);
}

static SPECIALIZED kvs_status tw_next_slow(fast *f, size_t i, bool *live)
{
	return bin_next_slow(f, i, live);
}

#include "merge_two_loop.h"

/* The framing as a constant (typed: tombstones and value lengths). */
kvs_status kvsi_merge_two_bytes_fast(merge *m)
{
	if (m->w->opt.framing == KVS_FRAMING_TYPED)
		return m->opt->drop_tombstones
		           ? merge_two_bytes_with(m, true, true)
		           : merge_two_bytes_with(m, true, false);
	return merge_two_bytes_with(m, false, false);
}
