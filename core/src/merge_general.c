/*
 * merge_general.c — the general loops: every input through its cursor,
 * every record through the writer (seg_writer_add_read), so any mix of
 * modes merges. Instantiated with the decoder and the output's mode as
 * constants for the usual modes (kvsi_merge_two_byte, kvsi_merge_tree_bit,
 * ...), and once for any (kvsi_merge_tree_any: the loop the tests hold every
 * other one to).
 */
#include "merge_tree.h"

/*
 * The loser tree keeps LCPs (an LCP-aware tournament tree): lcp[x] is the
 * common prefix of input x's key with a key K at or below it, K being the
 * key of the match x last lost (the winner's), or of the last round for
 * the winner and the inputs it beat on its way up. So along the path a
 * round replays, every lcp is with the last round's key, and while the
 * tree is built with the empty key (all 0). Of two keys above K, the one
 * sharing more of K is the smaller; only equal LCPs compare bits, from
 * there on. The round's winner comes out with its LCP with the last
 * round's key, which the writer takes instead of comparing the two keys.
 */

/* The match of inputs a and b at a node: does a's record come first?
 * Exhausted inputs come last; equal keys put the newer (higher) input
 * first. The loser's lcp becomes its LCP with the winner (its own when
 * they differ: the winner shares more of K). */
static inline bool match(merge *m, size_t a, size_t b)
{
	const kvs_cursor *ca = m->cur[a], *cb = m->cur[b];
	if (!on_record(ca))
		return false;
	if (!on_record(cb))
		return true;
	uint64_t la = m->lcp[a], lb = m->lcp[b];
	if (la != lb)
		return la > lb;
	/* both keys share their first la bits */
	int cmp;
	uint64_t l = seg_key_lcp_from(ca->key, ca->key_bits, cb->key,
	                              cb->key_bits, la, &cmp);
	bool first = cmp < 0 || (cmp == 0 && a > b);
	m->lcp[first ? b : a] = l;
	return first;
}

static SPECIALIZED bool cursor_match(void *m, const bool *live, size_t a,
                                     size_t b)
{
	(void)live;
	return match(m, a, b);
}

/* Input i's record changed: replay its path to the root. */
static void replay(merge *m, size_t i)
{
	tree_replay(m, m, NULL, i, true, cursor_match);
}

/* How the inputs are decoded: in line with their mode as a constant, when
 * every input has it, or through kvs_cursor_next. */
enum { IN_ANY, IN_BYTE, IN_BIT_DEFAULT };
/* Moves input i to its next record, counting and reporting progress. */
static SPECIALIZED kvs_status advance_with(merge *m, size_t i, int in)
{
	kvs_cursor *c = m->cur[i];
	kvs_status st =
	    in == IN_BYTE  ? seg_cursor_next_with(c, KVS_PROFILE_BYTE, NULL)
	    : in == IN_BIT_DEFAULT
	        ? seg_cursor_next_with(c, KVS_PROFILE_BIT, seg_default_fields)
	        : kvs_cursor_next(c);
	if (st != KVS_OK)
		return kvsi_input_failed(m, i, st);
	if (++m->st.input_records >= m->next_progress && m->opt->progress)
		return report_progress(m, m->st.input_records);
	return KVS_OK;
}

/* Writes input i's current record (the newest binding of its key), unless
 * it is a tombstone and this is a strong delete. profile and fields are
 * the output's (see seg_writer_add_read); known_lcp the record's LCP with
 * the last output key, if known (seg_writer_add_known); bit_keep: the
 * inputs are bit-profile and this is no strong delete. */
