/*
 * merge.c — the native merge of N segments into one (kvseg/merge.h).
 *
 * One cursor per input feeds a loser tree (a tournament whose inner nodes
 * keep the loser of each match, so replacing the winner costs one path of
 * log2 N matches, most of them decided by LCPs: see match); two inputs
 * take a direct path without the tree. The winner of each round is the
 * smallest key, and among equal keys the newest input, whose binding is
 * written straight into the output through the segment writer — so the
 * output is byte for byte what the writer makes of the merged records —
 * and the older bindings of that key are consumed.
 */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kvseg/cpu.h"
#include "kvseg/merge.h"
#include "cursor_internal.h"
#include "writer_internal.h"

/*
 * GCC's SLP vectorizer pairs adjacent 8-byte fields of the loop's state
 * into 16-byte loads, which the CPU cannot forward from the two 8-byte
 * stores that wrote them, and waits: the loop spent a fifth of its time
 * on two such loads (perf, bench_merge typed-bit). Its loop vectorizer
 * only adds checks to the copies of a few words (2% more instructions).
 */
#if defined(__GNUC__) && !defined(__clang__)
#define NO_SLP                                                               \
	__attribute__((optimize("no-tree-slp-vectorize",                     \
	                        "no-tree-loop-vectorize")))
#else
#define NO_SLP
#endif

/*
 * The merge loops are specialized for each mode by inlining the readers and
 * the writer into them (SPECIALIZED functions, FLATTEN loops): several of
 * them are 60-100 KB of code, and merge.c takes half a minute to compile at
 * -O3 and two and a half minutes under AddressSanitizer. Builds with a
 * sanitizer test the code, not its speed: there both attributes are left
 * out, which keeps the same source and the same checks and compiles merge.c
 * in seconds. GCC says that AddressSanitizer or ThreadSanitizer is on
 * with __SANITIZE_*__, clang with __has_feature.
 */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define KVS_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define KVS_SANITIZED 1
#endif
#endif
#ifdef KVS_SANITIZED
#define SPECIALIZED inline
#define FLATTEN
#else
#define SPECIALIZED inline __attribute__((always_inline))
#define FLATTEN     __attribute__((flatten))
#endif

#define PROGRESS_EVERY 65536 /* input records between progress calls */

typedef struct merge {
	kvs_cursor **cur;
	size_t n;
	size_t *tree; /* tree[0]: winner; tree[1 .. n): losers */
	const kvs_merge_options *opt;
	kvs_writer *w;
	kvs_merge_stats st;
	uint64_t total, next_progress;
	uint64_t hint; /* the output's size hint kvs_merge gave, else 0 */
	uint8_t *last; /* the key of the last round */
	uint64_t last_bits;
	uint64_t *lcp; /* the tree's: per input, see match */
	kvs_error *err;
} merge;

/* A cursor is on a record (kvs_cursor_valid, without the call). */
static inline bool on_record(const kvs_cursor *c)
{
	return c->ordinal < c->seg->records;
}

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
		if (match(m, m->tree[node], winner)) {
			size_t t = m->tree[node];
			m->tree[node] = winner;
			winner = t;
		}
	}
	m->tree[0] = winner;
}

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

static kvs_status input_failed(merge *m, size_t i, kvs_status st)
{
	char name[PATH_MAX + 96];
	input_name(m->cur[i]->seg, i, name, sizeof name);
	return kvs_error_set(m->err, st, "%s: record %" PRIu64 ": %s", name,
	                     kvs_cursor_ordinal(m->cur[i]), kvs_strerror(st));
}

/* How the inputs are decoded: in line with their mode as a constant, when
 * every input has it, or through kvs_cursor_next. */
enum { IN_ANY, IN_BYTE, IN_BIT_DEFAULT };

/*
 * Before a flush of the fast loops, `consumed` input records done: when
 * kvs_merge gave the output's size hint (the inputs' total size), the
 * hint becomes the output's size projected from the share of the input
 * records so far that went out, 1/16 less where some did not. The
 * writer's reservation of space (reserve_ahead) then ends short of the
 * output's end for overlapping inputs too, which write much less than
 * the inputs' total: on ext4, releasing reserved blocks past the end
 * took 0.15-0.3 ms per merge, while each 64 KB written unreserved took
 * about 5 us more, hence a projection on the low side.
 */
static void project_hint(merge *m, uint64_t consumed)
{
	uint64_t out = consumed - m->st.replaced - m->st.dropped;
	if (m->hint == 0 || consumed == 0 || out >= consumed)
		return;
	/* an estimate: a double's 53 bits are enough */
	double share = (double)out / (double)consumed;
	uint64_t p = (uint64_t)((double)m->hint * share);
	m->w->opt.size_hint = p - p / 16;
}

/* Calls the progress callback with `consumed` input records done, and
 * sets when it is next due; a cancel by the callback is an error. */
static __attribute__((noinline)) kvs_status report_progress(merge *m,
                                                           uint64_t consumed)
{
	m->next_progress = consumed + PROGRESS_EVERY;
	if (m->opt->progress(m->opt->progress_ctx, consumed, m->total))
		return kvs_error_set(m->err, KVS_E_CANCELED,
		                     "merge canceled after %" PRIu64
		                     " of %" PRIu64 " input records",
		                     consumed, m->total);
	return KVS_OK;
}

/* Moves input i to its next record, counting and reporting progress
 * (unless !count: the caller counts, and has no progress callback). */
static SPECIALIZED kvs_status advance_counted(merge *m, size_t i, int in,
                                              bool count)
{
	kvs_cursor *c = m->cur[i];
	kvs_status st =
	    in == IN_BYTE  ? seg_cursor_next_with(c, KVS_PROFILE_BYTE, NULL)
	    : in == IN_BIT_DEFAULT
	        ? seg_cursor_next_with(c, KVS_PROFILE_BIT, seg_default_fields)
	        : kvs_cursor_next(c);
	if (st != KVS_OK)
		return input_failed(m, i, st);
	if (!count)
		return KVS_OK;
	if (++m->st.input_records >= m->next_progress && m->opt->progress)
		return report_progress(m, m->st.input_records);
	return KVS_OK;
}

static SPECIALIZED kvs_status advance_with(merge *m, size_t i, int in)
{
	return advance_counted(m, i, in, true);
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
 * advance_counted for the two-input loop. The writer rejects a key that
 * is not above the last it wrote, which catches an input out of order as
 * long as every record is written or equals one that is. A strong delete
 * writes no tombstone, so there the input's next key is compared with the
 * one it moves past (in m->last, which only the tree uses otherwise).
 */
static SPECIALIZED kvs_status advance_two(merge *m, size_t i, int in,
                                          bool count)
{
	if (!m->opt->drop_tombstones)
		return advance_counted(m, i, in, count);
	kvs_cursor *c = m->cur[i];
	uint64_t bits = c->key_bits;
	memcpy(m->last, c->key, (size_t)seg_key_bytes(bits));
	kvs_status st = advance_counted(m, i, in, count);
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
                                   uint64_t lcp, bool track, bool count)
{
	kvs_status st = emit_known(m, i, profile, fields, lcp, track);
	return st == KVS_OK ? advance_two(m, i, in, count) : st;
}

/*
 * Two inputs: one compare per round, no tree. With track (bit-profile
 * inputs, no tombstone dropped), la and lb hold the LCP of each input's
 * key with the last output key P, when known, and the writer is handed
 * it instead of comparing the keys again: the loser's from the round's
 * compare (it is above P, the winner's key), the winner's next key's from
 * field_lcp (LCP_FIELD until then). Without count (no progress callback)
 * the loop counts no input record: the cursors' ordinals do at the end.
 */
static SPECIALIZED kvs_status merge_two_track(merge *m, int in,
                                              kvs_profile profile,
                                              const seg_field *fields,
                                              bool track, bool count)
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
			          track ? lcp_of(w, a, la) : la, track, count);
			if (st == KVS_OK && track) {
				la = LCP_FIELD;
				lb = cl;
			}
		} else if (cmp > 0) {
			st = take(m, 1, in, profile, fields,
			          track ? lcp_of(w, b, lb) : lb, track, count);
			if (st == KVS_OK && track) {
				lb = LCP_FIELD;
				la = cl;
			}
		} else { /* the newer input wins */
			m->st.replaced++;
			/* both inputs were on P's key */
			st = take(m, 1, in, profile, fields,
			          track ? lcp_of(w, b, lb) : lb, track, count);
			if (st == KVS_OK &&
			    (st = advance_two(m, 0, in, count)) == KVS_OK &&
			    track)
				la = lb = LCP_FIELD;
		}
	}
	/* every input record the loop moved past: the cursors start at
	 * their first (an input that failed counts all its records) */
	if (!count)
		m->st.input_records += a->ordinal + b->ordinal;
	return st;
}

static SPECIALIZED kvs_status merge_two_with(merge *m, int in,
                                             kvs_profile profile,
                                             const seg_field *fields)
{
	return merge_two_track(m, in, profile, fields, false, true);
}

/*
 * Instantiated for the usual modes: inputs and output in the byte profile,
 * or all in the bit profile with the default codes. Flattened: GCC would
 * otherwise stop inlining the reader's and the writer's small helpers
 * into so large a loop, and pass their state through memory.
 */
FLATTEN static kvs_status merge_two_byte(merge *m)
{
	return merge_two_with(m, IN_BYTE, KVS_PROFILE_BYTE, seg_default_fields);
}

FLATTEN static kvs_status merge_two_bit(merge *m)
{
	/* a dropped tombstone is no output: the LCPs are not with it */
	if (m->opt->drop_tombstones)
		return merge_two_with(m, IN_BIT_DEFAULT, KVS_PROFILE_BIT,
		                      seg_default_fields);
	/* without a progress callback the cursors count the input records */
	if (m->opt->progress)
		return merge_two_track(m, IN_BIT_DEFAULT, KVS_PROFILE_BIT,
		                       seg_default_fields, true, true);
	return merge_two_track(m, IN_BIT_DEFAULT, KVS_PROFILE_BIT,
	                       seg_default_fields, true, false);
}

/* ---- two byte-profile inputs into their own framing --------------------
 *
 * The usual merge (two inputs and the output in the byte profile, one
 * framing, tombstones kept) with the inputs' and the output's state in
 * one local struct (the cursors and the writer are brought up to date
 * where the general code needs them), and without the writer's per-record
 * LCP with the previous key: the output's LCP is already known. Each input
 * keeps the LCP of its current key with the last output key. When the input has
 * just moved, that is its header's LCP with its previous key (the last output
 * key, or an older binding of it), checked to be the whole common prefix with
 * one byte compare that also checks the order; when the other input won the
 * round, it is the LCP the round's compare found. The usual restarts of
 * both sides are in line too (bin_next_restart, bout_try_restart: out of
 * line they cost 4% of a merge of two 4,096-record segments); unusual
 * headers, the streams' last bytes, flushes, long records and, with a
 * progress callback, output restarts go out of line. Each side counts
 * down the records it may take in line before it has to look.
 */

#define FAST_CHUNK ((size_t)256 << 10) /* flush once this much is pending */
#define FAST_MAXREC ((size_t)4096)     /* bytes of one record in line */
#define FAST_REC (FAST_MAXREC - 64)    /* key + value bytes in line */

typedef struct bin { /* one input */
	const uint8_t *p, *end; /* the next record; the stream's end */
	uint8_t *key;           /* the current key: the cursor's buffer */
	uint64_t len, lcp;      /* its length; its LCP with the last output */
	uint64_t rank; /* lcp_rank(lcp, key[lcp]), in the two-input loop */
	uint64_t vh, vlen;      /* its value header and value length */
	const uint8_t *value;   /* 16 readable bytes when vlen <= 16 */
	uint64_t budget;        /* records to take in line before looking */
	uint64_t granted;       /* the budget as it was given */
	uint64_t left;          /* records after the current (at the grant) */
	uint64_t max_len;       /* the input's longest key */
	uint32_t in_block, K;   /* ordinal % K (at the grant) */
	bool typed;
	uint8_t bounce[16]; /* a short value near the stream's end */
} bin;

