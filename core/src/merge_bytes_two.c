/*
 * merge_bytes_two.c — two byte-profile inputs into their own framing, in
 * line (merge_bytes.h).
 */
#include "merge_bytes.h"

static SPECIALIZED kvs_status merge_two_bytes_with(merge *m, bool typed,
                                                   bool drop)
{
	kvs_writer *w = m->w;
	fast f;
	memset(&f, 0, sizeof f);
	f.m = m;
	bin *in = f.two;
	f.in = in;
	f.n = 2;
	bin *a = &in[0], *b = &in[1];
	bool live[2] = {true, true};
	kvs_status st = fast_setup(&f, m);
	if (st != KVS_OK)
		goto out;
	bin_load(a, m->cur[0]);
	bin_load(b, m->cur[1]);
	/* the first round: the writer's general path, which keeps the key */
	int cmp;
	uint64_t l = key_lcp_bits(a->key, a->len, b->key, b->len, &cmp) / 8;
	if ((st = emit_first_byte(m, cmp < 0 ? 0 : 1)) != KVS_OK)
		goto out;
	f.first_len = w->first_bits / 8;
	memcpy(f.first, w->first_key, (size_t)f.first_len);
	bout *o = &f.o;
	bout_load(o, w);
	if (cmp < 0)
		bin_set_lcp(b, l);
	else if (cmp > 0)
		bin_set_lcp(a, l);
	if (cmp >= 0 &&
	    (st = bin_advance(&f, 1, &live[1], typed, true)) != KVS_OK)
		goto out;
	if (cmp == 0)
		m->st.replaced++;
	if (cmp <= 0 &&
	    (st = bin_advance(&f, 0, &live[0], typed, true)) != KVS_OK)
		goto out;
	/* Moves input i on; an input's end (found out of line) ends the loop. */
#define FAST_ADVANCE(i)                                                        \
	do {                                                                   \
		if (!bin_next_fast(&in[i], typed, true) &&                     \
		    !bin_next_restart(&in[i])) {                               \
			if ((st = bin_next_slow(&f, i, &live[i])) != KVS_OK)   \
				goto out;                                      \
			ended |= !live[i];                                     \
		}                                                              \
	} while (0)
#define FAST_SKIP(i)                                                           \
	do {                                                                   \
		uint64_t lcp_ = in[i].lcp, rank_ = in[i].rank;                 \
		FAST_ADVANCE(i);                                               \
		if (in[i].lcp > lcp_) {                                        \
			in[i].lcp = lcp_;                                      \
			in[i].rank = rank_;                                    \
		}                                                              \
	} while (0)
#define FAST_PUT(t)                                                            \
	do {                                                                   \
		if ((st = bout_put(&f, (t), live, typed)) != KVS_OK)           \
			goto out;                                              \
		if (drop)                                                      \
			memcpy(w->prev_key, (t)->key, (size_t)(t)->len);       \
	} while (0)
	/* A strong delete: as in merge_two_bits_with (TFAST_SKIP). */
	bool ended = !live[0] || !live[1];
	while (!ended) {
		cmp = heads_cmp(a, b);
		if (cmp < 0) {
			if (drop && a->vh == 0) { /* typed: a tombstone */
				m->st.dropped++;
				heads_keep_p(b, a);
				FAST_SKIP(0);
				continue;
			}
			FAST_PUT(a);
			FAST_ADVANCE(0);
		} else if (drop && b->vh == 0) {
			m->st.dropped++;
			heads_keep_p(a, b);
			FAST_SKIP(1);
			if (cmp == 0) { /* and the older binding */
				m->st.replaced++;
				FAST_SKIP(0);
			}
		} else {
			FAST_PUT(b);
			FAST_ADVANCE(1);
			if (cmp == 0) { /* the newer input wins */
				m->st.replaced++;
				FAST_ADVANCE(0);
			}
		}
	}
	/* one input left: its records follow each other */
	size_t ri = live[0] ? 0 : 1;
	bin *r = &in[ri];
	const bin *last = live[ri] ? r : b;
	while (live[ri]) {
		if (drop && r->vh == 0) {
			m->st.dropped++;
			FAST_SKIP(ri);
			continue;
		}
		FAST_PUT(r);
		if ((st = bin_advance(&f, ri, &live[ri], typed, false)) !=
		    KVS_OK)
			goto out;
	}
#undef FAST_PUT
#undef FAST_SKIP
#undef FAST_ADVANCE
	m->st.input_records = fast_consumed(&f, live);
	m->st.output_records =
	    m->st.input_records - m->st.replaced - m->st.dropped;
	bout_sync(w, o, m->st.output_records);
	/* the last key: still in its input's buffer, which has not moved
	 * since (the input has no record left); with drop, already there */
	if (!drop)
		memcpy(w->prev_key, last->key, (size_t)o->prev_len);
out:
	free(f.old);
	free(f.first);
	for (size_t i = 0; i < 2; i++)
		m->cur[i]->ordinal = m->cur[i]->seg->records;
	return st;
}

/* The framing as a constant (typed: tombstones and value lengths). */
kvs_status merge_two_bytes_fast(merge *m)
{
	if (m->w->opt.framing == KVS_FRAMING_TYPED)
		return m->opt->drop_tombstones
		           ? merge_two_bytes_with(m, true, true)
		           : merge_two_bytes_with(m, true, false);
	return merge_two_bytes_with(m, false, false);
}
