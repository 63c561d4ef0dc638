/*
 * merge_bytes_tree.c — N byte-profile inputs into their own framing, in
 * line (merge_bytes.h), under the loser tree (merge_tree.h).
 */
#include "merge_bytes.h"
#include "merge_tree.h"

/*
 * N byte inputs in line, as merge_tree_bits_with: the byte loop's inputs
 * (bin) and output (bout) under the loser tree. Its matches may meet an
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

static SPECIALIZED kvs_status merge_tree_bytes_with(merge *m, bool typed,
                                                    bool drop)
{
	kvs_writer *w = m->w;
	size_t n = m->n;
	fast f;
	memset(&f, 0, sizeof f);
	f.m = m;
	f.n = n;
	f.in = calloc(n, sizeof *f.in);
	bool *live = calloc(n, sizeof *live);
	kvs_status st = KVS_E_NOMEM;
	if (!f.in || !live) {
		st = seg_writer_fail(w, m->err, st, "%s: %s", "out of memory");
		goto out;
	}
	if ((st = fast_setup(&f, m)) != KVS_OK)
		goto out;
	/* the first round: the writer's general path, which keeps the key;
	 * equal keys: the newest input's */
	size_t top = first_top(m);
	for (size_t i = 0; i < n; i++) {
		bin_load(&f.in[i], m->cur[i]);
		live[i] = true;
	}
	if ((st = emit_first_byte(m, top)) !=
	    KVS_OK)
		goto out;
	f.first_len = w->first_bits / 8;
	memcpy(f.first, w->first_key, (size_t)f.first_len);
	bout *o = &f.o;
	bout_load(o, w);
	size_t last = top; /* the input of the last output key */
	for (size_t i = 0; i < n; i++) {
		if (i == top)
			continue;
		int cmp;
		f.in[i].lcp = key_lcp_bits(f.in[i].key, f.in[i].len,
		                           f.in[top].key, f.in[top].len, &cmp) /
		              8;
		if (cmp == 0) {
			m->st.replaced++;
			if ((st = bin_advance(&f, i, &live[i], typed, false)) !=
			    KVS_OK)
				goto out;
		}
	}
	if ((st = bin_advance(&f, top, &live[top], typed, false)) != KVS_OK)
		goto out;
	for (size_t i = 0; i < n; i++)
		m->tree[i] = EMPTY;
	for (size_t i = 0; i < n; i++)
		tree_replay(m, f.in, live, i, true, bin_match);
	uint64_t lp = UINT64_MAX; /* as in merge_tree_bits_with */
	for (;;) {
		size_t i = m->tree[0];
		if (!live[i])
			break;
		bin *t = &f.in[i];
		uint64_t round_len = t->len;
		if (drop && t->vh == 0) { /* typed: a tombstone */
			m->st.dropped++;
			lp = t->lcp < lp ? t->lcp : lp;
		} else {
			if (drop && t->lcp > lp)
				t->lcp = lp;
			if ((st = bout_put(&f, t, live, typed)) != KVS_OK)
				goto out;
			if (drop) {
				memcpy(w->prev_key, t->key, (size_t)t->len);
				lp = UINT64_MAX;
			}
			last = i;
		}
		if ((st = bin_advance(&f, i, &live[i], typed, false)) != KVS_OK)
			goto out;
		tree_replay(m, f.in, live, i, false, bin_match);
		for (;;) { /* older bindings of the round's key */
			size_t j = m->tree[0];
			const bin *b = &f.in[j];
			if (b->lcp != round_len || b->len != round_len ||
			    !live[j])
				break;
			m->st.replaced++;
			if ((st = bin_advance(&f, j, &live[j], typed, false)) !=
			    KVS_OK)
				goto out;
			tree_replay(m, f.in, live, j, false, bin_match);
		}
	}
	m->st.input_records = fast_consumed(&f, live);
	m->st.output_records =
	    m->st.input_records - m->st.replaced - m->st.dropped;
	bout_sync(w, o, m->st.output_records);
	/* the last key: still in its input's buffer, which has not moved
	 * since (the input has no record left); with drop, already there */
	if (!drop)
		memcpy(w->prev_key, f.in[last].key, (size_t)o->prev_len);
out:
	free(f.old);
	free(f.first);
	free(f.in);
	free(live);
	for (size_t i = 0; i < n; i++)
		m->cur[i]->ordinal = m->cur[i]->seg->records;
	return st;
}

/* The framing as a constant; a strong delete as merge_tree_bits_fast. */
kvs_status merge_tree_bytes_fast(merge *m)
{
	if (m->w->opt.framing == KVS_FRAMING_TYPED)
		return m->opt->drop_tombstones
		           ? merge_tree_bytes_with(m, true, true)
		           : merge_tree_bytes_with(m, true, false);
	return merge_tree_bytes_with(m, false, false);
}