typedef struct bout { /* the output */
	uint8_t *op;         /* the next byte */
	uint64_t budget;     /* records to write in line before looking */
	uint64_t granted;
	uint64_t until_restart; /* at the grant */
	uint64_t prev_len, prev_vh;
	uint64_t tombstones, key_bytes, value_bytes, max_len;
	uint32_t K;
	bool typed;
} bout;

typedef struct fast {
	/* The two-input loop's inputs live here: from a local array its
	 * records took 0.8% more instructions (callgrind; tfast's loop is the
	 * other way round, 2% more from the struct). */
	bin two[2];
	bin *in; /* the inputs, n of them (two for that loop) */
	size_t n;
	bout o;
	merge *m;
	uint8_t *old;   /* the previous key of an input, for a restart */
	uint8_t *first; /* the output's first key, 16 bytes to spare */
	uint64_t first_len;
} fast;

/* The LCP of two byte keys in buffers with 8 readable bytes past each, in
 * bits; *cmp their order. Their first from bytes are known to be equal. */
static SPECIALIZED uint64_t key_lcp_from(const uint8_t *a, uint64_t la,
                                         const uint8_t *b, uint64_t lb,
                                         uint64_t from, int *cmp)
{
	uint64_t n = la < lb ? la : lb, i = from & ~(uint64_t)7;
	for (; i + 8 <= n; i += 8) {
		uint64_t x = kvs_load_be64(a + i), y = kvs_load_be64(b + i);
		if (x != y) {
			*cmp = x > y ? 1 : -1;
			return 8 * i + (unsigned)__builtin_clzll(x ^ y);
		}
	}
	if (i < n) { /* 1..7 bytes left: the top ones of a word */
		unsigned sh = 8 * (unsigned)(8 - (n - i));
		uint64_t x = kvs_load_be64(a + i) >> sh,
		         y = kvs_load_be64(b + i) >> sh;
		if (x != y) {
			*cmp = x > y ? 1 : -1;
			return 8 * i + (unsigned)__builtin_clzll(x ^ y) - sh;
		}
	}
	*cmp = la < lb ? -1 : la > lb;
	return 8 * n;
}

static SPECIALIZED uint64_t key_lcp_bits(const uint8_t *a, uint64_t la,
                                         const uint8_t *b, uint64_t lb,
                                         int *cmp)
{
	return key_lcp_from(a, la, b, lb, 0, cmp);
}

/*
 * The order of the two inputs' keys and their LCP in bytes, from their
 * LCPs la and lb with the last output key P, which both are above: the
 * keys agree up to m = min(la, lb), and both have a byte there (a key that
 * ended there would be a prefix of P). When la and lb differ, the keys
 * differ at m (the one that shares more with P has P's byte there, the
 * other a larger one), so comparing the bytes at m orders them either
 * way; a branch on la == lb would follow the data, which for keys such as
 * hashes is a coin toss: mispredicted, it cost 3-5% of a byte-mode merge
 * of such keys and 5-7% of a bit-mode one.
 */
static SPECIALIZED uint64_t heads_lcp(const bin *a, const bin *b, int *cmp)
{
	uint64_t la = a->lcp, lb = b->lcp, m = la < lb ? la : lb;
	unsigned x = a->key[m], y = b->key[m];
	if (x != y) { /* the usual case: they differ right there */
		*cmp = x > y ? 1 : -1;
		return m;
	}
	return key_lcp_from(a->key, a->len, b->key, b->len, m, cmp) / 8;
}

/* The rank of a key whose LCP with the last output key is lcp and whose
 * byte there is byte (see heads_cmp). */
static inline uint64_t lcp_rank(uint64_t lcp, unsigned byte)
{
	return ~lcp << 8 | byte;
}

/* b's LCP with the last output key, and the rank it gives b. */
static SPECIALIZED void bin_set_lcp(bin *b, uint64_t lcp)
{
	b->lcp = lcp;
	b->rank = lcp_rank(lcp, b->key[lcp]);
}

/*
 * The order of the two inputs' keys (as heads_lcp), from their ranks alone
 * in the usual case. An input's rank ~lcp << 8 | key[lcp] (an LCP is below
 * 2^20 bytes) places its key after the last output key P by where it
 * leaves P and by its byte there: a key that leaves P earlier is the
 * larger, and two that leave it at the same place are ordered by their
 * bytes there. Where the ranks differ, the loser's LCP with the next P
 * (the winner) is its LCP with this P, so its LCP and rank stay. An
 * input's rank is set where its record is decoded, in bin_next_fast from
 * the stream (the header and the suffix's first byte). Equal ranks (the
 * keys leave P at the same place with the same byte): the keys are
 * compared from there, and the loser gets its LCP with the winner. Against
 * heads_lcp, which takes the smaller LCP and loads both keys' bytes there
 * and whose caller stores the loser's LCP, 0.5-4.4% less time in the byte
 * loop (typed-byte, grid and merge-disjoint rows; none on
 * merge-overlap-hash-6).
 */
static SPECIALIZED int heads_cmp(bin *a, bin *b)
{
	if (a->rank != b->rank)
		return a->rank < b->rank ? -1 : 1;
	int cmp;
	uint64_t l =
	    key_lcp_from(a->key, a->len, b->key, b->len, a->lcp, &cmp) / 8;
	if (cmp < 0)
		bin_set_lcp(b, l);
	else if (cmp > 0)
		bin_set_lcp(a, l);
	return cmp;
}

/*
 * After heads_cmp, when the winner is dropped (a strong delete) and P stays
 * as it was: where heads_cmp gave the loser an LCP with the winner above
 * the winner's with P, the loser's LCP with P is the winner's, and so is
 * its rank (the two were equal).
 */
static SPECIALIZED void heads_keep_p(bin *loser, const bin *winner)
{
	if (loser->lcp > winner->lcp) {
		loser->lcp = winner->lcp;
		loser->rank = winner->rank;
	}
}

/* A short value near the stream's end gets 16 readable bytes. */
static void bin_bounce(bin *b)
{
	if (b->vlen <= 16 && b->end - b->value < 16) {
		memset(b->bounce, 0, sizeof b->bounce);
		memcpy(b->bounce, b->value, (size_t)b->vlen);
		b->value = b->bounce;
	}
}

/* Records b may take in line from here: up to its next restart and its
 * last record. */
static void bin_grant(bin *b)
{
	uint64_t to_restart = b->K - 1 - b->in_block;
	b->granted = b->budget = to_restart < b->left ? to_restart : b->left;
}

static void bin_load(bin *b, const kvs_cursor *c)
{
	const kvs_segment *s = c->seg;
	b->end = s->stream + s->stream_len;
	b->p = s->stream + c->next_off;
	b->key = c->key;
	b->len = c->key_bits / 8;
	b->lcp = 0; /* set by the first round */
	b->vh = c->prev_vh;
	b->vlen = c->value_len;
	b->value = c->value;
	b->left = s->records - 1 - c->ordinal;
	b->in_block = c->in_block;
	b->K = s->restart_interval;
	b->max_len = s->max_key_bits / 8;
	b->typed = s->framing == KVS_FRAMING_TYPED;
	bin_bounce(b);
	bin_grant(b);
}

/*
 * A value header of one or two bytes (a value below 16 KiB) from q, which
 * has two readable bytes: its length in bytes, or 0 for a longer or
 * overlong varint, left to decode_byte. FORMAT.md §3.4.
 */
static SPECIALIZED unsigned bin_vh(const uint8_t *q, uint64_t *v)
{
	unsigned x = q[0], y = q[1];
	*v = x;
	if (x < 0x80)
		return 1;
	*v = (x & 0x7f) | (uint64_t)y << 7;
	return y - 1u < 0x7f ? 2 : 0; /* 1..0x7f: neither 0 nor continued */
}

/*
 * The next record of b in the usual case: inside b's budget, a one-byte
 * header with the key's length unchanged, a suffix whose first byte is
 * above the previous key's (so the LCP is whole and the key larger), a
 * value header of one or two bytes if any, and 16 bytes of stream to spare
 * after the value (and room for a record of the previous lengths and 64
 * bytes more, which covers the header, the suffix's words and the value
 * header). False (b unchanged) otherwise. typed is b->typed as a constant;
 * ranked: set b->rank (the two-input loop; under the tree it goes unread).
 * FORMAT.md §6.1.
 */
static SPECIALIZED bool bin_next_fast(bin *b, bool typed, bool ranked)
{
	const uint8_t *p = b->p;
	uint64_t len = b->len, vh = b->vh, vlen = b->vlen;
	if (b->budget == 0 || len + vlen + 64 > (uint64_t)(b->end - p))
		return false;
	unsigned h = p[0];
	uint64_t lcp = h >> 2;
	if ((h & 0x82) || lcp >= len)
		return false;
	uint64_t slen = len - lcp;
	const uint8_t *s = p + 1, *q = s + slen;
	if (s[0] <= b->key[lcp])
		return false;
	if (h & 1) {
		uint64_t v;
		unsigned n = bin_vh(q, &v);
		if (n == 0 || v == vh)
			return false;
		vh = v;
		vlen = typed ? (v ? v - 1 : 0) : v;
		q += n;
		if (vlen + 16 > (uint64_t)(b->end - q))
			return false;
	}
	/* The suffix, in words from the LCP on: 16 bytes, then the rest (the
	 * key buffer has 16 bytes to spare). Whole words at multiples of 8,
	 * as decode_byte stores them (so that the compare's loads of such
	 * words are forwarded from one store), took a masked first word and
	 * a loop: with the compare on ranks, which loads no key, the loop
	 * takes 5-13% less time without them (typed-byte, raw-byte; 0-6%
	 * with four inputs). */
	kvs_store_le64(b->key + lcp, kvs_load_le64(s));
	kvs_store_le64(b->key + lcp + 8, kvs_load_le64(s + 8));
	for (uint64_t i = 16; i < slen; i += 8)
		kvs_store_le64(b->key + lcp + i, kvs_load_le64(s + i));
	b->lcp = lcp;
	if (ranked)
		b->rank = lcp_rank(lcp, s[0]);
	b->vh = vh;
	b->vlen = vlen;
	b->value = q;
	b->p = q + vlen;
	b->budget--;
	return true;
}

/*
 * The next record of b when it is an input restart (FORMAT.md §6.1: the
 * whole key, then the value header), in the usual case: a one-byte key
 * length, a value header of one or two bytes, a key of the input's bounds
 * above the previous one, 16 bytes of stream to spare. Its LCP with the
 * previous key is found from the stream before the key is stored, in
 * whole words. False (b unchanged) otherwise.
 */
static bool bin_restart(bin *b, uint64_t max_len)
{
	const uint8_t *p = b->p;
	uint64_t avail = (uint64_t)(b->end - p);
	if (avail < 32 || p[0] >= 0x80)
		return false;
	uint64_t len = p[0], vh;
	const uint8_t *k = p + 1, *q = k + len;
	unsigned n;
	if (len > max_len || len + 32 > avail || (n = bin_vh(q, &vh)) == 0)
		return false;
	int cmp;
	uint64_t lcp = key_lcp_bits(k, len, b->key, b->len, &cmp) / 8;
	if (cmp <= 0)
		return false;
	uint64_t vlen = b->typed ? (vh ? vh - 1 : 0) : vh;
	q += n;
	if (vlen + 16 > (uint64_t)(b->end - q))
		return false;
	for (uint64_t i = 0; i < len; i += 8)
		kvs_store_le64(b->key + i, kvs_load_le64(k + i));
	b->len = len;
	b->lcp = lcp;
	b->rank = lcp_rank(lcp, k[lcp]);
	b->vh = vh;
	b->vlen = vlen;
	b->value = q;
	b->p = q + vlen;
	return true;
}

/* The next record of b in any other case (its callers try
 * bin_next_restart first), through decode_byte, with its LCP computed
 * against a copy of the previous key; *live false at the end. */
