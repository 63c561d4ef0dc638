/*
 * merge.c — the native merge of N segments into one (kvseg/merge.h): the
 * API, its checks, and the choice of the loop that merges.
 *
 * One cursor per input feeds a loser tree (a tournament whose inner nodes
 * keep the loser of each match, so replacing the winner costs one path of
 * log2 N matches, most of them decided by LCPs: see merge_tree.h); two
 * inputs take a direct path without the tree. The winner of each round is
 * the smallest key, and among equal keys the newest input, whose binding
 * is written into the output as the writer would write it — so the output
 * is byte for byte what the writer makes of the merged records — and the
 * older bindings of that key are consumed. The general loops
 * (merge_general.c) do it through the cursors and the writer; the byte and
 * bit engines, for the usual modes, in line (merge_internal.h lists the
 * files).
 */
#include <sys/stat.h>

#include "merge_internal.h"

/*
 * How messages name input i: "input I (PATH)", or "input I" for a segment
 * in memory; and when its file is now shorter than its mapping, the
 * likely cause of bad data in an input whose CRC held when it was opened:
 * the file was cut short under the mapping (the pages past the new end
 * read as zeros, or fault).
 */
static void input_name(const kvs_segment *s, size_t i, char *out, size_t cap)
{
	const char *path = kvs_segment_path(s);
	struct stat sb;
	if (!path)
		snprintf(out, cap, "input %zu", i);
	else if (stat(path, &sb) == 0 && (uint64_t)sb.st_size < s->len)
		snprintf(out, cap,
		         "input %zu (%s, cut short: now %lld bytes, %zu when "
		         "opened)",
		         i, path, (long long)sb.st_size, s->len);
	else
		snprintf(out, cap, "input %zu (%s)", i, path);
}

kvs_status kvsi_input_failed(merge *m, size_t i, kvs_status st)
{
	char name[PATH_MAX + 96];
	input_name(m->cur[i]->seg, i, name, sizeof name);
	return kvs_error_set(m->err, st, "%s: record %" PRIu64 ": %s", name,
	                     kvs_cursor_ordinal(m->cur[i]), kvs_strerror(st));
}

/* Can kvsi_merge_two_bytes_fast (two inputs) or kvsi_merge_tree_bytes_fast take
 * this merge? */
static bool bytes_fast_fits(const merge *m)
{
	const kvs_writer *w = m->w;
	for (size_t i = 0; i < m->n; i++) {
		const kvs_cursor *c = m->cur[i];
		if (c->seg->profile != KVS_PROFILE_BYTE ||
		    c->seg->framing != w->opt.framing || !on_record(c))
			return false;
	}
	if (w->opt.profile != KVS_PROFILE_BYTE || w->records != 0)
		return false;
	return !m->opt->drop_tombstones || first_kept(m);
}

/* Can kvsi_merge_two_bits_fast (two inputs) or kvsi_merge_tree_bits_fast take
 * this merge? */
static bool bits_fast_fits(const merge *m)
{
	const kvs_writer *w = m->w;
	for (size_t i = 0; i < m->n; i++) {
		const kvs_cursor *c = m->cur[i];
		if (c->seg->profile != KVS_PROFILE_BIT ||
		    !c->seg->default_codes ||
		    c->seg->framing != w->opt.framing || !on_record(c))
			return false;
	}
	if (w->opt.profile != KVS_PROFILE_BIT || !w->default_codes ||
	    w->records != 0)
		return false;
	return !m->opt->drop_tombstones || first_kept(m);
}

/*
 * The loops, by what the inputs and the output have in common (engine),
 * two inputs or more (ways) and whether tombstones are dropped in line
 * (drop: a strong delete into typed framing; raw framing holds none).
 * Each in-line engine is a second implementation of its general loop,
 * there for speed (bench/README.md has the measurements);
 * tests/test_merge_dispatch.c holds each cell to kvsi_merge_tree_any.
 */
enum engine {
	ENGINE_ANY,          /* any mix of modes, through kvs_cursor_next */
	ENGINE_BYTE,         /* byte-profile inputs and output */
	ENGINE_BIT,          /* bit-profile ones, all with the default codes */
	ENGINE_BYTES_INLINE, /* ENGINE_BYTE with one framing, from the start */
	ENGINE_BITS_INLINE,  /* ENGINE_BIT with one framing, from the start */
	ENGINES
};