static SPECIALIZED kvs_status emit_known(merge *m, size_t i,
                                         kvs_profile profile,
                                         const seg_field *fields,
                                         uint64_t known_lcp, bool bit_keep)
{
	kvs_cursor *c = m->cur[i];
	kvs_kind kind = c->kind;
	if (!bit_keep && kind == KVS_KIND_TOMBSTONE &&
	    m->opt->drop_tombstones) {
		m->st.dropped++;
		return KVS_OK;
	}
	const uint8_t *value = c->value; /* byte profile: in place */
	size_t len = (size_t)c->value_len;
	unsigned shift = 0;
	if ((bit_keep || c->seg->profile == KVS_PROFILE_BIT) && len) {
		/* in place too: the value ends the record, where the reader
		 * is, and the writer copies its bits without a buffer */
		uint64_t bit = kvs_br_position(&c->br) - 8 * (uint64_t)len;
		value = c->seg->stream + bit / 8;
		shift = (unsigned)(bit & 7);
	}
	kvs_status st =
	    seg_writer_add_read(m->w, c->key, c->key_bits, kind, value, shift,
	                        len, profile, fields, known_lcp, m->err);
	if (st == KVS_OK)
		m->st.output_records++;
	return st;
}

static SPECIALIZED kvs_status emit_with(merge *m, size_t i, kvs_profile profile,
                                        const seg_field *fields)
{
	return emit_known(m, i, profile, fields, SEG_LCP_UNKNOWN, false);
}

/*
 * Input c has just moved past a key equal to the writer's previous key P
 * (it wrote P, or its key was P's): the LCP of its new key K with P, or
 * SEG_LCP_UNKNOWN. K's LCP field is that LCP when K is no restart: the
 * decoder keeps P's bits before it. A corrupt input's field may lie, so
 * it is trusted only when K follows P with it: K has a 1 there, where P
 * ends or has a 0. (When c is at its end, the value is never used.)
 */
static SPECIALIZED uint64_t field_lcp(const kvs_writer *w, const kvs_cursor *c)
{
	/* lcp is at most P's length (the decoder checks it), so both bytes
	 * lie in their buffers, which have 8 bytes past a key to spare */
	uint64_t lcp = c->prev_lcp;
	unsigned sh = 7 - (unsigned)(lcp & 7);
	unsigned kb = (unsigned)(c->key[lcp / 8] >> sh) & 1;
	unsigned pb = (unsigned)(w->prev_key[lcp / 8] >> sh) & 1;
	bool ok = (c->in_block != 0) & (lcp < c->key_bits) & kb &
	          ((lcp == w->prev_bits) | !pb);
	return ok ? lcp : SEG_LCP_UNKNOWN;
}

/* What the loop holds for an input whose key follows P in it: its LCP
 * with P is found from its field when it is written (field_lcp), if ever;
 * the winner changes most rounds in the usual merge. */
#define LCP_FIELD (UINT64_MAX - 1)

static SPECIALIZED uint64_t lcp_of(const kvs_writer *w, const kvs_cursor *c,
                                   uint64_t l)
{
	return l == LCP_FIELD ? field_lcp(w, c) : l;
}

/*
 * advance_with for the two-input loop. The writer rejects a key that
 * is not above the last it wrote, which catches an input out of order as
 * long as every record is written or equals one that is. A strong delete
 * writes no tombstone, so there the input's next key is compared with the
 * one it moves past (in m->last, which only the tree uses otherwise).
 */
static SPECIALIZED kvs_status advance_two(merge *m, size_t i, int in)
{
	if (!m->opt->drop_tombstones)
		return advance_with(m, i, in);
	kvs_cursor *c = m->cur[i];
	uint64_t bits = c->key_bits;
	memcpy(m->last, c->key, (size_t)seg_key_bytes(bits));
	kvs_status st = advance_with(m, i, in);
	if (st == KVS_OK && on_record(c) &&
	    seg_key_compare(c->key, c->key_bits, m->last, bits) <= 0)
		return kvs_error_set(m->err, KVS_E_CORRUPT,
		                     "input %zu: record %" PRIu64
		                     ": its key is not above the one before it",
		                     i, kvs_cursor_ordinal(c));
	return st;
}

/* Writes input i's record, whose LCP with the last output key is lcp
 * (or SEG_LCP_UNKNOWN), and moves the input on. */
static SPECIALIZED kvs_status take(merge *m, size_t i, int in,
                                   kvs_profile profile, const seg_field *fields,
                                   uint64_t lcp, bool track)
{
	kvs_status st = emit_known(m, i, profile, fields, lcp, track);
	return st == KVS_OK ? advance_two(m, i, in) : st;
}