static __attribute__((noinline)) kvs_status
bin_next_slow(fast *f, size_t i, bool *live)
{
	bin *b = &f->in[i];
	uint64_t used = b->granted - b->budget;
	b->left -= used;
	b->in_block += (uint32_t)used;
	if (b->left == 0) {
		*live = false;
		b->budget = b->granted = 0;
		b->lcp = 0; /* see tree_replay */
		return KVS_OK;
	}
	uint32_t ib = b->in_block + 1 == b->K ? 0 : b->in_block + 1;
	merge *m = f->m;
	kvs_cursor *c = m->cur[i];
	const kvs_segment *s = c->seg;
	uint64_t rec = s->records - b->left;
	/* in words: the key was just stored so (a wider load would wait) */
	copy_words(f->old, b->key, b->len);
	c->key_bits = 8 * b->len;
	c->prev_vh = b->vh;
	kvs_status st = decode_byte(c, ib == 0, (uint64_t)(b->p - s->stream));
	if (st != KVS_OK) {
		st = seg_cursor_invalidate(c, st);
		return kvs_error_set(m->err, st, "input %zu: record %" PRIu64 ": %s",
		                     i, rec, kvs_strerror(st));
	}
	int cmp;
	uint64_t lcp =
	    key_lcp_bits(c->key, c->key_bits / 8, f->old, b->len, &cmp) / 8;
	if (cmp <= 0)
		return kvs_error_set(m->err, KVS_E_CORRUPT,
		                     "input %zu: record %" PRIu64
		                     ": its key is not above the previous one: %s",
		                     i, rec, kvs_strerror(KVS_E_CORRUPT));
	b->len = c->key_bits / 8;
	bin_set_lcp(b, lcp);
	b->vh = c->prev_vh;
	b->vlen = c->value_len;
	b->value = c->value;
	b->p = s->stream + c->next_off;
	b->in_block = ib;
	b->left--;
	bin_bounce(b);
	bin_grant(b);
	return KVS_OK;
}

/* The next record of b when its budget is spent and it is the usual
 * restart (bin_restart), in line; false (b unchanged) otherwise. */
static SPECIALIZED bool bin_next_restart(bin *b)
{
	uint64_t used = b->granted - b->budget;
	if (b->left == used || b->in_block + used + 1 != b->K ||
	    !bin_restart(b, b->max_len))
		return false;
	b->left -= used + 1;
	b->in_block = 0;
	bin_grant(b);
	return true;
}

/* Moves input i to its next record; *live false when it has none. */
static SPECIALIZED kvs_status bin_advance(fast *f, size_t i, bool *live,
                                          bool typed, bool ranked)
{
	if (__builtin_expect(bin_next_fast(&f->in[i], typed, ranked), 1) ||
	    bin_next_restart(&f->in[i]))
		return KVS_OK;
	return bin_next_slow(f, i, live);
}

/* Input records consumed so far (kvs_merge_stats.input_records). */
static uint64_t fast_consumed(const fast *f, const bool *live)
{
	uint64_t n = 0;
	for (size_t i = 0; i < f->n; i++) {
		const bin *b = &f->in[i];
		uint64_t records = f->m->cur[i]->seg->records;
		uint64_t left = b->left - (b->granted - b->budget);
		n += live[i] ? records - 1 - left : records;
	}
	return n;
}

/* The writer's state from o, with out records in all. */
static void bout_sync(kvs_writer *w, const bout *o, uint64_t out)
{
	uint64_t until = o->until_restart - (o->granted - o->budget);
	w->buf_len = (size_t)(o->op - w->buf);
	w->records = out;
	w->tombstones = o->tombstones;
	w->key_bits = 8 * o->key_bytes;
	w->value_bytes = o->value_bytes;
	if (8 * o->max_len > w->max_key_bits)
		w->max_key_bits = 8 * o->max_len;
	w->prev_bits = 8 * o->prev_len;
	w->prev_vh = o->prev_vh;
	w->in_block = until ? o->K - (uint32_t)until : 0;
}

/* Records o may write in line from here: up to the next restart, and as
 * many as surely fit in the buffer. */
static void bout_grant(bout *o, const kvs_writer *w)
{
	uint64_t room = (uint64_t)(w->buf + w->buf_cap - o->op) / FAST_MAXREC;
	o->granted = o->budget = o->until_restart < room ? o->until_restart
	                                                  : room;
}

/* o from the writer's state after the first round. */
static void bout_load(bout *o, const kvs_writer *w)
{
	o->op = w->buf + w->buf_len;
	o->prev_len = w->prev_bits / 8;
	o->prev_vh = w->prev_vh;
	o->K = w->opt.restart_interval;
	o->until_restart = w->in_block ? o->K - w->in_block : 0;
	o->typed = w->opt.framing == KVS_FRAMING_TYPED;
	o->tombstones = w->tombstones;
	o->key_bytes = w->key_bits / 8;
	o->value_bytes = w->value_bytes;
	o->max_len = w->max_key_bits / 8;
	bout_grant(o, w);
}

/* The record's bytes after its header (FORMAT.md §6.1), the key from lcp. */
static SPECIALIZED uint8_t *bout_body(bout *o, uint8_t *p, const bin *b,
                                      uint64_t lcp, bool vc, bool typed)
{
	uint64_t len = b->len, slen = len - lcp, vlen = b->vlen;
	const uint8_t *k = b->key + lcp; /* 16 readable bytes from k */
	if (slen <= 16) {
		kvs_store_le64(p, kvs_load_le64(k));
		kvs_store_le64(p + 8, kvs_load_le64(k + 8));
	} else {
		copy_words(p, k, slen);
	}
	p += slen;
	if (vc) {
		if (b->vh < 0x80)
			*p++ = (uint8_t)b->vh;
		else
			p += kvs_varint_put(p, b->vh);
	}
	if (vlen <= 16) { /* 16 readable bytes: see bin */
		kvs_store_le64(p, kvs_load_le64(b->value));
		kvs_store_le64(p + 8, kvs_load_le64(b->value + 8));
	} else {
		copy_value(p, b->value, 0, (size_t)vlen);
	}
	p += vlen;
	o->prev_len = len;
	o->prev_vh = b->vh;
	o->tombstones += typed & (b->vh == 0);
	o->key_bytes += len;
	o->value_bytes += vlen;
	if (len > o->max_len)
		o->max_len = len;
	return p;
}

/* A record that is not a restart, with room for it. */
static SPECIALIZED void bout_usual(bout *o, const bin *b, bool typed)
{
	uint8_t *p = o->op;
	uint64_t lcp = b->lcp;
	bool kc = b->len != o->prev_len, vc = b->vh != o->prev_vh;
	uint64_t h = lcp << 2 | (uint64_t)kc << 1 | vc;
	if (h < 0x80 && !kc) {
		*p++ = (uint8_t)h;
	} else {
		p += kvs_varint_put(p, h);
		if (kc)
			p += kvs_varint_put(p, seg_zigzag(b->len, o->prev_len));
	}
	o->op = bout_body(o, p, b, lcp, vc, typed);
}

/* The fence parts of a restart key (seg_writer_restart), from the key
 * with 8 readable bytes past it. */
static void fast_restart_index(fast *f, const bin *b)
{
	kvs_writer *w = f->m->w;
	uint64_t bits = 8 * b->len, at;
	int cmp;
	at = key_lcp_bits(f->first, f->first_len, b->key, b->len, &cmp);
	uint32_t win = 0;
	if (bits > at) { /* bits [at, at + 32) of the key, zero past it */
		uint64_t first = at / 8, n = b->len - first;
		uint64_t x = kvs_load_be64(b->key + first);
		if (n < 8)
			x &= ~(~(uint64_t)0 >> (8 * n));
		win = (uint32_t)((x << (at & 7)) >> 32);
		uint64_t avail = bits - at;
		if (avail < 32)
			win &= ~(uint32_t)0 << (32 - avail);
	}
	size_t j = w->restarts_len++;
	w->restarts[j] = w->flushed + (uint64_t)(f->o.op - w->buf);
	w->fence_skip[j] = at;
	w->fence_win[j] = win;
}

/* An output restart, with room for it: its place in the restart index
 * and its fence, its whole key. */
static SPECIALIZED void bout_restart(fast *f, const bin *b, bool typed)
{
	bout *o = &f->o;
	fast_restart_index(f, b);
	uint8_t *p = o->op;
	p += kvs_varint_put(p, b->len);
	o->op = bout_body(o, p, b, 0, true, typed);
	o->until_restart = o->K - 1;
}

/* An output restart, a flush or a long record; a progress call at each
 * restart. */
static __attribute__((noinline)) kvs_status
bout_put_slow(fast *f, const bin *b, const bool *live)
{
	merge *m = f->m;
	kvs_writer *w = m->w;
	bout *o = &f->o;
	kvs_status st;
	o->until_restart -= o->granted - o->budget;
	o->granted = o->budget = 0;
	if (b->vlen > KVS_MAX_VALUE_LEN) { /* refused with its message */
		bout_sync(w, o,
		          fast_consumed(f, live) - m->st.replaced -
		              m->st.dropped);
		return seg_writer_add(w, b->key, 8 * b->len,
		                      b->typed && b->vh == 0 ? KVS_KIND_TOMBSTONE
		                                             : KVS_KIND_VALUE,
		                      b->value, 0, (size_t)b->vlen, m->err);
	}
	uint64_t consumed;
	if (o->until_restart == 0 && m->opt->progress &&
	    (consumed = fast_consumed(f, live)) >= m->next_progress &&
	    (st = report_progress(m, consumed)) != KVS_OK)
		return st;
	size_t need = 3 * KVS_VARINT_MAX + 32 + (size_t)(b->len + b->vlen);
	if (need < FAST_MAXREC)
		need = FAST_MAXREC;
	w->buf_len = (size_t)(o->op - w->buf);
	if (w->buf_len >= FAST_CHUNK || need > w->buf_cap - w->buf_len) {
		project_hint(m, fast_consumed(f, live));
		if ((st = seg_writer_flush(w, m->err)) != KVS_OK)
			return st;
		if (seg_grow(&w->buf, &w->buf_cap,
		             w->buf_len + need + FAST_CHUNK) != KVS_OK)
			return seg_writer_fail(w, m->err, KVS_E_NOMEM, "%s: %s",
			                       "out of memory");
		o->op = w->buf + w->buf_len;
	}
	if (o->until_restart) {
		bout_usual(o, b, o->typed);
		o->until_restart--;
	} else {
		bout_restart(f, b, o->typed);
	}
	bout_grant(o, w);
	return KVS_OK;
}

/* The usual output restart in line (bout_restart and the next budget),
 * when b's record is in line's bounds, the buffer has room for it and no
 * flush is due; false (nothing done) otherwise. */
static SPECIALIZED bool bout_try_restart(fast *f, const bin *b, bool typed)
{
	kvs_writer *w = f->m->w;
	bout *o = &f->o;
	if (o->until_restart != o->granted - o->budget ||
	    b->len + b->vlen > FAST_REC ||
	    (size_t)(w->buf + w->buf_cap - o->op) < FAST_MAXREC ||
	    (size_t)(o->op - w->buf) >= FAST_CHUNK)
		return false;
	bout_restart(f, b, typed);
	bout_grant(o, w);
	return true;
}

static SPECIALIZED kvs_status bout_put(fast *f, const bin *b, const bool *live,
                                       bool typed)
{
	bout *o = &f->o;
	if (__builtin_expect(o->budget == 0 || b->len + b->vlen > FAST_REC,
	                     0)) {
		/* the usual output restart in line, unless progress is
		 * reported (bout_put_slow) */
		if (!f->m->opt->progress && bout_try_restart(f, b, typed))
			return KVS_OK;
		return bout_put_slow(f, b, live);
	}
	bout_usual(o, b, typed);
	o->budget--;
	return KVS_OK;
}

/* The input whose first record the first round writes (all inputs on a
 * record): the smallest key, the newest input's on ties. */
static size_t first_top(const merge *m)
{
	size_t top = 0;
	for (size_t i = 1; i < m->n; i++) {
		const kvs_cursor *a = m->cur[i], *b = m->cur[top];
		int cmp;
		seg_key_lcp(a->key, a->key_bits, b->key, b->key_bits, &cmp);
		if (cmp <= 0)
			top = i;
	}
	return top;
}

