/*
 * merge.c — the native merge of N segments into one (kvseg/merge.h).
 *
 * One cursor per input feeds a loser tree (a tournament whose inner nodes
 * keep the loser of each match, so replacing the winner costs one path of
 * log2 N compares); two inputs take a direct path without the tree. The
 * winner of each round is the smallest key, and among equal keys the
 * newest input, whose binding is written straight into the output through
 * the segment writer — so the output is byte for byte what the writer makes
 * of the merged records — and the older bindings of that key are consumed.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "kvseg/merge.h"
#include "cursor_internal.h"
#include "writer_internal.h"

#define PROGRESS_EVERY 65536 /* input records between progress calls */

typedef struct merge {
	kvs_cursor **cur;
	size_t n;
	size_t *tree; /* tree[0]: winner; tree[1 .. n): losers */
	const kvs_merge_options *opt;
	kvs_writer *w;
	kvs_merge_stats st;
	uint64_t total, next_progress;
	uint8_t *last; /* the key of the last round */
	uint64_t last_bits;
	kvs_error *err;
} merge;

/* A cursor is on a record (kvs_cursor_valid, without the call). */
static inline bool on_record(const kvs_cursor *c)
{
	return c->ordinal < c->seg->records;
}

/* Does input a's current record come before input b's? Exhausted inputs
 * come last; equal keys put the newer (higher) input first. */
static inline bool before(const merge *m, size_t a, size_t b)
{
	const kvs_cursor *ca = m->cur[a], *cb = m->cur[b];
	if (!on_record(ca))
		return false;
	if (!on_record(cb))
		return true;
	int cmp = seg_key_compare(ca->key, ca->key_bits, cb->key, cb->key_bits);
	return cmp < 0 || (cmp == 0 && a > b);
}

#define EMPTY SIZE_MAX

/* Input i's record changed: replay its path to the root. */
static void replay(merge *m, size_t i)
{
	size_t winner = i;
	for (size_t node = (m->n + i) / 2; node >= 1; node /= 2) {
		if (m->tree[node] == EMPTY) { /* only while building */
			m->tree[node] = winner;
			return;
		}
		if (before(m, m->tree[node], winner)) {
			size_t t = m->tree[node];
			m->tree[node] = winner;
			winner = t;
		}
	}
	m->tree[0] = winner;
}

static kvs_status input_failed(merge *m, size_t i, kvs_status st)
{
	return kvs_error_set(m->err, st,
	                     "input %zu: record %" PRIu64 ": %s", i,
	                     kvs_cursor_ordinal(m->cur[i]), kvs_strerror(st));
}

/* How the inputs are decoded: in line with their mode as a constant, when
 * every input has it, or through kvs_cursor_next. */
enum { IN_ANY, IN_BYTE, IN_BIT_DEFAULT };

/* Moves input i to its next record, counting and reporting progress. */
static inline __attribute__((always_inline)) kvs_status
advance_with(merge *m, size_t i, int in)
{
	kvs_cursor *c = m->cur[i];
	kvs_status st =
	    in == IN_BYTE  ? seg_cursor_next_with(c, KVS_PROFILE_BYTE, NULL)
	    : in == IN_BIT_DEFAULT
	        ? seg_cursor_next_with(c, KVS_PROFILE_BIT, seg_default_fields)
	        : kvs_cursor_next(c);
	if (st != KVS_OK)
		return input_failed(m, i, st);
	if (++m->st.input_records >= m->next_progress && m->opt->progress) {
		m->next_progress = m->st.input_records + PROGRESS_EVERY;
		if (m->opt->progress(m->opt->progress_ctx,
		                     m->st.input_records, m->total))
			return kvs_error_set(m->err, KVS_E_CANCELED,
			                     "merge canceled after %" PRIu64
			                     " of %" PRIu64 " input records",
			                     m->st.input_records, m->total);
	}
	return KVS_OK;
}

static kvs_status advance(merge *m, size_t i)
{
	return advance_with(m, i, IN_ANY);
}

/* Writes input i's current record (the newest binding of its key), unless
 * it is a tombstone and this is a strong delete. profile and fields are
 * the output's (see seg_writer_add_read). */