/*
 * Two inputs: one compare per round, no tree. With track (bit-profile
 * inputs, no tombstone dropped), la and lb hold the LCP of each input's
 * key with the last output key P, when known, and the writer is handed
 * it instead of comparing the keys again: the loser's from the round's
 * compare (it is above P, the winner's key), the winner's next key's from
 * field_lcp (LCP_FIELD until then).
 */
static SPECIALIZED kvs_status merge_two_track(merge *m, int in,
                                              kvs_profile profile,
                                              const seg_field *fields,
                                              bool track)
{
	kvs_cursor *a = m->cur[0], *b = m->cur[1];
	const kvs_writer *w = m->w;
	kvs_status st = KVS_OK;
	uint64_t la = SEG_LCP_UNKNOWN, lb = SEG_LCP_UNKNOWN;
	/* on_record without the loads of the segments */
	const uint64_t ra = a->seg->records, rb = b->seg->records;
	while (st == KVS_OK && (a->ordinal < ra || b->ordinal < rb)) {
		int cmp;
		uint64_t cl = SEG_LCP_UNKNOWN;
		if (a->ordinal >= ra)
			cmp = 1;
		else if (b->ordinal >= rb)
			cmp = -1;
		else if (track)
			cl = seg_key_lcp(a->key, a->key_bits, b->key,
			                 b->key_bits, &cmp);
		else
			cmp = seg_key_compare(a->key, a->key_bits, b->key,
			                      b->key_bits);
		if (cmp < 0) {
			st = take(m, 0, in, profile, fields,
			          track ? lcp_of(w, a, la) : la, track);
			if (st == KVS_OK && track) {
				la = LCP_FIELD;
				lb = cl;
			}
		} else if (cmp > 0) {
			st = take(m, 1, in, profile, fields,
			          track ? lcp_of(w, b, lb) : lb, track);
			if (st == KVS_OK && track) {
				lb = LCP_FIELD;
				la = cl;
			}
		} else { /* the newer input wins */
			m->st.replaced++;
			/* both inputs were on P's key */
			st = take(m, 1, in, profile, fields,
			          track ? lcp_of(w, b, lb) : lb, track);
			if (st == KVS_OK &&
			    (st = advance_two(m, 0, in)) == KVS_OK &&
			    track)
				la = lb = LCP_FIELD;
		}
	}
	return st;
}

static SPECIALIZED kvs_status merge_two_with(merge *m, int in,
                                             kvs_profile profile,
                                             const seg_field *fields)
{
	return merge_two_track(m, in, profile, fields, false);
}

/*
 * Instantiated for the usual modes: inputs and output in the byte profile,
 * or all in the bit profile with the default codes. Flattened: GCC would
 * otherwise stop inlining the reader's and the writer's small helpers
 * into so large a loop, and pass their state through memory.
 */
FLATTEN kvs_status kvsi_merge_two_byte(merge *m)
{
	return merge_two_with(m, IN_BYTE, KVS_PROFILE_BYTE, seg_default_fields);
}

FLATTEN kvs_status kvsi_merge_two_bit(merge *m)
{
	/* a dropped tombstone is no output: the LCPs are not with it */
	if (m->opt->drop_tombstones)
		return merge_two_with(m, IN_BIT_DEFAULT, KVS_PROFILE_BIT,
		                      seg_default_fields);
	return merge_two_track(m, IN_BIT_DEFAULT, KVS_PROFILE_BIT,
	                       seg_default_fields, true);
}
/*
 * Moves input i, whose record was the last round's key, to its next record
 * and replays its path. Its LCP with that key is found by comparing the
 * two, from the bits its decoder kept of that key (prev_lcp) on (the next
 * record is its successor in the input, so it must be larger: a corrupt
 * input that breaks the order fails here).
 */