/* With a strong delete, the in-line loops drop tombstones in line, but
 * their first round must write a record (the loop starts from the
 * writer's first key): is the first round's winner no tombstone? */
static bool first_kept(const merge *m)
{
	return m->cur[first_top(m)]->kind != KVS_KIND_TOMBSTONE;
}

/* Can merge_two_bytes_fast (two inputs) or merge_tree_bytes_fast take
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

/*
 * What the in-line loops need before they start: room for every restart
 * of the output, and for keys as long as the inputs' longest (16 bytes
 * more): *old, *first (zeroed: a key in words, zero after it) and the
 * writer's previous key. The caller frees *old and *first.
 */
static kvs_status loop_setup(merge *m, uint8_t **old, uint8_t **first)
{
	kvs_writer *w = m->w;
	uint64_t max_len = 0;
	for (size_t i = 0; i < m->n; i++) {
		uint64_t l = seg_key_bytes(m->cur[i]->seg->max_key_bits);
		if (l > max_len)
			max_len = l;
	}
	*old = malloc((size_t)max_len + 16);
	*first = calloc(1, (size_t)max_len + 16);
	uint8_t *pk = realloc(w->prev_key, (size_t)max_len + 8);
	if (pk) {
		w->prev_key = pk;
		w->prev_cap = (size_t)max_len + 8;
	}
	if (!seg_writer_grow_restarts(
	        w, (size_t)(m->total / w->opt.restart_interval + 2)))
		pk = NULL;
	if (!*old || !*first || !pk)
		return seg_writer_fail(w, m->err, KVS_E_NOMEM, "%s: %s",
		                       "out of memory");
	return KVS_OK;
}

/* loop_setup, and the byte loop's output buffer. */
static kvs_status fast_setup(fast *f, merge *m)
{
	kvs_writer *w = m->w;
	kvs_status st = loop_setup(m, &f->old, &f->first);
	if (st == KVS_OK &&
	    seg_grow(&w->buf, &w->buf_cap, FAST_CHUNK + FAST_MAXREC) != KVS_OK)
		return seg_writer_fail(w, m->err, KVS_E_NOMEM, "%s: %s",
		                       "out of memory");
	return st;
}

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
	if ((st = emit_with(m, cmp < 0 ? 0 : 1, KVS_PROFILE_BYTE,
	                    seg_default_fields)) != KVS_OK)
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
static kvs_status merge_two_bytes_fast(merge *m)
{
	if (m->w->opt.framing == KVS_FRAMING_TYPED)
		return m->opt->drop_tombstones
		           ? merge_two_bytes_with(m, true, true)
		           : merge_two_bytes_with(m, true, false);
	return merge_two_bytes_with(m, false, false);
}

/* ---- two bit-profile inputs with the default codes ---------------------
 *
 * The usual bit-profile merge (two inputs and the output with the default
 * codes, one framing, tombstones kept) in the manner of the byte loop
 * above: the inputs' and the output's state in one local struct, each
 * input's LCP with the last output key known, so the writer neither
 * compares keys nor copies the previous key. Records are decoded straight
 * from the stream with 64-bit windows (no reservoir) and their keys kept
 * in whole aligned words; the output is written with the writer's
 * register path (fast_bw), most of each record as one copy of the input's
 * bits (see tout_usual). The usual restarts of both sides are in line
 * too; unusual codes, the streams' last bits, flushes, long records and,
 * with a progress callback, output restarts go out of line (the cursor's
 * decoder and the writer's general path). Each side counts down the
 * records it may take in line. FORMAT.md §6.2; the default codes are
 * delta-EG2 for LCP and delta-EG0 for KEYLEN and VALLEN.
 */

#define BIT_MAXREC ((size_t)1024) /* output bytes of one record in line */
#define BIT_REC (BIT_MAXREC - 128) /* key + value bytes in line */
#define BIT_SPARE 128 /* stream bits past a value the loop may load */
/* A short value's bytes at most: the kind bit, a VALLEN code between two
 * such lengths and the value fit one put (see tout_short, tin_tail). */
#define BIT_SHORT 6

typedef struct tin { /* one input */
	const uint8_t *s;   /* the record stream */
	uint64_t pos, end;  /* the next record's first bit; the stream's bits */
	uint8_t *key;       /* the current key: the cursor's buffer */
	uint64_t len, lcp;  /* its bits; its LCP with the last output key */
	/* Its bits [0, mlen) are in key (mlen = len, or a multiple of 64
	 * below it: a long suffix decoded in line stores its first word
	 * only); the rest lie in the stream from bit kx (tin_fill). */
	uint64_t mlen, kx;
	/* for a key of len bits (tin_key_end): its last word, and the mask
	 * of the key's bits in it; read only by tin_next_fast (see there) */
	uint64_t lastw, lmask;
	uint64_t flcp, fvlen; /* LCP and VALLEN field states after it (KEYLEN's
	                       * is len) */
	uint64_t vlen;       /* its value's length in bytes (it ends at pos) */
	bool tomb;           /* a tombstone */
	bool edge; /* fewer than BIT_SPARE bits after the value, or key and
	            * value above BIT_REC bytes: written out of line */
	/* Decoded in line: the key's bits from flcp (its LCP field, 0 at a
	 * restart) lie in the stream from bit x, and the rest of the record
	 * follows them up to pos; the VALLEN code is relative to vref. */
	bool inl;
	uint64_t x, vref;
	uint64_t budget, granted, left, max_len;
	uint64_t vmax; /* a value of up to vmax bytes and any key of the
	                * input's bounds lie within BIT_REC bytes */
	uint64_t safe; /* below it, a record with key and value within
	                * BIT_REC bytes lies in the stream, with BIT_SPARE
	                * bits after it (see tin_next_fast), or 0 */
	uint32_t in_block, K;
} tin;

typedef struct tout { /* the output */
	fast_bw bw;
	uint64_t budget, granted, until_restart;
	uint64_t prev_len, flcp, fvlen; /* KEYLEN's state: prev_len */
	uint64_t tombstones, key_bits, value_bytes, max_len;
	uint32_t K;
} tout;

typedef struct tfast {
	tin *in; /* the inputs, n of them */
	size_t n;
	tout o;
	merge *m;
	uint8_t *old;   /* the previous key of an input, for a restart */
	uint8_t *first; /* the output's first key, in words, zero after it */
	uint64_t first_len;
} tfast;

/* 64 bits of s from bit x: the 9 bytes from x / 8 are read. */
static SPECIALIZED uint64_t bits64(const uint8_t *s, uint64_t x)
{
	const uint8_t *p = s + x / 8;
	unsigned sh = (unsigned)(x & 7);
	return kvs_load_be64(p) << sh | (uint64_t)p[8] >> (8 - sh);
}

/* 57 to 64 bits of s from bit x, the rest zero: the 8 bytes from x / 8
 * are read. */
static SPECIALIZED uint64_t bits57(const uint8_t *s, uint64_t x)
{
	return kvs_load_be64(s + x / 8) << (x & 7);
}

/* The EGk code (k = 0 or 2) at the top of the window w, whose top `valid`
 * bits are the stream's: its length, 0 when it does not lie in them; *v
 * its value. */
static SPECIALIZED unsigned eg_window(uint64_t w, unsigned valid, unsigned k,
                                      uint64_t *v)
{
	unsigned z = (unsigned)__builtin_clzll(w | 1);
	unsigned n = 2 * z + k + 1;
	if (n > valid)
		return 0;
	*v = (w >> (64 - n)) - ((uint64_t)1 << k);
	return n;
}

/* Records b may take in line from here: up to its next restart and its
 * last record. */
static void tin_grant(tin *b)
{
	uint64_t to_restart = b->K - 1 - b->in_block;
	b->granted = b->budget = to_restart < b->left ? to_restart : b->left;
}

/* The mask of a key's bits in its last word, (len - 1) / 64, for a key
 * of len >= 1 bits. */
static inline uint64_t last_word_mask(uint64_t len)
{
	return ~(uint64_t)0 << (63 - (len - 1) % 64);
}

/* b's lastw and lmask for a key of len >= 1 bits. */
static inline void tin_key_end(tin *b, uint64_t len)
{
	b->lastw = (len - 1) / 64;
	b->lmask = last_word_mask(len);
}

/* The current record's value and the bits after it, from the cursor's
 * state (the reader is after the record). */
static void tin_from_cursor(tin *b, const kvs_cursor *c)
{
	b->pos = kvs_br_position(&c->br);
	b->len = c->key_bits;
	b->mlen = b->len;
	if (b->len)
		tin_key_end(b, b->len);
	b->flcp = c->prev_lcp;
	b->fvlen = c->prev_vallen;
	b->vlen = c->value_len;
	b->tomb = c->kind == KVS_KIND_TOMBSTONE;
	b->edge = b->end - b->pos < BIT_SPARE ||
	          b->len / 8 + b->vlen > BIT_REC;
	b->inl = false;
}

static void tin_load(tin *b, const kvs_cursor *c)
{
	const kvs_segment *s = c->seg;
	b->s = s->stream;
	b->end = s->stream_bits;
	b->key = c->key;
	tin_from_cursor(b, c);
	b->lcp = 0; /* set by the first round */
	b->left = s->records - 1 - c->ordinal;
	b->in_block = c->in_block;
	b->K = s->restart_interval;
	b->max_len = s->max_key_bits;
	b->vmax = b->max_len / 8 < BIT_REC ? BIT_REC - b->max_len / 8 : 0;
	uint64_t room = b->max_len + 4 * BIT_SPARE + 8 * BIT_REC;
	b->safe = b->end > room ? b->end - room : 0;
	tin_grant(b);
}

/* The first bit of b's value. */
static inline uint64_t tin_vpos(const tin *b)
{
	return b->pos - 8 * b->vlen;
}

/* The rest of b's key into its buffer (see tin.mlen), the last word with
 * its padding bits clear. */
static __attribute__((noinline)) void tin_fill_rest(tin *b)
{
	/* the last word from len, not b->lastw: a record whose KEYLEN
	 * changed and that was not taken in line leaves lastw set for its
	 * length until the restart or slow path takes it */
	uint64_t last = (b->len - 1) / 64, y = b->kx;
	for (uint64_t j = b->mlen / 64; j < last; j++, y += 64)
		kvs_store_be64(b->key + 8 * j, bits64(b->s, y));
	kvs_store_be64(b->key + 8 * last,
	               bits64(b->s, y) & last_word_mask(b->len));
	b->mlen = b->len;
}

/* Word w of b's key (64 * w < len); past the key's end, from the stream,
 * the record's next bits (a compare stops at the shorter key's end). */
static SPECIALIZED uint64_t tin_word(const tin *b, uint64_t w)
{
	if (64 * w < b->mlen)
		return kvs_load_be64(b->key + 8 * w);
	return bits64(b->s, b->kx + (64 * w - b->mlen));
}

/* b's whole key in its buffer. */
static inline void tin_fill(tin *b)
{
	if (__builtin_expect(b->mlen < b->len, 0))
		tin_fill_rest(b);
}

/*
 * The delta-EG0 VALLEN codes of up to 8 bits (FORMAT.md §3.1), by the 8
 * bits that begin with one: its length in the low byte (0 for a longer
 * code), the difference it encodes plus VALLEN_BIAS above it. With typed
 * framing, vallen_short has the kind bit and such a code after a value of
 * r <= BIT_SHORT bytes, by r and the 9 bits from the kind bit: the bits
 * from the kind bit to the value's end (the kind bit, the code, the value)
 * in the low byte, VALLEN above it, VS_TOMB for a tombstone (kind bit 0,
 * 1 bit in all); 0 for a longer code or a length below 0.
 */
#define VALLEN_BIAS 128
#define VS_TOMB_BIT 12
#define VS_TOMB     ((uint16_t)1 << VS_TOMB_BIT)
#define VC_N(b)                                                                \
	((b) >= 128 ? 1 : (b) >= 64 ? 3 : (b) >= 32 ? 5 : (b) >= 16 ? 7 : 0)