static inline __attribute__((always_inline)) kvs_status
emit_with(merge *m, size_t i, kvs_profile profile, const seg_field *fields)
{
	kvs_cursor *c = m->cur[i];
	kvs_kind kind = c->kind;
	if (kind == KVS_KIND_TOMBSTONE && m->opt->drop_tombstones) {
		m->st.dropped++;
		return KVS_OK;
	}
	const uint8_t *value = c->value; /* byte profile: in place */
	size_t len = (size_t)c->value_len;
	unsigned shift = 0;
	if (c->seg->profile == KVS_PROFILE_BIT && len) {
		/* in place too: the value ends the record, where the reader
		 * is, and the writer copies its bits without a buffer */
		uint64_t bit = kvs_br_position(&c->br) - 8 * (uint64_t)len;
		value = c->seg->stream + bit / 8;
		shift = (unsigned)(bit & 7);
	}
	kvs_status st =
	    seg_writer_add_read(m->w, c->key, c->key_bits, kind, value, shift,
	                        len, profile, fields, m->err);
	if (st == KVS_OK)
		m->st.output_records++;
	return st;
}

/* The output's mode as the writer's inline path wants it. */
static kvs_status emit(merge *m, size_t i)
{
	const kvs_writer *w = m->w;
	if (w->opt.profile == KVS_PROFILE_BYTE)
		return emit_with(m, i, KVS_PROFILE_BYTE, seg_default_fields);
	return emit_with(m, i, KVS_PROFILE_BIT, w->fields);
}

/* Two inputs: one compare per round, no tree. */
static inline __attribute__((always_inline)) kvs_status
merge_two_with(merge *m, int in, kvs_profile profile, const seg_field *fields)
{
	kvs_cursor *a = m->cur[0], *b = m->cur[1];
	kvs_status st = KVS_OK;
	while (st == KVS_OK && (on_record(a) || on_record(b))) {
		int cmp;
		if (!on_record(a))
			cmp = 1;
		else if (!on_record(b))
			cmp = -1;
		else
			cmp = seg_key_compare(a->key, a->key_bits, b->key,
			                      b->key_bits);
		if (cmp < 0) {
			if ((st = emit_with(m, 0, profile, fields)) == KVS_OK)
				st = advance_with(m, 0, in);
		} else if (cmp > 0) {
			if ((st = emit_with(m, 1, profile, fields)) == KVS_OK)
				st = advance_with(m, 1, in);
		} else { /* the newer input wins */
			m->st.replaced++;
			if ((st = emit_with(m, 1, profile, fields)) == KVS_OK &&
			    (st = advance_with(m, 1, in)) == KVS_OK)
				st = advance_with(m, 0, in);
		}
	}
	return st;
}

/*
 * Instantiated for the usual modes: inputs and output in the byte profile,
 * or all in the bit profile with the default codes. Flattened: GCC would
 * otherwise stop inlining the reader's and the writer's small helpers
 * into so large a loop, and pass their state through memory.
 */
__attribute__((flatten)) static kvs_status merge_two_byte(merge *m)
{
	return merge_two_with(m, IN_BYTE, KVS_PROFILE_BYTE, seg_default_fields);
}

__attribute__((flatten)) static kvs_status merge_two_bit(merge *m)
{
	return merge_two_with(m, IN_BIT_DEFAULT, KVS_PROFILE_BIT,
	                      seg_default_fields);
}

static kvs_status merge_two(merge *m)
{
	const kvs_writer *w = m->w;
	const kvs_segment *a = m->cur[0]->seg, *b = m->cur[1]->seg;
	bool out_byte = w->opt.profile == KVS_PROFILE_BYTE;
	if (out_byte && a->profile == KVS_PROFILE_BYTE &&
	    b->profile == KVS_PROFILE_BYTE)
		return merge_two_byte(m);
	if (!out_byte && w->default_codes && a->profile == KVS_PROFILE_BIT &&
	    a->default_codes && b->profile == KVS_PROFILE_BIT &&
	    b->default_codes)
		return merge_two_bit(m);
	if (out_byte)
		return merge_two_with(m, IN_ANY, KVS_PROFILE_BYTE,
		                      seg_default_fields);
	return merge_two_with(m, IN_ANY, KVS_PROFILE_BIT, w->fields);
}