typedef struct loop_entry {
	kvs_status (*run)(merge *m);
	merge_loop id;
} loop_entry;

#define LOOP(f, id) {f, id}
static const loop_entry select_loop[ENGINES][2][2] = {
    /* [engine][n > 2][drop] */
    [ENGINE_ANY] = {{LOOP(kvsi_merge_two_any, MERGE_LOOP_TWO_ANY),
                     LOOP(kvsi_merge_two_any, MERGE_LOOP_TWO_ANY)},
                    {LOOP(kvsi_merge_tree_any, MERGE_LOOP_TREE_ANY),
                     LOOP(kvsi_merge_tree_any, MERGE_LOOP_TREE_ANY)}},
    [ENGINE_BYTE] = {{LOOP(kvsi_merge_two_byte, MERGE_LOOP_TWO_BYTE),
                      LOOP(kvsi_merge_two_byte, MERGE_LOOP_TWO_BYTE)},
                     {LOOP(kvsi_merge_tree_byte, MERGE_LOOP_TREE_BYTE),
                      LOOP(kvsi_merge_tree_byte, MERGE_LOOP_TREE_BYTE)}},
    [ENGINE_BIT] = {{LOOP(kvsi_merge_two_bit, MERGE_LOOP_TWO_BIT),
                     LOOP(kvsi_merge_two_bit, MERGE_LOOP_TWO_BIT)},
                    {LOOP(kvsi_merge_tree_bit, MERGE_LOOP_TREE_BIT),
                     LOOP(kvsi_merge_tree_bit, MERGE_LOOP_TREE_BIT)}},
    [ENGINE_BYTES_INLINE] =
        {{LOOP(kvsi_merge_two_bytes_fast, MERGE_LOOP_TWO_BYTES_INLINE),
          LOOP(kvsi_merge_two_bytes_fast, MERGE_LOOP_TWO_BYTES_INLINE)},
         {LOOP(kvsi_merge_tree_bytes_fast, MERGE_LOOP_TREE_BYTES_INLINE),
          LOOP(kvsi_merge_tree_bytes_fast, MERGE_LOOP_TREE_BYTES_INLINE)}},
    [ENGINE_BITS_INLINE] =
        {{LOOP(kvsi_merge_two_bits_fast, MERGE_LOOP_TWO_BITS_INLINE),
          LOOP(kvsi_merge_two_bits_drop, MERGE_LOOP_TWO_BITS_DROP)},
         {LOOP(kvsi_merge_tree_bits_fast, MERGE_LOOP_TREE_BITS_INLINE),
          LOOP(kvsi_merge_tree_bits_drop, MERGE_LOOP_TREE_BITS_DROP)}},
};
#undef LOOP

static const char *const loop_names[MERGE_LOOPS] = {
	[MERGE_LOOP_TREE_ANY] = "tree-any",
	[MERGE_LOOP_TWO_ANY] = "two-any",
	[MERGE_LOOP_TWO_BYTE] = "two-byte",
	[MERGE_LOOP_TREE_BYTE] = "tree-byte",
	[MERGE_LOOP_TWO_BIT] = "two-bit",
	[MERGE_LOOP_TREE_BIT] = "tree-bit",
	[MERGE_LOOP_TWO_BYTES_INLINE] = "two-bytes-inline",
	[MERGE_LOOP_TREE_BYTES_INLINE] = "tree-bytes-inline",
	[MERGE_LOOP_TWO_BITS_INLINE] = "two-bits-inline",
	[MERGE_LOOP_TWO_BITS_DROP] = "two-bits-drop",
	[MERGE_LOOP_TREE_BITS_INLINE] = "tree-bits-inline",
	[MERGE_LOOP_TREE_BITS_DROP] = "tree-bits-drop",
};

const char *kvsi_merge_loop_name(merge_loop loop)
{
	return (unsigned)loop < MERGE_LOOPS ? loop_names[loop] : "none";
}