#define VC_Z(b) (((b) >> (8 - VC_N(b))) - 1) /* the zigzagged difference */
#define VC_D(b) ((VC_Z(b) & 1) ? -((VC_Z(b) + 1) / 2) : VC_Z(b) / 2)
#define VC_E(b)                                                                \
	(VC_N(b) ? (uint32_t)(VC_D(b) + VALLEN_BIAS) << 8 | VC_N(b) : 0u)
#define VC_4(b)  VC_E(b), VC_E((b) + 1), VC_E((b) + 2), VC_E((b) + 3)
#define VC_16(b) VC_4(b), VC_4((b) + 4), VC_4((b) + 8), VC_4((b) + 12)
#define VC_64(b) VC_16(b), VC_16((b) + 16), VC_16((b) + 32), VC_16((b) + 48)
static const uint32_t vallen_codes[256] = {VC_64(0), VC_64(64), VC_64(128),
                                           VC_64(192)};
#define VS_E(r, i)                                                             \
	((i) < 256 ? (uint16_t)(VS_TOMB | 1)                                   \
	 : VC_N((i)-256) && (r) + VC_D((i)-256) >= 0                           \
	     ? (uint16_t)((unsigned)((r) + VC_D((i)-256)) << 8 |               \
	                  (1 + VC_N((i)-256) + 8 * ((r) + VC_D((i)-256))))     \
	     : (uint16_t)0)
#define VS_4(r, i)                                                             \
	VS_E(r, i), VS_E(r, (i) + 1), VS_E(r, (i) + 2), VS_E(r, (i) + 3)
#define VS_16(r, i)                                                            \
	VS_4(r, i), VS_4(r, (i) + 4), VS_4(r, (i) + 8), VS_4(r, (i) + 12)
#define VS_64(r, i)                                                            \
	VS_16(r, i), VS_16(r, (i) + 16), VS_16(r, (i) + 32), VS_16(r, (i) + 48)
#define VS_512(r)                                                              \
	{                                                                      \
		VS_64(r, 0), VS_64(r, 64), VS_64(r, 128), VS_64(r, 192),       \
		    VS_64(r, 256), VS_64(r, 320), VS_64(r, 384), VS_64(r, 448) \
	}
static const uint16_t vallen_short[BIT_SHORT + 1][512] = {
    VS_512(0), VS_512(1), VS_512(2), VS_512(3),
    VS_512(4), VS_512(5), VS_512(6)};
#undef VS_512
#undef VS_64
#undef VS_16
#undef VS_4
#undef VS_E
#undef VC_64
#undef VC_16
#undef VC_4
#undef VC_E
#undef VC_D
#undef VC_Z
#undef VC_N

/*
 * The delta-EG2 LCP code of up to 9 bits and a KEYLEN code 1 after it (the
 * length unchanged), by the 10 bits that begin with the LCP code (FORMAT.md
 * §3.1, §6.2): the two codes' length in the low byte, the LCP difference
 * they encode above it (an arithmetic shift by 8 gives it); 0 for a longer
 * LCP code or another KEYLEN code.
 */
#define LS_Z(i) ((i) >= 512 ? 0 : (i) >= 256 ? 1 : (i) >= 128 ? 2 : 3)
#define LS_N(i) (2 * LS_Z(i) + 3)             /* the LCP code's bits */
#define LS_V(i) (((i) >> (10 - LS_N(i))) - 4) /* the zigzagged difference */
#define LS_D(i) ((LS_V(i) & 1) ? -((LS_V(i) + 1) / 2) : LS_V(i) / 2)
#define LS_E(i)                                                                \
	((i) >= 64 && ((i) >> (9 - LS_N(i))) & 1 ? LS_D(i) * 256 + LS_N(i) + 1 \
	                                         : 0)
#define LS_4(i)   LS_E(i), LS_E((i) + 1), LS_E((i) + 2), LS_E((i) + 3)
#define LS_16(i)  LS_4(i), LS_4((i) + 4), LS_4((i) + 8), LS_4((i) + 12)
#define LS_64(i)  LS_16(i), LS_16((i) + 16), LS_16((i) + 32), LS_16((i) + 48)
#define LS_256(i) LS_64(i), LS_64((i) + 64), LS_64((i) + 128), LS_64((i) + 192)
static const int32_t lcp_short[1024] = {LS_256(0), LS_256(256), LS_256(512),
                                        LS_256(768)};
#undef LS_256
#undef LS_64
#undef LS_16
#undef LS_4
#undef LS_E
#undef LS_D
#undef LS_V
#undef LS_N
#undef LS_Z

/*
 * The rest of a record decoded in line, from bit t on, whose top `valid`
 * bits (9 or more) the window w3 holds: the kind bit (typed), VALLEN
 * relative to vref, the value. False when the code does not lie in those
 * bits or the record does not fit the loop (key and
 * value above BIT_REC bytes, written out of line; fewer than BIT_SPARE
 * bits of stream after it, which need not be checked when the record
 * began below b->safe: `bounded`, a constant).
 */
static SPECIALIZED bool tin_tail(const tin *b, uint64_t t, uint64_t w3,
                                 unsigned valid, uint64_t klen, uint64_t vref,
                                 bool typed, bool bounded, bool *tomb,
                                 uint64_t *vlen, uint64_t *end)
{
	uint64_t d3 = 0, v = 0, w0 = w3, adv; /* the bits from t to the end */
	bool tb = typed && !(w3 >> 63);
	unsigned n3 = 0;
	w3 <<= typed;
	if (__builtin_expect(vref > BIT_SHORT, 1)) {
		if (!tb && (w3 >> 63)) { /* the length unchanged: the code 1 */
			n3 = 1;
			v = vref;
		} else if (!tb) {
			n3 = eg_window(w3, valid - typed, 0, &d3);
			v = seg_unzigzag(vref, d3);
			if (n3 == 0)
				return false;
		}
		adv = typed + n3 + 8 * v; /* 8 * v: see below */
	} else {
		/* after a short value: a VALLEN code of up to 8 bits from a
		 * table, with typed framing the kind bit with it, with no
		 * branch on the code or on a tombstone (with short values of
		 * varying lengths these follow the data); a longer one, not in
		 * a tombstone, decoded so */
		bool table;
		if (typed) {
			unsigned e = vallen_short[vref][w0 >> 55];
			tb = e >> VS_TOMB_BIT; /* the highest bit */
			v = (e >> 8) & 15;
			adv = e & 0xff;
			table = e != 0;
		} else {
			uint32_t e = vallen_codes[w3 >> 56];
			n3 = e & 0xff;
			v = vref + (e >> 8) - VALLEN_BIAS;
			adv = n3 + 8 * v;
			table = n3 != 0;
		}
		if (__builtin_expect(!table, 0)) {
			n3 = eg_window(w3, valid - typed, 0, &d3);
			v = seg_unzigzag(vref, d3);
			if (n3 == 0)
				return false;
			adv = typed + n3 + 8 * v;
		}
	}
	/* key and value within BIT_REC bytes: usually known from the
	 * input's longest key (so 8 * v above did not wrap) */
	if (__builtin_expect(v > b->vmax, 0) &&
	    (v > BIT_REC || klen / 8 + v > BIT_REC))
		return false;
	if (!bounded && b->end - t < adv + BIT_SPARE)
		return false;
	*tomb = tb;
	*vlen = v;
	*end = t + adv;
	return true;
}

/* b's state after a record decoded in line (see tin): its key's bits from
 * flcp lie in the stream from bit x. */
static SPECIALIZED void tin_set(tin *b, uint64_t klen, uint64_t lcp,
                                uint64_t flcp, uint64_t x, bool tomb,
                                uint64_t vlen, uint64_t end)
{
	b->len = klen;
	b->lcp = lcp;
	b->flcp = flcp;
	b->inl = true;
	b->edge = false;
	b->x = x;
	b->vref = b->fvlen;
	/* a select, not a branch on a tombstone, whose place follows the
	 * data */
	b->fvlen = tomb ? b->fvlen : vlen;
	b->vlen = vlen;
	b->tomb = tomb;
	b->pos = end;
}

/*
 * The next record of b in the usual case: inside b's budget, no restart,
 * codes that lie in one 64-bit window each, a key of the input's bounds
 * that follows the previous key at its LCP field (a 1 there, where the
 * previous key has a 0 or ends: the LCP is whole and the key larger), key
 * and value within BIT_REC bytes, and BIT_SPARE bits of stream after the
 * value. False (b unchanged) otherwise. typed: the framing as a constant.
 * See tin_next_fast for the budget.
 */
static SPECIALIZED bool tin_next_in(tin *b, bool typed)
{
	uint64_t pos = b->pos, len = b->len;
	/* below safe the windows at pos, at the suffix and after it lie in
	 * the stream, and so does a record of at most BIT_REC bytes of key
	 * and value with BIT_SPARE bits after it: the codes before the
	 * suffix take at most 114 bits, the suffix at most max_len, the
	 * kind bit and VALLEN 58 */
	if (pos >= b->safe)
		return false;
	const uint8_t *s = b->s;
	uint64_t w = bits57(s, pos), d1, d2;
	/* below lim: the new key has a bit at lcp (klen > lcp), and the
	 * previous key's word at lcp is in its buffer (lcp < mlen, or
	 * lcp <= mlen = len); usually the key's length is unchanged (the
	 * code 1), and then mlen <= len = klen makes lim mlen */
	uint64_t lim = b->mlen, lcp, klen = len, h;
	bool ends = false; /* the previous key ends at lcp */
	int32_t e = lcp_short[w >> 54];
	if (__builtin_expect(e != 0, 1)) { /* short LCP code, KEYLEN 1 */
		lcp = b->flcp + (uint64_t)(int64_t)(e >> 8);
		h = (uint64_t)(e & 0xff);
	} else {
		unsigned n1 = eg_window(w, 57, 2, &d1), n2 = 1;
		if (n1 == 0)
			return false;
		lcp = seg_unzigzag(b->flcp, d1);
		if (!((w << n1) >> 63)) {
			if ((n2 = eg_window(w << n1, 57 - n1, 0, &d2)) == 0)
				return false;
			/* KEYLEN's previous value is the key's length */
			klen = seg_unzigzag(len, d2);
			if (lcp > len || klen > b->max_len)
				return false;
			ends = lcp == len;
			lim = lim < len ? lim : UINT64_MAX; /* lcp <= len */
			lim = lim < klen ? lim : klen;
			/* set before the record is taken: where it is not,
			 * the restart or the slow path that takes it sets
			 * them again */
			if (klen)
				tin_key_end(b, klen);
		}
		h = n1 + n2;
	}
	if (lim <= lcp)
		return false;
	uint64_t x = pos + h; /* the suffix's first bit */
	uint64_t j = lcp / 64, slen = klen - lcp;
	unsigned off = (unsigned)(lcp % 64);
	uint8_t *k = b->key + 8 * j;
	uint64_t old = kvs_load_be64(k), first, w3;
	unsigned valid;
	if (h + slen <= 32) {
		/* a short suffix (structured keys): the suffix and the kind
		 * bit and VALLEN after it (25 bits or more of them) lie in w,
		 * which saves two loads on the path from one record to the
		 * next; the word takes first's top min(64 - off, slen) bits */
		first = w << h;
		w3 = first << slen;
		valid = 57 - (unsigned)(h + slen);
	} else {
		/* the word takes first's top 64 - off bits: bits57's unless
		 * off < 7 */
		first = bits57(s, x);
		if (__builtin_expect(off < 7, 0))
			first = bits64(s, x);
		w3 = bits57(s, x + slen);
		valid = 57;
	}
	/* the previous key's bit at lcp (read, not used, when it ends) */
	bool follows = (first >> 63) & (ends | !((old << off) >> 63));
	if (!follows)
		return false;
	/* the suffix into the key, in whole words: the first (made before
	 * the tail, which then keeps one value live, not two) */
	uint64_t keep = ~(~(uint64_t)0 >> off);
	uint64_t word = (old & keep) | (first >> off);
	bool tomb;
	uint64_t vlen, end;
	if (!tin_tail(b, x + slen, w3, valid, klen, b->fvlen, typed, true,
	              &tomb, &vlen, &end))
		return false;
	/* the words after this one are left in the stream (tin_fill): most
	 * merges of long suffixes order keys by their first words */
	if (j < b->lastw) {
		kvs_store_be64(b->key + 8 * j, word);
		b->mlen = 64 * j + 64;
		b->kx = x + 64 - off;
	} else {
		kvs_store_be64(b->key + 8 * j, word & b->lmask);
		b->mlen = klen;
	}
	tin_set(b, klen, lcp, lcp, x, tomb, vlen, end);
	return true;
}

