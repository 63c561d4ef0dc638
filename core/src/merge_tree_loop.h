/*
 * merge_tree_loop.h — the in-line N-input loop, written once and compiled
 * twice (as ef_ops.h is): by merge_bytes_tree.c over the byte engine and
 * by merge_bits_tree.c over the bit engine. Not a header to include
 * anywhere else, and without a guard: the includer defines, before it,
 *
 *   TL_FAST, TL_IN    the engine's loop state and input (fast/bin,
 *                     tfast/tin)
 *   TL_LOOP           the name of the loop function to define
 *
 * and these functions over them (static, SPECIALIZED):
 *
 *   tl_setup(f, m)            the loop's buffers (loop_setup and more)
 *   tl_load(b, c)             input b from its cursor c
 *   tl_emit_first(m, i)       the first round's record, the writer's way
 *   tl_out_load(f, w, err)    the output's state from the writer
 *   tl_first(f, w)            the output's first key, kept for restarts
 *   tl_head_lcp(a, b, cmp)    the LCP of two inputs' keys (the engine's
 *                             unit: bytes or bits), *cmp their order
 *   tl_advance(f, i, live, typed)  input i on to its next record
 *   tl_match                  the tree's match (see merge_tree.h)
 *   tl_tomb(b)                b's record is a tombstone
 *   tl_put(f, b, live, typed) b's record to the output
 *   tl_keep_key(w, b)         b's key as the writer's previous key
 *   tl_consumed(f, live)      input records consumed
 *   tl_sync(w, f, out)        the writer's state from the loop's
 *   tl_last_key(w, f, b)      the last output key (b's) into the writer
 *
 * The loop: the inputs (TL_IN) and the output under the LCP-aware loser
 * tree, each input's lcp the tree's. The root comes out with its LCP with
 * the last output key, which is what tl_put writes; the input it came
 * from moves on to a record whose LCP field is its LCP with that key, as
 * the next record of the input that wrote it. Older bindings of the key
 * come next at the root, with an LCP of their whole length, the last
 * key's.
 *
 * A strong delete (drop, typed) writes no tombstone: the tree's LCPs are
 * with the last round's key R, which may have been dropped, and the last
 * output key P is below it, so the root's LCP with P is the smaller of its
 * LCP with R and R's with P (lp, carried over the rounds that drop). The
 * last output key is then kept in the writer's prev_key as it goes.
 */

static SPECIALIZED kvs_status TL_LOOP(merge *m, bool typed, bool drop)
{
	kvs_writer *w = m->w;
	size_t n = m->n;
	TL_FAST f;
	memset(&f, 0, sizeof f);
	f.m = m;
	f.n = n;
	f.in = calloc(n, sizeof *f.in);
	bool *live = calloc(n, sizeof *live);
	kvs_status st = KVS_E_NOMEM;
	if (!f.in || !live) {
		st = kvsi_writer_fail(w, m->err, st, "%s: %s", "out of memory");
		goto out;
	}
	if ((st = tl_setup(&f, m)) != KVS_OK)
		goto out;
	/* the first round: the writer's general path, which keeps the key;
	 * equal keys: the newest input's */
	size_t top = first_top(m);
	for (size_t i = 0; i < n; i++) {
		tl_load(&f.in[i], m->cur[i]);
		live[i] = true;
	}
	if ((st = tl_emit_first(m, top)) != KVS_OK)
		goto out;
	if ((st = tl_out_load(&f, w, m->err)) != KVS_OK)
		goto out;
	tl_first(&f, w);
	size_t last = top; /* the input of the last output key */
	for (size_t i = 0; i < n; i++) {
		if (i == top)
			continue;
		int cmp;
		f.in[i].lcp = tl_head_lcp(&f.in[i], &f.in[top], &cmp);
		if (cmp == 0) {
			m->st.replaced++;
			if ((st = tl_advance(&f, i, &live[i], typed)) != KVS_OK)
				goto out;
		}
	}
	if ((st = tl_advance(&f, top, &live[top], typed)) != KVS_OK)
		goto out;
	for (size_t i = 0; i < n; i++)
		m->tree[i] = EMPTY;
	for (size_t i = 0; i < n; i++)
		tree_replay(m, f.in, live, i, true, tl_match);
	/* lp: the LCP of the last round's key with the last output key (all
	 * of it when the round wrote its record) */
	uint64_t lp = UINT64_MAX;
	for (;;) {
		size_t i = m->tree[0];
		if (!live[i])
			break;
		TL_IN *t = &f.in[i];
		uint64_t round_len = t->len;
		if (drop && tl_tomb(t)) {
			m->st.dropped++;
			lp = t->lcp < lp ? t->lcp : lp;
		} else {
			if (drop && t->lcp > lp)
				t->lcp = lp;
			if ((st = tl_put(&f, t, live, typed)) != KVS_OK)
				goto out;
			if (drop) {
				tl_keep_key(w, t);
				lp = UINT64_MAX;
			}
			last = i;
		}
		if ((st = tl_advance(&f, i, &live[i], typed)) != KVS_OK)
			goto out;
		tree_replay(m, f.in, live, i, false, tl_match);
		for (;;) { /* older bindings of the round's key */
			size_t j = m->tree[0];
			const TL_IN *b = &f.in[j];
			if (b->lcp != round_len || b->len != round_len ||
			    !live[j])
				break;
			m->st.replaced++;
			if ((st = tl_advance(&f, j, &live[j], typed)) != KVS_OK)
				goto out;
			tree_replay(m, f.in, live, j, false, tl_match);
		}
	}
	m->st.input_records = tl_consumed(&f, live);
	m->st.output_records =
	    m->st.input_records - m->st.replaced - m->st.dropped;
	tl_sync(w, &f, m->st.output_records);
	/* the last key: still in its input's buffer, which has not moved
	 * since (the input has no record left); with drop, already there */
	if (!drop)
		tl_last_key(w, &f, &f.in[last]);
out:
	free(f.old);
	free(f.first);
	free(f.in);
	free(live);
	for (size_t i = 0; i < n; i++)
		m->cur[i]->ordinal = m->cur[i]->seg->records;
	return st;
}
