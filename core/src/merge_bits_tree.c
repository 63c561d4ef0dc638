/*
 * merge_bits_tree.c — N bit-profile inputs with the default codes, in line
 * (merge_bits_in.h, merge_bits_out.h), under the loser tree (merge_tree.h).
 */
#include "merge_bits_out.h"
#include "merge_tree.h"

/*
 * N inputs in line: the bit loop's inputs (tin) and output (tout) under
 * the LCP-aware loser tree (see match), each tin's lcp the tree's. The
 * root comes out with its LCP with the last output key, which is what
 * tout_put writes; the input it came from moves on to a record whose LCP
 * field is its LCP with that key, as the next record of the input that
 * wrote it. Older bindings of the key come next at the root, with an LCP
 * of their whole length, the last key's.
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

static SPECIALIZED kvs_status merge_tree_bits_with(merge *m, bool typed,
                                                   bool drop)
{
	kvs_writer *w = m->w;
	size_t n = m->n;
	tfast f;
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
	if ((st = loop_setup(m, &f.old, &f.first)) != KVS_OK)
		goto out;
	/* the first round: the writer's general path, which keeps the key;
	 * equal keys: the newest input's */
	size_t top = first_top(m);
	for (size_t i = 0; i < n; i++) {
		tin_load(&f.in[i], m->cur[i]);
		live[i] = true;
	}
	if ((st = emit_first_bit(m, top)) !=
	    KVS_OK)
		goto out;
	tout *o = &f.o;
	if ((st = tout_load(o, w, m->err)) != KVS_OK)
		goto out;
	f.first_len = w->first_bits;
	memcpy(f.first, w->first_key, (size_t)seg_key_bytes(f.first_len));
	/* Moves input i on; an input's end is found out of line. */
#define TREE_ADVANCE(i)                                                        \
	do {                                                                   \
		if (!tin_next_fast(&f.in[i], typed) &&                         \
		    !tin_next_restart(&f.in[i], typed) &&                      \
		    (st = tin_next_slow(&f, i, &live[i])) != KVS_OK)           \
			goto out;                                              \
	} while (0)
	size_t last = top; /* the input of the last output key */
	for (size_t i = 0; i < n; i++) {
		if (i == top)
			continue;
		int cmp;
		uint64_t l = seg_key_lcp(f.in[i].key, f.in[i].len,
		                         f.in[top].key, f.in[top].len, &cmp);
		f.in[i].lcp = l;
		if (cmp == 0) {
			m->st.replaced++;
			TREE_ADVANCE(i);
		}
	}
	TREE_ADVANCE(top);
	for (size_t i = 0; i < n; i++)
		m->tree[i] = EMPTY;
	for (size_t i = 0; i < n; i++)
		tree_replay(m, f.in, live, i, true, tin_match);
	/* a strong delete: see merge_tree_bits_fast; lp is the LCP of the
	 * last round's key with the last output key (all of it when the
	 * round wrote its record) */
	uint64_t lp = UINT64_MAX;
	for (;;) {
		size_t i = m->tree[0];
		if (!live[i])
			break;
		tin *t = &f.in[i];
		uint64_t round_len = t->len;
		if (drop && t->tomb) {
			m->st.dropped++;
			lp = t->lcp < lp ? t->lcp : lp;
		} else {
			if (drop && t->lcp > lp)
				t->lcp = lp;
			if ((st = tout_put(&f, t, live, typed)) != KVS_OK)
				goto out;
			if (drop) {
				tin_fill(t);
				memcpy(w->prev_key, t->key,
				       (size_t)seg_key_bytes(t->len));
				lp = UINT64_MAX;
			}
			last = i;
		}
		TREE_ADVANCE(i);
		tree_replay(m, f.in, live, i, false, tin_match);
		for (;;) { /* older bindings of the round's key */
			size_t j = m->tree[0];
			const tin *b = &f.in[j];
			if (b->lcp != round_len || b->len != round_len ||
			    !live[j])
				break;
			m->st.replaced++;
			TREE_ADVANCE(j);
			tree_replay(m, f.in, live, j, false, tin_match);
		}
	}
#undef TREE_ADVANCE
	m->st.input_records = tfast_consumed(&f, live);
	m->st.output_records =
	    m->st.input_records - m->st.replaced - m->st.dropped;
	tout_sync(w, o, m->st.output_records);
	/* the last key: still in its input's buffer, which has not moved
	 * since (the input has no record left); with drop, already there */
	if (!drop) {
		tin_fill(&f.in[last]);
		memcpy(w->prev_key, f.in[last].key,
		       (size_t)seg_key_bytes(o->prev_len));
	}
out:
	free(f.old);
	free(f.first);
	free(f.in);
	free(live);
	for (size_t i = 0; i < n; i++)
		m->cur[i]->ordinal = m->cur[i]->seg->records;
	return st;
}

/*
 * The framing as a constant. A strong delete (typed) writes no tombstone:
 * the tree's LCPs are with the last round's key R, which may have been
 * dropped, and the last output key P is below it, so the root's LCP with
 * P is the smaller of its LCP with R and R's with P (lp, carried over the
 * rounds that drop). The last output key is kept in the writer's prev_key.
 */
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
