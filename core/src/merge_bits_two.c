/*
 * merge_bits_two.c — two bit-profile inputs with the default codes, in line
 * (merge_bits_in.h, merge_bits_out.h).
 */
#include "merge_bits_out.h"

static SPECIALIZED kvs_status merge_two_bits_with(merge *m, bool typed,
                                                  bool drop)
{
	kvs_writer *w = m->w;
	tfast f;
	tin in[2];
	memset(&f, 0, sizeof f);
	memset(in, 0, sizeof in);
	f.m = m;
	f.in = in;
	f.n = 2;
	tin *a = &in[0], *b = &in[1];
	bool live[2] = {true, true};
	kvs_status st = loop_setup(m, &f.old, &f.first);
	if (st != KVS_OK)
		goto out;
	tin_load(a, m->cur[0]);
	tin_load(b, m->cur[1]);
	/* the first round: the writer's general path, which keeps the key */
	int cmp;
	uint64_t l = seg_key_lcp(a->key, a->len, b->key, b->len, &cmp);
	if ((st = emit_first_bit(m, cmp < 0 ? 0 : 1)) != KVS_OK)
		goto out;
	tout *o = &f.o;
	if ((st = tout_load(o, w, m->err)) != KVS_OK)
		goto out;
	f.first_len = w->first_bits;
	memcpy(f.first, w->first_key, (size_t)seg_key_bytes(f.first_len));
	if (cmp <= 0)
		b->lcp = l;
	else
		a->lcp = l;
	/* Moves input i on; an input's end (found out of line) ends the loop. */
#define TFAST_ADVANCE(i)                                                       \
	do {                                                                   \
		if (!tin_next_fast(&in[i], typed) &&                           \
		    !tin_next_restart(&in[i], typed)) {                        \
			if ((st = tin_next_slow(&f, i, &live[i])) != KVS_OK)   \
				goto out;                                      \
			ended |= !live[i];                                     \
		}                                                              \
	} while (0)
	bool ended = false;
	if (cmp >= 0)
		TFAST_ADVANCE(1);
	if (cmp == 0)
		m->st.replaced++;
	if (cmp <= 0)
		TFAST_ADVANCE(0);
#define TFAST_SKIP(i)                                                          \
	do {                                                                   \
		uint64_t lcp_ = in[i].lcp;                                     \
		TFAST_ADVANCE(i);                                              \
		if (in[i].lcp > lcp_)                                          \
			in[i].lcp = lcp_;                                      \
	} while (0)
#define TFAST_PUT(t)                                                           \
	do {                                                                   \
		if ((st = tout_put(&f, (t), live, typed)) != KVS_OK)           \
			goto out;                                              \
		if (drop) {                                                    \
			tin_fill(t);                                           \
			memcpy(w->prev_key, (t)->key,                          \
			       (size_t)seg_key_bytes((t)->len));               \
		}                                                              \
	} while (0)
	/*
	 * A strong delete (drop, typed framing) writes no tombstone: the last
	 * output key P stays, and the next record K of the dropped one's
	 * input (T) gets its LCP with P as min(LCP(K, T), LCP(T, P)), since
	 * P < T < K. The last output key is kept in the writer's prev_key, as
	 * it may not be the last record of an input.
	 */
	while (!ended) {
		l = tin_heads_lcp(a, b, &cmp);
		if (cmp < 0) {
			if (drop && a->tomb) {
				m->st.dropped++;
				TFAST_SKIP(0);
				continue;
			}
			TFAST_PUT(a);
			b->lcp = l;
			TFAST_ADVANCE(0);
		} else if (drop && b->tomb) {
			m->st.dropped++;
			TFAST_SKIP(1);
			if (cmp == 0) { /* and the older binding */
				m->st.replaced++;
				TFAST_SKIP(0);
			}
		} else {
			TFAST_PUT(b);
			a->lcp = l;
			TFAST_ADVANCE(1);
			if (cmp == 0) { /* the newer input wins */
				m->st.replaced++;
				TFAST_ADVANCE(0);
			}
		}
	}
	/* one input left: its records follow each other */
	size_t ri = live[0] ? 0 : 1;
	tin *r = &in[ri];
	tin *last = live[ri] ? r : b;
	while (live[ri]) {
		if (drop && r->tomb) {
			m->st.dropped++;
			TFAST_SKIP(ri);
			continue;
		}
		TFAST_PUT(r);
		TFAST_ADVANCE(ri);
	}
#undef TFAST_PUT
#undef TFAST_SKIP
#undef TFAST_ADVANCE
	m->st.input_records = tfast_consumed(&f, live);
	m->st.output_records =
	    m->st.input_records - m->st.replaced - m->st.dropped;
	tout_sync(w, o, m->st.output_records);
	/* the last key: still in its input's buffer, which has not moved
	 * since (the input has no record left); with drop, already there */
	if (!drop) {
		tin_fill(last);
		memcpy(w->prev_key, last->key,
		       (size_t)seg_key_bytes(o->prev_len));
	}
out:
	free(f.old);
	free(f.first);
	for (size_t i = 0; i < 2; i++)
		m->cur[i]->ordinal = m->cur[i]->seg->records;
	return st;
}

/* The framing as a constant (typed: tombstones and the kind bit). */
KVS_MULTIVERSION NO_SLP kvs_status merge_two_bits_fast(merge *m)
{
	if (m->w->opt.framing == KVS_FRAMING_TYPED)
		return merge_two_bits_with(m, true, false);
	return merge_two_bits_with(m, false, false);
}

/* A strong delete (typed framing), in a function of its own: a third
 * instance of the loop in merge_two_bits_fast made the others longer. */
KVS_MULTIVERSION NO_SLP kvs_status merge_two_bits_drop(merge *m)
{
	return merge_two_bits_with(m, true, true);
}