static kvs_status merge_tree(merge *m)
{
	for (size_t i = 0; i < m->n; i++)
		m->tree[i] = EMPTY;
	for (size_t i = 0; i < m->n; i++)
		replay(m, i);
	kvs_status st = KVS_OK;
	while (st == KVS_OK && on_record(m->cur[m->tree[0]])) {
		size_t i = m->tree[0];
		kvs_cursor *c = m->cur[i];
		memcpy(m->last, c->key, (size_t)seg_key_bytes(c->key_bits));
		m->last_bits = c->key_bits;
		if ((st = emit(m, i)) != KVS_OK || (st = advance(m, i)) != KVS_OK)
			break;
		replay(m, i);
		/* older bindings of the same key come next in the tree */
		for (;;) {
			size_t j = m->tree[0];
			kvs_cursor *o = m->cur[j];
			if (!on_record(o) ||
			    seg_key_compare(o->key, o->key_bits, m->last,
			                    m->last_bits) != 0)
				break;
			m->st.replaced++;
			if ((st = advance(m, j)) != KVS_OK)
				break;
			replay(m, j);
		}
	}
	return st;
}

kvs_status kvs_merge(kvs_segment *const *inputs, size_t n,
                     const char *out_path, const kvs_merge_options *opt,
                     kvs_merge_stats *stats, kvs_error *err)
{
	static const kvs_merge_options defaults;
	if (!opt)
		opt = &defaults;
	if (stats)
		memset(stats, 0, sizeof *stats);
	if (!out_path)
		return kvs_error_set(err, KVS_E_INVAL, "no output path");
	if (n == 0 || !inputs)
		return kvs_error_set(err, KVS_E_INVAL, "%s: no input to merge",
		                     out_path);
	if (opt->drop_tombstones && !opt->includes_oldest)
		return kvs_error_set(
		    err, KVS_E_INVAL,
		    "%s: a strong delete (dropping tombstones) needs the oldest "
		    "live segment among the inputs",
		    out_path);
	merge m;
	memset(&m, 0, sizeof m);
	m.n = n;
	m.opt = opt;
	m.err = err;
	uint64_t max_key_bits = 0;
	for (size_t i = 0; i < n; i++) {
		const kvs_segment *s = inputs[i];
		if (!s)
			return kvs_error_set(err, KVS_E_INVAL,
			                     "%s: input %zu is NULL", out_path, i);
		if (opt->output.framing == KVS_FRAMING_RAW && s->tombstones &&
		    !opt->drop_tombstones)
			return kvs_error_set(
			    err, KVS_E_INVAL,
			    "%s: raw framing cannot hold the %" PRIu64
			    " tombstones of input %zu; keep typed framing or "
			    "drop tombstones (a strong delete)",
			    out_path, s->tombstones, i);
		m.total += s->records;
		if (s->max_key_bits > max_key_bits)
			max_key_bits = s->max_key_bits;
	}
	m.next_progress = PROGRESS_EVERY;

	kvs_status st = KVS_E_NOMEM;
	m.cur = calloc(n, sizeof *m.cur);
	m.tree = calloc(n, sizeof *m.tree);
	m.last = malloc((size_t)seg_key_bytes(max_key_bits) + 1);
	if (!m.cur || !m.tree || !m.last) {
		kvs_error_set(err, st, "%s: out of memory", out_path);
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		if ((st = kvs_cursor_open(&m.cur[i], inputs[i])) != KVS_OK) {
			kvs_error_set(err, st, "%s: out of memory", out_path);
			goto out;
		}
		if ((st = kvs_cursor_first(m.cur[i])) != KVS_OK) {
			input_failed(&m, i, st);
			goto out;
		}
	}
	if ((st = kvs_writer_open(&m.w, out_path, &opt->output, err)) != KVS_OK)
		goto out;
	if (opt->progress && opt->progress(opt->progress_ctx, 0, m.total)) {
		st = kvs_error_set(err, KVS_E_CANCELED, "merge canceled");
		goto out;
	}
	st = n == 2 ? merge_two(&m) : merge_tree(&m);
	if (st == KVS_OK && opt->progress &&
	    opt->progress(opt->progress_ctx, m.st.input_records, m.total))
		st = kvs_error_set(err, KVS_E_CANCELED, "merge canceled");
	if (st == KVS_OK)
		st = kvs_writer_finish(m.w, err);
out:
	kvs_writer_free(m.w); /* removes the temporary file unless finished */
	for (size_t i = 0; m.cur && i < n; i++)
		kvs_cursor_close(m.cur[i]);
	free(m.cur);
	free(m.tree);
	free(m.last);
	if (stats)
		*stats = m.st;
	return st;
}