/* tin_next_in inside b's budget: the budget is taken first (a subtraction
 * and a branch on its borrow, not a load, a test and a store) and given
 * back where the record is not taken. */
static SPECIALIZED bool tin_next_fast(tin *b, bool typed)
{
	if (__builtin_sub_overflow(b->budget, 1, &b->budget)) {
		b->budget = 0;
		return false;
	}
	if (__builtin_expect(tin_next_in(b, typed), 1))
		return true;
	b->budget++;
	return false;
}

/*
 * The next record of b when it is an input restart (its whole key, the
 * field states from 0), in the usual case: codes in one window each, a
 * key of the input's bounds above the previous one, key and value within
 * BIT_REC bytes, BIT_SPARE bits of stream after the value. Its LCP with
 * the previous key is found from the stream before the key is stored.
 * False (b unchanged) otherwise.
 */
static SPECIALIZED bool tin_restart(tin *b, bool typed)
{
	uint64_t pos = b->pos, len = b->len, d2;
	if (b->end - pos < 2 * BIT_SPARE)
		return false;
	tin_fill(b); /* the previous key, compared whole */
	const uint8_t *s = b->s;
	unsigned n2 = eg_window(bits64(s, pos), 64, 0, &d2);
	uint64_t klen = seg_unzigzag(0, d2), x = pos + n2;
	if (n2 == 0 || klen == 0 || klen > b->max_len ||
	    b->end - x < klen + 2 * BIT_SPARE)
		return false;
	/* the order, and the LCP: a difference past the shorter key is the
	 * longer key's bits (or the stream's after the new key) */
	uint64_t n = klen < len ? klen : len, lcp = n;
	int cmp = klen < len ? -1 : klen > len;
	for (uint64_t j = 0; 64 * j < n; j++) {
		uint64_t nw = bits64(s, x + 64 * j),
		         ow = kvs_load_be64(b->key + 8 * j);
		if (nw != ow) {
			uint64_t d = 64 * j + (unsigned)__builtin_clzll(nw ^ ow);
			if (d < n) {
				lcp = d;
				cmp = nw > ow ? 1 : -1;
			}
			break;
		}
	}
	if (cmp <= 0)
		return false;
	bool tomb;
	uint64_t vlen, end;
	if (!tin_tail(b, x + klen, bits57(s, x + klen), 57, klen, 0, typed,
	              false, &tomb, &vlen, &end))
		return false;
	tin_key_end(b, klen);
	uint64_t last = b->lastw;
	for (uint64_t j = 0; j < last; j++)
		kvs_store_be64(b->key + 8 * j, bits64(s, x + 64 * j));
	kvs_store_be64(b->key + 8 * last, bits64(s, x + 64 * last) & b->lmask);
	b->fvlen = 0; /* the field states restart from 0 */
	b->mlen = klen;
	tin_set(b, klen, lcp, 0, x, tomb, vlen, end);
	return true;
}

/* The next record of b in any other case, through the cursor's decoder,
 * with its LCP computed against a copy of the previous key; *live false
 * at the end. */
static __attribute__((noinline)) kvs_status
tin_next_slow(tfast *f, size_t i, bool *live)
{
	tin *b = &f->in[i];
	uint64_t used = b->granted - b->budget;
	tin_fill(b); /* the cursor decodes from the previous key */
	b->left -= used;
	b->in_block += (uint32_t)used;
	if (b->left == 0) {
		*live = false;
		b->budget = b->granted = 0;
		b->lcp = 0; /* see tree_replay */
		return KVS_OK;
	}
	merge *m = f->m;
	kvs_cursor *c = m->cur[i];
	const kvs_segment *s = c->seg;
	c->ordinal = s->records - 1 - b->left;
	c->in_block = b->in_block;
	c->key_bits = b->len;
	c->prev_lcp = b->flcp;
	c->prev_keylen = b->len;
	c->prev_vallen = b->fvlen;
	uint64_t rec = s->records - b->left; /* the record decoded */
	kvs_status st = kvs_br_seek(&c->br, b->pos); /* pos <= the length */
	/* in words: the key was just stored so (a wider load would wait) */
	copy_words(f->old, b->key, 8 * ((b->len + 63) / 64));
	if (st == KVS_OK)
		st = seg_cursor_next_with(c, KVS_PROFILE_BIT, seg_default_fields);
	if (st != KVS_OK)
		return kvs_error_set(m->err, st,
		                     "input %zu: record %" PRIu64 ": %s", i,
		                     rec, kvs_strerror(st));
	int cmp;
	uint64_t lcp = seg_key_lcp(c->key, c->key_bits, f->old, b->len, &cmp);
	if (cmp <= 0)
		return kvs_error_set(m->err, KVS_E_CORRUPT,
		                     "input %zu: record %" PRIu64
		                     ": its key is not above the previous one: %s",
		                     i, rec, kvs_strerror(KVS_E_CORRUPT));
	tin_from_cursor(b, c);
	b->lcp = lcp;
	b->in_block = c->in_block;
	b->left--;
	tin_grant(b);
	return KVS_OK;
}

/*
 * The order of the two inputs' keys and their LCP in bits, from their
 * LCPs with the last output key P, which both are above (see heads_lcp):
 * the keys are compared from the word of the smaller one on, which finds
 * their first difference in that word whenever the two differ. Keys are
 * kept in whole words with their padding bits clear. An input's word at
 * its LCP is in its buffer (tin.mlen): the LCP that the input whose key is
 * the larger keeps is the one returned, and where that lies past its
 * buffer's bits the rest of its key is stored (equal keys both move on).
 */
static SPECIALIZED uint64_t tin_heads_lcp(tin *a, tin *b, int *cmp)
{
	uint64_t la = a->lcp, lb = b->lcp, m = la < lb ? la : lb;
	uint64_t n = a->len < b->len ? a->len : b->len;
	/* the first word out of the loop: as its first round, 2% more
	 * instructions on structured keys (callgrind) */
	uint64_t i = m / 64 * 8;
	uint64_t x = kvs_load_be64(a->key + i), y = kvs_load_be64(b->key + i);
	uint64_t d = 8 * i + (unsigned)__builtin_clzll((x ^ y) | 1);
	if (__builtin_expect(x != y && d < n, 1)) {
		*cmp = x > y ? 1 : -1;
		return d;
	}
	/* the words after it: from the stream where a buffer ends (after
	 * equal keys, usual in overlapping inputs, both move on, and
	 * neither key is needed whole) */
	d = n;
	*cmp = a->len < b->len ? -1 : a->len > b->len;
	for (i += 8; 8 * i < n; i += 8) {
		x = tin_word(a, i / 8);
		y = tin_word(b, i / 8);
		if (x != y) {
			uint64_t e = 8 * i + (unsigned)__builtin_clzll(x ^ y);
			if (e < n) { /* else past the shorter key: a prefix */
				d = e;
				*cmp = x > y ? 1 : -1;
			}
			break;
		}
	}
	tin *larger = *cmp < 0 ? b : a; /* equal keys: see tin_match */
	if (*cmp != 0 && d >= larger->mlen)
		tin_fill(larger);
	return d;
}

/* The next record of b when its budget is spent and it is the usual
 * restart (tin_restart), in line; false (b unchanged) otherwise. */
static SPECIALIZED bool tin_next_restart(tin *b, bool typed)
{
	uint64_t used = b->granted - b->budget;
	if (b->left == used || b->in_block + used + 1 != b->K ||
	    !tin_restart(b, typed))
		return false;
	b->left -= used + 1;
	b->in_block = 0;
	tin_grant(b);
	return true;
}

/* Input records consumed so far (kvs_merge_stats.input_records). */
static uint64_t tfast_consumed(const tfast *f, const bool *live)
{
	uint64_t n = 0;
	for (size_t i = 0; i < f->n; i++) {
		const tin *b = &f->in[i];
		uint64_t records = f->m->cur[i]->seg->records;
		uint64_t left = b->left - (b->granted - b->budget);
		n += live[i] ? records - 1 - left : records;
	}
	return n;
}

/* Appends bits [start, start + n) of a key kept in whole aligned words
 * (loads of such words are forwarded from the stores that wrote them),
 * with a word to spare after its last. */
static SPECIALIZED void tout_key_bits(fast_bw *o, const uint8_t *key,
                                      uint64_t start, uint64_t n)
{
	const uint8_t *k = key + start / 64 * 8;
	unsigned off = (unsigned)(start % 64);
	for (; n; k += 8) {
		uint64_t v = kvs_load_be64(k);
		if (off)
			v = v << off | kvs_load_be64(k + 8) >> (64 - off);
		if (n < 64) {
			fbw_put_any(o, v >> (64 - n), (unsigned)n);
			return;
		}
		fbw_put64(o, v);
		n -= 64;
	}
}

/*
 * Appends the nc bits of code (1 to 56), then n bits of s from bit x
 * (BIT_SPARE bits readable after them). The code joins the pending bits,
 * and the output's bytes from p on are the stream's bits from x less the
 * pending ones (these first), so the output is stored in 56-bit chunks,
 * chunk i the 8 bytes at q + 7i shifted by d: one load, one shift and one
 * store each, and no chunk waits for another (each store's last byte is
 * overwritten by the next).
 */
static SPECIALIZED void tout_code_stream(fast_bw *o, uint64_t code, unsigned nc,
                                         const uint8_t *s, uint64_t x,
                                         uint64_t n)
{
	/* nc is never 0: the tests on it are for GCC, whose merge loops
	 * came out 1% longer without them (callgrind, structured FF16) */
	unsigned ob = o->bits + nc; /* at most 63 */
	if (__builtin_expect(x < 64, 0)) { /* x - ob may precede the stream */
		if (nc)
			fbw_put(o, code, nc);
		for (; n >= 56; n -= 56, x += 56)
			fbw_put(o, bits64(s, x) >> 8, 56);
		if (n)
			fbw_put(o, bits64(s, x) >> (64 - n), (unsigned)n);
		return;
	}
	uint64_t acc = o->acc | (nc ? code << (64 - ob) : 0); /* joins them */
	uint64_t y = x - ob, total = ob + n;
	const uint8_t *q = s + y / 8;
	unsigned d = (unsigned)(y & 7);
	/* the bits after the pending ones, which are 0 in acc */
	uint64_t after = ~(uint64_t)0 >> ob;
	uint8_t *p = o->p;
	/* a long value: the first word, then 32-byte blocks (out of line),
	 * then chunks */
	if (__builtin_expect(total >= 64 + 256 + 64, 0)) {
		uint64_t first = acc | (kvs_load_be64(q) << d & after);
		kvs_store_be64(p, first | (kvs_load_be64(q + 8) >> 1) >> (63 - d));
		p += 8;
		q += 8;
		total -= 64;
		/* output byte j is now q[j] << d | q[j + 1] >> (8 - d); the
		 * blocks read q[0 .. 32 blocks], within the total bits */
		size_t blocks = (size_t)((total - 64) / 256);
		seg_copy_shifted(p, q, d, 32 * blocks);
		p += 32 * blocks;
		q += 32 * blocks;
		total -= 256 * (uint64_t)blocks;
		acc = 0; /* nothing pending */
		after = ~(uint64_t)0;
	}
	/* chunks until the total's whole bytes are stored; the bits of its
	 * last byte, if any, stay pending: output byte nb (its load ends at
	 * most 64 bits past the total) */
	uint64_t nb = total / 8;
	unsigned rest = (unsigned)total & 7;
	uint64_t c = acc | (kvs_load_be64(q) << d & after);
	kvs_store_be64(p, c);
	if (__builtin_expect(total - 104 < 120, 1)) {
		/* up to 28 bytes: chunks 1 to 3 without a loop, whose exit
		 * would follow the length (loads: up to 232 bits from y, at
		 * most 128 past the total) */
		kvs_store_be64(p + 7, kvs_load_be64(q + 7) << d);
		kvs_store_be64(p + 14, kvs_load_be64(q + 14) << d);
		kvs_store_be64(p + 21, kvs_load_be64(q + 21) << d);
	} else if (__builtin_expect(total - 48 < 120, 1)) {
		/* up to 21 bytes: chunks 1 and 2 (loads: up to 176 bits) */
		kvs_store_be64(p + 7, kvs_load_be64(q + 7) << d);
		kvs_store_be64(p + 14, kvs_load_be64(q + 14) << d);
	} else {
		for (uint64_t i = 7; i < nb; i += 7)
			kvs_store_be64(p + i, kvs_load_be64(q + i) << d);
	}
	uint64_t last = nb ? kvs_load_be64(q + nb) << d : c;
	o->p = p + nb;
	o->acc = last & ~(~(uint64_t)0 >> rest);
	o->bits = rest;
}