static enum engine engine_of(const merge *m)
{
	const kvs_writer *w = m->w;
	bool out_byte = w->opt.profile == KVS_PROFILE_BYTE;
	bool all_byte = true, all_bit = true;
	for (size_t i = 0; i < m->n; i++) {
		const kvs_segment *s = m->cur[i]->seg;
		all_byte &= s->profile == KVS_PROFILE_BYTE;
		all_bit &= s->profile == KVS_PROFILE_BIT && s->default_codes;
	}
	if (out_byte && all_byte)
		return bytes_fast_fits(m) ? ENGINE_BYTES_INLINE : ENGINE_BYTE;
	if (!out_byte && w->default_codes && all_bit)
		return bits_fast_fits(m) ? ENGINE_BITS_INLINE : ENGINE_BIT;
	return ENGINE_ANY;
}

/* The loop for this merge; hooks->force_general (tests) takes the
 * general one whatever the modes. */
static const loop_entry *choose_loop(const merge *m, const merge_hooks *hooks)
{
	static const loop_entry general = {kvsi_merge_tree_any,
	                                   MERGE_LOOP_TREE_ANY};
	if (hooks && hooks->force_general)
		return &general;
	bool drop = m->opt->drop_tombstones &&
	            m->w->opt.framing == KVS_FRAMING_TYPED;
	return &select_loop[engine_of(m)][m->n != 2][drop];
}

kvs_status kvs_merge(kvs_segment *const *inputs, size_t n,
                     const char *out_path, const kvs_merge_options *opt,
                     kvs_merge_stats *stats, kvs_error *err)
{
	return kvsi_merge_hooked(inputs, n, out_path, opt, stats, err, NULL);
}

kvs_status kvsi_merge_hooked(kvs_segment *const *inputs, size_t n,
                             const char *out_path, const kvs_merge_options *opt,
                             kvs_merge_stats *stats, kvs_error *err,
                             merge_hooks *hooks)
{
	if (hooks)
		hooks->loop = MERGE_LOOPS;
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
		/* A damaged input must fail here: the output gets a CRC of
		 * its own, which would certify whatever the merge read. */
		kvs_error cerr;
		if (kvs_segment_check_crc(s, &cerr) != KVS_OK) {
			char name[PATH_MAX + 96];
			input_name(s, i, name, sizeof name);
			return kvs_error_set(err, KVS_E_CORRUPT,
			                     "%s: %s: the input is damaged, "
			                     "nothing was merged",
			                     name, cerr.message);
		}
		m.total += s->records;
		if (s->max_key_bits > max_key_bits)
			max_key_bits = s->max_key_bits;
	}
	m.next_progress = PROGRESS_EVERY;

	kvs_status st = KVS_E_NOMEM;
	m.cur = calloc(n, sizeof *m.cur);
	m.tree = calloc(n, sizeof *m.tree);
	m.lcp = calloc(n, sizeof *m.lcp);
	m.last = malloc((size_t)seg_key_bytes(max_key_bits) + 1);
	if (!m.cur || !m.tree || !m.lcp || !m.last) {
		kvs_error_set(err, st, "%s: out of memory", out_path);
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		if ((st = kvs_cursor_open(&m.cur[i], inputs[i])) != KVS_OK) {
			kvs_error_set(err, st, "%s: out of memory", out_path);
			goto out;
		}
		if ((st = kvs_cursor_first(m.cur[i])) != KVS_OK) {
			kvsi_input_failed(&m, i, st);
			goto out;
		}
	}
	/* the output is about as large as the inputs together */
	kvs_writer_options wopt = opt->output;
	for (size_t i = 0; opt->output.size_hint == 0 && i < n; i++)
		wopt.size_hint += inputs[i]->len;
	if (opt->output.size_hint == 0)
		m.hint = wopt.size_hint;
	if ((st = kvs_writer_open(&m.w, out_path, &wopt, err)) != KVS_OK)
		goto out;
	if (opt->progress && opt->progress(opt->progress_ctx, 0, m.total)) {
		st = kvs_error_set(err, KVS_E_CANCELED, "merge canceled");
		goto out;
	}
	const loop_entry *loop = choose_loop(&m, hooks);
	if (hooks)
		hooks->loop = loop->id;
	st = loop->run(&m);
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
	free(m.lcp);
	free(m.last);
	if (stats)
		*stats = m.st;
	return st;
}
