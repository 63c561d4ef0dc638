/*
 * merge_bits_two.c — two bit-profile inputs with the default codes, in line
 * (merge_bits_in.h, merge_bits_out.h), in the loop of merge_two_loop.h.
 */
#include "merge_bits_out.h"

/* The bit engine for merge_two_loop.h (its tl_ operations are in
 * merge_bits_out.h). The inputs live in a local array, and a round's
 * compare gives the loser its LCP with the winner. */
#define TL_FAST tfast
#define TL_IN   tin
#define TW_LOOP merge_two_bits_with

static SPECIALIZED tin *tw_inputs(tfast *f, tin *local)
{
	(void)f;
	memset(local, 0, 2 * sizeof *local);
	return local;
}

static SPECIALIZED void tw_first_lcps(tin *a, tin *b, int cmp, uint64_t l)
{
	if (cmp <= 0)
		b->lcp = l;
	else
		a->lcp = l;
}

static SPECIALIZED uint64_t tw_heads(tin *a, tin *b, int *cmp)
{
	return tin_heads_lcp(a, b, cmp);
}

static SPECIALIZED void tw_lose(tin *b, uint64_t l)
{
	b->lcp = l;
}

/* A round's compare leaves the loser's LCP with the last output key as
 * it was (tw_lose sets it after a record is written): nothing to keep. */
static SPECIALIZED void tw_keep_p(tin *loser, const tin *winner)
{
	(void)loser;
	(void)winner;
}

static SPECIALIZED uint64_t tw_rank(const tin *b)
{
	(void)b;
	return 0;
}

static SPECIALIZED void tw_unskip(tin *b, uint64_t lcp, uint64_t rank)
{
	(void)rank;
	if (b->lcp > lcp)
		b->lcp = lcp;
}

static SPECIALIZED bool tw_next_fast(tin *b, bool typed)
{
	return tin_next_fast(b, typed);
}

static SPECIALIZED bool tw_next_restart(tin *b, bool typed)
{
	return tin_next_restart(b, typed);
}

static SPECIALIZED kvs_status tw_next_slow(tfast *f, size_t i, bool *live)
{
	return tin_next_slow(f, i, live);
}

#include "merge_two_loop.h"

/* The framing as a constant (typed: tombstones and the kind bit). */
KVS_MULTIVERSION NO_SLP kvs_status kvsi_merge_two_bits_fast(merge *m)
{
	if (m->w->opt.framing == KVS_FRAMING_TYPED)
		return merge_two_bits_with(m, true, false);
	return merge_two_bits_with(m, false, false);
}

/* A strong delete (typed framing), in a function of its own: a third
 * instance of the loop in kvsi_merge_two_bits_fast made the others longer. */
KVS_MULTIVERSION NO_SLP kvs_status kvsi_merge_two_bits_drop(merge *m)
{
	return merge_two_bits_with(m, true, true);
}