/* The nc bits of code (1 to 56), then n bits of s from bit x: one put
 * when they fit in one, the stream copy for more than 56 bits of s. */
static SPECIALIZED void tout_code_bits(fast_bw *o, uint64_t code, unsigned nc,
                                       const uint8_t *s, uint64_t x, uint64_t n)
{
	if (nc + n <= 56) {
		uint64_t v = bits57(s, x) >> 1 >> (63 - n); /* n may be 0 */
		fbw_put(o, code << n | v, nc + (unsigned)n);
	} else if (n > 56) {
		tout_code_stream(o, code, nc, s, x, n);
	} else { /* n bits within the 57 of one load */
		fbw_put(o, code, nc);
		fbw_put(o, bits57(s, x) >> (64 - n), (unsigned)n);
	}
}

/* The kind bit, VALLEN and the value of a record (from the stream). */
static SPECIALIZED void tout_tail(tout *o, const tin *b, bool typed)
{
	fast_bw *bw = &o->bw;
	uint64_t vlen = b->vlen;
	unsigned n3;
	if (typed && b->tomb) {
		fbw_put(bw, 0, 1);
		o->tombstones++;
	} else {
		uint64_t x3 = seg_eg_code(seg_zigzag(vlen, o->fvlen), 0, &n3);
		tout_code_bits(bw, (uint64_t)typed << n3 | x3, n3 + typed, b->s,
		               tin_vpos(b), 8 * vlen);
		o->fvlen = vlen;
	}
}

/*
 * With typed framing, the kind bit and the VALLEN code of a value of v <=
 * BIT_SHORT bytes after one of r <= BIT_SHORT bytes, by r and v (7 for a
 * tombstone: the kind bit 0): the code in bits 8 to 15, its length in the
 * low byte, VALLEN's state after it (v, or r after a tombstone) above
 * (FORMAT.md §3.1, §6.2).
 */
#define TS_Z(r, v) ((v) >= (r) ? 2 * ((v) - (r)) : 2 * ((r) - (v)) - 1)
#define TS_N(z)    ((z) + 1 >= 8 ? 7 : (z) + 1 >= 4 ? 5 : (z) + 1 >= 2 ? 3 : 1)
#define TS_E(r, v)                                                             \
	((v) == 7 ? (uint32_t)(r) << 16 | 1u                                   \
	          : (uint32_t)(v) << 16 |                                      \
	                (1u << TS_N(TS_Z(r, v)) | (TS_Z(r, v) + 1)) << 8 |     \
	                (TS_N(TS_Z(r, v)) + 1))
#define TS_ROW(r)                                                              \
	{                                                                      \
		TS_E(r, 0), TS_E(r, 1), TS_E(r, 2), TS_E(r, 3), TS_E(r, 4),    \
		    TS_E(r, 5), TS_E(r, 6), TS_E(r, 7)                         \
	}
static const uint32_t tail_short[BIT_SHORT + 1][8] = {
    TS_ROW(0), TS_ROW(1), TS_ROW(2), TS_ROW(3),
    TS_ROW(4), TS_ROW(5), TS_ROW(6)};
#undef TS_ROW
#undef TS_E
#undef TS_N
#undef TS_Z

/*
 * A usual record (see tout_usual) with a short suffix and a short value
 * (BIT_SHORT): the codes and the suffix in one put, then the kind bit,
 * VALLEN and the value anew in another, with no branch on whether the
 * input's would do or on a tombstone: with short values of varying
 * lengths these follow the data, and the branches mispredicted.
 */
static SPECIALIZED void tout_short(tout *o, const tin *b, bool typed,
                                   uint64_t codes, unsigned nc, uint64_t from,
                                   uint64_t slen)
{
	/* the writer's state in registers between the puts: GCC stored it
	 * after each */
	fast_bw lbw = o->bw, *bw = &lbw;
	/* one put (see the caller) */
	tout_code_bits(bw, codes, nc, b->s, from, slen);
	/* all ones for a tombstone: selects with masks (with ?: on the
	 * bool, GCC's code for merge-disjoint-prefix-6 was 1.7 times as
	 * slow; a narrow spill read back wide, which the CPU cannot forward,
	 * is our guess) */
	uint64_t t = typed ? (uint64_t)b->tomb : 0, tm = 0 - t;
	uint64_t vlen = b->vlen, vb = 8 * vlen; /* 0 for a tombstone */
	uint64_t code, cnt, fvlen;
	if (typed && o->fvlen <= BIT_SHORT) {
		/* after a short value, from a table */
		uint32_t e = tail_short[o->fvlen][vlen + 7 * t];
		code = (e >> 8) & 0xff;
		cnt = e & 0xff;
		fvlen = e >> 16;
	} else {
		unsigned n3;
		uint64_t x3 = seg_eg_code(seg_zigzag(vlen, o->fvlen), 0, &n3);
		uint64_t cn = n3 + typed;
		code = ((uint64_t)typed << n3 | x3) & ~tm;
		cnt = cn - ((cn - 1) & tm); /* 1: the kind */
		fvlen = vlen ^ ((vlen ^ o->fvlen) & tm);
	}
	/* one put, but after a long value (a long VALLEN code) */
	tout_code_bits(bw, code, (unsigned)cnt, b->s, tin_vpos(b), vb);
	o->bw = lbw;
	o->tombstones += t;
	o->fvlen = fvlen;
}

/* The rest of a record field by field: the suffix from the key, then the
 * tail (a record decoded out of line). */
static void tout_fields(tout *o, tin *b, bool typed)
{
	fast_bw *bw = &o->bw;
	uint64_t lcp = b->lcp, len = b->len;
	tin_fill(b);
	tout_key_bits(bw, b->key, lcp, len - lcp);
	tout_tail(o, b, typed);
}

/* The output's state after a record of b whose LCP field is lcp, but for
 * its key's length (tout_len). */
static SPECIALIZED void tout_done(tout *o, const tin *b, uint64_t lcp)
{
	o->flcp = lcp;
	o->key_bits += b->len;
	o->value_bytes += b->vlen;
}

/* The output's KEYLEN state after a key of len bits. */
static SPECIALIZED void tout_len(tout *o, uint64_t len)
{
	o->prev_len = len;
	if (len > o->max_len)
		o->max_len = len;
}

/*
 * The delta-EG2 code of an LCP difference d in [-LE_BIAS, LE_BIAS) and the
 * KEYLEN code 1 after it (the length unchanged), by d + LE_BIAS: the two
 * codes above the low byte, their length in it (FORMAT.md §3.1, §6.2).
 */
#define LE_BIAS 32
#define LE_Z(d) ((d) >= 0 ? 2 * (d) : -2 * (d)-1) /* zigzagged */
#define LE_N(x)                                                                \
	((x) >= 64 ? 11 : (x) >= 32 ? 9 : (x) >= 16 ? 7 : (x) >= 8 ? 5 : 3)
#define LE_E(i)                                                                \
	((uint32_t)((LE_Z((i)-LE_BIAS) + 4) << 1 | 1) << 8 |                   \
	 (LE_N(LE_Z((i)-LE_BIAS) + 4) + 1))
#define LE_4(i)  LE_E(i), LE_E((i) + 1), LE_E((i) + 2), LE_E((i) + 3)
#define LE_16(i) LE_4(i), LE_4((i) + 4), LE_4((i) + 8), LE_4((i) + 12)
static const uint32_t lcp_codes[2 * LE_BIAS] = {LE_16(0), LE_16(16), LE_16(32),
                                                LE_16(48)};
#undef LE_16
#undef LE_4
#undef LE_E
#undef LE_N
#undef LE_Z

/* A record that is not a restart, with room for it: its key and value
 * below BIT_REC bytes, so every code below 2^32. */
static SPECIALIZED void tout_usual(tout *o, tin *b, bool typed)
{
	fast_bw *bw = &o->bw;
	uint64_t lcp = b->lcp, len = b->len, vlen = b->vlen;
	uint64_t codes, di = lcp - o->flcp + LE_BIAS;
	unsigned nc;
	if (__builtin_expect(di < 2 * LE_BIAS && len == o->prev_len, 1)) {
		/* usually: a small LCP difference, the length unchanged */
		uint32_t e = lcp_codes[di];
		codes = e >> 8;
		nc = e & 0xff;
	} else {
		unsigned n1, n2 = 1;
		uint64_t x1 = seg_eg_code(seg_zigzag(lcp, o->flcp), 2, &n1);
		uint64_t x2 = 1; /* the length unchanged: the code 1 */
		if (len != o->prev_len) {
			x2 = seg_eg_code(seg_zigzag(len, o->prev_len), 0, &n2);
			tout_len(o, len);
		}
		/* the two codes in one put, put with what follows where it
		 * fits (below); in two, the second put so */
		codes = x1 << n2 | x2;
		nc = n1 + n2;
		if (nc > 56) {
			fbw_put(bw, x1, n1);
			codes = x2;
			nc = n2;
		}
	}
	/*
	 * The usual record: the rest is a copy of the input's. The last
	 * output key P lies between the input's previous key and this one,
	 * so it shares at least the LCP field's bits with this key: the
	 * suffix is the end of the input's, and when the VALLEN code has the
	 * same reference (or there is none) the bits after it are the same.
	 */
	if (b->inl && lcp >= b->flcp) {
		uint64_t from = b->x + (lcp - b->flcp), slen = len - lcp;
		if (vlen <= BIT_SHORT && nc + slen <= 56) {
			tout_short(o, b, typed, codes, nc, from, slen);
		} else if (b->vref == o->fvlen || (typed && b->tomb)) {
			tout_code_stream(bw, codes, nc, b->s, from,
			                 b->pos - from);
			if (typed && b->tomb)
				o->tombstones++;
			else
				o->fvlen = vlen;
		} else { /* the suffix, then the fields after it anew */
			tout_code_bits(bw, codes, nc, b->s, from, slen);
			tout_tail(o, b, typed);
		}
	} else {
		fbw_put(bw, codes, nc);
		tout_fields(o, b, typed);
	}
	tout_done(o, b, lcp);
}

/* The writer's state from o, with out records in all (as bout_sync). */
static void tout_sync(kvs_writer *w, const tout *o, uint64_t out)
{
	uint64_t until = o->until_restart - (o->granted - o->budget);
	fbw_store(&w->bw, &o->bw);
	w->records = out;
	w->tombstones = o->tombstones;
	w->key_bits = o->key_bits;
	w->value_bytes = o->value_bytes;
	w->max_key_bits = o->max_len;
	w->prev_bits = o->prev_len;
	w->prev_lcp = o->flcp;
	w->prev_keylen = o->prev_len;
	w->prev_vallen = o->fvlen;
	w->in_block = until ? o->K - (uint32_t)until : 0;
}