static SPECIALIZED kvs_status next_above(merge *m, size_t i, int in)
{
	kvs_status st = advance_with(m, i, in);
	if (st != KVS_OK)
		return st;
	const kvs_cursor *c = m->cur[i];
	if (on_record(c)) {
		int cmp;
		m->lcp[i] = seg_key_lcp_from(c->key, c->key_bits, m->last,
		                             m->last_bits, c->prev_lcp, &cmp);
		if (cmp <= 0)
			return kvs_error_set(
			    m->err, KVS_E_CORRUPT,
			    "input %zu: record %" PRIu64
			    ": its key is not above the one before it",
			    i, kvs_cursor_ordinal(c));
	}
	replay(m, i);
	return KVS_OK;
}

/*
 * N inputs through the loser tree. in, profile and fields as for
 * merge_two_with: the inputs' decoder and the output's mode, constants in
 * the usual modes.
 */
static SPECIALIZED kvs_status merge_tree_with(merge *m, int in,
                                              kvs_profile profile,
                                              const seg_field *fields)
{
	for (size_t i = 0; i < m->n; i++) {
		m->tree[i] = EMPTY;
		m->lcp[i] = 0;
	}
	for (size_t i = 0; i < m->n; i++)
		replay(m, i);
	kvs_status st = KVS_OK;
	bool written = false; /* the last round's record (the writer's LCPs
	                       * are with the last record it wrote) */
	while (st == KVS_OK && on_record(m->cur[m->tree[0]])) {
		size_t i = m->tree[0];
		kvs_cursor *c = m->cur[i];
		uint64_t known = written ? m->lcp[i] : SEG_LCP_UNKNOWN;
		uint64_t dropped = m->st.dropped;
		memcpy(m->last, c->key, (size_t)seg_key_bytes(c->key_bits));
		m->last_bits = c->key_bits;
		if ((st = emit_known(m, i, profile, fields, known, false)) !=
		        KVS_OK ||
		    (st = next_above(m, i, in)) != KVS_OK)
			break;
		written = m->st.dropped == dropped;
		/* older bindings of the same key come next in the tree: their
		 * LCP with it is their length, and its */
		for (;;) {
			size_t j = m->tree[0];
			kvs_cursor *o = m->cur[j];
			if (!on_record(o) || m->lcp[j] != o->key_bits ||
			    o->key_bits != m->last_bits)
				break;
			m->st.replaced++;
			if ((st = next_above(m, j, in)) != KVS_OK)
				break;
		}
	}
	return st;
}

/* Instantiated for the usual modes, as kvsi_merge_two_byte and
 * kvsi_merge_two_bit. */
FLATTEN kvs_status kvsi_merge_tree_byte(merge *m)
{
	return merge_tree_with(m, IN_BYTE, KVS_PROFILE_BYTE,
	                       seg_default_fields);
}

/* Also built for x86-64-v3 (kvseg/cpu.h), whose LZCNT and BMI2 shifts the
 * cursors' EG decoders use, which made it measurably faster;
 * kvsi_merge_two_bit gained nothing measurable and is built once. */
KVS_MULTIVERSION FLATTEN kvs_status kvsi_merge_tree_bit(merge *m)
{
	return merge_tree_with(m, IN_BIT_DEFAULT, KVS_PROFILE_BIT,
	                       seg_default_fields);
}

/* Any mix of modes: the inputs through kvs_cursor_next, the output in its
 * own mode. */
kvs_status kvsi_merge_two_any(merge *m)
{
	if (m->w->opt.profile == KVS_PROFILE_BYTE)
		return merge_two_with(m, IN_ANY, KVS_PROFILE_BYTE,
		                      seg_default_fields);
	return merge_two_with(m, IN_ANY, KVS_PROFILE_BIT, m->w->fields);
}

kvs_status kvsi_merge_tree_any(merge *m)
{
	if (m->w->opt.profile == KVS_PROFILE_BYTE)
		return merge_tree_with(m, IN_ANY, KVS_PROFILE_BYTE,
		                       seg_default_fields);
	return merge_tree_with(m, IN_ANY, KVS_PROFILE_BIT, m->w->fields);
}

kvs_status kvsi_emit_first_byte(merge *m, size_t i)
{
	return emit_with(m, i, KVS_PROFILE_BYTE, seg_default_fields);
}

kvs_status kvsi_emit_first_bit(merge *m, size_t i)
{
	return emit_with(m, i, KVS_PROFILE_BIT, seg_default_fields);
}
