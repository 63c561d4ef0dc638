/*
 * merge_two_loop.h — the in-line two-input loop, written once and compiled
 * twice (as merge_tree_loop.h is): by merge_bytes_two.c over the byte
 * engine and by merge_bits_two.c over the bit engine. Not a header to
 * include anywhere else, and without a guard: the includer defines, before
 * it, TL_FAST, TL_IN (as for merge_tree_loop.h) and
 *
 *   TW_LOOP           the name of the loop function to define
 *
 * and has, besides the engine's tl_ operations (merge_tree_loop.h lists
 * them), these (static, SPECIALIZED):
 *
 *   tw_inputs(f, local)       where the two inputs live: in f, or local
 *   tw_first_lcps(a, b, cmp, l)  the first round's loser gets its LCP
 *                             l with the winner (equal keys: b's)
 *   tw_heads(a, b, cmp)       the order of the two keys; returns the
 *                             loser's LCP with the winner, for tw_lose
 *   tw_lose(b, l)             b lost a round: its LCP with the winner
 *   tw_keep_p(loser, winner)  the winner was dropped: the loser's LCP
 *                             with the last output key (heads_keep_p)
 *   tw_rank(b), tw_unskip(b, lcp, rank)  what a dropped record's input
 *                             keeps of its LCP with the last output key
 *   tw_next_fast(b, typed), tw_next_restart(b, typed),
 *   tw_next_slow(f, i, live)  input i's next record: in line, at an
 *                             in-line restart, or out of line
 *
 * The loop: each input's LCP with the last output key P is known, so the
 * writer neither compares keys nor copies P. A strong delete (drop, typed
 * framing) writes no tombstone: P stays, and the next record K of the
 * dropped one's input (T) gets its LCP with P as min(LCP(K, T), LCP(T,
 * P)), since P < T < K. P is then kept in the writer's prev_key, as it may
 * not be the last record of an input.
 */

static SPECIALIZED kvs_status TW_LOOP(merge *m, bool typed, bool drop)
{
	kvs_writer *w = m->w;
	TL_FAST f;
	TL_IN local[2];
	memset(&f, 0, sizeof f);
	TL_IN *in = tw_inputs(&f, local);
	f.m = m;
	f.in = in;
	f.n = 2;
	TL_IN *a = &in[0], *b = &in[1];
	bool live[2] = {true, true};
	kvs_status st = tl_setup(&f, m);
	if (st != KVS_OK)
		goto out;
	tl_load(a, m->cur[0]);
	tl_load(b, m->cur[1]);
	/* the first round: the writer's general path, which keeps the key */
	int cmp;
	uint64_t l = tl_head_lcp(a, b, &cmp);
	if ((st = tl_emit_first(m, cmp < 0 ? 0 : 1)) != KVS_OK)
		goto out;
	if ((st = tl_out_load(&f, w, m->err)) != KVS_OK)
		goto out;
	tl_first(&f, w);
	tw_first_lcps(a, b, cmp, l);
	/* Moves input i on; an input's end (found out of line) ends the loop. */
#define TW_ADVANCE(i)                                                          \
	do {                                                                   \
		if (!tw_next_fast(&in[i], typed) &&                            \
		    !tw_next_restart(&in[i], typed)) {                         \
			if ((st = tw_next_slow(&f, i, &live[i])) != KVS_OK)    \
				goto out;                                      \
			ended |= !live[i];                                     \
		}                                                              \
	} while (0)
#define TW_SKIP(i)                                                             \
	do {                                                                   \
		uint64_t lcp_ = in[i].lcp, rank_ = tw_rank(&in[i]);            \
		TW_ADVANCE(i);                                                 \
		tw_unskip(&in[i], lcp_, rank_);                                \
	} while (0)
#define TW_PUT(t)                                                              \
	do {                                                                   \
		if ((st = tl_put(&f, (t), live, typed)) != KVS_OK)             \
			goto out;                                              \
		if (drop)                                                      \
			tl_keep_key(w, (t));                                   \
	} while (0)
	bool ended = false;
	if (cmp >= 0)
		TW_ADVANCE(1);
	if (cmp == 0)
		m->st.replaced++;
	if (cmp <= 0)
		TW_ADVANCE(0);
	while (!ended) {
		l = tw_heads(a, b, &cmp);
		if (cmp < 0) {
			if (drop && tl_tomb(a)) {
				m->st.dropped++;
				tw_keep_p(b, a);
				TW_SKIP(0);
				continue;
			}
			TW_PUT(a);
			tw_lose(b, l);
			TW_ADVANCE(0);
		} else if (drop && tl_tomb(b)) {
			m->st.dropped++;
			tw_keep_p(a, b);
			TW_SKIP(1);
			if (cmp == 0) { /* and the older binding */
				m->st.replaced++;
				TW_SKIP(0);
			}
		} else {
			TW_PUT(b);
			tw_lose(a, l);
			TW_ADVANCE(1);
			if (cmp == 0) { /* the newer input wins */
				m->st.replaced++;
				TW_ADVANCE(0);
			}
		}
	}
	/* one input left: its records follow each other */
	size_t ri = live[0] ? 0 : 1;
	TL_IN *r = &in[ri];
	TL_IN *last = live[ri] ? r : b;
	while (live[ri]) {
		if (drop && tl_tomb(r)) {
			m->st.dropped++;
			TW_SKIP(ri);
			continue;
		}
		TW_PUT(r);
		if ((st = tl_advance(&f, ri, &live[ri], typed)) != KVS_OK)
			goto out;
	}
#undef TW_PUT
#undef TW_SKIP
#undef TW_ADVANCE
	m->st.input_records = tl_consumed(&f, live);
	m->st.output_records =
	    m->st.input_records - m->st.replaced - m->st.dropped;
	tl_sync(w, &f, m->st.output_records);
	/* the last key: still in its input's buffer, which has not moved
	 * since (the input has no record left); with drop, already there */
	if (!drop)
		tl_last_key(w, &f, last);
out:
	free(f.old);
	free(f.first);
	for (size_t i = 0; i < 2; i++)
		m->cur[i]->ordinal = m->cur[i]->seg->records;
	return st;
}