/* o from the writer's state, with room for a chunk of records. */
static kvs_status tout_load(tout *o, kvs_writer *w, kvs_error *err)
{
	kvs_status st;
	if (w->bw.len >= FAST_CHUNK && (st = seg_writer_flush(w, err)) != KVS_OK)
		return st;
	if (kvs_bw_reserve_slow(&w->bw, FAST_CHUNK + BIT_MAXREC) != KVS_OK)
		return seg_writer_fail(w, err, KVS_E_NOMEM, "%s: %s",
		                       "out of memory");
	o->bw = fbw_load(&w->bw);
	o->tombstones = w->tombstones;
	o->key_bits = w->key_bits;
	o->value_bytes = w->value_bytes;
	o->max_len = w->max_key_bits;
	o->prev_len = w->prev_bits;
	o->flcp = w->prev_lcp;
	o->fvlen = w->prev_vallen;
	o->K = w->opt.restart_interval;
	o->until_restart = w->in_block ? o->K - w->in_block : 0;
	uint64_t room =
	    (uint64_t)(w->bw.buf + w->bw.cap - o->bw.p) / BIT_MAXREC;
	o->granted = o->budget =
	    o->until_restart < room ? o->until_restart : room;
	return KVS_OK;
}

/* The LCP of two keys kept in whole words with their padding bits clear
 * (a word to spare after each). */
static uint64_t words_lcp(const uint8_t *a, uint64_t la, const uint8_t *b,
                          uint64_t lb)
{
	uint64_t n = la < lb ? la : lb;
	for (uint64_t i = 0; 8 * i < n; i += 8) {
		uint64_t x = kvs_load_be64(a + i), y = kvs_load_be64(b + i);
		if (x != y) {
			uint64_t d = 8 * i + (unsigned)__builtin_clzll(x ^ y);
			return d < n ? d : n;
		}
	}
	return n;
}

/* seg_key_fence of a key kept so: its bits [skip, skip + 32), zero past
 * its end. */
static uint32_t words_fence(const uint8_t *key, uint64_t bits, uint64_t skip)
{
	if (bits <= skip)
		return 0;
	const uint8_t *k = key + skip / 64 * 8;
	unsigned off = (unsigned)(skip % 64);
	uint64_t v = kvs_load_be64(k) << off;
	if (off > 32) /* the bits past the key's last word are masked below */
		v |= kvs_load_be64(k + 8) >> (64 - off);
	uint32_t f = (uint32_t)(v >> 32);
	uint64_t avail = bits - skip;
	if (avail < 32)
		f &= ~(uint32_t)0 << (32 - avail);
	return f;
}

/* An output restart, when b is the usual record and the buffer has room
 * for it: its place in the restart index and its fence
 * (seg_writer_restart), its whole key, its fields from 0, and the next
 * budget; false (nothing done) otherwise. */
static SPECIALIZED bool tout_try_restart(tfast *f, tin *b, bool typed)
{
	kvs_writer *w = f->m->w;
	tout *o = &f->o;
	fast_bw *bw = &o->bw;
	uint64_t room = (uint64_t)(w->bw.buf + w->bw.cap - bw->p) / BIT_MAXREC;
	if (o->until_restart != o->granted - o->budget || b->edge ||
	    room == 0 || (size_t)(bw->p - w->bw.buf) >= FAST_CHUNK)
		return false;
	uint64_t len = b->len;
	tin_fill(b); /* written whole */
	uint64_t at = words_lcp(f->first, f->first_len, b->key, len);
	size_t j = w->restarts_len++; /* room: loop_setup */
	w->restarts[j] =
	    8 * (w->flushed + (uint64_t)(bw->p - w->bw.buf)) + bw->bits;
	w->fence_skip[j] = at;
	w->fence_win[j] = words_fence(b->key, len, at);
	unsigned n2;
	uint64_t x2 = seg_eg_code(seg_zigzag(len, 0), 0, &n2);
	fbw_put(bw, x2, n2);
	tout_key_bits(bw, b->key, 0, len);
	o->fvlen = 0; /* the field states restart from 0 */
	tout_tail(o, b, typed);
	tout_done(o, b, 0);
	tout_len(o, len);
	o->until_restart = o->K - 1;
	room--;
	o->granted = o->budget =
	    o->until_restart < room ? o->until_restart : room;
	return true;
}

/* An output restart with a progress callback (a call at each), the
 * buffer's end, or an unusual or long record: the usual restart by
 * tout_restart, the others through the writer's general path. */
static __attribute__((noinline)) kvs_status
tout_put_slow(tfast *f, tin *b, const bool *live, bool typed)
{
	merge *m = f->m;
	kvs_writer *w = m->w;
	tout *o = &f->o;
	uint64_t until = o->until_restart - (o->granted - o->budget);
	uint64_t consumed;
	kvs_status st;
	if (until == 0 && m->opt->progress &&
	    (consumed = tfast_consumed(f, live)) >= m->next_progress &&
	    (st = report_progress(m, consumed)) != KVS_OK)
		return st;
	if (tout_try_restart(f, b, typed))
		return KVS_OK;
	consumed = tfast_consumed(f, live);
	tout_sync(w, o, consumed - m->st.replaced - m->st.dropped);
	project_hint(m, consumed); /* for tout_load's flush */
	tin_fill(b);
	st = seg_writer_add_read(
	    w, b->key, b->len, b->tomb ? KVS_KIND_TOMBSTONE : KVS_KIND_VALUE,
	    b->s + tin_vpos(b) / 8, (unsigned)(tin_vpos(b) & 7), (size_t)b->vlen,
	    KVS_PROFILE_BIT, seg_default_fields, b->lcp, m->err);
	if (st != KVS_OK)
		return st;
	return tout_load(o, w, m->err);
}

static SPECIALIZED kvs_status tout_put(tfast *f, tin *b, const bool *live,
                                       bool typed)
{
	tout *o = &f->o;
	if (__builtin_expect(o->budget == 0 || b->edge, 0)) {
		/* the usual output restart in line, unless progress is
		 * reported (tout_put_slow) */
		if (!f->m->opt->progress && tout_try_restart(f, b, typed))
			return KVS_OK;
		return tout_put_slow(f, b, live, typed);
	}
	tout_usual(o, b, typed);
	o->budget--;
	return KVS_OK;
}

/* Can merge_two_bits_fast (two inputs) or merge_tree_bits_fast take this
 * merge? */
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
	if ((st = emit_with(m, cmp < 0 ? 0 : 1, KVS_PROFILE_BIT,
	                    seg_default_fields)) != KVS_OK)
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
KVS_MULTIVERSION NO_SLP static kvs_status merge_two_bits_fast(merge *m)
{
	if (m->w->opt.framing == KVS_FRAMING_TYPED)
		return merge_two_bits_with(m, true, false);
	return merge_two_bits_with(m, false, false);
}

/* A strong delete (typed framing), in a function of its own: in
 * merge_two_bits_fast, a third instance of the loop cost the others 0.6%
 * more instructions (callgrind, merge-disjoint-hash-6 typed-bit). */
KVS_MULTIVERSION NO_SLP static kvs_status merge_two_bits_drop(merge *m)
{
	return merge_two_bits_with(m, true, true);
}

static kvs_status merge_two(merge *m)
{
	const kvs_writer *w = m->w;
	const kvs_segment *a = m->cur[0]->seg, *b = m->cur[1]->seg;
	bool out_byte = w->opt.profile == KVS_PROFILE_BYTE;
	if (out_byte && a->profile == KVS_PROFILE_BYTE &&
	    b->profile == KVS_PROFILE_BYTE)
		return bytes_fast_fits(m) ? merge_two_bytes_fast(m)
		                          : merge_two_byte(m);
	if (!out_byte && w->default_codes && a->profile == KVS_PROFILE_BIT &&
	    a->default_codes && b->profile == KVS_PROFILE_BIT &&
	    b->default_codes)
		return !bits_fast_fits(m) ? merge_two_bit(m)
		       : m->opt->drop_tombstones &&
		               w->opt.framing == KVS_FRAMING_TYPED
		           ? merge_two_bits_drop(m)
		           : merge_two_bits_fast(m);
	if (out_byte)
		return merge_two_with(m, IN_ANY, KVS_PROFILE_BYTE,
		                      seg_default_fields);
	return merge_two_with(m, IN_ANY, KVS_PROFILE_BIT, w->fields);
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

/* Instantiated for the usual modes, as merge_two_byte and merge_two_bit. */
FLATTEN static kvs_status merge_tree_byte(merge *m)
{
	return merge_tree_with(m, IN_BYTE, KVS_PROFILE_BYTE,
	                       seg_default_fields);
}

/* Also built for x86-64-v3 (kvseg/cpu.h), whose LZCNT and BMI2 shifts the
 * cursors' EG decoders use: a 3-way merge of 65,536 typed-bit records per
 * input took 131-136 ns per record instead of 147-165 (five alternated
 * runs). merge_two_bit gained nothing measurable and is built once. */
KVS_MULTIVERSION FLATTEN static kvs_status merge_tree_bit(merge *m)
{
	return merge_tree_with(m, IN_BIT_DEFAULT, KVS_PROFILE_BIT,
	                       seg_default_fields);
}

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

/*
 * replay over the in-line loops' inputs, with their match (a constant);
 * build (a constant) while the tree is built. The matches first compare
 * the inputs' LCPs with the last output key, which decide unless they are
 * equal: an input that has ended has an LCP of 0 (tin_next_slow,
 * bin_next_slow), so that it loses to any input with more and only a tie
 * looks at live[].
 */
static SPECIALIZED void
tree_replay(merge *m, void *in, const bool *live, size_t i, bool build,
            bool (*match_in)(void *, const bool *, size_t, size_t))
{
	size_t winner = i, *tree = m->tree; /* each node read once */
	for (size_t node = (m->n + i) / 2; node >= 1; node /= 2) {
		size_t t = tree[node];
		if (build && t == EMPTY) {
			tree[node] = winner;
			return;
		}
		if (match_in(in, live, t, winner)) {
			tree[node] = winner;
			winner = t;
		}
	}
	tree[0] = winner;
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
	if ((st = emit_with(m, top, KVS_PROFILE_BIT, seg_default_fields)) !=
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
KVS_MULTIVERSION NO_SLP static kvs_status merge_tree_bits_drop(merge *m);

KVS_MULTIVERSION NO_SLP static kvs_status merge_tree_bits_fast(merge *m)
{
	if (m->w->opt.framing == KVS_FRAMING_TYPED)
		return m->opt->drop_tombstones
		           ? merge_tree_bits_drop(m)
		           : merge_tree_bits_with(m, true, false);
	return merge_tree_bits_with(m, false, false);
}

/* A strong delete in a function of its own, as merge_two_bits_drop: with
 * its loop the third in merge_tree_bits_fast, GCC stopped inlining fbw_put
 * and seg_unzigzag in the other two, and a 4-way typed-bit merge took
 * 1.7-1.9% more instructions (callgrind, bench_merge typed-bit-4way). */
KVS_MULTIVERSION NO_SLP static kvs_status merge_tree_bits_drop(merge *m)
{
	return merge_tree_bits_with(m, true, true);
}

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
	if ((st = emit_with(m, top, KVS_PROFILE_BYTE, seg_default_fields)) !=
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
static kvs_status merge_tree_bytes_fast(merge *m)
{
	if (m->w->opt.framing == KVS_FRAMING_TYPED)
		return m->opt->drop_tombstones
		           ? merge_tree_bytes_with(m, true, true)
		           : merge_tree_bytes_with(m, true, false);
	return merge_tree_bytes_with(m, false, false);
}

static kvs_status merge_tree(merge *m)
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
		return bytes_fast_fits(m) ? merge_tree_bytes_fast(m)
		                          : merge_tree_byte(m);
	if (!out_byte && w->default_codes && all_bit)
		return bits_fast_fits(m) ? merge_tree_bits_fast(m)
		                         : merge_tree_bit(m);
	if (out_byte)
		return merge_tree_with(m, IN_ANY, KVS_PROFILE_BYTE,
		                       seg_default_fields);
	return merge_tree_with(m, IN_ANY, KVS_PROFILE_BIT, w->fields);
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
			input_failed(&m, i, st);
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
	free(m.lcp);
	free(m.last);
	if (stats)
		*stats = m.st;
	return st;
}
